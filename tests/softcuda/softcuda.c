/* softcuda.c - a CPU implementation of the CUDA driver API subset gpuhal uses, built as a
 * drop-in libcuda.so.1. See README.md.
 *
 * One translation unit: the parts below are #included, because every exported CUDA name
 * (cuMemAlloc and cuMemAlloc_v2, ...) is an assembler alias of its sc_ definition, and an
 * alias must live in the object that defines its target. The tables of src/cuda_api.h
 * drive the prototypes (so a definition with the wrong signature does not compile), the
 * exports and cuGetProcAddress.
 */
#include "sc_internal.h"

#include "core.c"
#include "memory.c"
#include "stream.c"
#include "module.c"
#include "pool.c"
#include "memop.c"
#include "share.c"
#include "graph.c"

/* ---- cuGetProcAddress ---------------------------------------------------------------- */

typedef void (*sc_fnptr)(void);
typedef struct sc_proc {
  const char* name;
  int version;
  sc_fnptr fn;
} sc_proc;

/* Each definition must convert to the table's function pointer type: a compile-time
 * check of the signature against gpuhal_PFN_<name> as well. */
#define SC_PROC_ENTRY(name, dlsym_name, pinned, params) {#name, pinned, (sc_fnptr)(gpuhal_PFN_##name)sc_##name},
static const sc_proc sc_procs[] = {GPUHAL_CUDA_REQUIRED_SYMBOLS(SC_PROC_ENTRY) GPUHAL_CUDA_OPTIONAL_SYMBOLS(
    SC_PROC_ENTRY){"cuGetProcAddress", 12000, (sc_fnptr)(gpuhal_PFN_cuGetProcAddress)sc_cuGetProcAddress}};

CUresult CUDAAPI sc_cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
  size_t i;
  SC_ENTER(cuGetProcAddress);
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
    return CUDA_ERROR_INVALID_VALUE;
  *pfn = NULL;
  for (i = 0; i < sizeof sc_procs / sizeof sc_procs[0]; ++i) {
    if (strcmp(sc_procs[i].name, symbol) != 0) continue;
    if (sc_procs[i].version > sc.driver_version) break; /* an older driver: no such entry point */
    if (cudaVersion < sc_procs[i].version) {            /* like the real driver: success, with the status saying why */
      if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_SUCCESS;
    }
    memcpy(pfn, &sc_procs[i].fn, sizeof(void*));
    if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  /* the real driver answers CUDA_SUCCESS with *pfn == NULL and the status set */
  if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_SUCCESS;
}

/* ---- exports -------------------------------------------------------------------------- */
/* Both the base name and the versioned dlsym name, each an alias of sc_<name>, like the
 * real libcuda (which exports e.g. cuMemAlloc and cuMemAlloc_v2). Redefining a name with
 * .set to the same target is harmless when the two names are equal. */
#define SC_EXPORT_SYM(sym, target) __asm__(".globl " sym "\n\t.type " sym ", @function\n\t.set " sym ", " target);
#define SC_EXPORT(name, dlsym_name, pinned, params) \
  SC_EXPORT_SYM(#name, "sc_" #name)                 \
  SC_EXPORT_SYM(dlsym_name, "sc_" #name)
GPUHAL_CUDA_REQUIRED_SYMBOLS(SC_EXPORT)
GPUHAL_CUDA_OPTIONAL_SYMBOLS(SC_EXPORT)
SC_EXPORT_SYM("cuGetProcAddress", "sc_cuGetProcAddress")
SC_EXPORT_SYM("cuGetProcAddress_v2", "sc_cuGetProcAddress")

/* NVRTC opens libcuda.so.1 when it compiles and asks it for private export tables; in a
 * process that runs softcuda, that is softcuda, and NVRTC crashes when the entry is not
 * there at all. It answers as a driver without the table: not supported, no table. */
SOFTCUDA_API CUresult CUDAAPI cuGetExportTable(const void** ppExportTable, const void* pExportTableId);
SOFTCUDA_API CUresult CUDAAPI cuGetExportTable(const void** ppExportTable, const void* pExportTableId) {
  (void)pExportTableId;
  if (ppExportTable) *ppExportTable = NULL;
  return CUDA_ERROR_NOT_SUPPORTED;
}
