/*
 * test_rows.c — bk_rows_sum, bk_rows_max, bk_rows_first_max_mask,
 * bk_rows_topk_mask, bk_rows_masked_softmax.
 */
#include "testlib.h"

#include "core/internal.h"

/* ---- shared helpers ---------------------------------------------------------- */

/* Row data with many ties and, when `specials` is set, NaN, +-inf and -0
 * sprinkled in: the cases where the mask rules differ from "sort and take". */
static void fill_tricky(double *v, int64_t n, int specials) {
  for (int64_t i = 0; i < n; i++) {
    uint64_t u = tl_next() % 16;
    if (specials && u == 0)
      v[i] = NAN;
    else if (specials && u == 1)
      v[i] = INFINITY;
    else if (specials && u == 2)
      v[i] = -INFINITY;
    else if (specials && u == 3)
      v[i] = -0.0;
    else
      v[i] = (double)((int64_t)(tl_next() % 7) - 3);
  }
}

/* The values a buffer actually holds, as double (what the kernel sees). */
static double *held(const bk_buffer *b) { return tl_read(b); }

/* One (rows, cols) case: x the values written, b the buffer made from them,
 * h the values b holds and ref room for a reference of rows * cols values. */
typedef struct {
  int64_t rows, cols, n;
  double *x, *h, *ref;
  bk_buffer *b;
} rows_case;

/* How rows_case_fill fills x: normal values, fill_tricky's small integers
 * with many ties, or those ties with NaN, +-inf and -0 sprinkled in. */
enum { FILL_RANDN, FILL_TIES, FILL_SPECIALS };

/* Allocates the case's host arrays and fills x from `seed`; b and h come
 * with rows_case_upload. */
static void rows_case_fill(rows_case *c, int64_t rows, int64_t cols, uint64_t seed, int fill) {
  c->rows = rows;
  c->cols = cols;
  c->n = rows * cols;
  c->x = tl_xmalloc((size_t)c->n * sizeof *c->x);
  c->ref = tl_xmalloc((size_t)c->n * sizeof *c->ref);
  c->h = NULL;
  c->b = NULL;
  tl_seed(seed);
  if (fill == FILL_RANDN)
    tl_fill_randn(c->x, c->n);
  else
    fill_tricky(c->x, c->n, fill == FILL_SPECIALS);
}

static void rows_case_upload(rows_case *c, bk_dtype dt) {
  c->b = tl_buf(dt, c->x, c->n);
  c->h = held(c->b);
}

static void rows_case_make(rows_case *c, bk_dtype dt, int64_t rows, int64_t cols, uint64_t seed,
                           int fill) {
  rows_case_fill(c, rows, cols, seed, fill);
  rows_case_upload(c, dt);
}

static void rows_case_free(rows_case *c) {
  bk_buffer_release(c->b);
  free(c->h);
  free(c->x);
  free(c->ref);
}

/* A one-input (rows, cols) primitive as (x, rows, cols, out). */
typedef bk_status (*matrix_call)(const bk_buffer *x, int64_t rows, int64_t cols, bk_buffer **out);

static bk_status call_rows_sum(const bk_buffer *x, int64_t rows, int64_t cols, bk_buffer **out) {
  return bk_rows_sum(tl_ctx, x, rows, cols, out);
}

static bk_status call_rows_max(const bk_buffer *x, int64_t rows, int64_t cols, bk_buffer **out) {
  return bk_rows_max(tl_ctx, x, rows, cols, out);
}

static bk_status call_first_max(const bk_buffer *x, int64_t rows, int64_t cols, bk_buffer **out) {
  return bk_rows_first_max_mask(tl_ctx, x, rows, cols, out);
}

/* `call` on b (rows, cols) twice: the first result against ref (len
 * values), within tol at scale, or exactly when tol < 0; the second with
 * the same bits as the first. */
static void check_twice(const char *name, matrix_call call, const bk_buffer *b, int64_t rows,
                        int64_t cols, const double *ref, int64_t len, double tol, double scale) {
  bk_buffer *y = NULL, *y2 = NULL;
  if (TL_OK(call(b, rows, cols, &y)) == BK_OK) {
    if (tol < 0)
      TL_BUF_EXACT(y, ref, len);
    else
      TL_BUF_CLOSE(y, ref, len, tol, scale);
    if (TL_OK(call(b, rows, cols, &y2)) == BK_OK)
      TL_CHECK(tl_same_bits(y, y2), "%s is not deterministic", name);
  }
  bk_buffer_release(y);
  bk_buffer_release(y2);
}

/* `call` on the n values x, made a buffer of dt, as (rows, cols): the
 * result must be want (len values) exactly. */
static void exact_case(bk_dtype dt, matrix_call call, const double *x, int64_t n, int64_t rows,
                       int64_t cols, const double *want, int64_t len) {
  bk_buffer *b = tl_buf(dt, x, n), *y = NULL;
  if (TL_OK(call(b, rows, cols, &y)) == BK_OK) TL_BUF_EXACT(y, want, len);
  bk_buffer_release(y);
  bk_buffer_release(b);
}

/* `call` on an empty buffer as (rows, cols): a result of len zeros. */
static void empty_case(bk_dtype dt, matrix_call call, int64_t rows, int64_t cols, int64_t len) {
  static const double zeros[3] = {0, 0, 0};
  exact_case(dt, call, NULL, 0, rows, cols, zeros, len);
}

/* ---- bk_rows_sum ------------------------------------------------------------ */

/* The random shapes of the row sums and maxima. */
static const int64_t reduce_shapes[][2] = {{1, 1}, {3, 7}, {17, 1000}, {64, 33}, {2, 100000}};

/* Runs one(dt, s) for every dtype and every shape s of reduce_shapes. */
static void each_reduce_shape(void (*one)(bk_dtype dt, size_t s)) {
  for (int d = 0; d < TL_DTYPES; d++)
    for (size_t s = 0; s < sizeof reduce_shapes / sizeof reduce_shapes[0]; s++)
      one(tl_dtypes[d], s);
}

static void rows_sum_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double x[] = {1, 2, 3, 4, 5, 6};
    exact_case(dt, call_rows_sum, x, 6, 2, 3, (double[]){6, 15}, 2);
    /* cols == 0 gives rows zeros. */
    empty_case(dt, call_rows_sum, 3, 0, 3);
    empty_case(dt, call_rows_sum, 0, 5, 0);
  }
}

static void rows_sum_random_shape(bk_dtype dt, size_t s) {
  rows_case c;
  rows_case_fill(&c, reduce_shapes[s][0], reduce_shapes[s][1], 100 + s, FILL_RANDN);
  tl_round(dt, c.x, c.n);
  rows_case_upload(&c, dt);
  double scale = 0;
  for (int64_t r = 0; r < c.rows; r++) {
    double acc = 0, mag = 0;
    for (int64_t j = 0; j < c.cols; j++) {
      acc += c.x[r * c.cols + j];
      mag += fabs(c.x[r * c.cols + j]);
    }
    c.ref[r] = acc;
    if (mag > scale) scale = mag;
  }
  check_twice("rows_sum", call_rows_sum, c.b, c.rows, c.cols, c.ref, c.rows, tl_tol_red(dt),
              scale);
  TL_UNCHANGED(c.b, c.x, c.n);
  rows_case_free(&c);
}

static void rows_sum_random(void) { each_reduce_shape(rows_sum_random_shape); }

static void rows_sum_errors(void) {
  double x[6] = {0};
  bk_buffer *b = tl_buf(BK_F32, x, 6), *y = (bk_buffer *)&y;
  TL_REJECT(bk_rows_sum(tl_ctx, b, 2, 3, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_rows_sum(tl_ctx, NULL, 2, 3, &y), BK_ERR_NULL, "x");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_rows_sum(tl_ctx, b, -1, 3, &y), BK_ERR_INVALID_ARGUMENT, "rows");
  TL_REJECT(bk_rows_sum(tl_ctx, b, 2, -3, &y), BK_ERR_INVALID_ARGUMENT, "cols");
  TL_REJECT(bk_rows_sum(tl_ctx, b, 2, 4, &y), BK_ERR_INVALID_ARGUMENT, "x has length 6");
  TL_REJECT(bk_rows_sum(tl_ctx, b, INT64_MAX, 3, &y), BK_ERR_INVALID_ARGUMENT, "overflow");
  bk_context *other = tl_other_ctx();
  if (other) {
    bk_context *cpu = other;
    TL_REJECT(bk_rows_sum(cpu, b, 2, 3, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
  }
  bk_buffer_release(b);
}

/* ---- allocation failures and rejections ---------------------------------------- */

/* Every allocation a call makes fails in turn: BK_ERR_OUT_OF_MEMORY, out
 * NULL and no buffer left behind. `call` runs the primitive once. */
typedef bk_status (*rows_call)(const bk_buffer *x, const bk_buffer *m, bk_buffer **out);
static void alloc_failures(const char *name, rows_call call, const bk_buffer *x,
                           const bk_buffer *m) {
  int64_t live = bk__live_buffers();
  for (int64_t at = 1; at < 20; at++) {
    bk_buffer *y = (bk_buffer *)&y;
    bk__inject_arm(at);
    bk_status st = call(x, m, &y);
    bk__inject_arm(0);
    if (st == BK_OK) {
      bk_buffer_release(y);
      return;
    }
    TL_CHECK(st == BK_ERR_OUT_OF_MEMORY && y == NULL, "%s, allocation %" PRId64 ": status %d",
             name, at, (int)st);
    TL_CHECK(bk__live_buffers() == live, "%s, allocation %" PRId64 ": a buffer leaked", name, at);
  }
  TL_FAIL("%s never succeeded under allocation failures", name);
}

/* The usual rejections of a one-input (rows, cols) primitive. */
static void matrix_errors(matrix_call call) {
  double x[6] = {0};
  bk_buffer *b = tl_buf(BK_F32, x, 6), *y = (bk_buffer *)&y;
  TL_REJECT(call(b, 2, 3, NULL), BK_ERR_NULL, "out");
  TL_REJECT(call(NULL, 2, 3, &y), BK_ERR_NULL, "x");
  TL_CHECK(y == NULL, "out not cleared on failure");
  y = (bk_buffer *)&y;
  TL_REJECT(call(b, -1, 3, &y), BK_ERR_INVALID_ARGUMENT, "rows = -1");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(call(b, 2, -3, &y), BK_ERR_INVALID_ARGUMENT, "cols = -3");
  TL_REJECT(call(b, 2, 4, &y), BK_ERR_INVALID_ARGUMENT, "x has length 6, expected 8");
  TL_REJECT(call(b, INT64_MAX, 3, &y), BK_ERR_INVALID_ARGUMENT, "overflow");
  TL_REJECT(call(b, 0, 3, &y), BK_ERR_INVALID_ARGUMENT, "x has length 6, expected 0");
  bk_buffer_release(b);
}

/* ---- bk_rows_max ------------------------------------------------------------------ */

static void rows_max_examples(void) {
  const double inf = INFINITY;
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    /* rows: plain | NaN skipped | all NaN | all -inf | +inf wins over NaN */
    const double x[] = {1, 5, 3, NAN, 2, NAN, NAN, NAN, NAN, -inf, -inf, -inf, NAN, inf, 7};
    exact_case(dt, call_rows_max, x, 15, 5, 3, (double[]){5, 2, -inf, -inf, inf}, 5);
    empty_case(dt, call_rows_max, 3, 0, 3);
    empty_case(dt, call_rows_max, 0, 4, 0);
    empty_case(dt, call_rows_max, 0, 0, 0);
  }
}

static void rows_max_random_shape(bk_dtype dt, size_t s) {
  rows_case c;
  rows_case_make(&c, dt, reduce_shapes[s][0], reduce_shapes[s][1], 600 + s,
                 s % 2 ? FILL_SPECIALS : FILL_RANDN);
  for (int64_t r = 0; r < c.rows; r++) {
    double m = -INFINITY;
    for (int64_t j = 0; j < c.cols; j++)
      if (c.h[r * c.cols + j] > m) m = c.h[r * c.cols + j];
    c.ref[r] = m;
  }
  check_twice("rows_max", call_rows_max, c.b, c.rows, c.cols, c.ref, c.rows, -1, 0);
  TL_UNCHANGED(c.b, c.h, c.n);
  rows_case_free(&c);
}

static void rows_max_random(void) { each_reduce_shape(rows_max_random_shape); }

static void rows_max_errors(void) { matrix_errors(call_rows_max); }

/* ---- bk_rows_first_max_mask ------------------------------------------------------------ */

/* The scan rule on the host: start at 0, move only on strictly greater. */
static void first_max_ref(const double *x, double *ref, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    int64_t best = 0;
    for (int64_t j = 1; j < cols; j++)
      if (x[r * cols + j] > x[r * cols + best]) best = j;
    for (int64_t j = 0; j < cols; j++) ref[r * cols + j] = j == best ? 1 : 0;
  }
}

/* First-max mask of the case's buffer against the reference made from its
 * held values (into c->ref), exact, and a second run with the same bits. */
static void first_max_check(rows_case *c) {
  first_max_ref(c->h, c->ref, c->rows, c->cols);
  check_twice("first_max_mask", call_first_max, c->b, c->rows, c->cols, c->ref, c->n, -1, 0);
}

static void first_max_examples(void) {
  const double inf = INFINITY;
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double x[] = {3, 1, 3, 2};
    exact_case(dt, call_first_max, x, 4, 1, 4, (double[]){1, 0, 0, 0}, 4);
    /* rows: all -inf | NaN first stays | NaN later never wins | -inf then
     * NaN then a number | -0 ties +0 | all NaN */
    const double s[] = {-inf, -inf, -inf, NAN, 5, 7,   1, NAN, 2,
                        -inf, NAN, 5,     -0.0, 0, 0,  NAN, NAN, NAN};
    const double want[] = {1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 0};
    exact_case(dt, call_first_max, s, 18, 6, 3, want, 18);
    empty_case(dt, call_first_max, 3, 0, 0);
    empty_case(dt, call_first_max, 0, 3, 0);
  }
}

static void first_max_random(void) {
  static const int64_t shapes[][2] = {{1, 1}, {5, 9}, {40, 1000}, {300, 17}, {2, 70000}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      for (int specials = 0; specials <= 1; specials++) {
        rows_case c;
        rows_case_make(&c, dt, shapes[s][0], shapes[s][1], 700 + s,
                       specials ? FILL_SPECIALS : FILL_TIES);
        first_max_check(&c);
        TL_UNCHANGED(c.b, c.h, c.n);
        rows_case_free(&c);
      }
    }
  }
}

static void first_max_errors(void) { matrix_errors(call_first_max); }

/* ---- narrow rows (the CUDA lane-group reduction) ------------------------------------ */

/* Widths around the CUDA lane-group kernel's choices (1 to 32 lanes per
 * row, four 16-byte vectors or eight single elements a lane, one to eight
 * rows in flight; partly filled last vectors; the first widths past it, on
 * the warp-per-row path) and row counts that leave a warp's rows in flight
 * partly filled. Row 0 is all NaN, row 1 starts with NaN, row 2
 * is all -inf, row 3 is -0 then +0, row 4 holds its maximum only in its last
 * entry; the rest mix ties, signed zeros, infinities and NaN. */
static void rows_narrow(void) {
  static const int64_t widths[] = {1,   2,   3,   4,   5,   7,   8,   9,   12,  15,  16,
                                   17,  20,  31,  32,  33,  36,  63,  64,  65,  68,  100,
                                   127, 128, 129, 132, 250, 255, 256, 257, 260, 512, 516};
  static const int64_t row_counts[] = {5, 37, 300};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
      for (size_t rc = 0; rc < sizeof row_counts / sizeof row_counts[0]; rc++) {
        const int64_t rows = row_counts[rc], cols = widths[w];
        rows_case c;
        rows_case_fill(&c, rows, cols, 1200 + 10 * w + rc, FILL_SPECIALS);
        double *x = c.x, *ref = c.ref;
        for (int64_t j = 0; j < cols; j++) {
          x[j] = NAN;
          x[cols + j] = j == 0 ? NAN : (double)(j % 5);
          x[2 * cols + j] = -INFINITY;
          x[3 * cols + j] = j == 0 ? -0.0 : 0.0;
          x[4 * cols + j] = j == cols - 1 ? 9 : 1;
        }
        rows_case_upload(&c, dt);
        const double *h = c.h;
        double scale = 1;
        for (int64_t r = 0; r < rows; r++) {
          double acc = 0, mag = 0;
          for (int64_t j = 0; j < cols; j++) {
            acc += h[r * cols + j];
            if (isfinite(h[r * cols + j])) mag += fabs(h[r * cols + j]);
          }
          ref[r] = acc;
          if (mag > scale) scale = mag;
        }
        check_twice("rows_sum", call_rows_sum, c.b, rows, cols, ref, rows, tl_tol_red(dt), scale);
        for (int64_t r = 0; r < rows; r++) {
          /* The first maximal non-NaN entry, so -0 before +0 gives -0. */
          double m = -INFINITY;
          int found = 0;
          for (int64_t j = 0; j < cols; j++) {
            const double v = h[r * cols + j];
            if (v > m || (!found && v == v)) {
              m = v;
              found = 1;
            }
          }
          ref[r] = m;
        }
        bk_buffer *y = NULL;
        if (TL_OK(bk_rows_max(tl_ctx, c.b, rows, cols, &y)) == BK_OK) TL_BUF_EXACT(y, ref, rows);
        bk_buffer_release(y);
        first_max_check(&c);
        TL_UNCHANGED(c.b, h, c.n);
        rows_case_free(&c);
      }
    }
  }
}

/* ---- bk_rows_topk_mask ------------------------------------------------------------------------ */

/* The literal definition: beaters[i] = #{j : x_j > x_i, or neither is
 * greater and j < i}. The mask for k is beaters < k. */
static void topk_beaters(const double *x, int64_t *beaters, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    const double *xr = x + r * cols;
    for (int64_t i = 0; i < cols; i++) {
      int64_t c = 0;
      for (int64_t j = 0; j < cols; j++)
        if (xr[j] > xr[i] || (!(xr[i] > xr[j]) && j < i)) c++;
      beaters[r * cols + i] = c;
    }
  }
}

/* Runs one(c, beaters) on a top-k case of every dtype, shape and fill
 * kind: c made from seed_base + 3 * shape + fill, beaters those of its held
 * values. */
static void each_topk_case(const int64_t (*shapes)[2], size_t nshapes, uint64_t seed_base,
                           void (*one)(rows_case *c, const int64_t *beaters)) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < nshapes; s++) {
      for (int fill = FILL_RANDN; fill <= FILL_SPECIALS; fill++) {
        rows_case c;
        rows_case_make(&c, dt, shapes[s][0], shapes[s][1], seed_base + 3 * s + (uint64_t)fill,
                       fill);
        int64_t *beaters = tl_xmalloc((size_t)c.n * sizeof *beaters);
        topk_beaters(c.h, beaters, c.rows, c.cols);
        one(&c, beaters);
        free(beaters);
        rows_case_free(&c);
      }
    }
  }
}

/* The reference mask for k into c->ref. */
static void topk_ref(rows_case *c, const int64_t *beaters, int64_t k) {
  for (int64_t i = 0; i < c->n; i++) c->ref[i] = beaters[i] < k ? 1 : 0;
}

/* Every top-k kernel in turn: CUDA builds force each through
 * bk__cuda_topk_force (a kernel that cannot take the shape leaves it to the
 * radix select); the CPU backend has one method. */
#ifdef BK_HAVE_CUDA
static const int topk_paths[] = {BK_TOPK_AUTO, BK_TOPK_GROUP, BK_TOPK_SMALL, BK_TOPK_SELECT};
static void topk_path(int p) { bk__cuda_topk_force(p); }
#else
static const int topk_paths[] = {0};
static void topk_path(int p) { (void)p; }
#endif
#define TOPK_PATHS (sizeof topk_paths / sizeof topk_paths[0])

static void topk_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double x[] = {3, 1, 3, 2};
    bk_buffer *b = tl_buf(dt, x, 4), *y = NULL;
    static const struct {
      int64_t k;
      double want[4];
    } cases[] = {{2, {1, 0, 1, 0}}, {3, {1, 0, 1, 1}}, {1, {1, 0, 0, 0}}, {0, {0, 0, 0, 0}},
                 {4, {1, 1, 1, 1}}, {100, {1, 1, 1, 1}}, {INT64_MAX, {1, 1, 1, 1}}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      if (TL_OK(bk_rows_topk_mask(tl_ctx, b, 1, 4, cases[i].k, &y)) == BK_OK)
        TL_BUF_EXACT(y, cases[i].want, 4);
      bk_buffer_release(y);
      y = NULL;
    }
    bk_buffer_release(b);
    /* With NaN the literal definition may keep more than k, or fewer: for
     * k = 1, 2 beats 1, NaN ties 1 from behind it and NaN beats 2 from
     * before it, so every entry has a beater. */
    const double xn[] = {1, NAN, 2};
    b = tl_buf(dt, xn, 3);
    if (TL_OK(bk_rows_topk_mask(tl_ctx, b, 1, 3, 2, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 1, 1}), 3);
    bk_buffer_release(y);
    if (TL_OK(bk_rows_topk_mask(tl_ctx, b, 1, 3, 1, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){0, 0, 0}), 3);
    bk_buffer_release(y);
    bk_buffer_release(b);
    /* -0 and +0 tie (by position); +-inf order normally. */
    const double z[] = {0, -0.0, -INFINITY, INFINITY};
    b = tl_buf(dt, z, 4);
    if (TL_OK(bk_rows_topk_mask(tl_ctx, b, 1, 4, 2, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 0, 0, 1}), 4);
    bk_buffer_release(y);
    bk_buffer_release(b);
    bk_buffer *e = tl_buf(dt, NULL, 0);
    if (TL_OK(bk_rows_topk_mask(tl_ctx, e, 3, 0, 1, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    if (TL_OK(bk_rows_topk_mask(tl_ctx, e, 0, 3, 0, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    bk_buffer_release(e);
  }
}

/* A few k from 1 to cols, each run twice; the input unchanged. */
static void topk_random_case(rows_case *c, const int64_t *beaters) {
  const int64_t rows = c->rows, cols = c->cols;
  const int64_t ks[] = {1, cols / 3, cols / 2, cols - 1, cols};
  for (int ki = 0; ki < 5; ki++) {
    int64_t k = ks[ki];
    if (k < 1) continue;
    topk_ref(c, beaters, k);
    bk_buffer *y = NULL, *y2 = NULL;
    if (TL_OK(bk_rows_topk_mask(tl_ctx, c->b, rows, cols, k, &y)) == BK_OK) {
      TL_BUF_EXACT(y, c->ref, c->n);
      if (TL_OK(bk_rows_topk_mask(tl_ctx, c->b, rows, cols, k, &y2)) == BK_OK)
        TL_CHECK(tl_same_bits(y, y2), "topk_mask is not deterministic");
    }
    bk_buffer_release(y);
    bk_buffer_release(y2);
  }
  TL_UNCHANGED(c->b, c->h, c->n);
}

static void topk_random(void) {
  static const int64_t shapes[][2] = {{20, 1},  {20, 2},  {20, 5},   {20, 64},
                                      {20, 65}, {20, 100}, {5, 1000}, {3, 4096}};
  for (size_t p = 0; p < TOPK_PATHS; p++) {
    topk_path(topk_paths[p]);
    each_topk_case(shapes, sizeof shapes / sizeof shapes[0], 800, topk_random_case);
  }
  topk_path(0);
}

/* Every k from 1 to 8 on the row widths the CUDA lane-group kernel takes
 * (32..256 float columns, 16..128 double columns), row counts that leave a
 * warp partly filled, and rows with ties, signed zeros, infinities and NaN
 * mixed with clean rows. */
static void topk_small_k_case(rows_case *c, const int64_t *beaters) {
  for (int64_t k = 1; k <= 8; k++) {
    topk_ref(c, beaters, k);
    bk_buffer *y = NULL;
    if (TL_OK(bk_rows_topk_mask(tl_ctx, c->b, c->rows, c->cols, k, &y)) == BK_OK)
      TL_BUF_EXACT(y, c->ref, c->n);
    bk_buffer_release(y);
  }
}

static void topk_small_k(void) {
  static const int64_t shapes[][2] = {{1, 32}, {3, 64}, {7, 128}, {9, 256}, {9, 16},
                                      {33, 32}, {4096, 64}};
  for (size_t p = 0; p < TOPK_PATHS; p++) {
    topk_path(topk_paths[p]);
    each_topk_case(shapes, sizeof shapes / sizeof shapes[0], 900, topk_small_k_case);
  }
  topk_path(0);
}

/* Beaters from a sort, for rows too long to count literally: the numbers
 * in the order (value descending, index ascending), where a number's
 * beaters are its position plus the NaNs before it and a NaN's beaters are
 * the entries before it. */
static const double *topk_sorted_row;

static int topk_order(const void *a, const void *b) {
  const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
  const double x = topk_sorted_row[i], y = topk_sorted_row[j];
  if (x > y) return -1;
  if (y > x) return 1;
  return i < j ? -1 : i > j;
}

static void topk_beaters_sorted(const double *x, int64_t *beaters, int64_t rows, int64_t cols) {
  int64_t *ix = tl_xmalloc((size_t)cols * sizeof *ix);
  int64_t *nan_before = tl_xmalloc((size_t)cols * sizeof *nan_before);
  for (int64_t r = 0; r < rows; r++) {
    const double *xr = x + r * cols;
    int64_t n = 0, nans = 0;
    for (int64_t i = 0; i < cols; i++) {
      if (isnan(xr[i])) {
        beaters[r * cols + i] = i;
        nans++;
      } else {
        ix[n++] = i;
        nan_before[i] = nans;
      }
    }
    topk_sorted_row = xr;
    qsort(ix, (size_t)n, sizeof *ix, topk_order);
    for (int64_t p = 0; p < n; p++) beaters[r * cols + ix[p]] = p + nan_before[ix[p]];
  }
  free(ix);
  free(nan_before);
}

/* Long rows: rows whose keys fit the CUDA select kernel's shared memory and
 * rows read from memory in every pass (float32 beyond about 56,000 columns,
 * float64 beyond about 28,000), normal values, heavy ties (a cut among
 * equal values) and NaN rows, k from 1 to cols - 1. */
static void topk_long(void) {
  static const int64_t shapes[][2] = {{3, 5000}, {2, 40000}, {2, 70001}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      for (int fill = FILL_RANDN; fill <= FILL_SPECIALS; fill++) {
        rows_case c;
        rows_case_make(&c, dt, shapes[s][0], shapes[s][1], 950 + 3 * s + (uint64_t)fill, fill);
        int64_t *beaters = tl_xmalloc((size_t)c.n * sizeof *beaters);
        topk_beaters_sorted(c.h, beaters, c.rows, c.cols);
        const int64_t ks[] = {1, 7, 100, c.cols / 2, c.cols - 1};
        for (size_t p = 0; p < TOPK_PATHS; p++) {
          topk_path(topk_paths[p]);
          for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            topk_ref(&c, beaters, ks[ki]);
            bk_buffer *y = NULL;
            if (TL_OK(bk_rows_topk_mask(tl_ctx, c.b, c.rows, c.cols, ks[ki], &y)) == BK_OK)
              TL_BUF_EXACT(y, c.ref, c.n);
            bk_buffer_release(y);
          }
        }
        topk_path(0);
        TL_UNCHANGED(c.b, c.h, c.n);
        free(beaters);
        rows_case_free(&c);
      }
    }
  }
}

/* k >= cols on a result longer than the front door's fill block. */
static void topk_all_ones(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const int64_t rows = 3, cols = 5000, n = rows * cols;
    double *x = tl_xmalloc((size_t)n * sizeof *x), *ones = tl_xmalloc((size_t)n * sizeof *ones);
    tl_seed(900);
    fill_tricky(x, n, 1);
    for (int64_t i = 0; i < n; i++) ones[i] = 1;
    bk_buffer *b = tl_buf(dt, x, n), *y = NULL;
    if (TL_OK(bk_rows_topk_mask(tl_ctx, b, rows, cols, cols, &y)) == BK_OK)
      TL_BUF_EXACT(y, ones, n);
    bk_buffer_release(y);
    for (int64_t i = 0; i < n; i++) ones[i] = 0;
    if (TL_OK(bk_rows_topk_mask(tl_ctx, b, rows, cols, 0, &y)) == BK_OK) TL_BUF_EXACT(y, ones, n);
    bk_buffer_release(y);
    bk_buffer_release(b);
    free(x);
    free(ones);
  }
}

static bk_status call_topk(const bk_buffer *x, int64_t rows, int64_t cols, bk_buffer **out) {
  return bk_rows_topk_mask(tl_ctx, x, rows, cols, 1, out);
}

static void topk_errors(void) {
  matrix_errors(call_topk);
  double x[6] = {0};
  bk_buffer *b = tl_buf(BK_F64, x, 6), *y = (bk_buffer *)&y;
  TL_REJECT(bk_rows_topk_mask(tl_ctx, b, 2, 3, -1, &y), BK_ERR_INVALID_ARGUMENT, "k = -1");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_buffer_release(b);
}

/* ---- bk_rows_masked_softmax ------------------------------------------------------------------- */

/* Host reference: softmax over the allowed entries (mask != 0) with the
 * IEEE rules of bk_softmax among them, blocked entries +0. */
static void masked_softmax_ref(const double *s, const double *m, double *ref, int64_t rows,
                               int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    const double *sr = s + r * cols, *mr = m + r * cols;
    double mx = -INFINITY, sum = 0;
    int any = 0, nan = 0;
    for (int64_t j = 0; j < cols; j++) {
      if (mr[j] == 0) continue;
      any = 1;
      if (isnan(sr[j])) nan = 1;
      if (sr[j] > mx) mx = sr[j];
    }
    for (int64_t j = 0; j < cols; j++)
      if (mr[j] != 0) sum += exp(sr[j] - mx);
    for (int64_t j = 0; j < cols; j++) {
      if (mr[j] == 0 || !any)
        ref[r * cols + j] = 0;
      else
        ref[r * cols + j] = (nan || isinf(mx)) ? NAN : exp(sr[j] - mx) / sum;
    }
  }
}

/* Whether every blocked entry (m == 0) of y is exactly +0. */
static int blocked_all_zero(const bk_buffer *y, const double *m, int64_t n) {
  double *g = tl_read(y);
  int ok = 1;
  for (int64_t i = 0; i < n; i++)
    if (m[i] == 0 && (g[i] != 0 || signbit(g[i]))) ok = 0;
  free(g);
  return ok;
}

static void masked_softmax_examples(void) {
  const double inf = INFINITY;
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double s[] = {1000, -1000, 3, 4}, m[] = {0, 1, 0, 0};
    bk_buffer *bs = tl_buf(dt, s, 4), *bm = tl_buf(dt, m, 4), *y = NULL;
    if (TL_OK(bk_rows_masked_softmax(tl_ctx, bs, bm, 2, 2, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){0, 1, 0, 0}), 4);
    bk_buffer_release(y);
    bk_buffer_release(bs);
    bk_buffer_release(bm);
    /* rows: NaN mask allowed, -0 mask blocked | blocked NaN and +inf ignored
     * | allowed NaN makes the allowed entries NaN, blocked stay +0 | only
     * -inf allowed | -inf among numbers */
    const double s2[] = {1, 1, 5,   NAN, 2, inf,  NAN, 0, 0,   -inf, -inf, 3,   -inf, 0, 0};
    const double m2[] = {NAN, 1, -0.0, 0, 1, 0,   1, 1, 0,    1, 1, 0,         1, 1, 1};
    const double want[] = {0.5, 0.5, 0,  0, 1, 0,  NAN, NAN, 0,  NAN, NAN, 0,  0, 0.5, 0.5};
    bs = tl_buf(dt, s2, 15);
    bm = tl_buf(dt, m2, 15);
    if (TL_OK(bk_rows_masked_softmax(tl_ctx, bs, bm, 5, 3, &y)) == BK_OK) TL_BUF_EXACT(y, want, 15);
    bk_buffer_release(y);
    bk_buffer_release(bs);
    bk_buffer_release(bm);
    bk_buffer *e = tl_buf(dt, NULL, 0);
    if (TL_OK(bk_rows_masked_softmax(tl_ctx, e, e, 3, 0, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    if (TL_OK(bk_rows_masked_softmax(tl_ctx, e, e, 0, 3, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    bk_buffer_release(e);
  }
}

/* Random rows (some fully blocked) against the reference; then every
 * blocked score is replaced by a hostile value and the result must be
 * bitwise the same, with blocked entries exactly +0. */
static void masked_softmax_random(void) {
  static const int64_t shapes[][2] = {{1, 1}, {7, 5}, {33, 100}, {64, 257}, {4, 20000}};
  static const double hostile[] = {NAN, INFINITY, -INFINITY, 1000, -1000, 1e30, -1e30, 0};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
      double *x = tl_xmalloc((size_t)n * sizeof *x), *m = tl_xmalloc((size_t)n * sizeof *m);
      double *ref = tl_xmalloc((size_t)n * sizeof *ref);
      tl_seed(1000 + s);
      for (int64_t i = 0; i < n; i++) {
        x[i] = 4 * tl_randn();
        uint64_t u = tl_next() % 8;
        m[i] = u < 3 ? 0 : u == 3 ? -0.0 : u == 4 ? 0.5 : u == 5 ? -2 : 1;
      }
      if (rows > 2)
        for (int64_t j = 0; j < cols; j++) m[cols + j] = 0; /* row 1 fully blocked */
      bk_buffer *bx = tl_buf(dt, x, n), *bm = tl_buf(dt, m, n), *y = NULL, *y2 = NULL;
      double *h = held(bx);
      masked_softmax_ref(h, m, ref, rows, cols);
      if (TL_OK(bk_rows_masked_softmax(tl_ctx, bx, bm, rows, cols, &y)) == BK_OK) {
        TL_BUF_CLOSE(y, ref, n, tl_tol_red(dt), 1.0);
        TL_CHECK(blocked_all_zero(y, m, n), "a blocked entry is not exactly +0");
        for (int64_t i = 0, k = 0; i < n; i++)
          if (m[i] == 0) h[i] = hostile[k++ % 8];
        bk_buffer *bh = tl_buf(dt, h, n);
        if (TL_OK(bk_rows_masked_softmax(tl_ctx, bh, bm, rows, cols, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "blocked scores influenced the result");
        TL_UNCHANGED(bh, h, n);
        bk_buffer_release(bh);
        bk_buffer_release(y2);
        y2 = NULL;
        if (TL_OK(bk_rows_masked_softmax(tl_ctx, bx, bm, rows, cols, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "masked_softmax is not deterministic");
      }
      TL_UNCHANGED(bm, m, n);
      bk_buffer_release(y);
      bk_buffer_release(y2);
      bk_buffer_release(bx);
      bk_buffer_release(bm);
      free(h);
      free(x);
      free(m);
      free(ref);
    }
  }
}

/* Scores and mask of the masked width tests (seeded before): a third of
 * the entries blocked, with hostile scores; with more than four rows, row
 * 1 fully blocked, row 2 with one allowed entry, row 3 all -inf scores. */
static void masked_rows_data(double *x, double *m, int64_t rows, int64_t cols) {
  static const double hostile[] = {NAN, INFINITY, -INFINITY, 1e30};
  const int64_t n = rows * cols;
  for (int64_t i = 0; i < n; i++) {
    x[i] = 4 * tl_randn();
    m[i] = tl_next() % 3 == 0 ? 0 : 1;
  }
  for (int64_t i = 0, k = 0; i < n; i++)
    if (m[i] == 0) x[i] = hostile[k++ % 4];
  if (rows > 4)
    for (int64_t c = 0; c < cols; c++) {
      m[1 * cols + c] = 0;
      m[2 * cols + c] = c == cols / 2;
      x[3 * cols + c] = -INFINITY;
    }
}

/* Masked rows of every width up to 160 and a spread of wider ones, 37
 * rows each so that rows start at every offset within a 16-byte vector
 * (the CUDA row plans read the vectors that overlap a row): a third of the
 * entries blocked, a fully blocked row, a row with one allowed entry, a row
 * whose allowed entries are all -inf, hostile blocked scores; against the
 * reference, blocked entries exactly +0, twice with the same bits. GPU
 * contexts only. */
static void masked_softmax_widths(void) {
  if (tl_dev.kind == BK_DEVICE_CPU) return;
  static const int64_t wide[][2] = {{37, 509},   {37, 510},   {37, 511},  {37, 512},
                                    {37, 513},   {37, 1021},  {37, 2049}, {37, 4097},
                                    {300, 16389}, {300, 8195}, {5, 20011}, {2, 40003}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    int64_t rows, cols;
    for (int64_t wi = 0; tl_row_width(wi, 50, wide, sizeof wide / sizeof wide[0], &rows, &cols);
         wi++) {
      const int64_t n = rows * cols;
      double *x = tl_xmalloc((size_t)n * sizeof *x), *m = tl_xmalloc((size_t)n * sizeof *m);
      double *ref = tl_xmalloc((size_t)n * sizeof *ref);
      tl_seed(9000 + (uint64_t)wi);
      masked_rows_data(x, m, rows, cols);
      tl_round(dt, x, n);
      masked_softmax_ref(x, m, ref, rows, cols);
      bk_buffer *bx = tl_buf(dt, x, n), *bm = tl_buf(dt, m, n), *y = NULL, *y2 = NULL;
      if (TL_OK(bk_rows_masked_softmax(tl_ctx, bx, bm, rows, cols, &y)) == BK_OK) {
        TL_BUF_CLOSE(y, ref, n, tl_tol_red(dt), 1.0);
        TL_CHECK(blocked_all_zero(y, m, n),
                 "%" PRId64 " x %" PRId64 ": a blocked entry is not exactly +0", rows, cols);
        if (TL_OK(bk_rows_masked_softmax(tl_ctx, bx, bm, rows, cols, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "masked_softmax is not deterministic");
      }
      TL_UNCHANGED(bx, x, n);
      TL_UNCHANGED(bm, m, n);
      bk_buffer_release(y);
      bk_buffer_release(y2);
      bk_buffer_release(bx);
      bk_buffer_release(bm);
      free(x);
      free(m);
      free(ref);
    }
  }
}

/* Every load and path of the CUDA row softmax with a mask
 * (bk__cuda_rows_force, as in test_softmax.c) at widths around each plan's
 * edges: a third blocked, a fully blocked row, one allowed entry, allowed
 * entries all -inf, hostile blocked scores; blocked entries exactly +0. */
static void masked_softmax_forced(void) {
#ifdef BK_HAVE_CUDA
  static const int64_t widths[] = {1,   2,   3,   5,   8,   9,   16,  17,  32,   33,   63,
                                   64,  65,  127, 128, 129, 255, 257, 511, 512, 1021, 4097};
  if (!bk__cuda_rows_force(tl_ctx, 0)) return;
  for (int strategy = 1; strategy <= 6; strategy++) {
    TL_CHECK(bk__cuda_rows_force(tl_ctx, strategy), "strategy %d refused", strategy);
    for (int d = 0; d < TL_DTYPES; d++) {
      bk_dtype dt = tl_dtypes[d];
      for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        const int64_t rows = 37 + (int64_t)((w + (size_t)strategy) % 3), cols = widths[w];
        const int64_t n = rows * cols;
        double *x = tl_xmalloc((size_t)n * sizeof *x), *m = tl_xmalloc((size_t)n * sizeof *m);
        double *ref = tl_xmalloc((size_t)n * sizeof *ref);
        tl_seed(9600 + w);
        masked_rows_data(x, m, rows, cols);
        tl_round(dt, x, n);
        masked_softmax_ref(x, m, ref, rows, cols);
        bk_buffer *bx = tl_buf(dt, x, n), *bm = tl_buf(dt, m, n), *y = NULL;
        if (TL_OK(bk_rows_masked_softmax(tl_ctx, bx, bm, rows, cols, &y)) == BK_OK) {
          TL_BUF_CLOSE(y, ref, n, tl_tol_red(dt), 1.0);
          TL_CHECK(blocked_all_zero(y, m, n),
                   "strategy %d, %" PRId64 " columns: a blocked entry is not exactly +0",
                   strategy, cols);
        }
        bk_buffer_release(y);
        bk_buffer_release(bx);
        bk_buffer_release(bm);
        free(x);
        free(m);
        free(ref);
      }
    }
  }
  TL_CHECK(bk__cuda_rows_force(tl_ctx, 0), "planner not restored");
#endif
}

static void masked_softmax_errors(void) {
  double x[6] = {0};
  bk_buffer *b = tl_buf(BK_F32, x, 6), *b64 = tl_buf(BK_F64, x, 6), *b4 = tl_buf(BK_F32, x, 4);
  bk_buffer *y = (bk_buffer *)&y;
  TL_REJECT(bk_rows_masked_softmax(tl_ctx, b, b, 2, 3, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_rows_masked_softmax(tl_ctx, NULL, b, 2, 3, &y), BK_ERR_NULL, "scores");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_rows_masked_softmax(tl_ctx, b, NULL, 2, 3, &y), BK_ERR_NULL, "mask");
  TL_REJECT(bk_rows_masked_softmax(tl_ctx, b, b, -2, 3, &y), BK_ERR_INVALID_ARGUMENT, "rows");
  TL_REJECT(bk_rows_masked_softmax(tl_ctx, b, b, 2, -3, &y), BK_ERR_INVALID_ARGUMENT, "cols");
  TL_REJECT(bk_rows_masked_softmax(tl_ctx, b, b, INT64_MAX, 2, &y), BK_ERR_INVALID_ARGUMENT,
            "overflow");
  TL_REJECT(bk_rows_masked_softmax(tl_ctx, b4, b, 2, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "scores has length 4, expected 6");
  TL_REJECT(bk_rows_masked_softmax(tl_ctx, b, b4, 2, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "mask has length 4, expected 6");
  TL_REJECT(bk_rows_masked_softmax(tl_ctx, b, b64, 2, 3, &y), BK_ERR_DTYPE, "mask");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) {
    bk_buffer *bo = tl_buf_on(other, BK_F32, x, 6);
    TL_REJECT(bk_rows_masked_softmax(tl_ctx, b, bo, 2, 3, &y), BK_ERR_DEVICE_MISMATCH, "mask");
    TL_REJECT(bk_rows_masked_softmax(other, b, b, 2, 3, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
    bk_buffer_release(bo);
  }
  bk_buffer_release(b);
  bk_buffer_release(b64);
  bk_buffer_release(b4);
}

/* ---- allocation failures ---------------------------------------------------------------------- */

static bk_status af_sum(const bk_buffer *x, const bk_buffer *m, bk_buffer **out) {
  (void)m;
  return bk_rows_sum(tl_ctx, x, 40, 100, out);
}
static bk_status af_max(const bk_buffer *x, const bk_buffer *m, bk_buffer **out) {
  (void)m;
  return bk_rows_max(tl_ctx, x, 40, 100, out);
}
static bk_status af_first(const bk_buffer *x, const bk_buffer *m, bk_buffer **out) {
  (void)m;
  return bk_rows_first_max_mask(tl_ctx, x, 40, 100, out);
}
static bk_status af_topk(const bk_buffer *x, const bk_buffer *m, bk_buffer **out) {
  (void)m;
  return bk_rows_topk_mask(tl_ctx, x, 40, 100, 7, out);
}
static bk_status af_topk_ones(const bk_buffer *x, const bk_buffer *m, bk_buffer **out) {
  (void)m;
  return bk_rows_topk_mask(tl_ctx, x, 40, 100, 100, out);
}
static bk_status af_topk_zeros(const bk_buffer *x, const bk_buffer *m, bk_buffer **out) {
  (void)m;
  return bk_rows_topk_mask(tl_ctx, x, 40, 100, 0, out);
}
static bk_status af_masked(const bk_buffer *x, const bk_buffer *m, bk_buffer **out) {
  return bk_rows_masked_softmax(tl_ctx, x, m, 40, 100, out);
}

static void rows_alloc_failures(void) {
  const int64_t n = 4000;
  double *x = tl_xmalloc((size_t)n * sizeof *x);
  tl_seed(1100);
  tl_fill_randn(x, n);
  bk_buffer *b = tl_buf(BK_F32, x, n);
  alloc_failures("rows_sum", af_sum, b, b);
  alloc_failures("rows_max", af_max, b, b);
  alloc_failures("rows_first_max_mask", af_first, b, b);
  alloc_failures("rows_topk_mask", af_topk, b, b);
  alloc_failures("rows_topk_mask (k >= cols)", af_topk_ones, b, b);
  alloc_failures("rows_topk_mask (k == 0)", af_topk_zeros, b, b);
  alloc_failures("rows_masked_softmax", af_masked, b, b);
  bk_buffer_release(b);
  free(x);
}

int main(void) {
  tl_init();
  TL_RUN(rows_sum_examples);
  TL_RUN(rows_sum_random);
  TL_RUN(rows_sum_errors);
  TL_RUN(rows_max_examples);
  TL_RUN(rows_max_random);
  TL_RUN(rows_max_errors);
  TL_RUN(first_max_examples);
  TL_RUN(first_max_random);
  TL_RUN(first_max_errors);
  TL_RUN(rows_narrow);
  TL_RUN(topk_examples);
  TL_RUN(topk_random);
  TL_RUN(topk_small_k);
  TL_RUN(topk_long);
  TL_RUN(topk_all_ones);
  TL_RUN(topk_errors);
  TL_RUN(masked_softmax_examples);
  TL_RUN(masked_softmax_random);
  TL_RUN(masked_softmax_widths);
  TL_RUN(masked_softmax_forced);
  TL_RUN(masked_softmax_errors);
  TL_RUN(rows_alloc_failures);
  return tl_finish();
}
