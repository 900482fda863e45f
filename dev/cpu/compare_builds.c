/*
 * compare_builds.c — runs the CPU exponential kernels and the row reductions
 * of two builds of the library side by side on the same inputs and reports
 * every case whose outputs differ in any bit. For checking that a change
 * keeps results bitwise, and that the code paths (baseline x86-64, AVX2,
 * x86-64-v4) agree: build one copy with -DBK_CPU_NO_CLONES (baseline only)
 * or -DBK_CPU_NO_512 (no x86-64-v4 path) and compare it with the default
 * build, or compare with a copy of the library from before the change.
 *
 *   cc -O2 -Iinclude dev/cpu/compare_builds.c -o /tmp/compare_builds -ldl -lm
 *   cmake -S . -B /tmp/b-base -DCMAKE_BUILD_TYPE=Release -DBK_CUDA=OFF \
 *         -DCMAKE_C_FLAGS=-DBK_CPU_NO_CLONES && cmake --build /tmp/b-base --target bufkern
 *   for t in 1 2 8; do OMP_NUM_THREADS=$t /tmp/compare_builds \
 *       /tmp/b-base/libbufkern.so build/libbufkern.so; done
 *
 * The third argument 0 leaves NaN, -inf, zeros and whole -inf rows out of
 * the inputs. NANEQ=1 in the environment counts two NaNs as equal whatever
 * their sign and payload (the baseline and vector paths give NaNs of
 * opposite sign in the narrow softmax). Cases: softmax along the last and a
 * middle axis, masked softmax, weighted cross-entropy, teacher loss and
 * gradient, layer-norm forward, row sum; float32 and float64; widths from 1
 * to 600000 (the widest streamed and read once). Exit status 1 when a case
 * differs.
 */
#define _GNU_SOURCE
#include "bufkern.h"
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct {
  void *h;
  bk_status (*from_host)(bk_context *, bk_dtype, const void *, int64_t, bk_buffer **);
  void (*release)(bk_buffer *);
  void *(*data)(const bk_buffer *);
  int64_t (*len)(const bk_buffer *);
  bk_status (*softmax)(bk_context *, const bk_buffer *, const int64_t *, int, int, bk_buffer **);
  bk_status (*masked)(bk_context *, const bk_buffer *, const bk_buffer *, int64_t, int64_t,
                      bk_buffer **);
  bk_status (*xw)(bk_context *, const bk_buffer *, const bk_buffer *, int64_t, int64_t,
                  bk_buffer **);
  bk_status (*xt)(bk_context *, const bk_buffer *, const bk_buffer *, int64_t, int64_t, int,
                  bk_buffer **);
  bk_status (*rs)(bk_context *, const bk_buffer *, int64_t, int64_t, bk_buffer **);
  bk_status (*ln)(bk_context *, const bk_buffer *, const bk_buffer *, const bk_buffer *, int64_t,
                  int64_t, double, bk_buffer **, bk_buffer **, bk_buffer **);
} lib;
static void load(lib *l, const char *p) {
  l->h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
  if (!l->h) {
    fprintf(stderr, "%s\n", dlerror());
    exit(1);
  }
  *(void **)&l->from_host = dlsym(l->h, "bk_buffer_from_host");
  *(void **)&l->release = dlsym(l->h, "bk_buffer_release");
  *(void **)&l->data = dlsym(l->h, "bk_buffer_data");
  *(void **)&l->len = dlsym(l->h, "bk_buffer_length");
  *(void **)&l->softmax = dlsym(l->h, "bk_softmax");
  *(void **)&l->masked = dlsym(l->h, "bk_rows_masked_softmax");
  *(void **)&l->xw = dlsym(l->h, "bk_xent_weighted_mean");
  *(void **)&l->xt = dlsym(l->h, "bk_xent_teacher");
  *(void **)&l->ln = dlsym(l->h, "bk_layernorm_forward");
  *(void **)&l->rs = dlsym(l->h, "bk_rows_sum");
}
static uint64_t S = 7;
static double ur(void) {
  S = S * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(S >> 11) / 9007199254740992.0;
}
/* returns concatenated output bytes */
static char *run(lib *l, int op, bk_dtype dt, const void *x, const void *y, const void *g,
                 int64_t rows, int64_t cols, int64_t inner, size_t *nb) {
  size_t es = dt == BK_F32 ? 4 : 8;
  int64_t n = rows * cols * inner;
  bk_buffer *A, *B, *G, *o = NULL, *o2 = NULL, *o3 = NULL;
  int st;
  l->from_host(NULL, dt, x, n, &A);
  l->from_host(NULL, dt, y, n, &B);
  l->from_host(NULL, dt, g, cols, &G);
  int64_t dims[3] = {rows, cols, inner};
  switch (op) {
  case 0:
    st = l->softmax(NULL, A, dims, inner > 1 ? 3 : 2, 1, &o);
    break;
  case 1:
    st = l->masked(NULL, A, B, rows, cols, &o);
    break;
  case 2:
    st = l->xw(NULL, A, B, rows, cols, &o);
    break;
  case 3:
    st = l->xt(NULL, A, B, rows, cols, 0, &o);
    break;
  case 4:
    st = l->xt(NULL, A, B, rows, cols, 1, &o);
    break;
  case 6:
    st = l->rs(NULL, A, rows, cols, &o);
    break;
  default:
    st = l->ln(NULL, A, G, G, rows, cols, 1e-5, &o, &o2, &o3);
  }
  if (st) {
    fprintf(stderr, "status %d op %d\n", st, op);
    exit(1);
  }
  size_t tot = 0;
  bk_buffer *os[3] = {o, o2, o3};
  for (int k = 0; k < 3; k++)
    if (os[k])
      tot += l->len(os[k]) * es;
  char *r = malloc(tot + 1);
  size_t p = 0;
  for (int k = 0; k < 3; k++)
    if (os[k]) {
      size_t b = l->len(os[k]) * es;
      if (b)
        memcpy(r + p, l->data(os[k]), b);
      p += b;
      l->release(os[k]);
    }
  l->release(A);
  l->release(B);
  l->release(G);
  *nb = tot;
  return r;
}
int main(int argc, char **argv) {
  lib L0, L1;
  load(&L0, argv[1]);
  load(&L1, argv[2]);
  int special = argc > 3 ? atoi(argv[3]) : 1;
  static const int64_t colsl[] = {1,    2,    3,    5,    7,    8,    15,    16,    17,
                                  31,   33,   39,   40,   41,   63,   64,    100,   255,
                                  1000, 1023, 1024, 1025, 2049, 4097, 70001, 600000};
  int bad = 0, cases = 0;
  for (int op = 0; op < 7; op++)
    for (int d = 0; d < 2; d++)
      for (size_t ci = 0; ci < sizeof colsl / 8; ci++)
        for (int inn = 0; inn < (op == 0 ? 2 : 1); inn++) {
          bk_dtype dt = d ? BK_F64 : BK_F32;
          size_t es = d ? 8 : 4;
          int64_t cols = colsl[ci];
          int64_t inner = inn ? 3 : 1;
          int64_t rows = cols >= 600000 ? (d ? 10 : 20) : (200000 / cols + 3);
          if (inner > 1 && cols > 5000)
            continue;
          if (op == 0 && inner == 1 && cols == 4097)
            rows = 2100; /* > LLC: streams */
          int64_t n = rows * cols * inner;
          void *x = malloc(n * es), *y = malloc(n * es), *g = malloc(cols * es);
          for (int64_t i = 0; i < n; i++) {
            double v = (ur() - 0.5) * (ur() < 0.1 ? 200 : 10), w = op == 1   ? (ur() < 0.6)
                                                                   : op == 2 ? ur() * 2
                                                                             : (ur() - 0.5) * 10;
            if (special) {
              double u = ur();
              if (u < 0.002)
                v = -INFINITY;
              else if (u < 0.0025 && op < 5)
                v = NAN;
              else if (u < 0.003)
                v = 0.0;
              if (op >= 3 && ur() < 0.002)
                w = -INFINITY;
              if (op == 2 && ur() < 0.01)
                w = 0;
              if (op == 1 && ur() < 0.001)
                w = NAN;
              if (op == 1 && ur() < 0.01)
                w = -0.0;
            }
            if (special && (i / cols) % 97 == 5 && op < 5)
              v = -INFINITY; /* whole rows of -inf */
            if (d) {
              ((double *)x)[i] = v;
              ((double *)y)[i] = w;
            } else {
              ((float *)x)[i] = v;
              ((float *)y)[i] = w;
            }
          }
          for (int64_t i = 0; i < cols; i++) {
            if (d)
              ((double *)g)[i] = 0.5 + ur();
            else
              ((float *)g)[i] = 0.5 + ur();
          }
          size_t n0, n1;
          char *r0 = run(&L0, op, dt, x, y, g, rows, cols, inner, &n0),
               *r1 = run(&L1, op, dt, x, y, g, rows, cols, inner, &n1);
          cases++;
          if (getenv("NANEQ")) {
            for (size_t k = 0; k + es <= n0 && n0 == n1; k += es) {
              int a, b;
              if (es == 4) {
                float p, q;
                memcpy(&p, r0 + k, 4);
                memcpy(&q, r1 + k, 4);
                a = p != p;
                b = q != q;
              } else {
                double p, q;
                memcpy(&p, r0 + k, 8);
                memcpy(&q, r1 + k, 8);
                a = p != p;
                b = q != q;
              }
              if (a && b)
                memcpy(r1 + k, r0 + k, es);
            }
          }
          if (n0 != n1 || memcmp(r0, r1, n0)) {
            bad++;
            size_t k = 0;
            while (k < n0 && r0[k] == r1[k])
              k++;
            printf("DIFF op %d %s rows %lld cols %lld inner %lld at byte %zu of %zu\n", op,
                   d ? "f64" : "f32", (long long)rows, (long long)cols, (long long)inner, k, n0);
          }
          free(r0);
          free(r1);
          free(x);
          free(y);
          free(g);
        }
  printf("%d cases, %d differ\n", cases, bad);
  return bad != 0;
}
