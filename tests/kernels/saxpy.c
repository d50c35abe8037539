/* C twin of saxpy.cu for softcuda. */
#include "softcuda/softcuda.h"

SOFTCUDA_TWIN(saxpy) {
  float a = SOFTCUDA_PARAM(float, 0);
  const float* x = SOFTCUDA_PARAM(const float*, 1);
  float* y = SOFTCUDA_PARAM(float*, 2);
  unsigned n = SOFTCUDA_PARAM(unsigned, 3);
  unsigned t;
  for (t = 0; t < block->block_dim.x; ++t) {
    unsigned i = block->block_idx.x * block->block_dim.x + t;
    if (i >= n) continue;
    if (!softcuda_accessible(x + i, 4) || !softcuda_accessible(y + i, 4)) return 700;
    y[i] = a * x[i] + y[i];
  }
  return 0;
}
