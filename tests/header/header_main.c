/* Links the C and C++ compilations of the header and checks that both see
 * the same status and device values. */
#include "bufkern.h"

#include <stdio.h>
#include <string.h>

int bk_header_c_status(void);
int bk_header_cxx_status(void);

int main(void) {
  int failed = 0;
  if (bk_header_c_status() != 103) failed++;
  if (bk_header_cxx_status() != 104) failed++;
  if (strcmp(bk_status_string(BK_ERR_INVALID_ARGUMENT), "invalid argument") != 0) failed++;
  if (strcmp(bk_status_string((bk_status)12345), "unknown status") != 0) failed++;
  printf("%d passed, %d failed\n", 4 - failed, failed);
  return failed != 0;
}
