// Writes to `address`, which the test makes illegal (e.g. 0x10): the launch fails with a
// sticky CUDA_ERROR_ILLEGAL_ADDRESS that poisons the context. Twin: fault.c
extern "C" __global__ void fault(unsigned long long address) { *(volatile int*)address = 1; }
