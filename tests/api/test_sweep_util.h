/* test_sweep_util.h - what the two failure sweeps share (test_fault_sweep.c fails CUDA calls,
 * test_alloc_sweep.c host allocations): the record of one run of a scenario, the steps and
 * waits that fill it, and the pieces of scenario both drive.
 *
 * A scenario runs its steps through sweep_ok, which keeps the first error; every wait has a
 * timeout (a hang is a timeout), every signal that accepted work promised is noted
 * (sweep_expect) and must have been reached or have failed at the end (sweep_settle); data
 * that is wrong after OK statuses is noted apart (sweep_mark_wrong). Each sweep judges the
 * run by its own rules (sweep_run_t.judge). */
#ifndef GPUHAL_TEST_SWEEP_UTIL_H
#define GPUHAL_TEST_SWEEP_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpuhal.h"
#include "test_util.h"

/* Each sweep uses some of these helpers. */
#pragma GCC diagnostic ignored "-Wunused-function"

#define SWEEP_WAIT_NS 10000000000ll /* any wait in a scenario: 10 s, far above its run time */
#define SWEEP_MAX_PENDING 32

/* Sanitizer builds run several times slower: waits sized for a plain build are longer there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SWEEP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SWEEP_SANITIZED 1
#endif
#endif

/* Signal and wait values, by address (gpuhal_semaphore_list_one). */
static const uint64_t V1 = 1, V2 = 2, V3 = 3;

/* ============================================================ softcuda ========== */
static unsigned long long (*sweep_query_calls)(const char* entry); /* calls of an entry point so far */
static unsigned long long (*sweep_query_leaks)(void);              /* objects leaked at context teardown so far */
static size_t (*sweep_leak_report)(int print);                     /* CUDA objects live now */

/* Binds softcuda's query API; returns the library (for any other symbol a sweep needs), or
 * NULL when the driver is not softcuda. */
static void* sweep_softcuda_bind(void) {
  const char* lib = getenv("GPUHAL_CUDA_LIBRARY");
  void* h = dlopen(lib && lib[0] ? lib : "libcuda.so.1", RTLD_NOW);
  void* p;
  if (!h) return NULL;
  p = dlsym(h, "softcuda_query_calls");
  memcpy(&sweep_query_calls, &p, sizeof(p));
  p = dlsym(h, "softcuda_query_leaks");
  memcpy(&sweep_query_leaks, &p, sizeof(p));
  p = dlsym(h, "softcuda_leak_report");
  memcpy(&sweep_leak_report, &p, sizeof(p));
  return sweep_query_calls && sweep_query_leaks && sweep_leak_report ? h : NULL;
}

/* softnccl is built beside softcuda: the collective scenarios use it when no NCCL is named
 * (an installed real NCCL cannot run on softcuda; CTest names softnccl anyway). */
static void sweep_default_nccl(void) {
  char nccl[4096];
  char* slash;
  if (getenv("GPUHAL_NCCL_LIBRARY") || !getenv("GPUHAL_CUDA_LIBRARY")) return;
  snprintf(nccl, sizeof(nccl), "%s", getenv("GPUHAL_CUDA_LIBRARY"));
  slash = strrchr(nccl, '/');
  if (slash && (size_t)(slash - nccl) + sizeof("/libnccl.so.2") <= sizeof(nccl)) {
    memcpy(slash, "/libnccl.so.2", sizeof("/libnccl.so.2"));
    if (access(nccl, R_OK) == 0) setenv("GPUHAL_NCCL_LIBRARY", nccl, 1);
  }
}

/* ============================================================ a run ============= */
typedef struct sweep_run_s sweep_run_t;
struct sweep_run_s {
  gpuhal_status_t first; /* the first error a step saw (owned) */
  int stuck;             /* a wait timed out: something depending on failed work hangs */
  char stuck_what[200];
  int wrong; /* every step succeeded but the data is wrong */
  char wrong_what[200];
  int pending_count; /* signals that accepted work promised */
  gpuhal_semaphore_t* pending_sem[SWEEP_MAX_PENDING];
  uint64_t pending_value[SWEEP_MAX_PENDING];
  /* A sweep that knows which errors may come (the alloc sweep: host memory, and a timed-out
   * wait is a hang) judges each step's error as it comes, before it is kept; it sets `bad`
   * for one it does not expect. NULL: the sweep judges the run from `first` at the end (the
   * fault sweep), and a wait that times out is a hang kept apart from `first`, which must
   * stay the error that says why the run failed. */
  void (*judge)(sweep_run_t* r, gpuhal_status_t s, const char* step);
  int bad;
  char bad_what[400];
};

static void sweep_mark_stuck(sweep_run_t* r, const char* step, gpuhal_status_t s) {
  if (!r->stuck) snprintf(r->stuck_what, sizeof(r->stuck_what), "%s: %s", step, gpuhal_status_message(s));
  r->stuck = 1;
}

static void sweep_mark_wrong(sweep_run_t* r, const char* what) {
  if (!r->wrong) snprintf(r->wrong_what, sizeof(r->wrong_what), "%s", what);
  r->wrong = 1;
}

/* Takes a step's status: 1 if OK; else judges it (r->judge) and keeps the first error,
 * and returns 0. */
static int sweep_ok(sweep_run_t* r, gpuhal_status_t s, const char* step) {
  if (!s) return 1;
  if (r->judge) r->judge(r, s, step);
  if (!r->first) {
    r->first = gpuhal_status_annotate(s, "[sweep step: %s]", step);
  } else {
    gpuhal_status_free(s);
  }
  return 0;
}

/* Takes a wait's status when it timed out and the sweep has no judge (see sweep_run_t):
 * marks the run stuck and returns 1; else leaves it and returns 0. */
static int sweep_took_timeout(sweep_run_t* r, gpuhal_status_t s, const char* step) {
  if (r->judge || gpuhal_status_code(s) != GPUHAL_STATUS_DEADLINE_EXCEEDED) return 0;
  sweep_mark_stuck(r, step, s);
  gpuhal_status_free(s);
  return 1;
}

/* A wait that must end: reached (1), failed or timed out (0). */
static int sweep_wait(sweep_run_t* r, gpuhal_semaphore_t* s, uint64_t value, const char* step) {
  gpuhal_status_t st = gpuhal_semaphore_wait(s, value, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS));
  return !sweep_took_timeout(r, st, step) && sweep_ok(r, st, step);
}

static void sweep_expect(sweep_run_t* r, gpuhal_semaphore_t* s, uint64_t value) {
  TU_CHECK(r->pending_count < SWEEP_MAX_PENDING);
  if (r->pending_count >= SWEEP_MAX_PENDING) return;
  r->pending_sem[r->pending_count] = s;
  r->pending_value[r->pending_count] = value;
  r->pending_count++;
}

/* Every promised signal must have been reached or have failed. */
static void sweep_settle(sweep_run_t* r) {
  int i;
  for (i = 0; i < r->pending_count; ++i) sweep_wait(r, r->pending_sem[i], r->pending_value[i], "settle");
  r->pending_count = 0;
}

/* `count` words of `b` from `offset` (256 at the most) must all be `expected`. */
static int sweep_check_words(sweep_run_t* r, gpuhal_buffer_t* b, uint64_t offset, uint32_t count, uint32_t expected,
                             const char* what) {
  uint32_t data[256];
  uint32_t i;
  if (count > 256) count = 256;
  if (!sweep_ok(r, gpuhal_buffer_read(b, offset, data, (uint64_t)count * 4), "buffer_read")) return 0;
  for (i = 0; i < count; ++i) {
    if (data[i] != expected) {
      char msg[200];
      snprintf(msg, sizeof(msg), "%s: word %u is 0x%x, expected 0x%x", what, i, data[i], expected);
      sweep_mark_wrong(r, msg);
      return 0;
    }
  }
  return 1;
}

/* ============================================================ scenario pieces === */
static gpuhal_status_t sweep_host_fn(void* user) {
  __atomic_add_fetch((int*)user, 1, __ATOMIC_ACQ_REL);
  return NULL;
}

/* Records in *out (`flags`) fill_u32 over a[0..255], fills of 4- and 8-byte patterns, an
 * update and a copy of it all into `b`; sweep_check_recorded checks the copy. */
static int sweep_record(sweep_run_t* r, gpuhal_device_t* device, gpuhal_kernel_t* fill,
                        gpuhal_command_buffer_flags_t flags, gpuhal_buffer_t* a, gpuhal_buffer_t* b,
                        gpuhal_command_buffer_t** out) {
  gpuhal_arg_t args[3];
  uint32_t four = 0x44444444u, update[16];
  uint64_t eight = 0x8888888888888888ull;
  int i;
  for (i = 0; i < 16; ++i) update[i] = 0x55555555u;
  args[0] = gpuhal_arg_buffer(a, 0);
  args[1] = gpuhal_arg_u32(0x11111111u);
  args[2] = gpuhal_arg_u32(64);
  return sweep_ok(r, gpuhal_command_buffer_create(device, flags, 0, out), "command_buffer_create") &&
         sweep_ok(r, gpuhal_command_buffer_begin(*out), "command_buffer_begin") &&
         sweep_ok(r, gpuhal_cmd_dispatch(*out, fill, gpuhal_dim3(1, 1, 1), gpuhal_dim3(64, 1, 1), 0, 3, args),
                  "cmd_dispatch") &&
         sweep_ok(r, gpuhal_cmd_fill(*out, gpuhal_ref_buffer(a, 256), 256, &four, 4), "cmd_fill 4") &&
         sweep_ok(r, gpuhal_cmd_fill(*out, gpuhal_ref_buffer(a, 512), 256, &eight, 8), "cmd_fill 8") &&
         sweep_ok(r, gpuhal_cmd_update(*out, update, gpuhal_ref_buffer(a, 768), sizeof(update)), "cmd_update") &&
         sweep_ok(r, gpuhal_cmd_barrier(*out), "cmd_barrier") &&
         sweep_ok(r, gpuhal_cmd_copy(*out, gpuhal_ref_buffer(a, 0), gpuhal_ref_buffer(b, 0), 1024), "cmd_copy") &&
         sweep_ok(r, gpuhal_command_buffer_end(*out), "command_buffer_end");
}

static int sweep_check_recorded(sweep_run_t* r, gpuhal_buffer_t* b) {
  return sweep_check_words(r, b, 0, 64, 0x11111111u, "dispatch") &&
         sweep_check_words(r, b, 256, 64, 0x44444444u, "fill 4") &&
         sweep_check_words(r, b, 512, 64, 0x88888888u, "fill 8") &&
         sweep_check_words(r, b, 768, 16, 0x55555555u, "update");
}

/* ---- device-side regions ---- */
/* tests/kernels/conditional.ptx and its kernels cond_count_down, cond_set_from, cond_add. */
static int sweep_load_conditional(sweep_run_t* r, gpuhal_device_t* device, gpuhal_executable_t** exe,
                                  gpuhal_kernel_t** count, gpuhal_kernel_t** set, gpuhal_kernel_t** add) {
  return sweep_ok(r, tu_load_kernel(device, "conditional", exe, NULL), "executable_load conditional") &&
         sweep_ok(r, gpuhal_executable_kernel(*exe, "cond_count_down", count), "kernel count") &&
         sweep_ok(r, gpuhal_executable_kernel(*exe, "cond_set_from", set), "kernel set") &&
         sweep_ok(r, gpuhal_executable_kernel(*exe, "cond_add", add), "kernel add");
}

/* A GRAPH command buffer in *out with a WHILE (cond_count_down from 5: 5 trips, counted in
 * words[1]) holding an IF (cond_set_from on the trip count's low bit, then cond_add of 10
 * to words[2]) over the first three words of `words`; sweep_check_regions checks them. */
static int sweep_record_regions(sweep_run_t* r, gpuhal_device_t* device, gpuhal_kernel_t* count, gpuhal_kernel_t* set,
                                gpuhal_kernel_t* add, gpuhal_buffer_t* words, gpuhal_command_buffer_t** out) {
  gpuhal_condition_t loop, odd;
  gpuhal_arg_t args[3];
  uint32_t init[3] = {5, 0, 0};
  return sweep_ok(r, gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_GRAPH, 0, out), "create graph") &&
         sweep_ok(r, gpuhal_command_buffer_begin(*out), "begin graph") &&
         sweep_ok(r, gpuhal_cmd_update(*out, init, gpuhal_ref_buffer(words, 0), sizeof(init)), "cmd_update") &&
         sweep_ok(r, gpuhal_cmd_barrier(*out), "barrier") &&
         sweep_ok(r, gpuhal_command_buffer_condition_create(*out, 1, &loop), "condition_create loop") &&
         sweep_ok(r, gpuhal_cmd_begin_while(*out, loop), "begin_while") &&
         (args[0] = gpuhal_arg_buffer(words, 0), args[1] = gpuhal_arg_buffer(words, 4),
          args[2] = gpuhal_arg_condition(loop),
          sweep_ok(r, gpuhal_cmd_dispatch(*out, count, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args),
                   "cmd_dispatch count")) &&
         sweep_ok(r, gpuhal_cmd_barrier(*out), "barrier") &&
         sweep_ok(r, gpuhal_command_buffer_condition_create(*out, 0, &odd), "condition_create odd") &&
         (args[0] = gpuhal_arg_buffer(words, 4), args[1] = gpuhal_arg_u32(1), args[2] = gpuhal_arg_condition(odd),
          sweep_ok(r, gpuhal_cmd_dispatch(*out, set, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 3, args),
                   "cmd_dispatch set")) &&
         sweep_ok(r, gpuhal_cmd_barrier(*out), "barrier") && sweep_ok(r, gpuhal_cmd_begin_if(*out, odd), "begin_if") &&
         (args[0] = gpuhal_arg_buffer(words, 8), args[1] = gpuhal_arg_u32(10),
          sweep_ok(r, gpuhal_cmd_dispatch(*out, add, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 2, args),
                   "cmd_dispatch add")) &&
         sweep_ok(r, gpuhal_cmd_end_region(*out), "end IF") && sweep_ok(r, gpuhal_cmd_end_region(*out), "end WHILE") &&
         sweep_ok(r, gpuhal_command_buffer_end(*out), "end graph");
}

static int sweep_check_regions(sweep_run_t* r, gpuhal_buffer_t* words) {
  return sweep_check_words(r, words, 4, 1, 5u, "trips") && sweep_check_words(r, words, 8, 1, 30u, "odd trips x 10");
}

/* ---- tensor maps ---- */
/* Two buffers of one 32 x 8 tile of u32, tiles[0] holding word i = i * 7. */
static int sweep_allocate_tiles(sweep_run_t* r, gpuhal_device_t* device, gpuhal_buffer_t** tiles) {
  uint32_t src[256], i;
  for (i = 0; i < 256; ++i) src[i] = i * 7u;
  return sweep_ok(r, gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(src), &tiles[0]), "buffer_allocate") &&
         sweep_ok(r, gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(src), &tiles[1]), "buffer_allocate") &&
         sweep_ok(r, gpuhal_buffer_write(tiles[0], 0, src, sizeof(src)), "buffer_write");
}

/* Records in *out a TMA tile copy (tma_tile_copy: the tile, each word + 1) into `dst`
 * through a map over `src`, encoded at record, in a GRAPH command buffer; with `src` NULL,
 * over binding slot 0, encoded at execute, in a STREAM one. */
static int sweep_record_tile_copy(sweep_run_t* r, gpuhal_device_t* device, gpuhal_kernel_t* copy, gpuhal_buffer_t* src,
                                  gpuhal_buffer_t* dst, gpuhal_command_buffer_t** out) {
  gpuhal_tensor_map_t m; /* gpuhal keeps a copy */
  gpuhal_arg_t args[4];
  int slot = src == NULL;
  memset(&m, 0, sizeof(m));
  m.type = GPUHAL_TENSOR_U32;
  m.rank = 2;
  m.dims[0] = 32;
  m.dims[1] = 8;
  m.box[0] = 32;
  m.box[1] = 8;
  args[0] = gpuhal_arg_tensor_map(slot ? gpuhal_arg_slot(0, 0) : gpuhal_arg_buffer(src, 0), &m);
  args[1] = gpuhal_arg_buffer(dst, 0);
  args[2] = gpuhal_arg_u32(32);
  args[3] = gpuhal_arg_u32(8);
  return sweep_ok(r,
                  gpuhal_command_buffer_create(
                      device, slot ? GPUHAL_COMMAND_BUFFER_STREAM : GPUHAL_COMMAND_BUFFER_GRAPH, slot ? 1 : 0, out),
                  slot ? "create stream" : "create graph") &&
         sweep_ok(r, gpuhal_command_buffer_begin(*out), slot ? "begin stream" : "begin graph") &&
         sweep_ok(r, gpuhal_cmd_dispatch(*out, copy, gpuhal_dim3(1, 1, 1), gpuhal_dim3(64, 1, 1), 0, 4, args),
                  slot ? "cmd_dispatch tensor map (slot)" : "cmd_dispatch tensor map (buffer)") &&
         sweep_ok(r, gpuhal_command_buffer_end(*out), slot ? "end stream" : "end graph");
}

/* The tile copied from tiles[0] to tiles[1] and back: src[1] + 1, + 1 again. */
static int sweep_check_tiles(sweep_run_t* r, gpuhal_buffer_t* tiles0) {
  return sweep_check_words(r, tiles0, 4, 1, 7u + 2u, "tile copied twice");
}

/* ---- collectives ---- */
/* 1 when a rank's error only says that its peer never came: softnccl's peer timeout, in
 * the first collective call (connection setup: ncclSystemError in ncclGroupEnd) or in a
 * later one (CUDA_ERROR_LAUNCH_TIMEOUT, the context poisoned as after a hung NCCL kernel). */
static int sweep_is_peer_timeout(gpuhal_status_t s) {
  const char* msg = gpuhal_status_message(s);
  return strstr(msg, "CUDA_ERROR_LAUNCH_TIMEOUT") != NULL ||
         (strstr(msg, "ncclSystemError") != NULL && strstr(msg, "in ncclGroupEnd") != NULL);
}

/* Rank i of an all-reduce (sum of 64 u32) over channel `ch`: rank i's words are
 * (i + 1) * 0x10101, sent from b[2 * i] and received in b[2 * i + 1]; rank 0 records it in
 * a STREAM command buffer, rank 1 in a GRAPH one (captured at its first execute). */
static int sweep_record_rank(sweep_run_t* r, gpuhal_device_t* device, gpuhal_channel_t* ch, int i, gpuhal_buffer_t** b,
                             gpuhal_command_buffer_t** out) {
  gpuhal_collective_t c;
  uint32_t words[64];
  int j;
  for (j = 0; j < 64; ++j) words[j] = (uint32_t)(i + 1) * 0x10101u;
  if (!sweep_ok(r, gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(words), &b[2 * i]), "buffer_allocate") ||
      !sweep_ok(r, gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, sizeof(words), &b[2 * i + 1]),
                "buffer_allocate") ||
      !sweep_ok(r, gpuhal_buffer_write(b[2 * i], 0, words, sizeof(words)), "buffer_write"))
    return 0;
  memset(&c, 0, sizeof(c));
  c.kind = GPUHAL_COLLECTIVE_ALL_REDUCE;
  c.type = GPUHAL_ELEMENT_UINT32;
  c.op = GPUHAL_REDUCTION_SUM;
  c.send = gpuhal_ref_buffer(b[2 * i], 0);
  c.recv = gpuhal_ref_buffer(b[2 * i + 1], 0);
  c.count = 64;
  return sweep_ok(r,
                  gpuhal_command_buffer_create(
                      device, i == 0 ? GPUHAL_COMMAND_BUFFER_STREAM : GPUHAL_COMMAND_BUFFER_GRAPH, 0, out),
                  "command_buffer_create") &&
         sweep_ok(r, gpuhal_command_buffer_begin(*out), "command_buffer_begin") &&
         sweep_ok(r, gpuhal_cmd_collective(*out, ch, &c), "cmd_collective") &&
         sweep_ok(r, gpuhal_command_buffer_end(*out), "command_buffer_end");
}

/* Executes both ranks' command buffers on queue 0 of their devices, both waiting on `gate`
 * = 1 (so that they enter the collective together), rank i signalling done[i] = 1, until
 * one fails; returns how many were submitted. */
static int sweep_execute_ranks(sweep_run_t* r, gpuhal_device_t** devices, gpuhal_semaphore_t* gate,
                               gpuhal_semaphore_t** done, gpuhal_command_buffer_t** cb) {
  int i;
  for (i = 0; i < 2 && !r->first; ++i)
    if (!sweep_ok(r,
                  gpuhal_queue_execute(devices[i], 0, gpuhal_semaphore_list_one(&gate, &V1),
                                       gpuhal_semaphore_list_one(&done[i], &V1), cb[i], NULL),
                  i == 0 ? "queue_execute rank 0 (STREAM)" : "queue_execute rank 1 (GRAPH)"))
      break;
  return i;
}

/* The ranks' waits. A rank whose peer failed before the collective fails too, after
 * softnccl's peer timeout: the run's first error is the one that says why, so a peer
 * timeout is kept only when nothing else failed. */
static void sweep_wait_ranks(sweep_run_t* r, gpuhal_semaphore_t** done) {
  static const char* const steps[2] = {"wait rank 0", "wait rank 1"};
  gpuhal_status_t st[2];
  int i, pass;
  for (i = 0; i < 2; ++i) {
    st[i] = gpuhal_semaphore_wait(done[i], 1, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS));
    if (sweep_took_timeout(r, st[i], steps[i])) st[i] = NULL;
  }
  for (pass = 0; pass < 2; ++pass) {
    for (i = 0; i < 2; ++i) {
      if (!st[i] || (pass == 0 && sweep_is_peer_timeout(st[i]))) continue;
      if (pass == 1 && r->first) {
        gpuhal_status_free(st[i]); /* the peer of a rank that failed first */
      } else {
        sweep_ok(r, st[i], steps[i]);
      }
      st[i] = NULL;
    }
  }
}

/* Both ranks received the sum, 3 * 0x10101 (b as in sweep_record_rank). */
static void sweep_check_ranks(sweep_run_t* r, gpuhal_buffer_t** b) {
  int i;
  for (i = 0; i < 2 && !r->first && !r->stuck; ++i)
    if (!sweep_check_words(r, b[2 * i + 1], 0, 64, 3 * 0x10101u, i == 0 ? "all-reduce rank 0" : "all-reduce rank 1"))
      break;
}

#endif /* GPUHAL_TEST_SWEEP_UTIL_H */
