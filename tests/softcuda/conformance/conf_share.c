/* Conformance: memory shared with the device or other processes, in one process: host
 * registration (cuMemHostRegister), the virtual memory management API (cuMemCreate,
 * cuMemMap, ..., export and import of a POSIX file descriptor) and the legacy IPC calls'
 * rules. conf_share_2p.c shares between two processes. The error codes outside strict_*
 * cases are what an H200 (driver 580, CUDA 13.0) answered. */
#include "conf.h" /* first: it defines _GNU_SOURCE */

#include <sys/mman.h>

#define SH_TIMEOUT_MS 10000.0

static int sh_attr(CUdevice_attribute a, int dev) {
  int v = 0;
  if (cu.cuDeviceGetAttribute(&v, a, dev) != CUDA_SUCCESS) return 0;
  return v;
}

/* Waits for s with a timeout (a plain synchronize could hang on a wait that is never met). */
static CUresult sh_stream_wait(CUstream s, double timeout_ms) {
  double until = conf_now_ms() + timeout_ms;
  CUresult r;
  while ((r = cu.cuStreamQuery(s)) == CUDA_ERROR_NOT_READY && conf_now_ms() < until) tu_sleep_ns(200000);
  return r;
}

static void sh_prop(CUmemAllocationProp* prop, int dev, CUmemAllocationHandleType types) {
  memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->requestedHandleTypes = types;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = dev;
}

static CUmemAccessDesc sh_access(int dev, CUmemAccess_flags flags) {
  CUmemAccessDesc d;
  memset(&d, 0, sizeof d);
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = dev;
  d.flags = flags;
  return d;
}

TU_TEST(attributes_and_granularity) {
  CUmemAllocationProp prop;
  size_t gmin = 0, grec = 0, g = 0;
  CONF_BEGIN();
  CONF_NEED(cuMemGetAllocationGranularity);
  TU_CHECK_EQ_INT(sh_attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0), 1);
  TU_CHECK_EQ_INT(sh_attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0), 1);
  TU_CHECK_EQ_INT(sh_attr(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 0), 1);
  sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CONF_OK(cu.cuMemGetAllocationGranularity(&gmin, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CONF_OK(cu.cuMemGetAllocationGranularity(&grec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  TU_CHECK(gmin >= 4096 && (gmin & (gmin - 1)) == 0);
  TU_CHECK(grec >= gmin && grec % gmin == 0);
  CONF_EQ(cu.cuMemGetAllocationGranularity(NULL, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuMemGetAllocationGranularity(&g, NULL, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuMemGetAllocationGranularity(&g, &prop, (CUmemAllocationGranularity_flags)7), CUDA_ERROR_INVALID_VALUE);
  /* (an H200 answers CUDA_SUCCESS for prop.type CU_MEM_ALLOCATION_TYPE_INVALID: not checked) */
  /* nor does it look at the device or the handle types */
  sh_prop(&prop, 99, CU_MEM_HANDLE_TYPE_WIN32);
  CONF_OK(cu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  TU_CHECK(g == gmin);
  if (conf_is_softcuda()) TU_CHECK_EQ_INT(gmin, 2 << 20); /* a GPU's 2 MiB (an H200's too) */
}

/* A registered range that is not page-aligned: device pointer, memops, copies, fills. */
TU_TEST(host_register_basic) {
  unsigned char* buf;
  unsigned char* p;
  CUdeviceptr d = 0, dev = 0;
  CUstream s;
  const size_t n = 5000;
  unsigned src[64], i;
  size_t live = 0;
  char other[64];
  CONF_BEGIN();
  CONF_NEED(cuMemHostRegister);
  TU_REQUIRE(conf_ctx(0));
  buf = (unsigned char*)malloc(3 * 4096);
  TU_REQUIRE(buf != NULL);
  p = buf + 104; /* 8-aligned, not page-aligned */
  memset(buf, 0, 3 * 4096);
  if (sq_leak_report) live = sq_leak_report(0);
  CONF_EQ(cu.cuMemHostRegister(NULL, n, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuMemHostRegister(p, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuMemHostRegister(p, n, 0x100), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuMemHostRegister(p, n, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
  if (sq_leak_report) TU_CHECK_EQ_INT(sq_leak_report(0), live + 1);
  CONF_EQ(cu.cuMemHostRegister(p, n, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CONF_OK(cu.cuMemHostGetDevicePointer(&d, p, 0));
  if (sh_attr(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 0)) TU_CHECK(d == (CUdeviceptr)(uintptr_t)p);
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  /* memops through the device pointer */
  if (sh_attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0)) {
    CONF_OK(cu.cuStreamWriteValue64(s, d + 8, 0x1122334455667788ull, 0));
    CONF_OK(cu.cuStreamSynchronize(s));
    TU_CHECK(__atomic_load_n((unsigned long long*)(p + 8), __ATOMIC_ACQUIRE) == 0x1122334455667788ull);
    CONF_OK(cu.cuStreamWaitValue64(s, d + 16, 5, CU_STREAM_WAIT_VALUE_GEQ));
    tu_sleep_ns(2000000);
    CONF_EQ(cu.cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    __atomic_store_n((unsigned long long*)(p + 16), 5ull, __ATOMIC_SEQ_CST); /* a host store meets it */
    CONF_OK(sh_stream_wait(s, SH_TIMEOUT_MS));
  }
  /* copies from and into it (pinned: no staging), and a fill */
  CONF_OK(cu.cuMemAlloc(&dev, sizeof src));
  for (i = 0; i < 64; ++i) ((unsigned*)(p + 1024))[i] = i * 7;
  CONF_OK(cu.cuMemcpyHtoDAsync(dev, p + 1024, sizeof src, s));
  CONF_OK(cu.cuMemcpyDtoHAsync(p + 2048, dev, sizeof src, s));
  CONF_OK(cu.cuMemsetD32Async(d + 3072, 0xabcdef01u, 16, s));
  CONF_OK(sh_stream_wait(s, SH_TIMEOUT_MS));
  memcpy(src, p + 2048, sizeof src);
  TU_CHECK(src[0] == 0 && src[10] == 70 && src[63] == 441);
  TU_CHECK(((unsigned*)(p + 3072))[15] == 0xabcdef01u);
  /* what cannot be registered: overlaps, pinned and device memory, unmapped memory */
  {
    void* pinned = NULL;
    void* gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CUdeviceptr devmem = 0;
    TU_REQUIRE(gone != MAP_FAILED);
    munmap(gone, 4096);
    CONF_EQ(cu.cuMemHostRegister(p + 100, 16, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CONF_OK(cu.cuMemHostAlloc(&pinned, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    CONF_EQ(cu.cuMemHostRegister(pinned, 4096, 0), CUDA_ERROR_INVALID_VALUE);
    CONF_OK(cu.cuMemAlloc(&devmem, 4096));
    CONF_EQ(cu.cuMemHostRegister((void*)(uintptr_t)devmem, 4096, 0), CUDA_ERROR_INVALID_VALUE);
    CONF_EQ(cu.cuMemHostRegister(gone, 4096, 0), CUDA_ERROR_INVALID_VALUE);
    CONF_EQ(cu.cuMemFreeHost(p), CUDA_ERROR_INVALID_VALUE); /* not the driver's memory */
    CONF_OK(cu.cuMemFree(devmem));
    CONF_OK(cu.cuMemFreeHost(pinned));
  }
  /* unregister: only the start of a registered range */
  CONF_EQ(cu.cuMemHostUnregister(p + 8), CUDA_ERROR_INVALID_VALUE); /* inside one: an H200's answer */
  CONF_EQ(cu.cuMemHostUnregister(other), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CONF_OK(cu.cuMemHostUnregister(p));
  CONF_EQ(cu.cuMemHostUnregister(p), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  if (sq_leak_report) TU_CHECK_EQ_INT(sq_leak_report(0), live + 2); /* the stream and the allocation */
  CONF_OK(cu.cuMemFree(dev));
  CONF_OK(cu.cuStreamDestroy(s));
  free(buf);
  conf_ctx_done(0);
}

/* softcuda's stricter checks around registrations (an H200 maps registered memory for the
 * device without DEVICEMAP, as unified addressing does with cuMemHostAlloc's; the
 * documentation promises a device address only with DEVICEMAP). */
TU_TEST(strict_host_register) {
  unsigned char* buf;
  CUdeviceptr d = 0;
  CUstream s;
  CONF_STRICT();
  TU_REQUIRE(conf_ctx(0));
  buf = (unsigned char*)malloc(8192);
  TU_REQUIRE(buf != NULL);
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuMemHostRegister(buf, 4096, 0));
  CONF_EQ(cu.cuMemHostGetDevicePointer(&d, buf, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuStreamWriteValue32(s, (CUdeviceptr)(uintptr_t)buf, 1, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuMemHostUnregister(buf));
  CONF_OK(cu.cuMemHostRegister(buf, 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
  CONF_OK(cu.cuMemHostUnregister(buf));
  /* afterwards it is plain host memory again */
  CONF_EQ(cu.cuStreamWriteValue32(s, (CUdeviceptr)(uintptr_t)buf, 1, 0), CUDA_ERROR_INVALID_VALUE);
  /* READ_ONLY_HOST_REGISTER_SUPPORTED reads 0 here (an H200 has it) */
  CONF_EQ(cu.cuMemHostRegister(buf, 4096, CU_MEMHOSTREGISTER_READ_ONLY), CUDA_ERROR_NOT_SUPPORTED);
  CONF_OK(cu.cuStreamDestroy(s));
  free(buf);
  conf_ctx_done(0);
}

/* One physical allocation mapped twice (its own handle, and its export imported again),
 * used by copies, fills (one across both mappings), a kernel and memops; released while
 * mapped. */
TU_TEST(vmm_map_export_import) {
  CUmemAllocationProp prop;
  CUmemGenericAllocationHandle h = 0, h2 = 0;
  CUmemAccessDesc rw = sh_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CUdeviceptr va = 0, dev = 0;
  CUstream s;
  CUmodule mod;
  CUfunction fill;
  size_t g = 0, live = 0;
  unsigned out[16];
  int fd = -1;
  CONF_BEGIN();
  CONF_NEED(cuMemCreate);
  if (!sh_attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0)) TU_SKIP("no VMM on device 0");
  TU_REQUIRE(conf_ctx(0));
  sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CONF_REQUIRE_OK(cu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (sq_leak_report) live = sq_leak_report(0);
  CONF_EQ(cu.cuMemCreate(&h, g + 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuMemCreate(&h, 2 * g, &prop, 1), CUDA_ERROR_INVALID_VALUE);
  CONF_REQUIRE_OK(cu.cuMemCreate(&h, 2 * g, &prop, 0));
  CONF_EQ(cu.cuMemAddressReserve(&va, 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE); /* not a granule */
  CONF_EQ(cu.cuMemAddressReserve(&va, g, 3, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_REQUIRE_OK(cu.cuMemAddressReserve(&va, 4 * g, 4096, 0, 0));
  TU_CHECK(va % g == 0);
  /* an H200 has NOT_SUPPORTED for an offset, a misaligned or too long range, or one outside */
  CONF_EQ(cu.cuMemMap(va, 2 * g, 2 * g, h, 0), CUDA_ERROR_NOT_SUPPORTED);
  CONF_EQ(cu.cuMemMap(va, 4 * g, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);
  CONF_EQ(cu.cuMemMap(va + 4096, g, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);
  CONF_EQ(cu.cuMemMap(va + 4 * g, g, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);
  CONF_REQUIRE_OK(cu.cuMemMap(va, 2 * g, 0, h, 0));
  CONF_EQ(cu.cuMemMap(va + g, 2 * g, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* overlaps a mapping */
  if (conf_is_softcuda()) /* mapped but not accessible yet: not device memory */
    CONF_EQ(cu.cuMemsetD32(va, 1, 4), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuMemSetAccess(va, g, &rw, 1), CUDA_ERROR_INVALID_VALUE);     /* a part of a mapping */
  CONF_EQ(cu.cuMemSetAccess(va, 3 * g, &rw, 1), CUDA_ERROR_INVALID_VALUE); /* not all mapped */
  CONF_OK(cu.cuMemSetAccess(va, 2 * g, &rw, 1));
  /* the export, imported again: the same memory behind another address */
  CONF_EQ(cu.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  TU_REQUIRE(fd >= 0);
  CONF_OK(cu.cuMemImportFromShareableHandle(&h2, (void*)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);
  CONF_OK(cu.cuMemMap(va + 2 * g, 2 * g, 0, h2, 0));
  CONF_OK(cu.cuMemSetAccess(va + 2 * g, 2 * g, &rw, 1));
  CONF_OK(cu.cuMemRelease(h)); /* the mappings keep the memory */
  CONF_OK(cu.cuMemRelease(h2));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuMemsetD32Async(va, 0x5a5a5a5au, 2 * g / 4, s));
  CONF_REQUIRE_OK(conf_kernel("fill_u32", &mod, &fill));
  {
    CUdeviceptr dst = va + g + 64;
    unsigned value = 0xfeedu, count = 8;
    void* args[3];
    args[0] = &dst;
    args[1] = &value;
    args[2] = &count;
    CONF_OK(cu.cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
  }
  if (sh_attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0)) {
    CONF_OK(cu.cuStreamWriteValue64(s, va + 8, 77, 0));
    CONF_OK(cu.cuStreamWaitValue64(s, va + 2 * g + 8, 77, CU_STREAM_WAIT_VALUE_EQ)); /* met via the alias */
  }
  CONF_OK(sh_stream_wait(s, SH_TIMEOUT_MS));
  CONF_OK(cu.cuMemcpyDtoH(out, va + 2 * g + g + 56, sizeof out)); /* read through the import's mapping */
  TU_CHECK(out[0] == 0x5a5a5a5au && out[1] == 0x5a5a5a5au && out[2] == 0xfeedu && out[9] == 0xfeedu &&
           out[10] == 0x5a5a5a5au);
  CONF_OK(cu.cuMemAlloc(&dev, 64));
  CONF_OK(cu.cuMemcpyDtoD(dev, va + 2 * g, 64));
  CONF_OK(cu.cuMemcpyDtoH(out, dev, sizeof out));
  if (sh_attr(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0)) TU_CHECK(out[2] == 77 && out[3] == 0);
  /* adjacent mappings are one range: a fill across the two (which are one memory here) */
  CONF_OK(cu.cuMemsetD8(va + 2 * g - 2, 0x11, 4));
  CONF_OK(cu.cuMemcpyDtoH(out, va, 4));
  TU_CHECK(out[0] == 0x5a5a1111u); /* its last 2 bytes landed at the start, through the alias */
  /* unmap: whole mappings only; free: unmapped reservations only, as reserved */
  CONF_EQ(cu.cuMemUnmap(va, g), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuMemAddressFree(va, 4 * g), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuMemUnmap(va, 4 * g));                                                   /* both mappings at once */
  if (conf_is_softcuda()) CONF_EQ(cu.cuMemsetD32(va, 1, 4), CUDA_ERROR_INVALID_VALUE); /* gone */
  CONF_EQ(cu.cuMemAddressFree(va, g), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuMemAddressFree(va, 4 * g));
  if (sq_leak_report) TU_CHECK_EQ_INT(sq_leak_report(0), live + 3); /* the stream, module, allocation */
  CONF_OK(cu.cuMemFree(dev));
  CONF_OK(cu.cuModuleUnload(mod));
  CONF_OK(cu.cuStreamDestroy(s));
  conf_ctx_done(0);
}

/* What cuMemCreate, export and import refuse. */
TU_TEST(vmm_errors) {
  CUmemAllocationProp prop;
  CUmemGenericAllocationHandle h = 0, none = 0, bad = 0;
  size_t g = 0;
  int fd = -1, pipefd[2];
  CONF_BEGIN();
  CONF_NEED(cuMemCreate);
  if (!sh_attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0)) TU_SKIP("no VMM on device 0");
  TU_REQUIRE(conf_ctx(0));
  sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_NONE);
  CONF_REQUIRE_OK(cu.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  sh_prop(&prop, 99, CU_MEM_HANDLE_TYPE_NONE);
  CONF_EQ(cu.cuMemCreate(&bad, g, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
  sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_WIN32);
  CONF_EQ(cu.cuMemCreate(&bad, g, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  prop.allocFlags.usage = 1; /* CU_MEM_CREATE_USAGE_TILE_POOL: not exportable */
  CONF_EQ(cu.cuMemCreate(&bad, g, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_NONE);
  prop.allocFlags.usage = 1;
  CONF_OK(cu.cuMemCreate(&bad, g, &prop, 0));
  CONF_OK(cu.cuMemRelease(bad));
  sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_NONE);
  CONF_REQUIRE_OK(cu.cuMemCreate(&none, g, &prop, 0));
  CONF_EQ(cu.cuMemExportToShareableHandle(&fd, none, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
          CUDA_ERROR_INVALID_VALUE); /* not requested at creation */
  sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CONF_REQUIRE_OK(cu.cuMemCreate(&h, g, &prop, 0));
  CONF_EQ(cu.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_WIN32, 0), CUDA_ERROR_INVALID_VALUE);
  /* a descriptor that is not an export: CUDA_ERROR_UNKNOWN on an H200 */
  TU_REQUIRE(pipe(pipefd) == 0);
  CONF_EQ(
      cu.cuMemImportFromShareableHandle(&bad, (void*)(uintptr_t)pipefd[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
      CUDA_ERROR_UNKNOWN);
  close(pipefd[0]);
  close(pipefd[1]);
  CONF_OK(cu.cuMemRelease(none));
  CONF_OK(cu.cuMemRelease(h));
  conf_ctx_done(0);
}

/* softcuda's checks of VMM arguments and access, and the leak report's counting. */
TU_TEST(strict_vmm) {
  CUmemAllocationProp prop;
  CUmemGenericAllocationHandle h = 0, none = 0;
  CUmemAccessDesc rw = sh_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CUmemAccessDesc off = sh_access(0, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  CUmemAccessDesc dev1 = sh_access(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CUdeviceptr va = 0;
  CUstream s, s1 = NULL;
  CUcontext c0;
  const size_t g = 2 << 20;
  size_t live;
  CONF_STRICT();
  TU_REQUIRE((c0 = conf_ctx(0)) != NULL);
  live = sq_leak_report(0);
  sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_NONE);
  CONF_REQUIRE_OK(cu.cuMemCreate(&none, g, &prop, 0));
  sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CONF_REQUIRE_OK(cu.cuMemCreate(&h, g, &prop, 0));
  sh_prop(&prop, 0, (CUmemAllocationHandleType)0x40); /* unknown bits: an H200 takes them */
  CONF_EQ(cu.cuMemCreate(&h, g, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_FABRIC); /* no IMEX channel */
  CONF_EQ(cu.cuMemCreate(&h, g, &prop, 0), CUDA_ERROR_NOT_PERMITTED);
  CONF_REQUIRE_OK(cu.cuMemAddressReserve(&va, 2 * g, 0, 0, 0));
  CONF_OK(cu.cuMemMap(va, g, 0, h, 0));
  CONF_OK(cu.cuMemMap(va + g, g, 0, none, 0));
  TU_CHECK_EQ_INT(sq_leak_report(0), live + 5); /* 2 handles, 1 reservation, 2 mappings */
  CONF_OK(cu.cuMemRelease(none));
  CONF_EQ(cu.cuMemRelease(none), CUDA_ERROR_INVALID_VALUE); /* released: undefined in CUDA */
  TU_CHECK_EQ_INT(sq_leak_report(0), live + 4);
  CONF_OK(cu.cuMemSetAccess(va, 2 * g, &rw, 1));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamWriteValue32(s, va, 1, 0));
  CONF_OK(cu.cuStreamSynchronize(s));
  if (conf_device_count() >= 2) { /* device 1 has no access: its memops are refused */
    conf_ctx(1);
    CONF_OK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CONF_EQ(cu.cuStreamWriteValue32(s1, va, 2, 0), CUDA_ERROR_INVALID_VALUE);
    CONF_OK(cu.cuMemSetAccess(va, g, &dev1, 1));
    CONF_OK(cu.cuStreamWriteValue32(s1, va, 2, 0));
    CONF_OK(cu.cuStreamSynchronize(s1));
    CONF_OK(cu.cuStreamDestroy(s1));
    conf_ctx_done(1);
    cu.cuCtxSetCurrent(c0);
  }
  CONF_OK(cu.cuMemSetAccess(va, g, &off, 1));
  CONF_EQ(cu.cuStreamWriteValue32(s, va, 1, 0), CUDA_ERROR_INVALID_VALUE); /* revoked: device 0 */
  CONF_OK(cu.cuStreamWriteValue32(s, va + g, 1, 0));                       /* the other mapping still has it */
  CONF_OK(cu.cuStreamSynchronize(s));
  {
    CUmemAccessDesc none_at_all[2];
    none_at_all[0] = off;
    none_at_all[1] = sh_access(1, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CONF_OK(cu.cuMemSetAccess(va, 2 * g, none_at_all, conf_device_count() >= 2 ? 2 : 1));
  }
  CONF_EQ(cu.cuMemsetD8(va, 0, 4), CUDA_ERROR_INVALID_VALUE); /* no access anywhere: not device memory */
  CONF_OK(cu.cuMemUnmap(va, g));
  CONF_EQ(cu.cuMemUnmap(va, g), CUDA_ERROR_INVALID_VALUE); /* not mapped any more */
  CONF_OK(cu.cuMemUnmap(va + g, g));
  CONF_OK(cu.cuMemAddressFree(va, 2 * g));
  CONF_OK(cu.cuMemRelease(h));
  TU_CHECK_EQ_INT(sq_leak_report(0), live + 1); /* the stream */
  CONF_OK(cu.cuStreamDestroy(s));
  conf_ctx_done(0);
}

/* The rules of cuIpcGetMemHandle / cuIpcOpenMemHandle one process can check. */
TU_TEST(ipc_rules_in_one_process) {
  CUipcMemHandle h, inner, zero;
  CUdeviceptr d = 0, opened = 0;
  void* pinned = NULL;
  unsigned capable = 0;
  CONF_BEGIN();
  CONF_NEED(cuIpcGetMemHandle);
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(cu.cuMemAlloc(&d, 1 << 20));
  CONF_OK(cu.cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d));
  TU_CHECK_EQ_INT(capable, 1);
  CONF_EQ(cu.cuIpcGetMemHandle(NULL, d), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuIpcGetMemHandle(&h, d));
  CONF_OK(cu.cuIpcGetMemHandle(&inner, d + 256)); /* inside: the whole allocation's handle */
  TU_CHECK(memcmp(&h, &inner, sizeof h) == 0);
  /* a process cannot open its own handles ("invalid device context"); the flags must be
   * CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, and are checked first */
  CONF_EQ(cu.cuIpcOpenMemHandle(&opened, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
  CONF_EQ(cu.cuIpcOpenMemHandle(&opened, h, 0), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuIpcOpenMemHandle(&opened, h, 0x10), CUDA_ERROR_INVALID_VALUE);
  memset(&zero, 0, sizeof zero);
  CONF_EQ(cu.cuIpcOpenMemHandle(&opened, zero, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuIpcCloseMemHandle(d), CUDA_ERROR_INVALID_VALUE); /* not an opened handle */
  CONF_OK(cu.cuMemHostAlloc(&pinned, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
  CONF_EQ(cu.cuIpcGetMemHandle(&h, (CUdeviceptr)(uintptr_t)pinned), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuMemFreeHost(pinned));
  CONF_OK(cu.cuMemFree(d));
  conf_ctx_done(0);
}

/* As on an H200 (driver 580): with a stream parked on a memory wait, cuMemHostRegister and
 * the VMM calls go ahead; cuMemHostUnregister waits for the stream (as cuMemFree does). A
 * thread meets the wait 2 s after it starts, so nothing here can hang. */
static volatile unsigned* sh_flag;
static void* sh_release_later(void* arg) {
  (void)arg;
  tu_sleep_ns(2000000000ll);
  __atomic_store_n(sh_flag, 1u, __ATOMIC_SEQ_CST);
  return NULL;
}

TU_TEST(parked_stream_holds_up_only_unregister) {
  CUmemAllocationProp prop;
  CUmemGenericAllocationHandle h = 0;
  CUmemAccessDesc rw = sh_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CUdeviceptr dflag = 0, va = 0;
  CUstream s;
  pthread_t releaser;
  void* pinned = NULL;
  unsigned char* buf;
  int vmm;
  CONF_BEGIN();
  CONF_NEED(cuMemHostRegister);
  TU_REQUIRE(conf_ctx(0));
  vmm = cu.cuMemCreate && sh_attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
  buf = (unsigned char*)malloc(4096);
  TU_REQUIRE(buf != NULL);
  CONF_REQUIRE_OK(cu.cuMemHostAlloc(&pinned, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
  sh_flag = (volatile unsigned*)pinned;
  *sh_flag = 0;
  CONF_REQUIRE_OK(cu.cuMemHostGetDevicePointer(&dflag, pinned, 0));
  CONF_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamWaitValue32(s, dflag, 1, CU_STREAM_WAIT_VALUE_EQ));
  TU_REQUIRE(pthread_create(&releaser, NULL, sh_release_later, NULL) == 0);
  CONF_OK(cu.cuMemHostRegister(buf, 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
  CONF_EQ(cu.cuStreamQuery(s), CUDA_ERROR_NOT_READY); /* it did not wait */
  if (vmm) {
    sh_prop(&prop, 0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CONF_OK(cu.cuMemCreate(&h, 2 << 20, &prop, 0));
    CONF_OK(cu.cuMemAddressReserve(&va, 2 << 20, 0, 0, 0));
    CONF_OK(cu.cuMemMap(va, 2 << 20, 0, h, 0));
    CONF_OK(cu.cuMemSetAccess(va, 2 << 20, &rw, 1));
    CONF_OK(cu.cuMemUnmap(va, 2 << 20));
    CONF_OK(cu.cuMemAddressFree(va, 2 << 20));
    CONF_OK(cu.cuMemRelease(h));
    CONF_EQ(cu.cuStreamQuery(s), CUDA_ERROR_NOT_READY); /* none of them waited */
  }
  CONF_OK(cu.cuMemHostUnregister(buf));
  CONF_OK(cu.cuStreamQuery(s)); /* it waited until the thread met the wait */
  pthread_join(releaser, NULL);
  CONF_OK(sh_stream_wait(s, SH_TIMEOUT_MS));
  CONF_OK(cu.cuStreamDestroy(s));
  CONF_OK(cu.cuMemFreeHost(pinned));
  free(buf);
  conf_ctx_done(0);
}

TU_MAIN(TU_CASE(attributes_and_granularity), TU_CASE(host_register_basic), TU_CASE(strict_host_register),
        TU_CASE(vmm_map_export_import), TU_CASE(vmm_errors), TU_CASE(strict_vmm), TU_CASE(ipc_rules_in_one_process),
        TU_CASE(parked_stream_holds_up_only_unregister))
