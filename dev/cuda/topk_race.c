/* dev/cuda/topk_race.c: runs bk_rows_topk_mask on cuda:0 through each of its kernels (lane groups,
 * small rows, the radix select by a warp or a block, with and without staged keys) on normal,
 * tied and NaN rows in both dtypes, for compute-sanitizer (memcheck, racecheck).
 * Build: cc -std=c11 -Iinclude -Isrc/core dev/cuda/topk_race.c -Lbuild -lbufkern -o topk_race */
#include <bufkern.h>
#include <hooks.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  bk_context *ctx;
  bk_device d = {BK_DEVICE_CUDA, 0};
  if (bk_context_create(d, &ctx)) { printf("no ctx\n"); return 2; }
  static const long long shapes[][3] = {{9, 64, 4},   {40, 300, 3},  {40, 300, 39}, {17, 1024, 100},
                                        {3, 1025, 1}, {3, 5000, 7},  {2, 5000, 2500}, {2, 70001, 5},
                                        {2, 40000, 20000}, {300, 12, 11}, {1000, 2, 1}};
  int bad = 0;
  for (int path = 0; path <= 3; path++) {
    bk__cuda_topk_force(path);
    for (int dt = 0; dt < 2; dt++) {
      bk_dtype t = dt ? BK_F64 : BK_F32;
      for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int fill = 0; fill < 3; fill++) {
          long long r = shapes[s][0], c = shapes[s][1], k = shapes[s][2];
          /* NaN rows count their candidates literally: k * cols steps, kept small here. */
          if (fill == 2 && k > 100) continue;
          size_t es = dt ? 8 : 4;
          void *h = malloc((size_t)(r * c) * es);
          for (long long i = 0; i < r * c; i++) {
            double v = fill == 0 ? ((i * 7919) % 10007) / 5003.0 - 1.0 : (double)((i * 31) % 7 - 3);
            if (fill == 2 && (i * 13) % 17 == 0) v = NAN;
            if (dt) ((double *)h)[i] = v; else ((float *)h)[i] = (float)v;
          }
          bk_buffer *x = NULL, *y = NULL;
          if (bk_buffer_from_host(ctx, t, h, r * c, &x)) return 3;
          bk_status st = bk_rows_topk_mask(ctx, x, r, c, k, &y);
          if (st || bk_context_synchronize(ctx)) {
            printf("fail path %d %lld x %lld k %lld dt %d fill %d st %d\n", path, r, c, k, dt, fill, st);
            bad++;
          }
          bk_buffer_release(x);
          bk_buffer_release(y);
          free(h);
        }
      }
    }
  }
  bk__cuda_topk_force(0);
  bk_context_destroy(ctx);
  printf("topk_race: %d failures\n", bad);
  return bad != 0;
}
