/*
 * test_reliability.c — the guarantees that hold across all primitives:
 *  - allocation-failure walk: for every primitive, the k-th allocation
 *    (host or device) fails for k = 1, 2, ... until the call succeeds; each
 *    failing call returns BK_ERR_OUT_OF_MEMORY, leaves every out-parameter
 *    NULL and leaks no buffer (the live-buffer counter returns to its start);
 *  - thread stress: 8 threads, each with its own context, run every
 *    primitive on shared read-only inputs; every result is bitwise equal to
 *    the single-threaded one;
 *  - determinism of every primitive (two runs, bitwise equal).
 */
#include "cases.h"
#include "core/internal.h"

#include <pthread.h>

#define STRESS_THREADS 8

/* 20 rounds; 2 under BK_TEST_SMALL (the GPU sanitizer runs, where every
 * launch is instrumented). */
static int stress_rounds(void) { return getenv("BK_TEST_SMALL") ? 2 : 20; }

static void alloc_failure_walk(void) {
  int64_t points = 0;
  for (int d = 0; d < TL_DTYPES; d++) {
    for (int p = 0; p < PRIM_CASES; p++) {
      const prim_case *pc = &prim_cases[p];
      case_inputs ci;
      case_prepare(tl_ctx, tl_dtypes[d], pc, &ci, 7 + (uint64_t)p);
      int64_t live0 = bk__live_buffers();
      int done = 0;
      for (int64_t k = 1; k < 1000 && !done; k++) {
        bk_buffer *o[CASE_MAX_OUT] = {NULL, NULL, NULL, NULL};
        bk__inject_arm(k);
        bk_status st = pc->run(tl_ctx, &ci, o);
        int64_t attempts = bk__inject_count();
        bk__inject_arm(0);
        if (st == BK_OK) {
          TL_CHECK(attempts < k, "%s: succeeded although allocation %" PRId64 " was to fail",
                   pc->name, k);
          case_release_outs(o);
          done = 1;
          break;
        }
        points++;
        if (st != BK_ERR_OUT_OF_MEMORY) {
          TL_FAIL("%s (%s): allocation %" PRId64 " failed but the call returned %s: %s", pc->name,
                  tl_dtname(tl_dtypes[d]), k, bk_status_string(st), bk_last_error());
          break;
        }
        int cleared = 1;
        for (int j = 0; j < CASE_MAX_OUT; j++) cleared &= o[j] == NULL;
        TL_CHECK(cleared, "%s: out-parameters not NULL after failure at %" PRId64, pc->name, k);
        TL_CHECK(bk__live_buffers() == live0, "%s: %" PRId64 " buffers leaked at allocation %" PRId64,
                 pc->name, bk__live_buffers() - live0, k);
      }
      TL_CHECK(done, "%s: never succeeded", pc->name);
      case_release(&ci);
    }
  }
  printf("allocation-failure walk: %" PRId64 " injected failures over %d primitives x 2 dtypes\n",
         points, PRIM_CASES);
}

/* ---- determinism and thread stress -------------------------------------------- */

typedef struct stress_ref {
  case_inputs ci[PRIM_CASES];
  bk_buffer *out[PRIM_CASES][CASE_MAX_OUT];
} stress_ref;

static stress_ref g_ref;
static bk_dtype g_dt;

static int outputs_equal(bk_buffer **a, bk_buffer **b) {
  for (int j = 0; j < CASE_MAX_OUT; j++) {
    if (!a[j] && !b[j]) continue;
    if (!a[j] || !b[j] || !tl_same_bits(a[j], b[j])) return 0;
  }
  return 1;
}

static void *stress_thread(void *arg) {
  intptr_t id = (intptr_t)arg;
  bk_context *ctx = NULL;
  if (bk_context_create(tl_dev, &ctx) != BK_OK) return (void *)1;
  intptr_t bad = 0;
  for (int round = 0; round < stress_rounds(); round++) {
    for (int q = 0; q < PRIM_CASES; q++) {
      int p = (int)((q + id * 7 + round) % PRIM_CASES);
      bk_buffer *o[CASE_MAX_OUT] = {NULL, NULL, NULL, NULL};
      if (prim_cases[p].run(ctx, &g_ref.ci[p], o) != BK_OK || !outputs_equal(o, g_ref.out[p]))
        bad++;
      case_release_outs(o);
    }
  }
  if (bk_context_synchronize(ctx) != BK_OK) bad++;
  bk_context_destroy(ctx);
  return (void *)bad;
}

static void determinism_and_threads(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    g_dt = tl_dtypes[d];
    int64_t live0 = bk__live_buffers();
    for (int p = 0; p < PRIM_CASES; p++) {
      case_prepare(tl_ctx, g_dt, &prim_cases[p], &g_ref.ci[p], 100 + (uint64_t)p);
      for (int j = 0; j < CASE_MAX_OUT; j++) g_ref.out[p][j] = NULL;
      if (TL_OK(prim_cases[p].run(tl_ctx, &g_ref.ci[p], g_ref.out[p])) != BK_OK) continue;
      bk_buffer *again[CASE_MAX_OUT] = {NULL, NULL, NULL, NULL};
      if (TL_OK(prim_cases[p].run(tl_ctx, &g_ref.ci[p], again)) == BK_OK)
        TL_CHECK(outputs_equal(again, g_ref.out[p]), "%s (%s) is not deterministic",
                 prim_cases[p].name, tl_dtname(g_dt));
      case_release_outs(again);
    }
    TL_OK(bk_context_synchronize(tl_ctx));
    pthread_t th[STRESS_THREADS];
    for (intptr_t t = 0; t < STRESS_THREADS; t++)
      TL_CHECK(pthread_create(&th[t], NULL, stress_thread, (void *)t) == 0, "thread create");
    intptr_t bad = 0;
    for (int t = 0; t < STRESS_THREADS; t++) {
      void *r = NULL;
      pthread_join(th[t], &r);
      bad += (intptr_t)r;
    }
    TL_CHECK(bad == 0, "%" PRIdPTR " thread-stress results differed from the single-threaded run (%s)",
             bad, tl_dtname(g_dt));
    for (int p = 0; p < PRIM_CASES; p++) {
      case_release_outs(g_ref.out[p]);
      case_release(&g_ref.ci[p]);
    }
    TL_CHECK(bk__live_buffers() == live0, "buffers leaked: %" PRId64, bk__live_buffers() - live0);
  }
  printf("thread stress: %d threads x %d rounds x %d primitives x 2 dtypes\n", STRESS_THREADS,
         stress_rounds(), PRIM_CASES);
}

int main(void) {
  if (!tl_init()) return 0;
  TL_RUN(alloc_failure_walk);
  TL_RUN(determinism_and_threads);
  return tl_finish();
}
