/*
 * layout.c — front door of the broadcasts and layout changes:
 * bk_broadcast_col, bk_broadcast_to, bk_broadcast_to_adjoint,
 * bk_swap_adjacent and bk_sum_axis.
 *
 * Each front door checks its arguments in one order (out-parameter, NULL
 * inputs, ranks and dims, sizes, lengths, then dtype and device through
 * bk__bind), handles the empty cases, reduces the geometry to the canonical
 * form the backend member takes and calls it once. Where the canonical form
 * shows that the result is the input's memory unchanged (an identity
 * broadcast, a swap with an axis of extent 1, a sum over an axis of extent 1
 * or of a rank-0 tensor), the result is a plain device copy.
 */
#include "../core/internal.h"

#include <inttypes.h>

/* Allocates a result of `length` > 0 elements holding a copy of the first
 * `length` elements of src. */
static bk_status copy_result(bk_call *c, const bk_buffer *src, int64_t length, bk_buffer **out) {
  bk_buffer *y = NULL;
  bk_status st = bk__new_output(c, length, &y);
  if (st == BK_OK)
    st = c->be->mem_copy(c->ctx, c->fn, y->data, src->data, (size_t)length * bk__dtype_size(c->dtype));
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

/* ---- bk_broadcast_col ------------------------------------------------------- */

bk_status bk_broadcast_col(bk_context *ctx, const bk_buffer *vec, int64_t rows, int64_t cols,
                           bk_buffer **out) {
  static const char fn[] = "bk_broadcast_col";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = bk__check_ptr(fn, "vec", vec);
  if (st == BK_OK) st = bk__check_size(fn, "rows", rows);
  if (st == BK_OK) st = bk__check_size(fn, "cols", cols);
  if (st == BK_OK) st = bk__mul(fn, "rows*cols", rows, cols, &elems);
  if (st == BK_OK) st = bk__check_len(fn, "vec", vec, rows);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){vec}, (const char *const[]){"vec"});
  if (st != BK_OK) return st;
  if (elems == 0) return bk__new_output(&c, 0, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, elems, &y);
  if (st == BK_OK) st = c.be->broadcast_col(c.ctx, c.dtype, vec->data, y->data, rows, cols);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

/* ---- bk_broadcast_to and its adjoint ------------------------------------------ */

/*
 * Validates a broadcast geometry completely: ranks in [0, BK_MAX_RANK], the
 * dims arrays (non-NULL when their rank is positive, entries >= 0, products
 * that fit in int64), and axis_map (every entry in [0, in_rank], every input
 * axis read by exactly one output axis, each read input axis of extent 1 or
 * of the output axis's extent). Returns the element counts of both sides.
 */
static bk_status check_bcast(const char *fn, const int64_t *in_dims, int in_rank,
                             const int64_t *out_dims, int out_rank, const int64_t *axis_map,
                             int64_t *in_len, int64_t *out_len) {
  if (in_rank < 0 || in_rank > BK_MAX_RANK)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "in_rank = %d outside [0, %d]", in_rank,
                    BK_MAX_RANK);
  if (out_rank < 0 || out_rank > BK_MAX_RANK)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "out_rank = %d outside [0, %d]", out_rank,
                    BK_MAX_RANK);
  if (in_rank > 0 && !in_dims) return bk__fail(BK_ERR_NULL, fn, "in_dims is NULL");
  if (out_rank > 0 && !out_dims) return bk__fail(BK_ERR_NULL, fn, "out_dims is NULL");
  if (out_rank > 0 && !axis_map) return bk__fail(BK_ERR_NULL, fn, "axis_map is NULL");
  bk_status st = bk__product(fn, "in_dims", in_dims, in_rank, in_len);
  if (st == BK_OK) st = bk__product(fn, "out_dims", out_dims, out_rank, out_len);
  if (st != BK_OK) return st;
  /* reader[a] is the output axis that reads input axis a, or -1. */
  int reader[BK_MAX_RANK];
  for (int a = 0; a < in_rank; a++) reader[a] = -1;
  for (int j = 0; j < out_rank; j++) {
    int64_t m = axis_map[j];
    if (m < 0 || m > in_rank)
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "axis_map[%d] = %" PRId64 " outside [0, %d]",
                      j, m, in_rank);
    if (m == 0) continue;
    int a = (int)(m - 1);
    if (reader[a] >= 0)
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                      "axis_map[%d] = %" PRId64 " reads input axis %d, which axis_map[%d] "
                      "already reads",
                      j, m, a, reader[a]);
    reader[a] = j;
    if (in_dims[a] != 1 && in_dims[a] != out_dims[j])
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                      "in_dims[%d] = %" PRId64 " is neither 1 nor out_dims[%d] = %" PRId64, a,
                      in_dims[a], j, out_dims[j]);
  }
  for (int a = 0; a < in_rank; a++) {
    if (reader[a] < 0)
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                      "axis_map reads input axis %d nowhere (every input axis must be read "
                      "exactly once)",
                      a);
  }
  return BK_OK;
}

/*
 * Builds the canonical geometry of a validated broadcast with a non-empty
 * output (so every in_dims entry is >= 1 and the input strides fit). Output
 * axes of extent 1 are dropped; an output axis whose input stride is s_j is
 * merged into the previous kept axis when that one's stride equals
 * s_j * out_dims[j] (two contiguous input axes read in order, or two axes
 * that both read stride 0). Neither step changes the row-major order of the
 * output elements, so the adjoint's fold order is preserved.
 */
static void bcast_geometry(const int64_t *in_dims, int in_rank, const int64_t *out_dims,
                           int out_rank, const int64_t *axis_map, int64_t in_len,
                           int64_t out_len, bk_bcast_geom *g) {
  int64_t in_stride[BK_MAX_RANK];
  int64_t s = 1;
  for (int a = in_rank - 1; a >= 0; a--) {
    in_stride[a] = s;
    s *= in_dims[a];
  }
  g->rank = 0;
  g->in_length = in_len;
  g->out_length = out_len;
  for (int j = 0; j < out_rank; j++) {
    int64_t d = out_dims[j];
    if (d == 1) continue;
    int64_t m = axis_map[j];
    int64_t sj = (m == 0 || in_dims[m - 1] == 1) ? 0 : in_stride[m - 1];
    int r = g->rank;
    if (r > 0 && g->in_stride[r - 1] == sj * d) {
      g->out_dims[r - 1] *= d;
      g->in_stride[r - 1] = sj;
    } else {
      g->out_dims[r] = d;
      g->in_stride[r] = sj;
      g->rank = r + 1;
    }
  }
}

/* True when the canonical geometry reads the input once, in order: the
 * broadcast (and its adjoint) is then a plain copy. */
static bool bcast_is_identity(const bk_bcast_geom *g) {
  return g->rank == 0 || (g->rank == 1 && g->in_stride[0] == 1);
}

bk_status bk_broadcast_to(bk_context *ctx, const bk_buffer *x, const int64_t *in_dims,
                          int in_rank, const int64_t *out_dims, int out_rank,
                          const int64_t *axis_map, bk_buffer **out) {
  static const char fn[] = "bk_broadcast_to";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  st = bk__check_ptr(fn, "x", x);
  if (st != BK_OK) return st;
  int64_t in_len = 0, out_len = 0;
  st = check_bcast(fn, in_dims, in_rank, out_dims, out_rank, axis_map, &in_len, &out_len);
  if (st == BK_OK) st = bk__check_len(fn, "x", x, in_len);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){x}, (const char *const[]){"x"});
  if (st != BK_OK) return st;
  if (out_len == 0) return bk__new_output(&c, 0, out);
  bk_bcast_geom g;
  bcast_geometry(in_dims, in_rank, out_dims, out_rank, axis_map, in_len, out_len, &g);
  if (bcast_is_identity(&g)) return copy_result(&c, x, out_len, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, out_len, &y);
  if (st == BK_OK) st = c.be->broadcast_to(c.ctx, c.dtype, x->data, y->data, &g);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

bk_status bk_broadcast_to_adjoint(bk_context *ctx, const bk_buffer *dout, const int64_t *in_dims,
                                  int in_rank, const int64_t *out_dims, int out_rank,
                                  const int64_t *axis_map, bk_buffer **out) {
  static const char fn[] = "bk_broadcast_to_adjoint";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  st = bk__check_ptr(fn, "dout", dout);
  if (st != BK_OK) return st;
  int64_t in_len = 0, out_len = 0;
  st = check_bcast(fn, in_dims, in_rank, out_dims, out_rank, axis_map, &in_len, &out_len);
  if (st == BK_OK) st = bk__check_len(fn, "dout", dout, out_len);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){dout},
                (const char *const[]){"dout"});
  if (st != BK_OK) return st;
  /* An empty output reads nothing, so every input element receives the
   * empty sum. The input can still have elements: an inserted output axis of
   * extent 0, or an input axis of extent 1 read by an output axis of extent
   * 0, empties the output but not the input. */
  if (out_len == 0) return bk__new_zeros(&c, in_len, out);
  bk_bcast_geom g;
  bcast_geometry(in_dims, in_rank, out_dims, out_rank, axis_map, in_len, out_len, &g);
  if (bcast_is_identity(&g)) return copy_result(&c, dout, in_len, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, in_len, &y);
  if (st == BK_OK) st = c.be->broadcast_to_adjoint(c.ctx, c.dtype, dout->data, y->data, &g);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

/* ---- bk_swap_adjacent ------------------------------------------------------------ */

/* Product of dims[lo..hi), every entry already checked >= 0; the full
 * product fits, and so does any part of it when no entry is 0. */
static int64_t dims_product(const int64_t *dims, int lo, int hi) {
  int64_t p = 1;
  for (int i = lo; i < hi; i++) p *= dims[i];
  return p;
}

bk_status bk_swap_adjacent(bk_context *ctx, const bk_buffer *x, const int64_t *dims, int rank,
                           int depth, bk_buffer **out) {
  static const char fn[] = "bk_swap_adjacent";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = bk__check_ptr(fn, "x", x);
  if (st == BK_OK) st = bk__check_dims(fn, "dims", dims, rank, 0, &elems);
  if (st != BK_OK) return st;
  /* Axes depth and depth + 1 exist: 0 <= depth < rank - 1, with the bound
   * formed from the checked rank (depth + 1 overflows for INT_MAX). */
  st = bk__check_range(fn, "depth", depth, 0, (int64_t)rank - 1);
  if (st == BK_OK) st = bk__check_len(fn, "x", x, elems);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){x}, (const char *const[]){"x"});
  if (st != BK_OK) return st;
  if (elems == 0) return bk__new_output(&c, 0, out);
  int64_t outer = dims_product(dims, 0, depth), a = dims[depth], b = dims[depth + 1];
  int64_t inner = dims_product(dims, depth + 2, rank);
  /* With an axis of extent 1 the swap moves no element. */
  if (a == 1 || b == 1) return copy_result(&c, x, elems, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, elems, &y);
  if (st == BK_OK) st = c.be->swap_adjacent(c.ctx, c.dtype, x->data, y->data, outer, a, b, inner);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

/* ---- bk_sum_axis -------------------------------------------------------------------- */

bk_status bk_sum_axis(bk_context *ctx, const bk_buffer *x, const int64_t *dims, int rank, int axis,
                      bk_buffer **out) {
  static const char fn[] = "bk_sum_axis";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = bk__check_ptr(fn, "x", x);
  if (st == BK_OK) st = bk__check_dims(fn, "dims", dims, rank, 0, &elems);
  if (st != BK_OK) return st;
  /* A rank-0 tensor has no axis to name; 0 is the one value accepted, as
   * the call that sums "the only axis there is" of a scalar. */
  if (rank == 0 && axis != 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "axis = %d must be 0 for rank 0", axis);
  if (rank > 0) st = bk__check_range(fn, "axis", axis, 0, rank);
  if (st != BK_OK) return st;
  /* The result drops the summed axis; when that axis has extent 0 the
   * result can be large although x is empty, so its size is checked here. */
  int64_t out_len = 1;
  for (int i = 0; i < rank && st == BK_OK; i++)
    if (i != axis)
      st = bk__mul(fn, "the result length (dims without axis)", out_len, dims[i], &out_len);
  if (st == BK_OK) st = bk__check_len(fn, "x", x, elems);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){x}, (const char *const[]){"x"});
  if (st != BK_OK) return st;
  if (rank == 0) return copy_result(&c, x, 1, out);
  if (out_len == 0) return bk__new_output(&c, 0, out);
  if (elems == 0) return bk__new_zeros(&c, out_len, out);
  int64_t outer = dims_product(dims, 0, axis), n = dims[axis];
  int64_t inner = dims_product(dims, axis + 1, rank);
  /* The sum of a single term is that term, bit for bit. */
  if (n == 1) return copy_result(&c, x, out_len, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, out_len, &y);
  if (st == BK_OK) st = c.be->sum_axis(c.ctx, c.dtype, x->data, y->data, outer, n, inner);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}
