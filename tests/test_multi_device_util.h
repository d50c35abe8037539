/* test_multi_device_util.h - helpers of the multi-device and channel tests and of
 * bench_multi_gpu (include after gpuhal.h with GPUHAL_IMPLEMENTATION): a fixture with
 * several devices, kernel loading, element conversions, the softcuda counters. */
#ifndef GPUHAL_TEST_MULTI_DEVICE_UTIL_H
#define GPUHAL_TEST_MULTI_DEVICE_UTIL_H

#include <dlfcn.h>
#include "test_util.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wunused-function"

#ifndef GPUHAL_KERNELS_DIR
#define GPUHAL_KERNELS_DIR "tests/kernels"
#endif
#define MD_MAX_DEVICES 8

static gpuhal_timeout_t md_seconds(int s) { return gpuhal_timeout_relative_ns((int64_t)s * 1000000000ll); }

typedef struct md_fixture_s {
  gpuhal_driver_t* driver;
  int count;
  gpuhal_device_t* devices[MD_MAX_DEVICES];
  gpuhal_executable_t* exe[MD_MAX_DEVICES];
  gpuhal_kernel_t* spin_store[MD_MAX_DEVICES]; /* (unsigned* dst, unsigned value, unsigned n, u64 us) */
} md_fixture_t;

static void md_print_status(const char* what, gpuhal_status_t s) {
  fprintf(stderr, "  %s: %s\n", what, gpuhal_status_message(s));
  gpuhal_status_free(s);
}

/* The device parameters md_open uses (NULL: the defaults). */
static const gpuhal_device_params_t* md_device_params;

/* Opens up to `want` devices (at least `need`); 0 when there are not enough. */
static int md_open(md_fixture_t* f, int want, int need, const char* nccl_library) {
  gpuhal_driver_options_t options;
  gpuhal_status_t s;
  int count = 0, i;
  memset(f, 0, sizeof(*f));
  memset(&options, 0, sizeof(options));
  options.nccl_library = nccl_library;
  s = gpuhal_driver_create(&options, &f->driver);
  if (!s) s = gpuhal_driver_device_count(f->driver, &count);
  if (s) {
    md_print_status("driver", s);
    gpuhal_driver_release(f->driver);
    f->driver = NULL;
    return 0;
  }
  if (count < need) {
    fprintf(stderr, "  %d device(s), the test needs %d\n", count, need);
    gpuhal_driver_release(f->driver);
    f->driver = NULL;
    return 0;
  }
  f->count = count < want ? count : want;
  if (f->count > MD_MAX_DEVICES) f->count = MD_MAX_DEVICES;
  for (i = 0; i < f->count; ++i) {
    s = gpuhal_device_create(f->driver, i, md_device_params, &f->devices[i]);
    if (s) {
      md_print_status("device", s);
      while (i-- > 0) gpuhal_device_release(f->devices[i]);
      gpuhal_driver_release(f->driver);
      f->driver = NULL;
      return 0;
    }
  }
  return 1;
}

static char* md_read_file(const char* name, size_t* size) { return tu_read_kernel_file(name, size); }

/* Loads spin_store on every device of the fixture. */
static gpuhal_status_t md_load_kernels(md_fixture_t* f) {
  size_t size = 0;
  char* ptx = md_read_file("spin_store.ptx", &size);
  gpuhal_status_t s = NULL;
  int i;
  if (!ptx) return gpuhal_status_make(GPUHAL_STATUS_NOT_FOUND, "cannot read %s/spin_store.ptx", GPUHAL_KERNELS_DIR);
  for (i = 0; i < f->count && !s; ++i) {
    s = gpuhal_executable_load(f->devices[i], ptx, size, &f->exe[i]);
    if (!s) s = gpuhal_executable_kernel(f->exe[i], "spin_store", &f->spin_store[i]);
  }
  free(ptx);
  return s;
}

static void md_close(md_fixture_t* f) {
  int i;
  for (i = 0; i < f->count; ++i) {
    gpuhal_status_free(gpuhal_device_wait_idle(f->devices[i], md_seconds(60)));
    gpuhal_executable_release(f->exe[i]);
    gpuhal_device_release(f->devices[i]);
  }
  gpuhal_driver_release(f->driver);
  memset(f, 0, sizeof(*f));
}

/* ---- softcuda counters (absent on a real driver) ---- */
static unsigned long long md_softcuda_calls(const char* entry) { return tu_softcuda_calls(entry); }
static unsigned long long md_softcuda_switches_this_thread(void) {
  typedef unsigned long long (*fn_t)(int);
  void* p = tu_softcuda_symbol("softcuda_query_context_switches");
  fn_t fn;
  if (!p) return 0;
  memcpy(&fn, &p, sizeof(fn));
  return fn(0);
}

/* ---- elements as doubles ---- */
static float md_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  float v;
  if (exp == 0) {
    v = ldexpf((float)man, -24);
    return sign ? -v : v;
  }
  bits = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
  memcpy(&v, &bits, 4);
  return v;
}
/* Exact for the small integers and quarters the tests use. */
static uint16_t md_float_to_half(float v) {
  uint32_t bits, sign, man;
  int exp;
  memcpy(&bits, &v, 4);
  sign = (bits >> 16) & 0x8000;
  if (v == 0.0f) return (uint16_t)sign;
  exp = (int)((bits >> 23) & 0xff) - 127 + 15;
  man = bits & 0x7fffff;
  return (uint16_t)(sign | ((uint32_t)exp << 10) | (man >> 13));
}
static uint16_t md_float_to_bf16(float v) {
  uint32_t bits;
  memcpy(&bits, &v, 4);
  return (uint16_t)(bits >> 16);
}
static float md_bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float v;
  memcpy(&v, &bits, 4);
  return v;
}

static void md_set(void* base, gpuhal_element_type_t t, size_t i, double v) {
  switch (t) {
    case GPUHAL_ELEMENT_INT8: ((int8_t*)base)[i] = (int8_t)v; break;
    case GPUHAL_ELEMENT_UINT8: ((uint8_t*)base)[i] = (uint8_t)v; break;
    case GPUHAL_ELEMENT_INT32: ((int32_t*)base)[i] = (int32_t)v; break;
    case GPUHAL_ELEMENT_UINT32: ((uint32_t*)base)[i] = (uint32_t)v; break;
    case GPUHAL_ELEMENT_INT64: ((int64_t*)base)[i] = (int64_t)v; break;
    case GPUHAL_ELEMENT_UINT64: ((uint64_t*)base)[i] = (uint64_t)v; break;
    case GPUHAL_ELEMENT_FLOAT16: ((uint16_t*)base)[i] = md_float_to_half((float)v); break;
    case GPUHAL_ELEMENT_BFLOAT16: ((uint16_t*)base)[i] = md_float_to_bf16((float)v); break;
    case GPUHAL_ELEMENT_FLOAT32: ((float*)base)[i] = (float)v; break;
    default: ((double*)base)[i] = v; break;
  }
}
static double md_get(const void* base, gpuhal_element_type_t t, size_t i) {
  switch (t) {
    case GPUHAL_ELEMENT_INT8: return ((const int8_t*)base)[i];
    case GPUHAL_ELEMENT_UINT8: return ((const uint8_t*)base)[i];
    case GPUHAL_ELEMENT_INT32: return ((const int32_t*)base)[i];
    case GPUHAL_ELEMENT_UINT32: return ((const uint32_t*)base)[i];
    case GPUHAL_ELEMENT_INT64: return (double)((const int64_t*)base)[i];
    case GPUHAL_ELEMENT_UINT64: return (double)((const uint64_t*)base)[i];
    case GPUHAL_ELEMENT_FLOAT16: return md_half_to_float(((const uint16_t*)base)[i]);
    case GPUHAL_ELEMENT_BFLOAT16: return md_bf16_to_float(((const uint16_t*)base)[i]);
    case GPUHAL_ELEMENT_FLOAT32: return ((const float*)base)[i];
    default: return ((const double*)base)[i];
  }
}
static const char* md_type_name(gpuhal_element_type_t t) {
  static const char* const names[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                      "uint64", "float16", "float32", "float64", "bfloat16"};
  return (unsigned)t < 10 ? names[t] : "?";
}

#endif /* GPUHAL_TEST_MULTI_DEVICE_UTIL_H */
