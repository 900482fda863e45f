/*
 * test_xent.c — bk_xent_weighted_mean and bk_xent_teacher (loss and student
 * gradient, the gradient also checked by central finite differences).
 */
#include "testlib.h"

#include "core/internal.h"

/* The contract's examples are printed to 7 digits. */
static double example_tol(bk_dtype dt) { return fmax(1e-6, tl_tol_red(dt)); }

/* ---- float64 host references -------------------------------------------------------- */

static double ref_row_max(const double *x, int64_t cols) {
  double m = -INFINITY;
  for (int64_t c = 0; c < cols; c++)
    if (x[c] > m) m = x[c];
  return m;
}

/* Weighted mean cross-entropy; *mag receives sum |term| / rows, the natural
 * scale of the result. */
static double ref_weighted(const double *x, const double *w, int64_t rows, int64_t cols,
                           double *mag) {
  double total = 0, abs_total = 0;
  for (int64_t r = 0; r < rows; r++) {
    const double *xr = x + r * cols, *wr = w + r * cols;
    double m = ref_row_max(xr, cols), s = 0;
    for (int64_t c = 0; c < cols; c++) s += exp(xr[c] - m);
    double lse = m + log(s);
    for (int64_t c = 0; c < cols; c++) {
      double t = wr[c] * (lse - xr[c]);
      total += t;
      abs_total += fabs(t);
    }
  }
  *mag = abs_total / (double)(rows > 1 ? rows : 1);
  return total / (double)(rows > 1 ? rows : 1);
}

/* a * b with 0 * inf = 0, as the contract's cross term. */
static double mul0(double a, double b) {
  if ((a == 0.0 && isinf(b)) || (b == 0.0 && isinf(a))) return 0.0;
  return a * b;
}

/* Teacher loss and gradient (rows, cols): the contract's formulas
 * evaluated literally in float64 (as the CPU backend does), so rows holding
 * infinities or NaN get their IEEE results; *mag receives the loss scale
 * over the finite rows. */
static double ref_teacher(const double *S, const double *T, int64_t rows, int64_t cols,
                          double *grad, double *mag) {
  double total = 0, abs_total = 0;
  for (int64_t r = 0; r < rows; r++) {
    const double *sr = S + r * cols, *tr = T + r * cols;
    double ms = ref_row_max(sr, cols), mt = ref_row_max(tr, cols), zs = 0, zt = 0, cross = 0;
    for (int64_t c = 0; c < cols; c++) {
      zs += exp(sr[c] - ms);
      zt += exp(tr[c] - mt);
    }
    for (int64_t c = 0; c < cols; c++) {
      double p = exp(tr[c] - mt) / zt;
      cross += mul0(p, sr[c] - ms);
      grad[r * cols + c] = (exp(sr[c] - ms) / zs - p) / (double)rows;
    }
    double l = log(zs) - cross;
    total += l;
    if (isfinite(l)) abs_total += fabs(log(zs)) + fabs(cross);
  }
  *mag = abs_total / (double)rows;
  return total / (double)rows;
}

/* The single value of a one-element result (NaN on failure); releases y. */
static double loss_value(bk_status st, bk_buffer *y) {
  double v = NAN;
  if (st == BK_OK && bk_buffer_length(y) == 1) {
    double *g = tl_read(y);
    v = g[0];
    free(g);
  }
  bk_buffer_release(y);
  return v;
}

static double weighted(bk_dtype dt, const double *x, const double *w, int64_t rows,
                       int64_t cols) {
  bk_buffer *bx = tl_buf(dt, x, rows * cols), *bw = tl_buf(dt, w, rows * cols), *y = NULL;
  bk_status st = TL_OK(bk_xent_weighted_mean(tl_ctx, bx, bw, rows, cols, &y));
  double v = loss_value(st, y);
  bk_buffer_release(bx);
  bk_buffer_release(bw);
  return v;
}

static double teacher(bk_dtype dt, const double *S, const double *T, int64_t rows,
                      int64_t cols) {
  bk_buffer *bs = tl_buf(dt, S, rows * cols), *bt = tl_buf(dt, T, rows * cols), *y = NULL;
  bk_status st = TL_OK(bk_xent_teacher(tl_ctx, bs, bt, rows, cols, 0, &y));
  double v = loss_value(st, y);
  bk_buffer_release(bs);
  bk_buffer_release(bt);
  return v;
}

/* |got - want| <= tol * |want| with NaN and infinities matched exactly. */
#define CHECK_REL(got, want, tol)                                                          \
  TL_CHECK(((isnan(want) && isnan(got)) || (isinf(want) && (got) == (want)) ||            \
            fabs((got) - (want)) <= (tol) * fabs(want)),                                  \
           "%s = %.17g, expected %.17g", #got, (double)(got), (double)(want))

/* ---- bk_xent_weighted_mean ------------------------------------------------------------ */

static void weighted_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double x[] = {1, 2, 3, 0.5, -0.5, 0};
    const double w[] = {0, 0, 1, 0.2, 0.3, 0.5};
    double got = weighted(dt, x, w, 2, 3);
    CHECK_REL(got, 0.8189378, example_tol(dt));
  }
}

/* The recompute rule: a zero weight contributes exactly 0 even against a
 * -inf logit, a tiny weight on a term whose log-probability overflows stays
 * finite, a positive weight on a -inf logit gives +inf and NaN propagates. */
static void weighted_recompute(void) {
  const double inf = INFINITY;
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    {
      const double x[] = {0, -inf, 1, 2, 2, -inf};
      const double w[] = {0.5, 0, 0.5, 1, 0, 0};
      double lse0 = 1 + log(exp(-1.0) + 1), lse1 = 2 + log(2.0);
      double want = (0.5 * lse0 + 0.5 * (lse0 - 1) + (lse1 - 2)) / 2;
      double got = weighted(dt, x, w, 2, 3);
      CHECK_REL(got, want, tl_tol_red(dt));
    }
    {
      const double x[] = {0, -inf};
      const double w[] = {0, 1};
      double got = weighted(dt, x, w, 1, 2);
      CHECK_REL(got, inf, 0.0);
    }
    {
      const double x[] = {0, NAN, 1};
      const double w[] = {1, 0, 0};
      double got = weighted(dt, x, w, 1, 3);
      TL_CHECK(isnan(got), "a NaN logit must give NaN even with a zero weight, got %g", got);
    }
    {
      /* The biggest logits of the dtype: lse - x overflows float64 for the
       * f64 case (1e308 - -1e308) and w*lse - w*x rescues it. */
      double big = dt == BK_F64 ? 1e308 : 3e38, tiny = dt == BK_F64 ? 1e-10 : 1e-30;
      const double x[] = {big, -big}, w[] = {0, tiny};
      double want = w[1] * x[0] - w[1] * x[1];
      double got = weighted(dt, x, w, 1, 2);
      TL_CHECK(isfinite(got), "tiny weight gave %g", got);
      CHECK_REL(got, want, tl_tol_red(dt));
    }
  }
}

static void weighted_random(void) {
  static const int64_t shapes[][2] = {{1, 1},   {3, 7},     {37, 2},    {50, 15},
                                      {17, 100}, {64, 33}, {4, 5000}, {300, 200}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
      double *x = tl_xmalloc((size_t)n * sizeof *x), *w = tl_xmalloc((size_t)n * sizeof *w);
      tl_seed(300 + s);
      for (int64_t i = 0; i < n; i++) x[i] = 3 * tl_randn();
      tl_fill_uniform(w, n, 0, 1);
      tl_round(dt, x, n);
      tl_round(dt, w, n);
      double mag, want = ref_weighted(x, w, rows, cols, &mag);
      bk_buffer *bx = tl_buf(dt, x, n), *bw = tl_buf(dt, w, n), *y = NULL, *y2 = NULL;
      if (TL_OK(bk_xent_weighted_mean(tl_ctx, bx, bw, rows, cols, &y)) == BK_OK) {
        TL_BUF_CLOSE(y, &want, 1, tl_tol_red(dt), mag);
        if (TL_OK(bk_xent_weighted_mean(tl_ctx, bx, bw, rows, cols, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "xent_weighted_mean is not deterministic");
      }
      TL_UNCHANGED(bx, x, n);
      TL_UNCHANGED(bw, w, n);
      bk_buffer_release(y);
      bk_buffer_release(y2);
      bk_buffer_release(bx);
      bk_buffer_release(bw);
      free(x);
      free(w);
    }
  }
}

static void weighted_empty(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    bk_buffer *e = tl_buf(dt, NULL, 0), *y = NULL;
    static const int64_t shapes[][2] = {{0, 0}, {0, 5}, {3, 0}};
    for (int i = 0; i < 3; i++) {
      if (TL_OK(bk_xent_weighted_mean(tl_ctx, e, e, shapes[i][0], shapes[i][1], &y)) == BK_OK)
        TL_BUF_EXACT(y, ((double[]){0}), 1);
      bk_buffer_release(y);
      y = NULL;
    }
    bk_buffer_release(e);
  }
}

static void weighted_errors(void) {
  double x[6] = {0};
  bk_buffer *b = tl_buf(BK_F32, x, 6), *b64 = tl_buf(BK_F64, x, 6), *b4 = tl_buf(BK_F32, x, 4);
  bk_buffer *y = (bk_buffer *)&y;
  TL_REJECT(bk_xent_weighted_mean(tl_ctx, b, b, 2, 3, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_xent_weighted_mean(tl_ctx, NULL, b, 2, 3, &y), BK_ERR_NULL, "logits");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_xent_weighted_mean(tl_ctx, b, NULL, 2, 3, &y), BK_ERR_NULL, "weights");
  TL_REJECT(bk_xent_weighted_mean(tl_ctx, b, b, -1, 3, &y), BK_ERR_INVALID_ARGUMENT, "rows");
  TL_REJECT(bk_xent_weighted_mean(tl_ctx, b, b, 2, -3, &y), BK_ERR_INVALID_ARGUMENT, "cols");
  TL_REJECT(bk_xent_weighted_mean(tl_ctx, b, b, INT64_MAX, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "overflow");
  TL_REJECT(bk_xent_weighted_mean(tl_ctx, b4, b, 2, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "logits has length 4, expected 6");
  TL_REJECT(bk_xent_weighted_mean(tl_ctx, b, b4, 2, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "weights has length 4, expected 6");
  TL_REJECT(bk_xent_weighted_mean(tl_ctx, b, b64, 2, 3, &y), BK_ERR_DTYPE, "weights");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) {
    bk_buffer *bo = tl_buf_on(other, BK_F32, x, 6);
    TL_REJECT(bk_xent_weighted_mean(tl_ctx, b, bo, 2, 3, &y), BK_ERR_DEVICE_MISMATCH, "weights");
    TL_REJECT(bk_xent_weighted_mean(other, b, b, 2, 3, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
    bk_buffer_release(bo);
  }
  bk_buffer_release(b);
  bk_buffer_release(b64);
  bk_buffer_release(b4);
}

/* ---- bk_xent_teacher ------------------------------------------------------------------------ */

static void teacher_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double S[] = {1, 2, 3, 0.5, -0.5, 0}, T[] = {3, 2, 1, 0, 0, 0};
    const double grad[] = {-0.2876052, 0, 0.2876052, 0.0865735, -0.0735048, -0.0130687};
    double got = teacher(dt, S, T, 2, 3);
    CHECK_REL(got, 1.5815430, example_tol(dt));
    bk_buffer *bs = tl_buf(dt, S, 6), *bt = tl_buf(dt, T, 6), *y = NULL;
    if (TL_OK(bk_xent_teacher(tl_ctx, bs, bt, 2, 3, 1, &y)) == BK_OK)
      TL_BUF_CLOSE(y, grad, 6, example_tol(dt), 0.2876052);
    bk_buffer_release(y);
    bk_buffer_release(bs);
    bk_buffer_release(bt);
  }
}

/* Huge logits are shifted before exponentiating; entries masked to -inf in
 * both operands drop out (teacher probability 0 contributes 0); a student
 * -inf where the teacher has mass makes the loss +inf. */
static void teacher_special(void) {
  const double inf = INFINITY;
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    {
      const double S[] = {1000, 1001, 999}, T[] = {-1000, -999, -1001};
      const double S0[] = {1, 2, 0}, T0[] = {1, 2, 0};
      double want = teacher(BK_F64, S0, T0, 1, 3);
      double got = teacher(dt, S, T, 1, 3);
      CHECK_REL(got, want, tl_tol_red(dt));
    }
    {
      const double S[] = {0, -inf, 1}, T[] = {1, -inf, 0};
      const double S2[] = {0, 1}, T2[] = {1, 0};
      double got = teacher(dt, S, T, 1, 3), want = teacher(dt, S2, T2, 1, 2);
      TL_CHECK(isfinite(got), "masked entries gave loss %g", got);
      CHECK_REL(got, want, tl_tol_red(dt));
      bk_buffer *bs = tl_buf(dt, S, 3), *bt = tl_buf(dt, T, 3), *y = NULL;
      if (TL_OK(bk_xent_teacher(tl_ctx, bs, bt, 1, 3, 1, &y)) == BK_OK) {
        double *g = tl_read(y);
        TL_CHECK(g[1] == 0 && !signbit(g[1]), "masked gradient entry is %g, expected +0", g[1]);
        TL_CHECK(fabs(g[0] + g[2]) <= tl_tol_red(dt), "gradient row does not sum to 0");
        free(g);
      }
      bk_buffer_release(y);
      bk_buffer_release(bs);
      bk_buffer_release(bt);
    }
    {
      const double S[] = {0, -inf}, T[] = {0, 0};
      double got = teacher(dt, S, T, 1, 2);
      CHECK_REL(got, inf, 0.0);
    }
    {
      const double S[] = {0, NAN}, T[] = {0, 0};
      double got = teacher(dt, S, T, 1, 2);
      TL_CHECK(isnan(got), "a NaN student logit must give NaN, got %g", got);
    }
  }
}

/* S and T (rows, cols), rounded to dt here: the loss and the gradient
 * against the float64 reference, each computed twice with the same bits,
 * the inputs unchanged. masked_at: the 3 columns of row 1 whose gradient
 * must be exactly +0, or NULL; `kind` only names the case in messages. */
static void teacher_check(bk_dtype dt, double *S, double *T, int64_t rows, int64_t cols,
                          const int64_t *masked_at, int kind) {
  const int64_t n = rows * cols;
  double *grad = tl_xmalloc((size_t)n * sizeof *grad);
  tl_round(dt, S, n);
  tl_round(dt, T, n);
  double mag, want = ref_teacher(S, T, rows, cols, grad, &mag);
  bk_buffer *bs = tl_buf(dt, S, n), *bt = tl_buf(dt, T, n);
  for (int gradient = 0; gradient <= 1; gradient++) {
    bk_buffer *y = NULL, *y2 = NULL;
    if (TL_OK(bk_xent_teacher(tl_ctx, bs, bt, rows, cols, gradient, &y)) == BK_OK) {
      if (gradient) {
        TL_BUF_CLOSE(y, grad, n, tl_tol_red(dt), 1.0 / (double)rows);
        if (masked_at) {
          double *g = tl_read(y);
          for (int j = 0; j < 3; j++) {
            const double v = g[cols + masked_at[j]];
            TL_CHECK(v == 0 && !signbit(v), "%s %" PRId64 "x%" PRId64
                     ": masked gradient entry is %g, expected +0", tl_dtname(dt), rows, cols, v);
          }
          free(g);
        }
      } else {
        TL_BUF_CLOSE(y, &want, 1, tl_tol_red(dt), mag);
      }
      if (TL_OK(bk_xent_teacher(tl_ctx, bs, bt, rows, cols, gradient, &y2)) == BK_OK)
        TL_CHECK(tl_same_bits(y, y2), "%s %" PRId64 "x%" PRId64 " kind %d gradient %d: not "
                 "deterministic", tl_dtname(dt), rows, cols, kind, gradient);
    }
    bk_buffer_release(y);
    bk_buffer_release(y2);
  }
  TL_UNCHANGED(bs, S, n);
  TL_UNCHANGED(bt, T, n);
  bk_buffer_release(bs);
  bk_buffer_release(bt);
  free(grad);
}

static void teacher_random(void) {
  static const int64_t shapes[][2] = {{1, 1},   {3, 7},     {37, 2},    {50, 15},
                                      {17, 100}, {64, 33}, {4, 5000}, {300, 200}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
      double *S = tl_xmalloc((size_t)n * sizeof *S), *T = tl_xmalloc((size_t)n * sizeof *T);
      tl_seed(400 + s);
      for (int64_t i = 0; i < n; i++) {
        S[i] = 3 * tl_randn();
        T[i] = 2 * tl_randn();
      }
      teacher_check(dt, S, T, rows, cols, NULL, -1);
      free(S);
      free(T);
    }
  }
}

/* The gradient output against central differences of the loss output, in
 * float64: dL/dS[i] ~ (L(S + h e_i) - L(S - h e_i)) / 2h. */
static void teacher_finite_differences(void) {
  const int64_t rows = 3, cols = 5, n = rows * cols;
  const double h = 1e-5;
  double S[15], T[15], fd[15];
  tl_seed(500);
  tl_fill_randn(S, n);
  tl_fill_randn(T, n);
  T[4] = 6; /* a sharp teacher row */
  for (int64_t i = 0; i < n; i++) {
    double keep = S[i];
    S[i] = keep + h;
    double up = teacher(BK_F64, S, T, rows, cols);
    S[i] = keep - h;
    double down = teacher(BK_F64, S, T, rows, cols);
    S[i] = keep;
    fd[i] = (up - down) / (2 * h);
  }
  bk_buffer *bs = tl_buf(BK_F64, S, n), *bt = tl_buf(BK_F64, T, n), *y = NULL;
  if (TL_OK(bk_xent_teacher(tl_ctx, bs, bt, rows, cols, 1, &y)) == BK_OK)
    TL_BUF_CLOSE(y, fd, n, 1e-8, 1.0);
  bk_buffer_release(y);
  bk_buffer_release(bs);
  bk_buffer_release(bt);
}

static void teacher_empty(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    bk_buffer *e = tl_buf(dt, NULL, 0), *y = NULL;
    static const int64_t shapes[][2] = {{0, 0}, {0, 5}, {3, 0}};
    for (int i = 0; i < 3; i++) {
      if (TL_OK(bk_xent_teacher(tl_ctx, e, e, shapes[i][0], shapes[i][1], 0, &y)) == BK_OK)
        TL_BUF_EXACT(y, ((double[]){0}), 1);
      bk_buffer_release(y);
      y = NULL;
      if (TL_OK(bk_xent_teacher(tl_ctx, e, e, shapes[i][0], shapes[i][1], 1, &y)) == BK_OK)
        TL_BUF_EXACT(y, NULL, 0);
      bk_buffer_release(y);
      y = NULL;
    }
    bk_buffer_release(e);
  }
}

static void teacher_errors(void) {
  double x[6] = {0};
  bk_buffer *b = tl_buf(BK_F32, x, 6), *b64 = tl_buf(BK_F64, x, 6), *b4 = tl_buf(BK_F32, x, 4);
  bk_buffer *y = (bk_buffer *)&y;
  TL_REJECT(bk_xent_teacher(tl_ctx, b, b, 2, 3, 0, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_xent_teacher(tl_ctx, NULL, b, 2, 3, 0, &y), BK_ERR_NULL, "student");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_xent_teacher(tl_ctx, b, NULL, 2, 3, 0, &y), BK_ERR_NULL, "teacher");
  TL_REJECT(bk_xent_teacher(tl_ctx, b, b, -2, 3, 0, &y), BK_ERR_INVALID_ARGUMENT, "rows");
  TL_REJECT(bk_xent_teacher(tl_ctx, b, b, 2, -1, 0, &y), BK_ERR_INVALID_ARGUMENT, "cols");
  TL_REJECT(bk_xent_teacher(tl_ctx, b, b, 3, INT64_MAX, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "overflow");
  TL_REJECT(bk_xent_teacher(tl_ctx, b, b, 2, 3, 2, &y), BK_ERR_INVALID_ARGUMENT, "gradient = 2");
  TL_REJECT(bk_xent_teacher(tl_ctx, b, b, 2, 3, -1, &y), BK_ERR_INVALID_ARGUMENT, "gradient");
  TL_REJECT(bk_xent_teacher(tl_ctx, b4, b, 2, 3, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "student has length 4, expected 6");
  TL_REJECT(bk_xent_teacher(tl_ctx, b, b4, 2, 3, 1, &y), BK_ERR_INVALID_ARGUMENT,
            "teacher has length 4, expected 6");
  TL_REJECT(bk_xent_teacher(tl_ctx, b, b64, 2, 3, 0, &y), BK_ERR_DTYPE, "teacher");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) {
    bk_buffer *bo = tl_buf_on(other, BK_F32, x, 6);
    TL_REJECT(bk_xent_teacher(tl_ctx, b, bo, 2, 3, 0, &y), BK_ERR_DEVICE_MISMATCH, "teacher");
    TL_REJECT(bk_xent_teacher(other, b, b, 2, 3, 1, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
    bk_buffer_release(bo);
  }
  bk_buffer_release(b);
  bk_buffer_release(b64);
  bk_buffer_release(b4);
}

/* ---- wide rows on CUDA (the cluster-cached path) -------------------------------------------- */

/* Special values put into rows 1 and rows-2 of a wide case, at the first,
 * a middle and the last column (so in the first, a middle and the last
 * block of a cluster). */
enum { WIDE_PLAIN, WIDE_MASKED, WIDE_STUDENT_NEG_INF, WIDE_TEACHER_NAN, WIDE_STUDENT_POS_INF,
       WIDE_TEACHER_ALL_NEG_INF, WIDE_KINDS, WIDE_LATE_MAX = WIDE_KINDS, WIDE_ASCENDING };

static void wide_case(bk_dtype dt, int64_t rows, int64_t cols, int kind) {
  const double inf = INFINITY;
  const int64_t n = rows * cols;
  double *S = tl_xmalloc((size_t)n * sizeof *S), *T = tl_xmalloc((size_t)n * sizeof *T);
  tl_seed(600 + (uint64_t)kind + (uint64_t)cols);
  for (int64_t i = 0; i < n; i++) {
    S[i] = 3 * tl_randn();
    T[i] = 2 * tl_randn();
  }
  /* Maxima that rise late in a row, in both operands, by 100 (float32) or
   * 700 (float64: the earlier terms fall near the end of exp's range): one
   * jump in the last quarter of every third row, and ascending rows, so the
   * online statistics rescale late and in nearly every batch. */
  const double jump = dt == BK_F64 ? 700 : 100;
  for (int64_t r = 0; r < rows && kind >= WIDE_LATE_MAX; r++) {
    if (kind == WIDE_LATE_MAX && r % 3 == 0) {
      const int64_t c = cols - 1 - (r * 7) % (cols / 4);
      S[r * cols + c] += jump;
      T[r * cols + (c + cols - 5) % cols] += jump;
    }
    if (kind == WIDE_ASCENDING && r % 2 == 1)
      for (int64_t c = 0; c < cols; c++) {
        S[r * cols + c] += jump * 3.0 * (double)c / (double)cols;
        T[r * cols + c] += jump * 2.5 * (double)c / (double)cols;
      }
  }
  const int64_t at[3] = {0, cols / 2 + 1, cols - 1};
  const int64_t special_rows[2] = {1, rows - 2};
  for (int k = 0; k < 2 && kind != WIDE_PLAIN && kind < WIDE_KINDS; k++) {
    const int64_t r = special_rows[k];
    if (kind == WIDE_TEACHER_ALL_NEG_INF) {
      for (int64_t c = 0; c < cols; c++) T[r * cols + c] = -inf;
      continue;
    }
    for (int j = 0; j < 3; j++) {
      const int64_t i = r * cols + at[j];
      if (kind == WIDE_MASKED) S[i] = T[i] = -inf;
      if (kind == WIDE_STUDENT_NEG_INF) S[i] = -inf;
      if (kind == WIDE_TEACHER_NAN) T[i] = NAN;
      if (kind == WIDE_STUDENT_POS_INF && j == 1) S[i] = inf;
    }
  }
  teacher_check(dt, S, T, rows, cols, kind == WIDE_MASKED ? at : NULL, kind);
  free(S);
  free(T);
}

/* Shapes that take the CUDA cluster-cached path (rows cached across 2 to
 * 16 blocks), its exact fit, a tail share, the widest share, and widths
 * next to them that fall back (an odd width, too wide a share). Large:
 * run on CUDA only (the CPU backend has no shape-dependent path here). */
static void teacher_wide(void) {
  if (tl_dev.kind != BK_DEVICE_CUDA) return;
  static const int64_t f32_shapes[][2] = {
      {140, 4100},   /* two blocks, the last share shorter */
      {40, 32768},   /* eight blocks, exact fit (the PERF width) */
      {20, 65536},   /* sixteen blocks */
      {20, 196608},  /* sixteen blocks, the widest share */
      {8, 196612},   /* too wide a share: register path */
      {40, 32770},   /* width not a multiple of 4: scalar path */
  };
  static const int64_t f64_shapes[][2] = {
      {140, 2050}, {40, 16384}, {20, 32768}, {20, 98304}, {8, 98306}, {40, 32769},
  };
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const int64_t(*shapes)[2] = dt == BK_F32 ? f32_shapes : f64_shapes;
    for (int s = 0; s < 6; s++) wide_case(dt, shapes[s][0], shapes[s][1], WIDE_PLAIN);
    /* The special rows on the PERF-like width. */
    for (int kind = WIDE_MASKED; kind < WIDE_KINDS; kind++)
      wide_case(dt, shapes[1][0], shapes[1][1], kind);
    /* Many rows per cluster, so staged rows and exchange parities cycle. */
    const int64_t lr = getenv("BK_TEST_SMALL") ? 300 : dt == BK_F32 ? 2048 : 1024;
    const int64_t lc = dt == BK_F32 ? 8192 : 16384;
    wide_case(dt, lr, lc, WIDE_PLAIN);
    wide_case(dt, lr, lc, WIDE_LATE_MAX);
    wide_case(dt, lr, lc, WIDE_TEACHER_NAN);
    /* Two shares of unequal length (3073 and 3072 vectors). */
    wide_case(dt, 300, dt == BK_F32 ? 12292 : 6146, WIDE_PLAIN);
  }
}

/* Rows whose maxima rise late and far, plus the special values on the same
 * shape (at least 2 rows per multiprocessor and 1024 columns: the
 * block-per-row paths). */
static void teacher_late_max(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    wide_case(dt, 300, 2048, WIDE_LATE_MAX);
    wide_case(dt, 300, 2052, WIDE_ASCENDING);
    wide_case(dt, 300, 1540, WIDE_PLAIN);
    if (tl_dev.kind != BK_DEVICE_CUDA) continue;
    for (int kind = WIDE_MASKED; kind < WIDE_KINDS; kind++) wide_case(dt, 300, 2048, kind);
    /* More rows than resident blocks: a block goes on to further rows. */
    if (getenv("BK_TEST_SMALL")) continue;
    wide_case(dt, 800, 2048, WIDE_LATE_MAX);
    wide_case(dt, 800, 2048, WIDE_STUDENT_NEG_INF);
    wide_case(dt, 800, 2048, WIDE_TEACHER_NAN);
  }
}

/* Every allocation the calls make fails in turn: BK_ERR_OUT_OF_MEMORY, out
 * NULL, no buffer left behind. */
/* ---- narrow rows (the CUDA lane groups) ----------------------------------------------- */

/* Widths around the CUDA lane groups' choices for rows of up to 64 vectors
 * (1 to 32 lanes, one or two vectors a lane; single elements for widths
 * that are not a multiple of the vector, 16-byte vectors for the others;
 * the first widths past them), with row counts that leave a warp's rows in
 * flight partly filled. Row 5 holds a -inf logit with weight 0 (and a -inf
 * in both teacher operands), which sends its lane group, and only it, to
 * the literal evaluation: the loss stays finite and the other rows keep
 * the fast formulas. */
static void narrow_edges(void) {
  /* Across every lane-group plan of the narrow kernels and into the
   * row kernels: up to 256 columns read element by element, 512 (losses)
   * and 1024 (gradient) float32 columns of 16-byte vectors. */
  static const int64_t widths[] = {1,   2,   3,   4,   5,   7,   8,   9,   15,  16,  17,
                                   31,  32,  33,  63,  64,  65,  127, 128, 129, 252, 256,
                                   257, 260, 384, 511, 512, 516, 1020, 1024, 1028};
  static const int64_t row_counts[] = {37, 300};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
      for (size_t rc = 0; rc < sizeof row_counts / sizeof row_counts[0]; rc++) {
        const int64_t rows = row_counts[rc], cols = widths[wi], n = rows * cols;
        double *x = tl_xmalloc((size_t)n * sizeof *x), *w = tl_xmalloc((size_t)n * sizeof *w);
        tl_seed(700 + 10 * wi + rc);
        for (int64_t i = 0; i < n; i++) x[i] = 3 * tl_randn();
        tl_fill_uniform(w, n, 0, 1);
        const int64_t lit = 5 * cols + cols / 2;
        x[lit] = -INFINITY;
        w[lit] = 0;
        tl_round(dt, x, n);
        tl_round(dt, w, n);
        /* The contract's terms: w*(lse - x), or w*lse - w*x with 0*inf = 0. */
        double total = 0, mag = 0;
        for (int64_t r = 0; r < rows; r++) {
          const double *xr = x + r * cols, *wr = w + r * cols;
          const double m = ref_row_max(xr, cols);
          double sum = 0;
          for (int64_t c = 0; c < cols; c++) sum += exp(xr[c] - m);
          const double lse = m + log(sum);
          for (int64_t c = 0; c < cols; c++) {
            const double dd = lse - xr[c];
            const double t = isfinite(dd) ? wr[c] * dd : mul0(wr[c], lse) - mul0(wr[c], xr[c]);
            total += t;
            mag += fabs(t);
          }
        }
        const double want = total / (double)rows;
        bk_buffer *bx = tl_buf(dt, x, n), *bw = tl_buf(dt, w, n), *y = NULL, *y2 = NULL;
        if (TL_OK(bk_xent_weighted_mean(tl_ctx, bx, bw, rows, cols, &y)) == BK_OK) {
          TL_BUF_CLOSE(y, &want, 1, tl_tol_red(dt), mag / (double)rows);
          if (TL_OK(bk_xent_weighted_mean(tl_ctx, bx, bw, rows, cols, &y2)) == BK_OK)
            TL_CHECK(tl_same_bits(y, y2), "%s %" PRId64 "x%" PRId64 ": not deterministic",
                     tl_dtname(dt), rows, cols);
        }
        bk_buffer_release(y);
        bk_buffer_release(y2);
        bk_buffer_release(bx);
        bk_buffer_release(bw);
        /* The teacher pair: x as the student, w's logits as the teacher, both
         * -inf at the same entry of row 5. */
        for (int64_t i = 0; i < n; i++) w[i] = 2 * tl_randn();
        w[lit] = -INFINITY;
        teacher_check(dt, x, w, rows, cols, NULL, 0);
        free(x);
        free(w);
      }
    }
  }
}

static void xent_alloc_failures(void) {
  double x[6] = {1, 2, 3, 4, 5, 6};
  bk_buffer *b = tl_buf(BK_F64, x, 6);
  int64_t live = bk__live_buffers();
  for (int which = 0; which < 3; which++) {
    for (int64_t at = 1; at < 20; at++) {
      bk_buffer *y = (bk_buffer *)&y;
      bk__inject_arm(at);
      bk_status st = which == 0 ? bk_xent_weighted_mean(tl_ctx, b, b, 2, 3, &y)
                                : bk_xent_teacher(tl_ctx, b, b, 2, 3, which - 1, &y);
      bk__inject_arm(0);
      if (st == BK_OK) {
        bk_buffer_release(y);
        break;
      }
      TL_CHECK(st == BK_ERR_OUT_OF_MEMORY && y == NULL, "call %d, allocation %" PRId64 ": status %d",
               which, at, (int)st);
      TL_CHECK(bk__live_buffers() == live, "call %d, allocation %" PRId64 ": a buffer leaked",
               which, at);
    }
  }
  bk_buffer_release(b);
}

int main(void) {
  tl_init();
  TL_RUN(weighted_examples);
  TL_RUN(weighted_recompute);
  TL_RUN(weighted_random);
  TL_RUN(weighted_empty);
  TL_RUN(weighted_errors);
  TL_RUN(teacher_examples);
  TL_RUN(teacher_special);
  TL_RUN(teacher_random);
  TL_RUN(teacher_finite_differences);
  TL_RUN(teacher_empty);
  TL_RUN(teacher_errors);
  TL_RUN(teacher_wide);
  TL_RUN(teacher_late_max);
  TL_RUN(narrow_edges);
  TL_RUN(xent_alloc_failures);
  return tl_finish();
}
