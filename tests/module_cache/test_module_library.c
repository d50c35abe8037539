/* Load once for every device (module_library.c): one image used on every device is loaded
 * once per process (cuLibraryLoadData) and each device takes its module; the library
 * outlives the device that loaded it and is unloaded by the last holder; concurrent loads
 * of one image on many threads and devices load it once; a failed load is not kept;
 * params.modules_per_context loads a module per device instead. Each kernel is run and its
 * result checked on every device. The call counts are softcuda's (two devices); on a GPU
 * the same cases run on the devices there are. */
#include "test_internals.h"

#include "test_util.h"
#include "test_module_cache_util.h"

#define ML_MAX_DEVICES 4

typedef struct ml_devices {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device[ML_MAX_DEVICES];
  int count;
} ml_devices;

/* Up to ML_MAX_DEVICES devices (`params` may be NULL); 0 when there is none (skipped). */
static int ml_open(ml_devices* d, const gpuhal_device_params_t* params) {
  gpuhal_device_params_t p = mc_params("");
  int i;
  memset(d, 0, sizeof(*d));
  d->driver = mc_driver();
  if (!d->driver) {
    tu_state.skipped = 1;
    tu_state.skip_reason = "no CUDA device";
    return 0;
  }
  if (params) p = *params;
  d->count = mc_device_count(d->driver);
  if (d->count > ML_MAX_DEVICES) d->count = ML_MAX_DEVICES;
  for (i = 0; i < d->count; ++i) {
    d->device[i] = mc_device(d->driver, i, &p);
    if (!d->device[i]) {
      TU_FAIL_AT(__FILE__, __LINE__, "device %d", i);
      return 0;
    }
  }
  return 1;
}

static void ml_close(ml_devices* d) {
  int i;
  for (i = 0; i < d->count; ++i) gpuhal_device_release(d->device[i]);
  gpuhal_driver_release(d->driver);
  memset(d, 0, sizeof(*d));
}

TU_TEST(one_image_is_loaded_once_for_every_device) {
  ml_devices d;
  gpuhal_executable_t* exe[ML_MAX_DEVICES];
  unsigned long long loads, modules, unloads, shares = 0;
  int i;
  if (!ml_open(&d, NULL)) return;
  loads = mc_calls("cuLibraryLoadData");
  modules = mc_calls("cuLibraryGetModule");
  unloads = mc_calls("cuLibraryUnload");
  for (i = 0; i < d.count; ++i) {
    exe[i] = NULL;
    TU_CHECK_OK(mc_load(d.device[i], 7, 1, &exe[i]));
  }
  for (i = 0; i < d.count && !tu_state.failed; ++i) {
    TU_CHECK_OK(mc_run_check(d.device[i], exe[i], 7));
    shares += mc_stats(d.device[i]).library_shares;
  }
  TU_CHECK_EQ_INT(shares, d.count - 1);
  if (tu_softcuda()) {
    TU_CHECK_EQ_INT(mc_calls("cuLibraryLoadData") - loads, 1);
    TU_CHECK_EQ_INT(mc_calls("cuLibraryGetModule") - modules, d.count);
  }
  /* every device lets go: the last one unloads the library, once */
  for (i = 0; i < d.count; ++i) {
    gpuhal_executable_release(exe[i]);
    TU_CHECK_OK(gpuhal_device_module_cache_trim(d.device[i]));
    if (tu_softcuda()) TU_CHECK_EQ_INT(mc_calls("cuLibraryUnload") - unloads, i == d.count - 1 ? 1 : 0);
  }
  /* and a load after that loads it again */
  TU_CHECK_OK(mc_load(d.device[0], 7, 1, &exe[0]));
  TU_CHECK_OK(mc_run_check(d.device[0], exe[0], 7));
  if (tu_softcuda()) TU_CHECK_EQ_INT(mc_calls("cuLibraryLoadData") - loads, 2);
  gpuhal_executable_release(exe[0]);
  ml_close(&d);
  TU_CHECK_EQ_INT(mc_violations(), 0);
}

TU_TEST(a_library_outlives_the_device_that_loaded_it) {
  ml_devices d;
  gpuhal_executable_t *first = NULL, *second = NULL;
  unsigned long long unloads;
  if (!ml_open(&d, NULL)) return;
  if (d.count < 2) {
    ml_close(&d);
    TU_SKIP("needs two devices");
  }
  unloads = mc_calls("cuLibraryUnload");
  TU_CHECK_OK(mc_load(d.device[0], 9, 2, &first));
  TU_CHECK_OK(mc_load(d.device[1], 9, 2, &second));
  /* the device that loaded it goes, executable and all */
  gpuhal_executable_release(first);
  gpuhal_device_release(d.device[0]);
  d.device[0] = NULL;
  if (tu_softcuda()) TU_CHECK_EQ_INT(mc_calls("cuLibraryUnload") - unloads, 0);
  TU_CHECK_OK(mc_run_check(d.device[1], second, 9));
  gpuhal_executable_release(second);
  gpuhal_device_release(d.device[1]);
  d.device[1] = NULL;
  if (tu_softcuda()) TU_CHECK_EQ_INT(mc_calls("cuLibraryUnload") - unloads, 1);
  ml_close(&d);
  TU_CHECK_EQ_INT(mc_violations(), 0);
}

/* 16 threads, each loading the 8 images gen_add_0..7 on device (thread % count) in its own
 * order: every image is loaded once for the process. */
typedef struct ml_thread {
  ml_devices* d;
  int index;
  gpuhal_status_t st;
  gpuhal_executable_t* exe[8];
} ml_thread;

static void* ml_thread_main(void* arg) {
  ml_thread* t = (ml_thread*)arg;
  int j;
  for (j = 0; j < 8 && !t->st; ++j) {
    unsigned k = (unsigned)((j + t->index) % 8);
    t->st = mc_load(t->d->device[t->index % t->d->count], k, 3, &t->exe[k]);
  }
  return NULL;
}

TU_TEST(concurrent_loads_on_many_devices_load_each_image_once) {
  ml_devices d;
  ml_thread threads[16];
  pthread_t ids[16];
  unsigned long long loads;
  int i, k;
  if (!ml_open(&d, NULL)) return;
  loads = mc_calls("cuLibraryLoadData");
  memset(threads, 0, sizeof(threads));
  for (i = 0; i < 16; ++i) {
    threads[i].d = &d;
    threads[i].index = i;
    TU_REQUIRE(pthread_create(&ids[i], NULL, ml_thread_main, &threads[i]) == 0);
  }
  for (i = 0; i < 16; ++i) pthread_join(ids[i], NULL);
  for (i = 0; i < 16; ++i) {
    TU_CHECK_OK(threads[i].st);
    threads[i].st = NULL;
  }
  if (tu_softcuda()) TU_CHECK_EQ_INT(mc_calls("cuLibraryLoadData") - loads, 8);
  for (i = 0; i < d.count && !tu_state.failed; ++i)
    for (k = 0; k < 8; ++k) TU_CHECK_OK(mc_run_check(d.device[i], threads[i].exe[k], (unsigned)k));
  for (i = 0; i < 16; ++i)
    for (k = 0; k < 8; ++k) gpuhal_executable_release(threads[i].exe[k]);
  ml_close(&d);
}

/* Bad PTX: the error carries the JIT log; nothing is kept, the next load tries again. */
TU_TEST(a_failed_load_is_not_kept) {
  ml_devices d;
  gpuhal_executable_t* exe = NULL;
  char ptx[4096];
  unsigned long long loads;
  int n, i;
  if (!ml_open(&d, NULL)) return;
  n = gen_bad_ptx(5, ptx, sizeof(ptx));
  loads = mc_calls("cuLibraryLoadData");
  for (i = 0; i < 2; ++i) {
    gpuhal_status_t st = gpuhal_executable_load(d.device[i % d.count], ptx, (size_t)n, &exe);
    TU_CHECK(st != NULL);
    TU_CHECK(exe == NULL);
    if (st) TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "PTX");
    gpuhal_status_free(st);
  }
  if (tu_softcuda()) TU_CHECK_EQ_INT(mc_calls("cuLibraryLoadData") - loads, 2);
  ml_close(&d);
}

TU_TEST(modules_per_context_loads_a_module_per_device) {
  ml_devices d;
  gpuhal_device_params_t p = mc_params("");
  gpuhal_executable_t* exe[ML_MAX_DEVICES];
  unsigned long long loads, modules;
  int i;
  p.modules_per_context = 1;
  if (!ml_open(&d, &p)) return;
  loads = mc_calls("cuLibraryLoadData");
  modules = mc_calls("cuModuleLoadDataEx");
  for (i = 0; i < d.count; ++i) {
    exe[i] = NULL;
    TU_CHECK_OK(mc_load(d.device[i], 11, 4, &exe[i]));
    TU_CHECK_OK(mc_run_check(d.device[i], exe[i], 11));
    TU_CHECK_EQ_INT(mc_stats(d.device[i]).library_shares, 0);
  }
  if (tu_softcuda()) {
    TU_CHECK_EQ_INT(mc_calls("cuLibraryLoadData") - loads, 0);
    TU_CHECK_EQ_INT(mc_calls("cuModuleLoadDataEx") - modules, d.count);
  }
  for (i = 0; i < d.count; ++i) gpuhal_executable_release(exe[i]);
  ml_close(&d);
}

TU_MAIN(TU_CASE(one_image_is_loaded_once_for_every_device), TU_CASE(a_library_outlives_the_device_that_loaded_it),
        TU_CASE(concurrent_loads_on_many_devices_load_each_image_once), TU_CASE(a_failed_load_is_not_kept),
        TU_CASE(modules_per_context_loads_a_module_per_device))
