/*
 * layout.c — CPU broadcasts and layout changes: broadcast_col, broadcast_to
 * and its sum-adjoint, swap_adjacent and sum_axis.
 *
 * The pure copies move elements as 32- or 64-bit words, so every bit
 * (NaN payloads and the sign of zero included) arrives unchanged. The sums
 * accumulate in double for both dtypes and round once on the store; each
 * fold starts from -0.0, the additive identity of IEEE arithmetic
 * (-0 + v == v for every v), so a fold equals ((v0 + v1) + v2) + ... with the
 * first term taken as is. Parallel loops split only the outputs, never one
 * fold, so the results do not depend on the thread count.
 */
#include "cpu.h"
#include "vec.h"

#include <inttypes.h>
#include <string.h>

/* Word-wise element access for the copies: dtype size 4 or 8. */
#define BK_LAYOUT_COPY(es, dst, di, src, si)                                   \
  do {                                                                         \
    if ((es) == 4)                                                             \
      ((uint32_t *)(dst))[di] = ((const uint32_t *)(src))[si];                 \
    else                                                                       \
      ((uint64_t *)(dst))[di] = ((const uint64_t *)(src))[si];                 \
  } while (0)

/* Output elements per parallel work item of the copy loops. */
#define BK_LAYOUT_CHUNK 16384

/* ---- broadcast_col ---------------------------------------------------------- */

bk_status bk__cpu_broadcast_col(bk_context *ctx, bk_dtype dt, const void *vec, void *y,
                                int64_t rows, int64_t cols) {
  (void)ctx;
  size_t es = bk__dtype_size(dt);
  /* vec (rows), y (rows, cols). */
#pragma omp parallel for schedule(static) if (rows * cols >= BK_CPU_PARALLEL_MIN)
  for (int64_t i = 0; i < rows; i++) {
    if (es == 4) {
      uint32_t v = ((const uint32_t *)vec)[i], *row = (uint32_t *)y + i * cols;
      for (int64_t j = 0; j < cols; j++) row[j] = v;
    } else {
      uint64_t v = ((const uint64_t *)vec)[i], *row = (uint64_t *)y + i * cols;
      for (int64_t j = 0; j < cols; j++) row[j] = v;
    }
  }
  return BK_OK;
}

/* ---- broadcast_to ------------------------------------------------------------- */

/* dst[0..n) = src[0], src[sl], src[2 sl], ... as words of type W. */
#define BK_BCAST_RUN(W, dst, src, n, sl)                                      \
  do {                                                                        \
    W *restrict d_ = (W *)(dst);                                              \
    const W *restrict s_ = (const W *)(src);                                  \
    if ((sl) == 0) {                                                          \
      const W v_ = s_[0];                                                     \
      _Pragma("omp simd") for (int64_t t_ = 0; t_ < (n); t_++) d_[t_] = v_;   \
    } else if ((sl) == 1) {                                                   \
      _Pragma("omp simd") for (int64_t t_ = 0; t_ < (n); t_++) d_[t_] = s_[t_]; \
    } else {                                                                  \
      for (int64_t t_ = 0; t_ < (n); t_++) d_[t_] = s_[t_ * (sl)];            \
    }                                                                         \
  } while (0)

/* Decomposes `index` into coordinates c over output axes 0..axes-1 (the
 * last varying fastest); returns their input offset. */
static inline int64_t bcast_start(int axes, const int64_t *D, const int64_t *S, int64_t index,
                                  int64_t *c) {
  int64_t off = 0;
  for (int j = axes - 1; j >= 0; j--) {
    c[j] = index % D[j];
    index /= D[j];
    off += c[j] * S[j];
  }
  return off;
}

/* Advances the odometer c over output axes 0..last by one step of axis
 * last, carrying into the axes before it; *off follows in input offsets. */
static inline void bcast_step(int last, const int64_t *D, const int64_t *S, int64_t *c,
                              int64_t *off) {
  for (int j = last; j >= 0; j--) {
    *off += S[j];
    if (++c[j] < D[j]) break;
    *off -= D[j] * S[j];
    c[j] = 0;
  }
}

static void bcast_run(size_t es, void *y, int64_t o, const void *x, int64_t off, int64_t n,
                      int64_t sl) {
  if (es == 4)
    BK_BCAST_RUN(uint32_t, (uint32_t *)y + o, (const uint32_t *)x + off, n, sl);
  else
    BK_BCAST_RUN(uint64_t, (uint64_t *)y + o, (const uint64_t *)x + off, n, sl);
}

/*
 * Writes output elements [begin, end) of a broadcast: decomposes begin into
 * output coordinates once, then walks an odometer, copying one run along the
 * last axis at a time.
 */
static void bcast_range(size_t es, const void *x, void *y, const bk_bcast_geom *g, int64_t begin,
                        int64_t end) {
  const int r = g->rank;
  const int64_t *D = g->out_dims, *S = g->in_stride;
  int64_t c[BK_MAX_RANK];
  int64_t off = bcast_start(r, D, S, begin, c);
  const int64_t dl = D[r - 1], sl = S[r - 1];
  int64_t o = begin;
  while (o < end) {
    int64_t n = dl - c[r - 1];
    if (n > end - o) n = end - o;
    bcast_run(es, y, o, x, off, n, sl);
    o += n;
    off += n * sl;
    c[r - 1] += n;
    if (c[r - 1] < dl) break; /* only the last run of a range can stop early */
    off -= dl * sl;
    c[r - 1] = 0;
    bcast_step(r - 2, D, S, c, &off);
  }
}

/* Runs along the last axis shorter than this go through blocks of the last
 * axes, of at most BK_BCAST_BLOCK elements. */
#define BK_BCAST_SHORT 64
#define BK_BCAST_BLOCK 4096

/* dst[0..bytes) = src[0..bytes) (bytes a multiple of 4, dst 4-byte
 * aligned): streaming stores for the 64-byte lines wholly inside the range,
 * ordinary stores for the partial lines at either end, as typed_t.h's
 * bk_put does, so that a line is written by streaming stores only or by
 * ordinary stores only, also where the ranges of consecutive calls share
 * it (vec.h's fence ends the region). */
static void bk_stream_bytes(char *restrict dst, const void *restrict src_, int64_t bytes) {
  const char *restrict src = (const char *)src_;
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i < bytes && ((uintptr_t)(dst + i) & 63) != 0; i += 4) memcpy(dst + i, src + i, 4);
  for (; i + 64 <= bytes; i += 64)
    for (int q = 0; q < 64; q += 16)
      _mm_stream_si128((__m128i *)(void *)(dst + i + q),
                       _mm_loadu_si128((const __m128i *)(const void *)(src + i + q)));
#endif
  if (i < bytes) memcpy(dst + i, src + i, (size_t)(bytes - i));
}

/*
 * Writes blocks [b0, b1) of a broadcast whose last axis is short: a block is
 * the last k output axes (blk elements), and tab[e] is the input offset of
 * its element e relative to the block's first. The odometer steps once per
 * block over the axes before them; within a block every element is one
 * table-driven load, so runs of a few elements cost little.
 */
#define BK_BCAST_BLOCKS(W)                                                   \
  do {                                                                       \
    W *restrict tile = (W *)tile_;                                           \
    for (int64_t q = b0; q < b1; q++) {                                      \
      const W *restrict src = (const W *)x + off;                            \
      W *restrict dst = stream ? tile : (W *)y + q * blk;                    \
      for (int64_t e = 0; e < blk; e++) dst[e] = src[tab[e]];                \
      if (stream) bk_stream_bytes((char *)y + q * blk * (int64_t)sizeof(W), tile, blk * (int64_t)sizeof(W)); \
      bcast_step(lead - 1, D, S, c, &off);                                   \
    }                                                                        \
  } while (0)

static void bcast_blocks(size_t es, const void *x, void *y, const bk_bcast_geom *g, int lead,
                         int64_t blk, const int64_t *restrict tab, int64_t b0, int64_t b1,
                         int stream) {
  const int64_t *D = g->out_dims, *S = g->in_stride;
  uint64_t tile_[BK_BCAST_BLOCK];
  int64_t c[BK_MAX_RANK];
  int64_t off = bcast_start(lead, D, S, b0, c);
  if (es == 4)
    BK_BCAST_BLOCKS(uint32_t);
  else
    BK_BCAST_BLOCKS(uint64_t);
}


bk_status bk__cpu_broadcast_to(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                               const bk_bcast_geom *g) {
  size_t es = bk__dtype_size(dt);
  if (g->rank == 0) {
    BK_LAYOUT_COPY(es, y, 0, x, 0);
    return BK_OK;
  }
  const int64_t total = g->out_length;
  const int r = g->rank;
  if (g->out_dims[r - 1] < BK_BCAST_SHORT) {
    /* The block: as many trailing axes as fit BK_BCAST_BLOCK elements. */
    int lead = r;
    int64_t blk = 1;
    while (lead > 0 && blk * g->out_dims[lead - 1] <= BK_BCAST_BLOCK) blk *= g->out_dims[--lead];
    if (lead < r - 1 || (lead == r - 1 && blk >= BK_BCAST_SHORT)) {
      int64_t *tab = bk__host_alloc("bk_broadcast_to", "scratch", (size_t)blk, sizeof *tab);
      if (!tab) return BK_ERR_OUT_OF_MEMORY;
      /* tab[e] = sum over the block's axes of coordinate * stride. */
      int64_t c[BK_MAX_RANK] = {0}, off = 0;
      for (int64_t e = 0; e < blk; e++) {
        tab[e] = off;
        /* The block's own odometer: axes lead..r-1, as axes 0..r-1-lead. */
        bcast_step(r - 1 - lead, g->out_dims + lead, g->in_stride + lead, c, &off);
      }
      const int64_t blocks = total / blk, per = (BK_LAYOUT_CHUNK + blk - 1) / blk;
      const int64_t items = (blocks + per - 1) / per;
      const int stream = bk__cpu_streams(ctx, (size_t)total * es);
#pragma omp parallel if (items > 1)
      {
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
          const int64_t b0 = it * per, b1 = blocks - b0 < per ? blocks : b0 + per;
          bcast_blocks(es, x, y, g, lead, blk, tab, b0, b1, stream);
        }
        bk_put_fence(stream);
      }
      bk__host_free(tab);
      return BK_OK;
    }
  }
  const int64_t chunks = (total + BK_LAYOUT_CHUNK - 1) / BK_LAYOUT_CHUNK;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t ch = 0; ch < chunks; ch++) {
    int64_t begin = ch * BK_LAYOUT_CHUNK;
    int64_t end = total - begin < BK_LAYOUT_CHUNK ? total : begin + BK_LAYOUT_CHUNK;
    bcast_range(es, x, y, g, begin, end);
  }
  return BK_OK;
}

/* ---- broadcast_to_adjoint -------------------------------------------------------- */

/* Runs of the innermost axis folded side by side by adjoint_block. */
#define BK_ADJ_RUNS 4

/*
 * Adds into acc (one double per input element) every output element whose
 * coordinate on axis p lies in [lo, hi), visiting them in row-major output
 * order. Output elements with different coordinates on an axis of nonzero
 * stride read different input elements, so blocks of axis p (such an axis)
 * touch disjoint parts of acc and can run in parallel, while each input
 * element still receives its terms in row-major order of the whole output.
 */
static void adjoint_block(bk_dtype dt, const void *dout, double *acc, const bk_bcast_geom *g,
                          int p, int64_t lo, int64_t hi) {
  const int r = g->rank;
  const int64_t *D = g->out_dims, *S = g->in_stride;
  int64_t first[BK_MAX_RANK], last[BK_MAX_RANK], ostride[BK_MAX_RANK], c[BK_MAX_RANK];
  int64_t o = 0, off = 0, s = 1;
  for (int j = r - 1; j >= 0; j--) {
    ostride[j] = s;
    s *= D[j];
    first[j] = j == p ? lo : 0;
    last[j] = j == p ? hi : D[j];
    c[j] = first[j];
    o += c[j] * ostride[j];
    off += c[j] * S[j];
  }
  const int64_t n = last[r - 1] - first[r - 1], sl = S[r - 1];
  /* With the innermost axis reduced, consecutive runs of the next axis go
   * into different elements (when that axis is kept): BK_ADJ_RUNS of them
   * are folded side by side, each element's terms still in order. */
  const int64_t sn = r >= 2 ? S[r - 2] : 0, on = r >= 2 ? ostride[r - 2] : 0;
  for (;;) {
    int64_t adv = 1;
    if (sl == 0 && sn != 0 && last[r - 2] - c[r - 2] >= BK_ADJ_RUNS) {
      double a[BK_ADJ_RUNS];
      for (int q = 0; q < BK_ADJ_RUNS; q++) a[q] = acc[off + q * sn];
      if (dt == BK_F32) {
        const float *restrict xs = (const float *)dout + o;
        for (int64_t t = 0; t < n; t++)
          for (int q = 0; q < BK_ADJ_RUNS; q++) a[q] += (double)xs[q * on + t];
      } else {
        const double *restrict xs = (const double *)dout + o;
        for (int64_t t = 0; t < n; t++)
          for (int q = 0; q < BK_ADJ_RUNS; q++) a[q] += xs[q * on + t];
      }
      for (int q = 0; q < BK_ADJ_RUNS; q++) acc[off + q * sn] = a[q];
      adv = BK_ADJ_RUNS;
    } else if (sl == 0) {
      /* One run into one element, in order, through a register instead of
       * a chain through memory. */
      double a = acc[off];
      if (dt == BK_F32) {
        const float *restrict xs = (const float *)dout + o;
        for (int64_t t = 0; t < n; t++) a += (double)xs[t];
      } else {
        const double *restrict xs = (const double *)dout + o;
        for (int64_t t = 0; t < n; t++) a += xs[t];
      }
      acc[off] = a;
    } else {
      for (int64_t t = 0; t < n; t++) acc[off + t * sl] += bk_ld(dt, dout, o + t);
    }
    int j = r - 2;
    if (j < 0) break;
    o += adv * ostride[j];
    off += adv * S[j];
    c[j] += adv;
    if (c[j] < last[j]) continue;
    o -= (last[j] - first[j]) * ostride[j];
    off -= (last[j] - first[j]) * S[j];
    c[j] = first[j];
    for (j = r - 3; j >= 0; j--) {
      o += ostride[j];
      off += S[j];
      if (++c[j] < last[j]) break;
      o -= (last[j] - first[j]) * ostride[j];
      off -= (last[j] - first[j]) * S[j];
      c[j] = first[j];
    }
    if (j < 0) break;
  }
}

/* Upper bound on the parallel blocks of one adjoint. */
#define BK_ADJOINT_MAX_BLOCKS 1024

bk_status bk__cpu_broadcast_to_adjoint(bk_context *ctx, bk_dtype dt, const void *dout,
                                       void *din, const bk_bcast_geom *g) {
  (void)ctx;
  const int64_t in_len = g->in_length, out_len = g->out_length;
  /* The axis that splits the work: the outermost one with a nonzero stride. */
  int p = -1;
  for (int j = 0; j < g->rank && p < 0; j++)
    if (g->in_stride[j] != 0) p = j;
  if (p < 0) {
    /* One input element reads everything: a single fold, in order. */
    double s = -0.0;
    for (int64_t o = 0; o < out_len; o++) s += bk_ld(dt, dout, o);
    bk_st(dt, din, 0, s);
    return BK_OK;
  }
  /* float64 results accumulate in place; float32 ones in a double scratch
   * array, rounded once at the end. */
  double *acc = dt == BK_F64 ? (double *)din
                             : bk__host_alloc("bk_broadcast_to_adjoint", "scratch", (size_t)in_len,
                                              sizeof(double));
  if (!acc) return BK_ERR_OUT_OF_MEMORY;
#pragma omp parallel for schedule(static) if (in_len >= BK_CPU_PARALLEL_MIN)
  for (int64_t i = 0; i < in_len; i++) acc[i] = -0.0;
  /* Blocks of axis p: enough to share the work, few enough that the block
   * bounds below stay far from overflow. */
  const int64_t dp = g->out_dims[p];
  int64_t blocks = out_len / BK_CPU_PARALLEL_MIN;
  if (blocks > BK_ADJOINT_MAX_BLOCKS) blocks = BK_ADJOINT_MAX_BLOCKS;
  if (blocks > dp) blocks = dp;
  /* Axis p next to a reduced innermost axis: each block spans at least
   * BK_ADJ_RUNS of its values, so that its runs are folded side by side. */
  if (p == g->rank - 2 && g->in_stride[g->rank - 1] == 0 && blocks > dp / BK_ADJ_RUNS)
    blocks = dp / BK_ADJ_RUNS;
  if (blocks < 1) blocks = 1;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; b++)
    adjoint_block(dt, dout, acc, g, p, dp * b / blocks, dp * (b + 1) / blocks);
  if (dt == BK_F32) {
#pragma omp parallel for schedule(static) if (in_len >= BK_CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < in_len; i++) ((float *)din)[i] = (float)acc[i];
    bk__host_free(acc);
  }
  return BK_OK;
}

/* ---- swap_adjacent ------------------------------------------------------------------ */

bk_status bk__cpu_swap_adjacent(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                int64_t outer, int64_t a, int64_t b, int64_t inner) {
  (void)ctx;
  size_t es = bk__dtype_size(dt);
  /* x (outer, a, b, inner) -> y (outer, b, a, inner): each work item writes
   * one contiguous (a, inner) slab of y. */
  const int64_t items = outer * b;
#pragma omp parallel for schedule(static) if (outer * a * b * inner >= BK_CPU_PARALLEL_MIN)
  for (int64_t it = 0; it < items; it++) {
    int64_t o = it / b, j = it % b;
    for (int64_t i = 0; i < a; i++) {
      int64_t src = ((o * a + i) * b + j) * inner, dst = ((o * b + j) * a + i) * inner;
      /* A plain transpose (inner == 1) copies single words; a library call
       * per element would dominate. */
      if (inner == 1)
        BK_LAYOUT_COPY(es, y, dst, x, src);
      else
        memcpy((char *)y + (size_t)dst * es, (const char *)x + (size_t)src * es,
               (size_t)inner * es);
    }
  }
  return BK_OK;
}

/* ---- sum_axis ------------------------------------------------------------------------ */

/* Most inner positions summed together per work item: one stack block of
 * accumulators, so the reads along each row of the inner axis stay
 * contiguous while every position keeps its own fold over n. */
#define BK_SUM_BLOCK_MAX 4096
/* Independent folds an item keeps in flight at least, where the slabs allow
 * (each fold is a chain of dependent float64 additions). */
#define BK_SUM_FOLDS 64
/* How far ahead a block cut from its slab prefetches its next runs. */
#define BK_SUM_AHEAD 4096

/* Folds positions t0..t0+w of outer slabs o..o+g over n, each position's
 * terms in index order (AVX2 and baseline clones, vec.h: the same bits).
 * Several slabs are folded side by side when a slab is narrow, so that
 * enough independent folds are in flight. */
static BK_CPU_CLONES void sum_block(bk_dtype dt, const void *x, void *y, int64_t o, int64_t g,
                                    int64_t n, int64_t inner, int64_t t0, int64_t w) {
  double acc[BK_SUM_BLOCK_MAX];
  for (int64_t t = 0; t < g * w; t++) acc[t] = -0.0;
  /* A block narrower than its slab reads a run of each slice and skips the
   * rest: the prefetchers do not follow that, so the run BK_SUM_AHEAD bytes
   * ahead is asked for explicitly (measured on a 2-core x86-64, outer 1 and
   * two blocks: 8.9 -> 6.3 ms). */
  const int64_t es = dt == BK_F32 ? 4 : 8;
  const int64_t ahead = w < inner ? (BK_SUM_AHEAD + w * es - 1) / (w * es) : 0;
  for (int64_t i = 0; i < n; i++) {
    if (ahead && i + ahead < n) {
      const char *p = (const char *)x + ((o * n + i + ahead) * inner + t0) * es;
      for (int64_t b = 0; b < w * es; b += 64) __builtin_prefetch(p + b);
    }
    for (int64_t s = 0; s < g; s++) {
      const int64_t base = ((o + s) * n + i) * inner + t0;
      double *restrict a = acc + s * w;
      if (dt == BK_F32) {
        const float *restrict xs = (const float *)x + base;
#pragma omp simd
        for (int64_t t = 0; t < w; t++) a[t] += (double)xs[t];
      } else {
        const double *restrict xs = (const double *)x + base;
#pragma omp simd
        for (int64_t t = 0; t < w; t++) a[t] += xs[t];
      }
    }
  }
  for (int64_t s = 0; s < g; s++)
    for (int64_t t = 0; t < w; t++) bk_st(dt, y, (o + s) * inner + t0 + t, acc[s * w + t]);
}

/* Inner extents below this take sum_narrow: a slab is then a few
 * positions wide, so a block of them is one short run per slice and the
 * loop around it costs more than its additions. */
#define BK_SUM_NARROW 16
/* Independent folds sum_narrow keeps in flight: a float64 addition's
 * latency times the additions a core issues per cycle, with margin. */
#define BK_SUM_CHAINS 8

/* Slabs o..o+g of inner (a compile-time constant where inlined) positions,
 * K slabs side by side: each position folded over n in index order in a
 * register, the K slabs read as K sequential streams. */
static inline __attribute__((always_inline)) void sum_narrow_k(bk_dtype dt, const void *x,
                                                               void *y, int64_t o, int64_t g,
                                                               int64_t n, const int inner,
                                                               const int K) {
  for (int64_t s0 = 0; s0 < g; s0 += K) {
    const int k = g - s0 < K ? (int)(g - s0) : K;
    double acc[BK_SUM_NARROW * BK_SUM_CHAINS];
    for (int q = 0; q < K * inner; q++) acc[q] = -0.0;
    const int64_t slab = n * inner, base = (o + s0) * slab;
    /* The K slabs are one contiguous region read as K short streams, which
     * the prefetchers do not follow: the next group's region is asked for
     * while this one is folded. */
    if (s0 + K < g) {
      const char *next = (const char *)x + (base + K * slab) * (int64_t)bk__dtype_size(dt);
      const int64_t bytes = (g - s0 - K < K ? g - s0 - K : K) * slab * (int64_t)bk__dtype_size(dt);
      for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(next + b);
    }
    if (k == K) {
      for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < K; j++)
          for (int t = 0; t < inner; t++)
            acc[j * inner + t] += bk_ld(dt, x, base + j * slab + i * inner + t);
    } else {
      for (int j = 0; j < k; j++)
        for (int64_t i = 0; i < n; i++)
          for (int t = 0; t < inner; t++)
            acc[j * inner + t] += bk_ld(dt, x, base + j * slab + i * inner + t);
    }
    for (int j = 0; j < k; j++)
      for (int t = 0; t < inner; t++)
        bk_st(dt, y, (o + s0 + j) * inner + t, acc[j * inner + t]);
  }
}

/* sum_axis for inner < BK_SUM_NARROW: slabs o..o+g, the same folds as
 * sum_block (each position's terms in index order from -0, in float64),
 * with inner a constant and enough slabs side by side for BK_SUM_CHAINS
 * independent folds. */
static void sum_narrow(bk_dtype dt, const void *x, void *y, int64_t o, int64_t g, int64_t n,
                       int64_t inner) {
#define BK_SUM_CASE(I)                                                                       \
  case I:                                                                                    \
    if (dt == BK_F32)                                                                        \
      sum_narrow_k(BK_F32, x, y, o, g, n, I, (BK_SUM_CHAINS + I - 1) / I);                   \
    else                                                                                     \
      sum_narrow_k(BK_F64, x, y, o, g, n, I, (BK_SUM_CHAINS + I - 1) / I);                   \
    break;
  switch (inner) {
    BK_SUM_CASE(1) BK_SUM_CASE(2) BK_SUM_CASE(3) BK_SUM_CASE(4) BK_SUM_CASE(5)
    BK_SUM_CASE(6) BK_SUM_CASE(7) BK_SUM_CASE(8) BK_SUM_CASE(9) BK_SUM_CASE(10)
    BK_SUM_CASE(11) BK_SUM_CASE(12) BK_SUM_CASE(13) BK_SUM_CASE(14) BK_SUM_CASE(15)
    default: break;
  }
#undef BK_SUM_CASE
}

bk_status bk__cpu_sum_axis(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t outer,
                           int64_t n, int64_t inner) {
  (void)ctx;
  /* x (outer, n, inner) -> y (outer, inner). Each work item folds one
   * block of an outer slab's inner positions over all of n, reading each
   * slice of the block as one contiguous run; blocks are as wide as the
   * threads allow (at most BK_SUM_BLOCK_MAX positions), so a slab is cut
   * only when there are too few slabs to share among the threads, and then
   * into a count of items the threads divide evenly (for outer == 1, one
   * block per thread). The width changes which thread folds a position,
   * never the fold. */
  const int threads = bk_cpu_threads(outer * n * inner);
  if (inner < BK_SUM_NARROW) {
    /* Items of whole slabs, about 64 KB of input each, at least enough
     * slabs for BK_SUM_CHAINS folds, but no fewer items than give each
     * thread four. */
    int64_t group = (int64_t)65536 / ((n * inner > 0 ? n * inner : 1) * (int64_t)bk__dtype_size(dt));
    if (group < BK_SUM_CHAINS) group = BK_SUM_CHAINS;
    const int64_t share = (outer + 4 * (int64_t)threads - 1) / (4 * (int64_t)threads);
    if (group > share) group = share;
    if (group < 1) group = 1;
    const int64_t items = (outer + group - 1) / group;
    const int64_t chunk = bk_cpu_chunk(items, n * inner * group, threads);
    (void)chunk; /* read only by the OpenMP pragma */
#pragma omp parallel for schedule(dynamic, chunk) num_threads(threads) if (threads > 1)
    for (int64_t it = 0; it < items; it++) {
      const int64_t o = it * group;
      sum_narrow(dt, x, y, o, outer - o < group ? outer - o : group, n, inner);
    }
    return BK_OK;
  }
  int64_t per = (inner + BK_SUM_BLOCK_MAX - 1) / BK_SUM_BLOCK_MAX;
  while (per < (inner + 15) / 16 && (outer * per) % threads != 0 && outer * per < 4 * threads)
    per++;
  int64_t width = (inner + per - 1) / per;
  width = (width + 15) / 16 * 16;
  if (width > BK_SUM_BLOCK_MAX) width = BK_SUM_BLOCK_MAX;
  const int64_t nblk = (inner + width - 1) / width;
  /* Slabs of fewer than BK_SUM_FOLDS positions go several to an item. */
  int64_t group = 1;
  if (nblk == 1 && inner < BK_SUM_FOLDS) {
    group = (BK_SUM_FOLDS + inner - 1) / inner;
    const int64_t share = (outer + 4 * (int64_t)threads - 1) / (4 * (int64_t)threads);
    if (group > share) group = share;
    if (group < 1) group = 1;
  }
  const int64_t groups = (outer + group - 1) / group, items = groups * nblk;
  const int64_t chunk = bk_cpu_chunk(items, n * width * group, threads);
  (void)chunk; /* read only by the OpenMP pragma */
#pragma omp parallel for schedule(dynamic, chunk) num_threads(threads) if (threads > 1)
  for (int64_t it = 0; it < items; it++) {
    const int64_t o = (it / nblk) * group, t0 = (it % nblk) * width;
    const int64_t w = inner - t0 < width ? inner - t0 : width;
    const int64_t g = outer - o < group ? outer - o : group;
    sum_block(dt, x, y, o, g, n, inner, t0, w);
  }
  return BK_OK;
}
