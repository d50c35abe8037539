/* bench_module_cache: the module cache against the CUDA driver's own JIT and JIT cache.
 *
 * For a generated PTX module of >= 100 KB (tests/kernels/gen_modules.h: 40 kernels, each a
 * chain of 64 dependent fma), each in a fresh process (this binary in a child mode):
 *   cold JIT            raw cuModuleLoadDataEx, CUDA_CACHE_DISABLE=1
 *   gpuhal cold         gpuhal_executable_load with an empty disk cache: cuLink + store
 *   gpuhal disk hit     gpuhal_executable_load, the file present (CUDA_CACHE_DISABLE=1)
 *   driver cache hit    raw cuModuleLoadDataEx, CUDA_CACHE_PATH=<fresh dir> filled once
 * then, in this process, the in-memory hit (gpuhal_executable_load + release of a loaded
 * image) for the big module and a small one, in ns.
 * Targets: disk hit >= 100x faster than cold JIT, and no slower than the driver cache.
 *
 *   ./bench/bench_module_cache [repeats]        (5 fresh processes per hit measurement)
 * Timings mean something on a GPU only (softcuda has no JIT cost and no JIT cache). */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/gen_modules.h"

#define BIG_ENTRIES 40
#define BIG_CHAIN 64

static char bench_self[4096];

static void die(const char* what, gpuhal_status_t st) {
  fprintf(stderr, "bench_module_cache: %s: %s\n", what, gpuhal_status_message(st));
  exit(1);
}

static gpuhal_device_t* open_device(gpuhal_driver_t** out_driver, const char* cache_dir) {
  gpuhal_device_params_t params;
  gpuhal_device_t* device = NULL;
  gpuhal_status_t st = gpuhal_driver_create(NULL, out_driver);
  memset(&params, 0, sizeof(params));
  params.module_cache_dir = cache_dir ? cache_dir : "";
  if (!st) st = gpuhal_device_create(*out_driver, 0, &params, &device);
  if (st) die("opening device 0", st);
  return device;
}

/* ---- child: one measurement in a fresh process; prints "RESULT <ns>" ---- */
static int child_main(const char* mode, const char* dir) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device;
  size_t size = 0;
  char* ptx = gen_big_ptx(BIG_ENTRIES, BIG_CHAIN, &size);
  int64_t t0, t1;
  if (!strcmp(mode, "raw")) {
    /* the driver JIT (its cache on or off per CUDA_CACHE_* in the environment) */
    gpuhal__context_scope_t scope;
    CUmodule module = NULL;
    gpuhal_status_t st;
    device = open_device(&driver, NULL);
    st = gpuhal__context_enter(device, &scope);
    if (st) die("context", st);
    t0 = gpuhal_now_ns();
    st = GPUHAL__CU(device->cu, cuModuleLoadDataEx, (&module, ptx, 0, NULL, NULL));
    t1 = gpuhal_now_ns();
    if (st) die("cuModuleLoadDataEx", st);
    device->cu->cuModuleUnload(module);
    gpuhal__context_leave(device, &scope);
  } else {
    /* gpuhal through its disk cache in `dir` ("cold": expect a compile; "hit": a disk hit) */
    gpuhal_executable_t* exe = NULL;
    gpuhal_module_cache_stats_t s;
    gpuhal_status_t st;
    device = open_device(&driver, dir);
    t0 = gpuhal_now_ns();
    st = gpuhal_executable_load(device, ptx, size, &exe);
    t1 = gpuhal_now_ns();
    if (st) die("gpuhal_executable_load", st);
    st = gpuhal_device_module_cache_stats(device, &s);
    if (st) die("stats", st);
    if (!strcmp(mode, "hit") && s.disk_hits != 1) {
      fprintf(stderr, "bench_module_cache: expected a disk hit (disk_enabled %d, rejects %llu)\n", s.disk_enabled,
              (unsigned long long)s.disk_rejects);
      return 1;
    }
    gpuhal_executable_release(exe);
  }
  printf("RESULT %lld\n", (long long)(t1 - t0));
  fflush(stdout);
  free(ptx);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  return 0;
}

/* Runs `self --child mode dir` with extra environment; returns its RESULT in ns (or -1). */
static int64_t run_child(const char* mode, const char* dir, const char* env_name, const char* env_value,
                         int disable_driver_cache) {
  int fds[2];
  pid_t pid;
  char output[4096];
  size_t used = 0;
  ssize_t n;
  int status = 0;
  long long ns = -1;
  const char* found;
  if (pipe(fds) != 0) return -1;
  fflush(stdout);
  pid = fork();
  if (pid == 0) {
    char* argv[5];
    close(fds[0]);
    dup2(fds[1], 1);
    unsetenv("GPUHAL_CACHE_DIR");
    if (disable_driver_cache)
      setenv("CUDA_CACHE_DISABLE", "1", 1);
    else
      unsetenv("CUDA_CACHE_DISABLE");
    if (env_name) setenv(env_name, env_value, 1);
    argv[0] = bench_self;
    argv[1] = (char*)"--child";
    argv[2] = (char*)mode;
    argv[3] = (char*)(dir ? dir : "");
    argv[4] = NULL;
    execv(bench_self, argv);
    _exit(127);
  }
  close(fds[1]);
  while (used + 1 < sizeof(output) && (n = read(fds[0], output + used, sizeof(output) - 1 - used)) > 0)
    used += (size_t)n;
  output[used] = 0;
  close(fds[0]);
  waitpid(pid, &status, 0);
  found = strstr(output, "RESULT ");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !found || sscanf(found, "RESULT %lld", &ns) != 1) {
    fprintf(stderr, "bench_module_cache: child '%s' failed (status %d)\n", mode, status);
    return -1;
  }
  return (int64_t)ns;
}

static int cmp_i64(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return x < y ? -1 : x > y;
}

static int64_t median_of_children(int repeats, const char* mode, const char* dir, const char* env_name,
                                  const char* env_value, int disable_driver_cache) {
  int64_t t[64];
  int i;
  if (repeats > 64) repeats = 64;
  for (i = 0; i < repeats; ++i) {
    t[i] = run_child(mode, dir, env_name, env_value, disable_driver_cache);
    if (t[i] < 0) return -1;
  }
  qsort(t, (size_t)repeats, sizeof(t[0]), cmp_i64);
  return t[repeats / 2];
}

/* ns per in-memory hit: gpuhal_executable_load + gpuhal_executable_release of a loaded image. */
static double hit_ns(gpuhal_device_t* device, const char* image, size_t size, int iterations) {
  gpuhal_executable_t* first = NULL;
  gpuhal_status_t st = gpuhal_executable_load(device, image, size, &first);
  int64_t t0;
  int i;
  if (st) die("loading for the hit loop", st);
  t0 = gpuhal_now_ns();
  for (i = 0; i < iterations; ++i) {
    gpuhal_executable_t* exe = NULL;
    st = gpuhal_executable_load(device, image, size, &exe);
    if (st) die("hit", st);
    gpuhal_executable_release(exe);
  }
  t0 = gpuhal_now_ns() - t0;
  gpuhal_executable_release(first);
  return (double)t0 / iterations;
}

static void remove_tree_flat(const char* dir) {
  char command[4200];
  snprintf(command, sizeof(command), "rm -rf '%s'", dir);
  if (system(command) != 0) fprintf(stderr, "bench_module_cache: could not remove %s\n", dir);
}

int main(int argc, char** argv) {
  char gpuhal_dir[] = "/tmp/gpuhal_bench_mc_XXXXXX";
  char cuda_dir[] = "/tmp/gpuhal_bench_cuda_XXXXXX";
  int repeats = 5;
  size_t big_size = 0;
  char* big;
  char small[4096];
  int small_size;
  int64_t cold, gpuhal_cold, gpuhal_hit, driver_fill, driver_hit;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device;
  double big_hit, small_hit;
  const char* lib = getenv("GPUHAL_CUDA_LIBRARY");
  ssize_t n = readlink("/proc/self/exe", bench_self, sizeof(bench_self) - 1);
  if (n > 0)
    bench_self[n] = 0;
  else
    snprintf(bench_self, sizeof(bench_self), "%s", argv[0]);
  if (argc >= 4 && !strcmp(argv[1], "--child")) return child_main(argv[2], argv[3]);
  if (argc >= 2) repeats = atoi(argv[1]) > 0 ? atoi(argv[1]) : 5;
  big = gen_big_ptx(BIG_ENTRIES, BIG_CHAIN, &big_size);
  small_size = gen_module_ptx(1, 0, small, sizeof(small));
  if (!mkdtemp(gpuhal_dir) || !mkdtemp(cuda_dir)) {
    perror("mkdtemp");
    return 1;
  }
  printf("bench_module_cache: PTX module of %zu bytes (%d kernels x %d fma), driver %s%s\n", big_size, BIG_ENTRIES,
         BIG_CHAIN, lib && lib[0] ? lib : "libcuda.so.1",
         lib && strstr(lib, "softcuda") ? " (softcuda: these timings mean nothing)" : "");

  cold = median_of_children(repeats, "raw", NULL, NULL, NULL, 1);
  gpuhal_cold = run_child("cold", gpuhal_dir, NULL, NULL, 1);
  gpuhal_hit = median_of_children(repeats, "hit", gpuhal_dir, NULL, NULL, 1);
  driver_fill = run_child("raw", NULL, "CUDA_CACHE_PATH", cuda_dir, 0);
  driver_hit = median_of_children(repeats, "raw", NULL, "CUDA_CACHE_PATH", cuda_dir, 0);
  if (cold < 0 || gpuhal_cold < 0 || gpuhal_hit < 0 || driver_fill < 0 || driver_hit < 0) return 1;

  device = open_device(&driver, NULL);
  big_hit = hit_ns(device, big, big_size, 2000);
  small_hit = hit_ns(device, small, (size_t)small_size, 200000);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);

  printf("  fresh process, median of %d:\n", repeats);
  printf("    cold JIT (driver, CUDA_CACHE_DISABLE=1)      %10.3f ms\n", cold / 1e6);
  printf("    gpuhal cold (cuLink + disk store), once       %10.3f ms\n", gpuhal_cold / 1e6);
  printf("    gpuhal disk-cache hit                        %10.3f ms   %.0fx faster than cold JIT\n", gpuhal_hit / 1e6,
         (double)cold / (double)gpuhal_hit);
  printf("    driver JIT cache: fill once                  %10.3f ms\n", driver_fill / 1e6);
  printf("    driver JIT cache hit (CUDA_CACHE_PATH)       %10.3f ms   gpuhal/driver = %.2f\n", driver_hit / 1e6,
         (double)gpuhal_hit / (double)driver_hit);
  printf("  in process (load + release of a cached image):\n");
  printf("    %zu-byte module hit                        %10.0f ns\n", big_size, big_hit);
  printf("    %d-byte module hit                           %10.0f ns\n", small_size, small_hit);
  printf("  targets: disk hit >= 100x faster than cold JIT: %s; no slower than the driver cache: %s\n",
         (double)cold / (double)gpuhal_hit >= 100.0 ? "met" : "NOT met", gpuhal_hit <= driver_hit ? "met" : "NOT met");
  free(big);
  remove_tree_flat(gpuhal_dir);
  remove_tree_flat(cuda_dir);
  return 0;
}
