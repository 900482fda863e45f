/*
 * rows.cu — CUDA row reductions and masks over flat (rows, cols) buffers:
 * bk_rows_sum, bk_rows_max, bk_rows_first_max_mask, bk_rows_topk_mask, and
 * the entry of bk_rows_masked_softmax (its kernels are the softmax row
 * engine in softmax.cu).
 *
 * Reductions (sum, max, first max): rows of at most 128 16-byte vectors in
 * lane groups (2..32 lanes per row, up to four vectors per lane, all loaded
 * before use), a warp per row for other short rows, a block per row
 * otherwise, 16-byte loads when the pointers and the row length allow, four
 * loads in flight per thread. Few long rows are split into chunks reduced by
 * separate blocks, then folded per row in chunk order.
 * Sums accumulate in float64 for both dtypes. Max and first max carry
 * (value, index) pairs: NaN entries are never taken, larger values win and
 * equal values go to the lower index. That combination is associative and
 * commutative, so any tree gives the sequential scan's answer exactly:
 *  - rows_max: the first maximal non-NaN value (so -0 and +0 keep the scan's
 *    choice); no non-NaN entry leaves the -inf identity.
 *  - first max: the sequential scan starts from x[0] and replaces only on
 *    strictly greater. A NaN x[0] is never replaced (nothing compares
 *    greater than NaN), so the answer is 0; otherwise NaN candidates never
 *    replace and the answer is the lowest index of the maximum over the
 *    non-NaN entries, which is what the pairs give.
 *
 * Top-k (exact compare-and-count semantics): rows of 2, 4, 8 or 16 lanes' worth
 * of four 16-byte vectors (f32 32..256 columns, f64 16..128) with k <= 8 live
 * in registers of a lane group: each lane keeps its best k pairs (sorted
 * insertion for float32, bitonic networks for float64), the group merges them
 * by shuffles and every lane keeps its entries that do not come after the k-th
 * best pair (NaN rows: literal count). Other rows of at most a few hundred
 * columns with k <= 8: a thread owns a row staged in shared memory (coalesced
 * in and out) and keeps the k best (value, index) pairs in registers; without
 * NaN, "j beats i" is the strict total order (value descending, index
 * ascending), so entry i is kept iff it is not after the k-th best pair. A row
 * holding NaN is counted literally instead. Any other shape uses a block per
 * (row, tile of entries) that counts beaters over the row in shared-memory
 * tiles, stopping once every entry of the tile has k.
 */
#include "cuda_internal.h"

#include <math.h>
#include <stdint.h>

/* ---- device helpers -------------------------------------------------------------- */

static constexpr unsigned RW_FULL_MASK = 0xffffffffu;
static constexpr int64_t RW_NONE = INT64_MAX; /* index of the empty (value, index) pair */

template <typename T> struct rw_traits;
template <> struct rw_traits<float> {
  static constexpr int vec = 4;
};
template <> struct rw_traits<double> {
  static constexpr int vec = 2;
};

enum { RW_SUM = 0, RW_MAX = 1, RW_FIRST = 2 };

template <typename T> struct rw_pair {
  T v;
  int64_t i;
};

/* The reduction of each op: an accumulator, how an element (value, index)
 * enters it in index order, an associative combine, and a lane shuffle. */
template <typename T, int OP> struct rw_op {
  using A = rw_pair<T>;
  static __device__ __forceinline__ A identity() { return A{(T)-INFINITY, RW_NONE}; }
  /* Elements arrive in increasing index, so a tie keeps the earlier one. The
   * empty pair takes any non-NaN element, -inf included. */
  static __device__ __forceinline__ void add(A &a, T x, int64_t j) {
    if (x > a.v || (a.i == RW_NONE && x == x)) {
      a.v = x;
      a.i = j;
    }
  }
  static __device__ __forceinline__ A combine(A a, A b) {
    if (b.v > a.v) return b;
    if (a.v > b.v) return a;
    return b.i < a.i ? b : a;
  }
  static __device__ __forceinline__ A shfl_xor(A a, int off) {
    return A{__shfl_xor_sync(RW_FULL_MASK, a.v, off),
             (int64_t)__shfl_xor_sync(RW_FULL_MASK, (long long)a.i, off)};
  }
};

template <typename T> struct rw_op<T, RW_SUM> {
  using A = double;
  static __device__ __forceinline__ A identity() { return 0.0; }
  static __device__ __forceinline__ void add(A &a, T x, int64_t) { a += (double)x; }
  static __device__ __forceinline__ A combine(A a, A b) { return a + b; }
  static __device__ __forceinline__ A shfl_xor(A a, int off) {
    return __shfl_xor_sync(RW_FULL_MASK, a, off);
  }
};

/* Butterfly over the warp; every lane ends with the same value (each step
 * combines two equal halves with a commutative operation). */
template <typename Op, typename A>
static __device__ __forceinline__ A rw_warp_allreduce(A v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = Op::combine(v, Op::shfl_xor(v, off));
  return v;
}

/* Block-wide: warp results folded in warp order by every thread; the
 * leading barrier keeps a previous call's readers of sh safe. */
template <typename Op, typename A>
static __device__ __forceinline__ A rw_block_allreduce(A v, A *sh) {
  v = rw_warp_allreduce<Op>(v);
  const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
  const int nw = (int)(blockDim.x >> 5);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  A r = sh[0];
  for (int w = 1; w < nw; ++w) r = Op::combine(r, sh[w]);
  return r;
}

/* Accumulates the vector range [q, q1) of row xr with stride G, in index
 * order per thread, four loads in flight. */
template <typename T, int VEC, typename Op>
static __device__ __forceinline__ void rw_accumulate(typename Op::A &a, const T *xr, int64_t q,
                                                     int64_t q1, int64_t G) {
  for (; q + 3 * G < q1; q += 4 * G) {
    T t[4][VEC];
#pragma unroll
    for (int k = 0; k < 4; ++k) bk_vload<VEC>(xr + (q + k * G) * VEC, t[k]);
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int e = 0; e < VEC; ++e) Op::add(a, t[k][e], (q + k * G) * VEC + e);
  }
  for (; q < q1; q += G) {
    T t[VEC];
    bk_vload<VEC>(xr + q * VEC, t);
#pragma unroll
    for (int e = 0; e < VEC; ++e) Op::add(a, t[e], q * VEC + e);
  }
}

/* Writes the one-hot mask of index idx over the vector range [q, q1) of yr. */
template <typename T, int VEC>
static __device__ __forceinline__ void rw_write_onehot(T *yr, int64_t q, int64_t q1, int64_t G,
                                                       int64_t idx) {
  for (; q < q1; q += G) {
    T o[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) o[e] = (q * VEC + e == idx) ? (T)1 : (T)0;
    bk_vstore_cs<VEC>(yr + q * VEC, o);
  }
}

/* The first-max index from the reduced pair: 0 when x[0] is NaN. */
template <typename T>
static __device__ __forceinline__ int64_t rw_first_index(const T *xr, const rw_pair<T> &a) {
  const T x0 = xr[0];
  return x0 != x0 ? 0 : a.i;
}

/* ---- kernels: reductions ------------------------------------------------------------ */

/*
 * One row per group (WARP: a warp, blockDim 256; else the block). SUM and
 * MAX write y[r] (rows); FIRST writes the one-hot row of y (rows, cols).
 */
template <typename T, int VEC, bool WARP, int OP>
static __global__ void __launch_bounds__(1024)
    rows_reduce_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int64_t cols) {
  using Op = rw_op<T, OP>;
  using A = typename Op::A;
  __shared__ A sh[32];
  const int64_t G = WARP ? 32 : (int64_t)blockDim.x;
  const int64_t g = WARP ? (int64_t)(threadIdx.x & 31) : (int64_t)threadIdx.x;
  const int64_t per_block = WARP ? (int64_t)(blockDim.x >> 5) : 1;
  const int64_t first = (int64_t)blockIdx.x * per_block + (WARP ? (int64_t)(threadIdx.x >> 5) : 0);
  const int64_t step = (int64_t)gridDim.x * per_block;
  const int64_t nvec = cols / VEC;
  for (int64_t r = first; r < rows; r += step) {
    const T *xr = x + r * cols;
    A a = Op::identity();
    rw_accumulate<T, VEC, Op>(a, xr, g, nvec, G);
    if constexpr (WARP)
      a = rw_warp_allreduce<Op>(a);
    else
      a = rw_block_allreduce<Op>(a, sh);
    if constexpr (OP == RW_SUM) {
      if (g == 0) y[r] = (T)a;
    } else if constexpr (OP == RW_MAX) {
      if (g == 0) y[r] = a.v;
    } else {
      rw_write_onehot<T, VEC>(y + r * cols, g, nvec, G, rw_first_index(xr, a));
    }
  }
}

/* Few long rows: the partial of chunk c of row r (unit r*nch + c) over the
 * vector range [c*clen, min(nvec, (c+1)*clen)). */
template <typename T, int VEC, int OP>
static __global__ void __launch_bounds__(256)
    rows_reduce_split_kernel(const T *__restrict__ x, typename rw_op<T, OP>::A *__restrict__ part,
                             int64_t rows, int64_t cols, int64_t nch, int64_t clen) {
  using Op = rw_op<T, OP>;
  using A = typename Op::A;
  __shared__ A sh[32];
  const int64_t nvec = cols / VEC;
  const int64_t units = rows * nch;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t r = u / nch, c = u - r * nch;
    const int64_t q0 = c * clen;
    const int64_t q1 = q0 + clen < nvec ? q0 + clen : nvec;
    A a = Op::identity();
    rw_accumulate<T, VEC, Op>(a, x + r * cols, q0 + threadIdx.x, q1, blockDim.x);
    a = rw_block_allreduce<Op>(a, sh);
    if (threadIdx.x == 0) part[u] = a;
  }
}

/* SUM and MAX after the split: a thread per row folds its chunks in order. */
template <typename T, int OP>
static __global__ void rows_reduce_fold_kernel(const typename rw_op<T, OP>::A *__restrict__ part,
                                               T *__restrict__ y, int64_t rows, int64_t nch) {
  using Op = rw_op<T, OP>;
  using A = typename Op::A;
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
       r += (int64_t)gridDim.x * blockDim.x) {
    A a = part[r * nch];
    for (int64_t c = 1; c < nch; ++c) a = Op::combine(a, part[r * nch + c]);
    if constexpr (OP == RW_SUM)
      y[r] = (T)a;
    else
      y[r] = a.v;
  }
}

/* FIRST after the split: warp 0 folds the row's chunk pairs, then the block
 * writes the one-hot mask over its chunk. */
template <typename T, int VEC>
static __global__ void __launch_bounds__(256)
    first_max_split_write_kernel(const T *__restrict__ x, const rw_pair<T> *__restrict__ part,
                                 T *__restrict__ y, int64_t rows, int64_t cols, int64_t nch,
                                 int64_t clen) {
  using Op = rw_op<T, RW_FIRST>;
  __shared__ int64_t sh_idx;
  const int64_t nvec = cols / VEC;
  const int64_t units = rows * nch;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t r = u / nch, c = u - r * nch;
    __syncthreads(); /* the previous unit's readers of sh_idx are done */
    if (threadIdx.x < 32) {
      rw_pair<T> a = Op::identity();
      for (int64_t j = threadIdx.x; j < nch; j += 32) a = Op::combine(a, part[r * nch + j]);
      a = rw_warp_allreduce<Op>(a);
      if (threadIdx.x == 0) sh_idx = rw_first_index(x + r * cols, a);
    }
    __syncthreads();
    const int64_t q0 = c * clen;
    const int64_t q1 = q0 + clen < nvec ? q0 + clen : nvec;
    rw_write_onehot<T, VEC>(y + r * cols, q0 + threadIdx.x, q1, blockDim.x, sh_idx);
  }
}

/*
 * Narrow rows of nvec <= 4*G 16-byte vectors (G = 2..32 lanes per row, a
 * power of two): a warp reduces 32/G rows at once. Lane q of a group holds
 * vectors q, q+G, q+2G, q+3G of its row, all loaded before any is used, so
 * each warp load reads G*16 contiguous bytes of every row (whole sectors) and
 * a lane has up to 64 bytes in flight, where a warp per row would leave most
 * lanes idle. A lane folds its elements in index order with the same Op as
 * the wide kernels, then the group combines by xor shuffles with offsets
 * below G (every lane of the warp takes part; rows past the end carry the
 * identity). SUM and MAX: the group leaders write y[r], consecutive rows of
 * the warp in one store. FIRST: every lane writes its vectors of the one-hot
 * row; the leader's first element is x[r, 0] (its NaN test).
 */
template <typename T, int VEC, int OP, int G>
static __global__ void __launch_bounds__(256, 8)
    rows_group_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int64_t cols) {
  using Op = rw_op<T, OP>;
  using A = typename Op::A;
  constexpr int NV = 4, RPW = 32 / G;
  const int lane = (int)(threadIdx.x & 31u), q = lane & (G - 1);
  const int nvec = (int)(cols / VEC);
  const int64_t units = (rows + RPW - 1) / RPW;
  const int64_t wpb = (int64_t)(blockDim.x >> 5);
  const int64_t nwarps = (int64_t)gridDim.x * wpb;
  for (int64_t u = (int64_t)blockIdx.x * wpb + (int64_t)(threadIdx.x >> 5); u < units;
       u += nwarps) {
    /* u is uniform across the warp, so every lane reaches every shuffle. */
    const int64_t r = u * RPW + lane / G;
    const bool valid = r < rows;
    const T *xr = x + (valid ? r : 0) * cols;
    T v[NV][VEC];
#pragma unroll
    for (int n = 0; n < NV; ++n) {
      if (valid && q + G * n < nvec) {
        bk_vload<VEC>(xr + (int64_t)(q + G * n) * VEC, v[n]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[n][e] = (T)0;
      }
    }
    A a = Op::identity();
    if constexpr (OP == RW_SUM) {
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        if (valid && q + G * n < nvec) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) Op::add(a, v[n][e], 0);
        }
      }
    } else {
      /* Op::add with a 32-bit column (bi < 0: the empty pair), fewer registers. */
      T bv = (T)-INFINITY;
      int bi = -1;
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        if (valid && q + G * n < nvec) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const T xv = v[n][e];
            if (xv > bv || (bi < 0 && xv == xv)) {
              bv = xv;
              bi = (q + G * n) * VEC + e;
            }
          }
        }
      }
      a.v = bv;
      a.i = bi < 0 ? RW_NONE : (int64_t)bi;
    }
#pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) a = Op::combine(a, Op::shfl_xor(a, off));
    if constexpr (OP == RW_SUM) {
      if (valid && q == 0) y[r] = (T)a;
    } else if constexpr (OP == RW_MAX) {
      if (valid && q == 0) y[r] = a.v;
    } else {
      const T x0 = __shfl_sync(RW_FULL_MASK, v[0][0], lane - q);
      /* A row with x[r, 0] not NaN has a non-empty pair, below cols. */
      const int idx = x0 != x0 ? 0 : (int)a.i;
      if (valid) {
        T *yr = y + r * cols;
#pragma unroll
        for (int n = 0; n < NV; ++n) {
          if (q + G * n < nvec) {
            T o[VEC];
#pragma unroll
            for (int e = 0; e < VEC; ++e) o[e] = ((q + G * n) * VEC + e == idx) ? (T)1 : (T)0;
            bk_vstore_cs<VEC>(yr + (int64_t)(q + G * n) * VEC, o);
          }
        }
      }
    }
  }
}

/* ---- kernels: top-k -------------------------------------------------------------------- */

/* Entry i of a row is kept iff fewer than k entries beat it; j beats i when
 * x_j > x_i, or neither is greater and j < i. Counted literally. */
template <typename T>
static __device__ __forceinline__ bool rw_topk_literal(const T *row, int cols, int i, int k) {
  const T xi = row[i];
  int cnt = 0;
  for (int j = 0; j < cols && cnt < k; ++j) {
    const T xj = row[j];
    cnt += (xj > xi || (!(xi > xj) && !(xj > xi) && j < i)) ? 1 : 0;
  }
  return cnt < k;
}

/*
 * Small rows, k == K <= 8: a block stages R = blockDim rows (rows r0 ..
 * r0+R-1, contiguous in memory) in shared memory with an odd row stride (no
 * bank conflicts when each thread walks its own row), thread t finds the
 * K-th best pair of row t, then the block writes the mask coalesced.
 * Dynamic shared memory: R*stride elements, R thresholds, R indices, R flags.
 */
template <typename T, int K>
static __global__ void __launch_bounds__(128)
    topk_small_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int cols,
                      int stride) {
  extern __shared__ __align__(16) unsigned char rw_topk_smem[];
  const int R = (int)blockDim.x, t = (int)threadIdx.x;
  T *tile = reinterpret_cast<T *>(rw_topk_smem);
  T *thr_v = tile + (size_t)R * stride;
  int *thr_i = reinterpret_cast<int *>(thr_v + R);
  int *has_nan = thr_i + R;
  const int dr = R / cols, dc = R % cols; /* flat step R as (rows, cols) */
  const int64_t units = (rows + R - 1) / R;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t r0 = u * R;
    const int nr = rows - r0 < R ? (int)(rows - r0) : R;
    const int total = nr * cols;
    const T *xb = x + r0 * cols;
    T *yb = y + r0 * cols;

    {
      int rr = t / cols, cc = t % cols;
#pragma unroll 4
      for (int f = t; f < total; f += R) {
        tile[rr * stride + cc] = xb[f];
        rr += dr;
        cc += dc;
        if (cc >= cols) {
          cc -= cols;
          ++rr;
        }
      }
    }
    __syncthreads();

    if (t < nr) {
      const T *row = tile + t * stride;
      T lv[K];
      int li[K];
      int filled = 0;
      bool nan = false;
      for (int c = 0; c < cols; ++c) {
        const T v = row[c];
        if (v != v) {
          nan = true;
          break;
        }
        if (filled < K || v > lv[K - 1]) {
          /* Sorted by value descending, equal values in index order: v goes
           * after every kept value >= v. */
          int p = 0;
#pragma unroll
          for (int s = 0; s < K; ++s) p += (s < filled && lv[s] >= v) ? 1 : 0;
#pragma unroll
          for (int s = K - 1; s > 0; --s) {
            if (s > p) {
              lv[s] = lv[s - 1];
              li[s] = li[s - 1];
            } else if (s == p) {
              lv[s] = v;
              li[s] = c;
            }
          }
          if (p == 0) {
            lv[0] = v;
            li[0] = c;
          }
          if (filled < K) ++filled;
        }
      }
      has_nan[t] = nan ? 1 : 0;
      if (!nan) {
        thr_v[t] = lv[K - 1];
        thr_i[t] = li[K - 1];
      }
    }
    __syncthreads();

    {
      int rr = t / cols, cc = t % cols;
      for (int f = t; f < total; f += R) {
        const T *row = tile + rr * stride;
        bool keep;
        if (has_nan[rr]) {
          keep = rw_topk_literal(row, cols, cc, K);
        } else {
          const T v = row[cc], tv = thr_v[rr];
          keep = v > tv || (v == tv && cc <= thr_i[rr]);
        }
        __stcs(yb + f, keep ? (T)1 : (T)0);
        rr += dr;
        cc += dc;
        if (cc >= cols) {
          cc -= cols;
          ++rr;
        }
      }
    }
    __syncthreads(); /* the tile is reloaded by the next unit */
  }
}

/*
 * Any shape: unit u = (row r, tile it of blockDim entries). Thread t counts
 * the beaters of entry i = it*B + t over the row, staged B entries at a time
 * in shared memory; the block stops early once every entry of its tile has k
 * beaters (those entries are 0 whatever follows).
 */
template <typename T>
static __global__ void __launch_bounds__(256)
    topk_count_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int64_t cols,
                      int64_t k) {
  __shared__ T tile[256];
  const int64_t B = blockDim.x, t = threadIdx.x;
  const int64_t tiles = (cols + B - 1) / B;
  const int64_t units = rows * tiles;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t r = u / tiles, it = u - r * tiles;
    const int64_t i = it * B + t;
    const bool valid = i < cols;
    const T *xr = x + r * cols;
    const T xi = valid ? xr[i] : (T)0;
    int64_t cnt = 0;
    for (int64_t j0 = 0; j0 < cols; j0 += B) {
      __syncthreads(); /* readers of the previous tile are done */
      if (j0 + t < cols) tile[t] = xr[j0 + t];
      __syncthreads();
      const int64_t jn = cols - j0 < B ? cols - j0 : B;
      if (valid && cnt < k) {
        for (int64_t jj = 0; jj < jn; ++jj) {
          const T xj = tile[jj];
          cnt += (xj > xi || (!(xi > xj) && !(xj > xi) && j0 + jj < i)) ? 1 : 0;
        }
      }
      if (!__syncthreads_or(valid && cnt < k)) break;
    }
    if (valid) __stcs(y + r * cols + i, cnt < k ? (T)1 : (T)0);
  }
}

/*
 * Top-k in lane groups, 0 < k <= 8 and rows of exactly G*NV vectors (NV = 4
 * 16-byte vectors per lane, G in {2, 4, 8, 16} lanes per row): a warp holds
 * 32/G rows in registers. Without NaN the relation "j beats i" is the strict
 * total order (value descending, index ascending), so each lane sorts its
 * values in chunks of KP (k rounded up to a power of two) with bitonic
 * networks and keeps its best KP pairs; the G lanes of a row then merge their
 * lists by xor shuffles (the better of a[s] and b[KP-1-s] is a bitonic
 * sequence holding the best KP of both lists, which a half-cleaner cascade
 * sorts). Every lane of the group ends with the same list, whose k-th pair is
 * the threshold: an entry is kept iff it is that pair or precedes it. A row
 * holding a NaN is counted literally from memory by its own lanes instead.
 */
template <typename T>
static __device__ __forceinline__ bool rw_before(T av, int ai, T bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

/* Leaves the earlier (in the order) of the two pairs in (av, ai). */
template <typename T>
static __device__ __forceinline__ void rw_cswap(T &av, int &ai, T &bv, int &bi) {
  const bool sw = rw_before(bv, bi, av, ai);
  const T lv = sw ? bv : av, hv = sw ? av : bv;
  const int li = sw ? bi : ai, hi = sw ? ai : bi;
  av = lv;
  ai = li;
  bv = hv;
  bi = hi;
}

/* Sorts KP (a power of two) arbitrary pairs into the order (bitonic sort). */
template <typename T, int KP>
static __device__ __forceinline__ void rw_bitonic_sort(T *v, int *ix) {
#pragma unroll
  for (int ls = 1; (1 << ls) <= KP; ++ls) {
    const int size = 1 << ls;
#pragma unroll
    for (int ld = ls - 1; ld >= 0; --ld) {
      const int d = 1 << ld;
#pragma unroll
      for (int s = 0; s < KP; ++s) {
        if ((s & d) == 0) {
          if ((s & size) == 0)
            rw_cswap(v[s], ix[s], v[s + d], ix[s + d]);
          else
            rw_cswap(v[s + d], ix[s + d], v[s], ix[s]);
        }
      }
    }
  }
}

/* Sorts a bitonic sequence of KP pairs into the order (half cleaners). */
template <typename T, int KP>
static __device__ __forceinline__ void rw_bitonic_clean(T *v, int *ix) {
#pragma unroll
  for (int ld = 3; ld >= 0; --ld) {
    const int d = 1 << ld;
    if (d >= KP) continue;
#pragma unroll
    for (int s = 0; s < KP; ++s)
      if ((s & d) == 0) rw_cswap(v[s], ix[s], v[s + d], ix[s + d]);
  }
}

/* (v, ix) sorted, (bv, bix) sorted: (v, ix) becomes the sorted best KP of both. */
template <typename T, int KP>
static __device__ __forceinline__ void rw_merge_best(T *v, int *ix, const T *bv, const int *bix) {
#pragma unroll
  for (int s = 0; s < KP; ++s) {
    const bool take = rw_before(bv[KP - 1 - s], bix[KP - 1 - s], v[s], ix[s]);
    v[s] = take ? bv[KP - 1 - s] : v[s];
    ix[s] = take ? bix[KP - 1 - s] : ix[s];
  }
  rw_bitonic_clean<T, KP>(v, ix);
}

template <typename T, int K, int G>
static __global__ void __launch_bounds__(256, sizeof(T) == 4 && K <= 4 ? 4 : 0)
    topk_group_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int cols) {
  constexpr int VEC = rw_traits<T>::vec, NV = 4, NVAL = NV * VEC, RPW = 32 / G;
  constexpr int KP = K <= 1 ? 1 : K <= 2 ? 2 : K <= 4 ? 4 : 8;
  static_assert(NVAL % KP == 0, "a lane holds whole chunks");
  const int lane = (int)(threadIdx.x & 31u), q = lane % G;
  const unsigned gmask = (G == 32 ? RW_FULL_MASK : ((1u << G) - 1u)) << (lane - q);
  const int64_t units = (rows + RPW - 1) / RPW;
  const int64_t wpb = (int64_t)(blockDim.x >> 5);
  const int64_t nwarps = (int64_t)gridDim.x * wpb;
  for (int64_t u = (int64_t)blockIdx.x * wpb + (int64_t)(threadIdx.x >> 5); u < units;
       u += nwarps) {
    /* u is uniform across the warp, so every lane reaches every shuffle. */
    const int64_t r = u * RPW + lane / G;
    const bool valid = r < rows;
    const T *xr = x + (valid ? r : 0) * (int64_t)cols;
    T val[NVAL];
#pragma unroll
    for (int n = 0; n < NV; ++n) {
      if (valid) {
        bk_vload<VEC>(xr + (int64_t)(q + G * n) * VEC, val + n * VEC);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) val[n * VEC + e] = (T)0;
      }
    }
    bool lane_nan = false;
#pragma unroll
    for (int e = 0; e < NVAL; ++e) lane_nan = lane_nan || (val[e] != val[e]);
    const bool nan = (__ballot_sync(RW_FULL_MASK, lane_nan) & gmask) != 0u;

    /* The lane's best KP pairs. float32: its first KP values sorted, then
     * each later value inserted in turn (fewer instructions than sorting
     * chunks, which float64 keeps: its lanes hold half as many values). A
     * lane's columns increase with e, so a later value precedes a kept pair
     * exactly when it is strictly greater, and the kept values are
     * non-increasing: the tests c[s] are monotone in s (no NaN; a row with
     * NaN is counted literally below). */
    T bv[KP];
    int bi[KP];
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int s = 0; s < KP; ++s) {
        bv[s] = val[s];
        bi[s] = (q + G * (s / VEC)) * VEC + s % VEC;
      }
      rw_bitonic_sort<T, KP>(bv, bi);
#pragma unroll
      for (int e = KP; e < NVAL; ++e) {
        const T v = val[e];
        const int j = (q + G * (e / VEC)) * VEC + e % VEC;
        bool c[KP];
#pragma unroll
        for (int s = 0; s < KP; ++s) c[s] = v > bv[s];
#pragma unroll
        for (int s = KP - 1; s > 0; --s) {
          bv[s] = c[s - 1] ? bv[s - 1] : (c[s] ? v : bv[s]);
          bi[s] = c[s - 1] ? bi[s - 1] : (c[s] ? j : bi[s]);
        }
        bv[0] = c[0] ? v : bv[0];
        bi[0] = c[0] ? j : bi[0];
      }
    } else {
      /* float64: chunks of KP sorted, each merged into the list. */
#pragma unroll
      for (int c = 0; c < NVAL / KP; ++c) {
        T cv[KP];
        int ci[KP];
#pragma unroll
        for (int s = 0; s < KP; ++s) {
          const int e = c * KP + s;
          cv[s] = val[e];
          ci[s] = (q + G * (e / VEC)) * VEC + e % VEC;
        }
        rw_bitonic_sort<T, KP>(cv, ci);
        if (c == 0) {
#pragma unroll
          for (int s = 0; s < KP; ++s) {
            bv[s] = cv[s];
            bi[s] = ci[s];
          }
        } else {
          rw_merge_best<T, KP>(bv, bi, cv, ci);
        }
      }
    }
    /* Merge the G lanes' lists of the row (offsets stay inside the group). */
#pragma unroll
    for (int lo = 0; lo < 5; ++lo) {
      const int o = 1 << lo;
      if (o >= G) break;
      T ov[KP];
      int oi[KP];
#pragma unroll
      for (int s = 0; s < KP; ++s) {
        ov[s] = __shfl_xor_sync(RW_FULL_MASK, bv[s], o);
        oi[s] = __shfl_xor_sync(RW_FULL_MASK, bi[s], o);
      }
      rw_merge_best<T, KP>(bv, bi, ov, oi);
    }
    const T tv = bv[K - 1];
    const int ti = bi[K - 1];

    if (valid) {
      T out[NVAL];
      if (!nan) {
#pragma unroll
        for (int e = 0; e < NVAL; ++e) {
          const int col = (q + G * (e / VEC)) * VEC + e % VEC;
          out[e] = (val[e] > tv || (val[e] == tv && col <= ti)) ? (T)1 : (T)0;
        }
      } else {
        int cnt[NVAL];
#pragma unroll
        for (int e = 0; e < NVAL; ++e) cnt[e] = 0;
        for (int j = 0; j < cols; ++j) {
          const T xj = xr[j];
#pragma unroll
          for (int e = 0; e < NVAL; ++e) {
            const T xi = val[e];
            const int col = (q + G * (e / VEC)) * VEC + e % VEC;
            cnt[e] += (xj > xi || (!(xi > xj) && !(xj > xi) && j < col)) ? 1 : 0;
          }
        }
#pragma unroll
        for (int e = 0; e < NVAL; ++e) out[e] = cnt[e] < K ? (T)1 : (T)0;
      }
      T *yr = y + r * (int64_t)cols;
#pragma unroll
      for (int n = 0; n < NV; ++n) bk_vstore_cs<VEC>(yr + (int64_t)(q + G * n) * VEC, out + n * VEC);
    }
  }
}

/* ---- launchers ----------------------------------------------------------------------- */

/* Narrow rows in lane groups of G: one warp per 32/G rows, eight warps a
 * block, at most 32 blocks per SM (the warps then loop over the rest). */
template <typename T, int VEC, int OP, int G>
static bk_status rows_group_launch(bk_context *ctx, const char *fn, const T *x, T *y, int64_t rows,
                                   int64_t cols) {
  const int64_t units = (rows + 32 / G - 1) / (32 / G);
  const int64_t cap = 32 * (int64_t)bk_cu(ctx)->sm_count;
  const int64_t blocks = (units + 7) / 8 < cap ? (units + 7) / 8 : cap;
  rows_group_kernel<T, VEC, OP, G>
      <<<bk_cuda_grid(blocks), 256, 0, bk_stream(ctx)>>>(x, y, rows, cols);
  return bk__cuda_launched(fn, "rows_group_kernel");
}

template <typename T, int VEC, int OP>
static bk_status rows_reduce_launch(bk_context *ctx, const char *fn, const T *x, T *y,
                                    int64_t rows, int64_t cols) {
  using A = typename rw_op<T, OP>::A;
  cudaStream_t stream = bk_stream(ctx);
  const int64_t sm = bk_cu(ctx)->sm_count;
  const int64_t nvec = cols / VEC;
  int64_t nch, clen;
  bk_cuda_split_plan(sm, rows, cols, nvec, &nch, &clen);
  if (nch > 1) {
    const int64_t units = rows * nch;
    void *scratch = NULL;
    bk_status st = bk__cuda_scratch(ctx, fn, (size_t)units * sizeof(A), &scratch);
    if (st != BK_OK) return st;
    A *part = (A *)scratch;
    rows_reduce_split_kernel<T, VEC, OP>
        <<<bk_cuda_grid(units), 256, 0, stream>>>(x, part, rows, cols, nch, clen);
    st = bk__cuda_launched(fn, "rows_reduce_split_kernel");
    if (st == BK_OK) {
      if constexpr (OP == RW_FIRST) {
        first_max_split_write_kernel<T, VEC>
            <<<bk_cuda_grid(units), 256, 0, stream>>>(x, part, y, rows, cols, nch, clen);
        st = bk__cuda_launched(fn, "first_max_split_write_kernel");
      } else {
        rows_reduce_fold_kernel<T, OP><<<bk_cuda_grid((rows + 255) / 256), 256, 0, stream>>>(
            part, y, rows, nch);
        st = bk__cuda_launched(fn, "rows_reduce_fold_kernel");
      }
    }
    bk__cuda_scratch_free(ctx, scratch);
    return st;
  }
  if constexpr (VEC > 1) {
    /* At most four vectors per lane: the fewest lanes of 2, 4, .., 32 per row. */
    if (nvec <= 128) {
      if (nvec <= 8) return rows_group_launch<T, VEC, OP, 2>(ctx, fn, x, y, rows, cols);
      if (nvec <= 16) return rows_group_launch<T, VEC, OP, 4>(ctx, fn, x, y, rows, cols);
      if (nvec <= 32) return rows_group_launch<T, VEC, OP, 8>(ctx, fn, x, y, rows, cols);
      if (nvec <= 64) return rows_group_launch<T, VEC, OP, 16>(ctx, fn, x, y, rows, cols);
      return rows_group_launch<T, VEC, OP, 32>(ctx, fn, x, y, rows, cols);
    }
  }
  if (cols <= 1024) {
    rows_reduce_kernel<T, VEC, true, OP>
        <<<bk_cuda_grid((rows + 7) / 8), 256, 0, stream>>>(x, y, rows, cols);
    return bk__cuda_launched(fn, "rows_reduce_kernel");
  }
  /* A block per row, about eight vectors per thread, 64 to 1024 threads. */
  int threads = 64;
  while (threads < nvec / 8 && threads < 1024) threads <<= 1;
  rows_reduce_kernel<T, VEC, false, OP>
      <<<bk_cuda_grid(rows), threads, 0, stream>>>(x, y, rows, cols);
  return bk__cuda_launched(fn, "rows_reduce_kernel");
}

template <int OP>
static bk_status rows_reduce(bk_context *ctx, const char *fn, bk_dtype dt, const void *x, void *y,
                             int64_t rows, int64_t cols) {
  const bool al = bk_aligned16(x) && (OP != RW_FIRST || bk_aligned16(y));
  if (dt == BK_F32) {
    if (al && cols % 4 == 0)
      return rows_reduce_launch<float, 4, OP>(ctx, fn, (const float *)x, (float *)y, rows, cols);
    return rows_reduce_launch<float, 1, OP>(ctx, fn, (const float *)x, (float *)y, rows, cols);
  }
  if (al && cols % 2 == 0)
    return rows_reduce_launch<double, 2, OP>(ctx, fn, (const double *)x, (double *)y, rows, cols);
  return rows_reduce_launch<double, 1, OP>(ctx, fn, (const double *)x, (double *)y, rows, cols);
}

/* Shared memory budget of the small top-k kernel (no opt-in needed). */
static const size_t RW_TOPK_SMEM = 44 * 1024;

static size_t topk_small_smem(size_t elem, int R, int stride) {
  return (size_t)R * (size_t)stride * elem + (size_t)R * (elem + 2 * sizeof(int));
}

template <typename T, int K>
static bk_status topk_small_launch(bk_context *ctx, const char *fn, const T *x, T *y, int64_t rows,
                                   int cols, int R, int stride) {
  const size_t smem = topk_small_smem(sizeof(T), R, stride);
  topk_small_kernel<T, K><<<bk_cuda_grid((rows + R - 1) / R), R, smem, bk_stream(ctx)>>>(
      x, y, rows, cols, stride);
  return bk__cuda_launched(fn, "topk_small_kernel");
}

template <typename T, int K>
static bk_status topk_group_launch(bk_context *ctx, const char *fn, const T *x, T *y, int64_t rows,
                                   int cols, int g) {
  const int64_t units = (rows + 32 / g - 1) / (32 / g);
  const unsigned grid = bk_cuda_grid((units + 7) / 8);
  cudaStream_t stream = bk_stream(ctx);
  switch (g) {
    case 2: topk_group_kernel<T, K, 2><<<grid, 256, 0, stream>>>(x, y, rows, cols); break;
    case 4: topk_group_kernel<T, K, 4><<<grid, 256, 0, stream>>>(x, y, rows, cols); break;
    case 8: topk_group_kernel<T, K, 8><<<grid, 256, 0, stream>>>(x, y, rows, cols); break;
    default: topk_group_kernel<T, K, 16><<<grid, 256, 0, stream>>>(x, y, rows, cols); break;
  }
  return bk__cuda_launched(fn, "topk_group_kernel");
}

template <typename T>
static bk_status topk(bk_context *ctx, const char *fn, const T *x, T *y, int64_t rows, int64_t cols,
                      int64_t k) {
  /* Rows of exactly 2, 4, 8 or 16 lanes' worth of four 16-byte vectors. */
  const int64_t lane_elems = 4 * rw_traits<T>::vec;
  const int64_t g = cols / lane_elems;
  if (k <= 8 && bk_aligned16(x) && bk_aligned16(y) && cols % lane_elems == 0 &&
      (g == 2 || g == 4 || g == 8 || g == 16)) {
    const int c = (int)cols, gi = (int)g;
    switch (k) {
      case 1: return topk_group_launch<T, 1>(ctx, fn, x, y, rows, c, gi);
      case 2: return topk_group_launch<T, 2>(ctx, fn, x, y, rows, c, gi);
      case 3: return topk_group_launch<T, 3>(ctx, fn, x, y, rows, c, gi);
      case 4: return topk_group_launch<T, 4>(ctx, fn, x, y, rows, c, gi);
      case 5: return topk_group_launch<T, 5>(ctx, fn, x, y, rows, c, gi);
      case 6: return topk_group_launch<T, 6>(ctx, fn, x, y, rows, c, gi);
      case 7: return topk_group_launch<T, 7>(ctx, fn, x, y, rows, c, gi);
      default: return topk_group_launch<T, 8>(ctx, fn, x, y, rows, c, gi);
    }
  }
  if (k <= 8 && cols <= 4096) {
    const int stride = (int)(cols % 2 == 0 ? cols + 1 : cols);
    /* 64 rows a block (32 when the tile would not fit): short blocks keep
     * the tail of the grid short. */
    int R = 64;
    while (R > 32 && topk_small_smem(sizeof(T), R, stride) > RW_TOPK_SMEM) R >>= 1;
    if (topk_small_smem(sizeof(T), R, stride) <= RW_TOPK_SMEM) {
      const int c = (int)cols;
      switch (k) {
        case 1: return topk_small_launch<T, 1>(ctx, fn, x, y, rows, c, R, stride);
        case 2: return topk_small_launch<T, 2>(ctx, fn, x, y, rows, c, R, stride);
        case 3: return topk_small_launch<T, 3>(ctx, fn, x, y, rows, c, R, stride);
        case 4: return topk_small_launch<T, 4>(ctx, fn, x, y, rows, c, R, stride);
        case 5: return topk_small_launch<T, 5>(ctx, fn, x, y, rows, c, R, stride);
        case 6: return topk_small_launch<T, 6>(ctx, fn, x, y, rows, c, R, stride);
        case 7: return topk_small_launch<T, 7>(ctx, fn, x, y, rows, c, R, stride);
        default: return topk_small_launch<T, 8>(ctx, fn, x, y, rows, c, R, stride);
      }
    }
  }
  int threads = 32;
  while (threads < cols && threads < 256) threads <<= 1;
  const int64_t units = rows * ((cols + threads - 1) / threads);
  topk_count_kernel<T><<<bk_cuda_grid(units), threads, 0, bk_stream(ctx)>>>(x, y, rows, cols, k);
  return bk__cuda_launched(fn, "topk_count_kernel");
}

/* ---- entries ------------------------------------------------------------------------- */

extern "C" bk_status bk__cuda_rows_sum(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                       int64_t rows, int64_t cols) {
  return rows_reduce<RW_SUM>(ctx, "bk_rows_sum", dt, x, y, rows, cols);
}

extern "C" bk_status bk__cuda_rows_max(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                       int64_t rows, int64_t cols) {
  return rows_reduce<RW_MAX>(ctx, "bk_rows_max", dt, x, y, rows, cols);
}

extern "C" bk_status bk__cuda_rows_first_max_mask(bk_context *ctx, bk_dtype dt, const void *x,
                                                  void *y, int64_t rows, int64_t cols) {
  return rows_reduce<RW_FIRST>(ctx, "bk_rows_first_max_mask", dt, x, y, rows, cols);
}

extern "C" bk_status bk__cuda_rows_topk_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                             int64_t rows, int64_t cols, int64_t k) {
  static const char fn[] = "bk_rows_topk_mask";
  if (dt == BK_F32) return topk<float>(ctx, fn, (const float *)x, (float *)y, rows, cols, k);
  return topk<double>(ctx, fn, (const double *)x, (double *)y, rows, cols, k);
}

extern "C" bk_status bk__cuda_rows_masked_softmax(bk_context *ctx, bk_dtype dt,
                                                  const void *scores, const void *mask, void *y,
                                                  int64_t rows, int64_t cols) {
  return bk__cuda_softmax_masked(ctx, dt, scores, mask, y, rows, cols);
}
