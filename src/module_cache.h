/* gpuhal - the module cache: every executable's image is loaded through its device's cache,
 * in memory (one CUmodule per image and JIT options on a device) and on disk (disk_cache.h),
 * building a module when neither has it (DESIGN §8). */
#ifndef GPUHAL_SRC_MODULE_CACHE_H
#define GPUHAL_SRC_MODULE_CACHE_H

#include "internal.h"
#include "device.h"
#include "module_image.h"
#include "disk_cache.h"

/* ---- the module cache (DESIGN §8) ----
 *
 * Load once for every device: where the driver has context-independent loading
 * (cuLibraryLoadData), a PTX or fatbin image is loaded (and JIT-compiled) once per process
 * into a library the caches of all devices share (module_library.c); each device's entry
 * holds the library's module for its context, and its own kernel records (attributes are
 * per context). Cubins, which need no JIT, are loaded per context: cheaper on an H200; with
 * a disk cache, the PTX's cubin is compiled once and every other device's load is a disk
 * hit. params.modules_per_context = 1, or a driver without cuLibrary*, loads a module per
 * context for every format.
 *
 * Every gpuhal_executable_load goes through its device's cache. In memory, an entry is
 * keyed by the exact image bytes and JIT options (found through a fast hash, confirmed by
 * comparing the bytes), so the same image on one device shares one CUmodule; each device
 * (each context) has its own cache, so a module never runs on another context. Entries are
 * reference-counted by executables; the CUfunction of each kernel name is looked up once
 * per entry. An unreferenced entry stays loaded until it is evicted (least recently used
 * first, past module_cache_max_entries / module_cache_max_bytes), trimmed, or its device
 * is released. No compile runs under the cache lock, and concurrent loads of one image
 * compile once: the others wait for that result, and get its error if it failed (the
 * failure is not cached: the next load tries again).
 *
 * Disk cache (params.module_cache_dir, else $GPUHAL_CACHE_DIR): PTX is JIT-linked to a
 * cubin once (cuLink*, or the compile hook) and kept in a file named by the in-memory key's
 * fast hash of the PTX, its size, the compute capability, the driver version, the JIT
 * options and the compiler (driver or hook). Files are written to a unique temporary name,
 * fsync'ed and renamed, so readers in other processes see a whole file or none; each
 * carries a header with every key field, a copy of the PTX (compared byte for byte on a
 * hit, so a hit is exact and the name needs no cryptographic digest) and checksums of
 * itself and its payload, and is checked completely before use: a corrupt, truncated or
 * foreign file, or one made for another PTX of the same hash, is ignored (debug log) and
 * rebuilt. The
 * directory is kept under module_cache_disk_max_bytes by removing the files least recently
 * used (by mtime, which a hit refreshes). A directory that cannot be created or written
 * turns the disk cache off for the device, with one warning; loads go on in memory.
 * gpuhal's own built-in kernels (fills, copies) are a module of the cache too: loaded by the
 * first command that needs them, or at device creation on the memop path. */
/* What a kernel needs and allows, as the driver reports it (gpuhal_kernel_info, executable.h);
 * the cache keeps it with each module's kernels. */
#define GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN UINT32_MAX
typedef struct gpuhal_kernel_info_t {
  const char* name;                   /* the entry name; valid while the executable lives */
  int max_threads_per_block;          /* for this kernel on this device (registers, .maxntid, .reqntid lower it) */
  int static_shared_bytes;            /* __shared__ arrays of fixed size */
  int max_dynamic_shared_bytes;       /* current limit of launch shared_bytes (48 KiB - static by default) */
  int max_dynamic_shared_optin_bytes; /* the most gpuhal_kernel_set_max_dynamic_shared can allow */
  int num_regs;                       /* registers per thread */
  int local_bytes;                    /* local memory per thread (spills, stack arrays) */
  int const_bytes;                    /* user __constant__ bytes */
  int ptx_version;                    /* major*10+minor of the PTX it came from; 0 for SASS only */
  int binary_version;                 /* major*10+minor of the SASS it runs */
  /* Parameters: count, byte offsets and sizes in the parameter buffer. param_count is
   * GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN (and the arrays NULL) when the driver cannot say
   * (no cuFuncGetParamInfo: drivers before CUDA 12.4); command buffers then skip the
   * argument count and size checks for this kernel. The arrays live as long as the
   * executable. */
  uint32_t param_count;
  const uint32_t* param_offsets;
  const uint32_t* param_sizes;
  /* The one block shape a launch may have: the PTX's .reqntid (LLVM emits it for
   * !nvvm.annotations reqntidx/y/z; the PTX ISA makes any other block a launch failure, and
   * the compiler may have folded %ntid to it), which gpuhal_cmd_dispatch enforces. Zeros
   * when the kernel requires none, or when gpuhal cannot tell: the driver does not report
   * it, so gpuhal reads it from PTX images, not from cubins or fatbins. */
  uint32_t required_block[3];
} gpuhal_kernel_info_t;

typedef struct gpuhal_module_cache_stats_t {
  uint64_t hits;             /* loads served from memory (including those that waited for a compile in flight) */
  uint64_t misses;           /* loads that had to build a module (from disk or by compiling) */
  uint64_t waits;            /* hits that waited for another thread's compile of the same image */
  uint64_t compiles;         /* modules built from an image: PTX JIT (driver or hook) or a cubin/fatbin load */
  uint64_t compile_failures; /* builds that failed (their error went to every waiting load) */
  uint64_t disk_hits;        /* PTX loads served by a valid file of the disk cache */
  uint64_t disk_misses;      /* PTX loads that found no usable file */
  uint64_t disk_rejects;     /* files found but not used: corrupt, truncated, foreign, or refused by the driver */
  uint64_t disk_writes;      /* files written */
  uint64_t disk_evictions;   /* files this device removed to keep the directory within its bound */
  uint64_t source_compiles;  /* gpuhal_executable_compile calls that ran NVRTC */
  uint64_t source_disk_hits; /* gpuhal_executable_compile calls served by the disk cache (no NVRTC) */
  uint64_t evictions;        /* unreferenced entries unloaded to stay within the limits */
  uint64_t trimmed;          /* unreferenced entries unloaded by gpuhal_device_module_cache_trim */
  uint64_t library_shares;   /* builds served by a library another device (or an earlier load) had loaded: the
                                image was not loaded again, only its module taken for this context */
  uint64_t entries;          /* modules loaded now (referenced or not) */
  uint64_t bytes;            /* image bytes of those entries */
  uint64_t max_entries;      /* the limits in force */
  uint64_t max_bytes;
  int disk_enabled; /* 1 while the disk cache is in use */
} gpuhal_module_cache_stats_t;

/* A snapshot of the device's module cache counters. */
GPUHAL_API gpuhal_status_t gpuhal_device_module_cache_stats(gpuhal_device_t* device,
                                                            gpuhal_module_cache_stats_t* out_stats);
/* Unloads every entry no executable references (the disk cache is left alone). */
GPUHAL_API gpuhal_status_t gpuhal_device_module_cache_trim(gpuhal_device_t* device);

/* ---- gpuhal:internal ---- */

/* ---- the cache ---- */
/* JIT options that change the compiled code, and so are part of the cache key. */
typedef struct gpuhal__jit_options_s {
  int optimization_level; /* 0..4; -1: the driver's default (4) */
  int max_registers;      /* 0: no limit */
} gpuhal__jit_options_t;

/* One kernel of a loaded module: its CUfunction and attributes, looked up once per entry
 * and shared by every executable of the entry. */
typedef struct gpuhal__function_record_s {
  struct gpuhal__function_record_s* next;
  CUfunction function;
  gpuhal_kernel_info_t info; /* name and param arrays point into this record */
  uint32_t* params;          /* offsets then sizes (NULL when unknown) */
  /* The name's bytes follow the record in its allocation. A pointer, not a trailing
   * name[1] array: writing past name[0] draws -Warray-bounds at -O3, and C++ has no
   * flexible array members. */
  char* name;
} gpuhal__function_record_t;

typedef enum gpuhal__entry_state_e {
  GPUHAL__ENTRY_LOADING = 0, /* one thread builds it; others wait on the cache's condvar */
  GPUHAL__ENTRY_READY = 1,
  GPUHAL__ENTRY_FAILED = 2 /* out of the table; waiters take a copy of `failure` */
} gpuhal__entry_state_t;

/* One loaded module. refcount, state, the chain and LRU links are guarded by the cache
 * mutex; the image copy and key never change after creation. */
typedef struct gpuhal__module_entry_s {
  gpuhal__list_node_t lru;                  /* in cache->idle while READY and unreferenced */
  struct gpuhal__module_entry_s* hash_next; /* chain of its bucket while in the table */
  int32_t refcount;
  gpuhal__entry_state_t state;
  int in_table;
  gpuhal_status_t failure;
  gpuhal__image_format_t format;
  gpuhal__jit_options_t jit;
  uint64_t hash; /* fast64 of format, options and image: finds the bucket */
  size_t size;   /* bytes of image (PTX: without NUL) */
  void* image;   /* a NUL-terminated copy: the exact key */
  CUmodule module;
  /* The library `module` comes from (module_library.c); NULL: a module of this context
   * alone (cuModuleLoadDataEx). */
  struct gpuhal__library_s* library;
  CUcontext context;                       /* the context the module lives in (the device's) */
  struct gpuhal__deferred_call_s* put_off; /* the record its unload takes (gpuhal__deferred_call_reserve) */
  gpuhal__mutex_t functions_mutex;
  gpuhal__function_record_t* functions;
  /* PTX: the kernels with a .reqntid (names point into `image`), read from the image at the
   * first kernel lookup; guarded by functions_mutex. */
  int ptx_read;
  gpuhal__ptx_function_t* required_blocks;
  uint32_t required_block_count, required_block_capacity;
} gpuhal__module_entry_t;

/* ---- images loaded once for every device (module_library.c) ---- */
typedef struct gpuhal__library_s gpuhal__library_t;
/* The hash that keys an image in memory (the module cache's table, the driver's
 * libraries) and names its file on disk: the image's bytes, seeded by format and options. */
GPUHAL__PRIVATE uint64_t gpuhal__module_image_hash(const void* image, size_t size, gpuhal__image_format_t format,
                                                   const gpuhal__jit_options_t* jit);
/* 1 when the device loads through shared libraries: the driver has cuLibrary* and the
 * device's params do not ask for modules per context. */
GPUHAL__PRIVATE int gpuhal__module_library_usable(const gpuhal_device_t* device);
/* The driver's library of (image, format, JIT options), retained: loaded now with the JIT
 * options given (`options` carries an error log), or shared (*out_shared = 1) with the
 * devices that loaded it before. A failed load is not kept: the next one tries again. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__module_library_acquire(gpuhal_device_t* device, const void* image, size_t size,
                                                               gpuhal__image_format_t format,
                                                               const gpuhal__jit_options_t* jit, CUjit_option* options,
                                                               void** values, unsigned count,
                                                               gpuhal__library_t** out_library, int* out_shared);
GPUHAL__PRIVATE CUlibrary gpuhal__module_library_handle(const gpuhal__library_t* library);
/* Drops a reference; the last unloads the library (cuLibraryUnload, through `device`:
 * gpuhal__device_unload_library). Any thread. */
GPUHAL__PRIVATE void gpuhal__module_library_release(gpuhal_device_t* device, gpuhal__library_t* library);

/* Per-device state (device->module_cache). `builtins` lets builtin_kernels.h keep its
 * lazily loaded built-in kernels here. */
typedef struct gpuhal__module_cache_s {
  gpuhal_device_t* device;
  gpuhal__mutex_t mutex;
  gpuhal__cond_t flight_done; /* a LOADING entry became READY or FAILED */
  gpuhal__module_entry_t** buckets;
  size_t bucket_count;  /* a power of two */
  size_t table_count;   /* entries in the table (loading or ready) */
  uint64_t ready_count; /* READY entries in the table */
  uint64_t ready_bytes;
  gpuhal__list_node_t idle; /* READY, unreferenced; front = least recently used */
  uint64_t max_entries, max_bytes;
  gpuhal_module_cache_stats_t stats; /* counters: atomics */
  gpuhal__disk_cache_t disk;
  void* builtins;
  void (*builtins_destroy)(gpuhal_device_t* device, void* builtins);
} gpuhal__module_cache_t;

GPUHAL__PRIVATE gpuhal__module_cache_t* gpuhal__module_cache_of(gpuhal_device_t* device);

GPUHAL__PRIVATE gpuhal_status_t gpuhal__module_cache_create(gpuhal_device_t* device);

/* Called by device destruction after every executable is gone (a leaked executable's
 * module is unloaded here anyway: the context is about to go). */
GPUHAL__PRIVATE void gpuhal__module_cache_destroy(gpuhal_device_t* device);

/* THE load path: a retained, READY entry for (image, JIT options) on this device. A hit
 * costs a fast hash of the image and one byte compare under the lock. A miss inserts a
 * LOADING entry (so that concurrent loads of the image wait for it instead of compiling),
 * builds it outside the lock, and publishes the result. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__module_cache_load(gpuhal_device_t* device, const void* image, size_t size,
                                                          const gpuhal__jit_options_t* jit_or_null,
                                                          gpuhal__module_entry_t** out_entry);

/* Drops one reference (any thread). The entry stays loaded, unreferenced, until it is
 * evicted, trimmed or the device goes. */
GPUHAL__PRIVATE void gpuhal__module_cache_release(gpuhal_device_t* device, gpuhal__module_entry_t* entry);

#endif /* GPUHAL_SRC_MODULE_CACHE_H */
