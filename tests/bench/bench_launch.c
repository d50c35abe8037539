/* bench_launch - programmatic dependent launch (PDL) against the raw driver API, same work,
 * same run.
 *
 *   bench_launch [steps] [repeats]     (defaults 1000 and 20; tiny on softcuda)
 *
 * A chain of `steps` dependent pdl_step kernels (tests/kernels: griddepcontrol, 4 blocks
 * of 64 threads; each step reads what the one before wrote), executed and waited for:
 *
 * 1. STREAM command buffer (a barrier after each dispatch)
 *      vs `steps` cuLaunchKernelEx on a stream + cuStreamSynchronize       target <= 1.05x
 *    with and without GPUHAL_DISPATCH_PROGRAMMATIC / the PDL launch attribute
 * 2. GRAPH command buffer replay
 *      vs cuGraphLaunch of a hand-built graph of the same chain (programmatic edges
 *      from cuGraphAddDependencies, or ordinary ones)                         target <= 1.05x
 *
 * Both sides wait the same way: the raw side's cuStreamSynchronize spins (the driver's
 * default scheduling while the process has fewer contexts than cores), so gpuhal's device
 * is given tuning.host_wait_spin_ns = 10 ms and its semaphore wait spins too, instead of
 * sleeping after the default 200 us and paying a wake-up (20-60 us, RESULTS.md).
 *
 * Reported per step: the median of `repeats` runs (and the best), gpuhal / raw, and the
 * PDL gain (time without PDL / time with it) on both sides. The chain's result is checked
 * after every run. Timings mean something only on a GPU (compute capability 9.0+). */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"
#include "test_util.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>

#define BL_MAX_REPEATS 200

typedef struct bench {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_kernel_t* step; /* pdl_step(unsigned* state, unsigned k) */
  gpuhal_buffer_t* state;
  gpuhal_semaphore_t* sem;
  uint64_t value;
  CUstream raw_stream;
  unsigned expected;
  int steps, repeats, failures;
} bench;

static double now_us(void) { return (double)gpuhal_now_ns() / 1000.0; }

static int ok(bench* b, gpuhal_status_t s, const char* what) { return bench_ok("bench_launch", &b->failures, s, what); }
static int ok_cu(bench* b, CUresult r, const char* what) { return bench_ok_cu("bench_launch", &b->failures, r, what); }

static double best(const double* v, int n) {
  double m = v[0];
  int i;
  for (i = 1; i < n; ++i) m = GPUHAL__MIN(m, v[i]);
  return m;
}

static void report(const char* name, double* ours, double* raw, int n, double target) {
  double bo = best(ours, n), br = best(raw, n), mo = bench_median(ours, n), mr = bench_median(raw, n);
  double ratio = mr > 0 ? mo / mr : 0.0;
  printf("%-40s %9.3f %9.3f %9.3f %9.3f %7.2fx %6.2fx %s\n", name, mo, mr, bo, br, ratio, target,
         ratio <= target ? "" : "(over target)");
  fflush(stdout);
}

/* Resets the state word (to 5) and checks the chain's result after a run. */
static void state_reset(bench* b) {
  unsigned five = 5;
  ok(b, gpuhal_buffer_write(b->state, 0, &five, 4), "reset state");
}
static void state_check(bench* b, const char* what) {
  unsigned got = 0;
  ok(b, gpuhal_buffer_read(b->state, 0, &got, 4), "read state");
  if (got != b->expected) {
    fprintf(stderr, "bench_launch: %s: the chain gave %u, expected %u\n", what, got, b->expected);
    b->failures++;
  }
}

static gpuhal_command_buffer_t* record(bench* b, uint32_t flags, int pdl) {
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_dispatch_options_t o;
  gpuhal_arg_t args[2];
  int i;
  memset(&o, 0, sizeof(o));
  o.flags = pdl ? GPUHAL_DISPATCH_PROGRAMMATIC : 0;
  if (!ok(b, gpuhal_command_buffer_create(b->device, flags | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb), "create"))
    return NULL;
  ok(b, gpuhal_command_buffer_begin(cb), "begin");
  for (i = 0; i < b->steps; ++i) {
    args[0] = gpuhal_arg_buffer(b->state, 0);
    args[1] = gpuhal_arg_u32((unsigned)i + 1);
    ok(b, gpuhal_cmd_dispatch_ex(cb, b->step, gpuhal_dim3(4, 1, 1), gpuhal_dim3(64, 1, 1), 0, &o, 2, args), "dispatch");
    ok(b, gpuhal_cmd_barrier(cb), "barrier");
  }
  ok(b, gpuhal_command_buffer_end(cb), "end");
  return cb;
}

/* One gpuhal run: execute and wait, in us per step. */
static double run_gpuhal(bench* b, gpuhal_command_buffer_t* cb) {
  uint64_t v = ++b->value;
  double t0;
  state_reset(b);
  t0 = now_us();
  ok(b,
     gpuhal_queue_execute(b->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&b->sem, &v), cb,
                          NULL),
     "queue_execute");
  ok(b, gpuhal_semaphore_wait(b->sem, v, gpuhal_timeout_infinite()), "semaphore_wait");
  return (now_us() - t0) / b->steps;
}

/* The raw side runs with the device's context pushed on this thread. */
static void raw_enter(bench* b) { b->device->cu->cuCtxPushCurrent(b->device->context); }
static void raw_leave(bench* b) {
  CUcontext popped;
  b->device->cu->cuCtxPopCurrent(&popped);
}

/* One raw stream run: `steps` cuLaunchKernelEx + cuStreamSynchronize, in us per step. */
static double run_raw_stream(bench* b, int pdl) {
  const gpuhal__cuda_symbols_t* cu = b->device->cu;
  CUdeviceptr state = (CUdeviceptr)b->state->address;
  CUlaunchAttribute attr;
  CUlaunchConfig config;
  unsigned k;
  void* params[2];
  double t0, t;
  int i;
  state_reset(b);
  memset(&attr, 0, sizeof(attr));
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  memset(&config, 0, sizeof(config));
  config.gridDimX = 4, config.gridDimY = 1, config.gridDimZ = 1;
  config.blockDimX = 64, config.blockDimY = 1, config.blockDimZ = 1;
  config.hStream = b->raw_stream;
  params[0] = &state;
  params[1] = &k;
  raw_enter(b);
  t0 = now_us();
  for (i = 0; i < b->steps; ++i) {
    k = (unsigned)i + 1;
    config.attrs = pdl && i > 0 ? &attr : NULL;
    config.numAttrs = pdl && i > 0 ? 1 : 0;
    ok_cu(b, cu->cuLaunchKernelEx(&config, b->step->function, params, NULL), "cuLaunchKernelEx");
  }
  ok_cu(b, cu->cuStreamSynchronize(b->raw_stream), "cuStreamSynchronize");
  t = (now_us() - t0) / b->steps;
  raw_leave(b);
  return t;
}

/* The same chain as a hand-built graph: kernel nodes joined by programmatic or ordinary edges. */
static CUgraphExec raw_graph(bench* b, int pdl) {
  const gpuhal__cuda_symbols_t* cu = b->device->cu;
  CUdeviceptr state = (CUdeviceptr)b->state->address;
  CUDA_KERNEL_NODE_PARAMS p;
  CUgraphEdgeData edge;
  CUgraph g = NULL;
  CUgraphExec e = NULL;
  CUgraphNode prev = NULL, node;
  unsigned k;
  void* params[2];
  int i;
  memset(&p, 0, sizeof(p));
  memset(&edge, 0, sizeof(edge));
  edge.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
  edge.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  p.func = b->step->function;
  p.gridDimX = 4, p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 64, p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = params;
  params[0] = &state;
  params[1] = &k;
  raw_enter(b);
  ok_cu(b, cu->cuGraphCreate(&g, 0), "cuGraphCreate");
  for (i = 0; i < b->steps; ++i) {
    k = (unsigned)i + 1;
    ok_cu(b, cu->cuGraphAddKernelNode(&node, g, NULL, 0, &p), "cuGraphAddKernelNode");
    if (prev) ok_cu(b, cu->cuGraphAddDependencies(g, &prev, &node, pdl ? &edge : NULL, 1), "cuGraphAddDependencies");
    prev = node;
  }
  ok_cu(b, cu->cuGraphInstantiateWithFlags(&e, g, 0), "cuGraphInstantiate");
  cu->cuGraphDestroy(g);
  raw_leave(b);
  return e;
}

static double run_raw_graph(bench* b, CUgraphExec e) {
  const gpuhal__cuda_symbols_t* cu = b->device->cu;
  double t0, t;
  state_reset(b);
  raw_enter(b);
  t0 = now_us();
  ok_cu(b, cu->cuGraphLaunch(e, b->raw_stream), "cuGraphLaunch");
  ok_cu(b, cu->cuStreamSynchronize(b->raw_stream), "cuStreamSynchronize");
  t = (now_us() - t0) / b->steps;
  raw_leave(b);
  return t;
}

/* Runs one case (STREAM or GRAPH, PDL or not): `repeats` alternating gpuhal and raw runs
 * after one warm-up each; returns the medians. */
static void run_case(bench* b, uint32_t flags, int pdl, double* ours_median, double* raw_median) {
  gpuhal_command_buffer_t* cb = record(b, flags, pdl);
  CUgraphExec e = flags & GPUHAL_COMMAND_BUFFER_STREAM ? NULL : raw_graph(b, pdl);
  double ours[BL_MAX_REPEATS], raw[BL_MAX_REPEATS];
  char name[96];
  int r;
  if (!cb) return;
  for (r = -1; r < b->repeats; ++r) {
    double o = run_gpuhal(b, cb), w;
    state_check(b, "gpuhal");
    w = e ? run_raw_graph(b, e) : run_raw_stream(b, pdl);
    state_check(b, "raw");
    if (r >= 0) ours[r] = o, raw[r] = w;
  }
  snprintf(name, sizeof(name), "%d %s chain, %s, us/step", flags & GPUHAL_COMMAND_BUFFER_STREAM ? 1 : 2,
           flags & GPUHAL_COMMAND_BUFFER_STREAM ? "STREAM" : "GRAPH", pdl ? "PDL" : "no PDL");
  report(name, ours, raw, b->repeats, 1.05);
  *ours_median = bench_median(ours, b->repeats);
  *raw_median = bench_median(raw, b->repeats);
  if (e) {
    raw_enter(b);
    b->device->cu->cuGraphExecDestroy(e);
    raw_leave(b);
  }
  gpuhal_command_buffer_release(cb);
}

int main(int argc, char** argv) {
  bench b;
  gpuhal_device_info_t info;
  char* ptx;
  size_t size = 0;
  int count = 0, mode, i;
  memset(&b, 0, sizeof(b));
  b.steps = argc > 1 ? atoi(argv[1]) : (tu_softcuda() ? 20 : 1000);
  b.repeats = argc > 2 ? atoi(argv[2]) : (tu_softcuda() ? 2 : 20);
  if (b.steps < 2 || b.repeats < 1 || b.repeats > BL_MAX_REPEATS) {
    fprintf(stderr, "usage: bench_launch [steps >= 2] [repeats 1..%d]\n", BL_MAX_REPEATS);
    return 2;
  }
  if (!ok(&b, gpuhal_driver_create(NULL, &b.driver), "driver_create")) return 1;
  if (!ok(&b, gpuhal_driver_device_count(b.driver, &count), "device_count") || count == 0) {
    fprintf(stderr, "bench_launch: no device\n");
    gpuhal_driver_release(b.driver);
    return 77;
  }
  {
    gpuhal_device_params_t params;
    memset(&params, 0, sizeof(params));
    params.tuning.host_wait_spin_ns = 10000000; /* spin through the wait, as cuStreamSynchronize does */
    if (!ok(&b, gpuhal_device_create(b.driver, 0, &params, &b.device), "device_create")) return 1;
  }
  ok(&b, gpuhal_device_info(b.device, &info), "device_info");
  if (info.compute_capability_major < 9 || !b.device->cu->cuLaunchKernelEx || !b.device->cu->cuGraphAddDependencies) {
    fprintf(stderr, "bench_launch: needs compute capability 9.0 and a CUDA 12.3+ driver\n");
    gpuhal_device_release(b.device);
    gpuhal_driver_release(b.driver);
    return 77;
  }
  ptx = tu_read_kernel_file("pdl_step.ptx", &size);
  if (!ptx) return 1;
  ok(&b, gpuhal_executable_load(b.device, ptx, size, &b.exe), "load");
  free(ptx);
  ok(&b, gpuhal_executable_kernel(b.exe, "pdl_step", &b.step), "kernel");
  ok(&b, gpuhal_buffer_allocate(b.device, GPUHAL_MEMORY_DEVICE, 4, &b.state), "allocate");
  ok(&b, gpuhal_semaphore_create(b.driver, 0, &b.sem), "semaphore");
  raw_enter(&b);
  ok_cu(&b, b.device->cu->cuStreamCreate(&b.raw_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  raw_leave(&b);
  b.expected = 5;
  for (i = 0; i < b.steps; ++i) b.expected = b.expected * 3u + (unsigned)i + 1;
  if (b.failures) return 1;

  printf("bench_launch: %s, %d steps, %d repeats\n", info.name, b.steps, b.repeats);
  printf("%-40s %9s %9s %9s %9s %8s %7s\n", "case", "gpuhal", "raw", "best", "best raw", "ratio", "target");
  for (mode = 0; mode < 2; ++mode) {
    uint32_t flags = mode == 0 ? GPUHAL_COMMAND_BUFFER_STREAM : 0;
    double ours_plain = 0, raw_plain = 0, ours_pdl = 0, raw_pdl = 0;
    run_case(&b, flags, 0, &ours_plain, &raw_plain);
    run_case(&b, flags, 1, &ours_pdl, &raw_pdl);
    printf("%-40s gpuhal %.2fx, raw %.2fx (time without PDL / with)\n",
           mode == 0 ? "  PDL gain, STREAM" : "  PDL gain, GRAPH", ours_pdl > 0 ? ours_plain / ours_pdl : 0.0,
           raw_pdl > 0 ? raw_plain / raw_pdl : 0.0);
  }

  raw_enter(&b);
  b.device->cu->cuStreamDestroy(b.raw_stream);
  raw_leave(&b);
  gpuhal_semaphore_release(b.sem);
  gpuhal_buffer_release(b.state);
  gpuhal_executable_release(b.exe);
  gpuhal_device_release(b.device);
  gpuhal_driver_release(b.driver);
  if (b.failures) {
    fprintf(stderr, "bench_launch: %d failure(s)\n", b.failures);
    return 1;
  }
  return 0;
}
