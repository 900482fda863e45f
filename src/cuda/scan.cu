/*
 * scan.cu — diagonal selective scans and their gradients on CUDA (contract §3.10).
 *
 * Every state channel j is an independent first-order recurrence
 *     h[t] = a[t] * h[t-1] + u[t]
 * with a[t] = A[j] or A[t,j] and u[t] = B*X[t] for the forward scan, and, for
 * the gradient, the same recurrence run backwards in time:
 *     g[t] = a'[t] * g[t+1] + dy[t],   a'[t] = A[j] or A[t+1,j], g[T] = 0.
 * All arithmetic is in float64 (float32 data included) and every result is
 * rounded once to the data type.
 *
 * Schedule. A block owns W adjacent channels and walks a range of time in
 * tiles of L = TY * S rows. In a tile, thread (tx, ty) holds S consecutive
 * rows (in scan order) of VEC adjacent channels, read as one 8- or 16-byte
 * vector per row (S = 4 rows for float32 data, 1 for float64: see
 * scan_shape). Each tile takes three steps:
 *   1. compose: each thread folds its S rows into an affine map
 *      h -> al * h + bl (bl is the recurrence run from 0), into shared memory;
 *   2. chain: one thread per channel walks the TY maps in order from the
 *      carry entering the tile, recording the carry entering each sub-chunk;
 *   3. replay: each thread reruns its S rows from its carry in registers and
 *      writes the results.
 * Inputs are read from device memory once and results written once; the
 * next tile is prefetched into L2 while the current one is processed.
 *
 * When the channels alone cannot fill the device, time is also split into
 * chunks: pass 1 composes each chunk into a map (product of coefficients,
 * recurrence from 0), pass 2 walks the chunk maps of each channel in order to
 * get every chunk's carry, and pass 3 runs each chunk from its carry, as
 * above. Every combination happens in a fixed order, so results are bitwise
 * reproducible.
 *
 * Robustness for any finite coefficients. Inside a block the maps are
 * short enough that they cannot overflow where the state does not (see
 * scan_shape), and the replay always runs the plain recurrence from its
 * carry. A chunk map spans many rows, so pass 2 passes a carry c through it
 * as fma(a, c, b) with two exceptions: c == 0 gives b exactly (b is the
 * recurrence from 0, so an overflowed or underflowed product a cannot turn
 * a zero state into NaN), and a result that is not finite from a finite
 * carry is recomputed step by step from the inputs (the product of a
 * chunk's coefficients or its recurrence from 0 may leave the double range
 * while the state itself does not).
 *
 * Gradient sums of the shared form (dA, dB) are accumulated per thread in
 * float64 over its rows in scan order (t descending), then over the threads
 * of a block in sub-chunk order, then (chunked schedule) over the chunks
 * from the last in time to the first: a fixed blocked order rather than the
 * strictly sequential one of the CPU reference.
 */
#include "cuda_internal.h"

#include <stdint.h>

#define SCAN_THREADS 256

/* ---- device helpers --------------------------------------------------------- */

/* Vector loads and stores of two adjacent elements (8 or 16 bytes). */
__device__ __forceinline__ void vec_load(const float *p, float (&r)[2]) {
  float2 q = __ldcs((const float2 *)p);
  r[0] = q.x;
  r[1] = q.y;
}
__device__ __forceinline__ void vec_load(const double *p, double (&r)[2]) {
  double2 q = __ldcs((const double2 *)p);
  r[0] = q.x;
  r[1] = q.y;
}
__device__ __forceinline__ void vec_store(float *p, const float (&r)[2]) {
  __stcs((float2 *)p, make_float2(r[0], r[1]));
}
__device__ __forceinline__ void vec_store(double *p, const double (&r)[2]) {
  __stcs((double2 *)p, make_double2(r[0], r[1]));
}

/* r <- the VEC channels j0.. of one row starting at base + off; jrem = N - j0
 * channels remain in the row, and channels past the row read as 0. With vec
 * the row and the channel group are aligned to a whole vector and jrem is
 * either <= 0 or >= VEC. */
template <typename T, int VEC>
__device__ __forceinline__ void row_load(const T *base, int64_t off, int64_t jrem, int vec,
                                         T (&r)[VEC]) {
  if (vec) {
    if (jrem > 0) {
      vec_load(base + off, r);
    } else {
#pragma unroll
      for (int v = 0; v < VEC; v++) r[v] = (T)0;
    }
  } else {
#pragma unroll
    for (int v = 0; v < VEC; v++) r[v] = v < jrem ? __ldcs(base + off + v) : (T)0;
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void row_store(T *base, int64_t off, int64_t jrem, int vec,
                                          const T (&r)[VEC]) {
  if (vec) {
    if (jrem > 0) vec_store(base + off, r);
  } else {
#pragma unroll
    for (int v = 0; v < VEC; v++)
      if (v < jrem) __stcs(base + off + v, r[v]);
  }
}

/* Asks for the line holding p to be brought into L2 ahead of its use. */
__device__ __forceinline__ void prefetch_l2(const void *p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(p)));
}

/* The recurrence's coefficient and drive at (t, j), read one at a time from
 * device memory (the fallback path). */
template <typename T, bool VAR, bool BWD>
__device__ __forceinline__ double coef_at(const T *A, int64_t T_len, int64_t N, int64_t t,
                                          int64_t j) {
  if (!VAR) return (double)A[j];
  if (!BWD) return (double)A[t * N + j];
  return t + 1 < T_len ? (double)A[(t + 1) * N + j] : 0.0;
}

template <typename T, bool VAR, bool BWD>
__device__ __forceinline__ double drive_at(const T *B, const T *X, const T *dy, int64_t N,
                                           int64_t t, int64_t j) {
  if (BWD) return (double)dy[t * N + j];
  const double b = VAR ? (double)B[t * N + j] : (double)B[j];
  return b * (double)X[t * N + j];
}

/* Runs n steps of the recurrence from c, starting at row t and moving in scan
 * order. Kept out of line: it only runs when a chunk map cannot be trusted. */
template <typename T, bool VAR, bool BWD>
__device__ __noinline__ double seq_steps(const T *A, const T *B, const T *X, const T *dy,
                                         int64_t T_len, int64_t N, int64_t t, int64_t n,
                                         int64_t j, double c) {
  for (int64_t s = 0; s < n; s++, t += BWD ? -1 : 1)
    c = fma(coef_at<T, VAR, BWD>(A, T_len, N, t, j), c,
            drive_at<T, VAR, BWD>(B, X, dy, N, t, j));
  return c;
}

/* The arguments of every scan kernel (raw device pointers and geometry). */
struct scan_args {
  const void *A, *B, *X, *h0; /* A, B (state) or (T, state); X (T, state); h0 (state) */
  const void *out, *dy;       /* backward: the forward result and its gradient */
  void *y;                    /* forward result (T, state) */
  void *dA, *dB, *dX, *dh0;   /* backward results */
  int64_t seq_len, state;
  int64_t chunk_len;          /* rows per chunk (T when time is not split) */
  int64_t chunks;
  int vec;                    /* vector access is valid for every row */
  double *agg_a, *agg_b;      /* (chunks, N): chunk maps; agg_b then holds carries in */
  double *part_a, *part_b;    /* (chunks, N): per-chunk dA, dB (shared backward) */
};

/* Passes a carry c through the chunk map (a, b) of rows t.. (n of them, in
 * scan order) of channel j; see the file comment for the two exceptions. */
template <typename T, bool VAR, bool BWD>
__device__ __forceinline__ double chain_step(const scan_args &p, double a, double b, double c,
                                             int64_t t, int64_t n, int64_t j) {
  if (c == 0.0) return b;
  double r = fma(a, c, b);
  if (!isfinite(r) && isfinite(c) && n > 0)
    r = seq_steps<T, VAR, BWD>((const T *)p.A, (const T *)p.B, (const T *)p.X,
                               (const T *)p.dy, p.seq_len, p.state, t, n, j, c);
  return r;
}

/* ---- kernels ------------------------------------------------------------------ */

/*
 * Tile shape per element type: each thread moves VEC adjacent channels (one
 * 8- or 16-byte access a row) and composes `rows` consecutive rows.
 *
 * The row count is what lets the chain step inside a block use the composed
 * maps without a fallback. For float32 data in float64, 4 rows give maps
 * with |product| <= (3.4e38)^4 ~ 1.3e154 and |recurrence from 0| <= 4 *
 * 1.2e77 * (3.4e38)^3 ~ 2e193, both finite and normal, so fma(a, c, b) is
 * only non-finite when the state itself leaves the double range. For
 * float64 data no such bound exists, so each thread composes a single row
 * and the chain step is the recurrence itself.
 */
/* min_blocks_*: resident blocks per multiprocessor the register budget is
 * fitted to (each block walks a whole range of time, so keeping all of a
 * typical grid resident at once matters). */
template <typename T> struct scan_shape;
template <> struct scan_shape<float> {
  static constexpr int vec = 2, rows = 4, min_blocks_fwd = 4, min_blocks_bwd = 3;
};
template <> struct scan_shape<double> {
  static constexpr int vec = 2, rows = 1, min_blocks_fwd = 4, min_blocks_bwd = 4;
};

/*
 * The tiled scan of one (channel group, chunk) per block: grid (groups,
 * chunks run), block TX * TY threads, chunk index chunk0 + blockIdx.y.
 * AGG: compose the chunk into (product, recurrence from 0) per channel into
 * agg_a, agg_b. Otherwise run the chunk from its carry in (agg_b when time
 * is split, else h0 / 0) and write the results.
 *
 * Registers hold, per tile, what the compose step needs (forward: X and,
 * token-dependent, A and B; backward: dy and, token-dependent, A one row
 * later). The backward's remaining inputs (B, X and h[t-1]) are only needed
 * by the replay: they are prefetched into L2 when the tile starts and read
 * in the replay, which keeps them out of registers across the chain step.
 */
template <typename T, bool VAR, bool BWD, bool AGG, int TX, int TY>
__global__ void __launch_bounds__(TX * TY, BWD ? scan_shape<T>::min_blocks_bwd
                                                : scan_shape<T>::min_blocks_fwd)
    scan_tiles(const scan_args p, int64_t chunk0) {
  constexpr int VEC = scan_shape<T>::vec;
  constexpr int S = scan_shape<T>::rows;
  constexpr int W = TX * VEC;
  constexpr int L = TY * S;
  constexpr int64_t DIR = BWD ? -1 : 1;

  __shared__ double sh_a[TY][W]; /* per sub-chunk: product of coefficients */
  __shared__ double sh_b[TY][W]; /* per sub-chunk: recurrence from 0 */
  __shared__ double sh_c[TY][W]; /* per sub-chunk: carry in */

  const T *__restrict__ A = (const T *)p.A;
  const T *__restrict__ B = (const T *)p.B;
  const T *__restrict__ X = (const T *)p.X;
  const T *__restrict__ h0 = (const T *)p.h0;
  const T *__restrict__ Hs = (const T *)p.out;
  const T *__restrict__ dy = (const T *)p.dy;
  const int64_t N = p.state, T_len = p.seq_len;
  const int64_t rstep = DIR * N; /* element offset from one row to the next in scan order */

  const int tid = threadIdx.x;
  const int tx = tid % TX, ty = tid / TX;
  const int64_t j0 = (int64_t)blockIdx.x * W + tx * VEC; /* this thread's first channel */
  const int64_t jrem = N - j0;
  const int vec = p.vec;
  constexpr int PF_EVERY = 32 / (VEC * (int)sizeof(T)); /* threads per 32-byte sector */
  const bool pf = vec && jrem > 0 && tx % PF_EVERY == 0;  /* one L2 prefetch per sector */
  const int64_t chunk = chunk0 + blockIdx.y;
  const int64_t t_lo = chunk * p.chunk_len;
  const int64_t t_hi = t_lo + p.chunk_len < T_len ? t_lo + p.chunk_len : T_len;
  const int64_t len = t_hi - t_lo;
  const int64_t first = BWD ? t_hi - 1 : t_lo; /* first row in scan order */
  const int64_t ntiles = (len + L - 1) / L;

  /* The shared-form coefficient and input weight of this thread's channels. */
  T Aj[VEC], Bj[VEC];
#pragma unroll
  for (int v = 0; v < VEC; v++) Aj[v] = Bj[v] = (T)0;
  if (!VAR) {
    row_load(A, j0, jrem, 0, Aj);
    if (!BWD || !AGG) row_load(B, j0, jrem, 0, Bj);
  }

  /* The chain thread of channel jc carries the state across tiles. */
  const bool chain = tid < W;
  const int64_t jc = (int64_t)blockIdx.x * W + tid;
  const bool chain_live = chain && jc < N;
  double carry = 0.0, prod = 1.0;
  if (!AGG && chain_live)
    carry = p.agg_b ? p.agg_b[chunk * N + jc] : (BWD ? 0.0 : (double)h0[jc]);

  double accA[VEC], accB[VEC]; /* shared-form gradient sums */
#pragma unroll
  for (int v = 0; v < VEC; v++) accA[v] = accB[v] = 0.0;

  for (int64_t i = 0; i < ntiles; i++) {
    const int64_t q0 = i * L + ty * S; /* scan position of this thread's first row */
    const int64_t left = len - q0;
    const int nv = left <= 0 ? 0 : (left < S ? (int)left : S); /* valid rows of this thread */
    const int64_t t0 = first + DIR * q0;                        /* its first row */
    const int64_t off0 = t0 * N + j0;

    /* Load what the compose step needs. */
    T ra[S][VEC], rb[S][VEC], rx[S][VEC];
#pragma unroll
    for (int s = 0; s < S; s++) {
      if (s >= nv) break;
      const int64_t off = off0 + s * rstep;
      if (!BWD) {
        if (VAR) row_load(A, off, jrem, vec, ra[s]);
        if (VAR) row_load(B, off, jrem, vec, rb[s]);
        row_load(X, off, jrem, vec, rx[s]);
      } else {
        row_load(dy, off, jrem, vec, rx[s]); /* rx holds dy in the backward */
        if (VAR) {
          if (t0 + DIR * s + 1 < T_len) row_load(A, off + N, jrem, vec, ra[s]);
          else {
#pragma unroll
            for (int v = 0; v < VEC; v++) ra[s][v] = (T)0; /* g[T] = 0 */
          }
        }
      }
    }

    /* Prefetch into L2: the backward replay's rows of this tile, and every
     * row of the next tile. */
    if (pf) {
#pragma unroll
      for (int s = 0; s < S; s++) {
        if (BWD && !AGG && s < nv) {
          const int64_t off = off0 + s * rstep;
          if (VAR) prefetch_l2(B + off);
          prefetch_l2(X + off);
          if (t0 + DIR * s > 0) prefetch_l2(Hs + off - N);
        }
        if (left - L > s) {
          const int64_t off = off0 + (L * DIR + s * DIR) * N;
          if (!BWD) {
            if (VAR) prefetch_l2(A + off);
            if (VAR) prefetch_l2(B + off);
            prefetch_l2(X + off);
          } else {
            prefetch_l2(dy + off);
            if (VAR && t0 - L - s + 1 < T_len) prefetch_l2(A + off + N);
          }
        }
      }
    }

    /* 1. Compose this thread's rows into one map per channel. */
#pragma unroll
    for (int v = 0; v < VEC; v++) {
      double al = 1.0, bl = 0.0;
#pragma unroll
      for (int s = 0; s < S; s++) {
        if (s >= nv) break;
        const double a = VAR ? (double)ra[s][v] : (double)Aj[v];
        const double u =
            BWD ? (double)rx[s][v] : (double)(VAR ? rb[s][v] : Bj[v]) * (double)rx[s][v];
        bl = fma(a, bl, u);
        al *= a;
      }
      sh_a[ty][tx * VEC + v] = al;
      sh_b[ty][tx * VEC + v] = bl;
    }
    __syncthreads();

    /* 2. Walk the sub-chunk maps in scan order, one thread per channel. The
     * maps cannot fail here (see scan_shape), so this is a plain fma. */
    if (chain) {
#pragma unroll 4
      for (int k = 0; k < TY; k++) {
        const double a = sh_a[k][tid], b = sh_b[k][tid];
        if (!AGG) sh_c[k][tid] = carry;
        carry = fma(a, carry, b);
        if (AGG) prod *= a;
      }
    }
    __syncthreads();

    /* 3. Rerun this thread's rows from their carry and write the results. */
    if (!AGG) {
      T rh[S][VEC], rz[S][VEC]; /* backward: h[t-1] and X rows */
      if (BWD) {
#pragma unroll
        for (int s = 0; s < S; s++) {
          if (s >= nv) break;
          const int64_t off = off0 + s * rstep;
          if (VAR) row_load(B, off, jrem, vec, rb[s]);
          row_load(X, off, jrem, vec, rz[s]);
          if (t0 + DIR * s > 0) row_load(Hs, off - N, jrem, vec, rh[s]);
          else row_load(h0, j0, jrem, vec, rh[s]);
        }
      }
      double c[VEC];
#pragma unroll
      for (int v = 0; v < VEC; v++) c[v] = sh_c[ty][tx * VEC + v];
#pragma unroll
      for (int s = 0; s < S; s++) {
        if (s >= nv) break;
        const int64_t off = off0 + s * rstep;
        T o1[VEC], o2[VEC], o3[VEC];
#pragma unroll
        for (int v = 0; v < VEC; v++) {
          const double a = VAR ? (double)ra[s][v] : (double)Aj[v];
          const double bw = VAR ? (double)rb[s][v] : (double)Bj[v];
          const double u = BWD ? (double)rx[s][v] : bw * (double)rx[s][v];
          c[v] = fma(a, c[v], u);
          if (!BWD) {
            o1[v] = (T)c[v];
          } else {
            o1[v] = (T)(c[v] * bw); /* dX */
            const double hp = (double)rh[s][v], xv = (double)rz[s][v];
            if (VAR) {
              o2[v] = (T)(c[v] * hp); /* dA */
              o3[v] = (T)(c[v] * xv); /* dB */
            } else {
              accA[v] += c[v] * hp;
              accB[v] += c[v] * xv;
            }
          }
        }
        if (!BWD) {
          row_store((T *)p.y, off, jrem, vec, o1);
        } else {
          row_store((T *)p.dX, off, jrem, vec, o1);
          if (VAR) {
            row_store((T *)p.dA, off, jrem, vec, o2);
            row_store((T *)p.dB, off, jrem, vec, o3);
          }
        }
      }
    }
  }

  if (AGG) {
    if (chain_live) {
      p.agg_a[chunk * N + jc] = prod;
      p.agg_b[chunk * N + jc] = carry;
    }
    return;
  }
  if (BWD) {
    /* The range that starts at t = 0 ends (in scan order) with g[0]. Row 0
     * of A is A itself in both forms. */
    if (t_lo == 0 && chain_live) ((T *)p.dh0)[jc] = (T)((double)A[jc] * carry);
    if (!VAR) {
      /* Sum the per-thread partials over the sub-chunks in order; the
       * chain's reads of sh_a, sh_b finished before the last barrier. */
#pragma unroll
      for (int v = 0; v < VEC; v++) {
        sh_a[ty][tx * VEC + v] = accA[v];
        sh_b[ty][tx * VEC + v] = accB[v];
      }
      __syncthreads();
      if (chain_live) {
        double sa = 0.0, sb = 0.0;
        for (int k = 0; k < TY; k++) {
          sa += sh_a[k][tid];
          sb += sh_b[k][tid];
        }
        if (p.part_a) {
          p.part_a[chunk * N + jc] = sa;
          p.part_b[chunk * N + jc] = sb;
        } else {
          ((T *)p.dA)[jc] = (T)sa;
          ((T *)p.dB)[jc] = (T)sb;
        }
      }
    }
  }
}

/*
 * Pass 2 of the chunked schedule, one thread per channel: walks the chunk
 * maps in scan order from h0 (forward) or 0 (backward) and replaces each
 * chunk's recurrence-from-0 in agg_b by the carry entering that chunk. The
 * last chunk in scan order has no map (pass 1 skipped it).
 */
template <typename T, bool VAR, bool BWD>
__global__ void scan_carries(const scan_args p) {
  const int64_t N = p.state, C = p.chunks;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < N; j += stride) {
    double c = BWD ? 0.0 : (double)((const T *)p.h0)[j];
    for (int64_t s = 0; s < C; s++) {
      const int64_t k = BWD ? C - 1 - s : s;
      const int64_t idx = k * N + j;
      if (s == C - 1) {
        p.agg_b[idx] = c;
        break;
      }
      const double a = p.agg_a[idx], b = p.agg_b[idx];
      p.agg_b[idx] = c;
      const int64_t t_lo = k * p.chunk_len;
      const int64_t t_hi = t_lo + p.chunk_len < p.seq_len ? t_lo + p.chunk_len : p.seq_len;
      c = chain_step<T, VAR, BWD>(p, a, b, c, BWD ? t_hi - 1 : t_lo, t_hi - t_lo, j);
    }
  }
}

/* Chunked shared-form backward: dA, dB (N) = the per-chunk partials summed
 * from the last chunk in time to the first. */
template <typename T>
__global__ void scan_partials(const scan_args p) {
  const int64_t N = p.state, C = p.chunks;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < N; j += stride) {
    double sa = 0.0, sb = 0.0;
    for (int64_t k = C - 1; k >= 0; k--) {
      sa += p.part_a[k * N + j];
      sb += p.part_b[k * N + j];
    }
    ((T *)p.dA)[j] = (T)sa;
    ((T *)p.dB)[j] = (T)sb;
  }
}

/* ---- launchers ------------------------------------------------------------------ */

/* True when every row pointer is aligned to a whole vector and rows of N
 * elements keep that alignment, so rows can be moved as vectors. */
static int scan_vec_ok(size_t bytes, int64_t N, size_t es, const void *const *ptrs, int count) {
  if (((uint64_t)N * es) % bytes != 0) return 0;
  for (int i = 0; i < count; i++)
    if ((uintptr_t)ptrs[i] % bytes != 0) return 0;
  return 1;
}

/* Runs the scan (forward or backward, shared or token-dependent form) with
 * the schedule that fits the sizes. rows lists the pointers read or written
 * by rows (their alignment decides vector access). */
template <typename T, bool VAR, bool BWD>
static bk_status scan_run(bk_context *ctx, const char *fn, scan_args p, const void *const *rows,
                          int nrows) {
  const cudaStream_t stream = bk_stream(ctx);
  const int64_t sm = bk_cu(ctx)->sm_count > 0 ? bk_cu(ctx)->sm_count : 1;
  constexpr int VEC = scan_shape<T>::vec, S = scan_shape<T>::rows;
  const int64_t T_len = p.seq_len, N = p.state;
  p.vec = scan_vec_ok(VEC * sizeof(T), N, sizeof(T), rows, nrows);
  p.chunk_len = T_len;
  p.chunks = 1;
  p.agg_a = p.agg_b = p.part_a = p.part_b = NULL;

  /* Short sequences: wide, shallow tiles (64 x 4 threads). */
  if (T_len <= 32) {
    constexpr int TX = 64, TY = SCAN_THREADS / TX, W = TX * VEC;
    const int64_t groups = (N + W - 1) / W;
    if (groups > INT32_MAX)
      return bk__fail(BK_ERR_UNSUPPORTED, fn, "state = %lld needs more than 2^31 blocks",
                      (long long)N);
    scan_tiles<T, VAR, BWD, false, TX, TY>
        <<<dim3((unsigned)groups, 1), TX * TY, 0, stream>>>(p, 0);
    return bk__cuda_launched(fn, "scan_tiles");
  }

  /* Long sequences: 16 x 16 threads, 32 channels a block. */
  constexpr int TX = 16, TY = SCAN_THREADS / TX, W = TX * VEC, L = TY * S;
  const int64_t groups = (N + W - 1) / W;
  if (groups > INT32_MAX)
    return bk__fail(BK_ERR_UNSUPPORTED, fn, "state = %lld needs more than 2^31 blocks",
                    (long long)N);

  /* Split time only when the channel groups alone leave the device short
   * of blocks; chunks keep at least 256 rows and two tiles each. */
  int64_t chunks = 1;
  if (groups < 2 * sm) {
    chunks = (4 * sm + groups - 1) / groups;
    const int64_t most = T_len / (2 * L > 256 ? 2 * L : 256);
    if (chunks > most) chunks = most;
  }
  if (chunks < 2) {
    scan_tiles<T, VAR, BWD, false, TX, TY>
        <<<dim3((unsigned)groups, 1), TX * TY, 0, stream>>>(p, 0);
    return bk__cuda_launched(fn, "scan_tiles");
  }
  const int64_t per = (T_len + chunks - 1) / chunks;
  p.chunk_len = (per + L - 1) / L * L;
  p.chunks = (T_len + p.chunk_len - 1) / p.chunk_len;

  const bool shared_bwd = BWD && !VAR;
  const size_t plane = (size_t)p.chunks * (size_t)N * sizeof(double);
  void *scratch = NULL;
  bk_status st = bk__cuda_scratch(ctx, fn, plane * (shared_bwd ? 3 : 2), &scratch);
  if (st != BK_OK) return st;
  p.agg_a = (double *)scratch;
  p.agg_b = (double *)((char *)scratch + plane);

  /* Pass 1: the maps of every chunk but the last in scan order. */
  scan_tiles<T, VAR, BWD, true, TX, TY>
      <<<dim3((unsigned)groups, (unsigned)(p.chunks - 1)), TX * TY, 0, stream>>>(p, BWD ? 1 : 0);
  st = bk__cuda_launched(fn, "scan_tiles (chunk maps)");
  /* Pass 2: carries into every chunk. */
  if (st == BK_OK) {
    scan_carries<T, VAR, BWD>
        <<<bk_cuda_blocks(ctx, N, SCAN_THREADS), SCAN_THREADS, 0, stream>>>(p);
    st = bk__cuda_launched(fn, "scan_carries");
  }
  /* Pass 3: every chunk from its carry. */
  if (st == BK_OK) {
    if (shared_bwd) {
      p.part_a = p.agg_a; /* the maps are spent after pass 2 */
      p.part_b = (double *)((char *)scratch + 2 * plane);
    }
    scan_tiles<T, VAR, BWD, false, TX, TY>
        <<<dim3((unsigned)groups, (unsigned)p.chunks), TX * TY, 0, stream>>>(p, 0);
    st = bk__cuda_launched(fn, "scan_tiles (chunks)");
  }
  if (st == BK_OK && shared_bwd) {
    scan_partials<T><<<bk_cuda_blocks(ctx, N, SCAN_THREADS), SCAN_THREADS, 0, stream>>>(p);
    st = bk__cuda_launched(fn, "scan_partials");
  }
  bk__cuda_scratch_free(ctx, scratch);
  return st;
}

template <typename T, bool BWD>
static bk_status scan_dispatch(bk_context *ctx, const char *fn, const scan_args &p, int var,
                               const void *const *rows, int nrows) {
  return var ? scan_run<T, true, BWD>(ctx, fn, p, rows, nrows)
             : scan_run<T, false, BWD>(ctx, fn, p, rows, nrows);
}

/* ---- entries ------------------------------------------------------------------- */

extern "C" bk_status bk__cuda_scan_diag(bk_context *ctx, bk_dtype dt, const void *A,
                                        const void *B, const void *X, const void *h0, void *y,
                                        int64_t seq_len, int64_t state, int var) {
  const char *fn = var ? "bk_scan_diag_var" : "bk_scan_diag";
  scan_args p = {};
  p.A = A;
  p.B = B;
  p.X = X;
  p.h0 = h0;
  p.y = y;
  p.seq_len = seq_len;
  p.state = state;
  const void *rows[] = {X, y, A, B};
  const int nrows = var ? 4 : 2;
  return dt == BK_F32 ? scan_dispatch<float, false>(ctx, fn, p, var, rows, nrows)
                      : scan_dispatch<double, false>(ctx, fn, p, var, rows, nrows);
}

extern "C" bk_status bk__cuda_scan_diag_backward(bk_context *ctx, bk_dtype dt, const void *A,
                                                 const void *B, const void *X, const void *h0,
                                                 const void *out, const void *dy, void *dA,
                                                 void *dB, void *dX, void *dh0, int64_t seq_len,
                                                 int64_t state, int var) {
  const char *fn = var ? "bk_scan_diag_var_backward" : "bk_scan_diag_backward";
  scan_args p = {};
  p.A = A;
  p.B = B;
  p.X = X;
  p.h0 = h0;
  p.out = out;
  p.dy = dy;
  p.dA = dA;
  p.dB = dB;
  p.dX = dX;
  p.dh0 = dh0;
  p.seq_len = seq_len;
  p.state = state;
  const void *rows[] = {X, out, dy, dX, h0, A, B, dA, dB};
  const int nrows = var ? 9 : 5;
  return dt == BK_F32 ? scan_dispatch<float, true>(ctx, fn, p, var, rows, nrows)
                      : scan_dispatch<double, true>(ctx, fn, p, var, rows, nrows);
}
