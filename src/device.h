/* device: the driver (loaded libraries, device enumeration and info) and devices (a
 * retained primary context, a worker thread that keeps it current, one non-blocking
 * stream per queue). */
#ifndef GPUHAL_SRC_DEVICE_H
#define GPUHAL_SRC_DEVICE_H

#include "internal.h"
#include "symbols.h"

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
  /* NVRTC for gpuhal_executable_compile, loaded on the first compile: NULL =
   * $GPUHAL_NVRTC_LIBRARY, else libnvrtc.so.13, libnvrtc.so.12, then libnvrtc.so. */
  const char* nvrtc_library;
} gpuhal_driver_options_t;

/* Loads the CUDA driver (and NCCL when present) and counts the devices. `options` may be
 * NULL for defaults. A library that will not load, or lacks a required symbol, gives
 * UNAVAILABLE saying what was tried or what is missing. No devices is not an error.
 * Fork: a driver and its objects belong to the process that created the driver. A child
 * forked from it has none of gpuhal's threads, so it must create its own driver: a call
 * there that would wait for one of those threads fails with FAILED_PRECONDITION ("created
 * in another process"), and gpuhal_device_release / gpuhal_driver_release there return at
 * once, leaving the object to the child's exit (a leak, not a hang). */
GPUHAL_API gpuhal_status_t gpuhal_driver_create(const gpuhal_driver_options_t* options, gpuhal_driver_t** out_driver);
GPUHAL_API void gpuhal_driver_retain(gpuhal_driver_t* driver);
/* Releasing NULL is a no-op. The libraries stay loaded for the life of the process. The
 * application's last release (this one, or, once it is made, whichever release of an
 * object of the driver comes last) waits, up to GPUHAL_DRIVER_RELEASE_SETTLE_NS (30 s), for
 * the work of devices the application has released that can still run, that which other
 * such devices' work lets go included, and tears those devices down before it returns.
 * It does not wait for work that waits for a semaphore only the application (or a device
 * it still holds) can signal: an execute, alloca or dealloca holds its device and runs once
 * the semaphore is signalled; a host call or barrier holds nothing, and fails (ABORTED)
 * when its device is torn down. Nor for a host function still running after a second; it
 * never waits when made on one of gpuhal's threads (a host function). */
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
  int driver_version;     /* e.g. 12040 for CUDA 12.4 */
  int cooperative_launch; /* GPUHAL_DISPATCH_COOPERATIVE can be used */
  int cluster_launch;     /* gpuhal_dispatch_options_t.cluster can be used */
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
 * documented default; a negative time means "none" where that is allowed. Every time (an
 * _ns field) is at most GPUHAL_TUNING_TIME_MAX_NS (60 s) and every count (harvest_min,
 * gpu_parked_max, park_headroom, graph_instances_max, queue_entries_max) at most
 * GPUHAL_TUNING_COUNT_MAX (4096): gpuhal_device_create refuses a larger one with
 * OUT_OF_RANGE. */
#define GPUHAL_TUNING_TIME_MAX_NS ((int64_t)60 * 1000000000)
#define GPUHAL_TUNING_COUNT_MAX 4096
typedef struct gpuhal_queue_tuning_t {
  /* A host wait polls its value's event this long before it sleeps between polls
   * (0 = 200 us; < 0 = do not spin). Halved for each wait on the same semaphore in a row
   * that outlasted it (down to 1/256), restored by one that ended inside it. The first
   * sleep lasts until half of the shorter of the semaphore's last two waits at least. */
  int64_t host_wait_spin_ns;
  /* The longest sleep between polls of a host wait (0 = 1 ms). */
  int64_t host_wait_max_sleep_ns;
  /* Issued work ages this long before the completion thread looks at it, so it handles
   * many actions per look (0 = 100 us; < 0 = look at once); on a queue whose work has run
   * longer, 3/4 of its usual time (at most 4 ms), then polled from 1/16 of it on. A host
   * call issued on any of the device's queues, device idle waits and release cut it short;
   * nothing's promptness depends on it (a host call waiting for another device's work
   * waits for that device's look). */
  int64_t completion_min_age_ns;
  /* The longest sleep of the completion thread between polls of unfinished work
   * (0 = 200 us); once the oldest has run 16 times that, 1/16 of its age, at most
   * host_wait_max_sleep_ns. */
  int64_t completion_max_sleep_ns;
  /* A submitter that issues on its own thread, and the worker between turns of a long run of
   * issues, retire completed work themselves once this many actions of a queue are in flight
   * (0 = 48; < 0 = never: harvesting off). */
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
  /* A REUSABLE GRAPH command buffer whose executes rebind (binding slots, queue_alloca
   * buffers) keeps up to this many instantiations of its graph, made on demand with the
   * bindings of the execute that needs one: an execute launches one that holds its
   * bindings already, else a new one, else one not in flight, else the next in turn, and
   * patches only the nodes that differ (0 = 2; at most 4). Two tables used in turn then
   * patch nothing: on an H200 that took the host's patching (0.28 us a node) off each
   * execute (tests/bench/RESULTS.md); each instance costs an instantiation once. */
  int32_t graph_instances_max;
  /* How much of a queue's work may be in flight on its stream, in CUDA stream entries
   * (launches, copies, fills, event records and waits, value writes; counted from above: a
   * STREAM command buffer's execute counts 2 a command) not yet seen complete (0 = 512;
   * < 0 = no bound). A GPU holds only about 1,020 entries a stream, then CUDA blocks the
   * thread that enqueues more until the stream drains (for the whole run of a long kernel);
   * gpuhal's issue lock is held there, so every queue of the device would wait. Work beyond
   * the bound waits in its queue, in order, and is issued as the queue's earlier work is
   * seen complete. Work larger than the bound goes alone, once the queue's stream has
   * nothing of its own in flight. */
  int32_t queue_entries_max;
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
  /* 0: an image is loaded once per process and shared by every device (cuLibraryLoadData,
   * module_cache.h); 1: each device loads its own module (cuModuleLoadDataEx). */
  int32_t modules_per_context;
} gpuhal_device_params_t;

#define GPUHAL_MAX_QUEUES 64

/* Opens device `ordinal`: retains its primary context and starts the device's worker
 * thread, which keeps that context current for its life. `params` may be NULL. The
 * device retains the driver. The calling thread's current context is left as it was. */
GPUHAL_API gpuhal_status_t gpuhal_device_create(gpuhal_driver_t* driver, int ordinal,
                                                const gpuhal_device_params_t* params, gpuhal_device_t** out_device);
GPUHAL_API void gpuhal_device_retain(gpuhal_device_t* device);
/* Releasing NULL is a no-op. Objects made on the device (buffers, executables, command
 * buffers, channels) hold it, and so does queue work that holds them (an execute holds its
 * command buffer, an alloca or dealloca its buffer): the device lives until the last of
 * those references goes, and work holding it runs when its semaphores are signalled. The
 * last release drains the device's queues, stops its worker and releases the primary
 * context (after gpuhal_driver_release, not before the work of the other released devices
 * can no longer let its work go: see gpuhal_driver_release). Queue work still waiting for
 * semaphores then (a barrier, a host call) is failed (ABORTED, naming the device), and so
 * are its signals. With
 * GPUHAL_FEATURE_SEMAPHORE_MEMOPS, work that waits on the GPU for a value nobody has
 * signalled yet can only be let go by that value: the release fails the semaphore it waits
 * for (ABORTED, naming the device and the value), for every device and process that uses
 * it. Release a device once the values its work waits for are signalled (or failed), or
 * after gpuhal_device_wait_idle, when that semaphore is shared with other work. */
GPUHAL_API void gpuhal_device_release(gpuhal_device_t* device);
GPUHAL_API gpuhal_status_t gpuhal_device_info(gpuhal_device_t* device, gpuhal_device_info_t* out_info);
/* The number of queues (streams); 0 for bad input. */
GPUHAL_API uint32_t gpuhal_device_queue_count(gpuhal_device_t* device);
/* The driver the device came from (not retained); NULL for bad input. */
GPUHAL_API gpuhal_driver_t* gpuhal_device_driver(gpuhal_device_t* device);

/* ---- gpuhal:internal ---- */

/* The bound on tuning.graph_instances_max (command_buffer.h, gpuhal__graph_instance_t). */
#define GPUHAL__GRAPH_INSTANCES_MAX 4

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
  /* A device of the ordinal was lost (gpuhal__queue_mark_lost): work abandoned with it may
   * leave the counts above behind, and driver teardown then only reports them. */
  int32_t lost;
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
  /* NVRTC (executable_compile.c): loaded by the first compile, under nvrtc_mutex. */
  gpuhal__mutex_t nvrtc_mutex;
  int nvrtc_loaded; /* a failed load is tried again by the next compile */
  gpuhal__nvrtc_symbols_t nvrtc;
  void* nvrtc_handle;
  char nvrtc_option[GPUHAL__LIBRARY_PATH_MAX];  /* options->nvrtc_library, copied ("": none) */
  char nvrtc_library[GPUHAL__LIBRARY_PATH_MAX]; /* the path that loaded */
  /* Images loaded once for every device (module_library.c): cuLibraryLoadData libraries,
   * shared by the module caches of all devices, under library_mutex. */
  gpuhal__mutex_t library_mutex;
  gpuhal__cond_t library_cond; /* a library being loaded is waited for by other loads of its image */
  struct gpuhal__library_s* libraries;
  int driver_version;
  int device_count;
  uint32_t features;             /* bit (1 << gpuhal_feature_t) */
  struct gpuhal__trace_s* trace; /* trace.h: NULL when tracing is off */
  /* Live devices, the teardown threads of devices released on their own worker, and the
   * tasks handed to released devices' workers (gpuhal__worker_hand_off): the application's
   * gpuhal_driver_release waits for those, so a program that waited for its work, released
   * everything and exits leaves nothing behind (see gpuhal_driver_release). */
  gpuhal__mutex_t devices_mutex;
  gpuhal__cond_t devices_cond;
  gpuhal__list_node_t devices;  /* gpuhal_device_s.driver_link */
  int teardowns;                /* device teardowns under way, on any thread */
  long creator_pid;             /* getpid() at creation: a forked child has none of its threads */
  uint64_t settles;             /* settles of released devices, and their passes, begun (under devices_mutex) */
  uint64_t released_work_ended; /* queue work of released devices that ended (atomic; gpuhal__device_work_ended) */
  /* Semaphore value words (semaphore.h): slabs of pinned, device-mapped memory, made on
   * first use in the primary context of the device that needed one; the driver keeps that
   * context retained until it frees the slab. */
  int memops;             /* GPUHAL_FEATURE_SEMAPHORE_MEMOPS */
  int64_t hang_report_ns; /* GPUHAL_HANG_REPORT: a host wait this long logs the pending report (0: never) */
  /* Queue work in flight that may wait on the GPU for a value, on any device, and the calls
   * that wait for a whole context put off meanwhile (memory.h, gpuhal__device_sync_call).
   * Driver-wide: gpuhal devices of one ordinal share its primary context. */
  gpuhal__mutex_t parked_mutex;
  int32_t gpu_waits;
  /* Such calls running now (under parked_mutex, which they do not hold while they wait):
   * no queue work starts to wait on the GPU meanwhile (gpuhal__memory_gpu_wait_claim). */
  int32_t sync_calls;
  /* Queue work of any device that was denied a parked stream and waits on the host to ask
   * again, and how many times something that denies a park ended (gpuhal__driver_park_allowed):
   * work that counts itself denied after such an end asks again at once. Atomic. */
  int32_t park_denied;
  int32_t park_allowed;
  /* Per ordinal: gpuhal devices of one ordinal share its primary context. */
  gpuhal__ordinal_t* ordinals;
  struct gpuhal__deferred_call_s* deferred;
  gpuhal__mutex_t words_mutex;
  struct gpuhal__word_slab_s* word_slabs;
  uint64_t* free_words; /* each free word holds the address of the next */
  /* Semaphores shared with other processes (semaphore_shared.c): their values change
   * without this process hearing of it, so a thread of the driver's, started with the first
   * one, reads them while any is left (linked through gpuhal_semaphore_t.shared_link). */
  gpuhal__mutex_t shared_mutex;
  gpuhal__cond_t shared_cond;
  gpuhal__list_node_t shared_semaphores;
  gpuhal__thread_t shared_thread;
  int shared_thread_running; /* under shared_mutex */
  int shared_stop;           /* under shared_mutex */
  /* Mappings of destroyed shared semaphores that a GPU write may still reach (a failed
   * issue enqueued it maybe): given back when the driver goes (under shared_mutex). */
  struct gpuhal__shared_kept_s* shared_kept;
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
  int running; /* a task runs (under the mutex) */
  int stop;
  int start_done;
  gpuhal_status_t start_status;
} gpuhal__worker_t;

struct gpuhal_device_s {
  gpuhal__object_t header;         /* user_refs: the application's, which gpuhal_driver_release settles */
  uint64_t settled_in;             /* the last settle pass that took it (driver->settles; under devices_mutex) */
  uint64_t settle_hold;            /* the settle whose reference holds it, 0 none (under devices_mutex) */
  int32_t handoffs;                /* hand-offs to its worker not done (gpuhal__worker_hand_off; under devices_mutex) */
  gpuhal__list_node_t driver_link; /* in driver->devices while alive */
  gpuhal_driver_t* driver;         /* retained */
  const gpuhal__cuda_symbols_t* cu;
  const gpuhal_allocator_t* allocator;
  const gpuhal__logger_t* logger;
  int ordinal;
  CUdevice cu_device;
  CUcontext context;                     /* the primary context, retained */
  int priority_least, priority_greatest; /* dispatch priorities (cuCtxGetStreamPriorityRange); 0, 0: none */
  int context_retained;
  /* The record that puts off the release of `context` (memory.h, gpuhal__driver_release_context),
   * reserved by the memory state so that a teardown allocates nothing; NULL before it. */
  struct gpuhal__deferred_call_s* context_release;
  gpuhal_device_info_t info;
  gpuhal_device_params_t params; /* defaults filled in; module_cache_dir is an owned copy or NULL */
  uint32_t queue_count;
  CUstream* streams; /* queue_count non-blocking streams, created on the worker */
  gpuhal__worker_t worker;
  int32_t lost; /* a sticky error was seen: the context is unusable (atomic) */
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
 * comes last. Every such call goes through this one table, which hooks.c (the last file)
 * defines and gpuhal__hooks() returns; calls down the order are plain calls. The table is
 * constant, so compilers call through it directly. Creation order: trace, memory, module
 * cache, queue, then the built-in kernels; destruction runs the other way, the queue first,
 * so that it can drain while everything it uses is still there. */
struct gpuhal__action_s;
struct gpuhal__cmd_s;
struct gpuhal_executable_s;
struct gpuhal_semaphore_list_t; /* semaphore.h: passed by pointer, so device.h needs no later module */
typedef struct gpuhal__hooks_s {
  /* the driver's */
  gpuhal_status_t (*trace_create)(gpuhal_driver_t* driver);
  void (*trace_destroy)(gpuhal_driver_t* driver);         /* writes the trace file */
  void (*driver_flush_deferred)(gpuhal_driver_t* driver); /* memory.h */
  void (*driver_release_context)(gpuhal_driver_t* driver, CUdevice cu_device, CUcontext context,
                                 struct gpuhal__deferred_call_s* reserved);
  void (*semaphore_driver_destroy)(gpuhal_driver_t* driver); /* semaphore.h: words, shared watch */
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
  void (*queue_park_retry)(gpuhal_device_t* device); /* gpuhal__driver_park_allowed */
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
  void (*hang_report)(gpuhal_driver_t* driver, int64_t waited_ns);
  const char* (*action_label)(const struct gpuhal__action_s* a); /* "" without one */
  /* executable.h: a buffer over a module's global (memory.h) lets go of its executable */
  void (*executable_release_ref)(struct gpuhal_executable_s* executable);
} gpuhal__hooks_t;

/* The table (hooks.c): the one declaration of a function defined in a later module. */
GPUHAL__PRIVATE const gpuhal__hooks_t* gpuhal__hooks(void);

/* The driver's and each device's trace state are NULL when tracing is off, so every trace
 * hook is called as `GPUHAL__TRACE(owner, call)`: one pointer test. */
#define GPUHAL__TRACE(owner, call) \
  do {                             \
    if ((owner)->trace) call;      \
  } while (0)

/* 1 when the calling thread is `device`'s worker. */
GPUHAL__PRIVATE int gpuhal__on_worker(gpuhal_device_t* device);
/* 1 when the calling thread is the worker of a device other than `device`: it must not wait
 * for `device`'s worker (that one may be waiting for it), so what it would hand over and wait
 * for it hands over only. */
GPUHAL__PRIVATE int gpuhal__on_other_worker(gpuhal_device_t* device);

/* Queues `task` to run on the worker (FIFO); a task already queued is not queued twice. */
GPUHAL__PRIVATE void gpuhal__worker_post(gpuhal_device_t* device, gpuhal__task_t* task);
/* Hands `task` to `device`'s worker from a thread that must not wait for it (another
 * device's worker, a queue call's harvest): posts it with a device reference and counts it
 * in device->handoffs, so that the application's last release, which may have settled the
 * device before the task came, waits for it (gpuhal__driver_settle_begin). The task's last
 * step is gpuhal__worker_hand_off_done(device), which drops both (the last reference tears
 * the device down, on a reaper thread). */
GPUHAL__PRIVATE void gpuhal__worker_hand_off(gpuhal_device_t* device, gpuhal__task_t* task);
GPUHAL__PRIVATE void gpuhal__worker_hand_off_done(gpuhal_device_t* device);

/* NULL in the process that created the driver; in another one (a child forked after the
 * driver was made, where none of gpuhal's threads exist) FAILED_PRECONDITION naming
 * `what`. A syscall: only on paths that wait for a gpuhal thread, never per submission. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__driver_check_process(const gpuhal_driver_t* driver, const char* what);

/* Runs fn(arg) on the worker, waits, and returns its status. Called on the worker itself
 * it runs fn at once (waiting for itself would never end). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__worker_call(gpuhal_device_t* device, gpuhal_status_t (*fn)(void* arg),
                                                    void* arg);

/* ---- stream capture: gpuhal's calls run in relaxed mode ----
 * CUDA gives each thread a stream-capture interaction mode (GLOBAL by default): while any
 * thread has a GLOBAL capture going (PyTorch's CUDA graphs, ...), or the thread itself a
 * non-relaxed one, a GLOBAL thread's "potentially unsafe" calls (queries, synchronizes,
 * plain allocations and frees, synchronous copies, module loads, graph instantiation) fail
 * with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the application's capture.
 * gpuhal never captures the application's streams, so none of its calls can break a
 * capture: they run in RELAXED mode. gpuhal's own threads switch once at start
 * (gpuhal__capture_relax_thread); on the application's threads, every context scope
 * (gpuhal__context_enter, gpuhal__context_push_any) relaxes the mode for its length and
 * gives the caller's back, and code outside one wraps its unsafe calls in
 * gpuhal__capture_relax / gpuhal__capture_restore. A thread-local flag says the mode is
 * relaxed already (a gpuhal thread, an enclosing scope): then these make no driver call.
 * The queue's caller-issue path makes only asynchronous stream calls (launches, records,
 * waits, memops), which no mode refuses, so it enters with gpuhal__context_enter_enqueue
 * and wraps the few unsafe calls it may make (an event query, an instantiation). */
typedef struct gpuhal__capture_scope_s {
  CUstreamCaptureMode saved; /* the caller's mode */
  int changed;               /* 1: relax changed the mode (restore gives `saved` back) */
} gpuhal__capture_scope_t;

/* Relaxes the calling thread's mode unless it is relaxed already; best effort (a failed
 * exchange leaves the mode, and the unsafe call then reports what CUDA says). */
GPUHAL__PRIVATE void gpuhal__capture_relax(const gpuhal__cuda_symbols_t* cu, gpuhal__capture_scope_t* scope);

/* Undoes gpuhal__capture_relax (scopes nest: only the one that changed the mode restores). */
GPUHAL__PRIVATE void gpuhal__capture_restore(const gpuhal__cuda_symbols_t* cu, gpuhal__capture_scope_t* scope);

/* First thing on each gpuhal thread that makes CUDA calls: RELAXED for the thread's life. */
GPUHAL__PRIVATE void gpuhal__capture_relax_thread(const gpuhal__cuda_symbols_t* cu);

/* ---- running on the device's context from any thread ---- */
typedef struct gpuhal__context_scope_s {
  CUcontext saved;                 /* what was current before */
  int pushed;                      /* 1 when enter pushed the device's context */
  gpuhal__capture_scope_t capture; /* the caller's capture mode, while the scope relaxes it */
} gpuhal__context_scope_t;

/* Makes the device's context current on the calling thread, pushing it only when it is
 * not already current (so the worker, and nested scopes, pay one cuCtxGetCurrent), and
 * relaxes the thread's capture mode for the scope (see above). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__context_enter(gpuhal_device_t* device, gpuhal__context_scope_t* scope);

/* gpuhal__context_enter without the capture mode: for the queue's caller-issue path, whose
 * calls are asynchronous stream work, and which wraps any unsafe call itself. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__context_enter_enqueue(gpuhal_device_t* device, gpuhal__context_scope_t* scope);

/* Makes `context` current for a cleanup that must happen even when a push fails: pushes
 * it, or else sets it (gpuhal__context_pop_any then sets the caller's back). 0 when neither
 * worked (the capture mode is relaxed all the same: pop_any gives it back). Any thread. */
GPUHAL__PRIVATE int gpuhal__context_push_any(const gpuhal__cuda_symbols_t* cu, CUcontext context,
                                             gpuhal__context_scope_t* scope);

/* Undoes gpuhal__context_push_any: pops what it pushed (retrying a failed pop once, then
 * setting the caller's context as gpuhal__context_leave does), or sets back the caller's
 * context where it set instead of pushing. */
GPUHAL__PRIVATE void gpuhal__context_pop_any(const gpuhal__cuda_symbols_t* cu, gpuhal__context_scope_t* scope);

/* Restores what context_enter found: pops what it pushed, retrying a failed pop once.
 * When both fail it logs an error and sets the caller's context current again
 * (cuCtxSetCurrent replaces the top: the stack stays one entry too deep, but the caller's
 * next calls go to its own context). */
GPUHAL__PRIVATE void gpuhal__context_leave(gpuhal_device_t* device, gpuhal__context_scope_t* scope);

/* Runs fn(arg) with the device's context current: on the calling thread inside a push/pop,
 * or, when this thread cannot take the context, on the worker (which holds it for its life),
 * so that what fn destroys is never dropped with its objects still alive. Any thread with
 * no gpuhal lock held. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_call_current(gpuhal_device_t* device, gpuhal_status_t (*fn)(void* arg),
                                                            void* arg);

/* gpuhal's own driver references (devices, semaphores): no waiting. */
GPUHAL__PRIVATE void gpuhal__driver_retain_ref(gpuhal_driver_t* driver);
GPUHAL__PRIVATE void gpuhal__driver_release_ref(gpuhal_driver_t* driver);
/* Around an application release made after the application released the driver: the last
 * release then settles released devices as gpuhal_driver_release does (their finished work
 * drains and they go, on this thread, before it returns), whichever object it was. begin
 * (before the release) retains the driver and holds the released devices (a device whose
 * last reference the release drops goes at the settle's end, once no other released
 * device's work can let its own go) and returns the settle's number when that is to happen,
 * else 0; end settles and drops both. Not on the driver's own threads (a host function):
 * that would wait for itself. */
GPUHAL__PRIVATE uint64_t gpuhal__driver_settle_begin(gpuhal_driver_t* driver);
/* Called first on each thread gpuhal starts for `driver`'s devices. */
GPUHAL__PRIVATE void gpuhal__driver_thread_begin(gpuhal_driver_t* driver);
GPUHAL__PRIVATE void gpuhal__driver_settle_end(gpuhal_driver_t* driver, uint64_t settle);
/* The queue calls it as `count` actions of `device` end, before its count of outstanding
 * work drops: a settle under way takes the released devices again when released devices'
 * work ended during a pass (that work may have let go of another device's). */
GPUHAL__PRIVATE void gpuhal__device_work_ended(gpuhal_device_t* device, uint64_t count);

GPUHAL__PRIVATE void gpuhal__device_release_ref(gpuhal_device_t* device);

/* 1 when work of the device may park on the GPU as far as the room and module loads go;
 * called with a park reservation of the ordinal held. */
GPUHAL__PRIVATE int gpuhal__device_allows_park(const gpuhal_device_t* device);

/* Something that may have denied queue work a parked stream has ended: parked work
 * completed or a reservation was given back, a call that waits for a whole context
 * returned, a module load's pause ended, the store of streams was refilled or a stream or
 * graph executable destroyed. Every device's work that was denied one asks again (hook
 * queue_park_retry), else it would wait on the host for its value although it could now
 * wait on the GPU. Counts the end first (driver->park_allowed), so that work which counts
 * itself denied after this look sees it and asks again itself. Any thread that holds
 * neither devices_mutex nor a worker's task lock (it takes those, and nothing under them). */
GPUHAL__PRIVATE void gpuhal__driver_park_allowed(gpuhal_driver_t* driver);

/* Before a call that waits for an idle context and cannot be put off (a module load): stops
 * new parks on the device's ordinal and waits, up to tuning.load_parked_wait_ns, for those
 * parked to finish. FAILED_PRECONDITION naming `what` when they did not: the call would
 * have waited for them too, forever if their values are for this thread to signal. Every
 * call is paired with gpuhal__device_park_resume, whatever it returned. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_park_pause(gpuhal_device_t* device, const char* what);
GPUHAL__PRIVATE void gpuhal__device_park_resume(gpuhal_device_t* device);

/* cuStreamCreate with the room counted. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_stream_create(gpuhal_device_t* device, CUstream* out);

/* cuStreamDestroy with the room counted (the stream is gone whatever it returns). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_stream_destroy(gpuhal_device_t* device, CUstream stream);

/* cuGraphInstantiateWithFlags with the room counted; the device's context is current. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_graph_instantiate(gpuhal_device_t* device, CUgraphExec* out,
                                                                 CUgraph graph, unsigned long long flags);

/* cuGraphExecDestroy with the room counted (the executable is gone whatever it returns). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_graph_exec_destroy(gpuhal_device_t* device, CUgraphExec exec);

/* gpuhal's own references (buffers, command buffers, executables, channels). */
GPUHAL__PRIVATE void gpuhal__device_retain_ref(gpuhal_device_t* device);
/* For a message refusing objects of device `a` with those of device `b`: a note when the
 * two are distinct devices of one ordinal (which "device 0 ... device 0" would not explain),
 * "" otherwise. */
GPUHAL__PRIVATE const char* gpuhal__device_pair_note(const gpuhal_device_t* a, const gpuhal_device_t* b);

#endif /* GPUHAL_SRC_DEVICE_H */
