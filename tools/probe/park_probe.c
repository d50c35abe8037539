/* park_probe: which CUDA driver calls wait for a stream parked on cuStreamWaitValue64.
 *
 * The memop path of the queue parks GPU work on values the host may signal later; any call
 * that waits for the whole device then waits for that signal. Run on a real GPU:
 *   gcc -O1 -I/usr/local/cuda/include tools/probe/park_probe.c -o park_probe -lcuda -lpthread
 *   ./park_probe
 * On an H200 (driver 580, CUDA 13.0, 2026-11-25; the same with CUDA_MODULE_LOADING=EAGER
 * except that cuLibraryLoadData then blocks too) these block until the value comes:
 * cuModuleLoadData (PTX or cubin), cuModuleUnload, a first launch of a cuLibrary kernel,
 * cuMemFree, cuMemFreeHost, cuMemHostRegister, cuCtxSynchronize. These do not: cuMemAlloc,
 * cuMemHostAlloc, pool alloc/free (also when the pool grows, also on the parked stream),
 * cuMemPoolTrimTo, cuGraphInstantiate and launch, synchronous cuMemcpyHtoD, event and
 * stream creation, cuModuleGetFunction and a first launch from a module loaded before, and
 * cuModuleLoadData in another context. Graphs of a kernel node: the first instantiation of
 * a kernel never used blocks; after a stream launch, a graph of it, or cuFuncLoad it does
 * not, nor does cuGraphExecDestroy or 200 instantiations and destructions in a row.
 * softcuda models the frees, cuCtxSynchronize, module loads and that first instantiation. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static CUcontext ctx;
static volatile int done_flag;
static const char* ptx = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k(.param .u64 p){ ret; }\n";
typedef int (*probe_fn)(void);
static CUstream other;
static int p_memalloc(void) {
  CUdeviceptr d;
  if (cuMemAlloc(&d, 1 << 20)) return 1;
  return cuMemFree(d) ? 2 : 0;
}
static int p_memalloc_only(void) {
  CUdeviceptr d;
  return cuMemAlloc(&d, 1 << 20) ? 1 : 0;
}
static int p_hostalloc(void) {
  void* h;
  return cuMemHostAlloc(&h, 4096, 0) ? 1 : 0;
}
static int p_module(void) {
  CUmodule m;
  return cuModuleLoadData(&m, ptx) ? 1 : 0;
}
static int p_memcpy(void) {
  static char buf[256];
  CUdeviceptr d;
  if (cuMemAlloc(&d, 256)) return 1;
  return cuMemcpyHtoD(d, buf, 256) ? 2 : 0;
}
static int p_memcpy_async(void) {
  static char buf[256];
  CUdeviceptr d;
  if (cuMemAlloc(&d, 256)) return 1;
  return cuMemcpyHtoDAsync(d, buf, 256, other) || cuStreamSynchronize(other) ? 2 : 0;
}
static int p_graph(void) {
  CUgraph g;
  CUgraphExec e;
  CUgraphNode n;
  if (cuGraphCreate(&g, 0)) return 1;
  if (cuGraphAddEmptyNode(&n, g, NULL, 0)) return 2;
  if (cuGraphInstantiate(&e, g, 0)) return 3;
  if (cuGraphLaunch(e, other) || cuStreamSynchronize(other)) return 4;
  if (cuGraphExecDestroy(e)) return 5;
  return cuGraphDestroy(g) ? 6 : 0;
}
static int p_event(void) {
  CUevent ev;
  if (cuEventCreate(&ev, 0)) return 1;
  return cuEventDestroy(ev) ? 2 : 0;
}
static int p_stream(void) {
  CUstream s;
  if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) return 1;
  return cuStreamDestroy(s) ? 2 : 0;
}
static int p_pool(void) {
  CUdeviceptr d;
  if (cuMemAllocAsync(&d, 4096, other)) return 1;
  if (cuMemFreeAsync(d, other)) return 2;
  return cuStreamSynchronize(other) ? 3 : 0;
}
static int p_memfree(void) {
  CUdeviceptr d;
  if (cuMemAlloc(&d, 4096)) return 1;
  return cuMemFree(d) ? 2 : 0;
}
static int p_ctxsync(void) { return cuCtxSynchronize() ? 1 : 0; }
/* Module variants: a cubin linked before the park, loaded once before it (lazy loading defers
 * the kernel's upload to its first use), cuLibrary (context-independent), a second context. */
static void* cubin;
static size_t cubin_size;
static CUmodule early;
static CUcontext ctx2;
static int p_module_cubin(void) {
  CUmodule m;
  return cuModuleLoadData(&m, cubin) ? 1 : 0;
}
static int p_getfunction(void) {
  CUfunction f;
  return cuModuleGetFunction(&f, early, "k") ? 1 : 0;
}
static int p_first_launch(void) {
  CUfunction f;
  unsigned long long z = 0;
  void* args[] = {&z};
  if (cuModuleGetFunction(&f, early, "k")) return 1;
  return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, other, args, NULL) || cuStreamSynchronize(other) ? 2 : 0;
}
static int p_library(void) {
  CUlibrary l;
  CUkernel k;
  if (cuLibraryLoadData(&l, cubin, NULL, NULL, 0, NULL, NULL, 0)) return 1;
  return cuLibraryGetKernel(&k, l, "k") ? 2 : 0;
}
static int p_library_launch(void) {
  CUlibrary l;
  CUkernel k;
  unsigned long long z = 0;
  void* args[] = {&z};
  if (cuLibraryLoadData(&l, cubin, NULL, NULL, 0, NULL, NULL, 0)) return 1;
  if (cuLibraryGetKernel(&k, l, "k")) return 2;
  return cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, other, args, NULL) || cuStreamSynchronize(other) ? 3 : 0;
}
static int p_module_ctx2(void) {
  CUmodule m;
  if (cuCtxSetCurrent(ctx2)) return 1;
  return cuModuleLoadData(&m, cubin) ? 2 : 0;
}
static int p_unload(void) {
  CUmodule m;
  if (cuModuleLoadData(&m, cubin)) return 1;
  return 0;
}
static CUmodule unload_me;
static int p_unload_only(void) { return cuModuleUnload(unload_me) ? 1 : 0; }
static CUmemoryPool big_pool;
static CUstream parked_stream;
static int p_pool_grow(void) {
  CUdeviceptr d;
  if (cuMemAllocFromPoolAsync(&d, (size_t)256 << 20, big_pool, other)) return 1;
  if (cuMemFreeAsync(d, other)) return 2;
  return cuStreamSynchronize(other) ? 3 : 0;
}
static int p_pool_grow_on_parked(void) {
  CUdeviceptr d;
  if (cuMemAllocFromPoolAsync(&d, (size_t)512 << 20, big_pool, parked_stream)) return 1;
  return cuMemFreeAsync(d, parked_stream) ? 2 : 0;
}
/* A graph of one kernel node: of a function launched before (warm) and of one never used
 * (fresh: lazy loading uploads it at its first use). */
static CUmodule fresh;
static int p_graph_kernel_of(CUmodule m) {
  CUgraph g;
  CUgraphExec e;
  CUgraphNode n;
  CUDA_KERNEL_NODE_PARAMS kp;
  CUfunction f;
  unsigned long long z = 0;
  void* args[] = {&z};
  if (cuModuleGetFunction(&f, m, "k")) return 1;
  memset(&kp, 0, sizeof(kp));
  kp.func = f;
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = args;
  if (cuGraphCreate(&g, 0) || cuGraphAddKernelNode(&n, g, NULL, 0, &kp)) return 2;
  if (cuGraphInstantiateWithFlags(&e, g, 0)) return 3;
  if (cuGraphLaunch(e, other) || cuStreamSynchronize(other)) return 4;
  if (cuGraphExecDestroy(e)) return 5;
  return cuGraphDestroy(g) ? 6 : 0;
}
static int p_graph_kernel_warm(void) { return p_graph_kernel_of(early); }
/* Ways to make a module's kernels ready for graphs before any park: cuFuncLoad, a first
 * stream launch, a throwaway graph instantiation. */
static CUmodule fresh_funcload, fresh_launched, fresh_graphed;
static int p_graph_after_funcload(void) { return p_graph_kernel_of(fresh_funcload); }
static int p_graph_after_launch(void) { return p_graph_kernel_of(fresh_launched); }
static int p_graph_after_graph(void) { return p_graph_kernel_of(fresh_graphed); }
/* Graph execs made before the park: destroyed during it; and many made and destroyed during
 * it (the driver may reclaim the memory of destroyed execs at a later instantiation). */
static CUgraphExec early_exec;
static int p_exec_destroy(void) { return cuGraphExecDestroy(early_exec) ? 1 : 0; }
static int p_graph_churn(void) {
  int i, r;
  for (i = 0; i < 200; ++i)
    if ((r = p_graph_kernel_of(early)) != 0) return r;
  return 0;
}
static int p_graph_kernel_fresh(void) { return p_graph_kernel_of(fresh); }
static int p_pool_trim(void) {
  CUmemoryPool pool;
  if (cuDeviceGetDefaultMemPool(&pool, 0)) return 1;
  return cuMemPoolTrimTo(pool, 0) ? 2 : 0;
}
static int p_freehost(void) {
  void* h;
  if (cuMemHostAlloc(&h, 4096, 0)) return 1;
  return cuMemFreeHost(h) ? 2 : 0;
}
static int p_hostregister(void) {
  static char buf[8192] __attribute__((aligned(4096)));
  if (cuMemHostRegister(buf, 4096, 0)) return 1;
  return cuMemHostUnregister(buf) ? 2 : 0;
}
/* Graphs of the other node kinds gpuhal records (each probe is the first of its kind in the
 * process), large graphs, and many live executable graphs. */
static CUdeviceptr scratch;
static void* host_scratch;
static int graph_run(CUgraph g) {
  CUgraphExec e;
  if (cuGraphInstantiateWithFlags(&e, g, 0)) return 13;
  if (cuGraphLaunch(e, other) || cuStreamSynchronize(other)) return 14;
  if (cuGraphExecDestroy(e)) return 15;
  return cuGraphDestroy(g) ? 16 : 0;
}
static int graph_memset(unsigned elem) {
  CUgraph g;
  CUgraphNode n;
  CUDA_MEMSET_NODE_PARAMS mp;
  memset(&mp, 0, sizeof(mp));
  mp.dst = scratch;
  mp.elementSize = elem;
  mp.width = 256 / elem;
  mp.height = 1;
  mp.value = 7;
  if (cuGraphCreate(&g, 0) || cuGraphAddMemsetNode(&n, g, NULL, 0, &mp, ctx)) return 2;
  return graph_run(g);
}
static int p_graph_memset1(void) { return graph_memset(1); }
static int p_graph_memset4(void) { return graph_memset(4); }
static int p_graph_memset2(void) { return graph_memset(2); }
static int graph_memcpy(CUmemorytype st, CUmemorytype dt) {
  CUgraph g;
  CUgraphNode n;
  CUDA_MEMCPY3D cp;
  memset(&cp, 0, sizeof(cp));
  cp.srcMemoryType = st;
  cp.dstMemoryType = dt;
  if (st == CU_MEMORYTYPE_HOST)
    cp.srcHost = host_scratch;
  else
    cp.srcDevice = scratch + 4096;
  if (dt == CU_MEMORYTYPE_HOST)
    cp.dstHost = host_scratch;
  else
    cp.dstDevice = scratch;
  cp.WidthInBytes = 256;
  cp.Height = 1;
  cp.Depth = 1;
  if (cuGraphCreate(&g, 0) || cuGraphAddMemcpyNode(&n, g, NULL, 0, &cp, ctx)) return 2;
  return graph_run(g);
}
static int p_graph_memcpy_d2d(void) { return graph_memcpy(CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE); }
static int p_graph_memcpy_h2d(void) { return graph_memcpy(CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE); }
static int p_graph_memcpy_d2h(void) { return graph_memcpy(CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST); }
static int p_stream_memset(void) {
  return cuMemsetD32Async(scratch, 3, 64, other) || cuStreamSynchronize(other) ? 1 : 0;
}
static int p_graph_big(void) {
  CUgraph g;
  CUgraphNode prev = NULL, n;
  CUDA_KERNEL_NODE_PARAMS kp;
  unsigned long long z = 0;
  void* args[] = {&z};
  int i;
  memset(&kp, 0, sizeof(kp));
  if (cuModuleGetFunction(&kp.func, early, "k")) return 1;
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = args;
  if (cuGraphCreate(&g, 0)) return 2;
  for (i = 0; i < 4000; ++i) {
    if (cuGraphAddKernelNode(&n, g, prev ? &prev : NULL, prev ? 1 : 0, &kp)) return 3;
    prev = n;
  }
  return graph_run(g);
}
static volatile int live_progress;
static int p_live_instantiate_only(void) {
  static CUgraphExec live[20000];
  CUgraph g;
  CUgraphNode n;
  CUDA_KERNEL_NODE_PARAMS kp;
  unsigned long long z = 0;
  void* args[] = {&z};
  int i;
  memset(&kp, 0, sizeof(kp));
  if (cuModuleGetFunction(&kp.func, early, "k")) return 1;
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = args;
  if (cuGraphCreate(&g, 0) || cuGraphAddKernelNode(&n, g, NULL, 0, &kp)) return 2;
  for (i = 0; i < 20000; ++i) {
    if (cuGraphInstantiateWithFlags(&live[i], g, 0)) return 3;
    live_progress = i + 1;
  }
  for (i = 0; i < 20000; ++i)
    if (cuGraphExecDestroy(live[i])) return 6;
  return cuGraphDestroy(g) ? 7 : 0;
}
static int p_launch_many(void) {
  CUgraph g;
  CUgraphNode n;
  CUgraphExec e;
  CUDA_KERNEL_NODE_PARAMS kp;
  unsigned long long z = 0;
  void* args[] = {&z};
  int i;
  memset(&kp, 0, sizeof(kp));
  if (cuModuleGetFunction(&kp.func, early, "k")) return 1;
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = args;
  if (cuGraphCreate(&g, 0) || cuGraphAddKernelNode(&n, g, NULL, 0, &kp) || cuGraphInstantiateWithFlags(&e, g, 0))
    return 2;
  for (i = 0; i < 20000; ++i) {
    if (cuGraphLaunch(e, other)) return 3;
    live_progress = i + 1;
  }
  if (cuStreamSynchronize(other)) return 4;
  return cuGraphExecDestroy(e) || cuGraphDestroy(g) ? 7 : 0;
}
static int p_graph_many_live(void) {
  static CUgraphExec live[3000];
  CUgraph g;
  CUgraphNode n;
  CUDA_KERNEL_NODE_PARAMS kp;
  unsigned long long z = 0;
  void* args[] = {&z};
  int i;
  memset(&kp, 0, sizeof(kp));
  if (cuModuleGetFunction(&kp.func, early, "k")) return 1;
  kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = args;
  if (cuGraphCreate(&g, 0) || cuGraphAddKernelNode(&n, g, NULL, 0, &kp)) return 2;
  for (i = 0; i < 3000; ++i)
    if (cuGraphInstantiateWithFlags(&live[i], g, 0)) return 3;
  for (i = 0; i < 3000; ++i)
    if (cuGraphLaunch(live[i], other)) return 4;
  if (cuStreamSynchronize(other)) return 5;
  for (i = 0; i < 3000; ++i)
    if (cuGraphExecDestroy(live[i])) return 6;
  return cuGraphDestroy(g) ? 7 : 0;
}
typedef struct {
  const char* name;
  probe_fn fn;
} probe_t;
static probe_t* current;
static void* runner(void* a) {
  (void)a;
  cuCtxSetCurrent(ctx);
  int r = current->fn();
  printf("  %-22s returned %d\n", current->name, r);
  fflush(stdout);
  done_flag = 1;
  return NULL;
}
int main(void) {
  CUdevice dev;
  CUstream parked;
  volatile unsigned long long* word;
  CUdeviceptr dword;
  unsigned i;
  probe_t probes[] = {{"cuEventCreate/Destroy", p_event},
                      {"cuStreamCreate/Destroy", p_stream},
                      {"cuMemAllocAsync/FreeAsync", p_pool},
                      {"cuMemHostAlloc", p_hostalloc},
                      {"cuModuleLoadData", p_module},
                      {"cuGraphInstantiate+launch", p_graph},
                      {"cuMemcpyHtoDAsync", p_memcpy_async},
                      {"cuMemAlloc", p_memalloc_only},
                      {"cuMemcpyHtoD (sync)", p_memcpy},
                      {"cuMemAlloc+cuMemFree", p_memalloc},
                      {"cuMemFree", p_memfree},
                      {"cuCtxSynchronize", p_ctxsync},
                      {"cuModuleLoadData cubin", p_module_cubin},
                      {"cuModuleGetFunction (lazy)", p_getfunction},
                      {"first launch (lazy)", p_first_launch},
                      {"cuLibraryLoadData", p_library},
                      {"cuLibrary launch", p_library_launch},
                      {"cuModuleLoadData ctx2", p_module_ctx2},
                      {"cuMemFreeHost", p_freehost},
                      {"cuMemHostRegister", p_hostregister},
                      {"cuModuleUnload", p_unload_only},
                      {"cuMemPoolTrimTo", p_pool_trim},
                      {"pool growth (256 MB)", p_pool_grow},
                      {"pool growth on the parked stream", p_pool_grow_on_parked},
                      {"graph of a used kernel", p_graph_kernel_warm},
                      {"graph of an unused kernel", p_graph_kernel_fresh},
                      {"graph after cuFuncLoad", p_graph_after_funcload},
                      {"graph after a stream launch", p_graph_after_launch},
                      {"graph after a graph", p_graph_after_graph},
                      {"cuGraphExecDestroy", p_exec_destroy},
                      {"200 graphs made and destroyed", p_graph_churn},
                      {"graph memset 1 B (first)", p_graph_memset1},
                      {"graph memset 4 B (first)", p_graph_memset4},
                      {"graph memset 2 B (first)", p_graph_memset2},
                      {"graph memcpy D2D (first)", p_graph_memcpy_d2d},
                      {"graph memcpy H2D (first)", p_graph_memcpy_h2d},
                      {"graph memcpy D2H (first)", p_graph_memcpy_d2h},
                      {"cuMemsetD32Async (first)", p_stream_memset},
                      {"graph of 4000 kernel nodes", p_graph_big},
                      {"3000 live graph execs", p_graph_many_live},
                      {"20000 live instantiations", p_live_instantiate_only},
                      {"20000 launches of one graph", p_launch_many}};
  (void)p_unload;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
    printf("init failed\n");
    return 1;
  }
  cuStreamCreate(&parked, CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&other, CU_STREAM_NON_BLOCKING);
  parked_stream = parked;
  {
    CUmemPoolProps props;
    unsigned long long zero = 0;
    memset(&props, 0, sizeof(props));
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    if (cuMemPoolCreate(&big_pool, &props) ||
        cuMemPoolSetAttribute(big_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero)) {
      printf("pool failed\n");
      return 1;
    }
  }
  if (cuMemAlloc(&scratch, 1 << 16) || cuMemHostAlloc(&host_scratch, 4096, 0)) {
    printf("scratch failed\n");
    return 1;
  }
  cuMemHostAlloc((void**)&word, 8, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  cuMemHostGetDevicePointer(&dword, (void*)word, 0);
  {
    CUlinkState ls;
    void* out;
    if (cuLinkCreate(0, NULL, NULL, &ls) ||
        cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void*)ptx, strlen(ptx) + 1, "k", 0, NULL, NULL) ||
        cuLinkComplete(ls, &out, &cubin_size)) {
      printf("link failed\n");
      return 1;
    }
    cubin = malloc(cubin_size);
    memcpy(cubin, out, cubin_size);
    cuLinkDestroy(ls);
    if (cuModuleLoadData(&early, cubin) || cuModuleLoadData(&unload_me, cubin) || cuModuleLoadData(&fresh, cubin)) {
      printf("early load failed\n");
      return 1;
    }
    {
      CUfunction f;
      unsigned long long z = 0;
      void* args[] = {&z};
      if (cuModuleLoadData(&fresh_funcload, cubin) || cuModuleLoadData(&fresh_launched, cubin) ||
          cuModuleLoadData(&fresh_graphed, cubin)) {
        printf("load failed\n");
        return 1;
      }
      if (cuModuleGetFunction(&f, fresh_funcload, "k") || cuFuncLoad(f)) {
        printf("cuFuncLoad failed\n");
        return 1;
      }
      if (cuModuleGetFunction(&f, fresh_launched, "k") || cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, other, args, NULL) ||
          cuStreamSynchronize(other)) {
        printf("launch failed\n");
        return 1;
      }
      if (p_graph_kernel_of(fresh_graphed)) {
        printf("graph failed\n");
        return 1;
      }
      {
        CUgraph g;
        CUgraphNode n;
        CUDA_KERNEL_NODE_PARAMS kp;
        memset(&kp, 0, sizeof(kp));
        if (cuModuleGetFunction(&kp.func, early, "k")) return 1;
        kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
        kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = args;
        if (cuGraphCreate(&g, 0) || cuGraphAddKernelNode(&n, g, NULL, 0, &kp) ||
            cuGraphInstantiateWithFlags(&early_exec, g, 0) || cuGraphLaunch(early_exec, other) ||
            cuStreamSynchronize(other)) {
          printf("early exec failed\n");
          return 1;
        }
      }
    }
    if (cuCtxCreate(&ctx2, NULL, 0, dev)) {
      printf("ctx2 failed\n");
      return 1;
    }
    cuCtxSetCurrent(ctx);
  }
  for (i = 0; i < sizeof(probes) / sizeof(probes[0]); ++i) {
    pthread_t t;
    int waited = 0;
    if (getenv("PROBE_ONLY") && !strstr(probes[i].name, getenv("PROBE_ONLY"))) continue;
    *word = 0;
    cuStreamWaitValue64(parked, dword, 1, CU_STREAM_WAIT_VALUE_GEQ);
    usleep(20000);
    done_flag = 0;
    current = &probes[i];
    pthread_create(&t, NULL, runner, NULL);
    while (!done_flag && waited < 2000) {
      usleep(1000);
      waited++;
    }
    printf("%-26s %s while a stream is parked (progress %d)\n", probes[i].name, done_flag ? "returned" : "BLOCKS (2 s)",
           live_progress);
    live_progress = 0;
    fflush(stdout);
    *word = 1; /* release the parked stream */
    pthread_join(t, NULL);
    cuStreamSynchronize(parked);
  }
  return 0;
}
