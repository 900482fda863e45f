/* PENDING: replaced by the family implementation. */
#include "cuda_internal.h"

extern "C" bk_status bk__cuda_scan_diag(bk_context *ctx, bk_dtype dt, const void *A, const void *B, const void *X, const void *h0, void *y, int64_t seq_len, int64_t state, int var) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_scan_diag", "not yet implemented");
}
extern "C" bk_status bk__cuda_scan_diag_backward(bk_context *ctx, bk_dtype dt, const void *A, const void *B, const void *X, const void *h0, const void *out, const void *dy, void *dA, void *dB, void *dX, void *dh0, int64_t seq_len, int64_t state, int var) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_scan_diag_backward", "not yet implemented");
}
