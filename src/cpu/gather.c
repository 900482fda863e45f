/*
 * gather.c — CPU row gather and scatter-add with host indices.
 *
 * Indices arrive checked (each <= UINT32_MAX); an index >= rows selects an
 * exact +0 row in the gather and is skipped by the scatter-add. The gather
 * copies rows as bytes, so every bit arrives unchanged. The scatter-add folds
 * the contributions to one element in increasing r and rounds to the dtype
 * after every addition (a sum of two floats formed in double and rounded to
 * float is the correctly rounded float sum), which is the contract's
 * ((mat[i] + v_first) + v_second) + ... evaluated in the dtype.
 */
#include "cpu.h"

#include <string.h>

bk_status bk__cpu_rows_gather(bk_context *ctx, bk_dtype dt, const void *mat, void *y,
                              int64_t rows, int64_t cols, const uint64_t *idx, int64_t k) {
  (void)ctx;
  const size_t row_bytes = (size_t)cols * bk__dtype_size(dt);
  /* mat (rows, cols), y (k, cols): each output row is written by one
   * iteration, either copied or cleared to all-zero bits (+0). */
#pragma omp parallel for schedule(static) if (k * cols >= BK_CPU_PARALLEL_MIN)
  for (int64_t r = 0; r < k; r++) {
    char *dst = (char *)y + (size_t)r * row_bytes;
    if (idx[r] < (uint64_t)rows)
      memcpy(dst, (const char *)mat + (size_t)idx[r] * row_bytes, row_bytes);
    else
      memset(dst, 0, row_bytes);
  }
  return BK_OK;
}

/* Columns per parallel work item of the scatter-add. */
#define BK_SCATTER_COLS 256

bk_status bk__cpu_rows_scatter_add(bk_context *ctx, bk_dtype dt, const void *mat,
                                   const void *values, void *y, int64_t rows, int64_t cols,
                                   const uint64_t *idx, int64_t k) {
  (void)ctx;
  /* mat, y (rows, cols); values (k, cols). */
  memcpy(y, mat, (size_t)rows * (size_t)cols * bk__dtype_size(dt));
  /* Work items own disjoint column blocks and each walks r in increasing
   * order, so every element receives its terms in the contract's order no
   * matter how the blocks are spread over threads. */
  const int64_t blocks = (cols + BK_SCATTER_COLS - 1) / BK_SCATTER_COLS;
#pragma omp parallel for schedule(static) if (blocks > 1 && k * cols >= BK_CPU_PARALLEL_MIN)
  for (int64_t b = 0; b < blocks; b++) {
    int64_t j0 = b * BK_SCATTER_COLS;
    int64_t j1 = cols - j0 < BK_SCATTER_COLS ? cols : j0 + BK_SCATTER_COLS;
    for (int64_t r = 0; r < k; r++) {
      if (idx[r] >= (uint64_t)rows) continue;
      int64_t dst = (int64_t)idx[r] * cols, src = r * cols;
      for (int64_t j = j0; j < j1; j++)
        bk_st(dt, y, dst + j, bk_ld(dt, y, dst + j) + bk_ld(dt, values, src + j));
    }
  }
  return BK_OK;
}
