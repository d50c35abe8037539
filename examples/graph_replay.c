/* graph_replay: record a REUSABLE command buffer (a CUDA graph) once, then run it many times
 * with different buffers each time through a binding table. No re-recording and no
 * re-instantiation: each execute rewrites the graph's kernel arguments in place and
 * launches it (one cuGraphLaunch).
 *
 * The graph does y = a * x + y (saxpy) with x and y in binding slots 0 and 1. It runs
 * REPLAYS times on one queue, round-robin over SETS output buffers, so every output ends
 * with REPLAYS / SETS applications: with a = 1, x = 1 and y starting at 0, exactly that value.
 * The host queues every replay without waiting and waits once at the end.
 *
 * Build: cc -std=c99 -I. examples/graph_replay.c -ldl -lpthread */
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

enum { N = 1 << 16, SETS = 4, REPLAYS = 200 };

static int failed(gpuhal_status_t status, const char* what) {
  if (!status) return 0;
  fprintf(stderr, "graph_replay: %s failed: %s\n", what, gpuhal_status_message(status));
  gpuhal_status_free(status);
  return 1;
}

int main(void) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_executable_t* executable = NULL;
  gpuhal_kernel_t* saxpy = NULL;
  gpuhal_buffer_t* x = NULL;
  gpuhal_buffer_t* y[SETS] = {NULL};
  gpuhal_command_buffer_t* graph = NULL;
  gpuhal_semaphore_t* done = NULL;
  static float host[N];
  gpuhal_arg_t args[4];
  const float one = 1.0f, zero = 0.0f;
  int64_t t0, t1, t2;
  int i, s, errors = 0, rc = 1;

  if (failed(gpuhal_driver_create(NULL, &driver), "gpuhal_driver_create") ||
      failed(gpuhal_device_create(driver, 0, NULL, &device), "gpuhal_device_create") ||
      failed(gpuhal_executable_load(device, saxpy_ptx, sizeof(saxpy_ptx), &executable), "load") ||
      failed(gpuhal_executable_kernel(executable, "saxpy", &saxpy), "kernel") ||
      failed(gpuhal_semaphore_create(driver, 0, &done), "semaphore") ||
      failed(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, N * sizeof(float), &x), "allocate x"))
    goto out;
  for (s = 0; s < SETS; ++s)
    if (failed(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, N * sizeof(float), &y[s]), "allocate y")) goto out;

  /* Initial contents, with a one-shot command buffer: x = 1, every y = 0. */
  {
    gpuhal_command_buffer_t* init = NULL;
    uint64_t one_value = 1;
    gpuhal_status_t st = gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &init);
    if (!st) st = gpuhal_command_buffer_begin(init);
    if (!st) st = gpuhal_cmd_fill(init, gpuhal_ref_buffer(x, 0), N * sizeof(float), &one, sizeof(one));
    for (s = 0; s < SETS && !st; ++s)
      st = gpuhal_cmd_fill(init, gpuhal_ref_buffer(y[s], 0), N * sizeof(float), &zero, sizeof(zero));
    if (!st) st = gpuhal_command_buffer_end(init);
    if (!st)
      st = gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&done, &one_value),
                                init, NULL);
    gpuhal_command_buffer_release(init); /* the queue keeps it alive until it has run */
    if (failed(st, "initializing")) goto out;
  }

  /* Record once. Slots 0 and 1 are filled in at each execute. */
  t0 = gpuhal_now_ns();
  args[0] = gpuhal_arg_f32(1.0f);
  args[1] = gpuhal_arg_slot(0, 0); /* x */
  args[2] = gpuhal_arg_slot(1, 0); /* y */
  args[3] = gpuhal_arg_u32(N);
  if (failed(gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_REUSABLE, 2, &graph), "create") ||
      failed(gpuhal_command_buffer_begin(graph), "begin") ||
      failed(gpuhal_cmd_dispatch(graph, saxpy, gpuhal_dim3(N / 256, 1, 1), gpuhal_dim3(256, 1, 1), 0, 4, args),
             "dispatch") ||
      failed(gpuhal_command_buffer_end(graph), "end")) /* the graph is instantiated here, once */
    goto out;
  t1 = gpuhal_now_ns();

  /* Replay: replay r uses output set r % SETS and signals `done` to r + 2 (1 was the init).
   * One queue runs in submission order, so no replay needs to wait on another. */
  for (i = 0; i < REPLAYS; ++i) {
    gpuhal_buffer_t* bound[2];
    gpuhal_binding_table_t bindings;
    uint64_t value = (uint64_t)i + 2;
    bound[0] = x;
    bound[1] = y[i % SETS];
    bindings.count = 2;
    bindings.buffers = bound;
    bindings.offsets = NULL;
    if (failed(gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&done, &value),
                                    graph, &bindings),
               "gpuhal_queue_execute"))
      goto out;
  }
  if (failed(gpuhal_semaphore_wait(done, REPLAYS + 1, gpuhal_timeout_relative_ns(60ll * 1000000000)), "wait")) goto out;
  t2 = gpuhal_now_ns();
  printf(
      "graph_replay: recorded and instantiated once in %.1f us; %d replays over %d buffer sets in %.2f ms "
      "(%.1f us each, submit to done)\n",
      (double)(t1 - t0) / 1e3, REPLAYS, SETS, (double)(t2 - t1) / 1e6, (double)(t2 - t1) / 1e3 / REPLAYS);

  for (s = 0; s < SETS; ++s) {
    if (failed(gpuhal_buffer_read(y[s], 0, host, sizeof(host)), "read")) goto out;
    for (i = 0; i < N; ++i) errors += host[i] != (float)(REPLAYS / SETS);
  }
  printf("graph_replay: each of the %d outputs holds %d (= %d replays / %d sets): %s\n", SETS, REPLAYS / SETS, REPLAYS,
         SETS, errors ? "WRONG" : "correct");
  rc = errors ? 1 : 0;

out:
  if (device) gpuhal_status_free(gpuhal_device_wait_idle(device, gpuhal_timeout_infinite()));
  gpuhal_command_buffer_release(graph);
  for (s = 0; s < SETS; ++s) gpuhal_buffer_release(y[s]);
  gpuhal_buffer_release(x);
  gpuhal_semaphore_release(done);
  gpuhal_executable_release(executable);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  return rc;
}
