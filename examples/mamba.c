/*
 * mamba.c — a Mamba-style block, forward and backward, composed only from
 * public primitives. x is (B, T, D); the block works at an inner width E
 * with a causal depthwise convolution of width K; rows = B*T.
 *
 * Forward
 *   u    = layernorm(x)                               bk_layernorm_forward
 *   a    = u Wx,  z = u Wz           (B, T, E)        bk_bmm
 *   c    = causal depthwise conv of a over time       bk_conv: (B, E, T),
 *          c[b,e,t] = sum_j w[e,j] a[b,e,t+j-K+1]     groups = E, pad_before = K-1
 *   A    = sigmoid(c Wa + ba)        (T, B*E)         ex_sigmoid (two-way softmax)
 *   h[t] = A[t] h[t-1] + (1 - A[t]) c[t], h[-1] = 0   bk_scan_diag_var, state B*E
 *   y    = x + (h * sigmoid(z)) Wo                    ex_mul, bk_bmm, ex_axpby
 *
 * The decay A is token dependent (Mamba's selection) and lies in (0, 1);
 * the input coefficient is its complement, which the two-way softmax gives
 * at full accuracy, so every state is a convex mix of the past and the
 * current input and the recurrence cannot blow up. Batches are folded into
 * the scan's state axis: with time leading, (T, B, E) is (T, B*E).
 *
 * Backward (dy given)
 *   dWo = g^T dy with g = h * s_z; dg = dy Wo^T; dh = dg * s_z;
 *   dz = (dg * h) * s_z * (1 - s_z);
 *   bk_scan_diag_var_backward gives dA, dB (the input coefficient), dc;
 *   dp = (dA - dB) * A * (1 - A); dWa = c^T dp; dba = column sums of dp;
 *   dc += dp Wa^T; then the convolution's two VJPs, both again bk_conv:
 *     d input:  the kernel flipped in time (a product with the exchange
 *               matrix) correlated with dc padded after: pad_after = K-1;
 *     d kernel: dw[e,j] = sum_{b,t} a[b,e,t+j-K+1] dc[b,e,t]: bk_conv with
 *               one-hot kernels unfolds a into its K shifted copies
 *               (channel e*K+j is a shifted by j), then one product per
 *               channel contracts them with dc over (b, t).
 *   dWx = u^T da, dWz = u^T dz, du = da Wx^T + dz Wz^T; layer-norm VJP.
 *
 * bk_conv takes the dense (C_out, C_in, K) kernel layout and reads only the
 * diagonal blocks of a grouped convolution; the depthwise kernel (E, K) is
 * broadcast to (E, E, K) for it (the off-diagonal copies are never read).
 */
#include "examples.h"

#include <math.h>
#include <stdlib.h>

typedef struct ex_mamba {
  ex_block base;
  int64_t B, T, D, E, K;
  bk_buffer *flip;   /* (K, K) exchange matrix: w J reverses each kernel row */
  bk_buffer *unfold; /* (E*K, E, K) one-hot kernels: channel e*K+j copies a shifted by j */
  bk_buffer *h0;   /* (B*E) zeros */
  /* saved by the forward for the backward */
  bk_buffer *u, *norm, *inv_std; /* layer norm */
  bk_buffer *a_t;                /* (B, E, T) conv input */
  bk_buffer *c;                  /* (T, B*E) conv output, time leading */
  bk_buffer *A, *A_comp;         /* (T, B*E) decay and its complement */
  bk_buffer *h;                  /* (T, B*E) scan output */
  bk_buffer *h_b;                /* (B, T, E) scan output, batch leading */
  bk_buffer *s_z, *s_zc;         /* (rows, E) gate sigmoid and complement */
  bk_buffer *g;                  /* (rows, E) gated state */
} ex_mamba;

enum { LN_GAMMA, LN_BETA, W_X, W_Z, CONV_W, W_A, B_A, W_O };

static void mamba_drop_saved(ex_mamba *m) {
  EX_RELEASE(&m->u, &m->norm, &m->inv_std, &m->a_t, &m->c, &m->A, &m->A_comp, &m->h, &m->h_b,
             &m->s_z, &m->s_zc, &m->g);
}

/* The depthwise convolution over time of v (B, E, T) with the kernel
 * (E, K) broadcast to its dense layout, padded before or after by K-1. */
static bk_status depthwise_conv(bk_context *ctx, const ex_mamba *m, const bk_buffer *v,
                                const bk_buffer *w, int pad_after, bk_buffer **out) {
  const int64_t E = m->E, K = m->K;
  bk_status st = BK_OK;
  bk_buffer *dense = NULL;
  const int64_t before[1] = {pad_after ? 0 : K - 1}, after[1] = {pad_after ? K - 1 : 0};
  const int64_t one[1] = {1};
  *out = NULL;
  EX_TRY(bk_broadcast_to(ctx, w, (const int64_t[]){E, 1, K}, 3, (const int64_t[]){E, E, K}, 3,
                         (const int64_t[]){1, 2, 3}, &dense));
  EX_TRY(bk_conv(ctx, v, dense, NULL, (const int64_t[]){m->B, E, m->T}, 3,
                 (const int64_t[]){E, E, K}, 1, one, before, after, one, E, out));
done:
  EX_RELEASE(&dense);
  return st;
}

static bk_status mamba_forward(bk_context *ctx, ex_block *b, const bk_buffer *x, bk_buffer **y) {
  ex_mamba *m = (ex_mamba *)b;
  const int64_t B = m->B, T = m->T, D = m->D, E = m->E, rows = B * T, n = rows * E;
  bk_status st = BK_OK;
  bk_buffer *a = NULL, *z = NULL, *c_b = NULL, *p0 = NULL, *p = NULL, *proj = NULL;
  *y = NULL;
  mamba_drop_saved(m);

  EX_TRY(bk_layernorm_forward(ctx, x, b->param[LN_GAMMA]->value, b->param[LN_BETA]->value, rows,
                              D, 1e-5, &m->u, &m->norm, &m->inv_std));
  EX_TRY(bk_bmm(ctx, m->u, b->param[W_X]->value, 1, rows, D, E, 0, 0, &a)); /* (B, T, E) */
  EX_TRY(bk_bmm(ctx, m->u, b->param[W_Z]->value, 1, rows, D, E, 0, 0, &z));

  /* Channels before time for the convolution, then time leading for the scan. */
  EX_TRY(bk_swap_adjacent(ctx, a, (const int64_t[]){B, T, E}, 3, 1, &m->a_t)); /* (B, E, T) */
  EX_TRY(depthwise_conv(ctx, m, m->a_t, b->param[CONV_W]->value, 0, &c_b));
  EX_TRY(bk_swap_adjacent(ctx, c_b, (const int64_t[]){B * E, T}, 2, 0, &m->c)); /* (T, B, E) */

  EX_TRY(bk_bmm(ctx, m->c, b->param[W_A]->value, 1, T * B, E, E, 0, 0, &p0));
  EX_TRY(ex_add_bias(ctx, p0, b->param[B_A]->value, T * B, E, &p));
  EX_TRY(ex_sigmoid(ctx, p, n, &m->A, &m->A_comp));
  EX_TRY(bk_scan_diag_var(ctx, m->A, m->A_comp, m->c, m->h0, T, B * E, &m->h));
  EX_TRY(bk_swap_adjacent(ctx, m->h, (const int64_t[]){T, B, E}, 3, 0, &m->h_b)); /* (B,T,E) */

  EX_TRY(ex_sigmoid(ctx, z, n, &m->s_z, &m->s_zc));
  EX_TRY(ex_mul(ctx, m->h_b, m->s_z, n, &m->g));
  EX_TRY(bk_bmm(ctx, m->g, b->param[W_O]->value, 1, rows, E, D, 0, 0, &proj));
  EX_TRY(ex_axpby(ctx, 1.0, x, 1.0, proj, rows * D, y));
done:
  EX_RELEASE(&a, &z, &c_b, &p0, &p, &proj);
  return st;
}

static bk_status mamba_backward(bk_context *ctx, ex_block *b, const bk_buffer *dy,
                                bk_buffer **dx) {
  ex_mamba *m = (ex_mamba *)b;
  const int64_t B = m->B, T = m->T, D = m->D, E = m->E, K = m->K, rows = B * T, n = rows * E;
  const bk_buffer *Wx = b->param[W_X]->value, *Wz = b->param[W_Z]->value;
  const bk_buffer *Wa = b->param[W_A]->value, *w = b->param[CONV_W]->value;
  bk_status st = BK_OK;
  bk_buffer *dWo = NULL, *dg = NULL, *dh_b = NULL, *dsz = NULL, *dz0 = NULL, *dz = NULL;
  bk_buffer *dh = NULL, *dA = NULL, *dAc = NULL, *dc_scan = NULL, *dh0 = NULL, *dA_tot = NULL;
  bk_buffer *dp0 = NULL, *dp = NULL, *dWa = NULL, *dba = NULL, *dc_a = NULL, *dc = NULL;
  bk_buffer *dc_b = NULL, *a_unf = NULL, *a_e = NULL, *dc_e = NULL, *dw = NULL;
  bk_buffer *w_flip = NULL, *da_t = NULL, *da = NULL, *dWx = NULL, *dWz = NULL;
  bk_buffer *du_a = NULL, *du_z = NULL, *du = NULL, *dxl = NULL, *dgamma = NULL, *dbeta = NULL;
  *dx = NULL;

  /* The output projection and the gate. */
  EX_TRY(bk_bmm(ctx, m->g, dy, 1, E, rows, D, 1, 0, &dWo));
  EX_TRY(bk_bmm(ctx, dy, b->param[W_O]->value, 1, rows, D, E, 0, 1, &dg));
  EX_TRY(ex_mul(ctx, dg, m->s_z, n, &dh_b));
  EX_TRY(ex_mul(ctx, dg, m->h_b, n, &dsz));
  EX_TRY(ex_mul(ctx, dsz, m->s_z, n, &dz0));
  EX_TRY(ex_mul(ctx, dz0, m->s_zc, n, &dz)); /* sigmoid' = s (1 - s) */

  /* The scan, and the decay's sigmoid: A feeds both coefficients. */
  EX_TRY(bk_swap_adjacent(ctx, dh_b, (const int64_t[]){B, T, E}, 3, 0, &dh)); /* (T, B, E) */
  EX_TRY(bk_scan_diag_var_backward(ctx, m->A, m->A_comp, m->c, m->h0, m->h, dh, T, B * E, &dA,
                                   &dAc, &dc_scan, &dh0));
  EX_TRY(ex_axpby(ctx, 1.0, dA, -1.0, dAc, n, &dA_tot));
  EX_TRY(ex_mul(ctx, dA_tot, m->A, n, &dp0));
  EX_TRY(ex_mul(ctx, dp0, m->A_comp, n, &dp));
  EX_TRY(bk_bmm(ctx, m->c, dp, 1, E, T * B, E, 1, 0, &dWa));
  EX_TRY(bk_sum_axis(ctx, dp, (const int64_t[]){T * B, E}, 2, 0, &dba));
  EX_TRY(bk_bmm(ctx, dp, Wa, 1, T * B, E, E, 0, 1, &dc_a));
  EX_TRY(ex_axpby(ctx, 1.0, dc_scan, 1.0, dc_a, n, &dc));                  /* (T, B, E) */
  EX_TRY(bk_swap_adjacent(ctx, dc, (const int64_t[]){T, B * E}, 2, 0, &dc_b)); /* (B, E, T) */

  /* The kernel's gradient: the input unfolded into its K shifted copies by
   * a grouped convolution with one-hot kernels, (B, E*K, T), then one
   * product per channel with dc: dw[e,j] = sum_{b,t} a_j[b,e,t] dc[b,e,t]. */
  EX_TRY(bk_conv(ctx, m->a_t, m->unfold, NULL, (const int64_t[]){B, E, T}, 3,
                 (const int64_t[]){E * K, E, K}, 1, (const int64_t[]){1},
                 (const int64_t[]){K - 1}, (const int64_t[]){0}, (const int64_t[]){1}, E,
                 &a_unf));
  EX_TRY(bk_swap_adjacent(ctx, a_unf, (const int64_t[]){B, E * K, T}, 3, 0, &a_e)); /* (E,K,B*T) */
  EX_TRY(bk_swap_adjacent(ctx, dc_b, (const int64_t[]){B, E, T}, 3, 0, &dc_e));     /* (E, B*T) */
  EX_TRY(bk_bmm(ctx, a_e, dc_e, E, K, B * T, 1, 0, 0, &dw));                        /* (E, K) */

  /* The input's gradient: the flipped kernel, padded after. */
  EX_TRY(bk_bmm(ctx, w, m->flip, 1, E, K, K, 0, 0, &w_flip));
  EX_TRY(depthwise_conv(ctx, m, dc_b, w_flip, 1, &da_t));                     /* (B, E, T) */
  EX_TRY(bk_swap_adjacent(ctx, da_t, (const int64_t[]){B, E, T}, 3, 1, &da)); /* (B, T, E) */

  /* The input projections and the layer norm. */
  EX_TRY(bk_bmm(ctx, m->u, da, 1, D, rows, E, 1, 0, &dWx));
  EX_TRY(bk_bmm(ctx, m->u, dz, 1, D, rows, E, 1, 0, &dWz));
  EX_TRY(bk_bmm(ctx, da, Wx, 1, rows, E, D, 0, 1, &du_a));
  EX_TRY(bk_bmm(ctx, dz, Wz, 1, rows, E, D, 0, 1, &du_z));
  EX_TRY(ex_axpby(ctx, 1.0, du_a, 1.0, du_z, rows * D, &du));
  EX_TRY(bk_layernorm_backward(ctx, du, m->norm, m->inv_std, b->param[LN_GAMMA]->value, rows, D,
                               &dxl, &dgamma, &dbeta));
  EX_TRY(ex_axpby(ctx, 1.0, dy, 1.0, dxl, rows * D, dx));

  ex_set_grad(b->param[LN_GAMMA], &dgamma);
  ex_set_grad(b->param[LN_BETA], &dbeta);
  ex_set_grad(b->param[W_X], &dWx);
  ex_set_grad(b->param[W_Z], &dWz);
  ex_set_grad(b->param[CONV_W], &dw);
  ex_set_grad(b->param[W_A], &dWa);
  ex_set_grad(b->param[B_A], &dba);
  ex_set_grad(b->param[W_O], &dWo);
done:
  EX_RELEASE(&dWo, &dg, &dh_b, &dsz, &dz0, &dz, &dh, &dA, &dAc, &dc_scan, &dh0, &dA_tot, &dp0,
             &dp, &dWa, &dba, &dc_a, &dc, &dc_b, &a_unf, &a_e, &dc_e, &dw, &w_flip, &da_t,
             &da, &dWx, &dWz, &du_a, &du_z, &du, &dxl, &dgamma, &dbeta);
  return st;
}

static void mamba_destroy(ex_block *b) {
  ex_mamba *m = (ex_mamba *)b;
  mamba_drop_saved(m);
  EX_RELEASE(&m->flip, &m->unfold, &m->h0);
}

static const ex_block_ops mamba_ops = {mamba_forward, mamba_backward, mamba_destroy};

bk_status ex_mamba_create(bk_context *ctx, bk_dtype dtype, const ex_mamba_cfg *cfg,
                          uint64_t seed, ex_block **out_block) {
  const int64_t B = cfg->batch, T = cfg->seq, D = cfg->dim, E = cfg->inner, K = cfg->conv_width;
  bk_status st = BK_OK;
  double *J = NULL, *U = NULL;
  ex_rng rng = ex_rng_seed(seed);
  *out_block = NULL;
  if (B < 1 || T < 1 || D < 1 || E < 1 || K < 1) return BK_ERR_INVALID_ARGUMENT;
  ex_mamba *m =
      ex_block_alloc(sizeof *m, &mamba_ops, "Mamba-style block", dtype, B * T * D, B * T * D);
  if (!m) return BK_ERR_OUT_OF_MEMORY;
  m->B = B;
  m->T = T;
  m->D = D;
  m->E = E;
  m->K = K;

  EX_TRY(ex_block_add_filled(ctx, &m->base, "ln_gamma", D, 1.0));
  EX_TRY(ex_block_add_filled(ctx, &m->base, "ln_beta", D, 0.0));
  EX_TRY(ex_block_add_random(ctx, &m->base, "Wx", D * E, sqrt(3.0 / (double)D), &rng));
  EX_TRY(ex_block_add_random(ctx, &m->base, "Wz", D * E, sqrt(3.0 / (double)D), &rng));
  EX_TRY(ex_block_add_random(ctx, &m->base, "conv_w", E * K, sqrt(3.0 / (double)K), &rng));
  EX_TRY(ex_block_add_random(ctx, &m->base, "Wa", E * E, 0.5 * sqrt(3.0 / (double)E), &rng));
  /* A bias of 2 starts the decay near sigmoid(2) = 0.88: a memory of a
   * few tokens. */
  EX_TRY(ex_block_add_filled(ctx, &m->base, "ba", E, 2.0));
  EX_TRY(ex_block_add_random(ctx, &m->base, "Wo", E * D, sqrt(3.0 / (double)E), &rng));

  J = calloc((size_t)(K * K), sizeof *J);
  U = calloc((size_t)(E * K * E * K), sizeof *U);
  if (!J || !U) {
    st = BK_ERR_OUT_OF_MEMORY;
    goto done;
  }
  for (int64_t i = 0; i < K; i++) J[i * K + (K - 1 - i)] = 1.0;
  /* Output channel e*K+j is in group e and reads input channel e, the
   * diagonal block [e*K+j, e, :] of the dense layout; its tap j is 1. */
  for (int64_t e = 0; e < E; e++)
    for (int64_t j = 0; j < K; j++) U[((e * K + j) * E + e) * K + j] = 1.0;
  EX_TRY(ex_from_doubles(ctx, dtype, J, K * K, &m->flip));
  EX_TRY(ex_from_doubles(ctx, dtype, U, E * K * E * K, &m->unfold));
  EX_TRY(bk_buffer_zeros(ctx, dtype, B * E, &m->h0));
  *out_block = &m->base;
done:
  free(J);
  free(U);
  if (st != BK_OK) ex_block_destroy(&m->base);
  return st;
}
