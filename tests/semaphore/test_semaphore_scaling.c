/* How a semaphore's cost grows with what waits on it, by count (GPUHAL__COUNT steps), never
 * by time:
 *
 *  1. queued waits on thousands of distinct values of one semaphore, registered in shuffled
 *     order and released one signal at a time: O(n log n) key comparisons in all (a sorted
 *     list searched per registration made it O(n^2) under the semaphore's lock), and each
 *     runs only once its value is reached;
 *  2. a host wait on thousands of distinct values of one semaphore that times out: its
 *     registrations and their removal stay O(n log n) too;
 *  3. a zero-timeout wait (ALL, ANY) over hundreds of entries whose work is in flight looks
 *     at each entry a bounded number of times (a look over the whole list per submitted entry
 *     made it O(n^2) lock acquisitions).
 *
 * CTest runs it on the memop path and, as test_semaphore_scaling_events, on the event path. */
#define TU_COUNT_WORK 1
#include "test_internals.h"

#include "test_util.h"

#define SS_WAIT_S 60

static gpuhal_timeout_t ss_seconds(int s) { return gpuhal_timeout_relative_ns((int64_t)s * 1000000000ll); }

static unsigned long long ss_log2(unsigned long long n) {
  unsigned long long bits = 0;
  while (n > 1) {
    n >>= 1;
    bits++;
  }
  return bits + 1;
}

/* The values 1..n in an order fixed by `seed` (a plain LCG: the same on every platform). */
static void ss_shuffled(uint64_t* values, uint32_t n, uint32_t seed) {
  uint32_t i;
  for (i = 0; i < n; ++i) values[i] = i + 1;
  for (i = n - 1; i > 0; --i) {
    uint32_t j, t;
    seed = seed * 1664525u + 1013904223u;
    j = (seed >> 8) % (i + 1);
    t = (uint32_t)values[i];
    values[i] = values[j];
    values[j] = t;
  }
}

/* ---- 1. queued waits registered in shuffled order ---- */
enum { SS_WAITS = 4000 };

static gpuhal_semaphore_t* ss_gate;
static uint32_t ss_ran, ss_early;

/* A host call that waited for gate >= its value: it must see the value reached. */
static gpuhal_status_t ss_check_reached(void* user) {
  uint64_t value = 0;
  gpuhal_status_t st = gpuhal_semaphore_query(ss_gate, &value);
  if (st || value < (uint64_t)(uintptr_t)user) __atomic_add_fetch(&ss_early, 1u, __ATOMIC_SEQ_CST);
  gpuhal_status_free(st);
  __atomic_add_fetch(&ss_ran, 1u, __ATOMIC_SEQ_CST);
  return NULL;
}

TU_TEST(queued_waits_in_shuffled_order) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  uint64_t* values = (uint64_t*)malloc(sizeof(uint64_t) * SS_WAITS);
  unsigned long long compares, bound;
  uint32_t i;
  TU_REQUIRE(values != NULL);
  if (!tu_open_device(&driver, &device, 0, NULL)) {
    free(values);
    return;
  }
  ss_ran = ss_early = 0;
  ss_shuffled(values, SS_WAITS, 7);
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &ss_gate));
  tu_count_watch("order_compare");
  /* Host calls never wait on the GPU: each registers a waiter on the gate. */
  for (i = 0; i < SS_WAITS; ++i)
    TU_CHECK_OK(gpuhal_queue_host_call(device, 0, gpuhal_semaphore_list_one(&ss_gate, &values[i]),
                                       gpuhal_semaphore_list_empty(), ss_check_reached, (void*)(uintptr_t)values[i]));
  for (i = 1; i <= SS_WAITS; ++i) TU_CHECK_OK(gpuhal_semaphore_signal(ss_gate, i));
  TU_CHECK_OK(gpuhal_device_wait_idle(device, ss_seconds(SS_WAIT_S)));
  compares = tu_counted();
  tu_count_watch(NULL);
  TU_CHECK_EQ_INT(__atomic_load_n(&ss_ran, __ATOMIC_SEQ_CST), SS_WAITS);
  TU_CHECK_EQ_INT(__atomic_load_n(&ss_early, __ATOMIC_SEQ_CST), 0);
  /* A sorted list searched from its end costs about n^2/4 steps here (4 million). */
  bound = 8ull * SS_WAITS * ss_log2(SS_WAITS);
  fprintf(stderr, "  %u waits: %llu key comparisons (bound %llu)\n", (unsigned)SS_WAITS, compares, bound);
  TU_CHECK(compares > 0); /* the count is live */
  TU_CHECK(compares <= bound);
  gpuhal_semaphore_release(ss_gate);
  ss_gate = NULL;
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  free(values);
}

/* ---- 2. a host wait on thousands of values that times out ---- */
TU_TEST(host_wait_on_many_values_times_out) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_semaphore_t** list = (gpuhal_semaphore_t**)malloc(sizeof(*list) * SS_WAITS);
  uint64_t* values = (uint64_t*)malloc(sizeof(uint64_t) * SS_WAITS);
  gpuhal_semaphore_list_t all;
  unsigned long long compares, bound;
  uint32_t i;
  TU_REQUIRE(list && values);
  TU_CHECK_OK(gpuhal_driver_create(NULL, &driver));
  TU_REQUIRE(driver);
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s));
  ss_shuffled(values, SS_WAITS, 11);
  for (i = 0; i < SS_WAITS; ++i) list[i] = s;
  all.count = SS_WAITS;
  all.semaphores = list;
  all.values = values;
  tu_count_watch("order_compare");
  /* Long enough to register every entry (that comes before the first timeout check). */
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, all, gpuhal_timeout_relative_ns(200000000)),
                  GPUHAL_STATUS_DEADLINE_EXCEEDED, "timeout");
  compares = tu_counted();
  tu_count_watch(NULL);
  bound = 8ull * SS_WAITS * ss_log2(SS_WAITS);
  fprintf(stderr, "  %u registrations and removals: %llu key comparisons (bound %llu)\n", (unsigned)SS_WAITS, compares,
          bound);
  TU_CHECK(compares > 0);
  TU_CHECK(compares <= bound);
  /* Every registration is gone: the semaphore still signals and waits as before. */
  TU_CHECK_OK(gpuhal_semaphore_signal(s, SS_WAITS));
  TU_CHECK_OK(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, all, gpuhal_timeout_immediate()));
  gpuhal_semaphore_release(s);
  gpuhal_driver_release(driver);
  free(list);
  free(values);
}

/* ---- 3. zero-timeout waits over entries in flight ---- */
enum { SS_ENTRIES = 512 };

/* Zero-timeout waits (`mode`) over `all`, whose work is all in flight: each must time out
 * after a bounded number of looks per entry. */
static void ss_poll_in_flight(gpuhal_wait_mode_t mode, gpuhal_semaphore_list_t all) {
  unsigned long long looks;
  int k;
  tu_count_watch("semaphore_check");
  for (k = 0; k < 4; ++k)
    TU_CHECK_STATUS(gpuhal_semaphores_wait(mode, all, gpuhal_timeout_immediate()), GPUHAL_STATUS_DEADLINE_EXCEEDED,
                    "timeout");
  looks = tu_counted() / 4;
  tu_count_watch(NULL);
  /* Today 3 per entry (a look, a look that takes its event, and one after the poll); a look
   * over the whole list per entry in flight made it about n^2/2 (131 thousand here). */
  fprintf(stderr, "  %s over %u in flight: %llu looks per wait\n", mode == GPUHAL_WAIT_ALL ? "ALL" : "ANY",
          (unsigned)all.count, looks);
  TU_CHECK(looks >= all.count); /* the count is live */
  TU_CHECK(looks <= 4ull * all.count);
}

/* What waits over `all` (in flight) and one more entry decide: a failed one fails ALL and,
 * while none is reached, ANY, with its cause; a reached one satisfies ANY; a timed wait
 * runs out. */
static void ss_in_flight_outcomes(gpuhal_driver_t* driver, gpuhal_semaphore_list_t all) {
  gpuhal_semaphore_t** more = (gpuhal_semaphore_t**)malloc(sizeof(*more) * (all.count + 1));
  uint64_t* values = (uint64_t*)malloc(sizeof(uint64_t) * (all.count + 1));
  gpuhal_semaphore_t *bad = NULL, *reached = NULL;
  gpuhal_semaphore_list_t l;
  TU_REQUIRE(more && values);
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &bad));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 1, &reached));
  gpuhal_semaphore_fail(bad, gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "scaling test cause"));
  memcpy(more, all.semaphores, sizeof(*more) * all.count);
  memcpy(values, all.values, sizeof(uint64_t) * all.count);
  values[all.count] = 1;
  l.count = all.count + 1;
  l.semaphores = more;
  l.values = values;
  more[all.count] = bad;
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, l, gpuhal_timeout_immediate()), GPUHAL_STATUS_DATA_LOSS,
                  "scaling test cause");
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, l, gpuhal_timeout_immediate()), GPUHAL_STATUS_DATA_LOSS,
                  "scaling test cause");
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, l, gpuhal_timeout_relative_ns(20000000)),
                  GPUHAL_STATUS_DATA_LOSS, "scaling test cause");
  more[all.count] = reached;
  TU_CHECK_OK(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, l, gpuhal_timeout_immediate()));
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, l, gpuhal_timeout_relative_ns(20000000)),
                  GPUHAL_STATUS_DEADLINE_EXCEEDED, "timeout");
  gpuhal_semaphore_release(bad);
  gpuhal_semaphore_release(reached);
  free(more);
  free(values);
}

TU_TEST(immediate_waits_over_work_in_flight) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* spin_flag = NULL;
  gpuhal_buffer_t* words = NULL;
  gpuhal_command_buffer_t* spin = NULL;
  gpuhal_semaphore_t* done[SS_ENTRIES];
  uint64_t ones[SS_ENTRIES];
  gpuhal_semaphore_list_t all;
  gpuhal_arg_t args[3];
  uint32_t i, *p;
  if (!tu_open_device(&driver, &device, 0, NULL)) return;
  TU_CHECK_OK(tu_load_kernel(device, "spin_flag", &exe, &spin_flag));
  TU_CHECK_OK(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_HOST_PINNED, 8, &words));
  TU_REQUIRE(spin_flag && words);
  p = (uint32_t*)gpuhal_buffer_host_pointer(words);
  p[0] = p[1] = 0;
  args[0] = gpuhal_arg_buffer(words, 0);
  args[1] = gpuhal_arg_buffer(words, 4);
  args[2] = gpuhal_arg_u64(60000000); /* bound: 60 s */
  TU_CHECK_OK(gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &spin));
  TU_CHECK_OK(gpuhal_command_buffer_begin(spin));
  TU_CHECK_OK(gpuhal_cmd_dispatch(spin, spin_flag, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args));
  TU_CHECK_OK(gpuhal_command_buffer_end(spin));
  /* The spin holds the queue; the signals behind it are submitted (issued, in flight). */
  TU_CHECK_OK(
      gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), spin, NULL));
  for (i = 0; i < SS_ENTRIES; ++i) {
    ones[i] = 1;
    done[i] = NULL;
    TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &done[i]));
    TU_CHECK_OK(gpuhal_queue_execute(device, 0, gpuhal_semaphore_list_empty(),
                                     gpuhal_semaphore_list_one(&done[i], &ones[i]), NULL, NULL));
  }
  all.count = SS_ENTRIES;
  all.semaphores = done;
  all.values = ones;
  ss_poll_in_flight(GPUHAL_WAIT_ALL, all);
  ss_poll_in_flight(GPUHAL_WAIT_ANY, all);
  ss_in_flight_outcomes(driver, all);
  __atomic_store_n(&p[0], 1u, __ATOMIC_SEQ_CST);
  TU_CHECK_OK(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, all, ss_seconds(SS_WAIT_S)));
  TU_CHECK_EQ_INT(__atomic_load_n(&p[1], __ATOMIC_SEQ_CST), 1); /* let go, not timed out */
  TU_CHECK_OK(gpuhal_device_wait_idle(device, ss_seconds(SS_WAIT_S)));
  for (i = 0; i < SS_ENTRIES; ++i) gpuhal_semaphore_release(done[i]);
  gpuhal_command_buffer_release(spin);
  gpuhal_buffer_release(words);
  gpuhal_executable_release(exe);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_MAIN(TU_CASE(queued_waits_in_shuffled_order), TU_CASE(host_wait_on_many_values_times_out),
        TU_CASE(immediate_waits_over_work_in_flight))
