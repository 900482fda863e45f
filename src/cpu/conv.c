/* PENDING: replaced by the family implementation. */
#include "cpu.h"

bk_status bk__cpu_conv(bk_context *ctx, bk_dtype dt, const void *x, const void *w,                        const void *bias, void *y, const bk_conv_geom *g) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cpu_conv", "not yet implemented");
}
