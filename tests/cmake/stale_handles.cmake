# test_stale_handles checks stale channel handles too: on softcuda it loads softnccl.
if(TARGET test_stale_handles AND GPUHAL_TEST_DRIVER STREQUAL "softcuda" AND TARGET softnccl)
  set_tests_properties(test_stale_handles PROPERTIES ENVIRONMENT
                       "${GPUHAL_TEST_ENV};GPUHAL_NCCL_LIBRARY=$<TARGET_FILE:softnccl>")
  add_dependencies(test_stale_handles softnccl)
endif()
