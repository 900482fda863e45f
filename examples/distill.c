/*
 * distill.c — a distillation loss as a block: student logits S (rows, cols)
 * in, one number out,
 *
 *   L = xent_teacher(S, T) + hard_weight * xent_weighted_mean(S, W),
 *
 * the cross-entropy against a fixed teacher's distribution softmax(T) plus
 * a weighted cross-entropy against label weights W (one-hot rows give the
 * usual hard-label loss). Both come from the library: bk_xent_teacher with
 * gradient = 0 gives the first term, with gradient = 1 its gradient
 * (softmax(S) - softmax(T)) / rows; bk_xent_weighted_mean gives the second
 * term, whose gradient is composed:
 *
 *   d/dS[r,c] = (softmax(S)[r,c] * sum_c' W[r,c'] - W[r,c]) / rows
 *
 * from bk_softmax, bk_rows_sum, bk_broadcast_col and ex_mul / ex_axpby. The
 * backward scales the gradient by the upstream one-element dy (a device
 * scalar) with one (n, 1) x (1, 1) product.
 */
#include "examples.h"

#include <stdlib.h>

typedef struct ex_distill {
  ex_block base;
  int64_t rows, cols;
  double hard_weight;
  bk_buffer *teacher; /* (rows, cols) */
  bk_buffer *weights; /* (rows, cols) */
  bk_buffer *S;       /* (rows, cols), saved by the forward */
} ex_distill;

static bk_status distill_forward(bk_context *ctx, ex_block *b, const bk_buffer *x,
                                 bk_buffer **y) {
  ex_distill *d = (ex_distill *)b;
  bk_status st = BK_OK;
  bk_buffer *soft = NULL, *hard = NULL;
  *y = NULL;
  EX_RELEASE(&d->S);
  EX_TRY(bk_xent_teacher(ctx, x, d->teacher, d->rows, d->cols, 0, &soft));
  EX_TRY(bk_xent_weighted_mean(ctx, x, d->weights, d->rows, d->cols, &hard));
  EX_TRY(ex_axpby(ctx, 1.0, soft, d->hard_weight, hard, 1, y));
  d->S = bk_buffer_retain((bk_buffer *)x);
done:
  EX_RELEASE(&soft, &hard);
  return st;
}

static bk_status distill_backward(bk_context *ctx, ex_block *b, const bk_buffer *dy,
                                  bk_buffer **dx) {
  ex_distill *d = (ex_distill *)b;
  const int64_t rows = d->rows, cols = d->cols, n = rows * cols;
  const double inv_rows = 1.0 / (double)(rows > 1 ? rows : 1);
  bk_status st = BK_OK;
  bk_buffer *g_soft = NULL, *P = NULL, *wsum = NULL, *wsum_wide = NULL, *Pw = NULL,
            *g_hard = NULL, *g = NULL;
  *dx = NULL;
  EX_TRY(bk_xent_teacher(ctx, d->S, d->teacher, rows, cols, 1, &g_soft));
  EX_TRY(bk_softmax(ctx, d->S, (const int64_t[]){rows, cols}, 2, 1, &P));
  EX_TRY(bk_rows_sum(ctx, d->weights, rows, cols, &wsum));
  EX_TRY(bk_broadcast_col(ctx, wsum, rows, cols, &wsum_wide));
  EX_TRY(ex_mul(ctx, P, wsum_wide, n, &Pw));
  EX_TRY(ex_axpby(ctx, inv_rows, Pw, -inv_rows, d->weights, n, &g_hard));
  EX_TRY(ex_axpby(ctx, 1.0, g_soft, d->hard_weight, g_hard, n, &g));
  EX_TRY(ex_scale_by(ctx, g, dy, n, dx));
done:
  EX_RELEASE(&g_soft, &P, &wsum, &wsum_wide, &Pw, &g_hard, &g);
  return st;
}

static void distill_destroy(ex_block *b) {
  ex_distill *d = (ex_distill *)b;
  EX_RELEASE(&d->teacher, &d->weights, &d->S);
}

static const ex_block_ops distill_ops = {distill_forward, distill_backward, distill_destroy};

bk_status ex_distill_set_targets(bk_context *ctx, ex_block *b, const double *teacher,
                                 const double *weights) {
  ex_distill *d = (ex_distill *)b;
  bk_buffer *t = NULL, *w = NULL;
  bk_status st = ex_from_doubles(ctx, b->dtype, teacher, d->rows * d->cols, &t);
  if (st == BK_OK) st = ex_from_doubles(ctx, b->dtype, weights, d->rows * d->cols, &w);
  if (st != BK_OK) {
    EX_RELEASE(&t, &w);
    return st;
  }
  EX_RELEASE(&d->teacher, &d->weights);
  d->teacher = t;
  d->weights = w;
  return BK_OK;
}

bk_status ex_distill_use_targets(ex_block *b, bk_buffer *teacher, bk_buffer *weights) {
  ex_distill *d = (ex_distill *)b;
  const int64_t n = d->rows * d->cols;
  if (!teacher || !weights || bk_buffer_length(teacher) != n || bk_buffer_length(weights) != n ||
      bk_buffer_dtype(teacher) != b->dtype || bk_buffer_dtype(weights) != b->dtype)
    return BK_ERR_INVALID_ARGUMENT;
  EX_RELEASE(&d->teacher, &d->weights);
  d->teacher = bk_buffer_retain(teacher);
  d->weights = bk_buffer_retain(weights);
  return BK_OK;
}

bk_status ex_distill_create(bk_context *ctx, bk_dtype dtype, int64_t rows, int64_t cols,
                            double hard_weight, ex_block **out_block) {
  bk_status st = BK_OK;
  *out_block = NULL;
  if (rows < 1 || cols < 1) return BK_ERR_INVALID_ARGUMENT;
  ex_distill *d = ex_block_alloc(sizeof *d, &distill_ops, "distillation loss", dtype,
                                 rows * cols, 1);
  if (!d) return BK_ERR_OUT_OF_MEMORY;
  d->rows = rows;
  d->cols = cols;
  d->hard_weight = hard_weight;
  /* Until targets are set: a uniform teacher and no hard labels. */
  EX_TRY(bk_buffer_zeros(ctx, dtype, rows * cols, &d->teacher));
  EX_TRY(bk_buffer_zeros(ctx, dtype, rows * cols, &d->weights));
  *out_block = &d->base;
done:
  if (st != BK_OK) ex_block_destroy(&d->base);
  return st;
}
