/*
 * test_golden.c — replays the golden vectors of tests/golden (every .txt file) on the
 * device under test.
 *
 * The files are written by tests/golden/gen_golden.py from an independent
 * float64 reference (numpy written from the contract, or ATen through
 * torch); the format is described at the top of that script. Every case
 * names a primitive and a dtype; this program builds its inputs, calls the
 * primitive through the public API only, and compares each output with the
 * recorded values: NaN matches NaN, infinities match the same infinity,
 * finite values within the contract's tolerance for the recorded kind
 * (exact, elem, red, contract:n) times the recorded scale, and the entries a
 * case lists under `zeros` must be exactly +0. A case with a `status` line
 * must fail with that status, a message naming the argument, and NULL
 * out-parameters. Every successful case is also run twice (bitwise equal
 * results) and its inputs are checked unchanged.
 */
#define _POSIX_C_SOURCE 200809L

#include "testlib.h"

#include <dirent.h>

#ifndef BK_GOLDEN_DIR
#define BK_GOLDEN_DIR "tests/golden"
#endif

/* ---- the case model ------------------------------------------------------------ */

enum { GI_INT, GI_F, GI_D, GI_EXPECT, GI_ZEROS };
enum { TOL_EXACT, TOL_ELEM, TOL_RED, TOL_CONTRACT };

#define G_MAX_ITEMS 32
#define G_MAX_OUT 4
#define G_LABEL 32

typedef struct gitem {
  int kind;
  char label[G_LABEL];
  int line;
  int64_t n;
  double *v;   /* f, d, expect */
  int64_t *iv; /* int, zeros */
  /* expect: the tolerance in force when it was read */
  int tol_kind;
  int64_t tol_n;
  double tol_scale;
  /* f: the buffer built from v, once per case */
  bk_buffer *buf;
} gitem;

typedef struct gcase {
  const char *file;
  int line;
  char name[128];
  char prim[48];
  char title[200]; /* "file: name dtype", shown in failures */
  bk_dtype dt;
  gitem items[G_MAX_ITEMS];
  int nitems;
  int has_status;
  int status;
  char needle[96];
  int tol_kind;
  int64_t tol_n;
  double tol_scale;
  int has_tol;
  int bad; /* a harness error was reported; stop the case */
} gcase;

/* One output of a primitive: a buffer, or the bmm_scaled flag. */
typedef struct gout {
  const char *label;
  bk_buffer *buf;
  int is_flag;
  int flag;
} gout;

static int g_cases, g_files;
static char g_sources[64]; /* the distinct `source` names seen, for the summary */

static void g_case_free(gcase *c) {
  for (int i = 0; i < c->nitems; i++) {
    free(c->items[i].v);
    free(c->items[i].iv);
    bk_buffer_release(c->items[i].buf);
  }
  c->nitems = 0;
}

static void g_harness_error(gcase *c, int line, const char *what) {
  tl_fail_at(c->file, line, "%s", what);
  c->bad = 1;
}

/* ---- argument lookup (used by the runners) --------------------------------------------- */

static gitem *g_find(gcase *c, int kind, const char *label) {
  for (int i = 0; i < c->nitems; i++)
    if (c->items[i].kind == kind && strcmp(c->items[i].label, label) == 0) return &c->items[i];
  return NULL;
}

/* The buffer argument `label` in the case's dtype, built once; NULL when
 * the case has none (a NULL buffer argument, like a missing bias). */
static bk_buffer *g_opt_buf(gcase *c, const char *label) {
  gitem *it = g_find(c, GI_F, label);
  if (!it) return NULL;
  if (!it->buf) it->buf = tl_buf(c->dt, it->v, it->n);
  return it->buf;
}

static bk_buffer *g_buf(gcase *c, const char *label) {
  bk_buffer *b = g_opt_buf(c, label);
  if (!b && !c->bad) {
    char msg[96];
    snprintf(msg, sizeof msg, "case lacks buffer argument '%s'", label);
    g_harness_error(c, c->line, msg);
  }
  return b;
}

/* An integer array argument; *n receives its length. Never NULL, so an
 * empty dims array is a valid pointer. */
static const int64_t *g_ints(gcase *c, const char *label, int64_t *n) {
  static const int64_t none[1] = {0};
  gitem *it = g_find(c, GI_INT, label);
  if (!it) {
    char msg[96];
    snprintf(msg, sizeof msg, "case lacks integer argument '%s'", label);
    if (!c->bad) g_harness_error(c, c->line, msg);
    *n = 0;
    return none;
  }
  *n = it->n;
  return it->n ? it->iv : none;
}

static int64_t g_int(gcase *c, const char *label) {
  int64_t n;
  const int64_t *v = g_ints(c, label, &n);
  if (n != 1) {
    if (!c->bad) g_harness_error(c, c->line, "an integer scalar argument has not one value");
    return 0;
  }
  return v[0];
}

static double g_dbl(gcase *c, const char *label) {
  gitem *it = g_find(c, GI_D, label);
  if (!it || it->n != 1) {
    if (!c->bad) g_harness_error(c, c->line, "a double argument is missing");
    return 0;
  }
  return it->v[0];
}

/* Host indices as the API takes them (NULL when there are none); the
 * caller frees. */
static uint64_t *g_indices(gcase *c, const char *label) {
  int64_t n;
  const int64_t *v = g_ints(c, label, &n);
  if (n == 0) return NULL;
  uint64_t *u = tl_xmalloc((size_t)n * sizeof *u);
  for (int64_t i = 0; i < n; i++) u[i] = (uint64_t)v[i];
  return u;
}

/* ---- runners: one per primitive, each builds its call from the labels --------------------- */

typedef bk_status (*g_runner)(gcase *c, gout *o);

#define CTX tl_ctx

/* Call shapes several primitives share: a buffer and two or three int64
 * sizes; two buffers and two sizes; a buffer, dims and an int. */
typedef bk_status (*g_fn_x2)(bk_context *, const bk_buffer *, int64_t, int64_t, bk_buffer **);
typedef bk_status (*g_fn_x3)(bk_context *, const bk_buffer *, int64_t, int64_t, int64_t,
                             bk_buffer **);
typedef bk_status (*g_fn_ab2)(bk_context *, const bk_buffer *, const bk_buffer *, int64_t,
                              int64_t, bk_buffer **);
typedef bk_status (*g_fn_dims)(bk_context *, const bk_buffer *, const int64_t *, int, int,
                               bk_buffer **);

/* fn(x, s1, s2) with the arguments labelled x, s1 and s2; one output. */
static bk_status g_run_x2(gcase *c, gout *o, const char *x, const char *s1, const char *s2,
                          g_fn_x2 fn) {
  bk_buffer *b = g_buf(c, x);
  int64_t v1 = g_int(c, s1), v2 = g_int(c, s2);
  o[0].label = "out";
  return c->bad ? BK_ERR_NULL : fn(CTX, b, v1, v2, &o[0].buf);
}

static bk_status g_run_x3(gcase *c, gout *o, const char *x, const char *s1, const char *s2,
                          const char *s3, g_fn_x3 fn) {
  bk_buffer *b = g_buf(c, x);
  int64_t v1 = g_int(c, s1), v2 = g_int(c, s2), v3 = g_int(c, s3);
  o[0].label = "out";
  return c->bad ? BK_ERR_NULL : fn(CTX, b, v1, v2, v3, &o[0].buf);
}

static bk_status g_run_ab2(gcase *c, gout *o, const char *a, const char *b, const char *s1,
                           const char *s2, g_fn_ab2 fn) {
  bk_buffer *ba = g_buf(c, a), *bb = g_buf(c, b);
  int64_t v1 = g_int(c, s1), v2 = g_int(c, s2);
  o[0].label = "out";
  return c->bad ? BK_ERR_NULL : fn(CTX, ba, bb, v1, v2, &o[0].buf);
}

/* fn(x, dims, rank, <the int labelled which>). */
static bk_status g_run_dims(gcase *c, gout *o, const char *which, g_fn_dims fn) {
  bk_buffer *x = g_buf(c, "x");
  int64_t rank;
  const int64_t *dims = g_ints(c, "dims", &rank);
  int v = (int)g_int(c, which);
  o[0].label = "out";
  return c->bad ? BK_ERR_NULL : fn(CTX, x, dims, (int)rank, v, &o[0].buf);
}

static bk_status r_softmax(gcase *c, gout *o) { return g_run_dims(c, o, "axis", bk_softmax); }

static bk_status r_xent_weighted_mean(gcase *c, gout *o) {
  return g_run_ab2(c, o, "logits", "weights", "rows", "cols", bk_xent_weighted_mean);
}

static bk_status r_xent_teacher(gcase *c, gout *o) {
  bk_buffer *s = g_buf(c, "student"), *t = g_buf(c, "teacher");
  int64_t rows = g_int(c, "rows"), cols = g_int(c, "cols");
  int gradient = (int)g_int(c, "gradient");
  o[0].label = "out";
  return c->bad ? BK_ERR_NULL : bk_xent_teacher(CTX, s, t, rows, cols, gradient, &o[0].buf);
}

static bk_status r_conv(gcase *c, gout *o) {
  bk_buffer *x = g_buf(c, "input"), *w = g_buf(c, "kernel"), *b = g_opt_buf(c, "bias");
  int64_t in_rank, k_rank, ns, npb, npa, nd;
  const int64_t *in_dims = g_ints(c, "input_dims", &in_rank);
  const int64_t *k_dims = g_ints(c, "kernel_dims", &k_rank);
  const int64_t *stride = g_ints(c, "stride", &ns);
  const int64_t *pb = g_ints(c, "pad_before", &npb);
  const int64_t *pa = g_ints(c, "pad_after", &npa);
  const int64_t *dil = g_ints(c, "dilation", &nd);
  int64_t sr = g_int(c, "spatial_rank"), groups = g_int(c, "groups");
  /* The library reads spatial_rank entries of each array: a shorter one in
   * a file would be a harness error, not a library one. */
  if (!c->bad && (ns < sr || npb < sr || npa < sr || nd < sr || k_rank < sr + 2))
    g_harness_error(c, c->line, "conv arrays shorter than spatial_rank");
  o[0].label = "out";
  return c->bad ? BK_ERR_NULL
                : bk_conv(CTX, x, w, b, in_dims, (int)in_rank, k_dims, (int)sr, stride, pb, pa,
                          dil, groups, &o[0].buf);
}

static bk_status r_rows_sum(gcase *c, gout *o) {
  return g_run_x2(c, o, "x", "rows", "cols", bk_rows_sum);
}

static bk_status r_rows_max(gcase *c, gout *o) {
  return g_run_x2(c, o, "x", "rows", "cols", bk_rows_max);
}

static bk_status r_rows_first_max_mask(gcase *c, gout *o) {
  return g_run_x2(c, o, "x", "rows", "cols", bk_rows_first_max_mask);
}

static bk_status r_rows_topk_mask(gcase *c, gout *o) {
  return g_run_x3(c, o, "x", "rows", "cols", "k", bk_rows_topk_mask);
}

static bk_status r_rows_masked_softmax(gcase *c, gout *o) {
  return g_run_ab2(c, o, "scores", "mask", "rows", "cols", bk_rows_masked_softmax);
}

static bk_status r_vec_concat(gcase *c, gout *o) {
  return g_run_ab2(c, o, "a", "b", "n", "m", bk_vec_concat);
}

static bk_status r_vec_slice(gcase *c, gout *o) {
  return g_run_x3(c, o, "x", "n", "start", "len", bk_vec_slice);
}

static bk_status r_broadcast_col(gcase *c, gout *o) {
  return g_run_x2(c, o, "vec", "rows", "cols", bk_broadcast_col);
}

typedef bk_status (*g_fn_broadcast)(bk_context *, const bk_buffer *, const int64_t *, int,
                                    const int64_t *, int, const int64_t *, bk_buffer **);

static bk_status broadcast_common(gcase *c, gout *o, const char *in_label, g_fn_broadcast fn) {
  bk_buffer *x = g_buf(c, in_label);
  int64_t in_rank, out_rank, map_n;
  const int64_t *in_dims = g_ints(c, "in_dims", &in_rank);
  const int64_t *out_dims = g_ints(c, "out_dims", &out_rank);
  const int64_t *map = g_ints(c, "axis_map", &map_n);
  if (!c->bad && map_n != out_rank)
    g_harness_error(c, c->line, "axis_map does not have out_rank entries");
  o[0].label = "out";
  if (c->bad) return BK_ERR_NULL;
  return fn(CTX, x, in_dims, (int)in_rank, out_dims, (int)out_rank, map, &o[0].buf);
}

static bk_status r_broadcast_to(gcase *c, gout *o) {
  return broadcast_common(c, o, "x", bk_broadcast_to);
}

static bk_status r_broadcast_to_adjoint(gcase *c, gout *o) {
  return broadcast_common(c, o, "dout", bk_broadcast_to_adjoint);
}

static bk_status r_swap_adjacent(gcase *c, gout *o) {
  return g_run_dims(c, o, "depth", bk_swap_adjacent);
}

static bk_status r_sum_axis(gcase *c, gout *o) { return g_run_dims(c, o, "axis", bk_sum_axis); }

/* Names the n outputs of a primitive, in order. */
static void g_label_outs(gout *o, int n, const char *const *labels) {
  for (int i = 0; i < n; i++) o[i].label = labels[i];
}

static bk_status r_layernorm_forward(gcase *c, gout *o) {
  static const char *const outs[3] = {"out", "normalized", "inv_std"};
  bk_buffer *x = g_buf(c, "x"), *g = g_buf(c, "gamma"), *b = g_buf(c, "beta");
  int64_t rows = g_int(c, "rows"), cols = g_int(c, "cols");
  double eps = g_dbl(c, "eps");
  g_label_outs(o, 3, outs);
  return c->bad ? BK_ERR_NULL
                : bk_layernorm_forward(CTX, x, g, b, rows, cols, eps, &o[0].buf, &o[1].buf,
                                       &o[2].buf);
}

static bk_status r_layernorm_backward(gcase *c, gout *o) {
  static const char *const outs[3] = {"dx", "dgamma", "dbeta"};
  bk_buffer *dy = g_buf(c, "dout"), *n = g_buf(c, "normalized"), *inv = g_buf(c, "inv_std"),
            *g = g_buf(c, "gamma");
  int64_t rows = g_int(c, "rows"), cols = g_int(c, "cols");
  g_label_outs(o, 3, outs);
  return c->bad ? BK_ERR_NULL
                : bk_layernorm_backward(CTX, dy, n, inv, g, rows, cols, &o[0].buf, &o[1].buf,
                                        &o[2].buf);
}

/* The arguments bk_bmm and bk_bmm_scaled share. */
typedef struct g_bmm_args {
  bk_buffer *a, *b;
  int64_t batch, m, n, p;
  int ta, tb;
} g_bmm_args;

static g_bmm_args g_bmm_read(gcase *c) {
  g_bmm_args q;
  q.a = g_buf(c, "A");
  q.b = g_buf(c, "B");
  q.batch = g_int(c, "batch");
  q.m = g_int(c, "m");
  q.n = g_int(c, "n");
  q.p = g_int(c, "p");
  q.ta = (int)g_int(c, "trans_a");
  q.tb = (int)g_int(c, "trans_b");
  return q;
}

static bk_status r_bmm(gcase *c, gout *o) {
  g_bmm_args q = g_bmm_read(c);
  o[0].label = "out";
  return c->bad ? BK_ERR_NULL
                : bk_bmm(CTX, q.a, q.b, q.batch, q.m, q.n, q.p, q.ta, q.tb, &o[0].buf);
}

static bk_status r_bmm_scaled(gcase *c, gout *o) {
  g_bmm_args q = g_bmm_read(c);
  double scale = g_dbl(c, "scale");
  o[0].label = "out";
  o[1].label = "range_loss";
  o[1].is_flag = 1;
  o[1].flag = -1; /* the library must write it */
  return c->bad ? BK_ERR_NULL
                : bk_bmm_scaled(CTX, q.a, q.b, q.batch, q.m, q.n, q.p, q.ta, q.tb, scale,
                                &o[0].buf, &o[1].flag);
}

static bk_status r_rfft(gcase *c, gout *o) { return g_run_x2(c, o, "x", "batch", "n", bk_rfft); }

static bk_status r_irfft(gcase *c, gout *o) {
  return g_run_x2(c, o, "spec", "batch", "n", bk_irfft);
}

static bk_status r_irfft_unnormalized(gcase *c, gout *o) {
  return g_run_x2(c, o, "spec", "batch", "n", bk_irfft_unnormalized);
}

typedef bk_status (*g_fn_scan)(bk_context *, const bk_buffer *, const bk_buffer *,
                               const bk_buffer *, const bk_buffer *, int64_t, int64_t,
                               bk_buffer **);
typedef bk_status (*g_fn_scan_backward)(bk_context *, const bk_buffer *, const bk_buffer *,
                                        const bk_buffer *, const bk_buffer *, const bk_buffer *,
                                        const bk_buffer *, int64_t, int64_t, bk_buffer **,
                                        bk_buffer **, bk_buffer **, bk_buffer **);

static bk_status scan_common(gcase *c, gout *o, g_fn_scan fn) {
  bk_buffer *A = g_buf(c, "A"), *B = g_buf(c, "B"), *X = g_buf(c, "X"), *h0 = g_buf(c, "h0");
  int64_t T = g_int(c, "seq_len"), S = g_int(c, "state");
  o[0].label = "out";
  return c->bad ? BK_ERR_NULL : fn(CTX, A, B, X, h0, T, S, &o[0].buf);
}

static bk_status scan_backward_common(gcase *c, gout *o, g_fn_scan_backward fn) {
  static const char *const outs[4] = {"dA", "dB", "dX", "dh0"};
  bk_buffer *A = g_buf(c, "A"), *B = g_buf(c, "B"), *X = g_buf(c, "X"), *h0 = g_buf(c, "h0"),
            *out = g_buf(c, "out"), *dy = g_buf(c, "dy");
  int64_t T = g_int(c, "seq_len"), S = g_int(c, "state");
  g_label_outs(o, 4, outs);
  return c->bad ? BK_ERR_NULL
                : fn(CTX, A, B, X, h0, out, dy, T, S, &o[0].buf, &o[1].buf, &o[2].buf,
                     &o[3].buf);
}

static bk_status r_scan_diag(gcase *c, gout *o) { return scan_common(c, o, bk_scan_diag); }
static bk_status r_scan_diag_var(gcase *c, gout *o) { return scan_common(c, o, bk_scan_diag_var); }
static bk_status r_scan_diag_backward(gcase *c, gout *o) {
  return scan_backward_common(c, o, bk_scan_diag_backward);
}
static bk_status r_scan_diag_var_backward(gcase *c, gout *o) {
  return scan_backward_common(c, o, bk_scan_diag_var_backward);
}

/* Gather (values_label NULL) or scatter-add of rows by host indices. */
static bk_status rows_index_common(gcase *c, gout *o, const char *values_label) {
  bk_buffer *mat = g_buf(c, "mat"), *val = values_label ? g_buf(c, values_label) : NULL;
  int64_t rows = g_int(c, "rows"), cols = g_int(c, "cols"), k = g_int(c, "k");
  uint64_t *idx = g_indices(c, "indices");
  o[0].label = "out";
  bk_status st = c->bad       ? BK_ERR_NULL
                 : val == NULL ? bk_rows_gather(CTX, mat, rows, cols, idx, k, &o[0].buf)
                               : bk_rows_scatter_add(CTX, mat, val, rows, cols, idx, k, &o[0].buf);
  free(idx);
  return st;
}

static bk_status r_rows_gather(gcase *c, gout *o) { return rows_index_common(c, o, NULL); }

static bk_status r_rows_scatter_add(gcase *c, gout *o) {
  return rows_index_common(c, o, "values");
}

static const struct {
  const char *prim;
  g_runner run;
} g_runners[] = {
    {"softmax", r_softmax},
    {"xent_weighted_mean", r_xent_weighted_mean},
    {"xent_teacher", r_xent_teacher},
    {"conv", r_conv},
    {"rows_sum", r_rows_sum},
    {"rows_max", r_rows_max},
    {"rows_first_max_mask", r_rows_first_max_mask},
    {"rows_topk_mask", r_rows_topk_mask},
    {"rows_masked_softmax", r_rows_masked_softmax},
    {"vec_concat", r_vec_concat},
    {"vec_slice", r_vec_slice},
    {"broadcast_col", r_broadcast_col},
    {"broadcast_to", r_broadcast_to},
    {"broadcast_to_adjoint", r_broadcast_to_adjoint},
    {"swap_adjacent", r_swap_adjacent},
    {"sum_axis", r_sum_axis},
    {"layernorm_forward", r_layernorm_forward},
    {"layernorm_backward", r_layernorm_backward},
    {"bmm", r_bmm},
    {"bmm_scaled", r_bmm_scaled},
    {"rfft", r_rfft},
    {"irfft", r_irfft},
    {"irfft_unnormalized", r_irfft_unnormalized},
    {"scan_diag", r_scan_diag},
    {"scan_diag_backward", r_scan_diag_backward},
    {"scan_diag_var", r_scan_diag_var},
    {"scan_diag_var_backward", r_scan_diag_var_backward},
    {"rows_gather", r_rows_gather},
    {"rows_scatter_add", r_rows_scatter_add},
};

static g_runner g_find_runner(const char *prim) {
  for (size_t i = 0; i < sizeof g_runners / sizeof g_runners[0]; i++)
    if (strcmp(g_runners[i].prim, prim) == 0) return g_runners[i].run;
  return NULL;
}

/* ---- checking one case ------------------------------------------------------------------ */

static void g_release_outs(gout *o) {
  for (int i = 0; i < G_MAX_OUT; i++) {
    bk_buffer_release(o[i].buf);
    o[i].buf = NULL;
  }
}

static gout *g_out_by_label(gout *o, const char *label) {
  for (int i = 0; i < G_MAX_OUT; i++)
    if (o[i].label && strcmp(o[i].label, label) == 0) return &o[i];
  return NULL;
}

static double g_tol(const gitem *e, bk_dtype dt) {
  switch (e->tol_kind) {
  case TOL_ELEM:
    return tl_tol_elem(dt);
  case TOL_RED:
    return tl_tol_red(dt);
  case TOL_CONTRACT:
    return tl_tol_contract(dt, (double)e->tol_n);
  default:
    return 0.0;
  }
}

/* Compares one output with its `expect` line (and its `zeros` line). */
static void g_check_expect(gcase *c, const gitem *e, gout *o) {
  gout *out = g_out_by_label(o, e->label);
  if (!out) {
    tl_fail_at(c->file, e->line, "%s has no output named '%s'", c->prim, e->label);
    return;
  }
  if (out->is_flag) {
    if (e->n != 1 || (double)out->flag != e->v[0])
      tl_fail_at(c->file, e->line, "%s = %d, expected %g", e->label, out->flag,
                 e->n ? e->v[0] : -1.0);
    else
      tl_passed++;
    return;
  }
  if (!out->buf) {
    tl_fail_at(c->file, e->line, "output %s is NULL", e->label);
    return;
  }
  if (bk_buffer_length(out->buf) != e->n) {
    tl_fail_at(c->file, e->line, "%s has length %" PRId64 ", expected %" PRId64, e->label,
               bk_buffer_length(out->buf), e->n);
    return;
  }
  if (bk_buffer_dtype(out->buf) != c->dt) {
    tl_fail_at(c->file, e->line, "%s has the wrong dtype", e->label);
    return;
  }
  double *got = tl_read(out->buf);
  double *want = tl_xmalloc((size_t)e->n * sizeof *want);
  memcpy(want, e->v, (size_t)e->n * sizeof *want);
  tl_round(c->dt, want, e->n);
  if (e->tol_kind == TOL_EXACT)
    tl_exact_at(c->file, e->line, e->label, got, want, e->n);
  else
    tl_close_at(c->file, e->line, e->label, got, want, e->n, g_tol(e, c->dt), e->tol_scale);
  const gitem *z = NULL;
  for (int i = 0; i < c->nitems; i++)
    if (c->items[i].kind == GI_ZEROS && strcmp(c->items[i].label, e->label) == 0)
      z = &c->items[i];
  if (z) {
    int ok = 1;
    for (int64_t i = 0; i < z->n && ok; i++) {
      int64_t at = z->iv[i];
      if (at < 0 || at >= e->n || got[at] != 0.0 || signbit(got[at])) {
        tl_fail_at(c->file, z->line, "%s[%" PRId64 "] = %.17g, expected exactly +0", e->label,
                   at, (at >= 0 && at < e->n) ? got[at] : NAN);
        ok = 0;
      }
    }
    if (ok) tl_passed++;
  }
  free(got);
  free(want);
}

static void g_run_case(gcase *c) {
  g_runner run = g_find_runner(c->prim);
  tl_case = c->title;
  g_cases++;
  if (!run) {
    tl_fail_at(c->file, c->line, "unknown primitive '%s'", c->prim);
    return;
  }
  gout o[G_MAX_OUT], o2[G_MAX_OUT];
  memset(o, 0, sizeof o);
  memset(o2, 0, sizeof o2);
  /* Out-parameters start non-NULL so a failure must clear them. */
  for (int i = 0; i < G_MAX_OUT; i++) o[i].buf = (bk_buffer *)&o[i];
  bk_status st = run(c, o);
  if (c->bad) {
    for (int i = 0; i < G_MAX_OUT; i++) o[i].buf = NULL;
    return;
  }
  for (int i = 0; i < G_MAX_OUT; i++)
    if (!o[i].label) o[i].buf = NULL; /* slots the primitive does not have */

  if (c->has_status) {
    if ((int)st != c->status) {
      tl_fail_at(c->file, c->line, "%s returned %d (%s), expected %d (%s): %s", c->prim, (int)st,
                 bk_status_string(st), c->status, bk_status_string((bk_status)c->status),
                 bk_last_error());
    } else if (strcmp(c->needle, "-") != 0 && !strstr(bk_last_error(), c->needle)) {
      tl_fail_at(c->file, c->line, "message \"%s\" does not mention \"%s\"", bk_last_error(),
                 c->needle);
    } else {
      tl_passed++;
    }
    int cleared = 1;
    for (int i = 0; i < G_MAX_OUT; i++) {
      if (o[i].is_flag && o[i].flag != 0 && st != BK_OK) cleared = 0;
      if (o[i].label && !o[i].is_flag && o[i].buf) {
        cleared = 0;
        if (st == BK_OK) bk_buffer_release(o[i].buf);
        o[i].buf = NULL;
      }
    }
    TL_CHECK(cleared, "out-parameters not cleared (NULL, flag 0) on failure");
    return;
  }
  if (st != BK_OK) {
    tl_fail_at(c->file, c->line, "%s returned %d (%s): %s", c->prim, (int)st,
               bk_status_string(st), bk_last_error());
    for (int i = 0; i < G_MAX_OUT; i++) o[i].buf = NULL;
    return;
  }
  for (int i = 0; i < c->nitems; i++)
    if (c->items[i].kind == GI_EXPECT) g_check_expect(c, &c->items[i], o);

  /* Determinism: a second run gives the same bits. */
  bk_status st2 = run(c, o2);
  if (st2 != BK_OK) {
    tl_fail_at(c->file, c->line, "second run returned %d: %s", (int)st2, bk_last_error());
  } else {
    int same = 1;
    for (int i = 0; i < G_MAX_OUT; i++) {
      if (!o[i].label) continue;
      if (o[i].is_flag)
        same &= o[i].flag == o2[i].flag;
      else
        same &= o[i].buf && o2[i].buf && tl_same_bits(o[i].buf, o2[i].buf);
    }
    TL_CHECK(same, "two runs of %s differ", c->prim);
  }
  g_release_outs(o);
  g_release_outs(o2);

  /* Inputs unchanged. */
  for (int i = 0; i < c->nitems; i++) {
    gitem *it = &c->items[i];
    if (it->kind == GI_F && it->buf)
      tl_unchanged_at(c->file, it->line, it->label, it->buf, it->v, it->n);
  }
}

/* ---- parsing ------------------------------------------------------------------------------ */

static char *g_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *text = tl_xmalloc(cap);
  size_t got;
  while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
    len += got;
    if (len + 1 == cap) {
      cap *= 2;
      char *bigger = realloc(text, cap);
      if (!bigger) {
        fprintf(stderr, "test harness out of memory\n");
        exit(2);
      }
      text = bigger;
    }
  }
  fclose(f);
  text[len] = '\0';
  return text;
}

/* Reads the next whitespace-separated token of a line into tok. */
static const char *g_token(const char *p, char *tok, size_t cap) {
  while (*p == ' ' || *p == '\t') p++;
  size_t n = 0;
  while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
    if (n + 1 < cap) tok[n++] = *p;
    p++;
  }
  tok[n] = '\0';
  return p;
}

/* Parses "<label> <n> v..." into a new item; returns 0 on a malformed line. */
static int g_parse_values(gcase *c, int kind, const char *p, int line) {
  if (c->nitems == G_MAX_ITEMS) return 0;
  gitem *it = &c->items[c->nitems];
  memset(it, 0, sizeof *it);
  it->kind = kind;
  it->line = line;
  p = g_token(p, it->label, sizeof it->label);
  char *end;
  long long n = strtoll(p, &end, 10);
  if (end == p || n < 0 || it->label[0] == '\0') return 0;
  p = end;
  it->n = n;
  if (kind == GI_INT || kind == GI_ZEROS)
    it->iv = tl_xmalloc((size_t)n * sizeof *it->iv);
  else
    it->v = tl_xmalloc((size_t)n * sizeof *it->v);
  c->nitems++; /* owned by the case from here, freed even on a parse error */
  for (long long i = 0; i < n; i++) {
    if (kind == GI_INT || kind == GI_ZEROS)
      it->iv[i] = strtoll(p, &end, 10);
    else
      it->v[i] = strtod(p, &end);
    if (end == p) return 0;
    p = end;
  }
  while (*p == ' ' || *p == '\t' || *p == '\r') p++;
  if (*p && *p != '\n') return 0;
  if (kind == GI_EXPECT) {
    if (!c->has_tol) return 0;
    it->tol_kind = c->tol_kind;
    it->tol_n = c->tol_n;
    it->tol_scale = c->tol_scale;
  }
  return 1;
}

static int g_parse_tol(gcase *c, const char *p) {
  char kind[48];
  p = g_token(p, kind, sizeof kind);
  char *end;
  double scale = strtod(p, &end);
  if (end == p) return 0;
  c->tol_n = 0;
  if (strcmp(kind, "exact") == 0)
    c->tol_kind = TOL_EXACT;
  else if (strcmp(kind, "elem") == 0)
    c->tol_kind = TOL_ELEM;
  else if (strcmp(kind, "red") == 0)
    c->tol_kind = TOL_RED;
  else if (strncmp(kind, "contract:", 9) == 0) {
    c->tol_kind = TOL_CONTRACT;
    c->tol_n = strtoll(kind + 9, NULL, 10);
  } else
    return 0;
  c->tol_scale = scale;
  c->has_tol = 1;
  return 1;
}

static void g_run_file(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  char *text = g_read_file(path);
  if (!text) {
    tl_fail_at(path, 0, "cannot read the golden file");
    return;
  }
  g_files++;
  static gcase c; /* large: kept out of the stack */
  int in_case = 0, line = 0, cases_here = 0, source_seen = 0;
  const char *p = text;
  while (*p) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    line++;
    char key[16];
    const char *rest = g_token(p, key, sizeof key);
    int ok = 1;
    if (key[0] == '\0' || key[0] == '#') {
      /* blank or comment */
    } else if (strcmp(key, "source") == 0) {
      char src[16];
      g_token(rest, src, sizeof src);
      ok = src[0] != '\0';
      if (ok && !strstr(g_sources, src) && strlen(g_sources) + strlen(src) + 2 < sizeof g_sources) {
        if (g_sources[0]) strcat(g_sources, " ");
        strcat(g_sources, src);
      }
      source_seen = 1;
    } else if (strcmp(key, "case") == 0) {
      if (in_case) g_case_free(&c);
      memset(&c, 0, sizeof c);
      c.file = name;
      c.line = line;
      char dt[16];
      rest = g_token(rest, c.name, sizeof c.name);
      rest = g_token(rest, c.prim, sizeof c.prim);
      g_token(rest, dt, sizeof dt);
      ok = !in_case && c.name[0] && c.prim[0] && (!strcmp(dt, "f32") || !strcmp(dt, "f64"));
      c.dt = strcmp(dt, "f32") == 0 ? BK_F32 : BK_F64;
      snprintf(c.title, sizeof c.title, "%s: %s %s", name, c.name, dt);
      in_case = 1;
    } else if (!in_case) {
      ok = 0;
    } else if (strcmp(key, "note") == 0) {
      /* documentation for the reader of a failure */
    } else if (strcmp(key, "int") == 0) {
      ok = g_parse_values(&c, GI_INT, rest, line);
    } else if (strcmp(key, "f") == 0) {
      ok = g_parse_values(&c, GI_F, rest, line);
    } else if (strcmp(key, "d") == 0) {
      ok = g_parse_values(&c, GI_D, rest, line);
    } else if (strcmp(key, "expect") == 0) {
      ok = g_parse_values(&c, GI_EXPECT, rest, line);
    } else if (strcmp(key, "zeros") == 0) {
      ok = g_parse_values(&c, GI_ZEROS, rest, line);
    } else if (strcmp(key, "tol") == 0) {
      ok = g_parse_tol(&c, rest);
    } else if (strcmp(key, "status") == 0) {
      char *end;
      c.status = (int)strtol(rest, &end, 10);
      ok = end != rest;
      g_token(end, c.needle, sizeof c.needle);
      c.has_status = 1;
    } else if (strcmp(key, "end") == 0) {
      g_run_case(&c);
      g_case_free(&c);
      in_case = 0;
      cases_here++;
    } else {
      ok = 0;
    }
    if (!ok) {
      tl_fail_at(name, line, "malformed line: %.60s", p);
      if (in_case) g_case_free(&c);
      in_case = 0;
      /* Skip to the next case: the rest of this one cannot be trusted. */
      while (*p) {
        const char *nl = strchr(p, '\n');
        if (!nl) {
          p += strlen(p);
          break;
        }
        p = nl + 1;
        line++;
        if (strncmp(p, "case ", 5) == 0) break;
      }
      continue;
    }
    p += len;
    if (*p == '\n') p++;
  }
  if (in_case) {
    tl_fail_at(name, line, "unterminated case %s", c.name);
    g_case_free(&c);
  }
  if (!source_seen) tl_fail_at(name, 1, "no source line");
  if (cases_here == 0) tl_fail_at(name, line, "no cases");
  free(text);
}

static int g_cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every *.txt file of the golden folder in name order. */
static void g_run_all(void) {
  const char *dir = getenv("BK_GOLDEN_DIR");
  if (!dir || !*dir) dir = BK_GOLDEN_DIR;
  DIR *d = opendir(dir);
  if (!d) {
    tl_fail_at(dir, 0, "cannot open the golden folder (set BK_GOLDEN_DIR)");
    return;
  }
  char **names = NULL;
  size_t count = 0, cap = 0;
  struct dirent *ent;
  while ((ent = readdir(d)) != NULL) {
    size_t len = strlen(ent->d_name);
    if (len < 5 || strcmp(ent->d_name + len - 4, ".txt") != 0) continue;
    if (count == cap) {
      cap = cap ? 2 * cap : 16;
      char **bigger = realloc(names, cap * sizeof *names);
      if (!bigger) {
        fprintf(stderr, "test harness out of memory\n");
        exit(2);
      }
      names = bigger;
    }
    names[count] = tl_xmalloc(len + 1);
    memcpy(names[count], ent->d_name, len + 1);
    count++;
  }
  closedir(d);
  if (count == 0) tl_fail_at(dir, 0, "no golden files (*.txt) found");
  qsort(names, count, sizeof *names, g_cmp_names);
  for (size_t i = 0; i < count; i++) {
    g_run_file(dir, names[i]);
    free(names[i]);
  }
  free(names);
}

int main(void) {
  tl_init();
  g_run_all();
  tl_case = "";
  printf("golden: %d cases from %d files (source: %s)\n", g_cases, g_files,
         g_sources[0] ? g_sources : "none");
  return tl_finish();
}
