/* Tensor map arguments (gpuhal_arg_tensor_map, TMA): a tile copy through a map checked
 * against the CPU, over a buffer (encoded at record) and over a binding slot rebound
 * between executes (encoded at execute; the GRAPH patches the node's 128-byte value) and
 * over a transient buffer, with tiles past the tensor's edge; every bad field named; in STREAM and GRAPH command buffers,
 * on softcuda (the twin reads through softcuda's encoding) and a GPU (compute 9.0). The
 * kernel is tests/kernels/tma_tile_copy. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuhal.h"
#include "test_util.h"

#define TM_TIMEOUT_NS 30000000000ll
#define TM_W 100u     /* not a multiple of the 32-wide tile: the last tiles cross the edge */
#define TM_H 37u      /* nor of the 8 rows */
#define TM_PITCH 112u /* elements per row in memory: rows padded to 448 bytes */

typedef struct tm_fixture {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_kernel_t* copy; /* (CUtensorMap map, unsigned* out, unsigned width, unsigned height) */
} tm_fixture;

static void tm_close(tm_fixture* t) {
  if (t->device) gpuhal_status_free(gpuhal_device_wait_idle(t->device, gpuhal_timeout_relative_ns(TM_TIMEOUT_NS)));
  gpuhal_executable_release(t->exe);
  gpuhal_device_release(t->device);
  gpuhal_driver_release(t->driver);
  memset(t, 0, sizeof(*t));
}

/* 1: ready; 0: the case is done (skipped, or failed). */
static int tm_open(tm_fixture* t) {
  gpuhal_status_t st;
  memset(t, 0, sizeof(*t));
  if (!tu_open_device(&t->driver, &t->device, 9, "tensor maps need compute capability 9.0")) return 0;
  st = tu_load_kernel(t->device, "tma_tile_copy", &t->exe, &t->copy);
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "fixture: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
    tm_close(t);
    return 0;
  }
  return 1;
}

/* The 2-D map of a TM_W x TM_H tensor of u32 with TM_PITCH-element rows, 32 x 8 tiles. */
static gpuhal_tensor_map_t tm_map(void) {
  gpuhal_tensor_map_t m;
  memset(&m, 0, sizeof(m));
  m.type = GPUHAL_TENSOR_U32;
  m.rank = 2;
  m.dims[0] = TM_W;
  m.dims[1] = TM_H;
  m.strides[0] = TM_PITCH * 4u;
  m.box[0] = 32;
  m.box[1] = 8;
  return m;
}

/* A source tensor holding seed + y * 1000 + x (padding: a value the copy must not see). */
static gpuhal_status_t tm_source(tm_fixture* t, unsigned seed, gpuhal_buffer_t** out) {
  static unsigned host[TM_PITCH * TM_H];
  unsigned x, y;
  gpuhal_status_t st;
  for (y = 0; y < TM_H; ++y)
    for (x = 0; x < TM_PITCH; ++x) host[y * TM_PITCH + x] = x < TM_W ? seed + y * 1000u + x : 0xDEADu;
  st = gpuhal_buffer_allocate(t->device, GPUHAL_MEMORY_DEVICE, sizeof(host), out);
  if (!st) st = gpuhal_buffer_write(*out, 0, host, sizeof(host));
  return st;
}

/* 1 when out holds seed + y * 1000 + x + 1 everywhere. */
static int tm_check(gpuhal_buffer_t* out, unsigned seed, const char* what) {
  static unsigned host[TM_W * TM_H];
  unsigned i;
  gpuhal_status_t st = gpuhal_buffer_read(out, 0, host, sizeof(host));
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "%s: read: %s", what, gpuhal_status_message(st));
    gpuhal_status_free(st);
    return 0;
  }
  for (i = 0; i < TM_W * TM_H; ++i) {
    unsigned want = seed + (i / TM_W) * 1000u + i % TM_W + 1u;
    if (host[i] != want) {
      TU_FAIL_AT(__FILE__, __LINE__, "%s: element (%u, %u) is %u, expected %u", what, i % TM_W, i / TM_W, host[i],
                 want);
      return 0;
    }
  }
  return 1;
}

static gpuhal_status_t tm_dispatch(tm_fixture* t, gpuhal_command_buffer_t* cb, gpuhal_arg_t memory,
                                   const gpuhal_tensor_map_t* map, gpuhal_buffer_t* out) {
  gpuhal_arg_t args[4];
  args[0] = gpuhal_arg_tensor_map(memory, map);
  args[1] = gpuhal_arg_buffer(out, 0);
  args[2] = gpuhal_arg_u32(TM_W);
  args[3] = gpuhal_arg_u32(TM_H);
  return gpuhal_cmd_dispatch(cb, t->copy, gpuhal_dim3((TM_W + 31) / 32, (TM_H + 7) / 8, 1), gpuhal_dim3(128, 1, 1), 0,
                             4, args);
}

static void body_tile_copy_over_a_buffer(uint32_t mode) {
  tm_fixture t;
  gpuhal_buffer_t *src = NULL, *out = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_tensor_map_t map = tm_map();
  if (!tm_open(&t)) return;
  TU_CHECK_OK(tm_source(&t, 7, &src));
  TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, TM_W * TM_H * 4u, &out));
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_REUSABLE | mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(tm_dispatch(&t, cb, gpuhal_arg_buffer(src, 0), &map, out));
  memset(&map, 0xff, sizeof(map)); /* gpuhal kept its own copy */
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  {
    /* Encoded once for the record's check and once by the first execute: later executes at
     * the same address reuse that encoding (softcuda counts the driver calls). */
    unsigned long long before = tu_softcuda_calls("cuTensorMapEncodeTiled");
    unsigned i;
    for (i = 0; i < 5 && !tu_state.failed; ++i) {
      TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, NULL));
      tm_check(out, 7, "execute");
    }
    if (tu_softcuda()) TU_CHECK_EQ_INT(tu_softcuda_calls("cuTensorMapEncodeTiled") - before, 1);
  }
  /* Again, the caller's reference gone. */
  gpuhal_buffer_release(src);
  src = NULL;
  TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, NULL));
  tm_check(out, 7, "an execute after the caller's release (the command buffer holds the source)");
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(out);
  tm_close(&t);
}

/* A map over binding slot 0: encoded at each execute with that execute's buffer (and
 * offset), so one recording copies from a different tensor each time. */
static void body_tile_copy_over_a_rebound_slot(uint32_t mode) {
  tm_fixture t;
  gpuhal_buffer_t *src[3] = {NULL, NULL, NULL}, *out = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_tensor_map_t map = tm_map();
  unsigned round;
  if (!tm_open(&t)) return;
  for (round = 0; round < 3; ++round) TU_CHECK_OK(tm_source(&t, 100000u * (round + 1), &src[round]));
  TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, TM_W * TM_H * 4u, &out));
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_REUSABLE | mode, 1, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(tm_dispatch(&t, cb, gpuhal_arg_slot(0, 0), &map, out));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  for (round = 0; round < 6 && !tu_state.failed; ++round) {
    gpuhal_binding_table_t table;
    char what[64];
    table.count = 1;
    table.buffers = &src[round % 3];
    table.offsets = NULL;
    TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, &table));
    snprintf(what, sizeof(what), "execute %u (source %u)", round, round % 3);
    tm_check(out, 100000u * (round % 3 + 1), what);
  }
  /* A bound offset that breaks the alignment is refused at execute, naming why. */
  {
    gpuhal_binding_table_t table;
    uint64_t offset = 4;
    table.count = 1;
    table.buffers = &src[0];
    table.offsets = &offset;
    TU_CHECK_STATUS(tu_execute_and_wait(t.driver, t.device, cb, &table), GPUHAL_STATUS_FAILED_PRECONDITION,
                    "16-byte aligned");
  }
  /* A buffer too small for the tensor is refused by the binding table's extent check. */
  {
    gpuhal_buffer_t* small = NULL;
    gpuhal_binding_table_t table;
    TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 256, &small));
    table.count = 1;
    table.buffers = &small;
    table.offsets = NULL;
    {
      gpuhal_status_t st = tu_execute_and_wait(t.driver, t.device, cb, &table);
      TU_CHECK(st != NULL);
      if (st) TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "slot 0");
      gpuhal_status_free(st);
    }
    gpuhal_buffer_release(small);
  }
  /* A map at a slot offset whose tensor spans more than any buffer (its extent saturates):
   * refused by the same check, not wrapped round to a small extent that any buffer passes. */
  {
    gpuhal_command_buffer_t* huge_cb = NULL;
    gpuhal_tensor_map_t huge = tm_map();
    gpuhal_binding_table_t table;
    huge.dims[1] = 1ull << 32;
    huge.strides[0] = (1ull << 40) - 16;
    TU_CHECK_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_REUSABLE | mode, 1, &huge_cb));
    TU_CHECK_OK(gpuhal_command_buffer_begin(huge_cb));
    TU_CHECK_OK(tm_dispatch(&t, huge_cb, gpuhal_arg_slot(0, 16), &huge, out));
    TU_CHECK_OK(gpuhal_command_buffer_end(huge_cb));
    table.count = 1;
    table.buffers = &src[0];
    table.offsets = NULL;
    TU_CHECK_STATUS(tu_execute_and_wait(t.driver, t.device, huge_cb, &table), GPUHAL_STATUS_OUT_OF_RANGE,
                    "slot 0 is used up to");
    gpuhal_command_buffer_release(huge_cb);
  }
  /* And it still runs right afterwards. */
  {
    gpuhal_binding_table_t table;
    table.count = 1;
    table.buffers = &src[1];
    table.offsets = NULL;
    TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, &table));
    tm_check(out, 200000u, "after the refused executes");
  }
  gpuhal_command_buffer_release(cb);
  for (round = 0; round < 3; ++round) gpuhal_buffer_release(src[round]);
  gpuhal_buffer_release(out);
  tm_close(&t);
}

/* Signals a fresh semaphore from `alloca` (1) or `dealloca` (0) of `buffer` and waits. */
static gpuhal_status_t tm_transient(tm_fixture* t, int alloca, uint64_t size, gpuhal_buffer_t** buffer) {
  gpuhal_semaphore_t* sem = NULL;
  uint64_t one = 1;
  gpuhal_status_t st = gpuhal_semaphore_create(t->driver, 0, &sem);
  if (!st && alloca)
    st = gpuhal_queue_alloca(t->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &one), size,
                             buffer);
  if (!st && !alloca)
    st = gpuhal_queue_dealloca(t->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &one),
                               *buffer);
  if (!st) st = gpuhal_semaphore_wait(sem, 1, gpuhal_timeout_relative_ns(TM_TIMEOUT_NS));
  gpuhal_semaphore_release(sem);
  return st;
}

/* A map over a transient buffer named directly: encoded at execute with the address its
 * alloca gave (never baked in at record); after its dealloca an execute is refused before
 * anything runs. */
static void body_tile_copy_over_a_transient_buffer(uint32_t mode) {
  tm_fixture t;
  gpuhal_buffer_t *src = NULL, *transient = NULL, *out = NULL;
  gpuhal_command_buffer_t *cb = NULL, *fill = NULL;
  gpuhal_tensor_map_t map = tm_map();
  gpuhal_status_t st;
  if (!tm_open(&t)) return;
  TU_CHECK_OK(tm_source(&t, 55, &src));
  TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, TM_W * TM_H * 4u, &out));
  TU_REQUIRE_OK(tm_transient(&t, 1, TM_PITCH * TM_H * 4u, &transient));
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_REUSABLE | mode, 0, &fill));
  TU_CHECK_OK(gpuhal_command_buffer_begin(fill));
  TU_CHECK_OK(gpuhal_cmd_copy(fill, gpuhal_ref_buffer(src, 0), gpuhal_ref_buffer(transient, 0), TM_PITCH * TM_H * 4u));
  TU_CHECK_OK(gpuhal_command_buffer_end(fill));
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_REUSABLE | mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(tm_dispatch(&t, cb, gpuhal_arg_buffer(transient, 0), &map, out));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, fill, NULL));
  TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, NULL));
  tm_check(out, 55, "over the transient buffer");
  TU_CHECK_OK(tm_transient(&t, 0, 0, &transient));
  st = tu_execute_and_wait(t.driver, t.device, cb, NULL);
  TU_CHECK(gpuhal_status_code(st) == GPUHAL_STATUS_FAILED_PRECONDITION);
  gpuhal_status_free(st);
  gpuhal_buffer_release(transient);
  gpuhal_command_buffer_release(cb);
  gpuhal_command_buffer_release(fill);
  gpuhal_buffer_release(src);
  gpuhal_buffer_release(out);
  tm_close(&t);
}

/* One bad field of the map: recording refuses it naming `needle`, and the command buffer
 * records on. */
static void tm_refuse(tm_fixture* t, gpuhal_command_buffer_t* cb, gpuhal_arg_t memory, const gpuhal_tensor_map_t* map,
                      gpuhal_buffer_t* out, gpuhal_status_code_t code, const char* needle) {
  TU_CHECK_STATUS(tm_dispatch(t, cb, memory, map, out), code, needle);
}

static void body_bad_maps_name_the_field(uint32_t mode) {
  tm_fixture t;
  gpuhal_buffer_t *src = NULL, *out = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_tensor_map_t m;
  gpuhal_arg_t mem;
  if (!tm_open(&t)) return;
  TU_CHECK_OK(tm_source(&t, 1, &src));
  TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, TM_W * TM_H * 4u, &out));
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_REUSABLE | mode, 1, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  mem = gpuhal_arg_buffer(src, 0);
#define TM_BAD(edit, code, needle)                 \
  do {                                             \
    m = tm_map();                                  \
    edit;                                          \
    tm_refuse(&t, cb, mem, &m, out, code, needle); \
  } while (0)
  TM_BAD(m.type = (gpuhal_tensor_type_t)13, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->type");
  TM_BAD(m.rank = 0, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->rank");
  TM_BAD(m.rank = 6, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->rank");
  TM_BAD(m.dims[1] = 0, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->dims[1]");
  TM_BAD(m.dims[0] = (1ull << 32) + 1, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->dims[0]");
  TM_BAD(m.strides[0] = 404, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->strides[0]");
  TM_BAD((m.strides[0] = 0, m.dims[0] = 99), GPUHAL_STATUS_INVALID_ARGUMENT, "give a padded stride"); /* 396 B */
  TM_BAD(m.strides[0] = 384, GPUHAL_STATUS_INVALID_ARGUMENT, "less than dimension 0 spans");
  /* The span below a stride beyond 2^64 bytes is not wrapped round. */
  TM_BAD(
      (m.rank = 3, m.dims[1] = 1ull << 32, m.dims[2] = 1, m.box[2] = 1, m.strides[0] = 1ull << 39, m.strides[1] = 16),
      GPUHAL_STATUS_INVALID_ARGUMENT, "less than dimension 1 spans (at least");
  TM_BAD(m.box[1] = 0, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->box[1]");
  TM_BAD(m.box[1] = 257, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->box[1]");
  TM_BAD(m.box[0] = 6, GPUHAL_STATUS_INVALID_ARGUMENT, "not a multiple of 16");
  TM_BAD(m.element_strides[1] = 9, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->element_strides[1]");
  TM_BAD(m.interleave = 1, GPUHAL_STATUS_INVALID_ARGUMENT, "interleaved tensor has rank 3..5");
  TM_BAD(m.interleave = 3, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->interleave");
  TM_BAD(m.swizzle = 4, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->swizzle");
  TM_BAD(m.swizzle = 1, GPUHAL_STATUS_INVALID_ARGUMENT, "swizzle allows at most");
  TM_BAD(m.l2_promotion = 4, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->l2_promotion");
  TM_BAD(m.oob_fill = 1, GPUHAL_STATUS_INVALID_ARGUMENT, "NaN for an integer type");
  TM_BAD(m.oob_fill = 2, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map->oob_fill");
  TM_BAD(m.dims[1] = TM_H + 1, GPUHAL_STATUS_OUT_OF_RANGE, "past the end of the buffer");
  /* The memory: misaligned, past the end, not a buffer or slot, a slot the buffer lacks. */
  m = tm_map();
  tm_refuse(&t, cb, gpuhal_arg_buffer(src, 4), &m, out, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].offset");
  tm_refuse(&t, cb, gpuhal_arg_buffer(src, 64), &m, out, GPUHAL_STATUS_OUT_OF_RANGE, "past the end of the buffer");
  tm_refuse(&t, cb, gpuhal_arg_u32(5), &m, out, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].memory");
  tm_refuse(&t, cb, gpuhal_arg_slot(3, 0), &m, out, GPUHAL_STATUS_OUT_OF_RANGE, "binding slot 3");
  tm_refuse(&t, cb, gpuhal_arg_slot(0, 8), &m, out, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].offset");
  tm_refuse(&t, cb, mem, NULL, out, GPUHAL_STATUS_INVALID_ARGUMENT, "args[0].tensor_map' must not be NULL");
  /* A tensor map where the kernel has a pointer, and a pointer where it has a map. */
  {
    gpuhal_arg_t args[4];
    args[0] = gpuhal_arg_buffer(src, 0);
    args[1] = gpuhal_arg_tensor_map(gpuhal_arg_buffer(out, 0), &m);
    args[2] = gpuhal_arg_u32(TM_W);
    args[3] = gpuhal_arg_u32(TM_H);
    {
      gpuhal_kernel_info_t info;
      TU_CHECK_OK(gpuhal_kernel_info(t.copy, &info));
      if (info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN)
        TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.copy, gpuhal_dim3(4, 5, 1), gpuhal_dim3(128, 1, 1), 0, 4, args),
                        GPUHAL_STATUS_INVALID_ARGUMENT, "is 8 bytes but parameter 0");
    }
  }
  /* After all of that the recording is intact: a good dispatch records and runs. */
  m = tm_map();
  TU_CHECK_OK(tm_dispatch(&t, cb, mem, &m, out));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  {
    gpuhal_binding_table_t table;
    table.count = 1;
    table.buffers = &src;
    table.offsets = NULL;
    TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, &table));
  }
  tm_check(out, 1, "the good dispatch after the refused ones");
#undef TM_BAD
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(src);
  gpuhal_buffer_release(out);
  tm_close(&t);
}

#define TM_BOTH(name)                                                   \
  TU_TEST(name##_stream) { body_##name(GPUHAL_COMMAND_BUFFER_STREAM); } \
  TU_TEST(name##_graph) { body_##name(0); }
TM_BOTH(tile_copy_over_a_buffer)
TM_BOTH(tile_copy_over_a_rebound_slot)
TM_BOTH(tile_copy_over_a_transient_buffer)
TM_BOTH(bad_maps_name_the_field)

TU_MAIN(TU_CASE(tile_copy_over_a_buffer_stream), TU_CASE(tile_copy_over_a_buffer_graph),
        TU_CASE(tile_copy_over_a_rebound_slot_stream), TU_CASE(tile_copy_over_a_rebound_slot_graph),
        TU_CASE(tile_copy_over_a_transient_buffer_stream), TU_CASE(tile_copy_over_a_transient_buffer_graph),
        TU_CASE(bad_maps_name_the_field_stream), TU_CASE(bad_maps_name_the_field_graph))
