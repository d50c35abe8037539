/* Device-side control flow (gpuhal_cmd_begin_if / _while, conditional graph nodes): a
 * WHILE that runs until a device-computed residual is small (iteration count checked), an
 * IF decided by device data, regions nested, late-bound arguments inside a loop rebound
 * between executes, a long counted loop executed again and again, every bad input named,
 * STREAM and old drivers refused naming what is needed. On softcuda (the graph runner
 * runs the bodies, the twins set the conditions) and on a GPU. The kernels are
 * tests/kernels/conditional. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "gpuhal.h"
#include "test_util.h"

#define CD_TIMEOUT_NS 30000000000ll

typedef struct cd_fixture {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe;
  gpuhal_kernel_t* step;  /* cond_residual_step(float* residual, unsigned* iterations, float tolerance, handle) */
  gpuhal_kernel_t* set;   /* cond_set_from(const unsigned* flag, unsigned mask, handle) */
  gpuhal_kernel_t* add;   /* cond_add(unsigned* out, unsigned value) */
  gpuhal_kernel_t* count; /* cond_count_down(unsigned* remaining, unsigned* trips, handle) */
  gpuhal_buffer_t* state; /* [0] residual (float), [1] iterations, [2] flag, [3] out, [4] remaining, [5] trips */
} cd_fixture;

enum { CD_RESIDUAL = 0, CD_ITERATIONS = 4, CD_FLAG = 8, CD_OUT = 12, CD_REMAINING = 16, CD_TRIPS = 20, CD_SIZE = 64 };

static void cd_close(cd_fixture* t) {
  if (t->device) gpuhal_status_free(gpuhal_device_wait_idle(t->device, gpuhal_timeout_relative_ns(CD_TIMEOUT_NS)));
  gpuhal_buffer_release(t->state);
  gpuhal_executable_release(t->exe);
  gpuhal_device_release(t->device);
  gpuhal_driver_release(t->driver);
  memset(t, 0, sizeof(*t));
}

/* 1: ready; 0: the case is done (skipped, or failed). */
static int cd_open(cd_fixture* t) {
  gpuhal_status_t st;
  memset(t, 0, sizeof(*t));
  if (!tu_open_device(&t->driver, &t->device, 0, "")) return 0;
  st = tu_load_kernel(t->device, "conditional", &t->exe, NULL);
  if (!st) st = gpuhal_executable_kernel(t->exe, "cond_residual_step", &t->step);
  if (!st) st = gpuhal_executable_kernel(t->exe, "cond_set_from", &t->set);
  if (!st) st = gpuhal_executable_kernel(t->exe, "cond_add", &t->add);
  if (!st) st = gpuhal_executable_kernel(t->exe, "cond_count_down", &t->count);
  if (!st) st = gpuhal_buffer_allocate(t->device, GPUHAL_MEMORY_DEVICE, CD_SIZE, &t->state);
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "fixture: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
    cd_close(t);
    return 0;
  }
  return 1;
}

/* Records the state's reset: residual, iterations 0, flag, out 0, remaining, trips 0. */
static gpuhal_status_t cd_reset(gpuhal_command_buffer_t* cb, gpuhal_buffer_t* state, float residual, unsigned flag,
                                unsigned remaining) {
  unsigned char bytes[24];
  gpuhal_status_t st;
  memset(bytes, 0, sizeof(bytes));
  memcpy(bytes + CD_RESIDUAL, &residual, 4);
  memcpy(bytes + CD_FLAG, &flag, 4);
  memcpy(bytes + CD_REMAINING, &remaining, 4);
  st = gpuhal_cmd_update(cb, bytes, gpuhal_ref_buffer(state, 0), sizeof(bytes));
  if (!st) st = gpuhal_cmd_barrier(cb);
  return st;
}

static unsigned cd_read_u32(gpuhal_buffer_t* state, uint64_t offset) {
  unsigned v = 0xFFFFFFFFu;
  gpuhal_status_t st = gpuhal_buffer_read(state, offset, &v, 4);
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "read: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
  }
  return v;
}

/* Records the residual loop: WHILE (loop) { step(residual, iterations, tolerance, loop) }. */
static gpuhal_status_t cd_record_residual_loop(cd_fixture* t, gpuhal_command_buffer_t* cb, gpuhal_arg_t residual,
                                               gpuhal_arg_t iterations, float tolerance) {
  gpuhal_condition_t loop;
  gpuhal_arg_t args[4];
  gpuhal_status_t st = gpuhal_command_buffer_condition_create(cb, 1, &loop);
  if (!st) st = gpuhal_cmd_begin_while(cb, loop);
  args[0] = residual;
  args[1] = iterations;
  args[2] = gpuhal_arg_f32(tolerance);
  args[3] = gpuhal_arg_condition(loop);
  if (!st) st = gpuhal_cmd_dispatch(cb, t->step, gpuhal_dim3(1, 1, 1), gpuhal_dim3(32, 1, 1), 0, 4, args);
  if (!st) st = gpuhal_cmd_end_region(cb);
  return st;
}

/* The iterations that halve 1.0 below 2^-k: k + 1. */
TU_TEST(while_runs_until_the_device_residual_is_small) {
  cd_fixture t;
  gpuhal_command_buffer_t* cb = NULL;
  int round;
  if (!cd_open(&t)) return;
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(cd_reset(cb, t.state, 1.0f, 0, 0));
  TU_CHECK_OK(cd_record_residual_loop(&t, cb, gpuhal_arg_buffer(t.state, CD_RESIDUAL),
                                      gpuhal_arg_buffer(t.state, CD_ITERATIONS), 1.0f / 1024.0f));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  /* the condition starts at its default (1) at every execute: the loop runs again in full */
  for (round = 0; round < 3 && !tu_state.failed; ++round) {
    TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, NULL));
    TU_CHECK_EQ_INT(cd_read_u32(t.state, CD_ITERATIONS), 11);
  }
  gpuhal_command_buffer_release(cb);
  cd_close(&t);
}

/* IF: the region runs when the device's flag says so; a WHILE whose condition starts at 0
 * runs zero times. */
TU_TEST(if_runs_its_region_only_when_the_device_says_so) {
  cd_fixture t;
  unsigned flag;
  if (!cd_open(&t)) return;
  for (flag = 0; flag < 4 && !tu_state.failed; ++flag) {
    gpuhal_command_buffer_t* cb = NULL;
    gpuhal_condition_t odd, never;
    gpuhal_arg_t set_args[3], add_args[2];
    TU_CHECK_OK(gpuhal_command_buffer_create(t.device, 0, 0, &cb));
    TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
    TU_CHECK_OK(cd_reset(cb, t.state, 0.0f, flag, 0));
    TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 0, &odd));
    TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 0, &never));
    set_args[0] = gpuhal_arg_buffer(t.state, CD_FLAG);
    set_args[1] = gpuhal_arg_u32(1);
    set_args[2] = gpuhal_arg_condition(odd);
    TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.set, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, set_args));
    TU_CHECK_OK(gpuhal_cmd_barrier(cb));
    add_args[0] = gpuhal_arg_buffer(t.state, CD_OUT);
    add_args[1] = gpuhal_arg_u32(5);
    TU_CHECK_OK(gpuhal_cmd_begin_if(cb, odd));
    TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.add, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 2, add_args));
    TU_CHECK_OK(gpuhal_cmd_end_region(cb));
    TU_CHECK_OK(gpuhal_cmd_barrier(cb));
    add_args[1] = gpuhal_arg_u32(1000);
    TU_CHECK_OK(gpuhal_cmd_begin_while(cb, never));
    TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.add, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 2, add_args));
    TU_CHECK_OK(gpuhal_cmd_end_region(cb));
    TU_CHECK_OK(gpuhal_command_buffer_end(cb));
    TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, NULL));
    TU_CHECK_EQ_INT(cd_read_u32(t.state, CD_OUT), (flag & 1) ? 5 : 0);
    gpuhal_command_buffer_release(cb);
  }
  cd_close(&t);
}

/* WHILE { step; IF (iterations odd) { out += 1 } }: the inner condition is made inside
 * the loop's region, set and read at every iteration. */
TU_TEST(regions_nest) {
  cd_fixture t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_condition_t loop, odd;
  gpuhal_arg_t step_args[4], set_args[3], add_args[2];
  int round;
  if (!cd_open(&t)) return;
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(cd_reset(cb, t.state, 1.0f, 0, 0));
  TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 1, &loop));
  TU_CHECK_OK(gpuhal_cmd_begin_while(cb, loop));
  step_args[0] = gpuhal_arg_buffer(t.state, CD_RESIDUAL);
  step_args[1] = gpuhal_arg_buffer(t.state, CD_ITERATIONS);
  step_args[2] = gpuhal_arg_f32(1.0f / 1024.0f);
  step_args[3] = gpuhal_arg_condition(loop);
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.step, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 4, step_args));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 0, &odd));
  set_args[0] = gpuhal_arg_buffer(t.state, CD_ITERATIONS);
  set_args[1] = gpuhal_arg_u32(1);
  set_args[2] = gpuhal_arg_condition(odd);
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.set, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, set_args));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_cmd_begin_if(cb, odd));
  add_args[0] = gpuhal_arg_buffer(t.state, CD_OUT);
  add_args[1] = gpuhal_arg_u32(1);
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.add, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 2, add_args));
  TU_CHECK_OK(gpuhal_cmd_end_region(cb));
  TU_CHECK_OK(gpuhal_cmd_end_region(cb));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  for (round = 0; round < 2 && !tu_state.failed; ++round) {
    TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, NULL));
    TU_CHECK_EQ_INT(cd_read_u32(t.state, CD_ITERATIONS), 11);
    TU_CHECK_EQ_INT(cd_read_u32(t.state, CD_OUT), 6); /* iterations 1, 3, 5, 7, 9, 11 */
  }
  gpuhal_command_buffer_release(cb);
  cd_close(&t);
}

/* A loop whose kernel takes binding slots: each execute rebinds them, and the loop's
 * node (inside the conditional body) is patched. */
TU_TEST(late_bound_arguments_inside_a_loop_are_rebound_at_every_execute) {
  cd_fixture t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_buffer_t* states[3] = {NULL, NULL, NULL};
  static const float starts[3] = {1.0f, 8.0f, 0.25f};
  static const int expected[3] = {11, 14, 9};
  int round;
  if (!cd_open(&t)) return;
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_REUSABLE, 1, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(cd_record_residual_loop(&t, cb, gpuhal_arg_slot(0, CD_RESIDUAL), gpuhal_arg_slot(0, CD_ITERATIONS),
                                      1.0f / 1024.0f));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  for (round = 0; round < 3; ++round) {
    unsigned char bytes[8];
    unsigned zero = 0;
    TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, CD_SIZE, &states[round]));
    memcpy(bytes, &starts[round], 4);
    memcpy(bytes + 4, &zero, 4);
    if (states[round]) TU_CHECK_OK(gpuhal_buffer_write(states[round], 0, bytes, sizeof(bytes)));
  }
  for (round = 0; round < 6 && !tu_state.failed; ++round) {
    gpuhal_buffer_t* bound = states[round % 3];
    gpuhal_binding_table_t table;
    unsigned char bytes[8];
    unsigned zero = 0;
    table.count = 1;
    table.buffers = &bound;
    table.offsets = NULL;
    memcpy(bytes, &starts[round % 3], 4);
    memcpy(bytes + 4, &zero, 4);
    TU_CHECK_OK(gpuhal_buffer_write(bound, 0, bytes, sizeof(bytes)));
    TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, &table));
    TU_CHECK_EQ_INT(cd_read_u32(bound, CD_ITERATIONS), expected[round % 3]);
  }
  gpuhal_command_buffer_release(cb);
  for (round = 0; round < 3; ++round) gpuhal_buffer_release(states[round]);
  cd_close(&t);
}

/* 1,000 device-side iterations per execute, 20 executes queued back to back, each
 * checked by its own copy of the counters. */
TU_TEST(a_long_counted_loop_runs_exactly_at_every_execute) {
  cd_fixture t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_buffer_t* results = NULL;
  gpuhal_semaphore_t* sem = NULL;
  gpuhal_condition_t loop;
  gpuhal_arg_t args[3];
  unsigned host[2 * 20];
  uint64_t value;
  int i;
  if (!cd_open(&t)) return;
  TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, sizeof(host), &results));
  TU_CHECK_OK(gpuhal_semaphore_create(t.driver, 0, &sem));
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_REUSABLE, 1, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  {
    unsigned init[2] = {1000, 0};
    TU_CHECK_OK(gpuhal_cmd_update(cb, init, gpuhal_ref_slot(0, 0), sizeof(init)));
  }
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 1, &loop));
  TU_CHECK_OK(gpuhal_cmd_begin_while(cb, loop));
  args[0] = gpuhal_arg_slot(0, 0);
  args[1] = gpuhal_arg_slot(0, 4);
  args[2] = gpuhal_arg_condition(loop);
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.count, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args));
  TU_CHECK_OK(gpuhal_cmd_end_region(cb));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  for (i = 0; i < 20 && !tu_state.failed; ++i) {
    gpuhal_binding_table_t table;
    uint64_t offset = (uint64_t)i * 8u, wait = (uint64_t)i, signal = (uint64_t)i + 1;
    table.count = 1;
    table.buffers = &results;
    table.offsets = &offset;
    TU_CHECK_OK(gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_one(&sem, &wait),
                                     gpuhal_semaphore_list_one(&sem, &signal), cb, &table));
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(sem, 20, gpuhal_timeout_relative_ns(CD_TIMEOUT_NS)));
  TU_CHECK_OK(gpuhal_semaphore_query(sem, &value));
  TU_CHECK(value == 20);
  TU_CHECK_OK(gpuhal_buffer_read(results, 0, host, sizeof(host)));
  for (i = 0; i < 20 && !tu_state.failed; ++i) {
    TU_CHECK_EQ_INT(host[2 * i], 0);
    TU_CHECK_EQ_INT(host[2 * i + 1], 1000);
  }
  gpuhal_command_buffer_release(cb);
  gpuhal_semaphore_release(sem);
  gpuhal_buffer_release(results);
  cd_close(&t);
}

/* Every rule, named; a refused call leaves the recording as it was. */
TU_TEST(bad_input_is_refused_naming_the_rule) {
  cd_fixture t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_condition_t top, inner, none, bogus;
  gpuhal_arg_t args[3];
  int depth;
  if (!cd_open(&t)) return;
  none.id = 0;
  bogus.id = 99;
  /* STREAM command buffers cannot loop on device values */
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_STATUS(gpuhal_command_buffer_condition_create(cb, 1, &top), GPUHAL_STATUS_UNIMPLEMENTED, "GRAPH");
  TU_CHECK(top.id == 0);
  TU_CHECK_STATUS(gpuhal_cmd_begin_while(cb, bogus), GPUHAL_STATUS_UNIMPLEMENTED, "STREAM");
  gpuhal_command_buffer_release(cb);

  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, 0, 0, &cb));
  TU_CHECK_STATUS(gpuhal_command_buffer_condition_create(cb, 1, &top), GPUHAL_STATUS_FAILED_PRECONDITION, "");
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_STATUS(gpuhal_command_buffer_condition_create(cb, 1, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "out_condition");
  TU_CHECK_STATUS(gpuhal_command_buffer_condition_create(NULL, 1, &top), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "command_buffer");
  TU_CHECK_STATUS(gpuhal_cmd_begin_if(cb, none), GPUHAL_STATUS_INVALID_ARGUMENT, "not a condition of this");
  TU_CHECK_STATUS(gpuhal_cmd_begin_if(cb, bogus), GPUHAL_STATUS_INVALID_ARGUMENT, "id 99");
  TU_CHECK_STATUS(gpuhal_cmd_end_region(cb), GPUHAL_STATUS_FAILED_PRECONDITION, "no region is open");
  TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 0, &top)); /* 0: the empty loop never runs */
  TU_CHECK_OK(gpuhal_cmd_begin_while(cb, top));
  TU_CHECK_STATUS(gpuhal_cmd_begin_if(cb, top), GPUHAL_STATUS_INVALID_ARGUMENT, "already controls");
  TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 0, &inner));
  /* a condition is set only from inside its own region */
  TU_CHECK_OK(gpuhal_cmd_end_region(cb));
  args[0] = gpuhal_arg_buffer(t.state, CD_FLAG);
  args[1] = gpuhal_arg_u32(1);
  args[2] = gpuhal_arg_condition(inner);
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.set, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "does not enclose this dispatch");
  args[2] = gpuhal_arg_condition(bogus);
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.set, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "args[2]");
  /* a region is begun where its condition was made */
  TU_CHECK_STATUS(gpuhal_cmd_begin_if(cb, inner), GPUHAL_STATUS_INVALID_ARGUMENT, "belongs to the region begun");
  /* nesting is bounded */
  for (depth = 0; depth < GPUHAL_REGION_DEPTH_MAX && !tu_state.failed; ++depth) {
    gpuhal_condition_t c;
    TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 0, &c));
    TU_CHECK_OK(gpuhal_cmd_begin_if(cb, c));
  }
  {
    gpuhal_condition_t c;
    TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 0, &c));
    TU_CHECK_STATUS(gpuhal_cmd_begin_if(cb, c), GPUHAL_STATUS_OUT_OF_RANGE, "GPUHAL_REGION_DEPTH_MAX");
  }
  /* an open region at end: refused, still recording */
  TU_CHECK_STATUS(gpuhal_command_buffer_end(cb), GPUHAL_STATUS_FAILED_PRECONDITION, "still open");
  for (depth = 0; depth < GPUHAL_REGION_DEPTH_MAX; ++depth) TU_CHECK_OK(gpuhal_cmd_end_region(cb));
  /* `inner` began no region: CUDA would refuse the graph, gpuhal says which condition */
  TU_CHECK_STATUS(gpuhal_command_buffer_end(cb), GPUHAL_STATUS_FAILED_PRECONDITION, "condition 2 controls no region");
  gpuhal_command_buffer_release(cb);
  /* the same regions, every condition used: 16 empty IFs nested, an empty WHILE that never runs */
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, 0, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 0, &top));
  TU_CHECK_OK(gpuhal_cmd_begin_while(cb, top));
  TU_CHECK_OK(gpuhal_cmd_end_region(cb));
  for (depth = 0; depth < GPUHAL_REGION_DEPTH_MAX && !tu_state.failed; ++depth) {
    gpuhal_condition_t c;
    TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 1, &c));
    TU_CHECK_OK(gpuhal_cmd_begin_if(cb, c));
  }
  for (depth = 0; depth < GPUHAL_REGION_DEPTH_MAX; ++depth) TU_CHECK_OK(gpuhal_cmd_end_region(cb));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, NULL));
  gpuhal_command_buffer_release(cb);
  cd_close(&t);
}

/* A WHILE whose condition nothing in it can set to 0 loops for ever on a GPU (until the
 * device is reset): refused at end, naming the region. Accepted as soon as a dispatch inside
 * it, at any depth, takes the condition. */
TU_TEST(a_while_that_could_never_end_is_refused) {
  cd_fixture t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_condition_t loop, other;
  gpuhal_arg_t args[3];
  int shape;
  if (!cd_open(&t)) return;
  for (shape = 0; shape < 4 && !tu_state.failed; ++shape) {
    TU_CHECK_OK(gpuhal_command_buffer_create(t.device, 0, 0, &cb));
    TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
    TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, shape == 2 ? 0 : 1, &loop));
    args[0] = gpuhal_arg_buffer(t.state, CD_FLAG);
    args[1] = gpuhal_arg_u32(0);
    args[2] = gpuhal_arg_condition(loop);
    if (shape == 2) /* set before the loop, by the loop's own level: may be non-zero on entry */
      TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.set, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args));
    TU_CHECK_OK(gpuhal_cmd_begin_while(cb, loop));
    if (shape == 1) { /* a dispatch in it, of another condition */
      TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 0, &other));
      TU_CHECK_OK(gpuhal_cmd_begin_if(cb, other));
      TU_CHECK_OK(gpuhal_cmd_end_region(cb));
      args[2] = gpuhal_arg_condition(other);
      TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.set, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args));
    }
    if (shape == 3) { /* stopped from inside a nested IF: accepted, and it ends */
      TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 1, &other));
      TU_CHECK_OK(gpuhal_cmd_begin_if(cb, other));
      TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.set, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args));
      TU_CHECK_OK(gpuhal_cmd_end_region(cb));
    }
    TU_CHECK_OK(gpuhal_cmd_end_region(cb));
    if (shape < 3) {
      TU_CHECK_STATUS(gpuhal_command_buffer_end(cb), GPUHAL_STATUS_FAILED_PRECONDITION,
                      "WHILE region begun by command");
      TU_CHECK_STATUS(gpuhal_command_buffer_end(cb), GPUHAL_STATUS_FAILED_PRECONDITION,
                      shape == 2 ? "a dispatch outside it sets it" : "its default is)");
    } else {
      TU_CHECK_OK(gpuhal_command_buffer_end(cb));
      TU_CHECK_OK(tu_execute_and_wait(t.driver, t.device, cb, NULL));
    }
    gpuhal_command_buffer_release(cb);
  }
  /* A top-level condition named inside a region: the message says where it belongs. */
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, 0, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 0, &loop));
  TU_CHECK_OK(gpuhal_command_buffer_condition_create(cb, 0, &other));
  TU_CHECK_OK(gpuhal_cmd_begin_while(cb, loop));
  TU_CHECK_STATUS(gpuhal_cmd_begin_if(cb, other), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "belongs to the top level, not to the region being recorded");
  gpuhal_command_buffer_release(cb);
  cd_close(&t);
}

/* Run in a child on softcuda playing a CUDA 12.2 driver: UNIMPLEMENTED naming the version. */
static int cd_old_driver_child(void) {
  cd_fixture t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_condition_t c;
  if (!cd_open(&t)) return 2;
  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, 0, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_STATUS(gpuhal_command_buffer_condition_create(cb, 1, &c), GPUHAL_STATUS_UNIMPLEMENTED,
                  "from CUDA driver 12.3 on; this driver is CUDA 12.2");
  gpuhal_command_buffer_release(cb);
  cd_close(&t);
  return tu_state.failed ? 1 : 0;
}

TU_TEST(an_old_driver_says_unimplemented_naming_its_version) {
  char self[4096];
  ssize_t n;
  pid_t pid;
  int status = 0, waited = 0;
  if (!tu_softcuda()) TU_SKIP("a real driver cannot play an older one");
  n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  TU_REQUIRE(n > 0);
  self[n] = 0;
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if (pid == 0) {
    setenv("SOFTCUDA_DRIVER_VERSION", "12020", 1);
    execl(self, self, "--old-driver-child", (char*)NULL);
    _exit(127);
  }
  TU_REQUIRE(pid > 0);
  while (waited < 60000 && waitpid(pid, &status, WNOHANG) == 0) {
    struct timespec ten_ms = {0, 10000000};
    nanosleep(&ten_ms, NULL);
    waited += 10;
  }
  if (waited >= 60000) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    TU_FAIL_AT(__FILE__, __LINE__, "the child did not finish in 60 s");
    return;
  }
  TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char** argv) {
  static const tu_case_t cases[] = {TU_CASE(while_runs_until_the_device_residual_is_small),
                                    TU_CASE(if_runs_its_region_only_when_the_device_says_so),
                                    TU_CASE(regions_nest),
                                    TU_CASE(late_bound_arguments_inside_a_loop_are_rebound_at_every_execute),
                                    TU_CASE(a_long_counted_loop_runs_exactly_at_every_execute),
                                    TU_CASE(bad_input_is_refused_naming_the_rule),
                                    TU_CASE(a_while_that_could_never_end_is_refused),
                                    TU_CASE(an_old_driver_says_unimplemented_naming_its_version)};
  if (argc == 2 && strcmp(argv[1], "--old-driver-child") == 0) return cd_old_driver_child();
  return tu_run(cases, (int)(sizeof(cases) / sizeof(cases[0])), argc, argv);
}
