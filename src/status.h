/* status has no public declarations (the status API itself lives in base). */
#ifndef GPUHAL_SRC_STATUS_H
#define GPUHAL_SRC_STATUS_H

#include "internal.h"
#include "symbols.h"

/* ---- gpuhal:internal ---- */

/* 1 when `result` leaves the context unusable (CUDA's "sticky" errors). */
GPUHAL__PRIVATE int gpuhal__cuda_error_is_sticky(CUresult result);

/* The error's name and text: from the driver when it can say, else from our table. */
GPUHAL__PRIVATE void gpuhal__cuda_error_describe(const gpuhal__cuda_symbols_t* cu, CUresult result,
                                                 const char** out_name, const char** out_text);

/* NULL for CUDA_SUCCESS; otherwise a status with the error name and text, the call and
 * file:line, and for sticky errors the news that the device is lost. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cuda_status(const gpuhal__cuda_symbols_t* cu, CUresult result, const char* call,
                                                    const char* file, int line);

/* gpuhal__cuda_status behind a test small enough to inline (gpuhal.h is one translation
 * unit): a call that succeeds, as every call on the queue's paths does, costs no call to
 * check. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cuda_check(const gpuhal__cuda_symbols_t* cu, CUresult result, const char* call,
                                                   const char* file, int line);

/* GPUHAL__CU(cu, cuMemAlloc, (&ptr, size)): calls cu->cuMemAlloc(&ptr, size) and gives NULL
 * or the status. GPUHAL__CU_RETURN returns that status from the enclosing function. */
#define GPUHAL__CU(cu, fn, args) gpuhal__cuda_check((cu), (cu)->fn args, #fn, __FILE__, __LINE__)
#define GPUHAL__CU_RETURN(cu, fn, args) GPUHAL__RETURN_IF_ERROR(GPUHAL__CU(cu, fn, args))

/* NULL for ncclSuccess; otherwise a status naming the NCCL error, the call and file:line. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__nccl_status(const gpuhal__nccl_symbols_t* nccl, ncclResult_t result,
                                                    const char* call, const char* file, int line);

#define GPUHAL__NCCL(nccl, fn, args) gpuhal__nccl_status((nccl), (nccl)->fn args, #fn, __FILE__, __LINE__)

/* NULL for NVRTC_SUCCESS; otherwise a status naming the NVRTC error, the call and
 * file:line: out of memory is RESOURCE_EXHAUSTED, bad input, options or source
 * INVALID_ARGUMENT, anything else INTERNAL. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__nvrtc_status(const gpuhal__nvrtc_symbols_t* nvrtc, nvrtcResult result,
                                                     const char* call, const char* file, int line);

#define GPUHAL__NVRTC(nvrtc, fn, args) gpuhal__nvrtc_status((nvrtc), (nvrtc)->fn args, #fn, __FILE__, __LINE__)

#endif /* GPUHAL_SRC_STATUS_H */
