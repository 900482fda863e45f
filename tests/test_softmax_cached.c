/*
 * test_softmax_cached.c — row softmax (bk_softmax along the last axis) and
 * the hard-masked row softmax on shapes that reach the CUDA shared-memory
 * row cache (rowcache.cu): a block per row for float64 and masked rows, a
 * thread-block cluster per row for wide rows and for few rows, slices with
 * partial tails, and the shapes it declines (odd widths, narrow float32
 * rows); and the wide-row shapes of the register-share cluster kernel
 * (rcx_softmax_kernel): every cluster size of each
 * of its configurations, partial last shares, several rows per cluster,
 * and IEEE rows mixed with ordinary ones. On the CPU the same shapes run
 * through the reference backend.
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
    for (int64_t j = 0; j < cols; j++) {
      o[j] = !mr || mr[j] != 0 ? exp(xr[j] - m) : 0;
      s += o[j];
    }
    for (int64_t j = 0; j < cols; j++) {
      if (mr && !(mr[j] != 0))
        o[j] = 0;
      else
        o[j] = (nan || isinf(m)) ? NAN : o[j] / s;
    }
    if (!any)
      for (int64_t j = 0; j < cols; j++) o[j] = 0;
  }
}

/*
 * Rounds x (rows, cols) to dt in place and checks bk_softmax along the last
 * axis against the float64 reference; with twice, also that a second run
 * (through the default context of the inputs' device) gives the same bits.
 * x must be unchanged by either run.
 */
static void check_plain(bk_dtype dt, double *x, int64_t rows, int64_t cols, int twice) {
  const int64_t n = rows * cols;
  double *ref = tl_xmalloc((size_t)n * sizeof *ref);
  tl_round(dt, x, n);
  rows_ref(x, NULL, ref, rows, cols);
  bk_buffer *b = tl_buf(dt, x, n), *y = NULL, *y2 = NULL;
  const int64_t dims[2] = {rows, cols};
  if (TL_OK(bk_softmax(tl_ctx, b, dims, 2, 1, &y)) == BK_OK) {
    TL_BUF_CLOSE(y, ref, n, row_tol(dt, cols), 1.0);
    if (twice && TL_OK(bk_softmax(NULL, b, dims, 2, 1, &y2)) == BK_OK)
      TL_CHECK(tl_same_bits(y, y2), "%s (%" PRId64 ", %" PRId64 ") is not deterministic",
               tl_dtname(dt), rows, cols);
  }
  TL_UNCHANGED(b, x, n);
  bk_buffer_release(y);
  bk_buffer_release(y2);
  bk_buffer_release(b);
  free(ref);
}

/*
 * The same for bk_rows_masked_softmax with mask mk (rows, cols), plus:
 * entries the reference puts at exactly 0 because they are blocked (or the
 * row has none allowed) must be +0, not -0; x and mk unchanged. Returns the
 * result read back for further checks (the caller frees it), or NULL when
 * the call failed.
 */
static double *check_masked(bk_dtype dt, double *x, const double *mk, int64_t rows,
                            int64_t cols, int twice) {
  const int64_t n = rows * cols;
  double *ref = tl_xmalloc((size_t)n * sizeof *ref), *g = NULL;
  tl_round(dt, x, n);
  rows_ref(x, mk, ref, rows, cols);
  bk_buffer *b = tl_buf(dt, x, n), *m = tl_buf(dt, mk, n), *y = NULL, *y2 = NULL;
  if (TL_OK(bk_rows_masked_softmax(tl_ctx, b, m, rows, cols, &y)) == BK_OK) {
    g = tl_read(y);
    TL_CLOSE(g, ref, n, row_tol(dt, cols), 1.0);
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
      if (!(mk[i] != 0) && (g[i] != 0 || signbit(g[i]))) bad = i;
    TL_CHECK(bad < 0, "blocked entry %" PRId64 " is %g, not +0", bad, bad < 0 ? 0.0 : g[bad]);
    if (twice && TL_OK(bk_rows_masked_softmax(NULL, b, m, rows, cols, &y2)) == BK_OK)
      TL_CHECK(tl_same_bits(y, y2), "masked %s (%" PRId64 ", %" PRId64 ") is not deterministic",
               tl_dtname(dt), rows, cols);
  }
  TL_UNCHANGED(b, x, n);
  TL_UNCHANGED(m, mk, n);
  bk_buffer_release(y);
  bk_buffer_release(y2);
  bk_buffer_release(m);
  bk_buffer_release(b);
  free(ref);
  return g;
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
    {270, 16388}, /* float32 just past the register path: register shares, f32
                     C = 2, f64 C = 4, masked 4 / 8 */
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
      double *x = tl_xmalloc((size_t)n * sizeof *x);
      tl_seed(500 + s);
      for (int64_t i = 0; i < n; i++) x[i] = 4 * tl_randn();
      /* An exact tie at the maximum and a -inf inside a finite row. */
      x[cols - 1] = 40;
      x[cols / 2] = 40;
      x[n - 1] = -INFINITY;
      check_plain(dt, x, rows, cols, 1);
      free(x);
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
      double *x = tl_xmalloc((size_t)n * sizeof *x);
      tl_seed(600 + w);
      for (int64_t i = 0; i < n; i++) x[i] = tl_randn();
      x[0 * cols + cols / 3] = NAN;
      x[1 * cols + cols - 1] = INFINITY;
      x[2 * cols + 5] = INFINITY;
      x[2 * cols + cols - 7] = INFINITY;
      for (int64_t j = 0; j < cols; j++) x[3 * cols + j] = -INFINITY;
      for (int64_t j = 0; j < cols; j += 3) x[4 * cols + j] = -INFINITY;
      check_plain(dt, x, rows, cols, 0);
      free(x);
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
      free(check_masked(dt, x, mk, rows, cols, 1));
      free(x);
      free(mk);
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
      double *g = check_masked(dt, x, mk, rows, cols, 0);
      if (g)
        TL_CHECK(g[5 * cols + cols / 2] == 1.0, "a single allowed entry gives %.17g, not 1",
                 g[5 * cols + cols / 2]);
      free(g);
      free(x);
      free(mk);
    }
  }
}

/* Wide rows for the register-share cluster kernel, whose policy takes a
 * row wider than 64 KB when rows*C reaches twice the multiprocessor count
 * (264 on a 132-SM H200) and gives clusters several rows when there are
 * rows to spare. Shares hold at most 4096 16-byte vectors (plain, 256
 * threads), 8192 (plain, 512 threads, rows over 1 MB), 2048 (masked, 256
 * threads), 4096 (masked, 512 threads, rows over 512 KB) or 8192
 * (masked, x and mask staged in turn, rows over 1 MB);
 * each width is 4 columns past a power of two, so that C doubles once more
 * and the last share is partial, and a share of 2049 (4097) vectors leaves
 * one vector for thread 0 in the last register slot. (The 270 x 16388
 * shape above gives f32 C = 2, f64 C = 4, masked f32 C = 4, masked f64
 * C = 8, with several rows per cluster.)
 *   40 x 65540:  f32 C = 8 (last share 2042 vectors), f64 C = 16 (2035);
 *                masked f32 C = 16 (1010), masked f64 on 512 threads, C = 16
 *   17 x 131076: f32 C = 16 (2034), f64 on 512 threads (C = 16, 4083);
 *                masked f32 on 512 threads (C = 16), masked f64 (1 MB + 32
 *                bytes) staged in turn
 *   17 x 262148: f32 on 512 threads (C = 16, 4082), masked f32 staged in
 *                turn (64 allowed bits a thread); f64
 *                (2 MB + 32 bytes) declined
 * Rows are of eight kinds (r % 8), so every cluster meets special rows. */
static const struct {
  int64_t rows, cols;
} wide[] = {{40, 65540}, {17, 131076}, {17, 262148}};

/* Plain rows: 0 random with a tie at the maximum in the first and the last
 * share, 1 a NaN as the last entry, 2 +inf first, 3 two +inf, 4 only -inf,
 * 5 -inf every third entry, 6 only NaN, 7 scores down to -800 (most
 * exponentials underflow to 0). */
static void wide_plain(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof wide / sizeof wide[0]; s++) {
      const int64_t rows = wide[s].rows, cols = wide[s].cols, n = rows * cols;
      double *x = tl_xmalloc((size_t)n * sizeof *x);
      tl_seed(900 + s);
      for (int64_t r = 0; r < rows; r++) {
        double *xr = x + r * cols;
        const int kind = (int)(r % 8);
        for (int64_t j = 0; j < cols; j++)
          xr[j] = kind == 7 ? tl_uniform(-800, 0) : tl_uniform(-4, 4);
        if (kind == 0) xr[1] = xr[cols - 2] = 9;
        if (kind == 1) xr[cols - 1] = NAN;
        if (kind == 2) xr[0] = INFINITY;
        if (kind == 3) xr[1] = xr[cols - 2] = INFINITY;
        for (int64_t j = 0; j < cols; j++) {
          if (kind == 4 || (kind == 5 && j % 3 == 0)) xr[j] = -INFINITY;
          if (kind == 6) xr[j] = NAN;
        }
      }
      /* Run to run on the device only (the CPU backend's determinism is
       * tested with the shapes above). */
      check_plain(dt, x, rows, cols, tl_dev.kind == BK_DEVICE_CUDA);
      free(x);
    }
  }
}

/* Masked rows: 0 nothing allowed (mask of +0 and -0), 1 an allowed NaN,
 * 2 an allowed +inf as the last entry, 3 only -inf allowed, 4 blocked NaN
 * and +inf beside finite allowed entries (mask values of mixed sign, NaN
 * allowed), 5 one allowed entry in the last share (exactly 1), 6 allowed
 * only in the first 40 entries (the other CTAs of the cluster have none),
 * 7 nine in ten allowed with scores down to -800. Other rows keep half. */
static void wide_masked(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof wide / sizeof wide[0]; s++) {
      const int64_t rows = wide[s].rows, cols = wide[s].cols, n = rows * cols;
      double *x = tl_xmalloc((size_t)n * sizeof *x), *mk = tl_xmalloc((size_t)n * sizeof *mk);
      tl_seed(1000 + s);
      for (int64_t r = 0; r < rows; r++) {
        double *xr = x + r * cols, *mr = mk + r * cols;
        const int kind = (int)(r % 8);
        for (int64_t j = 0; j < cols; j++) {
          const double u = tl_uniform(0, 1);
          xr[j] = kind == 7 ? -800 * u : 8 * u - 4;
          switch (kind) {
          case 0: mr[j] = (j & 1) ? -0.0 : 0.0; break;
          case 4: mr[j] = j % 3 == 0 ? 0.0 : (j % 3 == 1 ? -1.5 : NAN); break;
          case 5: mr[j] = j == cols - 3 ? 2.0 : 0.0; break;
          case 6: mr[j] = j < 40 ? 1.0 : 0.0; break;
          case 7: mr[j] = (j * 7) % 10 != 3 ? 1.0 : 0.0; break;
          default: mr[j] = tl_uniform(0, 1) < 0.5 ? 1.0 : 0.0; break;
          }
          if (kind == 3 && mr[j] != 0) xr[j] = -INFINITY;
          if (kind == 4 && mr[j] == 0) xr[j] = (j / 3) % 2 ? NAN : INFINITY;
        }
        if (kind == 1) {
          xr[cols / 2] = NAN;
          mr[cols / 2] = 1;
        }
        if (kind == 2) {
          xr[cols - 1] = INFINITY;
          mr[cols - 1] = 1;
        }
      }
      double *g = check_masked(dt, x, mk, rows, cols, tl_dev.kind == BK_DEVICE_CUDA);
      if (g) {
        int64_t bad = -1;
        for (int64_t r = 5; r < rows && bad < 0; r += 8)
          if (g[r * cols + cols - 3] != 1.0) bad = r;
        TL_CHECK(bad < 0, "row %" PRId64 ": a single allowed entry gives %.17g, not 1", bad,
                 bad < 0 ? 1.0 : g[bad * cols + cols - 3]);
      }
      free(g);
      free(x);
      free(mk);
    }
  }
}

int main(void) {
  tl_init();
  TL_RUN(cached_plain);
  TL_RUN(cached_plain_ieee);
  TL_RUN(cached_masked);
  TL_RUN(cached_masked_ieee);
  TL_RUN(wide_plain);
  TL_RUN(wide_masked);
  return tl_finish();
}
