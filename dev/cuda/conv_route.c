/*
 * conv_route.c — lab probe: bk_conv at the sampled geometries where it was
 * slower than ATen, each called twice (the first call builds the plan), so
 * that a profiler (`ncu --csv --metrics gpu__time_duration.sum
 * ./conv_route`) shows which kernels each call launches: the depthwise
 * kernel, cuDNN's, or the direct kernel.
 *   cc -O2 -Iinclude -o conv_route dev/cuda/conv_route.c -Lbuild-cuda -lbufkern
 */
#include <bufkern.h>
#include <stdio.h>

typedef struct {
  const char *name;
  int rank;
  int64_t n, cin, cout, groups, in[3], k[3], stride[3], before[3], after[3], dil[3];
} geom;

static const geom cases[] = {
    {"3d N55 2->28 k1,2,2 s2 d2,3,1", 3, 55, 2, 28, 1, {88, 59, 271}, {1, 2, 2}, {2, 2, 2},
     {0, 0, 0}, {0, 0, 0}, {2, 3, 1}},
    {"3d N50 4->4 g4 k2,1,3", 3, 50, 4, 4, 4, {97, 149, 31}, {2, 1, 3}, {1, 2, 1}, {0, 0, 0},
     {2, 0, 0}, {1, 1, 1}},
    {"2d N10 13->13 g13 k3,1", 2, 10, 13, 13, 13, {2016, 535}, {3, 1}, {1, 1}, {2, 0}, {2, 0},
     {1, 1}},
};

int main(void) {
  bk_context *ctx = NULL;
  bk_device dev = {BK_DEVICE_CUDA, 0};
  if (bk_context_create(dev, &ctx) != BK_OK) return 1;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const geom *g = &cases[c];
    int64_t dims[5] = {g->n, g->cin}, kd[5] = {g->cout, g->cin}, xl = g->n * g->cin,
            kl = g->cout * g->cin;
    for (int a = 0; a < g->rank; a++) {
      dims[2 + a] = g->in[a];
      kd[2 + a] = g->k[a];
      xl *= g->in[a];
      kl *= g->k[a];
    }
    bk_buffer *x = NULL, *w = NULL, *b = NULL, *y = NULL;
    if (bk_buffer_zeros(ctx, BK_F32, xl, &x) != BK_OK || bk_buffer_zeros(ctx, BK_F32, kl, &w) ||
        bk_buffer_zeros(ctx, BK_F32, g->cout, &b))
      return 1;
    for (int rep = 0; rep < 2; rep++) {
      bk_status st = bk_conv(ctx, x, w, b, dims, g->rank + 2, kd, g->rank, g->stride, g->before,
                             g->after, g->dil, g->groups, &y);
      if (bk_context_synchronize(ctx) != BK_OK || st != BK_OK) {
        printf("%s: %s\n", g->name, bk_last_error());
        return 1;
      }
      bk_buffer_release(y);
      y = NULL;
    }
    printf("%s: ran\n", g->name);
    bk_buffer_release(x);
    bk_buffer_release(w);
    bk_buffer_release(b);
  }
  bk_context_destroy(ctx);
  return 0;
}
