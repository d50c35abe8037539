/* Conformance: init, versions, cuGetProcAddress, errors, devices, contexts. */
#include "conf.h"

TU_TEST(proc_address_and_errors) {
  void* p = NULL;
  CUdriverProcAddressQueryResult st;
  const char* s = NULL;
  int v = 0;
  CONF_BEGIN();
  CONF_OK(cu.cuDriverGetVersion(&v));
  TU_CHECK(v >= 12000);
  CONF_OK(cu.cuGetProcAddress("cuMemAlloc", &p, 12000, 0, &st));
  TU_CHECK(p != NULL);
  TU_CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_SUCCESS);
  TU_CHECK(p == dlsym(conf_lib, "cuMemAlloc_v2")); /* the same entry point as dlsym */
  p = &st;
  CONF_OK(cu.cuGetProcAddress("cuNoSuchFunction", &p, 12000, 0, &st)); /* as the real driver does */
  TU_CHECK(p == NULL);
  TU_CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  CONF_OK(cu.cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
  TU_CHECK(s && strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
  CONF_OK(cu.cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
  TU_CHECK(s && strcmp(s, "invalid argument") == 0);
  CONF_EQ(cu.cuGetErrorName((CUresult)123456, &s), CUDA_ERROR_INVALID_VALUE);
}

TU_TEST(devices) {
  int n = 0, i;
  CONF_BEGIN();
  CONF_OK(cu.cuDeviceGetCount(&n));
  TU_REQUIRE(n >= 1);
  for (i = 0; i < n; ++i) {
    CUdevice d;
    char name[256], bus[32];
    CUuuid u;
    int major = 0, sms = 0, pools = 0;
    size_t total = 0;
    CONF_OK(cu.cuDeviceGet(&d, i));
    CONF_OK(cu.cuDeviceGetName(name, sizeof name, d));
    TU_CHECK(strlen(name) > 0);
    CONF_OK(cu.cuDeviceGetUuid(&u, d));
    CONF_OK(cu.cuDeviceGetPCIBusId(bus, sizeof bus, d));
    TU_CHECK(strlen(bus) >= 12);
    CONF_OK(cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
    TU_CHECK(major >= 7);
    CONF_OK(cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
    TU_CHECK(sms > 0);
    CONF_OK(cu.cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, d));
    TU_CHECK(pools == 1);
    CONF_OK(cu.cuDeviceTotalMem(&total, d));
    TU_CHECK(total > 0);
  }
  {
    CUdevice d;
    CONF_EQ(cu.cuDeviceGet(&d, n), CUDA_ERROR_INVALID_DEVICE);
  }
}

TU_TEST(uuids_differ) {
  CUuuid a, b;
  CONF_BEGIN();
  if (conf_device_count() < 2) TU_SKIP("needs 2 devices");
  CONF_OK(cu.cuDeviceGetUuid(&a, 0));
  CONF_OK(cu.cuDeviceGetUuid(&b, 1));
  TU_CHECK(memcmp(a.bytes, b.bytes, 16) != 0);
}

TU_TEST(context_stack) {
  CUcontext p0 = NULL, p1 = NULL, c = NULL, cur = (CUcontext)1, own = NULL;
  CUdevice d = -1;
  CONF_BEGIN();
  CONF_OK(cu.cuCtxGetCurrent(&cur));
  TU_CHECK(cur == NULL);
  CONF_OK(cu.cuDevicePrimaryCtxRetain(&p0, 0));
  CONF_OK(cu.cuDevicePrimaryCtxRetain(&c, 0));
  TU_CHECK(c == p0); /* one primary context per device */
  CONF_OK(cu.cuCtxPushCurrent(p0));
  CONF_OK(cu.cuCtxGetDevice(&d));
  TU_CHECK_EQ_INT(d, 0);
  if (conf_device_count() > 1) {
    CONF_OK(cu.cuDevicePrimaryCtxRetain(&p1, 1));
    CONF_OK(cu.cuCtxPushCurrent(p1));
    CONF_OK(cu.cuCtxGetDevice(&d));
    TU_CHECK_EQ_INT(d, 1);
    CONF_OK(cu.cuCtxPopCurrent(&c));
    TU_CHECK(c == p1);
  }
  CONF_OK(cu.cuCtxGetCurrent(&cur));
  TU_CHECK(cur == p0);
  CONF_OK(cu.cuCtxSetCurrent(NULL)); /* pops */
  CONF_OK(cu.cuCtxGetCurrent(&cur));
  TU_CHECK(cur == NULL);
  CONF_EQ(cu.cuCtxPopCurrent(&c), CUDA_ERROR_INVALID_CONTEXT);
  if (cu.cuCtxCreate && cu.cuCtxDestroy) {
    CONF_OK(cu.cuCtxCreate(&own, 0, 0)); /* pushed */
    CONF_OK(cu.cuCtxGetCurrent(&cur));
    TU_CHECK(cur == own && own != p0);
    CONF_OK(cu.cuCtxDestroy(own)); /* popped */
    CONF_OK(cu.cuCtxGetCurrent(&cur));
    TU_CHECK(cur == NULL);
  }
  if (p1) CONF_OK(cu.cuDevicePrimaryCtxRelease(1));
  CONF_OK(cu.cuDevicePrimaryCtxRelease(0));
  CONF_OK(cu.cuDevicePrimaryCtxRelease(0));
}

static void* thread_has_no_context(void* arg) {
  CUcontext cur = (CUcontext)1;
  CUdeviceptr p;
  cu.cuCtxGetCurrent(&cur);
  ((CUresult*)arg)[0] = cur == NULL ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
  ((CUresult*)arg)[1] = cu.cuMemAlloc(&p, 16);
  return NULL;
}

TU_TEST(current_context_is_per_thread) {
  pthread_t t;
  CUresult res[2];
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  pthread_create(&t, NULL, thread_has_no_context, res);
  pthread_join(t, NULL);
  CONF_OK(res[0]);
  CONF_EQ(res[1], CUDA_ERROR_INVALID_CONTEXT);
  conf_ctx_done(0);
}

TU_TEST(peer_access) {
  CUcontext c0, c1;
  int can = -1;
  CONF_BEGIN();
  if (conf_device_count() < 2) TU_SKIP("needs 2 devices");
  CONF_NEED(cuCtxEnablePeerAccess);
  CONF_OK(cu.cuDeviceCanAccessPeer(&can, 0, 1));
  if (!can) TU_SKIP("devices 0 and 1 have no peer access");
  CONF_OK(cu.cuDevicePrimaryCtxRetain(&c1, 1));
  c0 = conf_ctx(0);
  CONF_OK(cu.cuCtxEnablePeerAccess(c1, 0));
  CONF_EQ(cu.cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  CONF_OK(cu.cuCtxDisablePeerAccess(c1));
  CONF_EQ(cu.cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  (void)c0;
  conf_ctx_done(0);
  CONF_OK(cu.cuDevicePrimaryCtxRelease(1));
}

TU_TEST(strict_destroyed_context) {
  CUcontext own = NULL, cur;
  CUdeviceptr p;
  CONF_STRICT();
  CONF_OK(cu.cuCtxCreate(&own, 0, 0));
  CONF_OK(cu.cuCtxPushCurrent(own));
  CONF_OK(cu.cuCtxDestroy(own)); /* popped once; still current below */
  CONF_OK(cu.cuCtxGetCurrent(&cur));
  TU_CHECK(cur == own);
  CONF_EQ(cu.cuMemAlloc(&p, 16), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CONF_EQ(cu.cuCtxPushCurrent(own), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CONF_OK(cu.cuCtxSetCurrent(NULL));
  CONF_EQ(cu.cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT); /* never retained */
}

TU_TEST(strict_context_switch_counter) {
  unsigned long long before;
  CUcontext c;
  CONF_STRICT();
  c = conf_ctx(0); /* 1 switch */
  before = sq_switches(0);
  CONF_OK(cu.cuCtxSetCurrent(c));  /* no change: not counted */
  CONF_OK(cu.cuCtxPushCurrent(c)); /* same context: not counted */
  CONF_OK(cu.cuCtxPopCurrent(NULL));
  TU_CHECK_EQ_INT(sq_switches(0) - before, 0);
  CONF_OK(cu.cuCtxSetCurrent(NULL));
  TU_CHECK_EQ_INT(sq_switches(0) - before, 1);
  TU_CHECK(sq_switches(1) >= sq_switches(0));
  CONF_OK(cu.cuDevicePrimaryCtxRelease(0));
}

TU_MAIN(TU_CASE(proc_address_and_errors), TU_CASE(devices), TU_CASE(uuids_differ), TU_CASE(context_stack),
        TU_CASE(current_context_is_per_thread), TU_CASE(peer_access), TU_CASE(strict_destroyed_context),
        TU_CASE(strict_context_switch_counter))
