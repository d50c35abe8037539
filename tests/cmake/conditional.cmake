# Device-side loops on a real GPU run alone: on an H200 (driver 580, CUDA 13.0) a WHILE
# conditional node's graph fails with CUDA_ERROR_LAUNCH_FAILED, losing the context, when
# other processes time-share the GPU - raw conditional graphs built with the driver API
# alone as well (tests/bench/RESULTS.md, "bench_conditional under load"). ctest -j would
# otherwise run other test processes beside it.
if(NOT GPUHAL_TEST_DRIVER STREQUAL "softcuda" AND TEST test_command_buffer_condition)
  set_tests_properties(test_command_buffer_condition PROPERTIES RUN_SERIAL TRUE)
endif()
