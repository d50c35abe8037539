/* PTX from LLVM's NVPTX back end (tests/kernels/llvm_*.ll, regen_llvm.sh), the PTX that
 * IREE, Triton, Julia and Numba hand to the driver, where the rest of the suite loads
 * nvcc's: kernels marked by !nvvm.annotations with launch bounds (.maxntid, .reqntid,
 * .minnctapersm) and what a launch outside them gets; parameters as LLVM lays them out
 * (byval structs, 8- to 64-bit scalars, 60 of them, more than 4 KiB); module globals with
 * initialisers and .const data; dynamic shared memory over 48 KiB and static shared memory
 * beside it; device functions (.func), mangled, '$' and very long names, a module without
 * kernels; a .version newer than the driver and a .target newer than the device; and the
 * same module through the memory and disk caches. Runs on softcuda (twins:
 * tests/kernels/llvm_kernels.c) and on a GPU. */
#include "gpuhal.h"

#include "test_temp_dir.h"
#include "test_util.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* const numba_name =
    "_ZN6cudapy8__main__9axpy_"
    "2412B96cw51cXTLSUwv1sCUt9Uw1VEw0NRRQPKzLTg4gaGKFsG2oMQGEYakJSQB1PQBk0Bynm21OiwU1a0UoLGhDpQE8"
    "oxrNQE_3dE5ArrayIfLi1E1C7mutable7alignedE";

typedef struct fixture {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_info_t info;
  gpuhal_executable_t* exe; /* llvm_kernels.ptx */
} fixture;

/* The driver, device 0 and llvm_kernels.ptx loaded on it: 1, or 0 (skipped or failed). */
static int fixture_open(fixture* f) {
  memset(f, 0, sizeof(*f));
  if (!tu_open_device(&f->driver, &f->device, 0, NULL)) return 0;
  TU_CHECK_OK(gpuhal_device_info(f->device, &f->info));
  TU_CHECK_OK(tu_load_kernel(f->device, "llvm_kernels", &f->exe, NULL));
  if (!f->exe) {
    gpuhal_device_release(f->device);
    gpuhal_driver_release(f->driver);
    return 0;
  }
  return 1;
}

static void fixture_close(fixture* f) {
  gpuhal_executable_release(f->exe);
  gpuhal_device_release(f->device);
  gpuhal_driver_release(f->driver);
}

#define OPEN_OR_RETURN(f)         \
  do {                            \
    if (!fixture_open(f)) return; \
  } while (0)

static gpuhal_kernel_t* kernel_of(gpuhal_executable_t* exe, const char* name) {
  gpuhal_kernel_t* kernel = NULL;
  TU_CHECK_OK(gpuhal_executable_kernel(exe, name, &kernel));
  return kernel;
}

/* Creates a command buffer of `flags` in *cb and records one dispatch in it: what recording
 * said (*cb is the caller's to release either way). */
static gpuhal_status_t begin_dispatch(fixture* f, gpuhal_command_buffer_flags_t flags, gpuhal_kernel_t* kernel,
                                      gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared, uint32_t arg_count,
                                      const gpuhal_arg_t* args, gpuhal_command_buffer_t** cb) {
  gpuhal_status_t st = gpuhal_command_buffer_create(f->device, flags, 0, cb);
  if (!st) st = gpuhal_command_buffer_begin(*cb);
  if (!st) st = gpuhal_cmd_dispatch(*cb, kernel, grid, block, shared, arg_count, args);
  return st;
}

/* Records one dispatch in a new command buffer and returns what recording it said. */
static gpuhal_status_t record_dispatch(fixture* f, gpuhal_command_buffer_flags_t flags, gpuhal_kernel_t* kernel,
                                       gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared, uint32_t arg_count,
                                       const gpuhal_arg_t* args) {
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_status_t st = begin_dispatch(f, flags, kernel, grid, block, shared, arg_count, args, &cb);
  gpuhal_command_buffer_release(cb);
  return st;
}

/* Records, executes and waits for one dispatch; the first failure. */
static gpuhal_status_t run_dispatch(fixture* f, gpuhal_command_buffer_flags_t flags, gpuhal_kernel_t* kernel,
                                    gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared, uint32_t arg_count,
                                    const gpuhal_arg_t* args) {
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_status_t st = begin_dispatch(f, flags, kernel, grid, block, shared, arg_count, args, &cb);
  if (!st) st = gpuhal_command_buffer_end(cb);
  if (!st) st = tu_execute_and_wait(f->driver, f->device, cb, NULL);
  gpuhal_command_buffer_release(cb);
  return st;
}

/* Both command buffer back ends: graphs (kernel nodes) and streams (launches). */
static const gpuhal_command_buffer_flags_t both_backends[2] = {GPUHAL_COMMAND_BUFFER_ONE_SHOT,
                                                               GPUHAL_COMMAND_BUFFER_STREAM};

static gpuhal_buffer_t* zeroed_buffer(fixture* f, uint64_t size) {
  gpuhal_buffer_t* buffer = NULL;
  void* zeros = calloc(1, (size_t)size);
  TU_CHECK_OK(gpuhal_buffer_allocate(f->device, GPUHAL_MEMORY_DEVICE, size, &buffer));
  if (buffer && zeros) TU_CHECK_OK(gpuhal_buffer_write(buffer, 0, zeros, size));
  free(zeros);
  return buffer;
}

/* ---- kernels, device functions and names ---- */

/* Every kernel of the module is found by its .entry name, mangled, '$' and 159-character
 * ones too, and each runs; device functions (.func) and demangled names are not kernels,
 * and the status says what the name is instead. */
TU_TEST(kernels_are_found_by_their_entry_names) {
  static const struct {
    const char* name;
    uint32_t tag;
  } tagged[] = {{"llvm$dollar", 36}, {"julia_vadd_1234", 1234}, {NULL, 2412}};
  fixture f;
  gpuhal_buffer_t* out;
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_kernel_t* again = NULL;
  int i, b;
  OPEN_OR_RETURN(&f);
  out = zeroed_buffer(&f, 64);
  TU_REQUIRE(out != NULL);
  for (i = 0; i < 3; ++i) {
    const char* name = tagged[i].name ? tagged[i].name : numba_name;
    gpuhal_kernel_info_t info;
    gpuhal_arg_t arg = gpuhal_arg_buffer(out, 0);
    kernel = kernel_of(f.exe, name);
    TU_REQUIRE(kernel != NULL);
    TU_CHECK_OK(gpuhal_executable_kernel(f.exe, name, &again));
    TU_CHECK(again == kernel);
    TU_CHECK_OK(gpuhal_kernel_info(kernel, &info));
    TU_CHECK_STR_EQ(info.name, name);
    TU_CHECK_EQ_INT(info.param_count, 1);
    for (b = 0; b < 2; ++b) {
      uint32_t got = 0, zero = 0;
      TU_CHECK_OK(gpuhal_buffer_write(out, 0, &zero, 4));
      TU_CHECK_OK(run_dispatch(&f, both_backends[b], kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(32, 1, 1), 0, 1, &arg));
      TU_CHECK_OK(gpuhal_buffer_read(out, 0, &got, 4));
      TU_CHECK_EQ_INT(got, tagged[i].tag);
    }
  }
  /* The C++-mangled kernel, which calls a device function LLVM renamed (scale.helper ->
   * scale_$_helper): x[i] *= 2.5 over 300 elements in 3 blocks. */
  kernel = kernel_of(f.exe, "_Z10llvm_scalePfjf");
  if (kernel) {
    float x[300];
    gpuhal_buffer_t* xs = NULL;
    gpuhal_arg_t args[3];
    TU_CHECK_OK(gpuhal_buffer_allocate(f.device, GPUHAL_MEMORY_DEVICE, sizeof(x), &xs));
    for (i = 0; i < 300; ++i) x[i] = (float)i;
    if (xs) TU_CHECK_OK(gpuhal_buffer_write(xs, 0, x, sizeof(x)));
    args[0] = gpuhal_arg_buffer(xs, 0);
    args[1] = gpuhal_arg_u32(300);
    args[2] = gpuhal_arg_f32(2.5f);
    TU_CHECK_OK(run_dispatch(&f, GPUHAL_COMMAND_BUFFER_ONE_SHOT, kernel, gpuhal_dim3(3, 1, 1), gpuhal_dim3(128, 1, 1),
                             0, 3, args));
    if (xs) TU_CHECK_OK(gpuhal_buffer_read(xs, 0, x, sizeof(x)));
    for (i = 0; i < 300; ++i)
      if (x[i] != 2.5f * (float)i) {
        TU_CHECK(x[i] == 2.5f * (float)i);
        break;
      }
    gpuhal_buffer_release(xs);
  }
  /* Device functions are not kernels: the driver has no function of that name. */
  TU_CHECK_STATUS(gpuhal_executable_kernel(f.exe, "scale_$_helper", &kernel), GPUHAL_STATUS_NOT_FOUND,
                  "no kernel named 'scale_$_helper' in this PTX executable: it is a device function (.func)");
  TU_CHECK_STATUS(gpuhal_executable_kernel(f.exe, "global_id", &kernel), GPUHAL_STATUS_NOT_FOUND,
                  "is a device function (.func)");
  /* The name before LLVM renamed it, and the demangled name: the status names the kernels
   * there are, those whose names contain it first. */
  TU_CHECK_STATUS(gpuhal_executable_kernel(f.exe, "scale.helper", &kernel), GPUHAL_STATUS_NOT_FOUND,
                  "no kernel named 'scale.helper' in this PTX executable: its kernels: 'llvm_maxntid', "
                  "'llvm_reqntid', 'llvm_reqntid_2d' (12 in all)");
  TU_CHECK_STATUS(gpuhal_executable_kernel(f.exe, "llvm_scale", &kernel), GPUHAL_STATUS_NOT_FOUND,
                  "kernels whose names contain it: '_Z10llvm_scalePfjf'");
  TU_CHECK(kernel == NULL);
  gpuhal_buffer_release(out);
  fixture_close(&f);
}

/* A module of device functions and globals only loads; a kernel lookup in it says there are
 * no kernels, and what the name is. */
TU_TEST(module_without_kernels) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* kernel = NULL;
  if (!tu_open_device(&driver, &device, 0, NULL)) return;
  TU_CHECK_OK(tu_load_kernel(device, "llvm_no_kernels", &exe, NULL));
  if (exe) {
    TU_CHECK_STATUS(gpuhal_executable_kernel(exe, "llvm_helper", &kernel), GPUHAL_STATUS_NOT_FOUND,
                    "is a device function (.func)");
    TU_CHECK_STATUS(gpuhal_executable_kernel(exe, "main", &kernel), GPUHAL_STATUS_NOT_FOUND,
                    "no kernel named 'main' in this PTX executable: the PTX defines no kernels (.entry)");
    TU_CHECK(kernel == NULL);
  }
  gpuhal_executable_release(exe);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

/* ---- launch bounds ---- */

/* !nvvm.annotations maxntidx / minctasm -> .maxntid 128 / .minnctapersm 2: the kernel takes
 * at most 128 threads a block; more is refused when recorded, naming the argument and the
 * limit (also by the occupancy queries); 128 runs. */
TU_TEST(maxntid_bounds_the_block) {
  fixture f;
  gpuhal_kernel_t* kernel;
  gpuhal_kernel_info_t info;
  gpuhal_buffer_t* out;
  gpuhal_arg_t args[2];
  uint32_t got[300], blocks = 0;
  int b, i;
  OPEN_OR_RETURN(&f);
  kernel = kernel_of(f.exe, "llvm_maxntid");
  out = zeroed_buffer(&f, sizeof(got));
  TU_REQUIRE(kernel && out);
  TU_CHECK_OK(gpuhal_kernel_info(kernel, &info));
  TU_CHECK_EQ_INT(info.max_threads_per_block, 128);
  TU_CHECK_EQ_INT(info.required_block[0], 0); /* a bound, not a required shape */
  args[0] = gpuhal_arg_buffer(out, 0);
  args[1] = gpuhal_arg_u32(300);
  for (b = 0; b < 2; ++b) {
    TU_CHECK_STATUS(
        record_dispatch(&f, both_backends[b], kernel, gpuhal_dim3(2, 1, 1), gpuhal_dim3(256, 1, 1), 0, 2, args),
        GPUHAL_STATUS_OUT_OF_RANGE, "argument 'block' has 256 threads; kernel 'llvm_maxntid' allows at most 128");
    /* the bound is on the block's threads, whatever its shape */
    TU_CHECK_STATUS(
        record_dispatch(&f, both_backends[b], kernel, gpuhal_dim3(2, 1, 1), gpuhal_dim3(64, 4, 1), 0, 2, args),
        GPUHAL_STATUS_OUT_OF_RANGE, "allows at most 128");
    memset(got, 0, sizeof(got));
    TU_CHECK_OK(gpuhal_buffer_write(out, 0, got, sizeof(got)));
    TU_CHECK_OK(run_dispatch(&f, both_backends[b], kernel, gpuhal_dim3(3, 1, 1), gpuhal_dim3(128, 1, 1), 0, 2, args));
    TU_CHECK_OK(gpuhal_buffer_read(out, 0, got, sizeof(got)));
    for (i = 0; i < 300; ++i)
      if (got[i] != 2u * (uint32_t)i + 1) {
        TU_CHECK_EQ_INT(got[i], 2 * i + 1);
        break;
      }
  }
  { /* the status names the call made */
    gpuhal_command_buffer_t* cb = NULL;
    gpuhal_dispatch_options_t options;
    memset(&options, 0, sizeof(options));
    TU_CHECK_OK(gpuhal_command_buffer_create(f.device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &cb));
    TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
    TU_CHECK_STATUS(
        gpuhal_cmd_dispatch_ex(cb, kernel, gpuhal_dim3(2, 1, 1), gpuhal_dim3(256, 1, 1), 0, &options, 2, args),
        GPUHAL_STATUS_OUT_OF_RANGE, "gpuhal_cmd_dispatch_ex: argument 'block' has 256 threads");
    gpuhal_command_buffer_release(cb);
  }
  TU_CHECK_STATUS(gpuhal_kernel_occupancy(kernel, 256, 0, &blocks), GPUHAL_STATUS_OUT_OF_RANGE, "1..128");
  TU_CHECK_OK(gpuhal_kernel_occupancy(kernel, 128, 0, &blocks));
  TU_CHECK(blocks >= 2); /* .minnctapersm 2 */
  gpuhal_buffer_release(out);
  fixture_close(&f);
}

/* reqntidx = 64 -> .reqntid 64, 1, 1 and reqntidx/y = 16/4 -> .reqntid 16, 4, 1: a launch must
 * have exactly that block (the PTX ISA makes anything else a launch failure, and LLVM may
 * have folded %ntid to it). Larger, smaller and other shapes of the same size are refused
 * when recorded, naming the argument and the required shape; gpuhal_kernel_info says it. */
TU_TEST(reqntid_requires_the_block) {
  fixture f;
  gpuhal_kernel_t* k1;
  gpuhal_kernel_t* k2;
  gpuhal_kernel_info_t info;
  gpuhal_buffer_t* out;
  gpuhal_arg_t args[2];
  uint32_t got[256];
  int b, i;
  OPEN_OR_RETURN(&f);
  k1 = kernel_of(f.exe, "llvm_reqntid");
  k2 = kernel_of(f.exe, "llvm_reqntid_2d");
  out = zeroed_buffer(&f, sizeof(got));
  TU_REQUIRE(k1 && k2 && out);
  TU_CHECK_OK(gpuhal_kernel_info(k1, &info));
  TU_CHECK_EQ_INT(info.max_threads_per_block, 64);
  TU_CHECK_EQ_INT(info.required_block[0], 64);
  TU_CHECK_EQ_INT(info.required_block[1], 1);
  TU_CHECK_EQ_INT(info.required_block[2], 1);
  TU_CHECK_OK(gpuhal_kernel_info(k2, &info));
  TU_CHECK_EQ_INT(info.max_threads_per_block, 64);
  TU_CHECK_EQ_INT(info.required_block[0], 16);
  TU_CHECK_EQ_INT(info.required_block[1], 4);
  TU_CHECK_EQ_INT(info.required_block[2], 1);
  args[0] = gpuhal_arg_buffer(out, 0);
  args[1] = gpuhal_arg_u32(200);
  for (b = 0; b < 2; ++b) {
    TU_CHECK_STATUS(record_dispatch(&f, both_backends[b], k1, gpuhal_dim3(4, 1, 1), gpuhal_dim3(128, 1, 1), 0, 2, args),
                    GPUHAL_STATUS_OUT_OF_RANGE, "argument 'block'");
    TU_CHECK_STATUS(record_dispatch(&f, both_backends[b], k1, gpuhal_dim3(8, 1, 1), gpuhal_dim3(32, 1, 1), 0, 2, args),
                    GPUHAL_STATUS_INVALID_ARGUMENT,
                    "argument 'block' is 32x1x1; kernel 'llvm_reqntid' requires 64x1x1");
    TU_CHECK_STATUS(record_dispatch(&f, both_backends[b], k2, gpuhal_dim3(1, 1, 1), gpuhal_dim3(64, 1, 1), 0, 1, args),
                    GPUHAL_STATUS_INVALID_ARGUMENT, "requires 16x4x1 (.reqntid)");
    TU_CHECK_STATUS(record_dispatch(&f, both_backends[b], k2, gpuhal_dim3(1, 1, 1), gpuhal_dim3(16, 4, 2), 0, 1, args),
                    GPUHAL_STATUS_OUT_OF_RANGE, "argument 'block'");
    memset(got, 0, sizeof(got));
    TU_CHECK_OK(gpuhal_buffer_write(out, 0, got, sizeof(got)));
    TU_CHECK_OK(run_dispatch(&f, both_backends[b], k1, gpuhal_dim3(4, 1, 1), gpuhal_dim3(64, 1, 1), 0, 2, args));
    TU_CHECK_OK(gpuhal_buffer_read(out, 0, got, sizeof(got)));
    for (i = 0; i < 256; ++i)
      if (got[i] != (i < 200 ? 1000u + (uint32_t)i : 0u)) {
        TU_CHECK_EQ_INT(got[i], i < 200 ? 1000 + i : 0);
        break;
      }
    TU_CHECK_OK(run_dispatch(&f, both_backends[b], k2, gpuhal_dim3(4, 1, 1), gpuhal_dim3(16, 4, 1), 0, 1, args));
    TU_CHECK_OK(gpuhal_buffer_read(out, 0, got, sizeof(got)));
    for (i = 0; i < 256; ++i)
      if (got[i] != (uint32_t)((i % 64) / 16 * 100 + i % 16)) {
        TU_CHECK_EQ_INT(got[i], (i % 64) / 16 * 100 + i % 16);
        break;
      }
  }
  gpuhal_buffer_release(out);
  fixture_close(&f);
}

/* ---- parameters ---- */

typedef struct llvm_s { /* %struct.S = { i32, i64, float, i8 }: 24 bytes, align 8 */
  int32_t a;
  int64_t b;
  float c;
  uint8_t d;
} llvm_s;

/* A byval struct (.param .align 8 .b8 p[24]) between scalars of 8 to 64 bits: the layout
 * gpuhal_kernel_info reports is LLVM's, the values arrive, and an argument of the wrong size
 * is refused naming it. */
TU_TEST(byval_struct_and_mixed_scalars) {
  static const uint32_t offsets[8] = {0, 8, 32, 40, 48, 50, 56, 64};
  static const uint32_t sizes[8] = {8, 24, 4, 8, 2, 1, 8, 4};
  fixture f;
  gpuhal_kernel_t* kernel;
  gpuhal_kernel_info_t info;
  gpuhal_buffer_t* out;
  gpuhal_arg_t args[8];
  llvm_s s;
  uint64_t got[10], want[10];
  uint16_t h = 0xBEEF;
  uint8_t c = 0xC3;
  double d = -3.25;
  float fl = 1.5f, cf = 0.75f;
  uint32_t bits;
  int b, i;
  OPEN_OR_RETURN(&f);
  kernel = kernel_of(f.exe, "llvm_byval");
  out = zeroed_buffer(&f, sizeof(got));
  TU_REQUIRE(kernel && out);
  TU_CHECK_OK(gpuhal_kernel_info(kernel, &info));
  if (info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN) {
    TU_CHECK_EQ_INT(info.param_count, 8);
    for (i = 0; i < 8 && i < (int)info.param_count; ++i) {
      TU_CHECK_EQ_INT(info.param_offsets[i], offsets[i]);
      TU_CHECK_EQ_INT(info.param_sizes[i], sizes[i]);
    }
  }
  memset(&s, 0, sizeof(s));
  s.a = -7;
  s.b = 0x0102030405060708ll;
  s.c = cf;
  s.d = 0x9A;
  args[0] = gpuhal_arg_buffer(out, 0);
  args[1] = gpuhal_arg_bytes(&s, sizeof(s));
  args[2] = gpuhal_arg_i32(-123456);
  args[3] = gpuhal_arg_u64(0xF00DFACE12345678ull);
  args[4] = gpuhal_arg_bytes(&h, 2);
  args[5] = gpuhal_arg_bytes(&c, 1);
  args[6] = gpuhal_arg_f64(d);
  args[7] = gpuhal_arg_f32(fl);
  want[0] = (uint64_t)(int64_t)-7;
  want[1] = 0x0102030405060708ull;
  memcpy(&bits, &cf, 4);
  want[2] = bits;
  want[3] = 0x9A;
  want[4] = (uint64_t)(int64_t)-123456;
  want[5] = 0xF00DFACE12345678ull;
  want[6] = 0xBEEF;
  want[7] = 0xC3;
  memcpy(&want[8], &d, 8);
  memcpy(&bits, &fl, 4);
  want[9] = bits;
  for (b = 0; b < 2; ++b) {
    memset(got, 0, sizeof(got));
    TU_CHECK_OK(gpuhal_buffer_write(out, 0, got, sizeof(got)));
    TU_CHECK_OK(run_dispatch(&f, both_backends[b], kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 8, args));
    TU_CHECK_OK(gpuhal_buffer_read(out, 0, got, sizeof(got)));
    for (i = 0; i < 10; ++i)
      if (got[i] != want[i])
        TU_FAIL_AT(__FILE__, __LINE__, "%s: out[%d] is 0x%llx, not 0x%llx", b ? "STREAM" : "GRAPH", i,
                   (unsigned long long)got[i], (unsigned long long)want[i]);
  }
  if (info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN) {
    /* A u32 for the .u16 parameter, the struct one byte short: refused, naming each. */
    args[4] = gpuhal_arg_u32(h);
    TU_CHECK_STATUS(record_dispatch(&f, GPUHAL_COMMAND_BUFFER_ONE_SHOT, kernel, gpuhal_dim3(1, 1, 1),
                                    gpuhal_dim3(1, 1, 1), 0, 8, args),
                    GPUHAL_STATUS_INVALID_ARGUMENT,
                    "argument 'args[4]' is 4 bytes but parameter 4 of kernel 'llvm_byval' is 2");
    args[4] = gpuhal_arg_bytes(&h, 2);
    args[1] = gpuhal_arg_bytes(&s, sizeof(s) - 1);
    TU_CHECK_STATUS(record_dispatch(&f, GPUHAL_COMMAND_BUFFER_STREAM, kernel, gpuhal_dim3(1, 1, 1),
                                    gpuhal_dim3(1, 1, 1), 0, 8, args),
                    GPUHAL_STATUS_INVALID_ARGUMENT, "argument 'args[1]' is 23 bytes");
  }
  gpuhal_buffer_release(out);
  fixture_close(&f);
}

/* 60 parameters, 32- and 64-bit in turn (.param .u32 / .u64 at LLVM's offsets), through
 * both back ends; one argument short is refused naming the count. */
TU_TEST(sixty_parameters) {
  fixture f;
  gpuhal_kernel_t* kernel;
  gpuhal_kernel_info_t info;
  gpuhal_buffer_t* out;
  gpuhal_arg_t args[60];
  uint64_t got[59], want[59];
  int b, k;
  OPEN_OR_RETURN(&f);
  kernel = kernel_of(f.exe, "llvm_many");
  out = zeroed_buffer(&f, sizeof(got));
  TU_REQUIRE(kernel && out);
  TU_CHECK_OK(gpuhal_kernel_info(kernel, &info));
  if (info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN) {
    TU_CHECK_EQ_INT(info.param_count, 60);
    /* the pointer, 29 pairs of (u32, u64 aligned to 8), the last u32 */
    if (info.param_count == 60) TU_CHECK_EQ_INT(info.param_offsets[59] + info.param_sizes[59], 8 + 29 * 16 + 4);
  }
  args[0] = gpuhal_arg_buffer(out, 0);
  for (k = 1; k < 60; ++k) {
    if (k % 2) {
      int32_t v = -1000 * k - 7;
      args[k] = gpuhal_arg_i32(v);
      want[k - 1] = (uint64_t)(int64_t)v;
    } else {
      uint64_t v = 0x100000000ull * (uint64_t)k + 0xABCDEFull;
      args[k] = gpuhal_arg_u64(v);
      want[k - 1] = v;
    }
  }
  for (b = 0; b < 2; ++b) {
    memset(got, 0, sizeof(got));
    TU_CHECK_OK(gpuhal_buffer_write(out, 0, got, sizeof(got)));
    TU_CHECK_OK(run_dispatch(&f, both_backends[b], kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 60, args));
    TU_CHECK_OK(gpuhal_buffer_read(out, 0, got, sizeof(got)));
    for (k = 0; k < 59; ++k)
      if (got[k] != want[k]) {
        TU_FAIL_AT(__FILE__, __LINE__, "%s: parameter %d arrived as 0x%llx, not 0x%llx", b ? "STREAM" : "GRAPH", k + 1,
                   (unsigned long long)got[k], (unsigned long long)want[k]);
        break;
      }
  }
  if (info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN)
    TU_CHECK_STATUS(record_dispatch(&f, GPUHAL_COMMAND_BUFFER_ONE_SHOT, kernel, gpuhal_dim3(1, 1, 1),
                                    gpuhal_dim3(1, 1, 1), 0, 59, args),
                    GPUHAL_STATUS_INVALID_ARGUMENT, "argument 'arg_count' is 59 but kernel 'llvm_many' has 60");
  gpuhal_buffer_release(out);
  fixture_close(&f);
}

/* Replaces the first `from` in `text` by `to` (a new malloc'ed string; NULL if absent). */
static char* text_replace(const char* text, const char* from, const char* to) {
  const char* at = strstr(text, from);
  size_t head, n;
  char* out;
  if (!at) return NULL;
  head = (size_t)(at - text);
  n = strlen(text) - strlen(from) + strlen(to);
  out = (char*)malloc(n + 1);
  if (!out) return NULL;
  memcpy(out, text, head);
  memcpy(out + head, to, strlen(to));
  strcpy(out + head + strlen(to), at + strlen(from));
  return out;
}

/* More than 4 KiB of parameters (a 4,400-byte struct by value: PTX ISA 8.1, CUDA 12.1):
 * loaded and passed whole. Past the 32,764 bytes a launch holds, an argument is refused
 * when recorded and such PTX does not load, saying why; so does PTX under ISA 8.1 with more
 * than 4,352 bytes. */
TU_TEST(parameters_over_4_kib) {
  fixture f;
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_executable_t* bad = NULL;
  gpuhal_kernel_info_t info;
  gpuhal_buffer_t* out;
  gpuhal_arg_t args[2];
  uint32_t words[1100], got[2];
  size_t size = 0;
  char* ptx = tu_read_kernel_file("llvm_big_param.ptx", &size);
  char* patched;
  gpuhal_status_t st;
  int b, i;
  TU_REQUIRE(ptx != NULL);
  if (!fixture_open(&f)) {
    free(ptx);
    return;
  }
  st = gpuhal_executable_load(f.device, ptx, size, &exe);
  if (gpuhal_status_code(st) == GPUHAL_STATUS_UNIMPLEMENTED && f.info.driver_version < 12010) {
    gpuhal_status_free(st); /* CUDA_ERROR_UNSUPPORTED_PTX_VERSION: PTX ISA 8.1 needs CUDA 12.1 */
    free(ptx);
    fixture_close(&f);
    TU_SKIP("parameters over 4 KiB need CUDA 12.1");
  }
  TU_CHECK_OK(st);
  out = zeroed_buffer(&f, sizeof(got));
  if (exe) kernel = kernel_of(exe, "llvm_big_param");
  if (kernel && out) {
    TU_CHECK_OK(gpuhal_kernel_info(kernel, &info));
    if (info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN && info.param_count == 2)
      TU_CHECK_EQ_INT(info.param_sizes[1], 4400);
    for (i = 0; i < 1100; ++i) words[i] = 0xA5000000u + (uint32_t)i;
    args[0] = gpuhal_arg_buffer(out, 0);
    args[1] = gpuhal_arg_bytes(words, sizeof(words));
    for (b = 0; b < 2; ++b) {
      memset(got, 0, sizeof(got));
      TU_CHECK_OK(gpuhal_buffer_write(out, 0, got, sizeof(got)));
      TU_CHECK_OK(run_dispatch(&f, both_backends[b], kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 2, args));
      TU_CHECK_OK(gpuhal_buffer_read(out, 0, got, sizeof(got)));
      TU_CHECK_EQ_INT(got[0], 0xA5000000u);
      TU_CHECK_EQ_INT(got[1], 0xA5000000u + 1099);
    }
    /* More than a launch's parameters hold, in one argument. */
    {
      char* huge = (char*)calloc(1, 40000);
      TU_REQUIRE(huge != NULL);
      args[1] = gpuhal_arg_bytes(huge, 40000);
      TU_CHECK_STATUS(record_dispatch(&f, GPUHAL_COMMAND_BUFFER_ONE_SHOT, kernel, gpuhal_dim3(1, 1, 1),
                                      gpuhal_dim3(1, 1, 1), 0, 2, args),
                      GPUHAL_STATUS_INVALID_ARGUMENT,
                      "argument 'args[1]' has 40000 bytes; a kernel's parameters hold at most 32764");
      free(huge);
    }
  }
  /* PTX whose parameters pass 32,764 bytes, and PTX ISA 7.0 with 4,408: the JIT refuses them,
   * and the status carries its reason. */
  patched = text_replace(ptx, "llvm_big_param_param_1[4400]", "llvm_big_param_param_1[32760]");
  TU_REQUIRE(patched != NULL);
  TU_CHECK_STATUS(gpuhal_executable_load(f.device, patched, strlen(patched), &bad), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "too much parameter space");
  free(patched);
  patched = text_replace(ptx, ".version 8.1", ".version 7.0");
  TU_REQUIRE(patched != NULL);
  TU_CHECK_STATUS(gpuhal_executable_load(f.device, patched, strlen(patched), &bad), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "too much parameter space");
  free(patched);
  TU_CHECK(bad == NULL);
  gpuhal_buffer_release(out);
  gpuhal_executable_release(exe);
  free(ptx);
  fixture_close(&f);
}

/* Where the driver cannot say what a kernel's parameters are (no cuFuncGetParamInfo before
 * CUDA 12.4; softcuda: a fault), arguments are not checked against them, but arguments that
 * could fit no kernel's parameters (32,764 bytes) are still refused. */
TU_TEST(argument_bytes_are_bounded_without_parameter_info) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_kernel_info_t info;
  gpuhal_buffer_t* out = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t args[3];
  char* half = (char*)calloc(1, 20000);
  if (!tu_softcuda()) {
    free(half);
    TU_SKIP("needs softcuda's fault injection");
  }
  TU_REQUIRE(half != NULL);
  if (!tu_open_device(&driver, &device, 0, NULL)) {
    free(half);
    return;
  }
  TU_CHECK_EQ_INT(tu_softcuda_faults("cuFuncGetParamInfo@*=CUDA_ERROR_NOT_SUPPORTED"), 0);
  TU_CHECK_OK(tu_load_kernel(device, "llvm_big_param", &exe, &kernel));
  tu_softcuda_faults(NULL);
  TU_CHECK_OK(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, 8, &out));
  if (kernel && out) {
    TU_CHECK_OK(gpuhal_kernel_info(kernel, &info));
    TU_CHECK(info.param_count == GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN);
    TU_CHECK_OK(gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb));
    TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
    args[0] = gpuhal_arg_buffer(out, 0);
    args[1] = gpuhal_arg_bytes(half, 20000);
    args[2] = gpuhal_arg_bytes(half, 20000);
    TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args),
                    GPUHAL_STATUS_INVALID_ARGUMENT,
                    "argument 'args' holds 40008 bytes in its 3 arguments; a kernel's parameters hold at most 32764");
    gpuhal_command_buffer_release(cb);
  }
  free(half);
  gpuhal_buffer_release(out);
  gpuhal_executable_release(exe);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

/* ---- module data ---- */

/* Module-scope .global variables with initialisers and .const data are in place when the
 * kernel first runs. */
TU_TEST(module_globals_and_const_data) {
  static const uint32_t want[6] = {11, 22, 33, 44, 7, 0x40200000u /* 2.5f */};
  fixture f;
  gpuhal_kernel_t* kernel;
  gpuhal_buffer_t* out;
  gpuhal_arg_t arg;
  uint32_t got[6];
  int i;
  OPEN_OR_RETURN(&f);
  kernel = kernel_of(f.exe, "llvm_globals");
  out = zeroed_buffer(&f, sizeof(got));
  TU_REQUIRE(kernel && out);
  arg = gpuhal_arg_buffer(out, 0);
  TU_CHECK_OK(
      run_dispatch(&f, GPUHAL_COMMAND_BUFFER_STREAM, kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(32, 1, 1), 0, 1, &arg));
  TU_CHECK_OK(gpuhal_buffer_read(out, 0, got, sizeof(got)));
  for (i = 0; i < 6; ++i) TU_CHECK_EQ_INT(got[i], want[i]);
  gpuhal_buffer_release(out);
  fixture_close(&f);
}

/* .extern .shared: up to the 48 KiB default without asking; more is refused when recorded,
 * pointing at gpuhal_kernel_set_max_dynamic_shared; after it, 64 KiB runs (a sum over all of
 * it checks every word was there). Past the opt-in limit the setting is refused. */
TU_TEST(dynamic_shared_memory_over_48_kib) {
  fixture f;
  gpuhal_kernel_t* kernel;
  gpuhal_kernel_info_t info;
  gpuhal_buffer_t* out;
  gpuhal_arg_t args[2];
  uint32_t got[2] = {0, 0}, want = 0, big = 65536, i;
  int b;
  OPEN_OR_RETURN(&f);
  kernel = kernel_of(f.exe, "llvm_dyn_shared");
  out = zeroed_buffer(&f, sizeof(got));
  TU_REQUIRE(kernel && out);
  TU_CHECK_OK(gpuhal_kernel_info(kernel, &info));
  TU_CHECK_EQ_INT(info.static_shared_bytes, 0);
  TU_CHECK_EQ_INT(info.max_dynamic_shared_bytes, 49152);
  TU_CHECK_EQ_INT(info.max_dynamic_shared_optin_bytes, f.info.max_shared_memory_per_block_optin);
  if (info.max_dynamic_shared_optin_bytes < (int)big) {
    gpuhal_buffer_release(out);
    fixture_close(&f);
    TU_SKIP("the device has less than 64 KiB of shared memory per block");
  }
  args[0] = gpuhal_arg_buffer(out, 0);
  args[1] = gpuhal_arg_u32(big / 4);
  TU_CHECK_STATUS(record_dispatch(&f, GPUHAL_COMMAND_BUFFER_STREAM, kernel, gpuhal_dim3(2, 1, 1),
                                  gpuhal_dim3(256, 1, 1), big, 2, args),
                  GPUHAL_STATUS_OUT_OF_RANGE,
                  "argument 'shared_bytes' (65536) exceeds kernel 'llvm_dyn_shared''s dynamic shared memory limit of "
                  "49152 bytes (raise it with gpuhal_kernel_set_max_dynamic_shared");
  TU_CHECK_OK(gpuhal_kernel_set_max_dynamic_shared(kernel, big));
  TU_CHECK_OK(gpuhal_kernel_info(kernel, &info));
  TU_CHECK_EQ_INT(info.max_dynamic_shared_bytes, big);
  for (i = 0; i < big / 4; ++i) want += 3 * i;
  for (b = 0; b < 2; ++b) {
    got[0] = got[1] = 0;
    TU_CHECK_OK(gpuhal_buffer_write(out, 0, got, sizeof(got)));
    TU_CHECK_OK(run_dispatch(&f, both_backends[b], kernel, gpuhal_dim3(2, 1, 1), gpuhal_dim3(256, 1, 1), big, 2, args));
    TU_CHECK_OK(gpuhal_buffer_read(out, 0, got, sizeof(got)));
    TU_CHECK_EQ_INT(got[0], want);
    TU_CHECK_EQ_INT(got[1], want);
  }
  TU_CHECK_STATUS(gpuhal_kernel_set_max_dynamic_shared(kernel, (uint32_t)info.max_dynamic_shared_optin_bytes + 4),
                  GPUHAL_STATUS_OUT_OF_RANGE, "argument 'bytes'");
  gpuhal_buffer_release(out);
  fixture_close(&f);
}

/* 16 KiB of static shared memory (LLVM's .shared array) beside dynamic shared memory:
 * gpuhal_kernel_info counts it, the dynamic limits are what is left of 48 KiB and of the
 * opt-in limit, a launch past them is refused, and the kernel runs within them. */
TU_TEST(static_shared_memory_lowers_the_dynamic_limit) {
  fixture f;
  gpuhal_kernel_t* kernel;
  gpuhal_kernel_info_t info;
  gpuhal_buffer_t* out;
  gpuhal_arg_t arg;
  uint32_t got[256];
  int b, i;
  OPEN_OR_RETURN(&f);
  kernel = kernel_of(f.exe, "llvm_static_shared");
  out = zeroed_buffer(&f, sizeof(got));
  TU_REQUIRE(kernel && out);
  TU_CHECK_OK(gpuhal_kernel_info(kernel, &info));
  TU_CHECK_EQ_INT(info.static_shared_bytes, 16384);
  TU_CHECK(info.max_dynamic_shared_bytes + info.static_shared_bytes <= 49152);
  TU_CHECK_EQ_INT(info.max_dynamic_shared_optin_bytes, f.info.max_shared_memory_per_block_optin - 16384);
  arg = gpuhal_arg_buffer(out, 0);
  TU_CHECK_STATUS(record_dispatch(&f, GPUHAL_COMMAND_BUFFER_ONE_SHOT, kernel, gpuhal_dim3(1, 1, 1),
                                  gpuhal_dim3(256, 1, 1), (uint32_t)info.max_dynamic_shared_bytes + 4, 1, &arg),
                  GPUHAL_STATUS_OUT_OF_RANGE, "argument 'shared_bytes'");
  TU_CHECK_STATUS(gpuhal_kernel_set_max_dynamic_shared(kernel, (uint32_t)f.info.max_shared_memory_per_block_optin),
                  GPUHAL_STATUS_OUT_OF_RANGE, "less 16384 bytes of static shared memory");
  for (b = 0; b < 2; ++b) {
    memset(got, 0, sizeof(got));
    TU_CHECK_OK(gpuhal_buffer_write(out, 0, got, sizeof(got)));
    TU_CHECK_OK(
        run_dispatch(&f, both_backends[b], kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(256, 1, 1), 1024, 1, &arg));
    TU_CHECK_OK(gpuhal_buffer_read(out, 0, got, sizeof(got)));
    for (i = 0; i < 256; ++i)
      if (got[i] != 256u - (uint32_t)i) {
        TU_CHECK_EQ_INT(got[i], 256 - i);
        break;
      }
  }
  gpuhal_buffer_release(out);
  fixture_close(&f);
}

/* ---- what the driver cannot take ---- */

/* A .version newer than the driver's JIT knows and a .target newer than the device: the
 * load fails with a status that names the version or target, and the device's, on each
 * path a PTX takes to the driver. */
TU_TEST(ptx_too_new_for_the_driver_or_device) {
  fixture f;
  gpuhal_executable_t* exe = NULL;
  gpuhal_device_t* disk_device = NULL;
  gpuhal_device_t* module_device = NULL;
  gpuhal_device_params_t params;
  size_t size = 0;
  char* ptx = tu_read_kernel_file("llvm_kernels.ptx", &size);
  char* new_version;
  char* new_target;
  char dir[600];
  int d;
  TU_REQUIRE(ptx != NULL);
  if (!fixture_open(&f)) {
    free(ptx);
    return;
  }
  new_version = text_replace(ptx, ".version 7.0", ".version 9.9");
  /* sm_100 needs PTX ISA 8.6: both changed, so that only the target is too new */
  new_target = text_replace(ptx, ".version 7.0\n.target sm_80", ".version 8.6\n.target sm_100");
  TU_REQUIRE(new_version && new_target);
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "llvm_ptx"));
  memset(&params, 0, sizeof(params));
  params.module_cache_dir = dir;
  TU_CHECK_OK(gpuhal_device_create(f.driver, 0, &params, &disk_device));
  memset(&params, 0, sizeof(params));
  params.module_cache_dir = "";
  params.modules_per_context = 1;
  TU_CHECK_OK(gpuhal_device_create(f.driver, 0, &params, &module_device));
  /* the driver's shared library (the default), cuLink to a cubin (the disk cache's path),
   * a module of the device's context alone (cuModuleLoadDataEx) */
  for (d = 0; d < 3; ++d) {
    gpuhal_device_t* device = d == 0 ? f.device : d == 1 ? disk_device : module_device;
    char text[256];
    const char* want = text;
    if (!device) continue;
    TU_CHECK_STATUS(gpuhal_executable_load(device, new_version, strlen(new_version), &exe), GPUHAL_STATUS_UNIMPLEMENTED,
                    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION");
    TU_CHECK_STATUS(gpuhal_executable_load(device, new_version, strlen(new_version), &exe), GPUHAL_STATUS_UNIMPLEMENTED,
                    "the PTX is .version 9.9, .target sm_80; device 0 is compute capability");
    if (f.info.compute_capability_major < 10) {
      snprintf(text, sizeof(text),
               "the PTX's .target sm_100 is for a newer GPU than device 0 (compute capability %d.%d): have the "
               "compiler target sm_%d%d or older",
               f.info.compute_capability_major, f.info.compute_capability_minor, f.info.compute_capability_major,
               f.info.compute_capability_minor);
      TU_CHECK_STATUS(gpuhal_executable_load(device, new_target, strlen(new_target), &exe),
                      GPUHAL_STATUS_INVALID_ARGUMENT, want);
    }
    TU_CHECK(exe == NULL);
  }
  gpuhal_device_release(disk_device);
  gpuhal_device_release(module_device);
  tu_remove_dir(dir);
  free(new_version);
  free(new_target);
  free(ptx);
  fixture_close(&f);
}

/* ---- the caches ---- */

/* The module through the caches: a second load is a memory hit (no compile); on a device
 * with a disk cache the first load writes the compiled file and, after a trim, the next load
 * is a disk hit. Kernels of a module built from a cubin keep their launch bounds. */
TU_TEST(memory_and_disk_cache) {
  fixture f;
  gpuhal_executable_t* again = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_device_params_t params;
  gpuhal_module_cache_stats_t s0, s1;
  gpuhal_kernel_t* kernel;
  gpuhal_kernel_info_t info;
  gpuhal_buffer_t* out = NULL;
  gpuhal_arg_t args[2];
  char dir[600];
  int round;
  OPEN_OR_RETURN(&f);
  TU_CHECK_OK(gpuhal_device_module_cache_stats(f.device, &s0));
  TU_CHECK_OK(tu_load_kernel(f.device, "llvm_kernels", &again, NULL));
  TU_CHECK_OK(gpuhal_device_module_cache_stats(f.device, &s1));
  TU_CHECK_EQ_INT(s1.hits, s0.hits + 1);
  TU_CHECK_EQ_INT(s1.compiles, s0.compiles);
  gpuhal_executable_release(again);

  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "llvm_ptx"));
  memset(&params, 0, sizeof(params));
  params.module_cache_dir = dir;
  TU_CHECK_OK(gpuhal_device_create(f.driver, 0, &params, &device));
  TU_REQUIRE(device != NULL);
  TU_CHECK_OK(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, 8, &out));
  for (round = 0; round < 2 && out; ++round) {
    uint32_t got[2] = {0, 0};
    TU_CHECK_OK(gpuhal_device_module_cache_stats(device, &s0));
    TU_CHECK_OK(tu_load_kernel(device, "llvm_kernels", &exe, NULL));
    TU_CHECK_OK(gpuhal_device_module_cache_stats(device, &s1));
    TU_CHECK_EQ_INT(s1.disk_enabled, 1);
    TU_CHECK_EQ_INT(s1.disk_writes - s0.disk_writes, round == 0 ? 1 : 0);
    TU_CHECK_EQ_INT(s1.disk_hits - s0.disk_hits, round == 0 ? 0 : 1);
    if (!exe) break;
    kernel = kernel_of(exe, "llvm_reqntid");
    if (kernel) {
      gpuhal_command_buffer_t* cb = NULL;
      TU_CHECK_OK(gpuhal_kernel_info(kernel, &info));
      TU_CHECK_EQ_INT(info.max_threads_per_block, 64);
      TU_CHECK_EQ_INT(info.required_block[0], 64);
      args[0] = gpuhal_arg_buffer(out, 0);
      args[1] = gpuhal_arg_u32(2);
      TU_CHECK_OK(gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &cb));
      TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
      TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(32, 1, 1), 0, 2, args),
                      GPUHAL_STATUS_INVALID_ARGUMENT, "requires 64x1x1");
      TU_CHECK_OK(gpuhal_cmd_dispatch(cb, kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(64, 1, 1), 0, 2, args));
      TU_CHECK_OK(gpuhal_command_buffer_end(cb));
      TU_CHECK_OK(tu_execute_and_wait(f.driver, device, cb, NULL));
      gpuhal_command_buffer_release(cb);
      TU_CHECK_OK(gpuhal_buffer_read(out, 0, got, sizeof(got)));
      TU_CHECK_EQ_INT(got[0], 1000);
      TU_CHECK_EQ_INT(got[1], 1001);
    }
    gpuhal_executable_release(exe);
    exe = NULL;
    /* the executed command buffer holds the executable until its execute is retired */
    TU_CHECK_OK(gpuhal_device_wait_idle(device, gpuhal_timeout_infinite()));
    TU_CHECK_OK(gpuhal_device_module_cache_trim(device));
  }
  gpuhal_buffer_release(out);
  gpuhal_device_release(device);
  tu_remove_dir(dir);
  fixture_close(&f);
}

TU_MAIN(TU_CASE(kernels_are_found_by_their_entry_names), TU_CASE(module_without_kernels),
        TU_CASE(maxntid_bounds_the_block), TU_CASE(reqntid_requires_the_block), TU_CASE(byval_struct_and_mixed_scalars),
        TU_CASE(sixty_parameters), TU_CASE(parameters_over_4_kib),
        TU_CASE(argument_bytes_are_bounded_without_parameter_info), TU_CASE(module_globals_and_const_data),
        TU_CASE(dynamic_shared_memory_over_48_kib), TU_CASE(static_shared_memory_lowers_the_dynamic_limit),
        TU_CASE(ptx_too_new_for_the_driver_or_device), TU_CASE(memory_and_disk_cache))
