/* kernel_cache: the disk cache makes the second start fast.
 *
 * Loading PTX means JIT-compiling it for the GPU. With a module cache directory
 * (gpuhal_device_params_t.module_cache_dir, or $GPUHAL_CACHE_DIR) gpuhal keeps the compiled
 * cubin on disk, keyed by the PTX, the GPU's compute capability, the driver version and the
 * JIT options, so the next process (or device) loads it without compiling.
 *
 * This program starts twice in one process - driver, device, load - as a new process would:
 * the first start compiles and writes the cache, the second one reads it. It prints both
 * times and the cache counters, runs the kernel, and checks the result.
 *
 * It uses a fresh directory under /tmp (removed at the end) unless $GPUHAL_CACHE_DIR is
 * set. On a real GPU the driver has a JIT cache of its own (~/.nv/ComputeCache): run with
 * CUDA_CACHE_DISABLE=1 to see what compiling costs without it.
 *
 * Build: cc -std=c99 -I. examples/kernel_cache.c -ldl -lpthread */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* tests/kernels/fill_u32.cu: dst[i] = value for i < n (nvcc -ptx -arch=compute_75). */
static const char fill_u32_ptx[] =
    ".version 8.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "\n"
    "\t// .globl\tfill_u32\n"
    "\n"
    ".visible .entry fill_u32(\n"
    "\t.param .u64 fill_u32_param_0,\n"
    "\t.param .u32 fill_u32_param_1,\n"
    "\t.param .u32 fill_u32_param_2\n"
    ")\n"
    "{\n"
    "\t.reg .pred \t%p<2>;\n"
    "\t.reg .b32 \t%r<7>;\n"
    "\t.reg .b64 \t%rd<5>;\n"
    "\n"
    "\n"
    "\tld.param.u64 \t%rd1, [fill_u32_param_0];\n"
    "\tld.param.u32 \t%r2, [fill_u32_param_1];\n"
    "\tld.param.u32 \t%r3, [fill_u32_param_2];\n"
    "\tmov.u32 \t%r4, %ctaid.x;\n"
    "\tmov.u32 \t%r5, %ntid.x;\n"
    "\tmov.u32 \t%r6, %tid.x;\n"
    "\tmad.lo.s32 \t%r1, %r4, %r5, %r6;\n"
    "\tsetp.ge.u32 \t%p1, %r1, %r3;\n"
    "\t@%p1 bra \t$L__BB0_2;\n"
    "\n"
    "\tcvta.to.global.u64 \t%rd2, %rd1;\n"
    "\tmul.wide.u32 \t%rd3, %r1, 4;\n"
    "\tadd.s64 \t%rd4, %rd2, %rd3;\n"
    "\tst.global.u32 \t[%rd4], %r2;\n"
    "\n"
    "$L__BB0_2:\n"
    "\tret;\n"
    "\n"
    "}\n";

enum { N = 4096 };

static int failed(gpuhal_status_t status, const char* what) {
  if (!status) return 0;
  fprintf(stderr, "kernel_cache: %s failed: %s\n", what, gpuhal_status_message(status));
  gpuhal_status_free(status);
  return 1;
}

/* One start: driver, device with the cache directory, load the PTX (timed), run it once. */
static int start(const char* cache_dir, const char* label, uint32_t value, gpuhal_module_cache_stats_t* stats) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_executable_t* executable = NULL;
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* commands = NULL;
  gpuhal_semaphore_t* done = NULL;
  gpuhal_device_params_t params;
  gpuhal_arg_t args[3];
  static uint32_t host[N];
  uint64_t one = 1;
  int64_t t0, t1;
  int i, errors = 0, ok = 0;
  memset(&params, 0, sizeof(params));
  params.module_cache_dir = cache_dir;
  if (failed(gpuhal_driver_create(NULL, &driver), "gpuhal_driver_create") ||
      failed(gpuhal_device_create(driver, 0, &params, &device), "gpuhal_device_create"))
    goto out;
  t0 = gpuhal_now_ns();
  if (failed(gpuhal_executable_load(device, fill_u32_ptx, sizeof(fill_u32_ptx), &executable), "load")) goto out;
  t1 = gpuhal_now_ns();
  if (failed(gpuhal_device_module_cache_stats(device, stats), "stats")) goto out;
  printf(
      "kernel_cache: %s: gpuhal_executable_load took %8.3f ms (compiled: %llu, from the disk cache: %llu, "
      "cache files written: %llu)\n",
      label, (double)(t1 - t0) / 1e6, (unsigned long long)stats->compiles, (unsigned long long)stats->disk_hits,
      (unsigned long long)stats->disk_writes);

  /* The cached kernel is a kernel like any other: run it and check. */
  args[2] = gpuhal_arg_u32(N);
  if (failed(gpuhal_executable_kernel(executable, "fill_u32", &kernel), "kernel") ||
      failed(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(host), &buffer), "allocate") ||
      failed(gpuhal_semaphore_create(driver, 0, &done), "semaphore") ||
      failed(gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &commands), "create") ||
      failed(gpuhal_command_buffer_begin(commands), "begin"))
    goto out;
  args[0] = gpuhal_arg_buffer(buffer, 0);
  args[1] = gpuhal_arg_u32(value);
  if (failed(gpuhal_cmd_dispatch(commands, kernel, gpuhal_dim3(N / 256, 1, 1), gpuhal_dim3(256, 1, 1), 0, 3, args),
             "dispatch") ||
      failed(gpuhal_command_buffer_end(commands), "end") ||
      failed(gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&done, &one),
                                  commands, NULL),
             "execute") ||
      failed(gpuhal_semaphore_wait(done, 1, gpuhal_timeout_relative_ns(30ll * 1000000000)), "wait") ||
      failed(gpuhal_buffer_read(buffer, 0, host, sizeof(host)), "read"))
    goto out;
  for (i = 0; i < N; ++i) errors += host[i] != value;
  if (errors) fprintf(stderr, "kernel_cache: %s: the kernel wrote wrong values\n", label);
  ok = !errors;
out:
  if (device) gpuhal_status_free(gpuhal_device_wait_idle(device, gpuhal_timeout_infinite()));
  gpuhal_command_buffer_release(commands);
  gpuhal_semaphore_release(done);
  gpuhal_buffer_release(buffer);
  gpuhal_executable_release(executable);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  return ok;
}

/* Removes the directory this program made (files, and one level of subdirectories). */
static void remove_tree(const char* path) {
  DIR* dir = opendir(path);
  struct dirent* entry;
  char child[4096];
  struct stat st;
  while (dir && (entry = readdir(dir)) != NULL) {
    if (!strcmp(entry->d_name, ".") || !strcmp(entry->d_name, "..")) continue;
    snprintf(child, sizeof(child), "%s/%s", path, entry->d_name);
    if (stat(child, &st) == 0 && S_ISDIR(st.st_mode))
      remove_tree(child);
    else
      unlink(child);
  }
  if (dir) closedir(dir);
  rmdir(path);
}

int main(void) {
  char made[] = "/tmp/gpuhal-kernel-cache-XXXXXX";
  const char* dir = getenv("GPUHAL_CACHE_DIR");
  gpuhal_module_cache_stats_t first, second;
  int ok;
  if (!dir || !dir[0]) {
    if (!mkdtemp(made)) {
      perror("kernel_cache: mkdtemp");
      return 1;
    }
    dir = made;
  }
  printf("kernel_cache: cache directory %s\n", dir);
  memset(&first, 0, sizeof(first));
  memset(&second, 0, sizeof(second));
  ok = start(dir, "first start ", 1, &first) && start(dir, "second start", 2, &second);
  if (ok && !second.disk_hits) {
    fprintf(stderr, "kernel_cache: the second start did not load from the disk cache (disk cache %s)\n",
            second.disk_enabled ? "on" : "off");
    ok = 0;
  }
  if (ok) printf("kernel_cache: the second start loaded the compiled kernel from disk: correct\n");
  if (dir == made) remove_tree(made);
  return ok ? 0 : 1;
}
