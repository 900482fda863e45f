/* PENDING: replaced by the family implementation. */
#include "cuda_internal.h"

extern "C" bk_status bk__cuda_rfft(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t batch, int64_t n) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_rfft", "not yet implemented");
}
extern "C" bk_status bk__cuda_irfft(bk_context *ctx, bk_dtype dt, const void *spec, void *y, int64_t batch, int64_t n, int normalize) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_irfft", "not yet implemented");
}
