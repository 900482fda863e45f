/*
 * rows.c — CPU row reductions and masks over (rows, cols) buffers.
 */
#include "cpu.h"

bk_status bk__cpu_rows_sum(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows,
                           int64_t cols) {
  (void)ctx;
#pragma omp parallel for schedule(static) if (rows * cols >= BK_CPU_PARALLEL_MIN)
  for (int64_t r = 0; r < rows; r++) {
    double s = 0.0;
    for (int64_t j = 0; j < cols; j++) s += bk_ld(dt, x, r * cols + j);
    bk_st(dt, y, r, s);
  }
  return BK_OK;
}
