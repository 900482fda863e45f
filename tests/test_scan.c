/*
 * test_scan.c — bk_scan_diag, bk_scan_diag_backward, bk_scan_diag_var,
 * bk_scan_diag_var_backward.
 *
 * References run the recurrences sequentially in long double. The contract
 * accepts either tol * scale (scale: the same recurrence over absolute
 * values) or 4x the error of a plain left-to-right evaluation in the dtype,
 * whichever is larger; the reference code also computes that plain
 * evaluation (every operation rounded to the dtype).
 */
#include "testlib.h"
#include "core/internal.h" /* allocation-failure injection */

typedef long double ld;

/* ---- references ------------------------------------------------------------------ */

/* Rounds to the dtype when plain, else keeps the long double. */
static ld rd(bk_dtype dt, int plain, ld v) {
  if (!plain) return v;
  return dt == BK_F32 ? (ld)(float)v : (ld)(double)v;
}

/* y (T, S); *mag = max of the absolute-value recurrence. */
static void ref_forward(bk_dtype dt, int plain, const double *A, const double *B,
                        const double *X, const double *h0, int64_t T, int64_t S, int var,
                        double *y, double *mag) {
  *mag = 1e-300;
  for (int64_t j = 0; j < S; j++) {
    ld h = h0[j], ha = fabs(h0[j]);
    for (int64_t t = 0; t < T; t++) {
      int64_t c = var ? t * S + j : j, i = t * S + j;
      h = rd(dt, plain, rd(dt, plain, (ld)A[c] * h) + rd(dt, plain, (ld)B[c] * X[i]));
      ha = fabsl((ld)A[c]) * ha + fabsl((ld)B[c] * X[i]);
      y[i] = (double)h;
      if ((double)ha > *mag) *mag = (double)ha;
    }
  }
}

/* dA, dB (S or (T, S)), dX (T, S), dh0 (S), with h read from `out`;
 * mag[0..4) are the magnitudes of dA, dB, dX, dh0. */
static void ref_backward(bk_dtype dt, int plain, const double *A, const double *B,
                         const double *X, const double *h0, const double *out, const double *dy,
                         int64_t T, int64_t S, int var, double *dA, double *dB, double *dX,
                         double *dh0, double *mag) {
  for (int k = 0; k < 4; k++) mag[k] = 1e-300;
#define BUMP(k, v)                          \
  do {                                      \
    if ((double)(v) > mag[k]) mag[k] = (double)(v); \
  } while (0)
  for (int64_t j = 0; j < S; j++) {
    ld g = 0, ga = 0, sa = 0, sb = 0, saa = 0, sba = 0;
    for (int64_t t = T - 1; t >= 0; t--) {
      int64_t i = t * S + j, c = var ? i : j;
      if (t == T - 1) {
        g = dy[i];
        ga = fabs(dy[i]);
      } else {
        int64_t cn = var ? i + S : j;
        g = rd(dt, plain, dy[i] + rd(dt, plain, (ld)A[cn] * g));
        ga = fabsl((ld)dy[i]) + fabsl((ld)A[cn]) * ga;
      }
      ld hp = t > 0 ? out[i - S] : h0[j];
      ld a = rd(dt, plain, g * hp), b = rd(dt, plain, g * X[i]);
      if (var) {
        dA[i] = (double)a;
        dB[i] = (double)b;
        BUMP(0, ga * fabsl(hp));
        BUMP(1, ga * fabsl((ld)X[i]));
      } else {
        sa = rd(dt, plain, sa + a);
        sb = rd(dt, plain, sb + b);
        saa += ga * fabsl(hp);
        sba += ga * fabsl((ld)X[i]);
      }
      dX[i] = (double)rd(dt, plain, g * B[c]);
      BUMP(2, ga * fabsl((ld)B[c]));
    }
    if (!var) {
      dA[j] = (double)sa;
      dB[j] = (double)sb;
      BUMP(0, saa);
      BUMP(1, sba);
    }
    dh0[j] = T > 0 ? (double)rd(dt, plain, (ld)A[j] * g) : 0.0;
    BUMP(3, fabsl((ld)A[j]) * ga);
  }
#undef BUMP
}

static double max_err(const double *a, const double *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++)
    if (fabs(a[i] - b[i]) > m) m = fabs(a[i] - b[i]);
  return m;
}

/* The contract's bound: tol * scale, or 4x the plain evaluation's error. */
static int check_scan(const char *what, const bk_buffer *b, const double *ref,
                      const double *plain, int64_t n, bk_dtype dt, double mag) {
  double bound = tl_tol_red(dt) * mag, p = 4 * max_err(plain, ref, n);
  if (p > bound) bound = p;
  int ok = TL_BUF_CLOSE(b, ref, n, 1.0, bound);
  if (!ok) fprintf(stderr, "  (%s)\n", what);
  return ok;
}

/* The forward of one form: the token-dependent one when var is set. */
static bk_status scan_forward(int var, const bk_buffer *A, const bk_buffer *B, const bk_buffer *X,
                              const bk_buffer *h0, int64_t T, int64_t S, bk_buffer **y) {
  return var ? bk_scan_diag_var(tl_ctx, A, B, X, h0, T, S, y)
             : bk_scan_diag(tl_ctx, A, B, X, h0, T, S, y);
}

/* The backward of one form into g: dA, dB, dX, dh0. */
static bk_status scan_backward(int var, const bk_buffer *A, const bk_buffer *B,
                               const bk_buffer *X, const bk_buffer *h0, const bk_buffer *out,
                               const bk_buffer *dy, int64_t T, int64_t S, bk_buffer *g[4]) {
  return var ? bk_scan_diag_var_backward(tl_ctx, A, B, X, h0, out, dy, T, S, &g[0], &g[1], &g[2],
                                         &g[3])
             : bk_scan_diag_backward(tl_ctx, A, B, X, h0, out, dy, T, S, &g[0], &g[1], &g[2],
                                     &g[3]);
}

/* b against want (n values): exactly when tol is 0, else within tol at scale. */
static void expect_values(const bk_buffer *b, const double *want, int64_t n, double tol,
                          double scale) {
  if (tol == 0)
    TL_BUF_EXACT(b, want, n);
  else
    TL_BUF_CLOSE(b, want, n, tol, scale);
}

/* ---- examples -------------------------------------------------------------------------- */

static const double ex_X[] = {2, 1, 4, -2, 0, 3};
static const double ex_h0[] = {1, -1};
static const double ones6[] = {1, 1, 1, 1, 1, 1};

/* The contract's example of one form with X = ex_X and h0 = ex_h0 as
 * (3, 2) and dy = ones: y (6 values) and the gradients dA, dB (nc values
 * each), dX (6) and dh0 (2) against the printed values, exactly when tol is
 * 0 (else within tol, at scale 4 and 1 for dh0), the inputs unchanged (dy
 * checked in the shared form). */
static void example_case(bk_dtype dt, int var, const double *A, const double *B,
                         const double *want[5], double tol) {
  const int64_t nc = var ? 6 : 2;
  bk_buffer *bA = tl_buf(dt, A, nc), *bB = tl_buf(dt, B, nc), *bX = tl_buf(dt, ex_X, 6);
  bk_buffer *bh = tl_buf(dt, ex_h0, 2), *dy = tl_buf(dt, ones6, 6), *y = NULL;
  if (TL_OK(scan_forward(var, bA, bB, bX, bh, 3, 2, &y)) == BK_OK) {
    expect_values(y, want[0], 6, tol, 4.0);
    bk_buffer *g[4] = {NULL};
    if (TL_OK(scan_backward(var, bA, bB, bX, bh, y, dy, 3, 2, g)) == BK_OK) {
      expect_values(g[0], want[1], nc, tol, 4.0);
      expect_values(g[1], want[2], nc, tol, 4.0);
      expect_values(g[2], want[3], 6, tol, 4.0);
      expect_values(g[3], want[4], 2, tol, 1.0);
    }
    for (int k = 0; k < 4; k++) bk_buffer_release(g[k]);
  }
  TL_UNCHANGED(bA, A, nc);
  TL_UNCHANGED(bB, B, nc);
  TL_UNCHANGED(bX, ex_X, 6);
  TL_UNCHANGED(bh, ex_h0, 2);
  if (!var) TL_UNCHANGED(dy, ones6, 6);
  bk_buffer_release(y);
  bk_buffer_release(bA);
  bk_buffer_release(bB);
  bk_buffer_release(bX);
  bk_buffer_release(bh);
  bk_buffer_release(dy);
}

static void examples_shared(void) {
  const double A[] = {0.5, 0.25}, B[] = {1, 2};
  const double *want[5] = {(double[]){2.5, 1.75, 5.25, -3.5625, 2.625, 5.109375},
                           (double[]){10.75, -2.6875}, (double[]){9.5, 1.8125},
                           (double[]){1.75, 2.625, 1.5, 2.5, 1, 2}, (double[]){0.875, 0.328125}};
  for (int d = 0; d < TL_DTYPES; d++) example_case(tl_dtypes[d], 0, A, B, want, 0);
}

static void examples_var(void) {
  const double A[] = {0.5, 0.25, 0.1, 0.75, -1, 0.2}, B[] = {1, 2, 0.5, -1, 0.25, 0.5};
  const double *want[5] = {(double[]){2.5, 1.75, 2.25, 3.3125, -2.25, 2.1625},
                           (double[]){1, -1.9, 0, 2.1, 2.25, 3.3125},
                           (double[]){2, 1.9, 0, -2.4, 0, 3},
                           (double[]){1, 3.8, 0, -1.2, 0.25, 0.5}, (double[]){0.5, 0.475}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    /* The example's values are exact to their printed digits. */
    example_case(dt, 1, A, B, want, dt == BK_F32 ? tl_tol_red(dt) : 1e-12);
  }
}

/* ---- random cases ----------------------------------------------------------------------- */

typedef struct scase {
  int64_t T, S;
  double alo, ahi; /* A drawn uniformly from [alo, ahi) */
} scase;

static const scase cases[] = {
    {1, 1, -0.9, 0.9},     {3, 5, -1, 1},         {50, 17, 0.5, 0.99},  {1000, 3, 1.01, 1.01},
    {300, 20, 1.0, 1.05},  {200, 170, -1.02, -0.98}, {20000, 4, 0.9, 0.9999}, {4096, 64, -1, 1},
    {7, 1000, 0, 1},
};

static void random_case(bk_dtype dt, const scase *sc, int var, uint64_t seed) {
  const int64_t T = sc->T, S = sc->S, n = T * S, nc = var ? n : S;
  /* The inputs A, B, X, h0 and dy; the first four are also the lengths of
   * the gradients dA, dB, dX, dh0. */
  static const char *in_names[5] = {"A", "B", "X", "h0", "dy"};
  const int64_t lens[5] = {nc, nc, n, S, n};
  double *in[5], *r[4], *p[4];
  bk_buffer *b[5];
  for (int k = 0; k < 5; k++) in[k] = tl_xmalloc((size_t)lens[k] * sizeof *in[k]);
  for (int k = 0; k < 4; k++) {
    r[k] = tl_xmalloc((size_t)lens[k] * sizeof *r[k]);
    p[k] = tl_xmalloc((size_t)lens[k] * sizeof *p[k]);
  }
  double *A = in[0], *B = in[1], *X = in[2], *h0 = in[3], *dy = in[4];
  double *ry = tl_xmalloc((size_t)n * sizeof *ry), *py = tl_xmalloc((size_t)n * sizeof *py);
  tl_seed(seed);
  tl_fill_uniform(A, nc, sc->alo, sc->ahi);
  tl_fill_uniform(B, nc, -1, 1);
  tl_fill_randn(X, n);
  tl_fill_randn(h0, S);
  tl_fill_randn(dy, n);
  for (int k = 0; k < 5; k++) tl_round(dt, in[k], lens[k]);
  double mag, pmag, mags[4], pmags[4];
  ref_forward(dt, 0, A, B, X, h0, T, S, var, ry, &mag);
  ref_forward(dt, 1, A, B, X, h0, T, S, var, py, &pmag);
  char what[96];
  snprintf(what, sizeof what, "%s %s T %" PRId64 " S %" PRId64, var ? "var" : "shared",
           tl_dtname(dt), T, S);

  for (int k = 0; k < 5; k++) b[k] = tl_buf(dt, in[k], lens[k]);
  bk_buffer *y = NULL, *y2 = NULL;
  if (TL_OK(scan_forward(var, b[0], b[1], b[2], b[3], T, S, &y)) == BK_OK) {
    check_scan(what, y, ry, py, n, dt, mag);
    if (TL_OK(scan_forward(var, b[0], b[1], b[2], b[3], T, S, &y2)) == BK_OK)
      TL_CHECK(tl_same_bits(y, y2), "scan forward is not deterministic");

    /* The backward reads h from the forward result as stored. */
    double *h = tl_read(y);
    ref_backward(dt, 0, A, B, X, h0, h, dy, T, S, var, r[0], r[1], r[2], r[3], mags);
    ref_backward(dt, 1, A, B, X, h0, h, dy, T, S, var, p[0], p[1], p[2], p[3], pmags);
    bk_buffer *g[4] = {NULL}, *g2[4] = {NULL};
    if (TL_OK(scan_backward(var, b[0], b[1], b[2], b[3], y, b[4], T, S, g)) == BK_OK) {
      static const char *names[4] = {"dA", "dB", "dX", "dh0"};
      for (int k = 0; k < 4; k++) {
        char w2[128];
        snprintf(w2, sizeof w2, "%s, %s", what, names[k]);
        check_scan(w2, g[k], r[k], p[k], lens[k], dt, mags[k]);
      }
      if (TL_OK(scan_backward(var, b[0], b[1], b[2], b[3], y, b[4], T, S, g2)) == BK_OK)
        for (int k = 0; k < 4; k++)
          TL_CHECK(tl_same_bits(g[k], g2[k]), "scan backward %d is not deterministic", k);
    }
    TL_UNCHANGED(y, h, n);
    for (int k = 0; k < 4; k++) {
      bk_buffer_release(g[k]);
      bk_buffer_release(g2[k]);
    }
    free(h);
  }
  for (int k = 0; k < 5; k++)
    tl_unchanged_at(__FILE__, __LINE__, in_names[k], b[k], in[k], lens[k]);
  bk_buffer_release(y);
  bk_buffer_release(y2);
  for (int k = 0; k < 5; k++) {
    bk_buffer_release(b[k]);
    free(in[k]);
  }
  for (int k = 0; k < 4; k++) {
    free(r[k]);
    free(p[k]);
  }
  free(ry);
  free(py);
}

static void random_cases(void) {
  for (int d = 0; d < TL_DTYPES; d++)
    for (int var = 0; var <= 1; var++)
      for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        random_case(tl_dtypes[d], &cases[c], var, 300 + 10 * c + (uint64_t)var);
}

/* ---- finite differences (float64) ---------------------------------------------------------- */

/* L = <dy, scan(A, B, X, h0)> through the library. */
static double loss(const double *A, const double *B, const double *X, const double *h0,
                   const double *dy, int64_t T, int64_t S, int var) {
  const int64_t n = T * S, nc = var ? n : S;
  bk_buffer *bA = tl_buf(BK_F64, A, nc), *bB = tl_buf(BK_F64, B, nc), *bX = tl_buf(BK_F64, X, n);
  bk_buffer *bh = tl_buf(BK_F64, h0, S), *y = NULL;
  double L = NAN;
  if (scan_forward(var, bA, bB, bX, bh, T, S, &y) == BK_OK) {
    double *v = tl_read(y);
    L = 0;
    for (int64_t i = 0; i < n; i++) L += dy[i] * v[i];
    free(v);
  }
  bk_buffer_release(y);
  bk_buffer_release(bA);
  bk_buffer_release(bB);
  bk_buffer_release(bX);
  bk_buffer_release(bh);
  return L;
}

/* Directional derivatives of L along random directions in A, B, X and h0,
 * by central differences, against <dA, dir>, <dB, dir>, <dX, dir>,
 * <dh0, dir>. */
static void finite_differences(void) {
  static const int64_t shapes[][2] = {{1, 1}, {2, 3}, {5, 4}, {30, 6}};
  const double h = 1e-6;
  for (int var = 0; var <= 1; var++) {
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
      const int64_t T = shapes[c][0], S = shapes[c][1], n = T * S, nc = var ? n : S;
      double *in[4], *dir = tl_xmalloc((size_t)n * sizeof *dir);
      double *tmp = tl_xmalloc((size_t)n * sizeof *tmp), *dy = tl_xmalloc((size_t)n * sizeof *dy);
      const int64_t lens[4] = {nc, nc, n, S};
      for (int k = 0; k < 4; k++) in[k] = tl_xmalloc((size_t)lens[k] * sizeof *in[k]);
      tl_seed(900 + 10 * c + (uint64_t)var);
      tl_fill_uniform(in[0], nc, -1.1, 1.1);
      tl_fill_uniform(in[1], nc, -1, 1);
      tl_fill_randn(in[2], n);
      tl_fill_randn(in[3], S);
      tl_fill_randn(dy, n);
      bk_buffer *b[4], *bdy = tl_buf(BK_F64, dy, n), *y = NULL, *g[4] = {NULL};
      for (int k = 0; k < 4; k++) b[k] = tl_buf(BK_F64, in[k], lens[k]);
      int ok = TL_OK(scan_forward(var, b[0], b[1], b[2], b[3], T, S, &y)) == BK_OK;
      if (ok) ok = TL_OK(scan_backward(var, b[0], b[1], b[2], b[3], y, bdy, T, S, g)) == BK_OK;
      if (ok) {
        static const char *names[4] = {"A", "B", "X", "h0"};
        for (int k = 0; k < 4; k++) {
          double *grad = tl_read(g[k]);
          tl_fill_randn(dir, lens[k]);
          double analytic = 0, mag = 0;
          for (int64_t i = 0; i < lens[k]; i++) {
            analytic += grad[i] * dir[i];
            mag += fabs(grad[i] * dir[i]);
          }
          memcpy(tmp, in[k], (size_t)lens[k] * sizeof *tmp);
          for (int64_t i = 0; i < lens[k]; i++) in[k][i] = tmp[i] + h * dir[i];
          double lp = loss(in[0], in[1], in[2], in[3], dy, T, S, var);
          for (int64_t i = 0; i < lens[k]; i++) in[k][i] = tmp[i] - h * dir[i];
          double lm = loss(in[0], in[1], in[2], in[3], dy, T, S, var);
          memcpy(in[k], tmp, (size_t)lens[k] * sizeof *tmp);
          double numeric = (lp - lm) / (2 * h);
          TL_CHECK(fabs(numeric - analytic) <= 1e-6 * (mag + 1),
                   "finite difference (%s form, d%s, T %" PRId64 ", S %" PRId64 "): %.12g vs %.12g",
                   var ? "var" : "shared", names[k], T, S, numeric, analytic);
          free(grad);
        }
      }
      for (int k = 0; k < 4; k++) {
        bk_buffer_release(b[k]);
        bk_buffer_release(g[k]);
        free(in[k]);
      }
      bk_buffer_release(y);
      bk_buffer_release(bdy);
      free(dir);
      free(tmp);
      free(dy);
    }
  }
}

/* ---- empty cases and rejections -------------------------------------------------------------- */

static void empty(void) {
  static const int64_t shapes[][2] = {{0, 3}, {5, 0}, {0, 0}};
  const double zeros[3] = {0, 0, 0}, vals[3] = {0.5, 1, 2};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (int var = 0; var <= 1; var++) {
      for (size_t c = 0; c < 3; c++) {
        const int64_t T = shapes[c][0], S = shapes[c][1], nc = var ? 0 : S;
        bk_buffer *e = tl_buf(dt, NULL, 0), *s = tl_buf(dt, vals, S), *co = tl_buf(dt, vals, nc);
        bk_buffer *y = NULL, *g[4] = {NULL};
        if (TL_OK(scan_forward(var, co, co, e, s, T, S, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
        if (TL_OK(scan_backward(var, co, co, e, s, e, e, T, S, g)) == BK_OK) {
          /* Shared form: dA, dB are S zeros; var form: empty like dX. */
          TL_BUF_EXACT(g[0], zeros, nc);
          TL_BUF_EXACT(g[1], zeros, nc);
          TL_BUF_EXACT(g[2], NULL, 0);
          TL_BUF_EXACT(g[3], zeros, S);
        }
        bk_buffer_release(y);
        for (int k = 0; k < 4; k++) bk_buffer_release(g[k]);
        bk_buffer_release(e);
        bk_buffer_release(s);
        bk_buffer_release(co);
      }
    }
  }
}

static void forward_errors(void) {
  double v[6] = {0};
  bk_buffer *s = tl_buf(BK_F32, v, 2), *X = tl_buf(BK_F32, v, 6), *s64 = tl_buf(BK_F64, v, 2);
  bk_buffer *y = (bk_buffer *)&y;
  /* Shared form: A, B, h0 (2), X (3, 2). */
  TL_REJECT(bk_scan_diag(tl_ctx, s, s, X, s, 3, 2, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_scan_diag(tl_ctx, NULL, s, X, s, 3, 2, &y), BK_ERR_NULL, "A");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_scan_diag(tl_ctx, s, NULL, X, s, 3, 2, &y), BK_ERR_NULL, "B");
  TL_REJECT(bk_scan_diag(tl_ctx, s, s, NULL, s, 3, 2, &y), BK_ERR_NULL, "X");
  TL_REJECT(bk_scan_diag(tl_ctx, s, s, X, NULL, 3, 2, &y), BK_ERR_NULL, "h0");
  TL_REJECT(bk_scan_diag(tl_ctx, s, s, X, s, -3, 2, &y), BK_ERR_INVALID_ARGUMENT, "seq_len = -3");
  TL_REJECT(bk_scan_diag(tl_ctx, s, s, X, s, 3, -2, &y), BK_ERR_INVALID_ARGUMENT, "state = -2");
  TL_REJECT(bk_scan_diag(tl_ctx, s, s, X, s, INT64_MAX, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "overflow");
  TL_REJECT(bk_scan_diag(tl_ctx, X, s, X, s, 3, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "A has length 6, expected 2");
  TL_REJECT(bk_scan_diag(tl_ctx, s, X, X, s, 3, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "B has length 6, expected 2");
  TL_REJECT(bk_scan_diag(tl_ctx, s, s, s, s, 3, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "X has length 2, expected 6");
  TL_REJECT(bk_scan_diag(tl_ctx, s, s, X, X, 3, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "h0 has length 6, expected 2");
  TL_REJECT(bk_scan_diag(tl_ctx, s, s, X, s64, 3, 2, &y), BK_ERR_DTYPE, "h0");
  TL_CHECK(y == NULL, "out not cleared on failure");
  /* Var form: A, B (3, 2). */
  TL_REJECT(bk_scan_diag_var(tl_ctx, X, X, X, s, 3, 2, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_scan_diag_var(tl_ctx, NULL, X, X, s, 3, 2, &y), BK_ERR_NULL, "A");
  TL_REJECT(bk_scan_diag_var(tl_ctx, s, X, X, s, 3, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "A has length 2, expected 6");
  TL_REJECT(bk_scan_diag_var(tl_ctx, X, s, X, s, 3, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "B has length 2, expected 6");
  TL_REJECT(bk_scan_diag_var(tl_ctx, X, X, X, X, 3, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "h0 has length 6, expected 2");
  TL_REJECT(bk_scan_diag_var(tl_ctx, X, X, X, s, -1, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "seq_len = -1");
  TL_REJECT(bk_scan_diag_var(tl_ctx, X, X, X, s, 2, INT64_MAX, &y), BK_ERR_INVALID_ARGUMENT,
            "overflow");
  TL_REJECT(bk_scan_diag_var(tl_ctx, X, X, X, s64, 3, 2, &y), BK_ERR_DTYPE, "h0");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) {
    TL_REJECT(bk_scan_diag(other, s, s, X, s, 3, 2, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
    TL_REJECT(bk_scan_diag_var(other, X, X, X, s, 3, 2, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
  }
  bk_buffer_release(s);
  bk_buffer_release(X);
  bk_buffer_release(s64);
}

static void backward_errors(void) {
  double v[6] = {0};
  bk_buffer *s = tl_buf(BK_F32, v, 2), *X = tl_buf(BK_F32, v, 6), *X64 = tl_buf(BK_F64, v, 6);
  bk_buffer *sentinel = (bk_buffer *)&sentinel, *a, *b, *x, *h;
#define RESET() (a = b = x = h = sentinel)
#define CLEARED() \
  TL_CHECK(a == NULL && b == NULL && x == NULL && h == NULL, "out-parameters not cleared")
  for (int var = 0; var <= 1; var++) {
    bk_status (*fn)(bk_context *, const bk_buffer *, const bk_buffer *, const bk_buffer *,
                    const bk_buffer *, const bk_buffer *, const bk_buffer *, int64_t, int64_t,
                    bk_buffer **, bk_buffer **, bk_buffer **, bk_buffer **) =
        var ? bk_scan_diag_var_backward : bk_scan_diag_backward;
    bk_buffer *c = var ? X : s, *wrong = var ? s : X;
    const char *clen = var ? "A has length 2, expected 6" : "A has length 6, expected 2";
    RESET();
    TL_REJECT(fn(tl_ctx, c, c, X, s, X, X, 3, 2, NULL, &b, &x, &h), BK_ERR_NULL, "dA");
    TL_CHECK(b == NULL && x == NULL && h == NULL, "out-parameters not cleared");
    RESET();
    TL_REJECT(fn(tl_ctx, c, c, X, s, X, X, 3, 2, &a, NULL, &x, &h), BK_ERR_NULL, "dB");
    TL_CHECK(a == NULL && x == NULL && h == NULL, "out-parameters not cleared");
    RESET();
    TL_REJECT(fn(tl_ctx, c, c, X, s, X, X, 3, 2, &a, &b, NULL, &h), BK_ERR_NULL, "dX");
    TL_CHECK(a == NULL && b == NULL && h == NULL, "out-parameters not cleared");
    RESET();
    TL_REJECT(fn(tl_ctx, c, c, X, s, X, X, 3, 2, &a, &b, &x, NULL), BK_ERR_NULL, "dh0");
    TL_CHECK(a == NULL && b == NULL && x == NULL, "out-parameters not cleared");
    RESET();
    TL_REJECT(fn(tl_ctx, NULL, c, X, s, X, X, 3, 2, &a, &b, &x, &h), BK_ERR_NULL, "A");
    CLEARED();
    TL_REJECT(fn(tl_ctx, c, NULL, X, s, X, X, 3, 2, &a, &b, &x, &h), BK_ERR_NULL, "B");
    TL_REJECT(fn(tl_ctx, c, c, NULL, s, X, X, 3, 2, &a, &b, &x, &h), BK_ERR_NULL, "X");
    TL_REJECT(fn(tl_ctx, c, c, X, NULL, X, X, 3, 2, &a, &b, &x, &h), BK_ERR_NULL, "h0");
    TL_REJECT(fn(tl_ctx, c, c, X, s, NULL, X, 3, 2, &a, &b, &x, &h), BK_ERR_NULL, "out");
    TL_REJECT(fn(tl_ctx, c, c, X, s, X, NULL, 3, 2, &a, &b, &x, &h), BK_ERR_NULL, "dy");
    TL_REJECT(fn(tl_ctx, c, c, X, s, X, X, -3, 2, &a, &b, &x, &h), BK_ERR_INVALID_ARGUMENT,
              "seq_len = -3");
    TL_REJECT(fn(tl_ctx, c, c, X, s, X, X, 3, -2, &a, &b, &x, &h), BK_ERR_INVALID_ARGUMENT,
              "state = -2");
    TL_REJECT(fn(tl_ctx, c, c, X, s, X, X, INT64_MAX, 2, &a, &b, &x, &h),
              BK_ERR_INVALID_ARGUMENT, "overflow");
    TL_REJECT(fn(tl_ctx, wrong, c, X, s, X, X, 3, 2, &a, &b, &x, &h), BK_ERR_INVALID_ARGUMENT,
              clen);
    TL_REJECT(fn(tl_ctx, c, wrong, X, s, X, X, 3, 2, &a, &b, &x, &h), BK_ERR_INVALID_ARGUMENT,
              "B has length");
    TL_REJECT(fn(tl_ctx, c, c, s, s, X, X, 3, 2, &a, &b, &x, &h), BK_ERR_INVALID_ARGUMENT,
              "X has length 2, expected 6");
    TL_REJECT(fn(tl_ctx, c, c, X, X, X, X, 3, 2, &a, &b, &x, &h), BK_ERR_INVALID_ARGUMENT,
              "h0 has length 6, expected 2");
    TL_REJECT(fn(tl_ctx, c, c, X, s, s, X, 3, 2, &a, &b, &x, &h), BK_ERR_INVALID_ARGUMENT,
              "out has length 2, expected 6");
    TL_REJECT(fn(tl_ctx, c, c, X, s, X, s, 3, 2, &a, &b, &x, &h), BK_ERR_INVALID_ARGUMENT,
              "dy has length 2, expected 6");
    RESET();
    TL_REJECT(fn(tl_ctx, c, c, X, s, X, X64, 3, 2, &a, &b, &x, &h), BK_ERR_DTYPE, "dy");
    CLEARED();
    bk_context *other = tl_other_ctx();
    if (other) {
      RESET();
      TL_REJECT(fn(other, c, c, X, s, X, X, 3, 2, &a, &b, &x, &h), BK_ERR_DEVICE_MISMATCH, "ctx");
      CLEARED();
    }
  }
#undef RESET
#undef CLEARED
  bk_buffer_release(s);
  bk_buffer_release(X);
  bk_buffer_release(X64);
}

/* Every allocation of a call fails in turn: the call reports
 * BK_ERR_OUT_OF_MEMORY, clears every out-parameter and leaks none of the
 * results it had already made. Covers both forms, forward and backward,
 * and the empty backward (zero-filled results). */
static void allocation_failures(void) {
  const double v[6] = {0.5, 1, 2, -1, 0.25, 3};
  bk_buffer *s = tl_buf(BK_F64, v, 2), *X = tl_buf(BK_F64, v, 6), *e = tl_buf(BK_F64, NULL, 0);
  for (int which = 0; which < 5; which++) {
    int64_t live = bk__live_buffers(), k;
    for (k = 1; k < 100; k++) {
      bk_buffer *o[4];
      for (int i = 0; i < 4; i++) o[i] = (bk_buffer *)&o[i];
      bk__inject_arm(k);
      bk_status st;
      switch (which) {
        case 0: st = bk_scan_diag(tl_ctx, s, s, X, s, 3, 2, &o[0]); break;
        case 1: st = bk_scan_diag_var(tl_ctx, X, X, X, s, 3, 2, &o[0]); break;
        case 2:
          st = bk_scan_diag_backward(tl_ctx, s, s, X, s, X, X, 3, 2, &o[0], &o[1], &o[2], &o[3]);
          break;
        case 3:
          st = bk_scan_diag_var_backward(tl_ctx, X, X, X, s, X, X, 3, 2, &o[0], &o[1], &o[2],
                                         &o[3]);
          break;
        default:
          st = bk_scan_diag_backward(tl_ctx, s, s, e, s, e, e, 0, 2, &o[0], &o[1], &o[2], &o[3]);
          break;
      }
      bk__inject_arm(0);
      const int nout = which < 2 ? 1 : 4;
      if (st == BK_OK) {
        for (int i = 0; i < nout; i++) bk_buffer_release(o[i]);
        break;
      }
      int cleared = 1;
      for (int i = 0; i < nout; i++) cleared &= o[i] == NULL;
      TL_CHECK(st == BK_ERR_OUT_OF_MEMORY && cleared && bk__live_buffers() == live,
               "case %d, failing allocation %" PRId64 ": status %d", which, k, (int)st);
    }
    TL_CHECK(k > 1 && k < 100, "case %d: the call made %" PRId64 " allocations", which, k);
  }
  bk_buffer_release(s);
  bk_buffer_release(X);
  bk_buffer_release(e);
}

int main(void) {
  tl_init();
  TL_RUN(examples_shared);
  TL_RUN(examples_var);
  TL_RUN(random_cases);
  TL_RUN(finite_differences);
  TL_RUN(empty);
  TL_RUN(forward_errors);
  TL_RUN(backward_errors);
  TL_RUN(allocation_failures);
  return tl_finish();
}
