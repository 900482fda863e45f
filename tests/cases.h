/*
 * cases.h — one small call of every primitive, as a table, for the tests
 * that sweep all primitives at once (allocation-failure walk, thread stress,
 * cross-backend agreement). Each case builds its inputs once (prepare), then
 * `run` may be called many times; it returns the status and up to four
 * outputs, which the caller releases.
 */
#ifndef BK_TEST_CASES_H
#define BK_TEST_CASES_H

#include "testlib.h"

#define CASE_MAX_IN 6
#define CASE_MAX_OUT 4
#define CASE_EMPTY (-1)

typedef struct case_inputs {
  bk_buffer *in[CASE_MAX_IN];
} case_inputs;

typedef struct prim_case {
  const char *name;
  const char *fn; /* the public function the case calls */
  /* Input lengths (0 terminates; CASE_EMPTY is an input of no elements). */
  int64_t in_len[CASE_MAX_IN];
  bk_status (*run)(bk_context *ctx, const case_inputs *ci, bk_buffer **out);
} prim_case;

static const uint64_t case_idx[4] = {2, 0, 7, 2};

/* dims shared by several cases */
static const int64_t case_d234[3] = {2, 3, 4};

static bk_status c_softmax(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_softmax(c, i->in[0], case_d234, 3, 1, &o[0]);
}
static bk_status c_xent_w(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_xent_weighted_mean(c, i->in[0], i->in[1], 4, 6, &o[0]);
}
static bk_status c_xent_t(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_xent_teacher(c, i->in[0], i->in[1], 4, 6, 0, &o[0]);
}
static bk_status c_xent_tg(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_xent_teacher(c, i->in[0], i->in[1], 4, 6, 1, &o[0]);
}
static bk_status c_conv(bk_context *c, const case_inputs *i, bk_buffer **o) {
  static const int64_t in_dims[3] = {2, 4, 6}, k_dims[3] = {4, 4, 3};
  static const int64_t stride[1] = {1}, pb[1] = {2}, pa[1] = {1}, dil[1] = {2};
  return bk_conv(c, i->in[0], i->in[1], i->in[2], in_dims, 3, k_dims, 1, stride, pb, pa, dil, 2,
                 &o[0]);
}
/* Enough work (1.3M multiply-adds, 4 output channels and 20 (channel, tap)
 * pairs per group) for the CPU backend's matrix-product form. */
static bk_status c_conv_large(bk_context *c, const case_inputs *i, bk_buffer **o) {
  static const int64_t in_dims[3] = {1, 8, 8192}, k_dims[3] = {8, 8, 5};
  static const int64_t stride[1] = {1}, pb[1] = {2}, pa[1] = {2}, dil[1] = {1};
  return bk_conv(c, i->in[0], i->in[1], i->in[2], in_dims, 3, k_dims, 1, stride, pb, pa, dil, 2,
                 &o[0]);
}
static bk_status c_rows_sum(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_rows_sum(c, i->in[0], 4, 6, &o[0]);
}
static bk_status c_rows_max(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_rows_max(c, i->in[0], 4, 6, &o[0]);
}
static bk_status c_first_max(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_rows_first_max_mask(c, i->in[0], 4, 6, &o[0]);
}
static bk_status c_topk(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_rows_topk_mask(c, i->in[0], 4, 6, 2, &o[0]);
}
static bk_status c_masked(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_rows_masked_softmax(c, i->in[0], i->in[1], 4, 6, &o[0]);
}
static bk_status c_concat(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_vec_concat(c, i->in[0], i->in[1], 24, 24, &o[0]);
}
static bk_status c_slice(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_vec_slice(c, i->in[0], 24, 5, 11, &o[0]);
}
static bk_status c_bcol(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_broadcast_col(c, i->in[0], 6, 5, &o[0]);
}
static const int64_t case_bin[2] = {1, 6}, case_bout[3] = {3, 4, 6}, case_bmap[3] = {0, 1, 2};
static bk_status c_bto(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_broadcast_to(c, i->in[0], case_bin, 2, case_bout, 3, case_bmap, &o[0]);
}
static bk_status c_badj(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_broadcast_to_adjoint(c, i->in[0], case_bin, 2, case_bout, 3, case_bmap, &o[0]);
}
static bk_status c_swap(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_swap_adjacent(c, i->in[0], case_d234, 3, 1, &o[0]);
}
static bk_status c_sum_axis(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_sum_axis(c, i->in[0], case_d234, 3, 1, &o[0]);
}
static bk_status c_ln_f(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_layernorm_forward(c, i->in[0], i->in[1], i->in[2], 4, 6, 1e-5, &o[0], &o[1], &o[2]);
}
static bk_status c_ln_b(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_layernorm_backward(c, i->in[0], i->in[1], i->in[2], i->in[3], 4, 6, &o[0], &o[1],
                               &o[2]);
}
static bk_status c_bmm(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_bmm(c, i->in[0], i->in[1], 2, 3, 4, 2, 0, 1, &o[0]);
}
static bk_status c_bmm_s(bk_context *c, const case_inputs *i, bk_buffer **o) {
  int flag = 0;
  return bk_bmm_scaled(c, i->in[0], i->in[1], 2, 3, 4, 2, 1, 0, 0.5, &o[0], &flag);
}
static bk_status c_rfft(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_rfft(c, i->in[0], 2, 12, &o[0]);
}
static bk_status c_irfft(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_irfft(c, i->in[0], 2, 11, &o[0]);
}
static bk_status c_irfft_u(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_irfft_unnormalized(c, i->in[0], 2, 10, &o[0]);
}
/* Paths a small geometry misses: Bluestein FFTs (a prime length above the
 * largest direct prime radix of the CPU backend, 97), the sorted top-k path (rows above 64 columns,
 * k above 64),
 * the ones fill of k >= cols, and a convolution over an empty input whose
 * result is the bias alone. */
static bk_status c_rfft_blue(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_rfft(c, i->in[0], 1, 101, &o[0]);
}
static bk_status c_irfft_blue(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_irfft(c, i->in[0], 1, 202, &o[0]);
}
static bk_status c_topk_sorted(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_rows_topk_mask(c, i->in[0], 2, 70, 66, &o[0]);
}
static bk_status c_topk_all(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_rows_topk_mask(c, i->in[0], 4, 6, 6, &o[0]);
}
static bk_status c_conv_bias(bk_context *c, const case_inputs *i, bk_buffer **o) {
  static const int64_t in_dims[3] = {2, 0, 6}, k_dims[3] = {4, 0, 3};
  static const int64_t stride[1] = {1}, pb[1] = {1}, pa[1] = {1}, dil[1] = {1};
  return bk_conv(c, i->in[0], i->in[1], i->in[2], in_dims, 3, k_dims, 1, stride, pb, pa, dil, 1,
                 &o[0]);
}
static bk_status c_scan(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_scan_diag(c, i->in[0], i->in[1], i->in[2], i->in[3], 4, 6, &o[0]);
}
static bk_status c_scan_b(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_scan_diag_backward(c, i->in[0], i->in[1], i->in[2], i->in[3], i->in[4], i->in[5], 4, 6,
                               &o[0], &o[1], &o[2], &o[3]);
}
static bk_status c_scan_v(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_scan_diag_var(c, i->in[0], i->in[1], i->in[2], i->in[3], 4, 6, &o[0]);
}
static bk_status c_scan_vb(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_scan_diag_var_backward(c, i->in[0], i->in[1], i->in[2], i->in[3], i->in[4], i->in[5], 4,
                                   6, &o[0], &o[1], &o[2], &o[3]);
}
static bk_status c_gather(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_rows_gather(c, i->in[0], 4, 6, case_idx, 4, &o[0]);
}
static bk_status c_scatter(bk_context *c, const case_inputs *i, bk_buffer **o) {
  return bk_rows_scatter_add(c, i->in[0], i->in[1], 4, 6, case_idx, 4, &o[0]);
}

/* Every primitive with input lengths matching its run function. */
static const prim_case prim_cases[] = {
    {"softmax", "bk_softmax", {24}, c_softmax},
    {"xent_weighted_mean", "bk_xent_weighted_mean", {24, 24}, c_xent_w},
    {"xent_teacher", "bk_xent_teacher", {24, 24}, c_xent_t},
    {"xent_teacher_grad", "bk_xent_teacher", {24, 24}, c_xent_tg},
    {"conv", "bk_conv", {48, 48, 4}, c_conv},
    {"conv_bias_only", "bk_conv", {CASE_EMPTY, CASE_EMPTY, 4}, c_conv_bias},
    {"conv_large", "bk_conv", {8 * 8192, 8 * 8 * 5, 8}, c_conv_large},
    {"rows_sum", "bk_rows_sum", {24}, c_rows_sum},
    {"rows_max", "bk_rows_max", {24}, c_rows_max},
    {"rows_first_max_mask", "bk_rows_first_max_mask", {24}, c_first_max},
    {"rows_topk_mask", "bk_rows_topk_mask", {24}, c_topk},
    {"rows_topk_mask_sorted", "bk_rows_topk_mask", {140}, c_topk_sorted},
    {"rows_topk_mask_all", "bk_rows_topk_mask", {24}, c_topk_all},
    {"rows_masked_softmax", "bk_rows_masked_softmax", {24, 24}, c_masked},
    {"vec_concat", "bk_vec_concat", {24, 24}, c_concat},
    {"vec_slice", "bk_vec_slice", {24}, c_slice},
    {"broadcast_col", "bk_broadcast_col", {6}, c_bcol},
    {"broadcast_to", "bk_broadcast_to", {6}, c_bto},
    {"broadcast_to_adjoint", "bk_broadcast_to_adjoint", {72}, c_badj},
    {"swap_adjacent", "bk_swap_adjacent", {24}, c_swap},
    {"sum_axis", "bk_sum_axis", {24}, c_sum_axis},
    {"layernorm_forward", "bk_layernorm_forward", {24, 6, 6}, c_ln_f},
    {"layernorm_backward", "bk_layernorm_backward", {24, 24, 4, 6}, c_ln_b},
    {"bmm", "bk_bmm", {24, 16}, c_bmm},
    {"bmm_scaled", "bk_bmm_scaled", {24, 16}, c_bmm_s},
    {"rfft", "bk_rfft", {24}, c_rfft},
    {"rfft_bluestein", "bk_rfft", {101}, c_rfft_blue},
    {"irfft_bluestein", "bk_irfft", {204}, c_irfft_blue},
    {"irfft", "bk_irfft", {24}, c_irfft},
    {"irfft_unnormalized", "bk_irfft_unnormalized", {24}, c_irfft_u},
    {"scan_diag", "bk_scan_diag", {6, 6, 24, 6}, c_scan},
    {"scan_diag_backward", "bk_scan_diag_backward", {6, 6, 24, 6, 24, 24}, c_scan_b},
    {"scan_diag_var", "bk_scan_diag_var", {24, 24, 24, 6}, c_scan_v},
    {"scan_diag_var_backward", "bk_scan_diag_var_backward", {24, 24, 24, 6, 24, 24}, c_scan_vb},
    {"rows_gather", "bk_rows_gather", {24}, c_gather},
    {"rows_scatter_add", "bk_rows_scatter_add", {24, 24}, c_scatter},
};
#define PRIM_CASES ((int)(sizeof prim_cases / sizeof prim_cases[0]))

/* Makes a case's inputs on ctx from a fixed pseudo-random stream (values in
 * [0.25, 1.25): positive, so masks allow and layer-norm inv_std is sane). */
static void case_prepare(bk_context *ctx, bk_dtype dt, const prim_case *pc, case_inputs *ci,
                         uint64_t seed) {
  tl_seed(seed);
  for (int j = 0; j < CASE_MAX_IN; j++) {
    ci->in[j] = NULL;
    if (pc->in_len[j] == 0) continue;
    int64_t n = pc->in_len[j] == CASE_EMPTY ? 0 : pc->in_len[j];
    double *v = tl_xmalloc((size_t)n * sizeof *v);
    tl_fill_uniform(v, n, 0.25, 1.25);
    ci->in[j] = tl_buf_on(ctx, dt, v, n);
    free(v);
  }
}

static void case_release(case_inputs *ci) {
  for (int j = 0; j < CASE_MAX_IN; j++) bk_buffer_release(ci->in[j]);
}

static void case_release_outs(bk_buffer **o) {
  for (int j = 0; j < CASE_MAX_OUT; j++) {
    bk_buffer_release(o[j]);
    o[j] = NULL;
  }
}

#endif /* BK_TEST_CASES_H */
