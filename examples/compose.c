/*
 * compose.c — elementwise arithmetic composed from bufkern's primitives.
 *
 * The library deliberately has no elementwise kernels: a runtime composes
 * them. These helpers show how with the batched product alone (a batch of
 * 1x1x1 products is an elementwise product; a (n, 2) x (2, 1) product is a
 * linear combination).
 */
#include "examples.h"

#include <stdlib.h>

bk_status ex_from_doubles(bk_context *ctx, bk_dtype dtype, const double *v, int64_t n,
                          bk_buffer **out) {
  if (dtype == BK_F64) return bk_buffer_from_host(ctx, dtype, v, n, out);
  float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
  if (!f) return BK_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
  bk_status st = bk_buffer_from_host(ctx, dtype, f, n, out);
  free(f);
  return st;
}

bk_status ex_to_doubles(bk_context *ctx, const bk_buffer *b, double *v, int64_t n) {
  if (bk_buffer_dtype(b) == BK_F64) return bk_buffer_to_host(ctx, b, v, n);
  float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
  if (!f) return BK_ERR_OUT_OF_MEMORY;
  bk_status st = bk_buffer_to_host(ctx, b, f, n);
  for (int64_t i = 0; st == BK_OK && i < n; i++) v[i] = f[i];
  free(f);
  return st;
}

bk_status ex_mul(bk_context *ctx, const bk_buffer *x, const bk_buffer *y, int64_t n,
                 bk_buffer **out) {
  return bk_bmm(ctx, x, y, n, 1, 1, 1, 0, 0, out);
}

bk_status ex_axpby(bk_context *ctx, double a, const bk_buffer *x, double b, const bk_buffer *y,
                   int64_t n, bk_buffer **out) {
  bk_buffer *cat = NULL, *pairs = NULL, *coef = NULL;
  const double ab[2] = {a, b};
  const int64_t dims[2] = {2, n};
  bk_status st = bk_vec_concat(ctx, x, y, n, n, &cat);                  /* (2, n) */
  if (st == BK_OK) st = bk_swap_adjacent(ctx, cat, dims, 2, 0, &pairs); /* (n, 2) */
  if (st == BK_OK) st = ex_from_doubles(ctx, bk_buffer_dtype(x), ab, 2, &coef);
  if (st == BK_OK) st = bk_bmm(ctx, pairs, coef, 1, n, 2, 1, 0, 0, out);
  bk_buffer_release(cat);
  bk_buffer_release(pairs);
  bk_buffer_release(coef);
  return st;
}

bk_status ex_dot(bk_context *ctx, const bk_buffer *x, const bk_buffer *y, int64_t n,
                 bk_buffer **out) {
  return bk_bmm(ctx, x, y, 1, 1, n, 1, 0, 0, out);
}
