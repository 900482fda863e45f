/*
 * spectral.c — an FNO-style spectral layer, forward and backward, composed
 * only from public primitives. x is (B, T, D); the transform runs along T
 * for every (batch, channel); the lowest `modes` of the T/2+1 frequency
 * bins are mixed across channels by a complex D x D matrix per mode.
 *
 * Forward
 *   u    = layernorm(x)                              bk_layernorm_forward
 *   U    = rfft of u per channel  (B*D, T/2+1, 2)    bk_swap_adjacent, bk_rfft
 *   Ur, Ui = real and imaginary parts of the kept modes, (modes, B, D) each:
 *          one transpose puts the bins first, a slice keeps the low ones,
 *          one more swap separates re from im       bk_swap_adjacent, bk_vec_slice
 *   Yr   = Ur Wr - Ui Wi,  Yi = Ur Wi + Ui Wr        bk_bmm (batch modes), ex_axpby
 *          (a complex product as four real ones)
 *   Y    = [Yr, Yi], higher bins zero, back to (B*D, T/2+1, 2)
 *   y    = x + irfft(Y) per channel                  bk_irfft
 *
 * Backward (dy given). Both transforms are linear, so their VJPs are their
 * adjoints, which the other transforms provide up to per-bin weights
 * w_k = 1 for bin 0 (and bin T/2 for even T), 2 otherwise:
 *   irfft(Y)[t] = (1/T) sum_k w_k Re(Y_k e^{2 pi i k t/T}), so
 *   dY = rfft(dy) * w_k / T;
 *   <x, irfft_unnormalized(Z)> = sum_k w_k Re(X_k conj Z_k) with X = rfft(x),
 *   so dx = irfft_unnormalized(dU / w_k) for the rfft's input.
 * The weights are constant buffers multiplied in elementwise (ex_mul).
 * Between the transforms: dWr = Ur^T dYr + Ui^T dYi, dWi = Ur^T dYi - Ui^T dYr,
 * dUr = dYr Wr^T + dYi Wi^T, dUi = dYi Wr^T - dYr Wi^T, per mode.
 */
#include "examples.h"

#include <math.h>
#include <stdlib.h>

typedef struct ex_spectral {
  ex_block base;
  int64_t B, T, D, modes, bins;
  bk_buffer *w_irfft_adj; /* (B*D, bins, 2): w_k / T */
  bk_buffer *w_rfft_adj;  /* (B*D, bins, 2): 1 / w_k */
  /* saved by the forward for the backward */
  bk_buffer *norm, *inv_std; /* layer norm */
  bk_buffer *Ur, *Ui;        /* (modes, B, D) */
} ex_spectral;

enum { LN_GAMMA, LN_BETA, W_RE, W_IM };

static void spectral_drop_saved(ex_spectral *s) {
  EX_RELEASE(&s->norm, &s->inv_std, &s->Ur, &s->Ui);
}

/* Spectrum (B*D, bins, 2) -> real and imaginary parts of the kept modes,
 * (modes, B*D) each. */
static bk_status split_modes(bk_context *ctx, const ex_spectral *s, const bk_buffer *spec,
                             bk_buffer **re, bk_buffer **im) {
  const int64_t BD = s->B * s->D, M = s->modes, n = M * BD;
  bk_status st = BK_OK;
  bk_buffer *t = NULL, *low = NULL, *parts = NULL;
  *re = *im = NULL;
  EX_TRY(bk_swap_adjacent(ctx, spec, (const int64_t[]){BD, s->bins * 2}, 2, 0, &t)); /* bins first */
  EX_TRY(bk_vec_slice(ctx, t, s->bins * 2 * BD, 0, 2 * n, &low));   /* (modes, 2, B*D) */
  EX_TRY(bk_swap_adjacent(ctx, low, (const int64_t[]){M, 2, BD}, 3, 0, &parts)); /* (2, modes, B*D) */
  EX_TRY(bk_vec_slice(ctx, parts, 2 * n, 0, n, re));
  EX_TRY(bk_vec_slice(ctx, parts, 2 * n, n, n, im));
done:
  EX_RELEASE(&t, &low, &parts);
  if (st != BK_OK) EX_RELEASE(re, im);
  return st;
}

/* The inverse arrangement: real and imaginary parts of the kept modes,
 * (modes, B*D) each -> spectrum (B*D, bins, 2) with the other bins zero. */
static bk_status join_modes(bk_context *ctx, const ex_spectral *s, const bk_buffer *re,
                            const bk_buffer *im, bk_buffer **spec) {
  const int64_t BD = s->B * s->D, M = s->modes, n = M * BD;
  const int64_t rest = (s->bins - M) * 2 * BD;
  bk_status st = BK_OK;
  bk_buffer *parts = NULL, *low = NULL, *zeros = NULL, *t = NULL;
  *spec = NULL;
  EX_TRY(bk_vec_concat(ctx, re, im, n, n, &parts));                             /* (2, modes, B*D) */
  EX_TRY(bk_swap_adjacent(ctx, parts, (const int64_t[]){2, M, BD}, 3, 0, &low)); /* (modes, 2, B*D) */
  EX_TRY(bk_buffer_zeros(ctx, s->base.dtype, rest, &zeros));
  EX_TRY(bk_vec_concat(ctx, low, zeros, 2 * n, rest, &t));                      /* (bins, 2, B*D) */
  EX_TRY(bk_swap_adjacent(ctx, t, (const int64_t[]){s->bins * 2, BD}, 2, 0, spec));
done:
  EX_RELEASE(&parts, &low, &zeros, &t);
  return st;
}

/* Per mode, (Pr + i Pi)(Wr + i Wi) with P (modes, B, D) and W (modes, D, D),
 * or with trans == 1 the product with W^T (for the input gradient, where
 * the conjugation is carried by `sign` = -1 on the cross terms). */
static bk_status complex_product(bk_context *ctx, const ex_spectral *s, const bk_buffer *Pr,
                                 const bk_buffer *Pi, const bk_buffer *Wr, const bk_buffer *Wi,
                                 int trans, double sign, bk_buffer **Yr, bk_buffer **Yi) {
  const int64_t M = s->modes, B = s->B, D = s->D, n = M * B * D;
  bk_status st = BK_OK;
  bk_buffer *rr = NULL, *ii = NULL, *ri = NULL, *ir = NULL;
  *Yr = *Yi = NULL;
  EX_TRY(bk_bmm(ctx, Pr, Wr, M, B, D, D, 0, trans, &rr));
  EX_TRY(bk_bmm(ctx, Pi, Wi, M, B, D, D, 0, trans, &ii));
  EX_TRY(bk_bmm(ctx, Pr, Wi, M, B, D, D, 0, trans, &ri));
  EX_TRY(bk_bmm(ctx, Pi, Wr, M, B, D, D, 0, trans, &ir));
  EX_TRY(ex_axpby(ctx, 1.0, rr, -sign, ii, n, Yr));
  EX_TRY(ex_axpby(ctx, sign, ri, 1.0, ir, n, Yi));
done:
  EX_RELEASE(&rr, &ii, &ri, &ir);
  if (st != BK_OK) EX_RELEASE(Yr, Yi);
  return st;
}

static bk_status spectral_forward(bk_context *ctx, ex_block *b, const bk_buffer *x,
                                  bk_buffer **y) {
  ex_spectral *s = (ex_spectral *)b;
  const int64_t B = s->B, T = s->T, D = s->D, rows = B * T;
  bk_status st = BK_OK;
  bk_buffer *u = NULL, *u_t = NULL, *U = NULL, *Yr = NULL, *Yi = NULL, *Y = NULL, *z_t = NULL,
            *z = NULL;
  *y = NULL;
  spectral_drop_saved(s);

  EX_TRY(bk_layernorm_forward(ctx, x, b->param[LN_GAMMA]->value, b->param[LN_BETA]->value, rows,
                              D, 1e-5, &u, &s->norm, &s->inv_std));
  EX_TRY(bk_swap_adjacent(ctx, u, (const int64_t[]){B, T, D}, 3, 1, &u_t)); /* (B, D, T) */
  EX_TRY(bk_rfft(ctx, u_t, B * D, T, &U));
  EX_TRY(split_modes(ctx, s, U, &s->Ur, &s->Ui));
  EX_TRY(complex_product(ctx, s, s->Ur, s->Ui, b->param[W_RE]->value, b->param[W_IM]->value, 0,
                         1.0, &Yr, &Yi));
  EX_TRY(join_modes(ctx, s, Yr, Yi, &Y));
  EX_TRY(bk_irfft(ctx, Y, B * D, T, &z_t));
  EX_TRY(bk_swap_adjacent(ctx, z_t, (const int64_t[]){B, D, T}, 3, 1, &z)); /* (B, T, D) */
  EX_TRY(ex_axpby(ctx, 1.0, x, 1.0, z, rows * D, y));
done:
  EX_RELEASE(&u, &u_t, &U, &Yr, &Yi, &Y, &z_t, &z);
  return st;
}

static bk_status spectral_backward(bk_context *ctx, ex_block *b, const bk_buffer *dy,
                                   bk_buffer **dx) {
  ex_spectral *s = (ex_spectral *)b;
  const int64_t B = s->B, T = s->T, D = s->D, M = s->modes, rows = B * T;
  const int64_t spec_len = B * D * s->bins * 2;
  const bk_buffer *Wr = b->param[W_RE]->value, *Wi = b->param[W_IM]->value;
  bk_status st = BK_OK;
  bk_buffer *dz_t = NULL, *dZ0 = NULL, *dZ = NULL, *dYr = NULL, *dYi = NULL;
  bk_buffer *g1 = NULL, *g2 = NULL, *dWr = NULL, *dWi = NULL, *dUr = NULL, *dUi = NULL;
  bk_buffer *dU0 = NULL, *dU = NULL, *du_t = NULL, *du = NULL, *dxl = NULL, *dgamma = NULL,
            *dbeta = NULL;
  *dx = NULL;

  /* The adjoint of irfft: an rfft with weights w_k / T. */
  EX_TRY(bk_swap_adjacent(ctx, dy, (const int64_t[]){B, T, D}, 3, 1, &dz_t));
  EX_TRY(bk_rfft(ctx, dz_t, B * D, T, &dZ0));
  EX_TRY(ex_mul(ctx, dZ0, s->w_irfft_adj, spec_len, &dZ));
  EX_TRY(split_modes(ctx, s, dZ, &dYr, &dYi));

  /* The weights: real products, batched over modes, transposing the inputs. */
  EX_TRY(bk_bmm(ctx, s->Ur, dYr, M, D, B, D, 1, 0, &g1));
  EX_TRY(bk_bmm(ctx, s->Ui, dYi, M, D, B, D, 1, 0, &g2));
  EX_TRY(ex_axpby(ctx, 1.0, g1, 1.0, g2, M * D * D, &dWr));
  EX_RELEASE(&g1, &g2);
  EX_TRY(bk_bmm(ctx, s->Ur, dYi, M, D, B, D, 1, 0, &g1));
  EX_TRY(bk_bmm(ctx, s->Ui, dYr, M, D, B, D, 1, 0, &g2));
  EX_TRY(ex_axpby(ctx, 1.0, g1, -1.0, g2, M * D * D, &dWi));

  /* The modes' gradient: the product with the conjugate transpose of W. */
  EX_TRY(complex_product(ctx, s, dYr, dYi, Wr, Wi, 1, -1.0, &dUr, &dUi));

  /* The adjoint of rfft: irfft_unnormalized with weights 1 / w_k. */
  EX_TRY(join_modes(ctx, s, dUr, dUi, &dU0));
  EX_TRY(ex_mul(ctx, dU0, s->w_rfft_adj, spec_len, &dU));
  EX_TRY(bk_irfft_unnormalized(ctx, dU, B * D, T, &du_t));
  EX_TRY(bk_swap_adjacent(ctx, du_t, (const int64_t[]){B, D, T}, 3, 1, &du));
  EX_TRY(bk_layernorm_backward(ctx, du, s->norm, s->inv_std, b->param[LN_GAMMA]->value, rows, D,
                               &dxl, &dgamma, &dbeta));
  EX_TRY(ex_axpby(ctx, 1.0, dy, 1.0, dxl, rows * D, dx));

  ex_set_grad(b->param[LN_GAMMA], &dgamma);
  ex_set_grad(b->param[LN_BETA], &dbeta);
  ex_set_grad(b->param[W_RE], &dWr);
  ex_set_grad(b->param[W_IM], &dWi);
done:
  EX_RELEASE(&dz_t, &dZ0, &dZ, &dYr, &dYi, &g1, &g2, &dWr, &dWi, &dUr, &dUi, &dU0, &dU, &du_t,
             &du, &dxl, &dgamma, &dbeta);
  return st;
}

static void spectral_destroy(ex_block *b) {
  ex_spectral *s = (ex_spectral *)b;
  spectral_drop_saved(s);
  EX_RELEASE(&s->w_irfft_adj, &s->w_rfft_adj);
}

static const ex_block_ops spectral_ops = {spectral_forward, spectral_backward, spectral_destroy};

/* A (B*D, bins, 2) buffer holding f(w_k) at every bin k (both parts). */
static bk_status bin_weights(bk_context *ctx, const ex_spectral *s, double scale, int invert,
                             bk_buffer **out) {
  const int64_t bins = s->bins;
  bk_status st = BK_OK;
  bk_buffer *one = NULL;
  double *w = malloc((size_t)(bins * 2) * sizeof *w);
  *out = NULL;
  if (!w) return BK_ERR_OUT_OF_MEMORY;
  for (int64_t k = 0; k < bins; k++) {
    const double wk = (k == 0 || 2 * k == s->T) ? 1.0 : 2.0;
    w[2 * k] = w[2 * k + 1] = invert ? 1.0 / wk : wk * scale;
  }
  EX_TRY(ex_from_doubles(ctx, s->base.dtype, w, bins * 2, &one));
  EX_TRY(bk_broadcast_to(ctx, one, (const int64_t[]){bins * 2}, 1,
                         (const int64_t[]){s->B * s->D, bins * 2}, 2, (const int64_t[]){0, 1},
                         out));
done:
  free(w);
  EX_RELEASE(&one);
  return st;
}

bk_status ex_spectral_create(bk_context *ctx, bk_dtype dtype, const ex_spectral_cfg *cfg,
                             uint64_t seed, ex_block **out_block) {
  const int64_t B = cfg->batch, T = cfg->seq, D = cfg->dim, M = cfg->modes;
  bk_status st = BK_OK;
  ex_rng rng = ex_rng_seed(seed);
  *out_block = NULL;
  if (B < 1 || T < 1 || D < 1 || M < 1 || M > T / 2 + 1) return BK_ERR_INVALID_ARGUMENT;
  ex_spectral *s =
      ex_block_alloc(sizeof *s, &spectral_ops, "spectral layer", dtype, B * T * D, B * T * D);
  if (!s) return BK_ERR_OUT_OF_MEMORY;
  s->B = B;
  s->T = T;
  s->D = D;
  s->modes = M;
  s->bins = T / 2 + 1;
  /* A mode's output sums D complex products of unit-variance inputs;
   * entries of variance 1/(2D) per part keep it at unit scale. */
  const double bound = sqrt(3.0 / (2.0 * (double)D));
  EX_TRY(ex_block_add_filled(ctx, &s->base, "ln_gamma", D, 1.0));
  EX_TRY(ex_block_add_filled(ctx, &s->base, "ln_beta", D, 0.0));
  EX_TRY(ex_block_add_random(ctx, &s->base, "W_re", M * D * D, bound, &rng));
  EX_TRY(ex_block_add_random(ctx, &s->base, "W_im", M * D * D, bound, &rng));
  EX_TRY(bin_weights(ctx, s, 1.0 / (double)T, 0, &s->w_irfft_adj));
  EX_TRY(bin_weights(ctx, s, 1.0, 1, &s->w_rfft_adj));
  *out_block = &s->base;
done:
  if (st != BK_OK) ex_block_destroy(&s->base);
  return st;
}
