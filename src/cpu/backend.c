/*
 * backend.c — the CPU backend's context and memory members and its table.
 * CPU memory is plain host memory; every operation completes before it
 * returns, so synchronization is a no-op. The context holds the machine's
 * last-level cache size (kernels stream outputs larger than it) and a small
 * pool of large blocks for reuse.
 */
#define _GNU_SOURCE /* madvise, malloc_usable_size, the cache sizes of sysconf */
#include "cpu.h"

#include <stddef.h>

#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- the context's state ---------------------------------------------------- */

/* Host blocks at least this large are "large": aligned to and advised for
 * 2 MiB pages, first touched in parallel, and kept for reuse by the context
 * when freed, so that a kernel's output is warm memory instead of a page
 * fault per 4 KiB on every call. */
#define CPU_LARGE ((size_t)4 << 20)
#define CPU_HUGE_PAGE ((size_t)2 << 20)
#define CPU_POOL_SLOTS 8

typedef struct cpu_block {
  void *p;
  size_t bytes; /* usable size */
} cpu_block;

/* Entries of the context's object cache (bk__cpu_cache_get/put). */
#define CPU_CACHE_SLOTS 32

typedef struct cpu_cached {
  int kind;
  int64_t key;
  void *obj;
  void (*free_fn)(void *);
} cpu_cached;

typedef struct cpu_ctx {
  size_t llc_bytes;   /* last-level cache: outputs above it stream */
  size_t l2_bytes;    /* a core's own cache: what one thread's working set should fit */
  size_t pool_max;    /* bytes the pool may keep */
  pthread_mutex_t lock; /* the pool: buffers are released from any thread */
  size_t pool_bytes;
  int pool_n;
  cpu_block pool[CPU_POOL_SLOTS];
  int cache_n; /* the object cache, under the same lock */
  cpu_cached cache[CPU_CACHE_SLOTS];
} cpu_ctx;

static size_t sysconf_bytes(int name) {
  long v = sysconf(name);
  return v > 0 ? (size_t)v : 0;
}

static bk_status cpu_context_init(bk_context *ctx, const char *fn, int index) {
  (void)index;
  cpu_ctx *c = bk__host_zalloc(fn, "memory for the CPU context state", 1, sizeof *c);
  if (!c) return BK_ERR_OUT_OF_MEMORY;
  c->llc_bytes = sysconf_bytes(_SC_LEVEL3_CACHE_SIZE);
  if (!c->llc_bytes) c->llc_bytes = sysconf_bytes(_SC_LEVEL2_CACHE_SIZE);
  if (!c->llc_bytes) c->llc_bytes = (size_t)8 << 20;
  c->l2_bytes = sysconf_bytes(_SC_LEVEL2_CACHE_SIZE);
  if (!c->l2_bytes || c->l2_bytes > c->llc_bytes) c->l2_bytes = (size_t)256 << 10;
  /* An eighth of the physical memory, at most 4 GiB. */
  size_t phys = sysconf_bytes(_SC_PHYS_PAGES) * sysconf_bytes(_SC_PAGESIZE);
  c->pool_max = phys / 8 < ((size_t)4 << 30) ? phys / 8 : ((size_t)4 << 30);
  pthread_mutex_init(&c->lock, NULL);
  bk__ctx_set_impl(ctx, c);
  return BK_OK;
}

static void cpu_context_fini(bk_context *ctx) {
  cpu_ctx *c = bk__ctx_impl(ctx);
  if (!c) return;
  for (int i = 0; i < c->pool_n; i++) free(c->pool[i].p);
  for (int i = 0; i < c->cache_n; i++) c->cache[i].free_fn(c->cache[i].obj);
  pthread_mutex_destroy(&c->lock);
  bk__host_free(c);
  bk__ctx_set_impl(ctx, NULL);
}

int bk__cpu_streams(const bk_context *ctx, size_t bytes) {
  const cpu_ctx *c = bk__ctx_impl(ctx);
  return c && bytes > c->llc_bytes;
}

size_t bk__cpu_l2_bytes(const bk_context *ctx) {
  const cpu_ctx *c = bk__ctx_impl(ctx);
  return c ? c->l2_bytes : (size_t)256 << 10;
}

void *bk__cpu_cache_get(bk_context *ctx, int kind, int64_t key) {
  cpu_ctx *c = bk__ctx_impl(ctx);
  void *obj = NULL;
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < c->cache_n && !obj; i++)
    if (c->cache[i].kind == kind && c->cache[i].key == key) obj = c->cache[i].obj;
  pthread_mutex_unlock(&c->lock);
  return obj;
}

int bk__cpu_cache_put(bk_context *ctx, int kind, int64_t key, void *obj, void (*free_fn)(void *)) {
  cpu_ctx *c = bk__ctx_impl(ctx);
  int kept = 0;
  pthread_mutex_lock(&c->lock);
  int present = 0;
  for (int i = 0; i < c->cache_n; i++) present |= c->cache[i].kind == kind && c->cache[i].key == key;
  if (!present && c->cache_n < CPU_CACHE_SLOTS) {
    c->cache[c->cache_n++] = (cpu_cached){kind, key, obj, free_fn};
    kept = 1;
  }
  pthread_mutex_unlock(&c->lock);
  return kept;
}

/* The test hooks' common part: sets the size_t field at `offset` of a CPU
 * context's state, returning its old value (0, nothing changed, for a
 * context that is not a CPU one). */
static size_t cpu_hook_set(bk_context *ctx, size_t offset, size_t bytes) {
  if (!ctx || bk_context_device(ctx).kind != BK_DEVICE_CPU) return 0;
  size_t *field = (size_t *)(void *)((char *)bk__ctx_impl(ctx) + offset);
  const size_t old = *field;
  *field = bytes;
  return old;
}

size_t bk__cpu_set_stream_bytes(bk_context *ctx, size_t bytes) {
  return cpu_hook_set(ctx, offsetof(cpu_ctx, llc_bytes), bytes);
}

size_t bk__cpu_set_l2_bytes(bk_context *ctx, size_t bytes) {
  return cpu_hook_set(ctx, offsetof(cpu_ctx, l2_bytes), bytes);
}

static bk_status cpu_context_set_stream(bk_context *ctx, void *stream) {
  (void)ctx;
  (void)stream;
  return bk__fail(BK_ERR_UNSUPPORTED, "bk_context_set_stream", "the CPU backend has no streams");
}

static bk_status cpu_context_synchronize(bk_context *ctx) {
  (void)ctx;
  return BK_OK;
}

/* ---- memory ---------------------------------------------------------------------- */

/* Writes one byte of every page of [p, p + bytes) from the threads that
 * will write the memory, in the same static split of the range, so the
 * page faults (and on a multi-node machine the pages' placement) are
 * shared out as the kernels' blocks are. */
static void first_touch(char *p, size_t bytes) {
  const int64_t pages = (int64_t)((bytes + 4095) / 4096);
#pragma omp parallel if (bytes >= CPU_LARGE)
  {
    int64_t u0, u1;
    bk_cpu_block(pages, &u0, &u1);
    for (int64_t i = u0; i < u1; i++) p[i * 4096] = 0;
  }
}

/* A pooled block of at least `bytes` and at most a quarter more, or NULL. */
static void *pool_take(cpu_ctx *c, size_t bytes) {
  void *p = NULL;
  pthread_mutex_lock(&c->lock);
  int best = -1;
  for (int i = 0; i < c->pool_n; i++) {
    size_t b = c->pool[i].bytes;
    if (b >= bytes && b - bytes <= bytes / 4 && (best < 0 || b < c->pool[best].bytes)) best = i;
  }
  if (best >= 0) {
    p = c->pool[best].p;
    c->pool_bytes -= c->pool[best].bytes;
    c->pool[best] = c->pool[--c->pool_n];
  }
  pthread_mutex_unlock(&c->lock);
  return p;
}

/* Keeps a freed large block when the pool has room; false if it has none. */
static bool pool_keep(cpu_ctx *c, void *p, size_t bytes) {
  bool kept = false;
  pthread_mutex_lock(&c->lock);
  if (c->pool_n < CPU_POOL_SLOTS && c->pool_bytes + bytes <= c->pool_max) {
    c->pool[c->pool_n++] = (cpu_block){p, bytes};
    c->pool_bytes += bytes;
    kept = true;
  }
  pthread_mutex_unlock(&c->lock);
  return kept;
}

/* 64-byte alignment keeps vector loads of every row start aligned when the
 * row length allows it. Large blocks come from the context's pool, or are
 * made 2 MiB aligned, advised for huge pages and first touched in parallel.
 * The failure hook is asked on every call, pooled or not. */
static bk_status cpu_mem_alloc(bk_context *ctx, const char *fn, size_t bytes, void **ptr) {
  cpu_ctx *c = bk__ctx_impl(ctx);
  const bool large = bytes >= CPU_LARGE;
  const size_t align = large ? CPU_HUGE_PAGE : 64;
  size_t rounded = (bytes + align - 1) & ~(align - 1);
  if (rounded < bytes)
    return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of host memory: the size overflows",
                    bytes);
  if (bk__inject_should_fail())
    return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of host memory", bytes);
  void *p = large && c ? pool_take(c, rounded) : NULL;
  if (!p) {
    p = aligned_alloc(align, rounded);
    if (!p) return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of host memory", bytes);
    if (large) {
#ifdef MADV_HUGEPAGE
      (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only: failure changes nothing */
#endif
      first_touch(p, rounded);
    }
  }
  *ptr = p;
  return BK_OK;
}

static void cpu_mem_free(bk_context *ctx, void *ptr) {
  cpu_ctx *c = bk__ctx_impl(ctx);
  size_t usable = ptr ? malloc_usable_size(ptr) : 0;
  if (c && usable >= CPU_LARGE && pool_keep(c, ptr, usable)) return;
  free(ptr);
}

/* Large copies and fills are split over the threads, in the kernels' blocks. */
static bk_status cpu_mem_copy(bk_context *ctx, const char *fn, void *dst, const void *src,
                              size_t bytes) {
  (void)ctx;
  (void)fn;
  const int64_t n = (int64_t)bytes;
#pragma omp parallel if (bytes >= CPU_LARGE)
  {
    int64_t u0, u1;
    bk_cpu_block(n, &u0, &u1);
    if (u1 > u0) memcpy((char *)dst + u0, (const char *)src + u0, (size_t)(u1 - u0));
  }
  return BK_OK;
}

static bk_status cpu_mem_zero(bk_context *ctx, const char *fn, void *dst, size_t bytes) {
  (void)ctx;
  (void)fn;
  const int64_t n = (int64_t)bytes;
#pragma omp parallel if (bytes >= CPU_LARGE)
  {
    int64_t u0, u1;
    bk_cpu_block(n, &u0, &u1);
    if (u1 > u0) memset((char *)dst + u0, 0, (size_t)(u1 - u0));
  }
  return BK_OK;
}

const bk_backend bk__cpu_backend = {
    .name = "cpu",
    .context_init = cpu_context_init,
    .context_fini = cpu_context_fini,
    .context_set_stream = cpu_context_set_stream,
    .context_synchronize = cpu_context_synchronize,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .mem_upload = cpu_mem_copy,
    .mem_download = cpu_mem_copy,
    .mem_copy = cpu_mem_copy,
    .mem_zero = cpu_mem_zero,
    .softmax = bk__cpu_softmax,
    .xent_weighted_mean = bk__cpu_xent_weighted_mean,
    .xent_teacher = bk__cpu_xent_teacher,
    .conv = bk__cpu_conv,
    .rows_sum = bk__cpu_rows_sum,
    .rows_max = bk__cpu_rows_max,
    .rows_first_max_mask = bk__cpu_rows_first_max_mask,
    .rows_topk_mask = bk__cpu_rows_topk_mask,
    .rows_masked_softmax = bk__cpu_rows_masked_softmax,
    .broadcast_col = bk__cpu_broadcast_col,
    .broadcast_to = bk__cpu_broadcast_to,
    .broadcast_to_adjoint = bk__cpu_broadcast_to_adjoint,
    .swap_adjacent = bk__cpu_swap_adjacent,
    .sum_axis = bk__cpu_sum_axis,
    .layernorm_forward = bk__cpu_layernorm_forward,
    .layernorm_backward = bk__cpu_layernorm_backward,
    .bmm = bk__cpu_bmm,
    .bmm_scaled = bk__cpu_bmm_scaled,
    .rfft = bk__cpu_rfft,
    .irfft = bk__cpu_irfft,
    .scan_diag = bk__cpu_scan_diag,
    .scan_diag_backward = bk__cpu_scan_diag_backward,
    .rows_gather = bk__cpu_rows_gather,
    .rows_scatter_add = bk__cpu_rows_scatter_add,
};
