// dst[i] = value for i < n. Twin: fill_u32.c
extern "C" __global__ void fill_u32(unsigned* dst, unsigned value, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = value;
}
