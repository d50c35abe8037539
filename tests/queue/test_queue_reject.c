/* A queue call that fails leaves no waiter behind (issue #14, defect 7): when a queue call
 * with valid arguments fails (host memory runs out, a CUDA call of the submission fails, the
 * device is lost), its signal semaphores fail with that error, so a thread already blocked
 * in gpuhal_semaphore_wait on them learns the error instead of timing out. Whether the call
 * returns the error itself or the operation fails later, the waiter must see it.
 *
 * The lost-device case runs last (a sticky error can leave a real GPU's process state
 * unusable) and CTest runs this file alone (tests/cmake/queue_core.cmake). */
#include "test_internals.h"

#include "test_queue_util.h"

#define QR_WAIT_S 10

static uint64_t qr_one = 1;

/* A thread blocked in gpuhal_semaphore_wait(s, 1, 10 s) from before the failing call. */
typedef struct qr_waiter_s {
  pthread_t thread;
  gpuhal_semaphore_t* semaphore;
  gpuhal_status_t result;
  int started;
} qr_waiter_t;
static void* qr_waiter_main(void* p) {
  qr_waiter_t* w = (qr_waiter_t*)p;
  w->result = gpuhal_semaphore_wait(w->semaphore, 1, qt_seconds(QR_WAIT_S));
  return NULL;
}
static void qr_waiter_start(qr_waiter_t* w, gpuhal_semaphore_t* s) {
  memset(w, 0, sizeof(*w));
  w->semaphore = s;
  w->started = pthread_create(&w->thread, NULL, qr_waiter_main, w) == 0;
  qc_sleep_ms(50); /* blocked by now */
}
/* Joins the waiter and checks it learned an error (carrying `needle` when not NULL), not a
 * timeout; `call` is what the failing queue call returned (owned; may be NULL). */
static void qr_waiter_check(qr_waiter_t* w, gpuhal_status_t call, const char* what, const char* needle) {
  if (!w->started) {
    TU_FAIL_AT(__FILE__, __LINE__, "%s: no waiter thread", what);
    gpuhal_status_free(call);
    return;
  }
  pthread_join(w->thread, NULL);
  fprintf(stderr, "  %s: the call returned '%s'; the waiter got '%s'\n", what, gpuhal_status_message(call),
          gpuhal_status_message(w->result));
  if (!w->result) {
    TU_FAIL_AT(__FILE__, __LINE__, "%s: the waiter saw the signal although the operation failed", what);
  } else if (gpuhal_status_code(w->result) == GPUHAL_STATUS_DEADLINE_EXCEEDED) {
    TU_FAIL_AT(__FILE__, __LINE__, "%s: the waiter timed out: the failed call left its signal semaphore untouched (%s)",
               what, gpuhal_status_message(w->result));
  } else {
    if (call) TU_CHECK_EQ_INT(gpuhal_status_code(w->result), gpuhal_status_code(call));
    if (needle) TU_CHECK_STR_CONTAINS(gpuhal_status_message(w->result), needle);
  }
  gpuhal_status_free(w->result);
  gpuhal_status_free(call);
}

/* Releases `device` (under the watchdog: a hang fails with `what`), then `driver`. */
static void qr_close(gpuhal_driver_t* driver, gpuhal_device_t* device, const char* what) {
  qc_watchdog_arm(30, what);
  gpuhal_device_release(device);
  qc_watchdog_disarm();
  gpuhal_driver_release(driver);
}

/* A driver and its device 0 with a command buffer (`flags`) of one atomic_inc on a counter. */
typedef struct qr_incs_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_buffer_t* counter;
  gpuhal_command_buffer_t* cb;
} qr_incs_t;

/* 0 when there is no driver (the check failed); a later step that fails fails its check and
 * leaves the rest NULL. `params`: the device's (NULL: the defaults). */
static int qr_incs_open_with(qr_incs_t* t, gpuhal_command_buffer_flags_t flags, const gpuhal_device_params_t* params) {
  gpuhal_kernel_t* inc = NULL;
  gpuhal_arg_t arg;
  memset(t, 0, sizeof(*t));
  TU_CHECK_OK(gpuhal_driver_create(NULL, &t->driver));
  if (!t->driver) return 0;
  TU_CHECK_OK(gpuhal_device_create(t->driver, 0, params, &t->device));
  if (t->device) TU_CHECK_OK(qc_load_kernel(t->device, "atomic_inc", &t->exe, &inc));
  if (inc) TU_CHECK_OK(gpuhal_buffer_allocate(t->device, GPUHAL_MEMORY_DEVICE, 4, &t->counter));
  arg = gpuhal_arg_buffer(t->counter, 0);
  if (t->counter) TU_CHECK_OK(qc_record_dispatch(t->device, flags, inc, 1, 1, 1, &arg, &t->cb));
  return 1;
}

static int qr_incs_open(qr_incs_t* t, gpuhal_command_buffer_flags_t flags) { return qr_incs_open_with(t, flags, NULL); }

/* The command buffer, the counter and the kernel; the device and driver go with qr_close. */
static void qr_incs_release(qr_incs_t* t) {
  gpuhal_command_buffer_release(t->cb);
  gpuhal_buffer_release(t->counter);
  gpuhal_executable_release(t->exe);
}

/* ---- host memory runs out during the call ---- */

typedef struct qr_failing_allocator_s {
  gpuhal_allocator_t allocator;
  int32_t failing; /* while set, every allocation fails */
} qr_failing_allocator_t;
static void* qr_alloc(size_t size, void* user) {
  if (__atomic_load_n(&((qr_failing_allocator_t*)user)->failing, __ATOMIC_SEQ_CST)) return NULL;
  return malloc(size);
}
static void qr_free(void* ptr, void* user) {
  (void)user;
  free(ptr);
}

static gpuhal_status_t qr_nop(void* user) {
  (void)user;
  return NULL;
}

/* `kind` 0: host call, 1: barrier execute, 2: alloca, 3: execute of a command buffer with
 * a binding slot (its first execute allocates the record of its binding table). */
static void out_of_host_memory(int kind) {
  static const char* names[] = {"host_call", "execute", "alloca", "execute"};
  gpuhal_command_buffer_t* cb = NULL;
  qr_failing_allocator_t fa;
  gpuhal_driver_options_t options;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_status_t call = NULL;
  qr_waiter_t waiter;
  memset(&fa, 0, sizeof(fa));
  fa.allocator.alloc = qr_alloc;
  fa.allocator.free = qr_free;
  fa.allocator.user = &fa;
  memset(&options, 0, sizeof(options));
  options.allocator = fa.allocator;
  TU_REQUIRE_OK(gpuhal_driver_create(&options, &driver));
  TU_CHECK_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s));
  if (device && kind == 3) {
    TU_CHECK_OK(
        gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_REUSABLE | GPUHAL_COMMAND_BUFFER_STREAM, 1, &cb));
    if (cb) TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
    if (cb) TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  }
  if (device && s && (kind != 3 || cb)) {
    TU_CHECK_OK(gpuhal_device_wait_idle(device, qt_seconds(QR_WAIT_S)));
    qr_waiter_start(&waiter, s);
    __atomic_store_n(&fa.failing, 1, __ATOMIC_SEQ_CST);
    switch (kind) {
      case 0:
        call = gpuhal_queue_host_call(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &qr_one),
                                      qr_nop, NULL);
        break;
      case 1:
      case 3:
        call = gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &qr_one),
                                    cb, NULL);
        break;
      default:
        call = gpuhal_queue_alloca(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &qr_one),
                                   4096, &buffer);
        break;
    }
    __atomic_store_n(&fa.failing, 0, __ATOMIC_SEQ_CST);
    if (!call) {
      /* nothing was refused: the operation must then simply complete */
      pthread_join(waiter.thread, NULL);
      TU_CHECK_OK(waiter.result);
      fprintf(stderr, "  %s: did not fail with host allocations failing (nothing to check)\n", names[kind]);
    } else {
      qr_waiter_check(&waiter, call, names[kind], NULL);
    }
    TU_CHECK_OK(gpuhal_device_wait_idle(device, qt_seconds(QR_WAIT_S)));
  }
  gpuhal_buffer_release(buffer);
  gpuhal_command_buffer_release(cb);
  gpuhal_semaphore_release(s);
  qr_close(driver, device, "gpuhal_device_release");
}

TU_TEST(out_of_host_memory_host_call) { out_of_host_memory(0); }
TU_TEST(out_of_host_memory_execute) { out_of_host_memory(1); }
TU_TEST(out_of_host_memory_alloca) { out_of_host_memory(2); }
TU_TEST(out_of_host_memory_execute_with_bindings) { out_of_host_memory(3); }

/* ---- a CUDA call of the submission fails (softcuda's fault injection) ---- */

static void cuda_call_fails(gpuhal_command_buffer_flags_t flags, const char* rule) {
  qr_incs_t incs;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_status_t call;
  qr_waiter_t waiter;
  if (!tu_softcuda()) TU_SKIP("fault injection needs softcuda");
  if (!qr_incs_open(&incs, flags)) return;
  TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &s));
  if (incs.cb && s) {
    TU_CHECK_OK(gpuhal_device_wait_idle(incs.device, qt_seconds(QR_WAIT_S)));
    qr_waiter_start(&waiter, s);
    TU_CHECK(tu_softcuda_faults(rule) == 0);
    call = gpuhal_queue_execute(incs.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &qr_one),
                                incs.cb, NULL);
    qr_waiter_check(&waiter, call, rule, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
    tu_softcuda_faults(NULL);
    gpuhal_status_free(gpuhal_device_wait_idle(incs.device, qt_seconds(QR_WAIT_S)));
  }
  tu_softcuda_faults(NULL);
  qr_incs_release(&incs);
  gpuhal_semaphore_release(s);
  qr_close(incs.driver, incs.device, "gpuhal_device_release");
}

TU_TEST(launch_fails_stream) {
  cuda_call_fails(GPUHAL_COMMAND_BUFFER_STREAM, "cuLaunchKernel@*=CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
}
TU_TEST(launch_fails_graph) {
  cuda_call_fails(GPUHAL_COMMAND_BUFFER_GRAPH, "cuGraphLaunch@*=CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
}

/* ---- a CUDA call fails after the work went on the stream ----
 * The record of the execute's signal event fails after cuGraphLaunch: the execute fails,
 * and its signal with it, but the launched graph runs when the stream gets there. What it
 * uses (the command buffer, its buffer) must stay alive until then, whatever the
 * application releases. The stream is held shut by a gate (softcuda_stream_enqueue) ahead
 * of the execute, so the graph cannot have run when the releases come. */
static int qr_gate_open;
static int qr_gate_run(void* payload) {
  int64_t deadline = gpuhal_now_ns() + 20000000000ll;
  (void)payload;
  while (!__atomic_load_n(&qr_gate_open, __ATOMIC_ACQUIRE) && gpuhal_now_ns() < deadline) tu_sleep_ns(100000);
  return 0;
}
typedef int (*qr_enqueue_fn)(void*, const char*, int (*)(void*), void (*)(void*), void*);
typedef int (*qr_accessible_fn)(const void*, size_t);

/* The application releases a failed execute's command buffer and the buffer its queued work
 * writes: the memory must stay (a moment later too: a free may be the worker's) while that
 * work may still run... */
static void qr_release_while_queued(gpuhal_command_buffer_t** cb, gpuhal_buffer_t** b, qr_accessible_fn accessible,
                                    uint64_t address) {
  gpuhal_command_buffer_release(*cb);
  *cb = NULL;
  gpuhal_buffer_release(*b);
  *b = NULL;
  qc_sleep_ms(20);
  if (!accessible((const void*)(uintptr_t)address, 1024))
    TU_FAIL_AT(__FILE__, __LINE__, "the buffer's memory was freed while the failed execute's work was queued");
}
/* ...and goes once the stream passed that work (the caller waited for idle). */
static void qr_freed_once_passed(qr_accessible_fn accessible, uint64_t address) {
  int64_t deadline = gpuhal_now_ns() + 10000000000ll;
  while (accessible((const void*)(uintptr_t)address, 1024) && gpuhal_now_ns() < deadline) tu_sleep_ns(1000000);
  TU_CHECK(!accessible((const void*)(uintptr_t)address, 1024));
}

TU_TEST(record_fails_after_the_launch) {
  qt_fixture_t f;
  gpuhal_buffer_t* b = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_status_t call, st;
  qr_enqueue_fn enqueue;
  qr_accessible_fn accessible;
  void* p;
  uint64_t address = 0;
  uint32_t fill = 0x5A5A5A5Au;
  if (!tu_softcuda()) TU_SKIP("fault injection needs softcuda");
  p = tu_softcuda_symbol("softcuda_stream_enqueue");
  memcpy(&enqueue, &p, sizeof(p));
  p = tu_softcuda_symbol("softcuda_accessible");
  memcpy(&accessible, &p, sizeof(p));
  TU_REQUIRE(enqueue && accessible);
  TU_REQUIRE(qt_open(&f, 1, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 1024, &b));
  TU_CHECK_OK(
      gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(b, 0), 1024, &fill, 4));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(gpuhal_buffer_device_address(b, &address));
  if (s && b && cb && address) {
    /* Warm: the event pool has an event, the graph is instantiated. */
    TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &qr_one),
                                     cb, NULL));
    TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, qt_seconds(QR_WAIT_S)));
    TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QR_WAIT_S)));
    __atomic_store_n(&qr_gate_open, 0, __ATOMIC_RELEASE);
    TU_CHECK(enqueue((void*)f.device->streams[0], "test gate", qr_gate_run, NULL, NULL) == 0);
    TU_CHECK(tu_softcuda_faults("cuEventRecord@1=CUDA_ERROR_OUT_OF_MEMORY") == 0);
    {
      uint64_t two = 2;
      call = gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &two), cb,
                                  NULL);
    }
    tu_softcuda_faults(NULL);
    st = gpuhal_semaphore_wait(s, 2, qt_seconds(QR_WAIT_S));
    if (!st || !strstr(gpuhal_status_message(st), "cuEventRecord"))
      TU_FAIL_AT(__FILE__, __LINE__, "the wait for the failed execute's signal: %s",
                 st ? gpuhal_status_message(st) : "OK");
    gpuhal_status_free(st);
    gpuhal_status_free(call);
    qr_release_while_queued(&cb, &b, accessible, address); /* the gate holds the stream */
    __atomic_store_n(&qr_gate_open, 1, __ATOMIC_RELEASE);
    TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QR_WAIT_S)));
    qr_freed_once_passed(accessible, address);
  }
  __atomic_store_n(&qr_gate_open, 1, __ATOMIC_RELEASE);
  tu_softcuda_faults(NULL);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(b);
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

/* ---- device memory runs out: an alloca of all the device memory (some is in use) ---- */

TU_TEST(alloca_out_of_device_memory) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_buffer_t *buffer = NULL, *taken = NULL;
  gpuhal_device_info_t info;
  qr_waiter_t waiter;
  gpuhal_status_t call;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_CHECK_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s));
  if (device && s) {
    memset(&info, 0, sizeof(info));
    TU_CHECK_OK(gpuhal_device_info(device, &info));
    TU_CHECK_OK(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, 64u << 20, &taken));
    qr_waiter_start(&waiter, s);
    call = gpuhal_queue_alloca(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &qr_one),
                               info.total_memory, &buffer);
    qr_waiter_check(&waiter, call, "alloca of all the device memory", NULL);
    gpuhal_status_free(gpuhal_device_wait_idle(device, qt_seconds(QR_WAIT_S)));
  }
  gpuhal_buffer_release(taken);
  gpuhal_buffer_release(buffer);
  gpuhal_semaphore_release(s);
  qr_close(driver, device, "gpuhal_device_release");
}

/* ---- a one-shot command buffer executed a second time ---- */

TU_TEST(one_shot_executed_twice) {
  qr_incs_t incs;
  gpuhal_semaphore_t *first = NULL, *s = NULL;
  qr_waiter_t waiter;
  gpuhal_status_t call;
  if (!qr_incs_open(&incs, GPUHAL_COMMAND_BUFFER_GRAPH)) return;
  TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &first));
  TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &s));
  if (incs.cb && s && first) {
    TU_CHECK_OK(gpuhal_queue_execute(incs.device, 0, gpuhal_semaphore_list_empty(),
                                     gpuhal_semaphore_list_one(&first, &qr_one), incs.cb, NULL));
    TU_CHECK_OK(gpuhal_semaphore_wait(first, 1, qt_seconds(QR_WAIT_S)));
    qr_waiter_start(&waiter, s);
    call = gpuhal_queue_execute(incs.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &qr_one),
                                incs.cb, NULL);
    qr_waiter_check(&waiter, call, "a one-shot command buffer executed twice", NULL);
    gpuhal_status_free(gpuhal_device_wait_idle(incs.device, qt_seconds(QR_WAIT_S)));
    {
      /* Once more with bad arguments: they are reported first, and nothing is failed for
       * them (the lists were not valid, so nothing may be done to their semaphores). */
      gpuhal_semaphore_t* t = NULL;
      gpuhal_semaphore_list_t broken = gpuhal_semaphore_list_one(&s, &qr_one);
      uint64_t value = 0;
      TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &t));
      broken.semaphores = NULL;
      TU_CHECK_STATUS(gpuhal_queue_execute(incs.device, 0, gpuhal_semaphore_list_empty(), broken, incs.cb, NULL),
                      GPUHAL_STATUS_INVALID_ARGUMENT, "argument 'signal' has count 1 but NULL semaphores");
      TU_CHECK_STATUS(gpuhal_queue_execute(incs.device, 99, gpuhal_semaphore_list_empty(),
                                           gpuhal_semaphore_list_one(&t, &qr_one), incs.cb, NULL),
                      GPUHAL_STATUS_OUT_OF_RANGE, "argument 'queue' (99)");
      TU_CHECK_OK(gpuhal_semaphore_query(t, &value)); /* not failed */
      TU_CHECK_EQ_INT((int)value, 0);
      gpuhal_semaphore_release(t);
    }
  }
  qr_incs_release(&incs);
  gpuhal_semaphore_release(first);
  gpuhal_semaphore_release(s);
  qr_close(incs.driver, incs.device, "gpuhal_device_release");
}

/* ---- a buffer deallocated twice ---- */

TU_TEST(dealloca_twice) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_semaphore_t *done = NULL, *s = NULL;
  uint64_t two = 2;
  qr_waiter_t waiter;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_CHECK_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &done));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s));
  if (device && done && s) {
    TU_CHECK_OK(gpuhal_queue_alloca(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&done, &qr_one),
                                    4096, &buffer));
    TU_CHECK_OK(gpuhal_queue_dealloca(device, 0, gpuhal_semaphore_list_one(&done, &qr_one),
                                      gpuhal_semaphore_list_one(&done, &two), buffer));
    qr_waiter_start(&waiter, s);
    qr_waiter_check(&waiter,
                    gpuhal_queue_dealloca(device, 1 % gpuhal_device_queue_count(device), gpuhal_semaphore_list_empty(),
                                          gpuhal_semaphore_list_one(&s, &qr_one), buffer),
                    "a second dealloca of one buffer", "already has a dealloca queued");
    TU_CHECK_OK(gpuhal_semaphore_wait(done, 2, qt_seconds(QR_WAIT_S)));
  }
  gpuhal_buffer_release(buffer);
  gpuhal_semaphore_release(done);
  gpuhal_semaphore_release(s);
  qr_close(driver, device, "gpuhal_device_release");
}

/* ---- provisional work whose issue fails on its side stream ----
 * On the memop path, work that waits for a value the host is to signal is issued at once on
 * a side stream behind a GPU wait (provisional work), or chained behind such work of its
 * queue (gpuhal__action_park_chain). A CUDA call of that issue failing fails the work's
 * signal with the CUDA error, and gives back what the issue took once what it left on the
 * side stream (a GPU wait, say) has drained: the device's count of GPU waits (while it is
 * held, frees are put off driver-wide), the ordinal's parked-stream reservation (while it is
 * held, module loads wait for it and then fail, and no more than tuning.gpu_parked_max less
 * one other streams park) and the side stream itself. What the failed issue left waiting
 * goes as parked work's waits do when the value does not come: when the application
 * releases that semaphore with nothing left to signal it, or releases the device. */

#define QR_SIDE_ERROR "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"

/* The calls of a provisional issue, in order: the side stream follows its queue's stream
 * (cuEventRecord there, cuStreamWaitEvent on the side), the GPU wait, the launch, the
 * signal's value write, the work's own event. */
static const char* const qr_side_rules[] = {
    "cuEventRecord@1=" QR_SIDE_ERROR,  "cuStreamWaitEvent@1=" QR_SIDE_ERROR,    "cuStreamWaitValue64@1=" QR_SIDE_ERROR,
    "cuLaunchKernel@1=" QR_SIDE_ERROR, "cuStreamWriteValue64@1=" QR_SIDE_ERROR, "cuEventRecord@2=" QR_SIDE_ERROR};
enum { QR_SIDE_RULES = (int)(sizeof(qr_side_rules) / sizeof(qr_side_rules[0])) };

/* softcuda: the leaks reported at context teardowns so far. */
static unsigned long long qr_softcuda_leaks(void) {
  unsigned long long (*fn)(void) = NULL;
  void* sym = tu_softcuda_symbol("softcuda_query_leaks");
  memcpy(&fn, &sym, sizeof(fn));
  return fn ? fn() : 0;
}

/* Polls (up to `ms`) until softcuda has seen at least `n` calls of `entry`: 1 when it has. */
static int qr_calls_reach(const char* entry, unsigned long long n, int ms) {
  int waited = 0;
  while (qt_softcuda_calls(entry) < n && waited < ms) {
    qc_sleep_ms(2);
    waited += 2;
  }
  return qt_softcuda_calls(entry) >= n;
}

/* The driver's count of queue work that may wait on the GPU (frees are put off while it is
 * not 0), and ordinal 0's parked streams. */
static int32_t qr_gpu_waits(gpuhal_driver_t* driver) {
  int32_t n;
  gpuhal__mutex_lock(&driver->parked_mutex);
  n = driver->gpu_waits;
  gpuhal__mutex_unlock(&driver->parked_mutex);
  return n;
}
static int32_t qr_parked(gpuhal_driver_t* driver) { return gpuhal__atomic_load(&driver->ordinals[0].parked); }

/* Polls (up to `ms`) until nothing of the driver waits on the GPU or holds a parked stream. */
static int qr_side_settled(gpuhal_driver_t* driver, int ms) {
  int waited = 0;
  while ((qr_gpu_waits(driver) != 0 || qr_parked(driver) != 0) && waited < ms) {
    qc_sleep_ms(2);
    waited += 2;
  }
  if (qr_gpu_waits(driver) == 0 && qr_parked(driver) == 0) return 1;
  fprintf(stderr, "  after %d ms: %d GPU waits counted, %d streams parked\n", ms, (int)qr_gpu_waits(driver),
          (int)qr_parked(driver));
  return 0;
}

/* What comes after the failure: the host signals the value the work waited for; the
 * application releases that semaphore unsignalled (nothing else can signal it: it fails,
 * which lets the GPU waits on it go); the device is released first. */
enum { QR_GATE_SIGNALLED, QR_GATE_RELEASED, QR_DEVICE_RELEASED };

/* `rule` fails a call of a provisional issue: of the parked work itself, or (`chained`) of
 * work chained behind it (one parked stream: tuning.gpu_parked_max = 1); `then`: QR_GATE_*. */
static void qr_side_issue_fails(const char* rule, int chained, int then) {
  static const char* const thens[] = {"the gate signalled", "the gate released unsignalled",
                                      "the device released first"};
  gpuhal_device_params_t params;
  qr_incs_t incs;
  gpuhal_semaphore_t *gate = NULL, *head = NULL, *s = NULL, *later_gate = NULL, *later = NULL;
  gpuhal_buffer_t* victim = NULL;
  gpuhal_executable_t* saxpy = NULL;
  gpuhal_status_t call;
  qr_waiter_t waiter;
  unsigned long long leaks = qr_softcuda_leaks(), frees, gpu_waits;
  fprintf(stderr, "  %s, %s, %s\n", rule, chained ? "chained behind parked work" : "parked work", thens[then]);
  memset(&params, 0, sizeof(params));
  params.tuning.gpu_parked_max = 1;
  params.tuning.load_parked_wait_ns = 1000000000; /* a leaked park fails a module load after 1 s */
  if (!qr_incs_open_with(&incs, GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE, &params)) return;
  TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &gate));
  TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &head));
  TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &s));
  TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &later_gate));
  TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &later));
  if (incs.device) TU_CHECK_OK(gpuhal_buffer_allocate(incs.device, GPUHAL_MEMORY_DEVICE, 4096, &victim));
  if (incs.cb && gate && head && s && later_gate && later && victim) {
    TU_CHECK_OK(gpuhal_device_wait_idle(incs.device, qt_seconds(QR_WAIT_S)));
    if (chained) {
      /* The parked head: its follow, GPU wait, launch, value write and event enqueued. */
      unsigned long long records = qt_softcuda_calls("cuEventRecord");
      TU_CHECK_OK(gpuhal_queue_execute(incs.device, 0, gpuhal_semaphore_list_one(&gate, &qr_one),
                                       gpuhal_semaphore_list_one(&head, &qr_one), incs.cb, NULL));
      TU_CHECK(qr_calls_reach("cuEventRecord", records + 2, QR_WAIT_S * 1000));
      TU_CHECK_EQ_INT(qr_parked(incs.driver), 1);
    }
    /* The work fails as it is issued, long before the gate: its waiter learns the error. */
    qr_waiter_start(&waiter, s);
    TU_CHECK(tu_softcuda_faults(rule) == 0);
    call = gpuhal_queue_execute(incs.device, 0, gpuhal_semaphore_list_one(&gate, &qr_one),
                                gpuhal_semaphore_list_one(&s, &qr_one), incs.cb, NULL);
    qr_waiter_check(&waiter, call, rule, QR_SIDE_ERROR);
    tu_softcuda_faults(NULL);
    if (then == QR_GATE_RELEASED) {
      gpuhal_semaphore_release(gate);
      gate = NULL;
      if (chained) TU_CHECK_STATUS(gpuhal_semaphore_wait(head, 1, qt_seconds(QR_WAIT_S)), GPUHAL_STATUS_ABORTED, NULL);
    }
    if (then != QR_DEVICE_RELEASED) {
      if (gate) TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
      if (chained && gate) TU_CHECK_OK(gpuhal_semaphore_wait(head, 1, qt_seconds(QR_WAIT_S)));
      /* A free is not put off for ever: nothing waits on the GPU any more. */
      frees = qt_softcuda_calls("cuMemFree");
      gpuhal_buffer_release(victim);
      victim = NULL;
      TU_CHECK(qr_calls_reach("cuMemFree", frees + 1, QR_WAIT_S * 1000));
      TU_CHECK(qr_side_settled(incs.driver, QR_WAIT_S * 1000));
      /* Work behind a value the host is to signal parks on the GPU again (the one stream
       * that may park is free), and a module load goes ahead (nothing is parked). */
      gpu_waits = qt_softcuda_calls("cuStreamWaitValue64");
      TU_CHECK_OK(gpuhal_queue_execute(incs.device, 0, gpuhal_semaphore_list_one(&later_gate, &qr_one),
                                       gpuhal_semaphore_list_one(&later, &qr_one), incs.cb, NULL));
      TU_CHECK(qr_calls_reach("cuStreamWaitValue64", gpu_waits + 1, QR_WAIT_S * 1000));
      TU_CHECK_OK(gpuhal_semaphore_signal(later_gate, 1));
      TU_CHECK_OK(gpuhal_semaphore_wait(later, 1, qt_seconds(QR_WAIT_S)));
      TU_CHECK_OK(tu_load_kernel(incs.device, "saxpy", &saxpy, NULL));
      TU_CHECK_OK(gpuhal_device_wait_idle(incs.device, qt_seconds(QR_WAIT_S)));
      TU_CHECK(qr_side_settled(incs.driver, QR_WAIT_S * 1000));
    }
  }
  gpuhal_executable_release(saxpy);
  gpuhal_buffer_release(victim);
  qr_incs_release(&incs);
  qr_close(incs.driver, incs.device, "gpuhal_device_release (a failed provisional issue)");
  /* Nothing was left parked in the context at its teardown. */
  TU_CHECK_EQ_INT(qr_softcuda_leaks(), leaks);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(head);
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(later_gate);
  gpuhal_semaphore_release(later);
}

/* Side streams are the memop path's; failing their calls needs softcuda. */
static int qr_side_streams(void) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_status_t st;
  int memops;
  if (!tu_softcuda()) return 0;
  st = gpuhal_driver_create(NULL, &driver);
  if (st) {
    gpuhal_status_free(st);
    return 0;
  }
  memops = gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS);
  gpuhal_driver_release(driver);
  return memops;
}

TU_TEST(side_issue_fails_parked_work) {
  int i;
  if (!qr_side_streams()) TU_SKIP("side streams: the memop path, on softcuda (fault injection)");
  for (i = 0; i < QR_SIDE_RULES; ++i) qr_side_issue_fails(qr_side_rules[i], 0, QR_GATE_SIGNALLED);
}

TU_TEST(side_issue_fails_chained_work) {
  int i;
  if (!qr_side_streams()) TU_SKIP("side streams: the memop path, on softcuda (fault injection)");
  for (i = 0; i < QR_SIDE_RULES; ++i) qr_side_issue_fails(qr_side_rules[i], 1, QR_GATE_SIGNALLED);
}

TU_TEST(side_issue_fails_then_its_gate_is_released) {
  int i;
  if (!qr_side_streams()) TU_SKIP("side streams: the memop path, on softcuda (fault injection)");
  for (i = 0; i < QR_SIDE_RULES; ++i) {
    qr_side_issue_fails(qr_side_rules[i], 0, QR_GATE_RELEASED);
    qr_side_issue_fails(qr_side_rules[i], 1, QR_GATE_RELEASED);
  }
}

TU_TEST(side_issue_fails_then_the_device_is_released) {
  int i;
  if (!qr_side_streams()) TU_SKIP("side streams: the memop path, on softcuda (fault injection)");
  for (i = 0; i < QR_SIDE_RULES; ++i) {
    qr_side_issue_fails(qr_side_rules[i], 0, QR_DEVICE_RELEASED);
    qr_side_issue_fails(qr_side_rules[i], 1, QR_DEVICE_RELEASED);
  }
}

/* A provisional issue that fails after its work went on its side stream (the signal's value
 * write, or the event record after it) is retired at once: its side stream may wait for a
 * value that never comes. The work there still runs once the gate opens, so what it uses
 * must outlive the application's releases: the stream keeps its GPU wait counted
 * (gpu_wait_held) until it drained, and every free is put off meanwhile. Here a fill of a
 * buffer, released with its command buffer while the gate is shut: the memory stays until
 * the stream passed the fill, then goes. */
static unsigned long long qr_work_calls(void) {
  return tu_softcuda_calls("cuGraphLaunch") + tu_softcuda_calls("cuLaunchKernel") +
         tu_softcuda_calls("cuMemsetD8Async") + tu_softcuda_calls("cuMemsetD32Async");
}
static void qr_side_fails_after_the_launch(gpuhal_command_buffer_flags_t flags, const char* rule) {
  qt_fixture_t f;
  gpuhal_buffer_t* b = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t *gate = NULL, *s = NULL;
  gpuhal_status_t call, st;
  qr_accessible_fn accessible;
  void* p = tu_softcuda_symbol("softcuda_accessible");
  uint64_t address = 0;
  uint32_t fill = 0x5A5A5A5Au;
  fprintf(stderr, "  %s, %s\n", flags & GPUHAL_COMMAND_BUFFER_STREAM ? "STREAM" : "GRAPH", rule);
  memcpy(&accessible, &p, sizeof(p));
  TU_REQUIRE(accessible);
  TU_REQUIRE(qt_open(&f, 1, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 1024, &b));
  TU_CHECK_OK(gpuhal_command_buffer_create(f.device, flags, 0, &cb)); /* one-shot: a REUSABLE GRAPH never parks */
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(b, 0), 1024, &fill, 4));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(gpuhal_buffer_device_address(b, &address));
  if (gate && s && b && cb && address) {
    /* Warm: the event pool has an event. */
    TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &qr_one),
                                     NULL, NULL));
    TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, qt_seconds(QR_WAIT_S)));
    TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QR_WAIT_S)));
    TU_CHECK(tu_softcuda_faults(rule) == 0);
    {
      uint64_t two = 2;
      unsigned long long work = qr_work_calls();
      call = gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&gate, &qr_one),
                                  gpuhal_semaphore_list_one(&s, &two), cb, NULL);
      st = gpuhal_semaphore_wait(s, 2, qt_seconds(QR_WAIT_S)); /* the issue may be the worker's */
      tu_softcuda_faults(NULL);
      TU_CHECK(qr_work_calls() > work); /* the fill went on the side stream before the failure */
    }
    if (!st || gpuhal_status_code(st) != GPUHAL_STATUS_RESOURCE_EXHAUSTED)
      TU_FAIL_AT(__FILE__, __LINE__, "the wait for the failed execute's signal: %s",
                 st ? gpuhal_status_message(st) : "OK");
    gpuhal_status_free(st);
    gpuhal_status_free(call);
    qr_release_while_queued(&cb, &b, accessible, address); /* the fill waits for the gate */
    TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
    TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QR_WAIT_S)));
    qr_freed_once_passed(accessible, address);
  }
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(b);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(s);
  qt_close(&f);
}
TU_TEST(side_issue_fails_after_the_launch) {
  static const char* const rules[] = {"cuStreamWriteValue64@1=" QR_SIDE_ERROR, "cuEventRecord@2=" QR_SIDE_ERROR};
  int i;
  if (!qr_side_streams()) TU_SKIP("side streams: the memop path, on softcuda (fault injection)");
  for (i = 0; i < 2; ++i) {
    qr_side_fails_after_the_launch(GPUHAL_COMMAND_BUFFER_GRAPH, rules[i]);
    qr_side_fails_after_the_launch(GPUHAL_COMMAND_BUFFER_STREAM, rules[i]);
  }
}

/* ---- what a failed provisional issue notes of its GPU waits ----
 * Each GPU wait of provisional work is noted before it is enqueued (the note is what lets it
 * go if the issue then fails), and only the waits enqueued are noted. */

/* A driver allocator that refuses the note of a GPU wait (gpuhal__side_left_t) while armed. */
static int32_t qr_refuse_notes;
static void* qr_note_alloc(size_t size, void* user) {
  (void)user;
  if (__atomic_load_n(&qr_refuse_notes, __ATOMIC_SEQ_CST) && size == sizeof(gpuhal__side_left_t)) return NULL;
  return malloc(size);
}

/* No memory for the note: the issue fails before its GPU wait, leaving nothing on the GPU
 * (its launch would fail too, leaving the wait there with no note: then nothing let it go,
 * and a put-off free held the device's release for ever). */
TU_TEST(side_issue_without_memory_for_its_note) {
  gpuhal_driver_options_t options;
  gpuhal_device_params_t params;
  qr_incs_t incs;
  gpuhal_semaphore_t *gate = NULL, *s = NULL;
  gpuhal_buffer_t* victim = NULL;
  gpuhal_status_t call;
  qr_waiter_t waiter;
  unsigned long long gpu_waits, frees;
  if (!qr_side_streams()) TU_SKIP("side streams: the memop path, on softcuda (fault injection)");
  memset(&incs, 0, sizeof(incs));
  memset(&options, 0, sizeof(options));
  options.allocator.alloc = qr_note_alloc;
  options.allocator.free = qr_free;
  memset(&params, 0, sizeof(params));
  TU_REQUIRE_OK(gpuhal_driver_create(&options, &incs.driver));
  TU_CHECK_OK(gpuhal_device_create(incs.driver, 0, &params, &incs.device));
  TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &gate));
  TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &s));
  if (incs.device) TU_CHECK_OK(gpuhal_buffer_allocate(incs.device, GPUHAL_MEMORY_DEVICE, 4096, &victim));
  if (incs.device && gate && s && victim) {
    gpuhal_kernel_t* inc = NULL;
    gpuhal_arg_t arg;
    TU_CHECK_OK(qc_load_kernel(incs.device, "atomic_inc", &incs.exe, &inc));
    if (inc) TU_CHECK_OK(gpuhal_buffer_allocate(incs.device, GPUHAL_MEMORY_DEVICE, 4, &incs.counter));
    arg = gpuhal_arg_buffer(incs.counter, 0);
    if (incs.counter)
      TU_CHECK_OK(qc_record_dispatch(incs.device, GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE, inc, 1,
                                     1, 1, &arg, &incs.cb));
  }
  if (incs.cb && gate && s && victim) {
    TU_CHECK_OK(gpuhal_device_wait_idle(incs.device, qt_seconds(QR_WAIT_S)));
    gpu_waits = qt_softcuda_calls("cuStreamWaitValue64");
    qr_waiter_start(&waiter, s);
    __atomic_store_n(&qr_refuse_notes, 1, __ATOMIC_SEQ_CST);
    TU_CHECK(tu_softcuda_faults("cuLaunchKernel@1=" QR_SIDE_ERROR) == 0);
    call = gpuhal_queue_execute(incs.device, 0, gpuhal_semaphore_list_one(&gate, &qr_one),
                                gpuhal_semaphore_list_one(&s, &qr_one), incs.cb, NULL);
    qr_waiter_check(&waiter, call, "no memory for the note of a GPU wait", "the note of a GPU wait");
    tu_softcuda_faults(NULL);
    __atomic_store_n(&qr_refuse_notes, 0, __ATOMIC_SEQ_CST);
    TU_CHECK_EQ_INT((int)(qt_softcuda_calls("cuStreamWaitValue64") - gpu_waits), 0); /* nothing enqueued */
    /* Nothing waits on the GPU: the side stream, its park and its GPU wait go back, and a
     * free is not put off for ever (the gate is never signalled). */
    TU_CHECK(qr_side_settled(incs.driver, QR_WAIT_S * 1000));
    frees = qt_softcuda_calls("cuMemFree");
    gpuhal_buffer_release(victim);
    victim = NULL;
    TU_CHECK(qr_calls_reach("cuMemFree", frees + 1, QR_WAIT_S * 1000));
  }
  tu_softcuda_faults(NULL);
  gpuhal_buffer_release(victim);
  qr_incs_release(&incs);
  qr_close(incs.driver, incs.device, "gpuhal_device_release (no memory for the note of a GPU wait)");
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(s);
}

/* An issue that fails before its GPU wait (its side stream's follow of the queue's stream)
 * left no wait on the gate: releasing the device before the side stream is seen drained
 * (cuStreamQuery kept NOT_READY) leaves the gate, which the application still holds and
 * nothing waits for, as it was. */
TU_TEST(side_issue_fails_before_its_gpu_wait) {
  static const char* const rules[] = {"cuEventRecord@1=" QR_SIDE_ERROR ",cuStreamQuery@*=CUDA_ERROR_NOT_READY",
                                      "cuStreamWaitEvent@1=" QR_SIDE_ERROR ",cuStreamQuery@*=CUDA_ERROR_NOT_READY"};
  int i;
  if (!qr_side_streams()) TU_SKIP("side streams: the memop path, on softcuda (fault injection)");
  for (i = 0; i < 2; ++i) {
    qr_incs_t incs;
    gpuhal_semaphore_t *gate = NULL, *s = NULL;
    uint64_t value = 7;
    fprintf(stderr, "  %s\n", rules[i]);
    if (!qr_incs_open(&incs, GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE)) return;
    TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &gate));
    TU_CHECK_OK(gpuhal_semaphore_create(incs.driver, 0, &s));
    if (incs.cb && gate && s) {
      TU_CHECK_OK(gpuhal_device_wait_idle(incs.device, qt_seconds(QR_WAIT_S)));
      TU_CHECK(tu_softcuda_faults(rules[i]) == 0);
      gpuhal_status_free(gpuhal_queue_execute(incs.device, 0, gpuhal_semaphore_list_one(&gate, &qr_one),
                                              gpuhal_semaphore_list_one(&s, &qr_one), incs.cb, NULL));
      TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 1, qt_seconds(QR_WAIT_S)), GPUHAL_STATUS_RESOURCE_EXHAUSTED,
                      QR_SIDE_ERROR);
    }
    qr_incs_release(&incs);
    qr_close(incs.driver, incs.device, "gpuhal_device_release (a side stream not seen drained)");
    tu_softcuda_faults(NULL);
    TU_CHECK_OK(gpuhal_semaphore_query(gate, &value)); /* not failed */
    TU_CHECK_EQ_INT((int)value, 0);
    TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
    gpuhal_semaphore_release(gate);
    gpuhal_semaphore_release(s);
  }
}

/* 1 when `word` is on the driver's free words (given back for reuse). */
static int qr_word_free(gpuhal_driver_t* driver, const volatile uint64_t* word) {
  uint64_t* w;
  int found = 0;
  gpuhal__mutex_lock(&driver->words_mutex);
  for (w = driver->free_words; w && !found; w = (uint64_t*)(uintptr_t)*w) found = (const volatile uint64_t*)w == word;
  gpuhal__mutex_unlock(&driver->words_mutex);
  return found;
}

/* An execute(wait gate 1, signal s 1) on an idle device whose issue fails with `rule`'s
 * injected error, and s failed with it. -1: the device did not open (the case is over); 0:
 * the set-up failed; 1: done. qr_side_fail_close ends the case either way. */
static int qr_side_fail(qr_incs_t* incs, gpuhal_semaphore_t** gate, gpuhal_semaphore_t** s, const char* rule) {
  if (!qr_incs_open(incs, GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE)) return -1;
  TU_CHECK_OK(gpuhal_semaphore_create(incs->driver, 0, gate));
  TU_CHECK_OK(gpuhal_semaphore_create(incs->driver, 0, s));
  if (!incs->cb || !*gate || !*s) return 0;
  TU_CHECK_OK(gpuhal_device_wait_idle(incs->device, qt_seconds(QR_WAIT_S)));
  TU_CHECK(tu_softcuda_faults(rule) == 0);
  gpuhal_status_free(gpuhal_queue_execute(incs->device, 0, gpuhal_semaphore_list_one(gate, &qr_one),
                                          gpuhal_semaphore_list_one(s, &qr_one), incs->cb, NULL));
  tu_softcuda_faults(NULL);
  TU_CHECK_STATUS(gpuhal_semaphore_wait(*s, 1, qt_seconds(QR_WAIT_S)), GPUHAL_STATUS_RESOURCE_EXHAUSTED, QR_SIDE_ERROR);
  return 1;
}
static void qr_side_fail_close(qr_incs_t* incs, gpuhal_semaphore_t* gate, gpuhal_semaphore_t* s) {
  tu_softcuda_faults(NULL);
  qr_incs_release(incs);
  qr_close(incs->driver, incs->device, "gpuhal_device_release");
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(s);
}

/* The GPU wait a failed issue left on the gate's word drained: the gate's word goes back for
 * reuse at its release, not kept for ever. */
TU_TEST(side_issue_fails_then_its_gate_word_goes_back) {
  qr_incs_t incs;
  gpuhal_semaphore_t *gate = NULL, *s = NULL;
  volatile uint64_t* word = NULL;
  int waited = 0, r;
  if (!qr_side_streams()) TU_SKIP("side streams: the memop path, on softcuda (fault injection)");
  if ((r = qr_side_fail(&incs, &gate, &s, "cuLaunchKernel@1=" QR_SIDE_ERROR)) < 0) return;
  if (r) {
    word = gate->word;
    TU_CHECK(word != NULL); /* armed by the GPU wait */
    TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
    TU_CHECK(qr_side_settled(incs.driver, QR_WAIT_S * 1000));
    TU_CHECK_OK(gpuhal_device_wait_idle(incs.device, qt_seconds(QR_WAIT_S)));
    gpuhal_semaphore_release(gate);
    gate = NULL;
    while (word && !qr_word_free(incs.driver, word) && waited < QR_WAIT_S * 1000) {
      qc_sleep_ms(2);
      waited += 2;
    }
    if (word) TU_CHECK(qr_word_free(incs.driver, word));
  }
  qr_side_fail_close(&incs, gate, s);
}

/* The work's event record fails after its signal's value write was enqueued behind the GPU
 * wait: that write runs once the gate opens, long after the failure stored the failed value
 * in the signal's word. Once the side stream drained the word must still say failed: a
 * GPU wait on it that was not yet polling would stay blocked (until the device's release)
 * on a word lowered to the written value. */
TU_TEST(side_issue_fails_after_writing_its_signal_word) {
  qr_incs_t incs;
  gpuhal_semaphore_t *gate = NULL, *s = NULL;
  volatile uint64_t* word = NULL;
  int r;
  if (!qr_side_streams()) TU_SKIP("side streams: the memop path, on softcuda (fault injection)");
  if ((r = qr_side_fail(&incs, &gate, &s, "cuEventRecord@2=" QR_SIDE_ERROR)) < 0) return;
  if (r) {
    word = s->word;
    TU_CHECK(word != NULL); /* provisional work writes its signal's word */
    if (word) TU_CHECK(*word == (uint64_t)INT64_MAX);
    qc_sleep_ms(50); /* the failed work is retired and released (which stores the failure again) */
    TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1)); /* the late write runs */
    TU_CHECK(qr_side_settled(incs.driver, QR_WAIT_S * 1000));
    TU_CHECK_OK(gpuhal_device_wait_idle(incs.device, qt_seconds(QR_WAIT_S)));
    if (word) TU_CHECK_EQ_INT((long long)*word, (long long)INT64_MAX);
  }
  qr_side_fail_close(&incs, gate, s);
}

/* ---- the device is lost ---- */

TU_TEST(calls_on_a_lost_device) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* fault = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t *faulted = NULL, *s[3] = {NULL, NULL, NULL};
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_arg_t arg = gpuhal_arg_u64(0x10);
  gpuhal_status_t st;
  int i;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_CHECK_OK(gpuhal_device_create(driver, 0, NULL, &device));
  st = device ? qc_load_kernel(device, "fault", &exe, &fault)
              : gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "no device");
  if (st) {
    gpuhal_status_free(st);
    gpuhal_executable_release(exe);
    gpuhal_device_release(device);
    gpuhal_driver_release(driver);
    TU_SKIP("no device or fault kernel");
  }
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &faulted));
  for (i = 0; i < 3; ++i) TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s[i]));
  TU_CHECK_OK(qc_record_dispatch(device, GPUHAL_COMMAND_BUFFER_GRAPH, fault, 1, 1, 1, &arg, &cb));
  TU_REQUIRE(cb && faulted && s[0] && s[1] && s[2]);
  TU_CHECK_OK(gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(),
                                   gpuhal_semaphore_list_one(&faulted, &qr_one), cb, NULL));
  st = gpuhal_semaphore_wait(faulted, 1, qt_seconds(20));
  TU_CHECK(st != NULL);
  gpuhal_status_free(st);
  st = gpuhal_device_lost_status(device);
  TU_CHECK(st != NULL);
  gpuhal_status_free(st);
  /* Calls after the loss: each call's signal must fail with the loss, for a waiter too. */
  for (i = 0; i < 3; ++i) {
    static const char* names[] = {"execute on a lost device", "host_call on a lost device", "alloca on a lost device"};
    qr_waiter_t waiter;
    gpuhal_status_t call;
    qr_waiter_start(&waiter, s[i]);
    if (i == 0) {
      call = gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s[i], &qr_one),
                                  NULL, NULL);
    } else if (i == 1) {
      call = gpuhal_queue_host_call(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s[i], &qr_one),
                                    qr_nop, NULL);
    } else {
      call = gpuhal_queue_alloca(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s[i], &qr_one),
                                 4096, &buffer);
    }
    qr_waiter_check(&waiter, call, names[i], "CUDA_ERROR_ILLEGAL_ADDRESS");
  }
  gpuhal_status_free(gpuhal_device_wait_idle(device, qt_seconds(QR_WAIT_S)));
  gpuhal_buffer_release(buffer);
  gpuhal_command_buffer_release(cb);
  gpuhal_executable_release(exe);
  gpuhal_semaphore_release(faulted);
  for (i = 0; i < 3; ++i) gpuhal_semaphore_release(s[i]);
  qr_close(driver, device, "gpuhal_device_release (lost device)");
}

TU_MAIN(TU_CASE(out_of_host_memory_host_call), TU_CASE(out_of_host_memory_execute), TU_CASE(out_of_host_memory_alloca),
        TU_CASE(out_of_host_memory_execute_with_bindings), TU_CASE(launch_fails_stream), TU_CASE(launch_fails_graph),
        TU_CASE(record_fails_after_the_launch), TU_CASE(alloca_out_of_device_memory), TU_CASE(one_shot_executed_twice),
        TU_CASE(dealloca_twice), TU_CASE(side_issue_fails_parked_work), TU_CASE(side_issue_fails_chained_work),
        TU_CASE(side_issue_fails_then_its_gate_is_released), TU_CASE(side_issue_fails_then_the_device_is_released),
        TU_CASE(side_issue_fails_after_the_launch), TU_CASE(side_issue_without_memory_for_its_note),
        TU_CASE(side_issue_fails_before_its_gpu_wait), TU_CASE(side_issue_fails_then_its_gate_word_goes_back),
        TU_CASE(side_issue_fails_after_writing_its_signal_word), TU_CASE(calls_on_a_lost_device))
