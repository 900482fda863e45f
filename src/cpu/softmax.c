/* PENDING: replaced by the family implementation. */
#include "cpu.h"

bk_status bk__cpu_softmax(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,                           int64_t n, int64_t inner) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cpu_softmax", "not yet implemented");
}
