/*
 * xent_cluster.cu — the teacher gradient (contract §3.3, gradient == 1) of wide
 * rows with each row split across a thread-block cluster, the row pair read
 * from memory once and written once.
 *
 * Per row, rank k of a cluster of C blocks owns the vector range
 * [k*sl, min(nvec, (k+1)*sl)) of S and T. The blocks are persistent (one
 * wave of clusters unless the launcher asks for short-lived ones, rows
 * visited cluster-stride) and stage their share of
 * the coming rows in shared memory with bulk copies (cp.async.bulk, one
 * per operand, completion counted in bytes on an mbarrier), so the next
 * rows' loads are in flight while the current row is computed:
 *  - local pass: the block's maxima mS, mT of its share (NaN ignored), then
 *    es = exp(S - mS), et = exp(T - mT) written back into the stage and
 *    summed in float64 to sS, sT (a share whose maximum is -inf is all -inf
 *    or NaN: it is shifted by 0 instead, so -inf gives 0 and NaN stays NaN);
 *  - one exchange per row: every block stores its (mS, sS, mT, sT) into
 *    slot[parity][rank] of every block of the cluster with st.async, which
 *    counts the bytes on the receiver's mbarrier; a block waits on its own
 *    mbarrier only, so no cluster barrier (and none of its memory fences,
 *    which would wait for the block's outstanding stores and copies) sits
 *    in the loop;
 *  - fold, identical bits in every block: M = max_k m_k, Z = sum_k of
 *    s_k * exp(m_k - M) (a share with m_k = -inf contributes s_k, 0 or NaN)
 *    as a fixed butterfly over the lanes of a warp;
 *  - output: y = es * (exp(mS - MS) / ZS / rows) - et * (exp(mT - MT) / ZT /
 *    rows), each factor one float64 number per block and row, with streaming
 *    stores; the stage then takes the copies of a later row.
 * These are the contract's formulas over the whole row (exp(S - MS) = es *
 * exp(mS - MS)), so the IEEE cases come out literally: a NaN or +inf in a
 * row makes its Z NaN and the whole row NaN, an all -inf row has Z = 0 and
 * factor exp(-inf + inf) = NaN, and -inf entries under a finite maximum give
 * es = 0 (0 - 0 = +0 where both operands are -inf).
 *
 * Two stages a block: a row's loads are issued when the row two ahead has
 * been written out, and each row waits for its own exchange.
 *
 * Slot parity: a block sends row j+1's values only after it has received
 * every block's row j values, and every block sent those only after
 * folding row j-1; so when row j+1's values (parity of j-1) arrive at a
 * block, that block has finished reading row j-1's slots, and the
 * mbarrier of that parity has completed row j-1's phase.
 *
 * float64 register kernel (xent_grad_cluster64_kernel): the same rows,
 * exchange and formulas, with the block's share held in registers (at most
 * KREG vector pairs a thread) from the local pass to the output:
 *  - the share is read from the stage once, before the block maximum, so
 *    the stage takes the copies of row j + NST right after that barrier
 *    (no write-back, no proxy fence) while row j's exponentials, exchange
 *    and output run: NST stages of copies in flight instead of NST - 1;
 *  - the exponentials of a batch of vector pairs are tested for the table
 *    range at once (xe_exp_core_range) and, when all are in it, evaluated
 *    as independent branch-free chains with the table in shared memory
 *    (xe_exp_core_tab), where a branch around each exponential kept them
 *    one after another; a batch with an argument outside the range takes
 *    xe_exp per element. Either way each value is xe_exp's, summed in the
 *    order of the kernel above, so at the same cluster size the block
 *    statistics are its bits (a maximum of zeros may differ in its sign,
 *    which no result sees);
 *  - one warp waits for the exchange and folds, with xe_exp (shared table)
 *    for exp(m - M) where the kernel above uses CUDA's exp (the factors
 *    may differ in the last bit; the IEEE cases are CUDA's exp's in both);
 *    the factors reach the other warps through shared memory and a block
 *    barrier, so the other warps neither poll the mbarrier nor repeat the
 *    fold.
 */
#include "cluster_xchg.cuh"
#include "xent_cluster.cuh"
#include "xent_exp.cuh"

#include <math.h>
#include <stdint.h>

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

/* ---- device helpers ---------------------------------------------------------------- */

static constexpr int XG_THREADS = 256;
static constexpr int XG_WARPS = XG_THREADS / 32;
static constexpr int XG_MAX_CLUSTER = 16;
static constexpr unsigned XG_FULL_MASK = 0xffffffffu;

/* Blocks per multiprocessor the registers are cut for: two 32 KB stages
 * and the static shared memory give three. */
static constexpr int XG_MIN_BLOCKS = 3;

template <typename U> struct xg_two {
  U a, b;
};

/* A block's statistics of one row: maxima (as float64) and sums of the
 * shifted exponentials. */
struct xg_stat {
  double mS, sS, mT, sT;
};

static __device__ __forceinline__ float xg_shfl(float v, int off) {
  return __shfl_xor_sync(XG_FULL_MASK, v, off);
}
static __device__ __forceinline__ double xg_shfl(double v, int off) {
  return __shfl_xor_sync(XG_FULL_MASK, v, off);
}

/* The sum of a 16-byte vector's elements (pairwise). */
static __device__ __forceinline__ float xg_vsum(const float *v) {
  return (v[0] + v[1]) + (v[2] + v[3]);
}
static __device__ __forceinline__ double xg_vsum(const double *v) { return v[0] + v[1]; }

/*
 * Block-wide maxima (NaN ignored) and sums of two values over WARPS warps,
 * identical bits in every thread: a warp butterfly (each step combines
 * equal halves with a commutative operation, so every lane ends with the
 * same value), then the warps' values folded in warp order (up to eight
 * warps) or, for more, by a second butterfly with lane w holding warp w's
 * value. There is no leading barrier: each row alternates the two
 * reductions, each with its own array, so a block barrier always lies
 * between one use's readers and the next use's writers.
 */
template <int WARPS, typename T>
static __device__ __forceinline__ xg_two<T> xg_block_max(xg_two<T> v, xg_two<T> *sh) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    v.a = fmax(v.a, xg_shfl(v.a, off));
    v.b = fmax(v.b, xg_shfl(v.b, off));
  }
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  if constexpr (WARPS <= 8) {
    xg_two<T> r = sh[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) {
      r.a = fmax(r.a, sh[w].a);
      r.b = fmax(r.b, sh[w].b);
    }
    return r;
  } else {
    static_assert(WARPS == 32, "more than eight warps: a full warp of values");
    xg_two<T> r = sh[threadIdx.x & 31];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      r.a = fmax(r.a, xg_shfl(r.a, off));
      r.b = fmax(r.b, xg_shfl(r.b, off));
    }
    return r;
  }
}

template <int WARPS>
static __device__ __forceinline__ xg_two<double> xg_block_sum(xg_two<double> v,
                                                              xg_two<double> *sh) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    v.a += xg_shfl(v.a, off);
    v.b += xg_shfl(v.b, off);
  }
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  if constexpr (WARPS <= 8) {
    xg_two<double> r = sh[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) {
      r.a += sh[w].a;
      r.b += sh[w].b;
    }
    return r;
  } else {
    static_assert(WARPS == 32, "more than eight warps: a full warp of values");
    xg_two<double> r = sh[threadIdx.x & 31];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      r.a += xg_shfl(r.a, off);
      r.b += xg_shfl(r.b, off);
    }
    return r;
  }
}

/*
 * The local pass over a block's share (n vectors of S at cs, of T at ct):
 * maxima, then the shifted exponentials written back in place and summed
 * (float32: each vector's four terms summed in float32, then added in
 * float64). Every thread touches the vectors i = tid + k*XG_THREADS only,
 * in this pass and in the output pass, so the write-back needs no barrier;
 * the proxy fence orders it before the bulk copies that later refill the
 * stage. Contains two block barriers; every thread of the block calls it.
 */
template <typename T>
static __device__ __forceinline__ xg_stat xg_local(T *cs, T *ct, int n, xg_two<T> *shm,
                                                   xg_two<double> *shs) {
  constexpr int VEC = 16 / (int)sizeof(T);
  const T ninf = (T)-INFINITY;
  xg_two<T> m{ninf, ninf};
#pragma unroll 4
  for (int i = (int)threadIdx.x; i < n; i += XG_THREADS) {
    T a[VEC], b[VEC];
    bk_vload<VEC>(cs + i * VEC, a);
    bk_vload<VEC>(ct + i * VEC, b);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      m.a = fmax(m.a, a[e]);
      m.b = fmax(m.b, b[e]);
    }
  }
  m = xg_block_max<XG_WARPS>(m, shm);
  /* A -inf maximum means the share is all -inf or NaN: shifting by 0 keeps
   * exp(-inf) = 0 and NaN, where -inf - -inf would make every term NaN. */
  const T hS = m.a == ninf ? (T)0 : m.a, hT = m.b == ninf ? (T)0 : m.b;
  double sS = 0.0, sT = 0.0;
#pragma unroll 4
  for (int i = (int)threadIdx.x; i < n; i += XG_THREADS) {
    T a[VEC], b[VEC];
    bk_vload<VEC>(cs + i * VEC, a);
    bk_vload<VEC>(ct + i * VEC, b);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      a[e] = xe_exp(a[e] - hS);
      b[e] = xe_exp(b[e] - hT);
    }
    sS += (double)xg_vsum(a);
    sT += (double)xg_vsum(b);
    bk_st16(cs + i * VEC, a);
    bk_st16(ct + i * VEC, b);
  }
  cx_fence_proxy_async();
  const xg_two<double> s = xg_block_sum<XG_WARPS>(xg_two<double>{sS, sT}, shs);
  return xg_stat{(double)m.a, s.a, (double)m.b, s.b};
}

/*
 * Sends a block's statistics of one row to every block of the cluster
 * (itself included): thread k < C stores the four values into
 * slot[rank] of block k (two 16-byte st.async, counted on block k's bar),
 * and thread 0 arrives on its own bar expecting C*32 bytes. The arrival and
 * the incoming bytes may come in any order within the phase.
 */
static __device__ __forceinline__ void xg_send(const xg_stat &st, double (*slot)[4],
                                               unsigned long long *bar, int rank, int C) {
  const int tid = (int)threadIdx.x;
  if (tid < C) {
    const unsigned dst0 = cx_mapa(cx_smem(&slot[rank][0]), (unsigned)tid);
    const unsigned dst1 = cx_mapa(cx_smem(&slot[rank][2]), (unsigned)tid);
    const unsigned rbar = cx_mapa(cx_smem(bar), (unsigned)tid);
    cx_store_remote(dst0, st.mS, st.sS, rbar);
    cx_store_remote(dst1, st.mT, st.sT, rbar);
  }
  if (tid == 0) cx_bar_expect(cx_smem(bar), (unsigned)C * 32u);
}

/* xe_exp with the shared-memory table: the same bits. */
static __device__ __forceinline__ double xg_exp_tab(double x, const int2 *tab) {
  return xe_exp_core_range(x) ? xe_exp_core_tab(x, tab) : exp(x);
}

/*
 * Folds the cluster's C slots (after the exchange wait) into this block's
 * two output factors exp(m - M) / Z / rows. Lane k takes rank k's values
 * (lanes past C stand in with m = -inf, s = 0); M and Z are butterflies
 * over the warp, so every warp of every block gets the same bits. The two
 * exponentials per lane use CUDA's exp (no table read through L1 right
 * after the acquire, which invalidates L1), or with TAB xe_exp with the
 * shared-memory table tab (fewer registers and instructions).
 */
template <bool TAB>
static __device__ __forceinline__ xg_two<double> xg_fold(const double (*slot)[4], int rank, int C,
                                                         double inv_rows, const int2 *tab) {
  const int lane = (int)(threadIdx.x & 31);
  double mS = -INFINITY, sS = 0.0, mT = -INFINITY, sT = 0.0;
  if (lane < C) {
    const double2 u = *reinterpret_cast<const double2 *>(&slot[lane][0]);
    const double2 v = *reinterpret_cast<const double2 *>(&slot[lane][2]);
    mS = u.x;
    sS = u.y;
    mT = v.x;
    sT = v.y;
  }
  double MS = mS, MT = mT;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    MS = fmax(MS, xg_shfl(MS, off));
    MT = fmax(MT, xg_shfl(MT, off));
  }
  /* Literal exp(m - M): 0 for a -inf share under a finite maximum, NaN when
   * the row's maximum is -inf (all -inf) or +inf at the +inf share. */
  double eS, eT;
  if constexpr (TAB) {
    /* Lanes past C take exp(0): their z terms are s = 0 either way, and
     * their argument -inf would send the warp through CUDA's exp. */
    eS = xg_exp_tab(lane < C ? mS - MS : 0.0, tab);
    eT = xg_exp_tab(lane < C ? mT - MT : 0.0, tab);
  } else {
    eS = exp(mS - MS);
    eT = exp(mT - MT);
  }
  double zS = mS == -INFINITY ? sS : sS * eS;
  double zT = mT == -INFINITY ? sT : sT * eT;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    zS += xg_shfl(zS, off);
    zT += xg_shfl(zT, off);
  }
  const double fS = __shfl_sync(XG_FULL_MASK, eS, rank) * (inv_rows / zS);
  const double fT = __shfl_sync(XG_FULL_MASK, eT, rank) * (inv_rows / zT);
  return xg_two<double>{fS, fT};
}

/* y = es * fS - et * fT over the block's share, streaming stores. */
template <typename T>
static __device__ __forceinline__ void xg_output(const T *cs, const T *ct, int n,
                                                 T *__restrict__ yr, xg_two<double> f) {
  constexpr int VEC = 16 / (int)sizeof(T);
  const T fS = (T)f.a, fT = (T)f.b;
#pragma unroll 4
  for (int i = (int)threadIdx.x; i < n; i += XG_THREADS) {
    T a[VEC], b[VEC], o[VEC];
    bk_vload<VEC>(cs + i * VEC, a);
    bk_vload<VEC>(ct + i * VEC, b);
#pragma unroll
    for (int e = 0; e < VEC; ++e) o[e] = a[e] * fS - b[e] * fT;
    bk_vstore_cs<VEC>(yr + (int64_t)i * VEC, o);
  }
}

/* Thread 0: queues the bulk copies of a row's share (n vectors per operand
 * at global element offset base) into a stage, counted on bar; an empty
 * share only arrives, so the phase completes all the same. */
template <typename T>
static __device__ __forceinline__ void xg_issue(const T *S, const T *Tt, T *stage, int64_t base,
                                                int n, int sl, unsigned long long *bar) {
  constexpr int VEC = 16 / (int)sizeof(T);
  const unsigned b = cx_smem(bar);
  if (n > 0) {
    const unsigned bytes = (unsigned)n * 16u;
    cx_bar_expect(b, 2u * bytes);
    cx_bulk_load(cx_smem(stage), S + base, bytes, b);
    cx_bulk_load(cx_smem(stage + (int64_t)sl * VEC), Tt + base, bytes, b);
  } else {
    cx_bar_arrive(b);
  }
}

/* ---- kernels ---------------------------------------------------------------------------- */

/* Where a block stands in the row loop: the cluster size, its rank, the
 * vectors of its share (n, starting at vector q0 of a row), its cluster's
 * index cid among ncl clusters, and the rows it visits (cid, cid + ncl, ...:
 * nrow of them, cid < rows). */
struct xg_plan {
  int C, rank, n;
  int64_t q0, cid, ncl, nrow, cols, vec;
  /* Element offset of the block's share of the cluster's j-th row. */
  __device__ __forceinline__ int64_t base(int64_t j) const {
    return (cid + j * ncl) * cols + q0 * vec;
  }
};
static __device__ __forceinline__ xg_plan xg_make_plan(const cg::cluster_group &cluster,
                                                       int64_t rows, int64_t cols, int sl,
                                                       int vec) {
  xg_plan p;
  p.C = (int)cluster.num_blocks();
  p.rank = (int)cluster.block_rank();
  const int64_t nvec = cols / vec;
  p.q0 = (int64_t)p.rank * sl;
  p.n = p.q0 < nvec ? (int)(nvec - p.q0 < sl ? nvec - p.q0 : sl) : 0;
  p.cid = (int64_t)blockIdx.x / p.C;
  p.ncl = (int64_t)gridDim.x / p.C;
  p.nrow = (rows - p.cid + p.ncl - 1) / p.ncl;
  p.cols = cols;
  p.vec = vec;
  return p;
}

/* Thread 0 initializes the stage mbarriers (one arrival each: its own, with
 * the bytes of the copies) and the two exchange mbarriers, and makes them
 * visible to the cluster; a cluster barrier must follow. */
template <int NST>
static __device__ __forceinline__ void xg_init_bars(unsigned long long *lbar,
                                                    unsigned long long *xbar) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < NST; ++s) cx_bar_init(cx_smem(&lbar[s]), 1);
    cx_bar_init(cx_smem(&xbar[0]), 1);
    cx_bar_init(cx_smem(&xbar[1]), 1);
    cx_bar_init_fence();
  }
}

/*
 * The NST shared-memory stages of a block (stage j % NST holds the share of
 * the cluster's j-th row, S then T, 2*sl vectors; filled when lbar[j % NST]
 * completes its phase (j / NST) & 1). start: the mbarriers initialized and
 * made visible to the cluster (a cluster barrier, so every block's are ready
 * before anyone stores into them), then thread 0 queues the first NST rows.
 * refill(j): once every thread is done with row j's stage, thread 0 queues
 * row j + NST into it.
 */
template <typename T, int NST> struct xg_ring {
  const T *S, *Tt;
  T *base;
  int64_t elems;
  int sl;
  const xg_plan &pl;
  unsigned long long *lbar;

  __device__ __forceinline__ T *stage(int64_t j) const { return base + (j % NST) * elems; }
  __device__ __forceinline__ void wait(int64_t j) const {
    cx_bar_wait(cx_smem(&lbar[j % NST]), (unsigned)((j / NST) & 1));
  }
  __device__ __forceinline__ void start(const cg::cluster_group &cluster,
                                        unsigned long long *xbar) const {
    xg_init_bars<NST>(lbar, xbar);
    cluster.sync();
    if (threadIdx.x == 0)
      for (int64_t k = 0; k < NST && k < pl.nrow; ++k)
        xg_issue(S, Tt, stage(k), pl.base(k), pl.n, sl, &lbar[k]);
  }
  __device__ __forceinline__ void refill(int64_t j) const {
    if (threadIdx.x == 0 && j + NST < pl.nrow)
      xg_issue(S, Tt, stage(j), pl.base(j + NST), pl.n, sl, &lbar[j % NST]);
  }
};

/*
 * Teacher gradient rows, a cluster of C blocks per row (see the file
 * comment). Two stages of 2*sl vectors each (S then T) in dynamic shared
 * memory; stage j % 2 holds the cluster's j-th row. Every thread runs
 * every block barrier and mbarrier wait the same number of times: the loop
 * bounds are the same in every block of a cluster, and an empty share runs
 * the same steps with no vectors.
 */
template <typename T>
static __global__ void __launch_bounds__(XG_THREADS, XG_MIN_BLOCKS)
    xent_grad_cluster_kernel(const T *__restrict__ S, const T *__restrict__ Tt, T *__restrict__ y,
                             int64_t rows, int64_t cols, int sl) {
  constexpr int NST = 2;
  constexpr int VEC = 16 / (int)sizeof(T);
  extern __shared__ __align__(16) unsigned char xg_dyn[];
  __shared__ __align__(16) double slot[2][XG_MAX_CLUSTER][4];
  __shared__ __align__(8) unsigned long long lbar[NST]; /* stage j % NST filled */
  __shared__ __align__(8) unsigned long long xbar[2];   /* row j's slots, parity j & 1 */
  __shared__ xg_two<T> shm[XG_WARPS];
  __shared__ xg_two<double> shs[XG_WARPS];

  cg::cluster_group cluster = cg::this_cluster();
  const xg_plan pl = xg_make_plan(cluster, rows, cols, sl, VEC);
  const int C = pl.C, rank = pl.rank, n = pl.n;
  const int64_t nrow = pl.nrow;
  const double inv_rows = 1.0 / (double)rows;
  const xg_ring<T, NST> ring{S, Tt, reinterpret_cast<T *>(xg_dyn), (int64_t)2 * sl * VEC, sl,
                             pl, lbar};
  ring.start(cluster, xbar);

  for (int64_t j = 0; j < nrow; ++j) {
    T *cs = ring.stage(j);
    T *ct = cs + (int64_t)sl * VEC;
    ring.wait(j);
    const xg_stat st = xg_local(cs, ct, n, shm, shs);
    const int p = (int)(j & 1);
    xg_send(st, slot[p], &xbar[p], rank, C);
    cx_bar_wait_cluster(cx_smem(&xbar[p]), (unsigned)((j >> 1) & 1));
    const xg_two<double> f = xg_fold<false>(slot[p], rank, C, inv_rows, nullptr);
    xg_output(cs, ct, n, y + pl.base(j), f);
    /* Every thread is done with the stage before it takes row j+NST. */
    __syncthreads();
    ring.refill(j);
  }
  /* No block leaves while a peer may still store into its slots. */
  cluster.sync();
}

/*
 * xe_exp of N arguments in place: when every argument lies in the table
 * range (one test each, one branch for the batch) as independent
 * branch-free chains with the shared-memory table, else one xe_exp each;
 * the same bits either way.
 */
template <int N>
static __device__ __forceinline__ void xg_exp_batch(double *x, const int2 *tab) {
  bool core = true;
#pragma unroll
  for (int e = 0; e < N; ++e) core &= xe_exp_core_range(x[e]);
  if (core) {
#pragma unroll
    for (int e = 0; e < N; ++e) x[e] = xe_exp_core_tab(x[e], tab);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) x[e] = xe_exp(x[e]);
  }
}

/*
 * The float64 register kernel (see the file comment): THREADS threads, a
 * share of at most KREG*THREADS vector pairs (thread t holds the pairs
 * t + k*THREADS, k < KREG), NST stages of 2*sl vectors, MINB blocks per
 * multiprocessor. Per row: stage wait, share into registers, block maxima
 * (barrier 1, after which thread 0 queues row j + NST into the stage),
 * exponentials in batches of KB pairs and the sums in the order of
 * xg_local, block sums (barrier 2), send, warp 0 waits and folds
 * (barrier 3), output from registers. The same barrier and mbarrier
 * counts in every thread and every block of a cluster, as above.
 */
template <int THREADS, int KREG, int NST, int MINB>
static __global__ void __launch_bounds__(THREADS, MINB)
    xent_grad_cluster64_kernel(const double *__restrict__ S, const double *__restrict__ Tt,
                               double *__restrict__ y, int64_t rows, int64_t cols, int sl) {
  constexpr int VEC = 2;
  constexpr int WARPS = THREADS / 32;
  constexpr int KB = KREG < 2 ? KREG : 2; /* vector pairs per exponential batch */
  static_assert(KREG % KB == 0, "whole batches");
  const double ninf = -INFINITY;
  extern __shared__ __align__(16) unsigned char xg_dyn[];
  __shared__ __align__(16) double slot[2][XG_MAX_CLUSTER][4];
  __shared__ __align__(8) unsigned long long lbar[NST]; /* stage j % NST filled */
  __shared__ __align__(8) unsigned long long xbar[2];   /* row j's slots, parity j & 1 */
  __shared__ xg_two<double> shm[WARPS];
  __shared__ xg_two<double> shs[WARPS];
  __shared__ xg_two<double> fac; /* the current row's output factors */
  __shared__ int2 tab[64];

  cg::cluster_group cluster = cg::this_cluster();
  const xg_plan pl = xg_make_plan(cluster, rows, cols, sl, VEC);
  const int C = pl.C, rank = pl.rank, n = pl.n;
  const int tid = (int)threadIdx.x;
  const int64_t nrow = pl.nrow;
  const double inv_rows = 1.0 / (double)rows;
  const xg_ring<double, NST> ring{S, Tt, reinterpret_cast<double *>(xg_dyn),
                                  (int64_t)2 * sl * VEC, sl, pl, lbar};

  if (tid < 64) tab[tid] = xe_exp2_tab_entry(tid);
  /* The table is written before anyone reads it: start's cluster barrier. */
  ring.start(cluster, xbar);

  for (int64_t j = 0; j < nrow; ++j) {
    const double *cs = ring.stage(j);
    const double *ct = cs + (int64_t)sl * VEC;
    ring.wait(j);
    double a[KREG][VEC], b[KREG][VEC];
#pragma unroll
    for (int k = 0; k < KREG; ++k) {
      const int i = tid + k * THREADS;
      if (i < n) {
        bk_vload<VEC>(cs + i * VEC, a[k]);
        bk_vload<VEC>(ct + i * VEC, b[k]);
      } else {
        a[k][0] = a[k][1] = b[k][0] = b[k][1] = ninf;
      }
    }
    /* Maxima as a tree; the final fmax with -inf turns an all-NaN tree
     * into -inf, as xg_local's running maximum from -inf does. */
    double ta[KREG], tb[KREG];
#pragma unroll
    for (int k = 0; k < KREG; ++k) {
      ta[k] = fmax(a[k][0], a[k][1]);
      tb[k] = fmax(b[k][0], b[k][1]);
    }
#pragma unroll
    for (int w = 1; w < KREG; w <<= 1)
#pragma unroll
      for (int k = 0; k + w < KREG; k += 2 * w) {
        ta[k] = fmax(ta[k], ta[k + w]);
        tb[k] = fmax(tb[k], tb[k + w]);
      }
    xg_two<double> m{fmax(ta[0], ninf), fmax(tb[0], ninf)};
    m = xg_block_max<WARPS>(m, shm);
    /* The share is in registers: the stage takes row j + NST. */
    ring.refill(j);
    /* A -inf maximum: shift by 0 (see xg_local). Vectors past the share
     * take the argument 0, inside the table range; they are not summed. */
    const double hS = m.a == ninf ? 0.0 : m.a, hT = m.b == ninf ? 0.0 : m.b;
#pragma unroll
    for (int k0 = 0; k0 < KREG; k0 += KB) {
      double x[4 * KB];
#pragma unroll
      for (int k = 0; k < KB; ++k) {
        const bool in = tid + (k0 + k) * THREADS < n;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          x[(2 * k) * VEC + e] = in ? a[k0 + k][e] - hS : 0.0;
          x[(2 * k + 1) * VEC + e] = in ? b[k0 + k][e] - hT : 0.0;
        }
      }
      xg_exp_batch<4 * KB>(x, tab);
#pragma unroll
      for (int k = 0; k < KB; ++k)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          a[k0 + k][e] = x[(2 * k) * VEC + e];
          b[k0 + k][e] = x[(2 * k + 1) * VEC + e];
        }
    }
    double sS = 0.0, sT = 0.0;
#pragma unroll
    for (int k = 0; k < KREG; ++k)
      if (tid + k * THREADS < n) {
        sS += xg_vsum(a[k]);
        sT += xg_vsum(b[k]);
      }
    const xg_two<double> s = xg_block_sum<WARPS>(xg_two<double>{sS, sT}, shs);
    const int p = (int)(j & 1);
    xg_send(xg_stat{m.a, s.a, m.b, s.b}, slot[p], &xbar[p], rank, C);
    if (tid < 32) {
      cx_bar_wait_cluster(cx_smem(&xbar[p]), (unsigned)((j >> 1) & 1));
      const xg_two<double> f = xg_fold<true>(slot[p], rank, C, inv_rows, tab);
      if (tid == 0) fac = f;
    }
    __syncthreads();
    const double fS = fac.a, fT = fac.b;
    double *const yr = y + pl.base(j);
#pragma unroll
    for (int k = 0; k < KREG; ++k) {
      const int i = tid + k * THREADS;
      if (i < n) {
        double o[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) o[e] = a[k][e] * fS - b[k][e] * fT;
        bk_vstore_cs<VEC>(yr + (int64_t)i * VEC, o);
      }
    }
  }
  /* No block leaves while a peer may still store into its slots. */
  cluster.sync();
}

/* ---- launchers ------------------------------------------------------------------------ */

/* Dynamic shared memory a block may stage (both stages), the same for every
 * launch so the function attribute never changes between callers. */
static const int64_t XG_SMEM_MAX = 192 * 1024;

/* Rows a cluster takes at least: a cluster with one row has no next row
 * whose copies could overlap it, and with four every stage is refilled and
 * every mbarrier passes both phase parities, also at the small shapes of
 * the tests. */
static const int64_t XG_MIN_ROWS = 4;

/*
 * Queues kern (S, Tt, y, rows, cols, sl) in clusters of C blocks of
 * `threads` threads and `smem` bytes of dynamic shared memory: as many
 * clusters as can be resident (with short_rows > 0, at least
 * ceil(rows / short_rows), so that clusters of that many rows follow each
 * other), at most ceil(rows / XG_MIN_ROWS). False, with nothing queued and
 * no error left behind, when no cluster of C can be resident or the launch
 * is refused.
 */
template <typename K, typename T>
static bool xg_cluster_launch(bk_context *ctx, K kern, int64_t C, int threads, int64_t smem,
                              int64_t short_rows, const T *S, const T *Tt, T *y, int64_t rows,
                              int64_t cols, int64_t sl) {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = cx_cluster_config(attr, C, threads, (size_t)smem, bk_stream(ctx));
  const int active = cx_active_clusters(ctx, kern, cfg);
  if (active < 1) return false; /* this size cannot run here */
  const int64_t want = (rows + XG_MIN_ROWS - 1) / XG_MIN_ROWS;
  int64_t ncl = active;
  if (short_rows > 0 && (rows + short_rows - 1) / short_rows > ncl)
    ncl = (rows + short_rows - 1) / short_rows;
  if (ncl > want) ncl = want;
  if (ncl > (int64_t)INT32_MAX / C) ncl = (int64_t)INT32_MAX / C;
  cfg.gridDim = dim3((unsigned)(ncl * C), 1, 1);
  if (cudaLaunchKernelEx(&cfg, kern, S, Tt, y, rows, cols, (int)sl) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

/*
 * C = the smallest power of two (2..16) whose stage (2*sl 16-byte vectors,
 * sl = ceil(nvec / C)) is at most `target` bytes, else 16. Served when both
 * stages fit XG_SMEM_MAX and rows*C >= 2*SMs (fewer rows take the split
 * path); if no cluster of size C can be resident, C/2 is tried while it
 * still qualifies. Clusters: as many as can be resident, at most
 * ceil(rows / XG_MIN_ROWS): one wave.
 */
template <typename T>
static bk_status xg_launch(bk_context *ctx, const char *fn, const T *S, const T *Tt, T *y,
                           int64_t rows, int64_t cols, int64_t target, int *done) {
  constexpr int VEC = 16 / (int)sizeof(T);
  constexpr int64_t NST = 2;
  *done = 0;
  if (rows < 1 || cols < VEC || cols % VEC != 0 || !bk_aligned16(S) || !bk_aligned16(Tt) ||
      !bk_aligned16(y))
    return BK_OK;
  const int64_t sm = bk_cu(ctx)->sm_count;
  const int64_t nvec = cols / VEC;
  int64_t C = 1;
  while (C < XG_MAX_CLUSTER && C * target < 2 * nvec * 16) C <<= 1;
  if (C < 2) return BK_OK; /* one block holds the row pair: the register paths read it once */
  auto kern = xent_grad_cluster_kernel<T>;
  /* A refusal is not an error of the call: another path serves it. */
  if (!bk__cuda_func_prepare(ctx, (const void *)kern, (int)XG_SMEM_MAX, -1, 1, NULL)) return BK_OK;
  for (; C >= 2 && rows * C >= 2 * sm; C >>= 1) {
    const int64_t sl = (nvec + C - 1) / C;
    const int64_t bytes = NST * 2 * sl * 16;
    if (bytes > XG_SMEM_MAX) break;
    if (!xg_cluster_launch(ctx, kern, C, XG_THREADS, bytes, 0, S, Tt, y, rows, cols, sl))
      continue;
    *done = 1;
    return bk__cuda_launched(fn, "xent_grad_cluster_kernel");
  }
  return BK_OK;
}

/*
 * Queues xent_grad_cluster64_kernel<THREADS, KREG, NST, MINB> when it
 * serves the shape, else leaves *done 0. C = the smallest power of two
 * (2..16) with sl = ceil(nvec / C) <= KREG*THREADS; served when such a C
 * exists, rows*C >= min_blocks and a cluster of C can be resident. The
 * dynamic shared-memory limit is the kernel's fixed maximum (NST stages of
 * the largest share) and the carveout asks for MINB such blocks per
 * multiprocessor. Clusters: as many as can be resident, at most
 * ceil(rows / XG_MIN_ROWS); with short_rows > 0, at least
 * ceil(rows / short_rows) (within that bound), so that clusters of
 * short_rows rows follow each other on the freed multiprocessors instead
 * of one wave of long-lived ones.
 */
template <int THREADS, int KREG, int NST, int MINB>
static bk_status xg64_launch(bk_context *ctx, const char *fn, const double *S, const double *Tt,
                             double *y, int64_t rows, int64_t cols, int64_t min_blocks,
                             int64_t short_rows, int *done) {
  constexpr int VEC = 2;
  constexpr int64_t cap = (int64_t)KREG * THREADS;
  constexpr int64_t smem_max = (int64_t)NST * 2 * cap * 16;
  *done = 0;
  if (rows < 1 || cols < VEC || cols % VEC != 0 || !bk_aligned16(S) || !bk_aligned16(Tt) ||
      !bk_aligned16(y))
    return BK_OK;
  const int64_t nvec = cols / VEC;
  int64_t C = 1;
  while (C < XG_MAX_CLUSTER && (nvec + C - 1) / C > cap) C <<= 1;
  const int64_t sl = (nvec + C - 1) / C;
  if (C < 2 || sl > cap || rows * C < min_blocks) return BK_OK;
  auto kern = xent_grad_cluster64_kernel<THREADS, KREG, NST, MINB>;
  /* A refusal is not an error of the call: another path serves it. */
  if (!bk__cuda_func_fit(ctx, (const void *)kern, (int)smem_max, MINB, 1, false)) return BK_OK;
  if (!xg_cluster_launch(ctx, kern, C, THREADS, NST * 2 * sl * 16, short_rows, S, Tt, y, rows,
                         cols, sl))
    return BK_OK;
  *done = 1;
  return bk__cuda_launched(fn, "xent_grad_cluster64_kernel");
}

/* ---- entry ------------------------------------------------------------------------------ */

bk_status bk__cuda_xent_grad_cluster(bk_context *ctx, const char *fn, bk_dtype dt, const void *S,
                                     const void *T, void *y, int64_t rows, int64_t cols,
                                     int *done) {
  *done = 0;
  /* Two stages of at most 32 KB (float32 32768 columns: C = 8; float64:
   * C = 16), each row waiting for its own exchange. */
  if (dt == BK_F32)
    return xg_launch<float>(ctx, fn, (const float *)S, (const float *)T, (float *)y, rows, cols,
                            32 * 1024, done);
  const double *s64 = (const double *)S, *t64 = (const double *)T;
  double *y64 = (double *)y;
  const int64_t sm = bk_cu(ctx)->sm_count;
  /* 256 threads holding shares of up to 2048 pairs (32768 columns: C = 8)
   * in registers, one stage (the registers hold the row being computed
   * while the stage takes the next), two blocks per multiprocessor; clusters
   * of 16 rows launched as the grid drains, so that clusters also fill
   * multiprocessors that one resident wave would leave idle. Shapes it
   * leaves (rows of at most 4096 columns, one such share; too few rows for
   * 2 * SMs blocks) try shares of up to 1024 pairs, two stages and three
   * blocks per multiprocessor, whose C is twice as large. */
  bk_status st = xg64_launch<256, 8, 1, 2>(ctx, fn, s64, t64, y64, rows, cols, 2 * sm, 16, done);
  if (st != BK_OK || *done) return st;
  st = xg64_launch<256, 4, 2, 3>(ctx, fn, s64, t64, y64, rows, cols, 2 * sm, 16, done);
  if (st != BK_OK || *done) return st;
  return xg_launch<double>(ctx, fn, s64, t64, y64, rows, cols, 32 * 1024, done);
}
