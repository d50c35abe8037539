/* The implementation public-API tests link (tests/CMakeLists.txt): gpuhal.h compiled once,
 * as a user's program compiles it. */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"
