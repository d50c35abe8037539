/* C twin of fault.cu for softcuda: a store to an address outside every allocation is an
 * illegal address, which poisons the context. */
#include "softcuda/softcuda.h"

SOFTCUDA_TWIN(fault) {
  unsigned long long address = SOFTCUDA_PARAM(unsigned long long, 0);
  (void)block;
  if (!softcuda_accessible((const void*)(unsigned long)address, 4)) return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
  *(volatile int*)(unsigned long)address = 1;
  return 0;
}
