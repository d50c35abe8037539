/* C twin of atomic_inc.cu for softcuda: one increment per thread of the grid. */
#include "softcuda/softcuda.h"

SOFTCUDA_TWIN(atomic_inc) {
  unsigned* counter = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned threads = block->block_dim.x * block->block_dim.y * block->block_dim.z;
  if (!softcuda_accessible(counter, 4)) return 700;
  __atomic_fetch_add(counter, threads, __ATOMIC_RELAXED); /* other streams may add too */
  return 0;
}
