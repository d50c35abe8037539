/* bench_command_buffer - command buffers against the raw driver API, same work, same run.
 *
 *   bench_command_buffer [dispatches] [repeats]     (defaults 1000 and 50; tiny on softcuda)
 *
 * 1. STREAM command buffer of N dispatches, execute + wait, per dispatch
 *      vs N cuLaunchKernel + cuStreamSynchronize                              target <= 1.1x
 * 2. GRAPH recording, per dispatch: create + begin + N cmd_dispatch + end (instantiate)
 *      vs cuGraphCreate + N cuGraphAddKernelNode + cuGraphInstantiate           target <= 1.2x
 * 3. replay of the recorded N-dispatch graph (a chain: a barrier after each dispatch),
 *    queue_execute + wait
 *      vs cuGraphLaunch of the same CUgraphExec + cuStreamSynchronize           target <= 1.05x
 *    also pipelined: `repeats` executes back to back, one wait at the end
 * 4. replay with a rebound binding table: the same graph with its argument in a binding
 *    slot, the table alternating between two buffers, so every execute rewrites N kernel
 *    node parameters (cuGraphExecKernelNodeSetParams) before the launch: reported as the
 *    cost over case 3.
 *
 * The dispatch is spin_us(0) (tests/kernels). Timings mean something only on a GPU. */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct bench {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_kernel_t* spin; /* spin_us(u64 us) */
  gpuhal_executable_t* exe2;
  gpuhal_kernel_t* fill; /* fill_u32(unsigned* dst, unsigned value, unsigned n) */
  gpuhal_semaphore_t* sem;
  uint64_t value;
  CUstream raw_stream;
  int n, repeats, failures;
} bench;

static double now_us(void) { return (double)gpuhal_now_ns() / 1000.0; }

static int ok(bench* b, gpuhal_status_t s, const char* what) {
  if (!s) return 1;
  fprintf(stderr, "bench_command_buffer: %s: %s\n", what, gpuhal_status_message(s));
  gpuhal_status_free(s);
  b->failures++;
  return 0;
}
static int ok_cu(bench* b, CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return 1;
  fprintf(stderr, "bench_command_buffer: %s: CUresult %d\n", what, (int)r);
  b->failures++;
  return 0;
}

static void report(const char* name, double gpuhal_us, double raw_us, double target) {
  double ratio = raw_us > 0 ? gpuhal_us / raw_us : 0.0;
  if (target > 0)
    printf("%-44s %10.3f %10.3f %7.2fx %6.2fx %s\n", name, gpuhal_us, raw_us, ratio, target,
           ratio <= target ? "" : "(over target)");
  else
    printf("%-44s %10.3f %10.3f %7.2fx %7s\n", name, gpuhal_us, raw_us, ratio, "-");
  fflush(stdout);
}

static char* read_file(const char* name, size_t* size) { return tu_read_kernel_file(name, size); }

static gpuhal_status_t load(bench* b, const char* name, gpuhal_executable_t** exe, gpuhal_kernel_t** k) {
  char file[128];
  size_t size = 0;
  char* ptx;
  gpuhal_status_t st;
  snprintf(file, sizeof(file), "%s.ptx", name);
  ptx = read_file(file, &size);
  if (!ptx) return gpuhal_status_make(GPUHAL_STATUS_NOT_FOUND, "cannot read %s", file);
  st = gpuhal_executable_load(b->device, ptx, size, exe);
  free(ptx);
  return st ? st : gpuhal_executable_kernel(*exe, name, k);
}

/* Executes on queue 0, signalling the next value; waits when `wait`. */
static int execute(bench* b, gpuhal_command_buffer_t* cb, const gpuhal_binding_table_t* table, int wait) {
  uint64_t v = ++b->value;
  if (!ok(b,
          gpuhal_queue_execute(b->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&b->sem, &v), cb,
                               table),
          "queue_execute"))
    return 0;
  if (wait) return ok(b, gpuhal_semaphore_wait(b->sem, v, gpuhal_timeout_infinite()), "semaphore_wait");
  return 1;
}

static int wait_last(bench* b) {
  return ok(b, gpuhal_semaphore_wait(b->sem, b->value, gpuhal_timeout_infinite()), "wait");
}

/* The raw side runs with the device's context pushed on this thread. */
static void raw_enter(bench* b) { b->device->cu->cuCtxPushCurrent(b->device->context); }
static void raw_leave(bench* b) {
  CUcontext popped;
  b->device->cu->cuCtxPopCurrent(&popped);
}

/* Records N spin_us(0) dispatches, a barrier after each when `chain`; the argument from
 * binding slot 0 when `slot` (the kernel then is fill_u32 with n = 0: a pointer argument). */
static gpuhal_command_buffer_t* record(bench* b, uint32_t flags, int chain, int slot, gpuhal_buffer_t* buf) {
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t args[3];
  int i;
  if (!ok(b, gpuhal_command_buffer_create(b->device, flags, slot ? 1 : 0, &cb), "create")) return NULL;
  ok(b, gpuhal_command_buffer_begin(cb), "begin");
  for (i = 0; i < b->n; ++i) {
    if (slot || buf) {
      args[0] = slot ? gpuhal_arg_slot(0, 0) : gpuhal_arg_buffer(buf, 0);
      args[1] = gpuhal_arg_u32(1);
      args[2] = gpuhal_arg_u32(0);
      ok(b, gpuhal_cmd_dispatch(cb, b->fill, gpuhal_dim3(1, 1, 1), gpuhal_dim3(32, 1, 1), 0, 3, args), "dispatch");
    } else {
      args[0] = gpuhal_arg_u64(0);
      ok(b, gpuhal_cmd_dispatch(cb, b->spin, gpuhal_dim3(1, 1, 1), gpuhal_dim3(32, 1, 1), 0, 1, args), "dispatch");
    }
    if (chain) ok(b, gpuhal_cmd_barrier(cb), "barrier");
  }
  ok(b, gpuhal_command_buffer_end(cb), "end");
  return cb;
}

/* 1. stream-mode dispatch vs cuLaunchKernel */
static void bench_stream_dispatch(bench* b) {
  gpuhal_command_buffer_t* cb = record(b, GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, 0, NULL);
  double t0, ours = 1e30, raw = 1e30;
  unsigned long long us = 0;
  void* params[1];
  int r, i;
  if (!cb) return;
  execute(b, cb, NULL, 1); /* warm */
  params[0] = &us;
  for (r = 0; r < b->repeats / 5 + 3; ++r) {
    t0 = now_us();
    execute(b, cb, NULL, 1);
    ours = GPUHAL__MIN(ours, (now_us() - t0) / b->n);
    raw_enter(b);
    t0 = now_us();
    for (i = 0; i < b->n; ++i)
      ok_cu(b, b->device->cu->cuLaunchKernel(b->spin->function, 1, 1, 1, 32, 1, 1, 0, b->raw_stream, params, NULL),
            "cuLaunchKernel");
    ok_cu(b, b->device->cu->cuStreamSynchronize(b->raw_stream), "cuStreamSynchronize");
    raw = GPUHAL__MIN(raw, (now_us() - t0) / b->n);
    raw_leave(b);
  }
  report("1 stream dispatch, us/dispatch (best)", ours, raw, 1.1);
  gpuhal_command_buffer_release(cb);
}

/* 2. graph recording per dispatch vs cuGraphAddKernelNode */
static void raw_graph_record(bench* b, double* total_us, double* add_us) {
  unsigned long long us = 0;
  void* params[1];
  CUgraph g = NULL;
  CUgraphExec e = NULL;
  CUDA_KERNEL_NODE_PARAMS p;
  double t0, t1;
  int i;
  params[0] = &us;
  raw_enter(b);
  memset(&p, 0, sizeof(p));
  p.func = b->spin->function;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 32, p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = params;
  t0 = now_us();
  ok_cu(b, b->device->cu->cuGraphCreate(&g, 0), "cuGraphCreate");
  for (i = 0; i < b->n; ++i) {
    CUgraphNode node;
    ok_cu(b, b->device->cu->cuGraphAddKernelNode(&node, g, NULL, 0, &p), "cuGraphAddKernelNode");
  }
  t1 = now_us();
  ok_cu(b, b->device->cu->cuGraphInstantiateWithFlags(&e, g, 0), "cuGraphInstantiate");
  *total_us = GPUHAL__MIN(*total_us, (now_us() - t0) / b->n);
  *add_us = GPUHAL__MIN(*add_us, (t1 - t0) / b->n);
  b->device->cu->cuGraphExecDestroy(e);
  b->device->cu->cuGraphDestroy(g);
  raw_leave(b);
}

static void gpuhal_graph_record(bench* b, double* total_us, double* record_us) {
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t arg = gpuhal_arg_u64(0);
  double t0, t1;
  int i;
  t0 = now_us();
  ok(b, gpuhal_command_buffer_create(b->device, GPUHAL_COMMAND_BUFFER_GRAPH, 0, &cb), "create");
  ok(b, gpuhal_command_buffer_begin(cb), "begin");
  for (i = 0; i < b->n; ++i)
    ok(b, gpuhal_cmd_dispatch(cb, b->spin, gpuhal_dim3(1, 1, 1), gpuhal_dim3(32, 1, 1), 0, 1, &arg), "dispatch");
  t1 = now_us();
  ok(b, gpuhal_command_buffer_end(cb), "end");
  *total_us = GPUHAL__MIN(*total_us, (now_us() - t0) / b->n);
  *record_us = GPUHAL__MIN(*record_us, (t1 - t0) / b->n);
  gpuhal_command_buffer_release(cb);
}

static void bench_graph_record(bench* b) {
  double ours = 1e30, raw = 1e30, ours_record = 1e30, raw_add = 1e30;
  int r;
  for (r = 0; r < 10; ++r) {
    /* Alternate which side goes first, so neither always runs on a warmer driver. */
    if (r & 1) raw_graph_record(b, &raw, &raw_add);
    gpuhal_graph_record(b, &ours, &ours_record);
    if (!(r & 1)) raw_graph_record(b, &raw, &raw_add);
  }
  report("2 graph record+end vs add+instantiate, us/node", ours, raw, 1.2);
  report("2a  record only (nodes built at end) vs add", ours_record, raw_add, 0);
}

/* 3. and 4. replay */
static void bench_replay(bench* b) {
  gpuhal_buffer_t* bufs[2] = {NULL, NULL};
  gpuhal_command_buffer_t* cb;
  gpuhal_command_buffer_t* cb_slot;
  double t0, ours = 1e30, raw = 1e30, ours_pipe, raw_pipe, rebound = 1e30, rebound_pipe;
  gpuhal_binding_table_t tables[2];
  int r;
  ok(b, gpuhal_buffer_allocate(b->device, GPUHAL_MEMORY_DEVICE, 256, &bufs[0]), "alloc");
  ok(b, gpuhal_buffer_allocate(b->device, GPUHAL_MEMORY_DEVICE, 256, &bufs[1]), "alloc");
  cb = record(b, GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_REUSABLE, 1, 0, bufs[0]);
  cb_slot = record(b, GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_REUSABLE, 1, 1, NULL);
  if (!cb || !cb_slot || b->failures) return;
  tables[0].count = tables[1].count = 1;
  tables[0].buffers = &bufs[0];
  tables[1].buffers = &bufs[1];
  tables[0].offsets = tables[1].offsets = NULL;
  execute(b, cb, NULL, 1);
  execute(b, cb_slot, &tables[0], 1);
  for (r = 0; r < b->repeats; ++r) {
    t0 = now_us();
    execute(b, cb, NULL, 1);
    ours = GPUHAL__MIN(ours, now_us() - t0);
    raw_enter(b);
    t0 = now_us();
    ok_cu(b, b->device->cu->cuGraphLaunch(cb->exec, b->raw_stream), "cuGraphLaunch");
    ok_cu(b, b->device->cu->cuStreamSynchronize(b->raw_stream), "cuStreamSynchronize");
    raw = GPUHAL__MIN(raw, now_us() - t0);
    raw_leave(b);
    t0 = now_us();
    execute(b, cb_slot, &tables[r & 1], 1);
    rebound = GPUHAL__MIN(rebound, now_us() - t0);
  }
  report("3 graph replay (N-node chain), us/execute", ours, raw, 1.05);
  /* pipelined */
  t0 = now_us();
  for (r = 0; r < b->repeats; ++r) execute(b, cb, NULL, 0);
  wait_last(b);
  ours_pipe = (now_us() - t0) / b->repeats;
  raw_enter(b);
  t0 = now_us();
  for (r = 0; r < b->repeats; ++r) ok_cu(b, b->device->cu->cuGraphLaunch(cb->exec, b->raw_stream), "cuGraphLaunch");
  ok_cu(b, b->device->cu->cuStreamSynchronize(b->raw_stream), "cuStreamSynchronize");
  raw_pipe = (now_us() - t0) / b->repeats;
  raw_leave(b);
  report("3a graph replay pipelined, us/execute", ours_pipe, raw_pipe, 1.05);
  t0 = now_us();
  for (r = 0; r < b->repeats; ++r) execute(b, cb_slot, &tables[r & 1], 0);
  wait_last(b);
  rebound_pipe = (now_us() - t0) / b->repeats;
  report("4 replay, table rebound each time, us/exec", rebound, ours, 0);
  report("4a  pipelined, vs static replay pipelined", rebound_pipe, ours_pipe, 0);
  printf("   rebinding cost: %.3f us per execute, %.3f us per patched node (N = %d)\n", rebound_pipe - ours_pipe,
         (rebound_pipe - ours_pipe) / b->n, b->n);
  gpuhal_command_buffer_release(cb);
  gpuhal_command_buffer_release(cb_slot);
  gpuhal_buffer_release(bufs[0]);
  gpuhal_buffer_release(bufs[1]);
}

int main(int argc, char** argv) {
  bench b;
  memset(&b, 0, sizeof(b));
  b.n = argc > 1 ? atoi(argv[1]) : 1000;
  b.repeats = argc > 2 ? atoi(argv[2]) : 50;
  if (b.n <= 0 || b.repeats <= 0) return 2;
  if (!ok(&b, gpuhal_driver_create(NULL, &b.driver), "driver") ||
      !ok(&b, gpuhal_device_create(b.driver, 0, NULL, &b.device), "device") ||
      !ok(&b, load(&b, "spin_us", &b.exe, &b.spin), "spin_us") ||
      !ok(&b, load(&b, "fill_u32", &b.exe2, &b.fill), "fill_u32") ||
      !ok(&b, gpuhal_semaphore_create(b.driver, 0, &b.sem), "semaphore"))
    return 1;
  raw_enter(&b);
  ok_cu(&b, b.device->cu->cuStreamCreate(&b.raw_stream, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");
  raw_leave(&b);
  printf("bench_command_buffer: %s, N = %d dispatches, %d repeats\n", b.device->info.name, b.n, b.repeats);
  printf("%-44s %10s %10s %8s %7s\n", "case", "gpuhal", "raw", "ratio", "target");
  bench_stream_dispatch(&b);
  bench_graph_record(&b);
  bench_replay(&b);
  ok(&b, gpuhal_device_wait_idle(b.device, gpuhal_timeout_infinite()), "wait_idle");
  raw_enter(&b);
  b.device->cu->cuStreamDestroy(b.raw_stream);
  raw_leave(&b);
  gpuhal_semaphore_release(b.sem);
  gpuhal_executable_release(b.exe);
  gpuhal_executable_release(b.exe2);
  gpuhal_device_release(b.device);
  gpuhal_driver_release(b.driver);
  return b.failures ? 1 : 0;
}
