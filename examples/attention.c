/*
 * attention.c — causal multi-head self-attention, forward and backward,
 * composed only from public primitives. x is (B, T, D) with H heads of
 * width dh = D/H; rows = B*T.
 *
 * Forward
 *   u      = layernorm(x)                          bk_layernorm_forward
 *   qkv    = u Wqkv            (B, T, 3, H, dh)    bk_bmm
 *   heads  = permuted to       (3, B, H, T, dh)    bk_swap_adjacent twice
 *   q,k,v  = the three slices  (B*H, T, dh)        bk_vec_slice
 *   S      = q k^T / sqrt(dh)  (B*H, T, T)         bk_bmm_scaled (+ replay)
 *   P      = causal softmax(S)                     bk_rows_masked_softmax
 *   o      = P v, heads merged (B, T, D)           bk_bmm, bk_swap_adjacent
 *   y      = x + o Wo                              bk_bmm, ex_axpby
 *
 * Backward (dy given)
 *   dWo = o^T dy, do = dy Wo^T; dv = P^T do, dP = do v^T,
 *   dS = P * (dP - rowsum(dP * P)) (the softmax VJP; blocked entries have
 *   P = 0 and get 0), dq = dS k / sqrt(dh), dk = dS^T q / sqrt(dh);
 *   [dq | dk | dv] permuted back to (B, T, 3, H, dh); dWqkv = u^T dqkv,
 *   du = dqkv Wqkv^T; layer-norm VJP; dx = dy + dx_ln.
 *
 * The range-loss replay. bk_bmm_scaled sets its flag when the scores may
 * have lost range (an overflow, an entry below the smallest normal, or a
 * bound that says the dtype could overflow). In float32 the forward then
 * replays the scores and the softmax in float64: q and k are copied to
 * float64 (the library has no cast primitive, so ex_convert does a host
 * round trip), S and P are recomputed there, and P, whose entries lie in
 * [0, 1], is converted back to float32. Rows whose scores overflowed
 * float32 thus get the softmax of their true scores instead of NaN.
 * Float64 data has nowhere wider to go and keeps its result.
 *
 * The capture-safe form (ex_block_set_capturable). bk_bmm_scaled reads its
 * flag on the host, which a CUDA graph capture refuses, so the capture-safe
 * block computes the scores as a plain bk_bmm followed by the scale (an
 * (n, 1) x (1, 1) product, ex_scale) and has no replay: scores that leave
 * the float32 range are not rescued, which the demo's small activations
 * never come near.
 */
#include "examples.h"

#include <math.h>
#include <stdlib.h>

typedef struct ex_attention {
  ex_block base;
  int64_t B, T, D, H, dh;
  double scale;
  bk_buffer *mask;   /* (B*H*T, T): 1 where key j <= query i */
  bk_buffer *mask64; /* the same in float64, made at the first replay */
  int64_t replays;
  /* saved by the forward for the backward */
  bk_buffer *u, *norm, *inv_std; /* layer norm: (rows, D), (rows, D), (rows) */
  bk_buffer *q, *k, *v;          /* (B*H, T, dh) each */
  bk_buffer *P;                  /* (B*H, T, T) */
  bk_buffer *o;                  /* (rows, D), heads merged */
} ex_attention;

enum { LN_GAMMA, LN_BETA, W_QKV, W_O };

static void attention_drop_saved(ex_attention *a) {
  EX_RELEASE(&a->u, &a->norm, &a->inv_std, &a->q, &a->k, &a->v, &a->P, &a->o);
}

/* P = causal softmax(q k^T * scale), replayed in float64 when the scores'
 * range-loss flag is set and the dtype is float32 (never in the
 * capture-safe form, which has no flag). */
static bk_status attention_probs(bk_context *ctx, ex_attention *a, bk_buffer **P) {
  const int64_t BH = a->B * a->H, T = a->T, dh = a->dh, n = BH * T * dh;
  bk_status st = BK_OK;
  bk_buffer *S = NULL, *Ss = NULL, *q64 = NULL, *k64 = NULL, *S64 = NULL, *P64 = NULL;
  int lost = 0;
  *P = NULL;
  if (a->base.capturable) {
    EX_TRY(bk_bmm(ctx, a->q, a->k, BH, T, dh, T, 0, 1, &S));
    EX_TRY(ex_scale(ctx, a->scale, S, BH * T * T, &Ss));
    EX_TRY(bk_rows_masked_softmax(ctx, Ss, a->mask, BH * T, T, P));
    goto done;
  }
  EX_TRY(bk_bmm_scaled(ctx, a->q, a->k, BH, T, dh, T, 0, 1, a->scale, &S, &lost));
  if (!lost || a->base.dtype == BK_F64) {
    EX_TRY(bk_rows_masked_softmax(ctx, S, a->mask, BH * T, T, P));
    goto done;
  }
  /* The replay: the same two primitives on float64 copies. */
  if (!a->mask64) EX_TRY(ex_convert(ctx, a->mask, BH * T * T, BK_F64, &a->mask64));
  EX_TRY(ex_convert(ctx, a->q, n, BK_F64, &q64));
  EX_TRY(ex_convert(ctx, a->k, n, BK_F64, &k64));
  EX_TRY(bk_bmm_scaled(ctx, q64, k64, BH, T, dh, T, 0, 1, a->scale, &S64, &lost));
  EX_TRY(bk_rows_masked_softmax(ctx, S64, a->mask64, BH * T, T, &P64));
  EX_TRY(ex_convert(ctx, P64, BH * T * T, a->base.dtype, P));
  a->replays++;
done:
  EX_RELEASE(&S, &Ss, &q64, &k64, &S64, &P64);
  return st;
}

static bk_status attention_forward(bk_context *ctx, ex_block *b, const bk_buffer *x,
                                   bk_buffer **y) {
  ex_attention *a = (ex_attention *)b;
  const int64_t B = a->B, T = a->T, D = a->D, H = a->H, dh = a->dh, rows = B * T;
  const int64_t n = rows * D; /* elements of each of q, k, v */
  bk_status st = BK_OK;
  bk_buffer *qkv = NULL, *t1 = NULL, *heads = NULL, *oh = NULL, *proj = NULL;
  *y = NULL;
  attention_drop_saved(a);

  EX_TRY(bk_layernorm_forward(ctx, x, b->param[LN_GAMMA]->value, b->param[LN_BETA]->value, rows,
                              D, 1e-5, &a->u, &a->norm, &a->inv_std));
  EX_TRY(bk_bmm(ctx, a->u, b->param[W_QKV]->value, 1, rows, D, 3 * D, 0, 0, &qkv));
  /* (B*T, 3, D) -> (3, B*T, D) = (3, B, T, H, dh) -> (3, B, H, T, dh) */
  EX_TRY(bk_swap_adjacent(ctx, qkv, (const int64_t[]){rows, 3, D}, 3, 0, &t1));
  EX_TRY(bk_swap_adjacent(ctx, t1, (const int64_t[]){3, B, T, H, dh}, 5, 2, &heads));
  EX_TRY(bk_vec_slice(ctx, heads, 3 * n, 0, n, &a->q));
  EX_TRY(bk_vec_slice(ctx, heads, 3 * n, n, n, &a->k));
  EX_TRY(bk_vec_slice(ctx, heads, 3 * n, 2 * n, n, &a->v));

  EX_TRY(attention_probs(ctx, a, &a->P));
  EX_TRY(bk_bmm(ctx, a->P, a->v, B * H, T, T, dh, 0, 0, &oh)); /* (B, H, T, dh) */
  EX_TRY(bk_swap_adjacent(ctx, oh, (const int64_t[]){B, H, T, dh}, 4, 1, &a->o));
  EX_TRY(bk_bmm(ctx, a->o, b->param[W_O]->value, 1, rows, D, D, 0, 0, &proj));
  EX_TRY(ex_axpby(ctx, 1.0, x, 1.0, proj, n, y)); /* the residual */
done:
  EX_RELEASE(&qkv, &t1, &heads, &oh, &proj);
  return st;
}

static bk_status attention_backward(bk_context *ctx, ex_block *b, const bk_buffer *dy,
                                    bk_buffer **dx) {
  ex_attention *a = (ex_attention *)b;
  const int64_t B = a->B, T = a->T, D = a->D, H = a->H, dh = a->dh, rows = B * T;
  const int64_t n = rows * D, BH = B * H;
  bk_status st = BK_OK;
  bk_buffer *dWo = NULL, *dom = NULL, *doh = NULL, *dv = NULL, *dP = NULL, *dS = NULL;
  bk_buffer *dSs = NULL, *dq = NULL, *dk = NULL, *dqk = NULL, *dheads = NULL, *t1 = NULL;
  bk_buffer *dqkv = NULL, *dWqkv = NULL, *du = NULL, *dxl = NULL, *dgamma = NULL,
            *dbeta = NULL;
  *dx = NULL;

  EX_TRY(bk_bmm(ctx, a->o, dy, 1, D, rows, D, 1, 0, &dWo));                  /* o^T dy */
  EX_TRY(bk_bmm(ctx, dy, b->param[W_O]->value, 1, rows, D, D, 0, 1, &dom));   /* dy Wo^T */
  EX_TRY(bk_swap_adjacent(ctx, dom, (const int64_t[]){B, T, H, dh}, 4, 1, &doh));

  EX_TRY(bk_bmm(ctx, a->P, doh, BH, T, T, dh, 1, 0, &dv));   /* P^T do */
  EX_TRY(bk_bmm(ctx, doh, a->v, BH, T, dh, T, 0, 1, &dP));   /* do v^T */
  EX_TRY(ex_softmax_vjp(ctx, a->P, dP, BH * T, T, &dS));
  /* The score scale is folded into dS once; both products are then plain. */
  EX_TRY(ex_scale(ctx, a->scale, dS, BH * T * T, &dSs));
  EX_TRY(bk_bmm(ctx, dSs, a->k, BH, T, T, dh, 0, 0, &dq));   /* dS k */
  EX_TRY(bk_bmm(ctx, dSs, a->q, BH, T, T, dh, 1, 0, &dk));   /* dS^T q */

  /* [dq | dk | dv] is (3, B, H, T, dh); undo the forward's permutation. */
  EX_TRY(bk_vec_concat(ctx, dq, dk, n, n, &dqk));
  EX_TRY(bk_vec_concat(ctx, dqk, dv, 2 * n, n, &dheads));
  EX_TRY(bk_swap_adjacent(ctx, dheads, (const int64_t[]){3, B, H, T, dh}, 5, 2, &t1));
  EX_TRY(bk_swap_adjacent(ctx, t1, (const int64_t[]){3, rows, D}, 3, 0, &dqkv));

  EX_TRY(bk_bmm(ctx, a->u, dqkv, 1, D, rows, 3 * D, 1, 0, &dWqkv));             /* u^T dqkv */
  EX_TRY(bk_bmm(ctx, dqkv, b->param[W_QKV]->value, 1, rows, 3 * D, D, 0, 1, &du)); /* dqkv W^T */
  EX_TRY(bk_layernorm_backward(ctx, du, a->norm, a->inv_std, b->param[LN_GAMMA]->value, rows,
                               D, &dxl, &dgamma, &dbeta));
  EX_TRY(ex_axpby(ctx, 1.0, dy, 1.0, dxl, n, dx)); /* the residual */

  ex_set_grad(b->param[LN_GAMMA], &dgamma);
  ex_set_grad(b->param[LN_BETA], &dbeta);
  ex_set_grad(b->param[W_QKV], &dWqkv);
  ex_set_grad(b->param[W_O], &dWo);
done:
  EX_RELEASE(&dWo, &dom, &doh, &dv, &dP, &dS, &dSs, &dq, &dk, &dqk, &dheads, &t1, &dqkv,
             &dWqkv, &du, &dxl, &dgamma, &dbeta);
  return st;
}

static void attention_destroy(ex_block *b) {
  ex_attention *a = (ex_attention *)b;
  attention_drop_saved(a);
  EX_RELEASE(&a->mask, &a->mask64);
}

static const ex_block_ops attention_ops = {attention_forward, attention_backward,
                                           attention_destroy};

int64_t ex_attention_replays(const ex_block *b) {
  return b->ops == &attention_ops ? ((const ex_attention *)b)->replays : 0;
}

bk_status ex_attention_create(bk_context *ctx, bk_dtype dtype, const ex_attention_cfg *cfg,
                              uint64_t seed, ex_block **out_block) {
  const int64_t B = cfg->batch, T = cfg->seq, D = cfg->dim, H = cfg->heads;
  bk_status st = BK_OK;
  bk_buffer *causal = NULL;
  double *m = NULL;
  ex_rng rng = ex_rng_seed(seed);
  *out_block = NULL;
  if (B < 1 || T < 1 || H < 1 || D < H || D % H != 0) return BK_ERR_INVALID_ARGUMENT;
  ex_attention *a = ex_block_alloc(sizeof *a, &attention_ops, "causal self-attention", dtype,
                                   B * T * D, B * T * D);
  if (!a) return BK_ERR_OUT_OF_MEMORY;
  a->B = B;
  a->T = T;
  a->D = D;
  a->H = H;
  a->dh = D / H;
  a->scale = 1.0 / sqrt((double)a->dh);

  EX_TRY(ex_block_add_filled(ctx, &a->base, "ln_gamma", D, 1.0));
  EX_TRY(ex_block_add_filled(ctx, &a->base, "ln_beta", D, 0.0));
  EX_TRY(ex_block_add_random(ctx, &a->base, "Wqkv", D * 3 * D, sqrt(3.0 / (double)D), &rng));
  EX_TRY(ex_block_add_random(ctx, &a->base, "Wo", D * D, sqrt(3.0 / (double)D), &rng));

  /* One causal (T, T) mask, broadcast over the B*H score matrices. */
  m = malloc((size_t)(T * T) * sizeof *m);
  if (!m) {
    st = BK_ERR_OUT_OF_MEMORY;
    goto done;
  }
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < T; j++) m[i * T + j] = j <= i ? 1.0 : 0.0;
  EX_TRY(ex_from_doubles(ctx, dtype, m, T * T, &causal));
  EX_TRY(bk_broadcast_to(ctx, causal, (const int64_t[]){T, T}, 2,
                         (const int64_t[]){B * H, T, T}, 3, (const int64_t[]){0, 1, 2},
                         &a->mask));
  *out_block = &a->base;
done:
  free(m);
  EX_RELEASE(&causal);
  if (st != BK_OK) ex_block_destroy(&a->base);
  return st;
}
