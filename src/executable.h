/* gpuhal - executables (loaded kernel images: PTX, cubin, fatbin) and their kernels.
 *
 * An executable is one image loaded on one device. Loading goes through the device's
 * module cache: the same image loaded twice on one device shares one CUmodule. Kernels are
 * looked up by name, once per module: the CUfunction and its attributes are cached with
 * the module and shared by the kernel objects of every executable of that image. */
#ifndef GPUHAL_SRC_EXECUTABLE_H
#define GPUHAL_SRC_EXECUTABLE_H

#include "internal.h"
#include "device.h"
#include "memory.h"
#include "module_cache.h"

typedef struct gpuhal_executable_s gpuhal_executable_t;
typedef struct gpuhal_kernel_s gpuhal_kernel_t;

/* gpuhal_kernel_info_t is declared with the module cache, which keeps it per module. */

/* Loads an image on a device: PTX text (size may count a terminating NUL, or any number of
 * NULs padding it), a cubin (ELF) or a fatbin. The format is detected from the bytes;
 * anything else, and a cubin whose headers point past `size`, is INVALID_ARGUMENT. A PTX
 * compile error returns the JIT log in the status, with the PTX's .version and .target
 * beside the device's compute capability and the driver's version (a .target newer than
 * the device is named as such). A relocatable cubin (nvcc -rdc=true or -dc) is linked with the driver's linker first: one
 * that calls device functions of another image fails there, with the link log. The image is
 * copied; the caller may free it on return. */
GPUHAL_API gpuhal_status_t gpuhal_executable_load(gpuhal_device_t* device, const void* image, size_t size,
                                                  gpuhal_executable_t** out_executable);

/* What gpuhal_executable_compile passes to NVRTC besides the source. A zeroed struct (or
 * NULL) compiles with no options and no headers. */
typedef struct gpuhal_compile_options_t {
  const char* program_name;          /* names the source in NVRTC's log and in errors; NULL: "gpuhal_program.cu" */
  const char* const* options;        /* NVRTC options: "-DN=4", "--use_fast_math", "-lineinfo", "-arch=sm_90a" */
  uint32_t option_count;             /* entries of `options` */
  const char* const* header_names;   /* headers the source may #include, by these names, ... */
  const char* const* header_sources; /* ... with this text */
  uint32_t header_count;             /* entries of header_names and header_sources */
  /* C++ kernels (templates, namespaces) by the expression that names them: "scale<float>",
   * "ops::add"; gpuhal_executable_kernel then finds each by that expression. Variables too,
   * by their address ("&cfg::gain"), which gpuhal_executable_global(_buffer) then takes. */
  const char* const* name_expressions;
  uint32_t name_expression_count;
} gpuhal_compile_options_t;

/* Compiles CUDA C++ source at run time with NVRTC and loads the result on `device` as
 * gpuhal_executable_load does. Kernels are found by their entry names: declare them
 * extern "C", or list the C++ ones (templates, namespaces) in options->name_expressions,
 * which gpuhal_executable_kernel (and gpuhal_executable_global, for variables) then takes
 * as names.
 *   - Target: --gpu-architecture=compute_XY for the device's compute capability (or the newest
 *     one NVRTC supports below it), unless an option names an architecture itself
 *     (-arch=..., --gpu-architecture=...). An sm_ target whose code runs on the device (its
 *     major version, its minor or an earlier one; sm_90a on 9.0 only) gives a cubin, with
 *     SASS options such as -maxrregcount applied; another (sm_80 on an H200) gives PTX that
 *     the driver compiles for the device.
 *   - NVRTC is loaded on the first compile: gpuhal_driver_options_t.nvrtc_library, else
 *     $GPUHAL_NVRTC_LIBRARY, else libnvrtc.so.13, .so.12, .so. Not found: UNAVAILABLE
 *     listing what was tried. No CUDA toolkit is needed to build gpuhal.
 *   - Source that does not compile: INVALID_ARGUMENT with the program name and NVRTC's
 *     log; an option NVRTC refuses: INVALID_ARGUMENT naming options->options and the log.
 *   - With a disk cache (params.module_cache_dir, $GPUHAL_CACHE_DIR) NVRTC's output is
 *     kept, keyed by the source, headers, options, NVRTC's version and the device's
 *     compute capability: compiling the same program again, in this process or another,
 *     runs no NVRTC (gpuhal_module_cache_stats_t.source_disk_hits). Without one every
 *     call runs NVRTC. A program that may read headers from disk is not kept, as those
 *     files are not in the key: one with -I, --include-path, -include or --pre-include, or
 *     whose text (source or headers) has the word "include" anywhere but in a plain
 *     `#include "name"` (or <name>) line naming one of header_names: NVRTC opens another
 *     name next to the program name, or as an absolute path. (The word in a comment costs
 *     the disk cache, nothing else.) Headers passed in the options (header_sources) are in
 *     the key. */
GPUHAL_API gpuhal_status_t gpuhal_executable_compile(gpuhal_device_t* device, const char* source,
                                                     const gpuhal_compile_options_t* options,
                                                     gpuhal_executable_t** out_executable);
GPUHAL_API void gpuhal_executable_retain(gpuhal_executable_t* executable);
GPUHAL_API void gpuhal_executable_release(gpuhal_executable_t* executable);

/* The kernel named `name` (the .entry / extern "C" name). Unknown names are NOT_FOUND; in
 * a PTX image the status also says whether the name is a device function (.func), that
 * the PTX has no kernels, or which kernels it has (first those whose names contain `name`:
 * the mangled name of a C++, Julia or Numba kernel).
 * The kernel object is owned by the executable and valid while it lives: retain the
 * executable, not the kernel. Looking the same name up twice returns the same object. */
GPUHAL_API gpuhal_status_t gpuhal_executable_kernel(gpuhal_executable_t* executable, const char* name,
                                                    gpuhal_kernel_t** out_kernel);
GPUHAL_API gpuhal_status_t gpuhal_kernel_info(gpuhal_kernel_t* kernel, gpuhal_kernel_info_t* out_info);

/* Globals: the module-scope variables of the executable's image that the host fills before
 * launches (what nvcc's cudaMemcpyToSymbol writes): a __device__ variable (PTX .global) or a
 * __constant__ one (.const), named as the PTX names it (a C++ global at global namespace
 * scope by its own name; a namespaced one by its mangled name, or by the expression
 * gpuhal_executable_compile's name_expressions listed: "&cfg::bias").
 *   - Each device has its own copy, in its memory, initialised as the image says when the
 *     module is loaded there (an image loaded once for every device too: a copy per device).
 *   - The copy belongs to the module, which gpuhal shares: every executable of the same
 *     image (and JIT options) on one device sees the same variables, and a module stays
 *     loaded after its last executable (the module cache keeps it until it is evicted or
 *     trimmed; an image loaded once for every device until no device holds it), so a value
 *     written is what the next executable of the image finds until then; a module loaded
 *     again starts from the initialisers.
 *   - Unknown names are NOT_FOUND; in a PTX image the status also says whether the name is a
 *     kernel, a device function, a .shared or an .extern variable, that the PTX has no
 *     globals, or which it has (first those whose names contain `name`: a mangled C++
 *     name).
 * The device address and size in bytes of global `name`: kernels of this executable read
 * it there, and any kernel of the device may be passed the address (gpuhal_arg_u64). The
 * address is valid while the executable, or a buffer over one of its globals, lives. To
 * write it, take a buffer over it (below): gpuhal copies and fills take buffers. */
GPUHAL_API gpuhal_status_t gpuhal_executable_global(gpuhal_executable_t* executable, const char* name,
                                                    uint64_t* out_address, uint64_t* out_size);
/* A buffer over global `name` (see gpuhal_executable_global): GPUHAL_MEMORY_DEVICE, its size
 * the global's, on the executable's device, usable wherever a buffer is: gpuhal_buffer_write
 * / _read (synchronous), and gpuhal_cmd_update, _copy and _fill (in queue order with the
 * dispatches that read it; binding slots too), kernel arguments, peer copies. It holds a
 * reference on the executable (its module stays loaded while the buffer lives; release the
 * executable whenever you like) and frees nothing when released. Not exportable
 * (gpuhal_buffer_export: INVALID_ARGUMENT), not counted in gpuhal_memory_stats_t. Each call
 * makes a new buffer object over the same memory; release each. */
GPUHAL_API gpuhal_status_t gpuhal_executable_global_buffer(gpuhal_executable_t* executable, const char* name,
                                                           gpuhal_buffer_t** out_buffer);
/* Opt in to dynamic shared memory above the default 48 KiB (up to
 * max_dynamic_shared_optin_bytes), or lower the limit again. Affects every later launch of
 * this kernel, and of every kernel object of the same name loaded from the same image on
 * this device: they share one driver function, so the limit is one setting
 * (gpuhal_kernel_info of each reports it). Commands recorded before a lowering keep the
 * size they were checked against; a launch over the new limit fails when it is issued. */
GPUHAL_API gpuhal_status_t gpuhal_kernel_set_max_dynamic_shared(gpuhal_kernel_t* kernel, uint32_t bytes);

/* Occupancy: how many blocks of `kernel` one SM holds at once with `block_threads` threads
 * per block and `shared_bytes` of dynamic shared memory (0 when not even one fits; a
 * cooperative dispatch may have this many x gpuhal_device_info_t.sm_count blocks).
 * block_threads in 1..max_threads_per_block and shared_bytes within the kernel's dynamic
 * shared memory limit (OUT_OF_RANGE otherwise). */
GPUHAL_API gpuhal_status_t gpuhal_kernel_occupancy(gpuhal_kernel_t* kernel, uint32_t block_threads,
                                                   uint32_t shared_bytes, uint32_t* out_blocks_per_sm);
/* The most blocks a thread-block cluster of `kernel` may have with `block_threads` threads
 * per block and `shared_bytes` of dynamic shared memory (gpuhal_dispatch_options_t.cluster);
 * 0 on devices without clusters. Same argument rules as gpuhal_kernel_occupancy. */
GPUHAL_API gpuhal_status_t gpuhal_kernel_max_cluster_size(gpuhal_kernel_t* kernel, uint32_t block_threads,
                                                          uint32_t shared_bytes, uint32_t* out_blocks);

/* ---- gpuhal:internal ---- */

#define GPUHAL__MAGIC_KERNEL 0x4B45524Eu /* "KERN" */

/* ---- executables and kernels ---- */
struct gpuhal_kernel_s {
  gpuhal__object_t object; /* magic only: a kernel lives exactly as long as its executable */
  gpuhal_kernel_t* next;
  gpuhal_executable_t* executable;
  CUfunction function;
  /* The entry's record of `function`, whose info.max_dynamic_shared_bytes is the limit in
   * force (atomic: every kernel object of the entry sets and reads it there). */
  gpuhal__function_record_t* record;
  gpuhal_kernel_info_t info; /* as looked up; max_dynamic_shared_bytes: read the record's */
  char* name;                /* owned; apart from the object, so kernel objects have one size (base.h's pool) */
};

/* The dynamic shared memory limit launches of `kernel` have now (any thread). */
GPUHAL__PRIVATE int gpuhal__kernel_max_dynamic_shared(const gpuhal_kernel_t* kernel);

struct gpuhal_executable_s {
  gpuhal__object_t object;
  gpuhal_device_t* device; /* retained */
  gpuhal__module_entry_t* entry;
  gpuhal__mutex_t mutex; /* guards kernels */
  gpuhal_kernel_t* kernels;
  /* gpuhal_executable_compile's name expressions: "expression\0entry\0" pairs, then a
   * second NUL (NULL: none). Owned. */
  char* names;
};

/* gpuhal's own references (command buffers that dispatch its kernels). */
GPUHAL__PRIVATE void gpuhal__executable_retain_ref(gpuhal_executable_t* executable);
GPUHAL__PRIVATE void gpuhal__executable_release_ref(gpuhal_executable_t* executable);

/* On the memop path, loads a kernel looked up lazily (CUDA_MODULE_LOADING=LAZY, the default)
 * right away, in the device's context. On an H200 the first graph instantiation of a kernel
 * never used blocks while any stream of the context is parked on a value wait, holding a
 * driver lock that cuEventRecord and cuLaunchKernel on every other thread then wait for: a
 * GRAPH command buffer recorded while work is parked stopped the whole device
 * (tools/probe/park_probe.c). After cuFuncLoad (CUDA 12.4) it does not block. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__function_load_now(gpuhal_device_t* device, CUfunction function);

#endif /* GPUHAL_SRC_EXECUTABLE_H */
