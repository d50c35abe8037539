/* A faulting kernel loses the device. In its own executable: on a real GPU a sticky error
 * leaves the process's CUDA state unusable for whatever would run after it. */
#include "test_internals.h"

#include "test_util.h"
#include "test_queue_util.h"

/* A faulting kernel loses the device: every pending semaphore fails, later work fails fast,
 * nothing hangs, release succeeds. */
TU_TEST(faulting_kernel_loses_the_device) {
  qt_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_semaphore_t* gate = NULL;
  gpuhal_semaphore_t* later = NULL;
  gpuhal_semaphore_t* after = NULL;
  uint64_t one = 1, two = 2, three = 3;
  qt_spin_t spin;
  gpuhal_status_t st;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  if (!qt_kernels_load(&f)) {
    qt_close(&f);
    TU_SKIP("test kernels not available");
  }
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &later));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &after));
  spin.fixture = &f;
  spin.first_us = 1000;
  spin.rest_us = 1000;
  spin.launched = 0;
  /* fault -> s=1 ; spin waits s=1 -> s=2 (other queue) ; work gated on the host -> s=3 */
  TU_CHECK_OK(
      qt_submit(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one), &qt_fault_ops, &f));
  TU_CHECK_OK(qt_submit(f.device, 1, gpuhal_semaphore_list_one(&s, &one), gpuhal_semaphore_list_one(&s, &two),
                        &qt_spin_ops, &spin));
  TU_CHECK_OK(qt_submit(f.device, 1, gpuhal_semaphore_list_one(&gate, &one), gpuhal_semaphore_list_one(&later, &three),
                        &qt_barrier_ops, NULL));
  st = gpuhal_semaphore_wait(s, 2, qt_seconds(20));
  TU_CHECK(st != NULL);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpuhal_status_free(st);
  /* The loss is reported, and the pending (host-gated) work fails with the original cause. */
  st = gpuhal_device_lost_status(f.device);
  TU_CHECK(st != NULL);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpuhal_status_free(st);
  st = gpuhal_semaphore_wait(later, 3, qt_seconds(20));
  TU_CHECK(st != NULL);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpuhal_status_free(st);
  /* Work submitted after the loss fails fast too. */
  TU_CHECK_OK(qt_submit(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&after, &one),
                        &qt_barrier_ops, NULL));
  st = gpuhal_semaphore_wait(after, 1, qt_seconds(20));
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpuhal_status_free(st);
  st = gpuhal_device_wait_idle(f.device, qt_seconds(20));
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "CUDA_ERROR_ILLEGAL_ADDRESS");
  gpuhal_status_free(st);
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(later);
  gpuhal_semaphore_release(after);
  qt_close(&f); /* release still succeeds */
}

TU_MAIN(TU_CASE(faulting_kernel_loses_the_device))
