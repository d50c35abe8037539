/* C twin of vector_add.cu for softcuda. */
#include "softcuda/softcuda.h"

SOFTCUDA_TWIN(vector_add) {
  const float* a = SOFTCUDA_PARAM(const float*, 0);
  const float* b = SOFTCUDA_PARAM(const float*, 1);
  float* c = SOFTCUDA_PARAM(float*, 2);
  unsigned n = SOFTCUDA_PARAM(unsigned, 3);
  unsigned t;
  for (t = 0; t < block->block_dim.x; ++t) {
    unsigned i = block->block_idx.x * block->block_dim.x + t;
    if (i >= n) continue;
    if (!softcuda_accessible(a + i, 4) || !softcuda_accessible(b + i, 4) || !softcuda_accessible(c + i, 4))
      return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
    c[i] = a[i] + b[i];
  }
  return 0;
}
