/*
 * comm.cu — the one place that calls NCCL: communicator creation and
 * destruction, the unique id as text, and the collectives issued as one NCCL
 * group over the local ranks. The front door (src/ops/comm.c) has validated
 * every argument. Compiled only when CMake found NCCL (BK_HAVE_NCCL); without
 * it this file is empty.
 */
#include "cuda_internal.h"

#ifdef BK_HAVE_NCCL

#include <nccl.h>

#include <stdio.h>
#include <string.h>

/* Maps an NCCL result to BK_ERR_DEVICE with NCCL's own words: the code's
 * text and the detail of the last error NCCL recorded. */
static bk_status nccl_status(ncclResult_t r, ncclComm_t comm, const char *fn, const char *what) {
  if (r == ncclSuccess) return BK_OK;
  const char *detail = ncclGetLastError(comm);
  return bk__fail(BK_ERR_DEVICE, fn, "%s: %s%s%s", what, ncclGetErrorString(r),
                  detail && detail[0] ? ": " : "", detail ? detail : "");
}

#define BK_NCCL_TRY(expr, comm, fn, what)                            \
  do {                                                               \
    bk_status bk_nccl_st_ = nccl_status((expr), (comm), (fn), (what)); \
    if (bk_nccl_st_ != BK_OK) return bk_nccl_st_;                    \
  } while (0)

extern "C" bk_status bk__nccl_init_all(const char *fn, const int *devs, int n, void **comms) {
  ncclComm_t made[64];
  BK_NCCL_TRY(ncclCommInitAll(made, n, devs), NULL, fn, "ncclCommInitAll");
  for (int i = 0; i < n; i++) comms[i] = made[i];
  return BK_OK;
}

extern "C" bk_status bk__nccl_unique_id(const char *fn, char *hex) {
  ncclUniqueId id;
  BK_NCCL_TRY(ncclGetUniqueId(&id), NULL, fn, "ncclGetUniqueId");
  static const char digits[] = "0123456789abcdef";
  const unsigned char *b = (const unsigned char *)id.internal;
  for (size_t i = 0; i < sizeof id.internal; i++) {
    hex[2 * i] = digits[b[i] >> 4];
    hex[2 * i + 1] = digits[b[i] & 15];
  }
  hex[2 * sizeof id.internal] = '\0';
  return BK_OK;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

extern "C" bk_status bk__nccl_init_rank(const char *fn, int dev, int rank, int world,
                                        const char *hex, void **comm) {
  static_assert(sizeof(ncclUniqueId) * 2 + 1 == BK_NCCL_ID_HEX, "id text length");
  ncclUniqueId id;
  unsigned char *b = (unsigned char *)id.internal;
  for (size_t i = 0; i < sizeof id.internal; i++) {
    const int hi = hex_digit(hex[2 * i]), lo = hi < 0 ? -1 : hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "the id text has a non-hex digit near %zu",
                      2 * i);
    b[i] = (unsigned char)(hi << 4 | lo);
  }
  BK_CUDA_TRY(cudaSetDevice(dev), fn, "cudaSetDevice");
  ncclComm_t c = NULL;
  BK_NCCL_TRY(ncclCommInitRank(&c, world, id, rank), NULL, fn, "ncclCommInitRank");
  *comm = c;
  return BK_OK;
}

extern "C" void bk__nccl_destroy(const int *devs, int n, void *const *comms) {
  /* The caller has waited for every rank's stream, so nothing is in
   * flight; destroying one communicator after another from one thread is
   * the sequence NCCL documents for one process over several GPUs. */
  for (int i = 0; i < n; i++) {
    (void)cudaSetDevice(devs[i]);
    (void)ncclCommDestroy((ncclComm_t)comms[i]);
  }
  (void)cudaGetLastError();
}

extern "C" bk_status bk__nccl_collective(const char *fn, bk_coll_kind kind, bk_reduce_op op,
                                         int root, int n, void *const *comms,
                                         bk_context *const *ctxs, bk_dtype dt,
                                         const void *const *send, void *const *recv,
                                         size_t count) {
  const ncclDataType_t type = dt == BK_F32 ? ncclFloat32 : ncclFloat64;
  const ncclRedOp_t red = op == BK_REDUCE_MAX ? ncclMax : ncclSum;
  static const char *const names[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
                                      "ncclBroadcast"};
  BK_NCCL_TRY(ncclGroupStart(), NULL, fn, "ncclGroupStart");
  ncclResult_t r = ncclSuccess;
  int failed = -1;
  for (int i = 0; i < n && r == ncclSuccess; i++) {
    ncclComm_t c = (ncclComm_t)comms[i];
    cudaStream_t s = bk_stream(ctxs[i]);
    /* NCCL queues each rank's kernels on the current device. */
    if (cudaSetDevice(bk_cu(ctxs[i])->device) != cudaSuccess) {
      (void)cudaGetLastError();
      r = ncclUnhandledCudaError;
      failed = i;
      break;
    }
    switch (kind) {
    case BK_COLL_ALL_REDUCE: r = ncclAllReduce(send[i], recv[i], count, type, red, c, s); break;
    case BK_COLL_ALL_GATHER: r = ncclAllGather(send[i], recv[i], count, type, c, s); break;
    case BK_COLL_REDUCE_SCATTER:
      r = ncclReduceScatter(send[i], recv[i], count, type, red, c, s);
      break;
    case BK_COLL_BROADCAST: r = ncclBroadcast(send[i], recv[i], count, type, root, c, s); break;
    }
    if (r != ncclSuccess) failed = i;
  }
  /* The group is closed even after a failed enqueue, so NCCL's group state
   * stays balanced for the next call. */
  const ncclResult_t end = ncclGroupEnd();
  if (r != ncclSuccess) {
    char what[64];
    snprintf(what, sizeof what, "%s (local rank %d)", names[kind], failed);
    return nccl_status(r, (ncclComm_t)comms[failed], fn, what);
  }
  char what[64];
  snprintf(what, sizeof what, "%s (ncclGroupEnd)", names[kind]);
  return nccl_status(end, NULL, fn, what);
}

#endif /* BK_HAVE_NCCL */
