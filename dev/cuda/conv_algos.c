/*
 * conv_algos.c — lab probe: every legacy cuDNN forward algorithm for a few
 * convolution geometries, with its status, determinism, math type,
 * workspace and time (CUDA events, median of 9 after a warm-up), float32
 * with FMA math (no TF32), as bk_conv uses them. Tells whether the
 * algorithm bk_conv takes (the first deterministic one in the heuristic
 * order) is the fastest one the legacy API offers for the shape.
 *   nvcc -O2 -o conv_algos dev/cuda/conv_algos.c -lcudnn
 */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  const char *name;
  int rank, n, cin, cout, groups, in[3], k[3], stride[3], pad[3], dil[3];
} geom;

static const geom cases[] = {
    {"3d N55 c2->28 k1,2,2 s2 d2,3,1", 3, 55, 2, 28, 1, {88, 59, 271}, {1, 2, 2}, {2, 2, 2},
     {0, 0, 0}, {2, 3, 1}},
    {"1d N12 c32->48 g8 k8 s2 (padded 17326)", 2, 12, 32, 48, 8, {1, 17326}, {1, 8}, {1, 2},
     {0, 0}, {1, 1}},
    {"2d N21 c3->3 g3 k4,3 s2 d3,2", 2, 21, 3, 3, 3, {1020, 2256}, {4, 3}, {2, 2}, {3, 4}, {3, 2}},
};

#define CK(x)                                                                        \
  do {                                                                               \
    int e_ = (int)(x);                                                               \
    if (e_) {                                                                        \
      fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, e_);      \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

int main(void) {
  cudnnHandle_t h;
  CK(cudnnCreate(&h));
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const geom *g = &cases[c];
    const int nd = g->rank + 2;
    int xd[5] = {g->n, g->cin}, wd[5] = {g->cout, g->cin / g->groups}, yd[5], xs[5], ys[5];
    for (int a = 0; a < g->rank; a++) {
      xd[2 + a] = g->in[a];
      wd[2 + a] = g->k[a];
    }
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t cd;
    CK(cudnnCreateTensorDescriptor(&x));
    CK(cudnnCreateTensorDescriptor(&y));
    CK(cudnnCreateFilterDescriptor(&w));
    CK(cudnnCreateConvolutionDescriptor(&cd));
    xs[nd - 1] = 1;
    for (int a = nd - 2; a >= 0; a--) xs[a] = xs[a + 1] * xd[a + 1];
    CK(cudnnSetTensorNdDescriptor(x, CUDNN_DATA_FLOAT, nd, xd, xs));
    CK(cudnnSetFilterNdDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, nd, wd));
    CK(cudnnSetConvolutionNdDescriptor(cd, g->rank, g->pad, g->stride, g->dil,
                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CK(cudnnSetConvolutionGroupCount(cd, g->groups));
    CK(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
    CK(cudnnGetConvolutionNdForwardOutputDim(cd, x, w, nd, yd));
    ys[nd - 1] = 1;
    for (int a = nd - 2; a >= 0; a--) ys[a] = ys[a + 1] * yd[a + 1];
    CK(cudnnSetTensorNdDescriptor(y, CUDNN_DATA_FLOAT, nd, yd, ys));
    size_t xn = (size_t)xs[0] * xd[0], yn = (size_t)ys[0] * yd[0], wn = 1;
    for (int a = 0; a < nd; a++) wn *= (size_t)wd[a];
    float *dx, *dy, *dw;
    CK(cudaMalloc((void **)&dx, xn * 4));
    CK(cudaMalloc((void **)&dy, yn * 4));
    CK(cudaMalloc((void **)&dw, wn * 4));
    CK(cudaMemset(dx, 0, xn * 4));
    CK(cudaMemset(dw, 0, wn * 4));
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    CK(cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, cd, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                              &count, perf));
    printf("%s: in %zu out %zu elements\n", g->name, xn, yn);
    for (int i = 0; i < count; i++) {
      size_t ws = 0;
      cudnnStatus_t s = cudnnGetConvolutionForwardWorkspaceSize(h, x, w, cd, y, perf[i].algo, &ws);
      printf("  #%d algo %d status %d det %d math %d ws %zu", i, (int)perf[i].algo,
             (int)perf[i].status, (int)perf[i].determinism, (int)perf[i].mathType, ws);
      if (s != CUDNN_STATUS_SUCCESS || perf[i].status != CUDNN_STATUS_SUCCESS ||
          ws > ((size_t)1 << 30)) {
        printf("  (not run)\n");
        continue;
      }
      void *work = NULL;
      if (ws) CK(cudaMalloc(&work, ws));
      const float one = 1, zero = 0;
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      float t[9];
      cudnnStatus_t rs = cudnnConvolutionForward(h, &one, x, dx, w, dw, cd, perf[i].algo, work, ws,
                                                 &zero, y, dy);
      for (int r = 0; r < 9 && rs == CUDNN_STATUS_SUCCESS; r++) {
        CK(cudaEventRecord(e0, 0));
        for (int q = 0; q < 3; q++)
          cudnnConvolutionForward(h, &one, x, dx, w, dw, cd, perf[i].algo, work, ws, &zero, y, dy);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[r], e0, e1));
        t[r] /= 3;
      }
      if (rs == CUDNN_STATUS_SUCCESS) {
        qsort(t, 9, sizeof t[0], cmpf);
        printf("  %.4f ms\n", t[4]);
      } else {
        printf("  run failed (%d)\n", (int)rs);
      }
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      if (work) cudaFree(work);
    }
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dw);
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(cd);
  }
  cudnnDestroy(h);
  return 0;
}
