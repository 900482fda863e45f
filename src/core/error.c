/*
 * error.c — status strings, the thread-local last-error text and version.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define BK_ERROR_CAP 512

static _Thread_local char bk_last_error_text[BK_ERROR_CAP];

#define BK_STR2_(x) #x
#define BK_STR_(x) BK_STR2_(x)
#define BK_VERSION_TEXT_ \
  BK_STR_(BK_VERSION_MAJOR) "." BK_STR_(BK_VERSION_MINOR) "." BK_STR_(BK_VERSION_PATCH)

#ifndef BK_BUILD_BACKENDS
#define BK_BUILD_BACKENDS "cpu"
#endif
#ifndef BK_BUILD_BLAS
#define BK_BUILD_BLAS "none"
#endif
#ifndef BK_BUILD_OPENMP
#define BK_BUILD_OPENMP "no"
#endif
#ifndef BK_BUILD_NCCL
#define BK_BUILD_NCCL "no"
#endif
#ifndef BK_BUILD_TYPE
#define BK_BUILD_TYPE "unknown"
#endif

const char *bk_version(void) { return BK_VERSION_TEXT_; }

const char *bk_status_string(bk_status status) {
  switch (status) {
#define BK_STATUS_CASE_(name, value, text) \
  case name:                               \
    return text;
    BK_STATUS_LIST(BK_STATUS_CASE_)
#undef BK_STATUS_CASE_
  }
  return "unknown status";
}

const char *bk_last_error(void) { return bk_last_error_text; }

bk_status bk__fail(bk_status status, const char *fn, const char *fmt, ...) {
  int used = snprintf(bk_last_error_text, BK_ERROR_CAP, "%s: ", fn ? fn : "bufkern");
  if (used < 0) used = 0;
  if (used < BK_ERROR_CAP) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bk_last_error_text + used, (size_t)(BK_ERROR_CAP - used), fmt, ap);
    va_end(ap);
  }
  return status;
}

const char *bk_build_info(void) {
  return "version: " BK_VERSION_TEXT_ "\n"
         "backends: " BK_BUILD_BACKENDS "\n"
         "blas: " BK_BUILD_BLAS "\n"
         "openmp: " BK_BUILD_OPENMP "\n"
         "nccl: " BK_BUILD_NCCL "\n"
         "build: " BK_BUILD_TYPE "\n";
}
