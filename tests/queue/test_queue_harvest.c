/* test_queue_harvest - retiring completed work: a busy submitter retires it itself (queue.h,
 * harvesting), and what the completion thread retires reaches the worker's release in
 * batches, but never late.
 *
 * For the harvest cases the completion thread is told to leave issued work alone for 20 ms
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
static const gpuhal__action_ops_t harvest_ops = {"test_harvest", qt_counting_issue, harvest_complete, harvest_release,
                                                 NULL};

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
  /* Rounds until something was harvested. A loaded machine (or valgrind, which runs one
   * thread at a time) may need more, and longer pauses: softcuda's stream thread must run
   * during one for a look to find work done. The pauses stay well under
   * completion_min_age_ns, so the completion thread leaves the work to the submitter. */
  for (round = 0; round < 16 && gpuhal__atomic_load(&c.released_by_submitter) == 0; ++round) {
    for (i = 0; i < 200; ++i, ++total) {
      uint64_t prev = total, next = total + 1;
      gpuhal_semaphore_list_t wait = gpuhal_semaphore_list_one(&s, &prev);
      gpuhal_semaphore_list_t signal = gpuhal_semaphore_list_one(&s, &next);
      if (i % 97 == 96) {
        TU_REQUIRE_OK(gpuhal_queue_host_call(f.device, (uint32_t)(i % 2), wait, signal, qt_host_fn_nop, NULL));
      } else {
        TU_REQUIRE_OK(qt_submit(f.device, (uint32_t)(i % 2), wait, signal, &harvest_ops, &c));
      }
      if (i % 4 == 3) tu_sleep_ns((GPUHAL__HARVEST_MAX_WAIT_NS + 20000) << (round < 5 ? round : 5));
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

/* Issues as the counting ops do, taking 40 us of the issuing thread: a GPU that keeps up
 * with the issue, as a real one does with launches (softcuda's streams are slower). */
static gpuhal_status_t slow_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  tu_sleep_ns(40000);
  return qt_counting_issue(user, device, stream);
}
static const gpuhal__action_ops_t slow_harvest_ops = {"test_harvest_slow", slow_issue, harvest_complete,
                                                      harvest_release, NULL};

/* A chain submitted backwards across two queues (every hop waits for a value not submitted
 * yet), then released by a host signal: the worker issues the chain, in turns of
 * GPUHAL__PUMP_ISSUE_BATCH, and between turns retires what completed itself, as a busy
 * submitter does (the completion thread is held off, and the submitting thread, whose
 * signal issues only the first few, harvests nothing). Rounds until something was
 * harvested (softcuda's stream thread must run meanwhile); values and counts exact. */
TU_TEST(worker_retires_the_chain_it_issues) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_semaphore_t* gate = NULL;
  gpuhal__queue_state_t* state;
  harvest_counter_t c;
  uint64_t base = 0, harvested0, v = 0;
  const uint64_t n = 300;
  int round;
  memset(&qt_tuning, 0, sizeof(qt_tuning));
  qt_tuning.completion_min_age_ns = 200000000;
  qt_tuning.harvest_min = 4;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  harvest_counter_init(&c);
  state = gpuhal__queue_state(f.device);
  harvested0 = gpuhal__atomic_load(&state->harvested);
  for (round = 0; round < 16 && gpuhal__atomic_load(&state->harvested) == harvested0; ++round) {
    uint64_t i, gate_value = (uint64_t)round + 1;
    for (i = n; i-- > 0;) {
      uint64_t prev = base + i, next = prev + 1;
      gpuhal_semaphore_list_t wait =
          i == 0 ? gpuhal_semaphore_list_one(&gate, &gate_value) : gpuhal_semaphore_list_one(&s, &prev);
      TU_REQUIRE_OK(
          qt_submit(f.device, (uint32_t)(i % 2), wait, gpuhal_semaphore_list_one(&s, &next), &slow_harvest_ops, &c));
    }
    base += n;
    TU_CHECK_OK(gpuhal_semaphore_signal(gate, gate_value));
    TU_CHECK_OK(gpuhal_semaphore_wait(s, base, qt_seconds(60)));
    /* Nothing left in flight for the next round's submissions to harvest. */
    TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(60)));
  }
  TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
  TU_CHECK_EQ_INT(v, base);
  TU_CHECK(gpuhal__atomic_load(&state->harvested) > harvested0);
  TU_CHECK_EQ_INT(gpuhal__atomic_load(&c.released_by_submitter), 0);
  harvest_check_counts(&c);
  TU_CHECK_EQ_INT(qt_counter_get(&c.counts.released), (int)base);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(s);
  qt_close(&f);
  memset(&qt_tuning, 0, sizeof(qt_tuning));
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
    /* The submitter is to issue (and harvest) itself: on a loaded machine the worker may
     * not have taken what was handed to it yet, and every later submission would follow it. */
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

/* A harvest runs on an application thread inside a queue call, which must not wait for the
 * GPU: a free its releases make (here the last reference of a buffer, dropped by an action's
 * release) is put off to the worker, not run there (cuMemFree waits for the whole device).
 * The worker is held busy meanwhile, so the free is seen waiting for it; once let go, the
 * worker frees it. */
typedef struct worker_hold_s {
  gpuhal__task_t task;
  int64_t hold_ns; /* at most */
  int32_t held;    /* the worker is in the task now */
  int32_t let_go;
} worker_hold_t;
static void worker_hold_run(gpuhal__task_t* task) {
  worker_hold_t* h = GPUHAL__CONTAINER_OF(task, worker_hold_t, task);
  int64_t end = gpuhal_now_ns() + h->hold_ns;
  gpuhal__atomic_store(&h->held, 1);
  while (!gpuhal__atomic_load(&h->let_go) && gpuhal_now_ns() < end) tu_sleep_ns(100000);
  gpuhal__atomic_store(&h->held, 0);
}
/* Holds `device`'s worker in a task until let go (or `hold_ns` passes). */
static int worker_hold(gpuhal_device_t* device, worker_hold_t* h, int64_t hold_ns) {
  int64_t end = gpuhal_now_ns() + (int64_t)10 * 1000000000;
  memset(h, 0, sizeof(*h));
  h->hold_ns = hold_ns;
  gpuhal__list_init(&h->task.node);
  h->task.fn = worker_hold_run;
  gpuhal__worker_post(device, &h->task);
  while (!gpuhal__atomic_load(&h->held) && gpuhal_now_ns() < end) tu_sleep_ns(100000);
  return gpuhal__atomic_load(&h->held);
}

typedef struct putoff_s {
  harvest_counter_t c;
  gpuhal_buffer_t* buffer;
  worker_hold_t* hold;
  int32_t released_on_submitter;
  int32_t put_off;
  int32_t worker_still_held; /* when the release returned */
} putoff_t;
static void putoff_release(void* user, gpuhal_device_t* device) {
  putoff_t* p = (putoff_t*)user;
  harvest_release(&p->c, device);
  if (pthread_equal(pthread_self(), p->c.submitter) && p->buffer) {
    gpuhal_driver_t* driver = device->driver;
    gpuhal_buffer_release(p->buffer); /* the last reference */
    p->buffer = NULL;
    p->worker_still_held = gpuhal__atomic_load(&p->hold->held);
    gpuhal__mutex_lock(&driver->parked_mutex);
    p->put_off = driver->deferred != NULL;
    gpuhal__mutex_unlock(&driver->parked_mutex);
    gpuhal__atomic_store(&p->released_on_submitter, 1);
  }
}
static void putoff_complete(void* user, gpuhal_status_t status) { qt_counting_complete(&((putoff_t*)user)->c, status); }
static gpuhal_status_t putoff_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  return qt_counting_issue(&((putoff_t*)user)->c, device, stream);
}
static const gpuhal__action_ops_t putoff_ops = {"test_putoff", putoff_issue, putoff_complete, putoff_release, NULL};

/* Submits actions that wait for each other on `s` until one harvested by this thread has
 * released p->buffer; returns the last value signalled. */
static uint64_t putoff_rounds(qt_fixture_t* f, gpuhal_semaphore_t* s, putoff_t* p, uint64_t total) {
  uint64_t i;
  int round;
  for (round = 0; round < 10 && !gpuhal__atomic_load(&p->released_on_submitter); ++round) {
    for (i = 0; i < 200; ++i, ++total) {
      uint64_t prev = total, next = total + 1;
      TU_CHECK_OK(qt_submit(f->device, 0, gpuhal_semaphore_list_one(&s, &prev), gpuhal_semaphore_list_one(&s, &next),
                            &putoff_ops, p));
      if (i % 4 == 3) tu_sleep_ns((GPUHAL__HARVEST_MAX_WAIT_NS + 20000) << (round < 5 ? round : 5));
    }
  }
  return total;
}

TU_TEST(harvest_puts_frees_off_to_the_worker) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  putoff_t p;
  worker_hold_t hold;
  uint64_t total = 0;
  int drained = 0;
  int64_t end;
  qt_tuning.completion_min_age_ns = 20000000;
  TU_REQUIRE(qt_open(&f, 1, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  memset(&p, 0, sizeof(p));
  harvest_counter_init(&p.c);
  p.hold = &hold;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 4096, &p.buffer));
  TU_REQUIRE(worker_hold(f.device, &hold, (int64_t)60 * 1000000000));
  total = putoff_rounds(&f, s, &p, total);
  TU_CHECK(gpuhal__atomic_load(&p.released_on_submitter) == 1);
  TU_CHECK(p.put_off == 1);           /* the free waits for the (held) worker */
  TU_CHECK(p.worker_still_held == 1); /* and the release did not */
  gpuhal__atomic_store(&hold.let_go, 1);
  TU_CHECK_OK(gpuhal_semaphore_wait(s, total, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(60)));
  end = gpuhal_now_ns() + (int64_t)10 * 1000000000;
  while (!drained && gpuhal_now_ns() < end) {
    gpuhal__mutex_lock(&f.driver->parked_mutex);
    drained = f.driver->deferred == NULL;
    gpuhal__mutex_unlock(&f.driver->parked_mutex);
    if (!drained) tu_sleep_ns(100000);
  }
  TU_CHECK(drained); /* the worker freed it */
  if (p.buffer) gpuhal_buffer_release(p.buffer);
  harvest_check_counts(&p.c);
  gpuhal_semaphore_release(s);
  qt_close(&f);
}

/* The same for queue_alloca memory never deallocated: its free (on the worker: it needs the
 * device's stream) is a task of the worker, and the release does not wait for it. The hold
 * is short, so that a release that waited for the worker is seen after it, not as a hang. */
TU_TEST(harvest_does_not_wait_for_an_alloca_free) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_semaphore_t* allocated = NULL;
  putoff_t p;
  worker_hold_t hold;
  const uint64_t one = 1;
  uint64_t total = 0;
  int64_t end;
  qt_tuning.completion_min_age_ns = 20000000;
  TU_REQUIRE(qt_open(&f, 1, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &allocated));
  memset(&p, 0, sizeof(p));
  harvest_counter_init(&p.c);
  p.hold = &hold;
  TU_REQUIRE_OK(gpuhal_queue_alloca(f.device, 0, gpuhal_semaphore_list_empty(),
                                    gpuhal_semaphore_list_one(&allocated, &one), 4096, &p.buffer));
  TU_REQUIRE_OK(gpuhal_semaphore_wait(allocated, 1, qt_seconds(60)));
  TU_REQUIRE_OK(gpuhal_device_wait_idle(f.device, qt_seconds(60)));
  /* The alloca's action is released (it held a reference): only ours is left. */
  end = gpuhal_now_ns() + (int64_t)10 * 1000000000;
  while (gpuhal__atomic_load(&p.buffer->header.refcount) > 1 && gpuhal_now_ns() < end) tu_sleep_ns(100000);
  TU_REQUIRE(gpuhal__atomic_load(&p.buffer->header.refcount) == 1);
  TU_REQUIRE(worker_hold(f.device, &hold, (int64_t)3 * 1000000000));
  total = putoff_rounds(&f, s, &p, total);
  TU_CHECK(gpuhal__atomic_load(&p.released_on_submitter) == 1);
  TU_CHECK(p.worker_still_held == 1); /* the release did not wait for the worker */
  gpuhal__atomic_store(&hold.let_go, 1);
  TU_CHECK_OK(gpuhal_semaphore_wait(s, total, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(60)));
  if (p.buffer) gpuhal_buffer_release(p.buffer);
  harvest_check_counts(&p.c);
  gpuhal_semaphore_release(allocated);
  gpuhal_semaphore_release(s);
  qt_close(&f); /* the device's release waits for the worker's free (it holds a reference) */
}

/* The completion thread hands what it retires to the worker in batches (each hand-over
 * wakes the worker), yet a batch that does not fill is released within
 * GPUHAL__RETIRE_MAX_DELAY_NS even while other work keeps a queue busy: here a 3 s kernel
 * on queue 0, and three actions on queue 1 whose releases must not wait for it. Harvesting
 * is off, so the completion thread retires them. */
TU_TEST(retired_work_is_released_while_another_queue_stays_busy) {
  qt_fixture_t f;
  gpuhal_semaphore_t* slow = NULL;
  gpuhal_semaphore_t* s = NULL;
  qt_spin_t spin;
  qt_counter_t c;
  uint64_t i;
  int64_t end;
  memset(&qt_tuning, 0, sizeof(qt_tuning));
  qt_tuning.harvest_min = -1;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  if (!qt_kernels_load(&f)) {
    TU_SKIP("the spin kernel is not available");
    qt_close(&f);
    return;
  }
  qt_counter_init(&c);
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &slow));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_REQUIRE_OK(qt_submit_spin(&f, &spin, 3000000, slow, 1));
  for (i = 0; i < 3; ++i) {
    uint64_t next = i + 1;
    TU_REQUIRE_OK(qt_submit(f.device, 1, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &next),
                            &qt_counting_ops, &c));
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 3, qt_seconds(10)));
  /* Released within a second of the values (the bound is 1 ms; a second leaves room for a
   * loaded machine or valgrind), not when the kernel ends. */
  end = gpuhal_now_ns() + 1000000000;
  while (qt_counter_get(&c.released) < 3 && gpuhal_now_ns() < end) tu_sleep_ns(100000);
  TU_CHECK_EQ_INT(qt_counter_get(&c.released), 3);
  TU_CHECK_EQ_INT(qt_counter_get(&c.completed_ok), 3);
  TU_CHECK_OK(gpuhal_semaphore_wait(slow, 1, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(60)));
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(slow);
  qt_close(&f);
  memset(&qt_tuning, 0, sizeof(qt_tuning));
}

/* Submits on the fast path: waits (bounded) until the worker has taken what was handed to
 * it, so that the submitting thread issues (and harvests) itself. */
static gpuhal_status_t harvest_submit(qt_fixture_t* f, uint32_t queue, gpuhal_semaphore_list_t wait,
                                      gpuhal_semaphore_list_t signal, const gpuhal__action_ops_t* ops, void* user) {
  gpuhal__queue_state_t* state = gpuhal__queue_state(f->device);
  int64_t until = gpuhal_now_ns() + 1000000000;
  while (gpuhal__atomic_load(&state->incoming_count) && gpuhal_now_ns() < until) tu_sleep_ns(20000);
  return qt_submit(f->device, queue, wait, signal, ops, user);
}

/* A chain across two queues, each hop waiting on the GPU for the other queue's last one (an
 * event wait): a look at queue 1's work that finds it complete takes queue 0's work it
 * waited for as well (harvest_covered), so the chain costs one query per look, not one per
 * queue. Nothing else observes the chain (the completion thread is held off past the test
 * and there are no host waits until the end), and the timeline ends where it should. */
TU_TEST(harvest_takes_what_the_work_waited_for_on_other_queues) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  gpuhal__queue_state_t* state;
  harvest_counter_t c;
  uint64_t i, covered0, total = 0, v = 0;
  int64_t deadline;
  int round;
  qt_tuning.completion_min_age_ns = 60000000000LL; /* held off past the test */
  TU_REQUIRE(qt_open(&f, 2, NULL));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  harvest_counter_init(&c);
  state = gpuhal__queue_state(f.device);
  covered0 = gpuhal__atomic_load(&state->harvest_covered);
  for (i = 0; i < 40; ++i, ++total) {
    uint64_t prev = total, next = total + 1;
    TU_REQUIRE_OK(harvest_submit(&f, (uint32_t)(i % 2), gpuhal_semaphore_list_one(&s, &prev),
                                 gpuhal_semaphore_list_one(&s, &next), &harvest_ops, &c));
  }
  /* More hops, further apart each round, until a look has found queue 1's work done (a
   * loaded machine or valgrind may need a few). Looks that found nothing done while the
   * chain was submitted set a back-off: cleared, so that each round looks. */
  deadline = gpuhal_now_ns() + 30000000000LL;
  for (round = 0; gpuhal__atomic_load(&state->harvest_covered) == covered0 && gpuhal_now_ns() < deadline;
       ++round, ++total) {
    uint64_t prev = total, next = total + 1;
    tu_sleep_ns((int64_t)1000000 << (round < 4 ? round : 4));
    gpuhal__atomic_store(&state->lanes[total % 2].harvest_skip, 0);
    TU_REQUIRE_OK(harvest_submit(&f, (uint32_t)(total % 2), gpuhal_semaphore_list_one(&s, &prev),
                                 gpuhal_semaphore_list_one(&s, &next), &harvest_ops, &c));
  }
  TU_CHECK(gpuhal__atomic_load(&state->harvest_covered) > covered0);
  TU_CHECK_OK(gpuhal_semaphore_wait(s, total, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
  TU_CHECK_EQ_INT(v, total);
  harvest_check_counts(&c);
  TU_CHECK_EQ_INT(qt_counter_get(&c.counts.released), (int)total);
  gpuhal_semaphore_release(s);
  qt_close(&f);
  memset(&qt_tuning, 0, sizeof(qt_tuning));
}

/* What a look takes from another queue ends at the work waited for: queue 0 runs A (1 ms,
 * s = 1) then A2 (a 2 s kernel, t = 1); queue 1's B waits for s = 1. B found complete
 * proves A complete, not A2: the look takes A only, and t shows nothing until A2 ends.
 * Where a harvest of queue 0 itself takes A first (the worker harvests every queue after
 * it issued something, and on a loaded machine a submission may go to it, as may A2's own
 * submission once A is done), no look at B can show it: that attempt is told and made
 * again (CI once saw one under ASan). Returns 0 for such an attempt. */
static int harvest_a_taken(gpuhal__queue_state_t* state, qt_spin_t* spin) {
  return gpuhal__atomic_load(&spin->launched) == 2 && gpuhal__atomic_load(&state->lanes[0].count) < 2;
}
static int harvest_one_cover(void) {
  qt_fixture_t f;
  gpuhal_semaphore_t *s = NULL, *t = NULL, *u = NULL;
  gpuhal__queue_state_t* state;
  harvest_counter_t c;
  qt_spin_t spin;
  uint64_t one = 1, covered0, v = 0;
  int64_t start, deadline;
  int round, covered;
  qt_tuning.completion_min_age_ns = 60000000000LL; /* held off past the test */
  if (!qt_open(&f, 2, NULL) || !qt_kernels_load(&f)) {
    TU_FAIL_AT(__FILE__, __LINE__, "no device or test kernels");
    return 1;
  }
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &t));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &u));
  harvest_counter_init(&c);
  state = gpuhal__queue_state(f.device);
  covered0 = gpuhal__atomic_load(&state->harvest_covered);
  memset(&spin, 0, sizeof(spin));
  start = gpuhal_now_ns();
  spin.fixture = &f;
  spin.first_us = 1000;
  spin.rest_us = 2000000;
  TU_CHECK_OK(
      harvest_submit(&f, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one), &qt_spin_ops, &spin));
  TU_CHECK_OK(
      harvest_submit(&f, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&t, &one), &qt_spin_ops, &spin));
  TU_CHECK_OK(harvest_submit(&f, 1, gpuhal_semaphore_list_one(&s, &one), gpuhal_semaphore_list_one(&u, &one),
                             &harvest_ops, &c));
  /* Queue 1 submissions, further apart each round, until a look at B has taken A (or
   * something else took A: with both launched, queue 0 counts A2 alone). */
  deadline = gpuhal_now_ns() + 30000000000LL;
  for (round = 0; gpuhal__atomic_load(&state->harvest_covered) == covered0 && !harvest_a_taken(state, &spin) &&
                  gpuhal_now_ns() < deadline;
       ++round) {
    uint64_t prev = (uint64_t)round + 1, next = prev + 1;
    tu_sleep_ns((int64_t)2000000 << (round < 3 ? round : 3));
    gpuhal__atomic_store(&state->lanes[1].harvest_skip, 0);
    TU_CHECK_OK(harvest_submit(&f, 1, gpuhal_semaphore_list_one(&u, &prev), gpuhal_semaphore_list_one(&u, &next),
                               &harvest_ops, &c));
  }
  if (harvest_a_taken(state, &spin)) qc_sleep_ms(10); /* a look's count follows its take */
  covered = gpuhal__atomic_load(&state->harvest_covered) != covered0;
  if (covered) {
    TU_CHECK_EQ_INT(gpuhal__atomic_load(&state->harvest_covered) - covered0, 1);
    TU_CHECK_OK(gpuhal_semaphore_query(t, &v));
    if (gpuhal_now_ns() - start < 1500000000) TU_CHECK_EQ_INT(v, 0); /* A2 still runs */
    TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
    TU_CHECK_EQ_INT(v, 1);
  } else if (!harvest_a_taken(state, &spin)) {
    TU_FAIL_AT(__FILE__, __LINE__, "no look at B took A within 30 s");
    covered = 1;
  } else {
    fprintf(stderr, "  a harvest of queue 0 took A before a look at B could (after %d rounds): again\n", round);
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(t, 1, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_semaphore_wait(u, (uint64_t)round + 1, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(60)));
  harvest_check_counts(&c);
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(t);
  gpuhal_semaphore_release(u);
  qt_close(&f);
  memset(&qt_tuning, 0, sizeof(qt_tuning));
  return covered || tu_state.failed;
}
TU_TEST(harvest_takes_no_more_of_another_queue_than_was_waited_for) {
  int attempt;
  for (attempt = 0; attempt < 5; ++attempt)
    if (harvest_one_cover()) return;
  TU_FAIL_AT(__FILE__, __LINE__, "five attempts in a row, each with A taken before a look at B could take it");
}

TU_MAIN(TU_CASE(busy_submitter_retires_completed_work), TU_CASE(worker_retires_the_chain_it_issues),
        TU_CASE(harvest_waits_for_the_gpu_and_backs_off), TU_CASE(harvest_puts_frees_off_to_the_worker),
        TU_CASE(harvest_does_not_wait_for_an_alloca_free),
        TU_CASE(retired_work_is_released_while_another_queue_stays_busy),
        TU_CASE(harvest_takes_what_the_work_waited_for_on_other_queues),
        TU_CASE(harvest_takes_no_more_of_another_queue_than_was_waited_for))
