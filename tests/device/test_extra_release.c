/* test_extra_release: a public release beyond the application's own references is logged
 * as an error and ignored; it never takes a reference gpuhal holds for work in flight.
 *
 * Each case holds an object through gpuhal (a buffer holds its device, a command buffer
 * its buffers and executables, queued work its semaphores and command buffer, a recorded
 * collective its channel, a device its driver), releases the application's handle twice,
 * then uses what gpuhal still holds and lets it go. Before each object counted the
 * application's references apart, the second release dropped gpuhal's reference: the
 * object was destroyed under the work (a device under its buffer, whose release then hung
 * on the stopped worker; a buffer under a command buffer that still wrote to it). A
 * watchdog (alarm) turns a hang into a failure; SOFTCUDA_LEAKS=fatal and LSan check that
 * everything is really destroyed at the end. */
#include "gpuhal.h"
#include "test_util.h"
#include <pthread.h>
#include <unistd.h>

#define ER_WATCHDOG_SECONDS 120

static gpuhal_timeout_t er_seconds(int s) { return gpuhal_timeout_relative_ns((int64_t)s * 1000000000ll); }

/* The driver's log lines down to INFO, for checking what a release reports. */
typedef struct er_log_s {
  pthread_mutex_t mutex;
  char text[8192];
  int errors;
} er_log_t;

static void er_log_fn(gpuhal_log_level_t level, const char* message, void* user) {
  er_log_t* log = (er_log_t*)user;
  size_t used;
  if (level > GPUHAL_LOG_INFO) return;
  pthread_mutex_lock(&log->mutex);
  used = strlen(log->text);
  snprintf(log->text + used, sizeof(log->text) - used, "%s\n", message);
  if (level == GPUHAL_LOG_ERROR) log->errors++;
  pthread_mutex_unlock(&log->mutex);
}
static int er_errors(er_log_t* log) {
  int n;
  pthread_mutex_lock(&log->mutex);
  n = log->errors;
  pthread_mutex_unlock(&log->mutex);
  return n;
}

typedef struct er_fixture_s {
  er_log_t log;
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
} er_fixture_t;

static int er_open(er_fixture_t* f) {
  gpuhal_driver_options_t options;
  gpuhal_status_t s;
  memset(f, 0, sizeof(*f));
  pthread_mutex_init(&f->log.mutex, NULL);
  memset(&options, 0, sizeof(options));
  options.log_level = GPUHAL_LOG_ERROR;
  options.log_fn = er_log_fn;
  options.log_user = &f->log;
  s = gpuhal_driver_create(&options, &f->driver);
  if (!s) s = gpuhal_device_create(f->driver, 0, NULL, &f->device);
  if (s) {
    fprintf(stderr, "  setup: %s\n", gpuhal_status_message(s));
    gpuhal_status_free(s);
    gpuhal_driver_release(f->driver);
    pthread_mutex_destroy(&f->log.mutex);
    return 0;
  }
  alarm(ER_WATCHDOG_SECONDS); /* a hang ends the test (SIGALRM), it does not stall CTest */
  return 1;
}

static void er_close(er_fixture_t* f) {
  gpuhal_device_release(f->device);
  gpuhal_driver_release(f->driver);
  pthread_mutex_destroy(&f->log.mutex);
  alarm(0);
}

/* The error of the extra release: names the function (and what it released). */
#define ER_CHECK_LOGGED(f, before, func, what)                       \
  do {                                                               \
    TU_CHECK_EQ_INT(er_errors(&(f)->log), (before) + 1);             \
    TU_CHECK_STR_CONTAINS((f)->log.text, func ": " what);            \
    TU_CHECK_STR_CONTAINS((f)->log.text, "this release is ignored"); \
  } while (0)

/* Queue work lets go of what it holds a moment after it completes: waits (bounded) until
 * `gone` says the object is released. */
static int er_until_gone(int (*gone)(void*), void* object) {
  int64_t deadline = gpuhal_now_ns() + 30ll * 1000000000ll;
  while (!gone(object))
    if (gpuhal_now_ns() > deadline)
      return 0;
    else
      tu_sleep_ns(1000000);
  return 1;
}
static int er_buffer_gone(void* b) { return gpuhal_buffer_size((gpuhal_buffer_t*)b) == 0; }
static int er_channel_gone(void* c) { return gpuhal_channel_rank((gpuhal_channel_t*)c) == -1; }

/* Runs `cb` on queue 0 and waits for it. */
static gpuhal_status_t er_run(er_fixture_t* f, gpuhal_command_buffer_t* cb) {
  gpuhal_semaphore_t* s = NULL;
  uint64_t one = 1;
  gpuhal_status_t st = gpuhal_semaphore_create(f->driver, 0, &s);
  if (!st)
    st = gpuhal_queue_execute(f->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one), cb,
                              NULL);
  if (!st) st = gpuhal_semaphore_wait(s, 1, er_seconds(30));
  gpuhal_semaphore_release(s);
  return st;
}

/* The case: device_create, buffer_allocate, device_release twice. */
TU_TEST(device_released_twice_under_a_buffer) {
  er_fixture_t f;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_device_info_t info;
  uint32_t in = 0x1234u, out = 0;
  int before;
  if (!er_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 64, &buffer));
  before = er_errors(&f.log);
  gpuhal_device_release(f.device); /* the application's reference: the buffer keeps the device */
  TU_CHECK_EQ_INT(er_errors(&f.log), before);
  gpuhal_device_release(f.device); /* one too many: refused */
  ER_CHECK_LOGGED(&f, before, "gpuhal_device_release", "device 0");
  /* The device still serves its buffer... */
  TU_CHECK_OK(gpuhal_device_info(f.device, &info));
  TU_CHECK_OK(gpuhal_buffer_write(buffer, 0, &in, 4));
  TU_CHECK_OK(gpuhal_buffer_read(buffer, 0, &out, 4));
  TU_CHECK_EQ_INT(out, in);
  /* ...and goes with it (no hang: the watchdog is armed). */
  gpuhal_buffer_release(buffer);
  TU_CHECK_STATUS(gpuhal_device_info(f.device, &info), GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
  gpuhal_device_release(f.device); /* released and gone: ignored quietly, as every released handle */
  f.device = NULL;
  er_close(&f);
}

/* Retains and releases that balance log nothing. */
TU_TEST(balanced_retains_log_nothing) {
  er_fixture_t f;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_semaphore_t* s = NULL;
  if (!er_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 64, &buffer));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  gpuhal_device_retain(f.device);
  gpuhal_buffer_retain(buffer);
  gpuhal_semaphore_retain(s);
  gpuhal_driver_retain(f.driver);
  gpuhal_device_release(f.device);
  gpuhal_buffer_release(buffer);
  gpuhal_semaphore_release(s);
  gpuhal_driver_release(f.driver);
  gpuhal_buffer_release(buffer);
  gpuhal_semaphore_release(s);
  TU_CHECK_EQ_INT(er_errors(&f.log), 0);
  er_close(&f);
}

/* A command buffer holds the buffers it writes. */
TU_TEST(buffer_released_twice_under_a_command_buffer) {
  er_fixture_t f;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  uint32_t pattern = 0xABCD0123u;
  const uint32_t* host;
  int before;
  if (!er_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_HOST_PINNED, 256, &buffer));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb));
  TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));
  TU_REQUIRE_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buffer, 0), 256, &pattern, 4));
  TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
  host = (const uint32_t*)gpuhal_buffer_host_pointer(buffer);
  before = er_errors(&f.log);
  gpuhal_buffer_release(buffer);
  gpuhal_buffer_release(buffer);
  ER_CHECK_LOGGED(&f, before, "gpuhal_buffer_release", "a buffer");
  /* The handle is released for the application (its getters say so)... */
  TU_CHECK(gpuhal_buffer_host_pointer(buffer) == NULL);
  /* ...but the command buffer's reference kept the memory: the fill lands in it. */
  TU_CHECK_OK(er_run(&f, cb));
  TU_CHECK_EQ_INT(host[63], pattern);
  gpuhal_command_buffer_release(cb); /* the last application reference: the buffer goes with it */
  TU_CHECK(er_until_gone(er_buffer_gone, buffer));
  er_close(&f);
}

/* Queued work holds the semaphores it signals, and the command buffer it executes. */
TU_TEST(semaphore_and_command_buffer_released_twice_while_queued) {
  er_fixture_t f;
  gpuhal_semaphore_t* gate = NULL;
  gpuhal_semaphore_t* signalled = NULL;
  gpuhal_semaphore_t* done = NULL;
  gpuhal_semaphore_t* signals[2];
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  uint64_t one = 1, values[2] = {1, 1}, value = 0;
  uint32_t pattern = 0x55AA55AAu, got = 0;
  int before;
  if (!er_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &signalled));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 64, &buffer));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, 0, 0, &cb));
  TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));
  TU_REQUIRE_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buffer, 0), 64, &pattern, 4));
  TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
  signals[0] = signalled;
  signals[1] = done;
  {
    gpuhal_semaphore_list_t list;
    list.count = 2;
    list.semaphores = signals;
    list.values = values;
    TU_REQUIRE_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&gate, &one), list, cb, NULL));
  }
  before = er_errors(&f.log);
  gpuhal_semaphore_release(signalled);
  gpuhal_semaphore_release(signalled);
  ER_CHECK_LOGGED(&f, before, "gpuhal_semaphore_release", "a semaphore");
  gpuhal_command_buffer_release(cb);
  gpuhal_command_buffer_release(cb);
  ER_CHECK_LOGGED(&f, before + 1, "gpuhal_command_buffer_release", "a command buffer");
  /* The queued work still has both: it runs once the gate opens. */
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, er_seconds(30)));
  TU_CHECK_OK(gpuhal_semaphore_query(done, &value));
  TU_CHECK_EQ_INT(value, 1);
  TU_CHECK_OK(gpuhal_buffer_read(buffer, 60, &got, 4));
  TU_CHECK_EQ_INT(got, pattern);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, er_seconds(30)));
  gpuhal_buffer_release(buffer);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done);
  er_close(&f);
}

/* A command buffer holds the executables whose kernels it dispatches. */
TU_TEST(executable_released_twice_under_a_command_buffer) {
  er_fixture_t f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t args[3];
  uint32_t got = 0;
  size_t size = 0;
  char* ptx;
  int before;
  if (!er_open(&f)) TU_SKIP("no device");
  ptx = tu_read_kernel_file("fill_u32.ptx", &size);
  TU_REQUIRE(ptx != NULL);
  TU_REQUIRE_OK(gpuhal_executable_load(f.device, ptx, size, &exe));
  free(ptx);
  TU_REQUIRE_OK(gpuhal_executable_kernel(exe, "fill_u32", &kernel));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 64 * 4, &buffer));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, 0, 0, &cb));
  TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));
  args[0] = gpuhal_arg_buffer(buffer, 0);
  args[1] = gpuhal_arg_u32(77);
  args[2] = gpuhal_arg_u32(64);
  TU_REQUIRE_OK(gpuhal_cmd_dispatch(cb, kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(64, 1, 1), 0, 3, args));
  TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
  before = er_errors(&f.log);
  gpuhal_executable_release(exe);
  gpuhal_executable_release(exe);
  ER_CHECK_LOGGED(&f, before, "gpuhal_executable_release", "an executable");
  TU_CHECK_OK(er_run(&f, cb));
  TU_CHECK_OK(gpuhal_buffer_read(buffer, 63 * 4, &got, 4));
  TU_CHECK_EQ_INT(got, 77);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buffer);
  er_close(&f);
}

/* A recorded collective holds its channel. */
TU_TEST(channel_released_twice_under_a_command_buffer) {
  er_fixture_t f;
  gpuhal_channel_t* channel = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_collective_t c;
  float in[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
  int before;
  if (!er_open(&f)) TU_SKIP("no device");
  if (!gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_NCCL)) {
    er_close(&f);
    TU_SKIP("NCCL is not loaded");
  }
  TU_REQUIRE_OK(gpuhal_channel_create_local(f.driver, 1, &f.device, &channel));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 256, &buffer));
  TU_REQUIRE_OK(gpuhal_buffer_write(buffer, 0, in, sizeof(in)));
  memset(&c, 0, sizeof(c));
  c.kind = GPUHAL_COLLECTIVE_ALL_REDUCE;
  c.type = GPUHAL_ELEMENT_FLOAT32;
  c.op = GPUHAL_REDUCTION_SUM;
  c.send = gpuhal_ref_buffer(buffer, 0);
  c.recv = gpuhal_ref_buffer(buffer, 128);
  c.count = 4;
  TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb));
  TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));
  TU_REQUIRE_OK(gpuhal_cmd_collective(cb, channel, &c));
  TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
  before = er_errors(&f.log);
  gpuhal_channel_release(channel);
  gpuhal_channel_release(channel);
  ER_CHECK_LOGGED(&f, before, "gpuhal_channel_release", "a channel");
  TU_CHECK_OK(er_run(&f, cb));
  TU_CHECK_OK(gpuhal_buffer_read(buffer, 128, out, sizeof(out)));
  TU_CHECK(out[3] == 4.0f); /* one rank: the sum is the input */
  gpuhal_command_buffer_release(cb);
  TU_CHECK(er_until_gone(er_channel_gone, channel)); /* gone with the command buffer */
  gpuhal_buffer_release(buffer);
  er_close(&f);
}

/* A device holds its driver. */
TU_TEST(driver_released_twice_under_a_device) {
  er_fixture_t f;
  gpuhal_buffer_t* buffer = NULL;
  int before;
  if (!er_open(&f)) TU_SKIP("no device");
  before = er_errors(&f.log);
  gpuhal_driver_release(f.driver);
  gpuhal_driver_release(f.driver);
  ER_CHECK_LOGGED(&f, before, "gpuhal_driver_release", "the driver");
  /* The device still works, and its release ends the driver too. */
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 64, &buffer));
  gpuhal_buffer_release(buffer);
  gpuhal_device_release(f.device);
  TU_CHECK_EQ_INT(gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_PEER_ACCESS) +
                      gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_MEMORY_POOLS),
                  0); /* released: neutral answers */
  f.device = NULL;
  f.driver = NULL;
  er_close(&f);
}

/* The application's last driver release while a buffer it forgot is alive: allowed (the
 * buffer keeps what it needs), with a warning that names what is left; the buffer still
 * works, and its release ends the device and the driver. */
TU_TEST(driver_released_with_a_live_buffer_warns_and_names_it) {
  er_fixture_t f;
  gpuhal_driver_options_t options;
  gpuhal_buffer_t *buffer = NULL, *other = NULL;
  if (!er_open(&f)) TU_SKIP("no device");
  er_close(&f);
  memset(&f, 0, sizeof(f));
  pthread_mutex_init(&f.log.mutex, NULL);
  memset(&options, 0, sizeof(options));
  options.log_level = GPUHAL_LOG_INFO;
  options.log_fn = er_log_fn;
  options.log_user = &f.log;
  TU_REQUIRE_OK(gpuhal_driver_create(&options, &f.driver));
  TU_REQUIRE_OK(gpuhal_device_create(f.driver, 0, NULL, &f.device));
  alarm(ER_WATCHDOG_SECONDS);
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 64, &buffer));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 64, &other));
  gpuhal_buffer_release(other); /* released ones are not counted */
  gpuhal_device_release(f.device);
  gpuhal_driver_release(f.driver);
  TU_CHECK_EQ_INT(er_errors(&f.log), 0);
  TU_CHECK_STR_CONTAINS(f.log.text, "gpuhal_driver_release: objects made with this driver are still alive");
  TU_CHECK_STR_CONTAINS(f.log.text, "1 gpuhal_buffer_t");
  TU_CHECK_STR_CONTAINS(f.log.text, "1 gpuhal_device_t");
  TU_CHECK_EQ_INT(gpuhal_buffer_size(buffer), 64);
  gpuhal_buffer_release(buffer);
  TU_CHECK_EQ_INT(gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_MEMORY_POOLS), 0); /* gone */
  f.device = NULL;
  f.driver = NULL;
  er_close(&f);
}

/* Three threads release one application reference of each object at once: one release
 * wins, the others are refused (logged, or ignored once the object is gone), nothing
 * crashes, and the TSan build sees no race between the winner's free and a loser's check
 * (the free wrote the counts with plain stores while the loser read them atomically). */
enum { ER_RACERS = 3, ER_RACE_ROUNDS = 40 };
typedef struct er_race_s {
  pthread_barrier_t start;
  gpuhal_semaphore_t* semaphore;
  gpuhal_buffer_t* buffer;
  gpuhal_command_buffer_t* command_buffer;
} er_race_t;
static void* er_racer_main(void* p) {
  er_race_t* r = (er_race_t*)p;
  pthread_barrier_wait(&r->start);
  gpuhal_semaphore_release(r->semaphore);
  gpuhal_command_buffer_release(r->command_buffer);
  gpuhal_buffer_release(r->buffer);
  return NULL;
}

TU_TEST(releases_racing_from_three_threads) {
  er_fixture_t f;
  er_race_t r;
  pthread_t threads[ER_RACERS];
  int round, i;
  if (!er_open(&f)) TU_SKIP("no device");
  for (round = 0; round < ER_RACE_ROUNDS && !tu_state.failed; ++round) {
    memset(&r, 0, sizeof(r));
    TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &r.semaphore));
    TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 256, &r.buffer));
    TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_GRAPH, 0, &r.command_buffer));
    pthread_barrier_init(&r.start, NULL, ER_RACERS);
    for (i = 0; i < ER_RACERS; ++i) TU_REQUIRE(pthread_create(&threads[i], NULL, er_racer_main, &r) == 0);
    for (i = 0; i < ER_RACERS; ++i) pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&r.start);
    TU_CHECK(gpuhal_buffer_size(r.buffer) == 0); /* released: the winner's */
  }
  TU_CHECK(er_errors(&f.log) <= (ER_RACERS - 1) * 3 * ER_RACE_ROUNDS);
  er_close(&f);
}

TU_MAIN(TU_CASE(device_released_twice_under_a_buffer), TU_CASE(releases_racing_from_three_threads),
        TU_CASE(balanced_retains_log_nothing), TU_CASE(buffer_released_twice_under_a_command_buffer),
        TU_CASE(semaphore_and_command_buffer_released_twice_while_queued),
        TU_CASE(driver_released_with_a_live_buffer_warns_and_names_it),
        TU_CASE(executable_released_twice_under_a_command_buffer),
        TU_CASE(channel_released_twice_under_a_command_buffer), TU_CASE(driver_released_twice_under_a_device))
