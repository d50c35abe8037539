# test_semaphore_scaling counts work on both ways of carrying semaphore values (see
# queue_core.cmake): once with GPUHAL_SEMAPHORE_MEMOPS=1, and once as
# test_semaphore_scaling_events on the event path.
if(TARGET test_semaphore_scaling)
  set_property(TEST test_semaphore_scaling APPEND PROPERTY ENVIRONMENT "GPUHAL_SEMAPHORE_MEMOPS=1")
  add_test(NAME test_semaphore_scaling_events COMMAND test_semaphore_scaling)
  set_tests_properties(test_semaphore_scaling_events PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS semaphore)
  set_property(TEST test_semaphore_scaling_events APPEND PROPERTY ENVIRONMENT ${GPUHAL_TEST_ENV} "SOFTCUDA_NO_MEMOPS=1"
               "GPUHAL_SEMAPHORE_MEMOPS=0")
endif()
