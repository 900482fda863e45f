/*
 * internal.h — definitions shared by the core, the front door and the
 * backends: the buffer and context structs, the last-error helper, checked
 * geometry arithmetic and the front-door call helpers.
 */
#ifndef BK_INTERNAL_H
#define BK_INTERNAL_H

#include "bufkern.h"
#include "backend.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define BK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define BK_PRINTF(a, b)
#endif

/* ---- structs ------------------------------------------------------------ */

struct bk_context {
  atomic_long refs;          /* the caller's hold plus one per live buffer */
  bk_device device;
  const bk_backend *backend;
  void *impl;                /* backend state (stream, handles, caches) */
  bool is_default;           /* a thread's default context: not the caller's */
};

struct bk_buffer {
  atomic_long refs;
  bk_dtype dtype;
  int64_t length;
  bk_device device;
  void *data;                /* NULL when length == 0 */
  bk_context *owner;         /* context whose backend frees data; retained */
  /* Memory owned by someone else (a DLPack producer): released by calling
   * foreign_free(foreign_arg) instead of the backend's mem_free. */
  void (*foreign_free)(void *arg);
  void *foreign_arg;
};


/* ---- sizes and dtypes ---------------------------------------------------- */

const char *bk__dtype_name(bk_dtype dt); /* "f32", "f64", ... */

/* *out = a * b; BK_ERR_INVALID_ARGUMENT naming `what` on overflow. a, b >= 0. */
bk_status bk__mul(const char *fn, const char *what, int64_t a, int64_t b, int64_t *out);
/* *out = a + b; BK_ERR_INVALID_ARGUMENT naming `what` on overflow. a, b >= 0. */
bk_status bk__add(const char *fn, const char *what, int64_t a, int64_t b, int64_t *out);
/* Product of dims[0..rank) with every dim >= 0 checked; `what` names the
 * array ("dims"). rank 0 gives 1. */
bk_status bk__product(const char *fn, const char *what, const int64_t *dims, int rank,
                      int64_t *out);
/* BK_ERR_INVALID_ARGUMENT when v < 0. */
bk_status bk__check_size(const char *fn, const char *name, int64_t v);
/* BK_ERR_INVALID_ARGUMENT when v is not 0 or 1. */
bk_status bk__check_flag(const char *fn, const char *name, int v);
/* BK_ERR_NULL when p is NULL. */
bk_status bk__check_ptr(const char *fn, const char *name, const void *p);
/* BK_ERR_INVALID_ARGUMENT when len(b) != expected (b must be non-NULL). */
bk_status bk__check_len(const char *fn, const char *name, const bk_buffer *b,
                        int64_t expected);
/* Checks a rank against [lo, BK_MAX_RANK] and the dims array (non-NULL when
 * rank > 0, every dim >= 0) and returns the product in *elems. */
bk_status bk__check_dims(const char *fn, const char *name, const int64_t *dims, int rank,
                         int lo, int64_t *elems);
/* Checks host indices: non-NULL when k > 0 and each <= UINT32_MAX. */
bk_status bk__check_indices(const char *fn, const uint64_t *indices, int64_t k);
/* BK_ERR_INVALID_ARGUMENT naming `name` unless lo <= v < hi. Axes and depths
 * are int and ranks bounded, so callers form the bounds in int64 (rank - 1,
 * not depth + 1) and no comparison can overflow. */
bk_status bk__check_range(const char *fn, const char *name, int64_t v, int64_t lo, int64_t hi);

/* ---- contexts ------------------------------------------------------------ */

/* The calling thread's default context for a device (created on first use;
 * owned by the thread, not the caller). fn names the public function that
 * needs it, for the messages. */
bk_status bk__default_context(const char *fn, bk_device device, bk_context **out);
void bk__context_retain(bk_context *ctx);
void bk__context_release(bk_context *ctx);
bool bk__device_equal(bk_device a, bk_device b);

/* ---- the front-door call --------------------------------------------------- */

/* One validated call: the resolved context, its backend, the dtype and the
 * device of the inputs. */
typedef struct bk_call {
  const char *fn;
  bk_context *ctx;
  const bk_backend *be;
  bk_dtype dtype;
} bk_call;

/*
 * Binds a call to its inputs: bufs[0..n) with names[0..n) (NULL entries are
 * skipped: optional inputs). Checks that every dtype is F32/F64 and equal to
 * the first, that every device is the first's, resolves a NULL ctx to the
 * thread default for that device and checks ctx's device. Call it after
 * NULL and geometry checks.
 */
bk_status bk__bind(bk_call *c, const char *fn, bk_context *ctx, int n,
                   const bk_buffer *const *bufs, const char *const *names);

/* A new uninitialized buffer of `length` elements of c->dtype on c->ctx. */
bk_status bk__new_output(bk_call *c, int64_t length, bk_buffer **out);
/* A new buffer of `length` zeros of c->dtype on c->ctx. */
bk_status bk__new_zeros(bk_call *c, int64_t length, bk_buffer **out);

/* Buffer constructor used by the core: takes ownership of data (NULL iff
 * length == 0) allocated through ctx's backend. fn names the public
 * function in the message when the handle cannot be allocated. */
bk_status bk__buffer_wrap(const char *fn, bk_context *ctx, bk_dtype dtype, int64_t length,
                          void *data, bk_buffer **out);

/* A buffer over memory owned by someone else: release_fn(release_arg) runs
 * once, with the last reference. data may be NULL only when length is 0. */
bk_status bk__buffer_foreign(const char *fn, bk_dtype dtype, int64_t length, bk_device device,
                             void *data, void (*release_fn)(void *), void *release_arg,
                             bk_buffer **out);

/* Buffers alive in the process (the reliability tests read it). */
extern atomic_llong bk__live_buffer_count;

/* The out-parameter rule of the header, in the one place every primitive
 * passes through before it checks anything else: clears every non-NULL
 * out-parameter of outs[0..n) (never reading what the slots held), then
 * reports the first NULL one by its name (BK_ERR_NULL), then two
 * out-parameters that are the same slot (BK_ERR_INVALID_ARGUMENT naming
 * both), so that a failure leaves every slot NULL and nothing is allocated
 * for a call whose results could not all be returned. */
bk_status bk__clear_outs(const char *fn, int n, bk_buffer **const *outs,
                         const char *const *names);
/* bk__clear_outs for a primitive with the single out-parameter `out`. */
bk_status bk__clear_out(const char *fn, bk_buffer **out);

/* Releases *p (if any) and sets it to NULL; for the failure paths of
 * multi-output primitives. */
void bk__drop(bk_buffer **p);

/* ---- allocation-failure injection (test hook) ------------------------------ */

/* Counts every allocation attempt (host and device) and fails the k-th when
 * armed. Used by the reliability tests; inert unless bk__inject_arm() ran. */
BK_API void bk__inject_arm(int64_t fail_at);     /* 1-based; 0 disarms */
BK_API int64_t bk__inject_count(void);           /* attempts since arming */
BK_API int64_t bk__live_buffers(void);           /* buffers alive process-wide */
/* Distinct allocation sites compiled into the library (BK_ALLOC_SITE). */
BK_API int64_t bk__inject_site_count(void);
/* The i-th distinct site, 0 <= i < bk__inject_site_count(): its source file
 * (as the compiler saw it), line, and whether the hook has failed an
 * allocation there since the process started. false past the last site. */
BK_API bool bk__inject_site(int64_t i, const char **file, int *line, bool *failed);

/* Test hooks of the CUDA backend. */
#include "hooks.h"

#endif /* BK_INTERNAL_H */
