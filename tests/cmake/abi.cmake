# ABI tests for src/cuda_api.h (see tests/abi/abi_items.h):
#   abi_check     gpuhal's declarations against the real cuda.h / cudaTypedefs.h / nccl.h / nvrtc.h:
#                 sizes, field offsets and sizes, integer kinds, enum values (at run time),
#                 function signatures (at compile time). Skipped (77) when no cuda.h.
#   abi_procaddr  against the driver the suite runs on (softcuda, or the real libcuda with
#                 -DGPUHAL_TEST_DRIVER=system): cuGetProcAddress(name, pinned version)
#                 must return dlsym(dlsym_name) for every table entry.
set(GPUHAL_ABI_DIR ${GPUHAL_ROOT}/tests/abi)

find_path(GPUHAL_CUDA_INCLUDE_DIR cuda.h
          HINTS $ENV{CUDA_HOME}/include $ENV{CUDA_PATH}/include
          PATHS /usr/local/cuda/include /usr/local/include
          DOC "directory of the real cuda.h, used only by the ABI test")
find_path(GPUHAL_NCCL_INCLUDE_DIR nccl.h
          HINTS $ENV{NCCL_HOME}/include $ENV{CUDA_HOME}/include
          PATHS /usr/local/include /usr/local/cuda/include
          DOC "directory of the real nccl.h, used only by the ABI test")

if(GPUHAL_CUDA_INCLUDE_DIR)
  set(abi_have_typedefs 0)
  if(EXISTS ${GPUHAL_CUDA_INCLUDE_DIR}/cudaTypedefs.h)
    set(abi_have_typedefs 1)
  endif()
  set(abi_have_nccl 0)
  set(abi_have_nvrtc 0)
  if(EXISTS ${GPUHAL_CUDA_INCLUDE_DIR}/nvrtc.h)
    set(abi_have_nvrtc 1)
  endif()
  set(abi_real_includes ${GPUHAL_CUDA_INCLUDE_DIR})
  if(GPUHAL_NCCL_INCLUDE_DIR)
    set(abi_have_nccl 1)
    list(APPEND abi_real_includes ${GPUHAL_NCCL_INCLUDE_DIR})
  endif()
  message(STATUS "gpuhal ABI test: cuda.h in ${GPUHAL_CUDA_INCLUDE_DIR} (cudaTypedefs.h: ${abi_have_typedefs}), "
                 "nccl.h: ${GPUHAL_NCCL_INCLUDE_DIR}")

  add_executable(abi_check ${GPUHAL_ABI_DIR}/abi_ours.c ${GPUHAL_ABI_DIR}/abi_real.c ${GPUHAL_ABI_DIR}/abi_main.c)
  # _Generic and _Static_assert; the headers under test stay C99 (checked by abi_headers).
  set_target_properties(abi_check PROPERTIES C_STANDARD 11 C_EXTENSIONS OFF)
  target_compile_options(abi_check PRIVATE ${GPUHAL_WARNINGS})
  # Only abi_real.c may see the real headers; abi_ours.c must use gpuhal's declarations.
  set_source_files_properties(${GPUHAL_ABI_DIR}/abi_real.c PROPERTIES
    INCLUDE_DIRECTORIES "${abi_real_includes}"
    COMPILE_DEFINITIONS
      "ABI_HAVE_CUDA_TYPEDEFS=${abi_have_typedefs};ABI_HAVE_NCCL_H=${abi_have_nccl};ABI_HAVE_NVRTC_H=${abi_have_nvrtc}")
else()
  message(STATUS "gpuhal ABI test: no cuda.h found (set CUDA_HOME); abi_check will report SKIPPED")
  add_executable(abi_check ${GPUHAL_ABI_DIR}/abi_main.c)
  target_compile_definitions(abi_check PRIVATE ABI_NO_CUDA_H=1)
  target_compile_options(abi_check PRIVATE ${GPUHAL_WARNINGS})
endif()
add_test(NAME abi_check COMMAND abi_check)
set_tests_properties(abi_check PROPERTIES SKIP_RETURN_CODE 77)

# src/cuda_api.h on its own, warning-free as C99, C11 and C++ (it is included standalone
# by softcuda), and with GPUHAL_USE_CUDA_H when a cuda.h is there.
add_library(abi_headers OBJECT ${GPUHAL_ABI_DIR}/abi_header_c.c ${GPUHAL_ABI_DIR}/abi_header_cxx.cpp)
target_compile_options(abi_headers PRIVATE ${GPUHAL_WARNINGS})
set_target_properties(abi_headers PROPERTIES C_STANDARD 99 C_EXTENSIONS OFF CXX_STANDARD 11 CXX_EXTENSIONS OFF)
if(GPUHAL_CUDA_INCLUDE_DIR)
  add_library(abi_headers_cuda_h OBJECT ${GPUHAL_ABI_DIR}/abi_header_c.c ${GPUHAL_ABI_DIR}/abi_header_cxx.cpp)
  target_compile_options(abi_headers_cuda_h PRIVATE ${GPUHAL_WARNINGS})
  target_compile_definitions(abi_headers_cuda_h PRIVATE GPUHAL_USE_CUDA_H)
  target_include_directories(abi_headers_cuda_h PRIVATE ${GPUHAL_CUDA_INCLUDE_DIR})
  set_target_properties(abi_headers_cuda_h PROPERTIES C_STANDARD 99 C_EXTENSIONS OFF CXX_STANDARD 11 CXX_EXTENSIONS OFF)
endif()

if(COMMAND gpuhal_add_test)
  gpuhal_add_test(abi_procaddr ${GPUHAL_ABI_DIR}/abi_procaddr.c)
else()
  add_executable(abi_procaddr ${GPUHAL_ABI_DIR}/abi_procaddr.c)
  target_compile_options(abi_procaddr PRIVATE ${GPUHAL_WARNINGS})
  target_link_libraries(abi_procaddr PRIVATE ${CMAKE_DL_LIBS})
  add_test(NAME abi_procaddr COMMAND abi_procaddr)
  set_tests_properties(abi_procaddr PROPERTIES SKIP_RETURN_CODE 77)
endif()
