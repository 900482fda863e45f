/* dev/cuda/layernorm_vjp_race.c: runs bk_layernorm_backward on cuda:0 at the edges of each of its
 * strategies (lane groups, a block per row, slices) in both dtypes, for compute-sanitizer.
 * Build: cc -std=c11 -Iinclude dev/cuda/layernorm_vjp_race.c -Lbuild -lbufkern -o vjp_race */
#include <bufkern.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  bk_context *ctx;
  bk_device d = {BK_DEVICE_CUDA, 0};
  if (bk_context_create(d, &ctx)) { printf("no ctx\n"); return 2; }
  static const long long shapes[][2] = {{1, 1}, {7, 3}, {33, 31}, {65, 64}, {40, 128}, {17, 129},
                                        {5, 1000}, {3, 4095}, {2, 4097}, {3, 8192}, {2, 8193},
                                        {1, 20011}, {300, 12}, {1000, 5}, {2, 70000}};
  int bad = 0;
  for (int dt = 0; dt < 2; dt++) {
    bk_dtype t = dt ? BK_F64 : BK_F32;
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      long long r = shapes[s][0], c = shapes[s][1];
      size_t es = dt ? 8 : 4;
      void *h = malloc((size_t)(r * c) * es), *g = malloc((size_t)c * es), *is = malloc((size_t)r * es);
      for (long long i = 0; i < r * c; i++) { double v = ((i * 7919) % 23) / 11.0 - 1.0;
        if (dt) ((double *)h)[i] = v; else ((float *)h)[i] = (float)v; }
      for (long long i = 0; i < c; i++) { if (dt) ((double *)g)[i] = 1.0 + i % 5; else ((float *)g)[i] = 1.0f + i % 5; }
      for (long long i = 0; i < r; i++) { if (dt) ((double *)is)[i] = 0.5; else ((float *)is)[i] = 0.5f; }
      bk_buffer *dy, *nz, *inv, *gm, *dx = NULL, *dg = NULL, *db = NULL;
      if (bk_buffer_from_host(ctx, t, h, r * c, &dy) || bk_buffer_from_host(ctx, t, h, r * c, &nz) ||
          bk_buffer_from_host(ctx, t, is, r, &inv) || bk_buffer_from_host(ctx, t, g, c, &gm)) return 3;
      bk_status st = bk_layernorm_backward(ctx, dy, nz, inv, gm, r, c, &dx, &dg, &db);
      if (st || bk_context_synchronize(ctx)) { printf("fail %lld x %lld dt %d st %d\n", r, c, dt, st); bad++; }
      bk_buffer_release(dy); bk_buffer_release(nz); bk_buffer_release(inv); bk_buffer_release(gm);
      bk_buffer_release(dx); bk_buffer_release(dg); bk_buffer_release(db);
      free(h); free(g); free(is);
    }
  }
  bk_context_destroy(ctx);
  printf("vjp_race: %d failures\n", bad);
  return bad != 0;
}
