/* bench_multi_gpu: several GPUs, gpuhal against the raw driver / NCCL in the same run.
 *
 *   1. scaling: two devices running independent dispatch chains together vs one alone
 *      (throughput ratio; target >= 1.8)
 *   2. cross-device hop: a ping-pong A -> B -> A ordered by semaphores (gpuhal) vs by
 *      cuEventRecord + cross-context cuStreamWaitEvent (raw); microseconds per hop
 *   3. all-reduce bus bandwidth, 1 MiB ... max (float sum over every device): gpuhal STREAM
 *      and GRAPH command buffers (one execute per device per all-reduce, each signalling a
 *      semaphore) vs raw ncclAllReduce calls on the same buffers and streams, every rank in
 *      one ncclGroupStart/End per all-reduce from one thread (target >= 0.95). Each run
 *      all-reduces at least $BM_TOTAL_MIB (default 1024) MiB, at least `iterations` times;
 *      medians of 5 runs. gpuhal's host waits spin through a run (tuning.host_wait_spin_ns)
 *      as the raw side's cuStreamSynchronize does. Diagnostics beside it: raw calls from one
 *      thread per rank, the same with an event recorded after each call (as gpuhal does),
 *      the same on gpuhal's own communicators, and the grouped raw call captured once into a
 *      CUDA graph per device and launched per all-reduce (what NCCL does inside a graph: the
 *      GRAPH command buffers' floor).
 *
 *   NCCL_NVLS_ENABLE=0 ./bench/bench_multi_gpu [max_mib=1024] [iterations=20]
 *       (BM_MIN_MIB: the smallest size, default 1)
 * Needs 2 devices (softcuda: SOFTCUDA_DEVICES=2 or more; its timings mean nothing). With one
 * device it measures only what one GPU can show: microseconds per all-reduce on a one-rank
 * channel at each size (at small sizes, the cost of issuing a collective), gpuhal vs raw. */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"
#include "../test_multi_device_util.h"

#define BM_CHECK(expr)                                                                               \
  do {                                                                                               \
    gpuhal_status_t bm_s_ = (expr);                                                                  \
    if (bm_s_) {                                                                                     \
      fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #expr, gpuhal_status_message(bm_s_)); \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)
#define BM_CU(expr)                                                                           \
  do {                                                                                        \
    CUresult bm_r_ = (expr);                                                                  \
    if (bm_r_ != CUDA_SUCCESS) {                                                              \
      fprintf(stderr, "%s:%d: %s -> CUDA error %d\n", __FILE__, __LINE__, #expr, (int)bm_r_); \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

static md_fixture_t f;
static const gpuhal__cuda_symbols_t* cu;

static double bm_seconds(int64_t ns) { return (double)ns / 1e9; }

/* A REUSABLE graph of `n` short spin_store dispatches on device `dev`. */
static gpuhal_command_buffer_t* bm_chain(int dev, gpuhal_buffer_t* dst, int n, uint64_t us) {
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t args[4];
  int i;
  args[0] = gpuhal_arg_buffer(dst, 0);
  args[1] = gpuhal_arg_u32(1);
  args[2] = gpuhal_arg_u32(1);
  args[3] = gpuhal_arg_u64(us);
  BM_CHECK(gpuhal_command_buffer_create(f.devices[dev], GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb));
  BM_CHECK(gpuhal_command_buffer_begin(cb));
  for (i = 0; i < n; ++i) {
    BM_CHECK(gpuhal_cmd_dispatch(cb, f.spin_store[dev], gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 4, args));
    BM_CHECK(gpuhal_cmd_barrier(cb));
  }
  BM_CHECK(gpuhal_command_buffer_end(cb));
  return cb;
}

/* Runs `executes` executes of cbs[d] on devices [0, ndev) at once; returns seconds. */
static double bm_run_chains(gpuhal_command_buffer_t** cbs, gpuhal_semaphore_t** sems, uint64_t* values, int ndev,
                            int executes) {
  int64_t start = gpuhal_now_ns();
  int d, k;
  for (k = 0; k < executes; ++k)
    for (d = 0; d < ndev; ++d) {
      uint64_t v = ++values[d];
      BM_CHECK(gpuhal_queue_execute(f.devices[d], 0, gpuhal_semaphore_list_empty(),
                                    gpuhal_semaphore_list_one(&sems[d], &v), cbs[d], NULL));
    }
  for (d = 0; d < ndev; ++d) BM_CHECK(gpuhal_semaphore_wait(sems[d], values[d], md_seconds(600)));
  return bm_seconds(gpuhal_now_ns() - start);
}

static double bm_scaling(void) {
  gpuhal_buffer_t* buf[2];
  gpuhal_command_buffer_t* cbs[2];
  gpuhal_semaphore_t* sems[2];
  uint64_t values[2] = {0, 0};
  const int executes = 200, dispatches = 64;
  double one, two, ratio;
  int d;
  for (d = 0; d < 2; ++d) {
    BM_CHECK(gpuhal_buffer_allocate(f.devices[d], GPUHAL_MEMORY_DEVICE, 256, &buf[d]));
    BM_CHECK(gpuhal_semaphore_create(f.driver, 0, &sems[d]));
    cbs[d] = bm_chain(d, buf[d], dispatches, 5);
  }
  bm_run_chains(cbs, sems, values, 2, 5); /* warm up */
  one = bm_run_chains(cbs, sems, values, 1, executes);
  two = bm_run_chains(cbs, sems, values, 2, executes);
  ratio = (2.0 * executes / two) / (executes / one);
  printf("scaling: 1 device %.1f ms, 2 devices %.1f ms for %d x %d dispatches each: throughput x%.2f (target >= 1.8)\n",
         one * 1e3, two * 1e3, executes, dispatches, ratio);
  for (d = 0; d < 2; ++d) {
    gpuhal_command_buffer_release(cbs[d]);
    gpuhal_semaphore_release(sems[d]);
    gpuhal_buffer_release(buf[d]);
  }
  return ratio;
}

/* ---- the hop ---- */
static double bm_hop_gpuhal(int hops) {
  gpuhal_buffer_t* buf[2];
  gpuhal_command_buffer_t* cbs[2];
  gpuhal_semaphore_t *ping = NULL, *pong = NULL;
  int64_t start;
  int d, i;
  double us;
  BM_CHECK(gpuhal_semaphore_create(f.driver, 0, &ping));
  BM_CHECK(gpuhal_semaphore_create(f.driver, 0, &pong));
  for (d = 0; d < 2; ++d) {
    BM_CHECK(gpuhal_buffer_allocate(f.devices[d], GPUHAL_MEMORY_DEVICE, 256, &buf[d]));
    cbs[d] = bm_chain(d, buf[d], 1, 0);
  }
  start = gpuhal_now_ns();
  for (i = 1; i <= hops; ++i) {
    uint64_t prev = (uint64_t)i - 1, cur = (uint64_t)i;
    BM_CHECK(gpuhal_queue_execute(f.devices[0], 0, gpuhal_semaphore_list_one(&pong, &prev),
                                  gpuhal_semaphore_list_one(&ping, &cur), cbs[0], NULL));
    BM_CHECK(gpuhal_queue_execute(f.devices[1], 0, gpuhal_semaphore_list_one(&ping, &cur),
                                  gpuhal_semaphore_list_one(&pong, &cur), cbs[1], NULL));
  }
  BM_CHECK(gpuhal_semaphore_wait(pong, (uint64_t)hops, md_seconds(600)));
  us = (double)(gpuhal_now_ns() - start) / 1e3 / (2.0 * hops);
  for (d = 0; d < 2; ++d) {
    gpuhal_command_buffer_release(cbs[d]);
    gpuhal_buffer_release(buf[d]);
  }
  gpuhal_semaphore_release(ping);
  gpuhal_semaphore_release(pong);
  return us;
}

typedef struct bm_raw_s {
  CUcontext ctx[2];
  CUstream stream[2];
  CUevent event[2];
  CUmodule module[2];
  CUfunction fn[2];
  CUdeviceptr ptr[2];
} bm_raw_t;

static void bm_raw_open(bm_raw_t* r) {
  size_t size = 0;
  char* ptx = md_read_file("spin_store.ptx", &size);
  int d;
  memset(r, 0, sizeof(*r));
  for (d = 0; d < 2; ++d) {
    CUcontext popped;
    r->ctx[d] = f.devices[d]->context; /* the same primary contexts gpuhal uses */
    BM_CU(cu->cuCtxPushCurrent(r->ctx[d]));
    BM_CU(cu->cuStreamCreate(&r->stream[d], CU_STREAM_NON_BLOCKING));
    BM_CU(cu->cuEventCreate(&r->event[d], CU_EVENT_DISABLE_TIMING));
    BM_CU(cu->cuModuleLoadData(&r->module[d], ptx));
    BM_CU(cu->cuModuleGetFunction(&r->fn[d], r->module[d], "spin_store"));
    BM_CU(cu->cuMemAlloc(&r->ptr[d], 256));
    BM_CU(cu->cuCtxPopCurrent(&popped));
  }
  free(ptx);
}

static void bm_raw_close(bm_raw_t* r) {
  int d;
  for (d = 0; d < 2; ++d) {
    CUcontext popped;
    BM_CU(cu->cuCtxPushCurrent(r->ctx[d]));
    BM_CU(cu->cuStreamSynchronize(r->stream[d]));
    cu->cuMemFree(r->ptr[d]);
    cu->cuModuleUnload(r->module[d]);
    cu->cuEventDestroy(r->event[d]);
    cu->cuStreamDestroy(r->stream[d]);
    BM_CU(cu->cuCtxPopCurrent(&popped));
  }
}

static void bm_raw_launch(bm_raw_t* r, int d) {
  unsigned value = 1, n = 1;
  unsigned long long us = 0;
  void* params[4];
  params[0] = &r->ptr[d];
  params[1] = &value;
  params[2] = &n;
  params[3] = &us;
  BM_CU(cu->cuLaunchKernel(r->fn[d], 1, 1, 1, 1, 1, 1, 0, r->stream[d], params, NULL));
}

static double bm_hop_raw(bm_raw_t* r, int hops) {
  int64_t start = gpuhal_now_ns();
  int i, d;
  CUcontext popped;
  for (i = 0; i < hops; ++i) {
    for (d = 0; d < 2; ++d) {
      BM_CU(cu->cuCtxPushCurrent(r->ctx[d]));
      BM_CU(cu->cuStreamWaitEvent(r->stream[d], r->event[1 - d], 0)); /* cross-context wait */
      bm_raw_launch(r, d);
      BM_CU(cu->cuEventRecord(r->event[d], r->stream[d]));
      BM_CU(cu->cuCtxPopCurrent(&popped));
    }
  }
  BM_CU(cu->cuEventSynchronize(r->event[1]));
  return (double)(gpuhal_now_ns() - start) / 1e3 / (2.0 * hops);
}

/* ---- all-reduce bus bandwidth ---- */
static double bm_busbw(uint64_t bytes, double seconds, int n) {
  return (double)bytes * 2.0 * (n - 1) / n / seconds / 1e9;
}
/* What a row reports: bus bandwidth in GB/s, or with one device (no bus) microseconds per
 * all-reduce, which then measure the cost of issuing one. */
static double bm_rate(uint64_t bytes, double seconds, int n) {
  return n > 1 ? bm_busbw(bytes, seconds, n) : seconds * 1e6;
}

#define BM_EVENTS 64
/* The raw side, one thread per rank (a diagnostic: gpuhal issues each rank on its device's
 * worker thread, so this tells how much of a gap comes from per-rank issue itself). */
typedef struct bm_rank_thread_s {
  const gpuhal__nccl_symbols_t* nccl;
  pthread_barrier_t* go;
  CUcontext ctx;
  ncclComm_t comm;
  CUstream stream;
  const void* send;
  void* recv;
  size_t count;
  int iterations;
  const CUevent* events; /* when set: one of these, in turn, recorded after each call (as gpuhal
                          * records a pooled event per execute) */
} bm_rank_thread_t;

static void* bm_rank_thread_main(void* arg) {
  bm_rank_thread_t* t = (bm_rank_thread_t*)arg;
  CUcontext popped;
  int it;
  BM_CU(cu->cuCtxPushCurrent(t->ctx));
  pthread_barrier_wait(t->go);
  for (it = 0; it < t->iterations; ++it) {
    t->nccl->ncclAllReduce(t->send, t->recv, t->count, ncclFloat32, ncclSum, t->comm, t->stream);
    if (t->events) BM_CU(cu->cuEventRecord(t->events[it % BM_EVENTS], t->stream));
  }
  BM_CU(cu->cuStreamSynchronize(t->stream));
  BM_CU(cu->cuCtxPopCurrent(&popped));
  return NULL;
}

static double bm_raw_threads(const ncclComm_t* comms, gpuhal_buffer_t** send, gpuhal_buffer_t** recv,
                             const CUstream* streams, size_t count, int n, int iterations, const CUevent* events) {
  bm_rank_thread_t t[MD_MAX_DEVICES];
  pthread_t threads[MD_MAX_DEVICES];
  pthread_barrier_t go;
  int64_t start;
  int d;
  pthread_barrier_init(&go, NULL, (unsigned)n + 1);
  for (d = 0; d < n; ++d) {
    t[d].nccl = &f.driver->nccl;
    t[d].go = &go;
    t[d].ctx = f.devices[d]->context;
    t[d].comm = comms[d];
    t[d].stream = streams[d];
    t[d].send = (const void*)(uintptr_t)send[d]->address;
    t[d].recv = (void*)(uintptr_t)recv[d]->address;
    t[d].count = count;
    t[d].iterations = iterations;
    t[d].events = events ? events + d * BM_EVENTS : NULL;
    pthread_create(&threads[d], NULL, bm_rank_thread_main, &t[d]);
  }
  pthread_barrier_wait(&go);
  start = gpuhal_now_ns();
  for (d = 0; d < n; ++d) pthread_join(threads[d], NULL);
  pthread_barrier_destroy(&go);
  return bm_seconds(gpuhal_now_ns() - start);
}

/* Waits for each device's stream, in that device's context. */
static void bm_sync_streams(const CUstream* streams, int n) {
  CUcontext popped;
  int d;
  for (d = 0; d < n; ++d) {
    BM_CU(cu->cuCtxPushCurrent(f.devices[d]->context));
    BM_CU(cu->cuStreamSynchronize(streams[d]));
    BM_CU(cu->cuCtxPopCurrent(&popped));
  }
}

/* The raw side as the issue asks: every rank in one ncclGroupStart/End per iteration from
 * one thread, then a wait for every stream. */
static double bm_raw_grouped(const ncclComm_t* comms, gpuhal_buffer_t** send, gpuhal_buffer_t** recv,
                             const CUstream* streams, size_t count, int n, int iterations) {
  const gpuhal__nccl_symbols_t* nccl = &f.driver->nccl;
  int64_t start = gpuhal_now_ns();
  int it, d;
  for (it = 0; it < iterations; ++it) {
    nccl->ncclGroupStart();
    for (d = 0; d < n; ++d)
      nccl->ncclAllReduce((const void*)(uintptr_t)send[d]->address, (void*)(uintptr_t)recv[d]->address, count,
                          ncclFloat32, ncclSum, comms[d], streams[d]);
    nccl->ncclGroupEnd();
  }
  bm_sync_streams(streams, n);
  return bm_seconds(gpuhal_now_ns() - start);
}

/* A diagnostic for the GRAPH command buffers: the same all-reduce as bm_raw_grouped, captured
 * once from every rank's stream (one group) into one graph exec per device, then one
 * cuGraphLaunch per device per all-reduce: what NCCL itself does inside a CUDA graph. */
static void bm_raw_graphs_make(const ncclComm_t* comms, gpuhal_buffer_t** send, gpuhal_buffer_t** recv,
                               const CUstream* streams, size_t count, int n, CUgraphExec* execs) {
  const gpuhal__nccl_symbols_t* nccl = &f.driver->nccl;
  CUcontext popped;
  int d;
  for (d = 0; d < n; ++d) {
    BM_CU(cu->cuCtxPushCurrent(f.devices[d]->context));
    BM_CU(cu->cuStreamBeginCapture(streams[d], CU_STREAM_CAPTURE_MODE_RELAXED));
    BM_CU(cu->cuCtxPopCurrent(&popped));
  }
  nccl->ncclGroupStart();
  for (d = 0; d < n; ++d)
    nccl->ncclAllReduce((const void*)(uintptr_t)send[d]->address, (void*)(uintptr_t)recv[d]->address, count,
                        ncclFloat32, ncclSum, comms[d], streams[d]);
  if (nccl->ncclGroupEnd() != ncclSuccess) {
    fprintf(stderr, "bench_multi_gpu: capturing the raw all-reduce failed\n");
    exit(1);
  }
  for (d = 0; d < n; ++d) {
    CUgraph graph = NULL;
    BM_CU(cu->cuCtxPushCurrent(f.devices[d]->context));
    BM_CU(cu->cuStreamEndCapture(streams[d], &graph));
    BM_CU(cu->cuGraphInstantiateWithFlags(&execs[d], graph, 0));
    BM_CU(cu->cuGraphDestroy(graph));
    BM_CU(cu->cuCtxPopCurrent(&popped));
  }
}

static double bm_raw_graphs_run(const CUgraphExec* execs, const CUstream* streams, int n, int iterations) {
  int64_t start = gpuhal_now_ns();
  CUcontext popped;
  int it, d;
  for (it = 0; it < iterations; ++it)
    for (d = 0; d < n; ++d) {
      BM_CU(cu->cuCtxPushCurrent(f.devices[d]->context));
      BM_CU(cu->cuGraphLaunch(execs[d], streams[d]));
      BM_CU(cu->cuCtxPopCurrent(&popped));
    }
  bm_sync_streams(streams, n);
  return bm_seconds(gpuhal_now_ns() - start);
}

static int bm_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Diagnostics on device 0: the GPU time of one all-reduce (ms), timed with events recorded
 * on the queue's stream around it: issued by gpuhal (`cb`: an execute, then a host wait for
 * its signal before the closing event) or raw (`cb` NULL: ncclAllReduce on the same stream,
 * communicator and buffers; `grouped`: inside ncclGroupStart/End). The median of 5. */
static double bm_gpu_ms_one(gpuhal_command_buffer_t* cb, gpuhal_semaphore_t* sem, uint64_t* value, ncclComm_t comm,
                            gpuhal_buffer_t* send, gpuhal_buffer_t* recv, size_t count, int grouped) {
  CUstream stream = f.devices[0]->streams[0];
  CUevent e0, e1;
  CUcontext popped;
  double ms[5];
  int k;
  BM_CU(cu->cuCtxPushCurrent(f.devices[0]->context));
  BM_CU(cu->cuEventCreate(&e0, 0));
  BM_CU(cu->cuEventCreate(&e1, 0));
  for (k = 0; k < 5; ++k) {
    float t = 0;
    BM_CU(cu->cuEventRecord(e0, stream));
    if (cb) {
      uint64_t v = ++*value;
      BM_CHECK(gpuhal_queue_execute(f.devices[0], 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &v),
                                    cb, NULL));
      BM_CHECK(gpuhal_semaphore_wait(sem, v, md_seconds(60)));
    } else {
      /* grouped: inside ncclGroupStart/End, as gpuhal issues it (with the context pushed) */
      if (grouped) f.driver->nccl.ncclGroupStart();
      f.driver->nccl.ncclAllReduce((const void*)(uintptr_t)send->address, (void*)(uintptr_t)recv->address, count,
                                   ncclFloat32, ncclSum, comm, stream);
      if (grouped) f.driver->nccl.ncclGroupEnd();
    }
    BM_CU(cu->cuEventRecord(e1, stream));
    BM_CU(cu->cuEventSynchronize(e1));
    BM_CU(cu->cuEventElapsedTime(&t, e0, e1));
    ms[k] = t;
  }
  cu->cuEventDestroy(e0);
  cu->cuEventDestroy(e1);
  BM_CU(cu->cuCtxPopCurrent(&popped));
  qsort(ms, 5, sizeof(double), bm_cmp_double);
  return ms[2];
}

/* One all-reduce command buffer per device (`flags`: STREAM or GRAPH). */
static void bm_all_reduce_cbs(gpuhal_channel_t** ch, gpuhal_buffer_t** send, gpuhal_buffer_t** recv, uint64_t bytes,
                              int n, uint32_t flags, gpuhal_command_buffer_t** cbs) {
  int d;
  for (d = 0; d < n; ++d) {
    gpuhal_collective_t c;
    BM_CHECK(gpuhal_command_buffer_create(f.devices[d], GPUHAL_COMMAND_BUFFER_REUSABLE | flags, 0, &cbs[d]));
    BM_CHECK(gpuhal_command_buffer_begin(cbs[d]));
    memset(&c, 0, sizeof(c));
    c.kind = GPUHAL_COLLECTIVE_ALL_REDUCE;
    c.type = GPUHAL_ELEMENT_FLOAT32;
    c.op = GPUHAL_REDUCTION_SUM;
    c.count = bytes / 4;
    c.send = gpuhal_ref_buffer(send[d], 0);
    c.recv = gpuhal_ref_buffer(recv[d], 0);
    BM_CHECK(gpuhal_cmd_collective(cbs[d], ch[d], &c));
    BM_CHECK(gpuhal_command_buffer_end(cbs[d]));
  }
}

static void bm_release_cbs(gpuhal_command_buffer_t** cbs, int n) {
  int d;
  for (d = 0; d < n; ++d) gpuhal_command_buffer_release(cbs[d]);
}

/* Median of `reps` timings of `iterations` all-reduces, seconds per all-reduce. */
#define BM_REPS 5
static double bm_median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), bm_cmp_double);
  return v[n / 2];
}

static void bm_all_reduce(int max_mib, int min_iterations, double* worst_ratio) {
  gpuhal_channel_t* ch[MD_MAX_DEVICES];
  ncclComm_t raw[MD_MAX_DEVICES];
  int ordinals[MD_MAX_DEVICES];
  gpuhal_semaphore_t* sems[MD_MAX_DEVICES];
  uint64_t values[MD_MAX_DEVICES];
  CUevent events[MD_MAX_DEVICES * BM_EVENTS];
  uint64_t total_mib = getenv("BM_TOTAL_MIB") ? (uint64_t)atoi(getenv("BM_TOTAL_MIB")) : 1024;
  int n = f.count, d, it;
  uint64_t mib;
  *worst_ratio = 1e9;
  BM_CHECK(gpuhal_channel_create_local(f.driver, (uint32_t)n, f.devices, ch));
  for (d = 0; d < n; ++d) {
    ordinals[d] = d;
    values[d] = 0;
    BM_CHECK(gpuhal_semaphore_create(f.driver, 0, &sems[d]));
  }
  if (f.driver->nccl.ncclCommInitAll(raw, n, ordinals) != ncclSuccess) {
    fprintf(stderr, "raw ncclCommInitAll failed\n");
    exit(1);
  }
  cu->cuCtxSetCurrent(NULL); /* NCCL set a device on this thread, which had none current */
  for (d = 0; d < n; ++d) {
    CUcontext popped;
    BM_CU(cu->cuCtxPushCurrent(f.devices[d]->context));
    for (it = 0; it < BM_EVENTS; ++it) BM_CU(cu->cuEventCreate(&events[d * BM_EVENTS + it], CU_EVENT_DISABLE_TIMING));
    BM_CU(cu->cuCtxPopCurrent(&popped));
  }
  printf(
      "all-reduce, float sum over %d devices: %s, median of %d runs; gpuhal STREAM and GRAPH "
      "command buffers vs raw NCCL (all ranks in one group per call, one thread); raw-threads: one thread per "
      "rank, +event: and an event recorded after each call, as gpuhal does; raw graph: the grouped call captured "
      "into one CUDA graph per device, launched per call (diagnostics)\n",
      n, n > 1 ? "bus bandwidth GB/s" : "one rank, no bus: microseconds per all-reduce (the cost of issuing one)",
      BM_REPS);
  for (mib = getenv("BM_MIN_MIB") ? (uint64_t)atoi(getenv("BM_MIN_MIB")) : 1; mib >= 1 && mib <= (uint64_t)max_mib;
       mib *= 4) {
    uint64_t bytes = mib << 20;
    size_t count = (size_t)(bytes / 4);
    /* Enough iterations that one run all-reduces at least BM_TOTAL_MIB (default 1024) MiB:
     * a run of a few milliseconds would weigh the fixed costs of starting and ending it. */
    int iterations = (int)(total_mib / mib) > min_iterations ? (int)(total_mib / mib) : min_iterations;
    gpuhal_buffer_t *send[MD_MAX_DEVICES], *recv[MD_MAX_DEVICES];
    gpuhal_command_buffer_t* stream_cbs[MD_MAX_DEVICES];
    gpuhal_command_buffer_t* graph_cbs[MD_MAX_DEVICES];
    CUstream streams[MD_MAX_DEVICES];
    double t_stream[BM_REPS], t_graph[BM_REPS], t_raw[BM_REPS], t_threads[BM_REPS], t_events[BM_REPS];
    double t_comms[BM_REPS], t_raw_graph[BM_REPS];
    double ms, mg, mr, mt, me, mc, mrg;
    CUgraphExec raw_graphs[MD_MAX_DEVICES];
    ncclComm_t gpuhal_comms[MD_MAX_DEVICES];
    int rep;
    for (d = 0; d < n; ++d) {
      BM_CHECK(gpuhal_buffer_allocate(f.devices[d], GPUHAL_MEMORY_DEVICE, bytes, &send[d]));
      BM_CHECK(gpuhal_buffer_allocate(f.devices[d], GPUHAL_MEMORY_DEVICE, bytes, &recv[d]));
      streams[d] = f.devices[d]->streams[0]; /* raw calls use the queue's own stream */
    }
    for (d = 0; d < n; ++d) gpuhal_comms[d] = ch[d]->comm;
    bm_all_reduce_cbs(ch, send, recv, bytes, n, GPUHAL_COMMAND_BUFFER_STREAM, stream_cbs);
    bm_all_reduce_cbs(ch, send, recv, bytes, n, GPUHAL_COMMAND_BUFFER_GRAPH, graph_cbs);
    /* warm up every variant */
    bm_run_chains(stream_cbs, sems, values, n, 2);
    bm_run_chains(graph_cbs, sems, values, n, 2);
    bm_raw_grouped(raw, send, recv, streams, count, n, 2);
    bm_raw_threads(raw, send, recv, streams, count, n, 2, NULL);
    bm_raw_graphs_make(raw, send, recv, streams, count, n, raw_graphs);
    bm_raw_graphs_run(raw_graphs, streams, n, 2);
    for (rep = 0; rep < BM_REPS; ++rep) {
      t_raw[rep] = bm_raw_grouped(raw, send, recv, streams, count, n, iterations) / iterations;
      t_stream[rep] = bm_run_chains(stream_cbs, sems, values, n, iterations) / iterations;
      t_graph[rep] = bm_run_chains(graph_cbs, sems, values, n, iterations) / iterations;
      t_threads[rep] = bm_raw_threads(raw, send, recv, streams, count, n, iterations, NULL) / iterations;
      t_events[rep] = bm_raw_threads(raw, send, recv, streams, count, n, iterations, events) / iterations;
      t_comms[rep] = bm_raw_threads(gpuhal_comms, send, recv, streams, count, n, iterations, events) / iterations;
      t_raw_graph[rep] = bm_raw_graphs_run(raw_graphs, streams, n, iterations) / iterations;
    }
    for (d = 0; d < n; ++d) cu->cuGraphExecDestroy(raw_graphs[d]);
    ms = bm_median(t_stream, BM_REPS);
    mg = bm_median(t_graph, BM_REPS);
    mr = bm_median(t_raw, BM_REPS);
    mt = bm_median(t_threads, BM_REPS);
    me = bm_median(t_events, BM_REPS);
    mc = bm_median(t_comms, BM_REPS);
    mrg = bm_median(t_raw_graph, BM_REPS);
    printf(
        "all-reduce %5llu MiB x %3d: gpuhal stream %7.2f graph %7.2f | raw %7.2f | raw-threads %7.2f, "
        "+event %7.2f, on gpuhal's communicators %7.2f, raw graph %7.2f | ratio stream %.3f graph %.3f (target >= "
        "0.95), graph to raw graph %.3f\n",
        (unsigned long long)mib, iterations, bm_rate(bytes, ms, n), bm_rate(bytes, mg, n), bm_rate(bytes, mr, n),
        bm_rate(bytes, mt, n), bm_rate(bytes, me, n), bm_rate(bytes, mc, n), bm_rate(bytes, mrg, n), mr / ms, mr / mg,
        mrg / mg);
    fflush(stdout);
    if (getenv("BM_GPU_TIME"))
      printf(
          "  one all-reduce's GPU time (events around it on the queue's stream): gpuhal STREAM %.3f ms, GRAPH %.3f "
          "ms, raw %.3f ms, raw grouped %.3f ms, raw on gpuhal's communicator grouped %.3f ms\n",
          bm_gpu_ms_one(stream_cbs[0], sems[0], &values[0], NULL, NULL, NULL, 0, 0),
          bm_gpu_ms_one(graph_cbs[0], sems[0], &values[0], NULL, NULL, NULL, 0, 0),
          bm_gpu_ms_one(NULL, NULL, NULL, raw[0], send[0], recv[0], count, 0),
          bm_gpu_ms_one(NULL, NULL, NULL, raw[0], send[0], recv[0], count, 1),
          bm_gpu_ms_one(NULL, NULL, NULL, gpuhal_comms[0], send[0], recv[0], count, 1));
    if (mr / ms < *worst_ratio) *worst_ratio = mr / ms;
    if (mr / mg < *worst_ratio) *worst_ratio = mr / mg;
    bm_release_cbs(stream_cbs, n);
    bm_release_cbs(graph_cbs, n);
    for (d = 0; d < n; ++d) {
      gpuhal_buffer_release(send[d]);
      gpuhal_buffer_release(recv[d]);
    }
    if (mib < (uint64_t)max_mib && mib * 4 > (uint64_t)max_mib) mib = (uint64_t)max_mib / 4; /* end on max */
  }
  for (d = 0; d < n; ++d) {
    for (it = 0; it < BM_EVENTS; ++it) cu->cuEventDestroy(events[d * BM_EVENTS + it]);
    f.driver->nccl.ncclCommDestroy(raw[d]);
    gpuhal_channel_release(ch[d]);
    gpuhal_semaphore_release(sems[d]);
  }
}

int main(int argc, char** argv) {
  int max_mib = argc > 1 ? atoi(argv[1]) : 1024;
  int iterations = argc > 2 ? atoi(argv[2]) : 20;
  bm_raw_t raw;
  gpuhal_device_params_t params;
  double hop_gpuhal, hop_raw, scaling, worst = 0;
  const char* nvls = getenv("NCCL_NVLS_ENABLE");
  if (!nvls || strcmp(nvls, "0") != 0) setenv("NCCL_NVLS_ENABLE", "0", 1); /* never NVLink multicast */
  if (max_mib < 1) max_mib = 1;
  if (iterations < 1) iterations = 1;
  /* gpuhal's host waits spin through the run, as the raw side's cuStreamSynchronize does:
   * a wait that slept between polls would add its wake-up to each run (up to 1/16 of it). */
  memset(&params, 0, sizeof(params));
  params.tuning.host_wait_spin_ns = 1000000000;
  /* BM_QUEUE_ENTRIES_MAX: tuning.queue_entries_max (e.g. -1: no bound on a queue's stream) */
  if (getenv("BM_QUEUE_ENTRIES_MAX")) params.tuning.queue_entries_max = atoi(getenv("BM_QUEUE_ENTRIES_MAX"));
  md_device_params = &params;
  if (!md_open(&f, MD_MAX_DEVICES, 1, NULL)) {
    fprintf(stderr, "bench_multi_gpu needs a device\n");
    return 77;
  }
  cu = f.devices[0]->cu;
  BM_CHECK(md_load_kernels(&f));
  printf("bench_multi_gpu: %d devices (%s)%s\n", f.count, gpuhal_driver_cuda_library(f.driver),
         tu_softcuda_symbol("softcuda_query_calls") ? " -- softcuda: timings are meaningless" : "");
  if (f.count == 1) {
    /* One GPU: no scaling, hop or bus bandwidth, but the cost of issuing a collective
     * (small all-reduces on a one-rank channel) against raw NCCL calls. */
    if (gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_NCCL)) {
      bm_all_reduce(max_mib, iterations, &worst);
      printf("summary: 1 device; worst all-reduce rate ratio %.3f (raw time / gpuhal time)\n", worst);
    } else {
      printf("summary: 1 device and no NCCL: nothing to measure\n");
    }
    md_close(&f);
    return 0;
  }
  scaling = bm_scaling();
  bm_raw_open(&raw);
  bm_hop_raw(&raw, 50);
  hop_raw = bm_hop_raw(&raw, 2000);
  bm_hop_gpuhal(50);
  hop_gpuhal = bm_hop_gpuhal(2000);
  bm_raw_close(&raw);
  printf("cross-device hop: gpuhal %.2f us, raw cuEventRecord + cuStreamWaitEvent %.2f us, ratio %.2f\n", hop_gpuhal,
         hop_raw, hop_gpuhal / hop_raw);
  if (gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_NCCL)) {
    bm_all_reduce(max_mib, iterations, &worst);
    printf("summary: scaling x%.2f (>= 1.8: %s), hop ratio %.2f, worst all-reduce ratio %.3f (>= 0.95: %s)\n", scaling,
           scaling >= 1.8 ? "yes" : "NO", hop_gpuhal / hop_raw, worst, worst >= 0.95 ? "yes" : "NO");
  } else {
    printf("all-reduce: skipped (NCCL not loaded)\nsummary: scaling x%.2f (>= 1.8: %s), hop ratio %.2f\n", scaling,
           scaling >= 1.8 ? "yes" : "NO", hop_gpuhal / hop_raw);
  }
  md_close(&f);
  return 0;
}
