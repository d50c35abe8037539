/* test_last_release: the application's last release ends gpuhal's work, whichever object it
 * is and on whichever thread, and never waits for work that may not run.
 *
 *  1. The driver released first (objects hold it), the device last while its kernel runs:
 *     the device release drains the work and tears the device down before it returns (it
 *     returned at once, and the teardown ran later on gpuhal's threads, after a program
 *     that exits right away had gone: everything leaked).
 *  2. The same with a semaphore last: work gated on it, the gate signalled, released.
 *  3. A host function makes the application's last driver release: it returns at once
 *     (it waited the whole settle bound, 30 s, for the host call it ran in).
 *  4. The driver released last while released work waits on the GPU for a value the
 *     application still holds (memops): it returns at once (it waited 30 s), and the
 *     work runs when the application signals.
 *  5. A host function waits for the application, which first releases the device (a
 *     command buffer still holds it) and the driver: the driver release returns within
 *     about a second (it waited for the function, up to the 30 s bound, while the
 *     application could not get to open its gate); the device goes at the application's
 *     last release, after.
 *  6. A host function that is merely slow (300 ms), with a host call and an execute waiting
 *     behind it, when the application makes its last release: that release waits for all
 *     of it, so a program may exit right after (a settle that left every running function
 *     alone let them run on after the release, and cut them short at exit).
 *  7. Two chains alternating host calls and executes behind a gate, the gate's release
 *     last: it waits for every step (it returned between two steps).
 *  8. gpuhal_device_wait_idle from a host function of the device: FAILED_PRECONDITION at
 *     once (an infinite wait never returned).
 *  9. Work held by a gate the application holds, one of its inputs failed: a release then
 *     returns at once (it waited 30 s: the work did not count as blocked).
 * 10-15. Chains across released devices (the section below): the last release waits for
 *     work that a device it settled later lets go, however often the chain changes devices,
 *     and keeps a released device until no other's work can let its work go.
 *
 * "Torn down" is checked by the threads: a device's worker, completion and host-call
 * threads are joined by its teardown, so once the last release returns none may be left
 * (the detached reaper excepted). SOFTCUDA_LEAKS=fatal also checks the CUDA objects at
 * exit on softcuda. Every wait has a timeout; a watchdog ends a hang. */
#include "gpuhal.h"
#include "test_leak_check.h"
#include "test_util.h"

#include <dirent.h>
#include <unistd.h>

#define LR_KERNEL_US 50000 /* long enough to be running when the last release comes */

static gpuhal_timeout_t lr_seconds(int s) { return gpuhal_timeout_relative_ns((int64_t)s * 1000000000ll); }

typedef struct lr_fixture_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_command_buffer_t* cb; /* one spin_us dispatch of LR_KERNEL_US */
} lr_fixture_t;

static int lr_open(lr_fixture_t* f) {
  gpuhal_kernel_t* spin = NULL;
  gpuhal_arg_t arg = gpuhal_arg_u64(LR_KERNEL_US);
  gpuhal_status_t st;
  alarm(120); /* a hang ends the test (SIGALRM) instead of stalling CTest */
  memset(f, 0, sizeof(*f));
  st = gpuhal_driver_create(NULL, &f->driver);
  if (!st) st = gpuhal_device_create(f->driver, 0, NULL, &f->device);
  if (!st) st = tu_load_kernel(f->device, "spin_us", &f->exe, &spin);
  if (!st) st = gpuhal_command_buffer_create(f->device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &f->cb);
  if (!st) st = gpuhal_command_buffer_begin(f->cb);
  if (!st) st = gpuhal_cmd_dispatch(f->cb, spin, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg);
  if (!st) st = gpuhal_command_buffer_end(f->cb);
  if (st) {
    fprintf(stderr, "  setup: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    gpuhal_command_buffer_release(f->cb);
    gpuhal_executable_release(f->exe);
    gpuhal_device_release(f->device);
    gpuhal_driver_release(f->driver);
    return 0;
  }
  return 1;
}

/* Releases everything but the device and the driver. */
static void lr_release_work_objects(lr_fixture_t* f) {
  gpuhal_command_buffer_release(f->cb);
  gpuhal_executable_release(f->exe);
  f->cb = NULL;
  f->exe = NULL;
}

TU_TEST(device_released_last_while_its_kernel_runs) {
  lr_fixture_t f;
  if (!lr_open(&f)) TU_SKIP("no device or test kernels");
  TU_CHECK_OK(
      gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), f.cb, NULL));
  lr_release_work_objects(&f);
  gpuhal_driver_release(f.driver); /* the device holds it */
  gpuhal_device_release(f.device); /* the application's last release */
  TU_CHECK_EQ_INT(tu_gpuhal_threads(), 0);
}

TU_TEST(semaphore_released_last_after_its_signal) {
  lr_fixture_t f;
  gpuhal_semaphore_t* gate = NULL;
  uint64_t one = 1;
  if (!lr_open(&f)) TU_SKIP("no device or test kernels");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&gate, &one), gpuhal_semaphore_list_empty(),
                                   f.cb, NULL));
  lr_release_work_objects(&f);
  gpuhal_device_release(f.device);
  gpuhal_driver_release(f.driver); /* the work waits for the gate: left alone */
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  gpuhal_semaphore_release(gate); /* the last release: the work runs, and everything goes */
  TU_CHECK_EQ_INT(tu_gpuhal_threads(), 0);
}

typedef struct lr_host_release_s {
  gpuhal_driver_t* driver;
  int64_t took_ns;
} lr_host_release_t;
static gpuhal_status_t lr_release_driver_fn(void* user) {
  lr_host_release_t* r = (lr_host_release_t*)user;
  int64_t t0 = gpuhal_now_ns();
  gpuhal_driver_release(r->driver);
  r->took_ns = gpuhal_now_ns() - t0;
  return NULL;
}

TU_TEST(host_function_makes_the_last_driver_release) {
  lr_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  lr_host_release_t r;
  uint64_t one = 1;
  if (!lr_open(&f)) TU_SKIP("no device or test kernels");
  lr_release_work_objects(&f);
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  r.driver = f.driver;
  r.took_ns = -1;
  TU_CHECK_OK(gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one),
                                     lr_release_driver_fn, &r));
  gpuhal_device_release(f.device);
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, lr_seconds(10)));
  TU_CHECK(r.took_ns >= 0 && r.took_ns < 5000000000ll);
  gpuhal_semaphore_release(s); /* the last release */
  TU_CHECK_EQ_INT(tu_gpuhal_threads(), 0);
}

TU_TEST(driver_release_leaves_work_waiting_on_the_gpu_alone) {
  lr_fixture_t f;
  gpuhal_semaphore_t *gate = NULL, *done = NULL;
  uint64_t one = 1;
  int64_t t0, took;
  if (!lr_open(&f)) TU_SKIP("no device or test kernels");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done));
  /* A value the host signals: on the memop path the work waits for it on the GPU. */
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                   gpuhal_semaphore_list_one(&done, &one), f.cb, NULL));
  tu_sleep_ns(20000000);
  lr_release_work_objects(&f);
  gpuhal_device_release(f.device);
  t0 = gpuhal_now_ns();
  gpuhal_driver_release(f.driver);
  took = gpuhal_now_ns() - t0;
  TU_CHECK(took < 5000000000ll); /* not the settle bound */
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, lr_seconds(10)));
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done);
  TU_CHECK_EQ_INT(tu_gpuhal_threads(), 0);
}

/* A host function that waits (up to 20 s) for the application to open its gate. */
typedef struct lr_gate_s {
  int open;
  int entered;
} lr_gate_t;
static gpuhal_status_t lr_wait_for_gate_fn(void* user) {
  lr_gate_t* g = (lr_gate_t*)user;
  int64_t end = gpuhal_now_ns() + 20000000000ll;
  __atomic_store_n(&g->entered, 1, __ATOMIC_SEQ_CST);
  while (!__atomic_load_n(&g->open, __ATOMIC_SEQ_CST) && gpuhal_now_ns() < end) tu_sleep_ns(1000000);
  return NULL;
}

TU_TEST(release_does_not_wait_for_a_host_function_waiting_on_the_application) {
  lr_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  lr_gate_t gate;
  uint64_t one = 1;
  int64_t t0, took, end;
  if (!lr_open(&f)) TU_SKIP("no device or test kernels");
  memset(&gate, 0, sizeof(gate));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_OK(gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one),
                                     lr_wait_for_gate_fn, &gate));
  end = gpuhal_now_ns() + 10000000000ll;
  while (!__atomic_load_n(&gate.entered, __ATOMIC_SEQ_CST) && gpuhal_now_ns() < end) tu_sleep_ns(1000000);
  TU_CHECK(__atomic_load_n(&gate.entered, __ATOMIC_SEQ_CST));
  t0 = gpuhal_now_ns();
  gpuhal_device_release(f.device); /* the command buffer holds it */
  gpuhal_driver_release(f.driver); /* so do the device and the semaphore */
  took = gpuhal_now_ns() - t0;
  TU_CHECK(took < 5000000000ll); /* not the function's 20 s */
  __atomic_store_n(&gate.open, 1, __ATOMIC_SEQ_CST);
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, lr_seconds(10)));
  lr_release_work_objects(&f);
  gpuhal_semaphore_release(s); /* the last release */
  TU_CHECK_EQ_INT(tu_gpuhal_threads(), 0);
}

/* A host function that takes 300 ms and counts its runs. */
static gpuhal_status_t lr_slow_fn(void* user) {
  tu_sleep_ns(300000000);
  __atomic_add_fetch((int*)user, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

TU_TEST(last_release_waits_for_a_slow_host_function_and_what_follows_it) {
  lr_fixture_t f;
  gpuhal_semaphore_t *s = NULL, *done = NULL;
  uint64_t one = 1;
  int runs = 0;
  if (!lr_open(&f)) TU_SKIP("no device or test kernels");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done));
  TU_CHECK_OK(gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one),
                                     lr_slow_fn, &runs));
  TU_CHECK_OK(gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(),
                                     lr_slow_fn, &runs));
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&s, &one),
                                   gpuhal_semaphore_list_one(&done, &one), f.cb, NULL));
  tu_sleep_ns(50000000); /* the first function runs */
  lr_release_work_objects(&f);
  gpuhal_device_release(f.device);
  gpuhal_driver_release(f.driver);
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(done); /* the last release */
  TU_CHECK_EQ_INT(__atomic_load_n(&runs, __ATOMIC_SEQ_CST), 2);
  TU_CHECK_EQ_INT(tu_gpuhal_threads(), 0);
}

static gpuhal_status_t lr_count_fn(void* user) {
  __atomic_add_fetch((int*)user, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/* A chain on each of two queues, alternating host calls and executes, every step waiting
 * for a gate and for the step before it, all of it released before the gate is signalled;
 * the gate's release is the last. Every step can run, so that release waits for all of it.
 * It returned early before: between two steps, while the work that had just ended had woken
 * the next step but not issued it yet, or while an earlier look still counted a step as
 * waiting on the GPU that the ended work had just let go, everything seemed blocked (the
 * host functions then never ran, and the device leaked at exit). */
TU_TEST(last_release_waits_for_a_chain_of_host_calls_and_executes) {
  lr_fixture_t f;
  gpuhal_device_params_t params;
  gpuhal_semaphore_t *gate = NULL, *chain[2] = {NULL, NULL};
  gpuhal_command_buffer_t* fill[2] = {NULL, NULL};
  gpuhal_buffer_t* buffer[2] = {NULL, NULL}; /* one per queue: their fills are not ordered */
  uint32_t word = 7, q;
  int runs = 0, expected = 0, i, round;
  for (round = 0; round < 3; ++round) {
    if (!lr_open(&f)) TU_SKIP("no device or test kernels");
    /* A device of two queues; the fixture's is not needed. */
    memset(&params, 0, sizeof(params));
    params.queue_count = 2;
    gpuhal_device_release(f.device);
    f.device = NULL;
    lr_release_work_objects(&f);
    TU_REQUIRE_OK(gpuhal_device_create(f.driver, 0, &params, &f.device));
    TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
    for (q = 0; q < 2; ++q) {
      TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 256, &buffer[q]));
      TU_REQUIRE_OK(gpuhal_command_buffer_create(
          f.device, GPUHAL_COMMAND_BUFFER_REUSABLE | GPUHAL_COMMAND_BUFFER_STREAM, 0, &fill[q]));
      TU_REQUIRE_OK(gpuhal_command_buffer_begin(fill[q]));
      TU_REQUIRE_OK(gpuhal_cmd_fill(fill[q], gpuhal_ref_buffer(buffer[q], 0), 256, &word, 4));
      TU_REQUIRE_OK(gpuhal_command_buffer_end(fill[q]));
      TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &chain[q]));
    }
    runs = 0;
    expected = 0;
    for (i = 0; i < 40; ++i)
      for (q = 0; q < 2; ++q) {
        gpuhal_semaphore_t* ws[2];
        uint64_t wv[2], next = (uint64_t)i + 1;
        gpuhal_semaphore_list_t wait;
        ws[0] = gate;
        wv[0] = 1;
        ws[1] = chain[q];
        wv[1] = (uint64_t)i;
        wait.count = i ? 2u : 1u;
        wait.semaphores = ws;
        wait.values = wv;
        if (i % 2) {
          TU_CHECK_OK(
              gpuhal_queue_execute(f.device, q, wait, gpuhal_semaphore_list_one(&chain[q], &next), fill[q], NULL));
        } else {
          TU_CHECK_OK(gpuhal_queue_host_call(f.device, q, wait, gpuhal_semaphore_list_one(&chain[q], &next),
                                             lr_count_fn, &runs));
          expected++;
        }
      }
    for (q = 0; q < 2; ++q) {
      gpuhal_command_buffer_release(fill[q]);
      gpuhal_buffer_release(buffer[q]);
      gpuhal_semaphore_release(chain[q]);
    }
    gpuhal_device_release(f.device);
    gpuhal_driver_release(f.driver);
    TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
    gpuhal_semaphore_release(gate); /* the last release */
    TU_CHECK_EQ_INT(__atomic_load_n(&runs, __ATOMIC_SEQ_CST), expected);
    TU_CHECK_EQ_INT(tu_gpuhal_threads(), 0);
  }
}

typedef struct lr_idle_call_s {
  gpuhal_device_t* device;
  int code_infinite, code_immediate;
} lr_idle_call_t;

static gpuhal_status_t lr_wait_idle_fn(void* user) {
  lr_idle_call_t* c = (lr_idle_call_t*)user;
  gpuhal_status_t st = gpuhal_device_wait_idle(c->device, gpuhal_timeout_infinite());
  c->code_infinite = (int)gpuhal_status_code(st);
  gpuhal_status_free(st);
  st = gpuhal_device_wait_idle(c->device, gpuhal_timeout_immediate());
  c->code_immediate = (int)gpuhal_status_code(st);
  gpuhal_status_free(st);
  return NULL;
}

/* gpuhal_device_wait_idle from a host function of the device would wait for the host call
 * it runs in: FAILED_PRECONDITION at once, whatever the timeout (an infinite one never
 * returned, and the device's release then hung on that host call for ever). */
TU_TEST(wait_idle_from_a_host_function_of_the_device_fails_at_once) {
  lr_fixture_t f;
  gpuhal_semaphore_t* done = NULL;
  lr_idle_call_t call;
  uint64_t one = 1;
  if (!lr_open(&f)) TU_SKIP("no device or test kernels");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done));
  memset(&call, 0, sizeof(call));
  call.device = f.device;
  TU_CHECK_OK(gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&done, &one),
                                     lr_wait_idle_fn, &call));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, lr_seconds(30)));
  TU_CHECK_EQ_INT(call.code_infinite, GPUHAL_STATUS_FAILED_PRECONDITION);
  TU_CHECK_EQ_INT(call.code_immediate, GPUHAL_STATUS_FAILED_PRECONDITION);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, lr_seconds(30))); /* from the application: fine */
  gpuhal_semaphore_release(done);
  lr_release_work_objects(&f);
  gpuhal_device_release(f.device);
  gpuhal_driver_release(f.driver);
  TU_CHECK_EQ_INT(tu_gpuhal_threads(), 0);
}

/* Work waiting (on the GPU, on the memop path) for a gate the application still holds and
 * for a semaphore that then fails: the failure lets go of its own wait only, and the work
 * stays held by the gate. A release that settles then must count that work as blocked: it
 * returns at once (it waited the whole settle bound, 30 s). The work runs, its signal
 * failed, once the gate is signalled. */
TU_TEST(release_counts_work_with_a_failed_input_still_held_by_a_gate_as_blocked) {
  lr_fixture_t f;
  gpuhal_semaphore_t *gate = NULL, *input = NULL, *done = NULL;
  gpuhal_semaphore_t* waits[2];
  uint64_t values[2] = {1, 1}, one = 1;
  gpuhal_semaphore_list_t wait;
  int64_t start;
  gpuhal_status_t st;
  if (!lr_open(&f)) TU_SKIP("no device or test kernels");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &input));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done));
  waits[0] = gate;
  waits[1] = input;
  wait.count = 2;
  wait.semaphores = waits;
  wait.values = values;
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, wait, gpuhal_semaphore_list_one(&done, &one), f.cb, NULL));
  lr_release_work_objects(&f);
  gpuhal_device_release(f.device);
  gpuhal_driver_release(f.driver);
  gpuhal_semaphore_fail(input, gpuhal_status_make(GPUHAL_STATUS_ABORTED, "the input's producer failed"));
  tu_sleep_ns(20000000); /* the failure reaches the GPU wait; the completion side looks */
  start = gpuhal_now_ns();
  gpuhal_semaphore_release(input); /* a settle: the work is held by the gate */
  TU_CHECK((gpuhal_now_ns() - start) < 10000000000ll);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  st = gpuhal_semaphore_wait(done, 1, lr_seconds(30));
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_ABORTED);
  gpuhal_status_free(st);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done); /* the last release */
  TU_CHECK_EQ_INT(tu_gpuhal_threads(), 0);
}

/* ---- Work one released device's work lets go on another ----
 * The settle takes released devices one by one. Work of a device it took earlier, found
 * blocked then, may be let go by the work of a device it takes later (or by a device torn
 * down meanwhile, whose waiting work fails): the last release must wait for that work
 * too, and for what it lets go in turn, however often the chain goes back and forth
 * between devices, and leave alone only work nothing left can let go. Each case submits a
 * chain across devices (the waiters first, so that on the memop path they wait on the GPU
 * for values not submitted yet), releases everything and checks, when the last release has
 * returned, that every step that could run did, and that nothing of gpuhal is left: no
 * gpuhal thread, no CUDA object (softcuda), nothing allocated with the driver's allocator. */

#define LR_X_DEVICES 3
#define LR_X_STEP_US 150000 /* a step's kernel: still running when the release settles */

typedef enum lr_x_order_e {
  LR_X_DRIVER_LAST, /* semaphores, devices in the order made, then the driver */
  LR_X_DEVICE_LAST, /* the driver first, then semaphores, devices in the order made */
} lr_x_order_t;

/* The driver's allocator (test_leak_check.h): what it has allocated and not freed. */
static tu_counter_t lr_x_counter;

typedef struct lr_x_s {
  gpuhal_driver_t* driver;
  int devices;
  gpuhal_device_t* device[LR_X_DEVICES];
  gpuhal_executable_t* exe[LR_X_DEVICES];
  gpuhal_kernel_t* spin[LR_X_DEVICES];
  gpuhal_semaphore_t* sem[8]; /* the chain's (released with the devices) */
  int sems;
  int runs; /* host functions that ran (atomic) */
} lr_x_t;

/* A driver with the counting allocator and `devices` devices on ordinals 0, 1, 0, ...
 * (two gpuhal devices of one ordinal are devices of their own), each with spin_us; 0 when
 * the case is skipped or failed. */
static int lr_x_open(lr_x_t* x, int devices) {
  gpuhal_driver_options_t options;
  gpuhal_status_t st;
  int count = 0, i;
  alarm(120); /* a hang ends the test (SIGALRM) instead of stalling CTest */
  memset(x, 0, sizeof(*x));
  memset(&options, 0, sizeof(options));
  tu_counter_init(&lr_x_counter);
  options.allocator = lr_x_counter.allocator;
  st = gpuhal_driver_create(&options, &x->driver);
  if (!st) st = gpuhal_driver_device_count(x->driver, &count);
  if (!st && count < 2) {
    gpuhal_driver_release(x->driver);
    tu_state.skipped = 1;
    tu_state.skip_reason = "needs 2 devices";
    return 0;
  }
  x->devices = devices;
  for (i = 0; !st && i < devices; ++i) st = gpuhal_device_create(x->driver, i % count, NULL, &x->device[i]);
  for (i = 0; !st && i < devices; ++i) st = tu_load_kernel(x->device[i], "spin_us", &x->exe[i], &x->spin[i]);
  for (i = 0; !st && i < 8; ++i) st = gpuhal_semaphore_create(x->driver, 0, &x->sem[x->sems++]);
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "setup: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
    for (i = 0; i < x->sems; ++i) gpuhal_semaphore_release(x->sem[i]);
    for (i = 0; i < devices; ++i) {
      gpuhal_executable_release(x->exe[i]);
      gpuhal_device_release(x->device[i]);
    }
    gpuhal_driver_release(x->driver);
    return 0;
  }
  return 1;
}

/* On device `d`: a kernel of `us` microseconds once `wait` reaches `wv` (none when NULL),
 * then `signal` to `sv` (none when NULL). The execute holds its command buffer (and so the
 * device); the application's reference goes at once. */
static void lr_x_exec(lr_x_t* x, int d, uint32_t us, gpuhal_semaphore_t* wait, uint64_t wv, gpuhal_semaphore_t* signal,
                      uint64_t sv) {
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t arg = gpuhal_arg_u64(us);
  TU_CHECK_OK(gpuhal_command_buffer_create(x->device[d], GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, x->spin[d], gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(gpuhal_queue_execute(
      x->device[d], 0, wait ? gpuhal_semaphore_list_one(&wait, &wv) : gpuhal_semaphore_list_empty(),
      signal ? gpuhal_semaphore_list_one(&signal, &sv) : gpuhal_semaphore_list_empty(), cb, NULL));
  gpuhal_command_buffer_release(cb);
}

static gpuhal_status_t lr_x_count_fn(void* user) {
  __atomic_add_fetch(&((lr_x_t*)user)->runs, 1, __ATOMIC_SEQ_CST);
  return NULL;
}
static gpuhal_status_t lr_x_slow_fn(void* user) {
  (void)user;
  tu_sleep_ns((long long)LR_X_STEP_US * 2000); /* two steps */
  return NULL;
}

/* On device `d`: `fn` once `wait` reaches `wv`, then `signal` to `sv` (none when NULL). A
 * host call holds no reference to its device. */
static void lr_x_call(lr_x_t* x, int d, gpuhal_host_fn_t fn, gpuhal_semaphore_t* wait, uint64_t wv,
                      gpuhal_semaphore_t* signal, uint64_t sv) {
  TU_CHECK_OK(gpuhal_queue_host_call(
      x->device[d], 0, wait ? gpuhal_semaphore_list_one(&wait, &wv) : gpuhal_semaphore_list_empty(),
      signal ? gpuhal_semaphore_list_one(&signal, &sv) : gpuhal_semaphore_list_empty(), fn, x));
}

/* The application's releases in `order`; how long the last took. */
static int64_t lr_x_release(lr_x_t* x, lr_x_order_t order) {
  int64_t t0;
  int i;
  if (order == LR_X_DEVICE_LAST) gpuhal_driver_release(x->driver);
  for (i = 0; i < x->sems; ++i) gpuhal_semaphore_release(x->sem[i]);
  for (i = 0; i < x->devices; ++i) gpuhal_executable_release(x->exe[i]);
  for (i = 0; i < x->devices - 1; ++i) gpuhal_device_release(x->device[i]);
  t0 = gpuhal_now_ns();
  if (order == LR_X_DRIVER_LAST) {
    gpuhal_device_release(x->device[x->devices - 1]);
    t0 = gpuhal_now_ns();
    gpuhal_driver_release(x->driver);
  } else {
    gpuhal_device_release(x->device[x->devices - 1]);
  }
  return gpuhal_now_ns() - t0;
}

/* Right after the application's last release: nothing of gpuhal is left. Then waits
 * (bounded) for whatever was left to end, so the next case starts clean. */
static void lr_x_check_gone(void) {
  int threads = tu_gpuhal_threads();
  size_t objects = tu_softcuda_objects();
  int64_t live = tu_counter_live(&lr_x_counter), end = gpuhal_now_ns() + 20000000000ll;
  TU_CHECK_EQ_INT(threads, 0);
  TU_CHECK(objects == 0);
  TU_CHECK(live == 0);
  if (threads || objects || live)
    fprintf(stderr, "  after the last release: %d gpuhal threads, %zu CUDA objects, %lld allocations left\n", threads,
            objects, (long long)live);
  while (gpuhal_now_ns() < end &&
         (tu_gpuhal_threads() > 0 || tu_softcuda_objects() > 0 || tu_counter_live(&lr_x_counter) > 0))
    tu_sleep_ns(1000000);
  alarm(0);
}

/* 10. A's kernel waits for B's (on the GPU on the memop path: its value is not submitted
 *     yet), then a host call of A. The settle took A first (blocked), then B, whose kernel
 *     let A's go: the release returned while A's kernel and host call ran (3 gpuhal threads
 *     and 40 CUDA objects left). */
static void lr_x_woken(lr_x_order_t order) {
  lr_x_t x;
  if (!lr_x_open(&x, 2)) return;
  lr_x_exec(&x, 0, LR_X_STEP_US / 2, x.sem[0], 1, x.sem[1], 1);
  lr_x_call(&x, 0, lr_x_count_fn, x.sem[1], 1, NULL, 0);
  lr_x_exec(&x, 1, LR_X_STEP_US * 2, NULL, 0, x.sem[0], 1);
  lr_x_release(&x, order);
  TU_CHECK_EQ_INT(__atomic_load_n(&x.runs, __ATOMIC_SEQ_CST), 1);
  lr_x_check_gone();
}
TU_TEST(last_release_waits_for_work_a_later_device_lets_go) { lr_x_woken(LR_X_DRIVER_LAST); }
TU_TEST(last_device_release_waits_for_work_a_later_device_lets_go) { lr_x_woken(LR_X_DEVICE_LAST); }

/* 11. A chain that goes A -> B -> A -> B and back to a host call of A (B's first step
 *     needs nothing): each settle of one device lets the other's next step go. */
static void lr_x_bouncing(lr_x_order_t order) {
  lr_x_t x;
  if (!lr_x_open(&x, 2)) return;
  lr_x_call(&x, 0, lr_x_count_fn, x.sem[4], 1, NULL, 0);
  lr_x_exec(&x, 0, LR_X_STEP_US, x.sem[3], 1, x.sem[4], 1); /* A2 */
  lr_x_exec(&x, 1, LR_X_STEP_US, x.sem[2], 1, x.sem[3], 1); /* B2 */
  lr_x_exec(&x, 0, LR_X_STEP_US, x.sem[1], 1, x.sem[2], 1); /* A1 */
  lr_x_exec(&x, 1, LR_X_STEP_US, x.sem[0], 1, x.sem[1], 1); /* B1 */
  lr_x_exec(&x, 1, LR_X_STEP_US, NULL, 0, x.sem[0], 1);     /* B0 */
  lr_x_release(&x, order);
  TU_CHECK_EQ_INT(__atomic_load_n(&x.runs, __ATOMIC_SEQ_CST), 1);
  lr_x_check_gone();
}
TU_TEST(last_release_waits_for_a_chain_bouncing_between_devices) { lr_x_bouncing(LR_X_DRIVER_LAST); }
TU_TEST(last_device_release_waits_for_a_chain_bouncing_between_devices) { lr_x_bouncing(LR_X_DEVICE_LAST); }

/* 12. Three devices, each waiting for the next in the order they were made (A for B, B
 *     for C): a settle of A, B, C lets one more go each time round. */
static void lr_x_three(lr_x_order_t order) {
  lr_x_t x;
  if (!lr_x_open(&x, 3)) return;
  lr_x_call(&x, 0, lr_x_count_fn, x.sem[2], 1, NULL, 0);
  lr_x_exec(&x, 0, LR_X_STEP_US, x.sem[1], 1, x.sem[2], 1); /* A, for B */
  lr_x_exec(&x, 1, LR_X_STEP_US, x.sem[0], 1, x.sem[1], 1); /* B, for C */
  lr_x_exec(&x, 2, LR_X_STEP_US, NULL, 0, x.sem[0], 1);     /* C */
  lr_x_release(&x, order);
  TU_CHECK_EQ_INT(__atomic_load_n(&x.runs, __ATOMIC_SEQ_CST), 1);
  lr_x_check_gone();
}
TU_TEST(last_release_waits_for_a_chain_across_three_devices) { lr_x_three(LR_X_DRIVER_LAST); }
TU_TEST(last_device_release_waits_for_a_chain_across_three_devices) { lr_x_three(LR_X_DEVICE_LAST); }

/* 13. A wait nothing will ever signal: A's kernel X waits for a gate the application keeps
 *     (and never signals); A's kernel Y waits for B's, then a host call of A. The release
 *     returns at once (not the settle bound) once Y and the host call are done, leaving X
 *     (and A, which X holds) alone. The gate's release then fails X (ABORTED: nothing can
 *     signal it), and everything goes. */
TU_TEST(last_release_waits_for_what_can_run_and_leaves_a_wait_nothing_signals) {
  lr_x_t x;
  gpuhal_semaphore_t *gate = NULL, *done = NULL;
  int64_t took;
  gpuhal_status_t st;
  uint64_t value = 7;
  if (!lr_x_open(&x, 2)) return;
  TU_REQUIRE_OK(gpuhal_semaphore_create(x.driver, 0, &gate));
  TU_REQUIRE_OK(gpuhal_semaphore_create(x.driver, 0, &done));
  lr_x_exec(&x, 0, LR_X_STEP_US / 2, gate, 1, done, 1);         /* X */
  lr_x_exec(&x, 0, LR_X_STEP_US / 2, x.sem[0], 1, x.sem[1], 1); /* Y */
  lr_x_call(&x, 0, lr_x_count_fn, x.sem[1], 1, NULL, 0);
  lr_x_exec(&x, 1, LR_X_STEP_US * 2, NULL, 0, x.sem[0], 1);
  took = lr_x_release(&x, LR_X_DRIVER_LAST);
  TU_CHECK(took < 5000000000ll); /* not the settle bound */
  TU_CHECK_EQ_INT(__atomic_load_n(&x.runs, __ATOMIC_SEQ_CST), 1);
  TU_CHECK_OK(gpuhal_semaphore_query(done, &value));
  TU_CHECK(value == 0);           /* X still waits */
  gpuhal_semaphore_release(gate); /* nothing left signals it: it fails, and X with it */
  st = gpuhal_semaphore_wait(done, 1, lr_seconds(10));
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_ABORTED);
  gpuhal_status_free(st);
  TU_CHECK_EQ_INT(tu_gpuhal_threads(), 0); /* the gate's release settled A */
  gpuhal_semaphore_release(done);          /* the last release */
  lr_x_check_gone();
}

/* 9b. Device B released while A's work waits on the GPU for a value only the application
 *     brings (the memop path parks it behind cuStreamWaitValue64): B's teardown destroyed
 *     B's context, and destroying a context waits for every device's work, so the release
 *     hung until the application signalled, which it would only do after the release (on
 *     two H200s for ever; tools/probe/peer_park_probe.c, and softcuda models it). The
 *     context's release is put off until nothing of the driver waits on the GPU. */
TU_TEST(device_release_does_not_wait_for_another_devices_work_parked_on_the_gpu) {
  lr_x_t x;
  gpuhal_semaphore_t* gate = NULL;
  int64_t t0, took;
  int i;
  if (!lr_x_open(&x, 2)) return;
  TU_REQUIRE_OK(gpuhal_semaphore_create(x.driver, 0, &gate));
  lr_x_exec(&x, 0, LR_X_STEP_US / 2, gate, 1, x.sem[0], 1);
  tu_sleep_ns(20000000); /* issued: on the GPU behind its value wait */
  t0 = gpuhal_now_ns();
  gpuhal_executable_release(x.exe[1]);
  gpuhal_device_release(x.device[1]);
  took = gpuhal_now_ns() - t0;
  TU_CHECK(took < 5000000000ll);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(x.sem[0], 1, lr_seconds(10)));
  gpuhal_semaphore_release(gate);
  for (i = 0; i < x.sems; ++i) gpuhal_semaphore_release(x.sem[i]);
  gpuhal_executable_release(x.exe[0]);
  gpuhal_device_release(x.device[0]);
  gpuhal_driver_release(x.driver); /* the last release: B's context is gone too */
  lr_x_check_gone();
}

/* 14. A host call of A waits for B's kernel, which waits for a slow host call of B (on the
 *     event path too, nothing is submitted for A's value when the release comes). A host
 *     call holds no reference to its device: once A's short kernel is done, only the
 *     settle's reference holds A, and A's teardown fails what still waits (ABORTED). The
 *     settle must keep A until B's work can no longer let A's go. It dropped A right after
 *     A's kernel, and the host call failed though B's kernel signalled it a moment later.
 *     (A device released while the application still holds the device that would let its
 *     work go is another matter: its release fails that work, as gpuhal_device_release
 *     says.) */
TU_TEST(last_release_keeps_a_device_whose_host_call_another_device_lets_go) {
  lr_x_t x;
  if (!lr_x_open(&x, 2)) return;
  lr_x_exec(&x, 0, LR_X_STEP_US / 2, NULL, 0, NULL, 0); /* holds A past its release */
  lr_x_call(&x, 0, lr_x_count_fn, x.sem[1], 1, NULL, 0);
  lr_x_call(&x, 1, lr_x_slow_fn, NULL, 0, x.sem[0], 1);
  lr_x_exec(&x, 1, LR_X_STEP_US, x.sem[0], 1, x.sem[1], 1);
  lr_x_release(&x, LR_X_DRIVER_LAST);
  TU_CHECK_EQ_INT(__atomic_load_n(&x.runs, __ATOMIC_SEQ_CST), 1);
  lr_x_check_gone();
}

/*     The same when the release that drops A's last reference is A's own, made after the
 *     driver's: B (released, its kernel held by a gate) runs once the application signals
 *     the gate, and A's release waits for it and for A's host call (it tore A down at once,
 *     failing the host call). */
TU_TEST(device_release_after_the_driver_keeps_it_while_another_device_may_let_its_work_go) {
  lr_x_t x;
  gpuhal_semaphore_t* gate = NULL;
  int i;
  if (!lr_x_open(&x, 2)) return;
  TU_REQUIRE_OK(gpuhal_semaphore_create(x.driver, 0, &gate));
  lr_x_call(&x, 0, lr_x_count_fn, x.sem[0], 1, NULL, 0);
  lr_x_exec(&x, 1, LR_X_STEP_US, gate, 1, x.sem[0], 1);
  gpuhal_driver_release(x.driver);
  for (i = 0; i < x.sems; ++i) gpuhal_semaphore_release(x.sem[i]);
  for (i = 0; i < x.devices; ++i) gpuhal_executable_release(x.exe[i]);
  gpuhal_device_release(x.device[1]); /* a settle: B's kernel waits for the gate */
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  gpuhal_device_release(x.device[0]); /* drops A's last reference */
  TU_CHECK_EQ_INT(__atomic_load_n(&x.runs, __ATOMIC_SEQ_CST), 1);
  gpuhal_semaphore_release(gate); /* the last release */
  lr_x_check_gone();
}

/* 15. What the settle must give up lets other work go: B's host call waits for a gate the
 *     application keeps (and never signals), then signals what A's kernel waits for; B's
 *     short kernel keeps B past its own release, and A comes first. Once B's kernel is
 *     done nothing more can run, and the settle lets B go: its teardown fails the host call
 *     (ABORTED) and its signal, which lets A's kernel go (it fails). The release waits for
 *     that too, and then for A. */
TU_TEST(last_release_waits_for_work_that_a_teardown_lets_go) {
  lr_x_t x;
  gpuhal_semaphore_t *gate = NULL, *done = NULL;
  gpuhal_status_t st;
  int64_t took;
  if (!lr_x_open(&x, 2)) return;
  TU_REQUIRE_OK(gpuhal_semaphore_create(x.driver, 0, &gate));
  TU_REQUIRE_OK(gpuhal_semaphore_create(x.driver, 0, &done));
  lr_x_exec(&x, 0, LR_X_STEP_US, x.sem[0], 1, done, 1);
  lr_x_exec(&x, 1, LR_X_STEP_US / 2, NULL, 0, NULL, 0); /* holds B past its release */
  lr_x_call(&x, 1, lr_x_count_fn, gate, 1, x.sem[0], 1);
  took = lr_x_release(&x, LR_X_DRIVER_LAST);
  TU_CHECK(took < 5000000000ll); /* not the settle bound */
  TU_CHECK_EQ_INT(__atomic_load_n(&x.runs, __ATOMIC_SEQ_CST), 0);
  st = gpuhal_semaphore_wait(done, 1, gpuhal_timeout_immediate()); /* failed before the release returned */
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_ABORTED);
  gpuhal_status_free(st);
  TU_CHECK_EQ_INT(tu_gpuhal_threads(), 0);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done); /* the last release */
  lr_x_check_gone();
}

TU_MAIN(TU_CASE(device_released_last_while_its_kernel_runs), TU_CASE(semaphore_released_last_after_its_signal),
        TU_CASE(host_function_makes_the_last_driver_release),
        TU_CASE(driver_release_leaves_work_waiting_on_the_gpu_alone),
        TU_CASE(release_does_not_wait_for_a_host_function_waiting_on_the_application),
        TU_CASE(last_release_waits_for_a_slow_host_function_and_what_follows_it),
        TU_CASE(last_release_waits_for_a_chain_of_host_calls_and_executes),
        TU_CASE(wait_idle_from_a_host_function_of_the_device_fails_at_once),
        TU_CASE(release_counts_work_with_a_failed_input_still_held_by_a_gate_as_blocked),
        TU_CASE(last_release_waits_for_work_a_later_device_lets_go),
        TU_CASE(last_device_release_waits_for_work_a_later_device_lets_go),
        TU_CASE(last_release_waits_for_a_chain_bouncing_between_devices),
        TU_CASE(last_device_release_waits_for_a_chain_bouncing_between_devices),
        TU_CASE(last_release_waits_for_a_chain_across_three_devices),
        TU_CASE(last_device_release_waits_for_a_chain_across_three_devices),
        TU_CASE(last_release_waits_for_what_can_run_and_leaves_a_wait_nothing_signals),
        TU_CASE(device_release_does_not_wait_for_another_devices_work_parked_on_the_gpu),
        TU_CASE(last_release_keeps_a_device_whose_host_call_another_device_lets_go),
        TU_CASE(device_release_after_the_driver_keeps_it_while_another_device_may_let_its_work_go),
        TU_CASE(last_release_waits_for_work_that_a_teardown_lets_go))
