/*
 * bench_latency.c — `bufkern bench --latency`: the host cost of one small
 * call of each family, against the floors measured in the same run on the
 * same stream.
 *
 * Each figure is `calls` calls in a row with one stream synchronization at
 * the end, so it is the rate at which the host can issue the call (the
 * device finishes each tiny kernel long before the next is queued). Every
 * primitive allocates its output and the loop releases it, so primitives
 * are compared with an empty launch between a stream-ordered allocation and
 * free ("alloc floor"); bk_bmm also with a bare cuBLAS product of the same
 * shape and the same allocation ("cuBLAS floor"). The bounds: a primitive
 * of one kernel at most the alloc floor + 1 us, bk_bmm at most the cuBLAS
 * floor + 1 us, a primitive with host indices at most the alloc floor +
 * 2 us.
 */
#include "bench_latency.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

#ifdef BK_HAVE_CUDA
#include <cuda_runtime.h>

enum { LAT_N = 8 };

/* The inputs every small call reads: 8 x 8 matrices, 8-vectors, host
 * indices. */
typedef struct lat_inputs {
  bk_buffer *m, *m2, *v8, *ones, *cube, *vals; /* (8,8), (8,8), (8), (8,8) of 1, (2,4,8), (4,8) */
} lat_inputs;

static const uint64_t lat_idx[4] = {1, 6, 3, 6};

typedef struct lat_case {
  const char *name;
  int kind; /* 0: one kernel; 1: bk_bmm; 2: host indices */
  bk_status (*run)(bk_context *ctx, const lat_inputs *in, bk_buffer **out);
} lat_case;

static const int64_t lat_d88[2] = {LAT_N, LAT_N}, lat_d248[3] = {2, 4, 8};

static bk_status l_softmax(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_softmax(c, i->m, lat_d88, 2, 1, o);
}
static bk_status l_rows_sum(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_rows_sum(c, i->m, LAT_N, LAT_N, o);
}
static bk_status l_rows_max(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_rows_max(c, i->m, LAT_N, LAT_N, o);
}
static bk_status l_masked(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_rows_masked_softmax(c, i->m, i->ones, LAT_N, LAT_N, o);
}
static bk_status l_xent(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_xent_weighted_mean(c, i->m, i->m2, LAT_N, LAT_N, o);
}
static bk_status l_bcol(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_broadcast_col(c, i->v8, LAT_N, LAT_N, o);
}
static bk_status l_swap(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_swap_adjacent(c, i->cube, lat_d248, 3, 1, o);
}
static bk_status l_sum_axis(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_sum_axis(c, i->cube, lat_d248, 3, 1, o);
}
static bk_status l_scan(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_scan_diag(c, i->v8, i->v8, i->m, i->v8, LAT_N, LAT_N, o);
}
static bk_status l_bmm(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_bmm(c, i->m, i->m2, 1, LAT_N, LAT_N, LAT_N, 0, 0, o);
}
static bk_status l_gather(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_rows_gather(c, i->m, LAT_N, LAT_N, lat_idx, 4, o);
}
static bk_status l_scatter(bk_context *c, const lat_inputs *i, bk_buffer **o) {
  return bk_rows_scatter_add(c, i->m, i->vals, LAT_N, LAT_N, lat_idx, 4, o);
}

static const lat_case lat_cases[] = {
    {"softmax 8x8", 0, l_softmax},
    {"rows_sum 8x8", 0, l_rows_sum},
    {"rows_max 8x8", 0, l_rows_max},
    {"rows_masked_softmax 8x8", 0, l_masked},
    {"xent_weighted_mean 8x8", 0, l_xent},
    {"broadcast_col 8 -> 8x8", 0, l_bcol},
    {"swap_adjacent 2x4x8", 0, l_swap},
    {"sum_axis 2x4x8", 0, l_sum_axis},
    {"scan_diag 8x8", 0, l_scan},
    {"bmm 1x8x8x8", 1, l_bmm},
    {"rows_gather 4 rows, host indices", 2, l_gather},
    {"rows_scatter_add 4 rows, host indices", 2, l_scatter},
};
#define LAT_CASES ((int)(sizeof lat_cases / sizeof lat_cases[0]))

static bk_status lat_make(bk_context *ctx, bk_dtype dt, int64_t n, double base, bk_buffer **out) {
  float v[64];
  for (int64_t i = 0; i < n; i++) v[i] = (float)(base + 0.125 * (double)(i % 13));
  return bk_buffer_from_host(ctx, dt, v, n, out);
}

/* calls of one case with one synchronization at the end; *us per call. */
static bk_status lat_time(bk_context *ctx, const lat_case *lc, const lat_inputs *in, int calls,
                          double *us) {
  bk_buffer *o = NULL;
  for (int i = 0; i < calls / 10 + 1; i++) {
    bk_status st = lc->run(ctx, in, &o);
    if (st != BK_OK) return st;
    bk_buffer_release(o);
  }
  bk_status st = bk_context_synchronize(ctx);
  if (st != BK_OK) return st;
  const double t0 = cli_now();
  for (int i = 0; i < calls; i++) {
    st = lc->run(ctx, in, &o);
    if (st != BK_OK) return st;
    bk_buffer_release(o);
  }
  st = bk_context_synchronize(ctx);
  *us = 1e6 * (cli_now() - t0) / calls;
  return st;
}

int bk_tool_bench_latency(bk_device dev, int calls) {
  if (dev.kind != BK_DEVICE_CUDA) {
    fprintf(stderr, "bench --latency: measures per-call cost on a CUDA device (--device cuda:N)\n");
    return 1;
  }
  bk_context *ctx = NULL;
  if (cli_report(bk_context_create(dev, &ctx), "creating the context")) return 1;
  cudaStream_t s = NULL;
  int failed = 0;
  lat_inputs in = {0};
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    fprintf(stderr, "bench --latency: cannot create a stream\n");
    bk_context_destroy(ctx);
    return 1;
  }
  bk_status st = bk_context_set_stream(ctx, s);
  if (st == BK_OK) st = lat_make(ctx, BK_F32, 64, -1.0, &in.m);
  if (st == BK_OK) st = lat_make(ctx, BK_F32, 64, 0.25, &in.m2);
  if (st == BK_OK) st = lat_make(ctx, BK_F32, 8, 0.5, &in.v8);
  if (st == BK_OK) st = lat_make(ctx, BK_F32, 64, 1.0, &in.cube);
  if (st == BK_OK) st = lat_make(ctx, BK_F32, 32, -0.5, &in.vals);
  if (st == BK_OK) {
    float ones[64];
    for (int i = 0; i < 64; i++) ones[i] = 1.0f;
    st = bk_buffer_from_host(ctx, BK_F32, ones, 64, &in.ones);
  }
  if (st == BK_OK) st = bk_context_synchronize(ctx);
  if (cli_report(st, "making the inputs")) failed = 1;

  double empty = 0, alloc = 0, cublas = 0;
  if (!failed && (bk_floor_empty(s, calls, &empty) != 0 ||
                  bk_floor_alloc(s, calls, LAT_N * LAT_N * sizeof(float), &alloc) != 0 ||
                  bk_floor_cublas(s, calls, LAT_N, bk_buffer_data(in.m), bk_buffer_data(in.m2),
                                  &cublas) != 0)) {
    fprintf(stderr, "bench --latency: a floor measurement failed (CUDA error)\n");
    failed = 1;
  }
  if (!failed) {
    char dv[32];
    printf("per-call cost on %s, float32, %d calls each, one synchronization at the end\n\n",
           cli_device_text(dev, dv, sizeof dv), calls);
    printf("%-40s %9s %10s %10s  %s\n", "call", "us/call", "floor", "excess", "bound");
    printf("%-40s %9.2f\n", "floor: empty kernel launch", empty);
    printf("%-40s %9.2f\n", "floor: launch + cudaMallocAsync/FreeAsync", alloc);
    printf("%-40s %9.2f\n", "floor: cublasSgemm 8x8x8 + alloc/free", cublas);
    for (int k = 0; k < LAT_CASES; k++) {
      const lat_case *lc = &lat_cases[k];
      double us = 0;
      st = lat_time(ctx, lc, &in, calls, &us);
      if (cli_report(st, lc->name)) {
        failed = 1;
        continue;
      }
      const double floor = lc->kind == 1 ? cublas : alloc;
      const double slack = lc->kind == 2 ? 2.0 : 1.0;
      const double excess = us - floor;
      printf("%-40s %9.2f %10.2f %+10.2f  %s %s + %.0f us\n", lc->name, us, floor, excess,
             excess <= slack ? "ok  " : "OVER", lc->kind == 1 ? "cuBLAS" : "alloc", slack);
    }
  }
  bk_buffer_release(in.m);
  bk_buffer_release(in.m2);
  bk_buffer_release(in.v8);
  bk_buffer_release(in.cube);
  bk_buffer_release(in.ones);
  bk_buffer_release(in.vals);
  if (cli_report(bk_context_reset_stream(ctx), "leaving the timing stream")) failed = 1;
  bk_context_destroy(ctx);
  cudaStreamDestroy(s);
  return failed;
}

#else

int bk_tool_bench_latency(bk_device dev, int calls) {
  (void)dev;
  (void)calls;
  fprintf(stderr, "bench --latency: this build has no CUDA backend\n");
  return 1;
}

#endif /* BK_HAVE_CUDA */
