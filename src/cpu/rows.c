/*
 * rows.c — CPU row reductions and masks over (rows, cols) buffers:
 * sum, max, first-max mask, top-k mask and hard-masked softmax.
 *
 * Rows are independent, so each primitive runs its rows in parallel once the
 * work is large enough; within a row everything is folded in index order in
 * float64, so the results do not depend on the thread count.
 */
#include "cpu.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define BK_TEMPLATE "rows_t.h"
#include "instantiate.h"

/* ---- sum, max and the first-max mask ------------------------------------------ */

/* Rows in chunks taken by the threads in turn (bk_cpu_take); the float32
 * and float64 kernels are the two instances of rows_t.h. */
#define ROWS_RUN(threads, KERNEL, dt, ...)                              \
  do {                                                                  \
    const int64_t chunk_ = bk_cpu_chunk(rows, cols, threads);           \
    atomic_llong next_ = 0;                                             \
    _Pragma("omp parallel num_threads(threads) if (threads > 1)")       \
    for (int64_t r0_, r1_; bk_cpu_take(&next_, rows, chunk_, &r0_, &r1_);) { \
      if ((dt) == BK_F32)                                               \
        KERNEL##_f32(__VA_ARGS__);                                      \
      else                                                              \
        KERNEL##_f64(__VA_ARGS__);                                      \
    }                                                                   \
  } while (0)

bk_status bk__cpu_rows_sum(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows,
                           int64_t cols) {
  (void)ctx;
  const int threads = bk_cpu_threads(rows * cols);
  ROWS_RUN(threads, rows_sum_block, dt, x, y, r0_, r1_, cols);
  return BK_OK;
}

/* NaN never compares greater, so it is skipped, and a row with no number in
 * it keeps the starting -inf. */
bk_status bk__cpu_rows_max(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t rows,
                           int64_t cols) {
  (void)ctx;
  const int threads = bk_cpu_threads(rows * cols);
  ROWS_RUN(threads, rows_max_block, dt, x, y, r0_, r1_, cols);
  return BK_OK;
}

bk_status bk__cpu_rows_first_max_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                      int64_t rows, int64_t cols) {
  const size_t es = dt == BK_F32 ? sizeof(float) : sizeof(double);
  const int threads = bk_cpu_threads(rows * cols);
  const int stream = bk__cpu_streams(ctx, (size_t)(rows * cols) * es);
  ROWS_RUN(threads, rows_first_max_block, dt, x, y, r0_, r1_, cols, stream);
  return BK_OK;
}

/* ---- top-k mask --------------------------------------------------------------------- */

/*
 * Entry i is kept iff fewer than k entries beat it, where j beats i when
 * x_j > x_i, or when neither is greater and j < i.
 *
 * A small k keeps the k best in one pass; otherwise short rows count
 * beaters directly (the definition itself) and long rows use an equivalent
 * O(cols log cols) form. Among the non-NaN entries, "beats" is
 * the strict total order (value descending, index ascending), so the number
 * of non-NaN entries beating i is i's position in that sorted order. A NaN
 * is neither greater nor smaller than anything, so it ties with every entry
 * and beats exactly the entries after it: a NaN at j adds one beater to every
 * i > j, and a NaN at i is beaten by exactly the i entries before it. Hence
 *   beaters(i) = pos(i) + nan_before(i)  for a number at i,
 *   beaters(i) = i                       for a NaN at i.
 */

/* Rows up to this length use the direct count. */
enum { TOPK_DIRECT_MAX = 64 };

static void topk_row_direct(bk_dtype dt, const void *x, void *y, int64_t base, int64_t cols,
                            int64_t k) {
  for (int64_t i = 0; i < cols; i++) {
    double xi = bk_ld(dt, x, base + i);
    int64_t beaters = 0;
    for (int64_t j = 0; j < cols && beaters < k; j++) {
      double xj = bk_ld(dt, x, base + j);
      if (xj > xi || (!(xi > xj) && j < i)) beaters++;
    }
    bk_st(dt, y, base + i, beaters < k ? 1.0 : 0.0);
  }
}

/* One non-NaN entry of a row: its value, its index and the number of NaN
 * entries before it. */
typedef struct topk_entry {
  double v;
  int64_t i;
  int64_t nan_before;
} topk_entry;

/* Stable sort by value descending (a[] in index order on entry, so equal
 * values stay in index order). Insertion sort on short runs, then bottom-up
 * merges between a[] and tmp[]; returns the array holding the result. */
static topk_entry *topk_sort(topk_entry *a, topk_entry *tmp, int64_t n) {
  enum { RUN = 16 };
  for (int64_t lo = 0; lo < n; lo += RUN) {
    int64_t hi = lo + RUN < n ? lo + RUN : n;
    for (int64_t i = lo + 1; i < hi; i++) {
      topk_entry e = a[i];
      int64_t j = i;
      for (; j > lo && a[j - 1].v < e.v; j--) a[j] = a[j - 1];
      a[j] = e;
    }
  }
  topk_entry *src = a, *dst = tmp;
  for (int64_t width = RUN; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      int64_t mid = lo + width < n ? lo + width : n;
      int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
      int64_t p = lo, q = mid, o = lo;
      /* Take from the right run only when strictly greater: ties keep the
       * lower index first. */
      while (p < mid && q < hi) dst[o++] = src[q].v > src[p].v ? src[q++] : src[p++];
      while (p < mid) dst[o++] = src[p++];
      while (q < hi) dst[o++] = src[q++];
    }
    topk_entry *t = src;
    src = dst;
    dst = t;
  }
  return src;
}

static void topk_row_sorted(bk_dtype dt, const void *x, void *y, int64_t base, int64_t cols,
                            int64_t k, topk_entry *a, topk_entry *tmp) {
  int64_t n = 0, nans = 0;
  for (int64_t i = 0; i < cols; i++) {
    double v = bk_ld(dt, x, base + i);
    if (isnan(v)) {
      bk_st(dt, y, base + i, i < k ? 1.0 : 0.0);
      nans++;
    } else {
      a[n].v = v;
      a[n].i = i;
      a[n].nan_before = nans;
      n++;
    }
  }
  topk_entry *sorted = topk_sort(a, tmp, n);
  for (int64_t pos = 0; pos < n; pos++)
    bk_st(dt, y, base + sorted[pos].i, pos + sorted[pos].nan_before < k ? 1.0 : 0.0);
}

/* A small k: one pass keeps the k best numbers in the strict
 * order (value descending, index ascending) in a sorted buffer on the
 * stack (rows_t.h, topk_select_block). Only an entry at sorted position
 * below k can have pos + nan_before < k, so the buffer holds every number
 * the mask keeps; a NaN is kept when its index is below k. */
enum { TOPK_SELECT_MAX = 64 };

bk_status bk__cpu_rows_topk_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                 int64_t rows, int64_t cols, int64_t k) {
  (void)ctx;
  /* A row costs about cols^2 comparisons when counted directly and about
   * cols*log2(cols) when sorted; 16 stands in for the logarithm. */
  int threads = 1;
#ifdef _OPENMP
  int64_t per_entry = cols <= TOPK_DIRECT_MAX ? cols : 16;
  if (rows * cols >= BK_CPU_PARALLEL_MIN / per_entry) threads = omp_get_max_threads();
  if (threads > rows) threads = (int)rows;
#endif
  /* A small k keeps the k best in one pass at any row length (about one
   * comparison per entry); rows in chunks, so short rows do not pay a
   * scheduling step each. */
  if (k >= 1 && k <= TOPK_SELECT_MAX && k < cols) {
    const int64_t chunk = bk_cpu_chunk(rows, cols, threads);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t r1 = rows - r0 < chunk ? rows : r0 + chunk;
      if (dt == BK_F32)
        topk_select_block_f32(x, y, r0, r1, cols, k);
      else
        topk_select_block_f64(x, y, r0, r1, cols, k);
    }
    return BK_OK;
  }
  if (cols <= TOPK_DIRECT_MAX) {
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t r = 0; r < rows; r++) topk_row_direct(dt, x, y, r * cols, cols, k);
    return BK_OK;
  }

  /* Long rows: two scratch arrays of cols entries per thread. */
  size_t per_thread = 2 * (size_t)cols;
  if ((uint64_t)cols > SIZE_MAX / 2 / (size_t)threads)
    return bk__fail(BK_ERR_OUT_OF_MEMORY, "bk_rows_topk_mask",
                    "host scratch for %d threads of %" PRId64 " entries overflows", threads, cols);
  topk_entry *scratch =
      bk__host_alloc("bk_rows_topk_mask", "scratch", per_thread * (size_t)threads, sizeof *scratch);
  if (!scratch) return BK_ERR_OUT_OF_MEMORY;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    int tid = 0;
#ifdef _OPENMP
    tid = omp_get_thread_num();
#endif
    topk_entry *a = scratch + (size_t)tid * per_thread;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) topk_row_sorted(dt, x, y, r * cols, cols, k, a, a + cols);
  }
  bk__host_free(scratch);
  return BK_OK;
}

/* ---- hard-masked softmax ---------------------------------------------------------------- */

/*
 * Only allowed entries (mask != 0, NaN included) influence the result:
 * blocked scores are discarded by selects, so whatever their value they
 * change nothing. Over the allowed entries the IEEE behaviour of bk_softmax
 * holds: a NaN or +inf among them, or only -inf, makes every allowed entry
 * NaN. Blocked entries are written as +0 and a row with no allowed entry is
 * all +0. As in softmax.c, a large output streams, its exponentials kept
 * in per-thread scratch.
 */
bk_status bk__cpu_rows_masked_softmax(bk_context *ctx, bk_dtype dt, const void *scores,
                                      const void *mask, void *y, int64_t rows, int64_t cols) {
  const size_t es = dt == BK_F32 ? sizeof(float) : sizeof(double);
  const int threads = bk_cpu_threads(rows * cols);
  const int stream = bk__cpu_streams(ctx, (size_t)(rows * cols) * es) &&
                     cols * (int64_t)es <= BK_CPU_SCRATCH_MAX;
  char *scratch = NULL;
  if (stream) {
    scratch = bk__host_alloc("bk_rows_masked_softmax", "scratch", (size_t)threads * (size_t)cols, es);
    if (!scratch) return BK_ERR_OUT_OF_MEMORY;
  }
  ROWS_RUN(threads, masked_softmax_block, dt, scores, mask, y, r0_, r1_, cols,
           scratch ? (void *)(scratch + (size_t)bk_cpu_thread() * (size_t)cols * es) : NULL,
           stream);
  bk__host_free(scratch);
  return BK_OK;
}
