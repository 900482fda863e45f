/*
 * softmax.c — CPU softmax along the middle axis of an (outer, n, inner)
 * tensor.
 *
 * inner == 1 (the contiguous axis) runs row by row; otherwise the work is
 * cut into tiles of one outer index and up to SOFTMAX_TILE consecutive inner
 * positions, walked slice by slice so the loops stay contiguous for every
 * axis position. Each thread takes one contiguous block of rows or tiles;
 * a fibre's result depends only on its own values, never on the block it
 * fell in, so it is the same for every thread count.
 *
 * Each exponential is evaluated once (typed_t.h: float32 exponentials for
 * float32 data, within 2 ulp) and stored; the sum of a fibre's exponentials
 * is formed in float64 (for float32 rows from float32 partial sums of at
 * most BK_CHUNK / BK_LANES terms each), and the output is the stored
 * exponential times the rounded reciprocal of the sum. When the output is
 * larger than the last-level cache, the exponentials go to per-thread
 * scratch instead and the output is written once with streaming stores.
 *
 * IEEE behaviour falls out of the arithmetic and is relied on: the maximum
 * ignores NaN; a NaN entry gives exp(NaN) = NaN in the sum; a +inf maximum
 * gives inf - inf = NaN for the infinite entries; a fibre of only -inf gives
 * -inf - (-inf) = NaN. In each case the sum is NaN and every entry of the
 * fibre becomes NaN, as the contract asks.
 */
#include "cpu.h"

enum { SOFTMAX_TILE = 64 };

#define BK_TEMPLATE "softmax_t.h"
#include "instantiate.h"

bk_status bk__cpu_softmax(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,
                          int64_t n, int64_t inner) {
  const size_t es = dt == BK_F32 ? sizeof(float) : sizeof(double);
  const int64_t total = outer * n * inner;
  const int threads = bk_cpu_threads(total);
  /* Scratch per thread: a row (and, for rows read once, its blocks' maxima
   * and float64 sums), or a tile's n slices. Rows longer than half a core's
   * cache are read once (softmax_t.h): reading them twice would read them
   * from memory twice. */
  const int64_t one_read = (int64_t)(bk__cpu_l2_bytes(ctx) / 2 / es);
  const int64_t blocks = (n + BK_CHUNK - 1) / BK_CHUNK;
  const int64_t per = inner == 1 ? n + blocks + (2 * blocks * 8 + 8 + (int64_t)es - 1) / (int64_t)es
                                 : n * (inner < SOFTMAX_TILE ? inner : SOFTMAX_TILE);
  const int stream = bk__cpu_streams(ctx, (size_t)total * es) && per * (int64_t)es <= BK_CPU_SCRATCH_MAX;
  void *scratch = NULL;
  if (stream) {
    scratch = bk__host_alloc("bk_softmax", "scratch", (size_t)threads * (size_t)per, es);
    if (!scratch) return BK_ERR_OUT_OF_MEMORY;
  }
  if (dt == BK_F32)
    softmax_run_f32(x, y, outer, n, inner, scratch, per, stream, threads, one_read);
  else
    softmax_run_f64(x, y, outer, n, inner, scratch, per, stream, threads, one_read);
  bk__host_free(scratch);
  return BK_OK;
}
