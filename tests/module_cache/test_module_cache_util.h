/* test_module_cache_util.h - helpers of the module cache tests (include after gpuhal.h with
 * GPUHAL_IMPLEMENTATION and test_util.h): devices with cache params, running the generated
 * gen_add_<k> kernels and checking their results, the softcuda counters, a log capture,
 * temporary directories, and child processes (the same test binary in a child mode). */
#ifndef GPUHAL_TEST_MODULE_CACHE_UTIL_H
#define GPUHAL_TEST_MODULE_CACHE_UTIL_H

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/gen_modules.h"
#include "test_temp_dir.h"

#pragma GCC diagnostic ignored "-Wunused-function"

#define MC_N 256 /* elements each kernel run touches */

/* ---- log capture (the driver's log_fn) ---- */
static pthread_mutex_t mc_log_mutex = PTHREAD_MUTEX_INITIALIZER;
static char mc_log_text[65536];
static size_t mc_log_used;

static void mc_log_fn(gpuhal_log_level_t level, const char* message, void* user) {
  size_t n = strlen(message);
  (void)user;
  (void)level;
  pthread_mutex_lock(&mc_log_mutex);
  if (mc_log_used + n + 2 < sizeof(mc_log_text)) {
    memcpy(mc_log_text + mc_log_used, message, n);
    mc_log_used += n;
    mc_log_text[mc_log_used++] = '\n';
    mc_log_text[mc_log_used] = 0;
  }
  pthread_mutex_unlock(&mc_log_mutex);
}
static void mc_log_clear(void) {
  pthread_mutex_lock(&mc_log_mutex);
  mc_log_used = 0;
  mc_log_text[0] = 0;
  pthread_mutex_unlock(&mc_log_mutex);
}
static int mc_log_contains(const char* needle) {
  int yes;
  pthread_mutex_lock(&mc_log_mutex);
  yes = strstr(mc_log_text, needle) != NULL;
  pthread_mutex_unlock(&mc_log_mutex);
  return yes;
}

/* A driver that logs at debug level into the capture (NULL on failure, reported). */
static gpuhal_driver_t* mc_driver(void) {
  gpuhal_driver_options_t options;
  gpuhal_driver_t* driver = NULL;
  gpuhal_status_t st;
  int count = 0;
  memset(&options, 0, sizeof(options));
  options.log_level = GPUHAL_LOG_DEBUG;
  options.log_fn = mc_log_fn;
  /* The counts below are the tests' own modules: on the memop path each device also loads
   * gpuhal's built-in kernels at creation (one more entry). */
  setenv("GPUHAL_SEMAPHORE_MEMOPS", "0", 1);
  st = gpuhal_driver_create(&options, &driver);
  if (!st) st = gpuhal_driver_device_count(driver, &count);
  if (st) {
    fprintf(stderr, "  driver: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    gpuhal_driver_release(driver);
    return NULL;
  }
  if (count == 0) {
    gpuhal_driver_release(driver);
    return NULL;
  }
  return driver;
}

static int mc_device_count(gpuhal_driver_t* driver) {
  int count = 0;
  gpuhal_status_free(gpuhal_driver_device_count(driver, &count));
  return count;
}

/* A device with an empty params struct but for the cache directory ("" = no disk). */
static gpuhal_device_params_t mc_params(const char* dir) {
  gpuhal_device_params_t p;
  memset(&p, 0, sizeof(p));
  p.module_cache_dir = dir ? dir : "";
  return p;
}

static gpuhal_device_t* mc_device(gpuhal_driver_t* driver, int ordinal, const gpuhal_device_params_t* params) {
  gpuhal_device_t* device = NULL;
  gpuhal_status_t st = gpuhal_device_create(driver, ordinal, params, &device);
  if (st) {
    fprintf(stderr, "  device %d: %s\n", ordinal, gpuhal_status_message(st));
    gpuhal_status_free(st);
    return NULL;
  }
  return device;
}

static gpuhal_module_cache_stats_t mc_stats(gpuhal_device_t* device) {
  gpuhal_module_cache_stats_t s;
  gpuhal_status_t st = gpuhal_device_module_cache_stats(device, &s);
  if (st) {
    fprintf(stderr, "  stats: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    memset(&s, 0, sizeof(s));
  }
  return s;
}

/* Loads module (k, variant). */
static gpuhal_status_t mc_load(gpuhal_device_t* device, unsigned k, unsigned variant, gpuhal_executable_t** out) {
  char ptx[4096];
  int n = gen_module_ptx(k, variant, ptx, sizeof(ptx));
  return gpuhal_executable_load(device, ptx, (size_t)n, out);
}

/* Runs gen_add_<k> of `exe` over MC_N elements holding i * 3 and checks each became
 * i * 3 + k. NULL or what went wrong. */
static gpuhal_status_t mc_run_check(gpuhal_device_t* device, gpuhal_executable_t* exe, unsigned k) {
  gpuhal_driver_t* driver = gpuhal_device_driver(device);
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t* sem = NULL;
  unsigned host[MC_N];
  char name[32];
  uint64_t one = 1;
  unsigned i;
  gpuhal_arg_t args[2];
  gpuhal_status_t st;
  for (i = 0; i < MC_N; ++i) host[i] = i * 3;
  snprintf(name, sizeof(name), "gen_add_%u", k);
  st = gpuhal_executable_kernel(exe, name, &kernel);
  if (!st) st = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(host), &buffer);
  if (!st) st = gpuhal_buffer_write(buffer, 0, host, sizeof(host));
  if (!st) st = gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &cb);
  if (!st) st = gpuhal_command_buffer_begin(cb);
  args[0] = gpuhal_arg_buffer(buffer, 0);
  args[1] = gpuhal_arg_u32(MC_N);
  if (!st) st = gpuhal_cmd_dispatch(cb, kernel, gpuhal_dim3(MC_N / 64, 1, 1), gpuhal_dim3(64, 1, 1), 0, 2, args);
  if (!st) st = gpuhal_command_buffer_end(cb);
  if (!st) st = gpuhal_semaphore_create(driver, 0, &sem);
  if (!st)
    st =
        gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &one), cb, NULL);
  if (!st) st = gpuhal_semaphore_wait(sem, 1, gpuhal_timeout_relative_ns(60ll * 1000000000ll));
  if (!st) st = gpuhal_buffer_read(buffer, 0, host, sizeof(host));
  for (i = 0; !st && i < MC_N; ++i)
    if (host[i] != i * 3 + k)
      st = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "gen_add_%u: element %u is %u, expected %u", k, i, host[i],
                              i * 3 + k);
  gpuhal_semaphore_release(sem);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buffer);
  /* The queue lets go of what the run held (the command buffer, and through it the
   * executable) once idle: after this the caller's references are the only ones. */
  if (!st) st = gpuhal_device_wait_idle(device, gpuhal_timeout_relative_ns(60ll * 1000000000ll));
  return st;
}

/* ---- softcuda counters (NULL functions on a real driver) ---- */
typedef unsigned long long (*mc_calls_fn)(const char*);
typedef unsigned long long (*mc_violations_fn)(int);
static unsigned long long mc_calls(const char* entry) {
  mc_calls_fn fn;
  *(void**)&fn = tu_softcuda_symbol("softcuda_query_calls");
  return fn ? fn(entry) : 0;
}
static unsigned long long mc_violations(void) {
  mc_violations_fn fn;
  *(void**)&fn = tu_softcuda_symbol("softcuda_query_violations");
  return fn ? fn(0) : 0;
}

/* Cache files (*.gpuhal) in dir: count, total bytes, the first name. */
static int mc_dir_files(const char* dir, unsigned long long* total_bytes, char* first, size_t first_size) {
  DIR* d = opendir(dir);
  struct dirent* de;
  int count = 0;
  if (total_bytes) *total_bytes = 0;
  if (!d) return 0;
  while ((de = readdir(d)) != NULL) {
    size_t n = strlen(de->d_name);
    struct stat st;
    char path[4096];
    if (n < 7 || strcmp(de->d_name + n - 7, ".gpuhal") != 0) continue;
    snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
    if (stat(path, &st) != 0) continue;
    if (count == 0 && first) snprintf(first, first_size, "%s", path);
    if (total_bytes) *total_bytes += (unsigned long long)st.st_size;
    ++count;
  }
  closedir(d);
  return count;
}

/* ---- child processes: this binary again, in a child mode ---- */
static char mc_self[4096];
static void mc_remember_self(const char* argv0) {
  ssize_t n = readlink("/proc/self/exe", mc_self, sizeof(mc_self) - 1);
  if (n > 0) {
    mc_self[n] = 0;
  } else {
    snprintf(mc_self, sizeof(mc_self), "%s", argv0);
  }
}

/* Starts `self --child <args...>`; returns the pid (or -1). */
static pid_t mc_spawn(const char* const* args, int count) {
  char* argv[16];
  int i;
  pid_t pid;
  if (count > 13) return -1;
  argv[0] = mc_self;
  argv[1] = (char*)"--child";
  for (i = 0; i < count; ++i) argv[2 + i] = (char*)args[i];
  argv[2 + count] = NULL;
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if (pid == 0) {
    execv(mc_self, argv);
    _exit(127);
  }
  return pid;
}

static int mc_wait(pid_t pid) {
  int status = 0;
  if (pid <= 0) return -1;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif /* GPUHAL_TEST_MODULE_CACHE_UTIL_H */
