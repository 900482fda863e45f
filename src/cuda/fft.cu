/*
 * fft.cu — real FFTs over the packed half spectrum on CUDA (contract §3.9).
 *
 * The transforms are cuFFT's 1-D batched R2C/C2R (float32) and D2Z/Z2D
 * (float64). The packed layout (batch, n/2+1, 2) is exactly cuFFT's
 * interleaved cufftComplex / cufftDoubleComplex half spectrum, so the
 * forward transform writes the result buffer directly.
 *
 * Plans are cached in the context (slot BK_CUDA_CACHE_FFT) by (n, batch,
 * dtype, direction), at most FFT_CACHE_CAP of them, least recently used
 * evicted first. Plans never allocate their own work area: each call takes
 * it from the stream-ordered scratch pool, so a cached plan holds no large
 * device memory and the work area is valid on whichever stream the context
 * uses at the time of the call.
 *
 * A plan used while the stream is being captured into a CUDA graph is
 * pinned: the graph's kernels read the plan's device tables at every
 * replay, so the plan stays until the context is destroyed and is never
 * evicted. Creating a plan allocates and synchronizes, so a miss while
 * capturing is refused (BK_ERR_UNSUPPORTED): run the shape once before
 * capturing it.
 *
 * The inverse never touches its input: cuFFT's C2R overwrites its input, so
 * the spectrum is first copied into scratch by one kernel that also zeroes
 * the ignored imaginary parts (bin 0 and, for even n, bin n/2) and, for the
 * normalized inverse, multiplies by 1/n. Folding 1/n into that copy applies
 * the factor inside the transform, with no extra pass over the result. The
 * factor is applied in float64 and rounded once to the data type; scaling
 * the spectrum rather than the result only differs where the spectrum is
 * within a factor n of the smallest normal number, far below the FFT's own
 * rounding error relative to the result's magnitude.
 *
 * n == 1 is the identity (X[0] = x[0]), an element map by a small kernel.
 * Other short rows (n <= FFT_DIRECT_MAX) are transformed
 * directly, without cuFFT: at such lengths a row is a few cache lines and
 * the transform's cost is the memory pass, which cuFFT's batched kernels and
 * the extra passes around them (the zeroed imaginary parts, the copy of the
 * inverse's input) did not reach. One kernel reads a tile of rows into shared
 * memory with coalesced loads, each thread evaluates the DFT of its row from
 * registers (the terms t and n - t paired, so a bin costs (n-1)/2 multiply-
 * adds per part) against a table of w^(kt) built once per block, writes the
 * half spectrum (or the signal) back into the tile, and the block stores the
 * tile with coalesced stores; the block's next tile arrives meanwhile. The arithmetic is in the data's type with
 * twiddles computed in float64 and rounded once; the imaginary parts of the
 * real bins are written as +0 and, for the inverse, the ignored ones never
 * read. The inverse's 1/n factor multiplies each result in float64, rounded
 * once.
 */
#include "cuda_internal.h"

#include <cuda_pipeline.h>
#include <cufft.h>

#include <stdint.h>

#define FFT_THREADS 256
#define FFT_CACHE_CAP 16

/* ---- kernels ------------------------------------------------------------- */

/* A complex bin of the real type R, as a 2*sizeof(R)-byte vector. */
template <typename R> struct fft_complex;
template <> struct fft_complex<float> { typedef float2 type; };
template <> struct fft_complex<double> { typedef double2 type; };

/* spec, work (count bins = batch * m, m = n/2+1, each [re, im]): work is
 * spec with the imaginary part of bin 0 (and of bin m-1 when n is even) set
 * to zero and every value multiplied by `scale` in float64. `vec` says that
 * spec is aligned to a whole bin, so a bin can be read as one vector. The
 * bin index k = i % m is formed once per thread and then advanced by the
 * grid stride without further divisions. */
template <typename R>
__global__ void spec_prepare(const R *__restrict__ spec, R *__restrict__ work, int64_t count,
                             int64_t m, int even, double scale, int vec) {
  typedef typename fft_complex<R>::type C;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const int64_t kstep = stride % m;
  int64_t k = i % m;
  for (; i < count; i += stride) {
    R re, im;
    if (vec) {
      C v = __ldcs((const C *)spec + i);
      re = v.x;
      im = v.y;
    } else {
      re = __ldcs(spec + 2 * i);
      im = __ldcs(spec + 2 * i + 1);
    }
    const bool real_bin = k == 0 || (even && k == m - 1);
    C o;
    o.x = (R)((double)re * scale);
    o.y = real_bin ? (R)0 : (R)((double)im * scale);
    ((C *)work)[i] = o; /* work is scratch from the pool: always aligned */
    k += kstep;
    if (k >= m) k -= m;
  }
}

/* y (batch, m, 2): the imaginary parts of bin 0 and, for even n, bin m-1 of
 * every row set to exact +0. cuFFT computes them as sums that cancel only up
 * to rounding; the contract stores them as zeros. One thread per row. */
template <typename R>
__global__ void real_bins_zero(R *__restrict__ y, int64_t batch, int64_t m, int even) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < batch; b += stride) {
    y[2 * (b * m) + 1] = (R)0;
    if (even) y[2 * (b * m + m - 1) + 1] = (R)0;
  }
}

/* n == 1: x (batch) -> y (batch, 1, 2) = [x, 0]. An element map, not a
 * transform: faster than the tile of the direct transform. */
template <typename R>
__global__ void rfft_len1(const R *__restrict__ x, R *__restrict__ y, int64_t batch) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < batch; b += stride) {
    y[2 * b] = x[b];
    y[2 * b + 1] = (R)0;
  }
}

/* n == 1: spec (batch, 1, 2) -> y (batch) = re (the 1/n factor is 1 and the
 * imaginary part of bin 0 is ignored). */
template <typename R>
__global__ void irfft_len1(const R *__restrict__ spec, R *__restrict__ y, int64_t batch) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < batch; b += stride)
    y[b] = spec[2 * b];
}

/* ---- the direct transform of short rows ------------------------------------ */

#define FFT_DIRECT_MAX 32
#define FFT_DIRECT_THREADS 128
/* Shared memory one tile of rows takes; a block holds two, the one it
 * transforms and the next one arriving (cp.async), and several blocks share
 * an SM, so loads, arithmetic and stores of different tiles overlap. */
#define FFT_DIRECT_TILE_BYTES 16384
/* Stores a thread keeps in flight while writing a tile out. */
#define FFT_DIRECT_UNROLL 8

static __host__ __device__ inline int fft_round16(int bytes) { return (bytes + 15) & ~15; }

/* tab[k*H + t-1] = w^(k t mod n), w^e = (cos, sin)(2 pi e / n) computed in
 * float64 and rounded once, for k < m and 1 <= t <= H. */
template <typename R, int H>
__device__ void direct_table(typename fft_complex<R>::type *tab, int n, int m) {
  for (int i = threadIdx.x; i < m * H; i += blockDim.x) {
    const int k = i / H, t = i - k * H + 1;
    double sn, cs;
    sincospi(2.0 * (double)((k * t) % n) / (double)n, &sn, &cs);
    tab[i].x = (R)cs;
    tab[i].y = (R)sn;
  }
}

/* Starts the copy of count elements of packed rows of width w from global
 * memory into the tile (row stride S), each thread taking every
 * blockDim.x-th element, with cp.async (no staging registers); commits
 * them as one group. */
template <typename R>
__device__ void direct_fetch(const R *__restrict__ src, R *tile, int count, int w, int S) {
  const int step = blockDim.x, qr = step / w, qc = step - qr * w;
  int r = threadIdx.x / w, c = threadIdx.x - r * w;
  for (int j = threadIdx.x; j < count; j += step) {
    __pipeline_memcpy_async(tile + r * S + c, src + j, sizeof(R));
    c += qc;
    r += qr;
    if (c >= w) {
      c -= w;
      r++;
    }
  }
  __pipeline_commit();
}

/* Writes count elements of the tile's rows of width w (row stride S) to
 * packed rows in global memory, FFT_DIRECT_UNROLL a thread in flight. */
template <typename R>
__device__ void direct_store(const R *tile, R *__restrict__ dst, int count, int w, int S) {
  const int step = blockDim.x, qr = step / w, qc = step - qr * w;
  int j = threadIdx.x, r = j / w, c = j - r * w;
  while (j < count) {
    R v[FFT_DIRECT_UNROLL];
#pragma unroll
    for (int u = 0; u < FFT_DIRECT_UNROLL; u++) {
      if (j + u * step < count) v[u] = tile[r * S + c];
      c += qc;
      r += qr;
      if (c >= w) {
        c -= w;
        r++;
      }
    }
#pragma unroll
    for (int u = 0; u < FFT_DIRECT_UNROLL; u++)
      if (j + u * step < count) __stcs(dst + j + u * step, v[u]);
    j += FFT_DIRECT_UNROLL * step;
  }
}

/* One row of the table against the paired terms: re = base + sum_t c_t
 * cos, im = sum_t s_t sin over t < h, in order. Both directions are this
 * sum (the forward over the row's samples, the inverse over its bins). */
template <typename R, int H>
__device__ __forceinline__ void direct_dot(const typename fft_complex<R>::type *w,
                                           const R (&c)[H], const R (&s)[H], int h, R base,
                                           R &re, R &im) {
  re = base;
  im = (R)0;
#pragma unroll
  for (int t = 0; t < H; t++) {
    if (t < h) {
      const typename fft_complex<R>::type q = w[t];
      re = fma(c[t], q.x, re);
      im = fma(s[t], q.y, im);
    }
  }
}

/* One row of the tile, p[0..n) -> its half spectrum p[0..2m): the terms t
 * and n - t are paired (a = x_t + x_{n-t}, b = x_{n-t} - x_t), so
 * Re X_k = x_0 + (-1)^k x_{n/2} + sum a_t cos, Im X_k = sum b_t sin. */
template <typename R, int H>
__device__ void direct_forward(R *p, const typename fft_complex<R>::type *tab, int n, int m,
                               int h) {
  const bool even = (n & 1) == 0;
  const R x0 = p[0], xh = even ? p[n / 2] : (R)0;
  R a[H], b[H];
#pragma unroll
  for (int t = 1; t <= H; t++) {
    const R u = t <= h ? p[t] : (R)0, v = t <= h ? p[n - t] : (R)0;
    a[t - 1] = u + v;
    b[t - 1] = v - u;
  }
  for (int k = 0; k < m; k++) {
    R re, im;
    direct_dot<R, H>(tab + k * H, a, b, h, even ? ((k & 1) ? x0 - xh : x0 + xh) : x0, re, im);
    p[2 * k] = re;
    p[2 * k + 1] = (k == 0 || (even && k == m - 1)) ? (R)0 : im;
  }
}

/* One row of the tile, half spectrum p[0..2m) -> signal p[0..n), times
 * scale (1 or 1/n, in float64): with c_k = 2 Re X_k, s_k = -2 Im X_k,
 * E_t = X_0 + (-1)^t X_{n/2} + sum c_k cos, O_t = sum s_k sin, and
 * y_t = E_t + O_t, y_{n-t} = E_t - O_t. The imaginary parts of bins 0 and
 * n/2 are not read. */
template <typename R, int H>
__device__ void direct_inverse(R *p, const typename fft_complex<R>::type *tab, int n, int m,
                               int h, double scale, bool scaled) {
  const bool even = (n & 1) == 0;
  const R X0 = p[0], Xh = even ? p[2 * (m - 1)] : (R)0;
  R cr[H], si[H];
#pragma unroll
  for (int k = 1; k <= H; k++) {
    cr[k - 1] = k <= h ? (R)2 * p[2 * k] : (R)0;
    si[k - 1] = k <= h ? (R)-2 * p[2 * k + 1] : (R)0;
  }
  for (int t = 0; t < m; t++) {
    R e, o;
    direct_dot<R, H>(tab + t * H, cr, si, h, even ? ((t & 1) ? X0 - Xh : X0 + Xh) : X0, e, o);
    R y0 = h ? e + o : e, y1 = e - o;
    if (scaled) {
      y0 = (R)((double)y0 * scale);
      y1 = (R)((double)y1 * scale);
    }
    p[t] = y0;
    if (t != 0 && 2 * t != n) p[n - t] = y1;
  }
}

/* in (batch rows of in_w) -> out (batch rows of out_w): forward (in_w = n,
 * out_w = 2m) or inverse (in_w = 2m, out_w = n), tile_rows rows a tile,
 * tile row stride S (odd, at least both widths), grid-strided over tiles;
 * the next tile of the block is fetched while the current one is
 * transformed and stored. */
template <typename R, int H, bool INV>
__global__ void __launch_bounds__(FFT_DIRECT_THREADS)
    fft_direct(const R *__restrict__ in, R *__restrict__ out, int64_t batch, int n,
               int tile_rows, int S, double scale) {
  typedef typename fft_complex<R>::type C;
  extern __shared__ __align__(16) unsigned char fft_smem[];
  const int m = n / 2 + 1, h = (n - 1) / 2;
  const int in_w = INV ? 2 * m : n, out_w = INV ? n : 2 * m;
  C *tab = (C *)fft_smem;
  R *const tiles = (R *)(fft_smem + fft_round16(m * H * (int)sizeof(C)));
  const int tile_len = tile_rows * S; /* tile b is tiles + b * tile_len */
  const int64_t step = (int64_t)gridDim.x * tile_rows;
  int64_t r0 = (int64_t)blockIdx.x * tile_rows;
  if (r0 >= batch) return;
  auto rows_at = [&](int64_t r) { return batch - r < tile_rows ? (int)(batch - r) : tile_rows; };
  direct_fetch<R>(in + r0 * in_w, tiles, rows_at(r0) * in_w, in_w, S);
  direct_table<R, H>(tab, n, m);
  for (int b = 0; r0 < batch; r0 += step, b ^= 1) {
    const int64_t r1 = r0 + step;
    if (r1 < batch) direct_fetch<R>(in + r1 * in_w, tiles + (b ^ 1) * tile_len, rows_at(r1) * in_w, in_w, S);
    else __pipeline_commit(); /* an empty group: the wait below stays the same */
    __pipeline_wait_prior(1); /* this thread's copies of tile r0 have landed */
    __syncthreads();          /* everyone's, and the table */
    const int rows = rows_at(r0);
    R *tile = tiles + b * tile_len;
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      if (INV) direct_inverse<R, H>(tile + r * S, tab, n, m, h, scale, scale != 1.0);
      else direct_forward<R, H>(tile + r * S, tab, n, m, h);
    }
    __syncthreads();
    direct_store<R>(tile, out + r0 * out_w, rows * out_w, out_w, S);
    __syncthreads(); /* the tile is free for the fetch after next */
  }
}

/* ---- plan cache ------------------------------------------------------------ */

typedef struct fft_plan_entry {
  int live;
  int dtype;   /* bk_dtype */
  int inverse; /* 0: R2C/D2Z, 1: C2R/Z2D */
  int64_t n, batch;
  cufftHandle plan;
  size_t work_bytes;
  uint64_t last_use;
  int pinned; /* used by a captured graph: never evicted */
} fft_plan_entry;

typedef struct fft_cache {
  fft_plan_entry entry[FFT_CACHE_CAP];
  uint64_t clock;
} fft_cache;

/* Destroys every cached plan; the context calls it once, after its stream
 * has drained. */
static void fft_cache_free(void *p) {
  fft_cache *cache = (fft_cache *)p;
  for (int i = 0; i < FFT_CACHE_CAP; i++)
    if (cache->entry[i].live) (void)cufftDestroy(cache->entry[i].plan);
  bk__host_free(cache);
}

static const char *cufft_name(cufftResult r) {
  switch (r) {
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_UNALIGNED_DATA: return "CUFFT_UNALIGNED_DATA";
    case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    default: return "cuFFT error";
  }
}

/* Maps a cuFFT result to a status with a message naming the call, n and
 * batch. */
static bk_status cufft_status(cufftResult r, const char *fn, const char *what, int64_t n,
                              int64_t batch) {
  if (r == CUFFT_SUCCESS) return BK_OK;
  /* cuFFT reports through its own codes; leave no CUDA error behind. */
  (void)cudaGetLastError();
  bk_status st = BK_ERR_DEVICE;
  if (r == CUFFT_ALLOC_FAILED) st = BK_ERR_OUT_OF_MEMORY;
  else if (r == CUFFT_INVALID_SIZE || r == CUFFT_NOT_SUPPORTED || r == CUFFT_NOT_IMPLEMENTED)
    st = BK_ERR_UNSUPPORTED;
  return bk__fail(st, fn, "%s failed for n = %lld, batch = %lld: %s (%d)", what, (long long)n,
                  (long long)batch, cufft_name(r), (int)r);
}

/* The cached plan for (dt, inverse, n, batch), created on a miss. The
 * layout is the packed one: real rows of n values, complex rows of n/2+1
 * bins, both contiguous. */
static bk_status fft_plan(bk_context *ctx, const char *fn, bk_dtype dt, int inverse, int64_t n,
                          int64_t batch, fft_plan_entry **out) {
  bk_cuda_ctx *c = bk_cu(ctx);
  fft_cache *cache = (fft_cache *)c->cache[BK_CUDA_CACHE_FFT];
  if (!cache) {
    cache = (fft_cache *)bk__host_zalloc(fn, "memory for the cuFFT plan cache", 1, sizeof *cache);
    if (!cache) return BK_ERR_OUT_OF_MEMORY;
    c->cache[BK_CUDA_CACHE_FFT] = cache;
    c->cache_free[BK_CUDA_CACHE_FFT] = fft_cache_free;
  }
  bool capturing = false;
  bk_status st = bk__cuda_capturing(ctx, fn, &capturing);
  if (st != BK_OK) return st;
  fft_plan_entry *victim = NULL;
  for (int i = 0; i < FFT_CACHE_CAP; i++) {
    fft_plan_entry *e = &cache->entry[i];
    if (e->live && e->dtype == (int)dt && e->inverse == inverse && e->n == n &&
        e->batch == batch) {
      e->last_use = ++cache->clock;
      if (capturing) e->pinned = 1;
      *out = e;
      return BK_OK;
    }
    if (e->pinned) continue;
    if (!victim || (victim->live && (!e->live || e->last_use < victim->last_use))) victim = e;
  }
  if (capturing)
    return bk__fail(BK_ERR_UNSUPPORTED, fn,
                    "no cuFFT plan for n = %lld, batch = %lld yet and plans cannot be created "
                    "while the stream is being captured: run the shape once before capturing it",
                    (long long)n, (long long)batch);
  if (!victim)
    return bk__fail(BK_ERR_UNSUPPORTED, fn,
                    "all %d cached cuFFT plans are pinned by captured graphs; no plan for n = "
                    "%lld, batch = %lld can be added to this context",
                    FFT_CACHE_CAP, (long long)n, (long long)batch);
  if (victim->live) {
    (void)cufftDestroy(victim->plan);
    victim->live = 0;
  }

  cufftHandle plan;
  st = cufft_status(cufftCreate(&plan), fn, "cufftCreate", n, batch);
  if (st != BK_OK) return st;
  /* The work area comes from the context's scratch pool at each call. */
  st = cufft_status(cufftSetAutoAllocation(plan, 0), fn, "cufftSetAutoAllocation", n, batch);
  if (st == BK_OK) {
    long long dims[1] = {(long long)n};
    cufftType type = dt == BK_F32 ? (inverse ? CUFFT_C2R : CUFFT_R2C)
                                  : (inverse ? CUFFT_Z2D : CUFFT_D2Z);
    size_t work = 0;
    /* The packed rows are cuFFT's basic layout (no embedding): real rows of
     * n values and complex rows of n/2+1 bins, each batch a whole row on. */
    st = cufft_status(cufftMakePlanMany64(plan, 1, dims, NULL, 1, 0, NULL, 1, 0, type,
                                          (long long)batch, &work),
                      fn, "cufftMakePlanMany64", n, batch);
    if (st == BK_OK) {
      victim->live = 1;
      victim->dtype = (int)dt;
      victim->inverse = inverse;
      victim->n = n;
      victim->batch = batch;
      victim->plan = plan;
      victim->work_bytes = work;
      victim->last_use = ++cache->clock;
      victim->pinned = 0;
      *out = victim;
      return BK_OK;
    }
  }
  (void)cufftDestroy(plan);
  return st;
}

/* ---- launchers ------------------------------------------------------------- */

static size_t round_up_256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* Runs the plan's transform from `in` to `out` on the context's stream with
 * `work` as its work area (NULL when the plan needs none). */
static bk_status fft_exec(bk_context *ctx, const char *fn, bk_dtype dt, fft_plan_entry *e,
                          void *in, void *out, void *work) {
  cufftHandle plan = e->plan;
  bk_status st = cufft_status(cufftSetStream(plan, bk_stream(ctx)), fn, "cufftSetStream", e->n,
                              e->batch);
  if (st != BK_OK) return st;
  if (e->work_bytes) {
    st = cufft_status(cufftSetWorkArea(plan, work), fn, "cufftSetWorkArea", e->n, e->batch);
    if (st != BK_OK) return st;
  }
  cufftResult r;
  const char *what;
  if (dt == BK_F32) {
    if (e->inverse) {
      r = cufftExecC2R(plan, (cufftComplex *)in, (cufftReal *)out);
      what = "cufftExecC2R";
    } else {
      r = cufftExecR2C(plan, (cufftReal *)in, (cufftComplex *)out);
      what = "cufftExecR2C";
    }
  } else {
    if (e->inverse) {
      r = cufftExecZ2D(plan, (cufftDoubleComplex *)in, (cufftDoubleReal *)out);
      what = "cufftExecZ2D";
    } else {
      r = cufftExecD2Z(plan, (cufftDoubleReal *)in, (cufftDoubleComplex *)out);
      what = "cufftExecD2Z";
    }
  }
  return cufft_status(r, fn, what, e->n, e->batch);
}

template <typename R>
static bk_status launch_len1(bk_context *ctx, const char *fn, int inverse, const void *in,
                             void *out, int64_t batch) {
  unsigned blocks = bk_cuda_blocks(ctx, batch, FFT_THREADS);
  if (inverse) {
    irfft_len1<R><<<blocks, FFT_THREADS, 0, bk_stream(ctx)>>>((const R *)in, (R *)out, batch);
    return bk__cuda_launched(fn, "irfft_len1");
  }
  rfft_len1<R><<<blocks, FFT_THREADS, 0, bk_stream(ctx)>>>((const R *)in, (R *)out, batch);
  return bk__cuda_launched(fn, "rfft_len1");
}

/* The direct transform of batch rows of 2 <= n <= FFT_DIRECT_MAX points: tiles
 * of as many rows as fit FFT_DIRECT_TILE_BYTES, two a block, as many blocks
 * as the SMs hold at once or one a tile when there are fewer tiles. */
template <typename R, int H, bool INV>
static bk_status launch_direct_h(bk_context *ctx, const char *fn, const void *in, void *out,
                                 int64_t batch, int n, double scale) {
  typedef typename fft_complex<R>::type C;
  const int m = n / 2 + 1, in_w = INV ? 2 * m : n, out_w = INV ? n : 2 * m;
  const int S = (in_w > out_w ? in_w : out_w) | 1; /* odd: rows in distinct banks */
  const int row_bytes = S * (int)sizeof(R);
  const int tile_rows = FFT_DIRECT_TILE_BYTES / row_bytes;
  const size_t smem =
      (size_t)fft_round16(m * H * (int)sizeof(C)) + 2 * (size_t)tile_rows * row_bytes;
  const void *kern = (const void *)fft_direct<R, H, INV>;
  int per_sm = bk__cuda_occupancy(ctx, kern, FFT_DIRECT_THREADS, smem, 0);
  if (per_sm < 1) per_sm = 1;
  const int64_t tiles = (batch + tile_rows - 1) / tile_rows;
  const int64_t most = (int64_t)per_sm * (bk_cu(ctx)->sm_count > 0 ? bk_cu(ctx)->sm_count : 1);
  const unsigned blocks = (unsigned)(tiles < most ? tiles : most);
  fft_direct<R, H, INV><<<blocks, FFT_DIRECT_THREADS, smem, bk_stream(ctx)>>>(
      (const R *)in, (R *)out, batch, n, tile_rows, S, scale);
  return bk__cuda_launched(fn, "fft_direct");
}

template <typename R, bool INV>
static bk_status launch_direct(bk_context *ctx, const char *fn, const void *in, void *out,
                               int64_t batch, int64_t n, double scale) {
  if (batch == 0) return BK_OK;
  const int h = (int)(n - 1) / 2;
  if (h <= 3) return launch_direct_h<R, 3, INV>(ctx, fn, in, out, batch, (int)n, scale);
  if (h <= 7) return launch_direct_h<R, 7, INV>(ctx, fn, in, out, batch, (int)n, scale);
  return launch_direct_h<R, (FFT_DIRECT_MAX - 1) / 2, INV>(ctx, fn, in, out, batch, (int)n, scale);
}

template <typename R>
static bk_status launch_real_bins_zero(bk_context *ctx, const char *fn, void *y, int64_t batch,
                                       int64_t n) {
  unsigned blocks = bk_cuda_blocks(ctx, batch, FFT_THREADS);
  real_bins_zero<R><<<blocks, FFT_THREADS, 0, bk_stream(ctx)>>>((R *)y, batch, n / 2 + 1,
                                                                 (int)(n % 2 == 0));
  return bk__cuda_launched(fn, "real_bins_zero");
}

template <typename R>
static bk_status launch_spec_prepare(bk_context *ctx, const char *fn, const void *spec,
                                     void *work, int64_t batch, int64_t n, double scale) {
  const int64_t m = n / 2 + 1;
  const int64_t count = batch * m;
  const int vec = ((uintptr_t)spec % (2 * sizeof(R))) == 0;
  unsigned blocks = bk_cuda_blocks(ctx, count, FFT_THREADS);
  spec_prepare<R><<<blocks, FFT_THREADS, 0, bk_stream(ctx)>>>(
      (const R *)spec, (R *)work, count, m, (int)(n % 2 == 0), scale, vec);
  return bk__cuda_launched(fn, "spec_prepare");
}

/* ---- entries ----------------------------------------------------------------- */

extern "C" bk_status bk__cuda_rfft(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                   int64_t batch, int64_t n) {
  static const char fn[] = "bk_rfft";
  const size_t es = bk__dtype_size(dt);
  if (n == 1)
    return dt == BK_F32 ? launch_len1<float>(ctx, fn, 0, x, y, batch)
                        : launch_len1<double>(ctx, fn, 0, x, y, batch);
  if (n <= FFT_DIRECT_MAX)
    return dt == BK_F32 ? launch_direct<float, false>(ctx, fn, x, y, batch, n, 1.0)
                        : launch_direct<double, false>(ctx, fn, x, y, batch, n, 1.0);

  fft_plan_entry *e = NULL;
  bk_status st = fft_plan(ctx, fn, dt, 0, n, batch, &e);
  if (st != BK_OK) return st;

  /* cuFFT's R2C leaves its input intact. An input that is not aligned to a
   * whole complex bin (a buffer imported at an odd element offset) is
   * copied into aligned scratch first, since cuFFT may read real rows as
   * pairs. */
  const bool copy_in = ((uintptr_t)x % (2 * es)) != 0;
  const size_t in_bytes = copy_in ? round_up_256((size_t)batch * (size_t)n * es) : 0;
  const size_t total = in_bytes + e->work_bytes;
  void *scratch = NULL;
  if (total) {
    st = bk__cuda_scratch(ctx, fn, total, &scratch);
    if (st != BK_OK) return st;
  }
  void *in = (void *)x;
  if (copy_in) {
    in = scratch;
    st = bk__cuda_status(cudaMemcpyAsync(in, x, (size_t)batch * (size_t)n * es,
                                         cudaMemcpyDeviceToDevice, bk_stream(ctx)),
                         fn, "cudaMemcpyAsync (aligning the input)");
  }
  if (st == BK_OK) st = fft_exec(ctx, fn, dt, e, in, y, (char *)scratch + in_bytes);
  if (st == BK_OK)
    st = dt == BK_F32 ? launch_real_bins_zero<float>(ctx, fn, y, batch, n)
                      : launch_real_bins_zero<double>(ctx, fn, y, batch, n);
  bk__cuda_scratch_free(ctx, scratch);
  return st;
}

extern "C" bk_status bk__cuda_irfft(bk_context *ctx, bk_dtype dt, const void *spec, void *y,
                                    int64_t batch, int64_t n, int normalize) {
  const char *fn = normalize ? "bk_irfft" : "bk_irfft_unnormalized";
  const size_t es = bk__dtype_size(dt);
  if (n == 1)
    return dt == BK_F32 ? launch_len1<float>(ctx, fn, 1, spec, y, batch)
                        : launch_len1<double>(ctx, fn, 1, spec, y, batch);
  if (n <= FFT_DIRECT_MAX) {
    const double scale = normalize ? 1.0 / (double)n : 1.0;
    return dt == BK_F32 ? launch_direct<float, true>(ctx, fn, spec, y, batch, n, scale)
                        : launch_direct<double, true>(ctx, fn, spec, y, batch, n, scale);
  }

  fft_plan_entry *e = NULL;
  bk_status st = fft_plan(ctx, fn, dt, 1, n, batch, &e);
  if (st != BK_OK) return st;

  /* C2R overwrites its input: it runs on a prepared copy of the spectrum. */
  const size_t spec_bytes = round_up_256((size_t)batch * (size_t)(n / 2 + 1) * 2 * es);
  void *scratch = NULL;
  st = bk__cuda_scratch(ctx, fn, spec_bytes + e->work_bytes, &scratch);
  if (st != BK_OK) return st;
  const double scale = normalize ? 1.0 / (double)n : 1.0;
  st = dt == BK_F32 ? launch_spec_prepare<float>(ctx, fn, spec, scratch, batch, n, scale)
                    : launch_spec_prepare<double>(ctx, fn, spec, scratch, batch, n, scale);
  if (st == BK_OK) st = fft_exec(ctx, fn, dt, e, scratch, y, (char *)scratch + spec_bytes);
  bk__cuda_scratch_free(ctx, scratch);
  return st;
}
