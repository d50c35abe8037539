/*
 * abi_procaddr: checks, against a live driver, that every entry of gpuhal's CUDA tables
 * names the right export: cuGetProcAddress(name, pinned_version) must return the same
 * function as dlsym(dlsym_name). That proves the signature gpuhal calls through is the
 * one the driver hands out at that version (the exports' own signatures are checked at
 * compile time by abi_real.c).
 *
 * The driver is $GPUHAL_CUDA_LIBRARY (default libcuda.so.1), so it also checks softcuda.
 * Exit 0: all match; 1: a mismatch; 77: no driver could be loaded (skipped).
 * An optional entry that neither route finds is listed but does not fail the test (an
 * old driver, or softcuda without that feature); a required one missing, or an entry
 * found by one route only, fails.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cuda_api.h"

typedef struct {
    const char* name;
    const char* dlsym_name;
    int version;
    int required;
} entry_t;

#define ABI_ENTRY_REQ(name, sym, ver, params) {#name, sym, ver, 1},
#define ABI_ENTRY_OPT(name, sym, ver, params) {#name, sym, ver, 0},
static const entry_t entries[] = {
    GPUHAL_CUDA_REQUIRED_SYMBOLS(ABI_ENTRY_REQ) GPUHAL_CUDA_OPTIONAL_SYMBOLS(ABI_ENTRY_OPT)};

/* Versioned exports that a wrong pin could land on; named when a pointer matches one. */
static const char* const alternates[] = {
    "cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3", "cuCtxCreate_v4",
    "cuGraphGetEdges", "cuGraphGetEdges_v2", "cuGraphAddDependencies", "cuGraphAddDependencies_v2",
    "cuEventElapsedTime", "cuEventElapsedTime_v2", "cuGraphInstantiate", "cuGraphInstantiate_v2",
    "cuGraphInstantiateWithFlags", "cuGraphExecUpdate", "cuGraphExecUpdate_v2",
    "cuStreamBeginCapture", "cuStreamBeginCapture_v2", "cuGraphAddKernelNode",
    "cuGraphAddKernelNode_v2", "cuGraphExecKernelNodeSetParams", "cuGraphExecKernelNodeSetParams_v2",
    "cuDeviceGetUuid", "cuDeviceGetUuid_v2", "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxRelease_v2", "cuMemAlloc", "cuMemAlloc_v2", "cuLinkCreate", "cuLinkCreate_v2",
    "cuStreamWaitValue32", "cuStreamWaitValue32_v2", "cuStreamWaitValue64", "cuStreamWaitValue64_v2",
    "cuStreamWriteValue32", "cuStreamWriteValue32_v2", "cuStreamWriteValue64", "cuStreamWriteValue64_v2",
    "cuStreamBatchMemOp", "cuStreamBatchMemOp_v2", "cuMemHostGetDevicePointer", "cuMemHostGetDevicePointer_v2"};

static const char* which_export(void* lib, void* fn) {
    size_t i;
    for (i = 0; i < sizeof(alternates) / sizeof(alternates[0]); ++i) {
        if (fn && dlsym(lib, alternates[i]) == fn) return alternates[i];
    }
    return "no listed export";
}

int main(void) {
    const char* path = getenv("GPUHAL_CUDA_LIBRARY");
    void* lib;
    void* sym;
    gpuhal_PFN_cuGetProcAddress get_proc;
    gpuhal_PFN_cuInit init;
    size_t i;
    int failures = 0, missing = 0;
    CUresult rc;
    if (!path || !*path) path = "libcuda.so.1";
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("SKIPPED: cannot load %s: %s\n", path, dlerror());
        return 77;
    }
    sym = dlsym(lib, "cuGetProcAddress_v2");
    memcpy(&get_proc, &sym, sizeof(sym)); /* object -> function pointer, the POSIX way */
    sym = dlsym(lib, "cuInit");
    memcpy(&init, &sym, sizeof(sym));
    if (!get_proc || !init) {
        printf("FAIL: %s lacks cuGetProcAddress_v2 or cuInit\n", path);
        return 1;
    }
    rc = init(0);
    if (rc != CUDA_SUCCESS) {
        printf("SKIPPED: cuInit failed with %d (no usable GPU?)\n", (int)rc);
        return 77;
    }
    for (i = 0; i < sizeof(entries) / sizeof(entries[0]); ++i) {
        const entry_t* e = &entries[i];
        void* by_proc = NULL;
        void* by_dlsym = dlsym(lib, e->dlsym_name);
        CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        rc = get_proc(e->name, &by_proc, e->version, CU_GET_PROC_ADDRESS_DEFAULT, &found);
        if (rc != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS) by_proc = NULL;
        if (by_proc == by_dlsym && by_proc) continue;
        if (!by_proc && !by_dlsym) {
            printf("%-8s %-32s absent (cuGetProcAddress rc=%d status=%d; dlsym %s: none)\n",
                   e->required ? "MISSING" : "absent", e->name, (int)rc, (int)found, e->dlsym_name);
            missing += e->required;
            continue;
        }
        printf("MISMATCH %-32s at %d: cuGetProcAddress -> %p (%s, status %d), dlsym(%s) -> %p\n", e->name,
               e->version, by_proc, which_export(lib, by_proc), (int)found, e->dlsym_name, by_dlsym);
        ++failures;
    }
    printf("%u entries checked against %s: %d mismatched, %d required missing\n",
           (unsigned)(sizeof(entries) / sizeof(entries[0])), path, failures, missing);
    return (failures || missing) ? 1 : 0;
}
