/*
 * examples.h — model blocks composed only from bufkern's public primitives,
 * used by `bufkern demo` and as documentation of how the primitives fit.
 *
 * The library has no elementwise kernels, no autograd and no dtype casts:
 * a runtime composes them. This directory shows how, one file per piece:
 *
 *   compose.c    elementwise arithmetic from products, concatenation and
 *                transposes (x*y, a*x + b*y, dots, a sigmoid from a
 *                two-way softmax), dtype conversion, the cleanup helpers
 *   block.c      the block interface (forward, backward, parameters),
 *                a linear layer, a chain of blocks, plain SGD
 *   attention.c  causal multi-head self-attention with a float64 replay
 *                when the scores' range-loss flag asks for it
 *   mamba.c      a Mamba-style block: depthwise causal convolution,
 *                token-dependent diagonal scan, sigmoid gate
 *   moe.c        a mixture of experts: top-k router, dispatch by gather,
 *                combine by scatter-add (or, capture-safe, dense routing
 *                on the device)
 *   spectral.c   an FNO-style spectral layer: rfft, per-mode complex
 *                weights, irfft; adjoints by the other transforms
 *   distill.c    a distillation loss: fixed-teacher cross-entropy plus a
 *                weighted (hard-label) cross-entropy
 *   gradcheck.c  finite-difference and cross-backend checks of any block
 *
 * Conventions: every helper takes a context (never NULL here: it decides
 * the device of the buffers the helper makes) and borrowed buffers, and
 * returns new buffers owned by the caller, exactly like the primitives. On
 * failure out-parameters are NULL and nothing leaks. Activations are flat
 * row-major buffers; shapes are written next to them.
 */
#ifndef BK_EXAMPLES_H
#define BK_EXAMPLES_H

#include "bufkern.h"

#include <stddef.h>
#include <stdint.h>

/* ---- cleanup helpers ---------------------------------------------------------- */

/* Runs one library call and jumps to `done` on failure; the enclosing
 * function declares `bk_status st` and a `done:` label that releases its
 * temporaries. */
#define EX_TRY(call)                                                                    \
  do {                                                                                  \
    st = (call);                                                                        \
    if (st != BK_OK) goto done;                                                         \
  } while (0)

/* Releases every listed buffer variable and sets it to NULL:
 * EX_RELEASE(&a, &b, &c). */
void ex_release_list(bk_buffer **const *list);
#define EX_RELEASE(...) ex_release_list((bk_buffer **const[]){__VA_ARGS__, NULL})

/* ---- elementwise arithmetic composed from the primitives (compose.c) -------- */

/* out[i] = x[i] * y[i] (n elements): a batch of n 1x1x1 products. */
bk_status ex_mul(bk_context *ctx, const bk_buffer *x, const bk_buffer *y, int64_t n,
                 bk_buffer **out);

/* out[i] = a*x[i] + b*y[i]: x and y interleaved by concat + swap, then one
 * (n, 2) x (2, 1) product with the coefficients. */
bk_status ex_axpby(bk_context *ctx, double a, const bk_buffer *x, double b, const bk_buffer *y,
                   int64_t n, bk_buffer **out);

/* out[i] = a * x[i]: an (n, 1) x (1, 1) product. */
bk_status ex_scale(bk_context *ctx, double a, const bk_buffer *x, int64_t n, bk_buffer **out);

/* out[i] = x[i] * s[0] for a one-element buffer s (a scalar that lives on
 * the device, such as an upstream gradient): an (n, 1) x (1, 1) product. */
bk_status ex_scale_by(bk_context *ctx, const bk_buffer *x, const bk_buffer *s, int64_t n,
                      bk_buffer **out);

/* out[0] = sum_i x[i]*y[i]: a (1, n) x (n, 1) product. */
bk_status ex_dot(bk_context *ctx, const bk_buffer *x, const bk_buffer *y, int64_t n,
                 bk_buffer **out);

/* out[r] = sum_c x[r,c]*y[r,c] for (rows, cols) x and y: a batch of rows
 * (1, cols) x (cols, 1) products. */
bk_status ex_rows_dot(bk_context *ctx, const bk_buffer *x, const bk_buffer *y, int64_t rows,
                      int64_t cols, bk_buffer **out);

/* The logistic sigmoid s = 1/(1 + e^-z) and its complement 1 - s (n
 * elements), both from one softmax over the pairs [z, 0]:
 * softmax([z, 0]) = [s, 1 - s]. The complement comes out of the softmax
 * itself, so it keeps full relative accuracy where s is close to 1. The
 * pairs are built by concatenating z with zeros, (2, n), and swapping the
 * axes to (n, 2). */
bk_status ex_sigmoid(bk_context *ctx, const bk_buffer *z, int64_t n, bk_buffer **s,
                     bk_buffer **s_comp);

/* The VJP of a row softmax from its output P and the upstream dP (rows,
 * cols): dS = P * (dP - rowsum(dP * P)). Blocked entries of a hard-masked
 * softmax have P = 0 and get dS = 0. */
bk_status ex_softmax_vjp(bk_context *ctx, const bk_buffer *P, const bk_buffer *dP, int64_t rows,
                         int64_t cols, bk_buffer **dS);

/* y = x + bias broadcast over rows: x (rows, cols), bias (cols). */
bk_status ex_add_bias(bk_context *ctx, const bk_buffer *x, const bk_buffer *bias, int64_t rows,
                      int64_t cols, bk_buffer **out);

/* ---- host data and dtype conversion (compose.c) ---------------------------- */

/* A new buffer of `n` host doubles converted to dtype, on ctx's device. */
bk_status ex_from_doubles(bk_context *ctx, bk_dtype dtype, const double *v, int64_t n,
                          bk_buffer **out);

/* Reads a buffer into n host doubles (synchronizes). */
bk_status ex_to_doubles(bk_context *ctx, const bk_buffer *b, double *v, int64_t n);

/* A copy of x (n elements) in another dtype, on ctx's device. The library
 * has no cast primitive, so this is a host round trip: read, convert,
 * upload (it synchronizes). Used only on rare paths (the range-loss
 * replay). */
bk_status ex_convert(bk_context *ctx, const bk_buffer *x, int64_t n, bk_dtype dtype,
                     bk_buffer **out);

/* A small deterministic generator (xorshift64*) for parameters and data. */
typedef struct ex_rng {
  uint64_t s;
} ex_rng;
ex_rng ex_rng_seed(uint64_t seed);
double ex_uniform(ex_rng *r); /* in [-1, 1) */

/* n entries uniform in [-bound, bound), uploaded in dtype. */
bk_status ex_random(bk_context *ctx, bk_dtype dtype, ex_rng *r, double bound, int64_t n,
                    bk_buffer **out);

/* n copies of `value`, uploaded in dtype. */
bk_status ex_fill(bk_context *ctx, bk_dtype dtype, double value, int64_t n, bk_buffer **out);

/* ---- blocks (block.c) ----------------------------------------------------------- */

/* A trainable tensor: its value and the gradient the last backward wrote. */
typedef struct ex_param {
  char name[32];
  int64_t n;         /* element count */
  bk_buffer *value;  /* owned */
  bk_buffer *grad;   /* owned; NULL before the first backward */
} ex_param;

enum { EX_MAX_PARAMS = 64, EX_OWN_PARAMS = 8 };

typedef struct ex_block ex_block;

typedef struct ex_block_ops {
  /* y (out_len) from x (in_len); keeps what the backward needs. */
  bk_status (*forward)(bk_context *ctx, ex_block *b, const bk_buffer *x, bk_buffer **y);
  /* dx (in_len) from dy (out_len) after a forward; writes every
   * parameter's grad. */
  bk_status (*backward)(bk_context *ctx, ex_block *b, const bk_buffer *dy, bk_buffer **dx);
  /* Releases the saved activations and whatever the block owns besides its
   * parameters; the struct itself is freed by ex_block_destroy. */
  void (*destroy)(ex_block *b);
} ex_block_ops;

/* The common head of every block. A concrete block struct starts with an
 * ex_block and keeps its parameters in `own`; `param` points at them (a
 * chain's `param` points into its children). */
struct ex_block {
  const ex_block_ops *ops;
  char name[48];
  bk_dtype dtype;
  int64_t in_len, out_len;
  int capturable; /* set by ex_block_set_capturable */
  int n_params;
  ex_param *param[EX_MAX_PARAMS];
  ex_param own[EX_OWN_PARAMS];
};

bk_status ex_block_forward(bk_context *ctx, ex_block *b, const bk_buffer *x, bk_buffer **y);
bk_status ex_block_backward(bk_context *ctx, ex_block *b, const bk_buffer *dy, bk_buffer **dx);
void ex_block_destroy(ex_block *b); /* NULL is a no-op */

/* Switches a block, and every child of a chain, to its capture-safe form:
 * one whose forward and backward make no call that a CUDA graph capture
 * refuses (no host read-back, no bk_bmm_scaled), so that a whole training
 * step can be recorded and replayed. Blocks whose calls are all capture-safe
 * already (linear, Mamba-style, spectral, distillation) are unchanged;
 * attention computes its scores by bk_bmm and a scale, without the
 * range-loss replay, and the mixture of experts routes densely on the
 * device. Takes effect at the next forward. */
void ex_block_set_capturable(ex_block *b);

/* Adds parameter `name` of n entries to a block's own list, taking over
 * *value (set to NULL, also on failure). */
bk_status ex_block_add_param(ex_block *b, const char *name, int64_t n, bk_buffer **value);

/* A parameter of n entries uniform in [-bound, bound), or all `value`. */
bk_status ex_block_add_random(bk_context *ctx, ex_block *b, const char *name, int64_t n,
                              double bound, ex_rng *rng);
bk_status ex_block_add_filled(bk_context *ctx, ex_block *b, const char *name, int64_t n,
                              double value);

/* A zeroed block struct of `size` bytes (a concrete block type whose first
 * member is the ex_block) with the common fields set; NULL when out of
 * memory. */
void *ex_block_alloc(size_t size, const ex_block_ops *ops, const char *name, bk_dtype dtype,
                     int64_t in_len, int64_t out_len);

/* Replaces a parameter's gradient, taking over *g (set to NULL). */
void ex_set_grad(ex_param *p, bk_buffer **g);

/* The first parameter called `name`, or NULL. */
ex_param *ex_block_param(const ex_block *b, const char *name);

/* Plain SGD on every parameter: value = value - lr * grad, with ex_axpby. */
bk_status ex_sgd_step(bk_context *ctx, ex_block *b, double lr);

/* One parameter's SGD update as a new buffer, value - lr * grad, leaving
 * the parameter as it is (for a caller who stores the update elsewhere). */
bk_status ex_sgd_next(bk_context *ctx, const ex_param *p, double lr, bk_buffer **next);

/* A linear layer y = x W + bias: x (rows, in), W (in, out), bias (out). */
bk_status ex_linear_create(bk_context *ctx, bk_dtype dtype, int64_t rows, int64_t in,
                           int64_t out, uint64_t seed, ex_block **out_block);

/* A chain of blocks run in order (their lengths must match). Takes
 * ownership of the children, also on failure. */
bk_status ex_chain_create(const char *name, ex_block **children, int n, ex_block **out_block);

/* ---- the model blocks ------------------------------------------------------------ */

/* Causal multi-head self-attention, pre-norm with a residual, on x (B, T, D):
 *   u = layernorm(x); [q | k | v] = u Wqkv, split into H heads of D/H;
 *   S = q k^T / sqrt(D/H) by bk_bmm_scaled; P = causal hard-masked softmax;
 *   O = P v, heads merged; y = x + O Wo.
 * When the scores' range-loss flag is set and the dtype is float32, the
 * scores and the softmax are replayed in float64 (operands converted by a
 * host round trip) and P is converted back.
 * The capture-safe form (ex_block_set_capturable): S = (q k^T) / sqrt(D/H)
 * by bk_bmm and ex_scale, no range-loss flag and no replay. */
typedef struct ex_attention_cfg {
  int64_t batch, seq, dim, heads;
} ex_attention_cfg;
bk_status ex_attention_create(bk_context *ctx, bk_dtype dtype, const ex_attention_cfg *cfg,
                              uint64_t seed, ex_block **out_block);
/* How many forwards of this attention block replayed their scores in float64. */
int64_t ex_attention_replays(const ex_block *b);

/* A Mamba-style block on x (B, T, D) with inner width E and a causal
 * depthwise convolution of width K:
 *   u = layernorm(x); a = u Wx, z = u Wz (B, T, E);
 *   c = depthwise causal conv over time of a (bk_conv, groups E, pad K-1);
 *   A = sigmoid(c Wa + ba) (token-dependent decay), h = scan(A, 1 - A, c);
 *   y = x + (h * sigmoid(z)) Wo. */
typedef struct ex_mamba_cfg {
  int64_t batch, seq, dim, inner, conv_width;
} ex_mamba_cfg;
bk_status ex_mamba_create(bk_context *ctx, bk_dtype dtype, const ex_mamba_cfg *cfg,
                          uint64_t seed, ex_block **out_block);

/* A mixture of `experts` two-layer SiLU experts (width `hidden`) over rows
 * tokens of width D, each token routed to its top_k experts:
 *   u = layernorm(x); r = u Wr; M = top-k mask of r; g = softmax of r over M;
 *   y = x + sum over selected e of g[e] * expert_e(u).
 * Routing is sparse: the mask is read on the host (one synchronization per
 * forward) into index lists for bk_rows_gather and bk_rows_scatter_add. The
 * capture-safe form (ex_block_set_capturable) routes densely on the device:
 * every expert runs on every token and the combine weights each by its
 * gate, exactly 0 for an unselected expert (the same mixture, X/k times the
 * expert arithmetic). */
typedef struct ex_moe_cfg {
  int64_t tokens, dim, experts, top_k, hidden;
} ex_moe_cfg;
bk_status ex_moe_create(bk_context *ctx, bk_dtype dtype, const ex_moe_cfg *cfg, uint64_t seed,
                        ex_block **out_block);

/* An FNO-style spectral layer on x (B, T, D), the FFT along T:
 *   u = layernorm(x); U = rfft(u) per channel; keep modes 0..modes-1;
 *   Y[m] = U[m] W[m] (complex D x D per mode); y = x + irfft(Y). */
typedef struct ex_spectral_cfg {
  int64_t batch, seq, dim, modes;
} ex_spectral_cfg;
bk_status ex_spectral_create(bk_context *ctx, bk_dtype dtype, const ex_spectral_cfg *cfg,
                             uint64_t seed, ex_block **out_block);

/* A distillation loss on student logits (rows, cols), as a block with a
 * one-element output:
 *   L = xent_teacher(S, T) + hard_weight * xent_weighted_mean(S, W)
 * for fixed teacher logits T and label weights W (rows, cols), set with
 * ex_distill_set_targets before each forward. */
bk_status ex_distill_create(bk_context *ctx, bk_dtype dtype, int64_t rows, int64_t cols,
                            double hard_weight, ex_block **out_block);
bk_status ex_distill_set_targets(bk_context *ctx, ex_block *b, const double *teacher,
                                 const double *weights);
/* The same with targets that are already buffers of rows*cols entries in
 * the block's dtype and on its device, retained (not copied): a caller who
 * fills the same buffers before each forward, such as a replayed CUDA
 * graph's inputs, sets them once. Returns BK_ERR_INVALID_ARGUMENT when a
 * length or dtype does not fit (the targets stay as they were). */
bk_status ex_distill_use_targets(ex_block *b, bk_buffer *teacher, bk_buffer *weights);

/* ---- checks (gradcheck.c) ------------------------------------------------------- */

/* Central finite differences of L = <forward(x), G> (G fixed, random) with
 * step h, against the backward's dx and parameter gradients, at up to
 * `samples` coordinates of x and of each parameter. *max_err is the largest
 * |fd - grad| / max(1, |grad|). Meant for float64 blocks. */
bk_status ex_gradcheck(bk_context *ctx, ex_block *b, const bk_buffer *x, uint64_t seed,
                       int samples, double h, double *max_err);

/* Runs forward and backward (dy random, the same on both) of two blocks
 * built alike on two devices from the same host input, and compares y, dx
 * and every parameter gradient: *max_err is the largest
 * max|a - b| / max|b| over those tensors. */
bk_status ex_crosscheck(bk_context *ctx_a, ex_block *a, bk_context *ctx_b, ex_block *b,
                        const double *x, uint64_t seed, double *max_err);

#endif /* BK_EXAMPLES_H */
