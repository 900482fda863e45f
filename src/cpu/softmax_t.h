/*
 * softmax_t.h — the typed softmax kernels, a template included by softmax.c
 * once per dtype after typed_t.h (see there).
 */

/*
 * One row too long for the core's cache, read from memory once: each block
 * of BK_CHUNK entries takes its own maximum m_b and stores exp(x - m_b)
 * (one exponential per entry, as on the other path) in e with the block's
 * float64 sum z_b; then M = max m_b, S = sum_b z_b exp(m_b - M) in block
 * order, and block b is written as its exponentials times
 * (BK_T)(exp(m_b - M) / S). e holds n values, then the blocks' maxima and
 * sums. A block of only -inf entries stores zeros (its factor is 0 unless
 * the row's sum is NaN or 0, and then the row is NaN as it must be). Two
 * more roundings than the other path per entry.
 */
BK_INLINE void BK_FN(softmax_row_once)(const BK_T *restrict x, BK_T *y, int64_t n,
                                       BK_T *restrict e, int stream) {
  const int64_t nb = (n + BK_CHUNK - 1) / BK_CHUNK;
  BK_T *restrict mb = e + n;
  double *restrict zb = (double *)(void *)(((uintptr_t)(mb + nb) + 7) & ~(uintptr_t)7);
  BK_T M = -INFINITY;
  for (int64_t b = 0; b < nb; b++) {
    const int64_t c = b * BK_CHUNK, len = n - c < BK_CHUNK ? n - c : BK_CHUNK;
    const BK_T m = BK_FN(rk_max)(x + c, len);
    mb[b] = m;
    if (m == -INFINITY) { /* only -inf and NaN: NaN must still reach the sum */
      int nan = 0;
      for (int64_t j = 0; j < len; j++) nan |= x[c + j] != x[c + j];
      for (int64_t j = 0; j < len; j++) e[c + j] = 0;
      zb[b] = nan ? (double)NAN : 0.0;
      continue;
    }
    zb[b] = (double)BK_FN(rk_chunk_exp)(x + c, e + c, len, m);
    M = m > M ? m : M;
  }
  double S = 0.0;
  for (int64_t b = 0; b < nb; b++)
    S += mb[b] == -INFINITY ? zb[b] : zb[b] * exp((double)mb[b] - (double)M);
  const double inv = 1.0 / S;
  for (int64_t b = 0; b < nb; b++) {
    const int64_t c = b * BK_CHUNK, len = n - c < BK_CHUNK ? n - c : BK_CHUNK;
    /* A block of only -inf: 0, or NaN where the sum is (a NaN in the row)
     * or where every block is (S = 0, inv = inf). */
    const double f = mb[b] == -INFINITY ? 0.0 * inv : exp((double)mb[b] - (double)M) * inv;
    BK_FN(rk_scale_put)(e + c, y + c, len, (BK_T)f, stream);
  }
}

/*
 * Rows r0..r1 of (rows, n) softmax along the contiguous axis. Rows
 * narrower than the lanes go BK_LANES at a time, across the lanes. Per row: the
 * maximum, then exp(x - m) stored once (into e when given: this thread's
 * scratch of n values, so that the output is written only once, streaming;
 * else into y) with their sum, then y = e * (1/sum).
 */
static BK_CPU_CLONES_512 void BK_FN(softmax_rows)(const BK_T *x, BK_T *y, int64_t r0, int64_t r1,
                                                  int64_t n, BK_T *e, int stream,
                                                  int64_t one_read) {
  if (n < BK_NARROW) { /* narrow rows, across the lanes (typed_t.h) */
    BK_T t[BK_LANES * BK_NARROW];
    for (int64_t r = r0; r < r1; r += BK_LANES) {
      const int64_t nr = r1 - r < BK_LANES ? r1 - r : BK_LANES;
      BK_FN(nk_in)(x + r * n, n, nr, t, 0);
      BK_FN(nk_softmax)(t, NULL, n);
      BK_FN(nk_out)(t, n, nr, y + r * n, stream);
    }
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    const BK_T *xr = x + r * n;
    BK_T *yr = y + r * n, *er = e ? e : yr;
    if (e && n >= one_read) {
      BK_FN(softmax_row_once)(xr, yr, n, e, stream);
      continue;
    }
    BK_T m = BK_FN(rk_max)(xr, n);
    double s = BK_FN(rk_exp_store)(xr, er, n, m);
    BK_FN(rk_scale_put)(er, yr, n, (BK_T)(1.0 / s), stream && e);
  }
}

/*
 * Tiles t0..t1 of the (outer, n, inner) case: a tile is one outer index and
 * up to SOFTMAX_TILE consecutive inner positions, walked slice by slice so
 * every access is contiguous; the loops run across the tile's positions.
 * Sums are folded over the slices in index order in float64.
 */
static BK_CPU_CLONES_512 void BK_FN(softmax_tiles)(const BK_T *x, BK_T *y, int64_t t0, int64_t t1,
                                                   int64_t n, int64_t inner, BK_T *e, int stream) {
  const int64_t per_outer = (inner + SOFTMAX_TILE - 1) / SOFTMAX_TILE;
  BK_T m[SOFTMAX_TILE], f[SOFTMAX_TILE];
  double s[SOFTMAX_TILE];
  for (int64_t tile = t0; tile < t1; tile++) {
    const int64_t i0 = (tile % per_outer) * SOFTMAX_TILE;
    const int64_t w = inner - i0 < SOFTMAX_TILE ? inner - i0 : SOFTMAX_TILE;
    const int64_t base = (tile / per_outer) * n * inner + i0;
    for (int64_t t = 0; t < w; t++) {
      m[t] = -INFINITY;
      s[t] = 0.0;
    }
    for (int64_t j = 0; j < n; j++) {
      const BK_T *xj = x + base + j * inner;
#pragma omp simd
      for (int64_t t = 0; t < w; t++) m[t] = xj[t] > m[t] ? xj[t] : m[t];
    }
    /* The exponentials go to e (tile-major scratch, w per slice) or to y. */
    for (int64_t j = 0; j < n; j++) {
      const BK_T *xj = x + base + j * inner;
      BK_T *ej = e ? e + j * w : y + base + j * inner;
#pragma omp simd
      for (int64_t t = 0; t < w; t++) {
        ej[t] = BK_FN(bk_expn)(xj[t] - m[t]);
        s[t] += (double)ej[t];
      }
    }
    for (int64_t t = 0; t < w; t++) f[t] = (BK_T)(1.0 / s[t]);
    for (int64_t j = 0; j < n; j++) {
      BK_T *yj = y + base + j * inner;
      const BK_T *ej = e ? e + j * w : yj;
      BK_T tile_out[SOFTMAX_TILE];
#pragma omp simd
      for (int64_t t = 0; t < w; t++) tile_out[t] = ej[t] * f[t];
      BK_FN(bk_put)(yj, tile_out, w, stream && e);
    }
  }
}

/* The whole call for one dtype. Scratch (threads * per values) exists only
 * when the output streams; NULL otherwise. */
static void BK_FN(softmax_run)(const BK_T *x, BK_T *y, int64_t outer, int64_t n, int64_t inner,
                               BK_T *scratch, int64_t per, int stream, int threads,
                               int64_t one_read) {
  const int64_t units = inner == 1 ? outer : outer * ((inner + SOFTMAX_TILE - 1) / SOFTMAX_TILE);
  const int64_t chunk = bk_cpu_chunk(units, inner == 1 ? n : n * SOFTMAX_TILE, threads);
  atomic_llong next = 0;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    BK_T *e = scratch ? scratch + (int64_t)bk_cpu_thread() * per : NULL;
    for (int64_t u0, u1; bk_cpu_take(&next, units, chunk, &u0, &u1);) {
      if (inner == 1)
        BK_FN(softmax_rows)(x, y, u0, u1, n, e, stream, one_read);
      else
        BK_FN(softmax_tiles)(x, y, u0, u1, n, inner, e, stream);
    }
    bk_put_fence(stream);
  }
}
