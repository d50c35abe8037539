/* Conformance: allocations, copies, fills, pointer attributes, memory pools. */
#include "conf.h"

TU_TEST(alloc_copy_fill) {
  CUdeviceptr d = 0, d2 = 0, m = 0;
  void* h = NULL;
  unsigned buf[64], i;
  unsigned short s16[4];
  size_t fr = 0, tot = 0;
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(cu.cuMemAlloc(&d, sizeof buf));
  CONF_OK(cu.cuMemAlloc(&d2, sizeof buf));
  CONF_OK(cu.cuMemAllocHost(&h, sizeof buf));
  CONF_OK(cu.cuMemAllocManaged(&m, sizeof buf, CU_MEM_ATTACH_GLOBAL));
  for (i = 0; i < 64; ++i) buf[i] = i * 3;
  CONF_OK(cu.cuMemcpyHtoD(d, buf, sizeof buf));
  CONF_OK(cu.cuMemcpyDtoD(d2, d, sizeof buf));
  memset(buf, 0, sizeof buf);
  CONF_OK(cu.cuMemcpyDtoH(buf, d2, sizeof buf));
  TU_CHECK(buf[10] == 30 && buf[63] == 189);
  CONF_OK(cu.cuMemsetD32(d, 0xdeadbeef, 64));
  CONF_OK(cu.cuMemcpy((CUdeviceptr)(uintptr_t)h, d, sizeof buf)); /* unified: into pinned host */
  TU_CHECK(((unsigned*)h)[5] == 0xdeadbeef);
  CONF_OK(cu.cuMemsetD16(d, 0x1234, 4));
  CONF_OK(cu.cuMemcpyDtoH(s16, d, sizeof s16));
  TU_CHECK(s16[3] == 0x1234);
  CONF_OK(cu.cuMemsetD8(m, 7, sizeof buf));
  TU_CHECK(((unsigned char*)(uintptr_t)m)[100] == 7); /* managed: host-visible */
  CONF_OK(cu.cuMemGetInfo(&fr, &tot));
  TU_CHECK(fr <= tot && tot > 0);
  CONF_EQ(cu.cuMemsetD32(d + 2, 0, 1), CUDA_ERROR_INVALID_VALUE); /* misaligned */
  CONF_EQ(cu.cuMemAlloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuMemFree(d));
  CONF_OK(cu.cuMemFree(d2));
  CONF_OK(cu.cuMemFree(m));
  CONF_OK(cu.cuMemFreeHost(h));
  conf_ctx_done(0);
}

TU_TEST(async_copies) {
  CUdeviceptr d = 0;
  CUstream s;
  void* pinned = NULL;
  unsigned src[256], dst[256], i;
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuMemAlloc(&d, sizeof src));
  CONF_OK(cu.cuMemAllocHost(&pinned, sizeof src));
  for (i = 0; i < 256; ++i) src[i] = i;
  CONF_OK(cu.cuMemcpyHtoDAsync(d, src, sizeof src, s));
  memset(src, 0xff, sizeof src); /* pageable source: staged, reusable at once */
  CONF_OK(cu.cuMemsetD8Async(d, 0, 4, s));
  CONF_OK(cu.cuMemcpyDtoHAsync(pinned, d, sizeof src, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(((unsigned*)pinned)[0] == 0 && ((unsigned*)pinned)[200] == 200);
  CONF_OK(cu.cuMemsetD32Async(d, 5, 256, s));
  CONF_OK(cu.cuMemsetD16Async(d, 9, 2, s));
  CONF_OK(cu.cuMemcpyDtoDAsync(d, d + 512, 4, s));
  CONF_OK(cu.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, d, sizeof dst, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK(dst[0] == 5 && dst[1] == 5 && dst[255] == 5);
  CONF_OK(cu.cuMemFree(d));
  CONF_OK(cu.cuMemFreeHost(pinned));
  CONF_OK(cu.cuStreamDestroy(s));
  conf_ctx_done(0);
}

TU_TEST(peer_copy) {
  CUcontext c0, c1;
  CUdeviceptr a = 0, b = 0;
  CUstream s;
  unsigned v = 42, out = 0;
  CONF_BEGIN();
  if (conf_device_count() < 2) TU_SKIP("needs 2 devices");
  c1 = conf_ctx(1);
  CONF_OK(cu.cuMemAlloc(&b, 4));
  c0 = conf_ctx(0);
  CONF_OK(cu.cuMemAlloc(&a, 4));
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuMemcpyHtoD(a, &v, 4));
  CONF_OK(cu.cuMemcpyPeerAsync(b, c1, a, c0, 4, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  if (cu.cuMemcpyPeer) CONF_OK(cu.cuMemcpyPeer(a, c0, b, c1, 4));
  CONF_OK(cu.cuMemcpyDtoH(&out, a, 4));
  TU_CHECK_EQ_INT(out, 42);
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemFree(a));
  CONF_OK(cu.cuMemFree(b));
  conf_ctx_done(0);
  CONF_OK(cu.cuDevicePrimaryCtxRelease(1));
}

TU_TEST(pointer_attributes) {
  CUdeviceptr d = 0, m = 0, start = 0;
  void* h = NULL;
  unsigned type = 0, managed = 9;
  int ord = -1;
  size_t size = 0;
  CUcontext c, pc = NULL;
  CONF_BEGIN();
  TU_REQUIRE(c = conf_ctx(0));
  CONF_OK(cu.cuMemAlloc(&d, 1000));
  CONF_OK(cu.cuMemAllocHost(&h, 64));
  CONF_OK(cu.cuMemAllocManaged(&m, 64, CU_MEM_ATTACH_GLOBAL));
  CONF_OK(cu.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 10));
  TU_CHECK_EQ_INT(type, CU_MEMORYTYPE_DEVICE);
  CONF_OK(cu.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h));
  TU_CHECK_EQ_INT(type, CU_MEMORYTYPE_HOST);
  CONF_OK(cu.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
  TU_CHECK_EQ_INT(managed, 1);
  CONF_OK(cu.cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
  TU_CHECK_EQ_INT(ord, 0);
  CONF_OK(cu.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 999));
  TU_CHECK(start == d);
  CONF_OK(cu.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 999));
  TU_CHECK(size >= 1000);
  CONF_OK(cu.cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, d));
  TU_CHECK(pc == c);
  CONF_OK(cu.cuMemFree(d));
  CONF_OK(cu.cuMemFree(m));
  CONF_OK(cu.cuMemFreeHost(h));
  conf_ctx_done(0);
}

TU_TEST(strict_ranges_and_oom) {
  CUdeviceptr d = 0, big = 0;
  unsigned buf[8];
  size_t fr, tot;
  CONF_STRICT();
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(cu.cuMemAlloc(&d, 16));
  CONF_EQ(cu.cuMemcpyHtoD(d + 8, buf, 16), CUDA_ERROR_INVALID_VALUE); /* overruns */
  CONF_EQ(cu.cuMemsetD32(d, 0, 5), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuMemcpyDtoH(buf, d + 4096, 4), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuMemFree(d));
  CONF_EQ(cu.cuMemFree(d), CUDA_ERROR_INVALID_VALUE); /* double free */
  CONF_OK(cu.cuMemGetInfo(&fr, &tot));
  CONF_EQ(cu.cuMemAlloc(&big, tot + 1), CUDA_ERROR_OUT_OF_MEMORY);
  TU_CHECK(sq_violations(4) >= 4);
  conf_ctx_done(0);
}

TU_TEST(pools) {
  CUmemoryPool pool = NULL, def = NULL, got = NULL;
  CUmemPoolProps props;
  CUstream s;
  CUdeviceptr a = 0, b = 0, c = 0;
  cuuint64_t v = 0, thr = ~(cuuint64_t)0; /* keep all freed memory reserved */
  unsigned out = 0, val = 77;
  CONF_BEGIN();
  CONF_NEED(cuMemPoolCreate);
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CONF_OK(cu.cuMemPoolCreate(&pool, &props));
  CONF_OK(cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
  CONF_OK(cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
  TU_CHECK(v == thr);
  CONF_OK(cu.cuMemAllocFromPoolAsync(&a, 4096, pool, s));
  CONF_OK(cu.cuMemcpyHtoDAsync(a, &val, 4, s));
  CONF_OK(cu.cuMemcpyDtoHAsync(&out, a, 4, s));
  CONF_OK(cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
  TU_CHECK(v >= 4096);
  CONF_OK(cu.cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a));
  TU_CHECK(got == pool);
  CONF_OK(cu.cuMemFreeAsync(a, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  TU_CHECK_EQ_INT(out, 77);
  CONF_OK(cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
  TU_CHECK(v == 0);
  CONF_OK(cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
  TU_CHECK(v > 0); /* kept below the release threshold */
  CONF_OK(cu.cuMemPoolTrimTo(pool, 0));
  CONF_OK(cu.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
  TU_CHECK(v == 0);
  CONF_OK(cu.cuDeviceGetDefaultMemPool(&def, 0));
  TU_CHECK(def != NULL && def != pool);
  CONF_OK(cu.cuMemAllocAsync(&b, 100, s));
  CONF_OK(cu.cuMemAllocAsync(&c, 100, s));
  TU_CHECK(b != c);
  CONF_OK(cu.cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, b));
  TU_CHECK(got == def);
  CONF_OK(cu.cuMemFreeAsync(b, s));
  CONF_OK(cu.cuMemFreeAsync(c, s));
  CONF_OK(cu.cuStreamSynchronize(s));
  CONF_EQ(cu.cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuMemPoolDestroy(pool));
  CONF_OK(cu.cuStreamDestroy(s));
  conf_ctx_done(0);
}

TU_TEST(strict_pool_use_after_free) {
  CUstream s;
  CUdeviceptr a = 0;
  CONF_STRICT();
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(cu.cuStreamCreate(&s, 0));
  CONF_OK(cu.cuMemAllocAsync(&a, 64, s));
  CONF_OK(cu.cuMemFreeAsync(a, s));
  CONF_EQ(cu.cuMemsetD8Async(a, 0, 64, s), CUDA_ERROR_INVALID_VALUE); /* after its free */
  CONF_EQ(cu.cuMemFreeAsync(a, s), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuStreamSynchronize(s));
  CONF_OK(cu.cuStreamDestroy(s));
  conf_ctx_done(0);
}

TU_MAIN(TU_CASE(alloc_copy_fill), TU_CASE(async_copies), TU_CASE(peer_copy), TU_CASE(pointer_attributes),
        TU_CASE(strict_ranges_and_oom), TU_CASE(pools), TU_CASE(strict_pool_use_after_free))
