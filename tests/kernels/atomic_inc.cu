// Every thread of the grid adds 1 to *counter. Twin: atomic_inc.c
extern "C" __global__ void atomic_inc(unsigned* counter) { atomicAdd(counter, 1u); }
