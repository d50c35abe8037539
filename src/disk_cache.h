/* gpuhal - the module cache's disk half: compiled kernels kept across processes, one file
 * per image, JIT options, device and driver (DESIGN §8). The file format, lookups and stores,
 * eviction down to a size limit. Part of the implementation only; module_cache.h decides
 * when to use it. */
#ifndef GPUHAL_SRC_DISK_CACHE_H
#define GPUHAL_SRC_DISK_CACHE_H

#include "internal.h"
#include "device.h"

/* ---- gpuhal:internal ---- */

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* Counts one event in a statistics counter (atomics: read without the lock). */
#define GPUHAL__STAT_ADD(stats, field) ((void)gpuhal__atomic_add_relaxed(&(stats)->field, 1))

#define GPUHAL__PATH_MAX 4096

/* A device's disk cache (in its module cache). */
typedef struct gpuhal__disk_cache_s {
  gpuhal_device_t* device;
  char* dir;   /* NULL: no disk cache */
  int enabled; /* atomic: cleared (with one warning) when the directory fails us */
  uint64_t max_bytes;
  uint64_t writes;    /* atomic: files written (the module cache's stats report it) */
  uint64_t evictions; /* atomic: files this device removed to keep within max_bytes */
} gpuhal__disk_cache_t;

/* What made a file's payload: the driver's linker or the user's compile hook from PTX (a
 * cubin), or NVRTC from CUDA C source (PTX, or a cubin for an sm_ target). */
typedef enum gpuhal__compiler_e {
  GPUHAL__COMPILER_DRIVER = 0,
  GPUHAL__COMPILER_HOOK = 1,
  GPUHAL__COMPILER_NVRTC = 2
} gpuhal__compiler_t;

/* What a disk-cache file must have been made for. The file holds a copy of the image and a
 * hit compares it byte for byte; the hash only names the file. */
typedef struct gpuhal__disk_key_s {
  uint64_t image_hash; /* the module cache's fast hash of the image (and JIT options) */
  uint64_t image_size;
  const void* image;
  uint32_t image_format;
  int32_t cc_major, cc_minor;
  int32_t driver_version;     /* NVRTC's version (major * 1000 + minor * 10) for GPUHAL__COMPILER_NVRTC */
  int32_t optimization_level; /* normalized: the driver default (-1) is 4 */
  int32_t max_registers;
  uint32_t compiler;
} gpuhal__disk_key_t;

/* The file name of a key: "<16 hex hash>-<image size>-sm90-drv13000-O4-R0-driver.gpuhal"
 * ("-hook", "-nvrtc" for the other compilers). */
GPUHAL__PRIVATE void gpuhal__disk_file_name(const gpuhal__disk_key_t* key, char* out, size_t out_size);

/* ---- the disk cache: files ---- */

/* Turns the disk cache of this device off, warning once. */
GPUHAL__PRIVATE void gpuhal__disk_disable(gpuhal__disk_cache_t* disk, const char* what, int error);

/* mkdir -p. 0 or an errno. */
GPUHAL__PRIVATE int gpuhal__make_dirs(const char* path);

GPUHAL__PRIVATE int gpuhal__disk_path(const gpuhal__disk_cache_t* disk, const char* name, char* out, size_t out_size);

/* Looks the key up on disk, checking the file as it reads it (header, the stored image
 * against key->image, the payload), and refreshes its mtime on a hit. On success
 * *out_file is a buffer to free and *out_payload the payload in it. A missing file is
 * NOT_FOUND; a bad one, DATA_LOSS or FAILED_PRECONDITION. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__disk_lookup(gpuhal__disk_cache_t* disk, const gpuhal__disk_key_t* key,
                                                    const char* path, void** out_file, const void** out_payload,
                                                    size_t* out_payload_size);

/* Creates a new file beside `path` for writing (its name in `temp`), to be renamed over
 * `path` once whole. The name is unique per process, call and clock reading
 * ("<path>.tmp.<pid>.<n>.<salt>": a cache file's holds GPUHAL__DISK_TEMP_MARK), and
 * O_EXCL | O_NOFOLLOW create it afresh: whatever already sits at a name (another writer's file, a FIFO, a symbolic link to anything) is
 * never opened, never followed, never truncated; the next name is tried. Shared by the
 * disk cache and the trace. The fd, or -1 with errno set. */
GPUHAL__PRIVATE int gpuhal__temp_file_create(const char* path, char* temp, size_t temp_size);

/* Stores a compiled payload for `key` (with a copy of key->image); a failure turns the disk cache off (one warning). */
GPUHAL__PRIVATE void gpuhal__disk_store(gpuhal__disk_cache_t* disk, const gpuhal__disk_key_t* key, const char* name,
                                        const void* payload, size_t payload_size);

#endif /* GPUHAL_SRC_DISK_CACHE_H */
