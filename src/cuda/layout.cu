/* PENDING: replaced by the family implementation. */
#include "cuda_internal.h"

extern "C" bk_status bk__cuda_broadcast_col(bk_context *ctx, bk_dtype dt, const void *vec, void *y, int64_t rows, int64_t cols) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_broadcast_col", "not yet implemented");
}
extern "C" bk_status bk__cuda_broadcast_to(bk_context *ctx, bk_dtype dt, const void *x, void *y, const bk_bcast_geom *g) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_broadcast_to", "not yet implemented");
}
extern "C" bk_status bk__cuda_broadcast_to_adjoint(bk_context *ctx, bk_dtype dt, const void *dout, void *din, const bk_bcast_geom *g) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_broadcast_to_adjoint", "not yet implemented");
}
extern "C" bk_status bk__cuda_swap_adjacent(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer, int64_t a, int64_t b, int64_t inner) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_swap_adjacent", "not yet implemented");
}
extern "C" bk_status bk__cuda_sum_axis(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer, int64_t n, int64_t inner) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_sum_axis", "not yet implemented");
}
