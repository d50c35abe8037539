/* C twins of the generated test modules of tests/kernels/gen_modules.h (softcuda only):
 * gen_add_K(unsigned* data, unsigned n) adds K to data[i] for every i < n, K in [0, 128).
 * A twin has no user pointer, so each K gets its own small function (made by the macros
 * below) that calls the shared body; a constructor registers them in a loop. */
#include "softcuda/softcuda.h"

#include <stdio.h>

static int gen_add_body(const softcuda_block* block, void** params, unsigned k) {
  unsigned* data = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned n = SOFTCUDA_PARAM(unsigned, 1);
  unsigned t;
  for (t = 0; t < block->block_dim.x; ++t) {
    unsigned i = block->block_idx.x * block->block_dim.x + t;
    if (i >= n) continue;
    if (!softcuda_accessible(data + i, 4)) return 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
    data[i] += k;
  }
  return 0;
}

/* gen_add_twin_G_I handles K = 8 * G + I. */
#define GEN_TWIN(G, I)                                                        \
  static int gen_add_twin_##G##_##I(const softcuda_block* block, void** params) { \
    return gen_add_body(block, params, 8u * G + I);                           \
  }
#define GEN_GROUP(G) \
  GEN_TWIN(G, 0) GEN_TWIN(G, 1) GEN_TWIN(G, 2) GEN_TWIN(G, 3) GEN_TWIN(G, 4) GEN_TWIN(G, 5) GEN_TWIN(G, 6) GEN_TWIN(G, 7)
#define GEN_REF(G, I) gen_add_twin_##G##_##I,
#define GEN_REFS(G) \
  GEN_REF(G, 0) GEN_REF(G, 1) GEN_REF(G, 2) GEN_REF(G, 3) GEN_REF(G, 4) GEN_REF(G, 5) GEN_REF(G, 6) GEN_REF(G, 7)
#define GEN_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

GEN_ALL(GEN_GROUP)

static const softcuda_twin_fn gen_add_twins[] = {GEN_ALL(GEN_REFS)};

__attribute__((constructor)) static void gen_family_register(void) {
  unsigned k;
  for (k = 0; k < sizeof(gen_add_twins) / sizeof(gen_add_twins[0]); ++k) {
    char name[32];
    snprintf(name, sizeof(name), "gen_add_%u", k);
    softcuda_register_twin(name, gen_add_twins[k]);
  }
}
