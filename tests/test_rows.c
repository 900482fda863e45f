/*
 * test_rows.c — bk_rows_sum, bk_rows_max, bk_rows_first_max_mask,
 * bk_rows_topk_mask, bk_rows_masked_softmax.
 */
#include "testlib.h"

/* ---- bk_rows_sum ------------------------------------------------------------ */

static void rows_sum_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double x[] = {1, 2, 3, 4, 5, 6};
    bk_buffer *b = tl_buf(dt, x, 6), *y = NULL;
    if (TL_OK(bk_rows_sum(tl_ctx, b, 2, 3, &y)) == BK_OK) {
      TL_BUF_EXACT(y, ((double[]){6, 15}), 2);
    }
    bk_buffer_release(y);
    /* cols == 0 gives rows zeros. */
    bk_buffer *e = tl_buf(dt, NULL, 0);
    if (TL_OK(bk_rows_sum(tl_ctx, e, 3, 0, &y)) == BK_OK) TL_BUF_EXACT(y, ((double[]){0, 0, 0}), 3);
    bk_buffer_release(y);
    if (TL_OK(bk_rows_sum(tl_ctx, e, 0, 5, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    bk_buffer_release(e);
    bk_buffer_release(b);
  }
}

static void rows_sum_random(void) {
  static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {17, 1000}, {64, 33}, {2, 100000}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
      double *x = tl_xmalloc((size_t)n * sizeof *x), *ref = tl_xmalloc((size_t)rows * sizeof *ref);
      tl_seed(100 + s);
      tl_fill_randn(x, n);
      tl_round(dt, x, n);
      double scale = 0;
      for (int64_t r = 0; r < rows; r++) {
        double acc = 0, mag = 0;
        for (int64_t j = 0; j < cols; j++) {
          acc += x[r * cols + j];
          mag += fabs(x[r * cols + j]);
        }
        ref[r] = acc;
        if (mag > scale) scale = mag;
      }
      bk_buffer *b = tl_buf(dt, x, n), *y = NULL, *y2 = NULL;
      if (TL_OK(bk_rows_sum(tl_ctx, b, rows, cols, &y)) == BK_OK) {
        TL_BUF_CLOSE(y, ref, rows, tl_tol_red(dt), scale);
        if (TL_OK(bk_rows_sum(tl_ctx, b, rows, cols, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "rows_sum is not deterministic");
      }
      TL_UNCHANGED(b, x, n);
      bk_buffer_release(y);
      bk_buffer_release(y2);
      bk_buffer_release(b);
      free(x);
      free(ref);
    }
  }
}

static void rows_sum_errors(void) {
  double x[6] = {0};
  bk_buffer *b = tl_buf(BK_F32, x, 6), *y = (bk_buffer *)&y;
  TL_REJECT(bk_rows_sum(tl_ctx, b, 2, 3, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_rows_sum(tl_ctx, NULL, 2, 3, &y), BK_ERR_NULL, "x");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_rows_sum(tl_ctx, b, -1, 3, &y), BK_ERR_INVALID_ARGUMENT, "rows");
  TL_REJECT(bk_rows_sum(tl_ctx, b, 2, -3, &y), BK_ERR_INVALID_ARGUMENT, "cols");
  TL_REJECT(bk_rows_sum(tl_ctx, b, 2, 4, &y), BK_ERR_INVALID_ARGUMENT, "x has length 6");
  TL_REJECT(bk_rows_sum(tl_ctx, b, INT64_MAX, 3, &y), BK_ERR_INVALID_ARGUMENT, "overflow");
  bk_context *other = tl_other_ctx();
  if (other) {
    bk_context *cpu = other;
    TL_REJECT(bk_rows_sum(cpu, b, 2, 3, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
  }
  bk_buffer_release(b);
}

int main(void) {
  if (!tl_init()) return 0;
  TL_RUN(rows_sum_examples);
  TL_RUN(rows_sum_random);
  TL_RUN(rows_sum_errors);
  return tl_finish();
}
