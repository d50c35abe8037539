/* pipeline: upload, compute and download on three queues, ordered only by semaphores, so
 * the upload of one batch overlaps the compute of the one before it and the download of
 * the one before that. No host thread waits between stages.
 *
 *   queue 0 (upload):   copy batch i from pinned host memory into device slot i % 2
 *   queue 1 (compute):  y = 2 * x + 1 over the slot (fill, then the saxpy kernel)
 *   queue 2 (download): copy the slot's result back to pinned host memory
 *
 * Each stage is ONE reusable command buffer recorded with binding slots: every batch
 * executes it with a binding table naming that batch's buffers (late binding).
 * Three timeline semaphores order the stages: `uploaded`, `computed` and `downloaded` reach
 * i + 1 when batch i has passed that stage. Two device slots (double buffering): the upload
 * of batch i waits until batch i - 2 has been downloaded out of its slot.
 *
 * See the overlap: GPUHAL_TRACE=pipeline.json ./example_pipeline, then open pipeline.json
 * in https://ui.perfetto.dev (one track per queue; arrows are semaphore waits).
 *
 * Build: cc -std=c99 -I. examples/pipeline.c -ldl -lpthread */
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

enum { BATCHES = 8, SLOTS = 2, N = 1 << 20 };
#define BYTES ((uint64_t)N * sizeof(float))

static int failed(gpuhal_status_t status, const char* what) {
  if (!status) return 0;
  fprintf(stderr, "pipeline: %s failed: %s\n", what, gpuhal_status_message(status));
  gpuhal_status_free(status);
  return 1;
}

typedef struct pipeline_t {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* executable;
  gpuhal_kernel_t* saxpy;
  gpuhal_buffer_t* host_in;  /* BATCHES * N floats, pinned */
  gpuhal_buffer_t* host_out; /* BATCHES * N floats, pinned */
  gpuhal_buffer_t* x[SLOTS];
  gpuhal_buffer_t* y[SLOTS];
  gpuhal_command_buffer_t* upload;   /* copy slot 0 -> slot 1 */
  gpuhal_command_buffer_t* compute;  /* fill slot 1 with 1.0f; saxpy(2, slot 0, slot 1) */
  gpuhal_command_buffer_t* download; /* copy slot 0 -> slot 1 */
  gpuhal_semaphore_t *uploaded, *computed, *downloaded;
} pipeline_t;

static gpuhal_status_t record_copy(gpuhal_device_t* device, gpuhal_command_buffer_t** out) {
  gpuhal_status_t st = gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_REUSABLE, 2, out);
  if (!st) st = gpuhal_command_buffer_begin(*out);
  if (!st) st = gpuhal_cmd_copy(*out, gpuhal_ref_slot(0, 0), gpuhal_ref_slot(1, 0), BYTES);
  if (!st) st = gpuhal_command_buffer_end(*out);
  return st;
}

static gpuhal_status_t record_compute(pipeline_t* p) {
  const float one = 1.0f;
  gpuhal_arg_t args[4];
  gpuhal_status_t st;
  args[0] = gpuhal_arg_f32(2.0f);
  args[1] = gpuhal_arg_slot(0, 0); /* x */
  args[2] = gpuhal_arg_slot(1, 0); /* y */
  args[3] = gpuhal_arg_u32(N);
  st = gpuhal_command_buffer_create(p->device, GPUHAL_COMMAND_BUFFER_REUSABLE, 2, &p->compute);
  if (!st) st = gpuhal_command_buffer_begin(p->compute);
  if (!st) st = gpuhal_cmd_fill(p->compute, gpuhal_ref_slot(1, 0), BYTES, &one, sizeof(one));
  if (!st) st = gpuhal_cmd_barrier(p->compute); /* the fill before the kernel reads y */
  if (!st)
    st = gpuhal_cmd_dispatch(p->compute, p->saxpy, gpuhal_dim3(N / 256, 1, 1), gpuhal_dim3(256, 1, 1), 0, 4, args);
  if (!st) st = gpuhal_command_buffer_end(p->compute);
  return st;
}

static gpuhal_status_t setup(pipeline_t* p) {
  gpuhal_device_params_t params;
  gpuhal_status_t st;
  int s;
  memset(&params, 0, sizeof(params));
  params.queue_count = 3; /* upload, compute, download: three streams */
  st = gpuhal_driver_create(NULL, &p->driver);
  if (!st) st = gpuhal_device_create(p->driver, 0, &params, &p->device);
  if (!st) st = gpuhal_executable_load(p->device, saxpy_ptx, sizeof(saxpy_ptx), &p->executable);
  if (!st) st = gpuhal_executable_kernel(p->executable, "saxpy", &p->saxpy);
  if (!st) st = gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_HOST_PINNED, BATCHES * BYTES, &p->host_in);
  if (!st) st = gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_HOST_PINNED, BATCHES * BYTES, &p->host_out);
  for (s = 0; s < SLOTS && !st; ++s) {
    st = gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_DEVICE, BYTES, &p->x[s]);
    if (!st) st = gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_DEVICE, BYTES, &p->y[s]);
  }
  if (!st) st = record_copy(p->device, &p->upload);
  if (!st) st = record_compute(p);
  if (!st) st = record_copy(p->device, &p->download);
  if (!st) st = gpuhal_semaphore_create(p->driver, 0, &p->uploaded);
  if (!st) st = gpuhal_semaphore_create(p->driver, 0, &p->computed);
  if (!st) st = gpuhal_semaphore_create(p->driver, 0, &p->downloaded);
  return st;
}

/* Queues the three stages of batch i; returns at once (nothing here waits). */
static gpuhal_status_t submit_batch(pipeline_t* p, uint32_t i) {
  uint32_t slot = i % SLOTS;
  uint64_t done = i + 1, slot_free = i + 1 - SLOTS; /* batch i - SLOTS left the slot */
  gpuhal_buffer_t* up[2];
  gpuhal_buffer_t* xy[2];
  gpuhal_buffer_t* down[2];
  uint64_t up_offsets[2] = {0, 0}, down_offsets[2] = {0, 0};
  gpuhal_binding_table_t bind;
  gpuhal_semaphore_list_t no_wait = gpuhal_semaphore_list_empty();
  gpuhal_status_t st;

  up[0] = p->host_in;
  up[1] = p->x[slot];
  up_offsets[0] = i * BYTES;
  bind.count = 2;
  bind.buffers = up;
  bind.offsets = up_offsets;
  st = gpuhal_queue_execute(p->device, 0, i >= SLOTS ? gpuhal_semaphore_list_one(&p->downloaded, &slot_free) : no_wait,
                            gpuhal_semaphore_list_one(&p->uploaded, &done), p->upload, &bind);
  if (st) return st;

  xy[0] = p->x[slot];
  xy[1] = p->y[slot];
  bind.buffers = xy;
  bind.offsets = NULL;
  st = gpuhal_queue_execute(p->device, 1, gpuhal_semaphore_list_one(&p->uploaded, &done),
                            gpuhal_semaphore_list_one(&p->computed, &done), p->compute, &bind);
  if (st) return st;

  down[0] = p->y[slot];
  down[1] = p->host_out;
  down_offsets[1] = i * BYTES;
  bind.buffers = down;
  bind.offsets = down_offsets;
  return gpuhal_queue_execute(p->device, 2, gpuhal_semaphore_list_one(&p->computed, &done),
                              gpuhal_semaphore_list_one(&p->downloaded, &done), p->download, &bind);
}

static void teardown(pipeline_t* p) {
  int s;
  /* Queue operations hold references until gpuhal has retired them: let them finish, so
   * the releases below are the last ones and free everything now. */
  if (p->device) gpuhal_status_free(gpuhal_device_wait_idle(p->device, gpuhal_timeout_infinite()));
  gpuhal_semaphore_release(p->downloaded);
  gpuhal_semaphore_release(p->computed);
  gpuhal_semaphore_release(p->uploaded);
  gpuhal_command_buffer_release(p->download);
  gpuhal_command_buffer_release(p->compute);
  gpuhal_command_buffer_release(p->upload);
  for (s = 0; s < SLOTS; ++s) {
    gpuhal_buffer_release(p->y[s]);
    gpuhal_buffer_release(p->x[s]);
  }
  gpuhal_buffer_release(p->host_out);
  gpuhal_buffer_release(p->host_in);
  gpuhal_executable_release(p->executable);
  gpuhal_device_release(p->device);
  gpuhal_driver_release(p->driver); /* writes the trace when GPUHAL_TRACE is set */
}

int main(void) {
  pipeline_t p;
  float* in;
  float* out;
  uint32_t i, j, errors = 0;
  int64_t t0, t1;
  memset(&p, 0, sizeof(p));
  if (failed(setup(&p), "setup")) {
    teardown(&p);
    return 1;
  }
  in = (float*)gpuhal_buffer_host_pointer(p.host_in); /* pinned: the CPU writes it directly */
  out = (float*)gpuhal_buffer_host_pointer(p.host_out);
  for (i = 0; i < BATCHES; ++i)
    for (j = 0; j < N; ++j) in[(size_t)i * N + j] = (float)(i * 1000 + j % 1000);

  t0 = gpuhal_now_ns();
  for (i = 0; i < BATCHES; ++i)
    if (failed(submit_batch(&p, i), "submitting a batch")) {
      teardown(&p);
      return 1;
    }
  printf("pipeline: %d batches of %d floats queued in %.1f us (the host never waited)\n", BATCHES, N,
         (double)(gpuhal_now_ns() - t0) / 1e3);
  /* The only host wait: the last download. */
  if (failed(gpuhal_semaphore_wait(p.downloaded, BATCHES, gpuhal_timeout_relative_ns(60ll * 1000000000)), "wait")) {
    teardown(&p);
    return 1;
  }
  t1 = gpuhal_now_ns();
  for (i = 0; i < BATCHES; ++i)
    for (j = 0; j < N; ++j) {
      float x = (float)(i * 1000 + j % 1000);
      errors += out[(size_t)i * N + j] != 2.0f * x + 1.0f;
    }
  printf("pipeline: all batches done in %.2f ms; y = 2x + 1 over %d floats: %s\n", (double)(t1 - t0) / 1e6, BATCHES * N,
         errors ? "WRONG" : "correct");
  if (gpuhal_driver_trace_enabled(p.driver)) printf("pipeline: trace written at exit (GPUHAL_TRACE)\n");
  teardown(&p);
  return errors ? 1 : 0;
}
