/*
 * conv.c — CPU grouped convolution over 1 to 3 spatial axes (cross-
 * correlation), with stride, dilation and asymmetric zero padding.
 *
 * Direct loops: one thread takes one (batch, output channel) pair and
 * writes all its output positions. Each output sums its group's input
 * channels and the kernel taps that land inside the input, in float64,
 * and is rounded once to the dtype. Only the diagonal blocks of the dense
 * kernel (the group's own input channels) are read.
 */
#include "cpu.h"

/* The geometry of one axis, with a spatial rank below 3 padded by leading
 * axes of extent 1 so one triple loop serves every rank. */
typedef struct conv_axis {
  int64_t in, k, out, stride, before, dil;
} conv_axis;

/* The taps [*lo, *hi) of an axis that read inside the input for output
 * coordinate o: 0 <= o*stride + kappa*dil - before < in. The front door
 * proves o*stride <= padded - 1, so base lies in [-before, in + after) and
 * in - 1 - base in [-after, in - 1 + before]; the first in-range tap is
 * ceil(-base / dil), formed as (-base - 1)/dil + 1 so that nothing is added
 * to -base (which may be as large as INT64_MAX). */
static void tap_range(const conv_axis *a, int64_t o, int64_t *lo, int64_t *hi) {
  const int64_t base = o * a->stride - a->before; /* input coordinate of tap 0 */
  int64_t l = base >= 0 ? 0 : (-base - 1) / a->dil + 1;
  int64_t h = a->in - 1 - base < 0 ? 0 : (a->in - 1 - base) / a->dil + 1;
  if (h > a->k) h = a->k;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

bk_status bk__cpu_conv(bk_context *ctx, bk_dtype dt, const void *x, const void *w,
                       const void *bias, void *y, const bk_conv_geom *g) {
  (void)ctx;
  conv_axis ax[3];
  const int lead = 3 - g->spatial_rank;
  for (int a = 0; a < 3; a++) {
    if (a < lead) {
      ax[a] = (conv_axis){1, 1, 1, 1, 0, 1};
    } else {
      const int s = a - lead;
      ax[a] = (conv_axis){g->in[s], g->k[s], g->out[s], g->stride[s], g->pad_before[s],
                          g->dilation[s]};
    }
  }
  const int64_t in_g = g->c_in / g->groups;   /* input channels per group */
  const int64_t out_g = g->c_out / g->groups; /* output channels per group */
  const int64_t pairs = g->n * g->c_out;

  /* Multiply-adds, estimated in double: it only decides the threading. */
#pragma omp parallel for schedule(static) \
    if ((double)pairs * (double)g->out_volume * (double)in_g * (double)g->k_volume >= \
        BK_CPU_PARALLEL_MIN)
  for (int64_t pair = 0; pair < pairs; pair++) {
    const int64_t nb = pair / g->c_out, oc = pair % g->c_out, grp = oc / out_g;
    /* x (n, c_in, in...): the group's first input channel of this batch. */
    const int64_t x_base = (nb * g->c_in + grp * in_g) * g->in_volume;
    /* w (c_out, c_in, k...): the diagonal block of this output channel. */
    const int64_t w_base = (oc * g->c_in + grp * in_g) * g->k_volume;
    /* y (n, c_out, out...). */
    const int64_t y_base = pair * g->out_volume;
    const double b = bias ? bk_ld(dt, bias, oc) : 0.0;
    for (int64_t o0 = 0; o0 < ax[0].out; o0++) {
      int64_t lo0, hi0;
      tap_range(&ax[0], o0, &lo0, &hi0);
      for (int64_t o1 = 0; o1 < ax[1].out; o1++) {
        int64_t lo1, hi1;
        tap_range(&ax[1], o1, &lo1, &hi1);
        for (int64_t o2 = 0; o2 < ax[2].out; o2++) {
          int64_t lo2, hi2;
          tap_range(&ax[2], o2, &lo2, &hi2);
          double acc = 0.0;
          for (int64_t j = 0; j < in_g; j++) {
            const int64_t xj = x_base + j * g->in_volume, wj = w_base + j * g->k_volume;
            for (int64_t k0 = lo0; k0 < hi0; k0++) {
              const int64_t i0 = o0 * ax[0].stride + k0 * ax[0].dil - ax[0].before;
              for (int64_t k1 = lo1; k1 < hi1; k1++) {
                const int64_t i1 = o1 * ax[1].stride + k1 * ax[1].dil - ax[1].before;
                const int64_t x_row = xj + (i0 * ax[1].in + i1) * ax[2].in;
                const int64_t w_row = wj + (k0 * ax[1].k + k1) * ax[2].k;
                for (int64_t k2 = lo2; k2 < hi2; k2++) {
                  const int64_t i2 = o2 * ax[2].stride + k2 * ax[2].dil - ax[2].before;
                  acc += bk_ld(dt, x, x_row + i2) * bk_ld(dt, w, w_row + k2);
                }
              }
            }
          }
          bk_st(dt, y, y_base + (o0 * ax[1].out + o1) * ax[2].out + o2, b + acc);
        }
      }
    }
  }
  return BK_OK;
}
