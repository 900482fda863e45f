/* dev/cuda/axis_lab.c: times the CUDA axis engine's plans side by side in one process
 * (bk__cuda_axis_force: 0 the planner, 5 the planner with tiles sized for two blocks per
 * multiprocessor instead of four), at the reference shapes of the middle-axis softmax and the
 * axis sums and at sampled shapes of seed 30561. Host timing: 3 warm-up calls, then 20
 * back-to-back calls between two synchronizations, best of 3; ms per call.
 * Build: cc -std=c11 -O2 -Iinclude -Isrc dev/cuda/axis_lab.c -Lbuild -lbufkern -o axis_lab */
#define _POSIX_C_SOURCE 199309L
#include <bufkern.h>
#include <stdbool.h>
#include "core/hooks.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static double time_op(bk_context *ctx, int softmax, bk_buffer *x, const int64_t *dims) {
  double best = 1e30;
  for (int rep = 0; rep < 4; rep++) {
    const int calls = rep == 0 ? 3 : 20;
    if (bk_context_synchronize(ctx)) return -1;
    const double t0 = now_ms();
    for (int i = 0; i < calls; i++) {
      bk_buffer *y = NULL;
      bk_status st = softmax ? bk_softmax(ctx, x, dims, 3, 1, &y) : bk_sum_axis(ctx, x, dims, 3, 1, &y);
      if (st) return -1;
      bk_buffer_release(y);
    }
    if (bk_context_synchronize(ctx)) return -1;
    const double ms = (now_ms() - t0) / calls;
    if (rep > 0 && ms < best) best = ms;
  }
  return best;
}

int main(void) {
  bk_context *ctx;
  bk_device d = {BK_DEVICE_CUDA, 0};
  if (bk_context_create(d, &ctx)) { printf("no ctx\n"); return 2; }
  static const struct { int softmax, f64; long long o, n, i; } cases[] = {
      {1, 0, 256, 1024, 256}, {1, 1, 256, 1024, 256}, {1, 0, 976, 256, 256},
      {1, 0, 61, 4096, 256},  {1, 0, 1047, 20, 8664}, {1, 0, 51, 2037, 1571},
      {1, 0, 91, 497, 5334},  {1, 0, 195, 55, 10832}, {0, 0, 256, 1024, 256},
      {0, 1, 256, 1024, 256}, {0, 0, 1, 8192, 8192},  {0, 1, 1, 8192, 8192},
      {0, 0, 21, 65536, 78},  {0, 0, 2, 45434, 1509}, {0, 0, 54405, 26, 86},
  };
  printf("case                                  planner ms   half ms\n");
  for (unsigned c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const int64_t dims[3] = {cases[c].o, cases[c].n, cases[c].i};
    const long long n = cases[c].o * cases[c].n * cases[c].i;
    bk_dtype t = cases[c].f64 ? BK_F64 : BK_F32;
    bk_buffer *x = NULL;
    if (bk_buffer_zeros(ctx, t, n, &x)) return 3;
    double ms[2];
    for (int k = 0; k < 2; k++) {
      if (!bk__cuda_axis_force(ctx, k ? 5 : 0)) return 4;
      ms[k] = time_op(ctx, cases[c].softmax, x, dims);
    }
    printf("%-7s %s %6lldx%6lldx%6lld       %8.4f  %8.4f\n", cases[c].softmax ? "softmax" : "sum",
           cases[c].f64 ? "f64" : "f32", cases[c].o, cases[c].n, cases[c].i, ms[0], ms[1]);
    bk_buffer_release(x);
  }
  (void)bk__cuda_axis_force(ctx, 0);
  bk_context_destroy(ctx);
  return 0;
}
