/* Timeline semaphores on the host: create, query, signal, fail, waits and timeouts. */
#include "gpuhal.h"

#include "test_util.h"

#include <pthread.h>

static gpuhal_driver_t* open_driver(void) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_status_t s = gpuhal_driver_create(NULL, &driver);
  if (s) {
    fprintf(stderr, "  driver: %s\n", gpuhal_status_message(s));
    gpuhal_status_free(s);
    return NULL;
  }
  return driver;
}

static int64_t ms_since(int64_t start_ns) { return (gpuhal_now_ns() - start_ns) / 1000000; }

static void sleep_ms(int ms) { tu_sleep_ns((int64_t)ms * 1000000); }

TU_TEST(create_query_signal) {
  gpuhal_driver_t* driver = open_driver();
  gpuhal_semaphore_t* s = NULL;
  uint64_t v = 99;
  TU_REQUIRE(driver);
  fprintf(stderr, "  driver: %s\n", tu_softcuda() ? "softcuda" : gpuhal_driver_cuda_library(driver));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 5, &s));
  TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
  TU_CHECK_EQ_INT(v, 5);
  TU_CHECK_OK(gpuhal_semaphore_signal(s, 7));
  TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
  TU_CHECK_EQ_INT(v, 7);
  TU_CHECK_STATUS(gpuhal_semaphore_signal(s, 7), GPUHAL_STATUS_FAILED_PRECONDITION, "above the current");
  TU_CHECK_STATUS(gpuhal_semaphore_signal(s, 3), GPUHAL_STATUS_FAILED_PRECONDITION, "value");
  /* Already reached: waits return at once. */
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 7, gpuhal_timeout_immediate()));
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, gpuhal_timeout_infinite()));
  gpuhal_semaphore_retain(s);
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(s);
  gpuhal_driver_release(driver);
}

TU_TEST(argument_checks) {
  gpuhal_driver_t* driver = open_driver();
  gpuhal_semaphore_t* s = NULL;
  gpuhal_semaphore_t* list[2];
  uint64_t values[2] = {1, 1};
  uint64_t v;
  gpuhal_semaphore_list_t l;
  TU_REQUIRE(driver);
  TU_CHECK_STATUS(gpuhal_semaphore_create(NULL, 0, &s), GPUHAL_STATUS_INVALID_ARGUMENT, "driver");
  TU_CHECK_STATUS(gpuhal_semaphore_create(driver, 0, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "out_semaphore");
  TU_CHECK_STATUS(gpuhal_semaphore_query(NULL, &v), GPUHAL_STATUS_INVALID_ARGUMENT, "semaphore");
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s));
  TU_CHECK_STATUS(gpuhal_semaphore_query(s, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "out_value");
  TU_CHECK_STATUS(gpuhal_semaphore_signal(NULL, 1), GPUHAL_STATUS_INVALID_ARGUMENT, "semaphore");
  TU_CHECK_STATUS(gpuhal_semaphore_wait(NULL, 1, gpuhal_timeout_immediate()), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "semaphore");
  list[0] = s;
  list[1] = NULL;
  l.count = 2;
  l.semaphores = list;
  l.values = values;
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, l, gpuhal_timeout_immediate()),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "index 1");
  l.values = NULL;
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, l, gpuhal_timeout_immediate()),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "NULL");
  TU_CHECK_STATUS(
      gpuhal_semaphores_wait((gpuhal_wait_mode_t)7, gpuhal_semaphore_list_empty(), gpuhal_timeout_immediate()),
      GPUHAL_STATUS_INVALID_ARGUMENT, "mode");
  TU_CHECK_OK(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, gpuhal_semaphore_list_empty(), gpuhal_timeout_immediate()));
  gpuhal_semaphore_fail(NULL, gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "ignored")); /* no crash, no leak */
  gpuhal_semaphore_release(NULL);
  gpuhal_semaphore_release(s);
  /* A released handle (still quarantined) is caught. */
  TU_CHECK_STATUS(gpuhal_semaphore_signal(s, 1), GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
  gpuhal_driver_release(driver);
}

TU_TEST(fail_keeps_first_cause) {
  gpuhal_driver_t* driver = open_driver();
  gpuhal_semaphore_t* s = NULL;
  uint64_t v = 0;
  TU_REQUIRE(driver);
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 1, &s));
  gpuhal_semaphore_fail(s, gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "the first cause"));
  gpuhal_semaphore_fail(s, gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "the second cause"));
  TU_CHECK_STATUS(gpuhal_semaphore_query(s, &v), GPUHAL_STATUS_DATA_LOSS, "the first cause");
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 5, gpuhal_timeout_infinite()), GPUHAL_STATUS_DATA_LOSS, "the first cause");
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 1, gpuhal_timeout_immediate()), GPUHAL_STATUS_DATA_LOSS, "the first cause");
  TU_CHECK_STATUS(gpuhal_semaphore_signal(s, 2), GPUHAL_STATUS_DATA_LOSS, "the first cause");
  gpuhal_semaphore_fail(s, NULL);
  gpuhal_semaphore_release(s);
  gpuhal_driver_release(driver);
}

/* ---- threads ---- */
typedef struct signal_later_s {
  gpuhal_semaphore_t* semaphore;
  uint64_t value;
  int delay_ms;
  int fail; /* fail instead of signal */
} signal_later_t;

static void* signal_later_main(void* arg) {
  signal_later_t* job = (signal_later_t*)arg;
  sleep_ms(job->delay_ms);
  if (job->fail) {
    gpuhal_semaphore_fail(job->semaphore, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "failed by the test thread"));
  } else {
    gpuhal_status_free(gpuhal_semaphore_signal(job->semaphore, job->value));
  }
  return NULL;
}

TU_TEST(wait_before_signal) {
  gpuhal_driver_t* driver = open_driver();
  gpuhal_semaphore_t* s = NULL;
  signal_later_t job;
  pthread_t t;
  int64_t start;
  TU_REQUIRE(driver);
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s));
  job.semaphore = s;
  job.value = 3;
  job.delay_ms = 30;
  job.fail = 0;
  start = gpuhal_now_ns();
  pthread_create(&t, NULL, signal_later_main, &job);
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 2, gpuhal_timeout_infinite()));
  TU_CHECK(ms_since(start) >= 25);
  pthread_join(t, NULL);
  /* A failure wakes a waiter too, with the cause. */
  job.value = 0;
  job.fail = 1;
  pthread_create(&t, NULL, signal_later_main, &job);
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 10, gpuhal_timeout_infinite()), GPUHAL_STATUS_CANCELLED,
                  "failed by the test thread");
  pthread_join(t, NULL);
  gpuhal_semaphore_release(s);
  gpuhal_driver_release(driver);
}

TU_TEST(timeouts) {
  gpuhal_driver_t* driver = open_driver();
  gpuhal_semaphore_t* s = NULL;
  signal_later_t job;
  pthread_t t;
  int64_t start;
  TU_REQUIRE(driver);
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s));
  /* Immediate: never blocks. */
  start = gpuhal_now_ns();
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 1, gpuhal_timeout_immediate()), GPUHAL_STATUS_DEADLINE_EXCEEDED, NULL);
  TU_CHECK(ms_since(start) < 50); /* generous: valgrind translates the path on first use */
  /* Relative. */
  start = gpuhal_now_ns();
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 1, gpuhal_timeout_relative_ns(30 * 1000000)),
                  GPUHAL_STATUS_DEADLINE_EXCEEDED, "timeout");
  TU_CHECK(ms_since(start) >= 29);
  TU_CHECK(ms_since(start) < 2000);
  /* Absolute deadline. */
  start = gpuhal_now_ns();
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 1, gpuhal_timeout_deadline_ns(start + 20 * 1000000)),
                  GPUHAL_STATUS_DEADLINE_EXCEEDED, NULL);
  TU_CHECK(ms_since(start) >= 19);
  /* A deadline in the past behaves like immediate. */
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 1, gpuhal_timeout_deadline_ns(start - 1000)),
                  GPUHAL_STATUS_DEADLINE_EXCEEDED, NULL);
  /* Relative, satisfied before it passes. */
  job.semaphore = s;
  job.value = 1;
  job.delay_ms = 10;
  job.fail = 0;
  pthread_create(&t, NULL, signal_later_main, &job);
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, gpuhal_timeout_relative_ns(5000 * 1000000ll)));
  pthread_join(t, NULL);
  /* Infinite. */
  job.value = 2;
  pthread_create(&t, NULL, signal_later_main, &job);
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 2, gpuhal_timeout_infinite()));
  pthread_join(t, NULL);
  gpuhal_semaphore_release(s);
  gpuhal_driver_release(driver);
}

TU_TEST(wait_any_returns_on_first) {
  gpuhal_driver_t* driver = open_driver();
  gpuhal_semaphore_t* s[3] = {NULL, NULL, NULL};
  uint64_t values[3] = {1, 1, 1};
  gpuhal_semaphore_list_t list;
  signal_later_t job;
  pthread_t t;
  uint64_t v;
  int i;
  TU_REQUIRE(driver);
  for (i = 0; i < 3; ++i) TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s[i]));
  list.count = 3;
  list.semaphores = s;
  list.values = values;
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, list, gpuhal_timeout_immediate()),
                  GPUHAL_STATUS_DEADLINE_EXCEEDED, NULL);
  job.semaphore = s[1];
  job.value = 1;
  job.delay_ms = 20;
  job.fail = 0;
  pthread_create(&t, NULL, signal_later_main, &job);
  TU_CHECK_OK(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, list, gpuhal_timeout_relative_ns(10000 * 1000000ll)));
  pthread_join(t, NULL);
  TU_CHECK_OK(gpuhal_semaphore_query(s[0], &v));
  TU_CHECK_EQ_INT(v, 0);
  TU_CHECK_OK(gpuhal_semaphore_query(s[2], &v));
  TU_CHECK_EQ_INT(v, 0);
  /* ANY with one failed entry and none satisfied: fails at once with that entry's cause
   * (waiting on would hide the failure until the timeout). */
  gpuhal_semaphore_fail(s[0], gpuhal_status_make(GPUHAL_STATUS_ABORTED, "s0 failed"));
  values[1] = 2;
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, list, gpuhal_timeout_relative_ns(10000 * 1000000ll)),
                  GPUHAL_STATUS_ABORTED, "s0 failed");
  /* ... unless another entry is reached: then ANY is satisfied. */
  TU_CHECK_OK(gpuhal_semaphore_signal(s[1], 2));
  TU_CHECK_OK(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, list, gpuhal_timeout_immediate()));
  values[1] = 3;
  /* Every entry failed: fails with a cause. */
  gpuhal_semaphore_fail(s[1], gpuhal_status_make(GPUHAL_STATUS_ABORTED, "s1 failed"));
  gpuhal_semaphore_fail(s[2], gpuhal_status_make(GPUHAL_STATUS_ABORTED, "s2 failed"));
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, list, gpuhal_timeout_infinite()), GPUHAL_STATUS_ABORTED,
                  "failed");
  for (i = 0; i < 3; ++i) gpuhal_semaphore_release(s[i]);
  gpuhal_driver_release(driver);
}

TU_TEST(wait_all_waits_for_every_one) {
  gpuhal_driver_t* driver = open_driver();
  gpuhal_semaphore_t* s[2] = {NULL, NULL};
  uint64_t values[2] = {1, 4};
  gpuhal_semaphore_list_t list;
  signal_later_t jobs[2];
  pthread_t t[2];
  int64_t start;
  uint64_t v;
  int i;
  TU_REQUIRE(driver);
  for (i = 0; i < 2; ++i) TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s[i]));
  list.count = 2;
  list.semaphores = s;
  list.values = values;
  jobs[0].semaphore = s[0];
  jobs[0].value = 1;
  jobs[0].delay_ms = 5;
  jobs[0].fail = 0;
  jobs[1].semaphore = s[1];
  jobs[1].value = 4;
  jobs[1].delay_ms = 60;
  jobs[1].fail = 0;
  start = gpuhal_now_ns();
  for (i = 0; i < 2; ++i) pthread_create(&t[i], NULL, signal_later_main, &jobs[i]);
  TU_CHECK_OK(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, list, gpuhal_timeout_infinite()));
  TU_CHECK(ms_since(start) >= 55);
  TU_CHECK_OK(gpuhal_semaphore_query(s[1], &v));
  TU_CHECK_EQ_INT(v, 4);
  for (i = 0; i < 2; ++i) pthread_join(t[i], NULL);
  /* ALL with one failed entry fails with that cause. */
  values[0] = 9;
  gpuhal_semaphore_fail(s[1], gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "entry one broke"));
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, list, gpuhal_timeout_infinite()), GPUHAL_STATUS_DATA_LOSS,
                  "entry one broke");
  for (i = 0; i < 2; ++i) gpuhal_semaphore_release(s[i]);
  gpuhal_driver_release(driver);
}

/* Lists longer than the inline waiter storage. */
TU_TEST(wait_all_long_list) {
  enum { N = 20 };
  gpuhal_driver_t* driver = open_driver();
  gpuhal_semaphore_t* s[N];
  uint64_t values[N];
  gpuhal_semaphore_list_t list;
  signal_later_t jobs[N];
  pthread_t t[N];
  int i;
  TU_REQUIRE(driver);
  for (i = 0; i < N; ++i) {
    TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s[i]));
    values[i] = (uint64_t)i + 1;
    jobs[i].semaphore = s[i];
    jobs[i].value = (uint64_t)i + 1;
    jobs[i].delay_ms = 1 + (i * 7) % 13;
    jobs[i].fail = 0;
  }
  list.count = N;
  list.semaphores = s;
  list.values = values;
  for (i = 0; i < N; ++i) pthread_create(&t[i], NULL, signal_later_main, &jobs[i]);
  TU_CHECK_OK(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, list, gpuhal_timeout_relative_ns(20000 * 1000000ll)));
  for (i = 0; i < N; ++i) pthread_join(t[i], NULL);
  for (i = 0; i < N; ++i) gpuhal_semaphore_release(s[i]);
  gpuhal_driver_release(driver);
}

/* Several threads take turns on one semaphore: thread k waits for value v (v % T == k)
 * and signals v + 1, so every hand-off is a host signal waking a host waiter. */
enum { RING_THREADS = 4, RING_ROUNDS = 500 };
typedef struct ring_s {
  gpuhal_semaphore_t* semaphore;
  int index;
  int errors;
} ring_t;

static void* ring_main(void* arg) {
  ring_t* r = (ring_t*)arg;
  uint64_t v;
  for (v = (uint64_t)r->index; v < RING_THREADS * RING_ROUNDS; v += RING_THREADS) {
    gpuhal_status_t s = gpuhal_semaphore_wait(r->semaphore, v, gpuhal_timeout_relative_ns(20000 * 1000000ll));
    if (!s) s = gpuhal_semaphore_signal(r->semaphore, v + 1);
    if (s) {
      r->errors++;
      fprintf(stderr, "  ring thread %d at %llu: %s\n", r->index, (unsigned long long)v, gpuhal_status_message(s));
      gpuhal_status_free(s);
      break;
    }
  }
  return NULL;
}

TU_TEST(signal_wait_from_several_threads) {
  gpuhal_driver_t* driver = open_driver();
  gpuhal_semaphore_t* s = NULL;
  ring_t rings[RING_THREADS];
  pthread_t t[RING_THREADS];
  uint64_t v = 0;
  int i;
  TU_REQUIRE(driver);
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s));
  for (i = 0; i < RING_THREADS; ++i) {
    rings[i].semaphore = s;
    rings[i].index = i;
    rings[i].errors = 0;
    pthread_create(&t[i], NULL, ring_main, &rings[i]);
  }
  for (i = 0; i < RING_THREADS; ++i) {
    pthread_join(t[i], NULL);
    TU_CHECK_EQ_INT(rings[i].errors, 0);
  }
  TU_CHECK_OK(gpuhal_semaphore_query(s, &v));
  TU_CHECK_EQ_INT(v, RING_THREADS * RING_ROUNDS);
  gpuhal_semaphore_release(s);
  gpuhal_driver_release(driver);
}

/* Another thread releases the application's last reference while a host wait is in
 * progress (asleep, or still in its first looks): the wait holds its own reference, so it
 * ends cleanly, with ABORTED as nothing can advance the semaphore any more, and the
 * semaphore goes when the wait is over. Before, the release destroyed it under the waiter. */
typedef struct {
  gpuhal_semaphore_t* semaphores[2];
  gpuhal_wait_mode_t mode;
  uint32_t count;
  gpuhal_status_t result;
  int64_t took_ms;
} release_waiter_t;

static void* release_waiter_main(void* p) {
  release_waiter_t* w = (release_waiter_t*)p;
  static const uint64_t values[2] = {1, 1};
  gpuhal_semaphore_list_t list;
  int64_t start = gpuhal_now_ns();
  list.count = w->count;
  list.semaphores = w->semaphores;
  list.values = values;
  w->result = gpuhal_semaphores_wait(w->mode, list, gpuhal_timeout_relative_ns(20ll * 1000000000ll));
  w->took_ms = ms_since(start);
  return NULL;
}

TU_TEST(release_while_another_thread_waits) {
  gpuhal_driver_t* driver = open_driver();
  int round;
  TU_REQUIRE(driver);
  for (round = 0; round < 6; ++round) {
    release_waiter_t w;
    gpuhal_semaphore_t* other = NULL;
    pthread_t t;
    memset(&w, 0, sizeof(w));
    TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &w.semaphores[0]));
    w.count = 1;
    w.mode = GPUHAL_WAIT_ALL;
    if (round >= 2) { /* ANY and ALL over it and a semaphore kept alive */
      TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &other));
      w.semaphores[1] = other;
      w.count = 2;
      w.mode = round % 2 ? GPUHAL_WAIT_ANY : GPUHAL_WAIT_ALL;
    }
    TU_REQUIRE(pthread_create(&t, NULL, release_waiter_main, &w) == 0);
    sleep_ms(round % 2 ? 1 : 300); /* in its first looks, or asleep */
    gpuhal_semaphore_release(w.semaphores[0]);
    pthread_join(t, NULL);
    /* A short sleep may let the release come before the call: a released handle. */
    if (!(round % 2 && gpuhal_status_code(w.result) == GPUHAL_STATUS_INVALID_ARGUMENT))
      TU_CHECK_EQ_INT(gpuhal_status_code(w.result), GPUHAL_STATUS_ABORTED);
    TU_CHECK(w.took_ms < 10000);
    gpuhal_status_free(w.result);
    gpuhal_semaphore_release(other);
  }
  gpuhal_driver_release(driver);
}

TU_MAIN(TU_CASE(create_query_signal), TU_CASE(argument_checks), TU_CASE(fail_keeps_first_cause),
        TU_CASE(wait_before_signal), TU_CASE(timeouts), TU_CASE(wait_any_returns_on_first),
        TU_CASE(wait_all_waits_for_every_one), TU_CASE(wait_all_long_list), TU_CASE(signal_wait_from_several_threads),
        TU_CASE(release_while_another_thread_waits))
