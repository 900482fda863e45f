/*
 * test_vec.c — bk_vec_concat and bk_vec_slice.
 */
#include "testlib.h"

/* 0, 1, 2, ... n-1 as doubles (malloc'd). */
static double *iota(int64_t n, double start) {
  double *v = tl_xmalloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = start + (double)i;
  return v;
}

/* ---- bk_vec_concat ----------------------------------------------------------- */

static void concat_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double a[] = {1, 2, 3}, b[] = {4, 5};
    bk_buffer *ba = tl_buf(dt, a, 3), *bb = tl_buf(dt, b, 2), *e = tl_buf(dt, NULL, 0);
    bk_buffer *y = NULL;
    if (TL_OK(bk_vec_concat(tl_ctx, ba, bb, 3, 2, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 2, 3, 4, 5}), 5);
    bk_buffer_release(y);
    /* Either part, or both, may be empty. */
    if (TL_OK(bk_vec_concat(tl_ctx, e, bb, 0, 2, &y)) == BK_OK) TL_BUF_EXACT(y, b, 2);
    bk_buffer_release(y);
    if (TL_OK(bk_vec_concat(tl_ctx, ba, e, 3, 0, &y)) == BK_OK) TL_BUF_EXACT(y, a, 3);
    bk_buffer_release(y);
    if (TL_OK(bk_vec_concat(tl_ctx, e, e, 0, 0, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    /* The same buffer twice is fine: inputs are only read. */
    if (TL_OK(bk_vec_concat(tl_ctx, bb, bb, 2, 2, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){4, 5, 4, 5}), 4);
    bk_buffer_release(y);
    /* Special values travel bit for bit. */
    const double s[] = {NAN, -0.0, INFINITY, -INFINITY};
    bk_buffer *bs = tl_buf(dt, s, 4);
    if (TL_OK(bk_vec_concat(tl_ctx, bs, ba, 4, 3, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){NAN, -0.0, INFINITY, -INFINITY, 1, 2, 3}), 7);
    bk_buffer_release(y);
    bk_buffer_release(bs);
    bk_buffer_release(ba);
    bk_buffer_release(bb);
    bk_buffer_release(e);
  }
}

static void concat_random(void) {
  static const int64_t sizes[][2] = {{1, 1}, {7, 13}, {1000, 1}, {40000, 90001}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      int64_t n = sizes[s][0], m = sizes[s][1];
      double *a = tl_xmalloc((size_t)n * sizeof *a), *b = tl_xmalloc((size_t)m * sizeof *b);
      double *ref = tl_xmalloc((size_t)(n + m) * sizeof *ref);
      tl_seed(200 + s);
      tl_fill_randn(a, n);
      tl_fill_randn(b, m);
      tl_round(dt, a, n);
      tl_round(dt, b, m);
      memcpy(ref, a, (size_t)n * sizeof *a);
      memcpy(ref + n, b, (size_t)m * sizeof *b);
      bk_buffer *ba = tl_buf(dt, a, n), *bb = tl_buf(dt, b, m), *y = NULL, *y2 = NULL;
      if (TL_OK(bk_vec_concat(tl_ctx, ba, bb, n, m, &y)) == BK_OK) {
        TL_BUF_EXACT(y, ref, n + m);
        TL_CHECK(bk_buffer_dtype(y) == dt, "concat changed the dtype");
        if (TL_OK(bk_vec_concat(tl_ctx, ba, bb, n, m, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "vec_concat is not deterministic");
      }
      TL_UNCHANGED(ba, a, n);
      TL_UNCHANGED(bb, b, m);
      bk_buffer_release(y);
      bk_buffer_release(y2);
      bk_buffer_release(ba);
      bk_buffer_release(bb);
      free(a);
      free(b);
      free(ref);
    }
  }
}

static void concat_errors(void) {
  double v[3] = {1, 2, 3};
  bk_buffer *a = tl_buf(BK_F32, v, 3), *b = tl_buf(BK_F32, v, 2), *b64 = tl_buf(BK_F64, v, 2);
  bk_buffer *y = (bk_buffer *)&y;
  TL_REJECT(bk_vec_concat(tl_ctx, a, b, 3, 2, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_vec_concat(tl_ctx, NULL, b, 3, 2, &y), BK_ERR_NULL, "a is NULL");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_vec_concat(tl_ctx, a, NULL, 3, 2, &y), BK_ERR_NULL, "b is NULL");
  TL_REJECT(bk_vec_concat(tl_ctx, a, b, -1, 2, &y), BK_ERR_INVALID_ARGUMENT, "n = -1");
  TL_REJECT(bk_vec_concat(tl_ctx, a, b, 3, -2, &y), BK_ERR_INVALID_ARGUMENT, "m = -2");
  TL_REJECT(bk_vec_concat(tl_ctx, a, b, INT64_MAX, 2, &y), BK_ERR_INVALID_ARGUMENT, "n+m");
  TL_REJECT(bk_vec_concat(tl_ctx, a, b, 4, 2, &y), BK_ERR_INVALID_ARGUMENT, "a has length 3");
  TL_REJECT(bk_vec_concat(tl_ctx, a, b, 3, 3, &y), BK_ERR_INVALID_ARGUMENT, "b has length 2");
  TL_REJECT(bk_vec_concat(tl_ctx, a, b64, 3, 2, &y), BK_ERR_DTYPE, "b has dtype f64");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) {
    TL_REJECT(bk_vec_concat(other, a, b, 3, 2, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
    bk_buffer *bc = tl_buf_on(other, BK_F32, v, 2);
    TL_REJECT(bk_vec_concat(tl_ctx, a, bc, 3, 2, &y), BK_ERR_DEVICE_MISMATCH, "b is on device");
    bk_buffer_release(bc);
  }
  bk_buffer_release(a);
  bk_buffer_release(b);
  bk_buffer_release(b64);
}

/* ---- bk_vec_slice ---------------------------------------------------------------- */

static void slice_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    double *x = iota(10, 0);
    bk_buffer *bx = tl_buf(dt, x, 10), *y = NULL;
    if (TL_OK(bk_vec_slice(tl_ctx, bx, 10, 2, 3, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){2, 3, 4}), 3);
    bk_buffer_release(y);
    /* The whole vector, the last element, and empty slices anywhere up to n. */
    if (TL_OK(bk_vec_slice(tl_ctx, bx, 10, 0, 10, &y)) == BK_OK) TL_BUF_EXACT(y, x, 10);
    bk_buffer_release(y);
    if (TL_OK(bk_vec_slice(tl_ctx, bx, 10, 9, 1, &y)) == BK_OK) TL_BUF_EXACT(y, ((double[]){9}), 1);
    bk_buffer_release(y);
    if (TL_OK(bk_vec_slice(tl_ctx, bx, 10, 4, 0, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    if (TL_OK(bk_vec_slice(tl_ctx, bx, 10, 10, 0, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    bk_buffer *e = tl_buf(dt, NULL, 0);
    if (TL_OK(bk_vec_slice(tl_ctx, e, 0, 0, 0, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    TL_UNCHANGED(bx, x, 10);
    bk_buffer_release(e);
    bk_buffer_release(bx);
    free(x);
  }
}

static void slice_random(void) {
  const int64_t n = 123457;
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    double *x = tl_xmalloc((size_t)n * sizeof *x);
    tl_seed(300 + d);
    tl_fill_randn(x, n);
    tl_round(dt, x, n);
    bk_buffer *bx = tl_buf(dt, x, n);
    for (int t = 0; t < 8; t++) {
      int64_t start = (int64_t)(tl_next() % (uint64_t)(n + 1));
      int64_t len = (int64_t)(tl_next() % (uint64_t)(n - start + 1));
      bk_buffer *y = NULL, *y2 = NULL;
      if (TL_OK(bk_vec_slice(tl_ctx, bx, n, start, len, &y)) == BK_OK) {
        TL_BUF_EXACT(y, x + start, len);
        if (TL_OK(bk_vec_slice(tl_ctx, bx, n, start, len, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "vec_slice is not deterministic");
      }
      bk_buffer_release(y);
      bk_buffer_release(y2);
    }
    TL_UNCHANGED(bx, x, n);
    bk_buffer_release(bx);
    free(x);
  }
}

static void slice_errors(void) {
  double v[4] = {1, 2, 3, 4};
  bk_buffer *x = tl_buf(BK_F64, v, 4), *y = (bk_buffer *)&y;
  TL_REJECT(bk_vec_slice(tl_ctx, x, 4, 0, 1, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_vec_slice(tl_ctx, NULL, 4, 0, 1, &y), BK_ERR_NULL, "x is NULL");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_vec_slice(tl_ctx, x, -4, 0, 1, &y), BK_ERR_INVALID_ARGUMENT, "n = -4");
  TL_REJECT(bk_vec_slice(tl_ctx, x, 4, -1, 1, &y), BK_ERR_INVALID_ARGUMENT, "start = -1");
  TL_REJECT(bk_vec_slice(tl_ctx, x, 4, 0, -1, &y), BK_ERR_INVALID_ARGUMENT, "len = -1");
  TL_REJECT(bk_vec_slice(tl_ctx, x, 4, 2, 3, &y), BK_ERR_INVALID_ARGUMENT, "start = 2 and len = 3");
  TL_REJECT(bk_vec_slice(tl_ctx, x, 4, 5, 0, &y), BK_ERR_INVALID_ARGUMENT, "start = 5");
  /* start + len would overflow int64: still rejected cleanly. */
  TL_REJECT(bk_vec_slice(tl_ctx, x, 4, 2, INT64_MAX, &y), BK_ERR_INVALID_ARGUMENT, "len");
  TL_REJECT(bk_vec_slice(tl_ctx, x, 4, INT64_MAX, INT64_MAX, &y), BK_ERR_INVALID_ARGUMENT,
            "n = 4");
  TL_REJECT(bk_vec_slice(tl_ctx, x, 5, 0, 1, &y), BK_ERR_INVALID_ARGUMENT, "x has length 4");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) TL_REJECT(bk_vec_slice(other, x, 4, 0, 1, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
  bk_buffer_release(x);
}

int main(void) {
  tl_init();
  TL_RUN(concat_examples);
  TL_RUN(concat_random);
  TL_RUN(concat_errors);
  TL_RUN(slice_examples);
  TL_RUN(slice_random);
  TL_RUN(slice_errors);
  return tl_finish();
}
