/*
 * gradcheck.c — checks of a block's backward composition.
 *
 * ex_gradcheck compares the backward's gradients of L = <forward(x), G>
 * with central finite differences (L(v + h) - L(v - h)) / 2h, perturbing
 * one coordinate of x or of a parameter at a time. L is summed on the host
 * in float64. In float64 with h around 1e-5 the difference quotient is
 * good to about 1e-9 for these smooth blocks, so a wrong term in a VJP
 * (typically an error of order 1) stands out by many orders of magnitude.
 *
 * ex_crosscheck runs the same block on two devices from the same host
 * data and compares every output of the forward and the backward.
 */
#include "examples.h"

#include <math.h>
#include <stdlib.h>

/* L = sum_i forward(x)[i] * G[i] in float64 on the host. */
static bk_status probe(bk_context *ctx, ex_block *b, const bk_buffer *x, const double *G,
                       double *y_host, double *L) {
  bk_buffer *y = NULL;
  bk_status st = ex_block_forward(ctx, b, x, &y);
  if (st == BK_OK) st = ex_to_doubles(ctx, y, y_host, b->out_len);
  bk_buffer_release(y);
  double acc = 0.0;
  for (int64_t i = 0; st == BK_OK && i < b->out_len; i++) acc += y_host[i] * G[i];
  *L = acc;
  return st;
}

/* The sampled coordinates of a tensor of n entries: all of them when n <=
 * samples, else `samples` drawn at random. */
static int64_t pick(ex_rng *r, int64_t n, int samples, int j) {
  if (n <= samples) return j;
  return (int64_t)((ex_uniform(r) + 1.0) * 0.5 * (double)n) % n;
}

/* Checks one tensor (x itself when p is NULL, else parameter p) against its
 * analytic gradient `grad` (n entries). */
static bk_status check_tensor(bk_context *ctx, ex_block *b, bk_buffer **x, ex_param *p,
                              const double *grad, int64_t n, const double *G, double *y_host,
                              ex_rng *r, int samples, double h, double *worst) {
  bk_buffer **slot = p ? &p->value : x;
  bk_buffer *keep = *slot;
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  if (!v) return BK_ERR_OUT_OF_MEMORY;
  bk_status st = ex_to_doubles(ctx, keep, v, n);
  const int count = n < samples ? (int)n : samples;
  for (int j = 0; st == BK_OK && j < count; j++) {
    const int64_t i = pick(r, n, samples, j);
    const double v0 = v[i];
    double L[2] = {0.0, 0.0};
    for (int side = 0; side < 2 && st == BK_OK; side++) {
      bk_buffer *moved = NULL;
      v[i] = v0 + (side == 0 ? h : -h);
      st = ex_from_doubles(ctx, b->dtype, v, n, &moved);
      if (st != BK_OK) break;
      *slot = moved;
      st = probe(ctx, b, p ? *x : moved, G, y_host, &L[side]);
      *slot = keep;
      bk_buffer_release(moved);
    }
    v[i] = v0;
    const double fd = (L[0] - L[1]) / (2.0 * h);
    const double err = fabs(fd - grad[i]) / fmax(1.0, fabs(grad[i]));
    if (err > *worst || isnan(err)) *worst = isnan(err) ? INFINITY : err;
  }
  free(v);
  return st;
}

bk_status ex_gradcheck(bk_context *ctx, ex_block *b, const bk_buffer *x, uint64_t seed,
                       int samples, double h, double *max_err) {
  ex_rng r = ex_rng_seed(seed);
  bk_status st = BK_OK;
  bk_buffer *xc = bk_buffer_retain((bk_buffer *)x), *Gb = NULL, *y = NULL, *dx = NULL;
  int64_t most = b->in_len > b->out_len ? b->in_len : b->out_len;
  for (int i = 0; i < b->n_params; i++)
    if (b->param[i]->n > most) most = b->param[i]->n;
  double *G = malloc((size_t)b->out_len * sizeof *G);
  double *y_host = malloc((size_t)b->out_len * sizeof *y_host);
  double *grad = malloc((size_t)most * sizeof *grad);
  *max_err = 0.0;
  if (!G || !y_host || !grad) {
    st = BK_ERR_OUT_OF_MEMORY;
    goto done;
  }
  for (int64_t i = 0; i < b->out_len; i++) G[i] = ex_uniform(&r);
  EX_TRY(ex_from_doubles(ctx, b->dtype, G, b->out_len, &Gb));
  EX_TRY(ex_block_forward(ctx, b, xc, &y));
  EX_TRY(ex_block_backward(ctx, b, Gb, &dx));

  EX_TRY(ex_to_doubles(ctx, dx, grad, b->in_len));
  EX_TRY(check_tensor(ctx, b, &xc, NULL, grad, b->in_len, G, y_host, &r, samples, h, max_err));
  for (int i = 0; i < b->n_params; i++) {
    ex_param *p = b->param[i];
    if (!p->grad) {
      st = BK_ERR_INTERNAL; /* a backward that left a gradient out */
      goto done;
    }
    EX_TRY(ex_to_doubles(ctx, p->grad, grad, p->n));
    EX_TRY(check_tensor(ctx, b, &xc, p, grad, p->n, G, y_host, &r, samples, h, max_err));
  }
done:
  EX_RELEASE(&xc, &Gb, &y, &dx);
  free(G);
  free(y_host);
  free(grad);
  return st;
}

/* max|a - b| / max|b| of two buffers of n entries on any devices. */
static bk_status compare(bk_context *ctx_a, const bk_buffer *a, bk_context *ctx_b,
                         const bk_buffer *b, int64_t n, double *worst) {
  double *va = malloc((size_t)(n > 0 ? n : 1) * sizeof *va);
  double *vb = malloc((size_t)(n > 0 ? n : 1) * sizeof *vb);
  bk_status st = va && vb ? BK_OK : BK_ERR_OUT_OF_MEMORY;
  if (st == BK_OK) st = ex_to_doubles(ctx_a, a, va, n);
  if (st == BK_OK) st = ex_to_doubles(ctx_b, b, vb, n);
  double diff = 0.0, scale = 0.0;
  for (int64_t i = 0; st == BK_OK && i < n; i++) {
    const double d = fabs(va[i] - vb[i]);
    diff = isnan(d) ? INFINITY : fmax(diff, d);
    scale = fmax(scale, fabs(vb[i]));
  }
  if (st == BK_OK) {
    const double rel = diff == 0.0 ? 0.0 : diff / fmax(scale, 1e-300);
    if (rel > *worst) *worst = rel;
  }
  free(va);
  free(vb);
  return st;
}

bk_status ex_crosscheck(bk_context *ctx_a, ex_block *a, bk_context *ctx_b, ex_block *b,
                        const double *x, uint64_t seed, double *max_err) {
  ex_rng r = ex_rng_seed(seed);
  bk_status st = BK_OK;
  bk_buffer *xa = NULL, *xb = NULL, *dya = NULL, *dyb = NULL, *ya = NULL, *yb = NULL;
  bk_buffer *dxa = NULL, *dxb = NULL;
  double *dy = malloc((size_t)a->out_len * sizeof *dy);
  *max_err = 0.0;
  if (!dy || a->n_params != b->n_params || a->out_len != b->out_len) {
    st = dy ? BK_ERR_INVALID_ARGUMENT : BK_ERR_OUT_OF_MEMORY;
    goto done;
  }
  for (int64_t i = 0; i < a->out_len; i++) dy[i] = ex_uniform(&r);
  EX_TRY(ex_from_doubles(ctx_a, a->dtype, x, a->in_len, &xa));
  EX_TRY(ex_from_doubles(ctx_b, b->dtype, x, b->in_len, &xb));
  EX_TRY(ex_from_doubles(ctx_a, a->dtype, dy, a->out_len, &dya));
  EX_TRY(ex_from_doubles(ctx_b, b->dtype, dy, b->out_len, &dyb));
  EX_TRY(ex_block_forward(ctx_a, a, xa, &ya));
  EX_TRY(ex_block_forward(ctx_b, b, xb, &yb));
  EX_TRY(ex_block_backward(ctx_a, a, dya, &dxa));
  EX_TRY(ex_block_backward(ctx_b, b, dyb, &dxb));
  EX_TRY(compare(ctx_a, ya, ctx_b, yb, a->out_len, max_err));
  EX_TRY(compare(ctx_a, dxa, ctx_b, dxb, a->in_len, max_err));
  for (int i = 0; i < a->n_params; i++)
    EX_TRY(compare(ctx_a, a->param[i]->grad, ctx_b, b->param[i]->grad, a->param[i]->n,
                   max_err));
done:
  EX_RELEASE(&xa, &xb, &dya, &dyb, &ya, &yb, &dxa, &dxb);
  free(dy);
  return st;
}
