/* C twin of spin_store.cu for softcuda: sleeps `us` microseconds, then block 0 stores
 * `value` to dst[0..n). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdint.h>
#include <time.h>

#include "../softcuda/softcuda.h"

SOFTCUDA_TWIN(spin_store) {
  unsigned* dst = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned value = SOFTCUDA_PARAM(unsigned, 1);
  unsigned n = SOFTCUDA_PARAM(unsigned, 2);
  unsigned long long us = SOFTCUDA_PARAM(unsigned long long, 3);
  struct timespec ts;
  unsigned i;
  ts.tv_sec = (time_t)(us / 1000000ull);
  ts.tv_nsec = (long)((us % 1000000ull) * 1000ull);
  while (nanosleep(&ts, &ts) != 0) {
  }
  if (block->block_idx.x != 0) return 0;
  if (n && !softcuda_accessible(dst, (size_t)n * sizeof(unsigned))) return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
  for (i = 0; i < n; ++i) ((volatile unsigned*)dst)[i] = value;
  return 0;
}
