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
 * CONFIGURATION MACROS (define before including gpuhal.h)
 *   name, what it does - default. All but GPUHAL_API and GPUHAL_STATIC act only in the
 *   file that defines GPUHAL_IMPLEMENTATION.
 *   GPUHAL_IMPLEMENTATION  emit the implementation in this file (exactly one) - off
 *   GPUHAL_API             decoration of public functions - extern (static with GPUHAL_STATIC)
 *   GPUHAL_STATIC          public functions static to this file; not with GPUHAL_API - off
 *   GPUHAL_ASSERT(c)       internal invariant check - assert(c) from <assert.h>
 *   GPUHAL_NO_NCCL         never load NCCL; channel calls return UNAVAILABLE - off
 *   GPUHAL_USE_CUDA_H      types from the real <cuda.h> (12.0+) - off, on if it came first
 *   GPUHAL_USE_NCCL_H      types from the real <nccl.h> - off, on if it came first
 *   GPUHAL_USE_NVRTC_H     types from the real <nvrtc.h> - off, on if it came first
 *   GPUHAL_HANDLE_REUSE_DISTANCE  released handles caught for this many later releases - 4096
 *   GPUHAL_TRACE_CAPACITY  records in the trace ring (~120 bytes each, min 16) - 65536
 *   GPUHAL_EVENT_POOL_BLOCK  CUevents a device's event pool adds per growth step - 32
 *   GPUHAL_DRIVER_RELEASE_SETTLE_NS  last driver release's wait for released devices (ns) - 30 s
 *   The queue's timing is tuned at run time: gpuhal_device_params_t.tuning (README.md).
 *
 * ENVIRONMENT VARIABLES
 *   name, what it does - default. Read when a driver or device is created; an empty value
 *   counts as unset; a matching gpuhal_driver_options_t or gpuhal_device_params_t field,
 *   when set (non-zero), wins over the variable. A value gpuhal does not recognise is
 *   logged (a warning naming the variable and what is used instead) and ignored.
 *   GPUHAL_CUDA_LIBRARY      the only driver library tried - libcuda.so.1, then libcuda.so
 *   GPUHAL_NCCL_LIBRARY      the only NCCL library tried - libnccl.so.2, then libnccl.so
 *   GPUHAL_NVRTC_LIBRARY     the only NVRTC library tried - libnvrtc.so.13, .so.12, .so
 *   GPUHAL_LOG               none|off|error|warn|info|debug (any case): log from that level - warn
 *   GPUHAL_CACHE_DIR         directory of the persistent kernel cache - none (memory only)
 *   GPUHAL_TRACE             file to write a Chrome-trace (Perfetto) JSON timeline to - none
 *   GPUHAL_SEMAPHORE_MEMOPS  0: timeline values never in device memory; 1: on - on where supported
 *   GPUHAL_HANG_REPORT       seconds: a host wait (or device_wait_idle) this long logs
 *                            gpuhal_driver_report_pending once - off
 *   GPUHAL_NVTX              0: no NVTX ranges; other: ranges without Nsight - on under Nsight
 *   GPUHAL_NVTX_LIBRARY      the NVTX library for those ranges - libnvToolsExt.so.1
 *   NVTX_INJECTION64_PATH    set by Nsight tools: NVTX ranges unless GPUHAL_NVTX=0 - unset
 *   CUDA_DEVICE_MAX_CONNECTIONS  CUDA's; default tuning.gpu_parked_max is a quarter - 8 (so 2)
 *
 * THREADS
 *   Every gpuhal object may be used from any thread. No gpuhal call changes the calling
 *   thread's current CUDA context: context-dependent work runs on the device's worker
 *   thread or inside a push/pop that restores the caller's context. gpuhal's own CUDA
 *   calls run in relaxed stream-capture mode (its threads for life; on yours for the call,
 *   giving your thread's mode back), and gpuhal never captures your streams: your stream
 *   capture in any mode (CUDA's default global one included) does not make CUDA refuse
 *   gpuhal's calls, nor do they invalidate it under the capture-mode rule. (Releases that
 *   free memory or unload a module wait for the whole context: leave them until a capture
 *   in that context ends.) Queue operations never block their caller. A forked child
 *   must create its own driver: one inherited from the parent has none of its threads
 *   there (see gpuhal_driver_create).
 *
 * LICENCE: MIT, at the end of this file.
 */

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
