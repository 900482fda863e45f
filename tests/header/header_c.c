/* Compiled as strict C11 with -pedantic-errors: the public header must be
 * valid ISO C. */
#include "bufkern.h"

int bk_header_c_status(void) { return (int)BK_ERR_DTYPE + (int)BK_DEVICE_CUDA; }
