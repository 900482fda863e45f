/*
 * bench_floor.cu — the per-call floors `bufkern bench --latency` measures
 * bufkern's small calls against, on the same stream in the same run: an
 * empty kernel launch, an empty launch with a stream-ordered allocation and
 * free around it (what every primitive does for its output), and a bare
 * cuBLAS product of the same shape with that allocation and free.
 */
#include "bench_latency.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <time.h>

static __global__ void empty_kernel(void) {}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs the statements (the variadic part) `calls` times after a warm-up of calls / 10, with one stream
 * synchronization at the end; *us = microseconds per call. */
#define FLOOR_LOOP(calls, stream, us, ...)                                \
  do {                                                                     \
    for (int w_ = 0; w_ < (calls) / 10 + 1; w_++) {                        \
      __VA_ARGS__                                                          \
    }                                                                      \
    if (cudaStreamSynchronize(stream) != cudaSuccess) return -1;           \
    const double t0_ = now_s();                                            \
    for (int i_ = 0; i_ < (calls); i_++) {                                 \
      __VA_ARGS__                                                          \
    }                                                                      \
    if (cudaStreamSynchronize(stream) != cudaSuccess) return -1;           \
    *(us) = 1e6 * (now_s() - t0_) / (calls);                               \
  } while (0)

extern "C" int bk_floor_empty(void *stream_v, int calls, double *us) {
  cudaStream_t s = (cudaStream_t)stream_v;
  FLOOR_LOOP(calls, s, us, {
    empty_kernel<<<1, 1, 0, s>>>();
    if (cudaGetLastError() != cudaSuccess) return -1;
  });
  return 0;
}

extern "C" int bk_floor_alloc(void *stream_v, int calls, size_t bytes, double *us) {
  cudaStream_t s = (cudaStream_t)stream_v;
  FLOOR_LOOP(calls, s, us, {
    void *p = NULL;
    if (cudaMallocAsync(&p, bytes, s) != cudaSuccess) return -1;
    empty_kernel<<<1, 1, 0, s>>>();
    if (cudaGetLastError() != cudaSuccess) return -1;
    if (cudaFreeAsync(p, s) != cudaSuccess) return -1;
  });
  return 0;
}

extern "C" int bk_floor_cublas(void *stream_v, int calls, int n, const float *A, const float *B,
                               double *us) {
  cudaStream_t s = (cudaStream_t)stream_v;
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return -1;
  int rc = -1;
  if (cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS) {
    const float one = 1.0f, zero = 0.0f;
    const size_t bytes = (size_t)n * n * sizeof(float);
    double t = 0.0;
    /* The loop macro returns -1 from this block on a failure; the handle
     * is released below either way. */
    rc = [&]() -> int {
      FLOOR_LOOP(calls, s, &t, {
        void *C = NULL;
        if (cudaMallocAsync(&C, bytes, s) != cudaSuccess) return -1;
        if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, B, n, A, n, &zero, (float *)C,
                        n) != CUBLAS_STATUS_SUCCESS)
          return -1;
        if (cudaFreeAsync(C, s) != cudaSuccess) return -1;
      });
      return 0;
    }();
    *us = t;
  }
  cublasDestroy(h);
  return rc;
}
