/*
 * moe.c — a mixture-of-experts layer, forward and backward, composed only
 * from public primitives. N tokens of width D, X experts, each token sent
 * to its top k; every expert is a two-layer SiLU network of width F.
 *
 * Forward
 *   u  = layernorm(x)                                bk_layernorm_forward
 *   r  = u Wr               (N, X) router logits     bk_bmm
 *   M  = top-k mask of r                             bk_rows_topk_mask
 *   g  = softmax of r over the selected experts      bk_rows_masked_softmax
 *   routing: M is read to the host and turned into one index list per
 *   expert, padded to a common capacity C with the out-of-range index N;
 *   xs = u[tokens]          (X, C, D) dispatch       bk_rows_gather
 *   f  = silu(xs W1)        (X, C, F)                bk_bmm (batch X), ex_sigmoid
 *   ye = f W2               (X, C, D)                bk_bmm (batch X)
 *   gw = g[token, expert]   (X*C) from g as (N*X, 1) bk_rows_gather
 *   y  = x + scatter of gw * ye onto the tokens      bk_rows_scatter_add
 *
 * The padding rows are where the gather and scatter-add contracts pay off:
 * an out-of-range index gathers an exact zero row, which stays zero
 * through the experts (silu(0) = 0), and scatter-add ignores it, so every
 * expert runs as one slice of a single batched product. The combine folds
 * each token's expert outputs in a fixed order (deterministic, no atomics),
 * straight onto the residual x.
 *
 * Dense routing, the capture-safe form (ex_block_set_capturable). Building
 * the index lists reads the mask on the host, which a CUDA graph capture
 * cannot do. With dense routing the mask never leaves the device: every
 * expert runs on every token (C = N, the dispatch is a broadcast of u to
 * (X, N, D)), each slot is weighted by its gate g[token, expert], which is
 * exactly 0 for an unselected expert, and the combine sums the X weighted
 * outputs per token in expert order (bk_sum_axis) onto the residual. The
 * result is the same mixture: an unselected expert contributes an exact
 * zero. It costs X/k times the expert arithmetic of the sparse form and no
 * host round trip.
 *
 * Backward (dy given): the adjoint of scatter-add is a gather and the
 * adjoint of a gather is a scatter-add (with dense routing: the adjoint of
 * the broadcast is the sum over experts, and the gate weights move between
 * (N, X) and slot order (X, N) by a transpose both ways).
 *   dyw = dy[tokens]; dye = dyw * gw; dgw = rowwise <dyw, ye>;
 *   dg  = scatter-add of dgw into zeros (N*X, 1); dr = softmax VJP (0 on
 *   unselected experts; the top-k choice itself is piecewise constant);
 *   dWr = u^T dr; dW2 = f^T dye; df = dye W2^T; da = df * silu'(a) with
 *   silu'(a) = s + f (1 - s); dW1 = xs^T da; dxs = da W1^T;
 *   du = dr Wr^T + scatter-add of dxs onto the tokens; layer-norm VJP.
 */
#include "examples.h"

#include <math.h>
#include <stdlib.h>

typedef struct ex_moe {
  ex_block base;
  int64_t N, D, X, k, F;
  /* routing of the last forward: X*C entries each, C = cap */
  int64_t cap;
  uint64_t *tokens; /* token of each slot, N for a padding slot */
  uint64_t *gates;  /* token*X + expert, N*X for a padding slot */
  double *mask_host;
  /* saved by the forward for the backward */
  bk_buffer *u, *norm, *inv_std; /* layer norm */
  bk_buffer *g;                  /* (N, X) gate weights, 0 where unselected */
  bk_buffer *xs;                 /* (X, C, D) dispatched tokens */
  bk_buffer *s, *s_c, *f;        /* (X, C, F) sigmoid, complement, silu */
  bk_buffer *ye;                 /* (X, C, D) expert outputs */
  bk_buffer *gw_wide;            /* (X*C, D) slot gate weights, broadcast */
} ex_moe;

enum { LN_GAMMA, LN_BETA, W_R, W_1, W_2 };

static void moe_drop_saved(ex_moe *m) {
  EX_RELEASE(&m->u, &m->norm, &m->inv_std, &m->g, &m->xs, &m->s, &m->s_c, &m->f, &m->ye,
             &m->gw_wide);
}

/* Reads the top-k mask and fills the per-expert slot lists: expert e owns
 * slots e*C .. e*C + C-1, its tokens in increasing order, then padding.
 * This is the one host synchronization of the layer, as in any router that
 * sizes its dispatch from the routing decision. */
static bk_status moe_route(bk_context *ctx, ex_moe *m, const bk_buffer *mask) {
  const int64_t N = m->N, X = m->X;
  bk_status st = ex_to_doubles(ctx, mask, m->mask_host, N * X);
  if (st != BK_OK) return st;
  int64_t cap = 1;
  for (int64_t e = 0; e < X; e++) {
    int64_t count = 0;
    for (int64_t t = 0; t < N; t++) count += m->mask_host[t * X + e] != 0.0;
    if (count > cap) cap = count;
  }
  m->cap = cap;
  for (int64_t e = 0; e < X; e++) {
    int64_t slot = e * cap;
    for (int64_t t = 0; t < N; t++) {
      if (m->mask_host[t * X + e] == 0.0) continue;
      m->tokens[slot] = (uint64_t)t;
      m->gates[slot] = (uint64_t)(t * X + e);
      slot++;
    }
    for (; slot < (e + 1) * cap; slot++) {
      m->tokens[slot] = (uint64_t)N;
      m->gates[slot] = (uint64_t)(N * X);
    }
  }
  return BK_OK;
}

/* Rows of v (N, cols) in slot order (X*C, cols): the dispatch. */
static bk_status moe_to_slots(bk_context *ctx, const ex_moe *m, const bk_buffer *v,
                              int64_t cols, bk_buffer **out) {
  if (!m->base.capturable)
    return bk_rows_gather(ctx, v, m->N, cols, m->tokens, m->X * m->cap, out);
  return bk_broadcast_to(ctx, v, (const int64_t[]){m->N, cols}, 2,
                         (const int64_t[]){m->X, m->N, cols}, 3, (const int64_t[]){0, 1, 2}, out);
}

/* base (N, cols) plus the slot rows v (X*C, cols) summed onto their tokens:
 * the combine, and the dispatch's adjoint. */
static bk_status moe_from_slots(bk_context *ctx, const ex_moe *m, const bk_buffer *base,
                                const bk_buffer *v, int64_t cols, bk_buffer **out) {
  const int64_t N = m->N;
  if (!m->base.capturable)
    return bk_rows_scatter_add(ctx, base, v, N, cols, m->tokens, m->X * m->cap, out);
  bk_status st = BK_OK;
  bk_buffer *sum = NULL;
  *out = NULL;
  EX_TRY(bk_sum_axis(ctx, v, (const int64_t[]){m->X, N * cols}, 2, 0, &sum));
  EX_TRY(ex_axpby(ctx, 1.0, base, 1.0, sum, N * cols, out));
done:
  EX_RELEASE(&sum);
  return st;
}

/* Each slot's gate weight (X*C) from g (N, X). */
static bk_status moe_gates_to_slots(bk_context *ctx, const ex_moe *m, const bk_buffer *g,
                                    bk_buffer **out) {
  if (!m->base.capturable)
    return bk_rows_gather(ctx, g, m->N * m->X, 1, m->gates, m->X * m->cap, out);
  return bk_swap_adjacent(ctx, g, (const int64_t[]){m->N, m->X}, 2, 0, out);
}

/* The adjoint: per-slot values (X*C) back to (N, X), 0 where no slot. */
static bk_status moe_gates_from_slots(bk_context *ctx, const ex_moe *m, const bk_buffer *v,
                                      bk_buffer **out) {
  const int64_t NX = m->N * m->X;
  if (m->base.capturable)
    return bk_swap_adjacent(ctx, v, (const int64_t[]){m->X, m->N}, 2, 0, out);
  bk_status st = BK_OK;
  bk_buffer *zeros = NULL;
  *out = NULL;
  EX_TRY(bk_buffer_zeros(ctx, m->base.dtype, NX, &zeros));
  EX_TRY(bk_rows_scatter_add(ctx, zeros, v, NX, 1, m->gates, m->X * m->cap, out));
done:
  EX_RELEASE(&zeros);
  return st;
}

static bk_status moe_forward(bk_context *ctx, ex_block *b, const bk_buffer *x, bk_buffer **y) {
  ex_moe *m = (ex_moe *)b;
  const int64_t N = m->N, D = m->D, X = m->X, F = m->F;
  bk_status st = BK_OK;
  bk_buffer *r = NULL, *mask = NULL, *a = NULL, *gw = NULL, *yw = NULL;
  int64_t C = 0, slots = 0;
  *y = NULL;
  moe_drop_saved(m);

  EX_TRY(bk_layernorm_forward(ctx, x, b->param[LN_GAMMA]->value, b->param[LN_BETA]->value, N, D,
                              1e-5, &m->u, &m->norm, &m->inv_std));
  EX_TRY(bk_bmm(ctx, m->u, b->param[W_R]->value, 1, N, D, X, 0, 0, &r));
  EX_TRY(bk_rows_topk_mask(ctx, r, N, X, m->k, &mask));
  EX_TRY(bk_rows_masked_softmax(ctx, r, mask, N, X, &m->g));
  if (m->base.capturable)
    m->cap = N;
  else
    EX_TRY(moe_route(ctx, m, mask));
  C = m->cap;
  slots = X * C;

  /* Dispatch, the experts as one batched product each layer, combine. */
  EX_TRY(moe_to_slots(ctx, m, m->u, D, &m->xs));
  EX_TRY(bk_bmm(ctx, m->xs, b->param[W_1]->value, X, C, D, F, 0, 0, &a));
  EX_TRY(ex_sigmoid(ctx, a, slots * F, &m->s, &m->s_c));
  EX_TRY(ex_mul(ctx, a, m->s, slots * F, &m->f));
  EX_TRY(bk_bmm(ctx, m->f, b->param[W_2]->value, X, C, F, D, 0, 0, &m->ye));
  EX_TRY(moe_gates_to_slots(ctx, m, m->g, &gw));
  EX_TRY(bk_broadcast_col(ctx, gw, slots, D, &m->gw_wide));
  EX_TRY(ex_mul(ctx, m->ye, m->gw_wide, slots * D, &yw));
  EX_TRY(moe_from_slots(ctx, m, x, yw, D, y));
done:
  EX_RELEASE(&r, &mask, &a, &gw, &yw);
  return st;
}

static bk_status moe_backward(bk_context *ctx, ex_block *b, const bk_buffer *dy,
                              bk_buffer **dx) {
  ex_moe *m = (ex_moe *)b;
  const int64_t N = m->N, D = m->D, X = m->X, F = m->F, C = m->cap, slots = X * C;
  const bk_buffer *Wr = b->param[W_R]->value, *W1 = b->param[W_1]->value;
  const bk_buffer *W2 = b->param[W_2]->value;
  bk_status st = BK_OK;
  bk_buffer *dyw = NULL, *dye = NULL, *dgw = NULL, *dg = NULL, *dr = NULL;
  bk_buffer *dWr = NULL, *du_r = NULL, *dW2 = NULL, *df = NULL, *fsc = NULL, *dsilu = NULL;
  bk_buffer *da = NULL, *dW1 = NULL, *dxs = NULL, *du = NULL, *dxl = NULL, *dgamma = NULL,
            *dbeta = NULL;
  *dx = NULL;

  /* Through the combine: a gather of dy, and the gate weights' gradient. */
  EX_TRY(moe_to_slots(ctx, m, dy, D, &dyw));
  EX_TRY(ex_mul(ctx, dyw, m->gw_wide, slots * D, &dye));
  EX_TRY(ex_rows_dot(ctx, dyw, m->ye, slots, D, &dgw));
  EX_TRY(moe_gates_from_slots(ctx, m, dgw, &dg));

  /* The router. */
  EX_TRY(ex_softmax_vjp(ctx, m->g, dg, N, X, &dr));
  EX_TRY(bk_bmm(ctx, m->u, dr, 1, D, N, X, 1, 0, &dWr));
  EX_TRY(bk_bmm(ctx, dr, Wr, 1, N, X, D, 0, 1, &du_r));

  /* The experts, batched over X. */
  EX_TRY(bk_bmm(ctx, m->f, dye, X, F, C, D, 1, 0, &dW2));
  EX_TRY(bk_bmm(ctx, dye, W2, X, C, D, F, 0, 1, &df));
  EX_TRY(ex_mul(ctx, m->f, m->s_c, slots * F, &fsc));
  EX_TRY(ex_axpby(ctx, 1.0, m->s, 1.0, fsc, slots * F, &dsilu)); /* s + f (1 - s) */
  EX_TRY(ex_mul(ctx, df, dsilu, slots * F, &da));
  EX_TRY(bk_bmm(ctx, m->xs, da, X, D, C, F, 1, 0, &dW1));
  EX_TRY(bk_bmm(ctx, da, W1, X, C, F, D, 0, 1, &dxs));

  /* Through the dispatch: a scatter-add onto the router's part of du. */
  EX_TRY(moe_from_slots(ctx, m, du_r, dxs, D, &du));
  EX_TRY(bk_layernorm_backward(ctx, du, m->norm, m->inv_std, b->param[LN_GAMMA]->value, N, D,
                               &dxl, &dgamma, &dbeta));
  EX_TRY(ex_axpby(ctx, 1.0, dy, 1.0, dxl, N * D, dx));

  ex_set_grad(b->param[LN_GAMMA], &dgamma);
  ex_set_grad(b->param[LN_BETA], &dbeta);
  ex_set_grad(b->param[W_R], &dWr);
  ex_set_grad(b->param[W_1], &dW1);
  ex_set_grad(b->param[W_2], &dW2);
done:
  EX_RELEASE(&dyw, &dye, &dgw, &dg, &dr, &dWr, &du_r, &dW2, &df, &fsc, &dsilu, &da,
             &dW1, &dxs, &du, &dxl, &dgamma, &dbeta);
  return st;
}

static void moe_destroy(ex_block *b) {
  ex_moe *m = (ex_moe *)b;
  moe_drop_saved(m);
  free(m->tokens);
  free(m->gates);
  free(m->mask_host);
}

static const ex_block_ops moe_ops = {moe_forward, moe_backward, moe_destroy};

bk_status ex_moe_create(bk_context *ctx, bk_dtype dtype, const ex_moe_cfg *cfg, uint64_t seed,
                        ex_block **out_block) {
  const int64_t N = cfg->tokens, D = cfg->dim, X = cfg->experts, F = cfg->hidden;
  bk_status st = BK_OK;
  ex_rng rng = ex_rng_seed(seed);
  *out_block = NULL;
  if (N < 1 || D < 1 || X < 1 || F < 1 || cfg->top_k < 1 || cfg->top_k > X)
    return BK_ERR_INVALID_ARGUMENT;
  ex_moe *m = ex_block_alloc(sizeof *m, &moe_ops, "mixture of experts", dtype, N * D, N * D);
  if (!m) return BK_ERR_OUT_OF_MEMORY;
  m->N = N;
  m->D = D;
  m->X = X;
  m->k = cfg->top_k;
  m->F = F;
  /* The capacity never exceeds N, so X*N slots always suffice. */
  m->tokens = malloc((size_t)(X * N) * sizeof *m->tokens);
  m->gates = malloc((size_t)(X * N) * sizeof *m->gates);
  m->mask_host = malloc((size_t)(X * N) * sizeof *m->mask_host);
  if (!m->tokens || !m->gates || !m->mask_host) {
    st = BK_ERR_OUT_OF_MEMORY;
    goto done;
  }
  EX_TRY(ex_block_add_filled(ctx, &m->base, "ln_gamma", D, 1.0));
  EX_TRY(ex_block_add_filled(ctx, &m->base, "ln_beta", D, 0.0));
  EX_TRY(ex_block_add_random(ctx, &m->base, "Wr", D * X, sqrt(3.0 / (double)D), &rng));
  EX_TRY(ex_block_add_random(ctx, &m->base, "W1", X * D * F, sqrt(3.0 / (double)D), &rng));
  EX_TRY(ex_block_add_random(ctx, &m->base, "W2", X * F * D, sqrt(3.0 / (double)F), &rng));
  *out_block = &m->base;
done:
  if (st != BK_OK) ex_block_destroy(&m->base);
  return st;
}
