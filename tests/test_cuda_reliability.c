/*
 * test_cuda_reliability.c — GPU-only reliability cases:
 *  - device out of memory: a request larger than the card returns
 *    BK_ERR_OUT_OF_MEMORY with the out-parameter NULL, and the same context
 *    keeps working afterwards;
 *  - a batched product whose result has more than 2^32 elements (64-bit
 *    offsets through cuBLAS's 64-bit API), checked at sampled entries;
 *  - thread stress on caller streams: 8 threads, each with its own context
 *    bound to a stream the thread created (bk_context_set_stream), run every
 *    primitive on shared read-only inputs; results bitwise equal to the
 *    single-threaded ones on the context's own stream.
 * Skipped (exit status TL_SKIP_EXIT) unless BK_TEST_DEVICE names a CUDA
 * device in a CUDA build.
 */
#include "cases.h"

#ifdef BK_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#include <pthread.h>

#ifdef BK_HAVE_CUDA

/* ---- device out of memory ------------------------------------------------------- */

static void device_oom_recovers(void) {
  bk_buffer *huge = (bk_buffer *)&huge;
  /* 2^40 floats = 4 TiB: far beyond any card. */
  TL_REJECT(bk_buffer_zeros(tl_ctx, BK_F32, (int64_t)1 << 40, &huge), BK_ERR_OUT_OF_MEMORY, "memory");
  TL_CHECK(huge == NULL, "out-parameter not cleared after device out of memory");
  /* A primitive whose output cannot be allocated fails the same way. */
  const double v[2] = {1, 2};
  bk_buffer *x = tl_buf(BK_F32, v, 2), *y = (bk_buffer *)&y;
  TL_REJECT(bk_broadcast_col(tl_ctx, x, 2, (int64_t)1 << 39, &y), BK_ERR_OUT_OF_MEMORY, "memory");
  TL_CHECK(y == NULL, "out-parameter not cleared");
  /* The context still works. */
  const int64_t dims[1] = {2};
  if (TL_OK(bk_softmax(tl_ctx, x, dims, 1, 0, &y)) == BK_OK) {
    const double e = exp(-1.0);
    TL_BUF_CLOSE(y, ((double[]){e / (1 + e), 1 / (1 + e)}), 2, 1e-6, 1);
  }
  bk_buffer_release(y);
  bk_buffer_release(x);
  TL_OK(bk_context_synchronize(tl_ctx));
}

/* ---- a product with more than 2^32 result elements --------------------------------- */

static void big_bmm(void) {
  /* C (m, p) = A (m, 2) B (2, p), m = 65537, p = 65536: 2^32 + 2^16 entries. */
  const int64_t m = 65537, n = 2, p = 65536;
  double *a = tl_xmalloc((size_t)(m * n) * sizeof *a), *b = tl_xmalloc((size_t)(n * p) * sizeof *b);
  for (int64_t i = 0; i < m * n; i++) a[i] = (double)((i * 7) % 13) - 6;
  for (int64_t i = 0; i < n * p; i++) b[i] = (double)((i * 5) % 11) - 5;
  bk_buffer *A = tl_buf(BK_F32, a, m * n), *B = tl_buf(BK_F32, b, n * p), *C = NULL;
  if (TL_OK(bk_bmm(tl_ctx, A, B, 1, m, n, p, 0, 0, &C)) == BK_OK) {
    TL_CHECK(bk_buffer_length(C) == m * p, "length");
    /* Sample rows near the start, the middle, past 2^32 and at the end. */
    const int64_t rows[5] = {0, 1, 32768, 65536, 65535};
    int bad = 0;
    for (int s = 0; s < 5 && !bad; s++) {
      bk_buffer *row = NULL;
      if (bk_vec_slice(tl_ctx, C, m * p, rows[s] * p, p, &row) != BK_OK) {
        bad = 1;
        break;
      }
      double *got = tl_read(row);
      for (int64_t j = 0; j < p; j++) {
        double want = a[rows[s] * n] * b[j] + a[rows[s] * n + 1] * b[p + j];
        if (got[j] != want) {
          TL_FAIL("C[%" PRId64 ", %" PRId64 "] = %g, expected %g", rows[s], j, got[j], want);
          bad = 1;
          break;
        }
      }
      free(got);
      bk_buffer_release(row);
    }
    TL_CHECK(!bad, "sampled rows of a product past 2^32 elements");
  }
  bk_buffer_release(A);
  bk_buffer_release(B);
  bk_buffer_release(C);
  free(a);
  free(b);
}

/* ---- thread stress on caller streams ------------------------------------------------ */

#define CS_THREADS 8
#define CS_ROUNDS 10

static case_inputs cs_in[PRIM_CASES];
static bk_buffer *cs_ref[PRIM_CASES][CASE_MAX_OUT];

static int same_outputs(bk_buffer **a, bk_buffer **b) {
  for (int j = 0; j < CASE_MAX_OUT; j++) {
    if (!a[j] && !b[j]) continue;
    if (!a[j] || !b[j] || !tl_same_bits(a[j], b[j])) return 0;
  }
  return 1;
}

static void *cs_thread(void *arg) {
  intptr_t id = (intptr_t)arg, bad = 0;
  cudaStream_t stream = NULL;
  bk_context *ctx = NULL;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return (void *)1;
  if (bk_context_create(tl_dev, &ctx) != BK_OK || bk_context_set_stream(ctx, stream) != BK_OK) {
    bk_context_destroy(ctx);
    cudaStreamDestroy(stream);
    return (void *)1;
  }
  for (int round = 0; round < CS_ROUNDS; round++) {
    for (int q = 0; q < PRIM_CASES; q++) {
      int p = (int)((q + id * 5 + round) % PRIM_CASES);
      bk_buffer *o[CASE_MAX_OUT] = {NULL, NULL, NULL, NULL};
      if (prim_cases[p].run(ctx, &cs_in[p], o) != BK_OK) {
        bad++;
      } else {
        /* Reads of the results go through the producing context's stream. */
        if (!same_outputs(o, cs_ref[p])) bad++;
      }
      case_release_outs(o);
    }
  }
  if (bk_context_synchronize(ctx) != BK_OK) bad++;
  bk_context_destroy(ctx);
  cudaStreamDestroy(stream);
  return (void *)bad;
}

static void caller_stream_stress(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    for (int p = 0; p < PRIM_CASES; p++) {
      case_prepare(tl_ctx, tl_dtypes[d], &prim_cases[p], &cs_in[p], 300 + (uint64_t)p);
      for (int j = 0; j < CASE_MAX_OUT; j++) cs_ref[p][j] = NULL;
      TL_OK(prim_cases[p].run(tl_ctx, &cs_in[p], cs_ref[p]));
    }
    /* The inputs and references come from tl_ctx's stream: complete them
     * before other streams read them. */
    TL_OK(bk_context_synchronize(tl_ctx));
    pthread_t th[CS_THREADS];
    for (intptr_t t = 0; t < CS_THREADS; t++)
      TL_CHECK(pthread_create(&th[t], NULL, cs_thread, (void *)t) == 0, "thread create");
    intptr_t bad = 0;
    for (int t = 0; t < CS_THREADS; t++) {
      void *r = NULL;
      pthread_join(th[t], &r);
      bad += (intptr_t)r;
    }
    TL_CHECK(bad == 0, "%" PRIdPTR " results on caller streams differed (%s)", bad,
             tl_dtname(tl_dtypes[d]));
    for (int p = 0; p < PRIM_CASES; p++) {
      case_release_outs(cs_ref[p]);
      case_release(&cs_in[p]);
    }
  }
  printf("caller-stream stress: %d threads x %d rounds x %d primitives x 2 dtypes\n", CS_THREADS,
         CS_ROUNDS, PRIM_CASES);
}

#endif /* BK_HAVE_CUDA */

int main(void) {
  tl_init();
  if (tl_dev.kind != BK_DEVICE_CUDA) {
    bk_context_destroy(tl_ctx);
    bk_context_destroy(tl_cpu);
    tl_skip("GPU-only cases (set BK_TEST_DEVICE=cuda:N)");
  }
#ifdef BK_HAVE_CUDA
  TL_RUN(device_oom_recovers);
  TL_RUN(big_bmm);
  TL_RUN(caller_stream_stress);
#endif
  return tl_finish();
}
