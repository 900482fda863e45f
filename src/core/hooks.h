/*
 * hooks.h — test hooks of the CUDA backend, defined only in CUDA builds and
 * called only by the test programs. Plain C with no dependency beyond
 * bufkern.h, so that the CUDA sources include it too.
 */
#ifndef BK_HOOKS_H
#define BK_HOOKS_H

#include "bufkern.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA builds (src/cuda/layernorm_vjp.cu, planner test hook): the number of
 * layer-norm VJP plans, over a fixed list of shapes, that a device with these
 * facts could not launch or that would miss columns; msg gets the first. */
BK_API int64_t bk__cuda_layernorm_vjp_plan_check(int sm_count, int smem_per_sm, int smem_optin,
                                                 int smem_reserved, int regs_per_sm, char *msg,
                                                 size_t cap);

/* CUDA builds (src/cuda/topk.cu, test hook): the top-k kernel later calls in
 * this process use where it can take the shape (the radix select takes
 * every shape); BK_TOPK_AUTO restores the planner's choice. */
enum { BK_TOPK_AUTO = 0, BK_TOPK_GROUP = 1, BK_TOPK_SMALL = 2, BK_TOPK_SELECT = 3 };
BK_API void bk__cuda_topk_force(int path);

/* CUDA builds (src/cuda/axis.cu, strategy test hook): ctx's middle-axis
 * softmax, axis sums and broadcast adjoints take `strategy` from now on
 * where the geometry allows it: 0 the planner's choice, 1 columns in
 * registers, 2 one tile per fibre (no chunks for parallelism, no clusters),
 * 3 at least two chunks per fibre (of more than 16 terms) folded by a
 * second kernel, 4 a softmax's chunks in one thread-block cluster, 5 the
 * planner with tiles sized for two blocks per multiprocessor instead of
 * four (the comparison of dev/cuda/axis_lab.c). False (nothing changed) for
 * a non-CUDA context or another value. */
BK_API bool bk__cuda_axis_force(bk_context *ctx, int strategy);

/* CUDA builds (src/cuda/softmax.cu, strategy test hook): ctx's last-axis
 * softmax and hard-masked row softmax take `strategy` from now on, past the
 * shared-memory row cache: 0 the planner's choice, 1 loads element by
 * element on the planner's path, 2 16-byte vectors (covering the rows when
 * their width is not a multiple of the vector; element by element when the
 * buffers are not all 16-byte aligned) on the planner's path, 3 and 4 the
 * same loads with a block per row, 5 and 6 the same loads with every row
 * of more than one vector cut into two or three chunks (the split path).
 * False (nothing changed) for a non-CUDA context or another value. */
BK_API bool bk__cuda_rows_force(bk_context *ctx, int strategy);

/* CUDA builds (src/cuda/backend.cu, test hook): device blocks of host data
 * that captured graphs own and that ctx has not yet freed (held by a live
 * graph, or released and waiting for ctx's next allocation). -1 for a
 * non-CUDA context. */
BK_API int64_t bk__cuda_graph_blocks(bk_context *ctx);

#ifdef __cplusplus
}
#endif

#endif /* BK_HOOKS_H */
