/* C twin of globals.cu for softcuda: the module's variables come from softcuda_global, the
 * copy of the launching context's module. */
#include "softcuda/softcuda.h"

SOFTCUDA_TWIN(read_globals) {
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned n = SOFTCUDA_PARAM(unsigned, 1);
  size_t scale_bytes = 0, table_bytes = 0, bias_bytes = 0;
  const unsigned* scale = (const unsigned*)softcuda_global("g_scale", &scale_bytes);
  const unsigned* offset = (const unsigned*)softcuda_global("g_offset", NULL);
  unsigned long long* launches = (unsigned long long*)softcuda_global("g_launches", NULL);
  const unsigned* table = (const unsigned*)softcuda_global("c_table", &table_bytes);
  const float* bias = (const float*)softcuda_global("_ZN3cfg4biasE", &bias_bytes);
  unsigned t;
  if (!scale || !offset || !launches || !table || !bias || scale_bytes != 4 || table_bytes != 32 || bias_bytes != 12)
    return 719; /* CUDA_ERROR_LAUNCH_FAILED: not the module globals.cu makes */
  for (t = 0; t < block->block_dim.x; ++t) {
    unsigned i = block->block_idx.x * block->block_dim.x + t;
    if (i == 0) __atomic_fetch_add(launches, 1ull, __ATOMIC_RELAXED);
    if (i >= n) continue;
    if (!softcuda_accessible(out + i, 4)) return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
    out[i] = *scale * table[i % 8] + *offset + (unsigned)bias[i % 3];
  }
  return 0;
}
