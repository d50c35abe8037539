# Reliability tests (issue #9): the fault-injection sweep, stress, device loss and the
# bad-input tables are ordinary test_*.c files (registered by tests/CMakeLists.txt); this
# part gives them what they need beyond the defaults: a label, longer limits (the sweep
# forks hundreds of children, slow under TSan/valgrind), and softnccl beside softcuda.
# Options: GPUHAL_SWEEP_DEPTH (faults per entry point, besides the last call; raise it for
# a nightly run), GPUHAL_STRESS_OPS (operations of the stress test).
set(GPUHAL_SWEEP_DEPTH "2" CACHE STRING "test_fault_sweep: inject at calls 1..N of each entry point (plus the last)")
set(GPUHAL_STRESS_OPS "4000" CACHE STRING "test_stress: total operations of the 16 threads")

set(gpuhal_reliability_tests test_fault_sweep test_alloc_sweep test_stress test_device_loss test_bad_input_all test_bad_input_foundation)
foreach(t ${gpuhal_reliability_tests})
  if(TARGET ${t})
    set_property(TEST ${t} APPEND PROPERTY LABELS reliability)
  endif()
endforeach()

set(gpuhal_reliability_env "")
if(GPUHAL_TEST_DRIVER STREQUAL "softcuda" AND TARGET softnccl)
  list(APPEND gpuhal_reliability_env "GPUHAL_NCCL_LIBRARY=$<TARGET_FILE:softnccl>")
endif()
if(TARGET test_fault_sweep)
  set_tests_properties(test_fault_sweep PROPERTIES TIMEOUT 1800)
  set_property(TEST test_fault_sweep APPEND PROPERTY ENVIRONMENT ${gpuhal_reliability_env}
               "GPUHAL_SWEEP_DEPTH=${GPUHAL_SWEEP_DEPTH}")
  if(TARGET softnccl)
    add_dependencies(test_fault_sweep softnccl)
  endif()
  # The same sweep on the event path: there a wait on a value not yet submitted is held on
  # the host, so the issue that submits it issues the waiting work (the same device's or
  # another's, nested in its own), under a fault at every call of it.
  add_test(NAME test_fault_sweep_events COMMAND test_fault_sweep)
  set_tests_properties(test_fault_sweep_events PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1800)
  set_property(TEST test_fault_sweep_events APPEND PROPERTY ENVIRONMENT ${GPUHAL_TEST_ENV} ${gpuhal_reliability_env}
               "GPUHAL_SWEEP_DEPTH=${GPUHAL_SWEEP_DEPTH}" "SOFTCUDA_NO_MEMOPS=1" "GPUHAL_SEMAPHORE_MEMOPS=0")
  set_property(TEST test_fault_sweep_events APPEND PROPERTY LABELS reliability api internals)
endif()
if(TARGET test_stress)
  set_tests_properties(test_stress PROPERTIES TIMEOUT 900)
  set_property(TEST test_stress APPEND PROPERTY ENVIRONMENT ${gpuhal_reliability_env}
               "GPUHAL_STRESS_OPS=${GPUHAL_STRESS_OPS}")
endif()
# The host-allocation sweep runs on both semaphore paths, as the queue core tests do
# (queue_core.cmake): memory operations, and recorded events as test_alloc_sweep_events.
# Several hundred driver and device lifetimes: room for the sanitizer builds.
# Its collective scenario uses softnccl (two soft devices, softcuda's default).
if(TARGET test_alloc_sweep)
  set_property(TEST test_alloc_sweep APPEND PROPERTY ENVIRONMENT ${gpuhal_reliability_env} "GPUHAL_SEMAPHORE_MEMOPS=1")
  set_tests_properties(test_alloc_sweep PROPERTIES TIMEOUT 900)
  add_test(NAME test_alloc_sweep_events COMMAND test_alloc_sweep)
  set_tests_properties(test_alloc_sweep_events PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900)
  set_property(TEST test_alloc_sweep_events APPEND PROPERTY ENVIRONMENT ${GPUHAL_TEST_ENV} ${gpuhal_reliability_env}
               "SOFTCUDA_NO_MEMOPS=1" "GPUHAL_SEMAPHORE_MEMOPS=0")
  set_property(TEST test_alloc_sweep_events APPEND PROPERTY LABELS reliability api)
  if(TARGET softnccl)
    add_dependencies(test_alloc_sweep softnccl)
  endif()
endif()
