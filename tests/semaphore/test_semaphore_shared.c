/* test_semaphore_shared: semaphores and buffers shared between two processes
 * (gpuhal_semaphore_export/_import, gpuhal_buffer_export/_import).
 *
 * Every case forks two children, A and B, joined by a Unix socket; the parent never loads
 * CUDA (a child of a process that started CUDA cannot use it) and only waits for them, with
 * a deadline: a child that hangs is killed and the case fails. A child exits 0 (passed),
 * 1 (failed) or 77 (skipped: no stream memory operations). B uses device 1 when there are
 * two, so the GPU work of the two processes runs on different devices. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* SCM_RIGHTS and the CMSG_ macros */
#endif
#include "gpuhal.h"
#include "test_util.h"
#define SH_WAIT_S 60
#define TS_WAIT_S SH_WAIT_S
#include "test_socket.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define SH_STEPS 1000u

/* TU_REQUIRE_OK for functions that return a value. */
#define SH_REQUIRE_OK(expr, ret)                                                       \
  do {                                                                                 \
    gpuhal_status_t sh_s_ = (expr);                                                    \
    if (sh_s_) {                                                                       \
      TU_FAIL_AT(__FILE__, __LINE__, "%s -> %s", #expr, gpuhal_status_message(sh_s_)); \
      gpuhal_status_free(sh_s_);                                                       \
      return ret;                                                                      \
    }                                                                                  \
  } while (0)

static gpuhal_timeout_t sh_seconds(int s) { return gpuhal_timeout_relative_ns((int64_t)s * 1000000000ll); }

/* ---- the two processes ---- */

typedef struct sh_proc_s {
  int sock;
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
} sh_proc_t;

/* 1 when the process is set up; 0 when it should skip (no stream memory operations). */
static int sh_open(sh_proc_t* p, int role) {
  int count = 0;
  SH_REQUIRE_OK(gpuhal_driver_create(NULL, &p->driver), 0);
  SH_REQUIRE_OK(gpuhal_driver_device_count(p->driver, &count), 0);
  SH_REQUIRE_OK(gpuhal_device_create(p->driver, role == 1 && count > 1 ? 1 : 0, NULL, &p->device), 0);
  return gpuhal_driver_has_feature(p->driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS);
}

static void sh_close(sh_proc_t* p) {
  if (p->device) TU_CHECK_OK(gpuhal_device_wait_idle(p->device, sh_seconds(SH_WAIT_S)));
  gpuhal_device_release(p->device);
  gpuhal_driver_release(p->driver);
}

typedef void (*sh_role_fn)(sh_proc_t* p);

static void sh_child(sh_role_fn fn, int sock, int role, int needs_memops) {
  sh_proc_t p;
  memset(&p, 0, sizeof(p));
  p.sock = sock;
  if (sh_open(&p, role) || (!needs_memops && !tu_state.failed)) {
    fn(&p);
  } else if (!tu_state.failed) {
    tu_state.skipped = 1;
  }
  sh_close(&p);
  fflush(stdout);
  fflush(stderr);
  _exit(tu_state.failed ? 1 : tu_state.skipped ? 77 : 0);
}

/* Runs `a` and `b` in two children and waits for both (SH_WAIT_S * 3 at most). A child
 * killed by SIGKILL passes when `a_dies` says A is meant to. With `needs_memops`, the
 * children skip where semaphores cannot be shared. */
static void sh_run_with(sh_role_fn a, sh_role_fn b, int a_dies, int needs_memops) {
  int sv[2], status[2] = {0, 0}, done[2] = {0, 0}, i;
  pid_t pid[2];
  int64_t deadline = gpuhal_now_ns() + (int64_t)SH_WAIT_S * 3 * 1000000000ll;
  TU_REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  fflush(stdout);
  fflush(stderr);
  for (i = 0; i < 2; ++i) {
    pid[i] = fork();
    TU_REQUIRE(pid[i] >= 0);
    if (pid[i] == 0) {
      close(sv[1 - i]);
      sh_child(i == 0 ? a : b, sv[i], i, needs_memops);
    }
  }
  close(sv[0]);
  close(sv[1]);
  while ((!done[0] || !done[1]) && gpuhal_now_ns() < deadline) {
    for (i = 0; i < 2; ++i)
      if (!done[i] && waitpid(pid[i], &status[i], WNOHANG) == pid[i]) done[i] = 1;
    tu_sleep_ns(1000000);
  }
  for (i = 0; i < 2; ++i) {
    if (done[i]) continue;
    TU_FAIL_AT(__FILE__, __LINE__, "process %c hung: killed", 'A' + i);
    kill(pid[i], SIGKILL);
    waitpid(pid[i], &status[i], 0);
    return;
  }
  for (i = 0; i < 2; ++i) {
    /* A skipping process skips the case, one meant to die too (it never got to). */
    if (WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 77) {
      TU_SKIP("no stream memory operations (GPUHAL_FEATURE_SEMAPHORE_MEMOPS)");
    }
    if (i == 0 && a_dies) {
      TU_CHECK(WIFSIGNALED(status[0]) && WTERMSIG(status[0]) == SIGKILL);
      continue;
    }
    if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0)
      TU_FAIL_AT(__FILE__, __LINE__, "process %c failed (status 0x%x)", 'A' + i, status[i]);
  }
}

static void sh_run(sh_role_fn a, sh_role_fn b, int a_dies) { sh_run_with(a, b, a_dies, 1); }

/* A semaphore of A's, exported, sent to B, imported there. */
static gpuhal_semaphore_t* sh_share_semaphore(sh_proc_t* p, int exporter, const char* label) {
  gpuhal_semaphore_t* s = NULL;
  int fd = -1;
  if (exporter) {
    SH_REQUIRE_OK(gpuhal_semaphore_create(p->driver, 0, &s), NULL);
    SH_REQUIRE_OK(gpuhal_semaphore_export(s, &fd), NULL);
    TU_CHECK(fd >= 0);
    TU_CHECK(ts_send(p->sock, "S", 1, fd));
    close(fd);
  } else {
    char tag = 0;
    TU_CHECK(ts_recv(p->sock, &tag, 1, &fd));
    TU_CHECK(tag == 'S' && fd >= 0);
    SH_REQUIRE_OK(gpuhal_semaphore_import(p->driver, fd, &s), NULL);
    close(fd);
  }
  if (s) TU_CHECK_OK(gpuhal_semaphore_set_label(s, label));
  return s;
}

/* An exportable buffer of A's (filled with zeros), exported, sent, imported by B. */
static gpuhal_buffer_t* sh_share_buffer(sh_proc_t* p, int exporter, uint64_t size, gpuhal_buffer_handle_t* out) {
  gpuhal_buffer_t* b = NULL;
  gpuhal_buffer_handle_t h;
  memset(&h, 0, sizeof(h));
  if (exporter) {
    void* zeros = calloc(1, (size_t)size);
    SH_REQUIRE_OK(gpuhal_buffer_allocate_exportable(p->device, size, &b), NULL);
    TU_CHECK_OK(gpuhal_buffer_write(b, 0, zeros, size));
    free(zeros);
    SH_REQUIRE_OK(gpuhal_buffer_export(b, &h), NULL);
    TU_CHECK(ts_send(p->sock, &h, sizeof(h), h.fd));
    if (h.fd >= 0) close(h.fd);
  } else {
    int fd = -1;
    TU_CHECK(ts_recv(p->sock, &h, sizeof(h), &fd));
    h.fd = fd;
    SH_REQUIRE_OK(gpuhal_buffer_import(p->device, &h, &b), NULL);
    TU_CHECK_EQ_INT(gpuhal_buffer_size(b), size);
    if (fd >= 0) close(fd);
  }
  if (out) *out = h;
  return b;
}

/* One step of the GPU ping-pong, recorded: copies the cell into log[step], then writes
 * `next` into the cell. */
static gpuhal_command_buffer_t* sh_step(sh_proc_t* p, gpuhal_buffer_t* cell, gpuhal_buffer_t* log, uint32_t step,
                                        uint64_t next) {
  gpuhal_command_buffer_t* cb = NULL;
  SH_REQUIRE_OK(gpuhal_command_buffer_create(p->device, 0, 0, &cb), NULL);
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(cell, 0), gpuhal_ref_buffer(log, step * 8u), 8));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_cmd_update(cb, &next, gpuhal_ref_buffer(cell, 0), 8));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  return cb;
}

/* A takes the even turns, B the odd ones: step i waits for `turn` >= its previous value,
 * runs, and signals the next, all on the GPU. Both record every step first (CUDA may make
 * a graph's instantiation wait for work parked on a value: see the README), then submit
 * them all at once, so most waits are submitted long before the other process signals
 * them. */
static void sh_ping_pong(sh_proc_t* p, int a) {
  gpuhal_semaphore_t* turn = sh_share_semaphore(p, a, "turn");
  gpuhal_buffer_t* cell = sh_share_buffer(p, a, 8, NULL);
  gpuhal_buffer_t* log = NULL;
  gpuhal_command_buffer_t** cbs = (gpuhal_command_buffer_t**)calloc(SH_STEPS, sizeof(*cbs));
  uint64_t* got = (uint64_t*)calloc(SH_STEPS, 8);
  uint32_t i;
  TU_REQUIRE(turn && cell && got && cbs);
  TU_REQUIRE_OK(gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_DEVICE, SH_STEPS * 8u, &log));
  for (i = 0; i < SH_STEPS; ++i) {
    cbs[i] = sh_step(p, cell, log, i, 2ull * i + (a ? 1 : 2));
    TU_REQUIRE(cbs[i]);
  }
  TU_CHECK(a ? ts_note(p->sock, 'g') : ts_expect(p->sock, 'g')); /* both set up: go */
  for (i = 0; i < SH_STEPS; ++i) {
    uint64_t wait = 2ull * i + (a ? 0 : 1), next = 2ull * i + (a ? 1 : 2);
    TU_CHECK_OK(gpuhal_queue_execute(p->device, 0, gpuhal_semaphore_list_one(&turn, &wait),
                                     gpuhal_semaphore_list_one(&turn, &next), cbs[i], NULL));
    gpuhal_command_buffer_release(cbs[i]);
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(turn, 2ull * SH_STEPS, sh_seconds(SH_WAIT_S)));
  TU_CHECK_OK(gpuhal_buffer_read(log, 0, got, SH_STEPS * 8u));
  for (i = 0; i < SH_STEPS; ++i) {
    uint64_t want = 2ull * i + (a ? 0 : 1); /* what the other side wrote last */
    if (got[i] != want) {
      TU_FAIL_AT(__FILE__, __LINE__, "%c step %u read %llu, want %llu", a ? 'A' : 'B', i, (unsigned long long)got[i],
                 (unsigned long long)want);
      break;
    }
  }
  /* Neither releases before both are done with the cell. */
  TU_CHECK(ts_note(p->sock, 'd') && ts_expect(p->sock, 'd'));
  free(got);
  free(cbs);
  gpuhal_buffer_release(log);
  gpuhal_buffer_release(cell);
  gpuhal_semaphore_release(turn);
}
static void sh_ping_pong_a(sh_proc_t* p) { sh_ping_pong(p, 1); }
static void sh_ping_pong_b(sh_proc_t* p) { sh_ping_pong(p, 0); }

TU_TEST(gpu_ping_pong_orders_work_of_two_processes_on_the_gpu) { sh_run(sh_ping_pong_a, sh_ping_pong_b, 0); }

/* The same turns taken by host signals and host waits. */
static void sh_host_ping_pong(sh_proc_t* p, int a) {
  gpuhal_semaphore_t* turn = sh_share_semaphore(p, a, "turn");
  uint64_t value = 0;
  uint32_t i;
  TU_REQUIRE(turn);
  for (i = 0; i < SH_STEPS; ++i) {
    uint64_t mine = 2ull * i + (a ? 1 : 2);
    gpuhal_status_t s = gpuhal_semaphore_wait(turn, mine - 1, sh_seconds(SH_WAIT_S));
    if (s) {
      TU_FAIL_AT(__FILE__, __LINE__, "step %u: %s", i, gpuhal_status_message(s));
      gpuhal_status_free(s);
      break;
    }
    TU_CHECK_OK(gpuhal_semaphore_signal(turn, mine));
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(turn, 2ull * SH_STEPS, sh_seconds(SH_WAIT_S)));
  TU_CHECK_OK(gpuhal_semaphore_query(turn, &value));
  TU_CHECK_EQ_INT(value, 2ull * SH_STEPS);
  gpuhal_semaphore_release(turn);
}
static void sh_host_ping_pong_a(sh_proc_t* p) { sh_host_ping_pong(p, 1); }
static void sh_host_ping_pong_b(sh_proc_t* p) { sh_host_ping_pong(p, 0); }

TU_TEST(host_ping_pong_wakes_waiters_of_the_other_process) { sh_run(sh_host_ping_pong_a, sh_host_ping_pong_b, 0); }

/* A timeline keeps its highest value across processes. Each round A's GPU work signals
 * 10r + 5 (held by a gate of A's own) and B host-signals 10r + 10 before A opens the gate;
 * both then wait for 10r + 10. A GPU signal is a plain store to the shared word: A's landed
 * over B's higher value, A had not seen B's value yet, and nothing remembered it: A's wait
 * timed out (within a few rounds) and a fresh import read 10r + 5. */
#define SH_INTERLEAVE_ROUNDS 60
static void sh_interleave_a(sh_proc_t* p) {
  gpuhal_semaphore_t* s = sh_share_semaphore(p, 1, "interleaved");
  gpuhal_semaphore_t* gate = NULL;
  uint64_t r;
  TU_REQUIRE(s);
  TU_REQUIRE_OK(gpuhal_semaphore_create(p->driver, 0, &gate));
  for (r = 1; r <= SH_INTERLEAVE_ROUNDS && !tu_state.failed; ++r) {
    uint64_t low = 10 * r + 5;
    gpuhal_status_t st;
    TU_CHECK_OK(gpuhal_queue_execute(p->device, 0, gpuhal_semaphore_list_one(&gate, &r),
                                     gpuhal_semaphore_list_one(&s, &low), NULL, NULL));
    TU_CHECK(ts_note(p->sock, 'q') && ts_expect(p->sock, 's'));
    TU_CHECK_OK(gpuhal_semaphore_signal(gate, r));
    st = gpuhal_semaphore_wait(s, 10 * r + 10, sh_seconds(SH_WAIT_S));
    if (st) TU_FAIL_AT(__FILE__, __LINE__, "round %u: %s", (unsigned)r, gpuhal_status_message(st));
    gpuhal_status_free(st);
    TU_CHECK(ts_note(p->sock, tu_state.failed ? 'x' : 'w') && ts_expect(p->sock, 'w'));
  }
  TU_CHECK_OK(gpuhal_device_wait_idle(p->device, sh_seconds(SH_WAIT_S)));
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(s);
}
static void sh_interleave_b(sh_proc_t* p) {
  gpuhal_semaphore_t* s = sh_share_semaphore(p, 0, "interleaved");
  uint64_t r;
  TU_REQUIRE(s);
  for (r = 1; r <= SH_INTERLEAVE_ROUNDS; ++r) {
    char c = 0;
    TU_CHECK(ts_expect(p->sock, 'q'));
    TU_CHECK_OK(gpuhal_semaphore_signal(s, 10 * r + 10));
    TU_CHECK(ts_note(p->sock, 's'));
    TU_CHECK_OK(gpuhal_semaphore_wait(s, 10 * r + 10, sh_seconds(SH_WAIT_S)));
    TU_CHECK(ts_recv(p->sock, &c, 1, NULL) && ts_note(p->sock, 'w'));
    if (c != 'w') break; /* A failed: it reports the round */
  }
  gpuhal_semaphore_release(s);
}

TU_TEST(a_lower_gpu_signal_of_one_process_does_not_lose_the_others_higher_value) {
  sh_run(sh_interleave_a, sh_interleave_b, 0);
}

/* A fails the semaphore; B's host wait and B's queued GPU work fail with A's code and
 * reason. */
static void sh_fail_a(sh_proc_t* p) {
  gpuhal_semaphore_t* s = sh_share_semaphore(p, 1, "weights");
  TU_REQUIRE(s);
  TU_CHECK(ts_expect(p->sock, 'w')); /* B's waits are in place */
  TU_CHECK_OK(gpuhal_semaphore_signal(s, 2));
  gpuhal_semaphore_fail(s, gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "weights file truncated at byte %d", 4096));
  TU_CHECK(ts_expect(p->sock, 'd'));
  gpuhal_semaphore_release(s);
}
static void sh_fail_b(sh_proc_t* p) {
  gpuhal_semaphore_t* s = sh_share_semaphore(p, 0, "weights");
  gpuhal_semaphore_t* out = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_buffer_t* buf = NULL;
  uint64_t five = 5, one = 1, value = 0;
  TU_REQUIRE(s);
  TU_REQUIRE_OK(gpuhal_semaphore_create(p->driver, 0, &out));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_DEVICE, 64, &buf));
  TU_REQUIRE_OK(gpuhal_command_buffer_create(p->device, 0, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buf, 0), 64, &one, 4));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(gpuhal_queue_execute(p->device, 0, gpuhal_semaphore_list_one(&s, &five),
                                   gpuhal_semaphore_list_one(&out, &one), cb, NULL));
  TU_CHECK(ts_note(p->sock, 'w'));
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 5, sh_seconds(SH_WAIT_S)), GPUHAL_STATUS_DATA_LOSS,
                  "weights file truncated at byte 4096");
  TU_CHECK_STATUS(gpuhal_semaphore_wait(out, 1, sh_seconds(SH_WAIT_S)), GPUHAL_STATUS_DATA_LOSS,
                  "weights file truncated at byte 4096");
  TU_CHECK_STATUS(gpuhal_semaphore_query(s, &value), GPUHAL_STATUS_DATA_LOSS, "failed in process");
  TU_CHECK_STATUS(gpuhal_semaphore_signal(s, 9), GPUHAL_STATUS_DATA_LOSS, "has failed");
  TU_CHECK(ts_note(p->sock, 'd'));
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(buf);
  gpuhal_semaphore_release(out);
  gpuhal_semaphore_release(s);
}

TU_TEST(a_failure_crosses_with_its_code_and_reason) { sh_run(sh_fail_a, sh_fail_b, 0); }

/* A signal checks the value and failure the other process left: a value not above what A
 * signalled, or any value after A failed it, is refused. B's signal was checked against
 * what B had last seen (0: imported before A signalled) and said OK. */
static void sh_signal_check_a(sh_proc_t* p) {
  gpuhal_semaphore_t* s = sh_share_semaphore(p, 1, "stage");
  TU_REQUIRE(s);
  TU_CHECK(ts_expect(p->sock, 'i'));
  TU_CHECK_OK(gpuhal_semaphore_signal(s, 5));
  TU_CHECK(ts_note(p->sock, 'v'));
  TU_CHECK(ts_expect(p->sock, 'c'));
  gpuhal_semaphore_fail(s, gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "stage lost its input"));
  TU_CHECK(ts_note(p->sock, 'f'));
  TU_CHECK(ts_expect(p->sock, 'd'));
  gpuhal_semaphore_release(s);
}
static void sh_signal_check_b(sh_proc_t* p) {
  gpuhal_semaphore_t* s = sh_share_semaphore(p, 0, "stage");
  TU_REQUIRE(s);
  TU_CHECK(ts_note(p->sock, 'i'));
  TU_CHECK(ts_expect(p->sock, 'v'));
  TU_CHECK_STATUS(gpuhal_semaphore_signal(s, 3), GPUHAL_STATUS_FAILED_PRECONDITION, "must be above");
  TU_CHECK_STATUS(gpuhal_semaphore_signal(s, 5), GPUHAL_STATUS_FAILED_PRECONDITION, "must be above");
  TU_CHECK(ts_note(p->sock, 'c'));
  TU_CHECK(ts_expect(p->sock, 'f'));
  TU_CHECK_STATUS(gpuhal_semaphore_signal(s, 9), GPUHAL_STATUS_DATA_LOSS, "stage lost its input");
  TU_CHECK(ts_note(p->sock, 'd'));
  gpuhal_semaphore_release(s);
}

TU_TEST(a_signal_is_checked_against_the_other_process) { sh_run(sh_signal_check_a, sh_signal_check_b, 0); }

/* A signals 1 and dies holding the rest; B's timed waits return, and B fails the semaphore
 * itself, which releases its GPU work waiting on it. */
static void sh_die_a(sh_proc_t* p) {
  gpuhal_semaphore_t* s = sh_share_semaphore(p, 1, "producer");
  TU_REQUIRE(s);
  TU_CHECK_OK(gpuhal_semaphore_signal(s, 1));
  TU_CHECK(ts_expect(p->sock, 'k'));
  raise(SIGKILL);
}
static void sh_die_b(sh_proc_t* p) {
  gpuhal_semaphore_t* s = sh_share_semaphore(p, 0, "producer");
  gpuhal_semaphore_t* out = NULL;
  uint64_t two = 2, one = 1;
  char byte;
  struct pollfd pf;
  TU_REQUIRE(s);
  TU_REQUIRE_OK(gpuhal_semaphore_create(p->driver, 0, &out));
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, sh_seconds(SH_WAIT_S)));
  TU_CHECK_OK(gpuhal_queue_execute(p->device, 0, gpuhal_semaphore_list_one(&s, &two),
                                   gpuhal_semaphore_list_one(&out, &one), NULL, NULL));
  TU_CHECK(ts_note(p->sock, 'k'));
  /* A is gone once its end of the socket closes. */
  pf.fd = p->sock;
  pf.events = POLLIN;
  TU_CHECK(poll(&pf, 1, SH_WAIT_S * 1000) == 1 && read(p->sock, &byte, 1) == 0);
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 2, gpuhal_timeout_relative_ns(50000000)), GPUHAL_STATUS_DEADLINE_EXCEEDED,
                  "timeout");
  TU_CHECK_STATUS(gpuhal_semaphore_wait(s, 2, gpuhal_timeout_immediate()), GPUHAL_STATUS_DEADLINE_EXCEEDED, "timeout");
  gpuhal_semaphore_fail(s, gpuhal_status_make(GPUHAL_STATUS_ABORTED, "the producer process died"));
  TU_CHECK_STATUS(gpuhal_semaphore_wait(out, 1, sh_seconds(SH_WAIT_S)), GPUHAL_STATUS_ABORTED,
                  "the producer process died");
  gpuhal_semaphore_release(out);
  gpuhal_semaphore_release(s);
}

TU_TEST(a_dead_producer_leaves_timed_waits_and_a_failure_to_the_consumer) { sh_run(sh_die_a, sh_die_b, 1); }

/* A buffer written in one process is read in the other; each side releases first once. */
static void sh_buffers(sh_proc_t* p, int a) {
  uint32_t round;
  for (round = 0; round < 2; ++round) {
    gpuhal_buffer_handle_t h;
    gpuhal_buffer_t* b = sh_share_buffer(p, a, 1u << 20, &h);
    uint32_t* data = (uint32_t*)malloc(1u << 20);
    uint32_t i, n = (1u << 20) / 4u;
    int releaser = round == 0 ? a : !a; /* round 0: A releases first; round 1: B */
    int vmm = h.type == GPUHAL_BUFFER_HANDLE_FD;
    TU_REQUIRE(b && data);
    if (a) {
      for (i = 0; i < n; ++i) data[i] = i * 3u + round;
      TU_CHECK_OK(gpuhal_buffer_write(b, 0, data, 1u << 20));
      TU_CHECK(ts_note(p->sock, 'w'));
      TU_CHECK(ts_expect(p->sock, 'r')); /* B read it and wrote its own */
      TU_CHECK_OK(gpuhal_buffer_read(b, 0, data, 1u << 20));
      for (i = 0; i < n && data[i] == ~i; ++i) {
      }
      TU_CHECK_EQ_INT(i, n);
    } else {
      TU_CHECK(ts_expect(p->sock, 'w'));
      TU_CHECK_OK(gpuhal_buffer_read(b, 0, data, 1u << 20));
      for (i = 0; i < n && data[i] == i * 3u + round; ++i) {
      }
      TU_CHECK_EQ_INT(i, n);
      for (i = 0; i < n; ++i) data[i] = ~i;
      TU_CHECK_OK(gpuhal_buffer_write(b, 0, data, 1u << 20));
      TU_CHECK(ts_note(p->sock, 'r'));
    }
    /* Legacy IPC memory must outlive its importers: there the importer releases first. */
    if (!vmm) releaser = !a;
    if (releaser) {
      gpuhal_buffer_release(b);
      TU_CHECK(ts_note(p->sock, 'x'));
      TU_CHECK(ts_expect(p->sock, 'y'));
    } else {
      TU_CHECK(ts_expect(p->sock, 'x'));
      TU_CHECK_OK(gpuhal_buffer_read(b, 0, data, 1u << 20)); /* still there for this side */
      for (i = 0; i < n && data[i] == ~i; ++i) {
      }
      TU_CHECK_EQ_INT(i, n);
      gpuhal_buffer_release(b);
      TU_CHECK(ts_note(p->sock, 'y'));
    }
    free(data);
  }
}
static void sh_buffers_a(sh_proc_t* p) { sh_buffers(p, 1); }
static void sh_buffers_b(sh_proc_t* p) { sh_buffers(p, 0); }

TU_TEST(buffers_are_written_in_one_process_and_read_in_the_other_released_in_either_order) {
  sh_run(sh_buffers_a, sh_buffers_b, 0);
}

/* A plain device buffer exports through a legacy IPC handle. */
static void sh_ipc_a(sh_proc_t* p) {
  gpuhal_buffer_t* b = NULL;
  gpuhal_buffer_handle_t h;
  uint32_t v = 0xfeedu;
  gpuhal_status_t s;
  TU_REQUIRE_OK(gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_DEVICE, 4096, &b));
  TU_CHECK_OK(gpuhal_buffer_write(b, 0, &v, 4));
  s = gpuhal_buffer_export(b, &h);
  if (s) memset(&h, 0, sizeof(h)); /* h.type 0 tells B */
  if (s && gpuhal_status_code(s) != GPUHAL_STATUS_UNAVAILABLE)
    TU_FAIL_AT(__FILE__, __LINE__, "%s", gpuhal_status_message(s));
  gpuhal_status_free(s);
  TU_CHECK(ts_send(p->sock, &h, sizeof(h), -1));
  TU_CHECK(ts_expect(p->sock, 'y')); /* B is done: the memory may go */
  gpuhal_buffer_release(b);
}
static void sh_ipc_b(sh_proc_t* p) {
  gpuhal_buffer_handle_t h;
  gpuhal_buffer_t* b = NULL;
  uint32_t v = 0;
  gpuhal_status_t s;
  TU_CHECK(ts_recv(p->sock, &h, sizeof(h), NULL));
  if (h.type == GPUHAL_BUFFER_HANDLE_IPC) {
    s = gpuhal_buffer_import(p->device, &h, &b);
    if (s && strstr(gpuhal_status_message(s), "CUDA_ERROR_NOT_SUPPORTED")) {
      tu_state.skipped = 1; /* softcuda without legacy IPC */
    } else if (s) {
      TU_FAIL_AT(__FILE__, __LINE__, "%s", gpuhal_status_message(s));
    } else {
      TU_CHECK_OK(gpuhal_buffer_read(b, 0, &v, 4));
      TU_CHECK_EQ_INT(v, 0xfeedu);
    }
    gpuhal_status_free(s);
    gpuhal_buffer_release(b);
  } else {
    tu_state.skipped = 1;
  }
  TU_CHECK(ts_note(p->sock, 'y'));
}

TU_TEST(a_plain_device_buffer_exports_through_legacy_ipc) { sh_run(sh_ipc_a, sh_ipc_b, 0); }

/* Many semaphores at once: B signals each of 64 from the host and the GPU, A waits for them
 * all (a wait on several shared semaphores, which the driver's watch serves). */
#define SH_MANY 64u
static void sh_many(sh_proc_t* p, int a) {
  gpuhal_semaphore_t* s[SH_MANY];
  uint64_t values[SH_MANY];
  uint32_t i;
  for (i = 0; i < SH_MANY; ++i) {
    s[i] = sh_share_semaphore(p, a, "many");
    TU_REQUIRE(s[i]);
    values[i] = 1;
  }
  if (a) {
    gpuhal_semaphore_list_t list;
    list.count = SH_MANY;
    list.semaphores = s;
    list.values = values;
    TU_CHECK(ts_note(p->sock, 'g'));
    TU_CHECK_OK(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, list, sh_seconds(SH_WAIT_S)));
  } else {
    uint64_t one = 1;
    TU_CHECK(ts_expect(p->sock, 'g'));
    for (i = 0; i < SH_MANY; ++i) {
      if (i % 2)
        TU_CHECK_OK(gpuhal_semaphore_signal(s[i], 1));
      else
        TU_CHECK_OK(gpuhal_queue_execute(p->device, i % gpuhal_device_queue_count(p->device),
                                         gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s[i], &one), NULL,
                                         NULL));
    }
  }
  TU_CHECK(ts_note(p->sock, 'd') && ts_expect(p->sock, 'd'));
  for (i = 0; i < SH_MANY; ++i) gpuhal_semaphore_release(s[i]);
}
static void sh_many_a(sh_proc_t* p) { sh_many(p, 1); }
static void sh_many_b(sh_proc_t* p) { sh_many(p, 0); }

TU_TEST(many_shared_semaphores_waited_on_at_once) { sh_run(sh_many_a, sh_many_b, 0); }

/* Bad input, in one process (a child still: the parent never loads CUDA). */
static void sh_bad_a(sh_proc_t* p) {
  gpuhal_semaphore_t *s = NULL, *gate = NULL, *got = NULL;
  gpuhal_buffer_t* pinned = NULL;
  gpuhal_buffer_handle_t h;
  uint64_t one = 1;
  char path[] = "/tmp/gpuhal-test-notasemaphore-XXXXXX";
  int fd = -1, junk;
  TU_REQUIRE_OK(gpuhal_semaphore_create(p->driver, 0, &s));
  TU_CHECK_STATUS(gpuhal_semaphore_export(s, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "out_fd");
  TU_CHECK_STATUS(gpuhal_semaphore_export(NULL, &fd), GPUHAL_STATUS_INVALID_ARGUMENT, "semaphore");
  TU_CHECK_STATUS(gpuhal_semaphore_import(p->driver, -1, &got), GPUHAL_STATUS_INVALID_ARGUMENT, "fd");
  TU_CHECK_STATUS(gpuhal_semaphore_import(p->driver, 0, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "out_semaphore");
  junk = mkstemp(path);
  TU_REQUIRE(junk >= 0);
  unlink(path);
  TU_CHECK_STATUS(gpuhal_semaphore_import(p->driver, junk, &got), GPUHAL_STATUS_INVALID_ARGUMENT, "not a file");
  TU_CHECK(ftruncate(junk, 4096) == 0);
  TU_CHECK_STATUS(gpuhal_semaphore_import(p->driver, junk, &got), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "header does not match");
  close(junk);
  TU_CHECK(got == NULL);
  {
    /* A value above what a shared semaphore may hold: refused, not exported stuck. */
    gpuhal_semaphore_t* far = NULL;
    TU_REQUIRE_OK(gpuhal_semaphore_create(p->driver, (1ull << 63) + 7, &far));
    TU_CHECK_STATUS(gpuhal_semaphore_export(far, &fd), GPUHAL_STATUS_OUT_OF_RANGE, "above 2^63 - 1");
    TU_CHECK(fd == -1);
    gpuhal_semaphore_release(far);
  }
  /* Work in flight on it: export refuses until that work is done. */
  TU_REQUIRE_OK(gpuhal_semaphore_create(p->driver, 0, &gate));
  TU_CHECK_OK(gpuhal_queue_execute(p->device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                   gpuhal_semaphore_list_one(&s, &one), NULL, NULL));
  tu_sleep_ns(2000000);
  {
    gpuhal_status_t st = gpuhal_semaphore_export(s, &fd);
    /* Issued (a timepoint) or waiting on the host for gate: refused, or allowed while it is
     * not yet issued (nothing in flight signals it then). */
    if (st) {
      TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_FAILED_PRECONDITION);
      TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "in flight");
      gpuhal_status_free(st);
    } else {
      close(fd);
    }
  }
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, sh_seconds(SH_WAIT_S)));
  TU_CHECK_OK(gpuhal_device_wait_idle(p->device, sh_seconds(SH_WAIT_S)));
  TU_CHECK_OK(gpuhal_semaphore_export(s, &fd));
  TU_CHECK(fd >= 0);
  {
    /* An export imported in its own process is one more view of the same timeline. */
    uint64_t v = 0;
    TU_CHECK_OK(gpuhal_semaphore_import(p->driver, fd, &got));
    TU_CHECK_OK(gpuhal_semaphore_query(got, &v));
    TU_CHECK_EQ_INT(v, 1);
    TU_CHECK_OK(gpuhal_semaphore_signal(got, 7));
    TU_CHECK_OK(gpuhal_semaphore_wait(s, 7, sh_seconds(SH_WAIT_S)));
    /* Its word holds values whole and the GPU compares with wraparound: at most 2^63 - 1. */
    TU_CHECK_STATUS(gpuhal_semaphore_signal(got, UINT64_MAX), GPUHAL_STATUS_OUT_OF_RANGE, "'value'");
    {
      uint64_t far = (1ull << 63), eight = 8;
      TU_CHECK_STATUS(gpuhal_queue_execute(p->device, 0, gpuhal_semaphore_list_empty(),
                                           gpuhal_semaphore_list_one(&s, &far), NULL, NULL),
                      GPUHAL_STATUS_OUT_OF_RANGE, "'signal'");
      TU_CHECK_OK(gpuhal_queue_execute(p->device, 0, gpuhal_semaphore_list_empty(),
                                       gpuhal_semaphore_list_one(&s, &eight), NULL, NULL));
      TU_CHECK_OK(gpuhal_semaphore_wait(got, 8, sh_seconds(SH_WAIT_S)));
    }
    TU_CHECK_OK(gpuhal_semaphore_signal(got, (1ull << 63) - 1));
    gpuhal_semaphore_release(got);
  }
  close(fd);
  /* Buffers. */
  TU_REQUIRE_OK(gpuhal_buffer_allocate(p->device, GPUHAL_MEMORY_HOST_PINNED, 64, &pinned));
  TU_CHECK_STATUS(gpuhal_buffer_export(pinned, &h), GPUHAL_STATUS_INVALID_ARGUMENT, "pinned or managed");
  TU_CHECK_STATUS(gpuhal_buffer_export(pinned, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "out_handle");
  gpuhal_buffer_release(pinned);
  pinned = NULL;
  memset(&h, 0, sizeof(h));
  TU_CHECK_STATUS(gpuhal_buffer_import(p->device, &h, &pinned), GPUHAL_STATUS_INVALID_ARGUMENT, "handle->type");
  TU_CHECK(pinned == NULL);
  h.type = GPUHAL_BUFFER_HANDLE_FD;
  h.size = 64;
  h.fd = -1;
  TU_CHECK_STATUS(gpuhal_buffer_import(p->device, &h, &pinned), GPUHAL_STATUS_INVALID_ARGUMENT, "handle->fd");
  TU_CHECK_STATUS(gpuhal_buffer_import(p->device, NULL, &pinned), GPUHAL_STATUS_INVALID_ARGUMENT, "handle");
  TU_CHECK_STATUS(gpuhal_buffer_allocate_exportable(p->device, 0, &pinned), GPUHAL_STATUS_INVALID_ARGUMENT, "size");
  gpuhal_semaphore_release(gate);
  gpuhal_semaphore_release(s);
}
static void sh_nothing(sh_proc_t* p) { (void)p; }

TU_TEST(bad_input_gets_a_status_naming_the_argument) { sh_run(sh_bad_a, sh_nothing, 0); }

/* Open file descriptors of this process (/proc/self/fd, less the directory's own). */
static int sh_open_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  struct dirent* e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1;
}

/* Thousands of shared objects, one after another: each semaphore exported, imported, used
 * and released (in both orders), each exportable buffer exported, imported and released;
 * afterwards the process holds the descriptors it held before (nothing kept per object). */
#define SH_CYCLES 1000u
static void sh_thousands_a(sh_proc_t* p) {
  int fds_before, fds_after;
  uint32_t i;
  fds_before = sh_open_fds();
  for (i = 0; i < SH_CYCLES && !tu_state.failed; ++i) {
    gpuhal_semaphore_t *s = NULL, *view = NULL;
    int fd = -1;
    uint64_t v = 0;
    TU_REQUIRE_OK(gpuhal_semaphore_create(p->driver, i, &s));
    TU_REQUIRE_OK(gpuhal_semaphore_export(s, &fd));
    TU_REQUIRE_OK(gpuhal_semaphore_import(p->driver, fd, &view));
    close(fd);
    TU_CHECK_OK(gpuhal_semaphore_signal(s, (uint64_t)i + 1));
    TU_CHECK_OK(gpuhal_semaphore_query(view, &v));
    TU_CHECK_EQ_INT(v, i + 1);
    if (i % 2) {
      gpuhal_semaphore_release(s);
      gpuhal_semaphore_release(view);
    } else {
      gpuhal_semaphore_release(view);
      gpuhal_semaphore_release(s);
    }
  }
  for (i = 0; i < SH_CYCLES / 10 && !tu_state.failed; ++i) {
    gpuhal_buffer_t *b = NULL, *view = NULL;
    gpuhal_buffer_handle_t h;
    uint32_t word = 0xC0DE0000u + i, got = 0;
    TU_REQUIRE_OK(gpuhal_buffer_allocate_exportable(p->device, 4096, &b));
    TU_REQUIRE_OK(gpuhal_buffer_export(b, &h));
    if (h.type == GPUHAL_BUFFER_HANDLE_FD) { /* legacy IPC cannot be opened in its own process */
      TU_REQUIRE_OK(gpuhal_buffer_import(p->device, &h, &view));
      TU_CHECK_OK(gpuhal_buffer_write(b, 0, &word, 4));
      TU_CHECK_OK(gpuhal_buffer_read(view, 0, &got, 4));
      TU_CHECK_EQ_INT(got, word);
    }
    if (h.fd >= 0) close(h.fd);
    gpuhal_buffer_release(i % 2 ? b : view);
    gpuhal_buffer_release(i % 2 ? view : b);
  }
  TU_CHECK_OK(gpuhal_device_wait_idle(p->device, sh_seconds(SH_WAIT_S)));
  fds_after = sh_open_fds();
  TU_CHECK_EQ_INT(fds_after, fds_before);
}

TU_TEST(thousands_of_shared_objects_leave_nothing_behind) { sh_run(sh_thousands_a, sh_nothing, 0); }

/* A host call's function releases the last reference of a shared semaphore (on the
 * host-call thread) and of an imported buffer, while other work waits on the GPU for
 * another shared semaphore: the unregistering is put off, nothing hangs, and once the work
 * is done the process can share again. */
typedef struct sh_callback_s {
  gpuhal_semaphore_t* s;
  gpuhal_buffer_t* b;
} sh_callback_t;
static gpuhal_status_t sh_release_in_callback(void* user) {
  sh_callback_t* c = (sh_callback_t*)user;
  gpuhal_semaphore_release(c->s);
  gpuhal_buffer_release(c->b);
  return NULL;
}
static void sh_callback_a(sh_proc_t* p) {
  gpuhal_semaphore_t *gate = NULL, *done = NULL, *parked = NULL, *again = NULL;
  gpuhal_buffer_t* b = NULL;
  gpuhal_buffer_handle_t h;
  sh_callback_t c;
  uint64_t one = 1;
  int fd = -1;
  memset(&c, 0, sizeof(c));
  TU_REQUIRE_OK(gpuhal_semaphore_create(p->driver, 0, &gate));
  TU_REQUIRE_OK(gpuhal_semaphore_export(gate, &fd));
  TU_REQUIRE_OK(gpuhal_semaphore_import(p->driver, fd, &c.s));
  close(fd);
  TU_REQUIRE_OK(gpuhal_semaphore_create(p->driver, 0, &parked));
  TU_REQUIRE_OK(gpuhal_semaphore_export(parked, &fd));
  close(fd);
  TU_REQUIRE_OK(gpuhal_buffer_allocate_exportable(p->device, 4096, &b));
  TU_REQUIRE_OK(gpuhal_buffer_export(b, &h));
  if (h.type == GPUHAL_BUFFER_HANDLE_FD) TU_CHECK_OK(gpuhal_buffer_import(p->device, &h, &c.b));
  if (h.fd >= 0) close(h.fd);
  TU_REQUIRE_OK(gpuhal_semaphore_create(p->driver, 0, &done));
  /* GPU work parked on `parked` (a shared semaphore: its wait goes to the word). */
  TU_CHECK_OK(gpuhal_queue_execute(p->device, 0, gpuhal_semaphore_list_one(&parked, &one),
                                   gpuhal_semaphore_list_empty(), NULL, NULL));
  TU_CHECK_OK(gpuhal_queue_host_call(p->device, 0, gpuhal_semaphore_list_one(&gate, &one),
                                     gpuhal_semaphore_list_one(&done, &one), sh_release_in_callback, &c));
  TU_CHECK_OK(gpuhal_semaphore_signal(gate, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(done, 1, sh_seconds(SH_WAIT_S)));
  /* Sharing again while work is parked is refused, not hung. */
  {
    gpuhal_status_t st = gpuhal_semaphore_create(p->driver, 0, &again);
    if (!st) st = gpuhal_semaphore_export(again, &fd);
    if (st) {
      TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_FAILED_PRECONDITION);
      gpuhal_status_free(st);
    } else {
      close(fd);
    }
    gpuhal_semaphore_release(again);
    again = NULL;
  }
  TU_CHECK_OK(gpuhal_semaphore_signal(parked, 1));
  TU_CHECK_OK(gpuhal_device_wait_idle(p->device, sh_seconds(SH_WAIT_S)));
  TU_CHECK_OK(gpuhal_semaphore_create(p->driver, 0, &again));
  TU_CHECK_OK(gpuhal_semaphore_export(again, &fd));
  if (fd >= 0) close(fd);
  gpuhal_semaphore_release(again);
  gpuhal_buffer_release(b);
  gpuhal_semaphore_release(done);
  gpuhal_semaphore_release(parked);
  gpuhal_semaphore_release(gate);
}

TU_TEST(a_host_call_releases_shared_objects_while_work_is_parked) { sh_run(sh_callback_a, sh_nothing, 0); }

/* An exportable buffer larger than the device: RESOURCE_EXHAUSTED naming the CUDA error (or
 * a size check), and the device allocates and shares normally afterwards. */
static void sh_oom_a(sh_proc_t* p) {
  gpuhal_device_info_t info;
  gpuhal_buffer_t *b = NULL, *big = NULL;
  gpuhal_buffer_handle_t h;
  gpuhal_status_t st;
  uint64_t granule = 2u << 20;
  TU_REQUIRE_OK(gpuhal_device_info(p->device, &info));
  /* Within the total (the argument check passes): the whole device (which a real GPU
   * refuses: the context has some), then half of it more while that is held. */
  st = gpuhal_buffer_allocate_exportable(p->device, info.total_memory / granule * granule, &big);
  if (!st) st = gpuhal_buffer_allocate_exportable(p->device, info.total_memory / 2 / granule * granule, &b);
  TU_CHECK(st != NULL && b == NULL);
  if (st) {
    TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_RESOURCE_EXHAUSTED);
    TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "exportable");
    gpuhal_status_free(st);
  }
  gpuhal_buffer_release(big);
  b = NULL;
  TU_REQUIRE_OK(gpuhal_buffer_allocate_exportable(p->device, 1u << 20, &b));
  TU_CHECK_OK(gpuhal_buffer_export(b, &h));
  if (h.fd >= 0) close(h.fd);
  gpuhal_buffer_release(b);
}

TU_TEST(an_exportable_buffer_out_of_memory_fails_and_recovers) { sh_run(sh_oom_a, sh_nothing, 0); }

/* Without stream memory operations a semaphore cannot be shared: UNAVAILABLE, saying why. */
static void sh_no_memops_a(sh_proc_t* p) {
  gpuhal_driver_options_t o;
  gpuhal_driver_t* d = NULL;
  gpuhal_semaphore_t *s = NULL, *got = NULL;
  int fd = -1;
  (void)p;
  memset(&o, 0, sizeof(o));
  o.semaphore_memops = -1;
  TU_REQUIRE_OK(gpuhal_driver_create(&o, &d));
  TU_REQUIRE_OK(gpuhal_semaphore_create(d, 0, &s));
  TU_CHECK_STATUS(gpuhal_semaphore_export(s, &fd), GPUHAL_STATUS_UNAVAILABLE, "stream memory operations");
  TU_CHECK_STATUS(gpuhal_semaphore_import(d, 0, &got), GPUHAL_STATUS_UNAVAILABLE, "stream memory operations");
  TU_CHECK(got == NULL);
  gpuhal_semaphore_release(s);
  gpuhal_driver_release(d);
}

TU_TEST(without_stream_memory_operations_sharing_is_unavailable) { sh_run_with(sh_no_memops_a, sh_nothing, 0, 0); }

TU_MAIN(TU_CASE(gpu_ping_pong_orders_work_of_two_processes_on_the_gpu),
        TU_CASE(a_signal_is_checked_against_the_other_process),
        TU_CASE(host_ping_pong_wakes_waiters_of_the_other_process), TU_CASE(a_failure_crosses_with_its_code_and_reason),
        TU_CASE(a_dead_producer_leaves_timed_waits_and_a_failure_to_the_consumer),
        TU_CASE(buffers_are_written_in_one_process_and_read_in_the_other_released_in_either_order),
        TU_CASE(a_plain_device_buffer_exports_through_legacy_ipc), TU_CASE(many_shared_semaphores_waited_on_at_once),
        TU_CASE(bad_input_gets_a_status_naming_the_argument), TU_CASE(thousands_of_shared_objects_leave_nothing_behind),
        TU_CASE(a_host_call_releases_shared_objects_while_work_is_parked),
        TU_CASE(an_exportable_buffer_out_of_memory_fails_and_recovers),
        TU_CASE(without_stream_memory_operations_sharing_is_unavailable),
        TU_CASE(a_lower_gpu_signal_of_one_process_does_not_lose_the_others_higher_value))
