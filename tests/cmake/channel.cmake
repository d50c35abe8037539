# Multi-device and collective tests (test_channel*, test_multi_device*): on softcuda they
# run with 4 soft devices and softnccl as libnccl.so.2; with -DGPUHAL_TEST_DRIVER=system
# they use the real driver and the real NCCL (NCCL_NVLS_ENABLE=0: no NVLink multicast).
if(GPUHAL_TEST_DRIVER STREQUAL "softcuda" AND TARGET softnccl)
  set(GPUHAL_MULTI_DEVICE_ENV ${GPUHAL_TEST_ENV} "GPUHAL_NCCL_LIBRARY=$<TARGET_FILE:softnccl>" "SOFTCUDA_DEVICES=4"
      "NCCL_NVLS_ENABLE=0")
else()
  set(GPUHAL_MULTI_DEVICE_ENV ${GPUHAL_TEST_ENV} "NCCL_NVLS_ENABLE=0")
endif()
foreach(test_name test_channel test_channel_one_rank test_channel_two_process test_multi_device)
  if(TARGET ${test_name})
    set_tests_properties(${test_name} PROPERTIES ENVIRONMENT "${GPUHAL_MULTI_DEVICE_ENV}")
    if(TARGET softnccl)
      add_dependencies(${test_name} softnccl)
    endif()
  endif()
endforeach()
if(TARGET bench_multi_gpu AND TARGET softnccl)
  add_dependencies(bench_multi_gpu softnccl)
endif()
