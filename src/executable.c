/* executable: loading images through the module cache, and kernels with their
 * attributes (executable.h). */
#include "executable.h"
#include "symbols.h"
#include "status.h"
#include "module_image.h"

#define GPUHAL__MAGIC_EXECUTABLE 0x45584543u /* "EXEC" */

GPUHAL_API gpuhal_status_t gpuhal_executable_load(gpuhal_device_t* device, const void* image, size_t size,
                                                  gpuhal_executable_t** out_executable) {
  gpuhal_executable_t* executable = NULL;
  gpuhal__module_entry_t* entry = NULL;
  GPUHAL__CHECK_ARG(out_executable != NULL, "out_executable", "must not be NULL");
  *out_executable = NULL;
  GPUHAL__CHECK_OBJECT(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG(image != NULL, "image", "must not be NULL");
  GPUHAL__CHECK_ARG(size > 0, "size", "must be > 0");
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_alloc(&device->driver->objects, GPUHAL__MAGIC_EXECUTABLE, sizeof(*executable),
                                               "gpuhal_executable_t", (void**)&executable));
  {
    gpuhal_status_t st = gpuhal__module_cache_load(device, image, size, NULL, &entry);
    if (st) {
      gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_EXECUTABLE, executable);
      return st;
    }
  }
  gpuhal__object_init(&executable->object, GPUHAL__MAGIC_EXECUTABLE);
  gpuhal__device_retain_ref(device);
  executable->device = device;
  executable->entry = entry;
  gpuhal__mutex_init(&executable->mutex);
  *out_executable = executable;
  return NULL;
}

GPUHAL_API void gpuhal_executable_retain(gpuhal_executable_t* executable) {
  if (!gpuhal__object_is_held(executable, GPUHAL__MAGIC_EXECUTABLE)) return;
  gpuhal__object_user_retain(&executable->object);
}

static void gpuhal__executable_destroy(gpuhal_executable_t* executable) {
  gpuhal_device_t* device = executable->device;
  gpuhal_kernel_t* kernel = executable->kernels;
  while (kernel) {
    gpuhal_kernel_t* next = kernel->next;
    gpuhal__free(device->allocator, kernel->name);
    gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_KERNEL, kernel);
    kernel = next;
  }
  gpuhal__module_cache_release(device, executable->entry);
  gpuhal__free(device->allocator, executable->names);
  gpuhal__mutex_destroy(&executable->mutex);
  gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_EXECUTABLE, executable);
  gpuhal__device_release_ref(device);
}

GPUHAL__PRIVATE void gpuhal__executable_retain_ref(gpuhal_executable_t* executable) {
  gpuhal__object_retain(&executable->object);
}

GPUHAL__PRIVATE void gpuhal__executable_release_ref(gpuhal_executable_t* executable) {
  if (gpuhal__object_release(&executable->object)) gpuhal__executable_destroy(executable);
}

GPUHAL_API void gpuhal_executable_release(gpuhal_executable_t* executable) {
  gpuhal_driver_t* driver;
  uint64_t settle; /* gpuhal__driver_settle_begin: 0, or the settle begun */
  if (!gpuhal__object_is_live(executable, GPUHAL__MAGIC_EXECUTABLE)) return;
  if (!gpuhal__object_user_release(&executable->object)) {
    gpuhal__log_extra_release(executable->device->logger, __func__, "an executable");
    return;
  }
  driver = executable->device->driver;
  settle = gpuhal__driver_settle_begin(driver);
  gpuhal__executable_release_ref(executable);
  gpuhal__driver_settle_end(driver, settle);
}

/* cuFuncGetParamInfo for index 0, 1, ... until the driver says there is no such index. */
static gpuhal_status_t gpuhal__function_query_params(gpuhal_device_t* device, gpuhal__function_record_t* record) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  uint32_t count = 0, capacity = 0, i;
  uint32_t* offsets = NULL;
  record->info.param_count = GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN;
  if (!cu->cuFuncGetParamInfo) return NULL;
  for (;;) {
    size_t offset = 0, size = 0;
    CUresult r = cu->cuFuncGetParamInfo(record->function, count, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break; /* index past the last parameter */
    if (r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_DEINITIALIZED ||
        r == CUDA_ERROR_NOT_INITIALIZED || gpuhal__cuda_error_is_sticky(r)) {
      /* A failure of the moment (or of the context) fails the lookup: taken for "cannot
       * say", it turned the checks off for good (the record is cached), and a wrong
       * argument list reached the launch. */
      gpuhal__free(device->allocator, offsets);
      return gpuhal__cuda_status(cu, r, "cuFuncGetParamInfo", __FILE__, __LINE__);
    }
    if (r != CUDA_SUCCESS) {
      /* The driver has the entry point but cannot say for this kernel: checks are off. */
      gpuhal__log(device->logger, GPUHAL_LOG_DEBUG, "cuFuncGetParamInfo(%s, %u) returned %d: parameter checks off",
                  record->name, count, (int)r);
      gpuhal__free(device->allocator, offsets);
      return NULL;
    }
    if (count == capacity) {
      gpuhal_status_t grown = gpuhal__grow32(device->allocator, (void**)&offsets, &capacity, count + 1,
                                             sizeof(uint32_t) * 2, "kernel parameter info");
      if (grown) {
        gpuhal__free(device->allocator, offsets);
        return grown;
      }
    }
    offsets[2 * count] = (uint32_t)offset;
    offsets[2 * count + 1] = (uint32_t)size;
    ++count;
  }
  /* Store as two arrays: offsets[0..count), sizes[count..2*count). */
  if (count) {
    record->params = (uint32_t*)gpuhal__alloc(device->allocator, sizeof(uint32_t) * 2 * count);
    if (!record->params) {
      gpuhal__free(device->allocator, offsets);
      return gpuhal__status_oom("kernel parameter info", sizeof(uint32_t) * 2 * count);
    }
    for (i = 0; i < count; ++i) {
      record->params[i] = offsets[2 * i];
      record->params[count + i] = offsets[2 * i + 1];
    }
    record->info.param_offsets = record->params;
    record->info.param_sizes = record->params + count;
  }
  gpuhal__free(device->allocator, offsets);
  record->info.param_count = count;
  return NULL;
}

static gpuhal_status_t gpuhal__function_query_attributes(gpuhal_device_t* device, gpuhal__function_record_t* record) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  gpuhal_kernel_info_t* info = &record->info;
  CUfunction f = record->function;
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
  /* The driver reports the device's limit for a .reqntid kernel (1024 on an H200), though
   * only the required block's threads can launch: the limit users size blocks and
   * occupancy queries by is that product. */
  if (info->required_block[0]) {
    uint64_t required = (uint64_t)info->required_block[0] * info->required_block[1] * info->required_block[2];
    if (required < (uint64_t)info->max_threads_per_block) info->max_threads_per_block = (int)required;
  }
  return gpuhal__function_query_params(device, record);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__function_load_now(gpuhal_device_t* device, CUfunction function) {
  if (!device->driver->memops || !device->cu->cuFuncLoad) return NULL;
  return GPUHAL__CU(device->cu, cuFuncLoad, (function));
}

/* A PTX entry's kernels with a .reqntid, read from its image once (under the entry's
 * functions_mutex): the driver does not report it. */
static gpuhal_status_t gpuhal__module_entry_read_ptx(gpuhal_device_t* device, gpuhal__module_entry_t* entry) {
  gpuhal__ptx_function_t f;
  size_t cursor = 0;
  if (entry->ptx_read || entry->format != GPUHAL__IMAGE_PTX) return NULL;
  while (gpuhal__ptx_next_function((const char*)entry->image, entry->size, &cursor, &f)) {
    if (!f.is_entry || !f.reqntid[0]) continue;
    if (entry->required_block_count == entry->required_block_capacity) {
      gpuhal_status_t st = gpuhal__grow32(device->allocator, (void**)&entry->required_blocks,
                                          &entry->required_block_capacity, (size_t)entry->required_block_count + 1,
                                          sizeof(gpuhal__ptx_function_t), "a module's .reqntid kernels");
      if (st) {
        entry->required_block_count = 0; /* read again at the next lookup */
        return st;
      }
    }
    entry->required_blocks[entry->required_block_count++] = f;
  }
  entry->ptx_read = 1;
  return NULL;
}

/* The block kernel `name` of the entry requires (its .reqntid), or zeros. */
static void gpuhal__module_entry_required_block(const gpuhal__module_entry_t* entry, const char* name,
                                                uint32_t out[3]) {
  size_t length = strlen(name);
  uint32_t i;
  memset(out, 0, 3 * sizeof(uint32_t));
  for (i = 0; i < entry->required_block_count; ++i) {
    const gpuhal__ptx_function_t* f = &entry->required_blocks[i];
    if (f->name_length == length && memcmp(f->name, name, length) == 0) memcpy(out, f->reqntid, 3 * sizeof(uint32_t));
  }
}

/* 1 when a name of PTX text (`text_length` bytes at `text`) is `name` (`length` bytes;
 * `whole`), or contains it. */
static int gpuhal__ptx_name_matches(const char* text, size_t text_length, const char* name, size_t length, int whole) {
  size_t i;
  if (whole) return text_length == length && memcmp(text, name, length) == 0;
  for (i = 0; length && i + length <= text_length; ++i)
    if (memcmp(text + i, name, length) == 0) return 1;
  return 0;
}

/* 1 when `name` (length bytes) occurs in f's name. */
static int gpuhal__ptx_function_name_contains(const gpuhal__ptx_function_t* f, const char* name, size_t length) {
  return gpuhal__ptx_name_matches(f->name, f->name_length, name, length, 0);
}

/* Appends to `out` as snprintf would, keeping it NUL-terminated when it is full. */
static void gpuhal__append(char* out, size_t capacity, size_t* used, const char* format, ...) {
  va_list args;
  int n;
  if (*used + 1 >= capacity) return;
  va_start(args, format);
  n = vsnprintf(out + *used, capacity - *used, format, args);
  va_end(args);
  if (n > 0) *used = GPUHAL__MIN(*used + (size_t)n, capacity - 1);
}

/* What a PTX image says of a name that is none of its kernels, for the NOT_FOUND status:
 * that it is a device function, that there are no kernels, or which kernels there are (those
 * whose names contain it first: the mangled name of a C++ or Julia kernel). */
static void gpuhal__kernel_not_found_hint(const gpuhal__module_entry_t* entry, const char* name, char* out,
                                          size_t capacity) {
  gpuhal__ptx_function_t f;
  size_t cursor = 0, length = strlen(name), used = 0;
  uint32_t entries = 0, containing = 0, listed = 0;
  int is_func = 0;
  out[0] = 0;
  if (entry->format != GPUHAL__IMAGE_PTX) return;
  while (gpuhal__ptx_next_function((const char*)entry->image, entry->size, &cursor, &f)) {
    if (!f.is_entry) {
      is_func |= f.name_length == length && memcmp(f.name, name, length) == 0;
      continue;
    }
    entries++;
    containing += (uint32_t)gpuhal__ptx_function_name_contains(&f, name, length);
  }
  if (is_func) {
    gpuhal__append(out, capacity, &used, ": it is a device function (.func) of the PTX, not a kernel (.entry)");
    return;
  }
  if (!entries) {
    gpuhal__append(out, capacity, &used, ": the PTX defines no kernels (.entry)");
    return;
  }
  gpuhal__append(out, capacity, &used, containing ? ": kernels whose names contain it: " : ": its kernels: ");
  cursor = 0;
  while (listed < 3 && gpuhal__ptx_next_function((const char*)entry->image, entry->size, &cursor, &f)) {
    if (!f.is_entry || (containing && !gpuhal__ptx_function_name_contains(&f, name, length))) continue;
    gpuhal__append(out, capacity, &used, "%s'%.*s%s'", listed ? ", " : "", (int)GPUHAL__MIN(f.name_length, 200), f.name,
                   f.name_length > 200 ? "..." : "");
    listed++;
  }
  if ((containing ? containing : entries) > listed)
    gpuhal__append(out, capacity, &used, " (%u in all)", containing ? containing : entries);
}

/* cuModuleGetFunction and the attributes, in the device's context. */
static gpuhal_status_t gpuhal__function_record_create(gpuhal_device_t* device, gpuhal__module_entry_t* entry,
                                                      const char* name, gpuhal__function_record_t** out_record) {
  size_t name_length = strlen(name);
  gpuhal__function_record_t* record = NULL;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  CUresult r;
  GPUHAL_ASSERT(entry->context == device->context); /* a module is only ever used in its own context */
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, sizeof(*record) + name_length + 1,
                                               "a kernel function record", (void**)&record));
  record->name = (char*)(record + 1);
  memcpy(record->name, name, name_length + 1);
  record->info.name = record->name;
  gpuhal__module_entry_required_block(entry, name, record->info.required_block);
  st = gpuhal__context_enter(device, &scope);
  if (!st) {
    r = device->cu->cuModuleGetFunction(&record->function, entry->module, name);
    if (r == CUDA_ERROR_NOT_FOUND) {
      char hint[1024];
      gpuhal__kernel_not_found_hint(entry, name, hint, sizeof(hint));
      st = gpuhal_status_make(GPUHAL_STATUS_NOT_FOUND,
                              "gpuhal_executable_kernel: no kernel named '%s' in this %s executable%s", name,
                              gpuhal__image_format_name(entry->format), hint);
    } else if (r != CUDA_SUCCESS) {
      st = gpuhal__cuda_status(device->cu, r, "cuModuleGetFunction", __FILE__, __LINE__); /* not called again */
    } else {
      st = gpuhal__function_query_attributes(device, record);
      if (!st) st = gpuhal__function_load_now(device, record->function);
    }
    gpuhal__context_leave(device, &scope);
  }
  if (st) {
    gpuhal__free(device->allocator, record->params);
    gpuhal__free(device->allocator, record);
    return st;
  }
  *out_record = record;
  return NULL;
}

/* The entry's record for `name`, looked up in the driver on first use (then cached for
 * every executable of the entry). */
static gpuhal_status_t gpuhal__module_entry_function(gpuhal_device_t* device, gpuhal__module_entry_t* entry,
                                                     const char* name, gpuhal__function_record_t** out_record) {
  gpuhal__function_record_t* record;
  gpuhal_status_t st = NULL;
  gpuhal__mutex_lock(&entry->functions_mutex);
  for (record = entry->functions; record; record = record->next)
    if (strcmp(record->name, name) == 0) break;
  if (!record) st = gpuhal__module_entry_read_ptx(device, entry);
  if (!record && !st) {
    st = gpuhal__function_record_create(device, entry, name, &record);
    if (!st) {
      record->next = entry->functions;
      entry->functions = record;
    }
  }
  if (!st) *out_record = record;
  gpuhal__mutex_unlock(&entry->functions_mutex);
  return st;
}

/* Under the executable mutex. */
static gpuhal_kernel_t* gpuhal__executable_find_kernel_locked(gpuhal_executable_t* executable, const char* name) {
  gpuhal_kernel_t* k;
  for (k = executable->kernels; k; k = k->next)
    if (strcmp(k->name, name) == 0) return k;
  return NULL;
}

/* A kernel object of this executable over the entry's cached function record. */
static gpuhal_status_t gpuhal__kernel_create(gpuhal_executable_t* executable, const char* name,
                                             gpuhal_kernel_t** out_kernel) {
  gpuhal_device_t* device = executable->device;
  size_t name_length = strlen(name);
  gpuhal__function_record_t* record = NULL;
  gpuhal_kernel_t* kernel = NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__module_entry_function(device, executable->entry, name, &record));
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_alloc(&device->driver->objects, GPUHAL__MAGIC_KERNEL, sizeof(*kernel),
                                               "gpuhal_kernel_t", (void**)&kernel));
  kernel->name = (char*)gpuhal__alloc(device->allocator, name_length + 1);
  if (!kernel->name) {
    gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_KERNEL, kernel);
    return gpuhal__status_oom("a kernel's name", name_length + 1);
  }
  gpuhal__object_init(&kernel->object, GPUHAL__MAGIC_KERNEL);
  memcpy(kernel->name, name, name_length + 1);
  kernel->executable = executable;
  kernel->function = record->function;
  kernel->record = record;
  gpuhal__mutex_lock(&executable->entry->functions_mutex);
  kernel->info = record->info; /* param arrays stay the record's: the entry outlives the executable */
  gpuhal__mutex_unlock(&executable->entry->functions_mutex);
  kernel->info.name = kernel->name;
  *out_kernel = kernel;
  return NULL;
}

/* The entry a name expression of gpuhal_executable_compile stands for; else `name`. */
static const char* gpuhal__executable_entry_name(const gpuhal_executable_t* executable, const char* name) {
  const char* p = executable->names;
  while (p && *p) {
    const char* entry = p + strlen(p) + 1;
    if (strcmp(p, name) == 0) return entry;
    p = entry + strlen(entry) + 1;
  }
  return name;
}

GPUHAL_API gpuhal_status_t gpuhal_executable_kernel(gpuhal_executable_t* executable, const char* name,
                                                    gpuhal_kernel_t** out_kernel) {
  gpuhal_kernel_t* kernel;
  GPUHAL__CHECK_ARG(out_kernel != NULL, "out_kernel", "must not be NULL");
  *out_kernel = NULL;
  GPUHAL__CHECK_OBJECT(executable, GPUHAL__MAGIC_EXECUTABLE);
  GPUHAL__CHECK_ARG(name != NULL, "name", "must not be NULL");
  GPUHAL__CHECK_ARG(name[0] != 0, "name", "must not be empty");
  name = gpuhal__executable_entry_name(executable, name);
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

/* ---- globals ---- */

/* What a PTX image says of a name that is none of its globals, for the NOT_FOUND status:
 * that it is a kernel or a device function, a .shared or an .extern variable, that there are
 * no globals, or which globals there are (those whose names contain it first: the mangled
 * name of a namespaced C++ variable). */
static void gpuhal__global_not_found_hint(const gpuhal__module_entry_t* entry, const char* name, char* out,
                                          size_t capacity) {
  const char* ptx = (const char*)entry->image;
  gpuhal__ptx_function_t f;
  gpuhal__ptx_variable_t v;
  size_t cursor = 0, length = strlen(name), used = 0;
  uint32_t globals = 0, containing = 0, listed = 0;
  out[0] = 0;
  if (entry->format != GPUHAL__IMAGE_PTX) return;
  while (gpuhal__ptx_next_function(ptx, entry->size, &cursor, &f))
    if (gpuhal__ptx_name_matches(f.name, f.name_length, name, length, 1)) {
      gpuhal__append(out, capacity, &used, ": it is a %s of the PTX, not a global (.global or .const)",
                     f.is_entry ? "kernel (.entry)" : "device function (.func)");
      return;
    }
  for (cursor = 0; gpuhal__ptx_next_variable(ptx, entry->size, &cursor, &v);) {
    int defined = v.space != 's' && !v.is_extern;
    if (gpuhal__ptx_name_matches(v.name, v.name_length, name, length, 1) && !defined) {
      gpuhal__append(out, capacity, &used, "%s",
                     v.space == 's' ? ": it is a .shared variable of the PTX (one per thread block: the host has "
                                      "no address for it)"
                                    : ": the PTX declares it .extern (defined in another image, not in this one)");
      return;
    }
    globals += (uint32_t)defined;
    containing += (uint32_t)(defined && gpuhal__ptx_name_matches(v.name, v.name_length, name, length, 0));
  }
  if (!globals) {
    gpuhal__append(out, capacity, &used, ": the PTX defines no globals (.global or .const)");
    return;
  }
  gpuhal__append(out, capacity, &used, containing ? ": globals whose names contain it: " : ": its globals: ");
  for (cursor = 0; listed < 3 && gpuhal__ptx_next_variable(ptx, entry->size, &cursor, &v);) {
    if (v.space == 's' || v.is_extern ||
        (containing && !gpuhal__ptx_name_matches(v.name, v.name_length, name, length, 0)))
      continue;
    gpuhal__append(out, capacity, &used, "%s'%.*s%s'", listed ? ", " : "", (int)GPUHAL__MIN(v.name_length, 200), v.name,
                   v.name_length > 200 ? "..." : "");
    listed++;
  }
  if ((containing ? containing : globals) > listed)
    gpuhal__append(out, capacity, &used, " (%u in all)", containing ? containing : globals);
}

/* The address and size of global `name` of the executable's module, in its device's
 * context: a library's through cuLibraryGetGlobal (its copy for that context), a module of
 * the context alone (a cubin, a disk-cache hit, modules_per_context) through
 * cuModuleGetGlobal. `func` names the public call in errors. */
static gpuhal_status_t gpuhal__executable_global_find(gpuhal_executable_t* executable, const char* name,
                                                      const char* func, CUdeviceptr* out_address, size_t* out_size) {
  gpuhal_device_t* device = executable->device;
  gpuhal__module_entry_t* entry = executable->entry;
  const gpuhal__cuda_symbols_t* cu = device->cu;
  gpuhal__context_scope_t scope;
  const char* call;
  CUresult r;
  GPUHAL_ASSERT(entry->context == device->context); /* a module is only ever used in its own context */
  {
    gpuhal_status_t entered = gpuhal__context_enter(device, &scope);
    if (entered) return gpuhal_status_annotate(entered, "%s('%s')", func, name);
  }
  if (entry->library && cu->cuLibraryGetGlobal) {
    call = "cuLibraryGetGlobal";
    r = cu->cuLibraryGetGlobal(out_address, out_size, gpuhal__module_library_handle(entry->library), name);
  } else {
    call = "cuModuleGetGlobal";
    r = cu->cuModuleGetGlobal(out_address, out_size, entry->module, name);
  }
  gpuhal__context_leave(device, &scope);
  /* For a kernel's name the driver answers CUDA_ERROR_INVALID_VALUE (driver 580, H200);
   * the pointers and handle are valid here, so that too means no such global. */
  if (r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_VALUE) {
    char hint[1024];
    gpuhal__global_not_found_hint(entry, name, hint, sizeof(hint));
    return gpuhal_status_make(GPUHAL_STATUS_NOT_FOUND, "%s: no global named '%s' in this %s executable%s", func, name,
                              gpuhal__image_format_name(entry->format), hint);
  }
  if (r != CUDA_SUCCESS)
    return gpuhal_status_annotate(gpuhal__cuda_status(cu, r, call, __FILE__, __LINE__), "%s('%s')", func, name);
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_executable_global(gpuhal_executable_t* executable, const char* name,
                                                    uint64_t* out_address, uint64_t* out_size) {
  CUdeviceptr address = 0;
  size_t size = 0;
  GPUHAL__CHECK_ARG(out_address != NULL, "out_address", "must not be NULL");
  GPUHAL__CHECK_ARG(out_size != NULL, "out_size", "must not be NULL");
  *out_address = 0;
  *out_size = 0;
  GPUHAL__CHECK_OBJECT(executable, GPUHAL__MAGIC_EXECUTABLE);
  GPUHAL__CHECK_ARG(name != NULL, "name", "must not be NULL");
  GPUHAL__CHECK_ARG(name[0] != 0, "name", "must not be empty");
  GPUHAL__RETURN_IF_ERROR(gpuhal__executable_global_find(executable, gpuhal__executable_entry_name(executable, name),
                                                         __func__, &address, &size));
  *out_address = (uint64_t)address;
  *out_size = (uint64_t)size;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_executable_global_buffer(gpuhal_executable_t* executable, const char* name,
                                                           gpuhal_buffer_t** out_buffer) {
  CUdeviceptr address = 0;
  size_t size = 0;
  gpuhal_status_t st;
  GPUHAL__CHECK_ARG(out_buffer != NULL, "out_buffer", "must not be NULL");
  *out_buffer = NULL;
  GPUHAL__CHECK_OBJECT(executable, GPUHAL__MAGIC_EXECUTABLE);
  GPUHAL__CHECK_ARG(name != NULL, "name", "must not be NULL");
  GPUHAL__CHECK_ARG(name[0] != 0, "name", "must not be empty");
  GPUHAL__RETURN_IF_ERROR(gpuhal__executable_global_find(executable, gpuhal__executable_entry_name(executable, name),
                                                         __func__, &address, &size));
  /* The buffer keeps the module (through its executable) loaded: its memory is the module's. */
  gpuhal__executable_retain_ref(executable);
  st = gpuhal__buffer_create_view(executable->device, address, (uint64_t)size, executable, out_buffer);
  if (st) {
    gpuhal__executable_release_ref(executable);
    return gpuhal_status_annotate(st, "%s('%s')", __func__, name);
  }
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_kernel_info(gpuhal_kernel_t* kernel, gpuhal_kernel_info_t* out_info) {
  GPUHAL__CHECK_OBJECT(kernel, GPUHAL__MAGIC_KERNEL);
  GPUHAL__CHECK_ARG(out_info != NULL, "out_info", "must not be NULL");
  *out_info = kernel->info;
  out_info->max_dynamic_shared_bytes = gpuhal__kernel_max_dynamic_shared(kernel);
  return NULL;
}

GPUHAL__PRIVATE int gpuhal__kernel_max_dynamic_shared(const gpuhal_kernel_t* kernel) {
  return gpuhal__atomic_load_relaxed(&kernel->record->info.max_dynamic_shared_bytes);
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
  /* One setting of the driver function, shared by every kernel object over it: the
   * entry's lock keeps the driver's value and the record's in the same order. */
  gpuhal__mutex_lock(&kernel->executable->entry->functions_mutex);
  st = gpuhal__context_enter(device, &scope);
  if (!st) {
    st = GPUHAL__CU(device->cu, cuFuncSetAttribute,
                    (kernel->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes));
    gpuhal__context_leave(device, &scope);
  }
  if (!st) gpuhal__atomic_store_relaxed(&kernel->record->info.max_dynamic_shared_bytes, (int)bytes);
  gpuhal__mutex_unlock(&kernel->executable->entry->functions_mutex);
  if (st) return gpuhal_status_annotate(st, "gpuhal_kernel_set_max_dynamic_shared('%s', %u)", kernel->name, bytes);
  return NULL;
}

/* ---- occupancy ---- */

/* The checks both occupancy queries make; `present` says whether the driver has the call. */
static gpuhal_status_t gpuhal__kernel_occupancy_check(gpuhal_kernel_t* kernel, uint32_t block_threads,
                                                      uint32_t shared_bytes, int present, const char* entry,
                                                      const char* func) {
  int max_dynamic_shared;
  if (block_threads == 0 || block_threads > (uint32_t)kernel->info.max_threads_per_block)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "%s: argument 'block_threads' is %u; kernel '%s' takes 1..%d threads per block", func,
                              block_threads, kernel->name, kernel->info.max_threads_per_block);
  max_dynamic_shared = gpuhal__kernel_max_dynamic_shared(kernel);
  if (shared_bytes > (uint32_t)max_dynamic_shared)
    return gpuhal_status_make(
        GPUHAL_STATUS_OUT_OF_RANGE,
        "%s: argument 'shared_bytes' (%u) exceeds kernel '%s''s dynamic shared memory limit of %d "
        "bytes",
        func, shared_bytes, kernel->name, max_dynamic_shared);
  if (!present)
    return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "%s: the loaded CUDA driver (version %d) has no %s", func,
                              kernel->executable->device->info.driver_version, entry);
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_kernel_occupancy(gpuhal_kernel_t* kernel, uint32_t block_threads,
                                                   uint32_t shared_bytes, uint32_t* out_blocks_per_sm) {
  gpuhal_device_t* device;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  int blocks = 0;
  GPUHAL__CHECK_OBJECT(kernel, GPUHAL__MAGIC_KERNEL);
  GPUHAL__CHECK_ARG(out_blocks_per_sm != NULL, "out_blocks_per_sm", "must not be NULL");
  device = kernel->executable->device;
  GPUHAL__RETURN_IF_ERROR(gpuhal__kernel_occupancy_check(
      kernel, block_threads, shared_bytes, device->cu->cuOccupancyMaxActiveBlocksPerMultiprocessor != NULL,
      "cuOccupancyMaxActiveBlocksPerMultiprocessor", __func__));
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  st = GPUHAL__CU(device->cu, cuOccupancyMaxActiveBlocksPerMultiprocessor,
                  (&blocks, kernel->function, (int)block_threads, (size_t)shared_bytes));
  gpuhal__context_leave(device, &scope);
  if (st) return gpuhal_status_annotate(st, "%s('%s', %u, %u)", __func__, kernel->name, block_threads, shared_bytes);
  *out_blocks_per_sm = blocks > 0 ? (uint32_t)blocks : 0;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_kernel_max_cluster_size(gpuhal_kernel_t* kernel, uint32_t block_threads,
                                                          uint32_t shared_bytes, uint32_t* out_blocks) {
  gpuhal_device_t* device;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  CUlaunchConfig config;
  int size = 0;
  GPUHAL__CHECK_OBJECT(kernel, GPUHAL__MAGIC_KERNEL);
  GPUHAL__CHECK_ARG(out_blocks != NULL, "out_blocks", "must not be NULL");
  device = kernel->executable->device;
  GPUHAL__RETURN_IF_ERROR(gpuhal__kernel_occupancy_check(
      kernel, block_threads, shared_bytes,
      !device->info.cluster_launch || device->cu->cuOccupancyMaxPotentialClusterSize != NULL,
      "cuOccupancyMaxPotentialClusterSize", __func__));
  *out_blocks = 0;
  if (!device->info.cluster_launch) return NULL;
  /* The grid only has to be a multiple of any cluster size the answer could be. */
  memset(&config, 0, sizeof(config));
  config.gridDimX = 64, config.gridDimY = 1, config.gridDimZ = 1;
  config.blockDimX = block_threads, config.blockDimY = 1, config.blockDimZ = 1;
  config.sharedMemBytes = shared_bytes;
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  st = GPUHAL__CU(device->cu, cuOccupancyMaxPotentialClusterSize, (&size, kernel->function, &config));
  gpuhal__context_leave(device, &scope);
  if (st) return gpuhal_status_annotate(st, "%s('%s', %u, %u)", __func__, kernel->name, block_threads, shared_bytes);
  *out_blocks = size > 0 ? (uint32_t)size : 0;
  return NULL;
}
