/*
 * test_gather.c — bk_rows_gather and bk_rows_scatter_add.
 */
#include "testlib.h"

/* ---- bk_rows_gather ------------------------------------------------------------- */

static void gather_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double mat[] = {1, 2, 3, 4, 5, 6};
    bk_buffer *bm = tl_buf(dt, mat, 6), *y = NULL;
    /* In-range rows are copied; 7 and UINT32_MAX (in the index range but
     * >= rows) give +0 rows. */
    const uint64_t idx[] = {2, 0, 2, 7, UINT32_MAX};
    if (TL_OK(bk_rows_gather(tl_ctx, bm, 3, 2, idx, 5, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){5, 6, 1, 2, 5, 6, 0, 0, 0, 0}), 10);
    bk_buffer_release(y);
    TL_UNCHANGED(bm, mat, 6);
    /* k == 0: empty, with or without an index array. */
    if (TL_OK(bk_rows_gather(tl_ctx, bm, 3, 2, NULL, 0, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    if (TL_OK(bk_rows_gather(tl_ctx, bm, 3, 2, idx, 0, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    /* A NaN or -0 in some row never leaks into a zero row, and copied rows
     * keep every bit. */
    const double sp[] = {NAN, -0.0, INFINITY, -1};
    bk_buffer *bs = tl_buf(dt, sp, 4);
    if (TL_OK(bk_rows_gather(tl_ctx, bs, 2, 2, (uint64_t[]){5, 0, 1, 2}, 4, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){0, 0, NAN, -0.0, INFINITY, -1, 0, 0}), 8);
    bk_buffer_release(y);
    /* rows == 0 with k > 0: every row is out of range, so all zeros. */
    bk_buffer *e = tl_buf(dt, NULL, 0);
    if (TL_OK(bk_rows_gather(tl_ctx, e, 0, 3, (uint64_t[]){0, 1}, 2, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){0, 0, 0, 0, 0, 0}), 6);
    bk_buffer_release(y);
    /* cols == 0: an empty result whatever the indices. */
    if (TL_OK(bk_rows_gather(tl_ctx, e, 3, 0, (uint64_t[]){0, 9}, 2, &y)) == BK_OK)
      TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    bk_buffer_release(e);
    bk_buffer_release(bs);
    bk_buffer_release(bm);
  }
}

static void gather_random(void) {
  /* Widths of every vector size (odd, even, multiples of 4), indices in the
   * kernel's parameters (k <= 960) and uploaded (one and several staged
   * chunks of 2^20). */
  static const int64_t cases[][3] = {{1, 1, 1},      {1000, 37, 5000}, {50, 2000, 100},
                                     {7, 3, 64},     {300, 6, 961},    {90, 2, 3000},
                                     {4000, 1, 1100000}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      int64_t rows = cases[c][0], cols = cases[c][1], k = cases[c][2];
      double *mat = tl_xmalloc((size_t)(rows * cols) * sizeof *mat);
      double *ref = tl_xmalloc((size_t)(k * cols) * sizeof *ref);
      uint64_t *idx = tl_xmalloc((size_t)k * sizeof *idx);
      tl_seed(1000 + c);
      tl_fill_randn(mat, rows * cols);
      tl_round(dt, mat, rows * cols);
      /* About one index in ten is out of range. */
      for (int64_t r = 0; r < k; r++) idx[r] = tl_next() % (uint64_t)(rows + rows / 10 + 1);
      for (int64_t r = 0; r < k; r++)
        for (int64_t j = 0; j < cols; j++)
          ref[r * cols + j] = idx[r] < (uint64_t)rows ? mat[idx[r] * cols + j] : 0.0;
      bk_buffer *bm = tl_buf(dt, mat, rows * cols), *y = NULL, *y2 = NULL;
      if (TL_OK(bk_rows_gather(tl_ctx, bm, rows, cols, idx, k, &y)) == BK_OK) {
        TL_BUF_EXACT(y, ref, k * cols);
        if (TL_OK(bk_rows_gather(tl_ctx, bm, rows, cols, idx, k, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "rows_gather is not deterministic");
      }
      TL_UNCHANGED(bm, mat, rows * cols);
      bk_buffer_release(y);
      bk_buffer_release(y2);
      bk_buffer_release(bm);
      free(mat);
      free(ref);
      free(idx);
    }
  }
}

static void gather_errors(void) {
  double v[6] = {0};
  const uint64_t idx[] = {0, 1, 2};
  bk_buffer *m = tl_buf(BK_F32, v, 6), *y = (bk_buffer *)&y;
  TL_REJECT(bk_rows_gather(tl_ctx, m, 3, 2, idx, 3, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_rows_gather(tl_ctx, NULL, 3, 2, idx, 3, &y), BK_ERR_NULL, "mat is NULL");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_rows_gather(tl_ctx, m, -3, 2, idx, 3, &y), BK_ERR_INVALID_ARGUMENT, "rows = -3");
  TL_REJECT(bk_rows_gather(tl_ctx, m, 3, -2, idx, 3, &y), BK_ERR_INVALID_ARGUMENT, "cols = -2");
  TL_REJECT(bk_rows_gather(tl_ctx, m, 3, 2, idx, -1, &y), BK_ERR_INVALID_ARGUMENT, "k = -1");
  TL_REJECT(bk_rows_gather(tl_ctx, m, INT64_MAX, 2, idx, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "rows*cols");
  TL_REJECT(bk_rows_gather(tl_ctx, m, 3, 2, idx, INT64_MAX, &y), BK_ERR_INVALID_ARGUMENT,
            "k*cols");
  TL_REJECT(bk_rows_gather(tl_ctx, m, 2, 2, idx, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "mat has length 6, expected 4");
  TL_REJECT(bk_rows_gather(tl_ctx, m, 3, 2, NULL, 3, &y), BK_ERR_NULL, "indices is NULL");
  /* The contract's exact message for an index beyond UINT32_MAX. */
  const uint64_t bad[] = {0, 1, 2, 4294967296ull};
  TL_REJECT(bk_rows_gather(tl_ctx, m, 3, 2, bad, 4, &y), BK_ERR_INVALID_ARGUMENT, "indices[3]");
  TL_CHECK(strcmp(bk_last_error(), "bk_rows_gather: indices[3] = 4294967296 exceeds the index "
                                   "range (max 4294967295)") == 0,
           "unexpected message: %s", bk_last_error());
  TL_REJECT(bk_rows_gather(tl_ctx, m, 3, 2, (uint64_t[]){UINT64_MAX}, 1, &y),
            BK_ERR_INVALID_ARGUMENT, "indices[0] = 18446744073709551615 exceeds");
  /* An out-of-range index is rejected even when cols == 0 makes the result
   * empty: validation does not depend on the result size. */
  bk_buffer *e = tl_buf(BK_F32, NULL, 0);
  TL_REJECT(bk_rows_gather(tl_ctx, e, 3, 0, bad, 4, &y), BK_ERR_INVALID_ARGUMENT, "indices[3]");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) TL_REJECT(bk_rows_gather(other, m, 3, 2, idx, 3, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
  bk_buffer_release(e);
  bk_buffer_release(m);
}

/* ---- bk_rows_scatter_add ------------------------------------------------------------- */

/* The contract's fold in the dtype: each addition rounded to the dtype. */
static double add_in(bk_dtype dt, double a, double b) {
  return dt == BK_F32 ? (double)(float)(a + b) : a + b;
}

static void scatter_ref(bk_dtype dt, const double *mat, const double *values, double *out,
                        int64_t rows, int64_t cols, const uint64_t *idx, int64_t k) {
  memcpy(out, mat, (size_t)(rows * cols) * sizeof *out);
  for (int64_t r = 0; r < k; r++) {
    if (idx[r] >= (uint64_t)rows) continue;
    for (int64_t j = 0; j < cols; j++)
      out[idx[r] * cols + j] = add_in(dt, out[idx[r] * cols + j], values[r * cols + j]);
  }
}

static void scatter_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    /* The contract's example. */
    const double mat[] = {1, 2, 3, 4, 5, 6}, values[] = {0.25, -0.5, 1, 1, 9, 9};
    const uint64_t idx[] = {1, 1, 7};
    bk_buffer *bm = tl_buf(dt, mat, 6), *bv = tl_buf(dt, values, 6), *y = NULL;
    if (TL_OK(bk_rows_scatter_add(tl_ctx, bm, bv, 3, 2, idx, 3, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 2, 4.25, 4.5, 5, 6}), 6);
    bk_buffer_release(y);
    TL_UNCHANGED(bm, mat, 6);
    TL_UNCHANGED(bv, values, 6);
    /* k == 0: a copy of mat, with or without an index array. */
    bk_buffer *e = tl_buf(dt, NULL, 0);
    if (TL_OK(bk_rows_scatter_add(tl_ctx, bm, e, 3, 2, NULL, 0, &y)) == BK_OK)
      TL_BUF_EXACT(y, mat, 6);
    bk_buffer_release(y);
    if (TL_OK(bk_rows_scatter_add(tl_ctx, bm, e, 3, 2, idx, 0, &y)) == BK_OK)
      TL_BUF_EXACT(y, mat, 6);
    bk_buffer_release(y);
    /* All indices out of range: a copy of mat. */
    if (TL_OK(bk_rows_scatter_add(tl_ctx, bm, bv, 3, 2, (uint64_t[]){3, 9, UINT32_MAX}, 3,
                                  &y)) == BK_OK)
      TL_BUF_EXACT(y, mat, 6);
    bk_buffer_release(y);
    /* rows == 0 or cols == 0: an empty result. */
    if (TL_OK(bk_rows_scatter_add(tl_ctx, e, bv, 0, 2, idx, 3, &y)) == BK_OK)
      TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    if (TL_OK(bk_rows_scatter_add(tl_ctx, e, e, 3, 0, idx, 3, &y)) == BK_OK)
      TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    bk_buffer_release(e);
    bk_buffer_release(bm);
    bk_buffer_release(bv);
  }
}

/* The fold order and the per-step rounding are part of the contract, so
 * they are checked exactly: ((mat[i] + v_first) + v_second) + ... with every
 * sum rounded to the dtype. */
static void scatter_order(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    /* Half an ulp of 1, added twice: each step ties back to 1, whereas one
     * wider sum would give 1 + ulp. */
    const double half_ulp = dt == BK_F32 ? 5.9604644775390625e-08 : 1.1102230246251565e-16;
    bk_buffer *m1 = tl_buf(dt, (double[]){1}, 1);
    bk_buffer *v2 = tl_buf(dt, (double[]){half_ulp, half_ulp}, 2);
    bk_buffer *y = NULL;
    if (TL_OK(bk_rows_scatter_add(tl_ctx, m1, v2, 1, 1, (uint64_t[]){0, 0}, 2, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1}), 1);
    bk_buffer_release(y);
    /* [2^60, 1, -2^60, 1] onto 0 in increasing r gives exactly 1; reversed
     * or pairwise it gives 0. Interleaved with a second destination row. */
    const double big = 1152921504606846976.0;
    const double vals[] = {big, 5, 1, 5, 7, 7, -big, 5, 1, 5};
    bk_buffer *m2 = tl_buf(dt, (double[]){0, 0, 10, 10}, 4), *bv = tl_buf(dt, vals, 10);
    if (TL_OK(bk_rows_scatter_add(tl_ctx, m2, bv, 2, 2, (uint64_t[]){0, 0, 9, 0, 0}, 5, &y)) ==
        BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 20, 10, 10}), 4);
    bk_buffer_release(y);
    if (TL_OK(bk_rows_scatter_add(tl_ctx, m2, bv, 2, 2, (uint64_t[]){0, 1, 0, 1, 0}, 5, &y)) ==
        BK_OK) {
      double ref[4];
      scatter_ref(dt, (double[]){0, 0, 10, 10}, vals, ref, 2, 2, (uint64_t[]){0, 1, 0, 1, 0}, 5);
      TL_BUF_EXACT(y, ref, 4);
    }
    bk_buffer_release(y);
    bk_buffer_release(m1);
    bk_buffer_release(v2);
    bk_buffer_release(m2);
    bk_buffer_release(bv);
  }
}

static void scatter_random(void) {
  /* The CUDA backend's paths at their edges: up to 319 updates the schedule
   * travels in kernel parameters (319 and 320 on 3 rows: heavy repetition;
   * one kernel, or a copy and a rewrite when at most rows / 16 are touched);
   * beyond, the updates are sorted on the device and either every row is
   * written once (k > rows / 16) or mat is copied and the touched rows are
   * rewritten (200000 rows, 700 updates; 6400 rows, 400 updates, the edge).
   * Odd, even and multiple-of-4 widths; one row folding 5000 updates. */
  static const int64_t cases[][3] = {
      {1, 1, 1},     {200, 33, 3000},  {10, 3000, 400},   {5000, 8, 64},  {200000, 4, 700},
      {3, 6, 319},   {3, 6, 320},      {1, 2, 5000},      {6400, 5, 400}, {6399, 5, 400},
      {100, 1, 30000}, {50000, 12, 320}, {48, 7, 3}, {31, 4, 2}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      int64_t rows = cases[c][0], cols = cases[c][1], k = cases[c][2];
      double *mat = tl_xmalloc((size_t)(rows * cols) * sizeof *mat);
      double *vals = tl_xmalloc((size_t)(k * cols) * sizeof *vals);
      double *ref = tl_xmalloc((size_t)(rows * cols) * sizeof *ref);
      uint64_t *idx = tl_xmalloc((size_t)k * sizeof *idx);
      tl_seed(1100 + c);
      tl_fill_randn(mat, rows * cols);
      /* Values of mixed magnitudes make the rounding of every step visible. */
      for (int64_t i = 0; i < k * cols; i++) vals[i] = tl_randn() * pow(10.0, tl_uniform(-4, 4));
      tl_round(dt, mat, rows * cols);
      tl_round(dt, vals, k * cols);
      for (int64_t r = 0; r < k; r++) idx[r] = tl_next() % (uint64_t)(rows + rows / 10 + 1);
      scatter_ref(dt, mat, vals, ref, rows, cols, idx, k);
      bk_buffer *bm = tl_buf(dt, mat, rows * cols), *bv = tl_buf(dt, vals, k * cols);
      bk_buffer *y = NULL, *y2 = NULL;
      if (TL_OK(bk_rows_scatter_add(tl_ctx, bm, bv, rows, cols, idx, k, &y)) == BK_OK) {
        TL_BUF_EXACT(y, ref, rows * cols);
        if (TL_OK(bk_rows_scatter_add(tl_ctx, bm, bv, rows, cols, idx, k, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "rows_scatter_add is not deterministic");
      }
      TL_UNCHANGED(bm, mat, rows * cols);
      TL_UNCHANGED(bv, vals, k * cols);
      bk_buffer_release(y);
      bk_buffer_release(y2);
      bk_buffer_release(bm);
      bk_buffer_release(bv);
      free(mat);
      free(vals);
      free(ref);
      free(idx);
    }
  }
}

static void scatter_errors(void) {
  double v[6] = {0};
  const uint64_t idx[] = {0, 1, 2};
  bk_buffer *m = tl_buf(BK_F32, v, 6), *vals = tl_buf(BK_F32, v, 6);
  bk_buffer *v64 = tl_buf(BK_F64, v, 6), *y = (bk_buffer *)&y;
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, vals, 3, 2, idx, 3, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_rows_scatter_add(tl_ctx, NULL, vals, 3, 2, idx, 3, &y), BK_ERR_NULL, "mat is NULL");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, NULL, 3, 2, idx, 3, &y), BK_ERR_NULL,
            "values is NULL");
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, vals, -3, 2, idx, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "rows = -3");
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, vals, 3, -2, idx, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "cols = -2");
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, vals, 3, 2, idx, -3, &y), BK_ERR_INVALID_ARGUMENT,
            "k = -3");
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, vals, INT64_MAX, 2, idx, 3, &y),
            BK_ERR_INVALID_ARGUMENT, "rows*cols");
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, vals, 3, 2, idx, INT64_MAX, &y),
            BK_ERR_INVALID_ARGUMENT, "k*cols");
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, vals, 2, 2, idx, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "mat has length 6, expected 4");
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, vals, 3, 2, idx, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "values has length 6, expected 4");
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, vals, 3, 2, NULL, 3, &y), BK_ERR_NULL,
            "indices is NULL");
  const uint64_t bad[] = {0, 1, 4294967296ull};
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, vals, 3, 2, bad, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "indices[2]");
  TL_CHECK(strcmp(bk_last_error(), "bk_rows_scatter_add: indices[2] = 4294967296 exceeds the "
                                   "index range (max 4294967295)") == 0,
           "unexpected message: %s", bk_last_error());
  TL_REJECT(bk_rows_scatter_add(tl_ctx, m, v64, 3, 2, idx, 3, &y), BK_ERR_DTYPE,
            "values has dtype f64");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) {
    TL_REJECT(bk_rows_scatter_add(other, m, vals, 3, 2, idx, 3, &y), BK_ERR_DEVICE_MISMATCH,
              "ctx");
    bk_buffer *vc = tl_buf_on(other, BK_F32, v, 6);
    TL_REJECT(bk_rows_scatter_add(tl_ctx, m, vc, 3, 2, idx, 3, &y), BK_ERR_DEVICE_MISMATCH,
              "values is on device");
    bk_buffer_release(vc);
  }
  bk_buffer_release(m);
  bk_buffer_release(vals);
  bk_buffer_release(v64);
}

int main(void) {
  tl_init();
  TL_RUN(gather_examples);
  TL_RUN(gather_random);
  TL_RUN(gather_errors);
  TL_RUN(scatter_examples);
  TL_RUN(scatter_order);
  TL_RUN(scatter_random);
  TL_RUN(scatter_errors);
  return tl_finish();
}
