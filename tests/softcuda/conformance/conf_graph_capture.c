/* Conformance: stream capture - operations on a capturing stream become graph nodes
 * instead of running; forks and joins through events; the rules around capture. */
#include "conf.h"

#include <pthread.h>

#define N 256

static CUmodule g_mod_fill;
static CUfunction g_fill; /* fill_u32(dst, value, n) */

static int setup(void) {
  if (!conf_ctx(0)) return 0;
  return conf_kernel("fill_u32", &g_mod_fill, &g_fill) == CUDA_SUCCESS;
}
static void teardown(void) {
  cu.cuModuleUnload(g_mod_fill);
  conf_ctx_done(0);
}

static CUdeviceptr dalloc(void) {
  CUdeviceptr d = 0;
  if (cu.cuMemAlloc(&d, N * 4) != CUDA_SUCCESS) return 0;
  cu.cuMemsetD32(d, 0, N);
  return d;
}

static int all_eq(CUdeviceptr d, unsigned v, unsigned n) {
  unsigned buf[N];
  unsigned i;
  if (cu.cuMemcpyDtoH(buf, d, (size_t)n * 4) != CUDA_SUCCESS) return 0;
  for (i = 0; i < n; ++i)
    if (buf[i] != v) return 0;
  return 1;
}

static CUresult fill(CUstream s, CUdeviceptr dst, unsigned value, unsigned n) {
  void* args[3];
  args[0] = &dst;
  args[1] = &value;
  args[2] = &n;
  return cu.cuLaunchKernel(g_fill, (n + 63) / 64, 1, 1, 64, 1, 1, 0, s, args, NULL);
}

static void CUDA_CB count_calls(void* user) { __atomic_add_fetch((int*)user, 1, __ATOMIC_SEQ_CST); }

TU_TEST(capture_records_instead_of_running) {
  CUstream s;
  CUgraph g = NULL;
  CUgraphExec x;
  CUgraphNode nodes[8], from[8], to[8];
  CUgraphNodeType t;
  CUstreamCaptureStatus st;
  CUdeviceptr A, B, C;
  size_t n, i;
  int calls = 0;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc(), B = dalloc(), C = dalloc();
  TU_REQUIRE(A && B && C);
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamIsCapturing(s, &st));
  TU_CHECK_EQ_INT(st, CU_STREAM_CAPTURE_STATUS_NONE);
  CONF_OK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CONF_OK(cu.cuStreamIsCapturing(s, &st));
  TU_CHECK_EQ_INT(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CONF_OK(fill(s, A, 3, N));                            /* kernel */
  CONF_OK(cu.cuMemcpyDtoDAsync(B, A, N * 4, s));        /* memcpy */
  CONF_OK(cu.cuMemsetD32Async(C, 6, N / 2, s));         /* memset */
  CONF_OK(cu.cuLaunchHostFunc(s, count_calls, &calls)); /* host */
  CONF_OK(cu.cuStreamEndCapture(s, &g));
  TU_REQUIRE(g != NULL);
  CONF_OK(cu.cuStreamIsCapturing(s, &st));
  TU_CHECK_EQ_INT(st, CU_STREAM_CAPTURE_STATUS_NONE);
  /* nothing ran */
  TU_CHECK(all_eq(A, 0, N) && all_eq(B, 0, N) && all_eq(C, 0, N));
  TU_CHECK_EQ_INT(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 0);
  /* a chain of four nodes, in order */
  n = 8;
  CONF_OK(cu.cuGraphGetNodes(g, nodes, &n));
  TU_REQUIRE(n == 4);
  n = 8;
  CONF_OK(cu.cuGraphGetEdges(g, from, to, &n));
  TU_CHECK_EQ_INT(n, 3);
  {
    int kinds[4] = {0, 0, 0, 0};
    for (i = 0; i < 4; ++i) {
      CONF_OK(cu.cuGraphNodeGetType(nodes[i], &t));
      kinds[0] += t == CU_GRAPH_NODE_TYPE_KERNEL;
      kinds[1] += t == CU_GRAPH_NODE_TYPE_MEMCPY;
      kinds[2] += t == CU_GRAPH_NODE_TYPE_MEMSET;
      kinds[3] += t == CU_GRAPH_NODE_TYPE_HOST;
    }
    TU_CHECK(kinds[0] == 1 && kinds[1] == 1 && kinds[2] == 1 && kinds[3] == 1);
  }
  /* the edges form kernel -> memcpy -> memset -> host */
  for (i = 0; i < n; ++i) {
    CUgraphNodeType tf, tt;
    CONF_OK(cu.cuGraphNodeGetType(from[i], &tf));
    CONF_OK(cu.cuGraphNodeGetType(to[i], &tt));
    TU_CHECK((tf == CU_GRAPH_NODE_TYPE_KERNEL && tt == CU_GRAPH_NODE_TYPE_MEMCPY) ||
             (tf == CU_GRAPH_NODE_TYPE_MEMCPY && tt == CU_GRAPH_NODE_TYPE_MEMSET) ||
             (tf == CU_GRAPH_NODE_TYPE_MEMSET && tt == CU_GRAPH_NODE_TYPE_HOST));
  }
  /* the graph runs, more than once */
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  CONF_OK(cu.cuGraphLaunch(x, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(all_eq(A, 3, N) && all_eq(B, 3, N) && all_eq(C, 6, N / 2));
  TU_CHECK_EQ_INT(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 1);
  CONF_OK(cu.cuMemsetD32(B, 0, N));
  CONF_OK(cu.cuGraphLaunch(x, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(all_eq(B, 3, N));
  TU_CHECK_EQ_INT(__atomic_load_n(&calls, __ATOMIC_SEQ_CST), 2);
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A), cu.cuMemFree(B), cu.cuMemFree(C);
  teardown();
}

/* s1 forks s2 through an event, both work, s1 joins s2 back: two branches in the graph. */
TU_TEST(capture_fork_and_join) {
  CUstream s1, s2;
  CUevent fork, join;
  CUgraph g = NULL;
  CUstreamCaptureStatus st;
  CUdeviceptr A, B, C;
  size_t n;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc(), B = dalloc(), C = dalloc();
  TU_REQUIRE(A && B && C);
  CONF_OK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CONF_OK(cu.cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  CONF_OK(cu.cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CONF_OK(fill(s1, A, 1, N));
  CONF_OK(cu.cuEventRecord(fork, s1));
  CONF_OK(cu.cuStreamWaitEvent(s2, fork, 0)); /* s2 joins the capture */
  CONF_OK(cu.cuStreamIsCapturing(s2, &st));
  TU_CHECK_EQ_INT(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CONF_OK(cu.cuMemcpyDtoDAsync(B, A, N * 4, s2)); /* after the fill */
  CONF_OK(fill(s1, C, 2, N));                     /* concurrent with the copy */
  CONF_OK(cu.cuEventRecord(join, s2));
  CONF_OK(cu.cuStreamWaitEvent(s1, join, 0));
  CONF_OK(cu.cuMemcpyDtoDAsync(C, B, N * 4 / 2, s1)); /* after both */
  CONF_OK(cu.cuStreamEndCapture(s1, &g));
  TU_REQUIRE(g != NULL);
  CONF_OK(cu.cuStreamIsCapturing(s2, &st));
  TU_CHECK_EQ_INT(st, CU_STREAM_CAPTURE_STATUS_NONE);
  CONF_OK(cu.cuGraphGetNodes(g, NULL, &n));
  TU_CHECK_EQ_INT(n, 4);
  CONF_OK(cu.cuGraphGetEdges(g, NULL, NULL, &n));
  TU_CHECK_EQ_INT(n, 4); /* fillA->copyB, fillA->fillC, copyB->copyC, fillC->copyC */
  {
    CUgraphExec x;
    CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
    CONF_OK(cu.cuGraphLaunch(x, s1));
    CONF_OK(cu.cuStreamSynchronize(s1));
    CONF_OK(cu.cuGraphExecDestroy(x));
  }
  TU_CHECK(all_eq(A, 1, N) && all_eq(B, 1, N) && all_eq(C, 1, N / 2));
  {
    unsigned v = 0;
    CONF_OK(cu.cuMemcpyDtoH(&v, C + (N - 1) * 4, 4));
    TU_CHECK_EQ_INT(v, 2);
  }
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuEventDestroy(fork));
  CONF_OK(cu.cuEventDestroy(join));
  CONF_OK(cu.cuStreamDestroy(s1));
  CONF_OK(cu.cuStreamDestroy(s2));
  cu.cuMemFree(A), cu.cuMemFree(B), cu.cuMemFree(C);
  teardown();
}

TU_TEST(capture_unjoined_fork_fails) {
  CUstream s1, s2;
  CUevent fork;
  CUgraph g = (CUgraph)(uintptr_t)1;
  CUstreamCaptureStatus st;
  CUdeviceptr A;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc();
  TU_REQUIRE(A);
  CONF_OK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CONF_OK(cu.cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CONF_OK(cu.cuEventRecord(fork, s1));
  CONF_OK(cu.cuStreamWaitEvent(s2, fork, 0));
  CONF_OK(fill(s2, A, 1, N));
  CONF_EQ(cu.cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  TU_CHECK(g == NULL);
  /* the origin is out of capture afterwards, and nothing ran */
  CONF_OK(cu.cuStreamIsCapturing(s1, &st));
  TU_CHECK_EQ_INT(st, CU_STREAM_CAPTURE_STATUS_NONE);
  if (conf_is_softcuda()) { /* softcuda ends the whole capture, the forked stream too */
    CONF_OK(cu.cuStreamIsCapturing(s2, &st));
    TU_CHECK_EQ_INT(st, CU_STREAM_CAPTURE_STATUS_NONE);
    CONF_OK(cu.cuStreamSynchronize(s2));
    TU_CHECK(all_eq(A, 0, N));
  }
  CONF_OK(cu.cuEventDestroy(fork));
  CONF_OK(cu.cuStreamDestroy(s1));
  CONF_OK(cu.cuStreamDestroy(s2));
  cu.cuMemFree(A);
  teardown();
}

/* Synchronising a capturing stream is refused and invalidates the capture. */
TU_TEST(capture_sync_is_refused_and_invalidates) {
  CUstream s;
  CUgraph g = (CUgraph)(uintptr_t)1;
  CUstreamCaptureStatus st;
  CUdeviceptr A;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc();
  TU_REQUIRE(A);
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CONF_OK(fill(s, A, 1, N));
  CONF_EQ(cu.cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CONF_OK(cu.cuStreamIsCapturing(s, &st));
  TU_CHECK_EQ_INT(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CONF_EQ(cu.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  TU_CHECK(g == NULL);
  CONF_OK(cu.cuStreamIsCapturing(s, &st));
  TU_CHECK_EQ_INT(st, CU_STREAM_CAPTURE_STATUS_NONE);
  /* cuStreamQuery too */
  CONF_OK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CONF_EQ(cu.cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CONF_EQ(cu.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(all_eq(A, 0, N));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A);
  teardown();
}

typedef struct end_arg {
  CUcontext ctx;
  CUstream s;
  CUresult r;
  CUgraph g;
} end_arg;

static void* end_capture_elsewhere(void* p) {
  end_arg* a = (end_arg*)p;
  cu.cuCtxSetCurrent(a->ctx);
  a->r = cu.cuStreamEndCapture(a->s, &a->g);
  cu.cuCtxSetCurrent(NULL);
  return NULL;
}

TU_TEST(capture_rules) {
  CUstream s;
  CUgraph g = NULL;
  CUcontext c;
  pthread_t t;
  end_arg ea;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  CONF_OK(cu.cuCtxGetCurrent(&c));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  /* not on the legacy stream, not twice, bad mode, end without begin */
  TU_CHECK(cu.cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS);
  TU_CHECK(cu.cuStreamBeginCapture(s, (CUstreamCaptureMode)7) != CUDA_SUCCESS);
  TU_CHECK(cu.cuStreamEndCapture(s, &g) != CUDA_SUCCESS);
  CONF_OK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  TU_CHECK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS);
  /* global / thread-local captures end on the thread that began them */
  memset(&ea, 0, sizeof ea);
  ea.ctx = c;
  ea.s = s;
  TU_REQUIRE(pthread_create(&t, NULL, end_capture_elsewhere, &ea) == 0);
  pthread_join(t, NULL);
  CONF_EQ(ea.r, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  /* the failed end ended the capture too (real drivers do this): nothing left to end */
  CONF_EQ(cu.cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
  CONF_OK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CONF_OK(cu.cuStreamEndCapture(s, &g));
  TU_REQUIRE(g != NULL);
  CONF_OK(cu.cuGraphDestroy(g)); /* an empty capture is an empty graph */
  /* relaxed ones anywhere */
  CONF_OK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  memset(&ea, 0, sizeof ea);
  ea.ctx = c;
  ea.s = s;
  TU_REQUIRE(pthread_create(&t, NULL, end_capture_elsewhere, &ea) == 0);
  pthread_join(t, NULL);
  CONF_OK(ea.r);
  TU_CHECK(ea.g != NULL);
  if (ea.g) CONF_OK(cu.cuGraphDestroy(ea.g));
  CONF_OK(cu.cuStreamDestroy(s));
  teardown();
}

/* Capturing into a graph that then becomes a child of another (gpuhal's collectives). */
TU_TEST(captured_graph_as_child) {
  CUstream s;
  CUgraph cap = NULL, parent;
  CUgraphNode child, after;
  CUgraphExec x;
  CUDA_MEMCPY3D cp;
  CUcontext c;
  CUdeviceptr A, B;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc(), B = dalloc();
  TU_REQUIRE(A && B);
  CONF_OK(cu.cuCtxGetCurrent(&c));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CONF_OK(fill(s, A, 8, N));
  CONF_OK(cu.cuStreamEndCapture(s, &cap));
  TU_REQUIRE(cap != NULL);
  CONF_OK(cu.cuGraphCreate(&parent, 0));
  CONF_OK(cu.cuGraphAddChildGraphNode(&child, parent, NULL, 0, cap));
  CONF_OK(cu.cuGraphDestroy(cap));
  memset(&cp, 0, sizeof cp);
  cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.srcDevice = A;
  cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.dstDevice = B;
  cp.WidthInBytes = N * 4;
  cp.Height = cp.Depth = 1;
  CONF_OK(cu.cuGraphAddMemcpyNode(&after, parent, &child, 1, &cp, c));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, parent, 0));
  CONF_OK(cu.cuGraphLaunch(x, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(all_eq(B, 8, N));
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(parent));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A), cu.cuMemFree(B);
  teardown();
}

/* Nodes that came from a capture take exec parameter updates like built ones. */
TU_TEST(captured_nodes_take_exec_updates) {
  CUstream s;
  CUgraph g = NULL;
  CUgraphExec x;
  CUgraphNode nodes[4], kn = NULL, mn = NULL;
  CUgraphNodeType t;
  CUDA_MEMSET_NODE_PARAMS ms;
  CUDA_KERNEL_NODE_PARAMS kp;
  CUcontext c;
  CUdeviceptr A, B, C;
  void* args[3];
  unsigned value = 5, n = N;
  size_t k, cnt = 4;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc(), B = dalloc(), C = dalloc();
  TU_REQUIRE(A && B && C);
  CONF_OK(cu.cuCtxGetCurrent(&c));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CONF_OK(fill(s, A, 1, N));
  CONF_OK(cu.cuMemsetD32Async(B, 6, N, s));
  CONF_OK(cu.cuStreamEndCapture(s, &g));
  TU_REQUIRE(g != NULL);
  CONF_OK(cu.cuGraphGetNodes(g, nodes, &cnt));
  TU_REQUIRE(cnt == 2);
  for (k = 0; k < cnt; ++k) {
    CONF_OK(cu.cuGraphNodeGetType(nodes[k], &t));
    if (t == CU_GRAPH_NODE_TYPE_KERNEL) kn = nodes[k];
    if (t == CU_GRAPH_NODE_TYPE_MEMSET) mn = nodes[k];
  }
  TU_REQUIRE(kn && mn);
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  memset(&ms, 0, sizeof ms);
  ms.dst = C;
  ms.value = 9;
  ms.elementSize = 4;
  ms.width = N;
  ms.height = 1;
  CONF_OK(cu.cuGraphExecMemsetNodeSetParams(x, mn, &ms, c));
  memset(&kp, 0, sizeof kp);
  args[0] = &C; /* fill runs first: the memset's 9 must win */
  args[1] = &value;
  args[2] = &n;
  kp.func = g_fill;
  kp.gridDimX = N / 64;
  kp.gridDimY = kp.gridDimZ = 1;
  kp.blockDimX = 64;
  kp.blockDimY = kp.blockDimZ = 1;
  kp.kernelParams = args;
  CONF_OK(cu.cuGraphExecKernelNodeSetParams(x, kn, &kp));
  CONF_OK(cu.cuGraphLaunch(x, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(all_eq(A, 0, N) && all_eq(B, 0, N));
  TU_CHECK(all_eq(C, 9, N));
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A), cu.cuMemFree(B), cu.cuMemFree(C);
  teardown();
}

/* Capture modes (cuThreadExchangeStreamCaptureMode): while a thread captures in global mode,
 * a potentially unsafe call (cuMemAlloc) on another thread in global mode (the default) is
 * refused and invalidates the capture; one in relaxed or thread-local mode is not. The
 * capturing thread itself is refused in global and thread-local mode, not in relaxed. */
typedef struct mode_probe {
  CUcontext ctx;
  CUstreamCaptureMode mode;
  CUresult alloc, exchange;
} mode_probe;

static void* mode_probe_main(void* arg) {
  mode_probe* p = (mode_probe*)arg;
  CUstreamCaptureMode mode = p->mode;
  CUdeviceptr d = 0;
  cu.cuCtxSetCurrent(p->ctx);
  p->exchange = cu.cuThreadExchangeStreamCaptureMode(&mode); /* mode: the thread's default */
  p->alloc = cu.cuMemAlloc(&d, 256);
  if (p->alloc == CUDA_SUCCESS) cu.cuMemFree(d);
  cu.cuCtxSetCurrent(NULL);
  return NULL;
}

static CUresult mode_probe_run(CUcontext ctx, CUstreamCaptureMode mode) {
  mode_probe p;
  pthread_t t;
  p.ctx = ctx;
  p.mode = mode;
  p.alloc = p.exchange = CUDA_ERROR_UNKNOWN;
  if (pthread_create(&t, NULL, mode_probe_main, &p) != 0) return CUDA_ERROR_UNKNOWN;
  pthread_join(t, NULL);
  return p.exchange != CUDA_SUCCESS ? p.exchange : p.alloc;
}

TU_TEST(capture_modes_refuse_unsafe_calls) {
  static const CUstreamCaptureMode others[3] = {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                                CU_STREAM_CAPTURE_MODE_RELAXED};
  CUstream s;
  CUcontext ctx = NULL;
  CUdeviceptr A, d = 0;
  CUgraph g = NULL;
  int k;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc();
  TU_REQUIRE(A);
  CONF_OK(cu.cuCtxGetCurrent(&ctx));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (k = 0; k < 3; ++k) { /* another thread, in each mode */
    CONF_OK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CONF_OK(cu.cuMemsetD32Async(A, 1, N, s));
    CONF_EQ(mode_probe_run(ctx, others[k]), k == 0 ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS);
    CONF_EQ(cu.cuStreamEndCapture(s, &g), k == 0 ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS);
    if (g) CONF_OK(cu.cuGraphDestroy(g));
    g = NULL;
  }
  for (k = 0; k < 3; ++k) { /* the capturing thread itself */
    CUstreamCaptureMode mode = others[k], back;
    CONF_OK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CONF_OK(cu.cuThreadExchangeStreamCaptureMode(&mode));
    TU_CHECK_EQ_INT(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CONF_EQ(cu.cuMemAlloc(&d, 256), k < 2 ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS);
    back = mode;
    CONF_OK(cu.cuThreadExchangeStreamCaptureMode(&back));
    TU_CHECK_EQ_INT(back, others[k]);
    CONF_EQ(cu.cuStreamEndCapture(s, &g), k < 2 ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS);
    if (g) CONF_OK(cu.cuGraphDestroy(g));
    g = NULL;
    if (d) CONF_OK(cu.cuMemFree(d));
    d = 0;
  }
  TU_CHECK(all_eq(A, 0, N)); /* nothing captured ran */
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A);
  teardown();
}

TU_MAIN(TU_CASE(capture_records_instead_of_running), TU_CASE(capture_fork_and_join),
        TU_CASE(capture_unjoined_fork_fails), TU_CASE(capture_sync_is_refused_and_invalidates), TU_CASE(capture_rules),
        TU_CASE(captured_graph_as_child), TU_CASE(captured_nodes_take_exec_updates),
        TU_CASE(capture_modes_refuse_unsafe_calls))
