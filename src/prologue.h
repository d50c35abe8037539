/*
 * gpuhal.h - a single-header C runtime for NVIDIA GPUs over the CUDA driver API.
 *
 * WHAT IT IS
 *   Devices, buffers, kernels, command buffers recorded into CUDA graphs, timeline
 *   semaphores, a deferred queue that orders work on the GPU without host round trips,
 *   stream-ordered allocation, a kernel module cache (in memory and on disk) and NCCL
 *   collectives. No CUDA toolkit is needed to build: the driver (libcuda.so.1) and,
 *   optionally, NCCL (libnccl.so.2) are loaded at run time.
 *
 * USE
 *   In exactly one C or C++ file:
 *
 *     #define GPUHAL_IMPLEMENTATION
 *     #include "gpuhal.h"
 *
 *   Everywhere else include "gpuhal.h" alone. Link with -ldl -lpthread (glibc 2.34+
 *   needs neither).
 *
 *     gpuhal_driver_t* driver = NULL;
 *     gpuhal_device_t* device = NULL;
 *     gpuhal_buffer_t* buffer = NULL;
 *     gpuhal_status_t st = gpuhal_driver_create(NULL, &driver);
 *     if (!st) st = gpuhal_device_create(driver, 0, NULL, &device);
 *     if (!st) st = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, 1024, &buffer);
 *     if (!st) st = gpuhal_buffer_write(buffer, 0, host_data, 1024);
 *     if (st) {
 *       fprintf(stderr, "gpuhal: %s\n", gpuhal_status_message(st));
 *       gpuhal_status_free(st);
 *     }
 *     gpuhal_buffer_release(buffer);   // releasing NULL is a no-op
 *     gpuhal_device_release(device);
 *     gpuhal_driver_release(driver);
 *
 *   Every fallible call returns a gpuhal_status_t: NULL means OK; anything else is an
 *   owned object that says what failed (the CUDA error name, the call and file:line
 *   for driver errors) and must be freed with gpuhal_status_free.
 *
 * CONFIGURATION (define before including the implementation)
 *   GPUHAL_API          decoration of public functions (default: extern)
 *   GPUHAL_STATIC       make every gpuhal function static to the including file
 *   GPUHAL_ASSERT(c)    internal invariant check (default: assert from <assert.h>)
 *   GPUHAL_NO_NCCL      leave out collectives; channel calls return UNAVAILABLE
 *   GPUHAL_USE_CUDA_H   use the real <cuda.h> instead of gpuhal's own declarations
 *                       (also chosen automatically when <cuda.h> was included first)
 *   GPUHAL_HANDLE_REUSE_DISTANCE  released objects of a type reused only after this many
 *                       later releases of that type (default 4096): calls on a released
 *                       handle are caught until then (see base.h, object pools)
 *   The queue's timing is tuned at run time: gpuhal_device_params_t.tuning (README.md).
 *
 * ENVIRONMENT
 *   GPUHAL_CUDA_LIBRARY   driver library to load (default libcuda.so.1, then libcuda.so)
 *   GPUHAL_NCCL_LIBRARY   NCCL library to load (default libnccl.so.2, then libnccl.so)
 *   GPUHAL_LOG            error|warn|info|debug: log to stderr at that level and above
 *   GPUHAL_CACHE_DIR      directory of the persistent kernel cache
 *   GPUHAL_TRACE          file to write a Chrome-trace (Perfetto) JSON timeline to
 *   GPUHAL_SEMAPHORE_MEMOPS  0: timeline values never in device memory (on by default where
 *                         every device has 64-bit stream memory operations)
 *
 * THREADS
 *   Every gpuhal object may be used from any thread. No gpuhal call changes the calling
 *   thread's current CUDA context: context-dependent work runs on the device's worker
 *   thread or inside a push/pop that restores the caller's context. Queue operations
 *   never block their caller.
 *
 * LICENCE: MIT, at the end of this file.
 */
#ifndef GPUHAL_H
#define GPUHAL_H

/* The implementation needs POSIX (clocks, threads, dlopen). In strict ISO modes
 * (-std=c99) ask for it, which works when gpuhal.h comes before any system header. */
#if defined(GPUHAL_IMPLEMENTATION) && !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE) && \
    !defined(_DEFAULT_SOURCE) && !defined(_XOPEN_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#define GPUHAL_VERSION_MAJOR 0
#define GPUHAL_VERSION_MINOR 1
#define GPUHAL_VERSION_PATCH 0
#define GPUHAL_VERSION_STRING "0.1.0"

#include <stddef.h>
#include <stdint.h>

#if defined(GPUHAL_STATIC) && defined(GPUHAL_API)
#error "gpuhal: define GPUHAL_STATIC or GPUHAL_API, not both: GPUHAL_STATIC already makes GPUHAL_API static"
#endif
#ifndef GPUHAL_API
#if defined(GPUHAL_STATIC)
#define GPUHAL_API static
#else
#define GPUHAL_API extern
#endif
#endif

#if defined(__GNUC__) || defined(__clang__)
#define GPUHAL_PRINTF_ATTR(fmt_index, args_index) __attribute__((format(printf, fmt_index, args_index)))
#else
#define GPUHAL_PRINTF_ATTR(fmt_index, args_index)
#endif

#ifdef __cplusplus
extern "C" {
#endif

