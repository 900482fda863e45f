/*
 * xent.c — CPU cross-entropies over (rows, cols) logits: the mean weighted
 * cross-entropy and the fixed-teacher cross-entropy with its student
 * gradient.
 *
 * Everything is computed in float64 for both dtypes. Each row's
 * contribution is written to a host scratch array (rows in parallel when the
 * work is large) and the rows are then summed in index order on one thread,
 * so the loss is bitwise identical for every thread count.
 */
#include "cpu.h"

#include <math.h>

/* Maximum of row r, ignoring NaN (a NaN then reaches the sums below and
 * makes the row NaN). An all-NaN or all -inf row gives -inf, and
 * x - (-inf) = NaN then propagates. */
static double row_max(bk_dtype dt, const void *x, int64_t base, int64_t cols) {
  double m = -INFINITY;
  for (int64_t c = 0; c < cols; c++) {
    double v = bk_ld(dt, x, base + c);
    if (v > m) m = v;
  }
  return m;
}

/* sum_c exp(x[c] - m), in index order. */
static double row_sum_exp(bk_dtype dt, const void *x, int64_t base, int64_t cols, double m) {
  double s = 0.0;
  for (int64_t c = 0; c < cols; c++) s += exp(bk_ld(dt, x, base + c) - m);
  return s;
}

/* a * b with the measure-theory convention 0 * inf = 0: a zero factor
 * annihilates an infinite one. NaN still propagates. */
static double mul0(double a, double b) {
  if ((a == 0.0 && isinf(b)) || (b == 0.0 && isinf(a))) return 0.0;
  return a * b;
}

/* Sums the per-row partials in row order and stores sum / max(rows, 1). */
static void store_mean(bk_dtype dt, void *y, const double *part, int64_t rows) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; r++) total += part[r];
  bk_st(dt, y, 0, total / (double)rows);
}

/* ---- weighted mean cross-entropy ------------------------------------------- */

/*
 * Row r's sum_c w * (lse - x). When lse - x is not finite (x = -inf, or an
 * overflow of the difference between huge logits) the term is recomputed as
 * w*lse - w*x, so a tiny weight on a huge negative logit stays finite; the
 * products use 0 * inf = 0, so a zero weight contributes exactly 0 even
 * against a -inf logit. NaN in the row (through lse) still gives NaN.
 */
static double weighted_row(bk_dtype dt, const void *x, const void *w, int64_t base,
                           int64_t cols) {
  double m = row_max(dt, x, base, cols);
  double lse = m + log(row_sum_exp(dt, x, base, cols, m));
  double acc = 0.0;
  for (int64_t c = 0; c < cols; c++) {
    double xv = bk_ld(dt, x, base + c), wv = bk_ld(dt, w, base + c);
    double d = lse - xv;
    double term = wv * d;
    if (!isfinite(d)) term = mul0(wv, lse) - mul0(wv, xv);
    acc += term;
  }
  return acc;
}

bk_status bk__cpu_xent_weighted_mean(bk_context *ctx, bk_dtype dt, const void *logits,
                                     const void *w, void *y, int64_t rows, int64_t cols) {
  (void)ctx;
  double *part = bk__host_alloc("bk_xent_weighted_mean", "scratch", (size_t)rows, sizeof *part);
  if (!part) return BK_ERR_OUT_OF_MEMORY;
#pragma omp parallel for schedule(static) if (rows * cols >= BK_CPU_PARALLEL_MIN)
  for (int64_t r = 0; r < rows; r++) part[r] = weighted_row(dt, logits, w, r * cols, cols);
  store_mean(dt, y, part, rows);
  bk__host_free(part);
  return BK_OK;
}

/* ---- fixed-teacher cross-entropy ---------------------------------------------- */

/* The per-row quantities both outputs need: the student's max and sum of
 * shifted exponentials, and the teacher's. */
typedef struct teacher_row {
  double ms, zs; /* student: max, sum exp(S - ms) */
  double mt, zt; /* teacher: max, sum exp(T - mt) */
} teacher_row;

static teacher_row teacher_stats(bk_dtype dt, const void *S, const void *T, int64_t base,
                                 int64_t cols) {
  teacher_row q;
  q.ms = row_max(dt, S, base, cols);
  q.zs = row_sum_exp(dt, S, base, cols, q.ms);
  q.mt = row_max(dt, T, base, cols);
  q.zt = row_sum_exp(dt, T, base, cols, q.mt);
  return q;
}

/*
 * log sum_c exp(S - ms) - sum_c p_c * (S_c - ms), on max-shifted logits so no
 * raw exponential overflows. A teacher probability of exactly 0 contributes
 * 0 even where the student logit is -inf (0 * inf = 0), so entries masked to
 * -inf in both operands leave the loss finite.
 */
static double teacher_loss_row(bk_dtype dt, const void *S, const void *T, int64_t base,
                               int64_t cols) {
  teacher_row q = teacher_stats(dt, S, T, base, cols);
  double cross = 0.0;
  for (int64_t c = 0; c < cols; c++) {
    double p = exp(bk_ld(dt, T, base + c) - q.mt) / q.zt;
    cross += mul0(p, bk_ld(dt, S, base + c) - q.ms);
  }
  return log(q.zs) - cross;
}

/* Row r of (softmax(S_r) - p_r) / rows. */
static void teacher_grad_row(bk_dtype dt, const void *S, const void *T, void *g, int64_t base,
                             int64_t cols, double rows) {
  teacher_row q = teacher_stats(dt, S, T, base, cols);
  for (int64_t c = 0; c < cols; c++) {
    double s = exp(bk_ld(dt, S, base + c) - q.ms) / q.zs;
    double p = exp(bk_ld(dt, T, base + c) - q.mt) / q.zt;
    bk_st(dt, g, base + c, (s - p) / rows);
  }
}

bk_status bk__cpu_xent_teacher(bk_context *ctx, bk_dtype dt, const void *S, const void *T,
                               void *y, int64_t rows, int64_t cols, int gradient) {
  (void)ctx;
  if (gradient) {
#pragma omp parallel for schedule(static) if (rows * cols >= BK_CPU_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++)
      teacher_grad_row(dt, S, T, y, r * cols, cols, (double)rows);
    return BK_OK;
  }
  double *part = bk__host_alloc("bk_xent_teacher", "scratch", (size_t)rows, sizeof *part);
  if (!part) return BK_ERR_OUT_OF_MEMORY;
#pragma omp parallel for schedule(static) if (rows * cols >= BK_CPU_PARALLEL_MIN)
  for (int64_t r = 0; r < rows; r++) part[r] = teacher_loss_row(dt, S, T, r * cols, cols);
  store_mean(dt, y, part, rows);
  bk__host_free(part);
  return BK_OK;
}
