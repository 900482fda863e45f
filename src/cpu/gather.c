/*
 * gather.c — CPU row gather and scatter-add with host indices.
 *
 * Indices arrive checked (each <= UINT32_MAX); an index >= rows selects an
 * exact +0 row in the gather and is skipped by the scatter-add. The gather
 * copies rows as bytes, so every bit arrives unchanged. The scatter-add folds
 * the contributions to one element in increasing r with one addition in the
 * dtype each, which is the contract's ((mat[i] + v_first) + v_second) + ...
 * evaluated in the dtype.
 */
#include "cpu.h"

#include <string.h>

/* Output bytes from which a gather is shared among the threads. */
#define BK_GATHER_PARALLEL ((size_t)1 << 20)

bk_status bk__cpu_rows_gather(bk_context *ctx, bk_dtype dt, const void *mat, void *y,
                              int64_t rows, int64_t cols, const uint64_t *idx, int64_t k) {
  (void)ctx;
  const size_t row_bytes = (size_t)cols * bk__dtype_size(dt);
  /* mat (rows, cols), y (k, cols). The output is cut into equal byte
   * ranges, one per thread (a range may start and end inside rows), so a
   * few long rows share the threads too; each piece of a row is copied or
   * cleared to all-zero bits (+0). Outputs below BK_GATHER_PARALLEL bytes
   * stay on the calling thread. */
  const size_t total = (size_t)k * row_bytes;
#pragma omp parallel if (total >= BK_GATHER_PARALLEL)
  {
    int64_t u0, u1;
    bk_cpu_block((int64_t)total, &u0, &u1);
    for (int64_t b = u0; b < u1;) {
      const int64_t r = b / (int64_t)row_bytes, off = b % (int64_t)row_bytes;
      const int64_t len = (int64_t)row_bytes - off < u1 - b ? (int64_t)row_bytes - off : u1 - b;
      char *dst = (char *)y + b;
      if (idx[r] < (uint64_t)rows)
        memcpy(dst, (const char *)mat + (size_t)idx[r] * row_bytes + (size_t)off, (size_t)len);
      else
        memset(dst, 0, (size_t)len);
      b += len;
    }
  }
  return BK_OK;
}

/* Fewest columns per parallel work item of the scatter-add. */
#define BK_SCATTER_COLS 256

bk_status bk__cpu_rows_scatter_add(bk_context *ctx, bk_dtype dt, const void *mat,
                                   const void *values, void *y, int64_t rows, int64_t cols,
                                   const uint64_t *idx, int64_t k) {
  (void)ctx;
  /* mat, y (rows, cols); values (k, cols). The copy of mat is split over
   * the threads in byte ranges when it is large. */
  const size_t bytes = (size_t)rows * (size_t)cols * bk__dtype_size(dt);
#pragma omp parallel if (bytes >= ((size_t)4 << 20))
  {
    int64_t u0, u1;
    bk_cpu_block((int64_t)bytes, &u0, &u1);
    if (u1 > u0) memcpy((char *)y + u0, (const char *)mat + u0, (size_t)(u1 - u0));
  }
  /* Work items own disjoint column blocks and each walks r in increasing
   * order, so every element receives its terms in the contract's order no
   * matter how the blocks are spread over threads. Each addition is one
   * IEEE addition in the dtype, the contract's fold exactly. */
  /* Blocks as wide as the threads allow (at least BK_SCATTER_COLS columns),
   * so each row of values is read in long contiguous runs. */
  const int threads = bk_cpu_threads(k * cols);
  int64_t width = (cols + 2 * threads - 1) / (2 * threads);
  if (width < BK_SCATTER_COLS) width = BK_SCATTER_COLS;
  const int64_t blocks = (cols + width - 1) / width;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (blocks > 1 && threads > 1)
  for (int64_t b = 0; b < blocks; b++) {
    int64_t j0 = b * width;
    int64_t j1 = cols - j0 < width ? cols : j0 + width;
    for (int64_t r = 0; r < k; r++) {
      if (idx[r] >= (uint64_t)rows) continue;
      const int64_t dst = (int64_t)idx[r] * cols, src = r * cols;
      if (dt == BK_F32) {
        float *restrict yr = (float *)y + dst;
        const float *restrict vr = (const float *)values + src;
#pragma omp simd
        for (int64_t j = j0; j < j1; j++) yr[j] += vr[j];
      } else {
        double *restrict yr = (double *)y + dst;
        const double *restrict vr = (const double *)values + src;
#pragma omp simd
        for (int64_t j = j0; j < j1; j++) yr[j] += vr[j];
      }
    }
  }
  return BK_OK;
}
