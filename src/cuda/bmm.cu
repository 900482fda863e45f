/* PENDING: replaced by the family implementation. */
#include "cuda_internal.h"

extern "C" bk_status bk__cuda_bmm(bk_context *ctx, bk_dtype dt, const void *A, const void *B, void *C, int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a, int trans_b) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_bmm", "not yet implemented");
}
extern "C" bk_status bk__cuda_bmm_scaled(bk_context *ctx, bk_dtype dt, const void *A, const void *B, void *C, int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a, int trans_b, double scale, int *range_loss) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_bmm_scaled", "not yet implemented");
}
