/* Out of device memory is recoverable (issue #15, item 2): a full pool is trimmed and the
 * allocation retried (queue_alloca and buffer_allocate); an alloca that finds the pool full
 * of memory that deallocas on another queue are still freeing waits for them on the GPU,
 * without blocking its caller; gpuhal_device_trim and gpuhal_device_memory_stats.
 *
 * The device limits its own pool (params.pool_max_bytes = 64 MiB), so the same test runs
 * out of memory on softcuda and on a real GPU with far more memory. CTest also gives
 * softcuda's device 64 MiB (tests/cmake/memory.cmake), so a full pool leaves no room for
 * gpuhal_buffer_allocate either; on a real GPU that step has room anyway. */
#include "gpuhal.h"
#include "test_util.h"

#define MIB (1024ull * 1024ull)
#define POOL_MAX (64 * MIB)
#define CHUNK (8 * MIB)
#define MAX_CHUNKS 32         /* a pool of 64 MiB fits 8; more means the limit is ignored */
#define WAIT_NS 30000000000ll /* every wait: 30 s */
#define SPIN_US 2000000ull    /* the GPU work that keeps the deallocas in flight: 2 s */

static gpuhal_timeout_t wait_time(void) { return gpuhal_timeout_relative_ns(WAIT_NS); }
#define EMPTY gpuhal_semaphore_list_empty()

typedef struct fixture_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
} fixture_t;

/* 0 when there is no device, or it has no stream-ordered pools (the case then skips). */
static int fixture_open(fixture_t* f, uint32_t queues) {
  gpuhal_device_params_t params;
  gpuhal_device_info_t info;
  gpuhal_status_t s;
  int count = 0;
  memset(f, 0, sizeof(*f));
  s = gpuhal_driver_create(NULL, &f->driver);
  if (!s) s = gpuhal_driver_device_count(f->driver, &count);
  if (!s && count > 0) s = gpuhal_driver_device_info(f->driver, 0, &info);
  if (!s && count > 0 && info.memory_pools_supported) {
    memset(&params, 0, sizeof(params));
    params.queue_count = queues;
    params.pool_max_bytes = POOL_MAX;
    s = gpuhal_device_create(f->driver, 0, &params, &f->device);
  }
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
  TU_CHECK_OK(gpuhal_device_wait_idle(f->device, wait_time()));
  gpuhal_device_release(f->device);
  gpuhal_driver_release(f->driver);
}

/* One queue_alloca of `size` on `queue`, waited for. NULL on success; else the alloca's
 * failure (the call itself must succeed: the allocation fails when it is issued). */
static gpuhal_status_t alloca_wait(gpuhal_device_t* device, uint32_t queue, uint64_t size, gpuhal_buffer_t** out) {
  gpuhal_semaphore_t* done = NULL;
  const uint64_t one = 1;
  gpuhal_status_t s;
  *out = NULL;
  s = gpuhal_semaphore_create(gpuhal_device_driver(device), 0, &done);
  if (s) return s;
  s = gpuhal_queue_alloca(device, queue, EMPTY, gpuhal_semaphore_list_one(&done, &one), size, out);
  if (s) {
    TU_FAIL_AT(__FILE__, __LINE__, "gpuhal_queue_alloca -> %s", gpuhal_status_message(s));
  } else {
    s = gpuhal_semaphore_wait(done, 1, wait_time());
  }
  gpuhal_semaphore_release(done);
  if (s) {
    gpuhal_buffer_release(*out);
    *out = NULL;
  }
  return s;
}

/* Allocas of CHUNK on queue 0 until one fails: returns how many succeeded (in bufs) and
 * hands back the failure. */
static int fill_pool(fixture_t* f, gpuhal_buffer_t** bufs, gpuhal_status_t* out_failure) {
  int n = 0;
  *out_failure = NULL;
  while (n < MAX_CHUNKS) {
    gpuhal_status_t s = alloca_wait(f->device, 0, CHUNK, &bufs[n]);
    if (s) {
      *out_failure = s;
      break;
    }
    n++;
  }
  return n;
}

/* Deallocas bufs[0..n) on `queue`; `done` reaches n when they ran. */
static void dealloca_all(fixture_t* f, uint32_t queue, gpuhal_buffer_t** bufs, int n, gpuhal_semaphore_t* done) {
  int i;
  for (i = 0; i < n; ++i) {
    uint64_t value = (uint64_t)i + 1;
    TU_CHECK_OK(gpuhal_queue_dealloca(f->device, queue, EMPTY, gpuhal_semaphore_list_one(&done, &value), bufs[i]));
    gpuhal_buffer_release(bufs[i]);
    bufs[i] = NULL;
  }
}

static void check_oom_message(gpuhal_status_t s) {
  char asked[64];
  snprintf(asked, sizeof(asked), "queue_alloca of %llu bytes on device 0", (unsigned long long)CHUNK);
  TU_CHECK_EQ_INT(gpuhal_status_code(s), GPUHAL_STATUS_RESOURCE_EXHAUSTED);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "cuMemAllocFromPoolAsync");
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), asked);
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "the pool holds");
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "in use; limit 67108864");
  TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), "bytes free");
}

/* Fills the pool until an alloca fails, deallocates everything, and then a 40 MiB alloca
 * (which no 8 MiB block the pool keeps can serve) succeeds; then the same for a 16 MiB
 * gpuhal_buffer_allocate. Before the fix the pool kept everything and both failed. */
TU_TEST(full_pool_recovers_after_deallocation) {
  fixture_t f;
  gpuhal_buffer_t* bufs[MAX_CHUNKS];
  gpuhal_buffer_t* big = NULL;
  gpuhal_buffer_t* plain = NULL;
  gpuhal_semaphore_t* done = NULL;
  gpuhal_status_t failure = NULL;
  gpuhal_memory_stats_t stats;
  int n;
  if (!fixture_open(&f, 1)) TU_SKIP("no device with memory pools");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done));

  n = fill_pool(&f, bufs, &failure);
  TU_CHECK(n >= 1 && n < MAX_CHUNKS);
  TU_REQUIRE(failure != NULL);
  check_oom_message(failure);
  fprintf(stderr, "  %d allocas of 8 MiB fit; then: %s\n", n, gpuhal_status_message(failure));
  gpuhal_status_free(failure);
  TU_CHECK_OK(gpuhal_device_memory_stats(f.device, &stats));
  TU_CHECK(stats.pool_used >= (uint64_t)n * CHUNK);
  TU_CHECK(stats.pool_reserved >= stats.pool_used && stats.pool_reserved <= POOL_MAX);
  TU_CHECK(stats.pool_used_high >= stats.pool_used && stats.pool_reserved_high >= stats.pool_reserved);

  dealloca_all(&f, 0, bufs, n, done);
  TU_CHECK_OK(gpuhal_semaphore_wait(done, (uint64_t)n, wait_time()));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, wait_time()));
  TU_CHECK_OK(alloca_wait(f.device, 0, 5 * CHUNK, &big));
  TU_REQUIRE(big != NULL);
  {
    const uint64_t two = (uint64_t)n + 1;
    TU_CHECK_OK(gpuhal_queue_dealloca(f.device, 0, EMPTY, gpuhal_semaphore_list_one(&done, &two), big));
    gpuhal_buffer_release(big);
    TU_CHECK_OK(gpuhal_semaphore_wait(done, two, wait_time()));
  }

  /* Full again, then freed: the pool holds the device's memory (on softcuda all of it). */
  n = fill_pool(&f, bufs, &failure);
  TU_CHECK(n >= 1 && failure != NULL);
  gpuhal_status_free(failure);
  {
    gpuhal_semaphore_t* done2 = NULL;
    TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done2));
    dealloca_all(&f, 0, bufs, n, done2);
    TU_CHECK_OK(gpuhal_semaphore_wait(done2, (uint64_t)n, wait_time()));
    gpuhal_semaphore_release(done2);
  }
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, wait_time()));
  TU_CHECK_OK(gpuhal_device_memory_stats(f.device, &stats));
  if (tu_softcuda() && stats.device_total > POOL_MAX)
    fprintf(stderr,
            "  note: softcuda's device has %llu bytes (SOFTCUDA_DEVICE_MEMORY unset?): buffer_allocate has room\n",
            (unsigned long long)stats.device_total);
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 2 * CHUNK, &plain));
  TU_CHECK_OK(gpuhal_device_memory_stats(f.device, &stats));
  TU_CHECK_EQ_INT(stats.buffers_allocated, 2 * CHUNK);
  gpuhal_buffer_release(plain);
  TU_CHECK_OK(gpuhal_device_memory_stats(f.device, &stats));
  TU_CHECK_EQ_INT(stats.buffers_allocated, 0);
  gpuhal_semaphore_release(done);
  fixture_close(&f);
}

/* A dealloca on an idle queue signals as soon as its free is enqueued, before the free has
 * run. Its signal must still mean the memory is free to those who waited for it: a trim
 * right after gives it back, and an alloca out of memory on another queue right after gets
 * it (here: 40 MiB, which no 8 MiB block of the full pool can serve without a trim), as
 * does a gpuhal_buffer_allocate. Before the fix the trim left the pool in use in most
 * rounds, and the alloca and the allocation failed in some. */
TU_TEST(a_dealloca_signal_frees_for_trim_and_alloca) {
  fixture_t f;
  gpuhal_buffer_t* bufs[MAX_CHUNKS];
  gpuhal_buffer_t* big = NULL;
  gpuhal_semaphore_t* done = NULL;
  gpuhal_status_t failure = NULL;
  gpuhal_memory_stats_t stats;
  int round, n;
  if (!fixture_open(&f, 2)) TU_SKIP("no device with memory pools");
  for (round = 0; round < 12; ++round) {
    uint64_t one = 1;
    TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done));
    n = fill_pool(&f, bufs, &failure);
    TU_REQUIRE(n >= 6 && failure != NULL);
    gpuhal_status_free(failure);
    dealloca_all(&f, 0, bufs, n, done);
    TU_CHECK_OK(gpuhal_semaphore_wait(done, (uint64_t)n, wait_time()));
    gpuhal_semaphore_release(done);
    /* Right away, on the other queue: the whole pool's worth less 3 blocks. */
    TU_CHECK_OK(alloca_wait(f.device, 1, 5 * CHUNK, &big));
    TU_REQUIRE(big != NULL);
    TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done));
    TU_CHECK_OK(gpuhal_queue_dealloca(f.device, 1, EMPTY, gpuhal_semaphore_list_one(&done, &one), big));
    gpuhal_buffer_release(big);
    TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, wait_time()));
    gpuhal_semaphore_release(done);
    /* Its signal seen, a plain allocation of as much (the pool holds it until trimmed) */
    TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 5 * CHUNK, &big));
    gpuhal_buffer_release(big);
    big = NULL;
    /* then a trim: nothing of the pool is in use. */
    TU_CHECK_OK(gpuhal_device_trim(f.device));
    TU_CHECK_OK(gpuhal_device_memory_stats(f.device, &stats));
    TU_CHECK_EQ_INT(stats.pool_used, 0);
    if (tu_softcuda()) TU_CHECK_EQ_INT(stats.pool_reserved, 0);
  }
  fixture_close(&f);
}

/* Loads spin_us and records one launch of it that spins for SPIN_US. */
static gpuhal_status_t make_spin(gpuhal_device_t* device, gpuhal_executable_t** exe, gpuhal_command_buffer_t** cb) {
  size_t size = 0;
  char* ptx = tu_read_kernel_file("spin_us.ptx", &size);
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_arg_t arg = gpuhal_arg_u64(SPIN_US);
  gpuhal_status_t s;
  if (!ptx) return gpuhal_status_make(GPUHAL_STATUS_NOT_FOUND, "cannot read spin_us.ptx");
  s = gpuhal_executable_load(device, ptx, size, exe);
  free(ptx);
  if (!s) s = gpuhal_executable_kernel(*exe, "spin_us", &kernel);
  if (!s) s = gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_STREAM, 0, cb);
  if (!s) s = gpuhal_command_buffer_begin(*cb);
  if (!s) s = gpuhal_cmd_dispatch(*cb, kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg);
  if (!s) s = gpuhal_command_buffer_end(*cb);
  return s;
}

/* The pool is full; queue 1 runs a 2 s kernel and then deallocates everything; an alloca
 * on queue 0 submitted meanwhile returns at once and succeeds once the deallocas ran (it
 * waits for them on the GPU). Before the fix its semaphore failed (out of memory). */
TU_TEST(alloca_waits_for_deallocas_in_flight) {
  fixture_t f;
  gpuhal_buffer_t* bufs[MAX_CHUNKS];
  gpuhal_buffer_t* late = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_command_buffer_t* spin = NULL;
  gpuhal_semaphore_t *gate = NULL, *freed = NULL, *allocated = NULL;
  gpuhal_status_t failure = NULL;
  const uint64_t one = 1;
  uint64_t value = 0;
  unsigned char pattern[256], back[256];
  int n, i;
  if (!fixture_open(&f, 2)) TU_SKIP("no device with memory pools");
  TU_REQUIRE_OK(make_spin(f.device, &exe, &spin));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &freed));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &allocated));
  n = fill_pool(&f, bufs, &failure);
  TU_CHECK(n >= 1 && failure != NULL);
  gpuhal_status_free(failure);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, wait_time()));

  TU_CHECK_OK(gpuhal_queue_execute(f.device, 1, EMPTY, gpuhal_semaphore_list_one(&gate, &one), spin, NULL));
  dealloca_all(&f, 1, bufs, n, freed);
  TU_CHECK_OK(gpuhal_queue_alloca(f.device, 0, EMPTY, gpuhal_semaphore_list_one(&allocated, &one), CHUNK, &late));
  /* The call did not wait for the deallocas (they are behind the 2 s kernel). */
  TU_CHECK_OK(gpuhal_semaphore_query(freed, &value));
  TU_CHECK(value < (uint64_t)n);

  TU_CHECK_OK(gpuhal_semaphore_wait(allocated, 1, wait_time()));
  TU_CHECK_OK(gpuhal_semaphore_query(freed, &value));
  TU_CHECK_EQ_INT(value, n);
  for (i = 0; i < 256; ++i) pattern[i] = (unsigned char)(i * 7 + 1);
  TU_CHECK_OK(gpuhal_buffer_write(late, CHUNK - 256, pattern, 256));
  TU_CHECK_OK(gpuhal_buffer_read(late, CHUNK - 256, back, 256));
  TU_CHECK(memcmp(pattern, back, 256) == 0);
  {
    const uint64_t two = 2;
    TU_CHECK_OK(gpuhal_queue_dealloca(f.device, 0, EMPTY, gpuhal_semaphore_list_one(&allocated, &two), late));
    TU_CHECK_OK(gpuhal_semaphore_wait(allocated, 2, wait_time()));
  }
  gpuhal_buffer_release(late);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, wait_time()));
  gpuhal_command_buffer_release(spin);
  gpuhal_executable_release(exe);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(freed);
  gpuhal_semaphore_release(allocated);
  fixture_close(&f);
}

/* gpuhal_device_trim gives the pool's unused memory back; the statistics follow. */
TU_TEST(trim_and_statistics) {
  fixture_t f;
  gpuhal_buffer_t* bufs[3];
  gpuhal_semaphore_t* done = NULL;
  gpuhal_memory_stats_t before, live, freed, trimmed;
  int i;
  if (!fixture_open(&f, 1)) TU_SKIP("no device with memory pools");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done));
  TU_CHECK_OK(gpuhal_device_memory_stats(f.device, &before));
  TU_CHECK(before.device_total > 0 && before.device_free <= before.device_total);
  TU_CHECK_EQ_INT(before.pool_used, 0);
  TU_CHECK_EQ_INT(before.buffers_allocated, 0);
  for (i = 0; i < 3; ++i) TU_REQUIRE_OK(alloca_wait(f.device, 0, CHUNK, &bufs[i]));
  TU_CHECK_OK(gpuhal_device_memory_stats(f.device, &live));
  TU_CHECK(live.pool_used >= 3 * CHUNK);
  TU_CHECK(live.pool_reserved >= live.pool_used);
  TU_CHECK(live.pool_used_high >= live.pool_used);
  TU_CHECK(live.pool_reserved_high >= live.pool_reserved);

  dealloca_all(&f, 0, bufs, 3, done);
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 3, wait_time()));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, wait_time()));
  TU_CHECK_OK(gpuhal_device_memory_stats(f.device, &freed));
  TU_CHECK_EQ_INT(freed.pool_used, 0);
  TU_CHECK(freed.pool_reserved >= 3 * CHUNK); /* the release threshold keeps everything */
  TU_CHECK(freed.pool_used_high >= 3 * CHUNK);

  TU_CHECK_OK(gpuhal_device_trim(f.device));
  TU_CHECK_OK(gpuhal_device_memory_stats(f.device, &trimmed));
  /* A real driver may keep part of a pool's reservation through a trim (its granularity,
   * frees it has not retired yet): only softcuda is held to releasing everything. */
  TU_CHECK(trimmed.pool_reserved <= freed.pool_reserved);
  if (tu_softcuda()) TU_CHECK_EQ_INT(trimmed.pool_reserved, 0);
  TU_CHECK(trimmed.pool_reserved_high >= 3 * CHUNK); /* high-water marks are not reset */
  TU_CHECK(trimmed.pool_used_high >= 3 * CHUNK);
  TU_CHECK(trimmed.device_free > freed.device_free || !tu_softcuda());
  TU_CHECK_OK(gpuhal_device_trim(f.device)); /* nothing left to trim: still fine */
  gpuhal_semaphore_release(done);
  fixture_close(&f);
}

/* A device without a pool limit: stats and trim work; the limit shows as 0 in messages. */
TU_TEST(default_device) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_memory_stats_t stats;
  int count = 0;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  if (count == 0) {
    gpuhal_driver_release(driver);
    TU_SKIP("no device");
  }
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_CHECK_OK(gpuhal_device_memory_stats(device, &stats));
  TU_CHECK(stats.device_total > 0);
  TU_CHECK_OK(gpuhal_device_trim(device));
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

/* Every CUDA call of the recovery path fails cleanly when injected (softcuda only): the
 * alloca's semaphore fails naming the call; the device stays usable. */
TU_TEST(recovery_calls_fail_cleanly) {
  static const char* const rules[] = {"cuMemPoolTrimTo@*=CUDA_ERROR_INVALID_VALUE",
                                      "cuMemPoolGetAttribute@*=CUDA_ERROR_INVALID_VALUE",
                                      "cuMemGetInfo@*=CUDA_ERROR_INVALID_VALUE"};
  static const char* const names[] = {"cuMemPoolTrimTo", "no memory statistics", "no memory statistics"};
  fixture_t f;
  gpuhal_buffer_t* bufs[MAX_CHUNKS];
  gpuhal_buffer_t* extra = NULL;
  gpuhal_semaphore_t* done = NULL;
  gpuhal_status_t failure = NULL;
  size_t r;
  int n;
  if (!tu_softcuda()) TU_SKIP("needs softcuda's fault injection");
  if (!fixture_open(&f, 1)) TU_SKIP("no device with memory pools");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done));
  n = fill_pool(&f, bufs, &failure);
  gpuhal_status_free(failure);
  for (r = 0; r < sizeof(rules) / sizeof(rules[0]); ++r) {
    gpuhal_status_t s;
    TU_REQUIRE(tu_softcuda_faults(rules[r]) == 0);
    s = alloca_wait(f.device, 0, CHUNK, &extra);
    tu_softcuda_faults(NULL);
    TU_CHECK(s != NULL);
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(s), names[r]);
    gpuhal_status_free(s);
  }
  TU_REQUIRE(tu_softcuda_faults("cuMemGetInfo@*=CUDA_ERROR_INVALID_VALUE") == 0);
  {
    gpuhal_memory_stats_t stats;
    TU_CHECK_STATUS(gpuhal_device_memory_stats(f.device, &stats), GPUHAL_STATUS_INVALID_ARGUMENT, "cuMemGetInfo");
  }
  tu_softcuda_faults(NULL);
  TU_REQUIRE(tu_softcuda_faults("cuMemPoolTrimTo@*=CUDA_ERROR_INVALID_VALUE") == 0);
  TU_CHECK_STATUS(gpuhal_device_trim(f.device), GPUHAL_STATUS_INVALID_ARGUMENT, "cuMemPoolTrimTo");
  tu_softcuda_faults(NULL);
  dealloca_all(&f, 0, bufs, n, done);
  TU_CHECK_OK(gpuhal_semaphore_wait(done, (uint64_t)n, wait_time()));
  gpuhal_semaphore_release(done);
  fixture_close(&f);
}

TU_MAIN(TU_CASE(full_pool_recovers_after_deallocation), TU_CASE(a_dealloca_signal_frees_for_trim_and_alloca),
        TU_CASE(alloca_waits_for_deallocas_in_flight), TU_CASE(trim_and_statistics), TU_CASE(default_device),
        TU_CASE(recovery_calls_fail_cleanly))
