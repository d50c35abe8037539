/* Launch attributes (gpuhal_cmd_dispatch_ex): thread-block clusters with distributed shared
 * memory, cooperative grid-wide sync, programmatic dependent launch, priority, and the
 * occupancy queries; each in STREAM and GRAPH command buffers, on softcuda and a GPU. The
 * kernels are tests/kernels/cluster_exchange, grid_reduce and pdl_step (compute 9.0). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuhal.h"
#include "test_util.h"

#define LT_TIMEOUT_NS 30000000000ll

typedef struct lt {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_info_t info;
  gpuhal_executable_t* exe[4];
  gpuhal_kernel_t* cluster_exchange; /* (unsigned* out, unsigned n), 4 bytes of shared memory per thread */
  gpuhal_kernel_t* grid_reduce;      /* (const unsigned* data, unsigned n, unsigned* partial, unsigned* out) */
  gpuhal_kernel_t* pdl_step;         /* (unsigned* state, unsigned k): state = state * 3 + k */
  gpuhal_kernel_t* fill_u32;         /* (unsigned* dst, unsigned value, unsigned n) */
} lt;

static gpuhal_status_t lt_load(lt* t, int index, const char* name, gpuhal_kernel_t** out) {
  return tu_load_kernel(t->device, name, &t->exe[index], out);
}

static void lt_close(lt* t) {
  int i;
  if (t->device) gpuhal_status_free(gpuhal_device_wait_idle(t->device, gpuhal_timeout_relative_ns(LT_TIMEOUT_NS)));
  for (i = 0; i < 4; ++i) gpuhal_executable_release(t->exe[i]);
  gpuhal_device_release(t->device);
  gpuhal_driver_release(t->driver);
  memset(t, 0, sizeof(*t));
}

/* 1: ready; 0: the case is done (skipped: no device, or one below compute 9.0). */
static int lt_open(lt* t) {
  gpuhal_status_t st;
  memset(t, 0, sizeof(*t));
  if (!tu_open_device(&t->driver, &t->device, 9,
                      "the test kernels need compute capability 9.0 (clusters, grid dependency control)"))
    return 0;
  st = gpuhal_device_info(t->device, &t->info);
  if (!st) st = lt_load(t, 0, "cluster_exchange", &t->cluster_exchange);
  if (!st) st = lt_load(t, 1, "grid_reduce", &t->grid_reduce);
  if (!st) st = lt_load(t, 2, "pdl_step", &t->pdl_step);
  if (!st) st = lt_load(t, 3, "fill_u32", &t->fill_u32);
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "fixture: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
    lt_close(t);
    return 0;
  }
  return 1;
}

static gpuhal_status_t lt_run(lt* t, gpuhal_command_buffer_t* cb, const gpuhal_binding_table_t* table) {
  return tu_execute_and_wait(t->driver, t->device, cb, table);
}

static gpuhal_dispatch_options_t lt_options(uint32_t cluster_x, uint32_t flags, int32_t priority) {
  gpuhal_dispatch_options_t o;
  memset(&o, 0, sizeof(o));
  o.cluster.x = cluster_x;
  o.flags = flags;
  o.priority = priority;
  return o;
}

static const uint32_t lt_modes[2] = {GPUHAL_COMMAND_BUFFER_STREAM, 0};
static const char* lt_mode_name(uint32_t mode) { return mode ? "STREAM" : "GRAPH"; }

/* ---- clusters ---- */

/* Each block reads the shared memory of the next block of its cluster: the result says
 * which blocks formed a cluster. Without a cluster every block reads itself. The output is
 * a binding slot, rebound at the second execute (a graph patches the node and keeps its
 * cluster). */
static void check_cluster_exchange(uint32_t mode, uint32_t cluster) {
  lt t;
  enum { BLOCKS = 64, THREADS = 128, N = BLOCKS * THREADS };
  gpuhal_buffer_t* out[2] = {NULL, NULL};
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_dispatch_options_t o = lt_options(cluster, 0, 0);
  gpuhal_binding_table_t table;
  gpuhal_buffer_t* bound[1];
  gpuhal_arg_t args[2];
  unsigned* got = (unsigned*)malloc(N * sizeof(unsigned));
  int e, i, bad = 0;
  if (!lt_open(&t)) {
    free(got);
    return;
  }
  memset(got, 0xEE, N * sizeof(unsigned));
  for (e = 0; e < 2; ++e) {
    TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, N * 4, &out[e]));
    TU_CHECK_OK(gpuhal_buffer_write(out[e], 0, got, N * 4));
  }
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode | GPUHAL_COMMAND_BUFFER_REUSABLE, 1, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  args[0] = gpuhal_arg_slot(0, 0);
  args[1] = gpuhal_arg_u32(N);
  TU_CHECK_OK(gpuhal_cmd_dispatch_ex(cb, t.cluster_exchange, gpuhal_dim3(BLOCKS, 1, 1), gpuhal_dim3(THREADS, 1, 1),
                                     THREADS * 4, cluster ? &o : NULL, 2, args));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  for (e = 0; e < 2; ++e) {
    bound[0] = out[e];
    table.count = 1;
    table.buffers = bound;
    table.offsets = NULL;
    TU_CHECK_OK(lt_run(&t, cb, &table));
    TU_CHECK_OK(gpuhal_buffer_read(out[e], 0, got, N * 4));
    for (i = 0; i < N && bad < 3; ++i) {
      unsigned b = (unsigned)i / THREADS, th = (unsigned)i % THREADS, size = cluster ? cluster : 1;
      unsigned peer = b - b % size + (b % size + 1) % size;
      if (got[i] != peer * 1000u + th) {
        TU_FAIL_AT(__FILE__, __LINE__, "%s, cluster %u, execute %d: out[%d] is %u, expected %u", lt_mode_name(mode),
                   cluster, e, i, got[i], peer * 1000u + th);
        bad++;
      }
    }
  }
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(out[0]);
  gpuhal_buffer_release(out[1]);
  free(got);
  lt_close(&t);
}

TU_TEST(cluster_blocks_read_each_others_shared_memory) {
  int m;
  for (m = 0; m < 2; ++m) {
    check_cluster_exchange(lt_modes[m], 2);
    check_cluster_exchange(lt_modes[m], 8);
  }
}

TU_TEST(without_a_cluster_each_block_is_its_own) {
  int m;
  for (m = 0; m < 2; ++m) check_cluster_exchange(lt_modes[m], 0);
}

/* ---- cooperative launches ---- */

static void check_grid_reduce(uint32_t mode) {
  lt t;
  enum { THREADS = 256, N = 100003 };
  gpuhal_buffer_t *data = NULL, *partial = NULL, *out = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_dispatch_options_t o = lt_options(0, GPUHAL_DISPATCH_COOPERATIVE, 0);
  gpuhal_arg_t args[4];
  unsigned* host = (unsigned*)malloc(N * sizeof(unsigned));
  unsigned expected = 0, got = 0, blocks_per_sm = 0, blocks;
  int i;
  if (!lt_open(&t)) {
    free(host);
    return;
  }
  for (i = 0; i < N; ++i) {
    host[i] = (unsigned)i * 2654435761u;
    expected += host[i];
  }
  TU_REQUIRE_OK(gpuhal_kernel_occupancy(t.grid_reduce, THREADS, 0, &blocks_per_sm));
  TU_REQUIRE(blocks_per_sm > 0);
  blocks = blocks_per_sm * (unsigned)t.info.sm_count; /* the whole device, exactly */
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, N * 4, &data));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, blocks * 4, &partial));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 4, &out));
  TU_CHECK_OK(gpuhal_buffer_write(data, 0, host, N * 4));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  args[0] = gpuhal_arg_buffer(data, 0);
  args[1] = gpuhal_arg_u32(N);
  args[2] = gpuhal_arg_buffer(partial, 0);
  args[3] = gpuhal_arg_buffer(out, 0);
  TU_CHECK_OK(
      gpuhal_cmd_dispatch_ex(cb, t.grid_reduce, gpuhal_dim3(blocks, 1, 1), gpuhal_dim3(THREADS, 1, 1), 0, &o, 4, args));
  /* One block more than can be resident: refused, naming the limit; the recording goes on. */
  TU_CHECK_STATUS(gpuhal_cmd_dispatch_ex(cb, t.grid_reduce, gpuhal_dim3(blocks + 1, 1, 1), gpuhal_dim3(THREADS, 1, 1),
                                         0, &o, 4, args),
                  GPUHAL_STATUS_OUT_OF_RANGE, "resident at once");
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(lt_run(&t, cb, NULL));
  TU_CHECK_OK(gpuhal_buffer_read(out, 0, &got, 4));
  if (got != expected)
    TU_FAIL_AT(__FILE__, __LINE__, "%s: grid_reduce over %u blocks gave %u, expected %u", lt_mode_name(mode), blocks,
               got, expected);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(data);
  gpuhal_buffer_release(partial);
  gpuhal_buffer_release(out);
  free(host);
  lt_close(&t);
}

TU_TEST(cooperative_grid_sync_reduction) {
  check_grid_reduce(GPUHAL_COMMAND_BUFFER_STREAM);
  check_grid_reduce(0);
}

/* ---- programmatic dependent launch ---- */

/* A chain of steps x = 3x + k: right only in order. Every step after the first may start
 * before the one before it ends (PROGRAMMATIC) and waits in device code. Barriers separate
 * the steps (the GRAPH order), and fills of another buffer sit between some of them (the
 * steps right after a fill are ordered fully). Executed twice. */
static void check_pdl_chain(uint32_t mode) {
  lt t;
  enum { STEPS = 300 };
  gpuhal_buffer_t *state = NULL, *other = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_dispatch_options_t o = lt_options(0, GPUHAL_DISPATCH_PROGRAMMATIC, 0);
  gpuhal_arg_t args[2];
  unsigned expected = 5, got = 0, zero = 5;
  unsigned long long edges0 = tu_softcuda_calls("cuGraphAddDependencies"), ex0 = tu_softcuda_calls("cuLaunchKernelEx");
  int s, e;
  if (!lt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 4, &state));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 4096, &other));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_update(cb, &zero, gpuhal_ref_buffer(state, 0), 4));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  for (s = 0; s < STEPS; ++s) {
    args[0] = gpuhal_arg_buffer(state, 0);
    args[1] = gpuhal_arg_u32((unsigned)s + 1);
    if (s % 50 == 25) {
      TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(other, 0), 4096, &s, 4));
      TU_CHECK_OK(gpuhal_cmd_barrier(cb));
    }
    TU_CHECK_OK(gpuhal_cmd_dispatch_ex(cb, t.pdl_step, gpuhal_dim3(4, 1, 1), gpuhal_dim3(64, 1, 1), 0, &o, 2, args));
    TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  }
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  for (s = 0; s < STEPS; ++s) expected = expected * 3u + (unsigned)s + 1;
  for (e = 0; e < 2; ++e) {
    got = 0;
    TU_CHECK_OK(lt_run(&t, cb, NULL));
    TU_CHECK_OK(gpuhal_buffer_read(state, 0, &got, 4));
    if (got != expected)
      TU_FAIL_AT(__FILE__, __LINE__, "%s, execute %d: the chain gave %u, expected %u", lt_mode_name(mode), e, got,
                 expected);
  }
  if (tu_softcuda()) {
    /* Steps right after another step are programmatic; the first and those after a fill are not. */
    unsigned long long want = STEPS - 1 - (STEPS - 25 + 49) / 50;
    if (mode)
      TU_CHECK(tu_softcuda_calls("cuLaunchKernelEx") - ex0 == 2 * want);
    else
      TU_CHECK(tu_softcuda_calls("cuGraphAddDependencies") - edges0 == want);
  }
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(state);
  gpuhal_buffer_release(other);
  lt_close(&t);
}

TU_TEST(programmatic_chain_keeps_its_order) {
  check_pdl_chain(GPUHAL_COMMAND_BUFFER_STREAM);
  check_pdl_chain(0);
}

/* ---- priority ---- */

TU_TEST(priority_dispatch_runs) {
  int m;
  for (m = 0; m < 2; ++m) {
    lt t;
    gpuhal_buffer_t* buf = NULL;
    gpuhal_command_buffer_t* cb = NULL;
    gpuhal_dispatch_options_t o = lt_options(0, 0, -1);
    gpuhal_arg_t args[3];
    unsigned got[256];
    int i;
    if (!lt_open(&t)) return;
    TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, sizeof(got), &buf));
    TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, lt_modes[m], 0, &cb));
    TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
    args[0] = gpuhal_arg_buffer(buf, 0);
    args[1] = gpuhal_arg_u32(0xC0FFEEu);
    args[2] = gpuhal_arg_u32(256);
    TU_CHECK_OK(gpuhal_cmd_dispatch_ex(cb, t.fill_u32, gpuhal_dim3(2, 1, 1), gpuhal_dim3(128, 1, 1), 0, &o, 3, args));
    TU_CHECK_OK(gpuhal_command_buffer_end(cb));
    TU_CHECK_OK(lt_run(&t, cb, NULL));
    TU_CHECK_OK(gpuhal_buffer_read(buf, 0, got, sizeof(got)));
    for (i = 0; i < 256; ++i) TU_CHECK(got[i] == 0xC0FFEEu);
    gpuhal_command_buffer_release(cb);
    gpuhal_buffer_release(buf);
    lt_close(&t);
  }
}

/* ---- bad options ---- */

TU_TEST(bad_options_name_the_field) {
  lt t;
  gpuhal_buffer_t* buf = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_dispatch_options_t o;
  gpuhal_arg_t args[2];
  unsigned got[64 * 32];
  uint32_t max_cluster = 0;
  if (!lt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, sizeof(got), &buf));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, 0, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  args[0] = gpuhal_arg_buffer(buf, 0);
  args[1] = gpuhal_arg_u32(64 * 32);
  o = lt_options(3, 0, 0);
  TU_CHECK_STATUS(
      gpuhal_cmd_dispatch_ex(cb, t.cluster_exchange, gpuhal_dim3(64, 1, 1), gpuhal_dim3(32, 1, 1), 128, &o, 2, args),
      GPUHAL_STATUS_INVALID_ARGUMENT, "'options.cluster.x' is 3; it must divide grid.x (64)");
  o = lt_options(0, 0, 0);
  o.cluster.y = 2;
  TU_CHECK_STATUS(
      gpuhal_cmd_dispatch_ex(cb, t.cluster_exchange, gpuhal_dim3(64, 1, 1), gpuhal_dim3(32, 1, 1), 128, &o, 2, args),
      GPUHAL_STATUS_INVALID_ARGUMENT, "'options.cluster.y' is 2");
  TU_REQUIRE_OK(gpuhal_kernel_max_cluster_size(t.cluster_exchange, 32, 128, &max_cluster));
  TU_CHECK(max_cluster >= 8);
  o = lt_options(64, 0, 0);
  TU_CHECK_STATUS(
      gpuhal_cmd_dispatch_ex(cb, t.cluster_exchange, gpuhal_dim3(64, 1, 1), gpuhal_dim3(32, 1, 1), 128, &o, 2, args),
      GPUHAL_STATUS_OUT_OF_RANGE, "per cluster on this device");
  o = lt_options(0, 1u << 7, 0);
  TU_CHECK_STATUS(
      gpuhal_cmd_dispatch_ex(cb, t.cluster_exchange, gpuhal_dim3(64, 1, 1), gpuhal_dim3(32, 1, 1), 128, &o, 2, args),
      GPUHAL_STATUS_INVALID_ARGUMENT, "gpuhal_cmd_dispatch_ex: argument 'options.flags' has unknown bits");
  o = lt_options(2, GPUHAL_DISPATCH_COOPERATIVE, 0);
  TU_CHECK_STATUS(
      gpuhal_cmd_dispatch_ex(cb, t.cluster_exchange, gpuhal_dim3(64, 1, 1), gpuhal_dim3(32, 1, 1), 128, &o, 2, args),
      GPUHAL_STATUS_UNIMPLEMENTED, "cooperative launch with a cluster");
  o = lt_options(0, 0, 1);
  TU_CHECK_STATUS(
      gpuhal_cmd_dispatch_ex(cb, t.cluster_exchange, gpuhal_dim3(64, 1, 1), gpuhal_dim3(32, 1, 1), 128, &o, 2, args),
      GPUHAL_STATUS_OUT_OF_RANGE, "'options.priority' is 1");
  o = lt_options(0, 0, -1000);
  TU_CHECK_STATUS(
      gpuhal_cmd_dispatch_ex(cb, t.cluster_exchange, gpuhal_dim3(64, 1, 1), gpuhal_dim3(32, 1, 1), 128, &o, 2, args),
      GPUHAL_STATUS_OUT_OF_RANGE, "(most urgent)");
  /* The plain checks still come first, named for the call. */
  o = lt_options(2, 0, 0);
  TU_CHECK_STATUS(
      gpuhal_cmd_dispatch_ex(cb, t.cluster_exchange, gpuhal_dim3(64, 1, 1), gpuhal_dim3(32, 1, 1), 128, &o, 1, args),
      GPUHAL_STATUS_INVALID_ARGUMENT, "gpuhal_cmd_dispatch_ex: argument 'arg_count' is 1");
  TU_CHECK_STATUS(
      gpuhal_cmd_dispatch_ex(NULL, t.cluster_exchange, gpuhal_dim3(64, 1, 1), gpuhal_dim3(32, 1, 1), 128, &o, 2, args),
      GPUHAL_STATUS_INVALID_ARGUMENT, "command_buffer");
  /* Every refusal left the command buffer as it was: it records on and runs one dispatch. */
  TU_CHECK_OK(
      gpuhal_cmd_dispatch_ex(cb, t.cluster_exchange, gpuhal_dim3(64, 1, 1), gpuhal_dim3(32, 1, 1), 128, &o, 2, args));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(lt_run(&t, cb, NULL));
  TU_CHECK_OK(gpuhal_buffer_read(buf, 0, got, sizeof(got)));
  TU_CHECK(got[0] == 1000u && got[32] == 0u && got[64 * 32 - 1] == 62000u + 31u);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buf);
  lt_close(&t);
}

TU_TEST(occupancy_queries) {
  lt t;
  uint32_t a = 0, b = 0, c = 0;
  if (!lt_open(&t)) return;
  TU_CHECK_OK(gpuhal_kernel_occupancy(t.fill_u32, 128, 0, &a));
  TU_CHECK_OK(gpuhal_kernel_occupancy(t.fill_u32, 1024, 0, &b));
  TU_CHECK(a >= b && b >= 1 && a <= 64);
  TU_CHECK_OK(gpuhal_kernel_max_cluster_size(t.cluster_exchange, 128, 512, &c));
  TU_CHECK(c >= 8 && c <= 16);
  TU_CHECK_STATUS(gpuhal_kernel_occupancy(t.fill_u32, 0, 0, &a), GPUHAL_STATUS_OUT_OF_RANGE, "'block_threads' is 0");
  TU_CHECK_STATUS(gpuhal_kernel_occupancy(t.fill_u32, 4096, 0, &a), GPUHAL_STATUS_OUT_OF_RANGE, "'block_threads'");
  TU_CHECK_STATUS(gpuhal_kernel_occupancy(t.fill_u32, 128, 1u << 30, &a), GPUHAL_STATUS_OUT_OF_RANGE, "'shared_bytes'");
  TU_CHECK_STATUS(gpuhal_kernel_occupancy(t.fill_u32, 128, 0, NULL), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "'out_blocks_per_sm'");
  TU_CHECK_STATUS(gpuhal_kernel_max_cluster_size(t.fill_u32, 128, 0, NULL), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "'out_blocks'");
  TU_CHECK_STATUS(gpuhal_kernel_max_cluster_size(NULL, 128, 0, &c), GPUHAL_STATUS_INVALID_ARGUMENT, "kernel");
  TU_CHECK(t.info.cooperative_launch == 1 && t.info.cluster_launch == 1);
  lt_close(&t);
}

TU_MAIN(TU_CASE(cluster_blocks_read_each_others_shared_memory), TU_CASE(without_a_cluster_each_block_is_its_own),
        TU_CASE(cooperative_grid_sync_reduction), TU_CASE(programmatic_chain_keeps_its_order),
        TU_CASE(priority_dispatch_runs), TU_CASE(bad_options_name_the_field), TU_CASE(occupancy_queries))
