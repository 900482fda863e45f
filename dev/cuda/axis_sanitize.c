/* dev/cuda/axis_sanitize.c: runs the CUDA axis engine on cuda:0 under each of its strategies
 * (bk__cuda_axis_force: the planner's, registers, one tile, chunks, clusters) at the edges of
 * its geometries, in both dtypes, for compute-sanitizer: middle-axis softmax and bk_sum_axis
 * over (outer, n, inner), and broadcast adjoints of the general geometry (reduced axes on both
 * sides of a kept one, permuted kept axes, several outer indices per tile, the innermost axis
 * reduced: runs of consecutive terms) and the transpose.
 * Build: cc -std=c11 -Iinclude -Isrc dev/cuda/axis_sanitize.c -Lbuild -lbufkern -o axis_san */
#include <bufkern.h>
#include <stdbool.h>
#include "core/hooks.h"
#include <stdio.h>
#include <stdlib.h>

static bk_buffer *input(bk_context *ctx, bk_dtype t, long long n) {
  size_t es = t == BK_F64 ? 8 : 4;
  void *h = malloc((size_t)n * es);
  for (long long i = 0; i < n; i++) {
    double v = ((i * 7919) % 23) / 11.0 - 1.0;
    if (t == BK_F64) ((double *)h)[i] = v; else ((float *)h)[i] = (float)v;
  }
  bk_buffer *b = NULL;
  if (bk_buffer_from_host(ctx, t, h, n, &b)) b = NULL;
  free(h);
  return b;
}

int main(void) {
  bk_context *ctx;
  bk_device d = {BK_DEVICE_CUDA, 0};
  if (bk_context_create(d, &ctx)) { printf("no ctx\n"); return 2; }
  static const long long axes[][3] = {{3, 2, 4}, {2, 5, 7}, {3, 17, 12}, {2, 65, 256},
                                      {2, 130, 257}, {1, 300, 300}, {1, 4100, 64}, {300, 40, 1},
                                      {1, 20000, 1}, {600, 3, 8}, {2, 700, 2},
                                      /* runs (inner 1): one lane, groups, parts */
                                      {700, 9, 1}, {300, 16, 1}, {90, 17, 1}, {40, 513, 1},
                                      {3, 70001, 1}, {1, 300007, 1}, {200, 100, 1}, {30, 5000, 1},
                                      /* flat tiles at every 16-byte offset */
                                      {70, 18, 245}, {2, 397, 170}, {200, 19, 3}};
  static const struct { int in_rank, out_rank; long long in[4], out[4], map[4]; } geos[] = {
      {1, 3, {3}, {200, 3, 200}, {0, 1, 0}},        {2, 4, {1200, 5}, {3, 1200, 7, 5}, {0, 1, 0, 2}},
      {2, 4, {1100, 8}, {3, 1100, 7, 8}, {0, 1, 0, 2}}, {2, 3, {8, 30}, {30, 50, 8}, {2, 0, 1}},
      {2, 3, {6, 30}, {30, 6, 50}, {2, 1, 0}},       {2, 4, {4, 2}, {17, 2, 1, 4}, {0, 2, 0, 1}},
      {2, 2, {70, 300}, {300, 70}, {2, 1}},          {3, 3, {4, 5, 6}, {6, 4, 5}, {3, 1, 2}},
      /* innermost axis reduced: runs, then the rest over their sums */
      {1, 3, {31}, {50, 31, 37}, {0, 1, 0}},          {2, 4, {4, 9}, {9, 20, 4, 33}, {2, 0, 1, 0}},
      {1, 2, {3}, {3, 200000}, {1, 0}},              {2, 2, {1, 1}, {300, 7001}, {1, 2}},
  };
  int bad = 0;
  for (int strategy = 0; strategy <= 4; strategy++) {
    if (!bk__cuda_axis_force(ctx, strategy)) { printf("strategy %d refused\n", strategy); return 2; }
    for (int dt = 0; dt < 2; dt++) {
      bk_dtype t = dt ? BK_F64 : BK_F32;
      for (unsigned s = 0; s < sizeof axes / sizeof axes[0]; s++) {
        long long n = axes[s][0] * axes[s][1] * axes[s][2];
        const int64_t dims[3] = {axes[s][0], axes[s][1], axes[s][2]};
        bk_buffer *x = input(ctx, t, n), *y = NULL, *z = NULL;
        if (!x) return 3;
        bk_status st = bk_sum_axis(ctx, x, dims, 3, 1, &y);
        if (!st && dims[2] > 1) st = bk_softmax(ctx, x, dims, 3, 1, &z);
        if (st || bk_context_synchronize(ctx)) {
          printf("fail %lld x %lld x %lld dt %d strategy %d st %d\n", axes[s][0], axes[s][1],
                 axes[s][2], dt, strategy, st);
          bad++;
        }
        bk_buffer_release(x); bk_buffer_release(y); bk_buffer_release(z);
      }
      for (unsigned g = 0; g < sizeof geos / sizeof geos[0]; g++) {
        int64_t in[4], out[4], map[4];
        long long n = 1;
        for (int j = 0; j < geos[g].out_rank; j++) {
          out[j] = geos[g].out[j];
          map[j] = geos[g].map[j];
          n *= out[j];
        }
        for (int j = 0; j < geos[g].in_rank; j++) in[j] = geos[g].in[j];
        bk_buffer *dy = input(ctx, t, n), *dx = NULL;
        if (!dy) return 3;
        bk_status st = bk_broadcast_to_adjoint(ctx, dy, in, geos[g].in_rank, out,
                                               geos[g].out_rank, map, &dx);
        if (st || bk_context_synchronize(ctx)) {
          printf("fail adjoint %u dt %d strategy %d st %d\n", g, dt, strategy, st);
          bad++;
        }
        bk_buffer_release(dy); bk_buffer_release(dx);
      }
    }
  }
  bk_context_destroy(ctx);
  printf("axis_sanitize: %d failures\n", bad);
  return bad != 0;
}
