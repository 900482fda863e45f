/*
 * softmax.c — CPU softmax along the middle axis of an (outer, n, inner)
 * tensor.
 *
 * The work is cut into tiles of one outer index and up to TILE consecutive
 * inner positions. A tile walks its n slices three times (maximum, sum of
 * exponentials, output), reading TILE contiguous elements per slice, so the
 * loops stay cache friendly for every axis position, inner == 1 included.
 * Each fibre's maximum and sum are folded in index order in float64, so the
 * result does not depend on the tiling or the thread count.
 */
#include "cpu.h"

#include <math.h>

enum { TILE = 64 };

/*
 * IEEE behaviour falls out of the arithmetic and is relied on: the maximum
 * ignores NaN; a NaN entry gives exp(NaN) = NaN in the sum; a +inf maximum
 * gives inf - inf = NaN for the infinite entries; a fibre of only -inf gives
 * -inf - (-inf) = NaN. In each case the sum is NaN and every entry of the
 * fibre becomes NaN, as the contract asks.
 */
static void softmax_tile(bk_dtype dt, const void *x, void *y, int64_t base, int64_t n,
                         int64_t inner, int64_t width) {
  double m[TILE], s[TILE];
  for (int64_t t = 0; t < width; t++) {
    m[t] = -INFINITY;
    s[t] = 0.0;
  }
  for (int64_t j = 0; j < n; j++) {
    int64_t row = base + j * inner;
    for (int64_t t = 0; t < width; t++) {
      double v = bk_ld(dt, x, row + t);
      if (v > m[t]) m[t] = v;
    }
  }
  for (int64_t j = 0; j < n; j++) {
    int64_t row = base + j * inner;
    for (int64_t t = 0; t < width; t++) s[t] += exp(bk_ld(dt, x, row + t) - m[t]);
  }
  for (int64_t j = 0; j < n; j++) {
    int64_t row = base + j * inner;
    for (int64_t t = 0; t < width; t++)
      bk_st(dt, y, row + t, exp(bk_ld(dt, x, row + t) - m[t]) / s[t]);
  }
}

bk_status bk__cpu_softmax(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,
                          int64_t n, int64_t inner) {
  (void)ctx;
  int64_t tiles_per_outer = (inner + TILE - 1) / TILE;
  int64_t tiles = outer * tiles_per_outer;
#pragma omp parallel for schedule(static) if (outer * n * inner >= BK_CPU_PARALLEL_MIN)
  for (int64_t tile = 0; tile < tiles; tile++) {
    int64_t o = tile / tiles_per_outer;
    int64_t i0 = (tile % tiles_per_outer) * TILE;
    int64_t width = inner - i0 < TILE ? inner - i0 : TILE;
    softmax_tile(dt, x, y, o * n * inner + i0, n, inner, width);
  }
  return BK_OK;
}
