/*
 * bmm.cu — batched matrix products on CUDA.
 *
 * bk_bmm is one cuBLAS strided-batched GEMM. cuBLAS is column-major, so the
 * row-major product C = op(A) op(B) is computed as its transpose
 * C^T = op(B)^T op(A)^T: the operands swap places and each row-major matrix
 * is read as the column-major transpose it already is, so the transpose
 * flags map onto cuBLAS's without any copy. The compute types are
 * CUBLAS_COMPUTE_32F and CUBLAS_COMPUTE_64F in the handle's default math
 * mode: full-precision float32 and float64 arithmetic (float64 may run on the
 * FP64 tensor cores, which are IEEE double FMAs). TF32 and other reduced
 * modes are used only when asked for (CUBLAS_COMPUTE_32F_FAST_TF32 or
 * CUBLAS_TF32_TENSOR_OP_MATH), which this file never does.
 *
 * bk_bmm_scaled computes C = scale * op(A) op(B) and the range-loss flag
 * with one synchronization (the flag read at the end). Writing
 * scale = r * 2^e with r in [1, 2), the work is queued as:
 *   1. stats_kernel: per-block largest and smallest nonzero finite |x| of A
 *      and B and "some entry is not finite" (max and min do not depend on
 *      the folding order, so this is exact and deterministic);
 *   2. plan_kernel (one block): folds the partials and decides on the device
 *      how the scale is applied (see its comment). When no partial product
 *      or sum can leave the normal range and scale is itself a normal
 *      number of the dtype, the GEMM reads the inputs directly with
 *      alpha = scale. Otherwise 2^e is split exactly between scaled copies
 *      A' = A*2^ea, B' = B*2^eb (ea + eb = e), balanced on the largest
 *      entries and clamped to keep the smallest ones normal, the split the
 *      CPU backend makes, and alpha = r. It also evaluates the conservative
 *      bound scale*n*max|A|*max|B| > max finite;
 *   3. scale_kernel: writes the per-matrix pointer arrays (inputs or copies,
 *      as the plan says) and, only when the plan asks for it, the copies;
 *   4. a pointer-array batched GEMM with alpha and beta read from the plan
 *      (device pointer mode), so the host never needs the plan's decision;
 *   5. check_kernel: flags non-finite results and results below the
 *      smallest normal (exact zero included), skipped when the inputs
 *      already raised the flag;
 * then the flag word is copied back and the stream synchronized once.
 */
#include "cuda_internal.h"

#include <cublas_v2.h>

#include <float.h>
#include <math.h>
#include <stdint.h>

/* ---- dtype traits ------------------------------------------------------------ */

/* Range constants of a dtype: normal numbers are [2^EMIN, 2^EMAX), PREC bits
 * of significand; VEC elements make one 16-byte access. In frexp's terms
 * (v = f * 2^e, f in [0.5, 1)) a normal number has e in [EMIN + 1, EMAX]. */
template <typename T> struct bmm_traits;
template <> struct bmm_traits<float> {
  static constexpr int EMIN = -126, EMAX = 128, PREC = 24, VEC = 4;
  static __host__ __device__ constexpr float min_normal() { return FLT_MIN; }
  static __host__ __device__ constexpr float max_finite() { return FLT_MAX; }
  static constexpr cudaDataType data_type = CUDA_R_32F;
  static constexpr cublasComputeType_t compute_type = CUBLAS_COMPUTE_32F;
};
template <> struct bmm_traits<double> {
  static constexpr int EMIN = -1022, EMAX = 1024, PREC = 53, VEC = 2;
  static __host__ __device__ constexpr double min_normal() { return DBL_MIN; }
  static __host__ __device__ constexpr double max_finite() { return DBL_MAX; }
  static constexpr cudaDataType data_type = CUDA_R_64F;
  static constexpr cublasComputeType_t compute_type = CUBLAS_COMPUTE_64F;
};

/* The device-side decision of bk_bmm_scaled (see the file comment). */
template <typename T> struct scaled_plan {
  T alpha, beta;   /* the GEMM's scalars, read by cuBLAS in device pointer mode */
  int ea, eb;      /* power-of-two exponents of the copies A' and B' */
  int copy;        /* 1: the GEMM reads the scaled copies; 0: the inputs */
  int input_flag;  /* range loss known before the product (inputs or bound) */
  int flag;        /* the final range-loss flag, read back by the host */
};

/* ---- device helpers ----------------------------------------------------------- */

/* x * 2^e with a single rounding. float data is scaled through double,
 * where the product is exact for every exponent the plan can produce (a
 * float times 2^e with |e| <= 1000 stays inside double's range or rounds
 * to the same float zero or infinity). */
static __device__ __forceinline__ float pow2_scale(float x, int, double factor) {
  return (float)((double)x * factor);
}
static __device__ __forceinline__ double pow2_scale(double x, int e, double) {
  return scalbn(x, e);
}

/* Folds one value into the running largest finite |x|, smallest nonzero
 * finite |x| and "not finite" flag. */
template <typename T>
static __device__ __forceinline__ void stats_fold(T v, T &hi, T &lo, int &bad) {
  const T a = fabs(v);
  const bool fin = isfinite(v);
  bad |= !fin;
  hi = fin ? fmax(hi, a) : hi;
  lo = (fin && a != (T)0) ? fmin(lo, a) : lo;
}

/* Block-wide max (IS_MAX) or min of v, blockDim.x a multiple of 32 and at
 * most 1024; every thread of the block must call it, and every thread gets
 * the result. `identity` fills the missing warps. */
template <bool IS_MAX, typename T>
static __device__ T block_reduce(T v, T identity) {
  __shared__ T part[32];
  for (int off = 16; off > 0; off >>= 1) {
    const T o = __shfl_xor_sync(0xffffffffu, v, off);
    v = IS_MAX ? fmax(v, o) : fmin(v, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? part[lane] : identity;
  for (int off = 16; off > 0; off >>= 1) {
    const T o = __shfl_xor_sync(0xffffffffu, v, off);
    v = IS_MAX ? fmax(v, o) : fmin(v, o);
  }
  __syncthreads(); /* part may be reused by a following call */
  return v;
}

static __device__ __forceinline__ int clamp_int(int v, int lo, int hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

/* floor(v / 2) for any sign. */
static __device__ __forceinline__ int floor_half(int v) { return v >= 0 ? v / 2 : -((1 - v) / 2); }

/* ---- kernels -------------------------------------------------------------------- */

/* Per-block statistics of A (blockIdx.y == 0) and B (blockIdx.y == 1):
 * largest finite |x|, smallest nonzero finite |x| (+inf when none) and
 * "some entry is not finite". Partials are laid out [operand][block]. Max
 * and min do not depend on the order of folding, so the result is exact
 * and deterministic. */
template <typename T>
static __global__ void __launch_bounds__(256)
stats_kernel(const T *__restrict__ a, int64_t len_a, const T *__restrict__ b, int64_t len_b,
             T *__restrict__ part_hi, T *__restrict__ part_lo, int *__restrict__ part_bad) {
  constexpr int V = bmm_traits<T>::VEC;
  const T *x = blockIdx.y == 0 ? a : b;
  const int64_t len = blockIdx.y == 0 ? len_a : len_b;
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const T inf = (T)INFINITY;
  T hi = 0, lo = inf;
  int bad = 0;
  int64_t done = 0;
  if ((reinterpret_cast<uintptr_t>(x) & 15) == 0) {
    const int64_t nvec = len / V;
    int64_t i = tid;
    /* Four independent 16-byte loads in flight per thread. */
    for (; i + 3 * stride < nvec; i += 4 * stride) {
      T v0[V], v1[V], v2[V], v3[V];
      bk_ld16(x + i * V, v0);
      bk_ld16(x + (i + stride) * V, v1);
      bk_ld16(x + (i + 2 * stride) * V, v2);
      bk_ld16(x + (i + 3 * stride) * V, v3);
#pragma unroll
      for (int e = 0; e < V; e++) {
        stats_fold(v0[e], hi, lo, bad);
        stats_fold(v1[e], hi, lo, bad);
        stats_fold(v2[e], hi, lo, bad);
        stats_fold(v3[e], hi, lo, bad);
      }
    }
    for (; i < nvec; i += stride) {
      T v[V];
      bk_ld16(x + i * V, v);
#pragma unroll
      for (int e = 0; e < V; e++) stats_fold(v[e], hi, lo, bad);
    }
    done = nvec * V;
  }
  for (int64_t i = done + tid; i < len; i += stride) stats_fold(__ldg(x + i), hi, lo, bad);
  bad = __syncthreads_or(bad);
  hi = block_reduce<true>(hi, (T)0);
  lo = block_reduce<false>(lo, inf);
  if (threadIdx.x == 0) {
    const int64_t slot = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
    part_hi[slot] = hi;
    part_lo[slot] = lo;
    part_bad[slot] = bad;
  }
}

/* One block: folds the partials of both operands and writes the plan. The
 * scale arrives as scale = sr * 2^se with sr in [1, 2).
 *
 * The GEMM reads the inputs unscaled, with alpha = scale, when that loses
 * nothing: scale is a normal number of the dtype (with a factor-2 margin
 * below the largest), n*max|A|*max|B| is below half the largest finite
 * value, and the product of the smallest nonzero entries is normal, so no
 * partial product or sum leaves the normal range. Otherwise the operands
 * are scaled by 2^ea and 2^eb (ea + eb = se) and alpha = sr. The split is
 * the CPU backend's: ea balances the largest entries of the two copies,
 * clamped so that neither copy overflows and, where the operands' ranges
 * allow, neither copy's smallest nonzero entry leaves the normal range. */
template <typename T>
static __global__ void __launch_bounds__(256)
plan_kernel(const T *__restrict__ part_hi, const T *__restrict__ part_lo,
            const int *__restrict__ part_bad, int parts, double scale, int se, double sr,
            int64_t n, scaled_plan<T> *plan) {
  typedef bmm_traits<T> tr;
  const T inf = (T)INFINITY;
  T ha = 0, hb = 0, la = inf, lb = inf;
  int bad = 0;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) {
    ha = fmax(ha, part_hi[i]);
    hb = fmax(hb, part_hi[parts + i]);
    la = fmin(la, part_lo[i]);
    lb = fmin(lb, part_lo[parts + i]);
    bad |= part_bad[i] | part_bad[parts + i];
  }
  bad = __syncthreads_or(bad);
  ha = block_reduce<true>(ha, (T)0);
  hb = block_reduce<true>(hb, (T)0);
  la = block_reduce<false>(la, inf);
  lb = block_reduce<false>(lb, inf);
  if (threadIdx.x != 0) return;

  const int min_exp = tr::EMIN + 1, max_exp = tr::EMAX; /* frexp exponents of normals */
  int flag = bad;
  int copy = 0, ea = 0, eb = 0;
  const bool alpha_ok = se >= tr::EMIN && se <= tr::EMAX - 2;
  if (ha > 0 && hb > 0) {
    int a_hi, b_hi, a_lo, b_lo, xs, xn;
    const double fa = frexp((double)ha, &a_hi);
    const double fb = frexp((double)hb, &b_hi);
    (void)frexp((double)la, &a_lo);
    (void)frexp((double)lb, &b_lo);
    const double fs = frexp(scale, &xs);
    const double fn = frexp((double)n, &xn);
    /* bound = fa*fb*fs*fn * 2^(a_hi+b_hi+xs+xn) against the largest finite
     * value (1 - 2^-PREC) * 2^EMAX, compared with the exponents apart so
     * that nothing overflows on the way. */
    const int ex = clamp_int(a_hi + b_hi + xs + xn - tr::EMAX, -3000, 3000);
    if (ldexp(fa * fb * fs * fn, ex) > 1.0 - ldexp(1.0, -tr::PREC)) flag = 1;
    /* n < 2^xn and each |x| < 2^(its frexp exponent): every partial sum of
     * op(A) op(B) is below 2^(a_hi+b_hi+xn); every nonzero product is at
     * least 2^(a_lo+b_lo-2). */
    const bool in_place = alpha_ok && a_hi + b_hi + xn <= max_exp - 1 && a_lo + b_lo >= min_exp + 1;
    if (!in_place) {
      copy = 1;
      const int s = se + b_hi - a_hi;
      const int target = floor_half(s);
      /* Overflow of a copy: a_hi + ea <= max_exp and b_hi + eb <= max_exp. */
      const int ov_lo = se - max_exp + b_hi, ov_hi = max_exp - a_hi;
      /* Underflow: a_lo + ea >= min_exp and b_lo + eb >= min_exp. */
      const int lo = ov_lo > min_exp - a_lo ? ov_lo : min_exp - a_lo;
      const int hi = ov_hi < se - min_exp + b_lo ? ov_hi : se - min_exp + b_lo;
      if (lo <= hi)
        ea = clamp_int(target, lo, hi);
      else if (ov_lo <= ov_hi)
        ea = clamp_int(target, ov_lo, ov_hi);
      else
        ea = target;
      eb = se - ea;
    }
  } else if (!alpha_ok) {
    /* An operand has no nonzero finite entry: the product is zero (or not
     * finite, and flagged) whatever the split, so the whole power of two
     * goes onto that operand, where it cannot turn a finite entry of the
     * other into an infinity. */
    copy = 1;
    ea = ha > 0 ? 0 : se;
    eb = se - ea;
  }
  plan->alpha = copy ? (T)sr : (T)scale;
  plan->beta = 0;
  plan->ea = ea;
  plan->eb = eb;
  plan->copy = copy;
  plan->input_flag = flag;
  plan->flag = flag;
}

/* Writes the pointer arrays the batched GEMM reads (in cuBLAS's operand
 * order: our B, our A, C) from the inputs or the copies as the plan says,
 * and, when the plan asks for copies, writes A' = A*2^ea (blockIdx.y == 0)
 * and B' = B*2^eb (blockIdx.y == 1). */
template <typename T>
static __global__ void __launch_bounds__(256)
scale_kernel(const T *__restrict__ a, T *__restrict__ a2, int64_t len_a, int64_t stride_a,
             const T *__restrict__ b, T *__restrict__ b2, int64_t len_b, int64_t stride_b,
             T *c, int64_t stride_c, int64_t batch, void **ptrs,
             const scaled_plan<T> *__restrict__ plan) {
  constexpr int V = bmm_traits<T>::VEC;
  const int copy = plan->copy;
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  if (blockIdx.y == 0) {
    const T *pa = copy ? a2 : a;
    const T *pb = copy ? b2 : b;
    for (int64_t i = tid; i < batch; i += stride) {
      ptrs[i] = const_cast<T *>(pb + i * stride_b);
      ptrs[batch + i] = const_cast<T *>(pa + i * stride_a);
      ptrs[2 * batch + i] = c + i * stride_c;
    }
  }
  if (!copy) return;
  const T *src = blockIdx.y == 0 ? a : b;
  T *dst = blockIdx.y == 0 ? a2 : b2;
  const int64_t len = blockIdx.y == 0 ? len_a : len_b;
  const int e = blockIdx.y == 0 ? plan->ea : plan->eb;
  /* The float path multiplies by this factor; beyond +-1000 every float
   * already rounds to the same zero or infinity, so the clamp is exact. */
  const double factor = ldexp(1.0, clamp_int(e, -1000, 1000));
  int64_t done = 0;
  /* dst is scratch, aligned for 16-byte stores; src may not be. */
  if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
    const int64_t nvec = len / V;
    for (int64_t i = tid; i < nvec; i += stride) {
      T v[V];
      bk_ld16(src + i * V, v);
#pragma unroll
      for (int k = 0; k < V; k++) v[k] = pow2_scale(v[k], e, factor);
      bk_st16(dst + i * V, v);
    }
    done = nvec * V;
  }
  for (int64_t i = done + tid; i < len; i += stride) dst[i] = pow2_scale(__ldg(src + i), e, factor);
}

/* Raises the flag when a result entry is not finite or below the smallest
 * normal in magnitude (exact zero included). Skipped when the plan already
 * raised it: the answer is then 1 whatever C holds. */
template <typename T>
static __global__ void __launch_bounds__(256)
check_kernel(const T *__restrict__ c, int64_t len, scaled_plan<T> *plan) {
  typedef bmm_traits<T> tr;
  constexpr int V = tr::VEC;
  if (plan->input_flag) return; /* uniform across the grid */
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int bad = 0;
  int64_t done = 0;
  /* A NaN fails both comparisons, so one test covers every case. */
#define BK_BMM_BAD(v) (!(fabs(v) >= tr::min_normal() && fabs(v) <= tr::max_finite()))
  if ((reinterpret_cast<uintptr_t>(c) & 15) == 0) {
    const int64_t nvec = len / V;
    int64_t i = tid;
    for (; i + stride < nvec; i += 2 * stride) {
      T v0[V], v1[V];
      bk_ld16(c + i * V, v0);
      bk_ld16(c + (i + stride) * V, v1);
#pragma unroll
      for (int e = 0; e < V; e++) bad |= BK_BMM_BAD(v0[e]) | BK_BMM_BAD(v1[e]);
    }
    for (; i < nvec; i += stride) {
      T v[V];
      bk_ld16(c + i * V, v);
#pragma unroll
      for (int e = 0; e < V; e++) bad |= BK_BMM_BAD(v[e]);
    }
    done = nvec * V;
  }
  for (int64_t i = done + tid; i < len; i += stride) bad |= BK_BMM_BAD(__ldg(c + i));
#undef BK_BMM_BAD
  bad = __syncthreads_or(bad);
  if (bad && threadIdx.x == 0) atomicOr(&plan->flag, 1);
}

/* ---- launchers -------------------------------------------------------------------- */

static bk_status cublas_status(cublasStatus_t s, const char *fn, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return BK_OK;
  return bk__fail(s == CUBLAS_STATUS_ALLOC_FAILED ? BK_ERR_OUT_OF_MEMORY : BK_ERR_DEVICE, fn,
                  "%s failed: %s (%d)", what, cublasGetStatusString(s), (int)s);
}

/* The cuBLAS operand description of a row-major product (see the file
 * comment): cuBLAS computes the (p, m) column-major C^T from B as its first
 * operand and A as its second. */
typedef struct gemm_shape {
  cublasOperation_t op_first, op_second; /* for B and A */
  int64_t ld_first, ld_second, ldc;      /* leading dimensions of B, A, C */
} gemm_shape;

static gemm_shape gemm_shape_of(int64_t m, int64_t n, int64_t p, int trans_a, int trans_b) {
  gemm_shape s;
  /* B stored (n, p) is column-major (p, n): used as is. Stored (p, n) it is
   * column-major (n, p): transposed. */
  s.op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  s.ld_first = trans_b ? n : p;
  /* A stored (m, n) is column-major (n, m): used as is. Stored (n, m) it is
   * column-major (m, n): transposed. */
  s.op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  s.ld_second = trans_a ? m : n;
  s.ldc = p;
  return s;
}

/* Small products by a direct kernel: cuBLAS's host-side selection costs
 * more than such a product takes on the device. One thread per entry of C
 * folds its n terms in order with fused multiply-adds in T. */
#define BMM_SMALL_MAX_N 32
#define BMM_SMALL_MAX_OUT 16384

template <typename T>
static __global__ void __launch_bounds__(128)
    bmm_small_kernel(const T *__restrict__ A, const T *__restrict__ B, T *__restrict__ C,
                     int batch, int m, int n, int p, int trans_a, int trans_b) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= batch * m * p) return;
  const int b = e / (m * p), i = e / p % m, j = e % p;
  const T *a = A + (size_t)b * m * n;
  const T *bb = B + (size_t)b * n * p;
  const int sa = trans_a ? m : 1, sb = trans_b ? 1 : p;
  const T *ar = trans_a ? a + i : a + (size_t)i * n;
  const T *bc = trans_b ? bb + (size_t)j * n : bb + j;
  T acc = 0;
  for (int q = 0; q < n; q++) acc = fma(ar[(size_t)q * sa], bc[(size_t)q * sb], acc);
  C[e] = acc;
}

template <typename T>
static bk_status bmm_launch(bk_context *ctx, const T *A, const T *B, T *C, int64_t batch,
                            int64_t m, int64_t n, int64_t p, int trans_a, int trans_b) {
  static const char fn[] = "bk_bmm";
  typedef bmm_traits<T> tr;
  if (n <= BMM_SMALL_MAX_N && batch * m * p <= BMM_SMALL_MAX_OUT) {
    const int out = (int)(batch * m * p);
    bmm_small_kernel<T><<<(unsigned)((out + 127) / 128), 128, 0, bk_stream(ctx)>>>(
        A, B, C, (int)batch, (int)m, (int)n, (int)p, trans_a, trans_b);
    return bk__cuda_launched(fn, "bmm_small_kernel");
  }
  void *hv = NULL;
  bk_status st = bk__cuda_cublas(ctx, fn, &hv);
  if (st != BK_OK) return st;
  cublasHandle_t h = (cublasHandle_t)hv;
  st = cublas_status(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), fn, "cublasSetPointerMode");
  if (st != BK_OK) return st;
  const gemm_shape s = gemm_shape_of(m, n, p, trans_a, trans_b);
  const T one = 1, zero = 0;
  return cublas_status(
      cublasGemmStridedBatchedEx_64(h, s.op_first, s.op_second, p, m, n, &one, B, tr::data_type,
                                    s.ld_first, (long long)(n * p), A, tr::data_type,
                                    s.ld_second, (long long)(m * n), &zero, C, tr::data_type,
                                    s.ldc, (long long)(m * p), batch, tr::compute_type,
                                    CUBLAS_GEMM_DEFAULT),
      fn, "cublasGemmStridedBatchedEx_64");
}

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

/* Adds bytes to a running scratch size; false when size_t would overflow. */
static bool scratch_add(size_t *total, size_t bytes, size_t *offset) {
  size_t at = align256(*total);
  if (at < *total || at + bytes < at) return false;
  *offset = at;
  *total = at + bytes;
  return true;
}

template <typename T>
static bk_status bmm_scaled_launch(bk_context *ctx, const T *A, const T *B, T *C, int64_t batch,
                                   int64_t m, int64_t n, int64_t p, int trans_a, int trans_b,
                                   double scale, int *range_loss) {
  static const char fn[] = "bk_bmm_scaled";
  typedef bmm_traits<T> tr;
  const int threads = 256;
  const int64_t len_a = batch * m * n, len_b = batch * n * p, len_c = batch * m * p;
  const int64_t longest = len_a > len_b ? len_a : len_b;
  const int parts = (int)bk_cuda_blocks(ctx, (longest + tr::VEC - 1) / tr::VEC, threads);

  void *hv = NULL;
  bk_status st = bk__cuda_cublas(ctx, fn, &hv);
  if (st != BK_OK) return st;
  cublasHandle_t h = (cublasHandle_t)hv;

  /* One scratch block: plan, partials, pointer arrays, then the copies. The
   * copies are reserved even when the plan ends up not using them: only
   * the device knows, and the pool hands the memory back at once. */
  size_t total = 0, off_plan, off_hi, off_lo, off_bad, off_ptrs, off_a2, off_b2;
  const bool fits =
      scratch_add(&total, sizeof(scaled_plan<T>), &off_plan) &&
      scratch_add(&total, 2 * (size_t)parts * sizeof(T), &off_hi) &&
      scratch_add(&total, 2 * (size_t)parts * sizeof(T), &off_lo) &&
      scratch_add(&total, 2 * (size_t)parts * sizeof(int), &off_bad) &&
      (uint64_t)batch <= SIZE_MAX / (3 * sizeof(void *)) &&
      scratch_add(&total, 3 * (size_t)batch * sizeof(void *), &off_ptrs) &&
      scratch_add(&total, (size_t)len_a * sizeof(T), &off_a2) &&
      scratch_add(&total, (size_t)len_b * sizeof(T), &off_b2);
  if (!fits) return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "scratch for the scaled copies exceeds the address space");
  void *scratch = NULL;
  st = bk__cuda_scratch(ctx, fn, total, &scratch);
  if (st != BK_OK) return st;
  char *base = (char *)scratch;
  scaled_plan<T> *plan = (scaled_plan<T> *)(base + off_plan);
  T *part_hi = (T *)(base + off_hi);
  T *part_lo = (T *)(base + off_lo);
  int *part_bad = (int *)(base + off_bad);
  void **ptrs = (void **)(base + off_ptrs);
  T *a2 = (T *)(base + off_a2);
  T *b2 = (T *)(base + off_b2);
  cudaStream_t stream = bk_stream(ctx);

  /* scale = sr * 2^se with sr in [1, 2): exact. */
  int se = 0;
  const double sr = 2.0 * frexp(scale, &se);
  se -= 1;

  stats_kernel<T><<<dim3((unsigned)parts, 2), threads, 0, stream>>>(A, len_a, B, len_b, part_hi,
                                                                    part_lo, part_bad);
  st = bk__cuda_launched(fn, "stats_kernel");
  if (st == BK_OK) {
    plan_kernel<T><<<1, threads, 0, stream>>>(part_hi, part_lo, part_bad, parts, scale, se, sr, n,
                                              plan);
    st = bk__cuda_launched(fn, "plan_kernel");
  }
  if (st == BK_OK) {
    scale_kernel<T><<<dim3((unsigned)parts, 2), threads, 0, stream>>>(
        A, a2, len_a, m * n, B, b2, len_b, n * p, C, m * p, batch, ptrs, plan);
    st = bk__cuda_launched(fn, "scale_kernel");
  }
  if (st == BK_OK) {
    st = cublas_status(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE), fn,
                       "cublasSetPointerMode");
    if (st == BK_OK) {
      const gemm_shape s = gemm_shape_of(m, n, p, trans_a, trans_b);
      st = cublas_status(
          cublasGemmBatchedEx_64(h, s.op_first, s.op_second, p, m, n, &plan->alpha,
                                 (const void *const *)ptrs, tr::data_type, s.ld_first,
                                 (const void *const *)(ptrs + batch), tr::data_type,
                                 s.ld_second, &plan->beta, (void *const *)(ptrs + 2 * batch),
                                 tr::data_type, s.ldc, batch, tr::compute_type,
                                 CUBLAS_GEMM_DEFAULT),
          fn, "cublasGemmBatchedEx_64");
      /* The handle is shared by the context: always hand it back in the
       * host pointer mode every other caller expects. */
      const bk_status st2 = cublas_status(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), fn,
                                          "cublasSetPointerMode");
      if (st == BK_OK) st = st2;
    }
  }
  if (st == BK_OK) {
    const unsigned blocks = bk_cuda_blocks(ctx, (len_c + tr::VEC - 1) / tr::VEC, threads);
    check_kernel<T><<<blocks, threads, 0, stream>>>(C, len_c, plan);
    st = bk__cuda_launched(fn, "check_kernel");
  }
  int flag = 0;
  if (st == BK_OK) {
    /* The one synchronization of the call: the copy into pageable memory
     * returns once the flag has arrived; the stream wait makes it explicit
     * and surfaces any error of the queued work. */
    st = bk__cuda_status(cudaMemcpyAsync(&flag, &plan->flag, sizeof flag, cudaMemcpyDeviceToHost,
                                         stream),
                         fn, "cudaMemcpyAsync (range-loss flag)");
    if (st == BK_OK)
      st = bk__cuda_status(cudaStreamSynchronize(stream), fn, "cudaStreamSynchronize");
  }
  bk__cuda_scratch_free(ctx, scratch);
  if (st == BK_OK) *range_loss = flag ? 1 : 0;
  return st;
}

/* ---- entries ------------------------------------------------------------------------ */

extern "C" bk_status bk__cuda_bmm(bk_context *ctx, bk_dtype dt, const void *A, const void *B,
                                  void *C, int64_t batch, int64_t m, int64_t n, int64_t p,
                                  int trans_a, int trans_b) {
  /* The output was allocated through mem_alloc, which made the context's
   * device current. */
  if (dt == BK_F32)
    return bmm_launch<float>(ctx, (const float *)A, (const float *)B, (float *)C, batch, m, n, p,
                             trans_a, trans_b);
  return bmm_launch<double>(ctx, (const double *)A, (const double *)B, (double *)C, batch, m, n,
                            p, trans_a, trans_b);
}

extern "C" bk_status bk__cuda_bmm_scaled(bk_context *ctx, bk_dtype dt, const void *A,
                                         const void *B, void *C, int64_t batch, int64_t m,
                                         int64_t n, int64_t p, int trans_a, int trans_b,
                                         double scale, int *range_loss) {
  BK_CUDA_TRY(cudaSetDevice(bk_cu(ctx)->device), "bk_bmm_scaled", "cudaSetDevice");
  /* The range-loss flag is read back by the host, which synchronizes: the
   * call is refused while the stream is being captured, before anything is
   * queued. */
  bk_status st = bk__cuda_refuse_capture(ctx, "bk_bmm_scaled",
                                         "bk_bmm_scaled (its range-loss flag is read on the host)");
  if (st != BK_OK) return st;
  if (dt == BK_F32)
    return bmm_scaled_launch<float>(ctx, (const float *)A, (const float *)B, (float *)C, batch, m,
                                    n, p, trans_a, trans_b, scale, range_loss);
  return bmm_scaled_launch<double>(ctx, (const double *)A, (const double *)B, (double *)C, batch,
                                   m, n, p, trans_a, trans_b, scale, range_loss);
}
