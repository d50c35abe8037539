/* Conformance: stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64,
 * cuStreamBatchMemOp), batch memop graph nodes and their capture, mapped pinned host
 * memory. The strict_* cases are softcuda's checks and its environment switch; some run a
 * scenario in a child process (this executable again, with CONF_MEMOP_CHILD set), because
 * it changes softcuda's configuration or must end the process with a leak. */
#include "conf.h" /* first: it sets _GNU_SOURCE */

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

extern char** environ;

/* Polls s until it completes or ms pass: CUDA_SUCCESS, CUDA_ERROR_NOT_READY or an error. */
static CUresult wait_stream(CUstream s, double ms) {
  double until = conf_now_ms() + ms;
  for (;;) {
    CUresult r = cu.cuStreamQuery(s);
    if (r != CUDA_ERROR_NOT_READY || conf_now_ms() > until) return r;
    usleep(200);
  }
}

/* A stream that has not finished after a short while is parked (waiting). */
static CUresult still_waiting(CUstream s) {
  usleep(20000);
  return cu.cuStreamQuery(s);
}

static int attr(CUdevice_attribute a) {
  int v = -1;
  cu.cuDeviceGetAttribute(&v, a, 0);
  return v;
}
static int have_64(void) { return attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) == 1; }
static int have_nor(void) { return attr(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR) == 1; }

#define NEED_MEMOPS()                \
  do {                               \
    CONF_BEGIN();                    \
    CONF_NEED(cuStreamWaitValue32);  \
    CONF_NEED(cuStreamWriteValue32); \
  } while (0)

/* Mapped pinned host memory and its device address. */
typedef struct mapped {
  void* host;
  CUdeviceptr dev;
} mapped;

static CUresult mapped_alloc(mapped* m, size_t bytes) {
  CUresult r = cu.cuMemHostAlloc(&m->host, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  if (r == CUDA_SUCCESS) memset(m->host, 0, bytes);
  if (r == CUDA_SUCCESS) r = cu.cuMemHostGetDevicePointer(&m->dev, m->host, 0);
  return r;
}

TU_TEST(attributes) {
  CONF_BEGIN();
  /* a real driver reports what the GPU can do; softcuda both, unless SOFTCUDA_NO_MEMOPS */
  TU_CHECK(attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) >= 0);
  TU_CHECK(attr(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR) >= 0);
  TU_CHECK_EQ_INT(attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY), 1);
  if (conf_is_softcuda()) {
    TU_CHECK_EQ_INT(attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS), 1);
    TU_CHECK_EQ_INT(attr(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR), 1);
  }
}

/* Mapped pinned memory: the device address is the host address with unified addressing,
 * and device writes are visible to the host. */
TU_TEST(mapped_host_memory) {
  mapped m;
  CUstream s;
  CONF_BEGIN();
  CONF_NEED(cuMemHostGetDevicePointer);
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(mapped_alloc(&m, 64));
  if (attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) == 1) TU_CHECK(m.dev == (CUdeviceptr)(uintptr_t)m.host);
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuMemsetD32Async(m.dev, 0x01020304u, 4, s));
  CONF_OK(wait_stream(s, 5000));
  TU_CHECK(((volatile uint32_t*)m.host)[3] == 0x01020304u);
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemFreeHost(m.host));
  conf_ctx_done(0);
}

/* A write on one stream releases a wait on another; work behind the wait runs after it. */
TU_TEST(write_then_wait_across_streams) {
  CUstream a, b;
  CUdeviceptr d;
  uint32_t after = 0;
  int wide;
  NEED_MEMOPS();
  TU_REQUIRE(conf_ctx(0));
  wide = have_64() && cu.cuStreamWaitValue64 && cu.cuStreamWriteValue64;
  CONF_OK(cu.cuMemAlloc(&d, 16));
  CONF_OK(cu.cuMemsetD8(d, 0, 16));
  CONF_OK(cu.cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamWaitValue32(b, d, 5, CU_STREAM_WAIT_VALUE_GEQ));
  if (wide) CONF_OK(cu.cuStreamWaitValue64(b, d + 8, 0x100000000ull, CU_STREAM_WAIT_VALUE_EQ));
  CONF_OK(cu.cuStreamWriteValue32(b, d + 4, 77, CU_STREAM_WRITE_VALUE_DEFAULT));
  CONF_EQ(still_waiting(b), CUDA_ERROR_NOT_READY);
  CONF_OK(cu.cuStreamWriteValue32(a, d, 5, CU_STREAM_WRITE_VALUE_DEFAULT));
  if (wide) {
    CONF_EQ(still_waiting(b), CUDA_ERROR_NOT_READY); /* the 64-bit wait still holds it */
    CONF_OK(cu.cuStreamWriteValue64(a, d + 8, 0x100000000ull, CU_STREAM_WRITE_VALUE_DEFAULT));
  }
  CONF_OK(wait_stream(b, 5000));
  CONF_OK(cu.cuMemcpyDtoH(&after, d + 4, 4));
  TU_CHECK_EQ_INT(after, 77);
  CONF_OK(cu.cuStreamDestroy(a));
  CONF_OK(cu.cuStreamDestroy(b));
  CONF_OK(cu.cuMemFree(d));
  conf_ctx_done(0);
}

/* A plain store by the host to mapped pinned memory releases a parked stream. */
TU_TEST(host_store_releases_parked_stream) {
  CUstream s;
  mapped m;
  NEED_MEMOPS();
  CONF_NEED(cuMemHostGetDevicePointer);
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(mapped_alloc(&m, 16));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamWaitValue32(s, m.dev, 7, CU_STREAM_WAIT_VALUE_EQ));
  CONF_OK(cu.cuStreamWriteValue32(s, m.dev + 4, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  CONF_EQ(still_waiting(s), CUDA_ERROR_NOT_READY);
  TU_CHECK(__atomic_load_n((uint32_t*)m.host + 1, __ATOMIC_ACQUIRE) == 0);
  __atomic_store_n((uint32_t*)m.host, 7u, __ATOMIC_RELEASE);
  CONF_OK(wait_stream(s, 5000));
  TU_CHECK(__atomic_load_n((uint32_t*)m.host + 1, __ATOMIC_ACQUIRE) == 1);
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemFreeHost(m.host));
  conf_ctx_done(0);
}

/* One wait: the memory holds `now`; the wait (cmp, value) is met at once or not; when not,
 * storing `release` meets it. */
typedef struct wait_case {
  int wide;
  unsigned cmp;
  uint64_t now, value;
  int met;
  uint64_t release;
} wait_case;

static void run_wait_case(const wait_case* c, CUstream s, mapped* m) {
  CUresult r;
  if (c->wide)
    __atomic_store_n((uint64_t*)m->host, c->now, __ATOMIC_RELEASE);
  else
    __atomic_store_n((uint32_t*)m->host, (uint32_t)c->now, __ATOMIC_RELEASE);
  r = c->wide ? cu.cuStreamWaitValue64(s, m->dev, c->value, c->cmp)
              : cu.cuStreamWaitValue32(s, m->dev, (cuuint32_t)c->value, c->cmp);
  CONF_OK(r);
  if (!c->met) {
    r = still_waiting(s);
    if (r != CUDA_ERROR_NOT_READY)
      TU_FAIL_AT(__FILE__, __LINE__, "%d-bit cmp %u: *addr=0x%llx value=0x%llx: met, expected not met",
                 c->wide ? 64 : 32, c->cmp, (unsigned long long)c->now, (unsigned long long)c->value);
    if (c->wide)
      __atomic_store_n((uint64_t*)m->host, c->release, __ATOMIC_RELEASE);
    else
      __atomic_store_n((uint32_t*)m->host, (uint32_t)c->release, __ATOMIC_RELEASE);
  }
  r = wait_stream(s, 5000);
  if (r != CUDA_SUCCESS)
    TU_FAIL_AT(__FILE__, __LINE__, "%d-bit cmp %u: *addr=0x%llx value=0x%llx: %s", c->wide ? 64 : 32, c->cmp,
               (unsigned long long)(c->met ? c->now : c->release), (unsigned long long)c->value, conf_err(r));
}

TU_TEST(wait_semantics) {
  static const wait_case cases[] = {
      /* GEQ: (int32_t)(*addr - value) >= 0, cyclic */
      {0, CU_STREAM_WAIT_VALUE_GEQ, 5, 5, 1, 0},
      {0, CU_STREAM_WAIT_VALUE_GEQ, 4, 5, 0, 6},
      {0, CU_STREAM_WAIT_VALUE_GEQ, 1, 0xfffffff0u, 1, 0}, /* wrapped past: met */
      {0, CU_STREAM_WAIT_VALUE_GEQ, 0xfffffff0u, 1, 0, 2}, /* not yet wrapped: not met */
      /* EQ */
      {0, CU_STREAM_WAIT_VALUE_EQ, 7, 7, 1, 0},
      {0, CU_STREAM_WAIT_VALUE_EQ, 8, 7, 0, 7},
      /* AND: (*addr & value) != 0 */
      {0, CU_STREAM_WAIT_VALUE_AND, 0x4, 0x6, 1, 0},
      {0, CU_STREAM_WAIT_VALUE_AND, 0x9, 0x6, 0, 0x2},
      /* 64-bit */
      {1, CU_STREAM_WAIT_VALUE_GEQ, 0x100000000ull, 1, 1, 0}, /* a 32-bit compare would say 0 < 1 */
      {1, CU_STREAM_WAIT_VALUE_GEQ, 0xffffffffull, 0x100000000ull, 0, 0x100000001ull},
      {1, CU_STREAM_WAIT_VALUE_EQ, 0x100000007ull, 7, 0, 0x7},
      {1, CU_STREAM_WAIT_VALUE_AND, 0x100000000ull, 0x100000000ull, 1, 0},
  };
  /* NOR: ~(*addr | value) != 0 */
  static const wait_case nor_cases[] = {
      {0, CU_STREAM_WAIT_VALUE_NOR, 0xffff0000u, 0x0000ff00u, 1, 0},
      {0, CU_STREAM_WAIT_VALUE_NOR, 0xffff0000u, 0x0000ffffu, 0, 0x7fff0000u},
      {1, CU_STREAM_WAIT_VALUE_NOR, 0xffffffff00000000ull, 0x00000000ffffffffull, 0, 0x7fffffff00000000ull},
  };
  CUstream s;
  mapped m;
  size_t i;
  NEED_MEMOPS();
  CONF_NEED(cuMemHostGetDevicePointer);
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(mapped_alloc(&m, 16));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    if (!cases[i].wide || (have_64() && cu.cuStreamWaitValue64)) run_wait_case(&cases[i], s, &m);
  for (i = 0; i < sizeof nor_cases / sizeof nor_cases[0] && have_nor(); ++i)
    if (!nor_cases[i].wide || (have_64() && cu.cuStreamWaitValue64)) run_wait_case(&nor_cases[i], s, &m);
  CONF_OK(wait_stream(s, 5000));
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemFreeHost(m.host));
  conf_ctx_done(0);
}

/* One cuStreamBatchMemOp: wait, then two writes, in order. */
TU_TEST(batch_memop) {
  CUstreamBatchMemOpParams ops[3];
  CUstream s;
  mapped m;
  unsigned n = 2;
  CONF_BEGIN();
  CONF_NEED(cuStreamBatchMemOp);
  CONF_NEED(cuMemHostGetDevicePointer);
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(mapped_alloc(&m, 32));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  memset(ops, 0, sizeof ops);
  ops[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  ops[0].waitValue.address = m.dev;
  ops[0].waitValue.value = 1;
  ops[0].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[1].writeValue.address = m.dev + 4;
  ops[1].writeValue.value = 11;
  if (have_64()) {
    ops[2].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[2].writeValue.address = m.dev + 8;
    ops[2].writeValue.value64 = 0x1234567800000001ull;
    n = 3;
  }
  CONF_OK(cu.cuStreamBatchMemOp(s, n, ops, 0));
  CONF_EQ(still_waiting(s), CUDA_ERROR_NOT_READY);
  TU_CHECK(__atomic_load_n((uint32_t*)m.host + 1, __ATOMIC_ACQUIRE) == 0); /* the writes wait too */
  __atomic_store_n((uint32_t*)m.host, 1u, __ATOMIC_RELEASE);
  CONF_OK(wait_stream(s, 5000));
  TU_CHECK(__atomic_load_n((uint32_t*)m.host + 1, __ATOMIC_ACQUIRE) == 11);
  if (n == 3) TU_CHECK(__atomic_load_n((uint64_t*)m.host + 1, __ATOMIC_ACQUIRE) == 0x1234567800000001ull);
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemFreeHost(m.host));
  conf_ctx_done(0);
}

/* A graph: node A waits for the flag, node B (after A) writes a value; the exec node's
 * parameters change for later launches. */
TU_TEST(batch_memop_graph_node) {
  CUstreamBatchMemOpParams wait_op, write_op;
  CUDA_BATCH_MEM_OP_NODE_PARAMS np;
  CUgraph g;
  CUgraphNode na, nb;
  CUgraphNodeType type;
  CUgraphExec x;
  CUstream s;
  CUcontext ctx;
  mapped m;
  CONF_BEGIN();
  CONF_NEED(cuGraphAddBatchMemOpNode);
  CONF_NEED(cuMemHostGetDevicePointer);
  TU_REQUIRE((ctx = conf_ctx(0)) != NULL);
  CONF_OK(mapped_alloc(&m, 16));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  memset(&wait_op, 0, sizeof wait_op);
  wait_op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  wait_op.waitValue.address = m.dev;
  wait_op.waitValue.value = 1;
  wait_op.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  memset(&write_op, 0, sizeof write_op);
  write_op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  write_op.writeValue.address = m.dev + 4;
  write_op.writeValue.value = 21;
  CONF_OK(cu.cuGraphCreate(&g, 0));
  memset(&np, 0, sizeof np);
  np.ctx = ctx;
  np.count = 1;
  np.paramArray = &wait_op;
  CONF_OK(cu.cuGraphAddBatchMemOpNode(&na, g, NULL, 0, &np));
  np.paramArray = &write_op;
  CONF_OK(cu.cuGraphAddBatchMemOpNode(&nb, g, &na, 1, &np));
  CONF_OK(cu.cuGraphNodeGetType(nb, &type));
  TU_CHECK_EQ_INT(type, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  CONF_OK(cu.cuGraphLaunch(x, s));
  CONF_EQ(still_waiting(s), CUDA_ERROR_NOT_READY);
  TU_CHECK(__atomic_load_n((uint32_t*)m.host + 1, __ATOMIC_ACQUIRE) == 0);
  __atomic_store_n((uint32_t*)m.host, 1u, __ATOMIC_RELEASE);
  CONF_OK(wait_stream(s, 5000));
  TU_CHECK(__atomic_load_n((uint32_t*)m.host + 1, __ATOMIC_ACQUIRE) == 21);
  if (cu.cuGraphExecBatchMemOpNodeSetParams) {
    write_op.writeValue.value = 22;
    CONF_OK(cu.cuGraphExecBatchMemOpNodeSetParams(x, nb, &np));
    CONF_OK(cu.cuGraphLaunch(x, s));
    CONF_OK(wait_stream(s, 5000)); /* the flag is still 1: no wait */
    TU_CHECK(__atomic_load_n((uint32_t*)m.host + 1, __ATOMIC_ACQUIRE) == 22);
  }
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemFreeHost(m.host));
  conf_ctx_done(0);
}

/* Memops captured from a stream become batch memop nodes and run when the graph does. */
TU_TEST(capture_memops) {
  CUstream s;
  CUgraph g;
  CUgraphExec x;
  CUgraphNode nodes[4];
  size_t n = 4, i;
  mapped m;
  NEED_MEMOPS();
  CONF_NEED(cuMemHostGetDevicePointer);
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(mapped_alloc(&m, 16));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CONF_OK(cu.cuStreamWaitValue32(s, m.dev, 3, CU_STREAM_WAIT_VALUE_EQ));
  CONF_OK(cu.cuStreamWriteValue32(s, m.dev + 4, 9, CU_STREAM_WRITE_VALUE_DEFAULT));
  CONF_OK(cu.cuStreamEndCapture(s, &g));
  CONF_OK(cu.cuGraphGetNodes(g, nodes, &n));
  TU_CHECK(n >= 1 && n <= 2);
  for (i = 0; i < n && i < 4; ++i) {
    CUgraphNodeType type;
    CONF_OK(cu.cuGraphNodeGetType(nodes[i], &type));
    TU_CHECK_EQ_INT(type, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  }
  TU_CHECK(__atomic_load_n((uint32_t*)m.host + 1, __ATOMIC_ACQUIRE) == 0); /* captured, not run */
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  CONF_OK(cu.cuGraphLaunch(x, s));
  CONF_EQ(still_waiting(s), CUDA_ERROR_NOT_READY);
  __atomic_store_n((uint32_t*)m.host, 3u, __ATOMIC_RELEASE);
  CONF_OK(wait_stream(s, 5000));
  TU_CHECK(__atomic_load_n((uint32_t*)m.host + 1, __ATOMIC_ACQUIRE) == 9);
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemFreeHost(m.host));
  conf_ctx_done(0);
}

/* ---- softcuda only ------------------------------------------------------------------------- */

/* What softcuda refuses at the call (a real driver may fail later, or not at all). */
TU_TEST(strict_checks) {
  CUstreamBatchMemOpParams op;
  CUstream s;
  CUdeviceptr d, gone;
  void* unmapped;
  CUdeviceptr unmapped_dev = 0;
  uint32_t stack_word = 0;
  CONF_STRICT();
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuMemAlloc(&d, 64));
  CONF_OK(cu.cuMemAlloc(&gone, 64));
  CONF_OK(cu.cuMemFree(gone));
  CONF_OK(cu.cuMemHostAlloc(&unmapped, 64, 0));
  /* alignment: 4 bytes for 32-bit operations, 8 for 64-bit ones */
  CONF_EQ(cu.cuStreamWaitValue32(s, d + 2, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuStreamWriteValue32(s, d + 1, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuStreamWaitValue64(s, d + 4, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuStreamWriteValue64(s, d + 4, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuStreamWriteValue32(s, d + 4, 0, 0));
  /* not device-visible: pageable host memory, freed memory, unmapped pinned memory */
  CONF_EQ(cu.cuStreamWaitValue32(s, (CUdeviceptr)(uintptr_t)&stack_word, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuStreamWriteValue32(s, gone, 1, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuStreamWriteValue32(s, (CUdeviceptr)(uintptr_t)unmapped, 1, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuMemHostGetDevicePointer(&unmapped_dev, unmapped, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuStreamWriteValue32(s, d + 64, 1, 0), CUDA_ERROR_INVALID_VALUE); /* one past the end */
  /* flags */
  CONF_EQ(cu.cuStreamWaitValue32(s, d, 0, 4), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuStreamWriteValue32(s, d, 0, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER), CUDA_ERROR_INVALID_VALUE);
  memset(&op, 0, sizeof op);
  op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  op.writeValue.address = d;
  CONF_EQ(cu.cuStreamBatchMemOp(s, 1, &op, 1), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuStreamBatchMemOp(s, 0, &op, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuStreamBatchMemOp(s, 1, NULL, 0), CUDA_ERROR_INVALID_VALUE);
  op.operation = (CUstreamBatchMemOpType)99;
  CONF_EQ(cu.cuStreamBatchMemOp(s, 1, &op, 0), CUDA_ERROR_INVALID_VALUE);
  memset(&op, 0, sizeof op);
  op.memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  op.memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
  CONF_OK(cu.cuStreamBatchMemOp(s, 1, &op, 0));
  CONF_OK(wait_stream(s, 5000));
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemFree(d));
  CONF_OK(cu.cuMemFreeHost(unmapped));
  conf_ctx_done(0);
}

/* Pinned memory of one context is device-visible from another only when PORTABLE. */
TU_TEST(strict_portable_host_memory) {
  CUstream s1;
  CUcontext c0;
  void *own, *portable;
  CONF_STRICT();
  if (conf_device_count() < 2) TU_SKIP("needs two devices");
  TU_REQUIRE((c0 = conf_ctx(0)) != NULL);
  CONF_OK(cu.cuMemHostAlloc(&own, 64, CU_MEMHOSTALLOC_DEVICEMAP));
  CONF_OK(cu.cuMemHostAlloc(&portable, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  TU_REQUIRE(conf_ctx(1));
  CONF_OK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CONF_EQ(cu.cuStreamWriteValue32(s1, (CUdeviceptr)(uintptr_t)own, 1, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuStreamWriteValue32(s1, (CUdeviceptr)(uintptr_t)portable, 1, 0));
  CONF_OK(wait_stream(s1, 5000));
  TU_CHECK(__atomic_load_n((uint32_t*)portable, __ATOMIC_ACQUIRE) == 1);
  CONF_OK(cu.cuStreamDestroy(s1));
  conf_ctx_done(1);
  CONF_OK(cu.cuCtxSetCurrent(c0));
  CONF_OK(cu.cuMemFreeHost(own));
  CONF_OK(cu.cuMemFreeHost(portable));
  conf_ctx_done(0);
}

/* ---- child processes --------------------------------------------------------------------- */

/* SOFTCUDA_NO_MEMOPS=1: the attributes read 0, the 64-bit operations and NOR are refused,
 * the 32-bit ones work. Returns the number of failed checks. */
static int child_no_memops(void) {
  CUcontext c;
  CUstream s;
  CUdeviceptr d;
  int bad = 0;
  if (!conf_load() || !(c = conf_ctx(0))) return 100;
  bad += attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) != 0;
  bad += attr(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR) != 0;
  bad += cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS;
  bad += cu.cuMemAlloc(&d, 16) != CUDA_SUCCESS;
  bad += cu.cuStreamWaitValue64(s, d, 0, 0) != CUDA_ERROR_NOT_SUPPORTED;
  bad += cu.cuStreamWriteValue64(s, d, 0, 0) != CUDA_ERROR_NOT_SUPPORTED;
  bad += cu.cuStreamWaitValue32(s, d, 0, CU_STREAM_WAIT_VALUE_NOR) != CUDA_ERROR_NOT_SUPPORTED;
  bad += cu.cuStreamWriteValue32(s, d, 3, 0) != CUDA_SUCCESS;
  bad += cu.cuStreamWaitValue32(s, d, 3, CU_STREAM_WAIT_VALUE_EQ) != CUDA_SUCCESS;
  bad += wait_stream(s, 5000) != CUDA_SUCCESS;
  bad += cu.cuStreamDestroy(s) != CUDA_SUCCESS;
  bad += cu.cuMemFree(d) != CUDA_SUCCESS;
  conf_ctx_done(0);
  return bad;
}

/* A stream parked on a wait nothing will meet, in a context that is destroyed: the
 * destroy returns, and the wait is reported as a leak (SOFTCUDA_LEAKS=fatal: exit 1). */
static int child_parked_at_ctx_destroy(void) {
  CUcontext c;
  CUstream s;
  CUdeviceptr d;
  if (!conf_load() || cu.cuCtxCreate(&c, 0, 0) != CUDA_SUCCESS) return 100;
  if (cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS || cu.cuMemAlloc(&d, 16) != CUDA_SUCCESS ||
      cu.cuMemsetD32(d, 0, 4) != CUDA_SUCCESS)
    return 101;
  fprintf(stderr, "child: waiting at 0x%llx\n", (unsigned long long)(d + 8));
  if (cu.cuStreamWaitValue32(s, d + 8, 42, CU_STREAM_WAIT_VALUE_EQ) != CUDA_SUCCESS) return 102;
  if (cu.cuStreamDestroy(s) != CUDA_SUCCESS) return 103;
  return cu.cuCtxDestroy(c) == CUDA_SUCCESS ? 0 : 105;
}

/* A stream still parked when the process exits is reported (fatal: exit 1). */
static int child_parked_at_exit(void) {
  CUstream s;
  CUdeviceptr d;
  if (!conf_load() || !conf_ctx(0)) return 100;
  if (cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS || cu.cuMemAlloc(&d, 16) != CUDA_SUCCESS ||
      cu.cuMemsetD32(d, 0, 4) != CUDA_SUCCESS)
    return 101;
  fprintf(stderr, "child: waiting at 0x%llx\n", (unsigned long long)(d + 4));
  if (cu.cuStreamWaitValue32(s, d + 4, 1, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) return 102;
  if (cu.cuStreamDestroy(s) != CUDA_SUCCESS) return 103;
  return 0; /* the context and the memory stay: the exit report lists them and the wait */
}

__attribute__((constructor)) static void conf_memop_child(void) {
  const char* which = getenv("CONF_MEMOP_CHILD");
  int rc;
  if (!which) return;
  if (strcmp(which, "no_memops") == 0)
    rc = child_no_memops();
  else if (strcmp(which, "parked_at_ctx_destroy") == 0)
    rc = child_parked_at_ctx_destroy();
  else if (strcmp(which, "parked_at_exit") == 0)
    rc = child_parked_at_exit();
  else
    rc = 99;
  fflush(NULL);
  exit(rc); /* runs softcuda's exit report */
}

/* Runs this executable as child `which` with env additions; returns its exit status (or
 * -1 when it hung past 20 s and was killed) and its stderr in err. */
static int run_child(const char* which, const char* extra_env, char* err, size_t err_size) {
  char child_var[128];
  char* argv[2];
  char** envp;
  size_t n = 0, i, used = 0;
  int fds[2], status = 0, killed = 0;
  pid_t pid;
  posix_spawn_file_actions_t fa;
  double until = conf_now_ms() + 20000;
  while (environ[n]) n++;
  envp = (char**)calloc(n + 3, sizeof(char*));
  for (i = 0; i < n; ++i) envp[i] = environ[i];
  snprintf(child_var, sizeof child_var, "CONF_MEMOP_CHILD=%s", which);
  envp[n++] = child_var;
  if (extra_env) envp[n++] = (char*)extra_env;
  argv[0] = (char*)"conf_memop";
  argv[1] = NULL;
  err[0] = 0;
  if (pipe(fds) != 0) return -2;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  if (posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, envp) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  free(envp);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return -2;
  }
  for (;;) {
    struct pollfd p;
    ssize_t got;
    char buf[512];
    p.fd = fds[0];
    p.events = POLLIN;
    if (poll(&p, 1, 100) > 0) {
      got = read(fds[0], buf, sizeof buf);
      if (got <= 0) break;
      if (used + (size_t)got + 1 < err_size) {
        memcpy(err + used, buf, (size_t)got);
        used += (size_t)got;
        err[used] = 0;
      }
    }
    if (conf_now_ms() > until) {
      kill(pid, SIGKILL);
      killed = 1;
      break;
    }
  }
  close(fds[0]);
  waitpid(pid, &status, 0);
  if (killed) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -3;
}

TU_TEST(strict_no_memops_env) {
  char err[4096];
  int rc;
  CONF_STRICT();
  rc = run_child("no_memops", "SOFTCUDA_NO_MEMOPS=1", err, sizeof err);
  if (rc != 0) TU_FAIL_AT(__FILE__, __LINE__, "child exited %d (failed checks); stderr:\n%s", rc, err);
}

/* The address the child printed ("child: waiting at 0x...") must be in the report. */
static void check_parked_report(const char* which, const char* when) {
  char err[8192];
  const char* at;
  char addr[64];
  int rc = run_child(which, "SOFTCUDA_LEAKS=fatal", err, sizeof err);
  TU_CHECK_EQ_INT(rc, 1); /* SOFTCUDA_LEAKS=fatal; -1 would mean it hung */
  at = strstr(err, "child: waiting at ");
  TU_REQUIRE(at != NULL);
  sscanf(at + strlen("child: waiting at "), "%63s", addr);
  TU_CHECK(strstr(err, when) != NULL);
  TU_CHECK(strstr(err, "parked on cuStreamWaitValue32") != NULL);
  TU_CHECK(strstr(strstr(err, "parked on") ? strstr(err, "parked on") : err, addr) != NULL);
  if (tu_state.failed) fprintf(stderr, "child stderr:\n%s\n", err);
}

TU_TEST(strict_parked_wait_at_ctx_destroy) {
  CONF_STRICT();
  check_parked_report("parked_at_ctx_destroy", "was parked");
}

TU_TEST(strict_parked_wait_at_exit) {
  CONF_STRICT();
  check_parked_report("parked_at_exit", "is still parked");
}

TU_MAIN(TU_CASE(attributes), TU_CASE(mapped_host_memory), TU_CASE(write_then_wait_across_streams),
        TU_CASE(host_store_releases_parked_stream), TU_CASE(wait_semantics), TU_CASE(batch_memop),
        TU_CASE(batch_memop_graph_node), TU_CASE(capture_memops), TU_CASE(strict_checks),
        TU_CASE(strict_portable_host_memory), TU_CASE(strict_no_memops_env), TU_CASE(strict_parked_wait_at_ctx_destroy),
        TU_CASE(strict_parked_wait_at_exit))
