/* C twin of fill_u32.cu for softcuda. */
#include "softcuda/softcuda.h"

SOFTCUDA_TWIN(fill_u32) {
  unsigned* dst = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned value = SOFTCUDA_PARAM(unsigned, 1);
  unsigned n = SOFTCUDA_PARAM(unsigned, 2);
  unsigned t;
  for (t = 0; t < block->block_dim.x; ++t) {
    unsigned i = block->block_idx.x * block->block_dim.x + t;
    if (i >= n) continue;
    if (!softcuda_accessible(dst + i, 4)) return 700;
    dst[i] = value;
  }
  return 0;
}
