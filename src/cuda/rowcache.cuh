/*
 * rowcache.cuh — device helpers for kernels that cache a row (or a slice of
 * a row) in shared memory: cp.async 16-byte global -> shared copies, 16-byte
 * vectors as arrays, warp reductions, and fixed-order folds of per-CTA
 * partials across a thread-block cluster through distributed shared memory;
 * and the host side that prepares and launches such kernels, a block or a
 * cluster of blocks per row. (Plain 16-byte loads and stores of shared
 * memory use bk_vload / bk_st16 from cuda_internal.h.)
 * Everything here is header-only and static, so any family's .cu file may
 * include it.
 */
#ifndef BK_CUDA_ROWCACHE_CUH
#define BK_CUDA_ROWCACHE_CUH

#include "cluster_xchg.cuh"
#include "cuda_internal.h"

#include <cooperative_groups.h>
#include <stdint.h>

/* ---- cp.async: global -> shared without staging registers ----------------------- */

/* Queues a 16-byte copy from global memory to shared memory (both 16-byte
 * aligned). The copy bypasses L1 (.cg) and completes asynchronously: the
 * issuing thread sees the data after rc_cp_async_wait_all. */
static __device__ __forceinline__ void rc_cp_async16(void *smem, const void *gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

/* Closes the group of copies issued so far by this thread. */
static __device__ __forceinline__ void rc_cp_async_commit(void) {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until every copy this thread issued has landed and is visible to
 * it. Other threads' copies need a barrier on top of this. */
static __device__ __forceinline__ void rc_cp_async_wait_all(void) {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* ---- 16-byte vectors -------------------------------------------------------------- */

/* Elements of T in 16 bytes, and the matching mask-bit word vector: the
 * row kernels keep one 32-bit word per vector lane position (see
 * rowcache.cu), so a vector's allowed bits are VEC consecutive words. */
template <typename T> struct rc_vec;
template <> struct rc_vec<float> {
  static constexpr int n = 4;
};
template <> struct rc_vec<double> {
  static constexpr int n = 2;
};

/* 16 bytes of global memory read once (streaming: evict first). */
static __device__ __forceinline__ void rc_ldg16_cs(const float *p, float *v) {
  const float4 t = __ldcs(reinterpret_cast<const float4 *>(p));
  v[0] = t.x;
  v[1] = t.y;
  v[2] = t.z;
  v[3] = t.w;
}
static __device__ __forceinline__ void rc_ldg16_cs(const double *p, double *v) {
  const double2 t = __ldcs(reinterpret_cast<const double2 *>(p));
  v[0] = t.x;
  v[1] = t.y;
}

/* VEC consecutive 32-bit words of shared memory (4 words: one 16-byte
 * access; 2 words: one 8-byte access). p is aligned to 4*VEC bytes. */
template <int VEC>
static __device__ __forceinline__ void rc_lds_words(const uint32_t *p, uint32_t *w) {
  if constexpr (VEC == 4) {
    const uint4 t = *reinterpret_cast<const uint4 *>(p);
    w[0] = t.x;
    w[1] = t.y;
    w[2] = t.z;
    w[3] = t.w;
  } else {
    static_assert(VEC == 2, "2 or 4 words");
    const uint2 t = *reinterpret_cast<const uint2 *>(p);
    w[0] = t.x;
    w[1] = t.y;
  }
}

/* ---- reductions ---------------------------------------------------------------------- */

/* Butterfly over the full warp: every lane ends with the same value, one
 * fixed tree for a given input. */
template <typename A, typename Op>
static __device__ __forceinline__ A rc_warp_allreduce(A v, Op op) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

/* Folds one value per CTA of the calling thread's cluster in rank order
 * 0, 1, ..., C-1 (C <= 32): lane r of each warp reads rank r's slot (all
 * remote reads in flight together), then every lane folds the lanes' values
 * in rank order through shuffles. Every thread of every CTA thus gets the
 * bit-identical result of one fixed left-to-right fold. `slot` is a
 * __shared__ variable each CTA has filled before a cluster barrier that
 * precedes this call (made by the whole warp); the caller keeps the slot
 * unchanged until every CTA has passed a later cluster barrier. */
template <typename A, typename Op>
static __device__ __forceinline__ A rc_cluster_fold(const cooperative_groups::cluster_group &cl,
                                                    A *slot, int C, Op op) {
  const int lane = (int)(threadIdx.x & 31);
  A mine = *cl.map_shared_rank(slot, (unsigned)(lane < C ? lane : 0));
  A v = __shfl_sync(0xffffffffu, mine, 0);
  for (int r = 1; r < C; ++r) v = op(v, __shfl_sync(0xffffffffu, mine, r));
  return v;
}

/* ---- host side ------------------------------------------------------------------------ */

/* A CUDA call whose failure means "do not take this path": clears the
 * error (these are not sticky) and reports whether it succeeded. */
static inline bool rc_ok(cudaError_t err) {
  if (err == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}

/* Sets kern's shared-memory attributes to fixed values (they depend only
 * on the device and the kernel, so concurrent callers never lower them
 * under one another; set once per context) and fills *limit with the
 * dynamic bytes a block may use. False when an attribute cannot be set. */
template <typename K>
static bool rc_prepare(bk_context *ctx, K kern, int64_t *limit) {
  size_t fixed = 0;
  if (!bk__cuda_func_prepare(ctx, (const void *)kern, -1, (int)cudaSharedmemCarveoutMaxShared, 0,
                             &fixed))
    return false;
  *limit = (int64_t)bk_cu(ctx)->facts.smem_optin - (int64_t)fixed;
  return true;
}

/* Queues kern on the context's stream for up to `rows` rows (at most
 * INT32_MAX / csize; the kernel visits the rest cluster-stride), csize
 * CTAs of `threads` threads and `smem` dynamic bytes per row; with
 * `cluster`, the CTAs of a row form a thread-block cluster and the launch
 * is first checked against cudaOccupancyMaxActiveClusters. False, with
 * nothing queued and the error cleared, when that configuration cannot
 * run here. */
template <typename... P, typename... A>
static bool rc_launch_rows(bk_context *ctx, void (*kern)(P...), int64_t rows, int csize,
                           int threads, size_t smem, bool cluster, A... args) {
  const int64_t max_units = 0x7fffffff / csize;
  const int64_t units = rows < max_units ? rows : max_units;
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = cx_cluster_config(attr, csize, threads, smem, bk_stream(ctx));
  cfg.gridDim = dim3((unsigned)(units * csize), 1, 1);
  if (!cluster) cfg.numAttrs = 0;
  if (cluster && cx_active_clusters(ctx, kern, cfg) < 1) return false;
  return rc_ok(cudaLaunchKernelEx(&cfg, kern, args...));
}

#endif /* BK_CUDA_ROWCACHE_CUH */
