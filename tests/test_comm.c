/*
 * test_comm.c — communicators and collectives.
 *
 *   test_comm                 argument checks that hold in every build (CPU
 *                             contexts, NULLs, the environment), no GPU needed
 *   test_comm --gpu           one communicator over every visible GPU in this
 *                             process: every collective and dtype against a
 *                             host reference, bitwise repeatable, error cases
 *   test_comm --multiprocess  the same collectives with one process per GPU:
 *                             the program runs itself once per rank with
 *                             BK_RANK, BK_WORLD_SIZE and BK_COMM_ID_FILE set
 *
 * The GPU modes exit 77 (skipped) without a GPU or without NCCL. Each mode
 * prints a checksum of every collective's results, so two runs can be
 * compared for bitwise repeatability across processes.
 */
#define _POSIX_C_SOURCE 200809L

#include "testlib.h"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define SKIP 77
#define MAX_GPUS 64

/* ---- inputs and references ---------------------------------------------------- */

/* Input element j of global rank g for case `seed`: a value in [-1, 1)
 * from a hash, so every rank can rebuild every other rank's input. */
static double input_value(int g, int64_t j, uint64_t seed) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)g * 0xBF58476D1CE4E5B9ull + (uint64_t)j;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* The input of rank g as stored in dt (rounded once for f32). */
static double *rank_input(bk_dtype dt, int g, int64_t n, uint64_t seed) {
  double *v = tl_xmalloc((size_t)(n ? n : 1) * sizeof *v);
  for (int64_t j = 0; j < n; j++) {
    const double x = input_value(g, j, seed);
    v[j] = dt == BK_F32 ? (double)(float)x : x;
  }
  return v;
}

/* Element-wise sum (in float64) or max over every rank's input. */
static double *reduce_ref(bk_dtype dt, int world, int64_t n, uint64_t seed, bk_reduce_op op) {
  double *r = tl_xmalloc((size_t)(n ? n : 1) * sizeof *r);
  for (int64_t j = 0; j < n; j++) r[j] = op == BK_REDUCE_SUM ? 0.0 : -INFINITY;
  for (int g = 0; g < world; g++) {
    double *v = rank_input(dt, g, n, seed);
    for (int64_t j = 0; j < n; j++) r[j] = op == BK_REDUCE_SUM ? r[j] + v[j] : fmax(r[j], v[j]);
    free(v);
  }
  return r;
}

/* A running FNV-1a checksum of every result's bytes. */
static uint64_t checksum = 0xcbf29ce484222325ull;
static void checksum_add(const bk_buffer *b) {
  const int64_t n = bk_buffer_length(b);
  double *v = tl_read(b);
  const unsigned char *p = (const unsigned char *)v;
  for (size_t i = 0; i < (size_t)n * sizeof *v; i++) checksum = (checksum ^ p[i]) * 0x100000001b3ull;
  free(v);
}

/* ---- one communicator: every collective ------------------------------------------- */

typedef struct rig {
  bk_comm *comm;
  bk_context *ctx[MAX_GPUS]; /* local rank i's context */
  int n, world, rank0;
} rig;

static void release_all(bk_buffer **b, int n) {
  for (int i = 0; i < n; i++) {
    bk_buffer_release(b[i]);
    b[i] = NULL;
  }
}

/* Inputs of every local rank for case `seed`, on `on[i]` (the rank's own
 * context, or another context of its GPU). */
static void make_inputs(const rig *r, bk_context *const *on, bk_dtype dt, int64_t n,
                        uint64_t seed, bk_buffer **in) {
  for (int i = 0; i < r->n; i++) {
    double *v = rank_input(dt, r->rank0 + i, n, seed);
    in[i] = tl_buf_on(on[i], dt, v, n);
    free(v);
  }
}

/* One collective over a rig's local ranks. */
typedef bk_status (*coll_fn)(const rig *r, const bk_buffer *const *in, bk_buffer **out);

/* Runs one collective twice and checks: the documented output length and
 * device; equal bits on every repetition (and on every rank where all ranks
 * hold the same result); values against ref (the whole result, or rank g's
 * block of block_len when block_len > 0) within tol * scale, or exactly when
 * tol is 0. */
static void check_run(const rig *r, coll_fn run, const bk_buffer *const *in, const double *ref,
                      int64_t out_len, int64_t block_len, int same_on_all, double tol,
                      double scale) {
  bk_buffer *out[MAX_GPUS] = {NULL}, *again[MAX_GPUS] = {NULL};
  if (TL_OK(run(r, in, out)) != BK_OK) return;
  if (TL_OK(run(r, in, again)) != BK_OK) {
    release_all(out, r->n);
    return;
  }
  for (int i = 0; i < r->n; i++) {
    const int g = r->rank0 + i;
    TL_CHECK(bk_buffer_length(out[i]) == out_len, "out[%d] has length %" PRId64 ", expected %" PRId64,
             i, bk_buffer_length(out[i]), out_len);
    TL_CHECK(bk_buffer_device(out[i]).index == bk_context_device(r->ctx[i]).index,
             "out[%d] is not on local rank %d's GPU", i, i);
    TL_CHECK(tl_same_bits(out[i], again[i]), "rank %d: a repeated call gave other bits", g);
    if (same_on_all && i > 0)
      TL_CHECK(tl_same_bits(out[i], out[0]), "rank %d holds other bits than local rank 0", g);
    if (bk_buffer_length(out[i]) != out_len) continue;
    double *got = tl_read(out[i]);
    const double *want = block_len > 0 ? ref + (int64_t)g * block_len : ref;
    if (tol == 0.0)
      TL_EXACT(got, want, out_len);
    else
      TL_CLOSE(got, want, out_len, tol, scale);
    free(got);
    checksum_add(out[i]);
  }
  release_all(out, r->n);
  release_all(again, r->n);
}

static bk_reduce_op cur_op;
static int cur_root;
static bk_status run_all_reduce(const rig *r, const bk_buffer *const *in, bk_buffer **out) {
  return bk_comm_all_reduce(r->comm, cur_op, in, out);
}
static bk_status run_all_gather(const rig *r, const bk_buffer *const *in, bk_buffer **out) {
  return bk_comm_all_gather(r->comm, in, out);
}
static bk_status run_reduce_scatter(const rig *r, const bk_buffer *const *in, bk_buffer **out) {
  return bk_comm_reduce_scatter(r->comm, cur_op, in, out);
}
static bk_status run_broadcast(const rig *r, const bk_buffer *const *in, bk_buffer **out) {
  return bk_comm_broadcast(r->comm, cur_root, in, out);
}

/* Every collective, both reductions and both dtypes, on inputs made on
 * `on` (see make_inputs). */
static void check_collectives(const rig *r, bk_context *const *on) {
  static const int64_t lengths[] = {1, 1031, (1 << 20) + 7};
  const int W = r->world;
  for (int d = 0; d < TL_DTYPES; d++) {
    const bk_dtype dt = tl_dtypes[d];
    /* A sum of W terms, each rounded once: W ulps of the largest. */
    const double tol = (dt == BK_F32 ? 1.2e-7 : 2.3e-16) * (W + 1);
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
      const int64_t L = lengths[li];
      const uint64_t seed = 100 * (uint64_t)d + li;
      bk_buffer *in[MAX_GPUS] = {NULL};
      for (int o = 0; o < 2; o++) {
        cur_op = o == 0 ? BK_REDUCE_SUM : BK_REDUCE_MAX;
        make_inputs(r, on, dt, L, seed, in);
        double *ref = reduce_ref(dt, W, L, seed, cur_op);
        check_run(r, run_all_reduce, (const bk_buffer *const *)in, ref, L, 0, 1,
                  cur_op == BK_REDUCE_SUM ? tol : 0.0, W);
        free(ref);
        release_all(in, r->n);
        /* Reduce-scatter: W blocks of L, rank g keeps block g. */
        make_inputs(r, on, dt, W * L, seed + 7, in);
        ref = reduce_ref(dt, W, W * L, seed + 7, cur_op);
        check_run(r, run_reduce_scatter, (const bk_buffer *const *)in, ref, L, L, 0,
                  cur_op == BK_REDUCE_SUM ? tol : 0.0, W);
        free(ref);
        release_all(in, r->n);
      }
      /* All-gather: rank g's input lands in block g everywhere. */
      make_inputs(r, on, dt, L, seed + 11, in);
      double *ref = tl_xmalloc((size_t)(W * L) * sizeof *ref);
      for (int g = 0; g < W; g++) {
        double *v = rank_input(dt, g, L, seed + 11);
        memcpy(ref + (int64_t)g * L, v, (size_t)L * sizeof *v);
        free(v);
      }
      check_run(r, run_all_gather, (const bk_buffer *const *)in, ref, W * L, 0, 1, 0.0, 1.0);
      free(ref);
      /* Broadcast from the last rank. */
      cur_root = W - 1;
      double *root_in = rank_input(dt, W - 1, L, seed + 11);
      check_run(r, run_broadcast, (const bk_buffer *const *)in, root_in, L, 0, 1, 0.0, 1.0);
      free(root_in);
      release_all(in, r->n);
    }
  }
}

/* Empty inputs give empty results without a message on the wire. */
static void check_empty(const rig *r) {
  bk_buffer *in[MAX_GPUS] = {NULL}, *out[MAX_GPUS] = {NULL};
  make_inputs(r, r->ctx, BK_F32, 0, 1, in);
  if (TL_OK(bk_comm_all_reduce(r->comm, BK_REDUCE_SUM, (const bk_buffer *const *)in, out)) == BK_OK)
    for (int i = 0; i < r->n; i++) TL_CHECK(bk_buffer_length(out[i]) == 0, "empty all-reduce");
  release_all(out, r->n);
  if (TL_OK(bk_comm_all_gather(r->comm, (const bk_buffer *const *)in, out)) == BK_OK)
    for (int i = 0; i < r->n; i++) TL_CHECK(bk_buffer_length(out[i]) == 0, "empty all-gather");
  release_all(out, r->n);
  release_all(in, r->n);
}

/* Rejections of one communicator: every out[i] comes back NULL. */
static void check_errors(const rig *r) {
  bk_buffer *in[MAX_GPUS] = {NULL}, *out[MAX_GPUS];
  const bk_buffer *const *cin = (const bk_buffer *const *)in;
  const int n = r->n;
  make_inputs(r, r->ctx, BK_F32, 8, 3, in);
  for (int i = 0; i < n; i++) out[i] = (bk_buffer *)in[0]; /* must be overwritten */
  TL_REJECT(bk_comm_all_reduce(r->comm, (bk_reduce_op)7, cin, out), BK_ERR_INVALID_ARGUMENT, "op");
  TL_CHECK(out[0] == NULL, "out[0] is cleared on failure");
  TL_REJECT(bk_comm_reduce_scatter(r->comm, (bk_reduce_op)-1, cin, out), BK_ERR_INVALID_ARGUMENT,
            "op");
  TL_REJECT(bk_comm_broadcast(r->comm, r->world, cin, out), BK_ERR_INVALID_ARGUMENT, "root");
  TL_REJECT(bk_comm_broadcast(r->comm, -1, cin, out), BK_ERR_INVALID_ARGUMENT, "root");
  TL_REJECT(bk_comm_all_reduce(r->comm, BK_REDUCE_SUM, NULL, out), BK_ERR_NULL, "in");
  TL_REJECT(bk_comm_all_reduce(r->comm, BK_REDUCE_SUM, cin, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_comm_all_gather(NULL, cin, out), BK_ERR_NULL, "comm");
  /* A missing entry, a CPU buffer, another dtype or length on one rank. */
  bk_buffer *saved = in[n - 1];
  in[n - 1] = NULL;
  TL_REJECT(bk_comm_all_gather(r->comm, cin, out), BK_ERR_NULL, "is NULL");
  double v[8] = {0};
  in[n - 1] = tl_buf_on(tl_cpu, BK_F32, v, 8);
  TL_REJECT(bk_comm_all_reduce(r->comm, BK_REDUCE_SUM, cin, out), BK_ERR_DEVICE_MISMATCH,
            "local rank");
  bk_buffer_release(in[n - 1]);
  if (n >= 2) {
    in[n - 1] = tl_buf_on(r->ctx[n - 1], BK_F64, v, 8);
    TL_REJECT(bk_comm_all_reduce(r->comm, BK_REDUCE_SUM, cin, out), BK_ERR_DTYPE, "dtype");
    bk_buffer_release(in[n - 1]);
    in[n - 1] = tl_buf_on(r->ctx[n - 1], BK_F32, v, 7);
    TL_REJECT(bk_comm_broadcast(r->comm, 0, cin, out), BK_ERR_INVALID_ARGUMENT, "length");
    bk_buffer_release(in[n - 1]);
  }
  in[n - 1] = saved;
  if (r->world > 1 && 8 % r->world != 0)
    TL_REJECT(bk_comm_reduce_scatter(r->comm, BK_REDUCE_SUM, cin, out), BK_ERR_INVALID_ARGUMENT,
              "multiple");
  for (int i = 0; i < n; i++) TL_CHECK(out[i] == NULL, "out[%d] is cleared on failure", i);
  /* Membership: the contexts' GPUs are in, the CPU is not. */
  int local = 7;
  TL_OK(bk_comm_local_rank(r->comm, r->ctx[n - 1], &local));
  TL_CHECK(local == n - 1, "local rank %d, expected %d", local, n - 1);
  TL_REJECT(bk_comm_local_rank(r->comm, tl_cpu, &local), BK_ERR_INVALID_ARGUMENT, "not in");
  TL_CHECK(local == -1, "local rank of a foreign context is -1");
  release_all(in, n);
}

/* Counts and accessors of a live communicator. */
static void check_shape(const rig *r) {
  TL_CHECK(bk_comm_world_size(r->comm) == r->world, "world size %d", bk_comm_world_size(r->comm));
  TL_CHECK(bk_comm_local_count(r->comm) == r->n, "local count %d", bk_comm_local_count(r->comm));
  TL_CHECK(bk_comm_rank(r->comm) == r->rank0, "rank %d", bk_comm_rank(r->comm));
}

/* Everything one communicator must do; `second` holds a second context on
 * every local rank's GPU, to feed inputs made on another stream. */
static void check_comm(const rig *r, bk_context *const *second) {
  check_shape(r);
  check_collectives(r, r->ctx);
  check_collectives(r, second);
  check_empty(r);
  check_errors(r);
}

/* ---- modes ------------------------------------------------------------------------ */

/* Argument checks of every build: CPU contexts, NULLs, the environment. */
static void cpu_checks(void) {
  bk_comm *comm = NULL;
  bk_context *cpu[1] = {tl_cpu}, *none[1] = {NULL};
  TL_REJECT(bk_comm_create(cpu, 1, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_comm_create(NULL, 1, &comm), BK_ERR_NULL, "ctxs");
  TL_REJECT(bk_comm_create(cpu, 0, &comm), BK_ERR_INVALID_ARGUMENT, "n = 0");
  TL_REJECT(bk_comm_create(none, 1, &comm), BK_ERR_NULL, "ctxs[0]");
  TL_REJECT(bk_comm_create(cpu, 1, &comm), BK_ERR_UNSUPPORTED, "CPU context");
  TL_CHECK(comm == NULL, "no communicator on failure");
  TL_REJECT(bk_comm_create_rank(tl_cpu, 0, 1, "/tmp/x", NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_comm_create_rank(NULL, 0, 1, "/tmp/x", &comm), BK_ERR_NULL, "ctx");
  TL_REJECT(bk_comm_create_rank(tl_cpu, 0, 1, NULL, &comm), BK_ERR_NULL, "id_file");
  TL_REJECT(bk_comm_create_rank(tl_cpu, 0, 0, "/tmp/x", &comm), BK_ERR_INVALID_ARGUMENT,
            "world_size");
  TL_REJECT(bk_comm_create_rank(tl_cpu, 2, 2, "/tmp/x", &comm), BK_ERR_INVALID_ARGUMENT, "rank");
  TL_REJECT(bk_comm_create_rank(tl_cpu, -1, 2, "/tmp/x", &comm), BK_ERR_INVALID_ARGUMENT, "rank");
  TL_REJECT(bk_comm_create_rank(tl_cpu, 0, 1, "", &comm), BK_ERR_INVALID_ARGUMENT, "empty");
  TL_REJECT(bk_comm_create_rank(tl_cpu, 0, 1, "/tmp/x", &comm), BK_ERR_UNSUPPORTED, "CPU context");
  /* The environment, as a launcher sets it. */
  unsetenv(BK_ENV_RANK);
  unsetenv(BK_ENV_WORLD_SIZE);
  unsetenv(BK_ENV_COMM_ID_FILE);
  TL_REJECT(bk_comm_create_from_env(tl_cpu, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_comm_create_from_env(NULL, &comm), BK_ERR_NULL, "ctx");
  TL_REJECT(bk_comm_create_from_env(tl_cpu, &comm), BK_ERR_INVALID_ARGUMENT, BK_ENV_WORLD_SIZE);
  setenv(BK_ENV_WORLD_SIZE, "two", 1);
  TL_REJECT(bk_comm_create_from_env(tl_cpu, &comm), BK_ERR_INVALID_ARGUMENT, BK_ENV_WORLD_SIZE);
  setenv(BK_ENV_WORLD_SIZE, "2", 1);
  TL_REJECT(bk_comm_create_from_env(tl_cpu, &comm), BK_ERR_INVALID_ARGUMENT, BK_ENV_RANK);
  setenv(BK_ENV_RANK, "2", 1);
  TL_REJECT(bk_comm_create_from_env(tl_cpu, &comm), BK_ERR_INVALID_ARGUMENT, BK_ENV_RANK);
  setenv(BK_ENV_RANK, "1", 1);
  TL_REJECT(bk_comm_create_from_env(tl_cpu, &comm), BK_ERR_INVALID_ARGUMENT, BK_ENV_COMM_ID_FILE);
  setenv(BK_ENV_COMM_ID_FILE, "/tmp/bk-comm-never-made", 1);
  TL_REJECT(bk_comm_create_from_env(tl_cpu, &comm), BK_ERR_UNSUPPORTED, "CPU context");
  unsetenv(BK_ENV_RANK);
  unsetenv(BK_ENV_WORLD_SIZE);
  unsetenv(BK_ENV_COMM_ID_FILE);
  /* No communicator: NULLs everywhere are statuses or no-ops. */
  bk_buffer *out[1] = {NULL};
  const bk_buffer *in[1] = {NULL};
  TL_REJECT(bk_comm_all_reduce(NULL, BK_REDUCE_SUM, in, out), BK_ERR_NULL, "comm");
  TL_REJECT(bk_comm_all_gather(NULL, in, out), BK_ERR_NULL, "comm");
  TL_REJECT(bk_comm_reduce_scatter(NULL, BK_REDUCE_MAX, in, out), BK_ERR_NULL, "comm");
  TL_REJECT(bk_comm_broadcast(NULL, 0, in, out), BK_ERR_NULL, "comm");
  TL_REJECT(bk_comm_broadcast(NULL, 0, in, NULL), BK_ERR_NULL, "out");
  int local = 3;
  TL_REJECT(bk_comm_local_rank(NULL, tl_cpu, &local), BK_ERR_NULL, "comm");
  TL_CHECK(local == -1, "local rank -1 on failure");
  TL_REJECT(bk_comm_local_rank(NULL, tl_cpu, NULL), BK_ERR_NULL, "local");
  bk_comm_destroy(NULL);
  bk_comm_destroy(&comm);
  TL_CHECK(bk_comm_world_size(NULL) == 0 && bk_comm_local_count(NULL) == 0 &&
               bk_comm_rank(NULL) == -1,
           "accessors of NULL");
  TL_CHECK(strstr(bk_build_info(), "nccl: ") != NULL, "build info names NCCL");
}

/* CUDA contexts on the first n GPUs (or on GPU `first` alone when n is 1
 * and first >= 0); 0 when they cannot be made. */
static int gpu_contexts(int n, int first, bk_context **ctx) {
  for (int i = 0; i < n; i++) {
    const int32_t dev = first >= 0 ? first : i;
    if (bk_context_create((bk_device){BK_DEVICE_CUDA, dev}, &ctx[i]) != BK_OK) {
      fprintf(stderr, "cuda:%d unavailable: %s\n", dev, bk_last_error());
      for (int j = 0; j < i; j++) bk_context_destroy(ctx[j]);
      return 0;
    }
  }
  return 1;
}

/* How many GPUs the GPU modes use; 0 means skip (reason printed). */
static int gpus_for_test(void) {
  const int n = bk_cuda_device_count();
  if (n == 0) {
    printf("no CUDA device: skipped\n");
    return 0;
  }
  return n < MAX_GPUS ? n : MAX_GPUS;
}

/* Copies between GPUs (when there are two): exact, and ordered so that
 * the source may be released at once. */
static void check_peer_copy(bk_context *const *ctx, int n) {
  if (n < 2) return;
  double v[4099];
  for (int j = 0; j < 4099; j++) v[j] = input_value(5, j, 9);
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_buffer *src = tl_buf_on(ctx[0], tl_dtypes[d], v, 4099), *dst = NULL;
    double *want = tl_read(src);
    if (TL_OK(bk_buffer_copy(ctx[n - 1], src, &dst)) == BK_OK) {
      bk_buffer_release(src);
      src = NULL;
      TL_CHECK(bk_buffer_device(dst).index == bk_context_device(ctx[n - 1]).index,
               "the copy is on the destination GPU");
      TL_BUF_EXACT(dst, want, 4099);
    }
    free(want);
    bk_buffer_release(src);
    bk_buffer_release(dst);
  }
}

static int gpu_mode(void) {
  const int n = gpus_for_test();
  if (n == 0) return SKIP;
  rig r = {.n = n, .world = n, .rank0 = 0};
  bk_context *second[MAX_GPUS];
  if (!gpu_contexts(n, -1, r.ctx)) return SKIP;
  if (!gpu_contexts(n, -1, second)) return 2;
#ifndef BK_HAVE_NCCL
  TL_REJECT(bk_comm_create(r.ctx, n, &r.comm), BK_ERR_UNSUPPORTED, "NCCL");
  printf("this build has no NCCL: only its refusal was checked\n");
#else
  bk_context *twice[2] = {r.ctx[0], second[0]};
  bk_comm *bad = NULL;
  TL_REJECT(bk_comm_create(twice, 2, &bad), BK_ERR_INVALID_ARGUMENT, "one rank per GPU");
  bk_context *with_cpu[2] = {r.ctx[0], tl_cpu};
  TL_REJECT(bk_comm_create(with_cpu, 2, &bad), BK_ERR_UNSUPPORTED, "ctxs[1]");
  if (TL_OK(bk_comm_create(r.ctx, n, &r.comm)) == BK_OK) {
    check_comm(&r, second);
    bk_comm *gone = r.comm;
    bk_comm_destroy(&r.comm);
    TL_CHECK(r.comm == NULL && gone != NULL, "destroy clears the handle");
    bk_buffer *out[1];
    const bk_buffer *in[1] = {NULL};
    TL_REJECT(bk_comm_all_reduce(r.comm, BK_REDUCE_SUM, in, out), BK_ERR_NULL, "comm");
  }
  check_peer_copy(r.ctx, n);
  printf("in one process over %d GPU%s: checksum %016" PRIx64 "\n", n, n == 1 ? "" : "s",
         checksum);
#endif
  for (int i = 0; i < n; i++) {
    bk_context_destroy(r.ctx[i]);
    bk_context_destroy(second[i]);
  }
  return -1;
}

#ifdef BK_HAVE_NCCL
/* One rank, started by multiprocess_mode with the launcher's variables. */
static int rank_mode(void) {
  const char *rs = getenv(BK_ENV_RANK);
  const int rank = rs ? atoi(rs) : 0;
  rig r = {.n = 1};
  bk_context *second[1];
  const int dev = rank % (bk_cuda_device_count() > 0 ? bk_cuda_device_count() : 1);
  if (!gpu_contexts(1, dev, r.ctx) || !gpu_contexts(1, dev, second)) return 2;
  if (TL_OK(bk_comm_create_from_env(r.ctx[0], &r.comm)) == BK_OK) {
    r.world = bk_comm_world_size(r.comm);
    r.rank0 = rank;
    check_comm(&r, second);
    bk_comm_destroy(&r.comm);
  }
  printf("rank %d: checksum %016" PRIx64 "\n", rank, checksum);
  bk_context_destroy(r.ctx[0]);
  bk_context_destroy(second[0]);
  return -1;
}

/* Starts this program once per GPU as ranks of one communicator (rank r
 * on GPU r) and waits for all of them; each rank counts its own checks,
 * this process counts one check per rank (its exit status). */
static int multiprocess_mode(const char *self) {
  const int n = gpus_for_test();
  if (n == 0) return SKIP;
  char dir[] = "/tmp/bk-comm-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  char path[64], text[16];
  snprintf(path, sizeof path, "%s/id", dir);
  pid_t pid[MAX_GPUS];
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      snprintf(text, sizeof text, "%d", r);
      setenv(BK_ENV_RANK, text, 1);
      snprintf(text, sizeof text, "%d", n);
      setenv(BK_ENV_WORLD_SIZE, text, 1);
      setenv(BK_ENV_COMM_ID_FILE, path, 1);
      execl(self, self, "--rank", (char *)NULL);
      _exit(127);
    }
  }
  for (int r = 0; r < n; r++) {
    int status = 0;
    const int ok = pid[r] > 0 && waitpid(pid[r], &status, 0) == pid[r] && WIFEXITED(status) &&
                   WEXITSTATUS(status) == 0;
    TL_CHECK(ok, "rank %d failed (status %d)", r, status);
  }
  /* The id file is left for the caller to remove; a second rank 0 on it
   * is refused rather than handing out a stale id. */
  bk_context *ctx[1];
  if (gpu_contexts(1, 0, ctx)) {
    bk_comm *comm = NULL;
    TL_REJECT(bk_comm_create_rank(ctx[0], 0, 2, path, &comm), BK_ERR_INVALID_ARGUMENT,
              "already exists");
    FILE *f = fopen(path, "w");
    if (f) {
      fputs("not an id\n", f);
      fclose(f);
    }
    TL_REJECT(bk_comm_create_rank(ctx[0], 1, 2, path, &comm), BK_ERR_INVALID_ARGUMENT,
              "does not hold an id");
    bk_context_destroy(ctx[0]);
  }
  unlink(path);
  rmdir(dir);
  printf("one process per GPU, %d rank%s\n", n, n == 1 ? "" : "s");
  return -1;
}
#endif

int main(int argc, char **argv) {
  tl_init();
  const char *mode = argc > 1 ? argv[1] : "";
  int rc = -1;
  if (strcmp(mode, "") == 0) {
    TL_RUN(cpu_checks);
  } else if (strcmp(mode, "--gpu") == 0) {
    tl_case = "gpu_mode";
    rc = gpu_mode();
  } else if (strcmp(mode, "--multiprocess") == 0 || strcmp(mode, "--rank") == 0) {
#ifdef BK_HAVE_NCCL
    tl_case = mode + 2;
    rc = mode[2] == 'm' ? multiprocess_mode("/proc/self/exe") : rank_mode();
#else
    printf("this build has no NCCL: skipped\n");
    rc = SKIP;
#endif
  } else {
    fprintf(stderr, "usage: test_comm [--gpu | --multiprocess]\n");
    return 2;
  }
  if (rc >= 0) {
    bk_context_destroy(tl_ctx);
    bk_context_destroy(tl_cpu);
    return rc;
  }
  return tl_finish();
}
