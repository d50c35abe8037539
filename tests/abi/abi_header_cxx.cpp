// src/cuda_api.h alone must compile warning-free as C++ too.
#include "../../src/cuda_api.h"

#define ABI_USE_CUDA(name, dlsym_name, pinned_version, params) gpuhal_PFN_##name name##_ptr;
#define ABI_USE_NCCL(name, params) gpuhal_PFN_##name name##_ptr;
struct abi_header_cxx_all {
    GPUHAL_CUDA_REQUIRED_SYMBOLS(ABI_USE_CUDA)
    GPUHAL_CUDA_OPTIONAL_SYMBOLS(ABI_USE_CUDA)
    GPUHAL_NCCL_SYMBOLS(ABI_USE_NCCL)
    gpuhal_PFN_cuGetProcAddress cuGetProcAddress_ptr;
    gpuhal_PFN_ncclGetErrorString ncclGetErrorString_ptr;
    CUDA_KERNEL_NODE_PARAMS kernel;
    CUmemPoolProps pool;
    CUstreamBatchMemOpParams memop;
    CUDA_BATCH_MEM_OP_NODE_PARAMS memop_node;
    ncclUniqueId id;
};

// The anonymous value / value64 union must be reachable by name, as with cuda.h.
unsigned long long abi_header_cxx_memop_value(CUstreamBatchMemOpParams* p);
unsigned long long abi_header_cxx_memop_value(CUstreamBatchMemOpParams* p) {
    p->writeValue.value = 1u;
    return p->waitValue.value64;
}

int abi_header_cxx_size();
int abi_header_cxx_size() { return static_cast<int>(sizeof(abi_header_cxx_all)); }
