/*
 * layernorm.cu — CUDA layer normalization: bk_layernorm_forward (its
 * backward, bk_layernorm_backward, is in layernorm_vjp.cu).
 *
 * Forward: a group of G lanes per row of at most 32 vectors (several rows
 * per warp, four rows per group in flight), a warp per short row, a block
 * per longer row. Each thread caches
 * its share of the row in registers (16-byte loads when the pointers and the
 * row length allow), so a row that fits is read once: pass 1 sums in
 * float64, pass 2 sums the deviations from that mean and their squares in
 * float64 (the corrected two-pass algorithm: the deviations' sum refines the
 * mean, so the statistics are at least as accurate as a plain two-pass
 * float64 computation), pass 3 writes normalized and out. Elements beyond
 * the cache are streamed and read again (from L2 in practice). For float32
 * data, pass 3 works in float32 with the mean split into a float pair
 * (hi + lo), so x - mu keeps the accuracy of float64 at the cost of one
 * rounding. Wide rows with 16-byte access (f32 > 8192 columns, f64 > 4096)
 * are instead copied once into shared memory with cp.async, a block per row
 * or a thread-block cluster per row with each CTA caching a slice; the same
 * statistics, with the CTAs' sums folded in rank order through distributed
 * shared memory. Rows of more than 4096 such vectors may instead take
 * persistent clusters that hold the row in registers, stage the next row
 * with bulk copies and exchange the statistics through mbarriers
 * (ln_fwd_xchg_kernel). Otherwise few long rows are split into chunks:
 * each chunk's (count, mean, M2) by its own corrected two passes, merged per
 * row in chunk order with Chan's formula.
 */
#include "cluster_xchg.cuh"
#include "cuda_internal.h"
#include "rowcache.cuh"

#include <cooperative_groups.h>
#include <math.h>
#include <stdint.h>

namespace cg = cooperative_groups;

/* ---- device helpers ------------------------------------------------------------------- */

static constexpr unsigned LN_FULL_MASK = 0xffffffffu;

/* max(v, 0) that keeps NaN: a row holding NaN must give NaN statistics
 * (fmax would turn a NaN variance into 0). */
static __device__ __forceinline__ double ln_clamp0(double v) { return v < 0.0 ? 0.0 : v; }

/* vec: elements in 16 bytes; ept: elements of a row cached per thread. */
template <typename T> struct ln_traits;
template <> struct ln_traits<float> {
  static constexpr int vec = 4;
  static constexpr int ept = 16;
};
template <> struct ln_traits<double> {
  static constexpr int vec = 2;
  static constexpr int ept = 8;
};

struct ln_pair {
  double a, b;
};

static __device__ __forceinline__ double ln_shfl(double v, int off) {
  return __shfl_xor_sync(LN_FULL_MASK, v, off);
}
static __device__ __forceinline__ ln_pair ln_shfl(ln_pair v, int off) {
  return ln_pair{ln_shfl(v.a, off), ln_shfl(v.b, off)};
}
static __device__ __forceinline__ double ln_add(double x, double y) { return x + y; }
static __device__ __forceinline__ ln_pair ln_add(ln_pair x, ln_pair y) {
  return ln_pair{x.a + y.a, x.b + y.b};
}

/* Sum over the warp by butterfly (every lane gets the same value: each step
 * adds two equal halves, and IEEE addition is commutative), or over the
 * block (warp sums folded in warp order; the leading barrier keeps a
 * previous call's readers of sh safe). */
template <bool WARP, typename A>
static __device__ __forceinline__ A ln_allsum(A v, A *sh) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = ln_add(v, ln_shfl(v, off));
  if constexpr (!WARP) {
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int nw = (int)(blockDim.x >> 5);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = sh[0];
    for (int w = 1; w < nw; ++w) v = ln_add(v, sh[w]);
  }
  return v;
}

/* x - mu in the dtype: float32 subtracts the float pair hi + lo (hi the
 * rounded mean, lo the rest), so the result carries one rounding. */
template <typename T> struct ln_center;
template <> struct ln_center<float> {
  float hi, lo;
  __device__ __forceinline__ explicit ln_center(double mu)
      : hi((float)mu), lo((float)(mu - (double)(float)mu)) {}
  __device__ __forceinline__ float operator()(float x) const { return (x - hi) - lo; }
};
template <> struct ln_center<double> {
  double mu;
  __device__ __forceinline__ explicit ln_center(double m) : mu(m) {}
  __device__ __forceinline__ double operator()(double x) const { return x - mu; }
};

/* float64 addition as a functor, for the cluster folds. */
struct ln_dadd_op {
  __device__ __forceinline__ double operator()(double a, double b) const { return a + b; }
};

/* Largest CTA of ln_fwd_wide_kernel; __launch_bounds__ asks for four such
 * CTAs per multiprocessor (at most 64 registers a thread). */
static constexpr int LN_WIDE_THREADS = 256;

/* Row (or chunk) statistics merged with Chan's formula. */
struct ln_stat {
  double n, mean, m2;
};

static __device__ __forceinline__ ln_stat ln_merge(ln_stat a, ln_stat b) {
  const double n = a.n + b.n;
  const double d = b.mean - a.mean;
  return ln_stat{n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * b.n / n)};
}

/* normalized and out for VEC elements starting at column q*VEC. */
template <typename T, int VEC>
static __device__ __forceinline__ void ln_emit(const T *xv, const ln_center<T> &ctr, T rstd,
                                               const T *gamma, const T *beta, int64_t q,
                                               T *nrm, T *out) {
  T gm[VEC], bt[VEC], nv[VEC], ov[VEC];
  bk_vload<VEC>(gamma + q * VEC, gm);
  bk_vload<VEC>(beta + q * VEC, bt);
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    nv[e] = ctr(xv[e]) * rstd;
    ov[e] = fma(nv[e], gm[e], bt[e]);
  }
  bk_vstore_cs<VEC>(nrm + q * VEC, nv);
  bk_vstore_cs<VEC>(out + q * VEC, ov);
}

/* ---- kernels: forward ------------------------------------------------------------------- */

/*
 * One row per group (WARP: a warp, blockDim 256; else the block). Chunk i of
 * thread g is the vector index i*G + g; the first NC are cached.
 */
template <typename T, int VEC, bool WARP>
static __global__ void __launch_bounds__(1024)
    ln_fwd_rows_kernel(const T *__restrict__ x, const T *__restrict__ gamma,
                       const T *__restrict__ beta, T *__restrict__ out, T *__restrict__ nrm,
                       T *__restrict__ inv_std, int64_t rows, int64_t cols, double eps) {
  constexpr int EPT = ln_traits<T>::ept;
  constexpr int NC = EPT / VEC;
  __shared__ double sh[32];
  __shared__ ln_pair sh2[32];
  const int64_t G = WARP ? 32 : (int64_t)blockDim.x;
  const int64_t g = WARP ? (int64_t)(threadIdx.x & 31) : (int64_t)threadIdx.x;
  const int64_t per_block = WARP ? (int64_t)(blockDim.x >> 5) : 1;
  const int64_t first = (int64_t)blockIdx.x * per_block + (WARP ? (int64_t)(threadIdx.x >> 5) : 0);
  const int64_t step = (int64_t)gridDim.x * per_block;
  const int64_t nvec = cols / VEC;
  const int64_t unc0 = NC * G + g;
  for (int64_t r = first; r < rows; r += step) {
    const T *xr = x + r * cols;
    T v[EPT];
    double s = 0.0;
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int64_t q = i * G + g;
      if (q < nvec) {
        bk_vload<VEC>(xr + q * VEC, &v[i * VEC]);
#pragma unroll
        for (int e = 0; e < VEC; ++e) s += (double)v[i * VEC + e];
      }
    }
#pragma unroll 2
    for (int64_t q = unc0; q < nvec; q += G) {
      T t[VEC];
      bk_vload<VEC>(xr + q * VEC, t);
#pragma unroll
      for (int e = 0; e < VEC; ++e) s += (double)t[e];
    }
    const double mu0 = ln_allsum<WARP>(s, sh) / (double)cols;

    /* Deviations from the first mean: their sum corrects the mean and the
     * sum of squares (the corrected two-pass algorithm). */
    ln_pair dm{0.0, 0.0};
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int64_t q = i * G + g;
      if (q < nvec) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const double d = (double)v[i * VEC + e] - mu0;
          dm.a += d;
          dm.b = fma(d, d, dm.b);
        }
      }
    }
#pragma unroll 2
    for (int64_t q = unc0; q < nvec; q += G) {
      T t[VEC];
      bk_vload<VEC>(xr + q * VEC, t);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const double d = (double)t[e] - mu0;
        dm.a += d;
        dm.b = fma(d, d, dm.b);
      }
    }
    dm = ln_allsum<WARP>(dm, sh2);
    const double mu = mu0 + dm.a / (double)cols;
    const double var = ln_clamp0(dm.b - dm.a * (dm.a / (double)cols)) / (double)cols;
    const double rstd_d = 1.0 / sqrt(var + eps);
    if (g == 0) inv_std[r] = (T)rstd_d;

    const ln_center<T> ctr(mu);
    const T rstd = (T)rstd_d;
    T *nr = nrm + r * cols, *orow = out + r * cols;
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int64_t q = i * G + g;
      if (q < nvec) ln_emit<T, VEC>(&v[i * VEC], ctr, rstd, gamma, beta, q, nr, orow);
    }
#pragma unroll 2
    for (int64_t q = unc0; q < nvec; q += G) {
      T t[VEC];
      bk_vload<VEC>(xr + q * VEC, t);
      ln_emit<T, VEC>(t, ctr, rstd, gamma, beta, q, nr, orow);
    }
  }
}

/*
 * Narrow rows (at most 32 vectors): a group of G lanes per row (G a power of
 * two, nvec <= G), 32/G groups per warp, and R rows per group in flight:
 * warp iteration it covers rows base .. base + 32/G*R - 1, row
 * base + i*(32/G) + k for group k and step i, so a warp's loads of one step
 * are contiguous. Every lane runs every step (rows past the end are
 * masked), so the butterflies within a group (xor offsets below G stay in
 * the group) see the full warp. Statistics as in ln_fwd_rows_kernel.
 */
template <typename T, int VEC, int G, int R>
static __global__ void __launch_bounds__(256, 3)
    ln_fwd_group_kernel(const T *__restrict__ x, const T *__restrict__ gamma,
                        const T *__restrict__ beta, T *__restrict__ out, T *__restrict__ nrm,
                        T *__restrict__ inv_std, int64_t rows, int64_t cols, double eps) {
  constexpr int GPW = 32 / G; /* groups (rows) per warp and step */
  const int lane = (int)(threadIdx.x & 31), k = lane / G, g = lane % G;
  const int64_t nvec = cols / VEC;
  const bool act = g < nvec;
  const int64_t q = act ? g : 0; /* this lane's vector */
  const int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  const double dcols = (double)cols;
  for (int64_t base = wid * (GPW * R); base < rows; base += nwarps * (GPW * R)) {
    T v[R][VEC];
    double s[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int64_t r = base + i * GPW + k;
      s[i] = 0.0;
      if (act && r < rows) {
        bk_vload<VEC>(x + r * cols + q * VEC, v[i]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[i][e] = (T)0;
      }
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) s[i] += (double)v[i][e];
#pragma unroll
      for (int o = G / 2; o > 0; o >>= 1) s[i] += __shfl_xor_sync(LN_FULL_MASK, s[i], o);
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const double mu0 = s[i] / dcols;
      double da = 0.0, db = 0.0;
      if (act) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const double d = (double)v[i][e] - mu0;
          da += d;
          db = fma(d, d, db);
        }
      }
#pragma unroll
      for (int o = G / 2; o > 0; o >>= 1) {
        const double ta = __shfl_xor_sync(LN_FULL_MASK, da, o);
        const double tb = __shfl_xor_sync(LN_FULL_MASK, db, o);
        da += ta;
        db += tb;
      }
      const double mu = mu0 + da / dcols;
      const double var = ln_clamp0(db - da * (da / dcols)) / dcols;
      const double rstd_d = 1.0 / sqrt(var + eps);
      const int64_t r = base + i * GPW + k;
      if (r < rows) {
        if (g == 0) inv_std[r] = (T)rstd_d;
        if (act) {
          const ln_center<T> ctr(mu);
          ln_emit<T, VEC>(v[i], ctr, (T)rstd_d, gamma, beta, q, nrm + r * cols, out + r * cols);
        }
      }
    }
  }
}

/* Few long rows: (count, mean, M2) of chunk c of row r (unit r*nch + c) over
 * the vector range [c*clen, min(nvec, (c+1)*clen)), by two passes (the
 * second reads the chunk again, from L2). */
template <typename T, int VEC>
static __global__ void __launch_bounds__(256)
    ln_fwd_split_stats_kernel(const T *__restrict__ x, ln_stat *__restrict__ stats, int64_t rows,
                              int64_t cols, int64_t nch, int64_t clen) {
  __shared__ double sh[32];
  __shared__ ln_pair sh2[32];
  const int64_t nvec = cols / VEC;
  const int64_t units = rows * nch;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t r = u / nch, c = u - r * nch;
    const int64_t q0 = c * clen;
    const int64_t q1 = q0 + clen < nvec ? q0 + clen : nvec;
    const T *xr = x + r * cols;
    double s = 0.0;
    for (int64_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
      T t[VEC];
      bk_vload<VEC>(xr + q * VEC, t);
#pragma unroll
      for (int e = 0; e < VEC; ++e) s += (double)t[e];
    }
    const double n = (double)((q1 - q0) * VEC);
    const double mean0 = ln_allsum<false>(s, sh) / n;
    ln_pair dm{0.0, 0.0};
    for (int64_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
      T t[VEC];
      bk_vload<VEC>(xr + q * VEC, t);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const double d = (double)t[e] - mean0;
        dm.a += d;
        dm.b = fma(d, d, dm.b);
      }
    }
    dm = ln_allsum<false>(dm, sh2);
    if (threadIdx.x == 0)
      stats[u] = ln_stat{n, mean0 + dm.a / n, ln_clamp0(dm.b - dm.a * (dm.a / n))};
  }
}

/* Few long rows: thread 0 merges the row's chunk statistics in chunk order,
 * then the block writes its chunk (and chunk 0 writes inv_std). */
template <typename T, int VEC>
static __global__ void __launch_bounds__(256)
    ln_fwd_split_apply_kernel(const T *__restrict__ x, const T *__restrict__ gamma,
                              const T *__restrict__ beta, const ln_stat *__restrict__ stats,
                              T *__restrict__ out, T *__restrict__ nrm, T *__restrict__ inv_std,
                              int64_t rows, int64_t cols, int64_t nch, int64_t clen, double eps) {
  __shared__ double sh_row[2];
  const int64_t nvec = cols / VEC;
  const int64_t units = rows * nch;
  for (int64_t k = blockIdx.x; k < units; k += gridDim.x) {
    const int64_t u = units - 1 - k; /* reverse: the last chunks read are still in L2 */
    const int64_t r = u / nch, c = u - r * nch;
    __syncthreads(); /* the previous unit's readers of sh_row are done */
    if (threadIdx.x == 0) {
      ln_stat st = stats[r * nch];
      for (int64_t j = 1; j < nch; ++j) st = ln_merge(st, stats[r * nch + j]);
      const double rstd = 1.0 / sqrt(st.m2 / (double)cols + eps);
      sh_row[0] = st.mean;
      sh_row[1] = rstd;
      if (c == 0) inv_std[r] = (T)rstd;
    }
    __syncthreads();
    const ln_center<T> ctr(sh_row[0]);
    const T rstd = (T)sh_row[1];
    const int64_t q0 = c * clen;
    const int64_t q1 = q0 + clen < nvec ? q0 + clen : nvec;
    const T *xr = x + r * cols;
    T *nr = nrm + r * cols, *orow = out + r * cols;
    for (int64_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
      T t[VEC];
      bk_vload<VEC>(xr + q * VEC, t);
      ln_emit<T, VEC>(t, ctr, rstd, gamma, beta, q, nr, orow);
    }
  }
}

/*
 * Wide rows with 16-byte access (f32 > 8192 columns, f64 > 4096): each row
 * (CL false) or each slice of a row (CL true: a cluster of C CTAs per row;
 * the CTA of rank k caches the vectors [k*clen, min(nv, (k+1)*clen)) of the
 * row's nv = cols/VEC vectors) is copied once into dynamic shared memory
 * with cp.async, every copy issued before any wait, so x is read from
 * device memory exactly once. Thread t owns the local vectors t, t+B, ...
 * in every pass (it copies, reads and uses only those), so its own wait is
 * enough before it reads them. The statistics are ln_fwd_rows_kernel's
 * (pass 1 float64 sum -> mu0; pass 2 float64 sums of d = x - mu0 and d*d;
 * mu, var and rstd by the same formulas), with the per-CTA block sums folded
 * across the cluster through distributed shared memory in rank order, so
 * every CTA of the cluster gets bit-identical statistics. Pass 3 writes
 * normalized and out with streaming stores (ln_emit).
 */
template <typename T, bool CL>
static __global__ void __launch_bounds__(LN_WIDE_THREADS, 4)
    ln_fwd_wide_kernel(const T *__restrict__ x, const T *__restrict__ gamma,
                       const T *__restrict__ beta, T *__restrict__ out, T *__restrict__ nrm,
                       T *__restrict__ inv_std, int64_t rows, int64_t cols, int clen,
                       double eps) {
  constexpr int VEC = ln_traits<T>::vec;
  extern __shared__ __align__(16) unsigned char ln_dyn[];
  T *row = reinterpret_cast<T *>(ln_dyn); /* (clen * VEC) this CTA's slice */
  __shared__ double sh[32];
  __shared__ ln_pair sh2[32];
  /* This CTA's block sums, read by the whole cluster through DSMEM. */
  __shared__ double cl_s, cl_da, cl_db;

  const int B = (int)blockDim.x, t = (int)threadIdx.x;
  int C = 1, rank = 0;
  int64_t first = blockIdx.x, step = gridDim.x;
  if constexpr (CL) {
    const cg::cluster_group cl = cg::this_cluster();
    C = (int)cl.num_blocks();
    rank = (int)cl.block_rank();
    first = (int64_t)(blockIdx.x / (unsigned)C);
    step = (int64_t)(gridDim.x / (unsigned)C);
  }
  const int64_t nv = cols / VEC;
  const int64_t q0 = (int64_t)rank * clen < nv ? (int64_t)rank * clen : nv;
  const int len = (int)(nv - q0 < clen ? nv - q0 : clen); /* vectors in this CTA's slice */
  const double dcols = (double)cols;

  for (int64_t r = first; r < rows; r += step) {
    const T *xs = x + r * cols + q0 * VEC;

    /* Load: the whole slice in flight, then this thread's copies landed. */
    __syncthreads(); /* the previous row's readers of the cache are done */
    for (int q = t; q < len; q += B) rc_cp_async16(row + q * VEC, xs + (int64_t)q * VEC);
    rc_cp_async_commit();
    rc_cp_async_wait_all();

    /* Pass 1: float64 sum, then the first mean. */
    double s = 0.0;
#pragma unroll 4
    for (int q = t; q < len; q += B) {
      T v[VEC];
      bk_vload<VEC>(row + q * VEC, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) s += (double)v[e];
    }
    s = ln_allsum<false>(s, sh);
    if constexpr (CL) {
      /* cl_s of the previous row was last read before that row's second
       * cluster barrier, which every CTA has passed. */
      const cg::cluster_group cl = cg::this_cluster();
      if (t == 0) cl_s = s;
      cl.sync();
      s = rc_cluster_fold(cl, &cl_s, C, ln_dadd_op());
    }
    const double mu0 = s / dcols;

    /* Pass 2: deviations from the first mean and their squares. */
    ln_pair dm{0.0, 0.0};
#pragma unroll 4
    for (int q = t; q < len; q += B) {
      T v[VEC];
      bk_vload<VEC>(row + q * VEC, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const double d = (double)v[e] - mu0;
        dm.a += d;
        dm.b = fma(d, d, dm.b);
      }
    }
    dm = ln_allsum<false>(dm, sh2);
    if constexpr (CL) {
      /* cl_da / cl_db of the previous row were last read before this row's
       * first cluster barrier, which every CTA has passed. */
      const cg::cluster_group cl = cg::this_cluster();
      if (t == 0) {
        cl_da = dm.a;
        cl_db = dm.b;
      }
      cl.sync();
      dm.a = rc_cluster_fold(cl, &cl_da, C, ln_dadd_op());
      dm.b = rc_cluster_fold(cl, &cl_db, C, ln_dadd_op());
    }
    const double mu = mu0 + dm.a / dcols;
    const double var = ln_clamp0(dm.b - dm.a * (dm.a / dcols)) / dcols;
    const double rstd_d = 1.0 / sqrt(var + eps);
    if (rank == 0 && t == 0) inv_std[r] = (T)rstd_d;

    /* Pass 3: normalized and out from the cache. */
    const ln_center<T> ctr(mu);
    const T rstd = (T)rstd_d;
    T *nr = nrm + r * cols, *orow = out + r * cols;
#pragma unroll 4
    for (int q = t; q < len; q += B) {
      T v[VEC];
      bk_vload<VEC>(row + q * VEC, v);
      ln_emit<T, VEC>(v, ctr, rstd, gamma, beta, q0 + q, nr, orow);
    }
  }
  /* No CTA may leave while another can still read its cl_da / cl_db. */
  if constexpr (CL) cg::this_cluster().sync();
}

/*
 * Wide rows with their statistics exchanged between the blocks of a cluster
 * (16-byte access, rows of more than one block's share): persistent
 * clusters of C blocks visit rows cid, cid + ncl, ... (ncl clusters); the
 * block of rank k owns the vectors [k*sl, min(nv, (k+1)*sl)) of every row it
 * visits, and thread t holds the vectors t + m*THREADS (m < KREG) of that
 * share in registers from the first pass to the output.
 *  - One shared-memory stage per block: thread 0 copies the share of the
 *    block's next row into it with one bulk copy (cp.async.bulk, counted in
 *    bytes on the stage mbarrier, phase j for the block's j-th row) right
 *    after the first block barrier of the current row, when every thread
 *    has moved its share into registers; so the next row's loads are in
 *    flight during this row's sums, exchanges and stores.
 *  - The statistics are ln_fwd_rows_kernel's: pass 1 float64 sum -> mu0,
 *    pass 2 float64 sums of d = x - mu0 and d*d, mu, var and rstd by the
 *    same formulas; each block sum is the threads' sums folded by warp
 *    butterflies and then in warp order, and the cluster sum folds the
 *    blocks' sums left to right in rank order, so every block of the
 *    cluster gets the same bits.
 *  - Two exchanges per row, e = 0 (the block sum, padded to 16 bytes) and
 *    e = 1 (the deviations' sums): thread k < C stores the block's values
 *    into slot[e][rank] of block k with st.async, counted on block k's
 *    xbar[e]; thread 0 arrives on its own xbar[e] expecting C*16 bytes (the
 *    arrival and the bytes may come in any order within the phase). Phase j
 *    of xbar[e] is the block's j-th row, waited for with parity j & 1 by
 *    warp 0 alone (cluster-scope acquire), which folds and hands the result
 *    to the other warps through shared memory and a block barrier. No
 *    cluster barrier sits in the row loop (it would wait for the block's
 *    outstanding stores): one after the mbarrier initialization, one at the
 *    end so that no block leaves while a peer may still store into it.
 *  - Slot reuse: a block sends its row j+1 values of exchange e only after
 *    it has received every block's values of the exchange before (exchange
 *    1 of row j for e = 0, exchange 0 of row j+1 for e = 1), and each block
 *    sent those only after its warp 0 had waited for phase j of xbar[e] and
 *    read its row j slots of exchange e (a block barrier orders the reads
 *    before the send, and the send's complete_tx releases them to the
 *    receiver's acquire). So the next values of a slot arrive only after
 *    its previous values were read and the phase of its mbarrier for the
 *    previous row completed.
 * Every block of a cluster runs the same rows, hence the same barriers and
 * exchanges; a block with an empty share runs them with no vectors.
 */
static constexpr int LN_XC_MAX_CLUSTER = 16;

/* Thread 0: queues the bulk copy of n vectors at src into the stage,
 * counted on bar; an empty share only arrives, so the phase completes all
 * the same. */
template <typename T>
static __device__ __forceinline__ void ln_xc_issue(const T *src, T *stage, int n,
                                                   unsigned long long *bar) {
  const unsigned b = cx_smem(bar);
  if (n > 0) {
    cx_bar_expect(b, (unsigned)n * 16u);
    cx_bulk_load(cx_smem(stage), src, (unsigned)n * 16u, b);
  } else {
    cx_bar_arrive(b);
  }
}

/* Threads k < C store (a, b) into slot[rank] of block k, counted on block
 * k's bar; thread 0 arrives on its own bar expecting C*16 bytes. */
static __device__ __forceinline__ void ln_xc_send(double a, double b, double2 *slot,
                                                  unsigned long long *bar, int rank, int C) {
  const int tid = (int)threadIdx.x;
  if (tid < C) {
    const unsigned dst = cx_mapa(cx_smem(&slot[rank]), (unsigned)tid);
    const unsigned rbar = cx_mapa(cx_smem(bar), (unsigned)tid);
    cx_store_remote(dst, a, b, rbar);
  }
  if (tid == 0) cx_bar_expect(cx_smem(bar), (unsigned)C * 16u);
}

/* Warp 0 (every lane): waits for the phase of the given parity of bar and
 * folds the C blocks' (x, y) left to right in rank order (every lane
 * shuffles LN_XC_MAX_CLUSTER values; those past C are not added). */
static __device__ __forceinline__ ln_pair ln_xc_fold(const double2 *slot,
                                                     unsigned long long *bar, unsigned parity,
                                                     int C) {
  const int lane = (int)(threadIdx.x & 31);
  cx_bar_wait_cluster(cx_smem(bar), parity);
  const double2 mine = lane < C ? slot[lane] : make_double2(0.0, 0.0);
  ln_pair v{__shfl_sync(LN_FULL_MASK, mine.x, 0), __shfl_sync(LN_FULL_MASK, mine.y, 0)};
#pragma unroll
  for (int k = 1; k < LN_XC_MAX_CLUSTER; ++k) {
    const double a = __shfl_sync(LN_FULL_MASK, mine.x, k);
    const double b = __shfl_sync(LN_FULL_MASK, mine.y, k);
    if (k < C) {
      v.a += a;
      v.b += b;
    }
  }
  return v;
}

/* p, opaque to the compiler: it keeps one register pair for the pointer and
 * reaches the vectors of a share as constant offsets from it, instead of
 * rebuilding the address in every predicated access (which had the
 * registers spill). */
template <typename P> static __device__ __forceinline__ P *ln_opaque(P *p) {
  asm volatile("" : "+l"(p));
  return p;
}

template <typename T, int THREADS, int KREG, int MINB>
static __global__ void __launch_bounds__(THREADS, MINB)
    ln_fwd_xchg_kernel(const T *__restrict__ x, const T *__restrict__ gamma,
                       const T *__restrict__ beta, T *__restrict__ out, T *__restrict__ nrm,
                       T *__restrict__ inv_std, int64_t rows, int64_t cols, int sl,
                       double eps) {
  constexpr int VEC = ln_traits<T>::vec;
  constexpr int WARPS = THREADS / 32;
  constexpr int KB = 4; /* vectors per batch of gamma and beta loads in the output */
  static_assert(KREG % KB == 0, "whole batches");
  extern __shared__ __align__(16) unsigned char ln_xdyn[];
  __shared__ __align__(16) double2 slot[2][LN_XC_MAX_CLUSTER]; /* [exchange][rank] */
  __shared__ __align__(8) unsigned long long lbar;             /* stage filled */
  __shared__ __align__(8) unsigned long long xbar[2];          /* exchange e received */
  __shared__ double shs[WARPS];                                /* warp sums, pass 1 */
  __shared__ ln_pair shd[WARPS];                               /* warp sums, pass 2 */
  __shared__ double bmu0;                                      /* the row's mu0 */
  __shared__ ln_pair bstat;                                    /* the row's mu, rstd */

  const cg::cluster_group cluster = cg::this_cluster();
  const int C = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
  const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t nvec = cols / VEC;
  const int64_t q0 = (int64_t)rank * sl;
  const int n = q0 < nvec ? (int)(nvec - q0 < sl ? nvec - q0 : sl) : 0; /* vectors of the share */
  /* Thread tid holds the share's vectors tid + m*THREADS for m*THREADS < rem;
   * every address below is a per-thread base plus the constant m*THREADS*VEC. */
  const int rem = n - tid;
  const int64_t cid = (int64_t)(blockIdx.x / (unsigned)C);
  const int64_t ncl = (int64_t)(gridDim.x / (unsigned)C);
  const int64_t nrow = (rows - cid + ncl - 1) / ncl; /* rows cid, cid + ncl, ... */
  T *const stage = reinterpret_cast<T *>(ln_xdyn);  /* (n * VEC) */
  const T *const st = stage + tid * VEC;
  const T *const gt = ln_opaque(gamma + (q0 + tid) * VEC);
  const T *const bt = ln_opaque(beta + (q0 + tid) * VEC);
  const double dcols = (double)cols;

  if (tid == 0) {
    cx_bar_init(cx_smem(&lbar), 1);
    cx_bar_init(cx_smem(&xbar[0]), 1);
    cx_bar_init(cx_smem(&xbar[1]), 1);
    cx_bar_init_fence();
  }
  /* Every block's mbarriers are initialized before anyone stores into them. */
  cluster.sync();
  if (tid == 0 && nrow > 0) ln_xc_issue(x + cid * cols + q0 * VEC, stage, n, &lbar);

  for (int64_t j = 0; j < nrow; ++j) {
    const int64_t r = cid + j * ncl;
    const unsigned par = (unsigned)(j & 1);
    cx_bar_wait(cx_smem(&lbar), par);
    T v[KREG][VEC];
#pragma unroll
    for (int m = 0; m < KREG; ++m) {
      if (m * THREADS < rem) {
        bk_vload<VEC>(st + m * THREADS * VEC, v[m]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[m][e] = (T)0;
      }
    }

    /* Pass 1: float64 sum. */
    double s = 0.0;
#pragma unroll
    for (int m = 0; m < KREG; ++m)
      if (m * THREADS < rem) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) s += (double)v[m][e];
      }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += ln_shfl(s, off);
    if (lane == 0) shs[warp] = s;
    __syncthreads();
    /* The share is in registers: the stage takes the next row. */
    if (tid == 0 && j + 1 < nrow) ln_xc_issue(x + (r + ncl) * cols + q0 * VEC, stage, n, &lbar);
    double bs = 0.0;
    if (tid < C) {
      bs = shs[0];
#pragma unroll
      for (int w = 1; w < WARPS; ++w) bs += shs[w];
    }
    ln_xc_send(bs, 0.0, slot[0], &xbar[0], rank, C);
    if (warp == 0) {
      const ln_pair f = ln_xc_fold(slot[0], &xbar[0], par, C);
      if (lane == 0) bmu0 = f.a / dcols;
    }
    __syncthreads();
    const double mu0 = bmu0;

    /* Pass 2: deviations from the first mean and their squares. */
    ln_pair dm{0.0, 0.0};
#pragma unroll
    for (int m = 0; m < KREG; ++m)
      if (m * THREADS < rem) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const double d = (double)v[m][e] - mu0;
          dm.a += d;
          dm.b = fma(d, d, dm.b);
        }
      }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) dm = ln_add(dm, ln_shfl(dm, off));
    if (lane == 0) shd[warp] = dm;
    __syncthreads();
    ln_pair bd{0.0, 0.0};
    if (tid < C) {
      bd = shd[0];
#pragma unroll
      for (int w = 1; w < WARPS; ++w) bd = ln_add(bd, shd[w]);
    }
    ln_xc_send(bd.a, bd.b, slot[1], &xbar[1], rank, C);
    if (warp == 0) {
      const ln_pair f = ln_xc_fold(slot[1], &xbar[1], par, C);
      if (lane == 0) {
        const double mu = mu0 + f.a / dcols;
        const double var = ln_clamp0(f.b - f.a * (f.a / dcols)) / dcols;
        const double rstd_d = 1.0 / sqrt(var + eps);
        bstat = ln_pair{mu, rstd_d};
        if (rank == 0) inv_std[r] = (T)rstd_d;
      }
    }
    __syncthreads();

    /* Pass 3: normalized and out from the registers (ln_emit's formulas),
     * gamma and beta loaded in batches of KB vectors. */
    const ln_center<T> ctr(bstat.a);
    const T rstd = (T)bstat.b;
    const int64_t off = r * cols + (q0 + tid) * VEC;
    T *const nt = ln_opaque(nrm + off), *const ot = ln_opaque(out + off);
#pragma unroll
    for (int m0 = 0; m0 < KREG; m0 += KB) {
      T gm[KB][VEC], bb[KB][VEC];
#pragma unroll
      for (int k = 0; k < KB; ++k) {
        const int o = (m0 + k) * THREADS * VEC;
        if ((m0 + k) * THREADS < rem) {
          bk_ld16(gt + o, gm[k]);
          bk_ld16(bt + o, bb[k]);
        } else {
#pragma unroll
          for (int e = 0; e < VEC; ++e) gm[k][e] = bb[k][e] = (T)0;
        }
      }
#pragma unroll
      for (int k = 0; k < KB; ++k) {
        const int o = (m0 + k) * THREADS * VEC;
        if ((m0 + k) * THREADS < rem) {
          T nz[VEC], oz[VEC];
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            nz[e] = ctr(v[m0 + k][e]) * rstd;
            oz[e] = fma(nz[e], gm[k][e], bb[k][e]);
          }
          bk_vstore_cs<VEC>(nt + o, nz);
          bk_vstore_cs<VEC>(ot + o, oz);
        }
      }
    }
  }
  /* No block leaves while a peer may still store into its slots. */
  cluster.sync();
}

/* ---- launchers ------------------------------------------------------------------------------ */

/* The smallest power-of-two block (at least 64, at most cap) whose threads
 * cache `cols` elements at ept each. */
static int ln_threads(int64_t cols, int ept, int cap) {
  const int64_t need = (cols + ept - 1) / ept;
  int threads = 64;
  while (threads < need && threads < cap) threads <<= 1;
  return threads;
}

/* Blocks of a grid that stays resident: the occupancy of `kernel` at
 * `threads` (and `smem` bytes of dynamic shared memory), times the multiprocessors, at most `units`. */
template <typename K>
static int64_t ln_resident_blocks(bk_context *ctx, K kernel, int threads, int64_t units,
                                  size_t smem = 0) {
  int per_sm = bk__cuda_occupancy(ctx, (const void *)kernel, threads, smem, 0);
  if (per_sm < 1) per_sm = 1;
  const int64_t cap = (int64_t)per_sm * bk_cu(ctx)->sm_count;
  return units < cap ? units : cap;
}

/* Rows per group and step of ln_fwd_group_kernel: four rows of 16 bytes in
 * flight per lane. */
static constexpr int LN_GROUP_ROWS = 4;

/* Narrow rows: ln_fwd_group_kernel with G lanes per row on a resident grid. */
template <typename T, int VEC, int G>
static void ln_fwd_group_launch(bk_context *ctx, const T *x, const T *gamma, const T *beta, T *out,
                                T *nrm, T *inv_std, int64_t rows, int64_t cols, double eps) {
  constexpr int rpw = 32 / G * LN_GROUP_ROWS; /* rows per warp and step */
  const int64_t blocks = ((rows + rpw - 1) / rpw + 7) / 8;
  const int64_t nb =
      ln_resident_blocks(ctx, ln_fwd_group_kernel<T, VEC, G, LN_GROUP_ROWS>, 256, blocks);
  ln_fwd_group_kernel<T, VEC, G, LN_GROUP_ROWS><<<(unsigned)nb, 256, 0, bk_stream(ctx)>>>(
      x, gamma, beta, out, nrm, inv_std, rows, cols, eps);
}

/*
 * Which rows ln_fwd_wide_kernel takes, and how (16-byte access only):
 *  - rows wider than LN_WIDE_MIN_ROW_BYTES (f32 > 8192 columns, f64 >
 *    4096); narrower rows stay on the register path.
 *  - Cluster size C: the smallest power of two that cuts the row into
 *    slices of at most LN_WIDE_SLICE_BYTES (three CTAs per multiprocessor),
 *    at most max_cluster. When rows are few (rows*C < 2*SMs), C keeps
 *    doubling while slices stay >= LN_WIDE_MIN_SLICE_BYTES, so that more
 *    multiprocessors work.
 *  - The slice must fit the block's shared-memory limit, else the row is
 *    not taken.
 *  - Threads per CTA: the smallest power of two in [128, LN_WIDE_THREADS]
 *    giving each thread at most 8 vectors of the slice.
 */
static const int64_t LN_WIDE_MIN_ROW_BYTES = 32 * 1024;
static const int64_t LN_WIDE_SLICE_BYTES = 64 * 1024;
static const int64_t LN_WIDE_MIN_SLICE_BYTES = 16 * 1024;
static const int LN_WIDE_MAX_CLUSTER = 16;

struct ln_wide_plan {
  int csize;   /* CTAs per row (1: a plain block per row) */
  int threads; /* threads per CTA */
  int clen;    /* 16-byte vectors per CTA slice */
  size_t smem; /* dynamic shared memory per CTA */
};

static bool ln_wide_select(int64_t esz, int64_t rows, int64_t cols, int64_t sm, int max_cluster,
                           int64_t smem_limit, ln_wide_plan *p) {
  const int64_t row_bytes = cols * esz;
  if (rows < 1 || row_bytes <= LN_WIDE_MIN_ROW_BYTES) return false;
  int c = 1;
  while (c < max_cluster && row_bytes > LN_WIDE_SLICE_BYTES * c) c *= 2;
  if (rows < 2 * sm)
    while (c < max_cluster && rows * c < 2 * sm && row_bytes >= LN_WIDE_MIN_SLICE_BYTES * 2 * c)
      c *= 2;
  const int64_t nv = cols / (16 / esz);
  const int64_t clen = (nv + c - 1) / c;
  if (clen * 16 > smem_limit) return false;
  int threads = 128;
  while (threads < LN_WIDE_THREADS && threads * 8 < clen) threads <<= 1;
  p->csize = c;
  p->threads = threads;
  p->clen = (int)clen;
  p->smem = (size_t)(clen * 16);
  return true;
}

/* Launches plan p. Returns BK_OK with *done = 0 when the configuration
 * cannot run (no cluster of that size fits, or the launch is refused). */
template <typename T, bool CL>
static bk_status ln_wide_launch(bk_context *ctx, const char *fn, const T *x, const T *gamma,
                                const T *beta, T *out, T *nrm, T *inv_std, int64_t rows,
                                int64_t cols, double eps, const ln_wide_plan &p, int *done) {
  if (!rc_launch_rows(ctx, ln_fwd_wide_kernel<T, CL>, rows, p.csize, p.threads, p.smem, CL, x,
                      gamma, beta, out, nrm, inv_std, rows, cols, p.clen, eps))
    return BK_OK;
  *done = 1;
  return bk__cuda_launched(fn, "ln_fwd_wide_kernel");
}

/* Wide rows read once through shared memory (ln_fwd_wide_kernel). Sets
 * *done = 0, without queuing anything, when the shape or the device does
 * not suit it: the caller then takes the register or split path. */
template <typename T>
static bk_status ln_fwd_wide(bk_context *ctx, const char *fn, const T *x, const T *gamma,
                             const T *beta, T *out, T *nrm, T *inv_std, int64_t rows,
                             int64_t cols, double eps, int *done) {
  const int64_t esz = (int64_t)sizeof(T);
  const int64_t sm = bk_cu(ctx)->sm_count;
  ln_wide_plan p;
  *done = 0;
  /* Shapes the policy never takes leave before any call into the runtime. */
  if (!ln_wide_select(esz, rows, cols, sm, LN_WIDE_MAX_CLUSTER, INT64_MAX, &p)) return BK_OK;
  int64_t lim_block = 0, lim_cluster = 0;
  if (!rc_prepare(ctx, ln_fwd_wide_kernel<T, false>, &lim_block) ||
      !rc_prepare(ctx, ln_fwd_wide_kernel<T, true>, &lim_cluster))
    return BK_OK;
  const int64_t limit = lim_block < lim_cluster ? lim_block : lim_cluster;
  if (!ln_wide_select(esz, rows, cols, sm, LN_WIDE_MAX_CLUSTER, limit, &p)) return BK_OK;
  if (p.csize == 1)
    return ln_wide_launch<T, false>(ctx, fn, x, gamma, beta, out, nrm, inv_std, rows, cols, eps,
                                    p, done);
  /* Clusters above 8 CTAs need the non-portable size attribute and may not
   * fit the device's partitions; retry with at most 8. */
  if (p.csize > 8) {
    if (bk__cuda_func_prepare(ctx, (const void *)ln_fwd_wide_kernel<T, true>, 0, -1, 1, NULL)) {
      const bk_status st = ln_wide_launch<T, true>(ctx, fn, x, gamma, beta, out, nrm, inv_std,
                                                   rows, cols, eps, p, done);
      if (st != BK_OK || *done) return st;
    }
    if (!ln_wide_select(esz, rows, cols, sm, 8, limit, &p)) return BK_OK;
    if (p.csize == 1)
      return ln_wide_launch<T, false>(ctx, fn, x, gamma, beta, out, nrm, inv_std, rows, cols,
                                      eps, p, done);
  }
  return ln_wide_launch<T, true>(ctx, fn, x, gamma, beta, out, nrm, inv_std, rows, cols, eps, p,
                                 done);
}

/* Rows a resident cluster of ln_fwd_xchg_kernel takes at most before the
 * launch adds clusters that follow the first ones as they finish. */
static const int64_t LN_XC_ROWS = 16;

/*
 * Queues ln_fwd_xchg_kernel<T, THREADS, KREG, MINB> in clusters of C
 * blocks, shares of sl = ceil(nv / C) vectors (at most KREG*THREADS). The
 * dynamic shared-memory limit is the kernel's fixed maximum (a stage of
 * KREG*THREADS vectors) and the carveout asks for MINB such blocks per
 * multiprocessor, leaving the rest to L1 (the same values every call).
 * Clusters: A can be resident; the rows are cut into w = ceil(rows /
 * (A*LN_XC_ROWS)) waves of k = ceil(rows / (w*A)) rows per cluster, so
 * ceil(rows / k) clusters whose row counts differ by at most one. Leaves
 * *done 0, with nothing queued and no error left behind, when the share
 * does not fit, an attribute cannot be set, no cluster of C can be
 * resident or the launch is refused.
 */
template <typename T, int THREADS, int KREG, int MINB>
static bk_status ln_xchg_launch(bk_context *ctx, const char *fn, const T *x, const T *gamma,
                                const T *beta, T *out, T *nrm, T *inv_std, int64_t rows,
                                int64_t cols, double eps, int64_t C, int *done) {
  constexpr int VEC = ln_traits<T>::vec;
  constexpr int cap = KREG * THREADS;
  auto kern = ln_fwd_xchg_kernel<T, THREADS, KREG, MINB>;
  const int64_t sl = (cols / VEC + C - 1) / C;
  if (sl > cap) return BK_OK;
  if (!bk__cuda_func_fit(ctx, (const void *)kern, cap * 16, MINB, 1, true)) return BK_OK;
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = cx_cluster_config(attr, C, THREADS, (size_t)sl * 16, bk_stream(ctx));
  const int active = cx_active_clusters(ctx, kern, cfg);
  if (active < 1) return BK_OK;
  const int64_t A = active;
  const int64_t waves = (rows + A * LN_XC_ROWS - 1) / (A * LN_XC_ROWS);
  const int64_t per = (rows + waves * A - 1) / (waves * A);
  int64_t ncl = (rows + per - 1) / per;
  if (ncl > (int64_t)INT32_MAX / C) ncl = (int64_t)INT32_MAX / C;
  cfg.gridDim = dim3((unsigned)(ncl * C), 1, 1);
  if (!rc_ok(cudaLaunchKernelEx(&cfg, kern, x, gamma, beta, out, nrm, inv_std, rows, cols,
                                (int)sl, eps)))
    return BK_OK;
  *done = 1;
  return bk__cuda_launched(fn, "ln_fwd_xchg_kernel");
}

/*
 * Wide rows by ln_fwd_xchg_kernel (16-byte access): 256 threads holding
 * shares of up to 4096 vectors (64 KB) in registers, two blocks per
 * multiprocessor, C the smallest power of two (2..16) whose share fits;
 * rows whose share at C = 16 is larger (float64 over 131072 columns) take
 * 512 threads holding up to 8192 vectors (128 KB), one block per
 * multiprocessor, C = 16. Served when C >= 2 (rows over 4096 vectors:
 * float32 over 16384 columns, float64 over 8192) and rows*C >= 2*SMs;
 * otherwise, or when that configuration cannot run here, *done stays 0
 * and the caller takes the other paths.
 */
template <typename T>
static bk_status ln_fwd_xchg(bk_context *ctx, const char *fn, const T *x, const T *gamma,
                             const T *beta, T *out, T *nrm, T *inv_std, int64_t rows,
                             int64_t cols, double eps, int *done) {
  constexpr int VEC = ln_traits<T>::vec;
  constexpr int64_t cap = 4096; /* vectors of the 256-thread kernel's share */
  *done = 0;
  const int64_t nvec = cols / VEC, sm = bk_cu(ctx)->sm_count;
  if (rows < 1 || nvec <= cap) return BK_OK;
  int64_t C = 2;
  while (C < LN_XC_MAX_CLUSTER && (nvec + C - 1) / C > cap) C <<= 1;
  if (rows * C < 2 * sm) return BK_OK;
  if ((nvec + C - 1) / C <= cap)
    return ln_xchg_launch<T, 256, 16, 2>(ctx, fn, x, gamma, beta, out, nrm, inv_std, rows, cols,
                                         eps, C, done);
  return ln_xchg_launch<T, 512, 16, 1>(ctx, fn, x, gamma, beta, out, nrm, inv_std, rows, cols,
                                       eps, C, done);
}

template <typename T, int VEC>
static bk_status ln_forward_launch(bk_context *ctx, const char *fn, const T *x, const T *gamma,
                                   const T *beta, T *out, T *nrm, T *inv_std, int64_t rows,
                                   int64_t cols, double eps) {
  constexpr int EPT = ln_traits<T>::ept;
  cudaStream_t stream = bk_stream(ctx);
  if constexpr (VEC == ln_traits<T>::vec) {
    /* Wide rows with 16-byte access: read once through shared memory. */
    int done = 0;
    bk_status st =
        ln_fwd_xchg<T>(ctx, fn, x, gamma, beta, out, nrm, inv_std, rows, cols, eps, &done);
    if (st != BK_OK || done) return st;
    st = ln_fwd_wide<T>(ctx, fn, x, gamma, beta, out, nrm, inv_std, rows, cols, eps, &done);
    if (st != BK_OK || done) return st;
  }
  const int64_t nvec = cols / VEC;
  int64_t nch, clen;
  bk_cuda_split_plan(bk_cu(ctx)->sm_count, rows, cols, nvec, &nch, &clen);
  if (nch > 1) {
    const int64_t units = rows * nch;
    void *scratch = NULL;
    bk_status st = bk__cuda_scratch(ctx, fn, (size_t)units * sizeof(ln_stat), &scratch);
    if (st != BK_OK) return st;
    ln_stat *stats = (ln_stat *)scratch;
    ln_fwd_split_stats_kernel<T, VEC>
        <<<bk_cuda_grid(units), 256, 0, stream>>>(x, stats, rows, cols, nch, clen);
    st = bk__cuda_launched(fn, "ln_fwd_split_stats_kernel");
    if (st == BK_OK) {
      ln_fwd_split_apply_kernel<T, VEC><<<bk_cuda_grid(units), 256, 0, stream>>>(
          x, gamma, beta, stats, out, nrm, inv_std, rows, cols, nch, clen, eps);
      st = bk__cuda_launched(fn, "ln_fwd_split_apply_kernel");
    }
    bk__cuda_scratch_free(ctx, scratch);
    return st;
  }
  if (nvec <= 32) {
    /* Narrow rows: G = nvec rounded up to a power of two lanes per row. */
    if (nvec <= 1)
      ln_fwd_group_launch<T, VEC, 1>(ctx, x, gamma, beta, out, nrm, inv_std, rows, cols, eps);
    else if (nvec <= 2)
      ln_fwd_group_launch<T, VEC, 2>(ctx, x, gamma, beta, out, nrm, inv_std, rows, cols, eps);
    else if (nvec <= 4)
      ln_fwd_group_launch<T, VEC, 4>(ctx, x, gamma, beta, out, nrm, inv_std, rows, cols, eps);
    else if (nvec <= 8)
      ln_fwd_group_launch<T, VEC, 8>(ctx, x, gamma, beta, out, nrm, inv_std, rows, cols, eps);
    else if (nvec <= 16)
      ln_fwd_group_launch<T, VEC, 16>(ctx, x, gamma, beta, out, nrm, inv_std, rows, cols, eps);
    else
      ln_fwd_group_launch<T, VEC, 32>(ctx, x, gamma, beta, out, nrm, inv_std, rows, cols, eps);
    return bk__cuda_launched(fn, "ln_fwd_group_kernel");
  }
  if (cols <= 32 * EPT) {
    ln_fwd_rows_kernel<T, VEC, true><<<bk_cuda_grid((rows + 7) / 8), 256, 0, stream>>>(
        x, gamma, beta, out, nrm, inv_std, rows, cols, eps);
  } else {
    ln_fwd_rows_kernel<T, VEC, false>
        <<<bk_cuda_grid(rows), ln_threads(cols, EPT, 1024), 0, stream>>>(
            x, gamma, beta, out, nrm, inv_std, rows, cols, eps);
  }
  return bk__cuda_launched(fn, "ln_fwd_rows_kernel");
}

/* ---- entry ---------------------------------------------------------------------------------- */

extern "C" bk_status bk__cuda_layernorm_forward(bk_context *ctx, bk_dtype dt, const void *x,
                                                const void *gamma, const void *beta, void *out,
                                                void *normalized, void *inv_std, int64_t rows,
                                                int64_t cols, double eps) {
  static const char fn[] = "bk_layernorm_forward";
  const bool al = bk_aligned16(x) && bk_aligned16(gamma) && bk_aligned16(beta) &&
                  bk_aligned16(out) && bk_aligned16(normalized);
  if (dt == BK_F32) {
    const float *px = (const float *)x, *pg = (const float *)gamma, *pb = (const float *)beta;
    float *po = (float *)out, *pn = (float *)normalized, *pi = (float *)inv_std;
    if (al && cols % 4 == 0)
      return ln_forward_launch<float, 4>(ctx, fn, px, pg, pb, po, pn, pi, rows, cols, eps);
    return ln_forward_launch<float, 1>(ctx, fn, px, pg, pb, po, pn, pi, rows, cols, eps);
  }
  const double *px = (const double *)x, *pg = (const double *)gamma, *pb = (const double *)beta;
  double *po = (double *)out, *pn = (double *)normalized, *pi = (double *)inv_std;
  if (al && cols % 2 == 0)
    return ln_forward_launch<double, 2>(ctx, fn, px, pg, pb, po, pn, pi, rows, cols, eps);
  return ln_forward_launch<double, 1>(ctx, fn, px, pg, pb, po, pn, pi, rows, cols, eps);
}
