/* How the queue's cost grows with the work it holds, by count (GPUHAL__COUNT steps), never
 * by time:
 *
 *  1. one host signal releasing thousands of queued operations at once: the pump resolves
 *     them GPUHAL__PUMP_ISSUE_BATCH at a time in the order they became pending, with
 *     O(N log N) key comparisons in all (a sort of every remaining one per batch made it
 *     O(N^2 log N)); they still run in submission order.
 *
 *  2. a pending report of more operations than it copies (GPUHAL__REPORT_OPS_MAX, lowered
 *     here from 2^18 so that the test stays small): it counts the rest, and writes nothing
 *     past its room (ASan in CI).
 *
 * CTest runs it on the memop path and, as test_queue_scaling_events, on the event path. */
#define TU_COUNT_WORK 1
#define GPUHAL__REPORT_OPS_MAX 512
#include "test_internals.h"

#include "test_queue_util.h"

#define QS_WAIT_S 60

static unsigned long long qs_log2(unsigned long long n) {
  unsigned long long bits = 0;
  while (n > 1) {
    n >>= 1;
    bits++;
  }
  return bits + 1;
}

/* ---- 1. one signal releases thousands ---- */
enum { QS_MANY = 4000 };

static uint32_t qs_ran;            /* host calls run so far */
static uint32_t qs_order[QS_MANY]; /* which call ran n-th */

static gpuhal_status_t qs_record(void* user) {
  uint32_t slot = __atomic_fetch_add(&qs_ran, 1u, __ATOMIC_SEQ_CST);
  if (slot < QS_MANY) qs_order[slot] = (uint32_t)(uintptr_t)user;
  return NULL;
}

TU_TEST(one_signal_releases_thousands) {
  qt_fixture_t f;
  gpuhal_semaphore_t *gate = NULL, *done = NULL;
  uint64_t one = 1, last = QS_MANY;
  unsigned long long compares, bound;
  uint32_t i, in_order = 1;
  if (!qt_open(&f, 1, NULL)) TU_SKIP("no device");
  gate = qc_semaphore_new(f.driver);
  done = qc_semaphore_new(f.driver);
  TU_REQUIRE(gate && done);
  /* Every one waits for the gate; each signals `done` to its own number, so the last value
   * says all ran. Host calls, so that their order shows the issue order (one queue). */
  for (i = 0; i < QS_MANY; ++i) {
    uint64_t value = i + 1;
    TU_CHECK_OK(gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                       gpuhal_semaphore_list_one(&done, &value), qs_record, (void*)(uintptr_t)i));
  }
  qc_sleep_ms(10); /* all pending and registered on the gate */
  tu_count_watch("order_compare");
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, last, qt_seconds(QS_WAIT_S)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QS_WAIT_S)));
  compares = tu_counted();
  tu_count_watch(NULL);
  TU_CHECK_EQ_INT(__atomic_load_n(&qs_ran, __ATOMIC_SEQ_CST), QS_MANY);
  for (i = 0; i < QS_MANY; ++i) in_order &= qs_order[i] == i;
  TU_CHECK(in_order);
  /* O(N log N) with room to spare; a sort of the remainder per batch of 32 counts about
   * N^2/64 * log2 N (over 2.5 million here). */
  bound = 8ull * QS_MANY * qs_log2(QS_MANY);
  fprintf(stderr, "  %u released: %llu key comparisons (bound %llu)\n", (unsigned)QS_MANY, compares, bound);
  TU_CHECK(compares > 0); /* the count is live */
  TU_CHECK(compares <= bound);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done);
  qt_close(&f);
}

/* ---- 2. a report of more operations than it holds ---- */
enum { QS_REPORTED = 600 };

TU_TEST(a_report_counts_what_it_cannot_hold) {
  qt_fixture_t f;
  gpuhal_semaphore_t *gate = NULL, *done = NULL;
  uint64_t one = 1, last = QS_REPORTED;
  char line[120];
  size_t length = 0;
  char* text;
  uint32_t i;
  if (!qt_open(&f, 1, NULL)) TU_SKIP("no device");
  gate = qc_semaphore_new(f.driver);
  done = qc_semaphore_new(f.driver);
  TU_REQUIRE(gate && done);
  for (i = 0; i < QS_REPORTED; ++i) {
    uint64_t value = i + 1;
    TU_CHECK_OK(gpuhal_queue_host_call(f.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                       gpuhal_semaphore_list_one(&done, &value), qt_host_fn_nop, NULL));
  }
  qc_sleep_ms(10); /* all pending */
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, NULL, 0, &length));
  text = (char*)malloc(length + 1);
  TU_REQUIRE(text != NULL);
  TU_CHECK_OK(gpuhal_driver_report_pending(f.driver, text, length + 1, NULL));
  snprintf(line, sizeof(line), "and %u operations not copied\n", (unsigned)(QS_REPORTED - GPUHAL__REPORT_OPS_MAX));
  TU_CHECK_STR_CONTAINS(text, line);
  snprintf(line, sizeof(line), "    #%u host_call: waiting\n", (unsigned)GPUHAL__REPORT_OPS_MAX);
  TU_CHECK_STR_CONTAINS(text, line);
  free(text);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, last, qt_seconds(QS_WAIT_S)));
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QS_WAIT_S)));
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done);
  qt_close(&f);
}

TU_MAIN(TU_CASE(one_signal_releases_thousands), TU_CASE(a_report_counts_what_it_cannot_hold))
