/*
 * fuzz_frontdoor.c — libFuzzer harness over the front door of every
 * primitive on the CPU backend.
 *
 * The input bytes choose a primitive, dtypes, geometry (mostly small, at
 * times negative or huge), flags, axes, index arrays, NULL arguments and
 * buffer lengths (mostly the lengths the geometry implies, at times not).
 * Every call must return a status without crashing or leaking; when it
 * returns BK_OK every result's length must be the one the contract gives and
 * every out-parameter must be set, and when it fails every out-parameter
 * must be NULL. Inputs above 2^16 elements are never allocated: such
 * geometry is paired with short buffers, so it exercises the checks only.
 */
#include "bufkern.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ELEMS (1 << 16)

typedef struct reader {
  const uint8_t *p;
  size_t n;
} reader;

static uint8_t u8(reader *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}

/* A size: mostly 0..7, sometimes 8..63, rarely negative or huge. */
static int64_t size_of(reader *r) {
  uint8_t b = u8(r);
  switch (b >> 5) {
    case 0: case 1: case 2: case 3: return b & 7;
    case 4: case 5: return 8 + (b & 31);
    case 6: return (b & 1) ? -1 - (b & 3) : (int64_t)(b & 15) << 28;
    default: return (b & 1) ? INT64_MAX - (b & 7) : ((int64_t)1 << 62) + (b & 3);
  }
}

static int small_int(reader *r, int lo, int hi) {
  uint8_t b = u8(r);
  if ((b & 0xF0) == 0xF0) return (int)(int8_t)b; /* out of range on purpose */
  return lo + (int)(b % (uint8_t)(hi - lo + 1));
}

static double value(reader *r) {
  uint8_t b = u8(r);
  switch (b & 15) {
    case 0: return 0.0 / 0.0;
    case 1: return 1.0 / 0.0;
    case 2: return -1.0 / 0.0;
    case 3: return 0.0;
    case 4: return 1e30 * (b >> 4);
    default: return ((int)b - 128) / 16.0;
  }
}

/* Product of n sizes, or -1 when negative or above MAX_ELEMS. */
static int64_t prod(const int64_t *d, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) {
    if (d[i] < 0) return -1;
    if (d[i] == 0) p = 0;
  }
  if (p == 0) return 0;
  for (int i = 0; i < n; i++) {
    if (d[i] > MAX_ELEMS || p > MAX_ELEMS / d[i]) return -1;
    p *= d[i];
  }
  return p;
}

/* a * b, or -1 when either is negative or the product overflows. */
static int64_t mulc(int64_t a, int64_t b) {
  int64_t p;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &p)) return -1;
  return p;
}

typedef struct pool {
  bk_buffer *b[8];
  int n;
  bk_dtype dt;
} pool;

/* An input buffer of `want` elements (or a wrong length, or NULL, as the
 * bytes say). */
static bk_buffer *input(reader *r, pool *pl, int64_t want) {
  uint8_t mode = u8(r);
  if (mode == 0xFF) return NULL;
  int64_t len = want;
  if (want < 0 || want > MAX_ELEMS || (mode & 0xE0) == 0xE0) len = u8(r) % 17;
  bk_dtype dt = (mode & 0x1F) == 0x1F ? (pl->dt == BK_F32 ? BK_F64 : BK_F32) : pl->dt;
  double *v = malloc((size_t)(len ? len : 1) * sizeof *v);
  if (!v) return NULL;
  for (int64_t i = 0; i < len; i++) v[i] = value(r);
  bk_buffer *b = NULL;
  bk_status st;
  if (dt == BK_F32) {
    float *f = malloc((size_t)(len ? len : 1) * sizeof *f);
    for (int64_t i = 0; f && i < len; i++) f[i] = (float)v[i];
    st = f ? bk_buffer_from_host(NULL, dt, f, len, &b) : BK_ERR_OUT_OF_MEMORY;
    free(f);
  } else {
    st = bk_buffer_from_host(NULL, dt, v, len, &b);
  }
  free(v);
  if (st != BK_OK) return NULL;
  if (pl->n < 8) pl->b[pl->n++] = b;
  return b;
}

static void check_out(bk_status st, bk_buffer *o, int64_t want) {
  if (st == BK_OK) {
    if (!o) abort();
    if (want >= 0 && bk_buffer_length(o) != want) abort();
  } else if (o) {
    abort();
  }
  bk_buffer_release(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size};
  pool pl = {{0}, 0, (u8(&r) & 1) ? BK_F64 : BK_F32};
  int op = u8(&r) % 30;
  int64_t d[BK_MAX_RANK + 2], e[BK_MAX_RANK + 2], m[BK_MAX_RANK + 2];
  bk_buffer *o = (bk_buffer *)&o, *o2 = (bk_buffer *)&o, *o3 = (bk_buffer *)&o, *o4 = (bk_buffer *)&o;
  bk_status st;
  int64_t rows = size_of(&r), cols = size_of(&r), rc = prod((int64_t[]){rows, cols}, 2);
  switch (op) {
    case 0: { /* softmax */
      int rank = small_int(&r, 0, 5), axis = small_int(&r, 0, 4);
      int rk = rank < 0 ? 0 : rank > 16 ? 16 : rank;
      for (int i = 0; i < rk; i++) d[i] = size_of(&r);
      int64_t n = prod(d, rk);
      st = bk_softmax(NULL, input(&r, &pl, n), d, rank, axis, &o);
      check_out(st, o, n);
      break;
    }
    case 1:
      st = bk_xent_weighted_mean(NULL, input(&r, &pl, rc), input(&r, &pl, rc), rows, cols, &o);
      check_out(st, o, 1);
      break;
    case 2: {
      int g = small_int(&r, 0, 1);
      st = bk_xent_teacher(NULL, input(&r, &pl, rc), input(&r, &pl, rc), rows, cols, g, &o);
      check_out(st, o, g ? (rows == 0 || cols == 0 ? 0 : rc) : 1);
      break;
    }
    case 3: { /* conv */
      int sr = small_int(&r, 1, 3), extra = small_int(&r, 0, 2);
      int s = sr < 1 || sr > 3 ? 1 : sr, ex = extra < 0 || extra > 2 ? 0 : extra;
      int in_rank = ex + 1 + s;
      int64_t groups = small_int(&r, 1, 4), cin, cout;
      for (int i = 0; i < ex; i++) d[i] = size_of(&r) % 3;
      cin = d[ex] = groups * (1 + u8(&r) % 2);
      cout = groups * (1 + u8(&r) % 2);
      int64_t kd[5], st_[3], pb[3], pa[3], dil[3], outv = 1;
      int huge = 0;
      kd[0] = cout;
      kd[1] = cin;
      for (int a = 0; a < s; a++) {
        d[ex + 1 + a] = size_of(&r);
        kd[2 + a] = 1 + u8(&r) % 4;
        st_[a] = 1 + u8(&r) % 3;
        pb[a] = u8(&r) % 3;
        pa[a] = u8(&r) % 3;
        dil[a] = 1 + u8(&r) % 3;
        if (u8(&r) == 0xEE) kd[2 + a] = size_of(&r);
        /* Extents beyond MAX_ELEMS only reach the checks: no expected length. */
        if (d[ex + 1 + a] < 0 || d[ex + 1 + a] > MAX_ELEMS || kd[2 + a] <= 0 || kd[2 + a] > 64) {
          huge |= d[ex + 1 + a] > MAX_ELEMS;
          outv = 0;
          continue;
        }
        int64_t padded = d[ex + 1 + a] + pb[a] + pa[a], eff = (kd[2 + a] - 1) * dil[a] + 1;
        outv = mulc(outv, padded < eff ? 0 : (padded - eff) / st_[a] + 1);
      }
      int64_t nb = prod(d, ex);
      int64_t want = outv <= 0 ? -1 : mulc(mulc(nb, cout), outv);
      /* An empty input with a huge extent elsewhere is a valid call with a
       * huge zero or bias output: keep results small. */
      if (want > MAX_ELEMS || (huge && prod(d, in_rank) == 0)) break;
      bk_buffer *x = input(&r, &pl, prod(d, in_rank)), *w = input(&r, &pl, prod(kd, s + 2));
      bk_buffer *bias = (u8(&r) & 1) ? input(&r, &pl, cout) : NULL;
      st = bk_conv(NULL, x, w, bias, d, in_rank, kd, sr, st_, pb, pa, dil, groups, &o);
      check_out(st, o, want > MAX_ELEMS ? -1 : want);
      break;
    }
    case 4: case 5:
      /* A valid call can return rows zeros for an empty input: keep that small. */
      if (cols == 0 && rows > MAX_ELEMS) break;
      if (op == 5) {
        st = bk_rows_max(NULL, input(&r, &pl, rc), rows, cols, &o);
        check_out(st, o, rows);
        break;
      }
      st = bk_rows_sum(NULL, input(&r, &pl, rc), rows, cols, &o); check_out(st, o, rows); break;
    case 6:
      st = bk_rows_first_max_mask(NULL, input(&r, &pl, rc), rows, cols, &o);
      check_out(st, o, rc);
      break;
    case 7:
      st = bk_rows_topk_mask(NULL, input(&r, &pl, rc), rows, cols, size_of(&r), &o);
      check_out(st, o, rc);
      break;
    case 8:
      st = bk_rows_masked_softmax(NULL, input(&r, &pl, rc), input(&r, &pl, rc), rows, cols, &o);
      check_out(st, o, rc);
      break;
    case 9:
      st = bk_vec_concat(NULL, input(&r, &pl, rows), input(&r, &pl, cols), rows, cols, &o);
      check_out(st, o, rows >= 0 && cols >= 0 && rows <= INT64_MAX - cols ? rows + cols : -1);
      break;
    case 10: {
      int64_t start = size_of(&r), len = size_of(&r);
      st = bk_vec_slice(NULL, input(&r, &pl, rows), rows, start, len, &o);
      check_out(st, o, len);
      break;
    }
    case 11:
      if (mulc(rows, cols) > MAX_ELEMS) break;
      st = bk_broadcast_col(NULL, input(&r, &pl, rows), rows, cols, &o);
      check_out(st, o, rc);
      break;
    case 12: case 13: { /* broadcast_to and its adjoint */
      int ir = small_int(&r, 0, 4), orank = small_int(&r, 0, 5);
      int irk = ir < 0 ? 0 : ir > 16 ? 16 : ir, ork = orank < 0 ? 0 : orank > 16 ? 16 : orank;
      for (int i = 0; i < irk; i++) d[i] = size_of(&r) % 4;
      for (int j = 0; j < ork; j++) {
        e[j] = size_of(&r) % 5;
        m[j] = small_int(&r, 0, irk);
      }
      int64_t nin = prod(d, irk), nout = prod(e, ork);
      if (op == 12) {
        st = bk_broadcast_to(NULL, input(&r, &pl, nin), d, ir, e, orank, m, &o);
        check_out(st, o, nout);
      } else {
        st = bk_broadcast_to_adjoint(NULL, input(&r, &pl, nout), d, ir, e, orank, m, &o);
        check_out(st, o, nin);
      }
      break;
    }
    case 14: case 15: {
      int rank = small_int(&r, 0, 5), ax = small_int(&r, -1, 4);
      int rk = rank < 0 ? 0 : rank > 16 ? 16 : rank;
      for (int i = 0; i < rk; i++) d[i] = size_of(&r) % 6;
      int64_t n = prod(d, rk);
      if (op == 14) {
        st = bk_swap_adjacent(NULL, input(&r, &pl, n), d, rank, ax, &o);
        check_out(st, o, n);
      } else {
        st = bk_sum_axis(NULL, input(&r, &pl, n), d, rank, ax, &o);
        int64_t want = -1;
        if (rank == 0) want = 1;
        else if (ax >= 0 && ax < rk && n >= 0) {
          int64_t rest = 1;
          for (int i = 0; i < rk; i++) if (i != ax) rest *= d[i];
          want = rest;
        }
        check_out(st, o, want);
      }
      break;
    }
    case 16: {
      double eps = (u8(&r) & 1) ? 1e-5 : value(&r);
      st = bk_layernorm_forward(NULL, input(&r, &pl, rc), input(&r, &pl, cols), input(&r, &pl, cols),
                                rows, cols, eps, &o, &o2, &o3);
      if (st == BK_OK && (bk_buffer_length(o) != rc || bk_buffer_length(o2) != rc ||
                          bk_buffer_length(o3) != rows)) abort();
      if (st != BK_OK && (o || o2 || o3)) abort();
      bk_buffer_release(o); bk_buffer_release(o2); bk_buffer_release(o3);
      break;
    }
    case 17:
      if (rows == 0 && cols > MAX_ELEMS) break;
      st = bk_layernorm_backward(NULL, input(&r, &pl, rc), input(&r, &pl, rc), input(&r, &pl, rows),
                                 input(&r, &pl, cols), rows, cols, &o, &o2, &o3);
      if (st == BK_OK && (bk_buffer_length(o) != rc || bk_buffer_length(o2) != cols ||
                          bk_buffer_length(o3) != cols)) abort();
      if (st != BK_OK && (o || o2 || o3)) abort();
      bk_buffer_release(o); bk_buffer_release(o2); bk_buffer_release(o3);
      break;
    case 18: case 19: {
      int64_t b = size_of(&r) % 4, n = size_of(&r);
      int ta = small_int(&r, 0, 1), tb = small_int(&r, 0, 1);
      int64_t la = prod((int64_t[]){b, rows, n}, 3), lb = prod((int64_t[]){b, n, cols}, 3);
      int64_t want = mulc(mulc(b, rows), cols);
      if (want > MAX_ELEMS) break;
      if (op == 18) {
        st = bk_bmm(NULL, input(&r, &pl, la), input(&r, &pl, lb), b, rows, n, cols, ta, tb, &o);
      } else {
        int flag = 7;
        double scale = (u8(&r) & 1) ? 0.5 : value(&r);
        st = bk_bmm_scaled(NULL, input(&r, &pl, la), input(&r, &pl, lb), b, rows, n, cols, ta, tb,
                           scale, &o, (u8(&r) == 0xAB) ? NULL : &flag);
        if (st == BK_OK && flag != 0 && flag != 1) abort();
      }
      check_out(st, o, want);
      break;
    }
    case 20: case 21: case 22: {
      int64_t half = cols >= 0 && cols <= MAX_ELEMS ? cols / 2 + 1 : -1;
      int64_t spec = half < 0 ? -1 : prod((int64_t[]){rows, half, 2}, 3);
      if (op == 20) {
        st = bk_rfft(NULL, input(&r, &pl, rc), rows, cols, &o);
        check_out(st, o, spec);
      } else if (op == 21) {
        st = bk_irfft(NULL, input(&r, &pl, spec), rows, cols, &o);
        check_out(st, o, rc);
      } else {
        st = bk_irfft_unnormalized(NULL, input(&r, &pl, spec), rows, cols, &o);
        check_out(st, o, rc);
      }
      break;
    }
    case 23: case 24: case 25: case 26: { /* scans: rows = seq_len, cols = state */
      int var = op >= 25;
      if (cols > MAX_ELEMS) break; /* dh0 is `state` zeros even when all else is empty */
      int64_t la = var ? rc : cols;
      bk_buffer *A = input(&r, &pl, la), *B = input(&r, &pl, la), *X = input(&r, &pl, rc),
                *h0 = input(&r, &pl, cols);
      if (op == 23 || op == 25) {
        st = var ? bk_scan_diag_var(NULL, A, B, X, h0, rows, cols, &o)
                 : bk_scan_diag(NULL, A, B, X, h0, rows, cols, &o);
        check_out(st, o, rows == 0 || cols == 0 ? 0 : rc);
      } else {
        bk_buffer *out = input(&r, &pl, rc), *dy = input(&r, &pl, rc);
        st = var ? bk_scan_diag_var_backward(NULL, A, B, X, h0, out, dy, rows, cols, &o, &o2, &o3, &o4)
                 : bk_scan_diag_backward(NULL, A, B, X, h0, out, dy, rows, cols, &o, &o2, &o3, &o4);
        if (st == BK_OK) {
          int64_t empty = rows == 0 || cols == 0;
          int64_t wa = var ? (empty ? 0 : rc) : cols;
          if (bk_buffer_length(o) != wa || bk_buffer_length(o2) != wa ||
              bk_buffer_length(o3) != (empty ? 0 : rc) || bk_buffer_length(o4) != cols) abort();
        } else if (o || o2 || o3 || o4) {
          abort();
        }
        bk_buffer_release(o); bk_buffer_release(o2); bk_buffer_release(o3); bk_buffer_release(o4);
      }
      break;
    }
    default: { /* gather and scatter-add */
      int64_t k = size_of(&r);
      uint64_t idx[16];
      int kn = k >= 0 && k <= 16 ? (int)k : 16;
      for (int i = 0; i < kn; i++) {
        uint8_t b = u8(&r);
        idx[i] = b == 0xFF ? (uint64_t)1 << 32 : b == 0xFE ? UINT64_MAX : (uint64_t)(b % 9);
      }
      const uint64_t *ip = (u8(&r) == 0x77) ? NULL : idx;
      int64_t kc = prod((int64_t[]){k, cols}, 2);
      if (k > 16) kc = -1; /* the index array holds 16: keep the call invalid */
      if (mulc(k > 16 ? 16 : k, cols) > MAX_ELEMS) break;
      if (op == 27) {
        st = bk_rows_gather(NULL, input(&r, &pl, rc), rows, cols, ip, k > 16 ? 16 : k, &o);
        check_out(st, o, kc);
      } else {
        st = bk_rows_scatter_add(NULL, input(&r, &pl, rc), input(&r, &pl, kc), rows, cols, ip,
                                 k > 16 ? 16 : k, &o);
        check_out(st, o, rc);
      }
      break;
    }
  }
  for (int i = 0; i < pl.n; i++) bk_buffer_release(pl.b[i]);
  return 0;
}
