/* test_stale_handles: a released handle stays caught however much happens after it.
 *
 * For every public object type: create one, release it, then create and release
 * GPUHAL_HANDLE_REUSE_DISTANCE more of the same type (and a mix of other types), then call
 * every public function that takes that type with the stale handle: each must return
 * INVALID_ARGUMENT saying the argument was already released (or its documented neutral
 * value), never touch freed memory (CI runs this under ASan, which reports any read of
 * freed memory). Before base.h's type-stable object pools, released objects were kept in a
 * quarantine of the last 64 frees only, so every check here read freed memory.
 *
 * Also: the memory kept for that is bounded (once the distance is reached, released
 * objects are reused and creating allocates nothing), and it goes back to the allocator
 * with the driver (CTest runs with LSan and SOFTCUDA_LEAKS=fatal). */
#include "test_internals.h"
#include "test_util.h"

#define SH_DISTANCE GPUHAL_HANDLE_REUSE_DISTANCE

static gpuhal_timeout_t sh_seconds(int s) { return gpuhal_timeout_relative_ns((int64_t)s * 1000000000ll); }

/* The status of a call on a stale handle: INVALID_ARGUMENT, "'arg' was already released". */
#define SH_STALE(expr, arg) TU_CHECK_STATUS(expr, GPUHAL_STATUS_INVALID_ARGUMENT, "'" arg "' was already released")

typedef struct sh_fixture_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  char* ptx;
  size_t ptx_size;
} sh_fixture_t;

static int sh_open(sh_fixture_t* f) {
  gpuhal_status_t s;
  memset(f, 0, sizeof(*f));
  s = gpuhal_driver_create(NULL, &f->driver);
  if (!s) s = gpuhal_device_create(f->driver, 0, NULL, &f->device);
  if (s) {
    fprintf(stderr, "  setup: %s\n", gpuhal_status_message(s));
    gpuhal_status_free(s);
    gpuhal_driver_release(f->driver);
    return 0;
  }
  f->ptx = tu_read_kernel_file("fill_u32.ptx", &f->ptx_size);
  return f->ptx != NULL;
}

static void sh_close(sh_fixture_t* f) {
  free(f->ptx);
  gpuhal_device_release(f->device);
  gpuhal_driver_release(f->driver);
}

/* Thousands of creations and releases of other types in between, so the stale object's
 * memory sees the churn of everything a program does (buffers, semaphores, command
 * buffers, executables). */
static void sh_churn_others(sh_fixture_t* f) {
  int i;
  for (i = 0; i < 1000; ++i) {
    gpuhal_buffer_t* b = NULL;
    gpuhal_semaphore_t* s = NULL;
    gpuhal_command_buffer_t* cb = NULL;
    TU_CHECK_OK(gpuhal_buffer_allocate(f->device, GPUHAL_MEMORY_DEVICE, 64, &b));
    TU_CHECK_OK(gpuhal_semaphore_create(f->driver, 0, &s));
    TU_CHECK_OK(gpuhal_command_buffer_create(f->device, 0, 0, &cb));
    gpuhal_buffer_release(b);
    gpuhal_semaphore_release(s);
    gpuhal_command_buffer_release(cb);
  }
  for (i = 0; i < 100; ++i) {
    gpuhal_executable_t* exe = NULL;
    TU_CHECK_OK(gpuhal_executable_load(f->device, f->ptx, f->ptx_size, &exe));
    gpuhal_executable_release(exe);
  }
}

/* A live command buffer in the recording state, for the commands that take a stale argument. */
static gpuhal_command_buffer_t* sh_recording(sh_fixture_t* f) {
  gpuhal_command_buffer_t* cb = NULL;
  TU_CHECK_OK(gpuhal_command_buffer_create(f->device, 0, 0, &cb));
  if (cb) TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  return cb;
}

TU_TEST(stale_semaphore) {
  sh_fixture_t f;
  gpuhal_semaphore_t* stale = NULL;
  gpuhal_semaphore_t* list[1];
  uint64_t value = 0, one = 1;
  int i;
  if (!sh_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &stale));
  gpuhal_semaphore_release(stale);
  for (i = 0; i < SH_DISTANCE; ++i) {
    gpuhal_semaphore_t* s = NULL;
    TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &s));
    gpuhal_semaphore_release(s);
  }
  sh_churn_others(&f);
  list[0] = stale;
  SH_STALE(gpuhal_semaphore_query(stale, &value), "semaphore");
  SH_STALE(gpuhal_semaphore_signal(stale, 1), "semaphore");
  SH_STALE(gpuhal_semaphore_wait(stale, 1, gpuhal_timeout_immediate()), "semaphore");
  SH_STALE(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, gpuhal_semaphore_list_one(list, &one), gpuhal_timeout_immediate()),
           "list");
  SH_STALE(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(list, &one), gpuhal_semaphore_list_empty(), NULL,
                                NULL),
           "wait");
  SH_STALE(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(list, &one), NULL,
                                NULL),
           "signal");
  gpuhal_semaphore_fail(stale, gpuhal_status_make(GPUHAL_STATUS_ABORTED, "ignored"));
  gpuhal_semaphore_retain(stale);
  gpuhal_semaphore_release(stale);
  sh_close(&f);
}

TU_TEST(stale_buffer) {
  sh_fixture_t f;
  gpuhal_buffer_t* stale = NULL;
  gpuhal_command_buffer_t* cb;
  gpuhal_buffer_t* live = NULL;
  uint64_t address = 0;
  uint32_t word = 7;
  int i;
  if (!sh_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_HOST_PINNED, 256, &stale));
  gpuhal_buffer_release(stale);
  for (i = 0; i < SH_DISTANCE; ++i) {
    gpuhal_buffer_t* b = NULL;
    TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 256, &b));
    gpuhal_buffer_release(b);
  }
  sh_churn_others(&f);
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 256, &live));
  SH_STALE(gpuhal_buffer_read(stale, 0, &word, 4), "buffer");
  SH_STALE(gpuhal_buffer_write(stale, 0, &word, 4), "buffer");
  SH_STALE(gpuhal_buffer_device_address(stale, &address), "buffer");
  TU_CHECK_EQ_INT(gpuhal_buffer_size(stale), 0);
  TU_CHECK(gpuhal_buffer_device(stale) == NULL);
  TU_CHECK(gpuhal_buffer_host_pointer(stale) == NULL);
  cb = sh_recording(&f);
  TU_CHECK_STATUS(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(stale, 0), 4, &word, 4), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "already released");
  TU_CHECK_STATUS(gpuhal_cmd_update(cb, &word, gpuhal_ref_buffer(stale, 0), 4), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "already released");
  TU_CHECK_STATUS(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(stale, 0), gpuhal_ref_buffer(live, 0), 4),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
  TU_CHECK_STATUS(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(live, 0), gpuhal_ref_buffer(stale, 0), 4),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
  {
    gpuhal_arg_t args[3];
    gpuhal_executable_t* exe = NULL;
    gpuhal_kernel_t* kernel = NULL;
    TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.ptx_size, &exe));
    TU_CHECK_OK(gpuhal_executable_kernel(exe, "fill_u32", &kernel));
    args[0] = gpuhal_arg_buffer(stale, 0);
    args[1] = gpuhal_arg_u32(1);
    args[2] = gpuhal_arg_u32(1);
    TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args),
                    GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
    gpuhal_executable_release(exe);
  }
  SH_STALE(gpuhal_queue_dealloca(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), stale),
           "buffer");
  gpuhal_command_buffer_release(cb);
  /* A binding table naming the stale buffer. */
  {
    gpuhal_command_buffer_t* bound = NULL;
    gpuhal_binding_table_t table;
    gpuhal_buffer_t* slots[1];
    TU_CHECK_OK(gpuhal_command_buffer_create(f.device, 0, 1, &bound));
    TU_CHECK_OK(gpuhal_command_buffer_begin(bound));
    TU_CHECK_OK(gpuhal_cmd_fill(bound, gpuhal_ref_slot(0, 0), 4, &word, 4));
    TU_CHECK_OK(gpuhal_command_buffer_end(bound));
    slots[0] = stale;
    table.count = 1;
    table.buffers = slots;
    table.offsets = NULL;
    TU_CHECK_STATUS(
        gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), bound, &table),
        GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
    gpuhal_command_buffer_release(bound);
  }
  gpuhal_buffer_retain(stale);
  gpuhal_buffer_release(stale);
  gpuhal_buffer_release(live);
  sh_close(&f);
}

/* queue_alloca's buffers come from the same pool: a stale one is caught after a long chain
 * of stream-ordered allocations. */
TU_TEST(stale_alloca_buffer) {
  sh_fixture_t f;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_buffer_t* stale = NULL;
  uint64_t value = 0, address = 0;
  int i;
  if (!sh_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  for (i = 0; i <= SH_DISTANCE; ++i) {
    gpuhal_buffer_t* b = NULL;
    uint64_t mid = value + 1, next = value + 2;
    TU_REQUIRE_OK(gpuhal_queue_alloca(f.device, 0, gpuhal_semaphore_list_one(&s, &value),
                                      gpuhal_semaphore_list_one(&s, &mid), 64, &b));
    TU_REQUIRE_OK(gpuhal_queue_dealloca(f.device, 0, gpuhal_semaphore_list_one(&s, &mid),
                                        gpuhal_semaphore_list_one(&s, &next), b));
    value = next;
    if (i == 0) {
      stale = b; /* released after its dealloca completed, below */
      TU_REQUIRE_OK(gpuhal_semaphore_wait(s, value, sh_seconds(30)));
    }
    gpuhal_buffer_release(b);
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(s, value, sh_seconds(60)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, sh_seconds(60)));
  SH_STALE(gpuhal_buffer_device_address(stale, &address), "buffer");
  SH_STALE(gpuhal_queue_dealloca(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), stale),
           "buffer");
  gpuhal_semaphore_release(s);
  sh_close(&f);
}

TU_TEST(stale_command_buffer) {
  sh_fixture_t f;
  gpuhal_command_buffer_t* stale = NULL;
  gpuhal_buffer_t* live = NULL;
  uint32_t word = 7;
  void* graph = NULL;
  int i;
  if (!sh_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 256, &live));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, 0, 0, &stale));
  gpuhal_command_buffer_release(stale);
  for (i = 0; i < SH_DISTANCE; ++i) {
    gpuhal_command_buffer_t* cb = NULL;
    TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, 0, 0, &cb));
    gpuhal_command_buffer_release(cb);
  }
  sh_churn_others(&f);
  SH_STALE(gpuhal_command_buffer_begin(stale), "command_buffer");
  SH_STALE(gpuhal_command_buffer_end(stale), "command_buffer");
  SH_STALE(gpuhal_cmd_fill(stale, gpuhal_ref_buffer(live, 0), 4, &word, 4), "command_buffer");
  SH_STALE(gpuhal_cmd_update(stale, &word, gpuhal_ref_buffer(live, 0), 4), "command_buffer");
  SH_STALE(gpuhal_cmd_copy(stale, gpuhal_ref_buffer(live, 0), gpuhal_ref_buffer(live, 64), 4), "command_buffer");
  SH_STALE(gpuhal_cmd_barrier(stale), "command_buffer");
  SH_STALE(gpuhal_command_buffer_native_graph(stale, &graph), "command_buffer");
  TU_CHECK_STATUS(
      gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), stale, NULL),
      GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
  {
    gpuhal_executable_t* exe = NULL;
    gpuhal_kernel_t* kernel = NULL;
    gpuhal_arg_t args[3];
    TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.ptx_size, &exe));
    TU_CHECK_OK(gpuhal_executable_kernel(exe, "fill_u32", &kernel));
    args[0] = gpuhal_arg_buffer(live, 0);
    args[1] = gpuhal_arg_u32(1);
    args[2] = gpuhal_arg_u32(1);
    SH_STALE(gpuhal_cmd_dispatch(stale, kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args),
             "command_buffer");
    gpuhal_executable_release(exe);
  }
  gpuhal_command_buffer_retain(stale);
  gpuhal_command_buffer_release(stale);
  gpuhal_buffer_release(live);
  sh_close(&f);
}

/* Released by the application while gpuhal still holds them (queued work holds its
 * semaphores and command buffer; the command buffer holds its buffer): the handles are
 * released all the same. A second execute of the command buffer must not run, the buffer
 * must not be written, and a retain must not bring either back; the queued work still runs,
 * into the memory it was recorded with. */
TU_TEST(released_while_gpuhal_holds_it) {
  sh_fixture_t f;
  gpuhal_semaphore_t* gate = NULL;
  gpuhal_semaphore_t* done = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_command_buffer_t* keeper = NULL;
  uint32_t pattern = 0x600DF00Du, word = 1;
  const uint32_t* host;
  uint64_t one = 1;
  if (!sh_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &gate));
  TU_REQUIRE_OK(gpuhal_semaphore_create(f.driver, 0, &done));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_HOST_PINNED, 64, &buffer));
  host = (const uint32_t*)gpuhal_buffer_host_pointer(buffer);
  TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb));
  TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));
  TU_REQUIRE_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buffer, 0), 64, &pattern, 4));
  TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
  /* Recorded, never executed: it keeps the buffer's memory for the check at the end. */
  TU_REQUIRE_OK(gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &keeper));
  TU_REQUIRE_OK(gpuhal_command_buffer_begin(keeper));
  TU_REQUIRE_OK(gpuhal_cmd_fill(keeper, gpuhal_ref_buffer(buffer, 0), 4, &word, 4));
  TU_REQUIRE_OK(gpuhal_command_buffer_end(keeper));
  TU_REQUIRE_OK(gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                     gpuhal_semaphore_list_one(&done, &one), cb, NULL));
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buffer);
  TU_CHECK_STATUS(
      gpuhal_queue_execute(f.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), cb, NULL),
      GPUHAL_STATUS_INVALID_ARGUMENT, "'command_buffer' was already released");
  SH_STALE(gpuhal_buffer_write(buffer, 0, &word, sizeof(word)), "buffer");
  TU_CHECK(gpuhal_buffer_size(buffer) == 0 && gpuhal_buffer_host_pointer(buffer) == NULL);
  gpuhal_command_buffer_retain(cb); /* refused: nothing to release after */
  gpuhal_buffer_retain(buffer);
  SH_STALE(gpuhal_command_buffer_begin(cb), "command_buffer");
  SH_STALE(gpuhal_buffer_read(buffer, 0, &word, sizeof(word)), "buffer");
  gpuhal_semaphore_release(done);
  SH_STALE(gpuhal_semaphore_signal(done, 5), "semaphore");
  gpuhal_semaphore_retain(done);
  SH_STALE(gpuhal_semaphore_query(done, &one), "semaphore");
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, sh_seconds(10)));
  TU_CHECK_EQ_INT(host[15], pattern); /* the queued execute ran, into its buffer */
  gpuhal_command_buffer_release(keeper);
  gpuhal_semaphore_release(gate);
  sh_close(&f);
}

/* Executables and their kernels: a kernel lives as long as its executable. */
TU_TEST(stale_executable_and_kernel) {
  sh_fixture_t f;
  gpuhal_executable_t* stale = NULL;
  gpuhal_kernel_t* stale_kernel = NULL;
  gpuhal_buffer_t* live = NULL;
  gpuhal_command_buffer_t* cb;
  gpuhal_kernel_info_t info;
  gpuhal_arg_t args[3];
  int i;
  if (!sh_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 256, &live));
  TU_REQUIRE_OK(gpuhal_executable_load(f.device, f.ptx, f.ptx_size, &stale));
  TU_REQUIRE_OK(gpuhal_executable_kernel(stale, "fill_u32", &stale_kernel));
  gpuhal_executable_release(stale);
  for (i = 0; i < SH_DISTANCE; ++i) {
    gpuhal_executable_t* exe = NULL;
    gpuhal_kernel_t* kernel = NULL;
    TU_REQUIRE_OK(gpuhal_executable_load(f.device, f.ptx, f.ptx_size, &exe));
    TU_REQUIRE_OK(gpuhal_executable_kernel(exe, "fill_u32", &kernel));
    gpuhal_executable_release(exe);
  }
  sh_churn_others(&f);
  {
    gpuhal_kernel_t* none = NULL;
    SH_STALE(gpuhal_executable_kernel(stale, "fill_u32", &none), "executable");
    TU_CHECK(none == NULL);
  }
  {
    gpuhal_buffer_t* none = NULL;
    uint64_t address = 1, size = 1;
    SH_STALE(gpuhal_executable_global(stale, "g", &address, &size), "executable");
    TU_CHECK(address == 0 && size == 0);
    SH_STALE(gpuhal_executable_global_buffer(stale, "g", &none), "executable");
    TU_CHECK(none == NULL);
  }
  SH_STALE(gpuhal_kernel_info(stale_kernel, &info), "kernel");
  SH_STALE(gpuhal_kernel_set_max_dynamic_shared(stale_kernel, 1024), "kernel");
  cb = sh_recording(&f);
  args[0] = gpuhal_arg_buffer(live, 0);
  args[1] = gpuhal_arg_u32(1);
  args[2] = gpuhal_arg_u32(1);
  SH_STALE(gpuhal_cmd_dispatch(cb, stale_kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args), "kernel");
  gpuhal_command_buffer_release(cb);
  gpuhal_executable_retain(stale);
  gpuhal_executable_release(stale);
  gpuhal_buffer_release(live);
  sh_close(&f);
}

TU_TEST(stale_device) {
  sh_fixture_t f;
  gpuhal_device_t* stale = NULL;
  gpuhal_device_info_t info;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_module_cache_stats_t stats;
  gpuhal_channel_t* channel = NULL;
  gpuhal_channel_id_t id;
  int i;
  /* f.device stays open throughout: on a GPU it keeps the primary context, so each new
   * device below costs streams and threads, not a context. */
  if (!sh_open(&f)) TU_SKIP("no device");
  TU_REQUIRE_OK(gpuhal_device_create(f.driver, 0, NULL, &stale));
  gpuhal_device_release(stale);
  for (i = 0; i < SH_DISTANCE; ++i) {
    gpuhal_device_t* d = NULL;
    TU_REQUIRE_OK(gpuhal_device_create(f.driver, 0, NULL, &d));
    gpuhal_device_release(d);
  }
  sh_churn_others(&f);
  SH_STALE(gpuhal_device_info(stale, &info), "device");
  TU_CHECK_EQ_INT(gpuhal_device_queue_count(stale), 0);
  TU_CHECK(gpuhal_device_driver(stale) == NULL);
  SH_STALE(gpuhal_buffer_allocate(stale, GPUHAL_MEMORY_DEVICE, 64, &buffer), "device");
  SH_STALE(gpuhal_command_buffer_create(stale, 0, 0, &cb), "device");
  SH_STALE(gpuhal_executable_load(stale, f.ptx, f.ptx_size, &exe), "device");
  SH_STALE(gpuhal_device_module_cache_stats(stale, &stats), "device");
  SH_STALE(gpuhal_device_module_cache_trim(stale), "device");
  SH_STALE(gpuhal_queue_execute(stale, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), NULL, NULL),
           "device");
  SH_STALE(gpuhal_queue_alloca(stale, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), 64, &buffer),
           "device");
  SH_STALE(gpuhal_device_wait_idle(stale, gpuhal_timeout_immediate()), "device");
  TU_CHECK_STATUS(gpuhal_device_lost_status(stale), GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
  memset(&id, 0, sizeof(id));
  TU_CHECK_STATUS(gpuhal_channel_create_rank(stale, &id, 0, 1, &channel), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "already released");
  TU_CHECK_STATUS(gpuhal_channel_create_local(f.driver, 1, &stale, &channel), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "already released");
  TU_CHECK(buffer == NULL && cb == NULL && exe == NULL && channel == NULL);
  gpuhal_device_retain(stale);
  gpuhal_device_release(stale);
  sh_close(&f);
}

TU_TEST(stale_channel) {
  sh_fixture_t f;
  gpuhal_channel_t* stale = NULL;
  gpuhal_buffer_t* live = NULL;
  gpuhal_command_buffer_t* cb;
  gpuhal_collective_t c;
  int i, churn;
  if (!sh_open(&f)) TU_SKIP("no device");
  if (!gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_NCCL)) {
    sh_close(&f);
    TU_SKIP("NCCL is not loaded");
  }
  /* A real NCCL communicator takes a while to set up: fewer on a GPU. */
  churn = tu_softcuda() ? SH_DISTANCE : 64;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 256, &live));
  TU_REQUIRE_OK(gpuhal_channel_create_local(f.driver, 1, &f.device, &stale));
  gpuhal_channel_release(stale);
  for (i = 0; i < churn; ++i) {
    gpuhal_channel_t* ch = NULL;
    TU_REQUIRE_OK(gpuhal_channel_create_local(f.driver, 1, &f.device, &ch));
    gpuhal_channel_release(ch);
  }
  sh_churn_others(&f);
  TU_CHECK_EQ_INT(gpuhal_channel_rank(stale), -1);
  TU_CHECK_EQ_INT(gpuhal_channel_size(stale), -1);
  TU_CHECK(gpuhal_channel_device(stale) == NULL);
  memset(&c, 0, sizeof(c));
  c.kind = GPUHAL_COLLECTIVE_ALL_REDUCE;
  c.type = GPUHAL_ELEMENT_FLOAT32;
  c.op = GPUHAL_REDUCTION_SUM;
  c.send = gpuhal_ref_buffer(live, 0);
  c.recv = gpuhal_ref_buffer(live, 128);
  c.count = 4;
  cb = NULL;
  TU_CHECK_OK(gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  SH_STALE(gpuhal_cmd_collective(cb, stale, &c), "channel");
  gpuhal_command_buffer_release(cb);
  gpuhal_channel_retain(stale);
  gpuhal_channel_release(stale);
  gpuhal_buffer_release(live);
  sh_close(&f);
}

/* Drivers with the default allocator live in one process-wide pool. */
TU_TEST(stale_driver) {
  gpuhal_driver_t* stale = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_channel_t* channel = NULL;
  gpuhal_channel_id_t id;
  gpuhal_device_info_t info;
  int count = 0, i;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &stale));
  gpuhal_driver_release(stale);
  for (i = 0; i < SH_DISTANCE; ++i) {
    gpuhal_driver_t* d = NULL;
    TU_REQUIRE_OK(gpuhal_driver_create(NULL, &d));
    gpuhal_driver_release(d);
  }
  SH_STALE(gpuhal_driver_device_count(stale, &count), "driver");
  SH_STALE(gpuhal_driver_device_info(stale, 0, &info), "driver");
  SH_STALE(gpuhal_device_create(stale, 0, NULL, &device), "driver");
  SH_STALE(gpuhal_semaphore_create(stale, 0, &s), "driver");
  TU_CHECK_STATUS(gpuhal_channel_id_create(stale, &id), GPUHAL_STATUS_INVALID_ARGUMENT, "already released");
  TU_CHECK_STATUS(gpuhal_channel_create_local(stale, 1, &device, &channel), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "already released");
  TU_CHECK_EQ_INT(gpuhal_driver_has_feature(stale, GPUHAL_FEATURE_NCCL), 0);
  TU_CHECK(strcmp(gpuhal_driver_cuda_library(stale), "") == 0);
  TU_CHECK_EQ_INT(gpuhal_driver_trace_enabled(stale), 0);
  TU_CHECK(device == NULL && s == NULL && channel == NULL);
  gpuhal_driver_retain(stale);
  gpuhal_driver_release(stale);
}

/* A driver with the application's allocator is caught too: its object does not go back to
 * that allocator (ASan reported a read of freed memory here before). */
static int sh_user_allocs = 0;
static void* sh_user_alloc(size_t size, void* user) {
  (void)user;
  __atomic_add_fetch(&sh_user_allocs, 1, __ATOMIC_RELAXED);
  return malloc(size);
}
static void sh_user_free(void* p, void* user) {
  (void)user;
  if (p) __atomic_sub_fetch(&sh_user_allocs, 1, __ATOMIC_RELAXED);
  free(p);
}
TU_TEST(stale_driver_with_user_allocator) {
  gpuhal_driver_options_t options;
  gpuhal_driver_t* stale = NULL;
  gpuhal_semaphore_t* s = NULL;
  int count = 0, i;
  memset(&options, 0, sizeof(options));
  options.allocator.alloc = sh_user_alloc;
  options.allocator.free = sh_user_free;
  TU_REQUIRE_OK(gpuhal_driver_create(&options, &stale));
  gpuhal_driver_release(stale);
  TU_CHECK_EQ_INT(__atomic_load_n(&sh_user_allocs, __ATOMIC_RELAXED), 0); /* all it allocated, it freed */
  SH_STALE(gpuhal_driver_device_count(stale, &count), "driver");
  SH_STALE(gpuhal_semaphore_create(stale, 0, &s), "driver");
  for (i = 0; i < 64; ++i) { /* new drivers of the same allocator do not take the stale one's place */
    gpuhal_driver_t* d = NULL;
    TU_REQUIRE_OK(gpuhal_driver_create(&options, &d));
    TU_CHECK(d != stale);
    gpuhal_driver_release(d);
  }
  SH_STALE(gpuhal_driver_device_count(stale, &count), "driver");
  TU_CHECK(s == NULL);
}

/* ---- the memory kept for this is bounded ---- */

typedef struct sh_counting_s {
  int64_t allocs;
} sh_counting_t;
static void* sh_count_alloc(size_t size, void* user) {
  __atomic_add_fetch(&((sh_counting_t*)user)->allocs, 1, __ATOMIC_RELAXED);
  return malloc(size);
}
static void sh_count_free(void* p, void* user) {
  (void)user;
  free(p);
}
static int64_t sh_allocs(sh_counting_t* c) { return __atomic_load_n(&c->allocs, __ATOMIC_RELAXED); }

/* A released semaphore is caught through GPUHAL_HANDLE_REUSE_DISTANCE later releases of
 * its type; from then on released objects are reused, so a steady create/release cycle
 * allocates nothing (the memory held stays at the distance). */
TU_TEST(released_objects_are_reused_after_the_distance) {
  gpuhal_driver_options_t options;
  sh_counting_t counting;
  gpuhal_driver_t* driver = NULL;
  gpuhal_semaphore_t* stale = NULL;
  uint64_t value = 0;
  int64_t before;
  int i;
  memset(&options, 0, sizeof(options));
  memset(&counting, 0, sizeof(counting));
  options.allocator.alloc = sh_count_alloc;
  options.allocator.free = sh_count_free;
  options.allocator.user = &counting;
  TU_REQUIRE_OK(gpuhal_driver_create(&options, &driver));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &stale));
  gpuhal_semaphore_release(stale);
  before = sh_allocs(&counting);
  for (i = 0; i < SH_DISTANCE; ++i) {
    gpuhal_semaphore_t* s = NULL;
    TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &s));
    gpuhal_semaphore_release(s);
  }
  TU_CHECK_EQ_INT(sh_allocs(&counting) - before, SH_DISTANCE); /* one new object each */
  SH_STALE(gpuhal_semaphore_query(stale, &value), "semaphore");
  before = sh_allocs(&counting);
  for (i = 0; i < 1000; ++i) {
    gpuhal_semaphore_t* s = NULL;
    TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &s));
    gpuhal_semaphore_release(s);
  }
  TU_CHECK_EQ_INT(sh_allocs(&counting) - before, 0);
  gpuhal_driver_release(driver); /* frees the pool: LSan and the count check it */
}

TU_MAIN(TU_CASE(stale_semaphore), TU_CASE(stale_buffer), TU_CASE(released_while_gpuhal_holds_it),
        TU_CASE(stale_alloca_buffer), TU_CASE(stale_command_buffer), TU_CASE(stale_executable_and_kernel),
        TU_CASE(stale_device), TU_CASE(stale_channel), TU_CASE(stale_driver), TU_CASE(stale_driver_with_user_allocator),
        TU_CASE(released_objects_are_reused_after_the_distance))
