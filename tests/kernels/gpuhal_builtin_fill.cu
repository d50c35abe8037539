// gpuhal's built-in kernels: fill and copy for what memset/memcpy nodes cannot do.
//
// gpuhal embeds the PTX of this file (src/builtin_ptx.h, included by src/builtin_kernels.h);
// the C twins for softcuda are in gpuhal_builtin_fill.c. Used for:
//   - fills with 8- and 16-byte patterns (CUDA's memsets stop at 4 bytes), and fills whose
//     destination is not aligned to the pattern (only reachable through binding offsets);
//   - copies and fills in CUDA graphs whose addresses are bound late (binding slots,
//     queue_alloca buffers): a kernel node's parameters can be rewritten freely in an
//     instantiated graph, memcpy/memset nodes only within narrow rules.
//
// After changing it (no toolkit is needed to build gpuhal; only to change this file):
//   python3 tools/embed_ptx.py --nvcc     # the .ptx beside it, then src/builtin_ptx.h
// CI fails when the .ptx was not compiled from this file or src/builtin_ptx.h is stale.
//
// The fill semantics: byte i of [dst, dst + size) becomes pattern16[i % 16], where pattern16
// is the pattern repeated to 16 bytes (every pattern size, 1, 2, 4, 8 and 16, divides 16).
// The pattern is passed as two little-endian 64-bit halves.
#include <stdint.h>

// Rotates a 16-byte little-endian value so that byte j of the result is byte (j + r) % 16
// of the input (0 <= r < 16).
__device__ static void gpuhal_rotate16(uint64_t& lo, uint64_t& hi, unsigned r) {
  if (r >= 8) {
    uint64_t t = lo;
    lo = hi;
    hi = t;
    r -= 8;
  }
  if (r) {
    unsigned s = 8 * r;
    uint64_t nlo = (lo >> s) | (hi << (64 - s));
    uint64_t nhi = (hi >> s) | (lo << (64 - s));
    lo = nlo;
    hi = nhi;
  }
}

__device__ static unsigned char gpuhal_pattern_byte(uint64_t lo, uint64_t hi, uint64_t i) {
  unsigned k = (unsigned)(i & 15);
  return (unsigned char)(k < 8 ? (lo >> (8 * k)) : (hi >> (8 * (k - 8))));
}

// Grid-stride: 16-byte stores over the 16-aligned body, single bytes for the head and tail.
extern "C" __global__ void gpuhal_builtin_fill(unsigned char* dst, uint64_t size, uint64_t pattern_lo,
                                               uint64_t pattern_hi) {
  uint64_t addr = (uint64_t)dst;
  uint64_t head = (16 - (addr & 15)) & 15;
  if (head > size) head = size;
  uint64_t body = (size - head) / 16;
  uint64_t tail_start = head + body * 16;
  uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  uint64_t lo = pattern_lo, hi = pattern_hi;
  gpuhal_rotate16(lo, hi, (unsigned)(head & 15));
  ulonglong2* vec = (ulonglong2*)(dst + head);
  for (uint64_t i = tid; i < body; i += stride) {
    ulonglong2 v;
    v.x = lo;
    v.y = hi;
    vec[i] = v;
  }
  for (uint64_t i = tid; i < head; i += stride) dst[i] = gpuhal_pattern_byte(pattern_lo, pattern_hi, i);
  for (uint64_t i = tail_start + tid; i < size; i += stride)
    dst[i] = gpuhal_pattern_byte(pattern_lo, pattern_hi, i);
}

// Copies size bytes (non-overlapping). 16-byte loads and stores when dst and src share
// their alignment modulo 16, bytes otherwise.
extern "C" __global__ void gpuhal_builtin_copy(unsigned char* dst, const unsigned char* src, uint64_t size) {
  uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  if ((((uint64_t)dst ^ (uint64_t)src) & 15) != 0) {
    for (uint64_t i = tid; i < size; i += stride) dst[i] = src[i];
    return;
  }
  uint64_t head = (16 - ((uint64_t)dst & 15)) & 15;
  if (head > size) head = size;
  uint64_t body = (size - head) / 16;
  uint64_t tail_start = head + body * 16;
  const ulonglong2* s = (const ulonglong2*)(src + head);
  ulonglong2* d = (ulonglong2*)(dst + head);
  for (uint64_t i = tid; i < body; i += stride) d[i] = s[i];
  for (uint64_t i = tid; i < head; i += stride) dst[i] = src[i];
  for (uint64_t i = tail_start + tid; i < size; i += stride) dst[i] = src[i];
}
