/* The in-memory module cache (DESIGN §8): 70+ generated modules cold, warm and after a
 * device release (results checked); two devices x four threads loading, running and
 * releasing shared and private images; single flight (one compile for N concurrent loads,
 * its error shared, nothing poisoned); a hit not blocked by a slow compile of another
 * image; LRU eviction order and limits; trim; CUfunction caching; the compile hook;
 * BLAKE2b test vectors; bad arguments. Runs on softcuda (SOFTCUDA_JIT_DELAY_MS set by
 * tests/cmake/module_cache.cmake) and unchanged on a GPU. */
#include "test_internals.h"

#include "test_util.h"
#include "test_module_cache_util.h"

#define MANY 72

/* ---- the fast hash (memory lookups, disk file names, checksums) ---- */
static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

TU_TEST(fast_hash_is_deterministic_and_sensitive) {
  static uint64_t seen[1001 + 8 * 1000];
  unsigned char data[1000];
  size_t i, n = 0;
  for (i = 0; i < sizeof(data); ++i) data[i] = (unsigned char)((i * 7 + 3) & 255);
  TU_CHECK(gpuhal__hash_fast64(data, 1000, 1) == gpuhal__hash_fast64(data, 1000, 1));
  TU_CHECK(gpuhal__hash_fast64(data, 1000, 1) != gpuhal__hash_fast64(data, 1000, 2));
  /* every length and every one-bit change gives a hash of its own (a file name each) */
  for (i = 0; i <= sizeof(data); ++i) seen[n++] = gpuhal__hash_fast64(data, i, 7);
  for (i = 0; i < 8 * sizeof(data); ++i) {
    data[i / 8] ^= (unsigned char)(1u << (i % 8));
    seen[n++] = gpuhal__hash_fast64(data, sizeof(data), 7);
    data[i / 8] ^= (unsigned char)(1u << (i % 8));
  }
  qsort(seen, n, sizeof(seen[0]), cmp_u64);
  for (i = 1; i < n; ++i)
    if (seen[i] == seen[i - 1])
      TU_FAIL_AT(__FILE__, __LINE__, "two inputs share hash %016llx", (unsigned long long)seen[i]);
}

/* ---- many modules ---- */
static int load_and_check_all(gpuhal_device_t* device, gpuhal_executable_t** exe, unsigned count) {
  unsigned k;
  int ok = 1;
  for (k = 0; k < count; ++k) {
    gpuhal_status_t st = mc_load(device, k, 0, &exe[k]);
    if (!st) st = mc_run_check(device, exe[k], k);
    if (st) {
      TU_FAIL_AT(__FILE__, __LINE__, "module %u: %s", k, gpuhal_status_message(st));
      gpuhal_status_free(st);
      ok = 0;
    }
  }
  return ok;
}

static void release_all(gpuhal_executable_t** exe, unsigned count) {
  unsigned k;
  for (k = 0; k < count; ++k) {
    gpuhal_executable_release(exe[k]);
    exe[k] = NULL;
  }
}

TU_TEST(many_modules_cold_warm_and_after_release) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params = mc_params(NULL);
  gpuhal_executable_t* exe[MANY];
  gpuhal_device_t* device;
  gpuhal_module_cache_stats_t s;
  int round;
  memset(exe, 0, sizeof(exe));
  if (!driver) TU_SKIP("no CUDA device");
  for (round = 0; round < 2; ++round) { /* round 1: a new device after releasing the first */
    int64_t t0, t1, t2;
    device = mc_device(driver, 0, &params);
    TU_REQUIRE(device != NULL);
    t0 = gpuhal_now_ns();
    load_and_check_all(device, exe, MANY); /* cold */
    t1 = gpuhal_now_ns();
    s = mc_stats(device);
    TU_CHECK_EQ_INT(s.compiles, MANY);
    TU_CHECK_EQ_INT(s.misses, MANY);
    TU_CHECK_EQ_INT(s.hits, 0);
    TU_CHECK_EQ_INT(s.entries, MANY);
    release_all(exe, MANY);
    TU_CHECK_EQ_INT(mc_stats(device).entries, MANY); /* unreferenced, still cached */
    load_and_check_all(device, exe, MANY);           /* warm */
    t2 = gpuhal_now_ns();
    s = mc_stats(device);
    TU_CHECK_EQ_INT(s.compiles, MANY);
    TU_CHECK_EQ_INT(s.hits, MANY);
    TU_CHECK_EQ_INT(s.evictions, 0);
    fprintf(stderr, "  round %d: %d modules cold %.1f ms, warm %.1f ms\n", round, MANY, (t1 - t0) / 1e6,
            (t2 - t1) / 1e6);
    release_all(exe, MANY);
    gpuhal_device_release(device);
  }
  TU_CHECK_EQ_INT(mc_violations(), 0);
  gpuhal_driver_release(driver);
}

/* ---- two devices x four threads ---- */
#define THREADS_PER_DEVICE 4
#define ITERATIONS 12
typedef struct worker_s {
  gpuhal_device_t* device;
  unsigned private_k; /* this thread's own image; 100 is shared by everyone */
  int failures;
  char message[512];
} worker_t;

static void* worker_main(void* arg) {
  worker_t* w = (worker_t*)arg;
  int i;
  for (i = 0; i < ITERATIONS && !w->failures; ++i) {
    unsigned k = (i % 3 == 0) ? w->private_k : 100;
    gpuhal_executable_t* exe = NULL;
    gpuhal_status_t st = mc_load(w->device, k, 0, &exe);
    if (!st) st = mc_run_check(w->device, exe, k);
    gpuhal_executable_release(exe);
    if (st) {
      w->failures++;
      snprintf(w->message, sizeof(w->message), "image %u: %s", k, gpuhal_status_message(st));
      gpuhal_status_free(st);
    }
  }
  return NULL;
}

TU_TEST(two_devices_four_threads) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params = mc_params(NULL);
  gpuhal_device_t* devices[2] = {NULL, NULL};
  worker_t workers[2 * THREADS_PER_DEVICE];
  pthread_t threads[2 * THREADS_PER_DEVICE];
  int d, i;
  unsigned long long violations = mc_violations();
  if (!driver) TU_SKIP("no CUDA device");
  for (d = 0; d < 2; ++d) { /* one GPU: two devices on ordinal 0 (two caches, one context) */
    devices[d] = mc_device(driver, d < mc_device_count(driver) ? d : 0, &params);
    TU_REQUIRE(devices[d] != NULL);
  }
  for (i = 0; i < 2 * THREADS_PER_DEVICE; ++i) {
    memset(&workers[i], 0, sizeof(workers[i]));
    workers[i].device = devices[i % 2];
    workers[i].private_k = 101 + (unsigned)(i / 2); /* the same private image on both devices */
    TU_REQUIRE(pthread_create(&threads[i], NULL, worker_main, &workers[i]) == 0);
  }
  for (i = 0; i < 2 * THREADS_PER_DEVICE; ++i) {
    pthread_join(threads[i], NULL);
    if (workers[i].failures) TU_FAIL_AT(__FILE__, __LINE__, "thread %d: %s", i, workers[i].message);
  }
  for (d = 0; d < 2; ++d) {
    gpuhal_module_cache_stats_t s = mc_stats(devices[d]);
    /* Each device compiled each image once: the shared one and four private ones. */
    TU_CHECK_EQ_INT(s.compiles, 1 + THREADS_PER_DEVICE);
    TU_CHECK_EQ_INT(s.hits + s.misses, THREADS_PER_DEVICE * ITERATIONS);
  }
  TU_CHECK_EQ_INT(mc_violations() - violations, 0); /* no module on a foreign context */
  gpuhal_device_release(devices[0]);
  gpuhal_device_release(devices[1]);
  gpuhal_driver_release(driver);
}

/* ---- the compile hook used by several cases: it links with the driver itself ---- */
typedef struct hook_state_s {
  gpuhal_device_t* device;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int calls, frees;
  int cc_major;
  int wait_for_waits;    /* >0: block until the cache reports this many waits */
  int block_k;           /* >=0: block while compiling gen_add_<block_k> until released */
  int blocked, released; /* the block_k compile has started / may go on */
  int fail;              /* return an error */
  int garbage;           /* return bytes that are not a cubin */
} hook_state_t;

static void hook_init(hook_state_t* h) {
  memset(h, 0, sizeof(*h));
  pthread_mutex_init(&h->mutex, NULL);
  pthread_cond_init(&h->cond, NULL);
  h->block_k = -1;
}
static void hook_fini(hook_state_t* h) {
  pthread_mutex_destroy(&h->mutex);
  pthread_cond_destroy(&h->cond);
}

/* PTX -> cubin through cuLink in the device's context (works on softcuda and a GPU). */
static gpuhal_status_t hook_link(gpuhal_device_t* device, const void* ptx, size_t size, void** out, size_t* out_size) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  gpuhal__context_scope_t scope;
  CUlinkState link = NULL;
  void* cubin = NULL;
  size_t cubin_size = 0;
  gpuhal_status_t st = gpuhal__context_enter(device, &scope);
  if (st) return st;
  st = GPUHAL__CU(cu, cuLinkCreate, (0, NULL, NULL, &link));
  if (!st) st = GPUHAL__CU(cu, cuLinkAddData, (link, CU_JIT_INPUT_PTX, (void*)ptx, size + 1, "hook", 0, NULL, NULL));
  if (!st) st = GPUHAL__CU(cu, cuLinkComplete, (link, &cubin, &cubin_size));
  if (!st) {
    *out = malloc(cubin_size);
    memcpy(*out, cubin, cubin_size);
    *out_size = cubin_size;
  }
  if (link) cu->cuLinkDestroy(link);
  gpuhal__context_leave(device, &scope);
  return st;
}

static gpuhal_status_t test_hook(void* user, const void* ptx, size_t ptx_size, int cc_major, int cc_minor,
                                 void** out_cubin, size_t* out_cubin_size) {
  hook_state_t* h = (hook_state_t*)user;
  char marker[64];
  int64_t deadline = gpuhal_now_ns() + 20ll * 1000000000ll;
  (void)cc_minor;
  pthread_mutex_lock(&h->mutex);
  h->calls++;
  h->cc_major = cc_major;
  snprintf(marker, sizeof(marker), ".entry gen_add_%d(", h->block_k);
  if (h->block_k >= 0 && strstr((const char*)ptx, marker)) {
    h->blocked = 1;
    pthread_cond_broadcast(&h->cond);
    while (!h->released) pthread_cond_wait(&h->cond, &h->mutex);
  }
  pthread_mutex_unlock(&h->mutex);
  while (h->wait_for_waits > 0 && (int)mc_stats(h->device).waits < h->wait_for_waits && gpuhal_now_ns() < deadline)
    tu_sleep_ns(1000000);
  if (h->fail) return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "test hook: compiler unavailable");
  if (h->garbage) {
    *out_cubin = malloc(64);
    memset(*out_cubin, 0x5A, 64);
    *out_cubin_size = 64;
    return NULL;
  }
  return hook_link(h->device, ptx, ptx_size, out_cubin, out_cubin_size);
}

static void test_hook_free(void* user, void* cubin) {
  hook_state_t* h = (hook_state_t*)user;
  pthread_mutex_lock(&h->mutex);
  h->frees++;
  pthread_mutex_unlock(&h->mutex);
  free(cubin);
}

static gpuhal_device_t* hooked_device(gpuhal_driver_t* driver, hook_state_t* h, const char* dir) {
  gpuhal_device_params_t params = mc_params(dir);
  params.compile_fn = test_hook;
  params.compile_free_fn = test_hook_free;
  params.compile_user = h;
  h->device = mc_device(driver, 0, &params);
  return h->device;
}

/* ---- single flight ---- */
#define FLIGHT 8
typedef struct flight_s {
  gpuhal_device_t* device;
  unsigned k;
  pthread_barrier_t* barrier;
  gpuhal_executable_t* exe;
  gpuhal_status_t status;
} flight_t;

static void* flight_main(void* arg) {
  flight_t* f = (flight_t*)arg;
  pthread_barrier_wait(f->barrier);
  f->status = mc_load(f->device, f->k, 0, &f->exe);
  return NULL;
}

/* Starts `count` loads of image k at once and joins them. */
static void flight_run(gpuhal_device_t* device, unsigned k, flight_t* f, int count) {
  pthread_t threads[FLIGHT];
  pthread_barrier_t barrier;
  int i;
  pthread_barrier_init(&barrier, NULL, (unsigned)count);
  for (i = 0; i < count; ++i) {
    memset(&f[i], 0, sizeof(f[i]));
    f[i].device = device;
    f[i].k = k;
    f[i].barrier = &barrier;
    pthread_create(&threads[i], NULL, flight_main, &f[i]);
  }
  for (i = 0; i < count; ++i) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&barrier);
}

TU_TEST(single_flight_compiles_once) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params = mc_params(NULL);
  gpuhal_device_t* device;
  flight_t f[FLIGHT];
  gpuhal_module_cache_stats_t s;
  int i;
  if (!driver) TU_SKIP("no CUDA device");
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  flight_run(device, 7, f, FLIGHT);
  for (i = 0; i < FLIGHT; ++i) {
    TU_CHECK_OK(f[i].status);
    TU_CHECK(f[i].exe && f[i].exe->entry == f[0].exe->entry); /* one module */
  }
  TU_CHECK_OK(mc_run_check(device, f[FLIGHT - 1].exe, 7));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.compiles, 1);
  TU_CHECK_EQ_INT(s.misses, 1);
  TU_CHECK_EQ_INT(s.hits, FLIGHT - 1);
  fprintf(stderr, "  %d concurrent loads: 1 compile, %llu waited for it\n", FLIGHT, (unsigned long long)s.waits);
  for (i = 0; i < FLIGHT; ++i) gpuhal_executable_release(f[i].exe);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_TEST(single_flight_every_waiter_waits) {
  /* Deterministic: the compile (a hook) does not finish until all the others are waiting. */
  gpuhal_driver_t* driver = mc_driver();
  hook_state_t h;
  flight_t f[FLIGHT];
  gpuhal_module_cache_stats_t s;
  int i;
  if (!driver) TU_SKIP("no CUDA device");
  hook_init(&h);
  h.wait_for_waits = FLIGHT - 1;
  TU_REQUIRE(hooked_device(driver, &h, NULL) != NULL);
  flight_run(h.device, 9, f, FLIGHT);
  for (i = 0; i < FLIGHT; ++i) TU_CHECK_OK(f[i].status);
  s = mc_stats(h.device);
  TU_CHECK_EQ_INT(h.calls, 1);
  TU_CHECK_EQ_INT(h.frees, 1);
  TU_CHECK_EQ_INT(s.compiles, 1);
  TU_CHECK_EQ_INT(s.waits, FLIGHT - 1);
  TU_CHECK_OK(mc_run_check(h.device, f[0].exe, 9));
  for (i = 0; i < FLIGHT; ++i) gpuhal_executable_release(f[i].exe);
  gpuhal_device_release(h.device);
  hook_fini(&h);
  gpuhal_driver_release(driver);
}

TU_TEST(single_flight_shares_the_error_without_poisoning) {
  gpuhal_driver_t* driver = mc_driver();
  hook_state_t h;
  flight_t f[4];
  gpuhal_executable_t* exe = NULL;
  gpuhal_module_cache_stats_t s;
  char bad[1024];
  int i, n;
  if (!driver) TU_SKIP("no CUDA device");
  hook_init(&h);
  h.wait_for_waits = 3;
  h.fail = 1;
  TU_REQUIRE(hooked_device(driver, &h, NULL) != NULL);
  flight_run(h.device, 11, f, 4);
  for (i = 0; i < 4; ++i) {
    TU_CHECK_STATUS(f[i].status, GPUHAL_STATUS_UNAVAILABLE, "test hook: compiler unavailable");
    TU_CHECK(f[i].exe == NULL);
  }
  s = mc_stats(h.device);
  TU_CHECK_EQ_INT(h.calls, 1);
  TU_CHECK_EQ_INT(s.compile_failures, 1);
  TU_CHECK_EQ_INT(s.entries, 0);
  /* Not cached: the next load compiles again, and now succeeds. */
  h.fail = 0;
  h.wait_for_waits = 0;
  TU_CHECK_OK(mc_load(h.device, 11, 0, &exe));
  TU_CHECK_EQ_INT(h.calls, 2);
  if (exe) TU_CHECK_OK(mc_run_check(h.device, exe, 11));
  gpuhal_executable_release(exe);
  gpuhal_device_release(h.device);
  hook_fini(&h);
  /* The driver's own compile error: reported with the JIT log each time, never cached. */
  {
    gpuhal_device_params_t params = mc_params(NULL);
    gpuhal_device_t* device = mc_device(driver, 0, &params);
    TU_REQUIRE(device != NULL);
    n = gen_bad_ptx(1, bad, sizeof(bad));
    TU_CHECK_STATUS(gpuhal_executable_load(device, bad, (size_t)n, &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "PTX");
    TU_CHECK_STATUS(gpuhal_executable_load(device, bad, (size_t)n, &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "PTX");
    s = mc_stats(device);
    TU_CHECK_EQ_INT(s.compiles, 2);
    TU_CHECK_EQ_INT(s.compile_failures, 2);
    TU_CHECK_EQ_INT(s.entries, 0);
    gpuhal_device_release(device);
  }
  gpuhal_driver_release(driver);
}

/* ---- a hit is not blocked by another image's slow compile ---- */
typedef struct slow_load_s {
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_status_t status;
} slow_load_t;
static void* slow_load_main(void* arg) {
  slow_load_t* s = (slow_load_t*)arg;
  s->status = mc_load(s->device, 20, 0, &s->exe);
  return NULL;
}

TU_TEST(hit_not_blocked_by_slow_compile) {
  gpuhal_driver_t* driver = mc_driver();
  hook_state_t h;
  slow_load_t slow;
  pthread_t thread;
  gpuhal_executable_t* b = NULL;
  gpuhal_executable_t* b2 = NULL;
  gpuhal_executable_t* c = NULL;
  gpuhal_module_cache_stats_t s;
  int64_t t0, hit_ns;
  if (!driver) TU_SKIP("no CUDA device");
  hook_init(&h);
  TU_REQUIRE(hooked_device(driver, &h, NULL) != NULL);
  TU_REQUIRE_OK(mc_load(h.device, 21, 0, &b)); /* image B: cached */
  h.block_k = 20;                              /* image A's compile will hang until released */
  memset(&slow, 0, sizeof(slow));
  slow.device = h.device;
  pthread_create(&thread, NULL, slow_load_main, &slow);
  pthread_mutex_lock(&h.mutex);
  while (!h.blocked) pthread_cond_wait(&h.cond, &h.mutex);
  pthread_mutex_unlock(&h.mutex);
  /* A is compiling. B hits, C (another image) compiles, stats answer: nothing waits for A. */
  t0 = gpuhal_now_ns();
  TU_CHECK_OK(mc_load(h.device, 21, 0, &b2));
  hit_ns = gpuhal_now_ns() - t0;
  TU_CHECK_OK(mc_load(h.device, 22, 0, &c));
  s = mc_stats(h.device);
  TU_CHECK_EQ_INT(s.hits, 1);
  TU_CHECK_EQ_INT(s.misses, 3);
  if (b2) TU_CHECK_OK(mc_run_check(h.device, b2, 21));
  if (c) TU_CHECK_OK(mc_run_check(h.device, c, 22));
  pthread_mutex_lock(&h.mutex);
  TU_CHECK(slow.exe == NULL && !h.released); /* A is still compiling */
  h.released = 1;
  pthread_cond_broadcast(&h.cond);
  pthread_mutex_unlock(&h.mutex);
  pthread_join(thread, NULL);
  TU_CHECK_OK(slow.status);
  if (slow.exe) TU_CHECK_OK(mc_run_check(h.device, slow.exe, 20));
  fprintf(stderr, "  hit during another image's compile: %lld ns\n", (long long)hit_ns);
  gpuhal_executable_release(slow.exe);
  gpuhal_executable_release(b);
  gpuhal_executable_release(b2);
  gpuhal_executable_release(c);
  gpuhal_device_release(h.device);
  hook_fini(&h);
  gpuhal_driver_release(driver);
}

/* ---- eviction and limits ---- */
static void load_release(gpuhal_device_t* device, unsigned k) {
  gpuhal_executable_t* exe = NULL;
  TU_CHECK_OK(mc_load(device, k, 0, &exe));
  gpuhal_executable_release(exe);
}
static uint64_t compiles(gpuhal_device_t* device) { return mc_stats(device).compiles; }

TU_TEST(eviction_is_lru_and_respects_limits) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params = mc_params(NULL);
  gpuhal_device_t* device;
  gpuhal_executable_t* held[5];
  gpuhal_module_cache_stats_t s;
  char ptx[4096];
  uint64_t c;
  unsigned k;
  if (!driver) TU_SKIP("no CUDA device");
  params.module_cache_max_entries = 3;
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  for (k = 0; k < 3; ++k) load_release(device, k); /* LRU order: 0 1 2 */
  load_release(device, 0);                         /* hit; order: 1 2 0 */
  TU_CHECK_EQ_INT(compiles(device), 3);
  load_release(device, 3); /* evicts 1, the least recently used */
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.entries, 3);
  TU_CHECK_EQ_INT(s.evictions, 1);
  c = compiles(device);
  load_release(device, 0); /* still there */
  load_release(device, 2);
  load_release(device, 3);
  TU_CHECK_EQ_INT(compiles(device), c);
  load_release(device, 1); /* was evicted: compiles again (and evicts 0) */
  TU_CHECK_EQ_INT(compiles(device), c + 1);
  load_release(device, 0);
  TU_CHECK_EQ_INT(compiles(device), c + 2);
  /* Referenced entries are never evicted: five held, the limit is three. */
  for (k = 0; k < 5; ++k) TU_CHECK_OK(mc_load(device, 10 + k, 0, &held[k]));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.entries, 5);
  for (k = 0; k < 5; ++k) {
    TU_CHECK_OK(mc_run_check(device, held[k], 10 + k));
    gpuhal_executable_release(held[k]);
  }
  TU_CHECK_EQ_INT(mc_stats(device).entries, 3);
  gpuhal_device_release(device);

  /* A byte limit of two images' worth keeps at most two unreferenced entries. */
  params.module_cache_max_entries = 0;
  params.module_cache_max_bytes = 2 * (uint64_t)gen_module_ptx(50, 0, ptx, sizeof(ptx)) + 8;
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  for (k = 50; k < 55; ++k) load_release(device, k);
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.entries, 2);
  TU_CHECK(s.bytes <= params.module_cache_max_bytes);
  TU_CHECK_EQ_INT(s.evictions, 3);
  c = compiles(device);
  load_release(device, 54);
  load_release(device, 53);
  TU_CHECK_EQ_INT(compiles(device), c);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_TEST(trim_unloads_only_unreferenced_entries) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params = mc_params(NULL);
  gpuhal_device_t* device;
  gpuhal_executable_t* keep = NULL;
  gpuhal_module_cache_stats_t s;
  unsigned long long unloads;
  if (!driver) TU_SKIP("no CUDA device");
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  load_release(device, 30);
  load_release(device, 31);
  TU_CHECK_OK(mc_load(device, 32, 0, &keep));
  unloads = mc_calls("cuLibraryUnload");
  TU_CHECK_OK(gpuhal_device_module_cache_trim(device));
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.entries, 1);
  TU_CHECK_EQ_INT(s.trimmed, 2);
  if (tu_softcuda()) TU_CHECK_EQ_INT(mc_calls("cuLibraryUnload") - unloads, 2);
  if (keep) TU_CHECK_OK(mc_run_check(device, keep, 32));
  gpuhal_executable_release(keep);
  load_release(device, 30); /* trimmed: compiles again */
  TU_CHECK_EQ_INT(mc_stats(device).compiles, 4);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_TEST(functions_are_looked_up_once_per_module) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params = mc_params(NULL);
  gpuhal_device_t* device;
  gpuhal_executable_t* a = NULL;
  gpuhal_executable_t* b = NULL;
  gpuhal_kernel_t* ka = NULL;
  gpuhal_kernel_t* kb = NULL;
  unsigned long long before;
  if (!driver) TU_SKIP("no CUDA device");
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  TU_REQUIRE_OK(mc_load(device, 40, 0, &a));
  TU_REQUIRE_OK(mc_load(device, 40, 0, &b));
  TU_CHECK(a != b && a->entry == b->entry);
  before = mc_calls("cuModuleGetFunction");
  TU_CHECK_OK(gpuhal_executable_kernel(a, "gen_add_40", &ka));
  TU_CHECK_OK(gpuhal_executable_kernel(b, "gen_add_40", &kb));
  TU_CHECK(ka && kb && ka != kb && ka->function == kb->function);
  if (tu_softcuda()) TU_CHECK_EQ_INT(mc_calls("cuModuleGetFunction") - before, 1);
  TU_CHECK_STATUS(gpuhal_executable_kernel(b, "gen_add_41", &kb), GPUHAL_STATUS_NOT_FOUND, "gen_add_41");
  gpuhal_executable_release(a);
  TU_CHECK_OK(mc_run_check(device, b, 40)); /* b's kernel outlives a */
  gpuhal_executable_release(b);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_TEST(compile_hook_replaces_the_driver_compile) {
  gpuhal_driver_t* driver = mc_driver();
  hook_state_t h;
  gpuhal_executable_t* exe = NULL;
  gpuhal_executable_t* again = NULL;
  gpuhal_device_info_t info;
  unsigned long long loads_ptx;
  if (!driver) TU_SKIP("no CUDA device");
  memset(&info, 0, sizeof(info)); /* read below even when the call fails */
  hook_init(&h);
  TU_REQUIRE(hooked_device(driver, &h, NULL) != NULL);
  TU_CHECK_OK(gpuhal_device_info(h.device, &info));
  loads_ptx = mc_calls("cuModuleLoadDataEx");
  TU_CHECK_OK(mc_load(h.device, 60, 0, &exe));
  TU_CHECK_OK(mc_load(h.device, 60, 0, &again));
  TU_CHECK_EQ_INT(h.calls, 1);
  TU_CHECK_EQ_INT(h.frees, 1);
  TU_CHECK_EQ_INT(h.cc_major, info.compute_capability_major);
  if (tu_softcuda()) TU_CHECK_EQ_INT(mc_calls("cuModuleLoadDataEx") - loads_ptx, 1); /* the cubin */
  if (exe) TU_CHECK_OK(mc_run_check(h.device, exe, 60));
  gpuhal_executable_release(exe);
  gpuhal_executable_release(again);
  /* A hook that returns something that is not a cubin fails the load, and is freed. */
  h.garbage = 1;
  TU_CHECK_STATUS(mc_load(h.device, 61, 0, &exe), GPUHAL_STATUS_INTERNAL, "compile hook");
  TU_CHECK_EQ_INT(h.frees, 2);
  TU_CHECK_EQ_INT(mc_stats(h.device).entries, 1);
  gpuhal_device_release(h.device);
  hook_fini(&h);
  gpuhal_driver_release(driver);
}

TU_TEST(bad_arguments) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params = mc_params(NULL);
  gpuhal_device_t* device;
  gpuhal_module_cache_stats_t s;
  if (!driver) TU_SKIP("no CUDA device");
  TU_CHECK_STATUS(gpuhal_device_module_cache_stats(NULL, &s), GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  TU_CHECK_STATUS(gpuhal_device_module_cache_trim(NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  TU_CHECK_STATUS(gpuhal_device_module_cache_trim((gpuhal_device_t*)(void*)driver), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "right type");
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  TU_CHECK_STATUS(gpuhal_device_module_cache_stats(device, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "out_stats");
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.max_entries, 1024);
  TU_CHECK_EQ_INT(s.disk_enabled, 0);
  gpuhal_device_release(device);
  TU_CHECK_STATUS(gpuhal_device_module_cache_trim(device), GPUHAL_STATUS_INVALID_ARGUMENT, "released");
  gpuhal_driver_release(driver);
}

TU_MAIN(TU_CASE(fast_hash_is_deterministic_and_sensitive), TU_CASE(many_modules_cold_warm_and_after_release),
        TU_CASE(two_devices_four_threads), TU_CASE(single_flight_compiles_once),
        TU_CASE(single_flight_every_waiter_waits), TU_CASE(single_flight_shares_the_error_without_poisoning),
        TU_CASE(hit_not_blocked_by_slow_compile), TU_CASE(eviction_is_lru_and_respects_limits),
        TU_CASE(trim_unloads_only_unreferenced_entries), TU_CASE(functions_are_looked_up_once_per_module),
        TU_CASE(compile_hook_replaces_the_driver_compile), TU_CASE(bad_arguments))
