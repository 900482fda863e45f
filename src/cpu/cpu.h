/*
 * cpu.h — the CPU reference backend: the functions its table points to and
 * the element access helpers its families share.
 *
 * The CPU backend is the readable reference. Kernels load elements as double
 * through bk_ld and store through bk_st, so float32 data is accumulated in
 * float64 and every stored value is rounded once to the dtype. Where the
 * contract fixes a fold order in the dtype (scatter-add), the kernel stores
 * after each step: a float sum formed in double and rounded to float is the
 * correctly rounded float sum, so that matches float arithmetic exactly.
 */
#ifndef BK_CPU_H
#define BK_CPU_H

#include "../backend.h"

#include <stdint.h>

static inline double bk_ld(bk_dtype dt, const void *p, int64_t i) {
  return dt == BK_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static inline void bk_st(bk_dtype dt, void *p, int64_t i, double v) {
  if (dt == BK_F32)
    ((float *)p)[i] = (float)v;
  else
    ((double *)p)[i] = v;
}

/* Loops shorter than this many element operations stay on one thread. */
#define BK_CPU_PARALLEL_MIN 32768

/* ---- families (one file each under src/cpu) ------------------------------ */

/* softmax.c */
bk_status bk__cpu_softmax(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,
                          int64_t n, int64_t inner);
/* xent.c */
bk_status bk__cpu_xent_weighted_mean(bk_context *ctx, bk_dtype dt, const void *logits,
                                     const void *w, void *y, int64_t rows, int64_t cols);
bk_status bk__cpu_xent_teacher(bk_context *ctx, bk_dtype dt, const void *S, const void *T,
                               void *y, int64_t rows, int64_t cols, int gradient);
/* conv.c */
bk_status bk__cpu_conv(bk_context *ctx, bk_dtype dt, const void *x, const void *w,
                       const void *bias, void *y, const bk_conv_geom *g);
/* rows.c */
bk_status bk__cpu_rows_sum(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows,
                           int64_t cols);
bk_status bk__cpu_rows_max(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows,
                           int64_t cols);
bk_status bk__cpu_rows_first_max_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                      int64_t rows, int64_t cols);
bk_status bk__cpu_rows_topk_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                 int64_t rows, int64_t cols, int64_t k);
bk_status bk__cpu_rows_masked_softmax(bk_context *ctx, bk_dtype dt, const void *scores,
                                      const void *mask, void *y, int64_t rows, int64_t cols);
/* layout.c */
bk_status bk__cpu_broadcast_col(bk_context *ctx, bk_dtype dt, const void *vec, void *y,
                                int64_t rows, int64_t cols);
bk_status bk__cpu_broadcast_to(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                               const bk_bcast_geom *g);
bk_status bk__cpu_broadcast_to_adjoint(bk_context *ctx, bk_dtype dt, const void *dout,
                                       void *din, const bk_bcast_geom *g);
bk_status bk__cpu_swap_adjacent(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                int64_t outer, int64_t a, int64_t b, int64_t inner);
bk_status bk__cpu_sum_axis(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,
                           int64_t n, int64_t inner);
/* layernorm.c */
bk_status bk__cpu_layernorm_forward(bk_context *ctx, bk_dtype dt, const void *x,
                                    const void *gamma, const void *beta, void *out,
                                    void *normalized, void *inv_std, int64_t rows, int64_t cols,
                                    double eps);
bk_status bk__cpu_layernorm_backward(bk_context *ctx, bk_dtype dt, const void *dout,
                                     const void *normalized, const void *inv_std,
                                     const void *gamma, void *dx, void *dgamma, void *dbeta,
                                     int64_t rows, int64_t cols);
/* bmm.c */
bk_status bk__cpu_bmm(bk_context *ctx, bk_dtype dt, const void *A, const void *B, void *C,
                      int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a, int trans_b);
bk_status bk__cpu_bmm_scaled(bk_context *ctx, bk_dtype dt, const void *A, const void *B, void *C,
                             int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a,
                             int trans_b, double scale, int *range_loss);
/* fft.c */
bk_status bk__cpu_rfft(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t batch,
                       int64_t n);
bk_status bk__cpu_irfft(bk_context *ctx, bk_dtype dt, const void *spec, void *y, int64_t batch,
                        int64_t n, int normalize);
/* scan.c */
bk_status bk__cpu_scan_diag(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                            const void *X, const void *h0, void *y, int64_t seq_len,
                            int64_t state, int var);
bk_status bk__cpu_scan_diag_backward(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                                     const void *X, const void *h0, const void *out,
                                     const void *dy, void *dA, void *dB, void *dX, void *dh0,
                                     int64_t seq_len, int64_t state, int var);
/* gather.c */
bk_status bk__cpu_rows_gather(bk_context *ctx, bk_dtype dt, const void *mat, void *y,
                              int64_t rows, int64_t cols, const uint64_t *idx, int64_t k);
bk_status bk__cpu_rows_scatter_add(bk_context *ctx, bk_dtype dt, const void *mat,
                                   const void *values, void *y, int64_t rows, int64_t cols,
                                   const uint64_t *idx, int64_t k);

#endif /* BK_CPU_H */
