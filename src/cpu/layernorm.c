/*
 * layernorm.c — CPU layer normalization forward and backward.
 *
 * Row statistics use two passes in double (mean, then the mean squared
 * deviation), which is what the contract's accuracy clause asks for. The
 * parameter gradients are column sums over rows; each column is folded in
 * row order whatever the thread count, so the result is deterministic.
 */
#include "cpu.h"

#include <math.h>

/* Columns per block of the parameter-gradient sums: each thread owns whole
 * blocks, so it walks every row once over a contiguous slice. */
#define LN_COL_BLOCK 256

bk_status bk__cpu_layernorm_forward(bk_context *ctx, bk_dtype dt, const void *x,
                                    const void *gamma, const void *beta, void *out,
                                    void *normalized, void *inv_std, int64_t rows, int64_t cols,
                                    double eps) {
  (void)ctx;
#pragma omp parallel for schedule(static) if (rows * cols >= BK_CPU_PARALLEL_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t base = r * cols;
    double sum = 0.0;
    for (int64_t j = 0; j < cols; j++) sum += bk_ld(dt, x, base + j);
    const double mu = sum / (double)cols;
    double sq = 0.0;
    for (int64_t j = 0; j < cols; j++) {
      const double d = bk_ld(dt, x, base + j) - mu;
      sq += d * d;
    }
    const double var = sq / (double)cols;
    /* var + eps == 0 (a constant row with eps 0) gives +inf here and NaN
     * normalized values: the IEEE result of 0 * inf. */
    const double is = 1.0 / sqrt(var + eps);
    bk_st(dt, inv_std, r, is);
    for (int64_t j = 0; j < cols; j++) {
      const double nv = (bk_ld(dt, x, base + j) - mu) * is;
      bk_st(dt, normalized, base + j, nv);
      bk_st(dt, out, base + j, nv * bk_ld(dt, gamma, j) + bk_ld(dt, beta, j));
    }
  }
  return BK_OK;
}

bk_status bk__cpu_layernorm_backward(bk_context *ctx, bk_dtype dt, const void *dout,
                                     const void *normalized, const void *inv_std,
                                     const void *gamma, void *dx, void *dgamma, void *dbeta,
                                     int64_t rows, int64_t cols) {
  (void)ctx;
  const int par = rows * cols >= BK_CPU_PARALLEL_MIN;
  (void)par; /* read only by the OpenMP pragmas */

  /* dx: each row needs only its own two sums. */
#pragma omp parallel for schedule(static) if (par)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t base = r * cols;
    double s1 = 0.0, s2 = 0.0;
    for (int64_t j = 0; j < cols; j++) {
      const double g = bk_ld(dt, dout, base + j) * bk_ld(dt, gamma, j);
      s1 += g;
      s2 += g * bk_ld(dt, normalized, base + j);
    }
    const double scale = bk_ld(dt, inv_std, r) / (double)cols;
    for (int64_t j = 0; j < cols; j++) {
      const double g = bk_ld(dt, dout, base + j) * bk_ld(dt, gamma, j);
      const double nv = bk_ld(dt, normalized, base + j);
      bk_st(dt, dx, base + j, scale * ((double)cols * g - s1 - nv * s2));
    }
  }

  /* dgamma, dbeta: column blocks in parallel, rows in order within each. */
  const int64_t blocks = (cols + LN_COL_BLOCK - 1) / LN_COL_BLOCK;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t b = 0; b < blocks; b++) {
    const int64_t j0 = b * LN_COL_BLOCK;
    const int64_t w = cols - j0 < LN_COL_BLOCK ? cols - j0 : LN_COL_BLOCK;
    double sg[LN_COL_BLOCK], sb[LN_COL_BLOCK];
    for (int64_t j = 0; j < w; j++) sg[j] = sb[j] = 0.0;
    for (int64_t r = 0; r < rows; r++) {
      const int64_t base = r * cols + j0;
      for (int64_t j = 0; j < w; j++) {
        const double d = bk_ld(dt, dout, base + j);
        sg[j] += d * bk_ld(dt, normalized, base + j);
        sb[j] += d;
      }
    }
    for (int64_t j = 0; j < w; j++) {
      bk_st(dt, dgamma, j0 + j, sg[j]);
      bk_st(dt, dbeta, j0 + j, sb[j]);
    }
  }
  return BK_OK;
}
