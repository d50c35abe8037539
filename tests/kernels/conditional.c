/* C twins of conditional.cu: device-side regions' kernels, which set a condition through
 * softcuda_graph_set_conditional (cudaGraphSetConditional). */
#include "softcuda/softcuda.h"

SOFTCUDA_TWIN(cond_residual_step) {
  float* residual = SOFTCUDA_PARAM(float*, 0);
  unsigned* iterations = SOFTCUDA_PARAM(unsigned*, 1);
  float tolerance = SOFTCUDA_PARAM(float, 2);
  unsigned long long loop = SOFTCUDA_PARAM(unsigned long long, 3);
  if (block->block_idx.x || block->block_idx.y || block->block_idx.z) return 0;
  if (!softcuda_accessible(residual, 4) || !softcuda_accessible(iterations, 4)) return 700;
  residual[0] *= 0.5f;
  iterations[0] += 1u;
  if (residual[0] < tolerance) softcuda_graph_set_conditional(loop, 0u);
  return 0;
}

SOFTCUDA_TWIN(cond_set_from) {
  const unsigned* flag = SOFTCUDA_PARAM(const unsigned*, 0);
  unsigned mask = SOFTCUDA_PARAM(unsigned, 1);
  unsigned long long condition = SOFTCUDA_PARAM(unsigned long long, 2);
  if (block->block_idx.x || block->block_idx.y || block->block_idx.z) return 0;
  if (!softcuda_accessible(flag, 4)) return 700;
  softcuda_graph_set_conditional(condition, flag[0] & mask);
  return 0;
}

SOFTCUDA_TWIN(cond_add) {
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned value = SOFTCUDA_PARAM(unsigned, 1);
  if (block->block_idx.x || block->block_idx.y || block->block_idx.z) return 0;
  if (!softcuda_accessible(out, 4)) return 700;
  out[0] += value;
  return 0;
}

SOFTCUDA_TWIN(cond_count_down) {
  unsigned* remaining = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned* trips = SOFTCUDA_PARAM(unsigned*, 1);
  unsigned long long loop = SOFTCUDA_PARAM(unsigned long long, 2);
  if (block->block_idx.x || block->block_idx.y || block->block_idx.z) return 0;
  if (!softcuda_accessible(remaining, 4) || !softcuda_accessible(trips, 4)) return 700;
  trips[0] += 1u;
  if (--remaining[0] == 0u) softcuda_graph_set_conditional(loop, 0u);
  return 0;
}
