/* C twin of grid_reduce.cu for softcuda: a grid twin (the grid-wide sync separates the
 * blocks' partial sums from block 0's total). A launch that is not cooperative fails, as
 * its grid sync may never return on a GPU. */
#include "softcuda/softcuda.h"

SOFTCUDA_GRID_TWIN(grid_reduce) {
  const unsigned* data = SOFTCUDA_PARAM(const unsigned*, 0);
  unsigned n = SOFTCUDA_PARAM(unsigned, 1);
  unsigned* partial = SOFTCUDA_PARAM(unsigned*, 2);
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 3);
  unsigned blocks = grid->grid_dim.x * grid->grid_dim.y * grid->grid_dim.z;
  unsigned threads = grid->block_dim.x * grid->block_dim.y * grid->block_dim.z;
  unsigned long long stride = (unsigned long long)blocks * threads, i;
  unsigned b, total = 0;
  if (!grid->cooperative) return 719; /* CUDA_ERROR_LAUNCH_FAILED */
  if (grid->grid_dim.y != 1 || grid->grid_dim.z != 1) return 719;
  if (!softcuda_accessible(partial, (size_t)blocks * 4) || !softcuda_accessible(out, 4)) return 700;
  if (n && !softcuda_accessible(data, (size_t)n * 4)) return 700;
  for (b = 0; b < blocks; ++b) {
    unsigned sum = 0;
    for (i = (unsigned long long)b * threads; i < n; i += stride) {
      unsigned long long j;
      for (j = i; j < i + threads && j < n; ++j) sum += data[j];
    }
    partial[b] = sum;
  }
  for (b = 0; b < blocks; ++b) total += partial[b];
  *out = total;
  return 0;
}
