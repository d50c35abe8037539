// Kernels that steer device-side regions (conditional graph nodes) through a
// cudaGraphConditionalHandle. Twin: conditional.c
#include <cuda_runtime.h>

// One step of a loop that halves *residual until it drops below tolerance: counts the
// iterations and clears the loop's condition once the residual is small.
extern "C" __global__ void cond_residual_step(float* residual, unsigned* iterations, float tolerance,
                                              cudaGraphConditionalHandle loop) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  residual[0] *= 0.5f;
  iterations[0] += 1u;
  if (residual[0] < tolerance) cudaGraphSetConditional(loop, 0u);
}

// Sets the condition to flag[0] & mask (an IF decided by device data).
extern "C" __global__ void cond_set_from(const unsigned* flag, unsigned mask, cudaGraphConditionalHandle condition) {
  if (threadIdx.x == 0 && blockIdx.x == 0) cudaGraphSetConditional(condition, flag[0] & mask);
}

// *out += value (one thread): what a region's body does in the tests.
extern "C" __global__ void cond_add(unsigned* out, unsigned value) {
  if (threadIdx.x == 0 && blockIdx.x == 0) out[0] += value;
}

// One iteration of a counted loop: --remaining[0], ++trips[0]; clears the loop's condition
// when remaining reaches 0.
extern "C" __global__ void cond_count_down(unsigned* remaining, unsigned* trips, cudaGraphConditionalHandle loop) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  trips[0] += 1u;
  if (--remaining[0] == 0u) cudaGraphSetConditional(loop, 0u);
}
