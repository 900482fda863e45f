/* PENDING: replaced by the family implementation. */
#include "cuda_internal.h"

extern "C" bk_status bk__cuda_rows_sum(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows, int64_t cols) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_rows_sum", "not yet implemented");
}
extern "C" bk_status bk__cuda_rows_max(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows, int64_t cols) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_rows_max", "not yet implemented");
}
extern "C" bk_status bk__cuda_rows_first_max_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows, int64_t cols) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_rows_first_max_mask", "not yet implemented");
}
extern "C" bk_status bk__cuda_rows_topk_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows, int64_t cols, int64_t k) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_rows_topk_mask", "not yet implemented");
}
extern "C" bk_status bk__cuda_rows_masked_softmax(bk_context *ctx, bk_dtype dt, const void *scores, const void *mask, void *y, int64_t rows, int64_t cols) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_rows_masked_softmax", "not yet implemented");
}
