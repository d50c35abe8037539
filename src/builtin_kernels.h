/* gpuhal - the built-in kernels: fill and copy for what CUDA's memset and memcpy nodes
 * cannot do (8- and 16-byte patterns, late-bound addresses in graphs). Loaded once per
 * device through its module cache. Part of the implementation only. */
#ifndef GPUHAL_SRC_BUILTIN_KERNELS_H
#define GPUHAL_SRC_BUILTIN_KERNELS_H

#include "internal.h"
#include "device.h"
#include "module_cache.h"

/* ---- gpuhal:internal ---- */

/* The built-in kernels of one device (kept in its module cache state, loaded on first use). */
typedef struct gpuhal__builtins_s {
  gpuhal__module_entry_t* entry;
  CUfunction fill; /* (u8* dst, u64 size, u64 pattern_lo, u64 pattern_hi) */
  CUfunction copy; /* (u8* dst, const u8* src, u64 size) */
} gpuhal__builtins_t;

#define GPUHAL__BUILTIN_BLOCK 256u

/* The device's built-in kernels, loaded on first use (by the first thread to get there;
 * a racing loser drops its copy). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__builtins_get(gpuhal_device_t* device, gpuhal__builtins_t** out_builtins);

/* On the memop path the built-in kernels load with the device: CUDA loads code only into an
 * idle context (tools/probe/park_probe.c), and later a stream may be parked on a value that
 * only the thread recording a fill will signal. (So creating a device there waits for the
 * context's work in flight, as loading an executable does.) If they do not load, the
 * device never parks on a GPU value wait; its first fill tries again and reports why. */
GPUHAL__PRIVATE void gpuhal__command_buffer_device_ready(gpuhal_device_t* device);

/* Grid for a built-in kernel over `size` bytes: one thread per 16 bytes (plus the head and
 * tail bytes), capped; the kernels loop with a grid stride. */
GPUHAL__PRIVATE uint32_t gpuhal__builtin_grid(uint64_t size);

#endif /* GPUHAL_SRC_BUILTIN_KERNELS_H */
