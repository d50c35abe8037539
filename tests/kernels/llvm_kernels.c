/* C twins of llvm_kernels.ll and llvm_big_param.ll (PTX from LLVM's NVPTX back end) for
 * softcuda. Each does what its LLVM IR does; kernels whose names are not C identifiers
 * ('$', or longer than is comfortable) are registered by hand at the end. */
#include "softcuda/softcuda.h"

#include <string.h>

#define LLVM_OUT_OK(p, bytes)                                                            \
  do {                                                                                   \
    if (!softcuda_accessible((p), (bytes))) return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */ \
  } while (0)

/* out[i] = 2 * i + 1 for i < n. */
SOFTCUDA_TWIN(llvm_maxntid) {
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned n = SOFTCUDA_PARAM(unsigned, 1);
  unsigned t;
  for (t = 0; t < block->block_dim.x; ++t) {
    unsigned i = block->block_idx.x * block->block_dim.x + t;
    if (i >= n) continue;
    LLVM_OUT_OK(out + i, 4);
    out[i] = 2 * i + 1;
  }
  return 0;
}

/* out[i] = i + 1000 for i < n. */
SOFTCUDA_TWIN(llvm_reqntid) {
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned n = SOFTCUDA_PARAM(unsigned, 1);
  unsigned t;
  for (t = 0; t < block->block_dim.x; ++t) {
    unsigned i = block->block_idx.x * block->block_dim.x + t;
    if (i >= n) continue;
    LLVM_OUT_OK(out + i, 4);
    out[i] = i + 1000;
  }
  return 0;
}

/* out[block * 64 + y * 16 + x] = y * 100 + x (the device code assumes 16 x 4 threads). */
SOFTCUDA_TWIN(llvm_reqntid_2d) {
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned x, y;
  for (y = 0; y < block->block_dim.y; ++y)
    for (x = 0; x < block->block_dim.x; ++x) {
      unsigned i = block->block_idx.x * 64 + y * 16 + x;
      LLVM_OUT_OK(out + i, 4);
      out[i] = y * 100 + x;
    }
  return 0;
}

/* struct S { int a; long long b; float c; unsigned char d; } (24 bytes, align 8), passed
 * by value between scalars; each value, widened, to out[0..9]. */
SOFTCUDA_TWIN(llvm_byval) {
  unsigned long long* out = SOFTCUDA_PARAM(unsigned long long*, 0);
  const unsigned char* s = (const unsigned char*)params[1];
  int a, x;
  long long b, y;
  float c, f;
  unsigned short h;
  unsigned char d, cc;
  double dd;
  unsigned bits;
  memcpy(&a, s, 4);
  memcpy(&b, s + 8, 8);
  memcpy(&c, s + 16, 4);
  d = s[20];
  x = SOFTCUDA_PARAM(int, 2);
  y = SOFTCUDA_PARAM(long long, 3);
  h = SOFTCUDA_PARAM(unsigned short, 4);
  cc = SOFTCUDA_PARAM(unsigned char, 5);
  dd = SOFTCUDA_PARAM(double, 6);
  f = SOFTCUDA_PARAM(float, 7);
  LLVM_OUT_OK(out, 80);
  out[0] = (unsigned long long)(long long)a;
  out[1] = (unsigned long long)b;
  memcpy(&bits, &c, 4);
  out[2] = bits;
  out[3] = d;
  out[4] = (unsigned long long)(long long)x;
  out[5] = (unsigned long long)y;
  out[6] = h;
  out[7] = cc;
  memcpy(&out[8], &dd, 8);
  memcpy(&bits, &f, 4);
  out[9] = bits;
  (void)block;
  return 0;
}

/* 60 parameters: out, then i32 (odd k) and i64 (even k); out[k - 1] = parameter k, widened. */
SOFTCUDA_TWIN(llvm_many) {
  unsigned long long* out = SOFTCUDA_PARAM(unsigned long long*, 0);
  int k;
  LLVM_OUT_OK(out, 59 * 8);
  for (k = 1; k < 60; ++k)
    out[k - 1] = k % 2 ? (unsigned long long)(long long)SOFTCUDA_PARAM(int, k) : SOFTCUDA_PARAM(unsigned long long, k);
  (void)block;
  return 0;
}

/* The module's initialised globals: table {11, 22, 33, 44}, scale 7, coef[1] 2.5f. */
SOFTCUDA_TWIN(llvm_globals) {
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 0);
  float coef1 = 2.5f;
  LLVM_OUT_OK(out, 24);
  out[0] = 11, out[1] = 22, out[2] = 33, out[3] = 44, out[4] = 7;
  memcpy(&out[5], &coef1, 4);
  (void)block;
  return 0;
}

/* dsmem[i] = 3 * i for i < nwords (dynamic shared memory), then out[block] = their sum;
 * words past the block's dynamic shared memory are an illegal address. */
SOFTCUDA_TWIN(llvm_dyn_shared) {
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned nwords = SOFTCUDA_PARAM(unsigned, 1);
  unsigned* dsmem = (unsigned*)block->shared;
  unsigned i, sum = 0;
  if ((unsigned long long)nwords * 4 > block->shared_bytes) return 700;
  for (i = 0; i < nwords; ++i) dsmem[i] = 3 * i;
  for (i = 0; i < nwords; ++i) sum += dsmem[i];
  LLVM_OUT_OK(out + block->block_idx.x, 4);
  out[block->block_idx.x] = sum;
  return 0;
}

/* tile (16 KiB of static shared memory): tile[t] = t + 1; dsmem[t] = tile[ntid - 1 - t];
 * out[t] = dsmem[t]. */
SOFTCUDA_TWIN(llvm_static_shared) {
  unsigned tile[4096];
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned* dsmem = (unsigned*)block->shared;
  unsigned n = block->block_dim.x, t;
  if ((unsigned long long)n * 4 > block->shared_bytes) return 700;
  for (t = 0; t < n; ++t) tile[t] = t + 1;
  for (t = 0; t < n; ++t) dsmem[t] = tile[n - 1 - t];
  LLVM_OUT_OK(out, n * 4);
  for (t = 0; t < n; ++t) out[t] = dsmem[t];
  return 0;
}

/* llvm_scale(float* x, unsigned n, float s): x[i] *= s for i < n. */
SOFTCUDA_TWIN(_Z10llvm_scalePfjf) {
  float* x = SOFTCUDA_PARAM(float*, 0);
  unsigned n = SOFTCUDA_PARAM(unsigned, 1);
  float s = SOFTCUDA_PARAM(float, 2);
  unsigned t;
  for (t = 0; t < block->block_dim.x; ++t) {
    unsigned i = block->block_idx.x * block->block_dim.x + t;
    if (i >= n) continue;
    LLVM_OUT_OK(x + i, 4);
    x[i] *= s;
  }
  return 0;
}

/* out[0] = s.words[0], out[1] = s.words[1099] (a 4,400-byte struct by value). */
SOFTCUDA_TWIN(llvm_big_param) {
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 0);
  const unsigned char* s = (const unsigned char*)params[1];
  LLVM_OUT_OK(out, 8);
  memcpy(&out[0], s, 4);
  memcpy(&out[1], s + 1099 * 4, 4);
  (void)block;
  return 0;
}

/* Kernels that write a tag to out[0]. */
static int llvm_tag(void** params, unsigned tag) {
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 0);
  LLVM_OUT_OK(out, 4);
  out[0] = tag;
  return 0;
}
static int llvm_dollar(const softcuda_block* block, void** params) { return (void)block, llvm_tag(params, 36); }
static int llvm_julia(const softcuda_block* block, void** params) { return (void)block, llvm_tag(params, 1234); }
static int llvm_numba(const softcuda_block* block, void** params) { return (void)block, llvm_tag(params, 2412); }

__attribute__((constructor)) static void llvm_kernels_register(void) {
  softcuda_register_twin("llvm$dollar", llvm_dollar);
  softcuda_register_twin("julia_vadd_1234", llvm_julia);
  softcuda_register_twin(
      "_ZN6cudapy8__main__9axpy_"
      "2412B96cw51cXTLSUwv1sCUt9Uw1VEw0NRRQPKzLTg4gaGKFsG2oMQGEYakJSQB1PQBk0Bynm21OiwU1a0UoLGhDpQE8"
      "oxrNQE_3dE5ArrayIfLi1E1C7mutable7alignedE",
      llvm_numba);
}
