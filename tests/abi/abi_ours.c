/* abi_ours: the ABI items as gpuhal's own declarations see them (no CUDA headers here). */
#if defined(GPUHAL_USE_CUDA_H) || defined(GPUHAL_USE_NCCL_H)
#error "abi_ours.c must be built from gpuhal's own declarations"
#endif
#include "../../src/cuda_api.h"
#include "abi_items.h"

#if defined(CUDA_VERSION) || defined(NCCL_MAJOR) || defined(__NVRTC_H__)
#error "abi_ours.c: a real CUDA/NCCL header was included; the comparison would be meaningless"
#endif

const abi_item_t abi_ours_cuda[] = {ABI_ROWS(ABI_CUDA_ITEMS)};
const size_t abi_ours_cuda_count = sizeof(abi_ours_cuda) / sizeof(abi_ours_cuda[0]);

const abi_item_t abi_ours_nccl[] = {ABI_ROWS(ABI_NCCL_ITEMS)};
const size_t abi_ours_nccl_count = sizeof(abi_ours_nccl) / sizeof(abi_ours_nccl[0]);

const abi_item_t abi_ours_nvrtc[] = {ABI_ROWS(ABI_NVRTC_ITEMS)};
const size_t abi_ours_nvrtc_count = sizeof(abi_ours_nvrtc) / sizeof(abi_ours_nvrtc[0]);
