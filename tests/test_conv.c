/*
 * test_conv.c — bk_conv: grouped convolution over 1 to 3 spatial axes.
 */
#include "testlib.h"

/* One convolution: batch axes before the channel axis, then the geometry. */
typedef struct conv_case {
  int spatial_rank;
  int batch_rank;         /* number of batch axes before C_in */
  int64_t batch_dims[2];
  int64_t c_in, c_out, groups;
  int64_t in[3], k[3], stride[3], before[3], after[3], dil[3];
  int with_bias;
} conv_case;

static int64_t out_extent(int64_t in, int64_t k, int64_t stride, int64_t before, int64_t after,
                          int64_t dil) {
  const int64_t eff = (k - 1) * dil + 1, padded = in + before + after;
  return padded < eff ? 0 : (padded - eff) / stride + 1;
}

static int64_t volume(const int64_t *d, int r) {
  int64_t v = 1;
  for (int i = 0; i < r; i++) v *= d[i];
  return v;
}

/* The naive float64 reference: every output position, every channel of its
 * group, every tap, with an explicit bounds test. y and scale (sum |x||w| +
 * |bias| per output, its maximum) are written. Returns the output length. */
static int64_t ref_conv(const conv_case *cc, int64_t n, const double *x, const double *w,
                        const double *bias, double *y, double *scale) {
  const int r = cc->spatial_rank;
  int64_t out[3], in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, o3[3] = {1, 1, 1};
  int64_t st[3] = {1, 1, 1}, be[3] = {0, 0, 0}, dl[3] = {1, 1, 1};
  for (int a = 0; a < r; a++) {
    out[a] = out_extent(cc->in[a], cc->k[a], cc->stride[a], cc->before[a], cc->after[a],
                        cc->dil[a]);
    in[3 - r + a] = cc->in[a];
    k[3 - r + a] = cc->k[a];
    o3[3 - r + a] = out[a];
    st[3 - r + a] = cc->stride[a];
    be[3 - r + a] = cc->before[a];
    dl[3 - r + a] = cc->dil[a];
  }
  const int64_t iG = cc->c_in / cc->groups, oG = cc->c_out / cc->groups;
  const int64_t inv = in[0] * in[1] * in[2], kv = k[0] * k[1] * k[2], ov = o3[0] * o3[1] * o3[2];
  *scale = 0;
  for (int64_t b = 0; b < n; b++)
    for (int64_t oc = 0; oc < cc->c_out; oc++)
      for (int64_t p0 = 0; p0 < o3[0]; p0++)
        for (int64_t p1 = 0; p1 < o3[1]; p1++)
          for (int64_t p2 = 0; p2 < o3[2]; p2++) {
            double acc = bias ? bias[oc] : 0, mag = bias ? fabs(bias[oc]) : 0;
            const int64_t g = oc / oG;
            for (int64_t j = 0; j < iG; j++) {
              const int64_t ic = g * iG + j;
              for (int64_t k0 = 0; k0 < k[0]; k0++)
                for (int64_t k1 = 0; k1 < k[1]; k1++)
                  for (int64_t k2 = 0; k2 < k[2]; k2++) {
                    const int64_t i0 = p0 * st[0] + k0 * dl[0] - be[0];
                    const int64_t i1 = p1 * st[1] + k1 * dl[1] - be[1];
                    const int64_t i2 = p2 * st[2] + k2 * dl[2] - be[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2])
                      continue;
                    const double xv = x[(b * cc->c_in + ic) * inv + (i0 * in[1] + i1) * in[2] + i2];
                    const double wv = w[(oc * cc->c_in + ic) * kv + (k0 * k[1] + k1) * k[2] + k2];
                    acc += xv * wv;
                    mag += fabs(xv * wv);
                  }
            }
            y[(b * cc->c_out + oc) * ov + (p0 * o3[1] + p1) * o3[2] + p2] = acc;
            if (mag > *scale) *scale = mag;
          }
  return n * cc->c_out * ov;
}

/* Runs one case in dtype dt against the reference, with NaN in every
 * off-diagonal block of the kernel (never read), plus determinism and
 * unchanged inputs. */
static void run_case(bk_dtype dt, const conv_case *cc, uint64_t seed) {
  const int r = cc->spatial_rank;
  int64_t input_dims[BK_MAX_RANK], kernel_dims[5];
  int rank = 0;
  for (int i = 0; i < cc->batch_rank; i++) input_dims[rank++] = cc->batch_dims[i];
  input_dims[rank++] = cc->c_in;
  for (int a = 0; a < r; a++) input_dims[rank++] = cc->in[a];
  kernel_dims[0] = cc->c_out;
  kernel_dims[1] = cc->c_in;
  for (int a = 0; a < r; a++) kernel_dims[2 + a] = cc->k[a];
  const int64_t n = volume(cc->batch_dims, cc->batch_rank);
  const int64_t nx = volume(input_dims, rank), kv = volume(cc->k, r), nw = cc->c_out * cc->c_in * kv;
  double *x = tl_xmalloc((size_t)nx * sizeof *x), *w = tl_xmalloc((size_t)nw * sizeof *w);
  double *bias = tl_xmalloc((size_t)cc->c_out * sizeof *bias);
  tl_seed(seed);
  tl_fill_randn(x, nx);
  tl_fill_uniform(w, nw, -1, 1);
  tl_fill_uniform(bias, cc->c_out, -2, 2);
  tl_round(dt, x, nx);
  tl_round(dt, w, nw);
  tl_round(dt, bias, cc->c_out);
  const int64_t iG = cc->c_in / cc->groups, oG = cc->c_out / cc->groups;
  for (int64_t oc = 0; oc < cc->c_out; oc++)
    for (int64_t ic = 0; ic < cc->c_in; ic++)
      if (ic / iG != oc / oG)
        for (int64_t t = 0; t < kv; t++) w[(oc * cc->c_in + ic) * kv + t] = NAN;
  int64_t ov = 1;
  for (int a = 0; a < r; a++)
    ov *= out_extent(cc->in[a], cc->k[a], cc->stride[a], cc->before[a], cc->after[a], cc->dil[a]);
  double *ref = tl_xmalloc((size_t)(n * cc->c_out * ov) * sizeof *ref), scale = 0;
  const int64_t ny = ref_conv(cc, n, x, w, cc->with_bias ? bias : NULL, ref, &scale);
  bk_buffer *bx = tl_buf(dt, x, nx), *bw = tl_buf(dt, w, nw);
  bk_buffer *bb = cc->with_bias ? tl_buf(dt, bias, cc->c_out) : NULL, *y = NULL, *y2 = NULL;
  if (TL_OK(bk_conv(tl_ctx, bx, bw, bb, input_dims, rank, kernel_dims, r, cc->stride, cc->before,
                    cc->after, cc->dil, cc->groups, &y)) == BK_OK) {
    TL_BUF_CLOSE(y, ref, ny, tl_tol_contract(dt, (double)(iG * kv)), scale > 1 ? scale : 1);
    if (TL_OK(bk_conv(tl_ctx, bx, bw, bb, input_dims, rank, kernel_dims, r, cc->stride,
                      cc->before, cc->after, cc->dil, cc->groups, &y2)) == BK_OK)
      TL_CHECK(tl_same_bits(y, y2), "conv is not deterministic");
  }
  TL_UNCHANGED(bx, x, nx);
  TL_UNCHANGED(bw, w, nw);
  if (bb) TL_UNCHANGED(bb, bias, cc->c_out);
  bk_buffer_release(y);
  bk_buffer_release(y2);
  bk_buffer_release(bx);
  bk_buffer_release(bw);
  bk_buffer_release(bb);
  free(x);
  free(w);
  free(bias);
  free(ref);
}

/* ---- the contract's example ------------------------------------------------------- */

static void conv_example(void) {
  const double x[] = {1, 2, 3, 4, 10, 20, 30, 40};
  const double w[] = {1, -1, 100, 100, 7, 7, 0.5, 2};
  const double w_nan[] = {1, -1, NAN, NAN, NAN, NAN, 0.5, 2};
  const double bias[] = {0, 1};
  const double expect[] = {-2, -2, -2, 41, 66, 91};
  const int64_t input_dims[] = {2, 4}, kernel_dims[] = {2, 2, 2};
  const int64_t stride[] = {1}, before[] = {1}, after[] = {0}, dil[] = {2};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (int v = 0; v < 2; v++) {
      bk_buffer *bx = tl_buf(dt, x, 8), *bw = tl_buf(dt, v ? w_nan : w, 8);
      bk_buffer *bb = tl_buf(dt, bias, 2), *y = NULL;
      if (TL_OK(bk_conv(tl_ctx, bx, bw, bb, input_dims, 2, kernel_dims, 1, stride, before, after,
                        dil, 2, &y)) == BK_OK)
        TL_BUF_EXACT(y, expect, 6);
      bk_buffer_release(y);
      /* Without the bias, the second channel loses its 1. */
      if (TL_OK(bk_conv(tl_ctx, bx, bw, NULL, input_dims, 2, kernel_dims, 1, stride, before,
                        after, dil, 2, &y)) == BK_OK)
        TL_BUF_EXACT(y, ((double[]){-2, -2, -2, 40, 65, 90}), 6);
      bk_buffer_release(y);
      TL_UNCHANGED(bw, v ? w_nan : w, 8);
      bk_buffer_release(bx);
      bk_buffer_release(bw);
      bk_buffer_release(bb);
    }
  }
}

/* ---- random cases: every combination of groups, dilation, stride and
 * asymmetric padding, for 1, 2 and 3 spatial axes ---------------------------------- */

static void conv_random(void) {
  static const int64_t in_of[3][3] = {{13}, {7, 6}, {5, 4, 6}};
  static const int64_t k_of[3][3] = {{3}, {3, 2}, {2, 3, 2}};
  static const int64_t dil_on[3] = {2, 1, 3}, stride_on[3] = {2, 3, 1};
  static const int64_t before_on[3] = {2, 0, 1}, after_on[3] = {1, 2, 0};
  int count = 0;
  for (int d = 0; d < TL_DTYPES; d++) {
    for (int r = 1; r <= 3; r++) {
      for (int combo = 0; combo < 16; combo++) {
        conv_case cc;
        memset(&cc, 0, sizeof cc);
        cc.spatial_rank = r;
        /* Batch axes: none, one, or two that fold into N = 2. */
        cc.batch_rank = (combo + r) % 3;
        cc.batch_dims[0] = cc.batch_rank == 1 ? 3 : 1;
        cc.batch_dims[1] = 2;
        cc.groups = combo & 1 ? 2 : 1;
        cc.c_in = 4;
        cc.c_out = 6;
        cc.with_bias = ((combo >> 1) ^ r) & 1;
        for (int a = 0; a < r; a++) {
          cc.in[a] = in_of[r - 1][a];
          cc.k[a] = k_of[r - 1][a];
          cc.dil[a] = combo & 2 ? dil_on[a + 3 - r] : 1;
          cc.stride[a] = combo & 4 ? stride_on[a + 3 - r] : 1;
          cc.before[a] = combo & 8 ? before_on[a] : 0;
          cc.after[a] = combo & 8 ? after_on[a] : 0;
        }
        tl_case = "conv_random";
        run_case(tl_dtypes[d], &cc, (uint64_t)(100 * r + combo));
        count++;
      }
    }
  }
  TL_CHECK(count == 96, "ran %d random cases", count);
}

/* Other group shapes: groups = 3 with uneven channel counts, channel
 * multipliers (C_out = 2 C_in, groups = C_in), a single group over many
 * channels, padding larger than the kernel. */
static void conv_groups(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    conv_case a = {2, 1, {2, 1}, 6, 9, 3, {6, 5}, {2, 3}, {1, 2}, {1, 0}, {0, 2}, {1, 1}, 1};
    run_case(dt, &a, 7);
    conv_case b = {1, 1, {3, 1}, 4, 8, 4, {20}, {5}, {1}, {4}, {4}, {1}, 1};
    run_case(dt, &b, 8);
    conv_case c = {3, 0, {1, 1}, 5, 2, 1, {3, 3, 3}, {3, 1, 2}, {1, 1, 2}, {2, 0, 1}, {2, 0, 1},
                   {1, 1, 1}, 0};
    run_case(dt, &c, 9);
    conv_case e = {1, 2, {2, 2}, 2, 2, 1, {9}, {2}, {4}, {5}, {7}, {3}, 1};
    run_case(dt, &e, 10);
  }
}

/* Depthwise convolutions (groups == C_in) of every rank, which the CUDA
 * backend computes with its own kernels: 2-D with a channel multiplier,
 * stride, dilation and asymmetric padding; 3-D with one channel per group;
 * one channel into one over two batch axes; 1-D with a dilated window too
 * long for the shared-memory tile of any depthwise kernel, and with padding
 * too wide for the 1-D kernel's; padding wider than the
 * input, so that some outputs see only zeros; long windows and strides. */
static void conv_depthwise_nd(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    conv_case a = {2, 1, {2, 1}, 3, 6, 3, {11, 9}, {3, 2}, {2, 1}, {2, 0}, {1, 3}, {1, 2}, 1};
    run_case(dt, &a, 31);
    conv_case b = {3, 0, {1, 1}, 4, 4, 4, {9, 7, 10}, {2, 1, 3}, {2, 1, 2}, {1, 0, 2}, {2, 0, 0},
                   {2, 1, 1}, 0};
    run_case(dt, &b, 32);
    conv_case c = {2, 2, {2, 3}, 1, 1, 1, {37, 19}, {3, 4}, {2, 1}, {2, 5}, {4, 0}, {3, 2}, 1};
    run_case(dt, &c, 33);
    conv_case e = {1, 1, {2, 1}, 2, 2, 2, {70001}, {3}, {3}, {1}, {2}, {30000}, 1};
    run_case(dt, &e, 34);
    conv_case e2 = {1, 1, {2, 1}, 2, 2, 2, {300}, {3}, {2}, {13000}, {5}, {2}, 1};
    run_case(dt, &e2, 38);
    conv_case f = {2, 0, {1, 1}, 5, 10, 5, {3, 4}, {2, 2}, {1, 3}, {6, 1}, {7, 2}, {1, 1}, 1};
    run_case(dt, &f, 35);
    /* Windows of 7 and 11 taps along the last axis; a stride that leaves
     * room for one pass of output rows per shared-memory tile. */
    conv_case h = {2, 1, {3, 1}, 2, 2, 2, {6, 40}, {2, 7}, {1, 2}, {1, 3}, {0, 4}, {2, 2}, 1};
    run_case(dt, &h, 36);
    conv_case i = {2, 0, {1, 1}, 2, 4, 2, {3, 40}, {1, 11}, {1, 1}, {0, 5}, {0, 6}, {1, 1}, 0};
    run_case(dt, &i, 37);
    conv_case j = {2, 0, {1, 1}, 3, 3, 3, {3000, 6}, {2, 1}, {40, 1}, {1, 0}, {0, 0}, {1, 1}, 1};
    run_case(dt, &j, 39);
  }
}

/* Convolutions with enough work to take the CPU backend's matrix-product
 * form where it has one (2^20 multiply-adds and more, 4 or more output
 * channels and 16 or more (channel, tap) pairs per group): a 1-D one long
 * enough for several tiles of output positions, a grouped 2-D one with
 * stride, dilation and asymmetric padding, a 3-D one with two batch axes;
 * and a long 1-D one with asymmetric padding. */
static void conv_large(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    conv_case a = {1, 1, {1, 1}, 8, 8, 2, {60000}, {5}, {1}, {2}, {2}, {1}, 1};
    run_case(dt, &a, 21);
    conv_case b = {2, 1, {2, 1}, 12, 16, 2, {47, 53}, {3, 4}, {2, 1}, {1, 3}, {2, 0}, {2, 1}, 1};
    run_case(dt, &b, 22);
    conv_case c = {3, 2, {2, 1}, 4, 16, 1, {9, 11, 12}, {3, 3, 2}, {1, 2, 1}, {1, 0, 1}, {1, 2, 0},
                   {1, 1, 2}, 0};
    run_case(dt, &c, 23);
    /* Asymmetric padding of lines longer than the CUDA padding pass's
     * segments of 1024 elements. */
    conv_case e = {1, 0, {1, 1}, 3, 4, 1, {5000}, {3}, {1}, {3}, {1}, {1}, 1};
    run_case(dt, &e, 24);
  }
}

/* The Mamba-style causal depthwise convolution: groups = C_in = C_out,
 * k = 4, pad_before = 3, pad_after = 0: out extent = in, and output t reads
 * inputs t-3..t only. */
static void conv_depthwise_causal(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    conv_case cc = {1, 1, {3, 1}, 8, 8, 8, {50}, {4}, {1}, {3}, {0}, {1}, 1};
    run_case(dt, &cc, 11);
    /* Causality: changing a late input leaves every earlier output as it was. */
    const int64_t input_dims[] = {1, 2, 6}, kernel_dims[] = {2, 2, 4};
    const int64_t stride[] = {1}, before[] = {3}, after[] = {0}, dil[] = {1};
    double x[12], w[16];
    for (int i = 0; i < 12; i++) x[i] = i + 1;
    for (int i = 0; i < 16; i++) w[i] = 0.25 * (i % 5) - 0.5;
    bk_buffer *bw = tl_buf(dt, w, 16), *y1 = NULL, *y2 = NULL;
    bk_buffer *bx = tl_buf(dt, x, 12);
    x[4] = 1000;
    x[10] = -1000;
    bk_buffer *bx2 = tl_buf(dt, x, 12);
    if (TL_OK(bk_conv(tl_ctx, bx, bw, NULL, input_dims, 3, kernel_dims, 1, stride, before, after,
                      dil, 2, &y1)) == BK_OK &&
        TL_OK(bk_conv(tl_ctx, bx2, bw, NULL, input_dims, 3, kernel_dims, 1, stride, before, after,
                      dil, 2, &y2)) == BK_OK) {
      double *a = tl_read(y1), *b = tl_read(y2);
      TL_CHECK(bk_buffer_length(y1) == 12, "causal output length %" PRId64, bk_buffer_length(y1));
      int same = 1;
      for (int c = 0; c < 2; c++)
        for (int t = 0; t < 4; t++) same &= a[c * 6 + t] == b[c * 6 + t];
      TL_CHECK(same, "an output before t = 4 depends on a later input");
      free(a);
      free(b);
    }
    bk_buffer_release(y1);
    bk_buffer_release(y2);
    bk_buffer_release(bx);
    bk_buffer_release(bx2);
    bk_buffer_release(bw);
  }
}

/* ---- empty and input-free cases ------------------------------------------------------ */

/* Runs bk_conv over buffers of lengths nx, nw and nb (-1: no bias) holding
 * small patterns and checks the result is exactly expect (length ny). */
static void exact_case(bk_dtype dt, int64_t nx, int64_t nw, int64_t nb, const int64_t *input_dims,
                       int input_rank, const int64_t *kernel_dims, int r, const int64_t *stride,
                       const int64_t *before, const int64_t *after, const int64_t *dil,
                       int64_t groups, const double *expect, int64_t ny) {
  static const double bias[] = {0.5, -1, 2, 3};
  double *x = tl_xmalloc((size_t)nx * sizeof *x), *w = tl_xmalloc((size_t)nw * sizeof *w);
  for (int64_t i = 0; i < nx; i++) x[i] = (double)(i % 7) - 3;
  for (int64_t i = 0; i < nw; i++) w[i] = (double)(i % 5) - 2;
  bk_buffer *bx = tl_buf(dt, x, nx), *bw = tl_buf(dt, w, nw);
  bk_buffer *bb = nb >= 0 ? tl_buf(dt, bias, nb) : NULL, *y = NULL;
  if (TL_OK(bk_conv(tl_ctx, bx, bw, bb, input_dims, input_rank, kernel_dims, r, stride, before,
                    after, dil, groups, &y)) == BK_OK)
    TL_BUF_EXACT(y, expect, ny);
  bk_buffer_release(y);
  bk_buffer_release(bx);
  bk_buffer_release(bw);
  bk_buffer_release(bb);
  free(x);
  free(w);
}

static void conv_empty(void) {
  const int64_t one[] = {1, 1}, zero[] = {0, 0};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    /* N = 0 (a zero batch axis), output extent 3. */
    exact_case(dt, 0, 64, 4, (int64_t[]){0, 2, 10}, 3, (int64_t[]){4, 2, 8}, 1, one, zero, zero,
               one, 1, NULL, 0);
    /* C_out = 0: an empty kernel and bias. */
    exact_case(dt, 64, 0, 0, (int64_t[]){2, 4, 8}, 3, (int64_t[]){0, 4, 3}, 1, one, zero, zero,
               one, 2, NULL, 0);
    /* The kernel's reach (k = 2, dilation 5) exceeds the padded input (5). */
    exact_case(dt, 64, 64, -1, (int64_t[]){2, 8, 4}, 3, (int64_t[]){4, 8, 2}, 1, one,
               (int64_t[]){1}, (int64_t[]){0}, (int64_t[]){5}, 1, NULL, 0);
    /* 2-D with no batch axis: the second axis is empty (k = 4 over 2). */
    exact_case(dt, 8, 64, 4, (int64_t[]){1, 4, 2}, 3, (int64_t[]){4, 1, 4, 4}, 2, one, zero,
               zero, one, 1, NULL, 0);

    /* An empty input extent with padding: every output reads padding only,
     * so the result is the bias broadcast over (N, C_out, out), or zeros. */
    const double bias_out[] = {0.5, 0.5, -1, -1, 2, 2, 3, 3, 0.5, 0.5, -1, -1, 2, 2, 3, 3};
    const double zeros[16] = {0};
    exact_case(dt, 0, 32, 4, (int64_t[]){2, 4, 0}, 3, (int64_t[]){4, 4, 2}, 1, one,
               (int64_t[]){1}, (int64_t[]){2}, one, 2, bias_out, 16);
    exact_case(dt, 0, 32, -1, (int64_t[]){2, 4, 0}, 3, (int64_t[]){4, 4, 2}, 1, one,
               (int64_t[]){1}, (int64_t[]){2}, one, 2, zeros, 16);
    /* C_in = 0: a sum over no channels, then the bias. */
    exact_case(dt, 0, 0, 4, (int64_t[]){2, 0, 3}, 3, (int64_t[]){4, 0, 2}, 1, one, zero, zero,
               one, 2, bias_out, 16);
    /* 2-D, no batch axis, strided and dilated over padding only:
     * out extents (0+3+1-2)/2+1 = 2 and (3+1+0-3)/1+1 = 2. */
    const double bias2[] = {0.5, 0.5, 0.5, 0.5, -1, -1, -1, -1};
    exact_case(dt, 0, 16, 2, (int64_t[]){2, 0, 3}, 3, (int64_t[]){2, 2, 2, 2}, 2,
               (int64_t[]){2, 1}, (int64_t[]){3, 1}, (int64_t[]){1, 0}, (int64_t[]){1, 2}, 1,
               bias2, 8);
  }
}

/* ---- rejections ------------------------------------------------------------------------ */

static void conv_errors(void) {
  /* A valid call: input (2, 4, 6), kernel (6, 4, 3), bias (6), groups 2. */
  double v[72] = {0};
  bk_buffer *x = tl_buf(BK_F32, v, 48), *w = tl_buf(BK_F32, v, 72), *b = tl_buf(BK_F32, v, 6);
  bk_buffer *wd = tl_buf(BK_F64, v, 72), *bd = tl_buf(BK_F64, v, 6), *b5 = tl_buf(BK_F32, v, 5);
  const int64_t id[] = {2, 4, 6}, kd[] = {6, 4, 3}, s[] = {1}, pb[] = {1}, pa[] = {1}, dl[] = {1};
  const int64_t neg[] = {-1}, zero[] = {0};
  bk_buffer *y = (bk_buffer *)&y;
  TL_OK(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, pb, pa, dl, 2, &y));
  bk_buffer_release(y);
  y = (bk_buffer *)&y;
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, pb, pa, dl, 2, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_conv(tl_ctx, NULL, w, b, id, 3, kd, 1, s, pb, pa, dl, 2, &y), BK_ERR_NULL, "input");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_conv(tl_ctx, x, NULL, b, id, 3, kd, 1, s, pb, pa, dl, 2, &y), BK_ERR_NULL, "kernel");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, NULL, 3, kd, 1, s, pb, pa, dl, 2, &y), BK_ERR_NULL,
            "input_dims");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, NULL, 1, s, pb, pa, dl, 2, &y), BK_ERR_NULL,
            "kernel_dims");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, NULL, pb, pa, dl, 2, &y), BK_ERR_NULL, "stride");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, NULL, pa, dl, 2, &y), BK_ERR_NULL,
            "pad_before");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, pb, NULL, dl, 2, &y), BK_ERR_NULL,
            "pad_after");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, pb, pa, NULL, 2, &y), BK_ERR_NULL,
            "dilation");
  /* Ranks. */
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 0, s, pb, pa, dl, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "spatial_rank = 0");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 4, s, pb, pa, dl, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "spatial_rank = 4");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 1, kd, 1, s, pb, pa, dl, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "input_rank = 1");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 3, s, pb, pa, dl, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "input_rank = 3");
  int64_t big[BK_MAX_RANK + 1];
  for (int i = 0; i <= BK_MAX_RANK; i++) big[i] = 1;
  TL_REJECT(bk_conv(tl_ctx, x, w, b, big, BK_MAX_RANK + 1, kd, 1, s, pb, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "input_rank = 17");
  /* Dims. */
  TL_REJECT(bk_conv(tl_ctx, x, w, b, (int64_t[]){-2, 4, 6}, 3, kd, 1, s, pb, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "input_dims[0] = -2");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, (int64_t[]){6, 4, -3}, 1, s, pb, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "kernel_dims[2] = -3");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, (int64_t[]){INT64_MAX, 4, 6}, 3, kd, 1, s, pb, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "overflow");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, (int64_t[]){INT64_MAX / 2, 3, 4, 0}, 4, kd, 1, s, pb, pa,
                    dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "overflow");
  /* Groups and channels. */
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, pb, pa, dl, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "groups = 0");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, pb, pa, dl, -2, &y), BK_ERR_INVALID_ARGUMENT,
            "groups = -2");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, (int64_t[]){6, 3, 4}, 1, s, pb, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "kernel_dims[1] = 3");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, (int64_t[]){4, 4, 3}, 1, s, pb, pa, dl, 3, &y),
            BK_ERR_INVALID_ARGUMENT, "C_in");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, (int64_t[]){6, 4, 3}, 1, s, pb, pa, dl, 4, &y),
            BK_ERR_INVALID_ARGUMENT, "C_out");
  /* Per-axis geometry. */
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, (int64_t[]){6, 4, 0}, 1, s, pb, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "kernel_dims[2] = 0");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, zero, pb, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "stride[0] = 0");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, neg, pb, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "stride[0] = -1");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, pb, pa, zero, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "dilation[0] = 0");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, neg, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "pad_before[0] = -1");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, pb, neg, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "pad_after[0] = -1");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, (int64_t[]){INT64_MAX}, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "pad_before[0]");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, kd, 1, s, pb, pa, (int64_t[]){INT64_MAX}, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "dilation[0]");
  /* Lengths. */
  TL_REJECT(bk_conv(tl_ctx, x, w, b, (int64_t[]){2, 4, 7}, 3, kd, 1, s, pb, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "input has length 48, expected 56");
  TL_REJECT(bk_conv(tl_ctx, x, w, b, id, 3, (int64_t[]){6, 4, 2}, 1, s, pb, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "kernel has length 72, expected 48");
  TL_REJECT(bk_conv(tl_ctx, x, w, b5, id, 3, kd, 1, s, pb, pa, dl, 2, &y),
            BK_ERR_INVALID_ARGUMENT, "bias has length 5, expected 6");
  /* Dtypes. */
  TL_REJECT(bk_conv(tl_ctx, x, wd, b, id, 3, kd, 1, s, pb, pa, dl, 2, &y), BK_ERR_DTYPE, "kernel");
  TL_REJECT(bk_conv(tl_ctx, x, w, bd, id, 3, kd, 1, s, pb, pa, dl, 2, &y), BK_ERR_DTYPE, "bias");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other)
    TL_REJECT(bk_conv(other, x, w, b, id, 3, kd, 1, s, pb, pa, dl, 2, &y), BK_ERR_DEVICE_MISMATCH,
              "ctx");
  bk_buffer_release(x);
  bk_buffer_release(w);
  bk_buffer_release(b);
  bk_buffer_release(wd);
  bk_buffer_release(bd);
  bk_buffer_release(b5);
}

int main(void) {
  tl_init();
  TL_RUN(conv_example);
  TL_RUN(conv_random);
  TL_RUN(conv_groups);
  TL_RUN(conv_depthwise_nd);
  TL_RUN(conv_large);
  TL_RUN(conv_depthwise_causal);
  TL_RUN(conv_empty);
  TL_RUN(conv_errors);
  return tl_finish();
}
