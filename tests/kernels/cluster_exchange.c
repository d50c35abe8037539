/* C twin of cluster_exchange.cu for softcuda: a grid twin, since every block reads the
 * shared memory of the next block of its cluster. */
#include <stdlib.h>

#include "softcuda/softcuda.h"

SOFTCUDA_GRID_TWIN(cluster_exchange) {
  unsigned* out = SOFTCUDA_PARAM(unsigned*, 0);
  unsigned n = SOFTCUDA_PARAM(unsigned, 1);
  unsigned threads = grid->block_dim.x, size = grid->cluster_dim.x, b, t;
  if (grid->grid_dim.y != 1 || grid->grid_dim.z != 1 || grid->block_dim.y != 1 || grid->block_dim.z != 1)
    return 719; /* the kernel is written for 1D launches */
  if (grid->shared_bytes < threads * 4u) return 700; /* a shared store past the end */
  for (b = 0; b < grid->grid_dim.x; ++b) {
    unsigned rank = b % size, peer = b - rank + (rank + 1) % size;
    for (t = 0; t < threads; ++t) {
      unsigned i = b * threads + t;
      if (i >= n) continue;
      if (!softcuda_accessible(out + i, 4)) return 700;
      out[i] = peer * 1000u + t;
    }
  }
  return 0;
}
