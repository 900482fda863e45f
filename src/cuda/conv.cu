/*
 * conv.cu — grouped convolution on CUDA (bk_conv).
 *
 * Four routes, chosen per call from the geometry:
 *  - depthwise_kernel: 1-D convolutions in which every group holds one
 *    input channel (groups == C_in, any channel multiplier C_out/C_in), any
 *    k, stride, dilation and padding whose input window fits a
 *    shared-memory tile. It is memory-bound: a block stages the input span
 *    of a tile of one output row in shared memory with 16-byte loads
 *    (zeros where the padding is), then each thread computes outputs
 *    threadIdx.x + q*blockDim.x of the tile, so stores are coalesced and the
 *    shared-memory reads of a warp are consecutive.
 *  - depthwise_nd_kernel: the other depthwise convolutions (2-D and 3-D,
 *    1-D windows or paddings the 1-D tile cannot take; groups == C_in > 1,
 *    or one channel into one) whose staged region fits: a tile of output
 *    rows and columns of one output plane per block, its input region
 *    staged in shared memory once per tap plane, the padding and the bias
 *    inside the kernel (no padded copy, no bias pass).
 *  - cuDNN's convolution forward for everything else. The dense kernel
 *    layout is reduced to its diagonal blocks (C_out, C_in/groups, k...) by
 *    extract_kernel, groups go to cudnnSetConvolutionGroupCount, 1-D runs
 *    as 2-D with height 1, and asymmetric padding is split: the symmetric
 *    part min(before, after) is cuDNN's padding and only the remainder is
 *    materialized by pad_kernel into a zero-padded copy of the input. The
 *    batch is split into chunks when a tensor would pass the 32-bit element
 *    counts of cuDNN's descriptors. The engine is the first of cuDNN's
 *    heuristic order (backend API, mode A) that cuDNN reports
 *    deterministic and, for f32, free of tensor cores (TF32) and other
 *    reduced precision; its execution plan and workspace size are cached
 *    in the context per shape and pointer alignment. The bias is added by
 *    bias_kernel in one pass over the output.
 *  - direct_kernel: one thread per output element, for the geometries
 *    cuDNN rejects or cannot describe (also f64 shapes without a cuDNN
 *    algorithm). Correct for every geometry, not fast.
 */
#include "cuda_internal.h"

#include <cudnn.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>

/* ---- geometry passed to kernels ------------------------------------------------ */

/* Depthwise 1-D: rows = N*C_out output rows of `out` elements; output
 * channel oc reads input channel oc / mult. Tiles of tile_out outputs,
 * `tiles` per row; each thread computes up to `per` outputs of a tile. */
typedef struct dw_geom {
  int64_t rows, c_in, c_out, mult, in, out, k, stride, dil, pad;
  int64_t tile_out, tiles, x_len;
  int per, vec_ok;
} dw_geom;

/* Any convolution, normalized to three spatial axes (leading unused axes
 * have extent 1, stride 1, dilation 1, no padding). */
typedef struct direct_geom {
  int64_t n, c_in, c_out, ig, og;
  int64_t in[3], k[3], out[3], stride[3], pad[3], dil[3];
  int64_t in_vol, k_vol, out_vol, total;
} direct_geom;

/* Zero-padding copy, normalized to three spatial axes: planes = N*C_in
 * planes of extents in[] become extents q[] with before[] zeros first. */
typedef struct pad_geom {
  int64_t lines; /* planes * q[0] * q[1] */
  int64_t in[3], q[3], before[3];
} pad_geom;

/* ---- kernels ------------------------------------------------------------------------- */

/* Depthwise 1-D convolution (see the file comment). KMAX > 0 keeps the k <=
 * KMAX weights of a row in registers; KMAX == 0 reads them through the
 * cache for any k. Dynamic shared memory holds the staged input span,
 * 16-byte aligned so that element j of the buffer is flat input element
 * gs + j with gs a multiple of the vector width. */
template <typename T, int KMAX>
static __global__ void __launch_bounds__(256)
depthwise_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ bias,
                 T *__restrict__ y, dw_geom g) {
  constexpr int V = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char dw_smem[];
  T *buf = reinterpret_cast<T *>(dw_smem);
  const int64_t total = g.rows * g.tiles;
  /* The loop bound is uniform across the block, so the barriers below are
   * reached by every thread. */
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const int64_t r = t / g.tiles;
    const int64_t o0 = (t - r * g.tiles) * g.tile_out;
    const int64_t rest = g.out - o0;
    const int nout = (int)(rest < g.tile_out ? rest : g.tile_out);
    const int64_t nn = r / g.c_out, oc = r - nn * g.c_out;
    const int64_t ic = oc / g.mult;
    const int64_t row_base = (nn * g.c_in + ic) * g.in; /* flat index of input row start */
    const int64_t lo = o0 * g.stride - g.pad;           /* first input position of the tile */
    const int64_t span = (int64_t)(nout - 1) * g.stride + (g.k - 1) * g.dil + 1;
    const int64_t g0 = row_base + lo;
    const int a = (int)(((g0 % V) + V) % V);
    const int64_t gs = g0 - a;
    const int nv = (int)((a + span + V - 1) / V);

    for (int j = threadIdx.x; j < nv; j += blockDim.x) {
      const int64_t f = gs + (int64_t)j * V;
      T v[V];
      if (g.vec_ok && f >= 0 && f + V <= g.x_len) {
        bk_ld16(x + f, v);
      } else {
#pragma unroll
        for (int e = 0; e < V; e++) v[e] = (f + e >= 0 && f + e < g.x_len) ? __ldg(x + f + e) : (T)0;
      }
      /* Elements outside this input row are the zero padding (their memory
       * belongs to a neighbouring row or lies outside the buffer). */
#pragma unroll
      for (int e = 0; e < V; e++) {
        const int64_t pos = f + e - row_base;
        if (pos < 0 || pos >= g.in) v[e] = 0;
      }
      bk_st16(buf + (int64_t)j * V, v);
    }
    __syncthreads();

    const T *wrow = w + (oc * g.c_in + ic) * g.k;
    const T b = bias ? __ldg(bias + oc) : (T)0;
    const int dil = (int)g.dil, stride = (int)g.stride;
    T *yrow = y + r * g.out + o0;
    if (KMAX > 0) {
      T wr[KMAX > 0 ? KMAX : 1];
#pragma unroll
      for (int kk = 0; kk < KMAX; kk++) wr[kk] = kk < g.k ? __ldg(wrow + kk) : (T)0;
      for (int q = 0; q < g.per; q++) {
        const int ol = threadIdx.x + q * blockDim.x;
        if (ol < nout) {
          const T *src = buf + a + ol * stride;
          T acc = 0;
#pragma unroll
          for (int kk = 0; kk < KMAX; kk++)
            if (kk < g.k) acc += wr[kk] * src[kk * dil];
          yrow[ol] = acc + b;
        }
      }
    } else {
      const int k = (int)g.k;
      for (int q = 0; q < g.per; q++) {
        const int ol = threadIdx.x + q * blockDim.x;
        if (ol < nout) {
          const T *src = buf + a + ol * stride;
          T acc = 0;
          for (int kk = 0; kk < k; kk++) acc += __ldg(wrow + kk) * src[kk * dil];
          yrow[ol] = acc + b;
        }
      }
    }
    __syncthreads(); /* the buffer is refilled by the next tile */
  }
}

/* Any geometry, one thread per output element, accumulated in double and
 * rounded once. Reads the dense kernel layout directly. */
template <typename T>
static __global__ void __launch_bounds__(256)
direct_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ bias,
              T *__restrict__ y, direct_geom g) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < g.total; idx += step) {
    const int64_t o = idx % g.out_vol, r = idx / g.out_vol;
    const int64_t oc = r % g.c_out, nn = r / g.c_out;
    const int64_t o2 = o % g.out[2], o01 = o / g.out[2];
    const int64_t o1 = o01 % g.out[1], o0 = o01 / g.out[1];
    const int64_t grp = oc / g.og;
    double acc = 0;
    for (int64_t j = 0; j < g.ig; j++) {
      const int64_t ic = grp * g.ig + j;
      const T *xc = x + (nn * g.c_in + ic) * g.in_vol;
      const T *wc = w + (oc * g.c_in + ic) * g.k_vol;
      for (int64_t k0 = 0; k0 < g.k[0]; k0++) {
        const int64_t p0 = o0 * g.stride[0] + k0 * g.dil[0] - g.pad[0];
        if (p0 < 0 || p0 >= g.in[0]) continue;
        for (int64_t k1 = 0; k1 < g.k[1]; k1++) {
          const int64_t p1 = o1 * g.stride[1] + k1 * g.dil[1] - g.pad[1];
          if (p1 < 0 || p1 >= g.in[1]) continue;
          const T *xl = xc + (p0 * g.in[1] + p1) * g.in[2];
          const T *wl = wc + (k0 * g.k[1] + k1) * g.k[2];
          for (int64_t k2 = 0; k2 < g.k[2]; k2++) {
            const int64_t p2 = o2 * g.stride[2] + k2 * g.dil[2] - g.pad[2];
            if (p2 < 0 || p2 >= g.in[2]) continue;
            acc += (double)__ldg(xl + p2) * (double)__ldg(wl + k2);
          }
        }
      }
    }
    if (bias) acc += (double)__ldg(bias + oc);
    y[idx] = (T)acc;
  }
}

/* Zero-padded copy of the input in units of one warp: unit u is segment
 * u % segs of line u / segs (a line is q[2] elements along the last axis,
 * a segment PAD_SEG of them), so that few long lines spread over the
 * device as well as many short ones. A unit's line and plane come from
 * multiply-shift divisions (dsegs: segs; dq1, dq0: q[1], q[0]). */
enum { PAD_SEG = 1024 };

template <typename T>
static __global__ void __launch_bounds__(256)
pad_kernel(const T *__restrict__ x, T *__restrict__ xp, pad_geom g, int64_t segs, bk_divider dsegs,
           bk_divider dq1, bk_divider dq0) {
  const int lane = threadIdx.x & 31;
  const uint64_t units = (uint64_t)g.lines * (uint64_t)segs;
  const uint64_t warps = ((uint64_t)gridDim.x * blockDim.x) >> 5;
  for (uint64_t u = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; u < units; u += warps) {
    const uint64_t l = bk_divider_q(dsegs, u), t = bk_divider_q(dq1, l);
    const uint64_t plane = bk_divider_q(dq0, t);
    const int64_t q0 = (int64_t)(u - l * (uint64_t)segs) * PAD_SEG;
    const int64_t s0 = (int64_t)(t - plane * (uint64_t)g.q[0]) - g.before[0];
    const int64_t s1 = (int64_t)(l - t * (uint64_t)g.q[1]) - g.before[1];
    const bool line_ok = s0 >= 0 && s0 < g.in[0] && s1 >= 0 && s1 < g.in[1];
    const T *src = line_ok ? x + (((int64_t)plane * g.in[0] + s0) * g.in[1] + s1) * g.in[2] : x;
    T *dst = xp + (int64_t)l * g.q[2];
    const int64_t q1 = q0 + PAD_SEG < g.q[2] ? q0 + PAD_SEG : g.q[2];
    for (int64_t q = q0 + lane; q < q1; q += 32) {
      const int64_t s2 = q - g.before[2];
      dst[q] = (line_ok && s2 >= 0 && s2 < g.in[2]) ? __ldg(src + s2) : (T)0;
    }
  }
}

/* Depthwise convolution of two or three spatial axes, or of one whose
 * window the 1-D kernel cannot stage (groups == C_in, output channel oc
 * reading input channel oc / og), normalized to three spatial axes. A
 * block computes a tile of th x tw outputs of one output plane (n, oc,
 * o0): for each tap index k0 it stages the input region the tile reads
 * from input plane o0*stride0 + k0*dil0 in shared memory, zeros where the
 * padding is (scalar loads, consecutive threads consecutive
 * columns), then each thread adds the taps (k1, k2) of that plane to its
 * `per` outputs (columns threadIdx % tw, rows threadIdx / tw + j*256/tw),
 * the tap's weight read once for all of them. Each output's taps are
 * summed in T in index order (k0, k1, k2) and the bias added at the end.
 * Block indices are split with multiply-shift divisions; positions within
 * a plane are int (the plan checks). */
enum { DWT_THREADS = 256, DWT_PER = 4 };

typedef struct dwt_geom {
  int in[3], k[3], stride[3], dil[3], pad[3], out[3];
  int c_in, c_out;
  int tw, th, per, rows, cols; /* tile; outputs a thread; staged region */
  int64_t tiles1, tiles2, units, plane, k_vol;
  bk_divider dt2, dt1, do0, dco;
  bk_div32 dog, dcols;
} dwt_geom;

template <typename T>
static __global__ void __launch_bounds__(DWT_THREADS)
depthwise_nd_kernel(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ bias,
                    T *__restrict__ y, dwt_geom g) {
  extern __shared__ __align__(16) unsigned char dwt_smem[];
  T *sx = reinterpret_cast<T *>(dwt_smem);
  const int tid = threadIdx.x, tx = tid % g.tw, ty = tid / g.tw, ry = DWT_THREADS / g.tw;
  const int region = g.rows * g.cols;
  /* The loop bound is uniform across the block: every thread reaches the
   * barriers. */
  for (int64_t u = blockIdx.x; u < g.units; u += gridDim.x) {
    const uint64_t q2 = bk_divider_q(g.dt2, (uint64_t)u), q1 = bk_divider_q(g.dt1, q2);
    const uint64_t q0 = bk_divider_q(g.do0, q1), nn = bk_divider_q(g.dco, q0);
    const int t2 = (int)((uint64_t)u - q2 * (uint64_t)g.tiles2);
    const int t1 = (int)(q2 - q1 * (uint64_t)g.tiles1);
    const int o0 = (int)(q1 - q0 * (uint64_t)g.out[0]);
    const int oc = (int)(q0 - nn * (uint64_t)g.c_out);
    const int ic = bk_div32_q(g.dog, oc);
    const T *xc = x + ((int64_t)nn * g.c_in + ic) * g.plane;
    const T *wc = w + ((int64_t)oc * g.c_in + ic) * g.k_vol;
    const int R1 = t1 * g.th * g.stride[1] - g.pad[1], R2 = t2 * g.tw * g.stride[2] - g.pad[2];
    const int o2 = t2 * g.tw + tx;
    T acc[DWT_PER];
#pragma unroll
    for (int j = 0; j < DWT_PER; j++) acc[j] = 0;
    for (int k0 = 0; k0 < g.k[0]; k0++) {
      const int p0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dil[0];
      if ((unsigned)p0 >= (unsigned)g.in[0]) continue; /* uniform: a plane of zeros */
      const T *xp = xc + (int64_t)p0 * g.in[1] * g.in[2];
      for (int i = tid; i < region; i += DWT_THREADS) {
        const int r = bk_div32_q(g.dcols, i), c = i - r * g.cols;
        const int p1 = R1 + r, p2 = R2 + c;
        sx[i] = ((unsigned)p1 < (unsigned)g.in[1] && (unsigned)p2 < (unsigned)g.in[2])
                    ? __ldg(xp + p1 * g.in[2] + p2)
                    : (T)0;
      }
      __syncthreads();
      const T *wk = wc + k0 * g.k[1] * g.k[2];
      for (int k1 = 0; k1 < g.k[1]; k1++)
        for (int k2 = 0; k2 < g.k[2]; k2++) {
          const T wv = __ldg(wk + k1 * g.k[2] + k2);
          const int off = k1 * g.dil[1] * g.cols + tx * g.stride[2] + k2 * g.dil[2];
#pragma unroll
          for (int j = 0; j < DWT_PER; j++)
            if (j < g.per) acc[j] += wv * sx[(ty + j * ry) * g.stride[1] * g.cols + off];
        }
      __syncthreads(); /* the region is restaged for the next plane */
    }
    if (o2 < g.out[2]) {
      T *yp = y + (int64_t)((int64_t)q1 * g.out[1]) * g.out[2];
      const T b = bias ? __ldg(bias + oc) : (T)0;
#pragma unroll
      for (int j = 0; j < DWT_PER; j++) {
        const int o1 = t1 * g.th + ty + j * ry;
        if (j < g.per && o1 < g.out[1])
          yp[(int64_t)o1 * g.out[2] + o2] = bias ? acc[j] + b : acc[j];
      }
    }
  }
}

/* The diagonal blocks of the dense kernel: wc (c_out, ig, kv) with
 * wc[oc, j, :] = w[oc, (oc/og)*ig + j, :]. */
template <typename T>
static __global__ void __launch_bounds__(256)
extract_kernel(const T *__restrict__ w, T *__restrict__ wc, int64_t c_out, int64_t c_in,
               int64_t ig, int64_t og, int64_t kv) {
  const int64_t row = ig * kv, total = c_out * row;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t oc = i / row, rem = i - oc * row;
    wc[i] = __ldg(w + (oc * c_in + (oc / og) * ig) * kv + rem);
  }
}

/* y (planes of vol elements, plane p of output channel p % c_out) +=
 * bias[channel], rounded once in T: the bias of the cuDNN route, one pass
 * over the output. A thread takes VEC consecutive elements as one 16-byte
 * vector (one multiply-shift division for the vector, the channel then
 * advanced at plane ends), threads of a warp consecutive vectors; the last
 * count % VEC elements one a thread. */
template <typename T, int VEC>
static __global__ void __launch_bounds__(256)
bias_kernel(T *__restrict__ y, const T *__restrict__ bias, int64_t count, int64_t vol,
            int64_t c_out, bk_divider dvol, bk_divider dch) {
  const int64_t vecs = count / VEC;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (int64_t u = first; u < vecs; u += step) {
    const int64_t e0 = u * VEC;
    const uint64_t q = bk_divider_q(dvol, (uint64_t)e0);
    int64_t r = e0 - (int64_t)q * vol;
    int64_t c = (int64_t)(q - bk_divider_q(dch, q) * (uint64_t)c_out);
    T v[VEC];
    bk_vload<VEC>(y + e0, v);
    T b = __ldg(bias + c);
#pragma unroll
    for (int i = 0; i < VEC; i++) {
      v[i] = v[i] + b;
      if (i + 1 < VEC && ++r == vol) {
        r = 0;
        if (++c == c_out) c = 0;
        b = __ldg(bias + c);
      }
    }
    bk_vstore_cs<VEC>(y + e0, v);
  }
  const int64_t e = vecs * VEC + first;
  if (e < count) {
    const uint64_t q = bk_divider_q(dvol, (uint64_t)e);
    y[e] = y[e] + __ldg(bias + (q - bk_divider_q(dch, q) * (uint64_t)c_out));
  }
}

template <typename T>
static bk_status bias_launch(bk_context *ctx, const char *fn, T *y, const T *bias, int64_t count,
                             int64_t vol, int64_t c_out) {
  if (count <= 0 || vol <= 0) return BK_OK;
  const bk_divider dvol = bk_divider_make((uint64_t)vol), dch = bk_divider_make((uint64_t)c_out);
  constexpr int V = 16 / (int)sizeof(T);
  const cudaStream_t stream = bk_stream(ctx);
  /* y is the call's output, fresh from the context's pool: 256-byte aligned. */
  bias_kernel<T, V><<<bk_cuda_blocks(ctx, count / V + 1, 256), 256, 0, stream>>>(
      y, bias, count, vol, c_out, dvol, dch);
  return bk__cuda_launched(fn, "bias_kernel");
}

/* ---- the cuDNN plan cache --------------------------------------------------------------- */

/* The shape a plan is made for, in cuDNN's terms (descriptor rank 2 or 3;
 * extents after the explicit padding) and the byte alignment every pointer
 * of the call keeps. Zero-filled before use so it can be compared bytewise. */
typedef struct conv_key {
  int32_t dtype, rank;
  int64_t n, c_in, c_out, groups, align;
  int64_t in[3], k[3], pad[3], stride[3], dil[3], out[3];
} conv_key;

typedef struct conv_plan {
  conv_key key;
  int valid;  /* the slot holds a plan */
  int usable; /* cuDNN takes the shape; 0 sends it to direct_kernel */
  cudnnBackendDescriptor_t plan; /* the execution plan */
  size_t ws;
} conv_plan;

enum { CONV_CACHE_SLOTS = 16 };

typedef struct conv_cache {
  conv_plan slot[CONV_CACHE_SLOTS];
  int next; /* round-robin victim */
} conv_cache;

/* A workspace larger than this disqualifies an engine: the next one in
 * cuDNN's order is taken instead of risking an out-of-memory failure. */
static const size_t conv_workspace_cap = (size_t)1 << 30;

/* The tensors' ids in the operation graph and the variant pack. */
enum { CONV_UID_X = 1, CONV_UID_W = 2, CONV_UID_Y = 3 };

static void plan_clear(conv_plan *p) {
  if (p->plan) (void)cudnnBackendDestroyDescriptor(p->plan);
  memset(p, 0, sizeof *p);
}

static void conv_cache_free(void *ptr) {
  conv_cache *c = (conv_cache *)ptr;
  for (int i = 0; i < CONV_CACHE_SLOTS; i++) plan_clear(&c->slot[i]);
  bk__host_free(c);
}

/* cuDNN's answer for a shape or an engine it does not take (bad or
 * unsupported parameters), as opposed to a failure of the library or the
 * device. */
static bool cudnn_rejects(cudnnStatus_t s) {
  return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_BAD_PARAM ||
         CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED;
}

static bool cudnn_out_of_memory(cudnnStatus_t s) {
  return s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
         s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ||
         s == CUDNN_STATUS_ALLOC_FAILED;
}

static bk_status cudnn_fail(cudnnStatus_t s, const char *what) {
  const bool oom = cudnn_out_of_memory(s);
  return bk__fail(oom ? BK_ERR_OUT_OF_MEMORY : BK_ERR_DEVICE, "bk_conv", "%s failed: %s (%d)",
                  what, cudnnGetErrorString(s), (int)s);
}

/* Sets one attribute of a backend descriptor unless an earlier step
 * failed (*s holds the first failure). */
static void battr(cudnnStatus_t *s, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t type, int64_t count, const void *value) {
  if (*s == CUDNN_STATUS_SUCCESS) *s = cudnnBackendSetAttribute(d, name, type, count, value);
}

/* The descriptors plan_build makes and destroys again; only the execution
 * plan outlives it. */
typedef struct conv_graph {
  cudnnBackendDescriptor_t x, w, y, conv, op, graph;
} conv_graph;

static void graph_clear(conv_graph *g) {
  cudnnBackendDescriptor_t *d[] = {&g->x, &g->w, &g->y, &g->conv, &g->op, &g->graph};
  for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
    if (*d[i]) {
      (void)cudnnBackendDestroyDescriptor(*d[i]);
      *d[i] = NULL;
    }
}

/* A finalized row-major tensor descriptor of nd extents. */
static cudnnStatus_t tensor_make(int64_t uid, cudnnDataType_t dt, int nd, const int64_t *dims,
                                 int64_t align, cudnnBackendDescriptor_t *out) {
  int64_t str[5];
  str[nd - 1] = 1;
  for (int a = nd - 2; a >= 0; a--) str[a] = str[a + 1] * dims[a + 1];
  cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, out);
  battr(&s, *out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  battr(&s, *out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nd, dims);
  battr(&s, *out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nd, str);
  battr(&s, *out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  battr(&s, *out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(*out);
  return s;
}

/* The operation graph of one forward convolution (y = conv(x, w), groups
 * implied by the kernel's second extent), finalized. */
static cudnnStatus_t graph_make(cudnnHandle_t h, const conv_key *k, conv_graph *g) {
  const cudnnDataType_t dt = k->dtype == BK_F32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
  const int nd = k->rank + 2;
  int64_t xdim[5], wdim[5], ydim[5];
  xdim[0] = k->n; xdim[1] = k->c_in;
  wdim[0] = k->c_out; wdim[1] = k->c_in / k->groups;
  ydim[0] = k->n; ydim[1] = k->c_out;
  for (int a = 0; a < k->rank; a++) {
    xdim[2 + a] = k->in[a];
    wdim[2 + a] = k->k[a];
    ydim[2 + a] = k->out[a];
  }
  cudnnStatus_t s = tensor_make(CONV_UID_X, dt, nd, xdim, k->align, &g->x);
  if (s == CUDNN_STATUS_SUCCESS) s = tensor_make(CONV_UID_W, dt, nd, wdim, k->align, &g->w);
  if (s == CUDNN_STATUS_SUCCESS) s = tensor_make(CONV_UID_Y, dt, nd, ydim, k->align, &g->y);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &g->conv);
  if (s == CUDNN_STATUS_SUCCESS) {
    const int64_t dims = k->rank;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    battr(&s, g->conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    battr(&s, g->conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    battr(&s, g->conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    battr(&s, g->conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, dims, k->pad);
    battr(&s, g->conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, dims, k->pad);
    battr(&s, g->conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dims, k->dil);
    battr(&s, g->conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, dims, k->stride);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(g->conv);
  }
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &g->op);
  if (s == CUDNN_STATUS_SUCCESS) {
    const float one_f = 1.0f, zero_f = 0.0f;
    const double one_d = 1.0, zero_d = 0.0;
    const bool f = k->dtype == BK_F32;
    const cudnnBackendAttributeType_t st = f ? CUDNN_TYPE_FLOAT : CUDNN_TYPE_DOUBLE;
    battr(&s, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &g->x);
    battr(&s, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &g->w);
    battr(&s, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &g->y);
    battr(&s, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->conv);
    battr(&s, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, st, 1,
          f ? (const void *)&one_f : (const void *)&one_d);
    battr(&s, g->op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, st, 1,
          f ? (const void *)&zero_f : (const void *)&zero_d);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(g->op);
  }
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g->graph);
  battr(&s, g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->op);
  battr(&s, g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(g->graph);
  return s;
}

/* Whether the engine of configuration cfg may compute the contract's
 * result: deterministic, and for float32 without tensor cores (TF32) or
 * any other reduced precision. Float64 tensor cores compute in float64 and
 * are allowed. */
static cudnnStatus_t engine_allowed(cudnnBackendDescriptor_t cfg, bool f32, bool *ok) {
  *ok = false;
  cudnnBackendDescriptor_t eng = NULL;
  cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng);
  int64_t n = 0;
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &n, &eng);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  n = 0;
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes);
  if (eng) (void)cudnnBackendDestroyDescriptor(eng);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  bool allowed = true;
  for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++) {
    switch (notes[i]) {
    case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: allowed = false; break;
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
      if (f32) allowed = false;
      break;
    default: break;
    }
  }
  *ok = allowed;
  return CUDNN_STATUS_SUCCESS;
}

/* Tries the engine configurations cuDNN's heuristic `mode` ranks for graph
 * g, in its order, and keeps in p the first allowed one that makes an
 * execution plan with an accepted workspace. */
static cudnnStatus_t plan_from_heuristic(cudnnHandle_t h, cudnnBackendDescriptor_t graph,
                                         cudnnBackendHeurMode_t mode, bool f32, conv_plan *p) {
  cudnnBackendDescriptor_t heur = NULL;
  cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
  battr(&s, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  battr(&s, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(heur);
  int64_t count = 0;
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 0, &count, NULL);
  enum { MAX_CFGS = 64 };
  cudnnBackendDescriptor_t cfg[MAX_CFGS];
  int64_t made = 0;
  if (count > MAX_CFGS) count = MAX_CFGS;
  for (; s == CUDNN_STATUS_SUCCESS && made < count; made++)
    s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[made]);
  if (s != CUDNN_STATUS_SUCCESS) made--; /* the failed one was not made */
  int64_t got = 0;
  if (s == CUDNN_STATUS_SUCCESS && count > 0)
    s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 count, &got, cfg);
  for (int64_t i = 0; s == CUDNN_STATUS_SUCCESS && i < got && i < count && !p->usable; i++) {
    bool ok = false;
    s = engine_allowed(cfg[i], f32, &ok);
    if (s != CUDNN_STATUS_SUCCESS && !cudnn_out_of_memory(s)) s = CUDNN_STATUS_SUCCESS;
    if (s != CUDNN_STATUS_SUCCESS || !ok) continue;
    cudnnBackendDescriptor_t plan = NULL;
    s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    battr(&s, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    battr(&s, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &cfg[i]);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(plan);
    int64_t ws = 0, n = 0;
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                   1, &n, &ws);
    if (s == CUDNN_STATUS_SUCCESS && ws >= 0 && (size_t)ws <= conv_workspace_cap) {
      p->plan = plan;
      p->ws = (size_t)ws;
      p->usable = 1;
      continue;
    }
    if (plan) (void)cudnnBackendDestroyDescriptor(plan);
    /* An engine that cannot take the shape, or whose workspace is too
     * large, gives way to the next one; only running out of memory ends
     * the search. */
    if (!cudnn_out_of_memory(s)) s = CUDNN_STATUS_SUCCESS;
  }
  for (int64_t i = 0; i < made; i++) (void)cudnnBackendDestroyDescriptor(cfg[i]);
  if (heur) (void)cudnnBackendDestroyDescriptor(heur);
  return s;
}

/* Fills p for key k: an execution plan of the first allowed engine in the
 * order of cuDNN's heuristic (mode A; its fallback list when none of those
 * is allowed) and its workspace size. The order depends only on the shape,
 * the device and the cuDNN version, so a shape runs the same engine, with
 * the same bits, in every run. A shape cuDNN rejects gives BK_OK with
 * usable = 0; a library failure gives its status (p is then cleared). */
static bk_status plan_build(cudnnHandle_t h, const conv_key *k, conv_plan *p) {
  memset(p, 0, sizeof *p);
  p->key = *k;
  p->valid = 1;
  conv_graph g;
  memset(&g, 0, sizeof g);
  cudnnStatus_t s = graph_make(h, k, &g);
  const bool f32 = k->dtype == BK_F32;
  if (s == CUDNN_STATUS_SUCCESS) {
    s = plan_from_heuristic(h, g.graph, CUDNN_HEUR_MODE_A, f32, p);
    if (!p->usable && (s == CUDNN_STATUS_SUCCESS || cudnn_rejects(s)))
      s = plan_from_heuristic(h, g.graph, CUDNN_HEUR_MODE_FALLBACK, f32, p);
  }
  graph_clear(&g);
  if (s != CUDNN_STATUS_SUCCESS) {
    const bool rejected = cudnn_rejects(s);
    plan_clear(p);
    p->key = *k;
    p->valid = 1;
    if (rejected) return BK_OK; /* usable stays 0 */
    memset(p, 0, sizeof *p);
    return cudnn_fail(s, "cuDNN convolution setup");
  }
  return BK_OK;
}

/* The context's plan for key k, built on a miss. `keep` is a plan the
 * caller still holds and that must not be evicted. */
static bk_status plan_get(bk_context *ctx, cudnnHandle_t h, const conv_key *k,
                          const conv_plan *keep, conv_plan **out) {
  bk_cuda_ctx *c = bk_cu(ctx);
  conv_cache *cache = (conv_cache *)c->cache[BK_CUDA_CACHE_CONV];
  if (!cache) {
    cache = (conv_cache *)bk__host_zalloc("bk_conv", "memory for the cuDNN plan cache", 1, sizeof *cache);
    if (!cache) return BK_ERR_OUT_OF_MEMORY;
    c->cache[BK_CUDA_CACHE_CONV] = cache;
    c->cache_free[BK_CUDA_CACHE_CONV] = conv_cache_free;
  }
  for (int i = 0; i < CONV_CACHE_SLOTS; i++)
    if (cache->slot[i].valid && memcmp(&cache->slot[i].key, k, sizeof *k) == 0) {
      *out = &cache->slot[i];
      return BK_OK;
    }
  /* Building a plan asks cuDNN for its heuristics and workspace sizes;
   * that is not done while the stream is being captured. */
  bk_status st = bk__cuda_refuse_capture(ctx, "bk_conv",
                                         "building a cuDNN plan for a new shape (run the shape "
                                         "once before capturing it)");
  if (st != BK_OK) return st;
  int victim = cache->next;
  if (&cache->slot[victim] == keep) victim = (victim + 1) % CONV_CACHE_SLOTS;
  cache->next = (victim + 1) % CONV_CACHE_SLOTS;
  conv_plan *p = &cache->slot[victim];
  plan_clear(p);
  st = plan_build(h, k, p);
  if (st != BK_OK) return st;
  *out = p;
  return BK_OK;
}

/* ---- launchers ------------------------------------------------------------------------------ */

/* Chooses the depthwise tile: up to 256 threads of `per` outputs each,
 * halved until the staged span fits 48 KiB of shared memory. False when
 * even one output's window does not fit (very long dilated kernels). */
static bool dw_plan(const bk_conv_geom *g, size_t elem, dw_geom *d, int *threads, size_t *smem) {
  const int64_t V = 16 / (int64_t)elem;
  const int64_t cap = (int64_t)(48 * 1024 / elem);
  const int64_t k = g->k[0], stride = g->stride[0], dil = g->dilation[0];
  if (stride > cap || dil > cap || k - 1 > cap || (k - 1) * dil > cap) return false;
  /* The kernel forms flat indices (row start + input coordinate) over the
   * staged span, from -pad_before - V to x_len + pad_after + V. With both
   * paddings at most cap they stay within 2*cap of the input, whose length
   * is at most INT64_MAX / elem (its byte size fits), so none overflows.
   * Wider padding goes to the general routes. */
  if (g->pad_before[0] > cap || g->pad_after[0] > cap) return false;
  const int64_t per_max = elem == 4 ? 8 : 4;
  int64_t tile = g->out[0] < 256 * per_max ? g->out[0] : 256 * per_max;
  for (;;) {
    int64_t th = (tile + per_max - 1) / per_max;
    th = (th + 31) / 32 * 32;
    if (th > 256) th = 256;
    const int64_t per = (tile + th - 1) / th;
    const int64_t span = (tile - 1) * stride + (k - 1) * dil + 1;
    const int64_t need = (V - 1 + span + V - 1) / V * V;
    if (need <= cap) {
      d->rows = g->n * g->c_out;
      d->c_in = g->c_in;
      d->c_out = g->c_out;
      d->mult = g->c_out / g->c_in;
      d->in = g->in[0];
      d->out = g->out[0];
      d->k = k;
      d->stride = stride;
      d->dil = dil;
      d->pad = g->pad_before[0];
      d->tile_out = tile;
      d->tiles = (g->out[0] + tile - 1) / tile;
      d->x_len = g->n * g->c_in * g->in[0];
      d->per = (int)per;
      *threads = (int)th;
      *smem = (size_t)need * elem;
      return true;
    }
    if (tile == 1) return false;
    tile = (tile + 1) / 2;
  }
}

template <typename T>
static bk_status depthwise_launch(bk_context *ctx, const T *x, const T *w, const T *bias, T *y,
                                  dw_geom d, int threads, size_t smem) {
  d.vec_ok = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  const int64_t tiles = d.rows * d.tiles;
  const unsigned blocks = (unsigned)(tiles < INT_MAX ? tiles : INT_MAX);
  if (d.k <= 8) {
    depthwise_kernel<T, 8><<<blocks, threads, smem, bk_stream(ctx)>>>(x, w, bias, y, d);
  } else {
    depthwise_kernel<T, 0><<<blocks, threads, smem, bk_stream(ctx)>>>(x, w, bias, y, d);
  }
  return bk__cuda_launched("bk_conv", "depthwise_kernel");
}

template <typename T>
static bk_status direct_launch(bk_context *ctx, const T *x, const T *w, const T *bias, T *y,
                               const bk_conv_geom *g) {
  direct_geom d;
  memset(&d, 0, sizeof d);
  d.n = g->n;
  d.c_in = g->c_in;
  d.c_out = g->c_out;
  d.ig = g->c_in / g->groups;
  d.og = g->c_out / g->groups;
  const int off = 3 - g->spatial_rank;
  for (int a = 0; a < 3; a++) {
    const int s = a - off; /* the geometry's axis, or < 0 for a unit axis */
    d.in[a] = s < 0 ? 1 : g->in[s];
    d.k[a] = s < 0 ? 1 : g->k[s];
    d.out[a] = s < 0 ? 1 : g->out[s];
    d.stride[a] = s < 0 ? 1 : g->stride[s];
    d.pad[a] = s < 0 ? 0 : g->pad_before[s];
    d.dil[a] = s < 0 ? 1 : g->dilation[s];
  }
  d.in_vol = g->in_volume;
  d.k_vol = g->k_volume;
  d.out_vol = g->out_volume;
  d.total = g->n * g->c_out * g->out_volume;
  const unsigned blocks = bk_cuda_blocks(ctx, d.total, 256);
  direct_kernel<T><<<blocks, 256, 0, bk_stream(ctx)>>>(x, w, bias, y, d);
  return bk__cuda_launched("bk_conv", "direct_kernel");
}

/* The depthwise kernel's tile: tw columns (the power of two from 8 to 64
 * nearest above the output width), 256 / tw rows a pass, up to DWT_PER
 * passes, fewer where the staged region would pass 48 KiB of shared
 * memory. False when not even one pass fits, or when a position the
 * kernel forms in int would not fit one; cuDNN takes those. */
static bool depthwise_nd_plan(const bk_conv_geom *g, size_t elem, dwt_geom *d, size_t *smem) {
  memset(d, 0, sizeof *d);
  const int off = 3 - g->spatial_rank;
  for (int a = 0; a < 3; a++) {
    const int s = a - off;
    const int64_t in = s < 0 ? 1 : g->in[s], k = s < 0 ? 1 : g->k[s];
    const int64_t st = s < 0 ? 1 : g->stride[s], dl = s < 0 ? 1 : g->dilation[s];
    const int64_t pb = s < 0 ? 0 : g->pad_before[s], pa = s < 0 ? 0 : g->pad_after[s];
    const int64_t out = s < 0 ? 1 : g->out[s];
    if (out <= 0 || in + pb + pa > INT_MAX / 2 || k > INT_MAX || st > 65536 || dl > INT_MAX)
      return false;
    d->in[a] = (int)in;
    d->k[a] = (int)k;
    d->stride[a] = (int)st;
    d->dil[a] = (int)dl;
    d->pad[a] = (int)pb;
    d->out[a] = (int)out;
  }
  if ((int64_t)d->in[1] * d->in[2] > INT_MAX) return false; /* rows of a plane */
  if (g->k_volume > INT_MAX || g->c_out > INT_MAX || g->c_in > INT_MAX) return false;
  int tw = 8;
  while (tw < 64 && tw < d->out[2]) tw *= 2;
  const int ry = DWT_THREADS / tw;
  const int64_t cap = (int64_t)(48 * 1024 / elem);
  const int64_t cols = (int64_t)(tw - 1) * d->stride[2] + (int64_t)(d->k[2] - 1) * d->dil[2] + 1;
  int per = DWT_PER;
  while (per > 1 && (int64_t)ry * per / 2 >= d->out[1]) per /= 2; /* no pass wholly idle */
  int64_t rows = 0;
  for (;; per /= 2) {
    rows = (int64_t)(ry * per - 1) * d->stride[1] + (int64_t)(d->k[1] - 1) * d->dil[1] + 1;
    if (rows * cols <= cap) break;
    if (per == 1) return false;
  }
  d->c_in = (int)g->c_in;
  d->c_out = (int)g->c_out;
  d->tw = tw;
  d->th = ry * per;
  d->per = per;
  d->rows = (int)rows;
  d->cols = (int)cols;
  d->tiles1 = (d->out[1] + d->th - 1) / d->th;
  d->tiles2 = (d->out[2] + tw - 1) / tw;
  d->units = g->n * g->c_out * d->out[0] * d->tiles1 * d->tiles2;
  d->plane = g->in_volume;
  d->k_vol = g->k_volume;
  d->dt2 = bk_divider_make((uint64_t)d->tiles2);
  d->dt1 = bk_divider_make((uint64_t)d->tiles1);
  d->do0 = bk_divider_make((uint64_t)d->out[0]);
  d->dco = bk_divider_make((uint64_t)g->c_out);
  d->dog = bk_div32_make((uint64_t)(g->c_out / g->groups));
  d->dcols = bk_div32_make((uint64_t)cols);
  *smem = (size_t)(rows * cols) * elem;
  return true;
}

template <typename T>
static bk_status depthwise_nd_launch(bk_context *ctx, const T *x, const T *w, const T *bias, T *y,
                                     const dwt_geom &d, size_t smem) {
  const unsigned blocks = bk_cuda_blocks(ctx, d.units * DWT_THREADS, DWT_THREADS);
  depthwise_nd_kernel<T><<<blocks, DWT_THREADS, smem, bk_stream(ctx)>>>(x, w, bias, y, d);
  return bk__cuda_launched("bk_conv", "depthwise_nd_kernel");
}

/* The cuDNN view of a call: keys for full chunks of nb samples and for the
 * remainder, the explicit padding, and the per-sample element counts. */
typedef struct cudnn_view {
  conv_key full, tail;  /* tail.n == 0 when nb divides N */
  int64_t nb;           /* samples per chunk */
  int explicit_pad;     /* 1: the input goes through pad_kernel first */
  pad_geom pad;
  int64_t x_sample, y_sample; /* elements of one sample of the cuDNN input/output */
} cudnn_view;

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* False when some count does not fit cuDNN's 32-bit descriptors even for a
 * single sample. */
static bool cudnn_view_of(const bk_conv_geom *g, bk_dtype dt, cudnn_view *v) {
  memset(v, 0, sizeof *v);
  conv_key *k = &v->full;
  k->dtype = (int32_t)dt;
  k->rank = g->spatial_rank == 3 ? 3 : 2;
  k->c_in = g->c_in;
  k->c_out = g->c_out;
  k->groups = g->groups;
  const int off = k->rank - g->spatial_rank;
  int64_t x_vol = 1, w_elems = g->c_out * (g->c_in / g->groups);
  for (int a = 0; a < 3; a++) {
    v->pad.in[a] = v->pad.q[a] = 1;
    v->pad.before[a] = 0;
  }
  for (int a = 0; a < k->rank; a++) {
    const int s = a - off;
    if (s < 0) {
      k->in[a] = k->k[a] = k->stride[a] = k->dil[a] = k->out[a] = 1;
      k->pad[a] = 0;
      continue;
    }
    const int64_t sym = g->pad_before[s] < g->pad_after[s] ? g->pad_before[s] : g->pad_after[s];
    const int64_t extra_before = g->pad_before[s] - sym, extra_after = g->pad_after[s] - sym;
    if (!fits_int(g->in[s]) || extra_before > INT_MAX || extra_after > INT_MAX) return false;
    k->in[a] = g->in[s] + extra_before + extra_after;
    k->k[a] = g->k[s];
    k->pad[a] = sym;
    k->stride[a] = g->stride[s];
    k->dil[a] = g->dilation[s];
    k->out[a] = g->out[s];
    if (!fits_int(k->in[a]) || !fits_int(k->k[a]) || !fits_int(k->pad[a]) ||
        !fits_int(k->stride[a]) || !fits_int(k->dil[a]) || !fits_int(k->out[a]))
      return false;
    if (extra_before || extra_after) v->explicit_pad = 1;
    /* pad_geom keeps the three trailing axes of the spatial shape. */
    const int pa = 3 - g->spatial_rank + s;
    v->pad.in[pa] = g->in[s];
    v->pad.q[pa] = k->in[a];
    v->pad.before[pa] = extra_before;
    x_vol *= k->in[a];
    if (x_vol > INT_MAX) return false;
    w_elems *= k->k[a];
    if (w_elems > INT_MAX) return false;
  }
  if (!fits_int(g->c_in) || !fits_int(g->c_out) || !fits_int(g->groups)) return false;
  const int64_t xs = g->c_in * x_vol, ys = g->c_out * g->out_volume;
  if (xs > INT_MAX || ys > INT_MAX) return false;
  /* The padded copy of the whole input must have a byte size. */
  if (v->explicit_pad && g->n > (INT64_MAX / 8) / (xs > 0 ? xs : 1)) return false;
  const int64_t big = xs > ys ? xs : ys;
  int64_t nb = INT_MAX / (big > 0 ? big : 1);
  if (nb > g->n) nb = g->n;
  if (nb > INT_MAX) nb = INT_MAX;
  v->nb = nb;
  k->n = nb;
  v->tail = *k;
  v->tail.n = g->n % nb;
  v->x_sample = xs;
  v->y_sample = ys;
  v->pad.lines = g->n * g->c_in * v->pad.q[0] * v->pad.q[1];
  return true;
}

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

/* Runs plan p on one chunk: a variant pack with the chunk's pointers. */
static bk_status plan_run(cudnnHandle_t h, const conv_plan *p, const void *x, const void *w,
                          void *y, void *ws) {
  static const int64_t uids[3] = {CONV_UID_X, CONV_UID_W, CONV_UID_Y};
  void *ptrs[3] = {(void *)x, (void *)w, y};
  cudnnBackendDescriptor_t pack = NULL;
  cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  battr(&s, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  battr(&s, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
  battr(&s, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(pack);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendExecute(h, p->plan, pack);
  if (pack) (void)cudnnBackendDestroyDescriptor(pack);
  return s == CUDNN_STATUS_SUCCESS ? BK_OK : cudnn_fail(s, "cudnnBackendExecute");
}

/* cuDNN route. *done = 0 (and nothing queued) when cuDNN does not take the
 * shape, so the caller can fall back to direct_kernel. */
template <typename T>
static bk_status cudnn_launch(bk_context *ctx, const T *x, const T *w, const T *bias, T *y,
                              const bk_conv_geom *g, const cudnn_view *v, int *done) {
  static const char fn[] = "bk_conv";
  *done = 0;
  void *hv = NULL;
  bk_status st = bk__cuda_cudnn(ctx, fn, &hv);
  if (st != BK_OK) return st;
  cudnnHandle_t h = (cudnnHandle_t)hv;
  /* Pointers the call gives cuDNN: the chunks of the input (or of its
   * padded copy, from 256-byte aligned scratch) and of the output, and the
   * kernel (or its extracted blocks, from scratch). */
  const bool extract = g->groups > 1;
  uintptr_t bits = (uintptr_t)y | (uintptr_t)(v->nb * v->y_sample * (int64_t)sizeof(T)) |
                   (uintptr_t)(v->nb * v->x_sample * (int64_t)sizeof(T));
  if (!v->explicit_pad) bits |= (uintptr_t)x;
  if (!extract) bits |= (uintptr_t)w;
  int64_t align = 16;
  while (align > (int64_t)sizeof(T) && (bits & (uintptr_t)(align - 1))) align /= 2;
  conv_key kf = v->full, kt = v->tail;
  kf.align = kt.align = align;
  conv_plan *pf = NULL, *pt = NULL;
  st = plan_get(ctx, h, &kf, NULL, &pf);
  if (st != BK_OK) return st;
  if (!pf->usable) return BK_OK;
  if (v->tail.n > 0) {
    st = plan_get(ctx, h, &kt, pf, &pt);
    if (st != BK_OK) return st;
    if (!pt->usable) return BK_OK;
  }

  const int64_t ig = g->c_in / g->groups, og = g->c_out / g->groups;
  const size_t xp_bytes = v->explicit_pad ? (size_t)(g->n * v->x_sample) * sizeof(T) : 0;
  const size_t wc_bytes = extract ? (size_t)(g->c_out * ig * g->k_volume) * sizeof(T) : 0;
  const size_t ws_bytes = pt && pt->ws > pf->ws ? pt->ws : pf->ws;
  const size_t off_wc = align256(xp_bytes), off_ws = off_wc + align256(wc_bytes);
  const size_t total = off_ws + ws_bytes;
  void *scratch = NULL;
  if (total > 0) {
    st = bk__cuda_scratch(ctx, fn, total, &scratch);
    if (st != BK_OK) return st;
  }
  char *base = (char *)scratch;
  cudaStream_t stream = bk_stream(ctx);
  const T *xin = x, *win = w;
  if (v->explicit_pad) {
    T *xp = (T *)base;
    const int64_t segs = (v->pad.q[2] + PAD_SEG - 1) / PAD_SEG;
    pad_kernel<T><<<bk_cuda_blocks(ctx, v->pad.lines * segs * 32, 256), 256, 0, stream>>>(
        x, xp, v->pad, segs, bk_divider_make((uint64_t)segs),
        bk_divider_make((uint64_t)v->pad.q[1]), bk_divider_make((uint64_t)v->pad.q[0]));
    st = bk__cuda_launched(fn, "pad_kernel");
    xin = xp;
  }
  if (st == BK_OK && extract) {
    T *wc = (T *)(base + off_wc);
    const int64_t n_w = g->c_out * ig * g->k_volume;
    extract_kernel<T><<<bk_cuda_blocks(ctx, n_w, 256), 256, 0, stream>>>(w, wc, g->c_out, g->c_in,
                                                                        ig, og, g->k_volume);
    st = bk__cuda_launched(fn, "extract_kernel");
    win = wc;
  }
  void *ws = ws_bytes ? (void *)(base + off_ws) : NULL;
  for (int64_t n0 = 0; st == BK_OK && n0 < g->n; n0 += v->nb) {
    const conv_plan *p = g->n - n0 >= v->nb ? pf : pt;
    st = plan_run(h, p, xin + n0 * v->x_sample, win, y + n0 * v->y_sample, ws);
  }
  if (st == BK_OK && bias)
    st = bias_launch<T>(ctx, fn, y, bias, g->n * v->y_sample, v->y_sample / g->c_out, g->c_out);
  bk__cuda_scratch_free(ctx, scratch);
  if (st == BK_OK) *done = 1;
  return st;
}

template <typename T>
static bk_status conv_launch(bk_context *ctx, bk_dtype dt, const T *x, const T *w, const T *bias,
                             T *y, const bk_conv_geom *g) {
  if (g->groups == g->c_in) {
    dw_geom d;
    int threads = 0;
    size_t smem = 0;
    if (g->spatial_rank == 1 && dw_plan(g, sizeof(T), &d, &threads, &smem))
      return depthwise_launch<T>(ctx, x, w, bias, y, d, threads, smem);
    /* Any other depthwise geometry; a single input channel only with a
     * single output channel (one channel read by many output channels is
     * left to cuDNN, which shares the reads between them). */
    dwt_geom dd;
    if ((g->groups > 1 || g->c_out == 1) && depthwise_nd_plan(g, sizeof(T), &dd, &smem))
      return depthwise_nd_launch<T>(ctx, x, w, bias, y, dd, smem);
  }
  cudnn_view v;
  if (cudnn_view_of(g, dt, &v)) {
    int done = 0;
    const bk_status st = cudnn_launch<T>(ctx, x, w, bias, y, g, &v, &done);
    if (st != BK_OK || done) return st;
  }
  return direct_launch<T>(ctx, x, w, bias, y, g);
}

/* ---- entry ----------------------------------------------------------------------------------- */

extern "C" bk_status bk__cuda_conv(bk_context *ctx, bk_dtype dt, const void *x, const void *w,
                                   const void *bias, void *y, const bk_conv_geom *g) {
  BK_CUDA_TRY(cudaSetDevice(bk_cu(ctx)->device), "bk_conv", "cudaSetDevice");
  if (dt == BK_F32)
    return conv_launch<float>(ctx, dt, (const float *)x, (const float *)w, (const float *)bias,
                              (float *)y, g);
  return conv_launch<double>(ctx, dt, (const double *)x, (const double *)w, (const double *)bias,
                             (double *)y, g);
}
