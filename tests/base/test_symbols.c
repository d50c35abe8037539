/* Loading the CUDA driver: no library, a library missing a required symbol, one missing
 * an optional symbol, and the real (or softcuda) driver. */
#include "test_internals.h"
#include "test_util.h"

#ifndef FAKE_CUDA_MISSING_REQUIRED
#define FAKE_CUDA_MISSING_REQUIRED ""
#endif
#ifndef FAKE_CUDA_MISSING_OPTIONAL
#define FAKE_CUDA_MISSING_OPTIONAL ""
#endif

static gpuhal_driver_options_t options_for(const char* cuda_library) {
  gpuhal_driver_options_t o;
  memset(&o, 0, sizeof(o));
  o.cuda_library = cuda_library;
  o.nccl_library = "/nonexistent/libnccl.so.2"; /* keep these tests independent of NCCL */
  return o;
}

TU_TEST(explicit_missing_library_is_unavailable) {
  gpuhal_driver_options_t o = options_for("/nonexistent/dir/libcuda.so.1");
  gpuhal_driver_t* driver = (gpuhal_driver_t*)1;
  TU_CHECK_STATUS(gpuhal_driver_create(&o, &driver), GPUHAL_STATUS_UNAVAILABLE, "'/nonexistent/dir/libcuda.so.1'");
  TU_CHECK(driver == NULL);
  TU_CHECK_STATUS(gpuhal_driver_create(&o, &driver), GPUHAL_STATUS_UNAVAILABLE, "GPUHAL_CUDA_LIBRARY");
}

TU_TEST(env_missing_library_is_unavailable) {
  const char* saved = getenv("GPUHAL_CUDA_LIBRARY");
  char* copy = saved ? strdup(saved) : NULL;
  gpuhal_driver_options_t o = options_for(NULL);
  gpuhal_driver_t* driver = NULL;
  setenv("GPUHAL_CUDA_LIBRARY", "/nonexistent/from-env/libcuda.so", 1);
  TU_CHECK_STATUS(gpuhal_driver_create(&o, &driver), GPUHAL_STATUS_UNAVAILABLE, "/nonexistent/from-env/libcuda.so");
  if (copy) {
    setenv("GPUHAL_CUDA_LIBRARY", copy, 1);
    free(copy);
  } else {
    unsetenv("GPUHAL_CUDA_LIBRARY");
  }
}

/* With nothing configured, both default names are tried (only checkable where no driver
 * is installed). */
TU_TEST(default_names_are_tried) {
  gpuhal__cuda_symbols_t cu;
  void* handle = NULL;
  char loaded[256];
  gpuhal_status_t s;
  const char* saved = getenv("GPUHAL_CUDA_LIBRARY");
  char* copy = saved ? strdup(saved) : NULL;
  void* system = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!system) system = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (system) {
    dlclose(system);
    free(copy);
    TU_SKIP("a system CUDA driver is installed");
  }
  unsetenv("GPUHAL_CUDA_LIBRARY");
  s = gpuhal__symbols_load_cuda(NULL, NULL, &cu, &handle, loaded, sizeof(loaded));
  TU_CHECK_EQ_INT(gpuhal_status_code(s), GPUHAL_STATUS_UNAVAILABLE);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "'libcuda.so.1'");
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "'libcuda.so'");
  TU_CHECK(handle == NULL);
  TU_CHECK(loaded[0] == 0);
  gpuhal_status_free(s);
  if (copy) {
    setenv("GPUHAL_CUDA_LIBRARY", copy, 1);
    free(copy);
  }
}

TU_TEST(not_a_cuda_library) {
  gpuhal_driver_options_t o = options_for("libm.so.6");
  gpuhal_driver_t* driver = NULL;
  TU_CHECK_STATUS(gpuhal_driver_create(&o, &driver), GPUHAL_STATUS_UNAVAILABLE, "lacks");
  TU_CHECK(driver == NULL);
}

TU_TEST(missing_required_symbol_is_named) {
  gpuhal_driver_options_t o = options_for(FAKE_CUDA_MISSING_REQUIRED);
  gpuhal_driver_t* driver = NULL;
  gpuhal_status_t s;
  if (!FAKE_CUDA_MISSING_REQUIRED[0]) TU_SKIP("built without the fixture libraries");
  s = gpuhal_driver_create(&o, &driver);
  TU_CHECK_EQ_INT(gpuhal_status_code(s), GPUHAL_STATUS_UNAVAILABLE);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "lacks 1 required symbol: 'cuMemAlloc' (cuMemAlloc_v2)");
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), FAKE_CUDA_MISSING_REQUIRED);
  gpuhal_status_free(s);
  TU_CHECK(driver == NULL);
}

TU_TEST(missing_optional_symbol_disables_its_feature) {
  gpuhal_driver_options_t o = options_for(FAKE_CUDA_MISSING_OPTIONAL);
  gpuhal_driver_t* driver = NULL;
  int count = -1;
  if (!FAKE_CUDA_MISSING_OPTIONAL[0]) TU_SKIP("built without the fixture libraries");
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK(!gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_MEMORY_POOLS));
  /* Everything else the fake exports is there. */
  TU_CHECK(gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_KERNEL_PARAM_INFO));
  TU_CHECK(gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_PEER_ACCESS));
  TU_CHECK(gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_CONTEXT_CREATE));
  TU_CHECK(!gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_NCCL));
  TU_CHECK(driver->cu.cuMemPoolCreate == NULL);
  TU_CHECK(driver->cu.cuMemAlloc != NULL);
  TU_CHECK(driver->cu.cuGetProcAddress == NULL); /* the fake is "pre-CUDA-12": dlsym path */
  TU_CHECK(strcmp(gpuhal_driver_cuda_library(driver), FAKE_CUDA_MISSING_OPTIONAL) == 0);
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  TU_CHECK_EQ_INT(count, 0);
  gpuhal_driver_release(driver);
}

/* The configured driver (softcuda in CI, the real one on a GPU machine) resolves every
 * required symbol, through cuGetProcAddress_v2 where it has one. */
TU_TEST(configured_driver_resolves_everything) {
  gpuhal_driver_t* driver = NULL;
  void* raw;
  gpuhal_status_t s = gpuhal_driver_create(NULL, &driver);
  if (gpuhal_status_code(s) == GPUHAL_STATUS_UNAVAILABLE && strstr(gpuhal_status_message(s), "could not load")) {
    gpuhal_status_free(s);
    TU_SKIP("no CUDA driver library here");
  }
  TU_REQUIRE_OK(s);
#define CHECK_REQUIRED(name, dlsym_name, version, params) TU_CHECK(driver->cu.name != NULL);
  GPUHAL_CUDA_REQUIRED_SYMBOLS(CHECK_REQUIRED)
#undef CHECK_REQUIRED
  raw = dlopen(gpuhal_driver_cuda_library(driver), RTLD_NOW | RTLD_NOLOAD);
  if (raw) {
    TU_CHECK((driver->cu.cuGetProcAddress != NULL) == (dlsym(raw, "cuGetProcAddress_v2") != NULL));
    dlclose(raw);
  }
  TU_CHECK(gpuhal_driver_cuda_library(driver)[0] != 0);
  gpuhal_driver_release(driver);
}

/* A missing NCCL is not an error: collectives are simply off. */
TU_TEST(missing_nccl_is_fine) {
  gpuhal__nccl_symbols_t nccl;
  void* handle = (void*)1;
  char loaded[64] = "x";
  TU_CHECK_OK(gpuhal__symbols_load_nccl("/nonexistent/libnccl.so.2", NULL, &nccl, &handle, loaded, sizeof(loaded)));
  TU_CHECK(handle == NULL);
  TU_CHECK(nccl.loaded == 0);
  TU_CHECK(nccl.ncclAllReduce == NULL);
  TU_CHECK(loaded[0] == 0);
  /* A library that is not NCCL is not used. */
  TU_CHECK_OK(gpuhal__symbols_load_nccl("libm.so.6", NULL, &nccl, &handle, loaded, sizeof(loaded)));
  TU_CHECK(handle == NULL);
  TU_CHECK(nccl.loaded == 0);
}

/* The optional-symbol log message reaches the logger. */
static int info_messages;
static void count_info(gpuhal_log_level_t level, const char* message, void* user) {
  (void)user;
  if (level == GPUHAL_LOG_INFO && strstr(message, "cuMemPoolCreate")) info_messages++;
}
TU_TEST(missing_optional_symbol_is_logged) {
  gpuhal_driver_options_t o = options_for(FAKE_CUDA_MISSING_OPTIONAL);
  gpuhal_driver_t* driver = NULL;
  (void)tu_softcuda;
  if (!FAKE_CUDA_MISSING_OPTIONAL[0]) TU_SKIP("built without the fixture libraries");
  o.log_level = GPUHAL_LOG_INFO;
  o.log_fn = count_info;
  info_messages = 0;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK_EQ_INT(info_messages, 1);
  gpuhal_driver_release(driver);
}

TU_MAIN(TU_CASE(explicit_missing_library_is_unavailable), TU_CASE(env_missing_library_is_unavailable),
        TU_CASE(default_names_are_tried), TU_CASE(not_a_cuda_library), TU_CASE(missing_required_symbol_is_named),
        TU_CASE(missing_optional_symbol_disables_its_feature), TU_CASE(configured_driver_resolves_everything),
        TU_CASE(missing_nccl_is_fine), TU_CASE(missing_optional_symbol_is_logged))
