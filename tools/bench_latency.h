/*
 * bench_latency.h — `bufkern bench --latency` (bench_latency.c) and the
 * floors it measures against (bench_floor.cu, CUDA builds only).
 */
#ifndef BK_TOOL_BENCH_LATENCY_H
#define BK_TOOL_BENCH_LATENCY_H

#include "bufkern.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Times small calls of every family against the launch floors on one
 * stream of dev, `calls` calls each with one synchronization at the end,
 * and prints a table. Returns 0 when every measurement ran, 1 otherwise. */
int bk_tool_bench_latency(bk_device dev, int calls);

/* The floors, each on `stream` (a cudaStream_t), `calls` calls after a
 * warm-up, microseconds per call in *us. 0 on success, -1 on a CUDA error.
 * empty: an empty kernel launch; alloc: the same launch between a
 * cudaMallocAsync of `bytes` and its cudaFreeAsync; cublas: cublasSgemm of
 * n x n by n x n device matrices A, B into a fresh stream-ordered C. */
int bk_floor_empty(void *stream, int calls, double *us);
int bk_floor_alloc(void *stream, int calls, size_t bytes, double *us);
int bk_floor_cublas(void *stream, int calls, int n, const float *A, const float *B, double *us);

#ifdef __cplusplus
}
#endif

#endif /* BK_TOOL_BENCH_LATENCY_H */
