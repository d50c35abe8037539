/* runtime_compile: CUDA C++ compiled while the program runs, with NVRTC.
 *
 * gpuhal_executable_compile takes CUDA source, options and headers, compiles it for the
 * device with NVRTC (loaded at run time: nothing of the CUDA toolkit is needed to build
 * this program) and loads the result like gpuhal_executable_load. Here a saxpy kernel is
 * compiled (with -lineinfo, as a profiler wants), run and checked; then the same program
 * is compiled again by a second device, as a second process would, and served from the
 * disk cache without running NVRTC. Both times are printed.
 *
 * It uses a fresh cache directory under /tmp (removed at the end) unless $GPUHAL_CACHE_DIR
 * is set. Without NVRTC (GPUHAL_NVRTC_LIBRARY, libnvrtc.so.13/.12/.so) it says so and
 * exits 77.
 *
 * Build: cc -std=c99 -I. examples/runtime_compile.c -ldl -lpthread */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The source and options together name the program in the disk cache. */
static const char saxpy_source[] =
    "extern \"C\" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n";

enum { N = 4096 };

static int failed(gpuhal_status_t status, const char* what) {
  if (!status) return 0;
  fprintf(stderr, "runtime_compile: %s failed: %s\n", what, gpuhal_status_message(status));
  gpuhal_status_free(status);
  return 1;
}

/* Compiles saxpy on a new device (timed), runs y = 2x + y once and checks it. 0: done;
 * 77: no NVRTC; 1: failed. */
static int start(gpuhal_driver_t* driver, const char* cache_dir, const char* label) {
  gpuhal_device_t* device = NULL;
  gpuhal_executable_t* executable = NULL;
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_buffer_t *x = NULL, *y = NULL;
  gpuhal_command_buffer_t* commands = NULL;
  gpuhal_semaphore_t* done = NULL;
  gpuhal_device_params_t params;
  gpuhal_compile_options_t compile;
  gpuhal_module_cache_stats_t stats;
  const char* options[] = {"-lineinfo"};
  gpuhal_arg_t args[4];
  static float hx[N], hy[N];
  uint64_t one = 1;
  int64_t t0, t1;
  int i, errors = 0, rc = 1;
  gpuhal_status_t st;
  memset(&params, 0, sizeof(params));
  params.module_cache_dir = cache_dir;
  if (failed(gpuhal_device_create(driver, 0, &params, &device), "gpuhal_device_create")) goto out;
  memset(&compile, 0, sizeof(compile));
  compile.program_name = "saxpy.cu";
  compile.options = options;
  compile.option_count = 1;
  t0 = gpuhal_now_ns();
  st = gpuhal_executable_compile(device, saxpy_source, &compile, &executable);
  t1 = gpuhal_now_ns();
  if (gpuhal_status_code(st) == GPUHAL_STATUS_UNAVAILABLE) {
    printf("runtime_compile: no NVRTC here: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    rc = 77;
    goto out;
  }
  if (failed(st, "gpuhal_executable_compile") || failed(gpuhal_device_module_cache_stats(device, &stats), "stats"))
    goto out;
  printf("runtime_compile: %s: gpuhal_executable_compile took %8.3f ms (NVRTC runs: %llu, from the disk cache: %llu)\n",
         label, (double)(t1 - t0) / 1e6, (unsigned long long)stats.source_compiles,
         (unsigned long long)stats.source_disk_hits);

  for (i = 0; i < N; ++i) {
    hx[i] = (float)i;
    hy[i] = 1.0f;
  }
  if (failed(gpuhal_executable_kernel(executable, "saxpy", &kernel), "kernel") ||
      failed(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(hx), &x), "allocate x") ||
      failed(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(hy), &y), "allocate y") ||
      failed(gpuhal_buffer_write(x, 0, hx, sizeof(hx)), "write x") ||
      failed(gpuhal_buffer_write(y, 0, hy, sizeof(hy)), "write y") ||
      failed(gpuhal_semaphore_create(driver, 0, &done), "semaphore") ||
      failed(gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &commands), "create") ||
      failed(gpuhal_command_buffer_begin(commands), "begin"))
    goto out;
  args[0] = gpuhal_arg_f32(2.0f);
  args[1] = gpuhal_arg_buffer(x, 0);
  args[2] = gpuhal_arg_buffer(y, 0);
  args[3] = gpuhal_arg_u32(N);
  if (failed(gpuhal_cmd_dispatch(commands, kernel, gpuhal_dim3(N / 256, 1, 1), gpuhal_dim3(256, 1, 1), 0, 4, args),
             "dispatch") ||
      failed(gpuhal_command_buffer_end(commands), "end") ||
      failed(gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&done, &one),
                                  commands, NULL),
             "execute") ||
      failed(gpuhal_semaphore_wait(done, 1, gpuhal_timeout_relative_ns(30ll * 1000000000)), "wait") ||
      failed(gpuhal_buffer_read(y, 0, hy, sizeof(hy)), "read"))
    goto out;
  for (i = 0; i < N; ++i) errors += hy[i] != 2.0f * (float)i + 1.0f;
  if (errors) {
    fprintf(stderr, "runtime_compile: %d wrong elements\n", errors);
    goto out;
  }
  rc = 0;
out:
  gpuhal_command_buffer_release(commands);
  gpuhal_semaphore_release(done);
  gpuhal_buffer_release(x);
  gpuhal_buffer_release(y);
  gpuhal_executable_release(executable);
  gpuhal_device_release(device);
  return rc;
}

static void remove_dir(const char* dir) {
  DIR* d = opendir(dir);
  struct dirent* e;
  char path[4096];
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

int main(void) {
  gpuhal_driver_t* driver = NULL;
  char dir[64] = "/tmp/gpuhal-runtime-compile-XXXXXX";
  const char* cache = getenv("GPUHAL_CACHE_DIR");
  int own = !cache || !cache[0], rc;
  if (own && !mkdtemp(dir)) {
    perror("runtime_compile: mkdtemp");
    return 1;
  }
  if (failed(gpuhal_driver_create(NULL, &driver), "gpuhal_driver_create")) return 1;
  rc = start(driver, own ? dir : cache, "first start ");
  if (rc == 0) rc = start(driver, own ? dir : cache, "second start");
  if (rc == 0) printf("runtime_compile: y = 2x + y checked on %d elements, twice\n", N);
  gpuhal_driver_release(driver);
  if (own) remove_dir(dir);
  return rc;
}
