// Module-scope data the host fills (gpuhal_executable_global): a __device__ global with an
// initialiser, a zero-initialised one, a __constant__ table and a namespaced (mangled)
// global. out[i] = g_scale * c_table[i % 8] + g_offset for i < n; thread 0 also counts the
// launch in g_launches. Twin: globals.c
__device__ unsigned g_scale = 7;
__device__ unsigned g_offset;
__device__ unsigned long long g_launches;
__constant__ unsigned c_table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
namespace cfg {
__device__ float bias[3] = {0.5f, 1.5f, 2.5f};
}

extern "C" __global__ void read_globals(unsigned* out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) atomicAdd(&g_launches, 1ull);
  if (i < n) out[i] = g_scale * c_table[i % 8] + g_offset + (unsigned)cfg::bias[i % 3];
}
