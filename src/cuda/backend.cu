/*
 * backend.cu — the CUDA backend's context, memory and table.
 *
 * Each context owns a non-blocking stream (or uses a caller's), allocates
 * from the device's stream-ordered memory pool (cudaMallocAsync /
 * cudaFreeAsync on that stream), and creates its cuBLAS and cuDNN handles on
 * first use. Nothing here synchronizes except context_synchronize and
 * mem_download.
 */
#include "cuda_internal.h"

#include <cublas_v2.h>
#include <cudnn.h>

#include <stdint.h>
#include <string.h>

/* ---- errors -------------------------------------------------------------- */

bk_status bk__cuda_status(cudaError_t err, const char *fn, const char *what) {
  if (err == cudaSuccess) return BK_OK;
  /* Clear a non-sticky error so the next call on this thread starts clean. */
  (void)cudaGetLastError();
  if (err == cudaErrorMemoryAllocation)
    return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "%s: device out of memory (%s)", what,
                    cudaGetErrorString(err));
  if (err == cudaErrorNoDevice || err == cudaErrorInvalidDevice ||
      err == cudaErrorInsufficientDriver)
    return bk__fail(BK_ERR_NO_DEVICE, fn, "%s: %s", what, cudaGetErrorString(err));
  return bk__fail(BK_ERR_DEVICE, fn, "%s: %s (%s)", what, cudaGetErrorName(err),
                  cudaGetErrorString(err));
}

bk_status bk__cuda_launched(const char *fn, const char *kernel) {
  return bk__cuda_status(cudaGetLastError(), fn, kernel);
}

/* Makes the context's device current for this thread. Asking first costs a
 * thread-local read; setting it only when it differs keeps cudaSetDevice off
 * the per-call path of a single-GPU program. Every primitive allocates its
 * outputs through mem_alloc before it launches, so this runs first. */
static cudaError_t enter(const bk_cuda_ctx *c) {
  int cur = -1;
  cudaError_t err = cudaGetDevice(&cur);
  if (err != cudaSuccess || cur != c->device) err = cudaSetDevice(c->device);
  return err;
}

/* ---- devices ------------------------------------------------------------- */

extern "C" int bk__cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

extern "C" bk_status bk__cuda_device_info(int index, char *name, size_t name_cap,
                                          size_t *total_bytes, int *cc_major, int *cc_minor) {
  static const char fn[] = "bk_cuda_device_info";
  if (index < 0 || index >= bk__cuda_device_count())
    return bk__fail(BK_ERR_NO_DEVICE, fn, "index = %d: no such CUDA device", index);
  cudaDeviceProp prop;
  BK_CUDA_TRY(cudaGetDeviceProperties(&prop, index), fn, "cudaGetDeviceProperties");
  if (name && name_cap) {
    strncpy(name, prop.name, name_cap - 1);
    name[name_cap - 1] = '\0';
  }
  if (total_bytes) *total_bytes = prop.totalGlobalMem;
  if (cc_major) *cc_major = prop.major;
  if (cc_minor) *cc_minor = prop.minor;
  return BK_OK;
}

/* ---- contexts ------------------------------------------------------------ */

static const char ctx_fn[] = "bk_context_create";

static void cuda_context_fini(bk_context *ctx);

static bk_status cuda_context_init(bk_context *ctx, int index) {
  int count = bk__cuda_device_count();
  if (index >= count)
    return bk__fail(BK_ERR_NO_DEVICE, ctx_fn, "device.index = %d but %d CUDA device(s) are visible",
                    index, count);
  bk_cuda_ctx *c = (bk_cuda_ctx *)bk__host_calloc(1, sizeof *c);
  if (!c) return bk__fail(BK_ERR_OUT_OF_MEMORY, ctx_fn, "cannot allocate the CUDA context state");
  c->device = index;
  bk__ctx_set_impl(ctx, c);
  bk_status st = bk__cuda_status(cudaSetDevice(index), ctx_fn, "cudaSetDevice");
  cudaDeviceProp prop;
  if (st == BK_OK)
    st = bk__cuda_status(cudaGetDeviceProperties(&prop, index), ctx_fn, "cudaGetDeviceProperties");
  if (st == BK_OK) {
    c->sm_count = prop.multiProcessorCount;
    c->l2_bytes = (size_t)prop.l2CacheSize;
    st = bk__cuda_status(cudaStreamCreateWithFlags(&c->own_stream, cudaStreamNonBlocking), ctx_fn,
                         "cudaStreamCreateWithFlags");
  }
  c->stream = c->own_stream;
  if (st == BK_OK)
    for (int i = 0; i < BK_CUDA_STAGE_SLOTS && st == BK_OK; i++)
      st = bk__cuda_status(cudaEventCreateWithFlags(&c->stage[i].done, cudaEventDisableTiming),
                           ctx_fn, "cudaEventCreate");
  if (st == BK_OK) {
    /* Keep freed memory in the pool instead of returning it to the driver
     * at every synchronization: repeated calls then allocate without cost. */
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, index) == cudaSuccess) {
      uint64_t threshold = UINT64_MAX;
      (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
    }
    (void)cudaGetLastError();
  }
  if (st != BK_OK) {
    cuda_context_fini(ctx);
    return st;
  }
  return BK_OK;
}

static void cuda_context_fini(bk_context *ctx) {
  bk_cuda_ctx *c = bk_cu(ctx);
  if (!c) return;
  (void)cudaSetDevice(c->device);
  if (c->stream) (void)cudaStreamSynchronize(c->stream);
  for (int i = 0; i < BK_CUDA_CACHE_SLOTS; i++)
    if (c->cache[i] && c->cache_free[i]) c->cache_free[i](c->cache[i]);
  if (c->cublas) (void)cublasDestroy((cublasHandle_t)c->cublas);
  if (c->cudnn) (void)cudnnDestroy((cudnnHandle_t)c->cudnn);
  if (c->flag) (void)cudaFree(c->flag);
  for (int i = 0; i < BK_CUDA_STAGE_SLOTS; i++) {
    if (c->stage[i].host) (void)cudaFreeHost(c->stage[i].host);
    if (c->stage[i].done) (void)cudaEventDestroy(c->stage[i].done);
  }
  if (c->own_stream) (void)cudaStreamDestroy(c->own_stream);
  (void)cudaGetLastError();
  bk__host_free(c);
  bk__ctx_set_impl(ctx, NULL);
}

static bk_status cuda_context_set_stream(bk_context *ctx, void *stream) {
  bk_cuda_ctx *c = bk_cu(ctx);
  cudaStream_t next = stream ? (cudaStream_t)stream : c->own_stream;
  if (next == c->stream) return BK_OK;
  /* Work already queued on the old stream must finish before work queued on
   * the new one may read its results. */
  BK_CUDA_TRY(cudaSetDevice(c->device), "bk_context_set_stream", "cudaSetDevice");
  BK_CUDA_TRY(cudaStreamSynchronize(c->stream), "bk_context_set_stream", "cudaStreamSynchronize");
  c->stream = next;
  if (c->cublas) (void)cublasSetStream((cublasHandle_t)c->cublas, next);
  if (c->cudnn) (void)cudnnSetStream((cudnnHandle_t)c->cudnn, next);
  return BK_OK;
}

static bk_status cuda_context_synchronize(bk_context *ctx) {
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(enter(c), "bk_context_synchronize", "cudaSetDevice");
  BK_CUDA_TRY(cudaStreamSynchronize(c->stream), "bk_context_synchronize", "cudaStreamSynchronize");
  return BK_OK;
}

bk_status bk__cuda_cublas(bk_context *ctx, void **handle) {
  bk_cuda_ctx *c = bk_cu(ctx);
  if (!c->cublas) {
    cublasHandle_t h;
    cublasStatus_t s = cublasCreate(&h);
    if (s != CUBLAS_STATUS_SUCCESS)
      return bk__fail(s == CUBLAS_STATUS_ALLOC_FAILED ? BK_ERR_OUT_OF_MEMORY : BK_ERR_DEVICE,
                      "bufkern", "cublasCreate failed (%d)", (int)s);
    (void)cublasSetStream(h, c->stream);
    /* The default math mode never uses TF32 or other reduced modes for the
     * CUBLAS_COMPUTE_32F / CUBLAS_COMPUTE_64F compute types the products
     * ask for; it does allow the FP64 tensor cores, which compute IEEE
     * double FMAs. */
    (void)cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
    c->cublas = h;
  }
  *handle = c->cublas;
  return BK_OK;
}

bk_status bk__cuda_cudnn(bk_context *ctx, void **handle) {
  bk_cuda_ctx *c = bk_cu(ctx);
  if (!c->cudnn) {
    cudnnHandle_t h;
    cudnnStatus_t s = cudnnCreate(&h);
    if (s != CUDNN_STATUS_SUCCESS)
      return bk__fail(BK_ERR_DEVICE, "bufkern", "cudnnCreate failed: %s", cudnnGetErrorString(s));
    (void)cudnnSetStream(h, c->stream);
    c->cudnn = h;
  }
  *handle = c->cudnn;
  return BK_OK;
}

/* ---- memory -------------------------------------------------------------- */


static bk_status cuda_mem_alloc(bk_context *ctx, size_t bytes, void **ptr) {
  static const char fn[] = "bufkern";
  if (bk__inject_should_fail())
    return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "injected device allocation failure (%zu bytes)", bytes);
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(enter(c), fn, "cudaSetDevice");
  void *p = NULL;
  cudaError_t err = cudaMallocAsync(&p, bytes, c->stream);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation)
      return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of device memory", bytes);
    return bk__cuda_status(err, fn, "cudaMallocAsync");
  }
  *ptr = p;
  return BK_OK;
}

static void cuda_mem_free(bk_context *ctx, void *ptr) {
  bk_cuda_ctx *c = bk_cu(ctx);
  (void)enter(c);
  (void)cudaFreeAsync(ptr, c->stream);
}

bk_status bk__cuda_scratch(bk_context *ctx, size_t bytes, void **ptr) {
  return cuda_mem_alloc(ctx, bytes, ptr);
}

void bk__cuda_scratch_free(bk_context *ctx, void *ptr) {
  if (ptr) cuda_mem_free(ctx, ptr);
}

/* Host data goes through pinned staging so the copy can be asynchronous
 * while the caller's array is free to reuse at once. The slots form a ring:
 * a slot is reused after the copy out of it completed, which for a ring of
 * BK_CUDA_STAGE_SLOTS is almost never a wait, so the host keeps running
 * ahead of the device. */
static bk_status stage(bk_context *ctx, size_t bytes, void **host, int *slot) {
  static const char fn[] = "bufkern";
  bk_cuda_ctx *c = bk_cu(ctx);
  const int i = c->stage_next;
  bk_cuda_stage *sl = &c->stage[i];
  if (sl->pending) {
    BK_CUDA_TRY(cudaEventSynchronize(sl->done), fn, "cudaEventSynchronize");
    sl->pending = 0;
  }
  if (bytes > sl->cap) {
    if (bk__inject_should_fail())
      return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "injected pinned allocation failure (%zu bytes)", bytes);
    size_t cap = sl->cap ? sl->cap : 4096;
    while (cap < bytes) cap *= 2;
    void *p = NULL;
    cudaError_t err = cudaMallocHost(&p, cap);
    if (err != cudaSuccess) return bk__cuda_status(err, fn, "cudaMallocHost");
    if (sl->host) (void)cudaFreeHost(sl->host);
    sl->host = p;
    sl->cap = cap;
  }
  *host = sl->host;
  *slot = i;
  return BK_OK;
}

/* Queues the copy out of a staged slot and moves the ring on. */
static bk_status stage_copy(bk_context *ctx, int slot, void *dst, size_t bytes) {
  static const char fn[] = "bufkern";
  bk_cuda_ctx *c = bk_cu(ctx);
  bk_cuda_stage *sl = &c->stage[slot];
  BK_CUDA_TRY(cudaMemcpyAsync(dst, sl->host, bytes, cudaMemcpyHostToDevice, c->stream), fn,
              "cudaMemcpyAsync (upload)");
  BK_CUDA_TRY(cudaEventRecord(sl->done, c->stream), fn, "cudaEventRecord");
  sl->pending = 1;
  c->stage_next = (slot + 1) % BK_CUDA_STAGE_SLOTS;
  return BK_OK;
}

bk_status bk__cuda_upload_indices(bk_context *ctx, const uint64_t *idx, int64_t k,
                                             uint32_t **dev) {
  size_t bytes = (size_t)k * sizeof(uint32_t);
  void *host = NULL, *d = NULL;
  int slot = 0;
  bk_status st = stage(ctx, bytes, &host, &slot);
  if (st != BK_OK) return st;
  uint32_t *h = (uint32_t *)host;
  for (int64_t r = 0; r < k; r++) h[r] = (uint32_t)idx[r];
  st = bk__cuda_scratch(ctx, bytes, &d);
  if (st != BK_OK) return st;
  st = stage_copy(ctx, slot, d, bytes);
  if (st != BK_OK) {
    bk__cuda_scratch_free(ctx, d);
    return st;
  }
  *dev = (uint32_t *)d;
  return BK_OK;
}

bk_status bk__cuda_upload_begin(bk_context *ctx, size_t bytes, void **host, int *slot) {
  return stage(ctx, bytes, host, slot);
}

bk_status bk__cuda_upload_finish(bk_context *ctx, int slot, size_t bytes, void **dev) {
  void *d = NULL;
  bk_status st = bk__cuda_scratch(ctx, bytes, &d);
  if (st != BK_OK) return st;
  st = stage_copy(ctx, slot, d, bytes);
  if (st != BK_OK) {
    bk__cuda_scratch_free(ctx, d);
    return st;
  }
  *dev = d;
  return BK_OK;
}

bk_status bk__cuda_upload_scratch(bk_context *ctx, const void *src, size_t bytes,
                                             void **dev) {
  void *host = NULL;
  int slot = 0;
  bk_status st = bk__cuda_upload_begin(ctx, bytes, &host, &slot);
  if (st != BK_OK) return st;
  memcpy(host, src, bytes);
  return bk__cuda_upload_finish(ctx, slot, bytes, dev);
}

/* A buffer upload from pageable memory: cudaMemcpyAsync returns once the
 * host array has been read into the runtime's staging, so the caller may
 * reuse it at once and the transfer stays ordered on the stream. */
static bk_status cuda_mem_upload(bk_context *ctx, void *dst, const void *src, size_t bytes) {
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(enter(c), "bk_buffer_from_host", "cudaSetDevice");
  BK_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream),
              "bk_buffer_from_host", "cudaMemcpyAsync");
  return BK_OK;
}

static bk_status cuda_mem_download(bk_context *ctx, void *dst, const void *src, size_t bytes) {
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(enter(c), "bk_buffer_to_host", "cudaSetDevice");
  BK_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream),
              "bk_buffer_to_host", "cudaMemcpyAsync");
  BK_CUDA_TRY(cudaStreamSynchronize(c->stream), "bk_buffer_to_host", "cudaStreamSynchronize");
  return BK_OK;
}

static bk_status cuda_mem_copy(bk_context *ctx, void *dst, const void *src, size_t bytes) {
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream), "bufkern",
              "cudaMemcpyAsync (device to device)");
  return BK_OK;
}

static bk_status cuda_mem_zero(bk_context *ctx, void *dst, size_t bytes) {
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, c->stream), "bufkern", "cudaMemsetAsync");
  return BK_OK;
}

/* ---- ordering and copies between contexts ---------------------------------- */

/* One event recorded on the producer's stream and waited on by the waiter's:
 * the host never waits. The event is destroyed at once; CUDA keeps it alive
 * until the wait has been resolved. */
static bk_status cuda_stream_wait(bk_context *waiter, bk_context *producer) {
  static const char fn[] = "bufkern";
  bk_cuda_ctx *w = bk_cu(waiter), *p = bk_cu(producer);
  if (w->stream == p->stream && w->device == p->device) return BK_OK;
  BK_CUDA_TRY(enter(p), fn, "cudaSetDevice");
  cudaEvent_t ev;
  BK_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), fn, "cudaEventCreate");
  cudaError_t err = cudaEventRecord(ev, p->stream);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(w->stream, ev, 0);
  (void)cudaEventDestroy(ev);
  return bk__cuda_status(err, fn, "cudaEventRecord / cudaStreamWaitEvent");
}

/* A copy between two GPUs on the destination's stream. Peer access from the
 * destination to the source is enabled on first use where the devices allow
 * it, so the copy engines move the data directly over NVLink or PCIe; where
 * they do not, cudaMemcpyPeerAsync stages through host memory itself. */
static bk_status cuda_mem_copy_peer(bk_context *dst_ctx, void *dst, int src_device,
                                    const void *src, size_t bytes) {
  static const char fn[] = "bk_buffer_copy";
  bk_cuda_ctx *c = bk_cu(dst_ctx);
  BK_CUDA_TRY(enter(c), fn, "cudaSetDevice");
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, c->device, src_device) == cudaSuccess && can) {
    /* Already enabled (an earlier copy, or the caller) is the usual answer;
     * any refusal leaves the staged path, so the result is not an error. */
    (void)cudaDeviceEnablePeerAccess(src_device, 0);
  }
  (void)cudaGetLastError();
  BK_CUDA_TRY(cudaMemcpyPeerAsync(dst, c->device, src, src_device, bytes, c->stream), fn,
              "cudaMemcpyPeerAsync");
  return BK_OK;
}

/* ---- the table ------------------------------------------------------------ */

static bk_backend make_cuda_backend(void) {
  bk_backend b;
  memset(&b, 0, sizeof b);
  b.name = "cuda";
  b.context_init = cuda_context_init;
  b.context_fini = cuda_context_fini;
  b.context_set_stream = cuda_context_set_stream;
  b.context_synchronize = cuda_context_synchronize;
  b.mem_alloc = cuda_mem_alloc;
  b.mem_free = cuda_mem_free;
  b.mem_upload = cuda_mem_upload;
  b.mem_download = cuda_mem_download;
  b.mem_copy = cuda_mem_copy;
  b.mem_zero = cuda_mem_zero;
  b.stream_wait = cuda_stream_wait;
  b.mem_copy_peer = cuda_mem_copy_peer;
  b.softmax = bk__cuda_softmax;
  b.xent_weighted_mean = bk__cuda_xent_weighted_mean;
  b.xent_teacher = bk__cuda_xent_teacher;
  b.conv = bk__cuda_conv;
  b.rows_sum = bk__cuda_rows_sum;
  b.rows_max = bk__cuda_rows_max;
  b.rows_first_max_mask = bk__cuda_rows_first_max_mask;
  b.rows_topk_mask = bk__cuda_rows_topk_mask;
  b.rows_masked_softmax = bk__cuda_rows_masked_softmax;
  b.broadcast_col = bk__cuda_broadcast_col;
  b.broadcast_to = bk__cuda_broadcast_to;
  b.broadcast_to_adjoint = bk__cuda_broadcast_to_adjoint;
  b.swap_adjacent = bk__cuda_swap_adjacent;
  b.sum_axis = bk__cuda_sum_axis;
  b.layernorm_forward = bk__cuda_layernorm_forward;
  b.layernorm_backward = bk__cuda_layernorm_backward;
  b.bmm = bk__cuda_bmm;
  b.bmm_scaled = bk__cuda_bmm_scaled;
  b.rfft = bk__cuda_rfft;
  b.irfft = bk__cuda_irfft;
  b.scan_diag = bk__cuda_scan_diag;
  b.scan_diag_backward = bk__cuda_scan_diag_backward;
  b.rows_gather = bk__cuda_rows_gather;
  b.rows_scatter_add = bk__cuda_rows_scatter_add;
  return b;
}

extern "C" const bk_backend bk__cuda_backend = make_cuda_backend();
