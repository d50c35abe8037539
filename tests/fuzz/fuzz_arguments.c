/* libFuzzer target: argument validation of the recording, copy, semaphore and queue entry
 * points against a live softcuda device. The input is a little program: each step picks a
 * call and its operands (offsets, sizes, slots, dims, pattern sizes, argument kinds, names)
 * from the bytes, biased towards edges (0, 1, size-1, size, size+1, 2^32, UINT64_MAX).
 * Every call must return OK or a status whose message names the gpuhal function, and never
 * crash, hang or touch memory it should not (ASan/UBSan). Accepted command buffers are
 * executed; each input ends with the device idle and everything it made released.
 * Needs GPUHAL_CUDA_LIBRARY (softcuda); seeds: tests/fuzz/corpus/arguments. */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

#include <stdio.h>
#include <stdlib.h>

#ifndef GPUHAL_KERNELS_DIR
#define GPUHAL_KERNELS_DIR "tests/kernels"
#endif

#define FUZZ_REQUIRE(c)                                                                \
  do {                                                                                 \
    if (!(c)) {                                                                        \
      fprintf(stderr, "fuzz_arguments: broken promise: %s (line %d)\n", #c, __LINE__); \
      abort();                                                                         \
    }                                                                                  \
  } while (0)

#define BUFFER_BYTES 4096
#define HOST_BYTES 8192

static struct {
  int ready;
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_t* other;      /* a second device, for wrong-device cases (may be NULL) */
  gpuhal_buffer_t* buffers[3]; /* device, pinned: on `device`; device: on `other` */
  gpuhal_executable_t* exe;
  gpuhal_kernel_t* kernel; /* fill_u32(unsigned* dst, unsigned value, unsigned n) */
  gpuhal_semaphore_t* semaphore;
  unsigned char host[HOST_BYTES];
} F;

static void fuzz_teardown(void) {
  int i;
  if (!F.ready) return;
  for (i = 0; i < 3; ++i) gpuhal_buffer_release(F.buffers[i]);
  gpuhal_executable_release(F.exe);
  gpuhal_semaphore_release(F.semaphore);
  gpuhal_device_release(F.other);
  gpuhal_device_release(F.device);
  gpuhal_driver_release(F.driver);
  F.ready = 0;
}

static void fuzz_must(gpuhal_status_t st, const char* what) {
  if (st) {
    fprintf(stderr, "fuzz_arguments: set-up failed: %s: %s\n", what, gpuhal_status_message(st));
    abort();
  }
}

static void fuzz_setup(void) {
  gpuhal_device_params_t params;
  FILE* f;
  char path[1024];
  long n;
  char* ptx;
  int count = 0;
  if (F.ready) return;
  memset(&params, 0, sizeof(params));
  params.queue_count = 2;
  fuzz_must(gpuhal_driver_create(NULL, &F.driver), "driver_create");
  fuzz_must(gpuhal_driver_device_count(F.driver, &count), "device_count");
  fuzz_must(gpuhal_device_create(F.driver, 0, &params, &F.device), "device_create");
  if (count > 1) fuzz_must(gpuhal_device_create(F.driver, 1, NULL, &F.other), "device_create 1");
  fuzz_must(gpuhal_buffer_allocate(F.device, GPUHAL_MEMORY_DEVICE, BUFFER_BYTES, &F.buffers[0]), "buffer");
  fuzz_must(gpuhal_buffer_allocate(F.device, GPUHAL_MEMORY_HOST_PINNED, BUFFER_BYTES, &F.buffers[1]), "buffer");
  if (F.other) fuzz_must(gpuhal_buffer_allocate(F.other, GPUHAL_MEMORY_DEVICE, BUFFER_BYTES, &F.buffers[2]), "buffer");
  snprintf(path, sizeof(path), "%s/fill_u32.ptx", GPUHAL_KERNELS_DIR);
  f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz_arguments: cannot read %s\n", path);
    abort();
  }
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  ptx = (char*)malloc((size_t)n + 1);
  FUZZ_REQUIRE(ptx && fread(ptx, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  fuzz_must(gpuhal_executable_load(F.device, ptx, (size_t)n, &F.exe), "executable_load");
  free(ptx);
  fuzz_must(gpuhal_executable_kernel(F.exe, "fill_u32", &F.kernel), "executable_kernel");
  fuzz_must(gpuhal_semaphore_create(F.driver, 0, &F.semaphore), "semaphore_create");
  F.ready = 1;
  atexit(fuzz_teardown);
}

/* ---- reading the program ---- */
typedef struct reader_s {
  const uint8_t* p;
  size_t left;
} reader_t;

static uint8_t rd_u8(reader_t* r) {
  if (!r->left) return 0;
  r->left--;
  return *r->p++;
}
static uint64_t rd_raw64(reader_t* r) {
  uint64_t v = 0;
  int i;
  for (i = 0; i < 8; ++i) v = (v << 8) | rd_u8(r);
  return v;
}
/* A size or offset, usually near an edge of a 4096-byte buffer. */
static uint64_t rd_size(reader_t* r) {
  static const uint64_t edges[] = {0,
                                   1,
                                   2,
                                   3,
                                   4,
                                   7,
                                   8,
                                   15,
                                   16,
                                   255,
                                   256,
                                   1024,
                                   4092,
                                   4095,
                                   4096,
                                   4097,
                                   8192,
                                   0xFFFFFFFFull,
                                   0x100000000ull,
                                   UINT64_MAX - 4095,
                                   UINT64_MAX - 1,
                                   UINT64_MAX};
  uint8_t k = rd_u8(r);
  if (k < 200) return edges[k % (sizeof(edges) / sizeof(edges[0]))];
  if (k < 240) return rd_u8(r) * 16u;
  return rd_raw64(r);
}
static uint32_t rd_u32(reader_t* r) { return (uint32_t)rd_size(r); }

static gpuhal_buffer_t* rd_buffer(reader_t* r) {
  uint8_t k = rd_u8(r) % 5;
  if (k < 3) return F.buffers[k]; /* [2] may be NULL (no second device) */
  if (k == 3) return NULL;
  return (gpuhal_buffer_t*)(void*)F.semaphore; /* an object of the wrong type */
}
static gpuhal_buffer_ref_t rd_ref(reader_t* r) {
  gpuhal_buffer_t* b = rd_buffer(r);
  uint64_t offset = rd_size(r);
  if (rd_u8(r) & 1) return gpuhal_ref_slot(rd_u32(r) % 6, offset);
  return gpuhal_ref_buffer(b, offset);
}
static gpuhal_arg_t rd_arg(reader_t* r) {
  switch (rd_u8(r) % 6) {
    case 0: return gpuhal_arg_buffer(rd_buffer(r), rd_size(r));
    case 1: return gpuhal_arg_slot(rd_u32(r) % 6, rd_size(r));
    case 2: return gpuhal_arg_u32(rd_u32(r));
    case 3: return gpuhal_arg_u64(rd_size(r));
    case 4: return gpuhal_arg_bytes(F.host, rd_u32(r) % 40); /* 0..39 bytes of plain data */
    default: return gpuhal_arg_bytes(NULL, rd_u32(r) % 9);
  }
}

/* Any status must name the gpuhal function it came from; take and free it. */
static int check(gpuhal_status_t st) {
  if (!st) return 1;
  FUZZ_REQUIRE(gpuhal_status_message(st) != NULL && gpuhal_status_message(st)[0] != 0);
  if (gpuhal_status_code(st) == GPUHAL_STATUS_INVALID_ARGUMENT || gpuhal_status_code(st) == GPUHAL_STATUS_OUT_OF_RANGE)
    FUZZ_REQUIRE(strstr(gpuhal_status_message(st), "gpuhal_") != NULL);
  gpuhal_status_free(st);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reader_t r;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_buffer_t* allocas[4] = {NULL, NULL, NULL, NULL};
  uint32_t slots;
  int steps = 0, i, recording, dispatched = 0;
  fuzz_setup();
  r.p = data;
  r.left = size;
  slots = rd_u8(&r) % 4;
  recording = check(gpuhal_command_buffer_create(F.device, rd_u8(&r) & 3, slots, &cb)) &&
              check(gpuhal_command_buffer_begin(cb));
  while (r.left > 0 && steps++ < 64) {
    uint8_t op = rd_u8(&r) % 12;
    switch (op) {
      case 0: {
        uint64_t pattern[2] = {rd_raw64(&r), rd_raw64(&r)};
        gpuhal_buffer_ref_t dst = rd_ref(&r);
        uint64_t n = rd_size(&r);
        check(gpuhal_cmd_fill(cb, dst, n, (rd_u8(&r) & 7) ? pattern : NULL, rd_u32(&r) % 20));
        break;
      }
      case 1: {
        gpuhal_buffer_ref_t src = rd_ref(&r), dst = rd_ref(&r);
        check(gpuhal_cmd_copy(cb, src, dst, rd_size(&r)));
        break;
      }
      case 2: {
        gpuhal_buffer_ref_t dst = rd_ref(&r);
        uint64_t n = rd_size(&r);
        /* The host source really has HOST_BYTES; a larger size goes with NULL, which must
         * be refused before anything is read. */
        check(gpuhal_cmd_update(cb, n <= HOST_BYTES ? F.host : NULL, dst, n));
        break;
      }
      case 3: {
        gpuhal_arg_t args[8];
        uint32_t count = rd_u8(&r) % 9, k;
        gpuhal_dim3_t grid, block;
        grid = gpuhal_dim3(rd_u32(&r), rd_u32(&r), rd_u32(&r));
        block = gpuhal_dim3(rd_u32(&r), rd_u32(&r), rd_u32(&r));
        for (k = 0; k < count; ++k) args[k] = rd_arg(&r);
        if (check(gpuhal_cmd_dispatch(cb, (rd_u8(&r) % 8) ? F.kernel : NULL, grid, block, rd_u32(&r), count,
                                      count ? args : NULL)))
          dispatched = 1;
        break;
      }
      case 4: check(gpuhal_cmd_barrier(cb)); break;
      case 5: {
        gpuhal_buffer_t* b = rd_buffer(&r);
        uint64_t offset = rd_size(&r), n = rd_size(&r);
        if (rd_u8(&r) & 1)
          check(gpuhal_buffer_read(b, offset, n <= HOST_BYTES ? F.host : NULL, n));
        else
          check(gpuhal_buffer_write(b, offset, n <= HOST_BYTES ? F.host : NULL, n));
        break;
      }
      case 6: {
        uint64_t value = 0;
        switch (rd_u8(&r) % 3) {
          case 0: check(gpuhal_semaphore_signal(F.semaphore, rd_size(&r))); break;
          case 1: check(gpuhal_semaphore_query(F.semaphore, (rd_u8(&r) & 1) ? &value : NULL)); break;
          default: check(gpuhal_semaphore_wait(F.semaphore, rd_size(&r), gpuhal_timeout_immediate())); break;
        }
        break;
      }
      case 7: {
        int k = rd_u8(&r) % 4;
        if (!allocas[k]) {
          check(gpuhal_queue_alloca(F.device, rd_u32(&r) % 4, gpuhal_semaphore_list_empty(),
                                    gpuhal_semaphore_list_empty(), rd_size(&r), &allocas[k]));
        } else {
          check(gpuhal_queue_dealloca((rd_u8(&r) & 7) ? F.device : F.other, rd_u32(&r) % 4,
                                      gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), allocas[k]));
        }
        break;
      }
      case 8: {
        char name[24];
        gpuhal_kernel_t* k = NULL;
        uint32_t len = rd_u8(&r) % sizeof(name), j;
        for (j = 0; j < len; ++j) name[j] = (char)rd_u8(&r);
        name[len] = 0;
        check(gpuhal_executable_kernel(F.exe, (rd_u8(&r) & 7) ? name : NULL, &k));
        break;
      }
      case 9: check(gpuhal_kernel_set_max_dynamic_shared(F.kernel, rd_u32(&r))); break;
      case 10: {
        gpuhal_semaphore_t* list[2];
        uint64_t values[2];
        gpuhal_semaphore_list_t l;
        list[0] = F.semaphore;
        list[1] = (rd_u8(&r) & 1) ? F.semaphore : NULL;
        values[0] = rd_size(&r);
        values[1] = rd_size(&r);
        l.count = rd_u8(&r) % 4;
        l.semaphores = (rd_u8(&r) & 7) ? list : NULL;
        l.values = (rd_u8(&r) & 7) ? values : NULL;
        if (l.count > 2) l.count = 2; /* the arrays hold two */
        check(gpuhal_semaphores_wait((gpuhal_wait_mode_t)(rd_u8(&r) % 3), l, gpuhal_timeout_immediate()));
        break;
      }
      default: {
        gpuhal_command_buffer_t* other = NULL;
        if (check(gpuhal_command_buffer_create(rd_u8(&r) & 1 ? F.device : F.other, rd_u32(&r), rd_u32(&r) % 70000,
                                               &other)))
          gpuhal_command_buffer_release(other);
        break;
      }
    }
  }
  /* A recorded dispatch is not executed: gpuhal checks a dispatch's arguments against the
   * kernel's parameters (count, sizes, buffers in range), not what the kernel does with
   * them; fill_u32 told to write more words than its buffer holds faults on a GPU too (the
   * fuzzer found exactly that). Everything else recorded does run. */
  if (recording && check(gpuhal_command_buffer_end(cb)) && !dispatched) {
    gpuhal_buffer_t* table[3];
    gpuhal_binding_table_t bindings;
    uint32_t t;
    for (t = 0; t < 3; ++t) table[t] = F.buffers[t % 2];
    bindings.count = slots;
    bindings.buffers = table;
    bindings.offsets = NULL;
    check(gpuhal_queue_execute(F.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), cb,
                               slots ? &bindings : NULL));
  }
  for (i = 0; i < 4; ++i) gpuhal_buffer_release(allocas[i]);
  gpuhal_command_buffer_release(cb);
  {
    /* A failed execute may have lost nothing: injected faults are off here, so the device
     * must still be healthy and idle within a second. */
    gpuhal_status_t st = gpuhal_device_wait_idle(F.device, gpuhal_timeout_relative_ns(10000000000ll));
    if (st) fprintf(stderr, "fuzz_arguments: wait_idle: %s\n", gpuhal_status_message(st));
    FUZZ_REQUIRE(st == NULL);
  }
  return 0;
}
