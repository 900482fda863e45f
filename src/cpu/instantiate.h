/*
 * instantiate.h — instantiates a CPU family's type template twice, for
 * float32 and float64. Define BK_TEMPLATE as the template's file name in
 * quotes, then include this file:
 *
 *   #define BK_TEMPLATE "softmax_t.h"
 *   #include "instantiate.h"
 *
 * Each instance is typed_t.h followed by the template, with BK_T the
 * element type and BK_T_F32 1 or 0; every function they define carries the
 * suffix _f32 or _f64 (typed_t.h, BK_FN).
 */
#define BK_T float
#define BK_T_F32 1
#include "typed_t.h"
#include BK_TEMPLATE
#undef BK_T
#undef BK_T_F32

#define BK_T double
#define BK_T_F32 0
#include "typed_t.h"
#include BK_TEMPLATE
#undef BK_T
#undef BK_T_F32
#undef BK_TEMPLATE
