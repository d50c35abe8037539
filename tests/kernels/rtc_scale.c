/* C twin of the kernel that tests/module_cache/test_executable_compile.c compiles at run
 * time with NVRTC (its source is in that test: RTC_SCALE from a header, -DRTC_OFFSET=7):
 * data[i] = data[i] * 3 + 7 for i < n. */
#include "softcuda/softcuda.h"

SOFTCUDA_TWIN(rtc_scale) {
  unsigned* data = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned n = SOFTCUDA_PARAM(unsigned, 1);
  unsigned t;
  for (t = 0; t < block->block_dim.x; ++t) {
    unsigned i = block->block_idx.x * block->block_dim.x + t;
    if (i >= n) continue;
    if (!softcuda_accessible(&data[i], 4)) return 700;
    data[i] = data[i] * 3u + 7u;
  }
  return 0;
}
