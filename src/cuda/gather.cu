/*
 * gather.cu — CUDA gather and deterministic scatter-add of rows with host
 * indices.
 *
 * Gather: the indices go to the kernel as uint32, in its parameters when
 * they fit (a small gather is then one launch, and a captured graph keeps
 * the indices it was captured with), else uploaded once
 * (bk__cuda_upload_indices). The
 * kernel walks the output in vectors of the widest power of two elements
 * (up to 16 bytes) that divides cols and the pointers' alignment, finds each
 * vector's row with a multiply-shift divider and copies from the selected
 * row or writes exact zeros for an index >= rows. Each thread keeps
 * BK_GATHER_UNROLL vectors in flight.
 *
 * Scatter-add folds each destination row's updates in increasing r onto
 * the base row, ((mat[i] + v_first) + v_second) + ..., in the dtype, with no
 * atomics, from a schedule that groups the updates by destination row:
 *  - few updates (the schedule fits in a kernel's parameters): the host
 *    sorts them and the schedule travels in kernel parameters (a captured
 *    graph owns it): one kernel writes the whole output when the touched
 *    rows are more than a sixteenth of the rows (one launch), else the
 *    output is a device copy of mat and a kernel rewrites the touched rows;
 *  - else the indices are uploaded, an out-of-range one set to rows on the
 *    device, and grouped by a stable device radix sort of (index, r) over the
 *    bits that rows needs, so equal indices keep increasing r. When the
 *    updates are many for the rows (k > rows / 16), a pass over the sorted
 *    indices writes each row's start (rows + 1 offsets) and one kernel
 *    writes every output row as its base plus its updates (dense: the
 *    output written once); else the output is a device copy of mat and a
 *    second kernel rewrites the touched rows, one per run of equal sorted
 *    indices (sparse: the rewritten rows are at most a sixteenth of mat).
 */
#include "cuda_internal.h"

#include <cub/device/device_radix_sort.cuh>

#include <stdint.h>
#include <string.h>

#include <type_traits>

/* ---- vectors ---------------------------------------------------------------------- */

/* W elements of T moved as one access (W * sizeof(T) a power of two <= 16). */
template <typename T, int W>
struct alignas(W * sizeof(T)) vec {
  T v[W];
};

/* Up to BK_CUDA_INLINE_BYTES of indices passed by value in the kernel's
 * parameters. */
struct inline_idx {
  uint32_t v[BK_CUDA_INLINE_BYTES / sizeof(uint32_t)];
  __device__ __forceinline__ uint32_t operator[](uint64_t i) const { return v[i]; }
};

/* Groups each thread keeps in flight per loop trip. */
#define BK_GATHER_UNROLL 4

/* The scatter schedule in kernel parameters: u touched rows, m updates;
 * w holds seg_row (u, increasing) | seg_start (u + 1) | upd (m, the update
 * rows of each touched row in increasing r). */
struct inline_sched {
  uint32_t u, m;
  uint32_t w[BK_CUDA_INLINE_BYTES / sizeof(uint32_t) - 2];
};

/* Updates that always fit in an inline_sched: 2u + 1 + m <= 3k + 1 words. */
#define BK_SCATTER_INLINE_MAX ((int64_t)((sizeof(inline_sched) / sizeof(uint32_t) - 3) / 3))

/* ---- kernels ----------------------------------------------------------------------- */

/* y (k, cols) <- rows of mat (rows, cols) chosen by idx (k); an index >= rows
 * gives a row of +0. Group v covers elements [v*W, v*W + W) of y, all in one
 * row because cols is a multiple of W; each thread takes U groups a trip. */
template <typename T, int W, int U, typename I>
static __global__ void __launch_bounds__(256)
    gather_kernel(const T *__restrict__ mat, T *__restrict__ y, const I idx, int64_t rows,
                  int64_t cols, bk_divider dc, int64_t groups) {
  typedef vec<T, W> V;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v0 < groups;
       v0 += step * U) {
    V val[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t v = v0 + u * step;
      if (v < groups) {
        const uint64_t e = (uint64_t)v * W;
        const uint64_t r = bk_divider_q(dc, e);
        const int64_t c = (int64_t)(e - r * (uint64_t)cols);
        const uint32_t id = idx[r];
        if ((int64_t)id < rows) {
          val[u] = *reinterpret_cast<const V *>(mat + (int64_t)id * cols + c);
        } else {
#pragma unroll
          for (int i = 0; i < W; i++) val[u].v[i] = (T)0;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t v = v0 + u * step;
      if (v < groups) *reinterpret_cast<V *>(y + v * W) = val[u];
    }
  }
}

/* Bytes of update loads a fold keeps in flight: a row with many updates
 * (heavy repetition) is a chain of additions that only one thread may
 * perform, so its loads, not its additions, must be many at once. */
#define BK_FOLD_BYTES 128

/* Folds the updates upd[j0..j1) of one row onto acc, in list order (which is
 * increasing r), each a W-element slice at column c of values (k, cols). The
 * loads of F updates go out together; the additions stay in order. */
template <typename T, int W>
static __device__ __forceinline__ void fold_updates(vec<T, W> &acc, const T *__restrict__ values,
                                                    const uint32_t *upd, uint32_t j0, uint32_t j1,
                                                    int64_t cols, int64_t c) {
  typedef vec<T, W> V;
  constexpr int F = BK_FOLD_BYTES / (W * (int)sizeof(T));
  uint32_t j = j0;
  for (; j + F <= j1; j += F) {
    V add[F];
#pragma unroll
    for (int q = 0; q < F; q++)
      add[q] = *reinterpret_cast<const V *>(values + (int64_t)upd[j + q] * cols + c);
#pragma unroll
    for (int q = 0; q < F; q++)
#pragma unroll
      for (int i = 0; i < W; i++) acc.v[i] = acc.v[i] + add[q].v[i];
  }
  for (; j < j1; j++) {
    const V add = *reinterpret_cast<const V *>(values + (int64_t)upd[j] * cols + c);
#pragma unroll
    for (int i = 0; i < W; i++) acc.v[i] = acc.v[i] + add.v[i];
  }
}

/* The schedule entry of row d among the u increasing seg_row, or u. */
static __device__ __forceinline__ uint32_t find_row(const uint32_t *seg_row, uint32_t u,
                                                    uint64_t d) {
  uint32_t lo = 0, hi = u;
  while (lo < hi) {
    const uint32_t mid = (lo + hi) >> 1;
    if ((uint64_t)seg_row[mid] < d)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < u && (uint64_t)seg_row[lo] == d ? lo : u;
}

/* One launch for a schedule in parameters: every group of y (rows, cols) is
 * mat's group plus its row's updates, the row found by a binary search of
 * the touched rows (copied to shared memory first). */
template <typename T, int W, int U>
static __global__ void __launch_bounds__(256)
    scatter_inline_kernel(const T *__restrict__ mat, const T *__restrict__ values,
                          T *__restrict__ y, const inline_sched sc, int64_t cols, bk_divider dc,
                          int64_t groups) {
  typedef vec<T, W> V;
  __shared__ uint32_t s[sizeof sc.w / sizeof(uint32_t)];
  const uint32_t u = sc.u, n = 2 * sc.u + 1 + sc.m;
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) s[i] = sc.w[i];
  __syncthreads();
  const uint32_t *seg_row = s, *seg_start = s + u, *upd = s + 2 * u + 1;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v0 < groups;
       v0 += step * U) {
    V acc[U];
    uint32_t seg[U];
    int64_t col[U];
#pragma unroll
    for (int q = 0; q < U; q++) {
      const int64_t v = v0 + q * step;
      seg[q] = u;
      col[q] = 0;
      if (v < groups) {
        const uint64_t e = (uint64_t)v * W;
        const uint64_t d = bk_divider_q(dc, e);
        col[q] = (int64_t)(e - d * (uint64_t)cols);
        acc[q] = *reinterpret_cast<const V *>(mat + e);
        seg[q] = find_row(seg_row, u, d);
      }
    }
#pragma unroll
    for (int q = 0; q < U; q++) {
      const int64_t v = v0 + q * step;
      if (v < groups) {
        if (seg[q] < u)
          fold_updates<T, W>(acc[q], values, upd, seg_start[seg[q]], seg_start[seg[q] + 1], cols,
                             col[q]);
        *reinterpret_cast<V *>(y + v * W) = acc[q];
      }
    }
  }
}

/* Copy-then-rewrite form of the same schedule (few rows touched): y already
 * holds mat; group v of the (u, cols / W) grid rewrites slice c of touched
 * row seg_row[s] as mat's slice plus its updates. */
template <typename T, int W>
static __global__ void __launch_bounds__(256)
    scatter_rows_inline_kernel(const T *__restrict__ mat, const T *__restrict__ values,
                               T *__restrict__ y, const inline_sched sc, int64_t cols,
                               bk_divider dg, int64_t groups) {
  typedef vec<T, W> V;
  const uint32_t u = sc.u;
  const uint32_t *seg_row = sc.w, *seg_start = sc.w + u, *upd = sc.w + 2 * u + 1;
  const uint64_t per_row = (uint64_t)(cols / W);
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < groups; v += step) {
    const uint64_t e = bk_divider_q(dg, (uint64_t)v);
    const int64_t c = (int64_t)((uint64_t)v - e * per_row) * W;
    const int64_t at = (int64_t)seg_row[e] * cols + c;
    V acc = *reinterpret_cast<const V *>(mat + at);
    fold_updates<T, W>(acc, values, upd, seg_start[e], seg_start[e + 1], cols, c);
    *reinterpret_cast<V *>(y + at) = acc;
  }
}

/* The sort's input: key[i] = min(idx[i], limit) (every out-of-range index
 * one value, so the sort needs only the bits of limit) and r[i] = i, the
 * update row carried along. */
static __global__ void __launch_bounds__(256)
    sort_input_kernel(uint32_t *__restrict__ key, uint32_t *__restrict__ r, int64_t n,
                      uint32_t limit) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    const uint32_t v = key[i];
    key[i] = v < limit ? v : limit;
    r[i] = (uint32_t)i;
  }
}

/* off[d] = how many sorted indices are < d, for d in [0, rows]: entry i
 * writes the d in (key[i-1], key[i]] (key[-1] = -1, key[k] = rows), so every
 * d is written once; a key >= rows (an out-of-range index) counts as rows. */
static __global__ void __launch_bounds__(256)
    offsets_kernel(const uint32_t *__restrict__ key, uint32_t *__restrict__ off, int64_t k,
                   int64_t rows) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i <= k; i += step) {
    const int64_t prev = i == 0 ? -1 : ((int64_t)key[i - 1] < rows ? (int64_t)key[i - 1] : rows);
    const int64_t cur = i == k ? rows : ((int64_t)key[i] < rows ? (int64_t)key[i] : rows);
    for (int64_t d = prev + 1; d <= cur; d++) off[d] = (uint32_t)i;
  }
}

/* Dense path: every group of y (rows, cols) is mat's group plus the updates
 * upd[off[d] .. off[d+1]) of its row d. Each thread's U groups issue their
 * base and offset loads before any fold. */
template <typename T, int W, int U>
static __global__ void __launch_bounds__(256)
    scatter_dense_kernel(const T *__restrict__ mat, const T *__restrict__ values,
                         T *__restrict__ y, const uint32_t *__restrict__ off,
                         const uint32_t *__restrict__ upd, int64_t cols, bk_divider dc,
                         int64_t groups) {
  typedef vec<T, W> V;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v0 < groups;
       v0 += step * U) {
    V acc[U];
    uint32_t lo[U], hi[U];
    int64_t col[U];
#pragma unroll
    for (int q = 0; q < U; q++) {
      const int64_t v = v0 + q * step;
      lo[q] = hi[q] = 0;
      col[q] = 0;
      if (v < groups) {
        const uint64_t e = (uint64_t)v * W;
        const uint64_t d = bk_divider_q(dc, e);
        col[q] = (int64_t)(e - d * (uint64_t)cols);
        lo[q] = off[d];
        hi[q] = off[d + 1];
        acc[q] = *reinterpret_cast<const V *>(mat + e);
      }
    }
#pragma unroll
    for (int q = 0; q < U; q++) {
      const int64_t v = v0 + q * step;
      if (v < groups) {
        fold_updates<T, W>(acc[q], values, upd, lo[q], hi[q], cols, col[q]);
        *reinterpret_cast<V *>(y + v * W) = acc[q];
      }
    }
  }
}

/* Sparse path: y already holds mat. Group v of the (k, cols / W) grid over
 * the sorted updates is slice c of entry i; the first entry of each run of
 * equal in-range indices rewrites that row's slice as mat's plus the run's
 * updates. */
template <typename T, int W>
static __global__ void __launch_bounds__(256)
    scatter_sparse_kernel(const T *__restrict__ mat, const T *__restrict__ values,
                          T *__restrict__ y, const uint32_t *__restrict__ key,
                          const uint32_t *__restrict__ upd, int64_t k, int64_t rows,
                          int64_t cols, bk_divider dg, int64_t groups) {
  typedef vec<T, W> V;
  const uint64_t per_row = (uint64_t)(cols / W);
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < groups; v += step) {
    const uint64_t i = bk_divider_q(dg, (uint64_t)v);
    const uint32_t d = key[i];
    if ((int64_t)d >= rows || (i > 0 && key[i - 1] == d)) continue;
    /* The run's end: the first entry past i with another index. */
    uint64_t lo = i + 1, hi = (uint64_t)k;
    while (lo < hi) {
      const uint64_t mid = (lo + hi) >> 1;
      if (key[mid] == d)
        lo = mid + 1;
      else
        hi = mid;
    }
    const int64_t c = (int64_t)((uint64_t)v - i * per_row) * W;
    const int64_t at = (int64_t)d * cols + c;
    V acc = *reinterpret_cast<const V *>(mat + at);
    fold_updates<T, W>(acc, values, upd, (uint32_t)i, (uint32_t)lo, cols, c);
    *reinterpret_cast<V *>(y + at) = acc;
  }
}

/* ---- launchers ------------------------------------------------------------------------ */

static bool aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

/* The widest vector of W elements of T (W * es a power of two <= 16) that
 * divides cols and every pointer's alignment (NULL pointers ignored). */
template <typename T>
static int vec_width(int64_t cols, const void *a, const void *b, const void *c) {
  int w = (int)(16 / sizeof(T));
  while (w > 1) {
    const size_t bytes = (size_t)w * sizeof(T);
    if (cols % w == 0 && (!a || aligned(a, bytes)) && (!b || aligned(b, bytes)) &&
        (!c || aligned(c, bytes)))
      break;
    w /= 2;
  }
  return w;
}

/* Calls f with the vector width w (1, 2 or, for float32, 4) as a constant. */
template <typename T, typename F>
static bk_status with_width(int w, F f) {
  constexpr int wmax = (int)(16 / sizeof(T));
  if (w >= wmax) return f(std::integral_constant<int, wmax>());
  if (w == 2) return f(std::integral_constant<int, 2>());
  return f(std::integral_constant<int, 1>());
}

template <typename T, typename I>
static bk_status launch_gather(bk_context *ctx, const char *fn, const T *mat, T *y, int64_t rows,
                               int64_t cols, const I &idx, int64_t k) {
  /* mat is never read when rows == 0 (every index is out of range). */
  const int w = vec_width<T>(cols, y, rows == 0 ? NULL : mat, NULL);
  return with_width<T>(w, [&](auto wc) {
    constexpr int W = decltype(wc)::value;
    constexpr int U = BK_GATHER_UNROLL;
    const int64_t groups = k * cols / W;
    gather_kernel<T, W, U, I>
        <<<bk_cuda_blocks(ctx, (groups + U - 1) / U, 256), 256, 0, bk_stream(ctx)>>>(
            mat, y, idx, rows, cols, bk_divider_make((uint64_t)cols), groups);
    return bk__cuda_launched(fn, "gather_kernel");
  });
}

/* Orders n distinct packed (index << 32 | r) values increasingly (Shell's
 * sort with Ciura's gaps; n <= BK_SCATTER_INLINE_MAX). */
static void sort_packed(uint64_t *a, int64_t n) {
  static const int64_t gaps[] = {132, 57, 23, 10, 4, 1};
  for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
    const int64_t gap = gaps[g];
    for (int64_t i = gap; i < n; i++) {
      const uint64_t t = a[i];
      int64_t j = i;
      for (; j >= gap && a[j - gap] > t; j -= gap) a[j] = a[j - gap];
      a[j] = t;
    }
  }
}

/* k <= BK_SCATTER_INLINE_MAX: the schedule is sorted on the host and
 * travels in the parameters of one kernel. */
template <typename T>
static bk_status scatter_inline(bk_context *ctx, const char *fn, const T *mat, const T *values,
                                T *y, int64_t rows, int64_t cols, const uint64_t *idx,
                                int64_t k) {
  uint64_t p[BK_SCATTER_INLINE_MAX];
  int64_t m = 0;
  for (int64_t r = 0; r < k; r++)
    if (idx[r] < (uint64_t)rows) p[m++] = idx[r] << 32 | (uint64_t)r;
  sort_packed(p, m);
  inline_sched sc;
  uint32_t u = 0;
  for (int64_t i = 0; i < m; i++) u += i == 0 || (p[i] >> 32) != (p[i - 1] >> 32);
  uint32_t *seg_row = sc.w, *seg_start = sc.w + u, *upd = sc.w + 2 * u + 1;
  uint32_t s = 0;
  for (int64_t i = 0; i < m; i++) {
    if (i == 0 || (p[i] >> 32) != (p[i - 1] >> 32)) {
      seg_row[s] = (uint32_t)(p[i] >> 32);
      seg_start[s] = (uint32_t)i;
      s++;
    }
    upd[i] = (uint32_t)p[i];
  }
  seg_start[u] = (uint32_t)m;
  sc.u = u;
  sc.m = (uint32_t)m;
  return with_width<T>(vec_width<T>(cols, mat, values, y), [&](auto wc) {
    constexpr int W = decltype(wc)::value;
    constexpr int U = BK_GATHER_UNROLL;
    /* Few touched rows (as in the sorted path's choice): copy everything,
     * then rewrite those rows; the extra traffic is at most 2/16 of mat's. */
    if ((int64_t)u * 16 <= rows) {
      cudaStream_t st = bk_stream(ctx);
      BK_CUDA_TRY(cudaMemcpyAsync(y, mat, (size_t)(rows * cols) * sizeof(T),
                                  cudaMemcpyDeviceToDevice, st),
                  fn, "cudaMemcpyAsync");
      if (u == 0) return BK_OK;
      const int64_t groups = (int64_t)u * (cols / W);
      scatter_rows_inline_kernel<T, W><<<bk_cuda_blocks(ctx, groups, 256), 256, 0, st>>>(
          mat, values, y, sc, cols, bk_divider_make((uint64_t)(cols / W)), groups);
      return bk__cuda_launched(fn, "scatter_rows_inline_kernel");
    }
    const int64_t groups = rows * cols / W;
    scatter_inline_kernel<T, W, U>
        <<<bk_cuda_blocks(ctx, (groups + U - 1) / U, 256), 256, 0, bk_stream(ctx)>>>(
            mat, values, y, sc, cols, bk_divider_make((uint64_t)cols), groups);
    return bk__cuda_launched(fn, "scatter_inline_kernel");
  });
}

template <typename T, int W>
static bk_status launch_sorted_w(bk_context *ctx, const char *fn, const T *mat, const T *values,
                                 T *y, int64_t rows, int64_t cols, int64_t k,
                                 const uint32_t *key, const uint32_t *upd, uint32_t *off) {
  cudaStream_t s = bk_stream(ctx);
  constexpr int U = BK_GATHER_UNROLL;
  if (!off) {
    BK_CUDA_TRY(cudaMemcpyAsync(y, mat, (size_t)(rows * cols) * sizeof(T),
                                cudaMemcpyDeviceToDevice, s),
                fn, "cudaMemcpyAsync");
    const int64_t groups = k * (cols / W);
    scatter_sparse_kernel<T, W><<<bk_cuda_blocks(ctx, groups, 256), 256, 0, s>>>(
        mat, values, y, key, upd, k, rows, cols, bk_divider_make((uint64_t)(cols / W)), groups);
    return bk__cuda_launched(fn, "scatter_sparse_kernel");
  }
  offsets_kernel<<<bk_cuda_blocks(ctx, k + 1, 256), 256, 0, s>>>(key, off, k, rows);
  bk_status st = bk__cuda_launched(fn, "offsets_kernel");
  if (st != BK_OK) return st;
  const int64_t groups = rows * cols / W;
  const bk_divider dc = bk_divider_make((uint64_t)cols);
  /* With at least one update per row on average the folds keep the loads
   * in flight, and every group gets a thread of its own; with fewer, each
   * thread takes U groups, as a copy would. */
  if (k >= rows)
    scatter_dense_kernel<T, W, 1><<<bk_cuda_blocks(ctx, groups, 256), 256, 0, s>>>(
        mat, values, y, off, upd, cols, dc, groups);
  else
    scatter_dense_kernel<T, W, U><<<bk_cuda_blocks(ctx, (groups + U - 1) / U, 256), 256, 0, s>>>(
        mat, values, y, off, upd, cols, dc, groups);
  return bk__cuda_launched(fn, "scatter_dense_kernel");
}

static size_t round_up(size_t n) { return (n + 255) & ~(size_t)255; }

/* k > BK_SCATTER_INLINE_MAX: the schedule is grouped on the device. */
template <typename T>
static bk_status scatter_sorted(bk_context *ctx, const char *fn, const T *mat, const T *values,
                                T *y, int64_t rows, int64_t cols, const uint64_t *idx,
                                int64_t k) {
  if (k > (int64_t)UINT32_MAX - 1)
    return bk__fail(BK_ERR_UNSUPPORTED, fn,
                    "k = %lld updates exceed the CUDA backend's limit of %lld per call",
                    (long long)k, (long long)UINT32_MAX - 1);
  cudaStream_t s = bk_stream(ctx);
  const uint32_t limit = rows < (int64_t)UINT32_MAX ? (uint32_t)rows : UINT32_MAX;
  int bits = 1;
  while (bits < 32 && (limit >> bits) != 0) bits++;
  const bool dense = k > rows / 16;
  size_t temp = 0;
  BK_CUDA_TRY(cub::DeviceRadixSort::SortPairs(NULL, temp, (const uint32_t *)NULL,
                                              (uint32_t *)NULL, (const uint32_t *)NULL,
                                              (uint32_t *)NULL, k, 0, bits, s),
              fn, "cub::DeviceRadixSort::SortPairs");
  const size_t list = round_up((size_t)k * sizeof(uint32_t));
  const size_t bytes = 3 * list + round_up(temp) +
                       (dense ? (size_t)(rows + 1) * sizeof(uint32_t) : 0);
  uint32_t *key_in = NULL;
  bk_status st = bk__cuda_upload_indices(ctx, fn, idx, k, &key_in);
  if (st != BK_OK) return st;
  void *block = NULL;
  st = bk__cuda_scratch(ctx, fn, bytes, &block);
  if (st == BK_OK) {
    unsigned char *b = (unsigned char *)block;
    uint32_t *key = (uint32_t *)b, *r_in = (uint32_t *)(b + list), *upd = (uint32_t *)(b + 2 * list);
    void *tmp = b + 3 * list;
    uint32_t *off = dense ? (uint32_t *)(b + 3 * list + round_up(temp)) : NULL;
    sort_input_kernel<<<bk_cuda_blocks(ctx, k, 256), 256, 0, s>>>(key_in, r_in, k, limit);
    st = bk__cuda_launched(fn, "sort_input_kernel");
    if (st == BK_OK)
      st = bk__cuda_status(cub::DeviceRadixSort::SortPairs(tmp, temp, (const uint32_t *)key_in,
                                                           key, (const uint32_t *)r_in, upd, k,
                                                           0, bits, s),
                           fn, "cub::DeviceRadixSort::SortPairs");
    if (st == BK_OK) {
      st = with_width<T>(vec_width<T>(cols, mat, values, y), [&](auto wc) {
        return launch_sorted_w<T, decltype(wc)::value>(ctx, fn, mat, values, y, rows, cols, k,
                                                       key, upd, off);
      });
    }
    bk__cuda_scratch_free(ctx, block);
  }
  bk__cuda_scratch_free(ctx, key_in);
  return st;
}

template <typename T>
static bk_status launch_scatter(bk_context *ctx, const char *fn, const T *mat, const T *values,
                                T *y, int64_t rows, int64_t cols, const uint64_t *idx,
                                int64_t k) {
  if (k == 0)
    return bk__cuda_status(cudaMemcpyAsync(y, mat, (size_t)(rows * cols) * sizeof(T),
                                           cudaMemcpyDeviceToDevice, bk_stream(ctx)),
                           fn, "cudaMemcpyAsync");
  if (k <= BK_SCATTER_INLINE_MAX)
    return scatter_inline<T>(ctx, fn, mat, values, y, rows, cols, idx, k);
  return scatter_sorted<T>(ctx, fn, mat, values, y, rows, cols, idx, k);
}

/* ---- entries --------------------------------------------------------------------------- */

extern "C" bk_status bk__cuda_rows_gather(bk_context *ctx, bk_dtype dt, const void *mat, void *y,
                                          int64_t rows, int64_t cols, const uint64_t *idx,
                                          int64_t k) {
  static const char fn[] = "bk_rows_gather";
  if (dt != BK_F32 && dt != BK_F64)
    return bk__fail(BK_ERR_DTYPE, fn, "dtype %d is not supported by the CUDA backend", (int)dt);
  if ((uint64_t)k <= sizeof(inline_idx) / sizeof(uint32_t)) {
    inline_idx v;
    for (int64_t r = 0; r < k; r++) v.v[r] = (uint32_t)idx[r];
    if (dt == BK_F32)
      return launch_gather<float>(ctx, fn, (const float *)mat, (float *)y, rows, cols, v, k);
    return launch_gather<double>(ctx, fn, (const double *)mat, (double *)y, rows, cols, v, k);
  }
  uint32_t *dev = NULL;
  bk_status st = bk__cuda_upload_indices(ctx, fn, idx, k, &dev);
  if (st != BK_OK) return st;
  const uint32_t *didx = dev;
  if (dt == BK_F32)
    st = launch_gather<float>(ctx, fn, (const float *)mat, (float *)y, rows, cols, didx, k);
  else
    st = launch_gather<double>(ctx, fn, (const double *)mat, (double *)y, rows, cols, didx, k);
  bk__cuda_scratch_free(ctx, dev);
  return st;
}

extern "C" bk_status bk__cuda_rows_scatter_add(bk_context *ctx, bk_dtype dt, const void *mat,
                                               const void *values, void *y, int64_t rows,
                                               int64_t cols, const uint64_t *idx, int64_t k) {
  static const char fn[] = "bk_rows_scatter_add";
  if (dt == BK_F32)
    return launch_scatter<float>(ctx, fn, (const float *)mat, (const float *)values, (float *)y,
                                 rows, cols, idx, k);
  if (dt == BK_F64)
    return launch_scatter<double>(ctx, fn, (const double *)mat, (const double *)values,
                                  (double *)y, rows, cols, idx, k);
  return bk__fail(BK_ERR_DTYPE, fn, "dtype %d is not supported by the CUDA backend", (int)dt);
}
