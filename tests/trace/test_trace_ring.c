/* Tracing keeps bounded memory: with a ring of 64 records, a run that makes thousands keeps
 * the newest, says how many were dropped, and still writes a valid, nested timeline whose
 * GPU tracks keep their names (they were a record in the ring, the first to go), and
 * commands whose operation went are left out. */
#define GPUHAL_TRACE_CAPACITY 64
#include "test_internals.h"

#include "test_util.h"
#include "test_trace_json.h"

#include <unistd.h>

TU_TEST(ring_is_bounded) {
  char path[256];
  gpuhal_driver_options_t options;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_semaphore_t* sem = NULL;
  tt_trace t;
  const char* why;
  uint64_t v;
  size_t flows = 0;
  snprintf(path, sizeof(path), "/tmp/gpuhal_test_trace_ring_%ld.json", (long)getpid());
  memset(&options, 0, sizeof(options));
  options.trace_path = path;
  TU_REQUIRE_OK(gpuhal_driver_create(&options, &driver));
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &sem));
  for (v = 1; v <= 500; ++v) {
    uint64_t prev = v - 1;
    TU_CHECK_OK(gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_one(&sem, &prev),
                                     gpuhal_semaphore_list_one(&sem, &v), NULL, NULL));
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(sem, 500, gpuhal_timeout_relative_ns(60ll * 1000000000)));
  gpuhal_semaphore_release(sem);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  why = tt_load(path, &t);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  TU_REQUIRE(!why);
  TU_CHECK(t.dropped > 1000); /* ~5 records per barrier */
  TU_CHECK(t.span_count <= 64 && t.span_count > 0);
  TU_CHECK_STR_CONTAINS(tt_meta_name(&t, "process_name", 100, 0), "GPU 0");
  TU_CHECK_STR_CONTAINS(tt_meta_name(&t, "thread_name", 100, 0), "queue 0");
  why = tt_check_order_and_nesting(&t);
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  why = tt_check_flows(&t, "semaphore", &flows); /* only flows whose both ends survived */
  if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
  tt_free(&t);
  remove(path);
}

/* A command span of a STREAM execute whose operation span the ring dropped has nothing
 * to nest in: it is dropped too, never clamped onto another track's or operation's time.
 * Two queues, so the track before a GPU track has spans of its own. */
static void tt_run_stream_executes(const char* path, uint64_t executes) {
  gpuhal_driver_options_t options;
  gpuhal_device_params_t params;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_semaphore_t* sem = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* spin = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t arg = gpuhal_arg_u64(20);
  uint64_t v;
  int i;
  memset(&options, 0, sizeof(options));
  options.trace_path = path;
  memset(&params, 0, sizeof(params));
  params.queue_count = 2;
  TU_REQUIRE_OK(gpuhal_driver_create(&options, &driver));
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, &params, &device));
  TU_REQUIRE_OK(tu_load_kernel(device, "spin_us", &exe, &spin));
  TU_REQUIRE_OK(
      gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_REUSABLE | GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb));
  TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));
  for (i = 0; i < 6; ++i)
    TU_CHECK_OK(gpuhal_cmd_dispatch(cb, spin, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg));
  TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &sem));
  for (v = 1; v <= executes; ++v) {
    TU_CHECK_OK(gpuhal_queue_execute(device, (uint32_t)(v % 2), gpuhal_semaphore_list_empty(),
                                     gpuhal_semaphore_list_one(&sem, &v), cb, NULL));
    TU_CHECK_OK(gpuhal_semaphore_wait(sem, v, gpuhal_timeout_relative_ns(10ll * 1000000000)));
  }
  gpuhal_semaphore_release(sem);
  gpuhal_command_buffer_release(cb);
  gpuhal_executable_release(exe);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_TEST(commands_without_their_operation_are_dropped) {
  char path[256];
  uint64_t executes;
  snprintf(path, sizeof(path), "/tmp/gpuhal_test_trace_ring_%ld_orphans.json", (long)getpid());
  /* where the ring cuts an execute's records depends on the count: try several */
  for (executes = 18; executes <= 25; ++executes) {
    tt_trace t;
    const char* why;
    size_t i, j, commands = 0;
    tt_run_stream_executes(path, executes);
    why = tt_load(path, &t);
    if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
    TU_REQUIRE(!why);
    for (i = 0; i < t.span_count; ++i) {
      const tt_span* c = &t.spans[i];
      const tt_span* op = NULL;
      double span = tj_num(tj_get(c->e, "args"), "span", -1);
      if (strcmp(c->cat, "gpu") || c->command < 0) continue;
      ++commands;
      for (j = 0; j < t.span_count && !op; ++j)
        if (!strcmp(t.spans[j].cat, "gpu") && t.spans[j].command < 0 &&
            tj_num(tj_get(t.spans[j].e, "args"), "span", -2) == span)
          op = &t.spans[j];
      if (!op) {
        TU_FAIL_AT(__FILE__, __LINE__, "%llu executes: command %d of span %.0f at %.3f without its operation",
                   (unsigned long long)executes, c->command, span, c->ts);
        continue;
      }
      TU_CHECK(op->pid == c->pid && op->tid == c->tid);
      TU_CHECK(c->ts >= op->ts - 0.0015 && c->ts + c->dur <= op->ts + op->dur + 0.0015);
    }
    TU_CHECK(commands > 0);
    why = tt_check_order_and_nesting(&t);
    if (why) TU_FAIL_AT(__FILE__, __LINE__, "%s", why);
    tt_free(&t);
  }
  remove(path);
}

TU_MAIN(TU_CASE(ring_is_bounded), TU_CASE(commands_without_their_operation_are_dropped))
