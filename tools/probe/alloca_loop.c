/* alloca_loop: bench_queue case 3 (gpuhal_queue_alloca + gpuhal_queue_dealloca pairs on one
 * queue, each waiting on the last and signalling the next value) in a program of its own,
 * for tools/probe/pc_sampler.c; also counts gpuhal's allocations per pair.
 *   gcc -std=c99 -O2 -g -I. -o alloca_loop tools/probe/alloca_loop.c -ldl -lpthread
 *   ./alloca_loop [pairs] [1: the device's context current on this thread, as in bench_queue] */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"
#include <stdio.h>
#include <stdlib.h>
static long allocs, bytes;
static void* count_alloc(size_t n, void* u) {
  (void)u;
  __atomic_add_fetch(&allocs, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&bytes, (long)n, __ATOMIC_RELAXED);
  return malloc(n);
}
static void count_free(void* p, void* u) {
  (void)u;
  free(p);
}
int main(int argc, char** argv) {
  gpuhal_driver_options_t o = {0};
  long a0, b0;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_semaphore_t* s = NULL;
  long n = argc > 1 ? atol(argv[1]) : 100000, i;
  uint64_t v = 0;
  int64_t t0;
  gpuhal_status_t st =
      (o.allocator.alloc = count_alloc, o.allocator.free = count_free, gpuhal_driver_create(&o, &driver));
  if (!st) st = gpuhal_device_create(driver, 0, NULL, &device);
  if (!st) st = gpuhal_semaphore_create(driver, 0, &s);
  gpuhal__context_scope_t scope;
  if (!st && argc > 2 && atoi(argv[2]))
    st = gpuhal__context_enter(device, &scope); /* as the bench's raw side leaves it */
  a0 = allocs;
  b0 = bytes;
  t0 = gpuhal_now_ns();
  for (i = 0; i < n && !st; ++i) {
    uint64_t prev = v, mid = v + 1, next = v + 2;
    gpuhal_buffer_t* b = NULL;
    st = gpuhal_queue_alloca(device, 0, gpuhal_semaphore_list_one(&s, &prev), gpuhal_semaphore_list_one(&s, &mid),
                             1 << 20, &b);
    if (!st)
      st = gpuhal_queue_dealloca(device, 0, gpuhal_semaphore_list_one(&s, &mid), gpuhal_semaphore_list_one(&s, &next),
                                 b);
    gpuhal_buffer_release(b);
    v = next;
  }
  if (!st) st = gpuhal_semaphore_wait(s, v, gpuhal_timeout_infinite());
  printf("%s: %.3f us per pair, %.3f allocations (%.1f bytes) per pair\n", st ? gpuhal_status_message(st) : "ok",
         (gpuhal_now_ns() - t0) / 1000.0 / n, (double)(allocs - a0) / n, (double)(bytes - b0) / n);
  gpuhal_semaphore_release(s);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  return st != NULL;
}
