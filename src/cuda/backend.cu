/*
 * backend.cu — the CUDA backend's context, memory and table.
 *
 * Each context owns a non-blocking stream (or uses a caller's, or CUDA's
 * legacy default stream), allocates from the device's stream-ordered memory
 * pool (cudaMallocAsync / cudaFreeAsync on that stream), and creates its
 * cuBLAS and cuDNN handles on first use. Nothing here synchronizes except
 * context_synchronize, a stream change and mem_download, and those three
 * refuse to run while the stream is being captured into a CUDA graph.
 */
#include "cluster_xchg.cuh"
#include "cuda_internal.h"

#include "../core/hooks.h"

#include <cublas_v2.h>
#include <cudnn.h>

#include <stdint.h>
#include <string.h>

#include <mutex>

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

static void cuda_context_fini(bk_context *ctx);

/* fn is bk_context_create, or the call that needed a thread's default
 * context; it names every message below. */
static bk_status cuda_context_init(bk_context *ctx, const char *ctx_fn, int index) {
  int count = bk__cuda_device_count();
  if (index >= count)
    return bk__fail(BK_ERR_NO_DEVICE, ctx_fn, "device.index = %d but %d CUDA device(s) are visible",
                    index, count);
  bk_cuda_ctx *c =
      (bk_cuda_ctx *)bk__host_zalloc(ctx_fn, "memory for the CUDA context state", 1, sizeof *c);
  if (!c) return BK_ERR_OUT_OF_MEMORY;
  c->device = index;
  bk__ctx_set_impl(ctx, c);
  bk_status st = bk__cuda_status(cudaSetDevice(index), ctx_fn, "cudaSetDevice");
  cudaDeviceProp prop;
  if (st == BK_OK)
    st = bk__cuda_status(cudaGetDeviceProperties(&prop, index), ctx_fn, "cudaGetDeviceProperties");
  if (st == BK_OK) {
    c->sm_count = prop.multiProcessorCount;
    c->l2_bytes = (size_t)prop.l2CacheSize;
    c->facts.smem_per_sm = (int)prop.sharedMemPerMultiprocessor;
    c->facts.smem_optin = (int)prop.sharedMemPerBlockOptin;
    c->facts.smem_reserved = (int)prop.reservedSharedMemPerBlock;
    c->facts.regs_per_sm = prop.regsPerMultiprocessor;
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

/* ---- host data owned by captured graphs ---------------------------------- */

/* Guards every context's owned list against the graphs' release callbacks,
 * which CUDA runs on its own thread and which may outlive a context. */
static std::mutex owned_lock;

/* A graph's user object was destroyed: the graph, and every executable
 * graph made from it, are gone and their launches have completed. No CUDA
 * call is allowed here; the block is freed by the context's next
 * allocation (owned_reap), or already was, with the context. */
static void CUDART_CB owned_release(void *p) {
  bk_cuda_owned *o = (bk_cuda_owned *)p;
  std::lock_guard<std::mutex> g(owned_lock);
  if (!o->c) {
    bk__host_free(o);
    return;
  }
  o->released = 1;
  __atomic_fetch_add(&o->c->owned_released, 1, __ATOMIC_RELEASE);
}

/* Frees the released blocks, stream-ordered on the side stream (never
 * captured), so it neither synchronizes nor touches a capture in progress. */
static void owned_reap(bk_cuda_ctx *c) {
  if (__atomic_load_n(&c->owned_released, __ATOMIC_ACQUIRE) == 0) return;
  bk_cuda_owned *done = NULL;
  {
    std::lock_guard<std::mutex> g(owned_lock);
    for (bk_cuda_owned **pp = &c->owned; *pp;) {
      bk_cuda_owned *o = *pp;
      if (o->released) {
        *pp = o->next;
        o->next = done;
        done = o;
      } else {
        pp = &o->next;
      }
    }
    __atomic_store_n(&c->owned_released, 0, __ATOMIC_RELEASE);
  }
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  while (done) {
    bk_cuda_owned *next = done->next;
    (void)cudaFreeAsync(done->ptr, c->side_stream);
    bk__host_free(done);
    done = next;
  }
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  (void)cudaGetLastError();
}

/* The context goes: every block is freed (a graph still alive past its
 * context breaks the documented rule; its release then only frees its
 * record). */
static void owned_fini(bk_cuda_ctx *c) {
  bk_cuda_owned *all = NULL, *orphans = NULL;
  {
    std::lock_guard<std::mutex> g(owned_lock);
    for (bk_cuda_owned *o = c->owned, *next; o; o = next) {
      next = o->next;
      if (o->released) {
        o->next = all;
        all = o;
      } else {
        /* The graph's release frees this record; a copy of it keeps the
         * block for the free below, outside the lock. */
        bk_cuda_owned *copy = (bk_cuda_owned *)bk__host_alloc("bk_context_destroy",
                                                              "record of a graph's data", 1,
                                                              sizeof *copy);
        if (copy) {
          copy->ptr = o->ptr;
          copy->next = orphans;
          orphans = copy;
        }
        o->c = NULL;
      }
    }
    c->owned = NULL;
  }
  for (bk_cuda_owned *lists[2] = {all, orphans}, **l = lists; l < lists + 2; l++)
    for (bk_cuda_owned *o = *l, *next; o; o = next) {
      next = o->next;
      (void)cudaFreeAsync(o->ptr, c->side_stream);
      bk__host_free(o);
    }
  if (c->side_stream) {
    (void)cudaStreamSynchronize(c->side_stream);
    (void)cudaStreamDestroy(c->side_stream);
  }
}

extern "C" BK_API int64_t bk__cuda_graph_blocks(bk_context *ctx) {
  if (!ctx || bk_context_device(ctx).kind != BK_DEVICE_CUDA) return -1;
  std::lock_guard<std::mutex> g(owned_lock);
  int64_t n = 0;
  for (const bk_cuda_owned *o = bk_cu(ctx)->owned; o; o = o->next) n++;
  return n;
}

static bool owned_has(const bk_cuda_ctx *c, const void *ptr) {
  for (const bk_cuda_owned *o = c->owned; o; o = o->next)
    if (o->ptr == ptr) return true;
  return false;
}

/* *dev <- a device copy of `bytes` of host data, made now and owned by the
 * graph that the context's stream is capturing: a replay reads the data of
 * capture time and the graph has no allocation or copy node for it. The
 * block is allocated and filled on the side stream, which is then waited
 * for, with the thread's capture mode relaxed for these calls (they are
 * not part of the capture). bk__cuda_scratch_free leaves it alone. */
static bk_status owned_upload(bk_context *ctx, const char *fn, const void *host, size_t bytes,
                              void **dev) {
  if (bk__inject_should_fail())
    return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of device memory", bytes);
  bk_cuda_ctx *c = bk_cu(ctx);
  bk_cuda_owned *o =
      (bk_cuda_owned *)bk__host_zalloc(fn, "record of a captured graph's data", 1, sizeof *o);
  if (!o) return BK_ERR_OUT_OF_MEMORY;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  cudaError_t err = cudaSuccess;
  const char *what = "cudaStreamCreateWithFlags";
  if (!c->side_stream) err = cudaStreamCreateWithFlags(&c->side_stream, cudaStreamNonBlocking);
  void *p = NULL;
  if (err == cudaSuccess) {
    what = "cudaMallocAsync";
    err = cudaMallocAsync(&p, bytes, c->side_stream);
  }
  if (err == cudaSuccess) {
    what = "cudaMemcpyAsync";
    err = cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, c->side_stream);
  }
  if (err == cudaSuccess) {
    what = "cudaStreamSynchronize";
    err = cudaStreamSynchronize(c->side_stream);
  }
  if (err != cudaSuccess && p) (void)cudaFreeAsync(p, c->side_stream);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  if (err != cudaSuccess) {
    bk__host_free(o);
    return bk__cuda_status(err, fn, what);
  }
  o->ptr = p;
  o->c = c;
  {
    std::lock_guard<std::mutex> g(owned_lock);
    o->next = c->owned;
    c->owned = o;
  }
  /* From here the record is on the list: a failure below releases the
   * user object (or marks the record released), and the next reap frees
   * the block. */
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = NULL;
  cudaUserObject_t obj = NULL;
  err = cudaStreamGetCaptureInfo(c->stream, &cs, NULL, &graph);
  what = "cudaStreamGetCaptureInfo";
  if (err == cudaSuccess && (cs != cudaStreamCaptureStatusActive || !graph))
    err = cudaErrorStreamCaptureInvalidated;
  if (err == cudaSuccess) {
    what = "cudaUserObjectCreate";
    err = cudaUserObjectCreate(&obj, o, owned_release, 1, cudaUserObjectNoDestructorSync);
    if (err == cudaSuccess) {
      what = "cudaGraphRetainUserObject";
      err = cudaGraphRetainUserObject(graph, obj, 1, cudaGraphUserObjectMove);
      if (err != cudaSuccess) (void)cudaUserObjectRelease(obj, 1); /* runs owned_release */
    }
  }
  if (err != cudaSuccess) {
    if (!obj) owned_release(o);
    return bk__cuda_status(err, fn, what);
  }
  *dev = p;
  return BK_OK;
}

static void cuda_context_fini(bk_context *ctx) {
  bk_cuda_ctx *c = bk_cu(ctx);
  if (!c) return;
  (void)cudaSetDevice(c->device);
  /* A stream still being captured cannot be drained; the capture's owner
   * ends it. */
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(c->stream, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone)
    (void)cudaStreamSynchronize(c->stream);
  for (int i = 0; i < BK_CUDA_CACHE_SLOTS; i++)
    if (c->cache[i] && c->cache_free[i]) c->cache_free[i](c->cache[i]);
  if (c->cublas) (void)cublasDestroy((cublasHandle_t)c->cublas);
  if (c->cudnn) (void)cudnnDestroy((cudnnHandle_t)c->cudnn);
  if (c->flag) (void)cudaFree(c->flag);
  owned_fini(c);
  bk__host_free(c->inline_host);
  for (int i = 0; i < BK_CUDA_STAGE_SLOTS; i++) {
    if (c->stage[i].host) (void)cudaFreeHost(c->stage[i].host);
    if (c->stage[i].done) (void)cudaEventDestroy(c->stage[i].done);
  }
  if (c->own_stream) (void)cudaStreamDestroy(c->own_stream);
  (void)cudaGetLastError();
  bk__host_free(c);
  bk__ctx_set_impl(ctx, NULL);
}

/* ---- capture ------------------------------------------------------------ */

bk_status bk__cuda_capturing(bk_context *ctx, const char *fn, bool *capturing) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  BK_CUDA_TRY(cudaStreamIsCapturing(bk_stream(ctx), &cs), fn, "cudaStreamIsCapturing");
  *capturing = cs != cudaStreamCaptureStatusNone;
  return BK_OK;
}

bk_status bk__cuda_refuse_capture(bk_context *ctx, const char *fn, const char *what) {
  bool capturing = false;
  bk_status st = bk__cuda_capturing(ctx, fn, &capturing);
  if (st != BK_OK) return st;
  if (capturing)
    return bk__fail(BK_ERR_UNSUPPORTED, fn,
                    "%s cannot be captured into a CUDA graph: the context's stream is capturing",
                    what);
  return BK_OK;
}

/* Open addressing by the kernel's address; a full table still sets the
 * attributes, only without remembering them. */
bool bk__cuda_func_prepare(bk_context *ctx, const void *kern, int dyn_smem, int carveout,
                           int nonportable, size_t *static_smem) {
  bk_cuda_ctx *c = bk_cu(ctx);
  const uintptr_t h = ((uintptr_t)kern >> 4) * (uintptr_t)0x9E3779B97F4A7C15ull;
  bk_cuda_func *slot = NULL;
  for (int probe = 0; probe < BK_CUDA_FUNC_SLOTS; probe++) {
    bk_cuda_func *f = &c->func[(h + (uintptr_t)probe) % BK_CUDA_FUNC_SLOTS];
    if (!f->kern) {
      slot = f;
      break;
    }
    if (f->kern == kern && f->dyn_smem == dyn_smem && f->carveout == carveout &&
        f->nonportable == nonportable) {
      if (f->ok && static_smem) *static_smem = f->static_smem;
      return f->ok != 0;
    }
  }
  cudaFuncAttributes fa;
  bool ok = cudaFuncGetAttributes(&fa, kern) == cudaSuccess;
  const int dyn = dyn_smem >= 0 ? dyn_smem : c->facts.smem_optin - (int)fa.sharedSizeBytes;
  ok = ok && (dyn_smem == 0 ||
              (dyn > 0 && cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               dyn) == cudaSuccess)) &&
       (carveout < 0 || cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                             carveout) == cudaSuccess) &&
       (!nonportable ||
        cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
            cudaSuccess);
  if (!ok) (void)cudaGetLastError();
  if (slot) {
    slot->kern = kern;
    slot->dyn_smem = dyn_smem;
    slot->carveout = carveout;
    slot->nonportable = nonportable;
    slot->static_smem = ok ? fa.sharedSizeBytes : 0;
    slot->ok = ok;
  }
  if (ok && static_smem) *static_smem = fa.sharedSizeBytes;
  return ok;
}

/* Open addressing by kernel address and launch shape; a full table still
 * answers, only without remembering. */
int bk__cuda_occupancy(bk_context *ctx, const void *kern, int threads, size_t smem, int csize) {
  bk_cuda_ctx *c = bk_cu(ctx);
  const uintptr_t h = (((uintptr_t)kern >> 4) ^ ((uintptr_t)threads << 20) ^ (uintptr_t)smem ^
                       ((uintptr_t)csize << 40)) *
                      (uintptr_t)0x9E3779B97F4A7C15ull;
  bk_cuda_occ *slot = NULL;
  for (int probe = 0; probe < BK_CUDA_OCC_SLOTS; probe++) {
    bk_cuda_occ *o = &c->occ[(h + (uintptr_t)probe) % BK_CUDA_OCC_SLOTS];
    if (!o->kern) {
      slot = o;
      break;
    }
    if (o->kern == kern && o->threads == threads && o->smem == smem && o->csize == csize)
      return o->value;
  }
  int value = 0;
  cudaError_t err;
  if (csize == 0) {
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&value, kern, threads, smem);
  } else {
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg = cx_cluster_config(attr, csize, threads, smem, c->stream);
    err = cudaOccupancyMaxActiveClusters(&value, kern, &cfg);
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    value = 0;
  }
  if (value < 0) value = 0;
  if (slot) {
    slot->kern = kern;
    slot->threads = threads;
    slot->smem = smem;
    slot->csize = csize;
    slot->value = value;
  }
  return value;
}

/* The shared-memory capacities (KB per multiprocessor) that compute
 * capability 9.0 can be configured with; the driver rounds a carveout
 * percentage up to the next of them. */
static const int CARVEOUT_KB_SM90[] = {0, 8, 16, 32, 64, 100, 132, 164, 196, 228};

/* The carveout percentage for `need` bytes of shared memory on a
 * multiprocessor that holds at most per_sm. Without snap: need / per_sm
 * rounded up. With snap: the smallest capacity of the table that holds
 * need, asked for as the largest percentage that still rounds up to it;
 * rounding need up can step past that capacity when need sits just below
 * it (two 4096-column float64 blocks take 195 KB, and 86% of 228 KB is just
 * over 196 KB, so the driver would take 228 KB). snap acts only when per_sm
 * is the largest capacity of the table (a compute capability 9.0 device). */
static int carveout_pct(int64_t need, int per_sm, bool snap) {
  int64_t pct = (need * 100 + per_sm - 1) / per_sm;
  const int n = (int)(sizeof(CARVEOUT_KB_SM90) / sizeof(CARVEOUT_KB_SM90[0]));
  if (snap && (int64_t)CARVEOUT_KB_SM90[n - 1] * 1024 == (int64_t)per_sm) {
    for (int i = 0; i < n; ++i) {
      const int64_t cap = (int64_t)CARVEOUT_KB_SM90[i] * 1024;
      if (cap >= need) {
        pct = cap * 100 / per_sm;
        break;
      }
    }
  }
  return pct > 100 ? 100 : (int)pct;
}

bool bk__cuda_func_fit(bk_context *ctx, const void *kern, int bytes, int blocks, int nonportable,
                       bool snap) {
  const bk_cuda_facts *dev = &bk_cu(ctx)->facts;
  size_t fixed = 0;
  if (dev->smem_per_sm <= 0 || !bk__cuda_func_prepare(ctx, kern, bytes, -1, nonportable, &fixed))
    return false;
  const int64_t need = (int64_t)blocks * ((int64_t)bytes + (int64_t)fixed + dev->smem_reserved);
  (void)bk__cuda_func_prepare(ctx, kern, bytes, carveout_pct(need, dev->smem_per_sm, snap),
                              nonportable, NULL); /* the carveout is a hint only */
  return true;
}

/* ---- streams ------------------------------------------------------------- */

/* Moves the context onto `next` (NULL: the legacy default stream). Work
 * already queued on the old stream must finish before work queued on the
 * new one may read its results, so the old stream is drained first; a
 * stream being captured cannot be drained and is not left. */
static bk_status move_to_stream(bk_context *ctx, const char *fn, cudaStream_t next) {
  bk_cuda_ctx *c = bk_cu(ctx);
  if (next == c->stream) return BK_OK;
  BK_CUDA_TRY(cudaSetDevice(c->device), fn, "cudaSetDevice");
  bk_status st = bk__cuda_refuse_capture(ctx, fn, "a stream change");
  if (st != BK_OK) return st;
  BK_CUDA_TRY(cudaStreamSynchronize(c->stream), fn, "cudaStreamSynchronize");
  c->stream = next;
  if (c->cublas) (void)cublasSetStream((cublasHandle_t)c->cublas, next);
  if (c->cudnn) (void)cudnnSetStream((cudnnHandle_t)c->cudnn, next);
  return BK_OK;
}

static bk_status cuda_context_set_stream(bk_context *ctx, void *stream) {
  return move_to_stream(ctx, "bk_context_set_stream", (cudaStream_t)stream);
}

static bk_status cuda_context_reset_stream(bk_context *ctx) {
  return move_to_stream(ctx, "bk_context_reset_stream", bk_cu(ctx)->own_stream);
}

static bk_status cuda_context_synchronize(bk_context *ctx) {
  static const char fn[] = "bk_context_synchronize";
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(enter(c), fn, "cudaSetDevice");
  bk_status st = bk__cuda_refuse_capture(ctx, fn, "a stream synchronization");
  if (st != BK_OK) return st;
  BK_CUDA_TRY(cudaStreamSynchronize(c->stream), fn, "cudaStreamSynchronize");
  return BK_OK;
}

bk_status bk__cuda_cublas(bk_context *ctx, const char *fn, void **handle) {
  bk_cuda_ctx *c = bk_cu(ctx);
  if (!c->cublas) {
    bk_status st = bk__cuda_refuse_capture(ctx, fn, "creating the context's cuBLAS handle (first use)");
    if (st != BK_OK) return st;
    cublasHandle_t h;
    cublasStatus_t s = cublasCreate(&h);
    if (s != CUBLAS_STATUS_SUCCESS)
      return bk__fail(s == CUBLAS_STATUS_ALLOC_FAILED ? BK_ERR_OUT_OF_MEMORY : BK_ERR_DEVICE,
                      fn, "cublasCreate failed (%d)", (int)s);
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

bk_status bk__cuda_cudnn(bk_context *ctx, const char *fn, void **handle) {
  bk_cuda_ctx *c = bk_cu(ctx);
  if (!c->cudnn) {
    bk_status st = bk__cuda_refuse_capture(ctx, fn, "creating the context's cuDNN handle (first use)");
    if (st != BK_OK) return st;
    cudnnHandle_t h;
    cudnnStatus_t s = cudnnCreate(&h);
    if (s != CUDNN_STATUS_SUCCESS)
      return bk__fail(BK_ERR_DEVICE, fn, "cudnnCreate failed: %s", cudnnGetErrorString(s));
    (void)cudnnSetStream(h, c->stream);
    c->cudnn = h;
  }
  *handle = c->cudnn;
  return BK_OK;
}

/* ---- memory -------------------------------------------------------------- */


/* Device memory for a buffer (mem_alloc) or for scratch (bk__cuda_scratch):
 * an allocation site each, so the failure walk tells them apart. */
static bk_status device_alloc(bk_alloc_site *site, bk_context *ctx, const char *fn, size_t bytes,
                              void **ptr) {
  if (bk__inject_should_fail_at(site))
    return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of device memory", bytes);
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(enter(c), fn, "cudaSetDevice");
  owned_reap(c);
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

static bk_status cuda_mem_alloc(bk_context *ctx, const char *fn, size_t bytes, void **ptr) {
  return device_alloc(BK_ALLOC_SITE(), ctx, fn, bytes, ptr);
}

static void cuda_mem_free(bk_context *ctx, void *ptr) {
  bk_cuda_ctx *c = bk_cu(ctx);
  (void)enter(c);
  (void)cudaFreeAsync(ptr, c->stream);
}

bk_status bk__cuda_scratch(bk_context *ctx, const char *fn, size_t bytes, void **ptr) {
  return device_alloc(BK_ALLOC_SITE(), ctx, fn, bytes, ptr);
}

void bk__cuda_scratch_free(bk_context *ctx, void *ptr) {
  if (ptr && !owned_has(bk_cu(ctx), ptr)) cuda_mem_free(ctx, ptr);
}

/* Host data goes through pinned staging so the copy can be asynchronous
 * while the caller's array is free to reuse at once. The slots form a ring:
 * a slot is reused after the copy out of it completed, which for a ring of
 * BK_CUDA_STAGE_SLOTS is almost never a wait, so the host keeps running
 * ahead of the device. */
static bk_status stage(bk_context *ctx, const char *fn, size_t bytes, void **host, int *slot) {
  bk_cuda_ctx *c = bk_cu(ctx);
  const int i = c->stage_next;
  bk_cuda_stage *sl = &c->stage[i];
  if (sl->pending) {
    BK_CUDA_TRY(cudaEventSynchronize(sl->done), fn, "cudaEventSynchronize");
    sl->pending = 0;
  }
  if (bytes > sl->cap) {
    if (bk__inject_should_fail())
      return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of pinned host memory", bytes);
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
static bk_status stage_copy(bk_context *ctx, const char *fn, int slot, void *dst, size_t bytes) {
  bk_cuda_ctx *c = bk_cu(ctx);
  bk_cuda_stage *sl = &c->stage[slot];
  BK_CUDA_TRY(cudaMemcpyAsync(dst, sl->host, bytes, cudaMemcpyHostToDevice, c->stream), fn,
              "cudaMemcpyAsync (upload)");
  BK_CUDA_TRY(cudaEventRecord(sl->done, c->stream), fn, "cudaEventRecord");
  sl->pending = 1;
  c->stage_next = (slot + 1) % BK_CUDA_STAGE_SLOTS;
  return BK_OK;
}

/* Host data in kernel parameters: CUDA copies a kernel's arguments when
 * the launch is queued (or captured into a graph node), so the host block
 * may be reused at once and a graph keeps the values it was captured with. */
struct inline_bytes {
  unsigned char b[BK_CUDA_INLINE_BYTES];
};

static __global__ void inline_copy_kernel(unsigned char *__restrict__ dst, inline_bytes src,
                                          unsigned n) {
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src.b[i];
}

/* dst (device) <- host src through kernel parameters, one launch per
 * BK_CUDA_INLINE_BYTES. */
static bk_status inline_copy(bk_context *ctx, const char *fn, void *dst, const void *src,
                             size_t bytes) {
  inline_bytes chunk;
  for (size_t at = 0; at < bytes; at += BK_CUDA_INLINE_BYTES) {
    const size_t n = bytes - at < BK_CUDA_INLINE_BYTES ? bytes - at : BK_CUDA_INLINE_BYTES;
    memcpy(chunk.b, (const unsigned char *)src + at, n);
    inline_copy_kernel<<<1, 256, 0, bk_stream(ctx)>>>((unsigned char *)dst + at, chunk,
                                                      (unsigned)n);
    bk_status st = bk__cuda_launched(fn, "inline_copy_kernel");
    if (st != BK_OK) return st;
  }
  return BK_OK;
}

/* The slot value of a begin whose staging is a plain host block that
 * finish copies through kernel parameters. */
#define BK_STAGE_INLINE (-1)

bk_status bk__cuda_upload_begin(bk_context *ctx, const char *fn, size_t bytes, void **host,
                                int *slot) {
  bool in_params = bytes <= BK_CUDA_INLINE_BYTES;
  if (!in_params) {
    bk_status st = bk__cuda_capturing(ctx, fn, &in_params);
    if (st != BK_OK) return st;
  }
  if (!in_params) return stage(ctx, fn, bytes, host, slot);
  void *h = bk__host_alloc(fn, "host staging", bytes, 1);
  if (!h) return BK_ERR_OUT_OF_MEMORY;
  bk_cu(ctx)->inline_host = h;
  *host = h;
  *slot = BK_STAGE_INLINE;
  return BK_OK;
}

bk_status bk__cuda_upload_finish(bk_context *ctx, const char *fn, int slot, size_t bytes,
                                 void **dev) {
  void *d = NULL;
  bool capturing = false;
  bk_status st = BK_OK;
  if (slot == BK_STAGE_INLINE) st = bk__cuda_capturing(ctx, fn, &capturing);
  if (capturing) {
    st = owned_upload(ctx, fn, bk_cu(ctx)->inline_host, bytes, &d);
    bk__host_free(bk_cu(ctx)->inline_host);
    bk_cu(ctx)->inline_host = NULL;
    if (st == BK_OK) *dev = d;
    return st;
  }
  if (st == BK_OK) st = bk__cuda_scratch(ctx, fn, bytes, &d);
  if (st == BK_OK) {
    if (slot == BK_STAGE_INLINE)
      st = inline_copy(ctx, fn, d, bk_cu(ctx)->inline_host, bytes);
    else
      st = stage_copy(ctx, fn, slot, d, bytes);
  }
  if (slot == BK_STAGE_INLINE) {
    bk__host_free(bk_cu(ctx)->inline_host);
    bk_cu(ctx)->inline_host = NULL;
  }
  if (st != BK_OK) {
    bk__cuda_scratch_free(ctx, d);
    return st;
  }
  *dev = d;
  return BK_OK;
}

/* Indices per staged chunk of a large upload (4 MB of uint32): long enough
 * that the queueing of each copy is a small part of its transfer, short
 * enough that converting the first chunk delays the copies little. */
#define BK_UPLOAD_CHUNK ((int64_t)1 << 20)

static void convert_indices(uint32_t *h, const uint64_t *idx, int64_t n) {
  for (int64_t r = 0; r < n; r++) h[r] = (uint32_t)idx[r];
}

bk_status bk__cuda_upload_indices(bk_context *ctx, const char *fn, const uint64_t *idx,
                                  int64_t k, uint32_t **dev) {
  const size_t bytes = (size_t)k * sizeof(uint32_t);
  bool in_params = bytes <= BK_CUDA_INLINE_BYTES;
  if (!in_params) {
    bk_status st = bk__cuda_capturing(ctx, fn, &in_params);
    if (st != BK_OK) return st;
  }
  if (in_params) {
    void *host = NULL;
    int slot = 0;
    bk_status st = bk__cuda_upload_begin(ctx, fn, bytes, &host, &slot);
    if (st != BK_OK) return st;
    convert_indices((uint32_t *)host, idx, k);
    return bk__cuda_upload_finish(ctx, fn, slot, bytes, (void **)dev);
  }
  void *d = NULL;
  bk_status st = bk__cuda_scratch(ctx, fn, bytes, &d);
  for (int64_t at = 0; at < k && st == BK_OK; at += BK_UPLOAD_CHUNK) {
    const int64_t n = k - at < BK_UPLOAD_CHUNK ? k - at : BK_UPLOAD_CHUNK;
    void *host = NULL;
    int slot = 0;
    st = stage(ctx, fn, (size_t)n * sizeof(uint32_t), &host, &slot);
    if (st != BK_OK) break;
    convert_indices((uint32_t *)host, idx + at, n);
    st = stage_copy(ctx, fn, slot, (uint32_t *)d + at, (size_t)n * sizeof(uint32_t));
  }
  if (st != BK_OK) {
    bk__cuda_scratch_free(ctx, d);
    return st;
  }
  *dev = (uint32_t *)d;
  return BK_OK;
}

bk_status bk__cuda_upload_scratch(bk_context *ctx, const char *fn, const void *src, size_t bytes,
                                  void **dev) {
  void *host = NULL;
  int slot = 0;
  bk_status st = bk__cuda_upload_begin(ctx, fn, bytes, &host, &slot);
  if (st != BK_OK) return st;
  memcpy(host, src, bytes);
  return bk__cuda_upload_finish(ctx, fn, slot, bytes, dev);
}

/* A buffer upload from pageable memory: cudaMemcpyAsync returns once the
 * host array has been read into the runtime's staging, so the caller may
 * reuse it at once and the transfer stays ordered on the stream. While the
 * stream is being captured the data travels in kernel parameters instead,
 * so the graph holds its own copy of it. */
static bk_status cuda_mem_upload(bk_context *ctx, const char *fn, void *dst, const void *src,
                                 size_t bytes) {
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(enter(c), fn, "cudaSetDevice");
  bool capturing = false;
  bk_status st = bk__cuda_capturing(ctx, fn, &capturing);
  if (st != BK_OK) return st;
  if (capturing) return inline_copy(ctx, fn, dst, src, bytes);
  BK_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), fn,
              "cudaMemcpyAsync");
  return BK_OK;
}

static bk_status cuda_mem_download(bk_context *ctx, const char *fn, void *dst, const void *src,
                                   size_t bytes) {
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(enter(c), fn, "cudaSetDevice");
  bk_status st = bk__cuda_refuse_capture(ctx, fn, "a copy to host memory (it synchronizes)");
  if (st != BK_OK) return st;
  BK_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), fn,
              "cudaMemcpyAsync");
  BK_CUDA_TRY(cudaStreamSynchronize(c->stream), fn, "cudaStreamSynchronize");
  return BK_OK;
}

static bk_status cuda_mem_copy(bk_context *ctx, const char *fn, void *dst, const void *src,
                               size_t bytes) {
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream), fn,
              "cudaMemcpyAsync (device to device)");
  return BK_OK;
}

static bk_status cuda_mem_zero(bk_context *ctx, const char *fn, void *dst, size_t bytes) {
  bk_cuda_ctx *c = bk_cu(ctx);
  BK_CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, c->stream), fn, "cudaMemsetAsync");
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
  b.context_reset_stream = cuda_context_reset_stream;
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
