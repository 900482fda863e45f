/*
 * bmm.c — front door of the batched matrix products: bk_bmm and
 * bk_bmm_scaled.
 *
 * Both check their arguments in one order (out-parameters, NULL inputs,
 * sizes, flags, scale, overflow-checked products, lengths, then dtype and
 * device through bk__bind), handle the empty cases (an empty result, and
 * n == 0 which gives zeros) and call the backend once.
 */
#include "../core/internal.h"

#include <math.h>

/* Element counts of the operands and the result. */
typedef struct bmm_sizes {
  int64_t a, b, c;
} bmm_sizes;

/* The checks both products share: inputs, sizes, flags, products, lengths.
 * A is stored (batch, m, n), or (batch, n, m) with trans_a; B is stored
 * (batch, n, p), or (batch, p, n) with trans_b: the element counts do not
 * depend on the flags. */
static bk_status check_bmm(const char *fn, const bk_buffer *A, const bk_buffer *B, int64_t batch,
                           int64_t m, int64_t n, int64_t p, int trans_a, int trans_b,
                           bmm_sizes *sz) {
  bk_status st = bk__check_ptr(fn, "A", A);
  if (st == BK_OK) st = bk__check_ptr(fn, "B", B);
  if (st == BK_OK) st = bk__check_size(fn, "batch", batch);
  if (st == BK_OK) st = bk__check_size(fn, "m", m);
  if (st == BK_OK) st = bk__check_size(fn, "n", n);
  if (st == BK_OK) st = bk__check_size(fn, "p", p);
  if (st == BK_OK) st = bk__check_flag(fn, "trans_a", trans_a);
  if (st == BK_OK) st = bk__check_flag(fn, "trans_b", trans_b);
  int64_t bm = 0, bn = 0;
  if (st == BK_OK) st = bk__mul(fn, "batch*m", batch, m, &bm);
  if (st == BK_OK) st = bk__mul(fn, "batch*m*n", bm, n, &sz->a);
  if (st == BK_OK) st = bk__mul(fn, "batch*n", batch, n, &bn);
  if (st == BK_OK) st = bk__mul(fn, "batch*n*p", bn, p, &sz->b);
  if (st == BK_OK) st = bk__mul(fn, "batch*m*p", bm, p, &sz->c);
  if (st == BK_OK) st = bk__check_len(fn, "A", A, sz->a);
  if (st == BK_OK) st = bk__check_len(fn, "B", B, sz->b);
  return st;
}

bk_status bk_bmm(bk_context *ctx, const bk_buffer *A, const bk_buffer *B, int64_t batch,
                 int64_t m, int64_t n, int64_t p, int trans_a, int trans_b, bk_buffer **out) {
  static const char fn[] = "bk_bmm";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  bmm_sizes sz;
  st = check_bmm(fn, A, B, batch, m, n, p, trans_a, trans_b, &sz);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 2, (const bk_buffer *const[]){A, B},
                (const char *const[]){"A", "B"});
  if (st != BK_OK) return st;
  /* An empty result needs no product; an empty contraction is a sum of
   * nothing. */
  if (sz.c == 0) return bk__new_output(&c, 0, out);
  if (n == 0) return bk__new_zeros(&c, sz.c, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, sz.c, &y);
  if (st == BK_OK)
    st = c.be->bmm(c.ctx, c.dtype, A->data, B->data, y->data, batch, m, n, p, trans_a, trans_b);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

bk_status bk_bmm_scaled(bk_context *ctx, const bk_buffer *A, const bk_buffer *B, int64_t batch,
                        int64_t m, int64_t n, int64_t p, int trans_a, int trans_b, double scale,
                        bk_buffer **out, int *range_loss) {
  static const char fn[] = "bk_bmm_scaled";
  /* Both out-parameters are cleared before any other check, so a failure
   * leaves NULL and 0 behind whichever argument was wrong. */
  bk_status st = bk__clear_out(fn, out);
  if (range_loss) *range_loss = 0;
  if (st != BK_OK) return st;
  if (!range_loss) return bk__fail(BK_ERR_NULL, fn, "range_loss is NULL");
  /* A flag stored over the result's slot would corrupt the handle. Both were
   * cleared to zero bytes above, so *out still reads NULL. The addresses are
   * compared as integers: they may belong to different objects. */
  const uintptr_t o = (uintptr_t)out, r = (uintptr_t)range_loss;
  if (r < o + sizeof *out && o < r + sizeof *range_loss)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "range_loss and out overlap");
  bmm_sizes sz;
  st = check_bmm(fn, A, B, batch, m, n, p, trans_a, trans_b, &sz);
  if (st != BK_OK) return st;
  if (!isfinite(scale) || !(scale > 0))
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "scale = %g must be finite and > 0", scale);
  bk_call c;
  st = bk__bind(&c, fn, ctx, 2, (const bk_buffer *const[]){A, B},
                (const char *const[]){"A", "B"});
  if (st != BK_OK) return st;
  /* An empty result has no entry that could lose range. With n == 0 every
   * entry is an exact zero, which is below the smallest normal: flagged. */
  if (sz.c == 0) return bk__new_output(&c, 0, out);
  if (n == 0) {
    st = bk__new_zeros(&c, sz.c, out);
    if (st == BK_OK) *range_loss = 1;
    return st;
  }
  bk_buffer *y = NULL;
  int flag = 0;
  st = bk__new_output(&c, sz.c, &y);
  if (st == BK_OK)
    st = c.be->bmm_scaled(c.ctx, c.dtype, A->data, B->data, y->data, batch, m, n, p, trans_a,
                          trans_b, scale, &flag);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  *range_loss = flag ? 1 : 0;
  return BK_OK;
}
