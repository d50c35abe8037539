/* Stress (issue #9): 16 threads issue a random mix of operations across 2 devices for a
 * fixed number of operations, with random CUDA faults injected on softcuda. At the end
 * every semaphore is at its expected value or failed with a cause that names a CUDA error,
 * nothing hangs, and nothing leaks (softcuda's report at teardown and exit, LSan in the
 * ASan build).
 *
 * Each thread owns a chain: a timeline semaphore and the value its last submitted operation
 * signals. Every queue operation waits on the chain's current value and signals the next
 * one, on a random queue of a random device (so chains cross queues and devices). A
 * submission refused at the call is answered by a host signal (nothing was queued); a
 * chain whose semaphore failed is checked (the cause must name a CUDA error), then replaced.
 *
 * Environment: GPUHAL_STRESS_OPS (total operations, default 4000), GPUHAL_STRESS_THREADS (16),
 * GPUHAL_STRESS_SEED, GPUHAL_STRESS_FAULT_PERCENT (chance per operation of arming one fault,
 * default 3; softcuda only). Prints a summary line of what ran and how it ended.
 */
#include "gpuhal.h"

#include <pthread.h>

#include "test_util.h"

#ifndef GPUHAL_KERNELS_DIR
#define GPUHAL_KERNELS_DIR "tests/kernels"
#endif

#define ST_MAX_THREADS 64
#define ST_WAIT_NS 30000000000ll

typedef int (*st_set_faults_fn)(const char*);
typedef unsigned long long (*st_query_leaks_fn)(void);
static st_set_faults_fn st_set_faults;
static void (*st_clear_faults)(void);
static st_query_leaks_fn st_query_leaks;

/* Entry points a random fault may hit: allocation, launch, events, copies, graph upkeep.
 * Not the releasing ones (cuMemFreeAsync, cuEventDestroy, ...): when those fail the driver
 * keeps the object and softcuda rightly reports it; test_fault_sweep covers them. */
static const char* const st_fault_entries[] = {"cuMemAlloc",
                                               "cuMemAllocFromPoolAsync",
                                               "cuLaunchKernel",
                                               "cuGraphLaunch",
                                               "cuEventRecord",
                                               "cuStreamWaitEvent",
                                               "cuMemcpyHtoD",
                                               "cuMemcpyDtoH",
                                               "cuModuleLoadDataEx",
                                               "cuModuleGetFunction",
                                               "cuGraphInstantiateWithFlags",
                                               "cuMemsetD32Async",
                                               "cuMemcpyHtoDAsync",
                                               "cuGraphExecKernelNodeSetParams",
                                               "cuEventCreate",
                                               "cuMemAllocHost"};

typedef struct st_shared_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device[2];
  int device_count;
  uint32_t queues;
  char* ptx;
  size_t ptx_size;
  int ops_per_thread;
  int fault_percent;
  int softcuda;
} st_shared_t;

typedef struct st_thread_s {
  st_shared_t* shared;
  int index;
  uint64_t rng;
  gpuhal_semaphore_t* chain;
  uint64_t value; /* what the chain reaches when everything submitted completes */
  /* Host functions run, per chain generation: a host call of a failed chain whose wait was
   * reached before the failure still runs, possibly after the chain was replaced. */
  int host_calls[64];
  unsigned generation;
  int host_expected;
  /* tallies */
  int ops, submitted, refused, chains_failed, faults_armed, bad;
  char bad_what[256];
} st_thread_t;

static uint32_t st_rand(st_thread_t* t) {
  t->rng ^= t->rng << 13;
  t->rng ^= t->rng >> 7;
  t->rng ^= t->rng << 17;
  return (uint32_t)(t->rng >> 16);
}

static void st_bad(st_thread_t* t, const char* what, gpuhal_status_t st) {
  if (!t->bad)
    snprintf(t->bad_what, sizeof(t->bad_what), "thread %d: %s: %s", t->index, what, gpuhal_status_message(st));
  t->bad++;
}

/* A cause must say which CUDA error (or entry point) it came from. */
static int st_names_cuda(gpuhal_status_t st) {
  const char* m = gpuhal_status_message(st);
  return strstr(m, "CUDA_ERROR_") != NULL || strstr(m, " cu") != NULL;
}

/* Replaces a failed chain (after checking its cause) with a fresh one. */
static void st_new_chain(st_thread_t* t) {
  gpuhal_status_t st;
  gpuhal_semaphore_release(t->chain);
  t->chain = NULL;
  t->value = 0;
  t->generation++;
  __atomic_store_n(&t->host_calls[t->generation % 64], 0, __ATOMIC_RELEASE);
  t->host_expected = 0;
  st = gpuhal_semaphore_create(t->shared->driver, 0, &t->chain);
  if (st) st_bad(t, "semaphore_create", st);
  gpuhal_status_free(st);
}

/* Waits for the chain's value: reached, or failed with a CUDA cause (then a new chain). */
static void st_settle_chain(st_thread_t* t) {
  gpuhal_status_t st;
  if (!t->chain) return;
  st = gpuhal_semaphore_wait(t->chain, t->value, gpuhal_timeout_relative_ns(ST_WAIT_NS));
  if (!st) {
    int ran = __atomic_load_n(&t->host_calls[t->generation % 64], __ATOMIC_ACQUIRE);
    if (ran != t->host_expected)
      st_bad(t, "host calls on a completed chain",
             gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "%d ran, %d submitted", ran, t->host_expected));
    return;
  }
  if (gpuhal_status_code(st) == GPUHAL_STATUS_DEADLINE_EXCEEDED) {
    st_bad(t, "chain stuck (neither reached nor failed)", st);
  } else if (!st_names_cuda(st)) {
    st_bad(t, "chain failed without a CUDA cause", st);
  } else {
    t->chains_failed++;
  }
  gpuhal_status_free(st);
  st_new_chain(t);
}

/* Submission result: queued (the chain advances), or refused (the host signals instead). */
static void st_submitted(st_thread_t* t, gpuhal_status_t st) {
  if (!st) {
    t->submitted++;
    t->value++;
    return;
  }
  t->refused++;
  if (gpuhal_status_code(st) == GPUHAL_STATUS_INVALID_ARGUMENT && !st_names_cuda(st))
    st_bad(t, "submission refused", st);
  gpuhal_status_free(st);
  /* Nothing was queued: keep the chain going from the host, unless it already failed. */
  st = gpuhal_semaphore_wait(t->chain, t->value, gpuhal_timeout_relative_ns(ST_WAIT_NS));
  if (!st) st = gpuhal_semaphore_signal(t->chain, t->value + 1);
  if (!st) {
    t->value++;
  } else {
    gpuhal_status_free(st);
    st_settle_chain(t);
  }
}

static gpuhal_status_t st_host_fn(void* user) {
  __atomic_add_fetch((int*)user, 1, __ATOMIC_ACQ_REL);
  return NULL;
}

static gpuhal_status_t st_record_fill(gpuhal_device_t* device, gpuhal_kernel_t* kernel, gpuhal_buffer_t* buffer,
                                      uint32_t value, gpuhal_command_buffer_flags_t flags,
                                      gpuhal_command_buffer_t** out) {
  gpuhal_arg_t args[3];
  gpuhal_status_t st = gpuhal_command_buffer_create(device, flags, 0, out);
  uint32_t pattern = value ^ 0xFFFFu;
  args[0] = gpuhal_arg_buffer(buffer, 0);
  args[1] = gpuhal_arg_u32(value);
  args[2] = gpuhal_arg_u32(64);
  if (!st) st = gpuhal_command_buffer_begin(*out);
  if (!st) st = gpuhal_cmd_dispatch(*out, kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(64, 1, 1), 0, 3, args);
  if (!st) st = gpuhal_cmd_barrier(*out);
  if (!st) st = gpuhal_cmd_fill(*out, gpuhal_ref_buffer(buffer, 256), 256, &pattern, 4);
  if (!st) st = gpuhal_command_buffer_end(*out);
  return st;
}

/* One random operation. */
static void st_one_op(st_thread_t* t) {
  st_shared_t* s = t->shared;
  gpuhal_device_t* device = s->device[st_rand(t) % (uint32_t)s->device_count];
  uint32_t queue = st_rand(t) % s->queues;
  gpuhal_semaphore_t* chain = t->chain;
  uint64_t wait_value = t->value, signal_value = t->value + 1;
  gpuhal_semaphore_list_t wait = gpuhal_semaphore_list_one(&chain, &wait_value);
  gpuhal_semaphore_list_t signal = gpuhal_semaphore_list_one(&chain, &signal_value);
  gpuhal_status_t st = NULL;
  uint32_t op = st_rand(t) % 100;
  if (s->softcuda && s->fault_percent > 0 && (int)(st_rand(t) % 100) < s->fault_percent) {
    char rule[128];
    snprintf(rule, sizeof(rule), "%s@%u=CUDA_ERROR_OUT_OF_MEMORY",
             st_fault_entries[st_rand(t) % (sizeof(st_fault_entries) / sizeof(st_fault_entries[0]))],
             1 + st_rand(t) % 3);
    if (st_set_faults(rule) != 0) { /* softcuda's rule table is full: start it afresh */
      st_clear_faults();
      if (st_set_faults(rule) == 0) t->faults_armed++;
    } else {
      t->faults_armed++;
    }
  }
  t->ops++;
  if (!t->chain) {
    st_new_chain(t);
    return;
  }
  if (op < 20) { /* barrier execute */
    st_submitted(t, gpuhal_queue_execute(device, queue, wait, signal, NULL, NULL));
  } else if (op < 35) { /* host call */
    st = gpuhal_queue_host_call(device, queue, wait, signal, st_host_fn, &t->host_calls[t->generation % 64]);
    if (!st) t->host_expected++;
    st_submitted(t, st);
  } else if (op < 55) { /* record and execute a one-shot command buffer (graph or stream) */
    gpuhal_executable_t* exe = NULL;
    gpuhal_kernel_t* kernel = NULL;
    gpuhal_buffer_t* buffer = NULL;
    gpuhal_command_buffer_t* cb = NULL;
    st = gpuhal_executable_load(device, s->ptx, s->ptx_size, &exe);
    if (!st) st = gpuhal_executable_kernel(exe, "fill_u32", &kernel);
    if (!st) st = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, 512, &buffer);
    if (!st)
      st = st_record_fill(device, kernel, buffer, st_rand(t), (st_rand(t) & 1) ? GPUHAL_COMMAND_BUFFER_STREAM : 0, &cb);
    if (!st) {
      st_submitted(t, gpuhal_queue_execute(device, queue, wait, signal, cb, NULL));
    } else if (!st_names_cuda(st)) {
      st_bad(t, "recording", st);
    }
    gpuhal_status_free(st);
    /* Released at once: the queue keeps what it needs alive. */
    gpuhal_command_buffer_release(cb);
    gpuhal_buffer_release(buffer);
    gpuhal_executable_release(exe);
  } else if (op < 75) { /* alloca, then dealloca after it */
    gpuhal_buffer_t* buffer = NULL;
    st = gpuhal_queue_alloca(device, queue, wait, signal, 1024 + st_rand(t) % 65536, &buffer);
    st_submitted(t, st);
    if (buffer && t->chain == chain) {
      wait_value = t->value;
      signal_value = t->value + 1;
      st_submitted(t, gpuhal_queue_dealloca(device, st_rand(t) % s->queues, wait, signal, buffer));
    }
    gpuhal_buffer_release(buffer);
  } else if (op < 85) { /* a synchronous buffer round trip */
    gpuhal_buffer_t* buffer = NULL;
    uint32_t in[32], out[32];
    int i;
    for (i = 0; i < 32; ++i) in[i] = st_rand(t);
    st = gpuhal_buffer_allocate(device, (gpuhal_memory_kind_t)(st_rand(t) % 3), sizeof(in), &buffer);
    if (!st) st = gpuhal_buffer_write(buffer, 0, in, sizeof(in));
    if (!st) st = gpuhal_buffer_read(buffer, 0, out, sizeof(out));
    if (!st && memcmp(in, out, sizeof(in)) != 0)
      st_bad(t, "buffer round trip", gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "read back differs"));
    if (st && !st_names_cuda(st)) st_bad(t, "buffer round trip", st);
    gpuhal_status_free(st);
    gpuhal_buffer_release(buffer);
  } else if (op < 95) { /* a host wait on the chain so far */
    st_settle_chain(t);
  } else { /* query */
    uint64_t value = 0;
    st = gpuhal_semaphore_query(t->chain, &value);
    if (!st && value > t->value) st_bad(t, "semaphore value beyond what was submitted", NULL);
    if (st && !st_names_cuda(st)) st_bad(t, "query of a failed chain", st);
    gpuhal_status_free(st);
  }
}

static void* st_thread_main(void* arg) {
  st_thread_t* t = (st_thread_t*)arg;
  int i;
  st_new_chain(t);
  for (i = 0; i < t->shared->ops_per_thread; ++i) st_one_op(t);
  st_settle_chain(t);
  gpuhal_semaphore_release(t->chain);
  t->chain = NULL;
  return NULL;
}

static int st_env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v && v[0] ? atoi(v) : fallback;
}

static char* st_read_ptx(const char* name, size_t* size) {
  char file[256];
  snprintf(file, sizeof(file), "%s.ptx", name);
  return tu_read_kernel_file(file, size);
}

TU_TEST(random_mix_across_devices_with_faults) {
  st_shared_t s;
  st_thread_t threads[ST_MAX_THREADS];
  pthread_t handles[ST_MAX_THREADS];
  gpuhal_device_params_t params;
  int thread_count = st_env_int("GPUHAL_STRESS_THREADS", 16);
  int total_ops = st_env_int("GPUHAL_STRESS_OPS", 4000);
  uint64_t seed = (uint64_t)st_env_int("GPUHAL_STRESS_SEED", 12345);
  int i, count = 0, ops = 0, submitted = 0, refused = 0, chains_failed = 0, faults = 0, bad = 0;
  int64_t t0 = gpuhal_now_ns();
  memset(&s, 0, sizeof(s));
  if (thread_count < 1) thread_count = 1;
  if (thread_count > ST_MAX_THREADS) thread_count = ST_MAX_THREADS;
  s.softcuda = tu_softcuda();
  s.fault_percent = st_env_int("GPUHAL_STRESS_FAULT_PERCENT", 3);
  s.ops_per_thread = total_ops / thread_count;
  if (s.softcuda) {
    const char* lib = getenv("GPUHAL_CUDA_LIBRARY");
    void* h = dlopen(lib && lib[0] ? lib : "libcuda.so.1", RTLD_NOW);
    st_set_faults = h ? (st_set_faults_fn)(uintptr_t)dlsym(h, "softcuda_set_faults") : NULL;
    st_query_leaks = h ? (st_query_leaks_fn)(uintptr_t)dlsym(h, "softcuda_query_leaks") : NULL;
    st_clear_faults = h ? (void (*)(void))(uintptr_t)dlsym(h, "softcuda_clear_faults") : NULL;
    TU_REQUIRE(st_set_faults && st_query_leaks && st_clear_faults);
  }
  s.ptx = st_read_ptx("fill_u32", &s.ptx_size);
  if (!s.ptx) TU_SKIP("test kernels not available");
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &s.driver));
  TU_REQUIRE_OK(gpuhal_driver_device_count(s.driver, &count));
  if (count < 1) {
    gpuhal_driver_release(s.driver);
    free(s.ptx);
    TU_SKIP("no device");
  }
  s.device_count = count >= 2 ? 2 : 1;
  s.queues = 2;
  memset(&params, 0, sizeof(params));
  params.queue_count = s.queues;
  for (i = 0; i < s.device_count; ++i) TU_REQUIRE_OK(gpuhal_device_create(s.driver, i, &params, &s.device[i]));

  memset(threads, 0, sizeof(threads));
  for (i = 0; i < thread_count; ++i) {
    threads[i].shared = &s;
    threads[i].index = i;
    threads[i].rng = seed * 0x9E3779B97F4A7C15ull + (uint64_t)(i + 1) * 0xBF58476D1CE4E5B9ull;
    TU_REQUIRE(pthread_create(&handles[i], NULL, st_thread_main, &threads[i]) == 0);
  }
  for (i = 0; i < thread_count; ++i) pthread_join(handles[i], NULL);
  if (s.softcuda) st_clear_faults();
  for (i = 0; i < thread_count; ++i) {
    ops += threads[i].ops;
    submitted += threads[i].submitted;
    refused += threads[i].refused;
    chains_failed += threads[i].chains_failed;
    faults += threads[i].faults_armed;
    bad += threads[i].bad;
    if (threads[i].bad) TU_FAIL_AT(__FILE__, __LINE__, "%s (%d problems)", threads[i].bad_what, threads[i].bad);
  }
  /* Everything submitted is done; the devices are still usable (injected faults are not
   * sticky), unless one was lost, which must then be reported with its cause. */
  for (i = 0; i < s.device_count; ++i) {
    gpuhal_status_t st = gpuhal_device_wait_idle(s.device[i], gpuhal_timeout_relative_ns(ST_WAIT_NS));
    if (gpuhal_status_code(st) == GPUHAL_STATUS_DEADLINE_EXCEEDED)
      TU_FAIL_AT(__FILE__, __LINE__, "device %d never went idle", i);
    else if (st && !st_names_cuda(st))
      TU_FAIL_AT(__FILE__, __LINE__, "wait_idle: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
  }
  for (i = 0; i < s.device_count; ++i) gpuhal_device_release(s.device[i]);
  gpuhal_driver_release(s.driver);
  free(s.ptx);
  if (s.softcuda) TU_CHECK_EQ_INT(st_query_leaks(), 0);
  printf(
      "stress: %d threads, %d devices, %d ops (%d submitted, %d refused at the call), %d faults armed, "
      "%d chains failed with a CUDA cause, %d problems, %.2f s\n",
      thread_count, s.device_count, ops, submitted, refused, faults, chains_failed, bad,
      (double)(gpuhal_now_ns() - t0) / 1e9);
}

TU_MAIN(TU_CASE(random_mix_across_devices_with_faults))
