/* PENDING: replaced by the family implementation. */
#include "cuda_internal.h"

extern "C" bk_status bk__cuda_xent_weighted_mean(bk_context *ctx, bk_dtype dt, const void *logits, const void *w, void *y, int64_t rows, int64_t cols) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_xent_weighted_mean", "not yet implemented");
}
extern "C" bk_status bk__cuda_xent_teacher(bk_context *ctx, bk_dtype dt, const void *S, const void *T, void *y, int64_t rows, int64_t cols, int gradient) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_xent_teacher", "not yet implemented");
}
