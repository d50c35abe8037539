// spin_flag: GPU work that stays in flight until the host lets it go. Spins until *flag
// (a word of pinned host memory the test sets) is non-zero or `timeout_us` microseconds
// have passed (so a test that dies cannot leave the GPU busy), then thread 0 of block 0
// stores 1 (released) or 2 (timed out) to *out. Twin: spin_flag.c
static __device__ __forceinline__ unsigned long long spin_flag_now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
extern "C" __global__ void spin_flag(const unsigned* flag, unsigned* out, unsigned long long timeout_us) {
  unsigned long long start = spin_flag_now_ns();
  unsigned result = 2;
  while (spin_flag_now_ns() - start < timeout_us * 1000ull) {
    if (*(const volatile unsigned*)flag != 0) {
      result = 1;
      break;
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *(volatile unsigned*)out = result;
}
