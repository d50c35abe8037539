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
 * leaves the rest NULL. */
static int qr_incs_open(qr_incs_t* t, gpuhal_command_buffer_flags_t flags) {
  gpuhal_kernel_t* inc = NULL;
  gpuhal_arg_t arg;
  memset(t, 0, sizeof(*t));
  TU_CHECK_OK(gpuhal_driver_create(NULL, &t->driver));
  if (!t->driver) return 0;
  TU_CHECK_OK(gpuhal_device_create(t->driver, 0, NULL, &t->device));
  if (t->device) TU_CHECK_OK(qc_load_kernel(t->device, "atomic_inc", &t->exe, &inc));
  if (inc) TU_CHECK_OK(gpuhal_buffer_allocate(t->device, GPUHAL_MEMORY_DEVICE, 4, &t->counter));
  arg = gpuhal_arg_buffer(t->counter, 0);
  if (t->counter) TU_CHECK_OK(qc_record_dispatch(t->device, flags, inc, 1, 1, 1, &arg, &t->cb));
  return 1;
}

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
        TU_CASE(alloca_out_of_device_memory), TU_CASE(one_shot_executed_twice), TU_CASE(dealloca_twice),
        TU_CASE(calls_on_a_lost_device))
