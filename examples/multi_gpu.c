/* multi_gpu: split one job over every GPU, then all-reduce the result so every GPU holds
 * all of it.
 *
 * The job is y = a * x over N floats. GPU d computes its slice [d * N / D, (d + 1) * N / D)
 * into a zeroed buffer `part`; one NCCL all-reduce (sum) then gives every GPU the whole y.
 * Each GPU's work is ONE command buffer: fill, kernel, collective, ordered by barriers.
 * The command buffers of all GPUs are submitted without waiting; the host waits once.
 *
 * Needs NCCL (libnccl.so.2, or $GPUHAL_NCCL_LIBRARY) for the collective: without it the
 * example says so and exits 77 ("skipped"). With one GPU it runs too (a one-rank all-reduce).
 * On softcuda: SOFTCUDA_DEVICES=4 GPUHAL_NCCL_LIBRARY=<build>/softcuda/libnccl.so.2.
 *
 * Build: cc -std=c99 -I. examples/multi_gpu.c -ldl -lpthread */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

#include <stdio.h>

/* tests/kernels/saxpy.cu: y[i] = a * x[i] + y[i] for i < n (nvcc -ptx -arch=compute_75). */
static const char saxpy_ptx[] =
    ".version 8.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "\n"
    "\t// .globl\tsaxpy\n"
    "\n"
    ".visible .entry saxpy(\n"
    "\t.param .f32 saxpy_param_0,\n"
    "\t.param .u64 saxpy_param_1,\n"
    "\t.param .u64 saxpy_param_2,\n"
    "\t.param .u32 saxpy_param_3\n"
    ")\n"
    "{\n"
    "\t.reg .pred \t%p<2>;\n"
    "\t.reg .f32 \t%f<5>;\n"
    "\t.reg .b32 \t%r<6>;\n"
    "\t.reg .b64 \t%rd<8>;\n"
    "\n"
    "\n"
    "\tld.param.f32 \t%f1, [saxpy_param_0];\n"
    "\tld.param.u64 \t%rd1, [saxpy_param_1];\n"
    "\tld.param.u64 \t%rd2, [saxpy_param_2];\n"
    "\tld.param.u32 \t%r2, [saxpy_param_3];\n"
    "\tmov.u32 \t%r3, %ctaid.x;\n"
    "\tmov.u32 \t%r4, %ntid.x;\n"
    "\tmov.u32 \t%r5, %tid.x;\n"
    "\tmad.lo.s32 \t%r1, %r3, %r4, %r5;\n"
    "\tsetp.ge.u32 \t%p1, %r1, %r2;\n"
    "\t@%p1 bra \t$L__BB0_2;\n"
    "\n"
    "\tcvta.to.global.u64 \t%rd3, %rd2;\n"
    "\tcvta.to.global.u64 \t%rd4, %rd1;\n"
    "\tmul.wide.u32 \t%rd5, %r1, 4;\n"
    "\tadd.s64 \t%rd6, %rd4, %rd5;\n"
    "\tld.global.f32 \t%f2, [%rd6];\n"
    "\tadd.s64 \t%rd7, %rd3, %rd5;\n"
    "\tld.global.f32 \t%f3, [%rd7];\n"
    "\tfma.rn.f32 \t%f4, %f2, %f1, %f3;\n"
    "\tst.global.f32 \t[%rd7], %f4;\n"
    "\n"
    "$L__BB0_2:\n"
    "\tret;\n"
    "\n"
    "}\n";

enum { MAX_GPUS = 16, N = 1 << 20 };
#define A 3.0f

static int failed(gpuhal_status_t status, const char* what) {
  if (!status) return 0;
  fprintf(stderr, "multi_gpu: %s failed: %s\n", what, gpuhal_status_message(status));
  gpuhal_status_free(status);
  return 1;
}

/* What one GPU holds. */
typedef struct gpu_t {
  gpuhal_device_t* device;
  gpuhal_executable_t* executable;
  gpuhal_kernel_t* saxpy;
  gpuhal_buffer_t *x, *part, *y;
  gpuhal_command_buffer_t* work;
} gpu_t;

/* Records GPU d's work: part = 0; part[slice] = A * x[slice] + part[slice]; y = sum of parts. */
static gpuhal_status_t record(gpu_t* g, gpuhal_channel_t* channel, int d, int count) {
  const float zero = 0.0f;
  uint32_t first = (uint32_t)((uint64_t)N * (uint64_t)d / (uint64_t)count);
  uint32_t last = (uint32_t)((uint64_t)N * (uint64_t)(d + 1) / (uint64_t)count);
  uint32_t n = last - first;
  gpuhal_arg_t args[4];
  gpuhal_collective_t all_reduce;
  gpuhal_status_t st;
  args[0] = gpuhal_arg_f32(A);
  args[1] = gpuhal_arg_buffer(g->x, first * sizeof(float));
  args[2] = gpuhal_arg_buffer(g->part, first * sizeof(float));
  args[3] = gpuhal_arg_u32(n);
  memset(&all_reduce, 0, sizeof(all_reduce));
  all_reduce.kind = GPUHAL_COLLECTIVE_ALL_REDUCE;
  all_reduce.type = GPUHAL_ELEMENT_FLOAT32;
  all_reduce.op = GPUHAL_REDUCTION_SUM;
  all_reduce.send = gpuhal_ref_buffer(g->part, 0);
  all_reduce.recv = gpuhal_ref_buffer(g->y, 0);
  all_reduce.count = N;
  st = gpuhal_command_buffer_create(g->device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &g->work);
  if (!st) st = gpuhal_command_buffer_begin(g->work);
  if (!st) st = gpuhal_cmd_fill(g->work, gpuhal_ref_buffer(g->part, 0), N * sizeof(float), &zero, sizeof(zero));
  if (!st) st = gpuhal_cmd_barrier(g->work);
  if (!st && n > 0)
    st = gpuhal_cmd_dispatch(g->work, g->saxpy, gpuhal_dim3((n + 255) / 256, 1, 1), gpuhal_dim3(256, 1, 1), 0, 4, args);
  if (!st) st = gpuhal_cmd_barrier(g->work);
  if (!st) st = gpuhal_cmd_collective(g->work, channel, &all_reduce);
  if (!st) st = gpuhal_command_buffer_end(g->work);
  return st;
}

int main(void) {
  gpuhal_driver_t* driver = NULL;
  gpu_t gpus[MAX_GPUS];
  gpuhal_device_t* devices[MAX_GPUS];
  gpuhal_channel_t* channels[MAX_GPUS];
  gpuhal_semaphore_t* done[MAX_GPUS]; /* done[d] reaches 1 when GPU d has finished */
  uint64_t ones[MAX_GPUS];
  static float host[N];
  int count = 0, d, i, errors = 0, rc = 1;
  int64_t t0;
  memset(gpus, 0, sizeof(gpus));
  memset(channels, 0, sizeof(channels));
  memset(done, 0, sizeof(done));
  for (d = 0; d < MAX_GPUS; ++d) ones[d] = 1;

  if (failed(gpuhal_driver_create(NULL, &driver), "gpuhal_driver_create") ||
      failed(gpuhal_driver_device_count(driver, &count), "device count"))
    goto out;
  if (count > MAX_GPUS) count = MAX_GPUS;
  if (count == 0 || !gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_NCCL)) {
    printf("multi_gpu: %s: skipped\n", count == 0 ? "no GPU" : "NCCL not found (set GPUHAL_NCCL_LIBRARY)");
    rc = 77;
    goto out;
  }
  for (i = 0; i < N; ++i) host[i] = (float)(i % 1024);

  /* One device per GPU, each with the kernel and its buffers. */
  for (d = 0; d < count; ++d) {
    gpu_t* g = &gpus[d];
    if (failed(gpuhal_device_create(driver, d, NULL, &g->device), "gpuhal_device_create") ||
        failed(gpuhal_executable_load(g->device, saxpy_ptx, sizeof(saxpy_ptx), &g->executable), "load") ||
        failed(gpuhal_executable_kernel(g->executable, "saxpy", &g->saxpy), "kernel") ||
        failed(gpuhal_buffer_allocate(g->device, GPUHAL_MEMORY_DEVICE, N * sizeof(float), &g->x), "allocate") ||
        failed(gpuhal_buffer_allocate(g->device, GPUHAL_MEMORY_DEVICE, N * sizeof(float), &g->part), "allocate") ||
        failed(gpuhal_buffer_allocate(g->device, GPUHAL_MEMORY_DEVICE, N * sizeof(float), &g->y), "allocate") ||
        failed(gpuhal_buffer_write(g->x, 0, host, sizeof(host)), "upload x"))
      goto out;
    devices[d] = g->device;
  }
  /* One NCCL communicator over all of them: channels[d] is rank d on devices[d]. */
  if (failed(gpuhal_channel_create_local(driver, (uint32_t)count, devices, channels), "gpuhal_channel_create_local"))
    goto out;
  for (d = 0; d < count; ++d)
    if (failed(record(&gpus[d], channels[d], d, count), "recording")) goto out;

  /* Submit on every GPU (all ranks must reach the collective: no host wait in between),
   * then wait once for all of them. */
  for (d = 0; d < count; ++d)
    if (failed(gpuhal_semaphore_create(driver, 0, &done[d]), "semaphore")) goto out;
  t0 = gpuhal_now_ns();
  for (d = 0; d < count; ++d)
    if (failed(gpuhal_queue_execute(gpus[d].device, 0, gpuhal_semaphore_list_empty(),
                                    gpuhal_semaphore_list_one(&done[d], &ones[d]), gpus[d].work, NULL),
               "gpuhal_queue_execute"))
      goto out;
  {
    gpuhal_semaphore_list_t all;
    all.count = (uint32_t)count;
    all.semaphores = done;
    all.values = ones;
    if (failed(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, all, gpuhal_timeout_relative_ns(120ll * 1000000000)), "wait"))
      goto out;
  }
  printf("multi_gpu: %d GPU%s computed %d floats (%d each) and all-reduced them in %.2f ms\n", count,
         count == 1 ? "" : "s", N, N / count, (double)(gpuhal_now_ns() - t0) / 1e6);

  /* Every GPU holds the whole y = A * x. */
  for (d = 0; d < count; ++d) {
    if (failed(gpuhal_buffer_read(gpus[d].y, 0, host, sizeof(host)), "read y")) goto out;
    for (i = 0; i < N; ++i) errors += host[i] != A * (float)(i % 1024);
  }
  printf("multi_gpu: y = %.0f * x on every GPU: %s\n", (double)A, errors ? "WRONG" : "correct");
  rc = errors ? 1 : 0;

out:
  for (d = 0; d < count && d < MAX_GPUS; ++d)
    if (gpus[d].device) gpuhal_status_free(gpuhal_device_wait_idle(gpus[d].device, gpuhal_timeout_infinite()));
  for (d = 0; d < MAX_GPUS; ++d) {
    gpu_t* g = &gpus[d];
    gpuhal_command_buffer_release(g->work);
    gpuhal_channel_release(channels[d]);
    gpuhal_buffer_release(g->y);
    gpuhal_buffer_release(g->part);
    gpuhal_buffer_release(g->x);
    gpuhal_executable_release(g->executable);
    gpuhal_device_release(g->device);
    gpuhal_semaphore_release(done[d]);
  }
  gpuhal_driver_release(driver);
  return rc;
}
