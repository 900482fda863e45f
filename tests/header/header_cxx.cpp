// Compiled as C++17 with -pedantic-errors: the public header must be usable
// from C++ with C linkage.
#include "bufkern.h"

extern "C" int bk_header_cxx_status(void) {
  bk_device d{BK_DEVICE_CPU, 0};
  return static_cast<int>(BK_ERR_NULL) + static_cast<int>(d.kind);
}
