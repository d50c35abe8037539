/* hello: load a PTX kernel, add two vectors on the GPU, check the result.
 *
 * The kernel is tests/kernels/vector_add.cu, compiled to PTX with
 *   nvcc -ptx -arch=compute_75 vector_add.cu
 * and pasted below: gpuhal JIT-compiles PTX through the driver, so no toolkit is needed
 * at run time. Build: cc -std=c99 -I. examples/hello.c -ldl -lpthread
 */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

#include <stdio.h>
#include <string.h>

static const char vector_add_ptx[] =
    ".version 8.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "\n"
    "\t// .globl\tvector_add\n"
    "\n"
    ".visible .entry vector_add(\n"
    "\t.param .u64 vector_add_param_0,\n"
    "\t.param .u64 vector_add_param_1,\n"
    "\t.param .u64 vector_add_param_2,\n"
    "\t.param .u32 vector_add_param_3\n"
    ")\n"
    "{\n"
    "\t.reg .pred \t%p<2>;\n"
    "\t.reg .f32 \t%f<4>;\n"
    "\t.reg .b32 \t%r<6>;\n"
    "\t.reg .b64 \t%rd<11>;\n"
    "\n"
    "\n"
    "\tld.param.u64 \t%rd1, [vector_add_param_0];\n"
    "\tld.param.u64 \t%rd2, [vector_add_param_1];\n"
    "\tld.param.u64 \t%rd3, [vector_add_param_2];\n"
    "\tld.param.u32 \t%r2, [vector_add_param_3];\n"
    "\tmov.u32 \t%r3, %ctaid.x;\n"
    "\tmov.u32 \t%r4, %ntid.x;\n"
    "\tmov.u32 \t%r5, %tid.x;\n"
    "\tmad.lo.s32 \t%r1, %r3, %r4, %r5;\n"
    "\tsetp.ge.u32 \t%p1, %r1, %r2;\n"
    "\t@%p1 bra \t$L__BB0_2;\n"
    "\n"
    "\tcvta.to.global.u64 \t%rd4, %rd1;\n"
    "\tmul.wide.u32 \t%rd5, %r1, 4;\n"
    "\tadd.s64 \t%rd6, %rd4, %rd5;\n"
    "\tcvta.to.global.u64 \t%rd7, %rd2;\n"
    "\tadd.s64 \t%rd8, %rd7, %rd5;\n"
    "\tld.global.f32 \t%f1, [%rd8];\n"
    "\tld.global.f32 \t%f2, [%rd6];\n"
    "\tadd.f32 \t%f3, %f2, %f1;\n"
    "\tcvta.to.global.u64 \t%rd9, %rd3;\n"
    "\tadd.s64 \t%rd10, %rd9, %rd5;\n"
    "\tst.global.f32 \t[%rd10], %f3;\n"
    "\n"
    "$L__BB0_2:\n"
    "\tret;\n"
    "\n"
    "}\n"
    "\n";

enum { N = 1 << 20 };
static float a[N], b[N], c[N];

/* Prints a failed status and frees it; returns 1 when there was one. */
static int failed(gpuhal_status_t status, const char* what) {
  if (!status) return 0;
  fprintf(stderr, "hello: %s failed: %s\n", what, gpuhal_status_message(status));
  gpuhal_status_free(status);
  return 1;
}

int main(void) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_executable_t* executable = NULL;
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_buffer_t *buf_a = NULL, *buf_b = NULL, *buf_c = NULL;
  gpuhal_command_buffer_t* commands = NULL;
  gpuhal_semaphore_t* done = NULL;
  gpuhal_device_info_t info;
  uint64_t done_value = 1;
  int i, errors = 0, rc = 1;

  for (i = 0; i < N; ++i) {
    a[i] = (float)i;
    b[i] = 2.0f * (float)i;
  }

  /* A driver loads libcuda; a device owns one GPU's context, queues and worker thread. */
  if (failed(gpuhal_driver_create(NULL, &driver), "gpuhal_driver_create")) goto done;
  if (failed(gpuhal_device_create(driver, 0, NULL, &device), "gpuhal_device_create")) goto done;
  if (failed(gpuhal_device_info(device, &info), "gpuhal_device_info")) goto done;
  printf("hello: device 0 is %s (compute capability %d.%d, %d SMs)\n", info.name, info.compute_capability_major,
         info.compute_capability_minor, info.sm_count);

  /* Kernels come from executables: PTX, cubin or fatbin, through the module cache. */
  if (failed(gpuhal_executable_load(device, vector_add_ptx, sizeof(vector_add_ptx), &executable),
             "gpuhal_executable_load") ||
      failed(gpuhal_executable_kernel(executable, "vector_add", &kernel), "gpuhal_executable_kernel"))
    goto done;

  if (failed(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(a), &buf_a), "allocate a") ||
      failed(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(b), &buf_b), "allocate b") ||
      failed(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(c), &buf_c), "allocate c") ||
      failed(gpuhal_buffer_write(buf_a, 0, a, sizeof(a)), "write a") ||
      failed(gpuhal_buffer_write(buf_b, 0, b, sizeof(b)), "write b"))
    goto done;

  /* Record once: a command buffer becomes a CUDA graph at end. */
  {
    gpuhal_arg_t args[4];
    args[0] = gpuhal_arg_buffer(buf_a, 0);
    args[1] = gpuhal_arg_buffer(buf_b, 0);
    args[2] = gpuhal_arg_buffer(buf_c, 0);
    args[3] = gpuhal_arg_u32(N);
    if (failed(gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &commands), "create") ||
        failed(gpuhal_command_buffer_begin(commands), "begin") ||
        failed(gpuhal_cmd_dispatch(commands, kernel, gpuhal_dim3(N / 256, 1, 1), gpuhal_dim3(256, 1, 1), 0, 4, args),
               "gpuhal_cmd_dispatch") ||
        failed(gpuhal_command_buffer_end(commands), "end"))
      goto done;
  }

  /* Submit: the queue never blocks; the semaphore reaches 1 when the work is done. */
  if (failed(gpuhal_semaphore_create(driver, 0, &done), "gpuhal_semaphore_create")) goto done;
  if (failed(gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(),
                                  gpuhal_semaphore_list_one(&done, &done_value), commands, NULL),
             "gpuhal_queue_execute"))
    goto done;
  if (failed(gpuhal_semaphore_wait(done, 1, gpuhal_timeout_relative_ns(30ll * 1000000000)), "wait")) goto done;

  if (failed(gpuhal_buffer_read(buf_c, 0, c, sizeof(c)), "read c")) goto done;
  for (i = 0; i < N; ++i) errors += c[i] != 3.0f * (float)i;
  printf("hello: c = a + b over %d floats: %s\n", N, errors ? "WRONG" : "correct");
  rc = errors ? 1 : 0;

done:
  gpuhal_semaphore_release(done);
  gpuhal_command_buffer_release(commands);
  gpuhal_buffer_release(buf_c);
  gpuhal_buffer_release(buf_b);
  gpuhal_buffer_release(buf_a);
  gpuhal_executable_release(executable); /* kernels live as long as their executable */
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  return rc;
}
