/*
 * layernorm.c — front door of layer normalization: bk_layernorm_forward and
 * its vector-Jacobian product bk_layernorm_backward.
 *
 * Both are multi-output primitives. Every out-parameter is checked and
 * cleared before anything else, so that on any failure all of them are NULL;
 * outputs already allocated when a later step fails are dropped.
 */
#include "../core/internal.h"

#include <math.h>

/* Sizes of a (rows, cols) layer-norm call: both non-negative, cols >= 1 and
 * rows*cols representable. */
static bk_status check_geometry(const char *fn, int64_t rows, int64_t cols, int64_t *elems) {
  bk_status st = bk__check_size(fn, "rows", rows);
  if (st == BK_OK) st = bk__check_size(fn, "cols", cols);
  if (st != BK_OK) return st;
  if (cols == 0) return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "cols = 0 must be at least 1");
  return bk__mul(fn, "rows*cols", rows, cols, elems);
}

bk_status bk_layernorm_forward(bk_context *ctx, const bk_buffer *x, const bk_buffer *gamma,
                               const bk_buffer *beta, int64_t rows, int64_t cols, double eps,
                               bk_buffer **out, bk_buffer **normalized, bk_buffer **inv_std) {
  static const char fn[] = "bk_layernorm_forward";
  bk_status st = bk__clear_outs(fn, 3, (bk_buffer **const[]){out, normalized, inv_std},
                            (const char *const[]){"out", "normalized", "inv_std"});
  if (st != BK_OK) return st;
  st = bk__check_ptr(fn, "x", x);
  if (st == BK_OK) st = bk__check_ptr(fn, "gamma", gamma);
  if (st == BK_OK) st = bk__check_ptr(fn, "beta", beta);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = check_geometry(fn, rows, cols, &elems);
  if (st != BK_OK) return st;
  if (!isfinite(eps)) return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "eps = %g is not finite", eps);
  if (eps < 0) return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "eps = %g is negative", eps);
  st = bk__check_len(fn, "x", x, elems);
  if (st == BK_OK) st = bk__check_len(fn, "gamma", gamma, cols);
  if (st == BK_OK) st = bk__check_len(fn, "beta", beta, cols);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 3, (const bk_buffer *const[]){x, gamma, beta},
                (const char *const[]){"x", "gamma", "beta"});
  if (st != BK_OK) return st;

  bk_buffer *y = NULL, *nrm = NULL, *istd = NULL;
  st = bk__new_output(&c, elems, &y);
  if (st == BK_OK) st = bk__new_output(&c, elems, &nrm);
  if (st == BK_OK) st = bk__new_output(&c, rows, &istd);
  /* rows == 0: three empty results, nothing to compute. */
  if (st == BK_OK && rows > 0)
    st = c.be->layernorm_forward(c.ctx, c.dtype, x->data, gamma->data, beta->data, y->data,
                                 nrm->data, istd->data, rows, cols, eps);
  if (st != BK_OK) {
    bk__drop(&y);
    bk__drop(&nrm);
    bk__drop(&istd);
    return st;
  }
  *out = y;
  *normalized = nrm;
  *inv_std = istd;
  return BK_OK;
}

bk_status bk_layernorm_backward(bk_context *ctx, const bk_buffer *dout,
                                const bk_buffer *normalized, const bk_buffer *inv_std,
                                const bk_buffer *gamma, int64_t rows, int64_t cols,
                                bk_buffer **dx, bk_buffer **dgamma, bk_buffer **dbeta) {
  static const char fn[] = "bk_layernorm_backward";
  bk_status st = bk__clear_outs(fn, 3, (bk_buffer **const[]){dx, dgamma, dbeta},
                            (const char *const[]){"dx", "dgamma", "dbeta"});
  if (st != BK_OK) return st;
  st = bk__check_ptr(fn, "dout", dout);
  if (st == BK_OK) st = bk__check_ptr(fn, "normalized", normalized);
  if (st == BK_OK) st = bk__check_ptr(fn, "inv_std", inv_std);
  if (st == BK_OK) st = bk__check_ptr(fn, "gamma", gamma);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = check_geometry(fn, rows, cols, &elems);
  if (st == BK_OK) st = bk__check_len(fn, "dout", dout, elems);
  if (st == BK_OK) st = bk__check_len(fn, "normalized", normalized, elems);
  if (st == BK_OK) st = bk__check_len(fn, "inv_std", inv_std, rows);
  if (st == BK_OK) st = bk__check_len(fn, "gamma", gamma, cols);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 4, (const bk_buffer *const[]){dout, normalized, inv_std, gamma},
                (const char *const[]){"dout", "normalized", "inv_std", "gamma"});
  if (st != BK_OK) return st;

  bk_buffer *gx = NULL, *gg = NULL, *gb = NULL;
  if (rows == 0) {
    /* No rows: dx is empty and the column sums are empty sums. */
    st = bk__new_output(&c, 0, &gx);
    if (st == BK_OK) st = bk__new_zeros(&c, cols, &gg);
    if (st == BK_OK) st = bk__new_zeros(&c, cols, &gb);
  } else {
    st = bk__new_output(&c, elems, &gx);
    if (st == BK_OK) st = bk__new_output(&c, cols, &gg);
    if (st == BK_OK) st = bk__new_output(&c, cols, &gb);
    if (st == BK_OK)
      st = c.be->layernorm_backward(c.ctx, c.dtype, dout->data, normalized->data, inv_std->data,
                                    gamma->data, gx->data, gg->data, gb->data, rows, cols);
  }
  if (st != BK_OK) {
    bk__drop(&gx);
    bk__drop(&gg);
    bk__drop(&gb);
    return st;
  }
  *dx = gx;
  *dgamma = gg;
  *dbeta = gb;
  return BK_OK;
}
