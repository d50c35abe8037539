/* live_probe: instantiating graph executables while a stream waits on cuStreamWaitValue64.
 *
 * park_probe found that some instantiations wait for the parked stream even though graphs
 * of a used kernel instantiate freely. This probe holds executables alive: the driver grows
 * a per-context store for them in steps (a slow instantiation every few dozen), and a step
 * taken while a stream is parked waits for the stream. What it prints on a real GPU:
 *   gcc -O1 -I/usr/local/cuda/include tools/probe/live_probe.c -o live_probe -lcuda -lpthread
 *   NODES=1 KIND=kernel ./live_probe      (graphs of KIND kernel, memset, memcpy, empty nodes;
 *                                          KIND event, stream, alloc, hostalloc: those objects)
 * 1. the instantiations that grew the store (unparked); 2. how many live executables it
 * takes to block while parked in a fresh process; 3. whether executables made and
 * destroyed before parking leave room that later instantiations use without blocking. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static CUcontext ctx;
static CUstream other;
static CUgraph g;
static void drop_all(void);
static volatile int progress, done_flag;
static int target, nlive;
static CUgraphExec live[20000];
static const char* ptx = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k(.param .u64 p){ ret; }\n";
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static const char* kind;
static CUevent events[20000];
static CUstream streams[20000];
static CUdeviceptr ptrs[20000];
static void* hosts[20000];
static int make_one(int i) {
  if (!strcmp(kind, "event")) return cuEventCreate(&events[i], CU_EVENT_DISABLE_TIMING);
  if (!strcmp(kind, "stream")) return cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING);
  if (!strcmp(kind, "alloc")) return cuMemAlloc(&ptrs[i], 4096);
  if (!strcmp(kind, "hostalloc"))
    return cuMemHostAlloc(&hosts[i], 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  return cuGraphInstantiateWithFlags(&live[i], g, 0);
}
static void* grow(void* a) {
  (void)a;
  cuCtxSetCurrent(ctx);
  while (nlive < target) {
    if (make_one(nlive)) {
      printf("creation failed\n");
      break;
    }
    progress = ++nlive;
  }
  done_flag = 1;
  return NULL;
}
static void drop(void) { drop_all(); }
static CUstream parked;
static volatile unsigned long long* word;
static CUdeviceptr dword;
static void parked_try(int upto, const char* what) {
  pthread_t t;
  int waited = 0;
  *word = 0;
  cuStreamWaitValue64(parked, dword, 1, CU_STREAM_WAIT_VALUE_GEQ);
  usleep(20000);
  done_flag = 0;
  target = upto;
  pthread_create(&t, NULL, grow, NULL);
  while (!done_flag && waited < 1000) {
    usleep(1000);
    waited++;
  }
  printf("%-52s %s at %d live\n", what, done_flag ? "ok" : "BLOCKS", progress);
  *word = 1;
  pthread_join(t, NULL);
  cuStreamSynchronize(parked);
  fflush(stdout);
}
static void drop_all(void) {
  while (nlive > 0) {
    --nlive;
    if (!strcmp(kind, "event"))
      cuEventDestroy(events[nlive]);
    else if (!strcmp(kind, "stream"))
      cuStreamDestroy(streams[nlive]);
    else if (!strcmp(kind, "alloc")) { /* cuMemFree waits for idle too: leak, this is a probe */
    } else if (!strcmp(kind, "hostalloc")) {
    } else
      cuGraphExecDestroy(live[nlive]);
  }
}
int main(void) {
  CUdevice dev;
  CUmodule mod;
  CUfunction f;
  CUgraphNode n, prev = NULL;
  unsigned long long z = 0;
  void* args[] = {&z};
  CUdeviceptr scratch;
  int i, nodes = getenv("NODES") ? atoi(getenv("NODES")) : 1, slow = 0;
  double t0, grow_us = 0;
  kind = getenv("KIND") ? getenv("KIND") : "kernel";
  cuInit(0);
  cuDeviceGet(&dev, 0);
  cuDevicePrimaryCtxRetain(&ctx, dev);
  cuCtxSetCurrent(ctx);
  cuStreamCreate(&parked, CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&other, CU_STREAM_NON_BLOCKING);
  cuMemHostAlloc((void**)&word, 8, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  cuMemHostGetDevicePointer(&dword, (void*)word, 0);
  cuMemAlloc(&scratch, 1 << 20);
  cuModuleLoadData(&mod, ptx);
  cuModuleGetFunction(&f, mod, "k");
  cuFuncLoad(f);
  cuGraphCreate(&g, 0);
  for (i = 0; i < nodes; ++i) {
    CUresult r;
    if (!strcmp(kind, "kernel")) {
      CUDA_KERNEL_NODE_PARAMS kp;
      memset(&kp, 0, sizeof(kp));
      kp.func = f;
      kp.kernelParams = args;
      kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
      kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
      r = cuGraphAddKernelNode(&n, g, prev ? &prev : NULL, prev ? 1 : 0, &kp);
    } else if (!strcmp(kind, "memset")) {
      CUDA_MEMSET_NODE_PARAMS mp;
      memset(&mp, 0, sizeof(mp));
      mp.dst = scratch;
      mp.elementSize = 4;
      mp.width = 64;
      mp.height = 1;
      r = cuGraphAddMemsetNode(&n, g, prev ? &prev : NULL, prev ? 1 : 0, &mp, ctx);
    } else if (!strcmp(kind, "memcpy")) {
      CUDA_MEMCPY3D cp;
      memset(&cp, 0, sizeof(cp));
      cp.srcMemoryType = cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      cp.srcDevice = scratch + 4096;
      cp.dstDevice = scratch;
      cp.WidthInBytes = 256;
      cp.Height = cp.Depth = 1;
      r = cuGraphAddMemcpyNode(&n, g, prev ? &prev : NULL, prev ? 1 : 0, &cp, ctx);
    } else
      r = cuGraphAddEmptyNode(&n, g, prev ? &prev : NULL, prev ? 1 : 0);
    if (r) {
      printf("add node failed %d\n", r);
      return 1;
    }
    prev = n;
  }
  printf("KIND=%s NODES=%d\n", kind, nodes);
  parked_try(getenv("FIRST") ? atoi(getenv("FIRST")) : 5000, "fresh process: live objects while parked");
  drop();
  if (getenv("ONLY_FIRST")) return 0;
  {
    const char* park_kind = kind;
    double total = now();
    if (getenv("PRE")) kind = getenv("PRE");
    for (i = 0; i < 1000; ++i) {
      t0 = now();
      make_one(nlive++);
      t0 = now() - t0;
      if (t0 > 200) {
        slow++;
        grow_us += t0;
      }
    }
    printf("1000 live %s unparked: %.0f us, %d creations over 200 us (%.0f us in them)\n", kind, now() - total, slow,
           grow_us);
    t0 = now();
    drop();
    printf("destroying 1000: %.0f us\n", now() - t0);
    kind = park_kind;
  }
  parked_try(900, "after 1000 made and destroyed: 900 live while parked");
  drop();
  parked_try(1400, "then 1400 live while parked");
  drop();
  return 0;
}
