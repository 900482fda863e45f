/*
 * context.c — contexts, their reference counts and the per-thread default
 * contexts.
 */
#include "internal.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#define BK_MAX_DEFAULT_GPUS 64

const bk_backend *bk__backend_for(bk_device_kind kind) {
  switch (kind) {
    case BK_DEVICE_CPU: return &bk__cpu_backend;
#ifdef BK_HAVE_CUDA
    case BK_DEVICE_CUDA: return &bk__cuda_backend;
#endif
    default: return NULL;
  }
}

bool bk__device_equal(bk_device a, bk_device b) { return a.kind == b.kind && a.index == b.index; }

int bk_cuda_device_count(void) {
#ifdef BK_HAVE_CUDA
  return bk__cuda_device_count();
#else
  return 0;
#endif
}

/* fn names the public function the context is made for: bk_context_create,
 * or the call that needed a thread's default context. */
static bk_status context_new(const char *fn, bk_device device, bool is_default, bk_context **out) {
  if (device.kind != BK_DEVICE_CPU && device.kind != BK_DEVICE_CUDA)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "device.kind = %d is not a known device kind",
                    (int)device.kind);
  if (device.index < 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "device.index = %" PRId32 " is negative",
                    device.index);
  if (device.kind == BK_DEVICE_CPU && device.index != 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "device.index = %" PRId32 " for the CPU (must be 0)",
                    device.index);
  const bk_backend *be = bk__backend_for(device.kind);
  if (!be)
    return bk__fail(BK_ERR_UNSUPPORTED, fn, "device cuda:%" PRId32 " requested but this build has no CUDA backend",
                    device.index);
  bk_context *ctx = bk__host_zalloc(fn, "memory for a context", 1, sizeof *ctx);
  if (!ctx) return BK_ERR_OUT_OF_MEMORY;
  atomic_init(&ctx->refs, 1);
  ctx->device = device;
  ctx->backend = be;
  ctx->is_default = is_default;
  bk_status st = be->context_init(ctx, fn, device.index);
  if (st != BK_OK) {
    bk__host_free(ctx);
    return st;
  }
  *out = ctx;
  return BK_OK;
}

bk_status bk_context_create(bk_device device, bk_context **out) {
  if (!out) return bk__fail(BK_ERR_NULL, "bk_context_create", "out is NULL");
  *out = NULL;
  return context_new("bk_context_create", device, false, out);
}

void bk__context_retain(bk_context *ctx) { atomic_fetch_add(&ctx->refs, 1); }

void bk__context_release(bk_context *ctx) {
  if (atomic_fetch_sub(&ctx->refs, 1) == 1) {
    ctx->backend->context_fini(ctx);
    bk__host_free(ctx);
  }
}

void bk_context_destroy(bk_context *ctx) {
  if (!ctx || ctx->is_default) return;
  bk__context_release(ctx);
}

bk_status bk_context_set_stream(bk_context *ctx, void *cuda_stream) {
  if (!ctx) return bk__fail(BK_ERR_NULL, "bk_context_set_stream", "ctx is NULL");
  if (ctx->device.kind != BK_DEVICE_CUDA)
    return bk__fail(BK_ERR_UNSUPPORTED, "bk_context_set_stream",
                    "ctx is a CPU context; streams exist only on CUDA contexts");
  return ctx->backend->context_set_stream(ctx, cuda_stream);
}

bk_status bk_context_reset_stream(bk_context *ctx) {
  if (!ctx) return bk__fail(BK_ERR_NULL, "bk_context_reset_stream", "ctx is NULL");
  /* A context without streams is always on its own ordering. */
  if (!ctx->backend->context_reset_stream) return BK_OK;
  return ctx->backend->context_reset_stream(ctx);
}

bk_status bk_context_synchronize(bk_context *ctx) {
  if (!ctx) return BK_OK;
  return ctx->backend->context_synchronize(ctx);
}

bk_device bk_context_device(const bk_context *ctx) {
  if (!ctx) return (bk_device){BK_DEVICE_CPU, 0};
  return ctx->device;
}

/* ---- per-thread defaults ------------------------------------------------ */

typedef struct bk_thread_defaults {
  bk_context *cpu;
  bk_context *cuda[BK_MAX_DEFAULT_GPUS];
} bk_thread_defaults;

static pthread_key_t bk_defaults_key;
static pthread_once_t bk_defaults_once = PTHREAD_ONCE_INIT;
static int bk_defaults_key_ok;

static void defaults_free(void *p) {
  bk_thread_defaults *d = p;
  if (!d) return;
  if (d->cpu) bk__context_release(d->cpu);
  for (int i = 0; i < BK_MAX_DEFAULT_GPUS; i++)
    if (d->cuda[i]) bk__context_release(d->cuda[i]);
  free(d);
}

static void defaults_key_make(void) {
  bk_defaults_key_ok = pthread_key_create(&bk_defaults_key, defaults_free) == 0;
}

/* The defaults table is bookkeeping of the thread, not a result: it is
 * allocated with plain calloc so the allocation-failure walk does not count
 * a one-time per-thread cost against the first primitive a test calls. */
bk_status bk__default_context(const char *fn, bk_device device, bk_context **out) {
  pthread_once(&bk_defaults_once, defaults_key_make);
  if (!bk_defaults_key_ok) return bk__fail(BK_ERR_INTERNAL, fn, "cannot create thread key");
  bk_thread_defaults *d = pthread_getspecific(bk_defaults_key);
  if (!d) {
    d = calloc(1, sizeof *d);
    if (!d) return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate the default contexts");
    if (pthread_setspecific(bk_defaults_key, d) != 0) {
      free(d);
      return bk__fail(BK_ERR_INTERNAL, fn, "cannot store the default contexts");
    }
  }
  bk_context **slot = NULL;
  if (device.kind == BK_DEVICE_CPU) {
    slot = &d->cpu;
  } else if (device.kind == BK_DEVICE_CUDA && device.index >= 0 &&
             device.index < BK_MAX_DEFAULT_GPUS) {
    slot = &d->cuda[device.index];
  } else {
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "no default context for device kind %d index %" PRId32,
                    (int)device.kind, device.index);
  }
  if (!*slot) {
    bk_status st = context_new(fn, device, true, slot);
    if (st != BK_OK) return st;
  }
  *out = *slot;
  return BK_OK;
}

void *bk__ctx_impl(const bk_context *ctx) { return ctx->impl; }
void bk__ctx_set_impl(bk_context *ctx, void *impl) { ctx->impl = impl; }
