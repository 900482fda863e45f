/*
 * test_extremes.c — every public primitive called with each of its integer
 * arguments set in turn to the extremes of its type, the other arguments
 * valid: int arguments take INT_MIN, -1, 0, 1, INT_MAX; int64 arguments
 * INT64_MIN, -1, 0, 1, INT64_MAX, INT64_MAX-1, 2^62; host indices those
 * values as uint64 plus UINT32_MAX and UINT32_MAX+1. Array arguments (dims,
 * strides, paddings, dilations, axis maps, indices) are swept entry by
 * entry. The convolution is also called with every combination of kernel
 * extent 1 and 2 and extreme stride, pad_before, pad_after and dilation.
 *
 * Each call either fails, with a message that names the function, every
 * out-parameter NULL and no buffer left alive, or succeeds with the values
 * of a float64 reference that validates the call on its own; a call the
 * reference finds valid must succeed. The program prints how many
 * extreme-argument calls it made.
 */
#include "testlib.h"
#include "core/internal.h"

#include <dlpack/dlpack.h>
#include <limits.h>

#define P62 ((int64_t)1 << 62)

static const int64_t ext_int[] = {INT_MIN, -1, 0, 1, INT_MAX};
static const int64_t ext_i64[] = {INT64_MIN, -1, 0, 1, INT64_MAX, INT64_MAX - 1, P62};
static const int64_t ext_idx[] = {INT64_MIN, -1, 0, 1, INT64_MAX, INT64_MAX - 1, P62,
                                  (int64_t)UINT32_MAX, (int64_t)UINT32_MAX + 1};
#define N_INT ((int)(sizeof ext_int / sizeof ext_int[0]))
#define N_I64 ((int)(sizeof ext_i64 / sizeof ext_i64[0]))
#define N_IDX ((int)(sizeof ext_idx / sizeof ext_idx[0]))

static int64_t ext_calls, ext_valid;

/* ---- checked arithmetic for the references ----------------------------------- */

static int mul_ok(int64_t a, int64_t b, int64_t *r) {
  return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, r);
}
static int add_ok(int64_t a, int64_t b, int64_t *r) {
  return a >= 0 && b >= 0 && !__builtin_add_overflow(a, b, r);
}
/* Product of d[0..rank) with every entry >= 0 and no overflow. */
static int prod_ok(const int64_t *d, int64_t rank, int64_t *r) {
  int64_t p = 1;
  for (int64_t i = 0; i < rank; i++)
    if (d[i] < 0) return 0;
  for (int64_t i = 0; i < rank; i++) {
    if (d[i] == 0) {
      *r = 0;
      return 1;
    }
  }
  for (int64_t i = 0; i < rank; i++)
    if (!mul_ok(p, d[i], &p)) return 0;
  *r = p;
  return 1;
}
/* The largest result a reference computes: bigger valid results are not
 * expected in these tables, and the library may reject them for size. */
#define REF_MAX_LEN ((int64_t)1 << 20)

/* Copies n entries of src into a BK_MAX_RANK array padded with `fill`. */
static void pad16(int64_t *dst, const int64_t *src, int n, int64_t fill) {
  for (int i = 0; i < BK_MAX_RANK; i++) dst[i] = i < n ? src[i] : fill;
}

/* ---- the table ------------------------------------------------------------------ */

enum { K_INT, K_I64, K_IDX };

#define X_MAX_ARGS 19
#define X_MAX_IN 6
#define X_MAX_OUT 4

typedef struct xin {
  bk_buffer *b[X_MAX_IN];
  double *v[X_MAX_IN];
  int64_t len[X_MAX_IN];
} xin;

/* A reference result: up to four outputs, malloc'd. */
typedef struct xref {
  double *v[X_MAX_OUT];
  int64_t len[X_MAX_OUT];
} xref;

typedef struct xarg {
  const char *name;
  int kind;
  int64_t base;
} xarg;

typedef struct xcase {
  const char *fn;
  int nargs;
  xarg arg[X_MAX_ARGS];
  int64_t in_len[X_MAX_IN]; /* -1 ends the list; 0 is an empty input */
  int nout;
  bk_status (*call)(const int64_t *a, const xin *in, bk_buffer **out);
  /* Validates the call as the header describes it and fills the expected
   * outputs; 0 when the call is invalid. NULL: no argument set other than
   * the base one is valid, and the base one is checked to succeed. */
  int (*ref)(const int64_t *a, const xin *in, xref *r);
} xcase;

static double *ref_alloc(xref *r, int i, int64_t n) {
  r->len[i] = n;
  r->v[i] = tl_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  for (int64_t j = 0; j < n; j++) r->v[i][j] = 0;
  return r->v[i];
}

/* ---- softmax, sum_axis, swap_adjacent: a = {rank, axis|depth, d0, d1, d2} -------- */

static bk_status c_softmax(const int64_t *a, const xin *in, bk_buffer **o) {
  int64_t d[BK_MAX_RANK];
  pad16(d, a + 2, 3, 1);
  return bk_softmax(tl_ctx, in->b[0], d, (int)a[0], (int)a[1], &o[0]);
}
/* The (outer, n, inner) view of dims d around axis; 0 when the call is
 * invalid for an input of `len` elements. */
static int ref_view(const int64_t *a, int64_t lo_rank, int64_t len, int64_t *outer, int64_t *n,
                    int64_t *inner) {
  int64_t rank = a[0], axis = a[1], d[BK_MAX_RANK], elems = 0;
  pad16(d, a + 2, 3, 1);
  if (rank < lo_rank || rank > BK_MAX_RANK || !prod_ok(d, rank, &elems) || elems != len) return 0;
  if (axis < 0 || axis >= (rank > 0 ? rank : 1)) return 0;
  *outer = 1;
  *inner = 1;
  *n = rank > 0 ? d[axis] : 1;
  for (int64_t i = 0; i < axis; i++) *outer *= d[i];
  for (int64_t i = axis + 1; i < rank; i++) *inner *= d[i];
  return 1;
}
static int r_softmax(const int64_t *a, const xin *in, xref *r) {
  int64_t outer, n, inner;
  if (!ref_view(a, 1, in->len[0], &outer, &n, &inner)) return 0;
  double *y = ref_alloc(r, 0, in->len[0]);
  const double *x = in->v[0];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < n; j++) m = fmax(m, x[(o * n + j) * inner + i]);
      for (int64_t j = 0; j < n; j++) s += exp(x[(o * n + j) * inner + i] - m);
      for (int64_t j = 0; j < n; j++)
        y[(o * n + j) * inner + i] = exp(x[(o * n + j) * inner + i] - m) / s;
    }
  return 1;
}

static bk_status c_sum_axis(const int64_t *a, const xin *in, bk_buffer **o) {
  int64_t d[BK_MAX_RANK];
  pad16(d, a + 2, 3, 1);
  return bk_sum_axis(tl_ctx, in->b[0], d, (int)a[0], (int)a[1], &o[0]);
}
static int r_sum_axis(const int64_t *a, const xin *in, xref *r) {
  int64_t outer, n, inner;
  if (!ref_view(a, 0, in->len[0], &outer, &n, &inner)) return 0;
  double *y = ref_alloc(r, 0, outer * inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++)
      for (int64_t j = 0; j < n; j++) y[o * inner + i] += in->v[0][(o * n + j) * inner + i];
  return 1;
}

static bk_status c_swap(const int64_t *a, const xin *in, bk_buffer **o) {
  int64_t d[BK_MAX_RANK];
  pad16(d, a + 2, 3, 1);
  return bk_swap_adjacent(tl_ctx, in->b[0], d, (int)a[0], (int)a[1], &o[0]);
}
static int r_swap(const int64_t *a, const xin *in, xref *r) {
  int64_t rank = a[0], depth = a[1], d[BK_MAX_RANK], elems = 0;
  pad16(d, a + 2, 3, 1);
  if (rank < 0 || rank > BK_MAX_RANK || !prod_ok(d, rank, &elems) || elems != in->len[0]) return 0;
  if (depth < 0 || depth >= rank - 1) return 0;
  int64_t outer = 1, inner = 1, p = d[depth], q = d[depth + 1];
  for (int64_t i = 0; i < depth; i++) outer *= d[i];
  for (int64_t i = depth + 2; i < rank; i++) inner *= d[i];
  double *y = ref_alloc(r, 0, elems);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < p; i++)
      for (int64_t j = 0; j < q; j++)
        for (int64_t t = 0; t < inner; t++)
          y[((o * q + j) * p + i) * inner + t] = in->v[0][((o * p + i) * q + j) * inner + t];
  return 1;
}

/* ---- the (rows, cols) families -------------------------------------------------- */

static bk_status c_xent_w(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_xent_weighted_mean(tl_ctx, in->b[0], in->b[1], a[0], a[1], &o[0]);
}
static bk_status c_xent_t(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_xent_teacher(tl_ctx, in->b[0], in->b[1], a[0], a[1], (int)a[2], &o[0]);
}
static int r_xent_t(const int64_t *a, const xin *in, xref *r) {
  int64_t rows = a[0], cols = a[1], elems = 0;
  if (!mul_ok(rows, cols, &elems) || elems != in->len[0] || elems != in->len[1]) return 0;
  if (a[2] != 0 && a[2] != 1) return 0;
  double *y = ref_alloc(r, 0, a[2] ? elems : 1);
  for (int64_t i = 0; i < rows; i++) {
    const double *s = in->v[0] + i * cols, *t = in->v[1] + i * cols;
    double ms = -INFINITY, mt = -INFINITY, zs = 0, zt = 0, pt = 0;
    for (int64_t j = 0; j < cols; j++) ms = fmax(ms, s[j]), mt = fmax(mt, t[j]);
    for (int64_t j = 0; j < cols; j++) zs += exp(s[j] - ms), zt += exp(t[j] - mt);
    for (int64_t j = 0; j < cols; j++) {
      double p = exp(t[j] - mt) / zt;
      pt += p * (s[j] - ms);
      if (a[2]) y[i * cols + j] = (exp(s[j] - ms) / zs - p) / (double)rows;
    }
    if (!a[2]) y[0] += (log(zs) - pt) / (double)rows;
  }
  return 1;
}
static bk_status c_rows_sum(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_rows_sum(tl_ctx, in->b[0], a[0], a[1], &o[0]);
}
static bk_status c_rows_max(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_rows_max(tl_ctx, in->b[0], a[0], a[1], &o[0]);
}
static bk_status c_first_max(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_rows_first_max_mask(tl_ctx, in->b[0], a[0], a[1], &o[0]);
}
static bk_status c_masked(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_rows_masked_softmax(tl_ctx, in->b[0], in->b[1], a[0], a[1], &o[0]);
}
static bk_status c_topk(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_rows_topk_mask(tl_ctx, in->b[0], a[0], a[1], a[2], &o[0]);
}
static int r_topk(const int64_t *a, const xin *in, xref *r) {
  int64_t rows = a[0], cols = a[1], k = a[2], elems = 0;
  if (!mul_ok(rows, cols, &elems) || elems != in->len[0] || k < 0) return 0;
  double *y = ref_alloc(r, 0, elems);
  for (int64_t i = 0; i < rows; i++) {
    const double *x = in->v[0] + i * cols;
    for (int64_t j = 0; j < cols; j++) {
      int64_t beaters = 0;
      for (int64_t l = 0; l < cols; l++)
        if (x[l] > x[j] || (!(x[j] > x[l]) && l < j)) beaters++;
      y[i * cols + j] = beaters < k ? 1.0 : 0.0;
    }
  }
  return 1;
}
static bk_status c_ln_f(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_layernorm_forward(tl_ctx, in->b[0], in->b[1], in->b[2], a[0], a[1], 1e-5, &o[0], &o[1],
                              &o[2]);
}
static bk_status c_ln_b(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_layernorm_backward(tl_ctx, in->b[0], in->b[1], in->b[2], in->b[3], a[0], a[1], &o[0],
                               &o[1], &o[2]);
}

/* ---- vectors and broadcasts --------------------------------------------------------- */

static bk_status c_concat(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_vec_concat(tl_ctx, in->b[0], in->b[1], a[0], a[1], &o[0]);
}
static bk_status c_slice(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_vec_slice(tl_ctx, in->b[0], a[0], a[1], a[2], &o[0]);
}
static int r_slice(const int64_t *a, const xin *in, xref *r) {
  int64_t n = a[0], start = a[1], len = a[2], end = 0;
  if (n != in->len[0] || !add_ok(start, len, &end) || end > n) return 0;
  double *y = ref_alloc(r, 0, len);
  for (int64_t i = 0; i < len; i++) y[i] = in->v[0][start + i];
  return 1;
}
static bk_status c_bcol(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_broadcast_col(tl_ctx, in->b[0], a[0], a[1], &o[0]);
}
static int r_bcol(const int64_t *a, const xin *in, xref *r) {
  int64_t rows = a[0], cols = a[1], elems = 0;
  if (rows != in->len[0] || !mul_ok(rows, cols, &elems) || elems > REF_MAX_LEN) return 0;
  double *y = ref_alloc(r, 0, elems);
  for (int64_t i = 0; i < elems; i++) y[i] = in->v[0][i / cols];
  return 1;
}

/* a = {in_rank, out_rank, in_dims[2], out_dims[3], axis_map[3]}. */
static bk_status c_bto(const int64_t *a, const xin *in, bk_buffer **o) {
  int64_t id[BK_MAX_RANK], od[BK_MAX_RANK], map[BK_MAX_RANK];
  pad16(id, a + 2, 2, 1);
  pad16(od, a + 4, 3, 1);
  pad16(map, a + 7, 3, 0);
  return bk_broadcast_to(tl_ctx, in->b[0], id, (int)a[0], od, (int)a[1], map, &o[0]);
}
static bk_status c_badj(const int64_t *a, const xin *in, bk_buffer **o) {
  int64_t id[BK_MAX_RANK], od[BK_MAX_RANK], map[BK_MAX_RANK];
  pad16(id, a + 2, 2, 1);
  pad16(od, a + 4, 3, 1);
  pad16(map, a + 7, 3, 0);
  return bk_broadcast_to_adjoint(tl_ctx, in->b[0], id, (int)a[0], od, (int)a[1], map, &o[0]);
}
/* Validates a broadcast and gives, for every output element, the input
 * element it reads (src, malloc'd). */
static int ref_bcast(const int64_t *a, int64_t *in_len, int64_t *out_len, int64_t **src) {
  int64_t ir = a[0], orank = a[1], id[BK_MAX_RANK], od[BK_MAX_RANK], map[BK_MAX_RANK];
  pad16(id, a + 2, 2, 1);
  pad16(od, a + 4, 3, 1);
  pad16(map, a + 7, 3, 0);
  if (ir < 0 || ir > BK_MAX_RANK || orank < 0 || orank > BK_MAX_RANK) return 0;
  if (!prod_ok(id, ir, in_len) || !prod_ok(od, orank, out_len) || *out_len > REF_MAX_LEN) return 0;
  int reads[BK_MAX_RANK] = {0};
  for (int64_t j = 0; j < orank; j++) {
    if (map[j] < 0 || map[j] > ir) return 0;
    if (map[j] == 0) continue;
    if (reads[map[j] - 1]++) return 0;
    if (id[map[j] - 1] != 1 && id[map[j] - 1] != od[j]) return 0;
  }
  for (int64_t i = 0; i < ir; i++)
    if (!reads[i]) return 0;
  *src = tl_xmalloc((size_t)(*out_len > 0 ? *out_len : 1) * sizeof **src);
  for (int64_t o = 0; o < *out_len; o++) {
    int64_t rest = o, s = 0;
    int64_t coord[BK_MAX_RANK];
    for (int64_t j = orank - 1; j >= 0; j--) {
      coord[j] = rest % od[j];
      rest /= od[j];
    }
    for (int64_t i = 0; i < ir; i++) {
      int64_t c = 0;
      for (int64_t j = 0; j < orank; j++)
        if (map[j] == i + 1 && id[i] != 1) c = coord[j];
      s = s * id[i] + c;
    }
    (*src)[o] = s;
  }
  return 1;
}
static int r_bto(const int64_t *a, const xin *in, xref *r) {
  int64_t il, ol, *src = NULL;
  if (!ref_bcast(a, &il, &ol, &src)) return 0;
  int ok = il == in->len[0];
  if (ok) {
    double *y = ref_alloc(r, 0, ol);
    for (int64_t o = 0; o < ol; o++) y[o] = in->v[0][src[o]];
  }
  free(src);
  return ok;
}
static int r_badj(const int64_t *a, const xin *in, xref *r) {
  int64_t il, ol, *src = NULL;
  if (!ref_bcast(a, &il, &ol, &src)) return 0;
  int ok = ol == in->len[0] && il <= REF_MAX_LEN;
  if (ok) {
    double *y = ref_alloc(r, 0, il);
    for (int64_t o = 0; o < ol; o++) y[src[o]] += in->v[0][o];
  }
  free(src);
  return ok;
}

/* ---- bmm: a = {batch, m, n, p, trans_a, trans_b} -------------------------------------- */

static bk_status c_bmm(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_bmm(tl_ctx, in->b[0], in->b[1], a[0], a[1], a[2], a[3], (int)a[4], (int)a[5], &o[0]);
}
static bk_status c_bmm_s(const int64_t *a, const xin *in, bk_buffer **o) {
  int flag = -1;
  bk_status st = bk_bmm_scaled(tl_ctx, in->b[0], in->b[1], a[0], a[1], a[2], a[3], (int)a[4],
                               (int)a[5], 0.5, &o[0], &flag);
  /* The flag is 0 after any failure and 0 or 1 after a success. */
  if (flag != 0 && (st != BK_OK || flag != 1)) TL_FAIL("bk_bmm_scaled left range_loss = %d", flag);
  return st;
}
static int ref_bmm(const int64_t *a, const xin *in, xref *r, double scale) {
  int64_t b = a[0], m = a[1], n = a[2], p = a[3], bm, bn, la, lb, lc;
  if (!mul_ok(b, m, &bm) || !mul_ok(bm, n, &la) || !mul_ok(b, n, &bn) || !mul_ok(bn, p, &lb) ||
      !mul_ok(bm, p, &lc))
    return 0;
  if (la != in->len[0] || lb != in->len[1] || (a[4] != 0 && a[4] != 1) || (a[5] != 0 && a[5] != 1))
    return 0;
  double *y = ref_alloc(r, 0, lc);
  for (int64_t t = 0; t < b; t++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < p; j++) {
        double s = 0;
        for (int64_t l = 0; l < n; l++) {
          double av = in->v[0][t * m * n + (a[4] ? l * m + i : i * n + l)];
          double bv = in->v[1][t * n * p + (a[5] ? j * n + l : l * p + j)];
          s += av * bv;
        }
        y[(t * m + i) * p + j] = scale * s;
      }
  return 1;
}
static int r_bmm(const int64_t *a, const xin *in, xref *r) { return ref_bmm(a, in, r, 1.0); }
static int r_bmm_s(const int64_t *a, const xin *in, xref *r) { return ref_bmm(a, in, r, 0.5); }

/* ---- FFTs and scans ---------------------------------------------------------------------- */

static bk_status c_rfft(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_rfft(tl_ctx, in->b[0], a[0], a[1], &o[0]);
}
static bk_status c_irfft(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_irfft(tl_ctx, in->b[0], a[0], a[1], &o[0]);
}
static bk_status c_irfft_u(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_irfft_unnormalized(tl_ctx, in->b[0], a[0], a[1], &o[0]);
}
static bk_status c_scan(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_scan_diag(tl_ctx, in->b[0], in->b[1], in->b[2], in->b[3], a[0], a[1], &o[0]);
}
static bk_status c_scan_v(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_scan_diag_var(tl_ctx, in->b[0], in->b[1], in->b[2], in->b[3], a[0], a[1], &o[0]);
}
static bk_status c_scan_b(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_scan_diag_backward(tl_ctx, in->b[0], in->b[1], in->b[2], in->b[3], in->b[4], in->b[5],
                               a[0], a[1], &o[0], &o[1], &o[2], &o[3]);
}
static bk_status c_scan_vb(const int64_t *a, const xin *in, bk_buffer **o) {
  return bk_scan_diag_var_backward(tl_ctx, in->b[0], in->b[1], in->b[2], in->b[3], in->b[4],
                                   in->b[5], a[0], a[1], &o[0], &o[1], &o[2], &o[3]);
}

/* ---- gather and scatter-add: a = {rows, cols, k, indices[4]} ------------------------------ */

static void idx_of(const int64_t *a, uint64_t *idx) {
  for (int i = 0; i < 4; i++) idx[i] = (uint64_t)a[3 + i];
}
static bk_status c_gather(const int64_t *a, const xin *in, bk_buffer **o) {
  uint64_t idx[4];
  idx_of(a, idx);
  return bk_rows_gather(tl_ctx, in->b[0], a[0], a[1], idx, a[2], &o[0]);
}
static bk_status c_scatter(const int64_t *a, const xin *in, bk_buffer **o) {
  uint64_t idx[4];
  idx_of(a, idx);
  return bk_rows_scatter_add(tl_ctx, in->b[0], in->b[1], a[0], a[1], idx, a[2], &o[0]);
}
static int ref_rows(const int64_t *a, int64_t mat_len, int64_t *out_len) {
  int64_t rows = a[0], cols = a[1], k = a[2], ml, kl;
  if (!mul_ok(rows, cols, &ml) || !mul_ok(k, cols, &kl) || ml != mat_len || k > 4) return 0;
  for (int64_t r = 0; r < k; r++)
    if ((uint64_t)a[3 + r] > UINT32_MAX) return 0;
  *out_len = kl;
  return 1;
}
static int r_gather(const int64_t *a, const xin *in, xref *r) {
  int64_t kl;
  if (!ref_rows(a, in->len[0], &kl)) return 0;
  double *y = ref_alloc(r, 0, kl);
  for (int64_t t = 0; t < a[2]; t++)
    for (int64_t j = 0; j < a[1]; j++)
      if ((uint64_t)a[3 + t] < (uint64_t)a[0]) y[t * a[1] + j] = in->v[0][a[3 + t] * a[1] + j];
  return 1;
}
static int r_scatter(const int64_t *a, const xin *in, xref *r) {
  int64_t kl;
  if (!ref_rows(a, in->len[0], &kl) || kl != in->len[1]) return 0;
  double *y = ref_alloc(r, 0, in->len[0]);
  memcpy(y, in->v[0], (size_t)in->len[0] * sizeof *y);
  for (int64_t t = 0; t < a[2]; t++)
    for (int64_t j = 0; j < a[1]; j++)
      if ((uint64_t)a[3 + t] < (uint64_t)a[0]) y[a[3 + t] * a[1] + j] += in->v[1][t * a[1] + j];
  return 1;
}

/* ---- conv ----------------------------------------------------------------------------------
 * a = {input_rank, spatial_rank, input_dims[4], kernel_dims[4], stride[2], pad_before[2],
 *      pad_after[2], dilation[2], groups}; missing trailing entries are 1 (dims, strides,
 * dilations) or 0 (paddings). */
enum { CV_IR, CV_SR, CV_ID = 2, CV_KD = 6, CV_ST = 10, CV_PB = 12, CV_PA = 14, CV_DL = 16, CV_G = 18 };

typedef struct conv_arrays {
  int64_t id[BK_MAX_RANK], kd[BK_MAX_RANK], st[BK_MAX_RANK], pb[BK_MAX_RANK], pa[BK_MAX_RANK],
      dl[BK_MAX_RANK];
} conv_arrays;

static void conv_arrays_of(const int64_t *a, conv_arrays *c) {
  pad16(c->id, a + CV_ID, 4, 1);
  pad16(c->kd, a + CV_KD, 4, 1);
  pad16(c->st, a + CV_ST, 2, 1);
  pad16(c->pb, a + CV_PB, 2, 0);
  pad16(c->pa, a + CV_PA, 2, 0);
  pad16(c->dl, a + CV_DL, 2, 1);
}
static bk_status c_conv(const int64_t *a, const xin *in, bk_buffer **o) {
  conv_arrays c;
  conv_arrays_of(a, &c);
  return bk_conv(tl_ctx, in->b[0], in->b[1], in->b[2], c.id, (int)a[CV_IR], c.kd, (int)a[CV_SR],
                 c.st, c.pb, c.pa, c.dl, a[CV_G], &o[0]);
}
/* The input coordinate o*stride + t*dil - before, or -1 when it falls
 * outside [0, in) (including when the exact value does not fit in int64). */
static int64_t conv_coord(int64_t o, int64_t t, int64_t s, int64_t d, int64_t before, int64_t in) {
  int64_t os, td, sum, c;
  if (__builtin_mul_overflow(o, s, &os) || __builtin_mul_overflow(t, d, &td) ||
      __builtin_add_overflow(os, td, &sum) || __builtin_sub_overflow(sum, before, &c))
    return -1;
  return c >= 0 && c < in ? c : -1;
}
static int r_conv(const int64_t *a, const xin *in, xref *r) {
  conv_arrays c;
  conv_arrays_of(a, &c);
  const int64_t ir = a[CV_IR], sr = a[CV_SR], groups = a[CV_G];
  if (sr < 1 || sr > 3 || ir < sr + 1 || ir > BK_MAX_RANK) return 0;
  int64_t in_len, k_len, n;
  const int64_t ch = ir - sr - 1;
  if (!prod_ok(c.id, ir, &in_len) || !prod_ok(c.kd, sr + 2, &k_len) || !prod_ok(c.id, ch, &n))
    return 0;
  const int64_t c_in = c.id[ch], c_out = c.kd[0];
  if (in_len != in->len[0] || k_len != in->len[1] || c_out != in->len[2]) return 0;
  if (c.kd[1] != c_in || groups <= 0 || c_in % groups || c_out % groups) return 0;
  /* Three spatial axes, leading ones of extent 1. */
  int64_t ext[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1},
          before[3] = {0, 0, 0}, out[3] = {1, 1, 1};
  for (int64_t ax = 0; ax < sr; ax++) {
    const int64_t q = 3 - sr + ax;
    ext[q] = c.id[ch + 1 + ax];
    k[q] = c.kd[2 + ax];
    s[q] = c.st[ax];
    d[q] = c.dl[ax];
    before[q] = c.pb[ax];
    int64_t span, eff, padded;
    if (k[q] <= 0 || s[q] <= 0 || d[q] <= 0 || c.pb[ax] < 0 || c.pa[ax] < 0) return 0;
    if (!mul_ok(k[q] - 1, d[q], &span) || !add_ok(span, 1, &eff) ||
        !add_ok(ext[q], c.pb[ax], &padded) || !add_ok(padded, c.pa[ax], &padded))
      return 0;
    out[q] = padded < eff ? 0 : (padded - eff) / s[q] + 1;
  }
  int64_t out_len;
  const int64_t od[5] = {n, c_out, out[0], out[1], out[2]};
  if (!prod_ok(od, 5, &out_len) || out_len > REF_MAX_LEN) return 0;
  double *y = ref_alloc(r, 0, out_len);
  const int64_t ig = c_in / groups, og = c_out / groups;
  const int64_t iv = ext[0] * ext[1] * ext[2], kv = k[0] * k[1] * k[2];
  for (int64_t b = 0; b < n; b++)
    for (int64_t oc = 0; oc < c_out; oc++)
      for (int64_t o0 = 0; o0 < out[0]; o0++)
        for (int64_t o1 = 0; o1 < out[1]; o1++)
          for (int64_t o2 = 0; o2 < out[2]; o2++) {
            double acc = in->v[2][oc];
            for (int64_t j = 0; j < ig; j++) {
              const int64_t ic = (oc / og) * ig + j;
              for (int64_t t0 = 0; t0 < k[0]; t0++)
                for (int64_t t1 = 0; t1 < k[1]; t1++)
                  for (int64_t t2 = 0; t2 < k[2]; t2++) {
                    const int64_t p0 = conv_coord(o0, t0, s[0], d[0], before[0], ext[0]);
                    const int64_t p1 = conv_coord(o1, t1, s[1], d[1], before[1], ext[1]);
                    const int64_t p2 = conv_coord(o2, t2, s[2], d[2], before[2], ext[2]);
                    if (p0 < 0 || p1 < 0 || p2 < 0) continue;
                    acc += in->v[0][(b * c_in + ic) * iv + (p0 * ext[1] + p1) * ext[2] + p2] *
                           in->v[1][(oc * c_in + ic) * kv + (t0 * k[1] + t1) * k[2] + t2];
                  }
            }
            y[((b * c_out + oc) * out[0] + o0) * out[1] * out[2] + o1 * out[2] + o2] = acc;
          }
  return 1;
}

/* ---- the table --------------------------------------------------------------------------- */

#define I(n, v) {n, K_INT, v}
#define L(n, v) {n, K_I64, v}
#define X(n, v) {n, K_IDX, v}
#define END -1

static const xcase xcases[] = {
    {"bk_softmax", 5, {I("rank", 3), I("axis", 1), L("dims[0]", 2), L("dims[1]", 3), L("dims[2]", 4)},
     {24, END}, 1, c_softmax, r_softmax},
    {"bk_xent_weighted_mean", 2, {L("rows", 4), L("cols", 6)}, {24, 24, END}, 1, c_xent_w, NULL},
    {"bk_xent_teacher", 3, {L("rows", 4), L("cols", 6), I("gradient", 0)}, {24, 24, END}, 1, c_xent_t,
     r_xent_t},
    {"bk_conv", 19,
     {I("input_rank", 4), I("spatial_rank", 2), L("input_dims[0]", 2), L("input_dims[1]", 2),
      L("input_dims[2]", 5), L("input_dims[3]", 4), L("kernel_dims[0]", 4), L("kernel_dims[1]", 2),
      L("kernel_dims[2]", 2), L("kernel_dims[3]", 3), L("stride[0]", 1), L("stride[1]", 2),
      L("pad_before[0]", 1), L("pad_before[1]", 0), L("pad_after[0]", 0), L("pad_after[1]", 2),
      L("dilation[0]", 2), L("dilation[1]", 1), L("groups", 2)},
     {80, 48, 4, END}, 1, c_conv, r_conv},
    {"bk_rows_sum", 2, {L("rows", 4), L("cols", 6)}, {24, END}, 1, c_rows_sum, NULL},
    {"bk_rows_max", 2, {L("rows", 4), L("cols", 6)}, {24, END}, 1, c_rows_max, NULL},
    {"bk_rows_first_max_mask", 2, {L("rows", 4), L("cols", 6)}, {24, END}, 1, c_first_max, NULL},
    {"bk_rows_topk_mask", 3, {L("rows", 4), L("cols", 6), L("k", 2)}, {24, END}, 1, c_topk, r_topk},
    {"bk_rows_masked_softmax", 2, {L("rows", 4), L("cols", 6)}, {24, 24, END}, 1, c_masked, NULL},
    {"bk_vec_concat", 2, {L("n", 5), L("m", 7)}, {5, 7, END}, 1, c_concat, NULL},
    {"bk_vec_slice", 3, {L("n", 9), L("start", 2), L("len", 5)}, {9, END}, 1, c_slice, r_slice},
    {"bk_broadcast_col", 2, {L("rows", 3), L("cols", 5)}, {3, END}, 1, c_bcol, r_bcol},
    {"bk_broadcast_to", 10,
     {I("in_rank", 2), I("out_rank", 3), L("in_dims[0]", 1), L("in_dims[1]", 6), L("out_dims[0]", 3),
      L("out_dims[1]", 4), L("out_dims[2]", 6), L("axis_map[0]", 0), L("axis_map[1]", 1),
      L("axis_map[2]", 2)},
     {6, END}, 1, c_bto, r_bto},
    {"bk_broadcast_to_adjoint", 10,
     {I("in_rank", 2), I("out_rank", 3), L("in_dims[0]", 1), L("in_dims[1]", 6), L("out_dims[0]", 3),
      L("out_dims[1]", 4), L("out_dims[2]", 6), L("axis_map[0]", 0), L("axis_map[1]", 1),
      L("axis_map[2]", 2)},
     {72, END}, 1, c_badj, r_badj},
    {"bk_swap_adjacent", 5, {I("rank", 3), I("depth", 1), L("dims[0]", 2), L("dims[1]", 3), L("dims[2]", 4)},
     {24, END}, 1, c_swap, r_swap},
    {"bk_sum_axis", 5, {I("rank", 3), I("axis", 1), L("dims[0]", 2), L("dims[1]", 3), L("dims[2]", 4)},
     {24, END}, 1, c_sum_axis, r_sum_axis},
    {"bk_layernorm_forward", 2, {L("rows", 4), L("cols", 6)}, {24, 6, 6, END}, 3, c_ln_f, NULL},
    {"bk_layernorm_backward", 2, {L("rows", 4), L("cols", 6)}, {24, 24, 4, 6, END}, 3, c_ln_b, NULL},
    {"bk_bmm", 6,
     {L("batch", 2), L("m", 3), L("n", 4), L("p", 5), I("trans_a", 0), I("trans_b", 0)},
     {24, 40, END}, 1, c_bmm, r_bmm},
    {"bk_bmm_scaled", 6,
     {L("batch", 2), L("m", 3), L("n", 4), L("p", 5), I("trans_a", 0), I("trans_b", 0)},
     {24, 40, END}, 1, c_bmm_s, r_bmm_s},
    {"bk_rfft", 2, {L("batch", 2), L("n", 8)}, {16, END}, 1, c_rfft, NULL},
    {"bk_irfft", 2, {L("batch", 2), L("n", 8)}, {20, END}, 1, c_irfft, NULL},
    {"bk_irfft_unnormalized", 2, {L("batch", 2), L("n", 8)}, {20, END}, 1, c_irfft_u, NULL},
    {"bk_scan_diag", 2, {L("seq_len", 5), L("state", 3)}, {3, 3, 15, 3, END}, 1, c_scan, NULL},
    {"bk_scan_diag_var", 2, {L("seq_len", 5), L("state", 3)}, {15, 15, 15, 3, END}, 1, c_scan_v, NULL},
    {"bk_scan_diag_backward", 2, {L("seq_len", 5), L("state", 3)}, {3, 3, 15, 3, 15, 15}, 4, c_scan_b,
     NULL},
    {"bk_scan_diag_var_backward", 2, {L("seq_len", 5), L("state", 3)}, {15, 15, 15, 3, 15, 15}, 4,
     c_scan_vb, NULL},
    {"bk_rows_gather", 7,
     {L("rows", 5), L("cols", 3), L("k", 4), X("indices[0]", 2), X("indices[1]", 0),
      X("indices[2]", 7), X("indices[3]", 2)},
     {15, END}, 1, c_gather, r_gather},
    {"bk_rows_scatter_add", 7,
     {L("rows", 5), L("cols", 3), L("k", 4), X("indices[0]", 2), X("indices[1]", 0),
      X("indices[2]", 7), X("indices[3]", 2)},
     {15, 12, END}, 1, c_scatter, r_scatter},
};
#define N_XCASES ((int)(sizeof xcases / sizeof xcases[0]))

/* ---- the harness ----------------------------------------------------------------------------- */

/* A value no out-parameter holds after a call: every slot starts with it,
 * so a slot the call did not clear is seen. */
static bk_buffer *const x_stale = (bk_buffer *)(uintptr_t)0x5a5a5a5a5a5a5a50ull;

/* Asserts what a failed call leaves behind: a message naming fn, every
 * out-parameter NULL, no buffer left alive. */
static void x_check_failure(const char *fn, const char *what, bk_status st, bk_buffer **out,
                            int nout, int64_t live0) {
  size_t fl = strlen(fn);
  const char *msg = bk_last_error();
  TL_CHECK(strncmp(msg, fn, fl) == 0 && msg[fl] == ':', "%s: status %d with message \"%s\"", what,
           (int)st, msg);
  for (int i = 0; i < nout; i++)
    TL_CHECK(out[i] == NULL, "%s: out-parameter %d not NULL after a failure", what, i);
  TL_CHECK(bk__live_buffers() == live0, "%s: %" PRId64 " buffers leaked", what,
           bk__live_buffers() - live0);
}

/* One call with argument vector a; `base` says whether it is the case's
 * valid base call, which must succeed. */
static void x_run(const xcase *xc, bk_dtype dt, const xin *in, const int64_t *a, int base,
                  const char *what) {
  bk_buffer *out[X_MAX_OUT];
  for (int i = 0; i < X_MAX_OUT; i++) out[i] = x_stale;
  xref r = {{NULL}, {0}};
  int valid = xc->ref ? xc->ref(a, in, &r) : base;
  int64_t live0 = bk__live_buffers();
  bk_status st = xc->call(a, in, out);
  ext_calls += !base;
  if (st != BK_OK) {
    TL_CHECK(!valid, "%s (%s): a valid call failed: %s", what, tl_dtname(dt), bk_last_error());
    x_check_failure(xc->fn, what, st, out, xc->nout, live0);
  } else {
    TL_CHECK(valid, "%s (%s): an invalid call returned BK_OK", what, tl_dtname(dt));
    ext_valid += !base;
    for (int i = 0; i < xc->nout; i++) {
      if (out[i] == x_stale) {
        TL_FAIL("%s: out-parameter %d not written", what, i);
        out[i] = NULL;
      }
      if (r.v[i]) {
        tl_round(dt, r.v[i], r.len[i]);
        TL_BUF_CLOSE(out[i], r.v[i], r.len[i], tl_tol_contract(dt, 64),
                     tl_absmax(r.v[i], r.len[i], 1.0));
      }
      bk_buffer_release(out[i]);
    }
    TL_CHECK(bk__live_buffers() == live0, "%s: %" PRId64 " buffers left alive", what,
             bk__live_buffers() - live0);
  }
  for (int i = 0; i < X_MAX_OUT; i++) free(r.v[i]);
}

static void x_inputs(const int64_t *len, bk_dtype dt, xin *in) {
  memset(in, 0, sizeof *in);
  for (int j = 0; j < X_MAX_IN && len[j] >= 0; j++) {
    in->len[j] = len[j];
    in->v[j] = tl_xmalloc((size_t)(len[j] > 0 ? len[j] : 1) * sizeof(double));
    tl_fill_uniform(in->v[j], len[j], -1.0, 1.0);
    tl_round(dt, in->v[j], len[j]);
    in->b[j] = tl_buf(dt, in->v[j], len[j]);
  }
}
static void x_free_inputs(xin *in) {
  for (int j = 0; j < X_MAX_IN; j++) {
    bk_buffer_release(in->b[j]);
    free(in->v[j]);
  }
}

static void t_table(void) {
  for (int c = 0; c < N_XCASES; c++) {
    const xcase *xc = &xcases[c];
    tl_case = xc->fn;
    for (int dti = 0; dti < TL_DTYPES; dti++) {
      bk_dtype dt = tl_dtypes[dti];
      xin in;
      x_inputs(xc->in_len, dt, &in);
      int64_t a[X_MAX_ARGS];
      for (int i = 0; i < xc->nargs; i++) a[i] = xc->arg[i].base;
      x_run(xc, dt, &in, a, 1, "base call");
      for (int i = 0; i < xc->nargs; i++) {
        const int64_t *ext = xc->arg[i].kind == K_INT ? ext_int : xc->arg[i].kind == K_I64 ? ext_i64 : ext_idx;
        int n = xc->arg[i].kind == K_INT ? N_INT : xc->arg[i].kind == K_I64 ? N_I64 : N_IDX;
        for (int e = 0; e < n; e++) {
          char what[96];
          snprintf(what, sizeof what, "%s = %" PRId64, xc->arg[i].name, ext[e]);
          a[i] = ext[e];
          x_run(xc, dt, &in, a, 0, what);
        }
        a[i] = xc->arg[i].base;
      }
      x_free_inputs(&in);
    }
  }
}

/* Every combination of kernel extent 1 and 2 with extreme stride,
 * pad_before, pad_after and dilation, on a 1-D input (1, 1, 4). */
static void t_conv_combinations(void) {
  const xcase *xc = NULL;
  for (int c = 0; c < N_XCASES; c++)
    if (strcmp(xcases[c].fn, "bk_conv") == 0) xc = &xcases[c];
  for (int dti = 0; dti < TL_DTYPES; dti++) {
    bk_dtype dt = tl_dtypes[dti];
    for (int64_t k = 1; k <= 2; k++) {
      xin in;
      x_inputs((const int64_t[]){4, k, 1, END}, dt, &in);
      int64_t a[X_MAX_ARGS] = {3, 1, 1, 1, 4, 1, 1, 1, k, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1};
      for (int s = 0; s < N_I64; s++)
        for (int pb = 0; pb < N_I64; pb++)
          for (int pa = 0; pa < N_I64; pa++)
            for (int d = 0; d < N_I64; d++) {
              a[CV_ST] = ext_i64[s];
              a[CV_PB] = ext_i64[pb];
              a[CV_PA] = ext_i64[pa];
              a[CV_DL] = ext_i64[d];
              char what[160];
              snprintf(what, sizeof what,
                       "k = %" PRId64 ", stride %" PRId64 ", pad_before %" PRId64
                       ", pad_after %" PRId64 ", dilation %" PRId64,
                       k, a[CV_ST], a[CV_PB], a[CV_PA], a[CV_DL]);
              x_run(xc, dt, &in, a, 0, what);
            }
      x_free_inputs(&in);
    }
  }
}

/* ---- regressions -------------------------------------------------------------------------------- */

/* bk_swap_adjacent with depth = INT_MAX once formed depth + 1 in int and
 * read far past dims. */
static void t_swap_depth_int_max(void) {
  bk_buffer *x = tl_buf(BK_F32, (const double[24]){0}, 24), *o = x_stale;
  TL_REJECT(bk_swap_adjacent(tl_ctx, x, (const int64_t[]){2, 3, 4}, 3, INT_MAX, &o),
            BK_ERR_INVALID_ARGUMENT, "depth");
  TL_CHECK(o == NULL, "out not cleared");
  bk_buffer_release(x);
}

/* A one-tap kernel with dilation INT64_MAX once overflowed the tap range of
 * the CPU convolution and read before the input; with pad_before near
 * INT64_MAX and stride 2^62 it crashed. All three calls are valid. */
static void t_conv_tap_range_regressions(void) {
  for (int dti = 0; dti < TL_DTYPES; dti++) {
    bk_dtype dt = tl_dtypes[dti];
    bk_buffer *x = tl_buf(dt, (const double[]){1, 2, 3, 4}, 4);
    bk_buffer *w = tl_buf(dt, (const double[]){1}, 1), *y = NULL;
    const int64_t in_dims[3] = {1, 1, 4}, k_dims[3] = {1, 1, 1}, zero[1] = {0};
    if (TL_OK(bk_conv(tl_ctx, x, w, NULL, in_dims, 3, k_dims, 1, (const int64_t[]){1},
                      (const int64_t[]){2}, zero, (const int64_t[]){INT64_MAX}, 1, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((const double[]){0, 0, 1, 2, 3, 4}), 6);
    bk_buffer_release(y);
    y = NULL;
    /* padded = INT64_MAX - 5, out = (INT64_MAX - 6) / 2^62 + 1 = 2; output 1
     * reads input coordinate 2^62 - (INT64_MAX - 9), outside: both zero. */
    if (TL_OK(bk_conv(tl_ctx, x, w, NULL, in_dims, 3, k_dims, 1, (const int64_t[]){P62},
                      (const int64_t[]){INT64_MAX - 9}, zero, (const int64_t[]){11}, 1, &y)) ==
        BK_OK)
      TL_BUF_EXACT(y, ((const double[]){0, 0}), 2);
    bk_buffer_release(y);
    y = NULL;
    /* Two taps 2^62 apart with pad_before 2^62 + 2: the first in-range tap
     * of output 0 is ceil((2^62 + 2) / 2^62), which the tap range once
     * formed as 2^62 + 2 + 2^62 - 1, past INT64_MAX. Only tap 1 lands in the
     * input, at coordinate o - 2. */
    bk_buffer *w2 = tl_buf(dt, (const double[]){5, 7}, 2);
    if (TL_OK(bk_conv(tl_ctx, x, w2, NULL, in_dims, 3, (const int64_t[]){1, 1, 2}, 1,
                      (const int64_t[]){1}, (const int64_t[]){P62 + 2}, zero,
                      (const int64_t[]){P62}, 1, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((const double[]){0, 0, 7, 14, 21, 28}), 6);
    bk_buffer_release(y);
    bk_buffer_release(w2);
    bk_buffer_release(x);
    bk_buffer_release(w);
  }
}

/* ---- buffers, contexts, DLPack ---------------------------------------------------------------- */

static void t_buffers(void) {
  const double v[4] = {1, 2, 3, 4};
  for (int e = 0; e < N_I64; e++) {
    const int64_t n = ext_i64[e];
    int64_t live0 = bk__live_buffers();
    bk_buffer *b = x_stale;
    bk_status st = bk_buffer_zeros(tl_ctx, BK_F64, n, &b);
    ext_calls++;
    if (n == 0 || n == 1) {
      if (TL_OK(st) == BK_OK) TL_BUF_EXACT(b, ((const double[]){0}), n);
      bk_buffer_release(b);
    } else {
      x_check_failure("bk_buffer_zeros", "length", st, &b, 1, live0);
    }
    b = x_stale;
    st = bk_buffer_from_host(tl_ctx, BK_F64, v, n, &b);
    ext_calls++;
    if (n == 0 || n == 1) {
      if (TL_OK(st) == BK_OK) TL_BUF_EXACT(b, v, n);
      bk_buffer_release(b);
    } else {
      x_check_failure("bk_buffer_from_host", "length", st, &b, 1, live0);
    }
    bk_buffer *four = tl_buf(BK_F64, v, 4);
    double back[4];
    st = bk_buffer_to_host(tl_ctx, four, back, n);
    ext_calls++;
    TL_REJECT(st, BK_ERR_INVALID_ARGUMENT, "bk_buffer_to_host");
    bk_buffer_release(four);
    TL_CHECK(bk__live_buffers() == live0, "length %" PRId64 ": buffers leaked", n);
  }
}

static void t_contexts(void) {
  for (int kind = 0; kind < 2; kind++) {
    for (int e = 0; e < N_INT; e++) {
      bk_device dev = {kind ? BK_DEVICE_CUDA : BK_DEVICE_CPU, (int32_t)ext_int[e]};
      bk_context *c = (bk_context *)x_stale;
      bk_status st = bk_context_create(dev, &c);
      ext_calls++;
      if (st == BK_OK) {
        TL_CHECK(ext_int[e] >= 0 && (kind || ext_int[e] == 0) &&
                     (!kind || ext_int[e] < bk_cuda_device_count()),
                 "device (%d, %" PRId64 ") accepted", (int)dev.kind, ext_int[e]);
        bk_context_destroy(c);
      } else {
        TL_CHECK(c == NULL && strncmp(bk_last_error(), "bk_context_create:", 18) == 0,
                 "device (%d, %" PRId64 "): %s", (int)dev.kind, ext_int[e], bk_last_error());
      }
    }
  }
  /* The device kind itself, as the int an enum holds. */
  for (int e = 0; e < N_INT; e++) {
    if (ext_int[e] == BK_DEVICE_CPU) continue;
    bk_context *c = (bk_context *)x_stale;
    TL_REJECT(bk_context_create((bk_device){(bk_device_kind)ext_int[e], 0}, &c),
              BK_ERR_INVALID_ARGUMENT, "bk_context_create");
    TL_CHECK(c == NULL, "kind %" PRId64 ": out not cleared", ext_int[e]);
    ext_calls++;
  }
}

static int dl_deleted;
static void dl_deleter(DLManagedTensor *t) {
  (void)t;
  dl_deleted++;
}

/* bk_buffer_from_dlpack over a host array of 8 doubles with one integer
 * field of the tensor set to an extreme: ndim, shape[0], strides[0],
 * byte_offset, device_id. Success is expected exactly where the tensor
 * describes elements inside the array. */
static void t_dlpack(void) {
  double data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  for (int field = 0; field < 5; field++) {
    const int64_t *ext = field == 0 || field == 4 ? ext_int : ext_i64;
    int n = field == 0 || field == 4 ? N_INT : N_I64;
    for (int e = 0; e < n; e++) {
      int64_t shape[2] = {2, 4}, strides[2] = {4, 1};
      DLManagedTensor t;
      memset(&t, 0, sizeof t);
      t.dl_tensor.data = data;
      t.dl_tensor.device.device_type = kDLCPU;
      t.dl_tensor.ndim = 2;
      t.dl_tensor.dtype.code = kDLFloat;
      t.dl_tensor.dtype.bits = 64;
      t.dl_tensor.dtype.lanes = 1;
      t.dl_tensor.shape = shape;
      t.dl_tensor.strides = strides;
      t.deleter = dl_deleter;
      int64_t v = ext[e], expect_len = -1, first = 0;
      switch (field) {
        case 0:
          t.dl_tensor.ndim = (int32_t)v;
          /* ndim 0 is one element; ndim 1 keeps strides[0] = 4 for an
           * extent of 2, which is not row-major. */
          if (v == 0) expect_len = 1;
          break;
        case 1:
          shape[0] = v;
          if (v == 0 || v == 1) expect_len = 4 * v;
          break;
        case 2:
          /* The stride of an axis of extent 2 must be the row-major one. */
          strides[0] = v;
          break;
        case 3:
          t.dl_tensor.byte_offset = (uint64_t)v;
          /* The library trusts an in-range offset (it cannot see the
           * array's end), so only offsets that keep the view in the array
           * are tried as successes; the others must not wrap. */
          if (v == 0) expect_len = 8;
          if (v > 0 && v < 8) continue;
          break;
        case 4:
          t.dl_tensor.device.device_id = (int32_t)v;
          /* A CPU tensor's device_id is not read. */
          expect_len = 8;
          break;
      }
      if (field == 3 && v != 0) {
        /* Wrapping offsets on a CPU tensor: only those that wrap the
         * address space can be detected. */
        uintptr_t end = (uintptr_t)data + (uintptr_t)v;
        if (end >= (uintptr_t)data) continue;
      }
      dl_deleted = 0;
      int64_t live0 = bk__live_buffers();
      bk_buffer *b = x_stale;
      bk_status st = bk_buffer_from_dlpack(NULL, &t, &b);
      ext_calls++;
      if (expect_len >= 0) {
        if (TL_OK(st) == BK_OK) TL_BUF_EXACT(b, data + first, expect_len);
        bk_buffer_release(b);
        TL_CHECK(dl_deleted == 1, "field %d = %" PRId64 ": deleter ran %d times", field, v,
                 dl_deleted);
      } else {
        x_check_failure("bk_buffer_from_dlpack", "tensor", st, &b, 1, live0);
        TL_CHECK(dl_deleted == 0, "field %d = %" PRId64 ": deleter ran on failure", field, v);
      }
    }
  }
  /* A CUDA tensor with a negative device_id names no device. */
  int64_t shape[1] = {1};
  DLManagedTensor t;
  memset(&t, 0, sizeof t);
  t.dl_tensor.data = data;
  t.dl_tensor.device.device_type = kDLCUDA;
  t.dl_tensor.device.device_id = -1;
  t.dl_tensor.ndim = 1;
  t.dl_tensor.dtype.code = kDLFloat;
  t.dl_tensor.dtype.bits = 64;
  t.dl_tensor.dtype.lanes = 1;
  t.dl_tensor.shape = shape;
  t.deleter = dl_deleter;
  bk_buffer *b = x_stale;
  bk_status st = bk_buffer_from_dlpack(NULL, &t, &b);
  ext_calls++;
  TL_CHECK(st == BK_ERR_INVALID_ARGUMENT || st == BK_ERR_UNSUPPORTED, "device_id -1: %s",
           bk_last_error());
  TL_CHECK(b == NULL, "device_id -1: out not cleared");
}

int main(void) {
  tl_init();
  tl_seed(14);
  TL_RUN(t_swap_depth_int_max);
  TL_RUN(t_conv_tap_range_regressions);
  TL_RUN(t_table);
  TL_RUN(t_conv_combinations);
  TL_RUN(t_buffers);
  TL_RUN(t_contexts);
  TL_RUN(t_dlpack);
  printf("%" PRId64 " extreme-argument calls, %" PRId64 " of the table's valid and checked against "
         "the reference\n",
         ext_calls, ext_valid);
  return tl_finish();
}
