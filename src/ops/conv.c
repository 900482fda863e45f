/*
 * conv.c — front door of the grouped convolution over a spatial suffix:
 * bk_conv.
 *
 * It checks the arguments in one order (out-parameter, NULL inputs, ranks,
 * NULL geometry arrays, dims, groups and channels, per-axis kernel, stride,
 * dilation and padding, overflow-checked extents, lengths, then dtype and
 * device through bk__bind), folds the batch axes into N, computes the
 * output extents, handles the empty and input-free cases and calls the
 * backend once with the canonical geometry.
 */
#include "../core/internal.h"

#include <inttypes.h>
#include <stdio.h>

/*
 * Per-axis checks of the kernel extent, stride, dilation and padding, and
 * the output extent: out = padded < eff ? 0 : (padded - eff)/stride + 1
 * with eff = (k-1)*dil + 1 and padded = in + before + after.
 *
 * Once eff and padded are known to fit in int64, every coordinate a
 * backend forms fits too, so the backends need no checks of their own: for
 * every output o < out and tap t < k, (out-1)*stride <= padded - eff, hence
 * 0 <= o*stride <= o*stride + t*dil <= padded - 1, and the input coordinate
 * o*stride + t*dil - before lies in [-before, in + after - 1]. An axis
 * with out == 0 empties the result, and no backend is called.
 */
static bk_status conv_axis(const char *fn, int a, int64_t in, int64_t k, int64_t stride,
                           int64_t before, int64_t after, int64_t dil, int64_t *out) {
  if (k <= 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "kernel_dims[%d] = %" PRId64 " must be positive",
                    a + 2, k);
  if (stride <= 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "stride[%d] = %" PRId64 " must be positive", a,
                    stride);
  if (dil <= 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "dilation[%d] = %" PRId64 " must be positive", a,
                    dil);
  if (before < 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "pad_before[%d] = %" PRId64 " is negative", a,
                    before);
  if (after < 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "pad_after[%d] = %" PRId64 " is negative", a,
                    after);
  char span_name[128], padded_name[128];
  snprintf(span_name, sizeof span_name, "(kernel_dims[%d]-1)*dilation[%d] + 1", a + 2, a);
  snprintf(padded_name, sizeof padded_name, "spatial extent %d + pad_before[%d] + pad_after[%d]",
           a, a, a);
  int64_t span = 0, eff = 0, padded = 0;
  bk_status st = bk__mul(fn, span_name, k - 1, dil, &span);
  if (st == BK_OK) st = bk__add(fn, span_name, span, 1, &eff);
  if (st == BK_OK) st = bk__add(fn, padded_name, in, before, &padded);
  if (st == BK_OK) st = bk__add(fn, padded_name, padded, after, &padded);
  if (st != BK_OK) return st;
  *out = padded < eff ? 0 : (padded - eff) / stride + 1;
  return BK_OK;
}

/*
 * A convolution whose input is empty (C_in == 0 or a zero input extent)
 * but whose output is not reads only zero padding: its result is the bias
 * broadcast over (N, out...), or zeros without a bias. Rather than give
 * the backends a member for this rare case, the backend's own convolution
 * runs as one group over a zero input of one channel and one position and
 * a zero one-tap kernel, padded after by out - 1 so the output extents are
 * unchanged: every output is bias + 0.
 */
static bk_status conv_bias_only(bk_call *c, const bk_buffer *bias, const bk_conv_geom *g,
                                int64_t out_len, bk_buffer **out) {
  if (!bias) return bk__new_zeros(c, out_len, out);
  bk_conv_geom z = *g;
  z.c_in = 1;
  z.groups = 1;
  for (int a = 0; a < g->spatial_rank; a++) {
    z.in[a] = 1;
    z.k[a] = 1;
    z.stride[a] = 1;
    z.dilation[a] = 1;
    z.pad_before[a] = 0;
    z.pad_after[a] = g->out[a] - 1;
  }
  z.in_volume = 1;
  z.k_volume = 1;
  /* The zero input is (N, 1, 1...), the zero kernel (C_out, 1, 1...). */
  bk_buffer *zx = NULL, *zw = NULL, *y = NULL;
  bk_status st = bk__new_zeros(c, g->n, &zx);
  if (st == BK_OK) st = bk__new_zeros(c, g->c_out, &zw);
  if (st == BK_OK) st = bk__new_output(c, out_len, &y);
  if (st == BK_OK) st = c->be->conv(c->ctx, c->dtype, zx->data, zw->data, bias->data, y->data, &z);
  bk__drop(&zx);
  bk__drop(&zw);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

bk_status bk_conv(bk_context *ctx, const bk_buffer *input, const bk_buffer *kernel,
                  const bk_buffer *bias, const int64_t *input_dims, int input_rank,
                  const int64_t *kernel_dims, int spatial_rank, const int64_t *stride,
                  const int64_t *pad_before, const int64_t *pad_after, const int64_t *dilation,
                  int64_t groups, bk_buffer **out) {
  static const char fn[] = "bk_conv";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  st = bk__check_ptr(fn, "input", input);
  if (st == BK_OK) st = bk__check_ptr(fn, "kernel", kernel);
  if (st != BK_OK) return st;
  if (spatial_rank < 1 || spatial_rank > 3)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "spatial_rank = %d outside [1, 3]",
                    spatial_rank);
  if (input_rank < spatial_rank + 1 || input_rank > BK_MAX_RANK)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "input_rank = %d outside [spatial_rank + 1, BK_MAX_RANK] = [%d, %d]",
                    input_rank, spatial_rank + 1, BK_MAX_RANK);
  st = bk__check_ptr(fn, "input_dims", input_dims);
  if (st == BK_OK) st = bk__check_ptr(fn, "kernel_dims", kernel_dims);
  if (st == BK_OK) st = bk__check_ptr(fn, "stride", stride);
  if (st == BK_OK) st = bk__check_ptr(fn, "pad_before", pad_before);
  if (st == BK_OK) st = bk__check_ptr(fn, "pad_after", pad_after);
  if (st == BK_OK) st = bk__check_ptr(fn, "dilation", dilation);
  if (st != BK_OK) return st;

  /* input_dims = (batch axes..., C_in, s_1..s_r); kernel_dims = (C_out,
   * C_in, k_1..k_r). Every dim is checked non-negative and the products
   * (whole tensors, the folded batch, the spatial volumes) for overflow. */
  const int ch = input_rank - spatial_rank - 1;
  int64_t in_len = 0, k_len = 0, n = 0, in_volume = 0, k_volume = 0;
  st = bk__product(fn, "input_dims", input_dims, input_rank, &in_len);
  if (st == BK_OK) st = bk__product(fn, "kernel_dims", kernel_dims, spatial_rank + 2, &k_len);
  if (st == BK_OK) st = bk__product(fn, "input_dims", input_dims, ch, &n);
  if (st == BK_OK) st = bk__product(fn, "input_dims", input_dims + ch + 1, spatial_rank, &in_volume);
  if (st == BK_OK) st = bk__product(fn, "kernel_dims", kernel_dims + 2, spatial_rank, &k_volume);
  if (st != BK_OK) return st;
  const int64_t c_in = input_dims[ch], c_out = kernel_dims[0];
  if (groups <= 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "groups = %" PRId64 " must be positive", groups);
  if (kernel_dims[1] != c_in)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "kernel_dims[1] = %" PRId64 " differs from C_in = input_dims[%d] = %" PRId64,
                    kernel_dims[1], ch, c_in);
  if (c_in % groups != 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "C_in = input_dims[%d] = %" PRId64 " is not divisible by groups = %" PRId64, ch,
                    c_in, groups);
  if (c_out % groups != 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "C_out = kernel_dims[0] = %" PRId64 " is not divisible by groups = %" PRId64,
                    c_out, groups);

  bk_conv_geom g = {0};
  g.spatial_rank = spatial_rank;
  g.n = n;
  g.c_in = c_in;
  g.c_out = c_out;
  g.groups = groups;
  int64_t out_dims[5] = {n, c_out, 0, 0, 0};
  for (int a = 0; a < spatial_rank; a++) {
    g.in[a] = input_dims[ch + 1 + a];
    g.k[a] = kernel_dims[2 + a];
    g.stride[a] = stride[a];
    g.pad_before[a] = pad_before[a];
    g.pad_after[a] = pad_after[a];
    /* A one-tap kernel never multiplies its dilation (eff = 1 whatever it
     * is), so the backends get 1: an extreme dilation then never reaches
     * their arithmetic, and the result is the same. */
    g.dilation[a] = g.k[a] == 1 ? 1 : dilation[a];
    st = conv_axis(fn, a, g.in[a], g.k[a], stride[a], pad_before[a], pad_after[a], dilation[a],
                   &g.out[a]);
    if (st != BK_OK) return st;
    out_dims[2 + a] = g.out[a];
  }
  int64_t out_len = 0;
  st = bk__product(fn, "output dims (N, C_out, out...)", out_dims, spatial_rank + 2, &out_len);
  if (st == BK_OK) st = bk__product(fn, "output extents", g.out, spatial_rank, &g.out_volume);
  if (st == BK_OK) st = bk__check_len(fn, "input", input, in_len);
  if (st == BK_OK) st = bk__check_len(fn, "kernel", kernel, k_len);
  if (st == BK_OK && bias) st = bk__check_len(fn, "bias", bias, c_out);
  if (st != BK_OK) return st;
  g.in_volume = in_volume;
  g.k_volume = k_volume;

  bk_call c;
  st = bk__bind(&c, fn, ctx, 3, (const bk_buffer *const[]){input, kernel, bias},
                (const char *const[]){"input", "kernel", "bias"});
  if (st != BK_OK) return st;
  if (out_len == 0) return bk__new_output(&c, 0, out);
  if (in_len == 0) return conv_bias_only(&c, bias, &g, out_len, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, out_len, &y);
  if (st == BK_OK)
    st = c.be->conv(c.ctx, c.dtype, input->data, kernel->data, bias ? bias->data : NULL, y->data,
                    &g);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}
