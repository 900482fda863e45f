/*
 * bufkern — the command-line tool.
 *
 *   bufkern info                  version, build options, BLAS, devices
 *   bufkern demo [options]        model blocks: gradient checks, then training
 *   bufkern check [options]       the contract's examples of every primitive
 *   bufkern bench [options]       timings of every primitive
 *   bufkern help [command]
 *
 * Errors are printed with the status name and bk_last_error()'s text.
 */
#define _POSIX_C_SOURCE 200809L

#include "bufkern.h"
#include "cli.h"
#include "demo.h"
#include "examples.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef BK_TOOL_HAVE_BENCH
int bk_tool_bench(int argc, char **argv);
#endif

/* ---- helpers shared with check.c --------------------------------------------- */

const char *cli_status_name(bk_status st) {
  switch (st) {
#define BK_STATUS_NAME_(name, value, text) \
  case name:                               \
    return #name;
    BK_STATUS_LIST(BK_STATUS_NAME_)
#undef BK_STATUS_NAME_
  }
  return "BK_UNKNOWN_STATUS";
}

int cli_report(bk_status st, const char *what) {
  if (st == BK_OK) return 0;
  const char *detail = bk_last_error();
  fprintf(stderr, "bufkern: %s failed: %s (%s)%s%s\n", what, cli_status_name(st),
          bk_status_string(st), detail[0] ? ": " : "", detail);
  return 1;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_parse_device(const char *s, bk_device *d) {
  if (strcmp(s, "cpu") == 0) {
    *d = (bk_device){BK_DEVICE_CPU, 0};
    return 1;
  }
  if (strncmp(s, "cuda", 4) != 0) return 0;
  if (s[4] == '\0') {
    *d = (bk_device){BK_DEVICE_CUDA, 0};
    return 1;
  }
  if (s[4] != ':' || s[5] == '\0') return 0;
  char *end = NULL;
  const long index = strtol(s + 5, &end, 10);
  if (*end != '\0' || index < 0 || index > INT32_MAX) return 0;
  *d = (bk_device){BK_DEVICE_CUDA, (int32_t)index};
  return 1;
}

bk_device cli_default_device(void) {
  if (bk_cuda_device_count() > 0) return (bk_device){BK_DEVICE_CUDA, 0};
  return (bk_device){BK_DEVICE_CPU, 0};
}

const char *cli_device_text(bk_device d, char *buf, size_t cap) {
  if (d.kind == BK_DEVICE_CPU)
    snprintf(buf, cap, "cpu");
  else
    snprintf(buf, cap, "cuda:%" PRId32, d.index);
  return buf;
}

/* ---- info --------------------------------------------------------------------- */

static void info_usage(void) {
  printf("usage: bufkern info\n\n"
         "Prints the library version, the build facts (backends, BLAS, OpenMP, build type)\n"
         "and every CUDA device with whether a context can be created on it.\n");
}

static int cmd_info(int argc, char **argv) {
  if (argc > 0 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
    info_usage();
    return 0;
  }
  if (argc > 0) {
    fprintf(stderr, "bufkern info: unexpected argument %s (see bufkern help info)\n", argv[0]);
    return 2;
  }
  printf("bufkern %s\n%s", bk_version(), bk_build_info());
  const int n = bk_cuda_device_count();
  printf("cuda devices: %d\n", n);
  for (int i = 0; i < n; i++) {
    bk_context *ctx = NULL;
    const bk_status st = bk_context_create((bk_device){BK_DEVICE_CUDA, i}, &ctx);
    if (st == BK_OK) {
      printf("  cuda:%d available\n", i);
      bk_context_destroy(ctx);
    } else {
      printf("  cuda:%d unavailable: %s: %s\n", i, cli_status_name(st), bk_last_error());
    }
  }
  printf("default device: %s\n", bk_cuda_device_count() > 0 ? "cuda:0" : "cpu");
  return 0;
}

/* ---- demo: the model ------------------------------------------------------------ */

/* The demo model's sizes: B sequences of T tokens with IN input features,
 * width D, V classes. Small enough that 200 training steps take seconds on
 * two CPU cores; every block runs on the same (B, T, D) activations. */
enum {
  DM_B = DEMO_BATCH, /* sequences per batch */
  DM_T = 32,      /* tokens per sequence (also the FFT length) */
  DM_IN = 8,      /* input features per token */
  DM_D = 16,      /* model width */
  DM_HEADS = 2,   /* attention heads */
  DM_INNER = 16,  /* Mamba inner width */
  DM_CONV = 4,    /* Mamba convolution width */
  DM_EXPERTS = 4, /* experts */
  DM_TOP_K = 2,   /* experts per token */
  DM_HIDDEN = 16, /* expert hidden width */
  DM_MODES = 8,   /* spectral modes kept of T/2+1 */
  DM_V = 8,       /* classes */
  DM_ROWS = DM_B * DM_T
};

/* Weight of the hard-label term of the distillation loss. */
static const double DM_HARD_WEIGHT = 0.5;

typedef enum demo_kind {
  K_ATTENTION,
  K_MAMBA,
  K_MOE,
  K_SPECTRAL,
  K_DISTILL,
  K_MODEL,
  K_COUNT
} demo_kind;

/* The table's name for a block of each kind. */
static const char *kind_label(demo_kind kind) {
  static char text[K_COUNT][64];
  switch (kind) {
  case K_ATTENTION:
    snprintf(text[kind], sizeof text[kind], "causal self-attention (%d heads)", DM_HEADS);
    break;
  case K_MAMBA:
    snprintf(text[kind], sizeof text[kind], "Mamba-style block (E=%d, K=%d)", DM_INNER, DM_CONV);
    break;
  case K_MOE:
    snprintf(text[kind], sizeof text[kind], "mixture of experts (%d, top %d)", DM_EXPERTS,
             DM_TOP_K);
    break;
  case K_SPECTRAL:
    snprintf(text[kind], sizeof text[kind], "spectral layer (%d of %d modes)", DM_MODES,
             DM_T / 2 + 1);
    break;
  case K_DISTILL: return "distillation loss";
  case K_MODEL: return "model (all blocks + loss)";
  case K_COUNT: return "";
  }
  return text[kind];
}

/* The synthetic task: each token's class distribution comes from a fixed
 * random "teacher" that looks at the token and at the one before it, so
 * the student needs sequence mixing to match it. */
typedef struct demo_task {
  double A[DM_IN * DM_V], C[DM_IN * DM_V]; /* teacher weights */
} demo_task;

static demo_task task_make(uint64_t seed) {
  demo_task t;
  ex_rng r = ex_rng_seed(seed);
  const double bound = 2.0 * sqrt(3.0 / DM_IN);
  for (int i = 0; i < DM_IN * DM_V; i++) t.A[i] = bound * ex_uniform(&r);
  for (int i = 0; i < DM_IN * DM_V; i++) t.C[i] = bound * ex_uniform(&r);
  return t;
}

/* One batch of `batch` sequences: x (batch, T, IN), teacher logits and
 * one-hot labels (batch*T, V). */
static void task_batch(const demo_task *t, ex_rng *r, int batch, double *x, double *teacher,
                       double *labels) {
  const int rows = batch * DM_T;
  for (int i = 0; i < rows * DM_IN; i++) x[i] = sqrt(3.0) * ex_uniform(r);
  for (int row = 0; row < rows; row++) {
    const double *now = x + row * DM_IN;
    const double *before = row % DM_T == 0 ? NULL : now - DM_IN;
    double *logit = teacher + row * DM_V;
    int best = 0;
    for (int v = 0; v < DM_V; v++) {
      double acc = 0.0;
      for (int i = 0; i < DM_IN; i++) {
        acc += now[i] * t->A[i * DM_V + v];
        if (before) acc += before[i] * t->C[i * DM_V + v];
      }
      logit[v] = acc;
      if (acc > logit[best]) best = v;
    }
    for (int v = 0; v < DM_V; v++) labels[row * DM_V + v] = v == best ? 1.0 : 0.0;
  }
}

struct demo_batches {
  demo_task task;
  ex_rng r;
};

demo_batches *demo_batches_create(void) {
  demo_batches *b = malloc(sizeof *b);
  if (b) *b = (demo_batches){task_make(7), ex_rng_seed(2024)};
  return b;
}

void demo_batches_next(demo_batches *b, double *x, double *teacher, double *labels) {
  task_batch(&b->task, &b->r, DM_B, x, teacher, labels);
}

void demo_batches_destroy(demo_batches *b) { free(b); }

/* The model for batches of `batch` sequences: embed, the four blocks, a
 * head, the loss. *loss points at the chain's last child, whose targets
 * change per batch. The weights depend only on the seeds, not on batch. */
bk_status model_create(bk_context *ctx, bk_dtype dt, int64_t batch, ex_block **model,
                              ex_block **loss) {
  ex_block *part[7] = {NULL};
  const int64_t rows = batch * DM_T;
  const ex_attention_cfg att = {batch, DM_T, DM_D, DM_HEADS};
  const ex_mamba_cfg mam = {batch, DM_T, DM_D, DM_INNER, DM_CONV};
  const ex_moe_cfg moe = {rows, DM_D, DM_EXPERTS, DM_TOP_K, DM_HIDDEN};
  const ex_spectral_cfg spe = {batch, DM_T, DM_D, DM_MODES};
  bk_status st = ex_linear_create(ctx, dt, rows, DM_IN, DM_D, 11, &part[0]);
  if (st == BK_OK) st = ex_attention_create(ctx, dt, &att, 12, &part[1]);
  if (st == BK_OK) st = ex_mamba_create(ctx, dt, &mam, 13, &part[2]);
  if (st == BK_OK) st = ex_moe_create(ctx, dt, &moe, 14, &part[3]);
  if (st == BK_OK) st = ex_spectral_create(ctx, dt, &spe, 15, &part[4]);
  if (st == BK_OK) st = ex_linear_create(ctx, dt, rows, DM_D, DM_V, 16, &part[5]);
  if (st == BK_OK) st = ex_distill_create(ctx, dt, rows, DM_V, DM_HARD_WEIGHT, &part[6]);
  *model = *loss = NULL;
  if (st != BK_OK) {
    for (int i = 0; i < 7; i++) ex_block_destroy(part[i]);
    return st;
  }
  *loss = part[6];
  return ex_chain_create("model", part, 7, model);
}

/* One block of the given kind with fixed seeds (so that twins on two
 * devices are equal) and its input x (in_len host doubles, malloc'ed). */
static bk_status demo_block(bk_context *ctx, bk_dtype dt, demo_kind kind, ex_block **b,
                            double **x) {
  const ex_attention_cfg att = {DM_B, DM_T, DM_D, DM_HEADS};
  const ex_mamba_cfg mam = {DM_B, DM_T, DM_D, DM_INNER, DM_CONV};
  const ex_moe_cfg moe = {DM_ROWS, DM_D, DM_EXPERTS, DM_TOP_K, DM_HIDDEN};
  const ex_spectral_cfg spe = {DM_B, DM_T, DM_D, DM_MODES};
  static double teacher[DM_ROWS * DM_V], labels[DM_ROWS * DM_V];
  ex_block *loss = NULL;
  ex_rng r = ex_rng_seed(1000 + (uint64_t)kind);
  bk_status st = BK_OK;
  *b = NULL;
  *x = NULL;
  switch (kind) {
  case K_ATTENTION: st = ex_attention_create(ctx, dt, &att, 21, b); break;
  case K_MAMBA: st = ex_mamba_create(ctx, dt, &mam, 22, b); break;
  case K_MOE: st = ex_moe_create(ctx, dt, &moe, 23, b); break;
  case K_SPECTRAL: st = ex_spectral_create(ctx, dt, &spe, 24, b); break;
  case K_DISTILL:
    st = ex_distill_create(ctx, dt, DM_ROWS, DM_V, DM_HARD_WEIGHT, b);
    loss = *b;
    break;
  case K_MODEL: st = model_create(ctx, dt, DM_B, b, &loss); break;
  case K_COUNT: st = BK_ERR_INVALID_ARGUMENT; break;
  }
  if (st != BK_OK) return st;
  *x = malloc((size_t)(*b)->in_len * sizeof **x);
  if (!*x) {
    ex_block_destroy(*b);
    *b = NULL;
    return BK_ERR_OUT_OF_MEMORY;
  }
  if (kind == K_MODEL) {
    const demo_task task = task_make(7);
    task_batch(&task, &r, DM_B, *x, teacher, labels);
  } else {
    for (int64_t i = 0; i < (*b)->in_len; i++) (*x)[i] = 2.0 * ex_uniform(&r);
    for (int i = 0; i < DM_ROWS * DM_V; i++) teacher[i] = 2.0 * ex_uniform(&r);
    /* Soft label weights, not normalized: the loss takes any weights. */
    for (int i = 0; i < DM_ROWS * DM_V; i++) labels[i] = 0.5 + 0.5 * ex_uniform(&r);
  }
  if (loss) st = ex_distill_set_targets(ctx, loss, teacher, labels);
  if (st != BK_OK) {
    ex_block_destroy(*b);
    free(*x);
    *b = NULL;
    *x = NULL;
  }
  return st;
}

/* ---- demo: the table -------------------------------------------------------------- */

typedef struct demo_row {
  char block[64], check[96], error[64], time[32];
  int pass;
} demo_row;

enum { MAX_ROWS = 32 };

typedef struct demo_table {
  demo_row row[MAX_ROWS];
  int n;
  int failed;
} demo_table;

static demo_row *table_add(demo_table *t, const char *block, const char *check) {
  demo_row *r = &t->row[t->n < MAX_ROWS - 1 ? t->n++ : t->n];
  snprintf(r->block, sizeof r->block, "%s", block);
  snprintf(r->check, sizeof r->check, "%s", check);
  snprintf(r->time, sizeof r->time, "-");
  r->error[0] = '\0';
  r->pass = 0;
  return r;
}

static void row_result(demo_table *t, demo_row *r, double err, double tol) {
  r->pass = err <= tol;
  snprintf(r->error, sizeof r->error, "%.1e %s", err, r->pass ? "ok" : "FAILED");
  if (!r->pass) t->failed++;
}

static void table_print(const demo_table *t) {
  printf("| block | check | max error | time per step |\n|---|---|---|---|\n");
  for (int i = 0; i < t->n; i++)
    printf("| %s | %s | %s | %s |\n", t->row[i].block, t->row[i].check, t->row[i].error,
           t->row[i].time);
}

/* ---- demo: checks ------------------------------------------------------------------ */

/* Milliseconds per forward + backward of a block, averaged over enough
 * repetitions to fill about a tenth of a second (after one warm-up). */
static bk_status time_block(bk_context *ctx, ex_block *b, const double *x_host, double *ms) {
  bk_buffer *x = NULL, *dy = NULL, *y = NULL, *dx = NULL;
  bk_status st = BK_OK;
  int reps = 0;
  double t0 = 0.0, elapsed = 0.0;
  EX_TRY(ex_from_doubles(ctx, b->dtype, x_host, b->in_len, &x));
  EX_TRY(ex_fill(ctx, b->dtype, 1.0, b->out_len, &dy));
  for (int i = -1; i < 50 && elapsed < 0.1; i++) {
    if (i == 0) t0 = cli_now();
    EX_TRY(ex_block_forward(ctx, b, x, &y));
    EX_TRY(ex_block_backward(ctx, b, dy, &dx));
    EX_RELEASE(&y, &dx);
    EX_TRY(bk_context_synchronize(ctx));
    if (i >= 0) {
      reps++;
      elapsed = cli_now() - t0;
    }
  }
  *ms = 1e3 * elapsed / (reps > 0 ? reps : 1);
done:
  EX_RELEASE(&x, &dy, &y, &dx);
  return st;
}

/* Gradient check in float64 on the device, and the time per step in the
 * demo's dtype. */
static bk_status check_gradients(bk_context *ctx, bk_dtype dt, demo_kind kind, demo_table *t) {
  ex_block *b = NULL;
  double *x = NULL, err = 0.0, ms = 0.0;
  bk_buffer *xb = NULL;
  bk_status st = BK_OK;
  demo_row *r = table_add(t, kind_label(kind), "gradient vs finite differences, f64 (tol 1e-6)");
  EX_TRY(demo_block(ctx, BK_F64, kind, &b, &x));
  EX_TRY(ex_from_doubles(ctx, BK_F64, x, b->in_len, &xb));
  EX_TRY(ex_gradcheck(ctx, b, xb, 77 + (uint64_t)kind, 10, 1e-5, &err));
  row_result(t, r, err, 1e-6);
  ex_block_destroy(b);
  free(x);
  b = NULL;
  x = NULL;
  EX_TRY(demo_block(ctx, dt, kind, &b, &x));
  EX_TRY(time_block(ctx, b, x, &ms));
  snprintf(r->time, sizeof r->time, "%.2f ms (%s)", ms, dt == BK_F32 ? "f32" : "f64");
done:
  EX_RELEASE(&xb);
  ex_block_destroy(b);
  free(x);
  return st;
}

/* The same block on the device and on the CPU backend: forward outputs,
 * input gradients and parameter gradients agree within tolerance. */
static bk_status check_cross(bk_context *ctx, bk_context *cpu, bk_dtype dt, demo_kind kind,
                             demo_table *t) {
  ex_block *a = NULL, *b = NULL;
  double *xa = NULL, *xb = NULL, err = 0.0;
  const double tol = dt == BK_F32 ? 1e-4 : 1e-10;
  bk_status st = BK_OK;
  char what[96];
  snprintf(what, sizeof what, "cuda vs cpu backend, %s (tol %s)", dt == BK_F32 ? "f32" : "f64",
           dt == BK_F32 ? "1e-4" : "1e-10");
  demo_row *r = table_add(t, kind_label(kind), what);
  EX_TRY(demo_block(ctx, dt, kind, &a, &xa));
  EX_TRY(demo_block(cpu, dt, kind, &b, &xb));
  EX_TRY(ex_crosscheck(ctx, a, cpu, b, xa, 99, &err));
  row_result(t, r, err, tol);
done:
  ex_block_destroy(a);
  ex_block_destroy(b);
  free(xa);
  free(xb);
  return st;
}

/* Attention whose scores overflow float32: Wqkv scaled by 1e20 makes
 * |q k^T| about 1e40. The float32 block must notice (range-loss flag),
 * replay its scores in float64, and agree with a float64 block. */
static bk_status check_replay(bk_context *ctx, demo_table *t) {
  const ex_attention_cfg cfg = {DM_B, DM_T, DM_D, DM_HEADS};
  const int64_t n = DM_ROWS * DM_D;
  ex_block *blk[2] = {NULL, NULL};
  bk_buffer *x[2] = {NULL, NULL}, *y[2] = {NULL, NULL}, *big = NULL;
  double *xh = malloc((size_t)n * sizeof *xh), *yh[2] = {NULL, NULL};
  double diff = 0.0, scale = 0.0;
  int64_t replays = 0;
  ex_rng r = ex_rng_seed(5);
  bk_status st = BK_OK;
  demo_row *row = table_add(t, "attention, scores past the f32 range", "");
  yh[0] = malloc((size_t)n * sizeof *yh[0]);
  yh[1] = malloc((size_t)n * sizeof *yh[1]);
  if (!xh || !yh[0] || !yh[1]) {
    st = BK_ERR_OUT_OF_MEMORY;
    goto done;
  }
  for (int64_t i = 0; i < n; i++) xh[i] = ex_uniform(&r);
  for (int i = 0; i < 2; i++) {
    const bk_dtype dt = i == 0 ? BK_F32 : BK_F64;
    EX_TRY(ex_attention_create(ctx, dt, &cfg, 31, &blk[i]));
    ex_param *w = ex_block_param(blk[i], "Wqkv");
    if (!w) {
      st = BK_ERR_INTERNAL;
      goto done;
    }
    EX_TRY(ex_scale(ctx, 1e20, w->value, w->n, &big));
    bk_buffer_release(w->value);
    w->value = big;
    big = NULL;
    EX_TRY(ex_from_doubles(ctx, dt, xh, n, &x[i]));
    EX_TRY(ex_block_forward(ctx, blk[i], x[i], &y[i]));
    EX_TRY(ex_to_doubles(ctx, y[i], yh[i], n));
  }
  for (int64_t i = 0; i < n; i++) {
    const double d = fabs(yh[0][i] - yh[1][i]);
    diff = isfinite(d) ? fmax(diff, d) : INFINITY;
    scale = fmax(scale, fabs(yh[1][i]));
  }
  /* Exactly one forward ran, so exactly one replay is expected. */
  replays = ex_attention_replays(blk[0]);
  snprintf(row->check, sizeof row->check, "f32 with %" PRId64 " float64 replay vs f64 (tol 1e-4)",
           replays);
  row_result(t, row, replays == 1 ? diff / scale : INFINITY, 1e-4);
done:
  for (int i = 0; i < 2; i++) {
    ex_block_destroy(blk[i]);
    EX_RELEASE(&x[i], &y[i]);
    free(yh[i]);
  }
  free(xh);
  return st;
}

/* ---- demo: training ------------------------------------------------------------------- */

typedef struct demo_opts {
  bk_device device;
  bk_dtype dtype;
  int steps;
  double lr;
  int gpus; /* data-parallel training on this many GPUs; 0: the checks and training */
  int graph;
} demo_opts;

/* Trains the model with plain SGD on fresh synthetic batches; fills loss[]
 * (steps entries), the time per step, and the mean loss the teacher's own
 * logits get on the same batches (a reference point: matching the teacher
 * exactly scores this). */
static bk_status train(bk_context *ctx, const demo_opts *o, double *loss, double *ms,
                       double *floor_loss) {
  static double x[DM_ROWS * DM_IN], teacher[DM_ROWS * DM_V], labels[DM_ROWS * DM_V];
  const demo_task task = task_make(7);
  ex_rng r = ex_rng_seed(2024);
  ex_block *model = NULL, *head = NULL;
  bk_buffer *xb = NULL, *L = NULL, *one = NULL, *dx = NULL, *tb = NULL, *Lt = NULL;
  bk_status st = BK_OK;
  double floor_sum = 0.0, floor_step = 0.0, busy = 0.0;
  const int tty = isatty(fileno(stdout));
  const int every = o->steps >= 10 ? o->steps / 5 : 1;
  EX_TRY(model_create(ctx, o->dtype, DM_B, &model, &head));
  EX_TRY(ex_fill(ctx, o->dtype, 1.0, 1, &one));
  for (int step = 0; step < o->steps; step++) {
    task_batch(&task, &r, DM_B, x, teacher, labels);
    const double t0 = cli_now();
    EX_TRY(ex_distill_set_targets(ctx, head, teacher, labels));
    EX_TRY(ex_from_doubles(ctx, o->dtype, x, DM_ROWS * DM_IN, &xb));
    EX_TRY(ex_block_forward(ctx, model, xb, &L));
    EX_TRY(ex_to_doubles(ctx, L, &loss[step], 1));
    EX_TRY(ex_block_backward(ctx, model, one, &dx));
    EX_TRY(ex_sgd_step(ctx, model, o->lr));
    EX_TRY(bk_context_synchronize(ctx));
    busy += cli_now() - t0;
    /* The floor: the loss block applied to the teacher's own logits. */
    EX_TRY(ex_from_doubles(ctx, o->dtype, teacher, DM_ROWS * DM_V, &tb));
    EX_TRY(ex_block_forward(ctx, head, tb, &Lt));
    EX_TRY(ex_to_doubles(ctx, Lt, &floor_step, 1));
    floor_sum += floor_step;
    EX_RELEASE(&xb, &L, &dx, &tb, &Lt);
    if (tty) {
      printf("\r  training: step %4d/%d  loss %.4f", step + 1, o->steps, loss[step]);
      fflush(stdout);
    } else if ((step + 1) % every == 0 || step == 0) {
      printf("  training: step %4d/%d  loss %.4f\n", step + 1, o->steps, loss[step]);
    }
  }
  *ms = 1e3 * busy / (o->steps > 0 ? o->steps : 1);
  *floor_loss = floor_sum / (o->steps > 0 ? o->steps : 1);
done:
  if (tty) printf("\n");
  EX_RELEASE(&xb, &L, &one, &dx, &tb, &Lt);
  ex_block_destroy(model);
  return st;
}

/* Mean of loss[from, to). */
double mean_of(const double *loss, int from, int to) {
  double acc = 0.0;
  for (int i = from; i < to; i++) acc += loss[i];
  return to > from ? acc / (to - from) : NAN;
}


/* ---- demo: data-parallel training over several GPUs ---------------------------------- */

/* Sequences per global batch of the data-parallel runs: 1, 2, 4 and 8 GPUs
 * split it evenly. */
enum { DP_B = 8, DP_MAX_GPUS = 8 };

/* Trains the model data-parallel on cuda:0..gpus-1: every GPU holds a
 * replica (same seeds, so the same weights), takes DP_B/gpus sequences of
 * every global batch, and after the backward pass each parameter's
 * gradient is all-reduced (sum) and scaled by 1/gpus, the mean over the
 * global batch; every replica then takes the same SGD step. loss[step] is
 * the mean of the replicas' losses (each the mean over its rows), *ms the
 * time per step with every GPU synchronized. */
static bk_status train_dp(const demo_opts *o, int gpus, double *loss, double *ms) {
  static double x[DP_B * DM_T * DM_IN], teacher[DP_B * DM_T * DM_V], labels[DP_B * DM_T * DM_V];
  const demo_task task = task_make(7);
  const int64_t rows = (int64_t)(DP_B / gpus) * DM_T;
  ex_rng r = ex_rng_seed(2024);
  bk_context *ctx[DP_MAX_GPUS] = {NULL};
  ex_block *model[DP_MAX_GPUS] = {NULL}, *head[DP_MAX_GPUS] = {NULL};
  bk_buffer *one[DP_MAX_GPUS] = {NULL}, *xb[DP_MAX_GPUS] = {NULL}, *L[DP_MAX_GPUS] = {NULL};
  bk_buffer *dx[DP_MAX_GPUS] = {NULL}, *sum[DP_MAX_GPUS] = {NULL}, *mean = NULL;
  const bk_buffer *grad[DP_MAX_GPUS];
  bk_comm *comm = NULL;
  bk_status st = BK_OK;
  double busy = 0.0;
  for (int i = 0; i < gpus; i++) {
    EX_TRY(bk_context_create((bk_device){BK_DEVICE_CUDA, i}, &ctx[i]));
    EX_TRY(model_create(ctx[i], o->dtype, DP_B / gpus, &model[i], &head[i]));
    EX_TRY(ex_fill(ctx[i], o->dtype, 1.0, 1, &one[i]));
  }
  EX_TRY(bk_comm_create(ctx, gpus, &comm));
  for (int step = 0; step < o->steps; step++) {
    task_batch(&task, &r, DP_B, x, teacher, labels);
    const double t0 = cli_now();
    /* Every GPU's forward and backward is queued before any result is
     * read, so the GPUs run side by side. */
    for (int i = 0; i < gpus; i++) {
      EX_TRY(ex_distill_set_targets(ctx[i], head[i], teacher + i * rows * DM_V,
                                    labels + i * rows * DM_V));
      EX_TRY(ex_from_doubles(ctx[i], o->dtype, x + i * rows * DM_IN, rows * DM_IN, &xb[i]));
      EX_TRY(ex_block_forward(ctx[i], model[i], xb[i], &L[i]));
      EX_TRY(ex_block_backward(ctx[i], model[i], one[i], &dx[i]));
    }
    for (int k = 0; k < model[0]->n_params; k++) {
      /* The replicas run the same blocks, so they hold gradients for the
       * same parameters: rank 0's tells for all. */
      if (!model[0]->param[k]->grad) continue;
      for (int i = 0; i < gpus; i++) grad[i] = model[i]->param[k]->grad;
      EX_TRY(bk_comm_all_reduce(comm, BK_REDUCE_SUM, grad, sum));
      for (int i = 0; i < gpus; i++) {
        EX_TRY(ex_scale(ctx[i], 1.0 / gpus, sum[i], model[i]->param[k]->n, &mean));
        ex_set_grad(model[i]->param[k], &mean);
        EX_RELEASE(&sum[i]);
      }
    }
    double total = 0.0;
    for (int i = 0; i < gpus; i++) {
      double li = 0.0;
      EX_TRY(ex_sgd_step(ctx[i], model[i], o->lr));
      EX_TRY(ex_to_doubles(ctx[i], L[i], &li, 1));
      total += li;
    }
    for (int i = 0; i < gpus; i++) EX_TRY(bk_context_synchronize(ctx[i]));
    busy += cli_now() - t0;
    loss[step] = total / gpus;
    for (int i = 0; i < gpus; i++) EX_RELEASE(&xb[i], &L[i], &dx[i]);
  }
  *ms = 1e3 * busy / (o->steps > 0 ? o->steps : 1);
done:
  bk_comm_destroy(&comm);
  EX_RELEASE(&mean);
  for (int i = 0; i < gpus; i++) {
    EX_RELEASE(&one[i], &xb[i], &L[i], &dx[i], &sum[i]);
    ex_block_destroy(model[i]);
    bk_context_destroy(ctx[i]);
  }
  return st;
}

/* Bandwidth of an all-reduce (sum) of 1 GiB of float32 on every GPU:
 * algorithm bandwidth bytes / time, and bus bandwidth, NCCL's measure of
 * the links' load, 2 (n - 1) / n times that. The mean of 5 timed calls
 * after one warm-up. */
static bk_status bench_all_reduce(int gpus, double *ms) {
  const int64_t n = (int64_t)1 << 28;
  bk_context *ctx[DP_MAX_GPUS] = {NULL};
  bk_buffer *in[DP_MAX_GPUS] = {NULL}, *out[DP_MAX_GPUS] = {NULL};
  bk_comm *comm = NULL;
  bk_status st = BK_OK;
  double t0 = 0.0;
  for (int i = 0; i < gpus; i++) {
    EX_TRY(bk_context_create((bk_device){BK_DEVICE_CUDA, i}, &ctx[i]));
    EX_TRY(bk_buffer_zeros(ctx[i], BK_F32, n, &in[i]));
  }
  EX_TRY(bk_comm_create(ctx, gpus, &comm));
  for (int rep = -1; rep < 5; rep++) {
    if (rep == 0) t0 = cli_now();
    EX_TRY(bk_comm_all_reduce(comm, BK_REDUCE_SUM, (const bk_buffer *const *)in, out));
    for (int i = 0; i < gpus; i++) EX_RELEASE(&out[i]);
    for (int i = 0; i < gpus; i++) EX_TRY(bk_context_synchronize(ctx[i]));
  }
  *ms = 1e3 * (cli_now() - t0) / 5;
done:
  bk_comm_destroy(&comm);
  for (int i = 0; i < gpus; i++) {
    EX_RELEASE(&in[i], &out[i]);
    bk_context_destroy(ctx[i]);
  }
  return st;
}

/* Largest |a - b| / |b| over n losses. */
static double loss_gap(const double *a, const double *b, int n) {
  double worst = 0.0;
  for (int i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]) / fmax(fabs(b[i]), 1e-30));
  return worst;
}

/* `bufkern demo --gpus N`: the data-parallel run on N GPUs against the same
 * run on one GPU (same global batches), and twice on N GPUs for bitwise
 * repeatability; then the all-reduce bandwidth. */
static int demo_gpus(const demo_opts *o) {
  const int n = o->gpus, steps = o->steps > 0 ? o->steps : 1;
  const int have = bk_cuda_device_count();
  if (have < n) {
    fprintf(stderr, "bufkern demo: --gpus %d but %d CUDA device%s visible\n", n, have,
            have == 1 ? " is" : "s are");
    return 1;
  }
  demo_opts run = *o;
  run.steps = steps;
  double *one = malloc((size_t)steps * sizeof *one), *many = malloc((size_t)steps * sizeof *many);
  double *again = malloc((size_t)steps * sizeof *again);
  double ms1 = 0.0, msn = 0.0, msa = 0.0, ar_ms = 0.0;
  bk_status st = one && many && again ? BK_OK : BK_ERR_OUT_OF_MEMORY;
  const char *stage = "allocating the loss record";
  printf("bufkern demo --gpus %d: data-parallel training, %s, %d steps, global batch %d "
         "sequences x %d tokens (%d per GPU on %d GPUs)\n",
         n, o->dtype == BK_F32 ? "float32" : "float64", steps, DP_B, DM_T, DP_B / n, n);
  if (st == BK_OK) {
    stage = "training on 1 GPU";
    st = train_dp(&run, 1, one, &ms1);
  }
  if (st == BK_OK) {
    stage = "training on N GPUs";
    st = train_dp(&run, n, many, &msn);
  }
  if (st == BK_OK) {
    stage = "training on N GPUs again";
    st = train_dp(&run, n, again, &msa);
  }
  if (st == BK_OK) {
    stage = "the all-reduce benchmark";
    st = bench_all_reduce(n, &ar_ms);
  }
  if (st != BK_OK) {
    cli_report(st, stage);
    printf("\nFAILED\n");
    free(one);
    free(many);
    free(again);
    return 1;
  }
  /* Reordered float sums: the first step differs by rounding alone; later
   * steps carry the difference through training. */
  const double eps = o->dtype == BK_F32 ? 1e-5 : 1e-12;
  const double first_gap = loss_gap(many, one, 1), all_gap = loss_gap(many, one, steps);
  const int repeat = memcmp(many, again, (size_t)steps * sizeof *many) == 0;
  const int w = steps / 10 > 0 ? steps / 10 : 1;
  const int falls = mean_of(many, steps - w, steps) < 0.9 * mean_of(many, 0, w);
  const int pass = first_gap <= eps && all_gap <= 100 * eps && repeat && falls;
  printf("\n| run | first loss | last loss | time per step |\n|---|---|---|---|\n");
  printf("| 1 GPU | %.6f | %.6f | %.2f ms |\n", one[0], one[steps - 1], ms1);
  printf("| %d GPU%s | %.6f | %.6f | %.2f ms |\n", n, n == 1 ? "" : "s", many[0],
         many[steps - 1], msn);
  printf("| %d GPU%s, again | %.6f | %.6f | %.2f ms |\n", n, n == 1 ? "" : "s", again[0],
         again[steps - 1], msa);
  printf("\nloss, %d GPUs vs 1: relative gap %.1e at the first step (tol %.0e), %.1e over all "
         "steps (tol %.0e)\n",
         n, first_gap, eps, all_gap, 100 * eps);
  printf("repeat run on %d GPUs: losses %s\n", n, repeat ? "bitwise identical" : "DIFFER");
  printf("loss falls (mean of last %d < 0.9 x first %d): %s\n", w, w, falls ? "yes" : "NO");
  const double gb = (double)((int64_t)1 << 30) / 1e9, algbw = gb / (ar_ms * 1e-3);
  printf("all-reduce (sum) of 1 GiB float32 over %d GPU%s: %.3f ms, algbw %.1f GB/s, busbw %.1f "
         "GB/s\n",
         n, n == 1 ? "" : "s", ar_ms, algbw, algbw * 2.0 * (n - 1) / n);
  free(one);
  free(many);
  free(again);
  printf("\n%s\n", pass ? "all checks passed" : "FAILED");
  return pass ? 0 : 1;
}

/* ---- demo: the command ------------------------------------------------------------------- */

static void demo_usage(void) {
  printf(
      "usage: bufkern demo [--device cpu|cuda:N] [--dtype f32|f64] [--steps N] [--lr X]\n"
      "       bufkern demo --gpus N [--dtype f32|f64] [--steps N] [--lr X]\n"
      "       bufkern demo --graph [--device cuda:N] [--dtype f32|f64] [--steps N] [--lr X]\n\n"
      "Runs model blocks composed only from bufkern's public primitives (examples/):\n"
      "causal multi-head self-attention, a Mamba-style block, a mixture of experts, an\n"
      "FNO-style spectral layer and a distillation loss, each forward and backward.\n\n"
      "  1. checks every block's gradients against central finite differences in float64;\n"
      "  2. on a GPU, checks every block against the CPU backend (same inputs: outputs,\n"
      "     input gradients and parameter gradients);\n"
      "  3. checks that attention whose scores overflow float32 replays them in float64;\n"
      "  4. trains a small model (embedding, the four blocks, a head, the loss) with plain\n"
      "     SGD on synthetic sequences, printing progress and the loss at checkpoints.\n\n"
      "Prints a table (block | check | max error | time per step). Exits 0 when every\n"
      "check passes and the training loss falls, 1 otherwise, 2 on a usage error.\n\n"
      "options:\n"
      "  --device D   cpu or cuda:N (default: cuda:0 when a GPU is visible, else cpu)\n"
      "  --dtype T    f32 or f64 for the timings, the cross-check and training (default f32);\n"
      "               the finite-difference checks always run in float64\n"
      "  --steps N    training steps (default 200; 0 skips training)\n"
      "  --lr X       SGD learning rate (default 0.5)\n"
      "  --gpus N     instead: data-parallel training on cuda:0..N-1 (N = 1, 2, 4 or 8):\n"
      "               each GPU takes 1/N of every batch of 8 sequences, the gradients are\n"
      "               all-reduced through NCCL and averaged, every GPU takes the same step.\n"
      "               Compares the losses with the same run on one GPU and with a repeat,\n"
      "               prints the time per step of both and the all-reduce bandwidth of\n"
      "               1 GiB\n"
      "  --graph      instead: the training step recorded into one CUDA graph and replayed.\n"
      "               The model takes its capture-safe form: attention scores by bk_bmm and\n"
      "               a scale (no range-loss flag to read back), and the mixture of experts\n"
      "               routed densely on the device (every expert on every token, weighted\n"
      "               by its gate, exactly 0 where not selected: the same mixture, with the\n"
      "               routing still learned, and no mask read back). Checks both forms\n"
      "               against finite differences and the default forms, trains eagerly,\n"
      "               captures one step (parameters and batches in fixed device memory the\n"
      "               demo owns, updated by stream-ordered copies) and replays it on the\n"
      "               same batches; prints the time per step eager and replayed and checks\n"
      "               that every replayed loss is bitwise the eager one. Needs a CUDA\n"
      "               device and --steps of at least 2: exits 2 otherwise (also in a build\n"
      "               without CUDA).\n");
}

/* Parses the demo's options; returns -1 to go on, else an exit status. */
static int demo_parse(int argc, char **argv, demo_opts *o) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      demo_usage();
      return 0;
    }
    if (strcmp(a, "--graph") == 0) {
      o->graph = 1;
      continue;
    }
    if (strcmp(a, "--device") != 0 && strcmp(a, "--dtype") != 0 && strcmp(a, "--steps") != 0 &&
        strcmp(a, "--lr") != 0 && strcmp(a, "--gpus") != 0) {
      fprintf(stderr, "bufkern demo: unknown option %s (see bufkern demo --help)\n", a);
      return 2;
    }
    if (!v) {
      fprintf(stderr, "bufkern demo: %s needs a value (see bufkern demo --help)\n", a);
      return 2;
    }
    i++;
    char *end = NULL;
    if (strcmp(a, "--device") == 0) {
      if (!cli_parse_device(v, &o->device)) {
        fprintf(stderr, "bufkern demo: --device takes cpu or cuda:N, not %s\n", v);
        return 2;
      }
    } else if (strcmp(a, "--dtype") == 0) {
      if (strcmp(v, "f32") == 0)
        o->dtype = BK_F32;
      else if (strcmp(v, "f64") == 0)
        o->dtype = BK_F64;
      else {
        fprintf(stderr, "bufkern demo: --dtype takes f32 or f64, not %s\n", v);
        return 2;
      }
    } else if (strcmp(a, "--steps") == 0) {
      const long steps = strtol(v, &end, 10);
      if (*end != '\0' || steps < 0 || steps > 1000000) {
        fprintf(stderr, "bufkern demo: --steps takes a count in [0, 1000000], not %s\n", v);
        return 2;
      }
      o->steps = (int)steps;
    } else if (strcmp(a, "--gpus") == 0) {
      const long gpus = strtol(v, &end, 10);
      if (*end != '\0' || gpus < 1 || gpus > DP_MAX_GPUS || DP_B % gpus != 0) {
        fprintf(stderr, "bufkern demo: --gpus takes 1, 2, 4 or 8, not %s\n", v);
        return 2;
      }
      o->gpus = (int)gpus;
    } else {
      const double lr = strtod(v, &end);
      if (*end != '\0' || !(lr > 0.0) || !isfinite(lr)) {
        fprintf(stderr, "bufkern demo: --lr takes a positive number, not %s\n", v);
        return 2;
      }
      o->lr = lr;
    }
  }
  return -1;
}

static int cmd_demo(int argc, char **argv) {
  demo_opts o = {cli_default_device(), BK_F32, 200, 0.5, 0, 0};
  const int parsed = demo_parse(argc, argv, &o);
  if (parsed >= 0) return parsed;
  if (o.gpus > 0) return demo_gpus(&o);
  if (o.graph) return bk_tool_demo_graph(o.device, o.dtype, o.steps, o.lr);

  char dev[32];
  bk_context *ctx = NULL, *cpu = NULL;
  const int on_gpu = o.device.kind == BK_DEVICE_CUDA;
  if (cli_report(bk_context_create(o.device, &ctx), "creating the device context")) return 1;
  if (on_gpu && cli_report(bk_context_create((bk_device){BK_DEVICE_CPU, 0}, &cpu),
                           "creating the CPU context")) {
    bk_context_destroy(ctx);
    return 1;
  }
  printf("bufkern demo on %s, %s, %d training steps\n",
         cli_device_text(o.device, dev, sizeof dev), o.dtype == BK_F32 ? "float32" : "float64",
         o.steps);
  printf("model: embed %d->%d | causal self-attention, %d heads | Mamba-style block, E=%d,"
         " conv %d |\n       mixture of %d experts, top %d | spectral layer, %d modes |"
         " head %d->%d | distillation loss\n"
         "data:  %d sequences x %d tokens per batch, fresh synthetic batches\n\n",
         DM_IN, DM_D, DM_HEADS, DM_INNER, DM_CONV, DM_EXPERTS, DM_TOP_K, DM_MODES, DM_D, DM_V,
         DM_B, DM_T);

  demo_table t = {.n = 0, .failed = 0};
  double *loss = malloc((size_t)(o.steps > 0 ? o.steps : 1) * sizeof *loss);
  bk_status st = loss ? BK_OK : BK_ERR_OUT_OF_MEMORY;
  const char *stage = "allocating the loss record";
  double train_ms = 0.0, floor_loss = 0.0;
  printf("checking gradients%s ...\n", on_gpu ? " and the CPU cross-check" : "");
  fflush(stdout);
  for (int k = 0; st == BK_OK && k < K_COUNT; k++) {
    stage = kind_label((demo_kind)k);
    st = check_gradients(ctx, o.dtype, (demo_kind)k, &t);
    if (st == BK_OK && on_gpu) st = check_cross(ctx, cpu, o.dtype, (demo_kind)k, &t);
  }
  if (st == BK_OK) {
    stage = "the range-loss replay";
    st = check_replay(ctx, &t);
  }
  if (st == BK_OK && o.steps > 0) {
    stage = "training";
    st = train(ctx, &o, loss, &train_ms, &floor_loss);
  }
  if (st != BK_OK) {
    cli_report(st, stage);
    printf("\nFAILED\n");
    free(loss);
    bk_context_destroy(cpu);
    bk_context_destroy(ctx);
    return 1;
  }

  /* The loss must fall: the mean over the last tenth of the steps below
   * 90% of the mean over the first tenth. */
  int w = o.steps / 10 > 0 ? o.steps / 10 : 1;
  double first = 0.0, last = 0.0;
  if (o.steps > 0) {
    first = mean_of(loss, 0, w);
    last = mean_of(loss, o.steps - w, o.steps);
    char check[96];
    snprintf(check, sizeof check, "training: mean loss of last %d steps < 0.9 x first %d", w, w);
    demo_row *r = table_add(&t, kind_label(K_MODEL), check);
    r->pass = last < 0.9 * first;
    if (!r->pass) t.failed++;
    snprintf(r->error, sizeof r->error, "%.4f -> %.4f %s", first, last, r->pass ? "ok" : "FAILED");
    snprintf(r->time, sizeof r->time, "%.2f ms (SGD step)", train_ms);
  }

  printf("\n");
  table_print(&t);
  if (o.steps > 0) {
    printf("\nloss: first step %.4f, last step %.4f\n", loss[0], loss[o.steps - 1]);
    printf("loss, mean of the %d steps ending at:", w);
    const int marks = o.steps >= 5 ? 5 : o.steps;
    for (int i = 0; i <= marks; i++) {
      const int end = i == 0 ? w : w + (int)((int64_t)(o.steps - w) * i / marks);
      if (i > 0 && end == w) continue;
      printf("%s step %d %.4f", i == 0 ? "" : " |", end, mean_of(loss, end - w, end));
    }
    printf("\nfor reference, the teacher's own logits score %.4f on the same batches\n",
           floor_loss);
  }
  free(loss);
  bk_context_destroy(cpu);
  bk_context_destroy(ctx);
  if (t.failed) {
    printf("\nFAILED: %d check%s\n", t.failed, t.failed == 1 ? "" : "s");
    return 1;
  }
  printf("\nall checks passed\n");
  return 0;
}

/* ---- dispatch ------------------------------------------------------------------ */

static void usage(FILE *f) {
  fprintf(f,
          "usage: bufkern <command> [options]\n\n"
          "commands:\n"
          "  info     version, build options, BLAS and devices\n"
          "  demo     model blocks composed from the primitives: gradient checks against\n"
          "           finite differences, CUDA vs CPU, then a short training run\n"
          "  check    the contract's examples of every primitive, on a device\n"
          "  bench    time every primitive\n"
          "  help     this text, or a command's: bufkern help <command>\n\n"
          "Every command takes --help. Devices are cpu or cuda:N; the default is cuda:0\n"
          "when a GPU is visible, else cpu.\n");
}

static int is_help(const char *s) {
  return strcmp(s, "help") == 0 || strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0;
}

static int help(const char *cmd) {
  if (!cmd) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "info") == 0) {
    info_usage();
    return 0;
  }
  if (strcmp(cmd, "demo") == 0) {
    demo_usage();
    return 0;
  }
  if (strcmp(cmd, "check") == 0) {
    bk_tool_check_usage();
    return 0;
  }
#ifdef BK_TOOL_HAVE_BENCH
  if (strcmp(cmd, "bench") == 0) {
    char *args[2] = {"--help", NULL};
    return bk_tool_bench(1, args);
  }
#endif
  if (strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "bufkern: no help for unknown command %s\n\n", cmd);
  usage(stderr);
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (is_help(cmd)) return help(argc > 2 ? argv[2] : NULL);
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    printf("bufkern %s\n", bk_version());
    return 0;
  }
  if (strcmp(cmd, "info") == 0) return cmd_info(argc - 2, argv + 2);
  if (strcmp(cmd, "demo") == 0) return cmd_demo(argc - 2, argv + 2);
  if (strcmp(cmd, "check") == 0) return bk_tool_check(argc - 2, argv + 2);
#ifdef BK_TOOL_HAVE_BENCH
  if (strcmp(cmd, "bench") == 0) return bk_tool_bench(argc - 2, argv + 2);
#endif
  fprintf(stderr, "bufkern: unknown command %s\n\n", cmd);
  usage(stderr);
  return 2;
}
