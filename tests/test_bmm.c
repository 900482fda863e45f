/*
 * test_bmm.c — bk_bmm and bk_bmm_scaled.
 */
#include "testlib.h"

#include <float.h>

/* op(A)[b,i,k] from A stored (batch, m, n), or (batch, n, m) when ta. */
static double op_a(const double *A, int64_t b, int64_t i, int64_t k, int64_t m, int64_t n,
                   int ta) {
  return ta ? A[(b * n + k) * m + i] : A[(b * m + i) * n + k];
}
/* op(B)[b,k,j] from B stored (batch, n, p), or (batch, p, n) when tb. */
static double op_b(const double *B, int64_t b, int64_t k, int64_t j, int64_t n, int64_t p,
                   int tb) {
  return tb ? B[(b * p + j) * n + k] : B[(b * n + k) * p + j];
}

/* float64 reference C = op(A) op(B) and its scale max_ij sum_k |a||b|. */
static double ref_bmm(const double *A, const double *B, double *C, int64_t batch, int64_t m,
                      int64_t n, int64_t p, int ta, int tb) {
  double scale = 0;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < p; j++) {
        double acc = 0, mag = 0;
        for (int64_t k = 0; k < n; k++) {
          const double a = op_a(A, b, i, k, m, n, ta), v = op_b(B, b, k, j, n, p, tb);
          acc += a * v;
          mag += fabs(a * v);
        }
        C[(b * m + i) * p + j] = acc;
        if (mag > scale) scale = mag;
      }
  return scale;
}

/* Stores the logical (batch, r, c) matrices x as (batch, c, r). */
static void transpose(const double *x, double *t, int64_t batch, int64_t r, int64_t c) {
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < r; i++)
      for (int64_t j = 0; j < c; j++) t[(b * c + j) * r + i] = x[(b * r + i) * c + j];
}

/* ---- bk_bmm --------------------------------------------------------------------- */

/* bk_bmm of a and b with the geometry given: exactly want (len values). */
static void bmm_exact(const bk_buffer *a, const bk_buffer *b, int64_t batch, int64_t m, int64_t n,
                      int64_t p, int ta, int tb, const double *want, int64_t len) {
  bk_buffer *y = NULL;
  if (TL_OK(bk_bmm(tl_ctx, a, b, batch, m, n, p, ta, tb, &y)) == BK_OK) TL_BUF_EXACT(y, want, len);
  bk_buffer_release(y);
}

/* A small exact case through all four stored layouts: two batches. */
static void bmm_examples(void) {
  const double A[] = {1, 2, 3, 4, 5, 6, /* (2, 3) */ -1, 0, 2, 0.5, 1, -3};
  const double B[] = {1, 0, 2, 1, -1, 3, /* (3, 2) */ 2, 2, 0, 1, 4, -2};
  const double C[] = {2, 11, 8, 23, /* */ 6, -6, -11, 8};
  double At[12], Bt[12];
  transpose(A, At, 2, 2, 3);
  transpose(B, Bt, 2, 3, 2);
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        bk_buffer *a = tl_buf(dt, ta ? At : A, 12), *b = tl_buf(dt, tb ? Bt : B, 12);
        bmm_exact(a, b, 2, 2, 3, 2, ta, tb, C, 8);
        bk_buffer_release(a);
        bk_buffer_release(b);
      }
  }
}

/* Shapes (batch, m, n, p): degenerate vectors, tile edges of blocked
 * loops, a long contraction. */
static const int64_t bmm_shapes[][4] = {{1, 1, 1, 1},    {2, 3, 5, 4},    {3, 17, 33, 9},
                                        {1, 64, 128, 48}, {4, 31, 1, 7},   {2, 1, 300, 1},
                                        {2, 70, 300, 130}, {1, 5, 2000, 3}, {7, 9, 8, 65}};
#define BMM_SHAPES (sizeof bmm_shapes / sizeof bmm_shapes[0])

/* A random case of one shape: host operands A (la values), B (lb), room
 * for the reference C (lc) and the operands' buffers a, b. */
typedef struct {
  int64_t batch, m, n, p, la, lb, lc;
  double *A, *B, *C;
  bk_buffer *a, *b;
} bmm_case;

static void bmm_case_new(bmm_case *c, const int64_t shape[4]) {
  c->batch = shape[0];
  c->m = shape[1];
  c->n = shape[2];
  c->p = shape[3];
  c->la = c->batch * c->m * c->n;
  c->lb = c->batch * c->n * c->p;
  c->lc = c->batch * c->m * c->p;
  c->A = tl_xmalloc((size_t)c->la * sizeof *c->A);
  c->B = tl_xmalloc((size_t)c->lb * sizeof *c->B);
  c->C = tl_xmalloc((size_t)c->lc * sizeof *c->C);
  c->a = c->b = NULL;
}

/* Fills A with N(0, 1) and B with N(0, 1), or uniform on [-2, 3) when
 * uniform_b, from `seed`, rounds both to dt and makes their buffers; C
 * receives op(A) op(B) for the layout and the result is its scale. */
static double bmm_case_fill(bmm_case *c, bk_dtype dt, uint64_t seed, int uniform_b, int ta,
                            int tb) {
  tl_seed(seed);
  tl_fill_randn(c->A, c->la);
  if (uniform_b)
    tl_fill_uniform(c->B, c->lb, -2, 3);
  else
    tl_fill_randn(c->B, c->lb);
  tl_round(dt, c->A, c->la);
  tl_round(dt, c->B, c->lb);
  c->a = tl_buf(dt, c->A, c->la);
  c->b = tl_buf(dt, c->B, c->lb);
  return ref_bmm(c->A, c->B, c->C, c->batch, c->m, c->n, c->p, ta, tb);
}

/* The operands' buffers must still hold A and B; releases them. */
static void bmm_case_release(bmm_case *c) {
  TL_UNCHANGED(c->a, c->A, c->la);
  TL_UNCHANGED(c->b, c->B, c->lb);
  bk_buffer_release(c->a);
  bk_buffer_release(c->b);
  c->a = c->b = NULL;
}

static void bmm_case_free(bmm_case *c) {
  free(c->A);
  free(c->B);
  free(c->C);
}

static void bmm_random(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < BMM_SHAPES; s++) {
      bmm_case c;
      bmm_case_new(&c, bmm_shapes[s]);
      const int64_t batch = c.batch, m = c.m, n = c.n, p = c.p;
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
          const double scale = bmm_case_fill(&c, dt, 1000 + 10 * s + 2 * ta + tb, 1, ta, tb);
          bk_buffer *y = NULL, *y2 = NULL;
          if (TL_OK(bk_bmm(tl_ctx, c.a, c.b, batch, m, n, p, ta, tb, &y)) == BK_OK) {
            TL_BUF_CLOSE(y, c.C, c.lc, tl_tol_contract(dt, (double)n), scale);
            if (TL_OK(bk_bmm(tl_ctx, c.a, c.b, batch, m, n, p, ta, tb, &y2)) == BK_OK)
              TL_CHECK(tl_same_bits(y, y2), "bmm is not deterministic");
          }
          bk_buffer_release(y);
          bk_buffer_release(y2);
          bmm_case_release(&c);
        }
      bmm_case_free(&c);
    }
  }
}

static void bmm_empty(void) {
  const double v[24] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const double zeros[12] = {0};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    bk_buffer *e = tl_buf(dt, NULL, 0), *f = tl_buf(dt, v, 24);
    /* n == 0: (batch, m, p) zeros, for every layout. */
    for (int t = 0; t < 4; t++) bmm_exact(e, e, 2, 3, 0, 2, t & 1, t >> 1, zeros, 12);
    /* batch, m or p zero: an empty result, whatever the other operand holds. */
    bmm_exact(e, e, 0, 3, 4, 2, 0, 0, NULL, 0);
    bmm_exact(e, f, 2, 0, 3, 4, 0, 1, NULL, 0);
    bmm_exact(f, e, 2, 4, 3, 0, 1, 0, NULL, 0);
    bmm_exact(e, e, 0, 0, 0, 0, 1, 1, NULL, 0);
    bk_buffer_release(e);
    bk_buffer_release(f);
  }
}

static void bmm_errors(void) {
  double v[12] = {0};
  bk_buffer *a = tl_buf(BK_F32, v, 6), *b = tl_buf(BK_F32, v, 12), *d = tl_buf(BK_F64, v, 12);
  bk_buffer *y = (bk_buffer *)&y;
  /* A (1, 2, 3) x B (1, 3, 4). */
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, 2, 3, 4, 0, 0, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_bmm(tl_ctx, NULL, b, 1, 2, 3, 4, 0, 0, &y), BK_ERR_NULL, "A");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_bmm(tl_ctx, a, NULL, 1, 2, 3, 4, 0, 0, &y), BK_ERR_NULL, "B");
  TL_REJECT(bk_bmm(tl_ctx, a, b, -1, 2, 3, 4, 0, 0, &y), BK_ERR_INVALID_ARGUMENT, "batch = -1");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, -2, 3, 4, 0, 0, &y), BK_ERR_INVALID_ARGUMENT, "m = -2");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, 2, -3, 4, 0, 0, &y), BK_ERR_INVALID_ARGUMENT, "n = -3");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, 2, 3, -4, 0, 0, &y), BK_ERR_INVALID_ARGUMENT, "p = -4");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, 2, 3, 4, 2, 0, &y), BK_ERR_INVALID_ARGUMENT, "trans_a = 2");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, 2, 3, 4, -1, 0, &y), BK_ERR_INVALID_ARGUMENT, "trans_a = -1");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, 2, 3, 4, 0, 2, &y), BK_ERR_INVALID_ARGUMENT, "trans_b = 2");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, 2, 3, 4, 0, -1, &y), BK_ERR_INVALID_ARGUMENT, "trans_b = -1");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, 3, 3, 4, 0, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "A has length 6, expected 9");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, 2, 3, 5, 0, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "B has length 12, expected 15");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 2, 2, 3, 4, 1, 1, &y), BK_ERR_INVALID_ARGUMENT, "A has length");
  TL_REJECT(bk_bmm(tl_ctx, a, b, INT64_MAX, 2, 3, 4, 0, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "overflow");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, INT64_MAX / 2, 3, 4, 0, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "batch*m*n");
  TL_REJECT(bk_bmm(tl_ctx, a, b, 1, 2, 3, INT64_MAX / 2, 0, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "batch*n*p");
  TL_REJECT(bk_bmm(tl_ctx, a, d, 1, 2, 3, 4, 0, 0, &y), BK_ERR_DTYPE, "B");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) TL_REJECT(bk_bmm(other, a, b, 1, 2, 3, 4, 0, 0, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
  bk_buffer_release(a);
  bk_buffer_release(b);
  bk_buffer_release(d);
}

/* ---- bk_bmm_scaled ---------------------------------------------------------------- */

/* Runs one scaled product of (1, m, n) x (1, n, p) host values and returns
 * the flag (-1 when the call failed); *y receives the result. */
static int scaled_flag(bk_dtype dt, const double *A, const double *B, int64_t m, int64_t n,
                       int64_t p, double scale, bk_buffer **y) {
  bk_buffer *a = tl_buf(dt, A, m * n), *b = tl_buf(dt, B, n * p);
  int flag = -1;
  *y = NULL;
  if (TL_OK(bk_bmm_scaled(tl_ctx, a, b, 1, m, n, p, 0, 0, scale, y, &flag)) != BK_OK) flag = -1;
  bk_buffer_release(a);
  bk_buffer_release(b);
  return flag;
}

/* The contract's example: A = B = [[1e30]], scale 1e-30 gives 1e30 in
 * float32 (the unsplit product 1e60 overflows float32), and the same in
 * float64 one step further out. */
static void scaled_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double big[2] = {1e30, 1e300}, small[2] = {1e-30, 1e-300};
    for (int e = 0; e < 2; e++) {
      if (dt == BK_F32 && e == 1) continue;
      bk_buffer *y = NULL;
      double A[1] = {big[e]}, ref[1];
      tl_round(dt, A, 1);
      ref[0] = A[0] * (A[0] * small[e]);
      int flag = scaled_flag(dt, A, A, 1, 1, 1, small[e], &y);
      TL_CHECK(flag == 0, "flag %d for the contract's example", flag);
      if (y) TL_BUF_CLOSE(y, ref, 1, dt == BK_F32 ? tl_tol_elem(dt) : 1e-6, ref[0]);
      bk_buffer_release(y);
      /* Underflow the other way: A = B = [[1e-30]], scale 1e30. */
      double S[1] = {small[e]};
      tl_round(dt, S, 1);
      ref[0] = S[0] * (S[0] * big[e]);
      flag = scaled_flag(dt, S, S, 1, 1, 1, big[e], &y);
      TL_CHECK(flag == 0, "flag %d for the underflow example", flag);
      if (y) TL_BUF_CLOSE(y, ref, 1, dt == BK_F32 ? tl_tol_elem(dt) : 1e-6, ref[0]);
      bk_buffer_release(y);
    }
    /* An operand spanning a wide range: splitting the scale evenly by the
     * largest entries would push A's small entry out of range; both results
     * are representable and must come back. */
    {
      const double hi = dt == BK_F32 ? 1e30 : 1e300, lo = dt == BK_F32 ? 1e-30 : 1e-300;
      double Aw[2] = {hi, lo}, Bw[1] = {1e10};
      tl_round(dt, Aw, 2);
      tl_round(dt, Bw, 1);
      const double ref[2] = {Aw[0] * (Bw[0] * 1e-10), Aw[1] * (Bw[0] * 1e-10)};
      bk_buffer *y = NULL;
      int flag = scaled_flag(dt, Aw, Bw, 2, 1, 1, 1e-10, &y);
      TL_CHECK(flag == 0, "flag %d for a wide-range operand", flag);
      if (y) {
        double *got = tl_read(y);
        for (int i = 0; i < 2; i++)
          TL_CHECK(fabs(got[i] - ref[i]) <= 4 * tl_tol_elem(dt) * fabs(ref[i]),
                   "wide-range entry %d = %.17g, expected %.17g", i, got[i], ref[i]);
        free(got);
      }
      bk_buffer_release(y);
    }
    /* A 2x2 case: scale 1/3 (not a power of two) splits exactly too. */
    const double A[] = {1, 2, 3, 4}, B[] = {5, 6, 7, 8};
    const double ref[] = {19.0 / 3, 22.0 / 3, 43.0 / 3, 50.0 / 3};
    bk_buffer *y = NULL;
    int flag = scaled_flag(dt, A, B, 2, 2, 2, 1.0 / 3, &y);
    TL_CHECK(flag == 0, "flag %d for a plain case", flag);
    if (y) TL_BUF_CLOSE(y, ref, 4, tl_tol_elem(dt), 50.0 / 3);
    bk_buffer_release(y);
  }
}

/* N(0,1) operands with scale 1/sqrt(n): results near 1, no flag; values
 * match scale * op(A) op(B) for every layout. */
static void scaled_random(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < BMM_SHAPES; s++) {
      bmm_case c;
      bmm_case_new(&c, bmm_shapes[s]);
      const int64_t batch = c.batch, m = c.m, n = c.n, p = c.p;
      const double scale = 1.0 / sqrt((double)n);
      for (int t = 0; t < 4; t++) {
        const int ta = t & 1, tb = t >> 1;
        const double mag = bmm_case_fill(&c, dt, 2000 + 10 * s + t, 0, ta, tb);
        int tiny = 0;
        for (int64_t i = 0; i < c.lc; i++) {
          c.C[i] *= scale;
          if (fabs(c.C[i]) < (dt == BK_F32 ? FLT_MIN : DBL_MIN)) tiny = 1;
        }
        bk_buffer *y = NULL, *y2 = NULL;
        int flag = -1, flag2 = -1;
        if (TL_OK(bk_bmm_scaled(tl_ctx, c.a, c.b, batch, m, n, p, ta, tb, scale, &y, &flag)) ==
            BK_OK) {
          TL_CHECK(flag == tiny, "flag %d, expected %d", flag, tiny);
          TL_BUF_CLOSE(y, c.C, c.lc, tl_tol_contract(dt, (double)n), mag * scale);
          if (TL_OK(bk_bmm_scaled(tl_ctx, c.a, c.b, batch, m, n, p, ta, tb, scale, &y2, &flag2)) ==
              BK_OK)
            TL_CHECK(tl_same_bits(y, y2) && flag == flag2, "bmm_scaled is not deterministic");
        }
        bk_buffer_release(y);
        bk_buffer_release(y2);
        bmm_case_release(&c);
      }
      bmm_case_free(&c);
    }
  }
}

/* Each range-loss condition raises the flag, and values just inside each
 * threshold do not. */
static void scaled_flags(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const int f32 = dt == BK_F32;
    bk_buffer *y = NULL;
    /* Non-finite inputs. */
    const double nan_a[] = {1, NAN, 2, 3}, inf_b[] = {1, 2, INFINITY, 4}, ok[] = {1, 2, 3, 4};
    TL_CHECK(scaled_flag(dt, nan_a, ok, 2, 2, 2, 1.0, &y) == 1, "NaN in A not flagged");
    bk_buffer_release(y);
    TL_CHECK(scaled_flag(dt, ok, inf_b, 2, 2, 2, 1.0, &y) == 1, "Inf in B not flagged");
    bk_buffer_release(y);
    /* A NaN in a row that the result never reaches through a finite entry
     * still flags: every input entry counts. */
    const double nan_only[] = {NAN};
    const double one[] = {1};
    TL_CHECK(scaled_flag(dt, nan_only, one, 1, 1, 1, 1.0, &y) == 1, "NaN alone not flagged");
    bk_buffer_release(y);
    TL_CHECK(scaled_flag(dt, ok, ok, 2, 2, 2, 1.0, &y) == 0, "finite inputs flagged");
    bk_buffer_release(y);
    /* A non-finite result from finite inputs: the product overflows. */
    const double huge[] = {f32 ? 1e30 : 1e300};
    TL_CHECK(scaled_flag(dt, huge, huge, 1, 1, 1, 1.0, &y) == 1, "overflowing result not flagged");
    bk_buffer_release(y);
    /* A result below the smallest normal, and one just above it. */
    const double t1[] = {f32 ? 1e-20 : 1e-160}, t2[] = {f32 ? 1e-20 : 1e-160};
    TL_CHECK(scaled_flag(dt, t1, t2, 1, 1, 1, 1.0, &y) == 1, "subnormal result not flagged");
    bk_buffer_release(y);
    const double n1[] = {f32 ? 1e-19 : 1e-154}, n2[] = {f32 ? 2e-19 : 3e-154};
    TL_CHECK(scaled_flag(dt, n1, n2, 1, 1, 1, 1.0, &y) == 0, "normal tiny result flagged");
    bk_buffer_release(y);
    /* The same through the scale alone. */
    const double tiny = f32 ? (double)FLT_MIN : DBL_MIN;
    TL_CHECK(scaled_flag(dt, one, one, 1, 1, 1, tiny / 2, &y) == 1, "scale to subnormal not flagged");
    bk_buffer_release(y);
    TL_CHECK(scaled_flag(dt, one, one, 1, 1, 1, tiny * 2, &y) == 0, "scale to 2*min flagged");
    if (y) TL_BUF_EXACT(y, ((double[]){tiny * 2}), 1);
    bk_buffer_release(y);
    /* An exact zero result. */
    const double za[] = {1, 1}, zb[] = {1, -1};
    TL_CHECK(scaled_flag(dt, za, zb, 1, 2, 1, 1.0, &y) == 1, "zero result not flagged");
    if (y) TL_BUF_EXACT(y, ((double[]){0}), 1);
    bk_buffer_release(y);
    /* The bound scale*n*max|A|*max|B|: over the dtype's largest value with a
     * representable result (cancellation), and just under it. */
    const double v_over = f32 ? 1.5e19 : 1.2e154, v_under = f32 ? 1e19 : 9e153;
    double ba[2], bb[2];
    ba[0] = ba[1] = v_over;
    bb[0] = v_over;
    bb[1] = -v_over / 2;
    tl_round(dt, ba, 2);
    tl_round(dt, bb, 2);
    double ref = ba[0] * bb[0] + ba[1] * bb[1];
    TL_CHECK(scaled_flag(dt, ba, bb, 1, 2, 1, 1.0, &y) == 1, "bound overflow not flagged");
    if (y) TL_BUF_CLOSE(y, &ref, 1, tl_tol_contract(dt, 2), 3 * ref);
    bk_buffer_release(y);
    /* Halving the scale brings the bound under the limit. */
    ref *= 0.5;
    TL_CHECK(scaled_flag(dt, ba, bb, 1, 2, 1, 0.5, &y) == 0, "halved bound flagged");
    if (y) TL_BUF_CLOSE(y, &ref, 1, tl_tol_contract(dt, 2), 3 * ref);
    bk_buffer_release(y);
    ba[0] = ba[1] = v_under;
    bb[0] = v_under;
    bb[1] = -v_under / 2;
    tl_round(dt, ba, 2);
    tl_round(dt, bb, 2);
    TL_CHECK(scaled_flag(dt, ba, bb, 1, 2, 1, 1.0, &y) == 0, "bound under the limit flagged");
    bk_buffer_release(y);
  }
}

/* bk_bmm_scaled of a and b with the geometry given: exactly want (len
 * values) and the flag want_flag; `what` names the case in messages. */
static void scaled_exact(const bk_buffer *a, const bk_buffer *b, int64_t batch, int64_t m,
                         int64_t n, int64_t p, int ta, int tb, double scale, const double *want,
                         int64_t len, int want_flag, const char *what) {
  bk_buffer *y = NULL;
  int flag = -1;
  if (TL_OK(bk_bmm_scaled(tl_ctx, a, b, batch, m, n, p, ta, tb, scale, &y, &flag)) == BK_OK) {
    TL_BUF_EXACT(y, want, len);
    TL_CHECK(flag == want_flag, "%s flag %d", what, flag);
  }
  bk_buffer_release(y);
}

static void scaled_empty(void) {
  const double v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, NAN};
  const double zeros[6] = {0};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    bk_buffer *e = tl_buf(dt, NULL, 0), *f = tl_buf(dt, v, 12);
    /* n == 0 with a nonempty result: zeros, flagged (below smallest normal). */
    scaled_exact(e, e, 1, 2, 0, 3, 0, 1, 2.0, zeros, 6, 1, "n == 0");
    /* An empty result: flag 0, even beside an operand holding NaN. */
    scaled_exact(e, e, 0, 2, 3, 2, 0, 0, 1.0, NULL, 0, 0, "empty batch");
    scaled_exact(e, f, 1, 0, 3, 4, 0, 0, 1.0, NULL, 0, 0, "empty m");
    scaled_exact(f, e, 1, 4, 3, 0, 1, 1, 1.0, NULL, 0, 0, "empty p");
    bk_buffer_release(e);
    bk_buffer_release(f);
  }
}

static void scaled_errors(void) {
  double v[12] = {0};
  bk_buffer *a = tl_buf(BK_F64, v, 6), *b = tl_buf(BK_F64, v, 12), *d = tl_buf(BK_F32, v, 12);
  bk_buffer *y = (bk_buffer *)&y;
  int flag = 7;
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, 1, 2, 3, 4, 0, 0, 1.0, NULL, &flag), BK_ERR_NULL, "out");
  TL_CHECK(flag == 0, "range_loss not cleared on failure");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, 1, 2, 3, 4, 0, 0, 1.0, &y, NULL), BK_ERR_NULL,
            "range_loss");
  TL_CHECK(y == NULL, "out not cleared on failure");
  const double bad_scales[] = {0.0, -1.0, NAN, INFINITY, -INFINITY, -0.0};
  for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
    y = (bk_buffer *)&y;
    flag = 7;
    TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, 1, 2, 3, 4, 0, 0, bad_scales[i], &y, &flag),
              BK_ERR_INVALID_ARGUMENT, "scale");
    TL_CHECK(y == NULL && flag == 0, "out-parameters not cleared for scale %g", bad_scales[i]);
  }
  flag = 7;
  TL_REJECT(bk_bmm_scaled(tl_ctx, NULL, b, 1, 2, 3, 4, 0, 0, 1.0, &y, &flag), BK_ERR_NULL, "A");
  TL_CHECK(flag == 0, "range_loss not cleared on failure");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, NULL, 1, 2, 3, 4, 0, 0, 1.0, &y, &flag), BK_ERR_NULL, "B");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, 1, -2, 3, 4, 0, 0, 1.0, &y, &flag),
            BK_ERR_INVALID_ARGUMENT, "m = -2");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, -1, 2, 3, 4, 0, 0, 1.0, &y, &flag),
            BK_ERR_INVALID_ARGUMENT, "batch = -1");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, 1, 2, -3, 4, 0, 0, 1.0, &y, &flag),
            BK_ERR_INVALID_ARGUMENT, "n = -3");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, 1, 2, 3, -4, 0, 0, 1.0, &y, &flag),
            BK_ERR_INVALID_ARGUMENT, "p = -4");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, 1, 2, 3, 4, 2, 0, 1.0, &y, &flag),
            BK_ERR_INVALID_ARGUMENT, "trans_a");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, 1, 2, 3, 4, 0, -1, 1.0, &y, &flag),
            BK_ERR_INVALID_ARGUMENT, "trans_b");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, 1, 2, 3, 5, 0, 0, 1.0, &y, &flag),
            BK_ERR_INVALID_ARGUMENT, "B has length 12, expected 15");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, 1, 3, 3, 4, 0, 0, 1.0, &y, &flag),
            BK_ERR_INVALID_ARGUMENT, "A has length 6, expected 9");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, b, INT64_MAX, 2, 3, 4, 0, 0, 1.0, &y, &flag),
            BK_ERR_INVALID_ARGUMENT, "overflow");
  TL_REJECT(bk_bmm_scaled(tl_ctx, a, d, 1, 2, 3, 4, 0, 0, 1.0, &y, &flag), BK_ERR_DTYPE, "B");
  TL_CHECK(y == NULL && flag == 0, "out-parameters not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other)
    TL_REJECT(bk_bmm_scaled(other, a, b, 1, 2, 3, 4, 0, 0, 1.0, &y, &flag),
              BK_ERR_DEVICE_MISMATCH, "ctx");
  bk_buffer_release(a);
  bk_buffer_release(b);
  bk_buffer_release(d);
}

int main(void) {
  tl_init();
  TL_RUN(bmm_examples);
  TL_RUN(bmm_random);
  TL_RUN(bmm_empty);
  TL_RUN(bmm_errors);
  TL_RUN(scaled_examples);
  TL_RUN(scaled_random);
  TL_RUN(scaled_flags);
  TL_RUN(scaled_empty);
  TL_RUN(scaled_errors);
  return tl_finish();
}
