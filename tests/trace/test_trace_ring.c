/* Tracing keeps bounded memory: with a ring of 64 records, a run that makes thousands keeps
 * the newest, says how many were dropped, and still writes a valid, nested timeline whose
 * GPU tracks keep their names (they were a record in the ring, the first to go). */
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

TU_MAIN(TU_CASE(ring_is_bounded))
