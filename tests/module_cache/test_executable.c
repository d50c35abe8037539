/* Executables and kernels: loading PTX (with and without its NUL, padded with NULs), format detection,
 * the per-device module cache sharing one module per image, kernel lookup, kernel info,
 * dynamic shared memory opt-in. */
#include "test_internals.h"

#include "test_util.h"

typedef struct fixture {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  char* ptx;   /* the image READ_PTX_OR_FAIL read last (fixture_close frees it) */
  size_t size; /* its bytes, without the NUL the read adds */
} fixture;

static int fixture_open(fixture* f) {
  int count = 0;
  gpuhal_status_t st;
  memset(f, 0, sizeof(*f));
  st = gpuhal_driver_create(NULL, &f->driver);
  if (!st) st = gpuhal_driver_device_count(f->driver, &count);
  if (!st && count == 0) {
    gpuhal_driver_release(f->driver);
    f->driver = NULL;
    return 0;
  }
  if (!st) st = gpuhal_device_create(f->driver, 0, NULL, &f->device);
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "fixture: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
    gpuhal_driver_release(f->driver);
    f->driver = NULL;
    return 0;
  }
  return 1;
}

static void fixture_close(fixture* f) {
  gpuhal_device_release(f->device);
  gpuhal_driver_release(f->driver);
  free(f->ptx);
}

/* Reads tests/kernels/<file> into f->ptx and f->size, or fails the test. */
#define READ_PTX_OR_FAIL(f, file)                     \
  do {                                                \
    free((f)->ptx);                                   \
    (f)->ptx = tu_read_kernel_file(file, &(f)->size); \
    TU_REQUIRE((f)->ptx != NULL);                     \
  } while (0)

#define OPEN_OR_SKIP(f)                                \
  do {                                                 \
    if (!fixture_open(f)) {                            \
      if (!tu_state.failed) TU_SKIP("no CUDA device"); \
      return;                                          \
    }                                                  \
  } while (0)

TU_TEST(load_ptx_with_and_without_nul) {
  fixture f;
  gpuhal_executable_t* a = NULL;
  gpuhal_executable_t* b = NULL;
  gpuhal_kernel_t* ka = NULL;
  gpuhal_kernel_t* kb = NULL;
  OPEN_OR_SKIP(&f);
  READ_PTX_OR_FAIL(&f, "vector_add.ptx");
  TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &a));     /* no NUL */
  TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.size + 1, &b)); /* with the NUL */
  TU_REQUIRE(a && b);
  TU_CHECK(a != b);
  /* One image, one module on the device: both executables share the cache entry. */
  TU_CHECK(a->entry == b->entry);
  TU_CHECK_EQ_INT(a->entry->refcount, 2);
  TU_CHECK_OK(gpuhal_executable_kernel(a, "vector_add", &ka));
  TU_CHECK_OK(gpuhal_executable_kernel(b, "vector_add", &kb));
  TU_CHECK(ka && kb && ka->function == kb->function);
  gpuhal_executable_release(a);
  TU_CHECK_EQ_INT(b->entry->refcount, 1);
  /* Padded with NULs (as build tools embed PTX): the same text, the same entry. */
  {
    char* padded = (char*)calloc(f.size + 16, 1);
    TU_REQUIRE(padded != NULL);
    memcpy(padded, f.ptx, f.size);
    TU_CHECK_OK(gpuhal_executable_load(f.device, padded, f.size + 16, &a));
    TU_CHECK(a && a->entry == b->entry);
    gpuhal_executable_release(a);
    /* A NUL inside the text is not padding: refused, naming the byte. */
    padded[f.size / 2] = 0;
    TU_CHECK_STATUS(gpuhal_executable_load(f.device, padded, f.size + 16, &a), GPUHAL_STATUS_INVALID_ARGUMENT,
                    "is 0x00");
    free(padded);
  }
  gpuhal_executable_release(b);
  fixture_close(&f);
}

/* Two kernel objects of one image (two executables share its module) share one driver
 * function, so its dynamic shared memory limit is one setting: raising or lowering it
 * through either shows in both, and recording checks against it. */
TU_TEST(kernels_of_one_image_share_the_dynamic_shared_limit) {
  fixture f;
  gpuhal_executable_t* a = NULL;
  gpuhal_executable_t* b = NULL;
  gpuhal_kernel_t* ka = NULL;
  gpuhal_kernel_t* kb = NULL;
  gpuhal_kernel_info_t ia, ib;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_arg_t args[3];
  uint32_t big;
  OPEN_OR_SKIP(&f);
  READ_PTX_OR_FAIL(&f, "fill_u32.ptx");
  TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &a));
  TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &b));
  TU_CHECK_OK(gpuhal_executable_kernel(a, "fill_u32", &ka));
  TU_CHECK_OK(gpuhal_executable_kernel(b, "fill_u32", &kb));
  TU_REQUIRE(ka && kb && ka != kb && ka->function == kb->function);
  TU_CHECK_OK(gpuhal_kernel_info(ka, &ia));
  if (ia.max_dynamic_shared_optin_bytes <= ia.max_dynamic_shared_bytes + 1024) {
    gpuhal_executable_release(a);
    gpuhal_executable_release(b);
    fixture_close(&f);
    TU_SKIP("the device has no opt-in dynamic shared memory above the default");
  }
  big = (uint32_t)ia.max_dynamic_shared_bytes + 1024u;
  TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, 256, &buffer));
  args[0] = gpuhal_arg_buffer(buffer, 0);
  args[1] = gpuhal_arg_u32(1);
  args[2] = gpuhal_arg_u32(1);
  TU_CHECK_OK(gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  /* Raised through a: b's launches may use it. */
  TU_CHECK_OK(gpuhal_kernel_set_max_dynamic_shared(ka, big));
  TU_CHECK_OK(gpuhal_kernel_info(kb, &ib));
  TU_CHECK_EQ_INT(ib.max_dynamic_shared_bytes, (int)big);
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, kb, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), big, 3, args));
  /* Lowered through b: a's launches may not exceed it any more. */
  TU_CHECK_OK(gpuhal_kernel_set_max_dynamic_shared(kb, 1024));
  TU_CHECK_OK(gpuhal_kernel_info(ka, &ia));
  TU_CHECK_EQ_INT(ia.max_dynamic_shared_bytes, 1024);
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, ka, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 2048, 3, args),
                  GPUHAL_STATUS_OUT_OF_RANGE, "shared_bytes");
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, ka, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 1024, 3, args));
  /* A kernel object made later starts from the setting in force. */
  gpuhal_executable_release(b);
  TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &b));
  TU_CHECK_OK(gpuhal_executable_kernel(b, "fill_u32", &kb));
  TU_CHECK_OK(gpuhal_kernel_info(kb, &ib));
  TU_CHECK_EQ_INT(ib.max_dynamic_shared_bytes, 1024);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buffer);
  gpuhal_executable_release(a);
  gpuhal_executable_release(b);
  fixture_close(&f);
}

TU_TEST(module_cache_compiles_once) {
  fixture f;
  gpuhal_executable_t* exe[3] = {NULL, NULL, NULL};
  unsigned long long (*calls)(const char*) = NULL;
  unsigned long long before = 0;
  int i;
  OPEN_OR_SKIP(&f);
  if (!tu_softcuda()) {
    fixture_close(&f);
    TU_SKIP("counts driver calls: softcuda only");
  }
  *(void**)&calls = tu_softcuda_symbol("softcuda_query_calls");
  TU_REQUIRE(calls != NULL);
  READ_PTX_OR_FAIL(&f, "saxpy.ptx");
  before = calls("cuLibraryLoadData");
  for (i = 0; i < 3; ++i) TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &exe[i]));
  TU_CHECK_EQ_INT(calls("cuLibraryLoadData") - before, 1);
  for (i = 0; i < 3; ++i) gpuhal_executable_release(exe[i]);
  /* Unreferenced entries stay cached: the next load is a hit... */
  TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &exe[0]));
  TU_CHECK_EQ_INT(calls("cuLibraryLoadData") - before, 1);
  gpuhal_executable_release(exe[0]);
  /* ...until trimmed: then the next load compiles again. */
  TU_CHECK_OK(gpuhal_device_module_cache_trim(f.device));
  TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &exe[0]));
  TU_CHECK_EQ_INT(calls("cuLibraryLoadData") - before, 2);
  gpuhal_executable_release(exe[0]);
  fixture_close(&f);
}

TU_TEST(kernel_lookup_and_info) {
  fixture f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* k = NULL;
  gpuhal_kernel_t* again = NULL;
  gpuhal_kernel_info_t info;
  OPEN_OR_SKIP(&f);
  READ_PTX_OR_FAIL(&f, "saxpy.ptx");
  TU_REQUIRE_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &exe));
  TU_CHECK_OK(gpuhal_executable_kernel(exe, "saxpy", &k));
  TU_CHECK_OK(gpuhal_executable_kernel(exe, "saxpy", &again));
  TU_CHECK(k != NULL && k == again);
  TU_CHECK_STATUS(gpuhal_executable_kernel(exe, "no_such_kernel", &again), GPUHAL_STATUS_NOT_FOUND, "no_such_kernel");
  TU_CHECK(again == NULL);
  TU_CHECK_STATUS(gpuhal_executable_kernel(exe, NULL, &again), GPUHAL_STATUS_INVALID_ARGUMENT, "name");
  TU_CHECK_STATUS(gpuhal_executable_kernel(exe, "", &again), GPUHAL_STATUS_INVALID_ARGUMENT, "name");
  TU_CHECK_STATUS(gpuhal_executable_kernel(NULL, "saxpy", &again), GPUHAL_STATUS_INVALID_ARGUMENT, "executable");
  TU_REQUIRE_OK(gpuhal_kernel_info(k, &info));
  TU_CHECK(strcmp(info.name, "saxpy") == 0);
  TU_CHECK(info.max_threads_per_block > 0);
  TU_CHECK(info.max_dynamic_shared_bytes >= 0);
  TU_CHECK(info.max_dynamic_shared_optin_bytes >= info.max_dynamic_shared_bytes);
  if (info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN) {
    /* saxpy(float a, const float* x, float* y, unsigned n) */
    TU_CHECK_EQ_INT(info.param_count, 4);
    TU_CHECK_EQ_INT(info.param_sizes[0], 4);
    TU_CHECK_EQ_INT(info.param_sizes[1], 8);
    TU_CHECK_EQ_INT(info.param_sizes[2], 8);
    TU_CHECK_EQ_INT(info.param_sizes[3], 4);
    TU_CHECK_EQ_INT(info.param_offsets[0], 0);
    TU_CHECK_EQ_INT(info.param_offsets[1], 8);
    TU_CHECK_EQ_INT(info.param_offsets[2], 16);
    TU_CHECK_EQ_INT(info.param_offsets[3], 24);
  } else {
    fprintf(stderr, "  note: the driver has no cuFuncGetParamInfo; parameter checks are off\n");
  }
  TU_CHECK_STATUS(gpuhal_kernel_info(k, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "out_info");
  gpuhal_executable_release(exe);
  /* The kernel died with its executable. */
  TU_CHECK_STATUS(gpuhal_kernel_info(k, &info), GPUHAL_STATUS_INVALID_ARGUMENT, "released");
  fixture_close(&f);
}

TU_TEST(dynamic_shared_opt_in) {
  fixture f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* k = NULL;
  gpuhal_kernel_info_t info;
  OPEN_OR_SKIP(&f);
  READ_PTX_OR_FAIL(&f, "vector_add.ptx");
  TU_REQUIRE_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &exe));
  TU_REQUIRE_OK(gpuhal_executable_kernel(exe, "vector_add", &k));
  TU_REQUIRE_OK(gpuhal_kernel_info(k, &info));
  if (info.max_dynamic_shared_optin_bytes > info.max_dynamic_shared_bytes) {
    TU_CHECK_OK(gpuhal_kernel_set_max_dynamic_shared(k, (uint32_t)info.max_dynamic_shared_optin_bytes));
    TU_REQUIRE_OK(gpuhal_kernel_info(k, &info));
    TU_CHECK_EQ_INT(info.max_dynamic_shared_bytes, info.max_dynamic_shared_optin_bytes);
  }
  TU_CHECK_STATUS(gpuhal_kernel_set_max_dynamic_shared(k, (uint32_t)info.max_dynamic_shared_optin_bytes + 1),
                  GPUHAL_STATUS_OUT_OF_RANGE, "bytes");
  gpuhal_executable_release(exe);
  fixture_close(&f);
}

TU_TEST(format_detection) {
  fixture f;
  gpuhal_executable_t* exe = NULL;
  unsigned char junk[64];
  unsigned char elf[64];
  unsigned char fatbin[32];
  static const char text[] = "this is text but not PTX\n";
  static const char bad_ptx[] = ".version 8.0\n.target sm_75\n.address_size 64\n this does not compile (\n";
  gpuhal_status_t st;
  int i;
  OPEN_OR_SKIP(&f);
  for (i = 0; i < 64; ++i) junk[i] = (unsigned char)(i * 37 + 1);
  TU_CHECK_STATUS(gpuhal_executable_load(f.device, junk, sizeof(junk), &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "not PTX, a cubin");
  TU_CHECK(exe == NULL);
  TU_CHECK_STATUS(gpuhal_executable_load(f.device, text, sizeof(text), &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                  ".version");
  /* ELF64 for x86-64 (EM 62): not a cubin. */
  memset(elf, 0, sizeof(elf));
  memcpy(elf, "\177ELF", 4);
  elf[4] = 2;
  elf[18] = 62;
  TU_CHECK_STATUS(gpuhal_executable_load(f.device, elf, sizeof(elf), &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "EM_CUDA");
  /* EM_CUDA but its section headers lie past the end: truncated. */
  elf[18] = 190;
  elf[0x28] = 0x00;
  elf[0x29] = 0x10; /* shoff 4096 */
  elf[0x3A] = 64;
  elf[0x3C] = 3;
  TU_CHECK_STATUS(gpuhal_executable_load(f.device, elf, sizeof(elf), &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "truncated");
  TU_CHECK_STATUS(gpuhal_executable_load(f.device, elf, 20, &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "truncated");
  /* Section headers inside, but the program headers (which nvcc puts last) or a section's
   * bytes cut off: truncated too (the driver takes no size: it would read past the end). */
  {
    unsigned char cubin[64 + 2 * 64 + 56];
    memset(cubin, 0, sizeof(cubin));
    memcpy(cubin, elf, 64);
    cubin[0x28] = 64; /* shoff 64: two section headers of 64 bytes */
    cubin[0x29] = 0;
    cubin[0x3A] = 64;
    cubin[0x3C] = 2;
    cubin[0x20] = 192; /* phoff 192: two program headers of 56 bytes; one fits */
    cubin[0x36] = 56;
    cubin[0x38] = 2;
    TU_CHECK_STATUS(gpuhal_executable_load(f.device, cubin, sizeof(cubin), &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                    "program headers end at byte 304");
    cubin[0x38] = 1;
    cubin[128 + 4] = 1;      /* section 1: SHT_PROGBITS */
    cubin[128 + 0x18] = 200; /* at byte 200, 100 bytes: past the end */
    cubin[128 + 0x20] = 100;
    TU_CHECK_STATUS(gpuhal_executable_load(f.device, cubin, sizeof(cubin), &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                    "section 1 ends at byte 300");
    cubin[128 + 4] = 8; /* SHT_NOBITS (.nv.shared): no bytes in the file, nothing to check */
    st = gpuhal_executable_load(f.device, cubin, sizeof(cubin), &exe);
    TU_CHECK(st == NULL || !strstr(gpuhal_status_message(st), "truncated")); /* the driver judges the rest */
    gpuhal_status_free(st);
    gpuhal_executable_release(exe);
    exe = NULL;
    cubin[4] = 1; /* ELF32: one section header of 0 bytes (its fields lie elsewhere) */
    cubin[0x30] = 1;
    TU_CHECK_STATUS(gpuhal_executable_load(f.device, cubin, sizeof(cubin), &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                    "section headers are");
  }
  /* A fatbin header claiming more bytes than given. */
  memset(fatbin, 0, sizeof(fatbin));
  fatbin[0] = 0x50, fatbin[1] = 0xED, fatbin[2] = 0x55, fatbin[3] = 0xBA;
  fatbin[6] = 16;
  fatbin[8] = 0x00, fatbin[9] = 0x01; /* 256 bytes of payload */
  TU_CHECK_STATUS(gpuhal_executable_load(f.device, fatbin, sizeof(fatbin), &exe), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "fatbin");
  /* PTX that does not compile: the driver's error (with its log where it gives one). */
  st = gpuhal_executable_load(f.device, bad_ptx, sizeof(bad_ptx), &exe);
  if (st) {
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "PTX");
    gpuhal_status_free(st);
  } else {
    TU_CHECK(tu_softcuda()); /* softcuda only parses entries; a real JIT must refuse it */
    gpuhal_executable_release(exe);
    exe = NULL;
  }
  /* Arguments. */
  TU_CHECK_STATUS(gpuhal_executable_load(f.device, NULL, 10, &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "image");
  TU_CHECK_STATUS(gpuhal_executable_load(f.device, text, 0, &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "size");
  TU_CHECK_STATUS(gpuhal_executable_load(NULL, text, sizeof(text), &exe), GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  TU_CHECK_STATUS(gpuhal_executable_load(f.device, text, sizeof(text), NULL), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "out_executable");
  fixture_close(&f);
}

TU_TEST(executable_outlives_user_reference) {
  fixture f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* k = NULL;
  OPEN_OR_SKIP(&f);
  READ_PTX_OR_FAIL(&f, "vector_add.ptx");
  TU_REQUIRE_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &exe));
  free(f.ptx); /* the image was copied */
  f.ptx = NULL;
  gpuhal_executable_retain(exe);
  gpuhal_executable_release(exe);
  TU_CHECK_OK(gpuhal_executable_kernel(exe, "vector_add", &k));
  gpuhal_executable_release(exe);
  gpuhal_executable_release(NULL);
  fixture_close(&f);
}

/* A driver without cuFuncGetParamInfo (before CUDA 12.4): the kernel info says the
 * parameters are unknown and dispatches skip the argument checks. */
TU_TEST(no_param_info_turns_checks_off) {
  fixture f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* k = NULL;
  gpuhal_kernel_info_t info;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t arg;
  gpuhal__cuda_symbols_t* cu;
  gpuhal_PFN_cuFuncGetParamInfo saved;
  OPEN_OR_SKIP(&f);
  cu = (gpuhal__cuda_symbols_t*)(void*)f.device->cu;
  saved = cu->cuFuncGetParamInfo;
  cu->cuFuncGetParamInfo = NULL;
  READ_PTX_OR_FAIL(&f, "vector_add.ptx");
  TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &exe));
  TU_CHECK_OK(gpuhal_executable_kernel(exe, "vector_add", &k));
  cu->cuFuncGetParamInfo = saved;
  TU_REQUIRE(k != NULL);
  TU_CHECK_OK(gpuhal_kernel_info(k, &info));
  TU_CHECK(info.param_count == GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN);
  TU_CHECK(info.param_offsets == NULL && info.param_sizes == NULL);
  /* One argument for a four-parameter kernel is recorded (not executed). */
  TU_CHECK_OK(gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  arg = gpuhal_arg_u32(1);
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, k, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg));
  gpuhal_command_buffer_release(cb);
  gpuhal_executable_release(exe);
  fixture_close(&f);
}

/* cuFuncGetParamInfo failing for a reason of the moment or of the context (out of memory, a
 * lost context) fails the kernel lookup; the next lookup asks again. It turned the checks off
 * for good: the record was cached without them. Any other answer still means the driver
 * cannot say for this kernel: found, with the checks off. */
static gpuhal_PFN_cuFuncGetParamInfo param_info_orig;
static int param_info_failures;
static CUresult param_info_error = CUDA_ERROR_OUT_OF_MEMORY;
static CUresult CUDAAPI param_info_failing_once(CUfunction f, size_t index, size_t* offset, size_t* size) {
  if (param_info_failures++ == 0) return param_info_error;
  return param_info_orig(f, index, offset, size);
}

TU_TEST(param_info_failure_fails_the_lookup) {
  fixture f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* k = NULL;
  gpuhal_kernel_info_t info;
  gpuhal__cuda_symbols_t* cu;
  OPEN_OR_SKIP(&f);
  cu = (gpuhal__cuda_symbols_t*)(void*)f.device->cu;
  if (!cu->cuFuncGetParamInfo) {
    fixture_close(&f);
    TU_SKIP("the driver has no cuFuncGetParamInfo");
  }
  param_info_orig = cu->cuFuncGetParamInfo;
  param_info_failures = 0;
  cu->cuFuncGetParamInfo = param_info_failing_once;
  READ_PTX_OR_FAIL(&f, "atomic_inc.ptx");
  TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &exe));
  TU_CHECK_STATUS(gpuhal_executable_kernel(exe, "atomic_inc", &k), GPUHAL_STATUS_RESOURCE_EXHAUSTED,
                  "cuFuncGetParamInfo");
  TU_CHECK(k == NULL);
  TU_CHECK_OK(gpuhal_executable_kernel(exe, "atomic_inc", &k));
  cu->cuFuncGetParamInfo = param_info_orig;
  if (k) {
    TU_CHECK_OK(gpuhal_kernel_info(k, &info));
    TU_CHECK_EQ_INT(info.param_count, 1); /* atomic_inc(unsigned* counter) */
  }
  gpuhal_executable_release(exe);
  /* Another answer (the driver cannot say for this kernel): found, with the checks off. */
  exe = NULL;
  k = NULL;
  param_info_failures = 0;
  param_info_error = CUDA_ERROR_INVALID_HANDLE;
  cu->cuFuncGetParamInfo = param_info_failing_once;
  READ_PTX_OR_FAIL(&f, "spin_us.ptx");
  TU_CHECK_OK(gpuhal_executable_load(f.device, f.ptx, f.size, &exe));
  TU_CHECK_OK(gpuhal_executable_kernel(exe, "spin_us", &k));
  cu->cuFuncGetParamInfo = param_info_orig;
  param_info_error = CUDA_ERROR_OUT_OF_MEMORY;
  if (k) {
    TU_CHECK_OK(gpuhal_kernel_info(k, &info));
    TU_CHECK(info.param_count == GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN);
  }
  gpuhal_executable_release(exe);
  fixture_close(&f);
}

/* A relocatable cubin (nvcc -rdc=true, ELF type REL) is linked before it loads: the
 * driver loads some of one as it is and then fails its kernels at their lookup
 * (CUDA_ERROR_INVALID_IMAGE). A header-only one fails at the link, saying what the image
 * is; fill_u32_rdc_sm90.cubin runs on an sm_90 device (softcuda runs no real cubin). */
TU_TEST(relocatable_cubin_is_linked) {
  fixture f;
  unsigned char header[64];
  gpuhal_executable_t* exe = NULL;
  gpuhal_device_info_t info;
  gpuhal_status_t st;
  size_t size = 0;
  char* image;
  OPEN_OR_SKIP(&f);
  memset(&info, 0, sizeof(info));
  memset(header, 0, sizeof(header));
  memcpy(header, "\177ELF\002\001\001", 7);
  header[16] = 1;    /* ET_REL */
  header[18] = 190;  /* EM_CUDA */
  header[0x34] = 64; /* e_ehsize */
  st = gpuhal_executable_load(f.device, header, sizeof(header), &exe);
  TU_CHECK(st != NULL);
  if (st) TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "relocatable cubin");
  gpuhal_status_free(st);
  TU_CHECK_OK(gpuhal_device_info(f.device, &info));
  image = tu_rdc_fill_image(tu_softcuda(), info.compute_capability_major, info.compute_capability_minor, &size);
  if (image) {
    TU_CHECK_OK(gpuhal_executable_load(f.device, image, size, &exe));
    if (exe) TU_CHECK_OK(tu_check_fill_u32(f.driver, f.device, exe, 0xC0FFEEu));
    gpuhal_executable_release(exe);
  } else { /* a GPU other than sm_90: the sm_90 cubin does not link for it */
    image = tu_read_kernel_file("fill_u32_rdc_sm90.cubin", &size);
    TU_REQUIRE(image != NULL);
    st = gpuhal_executable_load(f.device, image, size, &exe);
    TU_CHECK(st != NULL);
    if (st) TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "relocatable cubin");
    gpuhal_status_free(st);
  }
  free(image);
  fixture_close(&f);
}

/* The PTX scanner (module_image.c) reads a .reqntid in any form PTX writes integers in, and
 * leaves a kernel with one it cannot read unenforced rather than refusing every launch. */
static void reqntid_of(const char* ptx, const char* name, uint32_t out[3]) {
  gpuhal__ptx_function_t fn;
  size_t cursor = 0;
  out[0] = out[1] = out[2] = 99;
  while (gpuhal__ptx_next_function(ptx, strlen(ptx), &cursor, &fn))
    if (fn.name_length == strlen(name) && memcmp(fn.name, name, fn.name_length) == 0)
      memcpy(out, fn.reqntid, sizeof(fn.reqntid));
}
TU_TEST(ptx_reqntid_in_every_integer_form) {
  static const struct {
    const char* directive;
    uint32_t x, y, z;
  } cases[] = {{".reqntid 64", 64, 1, 1},       {".reqntid 16, 4", 16, 4, 1},   {".reqntid 8,\n 4 ,2", 8, 4, 2},
               {".reqntid 0x40", 64, 1, 1},     {".reqntid 64, 0x2", 64, 2, 1}, {".reqntid 010", 8, 1, 1},
               {".reqntid 0b100, 2U", 4, 2, 1}, {".reqntid 0", 0, 0, 0},        {".reqntid 64, 0x", 0, 0, 0},
               {".reqntid 64, 09", 0, 0, 0},    {".reqntid k", 0, 0, 0},        {".maxntid 64", 0, 0, 0},
               {"// .reqntid 32\n", 0, 0, 0},   {"/* .reqntid 32 */", 0, 0, 0}};
  size_t i;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    char ptx[512];
    uint32_t got[3];
    snprintf(ptx, sizeof(ptx),
             ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry kk()\n.reqntid 32\n{ ret; }\n"
             ".visible .entry k(.param .u64 p)\n%s\n{ ret; }\n.visible .entry kkk() { ret; }\n",
             cases[i].directive);
    reqntid_of(ptx, "k", got);
    if (got[0] != cases[i].x || got[1] != cases[i].y || got[2] != cases[i].z)
      TU_FAIL_AT(__FILE__, __LINE__, "case %u ('%s'): read %ux%ux%u, expected %ux%ux%u", (unsigned)i,
                 cases[i].directive, got[0], got[1], got[2], cases[i].x, cases[i].y, cases[i].z);
    reqntid_of(ptx, "kk", got); /* its neighbours keep their own */
    TU_CHECK(got[0] == 32 && got[1] == 1 && got[2] == 1);
    reqntid_of(ptx, "kkk", got);
    TU_CHECK(got[0] == 0 && got[1] == 0 && got[2] == 0);
  }
}

TU_MAIN(TU_CASE(ptx_reqntid_in_every_integer_form), TU_CASE(relocatable_cubin_is_linked),
        TU_CASE(no_param_info_turns_checks_off), TU_CASE(param_info_failure_fails_the_lookup),
        TU_CASE(load_ptx_with_and_without_nul), TU_CASE(kernels_of_one_image_share_the_dynamic_shared_limit),
        TU_CASE(module_cache_compiles_once), TU_CASE(kernel_lookup_and_info), TU_CASE(dynamic_shared_opt_in),
        TU_CASE(format_detection), TU_CASE(executable_outlives_user_reference))
