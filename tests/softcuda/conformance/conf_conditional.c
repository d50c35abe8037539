/* Conformance: conditional graph nodes (CUDA 12.3), the same checks on softcuda and a real
 * driver: a WHILE whose body a kernel ends, an IF with its body's node patched in the exec
 * graph, nesting with a handle made on the body graph; the handle rules (one node per
 * handle, the node in the handle's graph, no handle left without a node). */
#include "conf.h"

static unsigned conf_u32_at(CUdeviceptr p) {
  unsigned v = 0;
  cu.cuMemcpyDtoH(&v, p, 4);
  return v;
}

/* A conditional node of `type` on `handle` in g, after `dep` (NULL: none); *body gets its
 * body graph. */
static CUresult conf_add_conditional(CUgraph g, CUcontext ctx, CUgraphConditionalHandle handle,
                                     CUgraphConditionalNodeType type, const CUgraphNode* dep, CUgraphNode* node,
                                     CUgraph* body) {
  CUgraphNodeParams p;
  CUresult r;
  memset(&p, 0, sizeof(p));
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = handle;
  p.conditional.type = type;
  p.conditional.size = 1;
  p.conditional.ctx = ctx;
  r = cu.cuGraphAddNode(node, g, dep, NULL, dep ? 1 : 0, &p);
  if (r == CUDA_SUCCESS && body) *body = p.conditional.phGraph_out[0];
  return r;
}

static CUDA_KERNEL_NODE_PARAMS conf_one_thread(CUfunction f, void** args) {
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof(p));
  p.func = f;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  return p;
}

TU_TEST(while_if_and_nesting) {
  CUmodule m;
  CUfunction count, add, set;
  CUdeviceptr state = 0, flag = 0;
  CUgraph g = NULL, body = NULL, inner_body = NULL;
  CUgraphExec x = NULL;
  CUgraphNode loop, node, inner, add_node;
  CUgraphConditionalHandle h = 0, h2 = 0;
  CUDA_KERNEL_NODE_PARAMS p;
  CUdeviceptr trips;
  unsigned remaining = 7, one = 1, ten = 10, mask = 1;
  void *count_args[3], *add_args[2], *set_args[3];
  CUcontext ctx;
  CONF_BEGIN();
  CONF_NEED(cuGraphConditionalHandleCreate);
  CONF_NEED(cuGraphAddNode);
  TU_REQUIRE((ctx = conf_ctx(0)) != NULL);
  {
    char* ptx = conf_read_ptx("conditional");
    TU_REQUIRE(ptx != NULL);
    CONF_REQUIRE_OK(cu.cuModuleLoadData(&m, ptx));
    free(ptx);
  }
  CONF_OK(cu.cuModuleGetFunction(&count, m, "cond_count_down"));
  CONF_OK(cu.cuModuleGetFunction(&add, m, "cond_add"));
  CONF_OK(cu.cuModuleGetFunction(&set, m, "cond_set_from"));
  CONF_OK(cu.cuMemAlloc(&state, 16));
  CONF_OK(cu.cuMemAlloc(&flag, 4));
  trips = state + 4;

  /* WHILE { count_down; IF (trips odd) { out += 10 } }, the IF's handle made on the body */
  CONF_OK(cu.cuGraphCreate(&g, 0));
  CONF_OK(cu.cuGraphConditionalHandleCreate(&h, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
  CONF_OK(conf_add_conditional(g, ctx, h, CU_GRAPH_COND_TYPE_WHILE, NULL, &loop, &body));
  TU_REQUIRE(body != NULL);
  count_args[0] = &state, count_args[1] = &trips, count_args[2] = &h;
  p = conf_one_thread(count, count_args);
  CONF_OK(cu.cuGraphAddKernelNode(&node, body, NULL, 0, &p));
  /* a handle serves one node, in the graph it was made for */
  TU_CHECK(conf_add_conditional(g, ctx, h, CU_GRAPH_COND_TYPE_IF, NULL, &inner, NULL) != CUDA_SUCCESS);
  TU_CHECK(conf_add_conditional(body, ctx, h, CU_GRAPH_COND_TYPE_IF, NULL, &inner, NULL) != CUDA_SUCCESS);
  CONF_OK(cu.cuGraphConditionalHandleCreate(&h2, body, ctx, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
  set_args[0] = &trips, set_args[1] = &mask, set_args[2] = &h2;
  p = conf_one_thread(set, set_args);
  {
    CUgraphNode set_node;
    CONF_OK(cu.cuGraphAddKernelNode(&set_node, body, &node, 1, &p));
    /* a handle without its node: the graph cannot be instantiated yet */
    TU_CHECK(cu.cuGraphInstantiateWithFlags(&x, g, 0) != CUDA_SUCCESS);
    x = NULL;
    CONF_OK(conf_add_conditional(body, ctx, h2, CU_GRAPH_COND_TYPE_IF, &set_node, &inner, &inner_body));
  }
  add_args[0] = &flag, add_args[1] = &ten;
  p = conf_one_thread(add, add_args);
  CONF_OK(cu.cuGraphAddKernelNode(&add_node, inner_body, NULL, 0, &p));
  CONF_OK(cu.cuGraphInstantiateWithFlags(&x, g, 0));
  CONF_OK(cu.cuMemcpyHtoD(state, &remaining, 4));
  CONF_OK(cu.cuMemsetD32(trips, 0, 1));
  CONF_OK(cu.cuMemsetD32(flag, 0, 1));
  CONF_OK(cu.cuGraphLaunch(x, NULL));
  CONF_OK(cu.cuCtxSynchronize());
  TU_CHECK_EQ_INT(conf_u32_at(trips), 7);
  TU_CHECK_EQ_INT(conf_u32_at(flag), 40); /* trips 1, 3, 5, 7 */
  /* the innermost body's node patched in the exec graph: the next launch adds 1 */
  add_args[1] = &one;
  p = conf_one_thread(add, add_args);
  CONF_OK(cu.cuGraphExecKernelNodeSetParams(x, add_node, &p));
  CONF_OK(cu.cuMemcpyHtoD(state, &remaining, 4));
  CONF_OK(cu.cuMemsetD32(trips, 0, 1));
  CONF_OK(cu.cuMemsetD32(flag, 0, 1));
  CONF_OK(cu.cuGraphLaunch(x, NULL));
  CONF_OK(cu.cuCtxSynchronize());
  TU_CHECK_EQ_INT(conf_u32_at(flag), 4);
  CONF_OK(cu.cuGraphExecDestroy(x));
  CONF_OK(cu.cuGraphDestroy(g));
  CONF_OK(cu.cuMemFree(state));
  CONF_OK(cu.cuMemFree(flag));
  CONF_OK(cu.cuModuleUnload(m));
  conf_ctx_done(0);
}

TU_MAIN(TU_CASE(while_if_and_nesting))
