/*
 * test_thread_count.c — every primitive of the CPU backend gives bitwise the
 * same result with 1, 2 and 8 OpenMP threads, and with its outputs written
 * through the cache or streamed past it (the two store paths of the
 * kernels, forced through the backend's test hook).
 *
 * Shapes are small (about 10^5 elements, so the run stays short) but above
 * the size where the kernels go parallel, with extents that split unevenly
 * over 2 and 8 threads, so each call runs in several blocks. The values of
 * each primitive are checked against float64 references by its own test
 * program; here the 1-thread result is the reference, compared bit for bit.
 * Built without OpenMP the program has nothing to compare and is skipped.
 */
#include "testlib.h"
#include "cpu/cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Geometry shared by the cases: (R, C) rows, a rank-3 tensor D3, scans of
 * T steps and S states, FFT lengths of every path. */
enum { R = 389, C = 263, T = 331, S = 301, K = 700, SW = 2053, GL = 100003 };
static const int64_t D3[3] = {7, 131, 113};

#define NIN 6
#define NOUT 4

typedef struct tcase {
  const char *name;
  int64_t len[NIN]; /* input lengths, 0 ends the list */
  int id; /* run_case */
} tcase;

static uint64_t tc_idx[K];
static const uint64_t gl_idx[3] = {3, 7, 0};

static const int64_t tb_in[3] = {1, 131, 113}, tb_out[4] = {3, 7, 131, 113},
                     tb_map[4] = {0, 1, 2, 3};
/* A last axis of 5: blocks of the last axes, 2620 elements each. */
static const int64_t ts_in[3] = {131, 1, 5}, ts_out[4] = {3, 131, 4, 5}, ts_map[4] = {0, 1, 2, 3};

enum {
  T_SOFTMAX_LAST,
  T_SOFTMAX_MID,
  T_SOFTMAX_NARROW,
  T_XENT_W,
  T_XENT_T,
  T_XENT_TG,
  T_XENT_W_NARROW,
  T_XENT_T_NARROW,
  T_XENT_TG_NARROW,
  T_CONV,
  T_ROWS_SUM,
  T_ROWS_MAX,
  T_FIRST_MAX,
  T_TOPK,
  T_TOPK_SORTED,
  T_TOPK_DIRECT,
  T_MASKED,
  T_CONCAT,
  T_SLICE,
  T_BCOL,
  T_BTO,
  T_BTO_SHORT,
  T_BADJ,
  T_SWAP,
  T_SUM_AXIS,
  T_LN_F,
  T_LN_F_NARROW,
  T_MASKED_NARROW,
  T_LN_B,
  T_BMM,
  T_BMM_S,
  T_RFFT,
  T_RFFT_BLUE,
  T_RFFT_PRIMES,
  T_IRFFT_MIXED,
  T_IRFFT,
  T_IRFFT_U,
  T_SCAN,
  T_SCAN_B,
  T_SCAN_V,
  T_SCAN_VB,
  T_SCAN_WIDE,
  T_GATHER,
  T_GATHER_LONG,
  T_SCATTER,
};

static const int64_t d_narrow[2] = {R * C / 3, 3};
static const int64_t in_dims[3] = {9, 8, 1500}, k_dims[3] = {8, 8, 5};
static const int64_t stride[1] = {1}, pb[1] = {3}, pa[1] = {1}, dil[1] = {2};

/* Calls case `id` on c with inputs i; outputs go to o. */
static bk_status run_case(int id, bk_context *c, bk_buffer *const *i, bk_buffer **o) {
  int flag = 0; /* bk_bmm_scaled's range-loss flag, not compared */
  switch (id) {
    case T_SOFTMAX_LAST:
      return bk_softmax(c, i[0], D3, 3, 2, &o[0]);
    case T_SOFTMAX_MID:
      return bk_softmax(c, i[0], D3, 3, 1, &o[0]);
    case T_SOFTMAX_NARROW:
      return bk_softmax(c, i[0], d_narrow, 2, 1, &o[0]);
    case T_XENT_W:
      return bk_xent_weighted_mean(c, i[0], i[1], R, C, &o[0]);
    case T_XENT_T:
      return bk_xent_teacher(c, i[0], i[1], R, C, 0, &o[0]);
    case T_XENT_TG:
      return bk_xent_teacher(c, i[0], i[1], R, C, 1, &o[0]);
    case T_XENT_W_NARROW:
      return bk_xent_weighted_mean(c, i[0], i[1], R * C / 3, 3, &o[0]);
    case T_XENT_T_NARROW:
      return bk_xent_teacher(c, i[0], i[1], R * C / 5, 5, 0, &o[0]);
    case T_XENT_TG_NARROW:
      return bk_xent_teacher(c, i[0], i[1], R * C / 5, 5, 1, &o[0]);
    case T_CONV:
      return bk_conv(c, i[0], i[1], i[2], in_dims, 3, k_dims, 1, stride, pb, pa, dil, 2, &o[0]);
    case T_ROWS_SUM:
      return bk_rows_sum(c, i[0], R, C, &o[0]);
    case T_ROWS_MAX:
      return bk_rows_max(c, i[0], R, C, &o[0]);
    case T_FIRST_MAX:
      return bk_rows_first_max_mask(c, i[0], R, C, &o[0]);
    case T_TOPK:
      return bk_rows_topk_mask(c, i[0], R, C, 17, &o[0]);
    case T_TOPK_SORTED:
      return bk_rows_topk_mask(c, i[0], R, C, 100, &o[0]);
    case T_TOPK_DIRECT:
      return bk_rows_topk_mask(c, i[0], R * C / 40, 40, 5, &o[0]);
    case T_MASKED:
      return bk_rows_masked_softmax(c, i[0], i[1], R, C, &o[0]);
    case T_CONCAT:
      return bk_vec_concat(c, i[0], i[1], R * C, R * C, &o[0]);
    case T_SLICE:
      return bk_vec_slice(c, i[0], R * C, 11, R * C - 20, &o[0]);
    case T_BCOL:
      return bk_broadcast_col(c, i[0], R, C, &o[0]);
    case T_BTO:
      return bk_broadcast_to(c, i[0], tb_in, 3, tb_out, 4, tb_map, &o[0]);
    case T_BTO_SHORT:
      return bk_broadcast_to(c, i[0], ts_in, 3, ts_out, 4, ts_map, &o[0]);
    case T_BADJ:
      return bk_broadcast_to_adjoint(c, i[0], tb_in, 3, tb_out, 4, tb_map, &o[0]);
    case T_SWAP:
      return bk_swap_adjacent(c, i[0], D3, 3, 1, &o[0]);
    case T_SUM_AXIS:
      return bk_sum_axis(c, i[0], D3, 3, 1, &o[0]);
    case T_LN_F:
      return bk_layernorm_forward(c, i[0], i[1], i[2], R, C, 1e-5, &o[0], &o[1], &o[2]);
    case T_LN_F_NARROW:
      return bk_layernorm_forward(c, i[0], i[1], i[2], R * C / 5, 5, 1e-5, &o[0], &o[1], &o[2]);
    case T_MASKED_NARROW:
      return bk_rows_masked_softmax(c, i[0], i[1], R * C / 7, 7, &o[0]);
    case T_LN_B:
      return bk_layernorm_backward(c, i[0], i[1], i[2], i[3], R, C, &o[0], &o[1], &o[2]);
    case T_BMM:
      return bk_bmm(c, i[0], i[1], 5, 37, 41, 43, 0, 1, &o[0]);
    case T_BMM_S:
      return bk_bmm_scaled(c, i[0], i[1], 5, 37, 41, 43, 1, 0, 0.5, &o[0], &flag);
    case T_RFFT:
      return bk_rfft(c, i[0], 97, 1000, &o[0]);
    case T_RFFT_BLUE:
      return bk_rfft(c, i[0], 97, 1009, &o[0]);
    case T_RFFT_PRIMES:
      return bk_rfft(c, i[0], 3, 11 * 13, &o[0]);
    case T_IRFFT_MIXED:
      return bk_irfft(c, i[0], 3, 2 * 3 * 7 * 11 * 13, &o[0]);
    case T_IRFFT:
      return bk_irfft(c, i[0], 97, 1001, &o[0]);
    case T_IRFFT_U:
      return bk_irfft_unnormalized(c, i[0], 97, 1000, &o[0]);
    case T_SCAN:
      return bk_scan_diag(c, i[0], i[1], i[2], i[3], T, S, &o[0]);
    case T_SCAN_B:
      return bk_scan_diag_backward(c, i[0], i[1], i[2], i[3], i[4], i[5], T, S, &o[0], &o[1], &o[2],
                                 &o[3]);
    case T_SCAN_V:
      return bk_scan_diag_var(c, i[0], i[1], i[2], i[3], T, S, &o[0]);
    case T_SCAN_VB:
      return bk_scan_diag_var_backward(c, i[0], i[1], i[2], i[3], i[4], i[5], T, S, &o[0], &o[1],
                                     &o[2], &o[3]);
    case T_SCAN_WIDE:
      return bk_scan_diag_var(c, i[0], i[1], i[2], i[3], 5, SW, &o[0]);
    case T_GATHER:
      return bk_rows_gather(c, i[0], R, C, tc_idx, K, &o[0]);
    case T_GATHER_LONG:
      return bk_rows_gather(c, i[0], 5, GL, gl_idx, 3, &o[0]);
    case T_SCATTER:
      return bk_rows_scatter_add(c, i[0], i[1], R, C, tc_idx, K, &o[0]);
    default:
      return BK_ERR_INVALID_ARGUMENT;
  }
}

static const tcase tcases[] = {
    {"softmax (last axis)", {7 * 131 * 113}, T_SOFTMAX_LAST},
    {"softmax (middle axis)", {7 * 131 * 113}, T_SOFTMAX_MID},
    {"softmax (3 columns)", {R * C / 3 * 3}, T_SOFTMAX_NARROW},
    {"xent_weighted_mean", {R * C, R * C}, T_XENT_W},
    {"xent_teacher", {R * C, R * C}, T_XENT_T},
    {"xent_teacher gradient", {R * C, R * C}, T_XENT_TG},
    {"xent_weighted_mean (3 columns)", {R * C / 3 * 3, R * C / 3 * 3}, T_XENT_W_NARROW},
    {"xent_teacher (5 columns)", {R * C / 5 * 5, R * C / 5 * 5}, T_XENT_T_NARROW},
    {"xent_teacher gradient (5 columns)", {R * C / 5 * 5, R * C / 5 * 5}, T_XENT_TG_NARROW},
    {"conv", {9 * 8 * 1500, 8 * 8 * 5, 8}, T_CONV},
    {"rows_sum", {R * C}, T_ROWS_SUM},
    {"rows_max", {R * C}, T_ROWS_MAX},
    {"rows_first_max_mask", {R * C}, T_FIRST_MAX},
    {"rows_topk_mask (selected)", {R * C}, T_TOPK},
    {"rows_topk_mask (sorted)", {R * C}, T_TOPK_SORTED},
    {"rows_topk_mask (direct)", {R * C / 40 * 40}, T_TOPK_DIRECT},
    {"rows_masked_softmax", {R * C, R * C}, T_MASKED},
    {"vec_concat", {R * C, R * C}, T_CONCAT},
    {"vec_slice", {R * C}, T_SLICE},
    {"broadcast_col", {R}, T_BCOL},
    {"broadcast_to", {131 * 113}, T_BTO},
    {"broadcast_to (short last axis)", {131 * 5}, T_BTO_SHORT},
    {"broadcast_to_adjoint", {3 * 7 * 131 * 113}, T_BADJ},
    {"swap_adjacent", {7 * 131 * 113}, T_SWAP},
    {"sum_axis", {7 * 131 * 113}, T_SUM_AXIS},
    {"layernorm_forward", {R * C, C, C}, T_LN_F},
    {"layernorm_forward (5 columns)", {R * C / 5 * 5, 5, 5}, T_LN_F_NARROW},
    {"rows_masked_softmax (7 columns)", {R * C / 7 * 7, R * C / 7 * 7}, T_MASKED_NARROW},
    {"layernorm_backward", {R * C, R * C, R, C}, T_LN_B},
    {"bmm", {5 * 37 * 41, 5 * 43 * 41}, T_BMM},
    {"bmm_scaled", {5 * 41 * 37, 5 * 41 * 43}, T_BMM_S},
    {"rfft", {97 * 1000}, T_RFFT},
    {"rfft (Bluestein)", {97 * 1009}, T_RFFT_BLUE},
    /* Three rows: one to three transforms side by side as the thread count
     * changes, each generic prime radix with 1, 2, 3 and more sequences. */
    {"rfft (prime radices)", {3 * 11 * 13}, T_RFFT_PRIMES},
    {"irfft (radices 3, 7, 11, 13)", {3 * 2 * (3 * 7 * 11 * 13 + 1)}, T_IRFFT_MIXED},
    {"irfft", {97 * 501 * 2}, T_IRFFT},
    {"irfft_unnormalized", {97 * 501 * 2}, T_IRFFT_U},
    {"scan_diag", {S, S, T * S, S}, T_SCAN},
    {"scan_diag_backward", {S, S, T * S, S, T * S, T * S}, T_SCAN_B},
    {"scan_diag_var", {T * S, T * S, T * S, S}, T_SCAN_V},
    {"scan_diag_var_backward", {T * S, T * S, T * S, S, T * S, T * S}, T_SCAN_VB},
    /* Wide enough that the output streams at 1 and 2 threads (blocks of
     * 2 KiB and more per row) and not at 8. */
    {"scan_diag_var (wide rows)", {5 * SW, 5 * SW, 5 * SW, SW}, T_SCAN_WIDE},
    {"rows_gather", {R * C}, T_GATHER},
    /* Past the size at which the gather is shared among the threads, in
     * byte ranges that cut rows (one index out of range). */
    {"rows_gather (long rows)", {5 * GL}, T_GATHER_LONG},
    {"rows_scatter_add", {R * C, K * C}, T_SCATTER},
};
#define NCASES ((int)(sizeof tcases / sizeof tcases[0]))

/* Runs case tc with `threads` threads (stream: every output streams);
 * out[] receives its outputs. */
static bk_status run_with(const tcase *tc, bk_buffer *const *in, int threads, int stream,
                          bk_buffer **out) {
#ifdef _OPENMP
  omp_set_num_threads(threads);
#else
  (void)threads;
#endif
  size_t old = bk__cpu_set_stream_bytes(tl_ctx, stream ? 0 : SIZE_MAX);
  bk_status st = run_case(tc->id, tl_ctx, in, out);
  bk__cpu_set_stream_bytes(tl_ctx, old);
  return st;
}

static void thread_counts(void) {
  for (int64_t i = 0; i < K; i++) tc_idx[i] = (uint64_t)((i * 7919) % (R + 13)); /* some >= R */
  for (int d = 0; d < TL_DTYPES; d++) {
    const bk_dtype dt = tl_dtypes[d];
    for (int c = 0; c < NCASES; c++) {
      const tcase *tc = &tcases[c];
      bk_buffer *in[NIN] = {NULL};
      tl_seed(1000 + (uint64_t)c);
      for (int j = 0; j < NIN && tc->len[j]; j++) {
        double *v = tl_xmalloc((size_t)tc->len[j] * sizeof *v);
        /* Positive values keep inv_std and the masks meaningful; a few
         * exact zeros make the masks block entries. */
        tl_fill_uniform(v, tc->len[j], 0.25, 1.25);
        for (int64_t e = 0; e < tc->len[j]; e += 7) v[e] = j == 1 ? 0.0 : v[e];
        in[j] = tl_buf(dt, v, tc->len[j]);
        free(v);
      }
      bk_buffer *ref[NOUT] = {NULL};
      bk_status st = run_with(tc, in, 1, 0, ref);
      TL_CHECK(st == BK_OK, "%s (%s): %s", tc->name, tl_dtname(dt), bk_last_error());
      static const int variants[4][2] = {{2, 0}, {8, 0}, {1, 1}, {8, 1}};
      for (int v = 0; v < 4 && st == BK_OK; v++) {
        bk_buffer *got[NOUT] = {NULL};
        bk_status st2 = run_with(tc, in, variants[v][0], variants[v][1], got);
        TL_CHECK(st2 == BK_OK, "%s (%s): %s", tc->name, tl_dtname(dt), bk_last_error());
        for (int k = 0; k < NOUT && st2 == BK_OK && ref[k]; k++)
          TL_CHECK(tl_same_bits(ref[k], got[k]),
                   "%s (%s): output %d with %d threads%s differs from 1 thread", tc->name,
                   tl_dtname(dt), k, variants[v][0], variants[v][1] ? ", streamed" : "");
        for (int k = 0; k < NOUT; k++) bk_buffer_release(got[k]);
      }
      for (int k = 0; k < NOUT; k++) bk_buffer_release(ref[k]);
      for (int j = 0; j < NIN; j++) bk_buffer_release(in[j]);
    }
  }
}

int main(void) {
  tl_init();
  if (tl_dev.kind != BK_DEVICE_CPU) tl_skip("the thread-count test is for the CPU backend");
#ifndef _OPENMP
  tl_skip("built without OpenMP: one thread only, nothing to compare");
#endif
  TL_RUN(thread_counts);
  return tl_finish();
}
