/*
 * comm.c — communicators and collectives: the front door. Every argument is
 * validated here, once, the same way in every build; NCCL is called only
 * from src/cuda/comm.cu. Without NCCL every creation fails with
 * BK_ERR_UNSUPPORTED after its argument checks, so no communicator exists
 * and the collectives only ever see NULL.
 */
#define _POSIX_C_SOURCE 200809L

#include "../core/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Local ranks one process may hold: the GPUs one host can carry. */
#define BK_COMM_MAX_LOCAL 64

/* How long the ranks other than 0 wait for rank 0's id file. */
#define BK_COMM_ID_WAIT_S 120

struct bk_comm {
  int world; /* ranks in every process */
  int rank0; /* global rank of local rank 0 */
  int n;     /* local ranks */
  bk_context *ctx[BK_COMM_MAX_LOCAL]; /* retained */
  int dev[BK_COMM_MAX_LOCAL];         /* CUDA ordinals */
  void *nccl[BK_COMM_MAX_LOCAL];      /* ncclComm_t of each local rank */
};

#ifndef BK_HAVE_NCCL
static bk_status no_nccl(const char *fn) {
  return bk__fail(BK_ERR_UNSUPPORTED, fn,
                  "this build has no NCCL (it needs the CUDA backend and nccl.h / libnccl)");
}
#endif

/* ---- creation -------------------------------------------------------------------- */

/* A CUDA context, or BK_ERR_UNSUPPORTED naming it. */
static bk_status check_cuda_ctx(const char *fn, const char *name, const bk_context *ctx) {
  if (ctx->device.kind != BK_DEVICE_CUDA)
    return bk__fail(BK_ERR_UNSUPPORTED, fn,
                    "%s is a CPU context; communicators join CUDA contexts only", name);
  return BK_OK;
}

#ifdef BK_HAVE_NCCL
/* A communicator shell holding (retaining) its local contexts. */
static bk_status comm_new(const char *fn, bk_context *const *ctxs, int n, int world, int rank0,
                          bk_comm **out) {
  bk_comm *c = bk__host_zalloc(fn, "the communicator", 1, sizeof *c);
  if (!c) return BK_ERR_OUT_OF_MEMORY;
  c->world = world;
  c->rank0 = rank0;
  c->n = n;
  for (int i = 0; i < n; i++) {
    c->ctx[i] = ctxs[i];
    c->dev[i] = (int)ctxs[i]->device.index;
    bk__context_retain(ctxs[i]);
  }
  *out = c;
  return BK_OK;
}

/* Frees a shell whose NCCL communicators are gone or were never made. */
static void comm_free(bk_comm *c) {
  for (int i = 0; i < c->n; i++) bk__context_release(c->ctx[i]);
  bk__host_free(c);
}

/* Hands out a shell whose NCCL initialization returned st, or frees it. */
static bk_status comm_finish(bk_comm *c, bk_status st, bk_comm **out) {
  if (st != BK_OK) {
    comm_free(c);
    return st;
  }
  *out = c;
  return BK_OK;
}
#endif

bk_status bk_comm_create(bk_context *const *ctxs, int n, bk_comm **out) {
  static const char fn[] = "bk_comm_create";
  if (!out) return bk__fail(BK_ERR_NULL, fn, "out is NULL");
  *out = NULL;
  if (!ctxs) return bk__fail(BK_ERR_NULL, fn, "ctxs is NULL");
  if (n < 1 || n > BK_COMM_MAX_LOCAL)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "n = %d is outside [1, %d]", n,
                    BK_COMM_MAX_LOCAL);
  char name[32];
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "ctxs[%d]", i);
    if (!ctxs[i]) return bk__fail(BK_ERR_NULL, fn, "%s is NULL", name);
    bk_status st = check_cuda_ctx(fn, name, ctxs[i]);
    if (st != BK_OK) return st;
    for (int j = 0; j < i; j++)
      if (ctxs[j]->device.index == ctxs[i]->device.index)
        return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                        "ctxs[%d] and ctxs[%d] are both on cuda:%" PRId32
                        " (NCCL runs one rank per GPU)",
                        j, i, ctxs[i]->device.index);
  }
#ifdef BK_HAVE_NCCL
  bk_comm *c = NULL;
  bk_status st = comm_new(fn, ctxs, n, n, 0, &c);
  if (st != BK_OK) return st;
  return comm_finish(c, bk__nccl_init_all(fn, c->dev, n, c->nccl), out);
#else
  return no_nccl(fn);
#endif
}

#ifdef BK_HAVE_NCCL
/* Sleeps about ten milliseconds between looks at the id file. */
static void nap(void) {
  struct timespec ts = {0, 10 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* Rank 0 refuses a path that exists: a file left by an earlier run would
 * hand the other ranks a stale id. */
static bk_status refuse_existing(const char *fn, const char *path) {
  if (access(path, F_OK) == 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "id_file \"%s\" already exists (left by an earlier run?): remove it or use a "
                    "fresh path",
                    path);
  return BK_OK;
}

/* Rank 0: writes the id to a private temporary file, then links it to the
 * agreed path, which fails if the path exists: the others never see a
 * partial file. */
static bk_status publish_id(const char *fn, const char *path, const char *hex) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "id_file \"%s\" is too long", path);
  FILE *f = fopen(tmp, "w");
  if (!f)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "cannot write \"%s\": %s", tmp, strerror(errno));
  const int ok = fprintf(f, "%s\n", hex) > 0;
  if (fclose(f) != 0 || !ok) {
    (void)unlink(tmp);
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "cannot write \"%s\"", tmp);
  }
  const int linked = link(tmp, path);
  const int err = errno;
  (void)unlink(tmp);
  if (linked != 0)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "cannot create id_file \"%s\": %s", path,
                    strerror(err));
  return BK_OK;
}

/* The other ranks: wait for the file, then read exactly one id line. */
static bk_status await_id(const char *fn, const char *path, char *hex) {
  const double limit = (double)BK_COMM_ID_WAIT_S;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    FILE *f = fopen(path, "r");
    if (f) {
      char line[BK_NCCL_ID_HEX + 2];
      const int got = fgets(line, sizeof line, f) != NULL;
      fclose(f);
      size_t len = got ? strcspn(line, "\n") : 0;
      if (len != BK_NCCL_ID_HEX - 1)
        return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                        "id_file \"%s\" does not hold an id (%zu hex digits, expected %d)", path,
                        len, BK_NCCL_ID_HEX - 1);
      memcpy(hex, line, len);
      hex[len] = '\0';
      return BK_OK;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    const double waited =
        (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
    if (waited > limit)
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                      "id_file \"%s\" did not appear within %d s (is rank 0 running?)", path,
                      BK_COMM_ID_WAIT_S);
    nap();
  }
}
#endif

bk_status bk_comm_create_rank(bk_context *ctx, int rank, int world_size, const char *id_file,
                              bk_comm **out) {
  static const char fn[] = "bk_comm_create_rank";
  if (!out) return bk__fail(BK_ERR_NULL, fn, "out is NULL");
  *out = NULL;
  if (!ctx) return bk__fail(BK_ERR_NULL, fn, "ctx is NULL");
  if (!id_file) return bk__fail(BK_ERR_NULL, fn, "id_file is NULL");
  if (world_size < 1)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "world_size = %d is below 1", world_size);
  if (rank < 0 || rank >= world_size)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "rank = %d is outside [0, world_size = %d)",
                    rank, world_size);
  if (id_file[0] == '\0') return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "id_file is empty");
  bk_status st = check_cuda_ctx(fn, "ctx", ctx);
  if (st != BK_OK) return st;
#ifdef BK_HAVE_NCCL
  char hex[BK_NCCL_ID_HEX];
  if (rank == 0) {
    /* Refused before NCCL starts its rendezvous service for a new id; the
     * link in publish_id closes the race with another rank 0. */
    st = refuse_existing(fn, id_file);
    if (st == BK_OK) st = bk__nccl_unique_id(fn, hex);
    if (st == BK_OK) st = publish_id(fn, id_file, hex);
  } else {
    st = await_id(fn, id_file, hex);
  }
  if (st != BK_OK) return st;
  bk_comm *c = NULL;
  st = comm_new(fn, &ctx, 1, world_size, rank, &c);
  if (st != BK_OK) return st;
  return comm_finish(c, bk__nccl_init_rank(fn, c->dev[0], rank, world_size, hex, &c->nccl[0]),
                     out);
#else
  return no_nccl(fn);
#endif
}

/* A decimal integer environment variable in [lo, hi]. */
static bk_status env_int(const char *fn, const char *name, int lo, int hi, int *v) {
  const char *s = getenv(name);
  if (!s || !s[0])
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "environment variable %s is not set", name);
  char *end = NULL;
  errno = 0;
  const long x = strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || x < lo || x > hi)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "environment variable %s = \"%s\" is not an integer in [%d, %d]", name, s, lo,
                    hi);
  *v = (int)x;
  return BK_OK;
}

bk_status bk_comm_create_from_env(bk_context *ctx, bk_comm **out) {
  static const char fn[] = "bk_comm_create_from_env";
  if (!out) return bk__fail(BK_ERR_NULL, fn, "out is NULL");
  *out = NULL;
  if (!ctx) return bk__fail(BK_ERR_NULL, fn, "ctx is NULL");
  int world = 0, rank = 0;
  bk_status st = env_int(fn, BK_ENV_WORLD_SIZE, 1, 1 << 30, &world);
  if (st == BK_OK) st = env_int(fn, BK_ENV_RANK, 0, world - 1, &rank);
  if (st != BK_OK) return st;
  const char *path = getenv(BK_ENV_COMM_ID_FILE);
  if (!path || !path[0])
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "environment variable %s is not set",
                    BK_ENV_COMM_ID_FILE);
  return bk_comm_create_rank(ctx, rank, world, path, out);
}

void bk_comm_destroy(bk_comm **comm) {
  if (!comm || !*comm) return;
  bk_comm *c = *comm;
  *comm = NULL;
#ifdef BK_HAVE_NCCL
  /* Queued collectives finish first: their outputs may still be read. */
  for (int i = 0; i < c->n; i++) (void)c->ctx[i]->backend->context_synchronize(c->ctx[i]);
  bk__nccl_destroy(c->dev, c->n, c->nccl);
  comm_free(c);
#else
  (void)c;
#endif
}

int bk_comm_world_size(const bk_comm *comm) { return comm ? comm->world : 0; }
int bk_comm_local_count(const bk_comm *comm) { return comm ? comm->n : 0; }
int bk_comm_rank(const bk_comm *comm) { return comm ? comm->rank0 : -1; }

bk_status bk_comm_local_rank(const bk_comm *comm, const bk_context *ctx, int *local) {
  static const char fn[] = "bk_comm_local_rank";
  if (!local) return bk__fail(BK_ERR_NULL, fn, "local is NULL");
  *local = -1;
  if (!comm) return bk__fail(BK_ERR_NULL, fn, "comm is NULL");
  if (!ctx) return bk__fail(BK_ERR_NULL, fn, "ctx is NULL");
  for (int i = 0; i < comm->n; i++)
    if (bk__device_equal(comm->ctx[i]->device, ctx->device)) {
      *local = i;
      return BK_OK;
    }
  return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                  "ctx is on device (%d, %" PRId32 "), which is not in the communicator",
                  (int)ctx->device.kind, ctx->device.index);
}

/* ---- collectives ------------------------------------------------------------------- */

/* Validates one collective, makes its outputs and runs it. */
static bk_status collective(const char *fn, bk_coll_kind kind, bk_comm *comm, bk_reduce_op op,
                            int root, const bk_buffer *const *in, bk_buffer **out);

bk_status bk_comm_all_reduce(bk_comm *comm, bk_reduce_op op, const bk_buffer *const *in,
                             bk_buffer **out) {
  return collective("bk_comm_all_reduce", BK_COLL_ALL_REDUCE, comm, op, 0, in, out);
}

bk_status bk_comm_all_gather(bk_comm *comm, const bk_buffer *const *in, bk_buffer **out) {
  return collective("bk_comm_all_gather", BK_COLL_ALL_GATHER, comm, BK_REDUCE_SUM, 0, in, out);
}

bk_status bk_comm_reduce_scatter(bk_comm *comm, bk_reduce_op op, const bk_buffer *const *in,
                                 bk_buffer **out) {
  return collective("bk_comm_reduce_scatter", BK_COLL_REDUCE_SCATTER, comm, op, 0, in, out);
}

bk_status bk_comm_broadcast(bk_comm *comm, int root, const bk_buffer *const *in,
                            bk_buffer **out) {
  return collective("bk_comm_broadcast", BK_COLL_BROADCAST, comm, BK_REDUCE_SUM, root, in, out);
}

/* Argument checks shared by the collectives: the inputs are present, of one
 * supported dtype and one length, each on its local rank's device; *in_len
 * and *out_len receive the input and output lengths. */
static bk_status check_inputs(const char *fn, bk_coll_kind kind, const bk_comm *comm,
                              bk_reduce_op op, int root, const bk_buffer *const *in,
                              int64_t *in_len, int64_t *out_len) {
  for (int i = 0; i < comm->n; i++)
    if (!in[i]) return bk__fail(BK_ERR_NULL, fn, "in[%d] is NULL", i);
  const int reduces = kind == BK_COLL_ALL_REDUCE || kind == BK_COLL_REDUCE_SCATTER;
  if (reduces && op != BK_REDUCE_SUM && op != BK_REDUCE_MAX)
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                    "op = %d is not BK_REDUCE_SUM (0) or BK_REDUCE_MAX (1)", (int)op);
  if (kind == BK_COLL_BROADCAST && (root < 0 || root >= comm->world))
    return bk__fail(BK_ERR_INVALID_ARGUMENT, fn, "root = %d is outside [0, world size %d)", root,
                    comm->world);
  for (int i = 0; i < comm->n; i++) {
    if (bk__dtype_size(in[i]->dtype) == 0)
      return bk__fail(BK_ERR_DTYPE, fn, "in[%d] has dtype %s; collectives take f32 and f64", i,
                      bk__dtype_name(in[i]->dtype));
    if (in[i]->dtype != in[0]->dtype)
      return bk__fail(BK_ERR_DTYPE, fn, "in[%d] has dtype %s but in[0] has dtype %s", i,
                      bk__dtype_name(in[i]->dtype), bk__dtype_name(in[0]->dtype));
    if (in[i]->length != in[0]->length)
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                      "in[%d] has length %" PRId64 " but in[0] has length %" PRId64, i,
                      in[i]->length, in[0]->length);
  }
  const int64_t len = in[0]->length;
  *in_len = len;
  *out_len = len;
  if (kind == BK_COLL_ALL_GATHER) {
    bk_status st = bk__mul(fn, "world size * length of in[0]", comm->world, len, out_len);
    if (st != BK_OK) return st;
  } else if (kind == BK_COLL_REDUCE_SCATTER) {
    if (len % comm->world != 0)
      return bk__fail(BK_ERR_INVALID_ARGUMENT, fn,
                      "in[0] has length %" PRId64 ", not a multiple of the world size %d", len,
                      comm->world);
    *out_len = len / comm->world;
  }
  for (int i = 0; i < comm->n; i++) {
    const bk_device want = comm->ctx[i]->device;
    if (!bk__device_equal(in[i]->device, want))
      return bk__fail(BK_ERR_DEVICE_MISMATCH, fn,
                      "in[%d] is on device (%d, %" PRId32 ") but local rank %d of the "
                      "communicator is on cuda:%" PRId32,
                      i, (int)in[i]->device.kind, in[i]->device.index, i, want.index);
  }
  return BK_OK;
}

static bk_status collective(const char *fn, bk_coll_kind kind, bk_comm *comm, bk_reduce_op op,
                            int root, const bk_buffer *const *in, bk_buffer **out) {
  if (!out) return bk__fail(BK_ERR_NULL, fn, "out is NULL");
  if (!comm) return bk__fail(BK_ERR_NULL, fn, "comm is NULL");
  for (int i = 0; i < comm->n; i++) out[i] = NULL;
  if (!in) return bk__fail(BK_ERR_NULL, fn, "in is NULL");
  int64_t in_len = 0, out_len = 0;
  bk_status st = check_inputs(fn, kind, comm, op, root, in, &in_len, &out_len);
  if (st != BK_OK) return st;
#ifdef BK_HAVE_NCCL
  const bk_dtype dt = in[0]->dtype;
  for (int i = 0; i < comm->n && st == BK_OK; i++) {
    bk_call c = {fn, comm->ctx[i], comm->ctx[i]->backend, dt};
    st = bk__new_output(&c, out_len, &out[i]);
  }
  /* Every rank has the same lengths, so every rank skips an empty message
   * alike and NCCL never sees a collective only some ranks issue. */
  if (st == BK_OK && out_len > 0 && in_len > 0) {
    const void *send[BK_COMM_MAX_LOCAL];
    void *recv[BK_COMM_MAX_LOCAL];
    bk_context *owner[BK_COMM_MAX_LOCAL];
    for (int i = 0; i < comm->n; i++) {
      send[i] = in[i]->data;
      recv[i] = out[i]->data;
      /* An input made on another context of the GPU: order the collective
       * after its producer and the producer's later work (its frees
       * included) after the collective. */
      owner[i] = in[i]->owner && in[i]->owner != comm->ctx[i] ? in[i]->owner : NULL;
      if (owner[i] && st == BK_OK) st = comm->ctx[i]->backend->stream_wait(comm->ctx[i], owner[i]);
    }
    /* NCCL counts the per-rank block for reduce-scatter, the input otherwise. */
    const size_t count = (size_t)(kind == BK_COLL_REDUCE_SCATTER ? out_len : in_len);
    if (st == BK_OK)
      st = bk__nccl_collective(fn, kind, op, root, comm->n, comm->nccl, comm->ctx, dt, send, recv,
                               count);
    for (int i = 0; i < comm->n && st == BK_OK; i++)
      if (owner[i]) st = comm->ctx[i]->backend->stream_wait(owner[i], comm->ctx[i]);
  }
  if (st != BK_OK)
    for (int i = 0; i < comm->n; i++) bk__drop(&out[i]);
  return st;
#else
  return no_nccl(fn);
#endif
}
