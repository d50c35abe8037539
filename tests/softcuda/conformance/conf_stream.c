/* Conformance: streams, events, cross-stream and cross-context waits, host functions. */
#include "conf.h"

static CUmodule spin_mod;
static CUfunction spin_fn;

static int setup(void) {
  if (!conf_ctx(0)) return 0;
  return conf_kernel("spin_us", &spin_mod, &spin_fn) == CUDA_SUCCESS;
}
static void teardown(void) {
  cu.cuModuleUnload(spin_mod);
  conf_ctx_done(0);
}

TU_TEST(stream_is_asynchronous) {
  CUstream s;
  CUevent e;
  double t0;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuEventCreate(&e, CU_EVENT_DEFAULT));
  CONF_OK(cu.cuStreamQuery(s));
  CONF_OK(cu.cuEventQuery(e)); /* never recorded: complete */
  t0 = conf_now_ms();
  CONF_OK(conf_spin(spin_fn, s, 100000)); /* 100 ms */
  CONF_OK(cu.cuEventRecord(e, s));
  TU_CHECK(conf_now_ms() - t0 < 50); /* enqueueing did not wait */
  CONF_EQ(cu.cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  CONF_EQ(cu.cuEventQuery(e), CUDA_ERROR_NOT_READY);
  CONF_OK(cu.cuEventSynchronize(e));
  TU_CHECK(conf_now_ms() - t0 >= 95);
  CONF_OK(cu.cuEventQuery(e));
  CONF_OK(cu.cuStreamQuery(s));
  CONF_OK(cu.cuEventDestroy(e));
  CONF_OK(cu.cuStreamDestroy(s));
  teardown();
}

TU_TEST(elapsed_time_and_rerecord) {
  CUstream s;
  CUevent a, b, nt;
  float ms = 0;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuEventCreate(&a, CU_EVENT_DEFAULT));
  CONF_OK(cu.cuEventCreate(&b, CU_EVENT_BLOCKING_SYNC));
  CONF_OK(cu.cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
  CONF_EQ(cu.cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE); /* not recorded */
  CONF_OK(cu.cuEventRecord(a, s));
  CONF_OK(conf_spin(spin_fn, s, 20000));
  CONF_OK(cu.cuEventRecord(b, s));
  CONF_OK(cu.cuEventRecord(nt, s));
  CONF_OK(cu.cuEventSynchronize(b));
  CONF_OK(cu.cuEventElapsedTime(&ms, a, b));
  TU_CHECK(ms >= 19.0f && ms < 2000.0f);
  CONF_EQ(cu.cuEventElapsedTime(&ms, a, nt), CUDA_ERROR_INVALID_HANDLE);
  /* recording again replaces the record: b now waits for the new spin */
  CONF_OK(conf_spin(spin_fn, s, 50000));
  CONF_OK(cu.cuEventRecord(b, s));
  CONF_EQ(cu.cuEventQuery(b), CUDA_ERROR_NOT_READY);
  CONF_OK(cu.cuStreamSynchronize(s));
  CONF_OK(cu.cuEventElapsedTime(&ms, a, b));
  TU_CHECK(ms >= 69.0f);
  CONF_OK(cu.cuEventDestroy(a));
  CONF_OK(cu.cuEventDestroy(b));
  CONF_OK(cu.cuEventDestroy(nt));
  CONF_OK(cu.cuStreamDestroy(s));
  teardown();
}

typedef struct order_log {
  pthread_mutex_t mu;
  int n;
  int seq[16];
} order_log;
typedef struct order_arg {
  order_log* log;
  int id;
} order_arg;
static void CUDA_CB host_fn(void* p) {
  order_arg* a = (order_arg*)p;
  pthread_mutex_lock(&a->log->mu);
  a->log->seq[a->log->n++] = a->id;
  pthread_mutex_unlock(&a->log->mu);
}

TU_TEST(stream_wait_event_orders_streams) {
  CUstream s1, s2;
  CUevent e;
  order_log log;
  order_arg a1, a2;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  memset(&log, 0, sizeof log);
  pthread_mutex_init(&log.mu, NULL);
  a1.log = a2.log = &log;
  a1.id = 1;
  a2.id = 2;
  CONF_OK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CONF_OK(conf_spin(spin_fn, s1, 50000));
  CONF_OK(cu.cuLaunchHostFunc(s1, host_fn, &a1));
  CONF_OK(cu.cuEventRecord(e, s1));
  CONF_OK(cu.cuStreamWaitEvent(s2, e, 0));
  CONF_OK(cu.cuLaunchHostFunc(s2, host_fn, &a2));
  /* a later record does not move the wait already made */
  CONF_OK(conf_spin(spin_fn, s1, 300000));
  CONF_OK(cu.cuEventRecord(e, s1));
  CONF_OK(cu.cuStreamSynchronize(s2));
  pthread_mutex_lock(&log.mu);
  TU_CHECK_EQ_INT(log.n, 2);
  TU_CHECK(log.seq[0] == 1 && log.seq[1] == 2);
  pthread_mutex_unlock(&log.mu);
  CONF_EQ(cu.cuStreamQuery(s1), CUDA_ERROR_NOT_READY); /* s2 did not wait for the 2nd record */
  CONF_OK(cu.cuStreamSynchronize(s1));
  CONF_OK(cu.cuEventDestroy(e));
  CONF_OK(cu.cuStreamDestroy(s1));
  CONF_OK(cu.cuStreamDestroy(s2));
  pthread_mutex_destroy(&log.mu);
  teardown();
}

TU_TEST(wait_on_never_recorded_event) {
  CUstream s;
  CUevent e;
  CONF_BEGIN();
  TU_REQUIRE(setup());
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuEventCreate(&e, 0));
  CONF_OK(cu.cuStreamWaitEvent(s, e, 0));
  CONF_OK(cu.cuStreamSynchronize(s)); /* completes at once */
  CONF_OK(cu.cuEventSynchronize(e));
  CONF_OK(cu.cuEventDestroy(e));
  CONF_OK(cu.cuStreamDestroy(s));
  teardown();
}

TU_TEST(cross_context_wait) {
  CUcontext c1;
  CUstream s0, s1;
  CUevent e;
  CUmodule m1;
  CUfunction spin1;
  double t0;
  CONF_BEGIN();
  if (conf_device_count() < 2) TU_SKIP("needs 2 devices");
  TU_REQUIRE(setup());
  CONF_OK(cu.cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
  c1 = conf_ctx(1);
  TU_REQUIRE(c1);
  CONF_OK(conf_kernel("spin_us", &m1, &spin1));
  CONF_OK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  t0 = conf_now_ms();
  CONF_OK(conf_spin(spin1, s1, 80000));
  CONF_OK(cu.cuEventRecord(e, s1));
  CONF_OK(cu.cuCtxSetCurrent(NULL));
  TU_REQUIRE(conf_ctx(0));                 /* retains device 0 once more */
  CONF_OK(cu.cuStreamWaitEvent(s0, e, 0)); /* stream of device 0 waits on device 1 */
  CONF_OK(cu.cuStreamSynchronize(s0));
  TU_CHECK(conf_now_ms() - t0 >= 75);
  CONF_OK(cu.cuStreamDestroy(s0));
  CONF_OK(cu.cuDevicePrimaryCtxRelease(0));
  CONF_OK(cu.cuCtxSetCurrent(c1));
  CONF_OK(cu.cuEventDestroy(e));
  CONF_OK(cu.cuStreamDestroy(s1));
  CONF_OK(cu.cuModuleUnload(m1));
  CONF_OK(cu.cuCtxSetCurrent(NULL));
  CONF_OK(cu.cuDevicePrimaryCtxRelease(1));
  TU_REQUIRE(conf_ctx(0) != NULL);
  CONF_OK(cu.cuDevicePrimaryCtxRelease(0)); /* balance the retain of conf_ctx above */
  teardown();
}

TU_TEST(legacy_stream_orders_blocking_streams) {
  CUstream blocking;
  CUdeviceptr d;
  unsigned v = 0;
  CUmodule fm;
  CUfunction fill;
  unsigned n = 1, val = 9;
  void* args[3];
  CONF_BEGIN();
  TU_REQUIRE(setup());
  CONF_OK(conf_kernel("fill_u32", &fm, &fill));
  CONF_OK(cu.cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  CONF_OK(cu.cuMemAlloc(&d, 4));
  CONF_OK(cu.cuMemsetD32(d, 1, 1));
  CONF_OK(conf_spin(spin_fn, blocking, 50000));
  args[0] = &d;
  args[1] = &val;
  args[2] = &n;
  CONF_OK(cu.cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, blocking, args, NULL));
  CONF_OK(cu.cuMemcpyDtoH(&v, d, 4)); /* legacy stream: after the blocking stream's work */
  TU_CHECK_EQ_INT(v, 9);
  CONF_OK(cu.cuMemFree(d));
  CONF_OK(cu.cuStreamDestroy(blocking));
  CONF_OK(cu.cuModuleUnload(fm));
  teardown();
}

static CUresult callback_result = CUDA_SUCCESS;
static void CUDA_CB calls_cuda(void* p) {
  int n;
  (void)p;
  callback_result = cu.cuDeviceGetCount(&n);
}

TU_TEST(strict_no_cuda_in_callbacks) {
  CUstream s;
  unsigned long long v0;
  CONF_STRICT();
  TU_REQUIRE(setup());
  v0 = sq_violations(1);
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuLaunchHostFunc(s, calls_cuda, NULL));
  CONF_OK(cu.cuStreamSynchronize(s));
  CONF_EQ(callback_result, CUDA_ERROR_NOT_PERMITTED);
  TU_CHECK_EQ_INT(sq_violations(1) - v0, 1);
  CONF_OK(cu.cuStreamDestroy(s));
  teardown();
}

TU_TEST(strict_handles) {
  CUstream s;
  CUevent e;
  CONF_STRICT();
  TU_REQUIRE(setup());
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuEventCreate(&e, 0));
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuEventDestroy(e));
  CONF_EQ(cu.cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  CONF_EQ(cu.cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  CONF_EQ(cu.cuEventRecord(e, NULL), CUDA_ERROR_INVALID_HANDLE);
  CONF_EQ(cu.cuEventQuery((CUevent)s), CUDA_ERROR_INVALID_HANDLE); /* wrong kind */
  CONF_EQ(cu.cuStreamQuery((CUstream)(uintptr_t)0x1234), CUDA_ERROR_INVALID_HANDLE);
  teardown();
}

TU_TEST(strict_record_on_other_context) {
  CUstream s1;
  CUevent e0;
  CONF_STRICT();
  if (conf_device_count() < 2) TU_SKIP("needs 2 devices");
  TU_REQUIRE(conf_ctx(1));
  CONF_OK(cu.cuStreamCreate(&s1, 0));
  TU_REQUIRE(setup());
  CONF_OK(cu.cuEventCreate(&e0, 0));
  CONF_EQ(cu.cuEventRecord(e0, s1), CUDA_ERROR_INVALID_HANDLE);
  CONF_OK(cu.cuEventDestroy(e0));
  CONF_OK(cu.cuStreamDestroy(s1));
  teardown();
  CONF_OK(cu.cuDevicePrimaryCtxRelease(1));
}

TU_TEST(strict_round_trips) {
  CUstream s;
  unsigned long long r0;
  unsigned v = 0;
  CUdeviceptr d;
  CONF_STRICT();
  TU_REQUIRE(setup());
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuMemAlloc(&d, 4));
  r0 = sq_round_trips(0);
  CONF_OK(cu.cuStreamSynchronize(s));
  CONF_OK(cu.cuCtxSynchronize());
  CONF_OK(cu.cuMemcpyDtoH(&v, d, 4));
  TU_CHECK_EQ_INT(sq_round_trips(0) - r0, 3);
  CONF_OK(cu.cuMemFree(d));
  CONF_OK(cu.cuStreamDestroy(s));
  teardown();
}

TU_MAIN(TU_CASE(stream_is_asynchronous), TU_CASE(elapsed_time_and_rerecord), TU_CASE(stream_wait_event_orders_streams),
        TU_CASE(wait_on_never_recorded_event), TU_CASE(cross_context_wait),
        TU_CASE(legacy_stream_orders_blocking_streams), TU_CASE(strict_no_cuda_in_callbacks), TU_CASE(strict_handles),
        TU_CASE(strict_record_on_other_context), TU_CASE(strict_round_trips))
