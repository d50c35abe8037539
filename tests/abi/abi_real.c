/*
 * abi_real: the ABI items as the real cuda.h and nccl.h see them, plus the compile-time
 * signature check: src/cuda_api.h, included after the real headers, builds its tables over
 * the real types, and every gpuhal_PFN_<name> must then be the very function type that
 * cudaTypedefs.h (or nccl.h's own prototype) gives. A mismatch is a compile error that
 * names the function.
 */
#include <cuda.h>
#if ABI_HAVE_CUDA_TYPEDEFS
#include <cudaTypedefs.h>
#endif
#if ABI_HAVE_NCCL_H
#include <nccl.h>
#endif
#if ABI_HAVE_NVRTC_H
#include <nvrtc.h>
#endif
#include "../../src/cuda_api.h"
#include "abi_items.h"

#if !defined(__GNUC__)
#error "abi_real.c needs __builtin_types_compatible_p and __typeof__ (gcc or clang)"
#endif
#define ABI_SAME_TYPE(a, b) __builtin_types_compatible_p(a, b)

#if ABI_HAVE_CUDA_TYPEDEFS
#define ABI_CHECK_FUNC(name, pfn) \
    _Static_assert(ABI_SAME_TYPE(gpuhal_PFN_##name, pfn), "gpuhal_PFN_" #name " is not " #pfn);
ABI_CUDA_FUNCTIONS(ABI_CHECK_FUNC)
_Static_assert(ABI_SAME_TYPE(gpuhal_PFN_cuGetProcAddress, PFN_cuGetProcAddress_v12000),
               "gpuhal_PFN_cuGetProcAddress is not PFN_cuGetProcAddress_v12000");
const int abi_real_functions_checked = 1;
#else
const int abi_real_functions_checked = 0;
#endif

#if ABI_HAVE_NCCL_H
#define ABI_CHECK_NCCL(name, params) \
    _Static_assert(ABI_SAME_TYPE(gpuhal_PFN_##name, __typeof__(&name)), "gpuhal_PFN_" #name " differs from nccl.h");
GPUHAL_NCCL_SYMBOLS(ABI_CHECK_NCCL)
_Static_assert(ABI_SAME_TYPE(gpuhal_PFN_ncclGetErrorString, __typeof__(&ncclGetErrorString)),
               "gpuhal_PFN_ncclGetErrorString differs from nccl.h");
#endif

const abi_item_t abi_real_cuda[] = {ABI_ROWS(ABI_CUDA_ITEMS)};
const size_t abi_real_cuda_count = sizeof(abi_real_cuda) / sizeof(abi_real_cuda[0]);

#if ABI_HAVE_NVRTC_H
#define ABI_CHECK_NVRTC(name, params) \
    _Static_assert(ABI_SAME_TYPE(gpuhal_PFN_##name, __typeof__(&name)), "gpuhal_PFN_" #name " differs from nvrtc.h");
GPUHAL_NVRTC_SYMBOLS(ABI_CHECK_NVRTC)
GPUHAL_NVRTC_OPTIONAL_SYMBOLS(ABI_CHECK_NVRTC)
_Static_assert(ABI_SAME_TYPE(gpuhal_PFN_nvrtcGetErrorString, __typeof__(&nvrtcGetErrorString)),
               "gpuhal_PFN_nvrtcGetErrorString differs from nvrtc.h");
const abi_item_t abi_real_nvrtc[] = {ABI_ROWS(ABI_NVRTC_ITEMS)};
const size_t abi_real_nvrtc_count = sizeof(abi_real_nvrtc) / sizeof(abi_real_nvrtc[0]);
#else
const abi_item_t abi_real_nvrtc[] = {{"(no nvrtc.h)", 0}};
const size_t abi_real_nvrtc_count = 0;
#endif

#if ABI_HAVE_NCCL_H
const abi_item_t abi_real_nccl[] = {ABI_ROWS(ABI_NCCL_ITEMS)};
const size_t abi_real_nccl_count = sizeof(abi_real_nccl) / sizeof(abi_real_nccl[0]);
#else
const abi_item_t abi_real_nccl[] = {{"(no nccl.h)", 0}};
const size_t abi_real_nccl_count = 0;
#endif
