/*
 * fft.c — CPU real FFTs over a packed half spectrum, for every n >= 1.
 *
 * Everything is computed in double and rounded once on store. The engine is
 * a complex FFT of length m built per call (a "plan"):
 *  - mixed radix, decimation in time, out of place: radices 4, 2, 3, 5 have
 *    hand-written butterflies, any other prime p <= FFT_MAX_RADIX a direct
 *    p-point DFT;
 *  - Bluestein's chirp-z algorithm when m has a larger prime factor: the
 *    length-m DFT becomes a circular convolution of power-of-two length
 *    M >= 2m-1, done with the mixed-radix engine.
 * Twiddles come from one table of m roots exp(-2 pi i k/m), each computed
 * directly with cos/sin of an octant-reduced angle (no recurrence), so the
 * error stays O(eps log m).
 *
 * A real transform of even n = 2h runs one complex FFT of length h on the
 * samples packed as z[t] = x[2t] + i x[2t+1] and separates the even and odd
 * halves afterwards; odd n runs a complex FFT of length n. The inverse
 * undoes the same steps and computes conj(DFT(conj(Y))). Transforms of a
 * batch are independent and run in parallel, each with its own scratch.
 */
#include "cpu.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define FFT_PI 3.14159265358979323846264338327950288
/* Largest prime radix done as a direct DFT; a larger prime factor sends the
 * whole length to Bluestein (a p-point DFT costs p operations per point). */
#define FFT_MAX_RADIX 64
#define FFT_MAX_FACTORS 64

typedef struct cpx {
  double re, im;
} cpx;

static inline cpx cmul(cpx a, cpx b) {
  return (cpx){a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

/* ---- plans ------------------------------------------------------------------- */

typedef struct plan {
  int64_t m;                    /* complex length */
  int nf;                       /* number of radices (direct path) */
  int64_t fac[FFT_MAX_FACTORS]; /* radices, product m */
  cpx *w;                       /* (m) w[k] = exp(-2 pi i k/m); direct path */
  /* Bluestein path (blue != NULL): */
  struct plan *blue; /* direct plan of the power-of-two length M */
  cpx *chirp;        /* (m) exp(-pi i k^2/m) */
  cpx *kernel;       /* (M) DFT of the conjugate chirp, scaled by 1/M */
  int64_t scratch;   /* complex scratch one transform needs (2M or 0) */
  cpx *half;         /* top-level plans of a real even length 2m: (m+1) exp(-pi i k/m) */
} plan;

/* Splits m into radices, 4 first (fewest passes), then 2, 3, 5 and the other
 * primes in increasing order. Returns the largest prime factor. */
static int64_t factorize(int64_t m, int64_t *fac, int *nf) {
  int n = 0;
  int64_t largest = 1;
  while (m % 4 == 0) {
    fac[n++] = 4;
    m /= 4;
    largest = 2;
  }
  for (int64_t p = 2; m > 1; p += p == 2 ? 1 : 2) {
    if (p * p > m) p = m; /* what is left is prime */
    while (m % p == 0) {
      fac[n++] = p;
      m /= p;
      largest = p;
    }
  }
  *nf = n;
  return largest;
}

/* count complex values of scratch for the public function fn; each caller
 * is an allocation site of its own (alloc_cpx). */
static bk_status alloc_cpx_at(bk_alloc_site *site, const char *fn, int64_t count, cpx **out) {
  *out = NULL;
  if (count <= 0) return BK_OK;
  *out = bk__host_alloc_at(site, fn, "scratch", (size_t)count, sizeof(cpx), false);
  return *out ? BK_OK : BK_ERR_OUT_OF_MEMORY;
}
#define alloc_cpx(fn, count, out) alloc_cpx_at(BK_ALLOC_SITE(), (fn), (count), (out))

static void plan_free(plan *p) {
  if (!p) return;
  plan_free(p->blue);
  bk__host_free(p->w);
  bk__host_free(p->chirp);
  bk__host_free(p->kernel);
  bk__host_free(p->half);
  bk__host_free(p);
}

static void plan_free_cached(void *p) { plan_free(p); }

static void exec(const plan *p, const cpx *in, cpx *out, cpx *scratch);

/*
 * exp(-i pi num/den) for 0 <= num <= 2 den. The angle is folded into the
 * first octant with exact integer arithmetic before cos/sin see it, so
 * mirrored angles give mirrored values bit for bit and multiples of pi/4
 * come out exact (0, +-1) or symmetric (+-sqrt(1/2)).
 */
static cpx unit_root(int64_t num, int64_t den) {
  int conj = 0, neg_re = 0;
  if (num > den) { /* theta = 2 pi - theta' */
    num = 2 * den - num;
    conj = 1;
  }
  if (2 * num > den) { /* theta' = pi - theta'' */
    num = den - num;
    neg_re = 1;
  }
  double c, s;
  if (4 * num > den) { /* theta'' = pi/2 - a */
    const double a = FFT_PI * (double)(den - 2 * num) / (2.0 * (double)den);
    c = sin(a);
    s = cos(a);
  } else {
    const double a = FFT_PI * (double)num / (double)den;
    c = cos(a);
    s = sin(a);
  }
  if (neg_re) c = -c;
  return conj ? (cpx){c, s} : (cpx){c, -s};
}

static bk_status plan_make(const char *fn, int64_t m, plan **out) {
  *out = NULL;
  plan *p = bk__host_zalloc(fn, "memory for an FFT plan", 1, sizeof *p);
  if (!p) return BK_ERR_OUT_OF_MEMORY;
  p->m = m;
  bk_status st = BK_OK;
  if (factorize(m, p->fac, &p->nf) <= FFT_MAX_RADIX) {
    st = alloc_cpx(fn, m, &p->w);
    if (st == BK_OK)
      for (int64_t k = 0; k < m; k++) p->w[k] = unit_root(2 * k, m);
  } else {
    /* Bluestein: e^{-2 pi i kt/m} = c_k c_t conj(c_{k-t}) with
     * c_k = e^{-pi i k^2/m}, so X[k] = c_k * sum_t (x_t c_t) conj(c_{k-t}),
     * a circular convolution once padded to M >= 2m-1. */
    int64_t M = 1;
    while (M < 2 * m - 1) M *= 2;
    p->scratch = 2 * M;
    st = plan_make(fn, M, &p->blue);
    if (st == BK_OK) st = alloc_cpx(fn, m, &p->chirp);
    if (st == BK_OK) st = alloc_cpx(fn, M, &p->kernel);
    cpx *tmp = NULL;
    if (st == BK_OK) st = alloc_cpx(fn, M, &tmp);
    if (st == BK_OK) {
      /* k^2 mod 2m, kept exact in integers: (k+1)^2 = k^2 + 2k + 1. */
      int64_t sq = 0;
      for (int64_t k = 0; k < m; k++) {
        p->chirp[k] = unit_root(sq, m);
        sq += 2 * k + 1;
        while (sq >= 2 * m) sq -= 2 * m;
      }
      for (int64_t j = 0; j < M; j++) tmp[j] = (cpx){0.0, 0.0};
      tmp[0] = (cpx){p->chirp[0].re, -p->chirp[0].im};
      for (int64_t j = 1; j < m; j++) {
        tmp[j] = (cpx){p->chirp[j].re, -p->chirp[j].im};
        tmp[M - j] = tmp[j];
      }
      exec(p->blue, tmp, p->kernel, NULL);
      /* The inverse power-of-two FFT leaves a factor M: fold 1/M (exact) in. */
      const double inv = 1.0 / (double)M;
      for (int64_t j = 0; j < M; j++) {
        p->kernel[j].re *= inv;
        p->kernel[j].im *= inv;
      }
    }
    bk__host_free(tmp);
  }
  if (st != BK_OK) {
    plan_free(p);
    return st;
  }
  *out = p;
  return BK_OK;
}

/* ---- the mixed-radix engine --------------------------------------------------- */

/*
 * One level of decimation in time: out[0..m) = DFT_m of the m inputs
 * in[0], in[is], in[2 is], ... The first radix p splits them into p
 * subsequences (every p-th input), each transformed into out[r*q .. r*q+q)
 * with q = m/p; the butterflies then combine
 *   X[k + q s] = sum_r W_p^{rs} (W_m^{rk} Y_r[k]).
 * W_m^j is w[j*ws] of the plan's table of N roots (ws = N/m).
 */
static void pass(const cpx *w, int64_t N, const cpx *in, int64_t is, cpx *out, int64_t m,
                 const int64_t *fac, int64_t ws) {
  const int64_t p = fac[0], q = m / p;
  if (q == 1) {
    for (int64_t r = 0; r < p; r++) out[r] = in[r * is];
  } else {
    for (int64_t r = 0; r < p; r++)
      pass(w, N, in + r * is, is * p, out + r * q, q, fac + 1, ws * p);
  }
  const int64_t wp = N / p; /* W_p^1 = w[wp] */
  cpx t[FFT_MAX_RADIX];
  for (int64_t k = 0; k < q; k++) {
    t[0] = out[k];
    for (int64_t r = 1; r < p; r++) t[r] = cmul(out[r * q + k], w[r * k * ws]);
    switch (p) {
      case 2:
        out[k] = (cpx){t[0].re + t[1].re, t[0].im + t[1].im};
        out[k + q] = (cpx){t[0].re - t[1].re, t[0].im - t[1].im};
        break;
      case 3: {
        /* W_3 = -1/2 - i sqrt(3)/2. */
        const double c = 0.86602540378443864676372317075294;
        const cpx s = {t[1].re + t[2].re, t[1].im + t[2].im};
        const cpx d = {t[1].re - t[2].re, t[1].im - t[2].im};
        const cpx h = {t[0].re - 0.5 * s.re, t[0].im - 0.5 * s.im};
        out[k] = (cpx){t[0].re + s.re, t[0].im + s.im};
        out[k + q] = (cpx){h.re + c * d.im, h.im - c * d.re};
        out[k + 2 * q] = (cpx){h.re - c * d.im, h.im + c * d.re};
        break;
      }
      case 4: {
        const cpx b0 = {t[0].re + t[2].re, t[0].im + t[2].im};
        const cpx b1 = {t[0].re - t[2].re, t[0].im - t[2].im};
        const cpx b2 = {t[1].re + t[3].re, t[1].im + t[3].im};
        const cpx b3 = {t[1].re - t[3].re, t[1].im - t[3].im};
        out[k] = (cpx){b0.re + b2.re, b0.im + b2.im};
        out[k + q] = (cpx){b1.re + b3.im, b1.im - b3.re}; /* b1 - i b3 */
        out[k + 2 * q] = (cpx){b0.re - b2.re, b0.im - b2.im};
        out[k + 3 * q] = (cpx){b1.re - b3.im, b1.im + b3.re}; /* b1 + i b3 */
        break;
      }
      case 5: {
        /* cos and sin of 2 pi/5 and 4 pi/5. */
        const double c1 = 0.30901699437494742410229341718282;
        const double s1 = 0.95105651629515357211643933337938;
        const double c2 = -0.80901699437494742410229341718282;
        const double s2 = 0.58778525229247312916870595463907;
        const cpx a1 = {t[1].re + t[4].re, t[1].im + t[4].im};
        const cpx b1 = {t[1].re - t[4].re, t[1].im - t[4].im};
        const cpx a2 = {t[2].re + t[3].re, t[2].im + t[3].im};
        const cpx b2 = {t[2].re - t[3].re, t[2].im - t[3].im};
        const cpx u1 = {t[0].re + c1 * a1.re + c2 * a2.re, t[0].im + c1 * a1.im + c2 * a2.im};
        const cpx u2 = {t[0].re + c2 * a1.re + c1 * a2.re, t[0].im + c2 * a1.im + c1 * a2.im};
        /* v1 = s1 b1 + s2 b2, v2 = s2 b1 - s1 b2; outputs u -/+ i v. */
        const cpx v1 = {s1 * b1.re + s2 * b2.re, s1 * b1.im + s2 * b2.im};
        const cpx v2 = {s2 * b1.re - s1 * b2.re, s2 * b1.im - s1 * b2.im};
        out[k] = (cpx){t[0].re + a1.re + a2.re, t[0].im + a1.im + a2.im};
        out[k + q] = (cpx){u1.re + v1.im, u1.im - v1.re};
        out[k + 4 * q] = (cpx){u1.re - v1.im, u1.im + v1.re};
        out[k + 2 * q] = (cpx){u2.re + v2.im, u2.im - v2.re};
        out[k + 3 * q] = (cpx){u2.re - v2.im, u2.im + v2.re};
        break;
      }
      default:
        /* A direct p-point DFT; W_p^{rs} with rs reduced mod p. */
        for (int64_t s = 0; s < p; s++) {
          double re = t[0].re, im = t[0].im;
          int64_t e = 0;
          for (int64_t r = 1; r < p; r++) {
            e += s;
            if (e >= p) e -= p;
            const cpx z = cmul(t[r], w[e * wp]);
            re += z.re;
            im += z.im;
          }
          out[k + s * q] = (cpx){re, im};
        }
        break;
    }
  }
}

/* out[0..m) = DFT_m(in[0..m)), out of place; scratch holds p->scratch
 * values (Bluestein only). */
static void exec(const plan *p, const cpx *in, cpx *out, cpx *scratch) {
  const int64_t m = p->m;
  if (!p->blue) {
    if (m == 1)
      out[0] = in[0];
    else
      pass(p->w, m, in, 1, out, m, p->fac, 1);
    return;
  }
  const int64_t M = p->blue->m;
  cpx *a = scratch, *A = scratch + M;
  for (int64_t t = 0; t < m; t++) a[t] = cmul(in[t], p->chirp[t]);
  for (int64_t t = m; t < M; t++) a[t] = (cpx){0.0, 0.0};
  exec(p->blue, a, A, NULL);
  /* Pointwise product, then the inverse FFT as conj(DFT(conj(.))). */
  for (int64_t j = 0; j < M; j++) {
    const cpx z = cmul(A[j], p->kernel[j]);
    A[j] = (cpx){z.re, -z.im};
  }
  exec(p->blue, A, a, NULL);
  for (int64_t k = 0; k < m; k++) out[k] = cmul((cpx){a[k].re, -a[k].im}, p->chirp[k]);
}

/* ---- real transforms ---------------------------------------------------------------- */

/* Everything one call shares: the complex plan (with the half-length
 * twiddles of the even path), and per-thread scratch. Plans are cached in
 * the context by real length: the first call of a length that completes
 * hands its plan to the cache, later ones find it there. */
typedef struct job {
  int64_t n, m;  /* real length, complex length (n/2 for even n, else n) */
  plan *p;       /* the complex transform */
  int owned;     /* p is this job's to free (not, or not yet, cached) */
  cpx *scratch;  /* (threads, per) */
  int64_t per;   /* complex values of scratch per thread */
  int threads;
} job;

static void job_free(job *j) {
  if (j->owned) plan_free(j->p);
  bk__host_free(j->scratch);
}

static bk_status job_make(bk_context *ctx, const char *fn, int64_t n, int64_t batch, job *j) {
  j->n = n;
  j->m = n % 2 == 0 ? n / 2 : n;
  j->p = bk__cpu_cache_get(ctx, BK_CPU_CACHE_FFT, n);
  j->owned = j->p == NULL;
  j->scratch = NULL;
  j->threads = 1;
#ifdef _OPENMP
  j->threads = omp_get_max_threads();
  if (j->threads < 1) j->threads = 1;
  if ((int64_t)j->threads > batch) j->threads = (int)batch;
#endif
  (void)batch;
  bk_status st = j->p ? BK_OK : plan_make(fn, j->m, &j->p);
  if (st == BK_OK && j->owned && n % 2 == 0) {
    st = alloc_cpx(fn, n / 2 + 1, &j->p->half);
    if (st == BK_OK) {
      for (int64_t k = 0; k <= n / 2; k++) j->p->half[k] = unit_root(2 * k, n);
    }
  }
  if (st == BK_OK) {
    /* Input and output of the complex transform, then its own scratch. */
    j->per = 2 * j->m + j->p->scratch;
    if ((uint64_t)j->per > (uint64_t)INT64_MAX / (uint64_t)j->threads)
      st = bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "scratch size overflows");
    else
      st = alloc_cpx(fn, j->per * j->threads, &j->scratch);
  }
  if (st != BK_OK) {
    job_free(j);
    return st;
  }
  /* Only a plan whose call got everything it needs is cached, so a call
   * allocates the same way until it first succeeds. */
  if (j->owned && bk__cpu_cache_put(ctx, BK_CPU_CACHE_FFT, n, j->p, plan_free_cached))
    j->owned = 0;
  return BK_OK;
}

static int thread_id(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/* One forward transform: x (n) -> y (n/2+1, 2). */
static void rfft_one(const job *j, bk_dtype dt, const void *x, int64_t xo, void *y, int64_t yo,
                     cpx *s) {
  const int64_t n = j->n, m = j->m;
  cpx *z = s, *Z = s + m, *sc = s + 2 * m;
  if (n % 2 == 1) {
    for (int64_t t = 0; t < n; t++) z[t] = (cpx){bk_ld(dt, x, xo + t), 0.0};
    exec(j->p, z, Z, sc);
    for (int64_t k = 0; k <= n / 2; k++) {
      bk_st(dt, y, yo + 2 * k, Z[k].re);
      /* Bin 0 of a real signal is real; store its exact zero. */
      bk_st(dt, y, yo + 2 * k + 1, k == 0 ? 0.0 : Z[k].im);
    }
    return;
  }
  for (int64_t t = 0; t < m; t++)
    z[t] = (cpx){bk_ld(dt, x, xo + 2 * t), bk_ld(dt, x, xo + 2 * t + 1)};
  exec(j->p, z, Z, sc);
  /* With Zc = conj(Z[(m-k) mod m]): the even samples' DFT is
   * E = (Z + Zc)/2, the odd samples' O = (Z - Zc)/(2i), and
   * X[k] = E[k] + W_n^k O[k] for k = 0..m (Z[m] meaning Z[0]). */
  for (int64_t k = 0; k <= m; k++) {
    const cpx a = Z[k == m ? 0 : k];
    const cpx b = Z[k == 0 ? 0 : m - k];
    const cpx e = {0.5 * (a.re + b.re), 0.5 * (a.im - b.im)};
    const cpx o = {0.5 * (a.im + b.im), -0.5 * (a.re - b.re)};
    const cpx wo = cmul(j->p->half[k], o);
    /* Bins 0 and n/2 are real: their imaginary parts cancel exactly. */
    const int real_bin = k == 0 || k == m;
    bk_st(dt, y, yo + 2 * k, e.re + wo.re);
    bk_st(dt, y, yo + 2 * k + 1, real_bin ? 0.0 : e.im + wo.im);
  }
}

/* One inverse transform: spec (n/2+1, 2) -> y (n), unnormalized sum
 * x[t] = sum_{k<n} X[k] e^{2 pi i kt/n} over the Hermitian extension, then
 * divided by n when normalize is 1. */
static void irfft_one(const job *j, bk_dtype dt, const void *spec, int64_t so, void *y,
                      int64_t yo, int normalize, cpx *s) {
  const int64_t n = j->n, m = j->m;
  cpx *Z = s, *z = s + m, *sc = s + 2 * m;
  const double div = normalize ? (double)n : 1.0;
  /* Bin k as given, except that the ignored imaginary parts of bin 0 and
   * (even n) bin n/2 read as 0, so nothing stored there can leak in. */
#define BIN(k)                                                                          \
  ((cpx){bk_ld(dt, spec, so + 2 * (k)),                                                 \
         ((k) == 0 || 2 * (k) == n) ? 0.0 : bk_ld(dt, spec, so + 2 * (k) + 1)})
  if (n % 2 == 1) {
    /* conj(Y) of the full Hermitian spectrum: conj(X[k]) for k <= n/2 and
     * X[n-k] above; the real part of DFT(conj(Y)) is the answer. */
    for (int64_t k = 0; k <= n / 2; k++) {
      const cpx v = BIN(k);
      Z[k] = (cpx){v.re, -v.im};
      if (k > 0) Z[n - k] = v;
    }
    exec(j->p, Z, z, sc);
    for (int64_t t = 0; t < n; t++) bk_st(dt, y, yo + t, z[t].re / div);
    return;
  }
  /* Z[k] = (X[k] + conj(X[m-k])) + i (X[k] - conj(X[m-k])) W_n^{-k},
   * k = 0..m-1: twice the DFT of x_even + i x_odd, whose unnormalized
   * inverse of length m is then exactly x_even + i x_odd unnormalized. The
   * inverse runs as conj(DFT(conj(.))), so store the conjugate. */
  for (int64_t k = 0; k < m; k++) {
    const cpx a = BIN(k);
    const cpx b = BIN(m - k);
    const cpx e = {a.re + b.re, a.im - b.im};
    const cpx d = {a.re - b.re, a.im + b.im};
    const cpx wi = {j->p->half[k].re, -j->p->half[k].im}; /* W_n^{-k} */
    const cpx o = cmul(d, wi);
    Z[k] = (cpx){e.re - o.im, -(e.im + o.re)}; /* conj(e + i o) */
  }
#undef BIN
  exec(j->p, Z, z, sc);
  for (int64_t t = 0; t < m; t++) {
    bk_st(dt, y, yo + 2 * t, z[t].re / div);
    bk_st(dt, y, yo + 2 * t + 1, -z[t].im / div);
  }
}

bk_status bk__cpu_rfft(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t batch,
                       int64_t n) {
  job j;
  bk_status st = job_make(ctx, "bk_rfft", n, batch, &j);
  if (st != BK_OK) return st;
  const int64_t bins = 2 * (n / 2 + 1);
#pragma omp parallel for schedule(static) num_threads(j.threads) \
    if (batch > 1 && batch * n >= BK_CPU_PARALLEL_MIN)
  for (int64_t b = 0; b < batch; b++)
    rfft_one(&j, dt, x, b * n, y, b * bins, j.scratch + (int64_t)thread_id() * j.per);
  job_free(&j);
  return BK_OK;
}

bk_status bk__cpu_irfft(bk_context *ctx, bk_dtype dt, const void *spec, void *y, int64_t batch,
                        int64_t n, int normalize) {
  job j;
  bk_status st = job_make(ctx, normalize ? "bk_irfft" : "bk_irfft_unnormalized", n, batch, &j);
  if (st != BK_OK) return st;
  const int64_t bins = 2 * (n / 2 + 1);
#pragma omp parallel for schedule(static) num_threads(j.threads) \
    if (batch > 1 && batch * n >= BK_CPU_PARALLEL_MIN)
  for (int64_t b = 0; b < batch; b++)
    irfft_one(&j, dt, spec, b * bins, y, b * n, normalize,
              j.scratch + (int64_t)thread_id() * j.per);
  job_free(&j);
  return BK_OK;
}
