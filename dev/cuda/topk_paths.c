/* dev/cuda/topk_paths.c: times bk_rows_topk_mask on cuda:0 through each of its kernels that can
 * take a shape (bk__cuda_topk_force: lane groups, small rows, radix select), float32, inputs of
 * about 256 MB of normal values, so that the planner's choice between them can be read off.
 * Host clock over 10 calls and one synchronization, after one warm-up call; the rate counts the
 * input read once and the mask written once. Prints one line per shape and kernel.
 * Build: cc -std=c11 -O2 -Iinclude -Isrc/core dev/cuda/topk_paths.c -Lbuild -lbufkern -lm -o topk_paths */
#define _POSIX_C_SOURCE 199309L
#include <bufkern.h>
#include <hooks.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
int main(void) {
  bk_context *ctx;
  bk_device d = {BK_DEVICE_CUDA, 0};
  if (bk_context_create(d, &ctx)) { printf("no ctx\n"); return 2; }
  static const long long shapes[][2] = {{2, 1},    {3, 1},      {13, 3},    {47, 30},   {59, 6},
                                        {64, 4},   {64, 39},    {297, 3},   {297, 39},  {1024, 6},
                                        {1024, 64}, {2308, 2},  {3181, 52}, {17289, 1}, {85831, 4},
                                        {262144, 5}};
  const long long n = 64LL << 20; /* float32 entries: 256 MB */
  float *h = malloc((size_t)n * sizeof *h);
  unsigned long long s = 12345;
  for (long long i = 0; i < n; i++) { /* uniform in (-1, 1), from a 64-bit LCG */
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    h[i] = (float)((double)(s >> 11) / 4503599627370496.0 - 1.0);
  }
  static const char *names[] = {"auto", "group", "small", "select"};
  for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const long long c = shapes[i][0], k = shapes[i][1], r = n / c;
    bk_buffer *x = NULL;
    if (bk_buffer_from_host(ctx, BK_F32, h, r * c, &x)) return 3;
    for (int p = 0; p <= 3; p++) {
      bk__cuda_topk_force(p);
      bk_buffer *y = NULL;
      if (bk_rows_topk_mask(ctx, x, r, c, k, &y) || bk_context_synchronize(ctx)) return 4;
      bk_buffer_release(y);
      const double t0 = now();
      for (int rep = 0; rep < 10; rep++) {
        if (bk_rows_topk_mask(ctx, x, r, c, k, &y)) return 5;
        bk_buffer_release(y);
      }
      if (bk_context_synchronize(ctx)) return 6;
      const double ms = (now() - t0) * 100.0;
      printf("topk_paths %8lld x %6lld k %3lld  %-6s %9.3f ms %7.1f GB/s\n", r, c, k, names[p], ms,
             2.0 * (double)(r * c) * 4.0 / (ms * 1e6));
    }
    bk__cuda_topk_force(0);
    bk_buffer_release(x);
  }
  free(h);
  bk_context_destroy(ctx);
  return 0;
}
