/* Driver and devices: count, info, create/release on each device, the worker thread, the
 * context rules (the caller's current context is never changed) and logging. Runs on
 * softcuda (2 devices by default) and unchanged on a real GPU. */
#include "test_internals.h"
#include "test_util.h"

#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the raw driver, for what gpuhal must not disturb ---- */
typedef struct raw_cuda_s {
  void* lib;
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext*);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
} raw_cuda_t;

#define RAW_SYM(raw, field, name) memcpy(&(raw)->field, &(void*){dlsym((raw)->lib, name)}, sizeof(void*))
static int raw_open(raw_cuda_t* raw) {
  const char* lib = getenv("GPUHAL_CUDA_LIBRARY");
  memset(raw, 0, sizeof(*raw));
  raw->lib = dlopen(lib && lib[0] ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!raw->lib) return 0;
  RAW_SYM(raw, cuInit, "cuInit");
  RAW_SYM(raw, cuDeviceGet, "cuDeviceGet");
  RAW_SYM(raw, cuCtxGetCurrent, "cuCtxGetCurrent");
  RAW_SYM(raw, cuCtxSetCurrent, "cuCtxSetCurrent");
  RAW_SYM(raw, cuCtxPushCurrent, "cuCtxPushCurrent_v2");
  RAW_SYM(raw, cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  RAW_SYM(raw, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  RAW_SYM(raw, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  return raw->cuInit && raw->cuCtxGetCurrent && raw->cuInit(0) == CUDA_SUCCESS;
}
static CUcontext raw_current(raw_cuda_t* raw) {
  CUcontext c = (CUcontext)(uintptr_t)0x1;
  raw->cuCtxGetCurrent(&c);
  return c;
}

/* softcuda's strictness counters (absent on a real driver). */
static unsigned long long softcuda_violations(void) {
  raw_cuda_t raw;
  unsigned long long (*q)(int) = NULL;
  void* p;
  if (!raw_open(&raw)) return 0;
  p = dlsym(raw.lib, "softcuda_query_violations");
  memcpy(&q, &p, sizeof(p));
  return q ? q(0) : 0;
}
static const char* softcuda_last_violation(void) {
  raw_cuda_t raw;
  const char* (*q)(void) = NULL;
  void* p;
  if (!raw_open(&raw)) return "";
  p = dlsym(raw.lib, "softcuda_query_last_violation");
  memcpy(&q, &p, sizeof(p));
  return q ? q() : "";
}

static gpuhal_driver_t* open_driver(void) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_status_t s = gpuhal_driver_create(NULL, &driver);
  if (s) {
    fprintf(stderr, "  driver: %s\n", gpuhal_status_message(s));
    gpuhal_status_free(s);
    return NULL;
  }
  return driver;
}

TU_TEST(count_and_info) {
  gpuhal_driver_t* driver = open_driver();
  gpuhal_device_info_t info[8];
  int count = 0, i, j;
  TU_REQUIRE(driver != NULL);
  TU_REQUIRE_OK(gpuhal_driver_device_count(driver, &count));
  if (count == 0) {
    gpuhal_driver_release(driver);
    TU_SKIP("no devices");
  }
  if (tu_softcuda()) TU_CHECK_EQ_INT(count, 2); /* softcuda's default */
  for (i = 0; i < count && i < 8; ++i) {
    gpuhal_device_info_t* d = &info[i];
    int nonzero = 0;
    TU_REQUIRE_OK(gpuhal_driver_device_info(driver, i, d));
    TU_CHECK_EQ_INT(d->ordinal, i);
    TU_CHECK(d->name[0] != 0);
    TU_CHECK(strchr(d->pci_bus_id, ':') != NULL);
    for (j = 0; j < 16; ++j) nonzero |= d->uuid[j];
    TU_CHECK(nonzero);
    TU_CHECK(d->compute_capability_major >= 3);
    TU_CHECK(d->compute_capability_minor >= 0);
    TU_CHECK(d->sm_count > 0);
    TU_CHECK(d->total_memory > 0);
    TU_CHECK(d->warp_size == 32);
    TU_CHECK(d->max_threads_per_block >= 64);
    for (j = 0; j < 3; ++j) TU_CHECK(d->max_block_dim[j] > 0 && d->max_grid_dim[j] > 0);
    TU_CHECK(d->max_shared_memory_per_block > 0);
    TU_CHECK(d->max_shared_memory_per_block_optin >= d->max_shared_memory_per_block);
    TU_CHECK(d->driver_version >= 12000);
    TU_CHECK(d->graphs_supported);
    TU_CHECK(d->unified_addressing);
    TU_CHECK(!d->memory_pools_supported || gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_MEMORY_POOLS));
  }
  /* Different devices have different identities. */
  for (i = 1; i < count && i < 8; ++i) TU_CHECK(memcmp(info[0].uuid, info[i].uuid, 16) != 0);
  gpuhal_driver_release(driver);
}

TU_TEST(create_and_release_each_device) {
  gpuhal_driver_t* driver = open_driver();
  int count = 0, i;
  TU_REQUIRE(driver != NULL);
  TU_REQUIRE_OK(gpuhal_driver_device_count(driver, &count));
  if (count == 0) {
    gpuhal_driver_release(driver);
    TU_SKIP("no devices");
  }
  for (i = 0; i < count; ++i) {
    gpuhal_device_t* device = NULL;
    gpuhal_device_info_t a, b;
    gpuhal_device_params_t params;
    TU_REQUIRE_OK(gpuhal_device_create(driver, i, NULL, &device));
    TU_CHECK(gpuhal_device_driver(device) == driver);
    TU_CHECK_EQ_INT(gpuhal_device_queue_count(device), 1);
    TU_CHECK_OK(gpuhal_device_info(device, &a));
    TU_CHECK_OK(gpuhal_driver_device_info(driver, i, &b));
    TU_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    TU_CHECK(device->context != NULL);
    TU_CHECK(device->streams[0] != NULL);
    TU_CHECK((device->memory && device->memory->pool != NULL) == (a.memory_pools_supported != 0));
    gpuhal_device_retain(device);
    gpuhal_device_release(device);
    gpuhal_device_release(device);
    /* Several queues, and two devices open on the same GPU at once. */
    memset(&params, 0, sizeof(params));
    params.queue_count = 3;
    TU_REQUIRE_OK(gpuhal_device_create(driver, i, &params, &device));
    TU_CHECK_EQ_INT(gpuhal_device_queue_count(device), 3);
    TU_CHECK(device->streams[0] && device->streams[1] && device->streams[2]);
    TU_CHECK(device->streams[0] != device->streams[1]);
    {
      gpuhal_device_t* second = NULL;
      TU_CHECK_OK(gpuhal_device_create(driver, i, NULL, &second));
      TU_CHECK(second && second->context == device->context); /* both hold the primary context */
      gpuhal_device_release(second);
    }
    gpuhal_device_release(device);
  }
  /* The device retains the driver: releasing the driver first is fine. */
  {
    gpuhal_device_t* device = NULL;
    TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
    gpuhal_driver_release(driver);
    TU_CHECK_EQ_INT(gpuhal_device_queue_count(device), 1);
    gpuhal_device_release(device);
  }
  TU_CHECK_EQ_INT(softcuda_violations(), 0);
}

/* The caller's current context, whatever it is, is the same after every gpuhal call. */
static void check_context_kept(raw_cuda_t* raw, CUcontext expected) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_device_info_t info;
  int count = 0, last;
  unsigned char bytes[64] = {1, 2, 3};
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_CHECK(raw_current(raw) == expected);
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  last = count - 1;
  TU_CHECK_OK(gpuhal_driver_device_info(driver, 0, &info));
  TU_CHECK(raw_current(raw) == expected);
  TU_CHECK_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_CHECK(raw_current(raw) == expected);
  if (device) {
    int kind;
    for (kind = 0; kind <= 2; ++kind) {
      if (kind == GPUHAL_MEMORY_MANAGED && !device->info.managed_memory) continue;
      TU_CHECK_OK(gpuhal_buffer_allocate(device, (gpuhal_memory_kind_t)kind, sizeof(bytes), &buffer));
      TU_CHECK(raw_current(raw) == expected);
      TU_CHECK_OK(gpuhal_buffer_write(buffer, 0, bytes, sizeof(bytes)));
      TU_CHECK(raw_current(raw) == expected);
      TU_CHECK_OK(gpuhal_buffer_read(buffer, 0, bytes, sizeof(bytes)));
      TU_CHECK(raw_current(raw) == expected);
      gpuhal_buffer_release(buffer);
      TU_CHECK(raw_current(raw) == expected);
    }
  }
  gpuhal_device_release(device);
  TU_CHECK(raw_current(raw) == expected);
  if (last > 0) {
    TU_CHECK_OK(gpuhal_device_create(driver, last, NULL, &device));
    TU_CHECK(raw_current(raw) == expected);
    gpuhal_device_release(device);
    TU_CHECK(raw_current(raw) == expected);
  }
  gpuhal_driver_release(driver);
  TU_CHECK(raw_current(raw) == expected);
}

TU_TEST(caller_context_is_never_changed) {
  raw_cuda_t raw;
  CUdevice dev = 0;
  CUcontext mine = NULL;
  int count = 0;
  gpuhal_driver_t* driver = open_driver();
  if (!driver || !raw_open(&raw)) {
    gpuhal_driver_release(driver);
    TU_SKIP("no driver");
  }
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  gpuhal_driver_release(driver);
  if (count == 0) TU_SKIP("no devices");
  /* No current context. */
  TU_REQUIRE(raw.cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
  check_context_kept(&raw, NULL);
  /* Someone else's context: the last device's primary context (on a one-GPU machine,
   * device 0's own, which gpuhal must then use without pushing). */
  TU_REQUIRE(raw.cuDeviceGet(&dev, count - 1) == CUDA_SUCCESS);
  TU_REQUIRE(raw.cuDevicePrimaryCtxRetain(&mine, dev) == CUDA_SUCCESS);
  TU_REQUIRE(raw.cuCtxSetCurrent(mine) == CUDA_SUCCESS);
  check_context_kept(&raw, mine);
  TU_CHECK(raw.cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
  TU_CHECK(raw.cuDevicePrimaryCtxRelease(dev) == CUDA_SUCCESS);
  TU_CHECK_EQ_INT(softcuda_violations(), 0);
}

/* A failed cuCtxPopCurrent as gpuhal leaves its context: the pop is tried again, never
 * replaced by cuCtxSetCurrent(the caller's), which once left an application's stack [A] as
 * [A, A] (its own pop then found A again instead of nothing). */
TU_TEST(failed_pop_keeps_the_callers_stack_depth) {
  raw_cuda_t raw;
  CUdevice dev = 0;
  CUcontext mine = NULL, popped = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_buffer_t* buffer = NULL;
  int count = 0;
  uint32_t data[4] = {1, 2, 3, 4};
  gpuhal_driver_t* driver = open_driver();
  if (!tu_softcuda() || !driver || !raw_open(&raw)) {
    gpuhal_driver_release(driver);
    TU_SKIP("needs softcuda's fault injection");
  }
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  if (count < 2) {
    gpuhal_driver_release(driver);
    TU_SKIP("needs 2 devices (the application's context is device 1's)");
  }
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(data), &buffer));
  TU_REQUIRE(raw.cuDeviceGet(&dev, 1) == CUDA_SUCCESS);
  TU_REQUIRE(raw.cuDevicePrimaryCtxRetain(&mine, dev) == CUDA_SUCCESS);
  TU_REQUIRE(raw.cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
  TU_REQUIRE(raw_current(&raw) == NULL);
  TU_REQUIRE(raw.cuCtxPushCurrent(mine) == CUDA_SUCCESS); /* the application's stack: [mine] */
  TU_REQUIRE(tu_softcuda_faults("cuCtxPopCurrent@1=CUDA_ERROR_INVALID_CONTEXT") == 0);
  TU_CHECK_OK(gpuhal_buffer_write(buffer, 0, data, sizeof(data)));
  tu_softcuda_faults(NULL);
  TU_CHECK(raw_current(&raw) == mine);
  TU_CHECK(raw.cuCtxPopCurrent(&popped) == CUDA_SUCCESS && popped == mine);
  TU_CHECK(raw_current(&raw) == NULL); /* [mine, mine] before: mine again */
  TU_CHECK(raw.cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
  gpuhal_buffer_release(buffer);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  TU_CHECK(raw.cuDevicePrimaryCtxRelease(dev) == CUDA_SUCCESS);
}

/* ---- the worker ---- */
typedef struct worker_probe_s {
  gpuhal_device_t* device;
  int on_worker;
  CUcontext current;
} worker_probe_t;
static gpuhal_status_t probe_worker(void* arg) {
  worker_probe_t* p = (worker_probe_t*)arg;
  p->on_worker = gpuhal__on_worker(p->device);
  p->current = NULL;
  return GPUHAL__CU(p->device->cu, cuCtxGetCurrent, (&p->current));
}
static gpuhal_status_t fail_on_worker(void* arg) {
  (void)arg;
  return gpuhal_status_make(GPUHAL_STATUS_ABORTED, "from the worker");
}

typedef struct gate_task_s {
  gpuhal__task_t task;
  gpuhal__mutex_t mutex;
  gpuhal__cond_t cond;
  int open;
  int entered;
} gate_task_t;
static void gate_run(gpuhal__task_t* task) {
  gate_task_t* g = GPUHAL__CONTAINER_OF(task, gate_task_t, task);
  gpuhal__mutex_lock(&g->mutex);
  g->entered = 1;
  gpuhal__cond_broadcast(&g->cond);
  while (!g->open) gpuhal__cond_wait(&g->cond, &g->mutex);
  gpuhal__mutex_unlock(&g->mutex);
}
typedef struct record_task_s {
  gpuhal__task_t task;
  int id;
} record_task_t;
static int record_log[16];
static int record_count;
static void record_run(gpuhal__task_t* task) {
  record_task_t* r = GPUHAL__CONTAINER_OF(task, record_task_t, task);
  if (record_count < 16) record_log[record_count++] = r->id;
}

TU_TEST(worker_runs_tasks_in_order_on_the_context) {
  gpuhal_driver_t* driver = open_driver();
  gpuhal_device_t* device = NULL;
  worker_probe_t probe;
  gate_task_t gate;
  record_task_t a, b;
  int count = 0;
  TU_REQUIRE(driver != NULL);
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  if (count == 0) {
    gpuhal_driver_release(driver);
    TU_SKIP("no devices");
  }
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  memset(&probe, 0, sizeof(probe));
  probe.device = device;
  TU_CHECK_OK(gpuhal__worker_call(device, probe_worker, &probe));
  TU_CHECK(probe.on_worker);
  TU_CHECK(probe.current == device->context);
  TU_CHECK(!gpuhal__on_worker(device));
  TU_CHECK_STATUS(gpuhal__worker_call(device, fail_on_worker, NULL), GPUHAL_STATUS_ABORTED, "from the worker");

  /* Hold the worker in a gate task, queue b, a, a (a twice: queued once), then open. */
  memset(&gate, 0, sizeof(gate));
  gpuhal__mutex_init(&gate.mutex);
  gpuhal__cond_init(&gate.cond);
  gate.task.fn = gate_run;
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  a.task.fn = record_run;
  a.id = 1;
  b.task.fn = record_run;
  b.id = 2;
  record_count = 0;
  gpuhal__worker_post(device, &gate.task);
  gpuhal__mutex_lock(&gate.mutex);
  while (!gate.entered) gpuhal__cond_wait(&gate.cond, &gate.mutex);
  gpuhal__mutex_unlock(&gate.mutex);
  gpuhal__worker_post(device, &b.task);
  gpuhal__worker_post(device, &a.task);
  gpuhal__worker_post(device, &a.task);
  gpuhal__mutex_lock(&gate.mutex);
  gate.open = 1;
  gpuhal__cond_broadcast(&gate.cond);
  gpuhal__mutex_unlock(&gate.mutex);
  TU_CHECK_OK(gpuhal__worker_call(device, probe_worker, &probe)); /* FIFO: runs after them */
  TU_CHECK_EQ_INT(record_count, 2);
  TU_CHECK_EQ_INT(record_log[0], 2);
  TU_CHECK_EQ_INT(record_log[1], 1);
  /* Once run, a task may be posted again. */
  gpuhal__worker_post(device, &a.task);
  TU_CHECK_OK(gpuhal__worker_call(device, probe_worker, &probe));
  TU_CHECK_EQ_INT(record_count, 3);
  gpuhal__cond_destroy(&gate.cond);
  gpuhal__mutex_destroy(&gate.mutex);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

/* context_enter pushes only when needed and leave restores exactly. */
TU_TEST(context_scope) {
  raw_cuda_t raw;
  gpuhal_driver_t* driver = open_driver();
  gpuhal_device_t* device = NULL;
  gpuhal__context_scope_t outer, inner;
  int count = 0;
  if (!driver || !raw_open(&raw)) {
    gpuhal_driver_release(driver);
    TU_SKIP("no driver");
  }
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  if (count == 0) {
    gpuhal_driver_release(driver);
    TU_SKIP("no devices");
  }
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_REQUIRE(raw.cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
  TU_REQUIRE_OK(gpuhal__context_enter(device, &outer));
  TU_CHECK(outer.pushed == 1);
  TU_CHECK(raw_current(&raw) == device->context);
  TU_REQUIRE_OK(gpuhal__context_enter(device, &inner)); /* already current: no push */
  TU_CHECK(inner.pushed == 0);
  gpuhal__context_leave(device, &inner);
  TU_CHECK(raw_current(&raw) == device->context);
  gpuhal__context_leave(device, &outer);
  TU_CHECK(raw_current(&raw) == NULL);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

/* The last release may happen on the worker itself (a task dropping the last buffer of a
 * released device): the teardown must not deadlock. */
typedef struct release_task_s {
  gpuhal__task_t task;
  gpuhal_device_t* device;
} release_task_t;
static void release_run(gpuhal__task_t* task) {
  release_task_t* r = GPUHAL__CONTAINER_OF(task, release_task_t, task);
  gpuhal_device_release(r->device);
}
TU_TEST(last_release_on_the_worker) {
  gpuhal_driver_t* driver = open_driver();
  gpuhal_device_t* device = NULL;
  release_task_t* task;
  int count = 0, i;
  TU_REQUIRE(driver != NULL);
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  if (count == 0) {
    gpuhal_driver_release(driver);
    TU_SKIP("no devices");
  }
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  task = (release_task_t*)calloc(1, sizeof(*task)); /* outlives this frame's use by the worker */
  task->task.fn = release_run;
  task->device = device;
  TU_CHECK_EQ_INT(driver->header.refcount, 2);
  gpuhal__worker_post(device, &task->task);
  /* The teardown thread releases the device's reference to the driver when done. */
  for (i = 0; i < 5000 && gpuhal__atomic_load(&driver->header.refcount) != 1; ++i) tu_sleep_ns(1000000);
  TU_CHECK_EQ_INT(gpuhal__atomic_load(&driver->header.refcount), 1);
  free(task);
  gpuhal_driver_release(driver);
}

/* ---- logging ---- */
static int log_counts[5];
static int log_mentions_device;
static void collect_log(gpuhal_log_level_t level, const char* message, void* user) {
  if ((int)level >= 0 && (int)level < 5) log_counts[level]++;
  if (strstr(message, "device 0")) log_mentions_device = 1;
  *(int*)user += 1;
}

TU_TEST(logger_callback_receives_messages) {
  gpuhal_driver_options_t o;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  int calls = 0, count = 0;
  memset(&o, 0, sizeof(o));
  memset(log_counts, 0, sizeof(log_counts));
  log_mentions_device = 0;
  o.log_level = GPUHAL_LOG_DEBUG;
  o.log_fn = collect_log;
  o.log_user = &calls;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK(calls > 0);
  TU_CHECK(log_counts[GPUHAL_LOG_INFO] > 0); /* the driver summary */
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  if (count > 0) {
    TU_CHECK_OK(gpuhal_device_create(driver, 0, NULL, &device));
    gpuhal_device_release(device);
    TU_CHECK(log_mentions_device);
  }
  gpuhal_driver_release(driver);
}

/* A stream destroy that fails leaks the stream: like every failed destroy, it is logged. The
 * streams made and destroyed to grow the context's store (memop path) were not. The
 * wrapper destroys the stream and then reports a failure, so nothing leaks here. */
static gpuhal_PFN_cuStreamDestroy destroy_orig;
static int destroy_failures;
static CUresult CUDAAPI destroy_failing_once(CUstream stream) {
  CUresult r = destroy_orig(stream);
  if (r == CUDA_SUCCESS && __atomic_fetch_add(&destroy_failures, 1, __ATOMIC_SEQ_CST) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  return r;
}
static int destroy_logged;
static void collect_destroy_log(gpuhal_log_level_t level, const char* message, void* user) {
  (void)user;
  if (level == GPUHAL_LOG_ERROR && strstr(message, "cuStreamDestroy") && strstr(message, "CUDA_ERROR_INVALID_VALUE"))
    destroy_logged++;
}

TU_TEST(failed_stream_destroy_is_logged) {
  gpuhal_driver_options_t o;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  int count = 0;
  memset(&o, 0, sizeof(o));
  o.log_fn = collect_destroy_log;
  destroy_logged = destroy_failures = 0;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  if (count == 0 || !driver->memops) {
    gpuhal_driver_release(driver);
    TU_SKIP("no device with 64-bit stream memory operations");
  }
  destroy_orig = driver->cu.cuStreamDestroy;
  driver->cu.cuStreamDestroy = destroy_failing_once;
  TU_CHECK_OK(gpuhal_device_create(driver, 0, NULL, &device)); /* grows the store: destroys */
  TU_CHECK(destroy_failures > 0);
  TU_CHECK_EQ_INT(destroy_logged, 1);
  gpuhal_device_release(device);
  driver->cu.cuStreamDestroy = destroy_orig;
  gpuhal_driver_release(driver);
}

TU_TEST(log_level_from_environment) {
  gpuhal_driver_options_t o;
  gpuhal_driver_t* driver = NULL;
  int calls = 0;
  const char* saved = getenv("GPUHAL_LOG");
  char* copy = saved ? strdup(saved) : NULL;
  memset(&o, 0, sizeof(o));
  o.log_fn = collect_log;
  o.log_user = &calls;
  setenv("GPUHAL_LOG", "debug", 1);
  memset(log_counts, 0, sizeof(log_counts));
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK_EQ_INT(driver->logger.level, GPUHAL_LOG_DEBUG);
  TU_CHECK(log_counts[GPUHAL_LOG_INFO] + log_counts[GPUHAL_LOG_DEBUG] > 0);
  gpuhal_driver_release(driver);
  setenv("GPUHAL_LOG", "error", 1);
  memset(log_counts, 0, sizeof(log_counts));
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK_EQ_INT(driver->logger.level, GPUHAL_LOG_ERROR);
  TU_CHECK_EQ_INT(log_counts[GPUHAL_LOG_INFO] + log_counts[GPUHAL_LOG_DEBUG], 0);
  gpuhal_driver_release(driver);
  /* An explicit level wins over the environment. */
  o.log_level = GPUHAL_LOG_INFO;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK_EQ_INT(driver->logger.level, GPUHAL_LOG_INFO);
  gpuhal_driver_release(driver);
  unsetenv("GPUHAL_LOG");
  o.log_level = GPUHAL_LOG_NONE;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK_EQ_INT(driver->logger.level, GPUHAL_LOG_WARN); /* the default */
  gpuhal_driver_release(driver);
  if (copy) {
    setenv("GPUHAL_LOG", copy, 1);
    free(copy);
  }
}

/* Environment values gpuhal does not recognise are logged, naming the variable, the value
 * and what is used instead (they used to be ignored silently); level names are taken in
 * any case. */
static char env_warning[512];
static void collect_env_warning(gpuhal_log_level_t level, const char* message, void* user) {
  (void)user;
  if (level == GPUHAL_LOG_WARN && strstr(message, "GPUHAL_")) snprintf(env_warning, sizeof(env_warning), "%s", message);
}

TU_TEST(unrecognised_environment_values_warn) {
  gpuhal_driver_options_t o;
  gpuhal_driver_t* driver = NULL;
  const char* saved_log = getenv("GPUHAL_LOG");
  const char* saved_memops = getenv("GPUHAL_SEMAPHORE_MEMOPS");
  char* copy_log = saved_log ? strdup(saved_log) : NULL;
  char* copy_memops = saved_memops ? strdup(saved_memops) : NULL;
  memset(&o, 0, sizeof(o));
  o.log_fn = collect_env_warning;
  setenv("GPUHAL_LOG", "verbose", 1);
  env_warning[0] = 0;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK_EQ_INT(driver->logger.level, GPUHAL_LOG_WARN);
  TU_CHECK_STR_CONTAINS(env_warning, "GPUHAL_LOG='verbose'");
  TU_CHECK_STR_CONTAINS(env_warning, "using warn");
  gpuhal_driver_release(driver);
  setenv("GPUHAL_LOG", "DEBUG", 1);
  env_warning[0] = 0;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK_EQ_INT(driver->logger.level, GPUHAL_LOG_DEBUG);
  TU_CHECK_EQ_INT((int)strlen(env_warning), 0);
  gpuhal_driver_release(driver);
  unsetenv("GPUHAL_LOG");
  setenv("GPUHAL_SEMAPHORE_MEMOPS", "off", 1);
  env_warning[0] = 0;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK_STR_CONTAINS(env_warning, "GPUHAL_SEMAPHORE_MEMOPS='off'");
  TU_CHECK_STR_CONTAINS(env_warning, "ignored");
  gpuhal_driver_release(driver);
  setenv("GPUHAL_SEMAPHORE_MEMOPS", "0", 1);
  env_warning[0] = 0;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK_EQ_INT((int)strlen(env_warning), 0);
  TU_CHECK_EQ_INT(gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS), 0);
  gpuhal_driver_release(driver);
  if (copy_memops)
    setenv("GPUHAL_SEMAPHORE_MEMOPS", copy_memops, 1);
  else
    unsetenv("GPUHAL_SEMAPHORE_MEMOPS");
  if (copy_log) setenv("GPUHAL_LOG", copy_log, 1);
  free(copy_memops);
  free(copy_log);
}

/* A user allocator sees every allocation gpuhal makes for the driver and its devices. */
static long live_allocations;
static void* counting_alloc(size_t size, void* user) {
  (void)user;
  live_allocations++;
  return malloc(size);
}
static void counting_free(void* p, void* user) {
  (void)user;
  if (p) live_allocations--;
  free(p);
}
TU_TEST(user_allocator) {
  gpuhal_driver_options_t o;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  int count = 0;
  memset(&o, 0, sizeof(o));
  o.allocator.alloc = counting_alloc;
  o.allocator.free = counting_free;
  live_allocations = 0;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK(live_allocations >= 1);
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  if (count > 0) {
    TU_CHECK_OK(gpuhal_device_create(driver, 0, NULL, &device));
    gpuhal_device_release(device);
  }
  gpuhal_driver_release(driver);
  TU_CHECK_EQ_INT(live_allocations, 0);
}

/* Growing the context's store is best effort: when its array of streams cannot be
 * allocated it says so and frees the status (which leaked). The allocator fails only
 * that array, picked by its size (QD_ROOM_STREAMS streams). */
#define QD_ROOM_STREAMS 777
static int room_grow_warned;
static void collect_room_log(gpuhal_log_level_t level, const char* message, void* user) {
  (void)user;
  if (level == GPUHAL_LOG_WARN && strstr(message, "growing the context's store") && strstr(message, "room streams"))
    room_grow_warned++;
}
static void* room_failing_alloc(size_t size, void* user) {
  (void)user;
  return size == sizeof(CUstream) * QD_ROOM_STREAMS ? NULL : malloc(size);
}
static void room_failing_free(void* p, void* user) {
  (void)user;
  free(p);
}
TU_TEST(room_grow_out_of_memory_frees_its_status) {
  gpuhal_driver_options_t o;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal__context_scope_t scope;
  gpuhal__ordinal_t* ordinal;
  int32_t room;
  memset(&o, 0, sizeof(o));
  o.allocator.alloc = room_failing_alloc;
  o.allocator.free = room_failing_free;
  o.log_fn = collect_room_log;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_CHECK_OK(gpuhal_device_create(driver, 0, NULL, &device));
  if (device) {
    ordinal = &driver->ordinals[device->ordinal];
    room = gpuhal__atomic_load(&ordinal->room);
    room_grow_warned = 0;
    TU_CHECK_OK(gpuhal__context_enter(device, &scope));
    gpuhal__device_room_grow(device, ordinal, gpuhal__atomic_load(&ordinal->room_live) + QD_ROOM_STREAMS);
    gpuhal__context_leave(device, &scope);
    TU_CHECK_EQ_INT(room_grow_warned, 1);
    TU_CHECK_EQ_INT(gpuhal__atomic_load(&ordinal->room), room);
    gpuhal_device_release(device);
  }
  gpuhal_driver_release(driver);
}

/* Tuning fields past their documented bounds are refused, naming the field (they were
 * taken: a host wait spin of INT64_MAX overflowed its end time, a completion age of
 * INT64_MAX the action's deadline, park_headroom 2^30 doubled to a negative count, and a
 * large one made twice that many streams). A time of exactly the bound is taken. */
static gpuhal_status_t tuning_create(gpuhal_driver_t* driver, const gpuhal_queue_tuning_t* tuning) {
  gpuhal_device_params_t params;
  gpuhal_device_t* device = NULL;
  gpuhal_status_t status;
  memset(&params, 0, sizeof(params));
  params.tuning = *tuning;
  status = gpuhal_device_create(driver, 0, &params, &device);
  gpuhal_device_release(device);
  return status;
}

/* A tuning field by name and place: a time (int64_t) or a count (int32_t) by its size. */
typedef struct tuning_field_s {
  const char* name;
  size_t offset, size;
} tuning_field_t;
#define TUNING_FIELD(f) \
  { #f, offsetof(gpuhal_queue_tuning_t, f), sizeof(((gpuhal_queue_tuning_t*)0)->f) }

/* The field set to `value` (the others zero): the device is refused, naming the field. */
static void tuning_refused(gpuhal_driver_t* driver, const tuning_field_t* field, int64_t value) {
  gpuhal_queue_tuning_t t;
  int32_t count = (int32_t)value;
  char buffer[96];
  const char* needle = buffer; /* a pointer: TU_CHECK_STATUS tests it for NULL */
  memset(&t, 0, sizeof(t));
  memcpy((char*)&t + field->offset, field->size == sizeof(value) ? (const void*)&value : (const void*)&count,
         field->size);
  snprintf(buffer, sizeof(buffer), "params->tuning.%s", field->name);
  TU_CHECK_STATUS(tuning_create(driver, &t), GPUHAL_STATUS_OUT_OF_RANGE, needle);
}

TU_TEST(tuning_bounds_are_checked) {
  static const tuning_field_t fields[] = {TUNING_FIELD(host_wait_spin_ns),     TUNING_FIELD(host_wait_max_sleep_ns),
                                          TUNING_FIELD(completion_min_age_ns), TUNING_FIELD(completion_max_sleep_ns),
                                          TUNING_FIELD(load_parked_wait_ns),   TUNING_FIELD(harvest_min),
                                          TUNING_FIELD(gpu_parked_max),        TUNING_FIELD(park_headroom),
                                          TUNING_FIELD(graph_instances_max),   TUNING_FIELD(queue_entries_max)};
  gpuhal_driver_t* driver = NULL;
  gpuhal_queue_tuning_t t;
  size_t i;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  for (i = 0; i < sizeof(fields) / sizeof(fields[0]); ++i) {
    int is_time = fields[i].size == sizeof(int64_t);
    tuning_refused(driver, &fields[i], is_time ? INT64_MAX : 1 << 30);
    tuning_refused(driver, &fields[i], is_time ? GPUHAL_TUNING_TIME_MAX_NS + 1 : INT32_MAX);
  }
  /* At the bounds (times; the counts at a modest value: 4096 of park_headroom is 8192
   * streams), and negative ("none"), a device is made. */
  memset(&t, 0, sizeof(t));
  t.host_wait_max_sleep_ns = GPUHAL_TUNING_TIME_MAX_NS;
  t.completion_min_age_ns = GPUHAL_TUNING_TIME_MAX_NS;
  t.load_parked_wait_ns = GPUHAL_TUNING_TIME_MAX_NS;
  t.host_wait_spin_ns = -1;
  t.harvest_min = GPUHAL_TUNING_COUNT_MAX;
  t.graph_instances_max = GPUHAL_TUNING_COUNT_MAX;
  t.queue_entries_max = GPUHAL_TUNING_COUNT_MAX;
  t.park_headroom = 8;
  TU_CHECK_OK(tuning_create(driver, &t));
  gpuhal_driver_release(driver);
}

/* A child forked after the driver was made has none of gpuhal's threads: a call that would
 * wait for the device's worker fails there (FAILED_PRECONDITION, "created in another
 * process") and the releases return at once, leaving the objects (they waited forever for
 * the worker). The parent's driver and device are untouched and work on. */
static void fork_quiet_log(gpuhal_log_level_t level, const char* message, void* user) {
  (void)level;
  (void)message;
  (void)user;
}
static gpuhal_status_t fork_noop(void* arg) {
  (void)arg;
  return NULL;
}
static int fork_child(gpuhal_driver_t* driver, gpuhal_device_t* device) {
  gpuhal_status_t status;
  int ok;
  alarm(10); /* a hang ends the child, which the parent sees */
  status = gpuhal__worker_call(device, fork_noop, NULL);
  ok = gpuhal_status_code(status) == GPUHAL_STATUS_FAILED_PRECONDITION &&
       strstr(gpuhal_status_message(status), "created in another process (fork)") != NULL;
  gpuhal_status_free(status);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  return ok ? 0 : 1;
}
TU_TEST(forked_child_does_not_wait_for_gpuhal_threads) {
  gpuhal_driver_options_t o;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  int64_t deadline;
  int wstatus = 0, code = -1;
  pid_t child, r;
  memset(&o, 0, sizeof(o));
  o.log_fn = fork_quiet_log; /* the child's releases log errors: kept quiet */
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &driver));
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  fflush(stdout);
  fflush(stderr);
  child = fork();
  TU_REQUIRE(child >= 0);
  if (child == 0) _exit(fork_child(driver, device));
  deadline = gpuhal_now_ns() + 30ll * 1000000000ll;
  while ((r = waitpid(child, &wstatus, WNOHANG)) == 0 && gpuhal_now_ns() < deadline) tu_sleep_ns(5000000);
  if (r == 0) {
    kill(child, SIGKILL);
    waitpid(child, &wstatus, 0);
  }
  if (r == child) code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  TU_CHECK_EQ_INT(code, 0);
  TU_CHECK_OK(gpuhal__worker_call(device, fork_noop, NULL)); /* the parent's worker is there */
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

/* Driver errors during creation name the call and leave nothing behind (softcuda only). */
TU_TEST(creation_failures_clean_up) {
  raw_cuda_t raw;
  size_t (*leak_report)(int) = NULL;
  void* p;
  gpuhal_driver_t* driver;
  gpuhal_device_t* device = NULL;
  size_t leaks_before;
  static const char* const faults[][2] = {
      {"cuDevicePrimaryCtxRetain@1=CUDA_ERROR_OUT_OF_MEMORY", "cuDevicePrimaryCtxRetain"},
      {"cuStreamCreate@1=CUDA_ERROR_OUT_OF_MEMORY", "cuStreamCreate"},
      {"cuCtxSetCurrent@1=CUDA_ERROR_INVALID_CONTEXT", "cuCtxSetCurrent"},
      {"cuDeviceGetName@1=CUDA_ERROR_INVALID_DEVICE", "cuDeviceGetName"}};
  size_t i;
  if (!tu_softcuda() || !raw_open(&raw)) TU_SKIP("needs softcuda's fault injection");
  p = dlsym(raw.lib, "softcuda_leak_report");
  memcpy(&leak_report, &p, sizeof(p));
  TU_REQUIRE(leak_report != NULL);
  driver = open_driver();
  TU_REQUIRE(driver != NULL);
  leaks_before = leak_report(0);
  for (i = 0; i < sizeof(faults) / sizeof(faults[0]); ++i) {
    gpuhal_status_t s;
    TU_REQUIRE(tu_softcuda_faults(faults[i][0]) == 0);
    s = gpuhal_device_create(driver, 0, NULL, &device);
    tu_softcuda_faults(NULL);
    TU_CHECK(s != NULL);
    TU_CHECK(device == NULL);
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), faults[i][1]);
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "creating device 0");
    gpuhal_status_free(s);
    TU_CHECK_EQ_INT(leak_report(0), leaks_before);
  }
  TU_CHECK_EQ_INT(driver->header.refcount, 1);
  /* And it still works afterwards. */
  TU_CHECK_OK(gpuhal_device_create(driver, 0, NULL, &device));
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  if (softcuda_violations()) fprintf(stderr, "  last violation: %s\n", softcuda_last_violation());
}

TU_MAIN(TU_CASE(count_and_info), TU_CASE(create_and_release_each_device), TU_CASE(caller_context_is_never_changed),
        TU_CASE(worker_runs_tasks_in_order_on_the_context), TU_CASE(context_scope), TU_CASE(last_release_on_the_worker),
        TU_CASE(logger_callback_receives_messages), TU_CASE(failed_stream_destroy_is_logged),
        TU_CASE(log_level_from_environment), TU_CASE(unrecognised_environment_values_warn), TU_CASE(user_allocator),
        TU_CASE(room_grow_out_of_memory_frees_its_status), TU_CASE(tuning_bounds_are_checked),
        TU_CASE(forked_child_does_not_wait_for_gpuhal_threads), TU_CASE(creation_failures_clean_up),
        TU_CASE(failed_pop_keeps_the_callers_stack_depth))
