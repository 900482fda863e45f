/*
 * buffer.c — reference-counted buffers, host transfers, cross-device copies
 * and the front-door call helpers (bind, output allocation).
 */
#include "internal.h"

#include <inttypes.h>
#include <string.h>

/* ---- construction and release ---------------------------------------------- */

bk_status bk__buffer_foreign(const char *fn, bk_dtype dtype, int64_t length, bk_device device,
                             void *data, void (*release_fn)(void *), void *release_arg,
                             bk_buffer **out) {
  bk_buffer *b = bk__host_zalloc(fn, "memory for a buffer handle", 1, sizeof *b);
  if (!b) return BK_ERR_OUT_OF_MEMORY;
  atomic_init(&b->refs, 1);
  b->dtype = dtype;
  b->length = length;
  b->device = device;
  b->data = data;
  b->foreign_free = release_fn;
  b->foreign_arg = release_arg;
  atomic_fetch_add(&bk__live_buffer_count, 1);
  *out = b;
  return BK_OK;
}

bk_status bk__buffer_wrap(const char *fn, bk_context *ctx, bk_dtype dtype, int64_t length,
                          void *data, bk_buffer **out) {
  bk_status st = bk__buffer_foreign(fn, dtype, length, ctx->device, data, NULL, NULL, out);
  if (st != BK_OK) {
    if (data) ctx->backend->mem_free(ctx, data);
    return st;
  }
  (*out)->owner = ctx;
  bk__context_retain(ctx);
  return BK_OK;
}

/* Allocates an uninitialized buffer on ctx. */
static bk_status buffer_alloc(const char *fn, bk_context *ctx, bk_dtype dtype, int64_t length,
                              bk_buffer **out) {
  size_t es = bk__dtype_size(dtype);
  if (es == 0)
    return bk__fail(BK_ERR_DTYPE, fn, "dtype %s (%d) is not supported", bk__dtype_name(dtype),
                    (int)dtype);
  if (length < 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "length = %" PRId64 " is negative", length);
  if ((uint64_t)length > SIZE_MAX / es || (uint64_t)length > (uint64_t)INT64_MAX / es)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "length = %" PRId64 " overflows the byte size",
                    length);
  void *data = NULL;
  if (length > 0) {
    bk_status st = ctx->backend->mem_alloc(ctx, fn, (size_t)length * es, &data);
    if (st != BK_OK) return st;
  }
  return bk__buffer_wrap(fn, ctx, dtype, length, data, out);
}

bk_buffer *bk_buffer_retain(bk_buffer *buf) {
  if (buf) atomic_fetch_add(&buf->refs, 1);
  return buf;
}

void bk_buffer_release(bk_buffer *buf) {
  if (!buf) return;
  if (atomic_fetch_sub(&buf->refs, 1) != 1) return;
  if (buf->foreign_free) {
    buf->foreign_free(buf->foreign_arg);
  } else if (buf->data) {
    buf->owner->backend->mem_free(buf->owner, buf->data);
  }
  if (buf->owner) bk__context_release(buf->owner);
  atomic_fetch_sub(&bk__live_buffer_count, 1);
  bk__host_free(buf);
}

bk_status bk__clear_outs(const char *fn, int n, bk_buffer **const *outs,
                         const char *const *names) {
  for (int i = 0; i < n; i++)
    if (outs[i]) *outs[i] = NULL;
  for (int i = 0; i < n; i++)
    if (!outs[i]) return bk__fail(BK_ERR_NULL, fn, "%s is NULL", names[i]);
  /* One slot cannot hold two results: the second store would lose the first
   * buffer. Rejected here, before any output exists. */
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (outs[i] == outs[j])
        return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                        "%s and %s are the same out-parameter (each result needs its own slot)",
                        names[i], names[j]);
  return BK_OK;
}

bk_status bk__clear_out(const char *fn, bk_buffer **out) {
  return bk__clear_outs(fn, 1, (bk_buffer **const[]){out}, (const char *const[]){"out"});
}

void bk__drop(bk_buffer **p) {
  if (p && *p) {
    bk_buffer_release(*p);
    *p = NULL;
  }
}

bk_dtype bk_buffer_dtype(const bk_buffer *buf) { return buf ? buf->dtype : BK_F32; }
int64_t bk_buffer_length(const bk_buffer *buf) { return buf ? buf->length : 0; }
bk_device bk_buffer_device(const bk_buffer *buf) {
  return buf ? buf->device : (bk_device){BK_DEVICE_CPU, 0};
}
void *bk_buffer_data(const bk_buffer *buf) { return buf ? buf->data : NULL; }

/* ---- public constructors ------------------------------------------------------ */

static bk_status resolve_ctx(const char *fn, bk_context **ctx) {
  if (*ctx) return BK_OK;
  return bk__default_context(fn, (bk_device){BK_DEVICE_CPU, 0}, ctx);
}

bk_status bk_buffer_zeros(bk_context *ctx, bk_dtype dtype, int64_t length, bk_buffer **out) {
  static const char fn[] = "bk_buffer_zeros";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  st = resolve_ctx(fn, &ctx);
  if (st != BK_OK) return st;
  bk_buffer *b = NULL;
  st = buffer_alloc(fn, ctx, dtype, length, &b);
  if (st != BK_OK) return st;
  if (length > 0) {
    st = ctx->backend->mem_zero(ctx, fn, b->data, (size_t)length * bk__dtype_size(dtype));
    if (st != BK_OK) {
      bk_buffer_release(b);
      return st;
    }
  }
  *out = b;
  return BK_OK;
}

bk_status bk_buffer_from_host(bk_context *ctx, bk_dtype dtype, const void *data, int64_t length,
                              bk_buffer **out) {
  static const char fn[] = "bk_buffer_from_host";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  if (length > 0 && !data)
    return bk__fail(BK_ERR_NULL, fn, "data is NULL with length = %" PRId64, length);
  st = resolve_ctx(fn, &ctx);
  if (st != BK_OK) return st;
  bk_buffer *b = NULL;
  st = buffer_alloc(fn, ctx, dtype, length, &b);
  if (st != BK_OK) return st;
  if (length > 0) {
    st = ctx->backend->mem_upload(ctx, fn, b->data, data, (size_t)length * bk__dtype_size(dtype));
    if (st != BK_OK) {
      bk_buffer_release(b);
      return st;
    }
  }
  *out = b;
  return BK_OK;
}

/* The context a read of buf is ordered on: the caller's when given, else the
 * context that made the buffer, else the thread default of its device. */
static bk_status reader_ctx(const char *fn, const bk_buffer *buf, bk_context *ctx,
                            bk_context **out) {
  if (ctx) {
    *out = ctx;
    return BK_OK;
  }
  if (buf->owner) {
    *out = buf->owner;
    return BK_OK;
  }
  return bk__default_context(fn, buf->device, out);
}

bk_status bk_buffer_to_host(bk_context *ctx, const bk_buffer *buf, void *data, int64_t length) {
  static const char fn[] = "bk_buffer_to_host";
  bk_status st = bk__check_ptr(fn, "buf", buf);
  if (st != BK_OK) return st;
  if (length != buf->length)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "length = %" PRId64 " but buf has length %" PRId64,
                    length, buf->length);
  if (length > 0 && !data) return bk__fail(BK_ERR_NULL, fn, "data is NULL with length = %" PRId64, length);
  if (ctx && !bk__device_equal(ctx->device, buf->device))
    return bk__fail(BK_ERR_DEVICE_MISMATCH, fn, "ctx is on device (%d, %" PRId32 "), buf on (%d, %" PRId32 ")",
                    (int)ctx->device.kind, ctx->device.index, (int)buf->device.kind,
                    buf->device.index);
  if (length == 0) return BK_OK;
  bk_context *rc = NULL;
  st = reader_ctx(fn, buf, ctx, &rc);
  if (st != BK_OK) return st;
  return rc->backend->mem_download(rc, fn, data, buf->data, (size_t)length * bk__dtype_size(buf->dtype));
}

bk_status bk_buffer_copy(bk_context *dst_ctx, const bk_buffer *src, bk_buffer **out) {
  static const char fn[] = "bk_buffer_copy";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  st = bk__check_ptr(fn, "src", src);
  if (st != BK_OK) return st;
  st = resolve_ctx(fn, &dst_ctx);
  if (st != BK_OK) return st;
  bk_buffer *b = NULL;
  st = buffer_alloc(fn, dst_ctx, src->dtype, src->length, &b);
  if (st != BK_OK) return st;
  size_t bytes = (size_t)src->length * bk__dtype_size(src->dtype);
  if (bytes == 0) {
    *out = b;
    return BK_OK;
  }
  const bk_backend *dbe = dst_ctx->backend;
  if (bk__device_equal(src->device, dst_ctx->device)) {
    st = dbe->mem_copy(dst_ctx, fn, b->data, src->data, bytes);
  } else if (src->device.kind == BK_DEVICE_CPU) {
    st = dbe->mem_upload(dst_ctx, fn, b->data, src->data, bytes);
  } else if (src->device.kind == dst_ctx->device.kind && dbe->mem_copy_peer) {
    /* Between two GPUs, without a host wait: the copy on dst_ctx's stream
     * waits for the work queued on the stream that made src, and that
     * stream waits for the copy, so src's memory (freed on its own stream)
     * outlives the read even when the caller releases src at once. */
    bk_context *rc = NULL;
    st = reader_ctx(fn, src, NULL, &rc);
    if (st == BK_OK) st = dbe->stream_wait(dst_ctx, rc);
    if (st == BK_OK)
      st = dbe->mem_copy_peer(dst_ctx, b->data, (int)src->device.index, src->data, bytes);
    if (st == BK_OK) st = dbe->stream_wait(rc, dst_ctx);
  } else {
    /* From a GPU: read it on its own context (ordered after the work that
     * made it), to host memory; then upload when the target is another GPU. */
    bk_context *rc = NULL;
    st = reader_ctx(fn, src, NULL, &rc);
    if (st == BK_OK) {
      if (dst_ctx->device.kind == BK_DEVICE_CPU) {
        st = rc->backend->mem_download(rc, fn, b->data, src->data, bytes);
      } else {
        void *tmp = bk__host_alloc(fn, "staging", bytes, 1);
        if (!tmp) {
          st = BK_ERR_OUT_OF_MEMORY;
        } else {
          st = rc->backend->mem_download(rc, fn, tmp, src->data, bytes);
          if (st == BK_OK) st = dbe->mem_upload(dst_ctx, fn, b->data, tmp, bytes);
          bk__host_free(tmp);
        }
      }
    }
  }
  if (st != BK_OK) {
    bk_buffer_release(b);
    return st;
  }
  *out = b;
  return BK_OK;
}

/* ---- the front-door call helpers ------------------------------------------------ */

bk_status bk__bind(bk_call *c, const char *fn, bk_context *ctx, int n,
                   const bk_buffer *const *bufs, const char *const *names) {
  c->fn = fn;
  c->ctx = NULL;
  c->be = NULL;
  const bk_buffer *first = NULL;
  const char *first_name = NULL;
  for (int i = 0; i < n; i++) {
    const bk_buffer *b = bufs[i];
    if (!b) continue;
    if (bk__dtype_size(b->dtype) == 0)
      return bk__fail(BK_ERR_DTYPE, fn, "%s has dtype %s, which this primitive does not support",
                      names[i], bk__dtype_name(b->dtype));
    if (!first) {
      first = b;
      first_name = names[i];
      continue;
    }
    if (b->dtype != first->dtype)
      return bk__fail(BK_ERR_DTYPE, fn, "%s has dtype %s but %s has dtype %s", names[i],
                      bk__dtype_name(b->dtype), first_name, bk__dtype_name(first->dtype));
  }
  if (!first) return bk__fail(BK_ERR_INTERNAL, fn, "no input buffer to bind");
  for (int i = 0; i < n; i++) {
    const bk_buffer *b = bufs[i];
    if (b && !bk__device_equal(b->device, first->device))
      return bk__fail(BK_ERR_DEVICE_MISMATCH, fn,
                      "%s is on device (%d, %" PRId32 ") but %s is on (%d, %" PRId32 ")", names[i],
                      (int)b->device.kind, b->device.index, first_name, (int)first->device.kind,
                      first->device.index);
  }
  if (ctx) {
    if (!bk__device_equal(ctx->device, first->device))
      return bk__fail(BK_ERR_DEVICE_MISMATCH, fn,
                      "ctx is for device (%d, %" PRId32 ") but %s is on (%d, %" PRId32 ")",
                      (int)ctx->device.kind, ctx->device.index, first_name,
                      (int)first->device.kind, first->device.index);
  } else {
    bk_status st = bk__default_context(fn, first->device, &ctx);
    if (st != BK_OK) return st;
  }
  c->ctx = ctx;
  c->be = ctx->backend;
  c->dtype = first->dtype;
  return BK_OK;
}

bk_status bk__new_output(bk_call *c, int64_t length, bk_buffer **out) {
  return buffer_alloc(c->fn, c->ctx, c->dtype, length, out);
}

bk_status bk__new_zeros(bk_call *c, int64_t length, bk_buffer **out) {
  bk_buffer *b = NULL;
  bk_status st = buffer_alloc(c->fn, c->ctx, c->dtype, length, &b);
  if (st != BK_OK) return st;
  if (length > 0) {
    st = c->be->mem_zero(c->ctx, c->fn, b->data, (size_t)length * bk__dtype_size(c->dtype));
    if (st != BK_OK) {
      bk_buffer_release(b);
      return st;
    }
  }
  *out = b;
  return BK_OK;
}
