/* copy_issue_probe: what a device-to-device copy costs to issue, by entry point, and how many
 * a stream runs back to back (a one-rank all-reduce is such a copy: bench_multi_gpu).
 *
 *   gcc -O2 -I/usr/local/cuda/include tools/probe/copy_issue_probe.c -o copy_issue_probe -lcuda
 *   ./copy_issue_probe [MiB=4] [copies=2000]
 *
 * For each of cuMemcpyAsync (unified addressing: the driver looks up both pointers) and
 * cuMemcpyDtoDAsync, alone and followed by a cuEventRecord (as gpuhal's execute records its
 * signal), prints the host time inside the calls per copy and the wall time per copy of the
 * whole loop (median of 5 loops). */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                        \
  do {                                                                  \
    CUresult r_ = (x);                                                  \
    if (r_ != CUDA_SUCCESS) {                                           \
      fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, r_); \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 4) << 20;
  int n = argc > 2 ? atoi(argv[2]) : 2000, mode, rep, i;
  static const char* const names[4] = {"cuMemcpyAsync", "cuMemcpyAsync + cuEventRecord", "cuMemcpyDtoDAsync",
                                       "cuMemcpyDtoDAsync + cuEventRecord"};
  CUdevice d;
  CUcontext c;
  CUstream s;
  CUevent e;
  CUdeviceptr src, dst;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&d, 0));
  CHECK(cuDevicePrimaryCtxRetain(&c, d));
  CHECK(cuCtxSetCurrent(c));
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CHECK(cuMemAlloc(&src, bytes));
  CHECK(cuMemAlloc(&dst, bytes));
  printf("copy_issue_probe: %zu MiB device to device, %d copies a loop, median of 5 loops\n", bytes >> 20, n);
  for (mode = 0; mode < 4; ++mode) {
    double issue[5], wall[5];
    for (rep = 0; rep < 5; ++rep) {
      double in_calls = 0, t0 = now_us(), t;
      for (i = 0; i < n; ++i) {
        t = now_us();
        if (mode < 2)
          CHECK(cuMemcpyAsync(dst, src, bytes, s));
        else
          CHECK(cuMemcpyDtoDAsync(dst, src, bytes, s));
        if (mode & 1) CHECK(cuEventRecord(e, s));
        in_calls += now_us() - t;
      }
      CHECK(cuStreamSynchronize(s));
      wall[rep] = (now_us() - t0) / n;
      issue[rep] = in_calls / n;
    }
    qsort(issue, 5, sizeof(double), cmp);
    qsort(wall, 5, sizeof(double), cmp);
    printf("%-36s issue %6.2f us  wall %6.2f us per copy\n", names[mode], issue[2], wall[2]);
  }
  return 0;
}
