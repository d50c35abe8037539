/* Conformance: CUDA graphs built node by node - memset / memcpy / kernel / host / event /
 * child nodes, edges and their order, queries, exec graphs, parameter updates, cycles,
 * handles. Stream capture is in conf_graph_capture.c. */
#include "conf.h"

#define N 256 /* elements of every test buffer */

static CUmodule g_mod_fill, g_mod_spin;
static CUfunction g_fill; /* fill_u32(dst, value, n) */
static CUfunction g_spin; /* spin_store(dst, value, n, us) */

static int setup(void) {
  if (!conf_ctx(0)) return 0;
  if (conf_kernel("fill_u32", &g_mod_fill, &g_fill) != CUDA_SUCCESS) return 0;
  return conf_kernel("spin_store", &g_mod_spin, &g_spin) == CUDA_SUCCESS;
}
static void teardown(void) {
  cu.cuModuleUnload(g_mod_fill);
  cu.cuModuleUnload(g_mod_spin);
  conf_ctx_done(0);
}

static CUdeviceptr dalloc(void) {
  CUdeviceptr d = 0;
  if (cu.cuMemAlloc(&d, N * 4) != CUDA_SUCCESS) return 0;
  cu.cuMemsetD32(d, 0, N);
  return d;
}

static unsigned peek(CUdeviceptr d, unsigned i) {
  unsigned v = 0xdeadbeef;
  cu.cuMemcpyDtoH(&v, d + (CUdeviceptr)i * 4, 4);
  return v;
}

/* 1 when d[0..n) all equal v */
static int all_eq(CUdeviceptr d, unsigned v, unsigned n) {
  unsigned buf[N];
  unsigned i;
  if (cu.cuMemcpyDtoH(buf, d, (size_t)n * 4) != CUDA_SUCCESS) return 0;
  for (i = 0; i < n; ++i)
    if (buf[i] != v) return 0;
  return 1;
}

static CUresult add_memset(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t ndeps, CUdeviceptr dst,
                           unsigned value, unsigned n) {
  CUDA_MEMSET_NODE_PARAMS p;
  CUcontext c;
  memset(&p, 0, sizeof p);
  p.dst = dst;
  p.value = value;
  p.elementSize = 4;
  p.width = n;
  p.height = 1;
  p.pitch = 0;
  cu.cuCtxGetCurrent(&c);
  return cu.cuGraphAddMemsetNode(out, g, deps, ndeps, &p, c);
}

static void copy1d_params(CUDA_MEMCPY3D* p, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  memset(p, 0, sizeof *p);
  p->srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p->srcDevice = src;
  p->dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p->dstDevice = dst;
  p->WidthInBytes = bytes;
  p->Height = 1;
  p->Depth = 1;
}

static CUresult add_copy(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t ndeps, CUdeviceptr dst,
                         CUdeviceptr src, size_t bytes) {
  CUDA_MEMCPY3D p;
  CUcontext c;
  copy1d_params(&p, dst, src, bytes);
  cu.cuCtxGetCurrent(&c);
  return cu.cuGraphAddMemcpyNode(out, g, deps, ndeps, &p, c);
}

typedef struct fill_args {
  CUdeviceptr dst;
  unsigned value, n;
  void* ptrs[3];
} fill_args;

static void fill_params(CUDA_KERNEL_NODE_PARAMS* p, fill_args* a, CUdeviceptr dst, unsigned value, unsigned n) {
  memset(p, 0, sizeof *p);
  a->dst = dst;
  a->value = value;
  a->n = n;
  a->ptrs[0] = &a->dst;
  a->ptrs[1] = &a->value;
  a->ptrs[2] = &a->n;
  p->func = g_fill;
  p->gridDimX = (n + 63) / 64;
  p->gridDimY = p->gridDimZ = 1;
  p->blockDimX = 64;
  p->blockDimY = p->blockDimZ = 1;
  p->kernelParams = a->ptrs;
}

static CUresult add_fill(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t ndeps, CUdeviceptr dst,
                         unsigned value, unsigned n) {
  CUDA_KERNEL_NODE_PARAMS p;
  fill_args a;
  CUresult r;
  fill_params(&p, &a, dst, value, n);
  r = cu.cuGraphAddKernelNode(out, g, deps, ndeps, &p);
  memset(&a, 0xab, sizeof a); /* the node copied the arguments: scribbling over them changes nothing */
  return r;
}

static CUresult add_spin_store(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t ndeps, CUdeviceptr dst,
                               unsigned value, unsigned n, unsigned long long us) {
  CUDA_KERNEL_NODE_PARAMS p;
  void* args[4];
  args[0] = &dst;
  args[1] = &value;
  args[2] = &n;
  args[3] = &us;
  memset(&p, 0, sizeof p);
  p.func = g_spin;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  return cu.cuGraphAddKernelNode(out, g, deps, ndeps, &p);
}

/* Instantiates g, launches it on s, waits. */
static CUresult run_graph(CUgraph g, CUstream s) {
  CUgraphExec x;
  CUresult r = cu.cuGraphInstantiateWithFlags(&x, g, 0);
  if (r != CUDA_SUCCESS) return r;
  r = cu.cuGraphLaunch(x, s);
  if (r == CUDA_SUCCESS) r = cu.cuStreamSynchronize(s);
  cu.cuGraphExecDestroy(x);
  return r;
}

TU_TEST(chain_of_memset_kernel_memcpy) {
  CUgraph g;
  CUgraphNode a, b, c;
  CUgraphExec x;
  CUstream s;
  CUevent done;
  CUdeviceptr A, B;
  CUgraphNodeType t;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc();
  B = dalloc();
  TU_REQUIRE(A && B);
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  /* memset A = 1; kernel A[0..N/2) = 7; copy A -> B */
  CONF_OK(add_memset(&a, g, NULL, 0, A, 1, N));
  CONF_OK(add_fill(&b, g, &a, 1, A, 7, N / 2));
  CONF_OK(add_copy(&c, g, &b, 1, B, A, N * 4));
  CONF_OK(cu.cuGraphNodeGetType(a, &t));
  TU_CHECK_EQ_INT(t, CU_GRAPH_NODE_TYPE_MEMSET);
  CONF_OK(cu.cuGraphNodeGetType(b, &t));
  TU_CHECK_EQ_INT(t, CU_GRAPH_NODE_TYPE_KERNEL);
  CONF_OK(cu.cuGraphNodeGetType(c, &t));
  TU_CHECK_EQ_INT(t, CU_GRAPH_NODE_TYPE_MEMCPY);
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  CONF_OK(cu.cuGraphLaunch(x, s));
  /* an event recorded after the launch completes after all of it */
  CONF_OK(cu.cuEventRecord(done, s));
  CONF_OK(cu.cuEventSynchronize(done));
  TU_CHECK(all_eq(B, 7, N / 2));
  TU_CHECK(peek(B, N / 2) == 1 && peek(B, N - 1) == 1);
  /* an exec graph runs again, and the graph itself can be destroyed first */
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuMemsetD32(B, 0, N));
  CONF_OK(cu.cuGraphLaunch(x, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(all_eq(B, 7, N / 2) && peek(B, N - 1) == 1);
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuEventDestroy(done));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A);
  cu.cuMemFree(B);
  teardown();
}

TU_TEST(diamond_and_queries) {
  CUgraph g;
  CUgraphNode root, left, right, join, nodes[8], from[8], to[8];
  CUstream s;
  CUdeviceptr A, B, C, D;
  size_t n, i;
  int seen[4] = {0, 0, 0, 0};
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc(), B = dalloc(), C = dalloc(), D = dalloc();
  TU_REQUIRE(A && B && C && D);
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(add_memset(&root, g, NULL, 0, A, 5, N));     /* A = 5 */
  CONF_OK(add_fill(&left, g, &root, 1, B, 9, N));      /* B = 9 */
  CONF_OK(add_copy(&right, g, &root, 1, C, A, N * 4)); /* C = A = 5 */
  {
    CUgraphNode deps[2];
    deps[0] = left;
    deps[1] = right;
    CONF_OK(add_copy(&join, g, deps, 2, D, B, N * 4 / 2)); /* D[0..N/2) = B */
  }
  CONF_OK(cu.cuGraphAddDependencies(g, &right, &join, NULL, 0)); /* zero: nothing */
  /* nodes: NULL array = count; a larger array gets NULLs and the real count */
  CONF_OK(cu.cuGraphGetNodes(g, NULL, &n));
  TU_CHECK_EQ_INT(n, 4);
  n = 8;
  for (i = 0; i < 8; ++i) nodes[i] = (CUgraphNode)(uintptr_t)1;
  CONF_OK(cu.cuGraphGetNodes(g, nodes, &n));
  TU_CHECK_EQ_INT(n, 4);
  TU_CHECK(nodes[4] == NULL && nodes[7] == NULL);
  for (i = 0; i < 4; ++i) {
    seen[0] |= nodes[i] == root;
    seen[1] |= nodes[i] == left;
    seen[2] |= nodes[i] == right;
    seen[3] |= nodes[i] == join;
  }
  TU_CHECK(seen[0] && seen[1] && seen[2] && seen[3]);
  /* a smaller array is filled as far as it goes */
  n = 2;
  nodes[0] = nodes[1] = NULL;
  CONF_OK(cu.cuGraphGetNodes(g, nodes, &n));
  TU_CHECK(nodes[0] != NULL && nodes[1] != NULL);
  /* edges */
  CONF_OK(cu.cuGraphGetEdges(g, NULL, NULL, &n));
  TU_CHECK_EQ_INT(n, 4);
  n = 8;
  CONF_OK(cu.cuGraphGetEdges(g, from, to, &n));
  TU_CHECK_EQ_INT(n, 4);
  TU_CHECK(from[4] == NULL && to[4] == NULL);
  memset(seen, 0, sizeof seen);
  for (i = 0; i < 4; ++i) {
    seen[0] += from[i] == root && to[i] == left;
    seen[1] += from[i] == root && to[i] == right;
    seen[2] += from[i] == left && to[i] == join;
    seen[3] += from[i] == right && to[i] == join;
  }
  TU_CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1);
  n = 1;
  from[0] = to[0] = NULL;
  CONF_OK(cu.cuGraphGetEdges(g, from, to, &n));
  TU_CHECK(from[0] != NULL && to[0] != NULL);
  /* an existing edge cannot be added again */
  TU_CHECK(cu.cuGraphAddDependencies(g, &root, &left, NULL, 1) != CUDA_SUCCESS);
  CONF_OK(run_graph(g, s));
  TU_CHECK(all_eq(A, 5, N));
  TU_CHECK(all_eq(B, 9, N));
  TU_CHECK(all_eq(C, 5, N));
  TU_CHECK(all_eq(D, 9, N / 2) && peek(D, N / 2) == 0);
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A), cu.cuMemFree(B), cu.cuMemFree(C), cu.cuMemFree(D);
  teardown();
}

/* A slow writer (spin_store) then a reader (copy): the edge makes the reader see the data;
 * on softcuda, without it, the order is not forced (and softcuda runs the reader first). */
TU_TEST(edge_orders_writer_before_reader) {
  CUgraph g;
  CUgraphNode w, r;
  CUstream s;
  CUdeviceptr A, B;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc(), B = dalloc();
  TU_REQUIRE(A && B);
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(add_spin_store(&w, g, NULL, 0, A, 42, N, 20000));
  CONF_OK(add_copy(&r, g, &w, 1, B, A, N * 4));
  CONF_OK(run_graph(g, s));
  TU_CHECK(all_eq(B, 42, N));
  CONF_OK(cu.cuGraphDestroy(g));
  if (conf_is_softcuda()) {
    /* the same two nodes with no edge: the reader does not wait for the writer */
    CONF_OK(cu.cuMemsetD32(A, 0, N));
    CONF_OK(cu.cuMemsetD32(B, 0, N));
    CONF_OK(cu.cuGraphCreate(&g, 0));
    CONF_OK(add_spin_store(&w, g, NULL, 0, A, 42, N, 20000));
    CONF_OK(add_copy(&r, g, NULL, 0, B, A, N * 4));
    CONF_OK(run_graph(g, s));
    TU_CHECK(all_eq(A, 42, N));
    TU_CHECK(all_eq(B, 0, N));
    CONF_OK(cu.cuGraphDestroy(g));
  }
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A), cu.cuMemFree(B);
  teardown();
}

TU_TEST(two_dimensional_memset_and_memcpy) {
  CUgraph g;
  CUgraphNode a, b;
  CUstream s;
  CUdeviceptr A, B;
  CUDA_MEMSET_NODE_PARAMS ms;
  CUDA_MEMCPY3D cp;
  CUcontext c;
  unsigned host[N];
  unsigned i;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc(), B = dalloc();
  TU_REQUIRE(A && B);
  CONF_OK(cu.cuCtxGetCurrent(&c));
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  /* A viewed as 8 rows of 32 words: set 4 rows x 10 words (pitch 128 bytes) to 0x01020304 */
  memset(&ms, 0, sizeof ms);
  ms.dst = A;
  ms.pitch = 32 * 4;
  ms.value = 0x01020304;
  ms.elementSize = 4;
  ms.width = 10;
  ms.height = 4;
  CONF_OK(cu.cuGraphAddMemsetNode(&a, g, NULL, 0, &ms, c));
  /* copy a 3 x 2 x 2 box of words from A (rows 1..2, cols 2..4) to B, as 2 slices of 2 rows */
  memset(&cp, 0, sizeof cp);
  cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.srcDevice = A;
  cp.srcXInBytes = 2 * 4;
  cp.srcY = 1;
  cp.srcPitch = 32 * 4;
  cp.srcHeight = 4; /* slices of 4 rows: slice 1 starts at row 4 */
  cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.dstDevice = B;
  cp.dstPitch = 16 * 4;
  cp.dstHeight = 2;
  cp.WidthInBytes = 3 * 4;
  cp.Height = 2;
  cp.Depth = 2;
  CONF_OK(cu.cuGraphAddMemcpyNode(&b, g, &a, 1, &cp, c));
  CONF_OK(run_graph(g, s));
  CONF_OK(cu.cuMemcpyDtoH(host, A, sizeof host));
  for (i = 0; i < N; ++i) {
    unsigned row = i / 32, col = i % 32;
    unsigned want = row < 4 && col < 10 ? 0x01020304u : 0u;
    if (host[i] != want) {
      TU_CHECK(host[i] == want);
      break;
    }
  }
  CONF_OK(cu.cuMemcpyDtoH(host, B, sizeof host));
  for (i = 0; i < N; ++i) {
    unsigned slice = i / 32, row = (i % 32) / 16, col = i % 16;
    /* source rows: slice 0 -> rows 1,2 (set); slice 1 -> rows 5,6 (not set) */
    unsigned want = slice == 0 && col < 3 ? 0x01020304u : 0u;
    (void)row;
    if (host[i] != want) {
      TU_CHECK(host[i] == want);
      break;
    }
  }
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A), cu.cuMemFree(B);
  teardown();
}

TU_TEST(child_graph_is_cloned) {
  CUgraph child, parent;
  CUgraphNode c1, c2, cn, after;
  CUgraphNodeType t;
  CUstream s;
  CUdeviceptr A, B, C;
  size_t n;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc(), B = dalloc(), C = dalloc();
  TU_REQUIRE(A && B && C);
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuGraphCreate(&child, 0));
  CONF_OK(add_memset(&c1, child, NULL, 0, A, 3, N));
  CONF_OK(add_fill(&c2, child, &c1, 1, A, 4, N / 4));
  CONF_OK(cu.cuGraphCreate(&parent, 0));
  CONF_OK(cu.cuGraphAddChildGraphNode(&cn, parent, NULL, 0, child));
  CONF_OK(add_copy(&after, parent, &cn, 1, B, A, N * 4));
  CONF_OK(cu.cuGraphNodeGetType(cn, &t));
  TU_CHECK_EQ_INT(t, CU_GRAPH_NODE_TYPE_GRAPH);
  /* the parent holds a copy: changing or destroying the child afterwards changes nothing */
  CONF_OK(add_memset(&c2, child, NULL, 0, C, 77, N));
  CONF_OK(cu.cuGraphDestroy(child));
  CONF_OK(cu.cuGraphGetNodes(parent, NULL, &n));
  TU_CHECK_EQ_INT(n, 2);
  CONF_OK(run_graph(parent, s));
  TU_CHECK(all_eq(B, 4, N / 4) && peek(B, N / 4) == 3 && peek(B, N - 1) == 3);
  TU_CHECK(all_eq(C, 0, N));
  CONF_OK(cu.cuGraphDestroy(parent));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A), cu.cuMemFree(B), cu.cuMemFree(C);
  teardown();
}

typedef struct host_state {
  pthread_mutex_t mu;
  int calls;
  int running, max_running;
  unsigned seen; /* what the node read from pinned memory */
  volatile unsigned* pinned;
  int check_refusal; /* softcuda: CUDA calls from the node must be refused */
  CUresult refusal;
  int sleep_ms;
} host_state;

static void CUDA_CB host_node_fn(void* user) {
  host_state* h = (host_state*)user;
  pthread_mutex_lock(&h->mu);
  h->calls++;
  h->running++;
  if (h->running > h->max_running) h->max_running = h->running;
  if (h->pinned) h->seen = h->pinned[0];
  pthread_mutex_unlock(&h->mu);
  if (h->check_refusal) {
    CUdeviceptr d;
    h->refusal = cu.cuMemAlloc(&d, 16);
  }
  if (h->sleep_ms) usleep((useconds_t)h->sleep_ms * 1000);
  pthread_mutex_lock(&h->mu);
  h->running--;
  pthread_mutex_unlock(&h->mu);
}

TU_TEST(host_node_runs_in_order) {
  CUgraph g;
  CUgraphNode a, b;
  CUstream s;
  CUDA_HOST_NODE_PARAMS hp;
  host_state h;
  void* pinned;
  CUdeviceptr P;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  memset(&h, 0, sizeof h);
  pthread_mutex_init(&h.mu, NULL);
  CONF_REQUIRE_OK(cu.cuMemAllocHost(&pinned, N * 4));
  memset(pinned, 0, N * 4);
  P = (CUdeviceptr)(uintptr_t)pinned;
  h.pinned = (volatile unsigned*)pinned;
  h.check_refusal = conf_is_softcuda();
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(add_spin_store(&a, g, NULL, 0, P, 11, 1, 10000));
  hp.fn = host_node_fn;
  hp.userData = &h;
  CONF_OK(cu.cuGraphAddHostNode(&b, g, &a, 1, &hp));
  CONF_OK(run_graph(g, s));
  TU_CHECK_EQ_INT(h.calls, 1);
  TU_CHECK_EQ_INT(h.seen, 11);
  if (h.check_refusal) TU_CHECK_EQ_INT(h.refusal, CUDA_ERROR_NOT_PERMITTED);
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemFreeHost(pinned));
  pthread_mutex_destroy(&h.mu);
  teardown();
}

/* One exec graph launched on two streams back to back: the second launch waits for the
 * first (an exec graph never runs concurrently with itself). */
TU_TEST(same_exec_on_two_streams_is_serialized) {
  CUgraph g;
  CUgraphNode a;
  CUgraphExec x;
  CUstream s1, s2;
  CUDA_HOST_NODE_PARAMS hp;
  host_state h;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  memset(&h, 0, sizeof h);
  pthread_mutex_init(&h.mu, NULL);
  h.sleep_ms = 30;
  CONF_OK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  hp.fn = host_node_fn;
  hp.userData = &h;
  CONF_OK(cu.cuGraphAddHostNode(&a, g, NULL, 0, &hp));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  CONF_OK(cu.cuGraphLaunch(x, s1));
  CONF_OK(cu.cuGraphLaunch(x, s2));
  CONF_OK(cu.cuStreamSynchronize(s2));
  CONF_OK(cu.cuStreamSynchronize(s1));
  TU_CHECK_EQ_INT(h.calls, 2);
  TU_CHECK_EQ_INT(h.max_running, 1);
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s1));
  CONF_OK(cu.cuStreamDestroy(s2));
  pthread_mutex_destroy(&h.mu);
  teardown();
}

/* Graph 1 on s1: slow writer, then an event record node. Graph 2 on s2: an event wait node,
 * then a reader. The reader sees the writer's data. */
TU_TEST(event_record_and_wait_nodes_across_streams) {
  CUgraph g1, g2;
  CUgraphNode w, rec, wait, rd;
  CUgraphNodeType t;
  CUgraphExec x1, x2;
  CUstream s1, s2;
  CUevent e;
  CUdeviceptr A, B;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc(), B = dalloc();
  TU_REQUIRE(A && B);
  CONF_OK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CONF_OK(cu.cuGraphCreate(&g1, 0));
  CONF_OK(add_spin_store(&w, g1, NULL, 0, A, 21, N, 30000));
  CONF_OK(cu.cuGraphAddEventRecordNode(&rec, g1, &w, 1, e));
  CONF_OK(cu.cuGraphCreate(&g2, 0));
  CONF_OK(cu.cuGraphAddEventWaitNode(&wait, g2, NULL, 0, e));
  CONF_OK(add_copy(&rd, g2, &wait, 1, B, A, N * 4));
  CONF_OK(cu.cuGraphNodeGetType(rec, &t));
  TU_CHECK_EQ_INT(t, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  CONF_OK(cu.cuGraphNodeGetType(wait, &t));
  TU_CHECK_EQ_INT(t, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x1, g1, 0));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x2, g2, 0));
  CONF_OK(cu.cuGraphLaunch(x1, s1));
  CONF_OK(cu.cuGraphLaunch(x2, s2));
  CONF_OK(cu.cuStreamSynchronize(s2));
  TU_CHECK(all_eq(B, 21, N));
  CONF_OK(cu.cuStreamSynchronize(s1));
  CONF_OK(cu.cuEventQuery(e));
  CONF_OK(cu.cuGraphExecDestroy(x1));
  CONF_OK(cu.cuGraphExecDestroy(x2));
  CONF_OK(cu.cuGraphDestroy(g1));
  CONF_OK(cu.cuGraphDestroy(g2));
  CONF_OK(cu.cuEventDestroy(e));
  CONF_OK(cu.cuStreamDestroy(s1));
  CONF_OK(cu.cuStreamDestroy(s2));
  cu.cuMemFree(A), cu.cuMemFree(B);
  teardown();
}

/* Parameters changed on the exec apply to later launches only: a launch already enqueued
 * (held back by a slow kernel ahead of it) keeps the parameters it was launched with. */
TU_TEST(exec_set_params_affect_later_launches_only) {
  CUgraph g;
  CUgraphNode gate, ms, cp, k;
  CUgraphExec x;
  CUstream s;
  CUdeviceptr A, OUT1, OUT2, K1, K2, G;
  CUDA_MEMSET_NODE_PARAMS msp;
  CUDA_MEMCPY3D cpp;
  CUDA_KERNEL_NODE_PARAMS kp;
  fill_args fa;
  CUcontext c;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc(), OUT1 = dalloc(), OUT2 = dalloc(), K1 = dalloc(), K2 = dalloc(), G = dalloc();
  TU_REQUIRE(A && OUT1 && OUT2 && K1 && K2 && G);
  CONF_OK(cu.cuCtxGetCurrent(&c));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  /* a slow first node keeps the launch in flight while the parameters change */
  CONF_OK(add_spin_store(&gate, g, NULL, 0, G, 1, 1, 50000));
  CONF_OK(add_memset(&ms, g, &gate, 1, A, 1, N));
  CONF_OK(add_copy(&cp, g, &ms, 1, OUT1, A, N * 4));
  CONF_OK(add_fill(&k, g, &gate, 1, K1, 10, N));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  CONF_OK(cu.cuGraphLaunch(x, s));
  /* change all three (the node handles are the original graph's) */
  memset(&msp, 0, sizeof msp);
  msp.dst = A;
  msp.value = 2;
  msp.elementSize = 4;
  msp.width = N;
  msp.height = 1;
  CONF_OK(cu.cuGraphExecMemsetNodeSetParams(x, ms, &msp, c));
  copy1d_params(&cpp, OUT2, A, N * 4);
  CONF_OK(cu.cuGraphExecMemcpyNodeSetParams(x, cp, &cpp, c));
  fill_params(&kp, &fa, K2, 20, N);
  CONF_OK(cu.cuGraphExecKernelNodeSetParams(x, k, &kp));
  /* the wrong kind of node for a setter */
  TU_CHECK(cu.cuGraphExecMemsetNodeSetParams(x, cp, &msp, c) != CUDA_SUCCESS);
  CONF_OK(cu.cuGraphLaunch(x, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(all_eq(OUT1, 1, N)); /* first launch: old parameters */
  TU_CHECK(all_eq(K1, 10, N));
  TU_CHECK(all_eq(OUT2, 2, N)); /* second launch: new ones */
  TU_CHECK(all_eq(K2, 20, N));
  /* the graph was not changed by the exec updates */
  {
    CUgraphExec x2;
    CONF_OK(cu.cuMemsetD32(OUT1, 0, N));
    CONF_OK(cu.cuGraphInstantiateWithFlags(&x2, g, 0));
    CONF_OK(cu.cuGraphLaunch(x2, s));
    CONF_OK(cu.cuStreamSynchronize(s));
    TU_CHECK(all_eq(OUT1, 1, N));
    CONF_OK(cu.cuGraphExecDestroy(x2));
  }
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A), cu.cuMemFree(OUT1), cu.cuMemFree(OUT2), cu.cuMemFree(K1), cu.cuMemFree(K2), cu.cuMemFree(G);
  teardown();
}

/* Parameters changed on the graph's node (not an exec's) reach executes instantiated
 * after, not those made before; a memset node refuses a kernel node's parameters. */
TU_TEST(graph_node_set_params_reach_later_instantiations) {
  CUgraph g;
  CUgraphNode k, ms;
  CUgraphExec before, after;
  CUstream s;
  CUdeviceptr K1, K2, M;
  CUDA_KERNEL_NODE_PARAMS kp;
  fill_args fa;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  K1 = dalloc(), K2 = dalloc(), M = dalloc();
  TU_REQUIRE(K1 && K2 && M);
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(add_fill(&k, g, NULL, 0, K1, 10, N));
  CONF_OK(add_memset(&ms, g, NULL, 0, M, 3, N));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&before, g, 0));
  fill_params(&kp, &fa, K2, 20, N);
  CONF_OK(cu.cuGraphKernelNodeSetParams(k, &kp));
  TU_CHECK(cu.cuGraphKernelNodeSetParams(ms, &kp) != CUDA_SUCCESS);
  TU_CHECK(cu.cuGraphKernelNodeSetParams(k, NULL) != CUDA_SUCCESS);
  CONF_OK(cu.cuGraphInstantiateWithFlags(&after, g, 0));
  CONF_OK(cu.cuGraphLaunch(before, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(all_eq(K1, 10, N)); /* made before: the old parameters */
  CONF_OK(cu.cuMemsetD32(K1, 0, N));
  CONF_OK(cu.cuGraphLaunch(after, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(all_eq(K2, 20, N)); /* made after: the new ones */
  TU_CHECK(all_eq(K1, 0, N));
  CONF_OK(cu.cuGraphExecDestroy(before));
  CONF_OK(cu.cuGraphExecDestroy(after));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(K1), cu.cuMemFree(K2), cu.cuMemFree(M);
  teardown();
}

TU_TEST(exec_update_same_and_changed_topology) {
  CUgraph g1, g2, g3, g4;
  CUgraphNode a, b, extra;
  CUgraphExec x;
  CUgraphExecUpdateResultInfo info;
  CUstream s;
  CUdeviceptr A, B, C;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc(), B = dalloc(), C = dalloc();
  TU_REQUIRE(A && B && C);
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuGraphCreate(&g1, 0));
  CONF_OK(add_memset(&a, g1, NULL, 0, A, 1, N));
  CONF_OK(add_copy(&b, g1, &a, 1, B, A, N * 4));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g1, 0));
  /* same topology, other parameters: updated */
  CONF_OK(cu.cuGraphCreate(&g2, 0));
  CONF_OK(add_memset(&a, g2, NULL, 0, A, 2, N));
  CONF_OK(add_copy(&b, g2, &a, 1, C, A, N * 4));
  memset(&info, 0xff, sizeof info);
  CONF_OK(cu.cuGraphExecUpdate(x, g2, &info));
  TU_CHECK_EQ_INT(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
  CONF_OK(cu.cuGraphLaunch(x, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(all_eq(C, 2, N));
  TU_CHECK(all_eq(B, 0, N));
  /* one node more: the topology changed, nothing is updated */
  CONF_OK(cu.cuGraphCreate(&g3, 0));
  CONF_OK(add_memset(&a, g3, NULL, 0, A, 3, N));
  CONF_OK(add_copy(&b, g3, &a, 1, B, A, N * 4));
  CONF_OK(add_memset(&extra, g3, &b, 1, C, 3, N));
  CONF_EQ(cu.cuGraphExecUpdate(x, g3, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  TU_CHECK_EQ_INT(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  /* same shape, another node type */
  CONF_OK(cu.cuGraphCreate(&g4, 0));
  CONF_OK(add_memset(&a, g4, NULL, 0, A, 4, N));
  CONF_OK(add_memset(&b, g4, &a, 1, B, 4, N));
  CONF_EQ(cu.cuGraphExecUpdate(x, g4, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  TU_CHECK_EQ_INT(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED);
  TU_CHECK(info.errorNode == b);
  /* the exec still runs with the last good update */
  CONF_OK(cu.cuMemsetD32(C, 0, N));
  CONF_OK(cu.cuGraphLaunch(x, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(all_eq(C, 2, N));
  TU_CHECK(all_eq(B, 0, N));
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(g1));
  CONF_OK(cu.cuGraphDestroy(g2));
  CONF_OK(cu.cuGraphDestroy(g3));
  CONF_OK(cu.cuGraphDestroy(g4));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(A), cu.cuMemFree(B), cu.cuMemFree(C);
  teardown();
}

/* A cycle is refused: by cuGraphAddDependencies or, at the latest, by instantiation. */
TU_TEST(cycle_is_rejected) {
  CUgraph g;
  CUgraphNode a, b, c;
  CUgraphExec x = NULL;
  CUresult r;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(cu.cuGraphAddEmptyNode(&a, g, NULL, 0));
  CONF_OK(cu.cuGraphAddEmptyNode(&b, g, &a, 1));
  CONF_OK(cu.cuGraphAddEmptyNode(&c, g, &b, 1));
  r = cu.cuGraphAddDependencies(g, &c, &a, NULL, 1);
  if (r == CUDA_SUCCESS) {
    r = cu.cuGraphInstantiateWithFlags(&x, g, 0);
    TU_CHECK(r != CUDA_SUCCESS);
    if (r == CUDA_SUCCESS) cu.cuGraphExecDestroy(x);
  }
  /* a node cannot depend on itself */
  TU_CHECK(cu.cuGraphAddDependencies(g, &a, &a, NULL, 1) != CUDA_SUCCESS);
  CONF_OK(cu.cuGraphDestroy(g));
  teardown();
}

TU_TEST(empty_graph_runs) {
  CUgraph g;
  CUstream s;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(run_graph(g, s));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s));
  teardown();
}

TU_TEST(invalid_arguments) {
  CUgraph g, other;
  CUgraphNode a, b, dup[2];
  CUDA_MEMSET_NODE_PARAMS ms;
  CUcontext c;
  CUdeviceptr A;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  A = dalloc();
  TU_REQUIRE(A);
  CONF_OK(cu.cuCtxGetCurrent(&c));
  CONF_EQ(cu.cuGraphCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(cu.cuGraphCreate(&other, 0));
  CONF_OK(cu.cuGraphAddEmptyNode(&a, g, NULL, 0));
  CONF_OK(cu.cuGraphAddEmptyNode(&b, other, NULL, 0));
  /* dependencies: non-NULL array needed for a count, from this graph, no duplicates */
  CONF_EQ(cu.cuGraphAddEmptyNode(&b, g, NULL, 1), CUDA_ERROR_INVALID_VALUE);
  TU_CHECK(cu.cuGraphAddEmptyNode(&b, g, &b, 1) != CUDA_SUCCESS);
  dup[0] = dup[1] = a;
  TU_CHECK(cu.cuGraphAddEmptyNode(&b, g, dup, 2) != CUDA_SUCCESS);
  /* memset: element size 1, 2 or 4 */
  memset(&ms, 0, sizeof ms);
  ms.dst = A;
  ms.elementSize = 3;
  ms.width = 4;
  ms.height = 1;
  CONF_EQ(cu.cuGraphAddMemsetNode(&b, g, NULL, 0, &ms, c), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuGraphAddKernelNode(&b, g, NULL, 0, NULL), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuGraphGetNodes(g, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuGraphDestroy(other));
  cu.cuMemFree(A);
  teardown();
}

/* softcuda only: destroyed handles, fault injection, the leak report. */
TU_TEST(strict_destroyed_handles) {
  CUgraph g;
  CUgraphNode a;
  CUgraphExec x;
  CUgraphNodeType t;
  CUstream s;
  size_t n;
  CONF_STRICT();
  TU_REQUIRE(setup());
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(cu.cuGraphAddEmptyNode(&a, g, NULL, 0));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_EQ(cu.cuGraphLaunch(x, s), CUDA_ERROR_INVALID_HANDLE);
  CONF_EQ(cu.cuGraphExecDestroy(x), CUDA_ERROR_INVALID_HANDLE);
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_EQ(cu.cuGraphGetNodes(g, NULL, &n), CUDA_ERROR_INVALID_HANDLE);
  CONF_EQ(cu.cuGraphAddEmptyNode(&a, g, NULL, 0), CUDA_ERROR_INVALID_HANDLE);
  CONF_EQ(cu.cuGraphNodeGetType(a, &t), CUDA_ERROR_INVALID_HANDLE); /* died with its graph */
  CONF_EQ(cu.cuGraphDestroy(g), CUDA_ERROR_INVALID_HANDLE);
  /* wrong kind of handle */
  CONF_EQ(cu.cuGraphGetNodes((CUgraph)s, NULL, &n), CUDA_ERROR_INVALID_HANDLE);
  CONF_OK(cu.cuStreamDestroy(s));
  teardown();
}

TU_TEST(strict_launch_refuses_dead_references) {
  CUgraph g;
  CUgraphNode a, b;
  CUgraphExec x;
  CUstream s;
  CUevent e;
  CUdeviceptr A, B;
  CONF_STRICT();
  TU_REQUIRE(setup());
  A = dalloc(), B = dalloc();
  TU_REQUIRE(A && B);
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuEventCreate(&e, 0));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(add_copy(&a, g, NULL, 0, B, A, N * 4));
  CONF_OK(cu.cuGraphAddEventRecordNode(&b, g, &a, 1, e));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  CONF_OK(cu.cuEventDestroy(e));
  CONF_EQ(cu.cuGraphLaunch(x, s), CUDA_ERROR_INVALID_HANDLE); /* its event is gone */
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(add_copy(&a, g, NULL, 0, B, A, N * 4));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  CONF_OK(cu.cuMemFree(A));
  CONF_EQ(cu.cuGraphLaunch(x, s), CUDA_ERROR_INVALID_VALUE); /* its source memory is gone */
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s));
  cu.cuMemFree(B);
  teardown();
}

TU_TEST(strict_fault_injection_and_leaks) {
  CUgraph g;
  CUgraphExec x;
  CUstream s;
  size_t before;
  CONF_STRICT();
  TU_REQUIRE(setup());
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  TU_REQUIRE(sq_set_faults("cuGraphLaunch@1=CUDA_ERROR_OUT_OF_MEMORY,cuGraphCreate@1=CUDA_ERROR_UNKNOWN") == 0);
  CONF_EQ(cu.cuGraphLaunch(x, s), CUDA_ERROR_OUT_OF_MEMORY);
  CONF_OK(cu.cuGraphLaunch(x, s));
  {
    CUgraph g2 = NULL;
    CONF_EQ(cu.cuGraphCreate(&g2, 0), CUDA_ERROR_UNKNOWN);
    TU_CHECK(g2 == NULL); /* no side effect */
  }
  sq_clear_faults();
  CONF_OK(cu.cuStreamSynchronize(s));
  /* graphs and exec graphs are live objects in the leak report until destroyed */
  before = sq_leak_report(0);
  CONF_OK(cu.cuGraphExecDestroy(x));
  TU_CHECK_EQ_INT(sq_leak_report(0), before - 1);
  CONF_OK(cu.cuGraphDestroy(g));
  TU_CHECK_EQ_INT(sq_leak_report(0), before - 2);
  CONF_OK(cu.cuStreamDestroy(s));
  teardown();
}

TU_MAIN(TU_CASE(chain_of_memset_kernel_memcpy), TU_CASE(diamond_and_queries), TU_CASE(edge_orders_writer_before_reader),
        TU_CASE(two_dimensional_memset_and_memcpy), TU_CASE(child_graph_is_cloned), TU_CASE(host_node_runs_in_order),
        TU_CASE(same_exec_on_two_streams_is_serialized), TU_CASE(event_record_and_wait_nodes_across_streams),
        TU_CASE(exec_set_params_affect_later_launches_only), TU_CASE(graph_node_set_params_reach_later_instantiations),
        TU_CASE(exec_update_same_and_changed_topology), TU_CASE(cycle_is_rejected), TU_CASE(empty_graph_runs),
        TU_CASE(invalid_arguments), TU_CASE(strict_destroyed_handles), TU_CASE(strict_launch_refuses_dead_references),
        TU_CASE(strict_fault_injection_and_leaks))
