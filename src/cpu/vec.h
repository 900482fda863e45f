/*
 * vec.h — what the CPU kernels share besides their element type: run-time
 * selection of code paths, the fence after streaming stores, and the layout
 * of the partial sums. The typed building blocks (exponential, row
 * reductions, stores) are in typed_t.h, instantiated once per dtype.
 */
#ifndef BK_CPU_VEC_H
#define BK_CPU_VEC_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ---- code paths chosen at run time ------------------------------------------ */

/* A kernel marked BK_CPU_CLONES is compiled twice, for baseline x86-64 and
 * for AVX2, and the loader picks the one the processor runs. Both compute
 * the same operations in the same order on each element (no contraction
 * into fused multiply-adds, the lane layout of every sum fixed in the
 * source), so they give the same bits. The row kernels carry it: their
 * exponentials and float32-to-float64 conversions run about twice as fast
 * in AVX2 (measured on the project's 2-core machine: exp 2.5 -> 0.9 ns per
 * float32 element, a float32 row sum 0.6 -> 0.45 ns), which matters once a
 * core is shared; the layout and index kernels are plain copies and stay
 * baseline. */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(BK_CPU_NO_CLONES)
#if __has_attribute(target_clones)
#define BK_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef BK_CPU_CLONES
#define BK_CPU_CLONES
#endif

/* The kernels bound by their exponentials (softmax, masked softmax, the
 * cross-entropies) and the layer-norm forward carry a third code path, for
 * x86-64-v4 (AVX-512F/BW/CD/DQ/VL): sixteen float32 lanes to a register and
 * 32 registers, so the exponential's constants stay in registers (1.3-1.7x
 * over AVX2 on the project's 2-core machine; the layer-norm forward 1.0-1.1x,
 * and its narrow rows' vector transposes (typed_t.h) need it: on AVX2 they
 * ran 10% slower at 4 columns than the scalar ones they replaced). The same rule holds as for AVX2: the same operations in the
 * same order (ISO C mode: no contraction into fused multiply-adds, though
 * the path has FMA), the same lane layout, so the same bits. */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(BK_CPU_NO_CLONES) &&            \
    !defined(BK_CPU_NO_512)
#if __has_attribute(target_clones)
#define BK_CPU_CLONES_512 __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
#endif
#ifndef BK_CPU_CLONES_512
#define BK_CPU_CLONES_512 BK_CPU_CLONES
#endif

/* The typed helpers the cloned kernels call. Always inlined: a helper the
 * compiler kept out of line (it did so for the exponential loop of the
 * cross-entropies, the softmax's rows read once and its scaled store, and
 * the layer norm's narrow rows) is compiled once, for baseline x86-64, and
 * runs there whatever path called it. */
#if defined(__GNUC__)
#define BK_INLINE static inline __attribute__((always_inline))
#else
#define BK_INLINE static inline
#endif

/* ---- stores --------------------------------------------------------------------- */

/* Every row reduction of the kernels keeps BK_LANES partial results, element
 * j of a row going to partial j % BK_LANES; sums are formed over blocks of
 * BK_CHUNK elements in the data's type and the blocks added in float64. The
 * layout depends only on the row length, so results are the same for every
 * thread count and on every code path. */
#define BK_LANES 16
#define BK_CHUNK 1024

/* The softmax and the row sum take rows narrower than this BK_LANES rows at
 * a time, one per vector lane (typed_t.h), each folded in index order: row
 * by row, the per-row cost (the lane partials and their fold) outweighs the
 * work (measured on a 2-core x86-64 at 19 columns: softmax 2.3x, row sum
 * 3.8x faster across the lanes; from about 50 columns the row-by-row path
 * is faster). The max, first-max and masked softmax go across the lanes
 * below BK_LANES only (at 19 and 33 columns they ran 1.3-2.5x slower
 * across the lanes). */
#define BK_NARROW 40

/* Four float64 (float32) values as one value of the compiler's vector
 * extension: AVX2 keeps one in a register, baseline x86-64 two SSE2
 * registers. The sums that use them add element by element, as the scalar
 * code they replace did. */
typedef double bk_v4d __attribute__((vector_size(32)));
typedef float bk_v4f __attribute__((vector_size(16)));

/* *d = the four floats at p converted to float64, element by element. GCC
 * 12 lowers __builtin_convertvector from bk_v4f to bk_v4d into two 2-lane
 * conversions and an insert on every path, the AVX2 and x86-64-v4 ones
 * included; this loop becomes one 4-lane conversion (vcvtps2pd) there. */
BK_INLINE void bk_cvt4f(bk_v4d *d, const float *p) {
  bk_v4d v;
  for (int i = 0; i < 4; i++) v[i] = (double)p[i];
  *d = v;
}

/* Folds BK_LANES float64 partials pairwise, in a fixed tree. */
BK_INLINE double bk_fold64(double *lane) {
  for (int w = BK_LANES / 2; w > 0; w /= 2)
    for (int l = 0; l < w; l++) lane[l] += lane[l + w];
  return lane[0];
}

/* bk_fold64 of 16 partials held as four vectors (partials 4q..4q+3 in
 * a[q]): the same tree, without reading them back from memory. */
BK_INLINE double bk_vfold64(const bk_v4d *a) {
  const bk_v4d s4 = (a[0] + a[2]) + (a[1] + a[3]);
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* Orders this thread's streaming stores before what follows (the end of
 * the parallel region publishes them). */
static inline void bk_put_fence(int stream) {
#if defined(__SSE2__)
  if (stream) _mm_sfence();
#else
  (void)stream;
#endif
}

#endif /* BK_CPU_VEC_H */
