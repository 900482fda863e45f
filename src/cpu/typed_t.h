/*
 * typed_t.h — the CPU kernels' typed building blocks, a template: include it
 * once with BK_T defined as float and once as double (and BK_T_F32 1 or 0).
 * Every name it defines carries the suffix BK_SFX (f32 or f64, defined here
 * and left defined for the family template included after it), so the
 * dtype is chosen once per call, outside every loop.
 *
 * The exponential is plain C (no libm call), so a loop over it becomes SIMD
 * code on any x86-64 and gives the same bits on every machine and thread
 * count: the library is built in ISO C mode, where the compiler does not
 * contract a*b+c into a fused multiply-add.
 */
#include "vec.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#undef BK_SFX
#if BK_T_F32
#define BK_SFX f32
#define BK_UINT uint32_t
#define BK_MANT 23
#define BK_EXP_LO -86.0f
#define BK_SHIFT 12582912.0f            /* 1.5 * 2^23 */
#define BK_SHIFT_BITS 0x4B400000
#define BK_LOG2E 1.44269504088896341f
#define BK_LN2_HI 0.693359375f          /* 8 significant bits: k * BK_LN2_HI exact */
#define BK_LN2_LO -2.12194440e-4f
#define BK_DEG 6
#else
#define BK_SFX f64
#define BK_UINT uint64_t
#define BK_MANT 52
#define BK_EXP_LO -707.0
#define BK_SHIFT 6755399441055744.0      /* 1.5 * 2^52 */
#define BK_SHIFT_BITS INT64_C(0x4338000000000000)
#define BK_LOG2E 1.4426950408889634074
#define BK_LN2_HI 6.93147180369123816490e-01
#define BK_LN2_LO 1.90821492927058770002e-10
#define BK_DEG 12
#endif

#ifndef BK_FN
#define BK_CAT_(a, b) a##_##b
#define BK_CAT(a, b) BK_CAT_(a, b)
#define BK_FN(name) BK_CAT(name, BK_SFX) /* name_f32 or name_f64 */
#endif

/* BK_LANES (and 8, 4, 2) values of the type as one value of the compiler's
 * vector extension: the lane partials of a row held in registers rather
 * than in an array, which a fold then read back from memory just after the
 * scalar stores of the row's tail (a stalled store-to-load forwarding per
 * fold, which dominated rows of a few dozen columns). */
typedef BK_T BK_FN(bk_v16) __attribute__((vector_size(16 * sizeof(BK_T))));
typedef BK_T BK_FN(bk_v8) __attribute__((vector_size(8 * sizeof(BK_T))));
typedef BK_T BK_FN(bk_v4) __attribute__((vector_size(4 * sizeof(BK_T))));
typedef BK_T BK_FN(bk_v2) __attribute__((vector_size(2 * sizeof(BK_T))));

/* The pairwise tree of rk_fold on a vector: halves added, lane l of the low
 * half first, as lane[l] += lane[l + w]. */
BK_INLINE BK_T BK_FN(rk_vfold)(BK_FN(bk_v16) v) {
  BK_FN(bk_v8) a8, b8;
  memcpy(&a8, &v, sizeof a8);
  memcpy(&b8, (char *)&v + sizeof a8, sizeof b8);
  const BK_FN(bk_v8) s8 = a8 + b8;
  BK_FN(bk_v4) a4, b4;
  memcpy(&a4, &s8, sizeof a4);
  memcpy(&b4, (const char *)&s8 + sizeof a4, sizeof b4);
  const BK_FN(bk_v4) s4 = a4 + b4;
  BK_FN(bk_v2) a2, b2;
  memcpy(&a2, &s4, sizeof a2);
  memcpy(&b2, (const char *)&s4 + sizeof a2, sizeof b2);
  const BK_FN(bk_v2) s2 = a2 + b2;
  return s2[0] + s2[1];
}

/* 1/k!, k = BK_DEG down to 0: the Taylor coefficients of exp. */
static const BK_T BK_FN(exp_taylor)[] = {
#if !BK_T_F32
    1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
    1.0 / 5040.0,
#endif
    (BK_T)(1.0 / 720.0), (BK_T)(1.0 / 120.0), (BK_T)(1.0 / 24.0), (BK_T)(1.0 / 6.0),
    (BK_T)0.5, (BK_T)1.0, (BK_T)1.0};

/*
 * exp(x) for x <= 0 or NaN (x minus the maximum of its row): exp(x) = 2^k
 * exp(r), k = round(x / ln 2) formed by adding and subtracting 1.5 * 2^MANT
 * (round to nearest in the default mode), r = x - k ln 2 with ln 2 split so
 * that k * LN2_HI is exact, |r| <= ln(2)/2, and exp(r) by its Taylor
 * polynomial (degree 6 for float, truncation below 1.2e-7 relative; degree
 * 12 for double, below 1.7e-16). Within 2 ulp of exp(x) for x >= EXP_LO
 * (-86 for float, -707 for double), where 2^k stays a normal number; +0
 * below (the true value is under 4.5e-38, resp. 1e-307); NaN gives NaN.
 * Positive arguments are outside its domain.
 */
BK_INLINE BK_T BK_FN(bk_expn)(BK_T x) {
  BK_T xc = x < BK_EXP_LO ? BK_EXP_LO : x;
  BK_T t = xc * BK_LOG2E + BK_SHIFT;
  BK_T k = t - BK_SHIFT;
  BK_T r = (xc - k * BK_LN2_HI) - k * BK_LN2_LO;
  BK_T p = BK_FN(exp_taylor)[0];
  for (int i = 1; i <= BK_DEG; i++) p = p * r + BK_FN(exp_taylor)[i];
  /* Unsigned, so that the bits of the NaN and infinite cases (replaced
   * below) wrap instead of overflowing. */
  BK_UINT ti, pi;
  memcpy(&ti, &t, sizeof ti);
  memcpy(&pi, &p, sizeof pi);
  pi += (ti - (BK_UINT)BK_SHIFT_BITS) << BK_MANT; /* times 2^k */
  memcpy(&p, &pi, sizeof p);
  p = x < BK_EXP_LO ? (BK_T)0 : p;
  return x != x ? x : p;
}

/* dst[0..n) = src[0..n); stream: non-temporal stores (vec.h) for the
 * 64-byte lines that lie wholly inside dst[0..n), ordinary stores for the
 * partial lines at either end. A line is thus written either by streaming
 * stores only or by ordinary stores only, also where consecutive calls
 * share it (rows whose width is not a multiple of a line): ordinary stores
 * into a line that streaming stores have begun flush the write-combining
 * buffer and read the line back from memory (the layer norm of 17 float32
 * columns ran at a tenth of the speed of 16 or 24 columns). */
BK_INLINE void BK_FN(bk_put)(BK_T *restrict dst, const BK_T *restrict src, int64_t n,
                             int stream) {
  int64_t j = 0;
#if defined(__SSE2__)
  if (stream) {
    const int64_t line = 64 / (int64_t)sizeof(BK_T);
    for (; j < n && ((uintptr_t)(dst + j) & 63) != 0; j++) dst[j] = src[j];
#if BK_T_F32
    for (; j + line <= n; j += line)
      for (int64_t q = 0; q < line; q += 4) _mm_stream_ps(dst + j + q, _mm_loadu_ps(src + j + q));
#else
    for (; j + line <= n; j += line)
      for (int64_t q = 0; q < line; q += 2) _mm_stream_pd(dst + j + q, _mm_loadu_pd(src + j + q));
#endif
  }
#else
  (void)stream;
#endif
  for (; j < n; j++) dst[j] = src[j];
}

/* ---- row reductions (lane layout: vec.h) ---------------------------------------- */

/* Maximum of x[0..n) ignoring NaN: -inf when n == 0 or every entry is NaN.
 * Among equal maxima the first in index order (-0 or +0) is returned. */
BK_INLINE BK_T BK_FN(rk_max)(const BK_T *restrict x, int64_t n) {
  BK_T lane[BK_LANES];
  for (int l = 0; l < BK_LANES; l++) lane[l] = -INFINITY;
  int64_t j = 0;
  for (; j + BK_LANES <= n; j += BK_LANES) {
#pragma omp simd
    for (int l = 0; l < BK_LANES; l++) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  }
  BK_T m = -INFINITY;
  for (int l = 0; l < BK_LANES; l++) m = lane[l] > m ? lane[l] : m;
  for (; j < n; j++) m = x[j] > m ? x[j] : m;
  if (m == 0) /* -0 and +0: the first one wins */
    for (j = 0; j < n; j++)
      if (x[j] == 0) return x[j];
  return m;
}

/* Folds BK_LANES partials pairwise, in a fixed tree. */
BK_INLINE BK_T BK_FN(rk_fold)(BK_T *lane) {
  for (int w = BK_LANES / 2; w > 0; w /= 2)
    for (int l = 0; l < w; l++) lane[l] += lane[l + w];
  return lane[0];
}

/* sum of x[0..n) (n <= BK_CHUNK) in the data's type. */
BK_INLINE BK_T BK_FN(rk_chunk_sum)(const BK_T *restrict x, int64_t n) {
  BK_FN(bk_v16) lane = {0}, v;
  int64_t j = 0;
  for (; j + BK_LANES <= n; j += BK_LANES) {
    memcpy(&v, x + j, sizeof v);
    lane += v;
  }
  /* The tail to partials 0, 1, ...; +0 to the others, which leaves them as
   * they are (a partial that starts at +0 never becomes -0). Built lane by
   * lane, in registers (rk_tail4 says why). */
  if (j < n) {
    BK_FN(bk_v16) t;
    for (int l = 0; l < BK_LANES; l++) t[l] = l < n - j ? x[j + l] : (BK_T)0;
    lane += t;
  }
  return BK_FN(rk_vfold)(lane);
}

/* e[j] = exp(x[j] - m) for j < n (n <= BK_CHUNK); returns their sum in the
 * data's type. e may be y's own memory or scratch. */
BK_INLINE BK_T BK_FN(rk_chunk_exp)(const BK_T *restrict x, BK_T *restrict e, int64_t n,
                                   BK_T m) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) e[j] = BK_FN(bk_expn)(x[j] - m);
  return BK_FN(rk_chunk_sum)(e, n);
}

/* sum_j exp(x[j] - m), the exponentials stored in e[0..n) (or, e NULL, in
 * a tile on the stack and dropped); the blocks of BK_CHUNK are added in
 * float64. */
BK_INLINE double BK_FN(rk_exp_store)(const BK_T *restrict x, BK_T *restrict e, int64_t n,
                                     BK_T m) {
  BK_T tile[BK_CHUNK];
  double s = 0.0;
  for (int64_t c = 0; c < n; c += BK_CHUNK)
    s += (double)BK_FN(rk_chunk_exp)(x + c, e ? e + c : tile, n - c < BK_CHUNK ? n - c : BK_CHUNK,
                                     m);
  return s;
}

/* Partials 4q..4q+3 of a row's tail x[0..rem) (rem < BK_LANES) in
 * float64, added to *a: (double)x[l], or with sq ((double)x[l] - mu)^2, for
 * l < rem; +0 for the lanes past the tail. Built in registers: a tail
 * written to a stack array and read back as vectors stalled the
 * store-to-load forwarding once per row (measured on a 2-core x86-64: the
 * float32 row sum of 41 and 101 columns 1.6-1.7x faster without it, the
 * layer-norm forward of 33 columns 1.2x). */
BK_INLINE void BK_FN(rk_tail4)(bk_v4d *a, const BK_T *restrict x, int64_t rem, int q,
                               double mu, int sq) {
  bk_v4d v;
  for (int i = 0; i < 4; i++) {
    const int64_t l = 4 * q + i;
    double e = 0.0;
    if (l < rem) {
      e = (double)x[l];
      if (sq) {
        e -= mu;
        e *= e;
      }
    }
    v[i] = e;
  }
  *a += v;
}

/* sum of x[0..n) in float64: element j goes to partial j % BK_LANES (the
 * tail after the last full group to partials 0, 1, ...), the partials
 * folded pairwise; a row narrower than the lanes (where the layout does not
 * pay) is summed in index order. */
BK_INLINE double BK_FN(rk_sum64)(const BK_T *restrict x, int64_t n) {
  double s = 0.0;
  if (n < BK_LANES) {
    for (int64_t j = 0; j < n; j++) s += (double)x[j];
    return s;
  }
  /* Partials 4q..4q+3 in a[q]: held in registers, where an array of 16
   * partials went through memory on every group. */
  bk_v4d a[4] = {{0}};
  int64_t j = 0;
  for (; j + BK_LANES <= n; j += BK_LANES) {
    for (int q = 0; q < 4; q++) {
#if BK_T_F32
      bk_v4d v;
      bk_cvt4f(&v, x + j + 4 * q);
      a[q] += v;
#else
      bk_v4d v;
      memcpy(&v, x + j + 4 * q, sizeof v);
      a[q] += v;
#endif
    }
  }
  /* The tail to partials 0, 1, ...; +0 to the others, which leaves them as
   * they are (a partial that starts at +0 never becomes -0). */
  if (j < n)
    for (int q = 0; q < 4; q++) BK_FN(rk_tail4)(&a[q], x + j, n - j, q, 0.0, 0);
  return bk_vfold64(a);
}

/* y[0..n) = e[0..n) * f, through a tile of BK_CHUNK on the stack so that the
 * stores can stream. */
BK_INLINE void BK_FN(rk_scale_put)(const BK_T *restrict e, BK_T *y, int64_t n, BK_T f,
                                   int stream) {
  BK_T tile[BK_CHUNK];
  for (int64_t c = 0; c < n; c += BK_CHUNK) {
    int64_t len = n - c < BK_CHUNK ? n - c : BK_CHUNK;
#pragma omp simd
    for (int64_t j = 0; j < len; j++) tile[j] = e[c + j] * f;
    BK_FN(bk_put)(y + c, tile, len, stream);
  }
}

/* ---- narrow rows: BK_LANES rows at a time, one per lane ------------------------------ */

/* Rows narrower than BK_LANES fill no lane group: the kernels take them
 * BK_LANES rows at a time instead, transposed into a tile t[j * BK_LANES + l]
 * (element j of row l), and run across the rows, each row folded in index
 * order. nr <= BK_LANES rows are read; the other lanes hold `fill`. */
BK_INLINE void BK_FN(nk_in)(const BK_T *restrict x, int64_t n, int64_t nr, BK_T *restrict t,
                            BK_T fill) {
  if (nr == BK_LANES) { /* a full tile: one vector gather per column */
    for (int64_t j = 0; j < n; j++) {
#pragma omp simd
      for (int64_t l = 0; l < BK_LANES; l++) t[j * BK_LANES + l] = x[l * n + j];
    }
    return;
  }
  for (int64_t j = 0; j < n; j++)
    for (int64_t l = 0; l < BK_LANES; l++) t[j * BK_LANES + l] = l < nr ? x[l * n + j] : fill;
}

/* y[l * n + j] = t[j * BK_LANES + l] for the nr rows, through a contiguous
 * tile so that the stores can stream. */
BK_INLINE void BK_FN(nk_out)(const BK_T *restrict t, int64_t n, int64_t nr, BK_T *y,
                             int stream) {
  BK_T row_major[BK_LANES * BK_NARROW];
  for (int64_t l = 0; l < nr; l++) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) row_major[l * n + j] = t[j * BK_LANES + l];
  }
  BK_FN(bk_put)(y, row_major, nr * n, stream);
}

/* Per lane: the maximum over the tile's n elements (NaN ignored, the first
 * of equal maxima kept). */
BK_INLINE void BK_FN(nk_max)(const BK_T *restrict t, int64_t n, BK_T *restrict m) {
  for (int l = 0; l < BK_LANES; l++) m[l] = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
#pragma omp simd
    for (int l = 0; l < BK_LANES; l++)
      m[l] = t[j * BK_LANES + l] > m[l] ? t[j * BK_LANES + l] : m[l];
  }
}

/* Per lane: t = exp(t - m) where keep (NULL: everywhere; else keep != 0,
 * the rest set to 0), s = their float64 sum in index order; then t *= 1/s
 * (0 where not kept and, keep given, in lanes with nothing kept). The two
 * cases are separate loops: a load of keep behind a test of keep kept the
 * masked loops from vectorizing. */
BK_INLINE void BK_FN(nk_softmax)(BK_T *restrict t, const BK_T *restrict keep, int64_t n) {
  BK_T m[BK_LANES], f[BK_LANES];
  double s[BK_LANES] = {0};
  int any[BK_LANES] = {0};
  for (int l = 0; l < BK_LANES; l++) m[l] = -INFINITY;
  if (!keep) {
    for (int64_t j = 0; j < n; j++) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++) {
        const BK_T v = t[j * BK_LANES + l];
        m[l] = v > m[l] ? v : m[l];
      }
    }
    for (int64_t j = 0; j < n; j++) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++) {
        const BK_T e = BK_FN(bk_expn)(t[j * BK_LANES + l] - m[l]);
        t[j * BK_LANES + l] = e;
        s[l] += (double)e;
      }
    }
    for (int l = 0; l < BK_LANES; l++) f[l] = n > 0 ? (BK_T)(1.0 / s[l]) : (BK_T)0;
    for (int64_t j = 0; j < n; j++) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++) t[j * BK_LANES + l] = t[j * BK_LANES + l] * f[l];
    }
    return;
  }
  for (int64_t j = 0; j < n; j++) {
#pragma omp simd
    for (int l = 0; l < BK_LANES; l++) {
      const BK_T v = t[j * BK_LANES + l];
      const int k = keep[j * BK_LANES + l] != 0;
      m[l] = (k & (v > m[l])) ? v : m[l];
      any[l] |= k;
    }
  }
  for (int64_t j = 0; j < n; j++) {
#pragma omp simd
    for (int l = 0; l < BK_LANES; l++) {
      const BK_T e = BK_FN(bk_expn)(t[j * BK_LANES + l] - m[l]);
      const BK_T v = keep[j * BK_LANES + l] != 0 ? e : (BK_T)0;
      t[j * BK_LANES + l] = v;
      s[l] += (double)v; /* + (double)+0 where not kept: s unchanged */
    }
  }
  for (int l = 0; l < BK_LANES; l++) f[l] = any[l] ? (BK_T)(1.0 / s[l]) : (BK_T)0;
  for (int64_t j = 0; j < n; j++) {
#pragma omp simd
    for (int l = 0; l < BK_LANES; l++)
      t[j * BK_LANES + l] = keep[j * BK_LANES + l] != 0 ? t[j * BK_LANES + l] * f[l] : (BK_T)0;
  }
}

#undef BK_UINT
#undef BK_MANT
#undef BK_EXP_LO
#undef BK_SHIFT
#undef BK_SHIFT_BITS
#undef BK_LOG2E
#undef BK_LN2_HI
#undef BK_LN2_LO
#undef BK_DEG
