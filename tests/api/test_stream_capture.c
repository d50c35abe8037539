/* test_stream_capture: an application's CUDA stream capture in the default (global) mode
 * and gpuhal, side by side.
 *
 * ML runtimes (PyTorch's CUDA graphs, ...) capture their own streams with
 * cuStreamBeginCapture(CU_STREAM_CAPTURE_MODE_GLOBAL). While such a capture is going, CUDA
 * refuses "potentially unsafe" calls (queries, synchronizes, plain allocations, synchronous
 * copies, module loads, ...) on every thread in global mode, the capturing thread included,
 * with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and invalidates the capture. gpuhal makes such
 * calls on its own threads (the completion thread's event queries) and on the application's
 * (host waits, buffer calls, loads): before it ran them in relaxed mode, its work failed
 * and the application's cuStreamEndCapture returned CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
 *
 * Here an application thread captures a stream of its own (in the primary context gpuhal's
 * device uses, and in a context of its own) while gpuhal work submitted before the capture
 * completes during it, and while that thread, the main thread and one more make every kind
 * of gpuhal call. Every call must succeed with the right values, the capture must end valid
 * and its graph run, and each thread's capture mode must be what it was (global). The
 * application's CUDA calls go through the driver gpuhal loaded (GPUHAL_CUDA_LIBRARY, else
 * libcuda.so.1), so this runs on softcuda and on a GPU alike. CTest runs it on both
 * semaphore paths (test_stream_capture_events: GPUHAL_SEMAPHORE_MEMOPS=0). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuhal.h"
#include "test_util.h"

/* ---- the application's CUDA calls (plain C types: CUresult is an int, handles pointers) ---- */

#define SC_GLOBAL 0  /* CU_STREAM_CAPTURE_MODE_GLOBAL */
#define SC_RELAXED 2 /* CU_STREAM_CAPTURE_MODE_RELAXED */
#define SC_CAPTURE_ACTIVE 1
#define SC_NON_BLOCKING 1 /* CU_STREAM_NON_BLOCKING: gpuhal's legacy-stream copies do not join the capture */
#define SC_WORDS 64

typedef struct sc_cuda_s {
  int (*DeviceGet)(int* device, int ordinal);
  int (*DevicePrimaryCtxRetain)(void** ctx, int device);
  int (*DevicePrimaryCtxRelease)(int device);
  int (*CtxCreate)(void** ctx, unsigned flags, int device);
  int (*CtxDestroy)(void* ctx);
  int (*CtxPushCurrent)(void* ctx);
  int (*CtxPopCurrent)(void** ctx);
  int (*StreamCreate)(void** stream, unsigned flags);
  int (*StreamDestroy)(void* stream);
  int (*StreamSynchronize)(void* stream);
  int (*MemAlloc)(unsigned long long* ptr, size_t size);
  int (*MemFree)(unsigned long long ptr);
  int (*MemsetD32Async)(unsigned long long ptr, unsigned value, size_t count, void* stream);
  int (*MemcpyDtoH)(void* dst, unsigned long long src, size_t size);
  int (*StreamBeginCapture)(void* stream, int mode);
  int (*StreamEndCapture)(void* stream, void** graph);
  int (*StreamIsCapturing)(void* stream, int* status);
  int (*ThreadExchangeStreamCaptureMode)(int* mode);
  int (*GraphInstantiateWithFlags)(void** exec, void* graph, unsigned long long flags);
  int (*GraphLaunch)(void* exec, void* stream);
  int (*GraphExecDestroy)(void* exec);
  int (*GraphDestroy)(void* graph);
} sc_cuda_t;

static sc_cuda_t sc_cu;

static int sc_load(void* lib, const char* name, void* slot) {
  void* p = dlsym(lib, name);
  if (!p) fprintf(stderr, "  no %s in the CUDA driver\n", name);
  memcpy(slot, &p, sizeof(p));
  return p != NULL;
}

/* The driver gpuhal loaded (it is loaded once a gpuhal driver exists). */
static int sc_cuda_open(void) {
  const char* path = getenv("GPUHAL_CUDA_LIBRARY");
  void* lib = dlopen(path && path[0] ? path : "libcuda.so.1", RTLD_NOW);
  int ok = lib != NULL;
  ok = ok && sc_load(lib, "cuDeviceGet", &sc_cu.DeviceGet);
  ok = ok && sc_load(lib, "cuDevicePrimaryCtxRetain", &sc_cu.DevicePrimaryCtxRetain);
  ok = ok && sc_load(lib, "cuDevicePrimaryCtxRelease_v2", &sc_cu.DevicePrimaryCtxRelease);
  ok = ok && sc_load(lib, "cuCtxCreate_v2", &sc_cu.CtxCreate);
  ok = ok && sc_load(lib, "cuCtxDestroy_v2", &sc_cu.CtxDestroy);
  ok = ok && sc_load(lib, "cuCtxPushCurrent_v2", &sc_cu.CtxPushCurrent);
  ok = ok && sc_load(lib, "cuCtxPopCurrent_v2", &sc_cu.CtxPopCurrent);
  ok = ok && sc_load(lib, "cuStreamCreate", &sc_cu.StreamCreate);
  ok = ok && sc_load(lib, "cuStreamDestroy_v2", &sc_cu.StreamDestroy);
  ok = ok && sc_load(lib, "cuStreamSynchronize", &sc_cu.StreamSynchronize);
  ok = ok && sc_load(lib, "cuMemAlloc_v2", &sc_cu.MemAlloc);
  ok = ok && sc_load(lib, "cuMemFree_v2", &sc_cu.MemFree);
  ok = ok && sc_load(lib, "cuMemsetD32Async", &sc_cu.MemsetD32Async);
  ok = ok && sc_load(lib, "cuMemcpyDtoH_v2", &sc_cu.MemcpyDtoH);
  ok = ok && sc_load(lib, "cuStreamBeginCapture_v2", &sc_cu.StreamBeginCapture);
  ok = ok && sc_load(lib, "cuStreamEndCapture", &sc_cu.StreamEndCapture);
  ok = ok && sc_load(lib, "cuStreamIsCapturing", &sc_cu.StreamIsCapturing);
  ok = ok && sc_load(lib, "cuThreadExchangeStreamCaptureMode", &sc_cu.ThreadExchangeStreamCaptureMode);
  ok = ok && sc_load(lib, "cuGraphInstantiateWithFlags", &sc_cu.GraphInstantiateWithFlags);
  ok = ok && sc_load(lib, "cuGraphLaunch", &sc_cu.GraphLaunch);
  ok = ok && sc_load(lib, "cuGraphExecDestroy", &sc_cu.GraphExecDestroy);
  ok = ok && sc_load(lib, "cuGraphDestroy", &sc_cu.GraphDestroy);
  return ok; /* the handle stays open: gpuhal holds the library anyway */
}

/* The calling thread's capture mode, left as it was. */
static int sc_thread_mode(void) {
  int mode = SC_GLOBAL;
  if (sc_cu.ThreadExchangeStreamCaptureMode(&mode) != 0) return -1;
  if (mode != SC_GLOBAL) {
    int back = mode;
    sc_cu.ThreadExchangeStreamCaptureMode(&back);
  }
  return mode;
}

/* ---- gpuhal calls of every kind ---- */

static gpuhal_timeout_t sc_seconds(int s) { return gpuhal_timeout_relative_ns((int64_t)s * 1000000000ll); }

typedef struct sc_fixture_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  char* ptx;
  size_t ptx_size;
} sc_fixture_t;

/* The first failure of a round, with where it was. */
#define SC_STEP(expr)                                                                         \
  do {                                                                                        \
    if (!st) {                                                                                \
      st = (expr);                                                                            \
      if (st) st = gpuhal_status_annotate(st, "round %u, line %d: %s", tag, __LINE__, #expr); \
    }                                                                                         \
  } while (0)
#define SC_EXPECT(cond)                                                                                         \
  do {                                                                                                          \
    if (!st && !(cond))                                                                                         \
      st = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "round %u, line %d: %s is false", tag, __LINE__, #cond); \
  } while (0)

static gpuhal_status_t sc_host_fn(void* user) {
  __atomic_add_fetch((int*)user, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/* One of each: buffer allocate / write / read / release, a GRAPH and a STREAM command buffer
 * recorded, ended and executed, host waits (one that blocks, zero-timeout polls, a query),
 * work released by a host signal on this thread, a host call, alloca / dealloca, an
 * executable loaded and its kernel run, and a device wait for idle. `tag` makes the values
 * this round's own. */
static gpuhal_status_t sc_round(sc_fixture_t* f, uint32_t tag) {
  gpuhal_status_t st = NULL;
  gpuhal_semaphore_t *s = NULL, *gate = NULL;
  gpuhal_buffer_t *buffer = NULL, *alloca_buffer = NULL;
  gpuhal_command_buffer_t *graph_cb = NULL, *stream_cb = NULL;
  gpuhal_executable_t* exe = NULL;
  uint32_t words[SC_WORDS], got[SC_WORDS], update[4] = {tag, tag + 1, tag + 2, tag + 3}, fill = tag ^ 0x5A5A0000u;
  uint64_t v1 = 1, v2 = 2, v3 = 3, v4 = 4, v5 = 5, v6 = 6, value = 0;
  int host_calls = 0, i;
  for (i = 0; i < SC_WORDS; ++i) words[i] = tag * 1000u + (uint32_t)i;
  SC_STEP(gpuhal_semaphore_create(f->driver, 0, &s));
  SC_STEP(gpuhal_semaphore_create(f->driver, 0, &gate));
  /* buffers: synchronous copies, plain allocation */
  SC_STEP(gpuhal_buffer_allocate(f->device, GPUHAL_MEMORY_DEVICE, sizeof(words), &buffer));
  SC_STEP(gpuhal_buffer_write(buffer, 0, words, sizeof(words)));
  SC_STEP(gpuhal_buffer_read(buffer, 0, got, sizeof(got)));
  SC_EXPECT(memcmp(got, words, sizeof(got)) == 0);
  /* a GRAPH command buffer (its end builds and instantiates the graph), executed */
  SC_STEP(gpuhal_command_buffer_create(f->device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &graph_cb));
  SC_STEP(gpuhal_command_buffer_begin(graph_cb));
  SC_STEP(gpuhal_cmd_fill(graph_cb, gpuhal_ref_buffer(buffer, 0), sizeof(words) / 2, &fill, 4));
  SC_STEP(gpuhal_cmd_update(graph_cb, update, gpuhal_ref_buffer(buffer, sizeof(words) / 2), sizeof(update)));
  SC_STEP(gpuhal_command_buffer_end(graph_cb));
  SC_STEP(gpuhal_queue_execute(f->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &v1),
                               graph_cb, NULL));
  SC_STEP(gpuhal_semaphore_wait(s, 1, sc_seconds(30)));
  SC_STEP(gpuhal_semaphore_wait(s, 1, gpuhal_timeout_immediate())); /* a poll */
  SC_STEP(gpuhal_semaphore_query(s, &value));
  SC_EXPECT(value == 1);
  SC_STEP(gpuhal_buffer_read(buffer, 0, got, sizeof(got)));
  for (i = 0; i < SC_WORDS / 2; ++i) SC_EXPECT(got[i] == fill);
  SC_EXPECT(memcmp(&got[SC_WORDS / 2], update, sizeof(update)) == 0);
  /* a STREAM command buffer, held by a gate the host opens on this thread (which issues it) */
  SC_STEP(gpuhal_command_buffer_create(f->device, GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE, 0,
                                       &stream_cb));
  SC_STEP(gpuhal_command_buffer_begin(stream_cb));
  SC_STEP(gpuhal_cmd_fill(stream_cb, gpuhal_ref_buffer(buffer, 0), sizeof(words), &tag, 4));
  SC_STEP(gpuhal_command_buffer_end(stream_cb));
  SC_STEP(gpuhal_queue_execute(f->device, 0, gpuhal_semaphore_list_one(&gate, &v1), gpuhal_semaphore_list_one(&s, &v2),
                               stream_cb, NULL));
  SC_STEP(gpuhal_queue_host_call(f->device, 0, gpuhal_semaphore_list_one(&s, &v2), gpuhal_semaphore_list_one(&s, &v3),
                                 sc_host_fn, &host_calls));
  SC_STEP(gpuhal_semaphore_signal(gate, 1));
  if (!st) { /* zero-timeout polls until it is there: each a look, never a wait */
    gpuhal_status_t poll;
    while ((poll = gpuhal_semaphore_wait(s, 3, gpuhal_timeout_immediate())) != NULL &&
           gpuhal_status_code(poll) == GPUHAL_STATUS_DEADLINE_EXCEEDED)
      gpuhal_status_free(poll);
    st = poll;
  }
  SC_STEP(gpuhal_semaphore_wait(s, 3, sc_seconds(30)));
  SC_EXPECT(__atomic_load_n(&host_calls, __ATOMIC_SEQ_CST) == 1);
  SC_STEP(gpuhal_buffer_read(buffer, 0, got, sizeof(got)));
  for (i = 0; i < SC_WORDS; ++i) SC_EXPECT(got[i] == tag);
  /* alloca / dealloca */
  SC_STEP(gpuhal_queue_alloca(f->device, 0, gpuhal_semaphore_list_one(&s, &v3), gpuhal_semaphore_list_one(&s, &v4),
                              4096, &alloca_buffer));
  SC_STEP(gpuhal_semaphore_wait(s, 4, sc_seconds(30)));
  if (alloca_buffer) {
    SC_STEP(gpuhal_buffer_write(alloca_buffer, 0, words, sizeof(words)));
    SC_STEP(gpuhal_buffer_read(alloca_buffer, 0, got, sizeof(got)));
    SC_EXPECT(memcmp(got, words, sizeof(got)) == 0);
    SC_STEP(gpuhal_queue_dealloca(f->device, 0, gpuhal_semaphore_list_one(&s, &v4), gpuhal_semaphore_list_one(&s, &v5),
                                  alloca_buffer));
    SC_STEP(gpuhal_semaphore_wait(s, 5, sc_seconds(30)));
  }
  /* an executable (a module load) and its kernel */
  SC_STEP(gpuhal_executable_load(f->device, f->ptx, f->ptx_size + 1, &exe));
  SC_STEP(tu_check_fill_u32(f->driver, f->device, exe, 0xC0DE0000u + tag));
  /* one more execute, then a wait for the whole device */
  SC_STEP(gpuhal_queue_execute(f->device, 0, gpuhal_semaphore_list_one(&s, &v5), gpuhal_semaphore_list_one(&s, &v6),
                               stream_cb, NULL));
  SC_STEP(gpuhal_device_wait_idle(f->device, sc_seconds(30)));
  SC_STEP(gpuhal_semaphore_query(s, &value));
  SC_EXPECT(value == 6);
  gpuhal_executable_release(exe);
  gpuhal_buffer_release(alloca_buffer);
  gpuhal_command_buffer_release(stream_cb);
  gpuhal_command_buffer_release(graph_cb);
  gpuhal_buffer_release(buffer);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(s);
  return st;
}

/* ---- the capture ---- */

typedef struct sc_run_s {
  sc_fixture_t* f;
  int own_context;      /* capture in a context of its own, not the device's primary one */
  int capturing;        /* set once the capture began */
  int others_done;      /* set once the other threads' rounds ended */
  gpuhal_status_t mine; /* the capturing thread's round */
  int capture_status;   /* cuStreamIsCapturing just before the end */
  int end_result;       /* cuStreamEndCapture */
  int graph_ran;        /* the graph, launched, wrote what was captured */
  int mode_after;       /* the capturing thread's mode after everything */
  int cuda_failed;      /* an application CUDA call that must work failed */
} sc_run_t;

typedef struct sc_helper_s {
  sc_fixture_t* f;
  uint32_t tag;
  gpuhal_status_t status;
  int mode_after;
} sc_helper_t;

static void sc_wait_flag(const int* flag) {
  while (!__atomic_load_n(flag, __ATOMIC_SEQ_CST)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

#define SC_CU(run, call)                                                    \
  do {                                                                      \
    int r_ = (call);                                                        \
    if (r_ != 0) {                                                          \
      fprintf(stderr, "  %s:%d: %s = %d\n", __FILE__, __LINE__, #call, r_); \
      (run)->cuda_failed = 1;                                               \
    }                                                                       \
  } while (0)

static void* sc_capture_main(void* arg) {
  sc_run_t* run = (sc_run_t*)arg;
  void *ctx = NULL, *stream = NULL, *graph = NULL, *exec = NULL;
  unsigned long long mem = 0;
  uint32_t host[SC_WORDS];
  int device = 0, i, ok = 1;
  SC_CU(run, sc_cu.DeviceGet(&device, 0));
  if (run->own_context) {
    SC_CU(run, sc_cu.CtxCreate(&ctx, 0, device)); /* current on this thread */
  } else {
    SC_CU(run, sc_cu.DevicePrimaryCtxRetain(&ctx, device));
    SC_CU(run, sc_cu.CtxPushCurrent(ctx));
  }
  SC_CU(run, sc_cu.MemAlloc(&mem, sizeof(host)));
  SC_CU(run, sc_cu.StreamCreate(&stream, SC_NON_BLOCKING));
  SC_CU(run, sc_cu.StreamBeginCapture(stream, SC_GLOBAL));
  SC_CU(run, sc_cu.MemsetD32Async(mem, 3, SC_WORDS / 2, stream));
  __atomic_store_n(&run->capturing, 1, __ATOMIC_SEQ_CST);
  /* This thread's own gpuhal calls, inside its own global capture. */
  run->mine = sc_round(run->f, 100);
  sc_wait_flag(&run->others_done);
  SC_CU(run, sc_cu.MemsetD32Async(mem + sizeof(host) / 2, 4, SC_WORDS / 2, stream));
  SC_CU(run, sc_cu.StreamIsCapturing(stream, &run->capture_status));
  run->end_result = sc_cu.StreamEndCapture(stream, &graph);
  if (run->end_result == 0 && graph) {
    memset(host, 0, sizeof(host));
    SC_CU(run, sc_cu.GraphInstantiateWithFlags(&exec, graph, 0));
    if (exec) SC_CU(run, sc_cu.GraphLaunch(exec, stream));
    SC_CU(run, sc_cu.StreamSynchronize(stream));
    SC_CU(run, sc_cu.MemcpyDtoH(host, mem, sizeof(host)));
    for (i = 0; i < SC_WORDS; ++i) ok &= host[i] == (i < SC_WORDS / 2 ? 3u : 4u);
    run->graph_ran = ok;
    if (exec) SC_CU(run, sc_cu.GraphExecDestroy(exec));
    SC_CU(run, sc_cu.GraphDestroy(graph));
  }
  run->mode_after = sc_thread_mode();
  SC_CU(run, sc_cu.StreamDestroy(stream));
  SC_CU(run, sc_cu.MemFree(mem));
  if (run->own_context) {
    SC_CU(run, sc_cu.CtxDestroy(ctx));
  } else {
    void* popped = NULL;
    SC_CU(run, sc_cu.CtxPopCurrent(&popped));
    SC_CU(run, sc_cu.DevicePrimaryCtxRelease(device));
  }
  return NULL;
}

static void* sc_helper_main(void* arg) {
  sc_helper_t* h = (sc_helper_t*)arg;
  h->status = sc_round(h->f, h->tag);
  h->mode_after = sc_thread_mode();
  return NULL;
}

static int sc_open(sc_fixture_t* f) {
  gpuhal_status_t st;
  memset(f, 0, sizeof(*f));
  st = gpuhal_driver_create(NULL, &f->driver);
  if (!st) st = gpuhal_device_create(f->driver, 0, NULL, &f->device);
  if (st) {
    fprintf(stderr, "  setup: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    gpuhal_driver_release(f->driver);
    return 0;
  }
  f->ptx = tu_read_kernel_file("fill_u32.ptx", &f->ptx_size);
  return f->ptx != NULL && sc_cuda_open();
}

static void sc_close(sc_fixture_t* f) {
  free(f->ptx);
  gpuhal_device_release(f->device);
  gpuhal_driver_release(f->driver);
}

/* gpuhal work submitted before the capture, released and completed during it; every kind
 * of gpuhal call on three threads during it; then the capture ends valid. */
static void sc_capture_case(int own_context) {
  sc_fixture_t f;
  sc_run_t run;
  sc_helper_t helper;
  pthread_t capturer, other;
  gpuhal_semaphore_t *gate = NULL, *done = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_status_t lost;
  uint32_t got[SC_WORDS], fill = 0xFEEDu;
  uint64_t one = 1, two = 2;
  int host_calls = 0, i;
  if (!sc_open(&f)) TU_SKIP("no device, kernel or CUDA entry point");
  memset(&run, 0, sizeof(run));
  run.f = &f;
  run.own_context = own_context;
  run.capture_status = -1;
  run.end_result = -1;
  memset(&helper, 0, sizeof(helper));
  helper.f = &f;
  helper.tag = 200;
  /* In flight before the capture: an execute and a host call held by a gate. */
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &done));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, sizeof(got), &buffer));
  TU_CHECK_OK(gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buffer, 0), sizeof(got), &fill, 4));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                   gpuhal_semaphore_list_one(&done, &one), cb, NULL));
  TU_CHECK_OK(gpuhal_queue_host_call(f.device, 1 % gpuhal_device_queue_count(f.device),
                                     gpuhal_semaphore_list_one(&done, &one), gpuhal_semaphore_list_one(&done, &two),
                                     sc_host_fn, &host_calls));
  TU_REQUIRE(pthread_create(&capturer, NULL, sc_capture_main, &run) == 0);
  sc_wait_flag(&run.capturing);
  /* The capture is going: the held work runs and completes now. */
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_REQUIRE(pthread_create(&other, NULL, sc_helper_main, &helper) == 0);
  TU_CHECK_OK(sc_round(&f, 300));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 2, sc_seconds(30)));
  TU_CHECK_EQ_INT(__atomic_load_n(&host_calls, __ATOMIC_SEQ_CST), 1);
  TU_CHECK_OK(gpuhal_buffer_read(buffer, 0, got, sizeof(got)));
  for (i = 0; i < SC_WORDS; ++i) TU_CHECK_EQ_INT(got[i], fill);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, sc_seconds(30)));
  pthread_join(other, NULL);
  __atomic_store_n(&run.others_done, 1, __ATOMIC_SEQ_CST);
  pthread_join(capturer, NULL);
  TU_CHECK_OK(helper.status);
  TU_CHECK_OK(run.mine);
  TU_CHECK(!run.cuda_failed);
  TU_CHECK_EQ_INT(run.capture_status, SC_CAPTURE_ACTIVE); /* not invalidated */
  TU_CHECK_EQ_INT(run.end_result, 0);                     /* CUDA_SUCCESS, not ..._INVALIDATED (901) */
  TU_CHECK(run.graph_ran);
  /* gpuhal gave every application thread its mode back */
  TU_CHECK_EQ_INT(run.mode_after, SC_GLOBAL);
  TU_CHECK_EQ_INT(helper.mode_after, SC_GLOBAL);
  TU_CHECK_EQ_INT(sc_thread_mode(), SC_GLOBAL);
  lost = gpuhal_device_lost_status(f.device);
  TU_CHECK(lost == NULL);
  gpuhal_status_free(lost);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buffer);
  gpuhal_semaphore_release(done);
  gpuhal_semaphore_release(gate);
  sc_close(&f);
}

TU_TEST(capture_global_in_primary_context) { sc_capture_case(0); }
TU_TEST(capture_global_in_own_context) { sc_capture_case(1); }

/* The application's mode comes back as it was, whatever it was: gpuhal calls made on a
 * thread in relaxed or thread-local mode leave that mode. */
TU_TEST(caller_mode_kept) {
  sc_fixture_t f;
  int modes[2] = {SC_RELAXED, 1 /* CU_STREAM_CAPTURE_MODE_THREAD_LOCAL */}, k;
  if (!sc_open(&f)) TU_SKIP("no device, kernel or CUDA entry point");
  for (k = 0; k < 2; ++k) {
    int mode = modes[k], back;
    TU_CHECK_EQ_INT(sc_cu.ThreadExchangeStreamCaptureMode(&mode), 0);
    TU_CHECK_OK(sc_round(&f, 400u + (uint32_t)k));
    back = SC_GLOBAL;
    TU_CHECK_EQ_INT(sc_cu.ThreadExchangeStreamCaptureMode(&back), 0);
    TU_CHECK_EQ_INT(back, modes[k]);
  }
  sc_close(&f);
}

TU_MAIN(TU_CASE(capture_global_in_primary_context), TU_CASE(capture_global_in_own_context), TU_CASE(caller_mode_kept))
