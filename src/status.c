/* status: CUDA and NCCL errors as statuses that name the error, the call and file:line
 * (status.h). */
#include "status.h"

/* status: turning CUresult and ncclResult_t into gpuhal statuses.
 *
 * Every CUDA call in gpuhal goes through GPUHAL__CU (or GPUHAL__CU_RETURN), so every
 * driver error reads the same way, e.g.
 *   RESOURCE_EXHAUSTED: CUDA_ERROR_OUT_OF_MEMORY (out of memory) in cuMemAlloc at gpuhal.h:1234
 * Sticky errors (the context is unusable: illegal address, launch failure, ...) say so,
 * because the only way on is to tear the device down. The name table below is complete
 * for CUDA 13 and is the fallback when cuGetErrorName is unavailable or does not know a
 * value; an unknown value still gets a message with its number. */

typedef struct gpuhal__cuda_error_info_s {
  int value;
  const char* name;
  const char* text; /* cuGetErrorString's text, for when the driver cannot give it */
  gpuhal_status_code_t code;
  int sticky; /* the context is corrupt: every later call on it fails */
} gpuhal__cuda_error_info_t;

/* Values are numbers, not enumerators, so this table does not depend on which names
 * cuda_api.h declares; they are CUDA's ABI and never change. */
/* clang-format off: one error per line */
static const gpuhal__cuda_error_info_t gpuhal__cuda_errors[] = {
    {0, "CUDA_SUCCESS", "no error", GPUHAL_STATUS_OK, 0},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument", GPUHAL_STATUS_INVALID_ARGUMENT, 0},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", GPUHAL_STATUS_RESOURCE_EXHAUSTED, 0},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error", GPUHAL_STATUS_UNAVAILABLE, 0},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down", GPUHAL_STATUS_UNAVAILABLE, 0},
    {5, "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED", "profiler not initialized: call cudaProfilerInitialize()",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {7, "CUDA_ERROR_PROFILER_ALREADY_STARTED", "profiler already started", GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED", "profiler already stopped", GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library", GPUHAL_STATUS_UNAVAILABLE, 0},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable",
     GPUHAL_STATUS_UNAVAILABLE, 0},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected", GPUHAL_STATUS_UNAVAILABLE, 0},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal", GPUHAL_STATUS_INVALID_ARGUMENT, 0},
    {102, "CUDA_ERROR_DEVICE_NOT_LICENSED", "device doesn't have valid Grid license", GPUHAL_STATUS_PERMISSION_DENIED,
     0},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid", GPUHAL_STATUS_INVALID_ARGUMENT, 0},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context", GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current", GPUHAL_STATUS_ALREADY_EXISTS, 0},
    {205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed", GPUHAL_STATUS_INTERNAL, 0},
    {206, "CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed", GPUHAL_STATUS_INTERNAL, 0},
    {207, "CUDA_ERROR_ARRAY_IS_MAPPED", "array is mapped", GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped", GPUHAL_STATUS_ALREADY_EXISTS, 0},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device",
     GPUHAL_STATUS_NOT_FOUND, 0},
    {210, "CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired", GPUHAL_STATUS_ALREADY_EXISTS, 0},
    {211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped", GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY", "resource not mapped as array", GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER", "resource not mapped as pointer", GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered", GPUHAL_STATUS_DATA_LOSS, 1},
    {215, "CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported on this architecture", GPUHAL_STATUS_UNIMPLEMENTED,
     0},
    {216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "exclusive-thread device already in use by a different thread",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices",
     GPUHAL_STATUS_UNIMPLEMENTED, 0},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed", GPUHAL_STATUS_INVALID_ARGUMENT, 0},
    {219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", "invalid OpenGL or DirectX context", GPUHAL_STATUS_INVALID_ARGUMENT,
     0},
    {220, "CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error detected during the execution",
     GPUHAL_STATUS_DATA_LOSS, 1},
    {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found", GPUHAL_STATUS_UNAVAILABLE, 0},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain",
     GPUHAL_STATUS_UNIMPLEMENTED, 0},
    {223, "CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation was disabled", GPUHAL_STATUS_FAILED_PRECONDITION,
     0},
    {224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "the provided execution affinity is not supported",
     GPUHAL_STATUS_UNIMPLEMENTED, 0},
    {225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "the provided PTX contains unsupported call to cudaDeviceSynchronize",
     GPUHAL_STATUS_UNIMPLEMENTED, 0},
    {226, "CUDA_ERROR_CONTAINED",
     "an exception occurred on the device that is now contained by the GPU's error containment capability",
     GPUHAL_STATUS_INTERNAL, 1},
    {300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid", GPUHAL_STATUS_INVALID_ARGUMENT, 0},
    {301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found", GPUHAL_STATUS_NOT_FOUND, 0},
    {302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found", GPUHAL_STATUS_NOT_FOUND, 0},
    {303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed", GPUHAL_STATUS_INTERNAL, 0},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS", GPUHAL_STATUS_INTERNAL,
     0},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle", GPUHAL_STATUS_INVALID_ARGUMENT, 0},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {402, "CUDA_ERROR_LOSSY_QUERY", "attempted introspection would be semantically lossy",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found", GPUHAL_STATUS_NOT_FOUND, 0},
    {600, "CUDA_ERROR_NOT_READY", "device not ready", GPUHAL_STATUS_UNAVAILABLE, 0},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered", GPUHAL_STATUS_INTERNAL, 1},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch",
     GPUHAL_STATUS_RESOURCE_EXHAUSTED, 0},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated", GPUHAL_STATUS_INTERNAL, 1},
    {703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "launch uses incompatible texturing mode",
     GPUHAL_STATUS_INVALID_ARGUMENT, 0},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled", GPUHAL_STATUS_ALREADY_EXISTS, 0},
    {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled", GPUHAL_STATUS_FAILED_PRECONDITION,
     0},
    {708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "cannot set while device is active in this process",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed", GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {710, "CUDA_ERROR_ASSERT", "device-side assert triggered", GPUHAL_STATUS_INTERNAL, 1},
    {711, "CUDA_ERROR_TOO_MANY_PEERS", "peer mapping resources exhausted", GPUHAL_STATUS_RESOURCE_EXHAUSTED, 0},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped",
     GPUHAL_STATUS_ALREADY_EXISTS, 0},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {714, "CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error", GPUHAL_STATUS_INTERNAL, 1},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered", GPUHAL_STATUS_INTERNAL, 1},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address", GPUHAL_STATUS_INTERNAL, 1},
    {717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space",
     GPUHAL_STATUS_INTERNAL, 1},
    {718, "CUDA_ERROR_INVALID_PC", "invalid program counter", GPUHAL_STATUS_INTERNAL, 1},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure", GPUHAL_STATUS_INTERNAL, 1},
    {720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch",
     GPUHAL_STATUS_INVALID_ARGUMENT, 0},
    {721, "CUDA_ERROR_TENSOR_MEMORY_LEAK", "tensor memory not completely freed", GPUHAL_STATUS_INTERNAL, 1},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted", GPUHAL_STATUS_PERMISSION_DENIED, 0},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported", GPUHAL_STATUS_UNIMPLEMENTED, 0},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized", GPUHAL_STATUS_UNAVAILABLE, 0},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination",
     GPUHAL_STATUS_UNAVAILABLE, 0},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW",
     GPUHAL_STATUS_UNIMPLEMENTED, 0},
    {805, "CUDA_ERROR_MPS_CONNECTION_FAILED",
     "MPS client failed to connect to the MPS control daemon or the MPS server", GPUHAL_STATUS_UNAVAILABLE, 0},
    {806, "CUDA_ERROR_MPS_RPC_FAILURE", "the remote procedural call between the MPS server and the MPS client failed",
     GPUHAL_STATUS_UNAVAILABLE, 0},
    {807, "CUDA_ERROR_MPS_SERVER_NOT_READY", "MPS server is not ready to accept new MPS client requests",
     GPUHAL_STATUS_UNAVAILABLE, 0},
    {808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
     "the hardware resources required to create MPS client have been exhausted", GPUHAL_STATUS_RESOURCE_EXHAUSTED, 0},
    {809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED",
     "the hardware resources required to support device connections have been exhausted",
     GPUHAL_STATUS_RESOURCE_EXHAUSTED, 0},
    {810, "CUDA_ERROR_MPS_CLIENT_TERMINATED", "the MPS client has been terminated by the server", GPUHAL_STATUS_ABORTED,
     1},
    {811, "CUDA_ERROR_CDP_NOT_SUPPORTED",
     "is using CUDA Dynamic Parallelism, but the current configuration does not support it",
     GPUHAL_STATUS_UNIMPLEMENTED, 0},
    {812, "CUDA_ERROR_CDP_VERSION_MISMATCH",
     "unsupported interaction between different versions of CUDA Dynamic Parallelism",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture",
     GPUHAL_STATUS_ABORTED, 0},
    {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work", GPUHAL_STATUS_FAILED_PRECONDITION,
     0},
    {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream", GPUHAL_STATUS_FAILED_PRECONDITION,
     0},
    {907, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread", GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {909, "CUDA_ERROR_TIMEOUT", "wait operation timed out", GPUHAL_STATUS_DEADLINE_EXCEEDED, 0},
    {910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
     "the graph update was not performed because it included changes which violated constraints specific to "
     "instantiated graph update",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {911, "CUDA_ERROR_EXTERNAL_DEVICE", "an async error has occurred in an external entity outside of CUDA",
     GPUHAL_STATUS_INTERNAL, 1},
    {912, "CUDA_ERROR_INVALID_CLUSTER_SIZE", "a kernel launch error has occurred due to cluster misconfiguration",
     GPUHAL_STATUS_INVALID_ARGUMENT, 0},
    {913, "CUDA_ERROR_FUNCTION_NOT_LOADED",
     "the function handle is not loaded when calling an API that requires a loaded function",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {914, "CUDA_ERROR_INVALID_RESOURCE_TYPE",
     "one or more resources passed in are not valid resource types for the operation", GPUHAL_STATUS_INVALID_ARGUMENT,
     0},
    {915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
     "one or more resources are insufficient or non-applicable for the operation", GPUHAL_STATUS_INVALID_ARGUMENT, 0},
    {916, "CUDA_ERROR_KEY_ROTATION", "an error happened during the key rotation sequence", GPUHAL_STATUS_INTERNAL, 1},
    {917, "CUDA_ERROR_STREAM_DETACHED", "the stream has been detached from its context",
     GPUHAL_STATUS_FAILED_PRECONDITION, 0},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error", GPUHAL_STATUS_UNKNOWN, 0},
};
/* clang-format on */

static const gpuhal__cuda_error_info_t* gpuhal__cuda_error_find(CUresult result) {
  size_t i;
  for (i = 0; i < GPUHAL__ARRAY_SIZE(gpuhal__cuda_errors); ++i)
    if (gpuhal__cuda_errors[i].value == (int)result) return &gpuhal__cuda_errors[i];
  return NULL;
}

GPUHAL__PRIVATE int gpuhal__cuda_error_is_sticky(CUresult result) {
  const gpuhal__cuda_error_info_t* info = gpuhal__cuda_error_find(result);
  return info ? info->sticky : 0;
}

/* The gpuhal code for a CUresult; UNKNOWN for values this table does not know. */
static gpuhal_status_code_t gpuhal__cuda_error_code(CUresult result) {
  const gpuhal__cuda_error_info_t* info = gpuhal__cuda_error_find(result);
  if ((int)result == 0) return GPUHAL_STATUS_OK;
  return info ? info->code : GPUHAL_STATUS_UNKNOWN;
}

/* "gpuhal.h" from "/path/to/gpuhal.h": messages stay short and stable across machines. */
static const char* gpuhal__file_basename(const char* file) {
  const char* slash = file ? strrchr(file, '/') : NULL;
  return slash ? slash + 1 : (file ? file : "?");
}

GPUHAL__PRIVATE void gpuhal__cuda_error_describe(const gpuhal__cuda_symbols_t* cu, CUresult result,
                                                 const char** out_name, const char** out_text) {
  const gpuhal__cuda_error_info_t* info = gpuhal__cuda_error_find(result);
  const char* name = NULL;
  const char* text = NULL;
  if (cu && cu->cuGetErrorName && cu->cuGetErrorName(result, &name) != CUDA_SUCCESS) name = NULL;
  if (cu && cu->cuGetErrorString && cu->cuGetErrorString(result, &text) != CUDA_SUCCESS) text = NULL;
  if (!name) name = info ? info->name : NULL;
  if (!text) text = info ? info->text : NULL;
  *out_name = name;
  *out_text = text;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cuda_status(const gpuhal__cuda_symbols_t* cu, CUresult result, const char* call,
                                                    const char* file, int line) {
  const char* name;
  const char* text;
  int sticky;
  if ((int)result == 0) return NULL;
  gpuhal__cuda_error_describe(cu, result, &name, &text);
  sticky = gpuhal__cuda_error_is_sticky(result);
  if (!name)
    return gpuhal_status_make(GPUHAL_STATUS_UNKNOWN, "CUresult %d (not a CUDA error gpuhal knows) in %s at %s:%d",
                              (int)result, call, gpuhal__file_basename(file), line);
  return gpuhal_status_make(gpuhal__cuda_error_code(result), "%s (%s) in %s at %s:%d%s", name,
                            text ? text : "no description", call, gpuhal__file_basename(file), line,
                            sticky ? " [sticky error: the context is unusable, device lost]" : "");
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cuda_check(const gpuhal__cuda_symbols_t* cu, CUresult result, const char* call,
                                                   const char* file, int line) {
  return (int)result == 0 ? NULL : gpuhal__cuda_status(cu, result, call, file, line);
}

/* ---- NCCL ---- */
typedef struct gpuhal__nccl_error_info_s {
  int value;
  const char* name;
  const char* text;
  gpuhal_status_code_t code;
} gpuhal__nccl_error_info_t;

/* clang-format off: one error per line */
static const gpuhal__nccl_error_info_t gpuhal__nccl_errors[] = {
    {0, "ncclSuccess", "no error", GPUHAL_STATUS_OK},
    {1, "ncclUnhandledCudaError", "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
     GPUHAL_STATUS_INTERNAL},
    {2, "ncclSystemError", "unhandled system error (run with NCCL_DEBUG=INFO for details)", GPUHAL_STATUS_INTERNAL},
    {3, "ncclInternalError", "internal error - please report this issue to the NCCL developers",
     GPUHAL_STATUS_INTERNAL},
    {4, "ncclInvalidArgument", "invalid argument (run with NCCL_DEBUG=WARN for details)",
     GPUHAL_STATUS_INVALID_ARGUMENT},
    {5, "ncclInvalidUsage", "invalid usage (run with NCCL_DEBUG=WARN for details)", GPUHAL_STATUS_FAILED_PRECONDITION},
    {6, "ncclRemoteError", "remote process exited or there was a network error", GPUHAL_STATUS_UNAVAILABLE},
    {7, "ncclInProgress", "NCCL operation in progress", GPUHAL_STATUS_UNAVAILABLE},
};
/* clang-format on */

static const gpuhal__nccl_error_info_t* gpuhal__nccl_error_find(ncclResult_t result) {
  size_t i;
  for (i = 0; i < GPUHAL__ARRAY_SIZE(gpuhal__nccl_errors); ++i)
    if (gpuhal__nccl_errors[i].value == (int)result) return &gpuhal__nccl_errors[i];
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__nccl_status(const gpuhal__nccl_symbols_t* nccl, ncclResult_t result,
                                                    const char* call, const char* file, int line) {
  const gpuhal__nccl_error_info_t* info;
  const char* text = NULL;
  if ((int)result == 0) return NULL;
  info = gpuhal__nccl_error_find(result);
  if (nccl && nccl->ncclGetErrorString) text = nccl->ncclGetErrorString(result);
  if (!text && info) text = info->text;
  if (!info)
    return gpuhal_status_make(GPUHAL_STATUS_UNKNOWN, "ncclResult_t %d (%s) in %s at %s:%d", (int)result,
                              text ? text : "not an NCCL error gpuhal knows", call, gpuhal__file_basename(file), line);
  return gpuhal_status_make(info->code, "%s (%s) in %s at %s:%d", info->name, text ? text : "no description", call,
                            gpuhal__file_basename(file), line);
}
#define GPUHAL__NCCL_RETURN(nccl, fn, args) GPUHAL__RETURN_IF_ERROR(GPUHAL__NCCL(nccl, fn, args))

GPUHAL__PRIVATE gpuhal_status_t gpuhal__nvrtc_status(const gpuhal__nvrtc_symbols_t* nvrtc, nvrtcResult result,
                                                     const char* call, const char* file, int line) {
  gpuhal_status_code_t code = GPUHAL_STATUS_INTERNAL;
  const char* name = NULL;
  if (result == NVRTC_SUCCESS) return NULL;
  switch (result) {
    case NVRTC_ERROR_OUT_OF_MEMORY: code = GPUHAL_STATUS_RESOURCE_EXHAUSTED; break;
    case NVRTC_ERROR_INVALID_INPUT:
    case NVRTC_ERROR_INVALID_OPTION:
    case NVRTC_ERROR_COMPILATION: code = GPUHAL_STATUS_INVALID_ARGUMENT; break;
    default: break;
  }
  if (nvrtc && nvrtc->nvrtcGetErrorString) name = nvrtc->nvrtcGetErrorString(result);
  if (name) return gpuhal_status_make(code, "%s in %s at %s:%d", name, call, gpuhal__file_basename(file), line);
  return gpuhal_status_make(code, "nvrtcResult %d in %s at %s:%d", (int)result, call, gpuhal__file_basename(file),
                            line);
}
