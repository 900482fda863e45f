/*
 * rowcache.cu — the row softmax (plain or hard-masked) with each row read
 * from device memory exactly once into shared memory.
 *
 * How the work is laid out:
 *  - A row (or, for rows wider than one block's shared memory, a slice of
 *    it) is copied into dynamic shared memory with cp.async 16-byte copies
 *    that every thread issues before anyone waits, so the whole row is in
 *    flight at once and no registers are spent staging it.
 *  - The mask, when there is one, is read in the same load phase with
 *    ordinary 16-byte loads and reduced to one bit per element (warp
 *    ballots kept in shared memory), so shared memory per row is
 *    cols*sizeof(T) + cols/8 bytes.
 *  - Three passes over shared memory: maximum over the allowed entries,
 *    exponentials against that maximum (written back, summed in float64),
 *    and the scaled output written once with streaming 16-byte stores.
 *  - Rows too wide for one block, and rows too few to give every
 *    multiprocessor work, go to a thread-block cluster: CTA k of the cluster
 *    caches slice k of the row, and the per-CTA maxima and sums are folded
 *    through distributed shared memory in rank order, so every CTA gets
 *    bit-identical row statistics.
 *
 * Formulas and IEEE rules are the register row engine's (softmax.cu): the
 * maximum ignores NaN (fmax), every allowed element's exponential is taken
 * in T against the final maximum, the denominator S is summed in float64,
 * inv = (T)(1/S) and y = e * inv. So a row whose allowed entries hold NaN,
 * +inf or only -inf sums to NaN and all its allowed entries come out NaN;
 * blocked entries are exactly +0, and a row with no allowed entry is all +0.
 * Thread-to-element mapping and reduction trees are fixed for a shape, so
 * results are bitwise reproducible run to run.
 */
#include "cuda_internal.h"
#include "rowcache.cuh"

#include <cooperative_groups.h>
#include <math.h>
#include <stdint.h>

namespace cg = cooperative_groups;

/* Largest block of the row kernel; __launch_bounds__ asks for four such
 * blocks per multiprocessor (at most 64 registers a thread). */
static constexpr int RC_MAX_THREADS = 256;
/* Largest cluster (16 needs the non-portable cluster-size attribute). */
static constexpr int RC_MAX_CLUSTER = 16;
/* Mask vectors a thread loads before ballotting them. */
static constexpr int RC_MASK_BATCH = 4;

/* ---- device helpers -------------------------------------------------------------- */

static __device__ __forceinline__ float rc_exp(float v) { return expf(v); }
static __device__ __forceinline__ double rc_exp(double v) { return exp(v); }

/* Maximum that ignores NaN (fmax returns the other operand). */
struct rc_max_op {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ double operator()(double a, double b) const { return fmax(a, b); }
};
struct rc_sum_op {
  __device__ __forceinline__ double operator()(double a, double b) const { return a + b; }
};
struct rc_or_op {
  __device__ __forceinline__ int operator()(int a, int b) const { return a | b; }
};

/* Block maximum and "any allowed" flag (blockDim a multiple of 32): warp
 * butterflies, then warp results folded in warp order by every thread. The
 * leading barrier keeps the previous row's readers of sh_m / sh_a safe. */
template <typename T>
static __device__ __forceinline__ void rc_block_max_any(T &m, int &any, T *sh_m, int *sh_a) {
  m = rc_warp_allreduce(m, rc_max_op());
  any = __any_sync(0xffffffffu, any != 0) ? 1 : 0;
  const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
  const int nw = (int)(blockDim.x >> 5);
  __syncthreads();
  if (lane == 0) {
    sh_m[warp] = m;
    sh_a[warp] = any;
  }
  __syncthreads();
  T r = sh_m[0];
  int a = sh_a[0];
  for (int w = 1; w < nw; ++w) {
    r = rc_max_op()(r, sh_m[w]);
    a |= sh_a[w];
  }
  m = r;
  any = a;
}

/* Block sum in float64, same tree shape as rc_block_max_any. */
static __device__ __forceinline__ double rc_block_sum(double s, double *sh) {
  s = rc_warp_allreduce(s, rc_sum_op());
  const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
  const int nw = (int)(blockDim.x >> 5);
  __syncthreads();
  if (lane == 0) sh[warp] = s;
  __syncthreads();
  double r = sh[0];
  for (int w = 1; w < nw; ++w) r += sh[w];
  return r;
}

/* ---- kernel ------------------------------------------------------------------------ */

/*
 * Softmax of rows (rows, cols), each row (CL false) or each slice of a row
 * (CL true: cluster of C CTAs per row, CTA of rank k takes the vectors
 * [k*clen, min(nv, (k+1)*clen)) of the row's nv = cols/VEC 16-byte vectors)
 * cached in dynamic shared memory:
 *   row  [clen*VEC elements]          the slice, then its exponentials
 *   bits [ceil(clen/32)*VEC words]    MASKED: word (v/32)*VEC + e holds, at
 *                                     bit v%32, whether element e of local
 *                                     vector v is allowed (one warp ballot)
 * Thread t owns local vectors t, t+B, t+2B, ... in every phase (it copies,
 * reads and writes only those), so its own cp.async wait is enough before
 * it reads them; its allowed bits sit at bit lane = t%32 of the words.
 * x, y (and mask) are 16-byte aligned and cols a multiple of VEC.
 */
template <typename T, bool MASKED, bool CL>
static __global__ void __launch_bounds__(RC_MAX_THREADS, 4)
    rc_softmax_kernel(const T *__restrict__ x, const T *__restrict__ mask, T *__restrict__ y,
                      int64_t rows, int64_t cols, int clen) {
  constexpr int VEC = rc_vec<T>::n;
  extern __shared__ __align__(16) unsigned char rc_dyn[];
  T *row = reinterpret_cast<T *>(rc_dyn);
  uint32_t *bits = reinterpret_cast<uint32_t *>(rc_dyn + (size_t)clen * 16);
  __shared__ T sh_m[32];
  __shared__ int sh_a[32];
  __shared__ double sh_s[32];
  /* This CTA's partials, read by the whole cluster through DSMEM. */
  __shared__ T cl_m;
  __shared__ int cl_a;
  __shared__ double cl_s;

  const int B = (int)blockDim.x, t = (int)threadIdx.x;
  const int lane = t & 31, warp = t >> 5;
  int C = 1, rank = 0;
  int64_t first = blockIdx.x, step = gridDim.x;
  if constexpr (CL) {
    const cg::cluster_group cl = cg::this_cluster();
    C = (int)cl.num_blocks();
    rank = (int)cl.block_rank();
    first = (int64_t)(blockIdx.x / (unsigned)C);
    step = (int64_t)(gridDim.x / (unsigned)C);
  }
  const int64_t nv = cols / VEC;
  const int64_t q0 = (int64_t)rank * clen < nv ? (int64_t)rank * clen : nv;
  const int len = (int)(nv - q0 < clen ? nv - q0 : clen); /* vectors in this CTA's slice */
  const T ninf = (T)-INFINITY;

  for (int64_t r = first; r < rows; r += step) {
    const int64_t off = r * cols + q0 * VEC;
    const T *xs = x + off;
    T *ys = y + off;

    /* Load phase: the whole slice in flight, then the mask bits. */
    __syncthreads(); /* the previous row's users of the mask bits are done */
    for (int q = t; q < len; q += B) rc_cp_async16(row + q * VEC, xs + (int64_t)q * VEC);
    rc_cp_async_commit();
    int any = MASKED ? 0 : 1;
    if constexpr (MASKED) {
      const T *ms = mask + off;
      for (int qb = warp * 32; qb < len; qb += RC_MASK_BATCH * B) {
        T mk[RC_MASK_BATCH][VEC];
#pragma unroll
        for (int k = 0; k < RC_MASK_BATCH; ++k) {
          const int q = qb + k * B + lane;
          if (q < len) {
            rc_ldg16_cs(ms + (int64_t)q * VEC, mk[k]);
          } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) mk[k][e] = (T)0;
          }
        }
#pragma unroll
        for (int k = 0; k < RC_MASK_BATCH; ++k) {
          /* qb + k*B is the same for the whole warp, so the ballot has
           * every lane; lanes past the slice vote "blocked". */
          if (qb + k * B < len) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              const uint32_t w = __ballot_sync(0xffffffffu, mk[k][e] != (T)0);
              if (lane == e) bits[((qb + k * B) >> 5) * VEC + e] = w;
              any |= w != 0u ? 1 : 0;
            }
          }
        }
      }
      __syncwarp(); /* the ballot words are read by the other lanes */
    }
    rc_cp_async_wait_all();

    /* Pass 1: maximum over the allowed entries. */
    T m = ninf;
#pragma unroll 4
    for (int q = t; q < len; q += B) {
      T v[VEC];
      bk_vload<VEC>(row + q * VEC, v);
      if constexpr (MASKED) {
        uint32_t w[VEC];
        rc_lds_words<VEC>(bits + (q >> 5) * VEC, w);
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          if ((w[e] >> lane) & 1u) m = rc_max_op()(m, v[e]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) m = rc_max_op()(m, v[e]);
      }
    }
    rc_block_max_any(m, any, sh_m, sh_a);
    if constexpr (CL) {
      const cg::cluster_group cl = cg::this_cluster();
      if (t == 0) {
        cl_m = m;
        cl_a = any;
      }
      cl.sync();
      m = rc_cluster_fold(cl, &cl_m, C, rc_max_op());
      any = rc_cluster_fold(cl, &cl_a, C, rc_or_op());
    }

    if (MASKED && !any) {
      /* No allowed entry in the row (the same decision in every CTA of the
       * cluster): all +0. */
      T z[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) z[e] = (T)0;
      for (int q = t; q < len; q += B) bk_vstore_cs<VEC>(ys + (int64_t)q * VEC, z);
      /* Keep cl_m / cl_a unchanged until every CTA has read them. */
      if constexpr (CL) cg::this_cluster().sync();
      continue;
    }
    const T M = m;

    /* Pass 2: exponentials against the row maximum, back into the cache;
     * float64 sum in this thread's element order. */
    double s = 0.0;
#pragma unroll 4
    for (int q = t; q < len; q += B) {
      T v[VEC];
      bk_vload<VEC>(row + q * VEC, v);
      if constexpr (MASKED) {
        uint32_t w[VEC];
        rc_lds_words<VEC>(bits + (q >> 5) * VEC, w);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          if ((w[e] >> lane) & 1u) {
            const T ex = rc_exp(v[e] - M);
            v[e] = ex;
            s += (double)ex;
          }
        }
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const T ex = rc_exp(v[e] - M);
          v[e] = ex;
          s += (double)ex;
        }
      }
      bk_st16(row + q * VEC, v);
    }
    s = rc_block_sum(s, sh_s);
    if constexpr (CL) {
      /* cl_s of the previous row was last read before this row's first
       * cluster barrier, so it may be overwritten now. */
      const cg::cluster_group cl = cg::this_cluster();
      if (t == 0) cl_s = s;
      cl.sync();
      s = rc_cluster_fold(cl, &cl_s, C, rc_sum_op());
    }
    const T inv = (T)(1.0 / s);

    /* Pass 3: scale and write once. */
#pragma unroll 4
    for (int q = t; q < len; q += B) {
      T v[VEC], o[VEC];
      bk_vload<VEC>(row + q * VEC, v);
      if constexpr (MASKED) {
        uint32_t w[VEC];
        rc_lds_words<VEC>(bits + (q >> 5) * VEC, w);
#pragma unroll
        for (int e = 0; e < VEC; ++e) o[e] = ((w[e] >> lane) & 1u) ? v[e] * inv : (T)0;
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) o[e] = v[e] * inv;
      }
      bk_vstore_cs<VEC>(ys + (int64_t)q * VEC, o);
    }
  }
  /* No CTA may leave while another can still read its cl_s. */
  if constexpr (CL) cg::this_cluster().sync();
}

/* ---- selection policy --------------------------------------------------------------- */

/*
 * Which rows this file takes, and how (tune here):
 *  - float32 rows without a mask up to RC_F32_PLAIN_MAX_COLS columns stay on
 *    the register path (85-97% of copy there); every other row of at least
 *    RC_MIN_ROW_BYTES bytes is taken (float64 rows, masked rows, wide
 *    float32 rows).
 *  - Cluster size C: the smallest power of two that cuts the row into
 *    slices of at most RC_SLICE_BYTES (several CTAs per multiprocessor, so
 *    one CTA's loads overlap another's arithmetic), at most max_cluster.
 *    When there are few rows (rows*C < RC_FEW_ROWS_PER_SM * SMs), C keeps
 *    doubling while slices stay >= RC_MIN_SLICE_BYTES, so all SMs work.
 *  - A slice (plus its mask bits) must fit the block's shared-memory limit,
 *    else the row is not taken.
 *  - Threads per CTA: the smallest power of two in [RC_MIN_THREADS,
 *    RC_MAX_THREADS] giving each thread at most RC_VECS_PER_THREAD 16-byte
 *    vectors of the slice.
 */
static const int64_t RC_F32_PLAIN_MAX_COLS = 8192;
static const int64_t RC_MIN_ROW_BYTES = 8 * 1024;
static const int64_t RC_SLICE_BYTES = 64 * 1024;
static const int64_t RC_MIN_SLICE_BYTES = 16 * 1024;
static const int64_t RC_FEW_ROWS_PER_SM = 2;
static const int64_t RC_VECS_PER_THREAD = 8;
static const int RC_MIN_THREADS = 128;

struct rc_plan {
  int csize;   /* CTAs per row (1: plain block per row) */
  int threads; /* threads per CTA */
  int clen;    /* 16-byte vectors per CTA slice */
  size_t smem; /* dynamic shared memory per CTA */
};

static bool rc_select(int64_t esz, bool masked, int64_t rows, int64_t cols, int64_t sm_count,
                      int max_cluster, int64_t smem_limit, rc_plan *p) {
  const int64_t vec = 16 / esz;
  const int64_t row_bytes = cols * esz;
  if (esz == 4 && !masked && cols <= RC_F32_PLAIN_MAX_COLS) return false;
  if (row_bytes < RC_MIN_ROW_BYTES) return false;
  int c = 1;
  while (c < max_cluster && row_bytes > RC_SLICE_BYTES * c) c *= 2;
  if (rows < RC_FEW_ROWS_PER_SM * sm_count)
    while (c < max_cluster && rows * c < RC_FEW_ROWS_PER_SM * sm_count &&
           row_bytes >= RC_MIN_SLICE_BYTES * 2 * c)
      c *= 2;
  const int64_t nv = cols / vec;
  const int64_t clen = (nv + c - 1) / c;
  const int64_t smem = clen * 16 + (masked ? (clen + 31) / 32 * vec * 4 : 0);
  if (smem > smem_limit) return false;
  int threads = RC_MIN_THREADS;
  while (threads < RC_MAX_THREADS && threads * RC_VECS_PER_THREAD < clen) threads <<= 1;
  p->csize = c;
  p->threads = threads;
  p->clen = (int)clen;
  p->smem = (size_t)smem;
  return true;
}

/* ---- launchers ------------------------------------------------------------------------ */

/* Launches plan p. Returns BK_OK with *done = 0 when the configuration
 * cannot run (no cluster of that size fits, or the launch is refused). */
template <typename T, bool MASKED, bool CL>
static bk_status rc_launch(bk_context *ctx, const char *fn, const T *x, const T *mask, T *y,
                           int64_t rows, int64_t cols, const rc_plan &p, int *done) {
  if (!rc_launch_rows(ctx, rc_softmax_kernel<T, MASKED, CL>, rows, p.csize, p.threads, p.smem, CL,
                      x, mask, y, rows, cols, p.clen))
    return BK_OK;
  *done = 1;
  return bk__cuda_launched(fn, "rc_softmax_kernel");
}

template <typename T, bool MASKED>
static bk_status rc_softmax(bk_context *ctx, const void *x, const void *mask, void *y,
                            int64_t rows, int64_t cols, int *done) {
  constexpr int VEC = rc_vec<T>::n;
  const char *fn = MASKED ? "bk_rows_masked_softmax" : "bk_softmax";
  if (rows < 1 || cols < 1 || cols % VEC != 0 || !bk_aligned16(x) || !bk_aligned16(y) ||
      (MASKED && !bk_aligned16(mask)))
    return BK_OK;
  const int device = bk_cu(ctx)->device;
  const int64_t sm = bk_cu(ctx)->sm_count;
  rc_plan p;
  /* Shapes the policy never takes leave before any call into the runtime,
   * so small calls pay nothing for this path. */
  if (!rc_select((int64_t)sizeof(T), MASKED, rows, cols, sm, RC_MAX_CLUSTER, INT64_MAX, &p))
    return BK_OK;
  int64_t lim_block = 0, lim_cluster = 0;
  if (!rc_prepare(rc_softmax_kernel<T, MASKED, false>, device, &lim_block) ||
      !rc_prepare(rc_softmax_kernel<T, MASKED, true>, device, &lim_cluster))
    return BK_OK;
  const int64_t limit = lim_block < lim_cluster ? lim_block : lim_cluster;
  const T *xt = (const T *)x, *mt = (const T *)mask;
  T *yt = (T *)y;

  if (!rc_select((int64_t)sizeof(T), MASKED, rows, cols, sm, RC_MAX_CLUSTER, limit, &p))
    return BK_OK;
  if (p.csize == 1) return rc_launch<T, MASKED, false>(ctx, fn, xt, mt, yt, rows, cols, p, done);

  /* Clusters above 8 CTAs need the non-portable size attribute and may
   * not fit the device's partitions; retry with at most 8. */
  auto kern = rc_softmax_kernel<T, MASKED, true>;
  if (p.csize > 8) {
    if (rc_ok(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1))) {
      const bk_status st = rc_launch<T, MASKED, true>(ctx, fn, xt, mt, yt, rows, cols, p, done);
      if (st != BK_OK || *done) return st;
    }
    if (!rc_select((int64_t)sizeof(T), MASKED, rows, cols, sm, 8, limit, &p)) return BK_OK;
    if (p.csize == 1) return rc_launch<T, MASKED, false>(ctx, fn, xt, mt, yt, rows, cols, p, done);
  }
  return rc_launch<T, MASKED, true>(ctx, fn, xt, mt, yt, rows, cols, p, done);
}

/* ---- entry ------------------------------------------------------------------------------ */

extern "C" bk_status bk__cuda_softmax_rows_cached(bk_context *ctx, bk_dtype dt, const void *x,
                                                  const void *mask, void *y, int64_t rows,
                                                  int64_t cols, int *done) {
  *done = 0;
  if (dt == BK_F32) {
    if (mask) return rc_softmax<float, true>(ctx, x, mask, y, rows, cols, done);
    return rc_softmax<float, false>(ctx, x, NULL, y, rows, cols, done);
  }
  if (mask) return rc_softmax<double, true>(ctx, x, mask, y, rows, cols, done);
  return rc_softmax<double, false>(ctx, x, NULL, y, rows, cols, done);
}
