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
 *  - inner > 1: the middle-axis engine of axis.cu (bk__cuda_axis_softmax).
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
 * Softmax of narrow rows (rows, cols), nvec = cols/VEC <= 64 vectors: G
 * lanes per row and C vectors per lane (sm_narrow_plan), so a warp holds
 * P = 32/G rows at a time. Lane g of a group owns the vectors
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

/* The fewest lanes per row whose S slots hold it: G = min(32, pow2ceil(
 * ceil(nvec / S))) lanes and C = pow2ceil(ceil(nvec / G)) vectors per
 * lane. float32 rows read element by element take S = 8: a row's
 * reductions and its reciprocal are shared by few lanes, as in the narrow
 * cross-entropies (19 columns: 2.4x faster than a lane per element on the
 * H200). 16-byte vectors and float64 keep S = 1, a lane per vector up to
 * 32: fewer, longer lanes measured slower there (float32 32 columns of
 * vectors: 2x slower with one lane per row), the loads of a lane no longer
 * adjacent to those of the next. */
template <typename T, int VEC> static constexpr int sm_narrow_slots() {
  return sizeof(T) == 4 && VEC == 1 ? 8 : 1;
}
template <typename T, int VEC> static void sm_narrow_plan(int64_t nvec, int *G, int *C) {
  constexpr int S = sm_narrow_slots<T, VEC>();
  int g = 1;
  while ((int64_t)g * S < nvec && g < 32) g <<= 1;
  const int64_t need = (nvec + g - 1) / g;
  int c = 1;
  while (c < need) c <<= 1;
  *G = g;
  *C = c;
}

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
     * warp, R = 8/C rows per lane group in flight; 8 warps a block. */
    int G, C;
    sm_narrow_plan<T, VEC>(nvec, &G, &C);
    const int64_t per_warp = (int64_t)(32 / G) * sm_narrow_r(C);
    const int64_t units = (rows + per_warp - 1) / per_warp;
    const unsigned blocks = bk_cuda_grid((units + 7) / 8);
    switch (C) {
    case 1:
      softmax_rows_narrow_kernel<T, VEC, 1, MASKED>
          <<<blocks, 256, 0, stream>>>(x, mask, y, rows, cols, G);
      break;
    case 2:
      softmax_rows_narrow_kernel<T, VEC, 2, MASKED>
          <<<blocks, 256, 0, stream>>>(x, mask, y, rows, cols, G);
      break;
    default:
      if constexpr (sm_narrow_slots<T, VEC>() >= 4) {
        if (C == 4)
          softmax_rows_narrow_kernel<T, VEC, 4, MASKED>
              <<<blocks, 256, 0, stream>>>(x, mask, y, rows, cols, G);
        else
          softmax_rows_narrow_kernel<T, VEC, 8, MASKED>
              <<<blocks, 256, 0, stream>>>(x, mask, y, rows, cols, G);
      }
      break;
    }
    return bk__cuda_launched(fn, "softmax_rows_narrow_kernel");
  }

  int64_t nch, clen;
  bk_cuda_split_plan(sm, rows, cols, nvec, &nch, &clen);
  const double inflight = (MASKED ? 2.0 : 1.0) * (double)sizeof(T) * (double)cols * (double)sm;
  if (VEC == 1 && nch == 1 && cols > 1024 * EPT &&
      inflight > (2.0 / 3.0) * (double)bk_cu(ctx)->l2_bytes) {
    /* Rows read element by element, longer than the largest register
     * cache, and so long that the rows a block per row keeps in flight
     * (one 1024-thread block per multiprocessor, every operand) pass two
     * thirds of L2: their streamed tails would be read again from memory
     * (27-35% of copy at 87629-131769 columns on the H200). Chunks of the
     * cache's length through the split path read them twice with every
     * block busy: 1.15-1.86x there; shorter rows, whose second reads still
     * hit L2, stay on the block per row (the split path measured 0.88-0.94x
     * at 16201-38513 columns). */
    clen = 1024 * EPT;
    nch = (nvec + clen - 1) / clen;
  }
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

/* ---- entries -------------------------------------------------------------------------- */

extern "C" bk_status bk__cuda_softmax(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                      int64_t outer, int64_t n, int64_t inner) {
  static const char fn[] = "bk_softmax";
  if (inner == 1) {
    if (dt == BK_F32) return softmax_rows<float, false>(ctx, fn, x, NULL, y, outer, n);
    return softmax_rows<double, false>(ctx, fn, x, NULL, y, outer, n);
  }
  return bk__cuda_axis_softmax(ctx, fn, dt, x, y, outer, n, inner);
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
