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

bk_status bk_rows_sum(bk_context *ctx, const bk_buffer *x, int64_t rows, int64_t cols,
                      bk_buffer **out) {
  static const char fn[] = "bk_rows_sum";
  if (!out) return bk__fail(BK_ERR_NULL, fn, "out is NULL");
  *out = NULL;
  int64_t elems = 0;
  bk_status st = check_matrix(fn, "x", x, rows, cols, &elems);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){x}, (const char *const[]){"x"});
  if (st != BK_OK) return st;
  if (elems == 0) return bk__new_zeros(&c, rows, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, rows, &y);
  if (st == BK_OK) st = c.be->rows_sum(c.ctx, c.dtype, x->data, y->data, rows, cols);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}
