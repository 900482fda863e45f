/*
 * topk.cu — bk_rows_topk_mask on the GPU (exact compare-and-count semantics,
 * include/bufkern.h): entry i of a row is kept iff fewer than k entries beat
 * it, where j beats i when x_j > x_i, or when neither is greater and j < i.
 * The front door passes only 0 < k < cols.
 *
 * Three kernels, chosen by topk_plan() from the row's geometry:
 *  - lane groups (k <= 8, rows of exactly 2, 4, 8 or 16 lanes' worth of four
 *    16-byte vectors, 16-byte aligned): the row in registers, each lane's
 *    best k pairs merged by shuffles;
 *  - small rows (k <= 8, R rows of a block staged in shared memory within a
 *    static budget): a thread keeps its row's best k pairs;
 *  - any other row: a warp (rows of at most 1024 entries) or a block per
 *    row selects the k-th best number by radix select (topk_select_kernel).
 * Without NaN, "j beats i" is the strict total order (value descending,
 * index ascending), so entry i is kept iff it is not after the k-th best
 * pair; a row holding NaN is counted literally.
 */
#include "cuda_internal.h"

#include "../core/hooks.h"

#include <stdint.h>

static constexpr unsigned RW_FULL_MASK = 0xffffffffu;

template <typename T> struct rw_traits;
template <> struct rw_traits<float> {
  static constexpr int vec = 4;
};
template <> struct rw_traits<double> {
  static constexpr int vec = 2;
};

/* ---- kernels ----------------------------------------------------------------------------- */


/* Entry i of a row is kept iff fewer than k entries beat it; j beats i when
 * x_j > x_i, or neither is greater and j < i. Counted literally. */
template <typename T>
static __device__ __forceinline__ bool rw_topk_literal(const T *row, int cols, int i, int k) {
  const T xi = row[i];
  int cnt = 0;
  for (int j = 0; j < cols && cnt < k; ++j) {
    const T xj = row[j];
    cnt += (xj > xi || (!(xi > xj) && !(xj > xi) && j < i)) ? 1 : 0;
  }
  return cnt < k;
}

/*
 * Small rows, k == K <= 8: a block stages R = blockDim rows (rows r0 ..
 * r0+R-1, contiguous in memory) in shared memory with an odd row stride (no
 * bank conflicts when each thread walks its own row), thread t finds the
 * K-th best pair of row t, then the block writes the mask coalesced.
 * Dynamic shared memory: R*stride elements, R thresholds, R indices, R flags.
 */
template <typename T, int K>
static __global__ void __launch_bounds__(128)
    topk_small_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int cols,
                      int stride) {
  extern __shared__ __align__(16) unsigned char rw_topk_smem[];
  const int R = (int)blockDim.x, t = (int)threadIdx.x;
  T *tile = reinterpret_cast<T *>(rw_topk_smem);
  T *thr_v = tile + (size_t)R * stride;
  int *thr_i = reinterpret_cast<int *>(thr_v + R);
  int *has_nan = thr_i + R;
  const int dr = R / cols, dc = R % cols; /* flat step R as (rows, cols) */
  const int64_t units = (rows + R - 1) / R;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const int64_t r0 = u * R;
    const int nr = rows - r0 < R ? (int)(rows - r0) : R;
    const int total = nr * cols;
    const T *xb = x + r0 * cols;
    T *yb = y + r0 * cols;

    {
      int rr = t / cols, cc = t % cols;
#pragma unroll 4
      for (int f = t; f < total; f += R) {
        tile[rr * stride + cc] = xb[f];
        rr += dr;
        cc += dc;
        if (cc >= cols) {
          cc -= cols;
          ++rr;
        }
      }
    }
    __syncthreads();

    if (t < nr) {
      const T *row = tile + t * stride;
      T lv[K];
      int li[K];
      int filled = 0;
      bool nan = false;
      for (int c = 0; c < cols; ++c) {
        const T v = row[c];
        if (v != v) {
          nan = true;
          break;
        }
        if (filled < K || v > lv[K - 1]) {
          /* Sorted by value descending, equal values in index order: v goes
           * after every kept value >= v. */
          int p = 0;
#pragma unroll
          for (int s = 0; s < K; ++s) p += (s < filled && lv[s] >= v) ? 1 : 0;
#pragma unroll
          for (int s = K - 1; s > 0; --s) {
            if (s > p) {
              lv[s] = lv[s - 1];
              li[s] = li[s - 1];
            } else if (s == p) {
              lv[s] = v;
              li[s] = c;
            }
          }
          if (p == 0) {
            lv[0] = v;
            li[0] = c;
          }
          if (filled < K) ++filled;
        }
      }
      has_nan[t] = nan ? 1 : 0;
      if (!nan) {
        thr_v[t] = lv[K - 1];
        thr_i[t] = li[K - 1];
      }
    }
    __syncthreads();

    {
      int rr = t / cols, cc = t % cols;
      for (int f = t; f < total; f += R) {
        const T *row = tile + rr * stride;
        bool keep;
        if (has_nan[rr]) {
          keep = rw_topk_literal(row, cols, cc, K);
        } else {
          const T v = row[cc], tv = thr_v[rr];
          keep = v > tv || (v == tv && cc <= thr_i[rr]);
        }
        __stcs(yb + f, keep ? (T)1 : (T)0);
        rr += dr;
        cc += dc;
        if (cc >= cols) {
          cc -= cols;
          ++rr;
        }
      }
    }
    __syncthreads(); /* the tile is reloaded by the next unit */
  }
}

/*
 * Top-k in lane groups, 0 < k <= 8 and rows of exactly G*NV vectors (NV = 4
 * 16-byte vectors per lane, G in {2, 4, 8, 16} lanes per row): a warp holds
 * 32/G rows in registers. Without NaN the relation "j beats i" is the strict
 * total order (value descending, index ascending), so each lane sorts its
 * values in chunks of KP (k rounded up to a power of two) with bitonic
 * networks and keeps its best KP pairs; the G lanes of a row then merge their
 * lists by xor shuffles (the better of a[s] and b[KP-1-s] is a bitonic
 * sequence holding the best KP of both lists, which a half-cleaner cascade
 * sorts). Every lane of the group ends with the same list, whose k-th pair is
 * the threshold: an entry is kept iff it is that pair or precedes it. A row
 * holding a NaN is counted literally from memory by its own lanes instead.
 */
template <typename T>
static __device__ __forceinline__ bool rw_before(T av, int ai, T bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

/* Leaves the earlier (in the order) of the two pairs in (av, ai). */
template <typename T>
static __device__ __forceinline__ void rw_cswap(T &av, int &ai, T &bv, int &bi) {
  const bool sw = rw_before(bv, bi, av, ai);
  const T lv = sw ? bv : av, hv = sw ? av : bv;
  const int li = sw ? bi : ai, hi = sw ? ai : bi;
  av = lv;
  ai = li;
  bv = hv;
  bi = hi;
}

/* Sorts KP (a power of two) arbitrary pairs into the order (bitonic sort). */
template <typename T, int KP>
static __device__ __forceinline__ void rw_bitonic_sort(T *v, int *ix) {
#pragma unroll
  for (int ls = 1; (1 << ls) <= KP; ++ls) {
    const int size = 1 << ls;
#pragma unroll
    for (int ld = ls - 1; ld >= 0; --ld) {
      const int d = 1 << ld;
#pragma unroll
      for (int s = 0; s < KP; ++s) {
        if ((s & d) == 0) {
          if ((s & size) == 0)
            rw_cswap(v[s], ix[s], v[s + d], ix[s + d]);
          else
            rw_cswap(v[s + d], ix[s + d], v[s], ix[s]);
        }
      }
    }
  }
}

/* Sorts a bitonic sequence of KP pairs into the order (half cleaners). */
template <typename T, int KP>
static __device__ __forceinline__ void rw_bitonic_clean(T *v, int *ix) {
#pragma unroll
  for (int ld = 3; ld >= 0; --ld) {
    const int d = 1 << ld;
    if (d >= KP) continue;
#pragma unroll
    for (int s = 0; s < KP; ++s)
      if ((s & d) == 0) rw_cswap(v[s], ix[s], v[s + d], ix[s + d]);
  }
}

/* (v, ix) sorted, (bv, bix) sorted: (v, ix) becomes the sorted best KP of both. */
template <typename T, int KP>
static __device__ __forceinline__ void rw_merge_best(T *v, int *ix, const T *bv, const int *bix) {
#pragma unroll
  for (int s = 0; s < KP; ++s) {
    const bool take = rw_before(bv[KP - 1 - s], bix[KP - 1 - s], v[s], ix[s]);
    v[s] = take ? bv[KP - 1 - s] : v[s];
    ix[s] = take ? bix[KP - 1 - s] : ix[s];
  }
  rw_bitonic_clean<T, KP>(v, ix);
}

template <typename T, int K, int G>
static __global__ void __launch_bounds__(256, sizeof(T) == 4 && K <= 4 ? 4 : 0)
    topk_group_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int cols) {
  constexpr int VEC = rw_traits<T>::vec, NV = 4, NVAL = NV * VEC, RPW = 32 / G;
  constexpr int KP = K <= 1 ? 1 : K <= 2 ? 2 : K <= 4 ? 4 : 8;
  static_assert(NVAL % KP == 0, "a lane holds whole chunks");
  const int lane = (int)(threadIdx.x & 31u), q = lane % G;
  const unsigned gmask = (G == 32 ? RW_FULL_MASK : ((1u << G) - 1u)) << (lane - q);
  const int64_t units = (rows + RPW - 1) / RPW;
  const int64_t wpb = (int64_t)(blockDim.x >> 5);
  const int64_t nwarps = (int64_t)gridDim.x * wpb;
  for (int64_t u = (int64_t)blockIdx.x * wpb + (int64_t)(threadIdx.x >> 5); u < units;
       u += nwarps) {
    /* u is uniform across the warp, so every lane reaches every shuffle. */
    const int64_t r = u * RPW + lane / G;
    const bool valid = r < rows;
    const T *xr = x + (valid ? r : 0) * (int64_t)cols;
    T val[NVAL];
#pragma unroll
    for (int n = 0; n < NV; ++n) {
      if (valid) {
        bk_vload<VEC>(xr + (int64_t)(q + G * n) * VEC, val + n * VEC);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) val[n * VEC + e] = (T)0;
      }
    }
    bool lane_nan = false;
#pragma unroll
    for (int e = 0; e < NVAL; ++e) lane_nan = lane_nan || (val[e] != val[e]);
    const bool nan = (__ballot_sync(RW_FULL_MASK, lane_nan) & gmask) != 0u;

    /* The lane's best KP pairs. float32: its first KP values sorted, then
     * each later value inserted in turn (fewer instructions than sorting
     * chunks, which float64 keeps: its lanes hold half as many values). A
     * lane's columns increase with e, so a later value precedes a kept pair
     * exactly when it is strictly greater, and the kept values are
     * non-increasing: the tests c[s] are monotone in s (no NaN; a row with
     * NaN is counted literally below). */
    T bv[KP];
    int bi[KP];
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int s = 0; s < KP; ++s) {
        bv[s] = val[s];
        bi[s] = (q + G * (s / VEC)) * VEC + s % VEC;
      }
      rw_bitonic_sort<T, KP>(bv, bi);
#pragma unroll
      for (int e = KP; e < NVAL; ++e) {
        const T v = val[e];
        const int j = (q + G * (e / VEC)) * VEC + e % VEC;
        bool c[KP];
#pragma unroll
        for (int s = 0; s < KP; ++s) c[s] = v > bv[s];
#pragma unroll
        for (int s = KP - 1; s > 0; --s) {
          bv[s] = c[s - 1] ? bv[s - 1] : (c[s] ? v : bv[s]);
          bi[s] = c[s - 1] ? bi[s - 1] : (c[s] ? j : bi[s]);
        }
        bv[0] = c[0] ? v : bv[0];
        bi[0] = c[0] ? j : bi[0];
      }
    } else {
      /* float64: chunks of KP sorted, each merged into the list. */
#pragma unroll
      for (int c = 0; c < NVAL / KP; ++c) {
        T cv[KP];
        int ci[KP];
#pragma unroll
        for (int s = 0; s < KP; ++s) {
          const int e = c * KP + s;
          cv[s] = val[e];
          ci[s] = (q + G * (e / VEC)) * VEC + e % VEC;
        }
        rw_bitonic_sort<T, KP>(cv, ci);
        if (c == 0) {
#pragma unroll
          for (int s = 0; s < KP; ++s) {
            bv[s] = cv[s];
            bi[s] = ci[s];
          }
        } else {
          rw_merge_best<T, KP>(bv, bi, cv, ci);
        }
      }
    }
    /* Merge the G lanes' lists of the row (offsets stay inside the group). */
#pragma unroll
    for (int lo = 0; lo < 5; ++lo) {
      const int o = 1 << lo;
      if (o >= G) break;
      T ov[KP];
      int oi[KP];
#pragma unroll
      for (int s = 0; s < KP; ++s) {
        ov[s] = __shfl_xor_sync(RW_FULL_MASK, bv[s], o);
        oi[s] = __shfl_xor_sync(RW_FULL_MASK, bi[s], o);
      }
      rw_merge_best<T, KP>(bv, bi, ov, oi);
    }
    const T tv = bv[K - 1];
    const int ti = bi[K - 1];

    if (valid) {
      T out[NVAL];
      if (!nan) {
#pragma unroll
        for (int e = 0; e < NVAL; ++e) {
          const int col = (q + G * (e / VEC)) * VEC + e % VEC;
          out[e] = (val[e] > tv || (val[e] == tv && col <= ti)) ? (T)1 : (T)0;
        }
      } else {
        int cnt[NVAL];
#pragma unroll
        for (int e = 0; e < NVAL; ++e) cnt[e] = 0;
        for (int j = 0; j < cols; ++j) {
          const T xj = xr[j];
#pragma unroll
          for (int e = 0; e < NVAL; ++e) {
            const T xi = val[e];
            const int col = (q + G * (e / VEC)) * VEC + e % VEC;
            cnt[e] += (xj > xi || (!(xi > xj) && !(xj > xi) && j < col)) ? 1 : 0;
          }
        }
#pragma unroll
        for (int e = 0; e < NVAL; ++e) out[e] = cnt[e] < K ? (T)1 : (T)0;
      }
      T *yr = y + r * (int64_t)cols;
#pragma unroll
      for (int n = 0; n < NV; ++n) bk_vstore_cs<VEC>(yr + (int64_t)(q + G * n) * VEC, out + n * VEC);
    }
  }
}

/*
 * Any other shape: a group of threads per row (a warp for rows of at most
 * 1024 entries, eight rows to a block, else the whole block) selects the
 * k-th best number by radix select, then writes the mask in one more pass.
 *
 * Keys. A number's key is an unsigned integer whose order is the numbers'
 * order (the sign bit flipped for positives, every bit for negatives; -0 is
 * read as +0, so the two tie). NaN has no key: it takes no part in the
 * selection.
 *
 * Selection. The key of the k-th best number, V, is found a digit of dbits
 * bits at a time from the top: a histogram of the current digit over the
 * numbers whose higher digits match the prefix found so far, then the digit
 * at which the count from the top reaches the remaining rank (one warp
 * searches the bins). After the last digit, the numbers above V are kept and
 * so are the first `need` of those equal to V in index order (the lower
 * index wins a tie). Counts are exact integers, so the result does not
 * depend on the order in which the histogram's atomic additions land. Two
 * histograms alternate, so that one is cleared while the other fills: two
 * barriers per digit.
 *
 * Rows whose keys fit the shared-memory budget are read from memory once:
 * the first pass stages the keys, later passes and the mask read them back.
 * Longer rows, and any row holding a NaN, read the row again (from L2) in
 * each pass.
 *
 * NaN. Without NaN the entries beating entry i are exactly the numbers
 * before it in the order (key descending, index ascending), so the k best
 * are kept. A NaN at j ties with everything and so beats every later entry:
 * a NaN at i is kept iff i < k, and a number is kept only if it is among the
 * k best numbers (the others already have k beaters) and its literal count
 * of beaters, taken from memory with an early stop at k, is below k.
 */
template <typename T> struct tk_key;
template <> struct tk_key<float> {
  using U = unsigned int;
  static constexpr int bits = 32;
  static __device__ __forceinline__ U of(float v) {
    const U b = __float_as_uint(v == 0.0f ? 0.0f : v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  }
};
template <> struct tk_key<double> {
  using U = unsigned long long;
  static constexpr int bits = 64;
  static __device__ __forceinline__ U of(double v) {
    const U b = (U)__double_as_longlong(v == 0.0 ? 0.0 : v);
    return (b >> 63) ? ~b : (b | (1ull << 63));
  }
};

/* The threads working on one row: a warp (W) or the whole block. */
template <bool W> struct tk_group {
  static __device__ __forceinline__ int size() { return W ? 32 : (int)blockDim.x; }
  static __device__ __forceinline__ int rank() {
    return W ? (int)(threadIdx.x & 31u) : (int)threadIdx.x;
  }
  static __device__ __forceinline__ void sync() {
    if (W)
      __syncwarp();
    else
      __syncthreads();
  }
};

/* Inclusive prefix sum over the warp in lane order. */
template <typename C> static __device__ __forceinline__ C tk_warp_scan(C v) {
  const int lane = (int)(threadIdx.x & 31u);
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const C n = __shfl_up_sync(RW_FULL_MASK, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

/* Exclusive prefix sum of v over the group in rank order; *total gets the
 * group's sum. ws (33 counts) is the group's scratch. Every thread of the
 * group calls it. */
template <bool W, typename C> static __device__ C tk_scan(C v, C *ws, C *total) {
  const C s = tk_warp_scan(v);
  if (W) {
    *total = __shfl_sync(RW_FULL_MASK, s, 31);
    return s - v;
  }
  const int lane = (int)(threadIdx.x & 31u), w = (int)(threadIdx.x >> 5);
  const int nw = (int)(blockDim.x >> 5);
  if (lane == 31) ws[w] = s;
  __syncthreads();
  if (w == 0) {
    const C t = tk_warp_scan(lane < nw ? ws[lane] : (C)0);
    __syncwarp();
    if (lane < nw) ws[lane] = t;
    if (lane == nw - 1) ws[32] = t;
  }
  __syncthreads();
  const C ex = s - v + (w > 0 ? ws[w - 1] : (C)0);
  *total = ws[32];
  __syncthreads(); /* ws is free again */
  return ex;
}

/* Adds one to hist[d] for each active lane. A warp whose active lanes all
 * hold one digit (a run of equal keys) adds their count at once instead of
 * queueing that many atomics on one address. */
template <typename C>
static __device__ __forceinline__ void tk_hist_add(C *hist, unsigned d, bool active) {
  const unsigned am = __ballot_sync(RW_FULL_MASK, active);
  if (am == 0u) return;
  const int first = __ffs(am) - 1;
  const unsigned d0 = __shfl_sync(RW_FULL_MASK, d, first);
  if (__all_sync(RW_FULL_MASK, !active || d == d0)) {
    if ((int)(threadIdx.x & 31u) == first) atomicAdd(&hist[d0], (C)__popc(am));
  } else if (active) {
    atomicAdd(&hist[d], (C)1);
  }
}

/* One warp: the bin b of hist (nb >= 32 bins) at which the count from the
 * top reaches need (1 <= need <= the histogram's total). misc[0] = b,
 * misc[1] = the count above b, misc[2] = the count at b. Lane l owns the nb
 * / 32 bins below nb - l * nb / 32, summed in a rotated order so that the
 * lanes read different banks. */
template <typename C> static __device__ void tk_search(const C *hist, int nb, C need, C *misc) {
  const int lane = (int)(threadIdx.x & 31u), per = nb >> 5;
  const int hi = nb - lane * per;
  C mine = 0;
  for (int j = 0; j < per; ++j) mine += hist[hi - 1 - ((j + lane) & (per - 1))];
  const C incl = tk_warp_scan(mine);
  C acc = incl - mine;
  if (acc < need && incl >= need) {
    for (int b = hi - 1;; --b) {
      if (acc + hist[b] >= need) {
        misc[0] = (C)b;
        misc[1] = acc;
        misc[2] = hist[b];
        break;
      }
      acc += hist[b];
    }
  }
}

/* Where a group's staged keys start in its shared memory: after two
 * histograms of nb counts, 33 scan words and four words (the digit found,
 * the counts above and at it, the NaN count), rounded up to 16 bytes. */
static __host__ __device__ __forceinline__ size_t tk_keys_offset(int nb, size_t count_bytes) {
  return ((size_t)(2 * nb + 33 + 4) * count_bytes + 15) & ~(size_t)15;
}

/* A group's shared memory, with `staged` keys of key_bytes each, rounded up
 * to 16 bytes. */
static __host__ __device__ __forceinline__ size_t tk_group_bytes(int nb, size_t count_bytes,
                                                                  size_t key_bytes,
                                                                  int64_t staged) {
  return (tk_keys_offset(nb, count_bytes) + (size_t)staged * key_bytes + 15) & ~(size_t)15;
}

template <typename T, typename C, bool W>
static __global__ void __launch_bounds__(1024)
    topk_select_kernel(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int64_t cols,
                       int64_t k, int dbits, int staged) {
  using K = tk_key<T>;
  using U = typename K::U;
  using G = tk_group<W>;
  extern __shared__ __align__(16) unsigned char tk_smem[];
  const int nb = 1 << dbits;
  const int wid = (int)(threadIdx.x >> 5);
  unsigned char *base =
      tk_smem + (W ? (size_t)wid * tk_group_bytes(nb, sizeof(C), sizeof(U), staged ? cols : 0) : 0);
  C *hist = reinterpret_cast<C *>(base); /* two histograms of nb counts */
  C *ws = hist + 2 * nb;                 /* 33 scan words */
  C *misc = ws + 33;                     /* digit, count above, count at, NaNs */
  U *keys = reinterpret_cast<U *>(base + tk_keys_offset(nb, sizeof(C)));
  const int64_t gs = G::size(), gt = G::rank();
  const int64_t gpb = W ? (int64_t)(blockDim.x >> 5) : 1;
  const int64_t first = W ? (int64_t)blockIdx.x * gpb + wid : (int64_t)blockIdx.x;
  const bool searcher = W || threadIdx.x < 32;
  const int top_shift = K::bits - dbits;
  for (int64_t b = gt; b < 2 * nb; b += gs) hist[b] = 0;
  if (gt < 4) misc[gt] = 0;
  G::sync();
  for (int64_t r = first; r < rows; r += (int64_t)gridDim.x * gpb) {
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    /* Pass 1: load, stage, histogram of the top digit, count the NaNs. */
    C nans = 0;
    for (int64_t i0 = 0; i0 < cols; i0 += 4 * gs) {
      T v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t i = i0 + u * gs + gt;
        v[u] = i < cols ? xr[i] : (T)0;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t i = i0 + u * gs + gt;
        const bool num = i < cols && v[u] == v[u];
        nans += (i < cols && !num) ? 1 : 0;
        const U key = K::of(v[u]);
        if (staged && i < cols) keys[i] = key;
        tk_hist_add(hist, (unsigned)(key >> top_shift), num);
      }
    }
    if (nans) atomicAdd(&misc[3], nans);
    G::sync();
    const C nan_total = misc[3];
    G::sync(); /* every thread has read the NaN count */
    if (gt == 0) misc[3] = 0;
    const bool from_smem = staged && nan_total == 0;
    const bool all_numbers = (C)cols - nan_total <= (C)k;
    /* The k-th best number's key V, digit by digit (none when every number
     * is kept). */
    U prefix = 0;
    C need = (C)k, eq_count = 0;
    int shift = top_shift, width = dbits, p = 0;
    while (!all_numbers) {
      C *cur = hist + (p & 1) * nb;
      if (searcher) tk_search(cur, nb, need, misc);
      G::sync();
      need -= misc[1];
      eq_count = misc[2];
      prefix = (prefix << width) | (U)misc[0];
      if (shift == 0) break;
      /* The next digit into the other histogram, over the numbers matching
       * the prefix; this one is cleared for the digit after. */
      C *next = hist + ((p + 1) & 1) * nb;
      const int ps = shift;
      width = shift < dbits ? shift : dbits;
      shift -= width;
      const unsigned dmask = (1u << width) - 1u;
      for (int64_t b = gt; b < nb; b += gs) cur[b] = 0;
      for (int64_t i0 = 0; i0 < cols; i0 += 4 * gs) {
        U kk[4];
        bool num[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int64_t i = i0 + u * gs + gt;
          if (from_smem) {
            num[u] = i < cols;
            kk[u] = num[u] ? keys[i] : 0;
          } else {
            const T v = i < cols ? xr[i] : (T)0;
            num[u] = i < cols && v == v;
            kk[u] = K::of(v);
          }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
          tk_hist_add(next, (unsigned)(kk[u] >> shift) & dmask,
                      num[u] && (kk[u] >> ps) == prefix);
      }
      G::sync();
      ++p;
    }
    const U V = prefix;
    /* All numbers equal to V are kept unless a tie is cut by index. */
    const bool cut = !all_numbers && need < eq_count;
    /* The mask, in tiles of gs entries in index order; the histograms are
     * cleared for the next row meanwhile. */
    for (int64_t b = gt; b < 2 * nb; b += gs) hist[b] = 0;
    C eq_before = 0;
    for (int64_t i0 = 0; i0 < cols; i0 += gs) {
      const int64_t i = i0 + gt;
      T v = (T)0;
      U key = 0;
      bool num = false;
      if (i < cols) {
        if (from_smem) {
          key = keys[i];
          num = true;
        } else {
          v = xr[i];
          num = v == v;
          key = K::of(v);
        }
      }
      bool keep;
      if (all_numbers) {
        keep = num;
      } else {
        const bool eq = num && key == V;
        keep = num && key > V;
        if (cut) {
          C tot;
          const C rank = eq_before + tk_scan<W, C>(eq ? 1 : 0, ws, &tot);
          eq_before += tot;
          keep = keep || (eq && rank < need);
        } else {
          keep = keep || eq;
        }
      }
      if (nan_total != 0) {
        if (i < cols && !num) {
          keep = i < k;
        } else if (keep) {
          /* A candidate: count its beaters literally, stopping at k. */
          int64_t cnt = 0;
          for (int64_t j = 0; j < cols && cnt < k; ++j) {
            const T xj = xr[j];
            cnt += (xj > v || (!(v > xj) && !(xj > v) && j < i)) ? 1 : 0;
          }
          keep = cnt < k;
        }
      }
      if (i < cols) __stcs(yr + i, keep ? (T)1 : (T)0);
    }
    G::sync(); /* hist, misc and keys are reused by the next row */
  }
}

/* ---- launchers ----------------------------------------------------------------------- */

/* Shared memory budget of the small top-k kernel (no opt-in needed). */
static const size_t RW_TOPK_SMEM = 44 * 1024;

static size_t topk_small_smem(size_t elem, int R, int stride) {
  return (size_t)R * (size_t)stride * elem + (size_t)R * (elem + 2 * sizeof(int));
}

template <typename T, int K>
static bk_status topk_small_launch(bk_context *ctx, const char *fn, const T *x, T *y, int64_t rows,
                                   int cols, int R, int stride) {
  const size_t smem = topk_small_smem(sizeof(T), R, stride);
  topk_small_kernel<T, K><<<bk_cuda_grid((rows + R - 1) / R), R, smem, bk_stream(ctx)>>>(
      x, y, rows, cols, stride);
  return bk__cuda_launched(fn, "topk_small_kernel");
}

template <typename T, int K>
static bk_status topk_group_launch(bk_context *ctx, const char *fn, const T *x, T *y, int64_t rows,
                                   int cols, int g) {
  const int64_t units = (rows + 32 / g - 1) / (32 / g);
  const unsigned grid = bk_cuda_grid((units + 7) / 8);
  cudaStream_t stream = bk_stream(ctx);
  switch (g) {
    case 2: topk_group_kernel<T, K, 2><<<grid, 256, 0, stream>>>(x, y, rows, cols); break;
    case 4: topk_group_kernel<T, K, 4><<<grid, 256, 0, stream>>>(x, y, rows, cols); break;
    case 8: topk_group_kernel<T, K, 8><<<grid, 256, 0, stream>>>(x, y, rows, cols); break;
    default: topk_group_kernel<T, K, 16><<<grid, 256, 0, stream>>>(x, y, rows, cols); break;
  }
  return bk__cuda_launched(fn, "topk_group_kernel");
}

/* Rows of at most this many entries are selected by one warp, eight rows
 * to a block of 256 threads (at most 32 entries per lane and pass); longer
 * rows by a block of 64 to 1024 threads, about 32 entries per thread. */
static const int64_t TK_WARP_MAX_COLS = 32 * 32;

template <typename T, typename C, bool W>
static bk_status topk_select_run(bk_context *ctx, const char *fn, const T *x, T *y, int64_t rows,
                                 int64_t cols, int64_t k, int dbits, int threads, int64_t blocks) {
  using U = typename tk_key<T>::U;
  const bk_cuda_facts *f = &bk_cu(ctx)->facts;
  const int groups = W ? threads / 32 : 1;
  size_t static_smem = 0;
  const void *kern = (const void *)topk_select_kernel<T, C, W>;
  const bool opted = bk__cuda_func_prepare(ctx, kern, -1, -1, 0, &static_smem);
  const size_t limit = (opted ? (size_t)f->smem_optin : (size_t)48 * 1024) - static_smem;
  const size_t with_keys = (size_t)groups * tk_group_bytes(1 << dbits, sizeof(C), sizeof(U), cols);
  const bool staged = with_keys <= limit;
  const size_t smem =
      staged ? with_keys : (size_t)groups * tk_group_bytes(1 << dbits, sizeof(C), sizeof(U), 0);
  topk_select_kernel<T, C, W><<<bk_cuda_grid(blocks), threads, smem, bk_stream(ctx)>>>(
      x, y, rows, cols, k, dbits, staged ? 1 : 0);
  return bk__cuda_launched(fn, "topk_select_kernel");
}

template <typename T, typename C>
static bk_status topk_select_launch(bk_context *ctx, const char *fn, const T *x, T *y, int64_t rows,
                                    int64_t cols, int64_t k) {
  if (cols <= TK_WARP_MAX_COLS)
    return topk_select_run<T, C, true>(ctx, fn, x, y, rows, cols, k, 8, 256, (rows + 7) / 8);
  /* Digits of 11 bits (2048 bins) once a row has at least two entries per
   * bin, else 8: clearing and searching the bins costs nb / threads per
   * thread and digit. */
  const int dbits = cols >= 4096 ? 11 : 8;
  int threads = 64;
  while (threads < 1024 && (int64_t)threads * 32 < cols) threads <<= 1;
  return topk_select_run<T, C, false>(ctx, fn, x, y, rows, cols, k, dbits, threads, rows);
}

/* Kernel forced by bk__cuda_topk_force (tests): 0 lets topk() choose. */
static int topk_forced;

extern "C" BK_API void bk__cuda_topk_force(int path) {
  topk_forced = path >= BK_TOPK_AUTO && path <= BK_TOPK_SELECT ? path : BK_TOPK_AUTO;
}

template <typename T>
static bk_status topk(bk_context *ctx, const char *fn, const T *x, T *y, int64_t rows, int64_t cols,
                      int64_t k) {
  const int force = topk_forced;
  /* Lane groups: rows of exactly 2, 4, 8 or 16 lanes' worth of four 16-byte
   * vectors. */
  const int64_t lane_elems = 4 * rw_traits<T>::vec;
  const int64_t g = cols / lane_elems;
  if ((force == BK_TOPK_AUTO || force == BK_TOPK_GROUP) && k <= 8 && bk_aligned16(x) &&
      bk_aligned16(y) && cols % lane_elems == 0 && (g == 2 || g == 4 || g == 8 || g == 16)) {
    const int c = (int)cols, gi = (int)g;
    switch (k) {
      case 1: return topk_group_launch<T, 1>(ctx, fn, x, y, rows, c, gi);
      case 2: return topk_group_launch<T, 2>(ctx, fn, x, y, rows, c, gi);
      case 3: return topk_group_launch<T, 3>(ctx, fn, x, y, rows, c, gi);
      case 4: return topk_group_launch<T, 4>(ctx, fn, x, y, rows, c, gi);
      case 5: return topk_group_launch<T, 5>(ctx, fn, x, y, rows, c, gi);
      case 6: return topk_group_launch<T, 6>(ctx, fn, x, y, rows, c, gi);
      case 7: return topk_group_launch<T, 7>(ctx, fn, x, y, rows, c, gi);
      default: return topk_group_launch<T, 8>(ctx, fn, x, y, rows, c, gi);
    }
  }
  if ((force == BK_TOPK_AUTO || force == BK_TOPK_SMALL) && k <= 8) {
    const int stride = (int)(cols % 2 == 0 ? cols + 1 : cols);
    /* 64 rows a block (32 when the tile would not fit): short blocks keep
     * the tail of the grid short. */
    int R = 64;
    while (R > 32 && topk_small_smem(sizeof(T), R, stride) > RW_TOPK_SMEM) R >>= 1;
    if (cols <= 4096 && topk_small_smem(sizeof(T), R, stride) <= RW_TOPK_SMEM) {
      const int c = (int)cols;
      switch (k) {
        case 1: return topk_small_launch<T, 1>(ctx, fn, x, y, rows, c, R, stride);
        case 2: return topk_small_launch<T, 2>(ctx, fn, x, y, rows, c, R, stride);
        case 3: return topk_small_launch<T, 3>(ctx, fn, x, y, rows, c, R, stride);
        case 4: return topk_small_launch<T, 4>(ctx, fn, x, y, rows, c, R, stride);
        case 5: return topk_small_launch<T, 5>(ctx, fn, x, y, rows, c, R, stride);
        case 6: return topk_small_launch<T, 6>(ctx, fn, x, y, rows, c, R, stride);
        case 7: return topk_small_launch<T, 7>(ctx, fn, x, y, rows, c, R, stride);
        default: return topk_small_launch<T, 8>(ctx, fn, x, y, rows, c, R, stride);
      }
    }
  }
  /* 32-bit counts unless a row is too long for them. */
  if (cols <= (int64_t)UINT32_MAX)
    return topk_select_launch<T, unsigned>(ctx, fn, x, y, rows, cols, k);
  return topk_select_launch<T, unsigned long long>(ctx, fn, x, y, rows, cols, k);
}

/* ---- entry --------------------------------------------------------------------------- */

extern "C" bk_status bk__cuda_rows_topk_mask(bk_context *ctx, bk_dtype dt, const void *x, void *y,
                                             int64_t rows, int64_t cols, int64_t k) {
  static const char fn[] = "bk_rows_topk_mask";
  if (dt == BK_F32) return topk<float>(ctx, fn, (const float *)x, (float *)y, rows, cols, k);
  return topk<double>(ctx, fn, (const double *)x, (double *)y, rows, cols, k);
}

