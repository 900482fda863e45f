/*
 * test_cuda_big.c — GPU-only cases: tensors past 2^31 and 2^32 elements
 * (64-bit offsets in the row, layout and gather/scatter kernels), row sums
 * at every width class from 1 to 262144 columns, odd widths whose rows
 * start unaligned, and the fold order of the broadcast adjoint and the axis
 * sum on the shapes that take the staged CUDA paths.
 *
 * Needs about 40 GB of device memory and 30 GB of host memory; skipped (0
 * passed, 0 failed) unless BK_TEST_DEVICE names a CUDA device. Host data is
 * a hash of the element index, filled by several threads, so the big cases
 * stay quick; results of the big cases are read back in slices through
 * bk_vec_slice.
 */
#include "testlib.h"

#include <pthread.h>

/* ---- data ------------------------------------------------------------------- */

/* A value in [-1, 1) determined by (seed, i), exact in float32. */
static float hval(uint64_t seed, uint64_t i) {
  uint64_t z = i + seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (float)((double)(z >> 40) * (1.0 / 8388608.0) - 1.0);
}

typedef struct fill_job {
  float *dst;
  int64_t lo, hi;
  uint64_t seed;
} fill_job;

static void *fill_worker(void *arg) {
  fill_job *j = (fill_job *)arg;
  for (int64_t i = j->lo; i < j->hi; i++) j->dst[i] = hval(j->seed, (uint64_t)i);
  return NULL;
}

/* dst[i] = hval(seed, i) for i < n, on up to 16 threads. */
static void fill_hash(float *dst, int64_t n, uint64_t seed) {
  enum { T = 16 };
  pthread_t th[T];
  fill_job job[T];
  int started[T] = {0};
  for (int t = 0; t < T; t++) {
    job[t].dst = dst;
    job[t].lo = n * t / T;
    job[t].hi = n * (t + 1) / T;
    job[t].seed = seed;
    started[t] = pthread_create(&th[t], NULL, fill_worker, &job[t]) == 0;
    if (!started[t]) fill_worker(&job[t]);
  }
  for (int t = 0; t < T; t++)
    if (started[t]) pthread_join(th[t], NULL);
}

static float *host_f32(int64_t n) { return (float *)tl_xmalloc((size_t)n * sizeof(float)); }

/* A float32 buffer on the device under test holding h[0..n). */
static bk_buffer *upload_f32(const float *h, int64_t n) {
  bk_buffer *b = NULL;
  if (bk_buffer_from_host(tl_ctx, BK_F32, h, n, &b) != BK_OK) {
    fprintf(stderr, "upload of %" PRId64 " floats: %s\n", n, bk_last_error());
    exit(2);
  }
  return b;
}

/* y[start, start + len) as doubles (malloc'd), read through bk_vec_slice so
 * a 17 GB result never has to come back whole. NULL after a failure. */
static double *read_slice(const bk_buffer *y, int64_t start, int64_t len) {
  bk_buffer *s = NULL;
  if (TL_OK(bk_vec_slice(tl_ctx, y, bk_buffer_length(y), start, len, &s)) != BK_OK) return NULL;
  double *v = tl_read(s);
  bk_buffer_release(s);
  return v;
}

/* Slice starts that cover both ends and the 2^31 and 2^32 element
 * boundaries of an n-element result, each `len` long. */
static int slice_starts(int64_t n, int64_t len, int64_t *starts) {
  const int64_t marks[] = {0, ((int64_t)1 << 31) - len / 2, ((int64_t)1 << 32) - len / 2, n / 3,
                           n - len};
  int k = 0;
  for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
    int64_t s = marks[i];
    if (s < 0) s = 0;
    if (s + len > n) s = n - len;
    starts[k++] = s;
  }
  return k;
}

/* ---- a row kernel past 2^31 elements --------------------------------------------- */

static void big_rows_sum(void) {
  /* Odd cols: every row after the first starts unaligned. */
  const int64_t rows = 65543, cols = 32771, n = rows * cols; /* 2147909653 > 2^31 */
  float *x = host_f32(n);
  fill_hash(x, n, 1);
  bk_buffer *b = upload_f32(x, n), *y = NULL;
  if (TL_OK(bk_rows_sum(tl_ctx, b, rows, cols, &y)) == BK_OK) {
    double *got = tl_read(y);
    /* The first rows, the rows around element 2^31 (row 65530) and the last. */
    int64_t pick[] = {0, 1, 2, 4097, 30000, 65528, 65529, 65530, 65531, 65532, rows - 2, rows - 1};
    int np = (int)(sizeof pick / sizeof pick[0]);
    double ref[16], g[16], scale = 0;
    for (int i = 0; i < np; i++) {
      double acc = 0, mag = 0;
      const float *row = x + pick[i] * cols;
      for (int64_t j = 0; j < cols; j++) {
        acc += row[j];
        mag += fabs(row[j]);
      }
      ref[i] = acc;
      g[i] = got[pick[i]];
      if (mag > scale) scale = mag;
    }
    TL_CLOSE(g, ref, np, tl_tol_red(BK_F32), scale);
    free(got);
  }
  bk_buffer_release(y);
  bk_buffer_release(b);
  free(x);
}

/* ---- layout kernels past 2^32 elements ----------------------------------------------- */

static void big_broadcast_col(void) {
  const int64_t rows = 65537, cols = 65539, n = rows * cols; /* 4295229443 > 2^32 */
  float *v = host_f32(rows);
  fill_hash(v, rows, 2);
  bk_buffer *vb = upload_f32(v, rows), *y = NULL;
  if (TL_OK(bk_broadcast_col(tl_ctx, vb, rows, cols, &y)) == BK_OK) {
    const int64_t len = 3 * cols + 5;
    int64_t starts[8];
    int ns = slice_starts(n, len, starts);
    double *ref = tl_xmalloc((size_t)len * sizeof *ref);
    for (int s = 0; s < ns; s++) {
      double *got = read_slice(y, starts[s], len);
      if (!got) continue;
      for (int64_t i = 0; i < len; i++) ref[i] = v[(starts[s] + i) / cols];
      TL_EXACT(got, ref, len);
      free(got);
    }
    free(ref);
  }
  bk_buffer_release(y);
  bk_buffer_release(vb);
  free(v);
}

static void big_swap_adjacent(void) {
  /* (a, b) -> (b, a) with odd extents: the tiled path, 2^32 + 262147
   * elements each way. */
  const int64_t a = 65539, b = 65537, n = a * b;
  int64_t dims[2] = {a, b};
  float *x = host_f32(n);
  fill_hash(x, n, 3);
  bk_buffer *xb = upload_f32(x, n), *y = NULL;
  free(x);
  if (TL_OK(bk_swap_adjacent(tl_ctx, xb, dims, 2, 0, &y)) == BK_OK) {
    const int64_t len = 2 * a + 7;
    int64_t starts[8];
    int ns = slice_starts(n, len, starts);
    double *ref = tl_xmalloc((size_t)len * sizeof *ref);
    for (int s = 0; s < ns; s++) {
      double *got = read_slice(y, starts[s], len);
      if (!got) continue;
      for (int64_t f = 0; f < len; f++) {
        /* y[j, i] = x[i, j] = hval(i*b + j). */
        int64_t at = starts[s] + f, j = at / a, i = at % a;
        ref[f] = hval(3, (uint64_t)(i * b + j));
      }
      TL_EXACT(got, ref, len);
      free(got);
    }
    free(ref);
  }
  bk_buffer_release(y);
  bk_buffer_release(xb);
}

/* ---- gather and scatter past 2^32 output elements --------------------------------------- */

static void big_gather(void) {
  /* cols a multiple of 4 (16-byte path) and odd (scalar path). */
  const int64_t rows = 1000, colss[2] = {65540, 65539}, k = 65537;
  uint64_t *idx = tl_xmalloc((size_t)k * sizeof *idx);
  for (int64_t r = 0; r < k; r++) {
    /* About one index in six is out of range: a zero row. */
    uint64_t h = (uint64_t)(hval(4, (uint64_t)r) * 600.0f + 600.0f);
    idx[r] = h;
  }
  for (int ci = 0; ci < 2; ci++) {
    const int64_t cols = colss[ci], n = k * cols;
    float *m = host_f32(rows * cols);
    fill_hash(m, rows * cols, 5 + (uint64_t)ci);
    bk_buffer *mb = upload_f32(m, rows * cols), *y = NULL;
    if (TL_OK(bk_rows_gather(tl_ctx, mb, rows, cols, idx, k, &y)) == BK_OK) {
      const int64_t len = 2 * cols + 3;
      int64_t starts[8];
      int ns = slice_starts(n, len, starts);
      double *ref = tl_xmalloc((size_t)len * sizeof *ref);
      for (int s = 0; s < ns; s++) {
        double *got = read_slice(y, starts[s], len);
        if (!got) continue;
        for (int64_t f = 0; f < len; f++) {
          int64_t at = starts[s] + f, r = at / cols, c = at % cols;
          ref[f] = idx[r] < (uint64_t)rows ? m[(int64_t)idx[r] * cols + c] : 0.0;
        }
        TL_EXACT(got, ref, len);
        free(got);
      }
      free(ref);
    }
    bk_buffer_release(y);
    bk_buffer_release(mb);
    free(m);
  }
  free(idx);
}

/* mat (rows, cols) past 2^32 elements, made on the device as a column
 * broadcast (mat[i, :] = base[i]); k update rows with repeats. k small takes
 * the copy-then-rewrite path, k large the one-pass path. */
static void big_scatter_add(void) {
  const int64_t rows = 65537, cols = 65540; /* 4295294980 elements: past 2^32 */
  const int64_t ks[2] = {300, 8192};
  float *base = host_f32(rows);
  fill_hash(base, rows, 6);
  bk_buffer *bb = upload_f32(base, rows), *mat = NULL;
  if (TL_OK(bk_broadcast_col(tl_ctx, bb, rows, cols, &mat)) != BK_OK) {
    bk_buffer_release(bb);
    free(base);
    return;
  }
  for (int ki = 0; ki < 2; ki++) {
    const int64_t k = ks[ki];
    uint64_t *idx = tl_xmalloc((size_t)k * sizeof *idx);
    /* Rows near the start, near element 2^32 (row 65532) and at the end,
     * many repeated; every tenth index out of range. For the large k, three
     * quarters go to distinct rows spread over the matrix (7919 is coprime
     * to the prime 65537), touching more than rows/16 rows. */
    for (int64_t r = 0; r < k; r++) {
      uint64_t h = (uint64_t)((hval(7 + (uint64_t)ki, (uint64_t)r) + 1.0f) * 4096.0f);
      int64_t band = r % 4;
      if (band == 0)
        idx[r] = h % 64;
      else if (ki == 1 || band == 2)
        idx[r] = (uint64_t)(r * 7919) % (uint64_t)rows;
      else if (band == 1)
        idx[r] = 65500 + h % 37;
      else
        idx[r] = (uint64_t)rows - 1 - h % 8;
      if (r % 10 == 9) idx[r] = (uint64_t)rows + h % 3;
    }
    float *vals = host_f32(k * cols);
    fill_hash(vals, k * cols, 9 + (uint64_t)ki);
    bk_buffer *vb = upload_f32(vals, k * cols), *y = NULL;
    if (TL_OK(bk_rows_scatter_add(tl_ctx, mat, vb, rows, cols, idx, k, &y)) == BK_OK) {
      const int64_t len = 2 * cols;
      const int64_t rows_at[] = {0,        5,        65500,          65510,         65532,
                                 rows - 2, rows - 1, (int64_t)idx[1], (int64_t)idx[6]};
      double *ref = tl_xmalloc((size_t)len * sizeof *ref);
      float *acc = host_f32(len);
      for (size_t s = 0; s < sizeof rows_at / sizeof rows_at[0]; s++) {
        const int64_t r0 = rows_at[s] + 2 > rows ? rows - 2 : rows_at[s];
        double *got = read_slice(y, r0 * cols, len);
        if (!got) continue;
        for (int64_t q = 0; q < 2; q++) {
          float *a = acc + q * cols;
          for (int64_t c = 0; c < cols; c++) a[c] = base[r0 + q];
          /* ((mat[i] + v_first) + v_second) + ... in float. */
          for (int64_t r = 0; r < k; r++)
            if (idx[r] == (uint64_t)(r0 + q))
              for (int64_t c = 0; c < cols; c++) a[c] = a[c] + vals[r * cols + c];
        }
        for (int64_t i = 0; i < len; i++) ref[i] = acc[i];
        TL_EXACT(got, ref, len);
        free(got);
      }
      free(acc);
      free(ref);
    }
    bk_buffer_release(y);
    bk_buffer_release(vb);
    free(vals);
    free(idx);
  }
  bk_buffer_release(mat);
  bk_buffer_release(bb);
  free(base);
}

/* ---- row sums at every width --------------------------------------------------------------- */

static void rows_sum_widths(void) {
  static const int64_t widths[] = {1,     2,     3,     4,     5,      7,      8,      15,
                                   16,    17,    31,    32,    33,     63,     64,     65,
                                   127,   128,   129,   255,   256,    257,    511,    512,
                                   1000,  1023,  1024,  1025,  2047,   2048,   4095,   4096,
                                   4097,  8191,  8192,  16383, 16384,  32767,  32768,  65535,
                                   65536, 100003, 131071, 131072, 262143, 262144};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
      const int64_t cols = widths[w];
      int64_t rows = ((int64_t)1 << 22) / cols;
      if (rows < 3) rows = 3;
      if (rows > 70000) rows = 70000;
      const int64_t n = rows * cols;
      double *x = tl_xmalloc((size_t)n * sizeof *x), *ref = tl_xmalloc((size_t)rows * sizeof *ref);
      for (int64_t i = 0; i < n; i++) x[i] = hval(100 + (uint64_t)w, (uint64_t)i);
      double scale = 0;
      for (int64_t r = 0; r < rows; r++) {
        double acc = 0, mag = 0;
        for (int64_t j = 0; j < cols; j++) {
          acc += x[r * cols + j];
          mag += fabs(x[r * cols + j]);
        }
        ref[r] = acc;
        if (mag > scale) scale = mag;
      }
      char name[64];
      snprintf(name, sizeof name, "rows_sum_widths %s cols=%" PRId64, tl_dtname(dt), cols);
      tl_case = name;
      bk_buffer *b = tl_buf(dt, x, n), *y = NULL, *y2 = NULL;
      if (TL_OK(bk_rows_sum(tl_ctx, b, rows, cols, &y)) == BK_OK) {
        TL_BUF_CLOSE(y, ref, rows, tl_tol_red(dt), scale);
        if (TL_OK(bk_rows_sum(tl_ctx, b, rows, cols, &y2)) == BK_OK)
          TL_CHECK(tl_same_bits(y, y2), "rows_sum is not deterministic at cols = %" PRId64, cols);
      }
      bk_buffer_release(y);
      bk_buffer_release(y2);
      bk_buffer_release(b);
      free(x);
      free(ref);
    }
  }
  tl_case = "rows_sum_widths";
}

/* ---- fold order on the staged paths ---------------------------------------------------------- */

/* The adjoint folds each input element's terms in row-major output order in
 * float64 and rounds once: a host fold in that order must match bit for
 * bit. Shapes: reduce leading rows (column path, aligned and odd widths),
 * reduce the last axis (row path), batched columns, and the axis sum. */
static void fold_order(void) {
  static const struct {
    int64_t outer, n, inner;
  } shapes[] = {{1, 3000, 1000}, {1, 2049, 1001}, {1, 8192, 8192}, {3, 500, 257},
                {4099, 1000, 1}, {517, 3001, 1},  {1, 70000, 3},   {64, 64, 64}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      const int64_t o = shapes[s].outer, n = shapes[s].n, in = shapes[s].inner;
      const int64_t len = o * n * in, outn = o * in;
      double *x = tl_xmalloc((size_t)len * sizeof *x), *ref = tl_xmalloc((size_t)outn * sizeof *ref);
      for (int64_t i = 0; i < len; i++) x[i] = hval(200 + (uint64_t)s, (uint64_t)i);
      for (int64_t a = 0; a < o; a++)
        for (int64_t c = 0; c < in; c++) {
          double acc = 0;
          for (int64_t j = 0; j < n; j++) acc += x[(a * n + j) * in + c];
          ref[a * in + c] = dt == BK_F32 ? (double)(float)acc : acc;
        }
      char name[96];
      snprintf(name, sizeof name, "fold_order %s (%" PRId64 ",%" PRId64 ",%" PRId64 ")",
               tl_dtname(dt), o, n, in);
      tl_case = name;
      bk_buffer *b = tl_buf(dt, x, len), *y = NULL;
      int64_t dims[3] = {o, n, in};
      if (TL_OK(bk_sum_axis(tl_ctx, b, dims, 3, 1, &y)) == BK_OK) TL_BUF_EXACT(y, ref, outn);
      bk_buffer_release(y);
      y = NULL;
      /* The same sum as the adjoint of broadcasting (o, 1, in) to (o, n, in). */
      int64_t in_dims[3] = {o, 1, in}, map[3] = {1, 2, 3};
      if (TL_OK(bk_broadcast_to_adjoint(tl_ctx, b, in_dims, 3, dims, 3, map, &y)) == BK_OK)
        TL_BUF_EXACT(y, ref, outn);
      bk_buffer_release(y);
      bk_buffer_release(b);
      free(x);
      free(ref);
    }
  }
  tl_case = "fold_order";
}

int main(void) {
  tl_init();
  if (tl_dev.kind != BK_DEVICE_CUDA) {
    bk_context_destroy(tl_ctx);
    bk_context_destroy(tl_cpu);
    tl_skip("sizes this large are for the GPU only (set BK_TEST_DEVICE=cuda:N)");
  }
  TL_RUN(rows_sum_widths);
  TL_RUN(fold_order);
  TL_RUN(big_rows_sum);
  TL_RUN(big_broadcast_col);
  TL_RUN(big_swap_adjacent);
  TL_RUN(big_gather);
  TL_RUN(big_scatter_add);
  return tl_finish();
}
