/* Shared by test_command_buffer.c (STREAM recorder, validation) and
 * test_command_buffer_graph.c (GRAPH recorder, graph structure): every test body takes
 * the recorder flag, so both recorders pass the same checks, byte for byte. */
#ifndef TEST_COMMAND_BUFFER_COMMON_H
#define TEST_COMMAND_BUFFER_COMMON_H

#include "test_internals.h"

#include "test_util.h"

/* ---- fixture: a device and the test kernels ---- */
typedef struct cbt {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe[6];
  gpuhal_kernel_t* vector_add; /* (const float* a, const float* b, float* c, unsigned n) */
  gpuhal_kernel_t* saxpy;      /* (float a, const float* x, float* y, unsigned n) */
  gpuhal_kernel_t* fill_u32;   /* (unsigned* dst, unsigned value, unsigned n) */
  gpuhal_kernel_t* atomic_inc; /* (unsigned* counter) */
  gpuhal_kernel_t* spin_store; /* (unsigned* dst, unsigned value, unsigned n, u64 us) */
  uint64_t rng;
} cbt;

static char* cbt_read_file(const char* name, size_t* size) { return tu_read_kernel_file(name, size); }

static gpuhal_status_t cbt_load(cbt* t, int index, const char* name, gpuhal_kernel_t** out) {
  return tu_load_kernel(t->device, name, &t->exe[index], out);
}

static void cbt_close(cbt* t) {
  int i;
  (void)tu_softcuda; /* not every file that includes this uses it */
  if (t->device) gpuhal_status_free(gpuhal_device_wait_idle(t->device, gpuhal_timeout_relative_ns(30000000000ll)));
  for (i = 0; i < 6; ++i) gpuhal_executable_release(t->exe[i]);
  gpuhal_device_release(t->device);
  gpuhal_driver_release(t->driver);
  memset(t, 0, sizeof(*t));
}

/* The device parameters cbt_open uses (NULL: the defaults). */
static const gpuhal_device_params_t* cbt_device_params;

/* 1: ready; 0: the case is done (skipped, or failed and reported). */
static int cbt_open(cbt* t) {
  int count = 0;
  gpuhal_status_t st;
  memset(t, 0, sizeof(*t));
  t->rng = 0x9E3779B97F4A7C15ull;
  st = gpuhal_driver_create(NULL, &t->driver);
  if (!st) st = gpuhal_driver_device_count(t->driver, &count);
  if (!st && count == 0) {
    cbt_close(t);
    tu_state.skipped = 1;
    tu_state.skip_reason = "no CUDA device";
    return 0;
  }
  if (!st) st = gpuhal_device_create(t->driver, 0, cbt_device_params, &t->device);
  if (!st) st = cbt_load(t, 0, "vector_add", &t->vector_add);
  if (!st) st = cbt_load(t, 1, "saxpy", &t->saxpy);
  if (!st) st = cbt_load(t, 2, "fill_u32", &t->fill_u32);
  if (!st) st = cbt_load(t, 3, "atomic_inc", &t->atomic_inc);
  if (!st) st = cbt_load(t, 4, "spin_store", &t->spin_store);
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "fixture: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
    cbt_close(t);
    return 0;
  }
  return 1;
}

static uint64_t cbt_next(cbt* t) {
  t->rng ^= t->rng << 13;
  t->rng ^= t->rng >> 7;
  t->rng ^= t->rng << 17;
  return t->rng;
}
static void cbt_random_bytes(cbt* t, void* dst, size_t size) {
  unsigned char* p = (unsigned char*)dst;
  size_t i;
  for (i = 0; i < size; ++i) p[i] = (unsigned char)(cbt_next(t) >> 24);
}

/* A device buffer of `size` random bytes, mirrored in *out_host (malloc'ed). */
static gpuhal_status_t cbt_random_buffer(cbt* t, uint64_t size, gpuhal_buffer_t** out, unsigned char** out_host) {
  gpuhal_status_t st;
  *out_host = (unsigned char*)malloc((size_t)size);
  cbt_random_bytes(t, *out_host, (size_t)size);
  st = gpuhal_buffer_allocate(t->device, GPUHAL_MEMORY_DEVICE, size, out);
  if (!st) st = gpuhal_buffer_write(*out, 0, *out_host, size);
  return st;
}

/* 1 when the buffer holds exactly `expected`; reports the first difference. */
static int cbt_buffer_equals(gpuhal_buffer_t* buffer, const unsigned char* expected, uint64_t size, const char* what) {
  unsigned char* got = (unsigned char*)malloc((size_t)size);
  gpuhal_status_t st = gpuhal_buffer_read(buffer, 0, got, size);
  uint64_t i;
  int ok = 1;
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "reading %s: %s", what, gpuhal_status_message(st));
    gpuhal_status_free(st);
    free(got);
    return 0;
  }
  for (i = 0; i < size; ++i) {
    if (got[i] != expected[i]) {
      TU_FAIL_AT(__FILE__, __LINE__, "%s: byte %llu is 0x%02x, expected 0x%02x", what, (unsigned long long)i, got[i],
                 expected[i]);
      ok = 0;
      break;
    }
  }
  free(got);
  return ok;
}

/* Executes and waits (30 s at most); returns the execute's status. */
static gpuhal_status_t cbt_run(cbt* t, gpuhal_command_buffer_t* cb, const gpuhal_binding_table_t* table) {
  return tu_execute_and_wait(t->driver, t->device, cb, table);
}

static const char* cbt_mode_name(uint32_t mode) { return (mode & GPUHAL_COMMAND_BUFFER_STREAM) ? "STREAM" : "GRAPH"; }

/* ---- bodies ---- */

/* Copy, update, fill and two dispatches in one command buffer, checked byte for byte. */
static void body_commands_bytes(uint32_t mode) {
  cbt t;
  enum { N = 1000, BYTES = 4096 };
  gpuhal_buffer_t* a = NULL;
  gpuhal_buffer_t* b = NULL;
  gpuhal_buffer_t* fa = NULL;
  gpuhal_buffer_t* fb = NULL;
  gpuhal_buffer_t* fc = NULL;
  unsigned char *ha = NULL, *hb = NULL, *hfa = NULL, *hfb = NULL, *hfc = NULL;
  unsigned char update[333], update_copy[333];
  unsigned char pattern[8];
  float alpha = 1.5f;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t args[4];
  float *xa, *xb, *xc;
  int i;
  if (!cbt_open(&t)) return;
  TU_CHECK_OK(cbt_random_buffer(&t, BYTES, &a, &ha));
  TU_CHECK_OK(cbt_random_buffer(&t, BYTES, &b, &hb));
  TU_CHECK_OK(cbt_random_buffer(&t, N * 4, &fa, &hfa));
  TU_CHECK_OK(cbt_random_buffer(&t, N * 4, &fb, &hfb));
  TU_CHECK_OK(cbt_random_buffer(&t, N * 4, &fc, &hfc));
  /* Floats with small exact values, so that a + b and alpha * x + y are exact anywhere. */
  xa = (float*)(void*)hfa, xb = (float*)(void*)hfb, xc = (float*)(void*)hfc;
  for (i = 0; i < N; ++i) {
    xa[i] = (float)(int)(cbt_next(&t) % 1000);
    xb[i] = (float)(int)(cbt_next(&t) % 1000);
  }
  TU_CHECK_OK(gpuhal_buffer_write(fa, 0, hfa, N * 4));
  TU_CHECK_OK(gpuhal_buffer_write(fb, 0, hfb, N * 4));
  cbt_random_bytes(&t, update, sizeof(update));
  cbt_random_bytes(&t, pattern, sizeof(pattern));

  TU_CHECK_OK(gpuhal_command_buffer_create(t.device, mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(a, 17), gpuhal_ref_buffer(b, 1001), 1234));
  TU_CHECK_OK(gpuhal_cmd_update(cb, update, gpuhal_ref_buffer(b, 3000), sizeof(update)));
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(a, 8 * 300), 8 * 41, pattern, 8));
  args[0] = gpuhal_arg_buffer(fa, 0);
  args[1] = gpuhal_arg_buffer(fb, 0);
  args[2] = gpuhal_arg_buffer(fc, 0);
  args[3] = gpuhal_arg_u32(N);
  TU_CHECK_OK(
      gpuhal_cmd_dispatch(cb, t.vector_add, gpuhal_dim3((N + 127) / 128, 1, 1), gpuhal_dim3(128, 1, 1), 0, 4, args));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  /* fc = alpha * fa + fc (reads what vector_add wrote: ordered by the barrier) */
  args[0] = gpuhal_arg_f32(alpha);
  args[1] = gpuhal_arg_buffer(fa, 0);
  args[2] = gpuhal_arg_buffer(fc, 0);
  args[3] = gpuhal_arg_bytes(&i, 4); /* i is N after the loop */
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.saxpy, gpuhal_dim3((N + 63) / 64, 1, 1), gpuhal_dim3(64, 1, 1), 0, 4, args));
  /* The host value was copied at record time: changing it now changes nothing. */
  i = 7;
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  /* Likewise the update's bytes: clobbering the source after recording changes nothing. */
  memcpy(update_copy, update, sizeof(update));
  memset(update, 0, sizeof(update));
  TU_CHECK_OK(cbt_run(&t, cb, NULL));

  /* The model. */
  memcpy(hb + 1001, ha + 17, 1234);
  memcpy(hb + 3000, update_copy, sizeof(update_copy));
  for (i = 0; i < 8 * 41; ++i) ha[8 * 300 + i] = pattern[i % 8];
  for (i = 0; i < N; ++i) xc[i] = alpha * xa[i] + (xa[i] + xb[i]);
  TU_CHECK(cbt_buffer_equals(a, ha, BYTES, "copy source with the fill"));
  TU_CHECK(cbt_buffer_equals(b, hb, BYTES, "copy and update destination"));
  TU_CHECK(cbt_buffer_equals(fc, hfc, N * 4, "vector_add + saxpy"));
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(a);
  gpuhal_buffer_release(b);
  gpuhal_buffer_release(fa);
  gpuhal_buffer_release(fb);
  gpuhal_buffer_release(fc);
  free(ha), free(hb), free(hfa), free(hfb), free(hfc);
  cbt_close(&t);
}

/* Every pattern size at offsets that are odd multiples of it, odd lengths, through a
 * buffer, through a slot, and through a slot whose table offset misaligns the pattern. */
static void body_fill_patterns(uint32_t mode) {
  static const uint32_t sizes[5] = {1, 2, 4, 8, 16};
  static const uint32_t counts[6] = {1, 3, 17, 255, 1023, 65537};
  enum { BYTES = 4 << 20 };
  cbt t;
  gpuhal_buffer_t* buf = NULL;
  gpuhal_buffer_t* slotbuf = NULL;
  unsigned char *host = NULL, *shost = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_binding_table_t table;
  uint64_t table_offset = 1; /* misaligns every pattern size > 1 */
  uint64_t cursor = 0, scursor = 0;
  uint32_t s, c, k;
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(cbt_random_buffer(&t, BYTES, &buf, &host));
  TU_REQUIRE_OK(cbt_random_buffer(&t, BYTES, &slotbuf, &shost));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode, 1, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  for (s = 0; s < 5; ++s) {
    uint32_t ps = sizes[s];
    for (c = 0; c < 6; ++c) {
      unsigned char pattern[16];
      uint64_t size = (uint64_t)ps * counts[c];
      uint64_t offset = ((cursor + 2 * ps - 1) / (2 * ps)) * 2 * ps + ps; /* an odd multiple of ps */
      uint64_t soffset = ((scursor + 2 * ps - 1) / (2 * ps)) * 2 * ps + ps;
      uint64_t i;
      cbt_random_bytes(&t, pattern, sizeof(pattern));
      if (c == 1) memset(pattern, pattern[0], sizeof(pattern)); /* reducible: memset-able whatever ps */
      if (offset + size > BYTES || soffset + table_offset + size > BYTES) continue;
      TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buf, offset), size, pattern, ps));
      TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_slot(0, soffset), size, pattern, ps));
      for (i = 0; i < size; ++i) host[offset + i] = pattern[i % ps];
      for (i = 0; i < size; ++i) shost[table_offset + soffset + i] = pattern[i % ps];
      cursor = offset + size;
      scursor = soffset + size;
    }
  }
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  table.count = 1;
  table.buffers = &slotbuf;
  table.offsets = &table_offset;
  TU_CHECK_OK(cbt_run(&t, cb, &table));
  TU_CHECK(cbt_buffer_equals(buf, host, BYTES, "fills through a buffer"));
  TU_CHECK(cbt_buffer_equals(slotbuf, shost, BYTES, "fills through a slot at table offset 1"));
  (void)k;
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buf);
  gpuhal_buffer_release(slotbuf);
  free(host), free(shost);
  cbt_close(&t);
}

/* A slow writer (spin_store: spins 20 ms, then stores) and a reader (copy) after a
 * barrier: without the barrier the copy runs during the spin and reads the old value. */
static void body_barrier_orders(uint32_t mode) {
  cbt t;
  gpuhal_buffer_t* src = NULL;
  gpuhal_buffer_t* dst = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_arg_t args[4];
  uint32_t zero = 0, got[4] = {0, 0, 0, 0};
  int i;
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 16, &src));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 16, &dst));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb)); /* leading: harmless */
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(src, 0), 16, &zero, 4));
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(dst, 0), 16, &zero, 4));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  args[0] = gpuhal_arg_buffer(src, 0);
  args[1] = gpuhal_arg_u32(42);
  args[2] = gpuhal_arg_u32(4);
  args[3] = gpuhal_arg_u64(20000);
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.spin_store, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 4, args));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb)); /* repeated: harmless */
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(src, 0), gpuhal_ref_buffer(dst, 0), 16));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb)); /* trailing: harmless */
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(cbt_run(&t, cb, NULL));
  TU_CHECK_OK(gpuhal_buffer_read(dst, 0, got, sizeof(got)));
  for (i = 0; i < 4; ++i) TU_CHECK_EQ_INT(got[i], 42);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(src);
  gpuhal_buffer_release(dst);
  cbt_close(&t);
}

/* One REUSABLE command buffer executed 1,000 times, the binding table rotating over four
 * (counter, mirror) pairs: atomic_inc(slot 0); barrier; copy slot 0 -> slot 1. Each
 * counter ends at 250 and each mirror equals its counter. */
static void body_reusable_rotating(uint32_t mode) {
  enum { PAIRS = 4, RUNS = 1000 };
  cbt t;
  gpuhal_buffer_t* counters[PAIRS];
  gpuhal_buffer_t* mirrors[PAIRS];
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t* sem = NULL;
  gpuhal_arg_t arg;
  uint32_t zero = 0;
  int i;
  int64_t start;
  if (!cbt_open(&t)) return;
  memset(counters, 0, sizeof(counters));
  memset(mirrors, 0, sizeof(mirrors));
  for (i = 0; i < PAIRS; ++i) {
    TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 256, &counters[i]));
    TU_CHECK_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 256, &mirrors[i]));
    TU_CHECK_OK(gpuhal_buffer_write(counters[i], 0, &zero, 4));
    TU_CHECK_OK(gpuhal_buffer_write(mirrors[i], 0, &zero, 4));
  }
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode | GPUHAL_COMMAND_BUFFER_REUSABLE, 2, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  arg = gpuhal_arg_slot(0, 0);
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.atomic_inc, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 1, &arg));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_slot(0, 0), gpuhal_ref_slot(1, 0), 4));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &sem));
  start = gpuhal_now_ns();
  for (i = 0; i < RUNS && !tu_state.failed; ++i) {
    gpuhal_buffer_t* bound[2];
    gpuhal_binding_table_t table;
    uint64_t value = (uint64_t)i + 1;
    bound[0] = counters[i % PAIRS];
    bound[1] = mirrors[i % PAIRS];
    table.count = 2;
    table.buffers = bound;
    table.offsets = NULL;
    TU_CHECK_OK(gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(),
                                     gpuhal_semaphore_list_one(&sem, &value), cb, &table));
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(sem, RUNS, gpuhal_timeout_relative_ns(60000000000ll)));
  fprintf(stderr, "  %s: %d executes with rotating tables in %.1f ms\n", cbt_mode_name(mode), RUNS,
          (double)(gpuhal_now_ns() - start) / 1e6);
  for (i = 0; i < PAIRS; ++i) {
    uint32_t c = 0, m = 0;
    TU_CHECK_OK(gpuhal_buffer_read(counters[i], 0, &c, 4));
    TU_CHECK_OK(gpuhal_buffer_read(mirrors[i], 0, &m, 4));
    TU_CHECK_EQ_INT(c, RUNS / PAIRS);
    TU_CHECK_EQ_INT(m, RUNS / PAIRS);
  }
  gpuhal_semaphore_release(sem);
  gpuhal_command_buffer_release(cb);
  for (i = 0; i < PAIRS; ++i) {
    gpuhal_buffer_release(counters[i]);
    gpuhal_buffer_release(mirrors[i]);
  }
  cbt_close(&t);
}

/* A command buffer recorded while its buffer is a queue_alloca not yet issued (no address):
 * fill (8-byte pattern) + dispatch + update into it, then copy it out. The execute waits on
 * the alloca; the gate that holds the alloca back opens only after everything is queued. */
static void body_late_alloca(uint32_t mode) {
  enum { BYTES = 4096 };
  cbt t;
  gpuhal_semaphore_t* gate = NULL;
  gpuhal_semaphore_t* allocated = NULL;
  gpuhal_semaphore_t* done = NULL;
  gpuhal_buffer_t* scratch = NULL;
  gpuhal_buffer_t* out = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  unsigned char pattern[8], update[100], expected[BYTES];
  uint64_t one = 1, two = 2, address = 0;
  gpuhal_arg_t args[3];
  int i;
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &gate));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &allocated));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &done));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, BYTES, &out));
  TU_REQUIRE_OK(gpuhal_queue_alloca(t.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                    gpuhal_semaphore_list_one(&allocated, &one), BYTES, &scratch));
  /* On the event path the alloca waits for its gate on the host, so it has no address yet;
   * with GPU-resident values it is issued at once behind a GPU wait (and has one). */
  if (!gpuhal_driver_has_feature(t.driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS))
    TU_CHECK_STATUS(gpuhal_buffer_device_address(scratch, &address), GPUHAL_STATUS_FAILED_PRECONDITION, NULL);
  cbt_random_bytes(&t, pattern, sizeof(pattern));
  cbt_random_bytes(&t, update, sizeof(update));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(scratch, 0), BYTES, pattern, 8));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  args[0] = gpuhal_arg_buffer(scratch, 1024);
  args[1] = gpuhal_arg_u32(0xC0FFEEu);
  args[2] = gpuhal_arg_u32(64);
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.fill_u32, gpuhal_dim3(1, 1, 1), gpuhal_dim3(64, 1, 1), 0, 3, args));
  TU_CHECK_OK(gpuhal_cmd_update(cb, update, gpuhal_ref_buffer(scratch, 3001), sizeof(update)));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(scratch, 0), gpuhal_ref_buffer(out, 0), BYTES));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_one(&allocated, &one),
                                   gpuhal_semaphore_list_one(&done, &one), cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  /* The dealloca is queued only after the host saw the execute complete: softcuda (today)
   * marks pool memory freed when cuMemFreeAsync is enqueued rather than when the stream
   * reaches it, so a dealloca ordered on the GPU after the execute trips its checks. */
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, gpuhal_timeout_relative_ns(30000000000ll)));
  TU_CHECK_OK(gpuhal_queue_dealloca(t.device, 0, gpuhal_semaphore_list_one(&done, &one),
                                    gpuhal_semaphore_list_one(&done, &two), scratch));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 2, gpuhal_timeout_relative_ns(30000000000ll)));
  for (i = 0; i < BYTES; ++i) expected[i] = pattern[i % 8];
  for (i = 0; i < 64; ++i) {
    uint32_t v = 0xC0FFEEu;
    memcpy(expected + 1024 + 4 * i, &v, 4);
  }
  memcpy(expected + 3001, update, sizeof(update));
  TU_CHECK(cbt_buffer_equals(out, expected, BYTES, "late-bound alloca contents"));
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(scratch);
  gpuhal_buffer_release(out);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(allocated);
  gpuhal_semaphore_release(done);
  cbt_close(&t);
}

/* An execute that is not ordered after its buffer's alloca fails its signal with a status
 * that says so (and nothing hangs). */
static void body_unordered_alloca_fails(uint32_t mode) {
  cbt t;
  gpuhal_semaphore_t* gate = NULL;
  gpuhal_semaphore_t* done = NULL;
  gpuhal_buffer_t* scratch = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  uint64_t one = 1;
  uint32_t value = 5;
  gpuhal_status_t st;
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &gate));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &done));
  TU_REQUIRE_OK(gpuhal_queue_alloca(t.device, 1 % gpuhal_device_queue_count(t.device),
                                    gpuhal_semaphore_list_one(&gate, &one), gpuhal_semaphore_list_empty(), 256,
                                    &scratch));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(scratch, 0), 256, &value, 4));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&done, &one),
                                   cb, NULL));
  st = gpuhal_semaphore_wait(done, 1, gpuhal_timeout_relative_ns(30000000000ll));
  /* With GPU-resident values the alloca was issued at once (behind a GPU wait): the buffer
   * has an address, and the misuse cannot be told from a use in stream order. */
  if (!gpuhal_driver_has_feature(t.driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS)) {
    TU_CHECK(st != NULL);
    if (st) TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "no device address");
  }
  gpuhal_status_free(st);
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(scratch);
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(done);
  cbt_close(&t);
}

/* Nothing recorded, or only barriers: executes and signals. */
static void body_empty(uint32_t mode) {
  cbt t;
  gpuhal_command_buffer_t* cb = NULL;
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(cbt_run(&t, cb, NULL));
  gpuhal_command_buffer_release(cb);
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(cbt_run(&t, cb, NULL));
  gpuhal_command_buffer_release(cb);
  cbt_close(&t);
}

/* Every record-time rule, in both recorders. */
static void body_validation(uint32_t mode) {
  cbt t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_command_buffer_t* other = NULL;
  gpuhal_buffer_t* buf = NULL;
  gpuhal_buffer_t* small = NULL;
  gpuhal_buffer_t* dead = NULL;
  gpuhal_arg_t args[5];
  gpuhal_kernel_info_t info;
  gpuhal_binding_table_t table;
  uint32_t value = 1;
  unsigned char bytes[8] = {0};
  gpuhal_dim3_t one = gpuhal_dim3(1, 1, 1);
  gpuhal_device_info_t dinfo;
  memset(&dinfo, 0, sizeof(dinfo)); /* gcc -O3 cannot see that the call below fills it */
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_device_info(t.device, &dinfo));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 1024, &buf));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 16, &small));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, 16, &dead));
  gpuhal_buffer_release(dead); /* now a released handle (quarantined) */

  /* create */
  TU_CHECK_STATUS(gpuhal_command_buffer_create(t.device, mode | 0x80, 0, &cb), GPUHAL_STATUS_INVALID_ARGUMENT, "flags");
  TU_CHECK_STATUS(gpuhal_command_buffer_create(NULL, mode, 0, &cb), GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  TU_CHECK_STATUS(gpuhal_command_buffer_create(t.device, mode, 0, NULL), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "out_command_buffer");
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode, 2, &cb));

  /* commands only between begin and end */
  TU_CHECK_STATUS(gpuhal_cmd_barrier(cb), GPUHAL_STATUS_FAILED_PRECONDITION, "begin");
  TU_CHECK_STATUS(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buf, 0), 4, &value, 4), GPUHAL_STATUS_FAILED_PRECONDITION,
                  "begin");
  TU_CHECK_STATUS(gpuhal_command_buffer_end(cb), GPUHAL_STATUS_FAILED_PRECONDITION, "begin");
  TU_CHECK_STATUS(
      gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), cb, NULL),
      GPUHAL_STATUS_FAILED_PRECONDITION, "never recorded");
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_STATUS(gpuhal_command_buffer_begin(cb), GPUHAL_STATUS_FAILED_PRECONDITION, "already");
  TU_CHECK_STATUS(
      gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), cb, NULL),
      GPUHAL_STATUS_FAILED_PRECONDITION, "still recording");

  /* dispatch */
  TU_REQUIRE_OK(gpuhal_kernel_info(t.fill_u32, &info));
  args[0] = gpuhal_arg_buffer(buf, 0);
  args[1] = gpuhal_arg_u32(7);
  args[2] = gpuhal_arg_u32(4);
  TU_CHECK_OK(gpuhal_cmd_dispatch(cb, t.fill_u32, one, one, 0, 3, args));
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, NULL, one, one, 0, 3, args), GPUHAL_STATUS_INVALID_ARGUMENT, "kernel");
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, one, one, 0, 3, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "args");
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, gpuhal_dim3(0, 1, 1), one, 0, 3, args),
                  GPUHAL_STATUS_OUT_OF_RANGE, "grid.x");
  TU_CHECK_STATUS(
      gpuhal_cmd_dispatch(cb, t.fill_u32, gpuhal_dim3(1, (uint32_t)dinfo.max_grid_dim[1] + 1, 1), one, 0, 3, args),
      GPUHAL_STATUS_OUT_OF_RANGE, "grid.y");
  TU_CHECK_STATUS(
      gpuhal_cmd_dispatch(cb, t.fill_u32, one, gpuhal_dim3(1, 1, (uint32_t)dinfo.max_block_dim[2] + 1), 0, 3, args),
      GPUHAL_STATUS_OUT_OF_RANGE, "block.z");
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, one, gpuhal_dim3(1024, 1024, 1), 0, 3, args),
                  GPUHAL_STATUS_OUT_OF_RANGE, "block");
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, one, one, (uint32_t)info.max_dynamic_shared_bytes + 1, 3, args),
                  GPUHAL_STATUS_OUT_OF_RANGE, "shared_bytes");
  if (info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN) {
    TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, one, one, 0, 2, args), GPUHAL_STATUS_INVALID_ARGUMENT,
                    "parameter");
    args[1] = gpuhal_arg_u64(7); /* 8 bytes for a 4-byte parameter */
    TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, one, one, 0, 3, args), GPUHAL_STATUS_INVALID_ARGUMENT,
                    "args[1]");
    args[1] = gpuhal_arg_u32(7);
  }
  args[0] = gpuhal_arg_buffer(buf, 1025);
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, one, one, 0, 3, args), GPUHAL_STATUS_OUT_OF_RANGE, "args[0]");
  args[0] = gpuhal_arg_buffer(dead, 0);
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, one, one, 0, 3, args), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "released");
  args[0] = gpuhal_arg_buffer(NULL, 0);
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, one, one, 0, 3, args), GPUHAL_STATUS_INVALID_ARGUMENT, "args[0]");
  args[0] = gpuhal_arg_slot(2, 0);
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, one, one, 0, 3, args), GPUHAL_STATUS_OUT_OF_RANGE, "slot 2");
  args[0] = gpuhal_arg_slot(0, 0);
  args[1] = gpuhal_arg_bytes(bytes, 0);
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, one, one, 0, 3, args), GPUHAL_STATUS_INVALID_ARGUMENT, "size 0");
  args[1] = gpuhal_arg_u32(7);
  args[0].kind = (gpuhal_arg_kind_t)9;
  TU_CHECK_STATUS(gpuhal_cmd_dispatch(cb, t.fill_u32, one, one, 0, 3, args), GPUHAL_STATUS_INVALID_ARGUMENT, "kind");

  /* copy */
  TU_CHECK_STATUS(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(buf, 0), gpuhal_ref_buffer(small, 0), 17),
                  GPUHAL_STATUS_OUT_OF_RANGE, "dst");
  TU_CHECK_STATUS(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(buf, 1020), gpuhal_ref_buffer(small, 0), 8),
                  GPUHAL_STATUS_OUT_OF_RANGE, "src");
  TU_CHECK_STATUS(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(buf, 0), gpuhal_ref_buffer(buf, 8), 16),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "overlap");
  TU_CHECK_STATUS(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(buf, 0), gpuhal_ref_buffer(small, 0), 0),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "size");
  TU_CHECK_STATUS(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(buf, UINT64_MAX - 2), gpuhal_ref_buffer(small, 0), 8),
                  GPUHAL_STATUS_OUT_OF_RANGE, "overflows");
  TU_CHECK_STATUS(gpuhal_cmd_copy(cb, gpuhal_ref_slot(5, 0), gpuhal_ref_buffer(small, 0), 8),
                  GPUHAL_STATUS_OUT_OF_RANGE, "slot 5");
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(buf, 0), gpuhal_ref_buffer(buf, 16), 16));

  /* fill */
  TU_CHECK_STATUS(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buf, 0), 12, &value, 3), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "pattern_size");
  TU_CHECK_STATUS(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buf, 2), 8, &value, 4), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "dst.offset");
  TU_CHECK_STATUS(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buf, 0), 6, &value, 4), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "multiple");
  TU_CHECK_STATUS(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buf, 0), 8, NULL, 4), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "pattern");
  TU_CHECK_STATUS(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buf, 1016), 16, &value, 4), GPUHAL_STATUS_OUT_OF_RANGE,
                  "outside");

  /* update */
  TU_CHECK_STATUS(gpuhal_cmd_update(cb, NULL, gpuhal_ref_buffer(buf, 0), 4), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "host_src");
  TU_CHECK_STATUS(gpuhal_cmd_update(cb, bytes, gpuhal_ref_buffer(small, 12), 8), GPUHAL_STATUS_OUT_OF_RANGE, "dst");

  /* slot 1 used up to byte 64: a table must give at least that much */
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_slot(1, 32), 32, &value, 4));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_STATUS(gpuhal_command_buffer_end(cb), GPUHAL_STATUS_FAILED_PRECONDITION, "ended");
  TU_CHECK_STATUS(gpuhal_cmd_barrier(cb), GPUHAL_STATUS_FAILED_PRECONDITION, "ended");
  TU_CHECK_STATUS(gpuhal_command_buffer_begin(cb), GPUHAL_STATUS_FAILED_PRECONDITION, "recorded once");

  /* execute-time: the binding table */
  TU_CHECK_STATUS(
      gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), cb, NULL),
      GPUHAL_STATUS_INVALID_ARGUMENT, "bindings");
  {
    gpuhal_buffer_t* bound[2];
    uint64_t offsets[2] = {0, 0};
    bound[0] = buf;
    bound[1] = small;
    table.count = 1;
    table.buffers = bound;
    table.offsets = offsets;
    TU_CHECK_STATUS(
        gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), cb, &table),
        GPUHAL_STATUS_INVALID_ARGUMENT, "2 binding slots");
    table.count = 2;
    TU_CHECK_STATUS(
        gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), cb, &table),
        GPUHAL_STATUS_OUT_OF_RANGE, "bindings.buffers[1]");
    bound[1] = buf;
    offsets[1] = 1000;
    TU_CHECK_STATUS(
        gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), cb, &table),
        GPUHAL_STATUS_OUT_OF_RANGE, "bindings.buffers[1]");
    bound[1] = dead;
    offsets[1] = 0;
    TU_CHECK_STATUS(
        gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), cb, &table),
        GPUHAL_STATUS_INVALID_ARGUMENT, "released");
    bound[1] = buf;
    /* A good table runs (ONE_SHOT: once). */
    TU_CHECK_OK(cbt_run(&t, cb, &table));
    TU_CHECK_STATUS(
        gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), cb, &table),
        GPUHAL_STATUS_FAILED_PRECONDITION, "ONE_SHOT");
  }

  /* A released command buffer is caught, not used. */
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode, 0, &other));
  gpuhal_command_buffer_release(other);
  TU_CHECK_STATUS(gpuhal_command_buffer_begin(other), GPUHAL_STATUS_INVALID_ARGUMENT, "released");
  TU_CHECK_STATUS(gpuhal_cmd_barrier(NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "command_buffer");
  gpuhal_command_buffer_release(NULL);

  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buf);
  gpuhal_buffer_release(small);
  cbt_close(&t);
}

/* ---- transient (queue_alloca) buffers named by commands (issue #15) ----
 * Every command that can name a buffer, with a 256-byte transient buffer as its operand:
 * a dispatch argument (fill_u32), a copy's source, a copy's target, a fill, an update. */
enum { TR_BYTES = 256, TR_WORDS = TR_BYTES / 4 };
typedef enum tr_kind_e { TR_DISPATCH, TR_COPY_SRC, TR_COPY_DST, TR_FILL, TR_UPDATE, TR_KIND_COUNT } tr_kind_t;
static const char* const tr_kind_names[TR_KIND_COUNT] = {"dispatch argument", "copy source", "copy target", "fill",
                                                         "update"};
#define TR_SENTINEL 0xB0B0B0B0u
#define TR_WAIT_NS 30000000000ll

/* A queue_alloca of TR_BYTES on queue 0, waited for: its address is assigned. */
static gpuhal_status_t tr_alloca(cbt* t, gpuhal_buffer_t** out) {
  gpuhal_semaphore_t* sem = NULL;
  uint64_t one = 1;
  gpuhal_status_t st = gpuhal_semaphore_create(t->driver, 0, &sem);
  if (!st)
    st = gpuhal_queue_alloca(t->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &one),
                             TR_BYTES, out);
  if (!st) st = gpuhal_semaphore_wait(sem, 1, gpuhal_timeout_relative_ns(TR_WAIT_NS));
  gpuhal_semaphore_release(sem);
  return st;
}

/* Deallocates a transient buffer, waits for it, and drops the caller's reference. */
static gpuhal_status_t tr_dealloca(cbt* t, gpuhal_buffer_t* buffer) {
  gpuhal_semaphore_t* sem = NULL;
  uint64_t one = 1;
  gpuhal_status_t st = gpuhal_semaphore_create(t->driver, 0, &sem);
  if (!st)
    st = gpuhal_queue_dealloca(t->device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &one),
                               buffer);
  if (!st) st = gpuhal_semaphore_wait(sem, 1, gpuhal_timeout_relative_ns(TR_WAIT_NS));
  gpuhal_semaphore_release(sem);
  gpuhal_buffer_release(buffer);
  return st;
}

static gpuhal_status_t tr_set(gpuhal_buffer_t* buffer, uint32_t value) {
  uint32_t words[TR_WORDS];
  int i;
  for (i = 0; i < TR_WORDS; ++i) words[i] = value;
  return gpuhal_buffer_write(buffer, 0, words, TR_BYTES);
}

/* 1 when every word of the buffer is `value`; reports the first that is not. */
static int tr_holds(gpuhal_buffer_t* buffer, uint32_t value, const char* what, tr_kind_t kind, uint32_t mode) {
  uint32_t words[TR_WORDS];
  gpuhal_status_t st = gpuhal_buffer_read(buffer, 0, words, TR_BYTES);
  int i;
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "%s %s: reading %s: %s", cbt_mode_name(mode), tr_kind_names[kind], what,
               gpuhal_status_message(st));
    gpuhal_status_free(st);
    return 0;
  }
  for (i = 0; i < TR_WORDS; ++i) {
    if (words[i] != value) {
      TU_FAIL_AT(__FILE__, __LINE__, "%s %s: %s word %d is 0x%x, expected 0x%x", cbt_mode_name(mode),
                 tr_kind_names[kind], what, i, words[i], value);
      return 0;
    }
  }
  return 1;
}

/* Records one command of `kind` with `ref` as its transient operand and `aux` (a plain
 * buffer) as a copy's other operand. What it does when run:
 *   COPY_SRC  aux <- the transient; every other kind: the transient <- `value` words
 *   (COPY_DST copies them from aux, which tr_prepare fills). */
static gpuhal_status_t tr_record(cbt* t, gpuhal_command_buffer_t* cb, tr_kind_t kind, gpuhal_buffer_ref_t ref,
                                 gpuhal_buffer_t* aux, uint32_t value) {
  uint32_t words[TR_WORDS];
  gpuhal_arg_t args[3];
  int i;
  switch (kind) {
    case TR_DISPATCH:
      args[0] = ref.buffer ? gpuhal_arg_buffer(ref.buffer, ref.offset) : gpuhal_arg_slot(ref.slot, ref.offset);
      args[1] = gpuhal_arg_u32(value);
      args[2] = gpuhal_arg_u32(TR_WORDS);
      return gpuhal_cmd_dispatch(cb, t->fill_u32, gpuhal_dim3(1, 1, 1), gpuhal_dim3(TR_WORDS, 1, 1), 0, 3, args);
    case TR_COPY_SRC: return gpuhal_cmd_copy(cb, ref, gpuhal_ref_buffer(aux, 0), TR_BYTES);
    case TR_COPY_DST: return gpuhal_cmd_copy(cb, gpuhal_ref_buffer(aux, 0), ref, TR_BYTES);
    case TR_FILL: return gpuhal_cmd_fill(cb, ref, TR_BYTES, &value, 4);
    default:
      for (i = 0; i < TR_WORDS; ++i) words[i] = value;
      return gpuhal_cmd_update(cb, words, ref, TR_BYTES);
  }
}

/* Sets the buffers up for one run that should leave `value` in tr_result(...): a copy
 * source gets `value`, aux gets what a copy target should receive. */
static gpuhal_status_t tr_prepare(tr_kind_t kind, gpuhal_buffer_t* transient, gpuhal_buffer_t* aux, uint32_t value) {
  gpuhal_status_t st = tr_set(transient, kind == TR_COPY_SRC ? value : 0);
  if (!st) st = tr_set(aux, kind == TR_COPY_DST ? value : 0);
  return st;
}
static gpuhal_buffer_t* tr_result(tr_kind_t kind, gpuhal_buffer_t* transient, gpuhal_buffer_t* aux) {
  return kind == TR_COPY_SRC ? aux : transient;
}

/* Checks a refused execute's status: FAILED_PRECONDITION naming the command and why. */
static void tr_check_refused(gpuhal_status_t st, const char* why, tr_kind_t kind, uint32_t mode) {
  if (gpuhal_status_code(st) != GPUHAL_STATUS_FAILED_PRECONDITION) {
    TU_FAIL_AT(__FILE__, __LINE__, "%s %s: execute -> %s, expected FAILED_PRECONDITION", cbt_mode_name(mode),
               tr_kind_names[kind], st ? gpuhal_status_message(st) : "OK");
  } else {
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "command 0");
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), why);
  }
  gpuhal_status_free(st);
}

/* (a) A REUSABLE command buffer names transient A directly and runs. A is deallocated; a
 * new transient B (the pool may hand back A's memory) is set to a sentinel. Executing
 * again is refused, and B (and, for a copy from A, the copy's target) is untouched. */
static void body_transient_after_dealloca(uint32_t mode) {
  cbt t;
  int k;
  if (!cbt_open(&t)) return;
  for (k = 0; k < TR_KIND_COUNT && !tu_state.failed; ++k) {
    tr_kind_t kind = (tr_kind_t)k;
    gpuhal_buffer_t* a = NULL;
    gpuhal_buffer_t* b = NULL;
    gpuhal_buffer_t* aux = NULL;
    gpuhal_command_buffer_t* cb = NULL;
    TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, TR_BYTES, &aux));
    TU_REQUIRE_OK(tr_alloca(&t, &a));
    TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb));
    TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
    TU_CHECK_OK(tr_record(&t, cb, kind, gpuhal_ref_buffer(a, 0), aux, 0x1234u));
    TU_CHECK_OK(gpuhal_command_buffer_end(cb));
    TU_CHECK_OK(tr_prepare(kind, a, aux, 0x1234u));
    TU_CHECK_OK(cbt_run(&t, cb, NULL));
    tr_holds(tr_result(kind, a, aux), 0x1234u, "first run's result", kind, mode);

    TU_CHECK_OK(tr_dealloca(&t, a)); /* drops our reference: the command buffer holds its own */
    TU_CHECK_OK(gpuhal_device_wait_idle(t.device, gpuhal_timeout_relative_ns(TR_WAIT_NS)));
    TU_REQUIRE_OK(tr_alloca(&t, &b));
    TU_CHECK_OK(tr_set(b, TR_SENTINEL));
    TU_CHECK_OK(tr_set(aux, kind == TR_COPY_DST ? 0x1234u : 0));
    tr_check_refused(cbt_run(&t, cb, NULL), "deallocated", kind, mode);
    TU_CHECK_OK(gpuhal_device_wait_idle(t.device, gpuhal_timeout_relative_ns(TR_WAIT_NS)));
    tr_holds(b, TR_SENTINEL, "a new transient buffer (maybe at the old address)", kind, mode);
    if (kind == TR_COPY_SRC) tr_holds(aux, 0, "the copy's target", kind, mode);
    if (kind == TR_COPY_DST) tr_holds(aux, 0x1234u, "the copy's source", kind, mode);
    gpuhal_command_buffer_release(cb); /* the last reference to A */
    TU_CHECK_OK(tr_dealloca(&t, b));
    gpuhal_buffer_release(aux);
  }
  cbt_close(&t);
}

/* (a') The dealloca is queued right before the execute on the same queue (no host wait
 * between): the execute is issued after the free, so it is refused. */
static void body_transient_dealloca_queued_first(uint32_t mode) {
  cbt t;
  gpuhal_buffer_t* a = NULL;
  gpuhal_buffer_t* aux = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t* sem = NULL;
  uint64_t one = 1, two = 2;
  if (!cbt_open(&t)) return;
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &sem));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, TR_BYTES, &aux));
  TU_REQUIRE_OK(tr_alloca(&t, &a));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(tr_record(&t, cb, TR_FILL, gpuhal_ref_buffer(a, 0), aux, 0x1234u));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(
      gpuhal_queue_dealloca(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &one), a));
  TU_CHECK_OK(gpuhal_queue_execute(t.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &two),
                                   cb, NULL));
  tr_check_refused(gpuhal_semaphore_wait(sem, 2, gpuhal_timeout_relative_ns(TR_WAIT_NS)), "deallocated", TR_FILL, mode);
  TU_CHECK_OK(gpuhal_device_wait_idle(t.device, gpuhal_timeout_relative_ns(TR_WAIT_NS)));
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(a);
  gpuhal_buffer_release(aux);
  gpuhal_semaphore_release(sem);
  cbt_close(&t);
}

/* (b) A REUSABLE command buffer names slot 0; each execute binds another transient buffer
 * (three live at once, so at different addresses, used in turn and then in reverse).
 * Each run writes only the bound one. A deallocated one bound later is refused; a new one
 * bound after that works. */
static void body_transient_through_slot(uint32_t mode) {
  enum { COUNT = 3, RUNS = 2 * COUNT };
  cbt t;
  int k, r, j;
  if (!cbt_open(&t)) return;
  for (k = 0; k < TR_KIND_COUNT && !tu_state.failed; ++k) {
    tr_kind_t kind = (tr_kind_t)k;
    gpuhal_buffer_t* transient[COUNT];
    gpuhal_buffer_t* aux = NULL;
    gpuhal_buffer_t* fresh = NULL;
    gpuhal_command_buffer_t* cb = NULL;
    gpuhal_binding_table_t table;
    table.count = 1;
    table.offsets = NULL;
    TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, TR_BYTES, &aux));
    for (j = 0; j < COUNT; ++j) TU_REQUIRE_OK(tr_alloca(&t, &transient[j]));
    TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode | GPUHAL_COMMAND_BUFFER_REUSABLE, 1, &cb));
    TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
    TU_CHECK_OK(tr_record(&t, cb, kind, gpuhal_ref_slot(0, 0), aux, 0x5107u));
    TU_CHECK_OK(gpuhal_command_buffer_end(cb));
    for (r = 0; r < RUNS && !tu_state.failed; ++r) {
      int bound = r < COUNT ? r : RUNS - 1 - r;
      /* A copy source holds its own index, so the copy's target shows which one was read. */
      uint32_t expected = kind == TR_COPY_SRC ? 0x5100u + (uint32_t)bound : 0x5107u;
      for (j = 0; j < COUNT; ++j) TU_CHECK_OK(tr_set(transient[j], kind == TR_COPY_SRC ? 0x5100u + (uint32_t)j : 0));
      TU_CHECK_OK(tr_set(aux, kind == TR_COPY_DST ? 0x5107u : 0));
      table.buffers = &transient[bound];
      TU_CHECK_OK(cbt_run(&t, cb, &table));
      tr_holds(tr_result(kind, transient[bound], aux), expected, "the bound buffer's result", kind, mode);
      for (j = 0; j < COUNT; ++j)
        if (j != bound)
          tr_holds(transient[j], kind == TR_COPY_SRC ? 0x5100u + (uint32_t)j : 0, "an unbound buffer", kind, mode);
    }
    gpuhal_buffer_retain(transient[0]);
    for (j = 0; j < COUNT; ++j) TU_CHECK_OK(tr_dealloca(&t, transient[j]));
    table.buffers = &transient[0];
    {
      gpuhal_status_t st = cbt_run(&t, cb, &table);
      TU_CHECK(gpuhal_status_code(st) == GPUHAL_STATUS_FAILED_PRECONDITION);
      if (st) TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "slot 0");
      gpuhal_status_free(st);
    }
    gpuhal_buffer_release(transient[0]);
    TU_REQUIRE_OK(tr_alloca(&t, &fresh));
    TU_CHECK_OK(tr_prepare(kind, fresh, aux, 0x5107u));
    table.buffers = &fresh;
    TU_CHECK_OK(cbt_run(&t, cb, &table));
    tr_holds(tr_result(kind, fresh, aux), 0x5107u, "a new buffer bound after a dealloca", kind, mode);
    gpuhal_command_buffer_release(cb);
    TU_CHECK_OK(tr_dealloca(&t, fresh));
    gpuhal_buffer_release(aux);
  }
  cbt_close(&t);
}

/* (c) A REUSABLE command buffer names transient A directly, recorded after A got its
 * address (and, second pass, before: the alloca held back by a gate). Every execute
 * writes into A, also with other transient buffers allocated and freed in between. */
static void body_transient_reusable_named(uint32_t mode) {
  enum { RUNS = 3 };
  cbt t;
  int k, late, r;
  uint64_t one = 1;
  if (!cbt_open(&t)) return;
  for (late = 0; late < 2; ++late) {
    for (k = 0; k < TR_KIND_COUNT && !tu_state.failed; ++k) {
      tr_kind_t kind = (tr_kind_t)k;
      gpuhal_buffer_t* a = NULL;
      gpuhal_buffer_t* aux = NULL;
      gpuhal_command_buffer_t* cb = NULL;
      gpuhal_semaphore_t* gate = NULL;
      gpuhal_semaphore_t* allocated = NULL;
      TU_REQUIRE_OK(gpuhal_buffer_allocate(t.device, GPUHAL_MEMORY_DEVICE, TR_BYTES, &aux));
      if (late) {
        TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &gate));
        TU_REQUIRE_OK(gpuhal_semaphore_create(t.driver, 0, &allocated));
        TU_REQUIRE_OK(gpuhal_queue_alloca(t.device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                          gpuhal_semaphore_list_one(&allocated, &one), TR_BYTES, &a));
      } else {
        TU_REQUIRE_OK(tr_alloca(&t, &a));
      }
      TU_REQUIRE_OK(gpuhal_command_buffer_create(t.device, mode | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb));
      TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
      TU_CHECK_OK(tr_record(&t, cb, kind, gpuhal_ref_buffer(a, 0), aux, 0xA11Cu));
      TU_CHECK_OK(gpuhal_command_buffer_end(cb));
      if (late) {
        TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
        TU_CHECK_OK(gpuhal_semaphore_wait(allocated, 1, gpuhal_timeout_relative_ns(TR_WAIT_NS)));
      }
      for (r = 0; r < RUNS && !tu_state.failed; ++r) {
        gpuhal_buffer_t* other = NULL;
        TU_CHECK_OK(tr_prepare(kind, a, aux, 0xA11Cu));
        TU_CHECK_OK(cbt_run(&t, cb, NULL));
        tr_holds(tr_result(kind, a, aux), 0xA11Cu, late ? "run (recorded before the address)" : "run", kind, mode);
        TU_CHECK_OK(tr_alloca(&t, &other));
        TU_CHECK_OK(tr_dealloca(&t, other));
      }
      gpuhal_command_buffer_release(cb);
      TU_CHECK_OK(tr_dealloca(&t, a));
      gpuhal_buffer_release(aux);
      gpuhal_semaphore_release(gate);
      gpuhal_semaphore_release(allocated);
    }
  }
  cbt_close(&t);
}

#endif /* TEST_COMMAND_BUFFER_COMMON_H */
