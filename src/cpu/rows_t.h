/*
 * rows_t.h — the typed kernels of rows.c (sum, max, first-max mask, masked
 * softmax), a template included once per dtype after typed_t.h. Each kernel
 * takes a block of rows [r0, r1); a row's result depends only on the row.
 */

/* Rows narrower than the lanes go BK_LANES at a time, across the lanes
 * (typed_t.h), each row folded in index order as rk_sum64 folds it. */
static BK_CPU_CLONES void BK_FN(rows_sum_block)(const BK_T *x, BK_T *y, int64_t r0, int64_t r1, int64_t n) {
  if (n >= BK_NARROW || n == 0) {
    for (int64_t r = r0; r < r1; r++) y[r] = (BK_T)BK_FN(rk_sum64)(x + r * n, n);
    return;
  }
  BK_T t[BK_LANES * BK_NARROW];
  for (int64_t r = r0; r < r1; r += BK_LANES) {
    const int64_t nr = r1 - r < BK_LANES ? r1 - r : BK_LANES;
    double s[BK_LANES] = {0};
    BK_FN(nk_in)(x + r * n, n, nr, t, 0);
    for (int64_t j = 0; j < n; j++) {
#pragma omp simd
      for (int l = 0; l < BK_LANES; l++) s[l] += (double)t[j * BK_LANES + l];
    }
    for (int64_t l = 0; l < nr; l++) y[r + l] = (BK_T)s[l];
  }
}

static BK_CPU_CLONES void BK_FN(rows_max_block)(const BK_T *x, BK_T *y, int64_t r0, int64_t r1, int64_t n) {
  if (n >= BK_LANES || n == 0) {
    for (int64_t r = r0; r < r1; r++) y[r] = n == 0 ? (BK_T)0 : BK_FN(rk_max)(x + r * n, n);
    return;
  }
  BK_T t[BK_LANES * BK_NARROW], m[BK_LANES];
  for (int64_t r = r0; r < r1; r += BK_LANES) {
    const int64_t nr = r1 - r < BK_LANES ? r1 - r : BK_LANES;
    BK_FN(nk_in)(x + r * n, n, nr, t, 0);
    BK_FN(nk_max)(t, n, m);
    for (int64_t l = 0; l < nr; l++) y[r + l] = m[l];
  }
}

/* The literal first-max scan (start at index 0, move only to a strictly
 * greater entry) in two vectorizable steps: a NaN at index 0 stays selected
 * (nothing is greater than it); otherwise NaN is never selected, and the
 * scan ends at the first entry equal to the maximum of the others (-0 and
 * +0 being equal; a row with nothing above -inf selects index 0). */
BK_INLINE int64_t BK_FN(rk_first_max)(const BK_T *restrict x, int64_t n) {
  if (x[0] != x[0]) return 0;
  const BK_T m = BK_FN(rk_max)(x, n);
  int64_t j = 0;
  while (j < n - 1 && x[j] != m) j++;
  return j;
}

static BK_CPU_CLONES void BK_FN(rows_first_max_block)(const BK_T *x, BK_T *y, int64_t r0, int64_t r1,
                                        int64_t n, int stream) {
  BK_T tile[BK_CHUNK];
  if (n < BK_LANES) { /* narrow rows: the same scan in every lane */
    BK_T t[BK_LANES * BK_NARROW], bv[BK_LANES];
    int64_t best[BK_LANES];
    for (int64_t r = r0; r < r1; r += BK_LANES) {
      const int64_t nr = r1 - r < BK_LANES ? r1 - r : BK_LANES;
      BK_FN(nk_in)(x + r * n, n, nr, t, 0);
      for (int l = 0; l < BK_LANES; l++) {
        bv[l] = t[l];
        best[l] = 0;
      }
      for (int64_t j = 1; j < n; j++) {
#pragma omp simd
        for (int l = 0; l < BK_LANES; l++) {
          const int up = t[j * BK_LANES + l] > bv[l];
          bv[l] = up ? t[j * BK_LANES + l] : bv[l];
          best[l] = up ? j : best[l];
        }
      }
      for (int64_t j = 0; j < n; j++) {
#pragma omp simd
        for (int l = 0; l < BK_LANES; l++) t[j * BK_LANES + l] = best[l] == j ? (BK_T)1 : (BK_T)0;
      }
      BK_FN(nk_out)(t, n, nr, y + r * n, stream);
    }
    bk_put_fence(stream);
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    const int64_t best = BK_FN(rk_first_max)(x + r * n, n);
    for (int64_t c = 0; c < n; c += BK_CHUNK) {
      const int64_t len = n - c < BK_CHUNK ? n - c : BK_CHUNK;
      memset(tile, 0, (size_t)len * sizeof *tile); /* +0 in both dtypes */
      if (best >= c && best < c + len) tile[best - c] = (BK_T)1;
      BK_FN(bk_put)(y + r * n + c, tile, len, stream);
    }
  }
  bk_put_fence(stream);
}

/*
 * Masked softmax of rows r0..r1: allowed <=> mask != 0 (NaN allowed, -0
 * blocked). Scores of blocked entries are read but every value derived from
 * them is discarded by a select, so they cannot influence the result.
 * Exponentials go to e (per-thread scratch, when streaming) or y.
 */
static BK_CPU_CLONES_512 void BK_FN(masked_softmax_block)(const BK_T *x, const BK_T *mask, BK_T *y,
                                                      int64_t r0, int64_t r1, int64_t n,
                                                      BK_T *e, int stream) {
  if (n < BK_LANES) { /* narrow rows, across the lanes */
    BK_T t[BK_LANES * BK_NARROW], tm[BK_LANES * BK_NARROW];
    for (int64_t r = r0; r < r1; r += BK_LANES) {
      const int64_t nr = r1 - r < BK_LANES ? r1 - r : BK_LANES;
      BK_FN(nk_in)(x + r * n, n, nr, t, 0);
      BK_FN(nk_in)(mask + r * n, n, nr, tm, 0);
      BK_FN(nk_softmax)(t, tm, n);
      BK_FN(nk_out)(t, n, nr, y + r * n, stream);
    }
    bk_put_fence(stream);
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    const BK_T *xr = x + r * n, *mr = mask + r * n;
    BK_T *yr = y + r * n, *er = e ? e : yr;
    BK_T m = -INFINITY;
    int64_t allowed = 0;
#pragma omp simd reduction(+ : allowed)
    for (int64_t j = 0; j < n; j++) allowed += mr[j] != 0;
    /* Only +-0 and NaN make the order of a max matter, and neither changes
     * the result: exp(x - m) is the same for m = -0 and +0, and an allowed
     * NaN makes the whole row NaN through the sum whatever m is. */
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; j++) m = mr[j] != 0 && xr[j] > m ? xr[j] : m;
    double s = 0.0;
    for (int64_t c = 0; c < n; c += BK_CHUNK) {
      const int64_t len = n - c < BK_CHUNK ? n - c : BK_CHUNK;
#pragma omp simd
      for (int64_t j = 0; j < len; j++) {
        BK_T v = BK_FN(bk_expn)(xr[c + j] - m);
        er[c + j] = mr[c + j] != 0 ? v : (BK_T)0;
      }
      s += (double)BK_FN(rk_chunk_sum)(er + c, len);
    }
    const BK_T f = allowed ? (BK_T)(1.0 / s) : (BK_T)0;
    BK_T tile[BK_CHUNK];
    for (int64_t c = 0; c < n; c += BK_CHUNK) {
      const int64_t len = n - c < BK_CHUNK ? n - c : BK_CHUNK;
#pragma omp simd
      for (int64_t j = 0; j < len; j++) tile[j] = mr[c + j] != 0 ? er[c + j] * f : (BK_T)0;
      BK_FN(bk_put)(yr + c, tile, len, stream && e);
    }
  }
  bk_put_fence(stream);
}

/* ---- top-k selection (rows.c: the small-k path) ------------------------------------ */

/* One number among a row's k best: value, index, NaN entries before it. */
typedef struct BK_FN(topk_best) {
  BK_T v;
  int64_t i, nan_before;
} BK_FN(topk_best);

/* Puts x[i] (a number) among the k best so far (nb of them, sorted by value
 * descending then index ascending) when it beats the k-th. */
BK_INLINE void BK_FN(topk_offer)(BK_FN(topk_best) *best, int64_t *nb, int64_t k, BK_T v,
                                 int64_t i, int64_t nans) {
  if (*nb == k && !(v > best[k - 1].v)) return; /* a later equal value never beats */
  int64_t j = *nb < k ? (*nb)++ : k - 1;
  for (; j > 0 && best[j - 1].v < v; j--) best[j] = best[j - 1];
  best[j] = (BK_FN(topk_best)){v, i, nans};
}

/*
 * Rows r0..r1 of the top-k mask for 1 <= k <= 64, k < n, in one pass that
 * keeps the k best numbers (rows.c says why that is the mask). Once k
 * numbers are held, blocks of BK_LANES entries are first tested as a vector
 * against the k-th best: a block with nothing above it only adds its NaN
 * count, and most blocks of a long row are such blocks.
 */
static BK_CPU_CLONES void BK_FN(topk_select_block)(const BK_T *x, BK_T *y, int64_t r0, int64_t r1,
                                                   int64_t n, int64_t k) {
  BK_FN(topk_best) best[64];
  for (int64_t r = r0; r < r1; r++) {
    const BK_T *restrict xr = x + r * n;
    BK_T *restrict yr = y + r * n;
    int64_t nb = 0, nans = 0, i = 0;
    for (; i < n && nb < k; i++) {
      if (xr[i] != xr[i])
        nans++;
      else
        BK_FN(topk_offer)(best, &nb, k, xr[i], i, nans);
    }
    for (; i + BK_LANES <= n; i += BK_LANES) {
      const BK_T thr = best[k - 1].v;
      int above = 0, nn = 0;
#pragma omp simd reduction(| : above) reduction(+ : nn)
      for (int l = 0; l < BK_LANES; l++) {
        above |= xr[i + l] > thr;
        nn += xr[i + l] != xr[i + l];
      }
      if (!above) {
        nans += nn;
        continue;
      }
      for (int l = 0; l < BK_LANES; l++) {
        if (xr[i + l] != xr[i + l])
          nans++;
        else
          BK_FN(topk_offer)(best, &nb, k, xr[i + l], i + l, nans);
      }
    }
    for (; i < n; i++) {
      if (xr[i] != xr[i])
        nans++;
      else
        BK_FN(topk_offer)(best, &nb, k, xr[i], i, nans);
    }
    for (int64_t j = 0; j < n; j++) yr[j] = 0; /* +0 */
    for (int64_t j = 0; j < k; j++)
      if (xr[j] != xr[j]) yr[j] = 1;
    for (int64_t p = 0; p < nb; p++)
      if (p + best[p].nan_before < k) yr[best[p].i] = 1;
  }
}
