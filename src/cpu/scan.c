/*
 * scan.c — CPU diagonal selective scans (shared and token-dependent
 * coefficients) and their gradients.
 *
 * Every state column is an independent first-order recurrence. The kernels
 * walk time sequentially and carry the recurrence in double, so a float32
 * scan is far more accurate than a float32 left-to-right evaluation. Threads
 * take contiguous blocks of state columns and walk t in the outer loop, so
 * each step reads one contiguous slice of a (seq_len, state) row; the fold
 * order of every sum is fixed by t alone, whatever the thread count.
 */
#include "cpu.h"

/* State columns per block: one thread's slice of a time step. */
#define SCAN_BLOCK 64

bk_status bk__cpu_scan_diag(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                            const void *X, const void *h0, void *y, int64_t seq_len,
                            int64_t state, int var) {
  (void)ctx;
  const int64_t blocks = (state + SCAN_BLOCK - 1) / SCAN_BLOCK;
#pragma omp parallel for schedule(static) if (seq_len * state >= BK_CPU_PARALLEL_MIN)
  for (int64_t b = 0; b < blocks; b++) {
    const int64_t j0 = b * SCAN_BLOCK;
    const int64_t w = state - j0 < SCAN_BLOCK ? state - j0 : SCAN_BLOCK;
    double h[SCAN_BLOCK];
    for (int64_t j = 0; j < w; j++) h[j] = bk_ld(dt, h0, j0 + j);
    for (int64_t t = 0; t < seq_len; t++) {
      const int64_t row = t * state + j0;
      /* Shared coefficients are indexed by state only. */
      const int64_t cbase = var ? row : j0;
      for (int64_t j = 0; j < w; j++) {
        h[j] = bk_ld(dt, A, cbase + j) * h[j] + bk_ld(dt, B, cbase + j) * bk_ld(dt, X, row + j);
        bk_st(dt, y, row + j, h[j]);
      }
    }
  }
  return BK_OK;
}

/*
 * Walks t from seq_len-1 down to 0 with g[t] = dy[t] + a_next*g[t+1], where
 * a_next is A (shared) or A[t+1] (var; g[seq_len] = 0 makes its value at the
 * last step irrelevant). h[t-1] is read from the forward result `out` (h0 at
 * t = 0), as the contract says: the gradient is that of the stored values.
 */
bk_status bk__cpu_scan_diag_backward(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                                     const void *X, const void *h0, const void *out,
                                     const void *dy, void *dA, void *dB, void *dX, void *dh0,
                                     int64_t seq_len, int64_t state, int var) {
  (void)ctx;
  const int64_t blocks = (state + SCAN_BLOCK - 1) / SCAN_BLOCK;
#pragma omp parallel for schedule(static) if (seq_len * state >= BK_CPU_PARALLEL_MIN)
  for (int64_t b = 0; b < blocks; b++) {
    const int64_t j0 = b * SCAN_BLOCK;
    const int64_t w = state - j0 < SCAN_BLOCK ? state - j0 : SCAN_BLOCK;
    double g[SCAN_BLOCK], sa[SCAN_BLOCK], sb[SCAN_BLOCK];
    for (int64_t j = 0; j < w; j++) g[j] = sa[j] = sb[j] = 0.0;
    for (int64_t t = seq_len - 1; t >= 0; t--) {
      const int64_t row = t * state + j0;
      const int64_t cbase = var ? row : j0;
      const int64_t next = var ? row + state : j0; /* A[t+1] in the var form */
      for (int64_t j = 0; j < w; j++) {
        const double carry = t == seq_len - 1 ? 0.0 : bk_ld(dt, A, next + j) * g[j];
        g[j] = bk_ld(dt, dy, row + j) + carry;
        const double hprev = t > 0 ? bk_ld(dt, out, row - state + j) : bk_ld(dt, h0, j0 + j);
        const double ga = g[j] * hprev, gb = g[j] * bk_ld(dt, X, row + j);
        if (var) {
          bk_st(dt, dA, row + j, ga);
          bk_st(dt, dB, row + j, gb);
        } else {
          sa[j] += ga;
          sb[j] += gb;
        }
        bk_st(dt, dX, row + j, g[j] * bk_ld(dt, B, cbase + j));
      }
    }
    for (int64_t j = 0; j < w; j++) {
      if (!var) {
        bk_st(dt, dA, j0 + j, sa[j]);
        bk_st(dt, dB, j0 + j, sb[j]);
      }
      bk_st(dt, dh0, j0 + j, bk_ld(dt, A, j0 + j) * g[j]);
    }
  }
  return BK_OK;
}
