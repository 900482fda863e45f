/* PENDING: replaced by the family implementation. */
#include "cuda_internal.h"

extern "C" bk_status bk__cuda_rows_gather(bk_context *ctx, bk_dtype dt, const void *mat, void *y, int64_t rows, int64_t cols, const uint64_t *idx, int64_t k) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_rows_gather", "not yet implemented");
}
extern "C" bk_status bk__cuda_rows_scatter_add(bk_context *ctx, bk_dtype dt, const void *mat, const void *values, void *y, int64_t rows, int64_t cols, const uint64_t *idx, int64_t k) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_rows_scatter_add", "not yet implemented");
}
