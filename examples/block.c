/*
 * block.c — the block interface, a linear layer, a chain of blocks and
 * plain SGD.
 *
 * A block is a forward that keeps what its backward needs, a backward that
 * returns the input gradient and writes each parameter's gradient, and a
 * list of parameters. Nothing records a graph: a chain simply runs its
 * children's backwards in reverse order.
 */
#include "examples.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bk_status ex_block_forward(bk_context *ctx, ex_block *b, const bk_buffer *x, bk_buffer **y) {
  return b->ops->forward(ctx, b, x, y);
}

bk_status ex_block_backward(bk_context *ctx, ex_block *b, const bk_buffer *dy, bk_buffer **dx) {
  return b->ops->backward(ctx, b, dy, dx);
}

void ex_block_destroy(ex_block *b) {
  if (!b) return;
  if (b->ops->destroy) b->ops->destroy(b);
  for (int i = 0; i < EX_OWN_PARAMS; i++) EX_RELEASE(&b->own[i].value, &b->own[i].grad);
  free(b);
}

bk_status ex_block_add_param(ex_block *b, const char *name, int64_t n, bk_buffer **value) {
  int i = 0;
  while (i < EX_OWN_PARAMS && b->own[i].value) i++;
  if (i == EX_OWN_PARAMS || b->n_params == EX_MAX_PARAMS) {
    EX_RELEASE(value);
    return BK_ERR_INVALID_ARGUMENT;
  }
  ex_param *p = &b->own[i];
  snprintf(p->name, sizeof p->name, "%s", name);
  p->n = n;
  p->value = *value;
  p->grad = NULL;
  *value = NULL;
  b->param[b->n_params++] = p;
  return BK_OK;
}

bk_status ex_block_add_random(bk_context *ctx, ex_block *b, const char *name, int64_t n,
                              double bound, ex_rng *rng) {
  bk_buffer *v = NULL;
  bk_status st = ex_random(ctx, b->dtype, rng, bound, n, &v);
  return st == BK_OK ? ex_block_add_param(b, name, n, &v) : st;
}

bk_status ex_block_add_filled(bk_context *ctx, ex_block *b, const char *name, int64_t n,
                              double value) {
  bk_buffer *v = NULL;
  bk_status st = ex_fill(ctx, b->dtype, value, n, &v);
  return st == BK_OK ? ex_block_add_param(b, name, n, &v) : st;
}

void *ex_block_alloc(size_t size, const ex_block_ops *ops, const char *name, bk_dtype dtype,
                     int64_t in_len, int64_t out_len) {
  ex_block *b = calloc(1, size);
  if (!b) return NULL;
  b->ops = ops;
  snprintf(b->name, sizeof b->name, "%s", name);
  b->dtype = dtype;
  b->in_len = in_len;
  b->out_len = out_len;
  return b;
}

void ex_set_grad(ex_param *p, bk_buffer **g) {
  bk_buffer_release(p->grad);
  p->grad = *g;
  *g = NULL;
}

ex_param *ex_block_param(const ex_block *b, const char *name) {
  for (int i = 0; i < b->n_params; i++)
    if (strcmp(b->param[i]->name, name) == 0) return b->param[i];
  return NULL;
}

bk_status ex_sgd_next(bk_context *ctx, const ex_param *p, double lr, bk_buffer **next) {
  return ex_axpby(ctx, 1.0, p->value, -lr, p->grad, p->n, next);
}

bk_status ex_sgd_step(bk_context *ctx, ex_block *b, double lr) {
  for (int i = 0; i < b->n_params; i++) {
    ex_param *p = b->param[i];
    if (!p->grad) continue;
    bk_buffer *next = NULL;
    bk_status st = ex_sgd_next(ctx, p, lr, &next);
    if (st != BK_OK) return st;
    bk_buffer_release(p->value);
    p->value = next;
  }
  return BK_OK;
}

/* ---- linear layer ------------------------------------------------------------------ */

typedef struct ex_linear {
  ex_block base;
  int64_t rows, in, out;
  bk_buffer *x; /* (rows, in), saved by the forward */
} ex_linear;

static bk_status linear_forward(bk_context *ctx, ex_block *b, const bk_buffer *x, bk_buffer **y) {
  ex_linear *l = (ex_linear *)b;
  bk_status st = BK_OK;
  bk_buffer *xw = NULL;
  const bk_buffer *W = b->param[0]->value, *bias = b->param[1]->value;
  *y = NULL;
  EX_RELEASE(&l->x);
  EX_TRY(bk_bmm(ctx, x, W, 1, l->rows, l->in, l->out, 0, 0, &xw)); /* (rows, out) */
  EX_TRY(ex_add_bias(ctx, xw, bias, l->rows, l->out, y));
  l->x = bk_buffer_retain((bk_buffer *)x);
done:
  EX_RELEASE(&xw);
  return st;
}

static bk_status linear_backward(bk_context *ctx, ex_block *b, const bk_buffer *dy,
                                 bk_buffer **dx) {
  ex_linear *l = (ex_linear *)b;
  bk_status st = BK_OK;
  bk_buffer *dW = NULL, *db = NULL;
  const bk_buffer *W = b->param[0]->value;
  *dx = NULL;
  EX_TRY(bk_bmm(ctx, l->x, dy, 1, l->in, l->rows, l->out, 1, 0, &dW));  /* x^T dy */
  EX_TRY(bk_sum_axis(ctx, dy, (const int64_t[]){l->rows, l->out}, 2, 0, &db));
  EX_TRY(bk_bmm(ctx, dy, W, 1, l->rows, l->out, l->in, 0, 1, dx));      /* dy W^T */
  ex_set_grad(b->param[0], &dW);
  ex_set_grad(b->param[1], &db);
done:
  EX_RELEASE(&dW, &db);
  return st;
}

static void linear_destroy(ex_block *b) { EX_RELEASE(&((ex_linear *)b)->x); }

static const ex_block_ops linear_ops = {linear_forward, linear_backward, linear_destroy};

bk_status ex_linear_create(bk_context *ctx, bk_dtype dtype, int64_t rows, int64_t in,
                           int64_t out, uint64_t seed, ex_block **out_block) {
  bk_status st = BK_OK;
  ex_rng rng = ex_rng_seed(seed);
  *out_block = NULL;
  ex_linear *l = ex_block_alloc(sizeof *l, &linear_ops, "linear", dtype, rows * in, rows * out);
  if (!l) return BK_ERR_OUT_OF_MEMORY;
  l->rows = rows;
  l->in = in;
  l->out = out;
  /* Uniform entries with variance 1/in keep the activations' scale. */
  EX_TRY(ex_block_add_random(ctx, &l->base, "W", in * out, sqrt(3.0 / (double)in), &rng));
  EX_TRY(ex_block_add_filled(ctx, &l->base, "bias", out, 0.0));
  *out_block = &l->base;
done:
  if (st != BK_OK) ex_block_destroy(&l->base);
  return st;
}

/* ---- chain --------------------------------------------------------------------------- */

enum { EX_MAX_CHAIN = 16 };

typedef struct ex_chain {
  ex_block base;
  int n;
  ex_block *child[EX_MAX_CHAIN];
} ex_chain;

static bk_status chain_forward(bk_context *ctx, ex_block *b, const bk_buffer *x, bk_buffer **y) {
  ex_chain *c = (ex_chain *)b;
  bk_buffer *cur = bk_buffer_retain((bk_buffer *)x);
  *y = NULL;
  for (int i = 0; i < c->n; i++) {
    bk_buffer *next = NULL;
    bk_status st = ex_block_forward(ctx, c->child[i], cur, &next);
    bk_buffer_release(cur);
    if (st != BK_OK) return st;
    cur = next;
  }
  *y = cur;
  return BK_OK;
}

static bk_status chain_backward(bk_context *ctx, ex_block *b, const bk_buffer *dy,
                                bk_buffer **dx) {
  ex_chain *c = (ex_chain *)b;
  bk_buffer *cur = bk_buffer_retain((bk_buffer *)dy);
  *dx = NULL;
  for (int i = c->n - 1; i >= 0; i--) {
    bk_buffer *next = NULL;
    bk_status st = ex_block_backward(ctx, c->child[i], cur, &next);
    bk_buffer_release(cur);
    if (st != BK_OK) return st;
    cur = next;
  }
  *dx = cur;
  return BK_OK;
}

static void chain_destroy(ex_block *b) {
  ex_chain *c = (ex_chain *)b;
  for (int i = 0; i < c->n; i++) ex_block_destroy(c->child[i]);
}

static const ex_block_ops chain_ops = {chain_forward, chain_backward, chain_destroy};

void ex_block_set_capturable(ex_block *b) {
  b->capturable = 1;
  if (b->ops != &chain_ops) return;
  const ex_chain *c = (const ex_chain *)b;
  for (int i = 0; i < c->n; i++) ex_block_set_capturable(c->child[i]);
}

bk_status ex_chain_create(const char *name, ex_block **children, int n, ex_block **out_block) {
  *out_block = NULL;
  ex_chain *c = calloc(1, sizeof *c);
  int params = 0;
  for (int i = 0; i < n; i++) params += children[i]->n_params;
  int fits = c && n >= 1 && n <= EX_MAX_CHAIN && params <= EX_MAX_PARAMS;
  for (int i = 1; fits && i < n; i++) fits = children[i - 1]->out_len == children[i]->in_len;
  if (!fits) {
    for (int i = 0; i < n; i++) ex_block_destroy(children[i]);
    free(c);
    return c ? BK_ERR_INVALID_ARGUMENT : BK_ERR_OUT_OF_MEMORY;
  }
  c->base.ops = &chain_ops;
  snprintf(c->base.name, sizeof c->base.name, "%s", name);
  c->base.dtype = children[0]->dtype;
  c->base.in_len = children[0]->in_len;
  c->base.out_len = children[n - 1]->out_len;
  c->n = n;
  for (int i = 0; i < n; i++) {
    c->child[i] = children[i];
    for (int j = 0; j < children[i]->n_params; j++)
      c->base.param[c->base.n_params++] = children[i]->param[j];
  }
  *out_block = &c->base;
  return BK_OK;
}
