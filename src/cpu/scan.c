/*
 * scan.c — CPU diagonal selective scans (shared and token-dependent
 * coefficients) and their gradients.
 *
 * Every state column is an independent first-order recurrence. The kernels
 * walk time sequentially and carry the recurrence in float64, so a float32
 * scan is far more accurate than a float32 left-to-right evaluation. The
 * columns are cut into blocks, each walked over all of t by one thread, so
 * each step reads one contiguous slice of every (seq_len, state) input; the
 * fold order of every sum is fixed by t alone, whatever the block width and
 * thread count. The kernels are typed (scan_t.h, once per dtype) and write
 * outputs larger than the last-level cache with streaming stores.
 */
#include "cpu.h"

/* Widest block of state columns: one thread's slice of a time step, its
 * carried state (3 doubles a column in the gradient) within a core's cache. */
#define SCAN_BLOCK 8192

#define BK_TEMPLATE "scan_t.h"
#include "instantiate.h"

/* Columns per block: one block per thread, each walking its columns of
 * every row as one contiguous run (measured on a 2-core x86-64: the wider
 * the run, the closer to the copy bandwidth), cut further only where a
 * block would pass SCAN_BLOCK; in whole vectors of 16 columns. */
static int64_t scan_width(int64_t state, int threads) {
  const int64_t per_round = (int64_t)threads * SCAN_BLOCK;
  const int64_t blocks = (int64_t)threads * ((state + per_round - 1) / per_round);
  const int64_t w = (state + blocks - 1) / blocks;
  return (w + 15) / 16 * 16;
}

static bk_status scan_run(bk_context *ctx, const char *fn, bk_dtype dt, const void *A, const void *B, const void *X,
                     const void *h0, const void *out, const void *dy, void *y_or_dA, void *dB,
                     void *dX, void *dh0, int64_t seq_len, int64_t state, int var, int backward) {
  const size_t es = dt == BK_F32 ? sizeof(float) : sizeof(double);
  const int threads = bk_cpu_threads(seq_len * state);
  const int64_t width = scan_width(state, threads);
  /* The forward's y streams when it is larger than the cache and its rows
   * fill 2 KiB or more per block (narrower ones ran slower streamed); the
   * gradient's stores never do (scan_t.h). */
  const int stream = !backward && bk__cpu_streams(ctx, (size_t)(seq_len * state) * es) &&
                     (size_t)width * es >= 2048;
  char *scratch = bk__host_alloc(fn, "scratch", (size_t)threads * (size_t)width * 3,
                                 sizeof(double));
  if (!scratch) return BK_ERR_OUT_OF_MEMORY;
  if (dt == BK_F32)
    scan_run_f32(A, B, X, h0, out, dy, y_or_dA, dB, dX, dh0, seq_len, state, var, backward,
                 stream, threads, width, scratch);
  else
    scan_run_f64(A, B, X, h0, out, dy, y_or_dA, dB, dX, dh0, seq_len, state, var, backward,
                 stream, threads, width, scratch);
  bk__host_free(scratch);
  return BK_OK;
}

bk_status bk__cpu_scan_diag(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                            const void *X, const void *h0, void *y, int64_t seq_len,
                            int64_t state, int var) {
  return scan_run(ctx, var ? "bk_scan_diag_var" : "bk_scan_diag", dt, A, B, X, h0, NULL, NULL, y,
                  NULL, NULL, NULL, seq_len, state, var, 0);
}

/*
 * The gradient walks t from seq_len-1 down to 0 (scan_t.h). h[t-1] is read
 * from the forward result `out` (h0 at t = 0), as the contract says: the
 * gradient is that of the stored values.
 */
bk_status bk__cpu_scan_diag_backward(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                                     const void *X, const void *h0, const void *out,
                                     const void *dy, void *dA, void *dB, void *dX, void *dh0,
                                     int64_t seq_len, int64_t state, int var) {
  return scan_run(ctx, var ? "bk_scan_diag_var_backward" : "bk_scan_diag_backward", dt, A, B, X,
                  h0, out, dy, dA, dB, dX, dh0, seq_len, state, var, 1);
}
