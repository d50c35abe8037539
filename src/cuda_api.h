/*
 * cuda_api - gpuhal's own declarations of the CUDA driver API (and NCCL) subset it uses.
 *
 * WHY
 *   gpuhal builds with no CUDA toolkit installed: libcuda.so.1, libnccl.so.2 and NVRTC are loaded
 *   at run time, so all gpuhal needs at compile time is the ABI: the types, enum values,
 *   struct layouts and function signatures. This file carries exactly that, written from
 *   the ABI facts of the x86-64 / aarch64 Linux (and Windows x64) driver.
 *
 *   The names keep CUDA's own spelling on purpose (CUresult, CUstream, CU_..., cuMemAlloc,
 *   CUDA_KERNEL_NODE_PARAMS, ncclComm_t): code reads like the CUDA documentation, the real
 *   <cuda.h> can replace this file (GPUHAL_USE_CUDA_H) without touching any caller, and
 *   softcuda (tests/softcuda) implements the same names. This is why the module is
 *   implementation-only in the amalgamation: none of these names reach a user's program
 *   unless it defines GPUHAL_IMPLEMENTATION.
 *
 * WHAT
 *   - types, enums and structs, or <cuda.h> when GPUHAL_USE_CUDA_H is defined or <cuda.h>
 *     was included first (CUDA_VERSION defined); likewise <nccl.h> for GPUHAL_USE_NCCL_H
 *     or when <nccl.h> was included first (NCCL_MAJOR defined), and <nvrtc.h> for
 *     GPUHAL_USE_NVRTC_H or when <nvrtc.h> was included first (__NVRTC_H__ defined);
 *   - the function tables as X-macros (always ours, whichever headers provide the types):
 *       GPUHAL_CUDA_REQUIRED_SYMBOLS(X)   X(name, "dlsym_name", pinned_version, (params))
 *       GPUHAL_CUDA_OPTIONAL_SYMBOLS(X)   same format
 *       GPUHAL_NCCL_SYMBOLS(X)            X(name, (params)), every one returns ncclResult_t
 *       GPUHAL_NVRTC_SYMBOLS(X)           X(name, (params)), every one returns nvrtcResult
 *       GPUHAL_NVRTC_OPTIONAL_SYMBOLS(X)  same format (newer NVRTCs only)
 *     name           the base name, as passed to cuGetProcAddress (and our typedef suffix)
 *     dlsym_name     the exported symbol that has these parameters at pinned_version
 *                    (the dlsym fallback when cuGetProcAddress is unavailable)
 *     pinned_version the cudaVersion argument for cuGetProcAddress: the CUDA 12.0 ABI of
 *                    the function (12000), or the release that introduced it if later;
 *                    a newer driver keeps returning this exact signature for it
 *   - gpuhal_PFN_<name> function pointer typedefs for every table entry, plus the three
 *     that are not in a table: gpuhal_PFN_cuGetProcAddress (looked up with dlsym as
 *     "cuGetProcAddress_v2") and gpuhal_PFN_ncclGetErrorString (returns const char*).
 *
 * NOTE for users of the tables: under GPUHAL_USE_CUDA_H, <cuda.h> defines many base names
 * as macros (cuMemAlloc -> cuMemAlloc_v2). Use `name` only with # or ## (which do not
 * expand it): "#name" for the cuGetProcAddress string, gpuhal_PFN_##name for the type.
 *
 * tests/abi checks every size, field offset, enum value and function signature here
 * against the real cuda.h / cudaTypedefs.h / nccl.h / nvrtc.h where they are installed.
 */

/* ---- gpuhal:internal ---- */

#ifndef GPUHAL_CUDA_API_H
#define GPUHAL_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

/* The real headers are not -Wpedantic clean as C99 (anonymous unions): quiet that for
 * them only, as if they came from a system include directory. */
#if defined(__GNUC__)
#define GPUHAL__FOREIGN_HEADER_BEGIN _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wpedantic\"")
#define GPUHAL__FOREIGN_HEADER_END _Pragma("GCC diagnostic pop")
#else
#define GPUHAL__FOREIGN_HEADER_BEGIN
#define GPUHAL__FOREIGN_HEADER_END
#endif

#if defined(GPUHAL_USE_CUDA_H) || defined(CUDA_VERSION)
GPUHAL__FOREIGN_HEADER_BEGIN
#include <cuda.h>
GPUHAL__FOREIGN_HEADER_END
#if CUDA_VERSION < 12000
#error "gpuhal: GPUHAL_USE_CUDA_H needs <cuda.h> from CUDA 12.0 or newer: gpuhal is written against the CUDA 12.0 driver ABI (CUDA_KERNEL_NODE_PARAMS with kern/ctx, CUgraphExecUpdateResultInfo)"
#endif
#define GPUHAL__HAVE_CUDA_TYPES 1
#endif

#if defined(GPUHAL_USE_NCCL_H) || defined(NCCL_MAJOR)
GPUHAL__FOREIGN_HEADER_BEGIN
#include <nccl.h>
GPUHAL__FOREIGN_HEADER_END
#define GPUHAL__HAVE_NCCL_TYPES 1
#endif

#if defined(GPUHAL_USE_NVRTC_H) || defined(__NVRTC_H__)
GPUHAL__FOREIGN_HEADER_BEGIN
#include <nvrtc.h>
GPUHAL__FOREIGN_HEADER_END
#define GPUHAL__HAVE_NVRTC_TYPES 1
#endif

#ifndef CUDAAPI
#if defined(_WIN32)
#define CUDAAPI __stdcall
#else
#define CUDAAPI
#endif
#endif

#ifndef CUDA_CB
#if defined(_WIN32)
#define CUDA_CB __stdcall
#else
#define CUDA_CB
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if !defined(GPUHAL__HAVE_CUDA_TYPES)

/* ------------------------------------------------------------------------------------ */
/* Scalars and handles                                                                  */
/* ------------------------------------------------------------------------------------ */

typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;

/* A device address: pointer-sized (the driver ABI uses unsigned long long on 64-bit). */
#if defined(_WIN64) || defined(__LP64__)
typedef unsigned long long CUdeviceptr_v2;
#else
typedef unsigned int CUdeviceptr_v2;
#endif
typedef CUdeviceptr_v2 CUdeviceptr;

typedef int CUdevice_v1;
typedef CUdevice_v1 CUdevice;

/* Opaque handles; the struct tags are CUDA's, so softcuda can complete them. */
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUlib_st* CUlibrary;
typedef struct CUkern_st* CUkernel;
typedef struct CUarray_st* CUarray;
typedef struct CUevent_st* CUevent;
typedef struct CUstream_st* CUstream;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphNode_st* CUgraphNode;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUmemPoolHandle_st* CUmemoryPool;
typedef struct CUlinkState_st* CUlinkState;

/* A physical allocation of the virtual memory management API (cuMemCreate): a value, not
 * a pointer. */
typedef unsigned long long CUmemGenericAllocationHandle_v1;
typedef CUmemGenericAllocationHandle_v1 CUmemGenericAllocationHandle;

typedef void (CUDA_CB* CUhostFn)(void* userData);

/* The CUDA runtime's driver_types.h shares this definition and its guard. */
#ifndef CU_UUID_HAS_BEEN_DEFINED
#define CU_UUID_HAS_BEEN_DEFINED
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;
#endif

#define CU_STREAM_LEGACY     ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

#define CU_DEVICE_CPU     ((CUdevice)-1)
#define CU_DEVICE_INVALID ((CUdevice)-2)

/* cuMemHostAlloc flags */
#define CU_MEMHOSTALLOC_PORTABLE      0x01
#define CU_MEMHOSTALLOC_DEVICEMAP     0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04

/* cuMemHostRegister flags */
#define CU_MEMHOSTREGISTER_PORTABLE  0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_MEMHOSTREGISTER_IOMEMORY  0x04
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08

/* Size of the opaque interprocess handles (CUipcMemHandle) */
#define CU_IPC_HANDLE_SIZE 64

/* cuLaunchKernel `extra` array markers */
#define CU_LAUNCH_PARAM_END_AS_INT            0x00
#define CU_LAUNCH_PARAM_END                   ((void*)CU_LAUNCH_PARAM_END_AS_INT)
#define CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT 0x01
#define CU_LAUNCH_PARAM_BUFFER_POINTER        ((void*)CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT)
#define CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT    0x02
#define CU_LAUNCH_PARAM_BUFFER_SIZE           ((void*)CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT)

/* ------------------------------------------------------------------------------------ */
/* Enums (values as in CUDA 13.0's cuda.h; every CUresult the driver can return)        */
/* ------------------------------------------------------------------------------------ */

typedef enum cudaError_enum {
    CUDA_SUCCESS                              = 0,
    CUDA_ERROR_INVALID_VALUE                  = 1,
    CUDA_ERROR_OUT_OF_MEMORY                  = 2,
    CUDA_ERROR_NOT_INITIALIZED                = 3,
    CUDA_ERROR_DEINITIALIZED                  = 4,
    CUDA_ERROR_PROFILER_DISABLED              = 5,
    CUDA_ERROR_PROFILER_NOT_INITIALIZED       = 6,
    CUDA_ERROR_PROFILER_ALREADY_STARTED       = 7,
    CUDA_ERROR_PROFILER_ALREADY_STOPPED       = 8,
    CUDA_ERROR_STUB_LIBRARY                   = 34,
    CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER     = 36,
    CUDA_ERROR_DEVICE_UNAVAILABLE             = 46,
    CUDA_ERROR_NO_DEVICE                      = 100,
    CUDA_ERROR_INVALID_DEVICE                 = 101,
    CUDA_ERROR_DEVICE_NOT_LICENSED            = 102,
    CUDA_ERROR_INVALID_IMAGE                  = 200,
    CUDA_ERROR_INVALID_CONTEXT                = 201,
    CUDA_ERROR_CONTEXT_ALREADY_CURRENT        = 202,
    CUDA_ERROR_MAP_FAILED                     = 205,
    CUDA_ERROR_UNMAP_FAILED                   = 206,
    CUDA_ERROR_ARRAY_IS_MAPPED                = 207,
    CUDA_ERROR_ALREADY_MAPPED                 = 208,
    CUDA_ERROR_NO_BINARY_FOR_GPU              = 209,
    CUDA_ERROR_ALREADY_ACQUIRED               = 210,
    CUDA_ERROR_NOT_MAPPED                     = 211,
    CUDA_ERROR_NOT_MAPPED_AS_ARRAY            = 212,
    CUDA_ERROR_NOT_MAPPED_AS_POINTER          = 213,
    CUDA_ERROR_ECC_UNCORRECTABLE              = 214,
    CUDA_ERROR_UNSUPPORTED_LIMIT              = 215,
    CUDA_ERROR_CONTEXT_ALREADY_IN_USE         = 216,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED        = 217,
    CUDA_ERROR_INVALID_PTX                    = 218,
    CUDA_ERROR_INVALID_GRAPHICS_CONTEXT       = 219,
    CUDA_ERROR_NVLINK_UNCORRECTABLE           = 220,
    CUDA_ERROR_JIT_COMPILER_NOT_FOUND         = 221,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION        = 222,
    CUDA_ERROR_JIT_COMPILATION_DISABLED       = 223,
    CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY      = 224,
    CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC       = 225,
    CUDA_ERROR_CONTAINED                      = 226,
    CUDA_ERROR_INVALID_SOURCE                 = 300,
    CUDA_ERROR_FILE_NOT_FOUND                 = 301,
    CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND = 302,
    CUDA_ERROR_SHARED_OBJECT_INIT_FAILED      = 303,
    CUDA_ERROR_OPERATING_SYSTEM               = 304,
    CUDA_ERROR_INVALID_HANDLE                 = 400,
    CUDA_ERROR_ILLEGAL_STATE                  = 401,
    CUDA_ERROR_LOSSY_QUERY                    = 402,
    CUDA_ERROR_NOT_FOUND                      = 500,
    CUDA_ERROR_NOT_READY                      = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS                = 700,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES        = 701,
    CUDA_ERROR_LAUNCH_TIMEOUT                 = 702,
    CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING  = 703,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED    = 704,
    CUDA_ERROR_PEER_ACCESS_NOT_ENABLED        = 705,
    CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE         = 708,
    CUDA_ERROR_CONTEXT_IS_DESTROYED           = 709,
    CUDA_ERROR_ASSERT                         = 710,
    CUDA_ERROR_TOO_MANY_PEERS                 = 711,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED     = 713,
    CUDA_ERROR_HARDWARE_STACK_ERROR           = 714,
    CUDA_ERROR_ILLEGAL_INSTRUCTION            = 715,
    CUDA_ERROR_MISALIGNED_ADDRESS             = 716,
    CUDA_ERROR_INVALID_ADDRESS_SPACE          = 717,
    CUDA_ERROR_INVALID_PC                     = 718,
    CUDA_ERROR_LAUNCH_FAILED                  = 719,
    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE   = 720,
    CUDA_ERROR_TENSOR_MEMORY_LEAK             = 721,
    CUDA_ERROR_NOT_PERMITTED                  = 800,
    CUDA_ERROR_NOT_SUPPORTED                  = 801,
    CUDA_ERROR_SYSTEM_NOT_READY               = 802,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH         = 803,
    CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
    CUDA_ERROR_MPS_CONNECTION_FAILED          = 805,
    CUDA_ERROR_MPS_RPC_FAILURE                = 806,
    CUDA_ERROR_MPS_SERVER_NOT_READY           = 807,
    CUDA_ERROR_MPS_MAX_CLIENTS_REACHED        = 808,
    CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED    = 809,
    CUDA_ERROR_MPS_CLIENT_TERMINATED          = 810,
    CUDA_ERROR_CDP_NOT_SUPPORTED              = 811,
    CUDA_ERROR_CDP_VERSION_MISMATCH           = 812,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED     = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED     = 901,
    CUDA_ERROR_STREAM_CAPTURE_MERGE           = 902,
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED       = 903,
    CUDA_ERROR_STREAM_CAPTURE_UNJOINED        = 904,
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION       = 905,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT        = 906,
    CUDA_ERROR_CAPTURED_EVENT                 = 907,
    CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD    = 908,
    CUDA_ERROR_TIMEOUT                        = 909,
    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE      = 910,
    CUDA_ERROR_EXTERNAL_DEVICE                = 911,
    CUDA_ERROR_INVALID_CLUSTER_SIZE           = 912,
    CUDA_ERROR_FUNCTION_NOT_LOADED            = 913,
    CUDA_ERROR_INVALID_RESOURCE_TYPE          = 914,
    CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION = 915,
    CUDA_ERROR_KEY_ROTATION                   = 916,
    CUDA_ERROR_UNKNOWN                        = 999
} CUresult;

typedef enum CUdevice_attribute_enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK                         = 1,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X                               = 2,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y                               = 3,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z                               = 4,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X                                = 5,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y                                = 6,
    CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z                                = 7,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK                   = 8,
    CU_DEVICE_ATTRIBUTE_SHARED_MEMORY_PER_BLOCK                       = 8,
    CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY                         = 9,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE                                     = 10,
    CU_DEVICE_ATTRIBUTE_MAX_PITCH                                     = 11,
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK                       = 12,
    CU_DEVICE_ATTRIBUTE_REGISTERS_PER_BLOCK                           = 12,
    CU_DEVICE_ATTRIBUTE_CLOCK_RATE                                    = 13,
    CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT                             = 14,
    CU_DEVICE_ATTRIBUTE_GPU_OVERLAP                                   = 15,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT                          = 16,
    CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT                           = 17,
    CU_DEVICE_ATTRIBUTE_INTEGRATED                                    = 18,
    CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY                           = 19,
    CU_DEVICE_ATTRIBUTE_COMPUTE_MODE                                  = 20,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH                       = 21,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH                       = 22,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT                      = 23,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH                       = 24,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT                      = 25,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH                       = 26,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH               = 27,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT              = 28,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS              = 29,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_ARRAY_WIDTH                 = 27,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_ARRAY_HEIGHT                = 28,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_ARRAY_NUMSLICES             = 29,
    CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT                             = 30,
    CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS                            = 31,
    CU_DEVICE_ATTRIBUTE_ECC_ENABLED                                   = 32,
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID                                    = 33,
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID                                 = 34,
    CU_DEVICE_ATTRIBUTE_TCC_DRIVER                                    = 35,
    CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE                             = 36,
    CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH                       = 37,
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE                                 = 38,
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR                = 39,
    CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT                            = 40,
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING                            = 41,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH               = 42,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS              = 43,
    CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER                              = 44,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH                = 45,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT               = 46,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE             = 47,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE            = 48,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE             = 49,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID                                 = 50,
    CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT                       = 51,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH                  = 52,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH          = 53,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS         = 54,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH                       = 55,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH                       = 56,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT                      = 57,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH                       = 58,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT                      = 59,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH                       = 60,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH               = 61,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS              = 62,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH               = 63,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT              = 64,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS              = 65,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH                  = 66,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH          = 67,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS         = 68,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH                = 69,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH                = 70,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT               = 71,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH                = 72,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH             = 73,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT            = 74,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR                      = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR                      = 76,
    CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH             = 77,
    CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED                   = 78,
    CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED                     = 79,
    CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED                      = 80,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR          = 81,
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR              = 82,
    CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY                                = 83,
    CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD                               = 84,
    CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID                      = 85,
    CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED                  = 86,
    CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO         = 87,
    CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS                        = 88,
    CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS                     = 89,
    CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED                  = 90,
    CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM       = 91,
    CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1                     = 92,
    CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1              = 93,
    CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1              = 94,
    CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH                            = 95,
    CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH               = 96,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN             = 97,
    CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES                       = 98,
    CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED                       = 99,
    CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES  = 100,
    CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST           = 101,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED          = 102,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED           = 102,
    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED   = 103,
    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED            = 104,
    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED        = 105,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR                 = 106,
    CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED                 = 107,
    CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE                  = 108,
    CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE                 = 109,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED       = 110,
    CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK              = 111,
    CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED                   = 112,
    CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED             = 113,
    CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED          = 114,
    CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED                        = 115,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED                     = 116,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS          = 117,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING               = 118,
    CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES                = 119,
    CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH                                = 120,
    CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED         = 121,
    CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS                 = 122,
    CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR                 = 123,
    CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED                             = 124,
    CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED                           = 125,
    CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT                         = 126,
    CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED                   = 127,
    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED                  = 128,
    CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS                     = 129,
    CU_DEVICE_ATTRIBUTE_NUMA_CONFIG                                   = 130,
    CU_DEVICE_ATTRIBUTE_NUMA_ID                                       = 131,
    CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED                           = 132,
    CU_DEVICE_ATTRIBUTE_MPS_ENABLED                                   = 133,
    CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID                                  = 134,
    CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED                           = 135,
    CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK                 = 136,
    CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH                 = 137,
    CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED                          = 138,
    CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID                             = 139,
    CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID                          = 140,
    CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 141,
    CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED              = 142,
    CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED             = 143,
    CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED                   = 144,
    CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED      = 145,
    CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED                  = 146,
    CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED     = 147,
    CU_DEVICE_ATTRIBUTE_MAX
} CUdevice_attribute;

typedef enum CUfunction_attribute_enum {
    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK                = 0,
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES                    = 1,
    CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES                     = 2,
    CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES                     = 3,
    CU_FUNC_ATTRIBUTE_NUM_REGS                             = 4,
    CU_FUNC_ATTRIBUTE_PTX_VERSION                          = 5,
    CU_FUNC_ATTRIBUTE_BINARY_VERSION                       = 6,
    CU_FUNC_ATTRIBUTE_CACHE_MODE_CA                        = 7,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES        = 8,
    CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT     = 9,
    CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET             = 10,
    CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH               = 11,
    CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT              = 12,
    CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH               = 13,
    CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED    = 14,
    CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 15,
    CU_FUNC_ATTRIBUTE_MAX
} CUfunction_attribute;

typedef enum CUpointer_attribute_enum {
    CU_POINTER_ATTRIBUTE_CONTEXT                    = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE                = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER             = 3,
    CU_POINTER_ATTRIBUTE_HOST_POINTER               = 4,
    CU_POINTER_ATTRIBUTE_P2P_TOKENS                 = 5,
    CU_POINTER_ATTRIBUTE_SYNC_MEMOPS                = 6,
    CU_POINTER_ATTRIBUTE_BUFFER_ID                  = 7,
    CU_POINTER_ATTRIBUTE_IS_MANAGED                 = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL             = 9,
    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR           = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE                 = 12,
    CU_POINTER_ATTRIBUTE_MAPPED                     = 13,
    CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES       = 14,
    CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE = 15,
    CU_POINTER_ATTRIBUTE_ACCESS_FLAGS               = 16,
    CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE             = 17,
    CU_POINTER_ATTRIBUTE_MAPPING_SIZE               = 18,
    CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR          = 19,
    CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID            = 20,
    CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE   = 21
} CUpointer_attribute;

typedef enum CUjit_option_enum {
    CU_JIT_MAX_REGISTERS                    = 0,
    CU_JIT_THREADS_PER_BLOCK                = 1,
    CU_JIT_WALL_TIME                        = 2,
    CU_JIT_INFO_LOG_BUFFER                  = 3,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES       = 4,
    CU_JIT_ERROR_LOG_BUFFER                 = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES      = 6,
    CU_JIT_OPTIMIZATION_LEVEL               = 7,
    CU_JIT_TARGET_FROM_CUCONTEXT            = 8,
    CU_JIT_TARGET                           = 9,
    CU_JIT_FALLBACK_STRATEGY                = 10,
    CU_JIT_GENERATE_DEBUG_INFO              = 11,
    CU_JIT_LOG_VERBOSE                      = 12,
    CU_JIT_GENERATE_LINE_INFO               = 13,
    CU_JIT_CACHE_MODE                       = 14,
    CU_JIT_NEW_SM3X_OPT                     = 15,
    CU_JIT_FAST_COMPILE                     = 16,
    CU_JIT_GLOBAL_SYMBOL_NAMES              = 17,
    CU_JIT_GLOBAL_SYMBOL_ADDRESSES          = 18,
    CU_JIT_GLOBAL_SYMBOL_COUNT              = 19,
    CU_JIT_LTO                              = 20,
    CU_JIT_FTZ                              = 21,
    CU_JIT_PREC_DIV                         = 22,
    CU_JIT_PREC_SQRT                        = 23,
    CU_JIT_FMA                              = 24,
    CU_JIT_REFERENCED_KERNEL_NAMES          = 25,
    CU_JIT_REFERENCED_KERNEL_COUNT          = 26,
    CU_JIT_REFERENCED_VARIABLE_NAMES        = 27,
    CU_JIT_REFERENCED_VARIABLE_COUNT        = 28,
    CU_JIT_OPTIMIZE_UNUSED_DEVICE_VARIABLES = 29,
    CU_JIT_POSITION_INDEPENDENT_CODE        = 30,
    CU_JIT_MIN_CTA_PER_SM                   = 31,
    CU_JIT_MAX_THREADS_PER_BLOCK            = 32,
    CU_JIT_OVERRIDE_DIRECTIVE_VALUES        = 33,
    CU_JIT_SPLIT_COMPILE                    = 34,
    CU_JIT_NUM_OPTIONS
} CUjit_option;

typedef enum CUjitInputType_enum {
    CU_JIT_INPUT_CUBIN     = 0,
    CU_JIT_INPUT_PTX       = 1,
    CU_JIT_INPUT_FATBINARY = 2,
    CU_JIT_INPUT_OBJECT    = 3,
    CU_JIT_INPUT_LIBRARY   = 4,
    CU_JIT_INPUT_NVVM      = 5,
    CU_JIT_NUM_INPUT_TYPES = 6
} CUjitInputType;
/* cuLibraryLoadData's library options (gpuhal passes none). */
typedef enum CUlibraryOption_enum {
    CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE = 0,
    CU_LIBRARY_BINARY_IS_PRESERVED = 1,
    CU_LIBRARY_NUM_OPTIONS
} CUlibraryOption;

typedef enum CUlimit_enum {
    CU_LIMIT_STACK_SIZE                       = 0x00,
    CU_LIMIT_PRINTF_FIFO_SIZE                 = 0x01,
    CU_LIMIT_MALLOC_HEAP_SIZE                 = 0x02,
    CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH           = 0x03,
    CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT = 0x04,
    CU_LIMIT_MAX_L2_FETCH_GRANULARITY         = 0x05,
    CU_LIMIT_PERSISTING_L2_CACHE_SIZE         = 0x06,
    CU_LIMIT_SHMEM_SIZE                       = 0x07,
    CU_LIMIT_CIG_ENABLED                      = 0x08,
    CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED       = 0x09,
    CU_LIMIT_MAX
} CUlimit;

typedef enum CUfunc_cache_enum {
    CU_FUNC_CACHE_PREFER_NONE   = 0x00,
    CU_FUNC_CACHE_PREFER_SHARED = 0x01,
    CU_FUNC_CACHE_PREFER_L1     = 0x02,
    CU_FUNC_CACHE_PREFER_EQUAL  = 0x03
} CUfunc_cache;

typedef enum CUsharedconfig_enum {
    CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE    = 0x00,
    CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE  = 0x01,
    CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE = 0x02
} CUsharedconfig;

typedef enum CUcomputemode_enum {
    CU_COMPUTEMODE_DEFAULT           = 0,
    CU_COMPUTEMODE_PROHIBITED        = 2,
    CU_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
} CUcomputemode;

typedef enum CUctx_flags_enum {
    CU_CTX_SCHED_AUTO           = 0x00,
    CU_CTX_SCHED_SPIN           = 0x01,
    CU_CTX_SCHED_YIELD          = 0x02,
    CU_CTX_SCHED_BLOCKING_SYNC  = 0x04,
    CU_CTX_BLOCKING_SYNC        = 0x04,
    CU_CTX_SCHED_MASK           = 0x07,
    CU_CTX_MAP_HOST             = 0x08,
    CU_CTX_LMEM_RESIZE_TO_MAX   = 0x10,
    CU_CTX_COREDUMP_ENABLE      = 0x20,
    CU_CTX_USER_COREDUMP_ENABLE = 0x40,
    CU_CTX_SYNC_MEMOPS          = 0x80,
    CU_CTX_FLAGS_MASK           = 0xFF
} CUctx_flags;

typedef enum CUstream_flags_enum {
    CU_STREAM_DEFAULT      = 0x0,
    CU_STREAM_NON_BLOCKING = 0x1
} CUstream_flags;

typedef enum CUevent_flags_enum {
    CU_EVENT_DEFAULT        = 0x0,
    CU_EVENT_BLOCKING_SYNC  = 0x1,
    CU_EVENT_DISABLE_TIMING = 0x2,
    CU_EVENT_INTERPROCESS   = 0x4
} CUevent_flags;

typedef enum CUevent_wait_flags_enum {
    CU_EVENT_WAIT_DEFAULT  = 0x0,
    CU_EVENT_WAIT_EXTERNAL = 0x1
} CUevent_wait_flags;

typedef enum CUevent_record_flags_enum {
    CU_EVENT_RECORD_DEFAULT  = 0x0,
    CU_EVENT_RECORD_EXTERNAL = 0x1
} CUevent_record_flags;

/* Stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64,
 * cuStreamBatchMemOp and batch memop graph nodes). */
typedef enum CUstreamWaitValue_flags_enum {
    CU_STREAM_WAIT_VALUE_GEQ   = 0x0,    /* (int32_t)(*addr - value) >= 0 (int64_t for 64-bit): cyclic */
    CU_STREAM_WAIT_VALUE_EQ    = 0x1,    /* *addr == value */
    CU_STREAM_WAIT_VALUE_AND   = 0x2,    /* (*addr & value) != 0 */
    CU_STREAM_WAIT_VALUE_NOR   = 0x3,    /* ~(*addr | value) != 0 */
    CU_STREAM_WAIT_VALUE_FLUSH = 1 << 30 /* then flush remote writes (CAN_FLUSH_REMOTE_WRITES) */
} CUstreamWaitValue_flags;

typedef enum CUstreamWriteValue_flags_enum {
    CU_STREAM_WRITE_VALUE_DEFAULT           = 0x0,
    CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER = 0x1 /* not supported by the _v2 API gpuhal resolves */
} CUstreamWriteValue_flags;

typedef enum CUstreamBatchMemOpType_enum {
    CU_STREAM_MEM_OP_WAIT_VALUE_32       = 1,
    CU_STREAM_MEM_OP_WRITE_VALUE_32      = 2,
    CU_STREAM_MEM_OP_WAIT_VALUE_64       = 4,
    CU_STREAM_MEM_OP_WRITE_VALUE_64      = 5,
    CU_STREAM_MEM_OP_BARRIER             = 6,
    CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES = 3
} CUstreamBatchMemOpType;

typedef enum CUstreamMemoryBarrier_flags_enum {
    CU_STREAM_MEMORY_BARRIER_TYPE_SYS = 0x0,
    CU_STREAM_MEMORY_BARRIER_TYPE_GPU = 0x1
} CUstreamMemoryBarrier_flags;

typedef enum CUmemAttach_flags_enum {
    CU_MEM_ATTACH_GLOBAL = 0x1,
    CU_MEM_ATTACH_HOST   = 0x2,
    CU_MEM_ATTACH_SINGLE = 0x4
} CUmemAttach_flags;

typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST    = 0x01,
    CU_MEMORYTYPE_DEVICE  = 0x02,
    CU_MEMORYTYPE_ARRAY   = 0x03,
    CU_MEMORYTYPE_UNIFIED = 0x04
} CUmemorytype;

typedef enum CUmemAllocationType_enum {
    CU_MEM_ALLOCATION_TYPE_INVALID = 0x0,
    CU_MEM_ALLOCATION_TYPE_PINNED  = 0x1,
    CU_MEM_ALLOCATION_TYPE_MANAGED = 0x2,
    CU_MEM_ALLOCATION_TYPE_MAX     = 0x7FFFFFFF
} CUmemAllocationType;

typedef enum CUmemAllocationHandleType_enum {
    CU_MEM_HANDLE_TYPE_NONE                  = 0x0,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
    CU_MEM_HANDLE_TYPE_WIN32                 = 0x2,
    CU_MEM_HANDLE_TYPE_WIN32_KMT             = 0x4,
    CU_MEM_HANDLE_TYPE_FABRIC                = 0x8,
    CU_MEM_HANDLE_TYPE_MAX                   = 0x7FFFFFFF
} CUmemAllocationHandleType;

typedef enum CUmemLocationType_enum {
    CU_MEM_LOCATION_TYPE_INVALID           = 0x0,
    CU_MEM_LOCATION_TYPE_NONE              = 0x0,
    CU_MEM_LOCATION_TYPE_DEVICE            = 0x1,
    CU_MEM_LOCATION_TYPE_HOST              = 0x2,
    CU_MEM_LOCATION_TYPE_HOST_NUMA         = 0x3,
    CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT = 0x4,
    CU_MEM_LOCATION_TYPE_MAX               = 0x7FFFFFFF
} CUmemLocationType;

typedef enum CUmemAccess_flags_enum {
    CU_MEM_ACCESS_FLAGS_PROT_NONE      = 0x0,
    CU_MEM_ACCESS_FLAGS_PROT_READ      = 0x1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3,
    CU_MEM_ACCESS_FLAGS_PROT_MAX       = 0x7FFFFFFF
} CUmemAccess_flags;

typedef enum CUmemAllocationGranularity_flags_enum {
    CU_MEM_ALLOC_GRANULARITY_MINIMUM     = 0x0,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1
} CUmemAllocationGranularity_flags;

/* cuIpcOpenMemHandle flags */
typedef enum CUipcMem_flags_enum {
    CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1
} CUipcMem_flags;

typedef enum CUmemPool_attribute_enum {
    CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES   = 1,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
    CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
    CU_MEMPOOL_ATTR_USED_MEM_HIGH
} CUmemPool_attribute;

typedef enum CUgraphNodeType_enum {
    CU_GRAPH_NODE_TYPE_KERNEL           = 0,
    CU_GRAPH_NODE_TYPE_MEMCPY           = 1,
    CU_GRAPH_NODE_TYPE_MEMSET           = 2,
    CU_GRAPH_NODE_TYPE_HOST             = 3,
    CU_GRAPH_NODE_TYPE_GRAPH            = 4,
    CU_GRAPH_NODE_TYPE_EMPTY            = 5,
    CU_GRAPH_NODE_TYPE_WAIT_EVENT       = 6,
    CU_GRAPH_NODE_TYPE_EVENT_RECORD     = 7,
    CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL = 8,
    CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT   = 9,
    CU_GRAPH_NODE_TYPE_MEM_ALLOC        = 10,
    CU_GRAPH_NODE_TYPE_MEM_FREE         = 11,
    CU_GRAPH_NODE_TYPE_BATCH_MEM_OP     = 12,
    CU_GRAPH_NODE_TYPE_CONDITIONAL      = 13
} CUgraphNodeType;

typedef enum CUgraphInstantiate_flags_enum {
    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH = 1,
    CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD              = 2,
    CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH       = 4,
    CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY   = 8
} CUgraphInstantiate_flags;

typedef enum CUgraphExecUpdateResult_enum {
    CU_GRAPH_EXEC_UPDATE_SUCCESS                           = 0x0,
    CU_GRAPH_EXEC_UPDATE_ERROR                             = 0x1,
    CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED            = 0x2,
    CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED           = 0x3,
    CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED            = 0x4,
    CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED          = 0x5,
    CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED               = 0x6,
    CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE = 0x7,
    CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED          = 0x8
} CUgraphExecUpdateResult;

typedef enum CUstreamCaptureMode_enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL       = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED      = 2
} CUstreamCaptureMode;

typedef enum CUstreamCaptureStatus_enum {
    CU_STREAM_CAPTURE_STATUS_NONE        = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE      = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum CUdriverProcAddress_flags_enum {
    CU_GET_PROC_ADDRESS_DEFAULT                   = 0,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM             = 1 << 0,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1
} CUdriverProcAddress_flags;

typedef enum CUdriverProcAddressQueryResult_enum {
    CU_GET_PROC_ADDRESS_SUCCESS                = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND       = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

/* ------------------------------------------------------------------------------------ */
/* Structs (byte-for-byte the driver's layout)                                          */
/* ------------------------------------------------------------------------------------ */

typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes;
    size_t srcY;
    CUmemorytype srcMemoryType;
    const void* srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;

    size_t dstXInBytes;
    size_t dstY;
    CUmemorytype dstMemoryType;
    void* dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;

    size_t WidthInBytes;
    size_t Height;
} CUDA_MEMCPY2D_v2;
typedef CUDA_MEMCPY2D_v2 CUDA_MEMCPY2D;

typedef struct CUDA_MEMCPY3D_st {
    size_t srcXInBytes;
    size_t srcY;
    size_t srcZ;
    size_t srcLOD;
    CUmemorytype srcMemoryType;
    const void* srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    void* reserved0;
    size_t srcPitch;
    size_t srcHeight;

    size_t dstXInBytes;
    size_t dstY;
    size_t dstZ;
    size_t dstLOD;
    CUmemorytype dstMemoryType;
    void* dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    void* reserved1;
    size_t dstPitch;
    size_t dstHeight;

    size_t WidthInBytes;
    size_t Height;
    size_t Depth;
} CUDA_MEMCPY3D_v2;
typedef CUDA_MEMCPY3D_v2 CUDA_MEMCPY3D;

typedef struct CUDA_MEMSET_NODE_PARAMS_st {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value;
    unsigned int elementSize; /* 1, 2 or 4 */
    size_t width;             /* in elements */
    size_t height;
} CUDA_MEMSET_NODE_PARAMS_v1;
typedef CUDA_MEMSET_NODE_PARAMS_v1 CUDA_MEMSET_NODE_PARAMS;

/* The CUDA 12 (_v2) layout: kern and ctx follow extra. func or kern is set, not both. */
typedef struct CUDA_KERNEL_NODE_PARAMS_v2_st {
    CUfunction func;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    void** kernelParams;
    void** extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS_v2;
typedef CUDA_KERNEL_NODE_PARAMS_v2 CUDA_KERNEL_NODE_PARAMS;

typedef struct CUDA_HOST_NODE_PARAMS_st {
    CUhostFn fn;
    void* userData;
} CUDA_HOST_NODE_PARAMS_v1;
typedef CUDA_HOST_NODE_PARAMS_v1 CUDA_HOST_NODE_PARAMS;

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation_v1;
typedef CUmemLocation_v1 CUmemLocation;

typedef struct CUmemAccessDesc_st {
    CUmemLocation location;
    CUmemAccess_flags flags;
} CUmemAccessDesc_v1;
typedef CUmemAccessDesc_v1 CUmemAccessDesc;

/* cuMemCreate / cuMemGetAllocationGranularity: 32 bytes in every CUDA 12/13 release.
 * win32HandleMetaData and allocFlags must be zero unless used: zero the whole struct. */
typedef struct CUmemAllocationProp_st {
    CUmemAllocationType type;
    CUmemAllocationHandleType requestedHandleTypes;
    CUmemLocation location;
    void* win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp_v1;
typedef CUmemAllocationProp_v1 CUmemAllocationProp;

/* cuIpcGetMemHandle / cuIpcOpenMemHandle: opaque, passed by value. */
typedef struct CUipcMemHandle_st {
    char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle_v1;
typedef CUipcMemHandle_v1 CUipcMemHandle;

/* 88 bytes in every CUDA 12/13 release; maxSize and usage were carved out of reserved by
 * later 12.x releases, and older drivers want reserved zero: zero the whole struct first. */
typedef struct CUmemPoolProps_st {
    CUmemAllocationType allocType;
    CUmemAllocationHandleType handleTypes;
    CUmemLocation location;
    void* win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps_v1;
typedef CUmemPoolProps_v1 CUmemPoolProps;

typedef struct CUgraphExecUpdateResultInfo_st {
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode;
    CUgraphNode errorFromNode;
} CUgraphExecUpdateResultInfo_v1;
typedef CUgraphExecUpdateResultInfo_v1 CUgraphExecUpdateResultInfo;

/* cuda.h nests an anonymous union (value / value64) here: standard in C11 and C++, an
 * extension in C99 that __extension__ admits without a -Wpedantic warning. The layout
 * (48 bytes, padded by pad[6]) is the same in every CUDA 12/13 release. */
#if defined(__GNUC__) && !defined(__cplusplus)
#define GPUHAL__ANONYMOUS_UNION __extension__ union
#else
#define GPUHAL__ANONYMOUS_UNION union
#endif
typedef union CUstreamBatchMemOpParams_union {
    CUstreamBatchMemOpType operation; /* the tag: first field of every member */
    struct CUstreamMemOpWaitValueParams_st {
        CUstreamBatchMemOpType operation;
        CUdeviceptr address;
        GPUHAL__ANONYMOUS_UNION {
            cuuint32_t value;
            cuuint64_t value64;
        };
        unsigned int flags; /* CUstreamWaitValue_flags */
        CUdeviceptr alias;  /* driver-internal */
    } waitValue;
    struct CUstreamMemOpWriteValueParams_st {
        CUstreamBatchMemOpType operation;
        CUdeviceptr address;
        GPUHAL__ANONYMOUS_UNION {
            cuuint32_t value;
            cuuint64_t value64;
        };
        unsigned int flags; /* CUstreamWriteValue_flags */
        CUdeviceptr alias;  /* driver-internal */
    } writeValue;
    struct CUstreamMemOpFlushRemoteWritesParams_st {
        CUstreamBatchMemOpType operation;
        unsigned int flags; /* must be 0 */
    } flushRemoteWrites;
    struct CUstreamMemOpMemoryBarrierParams_st {
        CUstreamBatchMemOpType operation;
        unsigned int flags; /* CUstreamMemoryBarrier_flags */
    } memoryBarrier;
    cuuint64_t pad[6];
} CUstreamBatchMemOpParams_v1;
typedef CUstreamBatchMemOpParams_v1 CUstreamBatchMemOpParams;
#undef GPUHAL__ANONYMOUS_UNION

/* v1 is what cuGraphAddBatchMemOpNode and cuGraphExecBatchMemOpNodeSetParams take; v2
 * (same layout) is cuGraphAddNode's member. */
typedef struct CUDA_BATCH_MEM_OP_NODE_PARAMS_v1_st {
    CUcontext ctx;
    unsigned int count;
    CUstreamBatchMemOpParams* paramArray;
    unsigned int flags;
} CUDA_BATCH_MEM_OP_NODE_PARAMS_v1;
typedef CUDA_BATCH_MEM_OP_NODE_PARAMS_v1 CUDA_BATCH_MEM_OP_NODE_PARAMS;

typedef struct CUDA_BATCH_MEM_OP_NODE_PARAMS_v2_st {
    CUcontext ctx;
    unsigned int count;
    CUstreamBatchMemOpParams* paramArray;
    unsigned int flags;
} CUDA_BATCH_MEM_OP_NODE_PARAMS_v2;

/* Launch attributes (cuLaunchKernelEx, cuGraphKernelNodeSetAttribute, occupancy queries).
 * Only the members gpuhal sets are named; pad keeps the union at its 64 bytes. */
typedef enum CUlaunchAttributeID_enum {
    CU_LAUNCH_ATTRIBUTE_IGNORE                               = 0,
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE                          = 2,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION                    = 4,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION    = 6,
    CU_LAUNCH_ATTRIBUTE_PRIORITY                             = 8
} CUlaunchAttributeID;
typedef union CUlaunchAttributeValue_union {
    char pad[64];
    int cooperative;
    struct {
        unsigned int x;
        unsigned int y;
        unsigned int z;
    } clusterDim;
    int programmaticStreamSerializationAllowed;
    int priority;
} CUlaunchAttributeValue;
typedef struct CUlaunchAttribute_st {
    CUlaunchAttributeID id;
    char pad[8 - sizeof(CUlaunchAttributeID)];
    CUlaunchAttributeValue value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute* attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
typedef CUlaunchAttributeID CUkernelNodeAttrID;
typedef CUlaunchAttributeValue CUkernelNodeAttrValue_v1;
typedef CUkernelNodeAttrValue_v1 CUkernelNodeAttrValue;

/* Graph edges with data (CUDA 12.3): a PROGRAMMATIC edge from a kernel node's
 * PROGRAMMATIC port lets the downstream kernel start before the upstream one has finished
 * (it waits in device code, griddepcontrol.wait, for the upstream work and its memory). */
typedef enum CUgraphDependencyType_enum {
    CU_GRAPH_DEPENDENCY_TYPE_DEFAULT      = 0,
    CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC = 1
} CUgraphDependencyType;
#define CU_GRAPH_KERNEL_NODE_PORT_DEFAULT      0
#define CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC 1
#define CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER 2
typedef struct CUgraphEdgeData_st {
    unsigned char from_port;
    unsigned char to_port;
    unsigned char type; /* CUgraphDependencyType */
    unsigned char reserved[5];
} CUgraphEdgeData;

/* Conditional graph nodes (CUDA 12.3): a node that runs its body graph if, or while, a
 * condition that device code sets (cudaGraphSetConditional) is non-zero. */
typedef cuuint64_t CUgraphConditionalHandle;
#define CU_GRAPH_COND_ASSIGN_DEFAULT 0x1
typedef enum CUgraphConditionalNodeType_enum {
    CU_GRAPH_COND_TYPE_IF = 0,
    CU_GRAPH_COND_TYPE_WHILE = 1,
    CU_GRAPH_COND_TYPE_SWITCH = 2
} CUgraphConditionalNodeType;
typedef struct CUDA_CONDITIONAL_NODE_PARAMS {
    CUgraphConditionalHandle handle;
    CUgraphConditionalNodeType type;
    unsigned int size;
    CUgraph* phGraph_out; /* the driver's array of body graphs, valid while the node lives */
    CUcontext ctx;
} CUDA_CONDITIONAL_NODE_PARAMS;
/* cuGraphAddNode's parameters. cuda.h puts the per-type parameters in an anonymous union
 * of 29 long longs, which C99 cannot spell: gpuhal declares the one member it uses,
 * `conditional`, at the union's offset and pads the rest, so `p.conditional` reads the
 * same with either header. */
typedef struct CUgraphNodeParams_st {
    CUgraphNodeType type;
    int reserved0[3];
    CUDA_CONDITIONAL_NODE_PARAMS conditional;
    long long reserved1[29 - sizeof(CUDA_CONDITIONAL_NODE_PARAMS) / sizeof(long long)];
    long long reserved2;
} CUgraphNodeParams;

/* Tensor maps (TMA, compute capability 9.0): an opaque 128-byte descriptor that
 * cuTensorMapEncodeTiled fills and a kernel takes by value (__grid_constant__). cuda.h
 * aligns it to 128 bytes only where the language can say so; callers align it themselves. */
#define CU_TENSOR_MAP_NUM_QWORDS 16
typedef struct CUtensorMap_st {
    cuuint64_t opaque[CU_TENSOR_MAP_NUM_QWORDS];
} CUtensorMap;

typedef enum CUtensorMapDataType_enum {
    CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,
    CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
    CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,
    CU_TENSOR_MAP_DATA_TYPE_INT32 = 3,
    CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4,
    CU_TENSOR_MAP_DATA_TYPE_INT64 = 5,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8,
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ = 10,
    CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 = 11,
    CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ = 12
} CUtensorMapDataType;

typedef enum CUtensorMapInterleave_enum {
    CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
    CU_TENSOR_MAP_INTERLEAVE_16B = 1,
    CU_TENSOR_MAP_INTERLEAVE_32B = 2
} CUtensorMapInterleave;

typedef enum CUtensorMapSwizzle_enum {
    CU_TENSOR_MAP_SWIZZLE_NONE = 0,
    CU_TENSOR_MAP_SWIZZLE_32B = 1,
    CU_TENSOR_MAP_SWIZZLE_64B = 2,
    CU_TENSOR_MAP_SWIZZLE_128B = 3
} CUtensorMapSwizzle;

typedef enum CUtensorMapL2promotion_enum {
    CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
    CU_TENSOR_MAP_L2_PROMOTION_L2_64B = 1,
    CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
    CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3
} CUtensorMapL2promotion;

typedef enum CUtensorMapFloatOOBfill_enum {
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0,
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA = 1
} CUtensorMapFloatOOBfill;

#endif /* !GPUHAL__HAVE_CUDA_TYPES */

/* ------------------------------------------------------------------------------------ */
/* NCCL types (plain types: present with GPUHAL_NO_NCCL too)                             */
/* ------------------------------------------------------------------------------------ */

#if !defined(GPUHAL__HAVE_NCCL_TYPES)

typedef struct ncclComm* ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess            = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError        = 2,
    ncclInternalError      = 3,
    ncclInvalidArgument    = 4,
    ncclInvalidUsage       = 5,
    ncclRemoteError        = 6,
    ncclInProgress         = 7,
    ncclNumResults         = 8
} ncclResult_t;

/* nccl.h sizes ncclMaxRedOp by sizeof(an enum), i.e. INT_MAX with 4-byte enums. */
typedef enum {
    ncclSum      = 0,
    ncclProd     = 1,
    ncclMax      = 2,
    ncclMin      = 3,
    ncclAvg      = 4,
    ncclNumOps   = 5,
    ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
    ncclInt8       = 0,
    ncclChar       = 0,
    ncclUint8      = 1,
    ncclInt32      = 2,
    ncclInt        = 2,
    ncclUint32     = 3,
    ncclInt64      = 4,
    ncclUint64     = 5,
    ncclFloat16    = 6,
    ncclHalf       = 6,
    ncclFloat32    = 7,
    ncclFloat      = 7,
    ncclFloat64    = 8,
    ncclDouble     = 8,
    ncclBfloat16   = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes   = 12
} ncclDataType_t;

#endif /* !GPUHAL__HAVE_NCCL_TYPES */

/* ------------------------------------------------------------------------------------ */
/* NVRTC types (run-time compilation: gpuhal_executable_compile)                          */
/* ------------------------------------------------------------------------------------ */

#if !defined(GPUHAL__HAVE_NVRTC_TYPES)

typedef enum {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
    NVRTC_ERROR_BUILTIN_OPERATION_FAILURE = 7,
    NVRTC_ERROR_INTERNAL_ERROR = 11
} nvrtcResult;

typedef struct _nvrtcProgram* nvrtcProgram;

#endif /* !GPUHAL__HAVE_NVRTC_TYPES */

/* ------------------------------------------------------------------------------------ */
/* Function tables                                                                      */
/* ------------------------------------------------------------------------------------ */

/* cuGetProcAddress is the one symbol resolved with dlsym first, as "cuGetProcAddress_v2"
 * (the CUDA 12.0 signature with the symbolStatus out-parameter); everything else in the
 * tables is then resolved through it at its pinned version. */
typedef CUresult (CUDAAPI* gpuhal_PFN_cuGetProcAddress)(const char* symbol, void** pfn, int cudaVersion,
                                                        cuuint64_t flags,
                                                        CUdriverProcAddressQueryResult* symbolStatus);

/* Entry points gpuhal cannot run without; a missing one fails driver creation.
 * cuGetErrorName / cuGetErrorString are plain too: they need no cuInit, so status
 * translation works even when initialisation itself failed.
 * cuThreadExchangeStreamCaptureMode (CUDA 10.1, pinned at its 12.0 ABI like the rest) puts
 * gpuhal's threads, and its calls on the application's, in relaxed stream-capture mode:
 * an application's capture in global mode would otherwise refuse them (device.h). */
#define GPUHAL_CUDA_REQUIRED_SYMBOLS(X)                                                                       \
    X(cuGetErrorName, "cuGetErrorName", 12000, (CUresult error, const char** pStr))                           \
    X(cuGetErrorString, "cuGetErrorString", 12000, (CUresult error, const char** pStr))                       \
    X(cuInit, "cuInit", 12000, (unsigned int flags))                                                          \
    X(cuDriverGetVersion, "cuDriverGetVersion", 12000, (int* driverVersion))                                  \
    X(cuDeviceGetCount, "cuDeviceGetCount", 12000, (int* count))                                              \
    X(cuDeviceGet, "cuDeviceGet", 12000, (CUdevice* device, int ordinal))                                     \
    X(cuDeviceGetName, "cuDeviceGetName", 12000, (char* name, int len, CUdevice dev))                         \
    X(cuDeviceGetUuid, "cuDeviceGetUuid_v2", 12000, (CUuuid* uuid, CUdevice dev))                             \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", 12000, (int* pi, CUdevice_attribute attrib, CUdevice dev)) \
    X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", 12000, (size_t* bytes, CUdevice dev))                          \
    X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", 12000, (char* pciBusId, int len, CUdevice dev))             \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 12000, (CUcontext* pctx, CUdevice dev))           \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 12000, (CUdevice dev))                       \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", 12000, (CUcontext* pctx))                                           \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", 12000, (CUcontext ctx))                                             \
    X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", 12000, (CUcontext ctx))                                        \
    X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", 12000, (CUcontext* pctx))                                        \
    X(cuCtxGetDevice, "cuCtxGetDevice", 12000, (CUdevice* device))                                            \
    X(cuCtxSynchronize, "cuCtxSynchronize", 12000, (void))                                                    \
    X(cuStreamCreate, "cuStreamCreate", 12000, (CUstream* phStream, unsigned int flags))                      \
    X(cuStreamDestroy, "cuStreamDestroy_v2", 12000, (CUstream hStream))                                       \
    X(cuStreamSynchronize, "cuStreamSynchronize", 12000, (CUstream hStream))                                  \
    X(cuStreamQuery, "cuStreamQuery", 12000, (CUstream hStream))                                              \
    X(cuStreamWaitEvent, "cuStreamWaitEvent", 12000, (CUstream hStream, CUevent hEvent, unsigned int flags))  \
    X(cuEventCreate, "cuEventCreate", 12000, (CUevent* phEvent, unsigned int flags))                          \
    X(cuEventDestroy, "cuEventDestroy_v2", 12000, (CUevent hEvent))                                           \
    X(cuEventRecord, "cuEventRecord", 12000, (CUevent hEvent, CUstream hStream))                              \
    X(cuEventQuery, "cuEventQuery", 12000, (CUevent hEvent))                                                  \
    X(cuEventSynchronize, "cuEventSynchronize", 12000, (CUevent hEvent))                                      \
    X(cuEventElapsedTime, "cuEventElapsedTime", 12000, (float* pMilliseconds, CUevent hStart, CUevent hEnd))  \
    X(cuMemAlloc, "cuMemAlloc_v2", 12000, (CUdeviceptr* dptr, size_t bytesize))                               \
    X(cuMemFree, "cuMemFree_v2", 12000, (CUdeviceptr dptr))                                                   \
    X(cuMemAllocHost, "cuMemAllocHost_v2", 12000, (void** pp, size_t bytesize))                               \
    X(cuMemHostAlloc, "cuMemHostAlloc", 12000, (void** pp, size_t bytesize, unsigned int flags))              \
    X(cuMemFreeHost, "cuMemFreeHost", 12000, (void* p))                                                       \
    X(cuMemAllocManaged, "cuMemAllocManaged", 12000, (CUdeviceptr* dptr, size_t bytesize, unsigned int flags)) \
    X(cuMemcpy, "cuMemcpy", 12000, (CUdeviceptr dst, CUdeviceptr src, size_t byteCount))                      \
    X(cuMemcpyAsync, "cuMemcpyAsync", 12000,                                                                  \
      (CUdeviceptr dst, CUdeviceptr src, size_t byteCount, CUstream hStream))                                 \
    X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", 12000, (CUdeviceptr dstDevice, const void* srcHost, size_t byteCount)) \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", 12000, (void* dstHost, CUdeviceptr srcDevice, size_t byteCount))       \
    X(cuMemcpyDtoD, "cuMemcpyDtoD_v2", 12000,                                                                 \
      (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t byteCount))                                       \
    X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", 12000,                                                       \
      (CUdeviceptr dstDevice, const void* srcHost, size_t byteCount, CUstream hStream))                       \
    X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 12000,                                                       \
      (void* dstHost, CUdeviceptr srcDevice, size_t byteCount, CUstream hStream))                             \
    X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", 12000,                                                       \
      (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t byteCount, CUstream hStream))                     \
    X(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", 12000,                                                          \
      (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,              \
       size_t byteCount, CUstream hStream))                                                                   \
    X(cuMemsetD8, "cuMemsetD8_v2", 12000, (CUdeviceptr dstDevice, unsigned char uc, size_t n))                \
    X(cuMemsetD16, "cuMemsetD16_v2", 12000, (CUdeviceptr dstDevice, unsigned short us, size_t n))             \
    X(cuMemsetD32, "cuMemsetD32_v2", 12000, (CUdeviceptr dstDevice, unsigned int ui, size_t n))               \
    X(cuMemsetD8Async, "cuMemsetD8Async", 12000,                                                              \
      (CUdeviceptr dstDevice, unsigned char uc, size_t n, CUstream hStream))                                  \
    X(cuMemsetD16Async, "cuMemsetD16Async", 12000,                                                            \
      (CUdeviceptr dstDevice, unsigned short us, size_t n, CUstream hStream))                                 \
    X(cuMemsetD32Async, "cuMemsetD32Async", 12000,                                                            \
      (CUdeviceptr dstDevice, unsigned int ui, size_t n, CUstream hStream))                                   \
    X(cuMemGetInfo, "cuMemGetInfo_v2", 12000, (size_t* freeBytes, size_t* totalBytes))                        \
    X(cuPointerGetAttribute, "cuPointerGetAttribute", 12000,                                                  \
      (void* data, CUpointer_attribute attribute, CUdeviceptr ptr))                                           \
    X(cuModuleLoadData, "cuModuleLoadData", 12000, (CUmodule* module, const void* image))                     \
    X(cuModuleLoadDataEx, "cuModuleLoadDataEx", 12000,                                                        \
      (CUmodule* module, const void* image, unsigned int numOptions, CUjit_option* options,                   \
       void** optionValues))                                                                                  \
    X(cuModuleUnload, "cuModuleUnload", 12000, (CUmodule hmod))                                               \
    X(cuModuleGetFunction, "cuModuleGetFunction", 12000, (CUfunction* hfunc, CUmodule hmod, const char* name)) \
    X(cuModuleGetGlobal, "cuModuleGetGlobal_v2", 12000,                                                       \
      (CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name))                                    \
    X(cuFuncGetAttribute, "cuFuncGetAttribute", 12000, (int* pi, CUfunction_attribute attrib, CUfunction hfunc)) \
    X(cuFuncSetAttribute, "cuFuncSetAttribute", 12000, (CUfunction hfunc, CUfunction_attribute attrib, int value)) \
    X(cuLaunchKernel, "cuLaunchKernel", 12000,                                                                \
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,                     \
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,   \
       CUstream hStream, void** kernelParams, void** extra))                                                  \
    X(cuLinkCreate, "cuLinkCreate_v2", 12000,                                                                 \
      (unsigned int numOptions, CUjit_option* options, void** optionValues, CUlinkState* stateOut))           \
    X(cuLinkAddData, "cuLinkAddData_v2", 12000,                                                               \
      (CUlinkState state, CUjitInputType type, void* data, size_t size, const char* name,                     \
       unsigned int numOptions, CUjit_option* options, void** optionValues))                                  \
    X(cuLinkComplete, "cuLinkComplete", 12000, (CUlinkState state, void** cubinOut, size_t* sizeOut))         \
    X(cuLinkDestroy, "cuLinkDestroy", 12000, (CUlinkState state))                                             \
    X(cuGraphCreate, "cuGraphCreate", 12000, (CUgraph* phGraph, unsigned int flags))                          \
    X(cuGraphDestroy, "cuGraphDestroy", 12000, (CUgraph hGraph))                                              \
    X(cuGraphAddKernelNode, "cuGraphAddKernelNode_v2", 12000,                                                 \
      (CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies, size_t numDependencies,     \
       const CUDA_KERNEL_NODE_PARAMS* nodeParams))                                                            \
    X(cuGraphAddMemcpyNode, "cuGraphAddMemcpyNode", 12000,                                                    \
      (CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies, size_t numDependencies,     \
       const CUDA_MEMCPY3D* copyParams, CUcontext ctx))                                                       \
    X(cuGraphAddMemsetNode, "cuGraphAddMemsetNode", 12000,                                                    \
      (CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies, size_t numDependencies,     \
       const CUDA_MEMSET_NODE_PARAMS* memsetParams, CUcontext ctx))                                           \
    X(cuGraphAddEmptyNode, "cuGraphAddEmptyNode", 12000,                                                      \
      (CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies, size_t numDependencies))    \
    X(cuGraphAddHostNode, "cuGraphAddHostNode", 12000,                                                        \
      (CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies, size_t numDependencies,     \
       const CUDA_HOST_NODE_PARAMS* nodeParams))                                                              \
    X(cuGraphAddEventRecordNode, "cuGraphAddEventRecordNode", 12000,                                          \
      (CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies, size_t numDependencies,     \
       CUevent event))                                                                                        \
    X(cuGraphAddEventWaitNode, "cuGraphAddEventWaitNode", 12000,                                              \
      (CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies, size_t numDependencies,     \
       CUevent event))                                                                                        \
    X(cuGraphAddChildGraphNode, "cuGraphAddChildGraphNode", 12000,                                            \
      (CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies, size_t numDependencies,     \
       CUgraph childGraph))                                                                                   \
    X(cuGraphGetNodes, "cuGraphGetNodes", 12000, (CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes))      \
    X(cuGraphGetEdges, "cuGraphGetEdges", 12000,                                                              \
      (CUgraph hGraph, CUgraphNode* from, CUgraphNode* to, size_t* numEdges))                                 \
    X(cuGraphNodeGetType, "cuGraphNodeGetType", 12000, (CUgraphNode hNode, CUgraphNodeType* type))            \
    X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 12000,                                      \
      (CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags))                                   \
    X(cuGraphExecDestroy, "cuGraphExecDestroy", 12000, (CUgraphExec hGraphExec))                              \
    X(cuGraphLaunch, "cuGraphLaunch", 12000, (CUgraphExec hGraphExec, CUstream hStream))                      \
    X(cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams_v2", 12000,                             \
      (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS* nodeParams))                 \
    X(cuGraphExecMemcpyNodeSetParams, "cuGraphExecMemcpyNodeSetParams", 12000,                                \
      (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_MEMCPY3D* copyParams, CUcontext ctx))            \
    X(cuGraphExecMemsetNodeSetParams, "cuGraphExecMemsetNodeSetParams", 12000,                                \
      (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS* memsetParams, CUcontext ctx)) \
    X(cuGraphExecUpdate, "cuGraphExecUpdate_v2", 12000,                                                       \
      (CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo* resultInfo))                      \
    X(cuStreamBeginCapture, "cuStreamBeginCapture_v2", 12000, (CUstream hStream, CUstreamCaptureMode mode))   \
    X(cuStreamEndCapture, "cuStreamEndCapture", 12000, (CUstream hStream, CUgraph* phGraph))                  \
    X(cuStreamIsCapturing, "cuStreamIsCapturing", 12000,                                                      \
      (CUstream hStream, CUstreamCaptureStatus* captureStatus))                                               \
    X(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 12000,                          \
      (CUstreamCaptureMode* mode))                                                                            \
    X(cuLaunchHostFunc, "cuLaunchHostFunc", 12000, (CUstream hStream, CUhostFn fn, void* userData))

/* Entry points behind a feature; a missing one turns off only that feature.
 * cuFuncGetParamInfo appeared in 12.4 and cuFuncGetName in 12.3: they are pinned to
 * the release that introduced them (an earlier version finds nothing).
 * cuCtxCreate is pinned to 11000 on purpose: at 11040 and later (12000 included) the
 * driver answers "cuCtxCreate" with cuCtxCreate_v3, the 5-argument exec-affinity form
 * (seen on driver 580); before 11040 it is always the 3-argument cuCtxCreate_v2.
 * The stream memory operations resolve to their _v2 exports (the 11.7 API, the only one
 * CUDA 12 has): they are always available there, the 64-bit ones and WAIT_VALUE_NOR only
 * where CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS / _CAN_USE_STREAM_WAIT_VALUE_NOR
 * say so. cuMemHostGetDevicePointer gives the device address of mapped pinned memory.
 * Sharing memory across processes: cuMemHostRegister (a host range, e.g. a MAP_SHARED
 * mapping, made device-visible; _v2 is the export of the 6.5+ ABI), legacy IPC of
 * cuMemAlloc memory (cuIpc*MemHandle; cuIpcOpenMemHandle_v2 likewise), and the virtual
 * memory management API (cuMemCreate .. cuMemGetAllocationGranularity), whose POSIX file
 * descriptors travel between processes; each is there where the driver says so
 * (CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, _VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
 * _HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED).
 * cuLibraryGetGlobal (with the other cuLibrary* calls, 12.0) finds a library's global in
 * the current context; without it gpuhal asks that context's module of the library
 * (cuModuleGetGlobal, which every driver has). */
#define GPUHAL_CUDA_OPTIONAL_SYMBOLS(X)                                                                       \
    X(cuFuncLoad, "cuFuncLoad", 12040, (CUfunction function))                                                 \
    X(cuMemPoolCreate, "cuMemPoolCreate", 12000, (CUmemoryPool* pool, const CUmemPoolProps* poolProps))       \
    X(cuMemPoolDestroy, "cuMemPoolDestroy", 12000, (CUmemoryPool pool))                                       \
    X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 12000,                                                  \
      (CUmemoryPool pool, CUmemPool_attribute attr, void* value))                                             \
    X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 12000,                                                  \
      (CUmemoryPool pool, CUmemPool_attribute attr, void* value))                                             \
    X(cuMemPoolTrimTo, "cuMemPoolTrimTo", 12000, (CUmemoryPool pool, size_t minBytesToKeep))                  \
    X(cuMemPoolSetAccess, "cuMemPoolSetAccess", 12000,                                                        \
      (CUmemoryPool pool, const CUmemAccessDesc* map, size_t count))                                          \
    X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 12000, (CUmemoryPool* poolOut, CUdevice dev))   \
    X(cuMemAllocAsync, "cuMemAllocAsync", 12000, (CUdeviceptr* dptr, size_t bytesize, CUstream hStream))      \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 12000,                                              \
      (CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream))                              \
    X(cuMemFreeAsync, "cuMemFreeAsync", 12000, (CUdeviceptr dptr, CUstream hStream))                          \
    X(cuFuncGetParamInfo, "cuFuncGetParamInfo", 12040,                                                        \
      (CUfunction func, size_t paramIndex, size_t* paramOffset, size_t* paramSize))                           \
    X(cuFuncGetName, "cuFuncGetName", 12030, (const char** name, CUfunction hfunc))                           \
    X(cuCtxCreate, "cuCtxCreate_v2", 11000, (CUcontext* pctx, unsigned int flags, CUdevice dev))              \
    X(cuCtxDestroy, "cuCtxDestroy_v2", 12000, (CUcontext ctx))                                                \
    X(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", 12000, (int* canAccessPeer, CUdevice dev, CUdevice peerDev)) \
    X(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", 12000, (CUcontext peerContext, unsigned int flags))     \
    X(cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess", 12000, (CUcontext peerContext))                       \
    X(cuMemcpyPeer, "cuMemcpyPeer", 12000,                                                                    \
      (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,              \
       size_t byteCount))                                                                                     \
    X(cuStreamWaitValue32, "cuStreamWaitValue32_v2", 12000,                                                   \
      (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                              \
    X(cuStreamWaitValue64, "cuStreamWaitValue64_v2", 12000,                                                   \
      (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags))                              \
    X(cuStreamWriteValue32, "cuStreamWriteValue32_v2", 12000,                                                 \
      (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags))                              \
    X(cuStreamWriteValue64, "cuStreamWriteValue64_v2", 12000,                                                 \
      (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags))                              \
    X(cuStreamBatchMemOp, "cuStreamBatchMemOp_v2", 12000,                                                     \
      (CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray, unsigned int flags))        \
    X(cuGraphAddBatchMemOpNode, "cuGraphAddBatchMemOpNode", 12000,                                            \
      (CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies, size_t numDependencies,     \
       const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams))                                                      \
    X(cuGraphExecBatchMemOpNodeSetParams, "cuGraphExecBatchMemOpNodeSetParams", 12000,                        \
      (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams))           \
    X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", 12000,                                       \
      (CUdeviceptr* pdptr, void* p, unsigned int Flags))                                                      \
    X(cuMemHostRegister, "cuMemHostRegister_v2", 12000, (void* p, size_t bytesize, unsigned int Flags))       \
    X(cuMemHostUnregister, "cuMemHostUnregister", 12000, (void* p))                                           \
    X(cuIpcGetMemHandle, "cuIpcGetMemHandle", 12000, (CUipcMemHandle* pHandle, CUdeviceptr dptr))             \
    X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", 12000,                                                     \
      (CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags))                                        \
    X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 12000, (CUdeviceptr dptr))                                  \
    X(cuMemCreate, "cuMemCreate", 12000,                                                                      \
      (CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,                    \
       unsigned long long flags))                                                                             \
    X(cuMemRelease, "cuMemRelease", 12000, (CUmemGenericAllocationHandle handle))                             \
    X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 12000,                                    \
      (void* shareableHandle, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType handleType,      \
       unsigned long long flags))                                                                             \
    X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 12000,                                \
      (CUmemGenericAllocationHandle* handle, void* osHandle, CUmemAllocationHandleType shHandleType))         \
    X(cuMemAddressReserve, "cuMemAddressReserve", 12000,                                                      \
      (CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags))          \
    X(cuMemAddressFree, "cuMemAddressFree", 12000, (CUdeviceptr ptr, size_t size))                            \
    X(cuMemMap, "cuMemMap", 12000,                                                                            \
      (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,                      \
       unsigned long long flags))                                                                             \
    X(cuMemUnmap, "cuMemUnmap", 12000, (CUdeviceptr ptr, size_t size))                                        \
    X(cuMemSetAccess, "cuMemSetAccess", 12000,                                                                \
      (CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count))                              \
    X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 12000,                                  \
      (size_t* granularity, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags option))        \
    X(cuGraphAddDependencies, "cuGraphAddDependencies_v2", 12030,                                             \
      (CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to, const CUgraphEdgeData* edgeData,      \
       size_t numDependencies))                                                                               \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", 12000,                                                            \
      (const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra))                        \
    X(cuGraphKernelNodeSetAttribute, "cuGraphKernelNodeSetAttribute", 12000,                                  \
      (CUgraphNode hNode, CUkernelNodeAttrID attr, const CUkernelNodeAttrValue* value))                       \
    X(cuGraphKernelNodeSetParams, "cuGraphKernelNodeSetParams_v2", 12000,                                     \
      (CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS* nodeParams))                                         \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor", 12000,      \
      (int* numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize))                               \
    X(cuOccupancyMaxPotentialClusterSize, "cuOccupancyMaxPotentialClusterSize", 12000,                        \
      (int* clusterSize, CUfunction func, const CUlaunchConfig* config))                                     \
    X(cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange", 12000, (int* leastPriority, int* greatestPriority)) \
    X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", 12000,                                                \
      (CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void* globalAddress,  \
       const cuuint64_t* globalDim, const cuuint64_t* globalStrides, const cuuint32_t* boxDim,                 \
       const cuuint32_t* elementStrides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,         \
       CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill))                 \
    X(cuLibraryLoadData, "cuLibraryLoadData", 12000,                                                          \
      (CUlibrary* library, const void* code, CUjit_option* jitOptions, void** jitOptionsValues,                \
       unsigned int numJitOptions, CUlibraryOption* libraryOptions, void** libraryOptionValues,               \
       unsigned int numLibraryOptions))                                                                       \
    X(cuLibraryUnload, "cuLibraryUnload", 12000, (CUlibrary library))                                         \
    X(cuLibraryGetModule, "cuLibraryGetModule", 12000, (CUmodule* pMod, CUlibrary library))                   \
    X(cuLibraryGetGlobal, "cuLibraryGetGlobal", 12000,                                                        \
      (CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name))                                \
    X(cuGraphConditionalHandleCreate, "cuGraphConditionalHandleCreate", 12030,                                \
      (CUgraphConditionalHandle* pHandle_out, CUgraph hGraph, CUcontext ctx, unsigned int defaultLaunchValue,   \
       unsigned int flags))                                                                                   \
    X(cuGraphAddNode, "cuGraphAddNode_v2", 12030,                                                             \
      (CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,                             \
       const CUgraphEdgeData* dependencyData, size_t numDependencies, CUgraphNodeParams* nodeParams))

/* NCCL: X(name, (params)); every entry returns ncclResult_t. ncclGetErrorString returns
 * const char* and is declared on its own below. Streams are CUstream, which is the same
 * type as NCCL's cudaStream_t (both are struct CUstream_st*). */
#define GPUHAL_NCCL_SYMBOLS(X)                                                                                \
    X(ncclGetVersion, (int* version))                                                                         \
    X(ncclGetUniqueId, (ncclUniqueId* uniqueId))                                                              \
    X(ncclCommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank))                        \
    X(ncclCommInitAll, (ncclComm_t* comm, int ndev, const int* devlist))                                      \
    X(ncclCommDestroy, (ncclComm_t comm))                                                                     \
    X(ncclCommAbort, (ncclComm_t comm))                                                                       \
    X(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError))                                     \
    X(ncclCommCount, (const ncclComm_t comm, int* count))                                                     \
    X(ncclCommUserRank, (const ncclComm_t comm, int* rank))                                                   \
    X(ncclAllReduce, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,            \
                      ncclRedOp_t op, ncclComm_t comm, CUstream stream))                                      \
    X(ncclAllGather, (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,        \
                      ncclComm_t comm, CUstream stream))                                                      \
    X(ncclReduceScatter, (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,    \
                          ncclRedOp_t op, ncclComm_t comm, CUstream stream))                                  \
    X(ncclBroadcast, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,  \
                      ncclComm_t comm, CUstream stream))                                                      \
    X(ncclReduce, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,               \
                   ncclRedOp_t op, int root, ncclComm_t comm, CUstream stream))                               \
    X(ncclSend, (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,      \
                 CUstream stream))                                                                            \
    X(ncclRecv, (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,            \
                 CUstream stream))                                                                            \
    X(ncclGroupStart, (void))                                                                                 \
    X(ncclGroupEnd, (void))

typedef const char* (*gpuhal_PFN_ncclGetErrorString)(ncclResult_t result);

/* NVRTC: X(name, (params)); every entry returns nvrtcResult. nvrtcGetErrorString returns
 * const char* and is declared on its own below. The optional entries (cubin output, the
 * list of supported architectures) came with CUDA 11.1 and 11.2. */
#define GPUHAL_NVRTC_SYMBOLS(X)                                                                               \
    X(nvrtcVersion, (int* major, int* minor))                                                                 \
    X(nvrtcCreateProgram, (nvrtcProgram* prog, const char* src, const char* name, int numHeaders,            \
                           const char* const* headers, const char* const* includeNames))                      \
    X(nvrtcDestroyProgram, (nvrtcProgram* prog))                                                              \
    X(nvrtcCompileProgram, (nvrtcProgram prog, int numOptions, const char* const* options))                  \
    X(nvrtcGetProgramLogSize, (nvrtcProgram prog, size_t* logSizeRet))                                        \
    X(nvrtcGetProgramLog, (nvrtcProgram prog, char* log))                                                     \
    X(nvrtcGetPTXSize, (nvrtcProgram prog, size_t* ptxSizeRet))                                               \
    X(nvrtcGetPTX, (nvrtcProgram prog, char* ptx))                                                            \
    X(nvrtcAddNameExpression, (nvrtcProgram prog, const char* const name_expression))                       \
    X(nvrtcGetLoweredName, (nvrtcProgram prog, const char* const name_expression, const char** lowered_name))
#define GPUHAL_NVRTC_OPTIONAL_SYMBOLS(X)                                                                      \
    X(nvrtcGetCUBINSize, (nvrtcProgram prog, size_t* cubinSizeRet))                                           \
    X(nvrtcGetCUBIN, (nvrtcProgram prog, char* cubin))                                                        \
    X(nvrtcGetNumSupportedArchs, (int* numArchs))                                                             \
    X(nvrtcGetSupportedArchs, (int* supportedArchs))

typedef const char* (*gpuhal_PFN_nvrtcGetErrorString)(nvrtcResult result);

/* gpuhal_PFN_<name> for every table entry. */
#define GPUHAL_CUDA_PFN_TYPEDEF(name, dlsym_name, pinned_version, params) \
    typedef CUresult(CUDAAPI* gpuhal_PFN_##name) params;
#define GPUHAL_NCCL_PFN_TYPEDEF(name, params) typedef ncclResult_t (*gpuhal_PFN_##name) params;
#define GPUHAL_NVRTC_PFN_TYPEDEF(name, params) typedef nvrtcResult (*gpuhal_PFN_##name) params;

GPUHAL_CUDA_REQUIRED_SYMBOLS(GPUHAL_CUDA_PFN_TYPEDEF)
GPUHAL_CUDA_OPTIONAL_SYMBOLS(GPUHAL_CUDA_PFN_TYPEDEF)
GPUHAL_NCCL_SYMBOLS(GPUHAL_NCCL_PFN_TYPEDEF)
GPUHAL_NVRTC_SYMBOLS(GPUHAL_NVRTC_PFN_TYPEDEF)
GPUHAL_NVRTC_OPTIONAL_SYMBOLS(GPUHAL_NVRTC_PFN_TYPEDEF)

#ifdef __cplusplus
}
#endif

#endif /* GPUHAL_CUDA_API_H */
