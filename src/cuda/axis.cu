/*
 * axis.cu — the CUDA engine for reductions along the middle axis of a
 * contiguous (outer, n, inner) tensor: bk_softmax with inner > 1, bk_sum_axis
 * and the broadcast adjoints that reduce to that geometry (layout.cu).
 *
 * A result column is one (o, c) pair, o < outer, c < inner; its n terms lie
 * inner elements apart. One planner (ax_plan_make, a pure function of the
 * geometry, the dtype and the device facts read once per context) picks one
 * of three strategies:
 *  - columns in registers: a thread owns VEC adjacent columns. Short
 *    fibres (n <= AX_NR) are held whole, every load issued before the first
 *    is used; a sum whose rows are 128 bytes or longer, with columns enough
 *    to keep AX_INFLIGHT bytes of loads in flight per multiprocessor,
 *    streams its fibres in batches of AX_NR loads. Either way a sum folds
 *    each column in one sequential chain.
 *  - tiles: a block copies a tile of (OB outer indices) x (CH rows) x (TI
 *    columns) into shared memory with cp.async (all of it in flight at
 *    once), reduces it there and writes the softmax from it, so x is read
 *    once. When inner is small or the slab n*inner fits (flat tiles, TI =
 *    inner), the tile is OB whole slabs of contiguous memory; otherwise it
 *    is a strip of TI columns (at least 64 bytes wide where n allows).
 *  - chunks: fibres too long for a tile, or too few tiles to occupy the
 *    device, are cut into chunks of CH rows, one tile each. A softmax whose
 *    tile fits in the shared memory of a thread-block cluster (up to
 *    AX_CLUSTER_MAX blocks) gives each chunk to one block of the cluster:
 *    the blocks exchange their column statistics through distributed shared
 *    memory and each writes its chunk, so x is still read once. Otherwise
 *    the tile kernel writes each chunk's statistics (a float64 sum, or a
 *    softmax's maximum and sum of exponentials against it); a second kernel
 *    folds them in chunk order per column. Softmax then reads x again in a
 *    third kernel, newest chunks first, so that what the first kernel read
 *    last is still in L2.
 * Sums whose terms lie in runs of consecutive elements (inner == 1, and
 * the first step of an adjoint whose innermost output axis is reduced) take
 * a fourth strategy, runs (ax_runs_kernel below): lanes read the runs
 * themselves in 16-byte vectors instead of columns of single elements.
 * Inside a tile, each column's rows are cut into TY ordered segments (TY =
 * 256 / columns, so every thread works); segment results are combined in
 * segment order. Sums therefore fold consecutive terms in float64 in index
 * order and add the segment (and chunk) sums in order: deterministic, and a
 * single sequential fold whenever a column has one segment and one chunk.
 *
 * Softmax follows the contract's IEEE rules: the maximum ignores NaN and
 * every exponential is taken against the fibre's final maximum, so a fibre
 * holding NaN, +inf or only -inf gives NaN everywhere. Exponentials are in
 * T, sums in float64.
 */
#include "cuda_internal.h"

#include "../core/hooks.h"

#include <cooperative_groups.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

namespace cg = cooperative_groups;

/* The ops: a sum, a softmax, and a softmax whose fibre's chunks are held
 * by the blocks of one thread-block cluster. */
enum { AX_SUM = 0, AX_SOFTMAX = 1, AX_SOFTMAX_CL = 2 };
static constexpr int AX_CLUSTER_MAX = 8; /* the portable cluster size */

/* Strategies a test can ask for (bk__cuda_axis_force), where the geometry
 * allows: the planner's choice; columns in registers (sums of any length,
 * softmax fibres of at most AX_NR); one tile per fibre where it fits, with
 * no chunks for parallelism or clusters; at least two chunks per fibre
 * longer than AX_NR with their statistics folded by a second kernel; a
 * softmax's chunks held by a cluster; and, for dev/cuda/axis_lab.c, the
 * planner with tiles for two blocks per multiprocessor (set aside there). */
enum { AX_FORCE_AUTO = 0, AX_FORCE_REG = 1, AX_FORCE_TILE = 2, AX_FORCE_CHUNKS = 3,
       AX_FORCE_CLUSTER = 4, AX_FORCE_HALF = 5 };

static constexpr int AX_THREADS = 256;
static constexpr int AX_NR = 16; /* longest fibre held in registers */
static constexpr int AX_NR_SHORT = 4; /* fibres this short take fewer registers */
/* Bytes of loads in flight per multiprocessor that the register kernel's
 * streamed sums need to beat the tiles (measured on the H200: 512 float32
 * columns of 16 loads; dev/cuda/axis.md). */
static constexpr int64_t AX_INFLIGHT = 32768;
static constexpr int AX_TILE_BLOCKS = 4; /* tile-kernel blocks sharing a multiprocessor */

/* ---- device helpers ---------------------------------------------------------- */

static __device__ __forceinline__ float ax_exp(float v) { return expf(v); }
static __device__ __forceinline__ double ax_exp(double v) { return exp(v); }
static __device__ __forceinline__ float ax_max(float a, float b) { return fmaxf(a, b); }
static __device__ __forceinline__ double ax_max(double a, double b) { return fmax(a, b); }

/* 1/s rounded to T: float32 takes the single-precision reciprocal of the
 * rounded sum (within an ulp or two of the float64 quotient), float64 the
 * float64 quotient. */
template <typename T>
static __device__ __forceinline__ T ax_recip(double s);
template <>
__device__ __forceinline__ float ax_recip<float>(double s) {
  return 1.0f / (float)s;
}
template <>
__device__ __forceinline__ double ax_recip<double>(double s) {
  return 1.0 / s;
}

/* VEC elements back into the shared tile as one access (the tile's column
 * groups are VEC-aligned). */
template <int VEC, typename T>
static __device__ __forceinline__ void ax_vstore(T *p, const T *v) {
  if constexpr (VEC == 1) {
    p[0] = v[0];
  } else if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    *reinterpret_cast<double2 *>(p) = make_double2(v[0], v[1]);
  }
}

template <int N>
static __device__ __forceinline__ void ax_cp_async(void *smem, const void *gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  if constexpr (N == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(N)
                 : "memory");
}

static __device__ __forceinline__ void ax_cp_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

/* ---- the plan ------------------------------------------------------------------ */

struct ax_plan {
  int64_t outer, n, inner, R; /* R = outer * inner results */
  int64_t obs, tis, nch;      /* tiles along outer, along inner; chunks along n */
  int64_t ch;                 /* rows per chunk (n when nch == 1) */
  int64_t units;              /* obs * tis * nch */
  int ob, ti;                 /* outer indices per tile; tile pitch (flat: inner) */
  int flat;                   /* the tile is whole rows of inner (contiguous) */
  int cl;                     /* the nch chunks of a tile are one cluster's blocks */
  int ty, seg;                /* segments per column, rows per segment */
  int lgti;                   /* strips: log2(ti) */
  size_t tile_bytes, smem;    /* the tile; all dynamic shared memory */
  bk_div32 tinner, tch;       /* division of tile indices by inner and by ch */
  bk_div32 dnch, dtis, dobs;  /* division of unit indices (units < 2^31: u32) */
  int u32;
};

/* A tile: outer indices [o0, o0 + obc), rows [r0, r0 + rc), columns
 * [c0, c0 + tw); its first element's offset in x. */
struct ax_tile {
  int64_t o0, r0, c0, base;
  int obc, rc, tw, k;
};

/* Where the (o, r, c) terms of a sum lie and where its (o, c) results go.
 * ax_std: x is a contiguous (outer, n, inner) tensor and the results are
 * (outer, inner) row-major. ax_gen: the broadcast adjoint of any geometry
 * (layout.cu), one pass over it: the rows r are every reduced output axis
 * in row-major order (row r at roff(r) in x), c over the innermost output
 * axis when it is kept (inner = 1 when it is reduced), contiguous in x and
 * cs apart in the result, and o over the other kept axes (kept(o): its
 * offsets in x and in the result). */
struct ax_std {
  static constexpr bool gen = false;
};

static constexpr int AX_GEN_R = 8; /* reduced axes never neighbour: rank / 2 */

/* Index k over n axes (innermost first, dividers div, the outermost takes
 * the rest): *a = sum of coordinate * sa[j], and with TWO *b over sb. */
template <bool TWO>
static __device__ __forceinline__ void ax_coords(const bk_divider *div, const int64_t *sa,
                                                 const int64_t *sb, int n, int64_t k,
                                                 int64_t *a, int64_t *b) {
  int64_t x = 0, z = 0;
  uint64_t rest = (uint64_t)k;
#pragma unroll 1
  for (int j = 0; j < n; j++) {
    uint64_t c = rest;
    if (j < n - 1) {
      const uint64_t q = bk_divider_q(div[j], rest);
      c = rest - q * div[j].d;
      rest = q;
    }
    x += (int64_t)c * sa[j];
    if (TWO) z += (int64_t)c * sb[j];
  }
  *a = x;
  if (TWO) *b = z;
}

struct ax_gen {
  static constexpr bool gen = true;
  int nk, nr;                     /* kept axes in o, reduced axes; innermost first */
  int64_t kout[BK_MAX_RANK], kin[BK_MAX_RANK];
  bk_divider kdiv[BK_MAX_RANK];
  int64_t rout[AX_GEN_R];
  bk_divider rdiv[AX_GEN_R];
  int64_t cs;

  __device__ __forceinline__ void kept(int64_t o, int64_t *out, int64_t *in) const {
    ax_coords<true>(kdiv, kout, kin, nk, o, out, in);
  }
  __device__ __forceinline__ int64_t roff(int64_t r) const {
    int64_t a;
    ax_coords<false>(rdiv, rout, nullptr, nr, r, &a, nullptr);
    return a;
  }
};

/* Result (o, c) (flat index o * inner + c) in y. */
static __device__ __forceinline__ int64_t ax_res(const ax_plan &p, const ax_std &, int64_t o,
                                                 int64_t c) {
  return o * p.inner + c;
}
static __device__ __forceinline__ int64_t ax_res(const ax_plan &, const ax_gen &g, int64_t o,
                                                 int64_t c) {
  int64_t out, in;
  g.kept(o, &out, &in);
  return in + c * g.cs;
}

static __device__ __forceinline__ ax_tile ax_tile_of(const ax_plan &p, int64_t u, bool reverse) {
  ax_tile t;
  int64_t k = 0, it, ot;
  if (p.u32) {
    /* Reciprocal divisions (a 64-bit division costs about a hundred
     * instructions, more than a small tile's copy). */
    int v = (int)u;
    if (p.cl) { /* chunks fastest: a cluster is nch consecutive blocks */
      const int q = bk_div32_q(p.dnch, v);
      k = v - q * (int)p.nch;
      v = q;
    }
    const int rest = bk_div32_q(p.dtis, v);
    it = v - rest * (int)p.tis;
    const int q = bk_div32_q(p.dobs, rest);
    ot = rest - q * (int)p.obs;
    if (!p.cl) k = q;
  } else {
    if (p.cl) {
      k = u % p.nch;
      u /= p.nch;
    }
    it = u % p.tis;
    const int64_t rest = u / p.tis;
    ot = rest % p.obs;
    if (!p.cl) k = rest / p.obs;
  }
  if (reverse) k = p.nch - 1 - k;
  t.k = (int)k;
  t.o0 = ot * p.ob;
  t.r0 = k * p.ch;
  t.c0 = it * p.ti;
  t.obc = (int)(p.outer - t.o0 < p.ob ? p.outer - t.o0 : p.ob);
  t.rc = (int)(p.n - t.r0 < p.ch ? p.n - t.r0 : p.ch);
  t.tw = p.flat ? (int)p.inner : (int)(p.inner - t.c0 < p.ti ? p.inner - t.c0 : p.ti);
  t.base = t.o0 * p.n * p.inner + t.r0 * p.inner + t.c0;
  return t;
}

/* Calls f(e, goff, q) for each VEC-element chunk of the tile taken by this
 * thread: e its index in the shared tile, goff its offset in x and y, q the
 * tile column of its first element (the chunk's columns are q .. q+VEC-1).
 * A strip's chunks are the same under both walks: STEP keeps the thread's
 * column and steps down the rows (the sums' copies: 1.05-1.08x at strips
 * of odd width), else the flat index is split per chunk (the softmax's
 * copies and writes: the stepped walk measured 1.07-1.12x slower there,
 * dev/cuda/axis.md). */
template <int VEC, bool STEP = false, typename F, typename RO>
static __device__ __forceinline__ void ax_tile_each(const ax_plan &p, const ax_tile &t, F f,
                                                    RO rowoff) {
  if (p.flat) {
    /* Contiguous: rows of inner elements, slab after slab. */
    const int count = t.obc * t.rc * (int)p.inner / VEC;
#pragma unroll 4
    for (int i = threadIdx.x; i < count; i += AX_THREADS) {
      const int e = i * VEC;
      const int row = bk_div32_q(p.tinner, e);
      const int c = e - row * (int)p.inner;
      const int ob = p.ob > 1 ? bk_div32_q(p.tch, row) : 0;
      f(e, t.base + e, ob * (int)p.inner + c);
    }
  } else {
    constexpr int LV = VEC == 4 ? 2 : VEC == 2 ? 1 : 0;
    const int lg = p.lgti - LV; /* log2 of VEC-element chunks per row */
    if constexpr (STEP) {
      /* A row has at most AX_THREADS chunks, so each thread keeps one
       * column and steps down the rows. */
      const int c = (threadIdx.x & ((1 << lg) - 1)) * VEC, rstep = AX_THREADS >> lg;
      if (c < t.tw) {
#pragma unroll 4
        for (int r = threadIdx.x >> lg; r < t.rc; r += rstep)
          f(r * p.ti + c, t.base + rowoff(r) + c, c);
      }
    } else {
      const int count = t.rc << lg;
#pragma unroll 4
      for (int i = threadIdx.x; i < count; i += AX_THREADS) {
        const int r = i >> lg, c = (i & ((1 << lg) - 1)) * VEC;
        if (c < t.tw) f(r * p.ti + c, t.base + rowoff(r) + c, c);
      }
    }
  }
}

/* The softmax's last step over the tile: y = tile * colinv, column by column. */
template <int VEC, typename T>
static __device__ __forceinline__ void ax_scale_out(const ax_plan &p, const ax_tile &t,
                                                    const T *tile, const T *colinv, T *y) {
  ax_tile_each<VEC>(
      p, t,
      [&](int e, int64_t goff, int c0) {
        T v[VEC];
#pragma unroll
        for (int j = 0; j < VEC; j++) v[j] = tile[e + j] * colinv[c0 + j];
        bk_vstore_cs<VEC>(y + goff, v);
      },
      [&](int r) -> int64_t { return (int64_t)r * p.inner; });
}

/* ---- kernels ---------------------------------------------------------------------- */

struct ax_short {
  int64_t R, n, inner;
  bk_divider dinner;
};

/* Columns in registers: thread g owns columns [g*VEC, g*VEC + VEC) of the
 * flat result index (VEC divides inner, so they share one outer index).
 * The fibre's rows are reached by a pointer stepped by inner, and work past
 * the fibre's end is skipped by a uniform branch, not predicated: the
 * kernel is bound by the instructions it issues per element. */
template <typename T, int OP, int VEC, int NR>
static __global__ void __launch_bounds__(AX_THREADS)
    ax_reg_kernel(const T *__restrict__ x, T *__restrict__ y, ax_short p) {
  const int64_t groups = p.R / VEC;
  const int64_t st = p.inner;
  const int64_t step = (int64_t)gridDim.x * AX_THREADS;
  for (int64_t g = (int64_t)blockIdx.x * AX_THREADS + threadIdx.x; g < groups; g += step) {
    const int64_t q = g * VEC;
    const int64_t o = (int64_t)bk_divider_q(p.dinner, (uint64_t)q);
    const T *px = x + (o * p.n * p.inner + (q - o * p.inner));
    T v[NR][VEC];
    if constexpr (OP == AX_SUM) {
      /* Any n: batches of NR loads in flight, folded in order. */
      double acc[VEC];
#pragma unroll
      for (int e = 0; e < VEC; e++) acc[e] = -0.0; /* -0 + t == t */
      for (int64_t left = p.n; left > 0; left -= NR) {
        const int cnt = left < NR ? (int)left : NR;
        const T *pl = px;
#pragma unroll
        for (int j = 0; j < NR; j++) {
          if (j >= cnt) break;
          bk_vload<VEC>(pl, v[j]);
          pl += st;
        }
        px += NR * st; /* the next batch (cnt < NR only for the last) */
#pragma unroll
        for (int j = 0; j < NR; j++) {
          if (j >= cnt) break;
#pragma unroll
          for (int e = 0; e < VEC; e++) acc[e] += (double)v[j][e];
        }
      }
      T out[VEC];
#pragma unroll
      for (int e = 0; e < VEC; e++) out[e] = (T)acc[e];
      bk_vstore_cs<VEC>(y + q, out);
    } else {
      const int n = (int)p.n;
      const T *pl = px;
#pragma unroll
      for (int j = 0; j < NR; j++) {
        if (j >= n) break;
        bk_vload<VEC>(pl, v[j]);
        pl += st;
      }
      T inv[VEC];
#pragma unroll
      for (int e = 0; e < VEC; e++) {
        T m = (T)-INFINITY;
#pragma unroll
        for (int j = 0; j < NR; j++) {
          if (j >= n) break;
          m = ax_max(m, v[j][e]);
        }
        double s = 0.0;
#pragma unroll
        for (int j = 0; j < NR; j++) {
          if (j >= n) break;
          v[j][e] = (v[j][e] == m && m == (T)-INFINITY) ? (T)0 : ax_exp(v[j][e] - m);
          s += (double)v[j][e];
        }
        inv[e] = ax_recip<T>(s);
      }
      T *py = y + (px - x);
#pragma unroll
      for (int j = 0; j < NR; j++) {
        if (j >= n) break;
#pragma unroll
        for (int e = 0; e < VEC; e++) v[j][e] *= inv[e];
        bk_vstore_cs<VEC>(py, v[j]);
        py += st;
      }
    }
  }
}

/* Tiles. Dynamic shared memory: the tile (tile_bytes), then ty * columns
 * float64 segment results, then (clusters) each column's float64 sum, then
 * (softmax) each column's maximum and inverse sum. A thread owns VW
 * adjacent columns of one segment (a sum reads them as one vector per row;
 * a softmax walks one column) and thread q < columns then folds column q's
 * segment results in segment order. With nch > 1 and
 * no cluster the tile's statistics go to part: sums at part[k*R + result],
 * softmax maxima there and sums at part[(nch + k)*R + result]. In a cluster
 * each block reads the others' column statistics from their shared memory
 * (in rank order, so every block folds them alike) and writes its chunk. */
template <typename T, int OP, int VEC, typename G>
static __global__ void __launch_bounds__(AX_THREADS, AX_TILE_BLOCKS)
    ax_tile_kernel(const T *__restrict__ x, T *__restrict__ y, double *__restrict__ part,
                   ax_plan p, G g) {
  extern __shared__ __align__(16) unsigned char ax_smem[];
  T *tile = reinterpret_cast<T *>(ax_smem);
  const int nq = p.ob * p.ti; /* columns of a full tile */
  /* Column groups of the walk: VW adjacent columns each (sums; a softmax
   * walks single columns, which measured faster: dev/cuda/axis.md). */
  constexpr int VW = OP == AX_SUM ? VEC : 1;
  const int nv = nq / VW;
  double *red = reinterpret_cast<double *>(ax_smem + p.tile_bytes);
  double *clsum = red + p.ty * nq;
  T *colm = reinterpret_cast<T *>(clsum + (OP == AX_SOFTMAX_CL ? nq : 0));
  T *colinv = colm + nq;
  /* ax_gen (sums): the offsets in x of the tile's rows (p.ch) and outer
   * indices (p.ob), after the segment results. */
  int64_t *rowoff = reinterpret_cast<int64_t *>(clsum); /* sums only: after red */
  const int tid = threadIdx.x;
  /* This thread's column group (first column q0 = (gob, gc)) and segment. */
  const int s = tid / nv, q0 = (tid - s * nv) * VW;
  const int gob = q0 / p.ti, gc = q0 - gob * p.ti;
  /* The column this thread folds (tid < nq): (fob, fc). */
  const int fob = tid / p.ti, fc = tid - fob * p.ti;

  for (int64_t u = blockIdx.x; u < p.units; u += gridDim.x) {
    const ax_tile t = ax_tile_of(p, u, false);
    int sh = 0; /* the tile's shift in elements (below) */
    if constexpr (G::gen) {
      /* Row and outer-index offsets first, then rows of tw columns (VEC
       * at a time) of obc outer indices: (ob, r, c) at (ob*rc + r)*ti + c. */
      int64_t *okoff = rowoff + p.ch;
      for (int i = tid; i < t.rc; i += AX_THREADS) rowoff[i] = g.roff(t.r0 + i);
      for (int i = tid; i < t.obc; i += AX_THREADS) {
        int64_t kin;
        g.kept(t.o0 + i, &okoff[i], &kin);
      }
      __syncthreads();
      constexpr int LV = VEC == 4 ? 2 : VEC == 2 ? 1 : 0;
      const int lg = p.lgti - LV;
      const int per = t.rc << lg, count = t.obc * per;
#pragma unroll 4
      for (int i = tid; i < count; i += AX_THREADS) {
        const int ob = t.obc > 1 ? bk_div32_q(p.tch, i >> lg) : 0; /* rc == ch when obc > 1 */
        const int rem = i - ob * per, r = rem >> lg, c = (rem & ((1 << lg) - 1)) * VEC;
        if (c < t.tw)
          ax_cp_async<VEC * (int)sizeof(T)>(tile + (ob * t.rc + r) * p.ti + c,
                                            x + okoff[ob] + rowoff[r] + t.c0 + c);
      }
    } else if (VEC * (int)sizeof(T) < 16 && p.flat) {
      /* A contiguous tile whose columns allow no vector walk: 16-byte copies
       * of its aligned body into the tile shifted by sh elements (shared and
       * global addresses then agree modulo 16), the ends element by element. */
      constexpr int W = 16 / (int)sizeof(T);
      const T *src = x + t.base;
      sh = (int)(((uintptr_t)src & 15) / sizeof(T));
      T *dst = tile + sh;
      const int count = t.obc * t.rc * (int)p.inner;
      const int head = min((W - sh) % W, count), nvec = (count - head) / W;
      if (tid < head) ax_cp_async<(int)sizeof(T)>(dst + tid, src + tid);
#pragma unroll 4
      for (int i = tid; i < nvec; i += AX_THREADS)
        ax_cp_async<16>(dst + head + i * W, src + head + i * W);
      const int tail = head + nvec * W + tid;
      if (tail < count) ax_cp_async<(int)sizeof(T)>(dst + tail, src + tail);
    } else {
      ax_tile_each<VEC, OP == AX_SUM>(
          p, t,
          [&](int e, int64_t goff, int) { ax_cp_async<VEC * (int)sizeof(T)>(tile + e, x + goff); },
          [&](int r) -> int64_t { return (int64_t)r * p.inner; });
    }
    ax_cp_wait_all();
    __syncthreads();
    T *const tl = tile + sh; /* the tile's first element */

    const bool on = s < p.ty && gob < t.obc && gc < t.tw;
    const bool fon = tid < nq && fob < t.obc && fc < t.tw;
    const int r_lo = s * p.seg, r_hi = on ? min(t.rc, r_lo + p.seg) : r_lo;
    T *col = tl + (gob * t.rc) * p.ti + gc;
    const int64_t res = (t.o0 + fob) * p.inner + t.c0 + fc; /* column tid's flat result */
    if constexpr (OP == AX_SUM) {
      double acc[VW];
#pragma unroll
      for (int e = 0; e < VW; e++) acc[e] = -0.0; /* -0 + t == t */
#pragma unroll 4
      for (int r = r_lo; r < r_hi; r++) {
        T v[VW];
        bk_vload<VW>(col + r * p.ti, v);
#pragma unroll
        for (int e = 0; e < VW; e++) acc[e] += (double)v[e];
      }
      if (s < p.ty) {
#pragma unroll
        for (int e = 0; e < VW; e++) red[s * nq + q0 + e] = acc[e];
      }
      __syncthreads();
      if (fon) {
        double a = -0.0;
        for (int j = 0; j < p.ty; j++) a += red[j * nq + tid];
        if (p.nch == 1)
          y[G::gen ? ax_res(p, g, t.o0 + fob, t.c0 + fc) : res] = (T)a;
        else
          part[(int64_t)t.k * p.R + res] = a;
      }
    } else {
      T m[VW];
#pragma unroll
      for (int e = 0; e < VW; e++) m[e] = (T)-INFINITY;
#pragma unroll 4
      for (int r = r_lo; r < r_hi; r++) {
        T v[VW];
        bk_vload<VW>(col + r * p.ti, v);
#pragma unroll
        for (int e = 0; e < VW; e++) m[e] = ax_max(m[e], v[e]);
      }
      if (s < p.ty) {
#pragma unroll
        for (int e = 0; e < VW; e++) red[s * nq + q0 + e] = (double)m[e];
      }
      __syncthreads();
      if (tid < nq) {
        T mq = (T)-INFINITY;
        for (int j = 0; j < p.ty; j++) mq = ax_max(mq, (T)red[j * nq + tid]);
        colm[tid] = mq;
      }
      __syncthreads();
#pragma unroll
      for (int e = 0; e < VW; e++) m[e] = colm[q0 + e];
      /* The exponentials stay in the tile for the output (one pass). */
      double sum[VW];
#pragma unroll
      for (int e = 0; e < VW; e++) sum[e] = 0.0;
#pragma unroll 4
      for (int r = r_lo; r < r_hi; r++) {
        T v[VW];
        bk_vload<VW>(col + r * p.ti, v);
#pragma unroll
        for (int e = 0; e < VW; e++) {
          v[e] = (v[e] == m[e] && m[e] == (T)-INFINITY) ? (T)0 : ax_exp(v[e] - m[e]);
          sum[e] += (double)v[e];
        }
        if (p.nch == 1 || OP == AX_SOFTMAX_CL) ax_vstore<VW>(col + r * p.ti, v);
      }
      /* red's maxima were read before the barrier above. */
      if (s < p.ty) {
#pragma unroll
        for (int e = 0; e < VW; e++) red[s * nq + q0 + e] = sum[e];
      }
      __syncthreads();
      double S = 0.0;
      if (tid < nq)
        for (int j = 0; j < p.ty; j++) S += red[j * nq + tid];
      if constexpr (OP == AX_SOFTMAX_CL) {
        cg::cluster_group cluster = cg::this_cluster();
        if (tid < nq) clsum[tid] = S;
        cluster.sync();
        if (fon) {
          /* Every rank's maximum loaded before any is used; then the sums. */
          T mr[AX_CLUSTER_MAX];
#pragma unroll
          for (int r = 0; r < AX_CLUSTER_MAX; r++)
            if (r < (int)p.nch) mr[r] = *cluster.map_shared_rank(colm + tid, r);
          double M = -INFINITY, St = 0.0;
#pragma unroll
          for (int r = 0; r < AX_CLUSTER_MAX; r++)
            if (r < (int)p.nch) M = fmax(M, (double)mr[r]);
#pragma unroll
          for (int r = 0; r < AX_CLUSTER_MAX; r++) {
            if (r < (int)p.nch) {
              const double sr = *cluster.map_shared_rank(clsum + tid, r);
              St += mr[r] == (T)-INFINITY ? sr : sr * exp((double)mr[r] - M);
            }
          }
          colinv[tid] = (T)(exp((double)colm[tid] - M) / St);
        }
        /* Every block has read the others' statistics before any moves on. */
        cluster.sync();
        ax_scale_out<VEC>(p, t, tl, colinv, y);
      } else if (p.nch > 1) {
        if (fon) {
          part[(int64_t)t.k * p.R + res] = (double)colm[tid];
          part[(int64_t)(p.nch + t.k) * p.R + res] = S;
        }
      } else {
        if (tid < nq) colinv[tid] = (T)(1.0 / S);
        __syncthreads();
        ax_scale_out<VEC>(p, t, tl, colinv, y);
      }
    }
    /* The next tile's copies overwrite what this one still reads. */
    __syncthreads();
  }
}

/* Chunk statistics folded per result in chunk order: the sum (written to
 * y), or the softmax maximum and inverse sum (written over chunk 0's
 * statistics). */
template <typename T, int OP, typename G>
static __global__ void __launch_bounds__(AX_THREADS)
    ax_fold_kernel(double *__restrict__ part, T *__restrict__ y, ax_plan p, G g) {
  const int64_t step = (int64_t)gridDim.x * AX_THREADS;
  for (int64_t i = (int64_t)blockIdx.x * AX_THREADS + threadIdx.x; i < p.R; i += step) {
    if constexpr (OP == AX_SUM) {
      double acc = -0.0;
      for (int64_t k = 0; k < p.nch; k++) acc += part[k * p.R + i];
      if constexpr (G::gen) {
        const int64_t o = p.R < ((int64_t)1 << 31) ? bk_div32_q(p.tinner, (int)i) : i / p.inner;
        y[ax_res(p, g, o, i - o * p.inner)] = (T)acc;
      } else
        y[i] = (T)acc;
    } else {
      double M = -INFINITY;
      for (int64_t k = 0; k < p.nch; k++) M = fmax(M, part[k * p.R + i]);
      double S = 0.0;
      for (int64_t k = 0; k < p.nch; k++) {
        const double mk = part[k * p.R + i], sk = part[(p.nch + k) * p.R + i];
        S += mk == -INFINITY ? sk : sk * exp(mk - M);
      }
      part[i] = M;
      part[p.nch * p.R + i] = 1.0 / S;
    }
  }
}

/* Chunked softmax output: x read again, newest chunks first. */
template <typename T, int VEC>
static __global__ void __launch_bounds__(AX_THREADS)
    ax_finish_kernel(const T *__restrict__ x, T *__restrict__ y, const double *__restrict__ part,
                     ax_plan p) {
  extern __shared__ __align__(16) unsigned char ax_smem[];
  T *colm = reinterpret_cast<T *>(ax_smem);
  T *colinv = colm + p.ti; /* chunked tiles have ob == 1: ti columns */
  for (int64_t u = blockIdx.x; u < p.units; u += gridDim.x) {
    const ax_tile t = ax_tile_of(p, u, true);
    const int64_t res0 = t.o0 * p.inner + t.c0;
    for (int q = threadIdx.x; q < t.tw; q += AX_THREADS) {
      colm[q] = (T)part[res0 + q];
      colinv[q] = (T)part[p.nch * p.R + res0 + q];
    }
    __syncthreads();
    ax_tile_each<VEC>(
        p, t,
        [&](int, int64_t goff, int q0) {
          T v[VEC];
          bk_vload<VEC>(x + goff, v);
#pragma unroll
          for (int j = 0; j < VEC; j++) v[j] = ax_exp(v[j] - colm[q0 + j]) * colinv[q0 + j];
          bk_vstore_cs<VEC>(y + goff, v);
        },
        [&](int r) -> int64_t { return (int64_t)r * p.inner; });
    __syncthreads(); /* the next tile's columns overwrite these */
  }
}

/* ---- runs: sums of consecutive terms ------------------------------------------------ */

/* Sums of runs of L consecutive elements (run m is x[m*L, m*L + L)): the
 * sum along an axis of inner extent 1, and the first step of a broadcast
 * adjoint whose innermost output axis is reduced. A run is cut into parts of
 * lp consecutive elements (parts > 1 only when there are too few runs for
 * the device); a group of g lanes takes a part in chunks of g * S elements,
 * lane l of the group folding elements [l*S, l*S + S) of the chunk as one
 * chain. The group folds its lanes' chains in lane order (groups of 8 or
 * more in quads, then the quads' sums in order), the part folds its chunks
 * in order, and ax_parts_kernel folds a run's parts in order: nested
 * segments of consecutive terms, each level added in order. A run of at most
 * 16 terms is one lane's single chain (g = 1, S >= 16). Lanes read their
 * elements through aligned 16-byte vectors, the window shifted by the run's
 * offset within a vector. With TWO (parts of two chunks or more), each lane
 * has two chunks' loads in flight before it folds either; the order of the
 * additions is the same. */
struct ax_runs {
  int64_t M, L, lp, parts, units; /* units = M * parts */
  bk_divider dparts;
  int lgg; /* log2 of the lanes per group */
  int vec; /* x is 16-byte aligned */
};

template <typename T, int NV, bool TWO, typename TO>
static __global__ void __launch_bounds__(AX_THREADS)
    ax_runs_kernel(const T *__restrict__ x, TO *__restrict__ out, ax_runs p) {
  constexpr int V = 16 / (int)sizeof(T);
  constexpr int S = NV * V; /* elements of a lane's chain per chunk */
  const int lane = threadIdx.x & 31;
  const int G = 1 << p.lgg, gl = lane & (G - 1), gbase = lane - gl;
  const int64_t gpw = 32 >> p.lgg; /* groups per warp */
  const int64_t warp = ((int64_t)blockIdx.x * AX_THREADS + threadIdx.x) >> 5;
  const int64_t step = (int64_t)gridDim.x * (AX_THREADS / 32) * gpw;
  const int64_t total = p.M * p.L, cl = (int64_t)G * S;
  const int64_t nck = (p.lp + cl - 1) / cl; /* chunks of the longest part */
  for (int64_t u0 = warp * gpw; u0 < p.units; u0 += step) {
    const int64_t u = u0 + (lane >> p.lgg);
    int64_t rs = 0, re = 0;
    if (u < p.units) {
      const int64_t m = p.parts == 1 ? u : (int64_t)bk_divider_q(p.dparts, (uint64_t)u);
      const int64_t rend = m * p.L + p.L;
      rs = m * p.L + (u - m * p.parts) * p.lp;
      re = rend - rs < p.lp ? rend : rs + p.lp;
    }
    /* Lane gl's chain over its S elements of chunk k. */
    auto chain = [&](int64_t k) -> double {
      const int64_t e0 = rs + k * cl + (int64_t)gl * S;
      double s = -0.0; /* -0 + t == t */
      if (k < nck && e0 < re) {
        const int cnt = re - e0 < S ? (int)(re - e0) : S;
        const int64_t base = e0 & ~(int64_t)(V - 1);
        const int off = (int)(e0 - base);
        if (p.vec && base + (NV + 1) * V <= total) {
          T w[(NV + 1) * V];
#pragma unroll
          for (int i = 0; i < NV + 1; i++)
            if (i * V < off + cnt) bk_vload<V>(x + base + i * V, w + i * V);
#pragma unroll
          for (int j = 0; j < S; j++) {
            T v = w[j];
#pragma unroll
            for (int o = 1; o < V; o++) v = off == o ? w[j + o] : v;
            if (j < cnt) s += (double)v;
          }
        } else {
          for (int j = 0; j < cnt; j++) s += (double)x[e0 + j];
        }
      }
      return s;
    };
    /* The group's chains in lane order: below 8 lanes one by one, else in
     * quads, then the quads' sums in order. */
    auto fold = [&](double s) -> double {
      double c = -0.0;
      if (G < 8) {
        for (int i = 0; i < G; i++) c += __shfl_sync(0xffffffffu, s, gbase + i);
        return c;
      }
      const int q = lane & ~3;
      double t = -0.0;
#pragma unroll
      for (int i = 0; i < 4; i++) t += __shfl_sync(0xffffffffu, s, q + i);
      for (int i = 0; i < G; i += 4) c += __shfl_sync(0xffffffffu, t, gbase + i);
      return c;
    };
    double acc = -0.0;
    if constexpr (TWO) {
      for (int64_t k = 0; k < nck; k += 2) {
        const double s0 = chain(k), s1 = chain(k + 1);
        acc += fold(s0);
        if (k + 1 < nck) acc += fold(s1);
      }
    } else {
      for (int64_t k = 0; k < nck; k++) acc += fold(chain(k));
    }
    if (u < p.units && gl == 0) out[u] = (TO)acc;
  }
}

/* out[m] = the parts of run m folded in order: each thread folds a
 * consecutive range of them, then thread 0 folds the threads' sums. */
template <typename TO>
static __global__ void __launch_bounds__(AX_THREADS)
    ax_parts_kernel(const double *__restrict__ part, TO *__restrict__ out, int64_t M,
                    int64_t parts) {
  __shared__ double red[AX_THREADS];
  const int64_t per = (parts + AX_THREADS - 1) / AX_THREADS;
  const int nt = (int)((parts + per - 1) / per);
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const double *pm = part + m * parts;
    double a = -0.0;
    const int64_t lo = threadIdx.x * per, hi = lo + per < parts ? lo + per : parts;
    for (int64_t i = lo; i < hi; i++) a += pm[i];
    red[threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
      double sum = -0.0;
      for (int i = 0; i < nt; i++) sum += red[i];
      out[m] = (TO)sum;
    }
    __syncthreads();
  }
}

/* ---- planner ------------------------------------------------------------------------ */

static int64_t ax_pow2_floor(int64_t v) {
  int64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

/* Shared memory a tile kernel block needs beside its tile, at most: a flat
 * tile's shift (16 bytes, counted in tile_bytes), a sum's
 * ty * columns float64 segment results (ty * columns / vw <= AX_THREADS)
 * with room for the general geometry's offsets; a softmax's segment
 * results (vw = 1) and each column's maximum and inverse sum (at most
 * AX_THREADS columns; a cluster's column sums are checked with the tile). */
static constexpr int64_t ax_extra(int op, int64_t es, int64_t vw) {
  return 16 + (op == AX_SUM ? AX_THREADS * (8 * vw + 8 + 2 * es) : AX_THREADS * (8 + 2 * es));
}

/* tmax: the largest tile the device gives a block, two blocks per
 * multiprocessor; target: the tile that lets AX_TILE_BLOCKS blocks (the
 * most their registers allow) share its shared memory. force: a strategy
 * the caller asked for (AX_FORCE_*), where the geometry allows it. */
static void ax_plan_make(bk_context *ctx, int op, int64_t es, int64_t vw, int64_t outer,
                         int64_t n, int64_t inner, int64_t tmax, bool clusters, int force,
                         bool gen, ax_plan *p) {
  const bk_cuda_ctx *cu = bk_cu(ctx);
  const int64_t sm = cu->sm_count;
  const int64_t per_sm = cu->facts.smem_per_sm;
  const int64_t blocks = force == AX_FORCE_HALF ? 2 : AX_TILE_BLOCKS;
  int64_t target = per_sm / blocks - cu->facts.smem_reserved - ax_extra(op, es, vw);
  if (target > tmax) target = tmax;
  const int64_t line = 128 / es; /* elements in a 128-byte line */
  if (force == AX_FORCE_TILE || force == AX_FORCE_CHUNKS) clusters = false;

  memset(p, 0, sizeof *p);
  p->outer = outer;
  p->n = n;
  p->inner = inner;
  p->R = outer * inner;
  p->nch = 1;
  p->ch = n;
  int64_t ob = 1, ti;
  const int64_t slab = n * inner * es;
  /* A softmax whose slab is too large for a tile takes strips when their
   * whole fibres fit (one pass) rather than chunks of the slab. */
  const bool strips_fit = inner >= line && n * line * es <= tmax;
  const bool flat_sum = slab <= target || inner * es <= 256;
  if (gen) {
    /* A general geometry: strips as wide as inner up to 256 bytes, each row
     * with its 8-byte offset (and each outer index, at most AX_THREADS of
     * them); whole fibres of several outer indices where they fit, as flat
     * sums take them, else chunks of one. */
    ti = 1;
    while (ti < inner && ti < 256 / es) ti *= 2;
    target -= AX_THREADS * 8;
    const int64_t fibre = n * (ti * es + 8);
    if (fibre <= target) {
      ob = AX_THREADS / ti;
      if (ob > target / fibre) ob = target / fibre;
      if (ob > outer / (4 * sm)) ob = outer / (4 * sm);
      if (ob < 1) ob = 1;
    } else {
      p->ch = target / (ti * es + 8);
    }
  } else if (inner <= AX_THREADS &&
             (op == AX_SUM ? flat_sum : slab <= tmax || !strips_fit)) {
    /* Flat tiles: OB whole slabs, or chunks of ch rows of one slab, all
     * contiguous. */
    p->flat = 1;
    ti = inner;
    if (slab <= (op == AX_SUM ? target : tmax)) {
      ob = AX_THREADS / inner;
      if (ob > target / slab) ob = target / slab;
      /* Leave at least four tiles per multiprocessor where outer allows. */
      if (ob > outer / (4 * sm)) ob = outer / (4 * sm);
      if (ob < 1) ob = 1;
    } else {
      p->ch = target / (inner * es);
    }
  } else {
    /* Strips of whole 128-byte lines at least. A softmax takes the widest
     * (up to 256 columns) whose n rows fit the target, else 128 bytes when
     * those fit the largest tile, else chunks of strips of 512 bytes; a sum
     * takes the widest whose rows fit the target, down to 256 bytes, in
     * chunks of target size. */
    ti = ax_pow2_floor(inner < AX_THREADS ? inner : AX_THREADS);
    if (op == AX_SUM) {
      while (ti > 256 / es && n * ti * es > target) ti /= 2;
      p->ch = target / (ti * es);
    } else {
      while (ti > line && n * ti * es > target) ti /= 2;
      if (n * ti * es > tmax) {
        ti = ax_pow2_floor(inner < AX_THREADS ? inner : AX_THREADS);
        if (ti > 512 / es) ti = 512 / es;
        p->ch = target / (ti * es);
      }
    }
    if (p->ch > n) p->ch = n;
  }
  p->ob = (int)ob;
  p->ti = (int)ti;
  p->obs = (outer + ob - 1) / ob;
  p->tis = p->flat ? 1 : (inner + ti - 1) / ti;
  /* Too few tiles to occupy the device: cut the fibres into chunks. A sum
   * pays only the chunk statistics; a softmax reads x twice, which only
   * pays when fewer than half the multiprocessors would have a tile. */
  const int64_t tiles = p->obs * p->tis;
  const bool planned = force == AX_FORCE_AUTO || force == AX_FORCE_HALF;
  if (planned && ob == 1 && n >= 2 * 64 &&
      (p->ch < n || (op == AX_SUM ? tiles < 2 * sm : 2 * tiles < sm))) {
    int64_t nch = (4 * sm + tiles - 1) / tiles;
    if (nch > n / 64) nch = n / 64;
    const int64_t ch = (n + nch - 1) / nch;
    if (ch < p->ch) p->ch = ch;
  }
  /* Forced chunks: at least two per fibre longer than AX_NR (whose sums
   * stay one chain), one outer index per tile. */
  if ((force == AX_FORCE_CHUNKS || force == AX_FORCE_CLUSTER) && n > AX_NR &&
      p->ch > (n + 1) / 2) {
    p->ch = (n + 1) / 2;
    if (ob > 1) {
      ob = 1;
      p->ob = 1;
      p->obs = outer;
    }
  }
  p->nch = (n + p->ch - 1) / p->ch;
  /* A softmax cut into chunks keeps a single pass when a cluster of at
   * most AX_CLUSTER_MAX blocks holds the tile's whole fibres: contiguous
   * slabs where they fit, else strips of 128 bytes or wider. Fibres too
   * long even for a cluster take the three kernels. */
  if (op == AX_SOFTMAX && p->nch > 1 && clusters) {
    const int64_t cmax = AX_CLUSTER_MAX;
    int64_t cti = 0;
    if (inner <= AX_THREADS && slab <= cmax * target) {
      cti = inner;
    } else if (inner >= line) {
      cti = ax_pow2_floor(inner < AX_THREADS ? inner : AX_THREADS);
      while (cti > line && n * cti * es > cmax * target) cti /= 2;
      if (n * cti * es > cmax * tmax) cti = 0;
    }
    if (cti > 0) {
      const int64_t row = cti * es;
      int64_t cs = (n * row + target - 1) / target;
      if (cs < 2) cs = 2;
      /* Few tiles: as many blocks per tile as the device has room for. */
      const int64_t ctiles = cti == inner ? outer : outer * ((inner + cti - 1) / cti);
      while (cs < cmax && ctiles * cs < sm && n / (cs * 2) >= 16) cs *= 2;
      if (cs > cmax) cs = cmax;
      const int64_t ch = (n + cs - 1) / cs;
      if (ch * row + 8 * cti <= tmax) { /* the tile and the cluster's column sums */
        p->cl = 1;
        p->flat = cti == inner;
        ti = cti;
        ob = 1;
        p->ti = (int)ti;
        p->ob = 1;
        p->obs = outer;
        p->tis = p->flat ? 1 : (inner + ti - 1) / ti;
        p->ch = ch;
        p->nch = (n + ch - 1) / ch;
      }
    }
  }
  p->units = p->obs * p->tis * p->nch;
  /* Segments: the threads left over by the column groups (vw adjacent
   * columns each), each at least four rows. */
  const int64_t nq = ob * ti, nv = nq / vw;
  int64_t ty = ax_pow2_floor(AX_THREADS / nv > 0 ? AX_THREADS / nv : 1);
  while (ty > 1 && ty * 4 > p->ch) ty /= 2;
  if (op == AX_SUM && n <= AX_NR) ty = 1; /* the contract's single chain */
  int64_t seg = (p->ch + ty - 1) / ty;
  if (ty > 1 && seg % 2 == 0) seg++; /* odd: segments start in different banks */
  p->ty = (int)ty;
  p->seg = (int)seg;
  int lg = 0;
  while (((int64_t)1 << lg) < ti) lg++;
  p->lgti = lg;
  p->tile_bytes = (size_t)((ob * p->ch * ti * es + 15) / 16 * 16) + (p->flat ? 16 : 0);
  p->smem = p->tile_bytes + (size_t)(nq * ty * 8) + (size_t)(p->cl ? nq * 8 : 0) +
            (op == AX_SOFTMAX ? (size_t)(2 * nq * es) : 0) + (gen ? (size_t)(p->ch + ob) * 8 : 0);
  p->tinner = bk_div32_make((uint64_t)inner);
  p->tch = bk_div32_make((uint64_t)p->ch);
  p->u32 = p->units < ((int64_t)1 << 31);
  if (p->u32) {
    p->dnch = bk_div32_make((uint64_t)p->nch);
    p->dtis = bk_div32_make((uint64_t)p->tis);
    p->dobs = bk_div32_make((uint64_t)p->obs);
  }
}

/* ---- launchers ---------------------------------------------------------------------- */

/* The largest dynamic shared memory a tile kernel asks for, fixed per
 * context so that its attribute is set once. */
static int64_t ax_tmax(bk_context *ctx, int op, int64_t es, int64_t vw) {
  const bk_cuda_facts &f = bk_cu(ctx)->facts;
  int64_t t = f.smem_per_sm / 2 - f.smem_reserved;
  if (t > f.smem_optin) t = f.smem_optin;
  return t - ax_extra(op, es, vw);
}

template <typename T, int OP, int VEC, typename G>
static bk_status ax_launch(bk_context *ctx, const char *fn, const T *x, T *y, int64_t outer,
                           int64_t n, int64_t inner, const G &g) {
  cudaStream_t st = bk_stream(ctx);
  const bk_cuda_ctx *cu = bk_cu(ctx);
  const int force = cu->axis_force;
  constexpr int64_t es = (int64_t)sizeof(T);
  /* Columns in registers: short fibres, and sums whose rows are 128 bytes
   * or longer with enough columns that their batches of AX_NR loads keep
   * AX_INFLIGHT bytes in flight on every multiprocessor (each column then
   * folds its n terms in one sequential chain). */
  const bool reg = G::gen ? false
                 : force == AX_FORCE_AUTO || force == AX_FORCE_HALF
                 ? n <= AX_NR || (OP == AX_SUM && inner * es >= 128 &&
                                  outer * inner * es * AX_NR >=
                                      (int64_t)cu->sm_count * AX_INFLIGHT)
                 : force == AX_FORCE_REG && (OP == AX_SUM || n <= AX_NR);
  if (reg) {
    /* A small parameter block: its size is part of every launch's cost. */
    ax_short p;
    p.n = n;
    p.inner = inner;
    p.R = outer * inner;
    p.dinner = bk_divider_make((uint64_t)inner);
    const unsigned grid = bk_cuda_blocks(ctx, p.R / VEC, AX_THREADS);
    if (n <= AX_NR_SHORT)
      ax_reg_kernel<T, OP, VEC, AX_NR_SHORT><<<grid, AX_THREADS, 0, st>>>(x, y, p);
    else
      ax_reg_kernel<T, OP, VEC, AX_NR><<<grid, AX_THREADS, 0, st>>>(x, y, p);
    return bk__cuda_launched(fn, "ax_reg_kernel");
  }
  ax_plan p;
  constexpr int64_t vw = OP == AX_SUM ? VEC : 1; /* the tile kernel's column groups */
  int64_t tmax = ax_tmax(ctx, OP, es, vw);
  const int64_t full = tmax + ax_extra(OP, es, vw);
  auto kern = ax_tile_kernel<T, OP, VEC, G>;
  if (!bk__cuda_func_prepare(ctx, (const void *)kern, (int)full, 100, 0, NULL))
    tmax = 48 * 1024 - ax_extra(OP, es, vw);
  ax_plan_make(ctx, OP, es, vw, outer, n, inner, tmax, true, force, G::gen, &p);
  if constexpr (OP == AX_SOFTMAX) {
    if (p.cl) {
      /* One cluster of nch blocks per tile; a device that refuses the
       * cluster launch takes the three kernels instead. */
      auto ck = ax_tile_kernel<T, AX_SOFTMAX_CL, VEC, ax_std>;
      if (bk__cuda_func_prepare(ctx, (const void *)ck, (int)full, 100, 0, NULL)) {
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = (unsigned)p.nch;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cudaLaunchConfig_t cfg = {};
        const int64_t most = (int64_t)0x7fffffff / p.nch * p.nch;
        cfg.gridDim = dim3((unsigned)(p.units < most ? p.units : most), 1, 1);
        cfg.blockDim = dim3(AX_THREADS, 1, 1);
        cfg.dynamicSmemBytes = p.smem;
        cfg.stream = st;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        if (cudaLaunchKernelEx(&cfg, ck, x, y, (double *)NULL, p, ax_std()) == cudaSuccess)
          return bk__cuda_launched(fn, "ax_tile_kernel (cluster)");
      }
      (void)cudaGetLastError();
      ax_plan_make(ctx, OP, es, vw, outer, n, inner, tmax, false, force, G::gen, &p);
    }
  }
  double *part = NULL;
  if (p.nch > 1) {
    const size_t words = (size_t)(OP == AX_SUM ? 1 : 2) * (size_t)p.nch * (size_t)p.R;
    bk_status s = bk__cuda_scratch(ctx, fn, words * sizeof(double), (void **)&part);
    if (s != BK_OK) return s;
  }
  const unsigned grid = bk_cuda_grid(p.units);
  kern<<<grid, AX_THREADS, p.smem, st>>>(x, y, part, p, g);
  bk_status s = bk__cuda_launched(fn, "ax_tile_kernel");
  if (s == BK_OK && p.nch > 1) {
    ax_fold_kernel<T, OP, G>
        <<<bk_cuda_blocks(ctx, p.R, AX_THREADS), AX_THREADS, 0, st>>>(part, y, p, g);
    s = bk__cuda_launched(fn, "ax_fold_kernel");
    if (s == BK_OK && OP == AX_SOFTMAX && !G::gen) {
      ax_finish_kernel<T, VEC>
          <<<grid, AX_THREADS, 2 * (size_t)p.ti * sizeof(T), st>>>(x, y, part, p);
      s = bk__cuda_launched(fn, "ax_finish_kernel");
    }
  }
  if (part) bk__cuda_scratch_free(ctx, part);
  return s;
}

/* Sums of the M runs of L consecutive elements of x into out[0..M), in
 * TO (the result's dtype, or float64 for a later step). Lanes per group:
 * the fewest whose chains cover a run in one chunk, at most a warp. Runs
 * are cut into parts while the units would not give every lane the device
 * holds two of them, each part at least four chunks long; the parts' sums
 * go to float64 scratch and ax_parts_kernel folds them. Parts of two
 * chunks or more take the kernel with two chunks in flight (its extra
 * registers would cost runs of one chunk occupancy for nothing). */
template <typename T, int NV, bool TWO, typename TO>
static bk_status ax_runs_go(bk_context *ctx, const char *fn, const T *x, TO *out,
                            const ax_runs &p) {
  cudaStream_t st = bk_stream(ctx);
  const unsigned grid = bk_cuda_blocks(ctx, (p.units + (32 >> p.lgg) - 1) / (32 >> p.lgg) * 32,
                                       AX_THREADS);
  if (p.parts == 1) {
    ax_runs_kernel<T, NV, TWO, TO><<<grid, AX_THREADS, 0, st>>>(x, out, p);
    return bk__cuda_launched(fn, "ax_runs_kernel");
  }
  double *part = NULL;
  bk_status s = bk__cuda_scratch(ctx, fn, (size_t)p.units * sizeof(double), (void **)&part);
  if (s != BK_OK) return s;
  ax_runs_kernel<T, NV, TWO, double><<<grid, AX_THREADS, 0, st>>>(x, part, p);
  s = bk__cuda_launched(fn, "ax_runs_kernel");
  if (s == BK_OK) {
    ax_parts_kernel<TO><<<bk_cuda_grid(p.M < 65536 ? p.M : 65536), AX_THREADS, 0, st>>>(part, out, p.M,
                                                                           p.parts);
    s = bk__cuda_launched(fn, "ax_parts_kernel");
  }
  bk__cuda_scratch_free(ctx, part);
  return s;
}

template <typename T, int NV, typename TO>
static bk_status ax_runs_plan(bk_context *ctx, const char *fn, const T *x, TO *out, int64_t M,
                              int64_t L) {
  constexpr int64_t S = NV * (16 / (int64_t)sizeof(T));
  ax_runs p;
  memset(&p, 0, sizeof p);
  p.M = M;
  p.L = L;
  p.vec = bk_aligned16(x);
  while (p.lgg < 5 && (S << p.lgg) < L) p.lgg++;
  const int64_t G = (int64_t)1 << p.lgg, cl = G * S;
  const int per_sm =
      bk__cuda_occupancy(ctx, (const void *)ax_runs_kernel<T, NV, false, TO>, AX_THREADS, 0, 0);
  const int64_t lanes = (int64_t)bk_cu(ctx)->sm_count * (per_sm > 0 ? per_sm : 1) * AX_THREADS;
  p.parts = 1;
  p.lp = L;
  if (M * G < 2 * lanes && L >= 8 * cl) {
    int64_t parts = (2 * lanes + M * G - 1) / (M * G);
    if (parts > L / (4 * cl)) parts = L / (4 * cl);
    p.lp = (L + parts - 1) / parts;
    p.lp = (p.lp + cl - 1) / cl * cl;
    p.parts = (L + p.lp - 1) / p.lp;
  }
  p.units = M * p.parts;
  p.dparts = bk_divider_make((uint64_t)p.parts);
  if (p.lp > cl) return ax_runs_go<T, NV, true, TO>(ctx, fn, x, out, p);
  return ax_runs_go<T, NV, false, TO>(ctx, fn, x, out, p);
}

/* A run of at most AX_NR terms is one chain: 16 elements a lane. */
template <typename T, typename TO>
static bk_status ax_runs_launch(bk_context *ctx, const char *fn, const T *x, TO *out, int64_t M,
                                int64_t L) {
  if (sizeof(T) == 8 && L <= AX_NR) return ax_runs_plan<T, 8, TO>(ctx, fn, x, out, M, L);
  return ax_runs_plan<T, 4, TO>(ctx, fn, x, out, M, L);
}

/* Runs pay from 32 bytes; shorter ones stay with the columns in registers. */
static bool ax_runs_take(int64_t L, int64_t es) { return L * es >= 32; }

/* 16-byte vectors when both pointers are aligned and inner is a multiple of
 * the vector width (so no vector crosses a row). */
template <typename T, int OP, typename G>
static bk_status ax_run(bk_context *ctx, const char *fn, const void *x, void *y, int64_t outer,
                        int64_t n, int64_t inner, const G &g) {
  constexpr int V = 16 / (int)sizeof(T);
  if (bk_aligned16(x) && bk_aligned16(y) && inner % V == 0)
    return ax_launch<T, OP, V>(ctx, fn, (const T *)x, (T *)y, outer, n, inner, g);
  return ax_launch<T, OP, 1>(ctx, fn, (const T *)x, (T *)y, outer, n, inner, g);
}

/* ---- entries ---------------------------------------------------------------------------- */

extern "C" bk_status bk__cuda_axis_softmax(bk_context *ctx, const char *fn, bk_dtype dt,
                                           const void *x, void *y, int64_t outer, int64_t n,
                                           int64_t inner) {
  if (dt == BK_F32) return ax_run<float, AX_SOFTMAX>(ctx, fn, x, y, outer, n, inner, ax_std());
  return ax_run<double, AX_SOFTMAX>(ctx, fn, x, y, outer, n, inner, ax_std());
}

extern "C" bk_status bk__cuda_axis_sum(bk_context *ctx, const char *fn, bk_dtype dt,
                                       const void *x, void *y, int64_t outer, int64_t n,
                                       int64_t inner) {
  if (inner == 1 && bk__cuda_axis_runs_take(ctx, dt, n)) {
    if (dt == BK_F32) return ax_runs_launch(ctx, fn, (const float *)x, (float *)y, outer, n);
    return ax_runs_launch(ctx, fn, (const double *)x, (double *)y, outer, n);
  }
  if (dt == BK_F32) return ax_run<float, AX_SUM>(ctx, fn, x, y, outer, n, inner, ax_std());
  return ax_run<double, AX_SUM>(ctx, fn, x, y, outer, n, inner, ax_std());
}

extern "C" bk_status bk__cuda_sum_axis(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                       int64_t outer, int64_t n, int64_t inner) {
  return bk__cuda_axis_sum(ctx, "bk_sum_axis", dt, x, y, outer, n, inner);
}

/* The broadcast adjoint over canonical output axes (outermost first, no
 * extent 1, at least one reduced: stride 0) as one sum: the rows are the
 * reduced axes in row-major order, c the innermost axis when it is kept,
 * o the other kept axes. */
extern "C" bk_status bk__cuda_axis_sum_general(bk_context *ctx, const char *fn, bk_dtype dt,
                                               const void *x, void *y, int rank,
                                               const int64_t *dims, const int64_t *stride) {
  ax_gen g;
  memset(&g, 0, sizeof g);
  int64_t ostride = 1, outer = 1, n = 1, inner = 1;
  for (int j = rank - 1; j >= 0; j--) {
    if (stride[j] == 0) {
      if (g.nr == AX_GEN_R)
        return bk__fail(BK_ERR_INTERNAL, fn, "more than %d reduced axes", AX_GEN_R);
      g.rout[g.nr] = ostride;
      g.rdiv[g.nr] = bk_divider_make((uint64_t)dims[j]);
      g.nr++;
      n *= dims[j];
    } else if (j == rank - 1) {
      inner = dims[j];
      g.cs = stride[j];
    } else {
      g.kout[g.nk] = ostride;
      g.kin[g.nk] = stride[j];
      g.kdiv[g.nk] = bk_divider_make((uint64_t)dims[j]);
      g.nk++;
      outer *= dims[j];
    }
    ostride *= dims[j];
  }
  if (dt == BK_F32) return ax_run<float, AX_SUM>(ctx, fn, x, y, outer, n, inner, g);
  return ax_run<double, AX_SUM>(ctx, fn, x, y, outer, n, inner, g);
}

/* The sums of runs of L consecutive elements of x (a float32 or float64
 * tensor of M * L elements) into float64 out[0..M): the first step of a
 * broadcast adjoint whose innermost output axis is reduced. */
extern "C" bk_status bk__cuda_axis_runs(bk_context *ctx, const char *fn, bk_dtype dt,
                                        const void *x, double *out, int64_t M, int64_t L) {
  if (dt == BK_F32) return ax_runs_launch(ctx, fn, (const float *)x, out, M, L);
  return ax_runs_launch(ctx, fn, (const double *)x, out, M, L);
}

/* Whether the planner takes runs of L terms (a forced strategy keeps them
 * out, so the tests reach the others at the same shapes). */
extern "C" bool bk__cuda_axis_runs_take(bk_context *ctx, bk_dtype dt, int64_t L) {
  return bk_cu(ctx)->axis_force == AX_FORCE_AUTO && ax_runs_take(L, dt == BK_F32 ? 4 : 8);
}

/* Test hook (src/core/hooks.h): the strategy ctx's axis engine takes
 * from now on (0 restores the planner); false for a context that is not a
 * CUDA one or a strategy outside the list. */
extern "C" BK_API bool bk__cuda_axis_force(bk_context *ctx, int strategy) {
  if (!ctx || bk_context_device(ctx).kind != BK_DEVICE_CUDA) return false;
  if (strategy < AX_FORCE_AUTO || strategy > AX_FORCE_HALF) return false;
  bk_cu(ctx)->axis_force = strategy;
  return true;
}
