# Every ```c block of README.md compiles (gcc -std=c99 -Wall -Wextra -Wpedantic -Werror) and
# links; whole programs also run (on softcuda here, or the GPU with GPUHAL_TEST_DRIVER=system).
# See tools/check_readme.py.
if(Python3_FOUND)
  add_test(NAME test_readme_code_blocks
           COMMAND ${Python3_EXECUTABLE} ${GPUHAL_ROOT}/tools/check_readme.py --cc ${CMAKE_C_COMPILER} --run
                   --sanitize "${GPUHAL_SANITIZE}")
  set_tests_properties(test_readme_code_blocks PROPERTIES TIMEOUT 300)
  if(GPUHAL_TEST_ENV)
    set_tests_properties(test_readme_code_blocks PROPERTIES ENVIRONMENT "${GPUHAL_TEST_ENV}")
  endif()
endif()
