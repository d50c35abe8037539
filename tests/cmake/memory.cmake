# test_memory runs out of device memory on purpose: on softcuda its device has 64 MiB, the
# same as the pool limit the test sets itself, so a full pool leaves the device full too.
if(TEST test_memory AND GPUHAL_TEST_DRIVER STREQUAL "softcuda")
  set_property(TEST test_memory APPEND PROPERTY ENVIRONMENT "SOFTCUDA_DEVICE_MEMORY=64M")
endif()
