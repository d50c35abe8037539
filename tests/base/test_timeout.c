/* Timeouts: immediate never blocks, relative and absolute deadlines, infinite, overflow. */
#include "test_internals.h"
#include "test_util.h"

TU_TEST(immediate) {
  (void)tu_softcuda; /* test_util.h defines it static; this test does not need it */
  gpuhal_timeout_t t = gpuhal_timeout_immediate();
  TU_CHECK(gpuhal__timeout_is_immediate(t));
  TU_CHECK(!gpuhal__timeout_is_infinite(t));
  TU_CHECK(gpuhal__timeout_expired(t));
  /* Zero and negative relative timeouts are immediate. */
  TU_CHECK(gpuhal__timeout_is_immediate(gpuhal_timeout_relative_ns(0)));
  TU_CHECK(gpuhal__timeout_is_immediate(gpuhal_timeout_relative_ns(-5)));
  TU_CHECK(gpuhal__timeout_is_immediate(gpuhal_timeout_relative_ns(INT64_MIN)));
}

/* A wait with an immediate timeout returns at once, even with nobody to signal. */
TU_TEST(immediate_wait_never_blocks) {
  gpuhal__mutex_t m;
  gpuhal__cond_t c;
  int64_t start, elapsed;
  int woke;
  gpuhal__mutex_init(&m);
  gpuhal__cond_init(&c);
  start = gpuhal_now_ns();
  gpuhal__mutex_lock(&m);
  woke = gpuhal__cond_wait_until(&c, &m, gpuhal_timeout_immediate());
  gpuhal__mutex_unlock(&m);
  elapsed = gpuhal_now_ns() - start;
  TU_CHECK(woke == 0);
  TU_CHECK(elapsed < 50 * 1000 * 1000);
  gpuhal__cond_destroy(&c);
  gpuhal__mutex_destroy(&m);
}

TU_TEST(relative) {
  int64_t before = gpuhal_now_ns();
  gpuhal_timeout_t t = gpuhal_timeout_relative_ns(20 * 1000 * 1000);
  int64_t after = gpuhal_now_ns();
  gpuhal__mutex_t m;
  gpuhal__cond_t c;
  int64_t start;
  TU_CHECK(t.deadline_ns >= before + 20 * 1000 * 1000);
  TU_CHECK(t.deadline_ns <= after + 20 * 1000 * 1000);
  TU_CHECK(!gpuhal__timeout_is_immediate(t) && !gpuhal__timeout_is_infinite(t));
  TU_CHECK(!gpuhal__timeout_expired(t));
  /* A timed wait really waits until the deadline. */
  gpuhal__mutex_init(&m);
  gpuhal__cond_init(&c);
  start = gpuhal_now_ns();
  gpuhal__mutex_lock(&m);
  while (gpuhal__cond_wait_until(&c, &m, t)) {
  }
  gpuhal__mutex_unlock(&m);
  TU_CHECK(gpuhal_now_ns() >= t.deadline_ns);
  TU_CHECK(gpuhal_now_ns() - start < 2000LL * 1000 * 1000);
  TU_CHECK(gpuhal__timeout_expired(t));
  gpuhal__cond_destroy(&c);
  gpuhal__mutex_destroy(&m);
}

TU_TEST(deadline) {
  int64_t now = gpuhal_now_ns();
  gpuhal_timeout_t past = gpuhal_timeout_deadline_ns(now - 1);
  gpuhal_timeout_t future = gpuhal_timeout_deadline_ns(now + 60LL * 1000 * 1000 * 1000);
  TU_CHECK(past.deadline_ns == now - 1);
  TU_CHECK(gpuhal__timeout_expired(past));
  TU_CHECK(!gpuhal__timeout_expired(future));
  tu_sleep_ns(1000 * 1000);
  TU_CHECK(gpuhal_now_ns() >= now + 1000 * 1000);
}

TU_TEST(infinite) {
  gpuhal_timeout_t t = gpuhal_timeout_infinite();
  TU_CHECK(gpuhal__timeout_is_infinite(t));
  TU_CHECK(!gpuhal__timeout_is_immediate(t));
  TU_CHECK(!gpuhal__timeout_expired(t));
}

TU_TEST(overflow_clamps_to_infinite) {
  TU_CHECK(gpuhal__timeout_is_infinite(gpuhal_timeout_relative_ns(INT64_MAX)));
  TU_CHECK(gpuhal__timeout_is_infinite(gpuhal_timeout_relative_ns(INT64_MAX - 1)));
  TU_CHECK(gpuhal__timeout_is_infinite(gpuhal_timeout_deadline_ns(INT64_MAX)));
  /* A long but representable timeout stays finite. */
  TU_CHECK(!gpuhal__timeout_is_infinite(gpuhal_timeout_relative_ns(3600LL * 1000 * 1000 * 1000)));
}

TU_TEST(clock_is_monotonic) {
  int64_t a = gpuhal_now_ns(), b = gpuhal_now_ns();
  TU_CHECK(a > 0);
  TU_CHECK(b >= a);
}

TU_MAIN(TU_CASE(immediate), TU_CASE(immediate_wait_never_blocks), TU_CASE(relative), TU_CASE(deadline),
        TU_CASE(infinite), TU_CASE(overflow_clamps_to_infinite), TU_CASE(clock_is_monotonic))
