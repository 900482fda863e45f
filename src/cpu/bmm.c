/*
 * bmm.c — CPU batched matrix products: C = op(A) op(B) and the scaled
 * product with its range-loss flag.
 *
 * Row-major throughout. A is stored (batch, m, n), or (batch, n, m) when
 * transposed; B is stored (batch, n, p), or (batch, p, n) when transposed;
 * C is (batch, m, p). No transposed copy of an operand is made: the
 * transposes go to BLAS as flags, or to the blocked loops as strides.
 *
 * With OpenBLAS (BK_HAVE_OPENBLAS) each matrix goes to cblas_sgemm or
 * cblas_dgemm, cut into chunks whose sizes fit BLAS's integer arguments.
 * Without it, a cache-blocked loop computes tiles of C in float64.
 *
 * The scaled product works in float64 for both dtypes: the operands are
 * copied to float64 with exact power-of-two factors whose product is the
 * power-of-two part of the scale, multiplied there, and the result is
 * multiplied by the remaining factor r in [1, 2) and rounded once to the
 * dtype. For float32 data float64 has room for every product; for float64
 * data the split keeps the operands' largest entries balanced so a result
 * whose true value is representable does not overflow on the way.
 */
#include "cpu.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef BK_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- the cache-blocked loop ---------------------------------------------------- */

/* A thread computes one tile of C of TILE_M x TILE_P entries at a time,
 * walking the contraction in slices of TILE_N: it packs the slice of op(A)
 * and of op(B) into contiguous float64 panels and accumulates into a
 * float64 tile. Each entry of C is summed in ascending k by one thread, so
 * the result does not depend on the thread count. */
enum { TILE_M = 32, TILE_N = 128, TILE_P = 64 };
#define TILE_DOUBLES ((size_t)TILE_M * TILE_P + (size_t)TILE_M * TILE_N + (size_t)TILE_N * TILE_P)

/* One matrix product's operands and strides: op(A)[i,k] is
 * A[i*a_rs + k*a_cs], op(B)[k,j] is B[k*b_rs + j*b_cs]. */
typedef struct gemm_job {
  bk_dtype dt;
  const void *A, *B; /* (batch, ...) as stored */
  void *C;           /* (batch, m, p) */
  int64_t batch, m, n, p;
  int64_t a_rs, a_cs, b_rs, b_cs;
} gemm_job;

static gemm_job make_job(bk_dtype dt, const void *A, const void *B, void *C, int64_t batch,
                         int64_t m, int64_t n, int64_t p, int trans_a, int trans_b) {
  gemm_job j = {dt, A, B, C, batch, m, n, p, 0, 0, 0, 0};
  j.a_rs = trans_a ? 1 : n;
  j.a_cs = trans_a ? m : 1;
  j.b_rs = trans_b ? 1 : p;
  j.b_cs = trans_b ? n : 1;
  return j;
}

static void gemm_tile(const gemm_job *g, int64_t b, int64_t i0, int64_t j0, double *scratch) {
  double *acc = scratch;                             /* (TILE_M, TILE_P) */
  double *ap = acc + (size_t)TILE_M * TILE_P;        /* (TILE_M, TILE_N) */
  double *bp = ap + (size_t)TILE_M * TILE_N;         /* (TILE_N, TILE_P) */
  const int64_t mi = g->m - i0 < TILE_M ? g->m - i0 : TILE_M;
  const int64_t pj = g->p - j0 < TILE_P ? g->p - j0 : TILE_P;
  const int64_t a_base = b * g->m * g->n, b_base = b * g->n * g->p;
  for (int64_t t = 0; t < mi * pj; t++) acc[t] = 0.0;
  for (int64_t k0 = 0; k0 < g->n; k0 += TILE_N) {
    const int64_t nk = g->n - k0 < TILE_N ? g->n - k0 : TILE_N;
    for (int64_t i = 0; i < mi; i++)
      for (int64_t k = 0; k < nk; k++)
        ap[i * nk + k] = bk_ld(g->dt, g->A, a_base + (i0 + i) * g->a_rs + (k0 + k) * g->a_cs);
    for (int64_t k = 0; k < nk; k++)
      for (int64_t j = 0; j < pj; j++)
        bp[k * pj + j] = bk_ld(g->dt, g->B, b_base + (k0 + k) * g->b_rs + (j0 + j) * g->b_cs);
    for (int64_t i = 0; i < mi; i++) {
      double *row = acc + i * pj;
      for (int64_t k = 0; k < nk; k++) {
        const double a = ap[i * nk + k];
        const double *brow = bp + k * pj;
        for (int64_t j = 0; j < pj; j++) row[j] += a * brow[j];
      }
    }
  }
  const int64_t c_base = b * g->m * g->p;
  for (int64_t i = 0; i < mi; i++)
    for (int64_t j = 0; j < pj; j++)
      bk_st(g->dt, g->C, c_base + (i0 + i) * g->p + j0 + j, acc[i * pj + j]);
}

static bk_status gemm_blocked(const char *fn, const gemm_job *g) {
  const int64_t mt = (g->m + TILE_M - 1) / TILE_M, pt = (g->p + TILE_P - 1) / TILE_P;
  const int64_t tiles = g->batch * mt * pt;
  int threads = 1;
#ifdef _OPENMP
  /* Only products with enough work per tile spread over threads; each
   * thread owns one slice of the scratch. */
  if ((double)g->batch * (double)g->m * (double)g->n * (double)g->p >= BK_CPU_PARALLEL_MIN) {
    threads = omp_get_max_threads();
    if ((int64_t)threads > tiles) threads = (int)tiles;
    if (threads < 1) threads = 1;
  }
#endif
  double *scratch =
      bk__host_alloc(fn, "scratch for matrix tiles", (size_t)threads * TILE_DOUBLES, sizeof(double));
  if (!scratch) return BK_ERR_OUT_OF_MEMORY;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tiles; t++) {
    int me = 0;
#ifdef _OPENMP
    me = omp_get_thread_num();
#endif
    const int64_t b = t / (mt * pt), r = t % (mt * pt);
    gemm_tile(g, b, (r / pt) * TILE_M, (r % pt) * TILE_P, scratch + (size_t)me * TILE_DOUBLES);
  }
  bk__host_free(scratch);
  return BK_OK;
}

/* ---- BLAS -------------------------------------------------------------------- */

#ifdef BK_HAVE_OPENBLAS
/* The largest value of BLAS's integer arguments (32 or 64 bits). */
#define BK_BLASINT_MAX (sizeof(blasint) >= 8 ? INT64_MAX : (int64_t)INT_MAX)

/* Chunk length for m, n and p; BLAS's limit unless a build lowers it to
 * exercise the chunking on small matrices. */
#ifndef BK_CPU_BLAS_CHUNK
#define BK_CPU_BLAS_CHUNK BK_BLASINT_MAX
#endif

/* One BLAS call per (matrix, m chunk, p chunk, n chunk); the n chunks after
 * the first accumulate into C (beta = 1). The leading dimensions are those
 * of the whole stored matrices, which the caller has checked fit. */
static void gemm_blas(const gemm_job *g, int trans_a, int trans_b) {
  const int64_t chunk = BK_CPU_BLAS_CHUNK;
  const blasint lda = (blasint)(trans_a ? g->m : g->n);
  const blasint ldb = (blasint)(trans_b ? g->n : g->p);
  const blasint ldc = (blasint)g->p;
  const enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  for (int64_t b = 0; b < g->batch; b++) {
    for (int64_t i0 = 0; i0 < g->m; i0 += chunk) {
      const int64_t mi = g->m - i0 < chunk ? g->m - i0 : chunk;
      for (int64_t j0 = 0; j0 < g->p; j0 += chunk) {
        const int64_t pj = g->p - j0 < chunk ? g->p - j0 : chunk;
        for (int64_t k0 = 0; k0 < g->n; k0 += chunk) {
          const int64_t nk = g->n - k0 < chunk ? g->n - k0 : chunk;
          const int64_t a_off = b * g->m * g->n + i0 * g->a_rs + k0 * g->a_cs;
          const int64_t b_off = b * g->n * g->p + k0 * g->b_rs + j0 * g->b_cs;
          const int64_t c_off = b * g->m * g->p + i0 * g->p + j0;
          if (g->dt == BK_F32)
            cblas_sgemm(CblasRowMajor, ta, tb, (blasint)mi, (blasint)pj, (blasint)nk, 1.0f,
                        (const float *)g->A + a_off, lda, (const float *)g->B + b_off, ldb,
                        k0 == 0 ? 0.0f : 1.0f, (float *)g->C + c_off, ldc);
          else
            cblas_dgemm(CblasRowMajor, ta, tb, (blasint)mi, (blasint)pj, (blasint)nk, 1.0,
                        (const double *)g->A + a_off, lda, (const double *)g->B + b_off, ldb,
                        k0 == 0 ? 0.0 : 1.0, (double *)g->C + c_off, ldc);
        }
      }
    }
  }
}
#endif

/* C = op(A) op(B) in dtype dt; all sizes >= 1. */
static bk_status gemm(const char *fn, bk_dtype dt, const void *A, const void *B, void *C,
                      int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a, int trans_b) {
  const gemm_job g = make_job(dt, A, B, C, batch, m, n, p, trans_a, trans_b);
#ifdef BK_HAVE_OPENBLAS
  /* Chunks shrink m, n and p but not the leading dimensions (a row of a
   * stored matrix); a row longer than BLAS's integers goes to the blocked
   * loop instead. */
  const int64_t lda = trans_a ? m : n, ldb = trans_b ? n : p;
  if (lda <= BK_BLASINT_MAX && ldb <= BK_BLASINT_MAX && p <= BK_BLASINT_MAX) {
    gemm_blas(&g, trans_a, trans_b);
    return BK_OK;
  }
#endif
  return gemm_blocked(fn, &g);
}

bk_status bk__cpu_bmm(bk_context *ctx, bk_dtype dt, const void *A, const void *B, void *C,
                      int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a, int trans_b) {
  (void)ctx;
  return gemm("bk_bmm", dt, A, B, C, batch, m, n, p, trans_a, trans_b);
}

/* ---- the scaled product -------------------------------------------------------- */

/* What the scaled product needs to know about an operand. */
typedef struct operand_stats {
  double max_abs;     /* largest finite |x| (0 when none) */
  double min_abs;     /* smallest nonzero finite |x| (0 when none) */
  bool non_finite;    /* some entry is Inf or NaN */
} operand_stats;

static operand_stats scan_operand(bk_dtype dt, const void *x, int64_t len) {
  double hi = 0.0, lo = INFINITY;
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(max : hi) reduction(min : lo) \
    reduction(| : bad) if (len >= BK_CPU_PARALLEL_MIN)
  for (int64_t i = 0; i < len; i++) {
    const double v = fabs(bk_ld(dt, x, i));
    if (!isfinite(v)) {
      bad |= 1;
    } else if (v != 0.0) {
      if (v > hi) hi = v;
      if (v < lo) lo = v;
    }
  }
  operand_stats s = {hi, isinf(lo) ? 0.0 : lo, bad != 0};
  return s;
}

/* frexp's exponent of a positive finite value: v = f * 2^e, f in [0.5, 1). */
static int exponent_of(double v) {
  int e = 0;
  (void)frexp(v, &e);
  return e;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/*
 * Splits scale = r * 2^(ea + eb) with r in [1, 2), for C = r * (A 2^ea)(B 2^eb)
 * computed in float64. The exponents balance the largest entries of the
 * two scaled operands (so their product, the size of the result, is shared
 * evenly), clamped so that neither operand overflows and, where the
 * operands' ranges allow, neither's smallest nonzero entry leaves the
 * normal range. Exponents are frexp's: a normal float64 has e in
 * [DBL_MIN_EXP, DBL_MAX_EXP] = [-1021, 1024].
 */
static void split_scale(double scale, const operand_stats *sa, const operand_stats *sb,
                        int64_t *ea, int64_t *eb, double *r) {
  int es = 0;
  *r = 2.0 * frexp(scale, &es);
  const int64_t E = (int64_t)es - 1;
  if (sa->max_abs == 0.0 || sb->max_abs == 0.0) {
    /* One operand is zero (up to non-finite entries): it takes the whole
     * factor, which cannot change it, and the other stays as it is. */
    *ea = sa->max_abs == 0.0 ? E : 0;
    *eb = E - *ea;
    return;
  }
  const int64_t a_hi = exponent_of(sa->max_abs), a_lo = exponent_of(sa->min_abs);
  const int64_t b_hi = exponent_of(sb->max_abs), b_lo = exponent_of(sb->min_abs);
  const int64_t s = E + b_hi - a_hi;
  const int64_t target = s >= 0 ? s / 2 : -((-s + 1) / 2);
  /* Overflow of either operand: a_hi + ea <= DBL_MAX_EXP, b_hi + eb <= DBL_MAX_EXP. */
  const int64_t ov_lo = E - DBL_MAX_EXP + b_hi, ov_hi = DBL_MAX_EXP - a_hi;
  /* Underflow: a_lo + ea >= DBL_MIN_EXP, b_lo + eb >= DBL_MIN_EXP. */
  const int64_t lo = ov_lo > DBL_MIN_EXP - a_lo ? ov_lo : DBL_MIN_EXP - a_lo;
  const int64_t hi = ov_hi < E - DBL_MIN_EXP + b_lo ? ov_hi : E - DBL_MIN_EXP + b_lo;
  if (lo <= hi)
    *ea = clamp64(target, lo, hi);
  else if (ov_lo <= ov_hi)
    *ea = clamp64(target, ov_lo, ov_hi);
  else
    *ea = target;
  *eb = E - *ea;
}

/* dst = src * 2^e in float64, exact unless the value leaves float64's
 * normal range. */
static void scaled_copy(bk_dtype dt, const void *src, int64_t len, int64_t e, double *dst) {
  const int ei = (int)clamp64(e, -4000, 4000);
  if (ei >= DBL_MIN_EXP - 1 && ei < DBL_MAX_EXP) {
    /* 2^e is itself a normal float64: one correctly rounded multiply. */
    const double f = ldexp(1.0, ei);
#pragma omp parallel for schedule(static) if (len >= BK_CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < len; i++) dst[i] = bk_ld(dt, src, i) * f;
  } else {
#pragma omp parallel for schedule(static) if (len >= BK_CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < len; i++) dst[i] = ldexp(bk_ld(dt, src, i), ei);
  }
}

/* Whether scale * n * ma * mb exceeds limit, decided on mantissas and
 * exponents so nothing overflows on the way. */
static bool bound_exceeds(double scale, int64_t n, double ma, double mb, double limit) {
  if (ma == 0.0 || mb == 0.0) return false;
  int es = 0, en = 0, ea = 0, eb = 0, el = 0;
  const double mant = frexp(scale, &es) * frexp((double)n, &en) * frexp(ma, &ea) *
                      frexp(mb, &eb); /* in [1/16, 1) */
  const double fl = frexp(limit, &el);   /* in [0.5, 1) */
  const int64_t d = (int64_t)es + en + ea + eb - el;
  if (d > 8) return true;
  if (d < -8) return false;
  return ldexp(mant, (int)d) > fl;
}

/* A float64 copy of an operand or result: its own allocation site for each
 * of the three, so the failure walk tells them apart. */
#define scratch_doubles(len) \
  bk__host_alloc("bk_bmm_scaled", "memory for a float64 copy", (size_t)(len), sizeof(double))

bk_status bk__cpu_bmm_scaled(bk_context *ctx, bk_dtype dt, const void *A, const void *B, void *C,
                             int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a,
                             int trans_b, double scale, int *range_loss) {
  (void)ctx;
  static const char fn[] = "bk_bmm_scaled";
  const int64_t a_len = batch * m * n, b_len = batch * n * p, c_len = batch * m * p;
  const operand_stats sa = scan_operand(dt, A, a_len), sb = scan_operand(dt, B, b_len);
  int64_t ea = 0, eb = 0;
  double r = 1.0;
  split_scale(scale, &sa, &sb, &ea, &eb, &r);

  /* float64 operands with a factor of 1 are used in place; everything else
   * is a scaled float64 copy. A float64 result is formed in C itself. */
  const bool copy_a = dt == BK_F32 || ea != 0, copy_b = dt == BK_F32 || eb != 0;
  double *a64 = copy_a ? scratch_doubles(a_len) : NULL;
  double *b64 = copy_b ? scratch_doubles(b_len) : NULL;
  double *c64 = dt == BK_F32 ? scratch_doubles(c_len) : (double *)C;
  bk_status st = BK_OK;
  if ((copy_a && !a64) || (copy_b && !b64) || !c64) {
    st = BK_ERR_OUT_OF_MEMORY;
  } else {
    if (copy_a) scaled_copy(dt, A, a_len, ea, a64);
    if (copy_b) scaled_copy(dt, B, b_len, eb, b64);
    st = gemm(fn, BK_F64, copy_a ? (const void *)a64 : A, copy_b ? (const void *)b64 : B, c64,
              batch, m, n, p, trans_a, trans_b);
  }
  if (st == BK_OK) {
    /* Apply r, round once to the dtype and test each stored entry. */
    const double tiny = dt == BK_F32 ? (double)FLT_MIN : DBL_MIN;
    int lost = 0;
#pragma omp parallel for schedule(static) reduction(| : lost) if (c_len >= BK_CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < c_len; i++) {
      bk_st(dt, C, i, r * c64[i]);
      const double v = fabs(bk_ld(dt, C, i));
      if (!isfinite(v) || v < tiny) lost |= 1;
    }
    const double huge = dt == BK_F32 ? (double)FLT_MAX : DBL_MAX;
    *range_loss = lost || sa.non_finite || sb.non_finite ||
                  bound_exceeds(scale, n, sa.max_abs, sb.max_abs, huge);
  }
  bk__host_free(a64);
  bk__host_free(b64);
  if (dt == BK_F32) bk__host_free(c64);
  return st;
}
