/* Tracing (src/trace.h): the Chrome-trace JSON that GPUHAL_TRACE / options.trace_path
 * writes. A three-queue pipeline (upload, compute, download ordered only by semaphores,
 * double-buffered) must give a valid timeline: named processes and tracks, spans in time
 * order that nest on every track, commands of STREAM executes inside their execute,
 * semaphore flow arrows whose ends bind to spans, stages of a batch in order, and the GPU
 * spans of neighbouring batches really overlapping. Runs on softcuda and on a real GPU. */
#define _DEFAULT_SOURCE 1 /* mknod, for a device node at the trace path */
#include "gpuhal.h"

#include "test_util.h"
#include "test_trace_json.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <unistd.h>

static const char spin_us_ptx[] =
    ".version 8.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "\n"
    "\t// .globl\tspin_us\n"
    "\n"
    ".visible .entry spin_us(\n"
    "\t.param .u64 spin_us_param_0\n"
    ")\n"
    "{\n"
    "\t.reg .pred \t%p<2>;\n"
    "\t.reg .b64 \t%rd<7>;\n"
    "\n"
    "\n"
    "\tld.param.u64 \t%rd4, [spin_us_param_0];\n"
    "\tmov.u64 %rd3, %globaltimer;\n"
    "\tmul.lo.s64 \t%rd2, %rd4, 1000;\n"
    "\n"
    "$L__BB0_1:\n"
    "\tmov.u64 %rd5, %globaltimer;\n"
    "\tsub.s64 \t%rd6, %rd5, %rd3;\n"
    "\tsetp.lt.u64 \t%p1, %rd6, %rd2;\n"
    "\t@%p1 bra \t$L__BB0_1;\n"
    "\n"
    "\tret;\n"
    "\n"
    "}\n";

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

enum { TT_BATCHES = 6, TT_SLOTS = 2, TT_N = 1 << 16, TT_SPIN_US = 4000 };
#define TT_BYTES ((uint64_t)TT_N * sizeof(float))

/* Reports a failed set-up step; 1 when there was one. */
static int tt_failed(gpuhal_status_t status, const char* what) {
  if (!status) return 0;
  TU_FAIL_AT(__FILE__, __LINE__, "%s: %s", what, gpuhal_status_message(status));
  gpuhal_status_free(status);
  return 1;
}

static void tt_path(char* path, size_t size, const char* what) {
  snprintf(path, size, "/tmp/gpuhal_test_trace_%ld_%s.json", (long)getpid(), what);
}

static gpuhal_status_t tt_driver(const char* path, gpuhal_driver_t** out) {
  gpuhal_driver_options_t options;
  memset(&options, 0, sizeof(options));
  options.trace_path = path;
  return gpuhal_driver_create(&options, out);
}

typedef struct tt_pipeline {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t *spin_exe, *saxpy_exe;
  gpuhal_kernel_t *spin, *saxpy;
  gpuhal_buffer_t *host_in, *host_out, *x[TT_SLOTS], *y[TT_SLOTS];
  gpuhal_command_buffer_t *upload, *compute, *download;
  gpuhal_semaphore_t *uploaded, *computed, *downloaded;
} tt_pipeline;

static gpuhal_status_t tt_record_copy(gpuhal_device_t* device, gpuhal_command_buffer_t** out) {
  gpuhal_status_t st = gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_REUSABLE, 2, out);
  if (!st) st = gpuhal_command_buffer_begin(*out);
  if (!st) st = gpuhal_cmd_copy(*out, gpuhal_ref_slot(0, 0), gpuhal_ref_slot(1, 0), TT_BYTES);
  if (!st) st = gpuhal_command_buffer_end(*out);
  return st;
}

/* compute: a STREAM command buffer (so it has command spans): spin, fill y with 1, saxpy. */
static gpuhal_status_t tt_record_compute(tt_pipeline* p) {
  const float one = 1.0f;
  gpuhal_arg_t spin_arg = gpuhal_arg_u64(TT_SPIN_US);
  gpuhal_arg_t args[4];
  gpuhal_status_t st;
  args[0] = gpuhal_arg_f32(2.0f);
  args[1] = gpuhal_arg_slot(0, 0);
  args[2] = gpuhal_arg_slot(1, 0);
  args[3] = gpuhal_arg_u32(TT_N);
  st = gpuhal_command_buffer_create(p->device, GPUHAL_COMMAND_BUFFER_REUSABLE | GPUHAL_COMMAND_BUFFER_STREAM, 2,
                                    &p->compute);
  if (!st) st = gpuhal_command_buffer_begin(p->compute);
  if (!st) st = gpuhal_cmd_dispatch(p->compute, p->spin, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &spin_arg);
  if (!st) st = gpuhal_cmd_fill(p->compute, gpuhal_ref_slot(1, 0), TT_BYTES, &one, sizeof(one));
  if (!st) st = gpuhal_cmd_barrier(p->compute);
  if (!st)
    st = gpuhal_cmd_dispatch(p->compute, p->saxpy, gpuhal_dim3(TT_N / 256, 1, 1), gpuhal_dim3(256, 1, 1), 0, 4, args);
  if (!st) st = gpuhal_command_buffer_end(p->compute);
  return st;
}

static gpuhal_status_t tt_setup(tt_pipeline* p, const char* path) {
  gpuhal_device_params_t params;
  gpuhal_status_t st;
  int s;
  memset(p, 0, sizeof(*p));
  memset(&params, 0, sizeof(params));
  params.queue_count = 3;
  st = tt_driver(path, &p->driver);
  if (!st) st = gpuhal_device_create(p->driver, 0, &params, &p->device);
  if (!st) st = gpuhal_executable_load(p->device, spin_us_ptx, sizeof(spin_us_ptx), &p->spin_exe);
  if (!st) st = gpuhal_executable_kernel(p->spin_exe, "spin_us", &p->spin);
  if (!st) st = gpuhal_executable_load(p->device, saxpy_ptx, sizeof(saxpy_ptx), &p->saxpy_exe);
  if (!st) st = gpuhal_executable_kernel(p->saxpy_exe, "saxpy", &p->saxpy);
  if (!st) st = gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_HOST_PINNED, TT_BATCHES * TT_BYTES, &p->host_in);
  if (!st) st = gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_HOST_PINNED, TT_BATCHES * TT_BYTES, &p->host_out);
  for (s = 0; s < TT_SLOTS && !st; ++s) {
    st = gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_DEVICE, TT_BYTES, &p->x[s]);
    if (!st) st = gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_DEVICE, TT_BYTES, &p->y[s]);
  }
  if (!st) st = tt_record_copy(p->device, &p->upload);
  if (!st) st = tt_record_compute(p);
  if (!st) st = tt_record_copy(p->device, &p->download);
  if (!st) st = gpuhal_semaphore_create(p->driver, 0, &p->uploaded);
  if (!st) st = gpuhal_semaphore_create(p->driver, 0, &p->computed);
  if (!st) st = gpuhal_semaphore_create(p->driver, 0, &p->downloaded);
  return st;
}

static gpuhal_status_t tt_submit_batch(tt_pipeline* p, uint32_t i) {
  uint32_t slot = i % TT_SLOTS;
  uint64_t done = i + 1, slot_free = i + 1 - TT_SLOTS;
  gpuhal_buffer_t* b[2];
  uint64_t offsets[2] = {0, 0};
  gpuhal_binding_table_t bind;
  gpuhal_status_t st;
  bind.count = 2;
  bind.buffers = b;
  bind.offsets = offsets;
  b[0] = p->host_in;
  b[1] = p->x[slot];
  offsets[0] = i * TT_BYTES;
  st = gpuhal_queue_execute(
      p->device, 0,
      i >= TT_SLOTS ? gpuhal_semaphore_list_one(&p->downloaded, &slot_free) : gpuhal_semaphore_list_empty(),
      gpuhal_semaphore_list_one(&p->uploaded, &done), p->upload, &bind);
  if (st) return st;
  b[0] = p->x[slot];
  b[1] = p->y[slot];
  offsets[0] = 0;
  st = gpuhal_queue_execute(p->device, 1, gpuhal_semaphore_list_one(&p->uploaded, &done),
                            gpuhal_semaphore_list_one(&p->computed, &done), p->compute, &bind);
  if (st) return st;
  b[0] = p->y[slot];
  b[1] = p->host_out;
  offsets[1] = i * TT_BYTES;
  return gpuhal_queue_execute(p->device, 2, gpuhal_semaphore_list_one(&p->computed, &done),
                              gpuhal_semaphore_list_one(&p->downloaded, &done), p->download, &bind);
}

static void tt_teardown(tt_pipeline* p) {
  int s;
  if (p->device) gpuhal_status_free(gpuhal_device_wait_idle(p->device, gpuhal_timeout_infinite()));
  gpuhal_semaphore_release(p->downloaded);
  gpuhal_semaphore_release(p->computed);
  gpuhal_semaphore_release(p->uploaded);
  gpuhal_command_buffer_release(p->download);
  gpuhal_command_buffer_release(p->compute);
  gpuhal_command_buffer_release(p->upload);
  for (s = 0; s < TT_SLOTS; ++s) {
    gpuhal_buffer_release(p->y[s]);
    gpuhal_buffer_release(p->x[s]);
  }
  gpuhal_buffer_release(p->host_out);
  gpuhal_buffer_release(p->host_in);
  gpuhal_executable_release(p->saxpy_exe);
  gpuhal_executable_release(p->spin_exe);
  gpuhal_device_release(p->device);
  gpuhal_driver_release(p->driver); /* writes the trace */
}

/* The operation spans (not commands) of GPU queue `queue`, in time order. */
static size_t tt_queue_ops(const tt_trace* t, int queue, const tt_span** out, size_t max) {
  size_t i, n = 0;
  for (i = 0; i < t->span_count && n < max; ++i) {
    const tt_span* s = &t->spans[i];
    if (s->pid == 100 && s->tid == queue && s->command < 0) out[n++] = s;
  }
  return n;
}

static int tt_overlap(const tt_span* a, const tt_span* b) {
  double lo = a->ts > b->ts ? a->ts : b->ts;
  double hi = a->ts + a->dur < b->ts + b->dur ? a->ts + a->dur : b->ts + b->dur;
  return hi > lo;
}

/* One run of the pipeline and the checks of its trace; *out_overlaps: how many GPU spans of
 * one batch overlap the compute of another (-1 when the run stopped before). */
static void tt_pipeline_timeline_run(int* out_overlaps) {
  char path[256];
  tt_pipeline p;
  tt_trace t;
  const char* why;
  const tt_span* up[TT_BATCHES + 1];
  const tt_span* comp[TT_BATCHES + 1];
  const tt_span* down[TT_BATCHES + 1];
  size_t i, j, semaphore_flows = 0, submit_flows = 0, spins = 0, submits = 0, issues = 0;
  float* in;
  float* out;
  int overlaps = 0, errors = 0;
  *out_overlaps = -1;
  tt_path(path, sizeof(path), "pipeline");
  if (tt_failed(tt_setup(&p, path), "pipeline set-up")) {
    tt_teardown(&p);
    return;
  }
  TU_CHECK(gpuhal_driver_trace_enabled(p.driver));
  in = (float*)gpuhal_buffer_host_pointer(p.host_in);
  out = (float*)gpuhal_buffer_host_pointer(p.host_out);
  for (i = 0; i < (size_t)TT_BATCHES * TT_N; ++i) in[i] = (float)(i % 977);
  for (i = 0; i < TT_BATCHES; ++i) TU_CHECK_OK(tt_submit_batch(&p, (uint32_t)i));
  TU_CHECK_OK(gpuhal_semaphore_wait(p.downloaded, TT_BATCHES, gpuhal_timeout_relative_ns(120ll * 1000000000)));
  for (i = 0; i < (size_t)TT_BATCHES * TT_N; ++i) errors += out[i] != 2.0f * (float)(i % 977) + 1.0f;
  TU_CHECK_EQ_INT(errors, 0);
  tt_teardown(&p);

  why = tt_load(path, &t);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  TU_REQUIRE(!why);
  TU_CHECK_EQ_INT(t.dropped, 0);
  /* Tracks: the host process, the GPU process and its three queues. */
  TU_CHECK_STR_CONTAINS(tt_meta_name(&t, "process_name", 1, 0), "host");
  TU_CHECK_STR_CONTAINS(tt_meta_name(&t, "process_name", 100, 0), "GPU 0");
  TU_CHECK_STR_CONTAINS(tt_meta_name(&t, "thread_name", 100, 0), "queue 0");
  TU_CHECK_STR_CONTAINS(tt_meta_name(&t, "thread_name", 100, 1), "queue 1");
  TU_CHECK_STR_CONTAINS(tt_meta_name(&t, "thread_name", 100, 2), "queue 2");
  why = tt_check_order_and_nesting(&t);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  /* Spans: one GPU span per stage per batch. */
  TU_REQUIRE(tt_queue_ops(&t, 0, up, TT_BATCHES + 1) == TT_BATCHES);
  TU_REQUIRE(tt_queue_ops(&t, 1, comp, TT_BATCHES + 1) == TT_BATCHES);
  TU_REQUIRE(tt_queue_ops(&t, 2, down, TT_BATCHES + 1) == TT_BATCHES);
  TU_CHECK_STR_CONTAINS(up[0]->name, "execute graph");
  TU_CHECK_STR_CONTAINS(comp[0]->name, "execute stream");
  for (i = 0; i < t.span_count; ++i) {
    const tt_span* s = &t.spans[i];
    if (!strcmp(s->cat, "host") && strstr(s->name, "submit execute")) submits++;
    if (!strcmp(s->cat, "host") && strstr(s->name, "issue execute")) issues++;
    if (s->command >= 0 && !strcmp(s->name, "spin_us")) {
      /* A command span lies inside its execute span on the same track. */
      int inside = 0;
      for (j = 0; j < TT_BATCHES; ++j)
        inside |= s->tid == 1 && s->ts >= comp[j]->ts - 0.0015 && s->ts + s->dur <= comp[j]->ts + comp[j]->dur + 0.0015;
      TU_CHECK(inside);
      TU_CHECK(s->dur >= TT_SPIN_US * 0.9);
      spins++;
    }
  }
  TU_CHECK_EQ_INT(spins, TT_BATCHES);
  TU_CHECK_EQ_INT(submits, 3 * TT_BATCHES);
  TU_CHECK_EQ_INT(issues, 3 * TT_BATCHES);
  /* Order within a batch: upload, then compute, then download (GPU-side waits). */
  for (i = 0; i < TT_BATCHES; ++i) {
    TU_CHECK(up[i]->ts + up[i]->dur <= comp[i]->ts + 2.0);
    TU_CHECK(comp[i]->ts + comp[i]->dur <= down[i]->ts + 2.0);
    if (i >= TT_SLOTS) TU_CHECK(down[i - TT_SLOTS]->ts + down[i - TT_SLOTS]->dur <= up[i]->ts + 2.0);
  }
  /* The point of the pipeline: batch i + 1's upload or batch i - 1's download runs while
   * batch i computes. */
  for (i = 0; i < TT_BATCHES; ++i) {
    if (i + 1 < TT_BATCHES && tt_overlap(up[i + 1], comp[i])) overlaps++;
    if (i > 0 && tt_overlap(down[i - 1], comp[i])) overlaps++;
  }
  *out_overlaps = overlaps;
  /* Flows: upload->compute and compute->download per batch, download->upload for slot reuse. */
  why = tt_check_flows(&t, "semaphore", &semaphore_flows);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  TU_CHECK_EQ_INT(semaphore_flows, 2 * TT_BATCHES + (TT_BATCHES - TT_SLOTS));
  why = tt_check_flows(&t, "submit", &submit_flows);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  TU_CHECK_EQ_INT(submit_flows, 3 * TT_BATCHES);
  tt_free(&t);
  remove(path);
}

/* The point of the pipeline is that batch i + 1's upload or batch i - 1's download runs
 * while batch i computes. Whether they overlap is the host's scheduling too: on a loaded
 * 2-core machine one run in many had none, so up to 3 runs, every one fully checked. */
TU_TEST(pipeline_timeline) {
  int run, overlaps = 0;
  for (run = 1; run <= 3; ++run) {
    tt_pipeline_timeline_run(&overlaps);
    if (overlaps != 0) break;
    fprintf(stderr, "  run %d: no GPU span of one batch overlapped the compute of another; again\n", run);
  }
  if (overlaps == 0) TU_FAIL_AT(__FILE__, __LINE__, "no GPU span of one batch overlaps the compute of another");
}

/* Off unless asked for (CTest does not set GPUHAL_TRACE): no file, flush says why. */
TU_TEST(off_by_default_and_bad_input) {
  gpuhal_driver_t* driver = NULL;
  if (getenv("GPUHAL_TRACE")) TU_SKIP("GPUHAL_TRACE is set in the environment");
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_CHECK_EQ_INT(gpuhal_driver_trace_enabled(driver), 0);
  TU_CHECK_STATUS(gpuhal_driver_trace_flush(driver), GPUHAL_STATUS_FAILED_PRECONDITION, "tracing is off");
  gpuhal_driver_release(driver);
  TU_CHECK_STATUS(gpuhal_driver_trace_flush(NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "driver");
  TU_CHECK_EQ_INT(gpuhal_driver_trace_enabled(NULL), 0);
}

/* A trace file that cannot be written fails driver creation at once, naming the path. */
TU_TEST(unwritable_path_fails_early) {
  gpuhal_driver_t* driver = NULL;
  char long_path[700];
  TU_CHECK_STATUS(tt_driver("/nonexistent-dir/gpuhal/trace.json", &driver), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "/nonexistent-dir/gpuhal/trace.json");
  TU_CHECK(driver == NULL);
  /* A path too long to keep is refused, not cut (it wrote a trace under a truncated name). */
  memset(long_path, 0, sizeof(long_path));
  strcpy(long_path, "/tmp");
  while (strlen(long_path) < 600) strcat(long_path, "/./././././././.");
  strcat(long_path, "/trace.json");
  TU_CHECK_STATUS(tt_driver(long_path, &driver), GPUHAL_STATUS_INVALID_ARGUMENT, "options->trace_path");
  TU_CHECK(driver == NULL);
}

static gpuhal_status_t tt_host_fn(void* user) {
  *(int*)user += 1;
  return NULL;
}

/* Host calls get a span on the device's host-call thread and take part in flows; barriers
 * and allocas get GPU spans; a flush mid-run writes a valid file of what is done so far. */
TU_TEST(host_calls_allocas_and_flush) {
  char path[256];
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_semaphore_t* sem = NULL;
  gpuhal_buffer_t* buffer = NULL;
  tt_trace t;
  const char* why;
  uint64_t v1 = 1, v2 = 2, v3 = 3, v4 = 4;
  int ran = 0;
  size_t i, flows = 0, host_calls = 0, allocas = 0, barriers = 0;
  tt_path(path, sizeof(path), "host_call");
  TU_REQUIRE_OK(tt_driver(path, &driver));
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &sem));
  TU_CHECK_OK(
      gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &v1), NULL, NULL));
  TU_CHECK_OK(gpuhal_queue_host_call(device, 0, gpuhal_semaphore_list_one(&sem, &v1),
                                     gpuhal_semaphore_list_one(&sem, &v2), tt_host_fn, &ran));
  TU_CHECK_OK(gpuhal_queue_alloca(device, 0, gpuhal_semaphore_list_one(&sem, &v2), gpuhal_semaphore_list_one(&sem, &v3),
                                  4096, &buffer));
  TU_CHECK_OK(gpuhal_queue_dealloca(device, 0, gpuhal_semaphore_list_one(&sem, &v3),
                                    gpuhal_semaphore_list_one(&sem, &v4), buffer));
  TU_CHECK_OK(gpuhal_semaphore_wait(sem, 4, gpuhal_timeout_relative_ns(30ll * 1000000000)));
  TU_CHECK_OK(gpuhal_device_wait_idle(device, gpuhal_timeout_infinite()));
  TU_CHECK_EQ_INT(ran, 1);
  /* Flush while the driver lives. */
  TU_CHECK_OK(gpuhal_driver_trace_flush(driver));
  why = tt_load(path, &t);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  if (!why) {
    why = tt_check_order_and_nesting(&t);
    if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
    why = tt_check_flows(&t, "semaphore", &flows);
    if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
    TU_CHECK_EQ_INT(flows, 3); /* barrier -> host_call -> alloca -> dealloca */
    for (i = 0; i < t.span_count; ++i) {
      host_calls += !strcmp(t.spans[i].name, "host_call") && t.spans[i].pid == 1;
      allocas += !strcmp(t.spans[i].name, "alloca") && t.spans[i].pid == 100;
      barriers += !strcmp(t.spans[i].name, "barrier") && t.spans[i].pid == 100;
    }
    TU_CHECK_EQ_INT(host_calls, 1);
    TU_CHECK_EQ_INT(allocas, 1);
    TU_CHECK_EQ_INT(barriers, 1);
    TU_CHECK(t.meta_count > 0);
    {
      int tid = -1;
      for (i = 0; i < t.span_count; ++i)
        if (!strcmp(t.spans[i].name, "host_call")) tid = t.spans[i].tid;
      TU_CHECK_STR_CONTAINS(tt_meta_name(&t, "thread_name", 1, tid), "host calls");
    }
    tt_free(&t);
  }
  gpuhal_buffer_release(buffer);
  gpuhal_semaphore_release(sem);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  /* The release rewrote the file: still valid. */
  why = tt_load(path, &t);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "after release: %s", why);
  tt_free(&t);
  remove(path);
}

/* Reads what is in the FIFO `fd` (opened non-blocking) into `buf`; the byte count. */
static size_t tt_drain_fifo(int fd, char* buf, size_t size) {
  size_t got = 0;
  ssize_t n;
  while (got + 1 < size && (n = read(fd, buf + got, size - 1 - got)) > 0) got += (size_t)n;
  buf[got] = 0;
  return got;
}

static int tt_is_trace_text(const char* text) {
  return strncmp(text, "{\"displayTimeUnit\"", 18) == 0 && strstr(text, "\"traceEvents\"") != NULL;
}

/* A trace path that is not a regular file is never replaced by one (a flush used to write a
 * temporary file and rename it over the path: a FIFO, a device node or a symlink became a
 * regular file, and as root GPUHAL_TRACE=/dev/null replaced /dev/null). A FIFO is written
 * in place (and a FIFO with no reader fails at once instead of blocking), a symlink's target
 * is written, a character device (made here when root may) is written in place. Only nodes
 * made in a fresh temporary directory are used, never the system's. */
TU_TEST(special_paths_are_not_replaced) {
  char dir[64], fifo[128], real[128], link[128], node[128], text[1 << 16];
  gpuhal_driver_t* driver = NULL;
  struct stat st;
  tt_trace t;
  const char* why;
  int fd;
  snprintf(dir, sizeof(dir), "/tmp/gpuhal_test_trace_special_XXXXXX");
  TU_REQUIRE(mkdtemp(dir) != NULL);
  snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
  snprintf(real, sizeof(real), "%s/real.json", dir);
  snprintf(link, sizeof(link), "%s/link", dir);
  snprintf(node, sizeof(node), "%s/null", dir);
  TU_REQUIRE(mkfifo(fifo, 0600) == 0);
  /* FIFO with a reader: each write is a whole trace, the FIFO stays a FIFO. */
  fd = open(fifo, O_RDONLY | O_NONBLOCK);
  TU_REQUIRE(fd >= 0);
  TU_CHECK_OK(tt_driver(fifo, &driver));
  if (driver) {
    TU_CHECK(tt_drain_fifo(fd, text, sizeof(text)) > 0 && tt_is_trace_text(text));
    TU_CHECK_OK(gpuhal_driver_trace_flush(driver));
    TU_CHECK(tt_drain_fifo(fd, text, sizeof(text)) > 0 && tt_is_trace_text(text));
    close(fd);
    fd = -1;
    /* No reader: the flush fails now, it does not block. */
    TU_CHECK_STATUS(gpuhal_driver_trace_flush(driver), GPUHAL_STATUS_UNAVAILABLE, "no reader");
    fd = open(fifo, O_RDONLY | O_NONBLOCK);
    gpuhal_driver_release(driver);
    driver = NULL;
  }
  if (fd >= 0) close(fd);
  TU_CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  TU_CHECK_STATUS(tt_driver(fifo, &driver), GPUHAL_STATUS_INVALID_ARGUMENT, "no reader");
  TU_CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  /* Symlink: stays a link, its target gets the trace. */
  fd = open(real, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TU_REQUIRE(fd >= 0);
  close(fd);
  TU_REQUIRE(symlink("real.json", link) == 0);
  TU_CHECK_OK(tt_driver(link, &driver));
  gpuhal_driver_release(driver);
  driver = NULL;
  TU_CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
  why = tt_load(real, &t);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "the link's target: %s", why);
  tt_free(&t);
  /* Character device (1,3 is null): only where this process may make one. */
  if (mknod(node, S_IFCHR | 0666, makedev(1, 3)) == 0) {
    TU_CHECK_OK(tt_driver(node, &driver));
    gpuhal_driver_release(driver);
    driver = NULL;
    TU_CHECK(lstat(node, &st) == 0 && S_ISCHR(st.st_mode));
    remove(node);
  } else {
    fprintf(stderr, "  (no device node: mknod: %s)\n", strerror(errno));
  }
  remove(link);
  remove(real);
  remove(fifo);
  TU_CHECK(rmdir(dir) == 0); /* nothing else (no temporary file) was left there */
}

/* A relative trace path is taken from the working directory when the driver is created:
 * a later chdir does not move the trace (each write used to resolve it again). */
TU_TEST(relative_path_survives_chdir) {
  char first[64], second[64], cwd[4096], at_first[128], at_second[128];
  gpuhal_driver_t* driver = NULL;
  tt_trace t;
  const char* why;
  TU_REQUIRE(getcwd(cwd, sizeof(cwd)) != NULL);
  snprintf(first, sizeof(first), "/tmp/gpuhal_test_trace_cwd1_XXXXXX");
  snprintf(second, sizeof(second), "/tmp/gpuhal_test_trace_cwd2_XXXXXX");
  TU_REQUIRE(mkdtemp(first) != NULL && mkdtemp(second) != NULL);
  snprintf(at_first, sizeof(at_first), "%s/rel.json", first);
  snprintf(at_second, sizeof(at_second), "%s/rel.json", second);
  TU_REQUIRE(chdir(first) == 0);
  TU_CHECK_OK(tt_driver("rel.json", &driver));
  TU_CHECK(chdir(second) == 0);
  if (driver) {
    TU_CHECK_OK(gpuhal_driver_trace_flush(driver));
    gpuhal_driver_release(driver);
  }
  TU_CHECK(chdir(cwd) == 0);
  TU_CHECK(access(at_second, F_OK) != 0);
  why = tt_load(at_first, &t);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  tt_free(&t);
  remove(at_first);
  remove(at_second);
  TU_CHECK(rmdir(first) == 0);
  TU_CHECK(rmdir(second) == 0);
}

/* A host span inside another on the same thread keeps its own times: the fast path's
 * "issue" runs inside its "submit" on the submitting thread, and must show there with its
 * length, not pushed to the submit's end with none (only GPU tracks are fixed up). */
TU_TEST(nested_host_spans_keep_their_times) {
  char path[256];
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_semaphore_t* sem = NULL;
  tt_trace t;
  const char* why;
  uint64_t v;
  size_t i, j, nested = 0;
  tt_path(path, sizeof(path), "nested");
  TU_REQUIRE_OK(tt_driver(path, &driver));
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &sem));
  for (v = 1; v <= 20; ++v) { /* idle queue, nothing to wait for: the submitter issues */
    TU_CHECK_OK(gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &v),
                                     NULL, NULL));
    TU_CHECK_OK(gpuhal_semaphore_wait(sem, v, gpuhal_timeout_relative_ns(10ll * 1000000000)));
  }
  gpuhal_semaphore_release(sem);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  why = tt_load(path, &t);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  TU_REQUIRE(!why);
  for (i = 0; i < t.span_count; ++i) {
    const tt_span* issue = &t.spans[i];
    if (strcmp(issue->cat, "host") || strncmp(issue->name, "issue", 5)) continue;
    for (j = 0; j < t.span_count; ++j) {
      const tt_span* submit = &t.spans[j];
      if (strcmp(submit->cat, "host") || strncmp(submit->name, "submit", 6) || submit->pid != issue->pid ||
          submit->tid != issue->tid || issue->ts < submit->ts || issue->ts > submit->ts + submit->dur)
        continue;
      ++nested;
      /* the issue did work (it launched a barrier), inside the submit that made it */
      TU_CHECK(issue->dur > 0);
      TU_CHECK(issue->ts < submit->ts + submit->dur);
      TU_CHECK(issue->ts + issue->dur <= submit->ts + submit->dur + 0.0015);
    }
  }
  TU_CHECK(nested > 0);
  why = tt_check_order_and_nesting(&t);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  tt_free(&t);
  remove(path);
}

/* JSON is UTF-8 and paths need not be: a CUDA library path with bytes that are no UTF-8
 * character still gives a file parsers take, each bad byte as U+FFFD, and the well-formed
 * characters around them as they were. */
TU_TEST(invalid_utf8_is_replaced) {
  char path[256], link[256];
  const char* lib = getenv("GPUHAL_CUDA_LIBRARY");
  gpuhal_driver_options_t options;
  gpuhal_driver_t* driver = NULL;
  tt_trace t;
  const char* why;
  const char* written;
  if (!lib || !lib[0]) TU_SKIP("needs GPUHAL_CUDA_LIBRARY to link to");
  tt_path(path, sizeof(path), "utf8");
  /* a stray 0xff, a well-formed e-acute, a 3-byte character cut after 2 bytes */
  snprintf(link, sizeof(link), "/tmp/gpuhal_test_trace_%ld_lib\xff-\xc3\xa9-\xe2\x82.so", (long)getpid());
  remove(link);
  TU_REQUIRE(symlink(lib, link) == 0);
  memset(&options, 0, sizeof(options));
  options.trace_path = path;
  options.cuda_library = link;
  TU_CHECK_OK(gpuhal_driver_create(&options, &driver));
  gpuhal_driver_release(driver);
  remove(link);
  why = tt_load(path, &t);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  TU_REQUIRE(!why);
  written = tj_str(tj_get(t.root, "otherData"), "cuda_library");
  TU_REQUIRE(written != NULL);
  /* the test parser reads U+FFFD (like any escape past ASCII) as '?' */
  TU_CHECK_STR_CONTAINS(written, "_lib?-\xc3\xa9-??.so");
  tt_free(&t);
  remove(path);
}

TU_MAIN(TU_CASE(pipeline_timeline), TU_CASE(off_by_default_and_bad_input), TU_CASE(unwritable_path_fails_early),
        TU_CASE(host_calls_allocas_and_flush), TU_CASE(special_paths_are_not_replaced),
        TU_CASE(relative_path_survives_chdir), TU_CASE(nested_host_spans_keep_their_times),
        TU_CASE(invalid_utf8_is_replaced))
