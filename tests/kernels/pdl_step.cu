// regen: -arch=compute_90
// One step of a dependent chain: state[0] = state[0] * 3 + k (mod 2^32), a result that is
// right only if the steps run in order. Written for programmatic dependent launch: it
// lets the next step start at once (griddepcontrol.launch_dependents), then waits for the
// previous step and its writes (griddepcontrol.wait) before it reads state. Without PDL
// both instructions do nothing. Twin: pdl_step.c
extern "C" __global__ void pdl_step(unsigned* state, unsigned k) {
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (blockIdx.x == 0 && threadIdx.x == 0) state[0] = state[0] * 3u + k;
}
