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
 * The two hits run in alternating pairs (their ratio per pair is printed), then a disk hit
 * is taken apart step by step in fresh processes (the breakdown child).
 * Targets: disk hit >= 100x faster than cold JIT, and <= 0.9x the driver cache's hit.
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
    gpuhal_module_cache_stats_t before, s;
    gpuhal_status_t st;
    device = open_device(&driver, dir);
    /* The device's own built-in kernels may have come from the disk cache already. */
    st = gpuhal_device_module_cache_stats(device, &before);
    if (st) die("stats", st);
    t0 = gpuhal_now_ns();
    st = gpuhal_executable_load(device, ptx, size, &exe);
    t1 = gpuhal_now_ns();
    if (st) die("gpuhal_executable_load", st);
    st = gpuhal_device_module_cache_stats(device, &s);
    if (st) die("stats", st);
    if (!strcmp(mode, "hit") && s.disk_hits != before.disk_hits + 1) {
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

/* ---- child: where a disk hit's time goes, step by step, in a fresh process ----
 * The steps gpuhal_executable_load takes on a disk hit, each timed on its own, in order, on
 * the filled cache in `dir`; prints "STEP <name> <ns>" lines and "RESULT <total ns>". The
 * module load comes first in the process here as in the "hit" child. Then, not part of a
 * load: the same cubin loaded again with a plain cuModuleLoadData (the driver's own cost
 * of a cubin load, warm), and the kernels' lookups (cuModuleGetFunction of every entry). */
static int breakdown_main(const char* dir) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device;
  size_t size = 0, checked = 0, payload_size = 0;
  char* ptx = gen_big_ptx(BIG_ENTRIES, BIG_CHAIN, &size);
  gpuhal__module_cache_t* cache;
  gpuhal__module_entry_t entry;
  gpuhal__disk_key_t key;
  gpuhal__image_format_t format;
  char name[256], path[GPUHAL__PATH_MAX];
  void* file = NULL;
  void* copy;
  const void* payload = NULL;
  CUmodule module = NULL, again = NULL;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  int64_t t[10];
  int k;
  device = open_device(&driver, dir);
  cache = gpuhal__module_cache_of(device);
  memset(&entry, 0, sizeof(entry));
  entry.jit = gpuhal__jit_options_default();
  t[0] = gpuhal_now_ns();
  entry.hash = gpuhal__module_image_hash(ptx, size, GPUHAL__IMAGE_PTX, &entry.jit); /* memory key, file name */
  t[1] = gpuhal_now_ns();
  st = gpuhal__image_detect(ptx, size, "breakdown", &format, &checked);
  if (st) die("image check", st);
  copy = malloc(checked + 1); /* the entry's copy of the image */
  memcpy(copy, ptx, checked);
  ((char*)copy)[checked] = 0;
  t[2] = gpuhal_now_ns();
  entry.image = copy;
  entry.size = checked;
  entry.format = format;
  gpuhal__disk_key_make(device, &entry, 0, &key); /* the disk key: no digest, the name from entry.hash */
  gpuhal__disk_file_name(&key, name, sizeof(name));
  if (!gpuhal__disk_path(&cache->disk, name, path, sizeof(path)))
    die("disk path", gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "%s", name));
  t[3] = gpuhal_now_ns();
  st = gpuhal__disk_lookup(&cache->disk, &key, path, &file, &payload, &payload_size);
  if (st) die("reading the cache file", st);
  t[4] = gpuhal_now_ns();
  t[5] = t[4];
  st = gpuhal__module_load_image(cache, payload, payload_size, GPUHAL__IMAGE_CUBIN, NULL, &entry);
  if (st) die("loading the cubin", st);
  module = entry.module;
  t[6] = gpuhal_now_ns();
  st = gpuhal__context_enter(device, &scope);
  if (st) die("context", st);
  t[7] = gpuhal_now_ns();
  st = GPUHAL__CU(device->cu, cuModuleLoadData, (&again, payload));
  t[8] = gpuhal_now_ns();
  if (st) die("cuModuleLoadData", st);
  for (k = 0; k < BIG_ENTRIES; ++k) {
    char fn[64];
    CUfunction f = NULL;
    snprintf(fn, sizeof(fn), "big_chain_%d", k);
    st = GPUHAL__CU(device->cu, cuModuleGetFunction, (&f, module, fn));
    if (st) die("cuModuleGetFunction", st);
  }
  t[9] = gpuhal_now_ns();
  device->cu->cuModuleUnload(again);
  if (!entry.library) device->cu->cuModuleUnload(module);
  gpuhal__context_leave(device, &scope);
  if (entry.library) gpuhal__module_library_release(device, entry.library); /* its module goes with it */
  printf(
      "STEP memory_key %lld\nSTEP image_check_copy %lld\nSTEP disk_key_name %lld\nSTEP file_read_check %lld\n"
      "STEP cubin_load %lld\nSTEP cubin_load_again %lld\nSTEP function_lookups %lld\n"
      "STEP cubin_bytes %lld\nRESULT %lld\n",
      (long long)(t[1] - t[0]), (long long)(t[2] - t[1]), (long long)(t[3] - t[2]), (long long)(t[4] - t[3]),
      (long long)(t[6] - t[5]), (long long)(t[8] - t[7]), (long long)(t[9] - t[8]), (long long)payload_size,
      (long long)(t[6] - t[0]));
  fflush(stdout);
  gpuhal__free(device->allocator, file);
  free(copy);
  free(ptx);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  return 0;
}

/* Runs `self --child mode dir` with extra environment; its output in `output`; its RESULT
 * in ns (or -1). */
static int64_t run_child_output(const char* mode, const char* dir, const char* env_name, const char* env_value,
                                int disable_driver_cache, char* output, size_t output_size) {
  int fds[2];
  pid_t pid;
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
  while (used + 1 < output_size && (n = read(fds[0], output + used, output_size - 1 - used)) > 0) used += (size_t)n;
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

static int64_t run_child(const char* mode, const char* dir, const char* env_name, const char* env_value,
                         int disable_driver_cache) {
  char output[4096];
  return run_child_output(mode, dir, env_name, env_value, disable_driver_cache, output, sizeof(output));
}

static int cmp_i64(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return x < y ? -1 : x > y;
}

static int64_t median_i64(const int64_t* values, int n) {
  int64_t t[64];
  memcpy(t, values, (size_t)n * sizeof(t[0]));
  qsort(t, (size_t)n, sizeof(t[0]), cmp_i64);
  return t[n / 2];
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
  return median_i64(t, repeats);
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

enum { BREAKDOWN_STEPS = 8 };
static const char* const breakdown_steps[BREAKDOWN_STEPS] = {"memory_key",       "image_check_copy", "disk_key_name",
                                                             "file_read_check",  "cubin_load",       "cubin_load_again",
                                                             "function_lookups", "cubin_bytes"};
static const char* const breakdown_labels[BREAKDOWN_STEPS] = {
    "in-memory key (fast64 of the PTX; also names the file)",
    "image check + the entry's copy of the PTX",
    "disk key and file name (from the memory key's hash)",
    "the file read and checked (header, PTX compared, cubin)",
    "loading the cubin (cuModuleLoadDataEx, first in the process)",
    "not in a load: the same cubin again (cuModuleLoadData)",
    "not in a load: cuModuleGetFunction of every kernel",
    "cubin size"};

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
  int64_t hits[64], driver_hits[64], steps[BREAKDOWN_STEPS][64];
  double ratios[64];
  int i;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device;
  double big_hit, small_hit;
  const char* lib = getenv("GPUHAL_CUDA_LIBRARY");
  ssize_t n = readlink("/proc/self/exe", bench_self, sizeof(bench_self) - 1);
  if (n > 0)
    bench_self[n] = 0;
  else
    snprintf(bench_self, sizeof(bench_self), "%s", argv[0]);
  if (argc >= 4 && !strcmp(argv[1], "--child"))
    return !strcmp(argv[2], "breakdown") ? breakdown_main(argv[3]) : child_main(argv[2], argv[3]);
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
  driver_fill = run_child("raw", NULL, "CUDA_CACHE_PATH", cuda_dir, 0);
  if (cold < 0 || gpuhal_cold < 0 || driver_fill < 0) return 1;
  /* The two hits in pairs, alternating, so that each pair's ratio compares neighbours. */
  if (repeats > 64) repeats = 64;
  for (i = 0; i < repeats; ++i) {
    hits[i] = run_child("hit", gpuhal_dir, NULL, NULL, 1);
    driver_hits[i] = run_child("raw", NULL, "CUDA_CACHE_PATH", cuda_dir, 0);
    if (hits[i] < 0 || driver_hits[i] < 0) return 1;
    ratios[i] = (double)hits[i] / (double)driver_hits[i];
  }
  /* The breakdown: the median of each step over `repeats` fresh processes. */
  for (i = 0; i < repeats; ++i) {
    char output[4096];
    int k;
    if (run_child_output("breakdown", gpuhal_dir, NULL, NULL, 1, output, sizeof(output)) < 0) return 1;
    for (k = 0; k < BREAKDOWN_STEPS; ++k) {
      char pattern[64];
      const char* found;
      long long ns = -1;
      snprintf(pattern, sizeof(pattern), "STEP %s ", breakdown_steps[k]);
      found = strstr(output, pattern);
      if (!found || sscanf(found + strlen(pattern), "%lld", &ns) != 1) return 1;
      steps[k][i] = (int64_t)ns;
    }
  }
  gpuhal_hit = median_i64(hits, repeats);
  driver_hit = median_i64(driver_hits, repeats);
  qsort(ratios, (size_t)repeats, sizeof(ratios[0]), cmp_double);

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
  printf("    gpuhal/driver hit, per pair of neighbouring runs: median %.2f, range %.2f-%.2f\n", ratios[repeats / 2],
         ratios[0], ratios[repeats - 1]);
  printf("  a gpuhal disk hit step by step (fresh process, median of %d, us):\n", repeats);
  {
    int k;
    for (k = 0; k < BREAKDOWN_STEPS; ++k) {
      int64_t m = median_i64(steps[k], repeats);
      if (!strcmp(breakdown_steps[k], "cubin_bytes"))
        printf("    %-58s %10lld bytes\n", breakdown_labels[k], (long long)m);
      else
        printf("    %-58s %10.1f\n", breakdown_labels[k], (double)m / 1e3);
    }
  }
  printf("  in process (load + release of a cached image):\n");
  printf("    %zu-byte module hit                        %10.0f ns\n", big_size, big_hit);
  printf("    %d-byte module hit                           %10.0f ns\n", small_size, small_hit);
  printf("  targets: disk hit >= 100x faster than cold JIT: %s; <= 0.9x the driver cache's hit in every pair: %s\n",
         (double)cold / (double)gpuhal_hit >= 100.0 ? "met" : "NOT met",
         ratios[repeats - 1] <= 0.9 ? "met" : "NOT met");
  free(big);
  remove_tree_flat(gpuhal_dir);
  remove_tree_flat(cuda_dir);
  return 0;
}
