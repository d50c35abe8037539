/* symbols: loading the CUDA driver, NCCL and NVRTC and filling their function tables
 * (symbols.h). */
#include "symbols.h"

/* Appends "'name' (reason)" to a "tried" list, keeping it NUL-terminated and bounded. */
static void gpuhal__tried_append(char* tried, size_t size, const char* name, const char* reason) {
  size_t used = strlen(tried);
  if (used + 1 >= size) return;
  snprintf(tried + used, size - used, "%s'%s' (%s)", used ? ", " : "", name, reason ? reason : "not found");
}

/* Opens the first library of `candidates` (NULL-terminated) that loads. */
static void* gpuhal__library_open_first(const char* const* candidates, const gpuhal__logger_t* logger, char* tried,
                                        size_t tried_size, char* loaded_path, size_t loaded_path_size) {
  size_t i;
  tried[0] = 0;
  for (i = 0; candidates[i]; ++i) {
    void* handle = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      if (loaded_path && loaded_path_size) snprintf(loaded_path, loaded_path_size, "%s", candidates[i]);
      gpuhal__log(logger, GPUHAL_LOG_DEBUG, "loaded '%s'", candidates[i]);
      return handle;
    }
    gpuhal__tried_append(tried, tried_size, candidates[i], dlerror());
  }
  return NULL;
}

/* The libraries to try: an explicit path alone (a caller who names one does not want a
 * silent fallback to another), else $env_name alone, else the defaults (NULL-terminated,
 * at most GPUHAL__LIBRARY_CANDIDATES - 1 of them). */
#define GPUHAL__LIBRARY_CANDIDATES 4
static void gpuhal__library_candidates(const char* path_or_null, const char* env_name, const char* const* defaults,
                                       const char* out[GPUHAL__LIBRARY_CANDIDATES]) {
  const char* chosen = path_or_null && path_or_null[0] ? path_or_null : gpuhal__getenv(env_name);
  size_t i = 0;
  if (chosen) {
    out[i++] = chosen;
  } else {
    for (; defaults[i] && i + 1 < GPUHAL__LIBRARY_CANDIDATES; ++i) out[i] = defaults[i];
  }
  out[i] = NULL;
}

/* Opens the first library that loads of those gpuhal__library_candidates gives. */
static void* gpuhal__library_open(const char* path_or_null, const char* env_name, const char* const* defaults,
                                  const gpuhal__logger_t* logger, char* tried, size_t tried_size, char* path,
                                  size_t path_size) {
  const char* candidates[GPUHAL__LIBRARY_CANDIDATES];
  gpuhal__library_candidates(path_or_null, env_name, defaults, candidates);
  return gpuhal__library_open_first(candidates, logger, tried, tried_size, path, path_size);
}

/* dlsym of an entry a table needs: when absent, counted and named in `missing`. */
static void* gpuhal__symbol_required(void* handle, const char* name, char* missing, size_t missing_size,
                                     int* missing_count) {
  void* fn = dlsym(handle, name);
  if (!fn) {
    gpuhal__tried_append(missing, missing_size, name, "absent");
    ++*missing_count;
  }
  return fn;
}

/* One symbol: cuGetProcAddress_v2 at the pinned version, then the versioned export, then
 * the base name. NULL when none resolves. */
static void* gpuhal__cuda_symbol_resolve(void* handle, gpuhal_PFN_cuGetProcAddress get_proc, const char* name,
                                         const char* dlsym_name, int version) {
  void* fn = NULL;
  if (get_proc) {
    CUdriverProcAddressQueryResult query = CU_GET_PROC_ADDRESS_SUCCESS;
    if (get_proc(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &query) == CUDA_SUCCESS && fn &&
        query == CU_GET_PROC_ADDRESS_SUCCESS)
      return fn;
    fn = NULL;
  }
  fn = dlsym(handle, dlsym_name);
  if (!fn) fn = dlsym(handle, name);
  return fn;
}

/* Resolves every table entry into `cu`; returns the number of missing required symbols
 * and lists them in `missing`. */
static int gpuhal__cuda_symbols_resolve_all(void* handle, const gpuhal__logger_t* logger, gpuhal__cuda_symbols_t* cu,
                                            char* missing, size_t missing_size) {
  int missing_count = 0;
  void* fn;
  missing[0] = 0;
#define GPUHAL__RESOLVE_REQUIRED(name, dlsym_name, version, params)                           \
  fn = gpuhal__cuda_symbol_resolve(handle, cu->cuGetProcAddress, #name, dlsym_name, version); \
  if (!fn) {                                                                                  \
    gpuhal__tried_append(missing, missing_size, #name, dlsym_name);                           \
    missing_count++;                                                                          \
  }                                                                                           \
  GPUHAL__STORE_FN(cu->name, fn);
#define GPUHAL__RESOLVE_OPTIONAL(name, dlsym_name, version, params)                           \
  fn = gpuhal__cuda_symbol_resolve(handle, cu->cuGetProcAddress, #name, dlsym_name, version); \
  if (!fn)                                                                                    \
    gpuhal__log(logger, GPUHAL_LOG_INFO,                                                      \
                "optional CUDA symbol %s (%s, CUDA %d) not found: the feature "               \
                "that needs it is off",                                                       \
                #name, dlsym_name, version);                                                  \
  GPUHAL__STORE_FN(cu->name, fn);
  GPUHAL_CUDA_REQUIRED_SYMBOLS(GPUHAL__RESOLVE_REQUIRED)
  GPUHAL_CUDA_OPTIONAL_SYMBOLS(GPUHAL__RESOLVE_OPTIONAL)
#undef GPUHAL__RESOLVE_REQUIRED
#undef GPUHAL__RESOLVE_OPTIONAL
  return missing_count;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__symbols_load_cuda(const char* path_or_null, const gpuhal__logger_t* logger,
                                                          gpuhal__cuda_symbols_t* cu, void** out_handle,
                                                          char* loaded_path, size_t loaded_path_size) {
  static const char* const defaults[] = {"libcuda.so.1", "libcuda.so", NULL};
  char tried[1024];
  char missing[1024];
  char path[GPUHAL__LIBRARY_PATH_MAX];
  void* handle;
  void* get_proc;
  int missing_count;
  memset(cu, 0, sizeof(*cu));
  *out_handle = NULL;
  if (loaded_path && loaded_path_size) loaded_path[0] = 0;
  handle = gpuhal__library_open(path_or_null, "GPUHAL_CUDA_LIBRARY", defaults, logger, tried, sizeof(tried), path,
                                sizeof(path));
  if (!handle)
    return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                              "could not load the CUDA driver library: tried %s; install the NVIDIA driver or "
                              "point GPUHAL_CUDA_LIBRARY at libcuda.so.1",
                              tried);
  /* Only the _v2 export has the CUDA 12 signature (with the query result) we call. */
  get_proc = dlsym(handle, "cuGetProcAddress_v2");
  GPUHAL__STORE_FN(cu->cuGetProcAddress, get_proc);
  if (!get_proc)
    gpuhal__log(logger, GPUHAL_LOG_INFO, "'%s' has no cuGetProcAddress_v2 (a pre-CUDA-12 driver): using dlsym", path);
  missing_count = gpuhal__cuda_symbols_resolve_all(handle, logger, cu, missing, sizeof(missing));
  if (missing_count) {
    dlclose(handle);
    memset(cu, 0, sizeof(*cu));
    return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                              "the CUDA driver library '%s' lacks %d required symbol%s: %s; the driver is too old "
                              "or the library is not a CUDA driver",
                              path, missing_count, missing_count == 1 ? "" : "s", missing);
  }
  *out_handle = handle;
  if (loaded_path && loaded_path_size) snprintf(loaded_path, loaded_path_size, "%s", path);
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__symbols_load_nccl(const char* path_or_null, const gpuhal__logger_t* logger,
                                                          gpuhal__nccl_symbols_t* nccl, void** out_handle,
                                                          char* loaded_path, size_t loaded_path_size) {
#if defined(GPUHAL_NO_NCCL)
  GPUHAL__UNUSED(path_or_null);
  GPUHAL__UNUSED(logger);
  memset(nccl, 0, sizeof(*nccl));
  *out_handle = NULL;
  if (loaded_path && loaded_path_size) loaded_path[0] = 0;
  return NULL;
#else
  static const char* const defaults[] = {"libnccl.so.2", "libnccl.so", NULL};
  char tried[1024];
  char missing[512];
  char path[GPUHAL__LIBRARY_PATH_MAX];
  void* handle;
  void* fn;
  int missing_count = 0;
  memset(nccl, 0, sizeof(*nccl));
  *out_handle = NULL;
  if (loaded_path && loaded_path_size) loaded_path[0] = 0;
  handle = gpuhal__library_open(path_or_null, "GPUHAL_NCCL_LIBRARY", defaults, logger, tried, sizeof(tried), path,
                                sizeof(path));
  if (!handle) {
    gpuhal__log(logger, GPUHAL_LOG_INFO, "NCCL not loaded (collectives are off): tried %s", tried);
    return NULL;
  }
  missing[0] = 0;
#define GPUHAL__RESOLVE_NCCL(name, params)                                               \
  fn = gpuhal__symbol_required(handle, #name, missing, sizeof(missing), &missing_count); \
  GPUHAL__STORE_FN(nccl->name, fn);
  GPUHAL_NCCL_SYMBOLS(GPUHAL__RESOLVE_NCCL)
  GPUHAL__RESOLVE_NCCL(ncclGetErrorString, (ncclResult_t result))
#undef GPUHAL__RESOLVE_NCCL
  if (missing_count) {
    gpuhal__log(logger, GPUHAL_LOG_WARN, "NCCL library '%s' lacks %s: collectives are off", path, missing);
    dlclose(handle);
    memset(nccl, 0, sizeof(*nccl));
    return NULL;
  }
  nccl->loaded = 1;
  *out_handle = handle;
  if (loaded_path && loaded_path_size) snprintf(loaded_path, loaded_path_size, "%s", path);
  return NULL;
#endif
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__symbols_load_nvrtc(const char* path_or_null, const gpuhal__logger_t* logger,
                                                           gpuhal__nvrtc_symbols_t* nvrtc, void** out_handle,
                                                           char* loaded_path, size_t loaded_path_size) {
  static const char* const defaults[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
  char tried[1024];
  char missing[512];
  char path[GPUHAL__LIBRARY_PATH_MAX];
  void* handle;
  void* fn;
  int missing_count = 0;
  memset(nvrtc, 0, sizeof(*nvrtc));
  *out_handle = NULL;
  if (loaded_path && loaded_path_size) loaded_path[0] = 0;
  handle = gpuhal__library_open(path_or_null, "GPUHAL_NVRTC_LIBRARY", defaults, logger, tried, sizeof(tried), path,
                                sizeof(path));
  if (!handle)
    return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                              "could not load NVRTC: tried %s; install the CUDA toolkit's NVRTC (libnvrtc.so) or "
                              "point GPUHAL_NVRTC_LIBRARY (or gpuhal_driver_options_t.nvrtc_library) at it",
                              tried);
  missing[0] = 0;
#define GPUHAL__RESOLVE_NVRTC(name, params)                                              \
  fn = gpuhal__symbol_required(handle, #name, missing, sizeof(missing), &missing_count); \
  GPUHAL__STORE_FN(nvrtc->name, fn);
#define GPUHAL__RESOLVE_NVRTC_OPTIONAL(name, params) \
  fn = dlsym(handle, #name);                         \
  GPUHAL__STORE_FN(nvrtc->name, fn);
  GPUHAL_NVRTC_SYMBOLS(GPUHAL__RESOLVE_NVRTC)
  GPUHAL__RESOLVE_NVRTC(nvrtcGetErrorString, (nvrtcResult result))
  GPUHAL_NVRTC_OPTIONAL_SYMBOLS(GPUHAL__RESOLVE_NVRTC_OPTIONAL)
#undef GPUHAL__RESOLVE_NVRTC
#undef GPUHAL__RESOLVE_NVRTC_OPTIONAL
  if (!missing_count && nvrtc->nvrtcVersion(&nvrtc->major, &nvrtc->minor) != NVRTC_SUCCESS) {
    gpuhal__tried_append(missing, sizeof(missing), "nvrtcVersion", "failed");
    missing_count++;
  }
  if (missing_count) {
    dlclose(handle);
    memset(nvrtc, 0, sizeof(*nvrtc));
    return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "the NVRTC library '%s' lacks %s; it is not NVRTC or too old",
                              path, missing);
  }
  *out_handle = handle;
  if (loaded_path && loaded_path_size) snprintf(loaded_path, loaded_path_size, "%s", path);
  gpuhal__log(logger, GPUHAL_LOG_DEBUG, "NVRTC %d.%d loaded from '%s'", nvrtc->major, nvrtc->minor, path);
  return NULL;
}
