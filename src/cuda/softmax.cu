/*
 * softmax.cu — CUDA softmax along an axis of a contiguous (outer, n, inner)
 * tensor, and the hard-masked row softmax (bk_rows_masked_softmax's entry in
 * rows.cu calls bk__cuda_softmax_masked here, so both share one row engine).
 *
 * How the work is laid out:
 *  - inner == 1 (rows of length n): rows that fit a warp's registers take
 *    a group of 1-32 lanes each, several rows in flight per group; wider
 *    rows a block each. Rows are read and written as the 16-byte vectors
 *    that overlap them whatever their width (see "covering vectors"), and
 *    element by element only when the buffers are not all 16-byte aligned.
 *    A row held in registers is read once and written once; a block's
 *    elements beyond its register cache are streamed with an online
 *    max/sum and read again for the output (from L2 in practice: a block
 *    re-reads the row it has just read).
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

/* ---- covering vectors ------------------------------------------------------------------ */

/*
 * Rows of any width are read and written as the vectors of VEC elements of
 * the buffer that overlap them, so a row whose width is not a multiple of
 * VEC takes 16-byte accesses too (the buffers start 16-byte aligned; VEC ==
 * 1 otherwise). Row r starts at flat element p = r*cols; its vector q
 * (0 <= q < nv) is the buffer's vector p/VEC + q, whose element e is column
 * q*VEC + e - lo of the row (lo = p mod VEC). Elements of the first and
 * last vector that belong to the neighbouring rows are read as -inf, so
 * they enter neither the maximum (fmax) nor the sum (their exponential is
 * +0 against any row maximum that does not already make the row NaN), and
 * are never written. Blocked elements of a masked row are read as -inf the
 * same way and written as +0 by their allowed bit, so a row with no allowed
 * entry comes out all +0 without a test of its own, and blocked scores
 * never reach the arithmetic. Only the buffer's last vector can reach past
 * the buffer; it is read element by element (sm_load, sm_tail_row).
 */
/* The row geometry of a launch: VEC elements a vector (16 bytes, or 1 when
 * the buffers are not all 16-byte aligned), and whether every row is whole
 * vectors (cols a multiple of VEC), so that no row has a partial vector and
 * the tests for one compile away. */
template <int VEC_, bool WHOLE_> struct sm_geo {
  static constexpr int vec = VEC_;
  static constexpr bool whole = VEC_ == 1 || WHOLE_;
};

struct sm_row {
  int64_t v0; /* the buffer's vector that holds the row's first element */
  int64_t nv; /* vectors overlapping the row */
  int lo;     /* element e of vector q is column q*VEC + e - lo */
};

template <typename GEO>
static __device__ __forceinline__ sm_row sm_row_at(int64_t r, int64_t cols) {
  constexpr int VEC = GEO::vec;
  const int64_t p = r * cols;
  sm_row w;
  w.v0 = p / VEC;
  if constexpr (GEO::whole) {
    w.lo = 0;
    w.nv = cols / VEC;
  } else {
    w.lo = (int)(p - w.v0 * VEC);
    w.nv = (w.lo + cols + VEC - 1) / VEC;
  }
  return w;
}

/* The most vectors a row of cols elements overlaps. */
template <int VEC> static int64_t sm_row_vectors(int64_t cols) {
  return cols % VEC == 0 ? cols / VEC : (cols + 2 * VEC - 2) / VEC;
}

/* The buffer's vector v. With TAIL (rows that touch the buffer's last
 * vector when the length is not a multiple of VEC: sm_tail_row), elements
 * at or past end read as 0; no other vector can reach past the buffer, so
 * the loads of every other row carry no test that would keep them from
 * being issued together. */
template <typename T, int VEC, bool TAIL>
static __device__ __forceinline__ void sm_load(const T *p, int64_t v, int64_t end, T *t) {
  if constexpr (VEC == 1 || !TAIL) {
    bk_vload<VEC>(p + v * VEC, t);
  } else if ((v + 1) * VEC <= end) {
    bk_vload<VEC>(p + v * VEC, t);
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) t[e] = v * VEC + e < end ? p[v * VEC + e] : (T)0;
  }
}

/* The first row that touches the buffer's last vector when that vector
 * reaches past the buffer (the length not a multiple of VEC), else rows:
 * those rows are the only ones whose loads are tested (TAIL). A row
 * narrower than a vector can share the last vector with the next. */
template <typename GEO>
static __device__ __forceinline__ int64_t sm_tail_row(int64_t rows, int64_t cols) {
  constexpr int VEC = GEO::vec;
  const int64_t end = rows * cols;
  if (GEO::whole || end % VEC == 0) return rows;
  return (end - 1) / VEC * VEC / cols;
}

/* Whether every element of vector q of row w lies inside the row. */
template <typename GEO>
static __device__ __forceinline__ bool sm_inside(const sm_row &w, int64_t q, int64_t cols) {
  constexpr int VEC = GEO::vec;
  const int64_t j0 = q * VEC - w.lo;
  return GEO::whole || (j0 >= 0 && j0 + VEC <= cols);
}

/* Vector q of row w, as loaded into t (and, MASKED, its mask into mk):
 * elements outside the row and blocked ones become -inf; returns the bits
 * 1 << e of the allowed elements inside the row (MASKED; else 0). */
template <typename T, typename GEO, bool MASKED>
static __device__ __forceinline__ unsigned sm_fix(const sm_row &w, int64_t q, int64_t cols, T *t,
                                                  const T *mk) {
  constexpr int VEC = GEO::vec;
  const int64_t j0 = q * VEC - w.lo;
  if constexpr (MASKED) {
    unsigned ok = 0;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const bool a = (GEO::whole || (uint64_t)(j0 + e) < (uint64_t)cols) && mk[e] != (T)0;
      ok |= (a ? 1u : 0u) << e;
      t[e] = a ? t[e] : (T)-INFINITY;
    }
    return ok;
  } else {
    if (!sm_inside<GEO>(w, q, cols)) {
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if ((uint64_t)(j0 + e) >= (uint64_t)cols) t[e] = (T)-INFINITY;
    }
    return 0u;
  }
}

/* Stores vector q of row w: whole when it lies inside the row, else its
 * elements inside the row one by one. */
template <typename T, typename GEO>
static __device__ __forceinline__ void sm_write(T *y, const sm_row &w, int64_t q, int64_t cols,
                                                const T *o) {
  constexpr int VEC = GEO::vec;
  const int64_t v = w.v0 + q;
  if (sm_inside<GEO>(w, q, cols)) {
    bk_vstore_cs<VEC>(y + v * VEC, o);
  } else {
    const int64_t j0 = q * VEC - w.lo;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      if ((uint64_t)(j0 + e) < (uint64_t)cols) __stcs(y + v * VEC + e, o[e]);
  }
}

/* Output element: e * inv, or +0 for a blocked one (bit e of ok clear). */
template <typename T, bool MASKED>
static __device__ __forceinline__ T sm_out(T ex, T inv, unsigned ok, int e) {
  if constexpr (MASKED) return ((ok >> e) & 1u) ? ex * inv : (T)0;
  return ex * inv;
}

/* ---- kernels: rows in a lane group's registers ---------------------------------------- */

/* Butterfly over the G lanes of an aligned lane group (G a power of two,
 * 1..32): xor offsets below G never leave the group, every lane of the
 * warp takes part, and every lane of a group ends with the same value (one
 * fixed tree, as in sm_warp_allreduce). */
template <typename A, typename Op>
static __device__ __forceinline__ A sm_lanes_allreduce(A v, Op op, int G) {
  for (int off = 1; off < G; off <<= 1) v = op(v, __shfl_xor_sync(SM_FULL_MASK, v, off));
  return v;
}

/* Vectors a lane of the group kernel holds (R rows of C vectors): eight
 * float32 vectors, 128 bytes of loads in flight before the first is used;
 * four with a mask (the mask's loads as many bytes again) and four of
 * float64, whose exponentials need the registers; eight elements when they
 * are read one by one. */
template <typename T, int VEC, bool MASKED> static __host__ __device__ constexpr int sm_group_b() {
  return VEC == 1 ? 8 : (MASKED || sizeof(T) == 8) ? 4 : 8;
}
/* The most vectors a lane of the group kernel takes of one row: the
 * budget, and for elements read one by one the register cache of the
 * block kernel (16 float32, 8 float64), as a warp per row. */
template <typename T, int VEC, bool MASKED> static __host__ __device__ constexpr int sm_group_cmax() {
  return VEC == 1 ? sm_traits<T>::ept : sm_group_b<T, VEC, MASKED>();
}
/* Rows in flight per lane group. */
template <typename T, int VEC, int C, bool MASKED>
static __host__ __device__ constexpr int sm_group_r() {
  return sm_group_b<T, VEC, MASKED>() / C > 1 ? sm_group_b<T, VEC, MASKED>() / C : 1;
}

/* One work unit of the group kernel (rows r0 + k*P, k < R): every load
 * issued, then the elements outside the rows and the blocked ones set to
 * -inf, then row by row the maximum, the exponentials and their sum, and
 * the output. */
template <typename T, typename GEO, int C, bool MASKED, bool TAIL>
static __device__ __forceinline__ void sm_group_unit(const T *__restrict__ x,
                                                     const T *__restrict__ mask,
                                                     T *__restrict__ y, int64_t rows,
                                                     int64_t cols, int64_t r0, int P, int G,
                                                     int g) {
  constexpr int VEC = GEO::vec;
  constexpr int R = sm_group_r<T, VEC, C, MASKED>();
  const int64_t end = rows * cols;
  T v[R][C][VEC];
  sm_row w[R];
  int nv[R]; /* w[k].nv, 0 past the last row */
  unsigned ok = 0;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t r = r0 + (int64_t)k * P;
    w[k] = sm_row_at<GEO>(r, cols);
    nv[k] = r < rows ? (int)w[k].nv : 0;
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const int q = i * G + g;
      if (q < nv[k]) {
        sm_load<T, VEC, TAIL>(x, w[k].v0 + q, end, v[k][i]);
        if constexpr (MASKED) {
          /* The mask folds into bits at once (no branch: the loads of the
           * other vectors are still issued together). */
          T mk[VEC];
          sm_load<T, VEC, TAIL>(mask, w[k].v0 + q, end, mk);
          ok |= sm_fix<T, GEO, MASKED>(w[k], q, cols, v[k][i], mk) << ((k * C + i) * VEC);
        }
      }
    }
  }
  if constexpr (!MASKED) {
#pragma unroll
    for (int k = 0; k < R; ++k)
#pragma unroll
      for (int i = 0; i < C; ++i)
        if (i * G + g < nv[k]) sm_fix<T, GEO, MASKED>(w[k], i * G + g, cols, v[k][i], nullptr);
  }
#pragma unroll
  for (int k = 0; k < R; ++k) {
    T m = (T)-INFINITY;
#pragma unroll
    for (int i = 0; i < C; ++i)
      if (i * G + g < nv[k])
#pragma unroll
        for (int e = 0; e < VEC; ++e) m = sm_max_op()(m, v[k][i][e]);
    const T M = sm_lanes_allreduce(m, sm_max_op(), G);
    double s = 0.0;
#pragma unroll
    for (int i = 0; i < C; ++i)
      if (i * G + g < nv[k])
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const T ex = sm_exp(v[k][i][e] - M);
          v[k][i][e] = ex;
          s += (double)ex;
        }
    const double S = sm_lanes_allreduce(s, sm_sum_op(), G);
    const T inv = (T)(1.0 / S);
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const int q = i * G + g;
      if (q < nv[k]) {
        T o[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          o[e] = sm_out<T, MASKED>(v[k][i][e], inv, ok, (k * C + i) * VEC + e);
        sm_write<T, GEO>(y, w[k], q, cols, o);
      }
    }
  }
}

/*
 * Softmax of rows that fit a lane group's registers: G lanes per row (a
 * power of two, 1..32) and C vectors per lane (sm_group_plan), so a warp
 * holds P = 32/G rows at a time, R = sm_group_r rows per group in flight.
 * Lane g of a group owns the vectors g + i*G (i < C) of its row. Work unit
 * u of a warp is the P*R consecutive rows [u*P*R, (u+1)*P*R): step k takes
 * rows u*P*R + k*P + lane/G, so a warp's loads of one step cover P
 * adjacent rows. Bit (k*C + i)*VEC + e of `ok` marks an allowed element
 * (MASKED). Same formulas as the block kernel: exp in T against the row
 * maximum, float64 sum, inv = (T)(1/S).
 */
template <typename T, typename GEO, int C, bool MASKED>
static __global__ void __launch_bounds__(256, 3)
    softmax_group_kernel(const T *__restrict__ x, const T *__restrict__ mask, T *__restrict__ y,
                         int64_t rows, int64_t cols, int G) {
  constexpr int VEC = GEO::vec;
  constexpr int R = sm_group_r<T, VEC, C, MASKED>();
  const int lane = (int)(threadIdx.x & 31);
  const int g = lane & (G - 1);
  const int P = 32 / G;
  const int64_t gi = lane / G;
  const int64_t per_unit = (int64_t)P * R;
  const int64_t units = (rows + per_unit - 1) / per_unit;
  const int64_t tail_row = sm_tail_row<GEO>(rows, cols);
  const int64_t wpb = (int64_t)(blockDim.x >> 5);
  const int64_t wstep = (int64_t)gridDim.x * wpb;
  for (int64_t u = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); u < units; u += wstep) {
    const int64_t r0 = u * per_unit + gi;
    if ((u + 1) * per_unit > tail_row)
      sm_group_unit<T, GEO, C, MASKED, true>(x, mask, y, rows, cols, r0, P, G, g);
    else
      sm_group_unit<T, GEO, C, MASKED, false>(x, mask, y, rows, cols, r0, P, G, g);
  }
}

/* The output of vectors q0, q0 + step, ... below q1 of row w, read again:
 * exp(x - M) * inv, blocked entries +0. */
template <typename T, typename GEO, bool MASKED, bool TAIL>
static __device__ __forceinline__ void sm_emit(const T *__restrict__ x, const T *__restrict__ mask,
                                               T *__restrict__ y, int64_t rows, int64_t cols,
                                               const sm_row &w, int64_t q0, int64_t q1,
                                               int64_t step, T M, T inv) {
  constexpr int VEC = GEO::vec;
  const int64_t end = rows * cols;
#pragma unroll 2
  for (int64_t q = q0; q < q1; q += step) {
    T t[VEC], mk[VEC], o[VEC];
    sm_load<T, VEC, TAIL>(x, w.v0 + q, end, t);
    if constexpr (MASKED) sm_load<T, VEC, TAIL>(mask, w.v0 + q, end, mk);
    const unsigned a = sm_fix<T, GEO, MASKED>(w, q, cols, t, mk);
#pragma unroll
    for (int e = 0; e < VEC; ++e) o[e] = sm_out<T, MASKED>(sm_exp(t[e] - M), inv, a, e);
    sm_write<T, GEO>(y, w, q, cols, o);
  }
}

/* The output of vectors [q0, min(nv, q0 + clen)) of row r (split path). */
template <typename T, typename GEO, bool MASKED, bool TAIL>
static __device__ __forceinline__ void sm_split_write(const T *__restrict__ x,
                                                      const T *__restrict__ mask,
                                                      T *__restrict__ y, int64_t rows,
                                                      int64_t cols, int64_t r, int64_t q0,
                                                      int64_t clen, T M, T inv) {
  const sm_row w = sm_row_at<GEO>(r, cols);
  const int64_t q1 = q0 + clen < w.nv ? q0 + clen : w.nv;
  sm_emit<T, GEO, MASKED, TAIL>(x, mask, y, rows, cols, w, q0 + threadIdx.x, q1, blockDim.x, M,
                                inv);
}

/* ---- kernels: a block per row ------------------------------------------------------------ */

/* Row r of the block kernel (see below). */
template <typename T, typename GEO, bool MASKED, bool TAIL>
static __device__ __forceinline__ void sm_block_row(const T *__restrict__ x,
                                                    const T *__restrict__ mask,
                                                    T *__restrict__ y, int64_t rows,
                                                    int64_t cols, int64_t r, T *sh_max,
                                                    double *sh_sum) {
  constexpr int VEC = GEO::vec;
  constexpr int NC = sm_traits<T>::ept / VEC;
  const int64_t G = (int64_t)blockDim.x, g = (int64_t)threadIdx.x;
  const int64_t end = rows * cols;
  const sm_row w = sm_row_at<GEO>(r, cols);
  T v[NC][VEC];
  unsigned ok = 0;
#pragma unroll
  for (int i = 0; i < NC; ++i) {
    const int64_t q = i * G + g;
    if (q < w.nv) {
      sm_load<T, VEC, TAIL>(x, w.v0 + q, end, v[i]);
      if constexpr (MASKED) {
        /* The mask folds into bits at once (no branch: the loads of the
         * other vectors are still issued together). */
        T mk[VEC];
        sm_load<T, VEC, TAIL>(mask, w.v0 + q, end, mk);
        ok |= sm_fix<T, GEO, MASKED>(w, q, cols, v[i], mk) << (i * VEC);
      }
    }
  }
  T m = (T)-INFINITY;
#pragma unroll
  for (int i = 0; i < NC; ++i) {
    const int64_t q = i * G + g;
    if (q < w.nv) {
      if constexpr (!MASKED) sm_fix<T, GEO, MASKED>(w, q, cols, v[i], nullptr);
#pragma unroll
      for (int e = 0; e < VEC; ++e) m = sm_max_op()(m, v[i][e]);
    }
  }
  T um = (T)-INFINITY;
  double us = 0.0;
  for (int64_t q = NC * G + g; q < w.nv; q += 2 * G) {
    /* Two vectors in flight; the second may lie past the row. */
    const bool two = q + G < w.nv;
    T t[2][VEC], tm[2][VEC];
    sm_load<T, VEC, TAIL>(x, w.v0 + q, end, t[0]);
    if (two) sm_load<T, VEC, TAIL>(x, w.v0 + q + G, end, t[1]);
    if constexpr (MASKED) {
      sm_load<T, VEC, TAIL>(mask, w.v0 + q, end, tm[0]);
      if (two) sm_load<T, VEC, TAIL>(mask, w.v0 + q + G, end, tm[1]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !two) break;
      sm_fix<T, GEO, MASKED>(w, q + h * G, cols, t[h], tm[h]);
#pragma unroll
      for (int e = 0; e < VEC; ++e) sm_online(um, us, t[h][e]);
    }
  }
  const T M = sm_block_allreduce(sm_max_op()(m, um), sm_max_op(), sh_max);

  double s = 0.0;
#pragma unroll
  for (int i = 0; i < NC; ++i) {
    if (i * G + g < w.nv) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const T ex = sm_exp(v[i][e] - M);
        v[i][e] = ex;
        s += (double)ex;
      }
    }
  }
  s += sm_rescale(um, us, M);
  const double S = sm_block_allreduce(s, sm_sum_op(), sh_sum);
  const T inv = (T)(1.0 / S);

#pragma unroll
  for (int i = 0; i < NC; ++i) {
    const int64_t q = i * G + g;
    if (q < w.nv) {
      T o[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) o[e] = sm_out<T, MASKED>(v[i][e], inv, ok, i * VEC + e);
      sm_write<T, GEO>(y, w, q, cols, o);
    }
  }
  sm_emit<T, GEO, MASKED, TAIL>(x, mask, y, rows, cols, w, NC * G + g, w.nv, G, M, inv);
}

/*
 * Softmax of rows (rows, cols) wider than a warp's registers, a block per
 * row: thread g caches the vectors g + i*G (i < NC, G = blockDim) of its
 * row, NC*VEC = ept elements; a longer row streams the rest with an online
 * max/sum and reads it again for the output (from L2 in practice: a block
 * re-reads the row it has just read).
 */
template <typename T, typename GEO, bool MASKED>
static __global__ void __launch_bounds__(1024)
    softmax_block_kernel(const T *__restrict__ x, const T *__restrict__ mask, T *__restrict__ y,
                         int64_t rows, int64_t cols) {
  static_assert(sm_traits<T>::ept <= 32, "the allowed bits fit in one word");
  __shared__ T sh_max[32];
  __shared__ double sh_sum[32];
  const int64_t tail_row = sm_tail_row<GEO>(rows, cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    if (r >= tail_row)
      sm_block_row<T, GEO, MASKED, true>(x, mask, y, rows, cols, r, sh_max, sh_sum);
    else
      sm_block_row<T, GEO, MASKED, false>(x, mask, y, rows, cols, r, sh_max, sh_sum);
  }
}

/* ---- kernels: few long rows, split into chunks ------------------------------------- */

/* One chunk's statistics in the split path. */
struct sm_stat {
  double m; /* maximum over the chunk's allowed elements, -inf if none */
  double s; /* sum of exp(x - m) over them */
};

/*
 * Statistics of chunk c of row r (unit u = r*nch + c): the chunk is the
 * vector range [c*clen, min(nv, (c+1)*clen)) of the row. Four loads are
 * issued before their online updates to keep bytes in flight.
 */
template <typename T, typename GEO, bool MASKED, bool TAIL>
static __device__ __forceinline__ void sm_split_stats(const T *__restrict__ x,
                                                      const T *__restrict__ mask, int64_t rows,
                                                      int64_t cols, int64_t r, int64_t q0,
                                                      int64_t clen, T &m, double &s) {
  constexpr int VEC = GEO::vec;
  const int64_t B = (int64_t)blockDim.x;
  const int64_t end = rows * cols;
  const sm_row w = sm_row_at<GEO>(r, cols);
  const int64_t q1 = q0 + clen < w.nv ? q0 + clen : w.nv;
  int64_t q = q0 + threadIdx.x;
  for (; q + 3 * B < q1; q += 4 * B) {
    T t[4][VEC], mk[4][VEC];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      sm_load<T, VEC, TAIL>(x, w.v0 + q + k * B, end, t[k]);
      if constexpr (MASKED) sm_load<T, VEC, TAIL>(mask, w.v0 + q + k * B, end, mk[k]);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      sm_fix<T, GEO, MASKED>(w, q + k * B, cols, t[k], mk[k]);
#pragma unroll
      for (int e = 0; e < VEC; ++e) sm_online(m, s, t[k][e]);
    }
  }
  for (; q < q1; q += B) {
    T t[VEC], mk[VEC];
    sm_load<T, VEC, TAIL>(x, w.v0 + q, end, t);
    if constexpr (MASKED) sm_load<T, VEC, TAIL>(mask, w.v0 + q, end, mk);
    sm_fix<T, GEO, MASKED>(w, q, cols, t, mk);
#pragma unroll
    for (int e = 0; e < VEC; ++e) sm_online(m, s, t[e]);
  }
}

template <typename T, typename GEO, bool MASKED>
static __global__ void __launch_bounds__(256)
    softmax_split_stats_kernel(const T *__restrict__ x, const T *__restrict__ mask,
                               sm_stat *__restrict__ stats, int64_t rows, int64_t cols,
                               int64_t nch, int64_t clen) {
  __shared__ T sh_max[32];
  __shared__ double sh_sum[32];
  const int64_t tail_row = sm_tail_row<GEO>(rows, cols);
  const int64_t units = rows * nch;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t r = u / nch, c = u - r * nch;
    T m = (T)-INFINITY;
    double s = 0.0;
    if (r >= tail_row)
      sm_split_stats<T, GEO, MASKED, true>(x, mask, rows, cols, r, c * clen, clen, m, s);
    else
      sm_split_stats<T, GEO, MASKED, false>(x, mask, rows, cols, r, c * clen, clen, m, s);
    const T M = sm_block_allreduce(m, sm_max_op(), sh_max);
    const double S = sm_block_allreduce(sm_rescale(m, s, M), sm_sum_op(), sh_sum);
    if (threadIdx.x == 0) {
      sm_stat st;
      st.m = (double)M;
      st.s = S;
      stats[u] = st;
    }
  }
}

/*
 * Output of chunk c of row r: warp 0 folds the row's chunk statistics in a
 * fixed order (lane l takes chunks l, l+32, ...; then a butterfly), then the
 * block writes the chunk.
 */
template <typename T, typename GEO, bool MASKED>
static __global__ void __launch_bounds__(256)
    softmax_split_apply_kernel(const T *__restrict__ x, const T *__restrict__ mask,
                               const sm_stat *__restrict__ stats, T *__restrict__ y,
                               int64_t rows, int64_t cols, int64_t nch, int64_t clen) {
  __shared__ double sh_row[2];
  const int64_t tail_row = sm_tail_row<GEO>(rows, cols);
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
      for (int64_t j = threadIdx.x; j < nch; j += 32)
        s += st[j].m == -INFINITY ? st[j].s : st[j].s * exp(st[j].m - M);
      const double S = sm_warp_allreduce(s, sm_sum_op());
      if (threadIdx.x == 0) {
        sh_row[0] = M;
        sh_row[1] = S;
      }
    }
    __syncthreads();
    const T M = (T)sh_row[0];
    const T inv = (T)(1.0 / sh_row[1]);
    if (r >= tail_row)
      sm_split_write<T, GEO, MASKED, true>(x, mask, y, rows, cols, r, c * clen, clen, M, inv);
    else
      sm_split_write<T, GEO, MASKED, false>(x, mask, y, rows, cols, r, c * clen, clen, M, inv);
  }
}

/* ---- launchers ------------------------------------------------------------------------ */

/* Paths of the register row softmax: the planner's (a lane group when a
 * warp holds the row, else a block per row or the split path), a block per
 * row, the split path. */
enum { SM_PATH_PLAN = 0, SM_PATH_BLOCK = 1, SM_PATH_SPLIT = 2 };
/* Strategies a test can ask for (bk__cuda_rows_force): 0 the planner's;
 * then odd values element by element and even ones 16-byte vectors, on
 * the path (strategy - 1) / 2. */
enum { SM_FORCE_AUTO = 0, SM_FORCE_LAST = 6 };

/*
 * The lane group of a row of nv vectors: *G lanes and *C vectors a lane
 * (powers of two), or false when the row needs more than a warp's
 * registers (32 lanes of sm_group_cmax vectors). Rows of up to eight vectors take
 * a lane per vector. Longer ones take about four vectors a lane, so a
 * row's two reductions and its reciprocal are shared by 16 float32 or 8
 * float64 elements a lane, but never fewer than eight lanes, so a group's
 * loads of one step are 128 contiguous bytes. Rows read element by element
 * (buffers not all 16-byte aligned) keep eight float32 elements a lane
 * (2.4x faster than a lane per element at 19 columns on the H200) and a
 * lane per float64 element.
 */
template <typename T, int VEC, bool MASKED> static bool sm_group_plan(int64_t nv, int *G, int *C) {
  constexpr int CMAX = sm_group_cmax<T, VEC, MASKED>();
  constexpr int S = VEC > 1 ? 4 : sizeof(T) == 4 ? 8 : 1;
  int g = 1;
  if (VEC > 1 && nv <= 8) {
    while (g < nv) g <<= 1;
  } else {
    while ((int64_t)g * S < nv && g < 32) g <<= 1;
    if (VEC > 1 && g < 8) g = 8;
  }
  const int64_t need = (nv + g - 1) / g;
  if (need > CMAX) return false;
  int c = 1;
  while (c < need) c <<= 1;
  *G = g;
  *C = c;
  return true;
}

/* Blocks of eight warps for the group kernel: a warp takes (32/G)*R rows
 * at a time. */
static unsigned sm_group_grid(int64_t rows, int G, int R) {
  const int64_t per_warp = (int64_t)(32 / G) * R;
  const int64_t units = (rows + per_warp - 1) / per_warp;
  return bk_cuda_grid((units + 7) / 8);
}

template <typename T, typename GEO, bool MASKED>
static bk_status softmax_rows_launch(bk_context *ctx, const char *fn, const T *x, const T *mask,
                                     T *y, int64_t rows, int64_t cols, int path) {
  constexpr int VEC = GEO::vec;
  constexpr int EPT = sm_traits<T>::ept;
  constexpr int NC = EPT / VEC;
  cudaStream_t stream = bk_stream(ctx);
  const int64_t sm = bk_cu(ctx)->sm_count;
  const int64_t nv = sm_row_vectors<VEC>(cols);

  int G, C;
  if (path == SM_PATH_PLAN && sm_group_plan<T, VEC, MASKED>(nv, &G, &C)) {
#define SM_GROUP(c)                                                                                \
  softmax_group_kernel<T, GEO, c, MASKED>                                                          \
      <<<sm_group_grid(rows, G, sm_group_r<T, VEC, c, MASKED>()), 256, 0, stream>>>(               \
          x, mask, y, rows, cols, G)
    constexpr int CMAX = sm_group_cmax<T, VEC, MASKED>();
    switch (C) {
    case 1: SM_GROUP(1); break;
    case 2: SM_GROUP(2); break;
    case 4: SM_GROUP(4); break;
    case 8:
      if constexpr (CMAX >= 8) SM_GROUP(8);
      break;
    default:
      if constexpr (CMAX >= 16) SM_GROUP(16);
      break;
    }
#undef SM_GROUP
    return bk__cuda_launched(fn, "softmax_group_kernel");
  }

  int64_t nch, clen;
  bk_cuda_split_plan(sm, rows, cols, nv, &nch, &clen);
  const double inflight = (MASKED ? 2.0 : 1.0) * (double)sizeof(T) * (double)cols * (double)sm;
  if (path == SM_PATH_SPLIT && nv > 1) {
    clen = (nv + 2) / 3;
    nch = (nv + clen - 1) / clen;
  } else if (path == SM_PATH_BLOCK) {
    nch = 1;
  } else if (nch == 1 && nv > 1024 * NC &&
             inflight > (2.0 / 3.0) * (double)bk_cu(ctx)->l2_bytes) {
    /* Rows longer than the largest register cache (measured on rows read
     * element by element), and so long that the rows a block per row keeps in flight
     * (one 1024-thread block per multiprocessor, every operand) pass two
     * thirds of L2: their streamed tails would be read again from memory
     * (27-35% of copy at 87629-131769 columns on the H200). Chunks of the
     * cache's length through the split path read them twice with every
     * block busy: 1.15-1.86x there; shorter rows, whose second reads still
     * hit L2, stay on the block per row (the split path measured 0.88-0.94x
     * at 16201-38513 columns). */
    clen = 1024 * NC;
    nch = (nv + clen - 1) / clen;
  }
  if (nch > 1) {
    /* Few long rows: enough chunks per row to give every multiprocessor
     * about four blocks, none shorter than BK_CUDA_MIN_CHUNK elements. */
    const int64_t units = rows * nch;
    void *scratch = NULL;
    bk_status st = bk__cuda_scratch(ctx, fn, (size_t)units * sizeof(sm_stat), &scratch);
    if (st != BK_OK) return st;
    sm_stat *stats = (sm_stat *)scratch;
    softmax_split_stats_kernel<T, GEO, MASKED>
        <<<bk_cuda_grid(units), 256, 0, stream>>>(x, mask, stats, rows, cols, nch, clen);
    st = bk__cuda_launched(fn, "softmax_split_stats_kernel");
    if (st == BK_OK) {
      softmax_split_apply_kernel<T, GEO, MASKED>
          <<<bk_cuda_grid(units), 256, 0, stream>>>(x, mask, stats, y, rows, cols, nch, clen);
      st = bk__cuda_launched(fn, "softmax_split_apply_kernel");
    }
    bk__cuda_scratch_free(ctx, scratch);
    return st;
  }
  /* A block per row: the smallest power-of-two block that caches the row,
   * 64 to 1024 threads. A longer row streams its tail and reads it again;
   * 1024-thread blocks (one per multiprocessor) keep the rows in flight
   * few enough for those second reads to come from L2. */
  const int64_t need = (nv + NC - 1) / NC;
  int threads = 64;
  while (threads < need && threads < 1024) threads <<= 1;
  softmax_block_kernel<T, GEO, MASKED>
      <<<bk_cuda_grid(rows), threads, 0, stream>>>(x, mask, y, rows, cols);
  return bk__cuda_launched(fn, "softmax_block_kernel");
}

template <typename T, bool MASKED>
static bk_status softmax_rows(bk_context *ctx, const char *fn, const void *x, const void *mask,
                              void *y, int64_t rows, int64_t cols) {
  constexpr int V = sm_traits<T>::vec;
  /* Rows cached in shared memory (rowcache.cu) take the shapes that suit
   * them; everything else runs on the register paths below. A strategy
   * forced by a test (bk__cuda_rows_force) goes past the row cache. */
  const int force = bk_cu(ctx)->rows_force;
  if (force == SM_FORCE_AUTO) {
    int done = 0;
    const bk_status st = bk__cuda_softmax_rows_cached(
        ctx, sizeof(T) == 4 ? BK_F32 : BK_F64, x, MASKED ? mask : NULL, y, rows, cols, &done);
    if (st != BK_OK || done) return st;
  }
  /* Rows whose width is not a multiple of the vector take the covering
   * vectors above widths measured on the H200 (2026-12-04, seed 1204):
   * float32 rows of more than 64 columns (32 with a mask), float64 rows of
   * more than 32 except those of 65 to 128 vectors. Below, the fixups of
   * each row's first and last vector cost more than the loads they save
   * (covered rows of 1-53 float32 columns without a mask and 1-31 float64
   * columns ran 5-70% slower than element by element); float64 rows of
   * 135-198 columns ran 19-30% faster as a warp of scalars per row than
   * covered by eight vectors a lane. Covered rows ran 1.2-2.6x faster at
   * 64-256 and beyond 1024 float32 columns, masked ones 1.3-2.6x beyond 64. */
  const bool aligned = bk_aligned16(x) && bk_aligned16(y) && (!MASKED || bk_aligned16(mask));
  const int64_t nvc = (cols + 2 * V - 2) / V;
  bool cover = sizeof(T) == 8 ? cols > 16 * V && !(nvc > 64 && nvc <= 128)
                              : cols > (MASKED ? 8 : 16) * V;
  bool vec = cols % V == 0 || cover;
  int path = SM_PATH_PLAN;
  if (force != SM_FORCE_AUTO) {
    vec = force % 2 == 0;
    path = (force - 1) / 2;
  }
  const T *xt = (const T *)x, *mt = (const T *)mask;
  T *yt = (T *)y;
  if (aligned && vec && cols % V == 0)
    return softmax_rows_launch<T, sm_geo<V, true>, MASKED>(ctx, fn, xt, mt, yt, rows, cols, path);
  if (aligned && vec)
    return softmax_rows_launch<T, sm_geo<V, false>, MASKED>(ctx, fn, xt, mt, yt, rows, cols, path);
  return softmax_rows_launch<T, sm_geo<1, true>, MASKED>(ctx, fn, xt, mt, yt, rows, cols, path);
}

/* Test hook (src/core/hooks.h): the loads and path of ctx's row softmax
 * from now on (0 restores the planner); false for a context that is not a
 * CUDA one or a strategy outside the list. */
extern "C" BK_API bool bk__cuda_rows_force(bk_context *ctx, int strategy) {
  if (!ctx || bk_context_device(ctx).kind != BK_DEVICE_CUDA) return false;
  if (strategy < SM_FORCE_AUTO || strategy > SM_FORCE_LAST) return false;
  bk_cu(ctx)->rows_force = strategy;
  return true;
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
