/* memop.c - stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64,
 * cuStreamBatchMemOp), batch memop graph nodes, and the device address of mapped pinned
 * host memory (cuMemHostGetDevicePointer). Part of softcuda.c. */

/* Pinned host memory is device-visible only when mapped (CU_MEMHOSTALLOC_DEVICEMAP); its
 * device address is the host address (unified addressing). Flags must be 0. */
CUresult CUDAAPI sc_cuMemHostGetDevicePointer(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  sc_ctx* c;
  sc_alloc* a;
  CUresult r;
  SC_ENTER(cuMemHostGetDevicePointer);
  if (!pdptr || !p || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) {
    a = sc_alloc_find((uintptr_t)p);
    if (!a || a->type != SC_MEM_HOST)
      r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                       "cuMemHostGetDevicePointer(%p): not in a live pinned host allocation", p);
    else if (!(a->flags & CU_MEMHOSTALLOC_DEVICEMAP))
      r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                       "cuMemHostGetDevicePointer(%p): allocation #%llu was not made with CU_MEMHOSTALLOC_DEVICEMAP",
                       p, a->id);
    else
      *pdptr = (CUdeviceptr)(uintptr_t)p;
  }
  SC_UNLOCK();
  return r;
}

/* Not implemented yet: the memop attributes read 0, so callers take their fallback. */
CUresult CUDAAPI sc_cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  SC_ENTER(cuStreamWaitValue32);
  (void)stream, (void)addr, (void)value, (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI sc_cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  SC_ENTER(cuStreamWaitValue64);
  (void)stream, (void)addr, (void)value, (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI sc_cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  SC_ENTER(cuStreamWriteValue32);
  (void)stream, (void)addr, (void)value, (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI sc_cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  SC_ENTER(cuStreamWriteValue64);
  (void)stream, (void)addr, (void)value, (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI sc_cuStreamBatchMemOp(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                                       unsigned int flags) {
  SC_ENTER(cuStreamBatchMemOp);
  (void)stream, (void)count, (void)paramArray, (void)flags;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI sc_cuGraphAddBatchMemOpNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                             size_t numDependencies, const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  SC_ENTER(cuGraphAddBatchMemOpNode);
  (void)phGraphNode, (void)hGraph, (void)dependencies, (void)numDependencies, (void)nodeParams;
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI sc_cuGraphExecBatchMemOpNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                       const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  SC_ENTER(cuGraphExecBatchMemOpNodeSetParams);
  (void)hGraphExec, (void)hNode, (void)nodeParams;
  return CUDA_ERROR_NOT_SUPPORTED;
}
