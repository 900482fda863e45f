/*
 * rows.cu — CUDA row reductions and masks over flat (rows, cols) buffers:
 * bk_rows_sum, bk_rows_max, bk_rows_first_max_mask, and the entry of
 * bk_rows_masked_softmax (its kernels are the softmax row engine in
 * softmax.cu). Top-k masks are in topk.cu.
 *
 * Reductions (sum, max, first max): rows of at most 128 16-byte vectors or
 * 256 single elements (rows or pointers not aligned) in lane groups (1..32
 * lanes per row, four vectors or eight elements per lane in flight over one
 * to eight rows), a warp per row for other rows up to 1024 columns, a block
 * per row otherwise, 16-byte loads when the pointers and the row length allow, four
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

/* Slots of a lane in the narrow-row kernel: vectors of its rows in flight,
 * 64 bytes of 16-byte vectors, 32 (float32) or 64 (float64) of single
 * elements, within the 32 registers that keep eight blocks resident. */
template <int VEC> static __host__ __device__ constexpr int rw_slots() { return VEC == 1 ? 8 : 4; }

/*
 * Narrow rows, nvec <= 32*S vectors (of VEC elements: 16 bytes, or one
 * element when the rows or pointers are not 16-byte aligned), S =
 * rw_slots<VEC>(): G = min(32, pow2ceil(ceil(nvec / S))) lanes per row and
 * C = pow2ceil(ceil(nvec / G)) <= S vectors per lane, so a warp holds P =
 * 32/G rows at a time and each lane keeps R = S/C rows in flight: all S
 * loads are issued before the first is used. Step k of warp unit w takes
 * rows w*P*R + k*P + lane/G, so one load instruction covers G adjacent
 * vectors of each of P adjacent rows. Lane g of a group owns the vectors g
 * + i*G of its row and folds its elements in index order with the same Op
 * as the wide kernels (the maxima with a 32-bit column, fewer registers);
 * the group then combines by xor shuffles with offsets below G (every lane
 * of the warp takes part; rows past the end carry the identity). SUM and
 * MAX: the group leaders write y[r]. FIRST: every lane writes its vectors
 * of the one-hot row; the leader's first element is x[r, 0] (its NaN test).
 */
template <typename T, int VEC, int OP, int G, int C>
static __global__ void __launch_bounds__(256, 8)
    rows_narrow_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int64_t cols) {
  using Op = rw_op<T, OP>;
  using A = typename Op::A;
  constexpr int R = rw_slots<VEC>() / C, P = 32 / G;
  const int lane = (int)(threadIdx.x & 31u), g = lane & (G - 1);
  const int nvec = (int)(cols / VEC);
  const int64_t per_unit = (int64_t)P * R;
  const int64_t units = (rows + per_unit - 1) / per_unit;
  const int64_t wpb = (int64_t)(blockDim.x >> 5);
  const int64_t wstep = (int64_t)gridDim.x * wpb;
  for (int64_t w = (int64_t)blockIdx.x * wpb + (int64_t)(threadIdx.x >> 5); w < units;
       w += wstep) {
    /* w is uniform across the warp, so every lane reaches every shuffle. */
    const int64_t r0 = w * per_unit + lane / G;
    T v[R][C][VEC];
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int64_t r = r0 + (int64_t)k * P;
#pragma unroll
      for (int i = 0; i < C; ++i) {
        const int q = i * G + g;
        if (r < rows && q < nvec) {
          bk_vload<VEC>(x + r * cols + (int64_t)q * VEC, v[k][i]);
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e) v[k][i][e] = (T)0;
        }
      }
    }
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int64_t r = r0 + (int64_t)k * P;
      const bool valid = r < rows;
      A a = Op::identity();
      if constexpr (OP == RW_SUM) {
#pragma unroll
        for (int i = 0; i < C; ++i)
          if (valid && i * G + g < nvec)
#pragma unroll
            for (int e = 0; e < VEC; ++e) Op::add(a, v[k][i][e], 0);
      } else {
        /* Op::add with a 32-bit column (bi < 0: the empty pair). */
        T bv = (T)-INFINITY;
        int bi = -1;
#pragma unroll
        for (int i = 0; i < C; ++i)
          if (valid && i * G + g < nvec)
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              const T xv = v[k][i][e];
              if (xv > bv || (bi < 0 && xv == xv)) {
                bv = xv;
                bi = (i * G + g) * VEC + e;
              }
            }
        a.v = bv;
        a.i = bi < 0 ? RW_NONE : (int64_t)bi;
      }
#pragma unroll
      for (int off = G / 2; off > 0; off >>= 1) a = Op::combine(a, Op::shfl_xor(a, off));
      if constexpr (OP == RW_SUM) {
        if (valid && g == 0) y[r] = (T)a;
      } else if constexpr (OP == RW_MAX) {
        if (valid && g == 0) y[r] = a.v;
      } else {
        const T x0 = __shfl_sync(RW_FULL_MASK, v[k][0][0], lane - g);
        /* A row with x[r, 0] not NaN has a non-empty pair, below cols. */
        const int idx = x0 != x0 ? 0 : (int)a.i;
        if (valid) {
          T *yr = y + r * cols;
#pragma unroll
          for (int i = 0; i < C; ++i) {
            const int q = i * G + g;
            if (q < nvec) {
              T o[VEC];
#pragma unroll
              for (int e = 0; e < VEC; ++e) o[e] = (q * VEC + e == idx) ? (T)1 : (T)0;
              bk_vstore_cs<VEC>(yr + (int64_t)q * VEC, o);
            }
          }
        }
      }
    }
  }
}

/* ---- launchers ----------------------------------------------------------------------- */

/* Narrow rows (nvec <= 32 * rw_slots): lane groups of G = the smallest
 * power of two with G * S >= nvec; C = S vectors per lane for G > 1 (then
 * nvec > G * S / 2), else pow2ceil(nvec) (see rows_narrow_kernel). Eight
 * warps a block, at most 32 blocks per SM (the warps then loop). */
template <typename T, int VEC, int OP, int G, int C>
static bk_status rows_narrow_queue(bk_context *ctx, const char *fn, const T *x, T *y,
                                   int64_t rows, int64_t cols) {
  constexpr int64_t per_warp = (int64_t)(32 / G) * (rw_slots<VEC>() / C);
  const int64_t units = (rows + per_warp - 1) / per_warp;
  const int64_t cap = 32 * (int64_t)bk_cu(ctx)->sm_count;
  const int64_t blocks = (units + 7) / 8 < cap ? (units + 7) / 8 : cap;
  rows_narrow_kernel<T, VEC, OP, G, C>
      <<<bk_cuda_grid(blocks), 256, 0, bk_stream(ctx)>>>(x, y, rows, cols);
  return bk__cuda_launched(fn, "rows_narrow_kernel");
}

template <typename T, int VEC, int OP>
static bk_status rows_narrow_launch(bk_context *ctx, const char *fn, const T *x, T *y,
                                    int64_t rows, int64_t cols) {
  constexpr int S = rw_slots<VEC>();
  const int64_t nvec = cols / VEC;
  if (nvec <= 1) return rows_narrow_queue<T, VEC, OP, 1, 1>(ctx, fn, x, y, rows, cols);
  if (nvec <= 2) return rows_narrow_queue<T, VEC, OP, 1, 2>(ctx, fn, x, y, rows, cols);
  if (nvec <= 4) return rows_narrow_queue<T, VEC, OP, 1, 4>(ctx, fn, x, y, rows, cols);
  if (nvec <= S) return rows_narrow_queue<T, VEC, OP, 1, S>(ctx, fn, x, y, rows, cols);
  if (nvec <= 2 * S) return rows_narrow_queue<T, VEC, OP, 2, S>(ctx, fn, x, y, rows, cols);
  if (nvec <= 4 * S) return rows_narrow_queue<T, VEC, OP, 4, S>(ctx, fn, x, y, rows, cols);
  if (nvec <= 8 * S) return rows_narrow_queue<T, VEC, OP, 8, S>(ctx, fn, x, y, rows, cols);
  if (nvec <= 16 * S) return rows_narrow_queue<T, VEC, OP, 16, S>(ctx, fn, x, y, rows, cols);
  return rows_narrow_queue<T, VEC, OP, 32, S>(ctx, fn, x, y, rows, cols);
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
  if (nvec <= 32 * rw_slots<VEC>())
    return rows_narrow_launch<T, VEC, OP>(ctx, fn, x, y, rows, cols);
  if (cols <= 1024) {
    rows_reduce_kernel<T, VEC, true, OP>
        <<<bk_cuda_grid((rows + 7) / 8), 256, 0, stream>>>(x, y, rows, cols);
    return bk__cuda_launched(fn, "rows_reduce_kernel");
  }
  /* A block per row, about 128 bytes per thread (eight 16-byte vectors or
   * 32 float32 / 16 float64 elements), 64 to 1024 threads: rows read
   * element by element then get as few threads, and as many blocks per
   * multiprocessor, as rows of vectors (eight elements per thread held
   * odd-width rows of 2000-32000 columns at 29-71% of copy on the H200,
   * one or two 1024-thread blocks per multiprocessor). */
  const int64_t per_thread = 128 / (VEC * (int64_t)sizeof(T));
  int threads = 64;
  while (threads < nvec / per_thread && threads < 1024) threads <<= 1;
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

extern "C" bk_status bk__cuda_rows_masked_softmax(bk_context *ctx, bk_dtype dt,
                                                  const void *scores, const void *mask, void *y,
                                                  int64_t rows, int64_t cols) {
  return bk__cuda_softmax_masked(ctx, dt, scores, mask, y, rows, cols);
}
