/*
 * bench_sweep.c — `bufkern bench --sweep`: the memory-bound primitives timed
 * at shapes drawn at random from a seed, against the copy bandwidth of the
 * same run.
 *
 *   bufkern bench --sweep [--seed S] [--f64] [--count N] [--family F[,F...]]
 *                 [--device cpu|cuda:N] [--json FILE] [--max-bytes B]
 *                 [--target-ms T] [--list-only]
 *
 * The shapes: every primitive gets N "large" shapes whose inputs hold 256 MiB
 * to 1 GiB and (N + 1) / 2 "medium" ones of 4 to 32 MiB. Row widths are
 * log-uniform over [1, 2^18] and a quarter each as drawn, powers of two, odd
 * and prime; the other families draw their own geometries (see draw()). A
 * shape's draws come from its own splitmix64 stream seeded from (seed,
 * primitive, size class, index), so the same seed gives the same shapes
 * whatever --family or --count selects, and bench/sweep_shapes.py draws the
 * same shapes in Python with the same integer arithmetic (--list-only prints
 * them in the canonical form both share; tests/test_sweep_shapes.py compares
 * the two). Without --seed the seed is fresh, and printed first so a run can
 * be repeated.
 *
 * The timing: inputs are made on the device from a pool of generated values
 * (tiled with bk_broadcast_to, cut with bk_vec_slice), in several sets used in
 * turn when one set fits in the L2 cache (its size read from the device), so
 * a call never finds its inputs left cached by the previous one. After
 * warm-up, one call estimates the time; then three runs of back-to-back calls
 * (together about --target-ms, default 20 ms) are each timed between two CUDA
 * events on the bench's stream, or with the monotonic clock on the CPU, and
 * the median run gives the time per call, so host call costs overlap device
 * work as they do in use. The rate is the fewest bytes the primitive must move
 * (inputs read once, outputs written once) over that time, also given as a
 * fraction of the copy bandwidth measured at the start of the same run (a
 * 1 GiB bk_buffer_copy on CUDA; on the CPU a copy of warm memory split over
 * as many OpenMP threads as the library uses), bytes read plus written.
 *
 * Every comparison is same-run: ATen times come from bench/vs_torch.py
 * --sweep, which draws the same shapes and times both sides in one process.
 * --max-bytes scales every drawn size down in proportion (smoke tests).
 *
 * bk_tool_bench_sweep(argc, argv) takes the arguments after `bench`; it
 * returns 0 when every shape ran, 1 when some shape or the setup failed, 2
 * for a usage error.
 */
#define _POSIX_C_SOURCE 200809L

#include "bufkern.h"
#include "cli.h"

#ifdef BK_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int bk_tool_bench_sweep(int argc, char **argv);
/* Writes s to f as a JSON string literal (bench.c). */
void bk_tool_json_string(FILE *f, const char *s);

#if defined(__GNUC__) || defined(__clang__)
#define SWEEP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SWEEP_PRINTF(a, b)
#endif

#define MIB ((int64_t)1 << 20)
#define GIB ((int64_t)1 << 30)
#define MAX_SETS 64
#define MAX_IN 6
#define RUNS 3
/* Convolution draws cap the work of one call (flops), so that dense float64
 * geometries stay timeable. */
#define CONV_FLOP_CAP ((int64_t)1 << 37)

/* ---- the primitives, in run order (the order of bench/sweep_shapes.py) -------- */

enum {
  P_SOFTMAX, P_MASKED_SOFTMAX, P_ROWS_SUM, P_ROWS_MAX, P_FIRST_MAX, P_TOPK, P_LN_FWD, P_LN_BWD,
  P_XENT_W, P_XENT_LOSS, P_XENT_GRAD, P_SOFTMAX_MID, P_SUM_AXIS, P_BCAST, P_BCAST_ADJ, P_SWAP,
  P_SLICE, P_CONCAT, P_GATHER, P_SCATTER, P_SCAN, P_SCAN_VAR, P_SCAN_BWD, P_SCAN_VAR_BWD,
  P_RFFT, P_IRFFT, P_IRFFT_UN, P_CONV, P_COUNT
};

/* Name, family and, for the row primitives and scans, how many (rows, cols)
 * or (T, S) inputs they read. */
static const struct {
  const char *name, *family;
  int nin;
} prims[P_COUNT] = {
    {"softmax", "row", 1},          {"masked_softmax", "row", 2},
    {"rows_sum", "row", 1},         {"rows_max", "row", 1},
    {"first_max_mask", "row", 1},   {"topk_mask", "row", 1},
    {"layernorm_fwd", "row", 1},    {"layernorm_bwd", "row", 2},
    {"xent_weighted", "row", 2},    {"xent_teacher_loss", "row", 2},
    {"xent_teacher_grad", "row", 2}, {"softmax_mid", "axis", 0},
    {"sum_axis", "axis", 0},        {"broadcast_to", "layout", 0},
    {"broadcast_adjoint", "layout", 0}, {"swap_adjacent", "layout", 0},
    {"slice", "layout", 0},         {"concat", "layout", 0},
    {"gather", "index", 0},         {"scatter_add", "index", 0},
    {"scan_diag", "scan", 1},       {"scan_diag_var", "scan", 3},
    {"scan_diag_bwd", "scan", 3},   {"scan_diag_var_bwd", "scan", 5},
    {"rfft", "fft", 0},             {"irfft", "fft", 0},
    {"irfft_unnormalized", "fft", 0}, {"conv", "conv", 0},
};

static int family_is(int p, const char *f) { return strcmp(prims[p].family, f) == 0; }

/* ---- the generator ---------------------------------------------------------------- */

#define GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001B3ull;
  return h;
}

typedef struct rng {
  uint64_t s;
} rng;

static rng rng_for(uint64_t seed, int p, int klass, int index) {
  rng r = {mix64(seed ^ fnv1a(prims[p].name)) ^ (((uint64_t)klass << 32) | (uint64_t)index)};
  return r;
}

static uint64_t rng_next(rng *r) {
  r->s += GOLDEN;
  return mix64(r->s);
}

/* Uniform in [lo, hi]; modulo reduction, as in the Python generator. */
static int64_t randint(rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

static int bitlen(int64_t v) {
  int b = 0;
  for (; v > 0; v >>= 1) b++;
  return b;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Log-uniform in [lo, hi]: an octave [2^b, 2^(b+1)), then a value in it. */
static int64_t loguni(rng *r, int64_t lo, int64_t hi) {
  int b = (int)randint(r, bitlen(lo) - 1, bitlen(hi) - 1);
  return randint(r, max64(lo, (int64_t)1 << b), min64(hi, ((int64_t)2 << b) - 1));
}

static int is_prime(int64_t v) {
  if (v < 2) return 0;
  for (int64_t d = 2; d * d <= v; d++)
    if (v % d == 0) return 0;
  return 1;
}

static int is_smooth(int64_t v) {
  static const int64_t primes[4] = {2, 3, 5, 7};
  for (int i = 0; i < 4; i++)
    while (v % primes[i] == 0) v /= primes[i];
  return v == 1;
}

/* The first value at or above v passing test, within hi; else the last below
 * v, within lo; else v. */
static int64_t nearest(int64_t v, int64_t lo, int64_t hi, int (*test)(int64_t)) {
  for (int64_t w = v; w <= hi; w++)
    if (test(w)) return w;
  for (int64_t w = v - 1; w >= lo; w--)
    if (test(w)) return w;
  return v;
}

enum { ANY, POW2, ODD, PRIME, SMOOTH };

/* A log-uniform extent in [lo, hi] of the given kind, where the range holds
 * one. */
static int64_t shaped(rng *r, int64_t lo, int64_t hi, int kind) {
  int64_t v = loguni(r, lo, hi);
  switch (kind) {
    case POW2: {
      int64_t p = (int64_t)1 << (bitlen(v) - 1);
      return p >= lo ? p : v;
    }
    case ODD:
      if (v % 2 == 0) v = v + 1 <= hi ? v + 1 : (v - 1 >= lo ? v - 1 : v);
      return v;
    case PRIME: return nearest(v, lo, hi, is_prime);
    case SMOOTH: return nearest(v, lo, hi, is_smooth);
    default: return v;
  }
}

/* A row width: as drawn, a power of two, odd or prime, a quarter each. */
static int64_t width(rng *r, int64_t lo, int64_t hi) {
  static const int kinds[4] = {ANY, POW2, ODD, PRIME};
  int kind = kinds[randint(r, 0, 3)];
  return shaped(r, lo, hi, kind);
}

/* The largest m >= 1 with m^k <= v (v >= 1). */
static int64_t iroot(int64_t v, int k) {
  int64_t lo = 1, hi = min64(v, (int64_t)1 << 32);
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2, p = 1;
    int fits = 1;
    for (int i = 0; i < k && fits; i++) {
      if (p > v / mid)
        fits = 0;
      else
        p *= mid;
    }
    if (fits)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* Fisher-Yates, from the last position down. */
static void shuffle(rng *r, int64_t *v, int n) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)randint(r, 0, i);
    int64_t t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

/* rank extents whose product is close to total (at most total, each >= 1),
 * in random order: each axis draws around the rank-th root of what is left,
 * the last takes the rest. */
static void split(rng *r, int64_t total, int rank, int64_t *dims) {
  int64_t rem = max64(1, total);
  for (int j = 0; j < rank - 1; j++) {
    int64_t root = iroot(rem, rank - j);
    int64_t d = min64(randint(r, max64(1, root / 2), 2 * root), rem);
    dims[j] = d;
    rem = max64(1, rem / d);
  }
  dims[rank - 1] = rem;
  shuffle(r, dims, rank);
}

/* ---- shapes ------------------------------------------------------------------------ */

static const char *const class_names[2] = {"large", "medium"};
static const int64_t class_bytes[2][2] = {{256 * MIB, GIB}, {4 * MIB, 32 * MIB}};

typedef struct shape {
  int prim, klass, index;
  bk_dtype dt;
  int64_t rows, cols, k;   /* row and index families; k of top-k and of the index lists */
  int64_t outer, n, inner; /* axis family; n is also the slice, concat and FFT length */
  int64_t start, len, m;   /* slice, concat */
  int64_t T, S, batch;     /* scans, FFTs */
  int rank, in_rank, depth;
  int64_t out[16], in[16], map[16]; /* broadcasts (out, in, map), swaps (out) */
  int sr;                           /* convolution */
  int64_t N, cin, cout, groups, sp[3], kk[3], stride[3], pb[3], pa[3], dil[3];
} shape;

static double es(bk_dtype dt) { return dt == BK_F64 ? 8.0 : 4.0; }
static const char *dtn(bk_dtype dt) { return dt == BK_F64 ? "f64" : "f32"; }

static void draw_conv(rng *r, int64_t m, shape *s) {
  s->sr = (int)randint(r, 1, 3);
  const int64_t kmax = s->sr == 1 ? 9 : s->sr == 2 ? 5 : 3;
  int64_t prodk = 1;
  for (int j = 0; j < s->sr; j++) {
    s->kk[j] = randint(r, 1, kmax);
    s->dil[j] = randint(r, 0, 1) == 0 ? 1 : randint(r, 2, 3);
    int64_t eff = (s->kk[j] - 1) * s->dil[j] + 1;
    s->stride[j] = randint(r, 1, 2);
    s->pb[j] = randint(r, 0, eff - 1);
    s->pa[j] = randint(r, 0, eff - 1);
    prodk *= s->kk[j];
  }
  int kind = (int)randint(r, 0, 2); /* dense, grouped, depthwise */
  int64_t cin0 = loguni(r, 1, 512);
  if (kind == 0) {
    s->groups = 1;
    s->cin = cin0;
    s->cout = loguni(r, 1, 512);
  } else if (kind == 1) {
    static const int64_t g[3] = {2, 4, 8};
    s->groups = g[randint(r, 0, 2)];
    s->cin = max64(1, cin0 / s->groups) * s->groups;
    s->cout = max64(1, loguni(r, 1, 512) / s->groups) * s->groups;
  } else {
    s->groups = s->cin = s->cout = cin0;
  }
  int64_t work = max64(1, 2 * s->cout * prodk / s->groups); /* flops per input element */
  m = max64(1, min64(m, CONV_FLOP_CAP / work));
  s->N = min64(loguni(r, 1, 64), max64(1, m / s->cin));
  split(r, max64(1, m / (s->N * s->cin)), s->sr, s->sp);
  for (int j = 0; j < s->sr; j++) s->sp[j] = max64(s->sp[j], (s->kk[j] - 1) * s->dil[j] + 1);
}

static void draw(uint64_t seed, int p, bk_dtype dt, int klass, int index, int64_t max_bytes,
                 shape *s) {
  memset(s, 0, sizeof *s);
  s->prim = p;
  s->dt = dt;
  s->klass = klass;
  s->index = index;
  rng r = rng_for(seed, p, klass, index);
  int64_t t = randint(&r, class_bytes[klass][0], class_bytes[klass][1]);
  if (max_bytes > 0 && max_bytes < GIB) t = t * max_bytes / GIB;
  const int64_t m = max64(1, max64(t, 1) / (int64_t)es(dt));
  const int nin = prims[p].nin;
  if (family_is(p, "row")) {
    s->cols = width(&r, 1, min64((int64_t)1 << 18, max64(1, m / nin)));
    s->rows = max64(1, m / (nin * s->cols));
    if (p == P_TOPK) s->k = loguni(&r, 1, min64(s->cols, 64));
  } else if (family_is(p, "axis")) {
    s->inner = loguni(&r, 1, min64((int64_t)1 << 16, m));
    s->n = loguni(&r, 1, min64((int64_t)1 << 16, max64(1, m / s->inner)));
    s->outer = max64(1, m / (s->n * s->inner));
  } else if (p == P_BCAST || p == P_BCAST_ADJ) {
    s->rank = (int)randint(&r, 1, 16);
    split(&r, m, s->rank, s->out);
    int role[16], kept[16], nk = 0; /* role 0 kept, 1 from extent 1, 2 inserted */
    for (int j = 0; j < s->rank; j++) role[j] = (int)randint(&r, 0, 2);
    for (int j = 0; j < s->rank; j++)
      if (role[j] != 2) kept[nk++] = j;
    int64_t perm[16];
    for (int a = 0; a < nk; a++) perm[a] = a;
    shuffle(&r, perm, nk);
    s->in_rank = nk;
    for (int i = 0; i < nk; i++) {
      int j = kept[i];
      s->map[j] = perm[i] + 1;
      s->in[perm[i]] = role[j] == 0 ? s->out[j] : 1;
    }
  } else if (p == P_SWAP) {
    s->rank = (int)randint(&r, 2, 16);
    split(&r, m, s->rank, s->out);
    s->depth = (int)randint(&r, 0, s->rank - 2);
  } else if (p == P_SLICE) {
    s->len = randint(&r, max64(1, m / 4), m);
    s->n = m;
    s->start = randint(&r, 0, m - s->len);
  } else if (p == P_CONCAT) {
    s->n = loguni(&r, 1, max64(1, m - 1));
    s->m = max64(0, m - s->n);
  } else if (family_is(p, "index")) {
    s->cols = width(&r, 1, min64((int64_t)1 << 16, m));
    int64_t big = max64(1, m / s->cols);
    int e = (int)randint(&r, -10, 10);
    s->rows = e >= 0 ? max64(1, big >> e) : big;
    s->k = e >= 0 ? big : max64(1, big >> -e);
  } else if (family_is(p, "scan")) {
    s->T = loguni(&r, 1, min64((int64_t)1 << 16, m));
    s->S = min64((int64_t)1 << 20, max64(1, m / (nin * s->T)));
    if (s->S == (int64_t)1 << 20) s->T = max64(1, m / (nin * s->S));
  } else if (family_is(p, "fft")) {
    static const int kinds[4] = {POW2, SMOOTH, ODD, PRIME};
    s->n = shaped(&r, 1, min64((int64_t)1 << 20, m), kinds[index % 4]);
    int64_t row = p == P_RFFT ? s->n : 2 * (s->n / 2 + 1);
    s->batch = max64(1, m / row);
  } else {
    draw_conv(&r, m, s);
  }
}

static int64_t prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}

static void conv_out(const shape *s, int64_t *out) {
  for (int j = 0; j < s->sr; j++)
    out[j] = (s->sp[j] + s->pb[j] + s->pa[j] - ((s->kk[j] - 1) * s->dil[j] + 1)) / s->stride[j] + 1;
}

/* ---- the canonical text of a shape ------------------------------------------------- */

typedef struct text {
  char buf[1024];
  size_t len;
} text;

static void put(text *t, const char *fmt, ...) SWEEP_PRINTF(2, 3);
static void put(text *t, const char *fmt, ...) {
  if (t->len >= sizeof t->buf) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, ap);
  va_end(ap);
  if (n > 0) t->len = min64((int64_t)(t->len + (size_t)n), (int64_t)sizeof t->buf - 1);
}

static void put_list(text *t, const char *key, const int64_t *v, int n) {
  put(t, " %s=", key);
  for (int i = 0; i < n; i++) put(t, i ? ",%" PRId64 : "%" PRId64, v[i]);
}

/* The fields of a shape, " key=value" each, in the order of the Python
 * generator. */
static void fields(const shape *s, text *t) {
  const int p = s->prim;
  if (family_is(p, "row")) {
    put(t, " cols=%" PRId64 " rows=%" PRId64, s->cols, s->rows);
    if (p == P_TOPK) put(t, " k=%" PRId64, s->k);
  } else if (family_is(p, "axis")) {
    put(t, " outer=%" PRId64 " n=%" PRId64 " inner=%" PRId64, s->outer, s->n, s->inner);
  } else if (p == P_BCAST || p == P_BCAST_ADJ) {
    put_list(t, "out", s->out, s->rank);
    put_list(t, "in", s->in, s->in_rank);
    put_list(t, "map", s->map, s->rank);
  } else if (p == P_SWAP) {
    put_list(t, "dims", s->out, s->rank);
    put(t, " depth=%d", s->depth);
  } else if (p == P_SLICE) {
    put(t, " n=%" PRId64 " start=%" PRId64 " len=%" PRId64, s->n, s->start, s->len);
  } else if (p == P_CONCAT) {
    put(t, " n=%" PRId64 " m=%" PRId64, s->n, s->m);
  } else if (family_is(p, "index")) {
    put(t, " rows=%" PRId64 " cols=%" PRId64 " k=%" PRId64, s->rows, s->cols, s->k);
  } else if (family_is(p, "scan")) {
    put(t, " T=%" PRId64 " S=%" PRId64, s->T, s->S);
  } else if (family_is(p, "fft")) {
    put(t, " batch=%" PRId64 " n=%" PRId64, s->batch, s->n);
  } else {
    put(t, " N=%" PRId64 " cin=%" PRId64 " cout=%" PRId64 " groups=%" PRId64, s->N, s->cin,
        s->cout, s->groups);
    put_list(t, "in", s->sp, s->sr);
    put_list(t, "k", s->kk, s->sr);
    put_list(t, "stride", s->stride, s->sr);
    put_list(t, "pad_before", s->pb, s->sr);
    put_list(t, "pad_after", s->pa, s->sr);
    put_list(t, "dil", s->dil, s->sr);
  }
}

/* The extent a plot sets the fraction of copy against, and its name: the row
 * width for the row and index families, the reduced length for the axis
 * family, the innermost output extent for broadcasts and swaps, the length
 * for vectors and FFTs, the state width for scans, C_in for convolutions. */
static int64_t plot_x(const shape *s, const char **name) {
  const int p = s->prim;
  if (family_is(p, "row") || family_is(p, "index")) {
    *name = "cols";
    return s->cols;
  }
  if (p == P_BCAST || p == P_BCAST_ADJ || p == P_SWAP) {
    *name = "inner";
    return s->out[s->rank - 1];
  }
  if (p == P_SLICE) {
    *name = "len";
    return s->len;
  }
  if (p == P_CONCAT) {
    *name = "n+m";
    return s->n + s->m;
  }
  if (family_is(p, "scan")) {
    *name = "S";
    return s->S;
  }
  if (p == P_CONV) {
    *name = "cin";
    return s->cin;
  }
  *name = "n"; /* the axis and FFT families */
  return s->n;
}

/* ---- inputs, bytes and calls --------------------------------------------------------- */

/* Value kinds of the inputs. */
enum { K_UNIFORM, K_MASK, K_POSITIVE, K_DECAY, K_KINDS };

/* The inputs of a shape: lengths and value kinds. An input of kind -1 is the
 * forward result the backward scans read, made from the others. */
static int inputs(const shape *s, int64_t *len, int *kind) {
  const int64_t rc = s->rows * s->cols, ts = s->T * s->S;
  switch (s->prim) {
    case P_MASKED_SOFTMAX: len[0] = len[1] = rc, kind[1] = K_MASK; return 2;
    case P_LN_FWD: len[0] = rc, len[1] = len[2] = s->cols, kind[1] = K_POSITIVE; return 3;
    case P_LN_BWD:
      len[0] = len[1] = rc, len[2] = s->rows, len[3] = s->cols;
      kind[2] = kind[3] = K_POSITIVE;
      return 4;
    case P_XENT_W: len[0] = len[1] = rc, kind[1] = K_POSITIVE; return 2;
    case P_XENT_LOSS:
    case P_XENT_GRAD: len[0] = len[1] = rc; return 2;
    case P_SOFTMAX_MID:
    case P_SUM_AXIS: len[0] = s->outer * s->n * s->inner; return 1;
    case P_BCAST: len[0] = prod(s->in, s->in_rank); return 1;
    case P_BCAST_ADJ:
    case P_SWAP: len[0] = prod(s->out, s->rank); return 1;
    case P_SLICE: len[0] = s->n; return 1;
    case P_CONCAT: len[0] = s->n, len[1] = s->m; return 2;
    case P_GATHER: len[0] = rc; return 1;
    case P_SCATTER: len[0] = rc, len[1] = s->k * s->cols; return 2;
    case P_SCAN:
    case P_SCAN_BWD:
      len[0] = len[1] = len[3] = s->S, len[2] = ts, kind[0] = K_DECAY;
      if (s->prim == P_SCAN) return 4;
      len[4] = ts, kind[4] = -1, len[5] = ts;
      return 6;
    case P_SCAN_VAR:
    case P_SCAN_VAR_BWD:
      len[0] = len[1] = len[2] = ts, len[3] = s->S, kind[0] = K_DECAY;
      if (s->prim == P_SCAN_VAR) return 4;
      len[4] = ts, kind[4] = -1, len[5] = ts;
      return 6;
    case P_RFFT: len[0] = s->batch * s->n; return 1;
    case P_IRFFT:
    case P_IRFFT_UN: len[0] = s->batch * (s->n / 2 + 1) * 2; return 1;
    case P_CONV:
      len[0] = s->N * s->cin * prod(s->sp, s->sr);
      len[1] = s->cout * s->cin * prod(s->kk, s->sr);
      len[2] = s->cout;
      return 3;
    default: len[0] = rc; return 1; /* softmax, row sum and max, masks */
  }
}

/* The fewest bytes a call moves (inputs read once, outputs written once; the
 * index lists of gather and scatter-add at 8 bytes an entry), the same
 * counts bench/vs_torch.py uses. */
static double bytes_moved(const shape *s) {
  const double e = es(s->dt), R = (double)s->rows, C = (double)s->cols, rc = R * C;
  const double ts = (double)s->T * (double)s->S, S = (double)s->S, K = (double)s->k;
  const double fft = ((double)s->batch * (double)s->n + 2.0 * (double)s->batch *
                                                            (double)(s->n / 2 + 1)) * e;
  switch (s->prim) {
    case P_SOFTMAX:
    case P_FIRST_MAX:
    case P_TOPK: return 2 * rc * e;
    case P_MASKED_SOFTMAX:
    case P_XENT_GRAD: return 3 * rc * e;
    case P_ROWS_SUM:
    case P_ROWS_MAX: return (rc + R) * e;
    case P_LN_FWD: return (3 * rc + 2 * C + R) * e;
    case P_LN_BWD: return (3 * rc + R + 3 * C) * e;
    case P_XENT_W:
    case P_XENT_LOSS: return (2 * rc + 1) * e;
    case P_SOFTMAX_MID: return 2.0 * (double)(s->outer * s->n * s->inner) * e;
    case P_SUM_AXIS: return (double)(s->outer * s->n * s->inner + s->outer * s->inner) * e;
    case P_BCAST:
    case P_BCAST_ADJ: return (double)(prod(s->in, s->in_rank) + prod(s->out, s->rank)) * e;
    case P_SWAP: return 2.0 * (double)prod(s->out, s->rank) * e;
    case P_SLICE: return 2.0 * (double)s->len * e;
    case P_CONCAT: return 2.0 * (double)(s->n + s->m) * e;
    case P_GATHER: return 2 * K * C * e + 8 * K;
    case P_SCATTER: return (2 * rc + K * C) * e + 8 * K;
    case P_SCAN: return (2 * ts + 3 * S) * e;
    case P_SCAN_VAR: return (4 * ts + S) * e;
    case P_SCAN_BWD: return (4 * ts + 6 * S) * e;
    case P_SCAN_VAR_BWD: return (8 * ts + 2 * S) * e;
    case P_RFFT:
    case P_IRFFT:
    case P_IRFFT_UN: return fft;
    default: {
      int64_t out[3];
      conv_out(s, out);
      double in = (double)(s->N * s->cin * prod(s->sp, s->sr));
      double o = (double)(s->N * s->cout * prod(out, s->sr));
      double w = (double)(s->cout * (s->cin / s->groups) * prod(s->kk, s->sr));
      return (in + o + w + (double)s->cout) * e;
    }
  }
}

static double conv_flops(const shape *s) {
  int64_t out[3];
  conv_out(s, out);
  return 2.0 * (double)s->N * (double)s->cout * (double)prod(out, s->sr) *
         (double)(s->cin / s->groups) * (double)prod(s->kk, s->sr);
}

typedef struct sweep sweep;

/* One call of the shape's primitive on the inputs `in`; outputs released at
 * once. idx: the host index list of gather and scatter-add. */
static bk_status call(bk_context *ctx, const shape *s, bk_buffer *const *in,
                      const uint64_t *idx) {
  bk_buffer *y[4] = {NULL, NULL, NULL, NULL};
  bk_status st = BK_OK;
  const int64_t R = s->rows, C = s->cols, T = s->T, S = s->S;
  switch (s->prim) {
    case P_SOFTMAX: {
      int64_t dims[2] = {R, C};
      st = bk_softmax(ctx, in[0], dims, 2, 1, &y[0]);
      break;
    }
    case P_MASKED_SOFTMAX: st = bk_rows_masked_softmax(ctx, in[0], in[1], R, C, &y[0]); break;
    case P_ROWS_SUM: st = bk_rows_sum(ctx, in[0], R, C, &y[0]); break;
    case P_ROWS_MAX: st = bk_rows_max(ctx, in[0], R, C, &y[0]); break;
    case P_FIRST_MAX: st = bk_rows_first_max_mask(ctx, in[0], R, C, &y[0]); break;
    case P_TOPK: st = bk_rows_topk_mask(ctx, in[0], R, C, s->k, &y[0]); break;
    case P_LN_FWD:
      st = bk_layernorm_forward(ctx, in[0], in[1], in[2], R, C, 1e-5, &y[0], &y[1], &y[2]);
      break;
    case P_LN_BWD:
      st = bk_layernorm_backward(ctx, in[0], in[1], in[2], in[3], R, C, &y[0], &y[1], &y[2]);
      break;
    case P_XENT_W: st = bk_xent_weighted_mean(ctx, in[0], in[1], R, C, &y[0]); break;
    case P_XENT_LOSS:
    case P_XENT_GRAD:
      st = bk_xent_teacher(ctx, in[0], in[1], R, C, s->prim == P_XENT_GRAD, &y[0]);
      break;
    case P_SOFTMAX_MID:
    case P_SUM_AXIS: {
      int64_t dims[3] = {s->outer, s->n, s->inner};
      st = s->prim == P_SUM_AXIS ? bk_sum_axis(ctx, in[0], dims, 3, 1, &y[0])
                                 : bk_softmax(ctx, in[0], dims, 3, 1, &y[0]);
      break;
    }
    case P_BCAST:
      st = bk_broadcast_to(ctx, in[0], s->in, s->in_rank, s->out, s->rank, s->map, &y[0]);
      break;
    case P_BCAST_ADJ:
      st = bk_broadcast_to_adjoint(ctx, in[0], s->in, s->in_rank, s->out, s->rank, s->map,
                                   &y[0]);
      break;
    case P_SWAP: st = bk_swap_adjacent(ctx, in[0], s->out, s->rank, s->depth, &y[0]); break;
    case P_SLICE: st = bk_vec_slice(ctx, in[0], s->n, s->start, s->len, &y[0]); break;
    case P_CONCAT: st = bk_vec_concat(ctx, in[0], in[1], s->n, s->m, &y[0]); break;
    case P_GATHER: st = bk_rows_gather(ctx, in[0], R, C, idx, s->k, &y[0]); break;
    case P_SCATTER: st = bk_rows_scatter_add(ctx, in[0], in[1], R, C, idx, s->k, &y[0]); break;
    case P_SCAN: st = bk_scan_diag(ctx, in[0], in[1], in[2], in[3], T, S, &y[0]); break;
    case P_SCAN_VAR: st = bk_scan_diag_var(ctx, in[0], in[1], in[2], in[3], T, S, &y[0]); break;
    case P_SCAN_BWD:
      st = bk_scan_diag_backward(ctx, in[0], in[1], in[2], in[3], in[4], in[5], T, S, &y[0],
                                 &y[1], &y[2], &y[3]);
      break;
    case P_SCAN_VAR_BWD:
      st = bk_scan_diag_var_backward(ctx, in[0], in[1], in[2], in[3], in[4], in[5], T, S, &y[0],
                                     &y[1], &y[2], &y[3]);
      break;
    case P_RFFT: st = bk_rfft(ctx, in[0], s->batch, s->n, &y[0]); break;
    case P_IRFFT: st = bk_irfft(ctx, in[0], s->batch, s->n, &y[0]); break;
    case P_IRFFT_UN: st = bk_irfft_unnormalized(ctx, in[0], s->batch, s->n, &y[0]); break;
    default: {
      int64_t idims[5] = {s->N, s->cin}, kdims[5] = {s->cout, s->cin};
      for (int j = 0; j < s->sr; j++) idims[2 + j] = s->sp[j], kdims[2 + j] = s->kk[j];
      st = bk_conv(ctx, in[0], in[1], in[2], idims, s->sr + 2, kdims, s->sr, s->stride, s->pb,
                   s->pa, s->dil, s->groups, &y[0]);
      break;
    }
  }
  for (int i = 0; i < 4; i++) bk_buffer_release(y[i]);
  return st;
}

/* ---- the run ----------------------------------------------------------------------------- */

/* The generated values inputs are cut from: a prime number of them, so rows
 * of any width differ. */
#define POOL 1048573

struct sweep {
  bk_context *ctx;
  bk_device dev;
  int cuda;
  uint64_t seed;
  bk_dtype dt;
  int count;
  int64_t max_bytes;
  double target_ms;
  const char *families; /* comma-separated names, NULL for all */
  FILE *json;
  double l2_bytes, copy_gbs;
  bk_buffer *pool[K_KINDS];
  int failures;
#ifdef BK_HAVE_CUDA
  cudaStream_t stream;
  cudaEvent_t ev[2];
#endif
};

#ifdef BK_HAVE_CUDA
/* Reports a failed CUDA call; returns 1 then, else 0. */
static int cuda_failed(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return 0;
  fprintf(stderr, "bench: %s failed: %s\n", what, cudaGetErrorString(err));
  return 1;
}
#endif

static int selected(const sweep *b, int p) {
  if (!b->families) return 1;
  const char *f = b->families;
  while (*f) {
    size_t n = strcspn(f, ",");
    if ((strlen(prims[p].name) == n && strncmp(prims[p].name, f, n) == 0) ||
        (strlen(prims[p].family) == n && strncmp(prims[p].family, f, n) == 0))
      return 1;
    f += n + (f[n] == ',');
  }
  return 0;
}

/* Every comma-separated name names a primitive or a family. */
static int families_valid(const char *f) {
  while (*f) {
    size_t n = strcspn(f, ",");
    int found = 0;
    for (int p = 0; p < P_COUNT && !found; p++)
      found = (strlen(prims[p].name) == n && strncmp(prims[p].name, f, n) == 0) ||
              (strlen(prims[p].family) == n && strncmp(prims[p].family, f, n) == 0);
    if (!found) return 0;
    f += n + (f[n] == ',');
  }
  return 1;
}

static bk_status make_pools(sweep *b) {
  void *h = malloc((size_t)POOL * 8);
  if (!h) return BK_ERR_OUT_OF_MEMORY;
  bk_status st = BK_OK;
  for (int kind = 0; kind < K_KINDS && st == BK_OK; kind++) {
    rng r = {0x5EED0000ull + (uint64_t)kind};
    for (int64_t i = 0; i < POOL; i++) {
      double u = (double)(rng_next(&r) >> 11) * (1.0 / 9007199254740992.0);
      double v = kind == K_UNIFORM    ? 6.0 * u - 3.0
                 : kind == K_MASK     ? (u < 0.7 ? 1.0 : 0.0)
                 : kind == K_POSITIVE ? 0.5 + u
                                      : 0.5 + 0.49 * u;
      if (b->dt == BK_F64)
        ((double *)h)[i] = v;
      else
        ((float *)h)[i] = (float)v;
    }
    st = bk_buffer_from_host(b->ctx, b->dt, h, POOL, &b->pool[kind]);
  }
  free(h);
  return st;
}

/* An input of n values of one kind, cut on the device from the pool at an
 * offset that differs between sets. */
static bk_status make_input(sweep *b, int64_t n, int kind, int set, bk_buffer **out) {
  *out = NULL;
  const int64_t off = ((int64_t)set * 104729) % POOL;
  if (n + off <= POOL) return bk_vec_slice(b->ctx, b->pool[kind], POOL, off, n, out);
  const int64_t reps = (n + off + POOL - 1) / POOL, in_dims[1] = {POOL};
  const int64_t out_dims[2] = {reps, POOL}, map[2] = {0, 1};
  bk_buffer *tiled = NULL;
  bk_status st = bk_broadcast_to(b->ctx, b->pool[kind], in_dims, 1, out_dims, 2, map, &tiled);
  if (st == BK_OK) st = bk_vec_slice(b->ctx, tiled, reps * POOL, off, n, out);
  bk_buffer_release(tiled);
  return st;
}

/* Milliseconds per call over `calls` back-to-back calls, the input sets
 * taken in turn from *next on. */
static bk_status time_calls(sweep *b, const shape *s, bk_buffer *sets[][MAX_IN], int nsets,
                            const uint64_t *idx, int calls, int *next, double *ms) {
  bk_status st = BK_OK;
#ifdef BK_HAVE_CUDA
  if (b->cuda) {
    if (cuda_failed(cudaEventRecord(b->ev[0], b->stream), "cudaEventRecord")) return BK_ERR_DEVICE;
    for (int i = 0; i < calls && st == BK_OK; i++) st = call(b->ctx, s, sets[(*next)++ % nsets], idx);
    if (st != BK_OK) return st;
    float e = 0;
    if (cuda_failed(cudaEventRecord(b->ev[1], b->stream), "cudaEventRecord") ||
        cuda_failed(cudaEventSynchronize(b->ev[1]), "cudaEventSynchronize") ||
        cuda_failed(cudaEventElapsedTime(&e, b->ev[0], b->ev[1]), "cudaEventElapsedTime"))
      return BK_ERR_DEVICE;
    *ms = (double)e / calls;
    return BK_OK;
  }
#endif
  double t0 = cli_now();
  for (int i = 0; i < calls && st == BK_OK; i++) st = call(b->ctx, s, sets[(*next)++ % nsets], idx);
  if (st == BK_OK) st = bk_context_synchronize(b->ctx);
  *ms = 1e3 * (cli_now() - t0) / calls;
  return st;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, c = *(const double *)y;
  return a < c ? -1 : a > c;
}

/* Warm-up, an estimate, then RUNS runs of back-to-back calls sized so that
 * together they last about target_ms; the median run's time per call. */
static bk_status time_shape(sweep *b, const shape *s, bk_buffer *sets[][MAX_IN], int nsets,
                            const uint64_t *idx, double *ms, int *calls_out) {
  int next = 0;
  /* The index primitives upload through a ring of pinned staging slots, each
   * grown on its first large upload: four warm-up calls grow them all. */
  const int warm = idx ? 4 : 2;
  double est = 0, t[RUNS];
  bk_status st = time_calls(b, s, sets, nsets, idx, warm, &next, &est);
  if (st == BK_OK) st = time_calls(b, s, sets, nsets, idx, 1, &next, &est);
  if (st != BK_OK) return st;
  double per_run = b->target_ms / RUNS;
  int calls = est > 0 ? (int)(per_run / est + 0.5) : 100000;
  calls = calls < 1 ? 1 : calls > 100000 ? 100000 : calls;
  for (int i = 0; i < RUNS && st == BK_OK; i++)
    st = time_calls(b, s, sets, nsets, idx, calls, &next, &t[i]);
  if (st != BK_OK) return st;
  qsort(t, RUNS, sizeof *t, cmp_double);
  *ms = t[RUNS / 2];
  *calls_out = calls;
  return BK_OK;
}

static void report(sweep *b, const shape *s, bk_status st, double ms, int calls, int nsets) {
  text t = {{0}, 0};
  fields(s, &t);
  const char *xname = "";
  int64_t x = plot_x(s, &xname);
  double bytes = bytes_moved(s), gbs = st == BK_OK ? bytes / (ms * 1e6) : 0;
  double frac = b->copy_gbs > 0 ? gbs / b->copy_gbs : 0;
  if (st == BK_OK)
    printf("%-18s %s %-6s %3d %11.4f ms %8.1f GB/s %6.1f%% of copy %s\n", prims[s->prim].name,
           dtn(s->dt), class_names[s->klass], s->index, ms, gbs, 100 * frac, t.buf);
  else
    printf("%-18s %s %-6s %3d %s (%d): %s %s\n", prims[s->prim].name, dtn(s->dt),
           class_names[s->klass], s->index, bk_status_string(st), (int)st, bk_last_error(),
           t.buf);
  fflush(stdout);
  if (!b->json) return;
  fprintf(b->json, "{\"primitive\": \"%s\", \"family\": \"%s\", \"dtype\": \"%s\", ",
          prims[s->prim].name, prims[s->prim].family, dtn(s->dt));
  fprintf(b->json, "\"class\": \"%s\", \"index\": %d, \"shape\": ", class_names[s->klass],
          s->index);
  bk_tool_json_string(b->json, t.buf + (t.len > 0));
  fprintf(b->json, ", \"x\": %" PRId64 ", \"x_name\": \"%s\", \"bytes\": %.0f", x, xname, bytes);
  if (s->prim == P_CONV) fprintf(b->json, ", \"flops\": %.0f", conv_flops(s));
  if (st == BK_OK)
    fprintf(b->json,
            ", \"status\": 0, \"ms\": %.6g, \"gbs\": %.6g, \"frac_copy\": %.6g, \"calls\": %d, "
            "\"runs\": %d, \"sets\": %d}\n",
            ms, gbs, frac, calls, RUNS, nsets);
  else {
    fprintf(b->json, ", \"status\": %d, \"error\": ", (int)st);
    bk_tool_json_string(b->json, bk_last_error());
    fprintf(b->json, "}\n");
  }
  fflush(b->json);
}

static uint64_t *host_indices(const shape *s) {
  uint64_t *idx = (uint64_t *)malloc((size_t)s->k * sizeof *idx);
  if (!idx) return NULL;
  rng r = {0x1D1CE5ull ^ (uint64_t)s->index};
  for (int64_t i = 0; i < s->k; i++) idx[i] = rng_next(&r) % (uint64_t)s->rows;
  return idx;
}

static void run_shape(sweep *b, const shape *s) {
  int64_t len[MAX_IN] = {0};
  int kind[MAX_IN] = {0};
  const int nin = inputs(s, len, kind);
  double in_bytes = 0;
  for (int i = 0; i < nin; i++) in_bytes += (double)len[i] * es(s->dt);
  int nsets = 1;
  if (in_bytes <= b->l2_bytes) {
    nsets = in_bytes > 0 ? (int)(3.0 * b->l2_bytes / in_bytes) + 1 : MAX_SETS;
    nsets = nsets < 2 ? 2 : nsets > MAX_SETS ? MAX_SETS : nsets;
  }
  bk_buffer *sets[MAX_SETS][MAX_IN];
  memset(sets, 0, sizeof sets);
  bk_status st = BK_OK;
  uint64_t *idx = NULL;
  if (s->prim == P_GATHER || s->prim == P_SCATTER) {
    idx = host_indices(s);
    if (!idx) st = BK_ERR_OUT_OF_MEMORY;
  }
  for (int k = 0; k < nsets && st == BK_OK; k++) {
    for (int i = 0; i < nin && st == BK_OK; i++)
      if (kind[i] >= 0) st = make_input(b, len[i], kind[i], k, &sets[k][i]);
    /* The backward scans read the forward result of their inputs. */
    bk_buffer *const *in = sets[k];
    if (st == BK_OK && s->prim == P_SCAN_BWD)
      st = bk_scan_diag(b->ctx, in[0], in[1], in[2], in[3], s->T, s->S, &sets[k][4]);
    if (st == BK_OK && s->prim == P_SCAN_VAR_BWD)
      st = bk_scan_diag_var(b->ctx, in[0], in[1], in[2], in[3], s->T, s->S, &sets[k][4]);
  }
  if (st == BK_OK) st = bk_context_synchronize(b->ctx);
  double ms = 0;
  int calls = 0;
  if (st == BK_OK) st = time_shape(b, s, sets, nsets, idx, &ms, &calls);
  report(b, s, st, ms, calls, nsets);
  if (st != BK_OK) b->failures++;
  for (int k = 0; k < nsets; k++)
    for (int i = 0; i < MAX_IN; i++) bk_buffer_release(sets[k][i]);
  free(idx);
}

/* ---- the copy bandwidth ---------------------------------------------------------------- */

/* The CPU copy: warm memory, split over as many threads as the library's
 * OpenMP loops use. */
static double cpu_copy_ms(char *dst, const char *src, int64_t bytes, int calls) {
  double t0 = cli_now();
  for (int c = 0; c < calls; c++) {
#ifdef _OPENMP
    const int64_t parts = omp_get_max_threads();
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < parts; p++) {
      int64_t lo = bytes * p / parts, hi = bytes * (p + 1) / parts;
      memcpy(dst + lo, src + lo, (size_t)(hi - lo));
    }
#else
    memcpy(dst, src, (size_t)bytes);
#endif
  }
  return 1e3 * (cli_now() - t0) / calls;
}

static int measure_copy(sweep *b) {
  double t[RUNS];
  int64_t bytes = GIB;
  if (!b->cuda) {
    bytes = b->max_bytes > 0 && b->max_bytes < 64 * MIB ? 64 * MIB : 256 * MIB;
    char *src = (char *)malloc((size_t)bytes), *dst = (char *)malloc((size_t)bytes);
    if (!src || !dst) {
      free(src);
      free(dst);
      fprintf(stderr, "bench: cannot allocate the copy buffers\n");
      return 1;
    }
    memset(src, 1, (size_t)bytes);
    memset(dst, 0, (size_t)bytes);
    (void)cpu_copy_ms(dst, src, bytes, 2);
    for (int i = 0; i < RUNS; i++) t[i] = cpu_copy_ms(dst, src, bytes, 5);
    free(src);
    free(dst);
  }
#ifdef BK_HAVE_CUDA
  else {
    bk_buffer *src = NULL;
    bk_status st = bk_buffer_zeros(b->ctx, BK_F32, bytes / 4, &src);
    for (int i = -1; i < RUNS && st == BK_OK; i++) {
      const int calls = i < 0 ? 2 : 10;
      float e = 0;
      if (cuda_failed(cudaEventRecord(b->ev[0], b->stream), "cudaEventRecord")) st = BK_ERR_DEVICE;
      for (int c = 0; c < calls && st == BK_OK; c++) {
        bk_buffer *y = NULL;
        st = bk_buffer_copy(b->ctx, src, &y);
        bk_buffer_release(y);
      }
      if (st == BK_OK &&
          (cuda_failed(cudaEventRecord(b->ev[1], b->stream), "cudaEventRecord") ||
           cuda_failed(cudaEventSynchronize(b->ev[1]), "cudaEventSynchronize") ||
           cuda_failed(cudaEventElapsedTime(&e, b->ev[0], b->ev[1]), "cudaEventElapsedTime")))
        st = BK_ERR_DEVICE;
      if (i >= 0) t[i] = (double)e / calls;
    }
    bk_buffer_release(src);
    if (cli_report(st, "the copy bandwidth")) return 1;
  }
#endif
  qsort(t, RUNS, sizeof *t, cmp_double);
  b->copy_gbs = 2.0 * (double)bytes / (t[RUNS / 2] * 1e6);
  printf("copy bandwidth: %.1f GB/s (%" PRId64 " MiB copied, bytes read + written)\n\n",
         b->copy_gbs, bytes / MIB);
  if (b->json)
    fprintf(b->json, "{\"copy_gbs\": %.6g, \"copy_bytes\": %" PRId64 "}\n", b->copy_gbs, bytes);
  return 0;
}

/* ---- entry ------------------------------------------------------------------------------- */

static int usage(FILE *f) {
  fprintf(f,
          "usage: bufkern bench --sweep [--seed S] [--f64] [--count N] [--family F[,F...]]\n"
          "                     [--device cpu|cuda:N] [--json FILE] [--max-bytes B]\n"
          "                     [--target-ms T] [--list-only]\n"
          "  --seed       the shapes' seed (default: a fresh one, printed first)\n"
          "  --f64        float64 shapes instead of float32\n"
          "  --count      large shapes per primitive (default 40); half as many medium ones\n"
          "  --family     only these primitives or families (row, axis, layout, index, scan,\n"
          "               fft, conv)\n"
          "  --device     device to run on (default cuda:0 when a GPU is visible, else cpu)\n"
          "  --json       also write one JSON object per shape (a line each) to FILE\n"
          "  --max-bytes  scale every drawn size down so that the largest inputs hold B bytes\n"
          "  --target-ms  timed milliseconds per shape (default 20)\n"
          "  --list-only  print the shapes without timing them\n");
  return 2;
}

static int parse_int(const char *s, int64_t lo, int64_t *v) {
  char *end = NULL;
  long long x = strtoll(s, &end, 10);
  if (!end || *end || end == s || x < lo) return 0;
  *v = (int64_t)x;
  return 1;
}

static int setup_device(sweep *b, char *name, size_t cap) {
  snprintf(name, cap, "cpu");
#ifdef BK_HAVE_CUDA
  if (b->cuda) {
    struct cudaDeviceProp prop;
    int l2 = 0;
    if (cuda_failed(cudaSetDevice(b->dev.index), "cudaSetDevice") ||
        cuda_failed(cudaGetDeviceProperties(&prop, b->dev.index), "cudaGetDeviceProperties") ||
        cuda_failed(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, b->dev.index),
                    "cudaDeviceGetAttribute(L2 size)") ||
        cuda_failed(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking),
                    "cudaStreamCreateWithFlags") ||
        cuda_failed(cudaEventCreate(&b->ev[0]), "cudaEventCreate") ||
        cuda_failed(cudaEventCreate(&b->ev[1]), "cudaEventCreate"))
      return 1;
    snprintf(name, cap, "cuda:%d (%s)", (int)b->dev.index, prop.name);
    b->l2_bytes = (double)l2;
    return cli_report(bk_context_set_stream(b->ctx, b->stream), "bk_context_set_stream");
  }
#else
  if (b->cuda) {
    fprintf(stderr, "bench: this bench was built without CUDA; use --device cpu\n");
    return 1;
  }
#endif
  /* The CPU rotates inputs through sets that exceed its last-level cache;
   * 32 MiB covers the caches of the machines the CPU runs are made on. */
  b->l2_bytes = 32.0 * (double)MIB;
  return 0;
}

static void teardown(sweep *b) {
  for (int k = 0; k < K_KINDS; k++) bk_buffer_release(b->pool[k]);
#ifdef BK_HAVE_CUDA
  /* The context must stop using the stream before the stream goes. */
  if (b->cuda && b->ctx) {
    if (cli_report(bk_context_synchronize(b->ctx), "bk_context_synchronize") ||
        cli_report(bk_context_set_stream(b->ctx, NULL), "bk_context_set_stream"))
      b->failures++;
  }
#endif
  bk_context_destroy(b->ctx);
#ifdef BK_HAVE_CUDA
  for (int i = 0; i < 2; i++)
    if (b->ev[i]) (void)cudaEventDestroy(b->ev[i]);
  if (b->stream) (void)cudaStreamDestroy(b->stream);
#endif
  if (b->json) fclose(b->json);
}

int bk_tool_bench_sweep(int argc, char **argv) {
  sweep b;
  memset(&b, 0, sizeof b);
  b.dev = cli_default_device();
  b.dt = BK_F32;
  b.count = 40;
  b.target_ms = 20;
  int have_seed = 0, list_only = 0;
  const char *json_path = NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int64_t v = 0;
    int more = i + 1 < argc;
    if (strcmp(a, "bench") == 0 || strcmp(a, "--sweep") == 0) {
      continue;
    } else if (strcmp(a, "--seed") == 0 && more && parse_int(argv[i + 1], 0, &v)) {
      b.seed = (uint64_t)v, have_seed = 1, i++;
    } else if (strcmp(a, "--count") == 0 && more && parse_int(argv[i + 1], 1, &v) &&
               v <= 100000) {
      b.count = (int)v, i++;
    } else if (strcmp(a, "--max-bytes") == 0 && more && parse_int(argv[i + 1], 1, &v)) {
      b.max_bytes = v, i++;
    } else if (strcmp(a, "--target-ms") == 0 && more && parse_int(argv[i + 1], 1, &v)) {
      b.target_ms = (double)v, i++;
    } else if (strcmp(a, "--family") == 0 && more && families_valid(argv[i + 1])) {
      b.families = argv[++i];
    } else if (strcmp(a, "--device") == 0 && more && cli_parse_device(argv[i + 1], &b.dev)) {
      i++;
    } else if (strcmp(a, "--json") == 0 && more) {
      json_path = argv[++i];
    } else if (strcmp(a, "--f64") == 0) {
      b.dt = BK_F64;
    } else if (strcmp(a, "--list-only") == 0) {
      list_only = 1;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "bench: bad or incomplete argument '%s'\n", a);
      return usage(stderr);
    }
  }
  if (!have_seed)
    b.seed = mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32)) & 0xFFFFFFFFull;
  const int per_class[2] = {b.count, (b.count + 1) / 2};

  if (list_only) {
    printf("# seed %" PRIu64 "\n", b.seed);
    for (int p = 0; p < P_COUNT; p++)
      for (int c = 0; c < 2 && selected(&b, p); c++)
        for (int i = 0; i < per_class[c]; i++) {
          shape s;
          text t = {{0}, 0};
          draw(b.seed, p, b.dt, c, i, b.max_bytes, &s);
          fields(&s, &t);
          printf("%s %s %s %d%s\n", prims[p].name, dtn(b.dt), class_names[c], i, t.buf);
        }
    return 0;
  }

  printf("seed: %" PRIu64 "\n", b.seed);
  fflush(stdout);
  b.cuda = b.dev.kind == BK_DEVICE_CUDA;
  if (cli_report(bk_context_create(b.dev, &b.ctx), "bk_context_create")) return 1;
  char devname[320];
  int bad = setup_device(&b, devname, sizeof devname);
  if (!bad && json_path && !(b.json = fopen(json_path, "w"))) {
    fprintf(stderr, "bench: cannot open %s for writing\n", json_path);
    bad = 1;
  }
  if (!bad) bad = cli_report(make_pools(&b), "making the input pools");
  if (!bad) {
    printf("bufkern %s sweep on %s, %s: %d large + %d medium shapes per primitive, "
           "L2 %.0f MiB, about %.0f ms timed per shape\n",
           bk_version(), devname, dtn(b.dt), per_class[0], per_class[1], b.l2_bytes / (double)MIB,
           b.target_ms);
    if (b.json)
      fprintf(b.json,
              "{\"seed\": %" PRIu64 ", \"device\": \"%s\", \"dtype\": \"%s\", \"count\": %d, "
              "\"l2_bytes\": %.0f, \"max_bytes\": %" PRId64 ", \"version\": \"%s\"}\n",
              b.seed, b.cuda ? "cuda" : "cpu", dtn(b.dt), b.count, b.l2_bytes, b.max_bytes,
              bk_version());
    bad = measure_copy(&b);
  }
  for (int p = 0; p < P_COUNT && !bad; p++)
    for (int c = 0; c < 2 && selected(&b, p); c++)
      for (int i = 0; i < per_class[c]; i++) {
        shape s;
        draw(b.seed, p, b.dt, c, i, b.max_bytes, &s);
        run_shape(&b, &s);
      }
  teardown(&b);
  return bad || b.failures ? 1 : 0;
}
