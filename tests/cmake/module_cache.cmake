# Module cache tests: on softcuda every PTX compile sleeps SOFTCUDA_JIT_DELAY_MS (so that
# concurrent loads really overlap and compiles cost something); the disk tests start
# child processes of themselves (tests/module_cache/test_module_cache_util.h: mc_spawn).
if(GPUHAL_TEST_DRIVER STREQUAL "softcuda")
  set(GPUHAL_MODULE_CACHE_ENV ${GPUHAL_TEST_ENV} "SOFTCUDA_JIT_DELAY_MS=20")
else()
  set(GPUHAL_MODULE_CACHE_ENV ${GPUHAL_TEST_ENV})
endif()
foreach(test_name test_module_cache test_module_cache_disk)
  if(TARGET ${test_name} AND GPUHAL_MODULE_CACHE_ENV)
    set_tests_properties(${test_name} PROPERTIES ENVIRONMENT "${GPUHAL_MODULE_CACHE_ENV}")
  endif()
endforeach()
