/* Command buffers: the STREAM recorder (every command byte for byte, fills of every
 * pattern size, barriers, 1,000 executes with rotating binding tables, late-bound
 * queue_alloca buffers, transient buffers named by every kind of command: refused after
 * their dealloca, rebound through a slot, reused), record-time and execute-time
 * validation, and the built-in kernels' embedded PTX. The GRAPH recorder runs the same bodies in
 * test_command_buffer_graph.c. */
#include "test_internals.h"
#include "test_command_buffer_common.h"

#define STREAM GPUHAL_COMMAND_BUFFER_STREAM

TU_TEST(builtin_ptx_matches_checked_in_file) {
  gpuhal_allocator_t a = gpuhal__allocator_resolve(NULL);
  char* embedded = NULL;
  size_t embedded_size = 0, file_size = 0;
  char* file = cbt_read_file("gpuhal_builtin_fill.ptx", &file_size);
  TU_REQUIRE(file != NULL);
  TU_REQUIRE_OK(gpuhal__builtin_ptx_join(&a, &embedded, &embedded_size));
  TU_CHECK_EQ_INT(embedded_size, file_size);
  TU_CHECK(embedded_size == file_size && memcmp(embedded, file, file_size) == 0);
  TU_CHECK(embedded[embedded_size] == 0);
  gpuhal__free(&a, embedded);
  free(file);
}

TU_TEST(pattern_helpers) {
  unsigned char p8[8] = {7, 7, 7, 7, 7, 7, 7, 7};
  unsigned char p16[16] = {1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2};
  unsigned char p4[4] = {1, 2, 3, 4};
  uint64_t out[2];
  unsigned char bytes[16];
  int i;
  TU_CHECK_EQ_INT(gpuhal__pattern_reduce(p8, 8), 1);
  TU_CHECK_EQ_INT(gpuhal__pattern_reduce(p16, 16), 2);
  TU_CHECK_EQ_INT(gpuhal__pattern_reduce(p4, 4), 4);
  gpuhal__pattern_expand(p4, 4, out);
  memcpy(bytes, out, 16);
  for (i = 0; i < 16; ++i) TU_CHECK_EQ_INT(bytes[i], p4[i % 4]);
  TU_CHECK_EQ_INT(gpuhal__builtin_grid(1), 1);
  TU_CHECK(gpuhal__builtin_grid((uint64_t)1 << 40) == GPUHAL__BUILTIN_MAX_GRID);
}

TU_TEST(stream_commands_bytes) { body_commands_bytes(STREAM); }
TU_TEST(stream_fill_every_pattern) { body_fill_patterns(STREAM); }
TU_TEST(stream_barrier_orders) { body_barrier_orders(STREAM); }
TU_TEST(stream_reusable_1000_rotating_tables) { body_reusable_rotating(STREAM); }
TU_TEST(stream_late_bound_alloca) { body_late_alloca(STREAM); }
TU_TEST(stream_unordered_alloca_fails) { body_unordered_alloca_fails(STREAM); }
TU_TEST(stream_empty) { body_empty(STREAM); }
TU_TEST(stream_transient_after_dealloca) { body_transient_after_dealloca(STREAM); }
TU_TEST(stream_transient_dealloca_queued_first) { body_transient_dealloca_queued_first(STREAM); }
TU_TEST(stream_transient_through_slot) { body_transient_through_slot(STREAM); }
TU_TEST(stream_transient_reusable_named) { body_transient_reusable_named(STREAM); }

TU_TEST(execute_null_is_a_barrier) {
  cbt t;
  gpuhal_semaphore_t* a = NULL;
  gpuhal_semaphore_t* b = NULL;
  uint64_t one = 1, value = 0;
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &a));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &b));
  TU_CHECK_OK(gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_one(&a, &one),
                                   gpuhal_semaphore_list_one(&b, &one), NULL, NULL));
  TU_CHECK_OK(gpuhal_semaphore_query(b, &value));
  TU_CHECK_EQ_INT(value, 0);
  TU_CHECK_OK(gpuhal_semaphore_signal(a, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(b, 1, gpuhal_timeout_relative_ns(10000000000ll)));
  TU_CHECK_STATUS(
      gpuhal_queue_execute(t.device, 999, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), NULL, NULL),
      GPUHAL_STATUS_OUT_OF_RANGE, "gpuhal_queue_execute");
  TU_CHECK_STATUS(
      gpuhal_queue_execute(NULL, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), NULL, NULL),
      GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  gpuhal_semaphore_release(a);
  gpuhal_semaphore_release(b);
  cbt_close(&t);
}

TU_TEST(stream_validation) { body_validation(STREAM); }

/* A command buffer keeps what it names alive: release everything but the command buffer,
 * then run it. */
TU_TEST(command_buffer_retains_resources) {
  cbt t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_buffer_t* buf = NULL;
  gpuhal_arg_t args[3];
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 256, &buf));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, STREAM, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  args[0] = gpuhal_arg_buffer(buf, 0);
  args[1] = gpuhal_arg_u32(3);
  args[2] = gpuhal_arg_u32(64);
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.fill_u32, gpuhal_dim3(1, 1, 1), gpuhal_dim3(64, 1, 1), 0, 3, args));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  gpuhal_buffer_release(buf);
  gpuhal_executable_release(t.exe[2]); /* fill_u32's */
  t.exe[2] = NULL;
  TU_CHECK_OK(cbt_run(&t, cb, NULL));
  gpuhal_command_buffer_release(cb);
  cbt_close(&t);
}

TU_MAIN(TU_CASE(builtin_ptx_matches_checked_in_file), TU_CASE(pattern_helpers), TU_CASE(stream_commands_bytes),
        TU_CASE(stream_fill_every_pattern), TU_CASE(stream_barrier_orders),
        TU_CASE(stream_reusable_1000_rotating_tables), TU_CASE(stream_late_bound_alloca),
        TU_CASE(stream_unordered_alloca_fails), TU_CASE(stream_empty), TU_CASE(execute_null_is_a_barrier),
        TU_CASE(stream_validation), TU_CASE(command_buffer_retains_resources), TU_CASE(stream_transient_after_dealloca),
        TU_CASE(stream_transient_dealloca_queued_first), TU_CASE(stream_transient_through_slot),
        TU_CASE(stream_transient_reusable_named))
