# Queue core tests (issue #14). The core has two ways of carrying semaphore values between
# GPU work: stream memory operations on a GPU-resident 64-bit word (the default where every
# device offers them) and recorded events. Each test runs on both: once with
# GPUHAL_SEMAPHORE_MEMOPS=1, and once as <name>_events with GPUHAL_SEMAPHORE_MEMOPS=0 and
# SOFTCUDA_NO_MEMOPS=1 (softcuda then reports no memop support, so the detection is tested
# too; a real driver ignores that variable).
# Options: GPUHAL_RANDOM_OPS (operations per thread of test_queue_random).
set(GPUHAL_RANDOM_OPS "300" CACHE STRING "test_queue_random: operations per thread")

foreach(t test_queue_core test_queue_bound test_queue_reject test_queue_random test_queue_wake test_queue_scaling)
  if(TARGET ${t})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "GPUHAL_SEMAPHORE_MEMOPS=1")
    add_test(NAME ${t}_events COMMAND ${t})
    set_tests_properties(${t}_events PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
    set_property(TEST ${t}_events APPEND PROPERTY ENVIRONMENT ${GPUHAL_TEST_ENV} "SOFTCUDA_NO_MEMOPS=1"
                 "GPUHAL_SEMAPHORE_MEMOPS=0")
    set_property(TEST ${t} ${t}_events APPEND PROPERTY LABELS queue_core)
  endif()
endforeach()
# test_queue_wake's dealloca case needs softcuda to reuse memory as CUDA's pools do.
if(TARGET test_queue_wake)
  set_property(TEST test_queue_wake test_queue_wake_events APPEND PROPERTY ENVIRONMENT "SOFTCUDA_POOL_INTERNAL_REUSE=1")
endif()
if(TARGET test_queue_random)
  set_property(TEST test_queue_random test_queue_random_events APPEND PROPERTY ENVIRONMENT
               "GPUHAL_RANDOM_OPS=${GPUHAL_RANDOM_OPS}")
endif()
# test_queue_bound's cross-device case waits on a second device (skipped without one).
if(TARGET test_queue_bound)
  set_property(TEST test_queue_bound test_queue_bound_events APPEND PROPERTY ENVIRONMENT "SOFTCUDA_DEVICES=2")
endif()
# test_queue_reject and test_queue_bound (its last case) lose a device on purpose (a sticky
# illegal address): alone, as test_device_loss (see tests/CMakeLists.txt).
if(TARGET test_queue_reject)
  set_tests_properties(test_queue_reject test_queue_reject_events PROPERTIES RUN_SERIAL TRUE)
endif()
if(TARGET test_queue_bound)
  set_tests_properties(test_queue_bound test_queue_bound_events PROPERTIES RUN_SERIAL TRUE)
endif()

# bench_queue as a smoke test on softcuda: a few iterations of every case, no timing claims.
# (The bench target is defined after this file is included, so it is named by path.)
if(GPUHAL_TEST_DRIVER STREQUAL "softcuda" AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/bench/bench_queue.c)
  foreach(variant "" "_events")
    add_test(NAME bench_queue_smoke${variant} COMMAND ${CMAKE_BINARY_DIR}/bench/bench_queue 5 1 0 1234567890a)
    set_tests_properties(bench_queue_smoke${variant} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS queue_core)
    set_property(TEST bench_queue_smoke${variant} APPEND PROPERTY ENVIRONMENT ${GPUHAL_TEST_ENV})
  endforeach()
  set_property(TEST bench_queue_smoke APPEND PROPERTY ENVIRONMENT "GPUHAL_SEMAPHORE_MEMOPS=1")
  set_property(TEST bench_queue_smoke_events APPEND PROPERTY ENVIRONMENT "SOFTCUDA_NO_MEMOPS=1" "GPUHAL_SEMAPHORE_MEMOPS=0")
endif()
