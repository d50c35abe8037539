/* peer_park_probe: which calls on device 1 wait while device 0 has a stream parked on a
 * cuStreamWaitValue64 (or runs a long kernel).
 *
 * park_probe.c lists the calls that wait for a stream of their own context parked on a
 * value; this asks the same across devices. Needs two GPUs:
 *   gcc -O1 -I/usr/local/cuda/include tools/probe/peer_park_probe.c -o peer_park_probe -lcuda -lpthread
 *   ./peer_park_probe
 * Each call runs on device 1 while device 0 waits on a value (in pinned host memory) that only
 * this program's later store lets go, or while it runs a 2 s kernel; a call that has not
 * returned after 3 s is reported as blocked, and the value is then stored to let it go. On
 * two H200s (driver 580, CUDA 13.0, 2026-11-30): the last cuDevicePrimaryCtxRelease of
 * device 1 (its context's destruction) blocks until device 0's value wait is met, whether
 * or not device 1 ever touched the memory or ran anything; see the output for the rest. */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
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
static const char* spin_ptx =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry spin(.param .u64 ns){ .reg .b64 %r<4>; .reg .pred %p;\n"
    " ld.param.u64 %r1, [ns]; mov.u64 %r2, %globaltimer; add.u64 %r1, %r1, %r2;\n"
    "L: mov.u64 %r3, %globaltimer; setp.lt.u64 %p, %r3, %r1; @%p bra L; ret; }\n";
static CUdevice d0, d1;
static CUcontext c0;
static CUdeviceptr word;
static volatile uint64_t* host_word;
static volatile int returned;
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}
typedef void (*call_fn)(void);
static void* runner(void* arg) {
  ((call_fn)arg)();
  returned = 1;
  return NULL;
}
static void call_primary_release(void) {
  CUcontext c1;
  CK(cuDevicePrimaryCtxRetain(&c1, d1));
  CK(cuCtxSetCurrent(c1));
  CK(cuCtxSetCurrent(NULL));
  CK(cuDevicePrimaryCtxRelease(d1)); /* the last reference: the context is destroyed */
}
static void call_ctx_destroy(void) {
  CUcontext c1;
#if CUDA_VERSION >= 13000
  CK(cuCtxCreate(&c1, NULL, 0, d1));
#else
  CK(cuCtxCreate(&c1, 0, d1));
#endif
  CK(cuCtxDestroy(c1));
}
static CUcontext c1_kept;
static void call_mem_free(void) {
  CUdeviceptr p;
  CK(cuCtxSetCurrent(c1_kept));
  CK(cuMemAlloc(&p, 1 << 20));
  CK(cuMemFree(p));
}
static void call_ctx_synchronize(void) {
  CK(cuCtxSetCurrent(c1_kept));
  CK(cuCtxSynchronize());
}
static void call_module_load(void) {
  CUmodule m;
  CK(cuCtxSetCurrent(c1_kept));
  CK(cuModuleLoadData(&m, spin_ptx));
  CK(cuModuleUnload(m));
}
static void probe(const char* what, call_fn fn, int kernel) {
  CUstream s;
  pthread_t t;
  double t0, took;
  int blocked = 0;
  CK(cuCtxSetCurrent(c0));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  *host_word = 0;
  if (kernel) {
    CUmodule m;
    CUfunction f;
    uint64_t ns = 2000000000ull;
    void* params[] = {&ns};
    CK(cuModuleLoadData(&m, spin_ptx));
    CK(cuModuleGetFunction(&f, m, "spin"));
    CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
  } else {
    CK(cuStreamWaitValue64(s, word, 1, CU_STREAM_WAIT_VALUE_GEQ));
  }
  usleep(100000);
  returned = 0;
  t0 = now_s();
  pthread_create(&t, NULL, runner, (void*)fn);
  while (!returned && now_s() - t0 < 3.0) usleep(1000);
  if (!returned && !kernel) {
    blocked = 1;
    *host_word = 1; /* a store: a CUDA call here could wait behind the blocked one */
  }
  pthread_join(t, NULL);
  took = now_s() - t0;
  *host_word = 1;
  printf("%-44s while device 0 %s: %s (%.3f s)\n", what, kernel ? "runs a 2 s kernel" : "waits on a value",
         blocked ? "BLOCKED until the value came" : "returned", took);
  CK(cuCtxSetCurrent(c0));
  CK(cuStreamSynchronize(s));
  CK(cuStreamDestroy(s));
}
int main(void) {
  int n = 0, kernel;
  setvbuf(stdout, NULL, _IONBF, 0);
  CK(cuInit(0));
  CK(cuDeviceGetCount(&n));
  if (n < 2) {
    printf("peer_park_probe: needs two GPUs\n");
    return 77;
  }
  CK(cuDeviceGet(&d0, 0));
  CK(cuDeviceGet(&d1, 1));
  CK(cuDevicePrimaryCtxRetain(&c0, d0));
  CK(cuCtxSetCurrent(c0));
  CK(cuMemHostAlloc((void**)&host_word, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CK(cuMemHostGetDevicePointer(&word, (void*)host_word, 0));
#if CUDA_VERSION >= 13000
  CK(cuCtxCreate(&c1_kept, NULL, 0, d1));
#else
  CK(cuCtxCreate(&c1_kept, 0, d1));
#endif
  for (kernel = 0; kernel < 2; ++kernel) {
    probe("device 1: last cuDevicePrimaryCtxRelease", call_primary_release, kernel);
    probe("device 1: cuCtxCreate + cuCtxDestroy", call_ctx_destroy, kernel);
    probe("device 1: cuMemAlloc + cuMemFree", call_mem_free, kernel);
    probe("device 1: cuCtxSynchronize", call_ctx_synchronize, kernel);
    probe("device 1: cuModuleLoadData + cuModuleUnload", call_module_load, kernel);
  }
  return 0;
}
