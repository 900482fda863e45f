/*
 * inject.c — host allocation wrappers, the allocation-failure injection hook
 * used by the reliability tests, the registry of allocation sites and the
 * live-buffer counter.
 */
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static atomic_llong bk_inject_fail_at; /* 0: disarmed */
static atomic_llong bk_inject_attempts;
atomic_llong bk__live_buffer_count = 0;

/* The linker defines these around the records BK_ALLOC_SITE() places in the
 * bk_alloc_sites section. */
extern bk_alloc_site __start_bk_alloc_sites[];
extern bk_alloc_site __stop_bk_alloc_sites[];

void bk__inject_arm(int64_t fail_at) {
  atomic_store(&bk_inject_attempts, 0);
  atomic_store(&bk_inject_fail_at, fail_at);
}

int64_t bk__inject_count(void) { return (int64_t)atomic_load(&bk_inject_attempts); }

int64_t bk__live_buffers(void) { return (int64_t)atomic_load(&bk__live_buffer_count); }

bool bk__inject_should_fail_at(bk_alloc_site *site) {
  long long at = atomic_load(&bk_inject_fail_at);
  if (at <= 0) return false;
  long long n = atomic_fetch_add(&bk_inject_attempts, 1) + 1;
  if (n != at) return false;
  __atomic_store_n(&site->failed, 1, __ATOMIC_RELAXED);
  return true;
}

void *bk__host_alloc_at(bk_alloc_site *site, const char *fn, const char *what, size_t n,
                        size_t size, bool zero) {
  if (size != 0 && n > SIZE_MAX / size) {
    bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu x %zu bytes of host %s: the size overflows",
             n, size, what);
    return NULL;
  }
  const size_t bytes = n * size;
  void *p = NULL;
  if (!bk__inject_should_fail_at(site)) p = zero ? calloc(bytes ? bytes : 1, 1) : malloc(bytes ? bytes : 1);
  if (!p) bk__fail(BK_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of host %s", bytes, what);
  return p;
}

void bk__host_free(void *p) { free(p); }

/* Records for one site can repeat (a call site in an inline function or a
 * template instantiated more than once): a site is its file and line. */
static bool same_site(const bk_alloc_site *a, const bk_alloc_site *b) {
  return a->line == b->line && strcmp(a->file, b->file) == 0;
}

static const bk_alloc_site *first_of(const bk_alloc_site *s) {
  for (const bk_alloc_site *r = __start_bk_alloc_sites; r < s; r++)
    if (same_site(r, s)) return r;
  return s;
}

int64_t bk__inject_site_count(void) {
  int64_t n = 0;
  for (const bk_alloc_site *s = __start_bk_alloc_sites; s < __stop_bk_alloc_sites; s++)
    n += first_of(s) == s;
  return n;
}

bool bk__inject_site(int64_t i, const char **file, int *line, bool *failed) {
  for (const bk_alloc_site *s = __start_bk_alloc_sites; s < __stop_bk_alloc_sites; s++) {
    if (first_of(s) != s) continue;
    if (i-- > 0) continue;
    bool any = false;
    for (const bk_alloc_site *r = s; r < __stop_bk_alloc_sites; r++)
      if (same_site(r, s)) any |= __atomic_load_n(&r->failed, __ATOMIC_RELAXED) != 0;
    *file = s->file;
    *line = s->line;
    *failed = any;
    return true;
  }
  return false;
}
