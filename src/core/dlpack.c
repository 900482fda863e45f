/*
 * dlpack.c — zero-copy interchange with DLPack's managed tensor.
 */
#include "internal.h"

#include <dlpack/dlpack.h>
#include <inttypes.h>

/* ---- import ----------------------------------------------------------------- */

static void import_release(void *arg) {
  DLManagedTensor *t = arg;
  if (t->deleter) t->deleter(t);
}

bk_status bk_buffer_from_dlpack(bk_context *ctx, struct DLManagedTensor *tensor,
                                bk_buffer **out) {
  static const char fn[] = "bk_buffer_from_dlpack";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  if (!tensor) return bk__fail(BK_ERR_NULL, fn, "tensor is NULL");
  const DLTensor *t = &tensor->dl_tensor;
  bk_dtype dtype;
  if (t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1)
    dtype = BK_F32;
  else if (t->dtype.code == kDLFloat && t->dtype.bits == 64 && t->dtype.lanes == 1)
    dtype = BK_F64;
  else
    return bk__fail(BK_ERR_DTYPE, fn, "tensor dtype (code %u, bits %u, lanes %u) is not float32 or float64",
                    (unsigned)t->dtype.code, (unsigned)t->dtype.bits, (unsigned)t->dtype.lanes);
  bk_device dev;
  if (t->device.device_type == kDLCPU) {
    dev = (bk_device){BK_DEVICE_CPU, 0};
  } else if (t->device.device_type == kDLCUDA) {
    if (t->device.device_id < 0)
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "tensor device_id = %" PRId32 " is negative",
                      (int32_t)t->device.device_id);
    dev = (bk_device){BK_DEVICE_CUDA, t->device.device_id};
    if (!bk__backend_for(BK_DEVICE_CUDA))
      return bk__fail(BK_ERR_UNSUPPORTED, fn, "tensor is on a CUDA device but this build has no CUDA backend");
  } else {
    return bk__fail(BK_ERR_UNSUPPORTED, fn, "tensor device type %d is not kDLCPU or kDLCUDA",
                    (int)t->device.device_type);
  }
  if (ctx && !bk__device_equal(ctx->device, dev))
    return bk__fail(BK_ERR_DEVICE_MISMATCH, fn, "tensor is on device (%d, %" PRId32 ") but ctx is for (%d, %" PRId32 ")",
                    (int)dev.kind, dev.index, (int)ctx->device.kind, ctx->device.index);
  if (t->ndim < 0 || t->ndim > BK_MAX_RANK)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "tensor ndim = %d outside [0, %d]", t->ndim, BK_MAX_RANK);
  if (t->ndim > 0 && !t->shape) return bk__fail(BK_ERR_NULL, fn, "tensor shape is NULL");
  int64_t length = 0;
  st = bk__product(fn, "tensor shape", t->shape, t->ndim, &length);
  if (st != BK_OK) return st;
  if (t->strides && length > 0) {
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
      if (t->shape[i] != 1 && t->strides[i] != expect)
        return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                        "tensor strides[%d] = %" PRId64 " but a compact row-major layout needs %" PRId64,
                        i, t->strides[i], expect);
      expect *= t->shape[i];
    }
  }
  size_t es = bk__dtype_size(dtype);
  if ((uint64_t)length > SIZE_MAX / es || (uint64_t)length > (uint64_t)INT64_MAX / es)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "tensor of %" PRId64 " elements overflows the byte size", length);
  if (length > 0 && !t->data) return bk__fail(BK_ERR_NULL, fn, "tensor data is NULL");
  /* The elements occupy [data + byte_offset, data + byte_offset + bytes):
   * that range must not wrap around the address space. */
  const uint64_t bytes = (uint64_t)length * es;
  if (length > 0 && (t->byte_offset > UINTPTR_MAX - (uintptr_t)t->data ||
                     bytes > UINTPTR_MAX - (uintptr_t)t->data - t->byte_offset))
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "tensor byte_offset = %" PRIu64 " puts its %" PRIu64 " bytes past the end of the address space",
                    (uint64_t)t->byte_offset, bytes);
  if (length == 0) {
    /* Zero-length buffers hold no memory: the producer's is returned now. */
    st = bk__buffer_foreign(fn, dtype, 0, dev, NULL, NULL, NULL, out);
    if (st == BK_OK) import_release(tensor);
    return st;
  }
  return bk__buffer_foreign(fn, dtype, length, dev, (char *)t->data + t->byte_offset,
                            import_release, tensor, out);
}

/* ---- export ------------------------------------------------------------------- */

typedef struct export_state {
  DLManagedTensor managed;
  int64_t shape[1];
} export_state;

static void export_delete(DLManagedTensor *self) {
  export_state *s = (export_state *)self;
  bk_buffer_release(self->manager_ctx);
  bk__host_free(s);
}

bk_status bk_buffer_to_dlpack(const bk_buffer *buf, struct DLManagedTensor **out) {
  static const char fn[] = "bk_buffer_to_dlpack";
  if (!out) return bk__fail(BK_ERR_NULL, fn, "out is NULL");
  *out = NULL;
  if (!buf) return bk__fail(BK_ERR_NULL, fn, "buf is NULL");
  export_state *s = bk__host_zalloc(fn, "memory for the DLPack tensor", 1, sizeof *s);
  if (!s) return BK_ERR_OUT_OF_MEMORY;
  s->shape[0] = buf->length;
  DLTensor *t = &s->managed.dl_tensor;
  t->data = buf->data;
  t->device.device_type = buf->device.kind == BK_DEVICE_CUDA ? kDLCUDA : kDLCPU;
  t->device.device_id = buf->device.index;
  t->ndim = 1;
  t->dtype.code = kDLFloat;
  t->dtype.bits = (uint8_t)(8 * bk__dtype_size(buf->dtype));
  t->dtype.lanes = 1;
  t->shape = s->shape;
  t->strides = NULL;
  t->byte_offset = 0;
  s->managed.manager_ctx = bk_buffer_retain((bk_buffer *)buf);
  s->managed.deleter = export_delete;
  *out = &s->managed;
  return BK_OK;
}
