/*
 * demo.h — the demo's model and training data, shared by `bufkern demo`
 * (bufkern.c) and its CUDA graph run (demo_graph.c).
 */
#ifndef BK_TOOL_DEMO_H
#define BK_TOOL_DEMO_H

#include "bufkern.h"
#include "examples.h"

/* The demo's model: embed, the four blocks, a head, the distillation loss.
 * *loss points at the chain's last child, whose targets change per batch;
 * its input length is the length of the teacher logits and of the labels. */
bk_status model_create(bk_context *ctx, bk_dtype dt, int64_t batch, ex_block **model,
                       ex_block **loss);

/* Sequences per batch of the one-device demo (its training run and the
 * batches of demo_batches_next). */
enum { DEMO_BATCH = 4 };

/* The training run's synthetic batches, in the order `bufkern demo` trains
 * on them: each call of demo_batches_next fills the next batch's input x
 * (the model's in_len doubles), teacher logits and one-hot labels (the loss
 * block's in_len doubles each). Two sources made by demo_batches_create
 * give the same sequence. NULL when out of memory. */
typedef struct demo_batches demo_batches;
demo_batches *demo_batches_create(void);
void demo_batches_next(demo_batches *b, double *x, double *teacher, double *labels);
void demo_batches_destroy(demo_batches *b);

/* Mean of loss[from, to); NaN when the range is empty. */
double mean_of(const double *loss, int from, int to);

/* `bufkern demo --graph`: trains the capture-safe model eagerly, then
 * records one training step into a CUDA graph and replays it on the same
 * batches. Returns the command's exit status (0, 1, or 2 without a CUDA
 * device). */
int bk_tool_demo_graph(bk_device device, bk_dtype dtype, int steps, double lr);

#endif /* BK_TOOL_DEMO_H */
