/* PENDING: replaced by the family implementation. */
#include "cuda_internal.h"

extern "C" bk_status bk__cuda_conv(bk_context *ctx, bk_dtype dt, const void *x, const void *w, const void *bias, void *y, const bk_conv_geom *g) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cuda_conv", "not yet implemented");
}
