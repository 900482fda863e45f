/* bufkern — command-line tool (grows with the demo issue). */
#include "bufkern.h"

#include <stdio.h>

int main(void) {
  printf("bufkern %s\n%s", bk_version(), bk_build_info());
  return 0;
}
