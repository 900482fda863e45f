/*
 * fuzz_frontdoor.c — libFuzzer harness over the public API on the CPU
 * backend: every primitive, buffers, contexts and DLPack interchange.
 *
 * The input bytes are read as a stream of choices. Integer arguments come
 * from the usual range most of the time and otherwise from tables of
 * extremes (INT_MIN, -1, 0, 1, INT_MAX; INT64_MIN, INT64_MAX, INT64_MAX-1,
 * 2^62, ...) or as raw 32- or 64-bit words, so every argument reaches its
 * full range. Sizes include the thresholds where the CPU backend changes
 * path: prime FFT lengths above 64 (Bluestein), top-k rows above 64 (the
 * sorted path), broadcasts above the copy chunk, sums and scatters above
 * their column blocks, scans above their state block, products above the
 * matrix tiles. Element values include -0.0, subnormals, the neighbours of
 * FLT_MAX and DBL_MAX, infinities, NaN and raw bit patterns.
 *
 * Every call must hold the contract's invariants, else the harness aborts:
 *  - the status is one of the list in bufkern.h;
 *  - on failure every out-parameter is NULL and bk_last_error() starts with
 *    the function's name;
 *  - a NULL out-parameter gives BK_ERR_NULL;
 *  - on success every out-parameter is set, to distinct buffers of the
 *    inputs' dtype, with the lengths the header gives;
 *  - inputs are unchanged (compared bit for bit with a host copy);
 *  - nothing leaks: bk__live_buffers() returns to its starting value and
 *    every imported DLPack tensor's deleter runs exactly once.
 * Out-parameters are at times aliased (two the same pointer, or the address
 * of an input's handle), allocation failures are injected at a chosen
 * attempt, and calls run on the thread's default context or on a context
 * created for the execution and destroyed before its results are released.
 *
 * Each execution allocates at most BUDGET elements: geometry beyond it is
 * paired with short buffers, so it reaches the checks only, and a valid call
 * whose result would exceed it is not made.
 *
 * Compiled with -DBK_FUZZ_SKIP_KNOWN, the harness avoids the argument
 * patterns of defects already known in the front door (listed at
 * skip_known_* below), so that fuzzing can go on past them.
 */
#include "bufkern.h"
#include "core/internal.h"

#include <dlpack/dlpack.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements one execution may allocate, over all its buffers. */
#define BUDGET (1 << 18)
/* Multiply-adds one call may cost (conv, bmm, direct top-k). */
#define WORK_MAX ((double)(1 << 24))
/* Input buffers per call. */
#define MAX_IN 8
/* Entries of the dims arrays: rank up to BK_MAX_RANK + 2 is filled, higher
 * ranks must be rejected before the array is read. */
#define DIMS_CAP (BK_MAX_RANK + 2)

#ifdef BK_FUZZ_SKIP_KNOWN
#define SKIP_KNOWN 1
#else
#define SKIP_KNOWN 0
#endif

/* A violated invariant: say which and stop, so libFuzzer keeps the input. */
#define REQUIRE(cond, fname)                                                        \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "invariant failed in %s: %s (line %d); last error: %s\n",   \
              (fname), #cond, __LINE__, bk_last_error());                           \
      abort();                                                                      \
    }                                                                               \
  } while (0)

/* ---- the byte stream ---------------------------------------------------------- */

typedef struct reader {
  const uint8_t *p;
  size_t n;
} reader;

static uint8_t u8(reader *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}

static uint64_t u64(reader *r, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)u8(r) << (8 * i);
  return v;
}

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const int INT_EXTREMES[] = {INT_MIN, INT_MIN + 1, -17, -2, -1, 0,  1,
                                   2,       3,           16,  17, 31, INT_MAX - 1, INT_MAX};

static const int64_t I64_EXTREMES[] = {INT64_MIN,
                                       INT64_MIN + 1,
                                       -((int64_t)1 << 62),
                                       (int64_t)INT_MIN - 1,
                                       INT_MIN,
                                       -2,
                                       -1,
                                       0,
                                       1,
                                       2,
                                       3,
                                       INT_MAX,
                                       (int64_t)INT_MAX + 1,
                                       UINT32_MAX,
                                       (int64_t)UINT32_MAX + 1,
                                       (int64_t)1 << 61,
                                       (int64_t)1 << 62,
                                       ((int64_t)1 << 62) + 1,
                                       (int64_t)3 << 61,
                                       INT64_MAX - 9,
                                       INT64_MAX - 1,
                                       INT64_MAX};

/* Sizes at and around the CPU backend's thresholds: 64 (FFT radix limit,
 * direct top-k, scan block), 256 (sum, scatter and layer-norm column blocks),
 * 16384 (broadcast copy chunk), 32768 (parallel threshold and adjoint
 * blocks); primes above 64 reach Bluestein's FFT. */
static const int64_t SIZES[] = {31,  32,  33,   63,   64,   65,    67,    71,    97,
                                127, 128, 129,  131,  255,  256,   257,   263,   509,
                                521, 1031, 4099, 8191, 16383, 16384, 16385, 32768, 65537};

/* An int in [lo, hi] most of the time, else an extreme or a raw word. */
static int int_arg(reader *r, int lo, int hi) {
  uint8_t b = u8(r);
  if (b < 208) return lo + (int)(b % (unsigned)(hi - lo + 1));
  if (b < 244) return INT_EXTREMES[b % COUNT(INT_EXTREMES)];
  return (int)(uint32_t)u64(r, 4);
}

/* An int64 in [lo, hi] most of the time, else an extreme or a raw word. */
static int64_t i64_arg(reader *r, int64_t lo, int64_t hi) {
  uint8_t b = u8(r);
  if (b < 200) return lo + (int64_t)(b % (uint64_t)(hi - lo + 1));
  if (b < 244) return I64_EXTREMES[b % COUNT(I64_EXTREMES)];
  return (int64_t)u64(r, 8);
}

/* A size: mostly 0..7, often 8..71, at times a threshold, rarely an
 * extreme or a raw word. */
static int64_t dim_arg(reader *r) {
  uint8_t b = u8(r);
  if (b < 112) return b & 7;
  if (b < 176) return 8 + (b & 63);
  if (b < 216) return SIZES[b % COUNT(SIZES)];
  if (b < 250) return I64_EXTREMES[b % COUNT(I64_EXTREMES)];
  return (int64_t)u64(r, 8);
}

/* A flag: 0 or 1, at times anything. */
static int flag_arg(reader *r) { return int_arg(r, 0, 1); }

/* ---- checked arithmetic for the expected lengths --------------------------------- */

/* a*b, a+b and products of sizes; -1 when an operand is negative or the
 * result overflows. */
static int64_t mul(int64_t a, int64_t b) {
  int64_t p;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &p)) return -1;
  return p;
}

static int64_t add(int64_t a, int64_t b) {
  int64_t s;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &s)) return -1;
  return s;
}

static int64_t prod(const int64_t *d, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) {
    if (d[i] < 0) return -1;
    if (d[i] == 0) p = 0;
  }
  if (p == 0) return 0;
  for (int i = 0; i < n; i++) p = mul(p, d[i]);
  return p;
}

/* A valid result of this length may be asked for. */
static int small(int64_t n) { return n >= 0 && n <= BUDGET; }

/* ---- element values ---------------------------------------------------------------- */

static const double VALUES[] = {0.0,
                                -0.0,
                                1.0,
                                -1.0,
                                0.5,
                                -2.5,
                                3.0,
                                1e-3,
                                100.0,
                                -700.0,
                                710.0,
                                88.75,
                                -104.0,
                                NAN,
                                -NAN,
                                INFINITY,
                                -INFINITY,
                                DBL_MAX,
                                -DBL_MAX,
                                0x1.ffffffffffffep+1023,
                                DBL_MIN,
                                -DBL_MIN,
                                0x1p-1074,
                                -0x1p-1074,
                                0x1p-1050,
                                FLT_MAX,
                                -FLT_MAX,
                                0x1.fffffcp+127,
                                0x1.0000001p+128,
                                FLT_MIN,
                                0x1p-149,
                                -0x1p-149,
                                0x1p-130,
                                1e30,
                                -1e30,
                                1e300,
                                -1e300};

/* double to float without the undefined conversion of out-of-range values. */
static float to_f32(double v) {
  if (isfinite(v) && fabs(v) > FLT_MAX) return v > 0 ? INFINITY : -INFINITY;
  return (float)v;
}

static double small_value(uint8_t b) { return ((int)b - 128) / 8.0; }

/* Fills len elements of dtype dt: from the bytes one by one, from a seeded
 * generator (long buffers), as one repeated value, or as raw bit patterns. */
static void fill(reader *r, bk_dtype dt, void *dst, int64_t len) {
  uint8_t mode = u8(r);
  uint64_t seed = u64(r, 2) * 0x9E3779B97F4A7C15ull + 1;
  double one = VALUES[u8(r) % COUNT(VALUES)];
  for (int64_t i = 0; i < len; i++) {
    double v;
    uint64_t bits = 0;
    int raw = 0;
    switch (mode & 3) {
      case 0: {
        uint8_t b = u8(r);
        v = b < 2 * COUNT(VALUES) ? VALUES[b % COUNT(VALUES)] : small_value(b);
        break;
      }
      case 1:
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v = (seed >> 60) == 0 ? VALUES[(seed >> 8) % COUNT(VALUES)] : small_value((uint8_t)seed);
        break;
      case 2: v = one; break;
      default:
        raw = 1;
        bits = u64(r, dt == BK_F32 ? 4 : 8);
        v = 0.0;
        break;
    }
    if (dt == BK_F32) {
      float f = to_f32(v);
      if (raw) {
        uint32_t w = (uint32_t)bits;
        memcpy(&f, &w, sizeof f);
      }
      ((float *)dst)[i] = f;
    } else {
      if (raw) memcpy(&v, &bits, sizeof v);
      ((double *)dst)[i] = v;
    }
  }
}

/* ---- DLPack tensors made by the harness --------------------------------------------- */

/* A tensor over harness memory whose deleter counts its calls. */
typedef struct owned_tensor {
  DLManagedTensor m;
  int64_t shape[DIMS_CAP];
  int64_t strides[DIMS_CAP];
  void *mem;
  int deleted;
} owned_tensor;

static void owned_delete(DLManagedTensor *self) {
  owned_tensor *t = self->manager_ctx;
  t->deleted++;
}

/* ---- the inputs of one call ---------------------------------------------------------- */

typedef struct pool {
  bk_buffer *own[MAX_IN];   /* references the harness holds */
  bk_buffer *h[MAX_IN];     /* the handles passed; an out-parameter may alias one */
  void *copy[MAX_IN];       /* host copy of each input's elements */
  owned_tensor *dl[MAX_IN]; /* the tensor an input was imported from, if any */
  int n;
  bk_dtype dt;    /* the dtype most inputs take */
  int64_t used;   /* elements allocated so far */
  bk_context *ctx; /* NULL, or a context created for this execution */
} pool;

static void pool_add(pool *pl, bk_buffer *b, void *copy, owned_tensor *dl) {
  pl->own[pl->n] = b;
  pl->h[pl->n] = b;
  pl->copy[pl->n] = copy;
  pl->dl[pl->n] = dl;
  pl->n++;
}

/* An input buffer of `want` elements: at times of a wrong length, of the
 * other dtype, or NULL, as the bytes say. It is made from host data, as a
 * copy of another buffer, or imported from a DLPack tensor over harness
 * memory. A `want` beyond the budget gives a short buffer. */
static bk_buffer *input(reader *r, pool *pl, int64_t want) {
  uint8_t mode = u8(r);
  if (mode == 0xFF || pl->n == MAX_IN) return NULL;
  int64_t len = want;
  if ((mode & 0xF0) == 0xE0) {
    const int64_t wrong[4] = {want < INT64_MAX ? want + 1 : 0, want > INT64_MIN ? want - 1 : 0, 0,
                              u8(r) % 17};
    len = wrong[mode & 3];
  }
  if (len < 0 || len > BUDGET - pl->used) len = u8(r) % 17;
  pl->used += len;
  bk_dtype dt = (mode & 0x1F) == 0x1F ? (pl->dt == BK_F32 ? BK_F64 : BK_F32) : pl->dt;
  size_t es = dt == BK_F32 ? 4 : 8, bytes = (size_t)len * es;
  void *host = malloc(bytes ? bytes : 1);
  if (!host) abort();
  fill(r, dt, host, len);
  bk_buffer *b = NULL;
  bk_status st;
  owned_tensor *dl = NULL;
  switch ((mode >> 5) & 3) {
    case 2: { /* a copy of a buffer made from the data */
      bk_buffer *src = NULL;
      st = bk_buffer_from_host(NULL, dt, host, len, &src);
      if (st == BK_OK) st = bk_buffer_copy(pl->ctx, src, &b);
      bk_buffer_release(src);
      break;
    }
    case 3: { /* a zero-copy import of a rank-2 tensor (len, 1) */
      dl = calloc(1, sizeof *dl);
      if (!dl) abort();
      dl->mem = malloc(bytes ? bytes : 1);
      if (!dl->mem) abort();
      memcpy(dl->mem, host, bytes);
      dl->shape[0] = len;
      dl->shape[1] = 1;
      dl->strides[0] = 1;
      dl->strides[1] = (int64_t)u64(r, 8); /* any stride is compact for an extent of 1 */
      DLTensor *t = &dl->m.dl_tensor;
      t->data = dl->mem;
      t->device.device_type = kDLCPU;
      t->ndim = 2;
      t->dtype.code = kDLFloat;
      t->dtype.bits = (uint8_t)(8 * es);
      t->dtype.lanes = 1;
      t->shape = dl->shape;
      t->strides = (mode & 1) ? dl->strides : NULL;
      dl->m.manager_ctx = dl;
      dl->m.deleter = owned_delete;
      st = bk_buffer_from_dlpack(pl->ctx, &dl->m, &b);
      REQUIRE(st == BK_OK, "bk_buffer_from_dlpack");
      REQUIRE(dl->deleted == (len == 0), "bk_buffer_from_dlpack");
      break;
    }
    default: st = bk_buffer_from_host(pl->ctx, dt, host, len, &b); break;
  }
  REQUIRE(st == BK_OK && b && bk_buffer_length(b) == len && bk_buffer_dtype(b) == dt, "input");
  pool_add(pl, b, host, dl);
  return b;
}

/* Every input unchanged, bit for bit; then released (an imported tensor's
 * deleter must have run exactly once by then). */
static void pool_finish(pool *pl) {
  for (int i = 0; i < pl->n; i++) {
    bk_buffer *b = pl->own[i];
    size_t bytes = (size_t)bk_buffer_length(b) * (bk_buffer_dtype(b) == BK_F32 ? 4 : 8);
    void *now = malloc(bytes ? bytes : 1);
    if (!now) abort();
    REQUIRE(bk_buffer_to_host(NULL, b, now, bk_buffer_length(b)) == BK_OK, "bk_buffer_to_host");
    REQUIRE(memcmp(now, pl->copy[i], bytes) == 0, "an input was written");
    free(now);
    free(pl->copy[i]);
    bk_buffer_release(b);
    if (pl->dl[i]) {
      REQUIRE(pl->dl[i]->deleted == 1, "bk_buffer_release (DLPack deleter)");
      free(pl->dl[i]->mem);
      free(pl->dl[i]);
    }
  }
  pl->n = 0;
}

/* ---- out-parameters and the invariants of one call ----------------------------------- */

typedef struct outs {
  bk_buffer *v[4];  /* the harness's slots */
  bk_buffer **p[4]; /* what the call receives */
  int n;
  int aliased;  /* two out-parameters share a pointer, or one is an input's handle */
  int has_null; /* an out-parameter is NULL */
} outs;

/* Allocation failure at a chosen attempt of the next call, at times. */
static void maybe_inject(reader *r) {
  uint8_t b = u8(r);
  if (b >= 232) bk__inject_arm(1 + b % 12);
}

/* A value no call may leave in an out-parameter. */
static bk_buffer *const SENTINEL = (bk_buffer *)&SENTINEL;

/* Out-parameters for n results: distinct slots most of the time; at times
 * one NULL, two or all the same pointer, or one the address of an input's
 * handle. The call made next may have an allocation failure injected. */
static void outs_init(reader *r, outs *o, int n, pool *pl) {
  o->n = n;
  o->aliased = o->has_null = 0;
  for (int i = 0; i < n; i++) {
    o->v[i] = SENTINEL;
    o->p[i] = &o->v[i];
  }
  uint8_t mode = u8(r);
  int i = (mode >> 1) % n, j = (i + 1 + (mode >> 4) % (n > 1 ? n - 1 : 1)) % n;
  if (mode >= 0xD0 && mode < 0xE0) {
    o->p[i] = NULL;
    o->has_null = 1;
  } else if (mode >= 0xE0 && mode < 0xF0 && n > 1 && !SKIP_KNOWN) {
    o->p[j] = o->p[i];
    o->aliased = 1;
  } else if (mode >= 0xF0 && mode < 0xF8 && n > 1 && !SKIP_KNOWN) {
    for (int k = 1; k < n; k++) o->p[k] = o->p[0];
    o->aliased = 1;
  } else if (mode >= 0xF8 && pl->n > 0) {
    o->p[i] = &pl->h[mode % pl->n];
    o->aliased = 1;
  }
  maybe_inject(r);
}

static int status_known(bk_status st) {
  switch (st) {
#define BK_FUZZ_CASE_(name, value, text) case name:
    BK_STATUS_LIST(BK_FUZZ_CASE_)
#undef BK_FUZZ_CASE_
    return 1;
  }
  return 0;
}

/* The message of a failed call names the function. Allocation failures
 * name "bufkern", an internal function ("bk__cpu_fft") or, when the
 * thread's default context is made, "bk_context_create" instead in the code
 * this harness was written against; the known-defect build accepts that. */
static void check_message(bk_status st, const char *fname) {
  const char *msg = bk_last_error();
  size_t k = strlen(fname);
  int named = strncmp(msg, fname, k) == 0 && msg[k] == ':';
  if (SKIP_KNOWN && st == BK_ERR_OUT_OF_MEMORY &&
      (strncmp(msg, "bufkern:", 8) == 0 || strncmp(msg, "bk__", 4) == 0 ||
       strncmp(msg, "bk_context_create:", 18) == 0))
    named = 1;
  REQUIRE(named, fname);
}

static void check_failure(bk_status st, const char *fname) {
  REQUIRE(status_known(st), fname);
  if (st != BK_OK) check_message(st, fname);
}

/* Checks a call's out-parameters against the invariants (want[i] < 0: no
 * expected length) and releases what it returned. */
static void outs_finish(outs *o, bk_status st, const pool *pl, const int64_t *want,
                        const char *fname) {
  check_failure(st, fname);
  if (o->has_null) REQUIRE(st == BK_ERR_NULL, fname);
  bk_buffer *got[4];
  for (int i = 0; i < o->n; i++) {
    got[i] = o->p[i] ? *o->p[i] : NULL;
    if (st != BK_OK && o->p[i]) REQUIRE(got[i] == NULL, fname);
  }
  if (st == BK_OK && !o->aliased) {
    for (int i = 0; i < o->n; i++) {
      REQUIRE(got[i] != NULL && got[i] != SENTINEL, fname);
      if (want[i] >= 0) REQUIRE(bk_buffer_length(got[i]) == want[i], fname);
      if (pl->n > 0) REQUIRE(bk_buffer_dtype(got[i]) == bk_buffer_dtype(pl->own[pl->n - 1]), fname);
      for (int j = 0; j < i; j++) REQUIRE(got[i] != got[j], fname);
    }
  }
  /* Release each result once; an aliased slot may hold an input's handle. */
  for (int i = 0; i < o->n; i++) {
    bk_buffer *b = got[i];
    int skip = b == NULL || b == SENTINEL;
    for (int j = 0; j < i && !skip; j++) skip = got[j] == b;
    for (int k = 0; k < pl->n && !skip; k++) skip = pl->own[k] == b;
    if (!skip) bk_buffer_release(b);
  }
}

/* One-output shorthand. */
static void finish1(outs *o, bk_status st, const pool *pl, int64_t want, const char *fname) {
  outs_finish(o, st, pl, &want, fname);
}

/* ---- known front-door defects (skipped with -DBK_FUZZ_SKIP_KNOWN) --------------------- */

/* bk_swap_adjacent computes depth + 1 in int: depth == INT_MAX overflows. */
static int skip_known_swap(int depth) { return SKIP_KNOWN && depth == INT_MAX; }

/* The CPU backend's tap range computes pad_before + dilation - 1, which
 * the front door does not bound: with an extent of 1 on an axis it checks no
 * product of the dilation at all, and with an extent of 2 a valid call with
 * pad_before and dilation near 2^62 overflows it too. */
static int skip_known_conv(int64_t k, int64_t pad_before, int64_t dilation) {
  (void)k;
  return SKIP_KNOWN && pad_before >= 0 && dilation >= 1 && pad_before > INT64_MAX - (dilation - 1);
}

/* ---- the primitives -------------------------------------------------------------------- */

/* dims[0..rank) for a rank that may be out of range: up to DIMS_CAP
 * entries are filled (small extents when `small_dims`). Returns the entries
 * filled. */
static int fill_dims(reader *r, int64_t *d, int rank, int small_dims) {
  int n = rank < 0 ? 0 : rank > DIMS_CAP ? DIMS_CAP : rank;
  for (int i = 0; i < n; i++) {
    int64_t v = dim_arg(r);
    d[i] = small_dims && v > 8 && v < BUDGET ? v % 9 : v;
  }
  return n;
}

/* The expected length of a rank-polymorphic input: the product of its dims
 * when the rank is in range, else -1. */
static int64_t dims_len(const int64_t *d, int rank, int lo) {
  if (rank < lo || rank > BK_MAX_RANK) return -1;
  return prod(d, rank);
}

static void op_conv(reader *r, pool *pl) {
  static const char fn[] = "bk_conv";
  int64_t d[DIMS_CAP], kd[5], st_[3], pb[3], pa[3], dil[3];
  int s = int_arg(r, 1, 3), extra = int_arg(r, 0, 2);
  int sr = s < 1 || s > 3 ? 1 + (s & 1) : s; /* entries of the per-axis arrays */
  int ex = extra < 0 || extra > 3 ? 1 : extra;
  int in_rank = ex + 1 + sr;
  if (u8(r) == 0xC3) in_rank = int_arg(r, 0, DIMS_CAP); /* any rank: checks only */
  int64_t groups = i64_arg(r, 1, 4);
  int64_t gsmall = groups >= 1 && groups <= 8 ? groups : 1;
  for (int i = 0; i < ex; i++) d[i] = dim_arg(r) % 3;
  int64_t cin = gsmall * (1 + u8(r) % 3), cout = gsmall * (1 + u8(r) % 3);
  if (u8(r) == 0xC4) cin = i64_arg(r, 0, 8);
  if (u8(r) == 0xC5) cout = i64_arg(r, 0, 8);
  d[ex] = cin;
  kd[0] = cout;
  kd[1] = u8(r) == 0xC6 ? i64_arg(r, 0, 8) : cin;
  for (int a = 0; a < sr; a++) {
    d[ex + 1 + a] = dim_arg(r);
    kd[2 + a] = i64_arg(r, 1, 4);
    st_[a] = i64_arg(r, 1, 3);
    pb[a] = i64_arg(r, 0, 3);
    pa[a] = i64_arg(r, 0, 3);
    dil[a] = i64_arg(r, 1, 3);
    if (skip_known_conv(kd[2 + a], pb[a], dil[a])) return;
  }
  /* in_rank may be any int (INT_MIN included): the loop starts from it clamped to [0, DIMS_CAP]. */
  for (int i = in_rank < 0 ? 0 : in_rank < DIMS_CAP ? in_rank : DIMS_CAP; i-- > ex + 1 + sr;)
    d[i] = dim_arg(r);

  /* The expected output, per the header; -1 where a rule rejects or a size
   * overflows. The header takes any input_rank in [spatial_rank + 1,
   * BK_MAX_RANK]: the channel axis is input_rank - spatial_rank - 1 and the
   * axes before it fold into N, so a rank other than the one built above is
   * valid too when its dims are, with C_in and the spatial extents read where
   * that rank puts them. */
  int valid = s == sr && in_rank >= sr + 1 && in_rank <= BK_MAX_RANK && groups > 0;
  const int ch = valid ? in_rank - sr - 1 : 0;
  int64_t nb = -1, in_len = -1, cin_at = -1, od[5] = {0, cout, 0, 0, 0};
  if (valid) {
    in_len = prod(d, in_rank);
    nb = prod(d, ch);
    cin_at = d[ch];
    valid = in_len >= 0 && nb >= 0 && prod(kd, sr + 2) >= 0 && cin_at % groups == 0 &&
            cout % groups == 0 && kd[1] == cin_at;
  }
  int64_t kvol = 1;
  for (int a = 0; a < sr && valid; a++) {
    int64_t in = d[ch + 1 + a], k = kd[2 + a];
    valid = in >= 0 && k > 0 && st_[a] > 0 && dil[a] > 0 && pb[a] >= 0 && pa[a] >= 0;
    if (!valid) break;
    int64_t padded = add(add(in, pb[a]), pa[a]), eff = add(mul(k - 1, dil[a]), 1);
    valid = padded >= 0 && eff >= 0;
    if (!valid) break;
    od[2 + a] = padded < eff ? 0 : add((padded - eff) / st_[a], 1);
    kvol = mul(kvol, k);
  }
  od[0] = nb;
  if (!valid) in_len = prod(d, in_rank < 0 ? 0 : in_rank > DIMS_CAP ? DIMS_CAP : in_rank);
  int64_t want = valid ? prod(od, sr + 2) : -1;
  int64_t klen = prod(kd, sr + 2);
  if (valid && want < 0) valid = 0;
  /* A valid call whose result or work is too large is not made. */
  if (valid && (!small(want) || (double)want * (double)(cin_at / groups) * (double)kvol > WORK_MAX))
    return;
  bk_buffer *x = input(r, pl, in_len), *w = input(r, pl, klen);
  bk_buffer *bias = (u8(r) & 1) ? input(r, pl, cout) : NULL;
  const int64_t *dp = u8(r) == 0xC7 ? NULL : d, *kp = u8(r) == 0xC8 ? NULL : kd;
  const int64_t *sp = u8(r) == 0xC9 ? NULL : st_;
  outs o;
  outs_init(r, &o, 1, pl);
  bk_status st =
      bk_conv(pl->ctx, x, w, bias, dp, in_rank, kp, s, sp, pb, pa, dil, groups, o.p[0]);
  bk__inject_arm(0);
  finish1(&o, st, pl, valid ? want : -1, fn);
}

static void op_broadcast(reader *r, pool *pl, int adjoint) {
  const char *fn = adjoint ? "bk_broadcast_to_adjoint" : "bk_broadcast_to";
  int64_t d[DIMS_CAP], e[DIMS_CAP], m[DIMS_CAP];
  int ir = int_arg(r, 0, 4), orank = int_arg(r, 0, 6);
  int irk = fill_dims(r, d, ir, 1);
  int ork = orank < 0 ? 0 : orank > DIMS_CAP ? DIMS_CAP : orank;
  /* A permutation of the input axes spread over the output, the rest
   * inserted: mostly valid maps, at times arbitrary entries. */
  int next = 0;
  for (int j = 0; j < ork; j++) {
    uint8_t b = u8(r);
    if (b < 160 && next < irk && ork - j > 0) {
      m[j] = ++next;
    } else if (b < 240) {
      m[j] = 0;
    } else {
      m[j] = i64_arg(r, 0, irk);
    }
    int64_t v = dim_arg(r);
    e[j] = (m[j] > 0 && m[j] <= irk && (u8(r) & 3)) ? (d[m[j] - 1] == 1 ? v % 70 : d[m[j] - 1]) : v;
  }
  if (u8(r) == 0xB1 && ork > 1) { /* swap two entries: a permutation */
    int64_t t = m[0];
    m[0] = m[ork - 1];
    m[ork - 1] = t;
  }
  int64_t nin = dims_len(d, ir, 0), nout = dims_len(e, orank, 0);
  /* Valid maps may ask for large results from empty or small inputs. */
  if ((!adjoint && nout > BUDGET) || (adjoint && nin > BUDGET)) return;
  if (nout < 0 && nin < 0) return;
  bk_buffer *x = input(r, pl, adjoint ? nout : nin);
  const int64_t *dp = u8(r) == 0xB2 ? NULL : d, *ep = u8(r) == 0xB3 ? NULL : e;
  const int64_t *mp = u8(r) == 0xB4 ? NULL : m;
  outs o;
  outs_init(r, &o, 1, pl);
  bk_status st = adjoint ? bk_broadcast_to_adjoint(pl->ctx, x, dp, ir, ep, orank, mp, o.p[0])
                         : bk_broadcast_to(pl->ctx, x, dp, ir, ep, orank, mp, o.p[0]);
  bk__inject_arm(0);
  finish1(&o, st, pl, adjoint ? nin : nout, fn);
}

static void op_rank_poly(reader *r, pool *pl, int which) {
  static const char *const names[] = {"bk_softmax", "bk_swap_adjacent", "bk_sum_axis"};
  const char *fn = names[which];
  int64_t d[DIMS_CAP];
  int rank = int_arg(r, which == 0 ? 1 : 0, 5);
  int rk = fill_dims(r, d, rank, 1);
  int ax = int_arg(r, 0, rk > 1 ? rk - 1 : 0);
  if (which == 1 && skip_known_swap(ax)) return;
  int64_t n = dims_len(d, rank, which == 0 ? 1 : 0), want = -1;
  if (which < 2) {
    want = n;
  } else if (rank == 0) {
    want = ax == 0 ? 1 : -1;
  } else if (n >= 0 && ax >= 0 && ax < rank) {
    want = 1;
    for (int i = 0; i < rank; i++)
      if (i != ax) want = mul(want, d[i]);
    if (want > BUDGET) return; /* zeros for an empty axis: keep results small */
  }
  if (n < 0 && want < 0 && rank >= 0 && rank <= BK_MAX_RANK && (u8(r) & 1)) return;
  bk_buffer *x = input(r, pl, n < 0 ? 1 : rank == 0 ? 1 : n);
  const int64_t *dp = u8(r) == 0xA5 ? NULL : d;
  outs o;
  outs_init(r, &o, 1, pl);
  bk_status st = which == 0   ? bk_softmax(pl->ctx, x, dp, rank, ax, o.p[0])
                 : which == 1 ? bk_swap_adjacent(pl->ctx, x, dp, rank, ax, o.p[0])
                              : bk_sum_axis(pl->ctx, x, dp, rank, ax, o.p[0]);
  bk__inject_arm(0);
  int ok_axis = which == 0 ? (ax >= 0 && ax < rank) : which == 1 ? (ax >= 0 && (int64_t)ax + 1 < rank) : 1;
  finish1(&o, st, pl, ok_axis ? want : -1, fn);
}

static void op_rows(reader *r, pool *pl, int op) {
  int64_t rows = dim_arg(r), cols = dim_arg(r), rc = mul(rows, cols);
  outs o;
  bk_status st = BK_OK;
  int64_t want[4] = {-1, -1, -1, -1};
  const char *fn = "";
  bk_buffer *a, *b, *c, *d2, *e2, *f2;
  /* Empty inputs with a huge extent are valid calls with huge results
   * (rows zeros, state zeros): those are not made. */
  if (rc == 0 && (rows > BUDGET || cols > BUDGET)) return;
  switch (op) {
    case 0:
      fn = "bk_xent_weighted_mean";
      a = input(r, pl, rc), b = input(r, pl, rc);
      outs_init(r, &o, 1, pl);
      st = bk_xent_weighted_mean(pl->ctx, a, b, rows, cols, o.p[0]);
      want[0] = rc >= 0 ? 1 : -1;
      break;
    case 1: {
      fn = "bk_xent_teacher";
      int g = flag_arg(r);
      a = input(r, pl, rc), b = input(r, pl, rc);
      outs_init(r, &o, 1, pl);
      st = bk_xent_teacher(pl->ctx, a, b, rows, cols, g, o.p[0]);
      want[0] = rc < 0 ? -1 : g == 0 ? 1 : g == 1 ? rc : -1;
      break;
    }
    case 2: case 3:
      fn = op == 2 ? "bk_rows_sum" : "bk_rows_max";
      a = input(r, pl, rc);
      outs_init(r, &o, 1, pl);
      st = op == 2 ? bk_rows_sum(pl->ctx, a, rows, cols, o.p[0])
                   : bk_rows_max(pl->ctx, a, rows, cols, o.p[0]);
      want[0] = rc >= 0 ? rows : -1;
      break;
    case 4:
      fn = "bk_rows_first_max_mask";
      a = input(r, pl, rc);
      outs_init(r, &o, 1, pl);
      st = bk_rows_first_max_mask(pl->ctx, a, rows, cols, o.p[0]);
      want[0] = rc;
      break;
    case 5: {
      fn = "bk_rows_topk_mask";
      int64_t k = i64_arg(r, 0, 70);
      if (rc > 0 && cols <= 64 && (double)rc * (double)cols > WORK_MAX) return;
      a = input(r, pl, rc);
      outs_init(r, &o, 1, pl);
      st = bk_rows_topk_mask(pl->ctx, a, rows, cols, k, o.p[0]);
      want[0] = k >= 0 ? rc : -1;
      break;
    }
    case 6:
      fn = "bk_rows_masked_softmax";
      a = input(r, pl, rc), b = input(r, pl, rc);
      outs_init(r, &o, 1, pl);
      st = bk_rows_masked_softmax(pl->ctx, a, b, rows, cols, o.p[0]);
      want[0] = rc;
      break;
    case 7: {
      fn = "bk_layernorm_forward";
      double eps = (u8(r) & 1) ? 1e-5 : VALUES[u8(r) % COUNT(VALUES)];
      a = input(r, pl, rc), b = input(r, pl, cols), c = input(r, pl, cols);
      outs_init(r, &o, 3, pl);
      st = bk_layernorm_forward(pl->ctx, a, b, c, rows, cols, eps, o.p[0], o.p[1], o.p[2]);
      int ok = rc >= 0 && cols > 0 && isfinite(eps) && eps >= 0;
      want[0] = want[1] = ok ? rc : -1;
      want[2] = ok ? rows : -1;
      break;
    }
    case 8:
      fn = "bk_layernorm_backward";
      a = input(r, pl, rc), b = input(r, pl, rc), c = input(r, pl, rows), d2 = input(r, pl, cols);
      outs_init(r, &o, 3, pl);
      st = bk_layernorm_backward(pl->ctx, a, b, c, d2, rows, cols, o.p[0], o.p[1], o.p[2]);
      want[0] = rc >= 0 && cols > 0 ? rc : -1;
      want[1] = want[2] = rc >= 0 && cols > 0 ? cols : -1;
      break;
    default: { /* scans: rows = seq_len, cols = state */
      int var = op >= 11, bwd = op == 10 || op == 12;
      fn = var ? (bwd ? "bk_scan_diag_var_backward" : "bk_scan_diag_var")
               : (bwd ? "bk_scan_diag_backward" : "bk_scan_diag");
      int64_t la = var ? rc : cols, empty = rows == 0 || cols == 0;
      a = input(r, pl, la), b = input(r, pl, la), c = input(r, pl, rc), d2 = input(r, pl, cols);
      if (!bwd) {
        outs_init(r, &o, 1, pl);
        st = var ? bk_scan_diag_var(pl->ctx, a, b, c, d2, rows, cols, o.p[0])
                 : bk_scan_diag(pl->ctx, a, b, c, d2, rows, cols, o.p[0]);
        want[0] = rc < 0 ? -1 : empty ? 0 : rc;
      } else {
        e2 = input(r, pl, rc), f2 = input(r, pl, rc);
        outs_init(r, &o, 4, pl);
        st = var ? bk_scan_diag_var_backward(pl->ctx, a, b, c, d2, e2, f2, rows, cols, o.p[0],
                                             o.p[1], o.p[2], o.p[3])
                 : bk_scan_diag_backward(pl->ctx, a, b, c, d2, e2, f2, rows, cols, o.p[0],
                                         o.p[1], o.p[2], o.p[3]);
        if (rc >= 0) {
          want[0] = want[1] = var ? (empty ? 0 : rc) : cols;
          want[2] = empty ? 0 : rc;
          want[3] = cols;
        }
      }
      break;
    }
  }
  bk__inject_arm(0);
  outs_finish(&o, st, pl, want, fn);
}

static void op_vec(reader *r, pool *pl, int op) {
  int64_t n = dim_arg(r), m = dim_arg(r);
  outs o;
  bk_status st;
  int64_t want;
  const char *fn;
  if (op == 0) {
    fn = "bk_vec_concat";
    bk_buffer *a = input(r, pl, n), *b = input(r, pl, m);
    outs_init(r, &o, 1, pl);
    st = bk_vec_concat(pl->ctx, a, b, n, m, o.p[0]);
    want = add(n, m);
  } else if (op == 1) {
    fn = "bk_vec_slice";
    int64_t start = u8(r) & 1 ? i64_arg(r, 0, 8) : dim_arg(r);
    bk_buffer *x = input(r, pl, n);
    outs_init(r, &o, 1, pl);
    st = bk_vec_slice(pl->ctx, x, n, start, m, o.p[0]);
    want = start >= 0 && m >= 0 && add(start, m) >= 0 && add(start, m) <= n ? m : -1;
  } else {
    fn = "bk_broadcast_col";
    int64_t rc = mul(n, m);
    if (rc > BUDGET || (rc < 0 && n >= 0 && n <= BUDGET && m >= 0 && (u8(r) & 1))) return;
    bk_buffer *v = input(r, pl, n);
    outs_init(r, &o, 1, pl);
    st = bk_broadcast_col(pl->ctx, v, n, m, o.p[0]);
    want = rc;
  }
  bk__inject_arm(0);
  finish1(&o, st, pl, want, fn);
}

static void op_bmm(reader *r, pool *pl, int scaled) {
  const char *fn = scaled ? "bk_bmm_scaled" : "bk_bmm";
  int64_t b = u8(r) & 1 ? dim_arg(r) % 4 : dim_arg(r), m = dim_arg(r), n = dim_arg(r),
          p = dim_arg(r);
  int ta = flag_arg(r), tb = flag_arg(r);
  int64_t la = mul(mul(b, m), n), lb = mul(mul(b, n), p), want = mul(mul(b, m), p);
  if (want > BUDGET || (want > 0 && (double)want * (double)n > WORK_MAX)) return;
  bk_buffer *A = input(r, pl, la), *B = input(r, pl, lb);
  outs o;
  bk_status st;
  int ok_flags = (ta == 0 || ta == 1) && (tb == 0 || tb == 1);
  if (!scaled) {
    outs_init(r, &o, 1, pl);
    st = bk_bmm(pl->ctx, A, B, b, m, n, p, ta, tb, o.p[0]);
  } else {
    int flag = 7, null_flag = u8(r) == 0x9A;
    double scale = (u8(r) & 1) ? 0.5 : VALUES[u8(r) % COUNT(VALUES)];
    outs_init(r, &o, 1, pl);
    st = bk_bmm_scaled(pl->ctx, A, B, b, m, n, p, ta, tb, scale, o.p[0], null_flag ? NULL : &flag);
    if (!null_flag) REQUIRE(st == BK_OK ? (flag == 0 || flag == 1) : flag == 0, fn);
    if (null_flag) REQUIRE(st != BK_OK, fn);
    if (!(isfinite(scale) && scale > 0)) ok_flags = 0;
  }
  bk__inject_arm(0);
  finish1(&o, st, pl, ok_flags && la >= 0 && lb >= 0 ? want : -1, fn);
}

static void op_fft(reader *r, pool *pl, int op) {
  static const char *const names[] = {"bk_rfft", "bk_irfft", "bk_irfft_unnormalized"};
  int64_t batch = u8(r) & 1 ? dim_arg(r) % 5 : dim_arg(r), n = dim_arg(r);
  int64_t half = n >= 1 ? n / 2 + 1 : -1;
  int64_t real = mul(batch, n), spec = half < 0 ? -1 : mul(mul(batch, half), 2);
  /* Transforms cost a few hundred operations per element under the
   * sanitizers: a quarter of the budget keeps an execution fast. */
  if (n >= 1 && (real > BUDGET / 4 || spec > BUDGET / 4)) return;
  bk_buffer *x = input(r, pl, op == 0 ? real : spec);
  outs o;
  outs_init(r, &o, 1, pl);
  bk_status st = op == 0   ? bk_rfft(pl->ctx, x, batch, n, o.p[0])
                 : op == 1 ? bk_irfft(pl->ctx, x, batch, n, o.p[0])
                           : bk_irfft_unnormalized(pl->ctx, x, batch, n, o.p[0]);
  bk__inject_arm(0);
  finish1(&o, st, pl, n >= 1 ? (op == 0 ? spec : real) : -1, names[op]);
}

static void op_gather(reader *r, pool *pl, int scatter) {
  const char *fn = scatter ? "bk_rows_scatter_add" : "bk_rows_gather";
  int64_t rows = dim_arg(r), cols = dim_arg(r), k = u8(r) & 1 ? dim_arg(r) % 17 : dim_arg(r);
  int64_t rc = mul(rows, cols), kc = mul(k, cols);
  enum { IDX_CAP = 1024 };
  uint64_t idx[IDX_CAP];
  /* The index array holds IDX_CAP entries: a larger k is passed only with
   * lengths that make the call invalid before the indices are read. */
  int kn = k >= 0 && k <= IDX_CAP ? (int)k : 0;
  for (int i = 0; i < kn; i++) {
    uint8_t b = u8(r);
    idx[i] = b == 0xFF   ? (uint64_t)1 << 32
             : b == 0xFE ? UINT64_MAX
             : b == 0xFD ? UINT32_MAX
             : b == 0xFC ? (uint64_t)rows
                         : (uint64_t)(b % (rows > 0 && rows < 300 ? rows + 1 : 9));
  }
  if (!scatter && (kc > BUDGET || (kc == 0 && k > IDX_CAP))) return;
  if (k > IDX_CAP) {
    if (scatter) kc = -1;  /* values of the wrong length */
    else rc = -1;          /* a matrix of the wrong length */
  }
  const uint64_t *ip = u8(r) == 0x77 ? NULL : idx;
  bk_buffer *mat = input(r, pl, rc);
  outs o;
  bk_status st;
  int idx_ok = 1;
  for (int i = 0; i < kn; i++) idx_ok &= idx[i] <= UINT32_MAX;
  if (!scatter) {
    outs_init(r, &o, 1, pl);
    st = bk_rows_gather(pl->ctx, mat, rows, cols, ip, k, o.p[0]);
  } else {
    bk_buffer *v = input(r, pl, kc);
    outs_init(r, &o, 1, pl);
    st = bk_rows_scatter_add(pl->ctx, mat, v, rows, cols, ip, k, o.p[0]);
  }
  bk__inject_arm(0);
  finish1(&o, st, pl, !idx_ok || k > IDX_CAP ? -1 : scatter ? rc : kc, fn);
}

/* ---- buffers, contexts, DLPack ----------------------------------------------------------- */

static bk_dtype dtype_arg(reader *r) {
  static const int dts[] = {BK_F32, BK_F64, BK_BF16, BK_F16, -1, 4, INT_MAX, INT_MIN};
  uint8_t b = u8(r);
  return (bk_dtype)(b < 200 ? b & 1 : dts[b % COUNT(dts)]);
}

/* A length for a buffer that may be made: within the budget, or so large
 * that its byte size overflows or cannot be allocated. */
static int64_t length_arg(reader *r) {
  int64_t n = u8(r) & 1 ? dim_arg(r) : i64_arg(r, 0, 40);
  if (n > BUDGET && n < ((int64_t)1 << 40)) n %= BUDGET;
  return n;
}

static void check_zero_len_data(const bk_buffer *b) {
  if (bk_buffer_length(b) == 0) REQUIRE(bk_buffer_data(b) == NULL, "bk_buffer_data");
}

static void op_buffers(reader *r, pool *pl) {
  int steps = 1 + u8(r) % 6;
  for (int s = 0; s < steps; s++) {
    uint8_t which = u8(r) % 8;
    int64_t start = bk__live_buffers();
    int held = pl->n;
    switch (which) {
      case 0: { /* zeros */
        bk_dtype dt = dtype_arg(r);
        int64_t n = length_arg(r);
        bk_buffer *b = SENTINEL;
        int null_out = u8(r) == 0x55;
        maybe_inject(r);
        bk_status st = bk_buffer_zeros(pl->ctx, dt, n, null_out ? NULL : &b);
        bk__inject_arm(0);
        check_failure(st, "bk_buffer_zeros");
        if (null_out) {
          REQUIRE(st == BK_ERR_NULL, "bk_buffer_zeros");
          break;
        }
        if (st != BK_OK) {
          REQUIRE(b == NULL, "bk_buffer_zeros");
          REQUIRE(dt != BK_F32 && dt != BK_F64 ? st == BK_ERR_DTYPE || st == BK_ERR_INVALID_ARGUMENT
                                               : n < 0 || n > BUDGET || st == BK_ERR_OUT_OF_MEMORY,
                  "bk_buffer_zeros");
          break;
        }
        REQUIRE((dt == BK_F32 || dt == BK_F64) && n >= 0 && n <= BUDGET, "bk_buffer_zeros");
        REQUIRE(bk_buffer_length(b) == n && bk_buffer_dtype(b) == dt, "bk_buffer_zeros");
        check_zero_len_data(b);
        size_t es = dt == BK_F32 ? 4 : 8;
        unsigned char *host = malloc((size_t)n * es + 1);
        if (!host) abort();
        REQUIRE(bk_buffer_to_host(NULL, b, host, n) == BK_OK, "bk_buffer_to_host");
        for (size_t i = 0; i < (size_t)n * es; i++) REQUIRE(host[i] == 0, "bk_buffer_zeros");
        free(host);
        bk_buffer_release(b);
        break;
      }
      case 1: { /* from_host, with NULL data or a foreign dtype at times */
        bk_dtype dt = dtype_arg(r);
        int64_t n = length_arg(r);
        double data[64];
        fill(r, BK_F64, data, 64);
        int fits = n >= 0 && n <= (dt == BK_F32 ? 2 : 1) * COUNT(data);
        const void *src = u8(r) == 0x66 || !fits ? NULL : data;
        if (src == NULL && n > 0 && n <= BUDGET) n = -n; /* keep a NULL source invalid */
        bk_buffer *b = SENTINEL;
        maybe_inject(r);
        bk_status st = bk_buffer_from_host(pl->ctx, dt, src, n, &b);
        bk__inject_arm(0);
        check_failure(st, "bk_buffer_from_host");
        if (st != BK_OK) {
          REQUIRE(b == NULL, "bk_buffer_from_host");
          break;
        }
        REQUIRE(bk_buffer_length(b) == n && bk_buffer_dtype(b) == dt, "bk_buffer_from_host");
        check_zero_len_data(b);
        if (n > 0) REQUIRE(memcmp(bk_buffer_data(b), data, (size_t)n * (dt == BK_F32 ? 4 : 8)) == 0,
                           "bk_buffer_from_host");
        bk_buffer_release(b);
        break;
      }
      case 2: { /* to_host with wrong lengths, NULL buffers and NULL data */
        bk_buffer *b = input(r, pl, dim_arg(r) % 100);
        int64_t len = bk_buffer_length(b), asked = u8(r) & 1 ? len : len - 1 + u8(r) % 4;
        void *dst = malloc((size_t)(len > 0 ? len : 1) * 8);
        if (!dst) abort();
        int null_dst = u8(r) == 0x44;
        bk_status st = bk_buffer_to_host(pl->ctx, b, null_dst ? NULL : dst, asked);
        check_failure(st, "bk_buffer_to_host");
        if (st == BK_OK) REQUIRE(b && asked == len && (len == 0 || !null_dst), "bk_buffer_to_host");
        if (!b) REQUIRE(st == BK_ERR_NULL, "bk_buffer_to_host");
        free(dst);
        break;
      }
      case 3: { /* copy, into the address of the source's handle at times */
        bk_buffer *src = input(r, pl, dim_arg(r) % 300);
        outs o;
        outs_init(r, &o, 1, pl);
        bk_status st = bk_buffer_copy(pl->ctx, src, o.p[0]);
        bk__inject_arm(0);
        bk_buffer *got = o.p[0] ? *o.p[0] : NULL;
        if (st == BK_OK && got) {
          REQUIRE(bk_buffer_length(got) == bk_buffer_length(src) &&
                      bk_buffer_dtype(got) == bk_buffer_dtype(src) &&
                      (bk_buffer_length(src) == 0 ||
                       memcmp(bk_buffer_data(got), bk_buffer_data(src),
                              (size_t)bk_buffer_length(src) * (bk_buffer_dtype(src) == BK_F32 ? 4 : 8)) == 0),
                  "bk_buffer_copy");
          check_zero_len_data(got);
        }
        if (!src) REQUIRE(st == BK_ERR_NULL, "bk_buffer_copy");
        finish1(&o, st, pl, src ? bk_buffer_length(src) : -1, "bk_buffer_copy");
        break;
      }
      case 4: { /* retain and release */
        bk_buffer *b = input(r, pl, dim_arg(r) % 50);
        int k = u8(r) % 5;
        for (int i = 0; i < k; i++) REQUIRE(bk_buffer_retain(b) == b, "bk_buffer_retain");
        for (int i = 0; i < k; i++) bk_buffer_release(b);
        REQUIRE(bk_buffer_retain(NULL) == NULL, "bk_buffer_retain");
        bk_buffer_release(NULL);
        break;
      }
      case 5: { /* accessors of NULL and library information */
        REQUIRE(bk_buffer_dtype(NULL) == BK_F32 && bk_buffer_length(NULL) == 0 &&
                    bk_buffer_device(NULL).kind == BK_DEVICE_CPU &&
                    bk_buffer_device(NULL).index == 0 && bk_buffer_data(NULL) == NULL,
                "bk_buffer accessors");
        bk_status any = (bk_status)(int)(uint32_t)u64(r, 4);
        const char *text = bk_status_string(any);
        REQUIRE(text != NULL, "bk_status_string");
        if (!status_known(any)) REQUIRE(strcmp(text, "unknown status") == 0, "bk_status_string");
        REQUIRE(bk_version() && bk_build_info() && bk_last_error(), "bk_version");
        REQUIRE(bk_cuda_device_count() >= 0, "bk_cuda_device_count");
        break;
      }
      case 6: { /* a buffer made on a context outlives it */
        bk_context *c = NULL;
        REQUIRE(bk_context_create((bk_device){BK_DEVICE_CPU, 0}, &c) == BK_OK, "bk_context_create");
        bk_buffer *b = NULL;
        int64_t n = u8(r) % 100;
        REQUIRE(bk_buffer_zeros(c, u8(r) & 1 ? BK_F64 : BK_F32, n, &b) == BK_OK, "bk_buffer_zeros");
        bk_buffer *cp = NULL;
        REQUIRE(bk_buffer_copy(c, b, &cp) == BK_OK, "bk_buffer_copy");
        bk_context_destroy(c);
        double host[100];
        REQUIRE(bk_buffer_to_host(NULL, cp, host, n) == BK_OK, "bk_buffer_to_host");
        for (int64_t i = 0; i < n && bk_buffer_dtype(b) == BK_F64; i++)
          REQUIRE(host[i] == 0.0, "bk_buffer_copy");
        bk_buffer_release(b);
        bk_buffer_release(cp);
        break;
      }
      default: { /* DLPack export of a buffer and import of the tensor */
        bk_buffer *b = input(r, pl, dim_arg(r) % 300);
        DLManagedTensor *t = (DLManagedTensor *)SENTINEL;
        int null_out = u8(r) == 0x33;
        maybe_inject(r);
        bk_status st = bk_buffer_to_dlpack(b, null_out ? NULL : &t);
        bk__inject_arm(0);
        check_failure(st, "bk_buffer_to_dlpack");
        if (!b || null_out) REQUIRE(st == BK_ERR_NULL, "bk_buffer_to_dlpack");
        if (st != BK_OK) {
          if (!null_out) REQUIRE(t == NULL, "bk_buffer_to_dlpack");
          break;
        }
        const DLTensor *dt = &t->dl_tensor;
        size_t es = bk_buffer_dtype(b) == BK_F32 ? 4 : 8;
        REQUIRE(dt->ndim == 1 && dt->shape[0] == bk_buffer_length(b) && dt->strides == NULL &&
                    dt->data == bk_buffer_data(b) && dt->byte_offset == 0 &&
                    dt->dtype.code == kDLFloat && dt->dtype.bits == 8 * es &&
                    dt->dtype.lanes == 1 && dt->device.device_type == kDLCPU && t->deleter,
                "bk_buffer_to_dlpack");
        /* The tensor holds a reference: the buffer survives its release. */
        REQUIRE(bk__live_buffers() == start + (pl->n - held), "bk_buffer_to_dlpack");
        if (u8(r) & 1) {
          t->deleter(t);
          break;
        }
        bk_buffer *back = SENTINEL;
        maybe_inject(r);
        st = bk_buffer_from_dlpack(pl->ctx, t, &back);
        bk__inject_arm(0);
        check_failure(st, "bk_buffer_from_dlpack");
        if (st != BK_OK) {
          REQUIRE(back == NULL && st == BK_ERR_OUT_OF_MEMORY, "bk_buffer_from_dlpack");
          t->deleter(t);
          break;
        }
        REQUIRE(bk_buffer_length(back) == bk_buffer_length(b) &&
                    bk_buffer_dtype(back) == bk_buffer_dtype(b) &&
                    bk_buffer_data(back) == bk_buffer_data(b),
                "bk_buffer_from_dlpack");
        bk_buffer_release(back);
        break;
      }
    }
    /* Only the inputs the step made (still held by the pool) remain. */
    REQUIRE(bk__live_buffers() == start + (pl->n - held), "buffer step leaked");
  }
}

static void op_contexts(reader *r, pool *pl) {
  (void)pl;
  static const int kinds[] = {0, BK_DEVICE_CPU, BK_DEVICE_CUDA, 3, -1, INT_MAX, INT_MIN};
  uint8_t kb = u8(r);
  bk_device dev = {(bk_device_kind)(kb < 160 ? BK_DEVICE_CPU : kinds[kb % COUNT(kinds)]),
                   (int32_t)int_arg(r, 0, 1)};
  bk_context *c = (bk_context *)SENTINEL;
  int null_out = u8(r) == 0x22;
  maybe_inject(r);
  bk_status st = bk_context_create(dev, null_out ? NULL : &c);
  bk__inject_arm(0);
  check_failure(st, "bk_context_create");
  bk_status expect = null_out ? BK_ERR_NULL
                     : dev.kind != BK_DEVICE_CPU && dev.kind != BK_DEVICE_CUDA ? BK_ERR_INVALID_ARGUMENT
                     : dev.index < 0 ? BK_ERR_INVALID_ARGUMENT
                     : dev.kind == BK_DEVICE_CPU && dev.index != 0 ? BK_ERR_INVALID_ARGUMENT
                     : dev.kind == BK_DEVICE_CUDA ? BK_ERR_UNSUPPORTED
                                                  : BK_OK;
  REQUIRE(st == expect || (expect == BK_OK && st == BK_ERR_OUT_OF_MEMORY), "bk_context_create");
  if (null_out) return;
  if (st != BK_OK) {
    REQUIRE(c == NULL, "bk_context_create");
    return;
  }
  bk_device got = bk_context_device(c);
  REQUIRE(got.kind == dev.kind && got.index == dev.index, "bk_context_device");
  REQUIRE(bk_context_synchronize(c) == BK_OK && bk_context_synchronize(NULL) == BK_OK,
          "bk_context_synchronize");
  st = bk_context_set_stream(c, (void *)(uintptr_t)u8(r));
  REQUIRE(st == BK_ERR_UNSUPPORTED, "bk_context_set_stream");
  check_message(st, "bk_context_set_stream");
  st = bk_context_set_stream(NULL, NULL);
  REQUIRE(st == BK_ERR_NULL, "bk_context_set_stream");
  check_message(st, "bk_context_set_stream");
  REQUIRE(bk_context_device(NULL).kind == BK_DEVICE_CPU, "bk_context_device");
  bk_context_destroy(c);
  bk_context_destroy(NULL);
}

/* Imports a tensor the bytes describe (odd shapes, strides, dtypes, devices
 * and offsets) and checks the status against the header's rules. */
static void op_dlpack_import(reader *r, pool *pl) {
  static const char fn[] = "bk_buffer_from_dlpack";
  static const uint8_t codes[] = {kDLFloat, kDLInt, kDLUInt, kDLBfloat, kDLComplex, 255};
  static const uint8_t bits[] = {32, 64, 16, 8, 0, 255};
  static const uint16_t lanes[] = {1, 2, 0, 65535};
  static const int devices[] = {kDLCPU, kDLCUDA, kDLCUDAHost, kDLROCM, 0, -1, INT_MAX};
  owned_tensor *ot = calloc(1, sizeof *ot);
  if (!ot) abort();
  DLTensor *t = &ot->m.dl_tensor;
  uint8_t b = u8(r);
  t->dtype.code = b < 200 ? kDLFloat : codes[b % COUNT(codes)];
  b = u8(r);
  t->dtype.bits = b < 200 ? (b & 1 ? 64 : 32) : bits[b % COUNT(bits)];
  b = u8(r);
  t->dtype.lanes = b < 220 ? 1 : lanes[b % COUNT(lanes)];
  b = u8(r);
  t->device.device_type = (DLDeviceType)(b < 200 ? kDLCPU : devices[b % COUNT(devices)]);
  t->device.device_id = (int32_t)int_arg(r, 0, 1);
  t->ndim = int_arg(r, 0, 4);
  int nd = fill_dims(r, ot->shape, t->ndim, 1);
  int64_t len = prod(ot->shape, nd);
  /* Compact strides, with one entry changed at times (allowed only where the
   * extent is not above 1), or none. */
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; i--) {
    ot->strides[i] = s;
    s = ot->shape[i] > 0 ? mul(s, ot->shape[i]) : s;
  }
  uint8_t sm = u8(r);
  int bad_stride = 0;
  if (sm >= 128 && nd > 0) {
    int i = sm % nd;
    int64_t v = i64_arg(r, -1, 2);
    if (v != ot->strides[i] && ot->shape[i] > 1) bad_stride = 1;
    ot->strides[i] = v;
  }
  t->strides = sm & 1 ? NULL : ot->strides;
  /* An empty tensor has no layout to check. */
  if (t->strides == NULL || len == 0) bad_stride = 0;
  t->shape = u8(r) == 0x11 ? NULL : ot->shape;
  int f32 = t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1;
  int f64 = t->dtype.code == kDLFloat && t->dtype.bits == 64 && t->dtype.lanes == 1;
  size_t es = f64 ? 8 : 4;
  /* A valid import of more elements than the harness holds would read past
   * its memory: only lengths within the budget, or invalid ones, are made. */
  if (len > BUDGET) {
    free(ot);
    return;
  }
  size_t off = (size_t)(u8(r) % 3) * es, bytes = (size_t)(len > 0 ? len : 0) * es;
  ot->mem = malloc(off + bytes + 1);
  if (!ot->mem) abort();
  fill(r, f64 ? BK_F64 : BK_F32, (char *)ot->mem + off, len > 0 ? len : 0);
  t->data = u8(r) == 0x12 ? NULL : ot->mem;
  t->byte_offset = off;
  ot->m.manager_ctx = ot;
  ot->m.deleter = u8(r) == 0x13 ? NULL : owned_delete;
  bk_buffer *out = SENTINEL;
  int null_out = u8(r) == 0x14, null_tensor = u8(r) == 0x15;
  maybe_inject(r);
  bk_status st = bk_buffer_from_dlpack(pl->ctx, null_tensor ? NULL : &ot->m, null_out ? NULL : &out);
  bk__inject_arm(0);
  check_failure(st, fn);
  int cpu = t->device.device_type == kDLCPU;
  int rank_ok = t->ndim >= 0 && t->ndim <= BK_MAX_RANK;
  int ok = !null_out && !null_tensor && (f32 || f64) && cpu && rank_ok &&
           (t->ndim == 0 || t->shape) && len >= 0 && !bad_stride && (len == 0 || t->data);
  if (null_out || null_tensor) REQUIRE(st == BK_ERR_NULL, fn);
  if (!(f32 || f64) && !null_out && !null_tensor) REQUIRE(st == BK_ERR_DTYPE, fn);
  if (st == BK_OK) {
    REQUIRE(ok, fn);
    REQUIRE(bk_buffer_length(out) == len && bk_buffer_dtype(out) == (f64 ? BK_F64 : BK_F32), fn);
    REQUIRE(ot->deleted == (len == 0 && ot->m.deleter), fn);
    if (len > 0) {
      REQUIRE(bk_buffer_data(out) == (char *)ot->mem + off, fn);
      void *host = malloc(bytes);
      if (!host) abort();
      REQUIRE(bk_buffer_to_host(NULL, out, host, len) == BK_OK, fn);
      REQUIRE(memcmp(host, (char *)ot->mem + off, bytes) == 0, fn);
      free(host);
    }
    bk_buffer_release(out);
    REQUIRE(ot->deleted == (ot->m.deleter != NULL), fn);
  } else {
    REQUIRE(!ok || st == BK_ERR_OUT_OF_MEMORY, fn);
    if (!null_out) REQUIRE(out == NULL, fn);
    REQUIRE(ot->deleted == 0, fn);
  }
  free(ot->mem);
  free(ot);
}

/* ---- the entry point ---------------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size};
  const int64_t live0 = bk__live_buffers();
  uint8_t head = u8(&r);
  pool pl = {.dt = (head & 1) ? BK_F64 : BK_F32};
  /* One execution in eight runs on a context of its own, destroyed after
   * the call and before its results are checked and released. */
  bk_context *made = NULL;
  if ((head & 0x0E) == 0x0E) {
    REQUIRE(bk_context_create((bk_device){BK_DEVICE_CPU, 0}, &made) == BK_OK, "bk_context_create");
    pl.ctx = made;
  }
  int op = u8(&r) % 36;
  switch (op) {
    case 0: case 1: case 2: op_rank_poly(&r, &pl, op); break;
    case 3: op_conv(&r, &pl); break;
    case 4: case 5: op_broadcast(&r, &pl, op - 4); break;
    case 6: case 7: case 8: op_vec(&r, &pl, op - 6); break;
    case 9: case 10: op_bmm(&r, &pl, op - 9); break;
    case 11: case 12: case 13: op_fft(&r, &pl, op - 11); break;
    case 14: case 15: op_gather(&r, &pl, op - 14); break;
    case 29: op_buffers(&r, &pl); break;
    case 30: op_contexts(&r, &pl); break;
    case 31: case 32: op_dlpack_import(&r, &pl); break;
    case 33: op_conv(&r, &pl); break;
    default: op_rows(&r, &pl, op == 34 ? 5 : op == 35 ? 12 : op - 16); break;
  }
  if (made) bk_context_destroy(made);
  pool_finish(&pl);
  REQUIRE(bk__live_buffers() == live0, "a buffer leaked");
  return 0;
}
