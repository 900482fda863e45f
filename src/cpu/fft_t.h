/*
 * fft_t.h — the typed engine of fft.c, a template included once per dtype
 * after typed_t.h (instantiate.h): plans whose twiddles are stored in BK_T,
 * the Stockham stages, Bluestein's steps, and the real transforms over
 * groups of V lanes. float32 data are transformed in float32 and float64
 * data in float64, every twiddle computed in double and rounded once.
 */

/* One Stockham stage of radix p over sub-transforms of length L = p*mm:
 * input value (q, j + r*mm) -> output (q, p*j + t), q running over the
 * S = V * (product of the earlier radices) interleaved sequences. */
typedef struct BK_FN(stage) {
  int64_t p, mm;
  const BK_T *wr, *wi; /* (p-1, mm): W_L^{t j}, t = 1..p-1 */
  const BK_T *cr, *ci; /* generic radix: (p) W_p^e */
} BK_FN(stage);

typedef struct BK_FN(plan) {
  int64_t m; /* complex length */
  int ns;
  BK_FN(stage) st[FFT_MAX_FACTORS];
  BK_T *tw; /* every stage's tables, one block */
  /* Bluestein path (blue != NULL): */
  struct BK_FN(plan) *blue; /* direct plan of the smooth length M */
  BK_T *chirp;     /* (2, m) exp(-pi i k^2/m), real parts then imaginary */
  BK_T *kernel;    /* (2, M) DFT of the conjugate chirp, scaled by 1/M */
  BK_T *half;      /* top-level plans of a real even length 2m: (2, m+1) exp(-pi i k/m) */
} BK_FN(plan);

/* count values of memory for the public function fn; each caller is an
 * allocation site of its own (BK_FFT_ALLOC). */
static bk_status BK_FN(alloc_at)(bk_alloc_site *site, const char *fn, int64_t count, BK_T **out) {
  *out = NULL;
  if (count <= 0) return BK_OK;
  *out = bk__host_alloc_at(site, fn, "scratch", (size_t)count, sizeof(BK_T), false);
  return *out ? BK_OK : BK_ERR_OUT_OF_MEMORY;
}
#define BK_FFT_ALLOC(fn, count, out) BK_FN(alloc_at)(BK_ALLOC_SITE(), (fn), (count), (out))

/* W_L^e = exp(-2 pi i e/L), computed in double and rounded once. */
static void BK_FN(root)(int64_t e, int64_t L, BK_T *re, BK_T *im) {
  double r, i;
  root_of(e, L, &r, &i);
  *re = (BK_T)r;
  *im = (BK_T)i;
}

static void BK_FN(plan_free)(BK_FN(plan) *p) {
  if (!p) return;
  BK_FN(plan_free)(p->blue);
  bk__host_free(p->tw);
  bk__host_free(p->chirp);
  bk__host_free(p->kernel);
  bk__host_free(p->half);
  bk__host_free(p);
}

static void BK_FN(plan_free_cached)(void *p) { BK_FN(plan_free)(p); }

static BK_T *BK_FN(exec)(const BK_FN(plan) *p, int64_t V, BK_T *a, BK_T *b, BK_T *sc);

static bk_status BK_FN(plan_direct)(const char *fn, BK_FN(plan) *p) {
  int64_t fac[FFT_MAX_FACTORS];
  int nf;
  factorize(p->m, fac, &nf);
  int64_t total = 0, L = p->m;
  for (int i = 0; i < nf; i++) {
    total += 2 * (fac[i] - 1) * (L / fac[i]);
    if (fac[i] > 7) total += 2 * fac[i];
    L /= fac[i];
  }
  bk_status st = BK_FFT_ALLOC(fn, total, &p->tw);
  if (st != BK_OK) return st;
  BK_T *w = p->tw;
  L = p->m;
  p->ns = nf;
  for (int i = 0; i < nf; i++) {
    BK_FN(stage) *s = &p->st[i];
    const int64_t r = fac[i], mm = L / r;
    s->p = r;
    s->mm = mm;
    BK_T *wr = w, *wi = w + (r - 1) * mm;
    for (int64_t t = 1; t < r; t++)
      for (int64_t j = 0; j < mm; j++)
        BK_FN(root)(t * j, L, &wr[(t - 1) * mm + j], &wi[(t - 1) * mm + j]);
    s->wr = wr;
    s->wi = wi;
    w += 2 * (r - 1) * mm;
    s->cr = s->ci = NULL;
    if (r > 7) {
      BK_T *cr = w, *ci = w + r;
      for (int64_t e = 0; e < r; e++) BK_FN(root)(e, r, &cr[e], &ci[e]);
      s->cr = cr;
      s->ci = ci;
      w += 2 * r;
    }
    L = mm;
  }
  return BK_OK;
}

static bk_status BK_FN(plan_make)(const char *fn, int64_t m, BK_FN(plan) **out) {
  *out = NULL;
  BK_FN(plan) *p = bk__host_zalloc(fn, "memory for an FFT plan", 1, sizeof *p);
  if (!p) return BK_ERR_OUT_OF_MEMORY;
  p->m = m;
  const int64_t M = blue_length(m);
  bk_status st = BK_OK;
  if (M == 0) {
    st = BK_FN(plan_direct)(fn, p);
  } else {
    /* e^{-2 pi i kt/m} = c_k c_t conj(c_{k-t}) with c_k = e^{-pi i k^2/m},
     * so X[k] = c_k * sum_t (x_t c_t) conj(c_{k-t}), a circular
     * convolution once padded to M >= 2m-1. The chirp's angles are exact
     * integers (k^2 mod 2m) before cos/sin see them. */
    st = BK_FN(plan_make)(fn, M, &p->blue);
    if (st == BK_OK) st = BK_FFT_ALLOC(fn, 2 * m, &p->chirp);
    if (st == BK_OK) st = BK_FFT_ALLOC(fn, 2 * M, &p->kernel);
    BK_T *tmp = NULL;
    if (st == BK_OK) st = BK_FFT_ALLOC(fn, 2 * M, &tmp);
    if (st == BK_OK) {
      BK_T *cr = p->chirp, *ci = p->chirp + m;
      /* k^2 mod 2m, kept exact in integers: (k+1)^2 = k^2 + 2k + 1. */
      int64_t sq = 0;
      for (int64_t k = 0; k < m; k++) {
        double re, im;
        unit_root(sq, m, &re, &im);
        cr[k] = (BK_T)re;
        ci[k] = (BK_T)im;
        sq += 2 * k + 1;
        while (sq >= 2 * m) sq -= 2 * m;
      }
      BK_T *tr = tmp, *ti = tmp + M;
      for (int64_t j = 0; j < M; j++) tr[j] = ti[j] = 0;
      tr[0] = cr[0];
      ti[0] = -ci[0];
      for (int64_t j = 1; j < m; j++) {
        tr[j] = tr[M - j] = cr[j];
        ti[j] = ti[M - j] = -ci[j];
      }
      const BK_T *K = BK_FN(exec)(p->blue, 1, tmp, p->kernel, NULL);
      /* The inverse transform leaves a factor M: fold 1/M in. */
      for (int64_t j = 0; j < 2 * M; j++) p->kernel[j] = (BK_T)((double)K[j] / (double)M);
    }
    bk__host_free(tmp);
  }
  if (st != BK_OK) {
    BK_FN(plan_free)(p);
    return st;
  }
  *out = p;
  return BK_OK;
}

/* ---- the Stockham engine ------------------------------------------------------- */

/* Each radix's butterfly reads its p inputs at ix + r*xs, writes output t,
 * multiplied by the twiddle W_L^{t j}, at iy + t*ys. A stage runs it either
 * along j (S == 1: one transform, first stage) or, for each j, along the S
 * interleaved sequences q with the twiddles held in registers. */
#define BK_FFT_ARGS                                                                      \
  const BK_T *restrict xr, const BK_T *restrict xi, int64_t ix, int64_t xs,          \
      BK_T *restrict yr, BK_T *restrict yi, int64_t iy, int64_t ys

/* y[iy + t*ys] = (re, im) * (wr, wi). */
#define BK_FFT_PUT(t, re, im, wr_, wi_)                      \
  do {                                                       \
    const BK_T re_ = (re), im_ = (im);                     \
    yr[iy + (t) * ys] = re_ * (wr_) - im_ * (wi_);           \
    yi[iy + (t) * ys] = re_ * (wi_) + im_ * (wr_);           \
  } while (0)

static BK_FFT_INLINE void BK_FN(bf2)(BK_FFT_ARGS, BK_T w1r, BK_T w1i) {
  const BK_T ar = xr[ix], ai = xi[ix], br = xr[ix + xs], bi = xi[ix + xs];
  yr[iy] = ar + br;
  yi[iy] = ai + bi;
  BK_FFT_PUT(1, ar - br, ai - bi, w1r, w1i);
}

static BK_FFT_INLINE void BK_FN(bf3)(BK_FFT_ARGS, BK_T w1r, BK_T w1i, BK_T w2r, BK_T w2i) {
  /* W_3 = -1/2 - i sqrt(3)/2. */
  const BK_T c = (BK_T)0.86602540378443864676372317075294;
  const BK_T x0r = xr[ix], x0i = xi[ix];
  const BK_T x1r = xr[ix + xs], x1i = xi[ix + xs];
  const BK_T x2r = xr[ix + 2 * xs], x2i = xi[ix + 2 * xs];
  const BK_T sr = x1r + x2r, si = x1i + x2i, dr = x1r - x2r, di = x1i - x2i;
  const BK_T hr = x0r - (BK_T)0.5 * sr, hi = x0i - (BK_T)0.5 * si;
  yr[iy] = x0r + sr;
  yi[iy] = x0i + si;
  BK_FFT_PUT(1, hr + c * di, hi - c * dr, w1r, w1i);
  BK_FFT_PUT(2, hr - c * di, hi + c * dr, w2r, w2i);
}

static BK_FFT_INLINE void BK_FN(bf4)(BK_FFT_ARGS, BK_T w1r, BK_T w1i, BK_T w2r, BK_T w2i, BK_T w3r,
                       BK_T w3i) {
  const BK_T x0r = xr[ix], x0i = xi[ix];
  const BK_T x1r = xr[ix + xs], x1i = xi[ix + xs];
  const BK_T x2r = xr[ix + 2 * xs], x2i = xi[ix + 2 * xs];
  const BK_T x3r = xr[ix + 3 * xs], x3i = xi[ix + 3 * xs];
  const BK_T b0r = x0r + x2r, b0i = x0i + x2i, b1r = x0r - x2r, b1i = x0i - x2i;
  const BK_T b2r = x1r + x3r, b2i = x1i + x3i, b3r = x1r - x3r, b3i = x1i - x3i;
  yr[iy] = b0r + b2r;
  yi[iy] = b0i + b2i;
  BK_FFT_PUT(1, b1r + b3i, b1i - b3r, w1r, w1i); /* b1 - i b3 */
  BK_FFT_PUT(2, b0r - b2r, b0i - b2i, w2r, w2i);
  BK_FFT_PUT(3, b1r - b3i, b1i + b3r, w3r, w3i); /* b1 + i b3 */
}

/* The inputs r and q = p - r of an odd radix as a_k = x_r + x_q, b_k = x_r - x_q. */
#define BK_FFT_PAIR(K, R, Q)                                                       \
  const BK_T a##K##r = xr[ix + (R) * xs] + xr[ix + (Q) * xs],                      \
             a##K##i = xi[ix + (R) * xs] + xi[ix + (Q) * xs];                      \
  const BK_T b##K##r = xr[ix + (R) * xs] - xr[ix + (Q) * xs],                      \
             b##K##i = xi[ix + (R) * xs] - xi[ix + (Q) * xs]

static BK_FFT_INLINE void BK_FN(bf5)(BK_FFT_ARGS, const BK_T *w) {
  /* cos and sin of 2 pi/5 and 4 pi/5. */
  const BK_T c1 = (BK_T)0.30901699437494742410229341718282;
  const BK_T s1 = (BK_T)0.95105651629515357211643933337938;
  const BK_T c2 = (BK_T)-0.80901699437494742410229341718282;
  const BK_T s2 = (BK_T)0.58778525229247312916870595463907;
  const BK_T x0r = xr[ix], x0i = xi[ix];
  BK_FFT_PAIR(1, 1, 4);
  BK_FFT_PAIR(2, 2, 3);
  const BK_T u1r = x0r + c1 * a1r + c2 * a2r, u1i = x0i + c1 * a1i + c2 * a2i;
  const BK_T u2r = x0r + c2 * a1r + c1 * a2r, u2i = x0i + c2 * a1i + c1 * a2i;
  /* v1 = s1 b1 + s2 b2, v2 = s2 b1 - s1 b2; outputs u -/+ i v. */
  const BK_T v1r = s1 * b1r + s2 * b2r, v1i = s1 * b1i + s2 * b2i;
  const BK_T v2r = s2 * b1r - s1 * b2r, v2i = s2 * b1i - s1 * b2i;
  yr[iy] = x0r + a1r + a2r;
  yi[iy] = x0i + a1i + a2i;
  BK_FFT_PUT(1, u1r + v1i, u1i - v1r, w[0], w[4]);
  BK_FFT_PUT(4, u1r - v1i, u1i + v1r, w[3], w[7]);
  BK_FFT_PUT(2, u2r + v2i, u2i - v2r, w[1], w[5]);
  BK_FFT_PUT(3, u2r - v2i, u2i + v2r, w[2], w[6]);
}

static BK_FFT_INLINE void BK_FN(bf7)(BK_FFT_ARGS, const BK_T *w) {
  /* cos and sin of 2 pi r/7, r = 1, 2, 3. */
  const BK_T c1 = (BK_T)0.62348980185873353052500488400424;
  const BK_T c2 = (BK_T)-0.22252093395631440428890256449679;
  const BK_T c3 = (BK_T)-0.90096886790241912623610231950745;
  const BK_T s1 = (BK_T)0.78183148246802980870844452667406;
  const BK_T s2 = (BK_T)0.97492791218182360701813168299393;
  const BK_T s3 = (BK_T)0.43388373911755812047576833284836;
  const BK_T x0r = xr[ix], x0i = xi[ix];
  BK_FFT_PAIR(1, 1, 6);
  BK_FFT_PAIR(2, 2, 5);
  BK_FFT_PAIR(3, 3, 4);
  const BK_T u1r = x0r + c1 * a1r + c2 * a2r + c3 * a3r, u1i = x0i + c1 * a1i + c2 * a2i + c3 * a3i;
  const BK_T u2r = x0r + c2 * a1r + c3 * a2r + c1 * a3r, u2i = x0i + c2 * a1i + c3 * a2i + c1 * a3i;
  const BK_T u3r = x0r + c3 * a1r + c1 * a2r + c2 * a3r, u3i = x0i + c3 * a1i + c1 * a2i + c2 * a3i;
  const BK_T v1r = s1 * b1r + s2 * b2r + s3 * b3r, v1i = s1 * b1i + s2 * b2i + s3 * b3i;
  const BK_T v2r = s2 * b1r - s3 * b2r - s1 * b3r, v2i = s2 * b1i - s3 * b2i - s1 * b3i;
  const BK_T v3r = s3 * b1r - s1 * b2r + s2 * b3r, v3i = s3 * b1i - s1 * b2i + s2 * b3i;
  /* Outputs t and 7 - t: u -/+ i v. */
  yr[iy] = x0r + a1r + a2r + a3r;
  yi[iy] = x0i + a1i + a2i + a3i;
  BK_FFT_PUT(1, u1r + v1i, u1i - v1r, w[0], w[6]);
  BK_FFT_PUT(6, u1r - v1i, u1i + v1r, w[5], w[11]);
  BK_FFT_PUT(2, u2r + v2i, u2i - v2r, w[1], w[7]);
  BK_FFT_PUT(5, u2r - v2i, u2i + v2r, w[4], w[10]);
  BK_FFT_PUT(3, u3r + v3i, u3i - v3r, w[2], w[8]);
  BK_FFT_PUT(4, u3r - v3i, u3i + v3r, w[3], w[9]);
}

#define BK_FFT_STAGE_ARGS                                                                   \
  int64_t S, int64_t mm, const BK_T *restrict xr, const BK_T *restrict xi,             \
      BK_T *restrict yr, BK_T *restrict yi, const BK_T *restrict wr,                  \
      const BK_T *restrict wi

static BK_CPU_CLONES void BK_FN(run2)(BK_FFT_STAGE_ARGS) {
  if (S == 1) {
#pragma omp simd
    for (int64_t j = 0; j < mm; j++) BK_FN(bf2)(xr, xi, j, mm, yr, yi, 2 * j, 1, wr[j], wi[j]);
    return;
  }
  for (int64_t j = 0; j < mm; j++) {
    const BK_T w1r = wr[j], w1i = wi[j];
    const int64_t ix = S * j, iy = 2 * S * j;
#pragma omp simd
    for (int64_t q = 0; q < S; q++) BK_FN(bf2)(xr, xi, ix + q, S * mm, yr, yi, iy + q, S, w1r, w1i);
  }
}

static BK_CPU_CLONES void BK_FN(run3)(BK_FFT_STAGE_ARGS) {
  if (S == 1) {
#pragma omp simd
    for (int64_t j = 0; j < mm; j++)
      BK_FN(bf3)(xr, xi, j, mm, yr, yi, 3 * j, 1, wr[j], wi[j], wr[mm + j], wi[mm + j]);
    return;
  }
  for (int64_t j = 0; j < mm; j++) {
    const BK_T w1r = wr[j], w1i = wi[j], w2r = wr[mm + j], w2i = wi[mm + j];
    const int64_t ix = S * j, iy = 3 * S * j;
#pragma omp simd
    for (int64_t q = 0; q < S; q++)
      BK_FN(bf3)(xr, xi, ix + q, S * mm, yr, yi, iy + q, S, w1r, w1i, w2r, w2i);
  }
}

static BK_CPU_CLONES void BK_FN(run4)(BK_FFT_STAGE_ARGS) {
  if (S == 1) {
#pragma omp simd
    for (int64_t j = 0; j < mm; j++)
      BK_FN(bf4)(xr, xi, j, mm, yr, yi, 4 * j, 1, wr[j], wi[j], wr[mm + j], wi[mm + j], wr[2 * mm + j],
          wi[2 * mm + j]);
    return;
  }
  for (int64_t j = 0; j < mm; j++) {
    const BK_T w1r = wr[j], w1i = wi[j], w2r = wr[mm + j], w2i = wi[mm + j];
    const BK_T w3r = wr[2 * mm + j], w3i = wi[2 * mm + j];
    const int64_t ix = S * j, iy = 4 * S * j;
#pragma omp simd
    for (int64_t q = 0; q < S; q++)
      BK_FN(bf4)(xr, xi, ix + q, S * mm, yr, yi, iy + q, S, w1r, w1i, w2r, w2i, w3r, w3i);
  }
}

static BK_CPU_CLONES void BK_FN(run5)(BK_FFT_STAGE_ARGS) {
  for (int64_t j = 0; j < mm; j++) {
    const BK_T w[8] = {wr[j],      wr[mm + j], wr[2 * mm + j], wr[3 * mm + j],
                         wi[j],      wi[mm + j], wi[2 * mm + j], wi[3 * mm + j]};
    const int64_t ix = S * j, iy = 5 * S * j;
#pragma omp simd
    for (int64_t q = 0; q < S; q++) BK_FN(bf5)(xr, xi, ix + q, S * mm, yr, yi, iy + q, S, w);
  }
}

static BK_CPU_CLONES void BK_FN(run7)(BK_FFT_STAGE_ARGS) {
  for (int64_t j = 0; j < mm; j++) {
    BK_T w[12];
    for (int t = 0; t < 6; t++) {
      w[t] = wr[t * mm + j];
      w[6 + t] = wi[t * mm + j];
    }
    const int64_t ix = S * j, iy = 7 * S * j;
#pragma omp simd
    for (int64_t q = 0; q < S; q++) BK_FN(bf7)(xr, xi, ix + q, S * mm, yr, yi, iy + q, S, w);
  }
}

/* A p-point DFT (p an odd prime): with a_r = x_r + x_{p-r}, b_r = x_r -
 * x_{p-r} and W_p^{rt} = cos - i sin, X_t = x_0 + sum_r (a_r cos - i b_r
 * sin) and X_{p-t} the same with +i, r, t = 1..(p-1)/2. cnt sequences side
 * by side: input r at x + r*xs + q, output t (before its twiddle) at
 * y + t*ys + q; the outputs accumulate in place. */
static BK_FFT_INLINE void BK_FN(dftp)(int64_t p, int64_t cnt, const BK_T *restrict x0r,
                               const BK_T *restrict x0i, int64_t xs, BK_T *restrict y0r,
                               BK_T *restrict y0i, int64_t ys, const BK_T *restrict cr,
                               const BK_T *restrict ci) {
  const int64_t h = (p - 1) / 2;
  for (int64_t q = 0; q < cnt; q++) {
    y0r[q] = x0r[q];
    y0i[q] = x0i[q];
  }
  for (int64_t r = 1; r <= h; r++) {
    const BK_T *ar = x0r + r * xs, *ai = x0i + r * xs;
    const BK_T *br = x0r + (p - r) * xs, *bi = x0i + (p - r) * xs;
#pragma omp simd
    for (int64_t q = 0; q < cnt; q++) {
      y0r[q] += ar[q] + br[q];
      y0i[q] += ai[q] + bi[q];
    }
  }
  for (int64_t t = 1; t <= h; t++) {
    BK_T *ytr = y0r + t * ys, *yti = y0i + t * ys;
    BK_T *yur = y0r + (p - t) * ys, *yui = y0i + (p - t) * ys;
#pragma omp simd
    for (int64_t q = 0; q < cnt; q++) {
      ytr[q] = yur[q] = x0r[q];
      yti[q] = yui[q] = x0i[q];
    }
    int64_t e = 0;
    for (int64_t r = 1; r <= h; r++) {
      e += t;
      if (e >= p) e -= p;
      const BK_T c = cr[e], s = -ci[e];
      const BK_T *pr = x0r + r * xs, *pi = x0i + r * xs;
      const BK_T *nr = x0r + (p - r) * xs, *ni = x0i + (p - r) * xs;
#pragma omp simd
      for (int64_t q = 0; q < cnt; q++) {
        const BK_T sr = pr[q] + nr[q], si = pi[q] + ni[q];
        const BK_T dr = pr[q] - nr[q], di = pi[q] - ni[q];
        ytr[q] += sr * c + di * s;
        yti[q] += si * c - dr * s;
        yur[q] += sr * c - di * s;
        yui[q] += si * c + dr * s;
      }
    }
  }
}

/* A stage of a generic prime radix. With S >= FFT_BLOCK the sequences q run
 * side by side; below it (the first stages of a single transform), blocks
 * of FFT_BLOCK consecutive j do, through a small buffer, with the same
 * operations on every value. */
static BK_CPU_CLONES void BK_FN(rung)(BK_FFT_STAGE_ARGS, int64_t p, const BK_T *restrict cr,
                                      const BK_T *restrict ci) {
  const int64_t xs = S * mm;
  if (S >= FFT_BLOCK) {
    for (int64_t j = 0; j < mm; j++) {
      BK_T *y0r = yr + S * p * j, *y0i = yi + S * p * j;
      BK_FN(dftp)(p, S, xr + S * j, xi + S * j, xs, y0r, y0i, S, cr, ci);
      for (int64_t t = 1; t < p; t++) {
        const BK_T w1r = wr[(t - 1) * mm + j], w1i = wi[(t - 1) * mm + j];
        BK_T *ytr = y0r + t * S, *yti = y0i + t * S;
#pragma omp simd
        for (int64_t q = 0; q < S; q++) {
          const BK_T re = ytr[q], im = yti[q];
          ytr[q] = re * w1r - im * w1i;
          yti[q] = re * w1i + im * w1r;
        }
      }
    }
    return;
  }
  BK_T br[FFT_MAX_PRIME * FFT_BLOCK], bi[FFT_MAX_PRIME * FFT_BLOCK];
  for (int64_t q = 0; q < S; q++)
    for (int64_t j0 = 0; j0 < mm; j0 += FFT_BLOCK) {
      const int64_t cnt = mm - j0 < FFT_BLOCK ? mm - j0 : FFT_BLOCK;
      /* Sequence q, j = j0 + jj: input r at q + S*(j + r*mm). */
      BK_T tr[FFT_BLOCK], ti[FFT_BLOCK];
      const BK_T *sr = xr + q + S * j0, *si = xi + q + S * j0;
      if (S == 1) {
        BK_FN(dftp)(p, cnt, sr, si, xs, br, bi, FFT_BLOCK, cr, ci);
      } else {
        /* Strided sequences: copy them into the block first. */
        BK_T cr_[FFT_MAX_PRIME * FFT_BLOCK], ci_[FFT_MAX_PRIME * FFT_BLOCK];
        for (int64_t r = 0; r < p; r++)
          for (int64_t jj = 0; jj < cnt; jj++) {
            cr_[r * FFT_BLOCK + jj] = sr[r * xs + S * jj];
            ci_[r * FFT_BLOCK + jj] = si[r * xs + S * jj];
          }
        BK_FN(dftp)(p, cnt, cr_, ci_, FFT_BLOCK, br, bi, FFT_BLOCK, cr, ci);
      }
      for (int64_t jj = 0; jj < cnt; jj++) {
        yr[q + S * p * (j0 + jj)] = br[jj];
        yi[q + S * p * (j0 + jj)] = bi[jj];
      }
      for (int64_t t = 1; t < p; t++) {
        const BK_T *w1r = wr + (t - 1) * mm + j0, *w1i = wi + (t - 1) * mm + j0;
#pragma omp simd
        for (int64_t jj = 0; jj < cnt; jj++) {
          const BK_T re = br[t * FFT_BLOCK + jj], im = bi[t * FFT_BLOCK + jj];
          tr[jj] = re * w1r[jj] - im * w1i[jj];
          ti[jj] = re * w1i[jj] + im * w1r[jj];
        }
        for (int64_t jj = 0; jj < cnt; jj++) {
          yr[q + S * (p * (j0 + jj) + t)] = tr[jj];
          yi[q + S * (p * (j0 + jj) + t)] = ti[jj];
        }
      }
    }
}

static void BK_FN(run_stage)(const BK_FN(stage) *s, int64_t S, const BK_T *xr, const BK_T *xi, BK_T *yr,
                      BK_T *yi) {
  switch (s->p) {
    case 2: BK_FN(run2)(S, s->mm, xr, xi, yr, yi, s->wr, s->wi); break;
    case 3: BK_FN(run3)(S, s->mm, xr, xi, yr, yi, s->wr, s->wi); break;
    case 4: BK_FN(run4)(S, s->mm, xr, xi, yr, yi, s->wr, s->wi); break;
    case 5: BK_FN(run5)(S, s->mm, xr, xi, yr, yi, s->wr, s->wi); break;
    case 7: BK_FN(run7)(S, s->mm, xr, xi, yr, yi, s->wr, s->wi); break;
    default: BK_FN(rung)(S, s->mm, xr, xi, yr, yi, s->wr, s->wi, s->p, s->cr, s->ci); break;
  }
}

/* The pointwise steps of Bluestein's algorithm over V lanes: value k of
 * every lane, its imaginary part first multiplied by isgn (+-1, exact),
 * times w[k], the product's imaginary part multiplied by osgn. y may be x
 * (in place). */
static BK_CPU_CLONES void BK_FN(lanes_mul)(int64_t count, int64_t V, const BK_T *xr,
                                           const BK_T *xi, BK_T isgn, const BK_T *restrict wr,
                                           const BK_T *restrict wi, BK_T osgn, BK_T *yr,
                                           BK_T *yi) {
  for (int64_t k = 0; k < count; k++) {
    const BK_T c = wr[k], s = wi[k];
#pragma omp simd
    for (int64_t v = 0; v < V; v++) {
      const BK_T re = xr[k * V + v], im = isgn * xi[k * V + v];
      yr[k * V + v] = re * c - im * s;
      yi[k * V + v] = osgn * (re * s + im * c);
    }
  }
}

/*
 * The DFTs of V interleaved sequences of length m: a holds them (real parts
 * (m, V), then imaginary parts (m, V)), b as much scratch again, sc the
 * Bluestein path's 4 M V values. Returns a or b, whichever holds the
 * result (same layout); the other is overwritten.
 */
static BK_T *BK_FN(exec)(const BK_FN(plan) *p, int64_t V, BK_T *a, BK_T *b, BK_T *sc) {
  const int64_t m = p->m;
  if (p->blue) {
    const int64_t M = p->blue->m;
    BK_T *c = sc, *d = sc + 2 * M * V;
    const BK_T one = 1;
    /* c = x * chirp, zero-padded to M. */
    BK_FN(lanes_mul)(m, V, a, a + m * V, one, p->chirp, p->chirp + m, one, c, c + M * V);
    for (int64_t i = m * V; i < M * V; i++) c[i] = c[M * V + i] = 0;
    BK_T *r = BK_FN(exec)(p->blue, V, c, d, NULL);
    /* conj(r * kernel) in place, then the inverse FFT as conj(DFT(conj(.))). */
    BK_FN(lanes_mul)(M, V, r, r + M * V, one, p->kernel, p->kernel + M, -one, r, r + M * V);
    BK_T *r2 = BK_FN(exec)(p->blue, V, r, r == c ? d : c, NULL);
    /* x = conj(r2) * chirp. */
    BK_FN(lanes_mul)(m, V, r2, r2 + M * V, -one, p->chirp, p->chirp + m, one, a, a + m * V);
    return a;
  }
  BK_T *x = a, *y = b;
  int64_t S = V;
  for (int i = 0; i < p->ns; i++) {
    BK_FN(run_stage)(&p->st[i], S, x, x + m * V, y, y + m * V);
    BK_T *t = x;
    x = y;
    y = t;
    S *= p->st[i].p;
  }
  return x;
}

/* ---- real transforms ---------------------------------------------------------------- */

/* Everything one call shares: the complex plan (with the half-length
 * twiddles of the even path), the lanes per group and per-thread scratch.
 * Plans are cached in the context by real length and dtype: the first call
 * that completes hands its plan to the cache, later ones find it there. */
typedef struct BK_FN(job) {
  int64_t n, m;     /* real length, complex length (n/2 for even n, else n) */
  BK_FN(plan) *p;   /* the complex transform */
  int owned;        /* p is this job's to free (not, or not yet, cached) */
  int64_t V;        /* transforms per group */
  int64_t groups;   /* ceil(batch / V) */
  int64_t cap;      /* values of each lane's two buffers: m + 1 */
  BK_T *scratch;    /* (threads, per) */
  int64_t per;      /* values of scratch per thread */
  int threads;
} BK_FN(job);

static void BK_FN(job_free)(BK_FN(job) *j) {
  if (j->owned) BK_FN(plan_free)(j->p);
  bk__host_free(j->scratch);
}

static bk_status BK_FN(job_make)(bk_context *ctx, const char *fn, int64_t n, int64_t batch,
                                 BK_FN(job) *j) {
  const int64_t key = 2 * n + (BK_T_F32 ? 0 : 1);
  j->n = n;
  j->m = n % 2 == 0 ? n / 2 : n;
  j->p = bk__cpu_cache_get(ctx, BK_CPU_CACHE_FFT, key);
  j->owned = j->p == NULL;
  j->scratch = NULL;
  bk_status st = j->p ? BK_OK : BK_FN(plan_make)(fn, j->m, &j->p);
  if (st == BK_OK && j->owned && n % 2 == 0) {
    const int64_t h = n / 2;
    st = BK_FFT_ALLOC(fn, 2 * (h + 1), &j->p->half);
    if (st == BK_OK)
      for (int64_t k = 0; k <= h; k++) {
        double re, im;
        unit_root(2 * k, n, &re, &im);
        j->p->half[k] = (BK_T)re;
        j->p->half[h + 1 + k] = (BK_T)im;
      }
  }
  if (st != BK_OK) {
    BK_FN(job_free)(j);
    return st;
  }
  /* A lane holds two buffers of m + 1 complex values (the half spectrum
   * has one more bin than the packed transform), then the Bluestein
   * scratch. As many lanes as keep a group's working set within half of a
   * core's own cache, at least one, at most FFT_LANES, and no more than
   * give each thread a group; past FFT_LANES_MIN lanes, no more than give
   * each thread FFT_GROUPS_PER_THREAD groups, so that the groups the threads
   * take in turn end close together. */
  j->cap = j->m + 1;
  const int64_t lane = 4 * j->cap + (j->p->blue ? 4 * j->p->blue->m : 0);
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
  if (threads < 1) threads = 1;
#endif
  int64_t V = (int64_t)(bk__cpu_l2_bytes(ctx) / 2) / (lane * (int64_t)sizeof(BK_T));
  if (V > FFT_LANES) V = FFT_LANES;
  if (V > (batch + threads - 1) / threads) V = (batch + threads - 1) / threads;
  const int64_t even = (batch + FFT_GROUPS_PER_THREAD * threads - 1) / (FFT_GROUPS_PER_THREAD * threads);
  if (V > FFT_LANES_MIN && V > even) V = even > FFT_LANES_MIN ? even : FFT_LANES_MIN;
  /* Whole vectors of lanes: the inner loops then have no remainder. */
  if (V > 4) V -= V % 4;
  if (V < 1) V = 1;
  j->V = V;
  j->groups = (batch + V - 1) / V;
  if ((int64_t)threads > j->groups) threads = (int)j->groups;
  if (threads < 1) threads = 1;
  j->threads = threads;
  if ((uint64_t)lane > (uint64_t)INT64_MAX / (uint64_t)(V * threads)) {
    st = bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "scratch size overflows");
  } else {
    j->per = lane * V;
    st = BK_FFT_ALLOC(fn, j->per * threads, &j->scratch);
  }
  if (st != BK_OK) {
    BK_FN(job_free)(j);
    return st;
  }
  /* Only a plan whose call got everything it needs is cached, so a call
   * allocates the same way until it first succeeds. */
  if (j->owned && bk__cpu_cache_put(ctx, BK_CPU_CACHE_FFT, key, j->p, BK_FN(plan_free_cached)))
    j->owned = 0;
  return BK_OK;
}

/* Moves between nv rows of the batch (row v at src + v*rs) and lanes of a
 * group (value i of lane v at i*V + v); lanes nv..V-1 of a gather are
 * zeros (they are computed and dropped: each lane is independent of the
 * others). Both go FFT_BLOCK values of a row at a time, so the block of the
 * group they touch stays in the level-1 cache while each row is read or
 * written in whole cache lines. */
static BK_CPU_CLONES void BK_FN(gather)(const BK_T *restrict src, int64_t rs, int64_t step,
                                        int64_t count, BK_T *restrict dst, int64_t V,
                                        int64_t nv) {
  if (V == 1) {
    for (int64_t i = 0; i < count; i++) dst[i] = nv ? src[i * step] : 0;
    return;
  }
  for (int64_t i = 0; i < count; i++) {
    const BK_T *restrict col = src + i * step;
#pragma omp simd
    for (int64_t v = 0; v < nv; v++) dst[i * V + v] = col[v * rs];
    for (int64_t v = nv; v < V; v++) dst[i * V + v] = 0;
  }
}

/* Interleaved pairs: row[2i] = re / div, row[2i+1] = sign * im / div. */
static BK_CPU_CLONES void BK_FN(scatter2)(const BK_T *restrict re, const BK_T *restrict im,
                                          BK_T sign, BK_T div, int64_t count,
                                          BK_T *restrict dst, int64_t rs, int64_t V, int64_t nv) {
  for (int64_t i0 = 0; i0 < count; i0 += FFT_BLOCK) {
    const int64_t i1 = count - i0 < FFT_BLOCK ? count : i0 + FFT_BLOCK;
    for (int64_t v = 0; v < nv; v++) {
      BK_T *restrict row = dst + v * rs;
      for (int64_t i = i0; i < i1; i++) {
        row[2 * i] = re[i * V + v] / div;
        row[2 * i + 1] = sign * im[i * V + v] / div;
      }
    }
  }
}

static BK_CPU_CLONES void BK_FN(scatter1)(const BK_T *restrict re, BK_T div, int64_t count,
                                          BK_T *restrict dst, int64_t rs, int64_t V, int64_t nv) {
  for (int64_t i0 = 0; i0 < count; i0 += FFT_BLOCK) {
    const int64_t i1 = count - i0 < FFT_BLOCK ? count : i0 + FFT_BLOCK;
    for (int64_t v = 0; v < nv; v++) {
      BK_T *restrict row = dst + v * rs;
      for (int64_t i = i0; i < i1; i++) row[i] = re[i * V + v] / div;
    }
  }
}

/* With Zc = conj(Z[(m-k) mod m]): the even samples' DFT is E = (Z + Zc)/2,
 * the odd samples' O = (Z - Zc)/(2i), and X[k] = E[k] + W_n^k O[k] for
 * k = 0..m (Z[m] meaning Z[0]). */
static BK_CPU_CLONES void BK_FN(rfft_split)(int64_t m, int64_t V, const BK_T *restrict Zr,
                                            const BK_T *restrict Zi, const BK_T *restrict hr,
                                            const BK_T *restrict hi, BK_T *restrict Xr,
                                            BK_T *restrict Xi) {
  const BK_T half = (BK_T)0.5;
  for (int64_t k = 0; k <= m; k++) {
    const BK_T *ar = Zr + (k == m ? 0 : k) * V, *ai = Zi + (k == m ? 0 : k) * V;
    const BK_T *br = Zr + (k == 0 ? 0 : m - k) * V, *bi = Zi + (k == 0 ? 0 : m - k) * V;
    const BK_T c = hr[k], s = hi[k];
#pragma omp simd
    for (int64_t v = 0; v < V; v++) {
      const BK_T er = half * (ar[v] + br[v]), ei = half * (ai[v] - bi[v]);
      const BK_T orr = half * (ai[v] + bi[v]), oi = -half * (ar[v] - br[v]);
      Xr[k * V + v] = er + (c * orr - s * oi);
      Xi[k * V + v] = ei + (c * oi + s * orr);
    }
  }
}

/* Z[k] = (X[k] + conj(X[m-k])) + i (X[k] - conj(X[m-k])) W_n^{-k},
 * k = 0..m-1: twice the DFT of x_even + i x_odd, whose unnormalized inverse
 * of length m is then exactly x_even + i x_odd unnormalized. The inverse
 * runs as conj(DFT(conj(.))), so this stores the conjugate. */
static BK_CPU_CLONES void BK_FN(irfft_join)(int64_t m, int64_t V, const BK_T *restrict Xr,
                                            const BK_T *restrict Xi, const BK_T *restrict hr,
                                            const BK_T *restrict hi, BK_T *restrict Zr,
                                            BK_T *restrict Zi) {
  for (int64_t k = 0; k < m; k++) {
    const BK_T *ar = Xr + k * V, *ai = Xi + k * V, *br = Xr + (m - k) * V, *bi = Xi + (m - k) * V;
    const BK_T c = hr[k], s = -hi[k]; /* W_n^{-k} */
#pragma omp simd
    for (int64_t v = 0; v < V; v++) {
      const BK_T er = ar[v] + br[v], ei = ai[v] - bi[v], dr = ar[v] - br[v], di = ai[v] + bi[v];
      const BK_T orr = dr * c - di * s, oi = dr * s + di * c;
      Zr[k * V + v] = er - oi;
      Zi[k * V + v] = -(ei + orr); /* conj(e + i o) */
    }
  }
}

/* One forward group: rows b0 .. b0+nv-1 of x (batch, n) -> y (batch, n/2+1, 2). */
static void BK_FN(rfft_group)(const BK_FN(job) *j, const BK_T *x, BK_T *y, int64_t b0, int64_t nv,
                              BK_T *s) {
  const int64_t n = j->n, m = j->m, V = j->V, cap = j->cap * V, bins = 2 * (n / 2 + 1);
  BK_T *a = s, *b = s + 2 * cap, *sc = s + 4 * cap;
  if (n % 2 == 1) {
    BK_FN(gather)(x + b0 * n, n, 1, n, a, V, nv);
    for (int64_t i = 0; i < m * V; i++) a[m * V + i] = 0;
  } else {
    BK_FN(gather)(x + b0 * n, n, 2, m, a, V, nv);
    BK_FN(gather)(x + b0 * n + 1, n, 2, m, a + m * V, V, nv);
  }
  BK_T *Z = BK_FN(exec)(j->p, V, a, b, sc);
  BK_T *Xr, *Xi;
  if (n % 2 == 1) {
    Xr = Z;
    Xi = Z + m * V;
  } else {
    Xr = Z == a ? b : a;
    Xi = Xr + cap;
    BK_FN(rfft_split)(m, V, Z, Z + m * V, j->p->half, j->p->half + m + 1, Xr, Xi);
  }
  /* Bin 0 and (even n) bin n/2 of a real signal are real: store exact zeros. */
  for (int64_t v = 0; v < V; v++) {
    Xi[v] = 0;
    if (n % 2 == 0) Xi[m * V + v] = 0;
  }
  BK_FN(scatter2)(Xr, Xi, 1, 1, n / 2 + 1, y + b0 * bins, bins, V, nv);
}

/* One inverse group: spec (batch, n/2+1, 2) -> y (batch, n), unnormalized
 * sum x[t] = sum_{k<n} X[k] e^{2 pi i kt/n} over the Hermitian extension,
 * then divided by n when normalize is 1. */
static void BK_FN(irfft_group)(const BK_FN(job) *j, const BK_T *spec, BK_T *y, int64_t b0,
                               int64_t nv, int normalize, BK_T *s) {
  const int64_t n = j->n, m = j->m, V = j->V, cap = j->cap * V, bins = 2 * (n / 2 + 1);
  const int64_t h = n / 2;
  BK_T *a = s, *b = s + 2 * cap, *sc = s + 4 * cap;
  const BK_T div = normalize ? (BK_T)n : (BK_T)1;
  /* The half spectrum into b; the ignored imaginary parts of bin 0 and
   * (even n) bin n/2 read as 0, so nothing stored there can leak in. */
  BK_T *Xr = b, *Xi = b + cap;
  BK_FN(gather)(spec + b0 * bins, bins, 2, h + 1, Xr, V, nv);
  BK_FN(gather)(spec + b0 * bins + 1, bins, 2, h + 1, Xi, V, nv);
  for (int64_t v = 0; v < V; v++) {
    Xi[v] = 0;
    if (n % 2 == 0) Xi[h * V + v] = 0;
  }
  if (n % 2 == 1) {
    /* conj(Y) of the full Hermitian spectrum: conj(X[k]) for k <= n/2 and
     * X[n-k] above; the real part of DFT(conj(Y)) is the answer. */
    BK_T *ar = a, *ai = a + m * V;
    for (int64_t k = 0; k <= h; k++)
      for (int64_t v = 0; v < V; v++) {
        ar[k * V + v] = Xr[k * V + v];
        ai[k * V + v] = -Xi[k * V + v];
        if (k > 0) {
          ar[(n - k) * V + v] = Xr[k * V + v];
          ai[(n - k) * V + v] = Xi[k * V + v];
        }
      }
  } else {
    BK_FN(irfft_join)(m, V, Xr, Xi, j->p->half, j->p->half + m + 1, a, a + m * V);
  }
  const BK_T *z = BK_FN(exec)(j->p, V, a, b, sc);
  if (n % 2 == 1)
    BK_FN(scatter1)(z, div, n, y + b0 * n, n, V, nv);
  else
    BK_FN(scatter2)(z, z + m * V, -1, div, m, y + b0 * n, n, V, nv);
}

static bk_status BK_FN(rfft_run)(bk_context *ctx, const BK_T *x, BK_T *y, int64_t batch,
                                 int64_t n) {
  BK_FN(job) j;
  bk_status st = BK_FN(job_make)(ctx, "bk_rfft", n, batch, &j);
  if (st != BK_OK) return st;
#pragma omp parallel for schedule(dynamic, 1) num_threads(j.threads) \
    if (j.groups > 1 && batch * n >= BK_CPU_PARALLEL_MIN)
  for (int64_t g = 0; g < j.groups; g++) {
    const int64_t b0 = g * j.V, nv = batch - b0 < j.V ? batch - b0 : j.V;
    BK_FN(rfft_group)(&j, x, y, b0, nv, j.scratch + (int64_t)bk_cpu_thread() * j.per);
  }
  BK_FN(job_free)(&j);
  return BK_OK;
}

static bk_status BK_FN(irfft_run)(bk_context *ctx, const BK_T *spec, BK_T *y, int64_t batch,
                                  int64_t n, int normalize) {
  BK_FN(job) j;
  bk_status st =
      BK_FN(job_make)(ctx, normalize ? "bk_irfft" : "bk_irfft_unnormalized", n, batch, &j);
  if (st != BK_OK) return st;
#pragma omp parallel for schedule(dynamic, 1) num_threads(j.threads) \
    if (j.groups > 1 && batch * n >= BK_CPU_PARALLEL_MIN)
  for (int64_t g = 0; g < j.groups; g++) {
    const int64_t b0 = g * j.V, nv = batch - b0 < j.V ? batch - b0 : j.V;
    BK_FN(irfft_group)(&j, spec, y, b0, nv, normalize,
                       j.scratch + (int64_t)bk_cpu_thread() * j.per);
  }
  BK_FN(job_free)(&j);
  return BK_OK;
}

#undef BK_FFT_ALLOC
#undef BK_FFT_ARGS
#undef BK_FFT_PUT
#undef BK_FFT_PAIR
#undef BK_FFT_STAGE_ARGS
