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
      bk_v4f v;
      memcpy(&v, x + j + 4 * q, sizeof v);
      const bk_v4d d = __builtin_convertvector(v, bk_v4d) - m4;
#else
      bk_v4d v;
      memcpy(&v, x + j + 4 * q, sizeof v);
      const bk_v4d d = v - m4;
#endif
      a[q] += d * d;
    }
  }
  if (j < n) { /* the tail as in rk_sum64: +0 to the partials it misses */
    double t[BK_LANES] = {0};
    for (int l = 0; j < n; j++, l++) {
      const double d = (double)x[j] - mu;
      t[l] = d * d;
    }
    for (int q = 0; q < 4; q++) {
      bk_v4d v;
      memcpy(&v, t + 4 * q, sizeof v);
      a[q] += v;
    }
  }
  return bk_vfold64(a);
}

/* Rows r0..r1 of the forward pass: two-pass statistics, then normalized
 * and out written once each through tiles (streaming when asked). */
/* Rows narrower than the lanes: BK_LANES rows at a time across the lanes
 * (typed_t.h), each row's sums in index order. */
BK_INLINE void BK_FN(ln_forward_narrow)(const BK_T *x, const BK_T *gamma, const BK_T *beta,
                                        BK_T *out, BK_T *nrm, BK_T *inv_std, int64_t r0, int64_t r1,
                                        int64_t n, double eps, int stream) {
  BK_T t[BK_LANES * BK_NARROW], tn[BK_LANES * BK_NARROW];
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
    for (int64_t j = 0; j < n; j++) {
      const double g = (double)gamma[j], b = (double)beta[j];
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++) {
        const double nv = ((double)t[j * BK_LANES + l] - mu[l]) * is[l];
        tn[j * BK_LANES + l] = (BK_T)nv;
        t[j * BK_LANES + l] = (BK_T)(nv * g + b);
      }
    }
    for (int64_t l = 0; l < nr; l++) inv_std[r + l] = (BK_T)is[l];
    BK_FN(nk_out)(tn, n, nr, nrm + r * n, stream);
    BK_FN(nk_out)(t, n, nr, out + r * n, stream);
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
  for (int64_t r = r0; r < r1; r++) {
    const BK_T *xr = x + r * n;
    const double mu = BK_FN(rk_sum64)(xr, n) / (double)n;
    const double var = BK_FN(ln_sq)(xr, n, mu) / (double)n;
    /* var + eps == 0 (a constant row with eps 0) gives +inf here and NaN
     * normalized values: the IEEE result of 0 * inf. */
    const double is = 1.0 / sqrt(var + eps);
    inv_std[r] = (BK_T)is;
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
