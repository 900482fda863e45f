/*
 * gather.cu — CUDA gather and deterministic scatter-add of rows with host
 * indices.
 *
 * Gather: the indices go to the kernel as uint32, in its parameters when
 * they fit (a small gather is then one launch, and a captured graph keeps
 * the indices it was captured with), else uploaded once
 * (bk__cuda_upload_indices); the
 * kernel walks the output in 16-byte vectors (when cols and the pointers
 * allow), finds each vector's row with a multiply-shift divider and copies
 * from the selected row or writes exact zeros for an index >= rows.
 *
 * Scatter-add: the host orders the in-range updates by destination row,
 * keeping increasing r within a row (a counter per row when the rows are
 * not many more than the updates, written straight into the pinned
 * staging; else a stable radix sort), and uploads the schedule: for each
 * touched row its list of update rows. The device then
 * folds each touched row's updates in that order onto the base row,
 * ((mat[i] + v_first) + v_second) + ..., in the dtype, with no atomics.
 * When many rows are touched, one kernel writes every output row, looking
 * up each row's schedule entry in a device map (dense path: the output is
 * written once); when few are, the output is a device copy of mat and a
 * second kernel rewrites only the touched rows (sparse path: no map the
 * size of mat's rows).
 */
#include "cuda_internal.h"

#include <stdint.h>
#include <string.h>

/* ---- vectors ---------------------------------------------------------------------- */

/* W elements of T moved as one access: 16 bytes when W*sizeof(T) == 16. */
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

/* ---- kernels ----------------------------------------------------------------------- */

/* y (k, cols) <- rows of mat (rows, cols) chosen by idx (k); an index >= rows
 * gives a row of +0. Group v covers elements [v*W, v*W + W) of y, all in one
 * row because cols is a multiple of W. */
template <typename T, int W, typename I>
static __global__ void __launch_bounds__(256)
    gather_kernel(const T *__restrict__ mat, T *__restrict__ y, const I idx,
                  int64_t rows, int64_t cols, bk_divider dc, int64_t groups) {
  typedef vec<T, W> V;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v0 < groups;
       v0 += step * BK_GATHER_UNROLL) {
    V val[BK_GATHER_UNROLL];
#pragma unroll
    for (int u = 0; u < BK_GATHER_UNROLL; u++) {
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
    for (int u = 0; u < BK_GATHER_UNROLL; u++) {
      const int64_t v = v0 + u * step;
      if (v < groups) *reinterpret_cast<V *>(y + v * W) = val[u];
    }
  }
}

/* Folds the updates upd[j0..j1) of one row onto acc, in list order (which is
 * increasing r), each a W-element slice at column c of values (k, cols). */
template <typename T, int W>
static __device__ __forceinline__ void fold_updates(vec<T, W> &acc, const T *__restrict__ values,
                                                    const int64_t *__restrict__ upd, int64_t j0,
                                                    int64_t j1, int64_t cols, int64_t c) {
  typedef vec<T, W> V;
  for (int64_t j = j0; j < j1; j++) {
    const V add = *reinterpret_cast<const V *>(values + upd[j] * cols + c);
#pragma unroll
    for (int i = 0; i < W; i++) acc.v[i] = acc.v[i] + add.v[i];
  }
}

/* Marks the touched rows in the device map: row_seg[seg_row[s]] = s (the
 * map was filled with -1 before). */
template <typename S>
static __global__ void __launch_bounds__(256)
    mark_rows_kernel(S *__restrict__ row_seg, const int64_t *__restrict__ seg_row, int64_t u) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; s < u; s += step)
    row_seg[seg_row[s]] = (S)s;
}

/* Dense path: every group of y (rows, cols) is mat's group, plus the row's
 * updates when the map names a schedule entry for it. A touched group waits
 * on a chain of dependent loads (map, schedule, update rows), so each thread
 * keeps BK_GATHER_UNROLL independent groups in flight. */
template <typename T, typename S, int W>
static __global__ void __launch_bounds__(256)
    scatter_dense_kernel(const T *__restrict__ mat, const T *__restrict__ values,
                         T *__restrict__ y, const S *__restrict__ row_seg,
                         const int64_t *__restrict__ seg_start, const int64_t *__restrict__ upd,
                         int64_t cols, bk_divider dc, int64_t groups) {
  typedef vec<T, W> V;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v0 < groups;
       v0 += step * BK_GATHER_UNROLL) {
    V acc[BK_GATHER_UNROLL];
    S seg[BK_GATHER_UNROLL];
    int64_t col[BK_GATHER_UNROLL];
    /* Every group's base loads go out before any fold. */
#pragma unroll
    for (int u = 0; u < BK_GATHER_UNROLL; u++) {
      const int64_t v = v0 + u * step;
      seg[u] = -1;
      col[u] = 0;
      if (v < groups) {
        const uint64_t e = (uint64_t)v * W;
        const uint64_t d = bk_divider_q(dc, e);
        col[u] = (int64_t)(e - d * (uint64_t)cols);
        seg[u] = row_seg[d];
        acc[u] = *reinterpret_cast<const V *>(mat + e);
      }
    }
#pragma unroll
    for (int u = 0; u < BK_GATHER_UNROLL; u++) {
      const int64_t v = v0 + u * step;
      if (v < groups) {
        if (seg[u] >= 0)
          fold_updates<T, W>(acc[u], values, upd, seg_start[seg[u]], seg_start[seg[u] + 1], cols,
                             col[u]);
        *reinterpret_cast<V *>(y + v * W) = acc[u];
      }
    }
  }
}

/* Sparse path: y already holds mat; group v of the touched rows' slices
 * (u, cols) rewrites row seg_row[s] as mat's row plus its updates. */
template <typename T, int W>
static __global__ void __launch_bounds__(256)
    scatter_sparse_kernel(const T *__restrict__ mat, const T *__restrict__ values,
                          T *__restrict__ y, const int64_t *__restrict__ seg_row,
                          const int64_t *__restrict__ seg_start, const int64_t *__restrict__ upd,
                          int64_t cols, bk_divider dc, int64_t groups) {
  typedef vec<T, W> V;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < groups; v += step) {
    const uint64_t e = (uint64_t)v * W;
    const uint64_t s = bk_divider_q(dc, e);
    const int64_t c = (int64_t)(e - s * (uint64_t)cols);
    const int64_t at = seg_row[s] * cols + c;
    V acc = *reinterpret_cast<const V *>(mat + at);
    fold_updates<T, W>(acc, values, upd, seg_start[s], seg_start[s + 1], cols, c);
    *reinterpret_cast<V *>(y + at) = acc;
  }
}

/* ---- launchers ------------------------------------------------------------------------ */

static bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

template <typename T, typename I>
static bk_status launch_gather(bk_context *ctx, const char *fn, const T *mat, T *y, int64_t rows,
                               int64_t cols, const I &idx, int64_t k) {
  constexpr int W = 16 / sizeof(T);
  const int64_t total = k * cols;
  const bk_divider dc = bk_divider_make((uint64_t)cols);
  cudaStream_t s = bk_stream(ctx);
  /* mat is never read when rows == 0 (every index is out of range). */
  if (cols % W == 0 && al16(y) && (rows == 0 || al16(mat))) {
    const int64_t groups = total / W;
    gather_kernel<T, W, I><<<bk_cuda_blocks(ctx, groups, 256), 256, 0, s>>>(mat, y, idx, rows,
                                                                           cols, dc, groups);
  } else {
    gather_kernel<T, 1, I><<<bk_cuda_blocks(ctx, total, 256), 256, 0, s>>>(mat, y, idx, rows,
                                                                          cols, dc, total);
  }
  return bk__cuda_launched(fn, "gather_kernel");
}

/* The scatter schedule in one host block, uploaded as one scratch block:
 * seg_start (u+1) offsets into upd, upd (m) update rows in fold order,
 * seg_row (u) the touched rows, increasing. */
typedef struct sched {
  int64_t u, m;
  int64_t *blob; /* seg_start | upd | seg_row */
} sched;

/* Stable LSD radix sort of (key, r) pairs by key, in passes of at most 16
 * bits over the bits the largest key uses; equal keys keep increasing r. */
static bk_status sort_pairs(const char *fn, uint32_t *key, int64_t *val, int64_t m) {
  uint32_t maxkey = 0;
  for (int64_t i = 0; i < m; i++)
    if (key[i] > maxkey) maxkey = key[i];
  int bits = 0;
  while (bits < 32 && (maxkey >> bits) != 0) bits++;
  if (bits == 0) return BK_OK;
  const int passes = (bits + 15) / 16;
  const int width = (bits + passes - 1) / passes;
  const int64_t buckets = (int64_t)1 << width;
  uint32_t *key2 = (uint32_t *)bk__host_alloc(fn, "memory for the scatter schedule", (size_t)m, sizeof *key2);
  int64_t *val2 = (int64_t *)bk__host_alloc(fn, "memory for the scatter schedule", (size_t)m, sizeof *val2);
  int64_t *count = (int64_t *)bk__host_alloc(fn, "memory for the scatter schedule", (size_t)buckets, sizeof *count);
  if (!key2 || !val2 || !count) {
    bk__host_free(key2);
    bk__host_free(val2);
    bk__host_free(count);
    return BK_ERR_OUT_OF_MEMORY;
  }
  const uint32_t mask = (uint32_t)(buckets - 1);
  for (int p = 0; p < passes; p++) {
    const int shift = p * width;
    memset(count, 0, (size_t)buckets * sizeof *count);
    for (int64_t i = 0; i < m; i++) count[(key[i] >> shift) & mask]++;
    int64_t run = 0;
    for (int64_t b = 0; b < buckets; b++) {
      const int64_t c = count[b];
      count[b] = run;
      run += c;
    }
    for (int64_t i = 0; i < m; i++) {
      const int64_t at = count[(key[i] >> shift) & mask]++;
      key2[at] = key[i];
      val2[at] = val[i];
    }
    memcpy(key, key2, (size_t)m * sizeof *key);
    memcpy(val, val2, (size_t)m * sizeof *val);
  }
  bk__host_free(key2);
  bk__host_free(val2);
  bk__host_free(count);
  return BK_OK;
}

/* Builds the schedule of the in-range updates; sc->m == 0 when there is none. */
static bk_status build_sched(const char *fn, const uint64_t *idx, int64_t k, int64_t rows,
                             sched *sc) {
  sc->u = sc->m = 0;
  sc->blob = NULL;
  int64_t m = 0;
  for (int64_t r = 0; r < k; r++)
    if (idx[r] < (uint64_t)rows) m++;
  if (m == 0) return BK_OK;
  uint32_t *key = (uint32_t *)bk__host_alloc(fn, "memory for the scatter schedule", (size_t)m, sizeof *key);
  int64_t *val = (int64_t *)bk__host_alloc(fn, "memory for the scatter schedule", (size_t)m, sizeof *val);
  if (!key || !val) {
    bk__host_free(key);
    bk__host_free(val);
    return BK_ERR_OUT_OF_MEMORY;
  }
  int64_t n = 0;
  for (int64_t r = 0; r < k; r++) {
    if (idx[r] < (uint64_t)rows) {
      key[n] = (uint32_t)idx[r];
      val[n] = r;
      n++;
    }
  }
  bk_status st = sort_pairs(fn, key, val, m);
  int64_t u = 0;
  if (st == BK_OK) {
    for (int64_t i = 0; i < m; i++)
      if (i == 0 || key[i] != key[i - 1]) u++;
    sc->blob = (int64_t *)bk__host_alloc(fn, "memory for the scatter schedule", (size_t)(2 * u + 1 + m), sizeof(int64_t));
    if (!sc->blob) st = BK_ERR_OUT_OF_MEMORY;
  }
  if (st == BK_OK) {
    int64_t *seg_start = sc->blob, *upd = sc->blob + u + 1, *seg_row = upd + m;
    int64_t s = 0;
    for (int64_t i = 0; i < m; i++) {
      if (i == 0 || key[i] != key[i - 1]) {
        seg_start[s] = i;
        seg_row[s] = key[i];
        s++;
      }
      upd[i] = val[i];
    }
    seg_start[u] = m;
    sc->u = u;
    sc->m = m;
  }
  bk__host_free(key);
  bk__host_free(val);
  return st;
}

/* Whether the schedule is built with one counter per row (two passes over
 * the indices and two over the rows, no sort) rather than by sorting: when
 * the rows are not many more than the updates. */
static bool sched_by_count(int64_t rows, int64_t m) {
  return m <= INT32_MAX && rows <= 4 * m + 65536;
}

/*
 * Builds the schedule of the m in-range updates with a counter per row and
 * writes it straight into the pinned staging, then queues its upload (*dev,
 * *u the touched rows). Each row's updates land in increasing r because
 * the second pass over the indices runs in that order: the same schedule
 * as build_sched's stable sort.
 */
static bk_status upload_sched_count(bk_context *ctx, const char *fn, const uint64_t *idx,
                                    int64_t k, int64_t rows, int64_t m, int64_t *u, void **dev) {
  int32_t *at = (int32_t *)bk__host_zalloc(fn, "memory for the scatter schedule", (size_t)rows, sizeof *at);
  if (!at) return BK_ERR_OUT_OF_MEMORY;
  for (int64_t r = 0; r < k; r++)
    if (idx[r] < (uint64_t)rows) at[idx[r]]++;
  int64_t nu = 0;
  for (int64_t row = 0; row < rows; row++) nu += at[row] != 0;
  const size_t bytes = (size_t)(2 * nu + 1 + m) * sizeof(int64_t);
  void *host = NULL;
  int slot = 0;
  /* One slack entry past seg_row for the branch-free pass below. */
  bk_status st = bk__cuda_upload_begin(ctx, fn, bytes + sizeof(int64_t), &host, &slot);
  if (st != BK_OK) {
    bk__host_free(at);
    return st;
  }
  int64_t *seg_start = (int64_t *)host, *upd = seg_start + nu + 1, *seg_row = upd + m;
  /* Without a branch (about two in five rows are touched when the updates
   * are half as many as the rows, and the mispredictions cost more than the
   * pass): every row writes its entry at sg, which only a touched row
   * advances, so the next touched row or the final seg_start[nu] (and the
   * slack seg_row entry) overwrite an untouched one's. at[row] becomes
   * where the row's next update goes. */
  int64_t sg = 0, off = 0;
  for (int64_t row = 0; row < rows; row++) {
    const int32_t c = at[row];
    seg_start[sg] = off;
    seg_row[sg] = row;
    at[row] = (int32_t)off;
    off += c;
    sg += c != 0;
  }
  seg_start[nu] = m;
  for (int64_t r = 0; r < k; r++)
    if (idx[r] < (uint64_t)rows) upd[at[idx[r]]++] = r;
  bk__host_free(at);
  *u = nu;
  return bk__cuda_upload_finish(ctx, fn, slot, bytes, dev);
}

template <typename T, typename S, int W>
static bk_status launch_dense(bk_context *ctx, const char *fn, const T *mat, const T *values,
                              T *y, int64_t rows, int64_t cols, const int64_t *seg_start,
                              const int64_t *upd, const int64_t *seg_row, int64_t u) {
  cudaStream_t s = bk_stream(ctx);
  void *map = NULL;
  bk_status st = bk__cuda_scratch(ctx, fn, (size_t)rows * sizeof(S), &map);
  if (st != BK_OK) return st;
  /* All bytes 0xFF: -1 in two's complement, "no schedule entry". */
  st = bk__cuda_status(cudaMemsetAsync(map, 0xFF, (size_t)rows * sizeof(S), s), fn,
                       "cudaMemsetAsync");
  if (st == BK_OK) {
    mark_rows_kernel<S><<<bk_cuda_blocks(ctx, u, 256), 256, 0, s>>>((S *)map, seg_row, u);
    st = bk__cuda_launched(fn, "mark_rows_kernel");
  }
  if (st == BK_OK) {
    const int64_t groups = rows * cols / W;
    const int64_t work = (groups + BK_GATHER_UNROLL - 1) / BK_GATHER_UNROLL;
    scatter_dense_kernel<T, S, W><<<bk_cuda_blocks(ctx, work, 256), 256, 0, s>>>(
        mat, values, y, (const S *)map, seg_start, upd, cols, bk_divider_make((uint64_t)cols),
        groups);
    st = bk__cuda_launched(fn, "scatter_dense_kernel");
  }
  bk__cuda_scratch_free(ctx, map);
  return st;
}

template <typename T, int W>
static bk_status launch_scatter_w(bk_context *ctx, const char *fn, const T *mat, const T *values,
                                  T *y, int64_t rows, int64_t cols, const int64_t *dev,
                                  int64_t u, int64_t m) {
  const int64_t *seg_start = dev, *upd = dev + u + 1, *seg_row = upd + m;
  /* Few touched rows: copy everything, then rewrite those rows; the extra
   * traffic is at most 2/16 of mat's. */
  if (u * 16 <= rows) {
    cudaStream_t s = bk_stream(ctx);
    BK_CUDA_TRY(cudaMemcpyAsync(y, mat, (size_t)(rows * cols) * sizeof(T),
                                cudaMemcpyDeviceToDevice, s),
                fn, "cudaMemcpyAsync");
    const int64_t groups = u * cols / W;
    scatter_sparse_kernel<T, W><<<bk_cuda_blocks(ctx, groups, 256), 256, 0, s>>>(
        mat, values, y, seg_row, seg_start, upd, cols, bk_divider_make((uint64_t)cols), groups);
    return bk__cuda_launched(fn, "scatter_sparse_kernel");
  }
  if (u <= INT32_MAX)
    return launch_dense<T, int32_t, W>(ctx, fn, mat, values, y, rows, cols, seg_start, upd,
                                       seg_row, u);
  return launch_dense<T, int64_t, W>(ctx, fn, mat, values, y, rows, cols, seg_start, upd, seg_row,
                                     u);
}

template <typename T>
static bk_status launch_scatter(bk_context *ctx, const char *fn, const T *mat, const T *values,
                                T *y, int64_t rows, int64_t cols, const uint64_t *idx,
                                int64_t k) {
  int64_t m = 0;
  for (int64_t r = 0; r < k; r++)
    if (idx[r] < (uint64_t)rows) m++;
  if (m == 0)
    return bk__cuda_status(cudaMemcpyAsync(y, mat, (size_t)(rows * cols) * sizeof(T),
                                           cudaMemcpyDeviceToDevice, bk_stream(ctx)),
                           fn, "cudaMemcpyAsync");
  void *dev = NULL;
  int64_t u = 0;
  bk_status st;
  if (sched_by_count(rows, m)) {
    st = upload_sched_count(ctx, fn, idx, k, rows, m, &u, &dev);
  } else {
    sched sc;
    st = build_sched(fn, idx, k, rows, &sc);
    if (st != BK_OK) return st;
    st = bk__cuda_upload_scratch(ctx, fn, sc.blob,
                                 (size_t)(2 * sc.u + 1 + sc.m) * sizeof(int64_t), &dev);
    bk__host_free(sc.blob);
    u = sc.u;
  }
  if (st != BK_OK) return st;
  constexpr int W = 16 / sizeof(T);
  if (cols % W == 0 && al16(mat) && al16(values) && al16(y))
    st = launch_scatter_w<T, W>(ctx, fn, mat, values, y, rows, cols, (const int64_t *)dev, u, m);
  else
    st = launch_scatter_w<T, 1>(ctx, fn, mat, values, y, rows, cols, (const int64_t *)dev, u, m);
  bk__cuda_scratch_free(ctx, dev);
  return st;
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
