/* device: the driver (loaded libraries, device enumeration and info) and devices (a
 * retained primary context, a worker thread that keeps it current, one non-blocking
 * stream per queue). */

/* ---------------------------------------------------------------- driver ---- */
typedef struct gpuhal_driver_s gpuhal_driver_t;
typedef struct gpuhal_device_s gpuhal_device_t;

typedef struct gpuhal_driver_options_t {
  const char* cuda_library;     /* NULL: $GPUHAL_CUDA_LIBRARY, else libcuda.so.1, then libcuda.so */
  const char* nccl_library;     /* NULL: $GPUHAL_NCCL_LIBRARY, else libnccl.so.2, then libnccl.so; NCCL is optional */
  gpuhal_allocator_t allocator; /* zeroed: malloc/free */
  gpuhal_log_level_t log_level; /* GPUHAL_LOG_NONE(0): from $GPUHAL_LOG, else GPUHAL_LOG_WARN */
  gpuhal_log_fn_t log_fn;       /* NULL: stderr */
  void* log_user;
  const char* trace_path; /* reserved for tracing: NULL = $GPUHAL_TRACE */
  /* GPU-resident timeline values where every device has 64-bit stream memory operations
   * (GPUHAL_FEATURE_SEMAPHORE_MEMOPS says whether they are on): 0 = on where supported, or
   * as $GPUHAL_SEMAPHORE_MEMOPS says ("0" off, "1" on); < 0 = off (recorded events carry
   * every value, "the event path"); > 0 = on where supported, whatever the environment.
   * See README, "Semaphores in device memory". */
  int semaphore_memops;
} gpuhal_driver_options_t;

/* Loads the CUDA driver (and NCCL when present) and counts the devices. `options` may be
 * NULL for defaults. A library that will not load, or lacks a required symbol, gives
 * UNAVAILABLE saying what was tried or what is missing. No devices is not an error. */
GPUHAL_API gpuhal_status_t gpuhal_driver_create(const gpuhal_driver_options_t* options, gpuhal_driver_t** out_driver);
GPUHAL_API void gpuhal_driver_retain(gpuhal_driver_t* driver);
/* Releasing NULL is a no-op. The libraries stay loaded for the life of the process. */
GPUHAL_API void gpuhal_driver_release(gpuhal_driver_t* driver);
GPUHAL_API gpuhal_status_t gpuhal_driver_device_count(gpuhal_driver_t* driver, int* out_count);

typedef struct gpuhal_device_info_t {
  int ordinal;
  char name[256];
  uint8_t uuid[16];
  char pci_bus_id[32]; /* "0000:65:00.0" */
  int compute_capability_major, compute_capability_minor;
  int sm_count;
  uint64_t total_memory;
  int max_threads_per_block;
  int max_block_dim[3];
  int max_grid_dim[3];
  int max_shared_memory_per_block;
  int max_shared_memory_per_block_optin;
  int warp_size;
  int l2_cache_size;
  int async_engine_count;
  int memory_pools_supported; /* the device and the loaded driver both support stream-ordered pools */
  int managed_memory;
  int concurrent_managed_access;
  int unified_addressing;
  int graphs_supported;
  int driver_version; /* e.g. 12040 for CUDA 12.4 */
} gpuhal_device_info_t;

/* Properties of device `ordinal` (0 <= ordinal < count); needs no device object. */
GPUHAL_API gpuhal_status_t gpuhal_driver_device_info(gpuhal_driver_t* driver, int ordinal,
                                                     gpuhal_device_info_t* out_info);

typedef enum gpuhal_feature_e {
  GPUHAL_FEATURE_MEMORY_POOLS,      /* stream-ordered allocation (cuMemPool*, cuMemAllocFromPoolAsync) */
  GPUHAL_FEATURE_KERNEL_PARAM_INFO, /* kernel parameter checks (cuFuncGetParamInfo) */
  GPUHAL_FEATURE_PEER_ACCESS,       /* peer copies between devices */
  GPUHAL_FEATURE_CONTEXT_CREATE,    /* non-primary contexts (cuCtxCreate) */
  GPUHAL_FEATURE_NCCL,              /* collectives: NCCL loaded */
  /* Timeline values live in pinned, device-mapped memory: GPU work waits on a value that is
   * not submitted yet with cuStreamWaitValue64 and is released by whoever signals it, with
   * no host round trip. Needs 64-bit stream memory operations and mapped host memory on
   * every device of the driver; otherwise such work waits on the host until its signal is
   * submitted (the event path), with the same semantics. */
  GPUHAL_FEATURE_SEMAPHORE_MEMOPS
} gpuhal_feature_t;

/* 1 when the optional symbols a feature needs all resolved; 0 otherwise (or bad input). */
GPUHAL_API int gpuhal_driver_has_feature(gpuhal_driver_t* driver, gpuhal_feature_t feature);
/* The CUDA library that was loaded (as it was named to dlopen); "" for bad input. */
GPUHAL_API const char* gpuhal_driver_cuda_library(gpuhal_driver_t* driver);

/* ---------------------------------------------------------------- device ---- */
/* A compile hook (gpuhal_device_params_t.compile_fn): replaces gpuhal's PTX -> cubin step
 * for every PTX image the device loads. It gets the PTX text (NUL-terminated; ptx_size
 * excludes the NUL) and the device's compute capability, and returns a cubin (or fatbin)
 * in *out_cubin / *out_cubin_size, or a status (the load fails with it). The cubin stays
 * the hook's: gpuhal copies what it needs and then calls compile_free_fn(user, cubin) once
 * (when compile_free_fn is NULL the cubin must be static). Runs on the loading thread, with
 * no gpuhal lock held, possibly on several threads at once (for different images). See
 * module_cache.h. */
typedef gpuhal_status_t (*gpuhal_compile_fn_t)(void* user, const void* ptx, size_t ptx_size, int cc_major, int cc_minor,
                                               void** out_cubin, size_t* out_cubin_size);
typedef void (*gpuhal_compile_free_fn_t)(void* user, void* cubin);

/* Run-time tuning of the queue (gpuhal_device_params_t.tuning). Zero in any field means its
 * documented default; a negative time means "none" where that is allowed. */
typedef struct gpuhal_queue_tuning_t {
  /* A host wait polls its value's event this long before it sleeps between polls
   * (0 = 200 us; < 0 = do not spin). */
  int64_t host_wait_spin_ns;
  /* The longest sleep between polls of a host wait (0 = 1 ms). */
  int64_t host_wait_max_sleep_ns;
  /* Issued work ages this long before the completion thread looks at it, so it handles
   * many actions per look (0 = 100 us; < 0 = look at once). Host calls, device idle waits
   * and release cut it short; nothing's promptness depends on it. */
  int64_t completion_min_age_ns;
  /* The longest sleep of the completion thread between polls of unfinished work
   * (0 = 200 us). */
  int64_t completion_max_sleep_ns;
  /* A submitter that issues on its own thread retires completed work itself once this many
   * actions of its queue are in flight (0 = 48; < 0 = never: harvesting off). */
  int32_t harvest_min;
  /* 1: every action is issued by the device's worker thread, never by the submitter. */
  int32_t no_caller_issue;
  /* The memop path: at most this many streams of the GPU (all gpuhal devices of its ordinal
   * together: they share its context) may hold work that waits on the GPU for a value not
   * reached yet (0 = CUDA_DEVICE_MAX_CONNECTIONS / 4, i.e. 2 by default; < 0 = none, such
   * work waits on the host as on the event path). CUDA runs a context's
   * streams on CUDA_DEVICE_MAX_CONNECTIONS hardware queues (default 8); with more than a few
   * of them parked on a wait, other streams' work queues up behind it, and work the parked
   * value depends on never runs (tools/probe/alias_probe.c). */
  int32_t gpu_parked_max;
  /* The memop path: room for this many more streams and graph executables that gpuhal keeps
   * in a GPU's context while work waits there for a value (0 = 64; < 0 = none: parking is
   * then bounded by gpu_parked_max only). CUDA grows its per-context store of streams and
   * executables in steps, and a step waits for every stream of the context, parked ones
   * too (tools/probe/live_probe.c); gpuhal grows it ahead while nothing is parked and parks
   * nothing while less room is left. */
  int32_t park_headroom;
  /* The memop path: how long loading a module (an executable, or a device's own kernels)
   * waits for work of the GPU that waits there for a value, with no new such work meanwhile
   * (0 = 5 s; < 0 = not at all). CUDA loads code only into an idle context: a load made
   * while work is parked would wait for it, forever if the value is for the loading thread
   * to signal. Past this, the load fails with FAILED_PRECONDITION saying so. */
  int64_t load_parked_wait_ns;
} gpuhal_queue_tuning_t;

typedef struct gpuhal_device_params_t {
  uint32_t queue_count;         /* 0 = 1; each queue is one non-blocking stream */
  const char* module_cache_dir; /* disk cache of compiled PTX; NULL = $GPUHAL_CACHE_DIR; "" = none */
  uint64_t module_cache_max_entries, module_cache_max_bytes; /* 0 = defaults (1024, 256 MiB of images) */
  uint64_t pool_release_threshold;                           /* bytes the stream-ordered pool keeps; 0 = UINT64_MAX */
  uint64_t module_cache_disk_max_bytes;                      /* bound of the cache directory; 0 = 1 GiB */
  gpuhal_compile_fn_t compile_fn;                            /* NULL: the driver compiles PTX */
  gpuhal_compile_free_fn_t compile_free_fn;
  void* compile_user;
  gpuhal_queue_tuning_t tuning; /* zeroed: the defaults */
  /* Most bytes the stream-ordered pool may reserve (CUmemPoolProps.maxSize, CUDA 12.2+);
   * 0 = no limit but the device's memory. */
  uint64_t pool_max_bytes;
} gpuhal_device_params_t;

#define GPUHAL_MAX_QUEUES 64

/* Opens device `ordinal`: retains its primary context and starts the device's worker
 * thread, which keeps that context current for its life. `params` may be NULL. The
 * device retains the driver. The calling thread's current context is left as it was. */
GPUHAL_API gpuhal_status_t gpuhal_device_create(gpuhal_driver_t* driver, int ordinal,
                                                const gpuhal_device_params_t* params, gpuhal_device_t** out_device);
GPUHAL_API void gpuhal_device_retain(gpuhal_device_t* device);
/* Releasing NULL is a no-op. The last release drains the device's queues, stops its
 * worker and releases the primary context. */
GPUHAL_API void gpuhal_device_release(gpuhal_device_t* device);
GPUHAL_API gpuhal_status_t gpuhal_device_info(gpuhal_device_t* device, gpuhal_device_info_t* out_info);
/* The number of queues (streams); 0 for bad input. */
GPUHAL_API uint32_t gpuhal_device_queue_count(gpuhal_device_t* device);
/* The driver the device came from (not retained); NULL for bad input. */
GPUHAL_API gpuhal_driver_t* gpuhal_device_driver(gpuhal_device_t* device);

/* ---- gpuhal:implementation ---- */

#define GPUHAL__MAGIC_DRIVER 0x47445256u /* "GDRV" */
#define GPUHAL__MAGIC_DEVICE 0x47444556u /* "GDEV" */

/* GPUHAL__CHECK_OBJECT, with a NULL handle always returning right here: otherwise gcc's
 * flow analysis follows a literal NULL past the check (the status could be NULL as far as
 * it knows) and warns (-Wstringop-overflow) at the first field access. */
#define GPUHAL__CHECK_HANDLE(obj, magic)                                    \
  do {                                                                      \
    if (!(obj)) return gpuhal__object_check(NULL, (magic), __func__, #obj); \
    GPUHAL__CHECK_OBJECT(obj, magic);                                       \
  } while (0)

/* What gpuhal devices of one ordinal share: its primary context. Atomic fields. */
typedef struct gpuhal__ordinal_s {
  /* Side streams holding work that may wait on the GPU for a value (the bound is
   * gpuhal_queue_tuning_t.gpu_parked_max, queue.h). */
  int32_t parked;
  /* Streams and graph executables gpuhal holds in the context, and how many the context is
   * known to have held at once: CUDA keeps a store of that size (gpuhal__device_room_take). */
  int32_t room_live;
  int32_t room;
  int32_t room_growing; /* 1 while a thread grows the room; nothing parks meanwhile */
  int32_t room_warned;  /* the warning that a creation may wait for parked work was logged */
  /* Threads about to load a module into the context: nothing parks while one waits for
   * the parked streams to drain (gpuhal__device_park_pause). */
  int32_t park_paused;
} gpuhal__ordinal_t;

struct gpuhal_driver_s {
  gpuhal__object_t header;
  gpuhal_allocator_t allocator;
  gpuhal__object_pool_t objects; /* the memory of every object of this driver (base.h) */
  gpuhal__logger_t logger;
  gpuhal__cuda_symbols_t cu;
  gpuhal__nccl_symbols_t nccl;
  void* cuda_handle;
  void* nccl_handle;
  char cuda_library[GPUHAL__LIBRARY_PATH_MAX];
  char nccl_library[GPUHAL__LIBRARY_PATH_MAX]; /* "" without NCCL */
  char trace_path[GPUHAL__LIBRARY_PATH_MAX];   /* "" without tracing */
  int driver_version;
  int device_count;
  uint32_t features;             /* bit (1 << gpuhal_feature_t) */
  struct gpuhal__trace_s* trace; /* trace.h: NULL when tracing is off */
  /* Live devices and the teardown threads of devices released on their own worker: the
   * application's gpuhal_driver_release waits for those, so a program that waited for its
   * work, released everything and exits leaves nothing behind (see gpuhal_driver_release). */
  gpuhal__mutex_t devices_mutex;
  gpuhal__cond_t devices_cond;
  gpuhal__list_node_t devices; /* gpuhal_device_s.driver_link */
  int reapers;                 /* device teardown threads still running */
  /* Semaphore value words (semaphore.h): slabs of pinned, device-mapped memory, made on
   * first use in the primary context of the device that needed one; the driver keeps that
   * context retained until it frees the slab. */
  int memops; /* GPUHAL_FEATURE_SEMAPHORE_MEMOPS */
  /* Queue work in flight that may wait on the GPU for a value, on any device, and the calls
   * that wait for a whole context put off meanwhile (memory.h, gpuhal__device_sync_call).
   * Driver-wide: gpuhal devices of one ordinal share its primary context. */
  gpuhal__mutex_t parked_mutex;
  int32_t gpu_waits;
  /* Per ordinal: gpuhal devices of one ordinal share its primary context. */
  gpuhal__ordinal_t* ordinals;
  struct gpuhal__deferred_call_s* deferred;
  gpuhal__mutex_t words_mutex;
  struct gpuhal__word_slab_s* word_slabs;
  uint64_t* free_words; /* each free word holds the address of the next */
};

/* ---- the worker: one thread per device, its context current for its whole life ---- */

/* A unit of work for the worker. Caller-owned (no allocation on post); `queued` makes a
 * second post of a task that is still waiting a no-op, so a subsystem can keep one "pump"
 * task and post it whenever something changes. `queued` is cleared just before `fn` runs,
 * so `fn` (or anyone) may post the task again. */
typedef struct gpuhal__task_s {
  gpuhal__list_node_t node;
  void (*fn)(struct gpuhal__task_s* task);
  int queued; /* guarded by the worker's mutex */
} gpuhal__task_t;

typedef struct gpuhal__worker_s {
  gpuhal__thread_t thread;
  int started;
  gpuhal__mutex_t mutex;
  gpuhal__cond_t cond;      /* a task arrived, or stop */
  gpuhal__cond_t done_cond; /* a worker_call finished, or the thread started */
  gpuhal__list_node_t tasks;
  int stop;
  int start_done;
  gpuhal_status_t start_status;
} gpuhal__worker_t;

struct gpuhal_device_s {
  gpuhal__object_t header;         /* user_refs: the application's, which gpuhal_driver_release settles */
  int settled;                     /* the driver release has settled it (under driver->devices_mutex) */
  gpuhal__list_node_t driver_link; /* in driver->devices while alive */
  gpuhal_driver_t* driver;         /* retained */
  const gpuhal__cuda_symbols_t* cu;
  const gpuhal_allocator_t* allocator;
  const gpuhal__logger_t* logger;
  int ordinal;
  CUdevice cu_device;
  CUcontext context; /* the primary context, retained */
  int context_retained;
  gpuhal_device_info_t info;
  gpuhal_device_params_t params; /* defaults filled in; module_cache_dir is an owned copy or NULL */
  uint32_t queue_count;
  CUstream* streams; /* queue_count non-blocking streams, created on the worker */
  gpuhal__worker_t worker;
  int lost; /* a sticky error was seen: the context is unusable */
  struct gpuhal__memory_state_s* memory;
  /* Subsystems of later modules (NULL until they exist). */
  struct gpuhal__queue_state_s* queue_state;
  struct gpuhal__module_cache_s* module_cache;
  struct gpuhal__trace_device_s* trace; /* trace.h: NULL when tracing is off */
  /* Memop path: 1 when the built-in kernels did not load at creation (builtin_kernels.h),
   * so that nothing of this device parks on a GPU value wait (a later load would wait for
   * the parked work). */
  int no_gpu_park;
};

/* ---- hooks: the calls that go up the module order ----
 * A device is created before the subsystems that hang off it (memory, the module cache,
 * the queue, tracing) are compiled, and the queue and command buffers call tracing, which
 * comes last. Every such call goes through this one table, which hooks.h (the last module)
 * defines and gpuhal__hooks() returns; calls down the order are plain calls. The table is
 * constant, so compilers call through it directly. Creation order: trace, memory, module
 * cache, queue, then the built-in kernels; destruction runs the other way, the queue first,
 * so that it can drain while everything it uses is still there. */
struct gpuhal__action_s;
struct gpuhal__cmd_s;
struct gpuhal_semaphore_list_t; /* semaphore.h: passed by pointer, so device.h needs no later module */
typedef struct gpuhal__hooks_s {
  /* the driver's */
  gpuhal_status_t (*trace_create)(gpuhal_driver_t* driver);
  void (*trace_destroy)(gpuhal_driver_t* driver);         /* writes the trace file */
  void (*driver_flush_deferred)(gpuhal_driver_t* driver); /* memory.h */
  void (*semaphore_words_free)(gpuhal_driver_t* driver);  /* semaphore.h */
  /* each device's subsystems; every destroy accepts one whose create never ran or failed */
  gpuhal_status_t (*trace_device_create)(gpuhal_device_t* device);
  void (*trace_device_destroy)(gpuhal_device_t* device);
  gpuhal_status_t (*memory_state_create)(gpuhal_device_t* device);
  void (*memory_state_destroy)(gpuhal_device_t* device);
  gpuhal_status_t (*module_cache_create)(gpuhal_device_t* device);
  void (*module_cache_destroy)(gpuhal_device_t* device);
  gpuhal_status_t (*queue_state_create)(gpuhal_device_t* device);
  void (*queue_state_destroy)(gpuhal_device_t* device);
  void (*command_buffer_device_ready)(gpuhal_device_t* device); /* loads the built-in kernels */
  void (*queue_settle)(gpuhal_device_t* device, gpuhal_timeout_t timeout);
  int (*queue_owns_thread)(gpuhal_device_t* device);
  /* tracing, from the queue and STREAM command buffers (called through GPUHAL__TRACE) */
  uint64_t (*trace_submit_begin)(gpuhal_device_t* device, struct gpuhal__action_s* a,
                                 const struct gpuhal_semaphore_list_t* wait,
                                 const struct gpuhal_semaphore_list_t* signal);
  void (*trace_submit_end)(gpuhal_device_t* device, uint32_t queue, const char* name, uint64_t span, int64_t t0);
  int64_t (*trace_issue_begin)(gpuhal_device_t* device, struct gpuhal__action_s* a, CUstream stream);
  void (*trace_issue_end)(gpuhal_device_t* device, struct gpuhal__action_s* a, CUstream stream, int64_t t0, int failed);
  void (*trace_action_complete)(gpuhal_device_t* device, struct gpuhal__action_s* a);
  void (*trace_host_call)(gpuhal_device_t* device, struct gpuhal__action_s* a, int64_t t0);
  void (*trace_action_release)(gpuhal_device_t* device, struct gpuhal__action_s* a);
  void (*trace_command)(gpuhal_device_t* device, CUstream stream, const struct gpuhal__cmd_s* cmd);
} gpuhal__hooks_t;

/* The table (hooks.h): the one declaration of a function defined in a later module (the
 * queue's five files, one module, declare two of each other's). */
static const gpuhal__hooks_t* gpuhal__hooks(void);

/* The driver's and each device's trace state are NULL when tracing is off, so every trace
 * hook is called as `GPUHAL__TRACE(owner, call)`: one pointer test. */
#define GPUHAL__TRACE(owner, call) \
  do {                             \
    if ((owner)->trace) call;      \
  } while (0)

/* 1 when the calling thread is `device`'s worker. */
static int gpuhal__on_worker(gpuhal_device_t* device) {
  return device->worker.started && pthread_equal(pthread_self(), device->worker.thread);
}

/* Queues `task` to run on the worker (FIFO); a task already queued is not queued twice. */
static void gpuhal__worker_post(gpuhal_device_t* device, gpuhal__task_t* task) {
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

/* Runs fn(arg) on the worker, waits, and returns its status. Called on the worker itself
 * it runs fn at once (waiting for itself would never end). */
static gpuhal_status_t gpuhal__worker_call(gpuhal_device_t* device, gpuhal_status_t (*fn)(void* arg), void* arg) {
  gpuhal__worker_call_t call;
  gpuhal__worker_t* w = &device->worker;
  if (gpuhal__on_worker(device)) return fn(arg);
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
    gpuhal__mutex_unlock(&w->mutex);
    task->fn(task);
    gpuhal__mutex_lock(&w->mutex);
  }
  gpuhal__mutex_unlock(&w->mutex);
}

static void* gpuhal__worker_main(void* arg) {
  gpuhal_device_t* device = (gpuhal_device_t*)arg;
  gpuhal__worker_t* w = &device->worker;
  gpuhal_status_t status = GPUHAL__CU(device->cu, cuCtxSetCurrent, (device->context));
  gpuhal__mutex_lock(&w->mutex);
  w->start_status = status;
  w->start_done = 1;
  gpuhal__cond_broadcast(&w->done_cond);
  gpuhal__mutex_unlock(&w->mutex);
  if (status) return NULL;
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

/* ---- running on the device's context from any thread ---- */
typedef struct gpuhal__context_scope_s {
  CUcontext saved; /* what was current before */
  int pushed;      /* 1 when enter pushed the device's context */
} gpuhal__context_scope_t;

/* Makes the device's context current on the calling thread, pushing it only when it is
 * not already current (so the worker, and nested scopes, pay one cuCtxGetCurrent). */
static gpuhal_status_t gpuhal__context_enter(gpuhal_device_t* device, gpuhal__context_scope_t* scope) {
  CUcontext current = NULL;
  scope->saved = NULL;
  scope->pushed = 0;
  GPUHAL__CU_RETURN(device->cu, cuCtxGetCurrent, (&current));
  scope->saved = current;
  if (current == device->context) return NULL;
  GPUHAL__CU_RETURN(device->cu, cuCtxPushCurrent, (device->context));
  scope->pushed = 1;
  return NULL;
}

/* Makes `context` current for a cleanup that must happen even when a push fails: pushes
 * it, or else sets it (gpuhal__context_pop_any then sets the caller's back). 0 when neither
 * worked. Any thread. */
static int gpuhal__context_push_any(const gpuhal__cuda_symbols_t* cu, CUcontext context,
                                    gpuhal__context_scope_t* scope) {
  if (cu->cuCtxGetCurrent(&scope->saved) != CUDA_SUCCESS) scope->saved = NULL;
  scope->pushed = cu->cuCtxPushCurrent(context) == CUDA_SUCCESS;
  return scope->pushed || cu->cuCtxSetCurrent(context) == CUDA_SUCCESS;
}

static void gpuhal__context_pop_any(const gpuhal__cuda_symbols_t* cu, gpuhal__context_scope_t* scope) {
  CUcontext popped = NULL;
  if (!scope->pushed || cu->cuCtxPopCurrent(&popped) != CUDA_SUCCESS) cu->cuCtxSetCurrent(scope->saved);
}

/* Restores exactly what context_enter found. */
static void gpuhal__context_leave(gpuhal_device_t* device, gpuhal__context_scope_t* scope) {
  CUcontext popped = NULL;
  gpuhal_status_t status;
  if (!scope->pushed) return;
  scope->pushed = 0;
  status = GPUHAL__CU(device->cu, cuCtxPopCurrent, (&popped));
  if (status) {
    /* The caller's current context must come back even so: set it directly. */
    CUresult set = device->cu->cuCtxSetCurrent(scope->saved);
    if (set == CUDA_SUCCESS) status = gpuhal_status_annotate(status, "the caller's context was set back instead");
    gpuhal__log(device->logger, GPUHAL_LOG_ERROR, "restoring the caller's context: %s", gpuhal_status_message(status));
    gpuhal_status_free(status);
  }
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
  logger.level = options->log_level;
  if (logger.level == GPUHAL_LOG_NONE)
    logger.level = gpuhal__log_level_parse(gpuhal__getenv("GPUHAL_LOG"), GPUHAL_LOG_WARN);
  logger.fn = options->log_fn;
  logger.user = options->log_user;
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
static gpuhal_status_t gpuhal__driver_alloc(const gpuhal_allocator_t* allocator, gpuhal_driver_t** out) {
  if (allocator->alloc == gpuhal__default_alloc)
    return gpuhal__object_alloc(gpuhal__process_object_pool(), GPUHAL__MAGIC_DRIVER, sizeof(gpuhal_driver_t),
                                "gpuhal_driver_t", (void**)out);
  return gpuhal__alloc_zeroed(allocator, sizeof(gpuhal_driver_t), "gpuhal_driver_t", (void**)out);
}
static void gpuhal__driver_free(gpuhal_driver_t* driver) {
  gpuhal_allocator_t allocator = driver->allocator;
  if (allocator.alloc == gpuhal__default_alloc) {
    gpuhal__object_free(gpuhal__process_object_pool(), GPUHAL__MAGIC_DRIVER, driver);
  } else {
    gpuhal__free(&allocator, driver);
  }
}

static void gpuhal__driver_destroy(gpuhal_driver_t* driver) {
  gpuhal__hooks()->trace_destroy(driver);         /* trace hook: writes the file */
  gpuhal__hooks()->driver_flush_deferred(driver); /* no device is left: nothing waits on the GPU */
  gpuhal__mutex_destroy(&driver->parked_mutex);
  if (driver->ordinals) {
    int i;
    for (i = 0; i < driver->device_count; ++i)
      GPUHAL_ASSERT(driver->ordinals[i].parked == 0 && driver->ordinals[i].room_live == 0);
  }
  gpuhal__free(&driver->allocator, driver->ordinals);
  gpuhal__hooks()->semaphore_words_free(driver);
  gpuhal__mutex_destroy(&driver->words_mutex);
  gpuhal__object_pool_deinit(&driver->objects);
  gpuhal__cond_destroy(&driver->devices_cond);
  gpuhal__mutex_destroy(&driver->devices_mutex);
  /* The CUDA driver and NCCL start threads of their own: unloading them under those
   * threads is not safe, so the libraries stay loaded (dlopen counts references, so
   * creating drivers again costs nothing). */
  driver->cuda_handle = NULL;
  driver->nccl_handle = NULL;
  gpuhal__driver_free(driver);
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
  allocator = gpuhal__allocator_resolve(&options->allocator);
  GPUHAL__RETURN_IF_ERROR(gpuhal__driver_alloc(&allocator, &driver));
  gpuhal__object_init(&driver->header, GPUHAL__MAGIC_DRIVER);
  gpuhal__object_pool_init(&driver->objects, &allocator);
  gpuhal__mutex_init(&driver->devices_mutex);
  gpuhal__mutex_init(&driver->words_mutex);
  gpuhal__mutex_init(&driver->parked_mutex);
  gpuhal__cond_init(&driver->devices_cond);
  gpuhal__list_init(&driver->devices);
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
  driver->features = gpuhal__driver_features(driver);
  trace = options->trace_path ? options->trace_path : gpuhal__getenv("GPUHAL_TRACE");
  if (trace) snprintf(driver->trace_path, sizeof(driver->trace_path), "%s", trace);
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
  if (gpuhal__object_is_live(driver, GPUHAL__MAGIC_DRIVER)) gpuhal__object_user_retain(&driver->header);
}

/* gpuhal's own driver references (devices, semaphores): no waiting. */
static void gpuhal__driver_retain_ref(gpuhal_driver_t* driver) { gpuhal__object_retain(&driver->header); }
static void gpuhal__driver_release_ref(gpuhal_driver_t* driver) {
  if (gpuhal__object_release(&driver->header)) gpuhal__driver_destroy(driver);
}

/* Takes a reference unless the count already reached zero (the device is being torn down). */
static int gpuhal__object_try_retain(gpuhal__object_t* o) {
  int32_t n = gpuhal__atomic_load(&o->refcount);
  while (n > 0)
    if (gpuhal__atomic_cas(&o->refcount, &n, n + 1)) return 1;
  return 0;
}

/* How long the application's driver release waits for released devices to settle. */
#ifndef GPUHAL_DRIVER_RELEASE_SETTLE_NS
#define GPUHAL_DRIVER_RELEASE_SETTLE_NS (30ll * 1000000000)
#endif

static void gpuhal__device_release_ref(gpuhal_device_t* device);

/* Devices the application has released may live on for a moment: queue work that finished
 * still holds references to what it used until the worker drops them, and the last of
 * those may tear the device down on a thread of its own. Settle those devices and wait
 * for their teardown threads, so that the application's last release really ends gpuhal's
 * work. Work still blocked on a semaphore is left alone (the device stays until it runs or
 * its release aborts it); every wait is bounded. */
static void gpuhal__driver_settle_released_devices(gpuhal_driver_t* driver) {
  gpuhal_timeout_t timeout = gpuhal_timeout_relative_ns(GPUHAL_DRIVER_RELEASE_SETTLE_NS);
  for (;;) {
    gpuhal_device_t* device = NULL;
    gpuhal__list_node_t* n;
    gpuhal__mutex_lock(&driver->devices_mutex);
    for (n = driver->devices.next; n != &driver->devices && !device; n = n->next) {
      gpuhal_device_t* d = GPUHAL__CONTAINER_OF(n, gpuhal_device_t, driver_link);
      if (gpuhal__atomic_load(&d->header.user_refs) == 0 && !d->settled && gpuhal__object_try_retain(&d->header)) {
        d->settled = 1;
        device = d;
      }
    }
    gpuhal__mutex_unlock(&driver->devices_mutex);
    if (!device) break;
    gpuhal__hooks()->queue_settle(device, timeout);
    gpuhal__device_release_ref(device); /* often the last: the teardown runs right here */
  }
  gpuhal__mutex_lock(&driver->devices_mutex);
  while (driver->reapers > 0)
    if (!gpuhal__cond_wait_until(&driver->devices_cond, &driver->devices_mutex, timeout)) break;
  gpuhal__mutex_unlock(&driver->devices_mutex);
}

GPUHAL_API void gpuhal_driver_release(gpuhal_driver_t* driver) {
  if (!gpuhal__object_is_live(driver, GPUHAL__MAGIC_DRIVER)) return;
  if (!gpuhal__object_user_release(&driver->header)) {
    gpuhal__log_extra_release(&driver->logger, __func__, "the driver");
    return;
  }
  gpuhal__driver_settle_released_devices(driver);
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
  GPUHAL__ATTR_MEMORY_POOLS_SUPPORTED = 115
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

static gpuhal_status_t gpuhal__device_check_params(const gpuhal_device_params_t* params) {
  if (!params) return NULL;
  if (params->queue_count > GPUHAL_MAX_QUEUES)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_device_create: argument 'params->queue_count' is %u, must be at most %d",
                              (unsigned)params->queue_count, GPUHAL_MAX_QUEUES);
  return NULL;
}

/* Copies `params` with the defaults filled in; module_cache_dir becomes an owned copy. */
static gpuhal_status_t gpuhal__device_resolve_params(gpuhal_device_t* device, const gpuhal_device_params_t* params) {
  const char* cache_dir;
  if (params) device->params = *params;
  if (device->params.queue_count == 0) device->params.queue_count = 1;
  if (device->params.pool_release_threshold == 0) device->params.pool_release_threshold = UINT64_MAX;
  cache_dir = device->params.module_cache_dir ? device->params.module_cache_dir : gpuhal__getenv("GPUHAL_CACHE_DIR");
  device->params.module_cache_dir = NULL;
  if (cache_dir) {
    char* copy = gpuhal__strdup(device->allocator, cache_dir);
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
  if (n <= 0 || gpuhal__alloc_zeroed(device->allocator, sizeof(CUstream) * (size_t)n, "room streams", (void**)&held))
    return;
  while (made < n && device->cu->cuStreamCreate(&held[made], CU_STREAM_NON_BLOCKING) == 0) made++;
  live = gpuhal__atomic_load(&o->room_live);
  for (i = 0; i < made; ++i) device->cu->cuStreamDestroy(held[i]);
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
  }
}

/* After a stream or graph executable of gpuhal was destroyed (or its creation failed). */
static void gpuhal__device_room_give(gpuhal_device_t* device) {
  gpuhal__atomic_sub(&device->driver->ordinals[device->ordinal].room_live, 1);
}

/* 1 when work of the device may park on the GPU as far as the room and module loads go;
 * called with a park reservation of the ordinal held. */
static int gpuhal__device_allows_park(const gpuhal_device_t* device) {
  gpuhal__ordinal_t* o = &device->driver->ordinals[device->ordinal];
  int32_t headroom = gpuhal__device_room_headroom(device);
  /* the reservation before the look (gpuhal__device_room_refill, gpuhal__device_park_pause) */
  gpuhal__atomic_fence();
  if (gpuhal__atomic_load(&o->room_growing) || gpuhal__atomic_load(&o->park_paused)) return 0;
  return headroom == 0 || gpuhal__atomic_load(&o->room) - gpuhal__atomic_load(&o->room_live) >= headroom;
}

/* Before a call that waits for an idle context and cannot be put off (a module load): stops
 * new parks on the device's ordinal and waits, up to tuning.load_parked_wait_ns, for those
 * parked to finish. FAILED_PRECONDITION naming `what` when they did not: the call would
 * have waited for them too, forever if their values are for this thread to signal. Every
 * call is paired with gpuhal__device_park_resume, whatever it returned. */
static gpuhal_status_t gpuhal__device_park_pause(gpuhal_device_t* device, const char* what) {
  gpuhal__ordinal_t* o = &device->driver->ordinals[device->ordinal];
  int64_t limit = device->params.tuning.load_parked_wait_ns, start;
  gpuhal__backoff_t backoff = gpuhal__backoff(20000, 1000000);
  int32_t parked;
  if (!device->driver->memops) return NULL;
  gpuhal__atomic_add(&o->park_paused, 1);
  gpuhal__atomic_fence(); /* the pause before the look (gpuhal__device_allows_park) */
  parked = gpuhal__atomic_load(&o->parked);
  if (parked == 0) return NULL;
  if (limit == 0) limit = 5000000000LL;
  start = gpuhal_now_ns();
  while (limit > 0 && (parked = gpuhal__atomic_load(&o->parked)) > 0 && gpuhal_now_ns() - start < limit) {
    gpuhal__backoff_sleep(&backoff);
  }
  if (parked == 0) return NULL;
  return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                            "%s on device %d: %d of its streams hold queue work that waits on the GPU for semaphore "
                            "values not reached after %.3f s, and CUDA loads code only into an idle context (the load "
                            "would wait for that work; forever if this thread is to signal the values): signal them "
                            "first, or create executables before queueing work on values the host signals",
                            what, device->ordinal, (int)parked, limit > 0 ? (double)limit / 1e9 : 0.0);
}
static void gpuhal__device_park_resume(gpuhal_device_t* device) {
  if (device->driver->memops) gpuhal__atomic_sub(&device->driver->ordinals[device->ordinal].park_paused, 1);
}

/* cuStreamCreate with the room counted. */
static gpuhal_status_t gpuhal__device_stream_create(gpuhal_device_t* device, CUstream* out) {
  gpuhal_status_t status;
  gpuhal__device_room_take(device);
  status = GPUHAL__CU(device->cu, cuStreamCreate, (out, CU_STREAM_NON_BLOCKING));
  if (status)
    gpuhal__device_room_give(device);
  else
    gpuhal__device_room_refill(device);
  return status;
}

/* cuStreamDestroy with the room counted (the stream is gone whatever it returns). */
static gpuhal_status_t gpuhal__device_stream_destroy(gpuhal_device_t* device, CUstream stream) {
  gpuhal_status_t status = GPUHAL__CU(device->cu, cuStreamDestroy, (stream));
  gpuhal__device_room_give(device);
  return status;
}

/* cuGraphInstantiateWithFlags with the room counted; the device's context is current. */
static gpuhal_status_t gpuhal__device_graph_instantiate(gpuhal_device_t* device, CUgraphExec* out, CUgraph graph) {
  gpuhal_status_t status;
  gpuhal__device_room_take(device);
  status = GPUHAL__CU(device->cu, cuGraphInstantiateWithFlags, (out, graph, 0));
  if (status)
    gpuhal__device_room_give(device);
  else
    gpuhal__device_room_refill(device);
  return status;
}

/* cuGraphExecDestroy with the room counted (the executable is gone whatever it returns). */
static gpuhal_status_t gpuhal__device_graph_exec_destroy(gpuhal_device_t* device, CUgraphExec exec) {
  gpuhal_status_t status = GPUHAL__CU(device->cu, cuGraphExecDestroy, (exec));
  gpuhal__device_room_give(device);
  return status;
}

static gpuhal_status_t gpuhal__device_create_streams(void* arg) {
  gpuhal_device_t* device = (gpuhal_device_t*)arg;
  uint32_t i;
  for (i = 0; i < device->queue_count; ++i)
    GPUHAL__RETURN_IF_ERROR(gpuhal__device_stream_create(device, &device->streams[i]));
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

/* Tears down whatever part of a device exists; used by release and by a failed create. */
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
  if (device->context_retained) {
    gpuhal_status_t status = GPUHAL__CU(device->cu, cuDevicePrimaryCtxRelease, (device->cu_device));
    if (status) {
      gpuhal__log(device->logger, GPUHAL_LOG_ERROR, "device %d: %s", device->ordinal, gpuhal_status_message(status));
      gpuhal_status_free(status);
    }
  }
  gpuhal__worker_deinit(&device->worker);
  gpuhal__free(device->allocator, device->streams);
  gpuhal__free(device->allocator, (void*)device->params.module_cache_dir);
  gpuhal__log(device->logger, GPUHAL_LOG_DEBUG, "device %d destroyed", device->ordinal);
  gpuhal__object_free(&driver->objects, GPUHAL__MAGIC_DEVICE, device);
  gpuhal__driver_release_ref(driver);
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

/* gpuhal's own references (buffers, command buffers, executables, channels). */
static void gpuhal__device_retain_ref(gpuhal_device_t* device) { gpuhal__object_retain(&device->header); }

GPUHAL_API void gpuhal_device_retain(gpuhal_device_t* device) {
  if (!gpuhal__object_is_live(device, GPUHAL__MAGIC_DEVICE)) return;
  gpuhal__object_user_retain(&device->header);
}

/* 1 when the calling thread is one of the device's own (its worker, or a queue thread):
 * the device's teardown joins those, so it must not run there. */
static int gpuhal__device_owns_thread(gpuhal_device_t* device) {
  if (gpuhal__on_worker(device)) return 1;
  if (gpuhal__hooks()->queue_owns_thread(device)) return 1;
  return 0;
}

static void* gpuhal__device_reaper_main(void* arg) {
  gpuhal_device_t* device = (gpuhal_device_t*)arg;
  gpuhal_driver_t* driver = device->driver;
  gpuhal__driver_retain_ref(driver); /* outlive the device's own reference */
  gpuhal__device_destroy(device);
  gpuhal__mutex_lock(&driver->devices_mutex);
  driver->reapers--;
  gpuhal__cond_broadcast(&driver->devices_cond);
  gpuhal__mutex_unlock(&driver->devices_mutex);
  gpuhal__driver_release_ref(driver);
  return NULL;
}

static void gpuhal__device_release_ref(gpuhal_device_t* device) {
  gpuhal_driver_t* driver = device->driver;
  pthread_t reaper;
  pthread_attr_t attr;
  if (!gpuhal__object_release(&device->header)) return;
  if (!gpuhal__device_owns_thread(device)) {
    gpuhal__device_destroy(device);
    return;
  }
  /* The last reference went on one of the device's own threads (the worker releasing the
   * last buffer of an already released device, a host call's function releasing the
   * device): a thread cannot join itself, so a short-lived thread does the teardown; the
   * application's driver release waits for it. */
  gpuhal__mutex_lock(&driver->devices_mutex);
  driver->reapers++;
  gpuhal__mutex_unlock(&driver->devices_mutex);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&reaper, &attr, gpuhal__device_reaper_main, device) != 0) {
    gpuhal__log(device->logger, GPUHAL_LOG_ERROR, "device %d: could not start its teardown thread; it leaks",
                device->ordinal);
    gpuhal__mutex_lock(&driver->devices_mutex);
    driver->reapers--;
    gpuhal__mutex_unlock(&driver->devices_mutex);
  }
  pthread_attr_destroy(&attr);
}

/* A release beyond the application's own references (a second release of a device whose
 * buffers still hold it) is refused: taking a buffer's reference would tear the device
 * down under that buffer, whose own release would then wait on a stopped worker. */
GPUHAL_API void gpuhal_device_release(gpuhal_device_t* device) {
  if (!gpuhal__object_is_live(device, GPUHAL__MAGIC_DEVICE)) return;
  if (!gpuhal__object_user_release(&device->header)) {
    gpuhal__log(device->logger, GPUHAL_LOG_ERROR,
                "gpuhal_device_release: device %d was released more times than it was created and retained; "
                "this release is ignored",
                device->ordinal);
    return;
  }
  gpuhal__device_release_ref(device);
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
