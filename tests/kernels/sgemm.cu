// C = A * B for n x n row-major float matrices, n a multiple of 64 (a register-blocked
// tiled SGEMM: each block of 16 x 16 threads computes a 64 x 64 tile of C, each thread a
// 4 x 4 sub-tile, stepping through k 16 at a time). Grid (n / 64, n / 64), block (16, 16).
// Twin: sgemm.c
extern "C" __global__ void sgemm(const float* A, const float* B, float* C, unsigned n) {
  __shared__ float As[16][64 + 1]; // As[k][row]: A's tile transposed; +1 spreads the stores over banks
  __shared__ float Bs[16][64];     // Bs[k][col]
  unsigned tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
  unsigned row0 = blockIdx.y * 64, col0 = blockIdx.x * 64;
  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (unsigned k0 = 0; k0 < n; k0 += 16) {
    for (unsigned l = 0; l < 4; ++l) {
      unsigned e = tid + l * 256;
      unsigned ar = e >> 4, ac = e & 15; // A's tile: 64 rows of 16
      unsigned br = e >> 6, bc = e & 63; // B's tile: 16 rows of 64
      As[ac][ar] = A[(row0 + ar) * n + k0 + ac];
      Bs[br][bc] = B[(k0 + br) * n + col0 + bc];
    }
    __syncthreads();
#pragma unroll
    for (unsigned k = 0; k < 16; ++k) {
      float a[4], b[4];
      for (int i = 0; i < 4; ++i) a[i] = As[k][ty + 16 * i];
      for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx + 16 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) C[(row0 + ty + 16 * i) * n + col0 + tx + 16 * j] = acc[i][j];
}
