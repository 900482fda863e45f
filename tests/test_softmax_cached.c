/*
 * test_softmax_cached.c — row softmax (bk_softmax along the last axis) and
 * the hard-masked row softmax on shapes that reach the CUDA shared-memory
 * row cache (rowcache.cu): a block per row for float64 and masked rows, a
 * thread-block cluster per row for wide rows and for few rows, slices with
 * partial tails, and the shapes it declines (odd widths, narrow float32
 * rows). On the CPU the same shapes run through the reference backend.
 */
#include "testlib.h"

#include <stdint.h>
#include <stdlib.h>

/* Float64 row softmax of x (rows, cols) into ref; allowed entries only
 * when mask is not NULL (allowed <=> mask != 0). Blocked entries are +0, a
 * row with no allowed entry is all +0, and a NaN or +inf among the allowed
 * entries, or only -inf ones, makes every allowed entry NaN. */
/* The contract's reduction tolerance; for float64 rows longer than 10^5 the
 * larger bound it allows there: four times the a-priori error of a plain
 * left-to-right float64 sum (cols unit roundoffs). float32 results keep
 * the plain tolerance, which their float64 sums meet easily. */
static double row_tol(bk_dtype dt, int64_t cols) {
  const double lr = dt == BK_F64 && cols > 100000 ? 4.0 * (double)cols * 0x1p-53 : 0.0;
  return lr > tl_tol_red(dt) ? lr : tl_tol_red(dt);
}

static void rows_ref(const double *x, const double *mask, double *ref, int64_t rows,
                     int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    const double *xr = x + r * cols;
    const double *mr = mask ? mask + r * cols : NULL;
    double *o = ref + r * cols;
    double m = -INFINITY, s = 0;
    int nan = 0, any = 0;
    for (int64_t j = 0; j < cols; j++) {
      if (mr && !(mr[j] != 0)) continue;
      any = 1;
      if (isnan(xr[j])) nan = 1;
      if (xr[j] > m) m = xr[j];
    }
    for (int64_t j = 0; j < cols; j++)
      if (!mr || mr[j] != 0) s += exp(xr[j] - m);
    for (int64_t j = 0; j < cols; j++) {
      if (mr && !(mr[j] != 0))
        o[j] = 0;
      else
        o[j] = (nan || isinf(m)) ? NAN : exp(xr[j] - m) / s;
    }
    if (!any)
      for (int64_t j = 0; j < cols; j++) o[j] = 0;
  }
}

/* Entries the reference puts at exactly 0 because they are blocked (or the
 * row has none allowed) must be +0, not -0. */
static void check_plus_zero(const bk_buffer *y, const double *mask, int64_t n) {
  double *g = tl_read(y);
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++)
    if (!(mask[i] != 0) && (g[i] != 0 || signbit(g[i]))) bad = i;
  TL_CHECK(bad < 0, "blocked entry %" PRId64 " is %g, not +0", bad, bad < 0 ? 0.0 : g[bad]);
  free(g);
}

/* Shapes: narrow and wide, many rows (a block per row) and few rows (a
 * cluster per row), widths whose 16-byte vectors leave partial warps and
 * partial cluster slices, and widths the cache declines (odd counts). */
static const struct {
  int64_t rows, cols;
} shapes[] = {
    {300, 1024},  /* float64: a 128-thread block per row */
    {300, 2050},  /* float64: 1025 vectors, a partial last warp */
    {5, 8192},    /* few rows: float64 clusters of 4 */
    {3, 20000},   /* wide float32 rows, few: clusters of 4 (float64: 8) */
    {270, 16388}, /* float32 just past the register path: clusters of 2 */
    {2, 262144},  /* 1 MB float32 rows: clusters of 16 (or 8) */
    {1, 524288},  /* 2 MB float32 row: 16 slices of 128 KB */
    {2, 20001},   /* odd width: declined, register path */
    {4, 262147},  /* odd and wide: declined, split path */
};

/* Under BK_TEST_SMALL (the GPU sanitizer runs, where a 16-CTA cluster over
 * 2 MB rows takes minutes under instrumentation) rows wider than this are
 * skipped. */
static int64_t widest(void) { return getenv("BK_TEST_SMALL") ? 65536 : INT64_MAX; }

static void cached_plain(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      if (shapes[s].cols > widest()) continue;
      const int64_t rows = shapes[s].rows, cols = shapes[s].cols, n = rows * cols;
      double *x = tl_xmalloc((size_t)n * sizeof *x), *ref = tl_xmalloc((size_t)n * sizeof *ref);
      tl_seed(500 + s);
      for (int64_t i = 0; i < n; i++) x[i] = 4 * tl_randn();
      /* An exact tie at the maximum and a -inf inside a finite row. */
      x[cols - 1] = 40;
      x[cols / 2] = 40;
      x[n - 1] = -INFINITY;
      tl_round(dt, x, n);
      rows_ref(x, NULL, ref, rows, cols);
      bk_buffer *b = tl_buf(dt, x, n), *y = NULL, *y2 = NULL;
      const int64_t dims[2] = {rows, cols};
      if (TL_OK(bk_softmax(tl_ctx, b, dims, 2, 1, &y)) == BK_OK) {
        TL_BUF_CLOSE(y, ref, n, row_tol(dt, cols), 1.0);
        if (TL_OK(bk_softmax(NULL, b, dims, 2, 1, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "%s (%" PRId64 ", %" PRId64 ") is not deterministic",
                   tl_dtname(dt), rows, cols);
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

/* IEEE rows in a block-per-row shape and in a cluster shape: NaN, +inf,
 * two +inf, only -inf, -inf among numbers, and a plain row that must stay
 * unaffected by its neighbours. */
static void cached_plain_ieee(void) {
  static const int64_t widths[] = {2048, 20000, 65536};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
      if (widths[w] > widest()) continue;
      const int64_t rows = 6, cols = widths[w], n = rows * cols;
      double *x = tl_xmalloc((size_t)n * sizeof *x), *ref = tl_xmalloc((size_t)n * sizeof *ref);
      tl_seed(600 + w);
      for (int64_t i = 0; i < n; i++) x[i] = tl_randn();
      x[0 * cols + cols / 3] = NAN;
      x[1 * cols + cols - 1] = INFINITY;
      x[2 * cols + 5] = INFINITY;
      x[2 * cols + cols - 7] = INFINITY;
      for (int64_t j = 0; j < cols; j++) x[3 * cols + j] = -INFINITY;
      for (int64_t j = 0; j < cols; j += 3) x[4 * cols + j] = -INFINITY;
      tl_round(dt, x, n);
      rows_ref(x, NULL, ref, rows, cols);
      bk_buffer *b = tl_buf(dt, x, n), *y = NULL;
      if (TL_OK(bk_softmax(tl_ctx, b, (int64_t[]){rows, cols}, 2, 1, &y)) == BK_OK)
        TL_BUF_CLOSE(y, ref, n, row_tol(dt, cols), 1.0);
      bk_buffer_release(y);
      bk_buffer_release(b);
      free(x);
      free(ref);
    }
  }
}

/* Masked rows: random masks of several densities (mask values of mixed
 * sign, NaN counting as allowed and -0 as blocked), on the shapes above. */
static void cached_masked(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      if (shapes[s].cols > widest()) continue;
      const int64_t rows = shapes[s].rows, cols = shapes[s].cols, n = rows * cols;
      double *x = tl_xmalloc((size_t)n * sizeof *x), *mk = tl_xmalloc((size_t)n * sizeof *mk);
      double *ref = tl_xmalloc((size_t)n * sizeof *ref);
      tl_seed(700 + s);
      for (int64_t r = 0; r < rows; r++) {
        /* Row r keeps about 1/(1 + r%4) of its entries. */
        const double keep = 1.0 / (double)(1 + r % 4);
        for (int64_t j = 0; j < cols; j++) {
          const int64_t i = r * cols + j;
          x[i] = 4 * tl_randn();
          mk[i] = tl_uniform(0, 1) < keep ? (tl_uniform(0, 1) < 0.5 ? 1.0 : -2.5) : 0.0;
        }
      }
      /* Blocked huge or NaN scores never matter; NaN and -0 in the mask. */
      x[0] = 1e30;
      mk[0] = 0;
      x[1] = NAN;
      mk[1] = -0.0;
      mk[2] = NAN;
      tl_round(dt, x, n);
      rows_ref(x, mk, ref, rows, cols);
      bk_buffer *b = tl_buf(dt, x, n), *m = tl_buf(dt, mk, n), *y = NULL, *y2 = NULL;
      if (TL_OK(bk_rows_masked_softmax(tl_ctx, b, m, rows, cols, &y)) == BK_OK) {
        TL_BUF_CLOSE(y, ref, n, row_tol(dt, cols), 1.0);
        check_plus_zero(y, mk, n);
        if (TL_OK(bk_rows_masked_softmax(NULL, b, m, rows, cols, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2),
                   "masked %s (%" PRId64 ", %" PRId64 ") is not deterministic", tl_dtname(dt),
                   rows, cols);
      }
      TL_UNCHANGED(b, x, n);
      TL_UNCHANGED(m, mk, n);
      bk_buffer_release(y);
      bk_buffer_release(y2);
      bk_buffer_release(m);
      bk_buffer_release(b);
      free(x);
      free(mk);
      free(ref);
    }
  }
}

/* Special masked rows, in a block-per-row shape and in cluster shapes:
 * 0 all blocked, 1 an allowed NaN, 2 an allowed +inf, 3 only -inf allowed,
 * 4 blocked NaN/+inf beside finite allowed entries, 5 one allowed entry
 * (exactly 1), 6 allowed only in the last slice of the row. */
static void cached_masked_ieee(void) {
  static const int64_t widths[] = {2048, 20000, 262144};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
      if (widths[w] > widest()) continue;
      const int64_t rows = 7, cols = widths[w], n = rows * cols;
      double *x = tl_xmalloc((size_t)n * sizeof *x), *mk = tl_xmalloc((size_t)n * sizeof *mk);
      double *ref = tl_xmalloc((size_t)n * sizeof *ref);
      tl_seed(800 + w);
      for (int64_t i = 0; i < n; i++) {
        x[i] = tl_randn();
        mk[i] = tl_uniform(0, 1) < 0.5 ? 1.0 : 0.0;
      }
      for (int64_t j = 0; j < cols; j++) mk[0 * cols + j] = 0;
      x[1 * cols + 17] = NAN;
      mk[1 * cols + 17] = 1;
      x[2 * cols + cols - 2] = INFINITY;
      mk[2 * cols + cols - 2] = 1;
      for (int64_t j = 0; j < cols; j++)
        if (mk[3 * cols + j] != 0) x[3 * cols + j] = -INFINITY;
      x[4 * cols + 3] = NAN;
      mk[4 * cols + 3] = 0;
      x[4 * cols + cols - 1] = INFINITY;
      mk[4 * cols + cols - 1] = 0;
      for (int64_t j = 0; j < cols; j++) mk[5 * cols + j] = j == cols / 2 ? 3.0 : 0.0;
      for (int64_t j = 0; j < cols; j++) mk[6 * cols + j] = j >= cols - 40 ? 1.0 : 0.0;
      tl_round(dt, x, n);
      rows_ref(x, mk, ref, rows, cols);
      bk_buffer *b = tl_buf(dt, x, n), *m = tl_buf(dt, mk, n), *y = NULL;
      if (TL_OK(bk_rows_masked_softmax(tl_ctx, b, m, rows, cols, &y)) == BK_OK) {
        TL_BUF_CLOSE(y, ref, n, row_tol(dt, cols), 1.0);
        check_plus_zero(y, mk, n);
        double *g = tl_read(y);
        TL_CHECK(g[5 * cols + cols / 2] == 1.0, "a single allowed entry gives %.17g, not 1",
                 g[5 * cols + cols / 2]);
        free(g);
      }
      bk_buffer_release(y);
      bk_buffer_release(m);
      bk_buffer_release(b);
      free(x);
      free(mk);
      free(ref);
    }
  }
}

int main(void) {
  if (!tl_init()) return 0;
  TL_RUN(cached_plain);
  TL_RUN(cached_plain_ieee);
  TL_RUN(cached_masked);
  TL_RUN(cached_masked_ieee);
  return tl_finish();
}
