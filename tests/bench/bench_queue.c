/* bench_queue - the queue against the raw driver API, same work, same process run.
 *
 *   bench_queue [iterations]      (default 2000; use a handful on softcuda)
 *
 * 1. host round trip: one tiny dispatch that signals, host waits
 *      vs cuLaunchKernel + cuEventRecord + cuEventSynchronize              target <= 1.5x
 * 2. dependent chain, per hop: each submission waits on the previous one's value,
 *    alternating two queues
 *      vs a two-stream cuEventRecord / cuStreamWaitEvent ping-pong         target <= 1.3x
 * 3. queue_alloca + queue_dealloca pair
 *      vs cuMemAllocFromPoolAsync + cuMemFreeAsync                        target <= 2x
 * 4. submission throughput: queue_execute of a recorded graph with one wait and one signal
 *      vs cuGraphLaunch + cuEventRecord                                    target <= 1.5x
 *    (needs command buffers: compiled in with GPUHAL_BENCH_COMMAND_BUFFERS=1)
 *
 * The tiny dispatch is spin_us(0) from tests/kernels. Numbers mean something only on a real
 * GPU; on softcuda this is a smoke test. */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

/* The test helpers are shared with tests that use more of them. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "test_util.h"
#include "test_queue_util.h"

/* Benchmark 4 uses the command buffer API (src/command_buffer.h, module_cache.h). */
#ifndef GPUHAL_BENCH_COMMAND_BUFFERS
#define GPUHAL_BENCH_COMMAND_BUFFERS 0
#endif

typedef struct bench_s {
  qt_fixture_t f;
  gpuhal_semaphore_t* s;
  uint64_t value; /* the timeline's last value */
  CUstream raw_streams[2];
  CUevent raw_events[2];
  int iterations;
  int failures;
} bench_t;

static double us_per(int64_t start_ns, int n) { return (double)(gpuhal_now_ns() - start_ns) / 1000.0 / (double)n; }

static void report(const char* name, double gpuhal_us, double raw_us, double target) {
  double ratio = raw_us > 0 ? gpuhal_us / raw_us : 0.0;
  printf("%-34s %10.2f %10.2f %7.2fx %7.2fx %s\n", name, gpuhal_us, raw_us, ratio, target,
         ratio <= target ? "" : "(over target)");
  fflush(stdout);
}

static int check(bench_t* b, gpuhal_status_t s, const char* what) {
  if (!s) return 1;
  fprintf(stderr, "bench_queue: %s: %s\n", what, gpuhal_status_message(s));
  gpuhal_status_free(s);
  b->failures++;
  return 0;
}
static int check_cu(bench_t* b, CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return 1;
  fprintf(stderr, "bench_queue: %s: CUresult %d\n", what, (int)r);
  b->failures++;
  return 0;
}

static gpuhal_semaphore_list_t one(gpuhal_semaphore_t** s, uint64_t* v) { return gpuhal_semaphore_list_one(s, v); }

/* ---- 1. round trip ---- */
static double gpuhal_round_trip(bench_t* b, int n) {
  qt_spin_t spin;
  int64_t start;
  int i;
  spin.fixture = &b->f;
  spin.first_us = spin.rest_us = 0;
  spin.launched = 0;
  start = gpuhal_now_ns();
  for (i = 0; i < n; ++i) {
    uint64_t next = ++b->value;
    if (!check(b, qt_submit(b->f.device, 0, gpuhal_semaphore_list_empty(), one(&b->s, &next), &qt_spin_ops,
                                       &spin),
               "round trip submit"))
      return 0;
    if (!check(b, gpuhal_semaphore_wait(b->s, next, gpuhal_timeout_infinite()), "round trip wait")) return 0;
  }
  return us_per(start, n);
}

static double raw_round_trip(bench_t* b, int n) {
  const gpuhal__cuda_symbols_t* cu = b->f.device->cu;
  unsigned long long us = 0;
  void* params[1];
  int64_t start;
  int i;
  params[0] = &us;
  start = gpuhal_now_ns();
  for (i = 0; i < n; ++i) {
    if (!check_cu(b, cu->cuLaunchKernel(b->f.spin, 1, 1, 1, 1, 1, 1, 0, b->raw_streams[0], params, NULL), "launch") ||
        !check_cu(b, cu->cuEventRecord(b->raw_events[0], b->raw_streams[0]), "record") ||
        !check_cu(b, cu->cuEventSynchronize(b->raw_events[0]), "synchronize"))
      return 0;
  }
  return us_per(start, n);
}

/* ---- 2. dependent chain ---- */
static double gpuhal_chain(bench_t* b, int n) {
  qt_spin_t spin;
  int64_t start;
  uint64_t first = b->value;
  int i;
  spin.fixture = &b->f;
  spin.first_us = spin.rest_us = 0;
  spin.launched = 0;
  start = gpuhal_now_ns();
  for (i = 0; i < n; ++i) {
    uint64_t prev = first + (uint64_t)i, next = prev + 1;
    if (!check(b, qt_submit(b->f.device, (uint32_t)(i % 2), one(&b->s, &prev), one(&b->s, &next),
                                       &qt_spin_ops, &spin),
               "chain submit"))
      return 0;
  }
  b->value = first + (uint64_t)n;
  if (!check(b, gpuhal_semaphore_wait(b->s, b->value, gpuhal_timeout_infinite()), "chain wait")) return 0;
  return us_per(start, n);
}

static double raw_chain(bench_t* b, int n) {
  const gpuhal__cuda_symbols_t* cu = b->f.device->cu;
  unsigned long long us = 0;
  void* params[1];
  int64_t start;
  int i;
  params[0] = &us;
  start = gpuhal_now_ns();
  for (i = 0; i < n; ++i) {
    CUstream stream = b->raw_streams[i % 2];
    if (i > 0 && !check_cu(b, cu->cuStreamWaitEvent(stream, b->raw_events[(i - 1) % 2], 0), "wait event")) return 0;
    if (!check_cu(b, cu->cuLaunchKernel(b->f.spin, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL), "launch") ||
        !check_cu(b, cu->cuEventRecord(b->raw_events[i % 2], stream), "record"))
      return 0;
  }
  if (!check_cu(b, cu->cuEventSynchronize(b->raw_events[(n - 1) % 2]), "synchronize")) return 0;
  return us_per(start, n);
}

/* ---- 3. alloca / dealloca ---- */
enum { BENCH_ALLOCA_BYTES = 1 << 20 };
static double gpuhal_alloca(bench_t* b, int n) {
  int64_t start = gpuhal_now_ns();
  int i;
  for (i = 0; i < n; ++i) {
    uint64_t prev = b->value, mid = prev + 1, next = prev + 2;
    gpuhal_buffer_t* buffer = NULL;
    if (!check(b, gpuhal_queue_alloca(b->f.device, 0, one(&b->s, &prev), one(&b->s, &mid), BENCH_ALLOCA_BYTES, &buffer),
               "alloca"))
      return 0;
    if (!check(b, gpuhal_queue_dealloca(b->f.device, 0, one(&b->s, &mid), one(&b->s, &next), buffer), "dealloca"))
      return 0;
    gpuhal_buffer_release(buffer);
    b->value = next;
  }
  if (!check(b, gpuhal_semaphore_wait(b->s, b->value, gpuhal_timeout_infinite()), "alloca wait")) return 0;
  return us_per(start, n);
}

static double raw_alloca(bench_t* b, int n) {
  const gpuhal__cuda_symbols_t* cu = b->f.device->cu;
  CUmemoryPool pool = b->f.device->memory ? b->f.device->memory->pool : NULL;
  int64_t start;
  int i;
  if (!pool || !cu->cuMemAllocFromPoolAsync || !cu->cuMemFreeAsync) return 0;
  start = gpuhal_now_ns();
  for (i = 0; i < n; ++i) {
    CUdeviceptr p = 0;
    if (!check_cu(b, cu->cuMemAllocFromPoolAsync(&p, BENCH_ALLOCA_BYTES, pool, b->raw_streams[0]), "alloc async") ||
        !check_cu(b, cu->cuMemFreeAsync(p, b->raw_streams[0]), "free async"))
      return 0;
  }
  if (!check_cu(b, cu->cuStreamSynchronize(b->raw_streams[0]), "synchronize")) return 0;
  return us_per(start, n);
}

/* ---- 4. graph execute ---- */
#if GPUHAL_BENCH_COMMAND_BUFFERS
typedef struct bench_graph_s {
  gpuhal_executable_t* executable;
  gpuhal_kernel_t* kernel;
  gpuhal_command_buffer_t* command_buffer;
  CUgraphExec raw_exec;
} bench_graph_t;

static int bench_graph_setup(bench_t* b, bench_graph_t* g) {
  char path[1024];
  char* image;
  gpuhal_arg_t arg = gpuhal_arg_u64(0);
  void* graph = NULL;
  memset(g, 0, sizeof(*g));
  snprintf(path, sizeof(path), "%s/spin_us.ptx", GPUHAL_KERNELS_DIR);
  image = qt_read_file(path);
  if (!image) return 0;
  if (!check(b, gpuhal_executable_load(b->f.device, image, strlen(image) + 1, &g->executable), "executable_load") ||
      !check(b, gpuhal_executable_kernel(g->executable, "spin_us", &g->kernel), "executable_kernel") ||
      !check(b, gpuhal_command_buffer_create(b->f.device, GPUHAL_COMMAND_BUFFER_REUSABLE | GPUHAL_COMMAND_BUFFER_GRAPH, 0,
                                             &g->command_buffer),
             "command_buffer_create") ||
      !check(b, gpuhal_command_buffer_begin(g->command_buffer), "begin") ||
      !check(b, gpuhal_cmd_dispatch(g->command_buffer, g->kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg),
             "dispatch") ||
      !check(b, gpuhal_command_buffer_end(g->command_buffer), "end") ||
      !check(b, gpuhal_command_buffer_native_graph(g->command_buffer, &graph), "native_graph") ||
      !check_cu(b, b->f.device->cu->cuGraphInstantiateWithFlags(&g->raw_exec, (CUgraph)graph, 0), "instantiate")) {
    free(image);
    return 0;
  }
  free(image);
  return 1;
}

static void bench_graph_teardown(bench_t* b, bench_graph_t* g) {
  if (g->raw_exec) b->f.device->cu->cuGraphExecDestroy(g->raw_exec);
  gpuhal_command_buffer_release(g->command_buffer);
  gpuhal_executable_release(g->executable);
}

static double gpuhal_graph(bench_t* b, bench_graph_t* g, int n) {
  int64_t start = gpuhal_now_ns();
  int i;
  for (i = 0; i < n; ++i) {
    uint64_t prev = b->value, next = prev + 1;
    if (!check(b, gpuhal_queue_execute(b->f.device, 0, one(&b->s, &prev), one(&b->s, &next), g->command_buffer, NULL),
               "execute"))
      return 0;
    b->value = next;
  }
  if (!check(b, gpuhal_semaphore_wait(b->s, b->value, gpuhal_timeout_infinite()), "execute wait")) return 0;
  return us_per(start, n);
}

static double raw_graph(bench_t* b, bench_graph_t* g, int n) {
  const gpuhal__cuda_symbols_t* cu = b->f.device->cu;
  int64_t start = gpuhal_now_ns();
  int i;
  for (i = 0; i < n; ++i) {
    if (!check_cu(b, cu->cuGraphLaunch(g->raw_exec, b->raw_streams[0]), "graph launch") ||
        !check_cu(b, cu->cuEventRecord(b->raw_events[0], b->raw_streams[0]), "record"))
      return 0;
  }
  if (!check_cu(b, cu->cuStreamSynchronize(b->raw_streams[0]), "synchronize")) return 0;
  return us_per(start, n);
}
#endif

/* Runs each side once to warm up, then measures; gpuhal and raw alternate. */
int main(int argc, char** argv) {
  bench_t b;
  gpuhal__context_scope_t scope;
  const gpuhal__cuda_symbols_t* cu;
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  int warm, i;
  if (n < 1) n = 1;
  warm = n / 10 + 1;
  memset(&b, 0, sizeof(b));
  if (!qt_open(&b.f, 2, NULL)) return 77;
  if (!qt_kernels_load(&b.f)) {
    fprintf(stderr, "bench_queue: cannot load the test kernels from %s\n", GPUHAL_KERNELS_DIR);
    qt_close(&b.f);
    return 1;
  }
  cu = b.f.device->cu;
  if (!check(&b, gpuhal_semaphore_create(b.f.driver, 0, &b.s), "semaphore")) return 1;
  /* The raw side runs on this thread with the device's context pushed, as a raw user would. */
  if (!check(&b, gpuhal__context_enter(b.f.device, &scope), "context")) return 1;
  for (i = 0; i < 2; ++i) {
    check_cu(&b, cu->cuStreamCreate(&b.raw_streams[i], CU_STREAM_NON_BLOCKING), "stream");
    check_cu(&b, cu->cuEventCreate(&b.raw_events[i], CU_EVENT_DISABLE_TIMING), "event");
  }
  printf("bench_queue: %d iterations on %s (%s)\n", n, b.f.device->info.name,
         tu_softcuda() ? "softcuda: the numbers mean nothing" : gpuhal_driver_cuda_library(b.f.driver));
  printf("%-34s %10s %10s %8s %8s\n", "case", "gpuhal us", "raw us", "ratio", "target");

  gpuhal_round_trip(&b, warm);
  raw_round_trip(&b, warm);
  {
    double g = gpuhal_round_trip(&b, n), r = raw_round_trip(&b, n);
    report("1 round trip (dispatch+wait)", g, r, 1.5);
  }
  gpuhal_chain(&b, warm);
  raw_chain(&b, warm);
  {
    double g = gpuhal_chain(&b, n), r = raw_chain(&b, n);
    report("2 dependent chain, per hop", g, r, 1.3);
  }
  gpuhal_alloca(&b, warm);
  raw_alloca(&b, warm);
  {
    double g = gpuhal_alloca(&b, n), r = raw_alloca(&b, n);
    if (r > 0) {
      report("3 alloca+dealloca pair", g, r, 2.0);
    } else {
      printf("%-34s %10.2f %10s (no stream-ordered pools on this device)\n", "3 alloca+dealloca pair", g, "-");
    }
  }
#if GPUHAL_BENCH_COMMAND_BUFFERS
  {
    bench_graph_t graph;
    if (bench_graph_setup(&b, &graph)) {
      double g, r;
      gpuhal_graph(&b, &graph, warm);
      raw_graph(&b, &graph, warm);
      g = gpuhal_graph(&b, &graph, n);
      r = raw_graph(&b, &graph, n);
      report("4 graph execute, 1 wait 1 signal", g, r, 1.5);
    }
    check(&b, gpuhal_device_wait_idle(b.f.device, gpuhal_timeout_infinite()), "idle");
    bench_graph_teardown(&b, &graph);
  }
#else
  printf("%-34s (compiled out: build with -DGPUHAL_BENCH_COMMAND_BUFFERS=1 once command buffers land)\n",
         "4 graph execute, 1 wait 1 signal");
#endif

  check(&b, gpuhal_device_wait_idle(b.f.device, gpuhal_timeout_infinite()), "idle");
  for (i = 0; i < 2; ++i) {
    cu->cuEventDestroy(b.raw_events[i]);
    cu->cuStreamDestroy(b.raw_streams[i]);
  }
  gpuhal__context_leave(b.f.device, &scope);
  gpuhal_semaphore_release(b.s);
  qt_close(&b.f);
  return b.failures ? 1 : 0;
}
