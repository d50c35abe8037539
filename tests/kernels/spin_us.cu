// Each thread spins until `us` microseconds of wall time (%globaltimer) have passed.
// Twin: spin_us.c
static __device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
extern "C" __global__ void spin_us(unsigned long long us) {
  unsigned long long start = globaltimer_ns();
  while (globaltimer_ns() - start < us * 1000ull) {
  }
}
