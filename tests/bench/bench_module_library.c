/* bench_module_library - loading one image for every device (cuLibraryLoadData, shared by
 * the module caches of all devices) against loading it on one device, and against a
 * module per device, same run.
 *
 *   bench_module_library [repeats]     (default 5; 2 on softcuda)
 *
 * The image: a generated PTX module of 64 kernels, each a dependent chain of 256 fma (real
 * JIT work; kernels/gen_modules.h). Each measurement opens a fresh driver and its devices
 * first (not timed), then times gpuhal_executable_load of the image on:
 *
 * 1. one device                                                        (the reference)
 * 2. every device, with libraries (the default): one load for all       target <= 1.1x row 1
 * 3. every device, params.modules_per_context = 1: a module each        (reported)
 *
 * The driver's own JIT cache is off (CUDA_CACHE_DISABLE=1), so every load compiles. With
 * one device rows 2 and 3 measure the same single load as row 1. */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"
#include "test_util.h"
#include "bench_util.h"
#include "kernels/gen_modules.h"

#include <stdio.h>
#include <stdlib.h>

#define BL_MAX_REPEATS 50
#define BL_MAX_DEVICES 16

static int failures;

static int ok(gpuhal_status_t s, const char* what) { return bench_ok("bench_module_library", &failures, s, what); }

/* Loads `ptx` on the first `devices` devices of a fresh driver; ms for the loads alone. */
static double load_ms(const char* ptx, size_t size, int devices, int per_context) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device[BL_MAX_DEVICES];
  gpuhal_executable_t* exe[BL_MAX_DEVICES];
  gpuhal_device_params_t params;
  int64_t t0, t1;
  int i;
  memset(&params, 0, sizeof(params));
  params.module_cache_dir = ""; /* no disk cache: every load compiles */
  params.modules_per_context = per_context;
  memset(device, 0, sizeof(device));
  memset(exe, 0, sizeof(exe));
  if (!ok(gpuhal_driver_create(NULL, &driver), "driver_create")) return 0;
  for (i = 0; i < devices; ++i) ok(gpuhal_device_create(driver, i, &params, &device[i]), "device_create");
  t0 = gpuhal_now_ns();
  for (i = 0; i < devices && !failures; ++i) ok(gpuhal_executable_load(device[i], ptx, size, &exe[i]), "load");
  t1 = gpuhal_now_ns();
  for (i = 0; i < devices; ++i) {
    gpuhal_executable_release(exe[i]);
    gpuhal_device_release(device[i]);
  }
  gpuhal_driver_release(driver);
  return (double)(t1 - t0) / 1e6;
}

int main(int argc, char** argv) {
  gpuhal_driver_t* driver = NULL;
  double one[BL_MAX_REPEATS], shared[BL_MAX_REPEATS], each[BL_MAX_REPEATS], m1, m2, m3;
  int repeats = argc > 1 ? atoi(argv[1]) : (tu_softcuda() ? 2 : 5), count = 0, r;
  size_t size = 0;
  char* ptx;
  if (repeats < 1 || repeats > BL_MAX_REPEATS) {
    fprintf(stderr, "usage: bench_module_library [repeats 1..%d]\n", BL_MAX_REPEATS);
    return 2;
  }
  setenv("CUDA_CACHE_DISABLE", "1", 1); /* before the driver starts: every load compiles */
  if (!ok(gpuhal_driver_create(NULL, &driver), "driver_create")) return 1;
  ok(gpuhal_driver_device_count(driver, &count), "device_count");
  gpuhal_driver_release(driver);
  if (count == 0) {
    fprintf(stderr, "bench_module_library: no device\n");
    return 77;
  }
  if (count > BL_MAX_DEVICES) count = BL_MAX_DEVICES;
  ptx = gen_big_ptx(64, 256, &size);
  printf("bench_module_library: %d device(s), a %zu-byte PTX image of 64 kernels, %d repeats\n", count, size, repeats);
  for (r = 0; r < repeats && !failures; ++r) {
    one[r] = load_ms(ptx, size, 1, 0);
    shared[r] = load_ms(ptx, size, count, 0);
    each[r] = load_ms(ptx, size, count, 1);
  }
  free(ptx);
  if (failures) return 1;
  m1 = bench_median(one, repeats);
  m2 = bench_median(shared, repeats);
  m3 = bench_median(each, repeats);
  printf("%-52s %10s %10s %8s %7s\n", "case (ms, median)", "time", "best", "vs 1", "target");
  printf("%-52s %10.2f %10.2f %7.2fx %7s\n", "1 one device", m1, one[0], 1.0, "");
  printf("%-52s %10.2f %10.2f %7.2fx %7s %s\n", "2 every device, one library for all", m2, shared[0], m2 / m1, "1.10x",
         m2 / m1 <= 1.10 ? "" : "(over target)");
  printf("%-52s %10.2f %10.2f %7.2fx %7s\n", "3 every device, a module per context", m3, each[0], m3 / m1, "-");
  return 0;
}
