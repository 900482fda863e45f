/*
 * attention.c — one causal attention head, forward and backward, composed
 * only from public primitives:
 *   S  = bk_bmm_scaled(Q, K^T, 1/sqrt(d))   (with its range-loss flag)
 *   P  = bk_rows_masked_softmax(S, causal)
 *   O  = bk_bmm(P, V)
 * and the backward
 *   dV = P^T dO,  dP = dO V^T,  dS = softmax VJP(P, dP),
 *   dQ = scale dS K,  dK = scale dS^T Q.
 */
#include "examples.h"

#include <math.h>
#include <stdlib.h>

bk_status ex_attention_init(bk_context *ctx, bk_dtype dtype, int64_t T, int64_t d,
                            ex_attention *att) {
  att->T = T;
  att->d = d;
  att->scale = 1.0 / sqrt((double)d);
  att->P = NULL;
  att->mask = NULL;
  att->range_loss = 0;
  double *m = malloc((size_t)(T * T > 0 ? T * T : 1) * sizeof *m);
  if (!m) return BK_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < T; j++) m[i * T + j] = j <= i ? 1.0 : 0.0;
  bk_status st = ex_from_doubles(ctx, dtype, m, T * T, &att->mask);
  free(m);
  return st;
}

void ex_attention_free(ex_attention *att) {
  bk_buffer_release(att->mask);
  bk_buffer_release(att->P);
  att->mask = att->P = NULL;
}

bk_status ex_attention_forward(bk_context *ctx, ex_attention *att, const bk_buffer *Q,
                               const bk_buffer *K, const bk_buffer *V, bk_buffer **O) {
  int64_t T = att->T, d = att->d;
  bk_buffer *S = NULL;
  bk_buffer_release(att->P);
  att->P = NULL;
  bk_status st = bk_bmm_scaled(ctx, Q, K, 1, T, d, T, 0, 1, att->scale, &S, &att->range_loss);
  if (st == BK_OK) st = bk_rows_masked_softmax(ctx, S, att->mask, T, T, &att->P);
  if (st == BK_OK) st = bk_bmm(ctx, att->P, V, 1, T, T, d, 0, 0, O);
  bk_buffer_release(S);
  return st;
}

bk_status ex_softmax_vjp(bk_context *ctx, const bk_buffer *P, const bk_buffer *dP, int64_t rows,
                         int64_t cols, bk_buffer **dS) {
  bk_buffer *s = NULL, *sb = NULL, *diff = NULL;
  /* s[r] = sum_c dP[r,c] P[r,c]: a batch of rows (1, cols) x (cols, 1) products. */
  bk_status st = bk_bmm(ctx, dP, P, rows, 1, cols, 1, 0, 0, &s);
  if (st == BK_OK) st = bk_broadcast_col(ctx, s, rows, cols, &sb);
  if (st == BK_OK) st = ex_axpby(ctx, 1.0, dP, -1.0, sb, rows * cols, &diff);
  if (st == BK_OK) st = ex_mul(ctx, P, diff, rows * cols, dS);
  bk_buffer_release(s);
  bk_buffer_release(sb);
  bk_buffer_release(diff);
  return st;
}

bk_status ex_attention_backward(bk_context *ctx, const ex_attention *att, const bk_buffer *Q,
                                const bk_buffer *K, const bk_buffer *V, const bk_buffer *dO,
                                bk_buffer **dQ, bk_buffer **dK, bk_buffer **dV) {
  int64_t T = att->T, d = att->d;
  bk_buffer *dP = NULL, *dS = NULL;
  int flag = 0;
  *dQ = *dK = *dV = NULL;
  bk_status st = bk_bmm(ctx, att->P, dO, 1, T, T, d, 1, 0, dV);       /* P^T dO */
  if (st == BK_OK) st = bk_bmm(ctx, dO, V, 1, T, d, T, 0, 1, &dP);     /* dO V^T */
  if (st == BK_OK) st = ex_softmax_vjp(ctx, att->P, dP, T, T, &dS);
  if (st == BK_OK) st = bk_bmm_scaled(ctx, dS, K, 1, T, T, d, 0, 0, att->scale, dQ, &flag);
  if (st == BK_OK) st = bk_bmm_scaled(ctx, dS, Q, 1, T, T, d, 1, 0, att->scale, dK, &flag);
  bk_buffer_release(dP);
  bk_buffer_release(dS);
  if (st != BK_OK) {
    bk_buffer_release(*dQ);
    bk_buffer_release(*dK);
    bk_buffer_release(*dV);
    *dQ = *dK = *dV = NULL;
  }
  return st;
}
