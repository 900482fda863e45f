/* PENDING: replaced by the family implementation. */
#include "cpu.h"

bk_status bk__cpu_rfft(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t batch,                        int64_t n) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cpu_rfft", "not yet implemented");
}
bk_status bk__cpu_irfft(bk_context *ctx, bk_dtype dt, const void *spec, void *y, int64_t batch,                         int64_t n, int normalize) {
  return bk__fail(BK_ERR_UNSUPPORTED, "bk__cpu_irfft", "not yet implemented");
}
