/*
 * layout.cu — CUDA broadcasts, the broadcast adjoint and adjacent-axis
 * swaps.
 *
 * Every primitive here is memory-bound; the kernels aim at the device's copy
 * bandwidth. The broadcasts write the output as a flat array in 16-byte
 * vectors, decomposing one output index per vector with a precomputed
 * multiply-shift divider. The swap copies inner-contiguous chunks in 16-byte
 * vectors when the inner extent is large and goes through a shared-memory
 * tile when it is small.
 *
 * The adjoint is a sum in float64 of each input element's terms in
 * row-major order of the output, rounded once. Every geometry with a
 * reduced axis runs on the axis engine (axis.cu), which also serves
 * bk_sum_axis: as an (outer, n, inner) sum where the canonical axes are
 * one, else in one pass over the general geometry (all reduced axes as the
 * rows, the kept ones as the results). Where the innermost output axis is
 * reduced, its runs of consecutive terms are summed first (float64) and the
 * rest of the geometry is summed over those sums. An adjoint that reduces nothing is
 * a copy, or the gather of the inverse permutation on the broadcast
 * kernels. broadcast_col is a broadcast_to and reuses its paths.
 */
#include "cuda_internal.h"

#include <stdint.h>
#include <string.h>

#define BK_R BK_MAX_RANK

/* ---- vectors ---------------------------------------------------------------- */

/* 16 bytes of T: float4 or double2 without the vector types' member names. */
template <typename T>
struct alignas(16) v16 {
  T v[16 / sizeof(T)];
};

static __device__ __forceinline__ bool aligned16(const void *p) {
  return ((uintptr_t)p & 15) == 0;
}

/* ---- geometries ------------------------------------------------------------- */

/* A broadcast as the kernels see it: output axes innermost first, each with
 * its extent, the input stride it reads and a divider by its extent. */
struct bc_geom {
  int rank; /* >= 1 */
  int64_t dim[BK_R];
  int64_t stride[BK_R];
  bk_divider div[BK_R];
};

/* Input offset of output element e of a broadcast. R > 0: the rank is
 * exactly R, known at compile time (no per-axis guards); R == 0: any rank. */
template <int R>
static __device__ __forceinline__ int64_t bc_offset(const bc_geom &g, uint64_t e) {
  const int rank = R > 0 ? R : g.rank;
  int64_t off = 0;
#pragma unroll
  for (int j = 0; j < (R > 0 ? R : BK_R); j++) {
    if (R > 0 || j < rank) {
      if (j == rank - 1) {
        off += (int64_t)e * g.stride[j];
      } else {
        uint64_t q = bk_divider_q(g.div[j], e);
        off += (int64_t)(e - q * g.div[j].d) * g.stride[j];
        e = q;
      }
    }
  }
  return off;
}

/* ---- kernels: broadcasts ------------------------------------------------------ */

/* 16-byte groups of the output; the innermost extent is a multiple of the
 * group, so a group never leaves its innermost row and its elements read
 * x at off, off + s, ... with s the innermost input stride. */
template <typename T, int R>
static __global__ void __launch_bounds__(256)
    bcast_vec_kernel(const T *__restrict__ x, T *__restrict__ y, bc_geom g, int64_t groups) {
  constexpr int W = 16 / sizeof(T);
  const int64_t s = g.stride[0];
  const bool xal = aligned16(x);
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < groups; v += step) {
    const int64_t off = bc_offset<R>(g, (uint64_t)(v * W));
    v16<T> out;
    if (s == 0) {
      const T a = x[off];
#pragma unroll
      for (int k = 0; k < W; k++) out.v[k] = a;
    } else if (s == 1 && xal && (off % W) == 0) {
      out = *reinterpret_cast<const v16<T> *>(x + off);
    } else {
#pragma unroll
      for (int k = 0; k < W; k++) out.v[k] = x[off + k * s];
    }
    *reinterpret_cast<v16<T> *>(y + v * W) = out;
  }
}

/* One output element per thread, for any geometry and alignment. */
template <typename T, int R>
static __global__ void __launch_bounds__(256)
    bcast_scalar_kernel(const T *__restrict__ x, T *__restrict__ y, bc_geom g, int64_t n) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step)
    y[e] = x[bc_offset<R>(g, (uint64_t)e)];
}

/* ---- kernels: swap of adjacent axes ------------------------------------------- */

/* x (outer, a, b, inner) -> y (outer, b, a, inner) by inner-contiguous
 * chunks: output group e (W elements within one chunk) reads input row
 * (o, i, j) for output row (o, j, i). VEC: 16-byte groups (inner is a
 * multiple of the group and both pointers are aligned). */
template <typename T, bool VEC>
static __global__ void __launch_bounds__(256)
    swap_chunks_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t a, int64_t b,
                       int64_t inner, bk_divider d_inner, bk_divider d_a, bk_divider d_b, int64_t groups) {
  constexpr int W = VEC ? 16 / (int)sizeof(T) : 1;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < groups; v += step) {
    const uint64_t e = (uint64_t)v * W;
    const uint64_t row = bk_divider_q(d_inner, e);
    const int64_t within = (int64_t)(e - row * (uint64_t)inner);
    const uint64_t oj = bk_divider_q(d_a, row);
    const int64_t i = (int64_t)(row - oj * (uint64_t)a);
    const uint64_t o = bk_divider_q(d_b, oj);
    const int64_t j = (int64_t)(oj - o * (uint64_t)b);
    const int64_t src = (((int64_t)o * a + i) * b + j) * inner + within;
    if (VEC)
      *reinterpret_cast<v16<T> *>(y + e) = *reinterpret_cast<const v16<T> *>(x + src);
    else
      y[e] = x[src];
  }
}

/* Tiled transpose for a small inner extent IN: a TA x 32 tile of (i, j)
 * positions, IN elements each, is read along input rows (o, i, j0..j0+31)
 * and written along output rows (o, j, i0..i0+TA-1), contiguous runs of up
 * to 32*IN and TA*IN elements. The tile row pitch 33*IN words keeps the
 * column reads free of bank conflicts. Blocks are 32 x 8 threads; each
 * thread issues TA/8 rows of loads before its first store, so a taller tile
 * keeps more bytes in flight per block (TA 128 for single floats: 16 KB). */
template <typename T, int IN, int TA>
static __global__ void __launch_bounds__(256, TA > 32 ? 6 : 1)
    swap_tiled_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t a, int64_t b,
                      int64_t tiles_a, int64_t tiles_b, int64_t tiles) {
  static_assert(TA % 32 == 0, "the tile height is whole warps of output");
  constexpr int P = 33 * IN;
  constexpr int RU = TA / 8;  /* input rows per thread */
  constexpr int WM = TA / 32; /* output chunks of 32*IN elements per output row */
  __shared__ T tile[TA * P];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t w = blockIdx.x; w < tiles; w += gridDim.x) {
    const int64_t tb = w % tiles_b;
    const int64_t rest = w / tiles_b;
    const int64_t ta = rest % tiles_a;
    const int64_t o = rest / tiles_a;
    const int64_t i0 = ta * TA, j0 = tb * 32;
    const int icount = (int)(a - i0 < TA ? a - i0 : TA);
    const int jcount = (int)(b - j0 < 32 ? b - j0 : 32);
    const int rlen = jcount * IN, wlen = icount * IN;

    /* RU input rows per thread row, their loads issued before the stores. */
#pragma unroll
    for (int m = 0; m < IN; m++) {
      const int q = tx + 32 * m;
      T v[RU];
#pragma unroll
      for (int u = 0; u < RU; u++) {
        const int r = ty + 8 * u;
        if (r < icount && q < rlen) v[u] = x[((o * a + i0 + r) * b + j0) * IN + q];
      }
#pragma unroll
      for (int u = 0; u < RU; u++) {
        const int r = ty + 8 * u;
        if (r < icount && q < rlen) tile[r * P + q] = v[u];
      }
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < WM * IN; m++) {
      const int q = tx + 32 * m;
      const int i = q / IN, t = q - (q / IN) * IN;
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const int s = ty + 8 * u;
        if (s < jcount && q < wlen) y[((o * b + j0 + s) * a + i0) * IN + q] = tile[i * P + s * IN + t];
      }
    }
    __syncthreads();
  }
}

/* ---- launchers ------------------------------------------------------------------- */

static unsigned grid_for(bk_context *ctx, int64_t work, int threads) {
  return bk_cuda_blocks(ctx, work, threads);
}

/* Canonical axes, outermost first: extent-1 axes dropped and neighbours
 * merged where the inner one's stride times its extent equals the outer
 * one's stride (two broadcast axes, or two contiguous ones). */
static int canon_axes(const bk_bcast_geom *g, int64_t *dims, int64_t *stride) {
  int n = 0;
  for (int j = 0; j < g->rank; j++) {
    const int64_t d = g->out_dims[j], s = g->in_stride[j];
    if (d == 1) continue;
    if (n > 0 && stride[n - 1] == s * d) {
      dims[n - 1] *= d;
      stride[n - 1] = s;
    } else {
      dims[n] = d;
      stride[n] = s;
      n++;
    }
  }
  return n;
}

static bk_status copy_async(bk_context *ctx, const char *fn, void *dst, const void *src,
                            size_t bytes) {
  return bk__cuda_status(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, bk_stream(ctx)), fn,
      "cudaMemcpyAsync");
}

template <typename T, int R>
static bk_status launch_broadcast_r(bk_context *ctx, const char *fn, const T *x, T *y,
                                    const bc_geom &g, int64_t total) {
  cudaStream_t s = bk_stream(ctx);
  constexpr int W = 16 / sizeof(T);
  if (g.dim[0] % W == 0 && ((uintptr_t)y & 15) == 0) {
    const int64_t groups = total / W;
    bcast_vec_kernel<T, R><<<grid_for(ctx, groups, 256), 256, 0, s>>>(x, y, g, groups);
    return bk__cuda_launched(fn, "bcast_vec_kernel");
  }
  bcast_scalar_kernel<T, R><<<grid_for(ctx, total, 256), 256, 0, s>>>(x, y, g, total);
  return bk__cuda_launched(fn, "bcast_scalar_kernel");
}

template <typename T>
static bk_status launch_broadcast(bk_context *ctx, const char *fn, const T *x, T *y,
                                  const bk_bcast_geom *geom) {
  int64_t dims[BK_R], stride[BK_R];
  const int n = canon_axes(geom, dims, stride);
  const int64_t total = geom->out_length;
  if (n == 0) return copy_async(ctx, fn, y, x, sizeof(T));
  if (n == 1 && stride[0] == 1) return copy_async(ctx, fn, y, x, (size_t)total * sizeof(T));
  bc_geom g;
  memset(&g, 0, sizeof g);
  g.rank = n;
  for (int j = 0; j < n; j++) {
    g.dim[j] = dims[n - 1 - j];
    g.stride[j] = stride[n - 1 - j];
    g.div[j] = bk_divider_make((uint64_t)g.dim[j]);
  }
  switch (n) {
    case 1: return launch_broadcast_r<T, 1>(ctx, fn, x, y, g, total);
    case 2: return launch_broadcast_r<T, 2>(ctx, fn, x, y, g, total);
    case 3: return launch_broadcast_r<T, 3>(ctx, fn, x, y, g, total);
    case 4: return launch_broadcast_r<T, 4>(ctx, fn, x, y, g, total);
    default: return launch_broadcast_r<T, 0>(ctx, fn, x, y, g, total);
  }
}

template <typename T>
static bk_status launch_swap(bk_context *ctx, const char *fn, const T *x, T *y, int64_t outer,
                             int64_t a, int64_t b, int64_t inner);

/* The adjoint: a copy when nothing is reduced and the axes keep their
 * order; the inverse permutation when nothing is reduced (a transpose, or
 * a gather like the broadcasts'); else one sum on the axis engine (axis.cu), as an
 * (outer, n, inner) sum where it is one, else over the general geometry. */
template <typename T>
static bk_status fold_canon(bk_context *ctx, const char *fn, const T *dout, T *din, int n,
                            const int64_t *dims, const int64_t *stride, int64_t total,
                            int64_t in_length);

/* din = x rounded to T, n elements. */
template <typename T>
static __global__ void __launch_bounds__(256)
    round_kernel(const double *__restrict__ x, T *__restrict__ y, int64_t n) {
  const int64_t step = (int64_t)gridDim.x * 256;
  for (int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x; i < n; i += step) y[i] = (T)x[i];
}

/* The innermost canonical axis is reduced: the sums of its runs of
 * dims[n-1] consecutive terms first (float64, axis.cu), then the rest of the
 * geometry over those sums in float64, rounded once into din. Each result
 * thus adds its runs' sums in row-major order of the output: nested
 * segments of consecutive terms, as the header states. */
template <typename T>
static bk_status fold_runs(bk_context *ctx, const char *fn, const T *dout, T *din, int n,
                           const int64_t *dims, const int64_t *stride, int64_t total,
                           int64_t in_length) {
  const bk_dtype dt = sizeof(T) == 4 ? BK_F32 : BK_F64;
  const int64_t L = dims[n - 1], M = total / L;
  double *P = NULL, *Q = NULL;
  bk_status s = bk__cuda_scratch(ctx, fn, (size_t)M * sizeof(double), (void **)&P);
  if (s != BK_OK) return s;
  s = bk__cuda_axis_runs(ctx, fn, dt, dout, P, M, L);
  if (s == BK_OK) {
    if (sizeof(T) == 8) {
      Q = reinterpret_cast<double *>(din);
    } else {
      s = bk__cuda_scratch(ctx, fn, (size_t)in_length * sizeof(double), (void **)&Q);
    }
  }
  if (s == BK_OK) s = fold_canon<double>(ctx, fn, P, Q, n - 1, dims, stride, M, in_length);
  if (s == BK_OK && sizeof(T) == 4) {
    round_kernel<T><<<grid_for(ctx, in_length, 256), 256, 0, bk_stream(ctx)>>>(Q, din,
                                                                              in_length);
    s = bk__cuda_launched(fn, "round_kernel");
  }
  if (Q && sizeof(T) == 4) bk__cuda_scratch_free(ctx, Q);
  bk__cuda_scratch_free(ctx, P);
  return s;
}

template <typename T>
static bk_status launch_fold(bk_context *ctx, const char *fn, const T *dout, T *din,
                             const bk_bcast_geom *geom) {
  int64_t dims[BK_R], stride[BK_R];
  const int n = canon_axes(geom, dims, stride);
  return fold_canon<T>(ctx, fn, dout, din, n, dims, stride, geom->out_length, geom->in_length);
}

/* The adjoint over canonical axes (dims, stride; total terms, in_length
 * results). */
template <typename T>
static bk_status fold_canon(bk_context *ctx, const char *fn, const T *dout, T *din, int n,
                            const int64_t *dims, const int64_t *stride, int64_t total,
                            int64_t in_length) {
  if (n == 0) return copy_async(ctx, fn, din, dout, sizeof(T));
  if (n == 1 && stride[0] == 1)
    return copy_async(ctx, fn, din, dout, (size_t)total * sizeof(T));
  const bk_dtype dt = sizeof(T) == 4 ? BK_F32 : BK_F64;
  if (stride[n - 1] == 0 && n > 1 && bk__cuda_axis_runs_take(ctx, dt, dims[n - 1]))
    return fold_runs<T>(ctx, fn, dout, din, n, dims, stride, total, in_length);

  /* One reduced axis between contiguous kept ones, (outer, n, inner) with
   * the input (outer, inner). */
  if (n == 3 && stride[1] == 0 && stride[2] == 1 && stride[0] == dims[2])
    return bk__cuda_axis_sum(ctx, fn, dt, dout, din, dims[0], dims[1], dims[2]);
  if (n == 1 && stride[0] == 0) return bk__cuda_axis_sum(ctx, fn, dt, dout, din, 1, dims[0], 1);
  if (n == 2 && (stride[0] == 0) != (stride[1] == 0) && (stride[0] == 1 || stride[1] == 1))
    return stride[0] == 0 ? bk__cuda_axis_sum(ctx, fn, dt, dout, din, 1, dims[0], dims[1])
                          : bk__cuda_axis_sum(ctx, fn, dt, dout, din, dims[0], dims[1], 1);
  for (int j = 0; j < n; j++)
    if (stride[j] == 0) return bk__cuda_axis_sum_general(ctx, fn, dt, dout, din, n, dims, stride);

  /* Only permuted axes. Two of them are a transpose: the swap's tiles.
   * Otherwise din's axes are the output axes in order of decreasing input
   * stride, and din element e reads dout at the output strides of its
   * coordinates. */
  if (n == 2) return launch_swap<T>(ctx, fn, dout, din, 1, dims[0], dims[1], 1);
  int64_t ostride[BK_R], os = 1;
  int order[BK_R];
  for (int j = n - 1; j >= 0; j--) {
    ostride[j] = os;
    os *= dims[j];
    order[j] = j;
  }
  for (int j = 1; j < n; j++)
    for (int k = j; k > 0 && stride[order[k - 1]] < stride[order[k]]; k--) {
      const int t = order[k];
      order[k] = order[k - 1];
      order[k - 1] = t;
    }
  bc_geom g;
  memset(&g, 0, sizeof g);
  g.rank = n;
  for (int j = 0; j < n; j++) {
    const int a = order[n - 1 - j]; /* innermost din axis first */
    g.dim[j] = dims[a];
    g.stride[j] = ostride[a];
    g.div[j] = bk_divider_make((uint64_t)g.dim[j]);
  }
  switch (n) {
    case 2: return launch_broadcast_r<T, 2>(ctx, fn, dout, din, g, in_length);
    case 3: return launch_broadcast_r<T, 3>(ctx, fn, dout, din, g, in_length);
    case 4: return launch_broadcast_r<T, 4>(ctx, fn, dout, din, g, in_length);
    default: return launch_broadcast_r<T, 0>(ctx, fn, dout, din, g, in_length);
  }
}

/* Tile height: single elements take the tallest tile whose loads in flight
 * (16 KB a block) and shared memory (about 17 KB) allow several blocks per
 * multiprocessor; wider inner extents keep 32 rows (up to 29 KB of tile). */
template <typename T, int IN>
static bk_status launch_swap_tiled(bk_context *ctx, const char *fn, const T *x, T *y,
                                   int64_t outer, int64_t a, int64_t b) {
  constexpr int TA = IN > 1 ? 32 : (sizeof(T) == 4 ? 128 : 64);
  const int64_t tiles_a = (a + TA - 1) / TA, tiles_b = (b + 31) / 32;
  const int64_t tiles = outer * tiles_a * tiles_b;
  const unsigned grid = (unsigned)(tiles < INT32_MAX ? tiles : INT32_MAX);
  swap_tiled_kernel<T, IN, TA><<<grid, dim3(32, 8), 0, bk_stream(ctx)>>>(x, y, a, b, tiles_a,
                                                                        tiles_b, tiles);
  return bk__cuda_launched(fn, "swap_tiled_kernel");
}

template <typename T>
static bk_status launch_swap(bk_context *ctx, const char *fn, const T *x, T *y, int64_t outer,
                             int64_t a, int64_t b, int64_t inner) {
  const int64_t total = outer * a * b * inner;
  if (a == 1 || b == 1) return copy_async(ctx, fn, y, x, (size_t)total * sizeof(T));
  cudaStream_t s = bk_stream(ctx);
  constexpr int W = 16 / sizeof(T);
  /* Chunks of at least 32 bytes are whole sectors: copy them directly. */
  if (inner * (int64_t)sizeof(T) >= 32) {
    const bk_divider di = bk_divider_make((uint64_t)inner), da = bk_divider_make((uint64_t)a),
               db = bk_divider_make((uint64_t)b);
    if (inner % W == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)y & 15) == 0) {
      const int64_t groups = total / W;
      swap_chunks_kernel<T, true><<<grid_for(ctx, groups, 256), 256, 0, s>>>(
          x, y, a, b, inner, di, da, db, groups);
    } else {
      swap_chunks_kernel<T, false><<<grid_for(ctx, total, 256), 256, 0, s>>>(
          x, y, a, b, inner, di, da, db, total);
    }
    return bk__cuda_launched(fn, "swap_chunks_kernel");
  }
  /* inner is below 32 bytes here: 1..7 floats or 1..3 doubles. */
  switch ((int)inner) {
    case 1: return launch_swap_tiled<T, 1>(ctx, fn, x, y, outer, a, b);
    case 2: return launch_swap_tiled<T, 2>(ctx, fn, x, y, outer, a, b);
    case 3: return launch_swap_tiled<T, 3>(ctx, fn, x, y, outer, a, b);
    default: break;
  }
  if constexpr (sizeof(T) == 4) {
    switch ((int)inner) {
      case 4: return launch_swap_tiled<T, 4>(ctx, fn, x, y, outer, a, b);
      case 5: return launch_swap_tiled<T, 5>(ctx, fn, x, y, outer, a, b);
      case 6: return launch_swap_tiled<T, 6>(ctx, fn, x, y, outer, a, b);
      case 7: return launch_swap_tiled<T, 7>(ctx, fn, x, y, outer, a, b);
      default: break;
    }
  }
  return bk__fail(BK_ERR_INTERNAL, fn, "inner = %lld has no swap kernel", (long long)inner);
}

/* ---- entries ----------------------------------------------------------------------- */

static bk_status bad_dtype(const char *fn, bk_dtype dt) {
  return bk__fail(BK_ERR_DTYPE, fn, "dtype %d is not supported by the CUDA backend", (int)dt);
}

extern "C" bk_status bk__cuda_broadcast_col(bk_context *ctx, bk_dtype dt, const void *vec,
                                            void *y, int64_t rows, int64_t cols) {
  static const char fn[] = "bk_broadcast_col";
  bk_bcast_geom g;
  memset(&g, 0, sizeof g);
  g.rank = 2;
  g.out_dims[0] = rows;
  g.out_dims[1] = cols;
  g.in_stride[0] = 1;
  g.in_stride[1] = 0;
  g.out_length = rows * cols;
  g.in_length = rows;
  if (dt == BK_F32) return launch_broadcast<float>(ctx, fn, (const float *)vec, (float *)y, &g);
  if (dt == BK_F64) return launch_broadcast<double>(ctx, fn, (const double *)vec, (double *)y, &g);
  return bad_dtype(fn, dt);
}

extern "C" bk_status bk__cuda_broadcast_to(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                           const bk_bcast_geom *g) {
  static const char fn[] = "bk_broadcast_to";
  if (dt == BK_F32) return launch_broadcast<float>(ctx, fn, (const float *)x, (float *)y, g);
  if (dt == BK_F64) return launch_broadcast<double>(ctx, fn, (const double *)x, (double *)y, g);
  return bad_dtype(fn, dt);
}

extern "C" bk_status bk__cuda_broadcast_to_adjoint(bk_context *ctx, bk_dtype dt,
                                                   const void *dout, void *din,
                                                   const bk_bcast_geom *g) {
  static const char fn[] = "bk_broadcast_to_adjoint";
  if (dt == BK_F32) return launch_fold<float>(ctx, fn, (const float *)dout, (float *)din, g);
  if (dt == BK_F64) return launch_fold<double>(ctx, fn, (const double *)dout, (double *)din, g);
  return bad_dtype(fn, dt);
}

extern "C" bk_status bk__cuda_swap_adjacent(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                            int64_t outer, int64_t a, int64_t b, int64_t inner) {
  static const char fn[] = "bk_swap_adjacent";
  if (dt == BK_F32)
    return launch_swap<float>(ctx, fn, (const float *)x, (float *)y, outer, a, b, inner);
  if (dt == BK_F64)
    return launch_swap<double>(ctx, fn, (const double *)x, (double *)y, outer, a, b, inner);
  return bad_dtype(fn, dt);
}
