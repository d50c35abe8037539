/* symbols: loading the CUDA driver (and, optionally, NCCL and NVRTC) at run time.
 *
 * The tables in cuda_api.h list every function gpuhal calls. Each becomes one function
 * pointer field here, named exactly as the function (`cu->cuMemAlloc(...)`), so code reads
 * like ordinary CUDA. Required functions must all resolve or driver creation fails naming
 * the ones that are missing; optional ones may stay NULL and only switch off the feature
 * that needs them (gpuhal_driver_has_feature).
 *
 * Resolution: base names go through cuGetProcAddress_v2 at the version pinned in the
 * table, so gpuhal gets the ABI it was written against even when a newer driver has moved
 * the base name to a newer signature. Drivers older than CUDA 12 (no cuGetProcAddress_v2),
 * or a name the driver refuses, fall back to dlsym of the versioned export ("cuMemAlloc_v2")
 * and then of the base name.
 *
 * This module is implementation-only: CUDA names never reach a user's program. */
#ifndef GPUHAL_SRC_SYMBOLS_H
#define GPUHAL_SRC_SYMBOLS_H

#include "internal.h"
#include "cuda_api.h"

/* ---- gpuhal:internal ---- */

/* One field per table entry, named as the function. */
typedef struct gpuhal__cuda_symbols_s {
  gpuhal_PFN_cuGetProcAddress cuGetProcAddress; /* cuGetProcAddress_v2; NULL on old drivers */
#define GPUHAL__CUDA_SYMBOL_FIELD(name, dlsym_name, version, params) gpuhal_PFN_##name name;
  GPUHAL_CUDA_REQUIRED_SYMBOLS(GPUHAL__CUDA_SYMBOL_FIELD)
  GPUHAL_CUDA_OPTIONAL_SYMBOLS(GPUHAL__CUDA_SYMBOL_FIELD)
#undef GPUHAL__CUDA_SYMBOL_FIELD
} gpuhal__cuda_symbols_t;

typedef struct gpuhal__nccl_symbols_s {
#define GPUHAL__NCCL_SYMBOL_FIELD(name, params) gpuhal_PFN_##name name;
  GPUHAL_NCCL_SYMBOLS(GPUHAL__NCCL_SYMBOL_FIELD)
#undef GPUHAL__NCCL_SYMBOL_FIELD
  gpuhal_PFN_ncclGetErrorString ncclGetErrorString; /* not in the table: it returns const char* */
  int loaded;                                       /* 1 when every NCCL symbol resolved */
} gpuhal__nccl_symbols_t;

typedef struct gpuhal__nvrtc_symbols_s {
#define GPUHAL__NVRTC_SYMBOL_FIELD(name, params) gpuhal_PFN_##name name;
  GPUHAL_NVRTC_SYMBOLS(GPUHAL__NVRTC_SYMBOL_FIELD)
  GPUHAL_NVRTC_OPTIONAL_SYMBOLS(GPUHAL__NVRTC_SYMBOL_FIELD)
#undef GPUHAL__NVRTC_SYMBOL_FIELD
  gpuhal_PFN_nvrtcGetErrorString nvrtcGetErrorString; /* not in the table: it returns const char* */
  int major, minor;                                   /* nvrtcVersion */
} gpuhal__nvrtc_symbols_t;

#define GPUHAL__LIBRARY_PATH_MAX 512

/* dlsym gives an object pointer; ISO C has no conversion to a function pointer, so the
 * bits are copied (the POSIX-sanctioned way). */
#define GPUHAL__STORE_FN(field, ptr) memcpy(&(field), &(ptr), sizeof(void*))

/* Loads the CUDA driver library: `path_or_null`, else $GPUHAL_CUDA_LIBRARY, else
 * libcuda.so.1 then libcuda.so. On success fills `cu`, the dlopen handle and the path that
 * loaded. A library that will not load gives UNAVAILABLE listing what was tried; one that
 * lacks a required symbol gives UNAVAILABLE naming every missing symbol. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__symbols_load_cuda(const char* path_or_null, const gpuhal__logger_t* logger,
                                                          gpuhal__cuda_symbols_t* cu, void** out_handle,
                                                          char* loaded_path, size_t loaded_path_size);

/* Loads NCCL: `path_or_null`, else $GPUHAL_NCCL_LIBRARY, else libnccl.so.2 then
 * libnccl.so. NCCL is optional: a missing library, or one missing any symbol, leaves every
 * field NULL (`loaded` 0) and returns OK. With GPUHAL_NO_NCCL nothing is loaded. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__symbols_load_nccl(const char* path_or_null, const gpuhal__logger_t* logger,
                                                          gpuhal__nccl_symbols_t* nccl, void** out_handle,
                                                          char* loaded_path, size_t loaded_path_size);

/* Loads NVRTC: `path_or_null`, else $GPUHAL_NVRTC_LIBRARY, else libnvrtc.so.13, .so.12,
 * then libnvrtc.so. A library that will not load gives UNAVAILABLE listing what was tried;
 * one that lacks a required symbol, UNAVAILABLE naming them. Optional entries may stay
 * NULL. Fills the version. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__symbols_load_nvrtc(const char* path_or_null, const gpuhal__logger_t* logger,
                                                           gpuhal__nvrtc_symbols_t* nvrtc, void** out_handle,
                                                           char* loaded_path, size_t loaded_path_size);

#endif /* GPUHAL_SRC_SYMBOLS_H */
