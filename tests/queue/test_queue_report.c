/* The pending-work report (gpuhal_driver_report_pending, issue #17 item 3): a crafted stall
 * (a wait on a value nothing signals, a cycle of waits between two queues) gives the golden
 * text on the event path and the same facts on the memop path; the buffer is filled like
 * snprintf; GPUHAL_HANG_REPORT makes a long host wait log the report once. */
#include "test_internals.h"

#include "test_queue_util.h"

#define QR_WAIT_S 10

static uint64_t qr_one = 1;

typedef struct qr_fixture_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_kernel_t* kernel;
  gpuhal_buffer_t* counter;
  gpuhal_command_buffer_t* cb;
} qr_fixture_t;

typedef struct qr_log_s {
  pthread_mutex_t mutex;
  int warnings;
  char text[8192];
} qr_log_t;

static void qr_log_fn(gpuhal_log_level_t level, const char* message, void* user) {
  qr_log_t* log = (qr_log_t*)user;
  if (level != GPUHAL_LOG_WARN) return;
  pthread_mutex_lock(&log->mutex);
  if (strstr(message, "GPUHAL_HANG_REPORT")) {
    log->warnings++;
    snprintf(log->text, sizeof(log->text), "%s", message);
  }
  pthread_mutex_unlock(&log->mutex);
}

/* `memops`: -1 the event path, 0 the default. */
static int qr_open(qr_fixture_t* f, int memops, qr_log_t* log) {
  gpuhal_driver_options_t options;
  gpuhal_device_params_t params;
  gpuhal_status_t st;
  uint32_t zero = 0;
  gpuhal_arg_t arg;
  memset(f, 0, sizeof(*f));
  memset(&options, 0, sizeof(options));
  memset(&params, 0, sizeof(params));
  options.semaphore_memops = memops;
  if (log) {
    options.log_fn = qr_log_fn;
    options.log_user = log;
  }
  params.queue_count = 2;
  st = gpuhal_driver_create(&options, &f->driver);
  if (!st) st = gpuhal_device_create(f->driver, 0, &params, &f->device);
  if (!st) st = qc_load_kernel(f->device, "atomic_inc", &f->exe, &f->kernel);
  if (!st) st = gpuhal_buffer_allocate(f->device, GPUHAL_MEMORY_DEVICE, 4, &f->counter);
  if (!st) st = gpuhal_buffer_write(f->counter, 0, &zero, 4);
  arg = gpuhal_arg_buffer(f->counter, 0);
  if (!st) st = qc_record_dispatch(f->device, GPUHAL_COMMAND_BUFFER_STREAM, f->kernel, 1, 1, 1, &arg, &f->cb);
  if (!st) st = gpuhal_command_buffer_set_label(f->cb, "stalled");
  if (st) {
    fprintf(stderr, "  fixture: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    return 0;
  }
  return 1;
}

static void qr_close(qr_fixture_t* f) {
  gpuhal_command_buffer_release(f->cb);
  gpuhal_buffer_release(f->counter);
  gpuhal_executable_release(f->exe);
  qc_watchdog_arm(30, "gpuhal_device_release");
  gpuhal_device_release(f->device);
  gpuhal_driver_release(f->driver);
  qc_watchdog_disarm();
}

static gpuhal_semaphore_t* qr_semaphore_of(gpuhal_driver_t* driver, const char* label) {
  gpuhal_semaphore_t* s = qc_semaphore_new(driver);
  if (s) TU_CHECK_OK(gpuhal_semaphore_set_label(s, label));
  return s;
}

static gpuhal_semaphore_t* qr_semaphore(qr_fixture_t* f, const char* label) {
  return qr_semaphore_of(f->driver, label);
}

typedef struct qr_stall_s {
  gpuhal_semaphore_t *gate, *a, *b, *c, *first;
} qr_stall_t;

/* #1: a host call that completes; #2: the execute 'stalled' on queue 0 waits for 'gate',
 * which nothing signals; #3 (queue 1) waits for 'b', which #4 (queue 0) signals, and #4
 * waits for 'c', which #3 signals: a cycle. */
static int qr_stall(qr_fixture_t* f, qr_stall_t* s) {
  s->gate = qr_semaphore(f, "gate");
  s->a = qr_semaphore(f, "a");
  s->b = qr_semaphore(f, "b");
  s->c = qr_semaphore(f, "c");
  s->first = qr_semaphore(f, "first");
  if (!s->gate || !s->a || !s->b || !s->c || !s->first) return 0;
  TU_CHECK_OK(gpuhal_queue_host_call(f->device, 0, gpuhal_semaphore_list_empty(),
                                     gpuhal_semaphore_list_one(&s->first, &qr_one), qt_host_fn_nop, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(s->first, 1, qt_seconds(QR_WAIT_S)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f->device, qt_seconds(QR_WAIT_S))); /* #1 is retired */
  TU_CHECK_OK(gpuhal_queue_execute(f->device, 0, gpuhal_semaphore_list_one(&s->gate, &qr_one),
                                   gpuhal_semaphore_list_one(&s->a, &qr_one), f->cb, NULL));
  TU_CHECK_OK(gpuhal_queue_host_call(f->device, 1, gpuhal_semaphore_list_one(&s->b, &qr_one),
                                     gpuhal_semaphore_list_one(&s->c, &qr_one), qt_host_fn_nop, NULL));
  TU_CHECK_OK(gpuhal_queue_host_call(f->device, 0, gpuhal_semaphore_list_one(&s->c, &qr_one),
                                     gpuhal_semaphore_list_one(&s->b, &qr_one), qt_host_fn_nop, NULL));
  qc_sleep_ms(20); /* the worker has taken them in */
  return 1;
}

/* Ends the stall: the gate is signalled, the cycle failed. */
static void qr_unstall(qr_fixture_t* f, qr_stall_t* s) {
  gpuhal_status_t st;
  if (s->gate) TU_CHECK_OK(gpuhal_semaphore_signal(s->gate, 1));
  if (s->a) TU_CHECK_OK(gpuhal_semaphore_wait(s->a, 1, qt_seconds(QR_WAIT_S)));
  if (s->b) gpuhal_semaphore_fail(s->b, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "the test ends the cycle"));
  if (s->c) {
    st = gpuhal_semaphore_wait(s->c, 1, qt_seconds(QR_WAIT_S));
    TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_CANCELLED);
    gpuhal_status_free(st);
  }
  TU_CHECK_OK(gpuhal_device_wait_idle(f->device, qt_seconds(QR_WAIT_S)));
  gpuhal_semaphore_release(s->gate);
  gpuhal_semaphore_release(s->a);
  gpuhal_semaphore_release(s->b);
  gpuhal_semaphore_release(s->c);
  gpuhal_semaphore_release(s->first);
}

static const char qr_golden[] =
    "gpuhal pending report: 3 operations not done\n"
    "device 0:\n"
    "  queue 0: last completed #1 host_call; 2 not done\n"
    "    #2 execute 'stalled': waiting\n"
    "      waits for semaphore 'gate' >= 1: now 0; nothing queued signals this value (only the host can: "
    "gpuhal_semaphore_signal)\n"
    "      signals semaphore 'a' = 1\n"
    "    #4 host_call: waiting\n"
    "      waits for semaphore 'c' >= 1: now 0; to be signalled by #3 host_call (device 0 queue 1, waiting)\n"
    "      signals semaphore 'b' = 1\n"
    "  queue 1: nothing completed yet; 1 not done\n"
    "    #3 host_call: waiting\n"
    "      waits for semaphore 'b' >= 1: now 0; to be signalled by #4 host_call (device 0 queue 0, waiting)\n"
    "      signals semaphore 'c' = 1\n"
    "cycle: #3 host_call (device 0 queue 1) waits for #4 host_call (device 0 queue 0) waits for #3 host_call\n";

TU_TEST(report_of_a_stall_event_path) {
  qr_fixture_t f;
  qr_stall_t s;
  char text[4096], small[40];
  size_t length = 0, small_length = 0;
  memset(&s, 0, sizeof(s));
  if (!qr_open(&f, -1, NULL)) TU_SKIP("no device or test kernels");
  TU_REQUIRE(qr_stall(&f, &s));
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, sizeof(text), &length));
  TU_CHECK_STR_EQ(text, qr_golden);
  TU_CHECK_EQ_INT(length, strlen(qr_golden));
  /* Like snprintf: cut to the buffer, the whole length told. */
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, small, sizeof(small), &small_length));
  TU_CHECK_EQ_INT(small_length, length);
  TU_CHECK_EQ_INT(strlen(small), sizeof(small) - 1);
  TU_CHECK(strncmp(small, qr_golden, sizeof(small) - 1) == 0);
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, NULL, 0, &small_length));
  TU_CHECK_EQ_INT(small_length, length);
  qr_unstall(&f, &s);
  /* Nothing left: every queue says what completed last. */
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, sizeof(text), &length));
  TU_CHECK_STR_CONTAINS(text, "gpuhal pending report: 0 operations not done\n");
  TU_CHECK_STR_CONTAINS(text, "no cycle among the operations waiting\n");
  qr_close(&f);
}

/* The memop path issues the gated execute at once behind a GPU value wait, on a side stream
 * the completion thread watches: that thread copies it into the report, where it is listed
 * as issued with the wait it is parked on; the rest is as on the event path. */
TU_TEST(report_of_a_stall_default_path) {
  qr_fixture_t f;
  qr_stall_t s;
  char text[4096];
  memset(&s, 0, sizeof(s));
  if (!qr_open(&f, 0, NULL)) TU_SKIP("no device or test kernels");
  TU_REQUIRE(qr_stall(&f, &s));
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, sizeof(text), NULL));
  TU_CHECK_STR_CONTAINS(text, "gpuhal pending report: 3 operations not done\n");
  TU_CHECK_STR_CONTAINS(text, "  queue 0: last completed #1 host_call; 2 not done\n");
  /* Parked on the GPU behind its value wait (the completion thread watches it), or, on the
   * event path, waiting on the host. */
  TU_CHECK_STR_CONTAINS(
      text, f.driver->memops ? "    #2 execute 'stalled': issued, not done\n" : "    #2 execute 'stalled': waiting\n");
  TU_CHECK_STR_CONTAINS(text, "      waits for semaphore 'gate' >= 1: now 0; nothing queued signals this value");
  TU_CHECK(strstr(text, "not listed") == NULL);
  TU_CHECK_STR_CONTAINS(text,
                        "cycle: #3 host_call (device 0 queue 1) waits for #4 host_call (device 0 queue 0) "
                        "waits for #3 host_call\n");
  /* A label keeps the report's lines: control characters become '?', and one cut to fit
   * ends between UTF-8 characters (46 bytes of 'é' would cut one in two). */
  TU_CHECK_OK(gpuhal_semaphore_set_label(s.gate, "two\nlines\tand\x01"));
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, sizeof(text), NULL));
  TU_CHECK_STR_CONTAINS(text, "waits for semaphore 'two?lines?and?' >= 1");
  {
    char long_label[64], got[GPUHAL_LABEL_MAX + 8];
    const char* at;
    size_t i, n;
    for (i = 0; i + 2 <= 60; i += 2) long_label[i] = (char)0xC3, long_label[i + 1] = (char)0xA9;
    long_label[60] = 0;
    TU_CHECK_OK(gpuhal_semaphore_set_label(s.gate, long_label));
    TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, sizeof(text), NULL));
    at = strstr(text, "waits for semaphore '");
    TU_REQUIRE(at != NULL);
    at += strlen("waits for semaphore '");
    for (n = 0; at[n] && at[n] != '\'' && n < sizeof(got) - 1; ++n) got[n] = at[n];
    got[n] = 0;
    TU_CHECK_EQ_INT(n, 46); /* 23 whole characters of 2 bytes */
    TU_CHECK(n % 2 == 0 && (unsigned char)got[n - 1] == 0xA9);
  }
  qr_unstall(&f, &s);
  qr_close(&f);
}

TU_TEST(report_rejects_bad_arguments) {
  qr_fixture_t f;
  gpuhal_status_t st;
  char text[16];
  st = gpuhal_driver_report_pending(NULL, text, sizeof(text), NULL);
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_INVALID_ARGUMENT);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "driver");
  gpuhal_status_free(st);
  if (!qr_open(&f, -1, NULL)) TU_SKIP("no device or test kernels");
  st = gpuhal_driver_report_pending(f.driver, NULL, 16, NULL);
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_INVALID_ARGUMENT);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "buffer");
  gpuhal_status_free(st);
  st = gpuhal_semaphore_set_label(NULL, "x");
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_INVALID_ARGUMENT);
  gpuhal_status_free(st);
  qr_close(&f);
}

/* GPUHAL_HANG_REPORT=0.05: a host wait of 300 ms on the gate logs the report once; so does
 * gpuhal_device_wait_idle (`idle`), which waits for the same stalled work. */
static void qr_hang_report_case(int idle) {
  qr_fixture_t f;
  qr_stall_t s;
  qr_log_t log;
  gpuhal_status_t st;
  memset(&s, 0, sizeof(s));
  memset(&log, 0, sizeof(log));
  pthread_mutex_init(&log.mutex, NULL);
  setenv("GPUHAL_HANG_REPORT", "0.05", 1);
  if (!qr_open(&f, -1, &log)) {
    unsetenv("GPUHAL_HANG_REPORT");
    TU_SKIP("no device or test kernels");
  }
  unsetenv("GPUHAL_HANG_REPORT");
  TU_REQUIRE(qr_stall(&f, &s));
  st = idle ? gpuhal_device_wait_idle(f.device, gpuhal_timeout_relative_ns(300000000ll))
            : gpuhal_semaphore_wait(s.a, 1, gpuhal_timeout_relative_ns(300000000ll));
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_DEADLINE_EXCEEDED);
  gpuhal_status_free(st);
  pthread_mutex_lock(&log.mutex);
  TU_CHECK_EQ_INT(log.warnings, 1);
  TU_CHECK_STR_CONTAINS(log.text, "a host wait has waited");
  TU_CHECK_STR_CONTAINS(log.text, "waits for semaphore 'gate' >= 1: now 0; nothing queued signals this value");
  pthread_mutex_unlock(&log.mutex);
  qr_unstall(&f, &s);
  qr_close(&f);
  pthread_mutex_destroy(&log.mutex);
}
TU_TEST(hang_report_logs_once) { qr_hang_report_case(0); }
TU_TEST(hang_report_covers_device_wait_idle) { qr_hang_report_case(1); }

/* A hang report longer than one log message (gpuhal__log's 1024 bytes) is logged whole, in
 * parts of whole lines: joined they are exactly the pending report. (It was measured in one
 * pass and written in another, into a buffer of the first length, and the log cut it at
 * 1024 bytes.) */
#define QR_LONG 40u
typedef struct qr_parts_s {
  pthread_mutex_t mutex;
  int parts;
  char text[65536];
} qr_parts_t;

static void qr_parts_fn(gpuhal_log_level_t level, const char* message, void* user) {
  qr_parts_t* log = (qr_parts_t*)user;
  const char* body = NULL;
  if (level != GPUHAL_LOG_WARN) return;
  if (strstr(message, "(GPUHAL_HANG_REPORT)"))
    body = strstr(message, "gpuhal pending report");
  else if (strncmp(message, "(hang report, part ", 19) == 0)
    body = strstr(message, ") ") + 2;
  if (!body) return;
  pthread_mutex_lock(&log->mutex);
  log->parts++;
  snprintf(log->text + strlen(log->text), sizeof(log->text) - strlen(log->text), "%s", body);
  pthread_mutex_unlock(&log->mutex);
}

TU_TEST(hang_report_is_logged_whole) {
  gpuhal_driver_options_t options;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_semaphore_t *gate = NULL, *done = NULL;
  qr_parts_t* log = (qr_parts_t*)calloc(1, sizeof(qr_parts_t));
  char* report = (char*)calloc(1, sizeof(log->text));
  gpuhal_status_t st;
  uint64_t value;
  uint32_t i;
  TU_REQUIRE(log && report);
  pthread_mutex_init(&log->mutex, NULL);
  memset(&options, 0, sizeof(options));
  options.semaphore_memops = -1;
  options.log_fn = qr_parts_fn;
  options.log_user = log;
  setenv("GPUHAL_HANG_REPORT", "0.05", 1);
  st = gpuhal_driver_create(&options, &driver);
  unsetenv("GPUHAL_HANG_REPORT");
  TU_REQUIRE_OK(st);
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  gate = qr_semaphore_of(driver, "gate");
  done = qr_semaphore_of(driver, "done");
  TU_REQUIRE(gate && done);
  for (i = 0; i < QR_LONG; ++i) {
    value = i + 1;
    TU_CHECK_OK(gpuhal_queue_host_call(device, 0, gpuhal_semaphore_list_one(&gate, &qr_one),
                                       gpuhal_semaphore_list_one(&done, &value), qt_host_fn_nop, NULL));
  }
  qc_sleep_ms(20); /* the worker has taken them in */
  st = gpuhal_semaphore_wait(done, 1, gpuhal_timeout_relative_ns(300000000ll));
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_DEADLINE_EXCEEDED);
  gpuhal_status_free(st);
  TU_CHECK_OK(gpuhal_driver_report_pending(driver, report, sizeof(log->text), NULL));
  TU_CHECK(strlen(report) > 2048);
  pthread_mutex_lock(&log->mutex);
  TU_CHECK(log->parts > 1);
  TU_CHECK_STR_EQ(log->text, report);
  pthread_mutex_unlock(&log->mutex);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, QR_LONG, qt_seconds(QR_WAIT_S)));
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done);
  qc_watchdog_arm(30, "gpuhal_device_release");
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  qc_watchdog_disarm();
  pthread_mutex_destroy(&log->mutex);
  free(report);
  free(log);
}

/* Thousands of operations waiting: every one is listed, in submission order per queue, and
 * each cross-queue wait names the operation that signals it (the report's copy grows as
 * needed and finds signallers through a sorted index). */
#define QR_MANY 5000u
TU_TEST(report_lists_thousands_of_operations) {
  qr_fixture_t f;
  gpuhal_semaphore_t *gate, *lanes[2];
  size_t length = 0;
  char* text;
  char line[160];
  const char* at;
  uint32_t i;
  if (!qr_open(&f, -1, NULL)) TU_SKIP("no device or test kernels");
  gate = qr_semaphore(&f, "gate");
  lanes[0] = qr_semaphore(&f, "lane 0");
  lanes[1] = qr_semaphore(&f, "lane 1");
  TU_REQUIRE(gate && lanes[0] && lanes[1]);
  /* Operation i (number i + 1) runs on queue i % 2 and signals its lane i / 2 + 1; those on
   * queue 1 also wait for the same value of lane 0, which the one before them signals. */
  for (i = 0; i < QR_MANY; ++i) {
    uint32_t q = i % 2;
    uint64_t value = i / 2 + 1;
    gpuhal_semaphore_t* waits[2] = {gate, lanes[0]};
    uint64_t values[2] = {1, value};
    gpuhal_semaphore_list_t wait = {q ? 2u : 1u, waits, values};
    TU_REQUIRE_OK(
        gpuhal_queue_host_call(f.device, q, wait, gpuhal_semaphore_list_one(&lanes[q], &value), qt_host_fn_nop, NULL));
  }
  qc_sleep_ms(20); /* the worker has taken them in */
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, NULL, 0, &length));
  text = (char*)malloc(length + 1);
  TU_REQUIRE(text != NULL);
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, length + 1, NULL));
  snprintf(line, sizeof(line), "gpuhal pending report: %u operations not done\n", QR_MANY);
  TU_CHECK_STR_CONTAINS(text, line);
  TU_CHECK(strstr(text, "not copied") == NULL);
  /* Each queue's operations in submission order. */
  for (at = text, i = 0; i < QR_MANY && at; i += 2) {
    snprintf(line, sizeof(line), "    #%u host_call: waiting\n", i + 1);
    at = strstr(at, line);
  }
  TU_CHECK(at != NULL);
  for (at = text, i = 1; i < QR_MANY && at; i += 2) {
    snprintf(line, sizeof(line), "    #%u host_call: waiting\n", i + 1);
    at = strstr(at, line);
  }
  TU_CHECK(at != NULL);
  snprintf(line, sizeof(line),
           "waits for semaphore 'lane 0' >= %u: now 0; to be signalled by #%u host_call (device 0 queue 0, waiting)\n",
           QR_MANY / 2, QR_MANY - 1);
  TU_CHECK_STR_CONTAINS(text, line);
  TU_CHECK_STR_CONTAINS(text, "no cycle among the operations waiting\n");
  free(text);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(lanes[1], QR_MANY / 2, qt_seconds(60)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QR_WAIT_S)));
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(lanes[0]);
  gpuhal_semaphore_release(lanes[1]);
  qr_close(&f);
}

/* Two barriers on the two queues, each waiting for what the other signals: on the default
 * path both are issued at once, parked on the GPU behind value waits, yet it is a deadlock
 * all the same, and the report names it on both paths. */
static void qr_cycle_case(int memops) {
  qr_fixture_t f;
  gpuhal_semaphore_t *s, *t;
  char text[4096];
  gpuhal_status_t st;
  if (!qr_open(&f, memops, NULL)) TU_SKIP("no device or test kernels");
  s = qr_semaphore(&f, "S");
  t = qr_semaphore(&f, "T");
  TU_REQUIRE(s && t);
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 1, gpuhal_semaphore_list_one(&t, &qr_one),
                                   gpuhal_semaphore_list_one(&s, &qr_one), NULL, NULL));
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&s, &qr_one),
                                   gpuhal_semaphore_list_one(&t, &qr_one), NULL, NULL));
  qc_sleep_ms(20); /* the worker has taken them in (and issued them, on the default path) */
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, sizeof(text), NULL));
  TU_CHECK_STR_CONTAINS(text,
                        "cycle: #1 barrier (device 0 queue 1) waits for #2 barrier (device 0 queue 0) "
                        "waits for #1 barrier\n");
  /* Both failed: a parked wait ends on its own semaphore's failure (the other may wait on
   * an event of the first). */
  gpuhal_semaphore_fail(s, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "the test ends the cycle"));
  gpuhal_semaphore_fail(t, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "the test ends the cycle"));
  st = gpuhal_semaphore_wait(s, 1, qt_seconds(QR_WAIT_S));
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_CANCELLED);
  gpuhal_status_free(st);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QR_WAIT_S)));
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(t);
  qr_close(&f);
}

TU_TEST(report_names_a_cycle_of_parked_work) {
  qr_cycle_case(0);
  qr_cycle_case(-1);
}

/* A chain that only waits for the host: #1 (queue 0) waits for 'gate', #2 (queue 1) for
 * #1's signal, #3 (queue 0) for #2's. Parked on the default path, but no cycle: the gate
 * releases it all. */
static void qr_chain_case(int memops) {
  qr_fixture_t f;
  gpuhal_semaphore_t *gate, *s, *t, *done;
  char text[4096];
  if (!qr_open(&f, memops, NULL)) TU_SKIP("no device or test kernels");
  gate = qr_semaphore(&f, "gate");
  s = qr_semaphore(&f, "S");
  t = qr_semaphore(&f, "T");
  done = qr_semaphore(&f, "done");
  TU_REQUIRE(gate && s && t && done);
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&gate, &qr_one),
                                   gpuhal_semaphore_list_one(&s, &qr_one), NULL, NULL));
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 1, gpuhal_semaphore_list_one(&s, &qr_one),
                                   gpuhal_semaphore_list_one(&t, &qr_one), NULL, NULL));
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&t, &qr_one),
                                   gpuhal_semaphore_list_one(&done, &qr_one), NULL, NULL));
  qc_sleep_ms(20);
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, sizeof(text), NULL));
  TU_CHECK_STR_CONTAINS(text, "gpuhal pending report: 3 operations not done\n");
  TU_CHECK_STR_CONTAINS(text, "waits for semaphore 'gate' >= 1: now 0; nothing queued signals this value");
  TU_CHECK_STR_CONTAINS(text, "no cycle among the operations waiting\n");
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, qt_seconds(QR_WAIT_S)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QR_WAIT_S)));
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(t);
  gpuhal_semaphore_release(done);
  qr_close(&f);
}

TU_TEST(report_finds_no_cycle_in_a_parked_chain) {
  qr_chain_case(0);
  qr_chain_case(-1);
}

/* An operation with 9 waits, only the 9th not reached: the report lists at most 8, those
 * not reached first, so the one holding it up is named with its blocker (#1, a host call
 * on queue 1 behind 'gate'), and the 8 reached ones past the limit are counted. */
static void qr_many_waits_case(int memops) {
  qr_fixture_t f;
  gpuhal_semaphore_t *gate, *reached, *late, *done, *waits[9];
  uint64_t values[9];
  gpuhal_semaphore_list_t wait_list;
  char text[4096];
  uint32_t i;
  if (!qr_open(&f, memops, NULL)) TU_SKIP("no device or test kernels");
  gate = qr_semaphore(&f, "gate");
  reached = qr_semaphore(&f, "reached");
  late = qr_semaphore(&f, "late");
  done = qr_semaphore(&f, "done");
  TU_REQUIRE(gate && reached && late && done);
  TU_CHECK_OK(gpuhal_semaphore_signal(reached, 1));
  for (i = 0; i < 9; ++i) {
    waits[i] = i < 8 ? reached : late;
    values[i] = 1;
  }
  wait_list.count = 9;
  wait_list.semaphores = waits;
  wait_list.values = values;
  TU_CHECK_OK(gpuhal_queue_host_call(f.device, 1, gpuhal_semaphore_list_one(&gate, &qr_one),
                                     gpuhal_semaphore_list_one(&late, &qr_one), qt_host_fn_nop, NULL));
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, wait_list, gpuhal_semaphore_list_one(&done, &qr_one), NULL, NULL));
  qc_sleep_ms(20);
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, sizeof(text), NULL));
  TU_CHECK_STR_CONTAINS(text,
                        "waits for semaphore 'late' >= 1: now 0; to be signalled by #1 host_call (device 0 "
                        "queue 1, waiting)\n");
  TU_CHECK_STR_CONTAINS(text, "      and 1 more waits, reached\n");
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, qt_seconds(QR_WAIT_S)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QR_WAIT_S)));
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(reached);
  gpuhal_semaphore_release(late);
  gpuhal_semaphore_release(done);
  qr_close(&f);
}

TU_TEST(report_lists_waits_not_reached_first) {
  qr_many_waits_case(0);
  qr_many_waits_case(-1);
}

/* A cycle behind an operation's second wait: #2 (queue 0) waits for 'X', which #1 (queue 1)
 * signals once the host opens 'gate', and for 'T', which #3 (queue 0) signals after #2's
 * 'S'. #2 and #3 wait for each other whatever the gate does; the report names that cycle
 * though the first blocker of #2 is #1. `shape` 1: the cycle's wait of #2 is its 9th wait
 * not reached (8 waits on 'X' before it); 2: #2's wait is on the 9th signal of #3. */
static void qr_second_wait_cycle_case(int memops, int shape) {
  qr_fixture_t f;
  gpuhal_semaphore_t *gate, *x, *s, *t, *waits[9], *signals[9], *pads[8];
  uint64_t values[9];
  gpuhal_semaphore_list_t wait_list, signal_list;
  char text[8192];
  gpuhal_status_t st;
  uint32_t i;
  if (!qr_open(&f, memops, NULL)) TU_SKIP("no device or test kernels");
  gate = qr_semaphore(&f, "gate");
  x = qr_semaphore(&f, "X");
  s = qr_semaphore(&f, "S");
  t = qr_semaphore(&f, "T");
  TU_REQUIRE(gate && x && s && t);
  for (i = 0; i < 8; ++i) {
    pads[i] = qr_semaphore(&f, "pad");
    TU_REQUIRE(pads[i]);
    signals[i] = pads[i];
  }
  signals[8] = t;
  for (i = 0; i < 9; ++i) { /* shape 1: X >= 1..8, then T; else X, T */
    waits[i] = shape == 1 ? (i < 8 ? x : t) : (i == 0 ? x : t);
    values[i] = shape == 1 && i < 8 ? i + 1 : 1;
  }
  wait_list.count = shape == 1 ? 9 : 2;
  wait_list.semaphores = waits;
  wait_list.values = values;
  signal_list.count = 9;
  signal_list.semaphores = signals;
  signal_list.values = values;
  TU_CHECK_OK(gpuhal_queue_host_call(f.device, 1, gpuhal_semaphore_list_one(&gate, &qr_one),
                                     gpuhal_semaphore_list_one(&x, &qr_one), qt_host_fn_nop, NULL));
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, wait_list, gpuhal_semaphore_list_one(&s, &qr_one), NULL, NULL));
  if (shape == 2) { /* #3 signals 8 other semaphores, then 'T' */
    for (i = 0; i < 9; ++i) values[i] = 1;
    TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&s, &qr_one), signal_list, NULL, NULL));
  } else {
    TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&s, &qr_one),
                                     gpuhal_semaphore_list_one(&t, &qr_one), NULL, NULL));
  }
  qc_sleep_ms(20);
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, sizeof(text), NULL));
  TU_CHECK_STR_CONTAINS(text,
                        "cycle: #2 barrier (device 0 queue 0) waits for #3 barrier (device 0 queue 0) "
                        "waits for #2 barrier\n");
  /* 'T' failing fails #2's signal at once, though its first wait is not reached (on the
   * default path #2 stays parked on the GPU until 'X' comes). */
  gpuhal_semaphore_fail(t, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "the test ends the cycle"));
  st = gpuhal_semaphore_wait(s, 1, qt_seconds(QR_WAIT_S));
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_CANCELLED);
  gpuhal_status_free(st);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(x, 1, qt_seconds(QR_WAIT_S)));
  TU_CHECK_OK(gpuhal_semaphore_signal(x, 8));
  st = gpuhal_semaphore_wait(s, 1, qt_seconds(QR_WAIT_S));
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_CANCELLED);
  gpuhal_status_free(st);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QR_WAIT_S)));
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(x);
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(t);
  for (i = 0; i < 8; ++i) gpuhal_semaphore_release(pads[i]);
  qr_close(&f);
}

TU_TEST(report_names_a_cycle_behind_a_second_wait) {
  int shape;
  for (shape = 0; shape <= 2; ++shape) {
    qr_second_wait_cycle_case(0, shape);
    qr_second_wait_cycle_case(-1, shape);
  }
}

TU_MAIN(TU_CASE(report_of_a_stall_event_path), TU_CASE(report_of_a_stall_default_path),
        TU_CASE(report_rejects_bad_arguments), TU_CASE(hang_report_logs_once),
        TU_CASE(hang_report_covers_device_wait_idle), TU_CASE(hang_report_is_logged_whole),
        TU_CASE(report_lists_thousands_of_operations), TU_CASE(report_names_a_cycle_of_parked_work),
        TU_CASE(report_finds_no_cycle_in_a_parked_chain), TU_CASE(report_lists_waits_not_reached_first),
        TU_CASE(report_names_a_cycle_behind_a_second_wait))
