/* C twin of spin_us.cu for softcuda: the launch lasts `us` microseconds of wall time
 * (threads of a block spin concurrently on a GPU, so one wait per launch is right; the
 * first block waits and the others find the time already passed). */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "softcuda/softcuda.h"

static unsigned long long spin_us_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

SOFTCUDA_TWIN(spin_us) {
  static __thread unsigned long long start;
  unsigned long long us = SOFTCUDA_PARAM(unsigned long long, 0);
  if (block->block_idx.x == 0 && block->block_idx.y == 0 && block->block_idx.z == 0) start = spin_us_now_ns();
  while (spin_us_now_ns() - start < us * 1000ull) {
    struct timespec ts = {0, 20000}; /* sleep-spin: leave the CPU to other streams */
    nanosleep(&ts, NULL);
  }
  return 0;
}
