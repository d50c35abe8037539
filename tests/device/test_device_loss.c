/* Device loss through the public API (issue #9): a faulting kernel makes the device lost;
 * every pending and later operation fails fast with the original CUDA error; release
 * still succeeds; a new device can be created afterwards where CUDA allows it.
 *
 * One case per executable run order matters: on a real GPU a sticky error may leave the
 * process's CUDA state unusable, so the recreate case is the last one and tolerates a clear
 * error there (softcuda must recreate). */
#include "gpuhal.h"

#include "test_util.h"

#ifndef GPUHAL_KERNELS_DIR
#define GPUHAL_KERNELS_DIR "tests/kernels"
#endif

#define LOSS_CAUSE "CUDA_ERROR_ILLEGAL_ADDRESS"
/* "Fast": a failure caused by the loss must arrive well before this. */
#define FAST_NS 5000000000ll

static gpuhal_timeout_t seconds(int s) { return gpuhal_timeout_relative_ns((int64_t)s * 1000000000ll); }

static char* read_kernel(const char* name, size_t* size) {
  char file[256];
  snprintf(file, sizeof(file), "%s.ptx", name);
  return tu_read_kernel_file(file, size);
}

static gpuhal_status_t load_kernel(gpuhal_device_t* device, const char* name, gpuhal_executable_t** exe,
                                   gpuhal_kernel_t** kernel) {
  size_t size = 0;
  char* ptx = read_kernel(name, &size);
  gpuhal_status_t st;
  if (!ptx) return gpuhal_status_make(GPUHAL_STATUS_NOT_FOUND, "cannot read %s/%s.ptx", GPUHAL_KERNELS_DIR, name);
  st = gpuhal_executable_load(device, ptx, size, exe);
  free(ptx);
  if (!st) st = gpuhal_executable_kernel(*exe, name, kernel);
  return st;
}

/* A one-dispatch command buffer running `fault` on address 0x10. */
static gpuhal_status_t record_fault(gpuhal_device_t* device, gpuhal_kernel_t* fault, gpuhal_command_buffer_t** cb) {
  gpuhal_arg_t arg = gpuhal_arg_u64(0x10);
  gpuhal_status_t st = gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_GRAPH, 0, cb);
  if (!st) st = gpuhal_command_buffer_begin(*cb);
  if (!st) st = gpuhal_cmd_dispatch(*cb, fault, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg);
  if (!st) st = gpuhal_command_buffer_end(*cb);
  return st;
}

/* A command buffer filling `buffer` (64 words) with `value` via the fill_u32 kernel. */
static gpuhal_status_t record_fill(gpuhal_device_t* device, gpuhal_kernel_t* fill, gpuhal_buffer_t* buffer,
                                   uint32_t value, gpuhal_command_buffer_t** cb) {
  gpuhal_arg_t args[3];
  gpuhal_status_t st = gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_GRAPH, 0, cb);
  args[0] = gpuhal_arg_buffer(buffer, 0);
  args[1] = gpuhal_arg_u32(value);
  args[2] = gpuhal_arg_u32(64);
  if (!st) st = gpuhal_command_buffer_begin(*cb);
  if (!st) st = gpuhal_cmd_dispatch(*cb, fill, gpuhal_dim3(1, 1, 1), gpuhal_dim3(64, 1, 1), 0, 3, args);
  if (!st) st = gpuhal_command_buffer_end(*cb);
  return st;
}

/* Checks that st is an error carrying the loss cause, arrived within FAST_NS of t0. */
#define CHECK_LOSS(expr, t0)                                                                                \
  do {                                                                                                      \
    gpuhal_status_t loss_s_ = (expr);                                                                       \
    int64_t loss_took_ = gpuhal_now_ns() - (t0);                                                            \
    if (!loss_s_) {                                                                                         \
      TU_FAIL_AT(__FILE__, __LINE__, "%s succeeded on a lost device", #expr);                               \
    } else if (!strstr(gpuhal_status_message(loss_s_), LOSS_CAUSE)) {                                       \
      TU_FAIL_AT(__FILE__, __LINE__, "%s -> '%s' does not carry %s", #expr, gpuhal_status_message(loss_s_), \
                 LOSS_CAUSE);                                                                               \
    }                                                                                                       \
    if (loss_took_ > FAST_NS)                                                                               \
      TU_FAIL_AT(__FILE__, __LINE__, "%s took %lld ms", #expr, (long long)(loss_took_ / 1000000));          \
    gpuhal_status_free(loss_s_);                                                                            \
  } while (0)

static int host_calls_run;
static gpuhal_status_t count_call(void* user) {
  (void)user;
  __atomic_add_fetch(&host_calls_run, 1, __ATOMIC_ACQ_REL);
  return NULL;
}

TU_TEST(faulting_kernel_fails_pending_and_later_work) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_device_params_t params;
  gpuhal_executable_t *fault_exe = NULL, *fill_exe = NULL;
  gpuhal_kernel_t *fault = NULL, *fill = NULL;
  gpuhal_command_buffer_t *fault_cb = NULL, *fill_cb = NULL, *late_cb = NULL;
  gpuhal_buffer_t *out = NULL, *pending_alloca = NULL, *late_alloca = NULL;
  gpuhal_semaphore_t *gate = NULL, *faulted = NULL, *exec_pending = NULL, *alloca_pending = NULL, *host_pending = NULL,
                     *later = NULL;
  const uint64_t one = 1;
  uint32_t words[64];
  int64_t t0;
  gpuhal_status_t st;
  memset(&params, 0, sizeof(params));
  params.queue_count = 2;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, &params, &device));
  st = load_kernel(device, "fault", &fault_exe, &fault);
  if (!st) st = load_kernel(device, "fill_u32", &fill_exe, &fill);
  if (st) {
    gpuhal_status_free(st);
    gpuhal_executable_release(fault_exe);
    gpuhal_executable_release(fill_exe);
    gpuhal_device_release(device);
    gpuhal_driver_release(driver);
    TU_SKIP("test kernels not available");
  }
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &gate));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &faulted));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &exec_pending));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &alloca_pending));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &host_pending));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &later));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(words), &out));
  TU_REQUIRE_OK(record_fault(device, fault, &fault_cb));
  TU_REQUIRE_OK(record_fill(device, fill, out, 0x1234u, &fill_cb));
  TU_REQUIRE_OK(record_fill(device, fill, out, 0x5678u, &late_cb));
  TU_CHECK_OK(gpuhal_device_lost_status(device)); /* healthy: NULL */

  /* Pending work of every kind, held back by a host gate, on both queues. */
  TU_CHECK_OK(gpuhal_queue_execute(device, 1, gpuhal_semaphore_list_one(&gate, &one),
                                   gpuhal_semaphore_list_one(&exec_pending, &one), fill_cb, NULL));
  TU_CHECK_OK(gpuhal_queue_alloca(device, 1, gpuhal_semaphore_list_one(&gate, &one),
                                  gpuhal_semaphore_list_one(&alloca_pending, &one), 4096, &pending_alloca));
  TU_CHECK_OK(gpuhal_queue_host_call(device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                     gpuhal_semaphore_list_one(&host_pending, &one), count_call, NULL));
  /* The fault. */
  TU_CHECK_OK(gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&faulted, &one),
                                   fault_cb, NULL));
  t0 = gpuhal_now_ns();
  CHECK_LOSS(gpuhal_semaphore_wait(faulted, 1, seconds(20)), t0);
  st = gpuhal_device_lost_status(device);
  TU_CHECK(st != NULL);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), LOSS_CAUSE);
  gpuhal_status_free(st);
  /* A failed semaphore keeps failing: query returns the cause. */
  {
    uint64_t value = 0;
    CHECK_LOSS(gpuhal_semaphore_query(faulted, &value), gpuhal_now_ns());
  }

  /* Pending work fails with the original error once released (not stuck, not run). */
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  t0 = gpuhal_now_ns();
  CHECK_LOSS(gpuhal_semaphore_wait(exec_pending, 1, seconds(20)), t0);
  CHECK_LOSS(gpuhal_semaphore_wait(alloca_pending, 1, seconds(20)), t0);
  CHECK_LOSS(gpuhal_semaphore_wait(host_pending, 1, seconds(20)), t0);
  TU_CHECK_EQ_INT(__atomic_load_n(&host_calls_run, __ATOMIC_ACQUIRE), 0);

  /* Later work fails fast too, on either queue, whatever its kind. */
  t0 = gpuhal_now_ns();
  st = gpuhal_queue_execute(device, 1, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&later, &one), late_cb,
                            NULL);
  if (st) {
    CHECK_LOSS(st, t0); /* refusing at submit is fine too, with the cause */
  } else {
    CHECK_LOSS(gpuhal_semaphore_wait(later, 1, seconds(20)), t0);
  }
  {
    gpuhal_semaphore_t* later2 = NULL;
    TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &later2));
    t0 = gpuhal_now_ns();
    st = gpuhal_queue_alloca(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&later2, &one), 256,
                             &late_alloca);
    if (st) {
      CHECK_LOSS(st, t0);
    } else {
      CHECK_LOSS(gpuhal_semaphore_wait(later2, 1, seconds(20)), t0);
    }
    gpuhal_semaphore_release(later2);
  }
  t0 = gpuhal_now_ns();
  CHECK_LOSS(gpuhal_device_wait_idle(device, seconds(20)), t0);
  /* Synchronous calls report an error (the driver's sticky error) rather than crash or hang. */
  t0 = gpuhal_now_ns();
  st = gpuhal_buffer_read(out, 0, words, sizeof(words));
  TU_CHECK(st != NULL);
  gpuhal_status_free(st);
  TU_CHECK(gpuhal_now_ns() - t0 < FAST_NS);

  /* Release still succeeds, in any order, with work that failed still referenced. */
  gpuhal_buffer_release(late_alloca);
  gpuhal_buffer_release(pending_alloca);
  gpuhal_command_buffer_release(fault_cb);
  gpuhal_command_buffer_release(fill_cb);
  gpuhal_command_buffer_release(late_cb);
  gpuhal_executable_release(fault_exe);
  gpuhal_executable_release(fill_exe);
  gpuhal_buffer_release(out);
  t0 = gpuhal_now_ns();
  gpuhal_device_release(device);
  TU_CHECK(gpuhal_now_ns() - t0 < FAST_NS);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(faulted);
  gpuhal_semaphore_release(exec_pending);
  gpuhal_semaphore_release(alloca_pending);
  gpuhal_semaphore_release(host_pending);
  gpuhal_semaphore_release(later);
  gpuhal_driver_release(driver);
}

/* Another device of the same driver is not affected by the loss of one (softcuda: contexts
 * are independent; on a real GPU only with two devices). */
TU_TEST(other_device_keeps_working) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t *lost = NULL, *healthy = NULL;
  gpuhal_executable_t *fault_exe = NULL, *fill_exe = NULL;
  gpuhal_kernel_t *fault = NULL, *fill = NULL;
  gpuhal_command_buffer_t *fault_cb = NULL, *fill_cb = NULL;
  gpuhal_buffer_t* out = NULL;
  gpuhal_semaphore_t *a = NULL, *b = NULL;
  const uint64_t one = 1;
  uint32_t words[64];
  int count = 0, i, ok = 1;
  gpuhal_status_t st;
  if (!tu_softcuda()) TU_SKIP("on a real GPU a sticky error may take the process's other contexts with it");
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  if (count < 2) {
    gpuhal_driver_release(driver);
    TU_SKIP("needs two devices");
  }
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &lost));
  TU_REQUIRE_OK(gpuhal_device_create(driver, 1, NULL, &healthy));
  TU_REQUIRE_OK(load_kernel(lost, "fault", &fault_exe, &fault));
  TU_REQUIRE_OK(load_kernel(healthy, "fill_u32", &fill_exe, &fill));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &a));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &b));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(healthy, GPUHAL_MEMORY_DEVICE, sizeof(words), &out));
  TU_REQUIRE_OK(record_fault(lost, fault, &fault_cb));
  TU_REQUIRE_OK(record_fill(healthy, fill, out, 0xBEEFu, &fill_cb));
  TU_CHECK_OK(gpuhal_queue_execute(lost, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&a, &one),
                                   fault_cb, NULL));
  CHECK_LOSS(gpuhal_semaphore_wait(a, 1, seconds(20)), gpuhal_now_ns());
  TU_CHECK_OK(gpuhal_queue_execute(healthy, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&b, &one),
                                   fill_cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(b, 1, seconds(20)));
  TU_CHECK_OK(gpuhal_buffer_read(out, 0, words, sizeof(words)));
  for (i = 0; i < 64; ++i) ok &= words[i] == 0xBEEFu;
  TU_CHECK(ok);
  st = gpuhal_device_lost_status(healthy);
  TU_CHECK(st == NULL);
  gpuhal_status_free(st);
  CHECK_LOSS(gpuhal_device_wait_idle(lost, seconds(20)), gpuhal_now_ns());
  TU_CHECK_OK(gpuhal_device_wait_idle(healthy, seconds(20)));
  gpuhal_command_buffer_release(fault_cb);
  gpuhal_command_buffer_release(fill_cb);
  gpuhal_buffer_release(out);
  gpuhal_executable_release(fault_exe);
  gpuhal_executable_release(fill_exe);
  gpuhal_semaphore_release(a);
  gpuhal_semaphore_release(b);
  gpuhal_device_release(lost);
  gpuhal_device_release(healthy);
  gpuhal_driver_release(driver);
}

/* Work on one device that waits, through an event, for work of a device that is then
 * lost: that event's wait ends with the lost context, but the work it waited for never ran,
 * so the waiter must fail with the loss, not succeed. Rounds alternate the event path
 * (where this failed in most runs) and the memop path: the loss and the waiter's
 * completion race.
 *   lost q0: fault (after host gate e)  -> a    lost q1: fill (after a) -> b
 *   healthy q0: fill (after b)          -> c    (c must fail with the loss)
 * and work behind that waiter, which inherits the check: on its stream (d) and on another
 * queue (g), both waiting for c. */
TU_TEST(work_behind_a_lost_devices_event_fails) {
  int round;
  if (!tu_softcuda()) TU_SKIP("on a real GPU a sticky error may take the process's other contexts with it");
  for (round = 0; round < 8; ++round) {
    gpuhal_driver_t* driver = NULL;
    gpuhal_device_t *lost = NULL, *healthy = NULL;
    gpuhal_device_params_t params;
    gpuhal_executable_t *fault_exe = NULL, *fill_exe = NULL, *fill_exe1 = NULL;
    gpuhal_kernel_t *fault = NULL, *fill = NULL, *fill1 = NULL;
    gpuhal_command_buffer_t *fault_cb = NULL, *fill_cb = NULL, *fill_cb1 = NULL;
    gpuhal_buffer_t *buf = NULL, *buf1 = NULL;
    gpuhal_semaphore_t *a = NULL, *b = NULL, *c = NULL, *e = NULL, *d = NULL, *g = NULL;
    const uint64_t one = 1;
    int count = 0;
    int64_t t0;
    memset(&params, 0, sizeof(params));
    params.queue_count = 2;
    gpuhal_driver_options_t options;
    memset(&options, 0, sizeof(options));
    options.semaphore_memops = round % 2 ? 0 : -1;
    TU_REQUIRE_OK(gpuhal_driver_create(&options, &driver));
    TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
    if (count < 2) {
      gpuhal_driver_release(driver);
      TU_SKIP("needs two devices");
    }
    TU_REQUIRE_OK(gpuhal_device_create(driver, 0, &params, &lost));
    TU_REQUIRE_OK(gpuhal_device_create(driver, 1, &params, &healthy));
    TU_REQUIRE_OK(load_kernel(lost, "fault", &fault_exe, &fault));
    TU_REQUIRE_OK(load_kernel(lost, "fill_u32", &fill_exe, &fill));
    TU_REQUIRE_OK(load_kernel(healthy, "fill_u32", &fill_exe1, &fill1));
    TU_REQUIRE_OK(gpuhal_buffer_allocate(lost, GPUHAL_MEMORY_DEVICE, 256, &buf));
    TU_REQUIRE_OK(gpuhal_buffer_allocate(healthy, GPUHAL_MEMORY_DEVICE, 256, &buf1));
    TU_REQUIRE_OK(record_fault(lost, fault, &fault_cb));
    TU_REQUIRE_OK(record_fill(lost, fill, buf, 5u, &fill_cb));
    TU_REQUIRE_OK(record_fill(healthy, fill1, buf1, 5u, &fill_cb1));
    TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &a));
    TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &b));
    TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &c));
    TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &e));
    TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &d));
    TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &g));
    TU_CHECK_OK(gpuhal_queue_execute(lost, 0, gpuhal_semaphore_list_one(&e, &one), gpuhal_semaphore_list_one(&a, &one),
                                     fault_cb, NULL));
    TU_CHECK_OK(gpuhal_queue_execute(lost, 1, gpuhal_semaphore_list_one(&a, &one), gpuhal_semaphore_list_one(&b, &one),
                                     fill_cb, NULL));
    TU_CHECK_OK(gpuhal_queue_execute(healthy, 0, gpuhal_semaphore_list_one(&b, &one),
                                     gpuhal_semaphore_list_one(&c, &one), fill_cb1, NULL));
    TU_CHECK_OK(gpuhal_queue_execute(healthy, 0, gpuhal_semaphore_list_one(&c, &one),
                                     gpuhal_semaphore_list_one(&d, &one), NULL, NULL));
    TU_CHECK_OK(gpuhal_queue_execute(healthy, 1, gpuhal_semaphore_list_one(&c, &one),
                                     gpuhal_semaphore_list_one(&g, &one), NULL, NULL));
    t0 = gpuhal_now_ns();
    TU_CHECK_OK(gpuhal_semaphore_signal(e, 1));
    CHECK_LOSS(gpuhal_semaphore_wait(c, 1, seconds(20)), t0);
    CHECK_LOSS(gpuhal_semaphore_wait(b, 1, seconds(20)), t0);
    CHECK_LOSS(gpuhal_semaphore_wait(d, 1, seconds(20)), t0);
    CHECK_LOSS(gpuhal_semaphore_wait(g, 1, seconds(20)), t0);
    TU_CHECK_OK(gpuhal_device_wait_idle(healthy, seconds(20)));
    gpuhal_command_buffer_release(fault_cb);
    gpuhal_command_buffer_release(fill_cb);
    gpuhal_command_buffer_release(fill_cb1);
    gpuhal_buffer_release(buf);
    gpuhal_buffer_release(buf1);
    gpuhal_executable_release(fault_exe);
    gpuhal_executable_release(fill_exe);
    gpuhal_executable_release(fill_exe1);
    gpuhal_semaphore_release(a);
    gpuhal_semaphore_release(b);
    gpuhal_semaphore_release(c);
    gpuhal_semaphore_release(e);
    gpuhal_semaphore_release(d);
    gpuhal_semaphore_release(g);
    gpuhal_device_release(lost);
    gpuhal_device_release(healthy);
    gpuhal_driver_release(driver);
  }
}

/* A load on a lost device whose work is parked on the GPU (memop path: it waits for a value
 * the host never signalled) fails at once with the loss. It waited the whole
 * load_parked_wait_ns (5 s) for that work to drain, which on a lost context it never does,
 * and then failed without the cause. */
TU_TEST(load_after_a_loss_with_parked_work_fails_fast) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* lost = NULL;
  gpuhal_device_params_t params;
  gpuhal_executable_t *fault_exe = NULL, *fill_exe = NULL, *again = NULL;
  gpuhal_kernel_t *fault = NULL, *fill = NULL;
  gpuhal_command_buffer_t *fault_cb = NULL, *fill_cb = NULL;
  gpuhal_buffer_t* buf = NULL;
  gpuhal_semaphore_t *a = NULL, *b = NULL, *e = NULL, *h = NULL;
  const uint64_t one = 1;
  char* ptx;
  size_t size = 0;
  int64_t t0;
  if (!tu_softcuda()) TU_SKIP("on a real GPU a sticky error may take the process's other contexts with it");
  memset(&params, 0, sizeof(params));
  params.queue_count = 2;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, &params, &lost));
  TU_REQUIRE_OK(load_kernel(lost, "fault", &fault_exe, &fault));
  TU_REQUIRE_OK(load_kernel(lost, "fill_u32", &fill_exe, &fill));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(lost, GPUHAL_MEMORY_DEVICE, 256, &buf));
  TU_REQUIRE_OK(record_fault(lost, fault, &fault_cb));
  TU_REQUIRE_OK(record_fill(lost, fill, buf, 5u, &fill_cb));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &a));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &b));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &e));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &h));
  TU_CHECK_OK(gpuhal_queue_execute(lost, 1, gpuhal_semaphore_list_one(&h, &one), gpuhal_semaphore_list_one(&b, &one),
                                   fill_cb, NULL)); /* parks on h (memops) */
  TU_CHECK_OK(gpuhal_queue_execute(lost, 0, gpuhal_semaphore_list_one(&e, &one), gpuhal_semaphore_list_one(&a, &one),
                                   fault_cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_signal(e, 1));
  CHECK_LOSS(gpuhal_semaphore_wait(a, 1, seconds(20)), gpuhal_now_ns());
  ptx = read_kernel("vector_add", &size);
  TU_REQUIRE(ptx != NULL);
  t0 = gpuhal_now_ns();
  CHECK_LOSS(gpuhal_executable_load(lost, ptx, size, &again), t0);
  TU_CHECK(gpuhal_now_ns() - t0 < 2000000000ll); /* not the 5 s wait for parked work */
  free(ptx);
  gpuhal_command_buffer_release(fault_cb);
  gpuhal_command_buffer_release(fill_cb);
  gpuhal_buffer_release(buf);
  gpuhal_executable_release(fault_exe);
  gpuhal_executable_release(fill_exe);
  gpuhal_semaphore_release(a);
  gpuhal_semaphore_release(b);
  gpuhal_semaphore_release(e);
  gpuhal_semaphore_release(h);
  gpuhal_device_release(lost);
  gpuhal_driver_release(driver);
}

/* After the lost device is released, a new device on the same ordinal works (softcuda:
 * the primary context is torn down at its last release and made anew). On a real GPU the
 * driver may refuse: then the refusal must be a clear status, not a crash or a hang. */
TU_TEST(device_can_be_created_again) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_executable_t *fault_exe = NULL, *fill_exe = NULL;
  gpuhal_kernel_t *fault = NULL, *fill = NULL;
  gpuhal_command_buffer_t *fault_cb = NULL, *fill_cb = NULL;
  gpuhal_buffer_t* out = NULL;
  gpuhal_semaphore_t* s = NULL;
  const uint64_t one = 1, two = 2;
  uint32_t words[64];
  int i, ok = 1;
  gpuhal_status_t st;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  st = gpuhal_device_create(driver, 0, NULL, &device);
  if (st && !tu_softcuda()) {
    /* A real driver keeps a process's primary context poisoned after a sticky error (the
     * cases before this one faulted it): a clear refusal that names the cause is the
     * behaviour to check there. */
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "sticky");
    fprintf(stderr, "  note: the driver refused a new device after the loss: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    gpuhal_driver_release(driver);
    return;
  }
  TU_REQUIRE_OK(st);
  st = load_kernel(device, "fault", &fault_exe, &fault);
  if (st) {
    gpuhal_status_free(st);
    gpuhal_device_release(device);
    gpuhal_driver_release(driver);
    TU_SKIP("test kernels not available");
  }
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &s));
  TU_REQUIRE_OK(record_fault(device, fault, &fault_cb));
  TU_CHECK_OK(gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one),
                                   fault_cb, NULL));
  CHECK_LOSS(gpuhal_semaphore_wait(s, 1, seconds(20)), gpuhal_now_ns());
  /* Every action retired, so the release below is the device's last reference and tears it
   * down before it returns (a release on a gpuhal thread would defer the teardown). */
  CHECK_LOSS(gpuhal_device_wait_idle(device, seconds(20)), gpuhal_now_ns());
  gpuhal_command_buffer_release(fault_cb);
  gpuhal_executable_release(fault_exe);
  gpuhal_device_release(device);
  gpuhal_semaphore_release(s);
  s = NULL;
  device = NULL;

  st = gpuhal_device_create(driver, 0, NULL, &device);
  if (st && !tu_softcuda()) {
    /* Allowed on a GPU, with a status that says why. */
    TU_CHECK(strlen(gpuhal_status_message(st)) > 20);
    fprintf(stderr, "  note: the driver refused a new device after the loss: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    gpuhal_driver_release(driver);
    return;
  }
  TU_REQUIRE_OK(st);
  st = gpuhal_device_lost_status(device);
  TU_CHECK(st == NULL); /* a new device starts healthy */
  gpuhal_status_free(st);
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &s));
  TU_REQUIRE_OK(load_kernel(device, "fill_u32", &fill_exe, &fill));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(words), &out));
  TU_REQUIRE_OK(record_fill(device, fill, out, 0xC0DEu, &fill_cb));
  TU_CHECK_OK(gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &two),
                                   fill_cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 2, seconds(20)));
  TU_CHECK_OK(gpuhal_buffer_read(out, 0, words, sizeof(words)));
  for (i = 0; i < 64; ++i) ok &= words[i] == 0xC0DEu;
  TU_CHECK(ok);
  /* See above: makes the device release below the last reference (issue #9 note: without
   * it the teardown may run on a detached thread after the process exits). */
  TU_CHECK_OK(gpuhal_device_wait_idle(device, seconds(20)));
  gpuhal_command_buffer_release(fill_cb);
  gpuhal_buffer_release(out);
  gpuhal_executable_release(fill_exe);
  gpuhal_semaphore_release(s);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_MAIN(TU_CASE(faulting_kernel_fails_pending_and_later_work), TU_CASE(other_device_keeps_working),
        TU_CASE(work_behind_a_lost_devices_event_fails), TU_CASE(load_after_a_loss_with_parked_work_fails_fast),
        TU_CASE(device_can_be_created_again))
