/*
 * test_core.c — buffers, contexts, statuses, the thread-local last error and
 * DLPack interchange.
 */
#include "testlib.h"

#include <dlpack/dlpack.h>
#include <pthread.h>

/* ---- statuses and version ---------------------------------------------------- */

static void status_strings(void) {
  TL_CHECK(strcmp(bk_status_string(BK_OK), "ok") == 0, "BK_OK string");
  TL_CHECK(strcmp(bk_status_string(BK_ERR_OUT_OF_MEMORY), "out of memory") == 0, "oom string");
  TL_CHECK(strcmp(bk_status_string((bk_status)7), "unknown status") == 0, "unknown status");
  TL_CHECK(BK_ERR_INVALID_ARGUMENT == 100 && BK_ERR_DTYPE == 101 && BK_ERR_DEVICE_MISMATCH == 102 &&
               BK_ERR_NULL == 103 && BK_ERR_UNSUPPORTED == 200 && BK_ERR_OUT_OF_MEMORY == 300 &&
               BK_ERR_NO_DEVICE == 301 && BK_ERR_DEVICE == 400,
           "status values");
  TL_CHECK(strcmp(bk_version(), "0.1.0") == 0, "version %s", bk_version());
  TL_CHECK(strstr(bk_build_info(), "backends: cpu") != NULL, "build info");
}

/* ---- buffers ------------------------------------------------------------------- */

static void buffer_roundtrip(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double v[5] = {1.5, -2, 0, 0x1p100, -0.0};
    bk_buffer *b = tl_buf(dt, v, 5);
    TL_CHECK(bk_buffer_length(b) == 5 && bk_buffer_dtype(b) == dt, "accessors");
    TL_CHECK(bk_buffer_device(b).kind == tl_dev.kind, "device");
    TL_BUF_EXACT(b, v, 5);
    bk_buffer *c = NULL, *h = NULL;
    if (TL_OK(bk_buffer_copy(tl_ctx, b, &c)) == BK_OK) TL_BUF_EXACT(c, v, 5);
    if (TL_OK(bk_buffer_copy(tl_cpu, b, &h)) == BK_OK) {
      TL_CHECK(bk_buffer_device(h).kind == BK_DEVICE_CPU, "copy to cpu");
      TL_BUF_EXACT(h, v, 5);
    }
    TL_CHECK(bk_buffer_retain(b) == b, "retain returns buf");
    bk_buffer_release(b);
    TL_BUF_EXACT(b, v, 5);
    bk_buffer_release(b);
    bk_buffer_release(c);
    bk_buffer_release(h);
    bk_buffer *z = NULL;
    if (TL_OK(bk_buffer_zeros(tl_ctx, dt, 4, &z)) == BK_OK)
      TL_BUF_EXACT(z, ((double[]){0, 0, 0, 0}), 4);
    bk_buffer_release(z);
    if (TL_OK(bk_buffer_zeros(tl_ctx, dt, 0, &z)) == BK_OK) {
      TL_CHECK(bk_buffer_data(z) == NULL && bk_buffer_length(z) == 0, "empty holds no memory");
      TL_OK(bk_buffer_to_host(tl_ctx, z, NULL, 0));
    }
    bk_buffer_release(z);
  }
  bk_buffer_release(NULL);
  TL_CHECK(bk_buffer_retain(NULL) == NULL && bk_buffer_length(NULL) == 0, "NULL accessors");
}

static void buffer_errors(void) {
  bk_buffer *b = (bk_buffer *)&b;
  double v[2] = {1, 2};
  TL_REJECT(bk_buffer_zeros(tl_ctx, BK_F32, 3, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_buffer_zeros(tl_ctx, BK_F32, -1, &b), BK_ERR_INVALID_ARGUMENT, "length");
  TL_CHECK(b == NULL, "out cleared");
  TL_REJECT(bk_buffer_zeros(tl_ctx, BK_BF16, 3, &b), BK_ERR_DTYPE, "bf16");
  TL_REJECT(bk_buffer_zeros(tl_ctx, (bk_dtype)9, 3, &b), BK_ERR_DTYPE, "dtype");
  TL_REJECT(bk_buffer_zeros(tl_ctx, BK_F64, INT64_MAX / 4, &b), BK_ERR_INVALID_ARGUMENT, "overflow");
  TL_REJECT(bk_buffer_from_host(tl_ctx, BK_F64, NULL, 2, &b), BK_ERR_NULL, "data");
  bk_buffer *x = tl_buf(BK_F64, v, 2);
  double out[3];
  TL_REJECT(bk_buffer_to_host(tl_ctx, x, out, 3), BK_ERR_INVALID_ARGUMENT, "length");
  TL_REJECT(bk_buffer_to_host(tl_ctx, x, NULL, 2), BK_ERR_NULL, "data");
  TL_REJECT(bk_buffer_to_host(tl_ctx, NULL, out, 2), BK_ERR_NULL, "buf");
  TL_REJECT(bk_buffer_copy(tl_ctx, NULL, &b), BK_ERR_NULL, "src");
  if (tl_other_ctx())
    TL_REJECT(bk_buffer_to_host(tl_other_ctx(), x, out, 2), BK_ERR_DEVICE_MISMATCH, "ctx");
  bk_buffer_release(x);
}

/* ---- contexts ------------------------------------------------------------------ */

static void context_rules(void) {
  bk_context *c = (bk_context *)&c;
  TL_REJECT(bk_context_create((bk_device){BK_DEVICE_CPU, 0}, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_context_create((bk_device){(bk_device_kind)7, 0}, &c), BK_ERR_INVALID_ARGUMENT, "kind");
  TL_CHECK(c == NULL, "out cleared");
  TL_REJECT(bk_context_create((bk_device){BK_DEVICE_CPU, 1}, &c), BK_ERR_INVALID_ARGUMENT, "index");
  TL_REJECT(bk_context_create((bk_device){BK_DEVICE_CUDA, -1}, &c), BK_ERR_INVALID_ARGUMENT, "index");
  bk_status st = bk_context_create((bk_device){BK_DEVICE_CUDA, 4096}, &c);
  TL_CHECK(st == BK_ERR_UNSUPPORTED || st == BK_ERR_NO_DEVICE, "cuda:4096 gives %d", (int)st);
  if (bk_cuda_device_count() == 0) {
    st = bk_context_create((bk_device){BK_DEVICE_CUDA, 0}, &c);
    TL_CHECK(st == BK_ERR_UNSUPPORTED || st == BK_ERR_NO_DEVICE, "cuda:0 without a GPU gives %d", (int)st);
  }
  TL_REJECT(bk_context_set_stream(tl_cpu, NULL), BK_ERR_UNSUPPORTED, "CPU");
  TL_REJECT(bk_context_set_stream(NULL, NULL), BK_ERR_NULL, "ctx");
  /* A CPU context has no streams: returning to its own is a no-op. */
  TL_OK(bk_context_reset_stream(tl_cpu));
  TL_REJECT(bk_context_reset_stream(NULL), BK_ERR_NULL, "ctx");
  TL_OK(bk_context_synchronize(tl_ctx));
  TL_OK(bk_context_synchronize(NULL));
  TL_CHECK(bk_context_device(NULL).kind == BK_DEVICE_CPU, "NULL context is the CPU");
  TL_CHECK(bk_context_device(tl_ctx).kind == tl_dev.kind, "context device");
  bk_context_destroy(NULL);
  /* A buffer outlives the context that made it. */
  bk_context *mine = NULL;
  if (TL_OK(bk_context_create(tl_dev, &mine)) == BK_OK) {
    const double v[3] = {1, 2, 3};
    bk_buffer *b = tl_buf_on(mine, BK_F32, v, 3);
    bk_context_destroy(mine);
    TL_BUF_EXACT(b, v, 3);
    bk_buffer_release(b);
  }
}

/* The last error is per thread: a failure on another thread does not
 * replace this thread's message. */
static void *fail_elsewhere(void *arg) {
  (void)arg;
  bk_buffer *b = NULL;
  if (bk_buffer_zeros(NULL, BK_F32, -7, &b) == BK_OK) bk_buffer_release(b);
  return strstr(bk_last_error(), "-7") ? (void *)1 : NULL;
}

static void last_error_is_per_thread(void) {
  bk_buffer *b = NULL;
  TL_REJECT(bk_buffer_zeros(NULL, BK_F32, -3, &b), BK_ERR_INVALID_ARGUMENT, "-3");
  pthread_t th;
  void *res = NULL;
  TL_CHECK(pthread_create(&th, NULL, fail_elsewhere, NULL) == 0, "thread");
  pthread_join(th, &res);
  TL_CHECK(res == (void *)1, "other thread saw its own message");
  TL_CHECK(strstr(bk_last_error(), "-3") != NULL, "this thread keeps its message: %s", bk_last_error());
  TL_CHECK(strncmp(bk_last_error(), "bk_buffer_zeros: ", 17) == 0, "message names the function");
}

/* ---- DLPack ---------------------------------------------------------------------- */

static int deleter_calls;
typedef struct owned_tensor {
  DLManagedTensor m;
  int64_t shape[2];
  int64_t strides[2];
  double data[6];
} owned_tensor;

static void count_delete(DLManagedTensor *self) {
  deleter_calls++;
  free(self);
}

static owned_tensor *make_tensor(void) {
  owned_tensor *t = calloc(1, sizeof *t);
  for (int i = 0; i < 6; i++) t->data[i] = i + 0.5;
  t->shape[0] = 2;
  t->shape[1] = 3;
  t->m.dl_tensor.data = t->data;
  t->m.dl_tensor.device.device_type = kDLCPU;
  t->m.dl_tensor.ndim = 2;
  t->m.dl_tensor.dtype.code = kDLFloat;
  t->m.dl_tensor.dtype.bits = 64;
  t->m.dl_tensor.dtype.lanes = 1;
  t->m.dl_tensor.shape = t->shape;
  t->m.deleter = count_delete;
  return t;
}

static void dlpack_import_export(void) {
  const double want[6] = {0.5, 1.5, 2.5, 3.5, 4.5, 5.5};
  deleter_calls = 0;
  owned_tensor *t = make_tensor();
  bk_buffer *b = NULL;
  if (TL_OK(bk_buffer_from_dlpack(tl_cpu, &t->m, &b)) == BK_OK) {
    TL_CHECK(bk_buffer_data(b) == t->data, "import is zero-copy");
    TL_CHECK(bk_buffer_length(b) == 6 && bk_buffer_dtype(b) == BK_F64, "import geometry");
    bk_buffer *r = bk_buffer_retain(b);
    bk_buffer_release(b);
    TL_CHECK(deleter_calls == 0, "deleter waits for the last reference");
    /* Export it again: the exported tensor keeps the buffer alive. */
    DLManagedTensor *e = NULL;
    if (TL_OK(bk_buffer_to_dlpack(r, &e)) == BK_OK) {
      TL_CHECK(e->dl_tensor.data == t->data && e->dl_tensor.shape[0] == 6 &&
                   e->dl_tensor.ndim == 1 && e->dl_tensor.dtype.bits == 64,
               "export shares memory");
      bk_buffer_release(r);
      TL_CHECK(deleter_calls == 0, "export holds a reference");
      TL_EXACT((const double *)e->dl_tensor.data, want, 6);
      e->deleter(e);
    } else {
      bk_buffer_release(r);
    }
    TL_CHECK(deleter_calls == 1, "deleter ran once (%d)", deleter_calls);
  }
  /* Strides equal to the compact ones are accepted; others rejected. */
  t = make_tensor();
  t->strides[0] = 3;
  t->strides[1] = 1;
  t->m.dl_tensor.strides = t->strides;
  if (TL_OK(bk_buffer_from_dlpack(NULL, &t->m, &b)) == BK_OK) bk_buffer_release(b);
  t = make_tensor();
  t->strides[0] = 1;
  t->strides[1] = 2;
  t->m.dl_tensor.strides = t->strides;
  deleter_calls = 0;
  TL_REJECT(bk_buffer_from_dlpack(NULL, &t->m, &b), BK_ERR_INVALID_ARGUMENT, "strides");
  t->m.dl_tensor.strides = NULL;
  t->m.dl_tensor.dtype.bits = 16;
  TL_REJECT(bk_buffer_from_dlpack(NULL, &t->m, &b), BK_ERR_DTYPE, "dtype");
  t->m.dl_tensor.dtype.bits = 64;
  t->m.dl_tensor.device.device_type = kDLOpenCL;
  TL_REJECT(bk_buffer_from_dlpack(NULL, &t->m, &b), BK_ERR_UNSUPPORTED, "device");
  TL_CHECK(deleter_calls == 0 && b == NULL, "failure leaves ownership with the caller");
  free(t);
  TL_REJECT(bk_buffer_from_dlpack(NULL, NULL, &b), BK_ERR_NULL, "tensor");
  TL_REJECT(bk_buffer_to_dlpack(NULL, NULL), BK_ERR_NULL, "out");
}

int main(void) {
  tl_init();
  TL_RUN(status_strings);
  TL_RUN(buffer_roundtrip);
  TL_RUN(buffer_errors);
  TL_RUN(context_rules);
  TL_RUN(last_error_is_per_thread);
  if (tl_dev.kind == BK_DEVICE_CPU) TL_RUN(dlpack_import_export);
  return tl_finish();
}
