/* module_library: images loaded once for every device (module_cache.h). Where the driver
 * has context-independent loading (cuLibraryLoadData, CUDA 12.0), an image is loaded once
 * per process into a CUlibrary that the module caches of all devices share (PTX and fatbins:
 * module_cache.c loads cubins per context): each device
 * takes the library's module in its own context (cuLibraryGetModule, where the driver loads
 * the code into that context) and the last holder unloads it. The driver keeps its
 * libraries in a list keyed like the module cache (the image's bytes, format and JIT
 * options); concurrent loads of one image load it once, the others wait for that load. */
#include "module_cache.h"
#include "hash.h"
#include "symbols.h"
#include "status.h"
#include "memory.h"

struct gpuhal__library_s {
  struct gpuhal__library_s* next;
  uint64_t hash;
  size_t size;
  gpuhal__image_format_t format;
  gpuhal__jit_options_t jit;
  void* image; /* a NUL-terminated copy: the exact key */
  CUlibrary library;
  gpuhal__deferred_call_t* put_off; /* the record its unload takes (gpuhal__deferred_call_reserve) */
  int32_t refcount;
  int loading;             /* its first holder is loading it; the others wait on library_cond */
  gpuhal_status_t failure; /* the load failed: every holder gets a copy */
};

GPUHAL__PRIVATE int gpuhal__module_library_usable(const gpuhal_device_t* device) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  return !device->params.modules_per_context && cu->cuLibraryLoadData && cu->cuLibraryGetModule && cu->cuLibraryUnload;
}

GPUHAL__PRIVATE CUlibrary gpuhal__module_library_handle(const gpuhal__library_t* library) { return library->library; }

static void gpuhal__library_free(const gpuhal_allocator_t* allocator, gpuhal__library_t* l) {
  gpuhal_status_free(l->failure);
  gpuhal__free(allocator, l->put_off); /* unless its unload took it */
  gpuhal__free(allocator, l->image);
  gpuhal__free(allocator, l);
}

/* The library of the key, or NULL. Under library_mutex. */
static gpuhal__library_t* gpuhal__library_find_locked(gpuhal_driver_t* driver, uint64_t hash, const void* image,
                                                      size_t size, gpuhal__image_format_t format,
                                                      const gpuhal__jit_options_t* jit) {
  gpuhal__library_t* l;
  for (l = driver->libraries; l; l = l->next)
    if (l->hash == hash && l->size == size && l->format == format &&
        l->jit.optimization_level == jit->optimization_level && l->jit.max_registers == jit->max_registers &&
        !l->failure && memcmp(l->image, image, size) == 0)
      return l;
  return NULL;
}

static void gpuhal__library_unlink_locked(gpuhal_driver_t* driver, gpuhal__library_t* library) {
  gpuhal__library_t** slot = &driver->libraries;
  while (*slot && *slot != library) slot = &(*slot)->next;
  if (*slot) *slot = library->next;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__module_library_acquire(gpuhal_device_t* device, const void* image, size_t size,
                                                               gpuhal__image_format_t format,
                                                               const gpuhal__jit_options_t* jit, CUjit_option* options,
                                                               void** values, unsigned count,
                                                               gpuhal__library_t** out_library, int* out_shared) {
  gpuhal_driver_t* driver = device->driver;
  uint64_t hash = gpuhal__module_image_hash(image, size, format, jit);
  gpuhal__library_t* l;
  gpuhal_status_t st = NULL;
  *out_library = NULL;
  *out_shared = 0;
  gpuhal__mutex_lock(&driver->library_mutex);
  l = gpuhal__library_find_locked(driver, hash, image, size, format, jit);
  if (l) {
    l->refcount++;
    while (l->loading) gpuhal__cond_wait(&driver->library_cond, &driver->library_mutex);
    if (l->failure) st = gpuhal_status_clone(l->failure);
    gpuhal__mutex_unlock(&driver->library_mutex);
    if (st) {
      gpuhal__module_library_release(device, l);
      return st;
    }
    *out_library = l;
    *out_shared = 1;
    return NULL;
  }
  l = (gpuhal__library_t*)gpuhal__calloc(device->allocator, sizeof(*l));
  if (l) l->image = gpuhal__alloc(device->allocator, size + 1);
  if (!l || !l->image) {
    gpuhal__mutex_unlock(&driver->library_mutex);
    if (l) gpuhal__free(device->allocator, l);
    return gpuhal__status_oom("a library's key", size + 1);
  }
  st = gpuhal__deferred_call_reserve(device->allocator, "a library's unload put off", &l->put_off);
  if (st) {
    gpuhal__mutex_unlock(&driver->library_mutex);
    gpuhal__library_free(device->allocator, l);
    return st;
  }
  memcpy(l->image, image, size);
  ((char*)l->image)[size] = 0;
  l->hash = hash;
  l->size = size;
  l->format = format;
  l->jit = *jit;
  l->refcount = 1;
  l->loading = 1;
  l->next = driver->libraries;
  driver->libraries = l;
  gpuhal__mutex_unlock(&driver->library_mutex);

  /* The image as given (NUL-terminated for PTX: the copy is), outside the lock. The copy
   * lives as long as the library, so the driver need not make its own. */
  {
    CUlibraryOption preserved = CU_LIBRARY_BINARY_IS_PRESERVED;
    void* yes = (void*)(uintptr_t)1;
    st =
        GPUHAL__CU(device->cu, cuLibraryLoadData, (&l->library, l->image, options, values, count, &preserved, &yes, 1));
  }

  gpuhal__mutex_lock(&driver->library_mutex);
  l->loading = 0;
  if (st) {
    l->library = NULL;
    l->failure = gpuhal_status_clone(st);
    gpuhal__library_unlink_locked(driver, l); /* the next load tries again */
  }
  gpuhal__cond_broadcast(&driver->library_cond);
  gpuhal__mutex_unlock(&driver->library_mutex);
  if (st) {
    gpuhal__module_library_release(device, l);
    return st;
  }
  *out_library = l;
  return NULL;
}

GPUHAL__PRIVATE void gpuhal__module_library_release(gpuhal_device_t* device, gpuhal__library_t* library) {
  gpuhal_driver_t* driver = device->driver;
  int last;
  gpuhal__mutex_lock(&driver->library_mutex);
  last = --library->refcount == 0;
  if (last && !library->failure) gpuhal__library_unlink_locked(driver, library);
  gpuhal__mutex_unlock(&driver->library_mutex);
  if (!last) return;
  if (library->library) {
    gpuhal_status_t st = gpuhal__device_unload_library(device, library->library, library->put_off);
    library->put_off = NULL;
    if (st) {
      gpuhal__log(device->logger, GPUHAL_LOG_WARN, "library unload failed: %s", gpuhal_status_message(st));
      gpuhal_status_free(st);
    }
  }
  gpuhal__library_free(device->allocator, library);
}
