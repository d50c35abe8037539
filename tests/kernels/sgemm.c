/* C twin of sgemm.cu for softcuda: the block's 64 x 64 tile of C = A * B. */
#include "softcuda/softcuda.h"

SOFTCUDA_TWIN(sgemm) {
  const float* a = SOFTCUDA_PARAM(const float*, 0);
  const float* b = SOFTCUDA_PARAM(const float*, 1);
  float* c = SOFTCUDA_PARAM(float*, 2);
  unsigned n = SOFTCUDA_PARAM(unsigned, 3);
  unsigned row0 = block->block_idx.y * 64, col0 = block->block_idx.x * 64, r, col, k;
  size_t bytes = (size_t)n * n * sizeof(float);
  /* Misuse (a size that is not a multiple of 64, another block shape, a grid larger than
   * C) makes the real kernel read or write outside the matrices: fault like it. */
  if (n % 64 || block->block_dim.x != 16 || block->block_dim.y != 16 || row0 + 64 > n || col0 + 64 > n) return 700;
  if (!softcuda_accessible(a, bytes) || !softcuda_accessible(b, bytes) || !softcuda_accessible(c, bytes)) return 700;
  for (r = row0; r < row0 + 64; ++r)
    for (col = col0; col < col0 + 64; ++col) {
      float acc = 0.0f;
      for (k = 0; k < n; ++k) acc += a[(size_t)r * n + k] * b[(size_t)k * n + col];
      c[(size_t)r * n + col] = acc;
    }
  return 0;
}
