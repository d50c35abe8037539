/* device: the driver (libraries, enumeration, info) and devices (primary context, worker
 * thread, streams, CUDA's store of streams and executables, subsystems) (device.h). */
#include "device.h"
#include "status.h"

#include <unistd.h> /* getcwd */

/* The device whose worker this thread is (NULL: not a worker). */
static GPUHAL__THREAD_LOCAL gpuhal_device_t* gpuhal__worker_self = NULL;

GPUHAL__PRIVATE int gpuhal__on_worker(gpuhal_device_t* device) {
  return device->worker.started && gpuhal__thread_is_current(device->worker.thread);
}

GPUHAL__PRIVATE int gpuhal__on_other_worker(gpuhal_device_t* device) {
  return gpuhal__worker_self != NULL && gpuhal__worker_self != device;
}

GPUHAL__PRIVATE void gpuhal__worker_post(gpuhal_device_t* device, gpuhal__task_t* task) {
  gpuhal__worker_t* w = &device->worker;
  gpuhal__mutex_lock(&w->mutex);
  if (!task->queued) {
    task->queued = 1;
    gpuhal__list_push_back(&w->tasks, &task->node);
    gpuhal__cond_signal(&w->cond);
  }
  gpuhal__mutex_unlock(&w->mutex);
}

typedef struct gpuhal__worker_call_s {
  gpuhal__task_t task;
  gpuhal_device_t* device;
  gpuhal_status_t (*fn)(void* arg);
  void* arg;
  gpuhal_status_t status;
  int done;
} gpuhal__worker_call_t;

GPUHAL__PRIVATE gpuhal_status_t gpuhal__driver_check_process(const gpuhal_driver_t* driver, const char* what) {
  if ((long)getpid() == driver->creator_pid) return NULL;
  return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                            "%s: the driver was created in another process (fork): a child must create its own "
                            "driver",
                            what);
}

/* A release in a forked child (gpuhal__driver_check_process) must not wait for threads
 * that do not exist there: it leaves the object alone, says so, and returns 1. */
static int gpuhal__release_in_other_process(const gpuhal_driver_t* driver, const char* what) {
  gpuhal_status_t status = gpuhal__driver_check_process(driver, what);
  if (!status) return 0;
  gpuhal__log(&driver->logger, GPUHAL_LOG_ERROR, "%s; it is left as it is (a leak)", gpuhal_status_message(status));
  gpuhal_status_free(status);
  return 1;
}

static void gpuhal__worker_call_run(gpuhal__task_t* task) {
  gpuhal__worker_call_t* call = GPUHAL__CONTAINER_OF(task, gpuhal__worker_call_t, task);
  gpuhal__worker_t* w = &call->device->worker;
  gpuhal_status_t status = call->fn(call->arg);
  gpuhal__mutex_lock(&w->mutex);
  call->status = status;
  call->done = 1; /* after this the caller may return: `call` is its stack frame */
  gpuhal__cond_broadcast(&w->done_cond);
  gpuhal__mutex_unlock(&w->mutex);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__worker_call(gpuhal_device_t* device, gpuhal_status_t (*fn)(void* arg),
                                                    void* arg) {
  gpuhal__worker_call_t call;
  gpuhal__worker_t* w = &device->worker;
  if (gpuhal__on_worker(device)) return fn(arg);
  /* In a forked child the worker does not exist: the call would wait forever. */
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__driver_check_process(device->driver, "a call that runs on the device's worker thread"));
  memset(&call, 0, sizeof(call));
  gpuhal__list_init(&call.task.node);
  call.task.fn = gpuhal__worker_call_run;
  call.device = device;
  call.fn = fn;
  call.arg = arg;
  gpuhal__worker_post(device, &call.task);
  gpuhal__mutex_lock(&w->mutex);
  while (!call.done) gpuhal__cond_wait(&w->done_cond, &w->mutex);
  gpuhal__mutex_unlock(&w->mutex);
  return call.status;
}

/* Runs tasks until stopped; tasks queued before the stop still run. */
static void gpuhal__worker_loop(gpuhal__worker_t* w) {
  gpuhal__mutex_lock(&w->mutex);
  for (;;) {
    gpuhal__list_node_t* node = gpuhal__list_pop_front(&w->tasks);
    gpuhal__task_t* task;
    if (!node) {
      if (w->stop) break;
      gpuhal__cond_wait(&w->cond, &w->mutex);
      continue;
    }
    task = GPUHAL__CONTAINER_OF(node, gpuhal__task_t, node);
    task->queued = 0;
    w->running = 1;
    gpuhal__mutex_unlock(&w->mutex);
    task->fn(task);
    gpuhal__mutex_lock(&w->mutex);
    w->running = 0;
  }
  gpuhal__mutex_unlock(&w->mutex);
}

/* The driver whose thread this is (a device's worker, completion or host-call thread), so
 * that a release made on it does not wait for the thread itself (gpuhal__driver_settle_begin:
 * a host function may make the application's last release, while the device it runs for is
 * being torn down and no longer on the driver's list). */
static GPUHAL__THREAD_LOCAL gpuhal_driver_t* gpuhal__thread_driver = NULL;
GPUHAL__PRIVATE void gpuhal__driver_thread_begin(gpuhal_driver_t* driver) { gpuhal__thread_driver = driver; }

static void* gpuhal__worker_main(void* arg) {
  gpuhal_device_t* device = (gpuhal_device_t*)arg;
  gpuhal__worker_t* w = &device->worker;
  gpuhal_status_t status;
  gpuhal__capture_relax_thread(device->cu); /* an application's capture must not refuse its calls */
  status = GPUHAL__CU(device->cu, cuCtxSetCurrent, (device->context));
  gpuhal__driver_thread_begin(device->driver);
  gpuhal__mutex_lock(&w->mutex);
  w->start_status = status;
  w->start_done = 1;
  gpuhal__cond_broadcast(&w->done_cond);
  gpuhal__mutex_unlock(&w->mutex);
  if (status) return NULL;
  gpuhal__worker_self = device;
  gpuhal__worker_loop(w);
  /* Leave the thread as we found it; the context itself lives on until released. */
  device->cu->cuCtxSetCurrent(NULL);
  return NULL;
}

static void gpuhal__worker_init(gpuhal__worker_t* w) {
  gpuhal__mutex_init(&w->mutex);
  gpuhal__cond_init(&w->cond);
  gpuhal__cond_init(&w->done_cond);
  gpuhal__list_init(&w->tasks);
}

/* Starts the worker and waits until it has made the context current (or failed to). */
static gpuhal_status_t gpuhal__worker_start(gpuhal_device_t* device) {
  gpuhal__worker_t* w = &device->worker;
  gpuhal_status_t status;
  GPUHAL__RETURN_IF_ERROR(gpuhal__thread_create(&w->thread, gpuhal__worker_main, device, "gpuhal-worker"));
  w->started = 1;
  gpuhal__mutex_lock(&w->mutex);
  while (!w->start_done) gpuhal__cond_wait(&w->done_cond, &w->mutex);
  status = w->start_status;
  w->start_status = NULL;
  gpuhal__mutex_unlock(&w->mutex);
  if (status) {
    gpuhal__thread_join(w->thread);
    w->started = 0;
    return gpuhal_status_annotate(status, "starting the worker thread of device %d", device->ordinal);
  }
  return NULL;
}

static void gpuhal__worker_stop(gpuhal_device_t* device) {
  gpuhal__worker_t* w = &device->worker;
  if (!w->started) return;
  gpuhal__mutex_lock(&w->mutex);
  w->stop = 1;
  gpuhal__cond_signal(&w->cond);
  gpuhal__mutex_unlock(&w->mutex);
  gpuhal__thread_join(w->thread);
  w->started = 0;
}

static void gpuhal__worker_deinit(gpuhal__worker_t* w) {
  gpuhal__cond_destroy(&w->done_cond);
  gpuhal__cond_destroy(&w->cond);
  gpuhal__mutex_destroy(&w->mutex);
}

/* ---- stream capture mode (device.h) ---- */

/* 1 while the calling thread's capture mode is RELAXED by gpuhal's doing: for life on a
 * gpuhal thread, for the outermost relaxing scope on the application's. */
static GPUHAL__THREAD_LOCAL int gpuhal__capture_relaxed = 0;

GPUHAL__PRIVATE void gpuhal__capture_relax(const gpuhal__cuda_symbols_t* cu, gpuhal__capture_scope_t* scope) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  scope->changed = 0;
  if (gpuhal__capture_relaxed || cu->cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS) return;
  scope->saved = mode;
  scope->changed = 1;
  gpuhal__capture_relaxed = 1;
}

GPUHAL__PRIVATE void gpuhal__capture_restore(const gpuhal__cuda_symbols_t* cu, gpuhal__capture_scope_t* scope) {
  if (!scope->changed) return;
  scope->changed = 0;
  gpuhal__capture_relaxed = 0;
  /* A caller in RELAXED mode already needs nothing given back. */
  if (scope->saved != CU_STREAM_CAPTURE_MODE_RELAXED) cu->cuThreadExchangeStreamCaptureMode(&scope->saved);
}

GPUHAL__PRIVATE void gpuhal__capture_relax_thread(const gpuhal__cuda_symbols_t* cu) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (cu->cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS) gpuhal__capture_relaxed = 1;
}

/* ---- context scopes ---- */

GPUHAL__PRIVATE gpuhal_status_t gpuhal__context_enter_enqueue(gpuhal_device_t* device, gpuhal__context_scope_t* scope) {
  CUcontext current = NULL;
  scope->saved = NULL;
  scope->pushed = 0;
  scope->capture.changed = 0;
  GPUHAL__CU_RETURN(device->cu, cuCtxGetCurrent, (&current));
  scope->saved = current;
  if (current == device->context) return NULL;
  GPUHAL__CU_RETURN(device->cu, cuCtxPushCurrent, (device->context));
  scope->pushed = 1;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__context_enter(gpuhal_device_t* device, gpuhal__context_scope_t* scope) {
  gpuhal__capture_scope_t capture;
  gpuhal_status_t status;
  gpuhal__capture_relax(device->cu, &capture);
  status = gpuhal__context_enter_enqueue(device, scope);
  if (status) {
    gpuhal__capture_restore(device->cu, &capture);
    return status;
  }
  scope->capture = capture;
  return NULL;
}

GPUHAL__PRIVATE int gpuhal__context_push_any(const gpuhal__cuda_symbols_t* cu, CUcontext context,
                                             gpuhal__context_scope_t* scope) {
  gpuhal__capture_relax(cu, &scope->capture);
  if (cu->cuCtxGetCurrent(&scope->saved) != CUDA_SUCCESS) scope->saved = NULL;
  scope->pushed = cu->cuCtxPushCurrent(context) == CUDA_SUCCESS;
  if (scope->pushed || cu->cuCtxSetCurrent(context) == CUDA_SUCCESS) return 1;
  gpuhal__capture_restore(cu, &scope->capture); /* the caller skips pop_any */
  return 0;
}

/* Pops the context this thread pushed, trying once more when the pop fails. Only a pop
 * removes a stack entry: cuCtxSetCurrent(saved) in its place would replace the top, leaving
 * the caller's context twice on its stack ([A] becomes [A, A]) with no error, so that its
 * own later pop finds A again instead of what was below. When both pops fail, the caller's
 * context is set current all the same (gpuhal__context_leave): a wrong depth shows at the
 * caller's own pop, a wrong current context would send its next calls to gpuhal's context. */
static CUresult gpuhal__context_pop_pushed(const gpuhal__cuda_symbols_t* cu) {
  CUcontext popped = NULL;
  CUresult r = cu->cuCtxPopCurrent(&popped);
  if (r != CUDA_SUCCESS) r = cu->cuCtxPopCurrent(&popped);
  return r;
}

GPUHAL__PRIVATE void gpuhal__context_pop_any(const gpuhal__cuda_symbols_t* cu, gpuhal__context_scope_t* scope) {
  /* Not pushed: push_any set the context over the caller's, so set the caller's back; and
   * when both pops failed (a cleanup path: nothing to report it to). */
  if (!scope->pushed || gpuhal__context_pop_pushed(cu) != CUDA_SUCCESS) cu->cuCtxSetCurrent(scope->saved);
  gpuhal__capture_restore(cu, &scope->capture);
}

static void gpuhal__context_pop(gpuhal_device_t* device, gpuhal__context_scope_t* scope) {
  CUresult r;
  if (!scope->pushed) return;
  scope->pushed = 0;
  r = gpuhal__context_pop_pushed(device->cu);
  if (r != CUDA_SUCCESS) {
    gpuhal_status_t status = gpuhal__cuda_status(device->cu, r, "cuCtxPopCurrent", __FILE__, __LINE__);
    int set = device->cu->cuCtxSetCurrent(scope->saved) == CUDA_SUCCESS;
    gpuhal__log(device->logger, GPUHAL_LOG_ERROR,
                "restoring the caller's context (the pop failed twice; device %d's context %s): %s", device->ordinal,
                set ? "was replaced by the caller's, one entry too deep on this thread's stack"
                    : "stays current on this thread",
                gpuhal_status_message(status));
    gpuhal_status_free(status);
  }
}

GPUHAL__PRIVATE void gpuhal__context_leave(gpuhal_device_t* device, gpuhal__context_scope_t* scope) {
  gpuhal__context_pop(device, scope);
  gpuhal__capture_restore(device->cu, &scope->capture);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_call_current(gpuhal_device_t* device, gpuhal_status_t (*fn)(void* arg),
                                                            void* arg) {
  gpuhal__context_scope_t scope;
  gpuhal_status_t status = gpuhal__context_enter(device, &scope);
  if (status) {
    gpuhal_status_free(status);
    return gpuhal__worker_call(device, fn, arg);
  }
  status = fn(arg);
  gpuhal__context_leave(device, &scope);
  return status;
}

/* ---- driver ---- */

static uint32_t gpuhal__feature_bit(gpuhal_feature_t feature) { return 1u << (unsigned)feature; }

/* Which features the optional symbols that resolved allow. */
static uint32_t gpuhal__driver_features(const gpuhal_driver_t* driver) {
  const gpuhal__cuda_symbols_t* cu = &driver->cu;
  uint32_t features = 0;
  if (cu->cuMemPoolCreate && cu->cuMemPoolDestroy && cu->cuMemPoolSetAttribute && cu->cuMemAllocFromPoolAsync &&
      cu->cuMemFreeAsync)
    features |= gpuhal__feature_bit(GPUHAL_FEATURE_MEMORY_POOLS);
  if (cu->cuFuncGetParamInfo) features |= gpuhal__feature_bit(GPUHAL_FEATURE_KERNEL_PARAM_INFO);
  if (cu->cuDeviceCanAccessPeer && cu->cuCtxEnablePeerAccess)
    features |= gpuhal__feature_bit(GPUHAL_FEATURE_PEER_ACCESS);
  if (cu->cuCtxCreate) features |= gpuhal__feature_bit(GPUHAL_FEATURE_CONTEXT_CREATE);
  if (driver->nccl.loaded) features |= gpuhal__feature_bit(GPUHAL_FEATURE_NCCL);
  if (driver->memops) features |= gpuhal__feature_bit(GPUHAL_FEATURE_SEMAPHORE_MEMOPS);
  return features;
}

/* 1 when every device of the driver can wait on and write 64-bit values in stream order
 * and map pinned host memory at one address (unified addressing): then semaphore values
 * live in device-mapped memory (GPUHAL_FEATURE_SEMAPHORE_MEMOPS). Needs no context. */
static int gpuhal__driver_supports_memops(gpuhal_driver_t* driver, const gpuhal_driver_options_t* options) {
  const gpuhal__cuda_symbols_t* cu = &driver->cu;
  const char* env = gpuhal__getenv("GPUHAL_SEMAPHORE_MEMOPS");
  int ordinal;
  int wanted = options->semaphore_memops > 0 || (options->semaphore_memops == 0 && !(env && strcmp(env, "0") == 0));
  /* Anything but 0 or 1 is ignored; say so, or a misspelt 0 (false, off) silently keeps
   * GPU-resident values. */
  if (options->semaphore_memops == 0 && env && strcmp(env, "0") != 0 && strcmp(env, "1") != 0)
    gpuhal__log(&driver->logger, GPUHAL_LOG_WARN,
                "GPUHAL_SEMAPHORE_MEMOPS='%s' is neither 0 nor 1: ignored (GPU-resident semaphore values where the "
                "devices support them, as with 1)",
                env);
  if (!wanted || driver->device_count == 0) return 0;
  if (!cu->cuStreamWaitValue64 || !cu->cuStreamWriteValue64 || !cu->cuMemHostAlloc || !cu->cuMemFreeHost ||
      !cu->cuMemHostGetDevicePointer)
    return 0;
  for (ordinal = 0; ordinal < driver->device_count; ++ordinal) {
    CUdevice dev = 0;
    int memops = 0, mapped = 0, unified = 0;
    if (cu->cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS) return 0;
    if (cu->cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) != CUDA_SUCCESS ||
        cu->cuDeviceGetAttribute(&mapped, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, dev) != CUDA_SUCCESS ||
        cu->cuDeviceGetAttribute(&unified, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev) != CUDA_SUCCESS)
      return 0;
    if (!memops || !mapped || !unified) return 0;
  }
  return 1;
}

static gpuhal__logger_t gpuhal__logger_from_options(const gpuhal_driver_options_t* options) {
  gpuhal__logger_t logger;
  const char* env = options->log_level == GPUHAL_LOG_NONE ? gpuhal__getenv("GPUHAL_LOG") : NULL;
  logger.level = options->log_level == GPUHAL_LOG_NONE ? GPUHAL_LOG_WARN : options->log_level;
  logger.fn = options->log_fn;
  logger.user = options->log_user;
  /* A misspelt level would otherwise silently leave the log at its default. */
  if (env && !gpuhal__log_level_parse(env, &logger.level))
    gpuhal__log(&logger, GPUHAL_LOG_WARN,
                "GPUHAL_LOG='%s' is not a log level (none, error, warn, info or debug, any case): using warn", env);
  return logger;
}

/* cuInit, the driver version and the device count. No device is not an error. */
static gpuhal_status_t gpuhal__driver_init_cuda(gpuhal_driver_t* driver) {
  const gpuhal__cuda_symbols_t* cu = &driver->cu;
  CUresult result = cu->cuInit(0);
  driver->device_count = 0;
  if ((int)result == 100 /* CUDA_ERROR_NO_DEVICE */) {
    gpuhal__log(&driver->logger, GPUHAL_LOG_INFO, "'%s' reports no CUDA device", driver->cuda_library);
  } else if ((int)result != 0) {
    return gpuhal_status_annotate(gpuhal__cuda_status(cu, result, "cuInit", __FILE__, __LINE__),
                                  "initializing the CUDA driver '%s'", driver->cuda_library);
  }
  GPUHAL__CU_RETURN(cu, cuDriverGetVersion, (&driver->driver_version));
  if ((int)result == 0) GPUHAL__CU_RETURN(cu, cuDeviceGetCount, (&driver->device_count));
  if (driver->device_count < 0) driver->device_count = 0;
  if (driver->device_count > 0)
    GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(&driver->allocator,
                                                 sizeof(gpuhal__ordinal_t) * (size_t)driver->device_count,
                                                 "per-ordinal state", (void**)&driver->ordinals));
  return NULL;
}

/* A driver's own memory: from the process-wide object pool with the default allocator, so
 * a late call on a released driver is caught; from a user's allocator it is freed at once
 * (that allocator may be gone once its driver is). */
/* A driver object always comes from the process-wide pool, whatever the driver's allocator:
 * a released driver's handle must stay readable (poisoned) after its allocator may be gone,
 * so a late call on it gets INVALID_ARGUMENT instead of reading memory the application
 * freed or gave to something else. */
static gpuhal_status_t gpuhal__driver_alloc(gpuhal_driver_t** out) {
  return gpuhal__object_alloc(gpuhal__process_object_pool(), GPUHAL__MAGIC_DRIVER, sizeof(gpuhal_driver_t),
                              "gpuhal_driver_t", (void**)out);
}
static void gpuhal__driver_free(gpuhal_driver_t* driver) {
  gpuhal__object_free(gpuhal__process_object_pool(), GPUHAL__MAGIC_DRIVER, driver);
}

/* 1 when a device of any ordinal was lost: a GPU fault can take every context of the
 * process, including those of devices that saw no sticky error themselves. */
static int gpuhal__driver_lost_any(const gpuhal_driver_t* driver) {
  int i;
  for (i = 0; i < driver->device_count; ++i)
    if (gpuhal__atomic_load(&driver->ordinals[i].lost)) return 1;
  return 0;
}

static void gpuhal__driver_destroy(gpuhal_driver_t* driver) {
  gpuhal__hooks()->trace_destroy(driver);         /* trace hook: writes the file */
  gpuhal__hooks()->driver_flush_deferred(driver); /* no device is left: nothing waits on the GPU */
  /* Before parked_mutex goes: giving back kept shared mappings is a put-off call. */
  gpuhal__hooks()->semaphore_driver_destroy(driver);
  gpuhal__mutex_destroy(&driver->parked_mutex);
  /* Every action counted as denied a park was dropped with its device (gpuhal__action_park_denied). */
  GPUHAL_ASSERT(driver->park_denied == 0 || gpuhal__driver_lost_any(driver));
  if (driver->ordinals) {
    int i;
    for (i = 0; i < driver->device_count; ++i) {
      const gpuhal__ordinal_t* o = &driver->ordinals[i];
      if (o->parked == 0 && o->room_live == 0) continue;
      /* Counting mistakes are caught here in tests; after a loss (on a GPU every context
       * of the process may go at once, and teardown calls fail) they are only reported:
       * aborting a program that is shutting down over a lost GPU helps nobody. */
      GPUHAL_ASSERT(gpuhal__driver_lost_any(driver));
      gpuhal__log(&driver->logger, GPUHAL_LOG_DEBUG,
                  "driver: device %d: %d parked steps and %d streams or graph executables not accounted for after "
                  "a device loss",
                  i, (int)o->parked, (int)o->room_live);
    }
  }
  gpuhal__free(&driver->allocator, driver->ordinals);
  gpuhal__mutex_destroy(&driver->words_mutex);
  gpuhal__cond_destroy(&driver->shared_cond);
  gpuhal__mutex_destroy(&driver->shared_mutex);
  gpuhal__object_pool_deinit(&driver->objects);
  gpuhal__cond_destroy(&driver->devices_cond);
  gpuhal__mutex_destroy(&driver->devices_mutex);
  gpuhal__mutex_destroy(&driver->nvrtc_mutex);
  GPUHAL_ASSERT(driver->libraries == NULL); /* every device let its libraries go */
  gpuhal__cond_destroy(&driver->library_cond);
  gpuhal__mutex_destroy(&driver->library_mutex);
  /* The CUDA driver and NCCL start threads of their own: unloading them under those
   * threads is not safe, so the libraries stay loaded (dlopen counts references, so
   * creating drivers again costs nothing); NVRTC likewise. */
  driver->cuda_handle = NULL;
  driver->nccl_handle = NULL;
  driver->nvrtc_handle = NULL;
  gpuhal__driver_free(driver);
}

/* An owned copy of the path `dir`, made absolute: a relative one is taken from the working
 * directory now, not at each access (a later chdir would split the module cache, or send
 * the trace elsewhere). "" stays "". */
static char* gpuhal__absolute_path_copy(const gpuhal_allocator_t* allocator, const char* dir) {
  char cwd[4096];
  size_t cwd_length, length = strlen(dir);
  char* copy;
  if (dir[0] == '/' || dir[0] == 0 || !getcwd(cwd, sizeof(cwd))) return gpuhal__strdup(allocator, dir);
  cwd_length = strlen(cwd);
  copy = (char*)gpuhal__alloc(allocator, cwd_length + 1 + length + 1);
  if (!copy) return NULL;
  memcpy(copy, cwd, cwd_length);
  copy[cwd_length] = '/';
  memcpy(copy + cwd_length + 1, dir, length + 1);
  return copy;
}

GPUHAL_API gpuhal_status_t gpuhal_driver_create(const gpuhal_driver_options_t* options, gpuhal_driver_t** out_driver) {
  gpuhal_driver_options_t defaults;
  gpuhal_allocator_t allocator;
  gpuhal_driver_t* driver = NULL;
  gpuhal_status_t status;
  const char* trace;
  GPUHAL__CHECK_ARG(out_driver != NULL, "out_driver", "must not be NULL");
  *out_driver = NULL;
  if (!options) {
    memset(&defaults, 0, sizeof(defaults));
    options = &defaults;
  }
  GPUHAL__CHECK_ARG((options->allocator.alloc == NULL) == (options->allocator.free == NULL), "options->allocator",
                    "must set both alloc and free, or neither");
  GPUHAL__CHECK_RANGE((unsigned)options->log_level <= (unsigned)GPUHAL_LOG_DEBUG, "options->log_level",
                      "must be a gpuhal_log_level_t (0..4)");
  GPUHAL__CHECK_ARG(!options->nvrtc_library || strlen(options->nvrtc_library) < GPUHAL__LIBRARY_PATH_MAX,
                    "options->nvrtc_library", "must be shorter than 512 bytes");
  GPUHAL__CHECK_ARG(!options->trace_path || strlen(options->trace_path) < GPUHAL__LIBRARY_PATH_MAX,
                    "options->trace_path", "must be shorter than 512 bytes");
  allocator = gpuhal__allocator_resolve(&options->allocator);
  GPUHAL__RETURN_IF_ERROR(gpuhal__driver_alloc(&driver));
  gpuhal__object_init(&driver->header, GPUHAL__MAGIC_DRIVER);
  driver->header.lent = 1; /* gpuhal_device_driver hands it out */
  driver->creator_pid = (long)getpid();
  gpuhal__object_pool_init(&driver->objects, &allocator);
  gpuhal__mutex_init(&driver->devices_mutex);
  gpuhal__mutex_init(&driver->words_mutex);
  gpuhal__mutex_init(&driver->shared_mutex);
  gpuhal__cond_init(&driver->shared_cond);
  gpuhal__list_init(&driver->shared_semaphores);
  gpuhal__mutex_init(&driver->parked_mutex);
  gpuhal__cond_init(&driver->devices_cond);
  gpuhal__list_init(&driver->devices);
  gpuhal__mutex_init(&driver->nvrtc_mutex);
  gpuhal__mutex_init(&driver->library_mutex);
  gpuhal__cond_init(&driver->library_cond);
  if (options->nvrtc_library)
    snprintf(driver->nvrtc_option, sizeof(driver->nvrtc_option), "%s", options->nvrtc_library);
  driver->allocator = allocator;
  driver->logger = gpuhal__logger_from_options(options);
  status = gpuhal__symbols_load_cuda(options->cuda_library, &driver->logger, &driver->cu, &driver->cuda_handle,
                                     driver->cuda_library, sizeof(driver->cuda_library));
  if (!status) status = gpuhal__driver_init_cuda(driver);
  if (!status)
    status = gpuhal__symbols_load_nccl(options->nccl_library, &driver->logger, &driver->nccl, &driver->nccl_handle,
                                       driver->nccl_library, sizeof(driver->nccl_library));
  if (status) {
    gpuhal__log(&driver->logger, GPUHAL_LOG_INFO, "driver creation failed: %s", gpuhal_status_message(status));
    gpuhal__driver_destroy(driver);
    return status;
  }
  driver->memops = gpuhal__driver_supports_memops(driver, options);
  {
    const char* hang = gpuhal__getenv("GPUHAL_HANG_REPORT");
    double seconds = hang ? atof(hang) : 0.0;
    if (seconds > 0.0 && seconds < 1e6) driver->hang_report_ns = (int64_t)(seconds * 1e9);
  }
  driver->features = gpuhal__driver_features(driver);
  trace = options->trace_path ? options->trace_path : gpuhal__getenv("GPUHAL_TRACE");
  if (trace) {
    char* absolute = gpuhal__absolute_path_copy(&driver->allocator, trace);
    size_t length = absolute ? strlen(absolute) : 0;
    if (absolute && length < sizeof(driver->trace_path))
      snprintf(driver->trace_path, sizeof(driver->trace_path), "%s", absolute);
    gpuhal__free(&driver->allocator, absolute);
    if (!absolute || length >= sizeof(driver->trace_path)) {
      gpuhal__driver_destroy(driver);
      if (!absolute) return gpuhal__status_oom("trace path", strlen(trace) + 1);
      return gpuhal_status_make(
          GPUHAL_STATUS_INVALID_ARGUMENT,
          "gpuhal_driver_create: the trace path ('%s', from options->trace_path or $GPUHAL_TRACE) "
          "must be shorter than 512 bytes once made absolute (it has %zu)",
          trace, length);
    }
  }
  status = gpuhal__hooks()->trace_create(driver); /* trace hook */
  if (status) {
    gpuhal__driver_destroy(driver);
    return status;
  }
  gpuhal__log(&driver->logger, GPUHAL_LOG_INFO, "driver: '%s', CUDA %d.%d, %d device%s%s%s", driver->cuda_library,
              driver->driver_version / 1000, (driver->driver_version % 1000) / 10, driver->device_count,
              driver->device_count == 1 ? "" : "s", driver->nccl.loaded ? ", NCCL " : ", no NCCL",
              driver->nccl_library);
  *out_driver = driver;
  return NULL;
}

GPUHAL_API void gpuhal_driver_retain(gpuhal_driver_t* driver) {
  if (gpuhal__object_is_held(driver, GPUHAL__MAGIC_DRIVER)) gpuhal__object_user_retain(&driver->header);
}

GPUHAL__PRIVATE void gpuhal__driver_retain_ref(gpuhal_driver_t* driver) { gpuhal__object_retain(&driver->header); }

GPUHAL__PRIVATE void gpuhal__driver_release_ref(gpuhal_driver_t* driver) {
  if (!gpuhal__object_release(&driver->header)) return;
  /* the teardown joins the driver's threads, which a forked child does not have */
  if (gpuhal__release_in_other_process(driver, "releasing the driver's last reference")) return;
  gpuhal__driver_destroy(driver);
}

/* How long the application's driver release waits for released devices to settle. */
#ifndef GPUHAL_DRIVER_RELEASE_SETTLE_NS
#define GPUHAL_DRIVER_RELEASE_SETTLE_NS (30ll * 1000000000)
#endif

/* 1 when a device of the list has dropped its last reference but its teardown has not yet
 * counted itself in driver->teardowns (the moment between the two), or when a device the
 * application has released owes a hand-off (gpuhal__worker_hand_off): its worker has yet to
 * run what another thread gave it, which often drops the device's last reference. The
 * settle took that device before the hand-off came (a peer copy's action released on a
 * device settled after it), so only this wait sees it. A device the application still
 * holds lives on anyway: its hand-offs are left to its own release. Caller holds
 * devices_mutex. */
static int gpuhal__driver_has_unsettled_device(gpuhal_driver_t* driver) {
  gpuhal__list_node_t* n;
  for (n = driver->devices.next; n != &driver->devices; n = n->next) {
    gpuhal_device_t* d = GPUHAL__CONTAINER_OF(n, gpuhal_device_t, driver_link);
    if (gpuhal__atomic_load(&d->header.refcount) == 0) return 1;
    if (d->handoffs > 0 && gpuhal__atomic_load(&d->header.user_refs) == 0) return 1;
  }
  return 0;
}

/* Devices the application has released may live on for a moment: queue work that finished
 * still holds references to what it used until the worker drops them, and the last of
 * those may tear the device down on a thread of its own. Settle those devices and wait
 * for every teardown under way, on whatever thread, so that the application's last release
 * really ends gpuhal's work. Work still blocked on a semaphore is left alone (the device
 * stays until it runs or its release aborts it); every wait is bounded. */
static gpuhal_status_t gpuhal__driver_settle_nothing(void* arg) {
  GPUHAL__UNUSED(arg);
  return NULL;
}

/* 1 when the worker has no task queued and runs none. */
static int gpuhal__worker_idle(gpuhal__worker_t* w) {
  int idle;
  gpuhal__mutex_lock(&w->mutex);
  idle = gpuhal__list_empty(&w->tasks) && !w->running;
  gpuhal__mutex_unlock(&w->mutex);
  return idle;
}

/* 1 when the calling thread is one of the device's own (its worker, or a queue thread):
 * the device's teardown joins those, so it must not run there. */
static int gpuhal__device_owns_thread(gpuhal_device_t* device) {
  if (gpuhal__on_worker(device)) return 1;
  if (gpuhal__hooks()->queue_owns_thread(device)) return 1;
  return 0;
}

GPUHAL__PRIVATE void gpuhal__device_work_ended(gpuhal_device_t* device, uint64_t count) {
  if (gpuhal__atomic_load(&device->header.user_refs) == 0)
    gpuhal__atomic_add(&device->driver->released_work_ended, count);
}

/* A settle holds each device the application has released, from the moment it first sees
 * it until no released device's work can move any more, with a reference of its own
 * (settle_hold names the settle): the device's teardown fails its work still waiting for a
 * semaphore, which another released device's work may yet let go. One already held by a
 * concurrent settle is taken over (that reference is now this settle's to drop); a dying
 * one (refcount already 0) is left alone. Caller holds devices_mutex. */
static void gpuhal__driver_settle_hold_locked(gpuhal_device_t* d, uint64_t settle) {
  if (!d->settle_hold && !gpuhal__object_try_retain(&d->header)) return;
  d->settle_hold = settle;
}

/* A new settle: its number, with every device the application has released held. */
static uint64_t gpuhal__driver_settle_open(gpuhal_driver_t* driver) {
  gpuhal__list_node_t* n;
  uint64_t settle;
  gpuhal__mutex_lock(&driver->devices_mutex);
  settle = ++driver->settles;
  for (n = driver->devices.next; n != &driver->devices; n = n->next) {
    gpuhal_device_t* d = GPUHAL__CONTAINER_OF(n, gpuhal_device_t, driver_link);
    if (gpuhal__atomic_load(&d->header.user_refs) == 0) gpuhal__driver_settle_hold_locked(d, settle);
  }
  gpuhal__mutex_unlock(&driver->devices_mutex);
  return settle;
}

/* One pass of settle `settle`: takes each released device once (a device a concurrent
 * settle's later pass took is left to it), holds it, and waits until its queues have no
 * work but work blocked on a semaphore, and its worker none queued. */
static void gpuhal__driver_settle_pass(gpuhal_driver_t* driver, uint64_t settle, gpuhal_timeout_t timeout) {
  uint64_t pass;
  gpuhal__mutex_lock(&driver->devices_mutex);
  pass = ++driver->settles;
  gpuhal__mutex_unlock(&driver->devices_mutex);
  for (;;) {
    gpuhal_device_t* device = NULL;
    gpuhal__list_node_t* n;
    gpuhal__mutex_lock(&driver->devices_mutex);
    for (n = driver->devices.next; n != &driver->devices && !device; n = n->next) {
      gpuhal_device_t* d = GPUHAL__CONTAINER_OF(n, gpuhal_device_t, driver_link);
      /* a reference for the pass itself: a concurrent settle may take the hold over and drop it */
      if (gpuhal__atomic_load(&d->header.user_refs) == 0 && d->settled_in < pass &&
          gpuhal__object_try_retain(&d->header)) {
        gpuhal__driver_settle_hold_locked(d, settle);
        d->settled_in = pass;
        device = d;
      }
    }
    gpuhal__mutex_unlock(&driver->devices_mutex);
    if (!device) break;
    gpuhal__hooks()->queue_settle(device, timeout);
    /* Finished work may have left tasks on the worker that hold the device (a free put off
     * by a harvest): one call through the worker runs after them (its tasks run in order),
     * so their references are gone before ours is. An idle worker has none: a release
     * after the device's (every one is a settle then) does not wait for a thread. */
    if (!gpuhal__worker_idle(&device->worker))
      gpuhal_status_free(gpuhal__worker_call(device, gpuhal__driver_settle_nothing, NULL));
    gpuhal__device_release_ref(device); /* the pass's (the last only when the hold went) */
  }
}

/* Drops the devices settle `settle` holds, one at a time: the last reference tears its
 * device down right here (or on a reaper, counted in teardowns), failing what still waits. */
static void gpuhal__driver_settle_drop(gpuhal_driver_t* driver, uint64_t settle) {
  for (;;) {
    gpuhal_device_t* device = NULL;
    gpuhal__list_node_t* n;
    gpuhal__mutex_lock(&driver->devices_mutex);
    for (n = driver->devices.next; n != &driver->devices && !device; n = n->next) {
      gpuhal_device_t* d = GPUHAL__CONTAINER_OF(n, gpuhal_device_t, driver_link);
      if (d->settle_hold == settle) {
        d->settle_hold = 0;
        device = d;
      }
    }
    gpuhal__mutex_unlock(&driver->devices_mutex);
    if (!device) return;
    gpuhal__device_release_ref(device);
  }
}

/* A released device's work may be let go by another released device's: a value it waits
 * for (on the GPU, or on the host with nothing submitted yet), signalled by work the settle
 * found running when it took that other device, after it took this one; or by a device
 * torn down, whose waiting work fails with its signals. So passes repeat while one saw
 * released devices' work end (driver->released_work_ended, counted before each device's
 * count of outstanding work drops, so a pass that waited for work sees it): only a pass in
 * which none did found every device's work blocked at once, with nothing left to let it
 * go but the application (a signal, a release) or devices it still holds. The holds go
 * then, and the teardowns they end; when those failed work (aborted what still waited),
 * the whole repeats. It ends: each round but the last saw work end. Never on the driver's
 * own threads (the callers check): a settle waits for those. */
static void gpuhal__driver_settle_released_devices(gpuhal_driver_t* driver, uint64_t settle) {
  gpuhal_timeout_t timeout = gpuhal_timeout_relative_ns(GPUHAL_DRIVER_RELEASE_SETTLE_NS);
  for (;;) {
    uint64_t ended = gpuhal__atomic_load(&driver->released_work_ended), now;
    for (;;) { /* one read per pass: an end between two reads would be missed */
      gpuhal__driver_settle_pass(driver, settle, timeout);
      now = gpuhal__atomic_load(&driver->released_work_ended);
      if (now == ended || gpuhal__timeout_expired(timeout)) break;
      ended = now;
    }
    ended = now; /* the drop's teardowns are compared with what the last pass saw */
    gpuhal__driver_settle_drop(driver, settle);
    gpuhal__mutex_lock(&driver->devices_mutex);
    while (driver->teardowns > 0 || gpuhal__driver_has_unsettled_device(driver))
      if (!gpuhal__cond_wait_until(&driver->devices_cond, &driver->devices_mutex, timeout)) break;
    gpuhal__mutex_unlock(&driver->devices_mutex);
    if (gpuhal__atomic_load(&driver->released_work_ended) == ended || gpuhal__timeout_expired(timeout)) return;
  }
}

/* 1 when the calling thread is one of the driver's own: settling there would wait for the
 * caller itself, so it is left to the teardowns. */
static int gpuhal__driver_owns_thread(const gpuhal_driver_t* driver) { return gpuhal__thread_driver == driver; }

GPUHAL__PRIVATE uint64_t gpuhal__driver_settle_begin(gpuhal_driver_t* driver) {
  if (gpuhal__atomic_load(&driver->header.user_refs) > 0 || gpuhal__driver_owns_thread(driver)) return 0;
  gpuhal__driver_retain_ref(driver);
  return gpuhal__driver_settle_open(driver);
}

GPUHAL__PRIVATE void gpuhal__driver_settle_end(gpuhal_driver_t* driver, uint64_t settle) {
  if (!settle) return;
  gpuhal__driver_settle_released_devices(driver, settle);
  gpuhal__driver_release_ref(driver); /* perhaps the last: the driver goes on this thread */
}

/* The application's last reference to the driver is going while objects it made are still
 * alive: allowed (each holds the driver), but the driver's contexts, pinned memory and
 * threads stay until the last of them goes. Said at INFO, as the order is legal; it names
 * what is left, which finds a forgotten object when something is held past the end. */
static void gpuhal__driver_warn_live_objects(gpuhal_driver_t* driver) {
  char names[256];
  size_t live;
  if (gpuhal__atomic_load(&driver->header.refcount) <= 1) return;
  live = gpuhal__object_pool_describe_live(&driver->objects, 0, names, sizeof(names));
  if (live == 0) return; /* only gpuhal's own references: they go in a moment */
  gpuhal__log(&driver->logger, GPUHAL_LOG_INFO,
              "gpuhal_driver_release: objects made with this driver are still alive (%s); the driver, its CUDA "
              "contexts, memory and threads stay until they are released",
              names);
}

GPUHAL_API void gpuhal_driver_release(gpuhal_driver_t* driver) {
  if (!gpuhal__object_is_live(driver, GPUHAL__MAGIC_DRIVER)) return;
  if (gpuhal__release_in_other_process(driver, "gpuhal_driver_release")) return;
  if (!gpuhal__object_user_release(&driver->header)) {
    gpuhal__log_extra_release(&driver->logger, __func__, "the driver");
    return;
  }
  if (!gpuhal__driver_owns_thread(driver))
    gpuhal__driver_settle_released_devices(driver, gpuhal__driver_settle_open(driver));
  gpuhal__driver_warn_live_objects(driver);
  gpuhal__driver_release_ref(driver);
}

GPUHAL_API gpuhal_status_t gpuhal_driver_device_count(gpuhal_driver_t* driver, int* out_count) {
  GPUHAL__CHECK_HANDLE(driver, GPUHAL__MAGIC_DRIVER);
  GPUHAL__CHECK_ARG(out_count != NULL, "out_count", "must not be NULL");
  *out_count = driver->device_count;
  return NULL;
}

GPUHAL_API int gpuhal_driver_has_feature(gpuhal_driver_t* driver, gpuhal_feature_t feature) {
  if (!gpuhal__object_is_live(driver, GPUHAL__MAGIC_DRIVER)) return 0;
  if ((unsigned)feature > (unsigned)GPUHAL_FEATURE_SEMAPHORE_MEMOPS) return 0;
  return (driver->features & gpuhal__feature_bit(feature)) != 0;
}

GPUHAL_API const char* gpuhal_driver_cuda_library(gpuhal_driver_t* driver) {
  if (!gpuhal__object_is_live(driver, GPUHAL__MAGIC_DRIVER)) return "";
  return driver->cuda_library;
}

/* ---- device info ---- */

/* CUdevice_attribute values (CUDA's ABI), so this module needs no particular enumerator
 * names from cuda_api.h. */
enum {
  GPUHAL__ATTR_MAX_THREADS_PER_BLOCK = 1,
  GPUHAL__ATTR_MAX_BLOCK_DIM_X = 2,
  GPUHAL__ATTR_MAX_GRID_DIM_X = 5,
  GPUHAL__ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  GPUHAL__ATTR_WARP_SIZE = 10,
  GPUHAL__ATTR_MULTIPROCESSOR_COUNT = 16,
  GPUHAL__ATTR_L2_CACHE_SIZE = 38,
  GPUHAL__ATTR_ASYNC_ENGINE_COUNT = 40,
  GPUHAL__ATTR_UNIFIED_ADDRESSING = 41,
  GPUHAL__ATTR_COMPUTE_CAPABILITY_MAJOR = 75,
  GPUHAL__ATTR_COMPUTE_CAPABILITY_MINOR = 76,
  GPUHAL__ATTR_MANAGED_MEMORY = 83,
  GPUHAL__ATTR_CONCURRENT_MANAGED_ACCESS = 89,
  GPUHAL__ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  GPUHAL__ATTR_COOPERATIVE_LAUNCH = 95,
  GPUHAL__ATTR_MEMORY_POOLS_SUPPORTED = 115,
  GPUHAL__ATTR_CLUSTER_LAUNCH = 120
};

static gpuhal_status_t gpuhal__device_attribute(const gpuhal__cuda_symbols_t* cu, CUdevice device, int attribute,
                                                int* out_value) {
  *out_value = 0;
  return gpuhal_status_annotate(
      GPUHAL__CU(cu, cuDeviceGetAttribute, (out_value, (CUdevice_attribute)attribute, device)),
      "querying device attribute %d", attribute);
}

static gpuhal_status_t gpuhal__device_query_attributes(const gpuhal__cuda_symbols_t* cu, CUdevice dev,
                                                       gpuhal_device_info_t* info) {
  int i;
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_COMPUTE_CAPABILITY_MAJOR, &info->compute_capability_major));
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_COMPUTE_CAPABILITY_MINOR, &info->compute_capability_minor));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_MULTIPROCESSOR_COUNT, &info->sm_count));
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_MAX_THREADS_PER_BLOCK, &info->max_threads_per_block));
  for (i = 0; i < 3; ++i) {
    GPUHAL__RETURN_IF_ERROR(
        gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_MAX_BLOCK_DIM_X + i, &info->max_block_dim[i]));
    GPUHAL__RETURN_IF_ERROR(gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_MAX_GRID_DIM_X + i, &info->max_grid_dim[i]));
  }
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_MAX_SHARED_MEMORY_PER_BLOCK, &info->max_shared_memory_per_block));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                                   &info->max_shared_memory_per_block_optin));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_WARP_SIZE, &info->warp_size));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_L2_CACHE_SIZE, &info->l2_cache_size));
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_ASYNC_ENGINE_COUNT, &info->async_engine_count));
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_UNIFIED_ADDRESSING, &info->unified_addressing));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_MANAGED_MEMORY, &info->managed_memory));
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_CONCURRENT_MANAGED_ACCESS, &info->concurrent_managed_access));
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_MEMORY_POOLS_SUPPORTED, &info->memory_pools_supported));
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_COOPERATIVE_LAUNCH, &info->cooperative_launch));
  /* Drivers before CUDA 11.8 do not know the attribute: no clusters then. */
  if (info->compute_capability_major >= 9)
    GPUHAL__RETURN_IF_ERROR(gpuhal__device_attribute(cu, dev, GPUHAL__ATTR_CLUSTER_LAUNCH, &info->cluster_launch));
  return NULL;
}

/* Fills `info` for `ordinal` (already range-checked). Needs no context. */
static gpuhal_status_t gpuhal__device_query_info(gpuhal_driver_t* driver, int ordinal, gpuhal_device_info_t* info) {
  const gpuhal__cuda_symbols_t* cu = &driver->cu;
  CUdevice dev = 0;
  CUuuid uuid;
  size_t total = 0;
  memset(info, 0, sizeof(*info));
  memset(&uuid, 0, sizeof(uuid));
  info->ordinal = ordinal;
  GPUHAL__CU_RETURN(cu, cuDeviceGet, (&dev, ordinal));
  GPUHAL__CU_RETURN(cu, cuDeviceGetName, (info->name, (int)sizeof(info->name) - 1, dev));
  GPUHAL__CU_RETURN(cu, cuDeviceGetUuid, (&uuid, dev));
  memcpy(info->uuid, &uuid, sizeof(info->uuid));
  GPUHAL__CU_RETURN(cu, cuDeviceGetPCIBusId, (info->pci_bus_id, (int)sizeof(info->pci_bus_id) - 1, dev));
  GPUHAL__CU_RETURN(cu, cuDeviceTotalMem, (&total, dev));
  info->total_memory = (uint64_t)total;
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_query_attributes(cu, dev, info));
  /* Pools need both the device and the optional symbols. */
  info->memory_pools_supported =
      info->memory_pools_supported && (driver->features & gpuhal__feature_bit(GPUHAL_FEATURE_MEMORY_POOLS));
  info->graphs_supported = driver->driver_version >= 10000; /* CUDA graphs came with CUDA 10 */
  info->driver_version = driver->driver_version;
  return NULL;
}

static gpuhal_status_t gpuhal__check_ordinal(gpuhal_driver_t* driver, int ordinal, const char* func) {
  if (ordinal < 0 || ordinal >= driver->device_count)
    return gpuhal_status_make(
        GPUHAL_STATUS_OUT_OF_RANGE, "%s: argument 'ordinal' is %d, must be in [0, %d) (the driver has %d device%s)",
        func, ordinal, driver->device_count, driver->device_count, driver->device_count == 1 ? "" : "s");
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_driver_device_info(gpuhal_driver_t* driver, int ordinal,
                                                     gpuhal_device_info_t* out_info) {
  gpuhal_device_info_t info;
  GPUHAL__CHECK_HANDLE(driver, GPUHAL__MAGIC_DRIVER);
  GPUHAL__CHECK_ARG(out_info != NULL, "out_info", "must not be NULL");
  GPUHAL__RETURN_IF_ERROR(gpuhal__check_ordinal(driver, ordinal, __func__));
  GPUHAL__RETURN_IF_ERROR(gpuhal_status_annotate(gpuhal__device_query_info(driver, ordinal, &info),
                                                 "querying the properties of device %d", ordinal));
  *out_info = info;
  return NULL;
}

/* ---- device ---- */

/* A tuning time above GPUHAL_TUNING_TIME_MAX_NS is refused: the queue adds these to clock
 * readings (a spin's end, an action's age), which would overflow near INT64_MAX. */
static gpuhal_status_t gpuhal__device_check_tuning_time(const char* field, int64_t value) {
  if (value <= GPUHAL_TUNING_TIME_MAX_NS) return NULL;
  return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                            "gpuhal_device_create: argument 'params->tuning.%s' is %lld, must be at most "
                            "GPUHAL_TUNING_TIME_MAX_NS (%lld ns, 60 s)",
                            field, (long long)value, (long long)GPUHAL_TUNING_TIME_MAX_NS);
}

/* A tuning count above GPUHAL_TUNING_COUNT_MAX is refused: park_headroom makes twice that
 * many streams at once (and overflows doubled near 2^30), the others are compared with
 * counts that never come near it. */
static gpuhal_status_t gpuhal__device_check_tuning_count(const char* field, int32_t value) {
  if (value <= GPUHAL_TUNING_COUNT_MAX) return NULL;
  return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                            "gpuhal_device_create: argument 'params->tuning.%s' is %ld, must be at most "
                            "GPUHAL_TUNING_COUNT_MAX (%d)",
                            field, (long)value, GPUHAL_TUNING_COUNT_MAX);
}

static gpuhal_status_t gpuhal__device_check_params(const gpuhal_device_params_t* params) {
  const gpuhal_queue_tuning_t* t;
  if (!params) return NULL;
  t = &params->tuning;
  if (params->queue_count > GPUHAL_MAX_QUEUES)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_device_create: argument 'params->queue_count' is %u, must be at most %d",
                              (unsigned)params->queue_count, GPUHAL_MAX_QUEUES);
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_check_tuning_time("host_wait_spin_ns", t->host_wait_spin_ns));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_check_tuning_time("host_wait_max_sleep_ns", t->host_wait_max_sleep_ns));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_check_tuning_time("completion_min_age_ns", t->completion_min_age_ns));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_check_tuning_time("completion_max_sleep_ns", t->completion_max_sleep_ns));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_check_tuning_time("load_parked_wait_ns", t->load_parked_wait_ns));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_check_tuning_count("harvest_min", t->harvest_min));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_check_tuning_count("gpu_parked_max", t->gpu_parked_max));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_check_tuning_count("park_headroom", t->park_headroom));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_check_tuning_count("graph_instances_max", t->graph_instances_max));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_check_tuning_count("queue_entries_max", t->queue_entries_max));
  return NULL;
}

/* Copies `params` with the defaults filled in; module_cache_dir becomes an owned, absolute
 * copy. */
static gpuhal_status_t gpuhal__device_resolve_params(gpuhal_device_t* device, const gpuhal_device_params_t* params) {
  const char* cache_dir;
  if (params) device->params = *params;
  if (device->params.queue_count == 0) device->params.queue_count = 1;
  if (device->params.pool_release_threshold == 0) device->params.pool_release_threshold = UINT64_MAX;
  cache_dir = device->params.module_cache_dir ? device->params.module_cache_dir : gpuhal__getenv("GPUHAL_CACHE_DIR");
  device->params.module_cache_dir = NULL;
  if (cache_dir) {
    char* copy = gpuhal__absolute_path_copy(device->allocator, cache_dir);
    if (!copy) return gpuhal__status_oom("module_cache_dir", strlen(cache_dir) + 1);
    device->params.module_cache_dir = copy;
  }
  device->queue_count = device->params.queue_count;
  return NULL;
}

/* ---- room for streams and graph executables (the memop path) ----
 * CUDA keeps a per-context store for streams and graph executables (of any node but empty
 * ones) that grows in steps as more are held at once and keeps its size when they are
 * destroyed; a step waits for every stream of the context to drain, a stream parked on a
 * value wait too (tools/probe/live_probe.c; the steps measured: tests/bench/RESULTS.md).
 * A creation that takes a step while work is parked on a value that the creating thread,
 * or a worker stuck behind it, would signal never returns. So gpuhal makes and destroys every stream and graph executable through
 * gpuhal__device_stream_* / gpuhal__device_graph_*, which count them (room_take / _give);
 * on the memop path the store is grown ahead (room_refill: streams made and destroyed)
 * while nothing of the ordinal is parked, and nothing parks while less than
 * tuning.park_headroom room is left (gpuhal__device_allows_park).
 * Streams and graphs the application creates itself in the context are not counted. */

static int32_t gpuhal__device_room_headroom(const gpuhal_device_t* device) {
  int32_t h = device->params.tuning.park_headroom;
  return h == 0 ? 64 : h < 0 ? 0 : h;
}

/* Grows the store to hold `target` of gpuhal's objects at once by holding that many
 * briefly; the context is current and nothing of the ordinal parks meanwhile. */
static void gpuhal__device_room_grow(gpuhal_device_t* device, gpuhal__ordinal_t* o, int32_t target) {
  CUstream* held = NULL;
  int32_t n = target - gpuhal__atomic_load(&o->room_live), made = 0, live, i;
  gpuhal_status_t status;
  if (n <= 0) return;
  status = gpuhal__alloc_zeroed(device->allocator, sizeof(CUstream) * (size_t)n, "room streams", (void**)&held);
  if (status) { /* best effort, like a stream that cannot be made: the store stays as it is */
    gpuhal__log(device->logger, GPUHAL_LOG_WARN, "device %d: growing the context's store: %s", device->ordinal,
                gpuhal_status_message(status));
    gpuhal_status_free(status);
    return;
  }
  while (made < n && device->cu->cuStreamCreate(&held[made], CU_STREAM_NON_BLOCKING) == 0) made++;
  live = gpuhal__atomic_load(&o->room_live);
  for (i = 0; i < made; ++i) {
    gpuhal_status_t status = GPUHAL__CU(device->cu, cuStreamDestroy, (held[i]));
    if (status) { /* that stream leaks: say so, as every failed destroy is said */
      gpuhal__log(device->logger, GPUHAL_LOG_ERROR, "device %d: growing the context's store: %s", device->ordinal,
                  gpuhal_status_message(status));
      gpuhal_status_free(status);
    }
  }
  gpuhal__free(device->allocator, held);
  if (made + live > gpuhal__atomic_load(&o->room)) gpuhal__atomic_store(&o->room, made + live);
  gpuhal__log(device->logger, GPUHAL_LOG_DEBUG, "device %d: room for %d streams and graph executables in its context",
              device->ordinal, made + live);
}

/* Before a stream or graph executable is created in the device's context (current). The
 * creation itself stays within the room (a park needs park_headroom of it left). */
static void gpuhal__device_room_take(gpuhal_device_t* device) {
  gpuhal__ordinal_t* o = &device->driver->ordinals[device->ordinal];
  int32_t live = gpuhal__atomic_add(&o->room_live, 1);
  if (device->driver->memops && gpuhal__device_room_headroom(device) > 0 && live > gpuhal__atomic_load(&o->room) &&
      gpuhal__atomic_load(&o->parked) > 0 && gpuhal__atomic_exchange(&o->room_warned, 1) == 0)
    gpuhal__log(device->logger, GPUHAL_LOG_WARN,
                "device %d: %d streams and graph executables are alive in its context while work waits there for a "
                "value: CUDA may wait for that work before it creates another (raise tuning.park_headroom)",
                device->ordinal, live);
}

/* After a creation that gpuhal__device_room_take counted succeeded: when less than the
 * headroom is left and nothing of the ordinal is parked, grows the room ahead (best
 * effort: a stream that cannot be made ends the growth). */
static void gpuhal__device_room_refill(gpuhal_device_t* device) {
  gpuhal__ordinal_t* o = &device->driver->ordinals[device->ordinal];
  int32_t headroom = gpuhal__device_room_headroom(device), unused = 0;
  if (!device->driver->memops || headroom == 0 ||
      gpuhal__atomic_load(&o->room) - gpuhal__atomic_load(&o->room_live) >= headroom)
    return;
  if (gpuhal__atomic_cas(&o->room_growing, &unused, 1)) {
    /* A park reserves first and then looks at room_growing (gpuhal__device_allows_park):
     * with the fences, one of the two sees the other. */
    gpuhal__atomic_fence();
    if (gpuhal__atomic_load(&o->parked) == 0)
      gpuhal__device_room_grow(device, o, gpuhal__atomic_load(&o->room_live) + 2 * headroom);
    gpuhal__atomic_store(&o->room_growing, 0);
    gpuhal__driver_park_allowed(device->driver);
  }
}

/* After a stream or graph executable of gpuhal was destroyed (or its creation failed). */
static void gpuhal__device_room_give(gpuhal_device_t* device) {
  gpuhal__atomic_sub(&device->driver->ordinals[device->ordinal].room_live, 1);
  gpuhal__driver_park_allowed(device->driver); /* more room left (gpuhal__device_allows_park) */
}

GPUHAL__PRIVATE void gpuhal__driver_park_allowed(gpuhal_driver_t* driver) {
  gpuhal__list_node_t* n;
  /* The end counted before the look at the denied count; a denial counts itself before it
   * looks at the ends (gpuhal__action_park_denied): one of the two sees the other. */
  gpuhal__atomic_add_seq_cst(&driver->park_allowed, 1);
  if (gpuhal__atomic_load_seq_cst(&driver->park_denied) == 0) return;
  gpuhal__mutex_lock(&driver->devices_mutex);
  /* A device on the list has its queue state: it is made before the device joins the list
   * and destroyed after the device left it. */
  for (n = driver->devices.next; n != &driver->devices; n = n->next)
    gpuhal__hooks()->queue_park_retry(GPUHAL__CONTAINER_OF(n, gpuhal_device_t, driver_link));
  gpuhal__mutex_unlock(&driver->devices_mutex);
}

GPUHAL__PRIVATE int gpuhal__device_allows_park(const gpuhal_device_t* device) {
  gpuhal__ordinal_t* o = &device->driver->ordinals[device->ordinal];
  int32_t headroom = gpuhal__device_room_headroom(device);
  /* the reservation before the look (gpuhal__device_room_refill, gpuhal__device_park_pause) */
  gpuhal__atomic_fence();
  if (gpuhal__atomic_load(&o->room_growing) || gpuhal__atomic_load(&o->park_paused)) return 0;
  return headroom == 0 || gpuhal__atomic_load(&o->room) - gpuhal__atomic_load(&o->room_live) >= headroom;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_park_pause(gpuhal_device_t* device, const char* what) {
  gpuhal__ordinal_t* o = &device->driver->ordinals[device->ordinal];
  int64_t limit = device->params.tuning.load_parked_wait_ns, start;
  gpuhal__backoff_t backoff = gpuhal__backoff(20000, 1000000);
  int32_t parked;
  if (!device->driver->memops) return NULL;
  gpuhal__atomic_add(&o->park_paused, 1);
  gpuhal__atomic_fence(); /* the pause before the look (gpuhal__device_allows_park) */
  parked = gpuhal__atomic_load(&o->parked);
  /* A lost device's parked work never drains: the call goes on, and CUDA reports the loss. */
  if (parked == 0 || gpuhal__atomic_load(&device->lost)) return NULL;
  if (limit == 0) limit = 5000000000LL;
  start = gpuhal_now_ns();
  while (limit > 0 && (parked = gpuhal__atomic_load(&o->parked)) > 0 && !gpuhal__atomic_load(&device->lost) &&
         gpuhal_now_ns() - start < limit) {
    gpuhal__backoff_sleep(&backoff);
  }
  if (parked == 0 || gpuhal__atomic_load(&device->lost)) return NULL;
  return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                            "%s on device %d: %d of its streams hold queue work that waits on the GPU for semaphore "
                            "values not reached after %.3f s, and CUDA loads code only into an idle context (the load "
                            "would wait for that work; forever if this thread is to signal the values): signal them "
                            "first, or create executables before queueing work on values the host signals",
                            what, device->ordinal, (int)parked, limit > 0 ? (double)limit / 1e9 : 0.0);
}

GPUHAL__PRIVATE void gpuhal__device_park_resume(gpuhal_device_t* device) {
  if (!device->driver->memops) return;
  gpuhal__atomic_sub(&device->driver->ordinals[device->ordinal].park_paused, 1);
  gpuhal__driver_park_allowed(device->driver);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_stream_create(gpuhal_device_t* device, CUstream* out) {
  gpuhal_status_t status;
  gpuhal__device_room_take(device);
  status = GPUHAL__CU(device->cu, cuStreamCreate, (out, CU_STREAM_NON_BLOCKING));
  if (status)
    gpuhal__device_room_give(device);
  else
    gpuhal__device_room_refill(device);
  return status;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_stream_destroy(gpuhal_device_t* device, CUstream stream) {
  gpuhal_status_t status = GPUHAL__CU(device->cu, cuStreamDestroy, (stream));
  gpuhal__device_room_give(device);
  return status;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_graph_instantiate(gpuhal_device_t* device, CUgraphExec* out,
                                                                 CUgraph graph, unsigned long long flags) {
  gpuhal__capture_scope_t capture;
  gpuhal_status_t status;
  gpuhal__device_room_take(device);
  /* Relaxed: the caller-issue path instantiates without relaxing its scope (device.h). */
  gpuhal__capture_relax(device->cu, &capture);
  status = GPUHAL__CU(device->cu, cuGraphInstantiateWithFlags, (out, graph, flags));
  gpuhal__capture_restore(device->cu, &capture);
  if (status)
    gpuhal__device_room_give(device);
  else
    gpuhal__device_room_refill(device);
  return status;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_graph_exec_destroy(gpuhal_device_t* device, CUgraphExec exec) {
  gpuhal_status_t status = GPUHAL__CU(device->cu, cuGraphExecDestroy, (exec));
  gpuhal__device_room_give(device);
  return status;
}

static gpuhal_status_t gpuhal__device_create_streams(void* arg) {
  gpuhal_device_t* device = (gpuhal_device_t*)arg;
  uint32_t i;
  for (i = 0; i < device->queue_count; ++i)
    GPUHAL__RETURN_IF_ERROR(gpuhal__device_stream_create(device, &device->streams[i]));
  /* The range needs a context, so gpuhal_driver_device_info cannot give it. */
  if (device->cu->cuCtxGetStreamPriorityRange)
    GPUHAL__CU_RETURN(device->cu, cuCtxGetStreamPriorityRange, (&device->priority_least, &device->priority_greatest));
  return NULL;
}

/* Waits for and destroys whatever streams exist (on the worker). */
static gpuhal_status_t gpuhal__device_destroy_streams(void* arg) {
  gpuhal_device_t* device = (gpuhal_device_t*)arg;
  uint32_t i;
  for (i = 0; device->streams && i < device->queue_count; ++i) {
    gpuhal_status_t status;
    if (!device->streams[i]) continue;
    status = GPUHAL__CU(device->cu, cuStreamSynchronize, (device->streams[i]));
    {
      /* Destroyed even when the synchronize failed (a lost device): cuStreamDestroy is legal
       * with work pending, and skipping it would leak the stream. */
      gpuhal_status_t destroyed = gpuhal__device_stream_destroy(device, device->streams[i]);
      if (!status)
        status = destroyed;
      else
        gpuhal_status_free(destroyed);
    }
    if (status) {
      gpuhal__log(device->logger, GPUHAL_LOG_ERROR, "device %d: destroying stream %u: %s", device->ordinal, (unsigned)i,
                  gpuhal_status_message(status));
      gpuhal_status_free(status);
    }
    device->streams[i] = NULL;
  }
  return NULL;
}

static gpuhal_status_t gpuhal__device_create_subsystems(gpuhal_device_t* device) {
  GPUHAL__RETURN_IF_ERROR(gpuhal__hooks()->trace_device_create(device)); /* trace hook */
  GPUHAL__RETURN_IF_ERROR(gpuhal__hooks()->memory_state_create(device));
  GPUHAL__RETURN_IF_ERROR(gpuhal__hooks()->module_cache_create(device));
  GPUHAL__RETURN_IF_ERROR(gpuhal__hooks()->queue_state_create(device));
  gpuhal__hooks()->command_buffer_device_ready(device);
  return NULL;
}

/* Each destroy hook must accept a device whose create hook never ran or failed. */
static void gpuhal__device_destroy_subsystems(gpuhal_device_t* device) {
  gpuhal__hooks()->queue_state_destroy(device);
  gpuhal__hooks()->module_cache_destroy(device);
  gpuhal__hooks()->memory_state_destroy(device);
  gpuhal__hooks()->trace_device_destroy(device); /* trace hook */
}

/* Tears down whatever part of a device exists; used by release and by a failed create.
 * The device's reference on the driver stays with the caller. */
static void gpuhal__device_destroy(gpuhal_device_t* device) {
  gpuhal_driver_t* driver = device->driver;
  gpuhal__mutex_lock(&driver->devices_mutex);
  gpuhal__list_remove(&device->driver_link); /* a node never linked points at itself */
  gpuhal__mutex_unlock(&driver->devices_mutex);
  if (device->worker.started) {
    gpuhal__device_destroy_subsystems(device);
    gpuhal_status_free(gpuhal__worker_call(device, gpuhal__device_destroy_streams, device));
    gpuhal__worker_stop(device);
  }
  /* Its last release destroys the context, which waits for every device's work: put off
   * while another device's work may wait on the GPU for a value (memory.h). */
  if (device->context_retained)
    gpuhal__hooks()->driver_release_context(driver, device->cu_device, device->context, device->context_release);
  else
    gpuhal__free(device->allocator, device->context_release);
  gpuhal__worker_deinit(&device->worker);
  gpuhal__free(device->allocator, device->streams);
  gpuhal__free(device->allocator, (void*)device->params.module_cache_dir);
  gpuhal__log(device->logger, GPUHAL_LOG_DEBUG, "device %d destroyed", device->ordinal);
  gpuhal__object_free(&driver->objects, GPUHAL__MAGIC_DEVICE, device);
}

/* The steps of gpuhal_device_create after the object exists. */
static gpuhal_status_t gpuhal__device_open(gpuhal_device_t* device) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_query_info(device->driver, device->ordinal, &device->info));
  GPUHAL__CU_RETURN(cu, cuDeviceGet, (&device->cu_device, device->ordinal));
  GPUHAL__CU_RETURN(cu, cuDevicePrimaryCtxRetain, (&device->context, device->cu_device));
  device->context_retained = 1;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, device->queue_count * sizeof(CUstream),
                                               "device streams", (void**)&device->streams));
  GPUHAL__RETURN_IF_ERROR(gpuhal__worker_start(device));
  GPUHAL__RETURN_IF_ERROR(gpuhal__worker_call(device, gpuhal__device_create_streams, device));
  return gpuhal__device_create_subsystems(device);
}

GPUHAL_API gpuhal_status_t gpuhal_device_create(gpuhal_driver_t* driver, int ordinal,
                                                const gpuhal_device_params_t* params, gpuhal_device_t** out_device) {
  gpuhal_device_t* device = NULL;
  gpuhal_status_t status;
  GPUHAL__CHECK_ARG(out_device != NULL, "out_device", "must not be NULL");
  *out_device = NULL;
  GPUHAL__CHECK_HANDLE(driver, GPUHAL__MAGIC_DRIVER);
  GPUHAL__RETURN_IF_ERROR(gpuhal__check_ordinal(driver, ordinal, __func__));
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_check_params(params));
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_alloc(&driver->objects, GPUHAL__MAGIC_DEVICE, sizeof(*device),
                                               "gpuhal_device_t", (void**)&device));
  gpuhal__object_init(&device->header, GPUHAL__MAGIC_DEVICE);
  device->header.lent = 1; /* gpuhal_buffer_device and gpuhal_channel_device hand it out */
  gpuhal__list_init(&device->driver_link);
  gpuhal__driver_retain_ref(driver);
  device->driver = driver;
  device->cu = &driver->cu;
  device->allocator = &driver->allocator;
  device->logger = &driver->logger;
  device->ordinal = ordinal;
  gpuhal__worker_init(&device->worker);
  status = gpuhal__device_resolve_params(device, params);
  if (!status) status = gpuhal__device_open(device);
  if (status) {
    gpuhal__atomic_store(&device->header.magic, GPUHAL__MAGIC_DEAD);
    gpuhal__device_destroy(device);
    gpuhal__driver_release_ref(driver);
    return gpuhal_status_annotate(status, "creating device %d", ordinal);
  }
  gpuhal__log(device->logger, GPUHAL_LOG_INFO, "device %d (%s, sm_%d%d) created with %u queue%s", ordinal,
              device->info.name, device->info.compute_capability_major, device->info.compute_capability_minor,
              (unsigned)device->queue_count, device->queue_count == 1 ? "" : "s");
  gpuhal__mutex_lock(&driver->devices_mutex);
  gpuhal__list_push_back(&driver->devices, &device->driver_link);
  gpuhal__mutex_unlock(&driver->devices_mutex);
  *out_device = device;
  return NULL;
}

GPUHAL__PRIVATE void gpuhal__device_retain_ref(gpuhal_device_t* device) { gpuhal__object_retain(&device->header); }

GPUHAL__PRIVATE const char* gpuhal__device_pair_note(const gpuhal_device_t* a, const gpuhal_device_t* b) {
  return a != b && a->ordinal == b->ordinal ? " (two gpuhal devices of one ordinal: each gpuhal_device_create makes a "
                                              "device of its own, whose objects do not mix with another's)"
                                            : "";
}

GPUHAL_API void gpuhal_device_retain(gpuhal_device_t* device) {
  if (!gpuhal__object_is_live(device, GPUHAL__MAGIC_DEVICE)) return;
  gpuhal__object_user_retain(&device->header);
}

/* Ends a teardown counted in driver->teardowns and drops the device's reference on the
 * driver. The reference goes inside the lock unless it is the last: a driver release
 * waiting in gpuhal__driver_settle_released_devices then holds the last one itself, so the
 * driver is destroyed on the application's thread, not on this one after the application
 * has moved on (exited, say). */
static void gpuhal__device_teardown_done(gpuhal_driver_t* driver) {
  int32_t n;
  int dropped = 0;
  gpuhal__mutex_lock(&driver->devices_mutex);
  n = gpuhal__atomic_load(&driver->header.refcount);
  while (n > 1 && !dropped) dropped = gpuhal__atomic_cas(&driver->header.refcount, &n, n - 1);
  driver->teardowns--;
  gpuhal__cond_broadcast(&driver->devices_cond);
  gpuhal__mutex_unlock(&driver->devices_mutex);
  if (!dropped) gpuhal__driver_release_ref(driver);
}

static void* gpuhal__device_reaper_main(void* arg) {
  gpuhal_device_t* device = (gpuhal_device_t*)arg;
  gpuhal_driver_t* driver = device->driver;
  gpuhal__thread_name_self("gpuhal-reaper");
  gpuhal__capture_relax_thread(device->cu);
  gpuhal__device_destroy(device);
  gpuhal__device_teardown_done(driver);
  return NULL;
}

/* The teardown of a device whose last reference is gone, already counted in
 * driver->teardowns. */
static void gpuhal__device_teardown(gpuhal_device_t* device) {
  gpuhal_driver_t* driver = device->driver;
  gpuhal_status_t status;
  if (!gpuhal__device_owns_thread(device)) {
    gpuhal__device_destroy(device);
    gpuhal__device_teardown_done(driver);
    return;
  }
  /* The last reference went on one of the device's own threads (the worker releasing the
   * last buffer of an already released device, a host call's function releasing the
   * device): a thread cannot join itself, so a short-lived thread does the teardown; the
   * application's driver release waits for it. */
  status = gpuhal__thread_create(NULL, gpuhal__device_reaper_main, device, "gpuhal-reaper");
  if (status) {
    gpuhal__log(device->logger, GPUHAL_LOG_ERROR, "device %d: %s; it leaks", device->ordinal,
                gpuhal_status_message(status));
    gpuhal_status_free(status);
    gpuhal__device_teardown_done(driver);
  }
}

GPUHAL__PRIVATE void gpuhal__device_release_ref(gpuhal_device_t* device) {
  gpuhal_driver_t* driver = device->driver;
  if (!gpuhal__object_release(&device->header)) return;
  /* the teardown joins the device's threads, which a forked child does not have */
  if (gpuhal__release_in_other_process(driver, "releasing the device's last reference")) return;
  gpuhal__mutex_lock(&driver->devices_mutex);
  driver->teardowns++;
  gpuhal__mutex_unlock(&driver->devices_mutex);
  gpuhal__device_teardown(device);
}

GPUHAL__PRIVATE void gpuhal__worker_hand_off(gpuhal_device_t* device, gpuhal__task_t* task) {
  gpuhal_driver_t* driver = device->driver;
  gpuhal__mutex_lock(&driver->devices_mutex); /* the count and the reference together (below) */
  gpuhal__device_retain_ref(device);
  device->handoffs++;
  gpuhal__mutex_unlock(&driver->devices_mutex);
  gpuhal__worker_post(device, task);
}

/* The count and the reference go together, under devices_mutex, with the teardown counted
 * there when the reference is the last: a settle waiting for the device
 * (gpuhal__driver_has_unsettled_device) sees either the hand-off or the teardown, never a
 * moment with neither. The reference held the device, and the device the driver, up to
 * here. A hand-off runs on the device's worker, which a forked child does not have. */
GPUHAL__PRIVATE void gpuhal__worker_hand_off_done(gpuhal_device_t* device) {
  gpuhal_driver_t* driver = device->driver;
  int last;
  gpuhal__mutex_lock(&driver->devices_mutex);
  device->handoffs--;
  last = gpuhal__object_release(&device->header);
  if (last) driver->teardowns++;
  gpuhal__cond_broadcast(&driver->devices_cond);
  gpuhal__mutex_unlock(&driver->devices_mutex);
  if (last) gpuhal__device_teardown(device); /* on its worker: a reaper does it */
}

/* A release beyond the application's own references (a second release of a device whose
 * buffers still hold it) is refused: taking a buffer's reference would tear the device
 * down under that buffer, whose own release would then wait on a stopped worker. */
GPUHAL_API void gpuhal_device_release(gpuhal_device_t* device) {
  gpuhal_driver_t* driver;
  uint64_t settle; /* gpuhal__driver_settle_begin: 0, or the settle begun */
  if (!gpuhal__object_is_live(device, GPUHAL__MAGIC_DEVICE)) return;
  driver = device->driver;
  if (gpuhal__release_in_other_process(driver, "gpuhal_device_release")) return;
  if (!gpuhal__object_user_release(&device->header)) {
    gpuhal__log(device->logger, GPUHAL_LOG_ERROR,
                "gpuhal_device_release: device %d was released more times than it was created and retained; "
                "this release is ignored",
                device->ordinal);
    return;
  }
  settle = gpuhal__driver_settle_begin(driver);
  gpuhal__device_release_ref(device);
  gpuhal__driver_settle_end(driver, settle);
}

GPUHAL_API gpuhal_status_t gpuhal_device_info(gpuhal_device_t* device, gpuhal_device_info_t* out_info) {
  GPUHAL__CHECK_HANDLE(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG(out_info != NULL, "out_info", "must not be NULL");
  *out_info = device->info;
  return NULL;
}

GPUHAL_API uint32_t gpuhal_device_queue_count(gpuhal_device_t* device) {
  if (!gpuhal__object_is_live(device, GPUHAL__MAGIC_DEVICE)) return 0;
  return device->queue_count;
}

GPUHAL_API gpuhal_driver_t* gpuhal_device_driver(gpuhal_device_t* device) {
  if (!gpuhal__object_is_live(device, GPUHAL__MAGIC_DEVICE)) return NULL;
  return device->driver;
}
