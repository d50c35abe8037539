/* bench_report - how long gpuhal_driver_report_pending takes when much is pending.
 *
 *   bench_report [operations] [repetitions]      (defaults 10000, 5)
 *
 * Queues `operations` executes of a one-fill command buffer across 3 queues, every one of
 * them behind a gate semaphore nothing signals yet; each signals its queue's semaphore, and
 * those on queue 2 also wait for queue 0's (so the report has cross-queue waits to
 * resolve). Then it times
 * the report as a hang handler takes it: a call for the length, a call for the text.
 * Target: under 50 ms for 10,000 operations. Then the gate opens and everything runs.
 *
 * On softcuda this is a smoke test. */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BR_QUEUES 3u
#define BR_MAX_REPS 32

static int br_failures;

static int br_ok(gpuhal_status_t s, const char* what) {
  if (!s) return 1;
  fprintf(stderr, "bench_report: %s: %s\n", what, gpuhal_status_message(s));
  gpuhal_status_free(s);
  br_failures++;
  return 0;
}

static int br_compare(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return a < b ? -1 : a > b;
}

int main(int argc, char** argv) {
  int ops = argc > 1 ? atoi(argv[1]) : 10000;
  int reps = argc > 2 ? atoi(argv[2]) : 5;
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_buffer_t* scratch = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t* gate = NULL;
  gpuhal_semaphore_t* lanes[BR_QUEUES] = {NULL, NULL, NULL};
  gpuhal_device_params_t params;
  double ms[BR_MAX_REPS];
  size_t length = 0;
  char* text = NULL;
  uint32_t pattern = 1;
  int i;
  if (ops < 1) ops = 1;
  if (reps < 1) reps = 1;
  if (reps > BR_MAX_REPS) reps = BR_MAX_REPS;
  memset(&params, 0, sizeof(params));
  params.queue_count = BR_QUEUES;
  if (!br_ok(gpuhal_driver_create(NULL, &driver), "driver")) return 1;
  if (!br_ok(gpuhal_device_create(driver, 0, &params, &device), "device") ||
      !br_ok(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, 256, &scratch), "buffer") ||
      !br_ok(
          gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_REUSABLE | GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb),
          "command buffer") ||
      !br_ok(gpuhal_command_buffer_begin(cb), "begin") ||
      !br_ok(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(scratch, 0), 4, &pattern, 4), "fill") ||
      !br_ok(gpuhal_command_buffer_end(cb), "end") || !br_ok(gpuhal_command_buffer_set_label(cb, "fill"), "label") ||
      !br_ok(gpuhal_semaphore_create(driver, 0, &gate), "semaphore"))
    goto done;
  gpuhal_semaphore_set_label(gate, "gate");
  for (i = 0; i < (int)BR_QUEUES; ++i) {
    char label[16];
    if (!br_ok(gpuhal_semaphore_create(driver, 0, &lanes[i]), "semaphore")) goto done;
    snprintf(label, sizeof(label), "lane %d", i);
    gpuhal_semaphore_set_label(lanes[i], label);
  }
  for (i = 0; i < ops; ++i) {
    uint32_t q = (uint32_t)i % BR_QUEUES;
    uint64_t next = (uint64_t)i / BR_QUEUES + 1;
    gpuhal_semaphore_t* waits[2] = {gate, lanes[0]};
    uint64_t values[2] = {1, next};
    gpuhal_semaphore_list_t wait = {q == 2 ? 2u : 1u, waits, values};
    if (!br_ok(gpuhal_queue_execute(device, q, wait, gpuhal_semaphore_list_one(&lanes[q], &next), cb, NULL), "execute"))
      goto done;
  }
  for (i = 0; i < reps; ++i) {
    int64_t start = gpuhal_now_ns();
    size_t got = 0;
    if (!br_ok(gpuhal_driver_report_pending(driver, NULL, 0, &length), "report length")) goto done;
    free(text);
    text = (char*)malloc(length + 1);
    if (!text || !br_ok(gpuhal_driver_report_pending(driver, text, length + 1, &got), "report")) goto done;
    ms[i] = (double)(gpuhal_now_ns() - start) / 1e6;
    /* Work may move from queued to waiting between the two calls: the text is what fit. */
    if (strlen(text) != (got < length ? got : length)) {
      fprintf(stderr, "bench_report: %zu bytes of text, %zu reported\n", strlen(text), got);
      br_failures++;
    }
  }
  if (!strstr(text, "operations not done") || !strstr(text, "'gate'")) {
    fprintf(stderr, "bench_report: the report does not list the stall:\n%.2000s\n", text);
    br_failures++;
  }
  qsort(ms, (size_t)reps, sizeof(double), br_compare);
  printf("bench_report: %d pending operations on %u queues of %s (%s)\n", ops, BR_QUEUES, device->info.name,
         gpuhal_driver_cuda_library(driver));
  printf("%-40s %10.2f ms [%.2f..%.2f] target 50 ms %s; %zu bytes\n", "report (length + text), median", ms[reps / 2],
         ms[0], ms[reps - 1], ms[reps / 2] <= 50.0 ? "met" : "(over target)", length);
done:
  if (gate) br_ok(gpuhal_semaphore_signal(gate, 1), "open the gate");
  if (device) br_ok(gpuhal_device_wait_idle(device, gpuhal_timeout_relative_ns(120ll * 1000000000)), "idle");
  free(text);
  gpuhal_semaphore_release(gate);
  for (i = 0; i < (int)BR_QUEUES; ++i) gpuhal_semaphore_release(lanes[i]);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(scratch);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  return br_failures ? 1 : 0;
}
