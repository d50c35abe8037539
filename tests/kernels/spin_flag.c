/* C twin of spin_flag.cu for softcuda: polls *flag every 100 us until it is non-zero or
 * `timeout_us` passed, then block 0 stores 1 (released) or 2 (timed out) to *out. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdint.h>
#include <time.h>

#include "../softcuda/softcuda.h"

static unsigned long long spin_flag_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

SOFTCUDA_TWIN(spin_flag) {
  const unsigned* flag = SOFTCUDA_PARAM(const unsigned*, 0);
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 1);
  unsigned long long timeout_us = SOFTCUDA_PARAM(unsigned long long, 2);
  unsigned long long start = spin_flag_now_ns();
  unsigned result = 2;
  if (!softcuda_accessible(flag, 4) || !softcuda_accessible(out, 4)) return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
  while (spin_flag_now_ns() - start < timeout_us * 1000ull) {
    struct timespec nap;
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0) {
      result = 1;
      break;
    }
    nap.tv_sec = 0;
    nap.tv_nsec = 100000;
    nanosleep(&nap, NULL);
  }
  if (block->block_idx.x == 0) __atomic_store_n(out, result, __ATOMIC_RELEASE);
  return 0;
}
