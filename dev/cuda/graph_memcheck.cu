/* dev/cuda/graph_memcheck.cu: for compute-sanitizer memcheck, a CUDA graph with stream-ordered
 * allocation nodes, first with no bufkern code at all, then bufkern's host-index calls.
 *   mode "plain": a graph captured from cudaMallocAsync, a kernel writing the block, a copy out
 *     of it and cudaFreeAsync (the allocation freed inside the graph); a second graph whose
 *     allocation outlives the launch (instantiated with AutoFreeOnLaunch, read by a kernel and
 *     a copy after each launch, freed with cudaFreeAsync outside the graph), each launched 3 times;
 *   mode "reuse": a block written and freed inside the graph, then a smaller block allocated
 *     after it (and kept past the launch), which the graph may place at the same address;
 *   mode "bufkern": bk_rows_gather and bk_rows_scatter_add captured on a caller stream (k = 4,
 *     2500 and 400 indices: parameters, upload during capture, device sort) and replayed 3
 *     times, each replay compared with the eager result (the pattern of test_cuda_graph).
 * Build: nvcc -std=c++17 -arch=sm_90 -Iinclude dev/cuda/graph_memcheck.cu -Lbuild-cuda -lbufkern
 *        -o graph_memcheck
 * Run:   compute-sanitizer --tool memcheck ./graph_memcheck plain   (and reuse, bufkern) */
#include <bufkern.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                           \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));         \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

static __global__ void fill(float *p, int n, float v) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = v + (float)i;
}

static __global__ void sum_into(const float *p, int n, float *out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    float s = 0;
    for (int i = 0; i < n; i++) s += p[i];
    *out = s;
  }
}

/* Waits for s, then destroys the executable graph and the graph. */
static int drop_graph(cudaStream_t s, cudaGraph_t g, cudaGraphExec_t x) {
  CK(cudaStreamSynchronize(s));
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));
  return 0;
}

static int plain(void) {
  enum { N = 4096 };
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *keep = NULL, *sum = NULL, host[N];
  CK(cudaMalloc(&keep, N * sizeof(float)));
  CK(cudaMalloc(&sum, sizeof(float)));
  /* A: allocation and free inside the graph. */
  cudaGraph_t g;
  cudaGraphExec_t x;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  float *p = NULL;
  CK(cudaMallocAsync((void **)&p, N * sizeof(float), s));
  fill<<<4, 256, 0, s>>>(p, N, 1.0f);
  CK(cudaMemcpyAsync(keep, p, N * sizeof(float), cudaMemcpyDeviceToDevice, s));
  CK(cudaFreeAsync(p, s));
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiateWithFlags(&x, g, 0));
  for (int r = 0; r < 3; r++) CK(cudaGraphLaunch(x, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(host, keep, sizeof host, cudaMemcpyDeviceToHost));
  int bad = host[N - 1] != 1.0f + (float)(N - 1);
  if (drop_graph(s, g, x)) return 1;
  /* B: the allocation outlives the launch, as a captured call's output does. */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  float *q = NULL;
  CK(cudaMallocAsync((void **)&q, N * sizeof(float), s));
  fill<<<4, 256, 0, s>>>(q, N, 2.0f);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiateWithFlags(&x, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  for (int r = 0; r < 3; r++) {
    CK(cudaGraphLaunch(x, s));
    sum_into<<<1, 32, 0, s>>>(q, N, sum);
    CK(cudaMemcpyAsync(host, q, sizeof host, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    bad |= host[N - 1] != 2.0f + (float)(N - 1);
  }
  CK(cudaFreeAsync(q, s));
  if (drop_graph(s, g, x)) return 1;
  CK(cudaFree(keep));
  CK(cudaFree(sum));
  CK(cudaStreamDestroy(s));
  printf("plain: %s\n", bad ? "WRONG VALUES" : "ok");
  return bad;
}

/* C: the pattern of a captured call whose scratch is freed before the next
 * call's output is allocated: block A (10000 bytes) written and freed, then
 * block B (6000 bytes) allocated, written and kept past the launch. The
 * graph may give B the address of A (their lifetimes are disjoint). */
static __global__ void fill_bytes(unsigned char *p, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = (unsigned char)i;
}

static int reuse(void) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t x;
  unsigned char *a = NULL, *b = NULL;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CK(cudaMallocAsync((void **)&a, 10000, s));
  fill_bytes<<<1, 256, 0, s>>>(a, 10000);
  CK(cudaFreeAsync(a, s));
  CK(cudaMallocAsync((void **)&b, 6000, s));
  fill_bytes<<<1, 256, 0, s>>>(b, 6000);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiateWithFlags(&x, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  printf("reuse: A at %p (10000 bytes), B at %p (6000 bytes): %s\n", (void *)a, (void *)b,
         a == b ? "same address" : "different addresses");
  unsigned char host[6000];
  int bad = 0;
  for (int r = 0; r < 3; r++) {
    CK(cudaGraphLaunch(x, s));
    CK(cudaMemcpyAsync(host, b, sizeof host, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < 6000; i++) bad |= host[i] != (unsigned char)i;
  }
  CK(cudaFreeAsync(b, s));
  if (drop_graph(s, g, x)) return 1;
  CK(cudaStreamDestroy(s));
  printf("reuse: %s\n", bad ? "WRONG VALUES" : "ok");
  return bad;
}

static int same(const bk_buffer *a, const bk_buffer *b) {
  const int64_t n = bk_buffer_length(a);
  const size_t bytes = (size_t)n * (bk_buffer_dtype(a) == BK_F32 ? 4 : 8);
  void *pa = malloc(bytes), *pb = malloc(bytes);
  int ok = n == bk_buffer_length(b) && bk_buffer_to_host(NULL, a, pa, n) == BK_OK &&
           bk_buffer_to_host(NULL, b, pb, n) == BK_OK && memcmp(pa, pb, bytes) == 0;
  free(pa);
  free(pb);
  return ok;
}

/* A buffer of n values of v in dtype dt. */
static bk_status up(bk_context *ctx, bk_dtype dt, const double *v, int64_t n, bk_buffer **out) {
  if (dt == BK_F64) return bk_buffer_from_host(ctx, dt, v, n, out);
  float *f = (float *)malloc((size_t)n * sizeof *f);
  for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
  const bk_status st = bk_buffer_from_host(ctx, dt, f, n, out);
  free(f);
  return st;
}

static int with_bufkern(void) {
  bk_context *ctx = NULL;
  if (bk_context_create((bk_device){BK_DEVICE_CUDA, 0}, &ctx) != BK_OK) return 2;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (bk_context_set_stream(ctx, s) != BK_OK) return 2;
  static const int64_t shapes[][3] = {{8, 6, 4}, {300, 5, 2500}, {40000, 3, 400}};
  int bad = 0;
  for (int d = 0; d < 2; d++) {
    const bk_dtype dt = d ? BK_F64 : BK_F32;
    for (int c = 0; c < 3; c++) {
      const int64_t rows = shapes[c][0], cols = shapes[c][1], k = shapes[c][2];
      double *m = (double *)malloc((size_t)(rows * cols) * sizeof *m);
      double *v = (double *)malloc((size_t)(k * cols) * sizeof *v);
      uint64_t *idx = (uint64_t *)malloc((size_t)k * sizeof *idx);
      for (int64_t i = 0; i < rows * cols; i++) m[i] = (double)(i % 17) - 8;
      for (int64_t i = 0; i < k * cols; i++) v[i] = 0.25 * (double)(i % 13);
      for (int64_t r = 0; r < k; r++) idx[r] = (uint64_t)((r * 7 + 3) % (rows + 2));
      bk_buffer *M = NULL, *V = NULL, *g0 = NULL, *s0 = NULL, *g = NULL, *sc = NULL;
      if (up(ctx, dt, m, rows * cols, &M) != BK_OK ||
          up(ctx, dt, v, k * cols, &V) != BK_OK ||
          bk_rows_gather(ctx, M, rows, cols, idx, k, &g0) != BK_OK ||
          bk_rows_scatter_add(ctx, M, V, rows, cols, idx, k, &s0) != BK_OK ||
          bk_context_synchronize(ctx) != BK_OK)
        return 3;
      cudaGraph_t gr;
      cudaGraphExec_t x;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      const bk_status s1 = bk_rows_gather(ctx, M, rows, cols, idx, k, &g);
      const bk_status s2 = bk_rows_scatter_add(ctx, M, V, rows, cols, idx, k, &sc);
      CK(cudaStreamEndCapture(s, &gr));
      if (s1 != BK_OK || s2 != BK_OK) {
        printf("capture refused: %s\n", bk_last_error());
        return 4;
      }
      CK(cudaGraphInstantiateWithFlags(&x, gr, cudaGraphInstantiateFlagAutoFreeOnLaunch));
      for (int64_t r = 0; r < k; r++) idx[r] = (uint64_t)(r % 2);
      for (int r = 0; r < 3; r++) {
        CK(cudaGraphLaunch(x, s));
        if (!same(g, g0) || !same(sc, s0)) {
          printf("%s k = %lld: replay %d differs from the eager call\n", d ? "f64" : "f32",
                 (long long)k, r);
          bad = 1;
        }
      }
      bk_buffer_release(g);
      bk_buffer_release(sc);
      if (bk_context_synchronize(ctx) != BK_OK) return 5;
      CK(cudaGraphExecDestroy(x));
      CK(cudaGraphDestroy(gr));
      bk_buffer_release(g0);
      bk_buffer_release(s0);
      bk_buffer_release(M);
      bk_buffer_release(V);
      free(m);
      free(v);
      free(idx);
    }
  }
  if (bk_context_reset_stream(ctx) != BK_OK) return 6;
  bk_context_destroy(ctx);
  CK(cudaStreamDestroy(s));
  printf("bufkern: %s\n", bad ? "WRONG VALUES" : "ok");
  return bad;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "plain";
  if (strcmp(mode, "plain") == 0) return plain();
  if (strcmp(mode, "reuse") == 0) return reuse();
  if (strcmp(mode, "bufkern") == 0) return with_bufkern();
  printf("usage: graph_memcheck plain|reuse|bufkern\n");
  return 2;
}
