/*
 * layernorm.c — CPU layer normalization forward and backward.
 *
 * Row statistics use two passes in float64 (mean, then the mean squared
 * deviation), which is what the contract's accuracy clause asks for; the
 * row stays in cache between the passes, so memory sees one read of x and
 * one write of each output (streaming when they exceed the cache).
 *
 * The backward pass reads dout and normalized once: rows are cut into a
 * fixed number of blocks that depends only on the geometry (never on the
 * thread count); each block computes its rows' dx and its partial column
 * sums of dgamma and dbeta in row order, and the partials are then added
 * in block order. The result is therefore the same for any thread count.
 */
#include "cpu.h"

#include <math.h>

/* Float64 partials of dgamma and dbeta may take this many bytes. */
#define LN_PARTIAL_BYTES ((int64_t)8 << 20)
#define LN_MAX_BLOCKS 64

#define BK_TEMPLATE "layernorm_t.h"
#include "instantiate.h"

bk_status bk__cpu_layernorm_forward(bk_context *ctx, bk_dtype dt, const void *x,
                                    const void *gamma, const void *beta, void *out,
                                    void *normalized, void *inv_std, int64_t rows, int64_t cols,
                                    double eps) {
  const size_t es = dt == BK_F32 ? sizeof(float) : sizeof(double);
  const int threads = bk_cpu_threads(rows * cols);
  const int stream = bk__cpu_streams(ctx, 2 * (size_t)(rows * cols) * es);
  const int64_t chunk = bk_cpu_chunk(rows, cols, threads);
  atomic_llong next = 0;
#pragma omp parallel num_threads(threads) if (threads > 1)
  for (int64_t r0, r1; bk_cpu_take(&next, rows, chunk, &r0, &r1);) {
    if (dt == BK_F32)
      ln_forward_block_f32(x, gamma, beta, out, normalized, inv_std, r0, r1, cols, eps, stream);
    else
      ln_forward_block_f64(x, gamma, beta, out, normalized, inv_std, r0, r1, cols, eps, stream);
  }
  return BK_OK;
}

bk_status bk__cpu_layernorm_backward(bk_context *ctx, bk_dtype dt, const void *dout,
                                     const void *normalized, const void *inv_std,
                                     const void *gamma, void *dx, void *dgamma, void *dbeta,
                                     int64_t rows, int64_t cols) {
  const size_t es = dt == BK_F32 ? sizeof(float) : sizeof(double);
  const int threads = bk_cpu_threads(rows * cols);
  (void)threads; /* read only by the OpenMP pragmas */
  const int stream = bk__cpu_streams(ctx, (size_t)(rows * cols) * es);
  /* The number of row blocks: a function of rows and cols only. */
  int64_t blocks = LN_PARTIAL_BYTES / (2 * cols * (int64_t)sizeof(double));
  if (blocks > LN_MAX_BLOCKS) blocks = LN_MAX_BLOCKS;
  if (blocks > rows) blocks = rows;
  if (blocks < 1) blocks = 1;
  const int64_t per = (rows + blocks - 1) / (blocks ? blocks : 1);
  double *part = bk__host_alloc("bk_layernorm_backward", "scratch", (size_t)blocks * 2 * (size_t)cols,
                                sizeof *part);
  if (!part) return BK_ERR_OUT_OF_MEMORY;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
  for (int64_t b = 0; b < blocks; b++) {
    const int64_t r0 = b * per < rows ? b * per : rows, r1 = r0 + per < rows ? r0 + per : rows;
    double *pg = part + (size_t)b * 2 * (size_t)cols, *pb = pg + cols;
    if (dt == BK_F32)
      ln_backward_block_f32(dout, normalized, inv_std, gamma, dx, pg, pb, r0, r1, cols, stream);
    else
      ln_backward_block_f64(dout, normalized, inv_std, gamma, dx, pg, pb, r0, r1, cols, stream);
  }
  /* Partials in block order, columns in parallel. */
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t j = 0; j < cols; j++) {
    double sg = 0.0, sb = 0.0;
    for (int64_t b = 0; b < blocks; b++) {
      sg += part[(size_t)b * 2 * (size_t)cols + (size_t)j];
      sb += part[(size_t)b * 2 * (size_t)cols + (size_t)cols + (size_t)j];
    }
    bk_st(dt, dgamma, j, sg);
    bk_st(dt, dbeta, j, sb);
  }
  bk__host_free(part);
  return BK_OK;
}
