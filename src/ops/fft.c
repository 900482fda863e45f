/*
 * fft.c — front door of the real FFTs over a packed half spectrum:
 * bk_rfft, bk_irfft and bk_irfft_unnormalized.
 *
 * A signal of length n has n/2+1 spectrum bins stored as [re, im] pairs, so
 * a (batch, n) signal pairs with a (batch, n/2+1, 2) spectrum. n itself
 * always travels with the call: it tells odd from even lengths.
 */
#include "../core/internal.h"

/* Checks batch and n and forms the signal and spectrum lengths. */
static bk_status check_geometry(const char *fn, int64_t batch, int64_t n, int64_t *signal,
                                int64_t *spectrum) {
  bk_status st = bk__check_size(fn, "batch", batch);
  if (st == BK_OK) st = bk__check_size(fn, "n", n);
  if (st != BK_OK) return st;
  if (n == 0) return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "n = 0 must be at least 1");
  int64_t bins = 0;
  st = bk__mul(fn, "batch*n", batch, n, signal);
  if (st == BK_OK) st = bk__mul(fn, "(n/2+1)*2", n / 2 + 1, 2, &bins);
  if (st == BK_OK) st = bk__mul(fn, "batch*(n/2+1)*2", batch, bins, spectrum);
  return st;
}

bk_status bk_rfft(bk_context *ctx, const bk_buffer *x, int64_t batch, int64_t n,
                  bk_buffer **out) {
  static const char fn[] = "bk_rfft";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  st = bk__check_ptr(fn, "x", x);
  if (st != BK_OK) return st;
  int64_t signal = 0, spectrum = 0;
  st = check_geometry(fn, batch, n, &signal, &spectrum);
  if (st == BK_OK) st = bk__check_len(fn, "x", x, signal);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){x}, (const char *const[]){"x"});
  if (st != BK_OK) return st;
  bk_buffer *y = NULL;
  st = bk__new_output(&c, spectrum, &y);
  if (st == BK_OK && batch > 0) st = c.be->rfft(c.ctx, c.dtype, x->data, y->data, batch, n);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

/* The two inverses differ only in the 1/n factor, applied inside the
 * backend's transform when normalize is 1. */
static bk_status inverse(const char *fn, bk_context *ctx, const bk_buffer *spec, int64_t batch,
                         int64_t n, int normalize, bk_buffer **out) {
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  st = bk__check_ptr(fn, "spec", spec);
  if (st != BK_OK) return st;
  int64_t signal = 0, spectrum = 0;
  st = check_geometry(fn, batch, n, &signal, &spectrum);
  if (st == BK_OK) st = bk__check_len(fn, "spec", spec, spectrum);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){spec},
                (const char *const[]){"spec"});
  if (st != BK_OK) return st;
  bk_buffer *y = NULL;
  st = bk__new_output(&c, signal, &y);
  if (st == BK_OK && batch > 0)
    st = c.be->irfft(c.ctx, c.dtype, spec->data, y->data, batch, n, normalize);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

bk_status bk_irfft(bk_context *ctx, const bk_buffer *spec, int64_t batch, int64_t n,
                   bk_buffer **out) {
  return inverse("bk_irfft", ctx, spec, batch, n, 1, out);
}

bk_status bk_irfft_unnormalized(bk_context *ctx, const bk_buffer *spec, int64_t batch,
                                int64_t n, bk_buffer **out) {
  return inverse("bk_irfft_unnormalized", ctx, spec, batch, n, 0, out);
}
