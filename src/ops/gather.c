/*
 * gather.c — front door of the row gather and scatter-add with host
 * indices: bk_rows_gather and bk_rows_scatter_add.
 *
 * Indices are checked on the host before dispatch (non-NULL when k > 0,
 * each <= UINT32_MAX), so every backend sees the same valid calls; an index
 * in that range but >= rows is legal and handled by the backend (a zero row
 * for the gather, ignored by the scatter-add).
 */
#include "../core/internal.h"

#include <inttypes.h>

bk_status bk_rows_gather(bk_context *ctx, const bk_buffer *mat, int64_t rows, int64_t cols,
                         const uint64_t *indices, int64_t k, bk_buffer **out) {
  static const char fn[] = "bk_rows_gather";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t mat_len = 0, out_len = 0;
  st = bk__check_ptr(fn, "mat", mat);
  if (st == BK_OK) st = bk__check_size(fn, "rows", rows);
  if (st == BK_OK) st = bk__check_size(fn, "cols", cols);
  if (st == BK_OK) st = bk__check_size(fn, "k", k);
  if (st == BK_OK) st = bk__mul(fn, "rows*cols", rows, cols, &mat_len);
  if (st == BK_OK) st = bk__mul(fn, "k*cols", k, cols, &out_len);
  if (st == BK_OK) st = bk__check_len(fn, "mat", mat, mat_len);
  if (st == BK_OK) st = bk__check_indices(fn, indices, k);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 1, (const bk_buffer *const[]){mat}, (const char *const[]){"mat"});
  if (st != BK_OK) return st;
  if (out_len == 0) return bk__new_output(&c, 0, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, out_len, &y);
  if (st == BK_OK)
    st = c.be->rows_gather(c.ctx, c.dtype, mat->data, y->data, rows, cols, indices, k);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

bk_status bk_rows_scatter_add(bk_context *ctx, const bk_buffer *mat, const bk_buffer *values,
                              int64_t rows, int64_t cols, const uint64_t *indices, int64_t k,
                              bk_buffer **out) {
  static const char fn[] = "bk_rows_scatter_add";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t mat_len = 0, val_len = 0;
  st = bk__check_ptr(fn, "mat", mat);
  if (st == BK_OK) st = bk__check_ptr(fn, "values", values);
  if (st == BK_OK) st = bk__check_size(fn, "rows", rows);
  if (st == BK_OK) st = bk__check_size(fn, "cols", cols);
  if (st == BK_OK) st = bk__check_size(fn, "k", k);
  if (st == BK_OK) st = bk__mul(fn, "rows*cols", rows, cols, &mat_len);
  if (st == BK_OK) st = bk__mul(fn, "k*cols", k, cols, &val_len);
  if (st == BK_OK) st = bk__check_len(fn, "mat", mat, mat_len);
  if (st == BK_OK) st = bk__check_len(fn, "values", values, val_len);
  if (st == BK_OK) st = bk__check_indices(fn, indices, k);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 2, (const bk_buffer *const[]){mat, values},
                (const char *const[]){"mat", "values"});
  if (st != BK_OK) return st;
  if (mat_len == 0) return bk__new_output(&c, 0, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, mat_len, &y);
  if (st == BK_OK)
    st = c.be->rows_scatter_add(c.ctx, c.dtype, mat->data, values->data, y->data, rows, cols,
                                indices, k);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}
