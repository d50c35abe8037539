/* Globals of an executable (gpuhal_executable_global, gpuhal_executable_global_buffer): the
 * __device__ and __constant__ variables of tests/kernels/globals.cu, their addresses and
 * sizes; the initialisers seen before any write; the host writing them (synchronously and
 * in queue order, GRAPH and STREAM) and read_globals reading them; a copy per device with
 * values of its own, through a library shared by the devices and with modules_per_context;
 * the disk cache and the module cache's hits (a module and its globals shared by the
 * executables of an image); a buffer keeping its executable's module loaded; every CUDA
 * call in the device's context, the caller's context left as it was; bad input. The same
 * binary runs on a GPU (GPUHAL_TEST_DRIVER=system): the softcuda-only checks skip there. */
#include "gpuhal.h"
#include "test_temp_dir.h"
#include "test_util.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define GE_N 64          /* elements each read_globals run writes */
#define GE_MAX_DEVICES 2 /* the per-device cases use the first two */
#define GE_WAIT_NS 30000000000ll

/* read_globals's inputs (globals.cu): out[i] = scale * table[i % 8] + offset + (unsigned)bias[i % 3]. */
typedef struct ge_values_s {
  uint32_t scale, offset;
  uint32_t table[8];
} ge_values_t;

static const float ge_bias[3] = {0.5f, 1.5f, 2.5f};

static ge_values_t ge_initial(void) {
  ge_values_t v;
  uint32_t i;
  v.scale = 7;
  v.offset = 0;
  for (i = 0; i < 8; ++i) v.table[i] = i + 1;
  return v;
}

static uint32_t ge_expected(const ge_values_t* v, uint32_t i) {
  return v->scale * v->table[i % 8] + v->offset + (uint32_t)ge_bias[i % 3];
}

typedef struct ge_fixture_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device[GE_MAX_DEVICES];
  int count;
  char* ptx;
  size_t ptx_size;
} ge_fixture_t;

/* A driver and up to `want` devices with `params` (NULL: defaults); 0 (and the case skipped
 * or failed) when there are fewer than `need`. */
static int ge_open(ge_fixture_t* f, int need, int want, const gpuhal_device_params_t* params) {
  gpuhal_status_t st;
  int count = 0, i;
  memset(f, 0, sizeof(*f));
  f->ptx = tu_read_kernel_file("globals.ptx", &f->ptx_size);
  if (!f->ptx) {
    TU_FAIL_AT(__FILE__, __LINE__, "cannot read %s/globals.ptx", GPUHAL_KERNELS_DIR);
    return 0;
  }
  st = gpuhal_driver_create(NULL, &f->driver);
  if (!st) st = gpuhal_driver_device_count(f->driver, &count);
  if (!st && count < need) {
    tu_state.skipped = 1;
    tu_state.skip_reason = count == 0 ? "no CUDA device" : "needs 2 devices (SOFTCUDA_DEVICES=2)";
  }
  for (i = 0; !st && !tu_state.skipped && i < want && i < count; ++i) {
    st = gpuhal_device_create(f->driver, i, params, &f->device[i]);
    if (!st) f->count++;
  }
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "driver and devices: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
  }
  if (st || tu_state.skipped) {
    for (i = 0; i < f->count; ++i) gpuhal_device_release(f->device[i]);
    gpuhal_driver_release(f->driver);
    free(f->ptx);
    memset(f, 0, sizeof(*f));
    return 0;
  }
  return 1;
}

static void ge_close(ge_fixture_t* f) {
  int i;
  for (i = 0; i < f->count; ++i) gpuhal_device_release(f->device[i]);
  gpuhal_driver_release(f->driver);
  free(f->ptx);
  memset(f, 0, sizeof(*f));
}

static gpuhal_status_t ge_load(ge_fixture_t* f, int device, gpuhal_executable_t** out) {
  return gpuhal_executable_load(f->device[device], f->ptx, f->ptx_size, out);
}

/* Checks `out` (GE_N words) against `v`; NULL or what differs. */
static gpuhal_status_t ge_check_out(gpuhal_buffer_t* out, const ge_values_t* v, const char* what) {
  uint32_t got[GE_N], i;
  gpuhal_status_t st = gpuhal_buffer_read(out, 0, got, sizeof(got));
  for (i = 0; !st && i < GE_N; ++i)
    if (got[i] != ge_expected(v, i))
      st = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "%s: out[%u] is %u, expected %u", what, i, got[i],
                              ge_expected(v, i));
  return st;
}

/* Dispatches read_globals of `exe` over GE_N elements into `out` (recorded in `cb`). */
static gpuhal_status_t ge_record_read(gpuhal_command_buffer_t* cb, gpuhal_executable_t* exe, gpuhal_buffer_ref_t out) {
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_arg_t args[2];
  gpuhal_status_t st = gpuhal_executable_kernel(exe, "read_globals", &kernel);
  args[0] = out.buffer ? gpuhal_arg_buffer(out.buffer, out.offset) : gpuhal_arg_slot(out.slot, out.offset);
  args[1] = gpuhal_arg_u32(GE_N);
  if (!st) st = gpuhal_cmd_dispatch(cb, kernel, gpuhal_dim3(GE_N / 32, 1, 1), gpuhal_dim3(32, 1, 1), 0, 2, args);
  return st;
}

/* Runs read_globals of `exe` on its device into a new buffer and checks it against `v`. */
static gpuhal_status_t ge_run_check(gpuhal_driver_t* driver, gpuhal_device_t* device, gpuhal_executable_t* exe,
                                    const ge_values_t* v, const char* what) {
  gpuhal_buffer_t* out = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_status_t st = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, GE_N * 4, &out);
  if (!st) st = gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &cb);
  if (!st) st = gpuhal_command_buffer_begin(cb);
  if (!st) st = ge_record_read(cb, exe, gpuhal_ref_buffer(out, 0));
  if (!st) st = gpuhal_command_buffer_end(cb);
  if (!st) st = tu_execute_and_wait(driver, device, cb, NULL);
  if (!st) st = ge_check_out(out, v, what);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(out);
  /* The queue lets go of what the run held (the command buffer, and through its kernel the
   * executable) once idle: after this the caller's references are the only ones. */
  if (!st) st = gpuhal_device_wait_idle(device, gpuhal_timeout_relative_ns(GE_WAIT_NS));
  return st;
}

/* Reads a u32 global through a buffer over it. */
static uint32_t ge_read_u32(gpuhal_executable_t* exe, const char* name) {
  gpuhal_buffer_t* b = NULL;
  uint32_t v = 0xDEADBEEFu;
  TU_CHECK_OK(gpuhal_executable_global_buffer(exe, name, &b));
  if (b) TU_CHECK_OK(gpuhal_buffer_read(b, 0, &v, 4));
  gpuhal_buffer_release(b);
  return v;
}

static void ge_write_u32(gpuhal_executable_t* exe, const char* name, uint32_t value) {
  gpuhal_buffer_t* b = NULL;
  TU_CHECK_OK(gpuhal_executable_global_buffer(exe, name, &b));
  if (b) TU_CHECK_OK(gpuhal_buffer_write(b, 0, &value, 4));
  gpuhal_buffer_release(b);
}

static gpuhal_module_cache_stats_t ge_stats(gpuhal_device_t* device) {
  gpuhal_module_cache_stats_t s;
  memset(&s, 0, sizeof(s));
  TU_CHECK_OK(gpuhal_device_module_cache_stats(device, &s));
  return s;
}

/* softcuda's violations so far (0 on a real driver): any CUDA call made in the wrong
 * context (softcuda's cuModuleGetGlobal wants the module's) counts. */
static unsigned long long ge_violations(void) {
  unsigned long long (*violations)(int) = NULL;
  void* p = tu_softcuda_symbol("softcuda_query_violations");
  memcpy(&violations, &p, sizeof(p));
  return violations ? violations(0) : 0;
}

TU_TEST(addresses_and_sizes) {
  static const struct {
    const char* name;
    uint64_t size;
  } globals[] = {{"g_scale", 4}, {"g_offset", 4}, {"g_launches", 8}, {"c_table", 32}, {"_ZN3cfg4biasE", 12}};
  ge_fixture_t f;
  gpuhal_executable_t* exe = NULL;
  uint64_t address[5], size = 0;
  size_t i, j;
  unsigned long long violations = ge_violations();
  if (!ge_open(&f, 1, 1, NULL)) return;
  TU_REQUIRE_OK(ge_load(&f, 0, &exe));
  for (i = 0; i < 5; ++i) {
    gpuhal_buffer_t* b = NULL;
    uint64_t view_address = 0;
    TU_CHECK_OK(gpuhal_executable_global(exe, globals[i].name, &address[i], &size));
    TU_CHECK(address[i] != 0);
    TU_CHECK_EQ_INT(size, globals[i].size);
    for (j = 0; j < i; ++j) TU_CHECK(address[i] != address[j]);
    TU_CHECK_OK(gpuhal_executable_global_buffer(exe, globals[i].name, &b));
    TU_REQUIRE(b != NULL);
    TU_CHECK_EQ_INT(gpuhal_buffer_size(b), globals[i].size);
    TU_CHECK(gpuhal_buffer_kind(b) == GPUHAL_MEMORY_DEVICE);
    TU_CHECK(gpuhal_buffer_device(b) == f.device[0]);
    TU_CHECK(gpuhal_buffer_host_pointer(b) == NULL);
    TU_CHECK_OK(gpuhal_buffer_device_address(b, &view_address));
    TU_CHECK(view_address == address[i]);
    gpuhal_buffer_release(b);
  }
  TU_CHECK(address[2] % 8 == 0); /* .align 8 */
  gpuhal_executable_release(exe);
  TU_CHECK_EQ_INT(ge_violations(), violations);
  ge_close(&f);
}

/* Before any write: the initialisers (and zeros), to the host and to the kernel. */
TU_TEST(initialisers_before_any_write) {
  ge_fixture_t f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_buffer_t* b = NULL;
  ge_values_t v = ge_initial();
  uint32_t table[8], i;
  float bias[3];
  uint64_t launches = 99;
  if (!ge_open(&f, 1, 1, NULL)) return;
  TU_REQUIRE_OK(ge_load(&f, 0, &exe));
  TU_CHECK_EQ_INT(ge_read_u32(exe, "g_scale"), 7);
  TU_CHECK_EQ_INT(ge_read_u32(exe, "g_offset"), 0);
  TU_CHECK_OK(gpuhal_executable_global_buffer(exe, "c_table", &b));
  if (b) TU_CHECK_OK(gpuhal_buffer_read(b, 0, table, sizeof(table)));
  for (i = 0; i < 8; ++i) TU_CHECK_EQ_INT(table[i], i + 1);
  gpuhal_buffer_release(b);
  b = NULL;
  TU_CHECK_OK(gpuhal_executable_global_buffer(exe, "_ZN3cfg4biasE", &b));
  if (b) TU_CHECK_OK(gpuhal_buffer_read(b, 0, bias, sizeof(bias)));
  TU_CHECK(bias[0] == 0.5f && bias[1] == 1.5f && bias[2] == 2.5f);
  gpuhal_buffer_release(b);
  b = NULL;
  TU_CHECK_OK(ge_run_check(f.driver, f.device[0], exe, &v, "initial values"));
  TU_CHECK_OK(gpuhal_executable_global_buffer(exe, "g_launches", &b));
  if (b) TU_CHECK_OK(gpuhal_buffer_read(b, 0, &launches, 8));
  TU_CHECK(launches == 1); /* the kernel wrote it */
  gpuhal_buffer_release(b);
  gpuhal_executable_release(exe);
  ge_close(&f);
}

/* gpuhal_buffer_write, then a kernel reads; the raw address as a kernel argument too. */
TU_TEST(host_writes_kernel_reads) {
  ge_fixture_t f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_buffer_t* table = NULL;
  ge_values_t v = ge_initial();
  uint32_t i;
  if (!ge_open(&f, 1, 1, NULL)) return;
  TU_REQUIRE_OK(ge_load(&f, 0, &exe));
  v.scale = 3;
  v.offset = 100;
  for (i = 0; i < 8; ++i) v.table[i] = 10 + 2 * i;
  ge_write_u32(exe, "g_scale", v.scale);
  ge_write_u32(exe, "g_offset", v.offset);
  TU_CHECK_OK(gpuhal_executable_global_buffer(exe, "c_table", &table)); /* a __constant__ table */
  if (table) TU_CHECK_OK(gpuhal_buffer_write(table, 0, v.table, sizeof(v.table)));
  TU_CHECK_OK(ge_run_check(f.driver, f.device[0], exe, &v, "after host writes"));
  /* a part of it, at an offset */
  v.table[5] = 1000;
  if (table) TU_CHECK_OK(gpuhal_buffer_write(table, 20, &v.table[5], 4));
  TU_CHECK_OK(ge_run_check(f.driver, f.device[0], exe, &v, "after a partial write"));
  gpuhal_buffer_release(table);
  gpuhal_executable_release(exe);
  ge_close(&f);
}

/* cmd_update, cmd_fill and cmd_copy into globals (directly and through a binding slot), in
 * queue order with the dispatches that read them, in GRAPH and STREAM command buffers. */
static void ge_queue_ordered(gpuhal_command_buffer_flags_t backend) {
  ge_fixture_t f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_buffer_t *scale = NULL, *offset = NULL, *table = NULL, *src = NULL, *out[2] = {NULL, NULL};
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_binding_table_t bindings;
  ge_values_t first = ge_initial(), second;
  uint32_t new_scale = 9, round;
  if (!ge_open(&f, 1, 1, NULL)) return;
  TU_REQUIRE_OK(ge_load(&f, 0, &exe));
  TU_CHECK_OK(gpuhal_executable_global_buffer(exe, "g_scale", &scale));
  TU_CHECK_OK(gpuhal_executable_global_buffer(exe, "g_offset", &offset));
  TU_CHECK_OK(gpuhal_executable_global_buffer(exe, "c_table", &table));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device[0], GPUHAL_MEMORY_DEVICE, sizeof(first.table), &src));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device[0], GPUHAL_MEMORY_DEVICE, GE_N * 4, &out[0]));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device[0], GPUHAL_MEMORY_DEVICE, GE_N * 4, &out[1]));
  TU_REQUIRE(scale && offset && table && src && out[0] && out[1]);
  first.scale = 5;
  first.offset = 1000;
  for (round = 0; round < 8; ++round) first.table[round] = 3 * round + 1;
  second = first;
  second.scale = new_scale;
  TU_CHECK_OK(gpuhal_buffer_write(src, 0, first.table, sizeof(first.table)));
  TU_CHECK_OK(gpuhal_command_buffer_create(f.device[0], backend | GPUHAL_COMMAND_BUFFER_REUSABLE, 1, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_update(cb, &first.scale, gpuhal_ref_slot(0, 0), 4)); /* slot 0: g_scale */
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(offset, 0), 4, &first.offset, 4));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(src, 0), gpuhal_ref_buffer(table, 0), sizeof(first.table)));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(ge_record_read(cb, exe, gpuhal_ref_buffer(out[0], 0)));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_cmd_update(cb, &new_scale, gpuhal_ref_buffer(scale, 0), 4));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(ge_record_read(cb, exe, gpuhal_ref_buffer(out[1], 0)));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  /* The executable may go: the buffers over its globals (and the command buffer's kernel)
   * keep its module loaded. */
  gpuhal_executable_release(exe);
  bindings.count = 1;
  bindings.buffers = &scale;
  bindings.offsets = NULL;
  for (round = 0; round < 2 && !tu_state.failed; ++round) {
    TU_CHECK_OK(tu_execute_and_wait(f.driver, f.device[0], cb, &bindings));
    TU_CHECK_OK(ge_check_out(out[0], &first, "first dispatch"));
    TU_CHECK_OK(ge_check_out(out[1], &second, "second dispatch"));
  }
  TU_CHECK_EQ_INT(gpuhal_buffer_size(scale), 4);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(scale);
  gpuhal_buffer_release(offset);
  gpuhal_buffer_release(table);
  gpuhal_buffer_release(src);
  gpuhal_buffer_release(out[0]);
  gpuhal_buffer_release(out[1]);
  ge_close(&f);
}

TU_TEST(queue_ordered_writes_graph) { ge_queue_ordered(GPUHAL_COMMAND_BUFFER_GRAPH); }
TU_TEST(queue_ordered_writes_stream) { ge_queue_ordered(GPUHAL_COMMAND_BUFFER_STREAM); }

/* Two devices, one image: each has its own copy, initialised, with values of its own; a
 * copy from one device's global into the other's (a peer copy). `params`: NULL (the image
 * loaded once for both, where the driver can) or modules_per_context. */
static void ge_per_device(const gpuhal_device_params_t* params) {
  ge_fixture_t f;
  gpuhal_executable_t* exe[2] = {NULL, NULL};
  gpuhal_buffer_t* scale[2] = {NULL, NULL};
  gpuhal_command_buffer_t* cb = NULL;
  ge_values_t v[2];
  uint64_t address[2] = {0, 0}, size = 0, shares;
  unsigned long long violations = ge_violations();
  int i;
  if (!ge_open(&f, 2, 2, params)) return;
  shares = ge_stats(f.device[1]).library_shares;
  for (i = 0; i < 2; ++i) {
    TU_REQUIRE_OK(ge_load(&f, i, &exe[i]));
    TU_CHECK_OK(gpuhal_executable_global(exe[i], "g_scale", &address[i], &size));
    TU_CHECK_EQ_INT(ge_read_u32(exe[i], "g_scale"), 7); /* each copy initialised */
    TU_CHECK_OK(gpuhal_executable_global_buffer(exe[i], "g_scale", &scale[i]));
  }
  TU_CHECK(address[0] != address[1]);
  if (tu_softcuda()) /* the image was loaded once (gpuhal's own kernels may be shared too: memops) */
    TU_CHECK_EQ_INT(ge_stats(f.device[1]).library_shares - shares, params && params->modules_per_context ? 0 : 1);
  for (i = 0; i < 2; ++i) {
    v[i] = ge_initial();
    v[i].scale = 20 + (uint32_t)i;
    if (scale[i]) TU_CHECK_OK(gpuhal_buffer_write(scale[i], 0, &v[i].scale, 4));
  }
  for (i = 0; i < 2; ++i) TU_CHECK_OK(ge_run_check(f.driver, f.device[i], exe[i], &v[i], i ? "device 1" : "device 0"));
  TU_CHECK_EQ_INT(ge_read_u32(exe[0], "g_scale"), 20);
  /* device 1 copies device 0's value into its own (a peer copy between the two globals) */
  TU_CHECK_OK(gpuhal_command_buffer_create(f.device[1], GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(scale[0], 0), gpuhal_ref_buffer(scale[1], 0), 4));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(tu_execute_and_wait(f.driver, f.device[1], cb, NULL));
  v[1].scale = 20;
  TU_CHECK_OK(ge_run_check(f.driver, f.device[1], exe[1], &v[1], "device 1 after the peer copy"));
  gpuhal_command_buffer_release(cb);
  for (i = 0; i < 2; ++i) {
    gpuhal_buffer_release(scale[i]);
    gpuhal_executable_release(exe[i]);
  }
  TU_CHECK_EQ_INT(ge_violations(), violations);
  ge_close(&f);
}

TU_TEST(per_device_copies_shared_image) { ge_per_device(NULL); }

TU_TEST(per_device_copies_modules_per_context) {
  gpuhal_device_params_t p;
  memset(&p, 0, sizeof(p));
  p.modules_per_context = 1;
  ge_per_device(&p);
}

/* ---- the disk cache and the module cache ---- */

/* With a disk cache the PTX's cubin is compiled once and every later load of a new module
 * is a disk hit, whose globals start from the initialisers; a load while the module is
 * loaded is a hit in memory and shares it, globals and values included, until the module
 * is trimmed. */
TU_TEST(disk_cache_and_module_cache_hits) {
  ge_fixture_t f;
  gpuhal_device_params_t p;
  gpuhal_executable_t *a = NULL, *b = NULL;
  gpuhal_module_cache_stats_t s, base;
  uint64_t address_a = 0, address_b = 0, size = 0;
  ge_values_t v = ge_initial();
  char dir[512];
  int round;
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "ge"));
  memset(&p, 0, sizeof(p));
  p.module_cache_dir = dir;
  for (round = 0; round < 2 && !tu_state.failed; ++round) { /* round 1: a new device, the file from round 0 */
    if (!ge_open(&f, 1, 1, &p)) break;
    base = ge_stats(f.device[0]); /* with memops, gpuhal's own kernels went through the cache already */
    TU_REQUIRE_OK(ge_load(&f, 0, &a));
    s = ge_stats(f.device[0]);
    TU_CHECK(s.disk_enabled);
    TU_CHECK_EQ_INT(s.disk_hits - base.disk_hits, round);
    TU_CHECK_EQ_INT(s.disk_writes - base.disk_writes, round == 0);
    TU_CHECK_EQ_INT(ge_read_u32(a, "g_scale"), 7);
    v.scale = 42;
    ge_write_u32(a, "g_scale", 42);
    TU_CHECK_OK(ge_run_check(f.driver, f.device[0], a, &v, "disk-cache module"));
    /* the same image again while it is loaded: a hit, the same module and globals */
    TU_REQUIRE_OK(ge_load(&f, 0, &b));
    TU_CHECK_EQ_INT(ge_stats(f.device[0]).hits - base.hits, 1);
    TU_CHECK_OK(gpuhal_executable_global(a, "g_scale", &address_a, &size));
    TU_CHECK_OK(gpuhal_executable_global(b, "g_scale", &address_b, &size));
    TU_CHECK(address_a == address_b);
    TU_CHECK_EQ_INT(ge_read_u32(b, "g_scale"), 42);
    gpuhal_executable_release(a);
    gpuhal_executable_release(b);
    a = b = NULL;
    /* unreferenced, the module stays loaded: the next executable finds the value written */
    TU_REQUIRE_OK(ge_load(&f, 0, &a));
    TU_CHECK_EQ_INT(ge_stats(f.device[0]).hits - base.hits, 2);
    TU_CHECK_EQ_INT(ge_read_u32(a, "g_scale"), 42);
    gpuhal_executable_release(a);
    a = NULL;
    /* trimmed, it is loaded again (from the disk cache): the initialisers again */
    TU_CHECK_OK(gpuhal_device_module_cache_trim(f.device[0]));
    TU_REQUIRE_OK(ge_load(&f, 0, &a));
    s = ge_stats(f.device[0]);
    TU_CHECK_EQ_INT(s.disk_hits - base.disk_hits, round + 1);
    TU_CHECK_EQ_INT(ge_read_u32(a, "g_scale"), 7);
    v.scale = 7;
    TU_CHECK_OK(ge_run_check(f.driver, f.device[0], a, &v, "disk-cache module, loaded again"));
    gpuhal_executable_release(a);
    a = NULL;
    ge_close(&f);
  }
  tu_remove_dir(dir);
}

/* A buffer over a global keeps its executable's module loaded after the executable's
 * release (a trim leaves it); its last release lets the module go. */
TU_TEST(buffer_keeps_the_module_loaded) {
  ge_fixture_t f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_buffer_t* scale = NULL;
  gpuhal_memory_stats_t before, after;
  uint64_t entries;
  uint32_t value = 0;
  if (!ge_open(&f, 1, 1, NULL)) return;
  TU_CHECK_OK(gpuhal_device_memory_stats(f.device[0], &before));
  entries = ge_stats(f.device[0]).entries; /* gpuhal's own kernels (memops: loaded at creation, referenced) */
  TU_REQUIRE_OK(ge_load(&f, 0, &exe));
  TU_REQUIRE_OK(gpuhal_executable_global_buffer(exe, "g_scale", &scale));
  gpuhal_executable_release(exe);
  TU_CHECK_OK(gpuhal_device_module_cache_trim(f.device[0]));
  TU_CHECK_EQ_INT(ge_stats(f.device[0]).entries - entries, 1);
  value = 12345;
  TU_CHECK_OK(gpuhal_buffer_write(scale, 0, &value, 4));
  value = 0;
  TU_CHECK_OK(gpuhal_buffer_read(scale, 0, &value, 4));
  TU_CHECK_EQ_INT(value, 12345);
  /* not memory of gpuhal_buffer_allocate: not counted, not exportable */
  TU_CHECK_OK(gpuhal_device_memory_stats(f.device[0], &after));
  TU_CHECK(after.buffers_allocated == before.buffers_allocated);
  {
    gpuhal_buffer_handle_t handle;
    TU_CHECK_STATUS(gpuhal_buffer_export(scale, &handle), GPUHAL_STATUS_INVALID_ARGUMENT, "global");
  }
  /* its range is the global's */
  TU_CHECK_STATUS(gpuhal_buffer_write(scale, 0, &before, 8), GPUHAL_STATUS_OUT_OF_RANGE, "size");
  gpuhal_buffer_release(scale);
  TU_CHECK_OK(gpuhal_device_memory_stats(f.device[0], &after));
  TU_CHECK(after.buffers_allocated == before.buffers_allocated);
  TU_CHECK_OK(gpuhal_device_module_cache_trim(f.device[0]));
  TU_CHECK_EQ_INT(ge_stats(f.device[0]).entries - entries, 0);
  ge_close(&f);
}

/* The lookup runs in the executable's device's context whatever the calling thread has
 * current (none, or another device's: with two devices), and leaves the caller's as it was. */
TU_TEST(callers_context_is_left_alone) {
  typedef int (*retain_fn)(void**, int);
  typedef int (*release_fn)(int);
  typedef int (*push_fn)(void*);
  typedef int (*pop_fn)(void**);
  typedef int (*current_fn)(void**);
  const char* lib = getenv("GPUHAL_CUDA_LIBRARY");
  ge_fixture_t f;
  gpuhal_executable_t* exe = NULL;
  void* h;
  void *ctx1 = NULL, *current = (void*)1, *popped = NULL, *p;
  retain_fn retain;
  release_fn release;
  push_fn push;
  pop_fn pop;
  current_fn get_current;
  uint64_t address = 0, size = 0, table = 0, table_again = 0;
  unsigned long long violations = ge_violations();
  if (!ge_open(&f, 1, 2, NULL)) return;
  h = dlopen(lib && lib[0] ? lib : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  TU_REQUIRE(h != NULL);
  p = dlsym(h, "cuDevicePrimaryCtxRetain");
  memcpy(&retain, &p, sizeof(p));
  p = dlsym(h, "cuDevicePrimaryCtxRelease_v2");
  memcpy(&release, &p, sizeof(p));
  p = dlsym(h, "cuCtxPushCurrent_v2");
  memcpy(&push, &p, sizeof(p));
  p = dlsym(h, "cuCtxPopCurrent_v2");
  memcpy(&pop, &p, sizeof(p));
  p = dlsym(h, "cuCtxGetCurrent");
  memcpy(&get_current, &p, sizeof(p));
  TU_REQUIRE(retain && release && push && pop && get_current);
  TU_REQUIRE_OK(ge_load(&f, 0, &exe));
  TU_CHECK_EQ_INT(get_current(&current), 0);
  TU_CHECK(current == NULL); /* a thread of the application's, nothing current */
  TU_CHECK_OK(gpuhal_executable_global(exe, "c_table", &table, &size));
  TU_CHECK_EQ_INT(get_current(&current), 0);
  TU_CHECK(current == NULL);
  if (f.count >= 2) {
    /* device 1's context current: the lookup is still device 0's copy (a library's
     * cuLibraryGetGlobal answers for the current context) */
    TU_REQUIRE(retain(&ctx1, 1) == 0 && push(ctx1) == 0);
    TU_CHECK_OK(gpuhal_executable_global(exe, "c_table", &table_again, &size));
    TU_CHECK(table_again == table);
    TU_CHECK_EQ_INT(size, 32);
    TU_CHECK_EQ_INT(ge_read_u32(exe, "g_scale"), 7);
    TU_CHECK_OK(gpuhal_executable_global(exe, "g_scale", &address, &size));
    TU_CHECK_EQ_INT(get_current(&current), 0);
    TU_CHECK(current == ctx1);
    TU_CHECK(pop(&popped) == 0 && popped == ctx1);
    TU_CHECK(release(1) == 0);
  }
  dlclose(h);
  gpuhal_executable_release(exe);
  TU_CHECK_EQ_INT(ge_violations(), violations);
  ge_close(&f);
}

/* softcuda fails the driver's lookup: the status names the CUDA error, the call and where. */
TU_TEST(cuda_errors_are_named) {
  ge_fixture_t f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_buffer_t* b = NULL;
  uint64_t address = 1, size = 1;
  if (!tu_softcuda()) TU_SKIP("fault injection: softcuda only");
  if (!ge_open(&f, 1, 1, NULL)) return;
  TU_REQUIRE_OK(ge_load(&f, 0, &exe));
  TU_REQUIRE(tu_softcuda_faults("cuModuleGetGlobal@*=CUDA_ERROR_ILLEGAL_STATE,"
                                "cuLibraryGetGlobal@*=CUDA_ERROR_ILLEGAL_STATE") == 0);
  TU_CHECK_STATUS(gpuhal_executable_global(exe, "g_scale", &address, &size), GPUHAL_STATUS_FAILED_PRECONDITION,
                  "CUDA_ERROR_ILLEGAL_STATE");
  TU_CHECK(address == 0 && size == 0);
  /* the call and where it was made (file:line) */
  TU_CHECK_STATUS(gpuhal_executable_global(exe, "g_scale", &address, &size), GPUHAL_STATUS_FAILED_PRECONDITION,
                  "GetGlobal at ");
  TU_CHECK_STATUS(gpuhal_executable_global_buffer(exe, "g_scale", &b), GPUHAL_STATUS_FAILED_PRECONDITION,
                  "gpuhal_executable_global_buffer('g_scale')");
  TU_CHECK(b == NULL);
  tu_softcuda_faults(NULL);
  TU_CHECK_EQ_INT(ge_read_u32(exe, "g_scale"), 7); /* and then it works */
  gpuhal_executable_release(exe);
  ge_close(&f);
}

TU_TEST(bad_input) {
  ge_fixture_t f;
  gpuhal_executable_t *exe = NULL, *released = NULL;
  gpuhal_buffer_t* b = (gpuhal_buffer_t*)&f;
  uint64_t address = 1, size = 1;
  if (!ge_open(&f, 1, 1, NULL)) return;
  TU_REQUIRE_OK(ge_load(&f, 0, &exe));
  TU_REQUIRE_OK(ge_load(&f, 0, &released));
  gpuhal_executable_release(released);
  /* NULLs, the empty name, a released executable: named, outputs cleared */
  TU_CHECK_STATUS(gpuhal_executable_global(NULL, "g_scale", &address, &size), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "'executable'");
  TU_CHECK(address == 0 && size == 0);
  TU_CHECK_STATUS(gpuhal_executable_global(exe, NULL, &address, &size), GPUHAL_STATUS_INVALID_ARGUMENT, "'name'");
  TU_CHECK_STATUS(gpuhal_executable_global(exe, "", &address, &size), GPUHAL_STATUS_INVALID_ARGUMENT, "'name'");
  TU_CHECK_STATUS(gpuhal_executable_global(exe, "g_scale", NULL, &size), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "'out_address'");
  TU_CHECK_STATUS(gpuhal_executable_global(exe, "g_scale", &address, NULL), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "'out_size'");
  TU_CHECK_STATUS(gpuhal_executable_global(released, "g_scale", &address, &size), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "already released");
  TU_CHECK_STATUS(gpuhal_executable_global_buffer(NULL, "g_scale", &b), GPUHAL_STATUS_INVALID_ARGUMENT, "'executable'");
  TU_CHECK(b == NULL);
  TU_CHECK_STATUS(gpuhal_executable_global_buffer(exe, NULL, &b), GPUHAL_STATUS_INVALID_ARGUMENT, "'name'");
  TU_CHECK_STATUS(gpuhal_executable_global_buffer(exe, "", &b), GPUHAL_STATUS_INVALID_ARGUMENT, "'name'");
  TU_CHECK_STATUS(gpuhal_executable_global_buffer(exe, "g_scale", NULL), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "'out_buffer'");
  TU_CHECK_STATUS(gpuhal_executable_global_buffer(released, "g_scale", &b), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "already released");
  /* Unknown names: NOT_FOUND naming it, and what the PTX has */
  TU_CHECK_STATUS(gpuhal_executable_global(exe, "no_such_global", &address, &size), GPUHAL_STATUS_NOT_FOUND,
                  "'no_such_global'");
  TU_CHECK_STATUS(gpuhal_executable_global(exe, "no_such_global", &address, &size), GPUHAL_STATUS_NOT_FOUND,
                  "its globals: 'g_scale', 'g_offset', 'g_launches' (5 in all)");
  TU_CHECK_STATUS(gpuhal_executable_global(exe, "bias", &address, &size), GPUHAL_STATUS_NOT_FOUND,
                  "globals whose names contain it: '_ZN3cfg4biasE'");
  TU_CHECK_STATUS(gpuhal_executable_global_buffer(exe, "read_globals", &b), GPUHAL_STATUS_NOT_FOUND,
                  "it is a kernel (.entry)");
  TU_CHECK(b == NULL);
  /* a kernel lookup of a global's name is NOT_FOUND too */
  {
    gpuhal_kernel_t* k = NULL;
    TU_CHECK_STATUS(gpuhal_executable_kernel(exe, "g_scale", &k), GPUHAL_STATUS_NOT_FOUND, "'g_scale'");
  }
  /* the good objects still work */
  TU_CHECK_EQ_INT(ge_read_u32(exe, "g_scale"), 7);
  gpuhal_executable_release(exe);
  ge_close(&f);
}

/* What a PTX without the name says: a device function, a .shared or .extern variable, no
 * globals at all. */
TU_TEST(not_found_hints) {
  static const char ptx[] =
      ".version 8.0\n.target sm_75\n.address_size 64\n"
      ".extern .global .align 4 .u32 elsewhere;\n"
      ".shared .align 4 .b8 tile[64];\n"
      ".func helper() { ret; }\n"
      ".visible .entry noop() { ret; }\n";
  static const char with_global[] =
      ".version 8.0\n.target sm_75\n.address_size 64\n"
      ".global .align 4 .u32 counter = 3;\n"
      ".visible .entry noop2() { ret; }\n";
  ge_fixture_t f;
  gpuhal_executable_t *exe = NULL, *exe2 = NULL;
  uint64_t address = 0, size = 0;
  if (!ge_open(&f, 1, 1, NULL)) return;
  TU_REQUIRE_OK(gpuhal_executable_load(f.device[0], ptx, sizeof(ptx), &exe));
  TU_CHECK_STATUS(gpuhal_executable_global(exe, "helper", &address, &size), GPUHAL_STATUS_NOT_FOUND,
                  "a device function (.func)");
  TU_CHECK_STATUS(gpuhal_executable_global(exe, "tile", &address, &size), GPUHAL_STATUS_NOT_FOUND,
                  "a .shared variable");
  /* A .extern .global the module only declares: softcuda says NOT_FOUND with the hint; driver
   * 580 on an H200 gives it an address (the JIT defines it), which gpuhal passes on. */
  {
    gpuhal_status_t st = gpuhal_executable_global(exe, "elsewhere", &address, &size);
    if (st) {
      TU_CHECK_STATUS(st, GPUHAL_STATUS_NOT_FOUND, ".extern");
    } else {
      TU_CHECK_EQ_INT(size, 4);
    }
  }
  TU_CHECK_STATUS(gpuhal_executable_global(exe, "counter", &address, &size), GPUHAL_STATUS_NOT_FOUND,
                  "defines no globals");
  TU_REQUIRE_OK(gpuhal_executable_load(f.device[0], with_global, sizeof(with_global), &exe2));
  TU_CHECK_OK(gpuhal_executable_global(exe2, "counter", &address, &size));
  TU_CHECK_EQ_INT(size, 4);
  TU_CHECK_EQ_INT(ge_read_u32(exe2, "counter"), 3);
  gpuhal_executable_release(exe);
  gpuhal_executable_release(exe2);
  ge_close(&f);
}

TU_MAIN(TU_CASE(addresses_and_sizes), TU_CASE(initialisers_before_any_write), TU_CASE(host_writes_kernel_reads),
        TU_CASE(queue_ordered_writes_graph), TU_CASE(queue_ordered_writes_stream),
        TU_CASE(per_device_copies_shared_image), TU_CASE(per_device_copies_modules_per_context),
        TU_CASE(disk_cache_and_module_cache_hits), TU_CASE(buffer_keeps_the_module_loaded),
        TU_CASE(callers_context_is_left_alone), TU_CASE(cuda_errors_are_named), TU_CASE(bad_input),
        TU_CASE(not_found_hints))
