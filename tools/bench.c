/*
 * bench.c — `bufkern bench`: times the primitives on one device through the
 * public API, at fixed shapes (`--sweep`: at shapes drawn from a seed, in
 * bench_sweep.c).
 *
 * Every case is warmed up, then timed over several repeats and reported by
 * its median. On a GPU the bench installs its own stream on the context and
 * times each repeat with a pair of CUDA events on it; on the CPU it reads
 * the monotonic clock. Inputs that fit in the L2 cache are replicated into
 * several sets used in turn, so a repeat never finds its inputs cached by
 * the previous one. Each case reports milliseconds, the rate (GB/s over the
 * fewest bytes the primitive must move: inputs read once, outputs written
 * once; TFLOP/s for the contractions), that rate as a percentage of the
 * device-to-device copy bandwidth measured in the same run (a 1 GiB
 * bk_buffer_copy, counting bytes read plus bytes written; on the CPU 256 MiB,
 * after warm-up calls: the CPU backend splits the copy over its OpenMP
 * threads and takes the result's memory from the context's pool of large
 * blocks, so the copy runs on warm memory with the threads the kernels
 * use, as every kernel's output does). ATen times come
 * only from the same run, in bench/vs_torch.py. A case whose primitive
 * returns a status prints that status and the run goes on.
 *
 *   bufkern bench [--device cpu|cuda:N] [--filter SUBSTR] [--quick] [--f64]
 *                 [--json FILE]
 *   bufkern bench --sweep [options]       (bufkern bench --sweep --help)
 *
 * bk_tool_bench(argc, argv) takes the arguments after `bench` and returns 0
 * when every case ran, 1 when some case or the setup failed, 2 for a usage
 * error.
 */
#define _GNU_SOURCE /* sysconf(_SC_LEVEL3_CACHE_SIZE) */

#include "bufkern.h"
#include "bench_latency.h"

#ifdef BK_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int bk_tool_bench(int argc, char **argv);
int bk_tool_bench_sweep(int argc, char **argv);
/* Writes s to f as a JSON string literal, quotes and escapes included. */
void bk_tool_json_string(FILE *f, const char *s);

#if defined(__GNUC__) || defined(__clang__)
#define BENCH_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define BENCH_PRINTF(a, b)
#endif

/* ---- state ---------------------------------------------------------------------- */

#define MAX_REPEATS 32
#define MAX_INPUTS 6
#define MAX_SETS 32

typedef struct bench {
  bk_context *ctx;
  bk_device dev;
  int cuda;
  int small;          /* CPU: shapes scaled down so the run stays short */
  int quick, f64;
  int warmup, repeats;
  const char *filter;
  FILE *json;
  double copy_gbs;    /* device copy bandwidth of this run, 0 until measured */
  double l2_bytes;
  int failures;
#ifdef BK_HAVE_CUDA
  cudaStream_t stream;
  cudaEvent_t ev[2 * MAX_REPEATS];
#endif
} bench;

/* Value kinds of the inputs the bench makes. K_UNIFORM is zero: the kind of
 * every input a case leaves out of .kind. */
enum { K_UNIFORM = 0, K_MASK, K_POSITIVE, K_DECAY };

struct bcase;
typedef bk_status (*call_fn)(bench *b, const struct bcase *c, bk_buffer *const *in);

/* One case: its name, the call and its geometry, the inputs to make and the
 * work it stands for. */
typedef struct bcase {
  char name[112];
  call_fn call;
  bk_dtype dt;
  double bytes;   /* fewest bytes moved; 0 for a contraction */
  double flops;   /* for contractions (TFLOP/s), else 0 */
  int nin;
  int64_t len[MAX_INPUTS];
  int kind[MAX_INPUTS];
  /* Geometry; each call reads the fields it needs. */
  int64_t rows, cols, k, batch, m, n, p;
  int64_t dims[4], dims2[4], map[4];
  int rank, rank2, axis, ta, tb;
  double scale;
  uint64_t *idx;  /* host indices, owned by the case */
  int64_t conv_in[5], conv_k[5], stride[3], pad_b[3], pad_a[3], dil[3];
  int conv_rank, conv_sr;
  int64_t groups;
} bcase;

static double es(bk_dtype dt) { return dt == BK_F64 ? 8.0 : 4.0; }
static const char *dtn(bk_dtype dt) { return dt == BK_F64 ? "f64" : "f32"; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- calls: one public primitive each, outputs released at once ---------------- */

/* A call of a primitive with one output y, released at once. */
#define BENCH_CALL1(name, call)                                            \
  static bk_status name(bench *b, const bcase *c, bk_buffer *const *in) { \
    bk_buffer *y = NULL;                                                   \
    bk_status st = (call);                                                 \
    (void)c;                                                               \
    (void)in;                                                              \
    bk_buffer_release(y);                                                  \
    return st;                                                             \
  }

BENCH_CALL1(call_softmax, bk_softmax(b->ctx, in[0], c->dims, c->rank, c->axis, &y))
BENCH_CALL1(call_masked_softmax,
            bk_rows_masked_softmax(b->ctx, in[0], in[1], c->rows, c->cols, &y))
BENCH_CALL1(call_rows_sum, bk_rows_sum(b->ctx, in[0], c->rows, c->cols, &y))
BENCH_CALL1(call_rows_max, bk_rows_max(b->ctx, in[0], c->rows, c->cols, &y))
BENCH_CALL1(call_first_max, bk_rows_first_max_mask(b->ctx, in[0], c->rows, c->cols, &y))
BENCH_CALL1(call_topk, bk_rows_topk_mask(b->ctx, in[0], c->rows, c->cols, c->k, &y))
BENCH_CALL1(call_bmm, bk_bmm(b->ctx, in[0], in[1], c->batch, c->m, c->n, c->p, c->ta, c->tb, &y))
BENCH_CALL1(call_rfft, bk_rfft(b->ctx, in[0], c->batch, c->n, &y))
BENCH_CALL1(call_irfft, bk_irfft(b->ctx, in[0], c->batch, c->n, &y))
BENCH_CALL1(call_scan, bk_scan_diag(b->ctx, in[0], in[1], in[2], in[3], c->rows, c->cols, &y))
BENCH_CALL1(call_scan_var,
            bk_scan_diag_var(b->ctx, in[0], in[1], in[2], in[3], c->rows, c->cols, &y))
BENCH_CALL1(call_broadcast_to,
            bk_broadcast_to(b->ctx, in[0], c->dims, c->rank, c->dims2, c->rank2, c->map, &y))
BENCH_CALL1(call_broadcast_adj, bk_broadcast_to_adjoint(b->ctx, in[0], c->dims, c->rank, c->dims2,
                                                        c->rank2, c->map, &y))
BENCH_CALL1(call_broadcast_col, bk_broadcast_col(b->ctx, in[0], c->rows, c->cols, &y))
BENCH_CALL1(call_swap, bk_swap_adjacent(b->ctx, in[0], c->dims, c->rank, c->axis, &y))
BENCH_CALL1(call_sum_axis, bk_sum_axis(b->ctx, in[0], c->dims, c->rank, c->axis, &y))
BENCH_CALL1(call_gather, bk_rows_gather(b->ctx, in[0], c->rows, c->cols, c->idx, c->k, &y))
BENCH_CALL1(call_scatter,
            bk_rows_scatter_add(b->ctx, in[0], in[1], c->rows, c->cols, c->idx, c->k, &y))
BENCH_CALL1(call_concat, bk_vec_concat(b->ctx, in[0], in[1], c->n, c->m, &y))
BENCH_CALL1(call_slice, bk_vec_slice(b->ctx, in[0], c->n, c->m, c->p, &y))
BENCH_CALL1(call_conv, bk_conv(b->ctx, in[0], in[1], NULL, c->conv_in, c->conv_rank, c->conv_k,
                               c->conv_sr, c->stride, c->pad_b, c->pad_a, c->dil, c->groups, &y))
BENCH_CALL1(call_xent_wm, bk_xent_weighted_mean(b->ctx, in[0], in[1], c->rows, c->cols, &y))
BENCH_CALL1(call_xent_teacher,
            bk_xent_teacher(b->ctx, in[0], in[1], c->rows, c->cols, c->axis, &y))

static bk_status call_ln_fwd(bench *b, const bcase *c, bk_buffer *const *in) {
  bk_buffer *y = NULL, *nrm = NULL, *inv = NULL;
  bk_status st =
      bk_layernorm_forward(b->ctx, in[0], in[1], in[2], c->rows, c->cols, 1e-5, &y, &nrm, &inv);
  bk_buffer_release(y);
  bk_buffer_release(nrm);
  bk_buffer_release(inv);
  return st;
}

static bk_status call_ln_bwd(bench *b, const bcase *c, bk_buffer *const *in) {
  bk_buffer *dx = NULL, *dg = NULL, *db = NULL;
  bk_status st =
      bk_layernorm_backward(b->ctx, in[0], in[1], in[2], in[3], c->rows, c->cols, &dx, &dg, &db);
  bk_buffer_release(dx);
  bk_buffer_release(dg);
  bk_buffer_release(db);
  return st;
}

static bk_status call_bmm_scaled(bench *b, const bcase *c, bk_buffer *const *in) {
  bk_buffer *y = NULL;
  int flag = 0;
  bk_status st = bk_bmm_scaled(b->ctx, in[0], in[1], c->batch, c->m, c->n, c->p, c->ta, c->tb,
                               c->scale, &y, &flag);
  bk_buffer_release(y);
  return st;
}

/* The backward scans read the forward result from an input set: in[4]. */
static bk_status call_scan_bwd(bench *b, const bcase *c, bk_buffer *const *in) {
  bk_buffer *dA = NULL, *dB = NULL, *dX = NULL, *dh0 = NULL;
  bk_status st = bk_scan_diag_backward(b->ctx, in[0], in[1], in[2], in[3], in[4], in[5], c->rows,
                                       c->cols, &dA, &dB, &dX, &dh0);
  bk_buffer_release(dA);
  bk_buffer_release(dB);
  bk_buffer_release(dX);
  bk_buffer_release(dh0);
  return st;
}

static bk_status call_scan_var_bwd(bench *b, const bcase *c, bk_buffer *const *in) {
  bk_buffer *dA = NULL, *dB = NULL, *dX = NULL, *dh0 = NULL;
  bk_status st = bk_scan_diag_var_backward(b->ctx, in[0], in[1], in[2], in[3], in[4], in[5],
                                           c->rows, c->cols, &dA, &dB, &dX, &dh0);
  bk_buffer_release(dA);
  bk_buffer_release(dB);
  bk_buffer_release(dX);
  bk_buffer_release(dh0);
  return st;
}

/* ---- inputs ------------------------------------------------------------------------ */

/* A host array of n values of one kind, made from a small generated pool
 * whose period (a prime) is no multiple of any row width, so rows differ. */
#define POOL 1048573

static void *host_values(bk_dtype dt, int64_t n, int kind) {
  static float pool[4][POOL];
  static int ready[4];
  if (!ready[kind]) {
    uint64_t s = 0x9E3779B97F4A7C15ull + (uint64_t)kind;
    for (int64_t i = 0; i < POOL; i++) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      double u = (double)(s >> 11) * (1.0 / 9007199254740992.0);
      float v = 0;
      switch (kind) {
        case K_UNIFORM: v = (float)(6.0 * u - 3.0); break;
        case K_MASK: v = u < 0.7 ? 1.0f : 0.0f; break;
        case K_POSITIVE: v = (float)(0.5 + u); break;
        default: v = (float)(0.5 + 0.49 * u); break;
      }
      pool[kind][i] = v;
    }
    ready[kind] = 1;
  }
  size_t bytes = (size_t)n * (size_t)es(dt);
  void *h = malloc(bytes ? bytes : 1);
  if (!h) return NULL;
  if (dt == BK_F32) {
    float *f = (float *)h;
    for (int64_t i = 0; i < n; i += POOL) {
      int64_t len = n - i < POOL ? n - i : POOL;
      memcpy(f + i, pool[kind], (size_t)len * sizeof *f);
    }
  } else {
    double *d = (double *)h;
    for (int64_t i = 0; i < n; i++) d[i] = pool[kind][i % POOL];
  }
  return h;
}

static bk_status make_input(bench *b, bk_dtype dt, int64_t n, int kind, bk_buffer **out) {
  *out = NULL;
  void *h = host_values(dt, n, kind);
  if (!h) {
    fprintf(stderr, "bench: cannot allocate %" PRId64 " host values\n", n);
    return BK_ERR_OUT_OF_MEMORY;
  }
  bk_status st = bk_buffer_from_host(b->ctx, dt, h, n, out);
  free(h);
  return st;
}

/* ---- timing ------------------------------------------------------------------------ */

static bk_status bench_sync(bench *b) { return bk_context_synchronize(b->ctx); }

/* Times `repeats` calls of one case (input set i % nsets for call i) and
 * stores the median milliseconds. */
static bk_status time_calls(bench *b, const bcase *c, bk_buffer *sets[][MAX_INPUTS], int nsets,
                            double *ms) {
  double t[MAX_REPEATS];
  bk_status st = BK_OK;
  int reps = b->repeats;
#ifdef BK_HAVE_CUDA
  if (b->cuda) {
    for (int i = 0; i < reps && st == BK_OK; i++) {
      cudaEventRecord(b->ev[2 * i], b->stream);
      st = c->call(b, c, sets[i % nsets]);
      cudaEventRecord(b->ev[2 * i + 1], b->stream);
    }
    bk_status s2 = bench_sync(b);
    if (st != BK_OK) return st;
    if (s2 != BK_OK) return s2;
    for (int i = 0; i < reps; i++) {
      float e = 0;
      cudaEventElapsedTime(&e, b->ev[2 * i], b->ev[2 * i + 1]);
      t[i] = e;
    }
    *ms = median(t, reps);
    return BK_OK;
  }
#endif
  for (int i = 0; i < reps && st == BK_OK; i++) {
    double t0 = now_s();
    st = c->call(b, c, sets[i % nsets]);
    t[i] = 1e3 * (now_s() - t0);
  }
  if (st != BK_OK) return st;
  *ms = median(t, reps);
  return BK_OK;
}

/* ---- reporting ---------------------------------------------------------------------- */

void bk_tool_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", (unsigned)(unsigned char)*s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

static void report_status(bench *b, const char *name, bk_status st) {
  printf("| %s | %s (%d): %s | | |\n", name, bk_status_string(st), (int)st, bk_last_error());
  fflush(stdout);
  if (b->json) {
    fprintf(b->json, "{\"case\": ");
    bk_tool_json_string(b->json, name);
    fprintf(b->json, ", \"status\": %d, \"error\": ", (int)st);
    bk_tool_json_string(b->json, bk_last_error());
    fprintf(b->json, "}\n");
    fflush(b->json);
  }
  b->failures++;
}

/* One table row. latency: a per-call latency case, shown in microseconds per call. */
static void report(bench *b, const char *name, double ms, double bytes, double flops,
                   int latency) {
  char rate[48] = "", pct[24] = "", time[32];
  double gbs = 0, tflops = 0, frac = 0;
  if (latency) {
    snprintf(time, sizeof time, "%.2f us/call", 1e3 * ms);
  } else {
    snprintf(time, sizeof time, "%.3f", ms);
  }
  if (flops > 0) {
    tflops = flops / (ms * 1e9);
    snprintf(rate, sizeof rate, "%.1f TFLOP/s", tflops);
  } else if (bytes > 0) {
    gbs = bytes / (ms * 1e6);
    snprintf(rate, sizeof rate, gbs < 10 ? "%.2f GB/s" : "%.0f GB/s", gbs);
    if (b->copy_gbs > 0) {
      frac = 100.0 * gbs / b->copy_gbs;
      snprintf(pct, sizeof pct, "%.0f%%", frac);
    }
  }
  printf("| %s | %s | %s | %s |\n", name, time, rate, pct);
  fflush(stdout);
  if (b->json) {
    fprintf(b->json, "{\"case\": ");
    bk_tool_json_string(b->json, name);
    fprintf(b->json, ", \"status\": 0, \"ms\": %.6g", ms);
    if (latency) fprintf(b->json, ", \"us_per_call\": %.6g", 1e3 * ms);
    if (gbs > 0) fprintf(b->json, ", \"gbs\": %.6g, \"bytes\": %.0f", gbs, bytes);
    if (frac > 0) fprintf(b->json, ", \"pct_copy\": %.4g", frac);
    if (tflops > 0) fprintf(b->json, ", \"tflops\": %.6g, \"flops\": %.0f", tflops, flops);
    fprintf(b->json, ", \"copy_gbs\": %.6g}\n", b->copy_gbs);
    fflush(b->json);
  }
}

static int selected(const bench *b, const char *name) {
  return !b->filter || strstr(name, b->filter) != NULL;
}

/* ---- running a case ----------------------------------------------------------------- */

static void free_case(bcase *c) {
  free(c->idx);
  c->idx = NULL;
}

static void run_case(bench *b, bcase *c) {
  if (!selected(b, c->name)) {
    free_case(c);
    return;
  }
  double in_bytes = 0;
  for (int i = 0; i < c->nin; i++) in_bytes += (double)c->len[i] * es(c->dt);
  /* Inputs that fit in the L2 are replicated so consecutive repeats read
   * different memory. */
  int nsets = 1;
  if (in_bytes > 0 && in_bytes <= b->l2_bytes) {
    nsets = (int)ceil(3.0 * b->l2_bytes / in_bytes);
    if (nsets < 2) nsets = 2;
    if (nsets > MAX_SETS) nsets = MAX_SETS;
  }
  bk_buffer *sets[MAX_SETS][MAX_INPUTS];
  memset(sets, 0, sizeof sets);
  bk_status st = BK_OK;
  for (int s = 0; s < nsets && st == BK_OK; s++)
    for (int i = 0; i < c->nin && st == BK_OK; i++)
      st = make_input(b, c->dt, c->len[i], c->kind[i], &sets[s][i]);
  /* The backward scans need the forward result as an input: made once. */
  if (st == BK_OK && (c->call == call_scan_bwd || c->call == call_scan_var_bwd)) {
    for (int s = 0; s < nsets && st == BK_OK; s++) {
      bk_buffer *h = NULL;
      bk_buffer *const *in = sets[s];
      st = c->call == call_scan_bwd
               ? bk_scan_diag(b->ctx, in[0], in[1], in[2], in[3], c->rows, c->cols, &h)
               : bk_scan_diag_var(b->ctx, in[0], in[1], in[2], in[3], c->rows, c->cols, &h);
      bk_buffer_release(sets[s][4]);
      sets[s][4] = h;
    }
  }
  if (st == BK_OK) st = bench_sync(b);
  double ms = 0;
  /* Cases with host indices upload them through the context's ring of
   * pinned staging slots, each grown on its first large upload: the warm-up
   * makes at least four calls, so the timed calls find every slot grown
   * (--quick warms up with one call otherwise). */
  int warmup = b->warmup;
  if (c->idx && warmup * nsets < 4) warmup = (4 + nsets - 1) / nsets;
  for (int w = 0; w < warmup && st == BK_OK; w++)
    for (int s = 0; s < nsets && st == BK_OK; s++) st = c->call(b, c, sets[s]);
  if (st == BK_OK) st = bench_sync(b);
  if (st == BK_OK) st = time_calls(b, c, sets, nsets, &ms);
  if (st == BK_OK)
    report(b, c->name, ms, c->bytes, c->flops, 0);
  else
    report_status(b, c->name, st);
  (void)bench_sync(b);
  for (int s = 0; s < nsets; s++)
    for (int i = 0; i < MAX_INPUTS; i++) bk_buffer_release(sets[s][i]);
  free_case(c);
}

/* How a case's name shows its dtype: NAME_DTYPE appends "_f32" or "_f64";
 * NAME_F64 appends "_f64" to float64 cases only (the table names the
 * float32 ones bare); NAME_EXACT keeps the name as formatted. */
enum { NAME_DTYPE, NAME_F64, NAME_EXACT };

/* Runs case c under the name fmt formats, its dtype shown as `naming` says.
 * A case is one compound literal: the fields it leaves out are zero, so an
 * input missing from .kind is K_UNIFORM. The index cases own host indices;
 * when making them failed, the case reports that instead of running. */
static void run_named(bench *b, bcase c, int naming, const char *fmt, ...) BENCH_PRINTF(4, 5);
static void run_named(bench *b, bcase c, int naming, const char *fmt, ...) {
  char base[96];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(base, sizeof base, fmt, ap);
  va_end(ap);
  if (naming == NAME_DTYPE || (naming == NAME_F64 && c.dt == BK_F64))
    snprintf(c.name, sizeof c.name, "%s_%s", base, dtn(c.dt));
  else
    snprintf(c.name, sizeof c.name, "%s", base);
  if ((c.call == call_gather || c.call == call_scatter) && !c.idx)
    report_status(b, c.name, BK_ERR_OUT_OF_MEMORY);
  else
    run_case(b, &c);
}

/* ---- the copy bandwidth --------------------------------------------------------------- */

static void measure_copy(bench *b) {
  int64_t n = b->small ? ((int64_t)64 << 20) : ((int64_t)256 << 20); /* floats: 256 MiB / 1 GiB */
  bk_buffer *src = NULL;
  bk_status st = bk_buffer_zeros(b->ctx, BK_F32, n, &src);
  double bytes = 2.0 * (double)n * 4.0;
  if (st == BK_OK) {
    double t[MAX_REPEATS];
    int reps = b->repeats;
    for (int w = 0; w < b->warmup + 1 && st == BK_OK; w++) {
      bk_buffer *y = NULL;
      st = bk_buffer_copy(b->ctx, src, &y);
      bk_buffer_release(y);
    }
    if (st == BK_OK) st = bench_sync(b);
#ifdef BK_HAVE_CUDA
    if (st == BK_OK && b->cuda) {
      for (int i = 0; i < reps && st == BK_OK; i++) {
        bk_buffer *y = NULL;
        cudaEventRecord(b->ev[2 * i], b->stream);
        st = bk_buffer_copy(b->ctx, src, &y);
        cudaEventRecord(b->ev[2 * i + 1], b->stream);
        bk_buffer_release(y);
      }
      if (st == BK_OK) st = bench_sync(b);
      for (int i = 0; i < reps && st == BK_OK; i++) {
        float e = 0;
        cudaEventElapsedTime(&e, b->ev[2 * i], b->ev[2 * i + 1]);
        t[i] = e;
      }
    } else
#endif
    {
      for (int i = 0; i < reps && st == BK_OK; i++) {
        bk_buffer *y = NULL;
        double t0 = now_s();
        st = bk_buffer_copy(b->ctx, src, &y);
        t[i] = 1e3 * (now_s() - t0);
        bk_buffer_release(y);
      }
    }
    if (st == BK_OK) {
      double ms = median(t, reps);
      b->copy_gbs = bytes / (ms * 1e6);
      char name[64];
      snprintf(name, sizeof name, "copy_%s", b->small ? "256MiB" : "1GiB");
      report(b, name, ms, bytes, 0, 0);
    }
  }
  if (st != BK_OK) report_status(b, "copy_1GiB", st);
  bk_buffer_release(src);
}

/* ---- latency: a C loop of many tiny calls, one synchronization --------------------------- */

static void run_latency(bench *b, const char *name, int bmm) {
  if (!selected(b, name)) return;
  const int calls = 10000;
  bk_buffer *x = NULL, *w = NULL;
  int64_t dims[2] = {8, 8};
  bk_status st = make_input(b, BK_F32, bmm ? 4 * 16 * 16 : 64, K_UNIFORM, &x);
  if (st == BK_OK && bmm) st = make_input(b, BK_F32, 4 * 16 * 16, K_UNIFORM, &w);
  if (st == BK_OK) st = bench_sync(b);
  double t0 = 0, t1 = 0;
  for (int pass = 0; pass < 2 && st == BK_OK; pass++) {
    /* Pass 0 warms up (allocator pools, library handles). */
    int n = pass ? calls : 200;
    t0 = now_s();
    for (int i = 0; i < n && st == BK_OK; i++) {
      bk_buffer *y = NULL;
      st = bmm ? bk_bmm(b->ctx, x, w, 4, 16, 16, 16, 0, 0, &y)
               : bk_softmax(b->ctx, x, dims, 2, 1, &y);
      bk_buffer_release(y);
    }
    if (st == BK_OK) st = bench_sync(b);
    t1 = now_s();
  }
  if (st == BK_OK)
    report(b, name, 1e3 * (t1 - t0) / calls, 0, 0, 1);
  else
    report_status(b, name, st);
  bk_buffer_release(x);
  bk_buffer_release(w);
}

/* ---- the cases ------------------------------------------------------------------------------- */

/* Fills idx with k indices below `rows` from a fixed generator. */
static uint64_t *random_indices(int64_t k, int64_t rows) {
  uint64_t *idx = (uint64_t *)malloc((size_t)(k ? k : 1) * sizeof *idx);
  if (!idx) return NULL;
  uint64_t s = 0xD1B54A32D192ED03ull;
  for (int64_t i = 0; i < k; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    idx[i] = (s >> 11) % (uint64_t)rows;
  }
  return idx;
}

/* The bytes a real FFT of batch rows of length n moves: the real rows and
 * the packed half spectrum of n / 2 + 1 [re, im] pairs a row. */
static double fft_bytes(int64_t batch, int64_t n, double e) {
  return ((double)batch * (double)n + 2.0 * (double)batch * (double)(n / 2 + 1)) * e;
}

/* The memory-bound cases of the table, in one dtype. */
static void memory_cases(bench *b, bk_dtype dt) {
  const int sm = b->small;
  const double e = es(dt);

  /* Softmax along the last axis and a middle axis. */
  {
    int64_t r = sm ? 1024 : 8192, n = r * r;
    run_named(b,
              (bcase){.dt = dt, .call = call_softmax, .nin = 1, .len = {n}, .dims = {r, r},
                      .rank = 2, .axis = 1, .bytes = 2.0 * (double)n * e},
              NAME_DTYPE, "softmax_lastaxis_%" PRId64 "x%" PRId64, r, r);
  }
  {
    int64_t o = sm ? 64 : 256, a = sm ? 256 : 1024, i = sm ? 64 : 256, n = o * a * i;
    run_named(b,
              (bcase){.dt = dt, .call = call_softmax, .nin = 1, .len = {n}, .dims = {o, a, i},
                      .rank = 3, .axis = 1, .bytes = 2.0 * (double)n * e},
              NAME_DTYPE, "softmax_midaxis_%" PRId64 "x%" PRId64 "x%" PRId64, o, a, i);
  }
  /* Row reductions and masks over (8192, 8192). */
  {
    int64_t r = sm ? 1024 : 8192, n = r * r;
    run_named(b,
              (bcase){.dt = dt, .call = call_masked_softmax, .nin = 2, .len = {n, n},
                      .kind = {K_UNIFORM, K_MASK}, .rows = r, .cols = r,
                      .bytes = 3.0 * (double)n * e},
              NAME_DTYPE, "hard_masked_softmax_%" PRId64 "x%" PRId64, r, r);
    /* Each reads x once and writes a value a row, or a mask like x. */
    const struct {
      call_fn call;
      const char *name;
      double bytes;
    } row_ops[3] = {{call_rows_sum, "row_sum", ((double)n + (double)r) * e},
                    {call_rows_max, "row_max", ((double)n + (double)r) * e},
                    {call_first_max, "first_max_mask", 2.0 * (double)n * e}};
    for (int i = 0; i < 3; i++)
      run_named(b,
                (bcase){.dt = dt, .call = row_ops[i].call, .nin = 1, .len = {n}, .rows = r,
                        .cols = r, .bytes = row_ops[i].bytes},
                NAME_DTYPE, "%s_%" PRId64 "x%" PRId64, row_ops[i].name, r, r);
  }
  /* Top-k mask: one exact primitive, under the names of the two ATen paths
   * bench/vs_torch.py compares it with. */
  {
    int64_t r = sm ? 16384 : 262144, cols = 64, n = r * cols;
    const char *paths[2] = {"topk", "count"};
    for (int i = 0; i < 2; i++)
      run_named(b,
                (bcase){.dt = dt, .call = call_topk, .nin = 1, .len = {n}, .rows = r,
                        .cols = cols, .k = 4, .bytes = 2.0 * (double)n * e},
                NAME_F64, "topk_mask_%" PRId64 "x%" PRId64 "_k4_%s", r, cols, paths[i]);
  }
  /* Layer norm forward and backward (the native backward of ATen needs x;
   * bufkern's uses the saved values, so both rows time the same call). */
  {
    int64_t r = sm ? 4096 : 65536, cols = sm ? 1024 : 4096, n = r * cols;
    run_named(b,
              (bcase){.dt = dt, .call = call_ln_fwd, .nin = 3, .len = {n, cols, cols},
                      .kind = {K_UNIFORM, K_POSITIVE, K_UNIFORM}, .rows = r, .cols = cols,
                      .bytes = (3.0 * (double)n + 2.0 * (double)cols + (double)r) * e},
              NAME_DTYPE, "layernorm_fwd_%" PRId64 "x%" PRId64, r, cols);
    const char *bwd[2] = {"layernorm_vjp", "layernorm_bwd_native"};
    for (int i = 0; i < 2; i++)
      run_named(b,
                (bcase){.dt = dt, .call = call_ln_bwd, .nin = 4, .len = {n, n, r, cols},
                        .kind = {K_UNIFORM, K_UNIFORM, K_POSITIVE, K_POSITIVE}, .rows = r,
                        .cols = cols,
                        .bytes = (3.0 * (double)n + (double)r + 3.0 * (double)cols) * e},
                NAME_DTYPE, "%s_%" PRId64 "x%" PRId64, bwd[i], r, cols);
  }
  /* Real FFTs: a packed half spectrum holds batch * (n / 2 + 1) pairs. */
  {
    int64_t batch = sm ? 512 : 4096, n = sm ? 1024 : 4096, odd = sm ? 1023 : 4095;
    run_named(b,
              (bcase){.dt = dt, .call = call_rfft, .nin = 1, .len = {batch * n},
                      .batch = batch, .n = n, .bytes = fft_bytes(batch, n, e)},
              NAME_DTYPE, "rfft_packed_%" PRId64 "x%" PRId64, batch, n);
    run_named(b,
              (bcase){.dt = dt, .call = call_irfft, .nin = 1, .len = {batch * (n / 2 + 1) * 2},
                      .batch = batch, .n = n, .bytes = fft_bytes(batch, n, e)},
              NAME_DTYPE, "irfft_packed_%" PRId64 "x%" PRId64, batch, n);
    run_named(b,
              (bcase){.dt = dt, .call = call_rfft, .nin = 1, .len = {batch * odd},
                      .batch = batch, .n = odd, .bytes = fft_bytes(batch, odd, e)},
              NAME_EXACT, "rfft_packed_%" PRId64 "x%" PRId64 "_%s_oddn", batch, odd, dtn(dt));
  }
  /* Selective scans: the forward cases of the table, then the backward. The
   * backward reads A, B, X, h0, out and dy and writes dA, dB, dX and dh0;
   * its input 4 (length 0 here) is replaced by the forward result. */
  {
    int64_t T = sm ? 512 : 4096, N = sm ? 4096 : 16384, n = T * N;
    int64_t Ts = sm ? 128 : 512, ns = Ts * N;
    run_named(b,
              (bcase){.dt = dt, .call = call_scan, .nin = 4, .len = {N, N, n, N},
                      .kind = {K_DECAY}, .rows = T, .cols = N,
                      .bytes = (2.0 * (double)n + 3.0 * (double)N) * e},
              NAME_DTYPE, "selective_scan_shared_T%" PRId64 "_N%" PRId64, T, N);
    run_named(b,
              (bcase){.dt = dt, .call = call_scan_var, .nin = 4, .len = {n, n, n, N},
                      .kind = {K_DECAY}, .rows = T, .cols = N,
                      .bytes = (4.0 * (double)n + (double)N) * e},
              NAME_DTYPE, "selective_scan_var_T%" PRId64 "_N%" PRId64, T, N);
    run_named(b,
              (bcase){.dt = dt, .call = call_scan_var, .nin = 4, .len = {ns, ns, ns, N},
                      .kind = {K_DECAY}, .rows = Ts, .cols = N,
                      .bytes = (4.0 * (double)ns + (double)N) * e},
              NAME_F64, "selective_scan_var_T%" PRId64 "_N%" PRId64 "_seq", Ts, N);
    run_named(b,
              (bcase){.dt = dt, .call = call_scan_bwd, .nin = 6, .len = {N, N, n, N, 0, n},
                      .kind = {K_DECAY}, .rows = T, .cols = N,
                      .bytes = (4.0 * (double)n + 6.0 * (double)N) * e},
              NAME_DTYPE, "selective_scan_shared_bwd_T%" PRId64 "_N%" PRId64, T, N);
    run_named(b,
              (bcase){.dt = dt, .call = call_scan_var_bwd, .nin = 6, .len = {n, n, n, N, 0, n},
                      .kind = {K_DECAY}, .rows = T, .cols = N,
                      .bytes = (8.0 * (double)n + 2.0 * (double)N) * e},
              NAME_DTYPE, "selective_scan_var_bwd_T%" PRId64 "_N%" PRId64, T, N);
  }
  /* Broadcasts and their adjoint: (1, r) <-> (r, r), and a column. */
  {
    int64_t r = sm ? 1024 : 8192, n = r * r;
    double bytes = ((double)n + (double)r) * e;
    run_named(b,
              (bcase){.dt = dt, .call = call_broadcast_to, .nin = 1, .len = {r}, .dims = {1, r},
                      .rank = 2, .dims2 = {r, r}, .rank2 = 2, .map = {1, 2}, .bytes = bytes},
              NAME_F64, "broadcastTo_1x%" PRId64 "_to_%" PRId64 "x%" PRId64, r, r, r);
    run_named(b,
              (bcase){.dt = dt, .call = call_broadcast_adj, .nin = 1, .len = {n}, .dims = {1, r},
                      .rank = 2, .dims2 = {r, r}, .rank2 = 2, .map = {1, 2}, .bytes = bytes},
              NAME_F64, "reduceFromBroadcast_%" PRId64 "x%" PRId64 "_to_1x%" PRId64, r, r, r);
    run_named(b,
              (bcase){.dt = dt, .call = call_broadcast_col, .nin = 1, .len = {r}, .rows = r,
                      .cols = r, .bytes = bytes},
              NAME_F64, "broadcast_col_%" PRId64 "_to_%" PRId64 "x%" PRId64, r, r, r);
  }
  /* Swaps of adjacent axes and the axis sum. */
  {
    int64_t d0 = sm ? 8 : 32, d1 = sm ? 512 : 1024, d2 = sm ? 1024 : 2048, n = d0 * d1 * d2;
    for (int depth = 0; depth < 2; depth++)
      run_named(b,
                (bcase){.dt = dt, .call = call_swap, .nin = 1, .len = {n}, .dims = {d0, d1, d2},
                        .rank = 3, .axis = depth, .bytes = 2.0 * (double)n * e},
                NAME_F64, "swapAdjacent_d%d_%" PRId64 "x%" PRId64 "x%" PRId64, depth, d0, d1,
                d2);
    int64_t o = sm ? 64 : 256, a = sm ? 256 : 1024, i = sm ? 64 : 256, m = o * a * i;
    run_named(b,
              (bcase){.dt = dt, .call = call_sum_axis, .nin = 1, .len = {m}, .dims = {o, a, i},
                      .rank = 3, .axis = 1, .bytes = ((double)m + (double)(o * i)) * e},
              NAME_F64, "reduceSumAxis_ax1_%" PRId64 "x%" PRId64 "x%" PRId64, o, a, i);
  }
  /* Gather and scatter-add of rows. */
  {
    int64_t rows = sm ? 16384 : 131072, cols = sm ? 512 : 4096, k = sm ? 8192 : 65536;
    run_named(b,
              (bcase){.dt = dt, .call = call_gather, .nin = 1, .len = {rows * cols},
                      .rows = rows, .cols = cols, .k = k, .idx = random_indices(k, rows),
                      .bytes = 2.0 * (double)(k * cols) * e},
              NAME_F64, "gather_rows_k%" PRId64 "_of_%" PRId64 "x%" PRId64, k, rows, cols);
    run_named(b,
              (bcase){.dt = dt, .call = call_scatter, .nin = 2, .len = {rows * cols, k * cols},
                      .rows = rows, .cols = cols, .k = k, .idx = random_indices(k, rows),
                      .bytes = (2.0 * (double)(rows * cols) + (double)(k * cols)) * e},
              NAME_F64, "scatter_add_rows_k%" PRId64 "_into_%" PRId64 "x%" PRId64, k, rows,
              cols);
  }
  /* Vector concatenation and slicing (sizes in bytes of float32); the slice
   * takes len values from len / 2 on. */
  {
    int64_t mib = sm ? 32 : 128, n = mib * 1024 * 1024 / 4;
    int64_t smib = sm ? 16 : 64, len = smib * 1024 * 1024 / 4;
    run_named(b,
              (bcase){.dt = dt, .call = call_concat, .nin = 2, .len = {n, n}, .n = n, .m = n,
                      .bytes = 4.0 * (double)n * e},
              NAME_F64, "concat_1d_2x%" PRId64 "MiB", mib);
    run_named(b,
              (bcase){.dt = dt, .call = call_slice, .nin = 1, .len = {2 * len}, .n = 2 * len,
                      .m = len / 2, .p = len, .bytes = 2.0 * (double)len * e},
              NAME_F64, "slice_1d_%" PRId64 "MiB", smib);
  }
  /* Depthwise causal convolution (memory-bound). The dense kernel layout
   * (C_out, C_in, k): only the diagonal blocks are read, but the buffer
   * holds them all. */
  {
    int64_t N = sm ? 2 : 16, C = sm ? 256 : 4096, L = sm ? 1024 : 2048, n = N * C * L;
    run_named(b,
              (bcase){.dt = dt, .call = call_conv, .nin = 2, .len = {n, C * C * 4},
                      .conv_in = {N, C, L}, .conv_rank = 3, .conv_k = {C, C, 4}, .conv_sr = 1,
                      .stride = {1}, .pad_b = {3}, .pad_a = {0}, .dil = {1}, .groups = C,
                      .bytes = (2.0 * (double)n + 4.0 * (double)C) * e},
              NAME_F64, "conv1d_depthwise_k4_causal_%" PRId64 "x%" PRId64 "x%" PRId64, N, C, L);
  }
  /* Cross-entropies; the teacher's gradient writes a third (rows, cols). */
  {
    int64_t r = sm ? 1024 : 8192, cols = sm ? 4096 : 32768, n = r * cols;
    run_named(b,
              (bcase){.dt = dt, .call = call_xent_wm, .nin = 2, .len = {n, n},
                      .kind = {K_UNIFORM, K_POSITIVE}, .rows = r, .cols = cols,
                      .bytes = 2.0 * (double)n * e},
              NAME_F64, "xent_weighted_mean_%" PRId64 "x%" PRId64, r, cols);
    for (int g = 0; g < 2; g++)
      run_named(b,
                (bcase){.dt = dt, .call = call_xent_teacher, .nin = 2, .len = {n, n}, .rows = r,
                        .cols = cols, .axis = g, .bytes = (g ? 3.0 : 2.0) * (double)n * e},
                NAME_F64, "xent_teacher_%s_%" PRId64 "x%" PRId64, g ? "grad" : "loss", r, cols);
  }
}

/* Batched matrix products and the grouped 2-D convolution (TFLOP/s). */
static void compute_cases(bench *b) {
  const int sm = b->small;
  int64_t batch = sm ? 8 : 64, d = sm ? 256 : 1024, nd = batch * d * d;
  double flops = 2.0 * (double)batch * (double)d * (double)d * (double)d;
  for (int t = 0; t < 2; t++) {
    const char *var[3] = {"", "_AT", "_BT"};
    for (int v = 0; v < 3; v++)
      run_named(b,
                (bcase){.dt = t ? BK_F64 : BK_F32, .call = call_bmm, .nin = 2, .len = {nd, nd},
                        .batch = batch, .m = d, .n = d, .p = d, .ta = v == 1, .tb = v == 2,
                        .flops = flops},
                NAME_DTYPE, "bmm_%" PRId64 "x%" PRId64 "^3%s", batch, d, var[v]);
  }
  run_named(b,
            (bcase){.dt = BK_F32, .call = call_bmm_scaled, .nin = 2, .len = {nd, nd},
                    .batch = batch, .m = d, .n = d, .p = d, .scale = 0.5, .flops = flops},
            NAME_DTYPE, "scaled_bmm_flag_%" PRId64 "x%" PRId64 "^3", batch, d);

  /* 3x3 kernel, dilation 2, groups 8, padding 1|3 and 2|2 (asymmetric), so
   * the output keeps the 56x56 extent. */
  int64_t N = sm ? 2 : 32, C = sm ? 64 : 256, H = sm ? 28 : 56;
  run_named(b,
            (bcase){.dt = BK_F32, .call = call_conv, .nin = 2, .len = {N * C * H * H, C * C * 9},
                    .conv_in = {N, C, H, H}, .conv_rank = 4, .conv_k = {C, C, 3, 3},
                    .conv_sr = 2, .stride = {1, 1}, .pad_b = {1, 2}, .pad_a = {3, 2},
                    .dil = {2, 2}, .groups = 8,
                    .flops = 2.0 * (double)N * (double)C * (double)(H * H) * (double)(C / 8) *
                             9.0},
            NAME_DTYPE, "conv2d_grouped8_dil2_asympad_%" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64,
            N, C, H, H);
}

/* Row-width sweep at about 256 MB per input: no cliff from 32 to 262144
 * columns. */
static void sweep_cases(bench *b, bk_dtype dt) {
  const double e = es(dt);
  const double target = b->small ? 8e6 : 256e6;
  for (int64_t w = 32; w <= 262144; w *= 2) {
    int64_t rows = (int64_t)(target / ((double)w * e));
    if (rows < 1) rows = 1;
    int64_t n = rows * w;
    run_named(b,
              (bcase){.dt = dt, .call = call_rows_sum, .nin = 1, .len = {n}, .rows = rows,
                      .cols = w, .bytes = ((double)n + (double)rows) * e},
              NAME_DTYPE, "sweep_rows_sum_%" PRId64 "x%" PRId64, rows, w);
    run_named(b,
              (bcase){.dt = dt, .call = call_softmax, .nin = 1, .len = {n}, .dims = {rows, w},
                      .rank = 2, .axis = 1, .bytes = 2.0 * (double)n * e},
              NAME_DTYPE, "sweep_softmax_lastaxis_%" PRId64 "x%" PRId64, rows, w);
    run_named(b,
              (bcase){.dt = dt, .call = call_masked_softmax, .nin = 2, .len = {n, n},
                      .kind = {K_UNIFORM, K_MASK}, .rows = rows, .cols = w,
                      .bytes = 3.0 * (double)n * e},
              NAME_DTYPE, "sweep_masked_softmax_%" PRId64 "x%" PRId64, rows, w);
    run_named(b,
              (bcase){.dt = dt, .call = call_ln_fwd, .nin = 3, .len = {n, w, w},
                      .kind = {K_UNIFORM, K_POSITIVE, K_UNIFORM}, .rows = rows, .cols = w,
                      .bytes = (3.0 * (double)n + 2.0 * (double)w + (double)rows) * e},
              NAME_DTYPE, "sweep_layernorm_fwd_%" PRId64 "x%" PRId64, rows, w);
  }
  /* Softmax along the middle axis of (outer, n, 256), the same bytes for
   * axis lengths from 16 to 8192. */
  for (int64_t a = 16; a <= 8192; a *= 4) {
    const int64_t i = 256;
    int64_t o = (int64_t)(target / ((double)a * (double)i * e));
    if (o < 1) o = 1;
    const int64_t n = o * a * i;
    run_named(b,
              (bcase){.dt = dt, .call = call_softmax, .nin = 1, .len = {n}, .dims = {o, a, i},
                      .rank = 3, .axis = 1, .bytes = 2.0 * (double)n * e},
              NAME_DTYPE, "sweep_softmax_midaxis_%" PRId64 "x%" PRId64 "x%" PRId64, o, a, i);
  }
}

/* ---- entry ------------------------------------------------------------------------------------ */

static int usage(FILE *f) {
  fprintf(f,
          "usage: bufkern bench [--device cpu|cuda:N] [--filter SUBSTR] [--quick] [--f64]\n"
          "                     [--json FILE] [--latency]\n"
          "  --device   device to run on (default cuda:0 when a GPU is visible, else cpu)\n"
          "  --filter   run only the cases whose name contains SUBSTR\n"
          "  --quick    fewer warm-up calls and repeats\n"
          "  --f64      also run the float64 variants of the memory-bound cases\n"
          "  --json     also write every result as one JSON object per line to FILE\n"
          "  --latency  instead, the per-call cost of small calls against the launch floors\n"
          "             (CUDA; 20000 calls each, 2000 with --quick)\n"
          "       bufkern bench --sweep [options]: shapes drawn at random from a seed\n"
          "                     (bufkern bench --sweep --help lists its options)\n");
  return 2;
}

static int parse_device(const char *s, bk_device *d) {
  if (strcmp(s, "cpu") == 0) {
    d->kind = BK_DEVICE_CPU;
    d->index = 0;
    return 1;
  }
  if (strncmp(s, "cuda", 4) == 0) {
    d->kind = BK_DEVICE_CUDA;
    d->index = 0;
    if (s[4] == ':') {
      char *end = NULL;
      long v = strtol(s + 5, &end, 10);
      if (!end || *end || v < 0 || v > INT32_MAX) return 0;
      d->index = (int32_t)v;
    } else if (s[4] != '\0') {
      return 0;
    }
    return 1;
  }
  return 0;
}

int bk_tool_bench(int argc, char **argv) {
  bench b;
  memset(&b, 0, sizeof b);
  b.dev.kind = bk_cuda_device_count() > 0 ? BK_DEVICE_CUDA : BK_DEVICE_CPU;
  b.dev.index = 0;
  const char *json_path = NULL;
  int latency = 0;
  /* argv holds the arguments after `bench` (a leading "bench" is skipped). */
  int first = argc > 0 && strcmp(argv[0], "bench") == 0;
  for (int i = first; i < argc; i++)
    if (strcmp(argv[i], "--sweep") == 0) return bk_tool_bench_sweep(argc - first, argv + first);
  for (int i = first; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--device") == 0 && i + 1 < argc) {
      if (!parse_device(argv[++i], &b.dev)) return usage(stderr);
    } else if (strcmp(a, "--filter") == 0 && i + 1 < argc) {
      b.filter = argv[++i];
    } else if (strcmp(a, "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else if (strcmp(a, "--quick") == 0) {
      b.quick = 1;
    } else if (strcmp(a, "--f64") == 0) {
      b.f64 = 1;
    } else if (strcmp(a, "--latency") == 0) {
      latency = 1;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "bench: unknown argument '%s'\n", a);
      return usage(stderr);
    }
  }
  if (latency) return bk_tool_bench_latency(b.dev, b.quick ? 2000 : 20000);
  b.cuda = b.dev.kind == BK_DEVICE_CUDA;
  b.small = !b.cuda;
  b.warmup = b.quick ? 1 : 3;
  b.repeats = b.quick ? 5 : 20;
  b.l2_bytes = 50e6;
#ifdef _SC_LEVEL3_CACHE_SIZE
  /* On the CPU the cache that can hold a repeat's inputs is the last level. */
  if (!b.cuda && sysconf(_SC_LEVEL3_CACHE_SIZE) > 0) b.l2_bytes = (double)sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif

  bk_status st = bk_context_create(b.dev, &b.ctx);
  if (st != BK_OK) {
    fprintf(stderr, "bench: cannot create a context for the device: %s (%s)\n",
            bk_status_string(st), bk_last_error());
    return 1;
  }
  char devname[320] = "cpu";
#ifdef BK_HAVE_CUDA
  if (b.cuda) {
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, b.dev.index) == cudaSuccess) {
      snprintf(devname, sizeof devname, "cuda:%d (%s)", (int)b.dev.index, prop.name);
      if (prop.l2CacheSize > 0) b.l2_bytes = (double)prop.l2CacheSize;
    }
    int ok = cudaSetDevice(b.dev.index) == cudaSuccess &&
             cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking) == cudaSuccess;
    for (int i = 0; ok && i < 2 * MAX_REPEATS; i++)
      ok = cudaEventCreate(&b.ev[i]) == cudaSuccess;
    if (ok) ok = bk_context_set_stream(b.ctx, b.stream) == BK_OK;
    if (!ok) {
      fprintf(stderr, "bench: cannot set up the timing stream and events\n");
      bk_context_destroy(b.ctx);
      return 1;
    }
  }
#else
  if (b.cuda) {
    fprintf(stderr, "bench: this bench was built without CUDA; use --device cpu\n");
    bk_context_destroy(b.ctx);
    return 1;
  }
#endif
  if (json_path) {
    b.json = fopen(json_path, "w");
    if (!b.json) {
      fprintf(stderr, "bench: cannot open %s for writing\n", json_path);
      bk_context_destroy(b.ctx);
      return 1;
    }
  }

  printf("bufkern %s bench on %s%s, median of %d repeats after %d warm-up calls\n\n",
         bk_version(), devname, b.small ? " (small shapes)" : "", b.repeats, b.warmup);
  printf("| case | ms | GB/s or TFLOP/s | %% of copy |\n");
  printf("|---|---|---|---|\n");
  measure_copy(&b);
  memory_cases(&b, BK_F32);
  compute_cases(&b);
  run_latency(&b, "softmax_8x8_latency", 0);
  run_latency(&b, "bmm_4x16^3_latency", 1);
  sweep_cases(&b, BK_F32);
  if (b.f64) {
    memory_cases(&b, BK_F64);
    sweep_cases(&b, BK_F64);
  }

  if (b.json) fclose(b.json);
  /* The context must stop using the stream before the stream goes. */
#ifdef BK_HAVE_CUDA
  if (b.cuda) {
    bk_status s1 = bk_context_synchronize(b.ctx);
    bk_status s2 = bk_context_reset_stream(b.ctx);
    if (s1 != BK_OK || s2 != BK_OK)
      fprintf(stderr, "bench: cannot release the timing stream: %s\n", bk_last_error());
  }
#endif
  bk_context_destroy(b.ctx);
#ifdef BK_HAVE_CUDA
  if (b.cuda) {
    for (int i = 0; i < 2 * MAX_REPEATS; i++)
      if (b.ev[i]) cudaEventDestroy(b.ev[i]);
    cudaStreamDestroy(b.stream);
  }
#endif
  return b.failures ? 1 : 0;
}
