/*
 * xent.c — front door of the cross-entropies: bk_xent_weighted_mean and
 * bk_xent_teacher.
 *
 * Both take two (rows, cols) buffers of one dtype. The empty cases (rows or
 * cols zero) never reach a backend: the loss is an exact 0 and the gradient
 * is empty.
 */
#include "../core/internal.h"

/* Checks two (rows, cols) operands: NULL, sizes, overflow and lengths, in
 * that order, naming each argument. */
static bk_status check_pair(const char *fn, const bk_buffer *a, const char *a_name,
                            const bk_buffer *b, const char *b_name, int64_t rows, int64_t cols,
                            int64_t *elems) {
  bk_status st = bk__check_ptr(fn, a_name, a);
  if (st == BK_OK) st = bk__check_ptr(fn, b_name, b);
  if (st == BK_OK) st = bk__check_size(fn, "rows", rows);
  if (st == BK_OK) st = bk__check_size(fn, "cols", cols);
  if (st == BK_OK) st = bk__mul(fn, "rows*cols", rows, cols, elems);
  if (st == BK_OK) st = bk__check_len(fn, a_name, a, *elems);
  if (st == BK_OK) st = bk__check_len(fn, b_name, b, *elems);
  return st;
}

bk_status bk_xent_weighted_mean(bk_context *ctx, const bk_buffer *logits,
                                const bk_buffer *weights, int64_t rows, int64_t cols,
                                bk_buffer **out) {
  static const char fn[] = "bk_xent_weighted_mean";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = check_pair(fn, logits, "logits", weights, "weights", rows, cols, &elems);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 2, (const bk_buffer *const[]){logits, weights},
                (const char *const[]){"logits", "weights"});
  if (st != BK_OK) return st;
  if (elems == 0) return bk__new_zeros(&c, 1, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, 1, &y);
  if (st == BK_OK)
    st = c.be->xent_weighted_mean(c.ctx, c.dtype, logits->data, weights->data, y->data, rows,
                                  cols);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}

bk_status bk_xent_teacher(bk_context *ctx, const bk_buffer *student, const bk_buffer *teacher,
                          int64_t rows, int64_t cols, int gradient, bk_buffer **out) {
  static const char fn[] = "bk_xent_teacher";
  bk_status st = bk__clear_out(fn, out);
  if (st != BK_OK) return st;
  int64_t elems = 0;
  st = check_pair(fn, student, "student", teacher, "teacher", rows, cols, &elems);
  if (st == BK_OK) st = bk__check_flag(fn, "gradient", gradient);
  if (st != BK_OK) return st;
  bk_call c;
  st = bk__bind(&c, fn, ctx, 2, (const bk_buffer *const[]){student, teacher},
                (const char *const[]){"student", "teacher"});
  if (st != BK_OK) return st;
  int64_t length = gradient ? elems : 1;
  if (elems == 0) return gradient ? bk__new_output(&c, 0, out) : bk__new_zeros(&c, 1, out);
  bk_buffer *y = NULL;
  st = bk__new_output(&c, length, &y);
  if (st == BK_OK)
    st = c.be->xent_teacher(c.ctx, c.dtype, student->data, teacher->data, y->data, rows, cols,
                            gradient);
  if (st != BK_OK) {
    bk__drop(&y);
    return st;
  }
  *out = y;
  return BK_OK;
}
