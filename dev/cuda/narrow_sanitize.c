/* dev/cuda/narrow_sanitize.c: runs the CUDA narrow-row lane groups on cuda:0 at the edges of
 * their plans, in both dtypes, for compute-sanitizer: bk_rows_sum, bk_rows_max and
 * bk_rows_first_max_mask (rows_narrow_kernel: 1..32 lanes, one to eight rows in flight per
 * lane, 16-byte vectors and single elements), bk_xent_weighted_mean and bk_xent_teacher, loss
 * and gradient (xent_*_narrow_kernel, one to eight vectors per lane), with rows that are a
 * multiple of a warp's rows in flight and rows that are not, and one row holding +inf and NaN
 * (the literal path of the losses); bk_softmax and bk_rows_masked_softmax at the same widths
 * (the lane groups) and at 270 rows of 16411 columns (split by length). Each result is also
 * checked for being repeatable: the same call twice gives the same bits. Prints the number of calls and of failures.
 * Build: cc -std=c11 -Iinclude dev/cuda/narrow_sanitize.c -Lbuild -lbufkern -o narrow_san
 * Run:   compute-sanitizer --tool memcheck ./narrow_san (and racecheck; ./narrow_san cpu runs
 *        the same calls on the CPU backend). */
#include <bufkern.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bk_buffer *input(bk_context *ctx, bk_dtype t, long long n, int special) {
  size_t es = t == BK_F64 ? 8 : 4;
  void *h = malloc((size_t)n * es);
  for (long long i = 0; i < n; i++) {
    double v = ((i * 7919) % 23) / 11.0 - 1.0;
    if (special && i == n / 2) v = INFINITY;
    if (special && i == n / 3) v = NAN;
    if (t == BK_F64) ((double *)h)[i] = v; else ((float *)h)[i] = (float)v;
  }
  bk_buffer *b = NULL;
  if (bk_buffer_from_host(ctx, t, h, n, &b)) b = NULL;
  free(h);
  return b;
}

static int same(bk_context *ctx, bk_buffer *a, bk_buffer *b) {
  long long n = bk_buffer_length(a);
  if (n != bk_buffer_length(b)) return 0;
  size_t es = bk_buffer_dtype(a) == BK_F64 ? 8 : 4;
  char *x = malloc((size_t)(n ? n : 1) * es), *y = malloc((size_t)(n ? n : 1) * es);
  int ok = bk_buffer_to_host(ctx, a, x, n) == BK_OK && bk_buffer_to_host(ctx, b, y, n) == BK_OK &&
           memcmp(x, y, (size_t)n * es) == 0;
  free(x);
  free(y);
  return ok;
}

int main(int argc, char **argv) {
  bk_context *ctx;
  bk_device d = {BK_DEVICE_CUDA, 0};
  if (argc > 1 && strcmp(argv[1], "cpu") == 0) d.kind = BK_DEVICE_CPU; /* the driver itself */
  if (bk_context_create(d, &ctx)) { printf("no ctx\n"); return 2; }
  static const long long widths[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 31, 32, 33, 63, 64,
                                     65, 100, 127, 128, 129, 255, 256, 257, 511, 512, 513,
                                     1020, 1024, 1028, 3001, 16411};
  static const long long heights[] = {1, 7, 33, 257, 1000};
  const bk_dtype dts[] = {BK_F32, BK_F64};
  int calls = 0, bad = 0;
  for (int t = 0; t < 2; t++)
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
      for (size_t h = 0; h < sizeof heights / sizeof heights[0]; h++) {
        /* The last width runs at one height only: rows longer than a block's registers,
         * many of them (the softmax's split path by length). */
        const long long cols = widths[w], rows = cols > 10000 ? 270 : heights[h];
        if (cols > 10000 && h > 0) continue;
        const int64_t dims[2] = {rows, cols};
        for (int special = 0; special < 2; special++) {
          bk_buffer *x = input(ctx, dts[t], rows * cols, special);
          bk_buffer *z = input(ctx, dts[t], rows * cols, 0);
          if (!x || !z) { bad++; continue; }
          for (int op = 0; op < 8; op++) {
            bk_buffer *o1 = NULL, *o2 = NULL;
            bk_status s1, s2;
            switch (op) {
              case 0: s1 = bk_rows_sum(ctx, x, rows, cols, &o1); s2 = bk_rows_sum(ctx, x, rows, cols, &o2); break;
              case 1: s1 = bk_rows_max(ctx, x, rows, cols, &o1); s2 = bk_rows_max(ctx, x, rows, cols, &o2); break;
              case 2: s1 = bk_rows_first_max_mask(ctx, x, rows, cols, &o1); s2 = bk_rows_first_max_mask(ctx, x, rows, cols, &o2); break;
              case 3: s1 = bk_xent_weighted_mean(ctx, x, z, rows, cols, &o1); s2 = bk_xent_weighted_mean(ctx, x, z, rows, cols, &o2); break;
              case 4: s1 = bk_xent_teacher(ctx, x, z, rows, cols, 0, &o1); s2 = bk_xent_teacher(ctx, x, z, rows, cols, 0, &o2); break;
              case 5: s1 = bk_xent_teacher(ctx, x, z, rows, cols, 1, &o1); s2 = bk_xent_teacher(ctx, x, z, rows, cols, 1, &o2); break;
              case 6: s1 = bk_softmax(ctx, x, dims, 2, 1, &o1); s2 = bk_softmax(ctx, x, dims, 2, 1, &o2); break;
              default: s1 = bk_rows_masked_softmax(ctx, x, z, rows, cols, &o1); s2 = bk_rows_masked_softmax(ctx, x, z, rows, cols, &o2); break;
            }
            calls += 2;
            if (s1 != BK_OK || s2 != BK_OK || !same(ctx, o1, o2)) {
              bad++;
              printf("fail: op %d %s %lldx%lld special %d: %s\n", op, t ? "f64" : "f32", rows,
                     cols, special, bk_last_error());
            }
            bk_buffer_release(o1);
            bk_buffer_release(o2);
          }
          bk_buffer_release(x);
          bk_buffer_release(z);
        }
      }
  if (bk_context_synchronize(ctx) != BK_OK) bad++;
  bk_context_destroy(ctx);
  printf("narrow_sanitize: %d calls, %d failures\n", calls, bad);
  return bad != 0;
}
