/* record_every_probe: what bench_queue case 4's raw loop would cost if not every launch
 * recorded an event (the upside of a queue that records one event for several executes on
 * one stream and resolves the earlier signals through it).
 *
 *   gcc -O2 -I/usr/local/cuda/include tools/probe/record_every_probe.c -o record_every_probe -lcuda
 *   ./record_every_probe [launches]
 *
 * One graph of one 4-byte memset node (case 4's shape), launched back to back on one
 * stream; after every k-th launch one of 64 events is recorded in turn (k = 1, 2, 4, 8, 16,
 * and none); microseconds per launch, the stream synchronized at the end of each pass.
 * Passes alternate k, five rounds; the median of each k is printed with its ratio to k = 1.
 * Written 2026-11-30 for the next step on case 4 (RESULTS.md); not yet run on a GPU. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define CK(x)                                               \
  do {                                                      \
    CUresult r_ = (x);                                      \
    if (r_) {                                               \
      const char* n_ = "?";                                 \
      cuGetErrorName(r_, &n_);                              \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, n_); \
      exit(1);                                              \
    }                                                       \
  } while (0)

#define RING 64
#define KINDS 6
#define ROUNDS 5

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  int launches = argc > 1 ? atoi(argv[1]) : 20000;
  static const int every[KINDS] = {1, 2, 4, 8, 16, 0};
  double us[KINDS][ROUNDS];
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUgraph graph;
  CUgraphNode node;
  CUgraphExec exec;
  CUdeviceptr word;
  CUevent ring[RING];
  CUDA_MEMSET_NODE_PARAMS memset_params;
  int k, r, i;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CK(cuMemAlloc(&word, 4));
  for (i = 0; i < RING; ++i) CK(cuEventCreate(&ring[i], CU_EVENT_DISABLE_TIMING));
  CK(cuGraphCreate(&graph, 0));
  memset_params.dst = word;
  memset_params.pitch = 0;
  memset_params.value = 7;
  memset_params.elementSize = 4;
  memset_params.width = 1;
  memset_params.height = 1;
  CK(cuGraphAddMemsetNode(&node, graph, NULL, 0, &memset_params, ctx));
  CK(cuGraphInstantiate(&exec, graph, 0));
  for (i = 0; i < 2000; ++i) CK(cuGraphLaunch(exec, stream)); /* warm up */
  CK(cuStreamSynchronize(stream));
  for (r = 0; r < ROUNDS; ++r) {
    for (k = 0; k < KINDS; ++k) {
      double start = now_us();
      for (i = 1; i <= launches; ++i) {
        CK(cuGraphLaunch(exec, stream));
        if (every[k] && i % every[k] == 0) CK(cuEventRecord(ring[i % RING], stream));
      }
      CK(cuStreamSynchronize(stream));
      us[k][r] = (now_us() - start) / launches;
    }
  }
  for (k = 0; k < KINDS; ++k) qsort(us[k], ROUNDS, sizeof(double), cmp_double);
  printf("%d launches per pass, median of %d rounds\n", launches, ROUNDS);
  for (k = 0; k < KINDS; ++k) {
    if (every[k])
      printf("record after every %2d launches: %6.3f us per launch (%.3fx of every launch)\n", every[k],
             us[k][ROUNDS / 2], us[k][ROUNDS / 2] / us[0][ROUNDS / 2]);
    else
      printf("no record:                       %6.3f us per launch (%.3fx of every launch)\n", us[k][ROUNDS / 2],
             us[k][ROUNDS / 2] / us[0][ROUNDS / 2]);
  }
  CK(cuGraphExecDestroy(exec));
  CK(cuGraphDestroy(graph));
  for (i = 0; i < RING; ++i) CK(cuEventDestroy(ring[i]));
  CK(cuMemFree(word));
  CK(cuStreamDestroy(stream));
  CK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
