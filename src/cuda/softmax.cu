/*
 * softmax.cu — CUDA softmax along an axis of a contiguous (outer, n, inner)
 * tensor, and the hard-masked row softmax (bk_rows_masked_softmax's entry in
 * rows.cu calls bk__cuda_softmax_masked here, so both share one row engine).
 *
 * How the work is laid out:
 *  - inner == 1 (rows of length n): a warp per row when the row fits in the
 *    warp's registers, else a block per row. Each thread keeps up to EPT
 *    elements of its row in registers, loaded as 16-byte vectors when the
 *    pointers and the row length allow it, so such a row is read once and
 *    written once. Elements beyond the register cache are streamed with an
 *    online max/sum and read again for the output (from L2 in practice: a
 *    block re-reads the row it has just read).
 *  - Few long rows (fewer than two per multiprocessor): a row is split into
 *    chunks handled by separate blocks. The first kernel writes each chunk's
 *    (max, sum); the second folds a row's chunks in a fixed order and writes
 *    the chunk's output, walking the chunks in reverse so that the data the
 *    first kernel read last is still in L2.
 *  - inner > 1: a block takes a tile of up to 32 adjacent inner positions of
 *    one outer index. Consecutive threads read consecutive inner positions
 *    (coalesced); the block's rows of threads split the n axis. With
 *    16-byte aligned rows wider than half a memory line and fibres of 32 to
 *    1392 rows, the tile rows are whole 128-byte lines, held on chip with
 *    the first part of each thread's rows in registers and the rest in
 *    shared memory (the split chosen from n). Otherwise, when the tile's n
 *    rows fit in shared memory (up to 96 KB), they are cached there; either
 *    way the input is read once. Longer fibres cache a share in registers
 *    and stream the rest twice. Nothing is transposed.
 *
 * IEEE rules (contract §3.1): the maximum ignores NaN, and every element's
 * exponential is taken against the final maximum, so a fibre holding NaN,
 * +inf or only -inf sums to NaN and every entry comes out NaN.
 * float32 data: exponentials in float32, sums in float64. float64 data: all
 * in float64. Every reduction is a fixed tree, so results are bitwise
 * reproducible run to run.
 */
#include "cuda_internal.h"

#include <math.h>
#include <stdint.h>

/* ---- device helpers -------------------------------------------------------- */

static constexpr unsigned SM_FULL_MASK = 0xffffffffu;

/* Per-dtype constants: vec is the number of elements in 16 bytes; ept the
 * number of elements a thread caches in registers in the row kernels (64
 * bytes, so both dtypes use the same 16 registers for the cache). */
template <typename T> struct sm_traits;
template <> struct sm_traits<float> {
  static constexpr int vec = 4;
  static constexpr int ept = 16;
};
template <> struct sm_traits<double> {
  static constexpr int vec = 2;
  static constexpr int ept = 8;
};

static __device__ __forceinline__ float sm_exp(float v) { return expf(v); }
static __device__ __forceinline__ double sm_exp(double v) { return exp(v); }

/* Maximum that ignores NaN (fmax returns the other operand). */
struct sm_max_op {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ double operator()(double a, double b) const { return fmax(a, b); }
};
struct sm_sum_op {
  __device__ __forceinline__ double operator()(double a, double b) const { return a + b; }
};

/* Butterfly reduction over the warp: every lane ends with the same value
 * because each step combines two equal-valued halves with a commutative
 * operation, so the result is one fixed tree. */
template <typename A, typename Op>
static __device__ __forceinline__ A sm_warp_allreduce(A v, Op op) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(SM_FULL_MASK, v, off));
  return v;
}

/* Block-wide reduction (blockDim.x a multiple of 32, at most 1024): warp
 * results are folded in warp order by every thread. sh holds 32 entries;
 * the leading barrier keeps a previous call's readers safe. */
template <typename A, typename Op>
static __device__ __forceinline__ A sm_block_allreduce(A v, Op op, A *sh) {
  v = sm_warp_allreduce(v, op);
  const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
  const int nw = (int)(blockDim.x >> 5);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  A r = sh[0];
  for (int w = 1; w < nw; ++w) r = op(r, sh[w]);
  return r;
}

template <bool WARP, typename A, typename Op>
static __device__ __forceinline__ A sm_group_allreduce(A v, Op op, A *sh) {
  if constexpr (WARP)
    return sm_warp_allreduce(v, op);
  else
    return sm_block_allreduce(v, op, sh);
}

template <bool WARP>
static __device__ __forceinline__ bool sm_group_any(bool p) {
  if constexpr (WARP)
    return __any_sync(SM_FULL_MASK, p) != 0;
  else
    return __syncthreads_or(p) != 0;
}

/* Online max/sum: s is the sum of exp(x - m) over the elements seen. A -inf
 * element seen while m is still -inf is skipped: it contributes
 * exp(-inf - M) for the final maximum M, which is 0 unless M is -inf too,
 * and then the fibre's other exponentials already make the result NaN. */
template <typename T>
static __device__ __forceinline__ void sm_online(T &m, double &s, T x) {
  if (x > m) {
    s = s * (double)sm_exp(m - x) + 1.0;
    m = x;
  } else if (!(x == m && m == (T)-INFINITY)) {
    s += (double)sm_exp(x - m);
  }
}

/* A (max, sum) pair rescaled to the maximum M. A pair that saw no element
 * above -inf carries its sum (0, or NaN after a NaN) unchanged. */
template <typename T>
static __device__ __forceinline__ double sm_rescale(T m, double s, T M) {
  return m == (T)-INFINITY ? s : s * (double)sm_exp(m - M);
}

/* One chunk's statistics in the split path. */
struct sm_stat {
  double m;  /* maximum over the chunk's allowed elements, -inf if none */
  double s;  /* sum of exp(x - m) over them */
  int any;   /* the chunk has an allowed element */
};

/* ---- kernels: rows (inner == 1) ------------------------------------------------ */

/*
 * Softmax of rows (rows, cols) with a register cache. WARP: a warp per row
 * (blockDim 256, 8 rows per block at a time); else a block per row. MASKED:
 * mask (rows, cols), allowed <=> mask != 0; blocked entries are written as
 * +0 and never read into the arithmetic; a row with no allowed entry is all
 * +0. Chunk i of thread g covers elements [(i*G + g)*VEC, +VEC).
 */
template <typename T, int VEC, bool WARP, bool MASKED>
static __global__ void __launch_bounds__(1024)
    softmax_rows_kernel(const T *__restrict__ x, const T *__restrict__ mask, T *__restrict__ y,
                        int64_t rows, int64_t cols) {
  constexpr int EPT = sm_traits<T>::ept;
  constexpr int NC = EPT / VEC;
  static_assert(EPT <= 32, "the allowed-bit mask holds 32 entries");
  __shared__ T sh_max[32];
  __shared__ double sh_sum[32];
  const T ninf = (T)-INFINITY;
  const int G = WARP ? 32 : (int)blockDim.x;
  const int g = WARP ? (int)(threadIdx.x & 31) : (int)threadIdx.x;
  const int64_t per_block = WARP ? (int64_t)(blockDim.x >> 5) : 1;
  const int64_t first = (int64_t)blockIdx.x * per_block + (WARP ? (int64_t)(threadIdx.x >> 5) : 0);
  const int64_t step = (int64_t)gridDim.x * per_block;
  const int64_t nvec = cols / VEC;
  const int64_t unc0 = (int64_t)NC * G + g; /* first streamed chunk of this thread */

  for (int64_t r = first; r < rows; r += step) {
    const int64_t base = r * cols;
    const T *xr = x + base;
    const T *mr = MASKED ? mask + base : nullptr;
    T *yr = y + base;

    /* Pass 1: load the cached chunks, thread maximum; stream the rest. */
    T v[EPT];
    unsigned allow = 0; /* bit i*VEC+e: cached element allowed */
    T m = ninf;
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int64_t q = (int64_t)i * G + g;
      if (q < nvec) {
        bk_vload<VEC>(xr + q * VEC, &v[i * VEC]);
        if constexpr (MASKED) {
          T mk[VEC];
          bk_vload<VEC>(mr + q * VEC, mk);
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            if (mk[e] != (T)0) allow |= 1u << (i * VEC + e);
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          if (!MASKED || ((allow >> (i * VEC + e)) & 1u)) m = sm_max_op()(m, v[i * VEC + e]);
      }
    }
    T um = ninf;
    double us = 0.0;
    bool any_unc = false;
    for (int64_t q = unc0; q < nvec; q += 2 * G) {
      /* Two vectors in flight; the second may lie past the row. */
      const bool two = q + G < nvec;
      T t[2][VEC], mk[2][VEC];
      bk_vload<VEC>(xr + q * VEC, t[0]);
      if (two) bk_vload<VEC>(xr + (q + G) * VEC, t[1]);
      if constexpr (MASKED) {
        bk_vload<VEC>(mr + q * VEC, mk[0]);
        if (two) bk_vload<VEC>(mr + (q + G) * VEC, mk[1]);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (h == 1 && !two) break;
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          if (!MASKED || mk[h][e] != (T)0) {
            sm_online(um, us, t[h][e]);
            any_unc = true;
          }
        }
      }
    }
    m = sm_max_op()(m, um);

    if constexpr (MASKED) {
      if (!sm_group_any<WARP>(allow != 0u || any_unc)) {
        /* No allowed entry: the row is all +0. */
        T z[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) z[e] = (T)0;
#pragma unroll
        for (int i = 0; i < NC; ++i) {
          const int64_t q = (int64_t)i * G + g;
          if (q < nvec) bk_vstore_cs<VEC>(yr + q * VEC, z);
        }
        for (int64_t q = unc0; q < nvec; q += G) bk_vstore_cs<VEC>(yr + q * VEC, z);
        continue;
      }
    }
    const T M = sm_group_allreduce<WARP>(m, sm_max_op(), sh_max);

    /* Pass 2: exponentials against the row maximum, kept in the cache. */
    double s = 0.0;
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int64_t q = (int64_t)i * G + g;
      if (q < nvec) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          if (!MASKED || ((allow >> (i * VEC + e)) & 1u)) {
            const T ex = sm_exp(v[i * VEC + e] - M);
            v[i * VEC + e] = ex;
            s += (double)ex;
          }
        }
      }
    }
    s += sm_rescale(um, us, M);
    const double S = sm_group_allreduce<WARP>(s, sm_sum_op(), sh_sum);
    const T inv = (T)(1.0 / S);

    /* Pass 3: write; streamed chunks are read again. */
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int64_t q = (int64_t)i * G + g;
      if (q < nvec) {
        T o[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          o[e] = (!MASKED || ((allow >> (i * VEC + e)) & 1u)) ? v[i * VEC + e] * inv : (T)0;
        bk_vstore_cs<VEC>(yr + q * VEC, o);
      }
    }
#pragma unroll 2
    for (int64_t q = unc0; q < nvec; q += G) {
      T t[VEC], mk[VEC], o[VEC];
      bk_vload<VEC>(xr + q * VEC, t);
      if constexpr (MASKED) bk_vload<VEC>(mr + q * VEC, mk);
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        o[e] = (!MASKED || mk[e] != (T)0) ? sm_exp(t[e] - M) * inv : (T)0;
      bk_vstore_cs<VEC>(yr + q * VEC, o);
    }
  }
}

/* ---- kernels: narrow rows (a group of G lanes per row) ----------------------------- */

/* Butterfly over the G lanes of an aligned lane group (G a power of two,
 * 1..32): xor offsets below G never leave the group, every lane of the
 * warp takes part, and every lane of a group ends with the same value (one
 * fixed tree, as in sm_warp_allreduce). */
template <typename A, typename Op>
static __device__ __forceinline__ A sm_lanes_allreduce(A v, Op op, int G) {
  for (int off = 1; off < G; off <<= 1) v = op(v, __shfl_xor_sync(SM_FULL_MASK, v, off));
  return v;
}

/*
 * Softmax of narrow rows (rows, cols), nvec = cols/VEC <= 32*C vectors: G
 * lanes per row (G = pow2ceil(nvec) capped at 32, C = ceil(nvec/G)), so a
 * warp holds P = 32/G rows at a time. Lane g of a group owns the vectors
 * g + i*G (i < C) of its row. Work unit w of a warp is the P*R consecutive
 * rows [w*P*R, (w+1)*P*R): step k takes rows w*P*R + k*P + (lane/G), so a
 * warp's loads of one step cover P adjacent rows. All R*C loads (R*C = 8)
 * are issued before the first is used. Bit
 * (k*C + i)*VEC + e of `ok` marks an element that is inside the row and,
 * with MASKED, allowed: only those enter the maximum and the sum, and the
 * others are written as +0 (a masked row with no allowed entry is all +0).
 * Same formulas as softmax_rows_kernel: exp in T against the row maximum,
 * float64 sum, inv = (T)(1/S).
 */
/* Rows per lane group in flight in the narrow-row kernel: eight vectors
 * (128 bytes, or 32 bytes of scalars) per thread. At 68-80 registers three
 * 256-thread blocks share a multiprocessor: 96 KB of loads in flight. */
static __host__ __device__ constexpr int sm_narrow_r(int c) { return 8 / c; }

template <typename T, int VEC, int C, bool MASKED>
static __global__ void __launch_bounds__(256, 3)
    softmax_rows_narrow_kernel(const T *__restrict__ x, const T *__restrict__ mask,
                               T *__restrict__ y, int64_t rows, int64_t cols, int G) {
  constexpr int R = sm_narrow_r(C);
  static_assert(R * C * VEC <= 32, "the element bits fit in one word");
  const T ninf = (T)-INFINITY;
  const int lane = (int)(threadIdx.x & 31);
  const int g = lane & (G - 1);
  const int P = 32 / G;
  const int64_t gi = lane / G;
  const int64_t nvec = cols / VEC;
  const int64_t per_unit = (int64_t)P * R;
  const int64_t units = (rows + per_unit - 1) / per_unit;
  const int64_t wpb = (int64_t)(blockDim.x >> 5);
  const int64_t wstep = (int64_t)gridDim.x * wpb;
  for (int64_t w = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); w < units; w += wstep) {
    const int64_t r0 = w * per_unit + gi;
    T v[R][C][VEC];
    unsigned ok = 0;
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int64_t r = r0 + (int64_t)k * P;
#pragma unroll
      for (int i = 0; i < C; ++i) {
        const int64_t q = (int64_t)i * G + g;
        if (r < rows && q < nvec) {
          const int64_t off = r * cols + q * VEC;
          bk_vload<VEC>(x + off, v[k][i]);
          if constexpr (MASKED) {
            T mk[VEC];
            bk_vload<VEC>(mask + off, mk);
#pragma unroll
            for (int e = 0; e < VEC; ++e)
              if (mk[e] != (T)0) ok |= 1u << ((k * C + i) * VEC + e);
          } else {
            ok |= ((1u << VEC) - 1u) << ((k * C + i) * VEC);
          }
        }
      }
    }
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int64_t r = r0 + (int64_t)k * P;
      T m = ninf;
#pragma unroll
      for (int i = 0; i < C; ++i)
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          if ((ok >> ((k * C + i) * VEC + e)) & 1u) m = sm_max_op()(m, v[k][i][e]);
      const T M = sm_lanes_allreduce(m, sm_max_op(), G);
      double s = 0.0;
#pragma unroll
      for (int i = 0; i < C; ++i)
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          if ((ok >> ((k * C + i) * VEC + e)) & 1u) {
            const T ex = sm_exp(v[k][i][e] - M);
            v[k][i][e] = ex;
            s += (double)ex;
          }
      const double S = sm_lanes_allreduce(s, sm_sum_op(), G);
      const T inv = (T)(1.0 / S);
#pragma unroll
      for (int i = 0; i < C; ++i) {
        const int64_t q = (int64_t)i * G + g;
        if (r < rows && q < nvec) {
          T o[VEC];
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            o[e] = ((ok >> ((k * C + i) * VEC + e)) & 1u) ? v[k][i][e] * inv : (T)0;
          bk_vstore_cs<VEC>(y + r * cols + q * VEC, o);
        }
      }
    }
  }
}

/* ---- kernels: few long rows, split into chunks ------------------------------------- */

/*
 * Statistics of chunk c of row r (unit u = r*nch + c): the chunk is the
 * vector range [c*clen, min(nvec, (c+1)*clen)). Four loads are issued before
 * their online updates to keep bytes in flight.
 */
template <typename T, int VEC, bool MASKED>
static __global__ void __launch_bounds__(256)
    softmax_split_stats_kernel(const T *__restrict__ x, const T *__restrict__ mask,
                               sm_stat *__restrict__ stats, int64_t rows, int64_t cols,
                               int64_t nch, int64_t clen) {
  __shared__ T sh_max[32];
  __shared__ double sh_sum[32];
  const int B = (int)blockDim.x;
  const int64_t nvec = cols / VEC;
  const int64_t units = rows * nch;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t r = u / nch, c = u - r * nch;
    const int64_t q0 = c * clen;
    const int64_t q1 = q0 + clen < nvec ? q0 + clen : nvec;
    const T *xr = x + r * cols;
    const T *mr = MASKED ? mask + r * cols : nullptr;
    T m = (T)-INFINITY;
    double s = 0.0;
    bool any = false;
    int64_t q = q0 + threadIdx.x;
    for (; q + 3 * (int64_t)B < q1; q += 4 * (int64_t)B) {
      T t[4][VEC], mk[4][VEC];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        bk_vload<VEC>(xr + (q + (int64_t)k * B) * VEC, t[k]);
        if constexpr (MASKED) bk_vload<VEC>(mr + (q + (int64_t)k * B) * VEC, mk[k]);
      }
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          if (!MASKED || mk[k][e] != (T)0) {
            sm_online(m, s, t[k][e]);
            any = true;
          }
    }
    for (; q < q1; q += B) {
      T t[VEC], mk[VEC];
      bk_vload<VEC>(xr + q * VEC, t);
      if constexpr (MASKED) bk_vload<VEC>(mr + q * VEC, mk);
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (!MASKED || mk[e] != (T)0) {
          sm_online(m, s, t[e]);
          any = true;
        }
    }
    const T M = sm_block_allreduce(m, sm_max_op(), sh_max);
    const double S = sm_block_allreduce(sm_rescale(m, s, M), sm_sum_op(), sh_sum);
    const bool any_b = MASKED ? (__syncthreads_or(any) != 0) : true;
    if (threadIdx.x == 0) {
      sm_stat st;
      st.m = (double)M;
      st.s = S;
      st.any = any_b ? 1 : 0;
      stats[u] = st;
    }
  }
}

/*
 * Output of chunk c of row r: warp 0 folds the row's chunk statistics in a
 * fixed order (lane l takes chunks l, l+32, ...; then a butterfly), then the
 * block writes the chunk.
 */
template <typename T, int VEC, bool MASKED>
static __global__ void __launch_bounds__(256)
    softmax_split_apply_kernel(const T *__restrict__ x, const T *__restrict__ mask,
                               const sm_stat *__restrict__ stats, T *__restrict__ y,
                               int64_t rows, int64_t cols, int64_t nch, int64_t clen) {
  __shared__ double sh_row[3];
  const int B = (int)blockDim.x;
  const int64_t nvec = cols / VEC;
  const int64_t units = rows * nch;
  for (int64_t k = blockIdx.x; k < units; k += gridDim.x) {
    const int64_t u = units - 1 - k;
    const int64_t r = u / nch, c = u - r * nch;
    __syncthreads(); /* the previous unit's readers of sh_row are done */
    if (threadIdx.x < 32) {
      const sm_stat *st = stats + r * nch;
      double m = -INFINITY;
      for (int64_t j = threadIdx.x; j < nch; j += 32) m = fmax(m, st[j].m);
      const double M = sm_warp_allreduce(m, sm_max_op());
      double s = 0.0;
      int any = 0;
      for (int64_t j = threadIdx.x; j < nch; j += 32) {
        s += st[j].m == -INFINITY ? st[j].s : st[j].s * exp(st[j].m - M);
        any |= st[j].any;
      }
      const double S = sm_warp_allreduce(s, sm_sum_op());
      any = __any_sync(SM_FULL_MASK, any != 0);
      if (threadIdx.x == 0) {
        sh_row[0] = M;
        sh_row[1] = S;
        sh_row[2] = any ? 1.0 : 0.0;
      }
    }
    __syncthreads();
    const T M = (T)sh_row[0];
    const T inv = (T)(1.0 / sh_row[1]);
    const bool any = sh_row[2] != 0.0;
    const int64_t q0 = c * clen;
    const int64_t q1 = q0 + clen < nvec ? q0 + clen : nvec;
    const T *xr = x + r * cols;
    const T *mr = MASKED ? mask + r * cols : nullptr;
    T *yr = y + r * cols;
    for (int64_t q = q0 + threadIdx.x; q < q1; q += B) {
      T o[VEC];
      if (MASKED && !any) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) o[e] = (T)0;
      } else {
        T t[VEC], mk[VEC];
        bk_vload<VEC>(xr + q * VEC, t);
        if constexpr (MASKED) bk_vload<VEC>(mr + q * VEC, mk);
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          o[e] = (!MASKED || mk[e] != (T)0) ? sm_exp(t[e] - M) * inv : (T)0;
      }
      bk_vstore_cs<VEC>(yr + q * VEC, o);
    }
  }
}

/* ---- kernels: inner > 1 ------------------------------------------------------------ */

/*
 * Reduction over the threads of one inner position: thread t owns column
 * t % ti (ti a power of two <= 32) and row slot t / ti. Lanes of a warp with
 * the same column are folded by a butterfly over the lane bits >= log2(ti),
 * then the warps' results are folded in warp order through sh (32*ti
 * entries).
 */
template <typename A, typename Op>
static __device__ __forceinline__ A sm_col_allreduce(A v, Op op, int ti, double *sh) {
  for (int off = ti; off < 32; off <<= 1) v = op(v, __shfl_xor_sync(SM_FULL_MASK, v, off));
  const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
  const int nw = (int)(blockDim.x >> 5), col = lane & (ti - 1);
  __syncthreads();
  if (lane < ti) sh[warp * ti + lane] = (double)v;
  __syncthreads();
  A r = (A)sh[col];
  for (int w = 1; w < nw; ++w) r = op(r, (A)sh[w * ti + col]);
  return r;
}

/*
 * Softmax along the middle axis of (outer, n, inner): unit u is (o, tile);
 * thread t handles inner position c = tile*ti + t%ti and the rows
 * j = slot, slot + RS, ... (RS = blockDim/ti row slots); the first EPT of
 * them are cached in registers, the rest streamed (NB loads in flight) and
 * read again.
 */
template <typename T>
static __global__ void __launch_bounds__(512, 2)
    softmax_inner_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t outer, int64_t n,
                         int64_t inner, int ti) {
  constexpr int EPT = sm_traits<T>::ept;
  constexpr int NB = 16 / (int)sizeof(T);
  __shared__ double sh[1024];
  const T ninf = (T)-INFINITY;
  const int t = (int)threadIdx.x;
  const int col = t & (ti - 1);
  const int64_t slot = t / ti, RS = (int64_t)blockDim.x / ti;
  const int64_t tiles = (inner + ti - 1) / ti;
  const int64_t units = outer * tiles;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t o = u / tiles, tile = u - o * tiles;
    const int64_t c = tile * ti + col;
    const bool ok = c < inner;
    const int64_t base = (o * n + slot) * inner + c;
    const T *xb = x + (ok ? base : 0);
    T *yb = y + (ok ? base : 0);

    /* Cached rows: j = slot + i*RS for i < cnt. */
    const int64_t stride = RS * inner;
    const int64_t left = ok && slot < n ? (n - slot + RS - 1) / RS : 0;
    const int cnt = left < EPT ? (int)left : EPT;
    T v[EPT];
    T m = ninf;
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
      if (i < cnt) {
        v[i] = xb[i * stride];
        m = sm_max_op()(m, v[i]);
      }
    }
    /* Streamed rows: j = slot + (EPT + k)*RS. */
    const T *xs = xb + (int64_t)EPT * stride;
    const int64_t nstream = left > EPT ? left - EPT : 0;
    T um = ninf;
    double us = 0.0;
    {
      int64_t k = 0;
      for (; k + NB <= nstream; k += NB) {
        T xv[NB];
#pragma unroll
        for (int e = 0; e < NB; ++e) xv[e] = xs[(k + e) * stride];
#pragma unroll
        for (int e = 0; e < NB; ++e) sm_online(um, us, xv[e]);
      }
      for (; k < nstream; ++k) sm_online(um, us, xs[k * stride]);
    }
    m = sm_max_op()(m, um);
    const T M = sm_col_allreduce(m, sm_max_op(), ti, sh);

    double s = 0.0;
#pragma unroll
    for (int i = 0; i < EPT; ++i) {
      if (i < cnt) {
        const T ex = sm_exp(v[i] - M);
        v[i] = ex;
        s += (double)ex;
      }
    }
    s += sm_rescale(um, us, M);
    const double S = sm_col_allreduce(s, sm_sum_op(), ti, sh);
    const T inv = (T)(1.0 / S);

#pragma unroll
    for (int i = 0; i < EPT; ++i)
      if (i < cnt) __stcs(yb + i * stride, v[i] * inv);
    T *ys = yb + (int64_t)EPT * stride;
    {
      int64_t k = 0;
      for (; k + NB <= nstream; k += NB) {
        T xv[NB];
#pragma unroll
        for (int e = 0; e < NB; ++e) xv[e] = xs[(k + e) * stride];
#pragma unroll
        for (int e = 0; e < NB; ++e) __stcs(ys + (k + e) * stride, sm_exp(xv[e] - M) * inv);
      }
      for (; k < nstream; ++k) __stcs(ys + k * stride, sm_exp(xs[k * stride] - M) * inv);
    }
  }
}

/* 16 bytes from global to shared memory without passing through registers
 * (cp.async, cached in L2 only); sm_cp_async_wait_all commits the thread's
 * copies and waits for all of them. Other threads see the data only after a
 * barrier that follows the wait. */
static __device__ __forceinline__ void sm_cp_async16(void *smem, const void *gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  const size_t g = __cvta_generic_to_global(gmem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(g) : "memory");
}
static __device__ __forceinline__ void sm_cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}
/* Commit and wait separately, so that work on registers can run between. */
static __device__ __forceinline__ void sm_cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
static __device__ __forceinline__ void sm_cp_async_wait0() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/*
 * Softmax along the middle axis with the tile cached in shared memory: unit
 * u is (o, tile) and the block holds all n rows of its ti inner positions
 * (n*ti elements of dynamic shared memory, row j of the tile at
 * tile[j*ti, +ti)), so the input is read once. Thread t handles inner
 * position c = tile*ti + t%ti and rows j = slot + k*RS (slot = t/ti,
 * RS = blockDim/ti); its entries sit at tile[j*ti + t%ti] = tile[t + k*B],
 * so consecutive lanes hit consecutive banks.
 *
 * ASYNC (x, y 16-byte aligned, inner*sizeof(T) a multiple of 16, ti at
 * least 16 bytes): the tile's rows are cut into 16-byte chunks (cpr = ti/VEC
 * per row, chunk q = row q/cpr, part q%cpr), and the block issues cp.async
 * copies for every chunk of the tile at once before waiting, so the whole
 * tile is in flight; chunks past the last inner position (a partial last
 * tile) are skipped, which never splits a chunk because inner is a multiple
 * of VEC. The output is written with the same chunks, as 16-byte streaming
 * stores, each column scaled by its inverse sum from sh_inv.
 * Otherwise each thread loads its own entries (U loads issued before they
 * are stored to the tile) and writes its own outputs.
 * Both variants use the same per-thread row order for the maximum and the
 * sum, so they give the same bits.
 */
template <typename T, bool ASYNC>
static __global__ void __launch_bounds__(256)
    softmax_inner_tile_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t outer,
                              int64_t n, int64_t inner, int ti) {
  constexpr int U = 64 / (int)sizeof(T);
  constexpr int VEC = sm_traits<T>::vec;
  extern __shared__ __align__(16) unsigned char sm_dyn[];
  T *tile = reinterpret_cast<T *>(sm_dyn);
  __shared__ double sh[256];
  __shared__ T sh_inv[32];
  const T ninf = (T)-INFINITY;
  const int t = (int)threadIdx.x;
  const int B = (int)blockDim.x;
  const int col = t & (ti - 1);
  const int64_t slot = t / ti, RS = (int64_t)B / ti;
  const int64_t tiles = (inner + ti - 1) / ti;
  const int64_t units = outer * tiles;
  const int64_t stride = RS * inner;
  /* ASYNC chunk geometry: cpr = ti/VEC chunks per tile row (a power of
   * two), n*cpr chunks per tile (at most the tile's bytes / 16). */
  const int cpr = ASYNC ? ti / VEC : 1;
  const int cshift = __ffs(cpr) - 1;
  const int nchunk = ASYNC ? (int)n * cpr : 0;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t o = u / tiles, tl = u - o * tiles;
    const int64_t c = tl * ti + col;
    const bool ok = c < inner;
    const int64_t base = (o * n + slot) * inner + c;
    const T *xb = x + (ok ? base : 0);
    T *yb = y + (ok ? base : 0);
    /* Rows of this thread; at most n, and n*ti fits in shared memory. */
    const int cnt = ok && slot < n ? (int)((n - slot + RS - 1) / RS) : 0;
    /* Row 0 of the tile in x and y, and the inner positions it still has. */
    const int64_t t0 = o * n * inner + tl * ti;
    const int64_t cols_left = inner - tl * ti;

    /* Pass 1: global -> shared, thread maximum. */
    T m = ninf;
    if constexpr (ASYNC) {
      __syncthreads(); /* the previous unit's readers of the tile are done */
#pragma unroll 4
      for (int q = t; q < nchunk; q += B) {
        const int j = q >> cshift, p = q & (cpr - 1);
        if ((int64_t)p * VEC < cols_left)
          sm_cp_async16(tile + (int64_t)q * VEC, x + t0 + (int64_t)j * inner + p * VEC);
      }
      sm_cp_async_wait_all();
      __syncthreads();
#pragma unroll 8
      for (int i = 0; i < cnt; ++i) m = sm_max_op()(m, tile[t + i * B]);
    } else {
      int k = 0;
      for (; k + U <= cnt; k += U) {
        T xv[U];
#pragma unroll
        for (int e = 0; e < U; ++e) xv[e] = xb[(int64_t)(k + e) * stride];
#pragma unroll
        for (int e = 0; e < U; ++e) {
          tile[t + (k + e) * B] = xv[e];
          m = sm_max_op()(m, xv[e]);
        }
      }
      for (; k < cnt; ++k) {
        const T xv = xb[(int64_t)k * stride];
        tile[t + k * B] = xv;
        m = sm_max_op()(m, xv);
      }
    }
    const T M = sm_col_allreduce(m, sm_max_op(), ti, sh);

    /* Pass 2: exponentials against the fibre maximum, kept in the tile. */
    double s = 0.0;
#pragma unroll 4
    for (int i = 0; i < cnt; ++i) {
      const T ex = sm_exp(tile[t + i * B] - M);
      tile[t + i * B] = ex;
      s += (double)ex;
    }
    const double S = sm_col_allreduce(s, sm_sum_op(), ti, sh);
    const T inv = (T)(1.0 / S);

    /* Pass 3: write. */
    if constexpr (ASYNC) {
      /* Slot 0 holds every column once (t < ti); the barrier also makes
       * every thread's exponentials visible to the chunk writers. */
      if (t < ti) sh_inv[t] = inv;
      __syncthreads();
#pragma unroll 4
      for (int q = t; q < nchunk; q += B) {
        const int j = q >> cshift, p = q & (cpr - 1);
        if ((int64_t)p * VEC < cols_left) {
          T v[VEC];
          if constexpr (VEC == 4) {
            const float4 w = *reinterpret_cast<const float4 *>(tile + (int64_t)q * VEC);
            v[0] = w.x * sh_inv[p * VEC];
            v[1] = w.y * sh_inv[p * VEC + 1];
            v[2] = w.z * sh_inv[p * VEC + 2];
            v[3] = w.w * sh_inv[p * VEC + 3];
          } else {
            const double2 w = *reinterpret_cast<const double2 *>(tile + (int64_t)q * VEC);
            v[0] = w.x * sh_inv[p * VEC];
            v[1] = w.y * sh_inv[p * VEC + 1];
          }
          bk_vstore_cs<VEC>(y + t0 + (int64_t)j * inner + p * VEC, v);
        }
      }
    } else {
#pragma unroll 8
      for (int i = 0; i < cnt; ++i) __stcs(yb + (int64_t)i * stride, tile[t + i * B] * inv);
    }
  }
}

/*
 * Line tiles: the middle-axis line kernel gives each row of a tile a whole
 * 128-byte memory line (SM_LN_TI<T> = 32 float32 / 16 float64 inner
 * positions, 8 chunks of 16 bytes), so every warp access covers 4 full
 * lines. 256 threads: thread t owns chunk p = t%8 of the tile rows
 * j = r + 32k (r = t/8) and only ever touches those chunks, in registers
 * or in its own shared-memory slots, so its own cp.async wait is the only
 * synchronisation its data needs. x and y are 16-byte aligned and inner a
 * multiple of VEC, so a chunk is either wholly inside the tile's inner
 * range or wholly past it.
 */
static constexpr int SM_LN_THREADS = 256;
static constexpr int SM_LN_SLOTS = 32; /* row slots: threads / 8 chunks */
template <typename T> static constexpr int SM_LN_TI = 8 * sm_traits<T>::vec;
/* Static shared memory of the line kernel: the column folds' warp
 * partials, one T and one double per warp and column. */
template <typename T>
static constexpr int64_t SM_LN_STATIC =
    (int64_t)(SM_LN_THREADS / 32) * SM_LN_TI<T> * (int64_t)(sizeof(T) + sizeof(double));

/* Column reduction over a line tile: thread t holds VEC values for the
 * columns (t%8)*VEC + e. Lanes with the same t%8 are folded by a butterfly
 * over lane bits 3 and 4, then the 8 warps' results in warp order through
 * sh (8 * 8*VEC entries); every thread ends with its columns' results. */
template <int VEC, typename A, typename Op>
static __device__ __forceinline__ void sm_line_fold(A (&v)[VEC], Op op, A *sh) {
  constexpr int TI = 8 * VEC;
  const int t = (int)threadIdx.x, lane = t & 31, warp = t >> 5, p = t & 7;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    v[e] = op(v[e], __shfl_xor_sync(SM_FULL_MASK, v[e], 8));
    v[e] = op(v[e], __shfl_xor_sync(SM_FULL_MASK, v[e], 16));
  }
  if (lane < 8) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) sh[warp * TI + p * VEC + e] = v[e];
  }
  __syncthreads();
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    A r = sh[p * VEC + e];
#pragma unroll
    for (int w = 1; w < SM_LN_THREADS / 32; ++w) r = op(r, sh[w * TI + p * VEC + e]);
    v[e] = r;
  }
}

/*
 * Softmax along the middle axis, one block per (outer index, line tile):
 * the whole fibre tile (n rows of 128 bytes) is held on chip, so x is read
 * once and y written once. Thread t has K = ceil((n - r)/32) rows (none
 * when r >= n, or when its chunk lies past inner); the first KR of them
 * sit in registers (one 16-byte chunk each) and the others in dynamic
 * shared memory, the chunk of row j = r + 32k (k >= KR) at byte
 * ((k - KR)*256 + t)*16 = (j - 32*KR)*128 + 16*p, so the block needs
 * max(0, n - 32*KR) rows of 128 bytes there. All loads are issued before
 * the first use: register chunks as 16-byte loads, shared chunks as
 * cp.async. Pass 1: maximum (register chunks first, while the copies
 * land), column maximum; pass 2: exp(x - M) in T kept in place, float64
 * sum in the thread's row order, column sum; pass 3: scale by (T)(1/S),
 * 16-byte streaming stores. Two block barriers per tile (the column
 * folds). Register chunks a thread does not have hold -inf: they leave the
 * maximum unchanged, add nothing to the sum and are never stored. Same
 * formulas as the other middle-axis kernels, so the IEEE rules hold
 * unchanged. MINB: resident blocks per multiprocessor the register budget
 * is sized for (the launcher sizes the shared-memory carveout to match).
 * tiles_div divides by the tiles per outer index, ceil(inner/TI).
 */
template <typename T, int KR, int MINB>
static __global__ void __launch_bounds__(SM_LN_THREADS, MINB)
    softmax_inner_line_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t outer,
                              int64_t n, int64_t inner, bk_divider tiles_div) {
  constexpr int VEC = sm_traits<T>::vec;
  constexpr int TI = SM_LN_TI<T>;
  constexpr int CSTEP = SM_LN_THREADS * VEC; /* elements between a thread's slots */
  /* Whether pass 2 skips the register rows a thread does not have. Taking
   * their exponentials gives the same bits: exp(-inf - M) adds +0, or NaN
   * where M = -inf, and then every real entry of the column is -inf or
   * NaN, so its sum is NaN anyway. The choice only steers code generation:
   * each dtype keeps to its register budgets without spills this way. */
  constexpr bool SKIP_MISSING = sizeof(T) == 4;
  extern __shared__ __align__(16) unsigned char sm_dyn[];
  T *const mine = reinterpret_cast<T *>(sm_dyn) + (int64_t)threadIdx.x * VEC;
  __shared__ T sh_m[(SM_LN_THREADS / 32) * TI];
  __shared__ double sh_s[(SM_LN_THREADS / 32) * TI];
  const T ninf = (T)-INFINITY;
  const int t = (int)threadIdx.x, p = t & 7, r = t >> 3;
  const int64_t tiles = (inner + TI - 1) / TI;
  const int64_t units = outer * tiles;
  const int64_t rstride = (int64_t)SM_LN_SLOTS * inner;
  const int K = n > r ? (int)((n - r + SM_LN_SLOTS - 1) / SM_LN_SLOTS) : 0;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t o = (int64_t)bk_divider_q(tiles_div, (uint64_t)u), tl = u - o * tiles;
    const int64_t c = tl * TI + p * VEC;
    const int Kt = c < inner ? K : 0; /* this thread's rows in this tile */
    const int64_t off = Kt > 0 ? (o * n + r) * inner + c : 0;
    const T *xs = x + off;
    T *ys = y + off;

    T a[KR][VEC];
#pragma unroll
    for (int k = 0; k < KR; ++k) {
      if (k < Kt) {
        bk_ld16(xs + k * rstride, a[k]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) a[k][e] = ninf;
      }
    }
#pragma unroll 4
    for (int k = KR; k < Kt; ++k) sm_cp_async16(mine + (k - KR) * CSTEP, xs + k * rstride);
    sm_cp_async_commit();

    /* Pass 1: maximum, registers first while the copies land. */
    T m[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) m[e] = ninf;
#pragma unroll
    for (int k = 0; k < KR; ++k)
#pragma unroll
      for (int e = 0; e < VEC; ++e) m[e] = sm_max_op()(m[e], a[k][e]);
    sm_cp_async_wait0();
#pragma unroll 4
    for (int k = KR; k < Kt; ++k) {
      T v[VEC];
      bk_vload<VEC>(mine + (k - KR) * CSTEP, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) m[e] = sm_max_op()(m[e], v[e]);
    }
    sm_line_fold<VEC>(m, sm_max_op(), sh_m);

    /* Pass 2: exponentials against the column maximum, float64 sums. */
    double s[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) s[e] = 0.0;
#pragma unroll
    for (int k = 0; k < KR; ++k) {
      if (SKIP_MISSING ? k < Kt : true) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const T ex = sm_exp(a[k][e] - m[e]);
          a[k][e] = ex;
          s[e] += (double)ex;
        }
      }
    }
#pragma unroll 4
    for (int k = KR; k < Kt; ++k) {
      T v[VEC];
      bk_vload<VEC>(mine + (k - KR) * CSTEP, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        v[e] = sm_exp(v[e] - m[e]);
        s[e] += (double)v[e];
      }
      bk_st16(mine + (k - KR) * CSTEP, v);
    }
    sm_line_fold<VEC>(s, sm_sum_op(), sh_s);
    T inv[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) inv[e] = (T)(1.0 / s[e]);

    /* Pass 3: write. */
#pragma unroll
    for (int k = 0; k < KR; ++k) {
      if (k < Kt) {
        T w[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) w[e] = a[k][e] * inv[e];
        bk_vstore_cs<VEC>(ys + k * rstride, w);
      }
    }
#pragma unroll 4
    for (int k = KR; k < Kt; ++k) {
      T v[VEC];
      bk_vload<VEC>(mine + (k - KR) * CSTEP, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[e] *= inv[e];
      bk_vstore_cs<VEC>(ys + k * rstride, v);
    }
  }
}

/* ---- launchers ------------------------------------------------------------------------ */

template <typename T, int VEC, bool MASKED>
static bk_status softmax_rows_launch(bk_context *ctx, const char *fn, const T *x, const T *mask,
                                     T *y, int64_t rows, int64_t cols) {
  constexpr int EPT = sm_traits<T>::ept;
  cudaStream_t stream = bk_stream(ctx);
  const int64_t sm = bk_cu(ctx)->sm_count;
  const int64_t nvec = cols / VEC;

  if (nvec <= 64) {
    /* Narrow rows: G lanes per row, C vectors per lane, 32/G rows per
     * warp, R rows per lane group in flight; 8 warps a block. */
    int G = 1;
    while (G < nvec && G < 32) G <<= 1;
    const int C = nvec > 32 ? 2 : 1;
    const int64_t per_warp = (int64_t)(32 / G) * sm_narrow_r(C);
    const int64_t units = (rows + per_warp - 1) / per_warp;
    const unsigned blocks = bk_cuda_grid((units + 7) / 8);
    if (C == 1)
      softmax_rows_narrow_kernel<T, VEC, 1, MASKED>
          <<<blocks, 256, 0, stream>>>(x, mask, y, rows, cols, G);
    else
      softmax_rows_narrow_kernel<T, VEC, 2, MASKED>
          <<<blocks, 256, 0, stream>>>(x, mask, y, rows, cols, G);
    return bk__cuda_launched(fn, "softmax_rows_narrow_kernel");
  }

  int64_t nch, clen;
  bk_cuda_split_plan(sm, rows, cols, nvec, &nch, &clen);
  if (nch > 1) {
    /* Few long rows: enough chunks per row to give every multiprocessor
     * about four blocks, none shorter than BK_CUDA_MIN_CHUNK elements. */
    const int64_t units = rows * nch;
    void *scratch = NULL;
    bk_status st = bk__cuda_scratch(ctx, fn, (size_t)units * sizeof(sm_stat), &scratch);
    if (st != BK_OK) return st;
    sm_stat *stats = (sm_stat *)scratch;
    softmax_split_stats_kernel<T, VEC, MASKED>
        <<<bk_cuda_grid(units), 256, 0, stream>>>(x, mask, stats, rows, cols, nch, clen);
    st = bk__cuda_launched(fn, "softmax_split_stats_kernel");
    if (st == BK_OK) {
      softmax_split_apply_kernel<T, VEC, MASKED>
          <<<bk_cuda_grid(units), 256, 0, stream>>>(x, mask, stats, y, rows, cols, nch, clen);
      st = bk__cuda_launched(fn, "softmax_split_apply_kernel");
    }
    bk__cuda_scratch_free(ctx, scratch);
    return st;
  }
  if (cols <= 32 * EPT) {
    softmax_rows_kernel<T, VEC, true, MASKED>
        <<<bk_cuda_grid((rows + 7) / 8), 256, 0, stream>>>(x, mask, y, rows, cols);
    return bk__cuda_launched(fn, "softmax_rows_kernel");
  }
  /* A block per row: the smallest power-of-two block that caches the row,
   * 64 to 1024 threads. A longer row streams its tail and reads it again;
   * 1024-thread blocks (one per multiprocessor) keep the rows in flight
   * few enough for those second reads to come from L2. */
  const int64_t need = (cols + EPT - 1) / EPT;
  int threads = 64;
  while (threads < need && threads < 1024) threads <<= 1;
  softmax_rows_kernel<T, VEC, false, MASKED>
      <<<bk_cuda_grid(rows), threads, 0, stream>>>(x, mask, y, rows, cols);
  return bk__cuda_launched(fn, "softmax_rows_kernel");
}

template <typename T, bool MASKED>
static bk_status softmax_rows(bk_context *ctx, const char *fn, const void *x, const void *mask,
                              void *y, int64_t rows, int64_t cols) {
  constexpr int V = sm_traits<T>::vec;
  /* Rows cached in shared memory (rowcache.cu) take the shapes that suit
   * them; everything else runs on the register paths below. */
  int done = 0;
  const bk_status st = bk__cuda_softmax_rows_cached(ctx, sizeof(T) == 4 ? BK_F32 : BK_F64, x,
                                                    MASKED ? mask : NULL, y, rows, cols, &done);
  if (st != BK_OK || done) return st;
  const bool vec = cols % V == 0 && bk_aligned16(x) && bk_aligned16(y) &&
                   (!MASKED || bk_aligned16(mask));
  if (vec)
    return softmax_rows_launch<T, V, MASKED>(ctx, fn, (const T *)x, (const T *)mask, (T *)y, rows,
                                             cols);
  return softmax_rows_launch<T, 1, MASKED>(ctx, fn, (const T *)x, (const T *)mask, (T *)y, rows,
                                           cols);
}

/* Largest shared-memory tile of the middle-axis tile kernel: 96 KB leaves
 * room for two blocks per multiprocessor (228 KB on sm_90). The attribute
 * is set to this fixed value on every launch, so concurrent callers never
 * lower it under one another. */
static const int64_t SM_TILE_MAX = 96 * 1024;
/* Preferred tile size: three 64 KB blocks share a multiprocessor. */
static const int64_t SM_TILE_FAST = 64 * 1024;

/* Queues softmax_inner_tile_kernel<T, ASYNC> on a tile of ti columns. */
template <typename T, bool ASYNC>
static bk_status softmax_inner_tile_launch(bk_context *ctx, const char *fn, const void *x,
                                           void *y, int64_t outer, int64_t n, int64_t inner,
                                           int ti) {
  const int64_t bytes = n * ti * (int64_t)sizeof(T);
  int threads = 64;
  while (threads < n * ti && threads < 256) threads <<= 1;
  BK_CUDA_TRY(cudaFuncSetAttribute(softmax_inner_tile_kernel<T, ASYNC>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SM_TILE_MAX),
              fn, "cudaFuncSetAttribute");
  BK_CUDA_TRY(cudaFuncSetAttribute(softmax_inner_tile_kernel<T, ASYNC>,
                                   cudaFuncAttributePreferredSharedMemoryCarveout,
                                   (int)cudaSharedmemCarveoutMaxShared),
              fn, "cudaFuncSetAttribute");
  const int64_t units = outer * ((inner + ti - 1) / ti);
  softmax_inner_tile_kernel<T, ASYNC>
      <<<bk_cuda_grid(units), threads, (size_t)bytes, bk_stream(ctx)>>>(
          (const T *)x, (T *)y, outer, n, inner, ti);
  return bk__cuda_launched(fn, "softmax_inner_tile_kernel");
}

/* Shared memory of one multiprocessor on sm_90 (228 KB), and the 1 KB of
 * it the system reserves for every resident block. */
static constexpr int64_t SM_SMEM_PER_SM = 228 * 1024;
static constexpr int64_t SM_SMEM_RESERVED = 1024;

/* The shared-memory capacities (KB per multiprocessor) sm_90 can be
 * configured with. The driver rounds a carveout percentage up to the next
 * of them, so the percentage asked for is the largest that still rounds
 * up to the smallest capacity holding `need` bytes (rounding need itself
 * up could step past that capacity: 195 KB is just over 85% of 228 KB,
 * and 86% of 228 KB is just over 196 KB). */
static int sm_carveout_pct(int64_t need) {
  static const int64_t kb[] = {0, 8, 16, 32, 64, 100, 132, 164, 196, 228};
  for (size_t i = 0; i < sizeof kb / sizeof kb[0]; ++i)
    if (kb[i] * 1024 >= need) return (int)(kb[i] * 1024 * 100 / SM_SMEM_PER_SM);
  return 100;
}

/* Longest fibre the line kernel with KR register rows per thread holds
 * while minb blocks share a multiprocessor: 32*KR rows in registers plus
 * the 128-byte rows that fit in a minb-th of the shared memory after the
 * block's static arrays (float32's, the larger) and reserved kilobyte. */
static constexpr int64_t sm_ln_nmax(int kr, int minb) {
  return (int64_t)SM_LN_SLOTS * kr +
         (SM_SMEM_PER_SM / minb - SM_SMEM_RESERVED - SM_LN_STATIC<float>) / 128;
}

/* Fibre lengths served by line tiles, both dtypes. Below SM_LN_NMIN rows
 * some of a tile's 32 row slots would idle; above SM_LN_NMAX the tile
 * (SM_LN_NMAX rows = 174 KB) no longer fits on chip twice per
 * multiprocessor, registers included. */
static constexpr int64_t SM_LN_NMIN = SM_LN_SLOTS;
static constexpr int64_t SM_LN_NMAX = sm_ln_nmax(16, 2);
static_assert(sm_ln_nmax(2, 6) == 336 && sm_ln_nmax(4, 4) == 552 && sm_ln_nmax(8, 3) == 832 &&
                  sm_ln_nmax(8, 2) == 1136 && SM_LN_NMAX == 1392,
              "the bounds listed at softmax_inner_line");

/* Queues softmax_inner_line_kernel<T, KR, MINB> (x, y 16-byte aligned,
 * inner a multiple of the vector width, n <= sm_ln_nmax(KR, MINB)). The
 * dynamic shared-memory limit is the instantiation's fixed maximum, set on
 * every launch (never lowered under a concurrent caller); the carveout
 * asks for the shared memory of MINB resident blocks only, so the rest of
 * the on-chip memory stays L1, which the register loads in flight need. */
template <typename T, int KR, int MINB>
static bk_status softmax_inner_line_launch(bk_context *ctx, const char *fn, const void *x,
                                           void *y, int64_t outer, int64_t n, int64_t inner) {
  constexpr int64_t reg_rows = (int64_t)SM_LN_SLOTS * KR;
  constexpr int64_t smem_max = (sm_ln_nmax(KR, MINB) - reg_rows) * 128;
  const int64_t bytes = n > reg_rows ? (n - reg_rows) * 128 : 0;
  const int64_t need = MINB * (bytes + SM_LN_STATIC<T> + SM_SMEM_RESERVED);
  auto kern = softmax_inner_line_kernel<T, KR, MINB>;
  BK_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem_max),
              fn, "cudaFuncSetAttribute");
  BK_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   sm_carveout_pct(need)),
              fn, "cudaFuncSetAttribute");
  const int64_t tiles = (inner + SM_LN_TI<T> - 1) / SM_LN_TI<T>;
  kern<<<bk_cuda_grid(outer * tiles), SM_LN_THREADS, (size_t)bytes, bk_stream(ctx)>>>(
      (const T *)x, (T *)y, outer, n, inner, bk_divider_make((uint64_t)tiles));
  return bk__cuda_launched(fn, "softmax_inner_line_kernel");
}

/*
 * Line-tile path (SM_LN_NMIN <= n <= SM_LN_NMAX). The register share of
 * the fibre grows with n so that the shared-memory share leaves room for
 * as many resident blocks as the registers allow; each bound is
 * sm_ln_nmax(KR, MINB) of its instantiation (32*KR register rows plus the
 * shared rows MINB blocks leave room for):
 *   float32  n   32..336   KR  2, 6 blocks per multiprocessor (<= 40 registers)
 *            n  337..552   KR  4, 4 blocks (<= 64 registers)
 *            n  553..832   KR  8, 3 blocks (<= 80 registers)
 *            n  833..1136  KR  8, 2 blocks (<= 128 registers)
 *            n 1137..1392  KR 16, 2 blocks
 *   float64  n   32..552   KR  4, 4 blocks (<= 64 registers)
 *            n  553..832   KR  8, 3 blocks
 *            n  833..1136  KR  8, 2 blocks
 *            n 1137..1392  KR 16, 2 blocks
 * float64 starts at KR 4 and 4 blocks: at 6 blocks (40 registers) its
 * exponentials spill.
 */
template <typename T>
static bk_status softmax_inner_line(bk_context *ctx, const char *fn, const void *x, void *y,
                                    int64_t outer, int64_t n, int64_t inner) {
  if constexpr (sizeof(T) == 4) {
    if (n <= sm_ln_nmax(2, 6))
      return softmax_inner_line_launch<T, 2, 6>(ctx, fn, x, y, outer, n, inner);
  }
  if (n <= sm_ln_nmax(4, 4))
    return softmax_inner_line_launch<T, 4, 4>(ctx, fn, x, y, outer, n, inner);
  if (n <= sm_ln_nmax(8, 3))
    return softmax_inner_line_launch<T, 8, 3>(ctx, fn, x, y, outer, n, inner);
  if (n <= sm_ln_nmax(8, 2))
    return softmax_inner_line_launch<T, 8, 2>(ctx, fn, x, y, outer, n, inner);
  return softmax_inner_line_launch<T, 16, 2>(ctx, fn, x, y, outer, n, inner);
}

/* Tile path of softmax_inner: returns BK_OK with *done = false when the
 * fibre tile does not fit in shared memory. With 16-byte aligned x and y
 * and rows of inner*sizeof(T) a multiple of 16 bytes, rows wider than half
 * a line and fibres of SM_LN_NMIN..SM_LN_NMAX rows go to line tiles;
 * other such tiles are loaded with cp.async and may be up to 96 KB (two
 * blocks per multiprocessor) while their row segments stay within 128
 * bytes, else they keep to 64 KB (three blocks); otherwise the
 * register-staged load fills tiles of up to 64 KB. */
template <typename T>
static bk_status softmax_inner_tile(bk_context *ctx, const char *fn, const void *x, void *y,
                                    int64_t outer, int64_t n, int64_t inner, bool *done) {
  *done = false;
  int tmax = 1;
  while (tmax < inner && tmax < 32) tmax <<= 1;
  const int tmin = tmax < 8 ? tmax : 8;
  const int64_t esz = (int64_t)sizeof(T);
  if (n > SM_TILE_MAX / (esz * tmin)) return BK_OK;
  const bool async = bk_aligned16(x) && bk_aligned16(y) && (inner * esz) % 16 == 0 &&
                     tmin * esz >= 16;
  if (async && inner * esz > 64 && n >= SM_LN_NMIN && n <= SM_LN_NMAX) {
    *done = true;
    return softmax_inner_line<T>(ctx, fn, x, y, outer, n, inner);
  }
  int ti = tmax;
  if (async) {
    while (ti > tmin && (n * ti * esz > SM_TILE_MAX ||
                         (n * ti * esz > SM_TILE_FAST && ti * esz > 128)))
      ti >>= 1;
  } else {
    while (ti > tmin && n * ti * esz > SM_TILE_FAST) ti >>= 1;
  }
  *done = true;
  if (async) return softmax_inner_tile_launch<T, true>(ctx, fn, x, y, outer, n, inner, ti);
  return softmax_inner_tile_launch<T, false>(ctx, fn, x, y, outer, n, inner, ti);
}

template <typename T>
static bk_status softmax_inner(bk_context *ctx, const char *fn, const void *x, void *y,
                               int64_t outer, int64_t n, int64_t inner) {
  constexpr int EPT = sm_traits<T>::ept;
  bool done = false;
  const bk_status st = softmax_inner_tile<T>(ctx, fn, x, y, outer, n, inner, &done);
  if (st != BK_OK || done) return st;
  /* Fibres too long for the shared-memory tile. Tile width: up to 32 inner
   * positions (128-byte row segments in float32), narrowed to 16 while
   * that lets a block of at most 512 threads cache more of the fibre.
   * Blocks stay at 512 threads or fewer so that two share a
   * multiprocessor; rows beyond the cache are streamed and read again from
   * L2 (a block's tile is at most n*ti elements). */
  int ti = 1;
  while (ti < inner && ti < 32) ti <<= 1;
  const int64_t slots_needed = (n + EPT - 1) / EPT;
  while (ti > 16 && slots_needed * ti > 512) ti >>= 1;
  const int64_t want = slots_needed * ti;
  int threads = 64;
  while (threads < want && threads < 512) threads <<= 1;
  const int64_t units = outer * ((inner + ti - 1) / ti);
  softmax_inner_kernel<T><<<bk_cuda_grid(units), threads, 0, bk_stream(ctx)>>>(
      (const T *)x, (T *)y, outer, n, inner, ti);
  return bk__cuda_launched(fn, "softmax_inner_kernel");
}

/* ---- entries -------------------------------------------------------------------------- */

extern "C" bk_status bk__cuda_softmax(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                      int64_t outer, int64_t n, int64_t inner) {
  static const char fn[] = "bk_softmax";
  if (inner == 1) {
    if (dt == BK_F32) return softmax_rows<float, false>(ctx, fn, x, NULL, y, outer, n);
    return softmax_rows<double, false>(ctx, fn, x, NULL, y, outer, n);
  }
  if (dt == BK_F32) return softmax_inner<float>(ctx, fn, x, y, outer, n, inner);
  return softmax_inner<double>(ctx, fn, x, y, outer, n, inner);
}

/* The hard-masked row softmax; bk__cuda_rows_masked_softmax (rows.cu)
 * forwards here. */
extern "C" bk_status bk__cuda_softmax_masked(bk_context *ctx, bk_dtype dt, const void *scores,
                                             const void *mask, void *y, int64_t rows,
                                             int64_t cols) {
  static const char fn[] = "bk_rows_masked_softmax";
  if (dt == BK_F32) return softmax_rows<float, true>(ctx, fn, scores, mask, y, rows, cols);
  return softmax_rows<double, true>(ctx, fn, scores, mask, y, rows, cols);
}
