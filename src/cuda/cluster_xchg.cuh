/*
 * cluster_xchg.cuh — the asynchronous-copy and mbarrier operations of the
 * kernels that split rows across a thread-block cluster and exchange
 * per-block statistics without cluster barriers in their row loops
 * (xent_cluster.cu, rowcache.cu, layernorm.cu):
 *  - bulk copies global -> shared (cp.async.bulk) counted in bytes on an
 *    mbarrier of the receiving block;
 *  - st.async of 16 bytes into another block's shared memory, counted on
 *    that block's mbarrier;
 *  - mbarrier initialization, arrival with an expected byte count, and
 *    waits on a phase parity (CTA scope for a block's own copies, cluster
 *    scope with acquire for values other blocks stored).
 * A cluster barrier (cluster.sync(), barrier.cluster.arrive.release) makes
 * every block wait for its outstanding global stores; an mbarrier wait does
 * not, which is why these kernels exchange through mbarriers.
 */
#ifndef BK_CUDA_CLUSTER_XCHG_CUH
#define BK_CUDA_CLUSTER_XCHG_CUH

#include "cuda_internal.h"

#include <cuda_runtime.h>
#include <stdint.h>

static __device__ __forceinline__ unsigned cx_smem(const void *p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

/* The same shared-memory location in block `rank` of the cluster. */
static __device__ __forceinline__ unsigned cx_mapa(unsigned addr, unsigned rank) {
  unsigned out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}

static __device__ __forceinline__ void cx_bar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

/* Makes the initialized mbarriers visible to the cluster (followed by a
 * cluster barrier). */
static __device__ __forceinline__ void cx_bar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/* Arrives once and expects `bytes` more of counted transfers this phase. */
static __device__ __forceinline__ void cx_bar_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

static __device__ __forceinline__ void cx_bar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* Waits until the phase of the given parity has completed: CTA scope for
 * the block's own bulk copies, cluster scope for the values other blocks
 * stored. */
static __device__ __forceinline__ void cx_bar_wait(unsigned bar, unsigned parity) {
  unsigned ok;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!ok);
}
static __device__ __forceinline__ void cx_bar_wait_cluster(unsigned bar, unsigned parity) {
  unsigned ok;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!ok);
}

/* `bytes` (a multiple of 16, 16-byte aligned ends) from global memory into
 * this block's shared memory, counted on bar. */
static __device__ __forceinline__ void cx_bulk_load(unsigned dst, const void *src, unsigned bytes,
                                                    unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bar)
      : "memory");
}

/* Two doubles into another block's shared memory (dst 16-byte aligned),
 * counted as 16 bytes on that block's mbarrier bar. */
static __device__ __forceinline__ void cx_store_remote(unsigned dst, double a, double b,
                                                       unsigned bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f64 [%0], {%1, %2}, [%3];" ::"r"(
          dst),
      "d"(a), "d"(b), "r"(bar)
      : "memory");
}

/* Orders this thread's earlier generic-proxy writes to shared memory before
 * later bulk copies into the same bytes. */
static __device__ __forceinline__ void cx_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}


/* ---- host side ---------------------------------------------------------------------- */

/* The launch of one cluster of C blocks of `threads` threads and `smem`
 * dynamic bytes each on `stream` (the caller widens gridDim to the whole
 * grid, a multiple of C); attr[0], which must outlive the configuration,
 * receives the cluster dimension. */
static inline cudaLaunchConfig_t cx_cluster_config(cudaLaunchAttribute *attr, int64_t C,
                                                   int threads, size_t smem,
                                                   cudaStream_t stream) {
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = (unsigned)C;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)C, 1, 1);
  cfg.blockDim = dim3((unsigned)threads, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

/* How many clusters of cfg can be resident at once, read once per context
 * and launch shape (bk__cuda_occupancy): 0, with the error cleared, when
 * none can or the query fails. */
template <typename K>
static inline int cx_active_clusters(bk_context *ctx, K kern, const cudaLaunchConfig_t &cfg) {
  return bk__cuda_occupancy(ctx, (const void *)kern, (int)cfg.blockDim.x, cfg.dynamicSmemBytes,
                            (int)cfg.attrs[0].val.clusterDim.x);
}

#endif
