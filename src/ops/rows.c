/*
 * rows.c — front door of the row reductions and masks over flat (rows, cols)
 * buffers: bk_rows_sum, bk_rows_max, bk_rows_first_max_mask,
 * bk_rows_topk_mask, bk_rows_masked_softmax.
 *
 * Each front door checks its arguments in one order (out-parameters, NULL
 * inputs, sizes, lengths, then dtype and device through bk__bind), handles
 * the empty cases, allocates the outputs and calls the backend once.
 */
#include "../core/internal.h"

#include <inttypes.h>

/* Shared checks of a (rows, cols) input: sizes, and length == rows*cols. */
static bk_status check_matrix(const char *fn, const char *name, const bk_buffer *x, int64_t rows,
                              int64_t cols, int64_t *elems) {
  bk_status st = bk__check_ptr(fn, name, x);
  if (st == BK_OK) st = bk__check_size(fn, "rows", rows);
  if (st == BK_OK) st = bk__check_size(fn, "cols", cols);
  if (st == BK_OK) st = bk__mul(fn, "rows*cols", rows, cols, elems);
  if (st == BK_OK) st = bk__check_len(fn, name, x, *elems);
  return st;
}

/* bk_rows_sum and bk_rows_max: one result per row; cols == 0 gives rows
 * zeros (for the max, the compatibility convention, not -inf). */
static bk_status row_reduce(const char *fn, bk_context *ctx, const bk_buffer *x, int64_t rows,
                            int64_t cols, int max, bk_buffer **out) {
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = check_matrix(fn, "x", x, rows, cols, &elems);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){x}, (const char *const[]){"x"});
  if (st != BK_OK) return st;
  if (elems == 0) return bk__new_zeros(&c, rows, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, rows, &y);
  if (st == BK_OK)
    st = (max ? c.be->rows_max : c.be->rows_sum)(c.ctx, c.dtype, x->data, y->data, rows, cols);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

bk_status bk_rows_sum(bk_context *ctx, const bk_buffer *x, int64_t rows, int64_t cols,
                      bk_buffer **out) {
  return row_reduce("bk_rows_sum", ctx, x, rows, cols, 0, out);
}

bk_status bk_rows_max(bk_context *ctx, const bk_buffer *x, int64_t rows, int64_t cols,
                      bk_buffer **out) {
  return row_reduce("bk_rows_max", ctx, x, rows, cols, 1, out);
}

bk_status bk_rows_first_max_mask(bk_context *ctx, const bk_buffer *x, int64_t rows,
                                 int64_t cols, bk_buffer **out) {
  static const char fn[] = "bk_rows_first_max_mask";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = check_matrix(fn, "x", x, rows, cols, &elems);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){x}, (const char *const[]){"x"});
  if (st != BK_OK) return st;
  if (elems == 0) return bk__new_output(&c, 0, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, elems, &y);
  if (st == BK_OK) st = c.be->rows_first_max_mask(c.ctx, c.dtype, x->data, y->data, rows, cols);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

/* Fills y (length elements of c->dtype, device memory) with 1.0 using only
 * the backend's memory members: one small host block of ones is uploaded,
 * then the filled prefix is doubled by device-to-device copies, so the cost
 * is O(log(length)) calls and the host block stays small. */
static bk_status fill_ones(bk_call *c, bk_buffer *y, int64_t length) {
  enum { BLOCK = 4096 };
  size_t es = bk__dtype_size(c->dtype);
  int64_t first = length < BLOCK ? length : BLOCK;
  void *ones = bk__host_alloc(c->fn, "staging", (size_t)first, es);
  if (!ones) return BK_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < first; i++) {
    if (c->dtype == BK_F32)
      ((float *)ones)[i] = 1.0f;
    else
      ((double *)ones)[i] = 1.0;
  }
  bk_status st = c->be->mem_upload(c->ctx, c->fn, y->data, ones, (size_t)first * es);
  bk__host_free(ones);
  char *base = y->data;
  for (int64_t done = first; st == BK_OK && done < length;) {
    int64_t step = length - done < done ? length - done : done;
    st = c->be->mem_copy(c->ctx, c->fn, base + (size_t)done * es, base, (size_t)step * es);
    done += step;
  }
  return st;
}

bk_status bk_rows_topk_mask(bk_context *ctx, const bk_buffer *x, int64_t rows, int64_t cols,
                            int64_t k, bk_buffer **out) {
  static const char fn[] = "bk_rows_topk_mask";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = check_matrix(fn, "x", x, rows, cols, &elems);
  if (st == BK_OK) st = bk__check_size(fn, "k", k);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){x}, (const char *const[]){"x"});
  if (st != BK_OK) return st;
  if (elems == 0) return bk__new_output(&c, 0, out);
  /* Fewer than 0 beaters is impossible and fewer than cols is certain, so
   * the backend only ever sees 0 < k < cols. */
  if (k == 0) return bk__new_zeros(&c, elems, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, elems, &y);
  if (st == BK_OK) {
    if (k >= cols)
      st = fill_ones(&c, y, elems);
    else
      st = c.be->rows_topk_mask(c.ctx, c.dtype, x->data, y->data, rows, cols, k);
  }
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

bk_status bk_rows_masked_softmax(bk_context *ctx, const bk_buffer *scores, const bk_buffer *mask,
                                 int64_t rows, int64_t cols, bk_buffer **out) {
  static const char fn[] = "bk_rows_masked_softmax";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = bk__check_ptr(fn, "scores", scores);
  if (st == BK_OK) st = bk__check_ptr(fn, "mask", mask);
  if (st == BK_OK) st = check_matrix(fn, "scores", scores, rows, cols, &elems);
  if (st == BK_OK) st = bk__check_len(fn, "mask", mask, elems);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 2, (const bk_buffer *const[]){scores, mask},
                (const char *const[]){"scores", "mask"});
  if (st != BK_OK) return st;
  if (elems == 0) return bk__new_output(&c, 0, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, elems, &y);
  if (st == BK_OK)
    st = c.be->rows_masked_softmax(c.ctx, c.dtype, scores->data, mask->data, y->data, rows, cols);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}
