/* A fake CUDA driver without cuMemAlloc (a required symbol): driver creation must fail
 * and name it. */
#define FAKE_OMIT_cuMemAlloc ~, 1
#include "fake_cuda.inc"
