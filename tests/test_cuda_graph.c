/*
 * test_cuda_graph.c — GPU-only: every primitive recorded into a CUDA graph
 * on a caller's stream and replayed.
 *  - every case of cases.h in both dtypes: captured once, replayed three
 *    times (bitwise equal to the eager call), then replayed on new input
 *    contents (bitwise equal to the eager call on those contents);
 *  - host indices (gather and scatter-add, with few indices that travel in
 *    kernel parameters, one kernel or a copy and a rewrite, and with many
 *    that go through an upload and the device sort): a replay
 *    uses the indices given at capture, whatever the host array holds
 *    since; bk_buffer_from_host during a capture likewise;
 *  - the documented refusals during a capture (BK_ERR_UNSUPPORTED, nothing
 *    queued): bk_bmm_scaled, bk_buffer_to_host, bk_context_synchronize,
 *    stream changes, a cuFFT plan or cuBLAS handle that does not exist yet;
 *    the capture stays valid and its other calls replay correctly;
 *  - a product large enough for cuBLAS, captured and replayed;
 *  - no buffer leaks across replays (bk__live_buffers).
 * Runs on cuda:0 whatever BK_TEST_DEVICE says; exits 77 (skipped) in a
 * build without CUDA or on a machine without a GPU.
 */
#define _POSIX_C_SOURCE 200809L
#include "cases.h"
#include "core/internal.h"

#define SKIPPED 77

#ifdef BK_HAVE_CUDA
#include <cuda_runtime.h>
#include <time.h>

static cudaStream_t gs; /* the caller's stream tl_ctx is bound to */

#define CU_OK(expr) cu_ok_at(__FILE__, __LINE__, #expr, (expr))
static int cu_ok_at(const char *file, int line, const char *what, cudaError_t err) {
  if (err == cudaSuccess) {
    tl_passed++;
    return 1;
  }
  tl_fail_at(file, line, "%s: %s", what, cudaGetErrorString(err));
  return 0;
}

/* A capture of whatever `body` queues on gs, instantiated so that buffers
 * the capture made and kept reuse their memory at each launch. */
typedef struct captured {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
} captured;

static int capture_begin(void) {
  return CU_OK(cudaStreamBeginCapture(gs, cudaStreamCaptureModeGlobal));
}

static int capture_end(captured *g) {
  g->graph = NULL;
  g->exec = NULL;
  if (!CU_OK(cudaStreamEndCapture(gs, &g->graph))) return 0;
  return CU_OK(cudaGraphInstantiateWithFlags(&g->exec, g->graph,
                                             cudaGraphInstantiateFlagAutoFreeOnLaunch));
}

static int replay(const captured *g) { return CU_OK(cudaGraphLaunch(g->exec, gs)); }

static void captured_destroy(captured *g) {
  if (g->exec) CU_OK(cudaGraphExecDestroy(g->exec));
  if (g->graph) CU_OK(cudaGraphDestroy(g->graph));
}

/* Overwrites a buffer's device memory with v converted to its dtype (the
 * way a caller feeds a graph new data). */
static void overwrite(bk_buffer *b, const double *v) {
  const int64_t n = bk_buffer_length(b);
  const size_t es = bk_buffer_dtype(b) == BK_F32 ? 4 : 8;
  void *h = tl_xmalloc((size_t)n * es);
  for (int64_t i = 0; i < n; i++) {
    if (es == 4)
      ((float *)h)[i] = (float)v[i];
    else
      ((double *)h)[i] = v[i];
  }
  /* On gs, so that the work queued there next is ordered after it. */
  CU_OK(cudaMemcpyAsync(bk_buffer_data(b), h, (size_t)n * es, cudaMemcpyHostToDevice, gs));
  CU_OK(cudaStreamSynchronize(gs));
  free(h);
}

static int same_outs(bk_buffer *const *got, bk_buffer *const *want) {
  for (int j = 0; j < CASE_MAX_OUT; j++) {
    if (!got[j] != !want[j]) return 0;
    if (got[j] && !tl_same_bits(got[j], want[j])) return 0;
  }
  return 1;
}

/* ---- every primitive ----------------------------------------------------------------- */

static void every_primitive(void) {
  int captured_cases = 0;
  for (int d = 0; d < TL_DTYPES; d++) {
    const bk_dtype dt = tl_dtypes[d];
    for (int p = 0; p < PRIM_CASES; p++) {
      const prim_case *pc = &prim_cases[p];
      tl_case = pc->name;
      if (strcmp(pc->name, "bmm_scaled") == 0) continue; /* refused: see refusals() */
      case_inputs ci;
      case_prepare(tl_ctx, dt, pc, &ci, 700 + (uint64_t)p);
      bk_buffer *ref[CASE_MAX_OUT] = {0}, *out[CASE_MAX_OUT] = {0};
      /* Eager first: creates the library state the shape needs. */
      TL_OK(pc->run(tl_ctx, &ci, ref));
      TL_OK(bk_context_synchronize(tl_ctx));
      const int64_t live0 = bk__live_buffers();
      captured g = {0};
      if (capture_begin()) {
        const bk_status st = pc->run(tl_ctx, &ci, out);
        if (capture_end(&g) && TL_OK(st) == BK_OK) {
          int ok = 1;
          for (int r = 0; r < 3 && ok; r++) ok = replay(&g) && same_outs(out, ref);
          TL_CHECK(ok, "%s %s: replay differs from the eager call", pc->name, tl_dtname(dt));
          /* New input contents: the replay reads them, like an eager call. */
          for (int j = 0; j < CASE_MAX_IN; j++) {
            if (!ci.in[j]) continue;
            const int64_t n = bk_buffer_length(ci.in[j]);
            double *v = tl_xmalloc((size_t)n * sizeof *v);
            tl_seed(900 + (uint64_t)(p * CASE_MAX_IN + j));
            tl_fill_uniform(v, n, 0.25, 1.25);
            overwrite(ci.in[j], v);
            free(v);
          }
          case_release_outs(ref);
          TL_OK(pc->run(tl_ctx, &ci, ref));
          TL_CHECK(replay(&g) && same_outs(out, ref),
                   "%s %s: replay on new inputs differs from the eager call", pc->name,
                   tl_dtname(dt));
          captured_cases++;
        }
      }
      case_release_outs(out);
      TL_OK(bk_context_synchronize(tl_ctx));
      captured_destroy(&g);
      TL_CHECK(bk__live_buffers() == live0, "%s %s: %" PRId64 " buffers leaked", pc->name,
               tl_dtname(dt), bk__live_buffers() - live0);
      case_release_outs(ref);
      case_release(&ci);
    }
  }
  printf("captured and replayed %d cases (every primitive but bk_bmm_scaled, 2 dtypes)\n",
         captured_cases);
}

/* ---- host data at capture time ------------------------------------------------------- */

/* Host data of one parameter block: larger uploads during a capture go to
 * blocks the graph owns (BK_CUDA_INLINE_BYTES in src/cuda). */
#define BK_TEST_INLINE_BYTES 3840
/* Updates whose scatter-add schedule fits one (BK_SCATTER_INLINE_MAX). */
#define BK_TEST_SCATTER_INLINE 319

/* The graph's release of its blocks runs on a CUDA thread some time after
 * the graph is destroyed; the context frees them at its next allocation.
 * True once the count is back at `before` (polled for up to 5 s). */
static int graph_blocks_freed(int64_t before) {
  const double one = 1;
  for (int i = 0; i < 5000; i++) {
    bk_buffer *b = tl_buf(BK_F32, &one, 1);
    bk_buffer_release(b);
    if (bk__cuda_graph_blocks(tl_ctx) == before) return 1;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

/* Gather and scatter-add of k indices into rows rows of cols columns: the
 * replay must use the indices of capture time after the host array has
 * been overwritten (and, for many indices, after eager calls reused the
 * pinned staging). */
static void host_indices_case(bk_dtype dt, int64_t rows, int64_t cols, int64_t k) {
  double *m = tl_xmalloc((size_t)(rows * cols) * sizeof *m);
  double *v = tl_xmalloc((size_t)(k * cols) * sizeof *v);
  uint64_t *idx = tl_xmalloc((size_t)k * sizeof *idx);
  tl_seed(41 + (uint64_t)k);
  tl_fill_uniform(m, rows * cols, -1, 1);
  tl_fill_uniform(v, k * cols, -1, 1);
  /* In range, out of range (a zero row / an ignored update) and repeated. */
  for (int64_t r = 0; r < k; r++) idx[r] = (uint64_t)((r * 7 + 3) % (rows + 2));
  bk_buffer *M = tl_buf(dt, m, rows * cols), *V = tl_buf(dt, v, k * cols);
  bk_buffer *g_ref = NULL, *s_ref = NULL, *g = NULL, *s = NULL, *other = NULL;
  TL_OK(bk_rows_gather(tl_ctx, M, rows, cols, idx, k, &g_ref));
  TL_OK(bk_rows_scatter_add(tl_ctx, M, V, rows, cols, idx, k, &s_ref));
  TL_OK(bk_context_synchronize(tl_ctx));
  const int64_t live0 = bk__live_buffers();
  const int64_t blocks0 = bk__cuda_graph_blocks(tl_ctx);
  captured cg = {0};
  if (capture_begin()) {
    const bk_status s1 = bk_rows_gather(tl_ctx, M, rows, cols, idx, k, &g);
    const bk_status s2 = bk_rows_scatter_add(tl_ctx, M, V, rows, cols, idx, k, &s);
    /* Uploaded indices go into device blocks the graph owns (no allocation
     * node of the graph): the gather's past one parameter block, the
     * scatter-add's past the schedule that fits one. */
    const int64_t owned = bk__cuda_graph_blocks(tl_ctx) - blocks0;
    const int64_t want = (k * 4 > BK_TEST_INLINE_BYTES) + (k > BK_TEST_SCATTER_INLINE);
    TL_CHECK(owned == want,
             "%s k = %" PRId64 ": %" PRId64 " blocks owned by the graph, want %" PRId64,
             tl_dtname(dt), k, owned, want);
    if (capture_end(&cg) && TL_OK(s1) == BK_OK && TL_OK(s2) == BK_OK) {
      for (int64_t r = 0; r < k; r++) idx[r] = (uint64_t)(r % 2);
      /* Eager calls with the new indices reuse the staging in between. */
      for (int i = 0; i < 6; i++) {
        TL_OK(bk_rows_gather(tl_ctx, M, rows, cols, idx, k, &other));
        bk_buffer_release(other);
        other = NULL;
      }
      for (int r = 0; r < 2; r++)
        TL_CHECK(replay(&cg) && tl_same_bits(g, g_ref) && tl_same_bits(s, s_ref),
                 "%s k = %" PRId64 ": replay %d does not use the indices of capture time",
                 tl_dtname(dt), k, r);
    }
  }
  bk_buffer_release(g);
  bk_buffer_release(s);
  TL_OK(bk_context_synchronize(tl_ctx));
  captured_destroy(&cg);
  TL_CHECK(bk__live_buffers() == live0, "host indices: %" PRId64 " buffers leaked",
           bk__live_buffers() - live0);
  TL_CHECK(graph_blocks_freed(blocks0), "%s k = %" PRId64 ": %" PRId64
           " blocks of the destroyed graph were not freed", tl_dtname(dt), k,
           bk__cuda_graph_blocks(tl_ctx) - blocks0);
  bk_buffer_release(g_ref);
  bk_buffer_release(s_ref);
  bk_buffer_release(M);
  bk_buffer_release(V);
  free(m);
  free(v);
  free(idx);
}

static void host_indices(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    host_indices_case(tl_dtypes[d], 8, 6, 4);       /* indices in kernel parameters */
    host_indices_case(tl_dtypes[d], 4000, 3, 5);    /* the same, a copy and a rewrite */
    host_indices_case(tl_dtypes[d], 300, 5, 2500);  /* uploads past one parameter block */
    /* Scatter-add sorted on the device, few rows touched (copy, then rewrite). */
    host_indices_case(tl_dtypes[d], 40000, 3, 400);
  }
}

/* bk_buffer_from_host during a capture: each replay writes the data given
 * at capture time, whatever the host array holds later. */
static void host_upload(void) {
  enum { N = 1500 }; /* 6 or 12 KB: more than one parameter block */
  static double want[N];
  static union {
    float f[N];
    double d[N];
  } host;
  for (int i = 0; i < N; i++) want[i] = 0.5 * i - 7;
  for (int d = 0; d < TL_DTYPES; d++) {
    const bk_dtype dt = tl_dtypes[d];
    for (int i = 0; i < N; i++) {
      if (dt == BK_F32)
        host.f[i] = (float)want[i];
      else
        host.d[i] = want[i];
    }
    bk_buffer *b = NULL;
    captured g = {0};
    if (capture_begin()) {
      const bk_status st = bk_buffer_from_host(tl_ctx, dt, &host, N, &b);
      if (capture_end(&g) && TL_OK(st) == BK_OK) {
        memset(&host, 0, sizeof host);
        for (int r = 0; r < 2 && replay(&g); r++) TL_BUF_EXACT(b, want, N);
      }
    }
    bk_buffer_release(b);
    TL_OK(bk_context_synchronize(tl_ctx));
    captured_destroy(&g);
  }
}

/* A product large enough for cuBLAS (the small ones above run a kernel of
 * bufkern's own): captured after an eager call made the handle. */
static void cublas_product(void) {
  enum { M = 64, K = 48, P = 40 };
  static double a[M * K], b[K * P];
  tl_seed(5);
  tl_fill_uniform(a, M * K, -1, 1);
  tl_fill_uniform(b, K * P, -1, 1);
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_buffer *A = tl_buf(tl_dtypes[d], a, M * K), *B = tl_buf(tl_dtypes[d], b, K * P);
    bk_buffer *ref = NULL, *c = NULL;
    TL_OK(bk_bmm(tl_ctx, A, B, 1, M, K, P, 0, 0, &ref));
    TL_OK(bk_context_synchronize(tl_ctx));
    captured g = {0};
    if (capture_begin()) {
      const bk_status st = bk_bmm(tl_ctx, A, B, 1, M, K, P, 0, 0, &c);
      if (capture_end(&g) && TL_OK(st) == BK_OK)
        for (int r = 0; r < 2; r++)
          TL_CHECK(replay(&g) && tl_same_bits(c, ref), "%s: replayed cuBLAS product differs",
                   tl_dtname(tl_dtypes[d]));
    }
    bk_buffer_release(c);
    TL_OK(bk_context_synchronize(tl_ctx));
    captured_destroy(&g);
    bk_buffer_release(ref);
    bk_buffer_release(A);
    bk_buffer_release(B);
  }
}

/* ---- refusals ------------------------------------------------------------------------ */

static void refusals(void) {
  const double a[24] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                        13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24};
  const int64_t dims[2] = {4, 6};
  bk_buffer *A = tl_buf(BK_F32, a, 24), *y = NULL, *ref = NULL, *junk = NULL;
  double host[24];
  int flag = 7;
  /* A context that has not made its cuBLAS handle yet, on the same stream. */
  bk_context *fresh = NULL;
  TL_OK(bk_context_create(tl_dev, &fresh));
  TL_OK(bk_context_set_stream(fresh, gs));
  double big[48 * 48];
  for (int i = 0; i < 48 * 48; i++) big[i] = (double)(i % 5);
  bk_buffer *Bg = tl_buf(BK_F32, big, 48 * 48);
  TL_OK(bk_softmax(tl_ctx, A, dims, 2, 1, &ref));
  TL_OK(bk_context_synchronize(tl_ctx));
  const int64_t live0 = bk__live_buffers();
  captured g = {0};
  if (capture_begin()) {
    TL_REJECT(bk_bmm_scaled(tl_ctx, A, A, 1, 4, 6, 4, 0, 1, 0.5, &junk, &flag),
              BK_ERR_UNSUPPORTED, "captured");
    TL_CHECK(junk == NULL && flag == 0, "refused bk_bmm_scaled left its outputs set");
    TL_REJECT(bk_buffer_to_host(tl_ctx, A, host, 24), BK_ERR_UNSUPPORTED, "captured");
    TL_REJECT(bk_context_synchronize(tl_ctx), BK_ERR_UNSUPPORTED, "captured");
    TL_REJECT(bk_context_set_stream(tl_ctx, NULL), BK_ERR_UNSUPPORTED, "captured");
    TL_REJECT(bk_context_reset_stream(tl_ctx), BK_ERR_UNSUPPORTED, "captured");
    TL_REJECT(bk_rfft(tl_ctx, Bg, 48, 48, &junk), BK_ERR_UNSUPPORTED, "cuFFT plan");
    TL_REJECT(bk_bmm(fresh, Bg, Bg, 1, 48, 48, 48, 0, 0, &junk), BK_ERR_UNSUPPORTED, "cuBLAS");
    TL_CHECK(junk == NULL, "refused call left its out-parameter set");
    /* The capture is still valid: a call after the refusals replays. */
    const bk_status st = bk_softmax(tl_ctx, A, dims, 2, 1, &y);
    if (capture_end(&g) && TL_OK(st) == BK_OK)
      TL_CHECK(replay(&g) && tl_same_bits(y, ref), "capture after refusals replays wrongly");
  }
  bk_buffer_release(y);
  TL_OK(bk_context_synchronize(tl_ctx));
  captured_destroy(&g);
  TL_CHECK(bk__live_buffers() == live0, "refusals: %" PRId64 " buffers leaked",
           bk__live_buffers() - live0);
  TL_OK(bk_context_reset_stream(fresh));
  bk_context_destroy(fresh);
  bk_buffer_release(Bg);
  bk_buffer_release(ref);
  bk_buffer_release(A);
}

/* ---- the stream convention ---------------------------------------------------------- */

/* NULL selects CUDA's legacy default stream: work queued there after a
 * cudaMemcpy into the input on the default stream sees the new data
 * without any synchronization by the caller. */
static void null_is_default_stream(void) {
  enum { N = 1 << 20 };
  float *h = tl_xmalloc(N * sizeof *h);
  for (int i = 0; i < N; i++) h[i] = 1.0f;
  bk_buffer *x = NULL, *s = NULL;
  TL_OK(bk_buffer_zeros(tl_ctx, BK_F32, N, &x));
  TL_OK(bk_context_set_stream(tl_ctx, NULL));
  /* Asynchronous on the legacy stream, from pageable memory. */
  CU_OK(cudaMemcpyAsync(bk_buffer_data(x), h, N * sizeof *h, cudaMemcpyHostToDevice, 0));
  if (TL_OK(bk_rows_sum(tl_ctx, x, 1, N, &s)) == BK_OK)
    TL_BUF_EXACT(s, ((double[]){(double)N}), 1);
  bk_buffer_release(s);
  bk_buffer_release(x);
  TL_OK(bk_context_set_stream(tl_ctx, gs));
  free(h);
}

static int run_all(void) {
  tl_dev = (bk_device){BK_DEVICE_CUDA, 0};
  bk_status st = bk_context_create(tl_dev, &tl_ctx);
  if (st == BK_ERR_UNSUPPORTED || st == BK_ERR_NO_DEVICE) {
    printf("skipped: no CUDA device (%s)\n", bk_last_error());
    return SKIPPED;
  }
  if (st != BK_OK || bk_context_create((bk_device){BK_DEVICE_CPU, 0}, &tl_cpu) != BK_OK) {
    fprintf(stderr, "cannot create the contexts: %s\n", bk_last_error());
    return 2;
  }
  if (cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking) != cudaSuccess ||
      bk_context_set_stream(tl_ctx, gs) != BK_OK) {
    fprintf(stderr, "cannot bind a caller stream: %s\n", bk_last_error());
    return 2;
  }
  TL_RUN(every_primitive);
  TL_RUN(host_indices);
  TL_RUN(host_upload);
  TL_RUN(cublas_product);
  TL_RUN(refusals);
  TL_RUN(null_is_default_stream);
  TL_OK(bk_context_reset_stream(tl_ctx));
  const int rc = tl_finish();
  cudaStreamDestroy(gs);
  return rc;
}
#endif /* BK_HAVE_CUDA */

int main(void) {
#ifdef BK_HAVE_CUDA
  return run_all();
#else
  printf("skipped: this build has no CUDA backend\n");
  return SKIPPED;
#endif
}
