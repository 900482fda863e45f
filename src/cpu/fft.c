/*
 * fft.c — CPU real FFTs over a packed half spectrum, for every n >= 1.
 *
 * float32 data are transformed in float32 and float64 data in float64 (the
 * typed engine, fft_t.h); every twiddle and chirp value is computed in
 * double and rounded once to the data's type. The engine is a complex FFT
 * of length m (a "plan", cached in the context by length and dtype):
 *  - mixed radix, Stockham autosort (decimation in frequency, ping-pong
 *    between two buffers, no bit reversal): radices 4, 2, 3, 5, 7 have
 *    hand-written butterflies, any other prime p <= FFT_MAX_PRIME a p-point
 *    DFT that pairs the inputs r and p - r;
 *  - Bluestein's chirp-z algorithm when its operation count is lower than
 *    the direct one's, or a prime factor exceeds FFT_MAX_PRIME: the
 *    length-m DFT becomes a circular convolution of a 2-3-5-smooth length
 *    M >= 2m-1 (the cheapest such M), done with the mixed-radix engine.
 * The choice between them and of M follows from the length alone, through
 * an operation count per radix (stage_cost).
 * Each stage has its own table of twiddles, each computed directly with
 * cos/sin of an octant-reduced angle (no recurrence), so the error stays
 * O(eps log m) and the inner loops read them in order.
 *
 * Data are split into real and imaginary arrays, and V transforms of a
 * batch run side by side, value k of transform v at k*V + v: every stage's
 * inner loop runs over at least V contiguous values with one twiddle, so it
 * vectorizes (the first stage of a single transform, V = 1, runs its
 * butterflies along the sequence instead, and a generic prime stage with
 * few interleaved sequences takes blocks of consecutive sub-transforms). V
 * follows from the plan's working set and the size of a core's own cache
 * (and is at most what gives every thread a group). Every transform does the
 * same operations in the same order whatever V, the batch, the thread
 * count or the code path (baseline x86-64 or AVX2, no fused multiply-adds),
 * so results are bitwise the same for all of them.
 *
 * A real transform of even n = 2h runs one complex FFT of length h on the
 * samples packed as z[t] = x[2t] + i x[2t+1] and separates the even and odd
 * halves afterwards; odd n runs a complex FFT of length n. The inverse
 * undoes the same steps and computes conj(DFT(conj(Y))). Groups of V
 * transforms are independent and run in parallel, each thread with its own
 * scratch.
 */
#include "cpu.h"

#include <string.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define FFT_PI 3.14159265358979323846264338327950288
#define FFT_MAX_FACTORS 64
/* Largest prime radix of a direct transform (its stage buffers are on the stack). */
#define FFT_MAX_PRIME 97
/* Most transforms one thread runs side by side; the fewest it runs while
 * a batch has more (two vectors of float32, four of float64). */
#define FFT_LANES 64
#define FFT_LANES_MIN 8
/* Groups of lanes per thread a batch is cut into at least, once a group
 * has FFT_LANES_MIN lanes. */
#define FFT_GROUPS_PER_THREAD 4
/* Values of a row the moves between rows and lanes take at a time. */
#define FFT_BLOCK 16

/* The butterflies are inlined into their stage loops, which vectorize them. */
#if defined(__GNUC__)
#define BK_FFT_INLINE inline __attribute__((always_inline))
#else
#define BK_FFT_INLINE inline
#endif

/* Splits m into radices, 4 first (fewest passes), then 2, 3, 5 and the other
 * primes in increasing order. */
static void factorize(int64_t m, int64_t *fac, int *nf) {
  int n = 0;
  while (m % 4 == 0) {
    fac[n++] = 4;
    m /= 4;
  }
  for (int64_t p = 2; m > 1; p += p == 2 ? 1 : 2) {
    if (p * p > m) p = m; /* what is left is prime */
    while (m % p == 0) {
      fac[n++] = p;
      m /= p;
    }
  }
  *nf = n;
}

/* Floating-point operations per complex value of a stage of radix p (its
 * butterfly and its twiddles); a p-point DFT costs about 2p per value. */
static double stage_cost(int64_t p) {
  switch (p) {
    case 2: return 5.0;
    case 3: return 8.0;
    case 4: return 8.5;
    case 5: return 12.0;
    case 7: return 14.0;
    default: return 6.0 + 2.0 * (double)p;
  }
}

static double direct_cost(int64_t m) {
  int64_t fac[FFT_MAX_FACTORS];
  int nf;
  factorize(m, fac, &nf);
  double c = 0.0;
  for (int i = 0; i < nf; i++) c += stage_cost(fac[i]);
  return c * (double)m;
}

/*
 * exp(-i pi num/den) for 0 <= num <= 2 den. The angle is folded into the
 * first octant with exact integer arithmetic before cos/sin see it, so
 * mirrored angles give mirrored values bit for bit and multiples of pi/4
 * come out exact (0, +-1) or symmetric (+-sqrt(1/2)).
 */
static void unit_root(int64_t num, int64_t den, double *re, double *im) {
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
  *re = c;
  *im = conj ? s : -s;
}

/* W_L^e = exp(-2 pi i e/L) for any e >= 0. */
static void root_of(int64_t e, int64_t L, double *re, double *im) {
  unit_root(2 * (e % L), L, re, im);
}


/* The length M >= 2m-1 of Bluestein's convolution for a complex length m:
 * the 2-3-5-smooth one whose transform costs least; 0 when the direct
 * transform of m costs less than two of those and the chirp products (a
 * prime factor above FFT_MAX_PRIME always goes to Bluestein). */
static int64_t blue_length(int64_t m) {
  if (m <= 7) return 0;
  int64_t fac[FFT_MAX_FACTORS];
  int nf;
  factorize(m, fac, &nf);
  int64_t best = 0;
  double best_cost = fac[nf - 1] > FFT_MAX_PRIME ? INFINITY : direct_cost(m);
  for (int64_t p2 = 1; p2 < 4 * m; p2 *= 2)
    for (int64_t p3 = p2; p3 < 4 * m; p3 *= 3)
      for (int64_t M = p3; M < 4 * m; M *= 5) {
        if (M < 2 * m - 1) continue;
        const double c = 2.0 * direct_cost(M) + 6.0 * (double)M + 12.0 * (double)m;
        if (c < best_cost) {
          best_cost = c;
          best = M;
        }
      }
  return best;
}

#define BK_TEMPLATE "fft_t.h"
#include "instantiate.h"

/* n == 1 is the identity, X[0] = x[0] (the ignored or zero imaginary part
 * aside): an element map, without plans or lanes. */
static void fft_len1(bk_dtype dt, const void *in, void *out, int64_t batch, int inverse) {
  const size_t es = bk__dtype_size(dt);
  const int threads = bk_cpu_threads(2 * batch);
  (void)threads; /* read only by the OpenMP pragma */
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t b = 0; b < batch; b++) {
    if (inverse) {
      memcpy((char *)out + (size_t)b * es, (const char *)in + (size_t)(2 * b) * es, es);
    } else {
      memcpy((char *)out + (size_t)(2 * b) * es, (const char *)in + (size_t)b * es, es);
      memset((char *)out + (size_t)(2 * b + 1) * es, 0, es);
    }
  }
}

bk_status bk__cpu_rfft(bk_context *ctx, bk_dtype dt, const void *x, void *y, int64_t batch,
                       int64_t n) {
  if (n == 1) {
    fft_len1(dt, x, y, batch, 0);
    return BK_OK;
  }
  if (dt == BK_F32) return rfft_run_f32(ctx, x, y, batch, n);
  return rfft_run_f64(ctx, x, y, batch, n);
}

bk_status bk__cpu_irfft(bk_context *ctx, bk_dtype dt, const void *spec, void *y, int64_t batch,
                        int64_t n, int normalize) {
  if (n == 1) { /* the 1/n factor is 1 */
    fft_len1(dt, spec, y, batch, 1);
    return BK_OK;
  }
  if (dt == BK_F32) return irfft_run_f32(ctx, spec, y, batch, n, normalize);
  return irfft_run_f64(ctx, spec, y, batch, n, normalize);
}
