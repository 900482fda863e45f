/*
 * layout.cu — CUDA broadcasts, the broadcast adjoint and adjacent-axis
 * swaps. bk_sum_axis, and every adjoint that is a sum along the middle axis
 * of an (outer, n, inner) tensor, run on the axis engine (axis.cu).
 *
 * Every primitive here is memory-bound; the kernels aim at the device's copy
 * bandwidth. The broadcasts write the output as a flat array in 16-byte
 * vectors, decomposing one output index per vector with a precomputed
 * multiply-shift divider. The swap copies inner-contiguous chunks in 16-byte
 * vectors when the inner extent is large and goes through a shared-memory
 * tile when it is small.
 *
 * The other adjoints fold each input element's terms sequentially in
 * row-major order of the output, exactly as the contract writes the sum, in
 * float64 for both dtypes (one rounding at the end for float32). Because the
 * fold order is fixed, the only parallelism is across input elements; to
 * keep enough bytes in flight the two common shapes stage their data through
 * a multi-stage cp.async pipeline in shared memory, where all threads of a
 * block load and one warp folds:
 *   - column fold: the innermost output axis is kept contiguous and several
 *     reduced axes lie further out: a block owns a strip of 256 bytes of
 *     columns (64 float32, 32 float64), its loads are coalesced row
 *     segments, and thread c of the folding warps adds column c row after
 *     row. When there are too few strips to occupy the device, the rows are
 *     cut into ordered segments (one block each) whose float64 sums a second
 *     kernel, launched as a programmatic dependent so that it is waiting
 *     when the first completes, adds in segment order (the header documents
 *     it);
 *   - row fold: only the innermost output axis is reduced: a block owns 32
 *     contiguous rows, and lane r adds row r element after element out of a
 *     padded tile.
 * Every other geometry takes a generic kernel with one thread per input
 * element and the same sequential fold. broadcast_col is a broadcast_to and
 * reuses its paths.
 */
#include "cuda_internal.h"

#include <stdint.h>
#include <string.h>

#define BK_R BK_MAX_RANK

/* ---- vectors and asynchronous copies -------------------------------------- */

/* 16 bytes of T: float4 or double2 without the vector types' member names. */
template <typename T>
struct alignas(16) v16 {
  T v[16 / sizeof(T)];
};

static __device__ __forceinline__ bool aligned16(const void *p) {
  return ((uintptr_t)p & 15) == 0;
}

static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

template <int N>
static __device__ __forceinline__ void cp_async_ca(void *smem, const void *gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(N)
               : "memory");
}

static __device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
static __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
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

/* A fold (the adjoint, sum_axis): the output axes of the broadcast split into
 * kept axes (nonzero input stride: they index the result) and reduced axes,
 * each list innermost first, with their output strides (and input strides
 * for the kept ones). */
struct fold_geom {
  int nk, nr;
  int64_t kdim[BK_R], kout[BK_R], kin[BK_R];
  bk_divider kdiv[BK_R];
  int64_t rdim[BK_R], rout[BK_R];
  bk_divider rdiv[BK_R];
  int64_t nkept; /* product of kdim: the number of results */
  int64_t nred;  /* product of rdim: the terms of each result */
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

/* Output and input offsets of kept index k over the kept axes from FIRST
 * outward (FIRST 1 skips the innermost, which a column fold walks itself). */
template <int FIRST>
static __device__ __forceinline__ void kept_offsets(const fold_geom &g, uint64_t k, int64_t *out,
                                                    int64_t *in) {
  int64_t o = 0, i = 0;
#pragma unroll
  for (int j = FIRST; j < BK_R; j++) {
    if (j < g.nk) {
      uint64_t c;
      if (j == g.nk - 1) {
        c = k;
      } else {
        uint64_t q = bk_divider_q(g.kdiv[j], k);
        c = k - q * g.kdiv[j].d;
        k = q;
      }
      o += (int64_t)c * g.kout[j];
      i += (int64_t)c * g.kin[j];
    }
  }
  *out = o;
  *in = i;
}

/* Output offset of reduced index r over the reduced axes from FIRST outward. */
template <int FIRST>
static __device__ __forceinline__ int64_t red_offset(const fold_geom &g, uint64_t r) {
  int64_t o = 0;
#pragma unroll
  for (int j = FIRST; j < BK_R; j++) {
    if (j < g.nr) {
      if (j == g.nr - 1) {
        o += (int64_t)r * g.rout[j];
      } else {
        uint64_t q = bk_divider_q(g.rdiv[j], r);
        o += (int64_t)(r - q * g.rdiv[j].d) * g.rout[j];
        r = q;
      }
    }
  }
  return o;
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

/* ---- kernels: folds ------------------------------------------------------------- */

/* One thread per result: the terms in row-major output order, innermost
 * reduced axis fastest. Any geometry. */
template <typename T>
static __global__ void __launch_bounds__(256)
    fold_generic_kernel(const T *__restrict__ dout, T *__restrict__ din, fold_geom g) {
  const int64_t inner_n = g.nr > 0 ? g.rdim[0] : 1;
  const int64_t inner_s = g.nr > 0 ? g.rout[0] : 0;
  const int64_t outer_n = g.nred / inner_n;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < g.nkept; k += step) {
    int64_t base, ioff;
    kept_offsets<0>(g, (uint64_t)k, &base, &ioff);
    double acc = -0.0; /* -0 + t == t for every t: the fold starts at the first term. */
    for (int64_t ro = 0; ro < outer_n; ro++) {
      const T *p = dout + base + red_offset<1>(g, (uint64_t)ro);
#pragma unroll 4
      for (int64_t t = 0; t < inner_n; t++) acc += (double)p[t * inner_s];
    }
    din[ioff] = (T)acc;
  }
}

/* Column fold. The innermost axis (extent C) is kept with input stride 1;
 * every reduced axis is further out. Work item w is (segment, kept outer
 * index, 256-byte strip of SW columns); the segment's rows (reduced index
 * order == row-major output order) stream through S stages of RS rows. AL: dout is 16-byte aligned and
 * C is a multiple of a 16-byte chunk, so every row segment is aligned.
 * AFFINE: a single reduced axis, so row r starts at r times its stride. */
template <typename T, bool AL, bool AFFINE>
static __global__ void __launch_bounds__(256)
    fold_cols_kernel(const T *__restrict__ dout, T *__restrict__ din, double *__restrict__ part,
                     fold_geom g, int64_t strips, int64_t nseg, int64_t seg_rows, int64_t items) {
  constexpr int SW = 256 / (int)sizeof(T);         /* columns per strip: 256 bytes */
  constexpr int RS = 8192 / (SW * (int)sizeof(T)); /* rows per stage: 8 KB */
  constexpr int S = 5;                            /* stages */
  constexpr int EPC = 16 / (int)sizeof(T);         /* elements per 16-byte chunk */
  constexpr int CPR = SW / EPC;                   /* chunks per row */
  constexpr int CPT = RS * CPR / 256;             /* chunks per thread per stage */
  constexpr int EPT = RS * SW / 256;              /* elements per thread per stage */
  __shared__ __align__(16) T buf[S][RS][SW];

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  /* A segment-sum kernel queued behind this one may be scheduled now; it
   * waits for this grid's completion before reading (griddepcontrol.wait). */
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const int tid = threadIdx.x;
  /* The first SW / 32 warps fold: thread c adds column c of the strip. */
  const int lane = tid;
  const bool folder = tid < SW;
  const int64_t C = g.kdim[0];

  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    /* Item w = (segment, kept outer index, strip), segment slowest, so
     * that blocks running together read neighbouring strips of the same
     * rows. */
    const int64_t units = items / nseg;
    const int64_t seg = w / units;
    const int64_t ks = w - seg * units;
    const int64_t ko = ks / strips;
    const int64_t col0 = (ks - ko * strips) * SW;
    const int ncols = (int)(C - col0 < SW ? C - col0 : SW);
    int64_t base, ioff;
    kept_offsets<1>(g, (uint64_t)ko, &base, &ioff);
    /* This item folds rows [row0, row0 + nred) of the reduced index. */
    const int64_t row0 = seg * seg_rows;
    const int64_t nred = g.nred - row0 < seg_rows ? g.nred - row0 : seg_rows;
    const int64_t nst = (nred + RS - 1) / RS;
    const T *src = dout + base + col0;
    const int64_t rstride = g.rout[0];

    /* Queues the copies of stage st into buffer b. */
    auto load = [&](int64_t st, int b) {
      if (AL) {
#pragma unroll
        for (int i = 0; i < CPT; i++) {
          const int q = tid + i * 256;
          const int r = q / CPR, c = (q % CPR) * EPC;
          const int64_t row = st * RS + r;
          if (row < nred && c < ncols)
            cp_async16(&buf[b][r][c], src +
                                          (AFFINE ? (row0 + row) * rstride
                                                  : red_offset<0>(g, (uint64_t)(row0 + row))) +
                                          c);
        }
      } else {
#pragma unroll
        for (int i = 0; i < EPT; i++) {
          const int q = tid + i * 256;
          const int r = q / SW, c = q % SW;
          const int64_t row = st * RS + r;
          if (row < nred && c < ncols)
            cp_async_ca<sizeof(T)>(
                &buf[b][r][c],
                src + (AFFINE ? (row0 + row) * rstride : red_offset<0>(g, (uint64_t)(row0 + row))) +
                    c);
        }
      }
    };

#pragma unroll
    for (int s = 0; s < S - 1; s++) {
      if (s < nst) load(s, s);
      cp_async_commit();
    }
    double acc = -0.0;
    for (int64_t t = 0; t < nst; t++) {
      cp_async_wait<S - 2>();
      /* Stage t is visible to every thread, and every thread is done with
       * the buffer the next load overwrites (folded in iteration t - 1). */
      __syncthreads();
      if (t + S - 1 < nst) load(t + S - 1, (int)((t + S - 1) % S));
      cp_async_commit();
      if (folder && lane < ncols) {
        const int b = (int)(t % S);
        const int64_t rv = nred - t * RS;
        if (rv >= RS) {
#pragma unroll
          for (int r = 0; r < RS; r++) acc += (double)buf[b][r][lane];
        } else {
          for (int r = 0; r < (int)rv; r++) acc += (double)buf[b][r][lane];
        }
      }
    }
    if (folder && lane < ncols) {
      if (nseg == 1)
        din[ioff + col0 + lane] = (T)acc;
      else
        part[seg * g.nkept + ioff + col0 + lane] = acc;
    }
    /* The next item's prologue overwrites buffers the folder may still read. */
    __syncthreads();
  }
}

/* Second step of a segmented column fold: result i is the sum of its nseg
 * segment sums, added in segment order in float64 and rounded once. */
template <typename T>
static __global__ void __launch_bounds__(256)
    fold_segments_kernel(const double *__restrict__ part, T *__restrict__ din, int64_t n,
                         int64_t nseg) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  /* Launched as a programmatic dependent of the column fold: wait until
   * that grid has completed and its sums are visible (a no-op otherwise). */
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    double acc = -0.0;
    for (int64_t sg = 0; sg < nseg; sg++) acc += part[sg * n + i];
    din[i] = (T)acc;
  }
}

/* Row fold. Only the innermost axis (extent L, contiguous) is reduced, so
 * result k is the sequential sum of dout[k*L .. k*L + L). Work item w is 32
 * consecutive results; their rows stream through S stages of 256 bytes per
 * row into a tile padded by 16 bytes per row, where lane r reads row r in
 * 16-byte vectors without bank conflicts. AL: dout is 16-byte aligned and L
 * a multiple of a 16-byte chunk. */
template <typename T, bool AL>
static __global__ void __launch_bounds__(256)
    fold_rows_kernel(const T *__restrict__ dout, T *__restrict__ din, fold_geom g,
                     int64_t items) {
  constexpr int SW = 256 / (int)sizeof(T);   /* elements per row per stage */
  constexpr int EPC = 16 / (int)sizeof(T);   /* elements per 16-byte chunk */
  constexpr int PITCH = SW + EPC;           /* row pitch: 272 bytes */
  constexpr int S = 5;                      /* stages */
  constexpr int CPR = SW / EPC;             /* chunks per row: 16 */
  constexpr int CPT = 32 * CPR / 256;       /* chunks per thread per stage: 2 */
  constexpr int EPT = 32 * SW / 256;        /* elements per thread per stage */
  __shared__ __align__(16) T buf[S][32][PITCH];

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const bool folder = tid < 32;
  const int64_t L = g.rdim[0];
  const int64_t nst = (L + SW - 1) / SW;

  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const int64_t k0 = w * 32;
    const int nrows = (int)(g.nkept - k0 < 32 ? g.nkept - k0 : 32);
    const T *src = dout + k0 * L;

    auto load = [&](int64_t st, int b) {
      if (AL) {
#pragma unroll
        for (int i = 0; i < CPT; i++) {
          const int q = tid + i * 256;
          const int r = q / CPR, c = (q % CPR) * EPC;
          const int64_t col = st * SW + c;
          if (r < nrows && col < L) cp_async16(&buf[b][r][c], src + r * L + col);
        }
      } else {
#pragma unroll
        for (int i = 0; i < EPT; i++) {
          const int q = tid + i * 256;
          const int r = q / SW, c = q % SW;
          const int64_t col = st * SW + c;
          if (r < nrows && col < L) cp_async_ca<sizeof(T)>(&buf[b][r][c], src + r * L + col);
        }
      }
    };

#pragma unroll
    for (int s = 0; s < S - 1; s++) {
      if (s < nst) load(s, s);
      cp_async_commit();
    }
    double acc = -0.0;
    for (int64_t t = 0; t < nst; t++) {
      cp_async_wait<S - 2>();
      __syncthreads();
      if (t + S - 1 < nst) load(t + S - 1, (int)((t + S - 1) % S));
      cp_async_commit();
      if (folder && lane < nrows) {
        const int b = (int)(t % S);
        const int64_t cv = L - t * SW;
        if (cv >= SW) {
#pragma unroll
          for (int c = 0; c < SW; c += EPC) {
            const v16<T> v = *reinterpret_cast<const v16<T> *>(&buf[b][lane][c]);
#pragma unroll
            for (int e = 0; e < EPC; e++) acc += (double)v.v[e];
          }
        } else {
          for (int c = 0; c < (int)cv; c++) acc += (double)buf[b][lane][c];
        }
      }
    }
    if (folder && lane < nrows) {
      int64_t o, ioff;
      kept_offsets<0>(g, (uint64_t)(k0 + lane), &o, &ioff);
      din[ioff] = (T)acc;
    }
    __syncthreads();
  }
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

/* The segmented column fold (fewer strips than multiprocessors): aim for
 * this many work items per multiprocessor, with segments of at least
 * BK_FOLD_MIN_SEGMENT rows and at most BK_FOLD_MAX_SEGMENTS segments per
 * result. Three (8192 x 8192 -> 1 x 8192 in float32: 4 segments, 512
 * blocks) measured 87-90% of the copy rate on the H200, four (5 segments,
 * 640 blocks) 86-90%, two 87-88%. */
#define BK_FOLD_ITEMS_PER_SM 3
#define BK_FOLD_MIN_SEGMENT 1024
#define BK_FOLD_MAX_SEGMENTS 16

/*
 * Queues fold_segments_kernel behind the column fold as a programmatic
 * dependent: its blocks are scheduled while the fold's last blocks run and
 * start adding as soon as the fold's grid completes, instead of after a
 * kernel launch gap (a few microseconds: about 5% of a (8192, 8192) float32
 * fold). Where the device refuses the attribute, a plain launch.
 */
template <typename T>
static bk_status launch_fold_segments(bk_context *ctx, const char *fn, const double *part, T *din,
                                      int64_t n, int64_t nseg) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid_for(ctx, n, 256), 1, 1);
  cfg.blockDim = dim3(256, 1, 1);
  cfg.stream = bk_stream(ctx);
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (cudaLaunchKernelEx(&cfg, fold_segments_kernel<T>, part, din, n, nseg) != cudaSuccess) {
    (void)cudaGetLastError();
    fold_segments_kernel<T><<<cfg.gridDim, cfg.blockDim, 0, cfg.stream>>>(part, din, n, nseg);
  }
  return bk__cuda_launched(fn, "fold_segments_kernel");
}

/* Results below this count leave enough parallelism to a staged fold even
 * when its strip or tile is only partly used. */
#define BK_FOLD_FEW_RESULTS 32768

template <typename T>
static bk_status launch_fold(bk_context *ctx, const char *fn, const T *dout, T *din,
                             const bk_bcast_geom *geom) {
  int64_t dims[BK_R], stride[BK_R];
  const int n = canon_axes(geom, dims, stride);
  if (n == 0) return copy_async(ctx, fn, din, dout, sizeof(T));
  if (n == 1 && stride[0] == 1)
    return copy_async(ctx, fn, din, dout, (size_t)geom->out_length * sizeof(T));

  /* One reduced axis between contiguous kept ones, (outer, n, inner) with
   * the input (outer, inner): the sum along n of axis.cu. */
  if (n == 3 && stride[1] == 0 && stride[2] == 1 && stride[0] == dims[2])
    return bk__cuda_axis_sum(ctx, fn, sizeof(T) == 4 ? BK_F32 : BK_F64, dout, din, dims[0],
                             dims[1], dims[2]);
  if (n == 1 && stride[0] == 0)
    return bk__cuda_axis_sum(ctx, fn, sizeof(T) == 4 ? BK_F32 : BK_F64, dout, din, 1, dims[0], 1);
  if (n == 2 && (stride[0] == 0) != (stride[1] == 0) && (stride[0] == 1 || stride[1] == 1))
    return stride[0] == 0 ? bk__cuda_axis_sum(ctx, fn, sizeof(T) == 4 ? BK_F32 : BK_F64, dout,
                                              din, 1, dims[0], dims[1])
                          : bk__cuda_axis_sum(ctx, fn, sizeof(T) == 4 ? BK_F32 : BK_F64, dout,
                                              din, dims[0], dims[1], 1);

  fold_geom g;
  memset(&g, 0, sizeof g);
  g.nkept = 1;
  g.nred = 1;
  int64_t ostride = 1;
  for (int j = n - 1; j >= 0; j--) {
    if (stride[j] != 0) {
      g.kdim[g.nk] = dims[j];
      g.kout[g.nk] = ostride;
      g.kin[g.nk] = stride[j];
      g.kdiv[g.nk] = bk_divider_make((uint64_t)dims[j]);
      g.nkept *= dims[j];
      g.nk++;
    } else {
      g.rdim[g.nr] = dims[j];
      g.rout[g.nr] = ostride;
      g.rdiv[g.nr] = bk_divider_make((uint64_t)dims[j]);
      g.nred *= dims[j];
      g.nr++;
    }
    ostride *= dims[j];
  }

  cudaStream_t s = bk_stream(ctx);
  constexpr int EPC = 16 / sizeof(T);
  const bool al = ((uintptr_t)dout & 15) == 0;
  const int last_kept = stride[n - 1] != 0;

  /* Column fold: innermost axis kept and contiguous, all reduced axes
   * further out. */
  if (g.nr > 0 && last_kept && stride[n - 1] == 1 && g.nred >= 16 &&
      (dims[n - 1] >= 32 || g.nkept <= BK_FOLD_FEW_RESULTS)) {
    const int64_t C = dims[n - 1];
    const int64_t SW = 256 / (int64_t)sizeof(T);
    const int64_t strips = (C + SW - 1) / SW;
    const int64_t units = (g.nkept / C) * strips;
    /* Fewer strips than multiprocessors leave some idle and the rest with
     * too few bytes in flight (8192 x 8192 -> 1 x 8192 in float32 is 128
     * strips of 8192 rows): cut the rows into segments folded separately,
     * then add the segment sums in order (fold_segments_kernel). */
    int64_t nseg = 1, seg_rows = g.nred;
    const int64_t sm = bk_cu(ctx)->sm_count;
    const int64_t want = BK_FOLD_ITEMS_PER_SM * sm;
    if (units < sm) {
      nseg = (want + units - 1) / units;
      const int64_t most = g.nred / BK_FOLD_MIN_SEGMENT;
      if (nseg > most) nseg = most;
      if (nseg > BK_FOLD_MAX_SEGMENTS) nseg = BK_FOLD_MAX_SEGMENTS;
      if (nseg < 1) nseg = 1;
      seg_rows = (g.nred + nseg - 1) / nseg;
      nseg = (g.nred + seg_rows - 1) / seg_rows;
    }
    const int64_t items = units * nseg;
    const unsigned grid = (unsigned)(items < INT32_MAX ? items : INT32_MAX);
    const bool aligned = al && C % EPC == 0;
    void *scratch = NULL;
    if (nseg > 1) {
      bk_status st = bk__cuda_scratch(ctx, fn, (size_t)(nseg * g.nkept) * sizeof(double), &scratch);
      if (st != BK_OK) return st;
    }
    double *part = (double *)scratch;
    if (g.nr == 1) {
      if (aligned)
        fold_cols_kernel<T, true, true>
            <<<grid, 256, 0, s>>>(dout, din, part, g, strips, nseg, seg_rows, items);
      else
        fold_cols_kernel<T, false, true>
            <<<grid, 256, 0, s>>>(dout, din, part, g, strips, nseg, seg_rows, items);
    } else {
      if (aligned)
        fold_cols_kernel<T, true, false>
            <<<grid, 256, 0, s>>>(dout, din, part, g, strips, nseg, seg_rows, items);
      else
        fold_cols_kernel<T, false, false>
            <<<grid, 256, 0, s>>>(dout, din, part, g, strips, nseg, seg_rows, items);
    }
    bk_status st = bk__cuda_launched(fn, "fold_cols_kernel");
    if (st == BK_OK && nseg > 1) st = launch_fold_segments(ctx, fn, part, din, g.nkept, nseg);
    if (scratch) bk__cuda_scratch_free(ctx, scratch);
    return st;
  }
  /* Row fold: only the innermost axis reduced. */
  if (g.nr == 1 && !last_kept &&
      (g.nred >= 64 || (g.nkept <= BK_FOLD_FEW_RESULTS && g.nred >= 16))) {
    const int64_t items = (g.nkept + 31) / 32;
    const unsigned grid = (unsigned)(items < INT32_MAX ? items : INT32_MAX);
    if (al && g.nred % EPC == 0) {
      fold_rows_kernel<T, true><<<grid, 256, 0, s>>>(dout, din, g, items);
    } else {
      fold_rows_kernel<T, false><<<grid, 256, 0, s>>>(dout, din, g, items);
    }
    return bk__cuda_launched(fn, "fold_rows_kernel");
  }
  fold_generic_kernel<T><<<grid_for(ctx, g.nkept, 256), 256, 0, s>>>(dout, din, g);
  return bk__cuda_launched(fn, "fold_generic_kernel");
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
