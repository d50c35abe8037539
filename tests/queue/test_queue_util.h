/* test_queue_util.h - helpers of the queue tests and benchmarks (include after gpuhal.h
 * with GPUHAL_IMPLEMENTATION): a device fixture, test-local queue actions, the spin and
 * fault test kernels, a counting allocator and the softcuda counters. */
#ifndef GPUHAL_TEST_QUEUE_UTIL_H
#define GPUHAL_TEST_QUEUE_UTIL_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "test_internals.h"
#include "test_util.h"

/* Each test uses some of these helpers. */
#pragma GCC diagnostic ignored "-Wunused-function"

#ifndef GPUHAL_KERNELS_DIR
#define GPUHAL_KERNELS_DIR "tests/kernels"
#endif

static gpuhal_timeout_t qt_seconds(int s) { return gpuhal_timeout_relative_ns((int64_t)s * 1000000000ll); }

/* ---- fixture ---- */
typedef struct qt_fixture_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  /* test kernels, loaded in the primary context that the fixture retains itself, so that
   * they can be unloaded after the device is gone (release-in-flight tests) */
  CUcontext context;
  CUmodule spin_module, fault_module;
  CUfunction spin, fault;
} qt_fixture_t;

/* The queue tuning qt_open gives its device (zeroed: the defaults). */
static gpuhal_queue_tuning_t qt_tuning;
static int qt_semaphore_memops; /* gpuhal_driver_options_t.semaphore_memops of qt_open's driver */

static int qt_open(qt_fixture_t* f, uint32_t queues, const gpuhal_allocator_t* allocator) {
  gpuhal_driver_options_t options;
  gpuhal_device_params_t params;
  gpuhal_status_t s;
  int count = 0;
  memset(f, 0, sizeof(*f));
  memset(&options, 0, sizeof(options));
  if (allocator) options.allocator = *allocator;
  options.semaphore_memops = qt_semaphore_memops;
  s = gpuhal_driver_create(&options, &f->driver);
  if (!s) s = gpuhal_driver_device_count(f->driver, &count);
  if (!s && count == 0) s = gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "no devices");
  memset(&params, 0, sizeof(params));
  params.queue_count = queues;
  params.tuning = qt_tuning;
  if (!s) s = gpuhal_device_create(f->driver, 0, &params, &f->device);
  if (s) {
    fprintf(stderr, "  fixture: %s\n", gpuhal_status_message(s));
    gpuhal_status_free(s);
    gpuhal_driver_release(f->driver);
    f->driver = NULL;
    return 0;
  }
  return 1;
}

static void qt_kernels_unload(qt_fixture_t* f) {
  const gpuhal__cuda_symbols_t* cu;
  CUcontext popped;
  if (!f->context) return;
  cu = &f->driver->cu;
  if (cu->cuCtxPushCurrent(f->context) == CUDA_SUCCESS) {
    if (f->spin_module) cu->cuModuleUnload(f->spin_module);
    if (f->fault_module) cu->cuModuleUnload(f->fault_module);
    cu->cuCtxPopCurrent(&popped);
  }
  f->spin_module = f->fault_module = NULL;
  f->spin = f->fault = NULL;
  {
    CUdevice dev = 0;
    cu->cuDeviceGet(&dev, 0);
    cu->cuDevicePrimaryCtxRelease(dev);
  }
  f->context = NULL;
}

/* Releases the device (draining it), then the kernels, then the driver. */
static void qt_close(qt_fixture_t* f) {
  gpuhal_device_release(f->device);
  f->device = NULL;
  qt_kernels_unload(f);
  gpuhal_driver_release(f->driver);
  f->driver = NULL;
}

static char* qt_read_file(const char* path) { return tu_read_file(path, NULL); }

static int qt_load_one(qt_fixture_t* f, const char* file, const char* entry, CUmodule* module, CUfunction* fn) {
  const gpuhal__cuda_symbols_t* cu = &f->driver->cu;
  char path[1024];
  char* image;
  CUresult r;
  snprintf(path, sizeof(path), "%s/%s", GPUHAL_KERNELS_DIR, file);
  image = qt_read_file(path);
  if (!image) {
    fprintf(stderr, "  cannot read %s\n", path);
    return 0;
  }
  r = cu->cuModuleLoadData(module, image);
  free(image);
  if (r == CUDA_SUCCESS) r = cu->cuModuleGetFunction(fn, *module, entry);
  if (r != CUDA_SUCCESS) fprintf(stderr, "  loading %s: CUresult %d\n", path, (int)r);
  return r == CUDA_SUCCESS;
}

/* Loads spin_us and fault; 0 when they are not available. */
static int qt_kernels_load(qt_fixture_t* f) {
  const gpuhal__cuda_symbols_t* cu = &f->driver->cu;
  CUcontext popped;
  int ok;
  if (cu->cuDevicePrimaryCtxRetain(&f->context, f->device->cu_device) != CUDA_SUCCESS) {
    f->context = NULL;
    return 0;
  }
  if (cu->cuCtxPushCurrent(f->context) != CUDA_SUCCESS) return 0;
  ok = qt_load_one(f, "spin_us.ptx", "spin_us", &f->spin_module, &f->spin) &&
       qt_load_one(f, "fault.ptx", "fault", &f->fault_module, &f->fault);
  cu->cuCtxPopCurrent(&popped);
  return ok;
}

/* ---- softcuda counters (absent on a real driver) ---- */
static int qt_softcuda(void) { return tu_softcuda(); }
static unsigned long long qt_softcuda_calls(const char* entry) { return tu_softcuda_calls(entry); }

/* softcuda: the most streams of one context parked on memory waits at once (reset with
 * `reset`); -1 on a real driver. */
static int qt_softcuda_parked_peak(int reset) {
  int (*fn)(int) = NULL;
  void* sym = tu_softcuda_symbol("softcuda_query_parked_peak");
  memcpy(&fn, &sym, sizeof(fn));
  return fn ? fn(reset) : -1;
}

/* ---- test actions ---- */
typedef struct qt_counter_s {
  int32_t issued, completed_ok, completed_failed, released;
} qt_counter_t;
static qt_counter_t qt_global_counter;
static void qt_counter_init(qt_counter_t* c) { memset(c, 0, sizeof(*c)); }
static int32_t qt_counter_get(int32_t* p) { return gpuhal__atomic_load(p); }

static gpuhal_status_t qt_counting_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  GPUHAL__UNUSED(device);
  GPUHAL__UNUSED(stream);
  gpuhal__atomic_add(&((qt_counter_t*)user)->issued, 1);
  return NULL;
}
static void qt_counting_complete(void* user, gpuhal_status_t status) {
  qt_counter_t* c = (qt_counter_t*)user;
  if (status) {
    gpuhal__atomic_add(&c->completed_failed, 1);
  } else {
    gpuhal__atomic_add(&c->completed_ok, 1);
  }
}
static void qt_counting_release(void* user, gpuhal_device_t* device) {
  GPUHAL__UNUSED(device);
  gpuhal__atomic_add(&((qt_counter_t*)user)->released, 1);
}
static const gpuhal__action_ops_t qt_counting_ops = {"test_counting", qt_counting_issue, qt_counting_complete,
                                                     qt_counting_release, NULL};
static const gpuhal__action_ops_t qt_barrier_ops = {"barrier", NULL, NULL, NULL, NULL};
/* The same, always issued by the worker. */
static const gpuhal__action_ops_t qt_worker_barrier_ops = {"barrier", NULL, NULL, NULL, NULL};

/* Submits with the submitting-thread fast path allowed, except for qt_worker_barrier_ops,
 * which always go through the worker (the tests exercise both paths). */
static gpuhal_status_t qt_submit(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                 gpuhal_semaphore_list_t signal, const gpuhal__action_ops_t* ops, void* user) {
  return gpuhal__queue_submit_ex(device, queue, wait, signal, ops, user,
                                 ops == &qt_worker_barrier_ops ? 0u : (unsigned)GPUHAL__SUBMIT_CALLER_MAY_ISSUE);
}

/* Fails at issue with a CUDA error status, as a command buffer whose launch fails would. */
static gpuhal_status_t qt_failing_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  GPUHAL__UNUSED(user);
  GPUHAL__UNUSED(stream);
  return gpuhal__cuda_status(device->cu, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "cuLaunchKernel", __FILE__, __LINE__);
}
static const gpuhal__action_ops_t qt_failing_ops = {"test_failing", qt_failing_issue, NULL, NULL, NULL};

/* Launches spin_us: `first_us` for the first launch, `rest_us` after. */
typedef struct qt_spin_s {
  qt_fixture_t* fixture;
  unsigned long long first_us, rest_us;
  int32_t launched;
} qt_spin_t;
static gpuhal_status_t qt_spin_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  qt_spin_t* spin = (qt_spin_t*)user;
  unsigned long long us = gpuhal__atomic_load(&spin->launched) == 0 ? spin->first_us : spin->rest_us;
  void* params[1];
  params[0] = &us;
  GPUHAL__CU_RETURN(device->cu, cuLaunchKernel, (spin->fixture->spin, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
  gpuhal__atomic_add(&spin->launched, 1);
  return NULL;
}
static const gpuhal__action_ops_t qt_spin_ops = {"test_spin", qt_spin_issue, NULL, NULL, NULL};

/* Submits one spin_us launch of `us` on queue 0 that signals (s, value). */
static gpuhal_status_t qt_submit_spin(qt_fixture_t* f, qt_spin_t* spin, unsigned long long us, gpuhal_semaphore_t* s,
                                      uint64_t value) {
  memset(spin, 0, sizeof(*spin));
  spin->fixture = f;
  spin->first_us = spin->rest_us = us;
  return gpuhal__queue_submit(f->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &value),
                              &qt_spin_ops, spin);
}

static gpuhal_status_t qt_fault_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  qt_fixture_t* f = (qt_fixture_t*)user;
  unsigned long long address = 0x10;
  void* params[1];
  params[0] = &address;
  return GPUHAL__CU(device->cu, cuLaunchKernel, (f->fault, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
}
static const gpuhal__action_ops_t qt_fault_ops = {"test_fault", qt_fault_issue, NULL, NULL, NULL};

/* Records the address a queue_alloca buffer has when work after the alloca is issued. */
typedef struct qt_address_probe_s {
  gpuhal_buffer_t* buffer;
  CUdeviceptr address;
} qt_address_probe_t;
static gpuhal_status_t qt_address_probe_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  qt_address_probe_t* p = (qt_address_probe_t*)user;
  uint64_t address = 0;
  GPUHAL__UNUSED(device);
  GPUHAL__UNUSED(stream);
  GPUHAL__RETURN_IF_ERROR(gpuhal_buffer_device_address(p->buffer, &address));
  p->address = (CUdeviceptr)address;
  return NULL;
}
static const gpuhal__action_ops_t qt_address_probe_ops = {"test_probe", qt_address_probe_issue, NULL, NULL, NULL};

/* ---- host functions ---- */
static pthread_t qt_main_thread;
static gpuhal_status_t qt_host_fn_nop(void* user) {
  GPUHAL__UNUSED(user);
  return NULL;
}
static gpuhal_status_t qt_host_fn_fail(void* user) {
  GPUHAL__UNUSED(user);
  return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "the host function said no");
}
typedef struct qt_recorder_s qt_recorder_t;
typedef struct qt_record_arg_s {
  qt_recorder_t* recorder;
  int id;
} qt_record_arg_t;
struct qt_recorder_s {
  pthread_mutex_t mutex;
  int order[64];
  int count;
  int ran_on_caller;
  qt_record_arg_t args[64];
};
static void qt_recorder_init(qt_recorder_t* r) {
  memset(r, 0, sizeof(*r));
  pthread_mutex_init(&r->mutex, NULL);
  qt_main_thread = pthread_self();
}
static gpuhal_status_t qt_host_fn_record(void* user) {
  qt_record_arg_t* arg = (qt_record_arg_t*)user;
  qt_recorder_t* r = arg->recorder;
  pthread_mutex_lock(&r->mutex);
  if (r->count < 64) r->order[r->count++] = arg->id;
  if (pthread_equal(pthread_self(), qt_main_thread)) r->ran_on_caller = 1;
  pthread_mutex_unlock(&r->mutex);
  return NULL;
}

/* ---- counting allocator ---- */
typedef struct qt_counting_allocator_s {
  gpuhal_allocator_t allocator;
  int64_t allocs, frees;
} qt_counting_allocator_t;
static void* qt_counting_alloc(size_t size, void* user) {
  gpuhal__atomic_add(&((qt_counting_allocator_t*)user)->allocs, 1);
  return malloc(size);
}
static void qt_counting_free(void* ptr, void* user) {
  gpuhal__atomic_add(&((qt_counting_allocator_t*)user)->frees, 1);
  free(ptr);
}
static const gpuhal_allocator_t* qt_counting_allocator(qt_counting_allocator_t* c) {
  memset(c, 0, sizeof(*c));
  c->allocator.alloc = qt_counting_alloc;
  c->allocator.free = qt_counting_free;
  c->allocator.user = c;
  return &c->allocator;
}
static uint64_t qt_counting_allocs(qt_counting_allocator_t* c) { return (uint64_t)gpuhal__atomic_load(&c->allocs); }

/* One of a mix of submissions on timeline s[0] (prev -> next), also signalling s[1]:
 * barriers, counting actions and host calls, on alternating queues. */
static gpuhal_status_t qt_submit_mixed(qt_fixture_t* f, uint64_t i, gpuhal_semaphore_t** s, uint64_t prev,
                                       uint64_t next) {
  uint64_t signal_values[2];
  gpuhal_semaphore_list_t wait = gpuhal_semaphore_list_one(&s[0], &prev);
  gpuhal_semaphore_list_t signal;
  uint32_t queue = (uint32_t)(i % 2);
  signal_values[0] = next;
  signal_values[1] = next;
  signal.count = 2;
  signal.semaphores = s;
  signal.values = signal_values;
  switch (i % 3) {
    case 0: return qt_submit(f->device, queue, wait, signal, i % 2 ? &qt_barrier_ops : &qt_worker_barrier_ops, NULL);
    case 1: return qt_submit(f->device, queue, wait, signal, &qt_counting_ops, &qt_global_counter);
    default: return gpuhal_queue_host_call(f->device, queue, wait, signal, qt_host_fn_nop, NULL);
  }
}

/* ---- public-API helpers of the queue core tests (issue #14) ----
 * test_queue_core.c, test_queue_reject.c and test_queue_random.c use only gpuhal.h's public
 * API through these, so that they test the queue's contract and not its internals. */
#include <time.h>
#include <unistd.h>

static void qc_sleep_ms(int ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (long)(ms % 1000) * 1000000l;
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Watchdog: a call that has no timeout (gpuhal_device_release, gpuhal_driver_release) runs
 * between qc_watchdog_arm and qc_watchdog_disarm; if it is still running after the limit,
 * the process aborts with a message naming it, so a hang fails the test with a reason
 * instead of running into CTest's timeout. */
static pthread_mutex_t qc_watchdog_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qc_watchdog_cond = PTHREAD_COND_INITIALIZER;
static int64_t qc_watchdog_deadline_ns; /* 0: disarmed */
static const char* qc_watchdog_what;
static int qc_watchdog_started;
static void* qc_watchdog_main(void* arg) {
  (void)arg;
  pthread_mutex_lock(&qc_watchdog_mutex);
  for (;;) {
    int64_t now = gpuhal_now_ns();
    if (qc_watchdog_deadline_ns && now >= qc_watchdog_deadline_ns) {
      fprintf(stderr, "  WATCHDOG: '%s' did not return in time: it hangs; aborting\n",
              qc_watchdog_what ? qc_watchdog_what : "?");
      fflush(stderr);
      abort();
    }
    if (qc_watchdog_deadline_ns) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 50000000l;
      if (ts.tv_nsec >= 1000000000l) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000l;
      }
      pthread_cond_timedwait(&qc_watchdog_cond, &qc_watchdog_mutex, &ts);
    } else {
      pthread_cond_wait(&qc_watchdog_cond, &qc_watchdog_mutex);
    }
  }
  return NULL;
}
static void qc_watchdog_arm(int seconds, const char* what) {
  pthread_mutex_lock(&qc_watchdog_mutex);
  if (!qc_watchdog_started) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, qc_watchdog_main, NULL) == 0) {
      pthread_detach(thread);
      qc_watchdog_started = 1;
    }
  }
  qc_watchdog_deadline_ns = gpuhal_now_ns() + (int64_t)seconds * 1000000000ll;
  qc_watchdog_what = what;
  pthread_cond_broadcast(&qc_watchdog_cond);
  pthread_mutex_unlock(&qc_watchdog_mutex);
}
static void qc_watchdog_disarm(void) {
  pthread_mutex_lock(&qc_watchdog_mutex);
  qc_watchdog_deadline_ns = 0;
  qc_watchdog_what = NULL;
  pthread_cond_broadcast(&qc_watchdog_cond);
  pthread_mutex_unlock(&qc_watchdog_mutex);
}

/* A call that has no timeout, run on its own thread so that the test can give up waiting
 * for it (a clean failure) and still join it once whatever it waits for is let go. */
typedef struct qc_async_s {
  pthread_t thread;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  void (*fn)(void* arg);
  void* arg;
  int done;
  int64_t returned_ns;
} qc_async_t;
static void* qc_async_main(void* p) {
  qc_async_t* a = (qc_async_t*)p;
  a->fn(a->arg);
  pthread_mutex_lock(&a->mutex);
  a->done = 1;
  a->returned_ns = gpuhal_now_ns();
  pthread_cond_broadcast(&a->cond);
  pthread_mutex_unlock(&a->mutex);
  return NULL;
}
static int qc_async_start(qc_async_t* a, void (*fn)(void*), void* arg) {
  memset(a, 0, sizeof(*a));
  pthread_mutex_init(&a->mutex, NULL);
  pthread_cond_init(&a->cond, NULL);
  a->fn = fn;
  a->arg = arg;
  return pthread_create(&a->thread, NULL, qc_async_main, a) == 0;
}
/* 1 when the call returned within `ms`. */
static int qc_async_wait(qc_async_t* a, int ms) {
  int64_t deadline = gpuhal_now_ns() + (int64_t)ms * 1000000ll;
  int done;
  pthread_mutex_lock(&a->mutex);
  while (!a->done && gpuhal_now_ns() < deadline) {
    pthread_mutex_unlock(&a->mutex);
    qc_sleep_ms(2);
    pthread_mutex_lock(&a->mutex);
  }
  done = a->done;
  pthread_mutex_unlock(&a->mutex);
  return done;
}
/* Joins the thread; the watchdog guards it (the call must return once it was let go). */
static void qc_async_join(qc_async_t* a, const char* what) {
  qc_watchdog_arm(60, what);
  pthread_join(a->thread, NULL);
  qc_watchdog_disarm();
  pthread_mutex_destroy(&a->mutex);
  pthread_cond_destroy(&a->cond);
}
static void qc_device_release_fn(void* device) { gpuhal_device_release((gpuhal_device_t*)device); }
static void qc_driver_release_fn(void* driver) { gpuhal_driver_release((gpuhal_driver_t*)driver); }

/* Loads tests/kernels/<name>.ptx and looks up the kernel `name`. */
static gpuhal_status_t qc_load_kernel(gpuhal_device_t* device, const char* name, gpuhal_executable_t** exe,
                                      gpuhal_kernel_t** kernel) {
  return tu_load_kernel(device, name, exe, kernel);
}

/* A command buffer (flags as given) holding one dispatch of `kernel` on grid x block. */
static gpuhal_status_t qc_record_dispatch(gpuhal_device_t* device, gpuhal_command_buffer_flags_t flags,
                                          gpuhal_kernel_t* kernel, uint32_t grid, uint32_t block, uint32_t arg_count,
                                          const gpuhal_arg_t* args, gpuhal_command_buffer_t** out) {
  gpuhal_status_t st = gpuhal_command_buffer_create(device, flags, 0, out);
  if (!st) st = gpuhal_command_buffer_begin(*out);
  if (!st)
    st = gpuhal_cmd_dispatch(*out, kernel, gpuhal_dim3(grid, 1, 1), gpuhal_dim3(block, 1, 1), 0, arg_count, args);
  if (!st) st = gpuhal_command_buffer_end(*out);
  if (st) {
    gpuhal_command_buffer_release(*out);
    *out = NULL;
  }
  return st;
}

/* spin_flag(flag, out, timeout_us): in flight until the host stores non-zero to *flag (both
 * words in one pinned buffer the caller owns: flag at byte 0, out at byte 4). */
static gpuhal_status_t qc_record_spin_flag(gpuhal_device_t* device, gpuhal_kernel_t* spin_flag, gpuhal_buffer_t* words,
                                           uint64_t timeout_us, gpuhal_command_buffer_t** out) {
  gpuhal_arg_t args[3];
  args[0] = gpuhal_arg_buffer(words, 0);
  args[1] = gpuhal_arg_buffer(words, 4);
  args[2] = gpuhal_arg_u64(timeout_us);
  return qc_record_dispatch(device, GPUHAL_COMMAND_BUFFER_STREAM, spin_flag, 1, 1, 3, args, out);
}
static void qc_flag_store(gpuhal_buffer_t* words, uint32_t value) {
  uint32_t* p = (uint32_t*)gpuhal_buffer_host_pointer(words);
  if (p) __atomic_store_n(&p[0], value, __ATOMIC_SEQ_CST);
}
static uint32_t qc_flag_out(gpuhal_buffer_t* words) {
  uint32_t* p = (uint32_t*)gpuhal_buffer_host_pointer(words);
  return p ? __atomic_load_n(&p[1], __ATOMIC_SEQ_CST) : 0;
}

/* A new semaphore at 0 (NULL, with a message, when that fails). */
static gpuhal_semaphore_t* qc_semaphore_new(gpuhal_driver_t* driver) {
  gpuhal_semaphore_t* s = NULL;
  gpuhal_status_t st = gpuhal_semaphore_create(driver, 0, &s);
  if (st) {
    fprintf(stderr, "  semaphore_create: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
  }
  return s;
}
/* The semaphore's value; UINT64_MAX when it failed. */
static uint64_t qc_query(gpuhal_semaphore_t* s) {
  uint64_t v = 0;
  gpuhal_status_t st = gpuhal_semaphore_query(s, &v);
  if (st) {
    gpuhal_status_free(st);
    return UINT64_MAX;
  }
  return v;
}

/* Frees `st` and returns its code. */
static gpuhal_status_code_t qc_code(gpuhal_status_t st) {
  gpuhal_status_code_t code = gpuhal_status_code(st);
  gpuhal_status_free(st);
  return code;
}

/* ---- the fixture of the queue core and bound tests ---- */
/* spin_flag's own bound (the tests always let it go long before). */
#define QC_SPIN_BOUND_US 60000000ull

/* The test kernels a fixture loads on its device (qc_fixture_open_with's `kernels`). */
enum { QC_SPIN_FLAG = 1, QC_SAXPY = 2, QC_ATOMIC_INC = 4, QC_FAULT = 8 };

typedef struct qc_fixture_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_t* device2; /* a second device (ordinal 1) when asked for and present */
  gpuhal_executable_t *spin_exe, *saxpy_exe, *inc_exe, *fault_exe;
  gpuhal_kernel_t *spin_flag, *saxpy, *atomic_inc, *fault;
} qc_fixture_t;

/* The kernels hold the device: released before it, when a test releases the device itself. */
static void qc_fixture_release_kernels(qc_fixture_t* f) {
  gpuhal_executable_release(f->spin_exe);
  gpuhal_executable_release(f->saxpy_exe);
  gpuhal_executable_release(f->inc_exe);
  gpuhal_executable_release(f->fault_exe);
  f->spin_exe = f->saxpy_exe = f->inc_exe = f->fault_exe = NULL;
}

static void qc_fixture_close(qc_fixture_t* f) {
  qc_fixture_release_kernels(f);
  qc_watchdog_arm(30, "gpuhal_device_release (fixture)");
  gpuhal_device_release(f->device);
  gpuhal_device_release(f->device2);
  qc_watchdog_disarm();
  qc_watchdog_arm(30, "gpuhal_driver_release (fixture)");
  gpuhal_driver_release(f->driver);
  qc_watchdog_disarm();
  memset(f, 0, sizeof(*f));
}

/* A driver (`trace_path`: options.trace_path, NULL: off) and its device 0 of `queues` queues
 * (`queue_entries_max`: the tuning field, 0: the default); with `two`, ordinal 1 too when
 * present; the `kernels` (QC_*) loaded on device 0. 0 (and a message) when the device or a
 * test kernel is not available. */
static int qc_fixture_open_with(qc_fixture_t* f, uint32_t queues, int32_t queue_entries_max, unsigned kernels, int two,
                                const char* trace_path) {
  gpuhal_driver_options_t options;
  gpuhal_device_params_t params;
  gpuhal_status_t st;
  int count = 0;
  memset(f, 0, sizeof(*f));
  memset(&options, 0, sizeof(options));
  memset(&params, 0, sizeof(params));
  options.trace_path = trace_path;
  params.queue_count = queues;
  params.tuning.queue_entries_max = queue_entries_max;
  st = gpuhal_driver_create(&options, &f->driver);
  if (!st) st = gpuhal_device_create(f->driver, 0, &params, &f->device);
  if (!st && two) st = gpuhal_driver_device_count(f->driver, &count);
  if (!st && two && count >= 2) st = gpuhal_device_create(f->driver, 1, &params, &f->device2);
  if (!st && (kernels & QC_SPIN_FLAG)) st = qc_load_kernel(f->device, "spin_flag", &f->spin_exe, &f->spin_flag);
  if (!st && (kernels & QC_SAXPY)) st = qc_load_kernel(f->device, "saxpy", &f->saxpy_exe, &f->saxpy);
  if (!st && (kernels & QC_ATOMIC_INC)) st = qc_load_kernel(f->device, "atomic_inc", &f->inc_exe, &f->atomic_inc);
  if (!st && (kernels & QC_FAULT)) st = qc_load_kernel(f->device, "fault", &f->fault_exe, &f->fault);
  if (st) {
    fprintf(stderr, "  fixture: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    qc_fixture_close(f);
    return 0;
  }
  return 1;
}

/* spin_flag in flight on `queue` until qc_blocker_let_go, then signalling `done` = 1:
 * whatever is queued behind it waits. */
typedef struct qc_blocker_s {
  gpuhal_buffer_t* words; /* the flag and spin_flag's out (qc_record_spin_flag) */
  gpuhal_command_buffer_t* cb;
  gpuhal_semaphore_t* done;
} qc_blocker_t;

static int qc_blocker_start(qc_fixture_t* f, qc_blocker_t* b, uint32_t queue, gpuhal_semaphore_t* done) {
  gpuhal_status_t st;
  uint32_t init[2] = {0, 0};
  uint64_t one = 1;
  memset(b, 0, sizeof(*b));
  b->done = done;
  st = gpuhal_buffer_allocate(f->device, GPUHAL_MEMORY_HOST_PINNED, 8, &b->words);
  if (!st) memcpy(gpuhal_buffer_host_pointer(b->words), init, 8);
  if (!st) st = qc_record_spin_flag(f->device, f->spin_flag, b->words, QC_SPIN_BOUND_US, &b->cb);
  if (!st)
    st = gpuhal_queue_execute(f->device, queue, gpuhal_semaphore_list_empty(),
                              gpuhal_semaphore_list_one(&b->done, &one), b->cb, NULL);
  if (st) {
    fprintf(stderr, "  blocker: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    return 0;
  }
  return 1;
}

static void qc_blocker_let_go(qc_blocker_t* b) {
  if (b->words) qc_flag_store(b->words, 1);
}

/* A command buffer (`flags`) of `n` atomic_inc dispatches on `counter`. */
static gpuhal_status_t qc_record_incs(qc_fixture_t* f, gpuhal_command_buffer_flags_t flags, gpuhal_buffer_t* counter,
                                      int n, gpuhal_command_buffer_t** out) {
  gpuhal_arg_t arg = gpuhal_arg_buffer(counter, 0);
  gpuhal_status_t st = gpuhal_command_buffer_create(f->device, flags, 0, out);
  int i;
  if (!st) st = gpuhal_command_buffer_begin(*out);
  for (i = 0; i < n && !st; ++i)
    st = gpuhal_cmd_dispatch(*out, f->atomic_inc, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg);
  if (!st) st = gpuhal_command_buffer_end(*out);
  return st;
}

#endif /* GPUHAL_TEST_QUEUE_UTIL_H */
