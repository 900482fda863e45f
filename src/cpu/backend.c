/*
 * backend.c — the CPU backend's context and memory members and its table.
 * CPU memory is plain host memory; every operation completes before it
 * returns, so synchronization is a no-op.
 */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

static bk_status cpu_context_init(bk_context *ctx, const char *fn, int index) {
  (void)fn;
  (void)index;
  bk__ctx_set_impl(ctx, NULL);
  return BK_OK;
}

static void cpu_context_fini(bk_context *ctx) { (void)ctx; }

static bk_status cpu_context_set_stream(bk_context *ctx, void *stream) {
  (void)ctx;
  (void)stream;
  return bk__fail(BK_ERR_UNSUPPORTED, "bk_context_set_stream", "the CPU backend has no streams");
}

static bk_status cpu_context_synchronize(bk_context *ctx) {
  (void)ctx;
  return BK_OK;
}

/* 64-byte alignment keeps vector loads of every row start aligned when the
 * row length allows it. */
static bk_status cpu_mem_alloc(bk_context *ctx, const char *fn, size_t bytes, void **ptr) {
  (void)ctx;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded < bytes)
    return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of host memory: the size overflows",
                    bytes);
  void *p = bk__inject_should_fail() ? NULL : aligned_alloc(64, rounded);
  if (!p) return bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of host memory", bytes);
  *ptr = p;
  return BK_OK;
}

static void cpu_mem_free(bk_context *ctx, void *ptr) {
  (void)ctx;
  free(ptr);
}

static bk_status cpu_mem_copy(bk_context *ctx, const char *fn, void *dst, const void *src,
                              size_t bytes) {
  (void)ctx;
  (void)fn;
  memcpy(dst, src, bytes);
  return BK_OK;
}

static bk_status cpu_mem_zero(bk_context *ctx, const char *fn, void *dst, size_t bytes) {
  (void)ctx;
  (void)fn;
  memset(dst, 0, bytes);
  return BK_OK;
}

const bk_backend bk__cpu_backend = {
    .name = "cpu",
    .context_init = cpu_context_init,
    .context_fini = cpu_context_fini,
    .context_set_stream = cpu_context_set_stream,
    .context_synchronize = cpu_context_synchronize,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .mem_upload = cpu_mem_copy,
    .mem_download = cpu_mem_copy,
    .mem_copy = cpu_mem_copy,
    .mem_zero = cpu_mem_zero,
    .softmax = bk__cpu_softmax,
    .xent_weighted_mean = bk__cpu_xent_weighted_mean,
    .xent_teacher = bk__cpu_xent_teacher,
    .conv = bk__cpu_conv,
    .rows_sum = bk__cpu_rows_sum,
    .rows_max = bk__cpu_rows_max,
    .rows_first_max_mask = bk__cpu_rows_first_max_mask,
    .rows_topk_mask = bk__cpu_rows_topk_mask,
    .rows_masked_softmax = bk__cpu_rows_masked_softmax,
    .broadcast_col = bk__cpu_broadcast_col,
    .broadcast_to = bk__cpu_broadcast_to,
    .broadcast_to_adjoint = bk__cpu_broadcast_to_adjoint,
    .swap_adjacent = bk__cpu_swap_adjacent,
    .sum_axis = bk__cpu_sum_axis,
    .layernorm_forward = bk__cpu_layernorm_forward,
    .layernorm_backward = bk__cpu_layernorm_backward,
    .bmm = bk__cpu_bmm,
    .bmm_scaled = bk__cpu_bmm_scaled,
    .rfft = bk__cpu_rfft,
    .irfft = bk__cpu_irfft,
    .scan_diag = bk__cpu_scan_diag,
    .scan_diag_backward = bk__cpu_scan_diag_backward,
    .rows_gather = bk__cpu_rows_gather,
    .rows_scatter_add = bk__cpu_rows_scatter_add,
};
