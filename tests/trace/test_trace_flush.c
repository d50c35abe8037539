/* Flushing the trace (src/trace.h) while others do too: four threads flushing one driver
 * during queue work, two drivers of one process tracing to one path, two processes tracing
 * to one path. Every flush succeeds, a reader polling the file meanwhile only ever finds
 * a whole, valid JSON trace, the file is valid at the end, and no temporary file is left
 * beside it. (Flushes used to share one "<path>.tmp": concurrent ones failed with "No such
 * file or directory" when another had renamed it away, or renamed a mix of two writes.) */
#include "gpuhal.h"

#include "test_util.h"
#include "test_trace_json.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

enum { TF_FLUSH_THREADS = 4, TF_FLUSHES = 40, TF_OPS = 300 };
#define TF_WAIT_NS (60ll * 1000000000ll)

static void tf_path(char* path, size_t size, const char* what) {
  const char* base = getenv("TMPDIR");
  snprintf(path, size, "%s/gpuhal_test_trace_flush_%ld_%s.json", base && base[0] ? base : "/tmp", (long)getpid(), what);
}

static gpuhal_status_t tf_driver(const char* path, gpuhal_driver_t** out) {
  gpuhal_driver_options_t options;
  memset(&options, 0, sizeof(options));
  options.trace_path = path;
  return gpuhal_driver_create(&options, out);
}

/* Temporary files of `path` left in its directory ("<name>.tmp.*"). */
static int tf_leftover_temps(const char* path) {
  char dir[512], prefix[512];
  const char* slash = strrchr(path, '/');
  DIR* d;
  struct dirent* de;
  int count = 0;
  snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
  snprintf(prefix, sizeof(prefix), "%s.tmp.", slash + 1);
  d = opendir(dir);
  if (!d) return -1;
  while ((de = readdir(d)) != NULL) count += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return count;
}

/* Parses the file as a whole trace; NULL or what is wrong (a static buffer: one thread). */
static const char* tf_check_file(const char* path) {
  tt_trace t;
  const char* why = tt_load(path, &t);
  if (!why) why = tt_check_order_and_nesting(&t);
  tt_free(&t);
  return why;
}

/* ---- threads: flushers and a reader ---- */
typedef struct tf_shared {
  gpuhal_driver_t* drivers[2];
  int driver_count;
  const char* path;
  int stop;      /* atomic: the reader stops */
  int failures;  /* atomic: failed flushes */
  int bad_reads; /* reader: files that were not whole traces */
  int reads;
  char first_error[256];
  pthread_mutex_t mutex;
} tf_shared;

typedef struct tf_flusher {
  tf_shared* shared;
  gpuhal_driver_t* driver;
} tf_flusher;

static void tf_note(tf_shared* sh, const char* what) {
  pthread_mutex_lock(&sh->mutex);
  if (!sh->first_error[0]) snprintf(sh->first_error, sizeof(sh->first_error), "%s", what);
  pthread_mutex_unlock(&sh->mutex);
}

static void* tf_flush_main(void* arg) {
  tf_flusher* f = (tf_flusher*)arg;
  int i;
  for (i = 0; i < TF_FLUSHES; ++i) {
    gpuhal_status_t st = gpuhal_driver_trace_flush(f->driver);
    if (st) {
      __atomic_add_fetch(&f->shared->failures, 1, __ATOMIC_RELAXED);
      tf_note(f->shared, gpuhal_status_message(st));
      gpuhal_status_free(st);
    }
  }
  return NULL;
}

/* Reads the file over and over while flushes replace it: each read must be one whole
 * JSON value (rename publishes whole files only). */
static void* tf_read_main(void* arg) {
  tf_shared* sh = (tf_shared*)arg;
  while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
    const char* error = NULL;
    tj_value* v = tj_parse_file(sh->path, &error);
    sh->reads++;
    if (!v) {
      sh->bad_reads++;
      tf_note(sh, error ? error : "not JSON");
    }
    tj_free(v);
    tu_sleep_ns(200000);
  }
  return NULL;
}

/* Queue work on `device` that the flushes snapshot while it runs: a chain of barriers and
 * host calls ordered by one semaphore. */
static gpuhal_status_t tf_host_fn(void* user) {
  __atomic_add_fetch((int*)user, 1, __ATOMIC_RELAXED);
  return NULL;
}
static int tf_work(gpuhal_device_t* device, gpuhal_semaphore_t* sem, int* host_calls) {
  uint64_t v;
  int failures = 0;
  for (v = 1; v <= TF_OPS; ++v) {
    uint64_t prev = v - 1;
    gpuhal_semaphore_list_t wait = gpuhal_semaphore_list_one(&sem, &prev);
    gpuhal_semaphore_list_t signal = gpuhal_semaphore_list_one(&sem, &v);
    gpuhal_status_t st = (v % 4 == 0) ? gpuhal_queue_host_call(device, 0, wait, signal, tf_host_fn, host_calls)
                                      : gpuhal_queue_execute(device, 0, wait, signal, NULL, NULL);
    if (st) {
      fprintf(stderr, "  submit %llu: %s\n", (unsigned long long)v, gpuhal_status_message(st));
      gpuhal_status_free(st);
      failures++;
      break;
    }
  }
  if (gpuhal_semaphore_wait(sem, TF_OPS, gpuhal_timeout_relative_ns(TF_WAIT_NS)) != NULL) failures++;
  return failures;
}

/* Runs the flushers (TF_FLUSH_THREADS spread over the drivers) and the reader while each
 * driver's device does its work; 0 or the number of problems (reported). */
static int tf_run(tf_shared* sh) {
  pthread_t flush_threads[TF_FLUSH_THREADS], reader;
  tf_flusher flushers[TF_FLUSH_THREADS];
  gpuhal_device_t* devices[2] = {NULL, NULL};
  gpuhal_semaphore_t* sems[2] = {NULL, NULL};
  int host_calls = 0, problems = 0, i;
  for (i = 0; i < sh->driver_count; ++i) {
    gpuhal_status_t st = gpuhal_device_create(sh->drivers[i], 0, NULL, &devices[i]);
    if (!st) st = gpuhal_semaphore_create(sh->drivers[i], 0, &sems[i]);
    if (st) {
      fprintf(stderr, "  set-up: %s\n", gpuhal_status_message(st));
      gpuhal_status_free(st);
      problems++;
    }
  }
  pthread_mutex_init(&sh->mutex, NULL);
  if (!problems) {
    pthread_create(&reader, NULL, tf_read_main, sh);
    for (i = 0; i < TF_FLUSH_THREADS; ++i) {
      flushers[i].shared = sh;
      flushers[i].driver = sh->drivers[i % sh->driver_count];
      pthread_create(&flush_threads[i], NULL, tf_flush_main, &flushers[i]);
    }
    for (i = 0; i < sh->driver_count; ++i) problems += tf_work(devices[i], sems[i], &host_calls);
    for (i = 0; i < TF_FLUSH_THREADS; ++i) pthread_join(flush_threads[i], NULL);
    __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
    pthread_join(reader, NULL);
    if (__atomic_load_n(&host_calls, __ATOMIC_RELAXED) != sh->driver_count * (TF_OPS / 4)) problems++;
  }
  for (i = 0; i < sh->driver_count; ++i) {
    gpuhal_semaphore_release(sems[i]);
    gpuhal_device_release(devices[i]);
  }
  if (sh->failures || sh->bad_reads) {
    fprintf(stderr, "  %d failed flushes, %d of %d reads not a whole trace; first: %s\n", sh->failures, sh->bad_reads,
            sh->reads, sh->first_error);
    problems++;
  }
  pthread_mutex_destroy(&sh->mutex);
  return problems;
}

/* A driver, its flushers and reader, and the checks after it goes: 0 or problems. */
static int tf_one_driver_run(const char* path) {
  tf_shared sh;
  const char* why;
  int problems;
  memset(&sh, 0, sizeof(sh));
  sh.path = path;
  sh.driver_count = 1;
  if (tf_driver(path, &sh.drivers[0]) != NULL) return 1;
  problems = tf_run(&sh);
  why = tf_check_file(path); /* before the release's own flush, too */
  if (why) fprintf(stderr, "  during the run: %s\n", why), problems++;
  gpuhal_driver_release(sh.drivers[0]);
  return problems;
}

TU_TEST(four_threads_flush_during_work) {
  char path[512];
  int run;
  const char* why;
  tf_path(path, sizeof(path), "threads");
  for (run = 0; run < 3; ++run) {
    TU_CHECK_EQ_INT(tf_one_driver_run(path), 0);
    why = tf_check_file(path);
    if (why) TU_FAIL_AT(__FILE__, __LINE__, "run %d: %s", run, why);
    TU_CHECK_EQ_INT(tf_leftover_temps(path), 0);
  }
  remove(path);
}

TU_TEST(two_drivers_one_path) {
  char path[512];
  tf_shared sh;
  const char* why;
  tf_path(path, sizeof(path), "drivers");
  memset(&sh, 0, sizeof(sh));
  sh.path = path;
  sh.driver_count = 2;
  TU_REQUIRE_OK(tf_driver(path, &sh.drivers[0]));
  TU_CHECK_OK(tf_driver(path, &sh.drivers[1]));
  if (!sh.drivers[1]) {
    gpuhal_driver_release(sh.drivers[0]);
    return;
  }
  TU_CHECK_EQ_INT(tf_run(&sh), 0);
  gpuhal_driver_release(sh.drivers[0]);
  gpuhal_driver_release(sh.drivers[1]);
  why = tf_check_file(path);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  TU_CHECK_EQ_INT(tf_leftover_temps(path), 0);
  remove(path);
}

/* Waits for a child for at most TF_WAIT_NS (then kills it): its exit code, or -1. */
static int tf_wait_child(pid_t pid) {
  int64_t deadline = gpuhal_now_ns() + TF_WAIT_NS;
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -1;
    if (gpuhal_now_ns() > deadline) {
      fprintf(stderr, "  child %ld still running after %lld s: killed\n", (long)pid, TF_WAIT_NS / 1000000000ll);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    tu_sleep_ns(5000000);
  }
}

TU_TEST(two_processes_one_path) {
  char path[512];
  const char* why;
  pid_t child;
  int mine;
  tf_path(path, sizeof(path), "processes");
  fflush(stdout);
  fflush(stderr);
  /* Fork before either side has a driver (no gpuhal thread is copied). */
  child = fork();
  TU_REQUIRE(child >= 0);
  if (child == 0) _exit(tf_one_driver_run(path) ? 1 : 0);
  mine = tf_one_driver_run(path);
  TU_CHECK_EQ_INT(mine, 0);
  TU_CHECK_EQ_INT(tf_wait_child(child), 0);
  why = tf_check_file(path);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  TU_CHECK_EQ_INT(tf_leftover_temps(path), 0);
  remove(path);
}

/* The two-process case runs first: a real CUDA driver does not work in a child forked
 * after the parent initialized it, and the other cases do. */
TU_MAIN(TU_CASE(two_processes_one_path), TU_CASE(four_threads_flush_during_work), TU_CASE(two_drivers_one_path))
