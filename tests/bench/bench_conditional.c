/* bench_conditional - device-side loops (WHILE regions, conditional graph nodes) against the
 * raw driver API and against a host loop, same work, same run.
 *
 *   bench_conditional [iterations] [repeats]     (defaults 1000 and 20; tiny on softcuda)
 *
 * The loop: `iterations` runs of cond_count_down (tests/kernels/conditional: one thread
 * decrements a counter and clears the loop's condition at 0), after the counters are reset
 * from device memory. Each run is one execute (one launch) waited for.
 *
 * 1. WHILE on the device: a GRAPH command buffer (update, barrier, WHILE region) executed
 *    and its semaphore waited for
 *      vs a raw graph of a memcpy node and a WHILE conditional node (cuGraphAddNode),
 *      cuGraphLaunch + cuStreamSynchronize                                     target <= 1.05x
 * 2. the same loop driven from the host: cuLaunchKernel of a one-thread kernel `iterations`
 *    times + cuStreamSynchronize (raw), against row 1's gpuhal time: what a device-side loop
 *    costs or saves per iteration (reported, no target).
 *
 * Reported: the median of `repeats` runs (and the best), us per run, and the ratio. The
 * trip count is checked after every run. Timings mean something only on a GPU. */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"
#include "test_util.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>

#define BC_MAX_REPEATS 200

typedef struct bench {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_kernel_t* count; /* cond_count_down(unsigned* remaining, unsigned* trips, handle) */
  gpuhal_kernel_t* add;   /* cond_add(unsigned* out, unsigned value) */
  gpuhal_buffer_t* state; /* [0] remaining, [1] trips */
  gpuhal_buffer_t* init;  /* {iterations, 0}: the raw graph's reset source */
  gpuhal_semaphore_t* sem;
  uint64_t value;
  CUstream raw_stream;
  unsigned iterations;
  int repeats, failures;
} bench;

static double now_us(void) { return (double)gpuhal_now_ns() / 1000.0; }

static int ok(bench* b, gpuhal_status_t s, const char* what) {
  return bench_ok("bench_conditional", &b->failures, s, what);
}
static int ok_cu(bench* b, CUresult r, const char* what) {
  return bench_ok_cu("bench_conditional", &b->failures, r, what);
}

/* bench_median() sorts: afterwards [0] is the best. */
static void report(const char* name, double* ours, double* raw, int n, double target) {
  double mo = bench_median(ours, n), mr = bench_median(raw, n), ratio = mr > 0 ? mo / mr : 0.0;
  char goal[16] = "-";
  if (target > 0) snprintf(goal, sizeof(goal), "%.2fx", target);
  printf("%-46s %10.1f %10.1f %10.1f %10.1f %7.2fx %7s %s\n", name, mo, mr, ours[0], raw[0], ratio, goal,
         target > 0 && ratio > target ? "(over target)" : "");
  fflush(stdout);
}

/* The trips counter must read `want`. */
static void check(bench* b, unsigned want, const char* what) {
  unsigned trips = 0;
  if (!ok(b, gpuhal_buffer_read(b->state, 4, &trips, 4), "read")) return;
  if (trips != want) {
    fprintf(stderr, "bench_conditional: %s: %u trips, expected %u\n", what, trips, want);
    b->failures++;
  }
}

static void raw_enter(bench* b) { b->device->cu->cuCtxPushCurrent(b->device->context); }
static void raw_leave(bench* b) {
  CUcontext popped;
  b->device->cu->cuCtxPopCurrent(&popped);
}

static gpuhal_command_buffer_t* record(bench* b) {
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_condition_t loop;
  gpuhal_arg_t args[3];
  unsigned init[2];
  init[0] = b->iterations;
  init[1] = 0;
  if (!ok(b, gpuhal_command_buffer_create(b->device, GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb), "create")) return NULL;
  ok(b, gpuhal_command_buffer_begin(cb), "begin");
  ok(b, gpuhal_cmd_update(cb, init, gpuhal_ref_buffer(b->state, 0), sizeof(init)), "update");
  ok(b, gpuhal_cmd_barrier(cb), "barrier");
  ok(b, gpuhal_command_buffer_condition_create(cb, 1, &loop), "condition_create");
  ok(b, gpuhal_cmd_begin_while(cb, loop), "begin_while");
  args[0] = gpuhal_arg_buffer(b->state, 0);
  args[1] = gpuhal_arg_buffer(b->state, 4);
  args[2] = gpuhal_arg_condition(loop);
  ok(b, gpuhal_cmd_dispatch(cb, b->count, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args), "dispatch");
  ok(b, gpuhal_cmd_end_region(cb), "end_region");
  ok(b, gpuhal_command_buffer_end(cb), "end");
  return cb;
}

static double run_gpuhal(bench* b, gpuhal_command_buffer_t* cb) {
  uint64_t v = ++b->value;
  double t0 = now_us(), t;
  ok(b,
     gpuhal_queue_execute(b->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&b->sem, &v), cb,
                          NULL),
     "queue_execute");
  ok(b, gpuhal_semaphore_wait(b->sem, v, gpuhal_timeout_infinite()), "semaphore_wait");
  t = now_us() - t0;
  check(b, b->iterations, "gpuhal");
  return t;
}

/* The raw graph: memcpy {iterations, 0} into the state, then WHILE { count_down }. */
typedef struct raw_graph {
  CUgraph graph;
  CUgraphExec exec;
} raw_graph;

static void raw_build(bench* b, raw_graph* r) {
  const gpuhal__cuda_symbols_t* cu = b->device->cu;
  CUdeviceptr state = (CUdeviceptr)b->state->address, trips = state + 4;
  CUgraphConditionalHandle handle = 0;
  CUgraphNodeParams cp;
  CUDA_KERNEL_NODE_PARAMS kp;
  CUDA_MEMCPY3D m;
  CUgraphNode copy, loop, body_node;
  void* params[3];
  memset(r, 0, sizeof(*r));
  raw_enter(b);
  ok_cu(b, cu->cuGraphCreate(&r->graph, 0), "cuGraphCreate");
  memset(&m, 0, sizeof(m));
  m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m.srcDevice = (CUdeviceptr)b->init->address;
  m.dstDevice = state;
  m.WidthInBytes = 8;
  m.Height = m.Depth = 1;
  ok_cu(b, cu->cuGraphAddMemcpyNode(&copy, r->graph, NULL, 0, &m, b->device->context), "cuGraphAddMemcpyNode");
  ok_cu(b, cu->cuGraphConditionalHandleCreate(&handle, r->graph, b->device->context, 1, CU_GRAPH_COND_ASSIGN_DEFAULT),
        "cuGraphConditionalHandleCreate");
  memset(&cp, 0, sizeof(cp));
  cp.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  cp.conditional.handle = handle;
  cp.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
  cp.conditional.size = 1;
  cp.conditional.ctx = b->device->context;
  if (ok_cu(b, cu->cuGraphAddNode(&loop, r->graph, &copy, NULL, 1, &cp), "cuGraphAddNode")) {
    memset(&kp, 0, sizeof(kp));
    kp.func = b->count->function;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    params[0] = &state;
    params[1] = &trips;
    params[2] = &handle;
    kp.kernelParams = params;
    ok_cu(b, cu->cuGraphAddKernelNode(&body_node, cp.conditional.phGraph_out[0], NULL, 0, &kp), "cuGraphAddKernelNode");
  }
  ok_cu(b, cu->cuGraphInstantiateWithFlags(&r->exec, r->graph, 0), "cuGraphInstantiate");
  raw_leave(b);
}

static void raw_destroy(bench* b, raw_graph* r) {
  raw_enter(b);
  if (r->exec) b->device->cu->cuGraphExecDestroy(r->exec);
  if (r->graph) b->device->cu->cuGraphDestroy(r->graph);
  raw_leave(b);
}

static double run_raw_graph(bench* b, const raw_graph* r) {
  const gpuhal__cuda_symbols_t* cu = b->device->cu;
  double t0, t;
  raw_enter(b);
  t0 = now_us();
  ok_cu(b, cu->cuGraphLaunch(r->exec, b->raw_stream), "cuGraphLaunch");
  ok_cu(b, cu->cuStreamSynchronize(b->raw_stream), "cuStreamSynchronize");
  t = now_us() - t0;
  raw_leave(b);
  check(b, b->iterations, "raw graph");
  return t;
}

/* The host loop: the counters reset, then `iterations` launches of cond_add(trips, 1). */
static double run_host_loop(bench* b) {
  const gpuhal__cuda_symbols_t* cu = b->device->cu;
  CUdeviceptr trips = (CUdeviceptr)b->state->address + 4;
  unsigned one = 1, i;
  void* params[2];
  double t0, t;
  params[0] = &trips;
  params[1] = &one;
  raw_enter(b);
  t0 = now_us();
  ok_cu(b, cu->cuMemsetD32Async(trips, 0, 1, b->raw_stream), "cuMemsetD32Async");
  for (i = 0; i < b->iterations; ++i)
    if (!ok_cu(b, cu->cuLaunchKernel(b->add->function, 1, 1, 1, 1, 1, 1, 0, b->raw_stream, params, NULL),
               "cuLaunchKernel"))
      break;
  ok_cu(b, cu->cuStreamSynchronize(b->raw_stream), "cuStreamSynchronize");
  t = now_us() - t0;
  raw_leave(b);
  check(b, b->iterations, "host loop");
  return t;
}

int main(int argc, char** argv) {
  bench b;
  gpuhal_device_info_t info;
  gpuhal_command_buffer_t* cb;
  raw_graph raw;
  double ours[BC_MAX_REPEATS], theirs[BC_MAX_REPEATS], host[BC_MAX_REPEATS], device_loop[BC_MAX_REPEATS];
  unsigned init[2];
  int count = 0, r;
  memset(&b, 0, sizeof(b));
  b.iterations = (unsigned)(argc > 1 ? atoi(argv[1]) : (tu_softcuda() ? 50 : 1000));
  b.repeats = argc > 2 ? atoi(argv[2]) : (tu_softcuda() ? 2 : 20);
  if (b.iterations < 1 || b.repeats < 1 || b.repeats > BC_MAX_REPEATS) {
    fprintf(stderr, "usage: bench_conditional [iterations >= 1] [repeats 1..%d]\n", BC_MAX_REPEATS);
    return 2;
  }
  if (!ok(&b, gpuhal_driver_create(NULL, &b.driver), "driver_create")) return 1;
  if (!ok(&b, gpuhal_driver_device_count(b.driver, &count), "device_count") || count == 0) {
    fprintf(stderr, "bench_conditional: no device\n");
    gpuhal_driver_release(b.driver);
    return 77;
  }
  if (!ok(&b, gpuhal_device_create(b.driver, 0, NULL, &b.device), "device_create")) return 1;
  ok(&b, gpuhal_device_info(b.device, &info), "device_info");
  if (!b.device->cu->cuGraphConditionalHandleCreate || !b.device->cu->cuGraphAddNode) {
    fprintf(stderr, "bench_conditional: the driver has no conditional graph nodes (CUDA 12.3+)\n");
    gpuhal_device_release(b.device);
    gpuhal_driver_release(b.driver);
    return 77;
  }
  ok(&b, tu_load_kernel(b.device, "conditional", &b.exe, NULL), "load");
  if (!b.failures) ok(&b, gpuhal_executable_kernel(b.exe, "cond_count_down", &b.count), "kernel");
  if (!b.failures) ok(&b, gpuhal_executable_kernel(b.exe, "cond_add", &b.add), "kernel");
  ok(&b, gpuhal_buffer_allocate(b.device, GPUHAL_MEMORY_DEVICE, 8, &b.state), "allocate");
  ok(&b, gpuhal_buffer_allocate(b.device, GPUHAL_MEMORY_DEVICE, 8, &b.init), "allocate");
  init[0] = b.iterations;
  init[1] = 0;
  if (!b.failures) ok(&b, gpuhal_buffer_write(b.init, 0, init, sizeof(init)), "write");
  ok(&b, gpuhal_semaphore_create(b.driver, 0, &b.sem), "semaphore");
  raw_enter(&b);
  ok_cu(&b, b.device->cu->cuStreamCreate(&b.raw_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  raw_leave(&b);
  if (b.failures) return 1;
  cb = record(&b);
  raw_build(&b, &raw);
  if (!cb || b.failures) return 1;

  printf("bench_conditional: %s, %u iterations per run, %d repeats\n", info.name, b.iterations, b.repeats);
  printf("%-46s %10s %10s %10s %10s %8s %7s\n", "case (us per run)", "gpuhal", "raw", "best", "best raw", "ratio",
         "target");
  for (r = -1; r < b.repeats; ++r) { /* run -1 warms up */
    double o = run_gpuhal(&b, cb), w = run_raw_graph(&b, &raw), h = run_host_loop(&b);
    if (r < 0) continue;
    ours[r] = device_loop[r] = o;
    theirs[r] = w;
    host[r] = h;
  }
  report("1 WHILE on the device: gpuhal vs raw graph", ours, theirs, b.repeats, 1.05);
  report("2 gpuhal's device loop vs a host loop (raw)", device_loop, host, b.repeats, 0);
  printf("  per iteration: device loop %.2f us, host loop %.2f us\n",
         bench_median(device_loop, b.repeats) / b.iterations, bench_median(host, b.repeats) / b.iterations);

  gpuhal_command_buffer_release(cb);
  raw_destroy(&b, &raw);
  raw_enter(&b);
  b.device->cu->cuStreamDestroy(b.raw_stream);
  raw_leave(&b);
  gpuhal_semaphore_release(b.sem);
  gpuhal_buffer_release(b.state);
  gpuhal_buffer_release(b.init);
  gpuhal_executable_release(b.exe);
  gpuhal_device_release(b.device);
  gpuhal_driver_release(b.driver);
  if (b.failures) {
    fprintf(stderr, "bench_conditional: %d failure(s)\n", b.failures);
    return 1;
  }
  return 0;
}
