/* Conformance: modules, functions, parameters, launches, linking, faults. */
#include "conf.h"

TU_TEST(vector_add_and_saxpy) {
  CUmodule mv, ms;
  CUfunction va, sx;
  CUdeviceptr a, b, c;
  float ha[1000], hb[1000], hc[1000], alpha = 2.0f;
  unsigned n = 1000, i;
  void* args[4];
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  CONF_REQUIRE_OK(conf_kernel("vector_add", &mv, &va));
  CONF_REQUIRE_OK(conf_kernel("saxpy", &ms, &sx));
  for (i = 0; i < n; ++i) ha[i] = (float)i, hb[i] = 1.0f;
  CONF_OK(cu.cuMemAlloc(&a, sizeof ha));
  CONF_OK(cu.cuMemAlloc(&b, sizeof hb));
  CONF_OK(cu.cuMemAlloc(&c, sizeof hc));
  CONF_OK(cu.cuMemcpyHtoD(a, ha, sizeof ha));
  CONF_OK(cu.cuMemcpyHtoD(b, hb, sizeof hb));
  args[0] = &a, args[1] = &b, args[2] = &c, args[3] = &n;
  CONF_OK(cu.cuLaunchKernel(va, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
  args[0] = &alpha, args[1] = &a, args[2] = &c, args[3] = &n; /* c = 2a + c */
  CONF_OK(cu.cuLaunchKernel(sx, (n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
  CONF_OK(cu.cuMemcpyDtoH(hc, c, sizeof hc));
  TU_CHECK(hc[0] == 1.0f && hc[999] == 999.0f * 3 + 1);
  CONF_EQ(cu.cuLaunchKernel(va, 0, 1, 1, 256, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  CONF_EQ(cu.cuLaunchKernel(va, 1, 1, 1, 2048, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  CONF_OK(cu.cuMemFree(a));
  CONF_OK(cu.cuMemFree(b));
  CONF_OK(cu.cuMemFree(c));
  CONF_OK(cu.cuModuleUnload(mv));
  CONF_OK(cu.cuModuleUnload(ms));
  conf_ctx_done(0);
}

TU_TEST(extra_param_buffer_and_atomics) {
  CUmodule m;
  CUfunction f;
  CUdeviceptr counter;
  unsigned v = 0;
  size_t size = sizeof(CUdeviceptr);
  void* extra[5];
  CUstream s1, s2;
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  CONF_REQUIRE_OK(conf_kernel("atomic_inc", &m, &f));
  CONF_OK(cu.cuMemAlloc(&counter, 4));
  CONF_OK(cu.cuMemsetD32(counter, 0, 1));
  CONF_OK(cu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CONF_OK(cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
  extra[1] = &counter;
  extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
  extra[3] = &size;
  extra[4] = CU_LAUNCH_PARAM_END;
  CONF_OK(cu.cuLaunchKernel(f, 10, 2, 1, 32, 2, 1, 0, s1, NULL, extra));
  CONF_OK(cu.cuLaunchKernel(f, 5, 1, 1, 64, 1, 1, 0, s2, NULL, extra));
  CONF_OK(cu.cuStreamSynchronize(s1));
  CONF_OK(cu.cuStreamSynchronize(s2));
  CONF_OK(cu.cuMemcpyDtoH(&v, counter, 4));
  TU_CHECK_EQ_INT(v, 10 * 2 * 32 * 2 + 5 * 64);
  CONF_OK(cu.cuStreamDestroy(s1));
  CONF_OK(cu.cuStreamDestroy(s2));
  CONF_OK(cu.cuMemFree(counter));
  CONF_OK(cu.cuModuleUnload(m));
  conf_ctx_done(0);
}

TU_TEST(functions_and_params) {
  CUmodule m;
  CUfunction f, f2;
  int v = 0;
  size_t off = 0, size = 0;
  const char* name = NULL;
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  CONF_REQUIRE_OK(conf_kernel("saxpy", &m, &f));
  CONF_OK(cu.cuModuleGetFunction(&f2, m, "saxpy"));
  TU_CHECK(f2 == f);
  CONF_EQ(cu.cuModuleGetFunction(&f2, m, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CONF_OK(cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
  TU_CHECK(v >= 128);
  CONF_OK(cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, f));
  TU_CHECK(v >= 75);
  CONF_OK(cu.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536));
  CONF_OK(cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
  TU_CHECK_EQ_INT(v, 65536);
  if (cu.cuFuncGetParamInfo) {
    /* saxpy(float a, const float* x, float* y, unsigned n) */
    CONF_OK(cu.cuFuncGetParamInfo(f, 0, &off, &size));
    TU_CHECK(off == 0 && size == 4);
    CONF_OK(cu.cuFuncGetParamInfo(f, 1, &off, &size));
    TU_CHECK(off == 8 && size == 8);
    CONF_OK(cu.cuFuncGetParamInfo(f, 3, &off, &size));
    TU_CHECK(off == 24 && size == 4);
    CONF_EQ(cu.cuFuncGetParamInfo(f, 4, &off, &size), CUDA_ERROR_INVALID_VALUE);
  }
  if (cu.cuFuncGetName) {
    CONF_OK(cu.cuFuncGetName(&name, f));
    TU_CHECK(name && strcmp(name, "saxpy") == 0);
  }
  CONF_OK(cu.cuModuleUnload(m));
  conf_ctx_done(0);
}

TU_TEST(bad_images) {
  CUmodule m;
  static const unsigned char junk[] = {0xba, 0xdc, 0x0f, 0xfe, 1, 2, 3, 4, 0};
  static const char bad_ptx[] =
      ".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry k(.param .u64 )\n{ ret; }\n";
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  CONF_EQ(cu.cuModuleLoadData(&m, junk), CUDA_ERROR_INVALID_IMAGE);
  CONF_EQ(cu.cuModuleLoadData(&m, bad_ptx), CUDA_ERROR_INVALID_PTX);
  conf_ctx_done(0);
}

TU_TEST(load_ex_and_link) {
  char* ptx = conf_read_ptx("fill_u32");
  char* ptx2 = conf_read_ptx("vector_add");
  CUmodule m;
  CUfunction f;
  CUlinkState link;
  void* cubin = NULL;
  size_t cubin_size = 0;
  char info[256], err[256];
  CUjit_option opts[4] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                          CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[4];
  CONF_BEGIN();
  TU_REQUIRE(ptx && ptx2);
  TU_REQUIRE(conf_ctx(0));
  vals[0] = info, vals[1] = (void*)(uintptr_t)sizeof info, vals[2] = err, vals[3] = (void*)(uintptr_t)sizeof err;
  CONF_OK(cu.cuModuleLoadDataEx(&m, ptx, 4, opts, vals));
  CONF_OK(cu.cuModuleGetFunction(&f, m, "fill_u32"));
  CONF_OK(cu.cuModuleUnload(m));
  CONF_OK(cu.cuLinkCreate(0, NULL, NULL, &link));
  CONF_OK(cu.cuLinkAddData(link, CU_JIT_INPUT_PTX, ptx, strlen(ptx) + 1, "fill_u32.ptx", 0, NULL, NULL));
  CONF_OK(cu.cuLinkAddData(link, CU_JIT_INPUT_PTX, ptx2, strlen(ptx2) + 1, "vector_add.ptx", 0, NULL, NULL));
  CONF_OK(cu.cuLinkComplete(link, &cubin, &cubin_size));
  TU_REQUIRE(cubin && cubin_size > 4);
  TU_CHECK(memcmp(cubin, "\177ELF", 4) == 0); /* a cubin */
  CONF_OK(cu.cuModuleLoadData(&m, cubin));
  CONF_OK(cu.cuModuleGetFunction(&f, m, "fill_u32"));
  CONF_OK(cu.cuModuleGetFunction(&f, m, "vector_add"));
  {
    CUdeviceptr d;
    unsigned n = 64, val = 5, out[64];
    void* args[3];
    args[0] = &d, args[1] = &val, args[2] = &n;
    CONF_OK(cu.cuModuleGetFunction(&f, m, "fill_u32"));
    CONF_OK(cu.cuMemAlloc(&d, sizeof out));
    CONF_OK(cu.cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
    CONF_OK(cu.cuMemcpyDtoH(out, d, sizeof out));
    TU_CHECK(out[0] == 5 && out[63] == 5);
    CONF_OK(cu.cuMemFree(d));
  }
  CONF_OK(cu.cuModuleUnload(m));
  CONF_OK(cu.cuLinkDestroy(link));
  free(ptx);
  free(ptx2);
  conf_ctx_done(0);
}

/* PTX from LLVM's NVPTX back end (tests/kernels/llvm_kernels.ptx): launch bounds
 * (.maxntid, .reqntid) bound CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, and a launch outside
 * them fails; a kernel's static shared memory (.shared declared in its body) lowers its
 * dynamic limit; names of 159 characters and with '$' are found. */
TU_TEST(llvm_launch_bounds_and_shared_memory) {
  static const char numba[] =
      "_ZN6cudapy8__main__9axpy_"
      "2412B96cw51cXTLSUwv1sCUt9Uw1VEw0NRRQPKzLTg4gaGKFsG2oMQGEYakJSQB1PQBk0Bynm21OiwU1a0UoLGhDp"
      "QE8oxrNQE_3dE5ArrayIfLi1E1C7mutable7alignedE";
  char* ptx = conf_read_ptx("llvm_kernels");
  CUmodule m;
  CUfunction maxntid, reqntid, reqntid_2d, stat, f;
  CUdeviceptr out;
  unsigned n = 64;
  int v = 0;
  void* args[2];
  CUresult r;
  CONF_BEGIN();
  TU_REQUIRE(ptx != NULL);
  TU_REQUIRE(conf_ctx(0));
  CONF_REQUIRE_OK(cu.cuModuleLoadData(&m, ptx));
  CONF_OK(cu.cuModuleGetFunction(&maxntid, m, "llvm_maxntid"));
  CONF_OK(cu.cuModuleGetFunction(&reqntid, m, "llvm_reqntid"));
  CONF_OK(cu.cuModuleGetFunction(&reqntid_2d, m, "llvm_reqntid_2d"));
  CONF_OK(cu.cuModuleGetFunction(&stat, m, "llvm_static_shared"));
  CONF_OK(cu.cuModuleGetFunction(&f, m, numba));
  CONF_OK(cu.cuModuleGetFunction(&f, m, "llvm$dollar"));
  CONF_EQ(cu.cuModuleGetFunction(&f, m, "scale_$_helper"), CUDA_ERROR_NOT_FOUND); /* a .func */
  CONF_OK(cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, maxntid));
  TU_CHECK_EQ_INT(v, 128);
  /* .reqntid does not lower the attribute (driver 580, H200): gpuhal_kernel_info does */
  CONF_OK(cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, reqntid));
  TU_CHECK_EQ_INT(v, 1024);
  CONF_OK(cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, reqntid_2d));
  TU_CHECK_EQ_INT(v, 1024);
  CONF_OK(cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, stat));
  TU_CHECK_EQ_INT(v, 16384);
  CONF_OK(cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, stat));
  TU_CHECK_EQ_INT(v, 49152 - 16384);
  CONF_OK(cu.cuMemAlloc(&out, 1024));
  args[0] = &out, args[1] = &n;
  CONF_OK(cu.cuLaunchKernel(maxntid, 1, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
  CONF_OK(cu.cuLaunchKernel(reqntid, 1, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
  CONF_OK(cu.cuLaunchKernel(reqntid_2d, 1, 1, 1, 16, 4, 1, 0, NULL, args, NULL));
  CONF_OK(cu.cuCtxSynchronize());
  /* more threads than .maxntid allows: refused at once (not as for a register limit) */
  CONF_EQ(cu.cuLaunchKernel(maxntid, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  /* a block other than .reqntid: the PTX ISA does not say which failure; driver 580 on an
   * H200 refuses the launch with CUDA_ERROR_INVALID_VALUE */
  r = cu.cuLaunchKernel(reqntid, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL);
  if (r == CUDA_SUCCESS) r = cu.cuCtxSynchronize();
  TU_CHECK_EQ_INT(r, CUDA_ERROR_INVALID_VALUE);
  if (r == CUDA_SUCCESS) TU_FAIL_AT(__FILE__, __LINE__, "a launch of 32 threads of a .reqntid 64 kernel succeeded");
  fprintf(stderr, "  .reqntid 64 launched with 32 threads: %d\n", (int)r);
  CONF_OK(cu.cuMemFree(out));
  CONF_OK(cu.cuModuleUnload(m));
  free(ptx);
  conf_ctx_done(0);
}

/* `text` with its first `from` replaced by `to` (malloc'ed; NULL when absent). */
static char* conf_replace(const char* text, const char* from, const char* to) {
  const char* at = strstr(text, from);
  char* out;
  if (!at) return NULL;
  out = (char*)malloc(strlen(text) - strlen(from) + strlen(to) + 1);
  if (!out) return NULL;
  memcpy(out, text, (size_t)(at - text));
  strcpy(out + (at - text), to);
  strcat(out, at + strlen(from));
  return out;
}

/* What the JIT refuses in LLVM's PTX, with ptxas's words in the error log: a .version newer
 * than the driver, a .target newer than the device, parameters past 4,352 bytes below PTX
 * ISA 8.1 (llvm_big_param.ptx is 8.1: it loads). */
TU_TEST(llvm_jit_refusals_are_logged) {
  char* ptx = conf_read_ptx("llvm_kernels");
  char* big = conf_read_ptx("llvm_big_param");
  char *new_version = NULL, *new_target = NULL, *old_big = NULL;
  char err[1024];
  CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[2];
  CUmodule m;
  int major = 0;
  CONF_BEGIN();
  TU_REQUIRE(ptx && big);
  new_version = conf_replace(ptx, ".version 7.0", ".version 9.9");
  new_target = conf_replace(ptx, ".version 7.0\n.target sm_80", ".version 8.6\n.target sm_100");
  old_big = conf_replace(big, ".version 8.1", ".version 7.0");
  TU_REQUIRE(new_version && new_target && old_big);
  TU_REQUIRE(conf_ctx(0));
  CONF_OK(cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  CONF_OK(cu.cuModuleLoadData(&m, big));
  CONF_OK(cu.cuModuleUnload(m));
  vals[0] = err, vals[1] = (void*)(uintptr_t)sizeof err;
  err[0] = 0;
  CONF_EQ(cu.cuModuleLoadDataEx(&m, new_version, 2, opts, vals), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
  fprintf(stderr, "  .version 9.9: %s\n", err);
  TU_CHECK_STR_CONTAINS(err, "Unsupported .version 9.9");
  if (major < 10) {
    vals[1] = (void*)(uintptr_t)sizeof err;
    err[0] = 0;
    CONF_EQ(cu.cuModuleLoadDataEx(&m, new_target, 2, opts, vals), CUDA_ERROR_INVALID_PTX);
    fprintf(stderr, "  .target sm_100: %s\n", err);
    TU_CHECK_STR_CONTAINS(err, "SM version specified by .target is higher");
  }
  vals[1] = (void*)(uintptr_t)sizeof err;
  err[0] = 0;
  CONF_EQ(cu.cuModuleLoadDataEx(&m, old_big, 2, opts, vals), CUDA_ERROR_INVALID_PTX);
  fprintf(stderr, "  4,408 bytes of parameters at PTX ISA 7.0: %s\n", err);
  TU_CHECK_STR_CONTAINS(err, "too much parameter space");
  free(new_version);
  free(new_target);
  free(old_big);
  free(ptx);
  free(big);
  conf_ctx_done(0);
}

TU_TEST(fault_poisons_context) {
  CUcontext own;
  CUmodule m;
  CUfunction f;
  CUstream s;
  CUdeviceptr d;
  unsigned long long bad = 0x10;
  void* args[1];
  CONF_BEGIN();
  CONF_NEED(cuCtxCreate);
  CONF_OK(cu.cuCtxCreate(&own, 0, 0)); /* its own context: the poison dies with it */
  CONF_REQUIRE_OK(conf_kernel("fault", &m, &f));
  CONF_OK(cu.cuStreamCreate(&s, 0));
  args[0] = &bad;
  CONF_OK(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
  CONF_EQ(cu.cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CONF_EQ(cu.cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CONF_EQ(cu.cuMemAlloc(&d, 16), CUDA_ERROR_ILLEGAL_ADDRESS); /* sticky */
  CONF_OK(cu.cuCtxDestroy(own));
  if (conf_is_softcuda()) {
    /* softcuda poisons only the faulting context; on a GPU the whole process is done
     * for (CUDA: "the process must be terminated"), which is why this case runs last */
    CUdeviceptr p;
    TU_REQUIRE(conf_ctx(0));
    CONF_OK(cu.cuMemAlloc(&p, 16));
    CONF_OK(cu.cuMemFree(p));
    conf_ctx_done(0);
  }
}

/* cuModuleGetGlobal: sizes, NOT_FOUND, either out pointer alone; the initialisers are in
 * device memory before any write; the host writes them, a kernel reads them. */
TU_TEST(module_globals) {
  CUmodule m;
  CUfunction f;
  CUdeviceptr scale, offset, launches, table, bias, out, p = 0;
  size_t size = 0;
  unsigned v = 0, t[8], o[20], i, n = 20;
  float b[3];
  unsigned long long count = 0;
  int cbytes = -1;
  void* args[2];
  char* ptx = conf_read_ptx("globals");
  CONF_BEGIN();
  TU_REQUIRE(ptx);
  TU_REQUIRE(conf_ctx(0));
  CONF_REQUIRE_OK(cu.cuModuleLoadData(&m, ptx));
  CONF_REQUIRE_OK(cu.cuModuleGetFunction(&f, m, "read_globals"));
  CONF_OK(cu.cuModuleGetGlobal(&scale, &size, m, "g_scale"));
  TU_CHECK(scale != 0 && size == 4);
  CONF_OK(cu.cuModuleGetGlobal(&offset, &size, m, "g_offset"));
  TU_CHECK(size == 4);
  CONF_OK(cu.cuModuleGetGlobal(&launches, &size, m, "g_launches"));
  TU_CHECK(size == 8 && launches % 8 == 0);
  CONF_OK(cu.cuModuleGetGlobal(&table, &size, m, "c_table"));
  TU_CHECK(size == 32);
  CONF_OK(cu.cuModuleGetGlobal(&bias, NULL, m, "_ZN3cfg4biasE")); /* either out pointer may be NULL */
  CONF_OK(cu.cuModuleGetGlobal(NULL, &size, m, "_ZN3cfg4biasE"));
  TU_CHECK(size == 12);
  CONF_EQ(cu.cuModuleGetGlobal(&p, &size, m, "no_such_global"), CUDA_ERROR_NOT_FOUND);
  CONF_EQ(cu.cuModuleGetGlobal(&p, &size, m, "read_globals"), CUDA_ERROR_INVALID_VALUE); /* a kernel (H200) */
  CONF_EQ(cu.cuModuleGetGlobal(&p, &size, m, "cfg::bias"), CUDA_ERROR_NOT_FOUND);        /* by its PTX name only */
  if (conf_is_softcuda()) CONF_EQ(cu.cuModuleGetGlobal(NULL, NULL, m, "g_scale"), CUDA_ERROR_INVALID_VALUE);
  /* the initialisers, before any write */
  CONF_OK(cu.cuMemcpyDtoH(&v, scale, 4));
  TU_CHECK_EQ_INT(v, 7);
  CONF_OK(cu.cuMemcpyDtoH(&v, offset, 4));
  TU_CHECK_EQ_INT(v, 0);
  CONF_OK(cu.cuMemcpyDtoH(t, table, sizeof t));
  for (i = 0; i < 8; ++i) TU_CHECK_EQ_INT(t[i], i + 1);
  CONF_OK(cu.cuMemcpyDtoH(b, bias, sizeof b));
  TU_CHECK(b[0] == 0.5f && b[1] == 1.5f && b[2] == 2.5f);
  CONF_OK(cu.cuFuncGetAttribute(&cbytes, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, f));
  fprintf(stderr, "  read_globals: CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = %d\n", cbytes);
  if (conf_is_softcuda()) TU_CHECK_EQ_INT(cbytes, 32); /* c_table */
  /* the host writes them (a __constant__ table too), the kernel reads them */
  v = 3;
  CONF_OK(cu.cuMemcpyHtoD(scale, &v, 4));
  v = 100;
  CONF_OK(cu.cuMemcpyHtoD(offset, &v, 4));
  for (i = 0; i < 8; ++i) t[i] = 10 + i;
  CONF_OK(cu.cuMemcpyHtoD(table, t, sizeof t));
  CONF_OK(cu.cuMemsetD32(table + 28, 40, 1)); /* the last entry */
  CONF_OK(cu.cuMemAlloc(&out, sizeof o));
  args[0] = &out, args[1] = &n;
  CONF_OK(cu.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
  CONF_OK(cu.cuMemcpyDtoH(o, out, sizeof o));
  for (i = 0; i < n; ++i) TU_CHECK_EQ_INT(o[i], 3 * (i % 8 == 7 ? 40 : 10 + i % 8) + 100 + (unsigned)b[i % 3]);
  CONF_OK(cu.cuMemcpyDtoH(&count, launches, 8));
  TU_CHECK(count == 1);
  CONF_OK(cu.cuMemFree(out));
  CONF_OK(cu.cuModuleUnload(m));
  conf_ctx_done(0);
  free(ptx);
}

/* PTX initialisers as ptxas takes them: literals of every kind, vectors (nested braces),
 * an unsized array, elements left out (zeros), addresses of other variables, LLVM's byte
 * masks of an address. */
TU_TEST(module_global_initialisers) {
  static const char ptx[] =
      ".version 8.0\n.target sm_75\n.address_size 64\n"
      ".global .align 4 .u32 one = 1;\n"
      ".global .align 4 .s32 neg = -5;\n"
      ".global .align 8 .u64 hex = 0x1122334455667788;\n"
      ".global .align 4 .f32 flt = 0f3FC00000;\n"
      ".global .align 8 .f64 dbl = 0d4004000000000000;\n"
      ".global .align 4 .f32 dec = 2.25;\n"
      ".global .align 8 .v2 .u32 vec[2] = {{1, 2}, {3, 4}};\n"
      ".global .align 4 .u32 unsized[] = {7, 8, 9};\n"
      ".global .align 8 .u64 ptr = generic(one)+4;\n"
      ".global .align 1 .u8 bytes[8] = {0xFF(generic(hex)), 0xFF00(generic(hex)), 0xFF0000(generic(hex)), "
      "0xFF000000(generic(hex)), 0xFF00000000(generic(hex)), 0xFF0000000000(generic(hex)), "
      "0xFF000000000000(generic(hex)), 0xFF00000000000000(generic(hex))};\n"
      ".const .align 4 .u32 ctab[4] = {10, 20};\n"
      ".global .align 2 .b16 odd[3];\n"
      ".visible .entry noop()\n{\n\tret;\n}\n";
  CUmodule m;
  CUdeviceptr a, one = 0, hex = 0;
  size_t size = 0;
  unsigned u[4];
  int s32 = 0;
  unsigned long long u64 = 0;
  float f32 = 0;
  double f64 = 0;
  unsigned char bytes[8];
  unsigned short odd[3] = {1, 1, 1};
  CONF_BEGIN();
  TU_REQUIRE(conf_ctx(0));
  CONF_REQUIRE_OK(cu.cuModuleLoadData(&m, ptx));
  CONF_OK(cu.cuModuleGetGlobal(&one, &size, m, "one"));
  CONF_OK(cu.cuMemcpyDtoH(u, one, 4));
  TU_CHECK(size == 4 && u[0] == 1);
  CONF_OK(cu.cuModuleGetGlobal(&a, &size, m, "neg"));
  CONF_OK(cu.cuMemcpyDtoH(&s32, a, 4));
  TU_CHECK_EQ_INT(s32, -5);
  CONF_OK(cu.cuModuleGetGlobal(&hex, &size, m, "hex"));
  CONF_OK(cu.cuMemcpyDtoH(&u64, hex, 8));
  TU_CHECK(u64 == 0x1122334455667788ull);
  CONF_OK(cu.cuModuleGetGlobal(&a, &size, m, "flt"));
  CONF_OK(cu.cuMemcpyDtoH(&f32, a, 4));
  TU_CHECK(f32 == 1.5f);
  CONF_OK(cu.cuModuleGetGlobal(&a, &size, m, "dbl"));
  CONF_OK(cu.cuMemcpyDtoH(&f64, a, 8));
  TU_CHECK(f64 == 2.5);
  CONF_OK(cu.cuModuleGetGlobal(&a, &size, m, "dec"));
  CONF_OK(cu.cuMemcpyDtoH(&f32, a, 4));
  TU_CHECK(f32 == 2.25f);
  CONF_OK(cu.cuModuleGetGlobal(&a, &size, m, "vec"));
  CONF_OK(cu.cuMemcpyDtoH(u, a, 16));
  TU_CHECK(size == 16 && u[0] == 1 && u[1] == 2 && u[2] == 3 && u[3] == 4);
  CONF_OK(cu.cuModuleGetGlobal(&a, &size, m, "unsized"));
  CONF_OK(cu.cuMemcpyDtoH(u, a, 12));
  TU_CHECK(size == 12 && u[0] == 7 && u[1] == 8 && u[2] == 9);
  CONF_OK(cu.cuModuleGetGlobal(&a, &size, m, "ptr"));
  CONF_OK(cu.cuMemcpyDtoH(&u64, a, 8));
  TU_CHECK(u64 == (unsigned long long)one + 4);
  CONF_OK(cu.cuModuleGetGlobal(&a, &size, m, "bytes"));
  CONF_OK(cu.cuMemcpyDtoH(bytes, a, 8));
  memcpy(&u64, bytes, 8); /* little-endian bytes of hex's address */
  TU_CHECK(u64 == (unsigned long long)hex);
  CONF_OK(cu.cuModuleGetGlobal(&a, &size, m, "ctab"));
  CONF_OK(cu.cuMemcpyDtoH(u, a, 16));
  TU_CHECK(size == 16 && u[0] == 10 && u[1] == 20 && u[2] == 0 && u[3] == 0);
  CONF_OK(cu.cuModuleGetGlobal(&a, &size, m, "odd"));
  CONF_OK(cu.cuMemcpyDtoH(odd, a, 6));
  TU_CHECK(size == 6 && a % 2 == 0 && odd[0] == 0 && odd[1] == 0 && odd[2] == 0);
  CONF_OK(cu.cuModuleUnload(m));
  conf_ctx_done(0);
}

/* cuLibraryGetGlobal: the global of the current context's module of the library (the one
 * cuLibraryGetModule gives); each context has its own copy, initialised. */
TU_TEST(library_globals_per_context) {
  char* ptx = conf_read_ptx("globals");
  CUlibrary lib;
  CUmodule m;
  CUcontext c0;
  CUdeviceptr a0 = 0, a1 = 0, via_module = 0;
  size_t size = 0;
  unsigned v0 = 0, v1 = 0;
  int two;
  CONF_BEGIN();
  CONF_NEED(cuLibraryLoadData);
  CONF_NEED(cuLibraryGetGlobal);
  TU_REQUIRE(ptx);
  two = conf_device_count() >= 2;
  TU_REQUIRE((c0 = conf_ctx(0)) != NULL);
  CONF_REQUIRE_OK(cu.cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
  CONF_OK(cu.cuLibraryGetGlobal(&a0, &size, lib, "g_scale"));
  TU_CHECK(a0 != 0 && size == 4);
  CONF_EQ(cu.cuLibraryGetGlobal(&a0, &size, lib, "no_such_global"), CUDA_ERROR_NOT_FOUND);
  CONF_OK(cu.cuLibraryGetModule(&m, lib));
  CONF_OK(cu.cuModuleGetGlobal(&via_module, &size, m, "g_scale"));
  TU_CHECK(via_module == a0);
  CONF_OK(cu.cuMemcpyDtoH(&v0, a0, 4));
  TU_CHECK_EQ_INT(v0, 7);
  v0 = 11;
  CONF_OK(cu.cuMemcpyHtoD(a0, &v0, 4));
  if (two) {
    TU_REQUIRE(conf_ctx(1));
    CONF_OK(cu.cuLibraryGetGlobal(&a1, NULL, lib, "g_scale"));
    TU_CHECK(a1 != 0 && a1 != a0);
    CONF_OK(cu.cuMemcpyDtoH(&v1, a1, 4));
    TU_CHECK_EQ_INT(v1, 7); /* its own copy, initialised */
    CONF_OK(cu.cuCtxSetCurrent(c0));
    CONF_OK(cu.cuMemcpyDtoH(&v0, a0, 4));
    TU_CHECK_EQ_INT(v0, 11);
  }
  CONF_OK(cu.cuLibraryUnload(lib));
  conf_ctx_done(0);
  if (two) CONF_OK(cu.cuDevicePrimaryCtxRelease(1));
  free(ptx);
}
/* Strict: cuModuleGetGlobal in another context than the module's, or none; an unloaded
 * module's globals are no longer device memory, and never memory to free. */
TU_TEST(strict_module_globals) {
  char* ptx = conf_read_ptx("globals");
  CUmodule m;
  CUcontext none = NULL, c0 = NULL;
  CUdeviceptr a = 0;
  size_t size = 0;
  unsigned v = 5;
  CONF_STRICT();
  TU_REQUIRE(ptx);
  TU_REQUIRE((c0 = conf_ctx(0)) != NULL);
  CONF_REQUIRE_OK(cu.cuModuleLoadData(&m, ptx));
  CONF_OK(cu.cuModuleGetGlobal(&a, &size, m, "g_scale"));
  CONF_EQ(cu.cuMemFree(a), CUDA_ERROR_INVALID_VALUE);           /* the module's memory */
  CONF_EQ(cu.cuMemcpyHtoD(a, &v, 8), CUDA_ERROR_INVALID_VALUE); /* past its 4 bytes */
  CONF_OK(cu.cuCtxPopCurrent(&none));
  CONF_EQ(cu.cuModuleGetGlobal(&a, &size, m, "g_scale"), CUDA_ERROR_INVALID_CONTEXT);
  if (conf_device_count() >= 2) {
    TU_REQUIRE(conf_ctx(1));
    CONF_EQ(cu.cuModuleGetGlobal(&a, &size, m, "g_scale"), CUDA_ERROR_INVALID_CONTEXT);
    conf_ctx_done(1);
  }
  CONF_OK(cu.cuCtxPushCurrent(c0));
  CONF_OK(cu.cuModuleUnload(m));
  CONF_EQ(cu.cuMemcpyHtoD(a, &v, 4), CUDA_ERROR_INVALID_VALUE);
  conf_ctx_done(0);
  free(ptx);
}

TU_TEST(strict_launch_on_other_context) {
  CUmodule m;
  CUfunction f;
  CUstream s1;
  CUdeviceptr d = 0;
  void* args[1];
  CONF_STRICT();
  if (conf_device_count() < 2) TU_SKIP("needs 2 devices");
  TU_REQUIRE(conf_ctx(1));
  CONF_OK(cu.cuStreamCreate(&s1, 0));
  TU_REQUIRE(conf_ctx(0));
  CONF_REQUIRE_OK(conf_kernel("atomic_inc", &m, &f));
  args[0] = &d;
  CONF_EQ(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s1, args, NULL), CUDA_ERROR_INVALID_HANDLE);
  CONF_EQ(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE); /* no params */
  CONF_OK(cu.cuModuleUnload(m));
  CONF_EQ(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_HANDLE); /* unloaded */
  CONF_OK(cu.cuStreamDestroy(s1));
  conf_ctx_done(0);
  CONF_OK(cu.cuDevicePrimaryCtxRelease(1));
}

TU_MAIN(TU_CASE(vector_add_and_saxpy), TU_CASE(extra_param_buffer_and_atomics), TU_CASE(functions_and_params),
        TU_CASE(bad_images), TU_CASE(load_ex_and_link), TU_CASE(llvm_launch_bounds_and_shared_memory),
        TU_CASE(llvm_jit_refusals_are_logged), TU_CASE(module_globals), TU_CASE(module_global_initialisers),
        TU_CASE(library_globals_per_context), TU_CASE(strict_module_globals), TU_CASE(strict_launch_on_other_context),
        TU_CASE(fault_poisons_context) /* last: a real GPU is unusable after it */)
