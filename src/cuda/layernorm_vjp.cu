/*
 * layernorm_vjp.cu — CUDA backward of layer normalization
 * (bk_layernorm_backward): dx from the saved normalized values and inv_std,
 * and the column sums dgamma, dbeta.
 *
 * One row template, lnv_rows_kernel, in three strategies of who holds a row:
 *  - group: G lanes of a warp per row (a power of two up to 32), several
 *    rows per warp, so narrow rows fill every lane (rows of at most 32 *
 *    lnv_traits<T>::group columns);
 *  - block: the whole block per row (at most LNV_MAX_THREADS * n columns),
 *    the row's sums folded across warps with one barrier per row;
 *  - slice: wider rows in slices of one block's width; lnv_sums_kernel
 *    first writes each (row, slice) pair of sums, added in slice order.
 * Every thread caches its share of the rows in registers and loads the next
 * batch's share while it finishes the current one (float64 rows that would
 * need the widest block instead take blocks of half the threads with twice
 * the columns a thread in one register set, every load of a row issued
 * before any use, two per multiprocessor). Access is scalar (any
 * width, any alignment) or, for the block-wide strategies when the pointers
 * and the width allow, 16 bytes at a time. Per row: g = dout*gamma, S1 =
 * sum g, S2 = sum g*normalized (thread and warp sums in the dtype, folds
 * across warps and slices in float64), dx = inv_std/cols * (cols*g - S1 -
 * normalized*S2).
 *
 * Column sums, two levels: each thread adds its columns' dout*normalized
 * and dout over the rows it visits into float64 slots of its own in shared
 * memory; the block then folds its groups' slots in group order into one
 * partial row (rounded to the dtype), and lnv_fold_kernel adds the partial
 * rows per column in fixed segments, each in order. The plan is a function
 * of the shape and of the device facts read once per context, so every
 * order is fixed and the results are bitwise reproducible. No atomics.
 */
#include "cuda_internal.h"

#include <stdint.h>
#include <stdio.h>

/* ---- geometry ------------------------------------------------------------------------ */

static constexpr unsigned LNV_FULL_MASK = 0xffffffffu;

enum { LNV_GROUP = 0, LNV_BLOCK = 1, LNV_SLICE = 2 };

/* Largest block; __launch_bounds__(LNV_MAX_THREADS, 1) caps every kernel
 * here at LNV_REGS registers a thread, which gives the planner the
 * occupancy: regs_per_sm / (LNV_REGS * threads) blocks per multiprocessor,
 * at most LNV_MAX_BLOCKS_PER_SM (compute capability 5.0 through 9.0). */
static constexpr int LNV_MAX_THREADS = 1024, LNV_REGS = 64, LNV_MAX_BLOCKS_PER_SM = 32;

/* Group strategy: LNV_GROUP_THREADS per block, lnv_traits<T>::group
 * elements per lane and batch (N columns times RPT rows), so rows up to 32 *
 * group columns. */
static constexpr int LNV_GROUP_THREADS = 256;

/* Block-wide strategies: N elements of a row per thread; vec elements make
 * 16 bytes. */
template <typename T> struct lnv_traits;
template <> struct lnv_traits<float> {
  static constexpr int n = 8, vec = 4, group = 4;
  static constexpr int n2 = 0; /* see lnv_make_plan */
};
template <> struct lnv_traits<double> {
  static constexpr int n = 4, vec = 2, group = 2;
  static constexpr int n2 = 8;
};

/* A block of the block strategy visits at least this many rows when the
 * rows allow, so that its partial row (cols elements, written and read
 * again by the fold) costs at most a few percent of the rows' traffic. */
static constexpr int64_t LNV_MIN_ROWS_PER_BLOCK = 8;

template <typename T> struct lnv_args {
  const T *dout, *nrm, *inv_std, *gamma; /* (rows, cols), (rows, cols), (rows), (cols) */
  const double2 *sums;                   /* slice: (rows, nsl) partial (S1, S2) */
  T *dx;                                 /* (rows, cols) */
  T *part;                               /* (nb, 2, cols) column partials */
  int64_t rows, cols;
  int64_t nsl; /* slices per row (slice strategy), else 1 */
  int G;       /* lanes per row (group strategy) */
};

/* Where a thread's elements are: columns base + lc + k*cstep + e (lc =
 * lane*VEC, cstep = G*VEC) for chunk k < N/VEC and e < VEC, those with
 * lc + k*cstep < lim, that is k < nk; rows (b*RPT + i)*gpb + q of batch b. */
struct lnv_pos {
  int64_t base;
  int lc, cstep, lim, nk, gpb, q, G, lane;
};

static __device__ __forceinline__ int64_t lnv_row(const lnv_pos &p, int rpt, int64_t b, int i) {
  return (b * rpt + i) * p.gpb + p.q;
}

/* ---- the row template -------------------------------------------------------------------- */

/* Loads batch b's share of dout and normalized (zeros outside the matrix). */
template <typename T, int N, int RPT, int VEC>
static __device__ __forceinline__ void lnv_load(const lnv_args<T> &a, const lnv_pos &p, int64_t b,
                                                T (&d)[RPT * N], T (&n)[RPT * N]) {
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int64_t r = lnv_row(p, RPT, b, i);
    const bool rv = r < a.rows;
    const int64_t off = (rv ? r : 0) * a.cols + p.base + p.lc;
    const T *dr = a.dout + off, *nr = a.nrm + off;
#pragma unroll
    for (int k = 0; k < N / VEC; ++k) {
      if (rv && k < p.nk) {
        bk_vload<VEC>(dr + k * p.cstep, &d[i * N + k * VEC]);
        bk_vload<VEC>(nr + k * p.cstep, &n[i * N + k * VEC]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) d[i * N + k * VEC + e] = n[i * N + k * VEC + e] = (T)0;
      }
    }
  }
}

/* Butterfly sum over the 2^m lanes below `width` (every lane gets the same
 * value: each step adds two equal halves, and IEEE addition commutes). */
template <typename T>
static __device__ __forceinline__ void lnv_butterfly(T &x, T &y, int width) {
  for (int off = width >> 1; off > 0; off >>= 1) {
    x += __shfl_xor_sync(LNV_FULL_MASK, x, off);
    y += __shfl_xor_sync(LNV_FULL_MASK, y, off);
  }
}

/*
 * Finishes batch b from its loaded share (d, n, rs): the column slots, the
 * rows' (S1, S2) by the strategy's reduction, then dx. shr is the block
 * strategy's warp-sum buffer for this batch (two alternate between batches,
 * so one barrier per batch keeps readers and the next writers apart).
 */
template <typename T, int N, int RPT, int VEC, int MODE>
static __device__ __forceinline__ void lnv_finish(const lnv_args<T> &a, const lnv_pos &p,
                                                  int64_t b, T (&d)[RPT * N],
                                                  const T (&n)[RPT * N], double2 *acc,
                                                  double2 (*shr)[32]) {
  const int tid = (int)threadIdx.x, B = (int)blockDim.x;
  /* inv_std and gamma now (L1 hits for gamma after the first rows), so
   * their latency overlaps the column slots and the row sums. */
  T rs[RPT], gm[N];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int64_t r = lnv_row(p, RPT, b, i);
    rs[i] = r < a.rows ? __ldg(a.inv_std + r) : (T)0;
  }
  const T *gr = a.gamma + p.base + p.lc;
#pragma unroll
  for (int k = 0; k < N / VEC; ++k) {
    if (k < p.nk) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) gm[k * VEC + e] = __ldg(gr + k * p.cstep + e);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) gm[k * VEC + e] = (T)0;
    }
  }
#pragma unroll
  for (int s = 0; s < N; ++s) {
    T dn = (T)0, db = (T)0;
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      dn = fma(d[i * N + s], n[i * N + s], dn);
      db += d[i * N + s];
    }
    double2 t = acc[s * B + tid];
    t.x += (double)dn;
    t.y += (double)db;
    acc[s * B + tid] = t;
  }
  T s1[RPT], s2[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    s1[i] = (T)0;
    s2[i] = (T)0;
#pragma unroll
    for (int s = 0; s < N; ++s) {
      const T g = d[i * N + s] * gm[s];
      d[i * N + s] = g; /* from here on d holds g = dout * gamma */
      s1[i] += g;
      s2[i] = fma(g, n[i * N + s], s2[i]);
    }
  }
  double S1[RPT], S2[RPT];
  if constexpr (MODE == LNV_GROUP) {
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      lnv_butterfly(s1[i], s2[i], p.G);
      S1[i] = (double)s1[i];
      S2[i] = (double)s2[i];
    }
  } else if constexpr (MODE == LNV_BLOCK) {
    const int nw = B >> 5, warp = tid >> 5;
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      lnv_butterfly(s1[i], s2[i], 32);
      S1[i] = (double)s1[i];
      S2[i] = (double)s2[i];
      if (nw > 1 && (tid & 31) == 0) shr[i][warp] = make_double2(S1[i], S2[i]);
    }
    if (nw > 1) {
      __syncthreads();
#pragma unroll
      for (int i = 0; i < RPT; ++i) {
        double2 t = shr[i][0];
        for (int w = 1; w < nw; ++w) {
          t.x += shr[i][w].x;
          t.y += shr[i][w].y;
        }
        S1[i] = t.x;
        S2[i] = t.y;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      const int64_t r = lnv_row(p, RPT, b, i);
      double2 t = make_double2(0.0, 0.0);
      if (r < a.rows) {
        const double2 *sr = a.sums + r * a.nsl;
        t = sr[0];
        for (int64_t c = 1; c < a.nsl; ++c) {
          t.x += sr[c].x;
          t.y += sr[c].y;
        }
      }
      S1[i] = t.x;
      S2[i] = t.y;
    }
  }
  const T tc = (T)a.cols;
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int64_t r = lnv_row(p, RPT, b, i);
    if (r >= a.rows) continue;
    const T f = (T)((double)rs[i] / (double)a.cols), A = (T)S1[i], Bs = (T)S2[i];
    T *xr = a.dx + r * a.cols + p.base + p.lc;
#pragma unroll
    for (int k = 0; k < N / VEC; ++k) {
      if (k < p.nk) {
        T o[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const int s = k * VEC + e;
          o[e] = f * fma(-n[i * N + s], Bs, fma(tc, d[i * N + s], -A));
        }
        bk_vstore_cs<VEC>(xr + k * p.cstep, o);
      }
    }
  }
}

/*
 * The row template. Blocks take batches first, first + step, ... (group:
 * batches of RPT rows per group, the block's groups on consecutive rows;
 * block: RPT rows; slice: block (rg, s) of the grid's nsl-block row groups
 * takes slice s of rows rg, rg + nrg, ...). Dynamic shared memory: N *
 * blockDim float64 pairs, slot s of thread t at s*blockDim + t. part row:
 * the block (group, block) or its row group (slice). PF: the next batch
 * loads while the current one is finished; else one batch at a time.
 */
template <typename T, int N, int RPT, int VEC, int MODE, bool PF>
static __global__ void __launch_bounds__(LNV_MAX_THREADS, 1) lnv_rows_kernel(lnv_args<T> a) {
  extern __shared__ __align__(16) unsigned char lnv_smem[];
  __shared__ double2 shr[MODE == LNV_BLOCK ? 2 : 1][RPT][32];
  double2 *const acc = reinterpret_cast<double2 *>(lnv_smem);
  const int tid = (int)threadIdx.x, B = (int)blockDim.x;
  lnv_pos p;
  p.G = MODE == LNV_GROUP ? a.G : B;
  p.lane = MODE == LNV_GROUP ? (tid & (p.G - 1)) : tid;
  p.gpb = MODE == LNV_GROUP ? B / p.G : 1;
  p.q = MODE == LNV_GROUP ? tid / p.G : 0;
  p.lc = p.lane * VEC;
  p.cstep = p.G * VEC;
  int64_t first = blockIdx.x, step = gridDim.x, slice = 0;
  if constexpr (MODE == LNV_SLICE) {
    slice = (int64_t)blockIdx.x % a.nsl;
    first = (int64_t)blockIdx.x / a.nsl;
    step = (int64_t)gridDim.x / a.nsl;
  }
  p.base = slice * (int64_t)B * N;
  {
    const int64_t left = a.cols - p.base, width = (int64_t)p.G * N;
    p.lim = (int)(left < width ? left : width);
  }
  p.nk = p.lc < p.lim ? (p.lim - p.lc - 1) / p.cstep + 1 : 0;
  const int64_t per_batch = (int64_t)p.gpb * RPT;
  const int64_t nbatch = (a.rows + per_batch - 1) / per_batch;

#pragma unroll
  for (int s = 0; s < N; ++s) acc[s * B + tid] = make_double2(0.0, 0.0);

  int64_t b = first;
  int par = 0;
  if constexpr (PF) {
    /* Two register sets: the next batch loads into one while the other is
     * finished. */
    T d0[RPT * N], n0[RPT * N], d1[RPT * N], n1[RPT * N];
    if (b < nbatch) lnv_load<T, N, RPT, VEC>(a, p, b, d0, n0);
    while (b < nbatch) {
      int64_t bn = b + step;
      if (bn < nbatch) lnv_load<T, N, RPT, VEC>(a, p, bn, d1, n1);
      lnv_finish<T, N, RPT, VEC, MODE>(a, p, b, d0, n0, acc, shr[par]);
      par ^= MODE == LNV_BLOCK ? 1 : 0;
      b = bn;
      if (b >= nbatch) break;
      bn = b + step;
      if (bn < nbatch) lnv_load<T, N, RPT, VEC>(a, p, bn, d0, n0);
      lnv_finish<T, N, RPT, VEC, MODE>(a, p, b, d1, n1, acc, shr[par]);
      par ^= MODE == LNV_BLOCK ? 1 : 0;
      b = bn;
    }
  } else {
    /* One register set, a batch's loads all issued before any use. */
    for (; b < nbatch; b += step) {
      T d0[RPT * N], n0[RPT * N];
      lnv_load<T, N, RPT, VEC>(a, p, b, d0, n0);
      lnv_finish<T, N, RPT, VEC, MODE>(a, p, b, d0, n0, acc, shr[par]);
      par ^= MODE == LNV_BLOCK ? 1 : 0;
    }
  }

  /* The block's partial row: local column c = (k*G + lane)*VEC + e is slot
   * k*VEC + e of lane `lane` in each group, added in group order. */
  __syncthreads();
  const int64_t pb = MODE == LNV_SLICE ? first : (int64_t)blockIdx.x;
  T *pg = a.part + pb * 2 * a.cols, *pt = pg + a.cols;
  for (int c = tid; c < p.lim; c += B) {
    const int v = c / VEC;
    const int s = (v / p.G) * VEC + c % VEC;
    const int l = v % p.G;
    double2 t = acc[s * B + l];
    for (int g = 1; g < p.gpb; ++g) {
      const double2 u = acc[s * B + g * p.G + l];
      t.x += u.x;
      t.y += u.y;
    }
    pg[p.base + c] = (T)t.x;
    pt[p.base + c] = (T)t.y;
  }
}

/*
 * Slice strategy, first pass: sums[u] = (sum g, sum g*normalized) over
 * slice s of row r (unit u = r*nsl + s), the slice's columns at the row
 * template's positions of a block.
 */
template <typename T, int N, int VEC>
static __global__ void __launch_bounds__(LNV_MAX_THREADS, 1)
    lnv_sums_kernel(lnv_args<T> a, double2 *__restrict__ sums) {
  __shared__ double2 shr[2][32];
  const int tid = (int)threadIdx.x, B = (int)blockDim.x, nw = B >> 5;
  const int64_t units = a.rows * a.nsl;
  int par = 0;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t r = u / a.nsl, base = (u - r * a.nsl) * (int64_t)B * N;
    const T *dr = a.dout + r * a.cols, *nr = a.nrm + r * a.cols;
    T d[N], n[N], gm[N];
#pragma unroll
    for (int k = 0; k < N / VEC; ++k) {
      const int64_t c0 = base + ((int64_t)k * B + tid) * VEC;
      if (c0 < a.cols) {
        bk_vload<VEC>(dr + c0, &d[k * VEC]);
        bk_vload<VEC>(nr + c0, &n[k * VEC]);
        bk_vload<VEC>(a.gamma + c0, &gm[k * VEC]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) d[k * VEC + e] = n[k * VEC + e] = gm[k * VEC + e] = (T)0;
      }
    }
    T s1 = (T)0, s2 = (T)0;
#pragma unroll
    for (int s = 0; s < N; ++s) {
      const T g = d[s] * gm[s];
      s1 += g;
      s2 = fma(g, n[s], s2);
    }
    lnv_butterfly(s1, s2, 32);
    if ((tid & 31) == 0) shr[par][tid >> 5] = make_double2((double)s1, (double)s2);
    __syncthreads();
    if (tid == 0) {
      double2 t = shr[par][0];
      for (int w = 1; w < nw; ++w) {
        t.x += shr[par][w].x;
        t.y += shr[par][w].y;
      }
      sums[u] = t;
    }
    par ^= 1;
  }
}

/*
 * dgamma[j], dbeta[j] from part (nb, 2, cols): sequence u < 2*cols is cut
 * into LNV_FOLD_SEGS segments of ceil(nb / LNV_FOLD_SEGS) partial rows;
 * thread (tx, ty) adds segment ty of sequence base + tx in row order (eight
 * loads in flight), then the segments' sums are added in segment order.
 */
static constexpr int LNV_FOLD_COLS = 32;
static constexpr int LNV_FOLD_SEGS = 8;

template <typename T>
static __global__ void __launch_bounds__(LNV_FOLD_COLS *LNV_FOLD_SEGS)
    lnv_fold_kernel(const T *__restrict__ part, int64_t nb, int64_t cols, T *__restrict__ dgamma,
                    T *__restrict__ dbeta) {
  __shared__ double sh[LNV_FOLD_SEGS][LNV_FOLD_COLS];
  const int64_t w = 2 * cols;
  const int64_t len = (nb + LNV_FOLD_SEGS - 1) / LNV_FOLD_SEGS;
  const int tx = (int)(threadIdx.x % LNV_FOLD_COLS), ty = (int)(threadIdx.x / LNV_FOLD_COLS);
  const int64_t b0 = ty * len < nb ? ty * len : nb, b1 = b0 + len < nb ? b0 + len : nb;
  for (int64_t base = (int64_t)blockIdx.x * LNV_FOLD_COLS; base < w;
       base += (int64_t)gridDim.x * LNV_FOLD_COLS) {
    const int64_t u = base + tx;
    double s = 0.0;
    if (u < w) {
      const T *pu = part + u;
      int64_t k = b0;
      for (; k + 8 <= b1; k += 8) {
        T v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = pu[(k + e) * w];
#pragma unroll
        for (int e = 0; e < 8; ++e) s += (double)v[e];
      }
      for (; k < b1; ++k) s += (double)pu[k * w];
    }
    __syncthreads(); /* the previous round's readers of sh are done */
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && u < w) {
      double t = sh[0][tx];
#pragma unroll
      for (int k = 1; k < LNV_FOLD_SEGS; ++k) t += sh[k][tx];
      if (u < cols)
        dgamma[u] = (T)t;
      else
        dbeta[u - cols] = (T)t;
    }
  }
}

/* ---- the planner ---------------------------------------------------------------------------- */

/* Strategy, elements per thread and row, rows per batch, lanes per row,
 * threads per block; blocks, partial rows, slices per row; dynamic shared
 * memory per block. */
struct lnv_plan {
  int mode, n, rpt, G, threads, pf;
  int64_t grid, nb, nsl;
  size_t smem;
};

/* The largest block of the block-wide strategies whose column slots (N
 * float64 pairs a thread) and static memory fit what a block may opt in to,
 * and whose registers at the cap fit a multiprocessor. */
static int lnv_max_threads(const bk_cuda_ctx *c, int n) {
  int t = LNV_MAX_THREADS;
  while (t > 32 && ((int64_t)t * n * 16 + 2048 > (int64_t)c->facts.smem_optin ||
                    (int64_t)t * LNV_REGS > (int64_t)c->facts.regs_per_sm))
    t >>= 1;
  return t;
}

/* Resident blocks of `threads` threads and `smem` dynamic bytes: the
 * register cap, the shared memory per multiprocessor and the architecture's
 * block limit, times the multiprocessors. */
static int64_t lnv_resident(const bk_cuda_ctx *c, int threads, size_t smem) {
  int64_t per_sm = (int64_t)c->facts.regs_per_sm / ((int64_t)LNV_REGS * threads);
  const int64_t by_smem =
      (int64_t)c->facts.smem_per_sm / ((int64_t)smem + 2048 + c->facts.smem_reserved);
  if (by_smem < per_sm) per_sm = by_smem;
  if (per_sm > LNV_MAX_BLOCKS_PER_SM) per_sm = LNV_MAX_BLOCKS_PER_SM;
  if (per_sm < 1) per_sm = 1;
  return per_sm * c->sm_count;
}

/* The widest block of which two are resident per multiprocessor by the
 * register cap (a multiple of 32, at most tmax). */
static int lnv_two_blocks(const bk_cuda_ctx *c, int tmax) {
  const int t = c->facts.regs_per_sm / (2 * LNV_REGS) / 32 * 32;
  return t < 32 ? 32 : t < tmax ? t : tmax;
}

/*
 * A pure function of the dtype's widths (block n, no-prefetch n2, group),
 * the shape and the device facts. Lane groups take N columns a lane (as
 * many as the group's elements allow, so the fewest lanes and butterfly
 * steps per row) and the rest of the elements as rows. A row that needs a
 * block too wide for two blocks per multiprocessor takes, where two blocks
 * of twice the columns a thread fit the shared memory, one register set of
 * n2 columns a thread: a block then waits at its row barrier while the
 * other's loads are in flight. Slices are the widest block: each thread adds
 * the row's nsl slice sums, so fewer slices cost less.
 */
static lnv_plan lnv_make_plan(const bk_cuda_ctx *c, int n, int n2, int group, int64_t rows,
                              int64_t cols) {
  lnv_plan p = {};
  p.nsl = 1;
  p.pf = 1;
  if (cols <= 32 * group) {
    p.mode = LNV_GROUP;
    p.n = cols == 1 ? 1 : cols == 2 || group == 2 ? 2 : 4;
    p.rpt = group / p.n;
    for (p.G = 1; (int64_t)p.G * p.n < cols; p.G <<= 1) {
    }
    p.threads = LNV_GROUP_THREADS;
    p.smem = (size_t)p.n * p.threads * 16;
    const int64_t per_batch = (int64_t)(p.threads / p.G) * p.rpt;
    const int64_t nbatch = (rows + per_batch - 1) / per_batch;
    const int64_t res = lnv_resident(c, p.threads, p.smem);
    p.grid = nbatch < res ? nbatch : res;
    p.nb = p.grid;
    return p;
  }
  const int tmax = lnv_max_threads(c, n), t2 = lnv_two_blocks(c, tmax);
  p.n = n;
  p.rpt = 1;
  const int64_t need = (cols + n - 1) / n; /* threads for a row */
  if (need <= tmax) {
    p.mode = LNV_BLOCK;
    const int64_t need2 = n2 > 0 ? (cols + n2 - 1) / n2 : 0;
    const int64_t th2 = (need2 + 31) / 32 * 32;
    if (need > t2 && n2 > 0 && th2 <= t2 &&
        2 * ((int64_t)n2 * th2 * 16 + 2048 + c->facts.smem_reserved) <=
            (int64_t)c->facts.smem_per_sm) {
      p.n = n2;
      p.pf = 0;
    }
    const int64_t th = (cols + p.n - 1) / p.n;
    p.threads = (int)((th + 31) / 32 * 32);
    p.G = p.threads;
    p.smem = (size_t)p.n * p.threads * 16;
    const int64_t res = lnv_resident(c, p.threads, p.smem);
    int64_t want = (rows + LNV_MIN_ROWS_PER_BLOCK - 1) / LNV_MIN_ROWS_PER_BLOCK;
    if (want < c->sm_count) want = rows < c->sm_count ? rows : c->sm_count;
    p.grid = want < res ? want : res;
    p.nb = p.grid;
    return p;
  }
  p.mode = LNV_SLICE;
  p.threads = tmax;
  p.G = tmax;
  p.smem = (size_t)n * p.threads * 16;
  p.nsl = (cols + (int64_t)tmax * n - 1) / ((int64_t)tmax * n);
  int64_t nrg = lnv_resident(c, p.threads, p.smem) / p.nsl;
  if (nrg < 1) nrg = 1;
  if (nrg > rows) nrg = rows;
  p.grid = nrg * p.nsl;
  p.nb = nrg;
  return p;
}

/* ---- launchers ------------------------------------------------------------------------------- */

/* Queues one instance of the row template for plan p; the block-wide
 * instances first get their dynamic shared-memory limit (fixed per instance
 * and device: the largest block's slots), once per context. */
template <typename T, int N, int RPT, int VEC, int MODE, bool PF>
static bk_status lnv_launch(bk_context *ctx, const char *fn, const lnv_plan &p,
                            const lnv_args<T> &a) {
  if (MODE != LNV_GROUP) {
    const int dyn = N * lnv_max_threads(bk_cu(ctx), N) * 16;
    if (!bk__cuda_func_prepare(ctx, (const void *)lnv_rows_kernel<T, N, RPT, VEC, MODE, PF>, dyn,
                               -1, 0, NULL))
      return bk__fail(BK_ERR_DEVICE, fn,
                      "the device refused %d bytes of shared memory for the VJP row kernel", dyn);
  }
  lnv_rows_kernel<T, N, RPT, VEC, MODE, PF>
      <<<(unsigned)p.grid, p.threads, p.smem, bk_stream(ctx)>>>(a);
  return bk__cuda_launched(fn, "lnv_rows_kernel");
}

template <typename T, int VEC>
static bk_status lnv_launch_wide(bk_context *ctx, const char *fn, const lnv_plan &p,
                                 const lnv_args<T> &a, int mode) {
  constexpr int N = lnv_traits<T>::n, N2 = lnv_traits<T>::n2;
  if (mode == LNV_BLOCK) {
    if constexpr (N2 > 0)
      if (!p.pf) return lnv_launch<T, N2, 1, VEC, LNV_BLOCK, false>(ctx, fn, p, a);
    return lnv_launch<T, N, 1, VEC, LNV_BLOCK, true>(ctx, fn, p, a);
  }
  const int64_t res = lnv_resident(bk_cu(ctx), p.threads, 0);
  const int64_t units = a.rows * a.nsl;
  lnv_sums_kernel<T, N, VEC><<<(unsigned)(units < res ? units : res), p.threads, 0,
                               bk_stream(ctx)>>>(a, const_cast<double2 *>(a.sums));
  const bk_status st = bk__cuda_launched(fn, "lnv_sums_kernel");
  if (st != BK_OK) return st;
  return lnv_launch<T, N, 1, VEC, LNV_SLICE, true>(ctx, fn, p, a);
}

template <typename T>
static bk_status lnv_backward(bk_context *ctx, const char *fn, const T *dout, const T *nrm,
                              const T *inv_std, const T *gamma, T *dx, T *dgamma, T *dbeta,
                              int64_t rows, int64_t cols) {
  constexpr int V = lnv_traits<T>::vec;
  const lnv_plan p =
      lnv_make_plan(bk_cu(ctx), lnv_traits<T>::n, lnv_traits<T>::n2, lnv_traits<T>::group,
                    rows, cols);
  const size_t part_bytes = (size_t)p.nb * 2 * (size_t)cols * sizeof(T);
  const size_t sums_bytes =
      p.mode == LNV_SLICE ? (size_t)rows * (size_t)p.nsl * sizeof(double2) : 0;
  void *scratch = NULL;
  bk_status st = bk__cuda_scratch(ctx, fn, sums_bytes + part_bytes, &scratch);
  if (st != BK_OK) return st;
  const lnv_args<T> a = {dout, nrm, inv_std, gamma, (const double2 *)scratch, dx,
                         (T *)((char *)scratch + sums_bytes), rows, cols, p.nsl, p.G};
  constexpr int E = lnv_traits<T>::group;
  if (p.mode == LNV_GROUP) {
    if (p.n == 1)
      st = lnv_launch<T, 1, E, 1, LNV_GROUP, true>(ctx, fn, p, a);
    else if constexpr (E >= 4)
      st = p.n == 2 ? lnv_launch<T, 2, E / 2, 1, LNV_GROUP, true>(ctx, fn, p, a)
                    : lnv_launch<T, 4, E / 4, 1, LNV_GROUP, true>(ctx, fn, p, a);
    else
      st = lnv_launch<T, 2, E / 2, 1, LNV_GROUP, true>(ctx, fn, p, a);
  } else {
    /* 16-byte access when every row starts on a 16-byte boundary. */
    const bool vec = cols % V == 0 && bk_aligned16(dout) && bk_aligned16(nrm) &&
                     bk_aligned16(gamma) && bk_aligned16(dx);
    st = vec ? lnv_launch_wide<T, V>(ctx, fn, p, a, p.mode)
             : lnv_launch_wide<T, 1>(ctx, fn, p, a, p.mode);
  }
  if (st == BK_OK) {
    lnv_fold_kernel<T><<<bk_cuda_grid((2 * cols + LNV_FOLD_COLS - 1) / LNV_FOLD_COLS),
                         LNV_FOLD_COLS * LNV_FOLD_SEGS, 0, bk_stream(ctx)>>>(a.part, p.nb, cols,
                                                                             dgamma, dbeta);
    st = bk__cuda_launched(fn, "lnv_fold_kernel");
  }
  bk__cuda_scratch_free(ctx, scratch);
  return st;
}

/* ---- planner check (host tests) ------------------------------------------------------------ */

/* Declared in src/core/internal.h: the plans for a device with these facts
 * over a fixed list of shapes, each checked for what a launch there needs
 * and for covering every column once. */
extern "C" BK_API int64_t bk__cuda_layernorm_vjp_plan_check(int sm_count, int smem_per_sm,
                                                            int smem_optin, int smem_reserved,
                                                            int regs_per_sm, char *msg,
                                                            size_t cap) {
  bk_cuda_ctx c = {};
  c.sm_count = sm_count;
  c.facts.smem_per_sm = smem_per_sm;
  c.facts.smem_optin = smem_optin;
  c.facts.smem_reserved = smem_reserved;
  c.facts.regs_per_sm = regs_per_sm;
  static const int64_t rows_list[] = {1, 2, 3, 31, 257, 1000, 65537, (int64_t)1 << 20,
                                      (int64_t)1 << 27};
  static const int64_t wide[] = {511,   512,   513,   1023,  1024,   1025,   2047,
                                 2048,  2049,  4095,  4096,  4097,   8191,   8192,
                                 8193,  16385, 65537, 262143, 262144, 4194304, 3145729};
  int64_t bad = 0;
  if (msg && cap) msg[0] = '\0';
  for (int d = 0; d < 2; ++d) {
    const int n = d ? lnv_traits<double>::n : lnv_traits<float>::n;
    const int n2 = d ? lnv_traits<double>::n2 : lnv_traits<float>::n2;
    const int group = d ? lnv_traits<double>::group : lnv_traits<float>::group;
    for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ++ri)
      for (int64_t ci = 0; ci < 300 + (int64_t)(sizeof wide / sizeof wide[0]); ++ci) {
        const int64_t rows = rows_list[ri], cols = ci < 300 ? ci + 1 : wide[ci - 300];
        const lnv_plan p = lnv_make_plan(&c, n, n2, group, rows, cols);
        const int64_t span = (int64_t)p.threads * p.n; /* columns a block covers */
        const char *why = NULL;
        if (p.threads < 32 || p.threads > LNV_MAX_THREADS || p.threads % 32 != 0 ||
            (int64_t)LNV_REGS * p.threads > regs_per_sm)
          why = "block size";
        else if (p.grid < 1 || p.grid > 0x7fffffff || p.nb < 1 || p.nb > rows)
          why = "grid or partial rows";
        else if (p.smem + 2048 > (size_t)smem_optin ||
                 (int64_t)p.smem + 2048 + smem_reserved > smem_per_sm ||
                 (p.mode != LNV_GROUP &&
                  (int64_t)p.smem > (int64_t)p.n * lnv_max_threads(&c, p.n) * 16))
          why = "shared memory";
        else if (p.mode == LNV_GROUP
                     ? (p.G < 1 || p.G > 32 || (p.G & (p.G - 1)) || (int64_t)p.G * p.n < cols ||
                        p.rpt * p.n != group || p.threads != LNV_GROUP_THREADS)
                     : p.mode == LNV_BLOCK
                           ? (p.G != p.threads || span < cols || (p.n != n && p.n != n2))
                           : (p.n != n || p.nsl * span < cols || (p.nsl - 1) * span >= cols ||
                              p.grid != p.nb * p.nsl))
          why = "columns";
        if (why) {
          if (bad++ == 0 && msg && cap)
            snprintf(msg, cap,
                     "%s: %s rows %lld cols %lld: mode %d n %d threads %d G %d grid %lld nb %lld "
                     "nsl %lld smem %zu",
                     why, d ? "f64" : "f32", (long long)rows, (long long)cols, p.mode, p.n,
                     p.threads, p.G, (long long)p.grid, (long long)p.nb, (long long)p.nsl,
                     p.smem);
        }
      }
  }
  return bad;
}

/* ---- entry ---------------------------------------------------------------------------------- */

extern "C" bk_status bk__cuda_layernorm_backward(bk_context *ctx, bk_dtype dt, const void *dout,
                                                 const void *normalized, const void *inv_std,
                                                 const void *gamma, void *dx, void *dgamma,
                                                 void *dbeta, int64_t rows, int64_t cols) {
  static const char fn[] = "bk_layernorm_backward";
  if (dt == BK_F32)
    return lnv_backward<float>(ctx, fn, (const float *)dout, (const float *)normalized,
                               (const float *)inv_std, (const float *)gamma, (float *)dx,
                               (float *)dgamma, (float *)dbeta, rows, cols);
  return lnv_backward<double>(ctx, fn, (const double *)dout, (const double *)normalized,
                              (const double *)inv_std, (const double *)gamma, (double *)dx,
                              (double *)dgamma, (double *)dbeta, rows, cols);
}
