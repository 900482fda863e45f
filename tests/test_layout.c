/*
 * test_layout.c — bk_broadcast_col, bk_broadcast_to, bk_broadcast_to_adjoint,
 * bk_swap_adjacent and bk_sum_axis.
 */
#include "testlib.h"

#include "core/internal.h"

/* start, start+1, ... as doubles (malloc'd). */
static double *iota(int64_t n, double start) {
  double *v = tl_xmalloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = start + (double)i;
  return v;
}

static double *filled(int64_t n, double value) {
  double *v = tl_xmalloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = value;
  return v;
}

static int64_t product(const int64_t *dims, int rank) {
  int64_t p = 1;
  for (int i = 0; i < rank; i++) p *= dims[i];
  return p;
}

/* ---- bk_broadcast_col ---------------------------------------------------------- */

static void bcol_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double v[] = {1, -2.5, NAN};
    bk_buffer *bv = tl_buf(dt, v, 3), *e = tl_buf(dt, NULL, 0), *y = NULL;
    if (TL_OK(bk_broadcast_col(tl_ctx, bv, 3, 2, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 1, -2.5, -2.5, NAN, NAN}), 6);
    bk_buffer_release(y);
    if (TL_OK(bk_broadcast_col(tl_ctx, bv, 3, 1, &y)) == BK_OK) TL_BUF_EXACT(y, v, 3);
    bk_buffer_release(y);
    /* cols == 0 or rows == 0: an empty result. */
    if (TL_OK(bk_broadcast_col(tl_ctx, bv, 3, 0, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    if (TL_OK(bk_broadcast_col(tl_ctx, e, 0, 5, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    TL_UNCHANGED(bv, v, 3);
    bk_buffer_release(bv);
    bk_buffer_release(e);
  }
}

static void bcol_random(void) {
  static const int64_t shapes[][2] = {{1, 1}, {5, 7}, {1000, 3}, {3, 40000}, {300, 300}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int64_t rows = shapes[s][0], cols = shapes[s][1];
      double *v = tl_xmalloc((size_t)rows * sizeof *v);
      double *ref = tl_xmalloc((size_t)(rows * cols) * sizeof *ref);
      tl_seed(400 + s);
      tl_fill_randn(v, rows);
      tl_round(dt, v, rows);
      for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) ref[i * cols + j] = v[i];
      bk_buffer *bv = tl_buf(dt, v, rows), *y = NULL, *y2 = NULL;
      if (TL_OK(bk_broadcast_col(tl_ctx, bv, rows, cols, &y)) == BK_OK) {
        TL_BUF_EXACT(y, ref, rows * cols);
        if (TL_OK(bk_broadcast_col(tl_ctx, bv, rows, cols, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "broadcast_col is not deterministic");
      }
      TL_UNCHANGED(bv, v, rows);
      bk_buffer_release(y);
      bk_buffer_release(y2);
      bk_buffer_release(bv);
      free(v);
      free(ref);
    }
  }
}

static void bcol_errors(void) {
  double v[3] = {1, 2, 3};
  bk_buffer *b = tl_buf(BK_F32, v, 3), *y = (bk_buffer *)&y;
  TL_REJECT(bk_broadcast_col(tl_ctx, b, 3, 2, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_broadcast_col(tl_ctx, NULL, 3, 2, &y), BK_ERR_NULL, "vec is NULL");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_broadcast_col(tl_ctx, b, -3, 2, &y), BK_ERR_INVALID_ARGUMENT, "rows = -3");
  TL_REJECT(bk_broadcast_col(tl_ctx, b, 3, -2, &y), BK_ERR_INVALID_ARGUMENT, "cols = -2");
  TL_REJECT(bk_broadcast_col(tl_ctx, b, 3, INT64_MAX, &y), BK_ERR_INVALID_ARGUMENT, "overflow");
  TL_REJECT(bk_broadcast_col(tl_ctx, b, 4, 2, &y), BK_ERR_INVALID_ARGUMENT, "vec has length 3");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) TL_REJECT(bk_broadcast_col(other, b, 3, 2, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
  bk_buffer_release(b);
}

/* ---- broadcast geometry and host references ---------------------------------------- */

typedef struct geo {
  int in_rank, out_rank;
  int64_t in_dims[BK_MAX_RANK], out_dims[BK_MAX_RANK], map[BK_MAX_RANK];
} geo;

/* The input offset that output element o reads, straight from the
 * contract's definition of axis_map. */
static int64_t bcast_src(const geo *g, int64_t o) {
  int64_t coord[BK_MAX_RANK];
  for (int j = g->out_rank - 1; j >= 0; j--) {
    coord[j] = o % g->out_dims[j];
    o /= g->out_dims[j];
  }
  int64_t off = 0;
  for (int a = 0; a < g->in_rank; a++) {
    int64_t c = 0;
    for (int j = 0; j < g->out_rank; j++)
      if (g->map[j] == a + 1 && g->in_dims[a] != 1) c = coord[j];
    off = off * g->in_dims[a] + c;
  }
  return off;
}

static void bcast_ref(const geo *g, const double *x, double *y) {
  int64_t n = product(g->out_dims, g->out_rank);
  for (int64_t o = 0; o < n; o++) y[o] = x[bcast_src(g, o)];
}

/* The literal adjoint: din[src(o)] += dout[o] in row-major order of o, in
 * double. mag receives the per-element sums of |dout|. */
static void adjoint_ref(const geo *g, const double *dout, double *din, double *mag) {
  int64_t n = product(g->out_dims, g->out_rank), m = product(g->in_dims, g->in_rank);
  for (int64_t i = 0; i < m; i++) din[i] = mag[i] = 0;
  for (int64_t o = 0; o < n; o++) {
    int64_t i = bcast_src(g, o);
    din[i] += dout[o];
    mag[i] += fabs(dout[o]);
  }
}

/* A random valid geometry with at most max_rank output axes and at most
 * max_elems output elements: input axes are read by a random subset of the
 * output axes in a random order, and some input extents are 1. */
static void random_geo(geo *g, int max_rank, int64_t max_elems) {
  for (;;) {
    g->out_rank = (int)(tl_next() % (uint64_t)(max_rank + 1));
    g->in_rank = (int)(tl_next() % (uint64_t)(g->out_rank + 1));
    int pos[BK_MAX_RANK], axis[BK_MAX_RANK];
    for (int j = 0; j < g->out_rank; j++) pos[j] = axis[j] = j;
    for (int j = g->out_rank - 1; j > 0; j--) {
      int k = (int)(tl_next() % (uint64_t)(j + 1)), t = pos[j];
      pos[j] = pos[k];
      pos[k] = t;
    }
    for (int a = g->in_rank - 1; a > 0; a--) {
      int k = (int)(tl_next() % (uint64_t)(a + 1)), t = axis[a];
      axis[a] = axis[k];
      axis[k] = t;
    }
    for (int j = 0; j < g->out_rank; j++) {
      g->out_dims[j] = 1 + (int64_t)(tl_next() % 6);
      g->map[j] = 0;
    }
    /* Output axis pos[i] reads input axis axis[i], for i < in_rank. */
    for (int i = 0; i < g->in_rank; i++) {
      int j = pos[i], a = axis[i];
      g->map[j] = a + 1;
      g->in_dims[a] = tl_next() % 3 == 0 ? 1 : g->out_dims[j];
    }
    if (product(g->out_dims, g->out_rank) <= max_elems) return;
  }
}

/* Runs bk_broadcast_to and its adjoint on one geometry and checks both
 * against the references, the dot-product identity
 * <broadcast_to(x), y> == <x, adjoint(y)>, determinism and unchanged inputs. */
static void check_geo(bk_dtype dt, const geo *g, uint64_t seed) {
  int64_t m = product(g->in_dims, g->in_rank), n = product(g->out_dims, g->out_rank);
  double *x = tl_xmalloc((size_t)m * sizeof *x), *yv = tl_xmalloc((size_t)n * sizeof *yv);
  double *ref = tl_xmalloc((size_t)n * sizeof *ref), *dref = tl_xmalloc((size_t)m * sizeof *dref);
  double *mag = tl_xmalloc((size_t)m * sizeof *mag);
  tl_seed(seed);
  tl_fill_randn(x, m);
  tl_fill_randn(yv, n);
  tl_round(dt, x, m);
  tl_round(dt, yv, n);
  bcast_ref(g, x, ref);
  adjoint_ref(g, yv, dref, mag);
  bk_buffer *bx = tl_buf(dt, x, m), *by = tl_buf(dt, yv, n);
  bk_buffer *f = NULL, *f2 = NULL, *a = NULL, *a2 = NULL;
  if (TL_OK(bk_broadcast_to(tl_ctx, bx, g->in_dims, g->in_rank, g->out_dims, g->out_rank, g->map,
                            &f)) == BK_OK) {
    TL_BUF_EXACT(f, ref, n);
    if (TL_OK(bk_broadcast_to(tl_ctx, bx, g->in_dims, g->in_rank, g->out_dims, g->out_rank,
                              g->map, &f2)) == BK_OK)
      TL_CHECK(tl_same_bits(f, f2), "broadcast_to is not deterministic");
  }
  if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, by, g->in_dims, g->in_rank, g->out_dims, g->out_rank,
                                    g->map, &a)) == BK_OK) {
    TL_BUF_CLOSE(a, dref, m, tl_tol_red(dt), tl_absmax(mag, m, 1));
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, by, g->in_dims, g->in_rank, g->out_dims,
                                      g->out_rank, g->map, &a2)) == BK_OK)
      TL_CHECK(tl_same_bits(a, a2), "broadcast_to_adjoint is not deterministic");
  }
  if (f && a) {
    double *fv = tl_read(f), *av = tl_read(a);
    double lhs = 0, rhs = 0, scale = 0;
    for (int64_t o = 0; o < n; o++) {
      lhs += fv[o] * yv[o];
      scale += fabs(fv[o] * yv[o]);
    }
    for (int64_t i = 0; i < m; i++) rhs += x[i] * av[i];
    TL_CHECK(fabs(lhs - rhs) <= tl_tol_red(dt) * (scale > 1 ? scale : 1),
             "dot-product identity: <bcast(x), y> = %.17g but <x, adjoint(y)> = %.17g", lhs, rhs);
    free(fv);
    free(av);
  }
  TL_UNCHANGED(bx, x, m);
  TL_UNCHANGED(by, yv, n);
  bk_buffer_release(f);
  bk_buffer_release(f2);
  bk_buffer_release(a);
  bk_buffer_release(a2);
  bk_buffer_release(bx);
  bk_buffer_release(by);
  free(x);
  free(yv);
  free(ref);
  free(dref);
  free(mag);
}

/* ---- bk_broadcast_to and bk_broadcast_to_adjoint ----------------------------------------- */

static void bto_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    /* The contract's example: x = 0..11, in [2,1,3,2], out [2,4,3,2]. */
    const int64_t in_dims[] = {2, 1, 3, 2}, out_dims[] = {2, 4, 3, 2}, map[] = {1, 2, 3, 4};
    double *x = iota(12, 0), ref[48];
    for (int b = 0; b < 2; b++)
      for (int r = 0; r < 4; r++)
        for (int t = 0; t < 6; t++) ref[b * 24 + r * 6 + t] = (double)(b * 6 + t);
    bk_buffer *bx = tl_buf(dt, x, 12), *y = NULL;
    if (TL_OK(bk_broadcast_to(tl_ctx, bx, in_dims, 4, out_dims, 4, map, &y)) == BK_OK)
      TL_BUF_EXACT(y, ref, 48);
    bk_buffer_release(y);
    TL_UNCHANGED(bx, x, 12);
    /* Its adjoint: 48 ones give 12 values of 4. */
    double *ones = filled(48, 1), fours[12];
    for (int i = 0; i < 12; i++) fours[i] = 4;
    bk_buffer *bo = tl_buf(dt, ones, 48);
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, bo, in_dims, 4, out_dims, 4, map, &y)) == BK_OK)
      TL_BUF_EXACT(y, fours, 12);
    bk_buffer_release(y);
    TL_UNCHANGED(bo, ones, 48);
    bk_buffer_release(bo);
    free(ones);

    /* Rank 0 to rank 0: a copy of the one element, both ways. */
    bk_buffer *s = tl_buf(dt, (double[]){-7.5}, 1);
    if (TL_OK(bk_broadcast_to(tl_ctx, s, NULL, 0, NULL, 0, NULL, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){-7.5}), 1);
    bk_buffer_release(y);
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, s, NULL, 0, NULL, 0, NULL, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){-7.5}), 1);
    bk_buffer_release(y);
    /* A scalar to (2,3) through two inserted axes; the adjoint sums all six. */
    if (TL_OK(bk_broadcast_to(tl_ctx, s, NULL, 0, (int64_t[]){2, 3}, 2, (int64_t[]){0, 0}, &y)) ==
        BK_OK)
      TL_BUF_EXACT(y, ((double[]){-7.5, -7.5, -7.5, -7.5, -7.5, -7.5}), 6);
    bk_buffer_release(y);
    bk_buffer *six = tl_buf(dt, (double[]){1, 2, 3, 4, 5, 6}, 6);
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, six, NULL, 0, (int64_t[]){2, 3}, 2,
                                      (int64_t[]){0, 0}, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){21}), 1);
    bk_buffer_release(y);

    /* A permutation: in (2,3) read as out (3,2) with map [2,1] is the
     * transpose, and its adjoint transposes back. */
    if (TL_OK(bk_broadcast_to(tl_ctx, six, (int64_t[]){2, 3}, 2, (int64_t[]){3, 2}, 2,
                              (int64_t[]){2, 1}, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 4, 2, 5, 3, 6}), 6);
    bk_buffer_release(y);
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, six, (int64_t[]){2, 3}, 2, (int64_t[]){3, 2}, 2,
                                      (int64_t[]){2, 1}, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 3, 5, 2, 4, 6}), 6);
    bk_buffer_release(y);

    /* Permuted with a broadcast and an inserted axis: in (2,1,3) to
     * out (3,2,2,2) with map [3,0,2,1]: out[i,k,j,a] = x[a,0,i]. */
    {
      const int64_t id[] = {2, 1, 3}, od[] = {3, 2, 2, 2}, mp[] = {3, 0, 2, 1};
      double r24[24];
      for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++)
          for (int j = 0; j < 2; j++)
            for (int a = 0; a < 2; a++) r24[((i * 2 + k) * 2 + j) * 2 + a] = 1 + a * 3 + i;
      if (TL_OK(bk_broadcast_to(tl_ctx, six, id, 3, od, 4, mp, &y)) == BK_OK)
        TL_BUF_EXACT(y, r24, 24);
      bk_buffer_release(y);
      /* The adjoint of 24 ones: every input element is read 4 times. */
      double *o24 = filled(24, 1);
      bk_buffer *b24 = tl_buf(dt, o24, 24);
      if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, b24, id, 3, od, 4, mp, &y)) == BK_OK)
        TL_BUF_EXACT(y, ((double[]){4, 4, 4, 4, 4, 4}), 6);
      bk_buffer_release(y);
      bk_buffer_release(b24);
      free(o24);
    }

    /* An identity map (a plain copy) and a broadcast-free reshape-like map
     * with extent-1 axes inserted. */
    if (TL_OK(bk_broadcast_to(tl_ctx, six, (int64_t[]){2, 3}, 2, (int64_t[]){1, 2, 1, 3}, 4,
                              (int64_t[]){0, 1, 0, 2}, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 2, 3, 4, 5, 6}), 6);
    bk_buffer_release(y);
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, six, (int64_t[]){2, 3}, 2,
                                      (int64_t[]){1, 2, 1, 3}, 4, (int64_t[]){0, 1, 0, 2}, &y)) ==
        BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 2, 3, 4, 5, 6}), 6);
    bk_buffer_release(y);

    bk_buffer_release(six);
    bk_buffer_release(s);
    bk_buffer_release(bx);
    free(x);
  }
}

static void bto_empty(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    bk_buffer *e = tl_buf(dt, NULL, 0), *three = tl_buf(dt, (double[]){1, 2, 3}, 3);
    bk_buffer *one = tl_buf(dt, (double[]){5}, 1), *y = NULL;
    /* An empty input axis gives an empty output; its adjoint is empty too. */
    if (TL_OK(bk_broadcast_to(tl_ctx, e, (int64_t[]){0, 3}, 2, (int64_t[]){0, 3}, 2,
                              (int64_t[]){1, 2}, &y)) == BK_OK)
      TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, e, (int64_t[]){0, 3}, 2, (int64_t[]){0, 3}, 2,
                                      (int64_t[]){1, 2}, &y)) == BK_OK)
      TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    /* An inserted axis of extent 0: empty output from a non-empty input, and
     * an adjoint of input-shaped zeros. */
    if (TL_OK(bk_broadcast_to(tl_ctx, three, (int64_t[]){3}, 1, (int64_t[]){0, 3}, 2,
                              (int64_t[]){0, 1}, &y)) == BK_OK)
      TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, e, (int64_t[]){3}, 1, (int64_t[]){0, 3}, 2,
                                      (int64_t[]){0, 1}, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){0, 0, 0}), 3);
    bk_buffer_release(y);
    /* An input axis of extent 1 read by an output axis of extent 0. */
    if (TL_OK(bk_broadcast_to(tl_ctx, one, (int64_t[]){1}, 1, (int64_t[]){0}, 1, (int64_t[]){1},
                              &y)) == BK_OK)
      TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, e, (int64_t[]){1}, 1, (int64_t[]){0}, 1,
                                      (int64_t[]){1}, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){0}), 1);
    bk_buffer_release(y);
    bk_buffer_release(e);
    bk_buffer_release(three);
    bk_buffer_release(one);
  }
}

/* The adjoint folds each input element's terms in row-major order of the
 * output. In float64, big + 1 == big for big = 2^60, so the terms
 * [big, 1, -big, 1] fold to exactly 1 in that order and to 0 in reverse or
 * pairwise order. */
static void bto_adjoint_order(void) {
  const double big = 1152921504606846976.0; /* 2^60 */
  /* in (2) read by the inner output axis of out (4,2): column sums. */
  {
    const double dout[] = {big, 1, 1, big, -big, 1, 1, -big};
    bk_buffer *b = tl_buf(BK_F64, dout, 8), *y = NULL;
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, b, (int64_t[]){2}, 1, (int64_t[]){4, 2}, 2,
                                      (int64_t[]){0, 1}, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 0}), 2);
    bk_buffer_release(y);
    bk_buffer_release(b);
  }
  /* in (2) read by the outer output axis of out (2,4): row sums. */
  {
    const double dout[] = {big, 1, -big, 1, 1, 1, big, -big};
    bk_buffer *b = tl_buf(BK_F64, dout, 8), *y = NULL;
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, b, (int64_t[]){2}, 1, (int64_t[]){2, 4}, 2,
                                      (int64_t[]){1, 0}, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 0}), 2);
    bk_buffer_release(y);
    bk_buffer_release(b);
  }
  /* in (2) read by the middle axis of out (2,2,2): each input element's
   * terms are interleaved with the other's; their order is (i, j)
   * lexicographic: dout[0,k,0], dout[0,k,1], dout[1,k,0], dout[1,k,1]. */
  {
    const double dout[] = {big, 1, 1, 1, -big, 1, 1, 1};
    bk_buffer *b = tl_buf(BK_F64, dout, 8), *y = NULL;
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, b, (int64_t[]){2}, 1, (int64_t[]){2, 2, 2}, 3,
                                      (int64_t[]){0, 1, 0}, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 4}), 2);
    bk_buffer_release(y);
    bk_buffer_release(b);
  }
  /* Everything into one element. */
  {
    const double dout[] = {big, 1, -big, 1, 1, 1};
    bk_buffer *b = tl_buf(BK_F64, dout, 6), *y = NULL;
    if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, b, (int64_t[]){1, 1}, 2, (int64_t[]){2, 3}, 2,
                                      (int64_t[]){1, 2}, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){3}), 1);
    bk_buffer_release(y);
    bk_buffer_release(b);
  }
}

static void bto_geometries(void) {
  /* Fixed geometries: leading and trailing broadcasts (the two usual bias
   * gradients), permuted axes, inserted axes, sizes that take the parallel
   * paths, and the full rank of 16. */
  static const geo fixed[] = {
      {2, 2, {1, 600}, {500, 600}, {1, 2}},
      {2, 2, {500, 1}, {500, 600}, {1, 2}},
      {1, 2, {600}, {500, 600}, {0, 1}},
      {1, 2, {500}, {500, 600}, {1, 0}},
      {3, 3, {4, 5, 6}, {6, 4, 5}, {3, 1, 2}},
      {2, 4, {7, 1}, {3, 9, 7, 2}, {0, 2, 1, 0}},
      {3, 4, {30, 1, 40}, {40, 25, 30, 8}, {3, 0, 1, 2}},
      {2, 3, {64, 64}, {64, 64, 50}, {2, 1, 0}},
      /* Few columns and many rows: the CUDA axis engine cuts the rows into
       * ordered chunks (one reduced axis, several, unaligned width). */
      {1, 2, {37}, {3000, 37}, {0, 1}},
      {2, 2, {1, 40}, {5000, 40}, {1, 2}},
      {1, 3, {7}, {40, 60, 7}, {0, 0, 1}},
      /* More rows than one tile holds, in float32 and float64 strips. */
      {1, 2, {64}, {8000, 64}, {0, 1}},
      {1, 2, {16}, {20000, 16}, {0, 1}},
      {16, 16, {2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1},
       {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2},
       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
      {8, 16, {2, 3, 1, 2, 1, 3, 2, 1},
       {2, 1, 2, 2, 3, 1, 2, 2, 2, 3, 1, 2, 2, 1, 2, 3},
       {8, 0, 0, 7, 6, 0, 5, 0, 4, 3, 0, 0, 1, 0, 0, 2}},
      /* The axis engine's general geometry: reduced axes on both sides of a
       * kept one, into 3 results of 40000 terms (chunks for parallelism);
       * two outer indices per tile (1200 and 1100 kept, inner 5 with scalar
       * and 8 with vector loads); kept axes permuted around a reduction,
       * with the innermost axis kept or reduced; 16 and 18 terms in two
       * reduced axes (the single chain and past it); 17 terms into a
       * permuted result. */
      {1, 3, {3}, {200, 3, 200}, {0, 1, 0}},
      {2, 4, {1200, 5}, {3, 1200, 7, 5}, {0, 1, 0, 2}},
      {2, 4, {1100, 8}, {3, 1100, 7, 8}, {0, 1, 0, 2}},
      {2, 3, {8, 30}, {30, 50, 8}, {2, 0, 1}},
      {2, 3, {6, 30}, {30, 6, 50}, {2, 1, 0}},
      {1, 3, {4}, {2, 4, 8}, {0, 1, 0}},
      {1, 3, {4}, {3, 4, 6}, {0, 1, 0}},
      {2, 4, {4, 2}, {17, 2, 1, 4}, {0, 2, 0, 1}},
      /* The innermost axis reduced (CUDA: the sums of its runs, then the
       * rest of the geometry over them): an odd run under a reduction, kept
       * axes permuted above it, three long runs cut into parts, and
       * everything into one element in parts. */
      {1, 3, {31}, {50, 31, 37}, {0, 1, 0}},
      {2, 4, {4, 9}, {9, 20, 4, 33}, {2, 0, 1, 0}},
      {1, 2, {3}, {3, 200000}, {1, 0}},
      {2, 2, {1, 1}, {300, 7001}, {1, 2}},
  };
  /* On CUDA the adjoints run on the axis engine: again with one tile per
   * fibre and with chunks folded by a second kernel forced (the hook
   * refuses elsewhere, and the loop runs once). */
  static const int strategies[] = {0, 2, 3};
  for (size_t k = 0; k < sizeof strategies / sizeof strategies[0]; k++) {
#ifdef BK_HAVE_CUDA
    if (!bk__cuda_axis_force(tl_ctx, strategies[k]) && k > 0) break;
#else
    if (k > 0) break;
#endif
    for (int d = 0; d < TL_DTYPES; d++) {
      bk_dtype dt = tl_dtypes[d];
      for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        check_geo(dt, &fixed[i], 500 + i);
      tl_seed(777 + (uint64_t)d);
      for (int t = 0; t < 60; t++) {
        geo g;
        random_geo(&g, 6, 20000);
        check_geo(dt, &g, 900 + (uint64_t)t);
      }
    }
  }
#ifdef BK_HAVE_CUDA
  (void)bk__cuda_axis_force(tl_ctx, 0);
#endif
}

static void bto_errors(void) {
  const int64_t id[] = {2, 1, 3}, od[] = {2, 4, 3}, mp[] = {1, 2, 3};
  double v[24] = {0};
  bk_buffer *x = tl_buf(BK_F32, v, 6), *dout = tl_buf(BK_F32, v, 24), *y = (bk_buffer *)&y;
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, od, 3, mp, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_broadcast_to(tl_ctx, NULL, id, 3, od, 3, mp, &y), BK_ERR_NULL, "x is NULL");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, -1, od, 3, mp, &y), BK_ERR_INVALID_ARGUMENT,
            "in_rank = -1");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 17, od, 3, mp, &y), BK_ERR_INVALID_ARGUMENT,
            "in_rank = 17");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, od, -1, mp, &y), BK_ERR_INVALID_ARGUMENT,
            "out_rank = -1");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, od, 17, mp, &y), BK_ERR_INVALID_ARGUMENT,
            "out_rank = 17");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, NULL, 3, od, 3, mp, &y), BK_ERR_NULL, "in_dims is NULL");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, NULL, 3, mp, &y), BK_ERR_NULL, "out_dims is NULL");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, od, 3, NULL, &y), BK_ERR_NULL, "axis_map is NULL");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, (int64_t[]){2, -1, 3}, 3, od, 3, mp, &y),
            BK_ERR_INVALID_ARGUMENT, "in_dims[1] = -1");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, (int64_t[]){2, 4, -3}, 3, mp, &y),
            BK_ERR_INVALID_ARGUMENT, "out_dims[2] = -3");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, (int64_t[]){INT64_MAX, 1, 3}, 3,
                            (int64_t[]){INT64_MAX, 4, 3}, 3, mp, &y),
            BK_ERR_INVALID_ARGUMENT, "in_dims");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, (int64_t[]){2, INT64_MAX, 3}, 3, mp, &y),
            BK_ERR_INVALID_ARGUMENT, "out_dims");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, od, 3, (int64_t[]){1, -1, 3}, &y),
            BK_ERR_INVALID_ARGUMENT, "axis_map[1] = -1");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, od, 3, (int64_t[]){1, 2, 4}, &y),
            BK_ERR_INVALID_ARGUMENT, "axis_map[2] = 4 outside [0, 3]");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, (int64_t[]){2, 4, 3, 1}, 4,
                            (int64_t[]){1, 2, 3, 3}, &y),
            BK_ERR_INVALID_ARGUMENT, "axis_map[3] = 3 reads input axis 2");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, od, 3, (int64_t[]){1, 2, 0}, &y),
            BK_ERR_INVALID_ARGUMENT, "axis_map reads input axis 2 nowhere");
  /* More input axes than output axes: some input axis is never read. */
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, (int64_t[]){2, 4}, 2, (int64_t[]){1, 2}, &y),
            BK_ERR_INVALID_ARGUMENT, "input axis 2");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, (int64_t[]){2, 4, 5}, 3, mp, &y),
            BK_ERR_INVALID_ARGUMENT, "in_dims[2] = 3 is neither 1 nor out_dims[2] = 5");
  /* The permuted map checks each input extent against the output axis that
   * reads it. */
  TL_REJECT(bk_broadcast_to(tl_ctx, x, id, 3, od, 3, (int64_t[]){3, 2, 1}, &y),
            BK_ERR_INVALID_ARGUMENT, "in_dims[2] = 3 is neither 1 nor out_dims[0] = 2");
  TL_REJECT(bk_broadcast_to(tl_ctx, dout, id, 3, od, 3, mp, &y), BK_ERR_INVALID_ARGUMENT,
            "x has length 24, expected 6");
  TL_CHECK(y == NULL, "out not cleared on failure");
  /* Rank 0 input needs a one-element x; rank 0 output with a rank-1 input
   * leaves the input axis unread. */
  TL_REJECT(bk_broadcast_to(tl_ctx, x, NULL, 0, NULL, 0, NULL, &y), BK_ERR_INVALID_ARGUMENT,
            "x has length 6, expected 1");
  TL_REJECT(bk_broadcast_to(tl_ctx, x, (int64_t[]){6}, 1, NULL, 0, NULL, &y),
            BK_ERR_INVALID_ARGUMENT, "input axis 0");

  /* The adjoint shares the geometry checks and names its own input. */
  TL_REJECT(bk_broadcast_to_adjoint(tl_ctx, dout, id, 3, od, 3, mp, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_broadcast_to_adjoint(tl_ctx, NULL, id, 3, od, 3, mp, &y), BK_ERR_NULL,
            "dout is NULL");
  TL_REJECT(bk_broadcast_to_adjoint(tl_ctx, dout, id, 17, od, 3, mp, &y),
            BK_ERR_INVALID_ARGUMENT, "in_rank = 17");
  TL_REJECT(bk_broadcast_to_adjoint(tl_ctx, dout, id, 3, od, -2, mp, &y),
            BK_ERR_INVALID_ARGUMENT, "out_rank = -2");
  TL_REJECT(bk_broadcast_to_adjoint(tl_ctx, dout, id, 3, od, 3, NULL, &y), BK_ERR_NULL,
            "axis_map is NULL");
  TL_REJECT(bk_broadcast_to_adjoint(tl_ctx, dout, id, 3, od, 3, (int64_t[]){1, 1, 3}, &y),
            BK_ERR_INVALID_ARGUMENT, "already reads");
  TL_REJECT(bk_broadcast_to_adjoint(tl_ctx, dout, id, 3, od, 3, (int64_t[]){1, 2, 9}, &y),
            BK_ERR_INVALID_ARGUMENT, "axis_map[2] = 9");
  TL_REJECT(bk_broadcast_to_adjoint(tl_ctx, dout, id, 3, (int64_t[]){3, 4, 3}, 3, mp, &y),
            BK_ERR_INVALID_ARGUMENT, "in_dims[0] = 2 is neither 1 nor out_dims[0] = 3");
  TL_REJECT(bk_broadcast_to_adjoint(tl_ctx, x, id, 3, od, 3, mp, &y), BK_ERR_INVALID_ARGUMENT,
            "dout has length 6, expected 24");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) {
    TL_REJECT(bk_broadcast_to(other, x, id, 3, od, 3, mp, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
    TL_REJECT(bk_broadcast_to_adjoint(other, dout, id, 3, od, 3, mp, &y), BK_ERR_DEVICE_MISMATCH,
              "ctx");
  }
  bk_buffer_release(x);
  bk_buffer_release(dout);
}

/* ---- bk_swap_adjacent and bk_sum_axis: (x, dims, rank, an int) ------------------------- */

typedef bk_status (*dims_fn)(bk_context *ctx, const bk_buffer *x, const int64_t *dims, int rank,
                             int v, bk_buffer **out);

/* fn(x, dims, rank, v) against want (len values), exactly when tol < 0,
 * else within tol at scale; with `name`, run again for the same bits.
 * Returns the first result when the call succeeded (the caller releases
 * it), else NULL. */
static bk_buffer *dims_check(const char *name, dims_fn fn, const bk_buffer *x,
                             const int64_t *dims, int rank, int v, const double *want,
                             int64_t len, double tol, double scale) {
  bk_buffer *y = NULL, *y2 = NULL;
  if (TL_OK(fn(tl_ctx, x, dims, rank, v, &y)) != BK_OK) {
    bk_buffer_release(y);
    return NULL;
  }
  if (tol < 0)
    TL_BUF_EXACT(y, want, len);
  else
    TL_BUF_CLOSE(y, want, len, tol, scale);
  if (name && TL_OK(fn(tl_ctx, x, dims, rank, v, &y2)) == BK_OK)
    TL_CHECK(tl_same_bits(y, y2), "%s is not deterministic", name);
  bk_buffer_release(y2);
  return y;
}

/* fn(x, dims, rank, v) must give exactly want (len values). */
static void dims_exact(dims_fn fn, const bk_buffer *x, const int64_t *dims, int rank, int v,
                       const double *want, int64_t len) {
  bk_buffer_release(dims_check(NULL, fn, x, dims, rank, v, want, len, -1, 0));
}

/* The rejections bk_swap_adjacent and bk_sum_axis share, on x (24 values,
 * dims {2, 3, 4}) with v = 0: NULL out and x, bad ranks, NULL dims, the
 * negative extent of neg_dims (named by neg_needle) and an overflowing
 * product. */
static void dims_rejections(dims_fn fn, const bk_buffer *x, const int64_t *neg_dims,
                            const char *neg_needle) {
  const int64_t dims[] = {2, 3, 4};
  bk_buffer *y = (bk_buffer *)&y;
  TL_REJECT(fn(tl_ctx, x, dims, 3, 0, NULL), BK_ERR_NULL, "out");
  TL_REJECT(fn(tl_ctx, NULL, dims, 3, 0, &y), BK_ERR_NULL, "x is NULL");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(fn(tl_ctx, x, dims, -1, 0, &y), BK_ERR_INVALID_ARGUMENT, "rank = -1");
  TL_REJECT(fn(tl_ctx, x, dims, 17, 0, &y), BK_ERR_INVALID_ARGUMENT, "rank = 17");
  TL_REJECT(fn(tl_ctx, x, NULL, 3, 0, &y), BK_ERR_NULL, "dims is NULL");
  TL_REJECT(fn(tl_ctx, x, neg_dims, 3, 0, &y), BK_ERR_INVALID_ARGUMENT, neg_needle);
  TL_REJECT(fn(tl_ctx, x, (int64_t[]){INT64_MAX, 3, 4}, 3, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "overflow");
}

/* ---- bk_swap_adjacent ------------------------------------------------------------------- */

/* Reference: y has dims with axes depth and depth+1 exchanged. */
static void swap_ref(const double *x, double *y, const int64_t *dims, int rank, int depth) {
  int64_t outer = product(dims, depth), a = dims[depth], b = dims[depth + 1];
  int64_t inner = product(dims + depth + 2, rank - depth - 2);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < a; i++)
      for (int64_t j = 0; j < b; j++)
        for (int64_t t = 0; t < inner; t++)
          y[((o * b + j) * a + i) * inner + t] = x[((o * a + i) * b + j) * inner + t];
}

static void swap_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    double *x = iota(24, 0);
    bk_buffer *bx = tl_buf(dt, x, 24);
    const double want[] = {0,  4,  8,  1,  5,  9,  2,  6,  10, 3,  7,  11,
                           12, 16, 20, 13, 17, 21, 14, 18, 22, 15, 19, 23};
    dims_exact(bk_swap_adjacent, bx, (int64_t[]){2, 3, 4}, 3, 1, want, 24);
    /* Depth 0 of the same tensor, checked against the reference. */
    double ref[24];
    swap_ref(x, ref, (int64_t[]){2, 3, 4}, 3, 0);
    dims_exact(bk_swap_adjacent, bx, (int64_t[]){2, 3, 4}, 3, 0, ref, 24);
    /* A swap with an extent-1 axis moves nothing. */
    dims_exact(bk_swap_adjacent, bx, (int64_t[]){1, 24}, 2, 0, x, 24);
    dims_exact(bk_swap_adjacent, bx, (int64_t[]){4, 6, 1}, 3, 1, x, 24);
    /* Empty tensors give empty results. */
    bk_buffer *e = tl_buf(dt, NULL, 0);
    dims_exact(bk_swap_adjacent, e, (int64_t[]){3, 0, 2}, 3, 0, NULL, 0);
    dims_exact(bk_swap_adjacent, e, (int64_t[]){0, 5}, 2, 0, NULL, 0);
    TL_UNCHANGED(bx, x, 24);
    bk_buffer_release(e);
    bk_buffer_release(bx);
    free(x);
  }
}

static void swap_random(void) {
  static const struct {
    int rank, depth;
    int64_t dims[5];
  } cases[] = {
      {2, 0, {3, 5}},          {2, 0, {300, 257}},     {3, 0, {2, 3, 4000}},
      {3, 1, {64, 65, 7}},     {4, 2, {3, 2, 50, 60}}, {5, 1, {2, 3, 4, 5, 6}},
      {5, 3, {2, 3, 4, 5, 6}}, {4, 0, {17, 19, 1, 3}},
  };
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      int rank = cases[c].rank, depth = cases[c].depth;
      const int64_t *dims = cases[c].dims;
      int64_t n = product(dims, rank);
      double *x = tl_xmalloc((size_t)n * sizeof *x), *ref = tl_xmalloc((size_t)n * sizeof *ref);
      tl_seed(600 + c);
      tl_fill_randn(x, n);
      tl_round(dt, x, n);
      swap_ref(x, ref, dims, rank, depth);
      bk_buffer *bx = tl_buf(dt, x, n);
      bk_buffer *y =
          dims_check("swap_adjacent", bk_swap_adjacent, bx, dims, rank, depth, ref, n, -1, 0);
      if (y) {
        /* Swapping back restores x. */
        int64_t sd[5];
        memcpy(sd, dims, sizeof sd);
        sd[depth] = dims[depth + 1];
        sd[depth + 1] = dims[depth];
        dims_exact(bk_swap_adjacent, y, sd, rank, depth, x, n);
      }
      TL_UNCHANGED(bx, x, n);
      bk_buffer_release(y);
      bk_buffer_release(bx);
      free(x);
      free(ref);
    }
  }
}

static void swap_errors(void) {
  double v[24] = {0};
  const int64_t dims[] = {2, 3, 4};
  bk_buffer *x = tl_buf(BK_F64, v, 24), *y = (bk_buffer *)&y;
  dims_rejections(bk_swap_adjacent, x, (int64_t[]){2, -3, 4}, "dims[1] = -3");
  TL_REJECT(bk_swap_adjacent(tl_ctx, x, dims, 3, -1, &y), BK_ERR_INVALID_ARGUMENT, "depth = -1");
  TL_REJECT(bk_swap_adjacent(tl_ctx, x, dims, 3, 2, &y), BK_ERR_INVALID_ARGUMENT, "depth = 2");
  TL_REJECT(bk_swap_adjacent(tl_ctx, x, (int64_t[]){24}, 1, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "depth = 0");
  bk_buffer *s = tl_buf(BK_F64, v, 1);
  TL_REJECT(bk_swap_adjacent(tl_ctx, s, NULL, 0, 0, &y), BK_ERR_INVALID_ARGUMENT, "depth = 0");
  TL_REJECT(bk_swap_adjacent(tl_ctx, x, (int64_t[]){2, 3, 5}, 3, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "x has length 24, expected 30");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) TL_REJECT(bk_swap_adjacent(other, x, dims, 3, 0, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
  bk_buffer_release(s);
  bk_buffer_release(x);
}

/* ---- bk_sum_axis -------------------------------------------------------------------------- */

/* Reference sum in double; mag receives the sums of |x|. */
static void sum_ref(const double *x, double *y, double *mag, const int64_t *dims, int rank,
                    int axis) {
  int64_t outer = product(dims, axis), n = dims[axis];
  int64_t inner = product(dims + axis + 1, rank - axis - 1);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t t = 0; t < inner; t++) {
      double s = 0, m = 0;
      for (int64_t i = 0; i < n; i++) {
        s += x[(o * n + i) * inner + t];
        m += fabs(x[(o * n + i) * inner + t]);
      }
      y[o * inner + t] = s;
      mag[o * inner + t] = m;
    }
}

static void sum_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const int64_t dims[] = {2, 3, 4};
    double *x = iota(24, 0);
    bk_buffer *bx = tl_buf(dt, x, 24), *y = NULL;
    dims_exact(bk_sum_axis, bx, dims, 3, 2, (double[]){6, 22, 38, 54, 70, 86}, 6);
    dims_exact(bk_sum_axis, bx, dims, 3, 1, (double[]){12, 15, 18, 21, 48, 51, 54, 57}, 8);
    double want[12];
    for (int i = 0; i < 12; i++) want[i] = 12 + 2 * i;
    dims_exact(bk_sum_axis, bx, dims, 3, 0, want, 12);
    /* Rank 0: a copy of the one element (a new buffer). */
    bk_buffer *s = tl_buf(dt, (double[]){-3.25}, 1);
    if (TL_OK(bk_sum_axis(tl_ctx, s, NULL, 0, 0, &y)) == BK_OK) {
      TL_BUF_EXACT(y, ((double[]){-3.25}), 1);
      TL_CHECK(y != s, "rank-0 sum_axis returned its input");
    }
    bk_buffer_release(y);
    /* An axis of extent 1 gives the input values. */
    dims_exact(bk_sum_axis, bx, (int64_t[]){4, 1, 6}, 3, 1, x, 24);
    /* A zero-extent axis gives zeros; a zero-extent other axis an empty
     * result. */
    bk_buffer *e = tl_buf(dt, NULL, 0);
    dims_exact(bk_sum_axis, e, (int64_t[]){2, 0, 3}, 3, 1, (double[]){0, 0, 0, 0, 0, 0}, 6);
    dims_exact(bk_sum_axis, e, (int64_t[]){0}, 1, 0, (double[]){0}, 1);
    dims_exact(bk_sum_axis, e, (int64_t[]){2, 0, 3}, 3, 0, NULL, 0);
    /* Rank 1: the total. */
    dims_exact(bk_sum_axis, bx, (int64_t[]){24}, 1, 0, (double[]){276}, 1);
    /* NaN and infinities propagate. */
    bk_buffer *sp = tl_buf(dt, (double[]){1, NAN, INFINITY, 2, INFINITY, -INFINITY}, 6);
    dims_exact(bk_sum_axis, sp, (int64_t[]){2, 3}, 2, 1, (double[]){NAN, NAN}, 2);
    dims_exact(bk_sum_axis, sp, (int64_t[]){3, 2}, 2, 1, (double[]){NAN, INFINITY, NAN}, 3);
    TL_UNCHANGED(bx, x, 24);
    bk_buffer_release(sp);
    bk_buffer_release(e);
    bk_buffer_release(s);
    bk_buffer_release(bx);
    free(x);
  }
}

/* bk_sum_axis of random data (seeded) along axis against the float64
 * reference within the contract's tolerance, twice for the same bits, x
 * unchanged. */
static void sum_case(bk_dtype dt, const int64_t *dims, int rank, int axis, uint64_t seed) {
  int64_t n = product(dims, rank), m = n / dims[axis];
  double *x = tl_xmalloc((size_t)n * sizeof *x), *ref = tl_xmalloc((size_t)m * sizeof *ref);
  double *mag = tl_xmalloc((size_t)m * sizeof *mag);
  tl_seed(seed);
  tl_fill_randn(x, n);
  tl_round(dt, x, n);
  sum_ref(x, ref, mag, dims, rank, axis);
  bk_buffer *bx = tl_buf(dt, x, n);
  bk_buffer_release(dims_check("sum_axis", bk_sum_axis, bx, dims, rank, axis, ref, m,
                               tl_tol_red(dt), tl_absmax(mag, m, 1)));
  TL_UNCHANGED(bx, x, n);
  bk_buffer_release(bx);
  free(x);
  free(ref);
  free(mag);
}

static void sum_random(void) {
  static const struct {
    int rank, axis;
    int64_t dims[4];
  } cases[] = {
      {1, 0, {100000}},       {2, 0, {1000, 300}}, {2, 1, {300, 1000}},  {3, 1, {7, 5000, 9}},
      {3, 0, {33, 17, 600}},  {3, 2, {4, 5, 6}},   {4, 2, {3, 4, 5, 6}}, {2, 1, {100000, 3}},
      {3, 1, {2, 300, 700}},
      /* The CUDA axis engine at its edges: fibres in registers (4 | 5 and
       * 16 | 17 terms, scalar and vector loads), flat tiles of several
       * slabs, strips narrowed to 64 bytes and cut into chunks for
       * parallelism, a long contiguous axis cut by size, and columns of
       * whole lines streamed one per thread (1100, 18, 257). */
      {3, 1, {9, 4, 12}},     {3, 1, {7, 5, 7}},   {3, 1, {5, 16, 8}},   {3, 1, {6, 17, 3}},
      {3, 1, {3000, 17, 5}},  {2, 1, {3000, 33}},  {3, 1, {2, 1500, 600}}, {2, 0, {30001, 2}},
      {3, 1, {1100, 18, 257}},
      /* Flat tiles whose slabs (18 x 245, 397 x 170 rows cut into chunks)
       * start at every offset within 16 bytes: the tile's shifted copy. */
      {3, 1, {700, 18, 245}}, {3, 1, {3, 397, 170}}, {3, 1, {2000, 19, 3}},
      /* Fibres of 40 terms streamed through the register kernel (68000
       * columns: its bound on a 132-multiprocessor device) and in tiles. */
      {3, 1, {40, 40, 1700}}, {3, 1, {39, 40, 1700}},
      /* Runs (inner 1): one lane a run (8, 16 terms), groups of lanes (17,
       * 33, 513 terms, unaligned starts; 100 terms fold in quads), runs of
       * several chunks (513, 5000: two chunks in flight), runs cut into
       * parts (3 x 100003), and one run of 3000017 terms. */
      {2, 1, {5000, 8}},     {2, 1, {300, 16}},   {2, 1, {3000, 17}},   {2, 1, {700, 33}},
      {2, 1, {64, 513}},     {2, 1, {3, 100003}}, {1, 0, {3000017}},    {2, 1, {500, 100}},
      {2, 1, {200, 5000}},
  };
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
      sum_case(dt, cases[c].dims, cases[c].rank, cases[c].axis, 700 + c);
  }
}

/* Summed in index order along the axis: in float64, [2^60, 1, -2^60, 1]
 * gives exactly 1 (0 in reverse or pairwise order). */
static void sum_order(void) {
  const double big = 1152921504606846976.0;
  const double x[] = {big, 1, 1, 1, -big, 1, 1, 1};
  bk_buffer *b = tl_buf(BK_F64, x, 8);
  /* dims (4, 2), axis 0: column 0 is [big, 1, -big, 1]. */
  dims_exact(bk_sum_axis, b, (int64_t[]){4, 2}, 2, 0, (double[]){1, 4}, 2);
  bk_buffer_release(b);
  const double r[] = {big, 1, -big, 1};
  b = tl_buf(BK_F64, r, 4);
  dims_exact(bk_sum_axis, b, (int64_t[]){4}, 1, 0, (double[]){1}, 1);
  bk_buffer_release(b);
  /* 16 contiguous terms are one chain too: [2^60, 1 x 7, -2^60, 1 x 7]
   * gives 7 (two chains of 8 would give 0). */
  double w[16];
  for (int j = 0; j < 16; j++) w[j] = j == 0 ? big : j == 8 ? -big : 1;
  b = tl_buf(BK_F64, w, 16);
  dims_exact(bk_sum_axis, b, (int64_t[]){1, 16}, 2, 1, (double[]){7}, 1);
  bk_buffer_release(b);
}

/* Every strategy of the CUDA axis engine forced in turn (columns in
 * registers streaming any fibre length, one tile per fibre, chunks whose
 * sums a second kernel adds in order; the cluster strategy is a softmax's
 * and sums take chunks there) at the edges of its geometry: axes of 1..17
 * terms around the register batch and the one-chain limit (16), segment
 * rounding (63|64|65), flat tiles (inner <= 256, vector and scalar loads),
 * strips (257, 300; a partial last strip), inner = 1, and fibres longer
 * than one tile (by size). Checked against the float64 reference within
 * the contract's tolerance and run twice for the same bits. */
static void sum_forced(void) {
#ifdef BK_HAVE_CUDA
  static const int64_t shapes[][3] = {
      {3, 1, 4},    {2, 2, 7},    {4, 16, 8},   {3, 17, 12},  {2, 63, 3},   {2, 64, 100},
      {1, 65, 256}, {2, 130, 257}, {1, 300, 300}, {5, 33, 36},  {1, 7000, 64}, {300, 40, 1},
      {1, 20000, 1}, {2, 1500, 600},
  };
  if (!bk__cuda_axis_force(tl_ctx, 0)) return;
  for (int strategy = 1; strategy <= 4; strategy++) {
    TL_CHECK(bk__cuda_axis_force(tl_ctx, strategy), "strategy %d refused", strategy);
    for (int d = 0; d < TL_DTYPES; d++) {
      bk_dtype dt = tl_dtypes[d];
      for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        sum_case(dt, shapes[c], 3, 1, 760 + c);
    }
    /* At most 16 terms fold as one chain under every strategy. */
    sum_order();
  }
  TL_CHECK(bk__cuda_axis_force(tl_ctx, 0), "planner not restored");
#endif
}

static void sum_errors(void) {
  double v[24] = {0};
  const int64_t dims[] = {2, 3, 4};
  bk_buffer *x = tl_buf(BK_F32, v, 24), *y = (bk_buffer *)&y;
  dims_rejections(bk_sum_axis, x, (int64_t[]){2, 3, -4}, "dims[2] = -4");
  TL_REJECT(bk_sum_axis(tl_ctx, x, dims, 3, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "axis = 3 outside [0, 3)");
  TL_REJECT(bk_sum_axis(tl_ctx, x, dims, 3, -1, &y), BK_ERR_INVALID_ARGUMENT, "axis = -1");
  bk_buffer *s = tl_buf(BK_F32, v, 1);
  TL_REJECT(bk_sum_axis(tl_ctx, s, NULL, 0, 1, &y), BK_ERR_INVALID_ARGUMENT,
            "axis = 1 must be 0 for rank 0");
  /* x is empty but the result (dims without the axis) would not fit. */
  bk_buffer *e = tl_buf(BK_F32, NULL, 0);
  TL_REJECT(bk_sum_axis(tl_ctx, e, (int64_t[]){0, INT64_MAX, 2}, 3, 0, &y),
            BK_ERR_INVALID_ARGUMENT, "result length");
  TL_REJECT(bk_sum_axis(tl_ctx, x, (int64_t[]){2, 3, 5}, 3, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "x has length 24, expected 30");
  TL_REJECT(bk_sum_axis(tl_ctx, x, NULL, 0, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "x has length 24, expected 1");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) TL_REJECT(bk_sum_axis(other, x, dims, 3, 0, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
  bk_buffer_release(e);
  bk_buffer_release(s);
  bk_buffer_release(x);
}

int main(void) {
  tl_init();
  TL_RUN(bcol_examples);
  TL_RUN(bcol_random);
  TL_RUN(bcol_errors);
  TL_RUN(bto_examples);
  TL_RUN(bto_empty);
  TL_RUN(bto_adjoint_order);
  TL_RUN(bto_geometries);
  TL_RUN(bto_errors);
  TL_RUN(swap_examples);
  TL_RUN(swap_random);
  TL_RUN(swap_errors);
  TL_RUN(sum_examples);
  TL_RUN(sum_random);
  TL_RUN(sum_order);
  TL_RUN(sum_forced);
  TL_RUN(sum_errors);
  return tl_finish();
}
