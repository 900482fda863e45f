/*
 * compose.c — elementwise arithmetic composed from bufkern's primitives.
 *
 * The library deliberately has no elementwise kernels: a runtime composes
 * them. These helpers show how with the batched product alone (a batch of
 * 1x1x1 products is an elementwise product; a (n, 2) x (2, 1) product is a
 * linear combination), plus concatenation and axis swaps to line operands
 * up, and a two-way softmax for the one nonlinearity the blocks need.
 */
#include "examples.h"

#include <stdlib.h>

void ex_release_list(bk_buffer **const *list) {
  for (; *list; list++) {
    bk_buffer_release(**list);
    **list = NULL;
  }
}

/* ---- host data ------------------------------------------------------------------ */

bk_status ex_from_doubles(bk_context *ctx, bk_dtype dtype, const double *v, int64_t n,
                          bk_buffer **out) {
  if (dtype == BK_F64) return bk_buffer_from_host(ctx, dtype, v, n, out);
  float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
  if (!f) {
    *out = NULL;
    return BK_ERR_OUT_OF_MEMORY;
  }
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

bk_status ex_convert(bk_context *ctx, const bk_buffer *x, int64_t n, bk_dtype dtype,
                     bk_buffer **out) {
  *out = NULL;
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  if (!v) return BK_ERR_OUT_OF_MEMORY;
  bk_status st = ex_to_doubles(ctx, x, v, n);
  if (st == BK_OK) st = ex_from_doubles(ctx, dtype, v, n, out);
  free(v);
  return st;
}

ex_rng ex_rng_seed(uint64_t seed) {
  ex_rng r = {seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull};
  if (r.s == 0) r.s = 1;
  return r;
}

double ex_uniform(ex_rng *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  const uint64_t v = r->s * 0x2545F4914F6CDD1Dull;
  return (double)(v >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

bk_status ex_random(bk_context *ctx, bk_dtype dtype, ex_rng *r, double bound, int64_t n,
                    bk_buffer **out) {
  *out = NULL;
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  if (!v) return BK_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < n; i++) v[i] = bound * ex_uniform(r);
  bk_status st = ex_from_doubles(ctx, dtype, v, n, out);
  free(v);
  return st;
}

bk_status ex_fill(bk_context *ctx, bk_dtype dtype, double value, int64_t n, bk_buffer **out) {
  *out = NULL;
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  if (!v) return BK_ERR_OUT_OF_MEMORY;
  for (int64_t i = 0; i < n; i++) v[i] = value;
  bk_status st = ex_from_doubles(ctx, dtype, v, n, out);
  free(v);
  return st;
}

/* ---- products ---------------------------------------------------------------------- */

bk_status ex_mul(bk_context *ctx, const bk_buffer *x, const bk_buffer *y, int64_t n,
                 bk_buffer **out) {
  return bk_bmm(ctx, x, y, n, 1, 1, 1, 0, 0, out);
}

bk_status ex_axpby(bk_context *ctx, double a, const bk_buffer *x, double b, const bk_buffer *y,
                   int64_t n, bk_buffer **out) {
  bk_status st = BK_OK;
  bk_buffer *cat = NULL, *pairs = NULL, *coef = NULL;
  const double ab[2] = {a, b};
  *out = NULL;
  EX_TRY(bk_vec_concat(ctx, x, y, n, n, &cat));                                  /* (2, n) */
  EX_TRY(bk_swap_adjacent(ctx, cat, (const int64_t[]){2, n}, 2, 0, &pairs));      /* (n, 2) */
  EX_TRY(ex_from_doubles(ctx, bk_buffer_dtype(x), ab, 2, &coef));                 /* (2, 1) */
  EX_TRY(bk_bmm(ctx, pairs, coef, 1, n, 2, 1, 0, 0, out));                        /* (n, 1) */
done:
  EX_RELEASE(&cat, &pairs, &coef);
  return st;
}

bk_status ex_scale(bk_context *ctx, double a, const bk_buffer *x, int64_t n, bk_buffer **out) {
  bk_status st = BK_OK;
  bk_buffer *coef = NULL;
  *out = NULL;
  EX_TRY(ex_from_doubles(ctx, bk_buffer_dtype(x), &a, 1, &coef));
  EX_TRY(bk_bmm(ctx, x, coef, 1, n, 1, 1, 0, 0, out));
done:
  EX_RELEASE(&coef);
  return st;
}

bk_status ex_scale_by(bk_context *ctx, const bk_buffer *x, const bk_buffer *s, int64_t n,
                      bk_buffer **out) {
  return bk_bmm(ctx, x, s, 1, n, 1, 1, 0, 0, out);
}

bk_status ex_dot(bk_context *ctx, const bk_buffer *x, const bk_buffer *y, int64_t n,
                 bk_buffer **out) {
  return bk_bmm(ctx, x, y, 1, 1, n, 1, 0, 0, out);
}

bk_status ex_rows_dot(bk_context *ctx, const bk_buffer *x, const bk_buffer *y, int64_t rows,
                      int64_t cols, bk_buffer **out) {
  return bk_bmm(ctx, x, y, rows, 1, cols, 1, 0, 0, out);
}

/* ---- nonlinearity and its VJPs -------------------------------------------------------- */

bk_status ex_sigmoid(bk_context *ctx, const bk_buffer *z, int64_t n, bk_buffer **s,
                     bk_buffer **s_comp) {
  bk_status st = BK_OK;
  bk_buffer *zeros = NULL, *cat = NULL, *pairs = NULL, *soft = NULL, *back = NULL;
  *s = *s_comp = NULL;
  EX_TRY(bk_buffer_zeros(ctx, bk_buffer_dtype(z), n, &zeros));
  EX_TRY(bk_vec_concat(ctx, z, zeros, n, n, &cat));                             /* (2, n) */
  EX_TRY(bk_swap_adjacent(ctx, cat, (const int64_t[]){2, n}, 2, 0, &pairs));     /* (n, 2) */
  EX_TRY(bk_softmax(ctx, pairs, (const int64_t[]){n, 2}, 2, 1, &soft));          /* [s, 1-s] */
  EX_TRY(bk_swap_adjacent(ctx, soft, (const int64_t[]){n, 2}, 2, 0, &back));     /* (2, n) */
  EX_TRY(bk_vec_slice(ctx, back, 2 * n, 0, n, s));
  EX_TRY(bk_vec_slice(ctx, back, 2 * n, n, n, s_comp));
done:
  EX_RELEASE(&zeros, &cat, &pairs, &soft, &back);
  if (st != BK_OK) EX_RELEASE(s, s_comp);
  return st;
}

bk_status ex_softmax_vjp(bk_context *ctx, const bk_buffer *P, const bk_buffer *dP, int64_t rows,
                         int64_t cols, bk_buffer **dS) {
  bk_status st = BK_OK;
  bk_buffer *s = NULL, *sb = NULL, *diff = NULL;
  *dS = NULL;
  EX_TRY(ex_rows_dot(ctx, dP, P, rows, cols, &s));            /* s[r] = sum_c dP P */
  EX_TRY(bk_broadcast_col(ctx, s, rows, cols, &sb));
  EX_TRY(ex_axpby(ctx, 1.0, dP, -1.0, sb, rows * cols, &diff));
  EX_TRY(ex_mul(ctx, P, diff, rows * cols, dS));
done:
  EX_RELEASE(&s, &sb, &diff);
  return st;
}

bk_status ex_add_bias(bk_context *ctx, const bk_buffer *x, const bk_buffer *bias, int64_t rows,
                      int64_t cols, bk_buffer **out) {
  bk_status st = BK_OK;
  bk_buffer *wide = NULL;
  const int64_t in_dims[1] = {cols}, out_dims[2] = {rows, cols}, map[2] = {0, 1};
  *out = NULL;
  EX_TRY(bk_broadcast_to(ctx, bias, in_dims, 1, out_dims, 2, map, &wide));
  EX_TRY(ex_axpby(ctx, 1.0, x, 1.0, wide, rows * cols, out));
done:
  EX_RELEASE(&wide);
  return st;
}
