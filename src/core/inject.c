/*
 * inject.c — host allocation wrappers, the allocation-failure injection hook
 * used by the reliability tests, and the live-buffer counter.
 */
#include "internal.h"

#include <stdlib.h>

static atomic_llong bk_inject_fail_at; /* 0: disarmed */
static atomic_llong bk_inject_attempts;
atomic_llong bk__live_buffer_count = 0;

void bk__inject_arm(int64_t fail_at) {
  atomic_store(&bk_inject_attempts, 0);
  atomic_store(&bk_inject_fail_at, fail_at);
}

int64_t bk__inject_count(void) { return (int64_t)atomic_load(&bk_inject_attempts); }

int64_t bk__live_buffers(void) { return (int64_t)atomic_load(&bk__live_buffer_count); }

bool bk__inject_should_fail(void) {
  long long at = atomic_load(&bk_inject_fail_at);
  if (at <= 0) return false;
  long long n = atomic_fetch_add(&bk_inject_attempts, 1) + 1;
  return n == at;
}

void *bk__host_malloc(size_t bytes) {
  if (bk__inject_should_fail()) return NULL;
  return malloc(bytes ? bytes : 1);
}

void *bk__host_calloc(size_t n, size_t size) {
  if (bk__inject_should_fail()) return NULL;
  return calloc(n ? n : 1, size ? size : 1);
}

void bk__host_free(void *p) { free(p); }
