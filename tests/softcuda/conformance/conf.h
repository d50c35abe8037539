/* conf.h - shared loader and helpers of the softcuda conformance tests.
 *
 * The tests talk to the raw driver API through gpuhal's own declarations: they dlopen
 * $GPUHAL_CUDA_LIBRARY (default libcuda.so.1), look up cuGetProcAddress_v2 and resolve
 * every table entry through it at its pinned version, so the same binary runs against
 * softcuda and a real driver. Checks only softcuda can make call conf_strict() first,
 * which skips the case on a real driver.
 */
#ifndef SOFTCUDA_CONF_H
#define SOFTCUDA_CONF_H

#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../../src/cuda_api.h"
#include "test_util.h"

#define CONF_UNUSED __attribute__((unused))
/* test_util.h's tu_softcuda: conf_is_softcuda is its twin here */
static int (*const conf_tu_softcuda_)(void) CONF_UNUSED = tu_softcuda;

typedef struct conf_api {
#define CONF_FIELD(name, dlsym_name, pinned, params) gpuhal_PFN_##name name;
  GPUHAL_CUDA_REQUIRED_SYMBOLS(CONF_FIELD)
  GPUHAL_CUDA_OPTIONAL_SYMBOLS(CONF_FIELD)
  gpuhal_PFN_cuGetProcAddress cuGetProcAddress;
} conf_api;

static conf_api cu;
static void* conf_lib;
static int conf_loaded;

/* softcuda's query API (NULL on a real driver) */
static unsigned long long (*sq_calls)(const char*);
static unsigned long long (*sq_switches)(int);
static unsigned long long (*sq_round_trips)(int);
static unsigned long long (*sq_violations)(int);
static int (*sq_set_faults)(const char*);
static void (*sq_clear_faults)(void);
static size_t (*sq_leak_report)(int);
static unsigned long long (*sq_leaks)(void);

static CONF_UNUSED void conf_sym(void* dst, const char* name) {
  void* p = conf_lib ? dlsym(conf_lib, name) : NULL;
  memcpy(dst, &p, sizeof p);
}

/* Loads the driver once; 0 when it cannot (the case then fails). */
static CONF_UNUSED int conf_load(void) {
  const char* path;
  if (conf_loaded) return conf_loaded > 0;
  conf_loaded = -1;
  path = getenv("GPUHAL_CUDA_LIBRARY");
  conf_lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!conf_lib) {
    fprintf(stderr, "conf: cannot load the driver: %s\n", dlerror());
    return 0;
  }
  conf_sym(&cu.cuGetProcAddress, "cuGetProcAddress_v2");
  if (!cu.cuGetProcAddress) return 0;
#define CONF_RESOLVE(name, dlsym_name, pinned, params)                                                      \
  {                                                                                                         \
    void* p = NULL;                                                                                         \
    CUdriverProcAddressQueryResult st;                                                                      \
    if (cu.cuGetProcAddress(#name, &p, pinned, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS) p = NULL; \
    memcpy(&cu.name, &p, sizeof p);                                                                         \
  }
  GPUHAL_CUDA_REQUIRED_SYMBOLS(CONF_RESOLVE)
  GPUHAL_CUDA_OPTIONAL_SYMBOLS(CONF_RESOLVE)
  conf_sym(&sq_calls, "softcuda_query_calls");
  conf_sym(&sq_switches, "softcuda_query_context_switches");
  conf_sym(&sq_round_trips, "softcuda_query_host_round_trips");
  conf_sym(&sq_violations, "softcuda_query_violations");
  conf_sym(&sq_set_faults, "softcuda_set_faults");
  conf_sym(&sq_clear_faults, "softcuda_clear_faults");
  conf_sym(&sq_leak_report, "softcuda_leak_report");
  conf_sym(&sq_leaks, "softcuda_query_leaks");
  if (!cu.cuInit || cu.cuInit(0) != CUDA_SUCCESS) return 0;
  conf_loaded = 1;
  return 1;
}

static CONF_UNUSED int conf_is_softcuda(void) { return conf_load() && sq_calls != NULL; }

static CONF_UNUSED const char* conf_err(CUresult r) {
  const char* s = NULL;
  if (!cu.cuGetErrorName || cu.cuGetErrorName(r, &s) != CUDA_SUCCESS || !s) return "?";
  return s;
}

/* Checks a CUresult, naming both codes on a mismatch. */
#define CONF_EQ(expr, want)                                                                                     \
  do {                                                                                                          \
    CUresult conf_r_ = (expr), conf_w_ = (want);                                                                \
    if (conf_r_ != conf_w_)                                                                                     \
      TU_FAIL_AT(__FILE__, __LINE__, "%s -> %s (%d), expected %s (%d)", #expr, conf_err(conf_r_), (int)conf_r_, \
                 conf_err(conf_w_), (int)conf_w_);                                                              \
  } while (0)
#define CONF_OK(expr) CONF_EQ(expr, CUDA_SUCCESS)
#define CONF_REQUIRE_OK(expr)                                                                              \
  do {                                                                                                     \
    CUresult conf_r2_ = (expr);                                                                            \
    if (conf_r2_ != CUDA_SUCCESS) {                                                                        \
      TU_FAIL_AT(__FILE__, __LINE__, "required: %s -> %s (%d)", #expr, conf_err(conf_r2_), (int)conf_r2_); \
      return;                                                                                              \
    }                                                                                                      \
  } while (0)

/* Every case starts with CONF_BEGIN: loads the driver or fails the case. */
#define CONF_BEGIN() TU_REQUIRE(conf_load())
/* Strictness-only checks: softcuda enforces them, a real driver may not. */
#define CONF_STRICT()                                                    \
  do {                                                                   \
    CONF_BEGIN();                                                        \
    if (!conf_is_softcuda()) TU_SKIP("strictness check: softcuda only"); \
  } while (0)
#define CONF_NEED(fn)                                            \
  do {                                                           \
    if (!cu.fn) TU_SKIP(#fn " is not available in this driver"); \
  } while (0)

/* Retains device dev's primary context and makes it current. */
static CONF_UNUSED CUcontext conf_ctx(int dev) {
  CUcontext c = NULL;
  if (cu.cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS) return NULL;
  cu.cuCtxSetCurrent(c);
  return c;
}
static CONF_UNUSED void conf_ctx_done(int dev) {
  cu.cuCtxSetCurrent(NULL);
  cu.cuDevicePrimaryCtxRelease(dev);
}

static CONF_UNUSED int conf_device_count(void) {
  int n = 0;
  cu.cuDeviceGetCount(&n);
  return n;
}

/* Reads tests/kernels/NAME.ptx (NUL-terminated; the caller frees). */
static CONF_UNUSED char* conf_read_ptx(const char* name) {
  char path[1024];
  FILE* f;
  long n;
  char* buf;
  snprintf(path, sizeof path, "%s/%s.ptx", CONF_KERNELS_DIR, name);
  f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = (char*)calloc(1, (size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  return buf;
}

/* Loads tests/kernels/NAME.ptx in the current context and gets entry NAME. */
static CONF_UNUSED CUresult conf_kernel(const char* name, CUmodule* mod, CUfunction* fn) {
  char* ptx = conf_read_ptx(name);
  CUresult r;
  if (!ptx) return CUDA_ERROR_FILE_NOT_FOUND;
  r = cu.cuModuleLoadData(mod, ptx);
  free(ptx);
  if (r == CUDA_SUCCESS) r = cu.cuModuleGetFunction(fn, *mod, name);
  return r;
}

static CONF_UNUSED double conf_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Launches spin_us(us) on s as one thread. */
static CONF_UNUSED CUresult conf_spin(CUfunction spin, CUstream s, unsigned long long us) {
  void* args[1];
  args[0] = &us;
  return cu.cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
}

#endif /* SOFTCUDA_CONF_H */
