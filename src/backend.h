/*
 * backend.h — the interface every backend fills: one table of function
 * pointers. The front door (src/ops) validates every argument, resolves the
 * context, allocates the outputs through the table's memory members and
 * calls the primitive member with raw pointers and canonical geometry.
 *
 * Rules for every primitive member:
 *  - Pointers are device pointers of the backend (host pointers on the CPU).
 *    Inputs are never written. Outputs are freshly allocated, uninitialized
 *    and do not alias any input.
 *  - The front door handles every empty case: a member is called only when
 *    each of its outputs has at least one element, and it must write every
 *    element of every output.
 *  - Sizes are already validated and their products fit in int64_t and in
 *    size_t bytes.
 *  - The member may be asynchronous (queued on the context's stream) unless
 *    its comment says it synchronizes.
 *  - On failure the member records a message with bk__fail and returns its
 *    status; the front door then frees the outputs.
 */
#ifndef BK_BACKEND_H
#define BK_BACKEND_H

#include "bufkern.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Canonical convolution geometry (front door folds batch axes and pads the
 * spatial rank with nothing: only the first `spatial_rank` entries of the
 * arrays are meaningful). */
typedef struct bk_conv_geom {
  int spatial_rank;      /* 1..3 */
  int64_t n;             /* folded batch */
  int64_t c_in, c_out;   /* total channels */
  int64_t groups;        /* c_in % groups == 0, c_out % groups == 0 */
  int64_t in[3];         /* input spatial extents */
  int64_t k[3];          /* kernel spatial extents */
  int64_t out[3];        /* output spatial extents, each >= 1 */
  int64_t stride[3], pad_before[3], pad_after[3], dilation[3];
  int64_t in_volume, k_volume, out_volume; /* products of the extents above */
} bk_conv_geom;

/* Canonical broadcast geometry: output axes after the front door has
 * dropped extent-1 axes and merged adjacent ones where possible.
 * For output axis j, in_stride[j] is the input element stride it reads
 * (0 for inserted or extent-1 input axes). rank may be 0 (a single element).
 * in_length is the number of input elements. */
typedef struct bk_bcast_geom {
  int rank;
  int64_t out_dims[BK_MAX_RANK];
  int64_t in_stride[BK_MAX_RANK];
  int64_t out_length;
  int64_t in_length;
} bk_bcast_geom;

typedef struct bk_backend {
  const char *name; /* "cpu" or "cuda" */

  /* ---- context ---------------------------------------------------------- */
  /* Creates the backend state of a context for device index `index`
   * (ctx->impl). Returns BK_ERR_NO_DEVICE for an index with no device. fn
   * names the public function the context is made for. */
  bk_status (*context_init)(bk_context *ctx, const char *fn, int index);
  /* Frees the backend state; called once, after the last reference. */
  void (*context_fini)(bk_context *ctx);
  /* Selects a caller's stream (NULL: CUDA's legacy default stream). */
  bk_status (*context_set_stream)(bk_context *ctx, void *stream);
  /* Selects the context's own stream again; NULL in a backend without
   * streams (the front door answers for it). */
  bk_status (*context_reset_stream)(bk_context *ctx);
  /* Waits for all queued work. Synchronizes. */
  bk_status (*context_synchronize)(bk_context *ctx);

  /* ---- memory ----------------------------------------------------------- */
  /* fn names the public function the memory serves; every message a member
   * records starts with it. */
  /* Allocates bytes > 0 of device memory. BK_ERR_OUT_OF_MEMORY on failure. */
  bk_status (*mem_alloc)(bk_context *ctx, const char *fn, size_t bytes, void **ptr);
  /* Frees memory from mem_alloc of the same context, after queued work. */
  void (*mem_free)(bk_context *ctx, void *ptr);
  /* dst (device) <- host src, bytes > 0. The host memory may be reused as
   * soon as the call returns. */
  bk_status (*mem_upload)(bk_context *ctx, const char *fn, void *dst, const void *src,
                          size_t bytes);
  /* host dst <- device src, bytes > 0. Synchronizes. */
  bk_status (*mem_download)(bk_context *ctx, const char *fn, void *dst, const void *src,
                            size_t bytes);
  /* device dst <- device src (same device), bytes > 0. */
  bk_status (*mem_copy)(bk_context *ctx, const char *fn, void *dst, const void *src,
                        size_t bytes);
  /* device dst <- zero bytes, bytes > 0. */
  bk_status (*mem_zero)(bk_context *ctx, const char *fn, void *dst, size_t bytes);

  /* ---- ordering and copies between contexts (CUDA; NULL on the CPU) ------ */
  /* Later work queued on `waiter` waits for the work queued on `producer` so
   * far, through an event: no host wait. The two may be on different
   * devices of this backend. */
  bk_status (*stream_wait)(bk_context *waiter, bk_context *producer);
  /* dst on dst_ctx's device <- src on device src_device (another device of
   * this backend), queued on dst_ctx's stream; bytes > 0. The caller orders
   * it against the stream that made src with stream_wait. */
  bk_status (*mem_copy_peer)(bk_context *dst_ctx, void *dst, int src_device, const void *src,
                             size_t bytes);

  /* ---- 3.1 softmax ------------------------------------------------------ */
  /* x, y (outer, n, inner): softmax along the middle axis; n >= 1. */
  bk_status (*softmax)(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,
                       int64_t n, int64_t inner);

  /* ---- 3.2, 3.3 cross-entropies ------------------------------------------ */
  /* logits, w (rows, cols), rows >= 1, cols >= 1; y one element. */
  bk_status (*xent_weighted_mean)(bk_context *ctx, bk_dtype dt, const void *logits,
                                  const void *w, void *y, int64_t rows, int64_t cols);
  /* S, T (rows, cols), rows >= 1, cols >= 1; y one element (gradient 0) or
   * (rows, cols) (gradient 1). */
  bk_status (*xent_teacher)(bk_context *ctx, bk_dtype dt, const void *S, const void *T,
                            void *y, int64_t rows, int64_t cols, int gradient);

  /* ---- 3.4 convolution --------------------------------------------------- */
  /* x (n, c_in, in...), w dense (c_out, c_in, k...), bias (c_out) or NULL,
   * y (n, c_out, out...); every extent of g is >= 1. */
  bk_status (*conv)(bk_context *ctx, bk_dtype dt, const void *x, const void *w,
                    const void *bias, void *y, const bk_conv_geom *g);

  /* ---- 3.5 rows ----------------------------------------------------------- */
  /* x (rows, cols), rows >= 1, cols >= 1, y (rows). */
  bk_status (*rows_sum)(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows,
                        int64_t cols);
  bk_status (*rows_max)(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows,
                        int64_t cols);
  /* x, y (rows, cols), rows >= 1, cols >= 1. */
  bk_status (*rows_first_max_mask)(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                   int64_t rows, int64_t cols);
  /* 0 < k < cols (the front door handles k == 0 and k >= cols). */
  bk_status (*rows_topk_mask)(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                              int64_t rows, int64_t cols, int64_t k);
  bk_status (*rows_masked_softmax)(bk_context *ctx, bk_dtype dt, const void *scores,
                                   const void *mask, void *y, int64_t rows, int64_t cols);

  /* ---- 3.6 broadcasts and layout ------------------------------------------ */
  /* vec (rows), y (rows, cols). */
  bk_status (*broadcast_col)(bk_context *ctx, bk_dtype dt, const void *vec, void *y,
                             int64_t rows, int64_t cols);
  /* x (g->in_length), y (g->out_length). */
  bk_status (*broadcast_to)(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                            const bk_bcast_geom *g);
  /* dout (g->out_length), din (g->in_length): din[i] = sum of dout over the
   * output coordinates reading i, folded in row-major output order. */
  bk_status (*broadcast_to_adjoint)(bk_context *ctx, bk_dtype dt, const void *dout, void *din,
                                    const bk_bcast_geom *g);
  /* x (outer, a, b, inner) -> y (outer, b, a, inner). */
  bk_status (*swap_adjacent)(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                             int64_t outer, int64_t a, int64_t b, int64_t inner);
  /* x (outer, n, inner) -> y (outer, inner), summed over n >= 1 in index order. */
  bk_status (*sum_axis)(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,
                        int64_t n, int64_t inner);

  /* ---- 3.7 layer norm ------------------------------------------------------ */
  /* x, out, normalized (rows, cols); gamma, beta (cols); inv_std (rows). */
  bk_status (*layernorm_forward)(bk_context *ctx, bk_dtype dt, const void *x,
                                 const void *gamma, const void *beta, void *out,
                                 void *normalized, void *inv_std, int64_t rows, int64_t cols,
                                 double eps);
  /* dout, normalized, dx (rows, cols); inv_std (rows); gamma, dgamma, dbeta
   * (cols). rows >= 1. */
  bk_status (*layernorm_backward)(bk_context *ctx, bk_dtype dt, const void *dout,
                                  const void *normalized, const void *inv_std,
                                  const void *gamma, void *dx, void *dgamma, void *dbeta,
                                  int64_t rows, int64_t cols);

  /* ---- 3.8 matrix products -------------------------------------------------- */
  /* C (batch, m, p) = op(A) op(B); all of batch, m, n, p >= 1. */
  bk_status (*bmm)(bk_context *ctx, bk_dtype dt, const void *A, const void *B, void *C,
                   int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a, int trans_b);
  /* C = scale * op(A) op(B) with the range-loss flag; all sizes >= 1.
   * Synchronizes to read the flag. */
  bk_status (*bmm_scaled)(bk_context *ctx, bk_dtype dt, const void *A, const void *B, void *C,
                          int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a,
                          int trans_b, double scale, int *range_loss);

  /* ---- 3.9 FFT ------------------------------------------------------------- */
  /* x (batch, n) -> y (batch, n/2+1, 2); batch, n >= 1. */
  bk_status (*rfft)(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t batch,
                    int64_t n);
  /* spec (batch, n/2+1, 2) -> y (batch, n); normalize 1 applies 1/n. */
  bk_status (*irfft)(bk_context *ctx, bk_dtype dt, const void *spec, void *y, int64_t batch,
                     int64_t n, int normalize);

  /* ---- 3.10 scans ------------------------------------------------------------ */
  /* var 0: A, B (state); var 1: A, B (seq_len, state). X, y (seq_len, state),
   * h0 (state). seq_len, state >= 1. */
  bk_status (*scan_diag)(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                         const void *X, const void *h0, void *y, int64_t seq_len,
                         int64_t state, int var);
  /* Gradients; dA, dB shaped like A, B; dX (seq_len, state); dh0 (state). */
  bk_status (*scan_diag_backward)(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                                  const void *X, const void *h0, const void *out,
                                  const void *dy, void *dA, void *dB, void *dX, void *dh0,
                                  int64_t seq_len, int64_t state, int var);

  /* ---- 3.11 gather / scatter ---------------------------------------------------- */
  /* mat (rows, cols), y (k, cols); idx: k host indices, each <= UINT32_MAX
   * (>= rows selects a zero row). rows may be 0. k, cols >= 1. */
  bk_status (*rows_gather)(bk_context *ctx, bk_dtype dt, const void *mat, void *y,
                           int64_t rows, int64_t cols, const uint64_t *idx, int64_t k);
  /* mat, y (rows, cols), values (k, cols); rows, cols >= 1; k >= 0. */
  bk_status (*rows_scatter_add)(bk_context *ctx, bk_dtype dt, const void *mat,
                                const void *values, void *y, int64_t rows, int64_t cols,
                                const uint64_t *idx, int64_t k);
} bk_backend;

/* The backend tables. bk__cuda_backend is NULL-valued (absent) in a build
 * without CUDA: use bk__backend_for(). */
extern const bk_backend bk__cpu_backend;
#ifdef BK_HAVE_CUDA
extern const bk_backend bk__cuda_backend;
/* Number of visible CUDA devices (0 when the driver reports none). */
int bk__cuda_device_count(void);
/* Name, total memory in bytes and compute capability of a device, for
 * `bufkern info`. Returns BK_ERR_NO_DEVICE for a bad index. */
bk_status bk__cuda_device_info(int index, char *name, size_t name_cap, size_t *total_bytes,
                               int *cc_major, int *cc_minor);
#endif

/* ---- the NCCL layer (src/cuda/comm.cu) ------------------------------------ */

/* The collectives, in the order of the public functions. */
typedef enum bk_coll_kind {
  BK_COLL_ALL_REDUCE = 0,
  BK_COLL_ALL_GATHER = 1,
  BK_COLL_REDUCE_SCATTER = 2,
  BK_COLL_BROADCAST = 3
} bk_coll_kind;

/* Text length of a unique id: two hex digits a byte, and the NUL. */
#define BK_NCCL_ID_HEX 257

#ifdef BK_HAVE_NCCL
/* n communicators of one process over the CUDA devices devs[0..n), distinct;
 * comms[i] receives rank i's ncclComm_t. */
bk_status bk__nccl_init_all(const char *fn, const int *devs, int n, void **comms);
/* A new NCCL unique id as hex text (hex has BK_NCCL_ID_HEX chars). */
bk_status bk__nccl_unique_id(const char *fn, char *hex);
/* One rank of a world of `world` ranks on CUDA device dev, from the id's
 * hex text (malformed text is BK_ERR_INVALID_ARGUMENT). */
bk_status bk__nccl_init_rank(const char *fn, int dev, int rank, int world, const char *hex,
                             void **comm);
/* Destroys comms[0..n) on devices devs[0..n), whose work has completed. */
void bk__nccl_destroy(const int *devs, int n, void *const *comms);
/* One collective over the local ranks 0..n-1, issued as one NCCL group:
 * rank i's operation on ctxs[i]'s stream from send[i] to recv[i]. count is
 * the element count NCCL takes (the per-rank block for all-gather and
 * reduce-scatter, the whole buffer otherwise); op is a bk_reduce_op, root a
 * global rank. */
bk_status bk__nccl_collective(const char *fn, bk_coll_kind kind, bk_reduce_op op, int root,
                              int n, void *const *comms, bk_context *const *ctxs, bk_dtype dt,
                              const void *const *send, void *const *recv, size_t count);
#endif

/* The table for a device kind, or NULL when this build has none. */
const bk_backend *bk__backend_for(bk_device_kind kind);

/* ---- services the core offers backends ----------------------------------- */

/* Records "fn: message" as the thread's last error and returns status. */
bk_status bk__fail(bk_status status, const char *fn, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* The backend state of a context (set by context_init). */
void *bk__ctx_impl(const bk_context *ctx);
void bk__ctx_set_impl(bk_context *ctx, void *impl);
/* ---- allocation sites and the allocation-failure hook ----------------------- */

/*
 * Every allocation call site of the library owns one static record, placed
 * by BK_ALLOC_SITE() in the linker section bk_alloc_sites. The injection
 * layer enumerates the section (between the linker's __start_ and __stop_
 * symbols) to count the sites that exist, and marks a site's record when it
 * fails an allocation there, so the reliability test can report which sites
 * its allocation-failure walk reached. The explicit alignment keeps the
 * records a dense array: the compiler may not raise it, and the address
 * sanitizers leave sections named like C identifiers unpadded.
 */
typedef struct bk_alloc_site {
  const char *file;
  int32_t line;
  int32_t failed; /* set (atomically) once the hook failed this site */
} bk_alloc_site;

#define BK_ALLOC_SITE()                                                                     \
  __extension__({                                                                           \
    static bk_alloc_site bk_alloc_site_                                                     \
        __attribute__((section("bk_alloc_sites"), used, aligned(8))) = {__FILE__, __LINE__, 0}; \
    &bk_alloc_site_;                                                                        \
  })

/* True when the allocation-failure hook says this allocation must fail;
 * every allocation (host scratch and device memory) asks it first, through
 * bk__inject_should_fail() at its own call site. */
bool bk__inject_should_fail_at(bk_alloc_site *site);
#define bk__inject_should_fail() bk__inject_should_fail_at(BK_ALLOC_SITE())

/* n elements of `size` bytes of host memory through the hook, zeroed when
 * `zero` is set. On failure (the hook, n * size overflowing, malloc) records
 * "fn: cannot allocate ... bytes of host <what>" as the last error and
 * returns NULL; the caller returns BK_ERR_OUT_OF_MEMORY. fn names the
 * public function the allocation serves. n == 0 or size == 0 allocates one
 * byte, so NULL always means failure. Released with bk__host_free. */
void *bk__host_alloc_at(bk_alloc_site *site, const char *fn, const char *what, size_t n,
                        size_t size, bool zero);
#define bk__host_alloc(fn, what, n, size) \
  bk__host_alloc_at(BK_ALLOC_SITE(), (fn), (what), (n), (size), false)
#define bk__host_zalloc(fn, what, n, size) \
  bk__host_alloc_at(BK_ALLOC_SITE(), (fn), (what), (n), (size), true)
void bk__host_free(void *p);
/* Element size of a supported dtype (4 or 8). */
size_t bk__dtype_size(bk_dtype dt);

#ifdef __cplusplus
}
#endif

#endif /* BK_BACKEND_H */
