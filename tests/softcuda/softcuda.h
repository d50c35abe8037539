/* softcuda.h - the parts of softcuda that are not CUDA: the C twin API (how test kernels
 * run on the CPU) and the test-side query API (counters, fault injection, leak report).
 *
 * softcuda is a CPU implementation of the CUDA driver API built as a drop-in
 * libcuda.so.1 (see README.md). Everything here is exported with a softcuda_ prefix and
 * is found by tests with dlsym(lib, "softcuda_..."), so the same test binary also runs on
 * a real driver, where those symbols are absent.
 *
 * This header needs no CUDA declarations: twins include it alone.
 */
#ifndef SOFTCUDA_H
#define SOFTCUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SOFTCUDA_API __attribute__((visibility("default")))
#else
#define SOFTCUDA_API
#endif

/* ---------------------------------------------------------------------------------- */
/* C twins                                                                            */
/* ---------------------------------------------------------------------------------- */

typedef struct softcuda_dim3 {
  unsigned x, y, z;
} softcuda_dim3;

/* One thread block of a launch. A twin is called once per block, in no promised order
 * (today: x fastest, then y, then z, on the stream's worker thread), and loops over the
 * block's threads itself; a __syncthreads() in the CUDA source becomes a phase boundary
 * between two thread loops in the twin. */
typedef struct softcuda_block {
  softcuda_dim3 grid_dim;  /* gridDim */
  softcuda_dim3 block_dim; /* blockDim */
  softcuda_dim3 block_idx; /* blockIdx */
  void* shared;            /* dynamic shared memory of this block (sharedMemBytes, zeroed) */
  unsigned shared_bytes;
  int device; /* device ordinal the launch runs on */
} softcuda_block;

/* params: one pointer per kernel parameter, like cuLaunchKernel's kernelParams, pointing
 * at softcuda's copy of the argument values (taken at launch time, laid out as in the PTX
 * .param list). Return 0 for success, or a CUresult value (e.g. 700,
 * CUDA_ERROR_ILLEGAL_ADDRESS) to fault: the error becomes sticky in the launch's context,
 * as on a GPU. */
typedef int (*softcuda_twin_fn)(const softcuda_block* block, void** params);

/* Binds a twin to a PTX .entry name. Later registrations of the same name replace earlier
 * ones. Safe to call from a constructor (before any CUDA call). */
SOFTCUDA_API void softcuda_register_twin(const char* entry_name, softcuda_twin_fn fn);

/* 1 when [ptr, ptr+bytes) lies inside one live allocation that a kernel may touch
 * (device, managed, pinned host or pool memory), else 0. Twins use it to turn a wild
 * pointer into CUDA_ERROR_ILLEGAL_ADDRESS instead of a crash. */
SOFTCUDA_API int softcuda_accessible(const void* ptr, size_t bytes);

/* The memory of module-scope variable `name` (PTX .global or .const: a __device__ or
 * __constant__ global; a C++ one by its mangled name) of the module whose kernel the calling
 * twin runs for, in the launching context: each module, and each context's module of a
 * library, has its own copy, initialised as the PTX declares it, which cuModuleGetGlobal /
 * cuLibraryGetGlobal name for the host. *out_bytes (may be NULL) gets its size. NULL (and
 * 0) when that module has no such variable, or outside a twin. */
SOFTCUDA_API void* softcuda_global(const char* name, size_t* out_bytes);

/* A tensor map (CUtensorMap, 128 bytes) as softcuda's cuTensorMapEncodeTiled lays it out,
 * for twins of TMA kernels: the global address, the element size, per dimension
 * (innermost first) the size in elements, the stride in bytes (strides[0] is the element
 * size), the box and the element strides. */
typedef struct softcuda_tensor_map {
  unsigned type;          /* CUtensorMapDataType */
  unsigned rank;          /* 1..5 */
  unsigned element_bytes; /* of `type` */
  unsigned interleave, swizzle, l2_promotion, oob_fill;
  unsigned long long address;
  unsigned long long dims[5];
  unsigned long long strides[5];
  unsigned box[5];
  unsigned element_strides[5];
} softcuda_tensor_map;
/* Reads a map a twin got as a parameter: 1, or 0 when `map` is not one softcuda encoded. */
SOFTCUDA_API int softcuda_tensor_map_read(const void* map, softcuda_tensor_map* out);

/* cudaGraphSetConditional for twins: sets condition `handle` (a cudaGraphConditionalHandle
 * the kernel got as a parameter) of the graph launch the twin runs in. A handle that is
 * not one of that graph's conditions, or a call outside a graph launch, is a handle
 * violation. */
SOFTCUDA_API void softcuda_graph_set_conditional(unsigned long long handle, unsigned value);

/* Defines twin NAME and registers it at load time:
 *   SOFTCUDA_TWIN(vector_add) { ... use block, params ...; return 0; } */
#define SOFTCUDA_TWIN(NAME)                                                      \
  static int softcuda_twin_##NAME(const softcuda_block* block, void** params);   \
  __attribute__((constructor)) static void softcuda_twin_register_##NAME(void) { \
    softcuda_register_twin(#NAME, softcuda_twin_##NAME);                         \
  }                                                                              \
  static int softcuda_twin_##NAME(const softcuda_block* block, void** params)

/* A whole launch, for kernels whose blocks talk to each other: a cooperative kernel's
 * grid-wide sync, or a cluster's distributed shared memory. A grid twin is called once per
 * launch and runs every block itself (phase by phase, as the device code's barriers
 * separate them); it allocates the shared memory it models. It should check what its
 * device code relies on (e.g. return 719, CUDA_ERROR_LAUNCH_FAILED, for a grid sync in a
 * launch that is not cooperative) so that a wrong launch fails as on a GPU. */
typedef struct softcuda_grid {
  softcuda_dim3 grid_dim;
  softcuda_dim3 block_dim;
  softcuda_dim3 cluster_dim; /* 1,1,1 without a cluster launch */
  unsigned shared_bytes;     /* dynamic shared memory per block */
  int cooperative;           /* launched cooperatively (all blocks co-resident) */
  int device;
} softcuda_grid;
typedef int (*softcuda_grid_twin_fn)(const softcuda_grid* grid, void** params);
SOFTCUDA_API void softcuda_register_grid_twin(const char* entry_name, softcuda_grid_twin_fn fn);

/* Defines grid twin NAME and registers it at load time:
 *   SOFTCUDA_GRID_TWIN(grid_reduce) { ... use grid, params ...; return 0; } */
#define SOFTCUDA_GRID_TWIN(NAME)                                                      \
  static int softcuda_grid_twin_##NAME(const softcuda_grid* grid, void** params);     \
  __attribute__((constructor)) static void softcuda_grid_twin_register_##NAME(void) { \
    softcuda_register_grid_twin(#NAME, softcuda_grid_twin_##NAME);                    \
  }                                                                                   \
  static int softcuda_grid_twin_##NAME(const softcuda_grid* grid, void** params)

/* The value of kernel parameter I, of C type T. */
#define SOFTCUDA_PARAM(T, I) (*(T*)params[I])

/* ---------------------------------------------------------------------------------- */
/* Query API                                                                          */
/* ---------------------------------------------------------------------------------- */

/* Scope of the per-thread counters. */
#define SOFTCUDA_THIS_THREAD 0
#define SOFTCUDA_ALL_THREADS 1

/* Violation kinds (SOFTCUDA_VIOLATION_ANY counts them all). */
#define SOFTCUDA_VIOLATION_ANY 0
#define SOFTCUDA_VIOLATION_CALLBACK 1 /* CUDA call from a host-function callback */
#define SOFTCUDA_VIOLATION_CONTEXT 2  /* no current context, destroyed or wrong context */
#define SOFTCUDA_VIOLATION_HANDLE 3   /* destroyed, foreign or wrong-kind handle */
#define SOFTCUDA_VIOLATION_RANGE 4    /* pointer range outside its allocation, double free */

/* Calls of one entry point by its base name ("cuMemAlloc"); NULL: all entry points.
 * Calls refused by fault injection or strictness are counted too. */
SOFTCUDA_API unsigned long long softcuda_query_calls(const char* entry_name);
/* cuCtxSetCurrent / Push / Pop calls that changed the calling thread's current context. */
SOFTCUDA_API unsigned long long softcuda_query_context_switches(int scope);
/* Blocking host waits: cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize, every
 * synchronous memcpy / memset, and async copies into pageable memory (which CUDA makes
 * synchronous). */
SOFTCUDA_API unsigned long long softcuda_query_host_round_trips(int scope);
SOFTCUDA_API unsigned long long softcuda_query_violations(int kind);
/* The message of the last violation (process-wide), "" if none. Valid until the next. */
SOFTCUDA_API const char* softcuda_query_last_violation(void);
/* Leaked objects reported so far (at cuCtxDestroy / primary context release). */
SOFTCUDA_API unsigned long long softcuda_query_leaks(void);
/* The most streams of one context that were blocked at once on an unmet stream memory wait
 * (cuStreamWaitValue*, batch or graph node); `reset` starts a new count. On an H200 more
 * than 2 such streams (of 8 hardware queues) hold up other streams. */
SOFTCUDA_API int softcuda_query_parked_peak(int reset);
/* Number of softcuda devices. */
SOFTCUDA_API int softcuda_query_device_count(void);

/* Zeroes calls, context switches, round trips and violations (not the leak tally). */
SOFTCUDA_API void softcuda_reset_counters(void);

/* Fault injection, same syntax as SOFTCUDA_FAULTS:
 *   "cuMemAllocFromPoolAsync@3=CUDA_ERROR_OUT_OF_MEMORY,cuEventRecord@*=700"
 * ENTRY@N: the Nth call of ENTRY from now on (1-based); ENTRY@*: every call. The result is
 * a CUresult name or number. A faulted call returns the result with no side effect.
 * Adds to the rules in force; returns 0, or -1 (and changes nothing) on a bad spec. */
SOFTCUDA_API int softcuda_set_faults(const char* spec);
SOFTCUDA_API void softcuda_clear_faults(void);
/* For a library that stands in beside softcuda (softnccl): counts one call of entry_name
 * (so softcuda_query_calls sees it) and returns the result of the fault rule that fires
 * for it (the rule's number as written, e.g. 2 for CUDA_ERROR_OUT_OF_MEMORY), or 0 when
 * none does. Only names softcuda knows count: the CUDA entry points and the nccl* names of
 * GPUHAL_NCCL_SYMBOLS (src/cuda_api.h); any other name returns 0. softnccl calls it first
 * in every nccl* entry point (ncclGetErrorString excepted). */
SOFTCUDA_API int softcuda_fault_point(const char* entry_name);

/* Lists every live object (contexts, allocations, streams, events, modules, link states,
 * pools, graphs) on stderr when print is non-zero; returns how many there are. */
SOFTCUDA_API size_t softcuda_leak_report(int print);

/* ---- softnccl hook (added for softnccl, tests/softcuda/softnccl.c) -------------------- */
/* Enqueues a CPU operation on `stream` (a CUstream), in stream order, exactly like the
 * work of a kernel launch: a capturing stream records it into the capture graph (every
 * launch of that graph runs it again). run(payload) runs on the stream's worker thread
 * and returns 0 or a CUresult that poisons the context (sticky, as a faulting kernel
 * does). fini(payload) (may be NULL) runs once the operation is dropped: after it ran,
 * or when the last graph holding it is destroyed; it runs under softcuda's lock and must
 * not call softcuda. Returns a CUresult (0 on success; the payload is then owned by the
 * operation). */
SOFTCUDA_API int softcuda_stream_enqueue(void* stream, const char* what, int (*run)(void* payload),
                                         void (*fini)(void* payload), void* payload);
/* ---- end softnccl hook -------------------------------------------------------------- */

#ifdef __cplusplus
}
#endif

#endif /* SOFTCUDA_H */
