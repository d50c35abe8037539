/* bench_pipeline - a whole program's pipeline through gpuhal against the same pipeline
 * written by hand with the raw driver API, same buffers, same kernels, same run.
 *
 *   bench_pipeline [repetitions] [n:batches ...]
 *       (defaults: 5 repetitions, 1024:1000 4096:100; on softcuda e.g. `1 64:8`)
 *
 * Each batch is the pipeline example's shape at a realistic size:
 *   upload    (queue/stream 0)  copy an n x n float matrix from pinned host memory into
 *                               the batch's device slot
 *   compute   (queue/stream 1)  a chain of 4 SGEMMs (tests/kernels/sgemm.cu):
 *                               t0 = in * W, t1 = t0 * W, t0 = t1 * W, out = t0 * W
 *   download  (queue/stream 2)  copy out back to the slot's pinned host matrix
 * 3 slots, 3 batches in flight: the host waits for batch i - 3 to be downloaded before it
 * queues batch i. Every stage is ordered only by semaphores (by events on the raw side):
 *   upload i    waits computed >= i - 2   (batch i - 3 no longer reads the slot's input)
 *   compute i   waits uploaded >= i + 1, downloaded >= i - 2 (the slot's output is free)
 *   download i  waits computed >= i + 1
 * gpuhal runs it with 9 reusable command buffers (a stage per slot), once recorded as CUDA
 * graphs (the default) and once as STREAM command buffers. The raw side: three streams,
 * cuEventRecord / cuStreamWaitEvent, cuMemcpyHtoDAsync / cuMemcpyDtoHAsync on the same
 * pinned staging, 4 cuLaunchKernel, and cuEventSynchronize on a blocking-sync event for
 * the host's wait, all on one thread.
 *
 * Reported per size, median and range over the repetitions: wall time per batch, host CPU
 * per batch (CLOCK_PROCESS_CPUTIME_ID: every thread of the process, gpuhal's and the
 * driver's), and the compute stream's busy fraction (batches x the 4-SGEMM chain's GPU
 * time, measured alone with events, / wall). Targets: wall <= 1.03x and host CPU per batch
 * <= 1.5x the hand-written pipeline. W is 2I and each slot's input has small integers, so
 * every result is exactly 16 x its input: each run's last three batches are checked.
 *
 * With BP_THREADS=1 each run also prints its CPU per batch by thread name (the bench
 * thread as "(main)", gpuhal's threads, the driver's), from /proc/self/task; with
 * BP_THREADS=2 by thread id.
 *
 * Timings mean something only on a real GPU; on softcuda this is a smoke test (CTest runs
 * it with a 64 x 64 matrix). */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

enum { SLOTS = 3, CHAIN = 4, MAX_REPS = 32 };

typedef struct bench_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* executable;
  gpuhal_kernel_t* sgemm;
  uint32_t n;
  uint64_t bytes;
  gpuhal_buffer_t *host_in, *host_out; /* SLOTS matrices each, pinned */
  gpuhal_buffer_t *in[SLOTS], *out[SLOTS], *t[2], *w;
  int failures;
} bench_t;

/* One side's run. */
typedef struct run_s {
  double wall_us, cpu_us; /* per batch */
} run_t;

static int ok(bench_t* b, gpuhal_status_t s, const char* what) {
  if (!s) return 1;
  fprintf(stderr, "bench_pipeline: %s: %s\n", what, gpuhal_status_message(s));
  gpuhal_status_free(s);
  b->failures++;
  return 0;
}
static int ok_cu(bench_t* b, CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return 1;
  fprintf(stderr, "bench_pipeline: %s: CUresult %d\n", what, (int)r);
  b->failures++;
  return 0;
}

static double cpu_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}
static double wall_now_us(void) { return (double)gpuhal_now_ns() / 1000.0; }

/* ---- diagnostics (BP_THREADS=1): CPU time per thread name, from /proc/self/task ----
 * Each thread's name (comm) and CPU time (schedstat's first field, ns; utime + stime in
 * clock ticks where schedstat is missing), summed per name, so that a run's CPU can be
 * split between the bench thread, gpuhal's threads and the driver's. */
enum { BP_NAMES = 16 };
typedef struct bp_threads_s {
  int count;
  char name[BP_NAMES][20];
  double us[BP_NAMES];
} bp_threads_t;
static double bp_thread_us(const char* dir) {
  char path[300];
  FILE* f;
  unsigned long long ns = 0, ut = 0, st = 0;
  snprintf(path, sizeof(path), "%s/schedstat", dir);
  if ((f = fopen(path, "r")) != NULL) {
    int got = fscanf(f, "%llu", &ns);
    fclose(f);
    if (got == 1) return (double)ns / 1000.0;
  }
  snprintf(path, sizeof(path), "%s/stat", dir);
  if ((f = fopen(path, "r")) != NULL) {
    char line[1024];
    const char* p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
    fclose(f);
    /* after the name: state, then fields 4..13; utime and stime are fields 14 and 15 */
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
      return (double)(ut + st) * 1e6 / 100.0; /* USER_HZ */
  }
  return 0;
}
static void bp_threads_snapshot(bp_threads_t* t) {
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  memset(t, 0, sizeof(*t));
  if (!d) return;
  while ((e = readdir(d)) != NULL) {
    char dir[280], path[300], name[20] = "?";
    FILE* f;
    int k;
    if (e->d_name[0] == '.') continue;
    snprintf(dir, sizeof(dir), "/proc/self/task/%s", e->d_name);
    snprintf(path, sizeof(path), "%s/comm", dir);
    if ((f = fopen(path, "r")) != NULL) {
      if (fgets(name, sizeof(name), f)) name[strcspn(name, "\n")] = 0;
      fclose(f);
    }
    if (atol(e->d_name) == (long)getpid())
      snprintf(name, sizeof(name), "(main)");
    else if (getenv("BP_THREADS")[0] == '2')
      snprintf(name, sizeof(name), "%.19s", e->d_name); /* each by its id */
    for (k = 0; k < t->count && strcmp(t->name[k], name) != 0; ++k) {
    }
    if (k == t->count) {
      if (k == BP_NAMES) continue;
      snprintf(t->name[k], sizeof(t->name[k]), "%s", name);
      t->count++;
    }
    t->us[k] += bp_thread_us(dir);
  }
  closedir(d);
}
static void bp_threads_print(const char* side, const bp_threads_t* a, const bp_threads_t* b, uint32_t batches) {
  int k, j;
  printf("    %s, CPU per batch by thread:", side);
  for (k = 0; k < b->count; ++k) {
    double before = 0;
    for (j = 0; j < a->count; ++j)
      if (!strcmp(a->name[j], b->name[k])) before = a->us[j];
    if (b->us[k] - before >= 0.05 * batches) printf(" %s %.1f us", b->name[k], (b->us[k] - before) / batches);
  }
  printf("\n");
}

static float input_value(uint32_t slot, uint32_t r, uint32_t c) { return (float)((r * 7u + c * 3u + slot) % 5u); }

/* ---- buffers ---- */
static int setup(bench_t* b, uint32_t n) {
  gpuhal_device_params_t params;
  float* host;
  uint32_t s, r, c;
  float* w;
  int good;
  b->n = n;
  b->bytes = (uint64_t)n * n * sizeof(float);
  memset(&params, 0, sizeof(params));
  params.queue_count = 3;
  if (!ok(b, gpuhal_driver_create(NULL, &b->driver), "driver_create") ||
      !ok(b, gpuhal_device_create(b->driver, 0, &params, &b->device), "device_create"))
    return 0;
  {
    char path[1024];
    size_t size = 0;
    char* ptx;
    snprintf(path, sizeof(path), "%s/sgemm.ptx", GPUHAL_KERNELS_DIR);
    ptx = tu_read_file(path, &size);
    if (!ptx) {
      fprintf(stderr, "bench_pipeline: cannot read %s\n", path);
      b->failures++;
      return 0;
    }
    good = ok(b, gpuhal_executable_load(b->device, ptx, size, &b->executable), "executable_load") &&
           ok(b, gpuhal_executable_kernel(b->executable, "sgemm", &b->sgemm), "executable_kernel");
    free(ptx);
    if (!good) return 0;
  }
  if (!ok(b, gpuhal_buffer_allocate(b->device, GPUHAL_MEMORY_HOST_PINNED, SLOTS * b->bytes, &b->host_in), "host_in") ||
      !ok(b, gpuhal_buffer_allocate(b->device, GPUHAL_MEMORY_HOST_PINNED, SLOTS * b->bytes, &b->host_out),
          "host_out") ||
      !ok(b, gpuhal_buffer_allocate(b->device, GPUHAL_MEMORY_DEVICE, b->bytes, &b->w), "w") ||
      !ok(b, gpuhal_buffer_allocate(b->device, GPUHAL_MEMORY_DEVICE, b->bytes, &b->t[0]), "t0") ||
      !ok(b, gpuhal_buffer_allocate(b->device, GPUHAL_MEMORY_DEVICE, b->bytes, &b->t[1]), "t1"))
    return 0;
  for (s = 0; s < SLOTS; ++s)
    if (!ok(b, gpuhal_buffer_allocate(b->device, GPUHAL_MEMORY_DEVICE, b->bytes, &b->in[s]), "in") ||
        !ok(b, gpuhal_buffer_allocate(b->device, GPUHAL_MEMORY_DEVICE, b->bytes, &b->out[s]), "out"))
      return 0;
  host = (float*)gpuhal_buffer_host_pointer(b->host_in);
  for (s = 0; s < SLOTS; ++s)
    for (r = 0; r < n; ++r)
      for (c = 0; c < n; ++c) host[(size_t)s * n * n + (size_t)r * n + c] = input_value(s, r, c);
  w = (float*)calloc((size_t)n * n, sizeof(float));
  if (!w) return 0;
  for (r = 0; r < n; ++r) w[(size_t)r * n + r] = 2.0f;
  good = ok(b, gpuhal_buffer_write(b->w, 0, w, b->bytes), "write W");
  free(w);
  return good;
}

static void teardown(bench_t* b) {
  uint32_t s;
  for (s = 0; s < SLOTS; ++s) {
    gpuhal_buffer_release(b->in[s]);
    gpuhal_buffer_release(b->out[s]);
  }
  gpuhal_buffer_release(b->t[0]);
  gpuhal_buffer_release(b->t[1]);
  gpuhal_buffer_release(b->w);
  gpuhal_buffer_release(b->host_in);
  gpuhal_buffer_release(b->host_out);
  gpuhal_executable_release(b->executable);
  gpuhal_device_release(b->device);
  gpuhal_driver_release(b->driver);
  memset(b, 0, sizeof(*b));
}

/* The last three batches' results: 16 x their slot's input. */
static int check_results(bench_t* b, const char* side, uint32_t batches) {
  const float* out = (const float*)gpuhal_buffer_host_pointer(b->host_out);
  uint32_t s, r, c, n = b->n;
  for (s = 0; s < SLOTS && s < batches; ++s)
    for (r = 0; r < n; ++r)
      for (c = 0; c < n; ++c) {
        float got = out[(size_t)s * n * n + (size_t)r * n + c], want = 16.0f * input_value(s, r, c);
        if (got != want) {
          fprintf(stderr, "bench_pipeline: %s, n %u: slot %u [%u][%u] is %g, expected %g\n", side, n, s, r, c,
                  (double)got, (double)want);
          b->failures++;
          return 0;
        }
      }
  return 1;
}

/* ---- gpuhal ---- */
typedef struct hal_side_s {
  gpuhal_command_buffer_t *upload[SLOTS], *compute[SLOTS], *download[SLOTS];
  gpuhal_semaphore_t *uploaded, *computed, *downloaded;
} hal_side_t;

static gpuhal_status_t record_copy(bench_t* b, gpuhal_command_buffer_flags_t mode, gpuhal_buffer_ref_t src,
                                   gpuhal_buffer_ref_t dst, gpuhal_command_buffer_t** out) {
  gpuhal_status_t st = gpuhal_command_buffer_create(b->device, GPUHAL_COMMAND_BUFFER_REUSABLE | mode, 0, out);
  if (!st) st = gpuhal_command_buffer_begin(*out);
  if (!st) st = gpuhal_cmd_copy(*out, src, dst, b->bytes);
  if (!st) st = gpuhal_command_buffer_end(*out);
  return st;
}

static gpuhal_status_t record_compute(bench_t* b, gpuhal_command_buffer_flags_t mode, uint32_t slot,
                                      gpuhal_command_buffer_t** out) {
  gpuhal_buffer_t* src[CHAIN] = {b->in[slot], b->t[0], b->t[1], b->t[0]};
  gpuhal_buffer_t* dst[CHAIN] = {b->t[0], b->t[1], b->t[0], b->out[slot]};
  gpuhal_status_t st = gpuhal_command_buffer_create(b->device, GPUHAL_COMMAND_BUFFER_REUSABLE | mode, 0, out);
  int k;
  if (!st) st = gpuhal_command_buffer_begin(*out);
  for (k = 0; k < CHAIN && !st; ++k) {
    gpuhal_arg_t args[4];
    args[0] = gpuhal_arg_buffer(src[k], 0);
    args[1] = gpuhal_arg_buffer(b->w, 0);
    args[2] = gpuhal_arg_buffer(dst[k], 0);
    args[3] = gpuhal_arg_u32(b->n);
    if (k > 0) st = gpuhal_cmd_barrier(*out);
    if (!st)
      st =
          gpuhal_cmd_dispatch(*out, b->sgemm, gpuhal_dim3(b->n / 64, b->n / 64, 1), gpuhal_dim3(16, 16, 1), 0, 4, args);
  }
  if (!st) st = gpuhal_command_buffer_end(*out);
  return st;
}

static int hal_open(bench_t* b, gpuhal_command_buffer_flags_t mode, hal_side_t* h) {
  uint32_t s;
  memset(h, 0, sizeof(*h));
  for (s = 0; s < SLOTS; ++s)
    if (!ok(b,
            record_copy(b, mode, gpuhal_ref_buffer(b->host_in, s * b->bytes), gpuhal_ref_buffer(b->in[s], 0),
                        &h->upload[s]),
            "record upload") ||
        !ok(b, record_compute(b, mode, s, &h->compute[s]), "record compute") ||
        !ok(b,
            record_copy(b, mode, gpuhal_ref_buffer(b->out[s], 0), gpuhal_ref_buffer(b->host_out, s * b->bytes),
                        &h->download[s]),
            "record download"))
      return 0;
  return ok(b, gpuhal_semaphore_create(b->driver, 0, &h->uploaded), "semaphore") &&
         ok(b, gpuhal_semaphore_create(b->driver, 0, &h->computed), "semaphore") &&
         ok(b, gpuhal_semaphore_create(b->driver, 0, &h->downloaded), "semaphore");
}

static void hal_close(hal_side_t* h) {
  uint32_t s;
  for (s = 0; s < SLOTS; ++s) {
    gpuhal_command_buffer_release(h->upload[s]);
    gpuhal_command_buffer_release(h->compute[s]);
    gpuhal_command_buffer_release(h->download[s]);
  }
  gpuhal_semaphore_release(h->uploaded);
  gpuhal_semaphore_release(h->computed);
  gpuhal_semaphore_release(h->downloaded);
}

/* Batches continue the semaphores' timelines from `base` (the batches of earlier runs). */
static int hal_run(bench_t* b, hal_side_t* h, uint32_t batches, uint64_t* base, run_t* out) {
  double t0 = wall_now_us(), c0 = cpu_now_us();
  uint64_t v0 = *base;
  uint32_t i;
  memset(gpuhal_buffer_host_pointer(b->host_out), 0, SLOTS * b->bytes);
  for (i = 0; i < batches; ++i) {
    uint32_t slot = i % SLOTS;
    uint64_t done = v0 + i + 1, freed = v0 + i + 1 - SLOTS; /* batch i - 3 passed the stage */
    gpuhal_semaphore_t* compute_waits[2];
    uint64_t compute_values[2];
    gpuhal_semaphore_list_t compute_wait;
    compute_waits[0] = h->uploaded;
    compute_values[0] = done;
    compute_waits[1] = h->downloaded;
    compute_values[1] = freed;
    compute_wait.count = i >= SLOTS ? 2 : 1;
    compute_wait.semaphores = compute_waits;
    compute_wait.values = compute_values;
    if (i >= SLOTS &&
        !ok(b, gpuhal_semaphore_wait(h->downloaded, freed, gpuhal_timeout_relative_ns(60000000000LL)), "throttle"))
      return 0;
    if (!ok(b,
            gpuhal_queue_execute(
                b->device, 0,
                i >= SLOTS ? gpuhal_semaphore_list_one(&h->computed, &freed) : gpuhal_semaphore_list_empty(),
                gpuhal_semaphore_list_one(&h->uploaded, &done), h->upload[slot], NULL),
            "execute upload") ||
        !ok(b,
            gpuhal_queue_execute(b->device, 1, compute_wait, gpuhal_semaphore_list_one(&h->computed, &done),
                                 h->compute[slot], NULL),
            "execute compute") ||
        !ok(b,
            gpuhal_queue_execute(b->device, 2, gpuhal_semaphore_list_one(&h->computed, &done),
                                 gpuhal_semaphore_list_one(&h->downloaded, &done), h->download[slot], NULL),
            "execute download"))
      return 0;
  }
  *base = v0 + batches;
  if (!ok(b, gpuhal_semaphore_wait(h->downloaded, *base, gpuhal_timeout_relative_ns(600000000000LL)), "final wait"))
    return 0;
  out->wall_us = (wall_now_us() - t0) / batches;
  out->cpu_us = (cpu_now_us() - c0) / batches;
  return 1;
}

/* ---- the hand-written pipeline ---- */
typedef struct raw_side_s {
  CUstream stream[3];
  CUevent uploaded[SLOTS], computed[SLOTS], downloaded[SLOTS];
  CUdeviceptr in[SLOTS], out[SLOTS], t[2], w;
  char *host_in, *host_out;
} raw_side_t;

static const gpuhal__cuda_symbols_t* raw_cu(bench_t* b) { return b->device->cu; }

static int raw_open(bench_t* b, raw_side_t* r) {
  const gpuhal__cuda_symbols_t* cu = raw_cu(b);
  uint64_t address = 0;
  uint32_t s;
  memset(r, 0, sizeof(*r));
  for (s = 0; s < 3; ++s)
    if (!ok_cu(b, cu->cuStreamCreate(&r->stream[s], CU_STREAM_NON_BLOCKING), "cuStreamCreate")) return 0;
  for (s = 0; s < SLOTS; ++s) {
    if (!ok_cu(b, cu->cuEventCreate(&r->uploaded[s], CU_EVENT_DISABLE_TIMING), "cuEventCreate") ||
        !ok_cu(b, cu->cuEventCreate(&r->computed[s], CU_EVENT_DISABLE_TIMING), "cuEventCreate") ||
        !ok_cu(b, cu->cuEventCreate(&r->downloaded[s], CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC),
               "cuEventCreate"))
      return 0;
    if (!ok(b, gpuhal_buffer_device_address(b->in[s], &address), "address")) return 0;
    r->in[s] = (CUdeviceptr)address;
    if (!ok(b, gpuhal_buffer_device_address(b->out[s], &address), "address")) return 0;
    r->out[s] = (CUdeviceptr)address;
  }
  for (s = 0; s < 2; ++s) {
    if (!ok(b, gpuhal_buffer_device_address(b->t[s], &address), "address")) return 0;
    r->t[s] = (CUdeviceptr)address;
  }
  if (!ok(b, gpuhal_buffer_device_address(b->w, &address), "address")) return 0;
  r->w = (CUdeviceptr)address;
  r->host_in = (char*)gpuhal_buffer_host_pointer(b->host_in);
  r->host_out = (char*)gpuhal_buffer_host_pointer(b->host_out);
  return 1;
}

static void raw_close(bench_t* b, raw_side_t* r) {
  const gpuhal__cuda_symbols_t* cu = raw_cu(b);
  uint32_t s;
  for (s = 0; s < SLOTS; ++s) {
    if (r->uploaded[s]) cu->cuEventDestroy(r->uploaded[s]);
    if (r->computed[s]) cu->cuEventDestroy(r->computed[s]);
    if (r->downloaded[s]) cu->cuEventDestroy(r->downloaded[s]);
  }
  for (s = 0; s < 3; ++s)
    if (r->stream[s]) cu->cuStreamDestroy(r->stream[s]);
}

static int raw_launch_chain(bench_t* b, raw_side_t* r, uint32_t slot, CUstream stream) {
  const gpuhal__cuda_symbols_t* cu = raw_cu(b);
  CUdeviceptr src[CHAIN], dst[CHAIN];
  int k;
  src[0] = r->in[slot], src[1] = r->t[0], src[2] = r->t[1], src[3] = r->t[0];
  dst[0] = r->t[0], dst[1] = r->t[1], dst[2] = r->t[0], dst[3] = r->out[slot];
  for (k = 0; k < CHAIN; ++k) {
    unsigned n = b->n;
    void* params[4];
    params[0] = &src[k];
    params[1] = &r->w;
    params[2] = &dst[k];
    params[3] = &n;
    if (!ok_cu(b, cu->cuLaunchKernel(b->sgemm->function, n / 64, n / 64, 1, 16, 16, 1, 0, stream, params, NULL),
               "cuLaunchKernel"))
      return 0;
  }
  return 1;
}

static int raw_run(bench_t* b, raw_side_t* r, uint32_t batches, run_t* out) {
  const gpuhal__cuda_symbols_t* cu = raw_cu(b);
  double t0, c0;
  uint32_t i;
  memset(r->host_out, 0, SLOTS * b->bytes);
  t0 = wall_now_us();
  c0 = cpu_now_us();
  for (i = 0; i < batches; ++i) {
    uint32_t slot = i % SLOTS;
    int reused = i >= SLOTS;
    if (reused && !ok_cu(b, cu->cuEventSynchronize(r->downloaded[slot]), "throttle")) return 0;
    if ((reused && !ok_cu(b, cu->cuStreamWaitEvent(r->stream[0], r->computed[slot], 0), "wait")) ||
        !ok_cu(b, cu->cuMemcpyHtoDAsync(r->in[slot], r->host_in + slot * b->bytes, b->bytes, r->stream[0]), "upload") ||
        !ok_cu(b, cu->cuEventRecord(r->uploaded[slot], r->stream[0]), "record") ||
        !ok_cu(b, cu->cuStreamWaitEvent(r->stream[1], r->uploaded[slot], 0), "wait") ||
        (reused && !ok_cu(b, cu->cuStreamWaitEvent(r->stream[1], r->downloaded[slot], 0), "wait")) ||
        !raw_launch_chain(b, r, slot, r->stream[1]) ||
        !ok_cu(b, cu->cuEventRecord(r->computed[slot], r->stream[1]), "record") ||
        !ok_cu(b, cu->cuStreamWaitEvent(r->stream[2], r->computed[slot], 0), "wait") ||
        !ok_cu(b, cu->cuMemcpyDtoHAsync(r->host_out + slot * b->bytes, r->out[slot], b->bytes, r->stream[2]),
               "download") ||
        !ok_cu(b, cu->cuEventRecord(r->downloaded[slot], r->stream[2]), "record"))
      return 0;
  }
  if (!ok_cu(b, cu->cuStreamSynchronize(r->stream[2]), "final synchronize")) return 0;
  out->wall_us = (wall_now_us() - t0) / batches;
  out->cpu_us = (cpu_now_us() - c0) / batches;
  return 1;
}

static int cmp_float(const void* a, const void* b) {
  float x = *(const float*)a, y = *(const float*)b;
  return x < y ? -1 : x > y;
}

/* The 4-SGEMM chain's GPU time alone (ms): the median of 5 event-timed runs. */
static double chain_ms(bench_t* b, raw_side_t* r) {
  const gpuhal__cuda_symbols_t* cu = raw_cu(b);
  CUevent e0 = NULL, e1 = NULL;
  float ms[5] = {0};
  int k, ran = 0;
  if (!ok_cu(b, cu->cuEventCreate(&e0, 0), "cuEventCreate") || !ok_cu(b, cu->cuEventCreate(&e1, 0), "cuEventCreate"))
    goto done;
  if (!raw_launch_chain(b, r, 0, r->stream[1])) goto done; /* warm-up */
  for (k = 0; k < 5; ++k) {
    if (!ok_cu(b, cu->cuEventRecord(e0, r->stream[1]), "record") || !raw_launch_chain(b, r, 0, r->stream[1]) ||
        !ok_cu(b, cu->cuEventRecord(e1, r->stream[1]), "record") ||
        !ok_cu(b, cu->cuEventSynchronize(e1), "synchronize") ||
        !ok_cu(b, cu->cuEventElapsedTime(&ms[k], e0, e1), "cuEventElapsedTime"))
      goto done;
  }
  ran = 1;
done:
  if (e0) cu->cuEventDestroy(e0);
  if (e1) cu->cuEventDestroy(e1);
  if (!ran) return 0.0;
  qsort(ms, 5, sizeof(float), cmp_float);
  return ms[2];
}

/* ---- the table ---- */
static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}
static void stats(const double* v, int n, double* median, double* lo, double* hi) {
  double s[MAX_REPS];
  memcpy(s, v, (size_t)n * sizeof(double));
  qsort(s, (size_t)n, sizeof(double), cmp_double);
  *median = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  *lo = s[0];
  *hi = s[n - 1];
}

enum { SIDE_GRAPH, SIDE_STREAM, SIDE_RAW, SIDES };
static const char* const side_names[SIDES] = {"gpuhal, GRAPH command buffers", "gpuhal, STREAM command buffers",
                                              "raw driver API, by hand"};

static int bench_size(uint32_t n, uint32_t batches, int reps) {
  bench_t b;
  hal_side_t hal[2];
  raw_side_t raw;
  run_t runs[SIDES][MAX_REPS];
  uint64_t base[2] = {0, 0};
  double gpu_ms = 0;
  int rep, side, opened = 0;
  CUcontext popped;
  memset(&b, 0, sizeof(b));
  memset(hal, 0, sizeof(hal));
  memset(runs, 0, sizeof(runs));
  if (n == 0 || n % 64 || batches == 0) {
    fprintf(stderr, "bench_pipeline: n must be a positive multiple of 64 and batches positive (%u:%u)\n", n, batches);
    return 1;
  }
  if (!setup(&b, n) || !hal_open(&b, GPUHAL_COMMAND_BUFFER_GRAPH, &hal[0]) ||
      !hal_open(&b, GPUHAL_COMMAND_BUFFER_STREAM, &hal[1]))
    goto out;
  /* The raw side runs with the device's context pushed on this thread. */
  if (!ok_cu(&b, b.device->cu->cuCtxPushCurrent(b.device->context), "cuCtxPushCurrent")) goto out;
  opened = 1;
  if (!raw_open(&b, &raw)) goto out;
  gpu_ms = chain_ms(&b, &raw);
  {
    /* Warm-up: pools, graphs and the driver reach their steady state. */
    uint32_t warm = batches < 2 * SLOTS ? batches : 2 * SLOTS;
    run_t scratch;
    if (!hal_run(&b, &hal[0], warm, &base[0], &scratch) || !hal_run(&b, &hal[1], warm, &base[1], &scratch) ||
        !raw_run(&b, &raw, warm, &scratch))
      goto out;
  }
  for (rep = 0; rep < reps; ++rep)
    for (side = 0; side < SIDES; ++side) {
      /* Alternate the order so that no side always runs right after another. */
      int s = (side + rep) % SIDES, good;
      bp_threads_t before, after;
      if (getenv("BP_THREADS")) bp_threads_snapshot(&before);
      good = s == SIDE_RAW ? raw_run(&b, &raw, batches, &runs[s][rep])
                           : hal_run(&b, &hal[s], batches, &base[s], &runs[s][rep]);
      if (getenv("BP_THREADS")) {
        bp_threads_snapshot(&after);
        bp_threads_print(side_names[s], &before, &after, batches);
      }
      if (!good || !check_results(&b, side_names[s], batches)) goto out;
    }
  {
    double wall[SIDES][MAX_REPS], cpu[SIDES][MAX_REPS];
    double med[SIDES][2], lo[SIDES][2], hi[SIDES][2];
    int k;
    for (side = 0; side < SIDES; ++side)
      for (rep = 0; rep < reps; ++rep) {
        wall[side][rep] = runs[side][rep].wall_us;
        cpu[side][rep] = runs[side][rep].cpu_us;
      }
    printf("\n%u x %u SGEMM x %d per batch, %u batches, %d in flight, %d repetitions (median [min-max])\n", n, n, CHAIN,
           batches, SLOTS, reps);
    printf("  4-SGEMM chain alone on the GPU: %.3f ms\n", gpu_ms);
    printf("  %-32s %24s %24s %14s\n", "", "wall per batch (us)", "host CPU per batch (us)", "compute busy");
    for (side = 0; side < SIDES; ++side) {
      stats(wall[side], reps, &med[side][0], &lo[side][0], &hi[side][0]);
      stats(cpu[side], reps, &med[side][1], &lo[side][1], &hi[side][1]);
      printf("  %-32s %9.1f [%.1f-%.1f] %9.1f [%.1f-%.1f] %13.1f%%\n", side_names[side], med[side][0], lo[side][0],
             hi[side][0], med[side][1], lo[side][1], hi[side][1],
             med[side][0] > 0 ? 100.0 * gpu_ms * 1000.0 / med[side][0] : 0.0);
    }
    for (k = 0; k < 2; ++k) {
      double wr = med[SIDE_RAW][0] > 0 ? med[k][0] / med[SIDE_RAW][0] : 0;
      double cr = med[SIDE_RAW][1] > 0 ? med[k][1] / med[SIDE_RAW][1] : 0;
      printf("  %-32s wall %.3fx (target <= 1.03x)%s   host CPU %.2fx (target <= 1.5x)%s\n", side_names[k], wr,
             wr <= 1.03 ? "" : " (over target)", cr, cr <= 1.5 ? "" : " (over target)");
    }
  }
out:
  if (opened) {
    raw_close(&b, &raw);
    b.device->cu->cuCtxPopCurrent(&popped);
  }
  hal_close(&hal[0]);
  hal_close(&hal[1]);
  {
    int failures = b.failures;
    if (b.driver) teardown(&b);
    return failures;
  }
}

int main(int argc, char** argv) {
  static const char* const defaults[] = {"1024:1000", "4096:100"};
  const char* const* sizes = defaults;
  int count = 2, reps = argc > 1 ? atoi(argv[1]) : 5, k, failures = 0;
  if (reps < 1 || reps > MAX_REPS) {
    fprintf(stderr, "usage: bench_pipeline [repetitions 1-%d] [n:batches ...]\n", MAX_REPS);
    return 2;
  }
  if (argc > 2) {
    sizes = (const char* const*)(argv + 2);
    count = argc - 2;
  }
  printf(
      "bench_pipeline: upload, 4 dependent SGEMMs, download on 3 queues; gpuhal against the same pipeline "
      "written with the raw driver API\n");
  for (k = 0; k < count; ++k) {
    unsigned n = 0, batches = 0;
    if (sscanf(sizes[k], "%u:%u", &n, &batches) != 2) {
      fprintf(stderr, "bench_pipeline: '%s' is not n:batches\n", sizes[k]);
      return 2;
    }
    failures += bench_size(n, batches, reps);
  }
  printf("\nbench_pipeline: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
