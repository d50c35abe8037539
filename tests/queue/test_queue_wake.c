/* How blocked queue work is woken (issue #14), through the public API only:
 *
 *  1. one host signal releases hundreds of queued operations on three queues (dispatches
 *     from STREAM and reusable GRAPH command buffers, host calls): the signalling thread
 *     issues a bounded share itself, the worker the rest; every one runs exactly once;
 *  2. a chain of thousands of hops submitted backwards reaches its exact value (the pump
 *     looks only at woken work; a semaphore's waiters are kept sorted);
 *  3. waits registered on one semaphore in shuffled order (queued host calls and host
 *     waiters) are each released by the signal that reaches their value, never earlier;
 *  4. a host function that signals a semaphore other work of its device waits for (the
 *     signal comes from a gpuhal thread, which leaves the issue to the worker);
 *  5. host signals racing with device release (dispatches keep the device alive until they
 *     ran; host calls alone do not, so some are aborted): every operation either runs or
 *     fails, none hangs, nothing leaks;
 *  6. a free queued behind an unsignalled wait does not hold up an allocation that depends
 *     on nothing (a CUDA pool may hand it the freed block and make it wait for that free);
 *  7. a GRAPH command buffer of a kernel never launched is recorded while work waits on the
 *     GPU (CUDA's first graph instantiation of a lazily loaded kernel waits for an idle
 *     context, and on an H200 holds a lock every launch and event record then waits for);
 *  8. a hundred GRAPH command buffers are made while work waits on the GPU (CUDA grows its
 *     store of streams and graph executables in steps that wait for every stream of the
 *     context);
 *  9. an executable is loaded while work waits on the GPU: it waits for that work up to
 *     tuning.load_parked_wait_ns, then fails saying why (never hangs).
 *
 * CTest runs it on the memop path and, as test_queue_wake_events, on the event path. Every
 * wait has a timeout; device release runs under a watchdog. */
#include "test_internals.h"

#include "test_queue_util.h"

#define QW_WAIT_S 20

typedef struct qw_fixture_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_kernel_t* inc;
  gpuhal_buffer_t* counter;
  gpuhal_command_buffer_t *stream_cb, *graph_cb; /* atomic_inc(counter), reusable */
} qw_fixture_t;

static void qw_device_close(qw_fixture_t* f) {
  gpuhal_command_buffer_release(f->stream_cb);
  gpuhal_command_buffer_release(f->graph_cb);
  gpuhal_buffer_release(f->counter);
  gpuhal_executable_release(f->exe);
  f->stream_cb = f->graph_cb = NULL;
  f->counter = NULL;
  f->exe = NULL;
  qc_watchdog_arm(30, "gpuhal_device_release");
  gpuhal_device_release(f->device);
  qc_watchdog_disarm();
  f->device = NULL;
}

static void qw_close(qw_fixture_t* f) {
  if (f->device) qw_device_close(f);
  qc_watchdog_arm(30, "gpuhal_driver_release");
  gpuhal_driver_release(f->driver);
  qc_watchdog_disarm();
  memset(f, 0, sizeof(*f));
}

/* A device with `queues` queues, a zeroed device counter and command buffers incrementing
 * it. 0 (and a message) when that is not available. */
static gpuhal_queue_tuning_t qw_tuning; /* of the devices qw_device_open makes */
static int qw_device_open(qw_fixture_t* f, uint32_t queues) {
  gpuhal_device_params_t params;
  gpuhal_status_t st;
  gpuhal_arg_t arg;
  uint32_t zero = 0;
  memset(&params, 0, sizeof(params));
  params.queue_count = queues;
  params.tuning = qw_tuning;
  st = gpuhal_device_create(f->driver, 0, &params, &f->device);
  if (!st) st = qc_load_kernel(f->device, "atomic_inc", &f->exe, &f->inc);
  if (!st) st = gpuhal_buffer_allocate(f->device, GPUHAL_MEMORY_DEVICE, 4, &f->counter);
  if (!st) st = gpuhal_buffer_write(f->counter, 0, &zero, 4);
  arg = gpuhal_arg_buffer(f->counter, 0);
  if (!st)
    st = qc_record_dispatch(f->device, GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE, f->inc, 1, 1, 1,
                            &arg, &f->stream_cb);
  if (!st)
    st = qc_record_dispatch(f->device, GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_REUSABLE, f->inc, 1, 1, 1,
                            &arg, &f->graph_cb);
  if (st) {
    fprintf(stderr, "  fixture: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    return 0;
  }
  return 1;
}

static int qw_open(qw_fixture_t* f, uint32_t queues) {
  gpuhal_status_t st;
  memset(f, 0, sizeof(*f));
  st = gpuhal_driver_create(NULL, &f->driver);
  if (st) {
    fprintf(stderr, "  driver: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    return 0;
  }
  if (!qw_device_open(f, queues)) {
    qw_close(f);
    return 0;
  }
  return 1;
}

static uint32_t qw_counter(qw_fixture_t* f) {
  uint32_t v = UINT32_MAX;
  gpuhal_status_t st = gpuhal_buffer_read(f->counter, 0, &v, 4);
  if (st) {
    fprintf(stderr, "  counter read: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
  }
  return v;
}

static gpuhal_status_t qw_count_fn(void* user) {
  __atomic_add_fetch((int32_t*)user, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/* ---- 1. one signal releases many ---- */
enum { QW_MANY = 240 };

TU_TEST(one_signal_releases_many) {
  qw_fixture_t f;
  gpuhal_semaphore_t *gate = NULL, *done[QW_MANY];
  uint64_t ones[QW_MANY];
  gpuhal_semaphore_list_t all;
  int32_t host_runs = 0;
  uint32_t dispatches = 0;
  int host_calls = 0, i;
  uint64_t one = 1;
  if (!qw_open(&f, 3)) TU_SKIP("no device or test kernels");
  gate = qc_semaphore_new(f.driver);
  for (i = 0; i < QW_MANY; ++i) {
    done[i] = qc_semaphore_new(f.driver);
    ones[i] = 1;
  }
  TU_REQUIRE(gate && done[QW_MANY - 1]);
  for (i = 0; i < QW_MANY; ++i) {
    uint32_t queue = (uint32_t)(i % 3);
    gpuhal_semaphore_list_t wait = gpuhal_semaphore_list_one(&gate, &one);
    gpuhal_semaphore_list_t signal = gpuhal_semaphore_list_one(&done[i], &one);
    if (i % 4 == 2) {
      TU_CHECK_OK(gpuhal_queue_host_call(f.device, queue, wait, signal, qw_count_fn, &host_runs));
      host_calls++;
    } else {
      TU_CHECK_OK(gpuhal_queue_execute(f.device, queue, wait, signal, i % 4 == 0 ? f.graph_cb : f.stream_cb, NULL));
      dispatches++;
    }
  }
  qc_sleep_ms(10);
  TU_CHECK_EQ_INT(qw_counter(&f), 0);
  TU_CHECK_EQ_INT(__atomic_load_n(&host_runs, __ATOMIC_SEQ_CST), 0);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  all.count = QW_MANY;
  all.semaphores = done;
  all.values = ones;
  TU_CHECK_OK(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, all, qt_seconds(QW_WAIT_S)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QW_WAIT_S)));
  TU_CHECK_EQ_INT(qw_counter(&f), dispatches);
  TU_CHECK_EQ_INT(__atomic_load_n(&host_runs, __ATOMIC_SEQ_CST), host_calls);
  for (i = 0; i < QW_MANY; ++i) gpuhal_semaphore_release(done[i]);
  gpuhal_semaphore_release(gate);
  qw_close(&f);
}

/* ---- 2. a long chain submitted backwards ---- */
enum { QW_HOPS = 3000 };

TU_TEST(long_chain_submitted_backwards) {
  qw_fixture_t f;
  gpuhal_semaphore_t *head = NULL, *timeline = NULL;
  uint64_t one = 1;
  int i;
  if (!qw_open(&f, 2)) TU_SKIP("no device or test kernels");
  head = qc_semaphore_new(f.driver);
  timeline = qc_semaphore_new(f.driver);
  TU_REQUIRE(head && timeline);
  for (i = QW_HOPS - 1; i >= 0; --i) {
    uint64_t wait_value = i == 0 ? 1 : (uint64_t)i, signal_value = (uint64_t)i + 1;
    gpuhal_semaphore_t* wait_sem = i == 0 ? head : timeline;
    gpuhal_status_t st =
        gpuhal_queue_execute(f.device, (uint32_t)(i % 2), gpuhal_semaphore_list_one(&wait_sem, &wait_value),
                             gpuhal_semaphore_list_one(&timeline, &signal_value), f.stream_cb, NULL);
    if (st) {
      TU_CHECK_OK(st);
      break;
    }
  }
  qc_sleep_ms(10);
  TU_CHECK_EQ_INT(qc_query(timeline), 0);
  TU_CHECK_OK(gpuhal_semaphore_signal(head, one));
  TU_CHECK_OK(gpuhal_semaphore_wait(timeline, QW_HOPS, qt_seconds(QW_WAIT_S * 3)));
  TU_CHECK_EQ_INT(qc_query(timeline), QW_HOPS);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QW_WAIT_S)));
  TU_CHECK_EQ_INT(qw_counter(&f), QW_HOPS);
  gpuhal_semaphore_release(head);
  gpuhal_semaphore_release(timeline);
  qw_close(&f);
}

/* ---- 3. waits registered in shuffled order ---- */
enum { QW_SHUFFLED = 64, QW_HOST_WAITERS = 8 };

typedef struct qw_value_check_s {
  gpuhal_semaphore_t* s;
  uint64_t value;
  int32_t* early;         /* ran (or returned) before s reached value */
  gpuhal_status_t status; /* host waiters: what the wait returned */
} qw_value_check_t;

static gpuhal_status_t qw_value_check_fn(void* user) {
  qw_value_check_t* c = (qw_value_check_t*)user;
  if (qc_query(c->s) < c->value) __atomic_add_fetch(c->early, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

static void* qw_host_waiter_main(void* p) {
  qw_value_check_t* c = (qw_value_check_t*)p;
  c->status = gpuhal_semaphore_wait(c->s, c->value, qt_seconds(QW_WAIT_S));
  if (!c->status) qw_value_check_fn(c);
  return NULL;
}

TU_TEST(waits_registered_in_shuffled_order) {
  qw_fixture_t f;
  gpuhal_semaphore_t *s = NULL, *done[QW_SHUFFLED];
  uint64_t ones[QW_SHUFFLED], order[QW_SHUFFLED];
  qw_value_check_t checks[QW_SHUFFLED], waiters[QW_HOST_WAITERS];
  pthread_t threads[QW_HOST_WAITERS];
  int started[QW_HOST_WAITERS];
  gpuhal_semaphore_list_t all;
  int32_t early = 0;
  uint64_t v, one = 1;
  uint32_t seed = 12345;
  int i;
  if (!qw_open(&f, 2)) TU_SKIP("no device or test kernels");
  s = qc_semaphore_new(f.driver);
  for (i = 0; i < QW_SHUFFLED; ++i) {
    done[i] = qc_semaphore_new(f.driver);
    ones[i] = 1;
    order[i] = (uint64_t)i + 1;
  }
  TU_REQUIRE(s && done[QW_SHUFFLED - 1]);
  for (i = QW_SHUFFLED - 1; i > 0; --i) { /* Fisher-Yates */
    uint64_t t;
    int j;
    seed = seed * 1103515245u + 12345u;
    j = (int)((seed >> 8) % (uint32_t)(i + 1));
    t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (i = 0; i < QW_SHUFFLED; ++i) {
    checks[i].s = s;
    checks[i].value = order[i];
    checks[i].early = &early;
    TU_CHECK_OK(gpuhal_queue_host_call(f.device, (uint32_t)(i % 2), gpuhal_semaphore_list_one(&s, &checks[i].value),
                                       gpuhal_semaphore_list_one(&done[i], &one), qw_value_check_fn, &checks[i]));
  }
  for (i = 0; i < QW_HOST_WAITERS; ++i) {
    waiters[i].s = s;
    waiters[i].value = order[(i * 7) % QW_SHUFFLED];
    waiters[i].early = &early;
    waiters[i].status = NULL;
    started[i] = pthread_create(&threads[i], NULL, qw_host_waiter_main, &waiters[i]) == 0;
  }
  qc_sleep_ms(10);
  for (v = 1; v <= QW_SHUFFLED; ++v) {
    TU_CHECK_OK(gpuhal_semaphore_signal(s, v));
    if (v % 16 == 0) qc_sleep_ms(1); /* let some run between signals */
  }
  all.count = QW_SHUFFLED;
  all.semaphores = done;
  all.values = ones;
  TU_CHECK_OK(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, all, qt_seconds(QW_WAIT_S)));
  for (i = 0; i < QW_HOST_WAITERS; ++i) {
    if (!started[i]) continue;
    pthread_join(threads[i], NULL);
    TU_CHECK_OK(waiters[i].status);
  }
  TU_CHECK_EQ_INT(__atomic_load_n(&early, __ATOMIC_SEQ_CST), 0);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QW_WAIT_S)));
  for (i = 0; i < QW_SHUFFLED; ++i) gpuhal_semaphore_release(done[i]);
  gpuhal_semaphore_release(s);
  qw_close(&f);
}

/* ---- 4. a host function signals what other work waits for ---- */
typedef struct qw_signal_s {
  gpuhal_semaphore_t* s;
  uint64_t value;
} qw_signal_t;
static gpuhal_status_t qw_signal_fn(void* user) {
  qw_signal_t* sig = (qw_signal_t*)user;
  return gpuhal_semaphore_signal(sig->s, sig->value);
}

TU_TEST(host_function_signals_other_work) {
  qw_fixture_t f;
  gpuhal_semaphore_t *gate = NULL, *t = NULL, *u = NULL;
  qw_signal_t sig;
  int32_t runs = 0;
  uint64_t one = 1;
  if (!qw_open(&f, 3)) TU_SKIP("no device or test kernels");
  gate = qc_semaphore_new(f.driver);
  t = qc_semaphore_new(f.driver);
  u = qc_semaphore_new(f.driver);
  TU_REQUIRE(gate && t && u);
  /* Queued first: a dispatch and a host call behind the gate, on other queues. */
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 1, gpuhal_semaphore_list_one(&gate, &one),
                                   gpuhal_semaphore_list_one(&t, &one), f.stream_cb, NULL));
  TU_CHECK_OK(gpuhal_queue_host_call(f.device, 2, gpuhal_semaphore_list_one(&gate, &one),
                                     gpuhal_semaphore_list_one(&u, &one), qw_count_fn, &runs));
  sig.s = gate;
  sig.value = 1;
  TU_CHECK_OK(gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(),
                                     qw_signal_fn, &sig));
  TU_CHECK_OK(gpuhal_semaphore_wait(t, 1, qt_seconds(QW_WAIT_S)));
  TU_CHECK_OK(gpuhal_semaphore_wait(u, 1, qt_seconds(QW_WAIT_S)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QW_WAIT_S)));
  TU_CHECK_EQ_INT(qw_counter(&f), 1);
  TU_CHECK_EQ_INT(__atomic_load_n(&runs, __ATOMIC_SEQ_CST), 1);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(t);
  gpuhal_semaphore_release(u);
  qw_close(&f);
}

/* ---- 5. host signals racing with device release ---- */
static void qw_sleep_us(int us) {
  struct timespec ts;
  ts.tv_sec = 0;
  ts.tv_nsec = (long)us * 1000;
  nanosleep(&ts, NULL);
}
enum { QW_RACE_ROUNDS = 48, QW_RACE_OPS = 12 };

typedef struct qw_delayed_signal_s {
  gpuhal_semaphore_t* s;
  uint64_t value; /* 0: 1 */
  int delay_us;
  gpuhal_status_t status;
} qw_delayed_signal_t;
static void* qw_delayed_signal_main(void* p) {
  qw_delayed_signal_t* d = (qw_delayed_signal_t*)p;
  qw_sleep_us(d->delay_us);
  d->status = gpuhal_semaphore_signal(d->s, d->value ? d->value : 1);
  return NULL;
}

TU_TEST(signals_race_device_release) {
  qw_fixture_t f;
  int round, bad = 0, ran = 0, aborted = 0;
  uint64_t one = 1;
  if (!qw_open(&f, 2)) TU_SKIP("no device or test kernels");
  qw_device_close(&f); /* each round opens its own */
  for (round = 0; round < QW_RACE_ROUNDS && !bad; ++round) {
    gpuhal_semaphore_t *gate = qc_semaphore_new(f.driver), *done[QW_RACE_OPS];
    qw_delayed_signal_t d;
    pthread_t thread;
    int32_t runs = 0;
    int i, started;
    if (!gate || !qw_device_open(&f, 2)) {
      gpuhal_semaphore_release(gate);
      TU_FAIL_AT(__FILE__, __LINE__, "round %d: cannot open the device", round);
      break;
    }
    for (i = 0; i < QW_RACE_OPS; ++i) {
      gpuhal_semaphore_list_t wait = gpuhal_semaphore_list_one(&gate, &one);
      done[i] = qc_semaphore_new(f.driver);
      if (!done[i]) continue;
      /* Odd rounds queue host calls only: nothing of theirs keeps the device alive, so the
       * release aborts what the signal has not released yet. */
      if (i % 3 == 2 || round % 2)
        TU_CHECK_OK(gpuhal_queue_host_call(f.device, (uint32_t)(i % 2), wait, gpuhal_semaphore_list_one(&done[i], &one),
                                           qw_count_fn, &runs));
      else
        TU_CHECK_OK(gpuhal_queue_execute(f.device, (uint32_t)(i % 2), wait, gpuhal_semaphore_list_one(&done[i], &one),
                                         i % 3 ? f.graph_cb : f.stream_cb, NULL));
    }
    d.s = gate;
    d.delay_us = (round * 97) % 300; /* the signal comes before, during or after the release */
    d.status = NULL;
    started = pthread_create(&thread, NULL, qw_delayed_signal_main, &d) == 0;
    qw_sleep_us((round * 61) % 300);
    qw_device_close(&f);
    if (started) pthread_join(thread, NULL);
    TU_CHECK_OK(d.status);
    /* Each op either ran (its value reached) or was aborted by the release (failed). */
    for (i = 0; i < QW_RACE_OPS; ++i) {
      gpuhal_status_t st;
      if (!done[i]) continue;
      st = gpuhal_semaphore_wait(done[i], 1, qt_seconds(QW_WAIT_S));
      if (!st) {
        ran++;
      } else if (gpuhal_status_code(st) == GPUHAL_STATUS_DEADLINE_EXCEEDED) {
        TU_FAIL_AT(__FILE__, __LINE__, "round %d op %d neither ran nor failed: %s", round, i,
                   gpuhal_status_message(st));
        bad = 1;
      } else {
        aborted++;
      }
      gpuhal_status_free(st);
      gpuhal_semaphore_release(done[i]);
    }
    gpuhal_semaphore_release(gate);
  }
  fprintf(stderr, "  %d ops ran, %d were aborted by the release\n", ran, aborted);
  qw_close(&f);
}

/* ---- 6. memory freed behind a wait does not hold up an unrelated allocation ----
 * A dealloca queued behind an unsignalled gate, then an allocation of the same size on
 * another queue, which depends on nothing. Were the free enqueued behind a GPU wait for the
 * gate, CUDA's pool could hand its block to the new allocation and make that stream wait for
 * the free (CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES; softcuda does the same): the
 * allocation would wait for the gate, which the application signals only after it. A
 * dealloca therefore never waits on the GPU for a value not submitted. (gpuhal's own pool
 * has that attribute off; the default pool, used when creating one fails, keeps it.) */
TU_TEST(free_behind_a_wait_does_not_hold_up_allocations) {
  qw_fixture_t f;
  gpuhal_semaphore_t *gate = NULL, *made = NULL, *freed = NULL, *second = NULL;
  gpuhal_buffer_t *first_buffer = NULL, *second_buffer = NULL;
  uint64_t one = 1;
  gpuhal_semaphore_t* both[2];
  uint64_t both_values[2] = {1, 1};
  gpuhal_semaphore_list_t wait_both;
  if (!qw_open(&f, 2)) TU_SKIP("no device or test kernels");
  gate = qc_semaphore_new(f.driver);
  made = qc_semaphore_new(f.driver);
  freed = qc_semaphore_new(f.driver);
  second = qc_semaphore_new(f.driver);
  TU_REQUIRE(gate && made && freed && second);
  TU_CHECK_OK(gpuhal_queue_alloca(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&made, &one),
                                  1u << 20, &first_buffer));
  TU_CHECK_OK(gpuhal_semaphore_wait(made, 1, qt_seconds(QW_WAIT_S)));
  both[0] = made;
  both[1] = gate;
  wait_both.count = 2;
  wait_both.semaphores = both;
  wait_both.values = both_values;
  TU_CHECK_OK(gpuhal_queue_dealloca(f.device, 1, wait_both, gpuhal_semaphore_list_one(&freed, &one), first_buffer));
  qw_sleep_us(2000); /* the free is issued (behind the gate) by now */
  TU_CHECK_OK(gpuhal_queue_alloca(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&second, &one),
                                  1u << 20, &second_buffer));
  TU_CHECK_OK(gpuhal_semaphore_wait(second, 1, qt_seconds(5)));
  TU_CHECK_EQ_INT(qc_query(freed), 0);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(freed, 1, qt_seconds(QW_WAIT_S)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QW_WAIT_S)));
  gpuhal_buffer_release(first_buffer);
  gpuhal_buffer_release(second_buffer);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(made);
  gpuhal_semaphore_release(freed);
  gpuhal_semaphore_release(second);
  qw_close(&f);
}

/* ---- 7. recording a GRAPH command buffer while work waits on the GPU ----
 * A dispatch parked behind an unsignalled gate (memop path); meanwhile a GRAPH command
 * buffer of a kernel that was never launched is recorded. CUDA's first graph instantiation
 * of a lazily loaded kernel waits for the context to go idle, which the parked work
 * prevents until the application signals the gate, after recording: end() must return. */
typedef struct qw_record_s {
  gpuhal_device_t* device;
  gpuhal_kernel_t* kernel;
  gpuhal_buffer_t* counter;
  gpuhal_command_buffer_t* cb;
  gpuhal_status_t status;
} qw_record_t;
static void qw_record_fn(void* p) {
  qw_record_t* r = (qw_record_t*)p;
  gpuhal_arg_t args[3];
  args[0] = gpuhal_arg_buffer(r->counter, 0);
  args[1] = gpuhal_arg_u32(7);
  args[2] = gpuhal_arg_u32(1);
  r->status = qc_record_dispatch(r->device, GPUHAL_COMMAND_BUFFER_GRAPH, r->kernel, 1, 1, 3, args, &r->cb);
}

TU_TEST(graph_recorded_while_work_is_parked) {
  qw_fixture_t f;
  gpuhal_semaphore_t *gate = NULL, *done = NULL;
  gpuhal_executable_t* fresh_exe = NULL;
  qw_record_t rec;
  qc_async_t async;
  uint64_t one = 1, two = 2;
  if (!qw_open(&f, 2)) TU_SKIP("no device or test kernels");
  memset(&rec, 0, sizeof(rec));
  gate = qc_semaphore_new(f.driver);
  done = qc_semaphore_new(f.driver);
  TU_REQUIRE(gate && done);
  /* fill_u32(counter, 7, 1): a kernel this process has not used yet. */
  TU_CHECK_OK(qc_load_kernel(f.device, "fill_u32", &fresh_exe, &rec.kernel));
  TU_REQUIRE(rec.kernel != NULL);
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                   gpuhal_semaphore_list_one(&done, &one), f.stream_cb, NULL));
  qw_sleep_us(20000); /* issued (parked on the memop path) by now */
  rec.device = f.device;
  rec.counter = f.counter;
  if (qc_async_start(&async, qw_record_fn, &rec)) {
    if (!qc_async_wait(&async, 5000))
      TU_FAIL_AT(__FILE__, __LINE__,
                 "recording a GRAPH command buffer did not return within 5 s while work was parked");
    TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
    qc_async_join(&async, "recording a GRAPH command buffer after the gate opened");
  } else {
    TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  }
  TU_CHECK_OK(rec.status);
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, qt_seconds(QW_WAIT_S)));
  if (rec.cb) {
    TU_CHECK_OK(gpuhal_queue_execute(f.device, 1, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&done, &two),
                                     rec.cb, NULL));
    TU_CHECK_OK(gpuhal_semaphore_wait(done, 2, qt_seconds(QW_WAIT_S)));
    TU_CHECK_EQ_INT(qw_counter(&f), 7);
  }
  gpuhal_command_buffer_release(rec.cb);
  gpuhal_executable_release(fresh_exe);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done);
  qw_close(&f);
}

/* ---- 8. many graph executables made while work waits on the GPU ----
 * CUDA's per-context store of streams and graph executables grows in steps, and a step
 * waits for every stream of the context, a parked one too (tools/probe/live_probe.c: the
 * 33rd live one in a fresh context on an H200; softcuda models it). With a dispatch parked
 * behind a gate that this thread opens afterwards, QW_LIVE reusable GRAPH command buffers
 * are made and each is queued behind the same gate: all of it must return, then run once
 * the gate opens. (A second device is not made there: it loads gpuhal's kernels, which
 * waits for parked work, as documented.) */
enum { QW_LIVE = 100 };
typedef struct qw_make_s {
  qw_fixture_t* f;
  gpuhal_semaphore_t *gate, *many;
  gpuhal_command_buffer_t* cbs[QW_LIVE];
  gpuhal_status_t status;
} qw_make_t;
static void qw_make_fn(void* p) {
  qw_make_t* m = (qw_make_t*)p;
  gpuhal_arg_t arg = gpuhal_arg_buffer(m->f->counter, 0);
  uint64_t one = 1;
  int i;
  for (i = 0; i < QW_LIVE && !m->status; ++i) {
    uint64_t v = (uint64_t)i + 1;
    m->status = qc_record_dispatch(m->f->device, GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_REUSABLE,
                                   m->f->inc, 1, 1, 1, &arg, &m->cbs[i]);
    if (!m->status)
      m->status = gpuhal_queue_execute(m->f->device, 1, gpuhal_semaphore_list_one(&m->gate, &one),
                                       gpuhal_semaphore_list_one(&m->many, &v), m->cbs[i], NULL);
  }
}

TU_TEST(many_graphs_made_while_work_is_parked) {
  qw_fixture_t f;
  qw_make_t make;
  qc_async_t async;
  gpuhal_semaphore_t* done = NULL;
  uint64_t one = 1;
  int i, made = 0;
  if (!qw_open(&f, 2)) TU_SKIP("no device or test kernels");
  memset(&make, 0, sizeof(make));
  make.f = &f;
  make.gate = qc_semaphore_new(f.driver);
  make.many = qc_semaphore_new(f.driver);
  done = qc_semaphore_new(f.driver);
  TU_REQUIRE(make.gate && make.many && done);
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&make.gate, &one),
                                   gpuhal_semaphore_list_one(&done, &one), f.stream_cb, NULL));
  qw_sleep_us(20000); /* issued (parked on the memop path) by now */
  if (qc_async_start(&async, qw_make_fn, &make)) {
    made = qc_async_wait(&async, 10000);
    if (!made)
      TU_FAIL_AT(__FILE__, __LINE__, "making %d GRAPH command buffers did not return within 10 s while work was parked",
                 QW_LIVE);
    TU_CHECK_OK(gpuhal_semaphore_signal(make.gate, 1));
    qc_async_join(&async, "making command buffers after the gate opened");
  } else {
    TU_CHECK_OK(gpuhal_semaphore_signal(make.gate, 1));
  }
  TU_CHECK_OK(make.status);
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, qt_seconds(QW_WAIT_S)));
  if (made && !make.status) {
    TU_CHECK_OK(gpuhal_semaphore_wait(make.many, QW_LIVE, qt_seconds(QW_WAIT_S)));
    TU_CHECK_EQ_INT(qw_counter(&f), 1 + QW_LIVE);
  }
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QW_WAIT_S)));
  for (i = 0; i < QW_LIVE; ++i) gpuhal_command_buffer_release(make.cbs[i]);
  gpuhal_semaphore_release(make.gate);
  gpuhal_semaphore_release(make.many);
  gpuhal_semaphore_release(done);
  qw_close(&f);
}

/* ---- 9. loading an executable while work waits on the GPU ----
 * CUDA loads code only into an idle context: a load made while a dispatch is parked behind
 * a gate would wait for it, forever when the loading thread is the one to open the gate. The
 * load waits for parked work (with nothing new parking meanwhile) up to
 * tuning.load_parked_wait_ns, then fails with FAILED_PRECONDITION saying why. Here: at 100 ms
 * with the gate closed it fails (and does not hang); with another thread opening the gate
 * after 50 ms it succeeds; once nothing waits it loads at once. On the event path nothing
 * parks and every load succeeds at once. */
typedef struct qw_load_s {
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_kernel_t* kernel;
  gpuhal_status_t status;
} qw_load_t;
static void qw_load_fn(void* p) {
  qw_load_t* l = (qw_load_t*)p;
  l->status = qc_load_kernel(l->device, "fill_u32", &l->exe, &l->kernel);
}
static gpuhal_status_t qw_load_within(gpuhal_device_t* device, int ms, gpuhal_executable_t** exe) {
  qw_load_t load;
  qc_async_t async;
  memset(&load, 0, sizeof(load));
  load.device = device;
  if (!qc_async_start(&async, qw_load_fn, &load)) return gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "no thread");
  if (!qc_async_wait(&async, ms))
    TU_FAIL_AT(__FILE__, __LINE__, "loading an executable did not return within %d ms", ms);
  qc_async_join(&async, "loading an executable");
  *exe = load.exe;
  return load.status;
}

TU_TEST(executable_loaded_while_work_is_parked) {
  qw_fixture_t f;
  gpuhal_semaphore_t *gate = NULL, *done = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_status_t st;
  qw_delayed_signal_t d;
  pthread_t thread;
  uint64_t one = 1, two = 2;
  int parks, started;
  memset(&qw_tuning, 0, sizeof(qw_tuning));
  qw_tuning.load_parked_wait_ns = 100000000; /* 100 ms */
  if (!qw_open(&f, 2)) {
    memset(&qw_tuning, 0, sizeof(qw_tuning));
    TU_SKIP("no device or test kernels");
  }
  memset(&qw_tuning, 0, sizeof(qw_tuning));
  parks = gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS);
  gate = qc_semaphore_new(f.driver);
  done = qc_semaphore_new(f.driver);
  TU_REQUIRE(gate && done);
  /* 1. The gate stays closed: the load fails after ~100 ms (memop path). */
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                   gpuhal_semaphore_list_one(&done, &one), f.stream_cb, NULL));
  qw_sleep_us(20000); /* parked by now */
  st = qw_load_within(f.device, 10000, &exe);
  if (parks) {
    TU_CHECK(st != NULL && gpuhal_status_code(st) == GPUHAL_STATUS_FAILED_PRECONDITION);
    if (st) TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "idle context");
    TU_CHECK(exe == NULL);
  } else {
    TU_CHECK_OK(st);
    st = NULL;
  }
  gpuhal_status_free(st);
  gpuhal_executable_release(exe);
  exe = NULL;
  /* 2. Another thread opens the gate after 50 ms: the load waits for the parked work, then
   * succeeds (the gate is the second value now; the first is opened here). */
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, qt_seconds(QW_WAIT_S)));
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 1, gpuhal_semaphore_list_one(&gate, &two),
                                   gpuhal_semaphore_list_one(&done, &two), f.stream_cb, NULL));
  qw_sleep_us(20000);
  memset(&d, 0, sizeof(d));
  d.s = gate;
  d.value = 2;
  d.delay_us = 50000;
  started = pthread_create(&thread, NULL, qw_delayed_signal_main, &d) == 0;
  TU_REQUIRE(started);
  TU_CHECK_OK(qw_load_within(f.device, 10000, &exe));
  pthread_join(thread, NULL);
  TU_CHECK_OK(d.status);
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 2, qt_seconds(QW_WAIT_S)));
  gpuhal_executable_release(exe);
  exe = NULL;
  /* 3. Nothing waits: at once. */
  TU_CHECK_OK(qw_load_within(f.device, 10000, &exe));
  gpuhal_executable_release(exe);
  TU_CHECK_EQ_INT(qw_counter(&f), 2);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done);
  qw_close(&f);
}

/* The same from the disk cache: a load whose file is good, made while work is parked, fails
 * once after load_parked_wait_ns. The file is not counted as rejected, and nothing is
 * compiled in its place (which waited for the parked work a second time). */
TU_TEST(executable_from_disk_while_work_is_parked) {
  qw_fixture_t f;
  gpuhal_device_t* cached = NULL;
  gpuhal_device_params_t params;
  gpuhal_semaphore_t *gate = NULL, *done = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_module_cache_stats_t before, after;
  gpuhal_status_t st;
  char dir[256];
  uint64_t one = 1;
  int64_t t0, took;
  if (!qw_open(&f, 1)) TU_SKIP("no device or test kernels");
  if (!gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS)) {
    qw_close(&f);
    TU_SKIP("nothing parks on the event path");
  }
  snprintf(dir, sizeof(dir), "%s/gpuhal_qw_XXXXXX",
           getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp");
  TU_REQUIRE(mkdtemp(dir) != NULL);
  memset(&params, 0, sizeof(params));
  params.module_cache_dir = dir;
  params.tuning.load_parked_wait_ns = 100000000; /* 100 ms */
  TU_REQUIRE_OK(gpuhal_device_create(f.driver, 0, &params, &cached));
  /* The file: compiled and stored, then out of memory (trimmed) so the next load reads it. */
  TU_CHECK_OK(qw_load_within(cached, 10000, &exe));
  gpuhal_executable_release(exe);
  exe = NULL;
  TU_CHECK_OK(gpuhal_device_module_cache_trim(cached));
  gate = qc_semaphore_new(f.driver);
  done = qc_semaphore_new(f.driver);
  TU_REQUIRE(gate && done);
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                   gpuhal_semaphore_list_one(&done, &one), f.stream_cb, NULL));
  qw_sleep_us(20000); /* parked by now */
  TU_CHECK_OK(gpuhal_device_module_cache_stats(cached, &before));
  t0 = gpuhal_now_ns();
  st = qw_load_within(cached, 10000, &exe);
  took = gpuhal_now_ns() - t0;
  TU_CHECK(st != NULL && gpuhal_status_code(st) == GPUHAL_STATUS_FAILED_PRECONDITION);
  gpuhal_status_free(st);
  TU_CHECK(exe == NULL);
  TU_CHECK_OK(gpuhal_device_module_cache_stats(cached, &after));
  TU_CHECK_EQ_INT(after.disk_rejects, before.disk_rejects);
  TU_CHECK_EQ_INT(after.compiles, before.compiles);
  TU_CHECK(took < 180000000ll); /* one wait of 100 ms, not two */
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, qt_seconds(QW_WAIT_S)));
  /* The gate open: the same file loads. */
  TU_CHECK_OK(qw_load_within(cached, 10000, &exe));
  TU_CHECK_OK(gpuhal_device_module_cache_stats(cached, &after));
  TU_CHECK_EQ_INT(after.disk_hits, before.disk_hits + 1);
  gpuhal_executable_release(exe);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done);
  gpuhal_device_release(cached);
  qw_close(&f);
  {
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", dir);
  }
}

TU_MAIN(TU_CASE(one_signal_releases_many), TU_CASE(long_chain_submitted_backwards),
        TU_CASE(waits_registered_in_shuffled_order), TU_CASE(host_function_signals_other_work),
        TU_CASE(signals_race_device_release), TU_CASE(free_behind_a_wait_does_not_hold_up_allocations),
        TU_CASE(graph_recorded_while_work_is_parked), TU_CASE(many_graphs_made_while_work_is_parked),
        TU_CASE(executable_loaded_while_work_is_parked), TU_CASE(executable_from_disk_while_work_is_parked))
