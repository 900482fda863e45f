/*
 * test_reliability.c — the guarantees that hold across all primitives:
 *  - allocation-failure walk: for every primitive (and the buffer, context
 *    and DLPack calls that allocate), the k-th allocation (host or device)
 *    fails for k = 1, 2, ... until the call succeeds; each failing call
 *    returns BK_ERR_OUT_OF_MEMORY with a message that starts with the public
 *    function's name, leaves every out-parameter NULL and leaks no buffer
 *    (the live-buffer counter returns to its start); on the CPU the
 *    successful call makes exactly as many allocations as the walk failed,
 *    so every allocation of every call (the second and third output of a
 *    multi-output primitive included) was failed once;
 *  - allocation-site coverage: the sites the walk failed against the sites
 *    compiled into the library, with the ones not reached listed;
 *  - a real allocation failure (an output of 2^40 elements) names the
 *    public function;
 *  - thread stress: per round, 8 threads run every primitive on shared
 *    read-only inputs, each on a context that is gone before the thread
 *    ends (one of its own, created and destroyed in the round, or the
 *    thread's default context, released at thread exit); 8 other threads
 *    then check those results bitwise against the single-threaded ones and
 *    release them, so every buffer is released on a thread other than the
 *    one that made it, after its context's handle went away;
 *  - determinism of every primitive (two runs, bitwise equal).
 */
#include "cases.h"
#include "core/internal.h"
#include "cpu/cpu.h"

#include <dlpack/dlpack.h>
#include <pthread.h>

#define STRESS_THREADS 8

/* The sanitizers' allocators abort on a request beyond their limit by
 * default; the library promises BK_ERR_OUT_OF_MEMORY instead, which the
 * 2^40-element case checks, so they are asked to return NULL like malloc. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }

/* 20 rounds; 2 under BK_TEST_SMALL (the GPU sanitizer runs, where every
 * launch is instrumented). */
static int stress_rounds(void) { return getenv("BK_TEST_SMALL") ? 2 : 20; }

/* ---- the calls outside the primitive table that allocate ---------------------- */

static bk_status a_zeros(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_buffer_zeros(c, bk_buffer_dtype(i->in[0]), 24, &o[0]);
}
static bk_status a_from_host(bk_context *c, const case_inputs *i, bk_buffer **o) {
  static const double v[3] = {1, 2, 3};
  static const float f[3] = {1, 2, 3};
  bk_dtype dt = bk_buffer_dtype(i->in[0]);
  return bk_buffer_from_host(c, dt, dt == BK_F32 ? (const void *)f : (const void *)v, 3, &o[0]);
}
static bk_status a_copy(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_buffer_copy(c, i->in[0], &o[0]);
}
/* A context is no buffer: a failed creation that leaves *out set is
 * reported as BK_ERR_INTERNAL, which the walk rejects. */
static bk_status a_context(bk_context *c, const case_inputs *i, bk_buffer **o) {
  (void)i;
  (void)o;
  bk_context *made = (bk_context *)&made;
  bk_status st = bk_context_create(bk_context_device(c), &made);
  if (st != BK_OK) return made ? BK_ERR_INTERNAL : st;
  bk_context_destroy(made);
  return BK_OK;
}
static bk_status a_to_dlpack(bk_context *c, const case_inputs *i, bk_buffer **o) {
  (void)c;
  (void)o;
  DLManagedTensor *t = (DLManagedTensor *)&t;
  bk_status st = bk_buffer_to_dlpack(i->in[0], &t);
  if (st != BK_OK) return t ? BK_ERR_INTERNAL : st;
  t->deleter(t);
  return BK_OK;
}
/* An import wraps a tensor over the input's memory that nothing owns: its
 * deleter has nothing to free. Static, because the buffer the import makes
 * (and, through it, the tensor) outlives the call; the walk is one thread. */
static void no_deleter(DLManagedTensor *t) { (void)t; }
static bk_status a_from_dlpack(bk_context *c, const case_inputs *i, bk_buffer **o) {
  static DLManagedTensor t;
  static int64_t shape[1];
  const bk_buffer *x = i->in[0];
  shape[0] = bk_buffer_length(x);
  memset(&t, 0, sizeof t);
  t.dl_tensor.data = bk_buffer_data(x);
  t.dl_tensor.device.device_type = bk_buffer_device(x).kind == BK_DEVICE_CUDA ? kDLCUDA : kDLCPU;
  t.dl_tensor.device.device_id = bk_buffer_device(x).index;
  t.dl_tensor.ndim = 1;
  t.dl_tensor.dtype.code = kDLFloat;
  t.dl_tensor.dtype.bits = bk_buffer_dtype(x) == BK_F32 ? 32 : 64;
  t.dl_tensor.dtype.lanes = 1;
  t.dl_tensor.shape = shape;
  t.deleter = no_deleter;
  return bk_buffer_from_dlpack(c, &t, &o[0]);
}

static const prim_case api_cases[] = {
    {"buffer_zeros", "bk_buffer_zeros", {6}, a_zeros},
    {"buffer_from_host", "bk_buffer_from_host", {6}, a_from_host},
    {"buffer_copy", "bk_buffer_copy", {24}, a_copy},
    {"context_create", "bk_context_create", {6}, a_context},
    {"buffer_to_dlpack", "bk_buffer_to_dlpack", {6}, a_to_dlpack},
    {"buffer_from_dlpack", "bk_buffer_from_dlpack", {6}, a_from_dlpack},
};
#define API_CASES ((int)(sizeof api_cases / sizeof api_cases[0]))

/* ---- allocation-failure walk ---------------------------------------------------- */

/* bk_last_error() starts with "fn: ". */
static int names_function(const char *fn) {
  size_t n = strlen(fn);
  return strncmp(bk_last_error(), fn, n) == 0 && bk_last_error()[n] == ':';
}

/* Walks one case; returns the number of injected failures. */
static int64_t walk_case(const prim_case *pc, bk_dtype dt, uint64_t seed) {
  case_inputs ci;
  case_prepare(tl_ctx, dt, pc, &ci, seed);
  int64_t live0 = bk__live_buffers(), points = 0;
  int done = 0;
  for (int64_t k = 1; k < 1000 && !done; k++) {
    bk_buffer *o[CASE_MAX_OUT] = {NULL, NULL, NULL, NULL};
    bk__inject_arm(k);
    bk_status st = pc->run(tl_ctx, &ci, o);
    int64_t attempts = bk__inject_count();
    bk__inject_arm(0);
    if (st == BK_OK) {
      /* On the CPU a call allocates the same way every time; the CUDA
       * backend keeps caches and staging that earlier calls may have grown. */
      if (tl_dev.kind == BK_DEVICE_CPU)
        TL_CHECK(attempts == k - 1,
                 "%s (%s): succeeded with %" PRId64 " allocations after %" PRId64 " were failed",
                 pc->name, tl_dtname(dt), attempts, k - 1);
      else
        TL_CHECK(attempts < k, "%s: succeeded although allocation %" PRId64 " was to fail",
                 pc->name, k);
      case_release_outs(o);
      done = 1;
      break;
    }
    points++;
    if (st != BK_ERR_OUT_OF_MEMORY) {
      TL_FAIL("%s (%s): allocation %" PRId64 " failed but the call returned %s: %s", pc->name,
              tl_dtname(dt), k, bk_status_string(st), bk_last_error());
      case_release_outs(o);
      break;
    }
    TL_CHECK(names_function(pc->fn), "%s (%s): allocation %" PRId64 " failed with \"%s\", not naming %s",
             pc->name, tl_dtname(dt), k, bk_last_error(), pc->fn);
    int cleared = 1;
    for (int j = 0; j < CASE_MAX_OUT; j++) cleared &= o[j] == NULL;
    TL_CHECK(cleared, "%s: out-parameters not NULL after failure at %" PRId64, pc->name, k);
    case_release_outs(o);
    TL_CHECK(bk__live_buffers() == live0, "%s: %" PRId64 " buffers leaked at allocation %" PRId64,
             pc->name, bk__live_buffers() - live0, k);
  }
  TL_CHECK(done, "%s: never succeeded", pc->name);
  case_release(&ci);
  return points;
}

/* Sites a walk on the CPU cannot reach, each for a reason of the build or
 * the machine rather than of the walk: the blocked matrix loop's tile
 * scratch (with OpenBLAS only rows longer than BLAS's integers reach it)
 * and the host staging of a copy between two GPUs. A site beyond these
 * that the walk misses is a regression. */
#define CPU_UNREACHED_MAX 2

/* The part of a compiler-seen path from "src/" on. */
static const char *site_path(const char *file) {
  const char *s = strstr(file, "src/");
  return s ? s : file;
}

static void site_coverage(void) {
  /* Sites of the other backend are not this walk's to reach, nor on the CPU
   * the communicators' (src/ops/comm.c: they join CUDA contexts only). */
  const char *other = tl_dev.kind == BK_DEVICE_CPU ? "src/cuda/" : "src/cpu/";
  const char *cuda_only = tl_dev.kind == BK_DEVICE_CPU ? "src/ops/comm.c" : NULL;
  int64_t existing = 0, failed = 0;
  const char *file = NULL;
  int line = 0;
  bool hit = false;
  for (int64_t i = 0; bk__inject_site(i, &file, &line, &hit); i++) {
    if (strstr(file, other) || (cuda_only && strstr(file, cuda_only))) continue;
    existing++;
    failed += hit;
    if (!hit) printf("  allocation site not reached: %s:%d\n", site_path(file), line);
  }
  printf("allocation sites failed by the walk: %" PRId64 " of %" PRId64 " (%s backend)\n", failed,
         existing, tl_dev.kind == BK_DEVICE_CPU ? "cpu" : "cuda");
  TL_CHECK(existing > 0 && existing <= bk__inject_site_count(), "site registry: %" PRId64 " sites",
           existing);
  if (tl_dev.kind == BK_DEVICE_CPU)
    TL_CHECK(existing - failed <= CPU_UNREACHED_MAX,
             "%" PRId64 " allocation sites not reached (at most %d expected)", existing - failed,
             CPU_UNREACHED_MAX);
}

static void alloc_failure_walk(void) {
  int64_t points = 0;
  for (int d = 0; d < TL_DTYPES; d++) {
    /* On the CPU the float64 walk has every output stream past the cache,
     * so the kernels' scratch for that path is walked too. */
    size_t stream_bytes = bk__cpu_set_stream_bytes(tl_ctx, 0);
    if (d == 0) bk__cpu_set_stream_bytes(tl_ctx, stream_bytes);
    for (int p = 0; p < PRIM_CASES; p++)
      points += walk_case(&prim_cases[p], tl_dtypes[d], 7 + (uint64_t)p);
    bk__cpu_set_stream_bytes(tl_ctx, stream_bytes);
    for (int p = 0; p < API_CASES; p++)
      points += walk_case(&api_cases[p], tl_dtypes[d], 500 + (uint64_t)p);
  }
  printf("allocation-failure walk: %" PRId64 " injected failures over %d primitive cases and %d "
         "buffer/context/DLPack cases x 2 dtypes\n",
         points, PRIM_CASES, API_CASES);
  site_coverage();
}

/* An output of 2^40 float32 zeros (4 TiB): the allocation fails for real,
 * not by injection, and the message names the public function. */
static void real_oom_names_function(void) {
  bk_buffer *x = tl_buf(BK_F32, NULL, 0), *y = (bk_buffer *)&y;
  const int64_t dims[2] = {(int64_t)1 << 40, 0};
  int64_t live0 = bk__live_buffers();
  TL_REJECT(bk_sum_axis(tl_ctx, x, dims, 2, 1, &y), BK_ERR_OUT_OF_MEMORY, "cannot allocate");
  TL_CHECK(names_function("bk_sum_axis"), "message \"%s\" does not start with bk_sum_axis",
           bk_last_error());
  TL_CHECK(y == NULL, "out-parameter not cleared");
  TL_REJECT(bk_buffer_zeros(tl_ctx, BK_F32, (int64_t)1 << 40, &y), BK_ERR_OUT_OF_MEMORY,
            "bk_buffer_zeros: cannot allocate");
  TL_CHECK(bk__live_buffers() == live0, "buffers leaked");
  bk_buffer_release(x);
}

/* ---- determinism and thread stress -------------------------------------------- */

typedef struct stress_ref {
  case_inputs ci[PRIM_CASES];
  bk_buffer *out[PRIM_CASES][CASE_MAX_OUT];
} stress_ref;

static stress_ref g_ref;
static bk_dtype g_dt;
/* Results of producer t in the current round, checked and released by
 * consumer (t + STRESS_THREADS - 1) % STRESS_THREADS. */
static bk_buffer *g_made[STRESS_THREADS][PRIM_CASES][CASE_MAX_OUT];
static int g_round;

static int outputs_equal(bk_buffer **a, bk_buffer **b) {
  for (int j = 0; j < CASE_MAX_OUT; j++) {
    if (!a[j] && !b[j]) continue;
    if (!a[j] || !b[j] || !tl_same_bits(a[j], b[j])) return 0;
  }
  return 1;
}

/* Runs every primitive once, in an order of its own, on a context that is
 * gone before the thread ends: one of its own destroyed here (even ids), or
 * the thread's default context (ctx NULL), released at thread exit. */
static void *stress_produce(void *arg) {
  intptr_t id = (intptr_t)arg, bad = 0;
  bk_context *ctx = NULL;
  if (id % 2 == 0 && bk_context_create(tl_dev, &ctx) != BK_OK) return (void *)1;
  for (int q = 0; q < PRIM_CASES; q++) {
    int p = (int)((q + id * 7 + g_round) % PRIM_CASES);
    for (int j = 0; j < CASE_MAX_OUT; j++) g_made[id][p][j] = NULL;
    if (prim_cases[p].run(ctx, &g_ref.ci[p], g_made[id][p]) != BK_OK) bad++;
  }
  if (bk_context_synchronize(ctx) != BK_OK) bad++;
  bk_context_destroy(ctx);
  return (void *)bad;
}

/* Checks another producer's results bitwise and releases them. */
static void *stress_consume(void *arg) {
  intptr_t id = (intptr_t)arg, bad = 0;
  int from = (int)((id + 1) % STRESS_THREADS);
  for (int p = 0; p < PRIM_CASES; p++) {
    if (!outputs_equal(g_made[from][p], g_ref.out[p])) bad++;
    case_release_outs(g_made[from][p]);
  }
  return (void *)bad;
}

/* Runs fn on STRESS_THREADS threads at once; the sum of their results. */
static intptr_t run_threads(void *(*fn)(void *)) {
  pthread_t th[STRESS_THREADS];
  int started[STRESS_THREADS];
  intptr_t bad = 0;
  for (intptr_t t = 0; t < STRESS_THREADS; t++) {
    started[t] = pthread_create(&th[t], NULL, fn, (void *)t) == 0;
    if (!started[t]) bad++;
  }
  for (int t = 0; t < STRESS_THREADS; t++) {
    void *r = NULL;
    if (started[t] && pthread_join(th[t], &r) == 0) bad += (intptr_t)r;
  }
  return bad;
}

static void determinism_and_threads(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    g_dt = tl_dtypes[d];
    int64_t live0 = bk__live_buffers();
    for (int p = 0; p < PRIM_CASES; p++) {
      case_prepare(tl_ctx, g_dt, &prim_cases[p], &g_ref.ci[p], 100 + (uint64_t)p);
      for (int j = 0; j < CASE_MAX_OUT; j++) g_ref.out[p][j] = NULL;
      if (TL_OK(prim_cases[p].run(tl_ctx, &g_ref.ci[p], g_ref.out[p])) != BK_OK) continue;
      bk_buffer *again[CASE_MAX_OUT] = {NULL, NULL, NULL, NULL};
      if (TL_OK(prim_cases[p].run(tl_ctx, &g_ref.ci[p], again)) == BK_OK)
        TL_CHECK(outputs_equal(again, g_ref.out[p]), "%s (%s) is not deterministic",
                 prim_cases[p].name, tl_dtname(g_dt));
      case_release_outs(again);
    }
    TL_OK(bk_context_synchronize(tl_ctx));
    intptr_t bad_made = 0, bad_checked = 0;
    for (g_round = 0; g_round < stress_rounds(); g_round++) {
      bad_made += run_threads(stress_produce);
      bad_checked += run_threads(stress_consume);
    }
    TL_CHECK(bad_made == 0, "%" PRIdPTR " thread-stress calls failed (%s)", bad_made,
             tl_dtname(g_dt));
    TL_CHECK(bad_checked == 0,
             "%" PRIdPTR " thread-stress results differed from the single-threaded run (%s)",
             bad_checked, tl_dtname(g_dt));
    for (int p = 0; p < PRIM_CASES; p++) {
      case_release_outs(g_ref.out[p]);
      case_release(&g_ref.ci[p]);
    }
    TL_CHECK(bk__live_buffers() == live0, "buffers leaked: %" PRId64, bk__live_buffers() - live0);
  }
  printf("thread stress: %d rounds x (%d producing + %d checking threads) x %d primitive cases x "
         "2 dtypes\n",
         stress_rounds(), STRESS_THREADS, STRESS_THREADS, PRIM_CASES);
}

int main(void) {
  tl_init();
  TL_RUN(alloc_failure_walk);
  TL_RUN(real_oom_names_function);
  TL_RUN(determinism_and_threads);
  return tl_finish();
}
