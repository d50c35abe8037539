/* A fake CUDA driver without cuMemPoolCreate (optional): driver creation must succeed
 * with GPUHAL_FEATURE_MEMORY_POOLS off. */
#define FAKE_OMIT_cuMemPoolCreate ~, 1
#include "fake_cuda.inc"
