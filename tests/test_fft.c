/*
 * test_fft.c — bk_rfft, bk_irfft, bk_irfft_unnormalized.
 *
 * References are naive O(n^2) DFTs over a table of roots in long double,
 * with the exponent k*t reduced mod n in integers. The adjoint test rests
 * on this identity (derived in adjoint_case): for real x (n) and a half
 * spectrum Y (n/2+1 bins), with F = rfft(x) and G = irfft_unnormalized(Y),
 *   sum_t x[t] G[t] = sum_k w_k (Re F_k Re Y_k + Im F_k Im Y_k),
 * w_k = 1 for bin 0 and (even n) bin n/2, and 2 for every other bin.
 */
#include "testlib.h"
#include "core/internal.h" /* allocation-failure injection */

typedef long double ld;

/* ---- references -------------------------------------------------------------- */

/* tab[r] = exp(-2 pi i r/n), r = 0..n-1. */
static void roots(int64_t n, ld *re, ld *im) {
  const ld pi = 3.141592653589793238462643383279502884L;
  for (int64_t r = 0; r < n; r++) {
    ld a = 2.0L * pi * (ld)r / (ld)n;
    re[r] = cosl(a);
    im[r] = -sinl(a);
  }
}

/* spec (batch, n/2+1, 2) = DFT of x (batch, n). */
static void ref_rfft(const double *x, double *spec, int64_t batch, int64_t n) {
  ld *re = tl_xmalloc((size_t)n * sizeof *re), *im = tl_xmalloc((size_t)n * sizeof *im);
  roots(n, re, im);
  const int64_t bins = n / 2 + 1;
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t k = 0; k < bins; k++) {
      ld sr = 0, si = 0;
      int64_t e = 0; /* k*t mod n */
      for (int64_t t = 0; t < n; t++) {
        sr += (ld)x[b * n + t] * re[e];
        si += (ld)x[b * n + t] * im[e];
        e += k;
        if (e >= n) e -= n;
      }
      spec[(b * bins + k) * 2] = (double)sr;
      spec[(b * bins + k) * 2 + 1] = (double)si;
    }
  }
  free(re);
  free(im);
}

/* x (batch, n) = unnormalized inverse of the Hermitian extension of spec,
 * the imaginary parts of bin 0 and (even n) bin n/2 ignored; divided by n
 * when normalize is 1. */
static void ref_irfft(const double *spec, double *x, int64_t batch, int64_t n, int normalize) {
  ld *re = tl_xmalloc((size_t)n * sizeof *re), *im = tl_xmalloc((size_t)n * sizeof *im);
  roots(n, re, im);
  const int64_t bins = n / 2 + 1;
  for (int64_t b = 0; b < batch; b++) {
    const double *Y = spec + b * bins * 2;
    for (int64_t t = 0; t < n; t++) {
      ld s = Y[0];
      int64_t e = 0; /* k*t mod n; e^{+2 pi i kt/n} = conj(tab) */
      for (int64_t k = 1; k < bins; k++) {
        e += t;
        if (e >= n) e -= n;
        /* Re(Y_k e^{+i a}) = Yr cos a - Yi sin a, and tab = cos a - i sin a. */
        ld v = (ld)Y[2 * k] * re[e] + (ld)Y[2 * k + 1] * im[e];
        if (2 * k == n)
          s += (ld)Y[2 * k] * re[e]; /* the real Nyquist bin, counted once */
        else
          s += 2 * v;
      }
      x[b * n + t] = (double)(normalize ? s / (ld)n : s);
    }
  }
  free(re);
  free(im);
}

/* Natural magnitude of an inverse's result: sum_k w_k |Y_k| (per batch row,
 * max over rows), divided by n when normalized. */
static double spec_scale(const double *spec, int64_t batch, int64_t n, int normalize) {
  const int64_t bins = n / 2 + 1;
  double best = 1e-300;
  for (int64_t b = 0; b < batch; b++) {
    double s = 0;
    for (int64_t k = 0; k < bins; k++) {
      int edge = k == 0 || 2 * k == n;
      double mag = fabs(spec[(b * bins + k) * 2]) + (edge ? 0 : fabs(spec[(b * bins + k) * 2 + 1]));
      s += (edge ? 1 : 2) * mag;
    }
    if (s > best) best = s;
  }
  return normalize ? best / (double)n : best;
}

/* max over rows of sum_t |x[t]|: the magnitude of every bin's sum. */
static double signal_scale(const double *x, int64_t batch, int64_t n) {
  double best = 1e-300;
  for (int64_t b = 0; b < batch; b++) {
    double s = 0;
    for (int64_t t = 0; t < n; t++) s += fabs(x[b * n + t]);
    if (s > best) best = s;
  }
  return best;
}

/* ---- examples ------------------------------------------------------------------ */

static void examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double x[] = {1, 0, 0, 0, 1, 2, 3, 4};
    const double X[] = {1, 0, 1, 0, 1, 0, 10, 0, -2, 2, -2, 0};
    bk_buffer *bx = tl_buf(dt, x, 8), *y = NULL;
    if (TL_OK(bk_rfft(tl_ctx, bx, 2, 4, &y)) == BK_OK) TL_BUF_EXACT(y, X, 12);
    bk_buffer_release(y);
    y = NULL;
    TL_UNCHANGED(bx, x, 8);

    bk_buffer *bs = tl_buf(dt, X + 6, 6);
    if (TL_OK(bk_irfft(tl_ctx, bs, 1, 4, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 2, 3, 4}), 4);
    bk_buffer_release(y);
    y = NULL;
    if (TL_OK(bk_irfft_unnormalized(tl_ctx, bs, 1, 4, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){4, 8, 12, 16}), 4);
    bk_buffer_release(y);
    y = NULL;
    TL_UNCHANGED(bs, X + 6, 6);

    /* n = 1: the single bin is the sample; its imaginary part is ignored. */
    bk_buffer *one = tl_buf(dt, (double[]){5}, 1);
    if (TL_OK(bk_rfft(tl_ctx, one, 1, 1, &y)) == BK_OK) TL_BUF_EXACT(y, ((double[]){5, 0}), 2);
    bk_buffer_release(y);
    y = NULL;
    bk_buffer *s1 = tl_buf(dt, (double[]){5, 7}, 2);
    if (TL_OK(bk_irfft(tl_ctx, s1, 1, 1, &y)) == BK_OK) TL_BUF_EXACT(y, ((double[]){5}), 1);
    bk_buffer_release(y);
    y = NULL;

    /* n = 2 and n = 3 by hand: [1,2] -> [3,0,-1,0]; [1,1,1] -> [3,0,0,0]. */
    bk_buffer *two = tl_buf(dt, (double[]){1, 2}, 2);
    if (TL_OK(bk_rfft(tl_ctx, two, 1, 2, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){3, 0, -1, 0}), 4);
    bk_buffer_release(y);
    y = NULL;
    bk_buffer *three = tl_buf(dt, (double[]){1, 1, 1}, 3);
    if (TL_OK(bk_rfft(tl_ctx, three, 1, 3, &y)) == BK_OK) {
      double *g = tl_read(y);
      TL_CHECK(g[0] == 3 && g[1] == 0, "n = 3 bin 0 is (%g, %g)", g[0], g[1]);
      TL_CLOSE(g + 2, ((double[]){0, 0}), 2, tl_tol_elem(dt), 3.0);
      free(g);
    }
    bk_buffer_release(y);
    y = NULL;

    bk_buffer_release(bx);
    bk_buffer_release(bs);
    bk_buffer_release(one);
    bk_buffer_release(s1);
    bk_buffer_release(two);
    bk_buffer_release(three);
  }
}

/* ---- random cases against the naive DFT -------------------------------------------- */

/* Lengths: every small n, the hand-written radices (2, 3, 4, 5, 7) and
 * their mixes, generic prime radices (11, 13, 17, 61, 67, 97: the largest
 * direct one on the CPU), primes that go to Bluestein (127, 4099) and
 * doubles of primes (the even path over a prime half), powers of two. */
static const int64_t lengths[] = {1,   2,   3,   4,    5,    6,    7,    8,    9,    10,   11,
                                  12,  13,  15,  16,   17,   25,   27,   30,   32,   49,   60,
                                  61,  64,  67,  97,   100,  121,  122,  125,  127,  128,  134,
                                  194, 210, 243, 256,  1000, 1024, 2310, 4096, 4099, 8198};

static int64_t batch_for(int64_t n) { return n >= 2000 ? 1 : n >= 200 ? 2 : 3; }

static void forward_random(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t c = 0; c < sizeof lengths / sizeof lengths[0]; c++) {
      int64_t n = lengths[c], batch = batch_for(n), bins = n / 2 + 1;
      double *x = tl_xmalloc((size_t)(batch * n) * sizeof *x);
      double *ref = tl_xmalloc((size_t)(batch * bins * 2) * sizeof *ref);
      tl_seed(1000 + (uint64_t)n);
      tl_fill_randn(x, batch * n);
      tl_round(dt, x, batch * n);
      ref_rfft(x, ref, batch, n);
      bk_buffer *bx = tl_buf(dt, x, batch * n), *y = NULL;
      if (TL_OK(bk_rfft(tl_ctx, bx, batch, n, &y)) == BK_OK) {
        if (!TL_BUF_CLOSE(y, ref, batch * bins * 2, tl_tol_contract(dt, (double)n),
                          signal_scale(x, batch, n)))
          fprintf(stderr, "  (rfft %s n = %" PRId64 ")\n", tl_dtname(dt), n);
        /* Bin 0 and (even n) bin n/2 of a real signal have exact zero
         * imaginary parts. */
        double *g = tl_read(y);
        int ok = 1;
        for (int64_t b = 0; b < batch; b++) {
          if (g[b * bins * 2 + 1] != 0) ok = 0;
          if (n % 2 == 0 && g[(b * bins + n / 2) * 2 + 1] != 0) ok = 0;
        }
        TL_CHECK(ok, "n = %" PRId64 ": real bins have nonzero imaginary parts", n);
        free(g);
      }
      TL_UNCHANGED(bx, x, batch * n);
      bk_buffer_release(y);
      bk_buffer_release(bx);
      free(x);
      free(ref);
    }
  }
}

/* Fills the ignored imaginary parts of bins 0 and (even n) n/2 with v. */
static void poison(double *spec, int64_t batch, int64_t n, double v) {
  const int64_t bins = n / 2 + 1;
  for (int64_t b = 0; b < batch; b++) {
    spec[b * bins * 2 + 1] = v;
    if (n % 2 == 0) spec[(b * bins + n / 2) * 2 + 1] = v;
  }
}

static void inverse_random(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t c = 0; c < sizeof lengths / sizeof lengths[0]; c++) {
      int64_t n = lengths[c], batch = batch_for(n), bins = n / 2 + 1, len = batch * bins * 2;
      double *spec = tl_xmalloc((size_t)len * sizeof *spec);
      double *ref = tl_xmalloc((size_t)(batch * n) * sizeof *ref);
      tl_seed(2000 + (uint64_t)n);
      tl_fill_randn(spec, len);
      /* Garbage where the transform must not look. */
      poison(spec, batch, n, 1e6);
      tl_round(dt, spec, len);
      for (int norm = 0; norm <= 1; norm++) {
        ref_irfft(spec, ref, batch, n, norm);
        bk_buffer *bs = tl_buf(dt, spec, len), *y = NULL;
        bk_status st = norm ? bk_irfft(tl_ctx, bs, batch, n, &y)
                            : bk_irfft_unnormalized(tl_ctx, bs, batch, n, &y);
        if (TL_OK(st) == BK_OK) {
          if (!TL_BUF_CLOSE(y, ref, batch * n, tl_tol_contract(dt, (double)n),
                            spec_scale(spec, batch, n, norm)))
            fprintf(stderr, "  (irfft %s n = %" PRId64 " normalize %d)\n", tl_dtname(dt), n,
                    norm);
        }
        TL_UNCHANGED(bs, spec, len);
        bk_buffer_release(y);
        bk_buffer_release(bs);
      }
      free(spec);
      free(ref);
    }
  }
}

/* ---- round trip, ignored parts, adjoint, determinism ----------------------------------- */

static void round_trip(void) {
  static const int64_t ns[] = {1, 2, 3, 7, 8, 12, 17, 30, 97, 100, 127, 128, 210, 1000, 4099};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
      int64_t n = ns[c], batch = 2;
      double *x = tl_xmalloc((size_t)(batch * n) * sizeof *x);
      tl_seed(3000 + (uint64_t)n);
      tl_fill_uniform(x, batch * n, -1, 1);
      tl_round(dt, x, batch * n);
      bk_buffer *bx = tl_buf(dt, x, batch * n), *X = NULL, *y = NULL;
      if (TL_OK(bk_rfft(tl_ctx, bx, batch, n, &X)) == BK_OK &&
          TL_OK(bk_irfft(tl_ctx, X, batch, n, &y)) == BK_OK) {
        if (!TL_BUF_CLOSE(y, x, batch * n, tl_tol_contract(dt, (double)n), 1.0))
          fprintf(stderr, "  (round trip %s n = %" PRId64 ")\n", tl_dtname(dt), n);
      }
      bk_buffer_release(X);
      bk_buffer_release(y);
      bk_buffer_release(bx);
      free(x);
    }
  }
}

/* NaN, infinities and huge values in the ignored imaginary parts leave the
 * result bitwise unchanged. */
static void ignored_parts(void) {
  static const int64_t ns[] = {1, 2, 5, 6, 16, 97, 194, 255};
  static const double junk[] = {NAN, INFINITY, -1e300};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
      int64_t n = ns[c], batch = 2, len = batch * (n / 2 + 1) * 2;
      double *spec = tl_xmalloc((size_t)len * sizeof *spec);
      tl_seed(4000 + (uint64_t)n);
      tl_fill_randn(spec, len);
      poison(spec, batch, n, 0.0);
      bk_buffer *clean = tl_buf(dt, spec, len);
      for (int norm = 0; norm <= 1; norm++) {
        bk_buffer *y0 = NULL;
        bk_status st = norm ? bk_irfft(tl_ctx, clean, batch, n, &y0)
                            : bk_irfft_unnormalized(tl_ctx, clean, batch, n, &y0);
        if (TL_OK(st) != BK_OK) continue;
        for (size_t j = 0; j < sizeof junk / sizeof junk[0]; j++) {
          poison(spec, batch, n, junk[j]);
          bk_buffer *dirty = tl_buf(dt, spec, len), *y1 = NULL;
          st = norm ? bk_irfft(tl_ctx, dirty, batch, n, &y1)
                    : bk_irfft_unnormalized(tl_ctx, dirty, batch, n, &y1);
          if (TL_OK(st) == BK_OK)
            TL_CHECK(tl_same_bits(y0, y1), "n = %" PRId64 ": ignored imaginary part %g leaked", n,
                     junk[j]);
          bk_buffer_release(y1);
          bk_buffer_release(dirty);
        }
        poison(spec, batch, n, 0.0);
        bk_buffer_release(y0);
      }
      bk_buffer_release(clean);
      free(spec);
    }
  }
}

/*
 * The adjoint identity. With G = irfft_unnormalized(Y),
 *   G[t] = Re Y_0 + [n even] Re Y_{n/2} (-1)^t + 2 sum_{0<k<n/2} Re(Y_k e^{2 pi i kt/n}),
 * and for real x, sum_t x[t] e^{2 pi i kt/n} = conj(F_k). Hence
 *   <x, G> = Re Y_0 Re F_0 + [n even] Re Y_{n/2} Re F_{n/2}
 *            + 2 sum_{0<k<n/2} Re(Y_k conj(F_k)),
 * and Re(Y conj(F)) = Re Y Re F + Im Y Im F. F_0 and F_{n/2} are real, so
 * their imaginary terms vanish on both sides even with garbage (finite) in
 * Y's ignored parts: <x, G> = sum_k w_k (Re F_k Re Y_k + Im F_k Im Y_k).
 */
static void adjoint_case(bk_dtype dt, int64_t n) {
  int64_t batch = 2, bins = n / 2 + 1, len = batch * bins * 2;
  double *x = tl_xmalloc((size_t)(batch * n) * sizeof *x);
  double *Y = tl_xmalloc((size_t)len * sizeof *Y);
  tl_seed(5000 + (uint64_t)n);
  tl_fill_randn(x, batch * n);
  tl_fill_randn(Y, len);
  poison(Y, batch, n, 3.5);
  tl_round(dt, x, batch * n);
  tl_round(dt, Y, len);
  bk_buffer *bx = tl_buf(dt, x, batch * n), *bY = tl_buf(dt, Y, len), *F = NULL, *G = NULL;
  if (TL_OK(bk_rfft(tl_ctx, bx, batch, n, &F)) == BK_OK &&
      TL_OK(bk_irfft_unnormalized(tl_ctx, bY, batch, n, &G)) == BK_OK) {
    double *f = tl_read(F), *g = tl_read(G);
    for (int64_t b = 0; b < batch; b++) {
      double lhs = 0, rhs = 0, x1 = 0, y1 = 0;
      for (int64_t t = 0; t < n; t++) {
        lhs += x[b * n + t] * g[b * n + t];
        x1 += fabs(x[b * n + t]);
      }
      for (int64_t k = 0; k < bins; k++) {
        double w = (k == 0 || 2 * k == n) ? 1 : 2;
        const double *fk = f + (b * bins + k) * 2, *yk = Y + (b * bins + k) * 2;
        rhs += w * (fk[0] * yk[0] + fk[1] * yk[1]);
        y1 += w * (fabs(yk[0]) + ((k == 0 || 2 * k == n) ? 0 : fabs(yk[1])));
      }
      double err = fabs(lhs - rhs), bound = tl_tol_contract(dt, (double)n) * x1 * y1;
      TL_CHECK(err <= bound, "adjoint n = %" PRId64 " %s: <x,G> = %.17g, <F,Y>_w = %.17g", n,
               tl_dtname(dt), lhs, rhs);
    }
    free(f);
    free(g);
  }
  bk_buffer_release(F);
  bk_buffer_release(G);
  bk_buffer_release(bx);
  bk_buffer_release(bY);
  free(x);
  free(Y);
}

static void adjoint(void) {
  static const int64_t ns[] = {1, 2, 3, 4, 5, 9, 16, 17, 64, 97, 100, 127, 256, 1000, 4099};
  for (int d = 0; d < TL_DTYPES; d++)
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) adjoint_case(tl_dtypes[d], ns[c]);
}

/* A batch large enough for the parallel paths: two runs are bitwise equal,
 * and a row agrees with the same row transformed alone (to the contract's
 * tolerance: a backend may plan a batch differently from a single row). */
static void determinism(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const int64_t n = 1000, batch = 48, bins = n / 2 + 1;
    double *x = tl_xmalloc((size_t)(batch * n) * sizeof *x);
    tl_seed(6000);
    tl_fill_randn(x, batch * n);
    bk_buffer *bx = tl_buf(dt, x, batch * n), *a = NULL, *b = NULL, *ia = NULL, *ib = NULL;
    if (TL_OK(bk_rfft(tl_ctx, bx, batch, n, &a)) == BK_OK &&
        TL_OK(bk_rfft(tl_ctx, bx, batch, n, &b)) == BK_OK) {
      TL_CHECK(tl_same_bits(a, b), "rfft is not deterministic");
      if (TL_OK(bk_irfft(tl_ctx, a, batch, n, &ia)) == BK_OK &&
          TL_OK(bk_irfft(tl_ctx, a, batch, n, &ib)) == BK_OK)
        TL_CHECK(tl_same_bits(ia, ib), "irfft is not deterministic");
      /* Row 37 alone. */
      bk_buffer *row = tl_buf(dt, x + 37 * n, n), *r = NULL;
      if (TL_OK(bk_rfft(tl_ctx, row, 1, n, &r)) == BK_OK) {
        double *ga = tl_read(a), *gr = tl_read(r);
        TL_CLOSE(gr, ga + 37 * bins * 2, bins * 2, tl_tol_contract(dt, (double)n),
                 signal_scale(x + 37 * n, 1, n));
        /* The CPU transforms every row the same way whatever the batch. */
        if (bk_context_device(tl_ctx).kind == BK_DEVICE_CPU)
          TL_CHECK(memcmp(gr, ga + 37 * bins * 2, (size_t)(bins * 2) * sizeof *gr) == 0,
                   "rfft of a row alone differs from the same row in a batch of %d", (int)batch);
        free(ga);
        free(gr);
      }
      bk_buffer_release(r);
      bk_buffer_release(row);
    }
    bk_buffer_release(a);
    bk_buffer_release(b);
    bk_buffer_release(ia);
    bk_buffer_release(ib);
    bk_buffer_release(bx);
    free(x);
  }
}

/* ---- many short rows -------------------------------------------------------------- */

/* Short rows in batches that fill several tiles of rows and end in a
 * partial one (on CUDA, rows of at most 32 points are transformed directly,
 * a tile of rows at a time), both directions, with garbage in the ignored
 * imaginary parts; up to 32 points, a row in a batch is bitwise the row
 * transformed alone, on every device. */
static void short_rows(void) {
  static const int64_t ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33};
  static const int64_t batches[] = {1, 129, 2503};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
      for (size_t q = 0; q < sizeof batches / sizeof batches[0]; q++) {
        const int64_t n = ns[c], batch = batches[q], bins = n / 2 + 1, len = batch * bins * 2;
        double *x = tl_xmalloc((size_t)(batch * n) * sizeof *x);
        double *ref = tl_xmalloc((size_t)len * sizeof *ref);
        double *spec = tl_xmalloc((size_t)len * sizeof *spec);
        double *sig = tl_xmalloc((size_t)(batch * n) * sizeof *sig);
        tl_seed(7000 + (uint64_t)(n * 8 + (int64_t)q));
        tl_fill_randn(x, batch * n);
        tl_round(dt, x, batch * n);
        tl_fill_randn(spec, len);
        poison(spec, batch, n, NAN);
        tl_round(dt, spec, len);
        ref_rfft(x, ref, batch, n);
        bk_buffer *bx = tl_buf(dt, x, batch * n), *bs = tl_buf(dt, spec, len), *y = NULL;
        if (TL_OK(bk_rfft(tl_ctx, bx, batch, n, &y)) == BK_OK) {
          if (!TL_BUF_CLOSE(y, ref, len, tl_tol_contract(dt, (double)n),
                            signal_scale(x, batch, n)))
            fprintf(stderr, "  (rfft %s n = %" PRId64 " batch %" PRId64 ")\n", tl_dtname(dt), n,
                    batch);
          double *g = tl_read(y);
          int zeros = 1;
          for (int64_t b = 0; b < batch; b++) {
            if (g[b * bins * 2 + 1] != 0 || signbit(g[b * bins * 2 + 1])) zeros = 0;
            if (n % 2 == 0 && (g[(b * bins + n / 2) * 2 + 1] != 0 ||
                               signbit(g[(b * bins + n / 2) * 2 + 1])))
              zeros = 0;
          }
          TL_CHECK(zeros, "n = %" PRId64 " batch %" PRId64 ": real bins are not +0", n, batch);
          /* The last row alone, and (n <= 32) bitwise the same. */
          bk_buffer *row = tl_buf(dt, x + (batch - 1) * n, n), *r = NULL;
          if (TL_OK(bk_rfft(tl_ctx, row, 1, n, &r)) == BK_OK && n <= 32) {
            double *gr = tl_read(r);
            TL_CHECK(memcmp(gr, g + (batch - 1) * bins * 2, (size_t)(bins * 2) * sizeof *gr) == 0,
                     "rfft n = %" PRId64 ": the last row alone differs from it in a batch of %" PRId64,
                     n, batch);
            free(gr);
          }
          bk_buffer_release(r);
          bk_buffer_release(row);
          free(g);
        }
        for (int norm = 0; norm <= 1; norm++) {
          poison(spec, batch, n, 0.0);
          ref_irfft(spec, sig, batch, n, norm);
          poison(spec, batch, n, NAN);
          bk_buffer *z = NULL;
          bk_status st = norm ? bk_irfft(tl_ctx, bs, batch, n, &z)
                              : bk_irfft_unnormalized(tl_ctx, bs, batch, n, &z);
          if (TL_OK(st) == BK_OK) {
            poison(spec, batch, n, 0.0);
            if (!TL_BUF_CLOSE(z, sig, batch * n, tl_tol_contract(dt, (double)n),
                              spec_scale(spec, batch, n, norm)))
              fprintf(stderr, "  (irfft %s n = %" PRId64 " batch %" PRId64 " normalize %d)\n",
                      tl_dtname(dt), n, batch, norm);
            poison(spec, batch, n, NAN);
            bk_buffer *row = tl_buf(dt, spec + (batch - 1) * bins * 2, bins * 2), *r = NULL;
            st = norm ? bk_irfft(tl_ctx, row, 1, n, &r) : bk_irfft_unnormalized(tl_ctx, row, 1, n, &r);
            if (TL_OK(st) == BK_OK && n <= 32) {
              double *gz = tl_read(z), *gr = tl_read(r);
              TL_CHECK(memcmp(gr, gz + (batch - 1) * n, (size_t)n * sizeof *gr) == 0,
                       "irfft n = %" PRId64 ": the last row alone differs from it in a batch of "
                       "%" PRId64, n, batch);
              free(gz);
              free(gr);
            }
            bk_buffer_release(r);
            bk_buffer_release(row);
          }
          bk_buffer_release(z);
        }
        TL_UNCHANGED(bx, x, batch * n);
        bk_buffer_release(y);
        bk_buffer_release(bx);
        bk_buffer_release(bs);
        free(x);
        free(ref);
        free(spec);
        free(sig);
      }
    }
  }
}

/* ---- long rows, sampled bins ------------------------------------------------------- */

/* Bin k of the DFT of x (n), in long double over the table w of roots(),
 * k*t reduced mod n in integers. */
static void ref_bin(const double *x, int64_t n, int64_t k, const ld *wr, const ld *wi, double *re,
                    double *im) {
  ld sr = 0, si = 0;
  int64_t e = 0;
  for (int64_t t = 0; t < n; t++) {
    sr += (ld)x[t] * wr[e];
    si += (ld)x[t] * wi[e];
    e += k;
    if (e >= n) e -= n;
  }
  *re = (double)sr;
  *im = (double)si;
}

/* Sample t of the unnormalized inverse of the half spectrum Y (n/2+1 bins). */
static double ref_sample(const double *Y, int64_t n, int64_t t, const ld *wr, const ld *wi) {
  ld s = Y[0];
  int64_t e = 0;
  for (int64_t k = 1; k <= n / 2; k++) {
    e += t;
    if (e >= n) e -= n;
    const ld v = (ld)Y[2 * k] * wr[e] + (ld)Y[2 * k + 1] * wi[e];
    s += 2 * k == n ? v : 2 * v;
  }
  return (double)s;
}

/* Rows too long for a full O(n^2) reference: primes (1009, 65537:
 * Bluestein), an odd composite (15015 = 3*5*7*11*13), 2^20 at batch 1, odd
 * batches; 16 bins (or samples) per row checked against long double, the
 * ends included. The last row of each batch is also transformed alone. */
static void long_rows(void) {
  static const int64_t ns[] = {1009, 15015, 65537, 1 << 20};
  static const int64_t batches[] = {3, 3, 1, 1};
  enum { K = 16 };
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
      const int64_t n = ns[c], batch = batches[c], bins = n / 2 + 1;
      double *x = tl_xmalloc((size_t)(batch * n) * sizeof *x);
      ld *wr = tl_xmalloc((size_t)n * sizeof *wr), *wi = tl_xmalloc((size_t)n * sizeof *wi);
      roots(n, wr, wi);
      tl_seed(7000 + (uint64_t)n);
      tl_fill_randn(x, batch * n);
      tl_round(dt, x, batch * n);
      int64_t ks[K];
      for (int i = 0; i < K; i++) ks[i] = i == 0 ? 0 : i == 1 ? 1 : i == 2 ? bins - 1
                                        : (int64_t)(tl_next() % (uint64_t)bins);
      bk_buffer *bx = tl_buf(dt, x, batch * n), *y = NULL, *z = NULL;
      if (TL_OK(bk_rfft(tl_ctx, bx, batch, n, &y)) == BK_OK) {
        double *g = tl_read(y);
        double got[2 * K], ref[2 * K];
        for (int64_t b = 0; b < batch; b++) {
          for (int i = 0; i < K; i++) {
            ref_bin(x + b * n, n, ks[i], wr, wi, &ref[2 * i], &ref[2 * i + 1]);
            got[2 * i] = g[(b * bins + ks[i]) * 2];
            got[2 * i + 1] = g[(b * bins + ks[i]) * 2 + 1];
          }
          if (!TL_CLOSE(got, ref, 2 * K, tl_tol_contract(dt, (double)n),
                        signal_scale(x + b * n, 1, n)))
            fprintf(stderr, "  (rfft %s n = %" PRId64 " row %" PRId64 ")\n", tl_dtname(dt), n, b);
        }
        /* The inverse of that spectrum, sampled likewise. */
        if (TL_OK(bk_irfft_unnormalized(tl_ctx, y, batch, n, &z)) == BK_OK) {
          double *h = tl_read(z);
          for (int64_t b = 0; b < batch; b++) {
            for (int i = 0; i < K; i++) {
              const int64_t t = i == 0 ? 0 : i == 1 ? n - 1 : (int64_t)(tl_next() % (uint64_t)n);
              ref[i] = ref_sample(g + b * bins * 2, n, t, wr, wi);
              got[i] = h[b * n + t];
            }
            if (!TL_CLOSE(got, ref, K, tl_tol_contract(dt, (double)n),
                          spec_scale(g + b * bins * 2, 1, n, 0)))
              fprintf(stderr, "  (irfft %s n = %" PRId64 " row %" PRId64 ")\n", tl_dtname(dt), n,
                      b);
          }
          free(h);
        }
        if (batch > 1 && bk_context_device(tl_ctx).kind == BK_DEVICE_CPU) {
          bk_buffer *row = tl_buf(dt, x + (batch - 1) * n, n), *r = NULL;
          if (TL_OK(bk_rfft(tl_ctx, row, 1, n, &r)) == BK_OK) {
            double *gr = tl_read(r);
            TL_CHECK(memcmp(gr, g + (batch - 1) * bins * 2, (size_t)(bins * 2) * sizeof *gr) == 0,
                     "n = %" PRId64 ": rfft of a row alone differs from the row in a batch", n);
            free(gr);
          }
          bk_buffer_release(r);
          bk_buffer_release(row);
        }
        free(g);
      }
      TL_UNCHANGED(bx, x, batch * n);
      bk_buffer_release(z);
      bk_buffer_release(y);
      bk_buffer_release(bx);
      free(x);
      free(wr);
      free(wi);
    }
  }
}

/* ---- empty cases and rejections ----------------------------------------------------- */

static void empty(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    bk_buffer *e = tl_buf(dt, NULL, 0), *y = NULL;
    if (TL_OK(bk_rfft(tl_ctx, e, 0, 7, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    y = NULL;
    if (TL_OK(bk_irfft(tl_ctx, e, 0, 8, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    y = NULL;
    if (TL_OK(bk_irfft_unnormalized(tl_ctx, e, 0, 1, &y)) == BK_OK) TL_BUF_EXACT(y, NULL, 0);
    bk_buffer_release(y);
    bk_buffer_release(e);
  }
}

static void errors(void) {
  double v[8] = {0};
  bk_buffer *x = tl_buf(BK_F32, v, 8), *x64 = tl_buf(BK_F64, v, 8), *y = (bk_buffer *)&y;
  TL_REJECT(bk_rfft(tl_ctx, x, 2, 4, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_rfft(tl_ctx, NULL, 2, 4, &y), BK_ERR_NULL, "x");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_rfft(tl_ctx, x, 2, 0, &y), BK_ERR_INVALID_ARGUMENT, "n = 0");
  TL_REJECT(bk_rfft(tl_ctx, x, 0, 0, &y), BK_ERR_INVALID_ARGUMENT, "n = 0");
  TL_REJECT(bk_rfft(tl_ctx, x, -1, 4, &y), BK_ERR_INVALID_ARGUMENT, "batch = -1");
  TL_REJECT(bk_rfft(tl_ctx, x, 2, -4, &y), BK_ERR_INVALID_ARGUMENT, "n = -4");
  TL_REJECT(bk_rfft(tl_ctx, x, 2, 3, &y), BK_ERR_INVALID_ARGUMENT, "x has length 8, expected 6");
  TL_REJECT(bk_rfft(tl_ctx, x, INT64_MAX, 2, &y), BK_ERR_INVALID_ARGUMENT, "overflow");
  TL_REJECT(bk_rfft(tl_ctx, x, 1, INT64_MAX, &y), BK_ERR_INVALID_ARGUMENT, "overflow");
  TL_CHECK(y == NULL, "out not cleared on failure");

  /* spec of (2, 3, 2) = 12 values pairs with n = 4 or 5; 8 values with n = 2 or 3. */
  TL_REJECT(bk_irfft(tl_ctx, x, 2, 4, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_irfft(tl_ctx, NULL, 2, 4, &y), BK_ERR_NULL, "spec");
  TL_REJECT(bk_irfft(tl_ctx, x, 2, 0, &y), BK_ERR_INVALID_ARGUMENT, "n = 0");
  TL_REJECT(bk_irfft(tl_ctx, x, 2, 4, &y), BK_ERR_INVALID_ARGUMENT,
            "spec has length 8, expected 12");
  TL_REJECT(bk_irfft(tl_ctx, x, -2, 2, &y), BK_ERR_INVALID_ARGUMENT, "batch");
  TL_REJECT(bk_irfft_unnormalized(tl_ctx, x, 2, 5, &y), BK_ERR_INVALID_ARGUMENT,
            "spec has length 8, expected 12");
  TL_REJECT(bk_irfft_unnormalized(tl_ctx, x, 2, -1, &y), BK_ERR_INVALID_ARGUMENT, "n = -1");
  TL_REJECT(bk_irfft_unnormalized(tl_ctx, NULL, 2, 3, &y), BK_ERR_NULL, "spec");
  TL_REJECT(bk_irfft_unnormalized(tl_ctx, x, 2, 3, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_irfft_unnormalized(tl_ctx, x, INT64_MAX / 2, 3, &y), BK_ERR_INVALID_ARGUMENT,
            "overflow");
  TL_CHECK(y == NULL, "out not cleared on failure");
  /* Both valid lengths for 8 spectrum values work. */
  if (TL_OK(bk_irfft(tl_ctx, x, 2, 2, &y)) == BK_OK) bk_buffer_release(y);
  if (TL_OK(bk_irfft(tl_ctx, x64, 2, 3, &y)) == BK_OK) bk_buffer_release(y);

  bk_context *other = tl_other_ctx();
  if (other) {
    TL_REJECT(bk_rfft(other, x, 2, 4, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
    TL_REJECT(bk_irfft(other, x, 2, 2, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
  }
  bk_buffer_release(x);
  bk_buffer_release(x64);
}

/* Every allocation the call makes (result, plan tables, scratch) fails in
 * turn: the call reports BK_ERR_OUT_OF_MEMORY, clears *out and leaks no
 * buffer. Lengths cover the direct path, Bluestein, and Bluestein inside the
 * even path. */
static void allocation_failures(void) {
  static const int64_t ns[] = {12, 97, 194};
  for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
    const int64_t n = ns[c], batch = 2, len = batch * (n / 2 + 1) * 2;
    double *v = tl_xmalloc((size_t)len * sizeof *v);
    tl_seed(7000 + (uint64_t)n);
    tl_fill_randn(v, len);
    bk_buffer *x = tl_buf(BK_F64, v, batch * n), *spec = tl_buf(BK_F64, v, len);
    for (int which = 0; which < 2; which++) {
      int64_t live = bk__live_buffers(), k;
      for (k = 1; k < 100; k++) {
        bk_buffer *y = (bk_buffer *)&y;
        bk__inject_arm(k);
        bk_status st =
            which ? bk_irfft(tl_ctx, spec, batch, n, &y) : bk_rfft(tl_ctx, x, batch, n, &y);
        bk__inject_arm(0);
        if (st == BK_OK) {
          bk_buffer_release(y);
          break;
        }
        TL_CHECK(st == BK_ERR_OUT_OF_MEMORY && y == NULL && bk__live_buffers() == live,
                 "n = %" PRId64 ", failing allocation %" PRId64 ": status %d", n, k, (int)st);
      }
      TL_CHECK(k > 1 && k < 100, "n = %" PRId64 ": the call made %" PRId64 " allocations", n, k);
    }
    bk_buffer_release(x);
    bk_buffer_release(spec);
    free(v);
  }
}

int main(void) {
  tl_init();
  TL_RUN(examples);
  TL_RUN(forward_random);
  TL_RUN(inverse_random);
  TL_RUN(round_trip);
  TL_RUN(ignored_parts);
  TL_RUN(adjoint);
  TL_RUN(determinism);
  TL_RUN(short_rows);
  TL_RUN(long_rows);
  TL_RUN(empty);
  TL_RUN(errors);
  TL_RUN(allocation_failures);
  return tl_finish();
}
