/* alias_probe: does a stream parked on cuStreamWaitValue64 hold up other streams?
 *
 * CUDA multiplexes a context's streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware queues
 * (default 8). Parks stream 0 on a value nobody writes, then asks each other stream to write
 * a word the host watches, and reports which ones stayed stuck behind the parked one.
 *   gcc -O1 -I/usr/local/cuda/include tools/probe/alias_probe.c -o alias_probe -lcuda
 *   ./alias_probe [streams] [parked] [warm]   (CUDA_DEVICE_MAX_CONNECTIONS=N ./alias_probe to vary) */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20, parked = argc > 2 ? atoi(argv[2]) : 1, warm = argc > 3 ? atoi(argv[3]) : 0;
  int i, j, stuck = 0;
  CUdevice dev;
  CUcontext ctx;
  CUstream s[64];
  volatile unsigned long long* w;
  CUdeviceptr dw;
  const char* env = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (n > 64) n = 64;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
  for (i = 0; i < n; ++i) cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING);
  cuMemHostAlloc((void**)&w, 8 * 65, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  cuMemHostGetDevicePointer(&dw, (void*)w, 0);
  for (i = 0; i < 65; ++i) w[i] = 0;
  /* warm: every stream has done work (and so has its hardware queue) before the park */
  if (warm) {
    for (i = 0; i < n; ++i) cuStreamWriteValue64(s[i], dw + (CUdeviceptr)i * 8, 0, 0);
    for (i = 0; i < n; ++i) cuStreamSynchronize(s[i]);
  }
  /* streams 0..parked-1 wait on word 64 */
  for (i = 0; i < parked; ++i) cuStreamWaitValue64(s[i], dw + 64 * 8, 1, CU_STREAM_WAIT_VALUE_GEQ);
  usleep(10000);
  for (i = parked; i < n; ++i) cuStreamWriteValue64(s[i], dw + (CUdeviceptr)i * 8, 1, 0);
  usleep(100000);
  printf("connections=%s streams=%d parked=%d warm=%d: stuck:", env ? env : "default", n, parked, warm);
  for (i = parked; i < n; ++i)
    if (!w[i]) {
      printf(" %d", i);
      stuck++;
    }
  printf(" (%d of %d)\n", stuck, n - parked);
  w[64] = 1;
  for (j = 0; j < n; ++j) cuStreamSynchronize(s[j]);
  return 0;
}
