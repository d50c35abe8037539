# test_stale_handles and test_extra_release check channel handles too: on softcuda they
# load softnccl (one soft device is enough).
if(GPUHAL_TEST_DRIVER STREQUAL "softcuda" AND TARGET softnccl)
  foreach(test_name test_stale_handles test_extra_release)
    if(TARGET ${test_name})
      set_tests_properties(${test_name} PROPERTIES ENVIRONMENT
                           "${GPUHAL_TEST_ENV};GPUHAL_NCCL_LIBRARY=$<TARGET_FILE:softnccl>")
      add_dependencies(${test_name} softnccl)
    endif()
  endforeach()
endif()
