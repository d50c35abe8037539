/* test_queue_harvest - a busy submitter retires completed work itself (queue.h, harvesting).
 *
 * The completion thread is told to leave issued work alone for 20 ms here
 * (tuning.completion_min_age_ns) (it still takes
 * host calls at once, and gpuhal_device_wait_idle cuts its wait short), so what these
 * tests see is the submitting thread's own harvest, not a race against that thread. */
#include "test_internals.h"

#include "test_util.h"
#include "test_queue_util.h"

typedef struct harvest_counter_s {
  qt_counter_t counts;
  pthread_t submitter;
  int32_t released_by_submitter;
} harvest_counter_t;
static void harvest_release(void* user, gpuhal_device_t* device) {
  harvest_counter_t* c = (harvest_counter_t*)user;
  GPUHAL__UNUSED(device);
  gpuhal__atomic_add(&c->counts.released, 1);
  if (pthread_equal(pthread_self(), c->submitter)) gpuhal__atomic_add(&c->released_by_submitter, 1);
}
static void harvest_complete(void* user, gpuhal_status_t status) { qt_counting_complete(user, status); }
static const gpuhal__action_ops_t harvest_ops = {"test_harvest", qt_counting_issue, harvest_complete, harvest_release};

static void harvest_counter_init(harvest_counter_t* c) {
  memset(c, 0, sizeof(*c));
  c->submitter = pthread_self();
}

/* Every action completed and was released exactly once, none failed. */
static void harvest_check_counts(harvest_counter_t* c) {
  TU_CHECK_EQ_INT(qt_counter_get(&c->counts.issued), qt_counter_get(&c->counts.completed_ok));
  TU_CHECK_EQ_INT(qt_counter_get(&c->counts.issued), qt_counter_get(&c->counts.released));
  TU_CHECK_EQ_INT(qt_counter_get(&c->counts.completed_failed), 0);
}

/* Fast-path submissions on two queues, each waiting on the previous one's value, with a
 * host call now and then (which a harvest leaves to the host-call thread). Spaced out so
 * that work ages past GPUHAL__HARVEST_MAX_WAIT_NS: the submitting thread retires it itself
 * (releases run on that thread); the timeline ends where it should. */
TU_TEST(busy_submitter_retires_completed_work) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  gpuhal__queue_state_t* state;
  harvest_counter_t c;
  uint64_t i, total = 0, harvested0, v = 0;
  int round;
  qt_tuning.completion_min_age_ns = 20000000;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  harvest_counter_init(&c);
  state = gpuhal__queue_state(f.device);
  harvested0 = gpuhal__atomic_load(&state->harvested);
  /* Rounds until something was harvested (a loaded machine may need more than one). */
  for (round = 0; round < 10 && gpuhal__atomic_load(&c.released_by_submitter) == 0; ++round) {
    for (i = 0; i < 200; ++i, ++total) {
      uint64_t prev = total, next = total + 1;
      gpuhal_semaphore_list_t wait = gpuhal_semaphore_list_one(&s, &prev);
      gpuhal_semaphore_list_t signal = gpuhal_semaphore_list_one(&s, &next);
      if (i % 97 == 96) {
        TU_REQUIRE_OK(gpuhal_queue_host_call(f.device, (uint32_t)(i % 2), wait, signal, qt_host_fn_nop, NULL));
      } else {
        TU_REQUIRE_OK(qt_submit(f.device, (uint32_t)(i % 2), wait, signal, &harvest_ops, &c));
      }
      if (i % 4 == 3) tu_sleep_ns(GPUHAL__HARVEST_MAX_WAIT_NS + 20000);
    }
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(s, total, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
  TU_CHECK_EQ_INT(v, total);
  TU_CHECK(gpuhal__atomic_load(&c.released_by_submitter) > 0);
  TU_CHECK(gpuhal__atomic_load(&state->harvested) > harvested0);
  harvest_check_counts(&c);
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

/* A long kernel at the head of the queue: the submitter's looks find nothing complete,
 * retire nothing early (no value shows before the work that reaches it has run) and back
 * off; once the kernel ends, everything completes and is released once. */
TU_TEST(harvest_waits_for_the_gpu_and_backs_off) {
  qt_fixture_t f;
  gpuhal_semaphore_t* slow = NULL;
  gpuhal_semaphore_t* s = NULL;
  gpuhal__queue_state_t* state;
  harvest_counter_t c;
  qt_spin_t spin;
  uint64_t i, misses0, slow_value = 0, v = 0;
  const uint64_t n = 120;
  qt_tuning.completion_min_age_ns = 20000000;
  TU_REQUIRE(qt_open(&f, 1, NULL));
  TU_REQUIRE(qt_kernels_load(&f));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &slow));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  harvest_counter_init(&c);
  state = gpuhal__queue_state(f.device);
  misses0 = gpuhal__atomic_load(&state->harvest_misses);
  TU_CHECK_OK(qt_submit_spin(&f, &spin, 200000, slow, 1)); /* 200 ms */
  for (i = 0; i < n; ++i) {
    uint64_t next = i + 1;
    int64_t until = gpuhal_now_ns() + 1000000000;
    /* Only a submitter that issues itself harvests: on a loaded machine the worker may not
     * have taken what was handed to it yet, and every later submission would follow it. */
    while (gpuhal__atomic_load(&state->incoming_count) && gpuhal_now_ns() < until) tu_sleep_ns(20000);
    TU_REQUIRE_OK(
        qt_submit(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &next), &harvest_ops, &c));
    if (i % 8 == 7) tu_sleep_ns(GPUHAL__HARVEST_MAX_WAIT_NS + 20000);
  }
  /* Everything after the kernel is in its stream's order: nothing may have completed yet. */
  TU_CHECK_OK(gpuhal_semaphore_query(slow, &slow_value));
  TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
  if (slow_value == 0) {
    TU_CHECK_EQ_INT(v, 0);
    TU_CHECK_EQ_INT(qt_counter_get(&c.counts.completed_ok), 0);
    TU_CHECK(gpuhal__atomic_load(&state->harvest_misses) > misses0);
    TU_CHECK(gpuhal__atomic_load(&state->lanes[0].harvest_backoff) > 0);
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(s, n, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_semaphore_query(slow, &slow_value));
  TU_CHECK_EQ_INT(slow_value, 1);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(60)));
  harvest_check_counts(&c);
  TU_CHECK_EQ_INT(qt_counter_get(&c.counts.released), (int)n);
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(slow);
  qt_close(&f);
}

TU_MAIN(TU_CASE(busy_submitter_retires_completed_work), TU_CASE(harvest_waits_for_the_gpu_and_backs_off))
