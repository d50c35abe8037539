/* bench_queue - the queue against the raw driver API, same work, same process run.
 *
 *   bench_queue [iterations] [repetitions] [diagnostics]
 *       (defaults 2000, 5, 1; use a handful of iterations on softcuda)
 *
 * Each case is warmed up with the full iteration count (the pools reach their steady
 * state), then measured `repetitions` times, gpuhal and raw alternating; the table gives the
 * medians (and the median of the per-repetition ratios). With diagnostics, each gpuhal case
 * runs once more with counting wrappers on the driver's function table and the table of
 * CUDA calls per operation (all threads) and the time spent inside them is printed.
 *
 * 1. host round trip: one tiny dispatch that signals, host waits
 *      vs cuLaunchKernel + cuEventRecord + cuEventSynchronize             target <= 1.05x
 * 2. dependent chain, per hop: each submission waits on the previous one's value,
 *    alternating two queues
 *      vs a two-stream cuEventRecord / cuStreamWaitEvent ping-pong         target <= 1.2x
 * 3. queue_alloca + queue_dealloca pair, each signalling a value the host can observe
 *      vs cuMemAllocFromPoolAsync + cuEventRecord + cuMemFreeAsync + cuEventRecord
 *      (the same CUDA work: a signal the host or another stream can wait on needs a recorded
 *      event)                                                              target <= 1.25x
 *    also shown against the bare cuMemAllocFromPoolAsync + cuMemFreeAsync (no signals)
 * 4. submission throughput: queue_execute of a recorded graph with one wait and one signal
 *      vs cuGraphLaunch + cuEventRecord                                    target <= 1.25x
 *    4b: the same against a raw loop that records a ring of 64 events in turn, as a
 *    timeline whose every value can be waited on needs one event per value (reported)
 *
 * Cases 5-7 execute a reusable STREAM command buffer of the tiny dispatch (one
 * cuLaunchKernel, as on their raw sides).
 * 5. host signal -> queued dispatch -> host sees its signal: execute(wait S, signal T) is
 *    queued ~200 us ahead; timed from gpuhal_semaphore_signal(S) to gpuhal_semaphore_wait(T)
 *    returning
 *      vs a stream parked on cuStreamWaitValue64 of a pinned device-mapped word, a launch
 *      and cuStreamWriteValue64 to another word; the host stores the first and spins on the
 *      second (GPUHAL_BENCH_HAVE_MEMOPS, on by default). gpuhal's side runs on the
 *      GPU-resident path where the device has it (GPUHAL_SEMAPHORE_MEMOPS=0: the event
 *      path)                                                              target <= 1.25x
 * 6. a host waiter that starts before the producer is submitted: a thread is blocked in
 *    gpuhal_semaphore_wait(T) when the dispatch reaching T is submitted; timed from the
 *    submit to the waiter waking. The waiter starts 50 us ahead, inside a wait's first
 *    200 us, in which it spins (as the raw side's cuEventSynchronize does); the submitting
 *    thread busy-waits until it submits, warm like the raw side's
 *      vs case 1's raw round trip                                          target <= 1.1x
 *    6b: the same with the waiter 2 ms ahead, asleep by then: the cost of waking a
 *    sleeping thread (reported, no target)
 * 7. dependent chain, every hop submitted before the one it waits on (reverse order), two
 *    queues, then the head released: per hop from the release to the last value
 *      vs case 2's two-stream event ping-pong (which includes its submissions)
 *                                                                          target <= 1.3x
 *
 * 8. polling with zero timeouts: case 1 with the host polling gpuhal_semaphore_wait(T,
 *    immediate) in a loop instead of blocking in the wait
 *      vs cuLaunchKernel + cuEventRecord + a cuEventQuery loop               target <= 1.1x
 * 9. a host call behind GPU work: execute(signal T), host_call(wait T, signal H) of a
 *    function that does nothing, host waits for H
 *      vs cuLaunchKernel + cuLaunchHostFunc of a function that raises a flag the host
 *      spins on                                                            (reported)
 * 10. a WAIT_ANY whose other entry nobody has signalled: execute(signal T), then
 *    gpuhal_semaphores_wait(ANY, {G at a value never signalled, T})
 *      vs case 1's raw round trip                                          (reported)
 *    (select it with '0' in the cases argument)
 * 11. a round trip beside a busy queue: case 1 on queue 0 while queue 1 runs one long
 *    dispatch (40 us per round trip, submitted before the timed loop, waited for after
 *    it): per-queue progress means queue 1's outstanding work costs queue 0 nothing
 *      vs case 1's raw round trip on one stream beside the same long launch on another
 *                                                                          target <= 1.1x
 *    (select it with 'a')
 *
 * BENCH_NO_CALLER_ISSUE=1 in the environment sets tuning.no_caller_issue: the worker
 * issues everything (RESULTS.md, "two ideas for case 4 that lose"); BENCH_HARVEST_MIN=n
 * sets tuning.harvest_min.
 *
 * The tiny dispatch is spin_us(0) from tests/kernels. Numbers mean something only on a real
 * GPU; on softcuda this is a smoke test. */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

/* The test helpers are shared with tests that use more of them. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "test_util.h"
#include "test_queue_util.h"

/* Case 5's raw side uses cuStreamWaitValue64 / cuStreamWriteValue64 /
 * cuMemHostGetDevicePointer from gpuhal's CUDA table; -DGPUHAL_BENCH_HAVE_MEMOPS=0 leaves it
 * out. */
#ifndef GPUHAL_BENCH_HAVE_MEMOPS
#define GPUHAL_BENCH_HAVE_MEMOPS 1
#endif

#define BENCH_RING 64

typedef struct bench_s {
  qt_fixture_t f;
  gpuhal_semaphore_t* s;
  gpuhal_semaphore_t* gate; /* cases 5 and 7: the host-signalled semaphore work waits on */
  uint64_t gate_value;
  gpuhal_semaphore_t* host; /* case 9: signalled by the host calls */
  uint64_t host_value;
  gpuhal_semaphore_t* busy; /* case 11: signalled by the busy queue's long dispatch */
  uint64_t busy_value;
  uint64_t value; /* the timeline's last value */
  CUstream raw_streams[2];
  CUevent raw_events[4];
  CUevent raw_ring[BENCH_RING]; /* case 4b */
  int iterations;
  int failures;
  long waiter_lead_us;         /* case 6: how long the waiter waits before the submit */
  struct bench_graph_s* graph; /* case 4 */
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

/* ---- 1. round trip, and 8. the same polled with zero-timeout waits ---- */
static int bench_wait_polling(bench_t* b, uint64_t value) {
  gpuhal_status_t st;
  while ((st = gpuhal_semaphore_wait(b->s, value, gpuhal_timeout_immediate())) != NULL) {
    if (gpuhal_status_code(st) != GPUHAL_STATUS_DEADLINE_EXCEEDED) return check(b, st, "poll round trip wait");
    gpuhal_status_free(st);
  }
  return 1;
}

static double gpuhal_round_trip_impl(bench_t* b, int n, int poll) {
  qt_spin_t spin;
  int64_t start;
  int i;
  spin.fixture = &b->f;
  spin.first_us = spin.rest_us = 0;
  spin.launched = 0;
  start = gpuhal_now_ns();
  for (i = 0; i < n; ++i) {
    uint64_t next = ++b->value;
    if (!check(b, qt_submit(b->f.device, 0, gpuhal_semaphore_list_empty(), one(&b->s, &next), &qt_spin_ops, &spin),
               "round trip submit"))
      return 0;
    if (poll ? !bench_wait_polling(b, next)
             : !check(b, gpuhal_semaphore_wait(b->s, next, gpuhal_timeout_infinite()), "round trip wait"))
      return 0;
  }
  return us_per(start, n);
}

static double raw_round_trip_impl(bench_t* b, int n, int poll) {
  const gpuhal__cuda_symbols_t* cu = b->f.device->cu;
  unsigned long long us = 0;
  void* params[1];
  int64_t start;
  int i;
  CUresult r;
  params[0] = &us;
  start = gpuhal_now_ns();
  for (i = 0; i < n; ++i) {
    if (!check_cu(b, cu->cuLaunchKernel(b->f.spin, 1, 1, 1, 1, 1, 1, 0, b->raw_streams[0], params, NULL), "launch") ||
        !check_cu(b, cu->cuEventRecord(b->raw_events[0], b->raw_streams[0]), "record"))
      return 0;
    if (poll) {
      while ((r = cu->cuEventQuery(b->raw_events[0])) == CUDA_ERROR_NOT_READY) {
      }
    } else {
      r = cu->cuEventSynchronize(b->raw_events[0]);
    }
    if (!check_cu(b, r, poll ? "query" : "synchronize")) return 0;
  }
  return us_per(start, n);
}

static double gpuhal_round_trip(bench_t* b, int n) { return gpuhal_round_trip_impl(b, n, 0); }
static double raw_round_trip(bench_t* b, int n) { return raw_round_trip_impl(b, n, 0); }
static double gpuhal_poll_round_trip(bench_t* b, int n) { return gpuhal_round_trip_impl(b, n, 1); }
static double raw_poll_round_trip(bench_t* b, int n) { return raw_round_trip_impl(b, n, 1); }

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
    if (!check(b, qt_submit(b->f.device, (uint32_t)(i % 2), one(&b->s, &prev), one(&b->s, &next), &qt_spin_ops, &spin),
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

/* The same CUDA work as a signalled alloca + dealloca pair: each signal is a recorded event. */
static double raw_alloca_signalled(bench_t* b, int n) {
  const gpuhal__cuda_symbols_t* cu = b->f.device->cu;
  CUmemoryPool pool = b->f.device->memory ? b->f.device->memory->pool : NULL;
  int64_t start;
  int i;
  if (!pool || !cu->cuMemAllocFromPoolAsync || !cu->cuMemFreeAsync) return 0;
  start = gpuhal_now_ns();
  for (i = 0; i < n; ++i) {
    CUdeviceptr p = 0;
    if (!check_cu(b, cu->cuMemAllocFromPoolAsync(&p, BENCH_ALLOCA_BYTES, pool, b->raw_streams[0]), "alloc async") ||
        !check_cu(b, cu->cuEventRecord(b->raw_events[2], b->raw_streams[0]), "record") ||
        !check_cu(b, cu->cuMemFreeAsync(p, b->raw_streams[0]), "free async") ||
        !check_cu(b, cu->cuEventRecord(b->raw_events[3], b->raw_streams[0]), "record"))
      return 0;
  }
  if (!check_cu(b, cu->cuEventSynchronize(b->raw_events[3]), "synchronize")) return 0;
  return us_per(start, n);
}

/* ---- 4. graph execute ---- */
typedef struct bench_graph_s {
  gpuhal_executable_t* executable;
  gpuhal_kernel_t* kernel;
  gpuhal_command_buffer_t* command_buffer;
  /* Cases 5-7: a reusable STREAM command buffer of the same dispatch, whose execute is one
   * cuLaunchKernel: the same work as their raw sides. */
  gpuhal_command_buffer_t* stream_cb;
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
      !check(b,
             gpuhal_command_buffer_create(b->f.device, GPUHAL_COMMAND_BUFFER_REUSABLE | GPUHAL_COMMAND_BUFFER_GRAPH, 0,
                                          &g->command_buffer),
             "command_buffer_create") ||
      !check(b, gpuhal_command_buffer_begin(g->command_buffer), "begin") ||
      !check(b,
             gpuhal_cmd_dispatch(g->command_buffer, g->kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg),
             "dispatch") ||
      !check(b, gpuhal_command_buffer_end(g->command_buffer), "end") ||
      !check(b,
             gpuhal_command_buffer_create(b->f.device, GPUHAL_COMMAND_BUFFER_REUSABLE | GPUHAL_COMMAND_BUFFER_STREAM, 0,
                                          &g->stream_cb),
             "command_buffer_create") ||
      !check(b, gpuhal_command_buffer_begin(g->stream_cb), "begin") ||
      !check(b, gpuhal_cmd_dispatch(g->stream_cb, g->kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg),
             "dispatch") ||
      !check(b, gpuhal_command_buffer_end(g->stream_cb), "end") ||
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
  gpuhal_command_buffer_release(g->stream_cb);
  gpuhal_executable_release(g->executable);
}

static double gpuhal_graph(bench_t* b, int n) {
  bench_graph_t* g = b->graph;
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

/* The raw side of case 4: each launch followed by a record of one of `ring` events in turn
 * (1: one event re-recorded; 4b: BENCH_RING). */
static double raw_graph_events(bench_t* b, int n, int ring) {
  const gpuhal__cuda_symbols_t* cu = b->f.device->cu;
  bench_graph_t* g = b->graph;
  int64_t start = gpuhal_now_ns();
  int i;
  for (i = 0; i < n; ++i) {
    CUevent e = ring > 1 ? b->raw_ring[i % ring] : b->raw_events[0];
    if (!check_cu(b, cu->cuGraphLaunch(g->raw_exec, b->raw_streams[0]), "graph launch") ||
        !check_cu(b, cu->cuEventRecord(e, b->raw_streams[0]), "record"))
      return 0;
  }
  if (!check_cu(b, cu->cuStreamSynchronize(b->raw_streams[0]), "synchronize")) return 0;
  return us_per(start, n);
}
static double raw_graph(bench_t* b, int n) { return raw_graph_events(b, n, 1); }
static double raw_graph_ring(bench_t* b, int n) { return raw_graph_events(b, n, BENCH_RING); }

/* ---- 5. host signal -> queued dispatch -> host ---- */
static void bench_sleep_us(long us) {
  struct timespec ts;
  ts.tv_sec = us / 1000000;
  ts.tv_nsec = (us % 1000000) * 1000;
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Busy-waits: the submitting thread stays on its core and warm, as the raw round trip's
 * thread is when it launches (after a nanosleep its first calls run measurably slower). */
static void bench_spin_us(long us) {
  int64_t end = gpuhal_now_ns() + (int64_t)us * 1000;
  while (gpuhal_now_ns() < end) {
  }
}

static double gpuhal_signal_to_host(bench_t* b, int n) {
  int64_t total = 0;
  int i;
  for (i = 0; i < n; ++i) {
    uint64_t gate = ++b->gate_value, next = ++b->value;
    int64_t start;
    if (!check(b,
               gpuhal_queue_execute(b->f.device, 0, one(&b->gate, &gate), one(&b->s, &next), b->graph->stream_cb, NULL),
               "signal-to-host execute"))
      return 0;
    bench_sleep_us(200);
    start = gpuhal_now_ns();
    if (!check(b, gpuhal_semaphore_signal(b->gate, gate), "signal-to-host signal") ||
        !check(b, gpuhal_semaphore_wait(b->s, next, qt_seconds(10)), "signal-to-host wait"))
      return 0;
    total += gpuhal_now_ns() - start;
  }
  return (double)total / 1000.0 / n;
}

#if GPUHAL_BENCH_HAVE_MEMOPS
/* Two 64-bit words of pinned, device-mapped host memory: [0] the gate the stream waits on,
 * [1] the word the stream writes when its launch is done. */
static double raw_signal_to_host(bench_t* b, int n) {
  const gpuhal__cuda_symbols_t* cu = b->f.device->cu;
  volatile uint64_t* words = NULL;
  void* host = NULL;
  CUdeviceptr dev = 0;
  unsigned long long us = 0;
  void* params[1];
  int64_t total = 0;
  int i, ok = 1;
  int memops = 0;
  if (!cu->cuStreamWaitValue64 || !cu->cuStreamWriteValue64 || !cu->cuMemHostAlloc || !cu->cuMemHostGetDevicePointer ||
      !cu->cuMemFreeHost)
    return 0;
  /* A device without 64-bit stream memory operations has no raw side to compare with. */
  if (cu->cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, b->f.device->cu_device) !=
          CUDA_SUCCESS ||
      !memops)
    return 0;
  if (!check_cu(b,
                cu->cuMemHostAlloc(&host, 2 * sizeof(uint64_t), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
                "cuMemHostAlloc"))
    return 0;
  words = (volatile uint64_t*)host;
  words[0] = words[1] = 0;
  params[0] = &us;
  ok = check_cu(b, cu->cuMemHostGetDevicePointer(&dev, host, 0), "cuMemHostGetDevicePointer");
  for (i = 0; ok && i < n; ++i) {
    uint64_t k = (uint64_t)i + 1;
    int64_t start;
    ok = check_cu(b, cu->cuStreamWaitValue64(b->raw_streams[0], dev, k, CU_STREAM_WAIT_VALUE_GEQ), "wait value") &&
         check_cu(b, cu->cuLaunchKernel(b->f.spin, 1, 1, 1, 1, 1, 1, 0, b->raw_streams[0], params, NULL), "launch") &&
         check_cu(b,
                  cu->cuStreamWriteValue64(b->raw_streams[0], dev + sizeof(uint64_t), k, CU_STREAM_WRITE_VALUE_DEFAULT),
                  "write value");
    if (!ok) break;
    bench_sleep_us(200);
    start = gpuhal_now_ns();
    __atomic_store_n((uint64_t*)&words[0], k, __ATOMIC_SEQ_CST);
    while (__atomic_load_n((uint64_t*)&words[1], __ATOMIC_SEQ_CST) < k) {
      if (gpuhal_now_ns() - start > 10000000000ll) {
        fprintf(stderr, "bench_queue: raw signal-to-host: the stream never wrote its word\n");
        b->failures++;
        ok = 0;
        break;
      }
    }
    total += gpuhal_now_ns() - start;
  }
  check_cu(b, cu->cuStreamSynchronize(b->raw_streams[0]), "synchronize");
  cu->cuMemFreeHost(host);
  return ok ? (double)total / 1000.0 / n : 0;
}
#else
static double raw_signal_to_host(bench_t* b, int n) {
  (void)b;
  (void)n;
  return 0; /* not built: see GPUHAL_BENCH_HAVE_MEMOPS */
}
#endif

/* ---- 6. a host waiter blocked before the producer is submitted ----
 * One waiter thread for the run: for each value it announces that it is about to wait,
 * the bench lets it be in the wait for `waiter_lead_us`, then submits; the time runs from
 * the submit to the waiter's return (its thread's start-up is not in it). */
typedef struct bench_waiter_s {
  bench_t* b;
  int n;
  uint64_t base; /* the values waited for are base + 1 .. base + n */
  int32_t ready; /* the value the waiter is about to wait for (atomic) */
  int32_t woke;  /* the value it returned from (atomic) */
  int64_t woke_ns;
  gpuhal_status_t status;
} bench_waiter_t;
static void* bench_waiter_main(void* p) {
  bench_waiter_t* w = (bench_waiter_t*)p;
  uint64_t base = w->base;
  int i;
  for (i = 1; i <= w->n && !w->status; ++i) {
    __atomic_store_n(&w->ready, i, __ATOMIC_SEQ_CST);
    w->status = gpuhal_semaphore_wait(w->b->s, base + (uint64_t)i, qt_seconds(10));
    w->woke_ns = gpuhal_now_ns();
    __atomic_store_n(&w->woke, i, __ATOMIC_SEQ_CST);
  }
  if (w->status) __atomic_store_n(&w->woke, w->n, __ATOMIC_SEQ_CST); /* ends the bench's loop */
  return NULL;
}

static double gpuhal_early_waiter(bench_t* b, int n) {
  bench_waiter_t w;
  pthread_t thread;
  int64_t total = 0;
  int i;
  memset(&w, 0, sizeof(w));
  w.b = b;
  w.n = n;
  w.base = b->value;
  if (pthread_create(&thread, NULL, bench_waiter_main, &w) != 0) return 0;
  for (i = 1; i <= n; ++i) {
    uint64_t next = ++b->value;
    int64_t start;
    while (__atomic_load_n(&w.ready, __ATOMIC_SEQ_CST) < i && __atomic_load_n(&w.woke, __ATOMIC_SEQ_CST) < n) {
    }
    if (__atomic_load_n(&w.woke, __ATOMIC_SEQ_CST) >= n) break; /* the waiter failed */
    bench_spin_us(b->waiter_lead_us);                           /* the waiter is in its wait by now */
    start = gpuhal_now_ns();
    if (!check(b,
               gpuhal_queue_execute(b->f.device, 0, gpuhal_semaphore_list_empty(), one(&b->s, &next),
                                    b->graph->stream_cb, NULL),
               "early-waiter execute"))
      break;
    while (__atomic_load_n(&w.woke, __ATOMIC_SEQ_CST) < i) {
    }
    total += w.woke_ns - start;
  }
  pthread_join(thread, NULL);
  if (!check(b, w.status, "early-waiter wait") || i <= n) return 0;
  return (double)total / 1000.0 / n;
}

/* ---- 7. chain submitted in reverse order, then released ---- */
static double gpuhal_reverse_chain(bench_t* b, int n) {
  uint64_t first = b->value, gate = ++b->gate_value;
  int64_t start;
  int i;
  for (i = n - 1; i >= 0; --i) {
    uint64_t prev = first + (uint64_t)i, next = prev + 1;
    gpuhal_semaphore_list_t wait = i == 0 ? one(&b->gate, &gate) : one(&b->s, &prev);
    if (!check(b,
               gpuhal_queue_execute(b->f.device, (uint32_t)(i % 2), wait, one(&b->s, &next), b->graph->stream_cb, NULL),
               "reverse chain execute"))
      return 0;
  }
  b->value = first + (uint64_t)n;
  start = gpuhal_now_ns();
  if (!check(b, gpuhal_semaphore_signal(b->gate, gate), "reverse chain release") ||
      !check(b, gpuhal_semaphore_wait(b->s, b->value, qt_seconds(60)), "reverse chain wait"))
    return 0;
  return us_per(start, n);
}

/* ---- 9. a host call behind GPU work ---- */
static gpuhal_status_t bench_host_noop(void* user) {
  (void)user;
  return NULL;
}

static double gpuhal_host_call(bench_t* b, int n) {
  int64_t start = gpuhal_now_ns();
  int i;
  for (i = 0; i < n; ++i) {
    uint64_t next = ++b->value, host = ++b->host_value;
    if (!check(b,
               gpuhal_queue_execute(b->f.device, 0, gpuhal_semaphore_list_empty(), one(&b->s, &next),
                                    b->graph->stream_cb, NULL),
               "host call execute") ||
        !check(b,
               gpuhal_queue_host_call(b->f.device, 0, one(&b->s, &next), one(&b->host, &host), bench_host_noop, NULL),
               "host call") ||
        !check(b, gpuhal_semaphore_wait(b->host, host, qt_seconds(10)), "host call wait"))
      return 0;
  }
  return us_per(start, n);
}

static uint64_t bench_raw_host_flag;
static void CUDA_CB bench_raw_host_fn(void* user) { __atomic_add_fetch((uint64_t*)user, 1, __ATOMIC_SEQ_CST); }

static double raw_host_call(bench_t* b, int n) {
  const gpuhal__cuda_symbols_t* cu = b->f.device->cu;
  unsigned long long us = 0;
  void* params[1];
  uint64_t base = __atomic_load_n(&bench_raw_host_flag, __ATOMIC_SEQ_CST);
  int64_t start;
  int i;
  params[0] = &us;
  start = gpuhal_now_ns();
  for (i = 1; i <= n; ++i) {
    int64_t began = gpuhal_now_ns();
    if (!check_cu(b, cu->cuLaunchKernel(b->f.spin, 1, 1, 1, 1, 1, 1, 0, b->raw_streams[0], params, NULL), "launch") ||
        !check_cu(b, cu->cuLaunchHostFunc(b->raw_streams[0], bench_raw_host_fn, &bench_raw_host_flag),
                  "cuLaunchHostFunc"))
      return 0;
    while (__atomic_load_n(&bench_raw_host_flag, __ATOMIC_SEQ_CST) < base + (uint64_t)i) {
      if (gpuhal_now_ns() - began > 10000000000ll) {
        fprintf(stderr, "bench_queue: raw host call: the host function never ran\n");
        b->failures++;
        return 0;
      }
    }
  }
  return us_per(start, n);
}

/* ---- 10. WAIT_ANY with an entry nobody signals ---- */
static double gpuhal_any_unsignalled(bench_t* b, int n) {
  int64_t start = gpuhal_now_ns();
  int i;
  for (i = 0; i < n; ++i) {
    gpuhal_semaphore_t* sems[2];
    uint64_t values[2];
    gpuhal_semaphore_list_t list;
    uint64_t next = ++b->value;
    sems[0] = b->gate;
    values[0] = b->gate_value + 1; /* never signalled in this case */
    sems[1] = b->s;
    values[1] = next;
    list.count = 2;
    list.semaphores = sems;
    list.values = values;
    if (!check(b,
               gpuhal_queue_execute(b->f.device, 0, gpuhal_semaphore_list_empty(), one(&b->s, &next),
                                    b->graph->stream_cb, NULL),
               "any execute") ||
        !check(b, gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, list, qt_seconds(10)), "any wait"))
      return 0;
  }
  return us_per(start, n);
}

/* ---- 11. round trip beside a busy queue ---- */
/* Long enough to outlast the timed loop on any host (a round trip is about 10 us on an
 * H200), short enough to keep the case under a second per repetition. */
static unsigned long long bench_busy_us(int n) { return (unsigned long long)n * 40ull + 1000ull; }

static double gpuhal_beside_busy(bench_t* b, int n) {
  qt_spin_t busy;
  uint64_t value = ++b->busy_value;
  double us;
  memset(&busy, 0, sizeof(busy));
  busy.fixture = &b->f;
  busy.first_us = busy.rest_us = bench_busy_us(n);
  if (!check(b, qt_submit(b->f.device, 1, gpuhal_semaphore_list_empty(), one(&b->busy, &value), &qt_spin_ops, &busy),
             "busy submit"))
    return 0;
  us = gpuhal_round_trip_impl(b, n, 0);
  if (!check(b, gpuhal_semaphore_wait(b->busy, value, qt_seconds(60)), "busy wait")) return 0;
  return us;
}

static double raw_beside_busy(bench_t* b, int n) {
  const gpuhal__cuda_symbols_t* cu = b->f.device->cu;
  unsigned long long us = bench_busy_us(n);
  void* params[1];
  double result;
  params[0] = &us;
  if (!check_cu(b, cu->cuLaunchKernel(b->f.spin, 1, 1, 1, 1, 1, 1, 0, b->raw_streams[1], params, NULL), "busy launch"))
    return 0;
  result = raw_round_trip_impl(b, n, 0);
  if (!check_cu(b, cu->cuStreamSynchronize(b->raw_streams[1]), "busy synchronize")) return 0;
  return result;
}

/* ---- diagnostics: CUDA calls per operation ----
 * Counting wrappers replace entries of the driver's function table (which gpuhal and the
 * raw side both call through) while one case runs: calls and time inside each entry, on the
 * benchmark thread and on gpuhal's threads. */
typedef struct diag_counter_s {
  const char* name;
  int64_t calls, ns, calls_main, ns_main;
} diag_counter_t;
static pthread_t diag_main_thread;
static void diag_count(diag_counter_t* c, int64_t start_ns) {
  int64_t ns = gpuhal_now_ns() - start_ns;
  if (pthread_equal(pthread_self(), diag_main_thread)) {
    __atomic_add_fetch(&c->calls_main, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->ns_main, ns, __ATOMIC_RELAXED);
  } else {
    __atomic_add_fetch(&c->calls, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->ns, ns, __ATOMIC_RELAXED);
  }
}
#define DIAG_ENTRIES(X)                                                                                   \
  X(cuEventRecord, (CUevent e, CUstream s), (e, s))                                                       \
  X(cuEventQuery, (CUevent e), (e))                                                                       \
  X(cuEventSynchronize, (CUevent e), (e))                                                                 \
  X(cuStreamWaitEvent, (CUstream s, CUevent e, unsigned int f), (s, e, f))                                \
  X(cuLaunchKernel,                                                                                       \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,   \
     unsigned int bz, unsigned int sh, CUstream s, void** p, void** x),                                   \
    (f, gx, gy, gz, bx, by, bz, sh, s, p, x))                                                             \
  X(cuGraphLaunch, (CUgraphExec g, CUstream s), (g, s))                                                   \
  X(cuMemAllocFromPoolAsync, (CUdeviceptr * p, size_t n, CUmemoryPool pool, CUstream s), (p, n, pool, s)) \
  X(cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s))                                                  \
  X(cuCtxGetCurrent, (CUcontext * c), (c))                                                                \
  X(cuCtxPushCurrent, (CUcontext c), (c))                                                                 \
  X(cuCtxPopCurrent, (CUcontext * c), (c))                                                                \
  X(cuEventCreate, (CUevent * e, unsigned int f), (e, f))                                                 \
  X(cuStreamWaitValue64, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f), (s, a, v, f))         \
  X(cuStreamWriteValue64, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f), (s, a, v, f))        \
  X(cuStreamQuery, (CUstream s), (s))
#define DIAG_DEFINE(name, params, args)                    \
  static gpuhal_PFN_##name diag_orig_##name;               \
  static diag_counter_t diag_##name = {#name, 0, 0, 0, 0}; \
  static CUresult CUDAAPI diag_fn_##name params {          \
    int64_t start_ns = gpuhal_now_ns();                    \
    CUresult r = diag_orig_##name args;                    \
    diag_count(&diag_##name, start_ns);                    \
    return r;                                              \
  }
DIAG_ENTRIES(DIAG_DEFINE)
#define DIAG_INSTALL(name, params, args) \
  diag_orig_##name = cu->name;           \
  if (diag_orig_##name) cu->name = diag_fn_##name;
#define DIAG_REMOVE(name, params, args) \
  if (diag_orig_##name) cu->name = diag_orig_##name;
#define DIAG_RESET(name, params, args) \
  diag_##name.calls = diag_##name.ns = diag_##name.calls_main = diag_##name.ns_main = 0;
#define DIAG_PRINT(name, params, args)                                                                       \
  if (diag_##name.calls || diag_##name.calls_main)                                                           \
    printf("    %-24s %8.2f calls %7.3f us (bench thread) | %8.2f calls %7.3f us (gpuhal threads)\n", #name, \
           (double)diag_##name.calls_main / n, (double)diag_##name.ns_main / 1000.0 / n,                     \
           (double)diag_##name.calls / n, (double)diag_##name.ns / 1000.0 / n);

static int64_t thread_cpu_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Runs `fn` once for n iterations with the counting wrappers in place. */
static void diagnose(bench_t* b, const char* name, double (*fn)(bench_t*, int), int n) {
  gpuhal__cuda_symbols_t* cu = (gpuhal__cuda_symbols_t*)(void*)&b->f.driver->cu;
  gpuhal__queue_state_t* qs = gpuhal__queue_state(b->f.device);
  uint64_t looks0, misses0, harvested0;
  int64_t cpu0, proc0;
  double us;
  check(b, gpuhal_device_wait_idle(b->f.device, gpuhal_timeout_infinite()), "idle");
  DIAG_ENTRIES(DIAG_RESET)
  DIAG_ENTRIES(DIAG_INSTALL)
  looks0 = qs->harvest_looks;
  misses0 = qs->harvest_misses;
  harvested0 = qs->harvested;
  cpu0 = thread_cpu_ns(CLOCK_THREAD_CPUTIME_ID);
  proc0 = thread_cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
  us = fn(b, n);
  check(b, gpuhal_device_wait_idle(b->f.device, gpuhal_timeout_infinite()), "idle");
  printf("  %s: harvest: %llu looks (%llu found nothing), %.2f of the operations retired by the submitter\n", name,
         (unsigned long long)(qs->harvest_looks - looks0), (unsigned long long)(qs->harvest_misses - misses0),
         (double)(qs->harvested - harvested0) / n);
  printf("  %s: %.2f us/op wall (wrapped), bench thread cpu %.2f us/op, process cpu %.2f us/op\n", name, us,
         (double)(thread_cpu_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0) / 1000.0 / n,
         (double)(thread_cpu_ns(CLOCK_PROCESS_CPUTIME_ID) - proc0) / 1000.0 / n);
  DIAG_ENTRIES(DIAG_REMOVE)
  DIAG_ENTRIES(DIAG_PRINT)
}

/* ---- repetitions and medians ---- */
static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y ? 1 : 0;
}
static double median(const double* v, int n) {
  double sorted[64];
  int i;
  if (n > 64) n = 64;
  for (i = 0; i < n; ++i) sorted[i] = v[i];
  qsort(sorted, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

static double min_of(const double* v, int n) {
  double m = v[0];
  int i;
  for (i = 1; i < n; ++i) m = v[i] < m ? v[i] : m;
  return m;
}
static double max_of(const double* v, int n) {
  double m = v[0];
  int i;
  for (i = 1; i < n; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

/* Warms both sides with the full count, then measures `reps` times, alternating which side
 * goes first; prints medians (the ratio is the median of the per-repetition ratios). */
static void run_case(bench_t* b, const char* name, double target, double (*ours)(bench_t*, int),
                     double (*raw)(bench_t*, int), int n, int reps, double* out_ours) {
  double g[64], r[64], ratio[64], mg, mr, mratio;
  int i;
  if (reps > 64) reps = 64;
  ours(b, n);
  raw(b, n);
  for (i = 0; i < reps; ++i) {
    if (i & 1) r[i] = raw(b, n);
    g[i] = ours(b, n);
    if (!(i & 1)) r[i] = raw(b, n);
    ratio[i] = r[i] > 0 ? g[i] / r[i] : 0;
  }
  mg = median(g, reps);
  mr = median(r, reps);
  mratio = median(ratio, reps);
  if (out_ours) *out_ours = mg;
  if (mr <= 0) {
    printf("%-40s %10.2f %10s (not available on this device)\n", name, mg, "-");
    return;
  }
  printf("%-40s %10.2f %10.2f %7.2fx %7.2fx %-13s [gpuhal %.2f..%.2f raw %.2f..%.2f]\n", name, mg, mr, mratio, target,
         target <= 0        ? ""
         : mratio <= target ? "met"
                            : "(over target)",
         min_of(g, reps), max_of(g, reps), min_of(r, reps), max_of(r, reps));
  fflush(stdout);
}

int main(int argc, char** argv) {
  bench_t b;
  bench_graph_t graph;
  gpuhal__context_scope_t scope;
  const gpuhal__cuda_symbols_t* cu;
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  int reps = argc > 2 ? atoi(argv[2]) : 5;
  int diagnostics = argc > 3 ? atoi(argv[3]) : 1;
  const char* only = argc > 4 ? argv[4] : "1234567890a"; /* the cases to run, by number (0: 10, a: 11) */
  int i, have_graph;
  if (n < 1) n = 1;
  if (reps < 1) reps = 1;
  memset(&b, 0, sizeof(b));
  diag_main_thread = pthread_self();
  if (getenv("BENCH_NO_CALLER_ISSUE")) qt_tuning.no_caller_issue = 1;
  if (getenv("BENCH_HARVEST_MIN")) qt_tuning.harvest_min = atoi(getenv("BENCH_HARVEST_MIN"));
  if (!qt_open(&b.f, 2, NULL)) return 77;
  if (!qt_kernels_load(&b.f)) {
    fprintf(stderr, "bench_queue: cannot load the test kernels from %s\n", GPUHAL_KERNELS_DIR);
    qt_close(&b.f);
    return 1;
  }
  cu = b.f.device->cu;
  if (!check(&b, gpuhal_semaphore_create(b.f.driver, 0, &b.s), "semaphore") ||
      !check(&b, gpuhal_semaphore_create(b.f.driver, 0, &b.gate), "semaphore") ||
      !check(&b, gpuhal_semaphore_create(b.f.driver, 0, &b.host), "semaphore") ||
      !check(&b, gpuhal_semaphore_create(b.f.driver, 0, &b.busy), "semaphore"))
    return 1;
  /* The raw side runs on this thread with the device's context pushed, as a raw user would. */
  if (!check(&b, gpuhal__context_enter(b.f.device, &scope), "context")) return 1;
  for (i = 0; i < 2; ++i) check_cu(&b, cu->cuStreamCreate(&b.raw_streams[i], CU_STREAM_NON_BLOCKING), "stream");
  for (i = 0; i < 4; ++i) check_cu(&b, cu->cuEventCreate(&b.raw_events[i], CU_EVENT_DISABLE_TIMING), "event");
  for (i = 0; i < BENCH_RING; ++i) check_cu(&b, cu->cuEventCreate(&b.raw_ring[i], CU_EVENT_DISABLE_TIMING), "event");
  printf("bench_queue: %d iterations, median of %d repetitions, on %s (%s)\n", n, reps, b.f.device->info.name,
         tu_softcuda() ? "softcuda: the numbers mean nothing" : gpuhal_driver_cuda_library(b.f.driver));
  printf("%-40s %10s %10s %8s %8s\n", "case", "gpuhal us", "raw us", "ratio", "target");

  if (strchr(only, '1'))
    run_case(&b, "1 round trip (dispatch+wait)", 1.05, gpuhal_round_trip, raw_round_trip, n, reps, NULL);
  if (strchr(only, '2')) run_case(&b, "2 dependent chain, per hop", 1.2, gpuhal_chain, raw_chain, n, reps, NULL);
  if (strchr(only, '3')) {
    run_case(&b, "3 alloca+dealloca pair (signalled raw)", 1.25, gpuhal_alloca, raw_alloca_signalled, n, reps, NULL);
    run_case(&b, "3b  same vs bare alloc+free (no signals)", 0, gpuhal_alloca, raw_alloca, n, reps, NULL);
  }
  b.graph = &graph;
  have_graph = bench_graph_setup(&b, &graph);
  if (have_graph && strchr(only, '4')) {
    run_case(&b, "4 graph execute, 1 wait 1 signal", 1.25, gpuhal_graph, raw_graph, n, reps, NULL);
    run_case(&b, "4b  same vs a ring of 64 events", 0, gpuhal_graph, raw_graph_ring, n, reps, NULL);
  }
  if (have_graph && strchr(only, '5')) {
    if (!GPUHAL_BENCH_HAVE_MEMOPS) printf("  (case 5 raw side not built: GPUHAL_BENCH_HAVE_MEMOPS=0)\n");
    run_case(&b, "5 host signal -> dispatch -> host", 1.25, gpuhal_signal_to_host, raw_signal_to_host, n, reps, NULL);
  }
  if (have_graph && strchr(only, '6')) {
    b.waiter_lead_us = 50;
    run_case(&b, "6 waiter blocked before the submit", 1.1, gpuhal_early_waiter, raw_round_trip, n, reps, NULL);
    b.waiter_lead_us = 2000;
    run_case(&b, "6b  the waiter 2 ms ahead (asleep)", 0, gpuhal_early_waiter, raw_round_trip, n, reps, NULL);
  }
  if (have_graph && strchr(only, '7'))
    run_case(&b, "7 reverse-submitted chain, per hop", 1.3, gpuhal_reverse_chain, raw_chain, n, reps, NULL);
  if (strchr(only, '8'))
    run_case(&b, "8 zero-timeout poll loop round trip", 1.1, gpuhal_poll_round_trip, raw_poll_round_trip, n, reps,
             NULL);
  if (have_graph && strchr(only, '9'))
    run_case(&b, "9 host call behind a dispatch", 0, gpuhal_host_call, raw_host_call, n, reps, NULL);
  if (have_graph && strchr(only, '0'))
    run_case(&b, "10 ANY with an unsignalled entry", 0, gpuhal_any_unsignalled, raw_round_trip, n, reps, NULL);
  if (strchr(only, 'a'))
    run_case(&b, "11 round trip beside a busy queue", 1.1, gpuhal_beside_busy, raw_beside_busy, n, reps, NULL);
  check(&b, gpuhal_device_wait_idle(b.f.device, gpuhal_timeout_infinite()), "idle");

  if (diagnostics) {
    printf("diagnostics: CUDA calls and time inside them per operation (counting wrappers)\n");
    if (strchr(only, '1')) diagnose(&b, "1 round trip gpuhal", gpuhal_round_trip, n);
    if (strchr(only, '1')) diagnose(&b, "1 round trip raw", raw_round_trip, n);
    if (strchr(only, '2')) diagnose(&b, "2 chain gpuhal", gpuhal_chain, n);
    if (strchr(only, '2')) diagnose(&b, "2 chain raw", raw_chain, n);
    if (strchr(only, '3')) diagnose(&b, "3 alloca pair gpuhal", gpuhal_alloca, n);
    if (strchr(only, '3')) diagnose(&b, "3 alloca pair raw signalled", raw_alloca_signalled, n);
    if (have_graph && strchr(only, '4')) {
      diagnose(&b, "4 graph execute gpuhal", gpuhal_graph, n);
      diagnose(&b, "4 graph execute raw", raw_graph, n);
    }
    if (have_graph && strchr(only, '5')) diagnose(&b, "5 signal to host gpuhal", gpuhal_signal_to_host, n);
    if (have_graph && strchr(only, '6')) diagnose(&b, "6 early waiter gpuhal", gpuhal_early_waiter, n);
    if (have_graph && strchr(only, '7')) diagnose(&b, "7 reverse chain gpuhal", gpuhal_reverse_chain, n);
    if (strchr(only, '8')) diagnose(&b, "8 poll loop gpuhal", gpuhal_poll_round_trip, n);
    if (have_graph && strchr(only, '9')) diagnose(&b, "9 host call gpuhal", gpuhal_host_call, n);
    if (have_graph && strchr(only, '0')) diagnose(&b, "10 ANY wait gpuhal", gpuhal_any_unsignalled, n);
    if (strchr(only, 'a')) diagnose(&b, "11 beside a busy queue gpuhal", gpuhal_beside_busy, n);
  }

  check(&b, gpuhal_device_wait_idle(b.f.device, gpuhal_timeout_infinite()), "idle");
  bench_graph_teardown(&b, &graph);
  for (i = 0; i < 4; ++i) cu->cuEventDestroy(b.raw_events[i]);
  for (i = 0; i < BENCH_RING; ++i) cu->cuEventDestroy(b.raw_ring[i]);
  for (i = 0; i < 2; ++i) cu->cuStreamDestroy(b.raw_streams[i]);
  gpuhal__context_leave(b.f.device, &scope);
  gpuhal_semaphore_release(b.s);
  gpuhal_semaphore_release(b.gate);
  gpuhal_semaphore_release(b.host);
  gpuhal_semaphore_release(b.busy);
  qt_close(&b.f);
  return b.failures ? 1 : 0;
}
