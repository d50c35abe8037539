# test_stream_capture on both semaphore paths, as the queue core tests (queue_core.cmake):
# GPU-resident values with GPUHAL_SEMAPHORE_MEMOPS=1, recorded events as
# test_stream_capture_events (their host waits and completions query events).
if(TARGET test_stream_capture)
  set_property(TEST test_stream_capture APPEND PROPERTY ENVIRONMENT "GPUHAL_SEMAPHORE_MEMOPS=1")
  add_test(NAME test_stream_capture_events COMMAND test_stream_capture)
  set_tests_properties(test_stream_capture_events PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
  set_property(TEST test_stream_capture_events APPEND PROPERTY ENVIRONMENT ${GPUHAL_TEST_ENV} "SOFTCUDA_NO_MEMOPS=1"
               "GPUHAL_SEMAPHORE_MEMOPS=0")
  set_property(TEST test_stream_capture test_stream_capture_events APPEND PROPERTY LABELS public api)
endif()
