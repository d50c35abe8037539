/* Held work (tuning.queue_entries_max): ready work beyond a queue's bound waits on its
 * lane's `held` list and goes in order as the queue's earlier work is seen complete. Each
 * case runs with a small bound (1 to 8) so that held work is the rule, through the public
 * API only:
 *
 *  1. other queues and a second device wait on held work's values, their waits submitted
 *     before the signals, in a random order: every value is reached exactly;
 *  2. a held operation whose wait or signal semaphore fails while it is held fails its
 *     signals with the cause, and holds up nothing queued behind it; one whose wait fails
 *     fails at once, not once room comes (a host waiter on its signal learns it then too),
 *     and nothing of its queue runs for it;
 *  3. the pending report calls held work HELD (not blocked, no cycle); wait_idle times out
 *     while work is held and returns once it ran;
 *  4. zero-timeout polls (gpuhal_semaphore_wait, gpuhal_semaphores_wait ANY and ALL) on held
 *     values see progress and end;
 *  5. host calls among held work whose functions submit more work, poll, and release
 *     command buffers and semaphores;
 *  6. allocas, deallocas and command buffers of more commands than the bound (STREAM and
 *     GRAPH) among held work keep the queue's order;
 *  7. device, semaphore and driver release in several orders while work is held, and a
 *     release while another thread still submits;
 *  8. a device lost while work is held fails all of it with the loss cause;
 *  9. tracing on while work is held;
 * 10. thousands of operations with a bound of 1 to 8 finish in reasonable time (printed).
 *
 * CTest runs it on the memop path and on the event path (tests/cmake/queue_core.cmake). */
#include "test_internals.h"

#include "test_queue_util.h"

#define QB_WAIT_S 10
#define QB_CAUSE "qbound distinctive cause 5113"

static uint64_t qb_one = 1;

/* `bound`: tuning.queue_entries_max; `two`: also open ordinal 1 (skipped when absent);
 * `trace_path`: options.trace_path (NULL: off). */
static int qb_open_ex(qc_fixture_t* f, uint32_t queues, int32_t bound, int two, const char* trace_path) {
  return qc_fixture_open_with(f, queues, bound, QC_SPIN_FLAG | QC_ATOMIC_INC | QC_FAULT, two, trace_path);
}

static int qb_open(qc_fixture_t* f, uint32_t queues, int32_t bound) { return qb_open_ex(f, queues, bound, 0, NULL); }

static gpuhal_semaphore_t* qb_semaphore(qc_fixture_t* f) { return qc_semaphore_new(f->driver); }

/* A blocker (qc_blocker_start) on `queue` with a `done` of its own. */
static int qb_blocker_start(qc_fixture_t* f, qc_blocker_t* b, uint32_t queue) {
  return qc_blocker_start(f, b, queue, qb_semaphore(f));
}

static void qb_blocker_finish(qc_blocker_t* b) {
  qc_blocker_let_go(b);
  if (b->cb) TU_CHECK_OK(gpuhal_semaphore_wait(b->done, 1, qt_seconds(30)));
  gpuhal_command_buffer_release(b->cb);
  gpuhal_buffer_release(b->words);
  gpuhal_semaphore_release(b->done);
  memset(b, 0, sizeof(*b));
}

/* A barrier on `queue` waiting for `ws` >= `wv` (NULL: nothing) and signalling `ss` = `sv`. */
static gpuhal_status_t qb_barrier(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_t* ws, uint64_t wv,
                                  gpuhal_semaphore_t* ss, uint64_t sv) {
  gpuhal_semaphore_list_t wait = ws ? gpuhal_semaphore_list_one(&ws, &wv) : gpuhal_semaphore_list_empty();
  gpuhal_semaphore_list_t signal = ss ? gpuhal_semaphore_list_one(&ss, &sv) : gpuhal_semaphore_list_empty();
  return gpuhal_queue_execute(device, queue, wait, signal, NULL, NULL);
}

static uint32_t qb_read_u32(gpuhal_buffer_t* b) {
  uint32_t v = 0;
  TU_CHECK_OK(gpuhal_buffer_read(b, 0, &v, 4));
  return v;
}

static gpuhal_buffer_t* qb_counter(qc_fixture_t* f) {
  gpuhal_buffer_t* b = NULL;
  uint32_t zero = 0;
  TU_CHECK_OK(gpuhal_buffer_allocate(f->device, GPUHAL_MEMORY_DEVICE, 4, &b));
  if (b) TU_CHECK_OK(gpuhal_buffer_write(b, 0, &zero, 4));
  return b;
}

/* The failure of `s` (its status message contains `needle`). */
static void qb_check_failed_with(gpuhal_semaphore_t* s, uint64_t value, const char* needle) {
  gpuhal_status_t st = gpuhal_semaphore_wait(s, value, qt_seconds(QB_WAIT_S));
  TU_CHECK(st != NULL);
  if (st) {
    TU_CHECK(gpuhal_status_code(st) != GPUHAL_STATUS_DEADLINE_EXCEEDED);
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), needle);
  }
  gpuhal_status_free(st);
}

static gpuhal_semaphore_list_t qb_list(gpuhal_semaphore_t* const* sems, const uint64_t* values, uint32_t count) {
  gpuhal_semaphore_list_t list;
  list.count = count;
  list.semaphores = sems;
  list.values = values;
  return list;
}

static unsigned qb_rand(unsigned* seed) {
  *seed = *seed * 1103515245u + 12345u;
  return (*seed >> 16) & 0x7fff;
}

/* ---- 1. other queues and another device wait on held work's values ---- */

#define QB_CHAIN 48

static void qb_cross_waits_case(int32_t bound, unsigned seed) {
  qc_fixture_t f;
  qc_blocker_t blocker;
  gpuhal_semaphore_t *t = NULL, *u[3] = {NULL, NULL, NULL};
  int order[3 * QB_CHAIN], i, n = 0, failures = 0;
  if (!qb_open_ex(&f, 3, bound, 1, NULL)) TU_SKIP("no device or test kernels");
  t = qb_semaphore(&f);
  for (i = 0; i < 3; ++i) u[i] = qb_semaphore(&f);
  TU_REQUIRE(t && u[0] && u[1] && u[2]);
  TU_REQUIRE(qb_blocker_start(&f, &blocker, 0));
  /* Waits first, in a random order across queue 1, queue 2 and the second device: each
   * waiter k of a queue waits for t >= k and signals its own timeline k. */
  for (i = 0; i < QB_CHAIN; ++i) {
    order[n++] = 1000 + i;
    order[n++] = 2000 + i;
    if (f.device2) order[n++] = 3000 + i;
  }
  for (i = n - 1; i > 0; --i) { /* shuffle, keeping each waiter's own values in order */
    int j = (int)(qb_rand(&seed) % (unsigned)(i + 1)), tmp = order[i];
    order[i] = order[j];
    order[j] = tmp;
  }
  {
    int next[3] = {0, 0, 0};
    for (i = 0; i < n; ++i) {
      int who = order[i] / 1000 - 1;
      uint64_t k = (uint64_t)++next[who];
      gpuhal_device_t* d = who == 2 ? f.device2 : f.device;
      gpuhal_status_t st = qb_barrier(d, who == 2 ? 0 : (uint32_t)who + 1, t, k, u[who], k);
      failures += st != NULL;
      gpuhal_status_free(st);
    }
  }
  /* Then the signals, all held behind the kernel on queue 0. */
  for (i = 1; i <= QB_CHAIN; ++i) {
    gpuhal_status_t st = qb_barrier(f.device, 0, NULL, 0, t, (uint64_t)i);
    failures += st != NULL;
    gpuhal_status_free(st);
  }
  TU_CHECK_EQ_INT(failures, 0);
  qc_sleep_ms(20);
  TU_CHECK_EQ_INT(qc_query(t), 0);
  TU_CHECK_EQ_INT(qc_query(u[0]), 0);
  qb_blocker_finish(&blocker);
  TU_CHECK_OK(gpuhal_semaphore_wait(t, QB_CHAIN, qt_seconds(QB_WAIT_S)));
  TU_CHECK_OK(gpuhal_semaphore_wait(u[0], QB_CHAIN, qt_seconds(QB_WAIT_S)));
  TU_CHECK_OK(gpuhal_semaphore_wait(u[1], QB_CHAIN, qt_seconds(QB_WAIT_S)));
  if (f.device2) TU_CHECK_OK(gpuhal_semaphore_wait(u[2], QB_CHAIN, qt_seconds(QB_WAIT_S)));
  TU_CHECK_EQ_INT(qc_query(t), QB_CHAIN);
  TU_CHECK_EQ_INT(qc_query(u[0]), QB_CHAIN);
  TU_CHECK_EQ_INT(qc_query(u[1]), QB_CHAIN);
  if (f.device2) TU_CHECK_EQ_INT(qc_query(u[2]), QB_CHAIN);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QB_WAIT_S)));
  if (f.device2) TU_CHECK_OK(gpuhal_device_wait_idle(f.device2, qt_seconds(QB_WAIT_S)));
  gpuhal_semaphore_release(t);
  for (i = 0; i < 3; ++i) gpuhal_semaphore_release(u[i]);
  qc_fixture_close(&f);
}

TU_TEST(other_queues_and_devices_wait_on_held_values) {
  qb_cross_waits_case(1, 7u);
  qb_cross_waits_case(2, 11u);
  qb_cross_waits_case(5, 13u);
  qb_cross_waits_case(8, 17u);
}

/* ---- 2. failing a held operation's semaphores ---- */

/* Queue 0 holds work behind a kernel; queue 1 runs a second kernel that signals `s` = 1.
 * Held `a` on queue 0 waits for s >= 1 (submitted on queue 1) and signals r = 1; `b` after
 * it signals t = 1. `fail_wait`: s fails while `a` is held; else r fails. */
static void qb_held_fails_case(int32_t bound, int fail_wait) {
  qc_fixture_t f;
  qc_blocker_t b0, b1;
  gpuhal_semaphore_t *r = NULL, *t = NULL;
  if (!qb_open(&f, 2, bound)) TU_SKIP("no device or test kernels");
  r = qb_semaphore(&f);
  t = qb_semaphore(&f);
  TU_REQUIRE(r && t);
  TU_REQUIRE(qb_blocker_start(&f, &b0, 0));
  TU_REQUIRE(qb_blocker_start(&f, &b1, 1));
  TU_CHECK_OK(qb_barrier(f.device, 0, b1.done, 1, r, 1));
  TU_CHECK_OK(qb_barrier(f.device, 0, NULL, 0, t, 1));
  qc_sleep_ms(10);
  TU_CHECK_EQ_INT(qc_query(r), 0);
  if (fail_wait)
    gpuhal_semaphore_fail(b1.done, gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, QB_CAUSE));
  else
    gpuhal_semaphore_fail(r, gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, QB_CAUSE));
  qc_blocker_let_go(&b0);
  if (!fail_wait) qc_blocker_let_go(&b1); /* `a` waits for it; `b` behind `a` on the stream */
  /* The operation behind it goes; the failed one's signal carries the cause. */
  TU_CHECK_OK(gpuhal_semaphore_wait(t, 1, qt_seconds(QB_WAIT_S)));
  qb_check_failed_with(r, 1, QB_CAUSE);
  qc_blocker_let_go(&b1);
  TU_CHECK_OK(gpuhal_semaphore_wait(b0.done, 1, qt_seconds(QB_WAIT_S)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QB_WAIT_S)));
  gpuhal_command_buffer_release(b1.cb);
  gpuhal_buffer_release(b1.words);
  gpuhal_semaphore_release(b1.done);
  qb_blocker_finish(&b0);
  gpuhal_semaphore_release(r);
  gpuhal_semaphore_release(t);
  qc_fixture_close(&f);
}

TU_TEST(held_work_whose_wait_fails_fails_its_signals) {
  qb_held_fails_case(1, 1);
  qb_held_fails_case(5, 1);
}

TU_TEST(held_work_whose_signal_fails_holds_up_nothing) {
  qb_held_fails_case(1, 0);
  qb_held_fails_case(8, 0);
}

/* Queue 0 is full: a kernel that runs until let go, and filler barriers signalling t = 1..3
 * (held behind it, but for what fits the bound). `x` on queue 0 waits for f >= 1 and signals
 * xs = 1; `y` after it signals t = 4. f fails: xs fails with f's cause within a second, long
 * before room comes (the kernel runs until the test lets it go), and so does a host wait on
 * xs that began before; nothing of queue 0 ran meanwhile, and all the rest runs, in order,
 * once room comes. `f_in_flight`: f is the value of a kernel in flight on queue 1 (x is ready,
 * held on both paths); else f is for the host to signal (on the memop path x goes to the GPU
 * for it, and is held; on the event path it waits on the host, not held). */
typedef struct qb_held_waiter_s {
  gpuhal_semaphore_t* semaphore;
  gpuhal_status_t result;
} qb_held_waiter_t;

static void qb_held_waiter_fn(void* arg) {
  qb_held_waiter_t* w = (qb_held_waiter_t*)arg;
  w->result = gpuhal_semaphore_wait(w->semaphore, 1, qt_seconds(QB_WAIT_S));
}

static void qb_held_wait_fails_case(int32_t bound, int f_in_flight) {
  qc_fixture_t f;
  qc_blocker_t b0, b1;
  qc_async_t waiter;
  qb_held_waiter_t w;
  gpuhal_semaphore_t *t = NULL, *fs = NULL, *xs = NULL;
  gpuhal_status_t st;
  uint64_t i;
  int prompt;
  memset(&b1, 0, sizeof(b1));
  if (!qb_open(&f, 2, bound)) TU_SKIP("no device or test kernels");
  t = qb_semaphore(&f);
  xs = qb_semaphore(&f);
  fs = qb_semaphore(&f);
  TU_REQUIRE(t && xs && fs);
  TU_REQUIRE(qb_blocker_start(&f, &b0, 0));
  if (f_in_flight) TU_REQUIRE(qc_blocker_start(&f, &b1, 1, fs));
  for (i = 1; i <= 3; ++i) TU_CHECK_OK(qb_barrier(f.device, 0, NULL, 0, t, i));
  TU_CHECK_OK(qb_barrier(f.device, 0, fs, 1, xs, 1));
  TU_CHECK_OK(qb_barrier(f.device, 0, NULL, 0, t, 4));
  memset(&w, 0, sizeof(w));
  w.semaphore = xs;
  TU_REQUIRE(qc_async_start(&waiter, qb_held_waiter_fn, &w));
  qc_sleep_ms(20);
  TU_CHECK_EQ_INT(qc_query(t), 0);
  TU_CHECK_EQ_INT(qc_query(xs), 0);
  gpuhal_semaphore_fail(fs, gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, QB_CAUSE));
  /* At once, not once the kernel is let go (it runs for a minute unless it is): 5 s leaves
   * room for a loaded machine (TSan, valgrind). */
  st = gpuhal_semaphore_wait(xs, 1, gpuhal_timeout_relative_ns(5000000000ll));
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_DATA_LOSS);
  if (st) TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), QB_CAUSE);
  gpuhal_status_free(st);
  prompt = qc_async_wait(&waiter, 5000);
  TU_CHECK(prompt);                /* the host wait that began before ended with it */
  TU_CHECK_EQ_INT(qc_query(t), 0); /* nothing of the queue ran for it */
  qb_blocker_finish(&b0);
  if (f_in_flight) {
    qc_blocker_let_go(&b1);
    qb_check_failed_with(fs, 1, QB_CAUSE);
  }
  qc_async_join(&waiter, "a host wait on a held operation's signal");
  TU_CHECK_EQ_INT(gpuhal_status_code(w.result), GPUHAL_STATUS_DATA_LOSS);
  if (w.result) TU_CHECK_STR_CONTAINS(gpuhal_status_message(w.result), QB_CAUSE);
  gpuhal_status_free(w.result);
  TU_CHECK_OK(gpuhal_semaphore_wait(t, 4, qt_seconds(QB_WAIT_S)));
  TU_CHECK_EQ_INT(qc_query(t), 4);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QB_WAIT_S)));
  gpuhal_command_buffer_release(b1.cb);
  gpuhal_buffer_release(b1.words);
  gpuhal_semaphore_release(t);
  gpuhal_semaphore_release(xs);
  gpuhal_semaphore_release(fs);
  qc_fixture_close(&f);
}

TU_TEST(held_work_whose_wait_fails_fails_at_once) {
  qb_held_wait_fails_case(1, 1);
  qb_held_wait_fails_case(3, 1);
  qb_held_wait_fails_case(8, 1);
  qb_held_wait_fails_case(1, 0);
  qb_held_wait_fails_case(3, 0);
  qb_held_wait_fails_case(8, 0);
}

/* ---- 3. report and idle waits ---- */

TU_TEST(held_work_is_reported_held_and_waited_for) {
  qc_fixture_t f;
  qc_blocker_t blocker;
  gpuhal_semaphore_t* t = NULL;
  static char text[1 << 16];
  size_t length = 0;
  gpuhal_status_t st;
  uint64_t i;
  if (!qb_open(&f, 1, 2)) TU_SKIP("no device or test kernels");
  t = qb_semaphore(&f);
  TU_REQUIRE(t);
  TU_REQUIRE(qb_blocker_start(&f, &blocker, 0));
  for (i = 1; i <= 4; ++i) TU_CHECK_OK(qb_barrier(f.device, 0, NULL, 0, t, i));
  qc_sleep_ms(10);
  st = gpuhal_device_wait_idle(f.device, gpuhal_timeout_relative_ns(20000000));
  TU_CHECK_EQ_INT(qc_code(st), GPUHAL_STATUS_DEADLINE_EXCEEDED);
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, sizeof(text), &length));
  TU_CHECK_STR_CONTAINS(text, "ready, waiting for room on its queue's stream");
  TU_CHECK_STR_CONTAINS(text, "no cycle among the operations waiting\n");
  TU_CHECK(strstr(text, "nothing queued signals") == NULL);
  if (strstr(text, "nothing queued signals")) fprintf(stderr, "%s\n", text);
  qb_blocker_finish(&blocker);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QB_WAIT_S)));
  TU_CHECK_EQ_INT(qc_query(t), 4);
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, sizeof(text), &length));
  TU_CHECK_STR_CONTAINS(text, "gpuhal pending report: 0 operations not done\n");
  gpuhal_semaphore_release(t);
  qc_fixture_close(&f);
}

/* ---- 4. polling ---- */

typedef struct qb_let_go_s {
  qc_blocker_t* blocker;
  int ms;
} qb_let_go_t;
static void qb_let_go_fn(void* arg) {
  qb_let_go_t* l = (qb_let_go_t*)arg;
  qc_sleep_ms(l->ms);
  qc_blocker_let_go(l->blocker);
}

TU_TEST(polls_on_held_values_see_progress) {
  qc_fixture_t f;
  qc_blocker_t blocker;
  qb_let_go_t let_go;
  qc_async_t async;
  gpuhal_semaphore_t *t = NULL, *u = NULL;
  gpuhal_semaphore_t* sems[2];
  uint64_t values[2];
  uint64_t i, polls = 0;
  const uint64_t n = 200;
  int64_t deadline;
  int any_done = 0, all_done = 0, one_done = 0;
  if (!qb_open(&f, 2, 2)) TU_SKIP("no device or test kernels");
  t = qb_semaphore(&f);
  u = qb_semaphore(&f);
  TU_REQUIRE(t && u);
  TU_REQUIRE(qb_blocker_start(&f, &blocker, 0));
  for (i = 1; i <= n; ++i) TU_CHECK_OK(qb_barrier(f.device, 0, NULL, 0, t, i));
  TU_CHECK_OK(qb_barrier(f.device, 1, t, n, u, 1)); /* another queue waits for the last */
  let_go.blocker = &blocker;
  let_go.ms = 30;
  TU_REQUIRE(qc_async_start(&async, qb_let_go_fn, &let_go));
  sems[0] = t;
  sems[1] = u;
  deadline = gpuhal_now_ns() + (int64_t)QB_WAIT_S * 1000000000ll;
  while ((!any_done || !all_done || !one_done) && gpuhal_now_ns() < deadline) {
    gpuhal_status_t st;
    values[0] = n / 2;
    values[1] = 1;
    st = gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, qb_list(sems, values, 2), gpuhal_timeout_immediate());
    if (!st)
      any_done = 1;
    else
      TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_DEADLINE_EXCEEDED);
    gpuhal_status_free(st);
    values[0] = n;
    st = gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, qb_list(sems, values, 2), gpuhal_timeout_relative_ns(0));
    if (!st)
      all_done = 1;
    else
      TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_DEADLINE_EXCEEDED);
    gpuhal_status_free(st);
    st = gpuhal_semaphore_wait(t, n, gpuhal_timeout_immediate());
    if (!st) one_done = 1;
    gpuhal_status_free(st);
    polls++;
  }
  TU_CHECK(any_done && all_done && one_done);
  TU_CHECK_EQ_INT(qc_query(t), n);
  TU_CHECK_EQ_INT(qc_query(u), 1);
  qc_async_join(&async, "let go");
  qb_blocker_finish(&blocker);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QB_WAIT_S)));
  gpuhal_semaphore_release(t);
  gpuhal_semaphore_release(u);
  qc_fixture_close(&f);
}

/* ---- 5. host calls among held work ---- */

typedef struct qb_host_s {
  gpuhal_device_t* device;
  gpuhal_semaphore_t* t;       /* the queue's timeline */
  gpuhal_semaphore_t* x;       /* released by the function (the test keeps none) */
  gpuhal_command_buffer_t* cb; /* released by the function */
  uint64_t base;               /* t's value before the function's own barriers */
  int submitted;
  int polled_ok;        /* a zero-timeout wait for its own earlier work returned */
  gpuhal_status_t idle; /* gpuhal_device_wait_idle from the function */
} qb_host_t;

static gpuhal_status_t qb_host_fn(void* user) {
  qb_host_t* h = (qb_host_t*)user;
  gpuhal_status_t st;
  uint64_t i;
  st = gpuhal_semaphore_wait(h->t, h->base, gpuhal_timeout_immediate());
  h->polled_ok = st == NULL;
  gpuhal_status_free(st);
  for (i = 1; i <= 8; ++i) {
    st = qb_barrier(h->device, 0, NULL, 0, h->t, h->base + i);
    if (st) {
      gpuhal_status_free(st);
      break;
    }
    h->submitted++;
  }
  st = gpuhal_semaphore_wait(h->t, h->base + 8, gpuhal_timeout_immediate()); /* may not be there yet */
  gpuhal_status_free(st);
  h->idle = gpuhal_device_wait_idle(h->device, gpuhal_timeout_immediate());
  gpuhal_command_buffer_release(h->cb);
  gpuhal_semaphore_release(h->x);
  return NULL;
}

TU_TEST(host_calls_among_held_work) {
  int32_t bounds[3] = {1, 2, 5};
  int b;
  for (b = 0; b < 3; ++b) {
    qc_fixture_t f;
    qc_blocker_t blocker;
    qb_host_t h;
    gpuhal_semaphore_t *t = NULL, *hs = NULL;
    gpuhal_buffer_t* counter;
    uint64_t i;
    if (!qb_open(&f, 1, bounds[b])) TU_SKIP("no device or test kernels");
    memset(&h, 0, sizeof(h));
    t = qb_semaphore(&f);
    hs = qb_semaphore(&f);
    h.x = qb_semaphore(&f);
    counter = qb_counter(&f);
    TU_REQUIRE(t && hs && h.x && counter);
    TU_REQUIRE_OK(qc_record_incs(&f, GPUHAL_COMMAND_BUFFER_STREAM, counter, 3, &h.cb));
    h.device = f.device;
    h.t = t;
    h.base = 10;
    TU_REQUIRE(qb_blocker_start(&f, &blocker, 0));
    for (i = 1; i <= 10; ++i) TU_CHECK_OK(qb_barrier(f.device, 0, NULL, 0, t, i));
    TU_CHECK_OK(
        gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), h.cb, NULL));
    TU_CHECK_OK(gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_one(&t, &h.base),
                                       gpuhal_semaphore_list_one(&hs, &qb_one), qb_host_fn, &h));
    qc_sleep_ms(10);
    TU_CHECK_EQ_INT(qc_query(hs), 0);
    qb_blocker_finish(&blocker);
    TU_CHECK_OK(gpuhal_semaphore_wait(hs, 1, qt_seconds(QB_WAIT_S)));
    TU_CHECK_OK(gpuhal_semaphore_wait(t, 18, qt_seconds(QB_WAIT_S)));
    TU_CHECK_EQ_INT(qc_query(t), 18);
    TU_CHECK_EQ_INT(h.submitted, 8);
    TU_CHECK(h.polled_ok);
    TU_CHECK_EQ_INT(qc_code(h.idle), GPUHAL_STATUS_FAILED_PRECONDITION);
    TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QB_WAIT_S)));
    TU_CHECK_EQ_INT(qb_read_u32(counter), 3);
    gpuhal_buffer_release(counter);
    gpuhal_semaphore_release(t);
    gpuhal_semaphore_release(hs);
    qc_fixture_close(&f);
  }
}

/* ---- 6. allocas, deallocas and long command buffers among held work ---- */

static void qb_mixed_case(int32_t bound, gpuhal_command_buffer_flags_t flags) {
  qc_fixture_t f;
  qc_blocker_t blocker;
  gpuhal_semaphore_t* t = NULL;
  gpuhal_buffer_t* counter;
  gpuhal_command_buffer_t* incs = NULL;
  gpuhal_buffer_t* scratch[4] = {NULL, NULL, NULL, NULL};
  uint64_t v = 0;
  int round;
  if (!qb_open(&f, 2, bound)) TU_SKIP("no device or test kernels");
  t = qb_semaphore(&f);
  counter = qb_counter(&f);
  TU_REQUIRE(t && counter);
  TU_REQUIRE_OK(qc_record_incs(&f, flags | GPUHAL_COMMAND_BUFFER_REUSABLE, counter, 12, &incs));
  TU_REQUIRE(qb_blocker_start(&f, &blocker, 0));
  /* Each step waits for the one before on the timeline (exact order), alternating kinds. */
  for (round = 0; round < 4; ++round) {
    uint64_t w = v, s = ++v;
    TU_CHECK_OK(gpuhal_queue_alloca(f.device, 0, w ? gpuhal_semaphore_list_one(&t, &w) : gpuhal_semaphore_list_empty(),
                                    gpuhal_semaphore_list_one(&t, &s), 256, &scratch[round]));
    w = v;
    s = ++v;
    TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&t, &w), gpuhal_semaphore_list_one(&t, &s),
                                     incs, NULL));
    w = v;
    s = ++v;
    TU_CHECK_OK(qb_barrier(f.device, 0, t, w, t, s));
  }
  for (round = 0; round < 4; ++round) {
    uint64_t w = v, s = ++v;
    TU_CHECK_OK(gpuhal_queue_dealloca(f.device, 0, gpuhal_semaphore_list_one(&t, &w), gpuhal_semaphore_list_one(&t, &s),
                                      scratch[round]));
  }
  qc_sleep_ms(10);
  TU_CHECK_EQ_INT(qc_query(t), 0); /* everything is behind the kernel on queue 0 */
  qb_blocker_finish(&blocker);
  TU_CHECK_OK(gpuhal_semaphore_wait(t, v, qt_seconds(QB_WAIT_S)));
  TU_CHECK_EQ_INT(qc_query(t), v);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QB_WAIT_S)));
  TU_CHECK_EQ_INT(qb_read_u32(counter), 4 * 12);
  for (round = 0; round < 4; ++round) gpuhal_buffer_release(scratch[round]);
  gpuhal_command_buffer_release(incs);
  gpuhal_buffer_release(counter);
  gpuhal_semaphore_release(t);
  qc_fixture_close(&f);
}

TU_TEST(allocas_and_long_command_buffers_among_held_work) {
  qb_mixed_case(1, GPUHAL_COMMAND_BUFFER_STREAM);
  qb_mixed_case(5, GPUHAL_COMMAND_BUFFER_STREAM);
  qb_mixed_case(2, GPUHAL_COMMAND_BUFFER_GRAPH);
  qb_mixed_case(8, GPUHAL_COMMAND_BUFFER_GRAPH);
}

/* ---- 7. release orders ---- */

/* order 0: the timeline, then the device, then the driver; 1: the device first; 2: the
 * driver first (it stays until its objects go), then the device, then the semaphores. */
static void qb_release_case(int order) {
  qc_fixture_t f;
  qc_blocker_t blocker;
  gpuhal_semaphore_t *t = NULL, *watch = NULL;
  gpuhal_driver_t* driver;
  qc_async_t async;
  uint32_t* flag;
  uint64_t i;
  if (!qb_open(&f, 2, 2)) TU_SKIP("no device or test kernels");
  t = qb_semaphore(&f);
  watch = qb_semaphore(&f);
  TU_REQUIRE(t && watch);
  TU_REQUIRE(qb_blocker_start(&f, &blocker, 0));
  for (i = 1; i <= 40; ++i) TU_CHECK_OK(qb_barrier(f.device, 0, NULL, 0, t, i));
  /* Queue 1 waits for the last held value: on the memop path a GPU wait for a value not
   * submitted yet, which the device's release must not abandon once it is submitted. */
  TU_CHECK_OK(qb_barrier(f.device, 1, t, 40, watch, 1));
  flag = (uint32_t*)gpuhal_buffer_host_pointer(blocker.words);
  gpuhal_command_buffer_release(blocker.cb);
  gpuhal_buffer_release(blocker.words);
  blocker.cb = NULL;
  blocker.words = NULL;
  qc_fixture_release_kernels(&f);
  driver = f.driver;
  if (order == 0) {
    gpuhal_semaphore_release(t);
    t = NULL;
  }
  if (order == 2) gpuhal_driver_release(driver);
  /* The kernel's execute holds the device: its teardown runs once that is done. */
  TU_REQUIRE(qc_async_start(&async, qc_device_release_fn, f.device));
  qc_sleep_ms(20);
  __atomic_store_n(flag, 1u, __ATOMIC_SEQ_CST);
  qc_async_join(&async, "gpuhal_device_release (held work)");
  f.device = NULL;
  TU_CHECK_OK(gpuhal_semaphore_wait(watch, 1, qt_seconds(QB_WAIT_S)));
  TU_CHECK_OK(gpuhal_semaphore_wait(blocker.done, 1, qt_seconds(QB_WAIT_S)));
  if (t) TU_CHECK_EQ_INT(qc_query(t), 40);
  gpuhal_semaphore_release(t);
  gpuhal_semaphore_release(watch);
  gpuhal_semaphore_release(blocker.done);
  if (order != 2) {
    qc_watchdog_arm(30, "gpuhal_driver_release (held work)");
    gpuhal_driver_release(driver);
    qc_watchdog_disarm();
  }
}

TU_TEST(release_orders_with_held_work) {
  qb_release_case(0);
  qb_release_case(1);
  qb_release_case(2);
}

typedef struct qb_submitter_s {
  gpuhal_device_t* device;
  gpuhal_semaphore_t* t;
  int n, ok, refused;
} qb_submitter_t;
static void qb_submitter_fn(void* arg) {
  qb_submitter_t* s = (qb_submitter_t*)arg;
  int i;
  for (i = 1; i <= s->n; ++i) {
    gpuhal_status_t st = qb_barrier(s->device, 0, NULL, 0, s->t, (uint64_t)i);
    if (st)
      s->refused++;
    else
      s->ok++;
    gpuhal_status_free(st);
  }
  gpuhal_device_release(s->device); /* its own reference */
}

/* The application's last other reference goes while a thread (holding one) still submits. */
TU_TEST(release_while_another_thread_submits_held_work) {
  qc_fixture_t f;
  qc_blocker_t blocker;
  qb_submitter_t s;
  qc_async_t async;
  if (!qb_open(&f, 1, 1)) TU_SKIP("no device or test kernels");
  memset(&s, 0, sizeof(s));
  s.t = qb_semaphore(&f);
  s.n = 400;
  s.device = f.device;
  TU_REQUIRE(s.t);
  TU_REQUIRE(qb_blocker_start(&f, &blocker, 0));
  gpuhal_device_retain(f.device);
  TU_REQUIRE(qc_async_start(&async, qb_submitter_fn, &s));
  qc_sleep_ms(5);
  qc_fixture_release_kernels(&f);
  gpuhal_device_release(f.device); /* the submitter's reference keeps it */
  f.device = NULL;
  qc_sleep_ms(5);
  qc_blocker_let_go(&blocker);
  qc_async_join(&async, "the submitter");
  TU_CHECK_EQ_INT(s.ok, s.n);
  TU_CHECK_OK(gpuhal_semaphore_wait(s.t, (uint64_t)s.n, qt_seconds(QB_WAIT_S)));
  TU_CHECK_EQ_INT(qc_query(s.t), s.n);
  qb_blocker_finish(&blocker);
  gpuhal_semaphore_release(s.t);
  qc_watchdog_arm(30, "gpuhal_driver_release");
  gpuhal_driver_release(f.driver);
  qc_watchdog_disarm();
}

/* ---- 8. a device lost while work is held (last: softcuda's context stays lost) ---- */

TU_TEST(a_loss_fails_held_work) {
  qc_fixture_t f;
  gpuhal_command_buffer_t* fault_cb = NULL;
  gpuhal_semaphore_t *t = NULL, *faulted = NULL, *other = NULL;
  gpuhal_arg_t arg = gpuhal_arg_u64(0x10);
  uint64_t i;
  int failures = 0;
  if (!qb_open(&f, 2, 1)) TU_SKIP("no device or test kernels");
  t = qb_semaphore(&f);
  faulted = qb_semaphore(&f);
  other = qb_semaphore(&f);
  TU_REQUIRE(t && faulted && other);
  TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &fault_cb));
  TU_REQUIRE_OK(gpuhal_command_buffer_begin(fault_cb));
  TU_REQUIRE_OK(gpuhal_cmd_dispatch(fault_cb, f.fault, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg));
  TU_REQUIRE_OK(gpuhal_command_buffer_end(fault_cb));
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_empty(),
                                   gpuhal_semaphore_list_one(&faulted, &qb_one), fault_cb, NULL));
  for (i = 1; i <= 30; ++i) {
    gpuhal_status_t st = qb_barrier(f.device, 0, NULL, 0, t, i);
    failures += st != NULL; /* refused once the loss is seen: fine */
    gpuhal_status_free(st);
  }
  (void)failures;
  gpuhal_status_free(qb_barrier(f.device, 1, t, 30, other, 1));
  {
    gpuhal_status_t st = gpuhal_semaphore_wait(faulted, 1, qt_seconds(QB_WAIT_S));
    TU_CHECK(st != NULL && gpuhal_status_code(st) != GPUHAL_STATUS_DEADLINE_EXCEEDED);
    gpuhal_status_free(st);
  }
  {
    gpuhal_status_t st = gpuhal_semaphore_wait(t, 30, qt_seconds(QB_WAIT_S));
    TU_CHECK(st != NULL && gpuhal_status_code(st) != GPUHAL_STATUS_DEADLINE_EXCEEDED);
    gpuhal_status_free(st);
    st = gpuhal_semaphore_wait(other, 1, qt_seconds(QB_WAIT_S));
    TU_CHECK(st != NULL && gpuhal_status_code(st) != GPUHAL_STATUS_DEADLINE_EXCEEDED);
    gpuhal_status_free(st);
  }
  {
    gpuhal_status_t st = gpuhal_device_wait_idle(f.device, qt_seconds(QB_WAIT_S));
    TU_CHECK(st != NULL && gpuhal_status_code(st) != GPUHAL_STATUS_DEADLINE_EXCEEDED);
    gpuhal_status_free(st);
  }
  gpuhal_command_buffer_release(fault_cb);
  gpuhal_semaphore_release(t);
  gpuhal_semaphore_release(faulted);
  gpuhal_semaphore_release(other);
  qc_fixture_close(&f);
}

/* ---- 9. tracing ---- */

TU_TEST(held_work_with_tracing_on) {
  qc_fixture_t f;
  qc_blocker_t blocker;
  gpuhal_semaphore_t* t = NULL;
  char path[256];
  uint64_t i;
  int started;
  snprintf(path, sizeof(path), "/tmp/gpuhal_test_queue_bound_%d.json", (int)getpid());
  if (!qb_open_ex(&f, 2, 3, 0, path)) {
    remove(path); /* a device opened and failed later may have begun the file */
    TU_SKIP("no device or test kernels");
  }
  t = qb_semaphore(&f);
  started = t != NULL && qb_blocker_start(&f, &blocker, 0);
  if (!started) {
    gpuhal_semaphore_release(t);
    qc_fixture_close(&f);
    remove(path);
  }
  TU_REQUIRE(started);
  for (i = 1; i <= 60; ++i) TU_CHECK_OK(qb_barrier(f.device, (uint32_t)(i % 3 == 0), i > 1 ? t : NULL, i - 1, t, i));
  qc_sleep_ms(10);
  qb_blocker_finish(&blocker);
  TU_CHECK_OK(gpuhal_semaphore_wait(t, 60, qt_seconds(QB_WAIT_S)));
  TU_CHECK_EQ_INT(qc_query(t), 60);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QB_WAIT_S)));
  gpuhal_semaphore_release(t);
  qc_fixture_close(&f);
  remove(path);
}

/* ---- 10. thousands of operations with a tiny bound ---- */

TU_TEST(thousands_of_operations_with_a_tiny_bound) {
  int32_t bounds[4] = {1, 2, 5, 8};
  int b;
  for (b = 0; b < 4; ++b) {
    qc_fixture_t f;
    qc_blocker_t blocker;
    gpuhal_semaphore_t *t = NULL, *u = NULL;
    const uint64_t n = 3000;
    uint64_t i;
    int64_t t0, t1, t2;
    if (!qb_open(&f, 2, bounds[b])) TU_SKIP("no device or test kernels");
    t = qb_semaphore(&f);
    u = qb_semaphore(&f);
    TU_REQUIRE(t && u);
    TU_REQUIRE(qb_blocker_start(&f, &blocker, 0));
    t0 = gpuhal_now_ns();
    for (i = 1; i <= n; ++i) {
      TU_CHECK_OK(qb_barrier(f.device, 0, NULL, 0, t, i));
      if (i % 100 == 0) TU_CHECK_OK(qb_barrier(f.device, 1, t, i, u, i / 100));
    }
    t1 = gpuhal_now_ns();
    qc_blocker_let_go(&blocker);
    TU_CHECK_OK(gpuhal_semaphore_wait(t, n, qt_seconds(30)));
    TU_CHECK_OK(gpuhal_semaphore_wait(u, n / 100, qt_seconds(30)));
    t2 = gpuhal_now_ns();
    TU_CHECK_EQ_INT(qc_query(t), n);
    TU_CHECK_EQ_INT(qc_query(u), n / 100);
    fprintf(stderr, "  bound %d: %llu held operations submitted in %.1f ms, drained in %.1f ms\n", bounds[b],
            (unsigned long long)n, (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6);
    qb_blocker_finish(&blocker);
    TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QB_WAIT_S)));
    gpuhal_semaphore_release(t);
    gpuhal_semaphore_release(u);
    qc_fixture_close(&f);
  }
}

TU_MAIN(TU_CASE(other_queues_and_devices_wait_on_held_values), TU_CASE(held_work_whose_wait_fails_fails_its_signals),
        TU_CASE(held_work_whose_wait_fails_fails_at_once), TU_CASE(held_work_whose_signal_fails_holds_up_nothing),
        TU_CASE(held_work_is_reported_held_and_waited_for), TU_CASE(polls_on_held_values_see_progress),
        TU_CASE(host_calls_among_held_work), TU_CASE(allocas_and_long_command_buffers_among_held_work),
        TU_CASE(release_orders_with_held_work), TU_CASE(release_while_another_thread_submits_held_work),
        TU_CASE(held_work_with_tracing_on), TU_CASE(thousands_of_operations_with_a_tiny_bound),
        TU_CASE(a_loss_fails_held_work))
