# Fuzz targets (tests/fuzz/fuzz_*.c, each defining LLVMFuzzerTestOneInput).
#
# In every build each target is also linked with tests/fuzz/fuzz_main.c into
# fuzz_<name>_corpus, and CTest runs it over its checked-in seed corpus
# (tests/fuzz/corpus/<name>): the corpus is a regression suite under every compiler and
# sanitizer.
#
# With -DGPUHAL_FUZZ=ON and clang, fuzz_<name> are the libFuzzer binaries
# (-fsanitize=fuzzer,address,undefined); tools/run_fuzz.sh configures such a build and runs
# each for a fixed time. Configure that build without GPUHAL_SANITIZE (libFuzzer brings ASan).
option(GPUHAL_FUZZ "build the libFuzzer targets (clang only)" OFF)
set(GPUHAL_FUZZ_DIR ${GPUHAL_ROOT}/tests/fuzz)
file(GLOB GPUHAL_FUZZ_SOURCES CONFIGURE_DEPENDS ${GPUHAL_FUZZ_DIR}/fuzz_*.c)
list(REMOVE_ITEM GPUHAL_FUZZ_SOURCES ${GPUHAL_FUZZ_DIR}/fuzz_main.c)

if(GPUHAL_FUZZ AND NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(WARNING "GPUHAL_FUZZ needs clang (libFuzzer); this build uses ${CMAKE_C_COMPILER_ID}: fuzzers not built")
endif()

foreach(src ${GPUHAL_FUZZ_SOURCES})
  get_filename_component(target ${src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" corpus_name ${target})
  set(corpus ${GPUHAL_FUZZ_DIR}/corpus/${corpus_name})

  add_executable(${target}_corpus ${src} ${GPUHAL_FUZZ_DIR}/fuzz_main.c)
  target_include_directories(${target}_corpus PRIVATE ${GPUHAL_ROOT} ${GPUHAL_ROOT}/tests)
  target_compile_options(${target}_corpus PRIVATE ${GPUHAL_WARNINGS})
  target_compile_definitions(${target}_corpus PRIVATE GPUHAL_KERNELS_DIR="${GPUHAL_ROOT}/tests/kernels")
  target_link_libraries(${target}_corpus PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
  if(TARGET softcuda)
    add_dependencies(${target}_corpus softcuda)
  endif()
  add_test(NAME ${target}_corpus COMMAND ${target}_corpus ${corpus})
  set_tests_properties(${target}_corpus PROPERTIES TIMEOUT 300)
  if(GPUHAL_TEST_ENV)
    set_tests_properties(${target}_corpus PROPERTIES ENVIRONMENT "${GPUHAL_TEST_ENV}")
  endif()

  if(GPUHAL_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
    add_executable(${target} ${src})
    target_include_directories(${target} PRIVATE ${GPUHAL_ROOT} ${GPUHAL_ROOT}/tests)
    target_compile_options(${target} PRIVATE ${GPUHAL_WARNINGS} -fsanitize=fuzzer,address,undefined
                           -fno-sanitize-recover=all -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_compile_definitions(${target} PRIVATE GPUHAL_KERNELS_DIR="${GPUHAL_ROOT}/tests/kernels")
    target_link_libraries(${target} PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
    if(TARGET softcuda)
      add_dependencies(${target} softcuda)
    endif()
  endif()
endforeach()
