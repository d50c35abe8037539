/*
 * abi_main: compares gpuhal's CUDA/NCCL/NVRTC declarations (abi_ours.c) with the real headers
 * (abi_real.c), item by item, and prints every mismatch. Exit 0: identical; 1: a
 * mismatch; 77: skipped because no cuda.h was found at configure time.
 */
#include <stdio.h>

#include "abi_items.h"

#if ABI_NO_CUDA_H
int main(void) {
    printf("SKIPPED: no cuda.h (set CUDA_HOME or install the CUDA toolkit to check the ABI)\n");
    return 77;
}
#else
extern const abi_item_t abi_ours_cuda[], abi_real_cuda[], abi_ours_nccl[], abi_real_nccl[], abi_ours_nvrtc[],
    abi_real_nvrtc[];
extern const size_t abi_ours_cuda_count, abi_real_cuda_count, abi_ours_nccl_count, abi_real_nccl_count,
    abi_ours_nvrtc_count, abi_real_nvrtc_count;
extern const int abi_real_functions_checked;

static int compare(const char* what, const abi_item_t* ours, size_t n_ours, const abi_item_t* real,
                   size_t n_real) {
    size_t i;
    int bad = 0;
    if (n_ours != n_real) {
        printf("%s: %u items in ours, %u in real (the two builds disagree on abi_items.h?)\n", what,
               (unsigned)n_ours, (unsigned)n_real);
        return 1;
    }
    for (i = 0; i < n_ours; ++i) {
        if (ours[i].value != real[i].value) {
            printf("MISMATCH %-60s gpuhal %lld, real %lld\n", ours[i].what, ours[i].value, real[i].value);
            ++bad;
        }
    }
    printf("%s: %u items compared, %d mismatched\n", what, (unsigned)n_ours, bad);
    return bad != 0;
}

int main(void) {
    int failed = compare("cuda.h", abi_ours_cuda, abi_ours_cuda_count, abi_real_cuda, abi_real_cuda_count);
    if (abi_real_nccl_count == 0) {
        printf("nccl.h: not found at configure time, NCCL declarations not checked\n");
    } else {
        failed |= compare("nccl.h", abi_ours_nccl, abi_ours_nccl_count, abi_real_nccl, abi_real_nccl_count);
    }
    if (abi_real_nvrtc_count == 0) {
        printf("nvrtc.h: not found at configure time, NVRTC declarations not checked\n");
    } else {
        failed |= compare("nvrtc.h", abi_ours_nvrtc, abi_ours_nvrtc_count, abi_real_nvrtc, abi_real_nvrtc_count);
    }
    printf("function signatures: %s\n", abi_real_functions_checked
                                            ? "all match cudaTypedefs.h (checked at compile time)"
                                            : "not checked (no cudaTypedefs.h)");
    return failed;
}
#endif
