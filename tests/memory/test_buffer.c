/* Buffers: device, pinned-host and managed memory; synchronous read/write round trips at
 * odd offsets and sizes; retain/release; the pending (queue_alloca) buffer internals and
 * the device pool. Runs on softcuda and unchanged on a real GPU. */
#include "test_internals.h"
#include "test_util.h"

#include <pthread.h>

typedef struct fixture_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
} fixture_t;

/* 0 when there is no device to test on (the case then skips). */
static int fixture_open(fixture_t* f) {
  gpuhal_status_t s;
  int count = 0;
  memset(f, 0, sizeof(*f));
  s = gpuhal_driver_create(NULL, &f->driver);
  if (!s) s = gpuhal_driver_device_count(f->driver, &count);
  if (!s && count > 0) s = gpuhal_device_create(f->driver, 0, NULL, &f->device);
  if (s) fprintf(stderr, "  setup: %s\n", gpuhal_status_message(s));
  gpuhal_status_free(s);
  if (!f->device) {
    gpuhal_driver_release(f->driver);
    f->driver = NULL;
    return 0;
  }
  return 1;
}
static void fixture_close(fixture_t* f) {
  gpuhal_device_release(f->device);
  gpuhal_driver_release(f->driver);
}

static uint32_t rng_state = 12345;
static unsigned char rng_byte(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return (unsigned char)(rng_state >> 24);
}
static void fill_random(unsigned char* p, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) p[i] = rng_byte();
}

static const char* kind_name(int kind) {
  return kind == GPUHAL_MEMORY_DEVICE ? "device" : kind == GPUHAL_MEMORY_HOST_PINNED ? "pinned" : "managed";
}

TU_TEST(round_trips_of_every_kind) {
  fixture_t f;
  int kind;
  (void)tu_softcuda;
  if (!fixture_open(&f)) TU_SKIP("no device");
  for (kind = 0; kind <= 2; ++kind) {
    enum { SIZE = 4099 };
    static const uint64_t pieces[][2] = {{0, SIZE}, {1, 1}, {3, 17}, {7, 1000}, {4095, 4}, {SIZE - 1, 1}, {13, 2049}};
    gpuhal_buffer_t* buffer = NULL;
    unsigned char* shadow = (unsigned char*)calloc(1, SIZE);
    unsigned char* data = (unsigned char*)calloc(1, SIZE);
    unsigned char* back = (unsigned char*)calloc(1, SIZE);
    uint64_t address = 0;
    size_t i;
    if (kind == GPUHAL_MEMORY_MANAGED && !f.device->info.managed_memory) {
      free(shadow), free(data), free(back);
      continue;
    }
    fprintf(stderr, "  %s memory\n", kind_name(kind));
    TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, (gpuhal_memory_kind_t)kind, SIZE, &buffer));
    TU_CHECK_EQ_INT(gpuhal_buffer_size(buffer), SIZE);
    TU_CHECK_EQ_INT(gpuhal_buffer_kind(buffer), kind);
    TU_CHECK(gpuhal_buffer_device(buffer) == f.device);
    TU_CHECK_OK(gpuhal_buffer_device_address(buffer, &address));
    TU_CHECK(address != 0);
    TU_CHECK((gpuhal_buffer_host_pointer(buffer) != NULL) == (kind != GPUHAL_MEMORY_DEVICE));
    /* Write pieces of random data, keep a shadow copy, read everything back. */
    for (i = 0; i < sizeof(pieces) / sizeof(pieces[0]); ++i) {
      uint64_t offset = pieces[i][0], size = pieces[i][1];
      fill_random(data, (size_t)size);
      TU_CHECK_OK(gpuhal_buffer_write(buffer, offset, data, size));
      memcpy(shadow + offset, data, (size_t)size);
      memset(back, 0xAB, SIZE);
      TU_CHECK_OK(gpuhal_buffer_read(buffer, offset, back, size));
      TU_CHECK(memcmp(back, data, (size_t)size) == 0);
    }
    memset(back, 0, SIZE);
    TU_CHECK_OK(gpuhal_buffer_read(buffer, 0, back, SIZE));
    TU_CHECK(memcmp(back, shadow, SIZE) == 0);
    /* Reads at odd offsets see the same bytes. */
    TU_CHECK_OK(gpuhal_buffer_read(buffer, 5, back, 333));
    TU_CHECK(memcmp(back, shadow + 5, 333) == 0);
    if (kind == GPUHAL_MEMORY_HOST_PINNED) /* pinned memory is the host's own */
      TU_CHECK(memcmp(gpuhal_buffer_host_pointer(buffer), shadow, SIZE) == 0);
    gpuhal_buffer_release(buffer);
    free(shadow);
    free(data);
    free(back);
  }
  fixture_close(&f);
}

TU_TEST(retain_and_release) {
  fixture_t f;
  gpuhal_buffer_t* buffer = NULL;
  unsigned char byte = 42, back = 0;
  uint64_t address;
  if (!fixture_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 64, &buffer));
  TU_CHECK_EQ_INT(f.device->header.refcount, 2); /* the buffer holds its device */
  gpuhal_buffer_retain(buffer);
  gpuhal_buffer_release(buffer);
  TU_CHECK_OK(gpuhal_buffer_write(buffer, 63, &byte, 1));
  TU_CHECK_OK(gpuhal_buffer_read(buffer, 63, &back, 1));
  TU_CHECK_EQ_INT(back, 42);
  gpuhal_buffer_release(buffer);
  TU_CHECK_EQ_INT(f.device->header.refcount, 1);
  /* A released buffer is caught, not used (its memory is quarantined). */
  TU_CHECK_STATUS(gpuhal_buffer_read(buffer, 0, &back, 1), GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
  TU_CHECK_STATUS(gpuhal_buffer_device_address(buffer, &address), GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
  gpuhal_buffer_release(buffer); /* a no-op */
  gpuhal_buffer_release(NULL);
  gpuhal_buffer_retain(NULL);
  /* A buffer keeps its device alive after the caller lets go of the device. */
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_HOST_PINNED, 16, &buffer));
  gpuhal_device_release(f.device);
  f.device = NULL;
  TU_CHECK_OK(gpuhal_buffer_write(buffer, 0, &byte, 1));
  gpuhal_buffer_release(buffer);
  fixture_close(&f);
}

/* ---- internals for queue_alloca ---- */
typedef struct pending_call_s {
  gpuhal_buffer_t* buffer;
  int free_it;
} pending_call_t;
static gpuhal_status_t pending_on_worker(void* arg) {
  pending_call_t* c = (pending_call_t*)arg;
  gpuhal_device_t* device = c->buffer->device;
  gpuhal_status_t s = c->free_it ? gpuhal__buffer_pending_free(c->buffer, device, device->streams[0])
                                 : gpuhal__buffer_pending_allocate(c->buffer, device, device->streams[0], 1);
  if (!s) s = GPUHAL__CU(device->cu, cuStreamSynchronize, (device->streams[0]));
  return s;
}

TU_TEST(pending_buffers) {
  fixture_t f;
  gpuhal_buffer_t* buffer = NULL;
  pending_call_t call;
  uint64_t address = 1;
  unsigned char data[100], back[100];
  if (!fixture_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal__buffer_create_pending(f.device, sizeof(data), &buffer));
  TU_CHECK_STATUS(gpuhal_buffer_device_address(buffer, &address), GPUHAL_STATUS_FAILED_PRECONDITION, "not been issued");
  TU_CHECK(address == 0);
  TU_CHECK_STATUS(gpuhal_buffer_read(buffer, 0, back, 1), GPUHAL_STATUS_FAILED_PRECONDITION, "has not been issued yet");
  TU_CHECK_OK(gpuhal__buffer_check_pending("test", buffer));
  call.buffer = buffer;
  call.free_it = 0;
  TU_REQUIRE_OK(gpuhal__worker_call(f.device, pending_on_worker, &call));
  TU_CHECK_OK(gpuhal_buffer_device_address(buffer, &address));
  TU_CHECK(address != 0);
  fill_random(data, sizeof(data));
  TU_CHECK_OK(gpuhal_buffer_write(buffer, 0, data, sizeof(data)));
  TU_CHECK_OK(gpuhal_buffer_read(buffer, 0, back, sizeof(back)));
  TU_CHECK(memcmp(data, back, sizeof(data)) == 0);
  /* Allocating twice is refused. */
  TU_CHECK_STATUS(gpuhal__worker_call(f.device, pending_on_worker, &call), GPUHAL_STATUS_FAILED_PRECONDITION,
                  "already allocated");
  call.free_it = 1;
  TU_CHECK_OK(gpuhal__worker_call(f.device, pending_on_worker, &call));
  TU_CHECK_STATUS(gpuhal_buffer_device_address(buffer, &address), GPUHAL_STATUS_FAILED_PRECONDITION, "dealloca");
  TU_CHECK_STATUS(gpuhal__buffer_check_pending("test", buffer), GPUHAL_STATUS_FAILED_PRECONDITION,
                  "already deallocated");
  gpuhal_buffer_release(buffer);
  /* A pending buffer released while live is freed by the release. */
  TU_REQUIRE_OK(gpuhal__buffer_create_pending(f.device, 256, &buffer));
  call.buffer = buffer;
  call.free_it = 0;
  TU_CHECK_OK(gpuhal__worker_call(f.device, pending_on_worker, &call));
  gpuhal_buffer_release(buffer);
  /* A plain allocation is not a pending one. */
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 16, &buffer));
  TU_CHECK_STATUS(gpuhal__buffer_check_pending("test", buffer), GPUHAL_STATUS_INVALID_ARGUMENT, "queue_alloca");
  gpuhal_buffer_release(buffer);
  fixture_close(&f);
}

typedef struct pool_call_s {
  gpuhal_device_t* device;
  CUdeviceptr ptr;
} pool_call_t;
static gpuhal_status_t pool_round_trip(void* arg) {
  pool_call_t* c = (pool_call_t*)arg;
  CUstream stream = c->device->streams[0];
  GPUHAL__RETURN_IF_ERROR(gpuhal__pool_alloc_async(c->device, stream, 1 << 20, &c->ptr));
  if (!c->ptr) return gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "no address");
  GPUHAL__RETURN_IF_ERROR(gpuhal__pool_free_async(c->device, stream, c->ptr));
  return GPUHAL__CU(c->device->cu, cuStreamSynchronize, (stream));
}

TU_TEST(device_pool) {
  fixture_t f;
  pool_call_t call;
  gpuhal_device_params_t params;
  if (!fixture_open(&f)) TU_SKIP("no device");
  TU_CHECK((f.device->memory->pool != NULL) == (f.device->info.memory_pools_supported != 0));
  call.device = f.device;
  TU_CHECK_OK(gpuhal__worker_call(f.device, pool_round_trip, &call));
  gpuhal_device_release(f.device);
  /* A finite release threshold is accepted too. */
  memset(&params, 0, sizeof(params));
  params.pool_release_threshold = 1 << 20;
  TU_REQUIRE_OK(gpuhal_device_create(f.driver, 0, &params, &f.device));
  TU_CHECK_EQ_INT(f.device->params.pool_release_threshold, 1 << 20);
  call.device = f.device;
  TU_CHECK_OK(gpuhal__worker_call(f.device, pool_round_trip, &call));
  fixture_close(&f);
}

/* An out-of-memory from the driver reads like the design says (softcuda only). The
 * allocation trims the pool and tries once more, so the driver must refuse twice; a single
 * refusal is recovered. */
TU_TEST(driver_errors_are_translated) {
  fixture_t f;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_status_t s;
  if (!tu_softcuda()) TU_SKIP("needs softcuda's fault injection");
  if (!fixture_open(&f)) TU_SKIP("no device");
  TU_REQUIRE(tu_softcuda_faults("cuMemAlloc@*=CUDA_ERROR_OUT_OF_MEMORY") == 0);
  s = gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 1024, &buffer);
  tu_softcuda_faults(NULL);
  TU_CHECK_EQ_INT(gpuhal_status_code(s), GPUHAL_STATUS_RESOURCE_EXHAUSTED);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "CUDA_ERROR_OUT_OF_MEMORY");
  /* gpuhal.h:LINE, or memory.c:LINE (of src/) in a -DGPUHAL_SOURCE_LINES=ON build */
  TU_CHECK(strstr(gpuhal_status_message(s), "in cuMemAlloc at gpuhal.h:") != NULL ||
           strstr(gpuhal_status_message(s), "in cuMemAlloc at memory.c:") != NULL);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "buffer_allocate of 1024 bytes on device 0 failed after trimming");
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "allocating 1024 bytes of device memory on device 0");
  gpuhal_status_free(s);
  TU_CHECK(buffer == NULL);
  TU_CHECK_EQ_INT(f.device->header.refcount, 1);

  TU_REQUIRE(tu_softcuda_faults("cuMemAlloc@1=CUDA_ERROR_OUT_OF_MEMORY") == 0);
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 1024, &buffer));
  tu_softcuda_faults(NULL);
  TU_CHECK(buffer != NULL);
  gpuhal_buffer_release(buffer);
  fixture_close(&f);
}

/* The device's default pool is the whole process's: when gpuhal falls back to it (no pool
 * of its own can be made), it must leave its release threshold as the application set it,
 * while the device lives and after (softcuda only: a failing cuMemPoolCreate). */
static uint64_t default_pool_threshold(const gpuhal__cuda_symbols_t* cu, CUdevice dev) {
  CUmemoryPool pool = NULL;
  cuuint64_t value = 12345;
  if (cu->cuDeviceGetDefaultMemPool(&pool, dev) != CUDA_SUCCESS) return 12345;
  if (cu->cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value) != CUDA_SUCCESS) return 12345;
  return (uint64_t)value;
}

TU_TEST(default_pool_left_as_it_is) {
  fixture_t f;
  const gpuhal__cuda_symbols_t* cu;
  CUdevice dev;
  CUmemoryPool pool = NULL;
  cuuint64_t mine = 1 << 20, original;
  gpuhal_buffer_t* buffer = NULL;
  if (!tu_softcuda()) TU_SKIP("needs softcuda's fault injection");
  if (!fixture_open(&f)) TU_SKIP("no device");
  if (!f.device->info.memory_pools_supported) {
    fixture_close(&f);
    TU_SKIP("no stream-ordered pools");
  }
  cu = f.device->cu;
  dev = f.device->cu_device;
  gpuhal_device_release(f.device);
  f.device = NULL;
  TU_REQUIRE(cu->cuDeviceGetDefaultMemPool(&pool, dev) == CUDA_SUCCESS);
  original = default_pool_threshold(cu, dev);
  TU_CHECK_EQ_INT(original, 0); /* CUDA's default */
  /* The application's own threshold. */
  TU_REQUIRE(cu->cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &mine) == CUDA_SUCCESS);

  TU_REQUIRE(tu_softcuda_faults("cuMemPoolCreate@*=CUDA_ERROR_NOT_SUPPORTED") == 0);
  TU_CHECK_OK(gpuhal_device_create(f.driver, 0, NULL, &f.device));
  tu_softcuda_faults(NULL);
  TU_REQUIRE(f.device != NULL);
  TU_CHECK(f.device->memory->pool == pool);
  TU_CHECK(!f.device->memory->owns_pool);
  TU_CHECK_EQ_INT(default_pool_threshold(cu, dev), mine);
  /* Used and trimmed all the same. */
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 4096, &buffer));
  gpuhal_buffer_release(buffer);
  TU_CHECK_OK(gpuhal_device_trim(f.device));
  TU_CHECK_EQ_INT(default_pool_threshold(cu, dev), mine);
  gpuhal_device_release(f.device);
  f.device = NULL;
  TU_CHECK_EQ_INT(default_pool_threshold(cu, dev), mine);
  TU_CHECK(cu->cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &original) == CUDA_SUCCESS);
  gpuhal_driver_release(f.driver);
}

/* ---- copies and the application's blocking streams ----
 * gpuhal_buffer_read / _write must not use the legacy default stream of the primary
 * context, which waits for every blocking stream of the application: here one waits for
 * a value the test writes only after the copies return. The copies run on a thread; the
 * test waits for them at most a few seconds, then releases the application's wait anyway,
 * so a regression fails instead of hanging. */
/* 1 for success; prints and frees a failure. */
static int copy_ok(gpuhal_status_t s) {
  if (s) fprintf(stderr, "  copy: %s\n", gpuhal_status_message(s));
  gpuhal_status_free(s);
  return s == NULL;
}

typedef struct copy_job_s {
  gpuhal_buffer_t* device_buffer;
  gpuhal_buffer_t* pinned; /* a pinned source / destination of the copies */
  int ok;
  int done; /* atomic */
} copy_job_t;

static void* copy_job_main(void* arg) {
  copy_job_t* job = (copy_job_t*)arg;
  unsigned char data[256], back[256];
  unsigned char* host = (unsigned char*)gpuhal_buffer_host_pointer(job->pinned);
  int ok = 1;
  fill_random(data, sizeof(data));
  /* pageable, both ways */
  ok &= copy_ok(gpuhal_buffer_write(job->device_buffer, 8, data, sizeof(data)));
  ok &= copy_ok(gpuhal_buffer_read(job->device_buffer, 8, back, sizeof(back)));
  ok &= memcmp(data, back, sizeof(data)) == 0;
  /* pinned, both ways */
  fill_random(host, 256);
  memcpy(data, host, sizeof(data));
  ok &= copy_ok(gpuhal_buffer_write(job->device_buffer, 300, host, 256));
  memset(host, 0, 256);
  ok &= copy_ok(gpuhal_buffer_read(job->device_buffer, 300, host, 256));
  ok &= memcmp(data, host, sizeof(data)) == 0;
  job->ok = ok;
  __atomic_store_n(&job->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

TU_TEST(copies_ignore_application_blocking_streams) {
  fixture_t f;
  const gpuhal__cuda_symbols_t* cu;
  gpuhal_buffer_t *pinned = NULL, *device_buffer = NULL;
  void* flag_memory = NULL;
  volatile uint32_t* flag_host;
  CUdeviceptr flag_address = 0;
  CUcontext ctx = NULL, popped = NULL;
  CUstream app = NULL;
  copy_job_t job;
  pthread_t thread;
  int64_t deadline;
  int in_time;
  if (!fixture_open(&f)) TU_SKIP("no device");
  cu = f.device->cu;
  if (!cu->cuStreamWaitValue32) {
    fixture_close(&f);
    TU_SKIP("no stream memory operations");
  }
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_HOST_PINNED, 256, &pinned));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 1024, &device_buffer));
  /* The application: a blocking stream of the primary context, held up by a flag in
   * mapped pinned memory. */
  TU_REQUIRE(cu->cuDevicePrimaryCtxRetain(&ctx, f.device->cu_device) == CUDA_SUCCESS);
  TU_REQUIRE(cu->cuCtxPushCurrent(ctx) == CUDA_SUCCESS);
  TU_REQUIRE(cu->cuMemHostAlloc(&flag_memory, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) ==
             CUDA_SUCCESS);
  flag_host = (volatile uint32_t*)flag_memory;
  *flag_host = 0;
  TU_REQUIRE(cu->cuMemHostGetDevicePointer(&flag_address, flag_memory, 0) == CUDA_SUCCESS);
  TU_REQUIRE(cu->cuStreamCreate(&app, 0) == CUDA_SUCCESS);
  TU_REQUIRE(cu->cuStreamWaitValue32(app, flag_address, 1, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS);
  TU_REQUIRE(cu->cuCtxPopCurrent(&popped) == CUDA_SUCCESS);

  memset(&job, 0, sizeof(job));
  job.device_buffer = device_buffer;
  job.pinned = pinned;
  TU_REQUIRE(pthread_create(&thread, NULL, copy_job_main, &job) == 0);
  deadline = gpuhal_now_ns() + 5000000000ll;
  while (!__atomic_load_n(&job.done, __ATOMIC_ACQUIRE) && gpuhal_now_ns() < deadline) tu_sleep_ns(1000000);
  in_time = __atomic_load_n(&job.done, __ATOMIC_ACQUIRE);
  if (!in_time) fprintf(stderr, "  the copies waited for the application's blocking stream\n");
  __atomic_store_n(flag_host, 1u, __ATOMIC_RELEASE); /* releases the application's stream */
  pthread_join(thread, NULL);
  TU_CHECK(in_time);
  TU_CHECK(job.ok);

  TU_CHECK(cu->cuCtxPushCurrent(ctx) == CUDA_SUCCESS);
  TU_CHECK(cu->cuStreamSynchronize(app) == CUDA_SUCCESS);
  TU_CHECK(cu->cuStreamDestroy(app) == CUDA_SUCCESS);
  TU_CHECK(cu->cuMemFreeHost(flag_memory) == CUDA_SUCCESS);
  TU_CHECK(cu->cuCtxPopCurrent(&popped) == CUDA_SUCCESS);
  TU_CHECK(cu->cuDevicePrimaryCtxRelease(f.device->cu_device) == CUDA_SUCCESS);
  gpuhal_buffer_release(device_buffer);
  gpuhal_buffer_release(pinned);
  fixture_close(&f);
}

/* Several threads copy at once, each on its own range: every round trip reads back what
 * its thread wrote. */
typedef struct copy_worker_s {
  gpuhal_buffer_t* buffer;
  uint64_t offset;
  int ok;
} copy_worker_t;

static void* copy_worker_main(void* arg) {
  copy_worker_t* w = (copy_worker_t*)arg;
  unsigned char data[512], back[512];
  int i, j, ok = 1;
  for (i = 0; i < 50; ++i) {
    for (j = 0; j < (int)sizeof(data); ++j) data[j] = (unsigned char)(w->offset + (uint64_t)(i * 7 + j));
    ok &= copy_ok(gpuhal_buffer_write(w->buffer, w->offset, data, sizeof(data)));
    ok &= copy_ok(gpuhal_buffer_read(w->buffer, w->offset, back, sizeof(back)));
    ok &= memcmp(data, back, sizeof(data)) == 0;
  }
  w->ok = ok;
  return NULL;
}

TU_TEST(concurrent_copies) {
  enum { THREADS = 6 };
  fixture_t f;
  gpuhal_buffer_t* buffer = NULL;
  copy_worker_t workers[THREADS];
  pthread_t threads[THREADS];
  int i;
  if (!fixture_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 512 * THREADS, &buffer));
  for (i = 0; i < THREADS; ++i) {
    workers[i].buffer = buffer;
    workers[i].offset = 512u * (uint64_t)i;
    workers[i].ok = 0;
    TU_REQUIRE(pthread_create(&threads[i], NULL, copy_worker_main, &workers[i]) == 0);
  }
  for (i = 0; i < THREADS; ++i) {
    pthread_join(threads[i], NULL);
    TU_CHECK(workers[i].ok);
  }
  gpuhal_buffer_release(buffer);
  fixture_close(&f);
}

TU_MAIN(TU_CASE(round_trips_of_every_kind), TU_CASE(retain_and_release), TU_CASE(pending_buffers), TU_CASE(device_pool),
        TU_CASE(driver_errors_are_translated), TU_CASE(copies_ignore_application_blocking_streams),
        TU_CASE(concurrent_copies), TU_CASE(default_pool_left_as_it_is))
