/*
 * bufkern — the command-line tool.
 *
 *   bufkern info                  version, build options, BLAS, devices
 *   bufkern demo [options]        model blocks forward and backward, checked
 *   bufkern bench [options]       timings of every primitive
 *   bufkern help [command]
 *
 * Errors are printed with the status name and bk_last_error()'s text.
 */
#define _POSIX_C_SOURCE 200809L

#include "bufkern.h"
#include "examples.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef BK_TOOL_HAVE_BENCH
int bk_tool_bench(int argc, char **argv);
#endif

/* ---- helpers ---------------------------------------------------------------- */

static int report(bk_status st, const char *what) {
  if (st == BK_OK) return 0;
  fprintf(stderr, "bufkern: %s failed: %s (%d): %s\n", what, bk_status_string(st), (int)st,
          bk_last_error());
  return 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Parses "cpu" or "cuda:N" (or "cuda"). */
static int parse_device(const char *s, bk_device *d) {
  if (strcmp(s, "cpu") == 0) {
    *d = (bk_device){BK_DEVICE_CPU, 0};
    return 1;
  }
  if (strncmp(s, "cuda", 4) == 0) {
    d->kind = BK_DEVICE_CUDA;
    d->index = s[4] == ':' ? atoi(s + 5) : 0;
    return s[4] == '\0' || s[4] == ':';
  }
  return 0;
}

static bk_device default_device(void) {
  if (bk_cuda_device_count() > 0) return (bk_device){BK_DEVICE_CUDA, 0};
  return (bk_device){BK_DEVICE_CPU, 0};
}

static const char *device_text(bk_device d, char *buf, size_t cap) {
  if (d.kind == BK_DEVICE_CPU)
    snprintf(buf, cap, "cpu");
  else
    snprintf(buf, cap, "cuda:%" PRId32, d.index);
  return buf;
}

/* ---- info --------------------------------------------------------------------- */

static int cmd_info(int argc, char **argv) {
  (void)argc;
  (void)argv;
  printf("bufkern %s\n%s", bk_version(), bk_build_info());
  int n = bk_cuda_device_count();
  printf("cuda devices: %d\n", n);
  for (int i = 0; i < n; i++) {
    bk_context *ctx = NULL;
    if (bk_context_create((bk_device){BK_DEVICE_CUDA, i}, &ctx) == BK_OK) {
      printf("  cuda:%d available\n", i);
      bk_context_destroy(ctx);
    } else {
      printf("  cuda:%d unavailable: %s\n", i, bk_last_error());
    }
  }
  return 0;
}

/* ---- demo --------------------------------------------------------------------- */

typedef struct demo_opts {
  bk_device device;
  bk_dtype dtype;
  int steps;
} demo_opts;

/* Loss of the attention head: L = <O, G> for a fixed G, in float64 on the host. */
static bk_status attention_loss(bk_context *ctx, ex_attention *att, const double *q,
                                const double *k, const double *v, const double *g,
                                double *loss) {
  int64_t n = att->T * att->d;
  bk_buffer *Q = NULL, *K = NULL, *V = NULL, *G = NULL, *O = NULL, *L = NULL;
  bk_status st = ex_from_doubles(ctx, BK_F64, q, n, &Q);
  if (st == BK_OK) st = ex_from_doubles(ctx, BK_F64, k, n, &K);
  if (st == BK_OK) st = ex_from_doubles(ctx, BK_F64, v, n, &V);
  if (st == BK_OK) st = ex_from_doubles(ctx, BK_F64, g, n, &G);
  if (st == BK_OK) st = ex_attention_forward(ctx, att, Q, K, V, &O);
  if (st == BK_OK) st = ex_dot(ctx, O, G, n, &L);
  if (st == BK_OK) st = ex_to_doubles(ctx, L, loss, 1);
  bk_buffer_release(Q);
  bk_buffer_release(K);
  bk_buffer_release(V);
  bk_buffer_release(G);
  bk_buffer_release(O);
  bk_buffer_release(L);
  return st;
}

static uint64_t demo_rng = 88172645463325252ull;
static double demo_uniform(void) {
  demo_rng ^= demo_rng << 13;
  demo_rng ^= demo_rng >> 7;
  demo_rng ^= demo_rng << 17;
  return (double)(demo_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* Attention head: gradients of L = <O, G> by the backward composition,
 * against central finite differences of every input entry, in float64. */
static int demo_attention(bk_context *ctx, double *max_err, double *ms_per_step) {
  const int64_t T = 8, d = 4, n = T * d;
  double q[32], k[32], v[32], g[32];
  for (int64_t i = 0; i < n; i++) {
    q[i] = demo_uniform();
    k[i] = demo_uniform();
    v[i] = demo_uniform();
    g[i] = demo_uniform();
  }
  ex_attention att;
  bk_status st = ex_attention_init(ctx, BK_F64, T, d, &att);
  bk_buffer *Q = NULL, *K = NULL, *V = NULL, *G = NULL, *O = NULL;
  bk_buffer *dQ = NULL, *dK = NULL, *dV = NULL;
  double gq[32], gk[32], gv[32];
  double t0 = now_s();
  if (st == BK_OK) st = ex_from_doubles(ctx, BK_F64, q, n, &Q);
  if (st == BK_OK) st = ex_from_doubles(ctx, BK_F64, k, n, &K);
  if (st == BK_OK) st = ex_from_doubles(ctx, BK_F64, v, n, &V);
  if (st == BK_OK) st = ex_from_doubles(ctx, BK_F64, g, n, &G);
  if (st == BK_OK) st = ex_attention_forward(ctx, &att, Q, K, V, &O);
  if (st == BK_OK) st = ex_attention_backward(ctx, &att, Q, K, V, G, &dQ, &dK, &dV);
  if (st == BK_OK) st = ex_to_doubles(ctx, dQ, gq, n);
  if (st == BK_OK) st = ex_to_doubles(ctx, dK, gk, n);
  if (st == BK_OK) st = ex_to_doubles(ctx, dV, gv, n);
  *ms_per_step = (now_s() - t0) * 1e3;
  double worst = 0;
  const double h = 1e-6;
  for (int which = 0; which < 3 && st == BK_OK; which++) {
    double *x = which == 0 ? q : which == 1 ? k : v;
    const double *grad = which == 0 ? gq : which == 1 ? gk : gv;
    for (int64_t i = 0; i < n && st == BK_OK; i++) {
      double keep = x[i], lp = 0, lm = 0;
      x[i] = keep + h;
      st = attention_loss(ctx, &att, q, k, v, g, &lp);
      x[i] = keep - h;
      if (st == BK_OK) st = attention_loss(ctx, &att, q, k, v, g, &lm);
      x[i] = keep;
      double fd = (lp - lm) / (2 * h);
      double err = fabs(fd - grad[i]) / (1.0 + fabs(fd));
      if (err > worst) worst = err;
    }
  }
  *max_err = worst;
  bk_buffer_release(Q);
  bk_buffer_release(K);
  bk_buffer_release(V);
  bk_buffer_release(G);
  bk_buffer_release(O);
  bk_buffer_release(dQ);
  bk_buffer_release(dK);
  bk_buffer_release(dV);
  ex_attention_free(&att);
  if (report(st, "attention demo")) return -1;
  return worst < 1e-6 ? 1 : 0;
}

static int cmd_demo(int argc, char **argv) {
  demo_opts o = {default_device(), BK_F32, 200};
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      if (!parse_device(argv[++i], &o.device)) {
        fprintf(stderr, "bufkern demo: --device takes cpu or cuda:N, not %s\n", argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
      const char *t = argv[++i];
      if (strcmp(t, "f32") == 0)
        o.dtype = BK_F32;
      else if (strcmp(t, "f64") == 0)
        o.dtype = BK_F64;
      else {
        fprintf(stderr, "bufkern demo: --dtype takes f32 or f64, not %s\n", t);
        return 2;
      }
    } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      o.steps = atoi(argv[++i]);
    } else {
      fprintf(stderr, "bufkern demo: unknown option %s (see bufkern help demo)\n", argv[i]);
      return 2;
    }
  }
  char dev[32];
  bk_context *ctx = NULL;
  if (report(bk_context_create(o.device, &ctx), "bk_context_create")) return 1;
  printf("bufkern demo on %s\n\n", device_text(o.device, dev, sizeof dev));
  printf("| block | check | max error | ms per step |\n|---|---|---|---|\n");
  double err = 0, ms = 0;
  int ok = demo_attention(ctx, &err, &ms);
  printf("| causal attention head (T=8, d=4) | gradient vs finite differences (f64) | %.2e | %.3f |\n",
         err, ms);
  bk_context_destroy(ctx);
  if (ok != 1) {
    printf("\nFAILED\n");
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
          "  demo     run model blocks forward and backward with gradient checks\n"
          "           options: --device cpu|cuda:N  --dtype f32|f64  --steps N\n"
          "  bench    time every primitive (see bufkern bench --help)\n"
          "  help     this text\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "info") == 0) return cmd_info(argc - 2, argv + 2);
  if (strcmp(cmd, "demo") == 0) return cmd_demo(argc - 2, argv + 2);
#ifdef BK_TOOL_HAVE_BENCH
  if (strcmp(cmd, "bench") == 0) return bk_tool_bench(argc - 2, argv + 2);
#endif
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "bufkern: unknown command %s\n", cmd);
  usage(stderr);
  return 2;
}
