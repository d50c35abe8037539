/* module_cache: executables (loaded kernel images: PTX, cubin, fatbin) and their kernels.
 *
 * An executable is one image loaded on one device. Loading goes through the device's
 * module cache: the same image loaded twice on one device shares one CUmodule. Kernels are
 * looked up by name, once: the CUfunction and its attributes are cached in a kernel object
 * that the executable owns.
 *
 * This is the first cut of DESIGN §8: an in-memory cache keyed by the exact image bytes and
 * JIT options, entries unloaded when their last executable goes. The whole load path is
 * gpuhal__module_cache_load(), so the full cache (LRU, single flight, disk) replaces it
 * without touching executables. */

typedef struct gpuhal_executable_s gpuhal_executable_t;
typedef struct gpuhal_kernel_s gpuhal_kernel_t;

/* What a kernel needs and allows, as the driver reports it. */
#define GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN UINT32_MAX
typedef struct gpuhal_kernel_info_t {
  const char* name;                   /* the entry name; valid while the executable lives */
  int max_threads_per_block;          /* for this kernel on this device (registers may lower it) */
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
} gpuhal_kernel_info_t;

/* Loads an image on a device: PTX text (size may or may not count a terminating NUL),
 * a cubin (ELF) or a fatbin. The format is detected from the bytes; anything else is
 * INVALID_ARGUMENT. A PTX compile error returns the JIT log in the status. The image is
 * copied; the caller may free it on return. */
GPUHAL_API gpuhal_status_t gpuhal_executable_load(gpuhal_device_t* device, const void* image, size_t size,
                                                  gpuhal_executable_t** out_executable);
GPUHAL_API void gpuhal_executable_retain(gpuhal_executable_t* executable);
GPUHAL_API void gpuhal_executable_release(gpuhal_executable_t* executable);

/* The kernel named `name` (the .entry / extern "C" name). Unknown names are NOT_FOUND.
 * The kernel object is owned by the executable and valid while it lives: retain the
 * executable, not the kernel. Looking the same name up twice returns the same object. */
GPUHAL_API gpuhal_status_t gpuhal_executable_kernel(gpuhal_executable_t* executable, const char* name,
                                                    gpuhal_kernel_t** out_kernel);
GPUHAL_API gpuhal_status_t gpuhal_kernel_info(gpuhal_kernel_t* kernel, gpuhal_kernel_info_t* out_info);
/* Opt in to dynamic shared memory above the default 48 KiB (up to
 * max_dynamic_shared_optin_bytes). Affects every later launch of this kernel. */
GPUHAL_API gpuhal_status_t gpuhal_kernel_set_max_dynamic_shared(gpuhal_kernel_t* kernel, uint32_t bytes);

/* Tells device.h that the module cache hooks exist. */
#define GPUHAL__HAVE_MODULE_CACHE 1

/* ---- gpuhal:implementation ---- */

#define GPUHAL__MAGIC_EXECUTABLE 0x45584543u /* "EXEC" */
#define GPUHAL__MAGIC_KERNEL 0x4B45524Eu     /* "KERN" */

/* ---- image formats ---- */
typedef enum gpuhal__image_format_e {
  GPUHAL__IMAGE_PTX = 1,
  GPUHAL__IMAGE_CUBIN = 2,
  GPUHAL__IMAGE_FATBIN = 3
} gpuhal__image_format_t;

static const char* gpuhal__image_format_name(gpuhal__image_format_t f) {
  switch (f) {
    case GPUHAL__IMAGE_PTX: return "PTX";
    case GPUHAL__IMAGE_CUBIN: return "cubin";
    case GPUHAL__IMAGE_FATBIN: return "fatbin";
  }
  return "unknown";
}

static uint16_t gpuhal__le16(const unsigned char* p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t gpuhal__le32(const unsigned char* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t gpuhal__le64(const unsigned char* p) {
  return (uint64_t)gpuhal__le32(p) | ((uint64_t)gpuhal__le32(p + 4) << 32);
}

#define GPUHAL__ELF_EM_CUDA 190
#define GPUHAL__FATBIN_MAGIC 0xBA55ED50u

/* A cubin is an ELF file. A 64-bit one (every real cubin) must be for EM_CUDA and have its
 * section headers inside the image; anything else after the ELF magic is left for the
 * driver to judge (softcuda's stand-in cubins are ELF magic + PTX). */
static gpuhal_status_t gpuhal__image_check_cubin(const unsigned char* p, size_t size, const char* func) {
  uint64_t shoff;
  uint64_t shend;
  if (size < 5 || p[4] != 2) return NULL;
  if (size < 64)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is a truncated ELF64 file (%zu bytes, less than its 64-byte header)",
                              func, size);
  if (gpuhal__le16(p + 18) != GPUHAL__ELF_EM_CUDA)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is an ELF file for machine %u, not a CUDA cubin (EM_CUDA = %d)",
                              func, (unsigned)gpuhal__le16(p + 18), GPUHAL__ELF_EM_CUDA);
  shoff = gpuhal__le64(p + 0x28);
  shend = shoff + (uint64_t)gpuhal__le16(p + 0x3A) * gpuhal__le16(p + 0x3C);
  if (shoff > size || shend > size)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is a truncated cubin: its section headers end at byte %llu "
                              "but 'size' is %zu",
                              func, (unsigned long long)shend, size);
  return NULL;
}

/* A fatbin starts with {u32 magic, u16 version, u16 header size, u64 payload size}. */
static gpuhal_status_t gpuhal__image_check_fatbin(const unsigned char* p, size_t size, const char* func) {
  uint64_t total;
  if (size < 16)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' has the fatbin magic but only %zu bytes", func, size);
  total = (uint64_t)gpuhal__le16(p + 6) + gpuhal__le64(p + 8);
  if (total > size)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is a truncated fatbin: its header says %llu bytes but 'size' is %zu",
                              func, (unsigned long long)total, size);
  return NULL;
}

/* PTX: text (tabs, newlines, printable bytes; at most one NUL, at the very end) that has
 * a .version directive. *out_text_size excludes the NUL. */
static gpuhal_status_t gpuhal__image_check_ptx(const unsigned char* p, size_t size, const char* func,
                                               size_t* out_text_size) {
  size_t n = size;
  size_t i;
  if (n && p[n - 1] == 0) --n;
  for (i = 0; i < n; ++i) {
    unsigned char c = p[i];
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v')
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "%s: argument 'image' is not PTX, a cubin (ELF) or a fatbin: byte %zu is 0x%02x "
                                "(not text) and the image starts with no known magic number",
                                func, i, (unsigned)c);
  }
  for (i = 0; i + 8 <= n; ++i) {
    if (memcmp(p + i, ".version", 8) == 0) {
      *out_text_size = n;
      return NULL;
    }
  }
  return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                            "%s: argument 'image' is text without a .version directive: not PTX (nor a cubin or fatbin)",
                            func);
}

/* Finds the format and the number of meaningful bytes (PTX: without its NUL). */
static gpuhal_status_t gpuhal__image_detect(const void* image, size_t size, const char* func,
                                            gpuhal__image_format_t* out_format, size_t* out_size) {
  const unsigned char* p = (const unsigned char*)image;
  *out_size = size;
  if (size >= 4 && p[0] == 0x7F && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') {
    *out_format = GPUHAL__IMAGE_CUBIN;
    return gpuhal__image_check_cubin(p, size, func);
  }
  if (size >= 4 && gpuhal__le32(p) == GPUHAL__FATBIN_MAGIC) {
    *out_format = GPUHAL__IMAGE_FATBIN;
    return gpuhal__image_check_fatbin(p, size, func);
  }
  *out_format = GPUHAL__IMAGE_PTX;
  return gpuhal__image_check_ptx(p, size, func, out_size);
}

/* ---- the cache ---- */
/* JIT options that change the compiled code, and so are part of the cache key. */
typedef struct gpuhal__jit_options_s {
  int optimization_level; /* 0..4; -1: the driver's default (4) */
  int max_registers;      /* 0: no limit */
} gpuhal__jit_options_t;

static gpuhal__jit_options_t gpuhal__jit_options_default(void) {
  gpuhal__jit_options_t o;
  o.optimization_level = -1;
  o.max_registers = 0;
  return o;
}

/* One loaded module. Shared by every executable of the same image and options on the
 * device; refcount counts them (guarded by the cache mutex). */
typedef struct gpuhal__module_entry_s {
  gpuhal__list_node_t link;
  int32_t refcount;
  gpuhal__image_format_t format;
  gpuhal__jit_options_t jit;
  uint64_t hash;
  size_t size;  /* bytes of image (PTX: without NUL) */
  void* image;  /* a copy, NUL-terminated; the exact key */
  CUmodule module;
} gpuhal__module_entry_t;

/* Per-device state (device->module_cache). `extensions` lets later modules keep lazily
 * created per-device state here (command_buffer.h keeps its built-in kernels). */
typedef struct gpuhal__module_cache_s {
  gpuhal_device_t* device;
  gpuhal__mutex_t mutex;
  gpuhal__list_node_t entries;
  void* builtins;
  void (*builtins_destroy)(gpuhal_device_t* device, void* builtins);
} gpuhal__module_cache_t;

static gpuhal__module_cache_t* gpuhal__module_cache_of(gpuhal_device_t* device) {
  return (gpuhal__module_cache_t*)device->module_cache;
}

static gpuhal_status_t gpuhal__module_cache_create(gpuhal_device_t* device) {
  gpuhal__module_cache_t* cache = NULL;
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__alloc_zeroed(device->allocator, sizeof(*cache), "the module cache", (void**)&cache));
  cache->device = device;
  gpuhal__mutex_init(&cache->mutex);
  gpuhal__list_init(&cache->entries);
  device->module_cache = cache;
  return NULL;
}

static void gpuhal__module_entry_free(gpuhal_device_t* device, gpuhal__module_entry_t* entry) {
  gpuhal__free(device->allocator, entry->image);
  gpuhal__free(device->allocator, entry);
}

/* Unloads a module (any thread: enters the device's context). */
static void gpuhal__module_entry_unload(gpuhal_device_t* device, gpuhal__module_entry_t* entry) {
  gpuhal__context_scope_t scope;
  gpuhal_status_t st = gpuhal__context_enter(device, &scope);
  if (!st) {
    st = GPUHAL__CU(device->cu, cuModuleUnload, (entry->module));
    gpuhal__context_leave(device, &scope);
  }
  if (st) {
    gpuhal__log(device->logger, GPUHAL_LOG_WARN, "module unload failed: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
  }
  gpuhal__module_entry_free(device, entry);
}

/* Called by device destruction after every executable is gone (a leaked executable's
 * module is unloaded here anyway: the context is about to go). */
static void gpuhal__module_cache_destroy(gpuhal_device_t* device) {
  gpuhal__module_cache_t* cache = gpuhal__module_cache_of(device);
  gpuhal__list_node_t* node;
  if (!cache) return;
  if (cache->builtins && cache->builtins_destroy) cache->builtins_destroy(device, cache->builtins);
  cache->builtins = NULL;
  while ((node = gpuhal__list_pop_front(&cache->entries)) != NULL) {
    gpuhal__module_entry_t* entry = GPUHAL__CONTAINER_OF(node, gpuhal__module_entry_t, link);
    gpuhal__log(device->logger, GPUHAL_LOG_WARN, "device destroyed with a %s module still referenced %d time(s)",
                gpuhal__image_format_name(entry->format), (int)entry->refcount);
    gpuhal__module_entry_unload(device, entry);
  }
  gpuhal__mutex_destroy(&cache->mutex);
  gpuhal__free(device->allocator, cache);
  device->module_cache = NULL;
}

static int gpuhal__module_entry_matches(const gpuhal__module_entry_t* e, gpuhal__image_format_t format,
                                        uint64_t hash, const void* image, size_t size,
                                        const gpuhal__jit_options_t* jit) {
  return e->hash == hash && e->size == size && e->format == format &&
         e->jit.optimization_level == jit->optimization_level && e->jit.max_registers == jit->max_registers &&
         memcmp(e->image, image, size) == 0;
}

/* Under the cache mutex: a live entry for the key, retained, or NULL. */
static gpuhal__module_entry_t* gpuhal__module_cache_find_locked(gpuhal__module_cache_t* cache,
                                                                gpuhal__image_format_t format, uint64_t hash,
                                                                const void* image, size_t size,
                                                                const gpuhal__jit_options_t* jit) {
  gpuhal__list_node_t* n;
  for (n = cache->entries.next; n != &cache->entries; n = n->next) {
    gpuhal__module_entry_t* e = GPUHAL__CONTAINER_OF(n, gpuhal__module_entry_t, link);
    if (gpuhal__module_entry_matches(e, format, hash, image, size, jit)) {
      e->refcount++;
      return e;
    }
  }
  return NULL;
}

#define GPUHAL__JIT_LOG_BYTES 4096

/* cuModuleLoadDataEx with an error log, in the device's context. The log is appended to
 * the status of a failed load (for PTX it says which line failed to compile). */
static gpuhal_status_t gpuhal__module_compile(gpuhal_device_t* device, const gpuhal__module_entry_t* entry,
                                              CUmodule* out_module) {
  CUjit_option options[4];
  void* values[4];
  unsigned count = 0;
  char* log = (char*)gpuhal__calloc(device->allocator, GPUHAL__JIT_LOG_BYTES);
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  if (log) {
    options[count] = CU_JIT_ERROR_LOG_BUFFER;
    values[count++] = log;
    options[count] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
    values[count++] = (void*)(uintptr_t)GPUHAL__JIT_LOG_BYTES;
  }
  if (entry->jit.optimization_level >= 0) {
    options[count] = CU_JIT_OPTIMIZATION_LEVEL;
    values[count++] = (void*)(uintptr_t)entry->jit.optimization_level;
  }
  if (entry->jit.max_registers > 0) {
    options[count] = CU_JIT_MAX_REGISTERS;
    values[count++] = (void*)(uintptr_t)entry->jit.max_registers;
  }
  st = gpuhal__context_enter(device, &scope);
  if (!st) {
    st = GPUHAL__CU(device->cu, cuModuleLoadDataEx, (out_module, entry->image, count, options, values));
    gpuhal__context_leave(device, &scope);
  }
  if (st) {
    st = gpuhal_status_annotate(st, "loading a %s image of %zu bytes", gpuhal__image_format_name(entry->format),
                                entry->size);
    if (log && log[0]) st = gpuhal_status_annotate(st, "JIT log: %s", log);
  }
  gpuhal__free(device->allocator, log);
  return st;
}

/* Makes a new (not yet loaded) entry holding a NUL-terminated copy of the image. */
static gpuhal_status_t gpuhal__module_entry_create(gpuhal_device_t* device, gpuhal__image_format_t format,
                                                   uint64_t hash, const void* image, size_t size,
                                                   const gpuhal__jit_options_t* jit,
                                                   gpuhal__module_entry_t** out_entry) {
  gpuhal__module_entry_t* entry = NULL;
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__alloc_zeroed(device->allocator, sizeof(*entry), "a module cache entry", (void**)&entry));
  entry->image = gpuhal__alloc(device->allocator, size + 1);
  if (!entry->image) {
    gpuhal__free(device->allocator, entry);
    return gpuhal__status_oom("a copy of a kernel image", size + 1);
  }
  memcpy(entry->image, image, size);
  ((char*)entry->image)[size] = 0;
  gpuhal__list_init(&entry->link);
  entry->refcount = 1;
  entry->format = format;
  entry->jit = *jit;
  entry->hash = hash;
  entry->size = size;
  *out_entry = entry;
  return NULL;
}

/* THE load path (the full module cache of DESIGN §8 replaces this function): returns a
 * retained entry for (image, jit options) on this device, compiling at most once per key
 * while an entry lives. The compile runs outside the cache lock; when two threads race on
 * one key, the loser unloads its module and takes the winner's. */
static gpuhal_status_t gpuhal__module_cache_load(gpuhal_device_t* device, const void* image, size_t size,
                                                 const gpuhal__jit_options_t* jit_or_null,
                                                 gpuhal__module_entry_t** out_entry) {
  gpuhal__module_cache_t* cache = gpuhal__module_cache_of(device);
  gpuhal__jit_options_t jit = jit_or_null ? *jit_or_null : gpuhal__jit_options_default();
  gpuhal__image_format_t format;
  gpuhal__module_entry_t* entry;
  gpuhal__module_entry_t* raced;
  size_t key_size;
  uint64_t hash;
  GPUHAL__RETURN_IF_ERROR(gpuhal__image_detect(image, size, "gpuhal_executable_load", &format, &key_size));
  hash = gpuhal__hash64(image, key_size, (uint64_t)format);
  gpuhal__mutex_lock(&cache->mutex);
  entry = gpuhal__module_cache_find_locked(cache, format, hash, image, key_size, &jit);
  gpuhal__mutex_unlock(&cache->mutex);
  if (entry) {
    *out_entry = entry;
    return NULL;
  }
  GPUHAL__RETURN_IF_ERROR(gpuhal__module_entry_create(device, format, hash, image, key_size, &jit, &entry));
  {
    gpuhal_status_t st = gpuhal__module_compile(device, entry, &entry->module);
    if (st) {
      gpuhal__module_entry_free(device, entry);
      return st;
    }
  }
  gpuhal__mutex_lock(&cache->mutex);
  raced = gpuhal__module_cache_find_locked(cache, format, hash, image, key_size, &jit);
  if (!raced) gpuhal__list_push_back(&cache->entries, &entry->link);
  gpuhal__mutex_unlock(&cache->mutex);
  if (raced) {
    gpuhal__module_entry_unload(device, entry);
    entry = raced;
  }
  *out_entry = entry;
  return NULL;
}

/* Drops one reference; the last one unloads the module (any thread). */
static void gpuhal__module_cache_release(gpuhal_device_t* device, gpuhal__module_entry_t* entry) {
  gpuhal__module_cache_t* cache = gpuhal__module_cache_of(device);
  int last;
  gpuhal__mutex_lock(&cache->mutex);
  last = --entry->refcount == 0;
  if (last) gpuhal__list_remove(&entry->link);
  gpuhal__mutex_unlock(&cache->mutex);
  if (last) gpuhal__module_entry_unload(device, entry);
}

/* ---- executables and kernels ---- */
struct gpuhal_kernel_s {
  gpuhal__object_t object; /* magic only: a kernel lives exactly as long as its executable */
  gpuhal_kernel_t* next;
  gpuhal_executable_t* executable;
  CUfunction function;
  gpuhal_kernel_info_t info;
  uint32_t* params; /* offsets then sizes, 2 * param_count entries (NULL when unknown) */
  char name[1];     /* allocated to fit */
};

struct gpuhal_executable_s {
  gpuhal__object_t object;
  gpuhal_device_t* device; /* retained */
  gpuhal__module_entry_t* entry;
  gpuhal__mutex_t mutex; /* guards kernels */
  gpuhal_kernel_t* kernels;
};

GPUHAL_API gpuhal_status_t gpuhal_executable_load(gpuhal_device_t* device, const void* image, size_t size,
                                                  gpuhal_executable_t** out_executable) {
  gpuhal_executable_t* executable = NULL;
  gpuhal__module_entry_t* entry = NULL;
  GPUHAL__CHECK_ARG(out_executable != NULL, "out_executable", "must not be NULL");
  *out_executable = NULL;
  GPUHAL__CHECK_OBJECT(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG(image != NULL, "image", "must not be NULL");
  GPUHAL__CHECK_ARG(size > 0, "size", "must be > 0");
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__alloc_zeroed(device->allocator, sizeof(*executable), "an executable", (void**)&executable));
  {
    gpuhal_status_t st = gpuhal__module_cache_load(device, image, size, NULL, &entry);
    if (st) {
      gpuhal__free(device->allocator, executable);
      return st;
    }
  }
  gpuhal__object_init(&executable->object, GPUHAL__MAGIC_EXECUTABLE);
  gpuhal_device_retain(device);
  executable->device = device;
  executable->entry = entry;
  gpuhal__mutex_init(&executable->mutex);
  *out_executable = executable;
  return NULL;
}

GPUHAL_API void gpuhal_executable_retain(gpuhal_executable_t* executable) {
  if (!executable || gpuhal__atomic_load(&executable->object.magic) != GPUHAL__MAGIC_EXECUTABLE) return;
  gpuhal__object_retain(&executable->object);
}

static void gpuhal__executable_destroy(gpuhal_executable_t* executable) {
  gpuhal_device_t* device = executable->device;
  gpuhal_kernel_t* kernel = executable->kernels;
  while (kernel) {
    gpuhal_kernel_t* next = kernel->next;
    gpuhal__atomic_store(&kernel->object.magic, GPUHAL__MAGIC_DEAD);
    gpuhal__free(device->allocator, kernel->params);
    gpuhal__quarantine_free(device->allocator, device->driver, kernel);
    kernel = next;
  }
  gpuhal__module_cache_release(device, executable->entry);
  gpuhal__mutex_destroy(&executable->mutex);
  gpuhal__quarantine_free(device->allocator, device->driver, executable);
  gpuhal_device_release(device);
}

GPUHAL_API void gpuhal_executable_release(gpuhal_executable_t* executable) {
  if (!executable || gpuhal__atomic_load(&executable->object.magic) != GPUHAL__MAGIC_EXECUTABLE) return;
  if (gpuhal__object_release(&executable->object)) gpuhal__executable_destroy(executable);
}

/* cuFuncGetParamInfo for index 0, 1, ... until the driver says there is no such index. */
static gpuhal_status_t gpuhal__kernel_query_params(gpuhal_device_t* device, gpuhal_kernel_t* kernel) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  uint32_t count = 0, capacity = 0, i;
  uint32_t* offsets = NULL;
  kernel->info.param_count = GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN;
  if (!cu->cuFuncGetParamInfo) return NULL;
  for (;;) {
    size_t offset = 0, size = 0;
    CUresult r = cu->cuFuncGetParamInfo(kernel->function, count, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break; /* index past the last parameter */
    if (r != CUDA_SUCCESS) {
      /* The driver has the entry point but cannot say for this kernel: checks are off. */
      gpuhal__log(device->logger, GPUHAL_LOG_DEBUG, "cuFuncGetParamInfo(%s, %u) returned %d: parameter checks off",
                  kernel->name, count, (int)r);
      gpuhal__free(device->allocator, offsets);
      return NULL;
    }
    if (count == capacity) {
      uint32_t grown_capacity = capacity ? capacity * 2 : 8;
      uint32_t* grown = (uint32_t*)gpuhal__alloc(device->allocator, sizeof(uint32_t) * 2 * grown_capacity);
      if (!grown) {
        gpuhal__free(device->allocator, offsets);
        return gpuhal__status_oom("kernel parameter info", sizeof(uint32_t) * 2 * grown_capacity);
      }
      if (offsets) memcpy(grown, offsets, sizeof(uint32_t) * 2 * capacity);
      gpuhal__free(device->allocator, offsets);
      offsets = grown;
      capacity = grown_capacity;
    }
    offsets[2 * count] = (uint32_t)offset;
    offsets[2 * count + 1] = (uint32_t)size;
    ++count;
  }
  /* Store as two arrays: offsets[0..count), sizes[count..2*count). */
  if (count) {
    kernel->params = (uint32_t*)gpuhal__alloc(device->allocator, sizeof(uint32_t) * 2 * count);
    if (!kernel->params) {
      gpuhal__free(device->allocator, offsets);
      return gpuhal__status_oom("kernel parameter info", sizeof(uint32_t) * 2 * count);
    }
    for (i = 0; i < count; ++i) {
      kernel->params[i] = offsets[2 * i];
      kernel->params[count + i] = offsets[2 * i + 1];
    }
    kernel->info.param_offsets = kernel->params;
    kernel->info.param_sizes = kernel->params + count;
  }
  gpuhal__free(device->allocator, offsets);
  kernel->info.param_count = count;
  return NULL;
}

static gpuhal_status_t gpuhal__kernel_query_attributes(gpuhal_device_t* device, gpuhal_kernel_t* kernel) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  gpuhal_kernel_info_t* info = &kernel->info;
  CUfunction f = kernel->function;
  int optin = device->info.max_shared_memory_per_block_optin;
  GPUHAL__RETURN_IF_ERROR(
      GPUHAL__CU(cu, cuFuncGetAttribute, (&info->max_threads_per_block, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f)));
  GPUHAL__RETURN_IF_ERROR(
      GPUHAL__CU(cu, cuFuncGetAttribute, (&info->static_shared_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f)));
  GPUHAL__RETURN_IF_ERROR(GPUHAL__CU(
      cu, cuFuncGetAttribute, (&info->max_dynamic_shared_bytes, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f)));
  GPUHAL__RETURN_IF_ERROR(GPUHAL__CU(cu, cuFuncGetAttribute, (&info->num_regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f)));
  GPUHAL__RETURN_IF_ERROR(
      GPUHAL__CU(cu, cuFuncGetAttribute, (&info->local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f)));
  GPUHAL__RETURN_IF_ERROR(
      GPUHAL__CU(cu, cuFuncGetAttribute, (&info->const_bytes, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, f)));
  GPUHAL__RETURN_IF_ERROR(GPUHAL__CU(cu, cuFuncGetAttribute, (&info->ptx_version, CU_FUNC_ATTRIBUTE_PTX_VERSION, f)));
  GPUHAL__RETURN_IF_ERROR(
      GPUHAL__CU(cu, cuFuncGetAttribute, (&info->binary_version, CU_FUNC_ATTRIBUTE_BINARY_VERSION, f)));
  info->max_dynamic_shared_optin_bytes = optin > info->static_shared_bytes ? optin - info->static_shared_bytes : 0;
  return gpuhal__kernel_query_params(device, kernel);
}

/* Under the executable mutex. */
static gpuhal_kernel_t* gpuhal__executable_find_kernel_locked(gpuhal_executable_t* executable, const char* name) {
  gpuhal_kernel_t* k;
  for (k = executable->kernels; k; k = k->next)
    if (strcmp(k->name, name) == 0) return k;
  return NULL;
}

static gpuhal_status_t gpuhal__kernel_create(gpuhal_executable_t* executable, const char* name,
                                             gpuhal_kernel_t** out_kernel) {
  gpuhal_device_t* device = executable->device;
  size_t name_length = strlen(name);
  gpuhal_kernel_t* kernel = NULL;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  CUresult r;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, sizeof(*kernel) + name_length, "a kernel",
                                               (void**)&kernel));
  gpuhal__object_init(&kernel->object, GPUHAL__MAGIC_KERNEL);
  memcpy(kernel->name, name, name_length + 1);
  kernel->executable = executable;
  kernel->info.name = kernel->name;
  st = gpuhal__context_enter(device, &scope);
  if (!st) {
    r = device->cu->cuModuleGetFunction(&kernel->function, executable->entry->module, name);
    if (r == CUDA_ERROR_NOT_FOUND) {
      st = gpuhal_status_make(GPUHAL_STATUS_NOT_FOUND, "gpuhal_executable_kernel: no kernel named '%s' in this %s executable",
                              name, gpuhal__image_format_name(executable->entry->format));
    } else if (r != CUDA_SUCCESS) {
      st = GPUHAL__CU(device->cu, cuModuleGetFunction, (&kernel->function, executable->entry->module, name));
    } else {
      st = gpuhal__kernel_query_attributes(device, kernel);
    }
    gpuhal__context_leave(device, &scope);
  }
  if (st) {
    gpuhal__free(device->allocator, kernel->params);
    gpuhal__free(device->allocator, kernel);
    return st;
  }
  *out_kernel = kernel;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_executable_kernel(gpuhal_executable_t* executable, const char* name,
                                                    gpuhal_kernel_t** out_kernel) {
  gpuhal_kernel_t* kernel;
  GPUHAL__CHECK_ARG(out_kernel != NULL, "out_kernel", "must not be NULL");
  *out_kernel = NULL;
  GPUHAL__CHECK_OBJECT(executable, GPUHAL__MAGIC_EXECUTABLE);
  GPUHAL__CHECK_ARG(name != NULL, "name", "must not be NULL");
  GPUHAL__CHECK_ARG(name[0] != 0, "name", "must not be empty");
  gpuhal__mutex_lock(&executable->mutex);
  kernel = gpuhal__executable_find_kernel_locked(executable, name);
  if (!kernel) {
    /* Created under the executable's lock: a lookup is rare and this keeps one object per name. */
    gpuhal_status_t st = gpuhal__kernel_create(executable, name, &kernel);
    if (st) {
      gpuhal__mutex_unlock(&executable->mutex);
      return st;
    }
    kernel->next = executable->kernels;
    executable->kernels = kernel;
  }
  gpuhal__mutex_unlock(&executable->mutex);
  *out_kernel = kernel;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_kernel_info(gpuhal_kernel_t* kernel, gpuhal_kernel_info_t* out_info) {
  GPUHAL__CHECK_OBJECT(kernel, GPUHAL__MAGIC_KERNEL);
  GPUHAL__CHECK_ARG(out_info != NULL, "out_info", "must not be NULL");
  gpuhal__mutex_lock(&kernel->executable->mutex);
  *out_info = kernel->info;
  gpuhal__mutex_unlock(&kernel->executable->mutex);
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_kernel_set_max_dynamic_shared(gpuhal_kernel_t* kernel, uint32_t bytes) {
  gpuhal_device_t* device;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  GPUHAL__CHECK_OBJECT(kernel, GPUHAL__MAGIC_KERNEL);
  device = kernel->executable->device;
  if (bytes > (uint32_t)kernel->info.max_dynamic_shared_optin_bytes)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_kernel_set_max_dynamic_shared: argument 'bytes' (%u) exceeds what kernel '%s' "
                              "can have on this device (%d: the opt-in limit less %d bytes of static shared memory)",
                              bytes, kernel->name, kernel->info.max_dynamic_shared_optin_bytes,
                              kernel->info.static_shared_bytes);
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  st = GPUHAL__CU(device->cu, cuFuncSetAttribute,
                  (kernel->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes));
  gpuhal__context_leave(device, &scope);
  if (st) return gpuhal_status_annotate(st, "gpuhal_kernel_set_max_dynamic_shared('%s', %u)", kernel->name, bytes);
  gpuhal__mutex_lock(&kernel->executable->mutex);
  kernel->info.max_dynamic_shared_bytes = (int)bytes;
  gpuhal__mutex_unlock(&kernel->executable->mutex);
  return NULL;
}
