/*
 * scan.c — front door of the diagonal selective scans: bk_scan_diag,
 * bk_scan_diag_var and their gradients bk_scan_diag_backward,
 * bk_scan_diag_var_backward.
 *
 * The shared form has one coefficient pair (A, B) per state, the var form
 * one per (t, state); each pair of entry points shares one implementation
 * with a `var` flag, as the backend members do.
 */
#include "../core/internal.h"

/* Checks the four inputs every scan takes: non-NULL, sizes, lengths.
 * *elems = seq_len*state, *coef = length of A and B. */
static bk_status check_inputs(const char *fn, const bk_buffer *A, const bk_buffer *B,
                              const bk_buffer *X, const bk_buffer *h0, int64_t seq_len,
                              int64_t state, int var, int64_t *elems, int64_t *coef) {
  bk_status st = bk__check_ptr(fn, "A", A);
  if (st == BK_OK) st = bk__check_ptr(fn, "B", B);
  if (st == BK_OK) st = bk__check_ptr(fn, "X", X);
  if (st == BK_OK) st = bk__check_ptr(fn, "h0", h0);
  if (st == BK_OK) st = bk__check_size(fn, "seq_len", seq_len);
  if (st == BK_OK) st = bk__check_size(fn, "state", state);
  if (st == BK_OK) st = bk__mul(fn, "seq_len*state", seq_len, state, elems);
  if (st != BK_OK) return st;
  *coef = var ? *elems : state;
  st = bk__check_len(fn, "A", A, *coef);
  if (st == BK_OK) st = bk__check_len(fn, "B", B, *coef);
  if (st == BK_OK) st = bk__check_len(fn, "X", X, *elems);
  if (st == BK_OK) st = bk__check_len(fn, "h0", h0, state);
  return st;
}

static bk_status forward(const char *fn, bk_context *ctx, const bk_buffer *A,
                         const bk_buffer *B, const bk_buffer *X, const bk_buffer *h0,
                         int64_t seq_len, int64_t state, int var, bk_buffer **out) {
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t elems = 0, coef = 0;
  st = check_inputs(fn, A, B, X, h0, seq_len, state, var, &elems, &coef);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 4, (const bk_buffer *const[]){A, B, X, h0},
                (const char *const[]){"A", "B", "X", "h0"});
  if (st != BK_OK) return st;
  bk_buffer *y = NULL;
  st = bk__new_output(&c, elems, &y);
  if (st == BK_OK && elems > 0)
    st = c.be->scan_diag(c.ctx, c.dtype, A->data, B->data, X->data, h0->data, y->data, seq_len,
                         state, var);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

static bk_status backward(const char *fn, bk_context *ctx, const bk_buffer *A,
                          const bk_buffer *B, const bk_buffer *X, const bk_buffer *h0,
                          const bk_buffer *out, const bk_buffer *dy, int64_t seq_len,
                          int64_t state, int var, bk_buffer **dA, bk_buffer **dB,
                          bk_buffer **dX, bk_buffer **dh0) {
  bk_status st = bk__clear_outs(fn, 4, (bk_buffer **const[]){dA, dB, dX, dh0},
                            (const char *const[]){"dA", "dB", "dX", "dh0"});
  if (st != BK_OK) return st;
  /* NULL inputs are reported in argument order before any size check. */
  st = bk__check_ptr(fn, "A", A);
  if (st == BK_OK) st = bk__check_ptr(fn, "B", B);
  if (st == BK_OK) st = bk__check_ptr(fn, "X", X);
  if (st == BK_OK) st = bk__check_ptr(fn, "h0", h0);
  if (st == BK_OK) st = bk__check_ptr(fn, "out", out);
  if (st == BK_OK) st = bk__check_ptr(fn, "dy", dy);
  if (st != BK_OK) return st;
  int64_t elems = 0, coef = 0;
  st = check_inputs(fn, A, B, X, h0, seq_len, state, var, &elems, &coef);
  if (st == BK_OK) st = bk__check_len(fn, "out", out, elems);
  if (st == BK_OK) st = bk__check_len(fn, "dy", dy, elems);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 6, (const bk_buffer *const[]){A, B, X, h0, out, dy},
                (const char *const[]){"A", "B", "X", "h0", "out", "dy"});
  if (st != BK_OK) return st;

  bk_buffer *gA = NULL, *gB = NULL, *gX = NULL, *gh = NULL;
  if (elems == 0) {
    /* No steps (or no states): the sums over t are empty, so the shared
     * coefficients' gradients and dh0 are zeros; per-step gradients are
     * empty. */
    st = var ? bk__new_output(&c, 0, &gA) : bk__new_zeros(&c, state, &gA);
    if (st == BK_OK) st = var ? bk__new_output(&c, 0, &gB) : bk__new_zeros(&c, state, &gB);
    if (st == BK_OK) st = bk__new_output(&c, 0, &gX);
    if (st == BK_OK) st = bk__new_zeros(&c, state, &gh);
  } else {
    st = bk__new_output(&c, coef, &gA);
    if (st == BK_OK) st = bk__new_output(&c, coef, &gB);
    if (st == BK_OK) st = bk__new_output(&c, elems, &gX);
    if (st == BK_OK) st = bk__new_output(&c, state, &gh);
    if (st == BK_OK)
      st = c.be->scan_diag_backward(c.ctx, c.dtype, A->data, B->data, X->data, h0->data,
                                    out->data, dy->data, gA->data, gB->data, gX->data, gh->data,
                                    seq_len, state, var);
  }
  if (st != BK_OK) {
    bk__drop(&gA);
    bk__drop(&gB);
    bk__drop(&gX);
    bk__drop(&gh);
    return st;
  }
  *dA = gA;
  *dB = gB;
  *dX = gX;
  *dh0 = gh;
  return BK_OK;
}

bk_status bk_scan_diag(bk_context *ctx, const bk_buffer *A, const bk_buffer *B,
                       const bk_buffer *X, const bk_buffer *h0, int64_t seq_len, int64_t state,
                       bk_buffer **out) {
  return forward("bk_scan_diag", ctx, A, B, X, h0, seq_len, state, 0, out);
}

bk_status bk_scan_diag_var(bk_context *ctx, const bk_buffer *A, const bk_buffer *B,
                           const bk_buffer *X, const bk_buffer *h0, int64_t seq_len,
                           int64_t state, bk_buffer **out) {
  return forward("bk_scan_diag_var", ctx, A, B, X, h0, seq_len, state, 1, out);
}

bk_status bk_scan_diag_backward(bk_context *ctx, const bk_buffer *A, const bk_buffer *B,
                                const bk_buffer *X, const bk_buffer *h0, const bk_buffer *out,
                                const bk_buffer *dy, int64_t seq_len, int64_t state,
                                bk_buffer **dA, bk_buffer **dB, bk_buffer **dX,
                                bk_buffer **dh0) {
  return backward("bk_scan_diag_backward", ctx, A, B, X, h0, out, dy, seq_len, state, 0, dA, dB,
                  dX, dh0);
}

bk_status bk_scan_diag_var_backward(bk_context *ctx, const bk_buffer *A, const bk_buffer *B,
                                    const bk_buffer *X, const bk_buffer *h0,
                                    const bk_buffer *out, const bk_buffer *dy, int64_t seq_len,
                                    int64_t state, bk_buffer **dA, bk_buffer **dB,
                                    bk_buffer **dX, bk_buffer **dh0) {
  return backward("bk_scan_diag_var_backward", ctx, A, B, X, h0, out, dy, seq_len, state, 1, dA,
                  dB, dX, dh0);
}
