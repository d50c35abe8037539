// regen: -arch=compute_90
// Thread-block clusters and distributed shared memory. Every block writes
// blockIdx.x * 1000 + t into its shared memory word t; after a cluster barrier each thread
// reads word t of the next block of its cluster (rank + 1, wrapping), so out[i] for
// i = blockIdx.x * blockDim.x + t is that block's index * 1000 + t. Launched without a
// cluster, every block is its own cluster and reads itself. Dynamic shared memory: 4 bytes
// per thread. 1D grids and clusters. Twin: cluster_exchange.c
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void cluster_exchange(unsigned* out, unsigned n) {
  extern __shared__ unsigned words[];
  cg::cluster_group cluster = cg::this_cluster();
  unsigned t = threadIdx.x;
  words[t] = blockIdx.x * 1000u + t;
  cluster.sync();
  unsigned rank = cluster.block_rank();
  unsigned* peer = cluster.map_shared_rank(words, (rank + 1) % cluster.num_blocks());
  unsigned value = peer[t];
  cluster.sync(); /* the peer's shared memory must outlive every read of it */
  unsigned i = blockIdx.x * blockDim.x + t;
  if (i < n) out[i] = value;
}
