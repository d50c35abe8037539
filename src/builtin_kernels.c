/* builtin_kernels: loading gpuhal's own fill and copy kernels (the PTX of builtin_ptx.h)
 * through the module cache, and their launch grids (builtin_kernels.h). */
#include "builtin_kernels.h"
#include "status.h"
#include "executable.h"

/* ---- built-in kernels ----
 * Their PTX (gpuhal__builtin_ptx_lines, one string per line) is generated from
 * tests/kernels/gpuhal_builtin_fill.cu by tools/embed_ptx.py; test_command_buffer checks
 * it against the checked-in .ptx, CI checks that against the .cu. */
#include "builtin_ptx.h"
#define GPUHAL__BUILTIN_MAX_GRID 1024u

/* The PTX text, joined; the caller frees it. */
static gpuhal_status_t gpuhal__builtin_ptx_join(const gpuhal_allocator_t* allocator, char** out_text,
                                                size_t* out_size) {
  size_t i, n = GPUHAL__ARRAY_SIZE(gpuhal__builtin_ptx_lines), size = 0;
  char* text;
  char* p;
  for (i = 0; i < n; ++i) size += strlen(gpuhal__builtin_ptx_lines[i]) + 1;
  text = (char*)gpuhal__alloc(allocator, size);
  if (!text) return gpuhal__status_oom("the built-in kernels' PTX", size);
  p = text;
  for (i = 0; i < n; ++i) {
    size_t len = strlen(gpuhal__builtin_ptx_lines[i]);
    memcpy(p, gpuhal__builtin_ptx_lines[i], len);
    p += len;
    *p++ = (i + 1 < n) ? '\n' : 0;
  }
  *out_text = text;
  *out_size = size - 1;
  return NULL;
}

static void gpuhal__builtins_destroy(gpuhal_device_t* device, void* opaque) {
  gpuhal__builtins_t* builtins = (gpuhal__builtins_t*)opaque;
  gpuhal__module_cache_release(device, builtins->entry);
  gpuhal__free(device->allocator, builtins);
}

static gpuhal_status_t gpuhal__builtins_load(gpuhal_device_t* device, gpuhal__builtins_t** out_builtins) {
  gpuhal__builtins_t* builtins = NULL;
  char* ptx = NULL;
  size_t ptx_size = 0;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  GPUHAL__RETURN_IF_ERROR(gpuhal__builtin_ptx_join(device->allocator, &ptx, &ptx_size));
  st = gpuhal__alloc_zeroed(device->allocator, sizeof(*builtins), "the built-in kernels", (void**)&builtins);
  if (!st) st = gpuhal__module_cache_load(device, ptx, ptx_size, NULL, &builtins->entry);
  gpuhal__free(device->allocator, ptx);
  if (!st) {
    st = gpuhal__context_enter(device, &scope);
    if (!st) {
      st = GPUHAL__CU(device->cu, cuModuleGetFunction,
                      (&builtins->fill, builtins->entry->module, "gpuhal_builtin_fill"));
      if (!st)
        st = GPUHAL__CU(device->cu, cuModuleGetFunction,
                        (&builtins->copy, builtins->entry->module, "gpuhal_builtin_copy"));
      if (!st) st = gpuhal__function_load_now(device, builtins->fill);
      if (!st) st = gpuhal__function_load_now(device, builtins->copy);
      gpuhal__context_leave(device, &scope);
    }
  }
  if (st) {
    if (builtins && builtins->entry) gpuhal__module_cache_release(device, builtins->entry);
    gpuhal__free(device->allocator, builtins);
    return gpuhal_status_annotate(st, "loading gpuhal's built-in fill/copy kernels");
  }
  *out_builtins = builtins;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__builtins_get(gpuhal_device_t* device, gpuhal__builtins_t** out_builtins) {
  gpuhal__module_cache_t* cache = gpuhal__module_cache_of(device);
  gpuhal__builtins_t* loaded = NULL;
  gpuhal__mutex_lock(&cache->mutex);
  *out_builtins = (gpuhal__builtins_t*)cache->builtins;
  gpuhal__mutex_unlock(&cache->mutex);
  if (*out_builtins) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__builtins_load(device, &loaded));
  gpuhal__mutex_lock(&cache->mutex);
  if (!cache->builtins) {
    cache->builtins = loaded;
    cache->builtins_destroy = gpuhal__builtins_destroy;
    loaded = NULL;
  }
  *out_builtins = (gpuhal__builtins_t*)cache->builtins;
  gpuhal__mutex_unlock(&cache->mutex);
  if (loaded) gpuhal__builtins_destroy(device, loaded);
  return NULL;
}

GPUHAL__PRIVATE void gpuhal__command_buffer_device_ready(gpuhal_device_t* device) {
  gpuhal__builtins_t* builtins = NULL;
  gpuhal_status_t status;
  if (!device->driver->memops) return;
  status = gpuhal__builtins_get(device, &builtins);
  if (!status) return;
  device->no_gpu_park = 1;
  gpuhal__log(device->logger, GPUHAL_LOG_WARN, "device %d: %s; its GPU work waits for semaphore values on the host",
              device->ordinal, gpuhal_status_message(status));
  gpuhal_status_free(status);
}

GPUHAL__PRIVATE uint32_t gpuhal__builtin_grid(uint64_t size) {
  uint64_t threads = size / 16 + 16;
  uint64_t blocks = (threads + GPUHAL__BUILTIN_BLOCK - 1) / GPUHAL__BUILTIN_BLOCK;
  return (uint32_t)GPUHAL__MIN(blocks, (uint64_t)GPUHAL__BUILTIN_MAX_GRID);
}
