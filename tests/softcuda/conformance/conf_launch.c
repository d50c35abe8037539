/* Conformance: launch attributes (cuLaunchKernelEx, kernel node attributes, programmatic
 * graph edges) and occupancy, the same checks on softcuda and a real driver (compute 9.0). */
#include "conf.h"

static unsigned conf_u32_at(CUdeviceptr p) {
  unsigned v = 0;
  cu.cuMemcpyDtoH(&v, p, 4);
  return v;
}

/* A config of grid x 1 x 1 blocks of `threads` threads on stream s. */
static CUlaunchConfig conf_config(unsigned grid, unsigned threads, unsigned shared, CUstream s, CUlaunchAttribute* a,
                                  unsigned n) {
  CUlaunchConfig c;
  memset(&c, 0, sizeof(c));
  c.gridDimX = grid, c.gridDimY = 1, c.gridDimZ = 1;
  c.blockDimX = threads, c.blockDimY = 1, c.blockDimZ = 1;
  c.sharedMemBytes = shared;
  c.hStream = s;
  c.attrs = a;
  c.numAttrs = n;
  return c;
}

static int conf_need_sm90(void) {
  int major = 0;
  cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
  return major >= 9;
}

/* Clusters: a shape that does not divide the grid, or one too large, is refused; a good
 * one runs with distributed shared memory (cluster_exchange's result names its peer). */
TU_TEST(cluster_launch) {
  CUmodule m;
  CUfunction f;
  CUdeviceptr out = 0;
  CUlaunchAttribute a;
  CUlaunchConfig c;
  unsigned n = 64 * 32;
  void* args[2];
  int max = 0;
  CONF_BEGIN();
  CONF_NEED(cuLaunchKernelEx);
  TU_REQUIRE(conf_ctx(0));
  if (!conf_need_sm90()) {
    conf_ctx_done(0);
    TU_SKIP("needs compute capability 9.0");
  }
  CONF_REQUIRE_OK(conf_kernel("cluster_exchange", &m, &f));
  CONF_OK(cu.cuMemAlloc(&out, n * 4));
  args[0] = &out;
  args[1] = &n;
  memset(&a, 0, sizeof(a));
  a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  a.value.clusterDim.x = 4, a.value.clusterDim.y = 1, a.value.clusterDim.z = 1;
  c = conf_config(64, 32, 128, NULL, &a, 1);
  CONF_OK(cu.cuOccupancyMaxPotentialClusterSize(&max, f, &c));
  TU_CHECK(max >= 8);
  CONF_OK(cu.cuLaunchKernelEx(&c, f, args, NULL));
  CONF_OK(cu.cuCtxSynchronize());
  TU_CHECK_EQ_INT((int)conf_u32_at(out), 1000);           /* block 0 reads block 1 */
  TU_CHECK_EQ_INT((int)conf_u32_at(out + 3 * 32 * 4), 0); /* block 3 reads block 0 */
  a.value.clusterDim.x = 3;                               /* does not divide 64 */
  TU_CHECK(cu.cuLaunchKernelEx(&c, f, args, NULL) != CUDA_SUCCESS);
  a.value.clusterDim.x = 32; /* more than any device allows */
  TU_CHECK(cu.cuLaunchKernelEx(&c, f, args, NULL) != CUDA_SUCCESS);
  CONF_OK(cu.cuCtxSynchronize());
  CONF_OK(cu.cuMemFree(out));
  CONF_OK(cu.cuModuleUnload(m));
  conf_ctx_done(0);
}

/* Cooperative: occupancy x SMs blocks run (the grid sync returns); one more is refused
 * with CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE. */
TU_TEST(cooperative_launch) {
  CUmodule m;
  CUfunction f;
  CUdeviceptr data = 0, partial = 0, out = 0;
  CUlaunchAttribute a;
  CUlaunchConfig c;
  unsigned n = 4096, i, expected = 0, *host;
  int per_sm = 0, sms = 0;
  void* args[4];
  CONF_BEGIN();
  CONF_NEED(cuLaunchKernelEx);
  TU_REQUIRE(conf_ctx(0));
  if (!conf_need_sm90()) {
    conf_ctx_done(0);
    TU_SKIP("needs compute capability 9.0");
  }
  CONF_REQUIRE_OK(conf_kernel("grid_reduce", &m, &f));
  CONF_OK(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 128, 0));
  CONF_OK(cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  TU_REQUIRE(per_sm > 0 && sms > 0);
  host = (unsigned*)malloc(n * 4);
  for (i = 0; i < n; ++i) expected += host[i] = i * 7u + 1u;
  CONF_OK(cu.cuMemAlloc(&data, n * 4));
  CONF_OK(cu.cuMemAlloc(&partial, (size_t)(per_sm * sms + 1) * 4));
  CONF_OK(cu.cuMemAlloc(&out, 4));
  CONF_OK(cu.cuMemcpyHtoD(data, host, n * 4));
  args[0] = &data, args[1] = &n, args[2] = &partial, args[3] = &out;
  memset(&a, 0, sizeof(a));
  a.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  a.value.cooperative = 1;
  c = conf_config((unsigned)(per_sm * sms), 128, 0, NULL, &a, 1);
  CONF_OK(cu.cuLaunchKernelEx(&c, f, args, NULL));
  CONF_OK(cu.cuCtxSynchronize());
  TU_CHECK(conf_u32_at(out) == expected);
  c.gridDimX++;
  CONF_EQ(cu.cuLaunchKernelEx(&c, f, args, NULL), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  CONF_OK(cu.cuCtxSynchronize());
  free(host);
  CONF_OK(cu.cuMemFree(data));
  CONF_OK(cu.cuMemFree(partial));
  CONF_OK(cu.cuMemFree(out));
  CONF_OK(cu.cuModuleUnload(m));
  conf_ctx_done(0);
}

/* Graphs: kernel node attributes (cluster, cooperative, priority) and programmatic edges
 * between kernel nodes; a programmatic edge from a memset node is refused. The chain's
 * result proves the order. */
TU_TEST(graph_attributes_and_programmatic_edges) {
  CUmodule m;
  CUfunction step;
  CUdeviceptr state = 0;
  CUgraph g = NULL;
  CUgraphExec x = NULL;
  CUgraphNode set, n1, n2, n3;
  CUDA_KERNEL_NODE_PARAMS p;
  CUDA_MEMSET_NODE_PARAMS ms;
  CUgraphEdgeData e;
  CUkernelNodeAttrValue v;
  unsigned k1 = 1, k2 = 2, k3 = 3;
  void *a1[2], *a2[2], *a3[2];
  CUcontext ctx;
  CONF_BEGIN();
  CONF_NEED(cuGraphAddDependencies);
  CONF_NEED(cuGraphKernelNodeSetAttribute);
  TU_REQUIRE((ctx = conf_ctx(0)) != NULL);
  if (!conf_need_sm90()) {
    conf_ctx_done(0);
    TU_SKIP("needs compute capability 9.0");
  }
  CONF_REQUIRE_OK(conf_kernel("pdl_step", &m, &step));
  CONF_OK(cu.cuMemAlloc(&state, 4));
  a1[0] = a2[0] = a3[0] = &state;
  a1[1] = &k1, a2[1] = &k2, a3[1] = &k3;
  CONF_OK(cu.cuGraphCreate(&g, 0));
  memset(&ms, 0, sizeof(ms));
  ms.dst = state, ms.value = 5, ms.elementSize = 4, ms.width = 1, ms.height = 1, ms.pitch = 4;
  CONF_OK(cu.cuGraphAddMemsetNode(&set, g, NULL, 0, &ms, ctx));
  memset(&p, 0, sizeof(p));
  p.func = step;
  p.gridDimX = 2, p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 32, p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = a1;
  CONF_OK(cu.cuGraphAddKernelNode(&n1, g, &set, 1, &p));
  p.kernelParams = a2;
  CONF_OK(cu.cuGraphAddKernelNode(&n2, g, NULL, 0, &p));
  p.kernelParams = a3;
  CONF_OK(cu.cuGraphAddKernelNode(&n3, g, NULL, 0, &p));
  memset(&e, 0, sizeof(e));
  e.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
  e.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  TU_CHECK(cu.cuGraphAddDependencies(g, &set, &n2, &e, 1) != CUDA_SUCCESS); /* memset: no such port */
  CONF_OK(cu.cuGraphAddDependencies(g, &n1, &n2, &e, 1));
  CONF_OK(cu.cuGraphAddDependencies(g, &n2, &n3, &e, 1));
  memset(&v, 0, sizeof(v));
  v.clusterDim.x = 2, v.clusterDim.y = 1, v.clusterDim.z = 1;
  CONF_OK(cu.cuGraphKernelNodeSetAttribute(n1, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v));
  memset(&v, 0, sizeof(v));
  v.priority = -1;
  CONF_OK(cu.cuGraphKernelNodeSetAttribute(n2, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
  memset(&v, 0, sizeof(v));
  v.cooperative = 1;
  CONF_OK(cu.cuGraphKernelNodeSetAttribute(n3, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &v));
  memset(&v, 0, sizeof(v));
  v.clusterDim.x = 3, v.clusterDim.y = 1, v.clusterDim.z = 1; /* does not divide the grid of 2 */
  TU_CHECK(cu.cuGraphKernelNodeSetAttribute(n3, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v) != CUDA_SUCCESS ||
           cu.cuGraphInstantiateWithFlags(&x, g, 0) != CUDA_SUCCESS);
  if (x) CONF_OK(cu.cuGraphExecDestroy(x));
  x = NULL;
  v.clusterDim.x = 1;
  CONF_OK(cu.cuGraphKernelNodeSetAttribute(n3, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 8 /* CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY */));
  CONF_OK(cu.cuGraphLaunch(x, NULL));
  CONF_OK(cu.cuCtxSynchronize());
  TU_CHECK(conf_u32_at(state) == ((5u * 3u + 1u) * 3u + 2u) * 3u + 3u);
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuMemFree(state));
  CONF_OK(cu.cuModuleUnload(m));
  conf_ctx_done(0);
}

TU_MAIN(TU_CASE(cluster_launch), TU_CASE(cooperative_launch), TU_CASE(graph_attributes_and_programmatic_edges))
