/* C twin of pdl_step.cu for softcuda. softcuda runs a programmatic launch after the one
 * before it has finished, one of the orders a GPU allows. */
#include "softcuda/softcuda.h"

SOFTCUDA_TWIN(pdl_step) {
  unsigned* state = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned k = SOFTCUDA_PARAM(unsigned, 1);
  if (block->block_idx.x || block->block_idx.y || block->block_idx.z) return 0;
  if (!softcuda_accessible(state, 4)) return 700;
  state[0] = state[0] * 3u + k;
  return 0;
}
