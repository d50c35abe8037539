# Module cache tests: on softcuda every PTX compile sleeps SOFTCUDA_JIT_DELAY_MS (so that
# concurrent loads really overlap and compiles cost something); the disk tests start
# child processes of themselves (tests/module_cache/test_module_cache_util.h: mc_spawn).
if(GPUHAL_TEST_DRIVER STREQUAL "softcuda")
  set(GPUHAL_MODULE_CACHE_ENV ${GPUHAL_TEST_ENV} "SOFTCUDA_JIT_DELAY_MS=20")
else()
  set(GPUHAL_MODULE_CACHE_ENV ${GPUHAL_TEST_ENV})
endif()
foreach(test_name test_module_cache test_module_cache_disk test_module_library test_executable_llvm_ptx
                  test_executable_global)
  if(TARGET ${test_name} AND GPUHAL_MODULE_CACHE_ENV)
    set_tests_properties(${test_name} PROPERTIES ENVIRONMENT "${GPUHAL_MODULE_CACHE_ENV}")
  endif()
endforeach()

# gpuhal_executable_compile runs the real NVRTC (the CUDA toolkit's, where installed; CI
# has it): GPUHAL_TEST_NVRTC tells the test it must be there; without it the test skips.
find_library(GPUHAL_TEST_NVRTC_LIBRARY NAMES nvrtc
             HINTS $ENV{CUDA_HOME}/lib64 $ENV{CUDA_PATH}/lib64
             PATHS /usr/local/cuda/lib64 /usr/local/cuda/lib
             DOC "NVRTC for test_executable_compile (gpuhal itself finds it at run time)")
if(TARGET test_executable_compile)
  set(compile_env ${GPUHAL_MODULE_CACHE_ENV})
  if(GPUHAL_TEST_NVRTC_LIBRARY)
    list(APPEND compile_env "GPUHAL_TEST_NVRTC=${GPUHAL_TEST_NVRTC_LIBRARY}")
    message(STATUS "gpuhal tests: NVRTC ${GPUHAL_TEST_NVRTC_LIBRARY}")
  else()
    message(STATUS "gpuhal tests: no NVRTC found (set CUDA_HOME): test_executable_compile skips")
  endif()
  if(compile_env)
    set_tests_properties(test_executable_compile PROPERTIES ENVIRONMENT "${compile_env}")
  endif()
endif()
