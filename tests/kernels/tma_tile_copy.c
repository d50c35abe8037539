/* C twin of tma_tile_copy.cu for softcuda: the TMA copy reads through the tensor map as
 * the GPU would (zeros past the tensor's edge), then tile + 1 goes to `out`. */
#include "softcuda/softcuda.h"

#define TILE_W 32u
#define TILE_H 8u

SOFTCUDA_TWIN(tma_tile_copy) {
  softcuda_tensor_map map;
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 1);
  unsigned width = SOFTCUDA_PARAM(unsigned, 2);
  unsigned height = SOFTCUDA_PARAM(unsigned, 3);
  unsigned x0 = block->block_idx.x * TILE_W, y0 = block->block_idx.y * TILE_H, tx, ty;
  if (!softcuda_tensor_map_read(params[0], &map)) return 1; /* CUDA_ERROR_INVALID_VALUE: not an encoded map */
  if (map.rank != 2 || map.element_bytes != 4 || map.box[0] != TILE_W || map.box[1] != TILE_H) return 1;
  for (ty = 0; ty < TILE_H; ++ty) {
    for (tx = 0; tx < TILE_W; ++tx) {
      unsigned long long gx = x0 + tx, gy = y0 + ty;
      unsigned v = 0;
      if (gx < map.dims[0] && gy < map.dims[1]) {
        const unsigned* src = (const unsigned*)(unsigned long)(map.address + gy * map.strides[1] + gx * 4u);
        if (!softcuda_accessible(src, 4)) return 700;
        v = *src;
      }
      if (gx < width && gy < height) {
        if (!softcuda_accessible(&out[gy * width + gx], 4)) return 700;
        out[gy * width + gx] = v + 1u;
      }
    }
  }
  return 0;
}
