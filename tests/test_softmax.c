/*
 * test_softmax.c — bk_softmax along every axis of tensors of rank 1..16.
 */
#include "testlib.h"

#include "core/internal.h"
#include "cpu/cpu.h"

/* The contract's examples are printed to 7 digits. */
static double example_tol(bk_dtype dt) { return fmax(1e-6, tl_tol_red(dt)); }

/* Float64 softmax of x (dims, rank) along axis into ref, fibre by fibre in
 * the textbook form exp(x - m) / sum exp(x - m). */
static void softmax_ref(const double *x, double *ref, const int64_t *dims, int rank, int axis) {
  int64_t outer = 1, inner = 1, n = dims[axis];
  for (int i = 0; i < axis; i++) outer *= dims[i];
  for (int i = axis + 1; i < rank; i++) inner *= dims[i];
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t t = 0; t < inner; t++) {
      int64_t base = o * n * inner + t;
      double m = -INFINITY, s = 0;
      int nan = 0;
      for (int64_t j = 0; j < n; j++) {
        double v = x[base + j * inner];
        if (isnan(v)) nan = 1;
        if (v > m) m = v;
      }
      for (int64_t j = 0; j < n; j++) s += exp(x[base + j * inner] - m);
      for (int64_t j = 0; j < n; j++)
        ref[base + j * inner] = (nan || isinf(m)) ? NAN : exp(x[base + j * inner] - m) / s;
    }
  }
}

/* ---- examples ----------------------------------------------------------------- */

static void softmax_examples(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double x[] = {0.10, -0.20, 0.30, 0.05, 0.25, -0.15};
    const double want[] = {0.3375845, 0.2500888, 0.4123267, 0.3289329, 0.4017596, 0.2693075};
    bk_buffer *b = tl_buf(dt, x, 6), *y = NULL;
    if (TL_OK(bk_softmax(tl_ctx, b, (int64_t[]){2, 3}, 2, 1, &y)) == BK_OK)
      TL_BUF_CLOSE(y, want, 6, example_tol(dt), 1.0);
    bk_buffer_release(y);
    bk_buffer_release(b);

    /* Huge logits must not overflow: the maximum is subtracted first. */
    const double big[] = {1000, 1000, -1000, 1e30, 1e30, 0};
    const double big_want[] = {0.5, 0.5, 0, 0.5, 0.5, 0};
    b = tl_buf(dt, big, 6);
    if (TL_OK(bk_softmax(tl_ctx, b, (int64_t[]){2, 3}, 2, 1, &y)) == BK_OK)
      TL_BUF_CLOSE(y, big_want, 6, tl_tol_red(dt), 1.0);
    bk_buffer_release(y);
    bk_buffer_release(b);

    /* A single-element fibre is exactly 1. */
    const double one[] = {-3, 7, 1e20};
    b = tl_buf(dt, one, 3);
    if (TL_OK(bk_softmax(tl_ctx, b, (int64_t[]){3, 1}, 2, 1, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){1, 1, 1}), 3);
    bk_buffer_release(y);
    bk_buffer_release(b);
  }
}

/* ---- IEEE behaviour -------------------------------------------------------------------- */

/* dims (3, 5), axis 0: one fibre per column, each with its own special
 * values; the other columns must be unaffected. */
static void softmax_ieee(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    const double inf = INFINITY;
    /* columns: NaN | +inf | only -inf | -inf and numbers | all NaN */
    const double x[] = {NAN,  1,    -inf, -inf, NAN,
                        0,    inf,  -inf, 0,    NAN,
                        2,    2,    -inf, 0,    NAN};
    const double want[] = {NAN, NAN, NAN, 0,   NAN,
                           NAN, NAN, NAN, 0.5, NAN,
                           NAN, NAN, NAN, 0.5, NAN};
    bk_buffer *b = tl_buf(dt, x, 15), *y = NULL;
    if (TL_OK(bk_softmax(tl_ctx, b, (int64_t[]){3, 5}, 2, 0, &y)) == BK_OK)
      TL_BUF_EXACT(y, want, 15);
    bk_buffer_release(y);
    /* The same data along axis 1: every row holds a NaN or +inf. */
    if (TL_OK(bk_softmax(tl_ctx, b, (int64_t[]){3, 5}, 2, 1, &y)) == BK_OK) {
      double *g = tl_read(y);
      int all_nan = 1;
      for (int i = 0; i < 15; i++) all_nan &= isnan(g[i]) != 0;
      TL_CHECK(all_nan, "rows holding NaN or +inf must be all NaN");
      free(g);
    }
    bk_buffer_release(y);
    bk_buffer_release(b);

    /* Two +inf entries: still NaN (inf - inf), never a silent 0.5. */
    const double twoinf[] = {inf, inf, 0};
    b = tl_buf(dt, twoinf, 3);
    if (TL_OK(bk_softmax(tl_ctx, b, (int64_t[]){3}, 1, 0, &y)) == BK_OK)
      TL_BUF_EXACT(y, ((double[]){NAN, NAN, NAN}), 3);
    bk_buffer_release(y);
    bk_buffer_release(b);
  }
}

/* ---- random tensors against the float64 reference ----------------------------------------- */

/* Softmax of b along axis on the context under test against ref, and a
 * second run on ctx2 (NULL: the default context) with the same bits. */
static void softmax_check(const bk_buffer *b, const double *ref, int64_t n, const int64_t *dims,
                          int rank, int axis, bk_context *ctx2) {
  bk_buffer *y = NULL, *y2 = NULL;
  if (TL_OK(bk_softmax(tl_ctx, b, dims, rank, axis, &y)) == BK_OK) {
    TL_BUF_CLOSE(y, ref, n, tl_tol_red(bk_buffer_dtype(b)), 1.0);
    if (TL_OK(bk_softmax(ctx2, b, dims, rank, axis, &y2)) == BK_OK)
      TL_CHECK(tl_same_bits(y, y2), "softmax along axis %d of rank %d is not deterministic", axis,
               rank);
  }
  bk_buffer_release(y);
  bk_buffer_release(y2);
}

static void softmax_random(void) {
  static const struct {
    int rank;
    int64_t dims[5];
  } shapes[] = {
      {1, {1}},           {1, {7}},          {2, {3, 4}},      {3, {2, 3, 4}},
      {4, {2, 1, 3, 5}},  {3, {4, 70, 3}},   {3, {2, 5, 130}}, {2, {8, 4096}},
      {3, {64, 3, 200}},  {5, {2, 3, 1, 4, 2}}, {2, {3000, 2}},
      /* Shapes that reach the CUDA tiled middle-axis kernel (partial
       * strips, the full 16- and 8-wide tiles), its fallback for long
       * fibres, and the split-row paths for wide last axes. */
      {3, {3, 37, 5}},    {3, {2, 100, 33}}, {3, {4, 17, 2}},  {3, {2, 1024, 256}},
      {3, {1, 1, 40}},    {3, {2, 4000, 9}}, {2, {3, 20000}},  {2, {263, 8193}},
      /* Odd rows longer than a block's registers hold, many of them: the
       * split path by length (CUDA). */
      {2, {300, 20011}},
      /* Narrow rows on the CUDA lane-group kernel: 8/16/32 lanes per row
       * (32, 64, 128 columns), two vectors per lane (256), idle lanes
       * (100, 12), one lane per row (4), scalar loads (33, 6). Along axis
       * 0 the same tensors reach the cp.async tile kernel. */
      {2, {1000, 32}},    {2, {333, 64}},    {2, {77, 128}},   {2, {50, 256}},
      {2, {45, 100}},     {2, {37, 12}},     {2, {9, 4}},      {2, {101, 33}},
      {2, {5, 6}},
      /* The cp.async tile: 128-byte segments in an 87.5 KB tile, partial
       * last tiles (20 and 12 of 32/16 columns; 6 of 8 in float64, while
       * float32 rows of 24 bytes stay on the register-staged load), and a
       * 96 KB tile of 64-byte segments. */
      {3, {2, 700, 32}},  {3, {3, 37, 20}},  {3, {2, 5, 12}},  {3, {2, 4, 6}},
      {3, {2, 1536, 16}},
      /* The CUDA axis engine: fibres in registers (4 | 5 and 16 | 17 rows),
       * flat tiles of several slabs, chunks held by a cluster for
       * parallelism (1, 200, 64) and by size (1, 4000, 16), and fibres too
       * long for a cluster, flat (2, 30000, 4) and in strips (1, 8000, 40). */
      {3, {9, 4, 12}},    {3, {7, 5, 7}},    {3, {5, 16, 8}},   {3, {6, 17, 3}},
      {3, {1500, 20, 3}}, {3, {1, 200, 64}}, {3, {1, 4000, 16}}, {3, {2, 30000, 4}},
      {3, {1, 8000, 40}},
      /* Flat tiles whose slabs start at every offset within 16 bytes (the
       * tile's shifted copy), whole (300 x 18 x 245) and in a cluster's
       * chunks (2 x 397 x 170), and an odd float64 width (40 x 30 x 7). */
      {3, {300, 18, 245}}, {3, {2, 397, 170}}, {3, {40, 30, 7}},
  };
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int rank = shapes[s].rank;
      const int64_t *dims = shapes[s].dims;
      int64_t n = 1;
      for (int i = 0; i < rank; i++) n *= dims[i];
      double *x = tl_xmalloc((size_t)n * sizeof *x), *ref = tl_xmalloc((size_t)n * sizeof *ref);
      tl_seed(200 + s);
      for (int64_t i = 0; i < n; i++) x[i] = 4 * tl_randn();
      /* A few exact ties and -inf entries inside otherwise finite fibres. */
      if (n > 4) {
        x[1] = x[0];
        x[n - 1] = -INFINITY;
      }
      tl_round(dt, x, n);
      bk_buffer *b = tl_buf(dt, x, n);
      for (int axis = 0; axis < rank; axis++) {
        softmax_ref(x, ref, dims, rank, axis);
        softmax_check(b, ref, n, dims, rank, axis, NULL);
      }
      TL_UNCHANGED(b, x, n);
      bk_buffer_release(b);
      free(x);
      free(ref);
    }
  }
}

/* Special values in narrow rows (the lane-group kernel along axis 1) and
 * in middle-axis tiles (axis 0 of the same data, inner = cols): NaN, +inf,
 * two +inf, an all -inf row and column, -inf among numbers; the other
 * fibres must be unaffected. */
static void softmax_special_fibres(void) {
  static const int64_t widths[] = {32, 64, 128, 256, 20};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
      const int64_t rows = 40, cols = widths[w], n = rows * cols;
      int64_t dims[] = {rows, cols};
      double *x = tl_xmalloc((size_t)n * sizeof *x), *ref = tl_xmalloc((size_t)n * sizeof *ref);
      tl_seed(300 + w);
      for (int64_t i = 0; i < n; i++) x[i] = 3 * tl_randn();
      x[3 * cols + 5] = NAN;
      x[7 * cols + 0] = INFINITY;
      x[20 * cols + 1] = INFINITY;
      x[20 * cols + cols - 2] = INFINITY;
      for (int64_t c = 0; c < cols; c++) x[10 * cols + c] = -INFINITY;
      for (int64_t r = 0; r < rows; r++) x[r * cols + cols - 1] = -INFINITY;
      for (int64_t c = 0; c < cols; c += 3) x[12 * cols + c] = -INFINITY;
      x[(rows - 1) * cols + 2] = -INFINITY;
      tl_round(dt, x, n);
      bk_buffer *b = tl_buf(dt, x, n);
      for (int axis = 0; axis < 2; axis++) {
        softmax_ref(x, ref, dims, 2, axis);
        bk_buffer *y = NULL;
        if (TL_OK(bk_softmax(tl_ctx, b, dims, 2, axis, &y)) == BK_OK)
          TL_BUF_CLOSE(y, ref, n, tl_tol_red(dt), 1.0);
        bk_buffer_release(y);
      }
      TL_UNCHANGED(b, x, n);
      bk_buffer_release(b);
      free(x);
      free(ref);
    }
  }
}

/* The CPU backend's rows read once (rows longer than half a core's cache,
 * output streamed): the test context is told its cache holds 8 KiB and
 * every output streams, so rows of 3000 and 5000 entries take blocks of
 * 1024 with their own maxima. Rows: random; a NaN in one block; a first
 * block of only -inf; only -inf; a +inf; -inf and NaN in one block and
 * the rest finite; the maximum in the short last block. Nothing on CUDA. */
static void softmax_one_read(void) {
  const size_t old_l2 = bk__cpu_set_l2_bytes(tl_ctx, 8192);
  if (!old_l2) return;
  const size_t old_stream = bk__cpu_set_stream_bytes(tl_ctx, 0);
  static const int64_t widths[] = {3000, 5000};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t w = 0; w < 2; w++) {
      const int64_t rows = 7, cols = widths[w], n = rows * cols;
      int64_t dims[] = {rows, cols};
      double *x = tl_xmalloc((size_t)n * sizeof *x), *ref = tl_xmalloc((size_t)n * sizeof *ref);
      tl_seed(400 + w);
      for (int64_t i = 0; i < n; i++) x[i] = 4 * tl_randn();
      x[1 * cols + 2500] = NAN;
      for (int64_t c = 0; c < 1024; c++) x[2 * cols + c] = -INFINITY;
      for (int64_t c = 0; c < cols; c++) x[3 * cols + c] = -INFINITY;
      x[4 * cols + 1500] = INFINITY;
      for (int64_t c = 1024; c < 2048; c++) x[5 * cols + c] = c == 1500 ? NAN : -INFINITY;
      x[6 * cols + cols - 3] = 40;
      tl_round(dt, x, n);
      softmax_ref(x, ref, dims, 2, 1);
      bk_buffer *b = tl_buf(dt, x, n), *y = NULL;
      if (TL_OK(bk_softmax(tl_ctx, b, dims, 2, 1, &y)) == BK_OK)
        TL_BUF_CLOSE(y, ref, n, tl_tol_red(dt), 1.0);
      TL_UNCHANGED(b, x, n);
      bk_buffer_release(y);
      bk_buffer_release(b);
      free(x);
      free(ref);
    }
  }
  bk__cpu_set_stream_bytes(tl_ctx, old_stream);
  bk__cpu_set_l2_bytes(tl_ctx, old_l2);
}

/* Rounds x (dims, rank entries) to dt, checks the softmax along axis 1
 * against the float64 reference, twice with the same bits, and that x is
 * unchanged; frees x. */
static void fibre_check(bk_dtype dt, double *x, const int64_t *dims, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  double *ref = tl_xmalloc((size_t)n * sizeof *ref);
  tl_round(dt, x, n);
  softmax_ref(x, ref, dims, rank, 1);
  bk_buffer *b = tl_buf(dt, x, n);
  softmax_check(b, ref, n, dims, rank, 1, tl_ctx);
  TL_UNCHANGED(b, x, n);
  bk_buffer_release(b);
  free(x);
  free(ref);
}

static void midaxis_check(bk_dtype dt, double *x, const int64_t *dims) { fibre_check(dt, x, dims, 3); }

/* Last-axis rows of every width up to 160 and of a spread of wider ones,
 * around each boundary of the CUDA row plans (lane groups of 1-32 lanes
 * and 1-8 vectors a lane, a block per row with and without a streamed
 * tail, the split path), 37 rows each so that rows start at every offset
 * within a 16-byte vector: NaN, +inf, an all -inf row, -inf and ties among
 * numbers, against the float64 reference, twice with the same bits. GPU
 * contexts only (the CPU kernels have their own width tests). */
static void softmax_row_widths(void) {
  if (tl_dev.kind == BK_DEVICE_CPU) return;
  static const int64_t wide[][2] = {
      {37, 1017}, {37, 1018}, {37, 1019}, {37, 1020}, {37, 1021}, {37, 1023}, {37, 1024},
      {37, 1025}, {37, 1029}, {37, 2047}, {37, 2049}, {37, 4093}, {37, 4097}, {300, 16383},
      {300, 16384}, {300, 16389}, {300, 16395}, {5, 20011}, {3, 40003}, {1, 65541}};
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    int64_t rows, cols;
    for (int64_t wi = 0; tl_row_width(wi, 134, wide, sizeof wide / sizeof wide[0], &rows, &cols);
         wi++) {
      const int64_t n = rows * cols, dims[2] = {rows, cols};
      double *x = tl_xmalloc((size_t)n * sizeof *x);
      tl_seed(7000 + (uint64_t)wi);
      for (int64_t i = 0; i < n; i++) x[i] = 4 * tl_randn();
      if (rows > 5) {
        x[1 * cols + cols / 2] = NAN;
        x[2 * cols + cols - 1] = INFINITY;
        for (int64_t c = 0; c < cols; c++) x[3 * cols + c] = -INFINITY;
        x[4 * cols] = -INFINITY;
        if (cols > 1) x[5 * cols + cols - 1] = x[5 * cols];
      }
      fibre_check(dt, x, dims, 2);
    }
  }
}

/* Every load and path of the CUDA row softmax (bk__cuda_rows_force:
 * element by element or 16-byte vectors, each on the planner's path, a
 * block per row and the split path) at widths around each plan's edges,
 * 37-39 rows each (rows starting at every offset within a vector), with the
 * special rows of softmax_row_widths, against the float64 reference. */
static void softmax_rows_forced(void) {
#ifdef BK_HAVE_CUDA
  static const int64_t widths[] = {1,   2,   3,   4,   5,   7,   8,    9,    16,   17,   31,
                                   32,  33,  63,  64,  65,  127, 128,  129,  255,  256,  257,
                                   509, 512, 515, 1017, 1024, 1031, 2049, 4097};
  if (!bk__cuda_rows_force(tl_ctx, 0)) return;
  for (int strategy = 1; strategy <= 6; strategy++) {
    TL_CHECK(bk__cuda_rows_force(tl_ctx, strategy), "strategy %d refused", strategy);
    for (int d = 0; d < TL_DTYPES; d++) {
      bk_dtype dt = tl_dtypes[d];
      for (size_t w = 0; w <= sizeof widths / sizeof widths[0]; w++) {
        /* 37-39 rows: a buffer whose last vector holds the ends of several
         * one-column rows. */
        const int64_t rows =
            w < sizeof widths / sizeof widths[0] ? 37 + (int64_t)((w + (size_t)strategy) % 3) : 300;
        const int64_t cols = w < sizeof widths / sizeof widths[0] ? widths[w] : 16389;
        const int64_t n = rows * cols, dims[2] = {rows, cols};
        double *x = tl_xmalloc((size_t)n * sizeof *x);
        tl_seed(7600 + w);
        for (int64_t i = 0; i < n; i++) x[i] = 4 * tl_randn();
        x[1 * cols + cols / 2] = NAN;
        x[2 * cols + cols - 1] = INFINITY;
        for (int64_t c = 0; c < cols; c++) x[3 * cols + c] = -INFINITY;
        x[4 * cols] = -INFINITY;
        fibre_check(dt, x, dims, 2);
      }
    }
  }
  TL_CHECK(bk__cuda_rows_force(tl_ctx, 0), "planner not restored");
#endif
}

/* Middle-axis shapes aimed at the CUDA tile kernels: fibres at and one
 * past the shared-memory tile limits (2048 and 3072 float32 rows, 1536
 * float64), partial last tiles, and more tiles than resident blocks, in a
 * count that is not a multiple of the grid. Then the line tiles (rows
 * wider than 64 bytes, 32..1392 rows): both sides of every boundary
 * between their register/shared splits (float32 336|337; both 552|553,
 * 832|833, 1136|1137) and of their range (31|32, 1392|1393), with
 * inner = 20 and 36, whose last tile is partial in both dtypes (36: 32 + 4
 * float32, 16 + 16 + 4 float64). The large shapes run on GPU contexts
 * only, to keep the CPU run quick. */
static void softmax_midaxis_tiles(void) {
  static const struct {
    int64_t dims[3];
    int gpu_only;
  } shapes[] = {
      {{100, 8, 700}, 0},   /* 2200 tiles of 32 columns, the last 28 wide */
      {{7, 1024, 100}, 0},  /* line tiles: 4 float32 / 7 float64, partial last */
      {{3, 1025, 24}, 0},   {{2, 2048, 8}, 0},   {{2, 2049, 8}, 0},
      {{2, 3072, 8}, 0},    {{1, 3073, 8}, 0},   {{1, 1537, 8}, 0},
      {{3, 1024, 1000}, 1}, /* 32 line tiles of 32 float32 columns, the last 8 wide */
      {{8, 1024, 1004}, 1}, /* 256 to 504 line tiles */
      {{3, 31, 36}, 1},     {{2, 32, 36}, 1},    {{2, 50, 20}, 1},
      {{2, 336, 20}, 1},    {{2, 337, 36}, 1},   {{1, 552, 36}, 1},
      {{2, 553, 20}, 1},    {{1, 832, 36}, 1},   {{1, 833, 20}, 1},
      {{1, 1136, 20}, 1},   {{1, 1137, 36}, 1},  {{1, 1392, 36}, 1},
      {{1, 1393, 20}, 1},
  };
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      if (shapes[s].gpu_only && tl_dev.kind == BK_DEVICE_CPU) continue;
      const int64_t *dims = shapes[s].dims;
      const int64_t n = dims[0] * dims[1] * dims[2];
      double *x = tl_xmalloc((size_t)n * sizeof *x);
      tl_seed(400 + s);
      for (int64_t i = 0; i < n; i++) x[i] = 4 * tl_randn();
      /* A tie and a -inf entry in the first fibre, -inf in the last. */
      x[dims[2]] = x[0];
      x[2 * dims[2]] = -INFINITY;
      x[n - 1] = -INFINITY;
      midaxis_check(dt, x, dims);
    }
  }
}

/* Non-finite fibres along a long middle axis, at lengths that split each
 * fibre differently between registers and shared memory on the CUDA line
 * tiles (300, 600, 1024, 1300 rows): NaN in the first tenth only, +inf at
 * 70%, -inf over the first half under values near -1000, an all -inf
 * fibre, two +inf entries, and halves 1050 apart; the other columns are
 * plain. */
static void softmax_midaxis_special(void) {
  static const int64_t lens[] = {1024, 300, 600, 1300};
  const int64_t inner = 64;
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
      const int64_t len = lens[l], dims[3] = {2, len, inner}, n = 2 * len * inner;
      double *x = tl_xmalloc((size_t)n * sizeof *x);
      tl_seed(450 + l);
      for (int64_t i = 0; i < n; i++) x[i] = 3 * tl_randn();
      for (int64_t o = 0; o < 2; o++) {
        double *f = x + o * len * inner;
        f[len / 10 * inner + 0] = NAN;
        f[len * 7 / 10 * inner + 1] = INFINITY;
        for (int64_t j = 0; j < len; j++) {
          f[j * inner + 2] = j < len / 2 ? -INFINITY : -1000 + tl_randn();
          f[j * inner + 3] = -INFINITY;
          f[j * inner + 5] = j < len / 2 ? 50 + tl_randn() : -1000 + tl_randn();
        }
        f[len / 100 * inner + 4] = INFINITY;
        f[len * 9 / 10 * inner + 4] = INFINITY;
      }
      midaxis_check(dt, x, dims);
    }
  }
}

/* Determinism on the context under test, on a tensor large enough to run
 * in parallel. */
static void softmax_determinism(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    int64_t dims[] = {16, 513, 9};
    int64_t n = 16 * 513 * 9;
    double *x = tl_xmalloc((size_t)n * sizeof *x);
    tl_seed(7);
    tl_fill_randn(x, n);
    bk_buffer *b = tl_buf(dt, x, n);
    for (int axis = 0; axis < 3; axis++) {
      bk_buffer *y = NULL, *y2 = NULL;
      if (TL_OK(bk_softmax(tl_ctx, b, dims, 3, axis, &y)) == BK_OK &&
          TL_OK(bk_softmax(tl_ctx, b, dims, 3, axis, &y2)) == BK_OK)
        TL_CHECK(tl_same_bits(y, y2), "softmax axis %d is not deterministic", axis);
      bk_buffer_release(y);
      bk_buffer_release(y2);
    }
    bk_buffer_release(b);
    free(x);
  }
}

/* Every strategy of the CUDA axis engine forced in turn (registers, one
 * tile per fibre, chunks folded by a second kernel, chunks in a cluster)
 * at the edges of its geometry: fibres of 2..17 rows around the register
 * limit, 63|64|65 rows around the segment rounding, flat tiles of whole
 * slabs (inner <= 256) and strips (257, 300), vector and scalar loads
 * (inner a multiple of the vector or not), a partial last strip, and more
 * rows than one tile holds (by size, 4100 x 64). Each fibre set holds a
 * tie, a -inf entry, an all -inf column, a NaN and a +inf entry. Each
 * result is checked against the float64 reference and run twice for the
 * same bits. On other devices the hook refuses and nothing runs. */
static void softmax_midaxis_forced(void) {
#ifdef BK_HAVE_CUDA
  static const int64_t shapes[][3] = {
      {3, 2, 4},    {2, 5, 7},    {4, 16, 8},   {3, 17, 12},  {2, 63, 3},   {2, 64, 100},
      {1, 65, 256}, {2, 130, 257}, {1, 300, 300}, {5, 33, 36},  {1, 4100, 64}, {3, 700, 2},
  };
  if (!bk__cuda_axis_force(tl_ctx, 0)) return;
  for (int strategy = 1; strategy <= 4; strategy++) {
    TL_CHECK(bk__cuda_axis_force(tl_ctx, strategy), "strategy %d refused", strategy);
    for (int d = 0; d < TL_DTYPES; d++) {
      bk_dtype dt = tl_dtypes[d];
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t *dims = shapes[s];
        const int64_t n = dims[0] * dims[1] * dims[2], len = dims[1], inner = dims[2];
        double *x = tl_xmalloc((size_t)n * sizeof *x);
        tl_seed(480 + s);
        for (int64_t i = 0; i < n; i++) x[i] = 4 * tl_randn();
        x[inner] = x[0];
        x[inner + 1] = -INFINITY;
        for (int64_t j = 0; j < len; j++) x[j * inner + inner - 1] = -INFINITY;
        x[n - 1] = NAN;
        x[n - 2] = INFINITY;
        midaxis_check(dt, x, dims);
      }
    }
  }
  TL_CHECK(bk__cuda_axis_force(tl_ctx, 0), "planner not restored");
#endif
}

/* Rank 16 (the maximum) with a non-trivial axis somewhere in the middle. */
static void softmax_max_rank(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    int64_t dims[16];
    for (int i = 0; i < 16; i++) dims[i] = 1;
    dims[3] = 2;
    dims[9] = 3;
    dims[15] = 2;
    const int64_t n = 12;
    double x[12], ref[12];
    tl_seed(9);
    tl_fill_randn(x, n);
    tl_round(dt, x, n);
    bk_buffer *b = tl_buf(dt, x, n);
    for (int axis = 0; axis < 16; axis++) {
      softmax_ref(x, ref, dims, 16, axis);
      bk_buffer *y = NULL;
      if (TL_OK(bk_softmax(tl_ctx, b, dims, 16, axis, &y)) == BK_OK)
        TL_BUF_CLOSE(y, ref, n, tl_tol_red(dt), 1.0);
      bk_buffer_release(y);
    }
    bk_buffer_release(b);
  }
}

/* ---- empty tensors --------------------------------------------------------------------------- */

static void softmax_empty(void) {
  for (int d = 0; d < TL_DTYPES; d++) {
    bk_dtype dt = tl_dtypes[d];
    bk_buffer *e = tl_buf(dt, NULL, 0), *y = NULL;
    static const struct {
      int rank, axis;
      int64_t dims[3];
    } cases[] = {{1, 0, {0}}, {2, 1, {0, 5}}, {2, 0, {0, 5}}, {3, 1, {3, 0, 2}}, {3, 2, {3, 2, 0}}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      y = NULL;
      if (TL_OK(bk_softmax(tl_ctx, e, cases[i].dims, cases[i].rank, cases[i].axis, &y)) == BK_OK)
        TL_BUF_EXACT(y, NULL, 0);
      bk_buffer_release(y);
    }
    bk_buffer_release(e);
  }
}

/* ---- rejections ---------------------------------------------------------------------------------- */

static void softmax_errors(void) {
  double x[6] = {0};
  int64_t dims[] = {2, 3};
  bk_buffer *b = tl_buf(BK_F32, x, 6), *y = (bk_buffer *)&y;
  TL_REJECT(bk_softmax(tl_ctx, b, dims, 2, 1, NULL), BK_ERR_NULL, "out");
  TL_REJECT(bk_softmax(tl_ctx, NULL, dims, 2, 1, &y), BK_ERR_NULL, "x");
  TL_CHECK(y == NULL, "out not cleared on failure");
  y = (bk_buffer *)&y;
  TL_REJECT(bk_softmax(tl_ctx, b, NULL, 2, 1, &y), BK_ERR_NULL, "dims");
  TL_CHECK(y == NULL, "out not cleared on failure");
  TL_REJECT(bk_softmax(tl_ctx, b, dims, 0, 0, &y), BK_ERR_INVALID_ARGUMENT, "rank = 0");
  TL_REJECT(bk_softmax(tl_ctx, b, dims, 17, 0, &y), BK_ERR_INVALID_ARGUMENT, "rank = 17");
  TL_REJECT(bk_softmax(tl_ctx, b, dims, -1, 0, &y), BK_ERR_INVALID_ARGUMENT, "rank");
  TL_REJECT(bk_softmax(tl_ctx, b, dims, 2, 2, &y), BK_ERR_INVALID_ARGUMENT, "axis = 2");
  TL_REJECT(bk_softmax(tl_ctx, b, dims, 2, -1, &y), BK_ERR_INVALID_ARGUMENT, "axis = -1");
  TL_REJECT(bk_softmax(tl_ctx, b, (int64_t[]){2, -3}, 2, 1, &y), BK_ERR_INVALID_ARGUMENT,
            "dims[1]");
  TL_REJECT(bk_softmax(tl_ctx, b, (int64_t[]){2, 4}, 2, 1, &y), BK_ERR_INVALID_ARGUMENT,
            "x has length 6, expected 8");
  TL_REJECT(bk_softmax(tl_ctx, b, (int64_t[]){INT64_MAX, 3}, 2, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "overflow");
  /* An empty tensor is still checked: its length must be 0. */
  TL_REJECT(bk_softmax(tl_ctx, b, (int64_t[]){0, 3}, 2, 0, &y), BK_ERR_INVALID_ARGUMENT,
            "x has length 6, expected 0");
  TL_CHECK(y == NULL, "out not cleared on failure");
  bk_context *other = tl_other_ctx();
  if (other) TL_REJECT(bk_softmax(other, b, dims, 2, 1, &y), BK_ERR_DEVICE_MISMATCH, "ctx");
  bk_buffer_release(b);
}

/* Every allocation the call makes fails in turn: each failure returns
 * BK_ERR_OUT_OF_MEMORY with out NULL and leaves no buffer behind. */
static void softmax_alloc_failures(void) {
  double x[6] = {1, 2, 3, 4, 5, 6};
  bk_buffer *b = tl_buf(BK_F64, x, 6);
  int64_t live = bk__live_buffers();
  for (int64_t at = 1; at < 10; at++) {
    bk_buffer *y = (bk_buffer *)&y;
    bk__inject_arm(at);
    bk_status st = bk_softmax(tl_ctx, b, (int64_t[]){2, 3}, 2, 1, &y);
    bk__inject_arm(0);
    if (st == BK_OK) {
      bk_buffer_release(y);
      break;
    }
    TL_CHECK(st == BK_ERR_OUT_OF_MEMORY && y == NULL, "allocation %" PRId64 ": status %d", at,
             (int)st);
    TL_CHECK(bk__live_buffers() == live, "allocation %" PRId64 ": a buffer leaked", at);
  }
  bk_buffer_release(b);
}

int main(void) {
  tl_init();
  TL_RUN(softmax_examples);
  TL_RUN(softmax_ieee);
  TL_RUN(softmax_random);
  TL_RUN(softmax_row_widths);
  TL_RUN(softmax_rows_forced);
  TL_RUN(softmax_special_fibres);
  TL_RUN(softmax_one_read);
  TL_RUN(softmax_midaxis_tiles);
  TL_RUN(softmax_midaxis_special);
  TL_RUN(softmax_determinism);
  TL_RUN(softmax_midaxis_forced);
  TL_RUN(softmax_max_rank);
  TL_RUN(softmax_empty);
  TL_RUN(softmax_errors);
  TL_RUN(softmax_alloc_failures);
  return tl_finish();
}
