/* src/cuda_api.h alone must compile warning-free (C99 here; abi_header_cxx.cpp for C++). */
#include "../../src/cuda_api.h"

/* Touch every typedef the tables make, so a broken expansion is a compile error. */
#define ABI_USE_CUDA(name, dlsym_name, pinned_version, params) gpuhal_PFN_##name name##_ptr;
#define ABI_USE_NCCL(name, params) gpuhal_PFN_##name name##_ptr;
struct abi_header_c_all {
    GPUHAL_CUDA_REQUIRED_SYMBOLS(ABI_USE_CUDA)
    GPUHAL_CUDA_OPTIONAL_SYMBOLS(ABI_USE_CUDA)
    GPUHAL_NCCL_SYMBOLS(ABI_USE_NCCL)
    gpuhal_PFN_cuGetProcAddress cuGetProcAddress_ptr;
    gpuhal_PFN_ncclGetErrorString ncclGetErrorString_ptr;
    CUDA_KERNEL_NODE_PARAMS kernel;
    CUDA_MEMCPY3D copy;
    CUDA_MEMSET_NODE_PARAMS memset;
    CUDA_HOST_NODE_PARAMS host;
    CUmemPoolProps pool;
    CUmemAccessDesc access;
    CUgraphExecUpdateResultInfo update;
    CUstreamBatchMemOpParams memop;
    CUDA_BATCH_MEM_OP_NODE_PARAMS memop_node;
    CUDA_BATCH_MEM_OP_NODE_PARAMS_v2 memop_node_v2;
    ncclUniqueId id;
};

int abi_header_c_size(void);
int abi_header_c_size(void) { return (int)sizeof(struct abi_header_c_all); }

/* The anonymous value / value64 union must be reachable by name, as with cuda.h. */
unsigned long long abi_header_c_memop_value(CUstreamBatchMemOpParams* p);
unsigned long long abi_header_c_memop_value(CUstreamBatchMemOpParams* p) {
    p->writeValue.value = 1u;
    return p->waitValue.value64;
}
