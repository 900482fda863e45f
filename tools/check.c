/*
 * check.c — `bufkern check`: conformance tables. Every worked example
 * of the contract (docs/CONTRACT.md, sections numbered like the header's;
 * the values repeated below) runs on the
 * chosen device in float32 and float64 and is compared with its expected
 * values; on a GPU each result is also compared with the CPU backend's.
 * Primitives for which the contract gives no example get a small one that
 * follows directly from the header's rules (marked "header" below).
 *
 * Tolerances: masks, gathers, broadcasts, swaps and top-k are exact (the
 * contract says so), compared bit for bit (NaN matches NaN, -inf -inf).
 * Other values are compared by |got - want| <= tol * max(1, max|want|)
 * with tol = 1e-5 in float32 and 2e-6 in float64 (the contract's values
 * carry about 7 digits). Against the CPU backend: tol 1e-5 (float32) and
 * 1e-12 (float64) on the same scale, exact cases bit for bit.
 */
#include "bufkern.h"
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CK_MAX_OUT = 4, CK_MAX_IN = 6 };

/* A case's inputs as host doubles, converted to the dtype when uploaded. */
typedef struct ck_in {
  const double *v;
  int64_t n;
} ck_in;

/* One example: a call of one primitive on fixed inputs and the values
 * every one of its outputs must take. */
typedef struct ck_case {
  const char *prim;
  const char *source; /* "ex. 3.x" (docs/CONTRACT.md) or "header" */
  bk_status (*run)(bk_context *ctx, bk_buffer *const *in, bk_buffer **out);
  ck_in in[CK_MAX_IN];
  const double *want[CK_MAX_OUT];
  int64_t want_n[CK_MAX_OUT];
  int exact;
} ck_case;

#define IN(arr) {arr, (int64_t)(sizeof arr / sizeof arr[0])}
#define WANT(arr) arr
#define WANT_N(arr) (int64_t)(sizeof arr / sizeof arr[0])

/* ---- the calls -------------------------------------------------------------------- */

static const int64_t d23[2] = {2, 3}, d234[3] = {2, 3, 4};
static const int64_t one[1] = {1};

static bk_status r_softmax(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_softmax(c, i[0], d23, 2, 1, &o[0]);
}
static bk_status r_xent_w(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_xent_weighted_mean(c, i[0], i[1], 2, 3, &o[0]);
}
static bk_status r_xent_t(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_xent_teacher(c, i[0], i[1], 2, 3, 0, &o[0]);
}
static bk_status r_xent_tg(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_xent_teacher(c, i[0], i[1], 2, 3, 1, &o[0]);
}
static bk_status r_conv(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  static const int64_t in_dims[2] = {2, 4}, k_dims[3] = {2, 2, 2};
  static const int64_t dil[1] = {2}, before[1] = {1}, after[1] = {0};
  return bk_conv(c, i[0], i[1], i[2], in_dims, 2, k_dims, 1, one, before, after, dil, 2, &o[0]);
}
static bk_status r_rows_sum(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_rows_sum(c, i[0], 2, 3, &o[0]);
}
static bk_status r_rows_max(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_rows_max(c, i[0], 2, 3, &o[0]);
}
static bk_status r_first_max(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_rows_first_max_mask(c, i[0], 1, 4, &o[0]);
}
static bk_status r_topk2(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_rows_topk_mask(c, i[0], 1, 4, 2, &o[0]);
}
static bk_status r_topk3(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_rows_topk_mask(c, i[0], 1, 4, 3, &o[0]);
}
static bk_status r_topk_nan2(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_rows_topk_mask(c, i[0], 1, 3, 2, &o[0]);
}
static bk_status r_topk_nan1(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_rows_topk_mask(c, i[0], 1, 3, 1, &o[0]);
}
static bk_status r_masked(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_rows_masked_softmax(c, i[0], i[1], 2, 2, &o[0]);
}
static bk_status r_concat(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_vec_concat(c, i[0], i[1], 2, 3, &o[0]);
}
static bk_status r_slice(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_vec_slice(c, i[0], 6, 2, 3, &o[0]);
}
static bk_status r_bcol(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_broadcast_col(c, i[0], 2, 3, &o[0]);
}
static const int64_t bt_in[4] = {2, 1, 3, 2}, bt_out[4] = {2, 4, 3, 2}, bt_map[4] = {1, 2, 3, 4};
static bk_status r_bto(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_broadcast_to(c, i[0], bt_in, 4, bt_out, 4, bt_map, &o[0]);
}
static bk_status r_bto_adj(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_broadcast_to_adjoint(c, i[0], bt_in, 4, bt_out, 4, bt_map, &o[0]);
}
static bk_status r_swap(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_swap_adjacent(c, i[0], d234, 3, 1, &o[0]);
}
static bk_status r_sum_axis(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_sum_axis(c, i[0], d234, 3, 2, &o[0]);
}
static bk_status r_ln_fwd(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  bk_buffer *norm = NULL;
  bk_status st = bk_layernorm_forward(c, i[0], i[1], i[2], 2, 4, 1e-5, &o[0], &norm, &o[1]);
  bk_buffer_release(norm);
  return st;
}
static bk_status r_ln_bwd(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  bk_buffer *y = NULL, *norm = NULL, *inv_std = NULL;
  bk_status st = bk_layernorm_forward(c, i[0], i[1], i[2], 2, 4, 1e-5, &y, &norm, &inv_std);
  if (st == BK_OK)
    st = bk_layernorm_backward(c, i[3], norm, inv_std, i[1], 2, 4, &o[0], &o[1], &o[2]);
  bk_buffer_release(y);
  bk_buffer_release(norm);
  bk_buffer_release(inv_std);
  return st;
}
static bk_status r_bmm(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_bmm(c, i[0], i[1], 1, 2, 2, 2, 0, 0, &o[0]);
}
static bk_status r_bmm_tt(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_bmm(c, i[0], i[1], 1, 2, 2, 2, 1, 1, &o[0]);
}
static bk_status r_bmm_scaled(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  int lost = -1;
  bk_status st = bk_bmm_scaled(c, i[0], i[1], 1, 1, 1, 1, 0, 0, 1e-30, &o[0], &lost);
  if (st != BK_OK) return st;
  /* The flag becomes a second output, so it is compared like the values. */
  const double flag = lost;
  if (bk_buffer_dtype(o[0]) == BK_F64) return bk_buffer_from_host(c, BK_F64, &flag, 1, &o[1]);
  const float flag32 = (float)lost;
  return bk_buffer_from_host(c, BK_F32, &flag32, 1, &o[1]);
}
static bk_status r_rfft(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_rfft(c, i[0], 2, 4, &o[0]);
}
static bk_status r_irfft(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_irfft(c, i[0], 1, 4, &o[0]);
}
static bk_status r_irfft_u(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_irfft_unnormalized(c, i[0], 1, 4, &o[0]);
}
static bk_status r_scan(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_scan_diag(c, i[0], i[1], i[2], i[3], 3, 2, &o[0]);
}
static bk_status r_scan_bwd(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  bk_buffer *h = NULL;
  bk_status st = bk_scan_diag(c, i[0], i[1], i[2], i[3], 3, 2, &h);
  if (st == BK_OK)
    st = bk_scan_diag_backward(c, i[0], i[1], i[2], i[3], h, i[4], 3, 2, &o[0], &o[1], &o[2],
                               &o[3]);
  bk_buffer_release(h);
  return st;
}
static bk_status r_scan_var(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_scan_diag_var(c, i[0], i[1], i[2], i[3], 3, 2, &o[0]);
}
static bk_status r_scan_var_bwd(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  bk_buffer *h = NULL;
  bk_status st = bk_scan_diag_var(c, i[0], i[1], i[2], i[3], 3, 2, &h);
  if (st == BK_OK)
    st = bk_scan_diag_var_backward(c, i[0], i[1], i[2], i[3], h, i[4], 3, 2, &o[0], &o[1],
                                   &o[2], &o[3]);
  bk_buffer_release(h);
  return st;
}
static const uint64_t gather_idx[3] = {2, 0, 7}, scatter_idx[3] = {1, 1, 7};
static bk_status r_gather(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_rows_gather(c, i[0], 3, 2, gather_idx, 3, &o[0]);
}
static bk_status r_scatter(bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  return bk_rows_scatter_add(c, i[0], i[1], 3, 2, scatter_idx, 3, &o[0]);
}

/* ---- the values ---------------------------------------------------------------------- */

static const double sm_x[] = {0.10, -0.20, 0.30, 0.05, 0.25, -0.15};
static const double sm_y[] = {0.3375845, 0.2500888, 0.4123267, 0.3289329, 0.4017596, 0.2693075};

static const double xe_s[] = {1, 2, 3, 0.5, -0.5, 0};
static const double xe_w[] = {0, 0, 1, 0.2, 0.3, 0.5};
static const double xe_wl[] = {0.8189378};
static const double xe_t[] = {3, 2, 1, 0, 0, 0};
static const double xe_tl[] = {1.5815430};
static const double xe_tg[] = {-0.2876052, 0, 0.2876052, 0.0865735, -0.0735048, -0.0130687};

static const double cv_x[] = {1, 2, 3, 4, 10, 20, 30, 40};
static const double cv_w[] = {1, -1, 100, 100, 7, 7, 0.5, 2};
static const double cv_b[] = {0, 1};
static const double cv_y[] = {-2, -2, -2, 41, 66, 91};

static const double rs_x[] = {1, 2, 3, 4, 5, 6};
static const double rs_y[] = {6, 15};
static const double rm_x[] = {1, NAN, 3, NAN, NAN, NAN};
static const double rm_y[] = {3, -INFINITY};

static const double mk_x[] = {3, 1, 3, 2};
static const double mk_first[] = {1, 0, 0, 0};
static const double mk_k2[] = {1, 0, 1, 0};
static const double mk_k3[] = {1, 0, 1, 1};
static const double mk_nan[] = {1, NAN, 2};
static const double mk_nan2[] = {1, 1, 1};
static const double mk_nan1[] = {0, 0, 0};

static const double ms_s[] = {1000, -1000, 3, 4};
static const double ms_m[] = {0, 1, 0, 0};
static const double ms_y[] = {0, 1, 0, 0};

static const double vc_a[] = {1, 2};
static const double vc_b[] = {3, 4, 5};
static const double vc_y[] = {1, 2, 3, 4, 5};
static const double vs_x[] = {0, 1, 2, 3, 4, 5};
static const double vs_y[] = {2, 3, 4};
static const double bc_v[] = {1, 2};
static const double bc_y[] = {1, 1, 1, 2, 2, 2};

static const double iota12[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
static const double bt_y[] = {0, 1, 2, 3, 4, 5,  0, 1, 2, 3, 4, 5,  0, 1, 2, 3, 4, 5,
                              0, 1, 2, 3, 4, 5,  6, 7, 8, 9, 10, 11, 6, 7, 8, 9, 10, 11,
                              6, 7, 8, 9, 10, 11, 6, 7, 8, 9, 10, 11};
static const double ones48[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const double fours12[] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
static const double iota24[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};
static const double sw_y[] = {0,  4,  8,  1,  5,  9,  2,  6,  10, 3,  7,  11,
                              12, 16, 20, 13, 17, 21, 14, 18, 22, 15, 19, 23};
static const double sa_y[] = {6, 22, 38, 54, 70, 86};

static const double ln_x[] = {0.1, 0.2, 0, -0.1, -0.3, 0.5, 0.2, 0.1};
static const double ln_g[] = {1, 0.9, 1.1, 1};
static const double ln_b[] = {0, 0.1, -0.1, 0};
static const double ln_ones[] = {1, 1, 1, 1, 1, 1, 1, 1};
static const double ln_y[] = {0.447035,  1.306994, -0.591738, -1.341104,
                              -1.485206, 1.279428, 0.188305,  -0.087365};
static const double ln_is[] = {8.940696, 3.494603};
static const double ln_dx[] = {0.178671,  -0.358057, 0.715399, -0.536013,
                               -0.136033, -0.229431, 0.373466, -0.008002};
static const double ln_dg[] = {-1.038171, 2.651581, -0.184940, -1.428470};
static const double ln_db[] = {2, 2, 2, 2};

static const double mm_a[] = {1, 2, 3, 4};
static const double mm_b[] = {5, 6, 7, 8};
static const double mm_y[] = {19, 22, 43, 50};
static const double mm_ytt[] = {23, 31, 34, 46};
static const double big[] = {1e30};
static const double bs_flag[] = {0};

static const double ff_x[] = {1, 0, 0, 0, 1, 2, 3, 4};
static const double ff_y[] = {1, 0, 1, 0, 1, 0, 10, 0, -2, 2, -2, 0};
static const double ff_spec[] = {10, 0, -2, 2, -2, 0};
static const double ff_inv[] = {1, 2, 3, 4};
static const double ff_unn[] = {4, 8, 12, 16};

static const double sc_A[] = {0.5, 0.25};
static const double sc_B[] = {1, 2};
static const double sc_h0[] = {1, -1};
static const double sc_X[] = {2, 1, 4, -2, 0, 3};
static const double sc_ones[] = {1, 1, 1, 1, 1, 1};
static const double sc_y[] = {2.5, 1.75, 5.25, -3.5625, 2.625, 5.109375};
static const double sc_dA[] = {10.75, -2.6875};
static const double sc_dB[] = {9.5, 1.8125};
static const double sc_dX[] = {1.75, 2.625, 1.5, 2.5, 1, 2};
static const double sc_dh0[] = {0.875, 0.328125};
static const double sv_A[] = {0.5, 0.25, 0.1, 0.75, -1, 0.2};
static const double sv_B[] = {1, 2, 0.5, -1, 0.25, 0.5};
static const double sv_y[] = {2.5, 1.75, 2.25, 3.3125, -2.25, 2.1625};
static const double sv_dA[] = {1, -1.9, 0, 2.1, 2.25, 3.3125};
static const double sv_dB[] = {2, 1.9, 0, -2.4, 0, 3};
static const double sv_dX[] = {1, 3.8, 0, -1.2, 0.25, 0.5};
static const double sv_dh0[] = {0.5, 0.475};

static const double gs_mat[] = {1, 2, 3, 4, 5, 6};
static const double ga_y[] = {5, 6, 1, 2, 0, 0};
static const double sa_v[] = {0.25, -0.5, 1, 1, 9, 9};
static const double sca_y[] = {1, 2, 4.25, 4.5, 5, 6};

#define W1(a) {WANT(a)}, {WANT_N(a)}
#define W2(a, b) {WANT(a), WANT(b)}, {WANT_N(a), WANT_N(b)}
#define W3(a, b, c) {WANT(a), WANT(b), WANT(c)}, {WANT_N(a), WANT_N(b), WANT_N(c)}
#define W4(a, b, c, d) {WANT(a), WANT(b), WANT(c), WANT(d)}, \
                       {WANT_N(a), WANT_N(b), WANT_N(c), WANT_N(d)}

static const ck_case cases[] = {
    {"bk_softmax", "ex. 3.1", r_softmax, {IN(sm_x)}, W1(sm_y), 0},
    {"bk_xent_weighted_mean", "ex. 3.2", r_xent_w, {IN(xe_s), IN(xe_w)}, W1(xe_wl), 0},
    {"bk_xent_teacher", "ex. 3.3", r_xent_t, {IN(xe_s), IN(xe_t)}, W1(xe_tl), 0},
    {"bk_xent_teacher", "ex. 3.3", r_xent_tg, {IN(xe_s), IN(xe_t)}, W1(xe_tg), 0},
    {"bk_conv", "ex. 3.4", r_conv, {IN(cv_x), IN(cv_w), IN(cv_b)}, W1(cv_y), 0},
    {"bk_rows_sum", "header", r_rows_sum, {IN(rs_x)}, W1(rs_y), 0},
    {"bk_rows_max", "header", r_rows_max, {IN(rm_x)}, W1(rm_y), 1},
    {"bk_rows_first_max_mask", "ex. 3.5", r_first_max, {IN(mk_x)}, W1(mk_first), 1},
    {"bk_rows_topk_mask", "ex. 3.5", r_topk2, {IN(mk_x)}, W1(mk_k2), 1},
    {"bk_rows_topk_mask", "ex. 3.5", r_topk3, {IN(mk_x)}, W1(mk_k3), 1},
    {"bk_rows_topk_mask", "ex. 3.5", r_topk_nan2, {IN(mk_nan)}, W1(mk_nan2), 1},
    {"bk_rows_topk_mask", "header", r_topk_nan1, {IN(mk_nan)}, W1(mk_nan1), 1},
    {"bk_rows_masked_softmax", "ex. 3.5", r_masked, {IN(ms_s), IN(ms_m)}, W1(ms_y), 1},
    {"bk_vec_concat", "header", r_concat, {IN(vc_a), IN(vc_b)}, W1(vc_y), 1},
    {"bk_vec_slice", "header", r_slice, {IN(vs_x)}, W1(vs_y), 1},
    {"bk_broadcast_col", "header", r_bcol, {IN(bc_v)}, W1(bc_y), 1},
    {"bk_broadcast_to", "ex. 3.6", r_bto, {IN(iota12)}, W1(bt_y), 1},
    {"bk_broadcast_to_adjoint", "ex. 3.6", r_bto_adj, {IN(ones48)}, W1(fours12), 1},
    {"bk_swap_adjacent", "ex. 3.6", r_swap, {IN(iota24)}, W1(sw_y), 1},
    {"bk_sum_axis", "ex. 3.6", r_sum_axis, {IN(iota24)}, W1(sa_y), 1},
    {"bk_layernorm_forward", "ex. 3.7", r_ln_fwd, {IN(ln_x), IN(ln_g), IN(ln_b)},
     W2(ln_y, ln_is), 0},
    {"bk_layernorm_backward", "ex. 3.7", r_ln_bwd, {IN(ln_x), IN(ln_g), IN(ln_b), IN(ln_ones)},
     W3(ln_dx, ln_dg, ln_db), 0},
    {"bk_bmm", "header", r_bmm, {IN(mm_a), IN(mm_b)}, W1(mm_y), 0},
    {"bk_bmm", "header", r_bmm_tt, {IN(mm_a), IN(mm_b)}, W1(mm_ytt), 0},
    {"bk_bmm_scaled", "ex. 3.8", r_bmm_scaled, {IN(big), IN(big)}, W2(big, bs_flag), 0},
    {"bk_rfft", "ex. 3.9", r_rfft, {IN(ff_x)}, W1(ff_y), 0},
    {"bk_irfft", "ex. 3.9", r_irfft, {IN(ff_spec)}, W1(ff_inv), 0},
    {"bk_irfft_unnormalized", "ex. 3.9", r_irfft_u, {IN(ff_spec)}, W1(ff_unn), 0},
    {"bk_scan_diag", "ex. 3.10", r_scan, {IN(sc_A), IN(sc_B), IN(sc_X), IN(sc_h0)}, W1(sc_y),
     0},
    {"bk_scan_diag_backward", "ex. 3.10", r_scan_bwd,
     {IN(sc_A), IN(sc_B), IN(sc_X), IN(sc_h0), IN(sc_ones)}, W4(sc_dA, sc_dB, sc_dX, sc_dh0), 0},
    {"bk_scan_diag_var", "ex. 3.10", r_scan_var, {IN(sv_A), IN(sv_B), IN(sc_X), IN(sc_h0)},
     W1(sv_y), 0},
    {"bk_scan_diag_var_backward", "ex. 3.10", r_scan_var_bwd,
     {IN(sv_A), IN(sv_B), IN(sc_X), IN(sc_h0), IN(sc_ones)}, W4(sv_dA, sv_dB, sv_dX, sv_dh0), 0},
    {"bk_rows_gather", "header", r_gather, {IN(gs_mat)}, W1(ga_y), 1},
    {"bk_rows_scatter_add", "ex. 3.11", r_scatter, {IN(gs_mat), IN(sa_v)}, W1(sca_y), 1},
};

enum { N_CASES = (int)(sizeof cases / sizeof cases[0]) };

/* ---- running and comparing ------------------------------------------------------------ */

/* Runs a case on ctx in dtype dt; on success out[] holds its results. */
static bk_status run_case(const ck_case *k, bk_context *ctx, bk_dtype dt, bk_buffer **out) {
  bk_buffer *in[CK_MAX_IN] = {NULL};
  bk_status st = BK_OK;
  for (int j = 0; j < CK_MAX_OUT; j++) out[j] = NULL;
  for (int j = 0; j < CK_MAX_IN && k->in[j].v && st == BK_OK; j++) {
    float f[64];
    if (k->in[j].n > 64) {
      st = BK_ERR_INTERNAL; /* the table's inputs are small by construction */
    } else if (dt == BK_F64) {
      st = bk_buffer_from_host(ctx, dt, k->in[j].v, k->in[j].n, &in[j]);
    } else {
      for (int64_t e = 0; e < k->in[j].n; e++) f[e] = (float)k->in[j].v[e];
      st = bk_buffer_from_host(ctx, dt, f, k->in[j].n, &in[j]);
    }
  }
  if (st == BK_OK) st = k->run(ctx, in, out);
  for (int j = 0; j < CK_MAX_IN; j++) bk_buffer_release(in[j]);
  if (st != BK_OK)
    for (int j = 0; j < CK_MAX_OUT; j++) {
      bk_buffer_release(out[j]);
      out[j] = NULL;
    }
  return st;
}

/* Reads an output into v (64 doubles at most); -1 when its length is not n. */
static int read_out(bk_context *ctx, const bk_buffer *b, int64_t n, double *v, bk_status *st) {
  if (!b || bk_buffer_length(b) != n || n > 64) return -1;
  if (bk_buffer_dtype(b) == BK_F64) {
    *st = bk_buffer_to_host(ctx, b, v, n);
  } else {
    float f[64];
    *st = bk_buffer_to_host(ctx, b, f, n);
    for (int64_t i = 0; i < n; i++) v[i] = f[i];
  }
  return *st == BK_OK ? 0 : -1;
}

static int same_value(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return a == b && signbit(a) == signbit(b);
}

/* The largest error of got against want (n values) relative to the scale
 * max(1, max|want|), or, for an exact case, 0 when every value matches and
 * infinity otherwise. */
static double error_of(const double *got, const double *want, int64_t n, int exact) {
  double scale = 1.0, err = 0.0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(want[i])) scale = fmax(scale, fabs(want[i]));
  for (int64_t i = 0; i < n; i++) {
    if (exact || !isfinite(want[i])) {
      if (!same_value(got[i], want[i])) return INFINITY;
      continue;
    }
    const double e = fabs(got[i] - want[i]) / scale;
    err = isnan(e) ? INFINITY : fmax(err, e);
  }
  return err;
}

/* The outcome of one primitive in one dtype, over all its cases. */
typedef struct ck_result {
  int ran, failed, failed_cpu;
  double worst;      /* against the expected values */
  double worst_cpu;  /* against the CPU backend */
} ck_result;

/* Runs one case in one dtype on ctx (and on cpu when given) and folds the
 * outcome into r. */
static void check_case(const ck_case *k, bk_context *ctx, bk_context *cpu, bk_dtype dt,
                       ck_result *r) {
  const double tol = dt == BK_F32 ? 1e-5 : 2e-6;
  const double tol_cpu = dt == BK_F32 ? 1e-5 : 1e-12;
  bk_buffer *out[CK_MAX_OUT], *ref[CK_MAX_OUT] = {NULL};
  double got[64], base[64];
  r->ran++;
  bk_status st = run_case(k, ctx, dt, out);
  if (st == BK_OK && cpu) st = run_case(k, cpu, dt, ref);
  if (st != BK_OK) {
    fprintf(stderr, "  %s (%s, %s): %s: %s\n", k->prim, k->source, dt == BK_F32 ? "f32" : "f64",
            cli_status_name(st), bk_last_error());
    r->failed++;
    r->worst = INFINITY;
    return;
  }
  for (int j = 0; j < CK_MAX_OUT && k->want[j]; j++) {
    double e = INFINITY;
    if (read_out(ctx, out[j], k->want_n[j], got, &st) == 0)
      e = error_of(got, k->want[j], k->want_n[j], k->exact);
    if (!(e <= tol)) r->failed++;
    r->worst = fmax(r->worst, e);
    if (!cpu) continue;
    double ec = INFINITY;
    if (read_out(cpu, ref[j], k->want_n[j], base, &st) == 0)
      ec = error_of(got, base, k->want_n[j], k->exact);
    if (!(ec <= tol_cpu)) r->failed_cpu++;
    r->worst_cpu = fmax(r->worst_cpu, ec);
  }
  if (st != BK_OK) cli_report(st, "reading a result");
  for (int j = 0; j < CK_MAX_OUT; j++) {
    bk_buffer_release(out[j]);
    bk_buffer_release(ref[j]);
  }
}

/* ---- the command ----------------------------------------------------------------------- */

void bk_tool_check_usage(void) {
  printf("usage: bufkern check [--device cpu|cuda:N] [--dtype f32|f64|both]\n\n"
         "Runs every worked example of the contract (docs/CONTRACT.md, sections numbered like\n"
         "the header's) on the device and compares each result with its expected values;\n"
         "primitives without an example there get one that follows from the header's rules\n"
         "(source \"header\"). On a GPU each result is also compared with the CPU backend's.\n"
         "Prints one line per primitive and a summary \"N passed, N failed\"; exits 0 when\n"
         "all pass, 1 otherwise.\n\n"
         "Masks, gathers, broadcasts, swaps and top-k must match exactly; other values within\n"
         "1e-5 (float32) or 2e-6 (float64, the examples' precision) of max(1, max|value|);\n"
         "against the CPU backend within 1e-5 (float32) or 1e-12 (float64).\n\n"
         "options:\n"
         "  --device D   cpu or cuda:N (default: cuda:0 when a GPU is visible, else cpu)\n"
         "  --dtype T    f32, f64 or both (default both)\n");
}

/* Appends "  <text padded to 14>" to a table line. */
static void add_cell(char *line, size_t cap, const char *text) {
  const size_t used = strlen(line);
  snprintf(line + used, cap - used, "  %-14s", text);
}

static void add_result(char *line, size_t cap, const ck_result *r, int cpu) {
  char cell[32];
  const double e = cpu ? r->worst_cpu : r->worst;
  const int bad = cpu ? r->failed_cpu : r->failed;
  snprintf(cell, sizeof cell, "%s %.1e", bad ? "FAIL" : "ok", e);
  add_cell(line, cap, cell);
}

/* Prints a table line without its trailing blanks. */
static void put_line(char *line) {
  size_t n = strlen(line);
  while (n > 0 && line[n - 1] == ' ') line[--n] = '\0';
  printf("%s\n", line);
}

int bk_tool_check(int argc, char **argv) {
  bk_device device = cli_default_device();
  int want_f32 = 1, want_f64 = 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      bk_tool_check_usage();
      return 0;
    } else if (strcmp(a, "--device") == 0 && v) {
      if (!cli_parse_device(v, &device)) {
        fprintf(stderr, "bufkern check: --device takes cpu or cuda:N, not %s\n", v);
        return 2;
      }
      i++;
    } else if (strcmp(a, "--dtype") == 0 && v) {
      want_f32 = strcmp(v, "f32") == 0 || strcmp(v, "both") == 0;
      want_f64 = strcmp(v, "f64") == 0 || strcmp(v, "both") == 0;
      if (!want_f32 && !want_f64) {
        fprintf(stderr, "bufkern check: --dtype takes f32, f64 or both, not %s\n", v);
        return 2;
      }
      i++;
    } else {
      fprintf(stderr, "bufkern check: unknown option or missing value: %s (see bufkern check "
                      "--help)\n", a);
      return 2;
    }
  }

  bk_context *ctx = NULL, *cpu = NULL;
  if (cli_report(bk_context_create(device, &ctx), "creating the device context")) return 1;
  const int on_gpu = device.kind == BK_DEVICE_CUDA;
  if (on_gpu && cli_report(bk_context_create((bk_device){BK_DEVICE_CPU, 0}, &cpu),
                           "creating the CPU context")) {
    bk_context_destroy(ctx);
    return 1;
  }
  char dev[32];
  printf("bufkern check on %s: the contract's examples of every primitive%s\n\n",
         cli_device_text(device, dev, sizeof dev), on_gpu ? ", and the CPU backend" : "");
  char line[256];
  snprintf(line, sizeof line, "%-27s %-5s %-9s", "primitive", "cases", "source");
  if (want_f32) add_cell(line, sizeof line, "f32");
  if (want_f32 && on_gpu) add_cell(line, sizeof line, "f32 vs cpu");
  if (want_f64) add_cell(line, sizeof line, "f64");
  if (want_f64 && on_gpu) add_cell(line, sizeof line, "f64 vs cpu");
  put_line(line);

  int passed = 0, failed = 0;
  for (int c = 0; c < N_CASES;) {
    /* The cases of one primitive are adjacent in the table. */
    int end = c + 1;
    while (end < N_CASES && strcmp(cases[end].prim, cases[c].prim) == 0) end++;
    ck_result r32 = {0, 0, 0, 0.0, 0.0}, r64 = {0, 0, 0, 0.0, 0.0};
    int from_spec = 0;
    for (int k = c; k < end; k++) {
      from_spec |= strncmp(cases[k].source, "ex. ", 4) == 0;
      if (want_f32) check_case(&cases[k], ctx, cpu, BK_F32, &r32);
      if (want_f64) check_case(&cases[k], ctx, cpu, BK_F64, &r64);
    }
    snprintf(line, sizeof line, "%-27s %-5d %-9s", cases[c].prim, end - c,
             from_spec ? cases[c].source : "header");
    if (want_f32) add_result(line, sizeof line, &r32, 0);
    if (want_f32 && on_gpu) add_result(line, sizeof line, &r32, 1);
    if (want_f64) add_result(line, sizeof line, &r64, 0);
    if (want_f64 && on_gpu) add_result(line, sizeof line, &r64, 1);
    put_line(line);
    if (r32.failed || r32.failed_cpu || r64.failed || r64.failed_cpu)
      failed++;
    else
      passed++;
    c = end;
  }
  printf("\n%d passed, %d failed\n", passed, failed);
  bk_context_destroy(cpu);
  bk_context_destroy(ctx);
  return failed ? 1 : 0;
}
