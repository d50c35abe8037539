/* stream_depth_probe: how much work a stream holds behind an unmet cuStreamWaitValue64
 * before CUDA blocks the thread that enqueues more.
 *
 * A thread sets the awaited value after 4 s; the main thread enqueues ops behind the wait
 * and reports the first enqueue that took over 100 ms. Run on a real GPU:
 *   gcc -O2 -I/usr/local/cuda/include tools/probe/stream_depth_probe.c -o stream_depth_probe -lcuda -lpthread
 *   ./stream_depth_probe 0   # memset + cuStreamWriteValue64 per op
 *   ./stream_depth_probe 1   # cuStreamWaitValue64 + memset + cuStreamWriteValue64 per op
 *   ./stream_depth_probe 2   # memset per op
 * On an H200 (driver 580, CUDA 13.0, 2026-11-26): mode 0 blocks at op 510, mode 1 at 340,
 * mode 2 at 1,020: about 1,020 entries, and the enqueue then waits until the value comes.
 * gpuhal never issues a STREAM command buffer longer than GPUHAL__PARK_COMMANDS_MAX behind
 * such a wait (queue.h); softcuda blocks an enqueue past 1,020 ops not done (stream.c). */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>
static volatile uint64_t* word;
static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static void* release(void* a) {
  (void)a;
  sleep(4);
  fprintf(stderr, "releasing at %.0f\n", now_ms());
  __atomic_store_n((uint64_t*)word, 1, __ATOMIC_SEQ_CST);
  return NULL;
}
int main(int argc, char** argv) {
  CUdevice d;
  CUcontext c;
  CUstream s;
  CUdeviceptr dev, buf;
  void* host;
  pthread_t t;
  int mode = argc > 1 ? atoi(argv[1]) : 0, i, n = 20000;
  cuInit(0);
  cuDeviceGet(&d, 0);
  cuDevicePrimaryCtxRetain(&c, d);
  cuCtxSetCurrent(c);
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  cuMemHostAlloc(&host, 8, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  word = (volatile uint64_t*)host;
  *word = 0;
  cuMemHostGetDevicePointer(&dev, host, 0);
  cuMemAlloc(&buf, 256);
  cuStreamWaitValue64(s, dev, 1, CU_STREAM_WAIT_VALUE_GEQ);
  pthread_create(&t, NULL, release, NULL);
  double t0 = now_ms(), last = t0;
  for (i = 0; i < n; ++i) {
    if (mode == 0) {
      cuMemsetD32Async(buf, i, 1, s);
      cuStreamWriteValue64(s, dev + 0, 1, 0);
    } else if (mode == 1) {
      cuStreamWaitValue64(s, dev, 1, CU_STREAM_WAIT_VALUE_GEQ);
      cuMemsetD32Async(buf, i, 1, s);
      cuStreamWriteValue64(s, dev, 1, 0);
    } else {
      cuMemsetD32Async(buf, i, 1, s);
    }
    double nw = now_ms();
    if (nw - last > 100) {
      printf("mode %d: op %d took %.0f ms (blocked)\n", mode, i, nw - last);
      fflush(stdout);
      break;
    }
    last = nw;
  }
  printf("mode %d: enqueued %d ops in %.1f ms\n", mode, i, now_ms() - t0);
  pthread_join(t, NULL);
  cuStreamSynchronize(s);
  return 0;
}
