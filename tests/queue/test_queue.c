/* The deferred issue queue: ordering, GPU-side waits, failures, host calls, device loss,
 * release with work in flight, concurrency and steady-state allocation.
 *
 * Command buffers are another module; these tests submit test-local actions through
 * gpuhal__queue_submit (the internal interface command buffers use), some of which launch
 * the test kernels in tests/kernels with cuLaunchKernel. */
#include "test_internals.h"

#include "test_util.h"
#include "test_queue_util.h"

/* ---- ordering ---- */

TU_TEST(barrier_signals) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  uint64_t one = 1, v = 0;
  TU_REQUIRE(qt_open(&f, 1, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_OK(gpuhal__queue_submit(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one),
                                   &qt_barrier_ops, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, qt_seconds(10)));
  TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
  TU_CHECK_EQ_INT(v, 1);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

TU_TEST(argument_checks) {
  qt_fixture_t f;
  gpuhal_driver_t* other = NULL;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_semaphore_t* foreign = NULL;
  gpuhal_semaphore_list_t bad;
  uint64_t one = 1;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_STATUS(gpuhal__queue_submit(f.device, 2, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(),
                                       &qt_barrier_ops, NULL),
                  GPUHAL_STATUS_OUT_OF_RANGE, "queue");
  TU_CHECK_STATUS(gpuhal_queue_host_call(NULL, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(),
                                         qt_host_fn_nop, NULL),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  TU_CHECK_STATUS(
      gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), NULL, NULL),
      GPUHAL_STATUS_INVALID_ARGUMENT, "fn");
  bad.count = 1;
  bad.semaphores = NULL;
  bad.values = &one;
  TU_CHECK_STATUS(gpuhal_queue_host_call(f.device, 0, bad, gpuhal_semaphore_list_empty(), qt_host_fn_nop, NULL),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "wait");
  TU_CHECK_OK(gpuhal_driver_create(NULL, &other));
  if (other) {
    TU_CHECK_OK(gpuhal_semaphore_create(other, 0, &foreign));
    TU_CHECK_STATUS(gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_empty(),
                                           gpuhal_semaphore_list_one(&foreign, &one), qt_host_fn_nop, NULL),
                    GPUHAL_STATUS_INVALID_ARGUMENT, "another driver");
    gpuhal_semaphore_release(foreign);
    gpuhal_driver_release(other);
  }
  TU_CHECK_STATUS(gpuhal_device_wait_idle(NULL, gpuhal_timeout_immediate()), GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  TU_CHECK_STATUS(gpuhal_device_lost_status(NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  TU_CHECK_OK(gpuhal_device_lost_status(f.device));
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

/* B waits on A's value and is submitted first; A's submission unblocks it. */
TU_TEST(waiter_submitted_before_signaller) {
  qt_fixture_t f;
  gpuhal_semaphore_t* a = NULL;
  gpuhal_semaphore_t* b = NULL;
  uint64_t one = 1, v = 0;
  qt_counter_t counter;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  qt_counter_init(&counter);
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &a));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &b));
  TU_CHECK_OK(qt_submit(f.device, 1, gpuhal_semaphore_list_one(&a, &one), gpuhal_semaphore_list_one(&b, &one),
                        &qt_counting_ops, &counter));
  /* Not done while A is missing (with memops it is issued behind a GPU wait on A's value;
   * on the event path it is not issued at all). */
  TU_CHECK_STATUS(gpuhal_semaphore_wait(b, 1, gpuhal_timeout_relative_ns(20 * 1000000)),
                  GPUHAL_STATUS_DEADLINE_EXCEEDED, NULL);
  if (!gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS))
    TU_CHECK_EQ_INT(qt_counter_get(&counter.issued), 0);
  TU_CHECK_OK(qt_submit(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&a, &one),
                        &qt_barrier_ops, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(b, 1, qt_seconds(10)));
  TU_CHECK_OK(gpuhal_semaphore_query(a, &v));
  TU_CHECK_EQ_INT(v, 1);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
  TU_CHECK_EQ_INT(qt_counter_get(&counter.issued), 1);
  TU_CHECK_EQ_INT(qt_counter_get(&counter.completed_ok), 1);
  TU_CHECK_EQ_INT(qt_counter_get(&counter.released), 1);
  gpuhal_semaphore_release(a);
  gpuhal_semaphore_release(b);
  qt_close(&f);
}

/* A host signal releases queued work; nothing runs before it. */
TU_TEST(host_signal_gates_work) {
  qt_fixture_t f;
  gpuhal_semaphore_t* gate = NULL;
  gpuhal_semaphore_t* done = NULL;
  uint64_t one = 1;
  qt_counter_t counter;
  TU_REQUIRE(qt_open(&f, 1, NULL));
  qt_counter_init(&counter);
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &done));
  TU_CHECK_OK(qt_submit(f.device, 0, gpuhal_semaphore_list_one(&gate, &one), gpuhal_semaphore_list_one(&done, &one),
                        &qt_counting_ops, &counter));
  TU_CHECK_STATUS(gpuhal_device_wait_idle(f.device, gpuhal_timeout_relative_ns(20 * 1000000)),
                  GPUHAL_STATUS_DEADLINE_EXCEEDED, "outstanding");
  if (!gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS))
    TU_CHECK_EQ_INT(qt_counter_get(&counter.issued), 0);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, qt_seconds(10)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
  TU_CHECK_EQ_INT(qt_counter_get(&counter.issued), 1);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done);
  qt_close(&f);
}

/* A fails with a CUDA error at issue; B waits on A, C waits on B: all three signal
 * semaphores fail and C's message still carries A's original CUDA error. */
TU_TEST(failure_propagates_through_a_chain) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s[3] = {NULL, NULL, NULL};
  uint64_t one = 1, v = 0;
  qt_counter_t counter;
  gpuhal_status_t st;
  int i;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  qt_counter_init(&counter);
  for (i = 0; i < 3; ++i) TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s[i]));
  /* Submitted in reverse order, on alternating queues. */
  TU_CHECK_OK(qt_submit(f.device, 0, gpuhal_semaphore_list_one(&s[1], &one), gpuhal_semaphore_list_one(&s[2], &one),
                        &qt_counting_ops, &counter));
  TU_CHECK_OK(qt_submit(f.device, 1, gpuhal_semaphore_list_one(&s[0], &one), gpuhal_semaphore_list_one(&s[1], &one),
                        &qt_counting_ops, &counter));
  TU_CHECK_OK(gpuhal__queue_submit(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s[0], &one),
                                   &qt_failing_ops, NULL));
  st = gpuhal_semaphore_wait(s[2], 1, qt_seconds(10));
  TU_CHECK(gpuhal_status_code(st) == GPUHAL_STATUS_RESOURCE_EXHAUSTED);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "cuLaunchKernel");
  /* The original cause comes first. */
  TU_CHECK(strstr(gpuhal_status_message(st), "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES") <
           strstr(gpuhal_status_message(st), "waited"));
  gpuhal_status_free(st);
  for (i = 0; i < 3; ++i)
    TU_CHECK_STATUS(gpuhal_semaphore_query(s[i], &v), GPUHAL_STATUS_RESOURCE_EXHAUSTED,
                    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
  /* B and C were told of the failure and released (on the event path they never issued;
   * with memops they ran behind GPU waits that A's failure released). */
  if (!gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS))
    TU_CHECK_EQ_INT(qt_counter_get(&counter.issued), 0);
  TU_CHECK_EQ_INT(qt_counter_get(&counter.completed_failed), 2);
  TU_CHECK_EQ_INT(qt_counter_get(&counter.released), 2);
  /* A plain (non-sticky) error does not lose the device. */
  TU_CHECK_OK(gpuhal_device_lost_status(f.device));
  for (i = 0; i < 3; ++i) gpuhal_semaphore_release(s[i]);
  qt_close(&f);
}

/* A host wait on a value whose semaphore failed sees the cause. */
TU_TEST(host_failed_wait_fails_queued_work) {
  qt_fixture_t f;
  gpuhal_semaphore_t* gate = NULL;
  gpuhal_semaphore_t* out = NULL;
  uint64_t one = 1;
  TU_REQUIRE(qt_open(&f, 1, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &out));
  TU_CHECK_OK(qt_submit(f.device, 0, gpuhal_semaphore_list_one(&gate, &one), gpuhal_semaphore_list_one(&out, &one),
                        &qt_barrier_ops, NULL));
  gpuhal_semaphore_fail(gate, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "the producer gave up"));
  TU_CHECK_STATUS(gpuhal_semaphore_wait(out, 1, qt_seconds(10)), GPUHAL_STATUS_CANCELLED, "the producer gave up");
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(out);
  qt_close(&f);
}

/* The same with the host already waiting when the gate fails (on the memop path the queued
 * work waits on the GPU, runs once the failure releases it and writes `out`'s word, which
 * the host wait reads): the wait must still end with the cause, not with success. */
typedef struct qt_fail_later_s {
  gpuhal_semaphore_t* gate;
} qt_fail_later_t;
static void* qt_fail_later_main(void* p) {
  qt_fail_later_t* l = (qt_fail_later_t*)p;
  qc_sleep_ms(50);
  gpuhal_semaphore_fail(l->gate, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "the producer gave up"));
  return NULL;
}
TU_TEST(gate_fails_while_host_waits) {
  qt_fixture_t f;
  gpuhal_semaphore_t* gate = NULL;
  gpuhal_semaphore_t* out = NULL;
  qt_fail_later_t later;
  pthread_t thread;
  uint64_t one = 1;
  int round;
  TU_REQUIRE(qt_open(&f, 1, NULL));
  for (round = 0; round < 3; ++round) {
    TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
    TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &out));
    TU_CHECK_OK(qt_submit(f.device, 0, gpuhal_semaphore_list_one(&gate, &one), gpuhal_semaphore_list_one(&out, &one),
                          &qt_barrier_ops, NULL));
    later.gate = gate;
    TU_REQUIRE(pthread_create(&thread, NULL, qt_fail_later_main, &later) == 0);
    TU_CHECK_STATUS(gpuhal_semaphore_wait(out, 1, qt_seconds(10)), GPUHAL_STATUS_CANCELLED, "the producer gave up");
    pthread_join(thread, NULL);
    TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
    gpuhal_semaphore_release(gate);
    gpuhal_semaphore_release(out);
  }
  qt_close(&f);
}

/* ---- host calls ---- */

TU_TEST(host_call_ordering) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  qt_recorder_t rec;
  uint64_t values[8];
  int i;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  qt_recorder_init(&rec);
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  /* Eight host calls chained through one semaphore, submitted in reverse order across two
   * queues: they must run 0..7. */
  for (i = 0; i < 8; ++i) values[i] = (uint64_t)i + 1;
  for (i = 7; i >= 0; --i) {
    uint64_t wait_value = (uint64_t)i;
    rec.args[i].recorder = &rec;
    rec.args[i].id = i;
    TU_CHECK_OK(gpuhal_queue_host_call(
        f.device, (uint32_t)(i % 2), i ? gpuhal_semaphore_list_one(&s, &values[i - 1]) : gpuhal_semaphore_list_empty(),
        gpuhal_semaphore_list_one(&s, &values[i]), qt_host_fn_record, &rec.args[i]));
    GPUHAL__UNUSED(wait_value);
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 8, qt_seconds(10)));
  TU_CHECK_EQ_INT(rec.count, 8);
  for (i = 0; i < 8; ++i) TU_CHECK_EQ_INT(rec.order[i], i);
  /* Host calls run on a gpuhal thread, never the caller's. */
  TU_CHECK(!rec.ran_on_caller);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

TU_TEST(host_call_error_fails_signal) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  uint64_t one = 1;
  TU_REQUIRE(qt_open(&f, 1, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_OK(gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one),
                                     qt_host_fn_fail, NULL));
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 1, qt_seconds(10)), GPUHAL_STATUS_DATA_LOSS, "host function said no");
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

/* ---- alloca / dealloca ---- */

TU_TEST(alloca_execute_dealloca) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_buffer_t* buffers[4] = {NULL, NULL, NULL, NULL};
  qt_address_probe_t probes[4];
  int i, round;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  for (round = 0; round < 3; ++round) {
    uint64_t base = 0;
    gpuhal_semaphore_t* dummy = NULL;
    TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &dummy));
    /* alloca(q0) -> probe(q1, sees the address) -> dealloca(q0), four buffers, one timeline. */
    for (i = 0; i < 4; ++i) {
      uint64_t wait_v = (uint64_t)(round * 12 + i * 3);
      uint64_t v1 = wait_v + 1, v2 = wait_v + 2, v3 = wait_v + 3;
      gpuhal_semaphore_list_t w = wait_v ? gpuhal_semaphore_list_one(&s, &wait_v) : gpuhal_semaphore_list_empty();
      TU_CHECK_OK(gpuhal_queue_alloca(f.device, 0, w, gpuhal_semaphore_list_one(&s, &v1), 4096, &buffers[i]));
      TU_CHECK(buffers[i] != NULL);
      probes[i].buffer = buffers[i];
      probes[i].address = 0;
      TU_CHECK_OK(qt_submit(f.device, 1, gpuhal_semaphore_list_one(&s, &v1), gpuhal_semaphore_list_one(&s, &v2),
                            &qt_address_probe_ops, &probes[i]));
      TU_CHECK_OK(gpuhal_queue_dealloca(f.device, 0, gpuhal_semaphore_list_one(&s, &v2),
                                        gpuhal_semaphore_list_one(&s, &v3), buffers[i]));
      /* A second dealloca of the same buffer is refused. */
      TU_CHECK_STATUS(
          gpuhal_queue_dealloca(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), buffers[i]),
          GPUHAL_STATUS_FAILED_PRECONDITION, "already");
      base = v3;
    }
    TU_CHECK_OK(gpuhal_semaphore_wait(s, base, qt_seconds(10)));
    for (i = 0; i < 4; ++i) {
      TU_CHECK(probes[i].address != 0);
      gpuhal_buffer_release(buffers[i]);
    }
    gpuhal_semaphore_release(dummy);
  }
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
  TU_CHECK_STATUS(
      gpuhal_queue_alloca(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), 0, &buffers[0]),
      GPUHAL_STATUS_INVALID_ARGUMENT, "size");
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

/* ---- kernels: GPU-side chains, device loss, release in flight ---- */

/* 100 dependent submissions of slow kernels alternating two queues: all 100 are issued to
 * the streams while the first kernel still runs (no host round trip between them). */
TU_TEST(chain_of_100_issues_without_host_waits) {
  enum { N = 100 };
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  uint64_t values[N + 1];
  qt_spin_t spin;
  uint64_t v = 0;
  unsigned long long launches0 = 0, waits0 = 0;
  int i, all_issued = 0;
  int64_t deadline;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  if (!qt_kernels_load(&f)) {
    qt_close(&f);
    TU_SKIP("test kernels not available");
  }
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  for (i = 0; i <= N; ++i) values[i] = (uint64_t)i;
  spin.fixture = &f;
  spin.first_us = 300000; /* the first kernel holds the chain for 300 ms */
  spin.rest_us = 200;
  spin.launched = 0;
  if (qt_softcuda()) {
    launches0 = qt_softcuda_calls("cuLaunchKernel");
    waits0 = qt_softcuda_calls("cuStreamWaitEvent");
  }
  for (i = 0; i < N; ++i) {
    TU_CHECK_OK(qt_submit(f.device, (uint32_t)(i % 2),
                          i ? gpuhal_semaphore_list_one(&s, &values[i]) : gpuhal_semaphore_list_empty(),
                          gpuhal_semaphore_list_one(&s, &values[i + 1]), &qt_spin_ops, &spin));
  }
  /* Every launch happens while the first kernel still runs: the semaphore is still 0. */
  deadline = gpuhal_now_ns() + 250 * 1000000ll;
  while (gpuhal_now_ns() < deadline) {
    if (gpuhal__atomic_load(&spin.launched) == N) {
      all_issued = 1;
      break;
    }
    tu_sleep_ns(200000);
  }
  TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
  TU_CHECK(all_issued);
  TU_CHECK_EQ_INT(v, 0);
  if (qt_softcuda()) {
    TU_CHECK_EQ_INT(qt_softcuda_calls("cuLaunchKernel") - launches0, N);
    TU_CHECK(qt_softcuda_calls("cuStreamWaitEvent") - waits0 >= N - 1);
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(s, N, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

/* Releasing the device with work in flight finishes what was issued and fails what waits
 * for a semaphore nobody will signal; no hang, no leak. */
TU_TEST(release_with_work_in_flight) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_semaphore_t* never = NULL;
  gpuhal_semaphore_t* stuck = NULL;
  uint64_t values[11], one = 1, v = 0;
  qt_spin_t spin;
  qt_counter_t counter;
  int i, have_kernels;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  have_kernels = qt_kernels_load(&f);
  qt_counter_init(&counter);
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &never));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &stuck));
  for (i = 0; i <= 10; ++i) values[i] = (uint64_t)i;
  spin.fixture = &f;
  spin.first_us = 20000;
  spin.rest_us = 2000;
  spin.launched = 0;
  for (i = 0; i < 10; ++i)
    TU_CHECK_OK(gpuhal__queue_submit(
        f.device, (uint32_t)(i % 2), i ? gpuhal_semaphore_list_one(&s, &values[i]) : gpuhal_semaphore_list_empty(),
        gpuhal_semaphore_list_one(&s, &values[i + 1]), have_kernels ? &qt_spin_ops : &qt_barrier_ops, &spin));
  TU_CHECK_OK(gpuhal__queue_submit(f.device, 0, gpuhal_semaphore_list_one(&never, &one),
                                   gpuhal_semaphore_list_one(&stuck, &one), &qt_counting_ops, &counter));
  qt_close(&f); /* right away */
  TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
  TU_CHECK_EQ_INT(v, 10);
  TU_CHECK_STATUS(gpuhal_semaphore_query(stuck, &v), GPUHAL_STATUS_ABORTED, "released");
  /* With GPU-resident values the work was issued behind a GPU wait that the release then
   * abandoned; on the event path it never ran. It never completes as done either way. */
  TU_CHECK(qt_counter_get(&counter.issued) <= 1);
  TU_CHECK_EQ_INT(qt_counter_get(&counter.completed_ok), 0);
  TU_CHECK_EQ_INT(qt_counter_get(&counter.released), 1);
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(never);
  gpuhal_semaphore_release(stuck);
  gpuhal_driver_release(f.driver);
  f.driver = NULL;
}

/* ---- concurrency ---- */

enum { STRESS_THREADS = 8, STRESS_SUBMISSIONS = 1000 };
typedef struct stress_s {
  qt_fixture_t* fixture;
  gpuhal_semaphore_t* own;
  gpuhal_semaphore_t* shared;
  int index;
  int errors;
} stress_t;

static void* stress_main(void* arg) {
  stress_t* t = (stress_t*)arg;
  uint64_t i;
  for (i = 0; i < STRESS_SUBMISSIONS; ++i) {
    uint64_t prev = i, next = i + 1;
    gpuhal_semaphore_t* waits[2];
    uint64_t wait_values[2];
    gpuhal_semaphore_list_t w, sig;
    gpuhal_status_t s;
    uint32_t queue = (uint32_t)((i + (uint64_t)t->index) % 2);
    waits[0] = t->own;
    wait_values[0] = prev;
    waits[1] = t->shared;
    wait_values[1] = 1;
    w.count = (i % 7 == 3) ? 2u : 1u; /* some also wait on a shared, host-signalled gate */
    w.semaphores = waits;
    w.values = wait_values;
    sig = gpuhal_semaphore_list_one(&t->own, &next);
    switch (i % 3) {
      case 0:
        s = qt_submit(t->fixture->device, queue, w, sig, i % 2 ? &qt_barrier_ops : &qt_worker_barrier_ops, NULL);
        break;
      case 1: s = gpuhal_queue_host_call(t->fixture->device, queue, w, sig, qt_host_fn_nop, NULL); break;
      default: s = qt_submit(t->fixture->device, queue, w, sig, &qt_counting_ops, &qt_global_counter); break;
    }
    if (!s && i % 100 == 99) s = gpuhal_semaphore_wait(t->own, next, qt_seconds(60));
    if (s) {
      fprintf(stderr, "  stress thread %d at %llu: %s\n", t->index, (unsigned long long)i, gpuhal_status_message(s));
      gpuhal_status_free(s);
      t->errors++;
      return NULL;
    }
  }
  return NULL;
}

TU_TEST(eight_threads_mixed_submissions) {
  qt_fixture_t f;
  gpuhal_semaphore_t* gate = NULL;
  stress_t threads[STRESS_THREADS];
  pthread_t ids[STRESS_THREADS];
  int i;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  qt_counter_init(&qt_global_counter);
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  for (i = 0; i < STRESS_THREADS; ++i) {
    threads[i].fixture = &f;
    threads[i].shared = gate;
    threads[i].index = i;
    threads[i].errors = 0;
    TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &threads[i].own));
    pthread_create(&ids[i], NULL, stress_main, &threads[i]);
  }
  tu_sleep_ns(5 * 1000000);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  for (i = 0; i < STRESS_THREADS; ++i) {
    pthread_join(ids[i], NULL);
    TU_CHECK_EQ_INT(threads[i].errors, 0);
    TU_CHECK_OK(gpuhal_semaphore_wait(threads[i].own, STRESS_SUBMISSIONS, qt_seconds(60)));
  }
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(60)));
  TU_CHECK_EQ_INT(qt_counter_get(&qt_global_counter.released), qt_counter_get(&qt_global_counter.issued));
  for (i = 0; i < STRESS_THREADS; ++i) gpuhal_semaphore_release(threads[i].own);
  gpuhal_semaphore_release(gate);
  qt_close(&f);
}

/* ---- steady state: no heap allocation per submission ---- */
/* A dealloca waiting for X, then an alloca of as much again waiting for Y, which comes after
 * X: the program orders the alloca after the free, and the pool (capped at a little more
 * than one buffer) must serve it from what the dealloca gave back. On the memop path the
 * alloca was issued at once behind a GPU wait, taking its memory before the dealloca was
 * issued: RESOURCE_EXHAUSTED. Both paths. */
static void qt_alloca_after_waiting_dealloca_case(int memops) {
  gpuhal_driver_options_t options;
  gpuhal_device_params_t params;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_semaphore_t *a = NULL, *x = NULL, *y = NULL, *b = NULL;
  gpuhal_buffer_t *b1 = NULL, *b2 = NULL;
  const uint64_t size = 8u << 20;
  uint64_t one = 1;
  memset(&options, 0, sizeof(options));
  memset(&params, 0, sizeof(params));
  options.semaphore_memops = memops;
  params.pool_max_bytes = size + (size >> 1);
  TU_REQUIRE_OK(gpuhal_driver_create(&options, &driver));
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, &params, &device));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &a));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &x));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &y));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &b));
  TU_CHECK_OK(
      gpuhal_queue_alloca(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&a, &one), size, &b1));
  TU_CHECK_OK(gpuhal_semaphore_wait(a, 1, qt_seconds(30)));
  TU_CHECK_OK(gpuhal_queue_dealloca(device, 0, gpuhal_semaphore_list_one(&x, &one), gpuhal_semaphore_list_empty(), b1));
  TU_CHECK_OK(gpuhal_queue_alloca(device, 0, gpuhal_semaphore_list_one(&y, &one), gpuhal_semaphore_list_one(&b, &one),
                                  size, &b2));
  TU_CHECK_OK(gpuhal_semaphore_signal(x, 1));
  TU_CHECK_OK(gpuhal_semaphore_signal(y, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(b, 1, qt_seconds(30)));
  if (b2)
    TU_CHECK_OK(gpuhal_queue_dealloca(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), b2));
  TU_CHECK_OK(gpuhal_device_wait_idle(device, qt_seconds(30)));
  gpuhal_buffer_release(b1);
  gpuhal_buffer_release(b2);
  gpuhal_semaphore_release(a);
  gpuhal_semaphore_release(x);
  gpuhal_semaphore_release(y);
  gpuhal_semaphore_release(b);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_TEST(alloca_ordered_after_a_waiting_dealloca_reuses_its_memory) {
  qt_alloca_after_waiting_dealloca_case(0);
  qt_alloca_after_waiting_dealloca_case(-1);
}

TU_TEST(steady_state_allocates_nothing) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s[2] = {NULL, NULL};
  uint64_t i, allocs_before, allocs_after;
  qt_counting_allocator_t counting;
  TU_REQUIRE(qt_open(&f, 2, qt_counting_allocator(&counting)));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s[0]));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s[1]));
  /* Warm the pools: actions, events. */
  for (i = 0; i < 200; ++i) {
    uint64_t prev = i, next = i + 1;
    TU_REQUIRE_OK(qt_submit_mixed(&f, i, s, prev, next));
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(s[0], 200, qt_seconds(30)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(30)));
  /* Rounds of 500 submissions: a pool may still reach a new high-water mark once when
   * threads are slow (sanitizers, a loaded machine), but an allocation per submission would
   * show in every round; some round must allocate nothing at all. */
  {
    uint64_t round_allocs[4] = {0, 0, 0, 0};
    int round, clean = 0;
    for (round = 0; round < 4 && !clean; ++round) {
      allocs_before = qt_counting_allocs(&counting);
      for (i = 200 + 500 * (uint64_t)round; i < 700 + 500 * (uint64_t)round; ++i) {
        uint64_t prev = i, next = i + 1;
        TU_REQUIRE_OK(qt_submit_mixed(&f, i, s, prev, next));
        if (i % 50 == 49) TU_CHECK_OK(gpuhal_semaphore_wait(s[0], next, qt_seconds(30)));
      }
      TU_CHECK_OK(gpuhal_semaphore_wait(s[0], i, qt_seconds(30)));
      TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(30)));
      allocs_after = qt_counting_allocs(&counting);
      round_allocs[round] = allocs_after - allocs_before;
      clean = round_allocs[round] == 0;
    }
    if (!clean)
      TU_FAIL_AT(__FILE__, __LINE__, "every round of 500 submissions allocated (%llu, %llu, %llu, %llu)",
                 (unsigned long long)round_allocs[0], (unsigned long long)round_allocs[1],
                 (unsigned long long)round_allocs[2], (unsigned long long)round_allocs[3]);
  }
  gpuhal_semaphore_release(s[0]);
  gpuhal_semaphore_release(s[1]);
  qt_close(&f);
}

/* queue_alloca's buffer objects are recycled (base.h's object pool): once
 * GPUHAL_HANDLE_REUSE_DISTANCE of them were released, a steady chain of alloca/dealloca
 * pairs allocates nothing, and a released handle is still caught as released after that
 * many later buffers were released. */
static gpuhal_status_t alloca_pair(qt_fixture_t* f, gpuhal_semaphore_t* s, uint64_t* value, gpuhal_buffer_t** out) {
  uint64_t prev = *value, mid = prev + 1, next = prev + 2;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_status_t st = gpuhal_queue_alloca(f->device, 0, gpuhal_semaphore_list_one(&s, &prev),
                                           gpuhal_semaphore_list_one(&s, &mid), 256, &buffer);
  if (!st)
    st = gpuhal_queue_dealloca(f->device, 0, gpuhal_semaphore_list_one(&s, &mid), gpuhal_semaphore_list_one(&s, &next),
                               buffer);
  *value = next;
  if (out) {
    *out = buffer;
  } else {
    gpuhal_buffer_release(buffer);
  }
  return st;
}

TU_TEST(alloca_buffer_objects_are_recycled) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_buffer_t* old = NULL;
  uint64_t value = 0, address = 0, allocs_before, round_allocs[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  qt_counting_allocator_t counting;
  int i, round, clean = 0;
  TU_REQUIRE(qt_open(&f, 1, qt_counting_allocator(&counting)));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  for (i = 0; i < GPUHAL_HANDLE_REUSE_DISTANCE + 200; ++i) TU_REQUIRE_OK(alloca_pair(&f, s, &value, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(s, value, qt_seconds(30)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(30)));
  /* A round may still grow a pool on a slow machine (sanitizers: more work in flight);
   * one round must allocate nothing. */
  for (round = 0; round < 8 && !clean; ++round) {
    allocs_before = qt_counting_allocs(&counting);
    for (i = 0; i < 200; ++i) TU_REQUIRE_OK(alloca_pair(&f, s, &value, NULL));
    TU_CHECK_OK(gpuhal_semaphore_wait(s, value, qt_seconds(30)));
    TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(30)));
    round_allocs[round] = qt_counting_allocs(&counting) - allocs_before;
    clean = round_allocs[round] == 0;
  }
  if (!clean)
    TU_FAIL_AT(__FILE__, __LINE__, "every round of 200 alloca/dealloca pairs allocated (%llu, %llu, %llu, ... %llu)",
               (unsigned long long)round_allocs[0], (unsigned long long)round_allocs[1],
               (unsigned long long)round_allocs[2], (unsigned long long)round_allocs[7]);
  /* Released, then GPUHAL_HANDLE_REUSE_DISTANCE more released: still caught. */
  TU_REQUIRE_OK(alloca_pair(&f, s, &value, &old));
  TU_CHECK_OK(gpuhal_semaphore_wait(s, value, qt_seconds(30)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(30)));
  gpuhal_buffer_release(old);
  for (i = 0; i < GPUHAL_HANDLE_REUSE_DISTANCE; ++i) TU_REQUIRE_OK(alloca_pair(&f, s, &value, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(s, value, qt_seconds(30)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(30)));
  TU_CHECK_STATUS(gpuhal_buffer_device_address(old, &address), GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

/* A host wait longer than the polling windows (semaphore.h, phase 3: sleeps between polls
 * of the value's own event): a finite timeout that passes while the work runs reports
 * DEADLINE_EXCEEDED; an infinite one returns once the work is done, with the value reached
 * (the waiter advances it; the completion thread may not even have looked yet). */
TU_TEST(long_wait_sleeps_between_polls) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  qt_spin_t spin;
  uint64_t v = 0;
  int64_t start;
  TU_REQUIRE(qt_open(&f, 1, NULL));
  TU_REQUIRE(qt_kernels_load(&f));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  start = gpuhal_now_ns();
  TU_CHECK_OK(qt_submit_spin(&f, &spin, 40000, s, 1)); /* 40 ms: well past the polling windows */
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 1, gpuhal_timeout_relative_ns(5000000)), GPUHAL_STATUS_DEADLINE_EXCEEDED,
                  "timeout");
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, gpuhal_timeout_infinite()));
  TU_CHECK(gpuhal_now_ns() - start >= 30000000); /* it did wait for the work */
  TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
  TU_CHECK_EQ_INT(v, 1);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

/* Every cuEventQuery fails with an error that is not sticky: the work's state is unknown,
 * so its semaphore must neither fail nor advance while it may still run. The completion
 * thread learns the outcome from the stream instead: the wait succeeds, after the work. */
TU_TEST(failing_event_queries_wait_for_the_work) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  qt_spin_t spin;
  int64_t start;
  gpuhal_status_t status;
  if (!tu_softcuda()) TU_SKIP("needs softcuda's fault injection");
  TU_REQUIRE(qt_open(&f, 1, NULL));
  TU_REQUIRE(qt_kernels_load(&f));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_REQUIRE(tu_softcuda_faults("cuEventQuery@*=CUDA_ERROR_INVALID_VALUE") == 0);
  start = gpuhal_now_ns();
  TU_CHECK_OK(qt_submit_spin(&f, &spin, 30000, s, 1));
  status = gpuhal_semaphore_wait(s, 1, qt_seconds(20));
  TU_CHECK(gpuhal_now_ns() - start >= 30000000);
  tu_softcuda_faults(NULL);
  TU_CHECK_OK(status);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(10)));
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

/* The event pool hands out the events returned last, in batches: a steady acquire/release
 * cycle keeps to GPUHAL__EVENT_ACQUIRE_BATCH + 1 events (warm in the driver), not the whole
 * pool in turn, and a refill takes the most recently returned first. Under the issue lock
 * with the context entered, as the queue acquires. */
TU_TEST(event_pool_reuses_the_events_returned_last) {
  enum { HELD = 24, CYCLES = 200 };
  qt_fixture_t f;
  gpuhal__queue_state_t* state;
  gpuhal__context_scope_t scope;
  gpuhal__event_t* held[HELD];
  gpuhal__event_t* drained[GPUHAL__EVENT_ACQUIRE_BATCH];
  gpuhal__event_t* seen[CYCLES];
  uint32_t drained_count = 0, i, j, distinct = 0;
  TU_REQUIRE(qt_open(&f, 1, NULL));
  state = gpuhal__queue_state(f.device);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(30)));
  gpuhal__mutex_lock(&state->issue_mutex);
  TU_REQUIRE_OK(gpuhal__context_enter(f.device, &scope));
  /* Empty the acquire cache, so that what follows starts at a refill. */
  while (state->events.acquire_cached > 0 && drained_count < GPUHAL__EVENT_ACQUIRE_BATCH)
    TU_REQUIRE_OK(gpuhal__event_pool_acquire(&state->events, &drained[drained_count++]));
  TU_CHECK_EQ_INT(state->events.acquire_cached, 0);
  for (i = 0; i < HELD; ++i) TU_REQUIRE_OK(gpuhal__event_pool_acquire(&state->events, &held[i]));
  for (i = 0; i < HELD; ++i) gpuhal__event_release(held[i]);
  /* HELD is a multiple of the batch: the cache is empty again; the refill takes the last
   * returned first. */
  TU_CHECK_EQ_INT(state->events.acquire_cached, 0);
  for (i = 0; i < GPUHAL__EVENT_ACQUIRE_BATCH; ++i) {
    gpuhal__event_t* e = NULL;
    TU_REQUIRE_OK(gpuhal__event_pool_acquire(&state->events, &e));
    TU_CHECK(e == held[HELD - 1 - i]);
    gpuhal__event_release(e);
  }
  for (i = 0; i < CYCLES; ++i) {
    gpuhal__event_t* e = NULL;
    TU_REQUIRE_OK(gpuhal__event_pool_acquire(&state->events, &e));
    for (j = 0; j < distinct && seen[j] != e; ++j) {
    }
    if (j == distinct) seen[distinct++] = e;
    gpuhal__event_release(e);
  }
  TU_CHECK(distinct <= GPUHAL__EVENT_ACQUIRE_BATCH + 1);
  for (i = 0; i < drained_count; ++i) gpuhal__event_release(drained[i]);
  gpuhal__context_leave(f.device, &scope);
  gpuhal__mutex_unlock(&state->issue_mutex);
  qt_close(&f);
}

TU_MAIN(TU_CASE(barrier_signals), TU_CASE(argument_checks), TU_CASE(waiter_submitted_before_signaller),
        TU_CASE(host_signal_gates_work), TU_CASE(failure_propagates_through_a_chain),
        TU_CASE(host_failed_wait_fails_queued_work), TU_CASE(gate_fails_while_host_waits), TU_CASE(host_call_ordering),
        TU_CASE(host_call_error_fails_signal), TU_CASE(alloca_execute_dealloca),
        TU_CASE(chain_of_100_issues_without_host_waits), TU_CASE(release_with_work_in_flight),
        TU_CASE(eight_threads_mixed_submissions), TU_CASE(steady_state_allocates_nothing),
        TU_CASE(alloca_buffer_objects_are_recycled), TU_CASE(alloca_ordered_after_a_waiting_dealloca_reuses_its_memory),
        TU_CASE(long_wait_sleeps_between_polls), TU_CASE(failing_event_queries_wait_for_the_work),
        TU_CASE(event_pool_reuses_the_events_returned_last))
