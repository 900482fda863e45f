/* PENDING: replaced by the family implementation. */
#include "cuda_internal.h"

extern "C" bk_status bk__cuda_layernorm_forward(bk_context *ctx, bk_dtype dt, const void *x, const void *gamma, const void *beta, void *out, void *normalized, void *inv_std, int64_t rows, int64_t cols, double eps) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_layernorm_forward", "not yet implemented");
}
extern "C" bk_status bk__cuda_layernorm_backward(bk_context *ctx, bk_dtype dt, const void *dout, const void *normalized, const void *inv_std, const void *gamma, void *dx, void *dgamma, void *dbeta, int64_t rows, int64_t cols) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_layernorm_backward", "not yet implemented");
}
