// regen: -arch=compute_90
// A cooperative grid-wide reduction: *out = data[0] + ... + data[n-1] (mod 2^32). Each
// block sums a grid-strided share into partial[blockIdx.x]; a grid-wide sync (which needs
// a cooperative launch: every block resident at once) separates that from block 0 adding
// the partial sums. partial holds gridDim.x words. Twin: grid_reduce.c
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void grid_reduce(const unsigned* data, unsigned n, unsigned* partial, unsigned* out) {
  cg::grid_group grid = cg::this_grid();
  unsigned sum = 0, i;
  if (threadIdx.x == 0) partial[blockIdx.x] = 0;
  __syncthreads();
  for (i = (unsigned)grid.thread_rank(); i < n; i += (unsigned)grid.size()) sum += data[i];
  atomicAdd(&partial[blockIdx.x], sum);
  grid.sync();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned total = 0, b;
    for (b = 0; b < gridDim.x; ++b) total += partial[b];
    *out = total;
  }
}
