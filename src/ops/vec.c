/*
 * vec.c — front door of the flat vector copies: bk_vec_concat and
 * bk_vec_slice.
 *
 * Both are pure copies of contiguous element ranges, so they need no
 * primitive member of the backend table: they allocate the result and fill
 * it with the backend's mem_copy member (a device-to-device copy queued on
 * the context's stream on CUDA). Argument checks run in the usual order:
 * out-parameter, NULL inputs, sizes, lengths, then dtype and device.
 */
#include "../core/internal.h"

#include <inttypes.h>

/* Byte address of element `i` of a device array of elements of size es. */
static void *elem_at(void *base, int64_t i, size_t es) { return (char *)base + (size_t)i * es; }

bk_status bk_vec_concat(bk_context *ctx, const bk_buffer *a, const bk_buffer *b, int64_t n,
                        int64_t m, bk_buffer **out) {
  static const char fn[] = "bk_vec_concat";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t total = 0;
  st = bk__check_ptr(fn, "a", a);
  if (st == BK_OK) st = bk__check_ptr(fn, "b", b);
  if (st == BK_OK) st = bk__check_size(fn, "n", n);
  if (st == BK_OK) st = bk__check_size(fn, "m", m);
  if (st == BK_OK) st = bk__add(fn, "n+m", n, m, &total);
  if (st == BK_OK) st = bk__check_len(fn, "a", a, n);
  if (st == BK_OK) st = bk__check_len(fn, "b", b, m);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 2, (const bk_buffer *const[]){a, b}, (const char *const[]){"a", "b"});
  if (st != BK_OK) return st;
  bk_buffer *y = NULL;
  st = bk__new_output(&c, total, &y);
  if (st != BK_OK) return st;
  size_t es = bk__dtype_size(c.dtype);
  /* Each part is copied only when it has elements: an empty buffer holds no
   * memory and mem_copy requires bytes > 0. */
  if (n > 0) st = c.be->mem_copy(c.ctx, c.fn, y->data, a->data, (size_t)n * es);
  if (st == BK_OK && m > 0)
    st = c.be->mem_copy(c.ctx, c.fn, elem_at(y->data, n, es), b->data, (size_t)m * es);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

bk_status bk_vec_slice(bk_context *ctx, const bk_buffer *x, int64_t n, int64_t start, int64_t len,
                       bk_buffer **out) {
  static const char fn[] = "bk_vec_slice";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  st = bk__check_ptr(fn, "x", x);
  if (st == BK_OK) st = bk__check_size(fn, "n", n);
  if (st == BK_OK) st = bk__check_size(fn, "start", start);
  if (st == BK_OK) st = bk__check_size(fn, "len", len);
  if (st != BK_OK) return st;
  /* start + len <= n, written so that nothing can overflow: both are
   * non-negative, so start <= n makes n - start representable. */
  if (start > n || len > n - start)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "start = %" PRId64 " and len = %" PRId64 " run past the end of n = %" PRId64,
                    start, len, n);
  st = bk__check_len(fn, "x", x, n);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){x}, (const char *const[]){"x"});
  if (st != BK_OK) return st;
  bk_buffer *y = NULL;
  st = bk__new_output(&c, len, &y);
  if (st != BK_OK) return st;
  size_t es = bk__dtype_size(c.dtype);
  if (len > 0) st = c.be->mem_copy(c.ctx, c.fn, y->data, elem_at(x->data, start, es), (size_t)len * es);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}
