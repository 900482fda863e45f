/* dev/cuda/axis_lab.c: times the CUDA axis engine's strategies side by side in one process
 * (bk__cuda_axis_force: 0 the planner, 1 columns in registers, 2 one tile per fibre, 3 chunks
 * with their statistics folded by a second kernel, 4 a softmax's chunks in a cluster), one line
 * per case. A strategy the geometry does not allow falls back to another, as in the tests.
 * Cases come one per line on standard input, "sum|softmax f32|f64 OUTER N INNER" (the lines of
 * `bufkern bench --sweep --list-only` are read too). Host timing: 3 warm-up calls, then
 * back-to-back calls for about 4 ms between two synchronizations, best of 3; ms per call, and
 * the planner's share of the one-GiB copy rate measured in the same process.
 * With --once each strategy runs once per case (for a profiler).
 * Build: cc -std=c11 -O2 -Iinclude -Isrc dev/cuda/axis_lab.c -Lbuild -lbufkern -o axis_lab */
#define _POSIX_C_SOURCE 199309L
#include <bufkern.h>
#include <stdbool.h>
#include "core/hooks.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int call(bk_context *ctx, int softmax, bk_buffer *x, const int64_t *dims) {
  bk_buffer *y = NULL;
  bk_status st = softmax ? bk_softmax(ctx, x, dims, 3, 1, &y) : bk_sum_axis(ctx, x, dims, 3, 1, &y);
  bk_buffer_release(y);
  return st != BK_OK;
}

static double time_op(bk_context *ctx, int softmax, bk_buffer *x, const int64_t *dims, int once) {
  if (once) return call(ctx, softmax, x, dims) || bk_context_synchronize(ctx) ? -1 : 0;
  double best = 1e30;
  int calls = 3;
  for (int rep = 0; rep < 4; rep++) {
    if (bk_context_synchronize(ctx)) return -1;
    const double t0 = now_ms();
    for (int i = 0; i < calls; i++)
      if (call(ctx, softmax, x, dims)) return -1;
    if (bk_context_synchronize(ctx)) return -1;
    const double ms = (now_ms() - t0) / calls;
    if (rep == 0) {
      calls = (int)(4.0 / (ms > 1e-3 ? ms : 1e-3));
      if (calls < 5) calls = 5;
      if (calls > 2000) calls = 2000;
    } else if (ms < best) {
      best = ms;
    }
  }
  return best;
}

/* GB/s of a device-to-device copy of 1 GiB, best of 5. */
static double copy_rate(bk_context *ctx) {
  const int64_t n = (int64_t)1 << 28;
  bk_buffer *a = NULL;
  if (bk_buffer_zeros(ctx, BK_F32, n, &a)) return 0;
  double best = 1e30;
  for (int r = 0; r < 6; r++) {
    bk_buffer *b = NULL;
    if (bk_context_synchronize(ctx)) break;
    const double t0 = now_ms();
    const int bad = bk_buffer_copy(ctx, a, &b) || bk_context_synchronize(ctx);
    const double ms = now_ms() - t0;
    bk_buffer_release(b);
    if (bad) break;
    if (r > 0 && ms < best) best = ms;
  }
  bk_buffer_release(a);
  if (best >= 1e30) return 0;
  return 2.0 * 4.0 * (double)n / (best * 1e6);
}

int main(int argc, char **argv) {
  const int once = argc > 1 && strcmp(argv[1], "--once") == 0;
  bk_context *ctx;
  bk_device d = {BK_DEVICE_CUDA, 0};
  if (bk_context_create(d, &ctx)) { printf("no ctx\n"); return 2; }
  const double gbs = once ? 0 : copy_rate(ctx);
  if (!once) printf("# copy %.0f GB/s\n# case                              planner      reg     tile   chunks  cluster  planner%%\n", gbs);
  char line[512];
  while (fgets(line, sizeof line, stdin)) {
    char op[32] = "", dt[8] = "";
    long long o = 0, n = 0, i = 0;
    if (sscanf(line, "%31s %7s %lld %lld %lld", op, dt, &o, &n, &i) != 5 &&
        sscanf(line, "%31s %7s %*s %*s outer=%lld n=%lld inner=%lld", op, dt, &o, &n, &i) != 5)
      continue;
    const int softmax = strncmp(op, "softmax", 7) == 0;
    const int f64 = strcmp(dt, "f64") == 0;
    const int64_t dims[3] = {o, n, i};
    const bk_dtype t = f64 ? BK_F64 : BK_F32;
    bk_buffer *x = NULL;
    if (bk_buffer_zeros(ctx, t, o * n * i, &x)) { printf("alloc %lld\n", o * n * i); continue; }
    double ms[5];
    for (int k = 0; k < 5; k++) {
      ms[k] = -1;
      if (k == 4 && !softmax) continue;
      if (!bk__cuda_axis_force(ctx, k)) { bk_buffer_release(x); bk_context_destroy(ctx); return 4; }
      ms[k] = time_op(ctx, softmax, x, dims, once);
    }
    (void)bk__cuda_axis_force(ctx, 0);
    const double es = f64 ? 8.0 : 4.0;
    const double bytes = softmax ? 2.0 * es * (double)(o * n * i) : es * (double)(o * n * i + o * i);
    printf("%-7s %s %8lldx%6lldx%6lld", softmax ? "softmax" : "sum", f64 ? "f64" : "f32", o, n, i);
    for (int k = 0; k < 5; k++) printf(" %8.4f", ms[k]);
    printf(" %8.1f\n", once || ms[0] <= 0 || gbs <= 0 ? 0.0 : 100.0 * bytes / (ms[0] * 1e6) / gbs);
    fflush(stdout);
    bk_buffer_release(x);
  }
  bk_context_destroy(ctx);
  return 0;
}
