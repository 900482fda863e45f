/*
 * cpu.h — the CPU reference backend: the functions its table points to and
 * the element access helpers its families share.
 *
 * The CPU backend is the readable reference. Kernels load elements as double
 * through bk_ld and store through bk_st, so float32 data is accumulated in
 * float64 and every stored value is rounded once to the dtype. Where the
 * contract fixes a fold order in the dtype (scatter-add), the kernel stores
 * after each step: a float sum formed in double and rounded to float is the
 * correctly rounded float sum, so that matches float arithmetic exactly.
 */
#ifndef BK_CPU_H
#define BK_CPU_H

#include "../backend.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static inline double bk_ld(bk_dtype dt, const void *p, int64_t i) {
  return dt == BK_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static inline void bk_st(bk_dtype dt, void *p, int64_t i, double v) {
  if (dt == BK_F32)
    ((float *)p)[i] = (float)v;
  else
    ((double *)p)[i] = v;
}

/* Loops shorter than this many element operations stay on one thread. */
#define BK_CPU_PARALLEL_MIN 32768

/* Largest per-thread scratch (bytes) a kernel takes to write its output
 * only once; a fibre needing more is written in place instead. */
#define BK_CPU_SCRATCH_MAX ((int64_t)8 << 20)

/* Threads for a loop over `work` element operations: one below
 * BK_CPU_PARALLEL_MIN, else OpenMP's team size. */
static inline int bk_cpu_threads(int64_t work) {
#ifdef _OPENMP
  return work >= BK_CPU_PARALLEL_MIN ? omp_get_max_threads() : 1;
#else
  (void)work;
  return 1;
#endif
}

/* The calling thread's number in its team (0 outside a parallel region). */
static inline int bk_cpu_thread(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/* In a parallel region: the calling thread's block [*u0, *u1) of n units,
 * the static split of n over the team (one contiguous block per thread).
 * Kernels compute every unit the same way whatever block it falls in. */
static inline void bk_cpu_block(int64_t n, int64_t *u0, int64_t *u1) {
#ifdef _OPENMP
  int64_t t = omp_get_num_threads(), i = omp_get_thread_num();
#else
  int64_t t = 1, i = 0;
#endif
  int64_t q = n / t, rem = n % t;
  *u0 = i * q + (i < rem ? i : rem);
  *u1 = *u0 + q + (i < rem);
}

/*
 * Work handed out in chunks: in a parallel region each thread calls
 *   for (int64_t u0, u1; bk_cpu_take(&next, n, chunk, &u0, &u1);) kernel(u0, u1);
 * with `next` (zero before the region) shared, and so takes chunks of units
 * until none is left. A thread that the machine delays takes fewer chunks
 * instead of holding the others up; as every unit is computed the same way
 * whoever takes it, results do not depend on the split.
 */
static inline int bk_cpu_take(atomic_llong *next, int64_t n, int64_t chunk, int64_t *u0,
                              int64_t *u1) {
  const int64_t s = (int64_t)atomic_fetch_add(next, (long long)chunk);
  if (s >= n) return 0;
  *u0 = s;
  *u1 = n - s < chunk ? n : s + chunk;
  return 1;
}

/* Units per chunk for n units of `per_unit` element operations each: about
 * BK_CPU_PARALLEL_MIN operations, and at least eight chunks per thread. */
static inline int64_t bk_cpu_chunk(int64_t n, int64_t per_unit, int threads) {
  int64_t c = BK_CPU_PARALLEL_MIN / (per_unit > 0 ? per_unit : 1);
  const int64_t share = n / (8 * (int64_t)threads);
  if (c > share) c = share;
  return c > 0 ? c : 1;
}

/* Whether an output of `bytes` should be written with streaming stores:
 * when it exceeds the last-level cache of ctx's machine (read once per
 * context). */
int bk__cpu_streams(const bk_context *ctx, size_t bytes);

/* Bytes of the cache private to one core of ctx's machine (the level-2
 * cache, read once per context; 256 KiB where the system does not say). */
size_t bk__cpu_l2_bytes(const bk_context *ctx);

/* The context's cache of objects a kernel builds once per geometry (FFT
 * plans), keyed by (kind, key); thread-safe. get returns the object or
 * NULL. put hands obj to the cache, to be released with free_fn when the
 * context is destroyed, and returns 1; it returns 0 (the caller keeps obj)
 * when the key is present or the cache is full. Cached objects are never
 * changed or dropped while the context lives, so a pointer from get stays
 * valid and may be read from several threads. */
void *bk__cpu_cache_get(bk_context *ctx, int kind, int64_t key);
int bk__cpu_cache_put(bk_context *ctx, int kind, int64_t key, void *obj, void (*free_fn)(void *));
enum { BK_CPU_CACHE_FFT = 1 };

/* Test hook: outputs above `bytes` stream on ctx (a CPU context) from now
 * on; 0 makes every output stream, SIZE_MAX none. Returns the previous
 * threshold (0 for a context that is not a CPU one, which is left alone).
 * The tests use it to run each kernel through both of its store paths. */
BK_API size_t bk__cpu_set_stream_bytes(bk_context *ctx, size_t bytes);

/* Test hook: ctx (a CPU context) takes a core's own cache to hold `bytes`
 * from now on (the softmax's rows read once, the FFT's lanes); returns the
 * previous size (0, and nothing changed, for a context that is not a CPU
 * one). */
BK_API size_t bk__cpu_set_l2_bytes(bk_context *ctx, size_t bytes);

/* ---- families (one file each under src/cpu) ------------------------------ */

/* softmax.c */
bk_status bk__cpu_softmax(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,
                          int64_t n, int64_t inner);
/* xent.c */
bk_status bk__cpu_xent_weighted_mean(bk_context *ctx, bk_dtype dt, const void *logits,
                                     const void *w, void *y, int64_t rows, int64_t cols);
bk_status bk__cpu_xent_teacher(bk_context *ctx, bk_dtype dt, const void *S, const void *T,
                               void *y, int64_t rows, int64_t cols, int gradient);
/* conv.c */
bk_status bk__cpu_conv(bk_context *ctx, bk_dtype dt, const void *x, const void *w,
                       const void *bias, void *y, const bk_conv_geom *g);
/* rows.c */
bk_status bk__cpu_rows_sum(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows,
                           int64_t cols);
bk_status bk__cpu_rows_max(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows,
                           int64_t cols);
bk_status bk__cpu_rows_first_max_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                      int64_t rows, int64_t cols);
bk_status bk__cpu_rows_topk_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                 int64_t rows, int64_t cols, int64_t k);
bk_status bk__cpu_rows_masked_softmax(bk_context *ctx, bk_dtype dt, const void *scores,
                                      const void *mask, void *y, int64_t rows, int64_t cols);
/* layout.c */
bk_status bk__cpu_broadcast_col(bk_context *ctx, bk_dtype dt, const void *vec, void *y,
                                int64_t rows, int64_t cols);
bk_status bk__cpu_broadcast_to(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                               const bk_bcast_geom *g);
bk_status bk__cpu_broadcast_to_adjoint(bk_context *ctx, bk_dtype dt, const void *dout,
                                       void *din, const bk_bcast_geom *g);
bk_status bk__cpu_swap_adjacent(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                int64_t outer, int64_t a, int64_t b, int64_t inner);
bk_status bk__cpu_sum_axis(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,
                           int64_t n, int64_t inner);
/* layernorm.c */
bk_status bk__cpu_layernorm_forward(bk_context *ctx, bk_dtype dt, const void *x,
                                    const void *gamma, const void *beta, void *out,
                                    void *normalized, void *inv_std, int64_t rows, int64_t cols,
                                    double eps);
bk_status bk__cpu_layernorm_backward(bk_context *ctx, bk_dtype dt, const void *dout,
                                     const void *normalized, const void *inv_std,
                                     const void *gamma, void *dx, void *dgamma, void *dbeta,
                                     int64_t rows, int64_t cols);
/* bmm.c */
bk_status bk__cpu_bmm(bk_context *ctx, bk_dtype dt, const void *A, const void *B, void *C,
                      int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a, int trans_b);
bk_status bk__cpu_bmm_scaled(bk_context *ctx, bk_dtype dt, const void *A, const void *B, void *C,
                             int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a,
                             int trans_b, double scale, int *range_loss);
/* fft.c */
bk_status bk__cpu_rfft(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t batch,
                       int64_t n);
bk_status bk__cpu_irfft(bk_context *ctx, bk_dtype dt, const void *spec, void *y, int64_t batch,
                        int64_t n, int normalize);
/* scan.c */
bk_status bk__cpu_scan_diag(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                            const void *X, const void *h0, void *y, int64_t seq_len,
                            int64_t state, int var);
bk_status bk__cpu_scan_diag_backward(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                                     const void *X, const void *h0, const void *out,
                                     const void *dy, void *dA, void *dB, void *dX, void *dh0,
                                     int64_t seq_len, int64_t state, int var);
/* gather.c */
bk_status bk__cpu_rows_gather(bk_context *ctx, bk_dtype dt, const void *mat, void *y,
                              int64_t rows, int64_t cols, const uint64_t *idx, int64_t k);
bk_status bk__cpu_rows_scatter_add(bk_context *ctx, bk_dtype dt, const void *mat,
                                   const void *values, void *y, int64_t rows, int64_t cols,
                                   const uint64_t *idx, int64_t k);

#endif /* BK_CPU_H */
