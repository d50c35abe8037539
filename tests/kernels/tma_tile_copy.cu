// regen: -arch=compute_90
// Block (bx, by) loads the 32 x 8 tile of 32-bit elements at (32 bx, 8 by) of a 2-D tensor
// with one TMA copy (cp.async.bulk.tensor through `map`, completing on an mbarrier) and
// writes tile + 1 to out[y * width + x] for the elements inside width x height. Elements
// past the tensor's edge arrive as zeros and are not written. Twin: tma_tile_copy.c
#include <cuda.h>

#define TILE_W 32
#define TILE_H 8

extern "C" __global__ void tma_tile_copy(const __grid_constant__ CUtensorMap map, unsigned* out, unsigned width,
                                         unsigned height) {
  __shared__ alignas(128) unsigned tile[TILE_H][TILE_W];
  __shared__ alignas(8) unsigned long long bar;
  unsigned x0 = blockIdx.x * TILE_W, y0 = blockIdx.y * TILE_H;
  unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
  unsigned tile_addr = (unsigned)__cvta_generic_to_shared(&tile[0][0]);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_addr));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_addr), "r"((unsigned)sizeof(tile))
                 : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            tile_addr),
        "l"(&map), "r"(x0), "r"(y0), "r"(bar_addr)
        : "memory");
  }
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(bar_addr)
      : "memory");
  for (unsigned i = threadIdx.x; i < TILE_W * TILE_H; i += blockDim.x) {
    unsigned tx = i % TILE_W, ty = i / TILE_W, x = x0 + tx, y = y0 + ty;
    if (x < width && y < height) out[y * width + x] = tile[ty][tx] + 1u;
  }
}
