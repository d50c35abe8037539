/* module_cache: the in-memory cache of loaded modules (one load per image and JIT
 * options), compiles, eviction and statistics (module_cache.h). */
#include "module_cache.h"
#include "hash.h"
#include "symbols.h"
#include "status.h"
#include "memory.h"

static gpuhal__jit_options_t gpuhal__jit_options_default(void) {
  gpuhal__jit_options_t o;
  o.optimization_level = -1;
  o.max_registers = 0;
  return o;
}

#define GPUHAL__MODULE_CACHE_DEFAULT_ENTRIES 1024u
#define GPUHAL__MODULE_CACHE_DEFAULT_BYTES ((uint64_t)256 << 20)
#define GPUHAL__MODULE_CACHE_DEFAULT_DISK_BYTES ((uint64_t)1 << 30)

GPUHAL__PRIVATE gpuhal__module_cache_t* gpuhal__module_cache_of(gpuhal_device_t* device) {
  return (gpuhal__module_cache_t*)device->module_cache;
}

/* ---- building a module (outside the cache lock) ---- */
#define GPUHAL__JIT_LOG_BYTES 4096

/* Fills JIT options: an error log, then the entry's code-changing options. */
static unsigned gpuhal__jit_options_fill(const gpuhal__jit_options_t* jit, char* log, CUjit_option* options,
                                         void** values) {
  unsigned count = 0;
  if (log) {
    options[count] = CU_JIT_ERROR_LOG_BUFFER;
    values[count++] = log;
    options[count] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
    values[count++] = (void*)(uintptr_t)GPUHAL__JIT_LOG_BYTES;
  }
  if (jit && jit->optimization_level >= 0) {
    options[count] = CU_JIT_OPTIMIZATION_LEVEL;
    values[count++] = (void*)(uintptr_t)jit->optimization_level;
  }
  if (jit && jit->max_registers > 0) {
    options[count] = CU_JIT_MAX_REGISTERS;
    values[count++] = (void*)(uintptr_t)jit->max_registers;
  }
  return count;
}

/* The compute capability an sm_XY[a|f] target names (XY), and its suffix. 0: not one. */
static int gpuhal__sm_of(const char* target, char* out_suffix) {
  int sm = 0;
  *out_suffix = 0;
  if (strncmp(target, "sm_", 3) != 0) return 0;
  for (target += 3; *target >= '0' && *target <= '9' && sm < 100000; ++target) sm = sm * 10 + (*target - '0');
  *out_suffix = *target;
  return sm;
}

/* What the PTX declares beside what the device and driver are, for a JIT failure: a
 * .version newer than the driver knows (CUDA_ERROR_UNSUPPORTED_PTX_VERSION) or a .target the
 * device cannot run (CUDA_ERROR_INVALID_PTX, "SM version specified by .target is higher
 * than default SM version assumed") are then plain to see. */
static gpuhal_status_t gpuhal__ptx_annotate(gpuhal_status_t st, const gpuhal_device_t* device, const void* ptx,
                                            size_t size) {
  const gpuhal_device_info_t* info = &device->info;
  int device_sm = info->compute_capability_major * 10 + info->compute_capability_minor, target_sm;
  char version[72], target[72], suffix;
  gpuhal_status_code_t code = gpuhal_status_code(st);
  if (code != GPUHAL_STATUS_INVALID_ARGUMENT && code != GPUHAL_STATUS_UNIMPLEMENTED && code != GPUHAL_STATUS_NOT_FOUND)
    return st; /* not the JIT's verdict on the text */
  gpuhal__ptx_header((const char*)ptx, size, version, sizeof(version), target, sizeof(target));
  target_sm = gpuhal__sm_of(target, &suffix);
  if (target_sm > device_sm || (suffix == 'a' && target_sm != device_sm) ||
      (suffix == 'f' && target_sm / 10 != device_sm / 10))
    return gpuhal_status_annotate(st,
                                  "the PTX's .target %s is for %s than device %d (compute capability %d.%d): "
                                  "have the compiler target sm_%d or older (the PTX is .version %s)",
                                  target, target_sm > device_sm ? "a newer GPU" : "another GPU family", device->ordinal,
                                  info->compute_capability_major, info->compute_capability_minor, device_sm, version);
  return gpuhal_status_annotate(st,
                                "the PTX is .version %s, .target %s; device %d is compute capability %d.%d, the "
                                "CUDA driver %d.%d (a .version newer than the driver's PTX ISA does not load)",
                                version[0] ? version : "(none)", target[0] ? target : "(none)", device->ordinal,
                                info->compute_capability_major, info->compute_capability_minor,
                                info->driver_version / 1000, info->driver_version % 1000 / 10);
}

/* `ptx`: the image when it is PTX text (NULL otherwise), for gpuhal__ptx_annotate. */
static gpuhal_status_t gpuhal__jit_annotate(gpuhal_status_t st, const char* log, const char* what, size_t size,
                                            const gpuhal_device_t* device, const void* ptx) {
  if (!st) return NULL;
  st = gpuhal_status_annotate(st, "loading a %s image of %zu bytes", what, size);
  if (ptx) st = gpuhal__ptx_annotate(st, device, ptx, size);
  if (log && log[0]) st = gpuhal_status_annotate(st, "JIT log: %s", log);
  return st;
}

/* The shared library of `image` (module_library.c) and its module in the device's
 * context, which is current. */
static gpuhal_status_t gpuhal__module_load_shared(gpuhal__module_cache_t* cache, const void* image, size_t size,
                                                  gpuhal__image_format_t format, const gpuhal__jit_options_t* jit,
                                                  CUjit_option* options, void** values, unsigned count,
                                                  gpuhal__module_entry_t* entry) {
  gpuhal_device_t* device = cache->device;
  gpuhal__jit_options_t key = jit ? *jit : gpuhal__jit_options_default();
  gpuhal__library_t* library = NULL;
  int shared = 0;
  gpuhal_status_t st =
      gpuhal__module_library_acquire(device, image, size, format, &key, options, values, count, &library, &shared);
  if (st) return st;
  st = GPUHAL__CU(device->cu, cuLibraryGetModule, (&entry->module, gpuhal__module_library_handle(library)));
  if (st) {
    gpuhal__module_library_release(device, library);
    entry->module = NULL;
    return st;
  }
  entry->library = library;
  if (shared) GPUHAL__STAT_ADD(&cache->stats, library_shares);
  return NULL;
}

/* Loads `image` into entry->module with an error log, in the device's context: PTX and
 * fatbins (JIT work, or code for several architectures) through the driver's shared library
 * of the image where it can (gpuhal__module_library_usable), so that the work is done once
 * for every device; cubins (no JIT; the disk cache's and the compile hook's too) with
 * cuModuleLoadDataEx, which an H200 does in about half a library's time (RESULTS.md). The log is appended to the status of a failed load (for PTX it
 * says which line failed). `jit` is NULL for a cubin or fatbin (nothing to compile). */
static gpuhal_status_t gpuhal__module_load_image(gpuhal__module_cache_t* cache, const void* image, size_t size,
                                                 gpuhal__image_format_t format, const gpuhal__jit_options_t* jit,
                                                 gpuhal__module_entry_t* entry) {
  gpuhal_device_t* device = cache->device;
  CUjit_option options[4];
  void* values[4];
  char* log = (char*)gpuhal__calloc(device->allocator, GPUHAL__JIT_LOG_BYTES);
  unsigned count = gpuhal__jit_options_fill(jit, log, options, values);
  gpuhal__context_scope_t scope;
  gpuhal_status_t st = gpuhal__device_park_pause(device, "loading a module");
  if (!st) st = gpuhal__context_enter(device, &scope);
  if (!st) {
    if (format != GPUHAL__IMAGE_CUBIN && gpuhal__module_library_usable(device))
      st = gpuhal__module_load_shared(cache, image, size, format, jit, options, values, count, entry);
    else
      st = GPUHAL__CU(device->cu, cuModuleLoadDataEx, (&entry->module, image, count, options, values));
    gpuhal__context_leave(device, &scope);
  }
  gpuhal__device_park_resume(device);
  st = gpuhal__jit_annotate(st, log, gpuhal__image_format_name(format), size, device,
                            format == GPUHAL__IMAGE_PTX ? image : NULL);
  gpuhal__free(device->allocator, log);
  return st;
}

/* A compiled cubin owned by gpuhal (copied out of the link state) or by the hook. */
typedef struct gpuhal__cubin_s {
  void* bytes;
  size_t size;
  int from_hook;
} gpuhal__cubin_t;

static void gpuhal__cubin_free(gpuhal_device_t* device, gpuhal__cubin_t* cubin) {
  if (!cubin->bytes) return;
  if (!cubin->from_hook) {
    gpuhal__free(device->allocator, cubin->bytes);
  } else if (device->params.compile_free_fn) {
    device->params.compile_free_fn(device->params.compile_user, cubin->bytes);
  }
  cubin->bytes = NULL;
}

/* Runs cuLinkCreate / AddData / Complete on one input in the current context; copies the
 * cubin out. `jit`: the code-changing options (PTX), or NULL. */
static gpuhal_status_t gpuhal__link_in_context(gpuhal_device_t* device, CUjitInputType type, const void* image,
                                               size_t size, const gpuhal__jit_options_t* jit, char* log,
                                               gpuhal__cubin_t* out) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  CUjit_option options[4];
  void* values[4];
  unsigned count = gpuhal__jit_options_fill(jit, log, options, values);
  CUlinkState link = NULL;
  void* linked = NULL;
  size_t linked_size = 0;
  gpuhal_status_t st = GPUHAL__CU(cu, cuLinkCreate, (count, options, values, &link));
  if (!st) st = GPUHAL__CU(cu, cuLinkAddData, (link, type, (void*)image, size, "gpuhal_module", 0, NULL, NULL));
  if (!st) st = GPUHAL__CU(cu, cuLinkComplete, (link, &linked, &linked_size));
  if (!st && (!linked || linked_size == 0))
    st = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "cuLinkComplete returned an empty cubin");
  if (!st) {
    out->bytes = gpuhal__alloc(device->allocator, linked_size);
    if (!out->bytes) st = gpuhal__status_oom("a linked cubin", linked_size);
    if (!st) memcpy(out->bytes, linked, linked_size);
    out->size = linked_size;
  }
  if (link) {
    gpuhal_status_t destroyed = GPUHAL__CU(cu, cuLinkDestroy, (link));
    if (!st)
      st = destroyed;
    else
      gpuhal_status_free(destroyed);
  }
  return st;
}

/* The entry's image (PTX, or a relocatable cubin) -> an executable cubin with the
 * driver's linker (cuLink*), in the device's context. */
static gpuhal_status_t gpuhal__compile_with_driver(gpuhal_device_t* device, const gpuhal__module_entry_t* entry,
                                                   gpuhal__cubin_t* out) {
  char* log = (char*)gpuhal__calloc(device->allocator, GPUHAL__JIT_LOG_BYTES);
  int ptx = entry->format == GPUHAL__IMAGE_PTX;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st = gpuhal__context_enter(device, &scope);
  if (!st) {
    st = ptx ? gpuhal__link_in_context(device, CU_JIT_INPUT_PTX, entry->image, entry->size + 1, &entry->jit, log, out)
             : gpuhal__link_in_context(device, CU_JIT_INPUT_CUBIN, entry->image, entry->size, NULL, log, out);
    gpuhal__context_leave(device, &scope);
  }
  if (st) {
    gpuhal__cubin_free(device, out);
    st = gpuhal__jit_annotate(st, log, ptx ? "PTX (cuLink)" : "relocatable cubin (nvcc -rdc; linked with cuLink)",
                              entry->size, device, ptx ? entry->image : NULL);
  }
  gpuhal__free(device->allocator, log);
  return st;
}

/* PTX -> cubin with the user's compile hook; what it returns must be a cubin or fatbin. */
static gpuhal_status_t gpuhal__compile_with_hook(gpuhal_device_t* device, const gpuhal__module_entry_t* entry,
                                                 gpuhal__cubin_t* out) {
  gpuhal__image_format_t format;
  size_t format_size;
  void* bytes = NULL;
  size_t size = 0;
  gpuhal_status_t st = device->params.compile_fn(device->params.compile_user, entry->image, entry->size,
                                                 device->info.compute_capability_major,
                                                 device->info.compute_capability_minor, &bytes, &size);
  if (st) return gpuhal_status_annotate(st, "the compile hook failed on a PTX image of %zu bytes", entry->size);
  out->bytes = bytes;
  out->size = size;
  out->from_hook = 1;
  if (!bytes || size == 0) {
    st = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "the compile hook returned success but no cubin (%p, %zu bytes)",
                            bytes, size);
  } else {
    gpuhal_status_t bad = gpuhal__image_detect(bytes, size, "the compile hook's output", &format, &format_size);
    if (bad || format == GPUHAL__IMAGE_PTX)
      st = gpuhal_status_make(GPUHAL_STATUS_INTERNAL,
                              "the compile hook returned %zu bytes that are not a cubin or fatbin%s%s", size,
                              bad ? ": " : " (PTX text)", bad ? gpuhal_status_message(bad) : "");
    gpuhal_status_free(bad);
  }
  if (st) gpuhal__cubin_free(device, out);
  return st;
}

GPUHAL__PRIVATE uint64_t gpuhal__module_image_hash(const void* image, size_t size, gpuhal__image_format_t format,
                                                   const gpuhal__jit_options_t* jit) {
  return gpuhal__hash_fast64(image, size,
                             (uint64_t)format ^ ((uint64_t)(uint32_t)jit->optimization_level << 8) ^
                                 ((uint64_t)(uint32_t)jit->max_registers << 40));
}

/* `hook`: the user's compile hook makes the cubin (else the driver's linker). */
static void gpuhal__disk_key_make(gpuhal_device_t* device, const gpuhal__module_entry_t* entry, int hook,
                                  gpuhal__disk_key_t* key) {
  memset(key, 0, sizeof(*key));
  key->image_hash = entry->hash;
  key->image_size = entry->size;
  key->image = entry->image;
  key->image_format = (uint32_t)entry->format;
  key->cc_major = device->info.compute_capability_major;
  key->cc_minor = device->info.compute_capability_minor;
  key->driver_version = device->info.driver_version;
  key->optimization_level = entry->jit.optimization_level < 0 ? 4 : entry->jit.optimization_level;
  key->max_registers = entry->jit.max_registers;
  key->compiler = hook ? GPUHAL__COMPILER_HOOK : GPUHAL__COMPILER_DRIVER;
}

/* Tries the disk cache: 1 (and *out_module) when a valid file loaded. A bad file or one
 * the driver refuses is reported at debug level and left to be replaced. A load that failed
 * for a reason of the moment (work parked on the GPU, out of memory) is no fault of the
 * file: *out_failure gets it, for the caller to return (compiling would fail the same way). */
static int gpuhal__build_from_disk(gpuhal__module_cache_t* cache, const gpuhal__disk_key_t* key, const char* name,
                                   gpuhal__module_entry_t* entry, gpuhal_status_t* out_failure) {
  gpuhal_device_t* device = cache->device;
  char path[GPUHAL__PATH_MAX];
  void* file = NULL;
  const void* payload = NULL;
  size_t payload_size = 0;
  gpuhal_status_t st;
  int found;
  if (!gpuhal__disk_path(&cache->disk, name, path, sizeof(path))) return 0;
  st = gpuhal__disk_lookup(&cache->disk, key, path, &file, &payload, &payload_size);
  found = st == NULL;
  if (found) {
    st = gpuhal__module_load_image(cache, payload, payload_size, GPUHAL__IMAGE_CUBIN, NULL, entry);
    gpuhal__free(device->allocator, file);
    if (!st) {
      GPUHAL__STAT_ADD(&cache->stats, disk_hits);
      return 1;
    }
    if (gpuhal_status_code(st) == GPUHAL_STATUS_FAILED_PRECONDITION ||
        gpuhal_status_code(st) == GPUHAL_STATUS_RESOURCE_EXHAUSTED) {
      *out_failure = st;
      return 0;
    }
  }
  GPUHAL__STAT_ADD(&cache->stats, disk_misses);
  /* A file that was there and that the driver refused is a reject whatever the driver said
   * (CUDA_ERROR_NO_BINARY_FOR_GPU reads as NOT_FOUND too). */
  if (found || gpuhal_status_code(st) != GPUHAL_STATUS_NOT_FOUND) {
    GPUHAL__STAT_ADD(&cache->stats, disk_rejects);
    gpuhal__log(device->logger, GPUHAL_LOG_DEBUG, "module cache: ignoring disk cache file %s: %s", path,
                gpuhal_status_message(st));
  }
  gpuhal_status_free(st);
  return 0;
}

/* A relocatable cubin (nvcc -rdc) is linked by the driver: the compile hook takes PTX only. */
static int gpuhal__entry_needs_link(const gpuhal__module_entry_t* entry) {
  return entry->format == GPUHAL__IMAGE_CUBIN && gpuhal__image_is_relocatable_cubin(entry->image, entry->size);
}

/* PTX or a relocatable cubin through an executable cubin: from disk, else compiled (driver
 * linker or hook), loaded, stored. */
static gpuhal_status_t gpuhal__build_via_cubin(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry) {
  gpuhal_device_t* device = cache->device;
  gpuhal__disk_key_t key;
  char name[256];
  gpuhal__cubin_t cubin;
  gpuhal_status_t st;
  int disk = gpuhal__atomic_load(&cache->disk.enabled);
  int hook = device->params.compile_fn && !gpuhal__entry_needs_link(entry);
  memset(&cubin, 0, sizeof(cubin));
  if (disk) {
    gpuhal_status_t failure = NULL;
    gpuhal__disk_key_make(device, entry, hook, &key);
    gpuhal__disk_file_name(&key, name, sizeof(name));
    if (gpuhal__build_from_disk(cache, &key, name, entry, &failure)) return NULL;
    if (failure) return failure;
  }
  GPUHAL__STAT_ADD(&cache->stats, compiles);
  st = hook ? gpuhal__compile_with_hook(device, entry, &cubin) : gpuhal__compile_with_driver(device, entry, &cubin);
  if (!st) st = gpuhal__module_load_image(cache, cubin.bytes, cubin.size, GPUHAL__IMAGE_CUBIN, NULL, entry);
  if (!st && disk) gpuhal__disk_store(&cache->disk, &key, name, cubin.bytes, cubin.size);
  gpuhal__cubin_free(device, &cubin);
  return st;
}

/* Builds entry->module. PTX goes through a cubin when there is a disk cache or a compile
 * hook; otherwise the driver compiles it directly (and may use its own JIT cache). A
 * relocatable cubin always goes through a linked one. */
static gpuhal_status_t gpuhal__module_build(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry) {
  gpuhal_device_t* device = cache->device;
  if (gpuhal__entry_needs_link(entry) ||
      (entry->format == GPUHAL__IMAGE_PTX && (device->params.compile_fn || gpuhal__atomic_load(&cache->disk.enabled))))
    return gpuhal__build_via_cubin(cache, entry);
  GPUHAL__STAT_ADD(&cache->stats, compiles);
  return gpuhal__module_load_image(cache, entry->image, entry->size, entry->format,
                                   entry->format == GPUHAL__IMAGE_PTX ? &entry->jit : NULL, entry);
}

/* ---- the in-memory cache ---- */

static void gpuhal__module_entry_free(gpuhal_device_t* device, gpuhal__module_entry_t* entry) {
  gpuhal__function_record_t* record = entry->functions;
  while (record) {
    gpuhal__function_record_t* next = record->next;
    gpuhal__free(device->allocator, record->params);
    gpuhal__free(device->allocator, record);
    record = next;
  }
  gpuhal_status_free(entry->failure);
  gpuhal__free(device->allocator, entry->required_blocks);
  gpuhal__free(device->allocator, entry->put_off); /* unless its unload took it */
  gpuhal__mutex_destroy(&entry->functions_mutex);
  gpuhal__free(device->allocator, entry->image);
  gpuhal__free(device->allocator, entry);
}

typedef struct gpuhal__unload_work_s {
  gpuhal_device_t* device;
  gpuhal__list_node_t* victims;
} gpuhal__unload_work_t;

/* On the worker (its context always current: no context switch that could fail and leak
 * the module): unloads and frees every entry chained on the list. */
static gpuhal_status_t gpuhal__module_cache_unload_on_worker(void* arg) {
  gpuhal__unload_work_t* work = (gpuhal__unload_work_t*)arg;
  gpuhal_device_t* device = work->device;
  gpuhal__list_node_t* node;
  while ((node = gpuhal__list_pop_front(work->victims)) != NULL) {
    gpuhal__module_entry_t* entry = GPUHAL__CONTAINER_OF(node, gpuhal__module_entry_t, lru);
    if (entry->library) {
      gpuhal__module_library_release(device, entry->library); /* its module goes with the library */
    } else if (entry->module) {
      gpuhal_status_t st = gpuhal__device_unload_module(device, entry->module, entry->put_off);
      entry->put_off = NULL;
      if (st) {
        gpuhal__log(device->logger, GPUHAL_LOG_WARN, "module unload failed: %s", gpuhal_status_message(st));
        gpuhal_status_free(st);
      }
    }
    gpuhal__module_entry_free(device, entry);
  }
  return NULL;
}

/* Unloads the entries chained on `victims` (through their lru links), outside the lock,
 * from any thread. */
static void gpuhal__module_cache_unload_list(gpuhal_device_t* device, gpuhal__list_node_t* victims) {
  gpuhal__unload_work_t work;
  if (gpuhal__list_empty(victims)) return;
  work.device = device;
  work.victims = victims;
  gpuhal_status_free(gpuhal__worker_call(device, gpuhal__module_cache_unload_on_worker, &work));
}

/* Unloads one entry (see gpuhal__module_cache_unload_list). */
static void gpuhal__module_entry_unload(gpuhal_device_t* device, gpuhal__module_entry_t* entry) {
  gpuhal__list_node_t victims;
  gpuhal__list_init(&victims);
  gpuhal__list_push_back(&victims, &entry->lru);
  gpuhal__module_cache_unload_list(device, &victims);
}

static gpuhal__module_entry_t** gpuhal__module_cache_bucket(gpuhal__module_cache_t* cache, uint64_t hash) {
  return &cache->buckets[hash & (cache->bucket_count - 1)];
}

/* Doubles the bucket array when the table gets full (best effort: a failed allocation
 * only makes chains longer). Under the lock. */
static void gpuhal__module_cache_grow_locked(gpuhal__module_cache_t* cache) {
  size_t count = cache->bucket_count * 2, i;
  gpuhal__module_entry_t** buckets;
  if (cache->table_count < cache->bucket_count) return;
  buckets = (gpuhal__module_entry_t**)gpuhal__calloc(cache->device->allocator, count * sizeof(*buckets));
  if (!buckets) return;
  for (i = 0; i < cache->bucket_count; ++i) {
    gpuhal__module_entry_t* e = cache->buckets[i];
    while (e) {
      gpuhal__module_entry_t* next = e->hash_next;
      gpuhal__module_entry_t** slot = &buckets[e->hash & (count - 1)];
      e->hash_next = *slot;
      *slot = e;
      e = next;
    }
  }
  gpuhal__free(cache->device->allocator, cache->buckets);
  cache->buckets = buckets;
  cache->bucket_count = count;
}

static void gpuhal__module_cache_insert_locked(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry) {
  gpuhal__module_entry_t** slot;
  gpuhal__module_cache_grow_locked(cache);
  slot = gpuhal__module_cache_bucket(cache, entry->hash);
  entry->hash_next = *slot;
  *slot = entry;
  entry->in_table = 1;
  cache->table_count++;
}

static void gpuhal__module_cache_unlink_locked(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry) {
  gpuhal__module_entry_t** slot = gpuhal__module_cache_bucket(cache, entry->hash);
  while (*slot && *slot != entry) slot = &(*slot)->hash_next;
  if (*slot) *slot = entry->hash_next;
  entry->hash_next = NULL;
  entry->in_table = 0;
  cache->table_count--;
  if (entry->state == GPUHAL__ENTRY_READY) {
    cache->ready_count--;
    cache->ready_bytes -= entry->size;
  }
}

/* The entry for the key, or NULL. Under the lock. The bytes are compared in full. */
static gpuhal__module_entry_t* gpuhal__module_cache_find_locked(gpuhal__module_cache_t* cache,
                                                                const gpuhal__module_entry_t* key) {
  gpuhal__module_entry_t* e = *gpuhal__module_cache_bucket(cache, key->hash);
  for (; e; e = e->hash_next) {
    if (e->hash == key->hash && e->size == key->size && e->format == key->format &&
        e->jit.optimization_level == key->jit.optimization_level && e->jit.max_registers == key->jit.max_registers &&
        memcmp(e->image, key->image, key->size) == 0)
      return e;
  }
  return NULL;
}

/* Unloads unreferenced entries, least recently used first, while a limit is exceeded
 * (`everything`: all of them). They are moved to `victims`. Under the lock. */
static uint64_t gpuhal__module_cache_evict_locked(gpuhal__module_cache_t* cache, int everything,
                                                  gpuhal__list_node_t* victims) {
  uint64_t evicted = 0;
  while (!gpuhal__list_empty(&cache->idle) &&
         (everything || cache->ready_count > cache->max_entries || cache->ready_bytes > cache->max_bytes)) {
    gpuhal__list_node_t* node = gpuhal__list_pop_front(&cache->idle);
    gpuhal__module_entry_t* e = GPUHAL__CONTAINER_OF(node, gpuhal__module_entry_t, lru);
    gpuhal__module_cache_unlink_locked(cache, e);
    gpuhal__list_push_back(victims, &e->lru);
    ++evicted;
  }
  return evicted;
}

/* Drops one reference under the lock. A READY entry left unreferenced joins the LRU list
 * (most recently used end); a FAILED one is freed by its last holder: 1 then. */
static int gpuhal__module_entry_unref_locked(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry,
                                             gpuhal__list_node_t* victims) {
  if (--entry->refcount > 0) return 0;
  if (entry->state == GPUHAL__ENTRY_READY && entry->in_table) {
    gpuhal__list_push_back(&cache->idle, &entry->lru);
    gpuhal__atomic_add_relaxed(&cache->stats.evictions, gpuhal__module_cache_evict_locked(cache, 0, victims));
    return 0;
  }
  return 1;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__module_cache_create(gpuhal_device_t* device) {
  gpuhal__module_cache_t* cache = NULL;
  const gpuhal_device_params_t* params = &device->params;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, sizeof(*cache), "the module cache", (void**)&cache));
  cache->device = device;
  cache->bucket_count = 64;
  cache->buckets = (gpuhal__module_entry_t**)gpuhal__calloc(device->allocator, 64 * sizeof(*cache->buckets));
  if (!cache->buckets) {
    gpuhal__free(device->allocator, cache);
    return gpuhal__status_oom("the module cache table", 64 * sizeof(*cache->buckets));
  }
  gpuhal__mutex_init(&cache->mutex);
  gpuhal__cond_init(&cache->flight_done);
  gpuhal__list_init(&cache->idle);
  cache->max_entries =
      params->module_cache_max_entries ? params->module_cache_max_entries : GPUHAL__MODULE_CACHE_DEFAULT_ENTRIES;
  cache->max_bytes =
      params->module_cache_max_bytes ? params->module_cache_max_bytes : GPUHAL__MODULE_CACHE_DEFAULT_BYTES;
  cache->disk.device = device;
  cache->disk.max_bytes = params->module_cache_disk_max_bytes ? params->module_cache_disk_max_bytes
                                                              : GPUHAL__MODULE_CACHE_DEFAULT_DISK_BYTES;
  device->module_cache = cache;
  if (params->module_cache_dir && params->module_cache_dir[0]) {
    int err;
    cache->disk.dir = (char*)params->module_cache_dir; /* the device owns the copy */
    cache->disk.enabled = 1;
    err = gpuhal__make_dirs(cache->disk.dir);
    if (err) gpuhal__disk_disable(&cache->disk, "creating it", err);
  }
  return NULL;
}

GPUHAL__PRIVATE void gpuhal__module_cache_destroy(gpuhal_device_t* device) {
  gpuhal__module_cache_t* cache = gpuhal__module_cache_of(device);
  gpuhal__list_node_t victims;
  size_t i;
  if (!cache) return;
  if (cache->builtins && cache->builtins_destroy) cache->builtins_destroy(device, cache->builtins);
  cache->builtins = NULL;
  gpuhal__list_init(&victims);
  gpuhal__mutex_lock(&cache->mutex);
  for (i = 0; i < cache->bucket_count; ++i) {
    while (cache->buckets[i]) {
      gpuhal__module_entry_t* e = cache->buckets[i];
      if (e->refcount > 0)
        gpuhal__log(device->logger, GPUHAL_LOG_WARN, "device destroyed with a %s module still referenced %d time(s)",
                    gpuhal__image_format_name(e->format), (int)e->refcount);
      if (e->refcount == 0) gpuhal__list_remove(&e->lru);
      gpuhal__module_cache_unlink_locked(cache, e);
      gpuhal__list_push_back(&victims, &e->lru);
    }
  }
  gpuhal__mutex_unlock(&cache->mutex);
  gpuhal__module_cache_unload_list(device, &victims);
  gpuhal__cond_destroy(&cache->flight_done);
  gpuhal__mutex_destroy(&cache->mutex);
  gpuhal__free(device->allocator, cache->buckets);
  gpuhal__free(device->allocator, cache);
  device->module_cache = NULL;
}

/* Makes a new LOADING entry holding a NUL-terminated copy of the image. */
static gpuhal_status_t gpuhal__module_entry_create(gpuhal_device_t* device, const gpuhal__module_entry_t* key,
                                                   gpuhal__module_entry_t** out_entry) {
  gpuhal__module_entry_t* entry = NULL;
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__alloc_zeroed(device->allocator, sizeof(*entry), "a module cache entry", (void**)&entry));
  entry->image = gpuhal__alloc(device->allocator, key->size + 1);
  if (!entry->image) {
    gpuhal__free(device->allocator, entry);
    return gpuhal__status_oom("a copy of a kernel image", key->size + 1);
  }
  {
    gpuhal_status_t st = gpuhal__deferred_call_reserve(device->allocator, "a module's unload put off", &entry->put_off);
    if (st) {
      gpuhal__free(device->allocator, entry->image);
      gpuhal__free(device->allocator, entry);
      return st;
    }
  }
  memcpy(entry->image, key->image, key->size);
  ((char*)entry->image)[key->size] = 0;
  gpuhal__list_init(&entry->lru);
  gpuhal__mutex_init(&entry->functions_mutex);
  entry->refcount = 1;
  entry->state = GPUHAL__ENTRY_LOADING;
  entry->format = key->format;
  entry->jit = key->jit;
  entry->hash = key->hash;
  entry->size = key->size;
  entry->context = device->context;
  *out_entry = entry;
  return NULL;
}

/* Takes a reference on a found entry and waits while another thread builds it. Under the
 * lock (released while waiting). NULL: *out_entry is ready; else the build's error. */
static gpuhal_status_t gpuhal__module_cache_take_locked(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* e,
                                                        gpuhal__list_node_t* victims, int* out_free) {
  gpuhal_status_t st;
  *out_free = 0;
  if (e->refcount++ == 0 && e->state == GPUHAL__ENTRY_READY) gpuhal__list_remove(&e->lru); /* not idle now */
  GPUHAL__STAT_ADD(&cache->stats, hits);
  if (e->state == GPUHAL__ENTRY_LOADING) {
    GPUHAL__STAT_ADD(&cache->stats, waits);
    while (e->state == GPUHAL__ENTRY_LOADING) gpuhal__cond_wait(&cache->flight_done, &cache->mutex);
  }
  if (e->state == GPUHAL__ENTRY_READY) return NULL;
  st = gpuhal_status_clone(e->failure);
  *out_free = gpuhal__module_entry_unref_locked(cache, e, victims);
  return st;
}

/* Publishes the outcome of a build: READY, or FAILED (out of the table, so the next load
 * tries again). Returns the loader's status (a copy of the failure). */
static gpuhal_status_t gpuhal__module_cache_finish(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry,
                                                   gpuhal_status_t build_status, gpuhal__list_node_t* victims,
                                                   int* out_free) {
  gpuhal_status_t st = NULL;
  *out_free = 0;
  gpuhal__mutex_lock(&cache->mutex);
  if (build_status) {
    gpuhal__module_cache_unlink_locked(cache, entry);
    entry->state = GPUHAL__ENTRY_FAILED;
    entry->failure = build_status;
    st = gpuhal_status_clone(build_status);
    GPUHAL__STAT_ADD(&cache->stats, compile_failures);
    *out_free = gpuhal__module_entry_unref_locked(cache, entry, victims);
  } else {
    entry->state = GPUHAL__ENTRY_READY;
    cache->ready_count++;
    cache->ready_bytes += entry->size;
    gpuhal__atomic_add_relaxed(&cache->stats.evictions, gpuhal__module_cache_evict_locked(cache, 0, victims));
  }
  gpuhal__cond_broadcast(&cache->flight_done);
  gpuhal__mutex_unlock(&cache->mutex);
  return st;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__module_cache_load(gpuhal_device_t* device, const void* image, size_t size,
                                                          const gpuhal__jit_options_t* jit_or_null,
                                                          gpuhal__module_entry_t** out_entry) {
  gpuhal__module_cache_t* cache = gpuhal__module_cache_of(device);
  gpuhal__module_entry_t key;
  gpuhal__module_entry_t* found;
  gpuhal__module_entry_t* entry = NULL;
  gpuhal__list_node_t victims;
  gpuhal_status_t st = NULL;
  int free_entry = 0;
  *out_entry = NULL;
  memset(&key, 0, sizeof(key));
  key.jit = jit_or_null ? *jit_or_null : gpuhal__jit_options_default();
  gpuhal__image_sniff(image, size, &key.format, &key.size);
  key.image = (void*)image;
  key.hash = gpuhal__module_image_hash(image, key.size, key.format, &key.jit);
  gpuhal__list_init(&victims);
  gpuhal__mutex_lock(&cache->mutex);
  found = gpuhal__module_cache_find_locked(cache, &key);
  if (!found) {
    /* Check and copy the image outside the lock, then look again: another thread may
     * have won. */
    gpuhal__image_format_t format;
    size_t checked_size;
    gpuhal__mutex_unlock(&cache->mutex);
    GPUHAL__RETURN_IF_ERROR(gpuhal__image_detect(image, size, "gpuhal_executable_load", &format, &checked_size));
    GPUHAL_ASSERT(format == key.format && checked_size == key.size);
    GPUHAL__RETURN_IF_ERROR(gpuhal__module_entry_create(device, &key, &entry));
    gpuhal__mutex_lock(&cache->mutex);
    found = gpuhal__module_cache_find_locked(cache, &key);
    if (!found) {
      gpuhal__module_cache_insert_locked(cache, entry);
      GPUHAL__STAT_ADD(&cache->stats, misses);
    }
  }
  if (found) st = gpuhal__module_cache_take_locked(cache, found, &victims, &free_entry);
  gpuhal__mutex_unlock(&cache->mutex);
  if (found) {
    if (entry) gpuhal__module_entry_free(device, entry); /* lost the race: unused */
    if (free_entry) gpuhal__module_entry_free(device, found);
    gpuhal__module_cache_unload_list(device, &victims);
    if (!st) *out_entry = found;
    return st;
  }
  st = gpuhal__module_cache_finish(cache, entry, gpuhal__module_build(cache, entry), &victims, &free_entry);
  if (free_entry) gpuhal__module_entry_free(device, entry);
  gpuhal__module_cache_unload_list(device, &victims);
  if (!st) *out_entry = entry;
  return st;
}

GPUHAL__PRIVATE void gpuhal__module_cache_release(gpuhal_device_t* device, gpuhal__module_entry_t* entry) {
  gpuhal__module_cache_t* cache = gpuhal__module_cache_of(device);
  gpuhal__list_node_t victims;
  int free_entry;
  gpuhal__list_init(&victims);
  gpuhal__mutex_lock(&cache->mutex);
  free_entry = gpuhal__module_entry_unref_locked(cache, entry, &victims);
  gpuhal__mutex_unlock(&cache->mutex);
  if (free_entry) gpuhal__module_entry_unload(device, entry);
  gpuhal__module_cache_unload_list(device, &victims);
}

GPUHAL_API gpuhal_status_t gpuhal_device_module_cache_trim(gpuhal_device_t* device) {
  gpuhal__module_cache_t* cache;
  gpuhal__list_node_t victims;
  GPUHAL__CHECK_HANDLE(device, GPUHAL__MAGIC_DEVICE);
  cache = gpuhal__module_cache_of(device);
  gpuhal__list_init(&victims);
  gpuhal__mutex_lock(&cache->mutex);
  gpuhal__atomic_add_relaxed(&cache->stats.trimmed, gpuhal__module_cache_evict_locked(cache, 1, &victims));
  gpuhal__mutex_unlock(&cache->mutex);
  gpuhal__module_cache_unload_list(device, &victims);
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_device_module_cache_stats(gpuhal_device_t* device,
                                                            gpuhal_module_cache_stats_t* out_stats) {
  gpuhal__module_cache_t* cache;
  GPUHAL__CHECK_HANDLE(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG(out_stats != NULL, "out_stats", "must not be NULL");
  cache = gpuhal__module_cache_of(device);
  memset(out_stats, 0, sizeof(*out_stats));
  gpuhal__mutex_lock(&cache->mutex);
#define GPUHAL__STAT_COPY(field) out_stats->field = gpuhal__atomic_load_relaxed(&cache->stats.field)
  GPUHAL__STAT_COPY(hits);
  GPUHAL__STAT_COPY(misses);
  GPUHAL__STAT_COPY(waits);
  GPUHAL__STAT_COPY(compiles);
  GPUHAL__STAT_COPY(compile_failures);
  GPUHAL__STAT_COPY(disk_hits);
  GPUHAL__STAT_COPY(disk_misses);
  GPUHAL__STAT_COPY(disk_rejects);
  GPUHAL__STAT_COPY(source_compiles);
  GPUHAL__STAT_COPY(source_disk_hits);
  out_stats->disk_writes = gpuhal__atomic_load_relaxed(&cache->disk.writes);
  out_stats->disk_evictions = gpuhal__atomic_load_relaxed(&cache->disk.evictions);
  GPUHAL__STAT_COPY(evictions);
  GPUHAL__STAT_COPY(trimmed);
  GPUHAL__STAT_COPY(library_shares);
#undef GPUHAL__STAT_COPY
  out_stats->entries = cache->ready_count;
  out_stats->bytes = cache->ready_bytes;
  out_stats->max_entries = cache->max_entries;
  out_stats->max_bytes = cache->max_bytes;
  out_stats->disk_enabled = gpuhal__atomic_load(&cache->disk.enabled);
  gpuhal__mutex_unlock(&cache->mutex);
  return NULL;
}
