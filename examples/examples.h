/*
 * examples.h — model blocks composed only from bufkern's public primitives,
 * used by `bufkern demo` and as documentation of how the primitives fit.
 *
 * Every helper takes a context and borrowed buffers and returns new buffers
 * owned by the caller, exactly like the library's own primitives.
 */
#ifndef BK_EXAMPLES_H
#define BK_EXAMPLES_H

#include "bufkern.h"

/* ---- elementwise arithmetic composed from the primitives ------------------ */

/* out[i] = x[i] * y[i] (n elements): a batch of n 1x1x1 products. */
bk_status ex_mul(bk_context *ctx, const bk_buffer *x, const bk_buffer *y, int64_t n,
                 bk_buffer **out);

/* out[i] = a*x[i] + b*y[i]: x and y interleaved by concat + swap, then one
 * (n, 2) x (2, 1) product with the coefficients. */
bk_status ex_axpby(bk_context *ctx, double a, const bk_buffer *x, double b, const bk_buffer *y,
                   int64_t n, bk_buffer **out);

/* out[0] = sum_i x[i]*y[i]: a (1, n) x (n, 1) product. */
bk_status ex_dot(bk_context *ctx, const bk_buffer *x, const bk_buffer *y, int64_t n,
                 bk_buffer **out);

/* A new buffer of `n` host doubles converted to dtype, on ctx's device. */
bk_status ex_from_doubles(bk_context *ctx, bk_dtype dtype, const double *v, int64_t n,
                          bk_buffer **out);

/* Reads a buffer into n host doubles. */
bk_status ex_to_doubles(bk_context *ctx, const bk_buffer *b, double *v, int64_t n);

/* ---- causal attention head -------------------------------------------------- */

/* One causal attention head over a sequence of T tokens of width d:
 * S = (Q K^T) / sqrt(d), P = causal hard-masked softmax(S), O = P V. */
typedef struct ex_attention {
  int64_t T, d;
  double scale;
  bk_buffer *mask;         /* (T, T): 1 where key j <= query i */
  /* saved by the forward for the backward */
  bk_buffer *P;            /* (T, T) */
  int range_loss;          /* the flag of the QK^T product */
} ex_attention;

bk_status ex_attention_init(bk_context *ctx, bk_dtype dtype, int64_t T, int64_t d,
                            ex_attention *att);
void ex_attention_free(ex_attention *att);

/* O (T, d) from Q, K, V (T, d); keeps P for the backward. */
bk_status ex_attention_forward(bk_context *ctx, ex_attention *att, const bk_buffer *Q,
                               const bk_buffer *K, const bk_buffer *V, bk_buffer **O);

/* dQ, dK, dV (T, d) from dO (T, d), after ex_attention_forward. */
bk_status ex_attention_backward(bk_context *ctx, const ex_attention *att, const bk_buffer *Q,
                                const bk_buffer *K, const bk_buffer *V, const bk_buffer *dO,
                                bk_buffer **dQ, bk_buffer **dK, bk_buffer **dV);

/* The VJP of a row softmax from its output P and the upstream dP (rows,
 * cols): dS = P * (dP - rowsum(dP * P)). */
bk_status ex_softmax_vjp(bk_context *ctx, const bk_buffer *P, const bk_buffer *dP, int64_t rows,
                         int64_t cols, bk_buffer **dS);

#endif /* BK_EXAMPLES_H */
