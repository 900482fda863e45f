/*
 * testlib.h — the test harness every family test program shares.
 *
 * The device under test comes from the environment: BK_TEST_DEVICE=cpu
 * (default) or cuda:N. Values travel as double on the host and are
 * converted to the dtype under test, so one table of cases serves both
 * dtypes and both backends. Each program ends with the line
 * "N passed, N failed" and exits non-zero on any failure, and also when it
 * ran no check at all: a program that cannot fail is a defect.
 *
 * A requested device that cannot be used fails the program (exit 2), so a
 * GPU run on a machine without the GPU cannot pass by testing nothing;
 * with BK_TEST_ALLOW_SKIP=1 it is skipped instead (exit TL_SKIP_EXIT, which
 * ctest reports as skipped).
 */
#ifndef BK_TESTLIB_H
#define BK_TESTLIB_H

#include "bufkern.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- state --------------------------------------------------------------- */

static int tl_passed, tl_failed;
static bk_context *tl_ctx;     /* context of the device under test */
static bk_context *tl_cpu;     /* a CPU context, for cross-backend checks */
static bk_device tl_dev;
static const char *tl_case = "";

#define TL_DTYPES 2
static const bk_dtype tl_dtypes[TL_DTYPES] = {BK_F32, BK_F64};

static const char *tl_dtname(bk_dtype dt) { return dt == BK_F32 ? "f32" : "f64"; }

/* Relative tolerances of the contract's accuracy section. */
static double tl_tol_elem(bk_dtype dt) { return dt == BK_F32 ? 1e-5 : 1e-12; }
static double tl_tol_red(bk_dtype dt) { return dt == BK_F32 ? 1e-4 : 1e-12; }
static double tl_tol_contract(bk_dtype dt, double n) {
  return (dt == BK_F32 ? 1e-4 : 1e-12) * sqrt(n > 1 ? n : 1);
}

static void tl_fail_at(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void tl_fail_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "FAIL %s:%d [%s] ", file, line, tl_case);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  tl_failed++;
}

#define TL_FAIL(...) tl_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define TL_PASS() (tl_passed++)

/* Asserts a condition; counts one check. */
#define TL_CHECK(cond, ...)      \
  do {                           \
    if (cond)                    \
      TL_PASS();                 \
    else                         \
      TL_FAIL(__VA_ARGS__);      \
  } while (0)

/* Asserts st == BK_OK; on failure prints the last error. Evaluates to the
 * status so a case can stop early. */
#define TL_OK(expr)                                                                  \
  tl_ok_at(__FILE__, __LINE__, #expr, (expr))
static bk_status tl_ok_at(const char *file, int line, const char *what, bk_status st) {
  if (st == BK_OK) {
    tl_passed++;
  } else {
    tl_fail_at(file, line, "%s returned %d (%s): %s", what, (int)st, bk_status_string(st),
               bk_last_error());
  }
  return st;
}

/* Asserts a call fails with `expected` and that bk_last_error() mentions
 * `needle` (the argument's name). */
#define TL_REJECT(expr, expected, needle) \
  tl_reject_at(__FILE__, __LINE__, #expr, (expr), (expected), (needle))
static void tl_reject_at(const char *file, int line, const char *what, bk_status st,
                         bk_status expected, const char *needle) {
  if (st != expected) {
    tl_fail_at(file, line, "%s returned %d (%s), expected %d (%s); last error: %s", what, (int)st,
               bk_status_string(st), (int)expected, bk_status_string(expected), bk_last_error());
    return;
  }
  if (needle && !strstr(bk_last_error(), needle)) {
    tl_fail_at(file, line, "%s: message \"%s\" does not mention \"%s\"", what, bk_last_error(),
               needle);
    return;
  }
  tl_passed++;
}

/* ---- setup ----------------------------------------------------------------- */

/* Exit status of a skipped program; CMakeLists.txt gives it to ctest as
 * SKIP_RETURN_CODE. */
#define TL_SKIP_EXIT 77

/* Ends a program that has nothing to test here (a GPU-only program on the
 * CPU), reported to ctest as skipped rather than passed. */
static void tl_skip(const char *why) {
  printf("skipped: %s\n", why);
  exit(TL_SKIP_EXIT);
}

/* Parses BK_TEST_DEVICE and creates the contexts. A device that is asked for
 * and cannot be used ends the program: failed (exit 2), or skipped when
 * BK_TEST_ALLOW_SKIP=1. */
static void tl_init(void) {
  const char *env = getenv("BK_TEST_DEVICE");
  tl_dev.kind = BK_DEVICE_CPU;
  tl_dev.index = 0;
  if (env && strncmp(env, "cuda", 4) == 0) {
    tl_dev.kind = BK_DEVICE_CUDA;
    tl_dev.index = env[4] == ':' ? atoi(env + 5) : 0;
  } else if (env && *env && strcmp(env, "cpu") != 0) {
    fprintf(stderr, "BK_TEST_DEVICE=%s: expected cpu or cuda:N\n", env);
    exit(2);
  }
  if (bk_context_create((bk_device){BK_DEVICE_CPU, 0}, &tl_cpu) != BK_OK) {
    fprintf(stderr, "cannot create a CPU context: %s\n", bk_last_error());
    exit(2);
  }
  bk_status st = bk_context_create(tl_dev, &tl_ctx);
  if (st != BK_OK) {
    fprintf(stderr, "device %s unavailable (%s: %s)\n", env ? env : "cpu", bk_status_string(st),
            bk_last_error());
    bk_context_destroy(tl_cpu);
    const char *allow = getenv("BK_TEST_ALLOW_SKIP");
    if (allow && strcmp(allow, "1") == 0) tl_skip("the requested device is unavailable");
    exit(2);
  }
}

static int tl_finish(void) {
  bk_context_destroy(tl_ctx);
  bk_context_destroy(tl_cpu);
  printf("%s: %d passed, %d failed\n", tl_dev.kind == BK_DEVICE_CPU ? "cpu" : "cuda", tl_passed,
         tl_failed);
  if (tl_passed + tl_failed == 0) {
    fprintf(stderr, "no check ran\n");
    return 1;
  }
  return tl_failed ? 1 : 0;
}

#define TL_RUN(fn)            \
  do {                        \
    tl_case = #fn;            \
    fn();                     \
  } while (0)

/* ---- deterministic random numbers ---------------------------------------------- */

static uint64_t tl_rng = 0x9E3779B97F4A7C15ull;
static void tl_seed(uint64_t s) { tl_rng = s * 0x9E3779B97F4A7C15ull + 1; }
static uint64_t tl_next(void) {
  tl_rng ^= tl_rng << 13;
  tl_rng ^= tl_rng >> 7;
  tl_rng ^= tl_rng << 17;
  return tl_rng;
}
/* Uniform in [lo, hi). */
static double tl_uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(tl_next() >> 11) * (1.0 / 9007199254740992.0));
}
static double tl_randn(void) {
  double u1 = tl_uniform(1e-300, 1.0), u2 = tl_uniform(0.0, 1.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
static void tl_fill_uniform(double *v, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++) v[i] = tl_uniform(lo, hi);
}
static void tl_fill_randn(double *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) v[i] = tl_randn();
}

/* GCC 12 at -O3 mis-vectorizes the float round trip below when the length
 * is a propagated constant; keeping these functions out of interprocedural
 * constant propagation avoids it. */
#if defined(__GNUC__) && !defined(__clang__)
#define TL_NOIPA __attribute__((noipa))
#else
#define TL_NOIPA
#endif

/* Rounds host values to the dtype, so a float64 reference sees exactly the
 * inputs the float32 kernel sees. */
TL_NOIPA static void tl_round(bk_dtype dt, double *v, int64_t n) {
  if (dt == BK_F32)
    for (int64_t i = 0; i < n; i++) v[i] = (double)(float)v[i];
}

/* ---- buffers ------------------------------------------------------------------- */

static void *tl_xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "test harness out of memory\n");
    exit(2);
  }
  return p;
}

/* A buffer on `ctx` (the device under test when NULL) holding v converted
 * to dt. Aborts the program if the library cannot make it. */
static bk_buffer *tl_buf_on(bk_context *ctx, bk_dtype dt, const double *v, int64_t n) {
  if (!ctx) ctx = tl_ctx;
  bk_buffer *b = NULL;
  bk_status st;
  if (dt == BK_F32) {
    float *f = tl_xmalloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    st = bk_buffer_from_host(ctx, dt, n ? f : NULL, n, &b);
    free(f);
  } else {
    st = bk_buffer_from_host(ctx, dt, n ? v : NULL, n, &b);
  }
  if (st != BK_OK) {
    fprintf(stderr, "tl_buf: %s\n", bk_last_error());
    exit(2);
  }
  return b;
}
static bk_buffer *tl_buf(bk_dtype dt, const double *v, int64_t n) {
  return tl_buf_on(NULL, dt, v, n);
}

/* Reads a buffer back as double (malloc'd; the caller frees). */
static double *tl_read(const bk_buffer *b) {
  int64_t n = bk_buffer_length(b);
  double *out = tl_xmalloc((size_t)n * sizeof *out);
  if (bk_buffer_dtype(b) == BK_F32) {
    float *f = tl_xmalloc((size_t)n * sizeof *f);
    if (bk_buffer_to_host(NULL, b, n ? f : NULL, n) != BK_OK) {
      fprintf(stderr, "tl_read: %s\n", bk_last_error());
      exit(2);
    }
    for (int64_t i = 0; i < n; i++) out[i] = f[i];
    free(f);
  } else if (bk_buffer_to_host(NULL, b, n ? out : NULL, n) != BK_OK) {
    fprintf(stderr, "tl_read: %s\n", bk_last_error());
    exit(2);
  }
  return out;
}

/* Bitwise equality of two buffers' contents. */
/* Case i of a row-width scan: 37 rows of i + 1 columns for i < 160, then
 * 37 rows of 161 + 7*(i - 160) columns for `spread` cases, then the pairs
 * (rows, cols) of `wide`. Returns 0 past the last case. */
static int tl_row_width(int64_t i, int64_t spread, const int64_t (*wide)[2], int64_t nwide,
                        int64_t *rows, int64_t *cols) {
  *rows = 37;
  if (i < 160) {
    *cols = i + 1;
  } else if (i < 160 + spread) {
    *cols = 161 + 7 * (i - 160);
  } else if (i < 160 + spread + nwide) {
    *rows = wide[i - 160 - spread][0];
    *cols = wide[i - 160 - spread][1];
  } else {
    return 0;
  }
  return 1;
}

static int tl_same_bits(const bk_buffer *a, const bk_buffer *b) {
  int64_t n = bk_buffer_length(a);
  if (n != bk_buffer_length(b) || bk_buffer_dtype(a) != bk_buffer_dtype(b)) return 0;
  size_t bytes = (size_t)n * (bk_buffer_dtype(a) == BK_F32 ? 4 : 8);
  void *pa = tl_xmalloc(bytes), *pb = tl_xmalloc(bytes);
  int same = bk_buffer_to_host(NULL, a, n ? pa : NULL, n) == BK_OK &&
             bk_buffer_to_host(NULL, b, n ? pb : NULL, n) == BK_OK && memcmp(pa, pb, bytes) == 0;
  free(pa);
  free(pb);
  return same;
}

/* ---- comparisons ------------------------------------------------------------------ */

/* max |v| over finite entries, at least `floor`. */
static double tl_absmax(const double *v, int64_t n, double floor) {
  double m = floor;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(v[i]) && fabs(v[i]) > m) m = fabs(v[i]);
  return m;
}

/* Checks ||got - ref||_inf <= tol * scale. NaN matches only NaN; infinities
 * match only the same infinity. */
#define TL_CLOSE(got, ref, n, tol, scale) \
  tl_close_at(__FILE__, __LINE__, #got, (got), (ref), (n), (tol), (scale))
static int tl_close_at(const char *file, int line, const char *what, const double *got,
                       const double *ref, int64_t n, double tol, double scale) {
  double worst = 0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < n; i++) {
    double g = got[i], r = ref[i];
    if (isnan(r) || isnan(g) || isinf(r) || isinf(g)) {
      int ok = (isnan(r) && isnan(g)) || (isinf(r) && g == r);
      if (!ok) {
        tl_fail_at(file, line, "%s[%" PRId64 "] = %.17g, expected %.17g", what, i, g, r);
        return 0;
      }
      continue;
    }
    double e = fabs(g - r);
    if (e > worst) {
      worst = e;
      worst_i = i;
    }
  }
  if (worst > tol * scale) {
    tl_fail_at(file, line, "%s[%" PRId64 "] = %.17g, expected %.17g (error %.3g > %.3g = %.3g * %.3g)",
               what, worst_i, got[worst_i], ref[worst_i], worst, tol * scale, tol, scale);
    return 0;
  }
  tl_passed++;
  return 1;
}

/* Exact equality (masks, gathers, layout), bit-for-bit on the double values,
 * with NaN matching NaN and -0 distinguished from +0. */
#define TL_EXACT(got, ref, n) tl_exact_at(__FILE__, __LINE__, #got, (got), (ref), (n))
static int tl_exact_at(const char *file, int line, const char *what, const double *got,
                       const double *ref, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (isnan(got[i]) && isnan(ref[i])) continue;
    if (got[i] != ref[i] || signbit(got[i]) != signbit(ref[i])) {
      tl_fail_at(file, line, "%s[%" PRId64 "] = %.17g, expected %.17g", what, i, got[i], ref[i]);
      return 0;
    }
  }
  tl_passed++;
  return 1;
}

/* Reads buffer b and checks it is exactly `ref` (length included). */
#define TL_BUF_EXACT(b, ref, n) tl_buf_exact_at(__FILE__, __LINE__, #b, (b), (ref), (n))
static int tl_buf_exact_at(const char *file, int line, const char *what, const bk_buffer *b,
                           const double *ref, int64_t n) {
  if (!b) {
    tl_fail_at(file, line, "%s is NULL", what);
    return 0;
  }
  if (bk_buffer_length(b) != n) {
    tl_fail_at(file, line, "%s has length %" PRId64 ", expected %" PRId64, what,
               bk_buffer_length(b), n);
    return 0;
  }
  double *g = tl_read(b);
  int ok = tl_exact_at(file, line, what, g, ref, n);
  free(g);
  return ok;
}

/* Reads buffer b and checks it against ref within tol * scale. */
#define TL_BUF_CLOSE(b, ref, n, tol, scale) \
  tl_buf_close_at(__FILE__, __LINE__, #b, (b), (ref), (n), (tol), (scale))
static int tl_buf_close_at(const char *file, int line, const char *what, const bk_buffer *b,
                           const double *ref, int64_t n, double tol, double scale) {
  if (!b) {
    tl_fail_at(file, line, "%s is NULL", what);
    return 0;
  }
  if (bk_buffer_length(b) != n) {
    tl_fail_at(file, line, "%s has length %" PRId64 ", expected %" PRId64, what,
               bk_buffer_length(b), n);
    return 0;
  }
  double *g = tl_read(b);
  int ok = tl_close_at(file, line, what, g, ref, n, tol, scale);
  free(g);
  return ok;
}

/* Checks that buffer b still holds exactly v (rounded to its dtype): the
 * primitive did not write into its input. */
#define TL_UNCHANGED(b, v, n) tl_unchanged_at(__FILE__, __LINE__, #b, (b), (v), (n))
TL_NOIPA static void tl_unchanged_at(const char *file, int line, const char *what, const bk_buffer *b,
                            const double *v, int64_t n) {
  double *r = tl_xmalloc((size_t)n * sizeof *r);
  memcpy(r, v, (size_t)n * sizeof *r);
  tl_round(bk_buffer_dtype(b), r, n);
  double *g = tl_read(b);
  int ok = 1;
  for (int64_t i = 0; i < n && ok; i++)
    if (!(g[i] == r[i] || (isnan(g[i]) && isnan(r[i])))) ok = 0;
  if (ok)
    tl_passed++;
  else
    tl_fail_at(file, line, "input %s was modified", what);
  free(g);
  free(r);
}

/* A buffer whose device differs from the one under test, for the
 * device-mismatch rejections (NULL when only one device exists: the CPU). */
static bk_context *tl_other_ctx(void) {
  return tl_dev.kind == BK_DEVICE_CUDA ? tl_cpu : NULL;
}

#endif /* BK_TESTLIB_H */
