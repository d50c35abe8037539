/* bench_tensor_map - tensor map (TMA) dispatches against the raw driver API, same work, same
 * run.
 *
 *   bench_tensor_map [executes] [repeats]     (defaults 1000 and 20; tiny on softcuda)
 *
 * The tma_tile_copy kernel (tests/kernels) over a 100 x 37 u32 tensor (20 blocks), a GRAPH
 * command buffer executed `executes` times back to back and waited for once:
 *
 * 1. map over a buffer: gpuhal (the map encoded at the first execute, reused after)
 *      vs cuGraphLaunch of a kernel node holding a map encoded once            target <= 1.05x
 * 2. map over a binding slot bound to one of two tensors in turn: gpuhal (encoded and the
 *    node patched at every execute)
 *      vs cuTensorMapEncodeTiled + cuGraphExecKernelNodeSetParams + cuGraphLaunch
 *                                                                                target <= 1.05x
 * 0. the control: the map encoded by the caller once and passed as 128 plain bytes
 *    (gpuhal_arg_bytes), so gpuhal's own execute cost (its semaphore signal at every
 *    execute, which the raw side does not do) is measured apart from the maps': cases 1
 *    and 2 are also given against it.
 *
 * Reported per execute: the median of `repeats` runs (and the best) and gpuhal / raw. The
 * copy's result is checked after every run. Timings mean something only on a GPU
 * (compute capability 9.0+). */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"
#include "test_util.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>

#define BT_MAX_REPEATS 200
#define BT_W 100u
#define BT_H 37u
#define BT_PITCH 112u

typedef struct bench {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_kernel_t* copy;
  gpuhal_buffer_t* src[2];
  gpuhal_buffer_t* out;
  gpuhal_semaphore_t* sem;
  uint64_t value;
  CUstream raw_stream;
  gpuhal_tensor_map_t map;
  int executes, repeats, failures;
} bench;

static double now_us(void) { return (double)gpuhal_now_ns() / 1000.0; }

static int ok(bench* b, gpuhal_status_t s, const char* what) {
  return bench_ok("bench_tensor_map", &b->failures, s, what);
}
static int ok_cu(bench* b, CUresult r, const char* what) {
  return bench_ok_cu("bench_tensor_map", &b->failures, r, what);
}

/* bench_median() sorts: afterwards [0] is the best. */
static void report(const char* name, double* ours, double* raw, int n, double target) {
  double mo = bench_median(ours, n), mr = bench_median(raw, n), ratio = mr > 0 ? mo / mr : 0.0;
  printf("%-44s %9.3f %9.3f %9.3f %9.3f %7.2fx %6.2fx %s\n", name, mo, mr, ours[0], raw[0], ratio, target,
         ratio <= target ? "" : "(over target)");
  fflush(stdout);
}

/* out must hold src[which] + 1 (src[k] holds (k + 1) * 100000 + y * 1000 + x). */
static void check(bench* b, int which, const char* what) {
  static unsigned host[BT_W * BT_H];
  unsigned i;
  if (!ok(b, gpuhal_buffer_read(b->out, 0, host, sizeof(host)), "read")) return;
  for (i = 0; i < BT_W * BT_H; ++i)
    if (host[i] != (unsigned)(which + 1) * 100000u + (i / BT_W) * 1000u + i % BT_W + 1u) {
      fprintf(stderr, "bench_tensor_map: %s: element %u is %u\n", what, i, host[i]);
      b->failures++;
      return;
    }
}

/* The raw map of src[which] (64-byte aligned: the driver checks). */
typedef struct raw_map {
  CUtensorMap* map;
  unsigned char storage[sizeof(CUtensorMap) + 64];
} raw_map;
static void raw_encode(bench* b, raw_map* m, int which);
static void raw_enter(bench* b);
static void raw_leave(bench* b);

/* mode 0: the map as plain bytes; 1: over a buffer; 2: over a slot. */
static gpuhal_command_buffer_t* record(bench* b, int mode) {
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t args[4];
  raw_map m;
  if (!ok(b, gpuhal_command_buffer_create(b->device, GPUHAL_COMMAND_BUFFER_REUSABLE, 1, &cb), "create")) return NULL;
  ok(b, gpuhal_command_buffer_begin(cb), "begin");
  if (mode == 0) {
    raw_enter(b);
    raw_encode(b, &m, 0);
    raw_leave(b);
    args[0] = gpuhal_arg_bytes(m.map, (uint32_t)sizeof(CUtensorMap));
  } else {
    args[0] = gpuhal_arg_tensor_map(mode == 2 ? gpuhal_arg_slot(0, 0) : gpuhal_arg_buffer(b->src[0], 0), &b->map);
  }
  args[1] = gpuhal_arg_buffer(b->out, 0);
  args[2] = gpuhal_arg_u32(BT_W);
  args[3] = gpuhal_arg_u32(BT_H);
  ok(b, gpuhal_cmd_dispatch(cb, b->copy, gpuhal_dim3(4, 5, 1), gpuhal_dim3(128, 1, 1), 0, 4, args), "dispatch");
  ok(b, gpuhal_command_buffer_end(cb), "end");
  return cb;
}

/* `executes` executes (slot: alternating the two tensors), one wait; us per execute. */
static double run_gpuhal(bench* b, gpuhal_command_buffer_t* cb, int slot) {
  gpuhal_binding_table_t table;
  double t0, t;
  int i;
  table.count = 1;
  table.offsets = NULL;
  t0 = now_us();
  for (i = 0; i < b->executes; ++i) {
    uint64_t v = ++b->value;
    table.buffers = &b->src[i % 2];
    ok(b,
       gpuhal_queue_execute(b->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&b->sem, &v), cb,
                            slot ? &table : NULL),
       "queue_execute");
  }
  ok(b, gpuhal_semaphore_wait(b->sem, b->value, gpuhal_timeout_infinite()), "semaphore_wait");
  t = (now_us() - t0) / b->executes;
  check(b, slot ? (b->executes - 1) % 2 : 0, "gpuhal");
  return t;
}

static void raw_enter(bench* b) { b->device->cu->cuCtxPushCurrent(b->device->context); }
static void raw_leave(bench* b) {
  CUcontext popped;
  b->device->cu->cuCtxPopCurrent(&popped);
}

static void raw_encode(bench* b, raw_map* m, int which) {
  cuuint64_t dims[2] = {BT_W, BT_H}, strides[1] = {BT_PITCH * 4u};
  cuuint32_t box[2] = {32, 8}, steps[2] = {1, 1};
  m->map = (CUtensorMap*)(void*)(m->storage + ((64u - (uintptr_t)m->storage % 64u) % 64u));
  ok_cu(b,
        b->device->cu->cuTensorMapEncodeTiled(m->map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2,
                                              (void*)(uintptr_t)b->src[which]->address, dims, strides, box, steps,
                                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                              CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled");
}

/* The raw side: a one-node graph, launched `executes` times (slot: re-encoded and patched
 * before each launch, alternating the tensors), one sync; us per launch. */
static double run_raw(bench* b, int slot) {
  const gpuhal__cuda_symbols_t* cu = b->device->cu;
  CUdeviceptr out = (CUdeviceptr)b->out->address;
  unsigned width = BT_W, height = BT_H;
  CUDA_KERNEL_NODE_PARAMS p;
  CUgraph g = NULL;
  CUgraphExec e = NULL;
  CUgraphNode node;
  raw_map m;
  void* params[4];
  double t0, t;
  int i;
  raw_enter(b);
  raw_encode(b, &m, 0);
  memset(&p, 0, sizeof(p));
  p.func = b->copy->function;
  p.gridDimX = 4, p.gridDimY = 5, p.gridDimZ = 1;
  p.blockDimX = 128, p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = params;
  params[0] = m.map;
  params[1] = &out;
  params[2] = &width;
  params[3] = &height;
  ok_cu(b, cu->cuGraphCreate(&g, 0), "cuGraphCreate");
  ok_cu(b, cu->cuGraphAddKernelNode(&node, g, NULL, 0, &p), "cuGraphAddKernelNode");
  ok_cu(b, cu->cuGraphInstantiateWithFlags(&e, g, 0), "cuGraphInstantiate");
  t0 = now_us();
  for (i = 0; i < b->executes; ++i) {
    if (slot) {
      raw_encode(b, &m, i % 2);
      params[0] = m.map;
      ok_cu(b, cu->cuGraphExecKernelNodeSetParams(e, node, &p), "cuGraphExecKernelNodeSetParams");
    }
    ok_cu(b, cu->cuGraphLaunch(e, b->raw_stream), "cuGraphLaunch");
  }
  ok_cu(b, cu->cuStreamSynchronize(b->raw_stream), "cuStreamSynchronize");
  t = (now_us() - t0) / b->executes;
  cu->cuGraphExecDestroy(e);
  cu->cuGraphDestroy(g);
  raw_leave(b);
  check(b, slot ? (b->executes - 1) % 2 : 0, "raw");
  return t;
}

/* One case; returns gpuhal's median. */
static double run_case(bench* b, int mode) {
  static const char* const names[3] = {"0 GRAPH, map as bytes (control), us/execute",
                                       "1 GRAPH, map over a buffer, us/execute",
                                       "2 GRAPH, map over a rebound slot, us/execute"};
  gpuhal_command_buffer_t* cb = record(b, mode);
  double ours[BT_MAX_REPEATS], raw[BT_MAX_REPEATS], m;
  int r, slot = mode == 2;
  if (!cb) return 0;
  for (r = -1; r < b->repeats; ++r) {
    double o = run_gpuhal(b, cb, slot), w = run_raw(b, slot);
    if (r >= 0) ours[r] = o, raw[r] = w;
  }
  report(names[mode], ours, raw, b->repeats, 1.05);
  m = bench_median(ours, b->repeats);
  gpuhal_command_buffer_release(cb);
  return m;
}

int main(int argc, char** argv) {
  bench b;
  gpuhal_device_info_t info;
  static unsigned host[BT_PITCH * BT_H];
  unsigned x, y;
  int count = 0, k;
  memset(&b, 0, sizeof(b));
  b.executes = argc > 1 ? atoi(argv[1]) : (tu_softcuda() ? 10 : 1000);
  b.repeats = argc > 2 ? atoi(argv[2]) : (tu_softcuda() ? 2 : 20);
  if (b.executes < 2 || b.repeats < 1 || b.repeats > BT_MAX_REPEATS) {
    fprintf(stderr, "usage: bench_tensor_map [executes >= 2] [repeats 1..%d]\n", BT_MAX_REPEATS);
    return 2;
  }
  if (!ok(&b, gpuhal_driver_create(NULL, &b.driver), "driver_create")) return 1;
  if (!ok(&b, gpuhal_driver_device_count(b.driver, &count), "device_count") || count == 0) {
    fprintf(stderr, "bench_tensor_map: no device\n");
    gpuhal_driver_release(b.driver);
    return 77;
  }
  if (!ok(&b, gpuhal_device_create(b.driver, 0, NULL, &b.device), "device_create")) return 1;
  ok(&b, gpuhal_device_info(b.device, &info), "device_info");
  if (info.compute_capability_major < 9 || !b.device->cu->cuTensorMapEncodeTiled) {
    fprintf(stderr, "bench_tensor_map: needs compute capability 9.0 and cuTensorMapEncodeTiled\n");
    gpuhal_device_release(b.device);
    gpuhal_driver_release(b.driver);
    return 77;
  }
  ok(&b, tu_load_kernel(b.device, "tma_tile_copy", &b.exe, &b.copy), "load");
  for (k = 0; k < 2; ++k) {
    for (y = 0; y < BT_H; ++y)
      for (x = 0; x < BT_PITCH; ++x) host[y * BT_PITCH + x] = (unsigned)(k + 1) * 100000u + y * 1000u + x;
    ok(&b, gpuhal_buffer_allocate(b.device, GPUHAL_MEMORY_DEVICE, sizeof(host), &b.src[k]), "allocate");
    ok(&b, gpuhal_buffer_write(b.src[k], 0, host, sizeof(host)), "write");
  }
  ok(&b, gpuhal_buffer_allocate(b.device, GPUHAL_MEMORY_DEVICE, BT_W * BT_H * 4u, &b.out), "allocate");
  ok(&b, gpuhal_semaphore_create(b.driver, 0, &b.sem), "semaphore");
  b.map.type = GPUHAL_TENSOR_U32;
  b.map.rank = 2;
  b.map.dims[0] = BT_W;
  b.map.dims[1] = BT_H;
  b.map.strides[0] = BT_PITCH * 4u;
  b.map.box[0] = 32;
  b.map.box[1] = 8;
  raw_enter(&b);
  ok_cu(&b, b.device->cu->cuStreamCreate(&b.raw_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  raw_leave(&b);
  if (b.failures) return 1;

  printf("bench_tensor_map: %s, %d executes, %d repeats\n", info.name, b.executes, b.repeats);
  printf("%-44s %9s %9s %9s %9s %8s %7s\n", "case", "gpuhal", "raw", "best", "best raw", "ratio", "target");
  {
    double control = run_case(&b, 0), buffer = run_case(&b, 1), slot = run_case(&b, 2);
    printf("  against the control: map over a buffer %.2fx, over a rebound slot %.2fx\n",
           control > 0 ? buffer / control : 0.0, control > 0 ? slot / control : 0.0);
  }

  raw_enter(&b);
  b.device->cu->cuStreamDestroy(b.raw_stream);
  raw_leave(&b);
  gpuhal_semaphore_release(b.sem);
  for (k = 0; k < 2; ++k) gpuhal_buffer_release(b.src[k]);
  gpuhal_buffer_release(b.out);
  gpuhal_executable_release(b.exe);
  gpuhal_device_release(b.device);
  gpuhal_driver_release(b.driver);
  if (b.failures) {
    fprintf(stderr, "bench_tensor_map: %d failure(s)\n", b.failures);
    return 1;
  }
  return 0;
}
