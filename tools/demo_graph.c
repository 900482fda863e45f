/*
 * demo_graph.c — `bufkern demo --graph`: the demo's whole training step
 * (forward, backward, SGD) recorded once into a CUDA graph and replayed,
 * against the same step run eagerly.
 *
 * The demo's model issues about a thousand small primitive calls per step,
 * so eagerly its step costs what a thousand kernel launches cost on the
 * host. A graph replays them with one launch.
 *
 * What makes the step capturable:
 *  - The model is switched to its capture-safe form (ex_block_set_capturable):
 *    attention computes its scores with bk_bmm and a scale instead of
 *    bk_bmm_scaled, whose range-loss flag is read on the host, and the
 *    mixture of experts routes densely on the device (every expert on every
 *    token, weighted by its gate, exactly 0 for an unselected expert)
 *    instead of reading the top-k mask back to build index lists. The
 *    routing still follows the router from step to step, as in the default
 *    form; only the dispatch differs. Both forms are checked against the
 *    default ones and against finite differences first.
 *  - A graph reads fixed addresses, and library buffers are immutable, so
 *    the parameters and the batch inputs live in device memory the demo
 *    allocates itself (cudaMalloc) and lends to the library through DLPack
 *    (bk_buffer_from_dlpack): the library only reads it. Each step ends
 *    with the SGD update computed into new buffers (ex_sgd_next) and copied
 *    by the demo into its parameter memory with cudaMemcpyAsync on the
 *    context's stream, after every read of the step; the next step, eager
 *    or replayed, reads the updated values. The new batch is copied into
 *    the input memory the same way before each step.
 *  - Library state made on first use (the cuBLAS handle, cuDNN and cuFFT
 *    plans) comes from the eager run, which precedes the capture on the
 *    same context.
 *  - The eager run and the captured step use two models built alike (same
 *    seeds): the captured model has no activations saved from an eager
 *    forward, which its first forward would otherwise release during the
 *    capture. What the captured step makes and keeps (the loss, saved
 *    activations, gradients) is graph memory: the graph is instantiated
 *    with cudaGraphInstantiateFlagAutoFreeOnLaunch and those buffers are
 *    released once, after the last replay.
 * Both runs execute the same calls on the same data, so their losses are
 * compared bitwise.
 */
#define _POSIX_C_SOURCE 200809L

#include "bufkern.h"
#include "cli.h"
#include "demo.h"
#include "examples.h"

#include <stdio.h>

#ifndef BK_HAVE_CUDA

int bk_tool_demo_graph(bk_device device, bk_dtype dtype, int steps, double lr) {
  (void)device;
  (void)dtype;
  (void)steps;
  (void)lr;
  fprintf(stderr, "bufkern demo: --graph needs a CUDA device, and this build has no CUDA "
                  "backend\n");
  return 2;
}

#else

#include <cuda_runtime.h>
#include <dlpack/dlpack.h>

#include <stdlib.h>
#include <string.h>

/* ---- CUDA calls of the demo itself ------------------------------------------------- */

/* The first CUDA failure of the run, printed at the end instead of the
 * library's last error (which a failed CUDA call does not set). */
typedef struct cuda_note {
  char text[192];
} cuda_note;

static bk_status cu_check(cuda_note *note, cudaError_t err, const char *what) {
  if (err == cudaSuccess) return BK_OK;
  if (!note->text[0])
    snprintf(note->text, sizeof note->text, "%s: %s (%s)", what, cudaGetErrorName(err),
             cudaGetErrorString(err));
  return BK_ERR_DEVICE;
}

#define CU_TRY(note, call) EX_TRY(cu_check((note), (call), #call))

/* ---- device memory the demo owns, lent to the library through DLPack --------------- */

typedef struct owned_tensor {
  DLManagedTensor managed;
  int64_t shape[1];
} owned_tensor;

/* Runs once, when the library drops its last reference to the buffer. */
static void owned_deleter(DLManagedTensor *t) {
  /* Nothing can be reported from a deleter; a failing cudaFree here means
   * the device is already lost, which the next CUDA call reports. */
  (void)cudaFree(t->dl_tensor.data);
  free(t->manager_ctx);
}

static size_t dtype_size(bk_dtype dt) { return dt == BK_F32 ? sizeof(float) : sizeof(double); }

/* A buffer of n elements over fresh device memory of the demo's (contents
 * undefined until written). */
static bk_status owned_buffer(bk_context *ctx, cuda_note *note, bk_dtype dt, int64_t n,
                              bk_buffer **out) {
  bk_status st = BK_OK;
  void *mem = NULL;
  *out = NULL;
  owned_tensor *o = calloc(1, sizeof *o);
  if (!o) return BK_ERR_OUT_OF_MEMORY;
  CU_TRY(note, cudaMalloc(&mem, (size_t)n * dtype_size(dt)));
  o->shape[0] = n;
  o->managed.dl_tensor = (DLTensor){
      .data = mem,
      .device = {kDLCUDA, bk_context_device(ctx).index},
      .ndim = 1,
      .dtype = {kDLFloat, (uint8_t)(8 * dtype_size(dt)), 1},
      .shape = o->shape,
      .strides = NULL,
      .byte_offset = 0,
  };
  o->managed.manager_ctx = o;
  o->managed.deleter = owned_deleter;
  EX_TRY(bk_buffer_from_dlpack(ctx, &o->managed, out));
  return BK_OK;
done:
  /* On failure the tensor is still the demo's. */
  if (mem) (void)cudaFree(mem);
  free(o);
  return st;
}

/* ---- a model over owned memory --------------------------------------------------------- */

/* The capture-safe model with its parameters and its inputs in owned
 * memory, the host batch and a pinned staging area for it. */
typedef struct graph_net {
  ex_block *model, *loss;
  bk_dtype dtype;
  int64_t x_len, t_len;
  bk_buffer *x, *teacher, *labels; /* owned; written before each step */
  bk_buffer *one;                  /* the loss's upstream gradient */
  double *hx, *ht, *hl;            /* the batch on the host */
  void *stage;                     /* pinned: x, teacher, labels in the dtype */
} graph_net;

static void net_destroy(graph_net *g) {
  ex_block_destroy(g->model);
  EX_RELEASE(&g->x, &g->teacher, &g->labels, &g->one);
  free(g->hx);
  free(g->ht);
  free(g->hl);
  if (g->stage) (void)cudaFreeHost(g->stage);
  memset(g, 0, sizeof *g);
}

static bk_status net_create(bk_context *ctx, cudaStream_t s, cuda_note *note, bk_dtype dt,
                            graph_net *g) {
  bk_status st = BK_OK;
  memset(g, 0, sizeof *g);
  g->dtype = dt;
  EX_TRY(model_create(ctx, dt, DEMO_BATCH, &g->model, &g->loss));
  ex_block_set_capturable(g->model);
  g->x_len = g->model->in_len;
  g->t_len = g->loss->in_len;
  /* Every parameter moves into owned memory. The old buffer is released
   * after the copy on the same stream, before any capture. */
  for (int i = 0; i < g->model->n_params; i++) {
    ex_param *p = g->model->param[i];
    bk_buffer *mine = NULL;
    EX_TRY(owned_buffer(ctx, note, dt, p->n, &mine));
    st = cu_check(note,
                  cudaMemcpyAsync(bk_buffer_data(mine), bk_buffer_data(p->value),
                                  (size_t)p->n * dtype_size(dt), cudaMemcpyDeviceToDevice, s),
                  "copying a parameter into the demo's memory");
    bk_buffer_release(p->value);
    p->value = mine;
    if (st != BK_OK) goto done;
  }
  EX_TRY(owned_buffer(ctx, note, dt, g->x_len, &g->x));
  EX_TRY(owned_buffer(ctx, note, dt, g->t_len, &g->teacher));
  EX_TRY(owned_buffer(ctx, note, dt, g->t_len, &g->labels));
  EX_TRY(ex_distill_use_targets(g->loss, g->teacher, g->labels));
  EX_TRY(ex_fill(ctx, dt, 1.0, 1, &g->one));
  g->hx = malloc((size_t)g->x_len * sizeof *g->hx);
  g->ht = malloc((size_t)g->t_len * sizeof *g->ht);
  g->hl = malloc((size_t)g->t_len * sizeof *g->hl);
  if (!g->hx || !g->ht || !g->hl) {
    st = BK_ERR_OUT_OF_MEMORY;
    goto done;
  }
  CU_TRY(note, cudaMallocHost(&g->stage, (size_t)(g->x_len + 2 * g->t_len) * dtype_size(dt)));
  return BK_OK;
done:
  net_destroy(g);
  return st;
}

/* Copies the host batch into the net's input memory, on the stream. The
 * staging is free to overwrite: the previous step's loss was read
 * (synchronously) after the previous copies. */
static bk_status net_feed(graph_net *g, cudaStream_t s, cuda_note *note) {
  bk_status st = BK_OK;
  const double *src[3] = {g->hx, g->ht, g->hl};
  bk_buffer *dst[3] = {g->x, g->teacher, g->labels};
  const int64_t len[3] = {g->x_len, g->t_len, g->t_len};
  const size_t es = dtype_size(g->dtype);
  char *stage = g->stage;
  for (int k = 0; k < 3; k++) {
    for (int64_t i = 0; i < len[k]; i++) {
      if (g->dtype == BK_F32)
        ((float *)stage)[i] = (float)src[k][i];
      else
        ((double *)stage)[i] = src[k][i];
    }
    CU_TRY(note, cudaMemcpyAsync(bk_buffer_data(dst[k]), stage, (size_t)len[k] * es,
                                 cudaMemcpyHostToDevice, s));
    stage += (size_t)len[k] * es;
  }
done:
  return st;
}

/* One training step on the net's inputs: *loss (one element) from the
 * forward, then the backward and plain SGD, each parameter's update copied
 * into its owned memory after the backward has read every parameter. Run
 * eagerly or inside a capture alike. */
static bk_status net_step(bk_context *ctx, cudaStream_t s, cuda_note *note, graph_net *g,
                          double lr, bk_buffer **loss) {
  bk_status st = BK_OK;
  bk_buffer *dx = NULL, *next = NULL;
  *loss = NULL;
  EX_TRY(ex_block_forward(ctx, g->model, g->x, loss));
  EX_TRY(ex_block_backward(ctx, g->model, g->one, &dx));
  for (int i = 0; i < g->model->n_params; i++) {
    ex_param *p = g->model->param[i];
    EX_TRY(ex_sgd_next(ctx, p, lr, &next));
    CU_TRY(note, cudaMemcpyAsync(bk_buffer_data(p->value), bk_buffer_data(next),
                                 (size_t)p->n * dtype_size(g->dtype), cudaMemcpyDeviceToDevice,
                                 s));
    EX_RELEASE(&next);
  }
done:
  EX_RELEASE(&dx, &next);
  if (st != BK_OK) EX_RELEASE(loss);
  return st;
}

/* ---- the two runs -------------------------------------------------------------------------- */

typedef struct graph_run {
  bk_context *ctx;
  cudaStream_t s;
  cuda_note note;
  bk_dtype dtype;
  int steps;
  double lr;
} graph_run;

/* Prints a failure: the demo's own CUDA error when there was one, else the
 * library's status and last error. */
static void run_report(const graph_run *r, bk_status st, const char *stage) {
  if (r->note.text[0])
    fprintf(stderr, "bufkern: %s failed: %s\n", stage, r->note.text);
  else
    cli_report(st, stage);
}

/* Trains a fresh net on the demo's batches, eagerly (replayed == 0) or by
 * capturing one step and replaying it (then *nodes is the graph's node
 * count); loss[] gets every step's loss and *ms the mean time of a step
 * after the first: the batch upload, the step or replay, the loss read.
 * The two runs build their nets alike and feed them the same batches. */
static bk_status train_run(graph_run *r, int replayed, double *loss, double *ms,
                           size_t *nodes) {
  graph_net g;
  bk_buffer *L = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  demo_batches *batches = demo_batches_create();
  bk_status st = batches ? BK_OK : BK_ERR_OUT_OF_MEMORY;
  double busy = 0.0;
  *nodes = 0;
  if (st != BK_OK) return st;
  st = net_create(r->ctx, r->s, &r->note, r->dtype, &g);
  if (st != BK_OK) {
    demo_batches_destroy(batches);
    return st;
  }
  if (replayed) {
    /* The parameters' copies into owned memory finish before the capture. */
    CU_TRY(&r->note, cudaStreamSynchronize(r->s));
    CU_TRY(&r->note, cudaStreamBeginCapture(r->s, cudaStreamCaptureModeGlobal));
    const bk_status captured = net_step(r->ctx, r->s, &r->note, &g, r->lr, &L);
    /* The capture ends whatever the step returned, so the stream is usable. */
    st = cu_check(&r->note, cudaStreamEndCapture(r->s, &graph), "cudaStreamEndCapture");
    if (captured != BK_OK) st = captured;
    if (st != BK_OK) goto done;
    CU_TRY(&r->note, cudaGraphGetNodes(graph, NULL, nodes));
    CU_TRY(&r->note, cudaGraphInstantiateWithFlags(&exec, graph,
                                                   cudaGraphInstantiateFlagAutoFreeOnLaunch));
  }
  for (int step = 0; step < r->steps; step++) {
    demo_batches_next(batches, g.hx, g.ht, g.hl);
    const double t0 = cli_now();
    EX_TRY(net_feed(&g, r->s, &r->note));
    if (replayed)
      CU_TRY(&r->note, cudaGraphLaunch(exec, r->s));
    else
      EX_TRY(net_step(r->ctx, r->s, &r->note, &g, r->lr, &L));
    EX_TRY(ex_to_doubles(r->ctx, L, &loss[step], 1));
    if (step > 0) busy += cli_now() - t0;
    /* A replay writes the graph's loss buffer again; an eager step makes a
     * new one. */
    if (!replayed) EX_RELEASE(&L);
  }
  *ms = 1e3 * busy / (r->steps - 1);
done:
  /* The graph's kept buffers (the loss, the saved activations and the
   * gradients) are released after the last replay, on the stream they were
   * made on; the graph goes after them. */
  EX_RELEASE(&L);
  net_destroy(&g);
  demo_batches_destroy(batches);
  if (st == BK_OK) st = cu_check(&r->note, cudaStreamSynchronize(r->s), "cudaStreamSynchronize");
  if (exec) (void)cudaGraphExecDestroy(exec);
  if (graph) (void)cudaGraphDestroy(graph);
  return st;
}

/* ---- checks of the capture-safe forms -------------------------------------------------- */

enum { TABLE_ROWS = 8 };

typedef struct graph_table {
  char check[TABLE_ROWS][160], result[TABLE_ROWS][48];
  int n, failed;
} graph_table;

static void table_row(graph_table *t, const char *check, double err, double tol) {
  const int pass = err <= tol;
  if (t->n < TABLE_ROWS) {
    snprintf(t->check[t->n], sizeof t->check[t->n], "%s (tol %.0e)", check, tol);
    snprintf(t->result[t->n], sizeof t->result[t->n], "%.1e %s", err, pass ? "ok" : "FAILED");
    t->n++;
  }
  t->failed += !pass;
}

/* A small float64 attention or mixture-of-experts block, capture-safe or
 * not, with the same seed either way. */
static bk_status check_block(bk_context *ctx, int moe, int capturable, ex_block **b) {
  const ex_attention_cfg att = {4, 32, 16, 2};
  const ex_moe_cfg mix = {4 * 32, 16, 4, 2, 16};
  const bk_status st =
      moe ? ex_moe_create(ctx, BK_F64, &mix, 41, b) : ex_attention_create(ctx, BK_F64, &att, 42, b);
  if (st == BK_OK && capturable) ex_block_set_capturable(*b);
  return st;
}

/* Each capture-safe block against finite differences and against its
 * default form (outputs, input and parameter gradients), in float64. */
static bk_status check_forms(bk_context *ctx, graph_table *t) {
  static const char *name[2] = {"attention, bk_bmm + scale", "mixture of experts, dense routing"};
  bk_status st = BK_OK;
  ex_block *safe = NULL, *plain = NULL;
  bk_buffer *xb = NULL;
  double *x = NULL;
  char what[112];
  for (int moe = 0; moe < 2; moe++) {
    double fd = 0.0, cross = 0.0;
    EX_TRY(check_block(ctx, moe, 1, &safe));
    EX_TRY(check_block(ctx, moe, 0, &plain));
    x = malloc((size_t)safe->in_len * sizeof *x);
    if (!x) {
      st = BK_ERR_OUT_OF_MEMORY;
      goto done;
    }
    ex_rng rng = ex_rng_seed(50 + (uint64_t)moe);
    for (int64_t i = 0; i < safe->in_len; i++) x[i] = 2.0 * ex_uniform(&rng);
    EX_TRY(ex_from_doubles(ctx, BK_F64, x, safe->in_len, &xb));
    EX_TRY(ex_gradcheck(ctx, safe, xb, 60 + (uint64_t)moe, 10, 1e-5, &fd));
    snprintf(what, sizeof what, "%s: gradient vs finite differences, f64", name[moe]);
    table_row(t, what, fd, 1e-6);
    EX_TRY(ex_crosscheck(ctx, safe, ctx, plain, x, 70 + (uint64_t)moe, &cross));
    snprintf(what, sizeof what, "%s: vs the default form, f64", name[moe]);
    table_row(t, what, cross, 1e-10);
    ex_block_destroy(safe);
    ex_block_destroy(plain);
    safe = plain = NULL;
    EX_RELEASE(&xb);
    free(x);
    x = NULL;
  }
done:
  ex_block_destroy(safe);
  ex_block_destroy(plain);
  EX_RELEASE(&xb);
  free(x);
  return st;
}

/* ---- the command ---------------------------------------------------------------------- */

static int run_all(graph_run *r) {
  graph_table t = {.n = 0, .failed = 0};
  double *eager = malloc((size_t)r->steps * sizeof *eager);
  double *replay = malloc((size_t)r->steps * sizeof *replay);
  double eager_ms = 0.0, replay_ms = 0.0;
  size_t nodes = 0;
  const char *stage = "allocating the loss records";
  bk_status st = eager && replay ? BK_OK : BK_ERR_OUT_OF_MEMORY;
  int same = 0, first_diff = -1, status = 1;
  if (st == BK_OK) {
    stage = "checking the capture-safe blocks";
    printf("checking the capture-safe blocks ...\n");
    fflush(stdout);
    st = check_forms(r->ctx, &t);
  }
  if (st == BK_OK) {
    stage = "the eager training run";
    printf("training %d steps eagerly ...\n", r->steps);
    fflush(stdout);
    st = train_run(r, 0, eager, &eager_ms, &nodes);
  }
  if (st == BK_OK) {
    stage = "capturing and replaying the training step";
    printf("capturing one step and replaying it %d times ...\n", r->steps);
    fflush(stdout);
    st = train_run(r, 1, replay, &replay_ms, &nodes);
  }
  if (st != BK_OK) {
    run_report(r, st, stage);
    printf("\nFAILED\n");
    goto done;
  }

  for (int i = 0; i < r->steps; i++) {
    if (memcmp(&eager[i], &replay[i], sizeof eager[i]) == 0)
      same++;
    else if (first_diff < 0)
      first_diff = i;
  }
  const int w = r->steps / 10 > 0 ? r->steps / 10 : 1;
  const double first = mean_of(eager, 0, w), last = mean_of(eager, r->steps - w, r->steps);
  const int falls = last < 0.9 * first;
  t.failed += (same != r->steps) + !falls;

  printf("\n| check | max error |\n|---|---|\n");
  for (int i = 0; i < t.n; i++) printf("| %s | %s |\n", t.check[i], t.result[i]);
  printf("| training: mean loss of last %d steps < 0.9 x first %d | %.4f -> %.4f %s |\n", w, w,
         first, last, falls ? "ok" : "FAILED");
  if (same == r->steps)
    printf("| replayed losses bitwise equal to the eager run's | %d of %d steps ok |\n", same,
           r->steps);
  else
    printf("| replayed losses bitwise equal to the eager run's | %d of %d steps, first "
           "difference at step %d: %.17g vs %.17g FAILED |\n",
           same, r->steps, first_diff + 1, eager[first_diff], replay[first_diff]);

  printf("\n| training step (%s; forward, backward, SGD) | time per step |\n|---|---|\n",
         r->dtype == BK_F32 ? "f32" : "f64");
  printf("| eager | %.3f ms |\n", eager_ms);
  printf("| replayed CUDA graph (%zu nodes) | %.3f ms |\n", nodes, replay_ms);
  printf("| ratio eager / replayed | %.2fx |\n", eager_ms / replay_ms);
  printf("(mean over steps 2..%d; a step is the batch upload, the step and the loss read)\n",
         r->steps);
  printf("\nloss: first step %.4f, last step %.4f\n", eager[0], eager[r->steps - 1]);
  if (t.failed) {
    printf("\nFAILED: %d check%s\n", t.failed, t.failed == 1 ? "" : "s");
  } else {
    printf("\nall checks passed\n");
    status = 0;
  }
done:
  free(eager);
  free(replay);
  return status;
}

int bk_tool_demo_graph(bk_device device, bk_dtype dtype, int steps, double lr) {
  char dev[32];
  graph_run r = {.ctx = NULL, .s = NULL, .dtype = dtype, .steps = steps, .lr = lr};
  int status = 1;
  if (device.kind != BK_DEVICE_CUDA) {
    fprintf(stderr, "bufkern demo: --graph needs a CUDA device (--device cuda:N), not %s\n",
            cli_device_text(device, dev, sizeof dev));
    return 2;
  }
  if (steps < 2) {
    fprintf(stderr, "bufkern demo: --graph needs --steps of at least 2, not %d\n", steps);
    return 2;
  }
  if (cli_report(bk_context_create(device, &r.ctx), "creating the device context")) return 1;
  bk_status st = cu_check(&r.note, cudaSetDevice(device.index), "cudaSetDevice");
  if (st == BK_OK)
    st = cu_check(&r.note, cudaStreamCreateWithFlags(&r.s, cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags");
  if (st == BK_OK) st = bk_context_set_stream(r.ctx, r.s);
  if (st == BK_OK) {
    printf("bufkern demo --graph on %s, %s, %d training steps\n",
           cli_device_text(device, dev, sizeof dev), dtype == BK_F32 ? "float32" : "float64",
           steps);
    printf("model: the demo's, capture-safe: attention scores by bk_bmm and a scale; the\n"
           "       mixture of experts routed densely on the device (every expert on every\n"
           "       token, weighted by its gate, exactly 0 where not selected)\n\n");
    status = run_all(&r);
  } else {
    run_report(&r, st, "setting up the demo's stream");
  }
  /* Back to the context's own stream before the demo's stream goes. */
  if (r.s) {
    if (cli_report(bk_context_reset_stream(r.ctx), "leaving the demo's stream")) status = 1;
    if (cudaStreamDestroy(r.s) != cudaSuccess) status = 1;
  }
  bk_context_destroy(r.ctx);
  return status;
}

#endif /* BK_HAVE_CUDA */
