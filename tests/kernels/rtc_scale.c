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

/* The template of the same test, rtc_scale_t<unsigned> (x[i] *= a), by its mangled entry:
 * gpuhal_executable_compile's name expressions find it as "rtc_scale_t<unsigned>". */
SOFTCUDA_TWIN(_Z11rtc_scale_tIjEvPT_S0_j) {
  unsigned* x = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned a = SOFTCUDA_PARAM(unsigned, 1);
  unsigned n = SOFTCUDA_PARAM(unsigned, 2);
  unsigned t;
  for (t = 0; t < block->block_dim.x; ++t) {
    unsigned i = block->block_idx.x * block->block_dim.x + t;
    if (i >= n) continue;
    if (!softcuda_accessible(&x[i], 4)) return 700;
    x[i] *= a;
  }
  return 0;
}
