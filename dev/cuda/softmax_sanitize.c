/* dev/cuda/softmax_sanitize.c: runs the CUDA row softmax on cuda:0 under each of its strategies
 * (bk__cuda_rows_force: the planner's; element by element or 16-byte vectors, each on the
 * planner's path, a block per row and the split path) at the edges of its plans, in both
 * dtypes, plain and hard-masked, for compute-sanitizer. 37-39 rows a width, so that rows start
 * at every offset within a vector and the buffer's last vector is partial; one row holds +inf
 * and NaN. Each result is also checked for being repeatable (the same call twice, same bits).
 * Prints the number of calls and of failures; small enough for memcheck and racecheck to
 * finish in about a minute, where test_rows did not finish in 150 s.
 * Build: cc -std=c11 -Iinclude -Isrc dev/cuda/softmax_sanitize.c -Lbuild -lbufkern -o sm_san
 * Run:   compute-sanitizer --tool memcheck ./sm_san (and --tool racecheck). */
#include <bufkern.h>
#include <math.h>
#include <stdbool.h>
#include "core/hooks.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bk_buffer *input(bk_context *ctx, bk_dtype t, long long n, int mask) {
  size_t es = t == BK_F64 ? 8 : 4;
  void *h = malloc((size_t)n * es);
  for (long long i = 0; i < n; i++) {
    double v = mask ? (double)((i * 7919) % 3 != 0) : ((i * 7919) % 23) / 11.0 - 1.0;
    if (!mask && i == n / 2) v = INFINITY;
    if (!mask && i == n / 3) v = NAN;
    if (t == BK_F64) ((double *)h)[i] = v; else ((float *)h)[i] = (float)v;
  }
  bk_buffer *b = NULL;
  if (bk_buffer_from_host(ctx, t, h, n, &b)) b = NULL;
  free(h);
  return b;
}

static int same(bk_context *ctx, bk_buffer *a, bk_buffer *b) {
  long long n = bk_buffer_length(a);
  size_t es = bk_buffer_dtype(a) == BK_F64 ? 8 : 4;
  char *x = malloc((size_t)n * es), *y = malloc((size_t)n * es);
  int ok = bk_buffer_to_host(ctx, a, x, n) == BK_OK && bk_buffer_to_host(ctx, b, y, n) == BK_OK &&
           memcmp(x, y, (size_t)n * es) == 0;
  free(x);
  free(y);
  return ok;
}

int main(void) {
  bk_context *ctx;
  bk_device d = {BK_DEVICE_CUDA, 0};
  if (bk_context_create(d, &ctx)) { printf("no ctx\n"); return 2; }
  static const long long widths[] = {1,   2,   3,   5,   8,   9,   17,  31,   33,   63,  64,
                                     65,  127, 129, 255, 257, 509, 512, 1021, 1031, 4097, 16389};
  int calls = 0, bad = 0;
  for (int strategy = 0; strategy <= 6; strategy++) {
    if (!bk__cuda_rows_force(ctx, strategy)) { printf("strategy %d refused\n", strategy); return 2; }
    for (int dt = 0; dt < 2; dt++) {
      bk_dtype t = dt ? BK_F64 : BK_F32;
      for (unsigned w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        /* 37-39 rows: with one column, the buffer's last vector holds the
         * ends of several rows. */
        const long long rows = widths[w] > 4096 ? 5 : 37 + (long long)((w + strategy) % 3);
        const long long cols = widths[w], n = rows * cols;
        const int64_t dims[2] = {rows, cols};
        bk_buffer *x = input(ctx, t, n, 0), *m = input(ctx, t, n, 1);
        if (!x || !m) return 3;
        for (int masked = 0; masked < 2; masked++) {
          bk_buffer *y = NULL, *z = NULL;
          bk_status st = masked ? bk_rows_masked_softmax(ctx, x, m, rows, cols, &y)
                                : bk_softmax(ctx, x, dims, 2, 1, &y);
          if (!st)
            st = masked ? bk_rows_masked_softmax(ctx, x, m, rows, cols, &z)
                        : bk_softmax(ctx, x, dims, 2, 1, &z);
          calls += 2;
          if (st || bk_context_synchronize(ctx) || !same(ctx, y, z)) {
            printf("fail %lld x %lld dt %d masked %d strategy %d st %d\n", rows, cols, dt, masked,
                   strategy, st);
            bad++;
          }
          bk_buffer_release(y);
          bk_buffer_release(z);
        }
        bk_buffer_release(x);
        bk_buffer_release(m);
      }
    }
  }
  (void)bk__cuda_rows_force(ctx, 0);
  bk_context_destroy(ctx);
  printf("softmax_sanitize: %d calls, %d failures\n", calls, bad);
  return bad != 0;
}
