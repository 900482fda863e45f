/*
 * softmax.c — front door of bk_softmax: softmax along one axis of a
 * contiguous tensor.
 *
 * The tensor (dims, rank) is reduced to the canonical (outer, n, inner) view
 * the backends take: outer is the product of the dims before the axis, n the
 * axis extent and inner the product of the dims after it.
 */
#include "../core/internal.h"

bk_status bk_softmax(bk_context *ctx, const bk_buffer *x, const int64_t *dims, int rank,
                     int axis, bk_buffer **out) {
  static const char fn[] = "bk_softmax";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  st = bk__check_ptr(fn, "x", x);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = bk__check_dims(fn, "dims", dims, rank, 1, &elems);
  if (st != BK_OK) return st;
  st = bk__check_range(fn, "axis", axis, 0, rank);
  if (st == BK_OK) st = bk__check_len(fn, "x", x, elems);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){x}, (const char *const[]){"x"});
  if (st != BK_OK) return st;
  if (elems == 0) return bk__new_output(&c, 0, out);

  /* Every dim is >= 1 here and their product fits in int64, so the partial
   * products cannot overflow. */
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= dims[i];
  for (int i = axis + 1; i < rank; i++) inner *= dims[i];

  bk_buffer *y = NULL;
  st = bk__new_output(&c, elems, &y);
  if (st == BK_OK) st = c.be->softmax(c.ctx, c.dtype, x->data, y->data, outer, dims[axis], inner);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}
