/*
 * xent.c — CPU cross-entropies over (rows, cols) logits: the mean weighted
 * cross-entropy and the fixed-teacher cross-entropy with its student
 * gradient.
 *
 * Each row's maximum and exponentials come from the typed kernels (one
 * exponential per element, in the data's type: within 2 ulp, typed_t.h);
 * the log-sum-exp, every term and every sum are float64. Each row's
 * contribution is written to a host scratch array (each thread a contiguous
 * chunk of rows at a time) and the rows are then summed in index order on one thread,
 * so the loss is bitwise identical for every thread count. The gradient is
 * written once per element, streaming when it is larger than the cache.
 * Rows narrower than BK_LANES go BK_LANES at a time, one per vector lane
 * (xent_t.h).
 */
#include "cpu.h"
#include "vec.h"

#include <math.h>

/* a * b with the measure-theory convention 0 * inf = 0: a zero factor
 * annihilates an infinite one. NaN still propagates. */
BK_INLINE double mul0(double a, double b) {
  return (a == 0.0 && fabs(b) == INFINITY) || (b == 0.0 && fabs(a) == INFINITY) ? 0.0 : a * b;
}

/*
 * One term w * (lse - x). When lse - x is not finite (x = -inf, or an
 * overflow of the difference between huge logits) the term is recomputed as
 * w*lse - w*x, so a tiny weight on a huge negative logit stays finite; the
 * products use 0 * inf = 0, so a zero weight contributes exactly 0 even
 * against a -inf logit. NaN in the row (through lse) still gives NaN.
 */
BK_INLINE double xent_term(double w, double x, double lse) {
  const double d = lse - x;
  return fabs(d) < INFINITY ? w * d : mul0(w, lse) - mul0(w, x);
}

/* The per-row quantities both teacher outputs need: the student's max and
 * sum of shifted exponentials, and the teacher's. */
typedef struct teacher_row {
  double ms, zs; /* student: max, sum exp(S - ms) */
  double mt, zt; /* teacher: max, sum exp(T - mt) */
} teacher_row;

#define BK_TEMPLATE "xent_t.h"
#include "instantiate.h"

/* Sums the per-row partials in row order and stores sum / max(rows, 1). */
static void store_mean(bk_dtype dt, void *y, const double *part, int64_t rows) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; r++) total += part[r];
  bk_st(dt, y, 0, total / (double)(rows > 1 ? rows : 1));
}

/* Scratch rows for the teacher kernels: `per` values per thread when a
 * row's exponentials fit BK_CPU_SCRATCH_MAX, else none (they are then
 * evaluated again where they are needed). *ok is 0 when allocating failed. */
static void *row_scratch(const char *fn, int threads, int64_t per, size_t es, int *ok) {
  *ok = 1;
  if (per * (int64_t)es > BK_CPU_SCRATCH_MAX) return NULL;
  void *p = bk__host_alloc(fn, "scratch", (size_t)threads * (size_t)per, es);
  *ok = p != NULL;
  return p;
}

/* ---- weighted mean cross-entropy ------------------------------------------- */

bk_status bk__cpu_xent_weighted_mean(bk_context *ctx, bk_dtype dt, const void *logits,
                                     const void *w, void *y, int64_t rows, int64_t cols) {
  (void)ctx;
  double *part = bk__host_alloc("bk_xent_weighted_mean", "scratch", (size_t)rows, sizeof *part);
  if (!part) return BK_ERR_OUT_OF_MEMORY;
  const int threads = bk_cpu_threads(rows * cols);
  const int64_t chunk = bk_cpu_chunk(rows, cols, threads);
  atomic_llong next = 0;
#pragma omp parallel num_threads(threads) if (threads > 1)
  for (int64_t r0, r1; bk_cpu_take(&next, rows, chunk, &r0, &r1);) {
    if (cols > 0 && cols < BK_LANES) {
      if (dt == BK_F32)
        weighted_narrow_f32(logits, w, part, r0, r1, cols);
      else
        weighted_narrow_f64(logits, w, part, r0, r1, cols);
      continue;
    }
    for (int64_t r = r0; r < r1; r++)
      part[r] = dt == BK_F32 ? weighted_row_f32((const float *)logits + r * cols,
                                                (const float *)w + r * cols, cols)
                             : weighted_row_f64((const double *)logits + r * cols,
                                                (const double *)w + r * cols, cols);
  }
  store_mean(dt, y, part, rows);
  bk__host_free(part);
  return BK_OK;
}

/* ---- fixed-teacher cross-entropy ---------------------------------------------- */

bk_status bk__cpu_xent_teacher(bk_context *ctx, bk_dtype dt, const void *S, const void *T,
                               void *y, int64_t rows, int64_t cols, int gradient) {
  const char *fn = "bk_xent_teacher";
  const size_t es = dt == BK_F32 ? sizeof(float) : sizeof(double);
  const int threads = bk_cpu_threads(rows * cols);
  int ok;
  /* The gradient keeps both rows' exponentials, the loss the teacher's. */
  char *scratch = row_scratch(fn, threads, gradient ? 2 * cols : cols, es, &ok);
  if (!ok) return BK_ERR_OUT_OF_MEMORY;
  const size_t per_bytes = (size_t)(gradient ? 2 * cols : cols) * es;
  const int64_t chunk = bk_cpu_chunk(rows, cols, threads);
  atomic_llong next = 0;
  if (gradient) {
    const int stream = bk__cpu_streams(ctx, (size_t)(rows * cols) * es);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      void *e = scratch ? scratch + (size_t)bk_cpu_thread() * per_bytes : NULL;
      for (int64_t r0, r1; bk_cpu_take(&next, rows, chunk, &r0, &r1);) {
        if (cols > 0 && cols < BK_LANES) {
          if (dt == BK_F32)
            teacher_grad_narrow_f32(S, T, y, r0, r1, cols, (double)rows, stream);
          else
            teacher_grad_narrow_f64(S, T, y, r0, r1, cols, (double)rows, stream);
          continue;
        }
        if (dt == BK_F32)
          teacher_grad_block_f32(S, T, y, r0, r1, cols, (double)rows, e, stream);
        else
          teacher_grad_block_f64(S, T, y, r0, r1, cols, (double)rows, e, stream);
      }
    }
    bk__host_free(scratch);
    return BK_OK;
  }
  double *part = bk__host_alloc(fn, "scratch", (size_t)rows, sizeof *part);
  if (!part) {
    bk__host_free(scratch);
    return BK_ERR_OUT_OF_MEMORY;
  }
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    void *e = scratch ? scratch + (size_t)bk_cpu_thread() * per_bytes : NULL;
    for (int64_t r0, r1; bk_cpu_take(&next, rows, chunk, &r0, &r1);) {
      if (cols > 0 && cols < BK_LANES) {
        if (dt == BK_F32)
          teacher_loss_narrow_f32(S, T, part, r0, r1, cols);
        else
          teacher_loss_narrow_f64(S, T, part, r0, r1, cols);
        continue;
      }
      for (int64_t r = r0; r < r1; r++)
        part[r] = dt == BK_F32
                      ? teacher_loss_row_f32((const float *)S + r * cols, (const float *)T + r * cols, e, cols)
                      : teacher_loss_row_f64((const double *)S + r * cols, (const double *)T + r * cols, e,
                                             cols);
    }
  }
  store_mean(dt, y, part, rows);
  bk__host_free(part);
  bk__host_free(scratch);
  return BK_OK;
}
