/*
 * xent.cu — CUDA cross-entropies: bk_xent_weighted_mean and bk_xent_teacher
 * (loss and student gradient).
 *
 * The losses are read in one pass. Per thread, an online state keeps the
 * running maximum m of the logits and sums taken relative to it, rescaled
 * whenever m grows:
 *  - weighted mean: s = sum exp(x - m), W = sum w, A = sum w*(x - m); the
 *    row's loss is sum w*(lse - x) = log(S)*W - A once the states are
 *    rescaled to the row maximum M (lse - M = log S). No term loses digits
 *    to cancellation: every difference is taken against a maximum.
 *  - teacher: (mS, sS) for the student, (mT, sT) for the teacher and
 *    u = sum exp(T - mT)*(S - mS); the row's loss is log(SS) - U/ST.
 * The states take a batch of elements at a time (the two 16-byte vectors
 * per operand loaded together): one rescale to the batch maximum, then the
 * batch's terms summed as a fixed tree, which keeps the float64 dependency
 * chains short. The float64 teacher loss over 16-byte vectors, a block per
 * row, tests each batch's exponential arguments once for the range of the
 * table exponential and then evaluates them without branches, reading the
 * table from shared memory (xe_tl64_state).
 * A row holding a non-finite logit or weight (or, in float64, a magnitude
 * above 1e150, where the rewritten sums could overflow differently) is
 * evaluated literally instead by the same threads, reading it again: max,
 * then the sum of exponentials, then the terms exactly as contract §3.2 words
 * them (w*(lse - x), or w*lse - w*x when lse - x is not finite), so those
 * rows get the contract's IEEE results.
 * Narrow rows (at most 64 vectors of 16 bytes, or 64 single elements when
 * not aligned) run in lane groups of 1-32 lanes, several rows in flight
 * per lane (xent_loss_narrow_kernel, xent_grad_narrow_kernel).
 * Row losses are summed per block in a fixed order into a scratch array,
 * then one block folds the array in a fixed order in float64 and writes the
 * single result: deterministic, no atomics. A grid of one block (a few
 * short rows) writes the mean itself, in one launch.
 *
 * The gradient (softmax(S) - softmax(T))/rows needs both rows' statistics
 * before any output, so it keeps a register cache of both rows (like the
 * softmax row engine) and streams what does not fit.
 *
 * The gradient over wide rows (the row pair S, T more than 32 KB, 16-byte
 * aligned) is split across a thread-block cluster instead
 * (xent_cluster.cu): each block stages its share of the coming rows in
 * shared memory, S and T are read from memory once, and the blocks'
 * statistics are exchanged once per row. When the cluster path cannot take
 * a shape, the paths below do.
 *
 * Few long rows (fewer than two per multiprocessor) are split into chunks:
 * one kernel writes each chunk's state, then a fold per row (a block per row
 * for the losses, a block per chunk for the gradient) combines the chunks
 * in a fixed order.
 */
#include "cuda_internal.h"
#include "xent_cluster.cuh"
#include "xent_exp.cuh"

#include <float.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

/* ---- device helpers ---------------------------------------------------------------- */

static constexpr unsigned XE_FULL_MASK = 0xffffffffu;

/* Threads of a block-per-row loss block (three such blocks per SM). */
static constexpr int XE_ROW_THREADS = 256;

/* Magnitude above which a float64 row is evaluated literally, 1e150, as
 * the high word of its bits (masked to the magnitude). */
static constexpr int XE_LIM_HI = 0x5f138d35;

template <typename T> struct xe_traits;
template <> struct xe_traits<float> {
  static constexpr int vec = 4;
  static constexpr int ept = 8; /* gradient: cached elements per thread and operand */
};
template <> struct xe_traits<double> {
  static constexpr int vec = 2;
  static constexpr int ept = 2;
};

static __device__ __forceinline__ float xe_fmax(float a, float b) { return fmaxf(a, b); }
static __device__ __forceinline__ double xe_fmax(double a, double b) { return fmax(a, b); }

/* Small aggregates reduced together. */
template <typename U> struct xe_pair {
  U a, b;
};
struct xe_tri {
  double a, b, c;
};

static __device__ __forceinline__ float xe_shfl(float v, int off) {
  return __shfl_xor_sync(XE_FULL_MASK, v, off);
}
static __device__ __forceinline__ double xe_shfl(double v, int off) {
  return __shfl_xor_sync(XE_FULL_MASK, v, off);
}
template <typename U>
static __device__ __forceinline__ xe_pair<U> xe_shfl(xe_pair<U> v, int off) {
  return xe_pair<U>{xe_shfl(v.a, off), xe_shfl(v.b, off)};
}
static __device__ __forceinline__ xe_tri xe_shfl(xe_tri v, int off) {
  return xe_tri{xe_shfl(v.a, off), xe_shfl(v.b, off), xe_shfl(v.c, off)};
}

/* Combines: sums of doubles (and their aggregates), maxima ignoring NaN. */
struct xe_sum {
  __device__ __forceinline__ double operator()(double x, double y) const { return x + y; }
  __device__ __forceinline__ xe_pair<double> operator()(xe_pair<double> x,
                                                        xe_pair<double> y) const {
    return xe_pair<double>{x.a + y.a, x.b + y.b};
  }
  __device__ __forceinline__ xe_tri operator()(xe_tri x, xe_tri y) const {
    return xe_tri{x.a + y.a, x.b + y.b, x.c + y.c};
  }
};
struct xe_max {
  __device__ __forceinline__ float operator()(float x, float y) const { return fmaxf(x, y); }
  __device__ __forceinline__ double operator()(double x, double y) const { return fmax(x, y); }
  template <typename U>
  __device__ __forceinline__ xe_pair<U> operator()(xe_pair<U> x, xe_pair<U> y) const {
    return xe_pair<U>{xe_fmax(x.a, y.a), xe_fmax(x.b, y.b)};
  }
};

/* Butterfly over the warp (every lane ends with the same value: each step
 * combines equal halves with a commutative operation), and its block-wide
 * form (warp results folded in warp order; the leading barrier keeps a
 * previous call's readers of sh safe). */
template <typename A, typename Op>
static __device__ __forceinline__ A xe_warp_allreduce(A v, Op op) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = op(v, xe_shfl(v, off));
  return v;
}

/* WARP: over groups of G lanes (a power of two up to 32; every lane of the
 * warp takes part, each group gets its own result); else over the block
 * (G is then ignored). */
template <bool WARP, typename A, typename Op>
static __device__ __forceinline__ A xe_allreduce(A v, Op op, A *sh, int G = 32) {
  if constexpr (WARP) {
    if (G == 32) return xe_warp_allreduce(v, op);
    for (int off = G / 2; off > 0; off >>= 1) v = op(v, xe_shfl(v, off));
    return v;
  } else {
    v = xe_warp_allreduce(v, op);
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int nw = (int)(blockDim.x >> 5);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = sh[0];
    for (int w = 1; w < nw; ++w) v = op(v, sh[w]);
    return v;
  }
}

template <bool WARP>
static __device__ __forceinline__ bool xe_any(bool p) {
  if constexpr (WARP)
    return __any_sync(XE_FULL_MASK, p) != 0;
  else
    return __syncthreads_or(p) != 0;
}

/* Shared scratch of a group reduction. */
template <typename T> struct xe_shared {
  T m[32];
  xe_pair<T> m2[32];
  double d[32];
  xe_pair<double> d2[32];
  xe_tri d3[32];
};

/* |v| at or above 1e150 (rounded down to its high word's precision: the
 * literal path is exact anyway), or NaN: an integer test on the high word,
 * which keeps the float64 pipe for the exponentials. */
static __device__ __forceinline__ bool xe_out_of_range(double v) {
  return (__double2hiint(v) & 0x7fffffff) >= XE_LIM_HI;
}
/* In float32 every finite value is below 1e150: the test is !isfinite,
 * done in float32 (no conversion). */
static __device__ __forceinline__ bool xe_out_of_range(float v) { return !(fabsf(v) <= FLT_MAX); }
static __device__ __forceinline__ bool xe_finite(float v) { return fabsf(v) <= FLT_MAX; }
static __device__ __forceinline__ bool xe_finite(double v) { return fabs(v) <= DBL_MAX; }

/* Sum of K values as a fixed pairwise tree (K a power of two). */
template <int K, typename A> static __device__ __forceinline__ A xe_tree(A *v) {
#pragma unroll
  for (int h = K / 2; h > 0; h >>= 1)
#pragma unroll
    for (int k = 0; k < h; ++k) v[k] += v[k + h];
  return v[0];
}

/* Online (max, sum of exp) over one operand; see softmax.cu. A -inf seen
 * while m is -inf is skipped (it adds exp(-inf - M) = 0 for a finite final
 * maximum, and a -inf final maximum makes the row non-finite anyway). */
template <typename T>
static __device__ __forceinline__ void xe_online(T &m, double &s, T x) {
  if (x > m) {
    s = s * (double)xe_exp(m - x) + 1.0;
    m = x;
  } else if (!(x == m && m == (T)-INFINITY)) {
    s += (double)xe_exp(x - m);
  }
}

template <typename T>
static __device__ __forceinline__ double xe_rescale(T m, double s, T M) {
  return m == (T)-INFINITY ? s : s * (double)xe_exp(m - M);
}

/* Online (max, sum of exp) over K values at once, with the result of K
 * calls of xe_online up to the order of the float64 sum: a batch of finite
 * values rescales once to its maximum and sums its terms as a tree; a batch
 * holding a non-finite value takes the per-element path, which defines the
 * IEEE cases (NaN propagation, +inf maxima). */
template <typename T, int K>
static __device__ __forceinline__ void xe_online_batch(T &m, double &s, const T *x) {
  bool fin = true;
  T lm = x[0];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    fin &= xe_finite(x[k]);
    lm = xe_fmax(lm, x[k]);
  }
  if (fin) {
    if (lm > m) {
      s = xe_rescale(m, s, lm);
      m = lm;
    }
    double e[K];
#pragma unroll
    for (int k = 0; k < K; ++k) e[k] = (double)xe_exp(x[k] - m);
    s += xe_tree<K>(e);
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) xe_online(m, s, x[k]);
  }
}

/* The weighted-mean state of one thread (or chunk), relative to m. */
template <typename T> struct xe_wm_state {
  T m;
  double s, W, A;
  bool bad;
  __device__ __forceinline__ void init() {
    m = (T)-INFINITY;
    s = W = A = 0.0;
    bad = false;
  }
  /* Adds K elements at once (both dtypes): one rescale to the batch
   * maximum, then the K terms as independent float64 pair sums (short
   * dependency chains: a per-element online update was latency bound, in
   * float64 by the dependent exponentials). Rows with a non-finite
   * value are flagged and evaluated literally, so the state of such a row is
   * never used. Only x[0..n) and w[0..n) enter (n >= 1; the narrow kernels
   * pass a lane's part of a row), the other terms are +0. */
  template <int K> __device__ __forceinline__ void add_batch(const T *x, const T *w, int n = K) {
    T lm = x[0];
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (k < n) {
        bad |= xe_out_of_range(x[k]) || xe_out_of_range(w[k]);
        lm = xe_fmax(lm, x[k]);
      }
    if (lm > m) {
      if (m != (T)-INFINITY) {
        s *= (double)xe_exp(m - lm);
        A -= ((double)lm - (double)m) * W;
      }
      m = lm;
    }
    const double md = (double)m;
    double es[K], ws[K], as[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      es[k] = k < n ? (double)xe_exp(x[k] - m) : 0.0;
      ws[k] = k < n ? (double)w[k] : 0.0;
      as[k] = k < n ? ws[k] * ((double)x[k] - md) : 0.0;
    }
    s += xe_tree<K>(es);
    W += xe_tree<K>(ws);
    A += xe_tree<K>(as);
  }
};

/* The teacher state: student (mS, sS), teacher (mT, sT) and
 * u = sum exp(T - mT)*(S - mS). */
template <typename T> struct xe_tl_state {
  T mS, mT;
  double sS, sT, u;
  bool bad;
  __device__ __forceinline__ void init() {
    mS = mT = (T)-INFINITY;
    sS = sT = u = 0.0;
    bad = false;
  }
  /* Adds the first n <= K element pairs at once (see xe_wm_state::add_batch): rescales
   * to the batch maxima (the two rescales commute: u - d*sT, then times f),
   * then sums the batch's K terms of each kind as a tree in T and adds
   * each tree to its float64 accumulator. In float32 that is three
   * conversions per batch instead of three per pair (the conversions had
   * kept the conversion unit busy); the K terms of a sum share one sign,
   * so the tree's relative error stays below K float32 roundings, far
   * inside the float32 tolerance of a loss. */
  template <int K> __device__ __forceinline__ void add_batch(const T *s, const T *t, int n = K) {
    T ls = s[0], lt = t[0];
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (k < n) {
        bad |= xe_out_of_range(s[k]) || xe_out_of_range(t[k]);
        ls = xe_fmax(ls, s[k]);
        lt = xe_fmax(lt, t[k]);
      }
    if (ls > mS) {
      if (mS != (T)-INFINITY) {
        sS *= (double)xe_exp(mS - ls);
        u -= ((double)ls - (double)mS) * sT;
      }
      mS = ls;
    }
    if (lt > mT) {
      if (mT != (T)-INFINITY) {
        const double f = (double)xe_exp(mT - lt);
        sT *= f;
        u *= f;
      }
      mT = lt;
    }
    T es[K], et[K], eu[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      es[k] = k < n ? xe_exp(s[k] - mS) : (T)0;
      et[k] = k < n ? xe_exp(t[k] - mT) : (T)0;
      eu[k] = k < n ? et[k] * (s[k] - mS) : (T)0;
    }
    sS += (double)xe_tree<K>(es);
    sT += (double)xe_tree<K>(et);
    u += (double)xe_tree<K>(eu);
  }
};

/* The high word of a float64 read as a float32: same sign, and for
 * magnitudes the float32 order of such words is the unsigned order of the
 * high words, so one float32 comparison (on the float32 pipe) tests a
 * float64 magnitude against a high-word threshold; NaN patterns compare
 * unordered. */
static __device__ __forceinline__ float xe_hi_f(double v) {
  return __int_as_float(__double2hiint(v));
}

/*
 * The float64 teacher state of the block-per-row loss, with the result of
 * xe_tl_state<double> (the same operations in the same order on every
 * finite row, only the choice between equal zeros of a maximum may differ)
 * and fewer instructions per element pair:
 *  - the batch's 2K exponentials have no branch each: one float32 test per
 *    argument (xe_exp_core_range) and one branch per batch (a batch with an
 *    argument outside the table range takes xe_exp per element), so they
 *    are independent straight-line chains the scheduler interleaves (a
 *    branch per exponential kept them one after another, the float64
 *    latency exposed);
 *  - the exponentials read the 2^(j/64) table from the block's copy in
 *    shared memory, tab (xe_exp_core_tab: entries with pre-adjusted
 *    exponents, 32-bit addresses), not through L1;
 *  - the out-of-range vote of each value is one float32 comparison of its
 *    high word (xe_hi_f) instead of a mask and an integer compare;
 *  - the batch maxima are ordered selects (a NaN only reaches a row that
 *    is evaluated literally anyway).
 */
struct xe_tl64_state : xe_tl_state<double> {
  const int2 *tab;
  template <int K> __device__ __forceinline__ void add_batch(const double *s, const double *t) {
    const float lim = __int_as_float(XE_LIM_HI);
    double ls = s[0], lt = t[0];
    bool out = false;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      out |= !(fabsf(xe_hi_f(s[k])) < lim) | !(fabsf(xe_hi_f(t[k])) < lim);
      if (k > 0) {
        ls = s[k] > ls ? s[k] : ls;
        lt = t[k] > lt ? t[k] : lt;
      }
    }
    bad |= out;
    if (ls > mS) {
      if (mS != -INFINITY) {
        sS *= xe_exp(mS - ls);
        u -= (ls - mS) * sT;
      }
      mS = ls;
    }
    if (lt > mT) {
      if (mT != -INFINITY) {
        const double f = xe_exp(mT - lt);
        sT *= f;
        u *= f;
      }
      mT = lt;
    }
    double ds[K], dt[K], es[K], et[K], eu[K];
    bool core = true;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      ds[k] = s[k] - mS;
      dt[k] = t[k] - mT;
      core &= xe_exp_core_range(ds[k]) & xe_exp_core_range(dt[k]);
    }
    if (core) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        es[k] = xe_exp_core_tab(ds[k], tab);
        et[k] = xe_exp_core_tab(dt[k], tab);
        eu[k] = et[k] * ds[k];
      }
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        es[k] = xe_exp(ds[k]);
        et[k] = xe_exp(dt[k]);
        eu[k] = et[k] * ds[k];
      }
    }
    sS += xe_tree<K>(es);
    sT += xe_tree<K>(et);
    u += xe_tree<K>(eu);
  }
};

/* Chunk statistics of the split path (and the folded row), relative to the
 * maxima they carry. Weighted mean: v = {m, s, W, A}; teacher loss:
 * v = {mS, sS, mT, sT, u}; gradient: v = {mS, sS, mT, sT}. */
struct xe_stat {
  double v[5];
  int bad;
};

enum { XE_WMEAN = 0, XE_TLOSS = 1, XE_TGRAD = 2 };

/* Streams the vector range [q, q1) of one row (stride G) into a state in
 * steps of U vector pairs per thread (below). PF (prefetch): two vector
 * pairs a step, and the next step's
 * pairs are loaded before the current step is folded, a register double
 * buffer, so the loads stay in flight while the exponentials run; it needs
 * about 80 registers (see xent_loss_rows_kernel). Without PF, only the
 * current step is in flight, within 64 registers. */
template <typename T, int VEC, bool PF, typename State>
static __device__ __forceinline__ void xe_stream(State &st, const T *a, const T *b, int64_t q,
                                                 int64_t q1, int64_t G) {
  if constexpr (PF) {
    T na[2 * VEC], nb[2 * VEC];
    if (q + G < q1) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        bk_vload<VEC>(a + (q + k * G) * VEC, na + k * VEC);
        bk_vload<VEC>(b + (q + k * G) * VEC, nb + k * VEC);
      }
    }
    for (; q + G < q1; q += 2 * G) {
      T ta[2 * VEC], tb[2 * VEC];
#pragma unroll
      for (int e = 0; e < 2 * VEC; ++e) {
        ta[e] = na[e];
        tb[e] = nb[e];
      }
      if (q + 3 * G < q1) {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          bk_vload<VEC>(a + (q + (2 + k) * G) * VEC, na + k * VEC);
          bk_vload<VEC>(b + (q + (2 + k) * G) * VEC, nb + k * VEC);
        }
      }
      st.template add_batch<2 * VEC>(ta, tb);
    }
    /* At most one vector is left (a masked tail of U measured slower here:
     * the registers of the double buffer). */
    if (q < q1) {
      T ta[VEC], tb[VEC];
      bk_vload<VEC>(a + q * VEC, ta);
      bk_vload<VEC>(b + q * VEC, tb);
      st.template add_batch<VEC>(ta, tb);
    }
    return;
  }
  /* U vectors per operand and step: 32 bytes (two 16-byte vectors, or
   * eight float32 / four float64 elements when the row is read element by
   * element); the last step takes the vectors left, fewer than U. */
  constexpr int U = VEC == 1 ? (int)(32 / sizeof(T)) : 2;
  for (; q + (U - 1) * G < q1; q += U * G) {
    T ta[U * VEC], tb[U * VEC];
#pragma unroll
    for (int k = 0; k < U; ++k) {
      bk_vload<VEC>(a + (q + k * G) * VEC, ta + k * VEC);
      bk_vload<VEC>(b + (q + k * G) * VEC, tb + k * VEC);
    }
    st.template add_batch<U * VEC>(ta, tb);
  }
  if (q < q1) {
    T ta[U * VEC], tb[U * VEC];
    int n = 0;
#pragma unroll
    for (int k = 0; k < U; ++k) {
      if (q + k * G < q1) {
        bk_vload<VEC>(a + (q + k * G) * VEC, ta + k * VEC);
        bk_vload<VEC>(b + (q + k * G) * VEC, tb + k * VEC);
        n = k + 1;
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) ta[k * VEC + e] = tb[k * VEC + e] = (T)0;
      }
    }
    st.template add_batch<U * VEC>(ta, tb, n * VEC);
  }
}

/* xe_stream with prefetch (PF) for float64: the two register buffers are
 * used in turn (a loop unrolled twice) instead of copied each step, and the
 * addresses advance by a stride instead of being formed from the index.
 * Vector indices are 32-bit: the caller ensures q1 + 3*G < 2^31. */
template <int VEC, typename State>
static __device__ __forceinline__ void xe_stream_db(State &st, const double *a, const double *b,
                                                    int q, int q1, int G) {
  constexpr int E = 2 * VEC;
  const int gv = G * VEC;
  const double *pa = a + q * VEC, *pb = b + q * VEC;
  double a0[E], b0[E], a1[E], b1[E];
  if (q + G < q1) {
    bk_vload<VEC>(pa, a0);
    bk_vload<VEC>(pb, b0);
    bk_vload<VEC>(pa + gv, a0 + VEC);
    bk_vload<VEC>(pb + gv, b0 + VEC);
  }
  while (q + G < q1) {
    if (q + 3 * G < q1) {
      bk_vload<VEC>(pa + 2 * gv, a1);
      bk_vload<VEC>(pb + 2 * gv, b1);
      bk_vload<VEC>(pa + 3 * gv, a1 + VEC);
      bk_vload<VEC>(pb + 3 * gv, b1 + VEC);
    }
    st.template add_batch<E>(a0, b0);
    q += 2 * G;
    pa += 2 * gv;
    pb += 2 * gv;
    if (q + G >= q1) break;
    if (q + 3 * G < q1) {
      bk_vload<VEC>(pa + 2 * gv, a0);
      bk_vload<VEC>(pb + 2 * gv, b0);
      bk_vload<VEC>(pa + 3 * gv, a0 + VEC);
      bk_vload<VEC>(pb + 3 * gv, b0 + VEC);
    }
    st.template add_batch<E>(a1, b1);
    q += 2 * G;
    pa += 2 * gv;
    pb += 2 * gv;
  }
  if (q < q1) {
    double ta[VEC], tb[VEC];
    bk_vload<VEC>(pa, ta);
    bk_vload<VEC>(pb, tb);
    st.template add_batch<VEC>(ta, tb);
  }
}

/* Group reduction of thread states to the group's state relative to its
 * maxima (written into out.v), and the group's bad flag. */
template <bool WARP, typename T>
static __device__ __forceinline__ void xe_group_state(const xe_wm_state<T> &st, xe_stat &out,
                                                      xe_shared<T> &sh, int G = 32) {
  const T M = xe_allreduce<WARP>(st.m, xe_max(), sh.m, G);
  xe_tri v{0.0, 0.0, 0.0};
  if (st.m != (T)-INFINITY)
    v = xe_tri{st.s * (double)xe_exp(st.m - M), st.W, st.A + ((double)st.m - (double)M) * st.W};
  v = xe_allreduce<WARP>(v, xe_sum(), sh.d3, G);
  out.v[0] = (double)M;
  out.v[1] = v.a;
  out.v[2] = v.b;
  out.v[3] = v.c;
  out.v[4] = 0.0;
}

template <bool WARP, typename T>
static __device__ __forceinline__ void xe_group_state(const xe_tl_state<T> &st, xe_stat &out,
                                                      xe_shared<T> &sh, int G = 32) {
  const xe_pair<T> M = xe_allreduce<WARP>(xe_pair<T>{st.mS, st.mT}, xe_max(), sh.m2, G);
  xe_tri v{0.0, 0.0, 0.0};
  if (st.mS != (T)-INFINITY) {
    const double f = (double)xe_exp(st.mT - M.b);
    v = xe_tri{st.sS * (double)xe_exp(st.mS - M.a), st.sT * f,
               f * (st.u + ((double)st.mS - (double)M.a) * st.sT)};
  }
  v = xe_allreduce<WARP>(v, xe_sum(), sh.d3, G);
  out.v[0] = (double)M.a;
  out.v[1] = v.a;
  out.v[2] = (double)M.b;
  out.v[3] = v.b;
  out.v[4] = v.c;
}

/* The loss of a row from its folded state. */
static __device__ __forceinline__ double xe_finish(int kind, const xe_stat &st) {
  if (kind == XE_WMEAN) return log(st.v[1]) * st.v[2] - st.v[3];
  return log(st.v[1]) - st.v[4] / st.v[3];
}

/* Folds chunk statistics c = 0..nch-1 of one row with warp 0 (lane l takes
 * chunks l, l+32, ...; then butterflies): the row's statistics relative to
 * the row maxima. Called by the 32 lanes of one warp. */
static __device__ void xe_fold_chunks(int kind, const xe_stat *st, int64_t nch, xe_stat &out) {
  const int lane = (int)(threadIdx.x & 31);
  double M0 = -INFINITY, M1 = -INFINITY;
  int bad = 0;
  for (int64_t c = lane; c < nch; c += 32) {
    M0 = fmax(M0, st[c].v[0]);
    if (kind != XE_WMEAN) M1 = fmax(M1, st[c].v[2]);
    bad |= st[c].bad;
  }
  M0 = xe_warp_allreduce(M0, xe_max());
  M1 = xe_warp_allreduce(M1, xe_max());
  bad = __any_sync(XE_FULL_MASK, bad != 0) ? 1 : 0;
  xe_tri v{0.0, 0.0, 0.0};
  for (int64_t c = lane; c < nch; c += 32) {
    const double *s = st[c].v;
    if (kind == XE_WMEAN) {
      if (s[0] != -INFINITY)
        v = xe_sum()(v, xe_tri{s[1] * exp(s[0] - M0), s[2], s[3] + (s[0] - M0) * s[2]});
    } else {
      const double a = s[0] == -INFINITY ? s[1] : s[1] * exp(s[0] - M0);
      const double f = s[2] == -INFINITY ? 0.0 : exp(s[2] - M1);
      const double b = s[2] == -INFINITY ? s[3] : s[3] * f;
      const double u = kind == XE_TLOSS && s[0] != -INFINITY ? f * (s[4] + (s[0] - M0) * s[3]) : 0.0;
      v = xe_sum()(v, xe_tri{a, b, u});
    }
  }
  v = xe_warp_allreduce(v, xe_sum());
  if (kind == XE_WMEAN) {
    out.v[0] = M0;
    out.v[1] = v.a;
    out.v[2] = v.b;
    out.v[3] = v.c;
    out.v[4] = 0.0;
  } else {
    out.v[0] = M0;
    out.v[1] = v.a;
    out.v[2] = M1;
    out.v[3] = v.b;
    out.v[4] = v.c;
  }
  out.bad = bad;
}

/* a * b with the convention 0 * inf = 0 (a zero factor annihilates an
 * infinite one; NaN still propagates), as the contract's recomputed terms
 * require: a zero weight or a zero teacher probability contributes exactly 0
 * even against a -inf logit. */
static __device__ __forceinline__ double xe_mul0(double a, double b) {
  if ((a == 0.0 && isinf(b)) || (b == 0.0 && isinf(a))) return 0.0;
  return a * b;
}

/* Literal evaluation of one row by a group (the contract's formulas in
 * float64, each in its own pass over the row). */
template <bool WARP, typename T, int VEC>
static __device__ double xe_wm_literal(const T *xr, const T *wr, int64_t nvec, int64_t g,
                                       int64_t G, xe_shared<T> &sh) {
  T m = (T)-INFINITY;
  for (int64_t q = g; q < nvec; q += G) {
    T t[VEC];
    bk_vload<VEC>(xr + q * VEC, t);
#pragma unroll
    for (int e = 0; e < VEC; ++e) m = xe_fmax(m, t[e]);
  }
  const double M = (double)xe_allreduce<WARP>(m, xe_max(), sh.m, (int)G);
  double s = 0.0;
  for (int64_t q = g; q < nvec; q += G) {
    T t[VEC];
    bk_vload<VEC>(xr + q * VEC, t);
#pragma unroll
    for (int e = 0; e < VEC; ++e) s += exp((double)t[e] - M);
  }
  const double lse = M + log(xe_allreduce<WARP>(s, xe_sum(), sh.d, (int)G));
  double a = 0.0;
  for (int64_t q = g; q < nvec; q += G) {
    T t[VEC], w[VEC];
    bk_vload<VEC>(xr + q * VEC, t);
    bk_vload<VEC>(wr + q * VEC, w);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const double x = (double)t[e], wt = (double)w[e];
      const double d = lse - x;
      a += isfinite(d) ? wt * d : xe_mul0(wt, lse) - xe_mul0(wt, x);
    }
  }
  return xe_allreduce<WARP>(a, xe_sum(), sh.d, (int)G);
}

template <bool WARP, typename T, int VEC>
static __device__ double xe_tl_literal(const T *sr, const T *tr, int64_t nvec, int64_t g,
                                       int64_t G, xe_shared<T> &sh) {
  xe_pair<T> m{(T)-INFINITY, (T)-INFINITY};
  for (int64_t q = g; q < nvec; q += G) {
    T a[VEC], b[VEC];
    bk_vload<VEC>(sr + q * VEC, a);
    bk_vload<VEC>(tr + q * VEC, b);
#pragma unroll
    for (int e = 0; e < VEC; ++e) m = xe_max()(m, xe_pair<T>{a[e], b[e]});
  }
  m = xe_allreduce<WARP>(m, xe_max(), sh.m2, (int)G);
  const double MS = (double)m.a, MT = (double)m.b;
  xe_tri v{0.0, 0.0, 0.0};
  for (int64_t q = g; q < nvec; q += G) {
    T a[VEC], b[VEC];
    bk_vload<VEC>(sr + q * VEC, a);
    bk_vload<VEC>(tr + q * VEC, b);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const double ds = (double)a[e] - MS, et = exp((double)b[e] - MT);
      v = xe_sum()(v, xe_tri{exp(ds), et, xe_mul0(et, ds)});
    }
  }
  v = xe_allreduce<WARP>(v, xe_sum(), sh.d3, (int)G);
  return log(v.a) - v.c / v.b;
}

/* ---- kernels: losses ------------------------------------------------------------------ */

/* A loss block's sum of row losses: to part[blockIdx.x] for the final fold,
 * or, when the grid is one block (part == NULL), straight to the mean in
 * y[0]. The final fold of a single partial adds only zeros to 0.0 + s, so
 * both give the same bits. */
template <typename T>
static __device__ __forceinline__ void xe_block_result(double *part, T *y, double s, int64_t rows) {
  if (part)
    part[blockIdx.x] = s;
  else
    y[0] = (T)((0.0 + s) / (double)rows);
}

/*
 * Row losses, one row per group (WARP: a warp, blockDim 256; else the
 * block), rows visited grid-stride. Each block writes the sum of its rows'
 * losses, in visiting order, to part[blockIdx.x]. A block per row streams
 * with prefetch (xe_stream PF) in blocks of at most XE_ROW_THREADS threads,
 * three per multiprocessor, so each thread has the registers for the
 * double buffer: at 8192x32768 this measured 0.516 ms (f32 teacher), 0.950
 * ms (f64 weighted) against 0.573 / 1.026 ms for 512-thread blocks without
 * prefetch (two per multiprocessor, 64 registers).
 */
template <typename T, int VEC, bool WARP, int KIND>
static __global__ void __launch_bounds__(WARP ? 512 : XE_ROW_THREADS, WARP ? 2 : 3)
    xent_loss_rows_kernel(const T *__restrict__ a, const T *__restrict__ b,
                          double *__restrict__ part, T *__restrict__ y, int64_t rows,
                          int64_t cols) {
  using State = typename std::conditional<KIND == XE_WMEAN, xe_wm_state<T>, xe_tl_state<T>>::type;
  __shared__ xe_shared<T> sh;
  __shared__ double sh_warp[32];
  const int64_t G = WARP ? 32 : (int64_t)blockDim.x;
  const int64_t g = WARP ? (int64_t)(threadIdx.x & 31) : (int64_t)threadIdx.x;
  const int64_t per_block = WARP ? (int64_t)(blockDim.x >> 5) : 1;
  const int64_t first = (int64_t)blockIdx.x * per_block + (WARP ? (int64_t)(threadIdx.x >> 5) : 0);
  const int64_t step = (int64_t)gridDim.x * per_block;
  const int64_t nvec = cols / VEC;
  double acc = 0.0;
  for (int64_t r = first; r < rows; r += step) {
    const T *ar = a + r * cols, *br = b + r * cols;
    State st;
    st.init();
    xe_stream<T, VEC, !WARP>(st, ar, br, g, nvec, G);
    double loss;
    if (!xe_any<WARP>(st.bad)) {
      xe_stat rs;
      xe_group_state<WARP>(st, rs, sh);
      loss = xe_finish(KIND, rs);
    } else if (KIND == XE_WMEAN) {
      loss = xe_wm_literal<WARP, T, VEC>(ar, br, nvec, g, G, sh);
    } else {
      loss = xe_tl_literal<WARP, T, VEC>(ar, br, nvec, g, G, sh);
    }
    acc += loss;
  }
  if constexpr (WARP) {
    if ((threadIdx.x & 31) == 0) sh_warp[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      double s = sh_warp[0];
      for (int w = 1; w < (int)(blockDim.x >> 5); ++w) s += sh_warp[w];
      xe_block_result(part, y, s, rows);
    }
  } else {
    if (threadIdx.x == 0) xe_block_result(part, y, acc, rows);
  }
}

/* The lane-group shape of the narrow kernels, per dtype, access width and
 * kind (as measured on the H200, dev/cuda/xent.md):
 *  - xe_slots: the most vectors a lane holds of one row (C <= xe_slots),
 *    which sets the fewest lanes a row gets. The losses take four 16-byte
 *    vectors or eight elements, so a row's group reductions and its per-row
 *    arithmetic (the logarithm) are shared by few lanes. The gradient keeps
 *    two vectors per lane (its float64 exponentials ran slower on fewer,
 *    longer lanes), except float32 rows read element by element: eight.
 *  - xe_flight: vectors per lane and operand in flight (R = xe_flight/C
 *    rows, at most four): 32 bytes of each operand, or four 16-byte
 *    vectors; at most four row states per lane (eight measured slower).
 *  - xe_narrow_max: the widest row, in vectors, the narrow kernels take:
 *    64, or 256 for the float32 gradient read element by element (a warp
 *    holds it in its eight slots). */
template <typename T, int VEC, int KIND> static __host__ __device__ constexpr int xe_slots() {
  return KIND == XE_TGRAD ? (sizeof(T) == 4 && VEC == 1 ? 8 : 2) : (VEC == 1 ? 8 : 4);
}
template <typename T, int VEC> static __host__ __device__ constexpr int xe_flight() {
  return VEC == 1 ? (int)(32 / sizeof(T)) : 4;
}
/* Rows per lane for C vectors per lane (the kernels' template argument, or
 * the launchers' run-time plan). */
template <typename T, int VEC> static __host__ __device__ constexpr int xe_rows(int C) {
  return xe_flight<T, VEC>() / C > 4 ? 4 : (C > xe_flight<T, VEC>() ? 1 : xe_flight<T, VEC>() / C);
}
template <typename T, int VEC, int KIND> static __host__ __device__ constexpr int xe_narrow_max() {
  return xe_slots<T, VEC, KIND>() == 8 && KIND == XE_TGRAD ? 256 : 64;
}

/* Elements per state update in the narrow loss kernel: a lane's part of a
 * row, at most eight (the float32 teacher loss sums its terms in groups of
 * at most eight before the float64 accumulation, as the header states). */
template <int E> static constexpr int XE_NARROW_BATCH = E < 8 ? E : 8;

/* Vectors of its row that lane g of a G-lane group holds (g, g + G, ...,
 * below nvec), at most C. */
static __device__ __forceinline__ int xe_lane_vectors(int64_t nvec, int G, int g, int C) {
  const int64_t n = (nvec - g + G - 1) / G;
  return n < C ? (int)n : C;
}

/* The work of a lane in the narrow kernels: G lanes per row (a power of
 * two up to 32), P = 32/G rows per warp and step, R rows in flight per
 * lane, so warp unit w covers rows [w*P*R, (w+1)*P*R); the units are
 * visited warp-stride over the grid. */
struct xe_lanes {
  int g, P;
  int64_t per_unit, units, w0, wstep, sub;
  __device__ __forceinline__ xe_lanes(int G, int R, int64_t rows) {
    const int lane = (int)(threadIdx.x & 31u);
    const int64_t wpb = (int64_t)(blockDim.x >> 5);
    g = lane & (G - 1);
    P = 32 / G;
    sub = lane / G;
    per_unit = (int64_t)P * R;
    units = (rows + per_unit - 1) / per_unit;
    w0 = (int64_t)blockIdx.x * wpb + (int64_t)(threadIdx.x >> 5);
    wstep = (int64_t)gridDim.x * wpb;
  }
  /* The row lane group's first row of unit w (step k takes + k*P). */
  __device__ __forceinline__ int64_t first_row(int64_t w) const { return w * per_unit + sub; }
};

/* The loads of a lane of the narrow kernels, all issued before any is
 * used: vector i of rows r0 + k*P (k < R) of both operands, at vector index
 * i*G + g; entries past the rows or the row are +0 (never used). */
template <typename T, int VEC, int R, int C>
static __device__ __forceinline__ void xe_narrow_load(const T *__restrict__ a,
                                                      const T *__restrict__ b,
                                                      T (&va)[R][C][VEC], T (&vb)[R][C][VEC],
                                                      int64_t r0, int P, int G, int g,
                                                      int64_t rows, int64_t cols) {
  const int64_t nvec = cols / VEC;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    const int64_t r = r0 + (int64_t)k * P;
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const int64_t q = (int64_t)i * G + g;
      if (r < rows && q < nvec) {
        bk_vload<VEC>(a + r * cols + q * VEC, va[k][i]);
        bk_vload<VEC>(b + r * cols + q * VEC, vb[k][i]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) va[k][i][e] = vb[k][i][e] = (T)0;
      }
    }
  }
}

/*
 * Row losses of narrow rows, nvec <= xe_narrow_max vectors:
 * the plan of xe_narrow_plan, G lanes per row and C <= xe_slots vectors
 * per lane and operand, so a warp holds P = 32/G rows at a time and each lane keeps
 * R = xe_rows rows in flight (all their loads issued before the first is
 * used). Step k of warp unit w takes rows w*P*R + k*P + lane/G: one load
 * instruction covers P adjacent rows. Each lane folds its elements of a row
 * into the row state in batches of at most eight, and the
 * group reduces it as xent_loss_rows_kernel's warps do (same state and
 * formulas), every lane of the warp in step. A group whose row holds a
 * non-finite (or, float64, out-of-range) value takes the literal
 * evaluation; when any group of a warp does, the whole warp runs it in
 * step and only those groups keep its result. Each block writes the sum of
 * its rows' losses to part[blockIdx.x] (or the mean, for a grid of one
 * block): the groups' sums in group order, each in visiting order.
 */
template <typename T, int VEC, int KIND, int C>
static __global__ void __launch_bounds__(256)
    xent_loss_narrow_kernel(const T *__restrict__ a, const T *__restrict__ b,
                            double *__restrict__ part, T *__restrict__ y, int64_t rows,
                            int64_t cols, int G) {
  using State = typename std::conditional<KIND == XE_WMEAN, xe_wm_state<T>, xe_tl_state<T>>::type;
  constexpr int R = xe_rows<T, VEC>(C);
  __shared__ xe_shared<T> sh; /* unused by lane groups: the literal paths' signature */
  __shared__ double sh_grp[256];
  const xe_lanes L(G, R, rows);
  const int g = L.g, P = L.P;
  const int64_t nvec = cols / VEC;
  const int lane_elems = xe_lane_vectors(nvec, G, g, C) * VEC; /* the same in every row */
  double acc = 0.0;
  for (int64_t w = L.w0; w < L.units; w += L.wstep) {
    const int64_t r0 = L.first_row(w);
    T va[R][C][VEC], vb[R][C][VEC];
    xe_narrow_load<T, VEC, R, C>(a, b, va, vb, r0, P, G, g, rows, cols);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int64_t r = r0 + (int64_t)k * P;
      const bool valid = r < rows;
      State st;
      st.init();
      /* The lane's elements of the row, in batches of at most eight. */
      const int nv = valid ? lane_elems : 0;
#pragma unroll
      for (int j = 0; j < C * VEC; j += XE_NARROW_BATCH<C * VEC>)
        if (j < nv)
          st.template add_batch<XE_NARROW_BATCH<C * VEC>>(&va[k][0][0] + j, &vb[k][0][0] + j,
                                                          min(XE_NARROW_BATCH<C * VEC>, nv - j));
      int bad = st.bad ? 1 : 0;
      for (int off = G / 2; off > 0; off >>= 1) bad |= __shfl_xor_sync(XE_FULL_MASK, bad, off);
      xe_stat rs;
      xe_group_state<true>(st, rs, sh, G);
      double loss = xe_finish(KIND, rs);
      if (__any_sync(XE_FULL_MASK, bad)) {
        const int64_t rr = valid ? r : 0, nv = valid ? nvec : 0;
        double lit;
        if constexpr (KIND == XE_WMEAN)
          lit = xe_wm_literal<true, T, VEC>(a + rr * cols, b + rr * cols, nv, g, G, sh);
        else
          lit = xe_tl_literal<true, T, VEC>(a + rr * cols, b + rr * cols, nv, g, G, sh);
        if (bad) loss = lit;
      }
      if (valid) acc += loss;
    }
  }
  if (g == 0) sh_grp[threadIdx.x / G] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    const int ng = (int)blockDim.x / G;
    double s = sh_grp[0];
    for (int i = 1; i < ng; ++i) s += sh_grp[i];
    xe_block_result(part, y, s, rows);
  }
}

/*
 * The float64 teacher loss over 16-byte vectors, a block per row (what
 * xent_loss_rows_kernel computes for WARP = false, KIND = XE_TLOSS; see
 * xe_tl64_state) with xe_tl64_state and the alternating register buffers of
 * xe_stream_db (rows of fewer than 2^31 - 3*G vectors). The block first
 * copies the exponential's table into shared memory (blocks have at least
 * 64 threads). At 8192x32768, launched a row per block (up to 64 per
 * multiprocessor), this measured 1.136 ms (89% of copy) against 1.355 ms
 * for xent_loss_rows_kernel, though at 80 registers it spills (124 bytes
 * stored, 136 loaded per thread).
 */
template <int VEC>
static __global__ void __launch_bounds__(XE_ROW_THREADS, 3)
    xent_tl64_rows_kernel(const double *__restrict__ a, const double *__restrict__ b,
                          double *__restrict__ part, double *__restrict__ y, int64_t rows,
                          int64_t cols) {
  __shared__ xe_shared<double> sh;
  __shared__ int2 tab[64];
  if (threadIdx.x < 64) tab[threadIdx.x] = xe_exp2_tab_entry((int)threadIdx.x);
  __syncthreads();
  const int64_t G = (int64_t)blockDim.x, g = (int64_t)threadIdx.x;
  const int64_t nvec = cols / VEC;
  double acc = 0.0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const double *ar = a + r * cols, *br = b + r * cols;
    xe_tl64_state st;
    st.init();
    st.tab = tab;
    xe_stream_db<VEC>(st, ar, br, (int)g, (int)nvec, (int)G);
    double loss;
    if (!xe_any<false>(st.bad)) {
      xe_stat rs;
      xe_group_state<false>(st, rs, sh);
      loss = xe_finish(XE_TLOSS, rs);
    } else {
      loss = xe_tl_literal<false, double, VEC>(ar, br, nvec, g, G, sh);
    }
    acc += loss;
  }
  if (threadIdx.x == 0) xe_block_result(part, y, acc, rows);
}

/* Split path: the state of chunk c of row r (unit r*nch + c) over the vector
 * range [c*clen, min(nvec, (c+1)*clen)), for any KIND. */
template <typename T, int VEC, int KIND>
static __global__ void __launch_bounds__(256)
    xent_split_stats_kernel(const T *__restrict__ a, const T *__restrict__ b,
                            xe_stat *__restrict__ stats, int64_t rows, int64_t cols, int64_t nch,
                            int64_t clen) {
  __shared__ xe_shared<T> sh;
  const int64_t nvec = cols / VEC;
  const int64_t units = rows * nch;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t r = u / nch, c = u - r * nch;
    const int64_t q0 = c * clen;
    const int64_t q1 = q0 + clen < nvec ? q0 + clen : nvec;
    const T *ar = a + r * cols, *br = b + r * cols;
    xe_stat out;
    if constexpr (KIND == XE_WMEAN) {
      xe_wm_state<T> st;
      st.init();
      xe_stream<T, VEC, false>(st, ar, br, q0 + threadIdx.x, q1, blockDim.x);
      out.bad = xe_any<false>(st.bad) ? 1 : 0;
      xe_group_state<false>(st, out, sh);
    } else if constexpr (KIND == XE_TLOSS) {
      xe_tl_state<T> st;
      st.init();
      xe_stream<T, VEC, false>(st, ar, br, q0 + threadIdx.x, q1, blockDim.x);
      out.bad = xe_any<false>(st.bad) ? 1 : 0;
      xe_group_state<false>(st, out, sh);
    } else {
      /* Gradient: the two online (max, sum) pairs only. */
      T mS = (T)-INFINITY, mT = (T)-INFINITY;
      double sS = 0.0, sT = 0.0;
      for (int64_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
        T ta[VEC], tb[VEC];
        bk_vload<VEC>(ar + q * VEC, ta);
        bk_vload<VEC>(br + q * VEC, tb);
        xe_online_batch<T, VEC>(mS, sS, ta);
        xe_online_batch<T, VEC>(mT, sT, tb);
      }
      const xe_pair<T> M = xe_allreduce<false>(xe_pair<T>{mS, mT}, xe_max(), sh.m2);
      const xe_pair<double> S = xe_allreduce<false>(
          xe_pair<double>{xe_rescale(mS, sS, M.a), xe_rescale(mT, sT, M.b)}, xe_sum(), sh.d2);
      out.v[0] = (double)M.a;
      out.v[1] = S.a;
      out.v[2] = (double)M.b;
      out.v[3] = S.b;
      out.v[4] = 0.0;
      out.bad = 0;
    }
    if (threadIdx.x == 0) stats[u] = out;
  }
}

/* Split path, losses: a block per row folds the row's chunk states (warp 0)
 * and finishes the loss, or evaluates the row literally when a chunk saw a
 * non-finite or huge value. loss[r] is the row's loss. */
template <typename T, int VEC, int KIND>
static __global__ void __launch_bounds__(256)
    xent_split_loss_kernel(const T *__restrict__ a, const T *__restrict__ b,
                           const xe_stat *__restrict__ stats, double *__restrict__ loss,
                           int64_t rows, int64_t cols, int64_t nch) {
  __shared__ xe_shared<T> sh;
  __shared__ xe_stat sh_row;
  const int64_t nvec = cols / VEC;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    __syncthreads(); /* the previous row's readers of sh_row are done */
    if (threadIdx.x < 32) {
      xe_stat st;
      xe_fold_chunks(KIND, stats + r * nch, nch, st);
      if (threadIdx.x == 0) sh_row = st;
    }
    __syncthreads();
    if (!sh_row.bad) {
      if (threadIdx.x == 0) loss[r] = xe_finish(KIND, sh_row);
    } else {
      const double l =
          KIND == XE_WMEAN
              ? xe_wm_literal<false, T, VEC>(a + r * cols, b + r * cols, nvec, threadIdx.x,
                                             blockDim.x, sh)
              : xe_tl_literal<false, T, VEC>(a + r * cols, b + r * cols, nvec, threadIdx.x,
                                             blockDim.x, sh);
      if (threadIdx.x == 0) loss[r] = l;
    }
  }
}

/* One block folds the n partial sums in a fixed order: y[0] = sum / rows. */
template <typename T>
static __global__ void __launch_bounds__(1024)
    xent_final_kernel(const double *__restrict__ part, int64_t n, T *__restrict__ y, int64_t rows) {
  __shared__ double sh[32];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += part[i];
  s = xe_allreduce<false>(s, xe_sum(), sh);
  if (threadIdx.x == 0) y[0] = (T)(s / (double)rows);
}

/* ---- kernels: teacher gradient ---------------------------------------------------------- */

/*
 * y = (softmax(S_r) - softmax(T_r)) / rows, a block per row (narrower rows
 * take xent_grad_narrow_kernel). Each thread caches EPT elements of both
 * rows (chunk i at vector index i*G + g), streams the rest with online
 * (max, sum) pairs and reads those again for the output.
 */
template <typename T, int VEC>
static __global__ void __launch_bounds__(1024)
    xent_grad_rows_kernel(const T *__restrict__ S, const T *__restrict__ Tt, T *__restrict__ y,
                          int64_t rows, int64_t cols) {
  constexpr int EPT = xe_traits<T>::ept;
  constexpr int NC = EPT / VEC;
  __shared__ xe_shared<T> sh;
  const T ninf = (T)-INFINITY;
  const int64_t G = (int64_t)blockDim.x;
  const int64_t g = (int64_t)threadIdx.x;
  const int64_t nvec = cols / VEC;
  const int64_t unc0 = NC * G + g;
  const double inv_rows = 1.0 / (double)rows;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *sr = S + r * cols, *tr = Tt + r * cols;
    T *yr = y + r * cols;
    T vs[EPT], vt[EPT];
    xe_pair<T> m{ninf, ninf};
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int64_t q = i * G + g;
      if (q < nvec) {
        bk_vload<VEC>(sr + q * VEC, &vs[i * VEC]);
        bk_vload<VEC>(tr + q * VEC, &vt[i * VEC]);
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          m = xe_max()(m, xe_pair<T>{vs[i * VEC + e], vt[i * VEC + e]});
      }
    }
    T umS = ninf, umT = ninf;
    double usS = 0.0, usT = 0.0;
    /* float32: two vectors per operand in flight, folded as one batch
     * each; float64 keeps one vector per step (more spills). */
    if constexpr (sizeof(T) == 4) {
      int64_t q = unc0;
      for (; q + G < nvec; q += 2 * G) {
        T ta[2 * VEC], tb[2 * VEC];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          bk_vload<VEC>(sr + (q + k * G) * VEC, ta + k * VEC);
          bk_vload<VEC>(tr + (q + k * G) * VEC, tb + k * VEC);
        }
        xe_online_batch<T, 2 * VEC>(umS, usS, ta);
        xe_online_batch<T, 2 * VEC>(umT, usT, tb);
      }
      if (q < nvec) {
        T ta[VEC], tb[VEC];
        bk_vload<VEC>(sr + q * VEC, ta);
        bk_vload<VEC>(tr + q * VEC, tb);
        xe_online_batch<T, VEC>(umS, usS, ta);
        xe_online_batch<T, VEC>(umT, usT, tb);
      }
    } else {
#pragma unroll 2
      for (int64_t q = unc0; q < nvec; q += G) {
        T ta[VEC], tb[VEC];
        bk_vload<VEC>(sr + q * VEC, ta);
        bk_vload<VEC>(tr + q * VEC, tb);
        xe_online_batch<T, VEC>(umS, usS, ta);
        xe_online_batch<T, VEC>(umT, usT, tb);
      }
    }
    m = xe_max()(m, xe_pair<T>{umS, umT});
    const xe_pair<T> M = xe_allreduce<false>(m, xe_max(), sh.m2);

    xe_pair<double> s{xe_rescale(umS, usS, M.a), xe_rescale(umT, usT, M.b)};
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int64_t q = i * G + g;
      if (q < nvec) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const T es = xe_exp(vs[i * VEC + e] - M.a), et = xe_exp(vt[i * VEC + e] - M.b);
          vs[i * VEC + e] = es;
          vt[i * VEC + e] = et;
          s.a += (double)es;
          s.b += (double)et;
        }
      }
    }
    const xe_pair<double> Ssum = xe_allreduce<false>(s, xe_sum(), sh.d2);
    const T as = (T)(inv_rows / Ssum.a), at = (T)(inv_rows / Ssum.b);
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int64_t q = i * G + g;
      if (q < nvec) {
        T o[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) o[e] = vs[i * VEC + e] * as - vt[i * VEC + e] * at;
        bk_vstore_cs<VEC>(yr + q * VEC, o);
      }
    }
#pragma unroll 2
    for (int64_t q = unc0; q < nvec; q += G) {
      T ta[VEC], tb[VEC], o[VEC];
      bk_vload<VEC>(sr + q * VEC, ta);
      bk_vload<VEC>(tr + q * VEC, tb);
#pragma unroll
      for (int e = 0; e < VEC; ++e) o[e] = xe_exp(ta[e] - M.a) * as - xe_exp(tb[e] - M.b) * at;
      bk_vstore_cs<VEC>(yr + q * VEC, o);
    }
  }
}

/* Split path, gradient: warp 0 folds the row's chunk statistics, then the
 * block writes its chunk; chunks are visited in reverse so that the data
 * the statistics kernel read last is still in L2. */
template <typename T, int VEC>
static __global__ void __launch_bounds__(256)
    xent_split_grad_kernel(const T *__restrict__ S, const T *__restrict__ Tt,
                           const xe_stat *__restrict__ stats, T *__restrict__ y, int64_t rows,
                           int64_t cols, int64_t nch, int64_t clen) {
  __shared__ xe_stat sh_row;
  const int64_t nvec = cols / VEC;
  const int64_t units = rows * nch;
  const double inv_rows = 1.0 / (double)rows;
  for (int64_t k = blockIdx.x; k < units; k += gridDim.x) {
    const int64_t u = units - 1 - k;
    const int64_t r = u / nch, c = u - r * nch;
    __syncthreads(); /* the previous unit's readers of sh_row are done */
    if (threadIdx.x < 32) {
      xe_stat st;
      xe_fold_chunks(XE_TGRAD, stats + r * nch, nch, st);
      if (threadIdx.x == 0) sh_row = st;
    }
    __syncthreads();
    const T MS = (T)sh_row.v[0], MT = (T)sh_row.v[2];
    const T as = (T)(inv_rows / sh_row.v[1]), at = (T)(inv_rows / sh_row.v[3]);
    const int64_t q0 = c * clen;
    const int64_t q1 = q0 + clen < nvec ? q0 + clen : nvec;
    const T *sr = S + r * cols, *tr = Tt + r * cols;
    T *yr = y + r * cols;
    for (int64_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
      T ta[VEC], tb[VEC], o[VEC];
      bk_vload<VEC>(sr + q * VEC, ta);
      bk_vload<VEC>(tr + q * VEC, tb);
#pragma unroll
      for (int e = 0; e < VEC; ++e) o[e] = xe_exp(ta[e] - MS) * as - xe_exp(tb[e] - MT) * at;
      bk_vstore_cs<VEC>(yr + q * VEC, o);
    }
  }
}

/* ---- launchers ---------------------------------------------------------------------------- */

/* Threads of a block-per-row loss block: about eight vectors per thread,
 * at most XE_ROW_THREADS. */
static int xe_block_threads(int64_t nvec) {
  int threads = 64;
  while (threads < nvec / 8 && threads < XE_ROW_THREADS) threads <<= 1;
  return threads;
}


/*
 * y = (softmax(S_r) - softmax(T_r)) / rows for narrow rows, nvec <= 32*S
 * vectors: the lane groups of xent_loss_narrow_kernel (G lanes per row, C
 * vectors per lane and operand, R = xe_rows rows in flight per lane), the
 * formulas of xent_grad_rows_kernel: maxima ignoring NaN, exponentials in T
 * against them, float64 sums, (T)(1/(rows*sum)) factors.
 */
template <typename T, int VEC, int C>
static __global__ void __launch_bounds__(256)
    xent_grad_narrow_kernel(const T *__restrict__ S, const T *__restrict__ Tt, T *__restrict__ y,
                            int64_t rows, int64_t cols, int G) {
  constexpr int R = xe_rows<T, VEC>(C);
  __shared__ xe_shared<T> sh; /* unused by lane groups */
  const T ninf = (T)-INFINITY;
  const xe_lanes L(G, R, rows);
  const int g = L.g, P = L.P;
  const int64_t nvec = cols / VEC;
  const double inv_rows = 1.0 / (double)rows;
  for (int64_t w = L.w0; w < L.units; w += L.wstep) {
    const int64_t r0 = L.first_row(w);
    T vs[R][C][VEC], vt[R][C][VEC];
    xe_narrow_load<T, VEC, R, C>(S, Tt, vs, vt, r0, P, G, g, rows, cols);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int64_t r = r0 + (int64_t)k * P;
      const bool valid = r < rows;
      xe_pair<T> m{ninf, ninf};
#pragma unroll
      for (int i = 0; i < C; ++i)
        if (valid && (int64_t)i * G + g < nvec)
#pragma unroll
          for (int e = 0; e < VEC; ++e) m = xe_max()(m, xe_pair<T>{vs[k][i][e], vt[k][i][e]});
      const xe_pair<T> M = xe_allreduce<true>(m, xe_max(), sh.m2, G);
      xe_pair<double> s{0.0, 0.0};
#pragma unroll
      for (int i = 0; i < C; ++i)
        if (valid && (int64_t)i * G + g < nvec)
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            const T es = xe_exp(vs[k][i][e] - M.a), et = xe_exp(vt[k][i][e] - M.b);
            vs[k][i][e] = es;
            vt[k][i][e] = et;
            s.a += (double)es;
            s.b += (double)et;
          }
      const xe_pair<double> Ssum = xe_allreduce<true>(s, xe_sum(), sh.d2, G);
      const T as = (T)(inv_rows / Ssum.a), at = (T)(inv_rows / Ssum.b);
#pragma unroll
      for (int i = 0; i < C; ++i) {
        const int64_t q = (int64_t)i * G + g;
        if (valid && q < nvec) {
          T o[VEC];
#pragma unroll
          for (int e = 0; e < VEC; ++e) o[e] = vs[k][i][e] * as - vt[k][i][e] * at;
          bk_vstore_cs<VEC>(y + r * cols + q * VEC, o);
        }
      }
    }
  }
}

/* Lane groups for narrow rows (xent_*_narrow_kernel), nvec <= 32*S (S =
 * xe_slots): G = min(32, pow2ceil(ceil(nvec / S))) lanes per row and C =
 * pow2ceil(ceil(nvec / G)) <= S vectors per lane, the fewest lanes that
 * hold the row in S slots each (the plan of the row reductions). */
static void xe_narrow_plan(int64_t nvec, int S, int *G, int *C) {
  int g = 1;
  while ((int64_t)g * S < nvec && g < 32) g <<= 1;
  const int64_t need = (nvec + g - 1) / g;
  int c = 1;
  while (c < need) c <<= 1;
  *G = g;
  *C = c;
}

/* Blocks of 256 threads for narrow rows (R rows in flight per lane): enough for the units, at most 32
 * per multiprocessor (the warps then loop). */
static int64_t xe_narrow_blocks(bk_context *ctx, int64_t rows, int G, int R) {
  const int64_t per_warp = (int64_t)(32 / G) * R;
  const int64_t units = (rows + per_warp - 1) / per_warp;
  const int64_t cap = 32 * (int64_t)bk_cu(ctx)->sm_count;
  const int64_t blocks = (units + 7) / 8;
  return blocks < cap ? (blocks < 1 ? 1 : blocks) : cap;
}

/* One narrow launch: the gradient kernel (KIND == XE_TGRAD) or the loss
 * kernel, C vectors per lane. */
template <typename T, int VEC, int KIND, int C>
static bk_status xe_narrow_queue(bk_context *ctx, const char *fn, const T *a, const T *b, T *y,
                                 double *part, int64_t rows, int64_t cols, int G,
                                 unsigned blocks) {
  cudaStream_t stream = bk_stream(ctx);
  if constexpr (KIND == XE_TGRAD) {
    xent_grad_narrow_kernel<T, VEC, C><<<blocks, 256, 0, stream>>>(a, b, y, rows, cols, G);
    return bk__cuda_launched(fn, "xent_grad_narrow_kernel");
  } else {
    xent_loss_narrow_kernel<T, VEC, KIND, C>
        <<<blocks, 256, 0, stream>>>(a, b, part, y, rows, cols, G);
    return bk__cuda_launched(fn, "xent_loss_narrow_kernel");
  }
}

template <typename T, int VEC, int KIND>
static bk_status xe_narrow_run(bk_context *ctx, const char *fn, const T *a, const T *b, T *y,
                               double *part, int64_t rows, int64_t cols, int G, int C,
                               unsigned blocks) {
  switch (C) {
  case 1: return xe_narrow_queue<T, VEC, KIND, 1>(ctx, fn, a, b, y, part, rows, cols, G, blocks);
  case 2: return xe_narrow_queue<T, VEC, KIND, 2>(ctx, fn, a, b, y, part, rows, cols, G, blocks);
  case 4:
    if constexpr (xe_slots<T, VEC, KIND>() >= 4)
      return xe_narrow_queue<T, VEC, KIND, 4>(ctx, fn, a, b, y, part, rows, cols, G, blocks);
    return BK_ERR_INTERNAL;
  default:
    if constexpr (xe_slots<T, VEC, KIND>() >= 8)
      return xe_narrow_queue<T, VEC, KIND, 8>(ctx, fn, a, b, y, part, rows, cols, G, blocks);
    return BK_ERR_INTERNAL;
  }
}

template <typename T, int VEC, int KIND>
static bk_status xent_loss_launch(bk_context *ctx, const char *fn, const T *a, const T *b, T *y,
                                  int64_t rows, int64_t cols) {
  cudaStream_t stream = bk_stream(ctx);
  const int64_t sm = bk_cu(ctx)->sm_count;
  const int64_t nvec = cols / VEC;
  int64_t nch, clen;
  bk_cuda_split_plan(sm, rows, cols, nvec, &nch, &clen);
  void *scratch = NULL;
  bk_status st;
  if (nch > 1) {
    const int64_t units = rows * nch;
    const size_t stat_bytes = (size_t)units * sizeof(xe_stat);
    st = bk__cuda_scratch(ctx, fn, stat_bytes + (size_t)rows * sizeof(double), &scratch);
    if (st != BK_OK) return st;
    xe_stat *stats = (xe_stat *)scratch;
    double *loss = (double *)((char *)scratch + stat_bytes);
    xent_split_stats_kernel<T, VEC, KIND>
        <<<bk_cuda_grid(units), 256, 0, stream>>>(a, b, stats, rows, cols, nch, clen);
    st = bk__cuda_launched(fn, "xent_split_stats_kernel");
    if (st == BK_OK) {
      xent_split_loss_kernel<T, VEC, KIND>
          <<<bk_cuda_grid(rows), 256, 0, stream>>>(a, b, stats, loss, rows, cols, nch);
      st = bk__cuda_launched(fn, "xent_split_loss_kernel");
    }
    if (st == BK_OK) {
      xent_final_kernel<T><<<1, 1024, 0, stream>>>(loss, rows, y, rows);
      st = bk__cuda_launched(fn, "xent_final_kernel");
    }
    bk__cuda_scratch_free(ctx, scratch);
    return st;
  }
  constexpr int S = xe_slots<T, VEC, KIND>();
  if (nvec <= xe_narrow_max<T, VEC, KIND>()) {
    /* Narrow rows: lane groups, several rows in flight per lane. */
    int G, C;
    xe_narrow_plan(nvec, S, &G, &C);
    const int64_t blocks = xe_narrow_blocks(ctx, rows, G, xe_rows<T, VEC>(C));
    if (blocks > 1) {
      st = bk__cuda_scratch(ctx, fn, (size_t)blocks * sizeof(double), &scratch);
      if (st != BK_OK) return st;
    }
    double *part = (double *)scratch;
    st = xe_narrow_run<T, VEC, KIND>(ctx, fn, a, b, y, part, rows, cols, G, C, (unsigned)blocks);
    if (st == BK_OK && blocks > 1) {
      xent_final_kernel<T><<<1, 1024, 0, stream>>>(part, blocks, y, rows);
      st = bk__cuda_launched(fn, "xent_final_kernel");
    }
    bk__cuda_scratch_free(ctx, scratch);
    return st;
  }
  /* Enough blocks to fill the device, a bounded number of partial sums. The
   * float64 teacher loss over 16-byte vectors takes xent_tl64_rows_kernel
   * for block-per-row shapes whose vector indices fit its 32-bit
   * arithmetic (every row below 2^32 - 2^11 columns), a row per block up to
   * 64 rows per multiprocessor: finer work units even out the last wave.
   * Wider rows (at least 2*SMs of them, fewer take the split path) keep
   * xent_loss_rows_kernel. */
  constexpr bool TL64 = KIND == XE_TLOSS && std::is_same<T, double>::value && VEC == 2;
  const bool warp = cols <= 1024;
  const bool tl64 =
      TL64 && !warp && nvec + 3 * (int64_t)XE_ROW_THREADS < ((int64_t)1 << 31);
  const int threads = warp ? 256 : xe_block_threads(nvec);
  const int64_t units = warp ? (rows + 7) / 8 : rows;
  const int64_t cap = (tl64 ? 64 : 32) * sm;
  const int64_t blocks = units < cap ? units : cap;
  /* One block writes the mean itself: no partial sums, no final kernel. */
  if (blocks > 1) {
    st = bk__cuda_scratch(ctx, fn, (size_t)blocks * sizeof(double), &scratch);
    if (st != BK_OK) return st;
  }
  double *part = (double *)scratch;
  const char *kname = "xent_loss_rows_kernel";
  if (warp) {
    xent_loss_rows_kernel<T, VEC, true, KIND>
        <<<(unsigned)blocks, threads, 0, stream>>>(a, b, part, y, rows, cols);
  } else if (tl64) {
    if constexpr (TL64)
      xent_tl64_rows_kernel<VEC><<<(unsigned)blocks, threads, 0, stream>>>(a, b, part, y, rows, cols);
    kname = "xent_tl64_rows_kernel";
  } else {
    xent_loss_rows_kernel<T, VEC, false, KIND>
        <<<(unsigned)blocks, threads, 0, stream>>>(a, b, part, y, rows, cols);
  }
  st = bk__cuda_launched(fn, kname);
  if (st == BK_OK && blocks > 1) {
    xent_final_kernel<T><<<1, 1024, 0, stream>>>(part, blocks, y, rows);
    st = bk__cuda_launched(fn, "xent_final_kernel");
  }
  bk__cuda_scratch_free(ctx, scratch);
  return st;
}

template <typename T, int VEC>
static bk_status xent_grad_launch(bk_context *ctx, const char *fn, const T *S, const T *Tt, T *y,
                                  int64_t rows, int64_t cols) {
  constexpr int EPT = xe_traits<T>::ept;
  cudaStream_t stream = bk_stream(ctx);
  const int64_t sm = bk_cu(ctx)->sm_count;
  const int64_t nvec = cols / VEC;
  int64_t nch, clen;
  bk_cuda_split_plan(sm, rows, cols, nvec, &nch, &clen);
  if (nch > 1) {
    const int64_t units = rows * nch;
    void *scratch = NULL;
    bk_status st = bk__cuda_scratch(ctx, fn, (size_t)units * sizeof(xe_stat), &scratch);
    if (st != BK_OK) return st;
    xe_stat *stats = (xe_stat *)scratch;
    xent_split_stats_kernel<T, VEC, XE_TGRAD>
        <<<bk_cuda_grid(units), 256, 0, stream>>>(S, Tt, stats, rows, cols, nch, clen);
    st = bk__cuda_launched(fn, "xent_split_stats_kernel");
    if (st == BK_OK) {
      xent_split_grad_kernel<T, VEC>
          <<<bk_cuda_grid(units), 256, 0, stream>>>(S, Tt, stats, y, rows, cols, nch, clen);
      st = bk__cuda_launched(fn, "xent_split_grad_kernel");
    }
    bk__cuda_scratch_free(ctx, scratch);
    return st;
  }
  constexpr int SL = xe_slots<T, VEC, XE_TGRAD>();
  if (nvec <= xe_narrow_max<T, VEC, XE_TGRAD>()) {
    int G, C;
    xe_narrow_plan(nvec, SL, &G, &C);
    const unsigned blocks =
        (unsigned)xe_narrow_blocks(ctx, rows, G, xe_rows<T, VEC>(C));
    return xe_narrow_run<T, VEC, XE_TGRAD>(ctx, fn, S, Tt, y, NULL, rows, cols, G, C, blocks);
  }
  /* 64 to 1024 threads, the smallest power of two whose registers cache the
   * row; a row longer than the cache is streamed and read again. While
   * fewer than four such blocks fit on a multiprocessor, the block is
   * halved (each block's load, reductions and stores follow one another,
   * so a multiprocessor with one or two rows in flight waits on every
   * phase), as long as the rows then in flight on the device, both
   * operands, stay within half of L2, where their second reads come from. */
  const int64_t need = (cols + EPT - 1) / EPT;
  int threads = 64;
  while (threads < need && threads < 1024) threads <<= 1;
  const void *kern = (const void *)xent_grad_rows_kernel<T, VEC>;
  const double row_bytes = 2.0 * (double)cols * (double)sizeof(T);
  while (threads > 64 && bk__cuda_occupancy(ctx, kern, threads, 0, 0) < 4) {
    const int fit = bk__cuda_occupancy(ctx, kern, threads / 2, 0, 0);
    if ((double)fit * (double)sm * row_bytes > 0.5 * (double)bk_cu(ctx)->l2_bytes) break;
    threads /= 2;
  }
  xent_grad_rows_kernel<T, VEC>
      <<<bk_cuda_grid(rows), threads, 0, stream>>>(S, Tt, y, rows, cols);
  return bk__cuda_launched(fn, "xent_grad_rows_kernel");
}

/* Picks 16-byte vectors when every pointer and the row length allow. */
template <typename T, int KIND>
static bk_status xent_dispatch(bk_context *ctx, const char *fn, const void *a, const void *b,
                               void *y, int64_t rows, int64_t cols) {
  constexpr int V = xe_traits<T>::vec;
  const bool vec = cols % V == 0 && bk_aligned16(a) && bk_aligned16(b) &&
                   (KIND != XE_TGRAD || bk_aligned16(y));
  const T *pa = (const T *)a, *pb = (const T *)b;
  T *py = (T *)y;
  /* Wide rows of the gradient: split across a thread-block cluster, read
   * once (xent_cluster.cu); other shapes take the register paths. */
  if constexpr (KIND == XE_TGRAD) {
    if (vec) {
      int done = 0;
      const bk_status st = bk__cuda_xent_grad_cluster(ctx, fn, sizeof(T) == 4 ? BK_F32 : BK_F64,
                                                      a, b, y, rows, cols, &done);
      if (st != BK_OK || done) return st;
    }
  }
  if constexpr (KIND == XE_TGRAD) {
    if (vec) return xent_grad_launch<T, V>(ctx, fn, pa, pb, py, rows, cols);
    return xent_grad_launch<T, 1>(ctx, fn, pa, pb, py, rows, cols);
  } else {
    if (vec) return xent_loss_launch<T, V, KIND>(ctx, fn, pa, pb, py, rows, cols);
    return xent_loss_launch<T, 1, KIND>(ctx, fn, pa, pb, py, rows, cols);
  }
}

/* ---- entries -------------------------------------------------------------------------------- */

extern "C" bk_status bk__cuda_xent_weighted_mean(bk_context *ctx, bk_dtype dt, const void *logits,
                                                 const void *w, void *y, int64_t rows,
                                                 int64_t cols) {
  static const char fn[] = "bk_xent_weighted_mean";
  if (dt == BK_F32) return xent_dispatch<float, XE_WMEAN>(ctx, fn, logits, w, y, rows, cols);
  return xent_dispatch<double, XE_WMEAN>(ctx, fn, logits, w, y, rows, cols);
}

extern "C" bk_status bk__cuda_xent_teacher(bk_context *ctx, bk_dtype dt, const void *S,
                                           const void *T, void *y, int64_t rows, int64_t cols,
                                           int gradient) {
  static const char fn[] = "bk_xent_teacher";
  if (gradient) {
    if (dt == BK_F32) return xent_dispatch<float, XE_TGRAD>(ctx, fn, S, T, y, rows, cols);
    return xent_dispatch<double, XE_TGRAD>(ctx, fn, S, T, y, rows, cols);
  }
  if (dt == BK_F32) return xent_dispatch<float, XE_TLOSS>(ctx, fn, S, T, y, rows, cols);
  return xent_dispatch<double, XE_TLOSS>(ctx, fn, S, T, y, rows, cols);
}
