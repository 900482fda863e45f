/*
 * layernorm_t.h — the typed kernels of layernorm.c, a template included once
 * per dtype after typed_t.h. Everything is float64 arithmetic on the loaded
 * values, rounded once on store, in BK_LANES partials (vec.h).
 */

/* sum_j (x[j] - mu)^2 in float64 partials, lane j % BK_LANES, partials
 * 4q..4q+3 held in registers as in rk_sum64 (typed_t.h): the same
 * operations per lane as a 16-entry array, without its memory traffic. */
BK_INLINE double BK_FN(ln_sq)(const BK_T *restrict x, int64_t n, double mu) {
  bk_v4d a[4] = {{0}};
  const bk_v4d m4 = {mu, mu, mu, mu};
  int64_t j = 0;
  for (; j + BK_LANES <= n; j += BK_LANES) {
    for (int q = 0; q < 4; q++) {
#if BK_T_F32
      bk_v4d v;
      bk_cvt4f(&v, x + j + 4 * q);
      const bk_v4d d = v - m4;
#else
      bk_v4d v;
      memcpy(&v, x + j + 4 * q, sizeof v);
      const bk_v4d d = v - m4;
#endif
      a[q] += d * d;
    }
  }
  if (j < n) /* the tail as in rk_sum64: +0 to the partials it misses */
    for (int q = 0; q < 4; q++) BK_FN(rk_tail4)(&a[q], x + j, n - j, q, mu, 1);
  return bk_vfold64(a);
}

/* Rows of at most BK_LN_GROUP_BYTES bytes have their statistics formed
 * BK_LN_GROUP rows at a time (measured on the project's 2-core machine:
 * 1.2-1.4x at 16-64 float32 and 17-32 float64 columns; 0.8-0.9x for
 * float64 rows of 64-200 columns, and no gain at 100 float32 ones). */
#ifndef BK_LN_GROUP
#define BK_LN_GROUP 4
#define BK_LN_GROUP_BYTES 256
#endif

/* Rows r0..r1 of the forward pass: two-pass statistics, then normalized
 * and out written once each through tiles (streaming when asked). */
/* Rows narrower than the lanes: BK_LANES rows at a time across the lanes
 * (typed_t.h), each row's sums in index order. */
BK_INLINE void BK_FN(ln_forward_narrow)(const BK_T *x, const BK_T *gamma, const BK_T *beta,
                                        BK_T *out, BK_T *nrm, BK_T *inv_std, int64_t r0, int64_t r1,
                                        int64_t n, double eps, int stream) {
  BK_T t[BK_LANES * BK_LANES], tn[BK_LANES * BK_LANES], to[BK_LANES * BK_LANES];
  /* gamma, beta, and per tile each row's mean and 1/std, repeated along the
   * row-major tile (element i of row i / n): the outputs are formed in the
   * input's own order, without transposing them back. */
  double ge[BK_LANES * BK_LANES], be[BK_LANES * BK_LANES];
  double me[BK_LANES * BK_LANES], ie[BK_LANES * BK_LANES];
  for (int64_t l = 0; l < BK_LANES; l++)
    for (int64_t j = 0; j < n; j++) {
      ge[l * n + j] = (double)gamma[j];
      be[l * n + j] = (double)beta[j];
    }
  for (int64_t r = r0; r < r1; r += BK_LANES) {
    const int64_t nr = r1 - r < BK_LANES ? r1 - r : BK_LANES;
    double mu[BK_LANES] = {0}, sq[BK_LANES] = {0}, is[BK_LANES];
    BK_FN(nk_in)(x + r * n, n, nr, t, 0);
    for (int64_t j = 0; j < n; j++) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++) mu[l] += (double)t[j * BK_LANES + l];
    }
#pragma omp simd
    for (int l = 0; l < BK_LANES; l++) mu[l] /= (double)n;
    for (int64_t j = 0; j < n; j++) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++) {
        const double d = (double)t[j * BK_LANES + l] - mu[l];
        sq[l] += d * d;
      }
    }
#pragma omp simd
    for (int l = 0; l < BK_LANES; l++) is[l] = 1.0 / sqrt(sq[l] / (double)n + eps);
    for (int64_t l = 0; l < nr; l++)
      for (int64_t j = 0; j < n; j++) {
        me[l * n + j] = mu[l];
        ie[l * n + j] = is[l];
      }
    const BK_T *restrict xr = x + r * n;
    const int64_t m = nr * n;
#pragma omp simd
    for (int64_t i = 0; i < m; i++) {
      const double nv = ((double)xr[i] - me[i]) * ie[i];
      tn[i] = (BK_T)nv;
      to[i] = (BK_T)(nv * ge[i] + be[i]);
    }
    for (int64_t l = 0; l < nr; l++) inv_std[r + l] = (BK_T)is[l];
    BK_FN(bk_put)(nrm + r * n, tn, m, stream);
    BK_FN(bk_put)(out + r * n, to, m, stream);
  }
  bk_put_fence(stream);
}

static BK_CPU_CLONES_512 void BK_FN(ln_forward_block)(const BK_T *x, const BK_T *gamma, const BK_T *beta,
                                    BK_T *out, BK_T *nrm, BK_T *inv_std, int64_t r0, int64_t r1,
                                    int64_t n, double eps, int stream) {
  BK_T tn[BK_CHUNK], to[BK_CHUNK];
  if (n < BK_LANES) {
    BK_FN(ln_forward_narrow)(x, gamma, beta, out, nrm, inv_std, r0, r1, n, eps, stream);
    return;
  }
  if (n * (int64_t)sizeof(BK_T) <= BK_LN_GROUP_BYTES) {
    /* Short rows: the statistics of BK_LN_GROUP rows first, each row's
     * chain of sums, divisions and square root independent of the others,
     * so that the processor overlaps them; row by row they ran one after
     * the other, and on short rows that chain outweighed the row's
     * arithmetic. Each row's operations are those below. */
    for (int64_t r = r0; r < r1; r += BK_LN_GROUP) {
      const int64_t kn = r1 - r < BK_LN_GROUP ? r1 - r : BK_LN_GROUP;
      double mu[BK_LN_GROUP], is[BK_LN_GROUP];
      for (int64_t k = 0; k < kn; k++) mu[k] = BK_FN(rk_sum64)(x + (r + k) * n, n) / (double)n;
      for (int64_t k = 0; k < kn; k++) {
        const double var = BK_FN(ln_sq)(x + (r + k) * n, n, mu[k]) / (double)n;
        is[k] = 1.0 / sqrt(var + eps);
        inv_std[r + k] = (BK_T)is[k];
      }
      for (int64_t k = 0; k < kn; k++) {
        const BK_T *restrict xr = x + (r + k) * n;
#pragma omp simd
        for (int64_t j = 0; j < n; j++) {
          const double nv = ((double)xr[j] - mu[k]) * is[k];
          tn[j] = (BK_T)nv;
          to[j] = (BK_T)(nv * (double)gamma[j] + (double)beta[j]);
        }
        BK_FN(bk_put)(nrm + (r + k) * n, tn, n, stream);
        BK_FN(bk_put)(out + (r + k) * n, to, n, stream);
      }
    }
    bk_put_fence(stream);
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    const BK_T *restrict xr = x + r * n;
    const double mu = BK_FN(rk_sum64)(xr, n) / (double)n;
    const double var = BK_FN(ln_sq)(xr, n, mu) / (double)n;
    /* var + eps == 0 (a constant row with eps 0) gives +inf here and NaN
     * normalized values: the IEEE result of 0 * inf. */
    const double is = 1.0 / sqrt(var + eps);
    inv_std[r] = (BK_T)is;
    /* Not streaming, the outputs are written straight, without the tiles
     * and their copy (22 x 16384 float32 and 2000 x 1024 on 2 threads:
     * 1.2x and 1.7x); streaming goes through the tiles, whose whole lines
     * bk_put streams. */
    if (!stream) {
      BK_T *restrict nr = nrm + r * n, *restrict orow = out + r * n;
#pragma omp simd
      for (int64_t j = 0; j < n; j++) {
        const double nv = ((double)xr[j] - mu) * is;
        nr[j] = (BK_T)nv;
        orow[j] = (BK_T)(nv * (double)gamma[j] + (double)beta[j]);
      }
      continue;
    }
    for (int64_t c = 0; c < n; c += BK_CHUNK) {
      const int64_t len = n - c < BK_CHUNK ? n - c : BK_CHUNK;
#pragma omp simd
      for (int64_t j = 0; j < len; j++) {
        const double nv = ((double)xr[c + j] - mu) * is;
        tn[j] = (BK_T)nv;
        to[j] = (BK_T)(nv * (double)gamma[c + j] + (double)beta[c + j]);
      }
      BK_FN(bk_put)(nrm + r * n + c, tn, len, stream);
      BK_FN(bk_put)(out + r * n + c, to, len, stream);
    }
  }
  bk_put_fence(stream);
}

/* One fixed block of rows [r0, r1) of the backward pass: dx of each row,
 * and the block's partial column sums pg[j] = sum dout*normalized,
 * pb[j] = sum dout over its rows in increasing order. */
static BK_CPU_CLONES void BK_FN(ln_backward_block)(const BK_T *dout, const BK_T *nrm, const BK_T *inv_std,
                                     const BK_T *gamma, BK_T *dx, double *pg, double *pb,
                                     int64_t r0, int64_t r1, int64_t n, int stream) {
  BK_T tile[BK_CHUNK];
  for (int64_t j = 0; j < n; j++) pg[j] = pb[j] = 0.0;
  for (int64_t r = r0; r < r1; r++) {
    const BK_T *dr = dout + r * n, *nr = nrm + r * n;
    double l1[BK_LANES] = {0}, l2[BK_LANES] = {0};
    int64_t j = 0;
    for (; j + BK_LANES <= n; j += BK_LANES) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++) {
        const double g = (double)dr[j + l] * (double)gamma[j + l];
        l1[l] += g;
        l2[l] += g * (double)nr[j + l];
      }
    }
    for (int l = 0; j < n; j++, l++) {
      const double g = (double)dr[j] * (double)gamma[j];
      l1[l] += g;
      l2[l] += g * (double)nr[j];
    }
    const double s1 = bk_fold64(l1), s2 = bk_fold64(l2), scale = (double)inv_std[r] / (double)n;
    for (int64_t c = 0; c < n; c += BK_CHUNK) {
      const int64_t len = n - c < BK_CHUNK ? n - c : BK_CHUNK;
#pragma omp simd
      for (int64_t k = 0; k < len; k++) {
        const double d = (double)dr[c + k], nv = (double)nr[c + k];
        const double g = d * (double)gamma[c + k];
        tile[k] = (BK_T)(scale * ((double)n * g - s1 - nv * s2));
        pg[c + k] += d * nv;
        pb[c + k] += d;
      }
      BK_FN(bk_put)(dx + r * n + c, tile, len, stream);
    }
  }
  bk_put_fence(stream);
}
