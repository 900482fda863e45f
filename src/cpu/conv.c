/*
 * conv.c — CPU grouped convolution over 1 to 3 spatial axes (cross-
 * correlation), with stride, dilation and asymmetric zero padding.
 *
 * Direct loops: one thread takes one (batch, output channel) pair and
 * writes all its output positions. Each output sums its group's input
 * channels and the kernel taps that land inside the input, in float64,
 * and is rounded once to the dtype. Only the diagonal blocks of the dense
 * kernel (the group's own input channels) are read.
 *
 * With OpenBLAS, convolutions with enough work per group instead lower each
 * (batch, group) to one float64 matrix product (cblas_dgemm): the group's
 * kernel block (out_g, in_g * taps) times the columns of the input it reads
 * (in_g * taps, output positions, zeros where a tap lands in the padding),
 * built a tile of positions at a time. Every output is still its float64
 * sum plus the bias, rounded once; the order of the sum is OpenBLAS's.
 */
#include "cpu.h"

#ifdef BK_HAVE_OPENBLAS
#include <cblas.h>
#include <limits.h>
#endif

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

/* The three axes of g, a spatial rank below 3 padded by leading axes of
 * extent 1. */
static void conv_axes(const bk_conv_geom *g, conv_axis *ax) {
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
}

#ifdef BK_HAVE_OPENBLAS
/* Doubles of input columns one (batch, group) tile holds at most. */
#define CONV_COLS_DOUBLES ((int64_t)1 << 20)

/* Whether the product form pays and fits BLAS's int arguments: at least
 * 2^20 multiply-adds, a group of 4 or more output channels and 16 or more
 * (input channel, tap) pairs, a tile of at least 16 positions, and axes
 * whose coordinates (below 2^30 each) cannot overflow the column builder's
 * arithmetic. */
static int conv_uses_blas(const bk_conv_geom *g) {
  const int64_t in_g = g->c_in / g->groups, out_g = g->c_out / g->groups;
  const int64_t lim = (int64_t)1 << 30;
  for (int a = 0; a < g->spatial_rank; a++)
    if (g->in[a] >= lim || g->k[a] >= lim || g->out[a] >= lim || g->stride[a] >= lim ||
        g->dilation[a] >= lim || g->pad_before[a] >= lim)
      return 0;
  const double work = (double)g->n * (double)g->c_out * (double)g->out_volume * (double)in_g *
                      (double)g->k_volume;
  const double kk = (double)in_g * (double)g->k_volume;
  return work >= (double)(1 << 20) && out_g >= 4 && kk >= 16 &&
         kk * 16 <= (double)CONV_COLS_DOUBLES && (double)out_g * 16 <= (double)CONV_COLS_DOUBLES &&
         (double)g->c_in * (double)g->k_volume <= INT_MAX &&
         (double)g->out_volume <= INT_MAX && (double)g->c_out <= INT_MAX;
}

/* The output coordinates [*lo, *hi) along an axis at which tap k reads
 * inside the input: 0 <= o*stride + k*dil - before < in, o < out. */
static void out_range(const conv_axis *a, int64_t k, int64_t *lo, int64_t *hi) {
  const int64_t base = k * a->dil - a->before;
  int64_t l = base >= 0 ? 0 : (-base + a->stride - 1) / a->stride;
  int64_t h = a->in - 1 - base < 0 ? 0 : (a->in - 1 - base) / a->stride + 1;
  if (h > a->out) h = a->out;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

/* cols[r * n + q] for r = (j, tap) in the group's in_g * k_volume rows and
 * output positions p0..p0+n: the input value the tap reads for that
 * position, 0 in the padding. Each line of the last output axis is a run of
 * zeros, a strided run of the input and zeros again. Serial: the product
 * that follows runs on OpenBLAS's threads, which an OpenMP team waiting
 * here would slow down. */
static void conv_columns(bk_dtype dt, const void *x, const conv_axis *ax, int64_t x_base,
                         int64_t in_volume, int64_t kvol, int64_t rows, int64_t p0, int64_t n,
                         double *cols) {
  const int64_t out2 = ax[2].out, out1 = ax[1].out;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t j = r / kvol, tap = r % kvol;
    const int64_t k0 = tap / (ax[1].k * ax[2].k), k1 = (tap / ax[2].k) % ax[1].k, k2 = tap % ax[2].k;
    int64_t a2, b2;
    out_range(&ax[2], k2, &a2, &b2);
    const int64_t base2 = k2 * ax[2].dil - ax[2].before, s2 = ax[2].stride;
    const int64_t xj = x_base + j * in_volume;
    double *row = cols + r * n;
    for (int64_t line = p0 / out2; line * out2 < p0 + n; line++) {
      const int64_t o0 = line / out1, o1 = line % out1;
      const int64_t i0 = o0 * ax[0].stride + k0 * ax[0].dil - ax[0].before;
      const int64_t i1 = o1 * ax[1].stride + k1 * ax[1].dil - ax[1].before;
      const int inside = i0 >= 0 && i0 < ax[0].in && i1 >= 0 && i1 < ax[1].in;
      /* This line's positions within the tile, as coordinates o2. */
      const int64_t first = line * out2 < p0 ? p0 - line * out2 : 0;
      const int64_t last = (line + 1) * out2 > p0 + n ? p0 + n - line * out2 : out2;
      double *dst = row + line * out2 + first - p0;
      const int64_t lo = inside ? (a2 > first ? (a2 < last ? a2 : last) : first) : last;
      const int64_t hi = inside ? (b2 < last ? (b2 > lo ? b2 : lo) : last) : last;
      for (int64_t o2 = first; o2 < lo; o2++) *dst++ = 0.0;
      const int64_t src = xj + (i0 * ax[1].in + i1) * ax[2].in + base2;
      if (dt == BK_F32) {
        const float *xs = (const float *)x + (inside ? src : 0);
        for (int64_t o2 = lo; o2 < hi; o2++) *dst++ = (double)xs[o2 * s2];
      } else {
        const double *xs = (const double *)x + (inside ? src : 0);
        for (int64_t o2 = lo; o2 < hi; o2++) *dst++ = xs[o2 * s2];
      }
      for (int64_t o2 = hi; o2 < last; o2++) *dst++ = 0.0;
    }
  }
}

static bk_status conv_blas(bk_dtype dt, const void *x, const void *w, const void *bias, void *y,
                           const bk_conv_geom *g) {
  static const char fn[] = "bk_conv";
  conv_axis ax[3];
  conv_axes(g, ax);
  const int64_t in_g = g->c_in / g->groups, out_g = g->c_out / g->groups;
  const int64_t kvol = g->k_volume, rows = in_g * kvol, P = g->out_volume;
  int64_t pc = CONV_COLS_DOUBLES / (rows > out_g ? rows : out_g);
  if (pc > P) pc = P;
  /* The kernel in float64 (float32 data is converted once), the columns of
   * one tile and, for float32 outputs, the tile's float64 result. */
  const int64_t wlen = g->c_out * g->c_in * kvol;
  double *wd = dt == BK_F64 ? (double *)w : bk__host_alloc(fn, "scratch", (size_t)wlen, sizeof(double));
  double *cols = bk__host_alloc(fn, "scratch", (size_t)(rows * pc), sizeof(double));
  double *acc = bk__host_alloc(fn, "scratch", (size_t)(out_g * pc), sizeof(double));
  if (!wd || !cols || !acc) {
    if (dt != BK_F64) bk__host_free(wd);
    bk__host_free(cols);
    bk__host_free(acc);
    return BK_ERR_OUT_OF_MEMORY;
  }
  if (dt != BK_F64) {
#pragma omp parallel for schedule(static) if (wlen >= BK_CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < wlen; i++) wd[i] = (double)((const float *)w)[i];
  }
  for (int64_t nb = 0; nb < g->n; nb++) {
    for (int64_t grp = 0; grp < g->groups; grp++) {
      const int64_t x_base = (nb * g->c_in + grp * in_g) * g->in_volume;
      /* The group's kernel block: row oc holds (j, tap) contiguously. */
      const double *wg = wd + (grp * out_g * g->c_in + grp * in_g) * kvol;
      for (int64_t p0 = 0; p0 < P; p0 += pc) {
        const int64_t n = P - p0 < pc ? P - p0 : pc;
        conv_columns(dt, x, ax, x_base, g->in_volume, kvol, rows, p0, n, cols);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)out_g, (blasint)n,
                    (blasint)rows, 1.0, wg, (blasint)(g->c_in * kvol), cols, (blasint)n, 0.0, acc,
                    (blasint)n);
        const int64_t y0 = (nb * g->c_out + grp * out_g) * P + p0;
        for (int64_t m = 0; m < out_g; m++) {
          const double b = bias ? bk_ld(dt, bias, grp * out_g + m) : 0.0;
          for (int64_t q = 0; q < n; q++) bk_st(dt, y, y0 + m * P + q, b + acc[m * n + q]);
        }
      }
    }
  }
  if (dt != BK_F64) bk__host_free(wd);
  bk__host_free(cols);
  bk__host_free(acc);
  return BK_OK;
}
#endif

bk_status bk__cpu_conv(bk_context *ctx, bk_dtype dt, const void *x, const void *w,
                       const void *bias, void *y, const bk_conv_geom *g) {
  (void)ctx;
#ifdef BK_HAVE_OPENBLAS
  if (conv_uses_blas(g)) return conv_blas(dt, x, w, bias, y, g);
#endif
  conv_axis ax[3];
  conv_axes(g, ax);
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
