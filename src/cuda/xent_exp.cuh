/* Exponentials of the cross-entropy kernels (xent.cu, xent_cluster.cu). */
#ifndef BK_CUDA_XENT_EXP_CUH
#define BK_CUDA_XENT_EXP_CUH

#include <math.h>

/* float32: CUDA's expf. */
static __device__ __forceinline__ float xe_exp(float v) { return expf(v); }
/* 2^(j/64), j = 0..63, rounded to nearest; read through L1 by xe_exp. */
static __device__ const double xe_exp2_tab[64] = {
    0x1.0000000000000p+0, 0x1.02c9a3e778061p+0, 0x1.059b0d3158574p+0, 0x1.0874518759bc8p+0,
    0x1.0b5586cf9890fp+0, 0x1.0e3ec32d3d1a2p+0, 0x1.11301d0125b51p+0, 0x1.1429aaea92de0p+0,
    0x1.172b83c7d517bp+0, 0x1.1a35beb6fcb75p+0, 0x1.1d4873168b9aap+0, 0x1.2063b88628cd6p+0,
    0x1.2387a6e756238p+0, 0x1.26b4565e27cddp+0, 0x1.29e9df51fdee1p+0, 0x1.2d285a6e4030bp+0,
    0x1.306fe0a31b715p+0, 0x1.33c08b26416ffp+0, 0x1.371a7373aa9cbp+0, 0x1.3a7db34e59ff7p+0,
    0x1.3dea64c123422p+0, 0x1.4160a21f72e2ap+0, 0x1.44e086061892dp+0, 0x1.486a2b5c13cd0p+0,
    0x1.4bfdad5362a27p+0, 0x1.4f9b2769d2ca7p+0, 0x1.5342b569d4f82p+0, 0x1.56f4736b527dap+0,
    0x1.5ab07dd485429p+0, 0x1.5e76f15ad2148p+0, 0x1.6247eb03a5585p+0, 0x1.6623882552225p+0,
    0x1.6a09e667f3bcdp+0, 0x1.6dfb23c651a2fp+0, 0x1.71f75e8ec5f74p+0, 0x1.75feb564267c9p+0,
    0x1.7a11473eb0187p+0, 0x1.7e2f336cf4e62p+0, 0x1.82589994cce13p+0, 0x1.868d99b4492edp+0,
    0x1.8ace5422aa0dbp+0, 0x1.8f1ae99157736p+0, 0x1.93737b0cdc5e5p+0, 0x1.97d829fde4e50p+0,
    0x1.9c49182a3f090p+0, 0x1.a0c667b5de565p+0, 0x1.a5503b23e255dp+0, 0x1.a9e6b5579fdbfp+0,
    0x1.ae89f995ad3adp+0, 0x1.b33a2b84f15fbp+0, 0x1.b7f76f2fb5e47p+0, 0x1.bcc1e904bc1d2p+0,
    0x1.c199bdd85529cp+0, 0x1.c67f12e57d14bp+0, 0x1.cb720dcef9069p+0, 0x1.d072d4a07897cp+0,
    0x1.d5818dcfba487p+0, 0x1.da9e603db3285p+0, 0x1.dfc97337b9b5fp+0, 0x1.e502ee78b3ff6p+0,
    0x1.ea4afa2a490dap+0, 0x1.efa1bee615a27p+0, 0x1.f50765b6e4540p+0, 0x1.fa7c1819e90d8p+0,
};

/*
 * exp(x) in float64 with 11 float64 instructions instead of about 20 for
 * CUDA's exp: the float64 cross-entropies evaluate two exponentials per
 * element pair, and those kept the float64 pipe more than half busy.
 * x = k*ln2/64 + r with k = round(x*64/ln2) (a rounding add of 1.5*2^52),
 * r from a two-part ln2/64 (the high part's product with k is exact), so
 * |r| <= ln2/128; e^r = 1 + r*q(r) with the degree-4 Taylor q (truncation
 * below 2^-54 there); times 2^(j/64) from the table (j = k mod 64) with
 * the exponent raised by k div 64 as an integer add, exact because every
 * result is a normal number. Measured against a long double exp over
 * 2*10^7 points of [-745.5, 710]: at most 1.5 ulp. |x| >= 708, infinities
 * and NaN take CUDA's exp, so overflow, the subnormal range and the IEEE
 * cases are CUDA's. xe_exp_core is the table path alone (its result for an
 * argument outside that range is meaningless, though its table read stays
 * in bounds); callers that test a whole batch of arguments with
 * xe_exp_core_range first take its shared-memory form, xe_exp_core_tab.
 * xe_exp_poly is their common part: k = round(x*64/ln2), the reduced r and
 * q(r) with e^r = 1 + r*q(r).
 */
static __device__ __forceinline__ double xe_exp_poly(double x, int &k, double &r) {
  const double sh = fma(x, 0x1.71547652b82fep+6, 0x1.8p+52);
  const double kd = sh - 0x1.8p+52;
  k = __double2loint(sh);
  r = fma(kd, -0x1.62e42fec00000p-7, x);
  r = fma(kd, -0x1.d1cf79abc9e3bp-38, r);
  double q = fma(r, 1.0 / 120.0, 1.0 / 24.0);
  q = fma(q, r, 1.0 / 6.0);
  q = fma(q, r, 0.5);
  return fma(q, r, 1.0);
}
static __device__ __forceinline__ double xe_exp_core(double x) {
  int k;
  double r;
  const double q = xe_exp_poly(x, k, r);
  const double t = xe_exp2_tab[k & 63];
  const double ts = __hiloint2double(__double2hiint(t) + (k >> 6) * (1 << 20), __double2loint(t));
  return fma(ts * r, q, ts);
}

/* Whether xe_exp(x) takes xe_exp_core (|x| < 708 to the precision of the
 * high word): the high word read as a float32 keeps the order of the
 * magnitudes, so one float32 comparison tests it (NaN patterns fail it). */
static __device__ __forceinline__ bool xe_exp_core_range(double x) {
  return fabsf(__int_as_float(__double2hiint(x))) < __int_as_float(0x40862000);
}

/*
 * xe_exp_core with the table read from a copy in shared memory whose entry j
 * (filled by xe_exp2_tab_entry) holds 2^(j/64) with j*2^14 taken from its
 * high word: adding k*2^14 to that word then raises the exponent by k div 64
 * and restores the j part in one integer shift-add (the words are added
 * modulo 2^32, exactly), and the shared read needs no 64-bit address. The
 * same result bits as xe_exp_core.
 */
static __device__ __forceinline__ int2 xe_exp2_tab_entry(int j) {
  const double t = xe_exp2_tab[j];
  return make_int2(__double2loint(t), (int)((unsigned)__double2hiint(t) - ((unsigned)j << 14)));
}
static __device__ __forceinline__ double xe_exp_core_tab(double x, const int2 *tab) {
  int k;
  double r;
  const double q = xe_exp_poly(x, k, r);
  const int2 t = tab[k & 63];
  const double ts = __hiloint2double((int)((unsigned)t.y + ((unsigned)k << 14)), t.x);
  return fma(ts * r, q, ts);
}

/* exp(x) as described above: xe_exp_core for |x| < 708, CUDA's exp elsewhere. */
static __device__ __forceinline__ double xe_exp(double x) {
  if ((__double2hiint(x) & 0x7fffffff) >= 0x40862000) return exp(x); /* |x| >= 708, NaN */
  return xe_exp_core(x);
}

#endif
