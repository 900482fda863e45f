/*
 * geometry.c — overflow-checked size arithmetic and the argument checks
 * every front door shares. Each check names the function and the argument.
 */
#include "internal.h"

#include <inttypes.h>

size_t bk__dtype_size(bk_dtype dt) {
  switch (dt) {
    case BK_F32: return 4;
    case BK_F64: return 8;
    default: return 0;
  }
}

const char *bk__dtype_name(bk_dtype dt) {
  switch (dt) {
    case BK_F32: return "f32";
    case BK_F64: return "f64";
    case BK_BF16: return "bf16";
    case BK_F16: return "f16";
    default: return "unknown";
  }
}

bk_status bk__mul(const char *fn, const char *what, int64_t a, int64_t b, int64_t *out) {
  if (a < 0 || b < 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "%s: negative factor (%" PRId64 " * %" PRId64 ")",
                    what, a, b);
  if (a != 0 && b > INT64_MAX / a)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "%s = %" PRId64 " * %" PRId64 " overflows int64", what, a, b);
  *out = a * b;
  return BK_OK;
}

bk_status bk__add(const char *fn, const char *what, int64_t a, int64_t b, int64_t *out) {
  if (a < 0 || b < 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "%s: negative term (%" PRId64 " + %" PRId64 ")",
                    what, a, b);
  if (a > INT64_MAX - b)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "%s = %" PRId64 " + %" PRId64 " overflows int64", what, a, b);
  *out = a + b;
  return BK_OK;
}

bk_status bk__product(const char *fn, const char *what, const int64_t *dims, int rank,
                      int64_t *out) {
  int64_t p = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "%s[%d] = %" PRId64 " is negative", what, i,
                      dims[i]);
  }
  for (int i = 0; i < rank; i++) {
    if (dims[i] == 0) {
      *out = 0;
      return BK_OK;
    }
  }
  for (int i = 0; i < rank; i++) {
    if (p > INT64_MAX / dims[i])
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "product of %s overflows int64 at %s[%d] = %" PRId64,
                      what, what, i, dims[i]);
    p *= dims[i];
  }
  *out = p;
  return BK_OK;
}

bk_status bk__check_size(const char *fn, const char *name, int64_t v) {
  if (v < 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "%s = %" PRId64 " is negative", name, v);
  return BK_OK;
}

bk_status bk__check_flag(const char *fn, const char *name, int v) {
  if (v != 0 && v != 1)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "%s = %d must be 0 or 1", name, v);
  return BK_OK;
}

bk_status bk__check_ptr(const char *fn, const char *name, const void *p) {
  if (!p) return bk__fail(BK_ERR_NULL, fn, "%s is NULL", name);
  return BK_OK;
}

bk_status bk__check_len(const char *fn, const char *name, const bk_buffer *b, int64_t expected) {
  if (b->length != expected)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "%s has length %" PRId64 ", expected %" PRId64, name, b->length, expected);
  return BK_OK;
}

bk_status bk__check_dims(const char *fn, const char *name, const int64_t *dims, int rank, int lo,
                         int64_t *elems) {
  if (rank < lo || rank > BK_MAX_RANK)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "rank = %d outside [%d, %d]", rank, lo,
                    BK_MAX_RANK);
  if (rank > 0 && !dims) return bk__fail(BK_ERR_NULL, fn, "%s is NULL", name);
  return bk__product(fn, name, dims, rank, elems);
}

bk_status bk__check_indices(const char *fn, const uint64_t *indices, int64_t k) {
  if (k > 0 && !indices)
    return bk__fail(BK_ERR_NULL, fn, "indices is NULL with k = %" PRId64, k);
  for (int64_t r = 0; r < k; r++) {
    if (indices[r] > UINT32_MAX)
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                      "indices[%" PRId64 "] = %" PRIu64 " exceeds the index range (max %" PRIu32 ")",
                      r, indices[r], UINT32_MAX);
  }
  return BK_OK;
}

bk_status bk__check_range(const char *fn, const char *name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v >= hi) {
    if (hi <= lo)
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                      "%s = %" PRId64 ": the range [%" PRId64 ", %" PRId64 ") is empty", name, v,
                      lo, hi);
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "%s = %" PRId64 " outside [%" PRId64 ", %" PRId64 ")",
                    name, v, lo, hi);
  }
  return BK_OK;
}
