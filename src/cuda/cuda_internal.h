/*
 * cuda_internal.h — what the CUDA backend's family files share: the context
 * state, error mapping, stream-ordered scratch memory, host-index uploads,
 * library handles and the functions the backend table points to.
 */
#ifndef BK_CUDA_INTERNAL_H
#define BK_CUDA_INTERNAL_H

#include "../backend.h"

#include <cuda_runtime.h>
#include <stdint.h>

/* Slots for per-context caches owned by one family (plans, descriptors). */
/* Pinned staging slots per context (see bk_cuda_ctx.stage). */
#define BK_CUDA_STAGE_SLOTS 4

enum bk_cuda_cache_slot {
  BK_CUDA_CACHE_FFT = 0,
  BK_CUDA_CACHE_CONV = 1,
  BK_CUDA_CACHE_BMM = 2,
  BK_CUDA_CACHE_SLOTS = 8
};

/* One pinned staging slot: host memory, its capacity, the event recorded
 * after the copy out of it, and whether that copy may still be running. */
typedef struct bk_cuda_stage {
  void *host;
  size_t cap;
  cudaEvent_t done;
  int pending;
} bk_cuda_stage;

/* Facts of the device read once when the context is created, so that no
 * call queries the device again. */
typedef struct bk_cuda_facts {
  int smem_per_sm;       /* shared memory per multiprocessor, bytes */
  int smem_optin;        /* dynamic shared memory a block may opt in to */
  int smem_reserved;     /* shared memory the system reserves per block */
  int regs_per_sm;       /* 32-bit registers per multiprocessor */
} bk_cuda_facts;

/* Attributes of one kernel set once per context (bk__cuda_func_prepare). */
typedef struct bk_cuda_func {
  const void *kern;
  int dyn_smem, carveout, nonportable;
  size_t static_smem; /* the kernel's own static shared memory */
  int ok;             /* the attributes were accepted */
} bk_cuda_func;

#define BK_CUDA_FUNC_SLOTS 256

/* One occupancy answer cached per context (bk__cuda_occupancy). */
typedef struct bk_cuda_occ {
  const void *kern;
  int threads, csize;
  size_t smem;
  int value;
} bk_cuda_occ;

#define BK_CUDA_OCC_SLOTS 256

/* A device block that holds host data given to a call during a capture,
 * owned by the captured graph through a CUDA user object
 * (bk__cuda_upload_finish): freed on the context's side stream once the
 * graph and its executable graphs have released it, or with the context. */
typedef struct bk_cuda_owned {
  void *ptr;
  struct bk_cuda_owned *next;
  int released;          /* the graph has released it (under the owners' lock) */
  struct bk_cuda_ctx *c; /* NULL once the context is gone */
} bk_cuda_owned;

typedef struct bk_cuda_ctx {
  int device;
  int sm_count;
  size_t l2_bytes;
  bk_cuda_facts facts;
  cudaStream_t own_stream;  /* created non-blocking with the context */
  /* The stream work is queued on: own_stream, a caller's stream, or NULL
   * for CUDA's legacy default stream. */
  cudaStream_t stream;
  void *cublas;             /* cublasHandle_t, created on first use */
  void *cudnn;              /* cudnnHandle_t, created on first use */
  void *cache[BK_CUDA_CACHE_SLOTS];
  void (*cache_free[BK_CUDA_CACHE_SLOTS])(void *);
  /* Pinned host staging for index uploads: a ring of slots, each reused
   * once the copy out of it has completed (its event), so the host can run
   * several calls ahead of the device. */
  bk_cuda_stage stage[BK_CUDA_STAGE_SLOTS];
  int stage_next;
  /* The host block of the upload begun and not yet finished that travels
   * in kernel parameters (bk__cuda_upload_begin), else NULL. */
  void *inline_host;
  /* A small device word for flags read back by the host (bmm_scaled). */
  int *flag;
  /* Kernels whose attributes were set, open-addressed by kernel address. */
  bk_cuda_func func[BK_CUDA_FUNC_SLOTS];
  /* Occupancy answers, open-addressed by kernel address and launch shape. */
  bk_cuda_occ occ[BK_CUDA_OCC_SLOTS];
  /* Blocks of host data owned by captured graphs, the stream they are
   * allocated and freed on (created on first capture, never captured), and
   * how many the graphs have released and wait to be freed. */
  bk_cuda_owned *owned;
  cudaStream_t side_stream;
  int owned_released;
  /* The axis engine's strategy asked for by a test (bk__cuda_axis_force);
   * 0: the planner's. */
  int axis_force;
  /* The row softmax's loads and path asked for by a test
   * (bk__cuda_rows_force); 0: the planner's. */
  int rows_force;
} bk_cuda_ctx;

/* The CUDA state of a context. */
static inline bk_cuda_ctx *bk_cu(bk_context *ctx) { return (bk_cuda_ctx *)bk__ctx_impl(ctx); }
static inline cudaStream_t bk_stream(bk_context *ctx) { return bk_cu(ctx)->stream; }

/* Maps a CUDA error to a status with a message naming fn and what failed
 * (cudaErrorMemoryAllocation -> BK_ERR_OUT_OF_MEMORY, else BK_ERR_DEVICE) and
 * clears the sticky last error where CUDA allows. cudaSuccess gives BK_OK. */
bk_status bk__cuda_status(cudaError_t err, const char *fn, const char *what);

/* Checks the launch just queued (cudaGetLastError). */
bk_status bk__cuda_launched(const char *fn, const char *kernel);

/* Stream-ordered scratch: device memory valid for work queued on the
 * context's stream until bk__cuda_scratch_free (also stream-ordered). Goes
 * through the allocation-failure hook. bytes > 0. fn names the public
 * function in the messages, here and in every helper below. */
bk_status bk__cuda_scratch(bk_context *ctx, const char *fn, size_t bytes, void **ptr);
void bk__cuda_scratch_free(bk_context *ctx, void *ptr);

/* Uploads k host indices (already validated, each <= UINT32_MAX) as uint32
 * into fresh scratch memory (*dev, freed with bk__cuda_scratch_free). The
 * host array may be reused when this returns: the indices are first
 * converted into pinned staging, in chunks of the ring's slots, so the host
 * converts one chunk while the copy of the one before runs. k > 0. */
bk_status bk__cuda_upload_indices(bk_context *ctx, const char *fn, const uint64_t *idx,
                                  int64_t k, uint32_t **dev);

/* Uploads `bytes` of arbitrary host data (a small table built on the host,
 * e.g. a scatter schedule) into fresh scratch memory through the pinned
 * staging; same lifetime rules as bk__cuda_upload_indices. */
bk_status bk__cuda_upload_scratch(bk_context *ctx, const char *fn, const void *host, size_t bytes,
                                  void **dev);

/* The same upload in two steps, for data built straight into host
 * staging: begin gives *host, `bytes` of host memory to fill (and its
 * slot); finish queues its copy into fresh scratch memory (*dev) and hands
 * the staging back, also when it fails. Every begin that succeeded is
 * followed by its finish. bytes > 0.
 *
 * Uploads of at most BK_CUDA_INLINE_BYTES, and every upload while the
 * stream is being captured, travel in kernel parameters (copied by CUDA
 * when the kernel is queued or captured), not through the pinned ring: a
 * captured graph then owns its copy of the data, so each replay reads the
 * data given at capture time, never a staging slot reused since. */
#define BK_CUDA_INLINE_BYTES 3840
bk_status bk__cuda_upload_begin(bk_context *ctx, const char *fn, size_t bytes, void **host,
                                int *slot);
bk_status bk__cuda_upload_finish(bk_context *ctx, const char *fn, int slot, size_t bytes,
                                 void **dev);

/* Library handles bound to the context's current stream, created on first
 * use. The out-parameter is a cublasHandle_t / cudnnHandle_t. Creating a
 * handle allocates and synchronizes, so a first use while the stream is
 * being captured is refused with BK_ERR_UNSUPPORTED (fn named) and leaves
 * the capture intact. */
bk_status bk__cuda_cublas(bk_context *ctx, const char *fn, void **handle);
bk_status bk__cuda_cudnn(bk_context *ctx, const char *fn, void **handle);

/* *capturing = whether the context's stream is being captured into a CUDA
 * graph (cudaStreamIsCapturing); a failed query is a status naming fn. */
bk_status bk__cuda_capturing(bk_context *ctx, const char *fn, bool *capturing);

/* BK_OK when the context's stream is not being captured; else
 * BK_ERR_UNSUPPORTED naming fn and `what` (the step that cannot be
 * captured), with nothing queued, so the capture stays valid. */
bk_status bk__cuda_refuse_capture(bk_context *ctx, const char *fn, const char *what);

/* Sets kern's dynamic shared memory limit (dyn_smem > 0, -1 for all that
 * a block may opt in to beside the kernel's static memory, or 0 to leave
 * it), its preferred
 * carveout (percent, or -1 to leave it) and, with nonportable, permission
 * for clusters above 8 CTAs, once per context and kernel: later calls with
 * the same values only read the cache. *static_smem (may be NULL) gets the
 * kernel's static shared memory. False, with the CUDA error cleared, when
 * the device refuses the attributes. */
bool bk__cuda_func_prepare(bk_context *ctx, const void *kern, int dyn_smem, int carveout,
                           int nonportable, size_t *static_smem);

/* How many blocks of kern (threads, smem dynamic bytes) one multiprocessor
 * holds (csize 0), or how many clusters of csize such blocks the device
 * holds at once (csize >= 1, cluster launch), once per context and launch
 * shape: later calls only read the cache. 0, with the CUDA error cleared,
 * when none fit or the query fails. */
int bk__cuda_occupancy(bk_context *ctx, const void *kern, int threads, size_t smem, int csize);

/* Lets kern use `bytes` of dynamic shared memory (with nonportable, in
 * clusters above 8 CTAs) and asks for the carveout that holds `blocks`
 * such blocks per multiprocessor, from the context's device facts and the
 * kernel's static memory: need / per_sm rounded up, or with snap the
 * smallest capacity of the device's carveout table that holds need (see
 * bk__cuda_carveout_pct). Once per context and kernel, through
 * bk__cuda_func_prepare. False when the size cannot be set. */
bool bk__cuda_func_fit(bk_context *ctx, const void *kern, int bytes, int blocks, int nonportable,
                       bool snap);

/* Blocks per grid for a grid-stride kernel of `threads` threads a block over
 * `work` items: enough to fill the device, no more than the work needs. */
static inline unsigned bk_cuda_blocks(bk_context *ctx, int64_t work, int threads) {
  int64_t want = (work + threads - 1) / threads;
  int64_t cap = (int64_t)bk_cu(ctx)->sm_count * 32;
  if (want > cap) want = cap;
  return (unsigned)(want < 1 ? 1 : want);
}

/* Blocks for a grid of one block per work unit: at least one, at most the
 * grid limit 2^31 - 1 (the kernels loop over units beyond it). */
static inline unsigned bk_cuda_grid(int64_t units) {
  return (unsigned)(units < 0x7fffffff ? (units < 1 ? 1 : units) : 0x7fffffff);
}

/* Chunking of the row kernels' split path. Few long rows (fewer than two
 * per multiprocessor, at least 2 * BK_CUDA_MIN_CHUNK columns) are cut into
 * *nch chunks of *clen vectors (of the row's nvec) so that every
 * multiprocessor gets about four blocks and no chunk is shorter than
 * BK_CUDA_MIN_CHUNK elements (then *nch >= 2); otherwise *nch = 1 and
 * *clen = nvec (whole rows). */
#define BK_CUDA_MIN_CHUNK 4096
static inline void bk_cuda_split_plan(int64_t sm, int64_t rows, int64_t cols, int64_t nvec,
                                      int64_t *nch, int64_t *clen) {
  *nch = 1;
  *clen = nvec;
  if (rows >= 2 * sm || cols < 2 * BK_CUDA_MIN_CHUNK) return;
  int64_t n = (4 * sm + rows - 1) / rows;
  const int64_t max_n = cols / BK_CUDA_MIN_CHUNK;
  if (n > max_n) n = max_n;
  *clen = (nvec + n - 1) / n;
  *nch = (nvec + *clen - 1) / *clen;
}

/* Whether p allows 16-byte vector access. */
static inline bool bk_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* ---- index arithmetic shared by the kernels ---------------------------------- */

/* Unsigned division by a run-time constant d >= 1 as a multiply and shifts
 * (Granlund and Montgomery, "Division by invariant integers using
 * multiplication", 1994, figure 4.1): exact for every 64-bit dividend below
 * 2^63. Built on the host, passed to kernels by value. */
struct bk_divider {
  uint64_t d, m;
  uint32_t s1, s2;
};

static inline bk_divider bk_divider_make(uint64_t d) {
  bk_divider f;
  uint32_t l = 0;
  while (l < 63 && ((uint64_t)1 << l) < d) l++;
  f.d = d;
  f.m = (uint64_t)(((unsigned __int128)(((uint64_t)1 << l) - d) << 64) / d) + 1;
  f.s1 = l < 1 ? l : 1;
  f.s2 = l > 0 ? l - 1 : 0;
  return f;
}

#ifdef __CUDACC__
static __device__ __forceinline__ uint64_t bk_divider_q(const bk_divider &f, uint64_t n) {
  uint64_t t = __umul64hi(f.m, n);
  return (t + ((n - t) >> f.s1)) >> f.s2;
}
#endif

/* Division of an index below 2^31 by d >= 1 in 32-bit arithmetic:
 * m = floor(2^32 / d) (2^32 - 1 for d = 1) gives a quotient at most one
 * too small, corrected once. */
struct bk_div32 {
  uint32_t d, m;
};

static inline bk_div32 bk_div32_make(uint64_t d) {
  bk_div32 v;
  v.d = (uint32_t)d;
  v.m = d == 1 ? 0xffffffffu : (uint32_t)((((uint64_t)1) << 32) / d);
  return v;
}

#ifdef __CUDACC__
static __device__ __forceinline__ int bk_div32_q(const bk_div32 &v, int e) {
  uint32_t q = __umulhi((uint32_t)e, v.m);
  if ((uint32_t)e - q * v.d >= v.d) q++;
  return (int)q;
}
#endif

#ifdef __CUDACC__
/* VEC consecutive elements of T at p as one access: a 16-byte vector when
 * VEC * sizeof(T) == 16 (p then 16-byte aligned), a scalar when VEC == 1. */
template <int VEC, typename T>
static __device__ __forceinline__ void bk_vload(const T *p, T *r) {
  if constexpr (VEC == 1) {
    r[0] = *p;
  } else if constexpr (sizeof(T) == 4) {
    const float4 v = *reinterpret_cast<const float4 *>(p);
    r[0] = v.x;
    r[1] = v.y;
    r[2] = v.z;
    r[3] = v.w;
  } else {
    const double2 v = *reinterpret_cast<const double2 *>(p);
    r[0] = v.x;
    r[1] = v.y;
  }
}

/* The matching store, marked streaming (evict first): kernel outputs are
 * not read again by the kernel, while its inputs may be, from L2. */
template <int VEC, typename T>
static __device__ __forceinline__ void bk_vstore_cs(T *p, const T *r) {
  if constexpr (VEC == 1) {
    __stcs(p, r[0]);
  } else if constexpr (sizeof(T) == 4) {
    __stcs(reinterpret_cast<float4 *>(p), make_float4(r[0], r[1], r[2], r[3]));
  } else {
    __stcs(reinterpret_cast<double2 *>(p), make_double2(r[0], r[1]));
  }
}
#endif

#ifdef __CUDACC__
/* 16 bytes through the read-only data cache, and a plain 16-byte store
 * (p 16-byte aligned). */
static __device__ __forceinline__ void bk_ld16(const float *p, float *v) {
  const float4 t = __ldg(reinterpret_cast<const float4 *>(p));
  v[0] = t.x;
  v[1] = t.y;
  v[2] = t.z;
  v[3] = t.w;
}
static __device__ __forceinline__ void bk_ld16(const double *p, double *v) {
  const double2 t = __ldg(reinterpret_cast<const double2 *>(p));
  v[0] = t.x;
  v[1] = t.y;
}
static __device__ __forceinline__ void bk_st16(float *p, const float *v) {
  *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
static __device__ __forceinline__ void bk_st16(double *p, const double *v) {
  *reinterpret_cast<double2 *>(p) = make_double2(v[0], v[1]);
}
#endif

#define BK_CUDA_TRY(expr, fn, what)                      \
  do {                                                   \
    bk_status bk_try_st_ = bk__cuda_status((expr), fn, what); \
    if (bk_try_st_ != BK_OK) return bk_try_st_;          \
  } while (0)

/* ---- families (one file each under src/cuda) -------------------------------- */
#ifdef __cplusplus
extern "C" {
#endif

/* softmax.cu */
bk_status bk__cuda_softmax(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,
                           int64_t n, int64_t inner);
/* The hard-masked row softmax on the softmax row engine; rows.cu's
 * bk__cuda_rows_masked_softmax calls it. */
bk_status bk__cuda_softmax_masked(bk_context *ctx, bk_dtype dt, const void *scores,
                                  const void *mask, void *y, int64_t rows, int64_t cols);
/* rowcache.cu: the row softmax (plain or hard-masked, mask may be NULL)
 * with each row cached in shared memory: one block per row, or a
 * thread-block cluster per row for rows wider than one block's shared
 * memory. Sets *done = 0 and queues nothing when the shape, alignment or
 * device does not suit it (the caller then runs its register path). */
bk_status bk__cuda_softmax_rows_cached(bk_context *ctx, bk_dtype dt, const void *x,
                                       const void *mask, void *y, int64_t rows, int64_t cols,
                                       int *done);
/* axis.cu: the (outer, n, inner) engine: softmax along n (inner > 1) and
 * the sum along n (bk_sum_axis, and bk_broadcast_to_adjoint where its
 * geometry is that sum); fn names the public function in messages. */
bk_status bk__cuda_axis_softmax(bk_context *ctx, const char *fn, bk_dtype dt, const void *x,
                                void *y, int64_t outer, int64_t n, int64_t inner);
bk_status bk__cuda_axis_sum(bk_context *ctx, const char *fn, bk_dtype dt, const void *x, void *y,
                            int64_t outer, int64_t n, int64_t inner);
/* The broadcast adjoint of any other geometry in one pass of the same
 * engine: dims and stride are the canonical output axes (outermost first,
 * no extent 1, neighbours merged) and the input strides they read, at
 * least one of them 0; each result sums its terms in row-major order of
 * the output (cut into ordered segments as for bk_sum_axis). */
bk_status bk__cuda_axis_sum_general(bk_context *ctx, const char *fn, bk_dtype dt, const void *x,
                                    void *y, int rank, const int64_t *dims, const int64_t *stride);
/* Sums of the M runs of L consecutive elements of x (run m is
 * x[m*L, m*L + L)) into float64 out[0..M), as nested ordered segments of
 * consecutive terms (a run of at most 16 terms one chain); the first step of
 * an adjoint whose innermost canonical axis is reduced. _take: whether the
 * planner takes runs of L terms (from 32 bytes, and no strategy forced). */
bk_status bk__cuda_axis_runs(bk_context *ctx, const char *fn, bk_dtype dt, const void *x,
                             double *out, int64_t M, int64_t L);
bool bk__cuda_axis_runs_take(bk_context *ctx, bk_dtype dt, int64_t L);
/* xent.cu */
bk_status bk__cuda_xent_weighted_mean(bk_context *ctx, bk_dtype dt, const void *logits,
                                      const void *w, void *y, int64_t rows, int64_t cols);
bk_status bk__cuda_xent_teacher(bk_context *ctx, bk_dtype dt, const void *S, const void *T,
                                void *y, int64_t rows, int64_t cols, int gradient);
/* conv.cu */
bk_status bk__cuda_conv(bk_context *ctx, bk_dtype dt, const void *x, const void *w,
                        const void *bias, void *y, const bk_conv_geom *g);
/* rows.cu */
bk_status bk__cuda_rows_sum(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows,
                            int64_t cols);
bk_status bk__cuda_rows_max(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows,
                            int64_t cols);
bk_status bk__cuda_rows_first_max_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                       int64_t rows, int64_t cols);
bk_status bk__cuda_rows_topk_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                  int64_t rows, int64_t cols, int64_t k);
bk_status bk__cuda_rows_masked_softmax(bk_context *ctx, bk_dtype dt, const void *scores,
                                       const void *mask, void *y, int64_t rows, int64_t cols);
/* layout.cu */
bk_status bk__cuda_broadcast_col(bk_context *ctx, bk_dtype dt, const void *vec, void *y,
                                 int64_t rows, int64_t cols);
bk_status bk__cuda_broadcast_to(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                const bk_bcast_geom *g);
bk_status bk__cuda_broadcast_to_adjoint(bk_context *ctx, bk_dtype dt, const void *dout,
                                        void *din, const bk_bcast_geom *g);
bk_status bk__cuda_swap_adjacent(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                 int64_t outer, int64_t a, int64_t b, int64_t inner);
/* axis.cu */
bk_status bk__cuda_sum_axis(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,
                            int64_t n, int64_t inner);
/* layernorm.cu */
bk_status bk__cuda_layernorm_forward(bk_context *ctx, bk_dtype dt, const void *x,
                                     const void *gamma, const void *beta, void *out,
                                     void *normalized, void *inv_std, int64_t rows, int64_t cols,
                                     double eps);
bk_status bk__cuda_layernorm_backward(bk_context *ctx, bk_dtype dt, const void *dout,
                                      const void *normalized, const void *inv_std,
                                      const void *gamma, void *dx, void *dgamma, void *dbeta,
                                      int64_t rows, int64_t cols);
/* bmm.cu */
bk_status bk__cuda_bmm(bk_context *ctx, bk_dtype dt, const void *A, const void *B, void *C,
                       int64_t batch, int64_t m, int64_t n, int64_t p, int trans_a, int trans_b);
bk_status bk__cuda_bmm_scaled(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                              void *C, int64_t batch, int64_t m, int64_t n, int64_t p,
                              int trans_a, int trans_b, double scale, int *range_loss);
/* fft.cu */
bk_status bk__cuda_rfft(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t batch,
                        int64_t n);
bk_status bk__cuda_irfft(bk_context *ctx, bk_dtype dt, const void *spec, void *y, int64_t batch,
                         int64_t n, int normalize);
/* scan.cu */
bk_status bk__cuda_scan_diag(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                             const void *X, const void *h0, void *y, int64_t seq_len,
                             int64_t state, int var);
bk_status bk__cuda_scan_diag_backward(bk_context *ctx, bk_dtype dt, const void *A,
                                      const void *B, const void *X, const void *h0,
                                      const void *out, const void *dy, void *dA, void *dB,
                                      void *dX, void *dh0, int64_t seq_len, int64_t state,
                                      int var);
/* gather.cu */
bk_status bk__cuda_rows_gather(bk_context *ctx, bk_dtype dt, const void *mat, void *y,
                               int64_t rows, int64_t cols, const uint64_t *idx, int64_t k);
bk_status bk__cuda_rows_scatter_add(bk_context *ctx, bk_dtype dt, const void *mat,
                                    const void *values, void *y, int64_t rows, int64_t cols,
                                    const uint64_t *idx, int64_t k);

#ifdef __cplusplus
}
#endif

#endif /* BK_CUDA_INTERNAL_H */
