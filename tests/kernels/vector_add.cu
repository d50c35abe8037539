// c[i] = a[i] + b[i] for i < n. Twin: vector_add.c
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
