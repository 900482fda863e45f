/*
 * test_layernorm.c — bk_layernorm_forward, bk_layernorm_backward.
 *
 * References are computed in long double on the host from the values the
 * kernels see (inputs rounded to the dtype; the backward from the saved
 * normalized and inv_std as stored).
 */
#include "testlib.h"
#include "core/internal.h" /* allocation-failure injection */

typedef long double ld;

/* ---- references ---------------------------------------------------------------- */

static void ref_forward(const double *x, const double *gamma, const double *beta, int64_t rows,
                        int64_t cols, double eps, double *out, double *nrm, double *istd) {
  for (int64_t r = 0; r < rows; r++) {
    ld mu = 0, var = 0;
    for (int64_t j = 0; j < cols; j++) mu += x[r * cols + j];
    mu /= cols;
    for (int64_t j = 0; j < cols; j++) var += (x[r * cols + j] - mu) * (x[r * cols + j] - mu);
    var /= cols;
    ld is = 1.0L / sqrtl(var + eps);
    istd[r] = (double)is;
    for (int64_t j = 0; j < cols; j++) {
      ld v = (x[r * cols + j] - mu) * is;
      nrm[r * cols + j] = (double)v;
      out[r * cols + j] = (double)(v * gamma[j] + beta[j]);
    }
  }
}

/* Also returns the natural magnitudes of dx (per-row bound, max over rows),
 * dgamma and dbeta (sums of |terms|). */
static void ref_backward(const double *dout, const double *nrm, const double *istd,
                         const double *gamma, int64_t rows, int64_t cols, double *dx,
                         double *dgamma, double *dbeta, double *scale_dx, double *scale_dg,
                         double *scale_db) {
  *scale_dx = *scale_dg = *scale_db = 1e-300;
  for (int64_t j = 0; j < cols; j++) {
    ld sg = 0, sb = 0, ag = 0, ab = 0;
    for (int64_t r = 0; r < rows; r++) {
      sg += (ld)dout[r * cols + j] * nrm[r * cols + j];
      sb += dout[r * cols + j];
      ag += fabsl((ld)dout[r * cols + j] * nrm[r * cols + j]);
      ab += fabs(dout[r * cols + j]);
    }
    dgamma[j] = (double)sg;
    dbeta[j] = (double)sb;
    if ((double)ag > *scale_dg) *scale_dg = (double)ag;
    if ((double)ab > *scale_db) *scale_db = (double)ab;
  }
  for (int64_t r = 0; r < rows; r++) {
    ld s1 = 0, s2 = 0, a1 = 0, a2 = 0, gmax = 0, nmax = 0;
    for (int64_t j = 0; j < cols; j++) {
      ld g = (ld)dout[r * cols + j] * gamma[j];
      s1 += g;
      s2 += g * nrm[r * cols + j];
      a1 += fabsl(g);
      a2 += fabsl(g * nrm[r * cols + j]);
      if (fabsl(g) > gmax) gmax = fabsl(g);
      if (fabs(nrm[r * cols + j]) > nmax) nmax = fabs(nrm[r * cols + j]);
    }
    for (int64_t j = 0; j < cols; j++) {
      ld g = (ld)dout[r * cols + j] * gamma[j];
      dx[r * cols + j] = (double)((ld)istd[r] / cols * (cols * g - s1 - nrm[r * cols + j] * s2));
    }
    double mag = (double)((ld)fabs(istd[r]) / cols * (cols * gmax + a1 + nmax * a2));
    if (mag > *scale_dx) *scale_dx = mag;
  }
}

/* ---- calls ---------------------------------------------------------------------------- */

/* The forward of in (x, gamma, beta) into f (out, normalized, inv_std). */
static bk_status forward3(bk_buffer *const in[3], int64_t rows, int64_t cols, double eps,
                          bk_buffer *f[3]) {
  return bk_layernorm_forward(tl_ctx, in[0], in[1], in[2], rows, cols, eps, &f[0], &f[1], &f[2]);
}

/* The backward from dout and the saved f[1], f[2] of a forward into g (dx,
 * dgamma, dbeta). */
static bk_status backward3(const bk_buffer *dout, bk_buffer *const f[3], const bk_buffer *gamma,
                           int64_t rows, int64_t cols, bk_buffer *g[3]) {
  return bk_layernorm_backward(tl_ctx, dout, f[1], f[2], gamma, rows, cols, &g[0], &g[1], &g[2]);
}

/* The buffers of x (rows, cols), gamma and beta (cols) in dt, into in. */
static void inputs3(bk_dtype dt, const double *x, const double *gamma, const double *beta,
                    int64_t rows, int64_t cols, bk_buffer *in[3]) {
  in[0] = tl_buf(dt, x, rows * cols);
  in[1] = tl_buf(dt, gamma, cols);
  in[2] = tl_buf(dt, beta, cols);
}

/* The buffers inputs3 made still hold x, gamma and beta. */
static void inputs3_unchanged(bk_buffer *const in[3], const double *x, const double *gamma,
                              const double *beta, int64_t rows, int64_t cols) {
  tl_unchanged_at(__FILE__, __LINE__, "x", in[0], x, rows * cols);
  tl_unchanged_at(__FILE__, __LINE__, "gamma", in[1], gamma, cols);
  tl_unchanged_at(__FILE__, __LINE__, "beta", in[2], beta, cols);
}

/* Whether two sets of three results hold the same bits. */
static int same_bits3(bk_buffer *const a[3], bk_buffer *const b[3]) {
  return tl_same_bits(a[0], b[0]) && tl_same_bits(a[1], b[1]) && tl_same_bits(a[2], b[2]);
}

static void release3(bk_buffer *b[3]) {
  for (int k = 0; k < 3; k++) {
    bk_buffer_release(b[k]);
    b[k] = NULL;
  }
}

/* ---- examples ---------------------------------------------------------------------- */

static const double ex_x[] = {0.1, 0.2, 0, -0.1, -0.3, 0.5, 0.2, 0.1};
static const double ex_gamma[] = {1, 0.9, 1.1, 1};
static const double ex_beta[] = {0, 0.1, -0.1, 0};

static double ex_tol(bk_dtype dt) { return dt == BK_F32 ? tl_tol_red(dt) : 1e-6; }

static void examples(void) {
  static const double out[] = {0.447035,  1.306994, -0.591738, -1.341104,
                               -1.485206, 1.279428, 0.188305,  -0.087365};
  static const double istd[] = {8.940696, 3.494603};
  static const double dx[] = {0.178671,  -0.358057, 0.715399, -0.536013,
                              -0.136033, -0.229431, 0.373466, -0.008002};
  static const double dgamma[] = {-1.038171, 2.651581, -0.184940, -1.428470};
  static const double dbeta[] = {2, 2, 2, 2};
  const double ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    bk_buffer *in[3], *f[3] = {NULL};
    inputs3(dt, ex_x, ex_gamma, ex_beta, 2, 4, in);
    if (TL_OK(forward3(in, 2, 4, 1e-5, f)) == BK_OK) {
      TL_BUF_CLOSE(f[0], out, 8, ex_tol(dt), 1.5);
      TL_BUF_CLOSE(f[2], istd, 2, ex_tol(dt), 9.0);
      bk_buffer *dout = tl_buf(dt, ones, 8), *g[3] = {NULL};
      if (TL_OK(backward3(dout, f, in[1], 2, 4, g)) == BK_OK) {
        TL_BUF_CLOSE(g[0], dx, 8, ex_tol(dt), 1.0);
        TL_BUF_CLOSE(g[1], dgamma, 4, ex_tol(dt), 3.0);
        TL_BUF_EXACT(g[2], dbeta, 4);
      }
      release3(g);
      bk_buffer_release(dout);
    }
    inputs3_unchanged(in, ex_x, ex_gamma, ex_beta, 2, 4);
    release3(f);
    release3(in);
  }
}

/* ---- random cases ------------------------------------------------------------------------ */

typedef struct shape {
  int64_t rows, cols;
  double mean; /* offset added to x: a large mean tests the two-pass statistics */
  double eps;
} shape;

static const shape shapes[] = {
    {1, 1, 0, 1e-5},    {3, 7, 0, 1e-5},   {17, 1000, 0, 1e-5}, {64, 33, 0, 0.1},
    {5, 257, 1e4, 0},   {2, 20000, 0, 1e-5}, {300, 130, 0, 1e-5}, {4, 64, 1e3, 1e-5},
    /* Many rows per block in the CUDA backward's shared-memory column sums
     * (widths 513..4096), and the register kernel just past them. */
    {3000, 1024, 0, 1e-5}, {2000, 4096, 0, 1e-5}, {600, 4100, 0, 1e-5}, {1000, 258, 0, 1e-5},
    /* More CUDA backward widths: threads with fewer vectors than others
     * (516), an odd row count per block (777), float64 at 2048, and 1030
     * (float64 16-byte access, float32 scalar). */
    {1000, 516, 0, 1e-5}, {777, 2048, 0, 1e-5}, {401, 1030, 0, 1e-5},
    /* The CUDA forward's narrow rows (G lanes per row, four rows per
     * group): full groups (32, 64, 128), idle lanes (12, 96), one lane per
     * row (4), rows not a multiple of a warp's rows, and a large mean. */
    {5003, 32, 0, 1e-5}, {3001, 64, 0, 1e-5}, {2000, 128, 0, 1e-5}, {1001, 12, 0, 1e-5},
    {999, 96, 0, 1e-5},  {777, 4, 0, 1e-5},   {301, 2, 0, 1e-5},    {513, 48, 1e3, 1e-5},
    /* The CUDA forward's wide rows read once through shared memory (f32 >
     * 8192 columns, f64 > 4096, 16-byte access): clusters of 4..16 CTAs per
     * row (few rows), a shorter last slice (20004, 10002), a large mean,
     * float64 slices of 128 KB (262144), f32 10002 on the scalar path, and a
     * block per row with a tail vector (270 x 8196 f32; f64 clusters of 2). */
    {3, 16384, 1e3, 1e-5}, {5, 20004, 0, 1e-5}, {2, 65536, 0, 1e-5}, {2, 262144, 0, 1e-5},
    {3, 8192, 0, 1e-5},    {5, 10002, 0, 1e-5}, {2, 32768, 0, 1e-5}, {2, 131072, 1e2, 1e-5},
    {270, 8196, 0, 1e-5},
    /* The CUDA backward's shared-memory kernel: rows not a multiple of the
     * grid (blocks with one row more than others), one row per block, and
     * threads with unequal vector counts. */
    {1001, 4096, 0, 1e-5}, {3, 4096, 0, 1e-5},   {1001, 516, 0, 1e-5},
    /* The same kernel with the last thread one vector short (4092), thread
     * 0 one vector more than the others (2052), and blocks of 3 and 4 rows
     * (1300 x 4096 at 396 blocks). */
    {1001, 4092, 0, 1e-5}, {1001, 2052, 0, 1e-5}, {1300, 4096, 0, 1e-5},
};

static void random_case(bk_dtype dt, const shape *sh, uint64_t seed) {
  const int64_t rows = sh->rows, cols = sh->cols, n = rows * cols;
  double *x = tl_xmalloc((size_t)n * sizeof *x), *gamma = tl_xmalloc((size_t)cols * sizeof *gamma);
  double *beta = tl_xmalloc((size_t)cols * sizeof *beta);
  double *dout = tl_xmalloc((size_t)n * sizeof *dout);
  double *rout = tl_xmalloc((size_t)n * sizeof *rout), *rn = tl_xmalloc((size_t)n * sizeof *rn);
  double *rs = tl_xmalloc((size_t)rows * sizeof *rs), *rdx = tl_xmalloc((size_t)n * sizeof *rdx);
  double *rdg = tl_xmalloc((size_t)cols * sizeof *rdg);
  double *rdb = tl_xmalloc((size_t)cols * sizeof *rdb);
  tl_seed(seed);
  tl_fill_randn(x, n);
  for (int64_t i = 0; i < n; i++) x[i] += sh->mean;
  tl_fill_uniform(gamma, cols, 0.5, 1.5);
  tl_fill_uniform(beta, cols, -0.5, 0.5);
  tl_fill_randn(dout, n);
  tl_round(dt, x, n);
  tl_round(dt, gamma, cols);
  tl_round(dt, beta, cols);
  tl_round(dt, dout, n);
  ref_forward(x, gamma, beta, rows, cols, sh->eps, rout, rn, rs);
  double nmax = tl_absmax(rn, n, 1.0), omax = 0;
  for (int64_t i = 0; i < n; i++) {
    double m = fabs(rn[i] * gamma[i % cols]) + fabs(beta[i % cols]);
    if (m > omax) omax = m;
  }

  bk_buffer *in[3], *f[3] = {NULL}, *f2[3] = {NULL};
  inputs3(dt, x, gamma, beta, rows, cols, in);
  if (TL_OK(forward3(in, rows, cols, sh->eps, f)) == BK_OK) {
    int ok = TL_BUF_CLOSE(f[0], rout, n, tl_tol_red(dt), omax);
    ok &= TL_BUF_CLOSE(f[1], rn, n, tl_tol_red(dt), nmax);
    ok &= TL_BUF_CLOSE(f[2], rs, rows, tl_tol_red(dt), tl_absmax(rs, rows, 0));
    if (!ok)
      fprintf(stderr, "  (forward %s rows %" PRId64 " cols %" PRId64 ")\n", tl_dtname(dt), rows,
              cols);
    if (TL_OK(forward3(in, rows, cols, sh->eps, f2)) == BK_OK)
      TL_CHECK(same_bits3(f, f2), "layernorm_forward is not deterministic");

    /* Backward from the saved values as stored. */
    double *sn = tl_read(f[1]), *ss = tl_read(f[2]), sdx, sdg, sdb;
    ref_backward(dout, sn, ss, gamma, rows, cols, rdx, rdg, rdb, &sdx, &sdg, &sdb);
    bk_buffer *bd = tl_buf(dt, dout, n), *g[3] = {NULL}, *g2[3] = {NULL};
    if (TL_OK(backward3(bd, f, in[1], rows, cols, g)) == BK_OK) {
      ok = TL_BUF_CLOSE(g[0], rdx, n, tl_tol_red(dt), sdx);
      ok &= TL_BUF_CLOSE(g[1], rdg, cols, tl_tol_red(dt), sdg);
      ok &= TL_BUF_CLOSE(g[2], rdb, cols, tl_tol_red(dt), sdb);
      if (!ok)
        fprintf(stderr, "  (backward %s rows %" PRId64 " cols %" PRId64 ")\n", tl_dtname(dt),
                rows, cols);
      if (TL_OK(backward3(bd, f, in[1], rows, cols, g2)) == BK_OK)
        TL_CHECK(same_bits3(g, g2), "layernorm_backward is not deterministic");
    }
    TL_UNCHANGED(bd, dout, n);
    TL_UNCHANGED(f[1], sn, n);
    TL_UNCHANGED(f[2], ss, rows);
    release3(g);
    release3(g2);
    bk_buffer_release(bd);
    free(sn);
    free(ss);
  }
  inputs3_unchanged(in, x, gamma, beta, rows, cols);
  release3(f);
  release3(f2);
  release3(in);
  free(x);
  free(gamma);
  free(beta);
  free(dout);
  free(rout);
  free(rn);
  free(rs);
  free(rdx);
  free(rdg);
  free(rdb);
}

static void random_cases(void) {
  for (int d = 0; d < TL_DTYPES; d++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      random_case(tl_dtypes[d], &shapes[s], 100 + s);
}

/* CUDA only (too large for the host backend's quick run): the float32
 * backward with tens of rows per block (10007 x 2052), so the column
 * partials of every block fold many rows; rows are not a multiple of the
 * grid. */
static const shape gpu_shapes[] = {
    {10007, 2052, 0, 1e-5},
};

/* CUDA only: wide rows whose statistics the blocks of a cluster exchange
 * (rows over 4096 16-byte vectors, rows*C >= 2*SMs; on a 132-SM device).
 * 600 x 16388: float32 C = 2 with shares of 2049 and 2048 vectors (thread
 * 0 holds one vector more), about five rows a cluster, so the stage and
 * both exchange parities cycle; float64 C = 4, about ten rows a cluster.
 * 40 x 65540 (large mean): float32 C = 8, float64 C = 16, last shares a
 * few vectors short, two or three rows a cluster. 20 x 262144: float32
 * C = 16 with full 4096-vector shares, float64 the 512-thread kernel with
 * full 8192-vector shares, two or three rows a cluster (few rows); 18 x
 * 262140 the same with a short last share. 140 x 32768: float32 C = 2,
 * float64 C = 4, full shares. */
static const shape gpu_wide_shapes[] = {
    {600, 16388, 0, 1e-5}, {40, 65540, 1e3, 1e-5},  {20, 262144, 0, 1e-5},
    {18, 262140, 0, 1e-5}, {140, 32768, 0, 1e-5},
};

/* CUDA only: the backward's row template at the edges of each strategy.
 * Lane groups (f32 up to 128 columns, f64 up to 64): one lane per row (1),
 * idle lanes in each group (3, 5, 31), full groups (2, 32), two and four
 * columns per lane (33, 64, 65, 127, 128), rows that are no multiple of a
 * block's batch, many rows. A block per row: one warp with idle lanes
 * (129), a partial last warp (257), widths that are no multiple of the
 * vector width (4093 prime, 8191), 16-byte rows (4096, and 8192 at the
 * widest f32 block), one row, few rows, rows that are no multiple of the
 * grid. Slices (rows wider than the widest block: f32 8192, f64 4096
 * columns): a last slice of one column (8193, f64 4097), odd widths, few
 * long rows. Under BK_TEST_SMALL (the sanitizer runs) only these shapes of
 * at most LN_SMALL_ELEMS elements, and none of the larger lists above. */
static const shape gpu_vjp_shapes[] = {
    {1, 1, 0, 1e-5},      {100003, 1, 0, 1e-5}, {50001, 3, 0, 1e-5}, {7919, 5, 0, 1e-5},
    {4099, 31, 0, 1e-5},  {3001, 32, 0, 1e-5},  {2053, 33, 0, 1e-5}, {1, 64, 0, 1e-5},
    {1999, 65, 0, 1e-5},  {1031, 127, 0, 1e-5}, {1024, 128, 0, 1e-5}, {1, 129, 0, 1e-5},
    {2001, 129, 0, 1e-5}, {999, 257, 0, 1e-5},  {1, 4093, 0, 1e-5},  {517, 4093, 0, 1e-5},
    {3000, 4096, 0, 1e-5}, {1, 8191, 0, 1e-5},  {301, 8192, 0, 1e-5}, {2, 8192, 0, 1e-5},
    {3, 8193, 0, 1e-5},   {5, 4097, 0, 1e-5},   {1, 65537, 0, 1e-5}, {7, 262144, 0, 1e-5},
    {2, 262139, 0, 1e-5},
};
#define LN_SMALL_ELEMS 600000

static void gpu_cases(void) {
  if (tl_dev.kind != BK_DEVICE_CUDA) return;
  const int small = getenv("BK_TEST_SMALL") != NULL;
  for (int d = 0; d < TL_DTYPES; d++)
    for (size_t s = 0; s < sizeof gpu_vjp_shapes / sizeof gpu_vjp_shapes[0]; s++)
      if (!small || gpu_vjp_shapes[s].rows * gpu_vjp_shapes[s].cols <= LN_SMALL_ELEMS)
        random_case(tl_dtypes[d], &gpu_vjp_shapes[s], 1000 + s);
  if (small) return;
  for (size_t s = 0; s < sizeof gpu_shapes / sizeof gpu_shapes[0]; s++)
    random_case(BK_F32, &gpu_shapes[s], 900 + s);
  for (int d = 0; d < TL_DTYPES; d++)
    for (size_t s = 0; s < sizeof gpu_wide_shapes / sizeof gpu_wide_shapes[0]; s++)
      random_case(tl_dtypes[d], &gpu_wide_shapes[s], 950 + s);
}

/* Wide rows (rows, cols) holding NaN (at nan_at), +inf (at inf_at) or
 * -inf (at ninf_at, unless negative) give NaN statistics and outputs for
 * those rows only; the other rows are unaffected. */
static void wide_nonfinite_case(int64_t rows, int64_t cols, int64_t nan_at, int64_t inf_at,
                                int64_t ninf_at) {
  const int64_t n = rows * cols;
  double *x = tl_xmalloc((size_t)n * sizeof *x), *gamma = tl_xmalloc((size_t)cols * sizeof *gamma);
  double *beta = tl_xmalloc((size_t)cols * sizeof *beta);
  double *rout = tl_xmalloc((size_t)n * sizeof *rout), *rn = tl_xmalloc((size_t)n * sizeof *rn);
  double *rs = tl_xmalloc((size_t)rows * sizeof *rs);
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    tl_seed(900 + d);
    tl_fill_randn(x, n);
    tl_fill_uniform(gamma, cols, 0.5, 1.5);
    tl_fill_uniform(beta, cols, -0.5, 0.5);
    x[nan_at] = NAN;
    x[inf_at] = INFINITY;
    if (ninf_at >= 0) x[ninf_at] = -INFINITY;
    tl_round(dt, x, n);
    tl_round(dt, gamma, cols);
    tl_round(dt, beta, cols);
    ref_forward(x, gamma, beta, rows, cols, 1e-5, rout, rn, rs);
    bk_buffer *in[3], *f[3] = {NULL};
    inputs3(dt, x, gamma, beta, rows, cols, in);
    if (TL_OK(forward3(in, rows, cols, 1e-5, f)) == BK_OK) {
      TL_BUF_CLOSE(f[0], rout, n, tl_tol_red(dt), 2.0 + tl_absmax(rn, n, 1.0) * 1.5);
      TL_BUF_CLOSE(f[1], rn, n, tl_tol_red(dt), tl_absmax(rn, n, 1.0));
      TL_BUF_CLOSE(f[2], rs, rows, tl_tol_red(dt), tl_absmax(rs, rows, 1.0));
    }
    TL_UNCHANGED(in[0], x, n);
    release3(f);
    release3(in);
  }
  free(x);
  free(gamma);
  free(beta);
  free(rout);
  free(rn);
  free(rs);
}

/* NaN in row 0 (in a late slice) and +inf in row 2 of 3 x 16384; on CUDA
 * also rows exchanging their statistics across a cluster (300 x 16388:
 * NaN in row 0's last share, +inf in row 2, -inf in row 5). */
static void wide_nonfinite(void) {
  wide_nonfinite_case(3, 16384, 12345, 2 * 16384 + 100, -1);
  if (tl_dev.kind == BK_DEVICE_CUDA)
    wide_nonfinite_case(300, 16388, 16388 - 5, 2 * 16388 + 100, 5 * 16388 + 9000);
}

/* ---- finite differences (float64) ----------------------------------------------------------- */

/* L = <dout, out(x, gamma, beta)> through the library's forward. */
static double loss(const double *x, const double *gamma, const double *beta, const double *dout,
                   int64_t rows, int64_t cols, double eps) {
  bk_buffer *in[3], *f[3] = {NULL};
  inputs3(BK_F64, x, gamma, beta, rows, cols, in);
  double L = NAN;
  if (forward3(in, rows, cols, eps, f) == BK_OK) {
    double *v = tl_read(f[0]);
    L = 0;
    for (int64_t i = 0; i < rows * cols; i++) L += dout[i] * v[i];
    free(v);
  }
  release3(f);
  release3(in);
  return L;
}

/* Directional derivatives along random directions, by central differences,
 * against <dx, dir>, <dgamma, dir>, <dbeta, dir>. */
static void finite_differences(void) {
  static const int64_t cases[][2] = {{1, 2}, {3, 5}, {4, 16}, {2, 50}};
  const double eps = 1e-3, h = 1e-5;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const int64_t rows = cases[c][0], cols = cases[c][1], n = rows * cols;
    double *x = tl_xmalloc((size_t)n * sizeof *x), *dout = tl_xmalloc((size_t)n * sizeof *dout);
    double *gm = tl_xmalloc((size_t)cols * sizeof *gm), *bt = tl_xmalloc((size_t)cols * sizeof *bt);
    double *dir = tl_xmalloc((size_t)n * sizeof *dir), *tmp = tl_xmalloc((size_t)n * sizeof *tmp);
    tl_seed(700 + c);
    tl_fill_randn(x, n);
    tl_fill_randn(dout, n);
    tl_fill_uniform(gm, cols, 0.5, 1.5);
    tl_fill_uniform(bt, cols, -0.5, 0.5);
    bk_buffer *in[3], *f[3] = {NULL}, *g[3] = {NULL}, *bd = tl_buf(BK_F64, dout, n);
    inputs3(BK_F64, x, gm, bt, rows, cols, in);
    if (TL_OK(forward3(in, rows, cols, eps, f)) == BK_OK &&
        TL_OK(backward3(bd, f, in[1], rows, cols, g)) == BK_OK) {
      double *vx = tl_read(g[0]), *vg = tl_read(g[1]), *vb = tl_read(g[2]);
      /* which: 0 perturbs x, 1 gamma, 2 beta. */
      for (int which = 0; which < 3; which++) {
        const int64_t len = which == 0 ? n : cols;
        const double *grad = which == 0 ? vx : which == 1 ? vg : vb;
        double *base = which == 0 ? x : which == 1 ? gm : bt;
        tl_fill_randn(dir, len);
        double analytic = 0, mag = 0;
        for (int64_t i = 0; i < len; i++) {
          analytic += grad[i] * dir[i];
          mag += fabs(grad[i] * dir[i]);
        }
        memcpy(tmp, base, (size_t)len * sizeof *tmp);
        for (int64_t i = 0; i < len; i++) base[i] = tmp[i] + h * dir[i];
        double lp = loss(x, gm, bt, dout, rows, cols, eps);
        for (int64_t i = 0; i < len; i++) base[i] = tmp[i] - h * dir[i];
        double lm = loss(x, gm, bt, dout, rows, cols, eps);
        memcpy(base, tmp, (size_t)len * sizeof *tmp);
        double numeric = (lp - lm) / (2 * h);
        TL_CHECK(fabs(numeric - analytic) <= 1e-6 * (mag + 1),
                 "finite difference (%s, rows %" PRId64 ", cols %" PRId64 "): %.12g vs %.12g",
                 which == 0 ? "x" : which == 1 ? "gamma" : "beta", rows, cols, numeric, analytic);
      }
      free(vx);
      free(vg);
      free(vb);
    }
    release3(f);
    release3(g);
    release3(in);
    bk_buffer_release(bd);
    free(x);
    free(dout);
    free(gm);
    free(bt);
    free(dir);
    free(tmp);
  }
}

/* ---- empty cases, eps edge and rejections ---------------------------------------------------- */

static void empty(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    bk_buffer *in[3], *f[3] = {NULL}, *g[3] = {NULL};
    inputs3(dt, NULL, ex_gamma, ex_beta, 0, 4, in);
    if (TL_OK(forward3(in, 0, 4, 1e-5, f)) == BK_OK) {
      TL_BUF_EXACT(f[0], NULL, 0);
      TL_BUF_EXACT(f[1], NULL, 0);
      TL_BUF_EXACT(f[2], NULL, 0);
    }
    release3(f);
    /* The backward reads the empty x buffer as dout, normalized and inv_std. */
    bk_buffer *const saved[3] = {in[0], in[0], in[0]};
    if (TL_OK(backward3(in[0], saved, in[1], 0, 4, g)) == BK_OK) {
      TL_BUF_EXACT(g[0], NULL, 0);
      TL_BUF_EXACT(g[1], ((double[]){0, 0, 0, 0}), 4);
      TL_BUF_EXACT(g[2], ((double[]){0, 0, 0, 0}), 4);
    }
    release3(g);
    release3(in);
  }
}

/* eps == 0 is valid; a constant row with eps 0 divides by zero (IEEE). */
static void eps_zero(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    bk_buffer *in[3], *f[3] = {NULL};
    inputs3(dt, (double[]){1, 3, 2, 2}, (double[]){1, 1}, (double[]){0, 0}, 2, 2, in);
    if (TL_OK(forward3(in, 2, 2, 0.0, f)) == BK_OK) {
      TL_BUF_CLOSE(f[1], ((double[]){-1, 1, NAN, NAN}), 4, tl_tol_red(dt), 1.0);
      TL_BUF_CLOSE(f[2], ((double[]){1, INFINITY}), 2, tl_tol_red(dt), 1.0);
    }
    release3(f);
    release3(in);
  }
}

static void forward_errors(void) {
  double v[8] = {0};
  bk_buffer *x = tl_buf(BK_F32, v, 8), *g = tl_buf(BK_F32, v, 4), *b = tl_buf(BK_F32, v, 4);
  bk_buffer *g64 = tl_buf(BK_F64, v, 4);
  bk_buffer *sentinel = (bk_buffer *)&sentinel, *y, *n, *s;
#define RESET() (y = n = s = sentinel)
#define CLEARED() TL_CHECK(y == NULL && n == NULL && s == NULL, "out-parameters not cleared")
  RESET();
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, 2, 4, 1e-5, NULL, &n, &s), BK_ERR_NULL, "out");
  TL_CHECK(n == NULL && s == NULL, "out-parameters not cleared");
  RESET();
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, 2, 4, 1e-5, &y, NULL, &s), BK_ERR_NULL,
            "normalized");
  TL_CHECK(y == NULL && s == NULL, "out-parameters not cleared");
  RESET();
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, 2, 4, 1e-5, &y, &n, NULL), BK_ERR_NULL,
            "inv_std");
  TL_CHECK(y == NULL && n == NULL, "out-parameters not cleared");
  RESET();
  TL_REJECT(bk_layernorm_forward(tl_ctx, NULL, g, b, 2, 4, 1e-5, &y, &n, &s), BK_ERR_NULL, "x");
  CLEARED();
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, NULL, b, 2, 4, 1e-5, &y, &n, &s), BK_ERR_NULL, "gamma");
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, NULL, 2, 4, 1e-5, &y, &n, &s), BK_ERR_NULL, "beta");
  RESET();
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, -2, 4, 1e-5, &y, &n, &s),
            BK_ERR_INVALID_ARGUMENT, "rows = -2");
  CLEARED();
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, 2, -4, 1e-5, &y, &n, &s),
            BK_ERR_INVALID_ARGUMENT, "cols = -4");
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, 2, 0, 1e-5, &y, &n, &s),
            BK_ERR_INVALID_ARGUMENT, "cols = 0");
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, 0, 0, 1e-5, &y, &n, &s),
            BK_ERR_INVALID_ARGUMENT, "cols = 0");
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, 2, 4, -1e-5, &y, &n, &s),
            BK_ERR_INVALID_ARGUMENT, "eps");
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, 2, 4, NAN, &y, &n, &s),
            BK_ERR_INVALID_ARGUMENT, "eps");
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, 2, 4, INFINITY, &y, &n, &s),
            BK_ERR_INVALID_ARGUMENT, "eps");
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, 4, 2, 1e-5, &y, &n, &s),
            BK_ERR_INVALID_ARGUMENT, "gamma has length 4, expected 2");
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, 2, 3, 1e-5, &y, &n, &s),
            BK_ERR_INVALID_ARGUMENT, "x has length 8, expected 6");
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, x, 2, 4, 1e-5, &y, &n, &s),
            BK_ERR_INVALID_ARGUMENT, "beta has length 8, expected 4");
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g, b, INT64_MAX, 4, 1e-5, &y, &n, &s),
            BK_ERR_INVALID_ARGUMENT, "overflow");
  RESET();
  TL_REJECT(bk_layernorm_forward(tl_ctx, x, g64, b, 2, 4, 1e-5, &y, &n, &s), BK_ERR_DTYPE,
            "gamma");
  CLEARED();
  bk_context *other = tl_other_ctx();
  if (other) {
    RESET();
    TL_REJECT(bk_layernorm_forward(other, x, g, b, 2, 4, 1e-5, &y, &n, &s),
              BK_ERR_DEVICE_MISMATCH, "ctx");
    CLEARED();
  }
#undef RESET
#undef CLEARED
  bk_buffer_release(x);
  bk_buffer_release(g);
  bk_buffer_release(b);
  bk_buffer_release(g64);
}

static void backward_errors(void) {
  double v[8] = {0};
  bk_buffer *d = tl_buf(BK_F32, v, 8), *nr = tl_buf(BK_F32, v, 8), *s = tl_buf(BK_F32, v, 2);
  bk_buffer *g = tl_buf(BK_F32, v, 4), *s64 = tl_buf(BK_F64, v, 2);
  bk_buffer *sentinel = (bk_buffer *)&sentinel, *gx, *gg, *gb;
#define RESET() (gx = gg = gb = sentinel)
#define CLEARED() TL_CHECK(gx == NULL && gg == NULL && gb == NULL, "out-parameters not cleared")
  RESET();
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, s, g, 2, 4, NULL, &gg, &gb), BK_ERR_NULL, "dx");
  TL_CHECK(gg == NULL && gb == NULL, "out-parameters not cleared");
  RESET();
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, s, g, 2, 4, &gx, NULL, &gb), BK_ERR_NULL,
            "dgamma");
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, s, g, 2, 4, &gx, &gg, NULL), BK_ERR_NULL,
            "dbeta");
  RESET();
  TL_REJECT(bk_layernorm_backward(tl_ctx, NULL, nr, s, g, 2, 4, &gx, &gg, &gb), BK_ERR_NULL,
            "dout");
  CLEARED();
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, NULL, s, g, 2, 4, &gx, &gg, &gb), BK_ERR_NULL,
            "normalized");
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, NULL, g, 2, 4, &gx, &gg, &gb), BK_ERR_NULL,
            "inv_std");
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, s, NULL, 2, 4, &gx, &gg, &gb), BK_ERR_NULL,
            "gamma");
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, s, g, -1, 4, &gx, &gg, &gb),
            BK_ERR_INVALID_ARGUMENT, "rows = -1");
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, s, g, 2, -4, &gx, &gg, &gb),
            BK_ERR_INVALID_ARGUMENT, "cols = -4");
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, s, g, 0, 0, &gx, &gg, &gb),
            BK_ERR_INVALID_ARGUMENT, "cols = 0");
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, s, g, 4, 2, &gx, &gg, &gb),
            BK_ERR_INVALID_ARGUMENT, "inv_std has length 2, expected 4");
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, s, s, g, 2, 4, &gx, &gg, &gb),
            BK_ERR_INVALID_ARGUMENT, "normalized has length 2, expected 8");
  TL_REJECT(bk_layernorm_backward(tl_ctx, s, nr, s, g, 2, 4, &gx, &gg, &gb),
            BK_ERR_INVALID_ARGUMENT, "dout has length 2, expected 8");
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, s, s, 2, 4, &gx, &gg, &gb),
            BK_ERR_INVALID_ARGUMENT, "gamma has length 2, expected 4");
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, s, g, INT64_MAX, 2, &gx, &gg, &gb),
            BK_ERR_INVALID_ARGUMENT, "overflow");
  RESET();
  TL_REJECT(bk_layernorm_backward(tl_ctx, d, nr, s64, g, 2, 4, &gx, &gg, &gb), BK_ERR_DTYPE,
            "inv_std");
  CLEARED();
  bk_context *other = tl_other_ctx();
  if (other) {
    RESET();
    TL_REJECT(bk_layernorm_backward(other, d, nr, s, g, 2, 4, &gx, &gg, &gb),
              BK_ERR_DEVICE_MISMATCH, "ctx");
    CLEARED();
  }
#undef RESET
#undef CLEARED
  bk_buffer_release(d);
  bk_buffer_release(nr);
  bk_buffer_release(s);
  bk_buffer_release(g);
  bk_buffer_release(s64);
}

/* Every allocation of a call fails in turn: the call reports
 * BK_ERR_OUT_OF_MEMORY, clears all three out-parameters and leaks none of
 * the results it had already made. */
static void allocation_failures(void) {
  bk_buffer *x = tl_buf(BK_F64, ex_x, 8), *g = tl_buf(BK_F64, ex_gamma, 4);
  bk_buffer *b = tl_buf(BK_F64, ex_beta, 4), *e = tl_buf(BK_F64, NULL, 0);
  bk_buffer *s = tl_buf(BK_F64, ex_gamma, 2);
  for (int which = 0; which < 3; which++) {
    int64_t live = bk__live_buffers(), k;
    for (k = 1; k < 100; k++) {
      bk_buffer *o1 = (bk_buffer *)&o1, *o2 = o1, *o3 = o1;
      bk__inject_arm(k);
      /* which: 0 forward, 1 backward, 2 backward with rows == 0 (zeros). */
      bk_status st = which == 0   ? bk_layernorm_forward(tl_ctx, x, g, b, 2, 4, 1e-5, &o1, &o2, &o3)
                     : which == 1 ? bk_layernorm_backward(tl_ctx, x, x, s, g, 2, 4, &o1, &o2, &o3)
                                  : bk_layernorm_backward(tl_ctx, e, e, e, g, 0, 4, &o1, &o2, &o3);
      bk__inject_arm(0);
      if (st == BK_OK) {
        bk_buffer_release(o1);
        bk_buffer_release(o2);
        bk_buffer_release(o3);
        break;
      }
      TL_CHECK(st == BK_ERR_OUT_OF_MEMORY && !o1 && !o2 && !o3 && bk__live_buffers() == live,
               "case %d, failing allocation %" PRId64 ": status %d", which, k, (int)st);
    }
    TL_CHECK(k > 1 && k < 100, "case %d: the call made %" PRId64 " allocations", which, k);
  }
  bk_buffer_release(x);
  bk_buffer_release(g);
  bk_buffer_release(b);
  bk_buffer_release(e);
  bk_buffer_release(s);
}

/* The backward's planner for the device facts of an H200 / H100 SXM (132
 * multiprocessors, 228 KB shared memory each, 227 KB a block may opt in to),
 * an H100 PCIe (114) and a smaller GPU (46 multiprocessors, 100 KB, 99 KB):
 * every plan over the hook's shapes is launchable there and covers every
 * column once. Host code only, so it runs wherever the CUDA backend is
 * built. */
static void vjp_plans(void) {
#ifdef BK_HAVE_CUDA
  static const int facts[][5] = {
      {132, 233472, 232448, 1024, 65536},
      {114, 233472, 232448, 1024, 65536},
      {46, 102400, 101376, 1024, 65536},
  };
  for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++) {
    char msg[256];
    const int64_t bad = bk__cuda_layernorm_vjp_plan_check(
        facts[i][0], facts[i][1], facts[i][2], facts[i][3], facts[i][4], msg, sizeof msg);
    TL_CHECK(bad == 0, "%d SMs: %" PRId64 " bad plans, first %s", facts[i][0], bad, msg);
  }
#endif
}

int main(void) {
  tl_init();
  TL_RUN(examples);
  TL_RUN(random_cases);
  TL_RUN(gpu_cases);
  TL_RUN(wide_nonfinite);
  TL_RUN(finite_differences);
  TL_RUN(empty);
  TL_RUN(eps_zero);
  TL_RUN(forward_errors);
  TL_RUN(backward_errors);
  TL_RUN(allocation_failures);
  TL_RUN(vjp_plans);
  return tl_finish();
}
