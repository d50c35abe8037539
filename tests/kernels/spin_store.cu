// spin_store: a slow writer for barrier tests. Spins for `us` microseconds (GPU global
// timer), then thread 0 of block 0 stores `value` to dst[0..n). A reader ordered after it
// by a barrier must see `value`; without the barrier it runs during the spin and does not.
// Regenerate: tests/kernels/regen.sh. C twin: spin_store.c.
static __device__ __forceinline__ unsigned long long spin_store_now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
extern "C" __global__ void spin_store(unsigned* dst, unsigned value, unsigned n, unsigned long long us) {
  unsigned long long start = spin_store_now_ns();
  while (spin_store_now_ns() - start < us * 1000ull) {
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (unsigned i = 0; i < n; ++i) ((volatile unsigned*)dst)[i] = value;
  }
}
