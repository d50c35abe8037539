# Tiny fake CUDA driver libraries for test_symbols (tests/symbols_fixtures): one lacks a
# required symbol, one lacks an optional symbol.
foreach(fixture missing_required missing_optional)
  add_library(fake_cuda_${fixture} SHARED ${CMAKE_CURRENT_SOURCE_DIR}/symbols_fixtures/fake_cuda_${fixture}.c)
  target_include_directories(fake_cuda_${fixture} PRIVATE ${GPUHAL_ROOT} ${CMAKE_CURRENT_SOURCE_DIR}/symbols_fixtures)
  # The stubs ignore their parameters and every gpuhal function is static and unused here.
  target_compile_options(fake_cuda_${fixture} PRIVATE -w)
  set_target_properties(fake_cuda_${fixture} PROPERTIES C_VISIBILITY_PRESET hidden)
endforeach()
if(TARGET test_symbols)
  target_compile_definitions(test_symbols PRIVATE
    FAKE_CUDA_MISSING_REQUIRED="$<TARGET_FILE:fake_cuda_missing_required>"
    FAKE_CUDA_MISSING_OPTIONAL="$<TARGET_FILE:fake_cuda_missing_optional>")
  add_dependencies(test_symbols fake_cuda_missing_required fake_cuda_missing_optional)
endif()
