/* Teacher gradient with each row split across a thread-block cluster (xent_cluster.cu). */
#ifndef BK_CUDA_XENT_CLUSTER_CUH
#define BK_CUDA_XENT_CLUSTER_CUH

#include "cuda_internal.h"

/*
 * Queues the teacher gradient (contract §3.3, gradient == 1) of (rows, cols)
 * logits S and T into y when the cluster path serves this shape on this
 * device, and sets *done to 1; otherwise queues nothing and leaves *done 0
 * so the caller takes another path. Requires 16-byte aligned S, T and y and
 * cols a multiple of the 16-byte vector width. float32 rows stage both
 * operands in shared memory (two stages); float64 rows keep their share in
 * registers with the next row's copies staged, and shapes that kernel does
 * not serve take the two-stage kernel.
 */
bk_status bk__cuda_xent_grad_cluster(bk_context *ctx, const char *fn, bk_dtype dt, const void *S,
                                     const void *T, void *y, int64_t rows, int64_t cols,
                                     int *done);

#endif
