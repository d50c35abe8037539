/* C twins of gpuhal_builtin_fill.cu for softcuda: gpuhal's built-in fill and copy kernels.
 * Each twin runs one thread block and walks the block's threads through exactly the
 * grid-stride loops of the CUDA source, so a launch covers the same bytes as on a GPU
 * (a wrong grid size in gpuhal shows up here as it would there). */
#include <stdint.h>
#include <string.h>

#include "../softcuda/softcuda.h"

#define GPUHAL_TWIN_ILLEGAL_ADDRESS 700 /* CUDA_ERROR_ILLEGAL_ADDRESS */

static unsigned char gpuhal_twin_pattern_byte(uint64_t lo, uint64_t hi, uint64_t i) {
  unsigned k = (unsigned)(i & 15);
  return (unsigned char)(k < 8 ? (lo >> (8 * k)) : (hi >> (8 * (k - 8))));
}

/* The pattern as 16 bytes, rotated so that byte j is pattern byte (j + r) % 16. */
static void gpuhal_twin_rotated(uint64_t lo, uint64_t hi, unsigned r, unsigned char out[16]) {
  unsigned j;
  for (j = 0; j < 16; ++j) out[j] = gpuhal_twin_pattern_byte(lo, hi, (uint64_t)j + r);
}

typedef struct gpuhal_twin_threads {
  uint64_t first; /* global index of the block's thread 0 */
  uint64_t count; /* threads in the block */
  uint64_t stride;
} gpuhal_twin_threads;

static gpuhal_twin_threads gpuhal_twin_threads_of(const softcuda_block* b) {
  gpuhal_twin_threads t;
  t.count = (uint64_t)b->block_dim.x;
  t.first = (uint64_t)b->block_idx.x * t.count;
  t.stride = (uint64_t)b->grid_dim.x * t.count;
  return t;
}

SOFTCUDA_TWIN(gpuhal_builtin_fill) {
  unsigned char* dst = SOFTCUDA_PARAM(unsigned char*, 0);
  uint64_t size = SOFTCUDA_PARAM(uint64_t, 1);
  uint64_t lo = SOFTCUDA_PARAM(uint64_t, 2);
  uint64_t hi = SOFTCUDA_PARAM(uint64_t, 3);
  gpuhal_twin_threads t = gpuhal_twin_threads_of(block);
  uint64_t head = (16 - ((uint64_t)(uintptr_t)dst & 15)) & 15;
  uint64_t body, tail_start, k, i;
  unsigned char vec[16];
  if (size == 0) return 0;
  if (!softcuda_accessible(dst, size)) return GPUHAL_TWIN_ILLEGAL_ADDRESS;
  if (head > size) head = size;
  body = (size - head) / 16;
  tail_start = head + body * 16;
  gpuhal_twin_rotated(lo, hi, (unsigned)(head & 15), vec);
  for (k = 0; k < t.count; ++k) {
    uint64_t tid = t.first + k;
    for (i = tid; i < body; i += t.stride) memcpy(dst + head + 16 * i, vec, 16);
    for (i = tid; i < head; i += t.stride) dst[i] = gpuhal_twin_pattern_byte(lo, hi, i);
    for (i = tail_start + tid; i < size; i += t.stride) dst[i] = gpuhal_twin_pattern_byte(lo, hi, i);
  }
  return 0;
}

SOFTCUDA_TWIN(gpuhal_builtin_copy) {
  unsigned char* dst = SOFTCUDA_PARAM(unsigned char*, 0);
  const unsigned char* src = SOFTCUDA_PARAM(const unsigned char*, 1);
  uint64_t size = SOFTCUDA_PARAM(uint64_t, 2);
  gpuhal_twin_threads t = gpuhal_twin_threads_of(block);
  uint64_t k, i;
  if (size == 0) return 0;
  if (!softcuda_accessible(dst, size) || !softcuda_accessible(src, size)) return GPUHAL_TWIN_ILLEGAL_ADDRESS;
  /* Every byte is copied by exactly one thread of the grid whichever path the GPU takes;
   * the block's share is the bytes whose grid-stride index falls in its threads. */
  for (k = 0; k < t.count; ++k) {
    uint64_t tid = t.first + k;
    for (i = tid; i < size; i += t.stride) dst[i] = src[i];
  }
  return 0;
}
