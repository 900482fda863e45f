/*
 * scan_t.h — the typed diagonal scans, a template included by scan.c once
 * per dtype after typed_t.h (see there).
 *
 * Columns j0..j0+w of a (seq_len, state) recurrence, carried in float64.
 * The arithmetic of each column is the same whatever block it falls in and
 * whatever code path runs it (no contraction into fused multiply-adds), so
 * the results depend on neither the block width nor the thread count.
 */

/* Forward: h[t] = A[t] * h[t-1] + B[t] * X[t] from h0, y[t] = h[t]. Shared
 * coefficients (var == 0) are indexed by state only. */
static BK_CPU_CLONES void BK_FN(scan_fwd_block)(const BK_T *restrict A, const BK_T *restrict B,
                                                const BK_T *restrict X, const BK_T *restrict h0,
                                                BK_T *restrict y, int64_t seq_len, int64_t state,
                                                int var, int64_t j0, int64_t w, int stream,
                                                double *restrict h, BK_T *restrict out) {
  for (int64_t j = 0; j < w; j++) h[j] = (double)h0[j0 + j];
  for (int64_t t = 0; t < seq_len; t++) {
    const int64_t row = t * state + j0, c = var ? row : j0;
    const BK_T *restrict a = A + c, *restrict b = B + c, *restrict x = X + row;
#pragma omp simd
    for (int64_t j = 0; j < w; j++) {
      h[j] = (double)a[j] * h[j] + (double)b[j] * (double)x[j];
      out[j] = (BK_T)h[j];
    }
    BK_FN(bk_put)(y + row, out, w, stream);
  }
}

/*
 * Backward over the same columns, t from seq_len-1 down to 0:
 * g[t] = dy[t] + a_next * g[t+1] (a_next = A, or A[t+1] in the var form;
 * no carry at the last step), h[t-1] read from the forward result `out`
 * (h0 at t = 0). The var form stores dA[t] = g h[t-1] and dB[t] = g X[t];
 * the shared form sums them over t in float64, in the order of t.
 *
 * Each row is walked from its last 16 columns down to its first, so every
 * stream runs through memory in one direction, downwards: walked upwards
 * within a row and downwards from row to row, rows wider than about 80
 * columns ran 3x slower (measured on a 2-core x86-64; the prefetchers follow
 * the rows' direction). The stores are plain: streaming stores written
 * downwards, 16 values at a time, ran up to 40x slower there.
 */
static BK_CPU_CLONES void BK_FN(scan_bwd_block)(
    const BK_T *restrict A, const BK_T *restrict B, const BK_T *restrict X,
    const BK_T *restrict h0, const BK_T *restrict out, const BK_T *restrict dy, BK_T *restrict dA,
    BK_T *restrict dB, BK_T *restrict dX, BK_T *restrict dh0, int64_t seq_len, int64_t state,
    int var, int64_t j0, int64_t w, double *restrict g) {
  double *restrict sa = g + w, *restrict sb = g + 2 * w;
  for (int64_t j = 0; j < w; j++) g[j] = sa[j] = sb[j] = 0.0;
  for (int64_t t = seq_len - 1; t >= 0; t--) {
    const int64_t row = t * state + j0, c = var ? row : j0;
    const int last = t == seq_len - 1;
    /* A[t+1] in the var form (not read at the last step) */
    const BK_T *restrict an = A + (var && !last ? row + state : j0);
    const BK_T *restrict hp = t > 0 ? out + row - state : h0 + j0;
    const BK_T *restrict d = dy + row, *restrict x = X + row, *restrict b = B + c;
    for (int64_t q = (w - 1) / 16 * 16; q >= 0; q -= 16) {
      const int64_t len = w - q < 16 ? w - q : 16;
      double *restrict gq = g + q;
      BK_T *restrict tx = dX + row + q;
      if (last) {
#pragma omp simd
        for (int64_t j = 0; j < len; j++) gq[j] = (double)d[q + j] + 0.0;
      } else {
#pragma omp simd
        for (int64_t j = 0; j < len; j++) gq[j] = (double)d[q + j] + (double)an[q + j] * gq[j];
      }
      if (var) {
        BK_T *restrict ta = dA + row + q, *restrict tb = dB + row + q;
#pragma omp simd
        for (int64_t j = 0; j < len; j++) {
          ta[j] = (BK_T)(gq[j] * (double)hp[q + j]);
          tb[j] = (BK_T)(gq[j] * (double)x[q + j]);
          tx[j] = (BK_T)(gq[j] * (double)b[q + j]);
        }
      } else {
#pragma omp simd
        for (int64_t j = 0; j < len; j++) {
          sa[q + j] += gq[j] * (double)hp[q + j];
          sb[q + j] += gq[j] * (double)x[q + j];
          tx[j] = (BK_T)(gq[j] * (double)b[q + j]);
        }
      }
    }
  }
  for (int64_t j = 0; j < w; j++) {
    if (!var) {
      dA[j0 + j] = (BK_T)sa[j];
      dB[j0 + j] = (BK_T)sb[j];
    }
    dh0[j0 + j] = (BK_T)((double)A[j0 + j] * g[j]);
  }
}

/* Both directions over all columns: blocks of `width` columns handed to the
 * threads one at a time. scratch holds 3 * width doubles per thread: the
 * gradient's carried state, or the forward's state and its row on the way
 * to y. */
static void BK_FN(scan_run)(const BK_T *A, const BK_T *B, const BK_T *X, const BK_T *h0,
                            const BK_T *out, const BK_T *dy, BK_T *y_or_dA, BK_T *dB, BK_T *dX,
                            BK_T *dh0, int64_t seq_len, int64_t state, int var, int backward,
                            int stream, int threads, int64_t width, char *scratch) {
  const int64_t blocks = (state + width - 1) / width;
  const size_t per = (size_t)width * 3 * sizeof(double);
  atomic_llong next = 0;
  (void)threads; /* read only by the OpenMP pragma */
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    double *st = (double *)(scratch + (size_t)bk_cpu_thread() * per);
    BK_T *rows_out = (BK_T *)(st + width);
    for (int64_t b0, b1; bk_cpu_take(&next, blocks, 1, &b0, &b1);) {
      const int64_t j0 = b0 * width, w = state - j0 < width ? state - j0 : width;
      if (backward)
        BK_FN(scan_bwd_block)(A, B, X, h0, out, dy, y_or_dA, dB, dX, dh0, seq_len, state, var, j0,
                              w, st);
      else
        BK_FN(scan_fwd_block)(A, B, X, h0, y_or_dA, seq_len, state, var, j0, w, stream, st,
                              rows_out);
    }
    bk_put_fence(stream);
  }
}
