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
 *
 * Wide rows, register shares (rcx_softmax_kernel): persistent clusters of C
 * CTAs; the CTA of rank k owns the vectors [k*sl, min(nv, (k+1)*sl)) of
 * every row its cluster visits (rows cid, cid + ncl, ...), and each thread
 * holds its part of that share (vectors t + k*THREADS, k < KREG) in
 * registers from the first read to the output. Per row:
 *  - the share (and the mask share) arrives in one shared-memory stage by
 *    bulk copies (cp.async.bulk) counted in bytes on the stage mbarrier;
 *    each thread moves its vectors into registers (the mask as one bit per
 *    element), takes its maximum, and after the block barrier of the block
 *    maximum thread 0 queues the next row's copies into the stage, so they
 *    are in flight during this row's exchanges, exponentials and stores
 *    (for masked rows whose two shares do not fit the stage together, the
 *    stage takes x, then the mask of the same row, then x of the next);
 *  - two exchanges, the CTA maximum and then the CTA's float64 sum: threads
 *    k < C store the value into slot[rank] of CTA k with st.async, counted
 *    on that CTA's mbarrier of the exchange (one arrival of its own thread
 *    0 expecting C*8 bytes); warp 0 alone waits on its own mbarrier
 *    (cluster-scope acquire), folds the C slots with a butterfly over the
 *    lanes (lane k holds rank k; every CTA folds the same values in the
 *    same tree, so all get the same bits) and hands the result to the
 *    other warps through shared memory and a block barrier;
 *  - the same formulas as above (exponentials in T against the row
 *    maximum, float64 sum, inv = (T)(1/S)), outputs from registers with
 *    streaming stores.
 * No cluster barrier sits in the row loop (a cluster barrier waits for the
 * CTA's outstanding global stores): one after the mbarriers are
 * initialized, one before the CTAs leave (no CTA exits while a peer may
 * still store into it).
 * Slot reuse: every exchange of a row depends on the previous one of the
 * same row, and a CTA sends row j+1's maximum only after it has received
 * every CTA's row j sum, which each CTA sends only after it has folded row
 * j's maxima; likewise a CTA sends row j+1's sum only after receiving every
 * row j+1 maximum, sent after each CTA folded row j's sums. So one slot
 * array per exchange suffices, and when a row's first bytes reach an
 * exchange mbarrier its previous phase has completed: phase j of each
 * mbarrier is row j, waited for with parity j & 1. The stage is refilled
 * only after a block barrier that every reader of it has passed.
 */
#include "cluster_xchg.cuh"
#include "cuda_internal.h"
#include "rowcache.cuh"

#include <cooperative_groups.h>
#include <math.h>
#include <stdint.h>
#include <type_traits>

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

/* ---- wide rows: register shares in persistent clusters ------------------------------ */

/* Largest cluster of the register-share kernel (16 needs the non-portable
 * cluster-size attribute). */
static constexpr int RCX_MAX_CLUSTER = 16;

/* One float64 into another CTA's shared memory (dst 8-byte aligned),
 * counted as 8 bytes on that CTA's mbarrier bar. */
static __device__ __forceinline__ void rc_store_remote_f64(unsigned dst, double v, unsigned bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f64 [%0], %1, [%2];" ::"r"(
                   dst),
               "d"(v), "r"(bar)
               : "memory");
}

/* Thread 0: queues the bulk copies of a row's share (n vectors at element
 * offset off) of a into the stage at sa and, with TWO, of b at sb, counted
 * on bar. An empty share only arrives, so the phase completes all the same. */
template <typename T, bool TWO>
static __device__ __forceinline__ void rcx_issue(const T *a, const T *b, T *sa, T *sb,
                                                 int64_t off, int n, unsigned bar) {
  if (n > 0) {
    const unsigned bytes = (unsigned)n * 16u;
    cx_bar_expect(bar, TWO ? 2u * bytes : bytes);
    cx_bulk_load(cx_smem(sa), a + off, bytes, bar);
    if constexpr (TWO) cx_bulk_load(cx_smem(sb), b + off, bytes, bar);
  } else {
    cx_bar_arrive(bar);
  }
}

/* A thread's allowed bits from the mask share in shared memory at sm: bit
 * k*VEC + e for element e of its vector i = tid + k*THREADS (0 past the
 * share). Allowed means mask != 0, so NaN is allowed and -0 blocked. */
template <typename T, typename B, int THREADS, int KREG>
static __device__ __forceinline__ B rcx_bits(const T *sm, int n) {
  constexpr int VEC = rc_vec<T>::n;
  B ok = 0;
#pragma unroll
  for (int k = 0; k < KREG; ++k) {
    const int i = (int)threadIdx.x + k * THREADS;
    if (i < n) {
      T mk[VEC];
      bk_vload<VEC>(sm + i * VEC, mk);
#pragma unroll
      for (int e = 0; e < VEC; ++e) ok |= (B)(mk[e] != (T)0 ? 1u : 0u) << (k * VEC + e);
    }
  }
  return ok;
}

/* Threads k < C: this CTA's value v (a block result every such thread
 * holds) into slot[rank] of CTA k, counted on CTA k's mbarrier bar; thread
 * 0 arrives on its own bar expecting the C values of this phase. */
static __device__ __forceinline__ void rcx_send(double v, double *slot, unsigned bar, int rank,
                                                int C) {
  const int tid = (int)threadIdx.x;
  if (tid < C)
    rc_store_remote_f64(cx_mapa(cx_smem(&slot[rank]), (unsigned)tid), v,
                        cx_mapa(bar, (unsigned)tid));
  if (tid == 0) cx_bar_expect(bar, (unsigned)C * 8u);
}

/*
 * Softmax of rows (rows, cols) by persistent clusters of C CTAs of THREADS
 * threads (see the file comment). Dynamic shared memory: the stage, sl
 * vectors of x (with MASKED and not SPLIT, sl vectors of the mask after
 * them). With SPLIT (MASKED only) the stage holds one operand at a time:
 * x of row j, then, once every thread holds it in registers (an extra
 * block barrier), the mask of row j, then after the block maximum x of row
 * j+1; so stage phase 2j is x and 2j+1 the mask of the cluster's j-th row,
 * waited for with parity 0 and 1. Thread t holds the vectors
 * i = t + k*THREADS (k < KREG) of the CTA's share; with MASKED, bit
 * k*VEC + e of `ok` says whether element e of its k-th vector is allowed.
 * Per row four block barriers (block maximum, maximum fold, block sum, sum
 * fold; five with SPLIT) and, in warp 0, two mbarrier waits; every thread
 * of every CTA of a cluster runs the same count of each (the row loop
 * bounds depend on the cluster only, an empty share runs the same steps
 * without vectors). x, y (and mask) are 16-byte aligned, cols a multiple
 * of VEC, and sl <= KREG*THREADS.
 */
template <typename T, bool MASKED, bool SPLIT, int THREADS, int KREG, int MINB>
static __global__ void __launch_bounds__(THREADS, MINB)
    rcx_softmax_kernel(const T *__restrict__ x, const T *__restrict__ mask, T *__restrict__ y,
                       int64_t rows, int64_t cols, int sl) {
  constexpr int VEC = rc_vec<T>::n;
  constexpr int WARPS = THREADS / 32;
  constexpr bool TWO = MASKED && !SPLIT; /* x and the mask staged together */
  /* The allowed bits of a thread: one word, two for more than 32 elements. */
  using bits_t = typename std::conditional<(KREG * VEC > 32), unsigned long long, uint32_t>::type;
  static_assert(THREADS % 32 == 0 && WARPS <= 32, "whole warps, at most 32");
  static_assert(MASKED || !SPLIT, "only the mask is staged on its own");
  static_assert(KREG * VEC <= 64, "a thread's allowed bits fit two words");
  extern __shared__ __align__(16) unsigned char rc_dyn[];
  __shared__ __align__(8) unsigned long long bar[3]; /* stage, maximum, sum */
  __shared__ __align__(8) double slot_m[RCX_MAX_CLUSTER]; /* rank k's maximum */
  __shared__ __align__(8) double slot_s[RCX_MAX_CLUSTER]; /* rank k's sum */
  __shared__ T warp_m[WARPS];
  __shared__ double warp_s[WARPS];
  __shared__ T row_m;   /* the row maximum */
  __shared__ T row_inv; /* (T)(1 / the row sum) */

  const cg::cluster_group cluster = cg::this_cluster();
  const int C = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
  const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t nv = cols / VEC;
  const int64_t q0 = (int64_t)rank * sl;
  const int n = q0 < nv ? (int)(nv - q0 < sl ? nv - q0 : sl) : 0; /* vectors of the share */
  const int64_t cid = (int64_t)(blockIdx.x / (unsigned)C);
  const int64_t ncl = (int64_t)(gridDim.x / (unsigned)C);
  const int64_t nrow = cid < rows ? (rows - cid + ncl - 1) / ncl : 0;
  const int64_t step = ncl * cols; /* elements from one of the cluster's rows to the next */
  T *const sx = reinterpret_cast<T *>(rc_dyn);
  T *const sm = TWO ? sx + (int64_t)sl * VEC : sx;
  const unsigned b_stage = cx_smem(&bar[0]), b_max = cx_smem(&bar[1]), b_sum = cx_smem(&bar[2]);
  const T ninf = (T)-INFINITY;

  if (tid == 0) {
    cx_bar_init(b_stage, 1);
    cx_bar_init(b_max, 1);
    cx_bar_init(b_sum, 1);
    cx_bar_init_fence();
  }
  /* Every CTA's mbarriers are initialized before anyone stores into them. */
  cluster.sync();
  int64_t off = cid * cols + q0 * VEC; /* the share of the cluster's j-th row */
  if (tid == 0 && nrow > 0) rcx_issue<T, TWO>(x, mask, sx, sm, off, n, b_stage);

  /* Row j of the cluster: left = nrow - j rows to go, par = j & 1. */
  unsigned par = 0;
  for (int64_t left = nrow; left > 0; --left, off += step, par ^= 1u) {

    /* The share into registers; vectors past it hold -inf (never allowed,
     * never summed or stored). */
    cx_bar_wait(b_stage, SPLIT ? 0u : par);
    T a[KREG][VEC];
#pragma unroll
    for (int k = 0; k < KREG; ++k) {
      const int i = tid + k * THREADS;
      if (i < n) {
        bk_vload<VEC>(sx + i * VEC, a[k]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) a[k][e] = ninf;
      }
    }
    bits_t ok = 0;
    if constexpr (SPLIT) {
      /* Every thread holds x: the stage takes the mask of the same row. */
      __syncthreads();
      if (tid == 0) rcx_issue<T, false>(mask, mask, sx, sx, off, n, b_stage);
      cx_bar_wait(b_stage, 1u);
    }
    if constexpr (MASKED) ok = rcx_bits<T, bits_t, THREADS, KREG>(sm, n);

    /* Maximum over the allowed entries, running from -inf (fmax ignores
     * NaN, so an all-NaN share gives -inf). */
    T m = ninf;
#pragma unroll
    for (int k = 0; k < KREG; ++k)
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (!MASKED || ((ok >> (k * VEC + e)) & 1u)) m = rc_max_op()(m, a[k][e]);
    m = rc_warp_allreduce(m, rc_max_op());
    if (lane == 0) warp_m[warp] = m;
    __syncthreads();
    /* Every thread has its share in registers: the stage takes the next row. */
    if (tid == 0 && left > 1) rcx_issue<T, TWO>(x, mask, sx, sm, off + step, n, b_stage);

    /* Exchange 1: the CTA maxima (warps folded in warp order). */
    if (tid < C) {
      m = warp_m[0];
#pragma unroll
      for (int w = 1; w < WARPS; ++w) m = rc_max_op()(m, warp_m[w]);
    }
    rcx_send((double)m, slot_m, b_max, rank, C);
    if (warp == 0) {
      cx_bar_wait_cluster(b_max, par);
      double v = lane < C ? slot_m[lane] : -INFINITY;
      v = rc_warp_allreduce(v, rc_max_op());
      if (lane == 0) row_m = (T)v;
    }
    __syncthreads();
    const T M = row_m;

    /* Exponentials against the row maximum in place (blocked entries and
     * vectors past the share give +0), summed in float64: the vectors of
     * even and of odd k in two running sums, element by element, then the
     * two added. (Two chains: shorter than one, and fewer live registers
     * than a tree.) */
    double sk[2] = {0.0, 0.0};
#pragma unroll
    for (int k = 0; k < KREG; ++k) {
      const bool in = tid + k * THREADS < n;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const bool use = MASKED ? ((ok >> (k * VEC + e)) & 1u) != 0u : in;
        a[k][e] = use ? rc_exp(a[k][e] - M) : (T)0;
        sk[k & 1] += (double)a[k][e];
      }
    }
    double s = rc_warp_allreduce(sk[0] + sk[1], rc_sum_op());
    if (lane == 0) warp_s[warp] = s;
    __syncthreads();

    /* Exchange 2: the CTA sums (warps added in warp order). */
    if (tid < C) {
      s = warp_s[0];
#pragma unroll
      for (int w = 1; w < WARPS; ++w) s += warp_s[w];
    }
    rcx_send(s, slot_s, b_sum, rank, C);
    if (warp == 0) {
      cx_bar_wait_cluster(b_sum, par);
      double v = lane < C ? slot_s[lane] : 0.0;
      v = rc_warp_allreduce(v, rc_sum_op());
      if (lane == 0) row_inv = (T)(1.0 / v);
    }
    __syncthreads();
    const T inv = row_inv;

    /* Output from registers: blocked entries +0. */
    T *const yr = y + off;
#pragma unroll
    for (int k = 0; k < KREG; ++k) {
      const int i = tid + k * THREADS;
      if (i < n) {
        T o[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          o[e] = (!MASKED || ((ok >> (k * VEC + e)) & 1u)) ? a[k][e] * inv : (T)0;
        bk_vstore_cs<VEC>(yr + (int64_t)i * VEC, o);
      }
    }
  }
  /* No CTA leaves while a peer may still store into its slots. */
  cluster.sync();
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

/*
 * The register-share kernel's policy (tune here):
 *  - it takes rows wider than RC_SLICE_BYTES (the rows the kernel above
 *    splits across a cluster; narrower rows fit one block there);
 *  - C = the smallest power of two (2..16) with sl = ceil(nv / C) <=
 *    KREG*THREADS; served when such a C exists, rows*C >= RCX_FILL_PER_SM *
 *    SMs (fewer rows go to the kernel above, which widens its clusters to
 *    occupy every multiprocessor) and a cluster of C can be resident;
 *  - clusters: as many as can be resident (one wave), at most
 *    ceil(rows / RCX_MIN_ROWS) unless fewer rows a cluster are needed to
 *    give RCX_FILL_PER_SM * SMs CTAs work; with at least RCX_DRAIN_WAVES
 *    waves of RCX_SHORT_ROWS-row clusters, clusters of RCX_SHORT_ROWS rows
 *    launched as the grid drains;
 *  - the carveout asks for MINB blocks' shared memory per multiprocessor,
 *    not the maximum, so that L1 keeps the rest.
 * Configurations <THREADS, KREG, MINB>, tried in order: without a mask
 * <256, 16, 2> (64 KB shares, one 64 KB stage, two CTAs per multiprocessor:
 * rows up to 1 MB), then <512, 16, 1> (128 KB shares and stage, one CTA:
 * rows up to 2 MB); with a mask <256, 8, 2> (32 KB shares, a 64 KB stage of
 * x and mask, two CTAs: rows up to 512 KB), then <512, 8, 1> (64 KB shares,
 * a 128 KB stage: rows up to 1 MB), then, with split, <512, 16, 1> with
 * SPLIT (128 KB shares, a 128 KB stage taking x and then the mask: rows up
 * to 2 MB).
 */
static const int64_t RCX_FILL_PER_SM = 2;
static const int64_t RCX_MIN_ROWS = 4;
static const int64_t RCX_SHORT_ROWS = 16;
static const int64_t RCX_DRAIN_WAVES = 8;

/* Queues rcx_softmax_kernel<T, MASKED, SPLIT, THREADS, KREG, MINB> when
 * it serves the shape (see the policy above), else leaves *done 0 with
 * nothing queued and no error left behind. */
template <typename T, bool MASKED, bool SPLIT, int THREADS, int KREG, int MINB>
static bk_status rcx_launch(bk_context *ctx, const char *fn, const T *x, const T *mask, T *y,
                            int64_t rows, int64_t cols, int *done) {
  constexpr int VEC = rc_vec<T>::n;
  constexpr int64_t cap = (int64_t)KREG * THREADS;
  constexpr int64_t ops = MASKED && !SPLIT ? 2 : 1; /* operands in the stage at once */
  constexpr int64_t smem_max = ops * cap * 16;
  const int64_t sm = bk_cu(ctx)->sm_count;
  const int64_t nv = cols / VEC;
  int64_t C = 1;
  while (C < RCX_MAX_CLUSTER && (nv + C - 1) / C > cap) C <<= 1;
  const int64_t sl = (nv + C - 1) / C;
  if (C < 2 || sl > cap || rows * C < RCX_FILL_PER_SM * sm) return BK_OK;

  auto kern = rcx_softmax_kernel<T, MASKED, SPLIT, THREADS, KREG, MINB>;
  /* The attributes are set once per context: the size, the cluster
   * permission and the carveout that follows from them. */
  if (!bk__cuda_func_fit(ctx, (const void *)kern, (int)smem_max, MINB, 1, false)) return BK_OK;

  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg =
      cx_cluster_config(attr, C, THREADS, (size_t)(ops * sl * 16), bk_stream(ctx));
  const int active = cx_active_clusters(ctx, kern, cfg);
  if (active < 1) return BK_OK;
  int64_t ncl = active;
  const int64_t fill = (RCX_FILL_PER_SM * sm + C - 1) / C;
  int64_t most = (rows + RCX_MIN_ROWS - 1) / RCX_MIN_ROWS;
  if (most < fill) most = fill < rows ? fill : rows;
  if (ncl > most) ncl = most;
  const int64_t shorts = (rows + RCX_SHORT_ROWS - 1) / RCX_SHORT_ROWS;
  if (shorts >= RCX_DRAIN_WAVES * (int64_t)active) ncl = shorts;
  if (ncl > (int64_t)INT32_MAX / C) ncl = (int64_t)INT32_MAX / C;
  cfg.gridDim = dim3((unsigned)(ncl * C), 1, 1);
  if (!rc_ok(cudaLaunchKernelEx(&cfg, kern, x, mask, y, rows, cols, (int)sl))) return BK_OK;
  *done = 1;
  return bk__cuda_launched(fn, "rcx_softmax_kernel");
}

/* Wide rows by the register-share kernel, in the configuration order of
 * the policy above (masked rows over 1 MB by the split stage); *done 0
 * when none serves the shape. */
template <typename T, bool MASKED>
static bk_status rcx_softmax(bk_context *ctx, const char *fn, const T *x, const T *mask, T *y,
                             int64_t rows, int64_t cols, int *done) {
  bk_status st;
  if constexpr (MASKED) {
    st = rcx_launch<T, true, false, 256, 8, 2>(ctx, fn, x, mask, y, rows, cols, done);
    if (st != BK_OK || *done) return st;
    st = rcx_launch<T, true, false, 512, 8, 1>(ctx, fn, x, mask, y, rows, cols, done);
    if (st != BK_OK || *done) return st;
    return rcx_launch<T, true, true, 512, 16, 1>(ctx, fn, x, mask, y, rows, cols, done);
  } else {
    st = rcx_launch<T, false, false, 256, 16, 2>(ctx, fn, x, mask, y, rows, cols, done);
    if (st != BK_OK || *done) return st;
    return rcx_launch<T, false, false, 512, 16, 1>(ctx, fn, x, mask, y, rows, cols, done);
  }
}

template <typename T, bool MASKED>
static bk_status rc_softmax(bk_context *ctx, const void *x, const void *mask, void *y,
                            int64_t rows, int64_t cols, int *done) {
  constexpr int VEC = rc_vec<T>::n;
  const char *fn = MASKED ? "bk_rows_masked_softmax" : "bk_softmax";
  if (rows < 1 || cols < 1 || cols % VEC != 0 || !bk_aligned16(x) || !bk_aligned16(y) ||
      (MASKED && !bk_aligned16(mask)))
    return BK_OK;
  if (cols * (int64_t)sizeof(T) > RC_SLICE_BYTES) {
    const bk_status st =
        rcx_softmax<T, MASKED>(ctx, fn, (const T *)x, (const T *)mask, (T *)y, rows, cols, done);
    if (st != BK_OK || *done) return st;
  }
  const int64_t sm = bk_cu(ctx)->sm_count;
  rc_plan p;
  /* Shapes the policy never takes leave before any call into the runtime,
   * so small calls pay nothing for this path. */
  if (!rc_select((int64_t)sizeof(T), MASKED, rows, cols, sm, RC_MAX_CLUSTER, INT64_MAX, &p))
    return BK_OK;
  int64_t lim_block = 0, lim_cluster = 0;
  if (!rc_prepare(ctx, rc_softmax_kernel<T, MASKED, false>, &lim_block) ||
      !rc_prepare(ctx, rc_softmax_kernel<T, MASKED, true>, &lim_cluster))
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
    if (bk__cuda_func_prepare(ctx, (const void *)kern, 0, -1, 1, NULL)) {
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
