/* bench_share - semaphores shared between two processes (gpuhal_semaphore_export/_import)
 * against the same work in one process, same run.
 *
 *   bench_share [steps] [repetitions]      (defaults 600, the most, and 5)
 *
 * The parent forks two children, A and B, joined by a Unix socket, and never loads CUDA
 * itself; A prints the table. With one GPU both use device 0 (two contexts that time-slice
 * it); with two or more, A uses device 0 and B device 1, and the one-process chains put
 * their even steps on device 0 and their odd ones on device 1, so every comparison has the
 * same placement. BS_ONE_GPU=1 keeps both on device 0 on a machine with more.
 *
 * 1. GPU -> GPU hop: a chain of `steps` tiny GPU operations (a 4-byte fill) that alternate
 *    between A and B, each waiting on the GPU for the value the previous one signalled on
 *    the GPU; every step is submitted before the chain starts, then A's host signals its
 *    head. Per hop, from that signal to A's host seeing the last value
 *      vs the same chain on two streams of one process written with the raw driver API:
 *      cuStreamWaitValue64 / cuMemsetD32Async / cuStreamWriteValue64 on a pinned,
 *      device-mapped word                                               target <= 1.2x
 *    1b: the raw chain in two processes (each registers a page both map) against the raw
 *        chain in one: what two processes cost the GPU itself (on one GPU, two contexts
 *        that time-slice)
 *    1c: gpuhal against the raw chain, both in two processes
 *    1d: gpuhal against the raw chain, both in one process (two queues, a local semaphore)
 *    The raw chains are enqueued whole before they start, so steps stay under what a
 *    stalled stream holds (BS_MAX_STEPS).
 * 2. host wake-up: A's host signals, B's host wait returns and signals back, A's returns;
 *    per wake-up
 *      vs the same ping-pong between two threads of one process on a local semaphore
 *                                                                         target <= 1.5x
 *
 * Numbers mean something only on a real GPU; on softcuda this is a smoke test. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* SCM_RIGHTS and the CMSG_ macros */
#endif
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

#include "test_socket.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define BS_MAX_REPS 32
#define BS_MAX_STEPS 600 /* 300 steps of 3 entries per stream */

typedef struct bs_proc_s {
  int sock;
  int a; /* 1 in A, 0 in B */
  int steps;
  int reps;
  int failures;
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;     /* A: device 0; B: device 1 when split, else 0 */
  gpuhal_buffer_t* scratch;    /* what the tiny operation fills */
  gpuhal_command_buffer_t* cb; /* the tiny operation, reusable */
  /* A, when split: device 1 for the odd steps of the one-process chains (else NULLs, and
   * the odd steps run on a second queue of `device`). */
  gpuhal_device_t* odd_device;
  gpuhal_buffer_t* odd_scratch;
  gpuhal_command_buffer_t* odd_cb;
} bs_proc_t;

static gpuhal_timeout_t bs_seconds(int s) { return gpuhal_timeout_relative_ns((int64_t)s * 1000000000ll); }

static int bs_ok(bs_proc_t* p, gpuhal_status_t s, const char* what) {
  if (!s) return 1;
  fprintf(stderr, "bench_share %c: %s: %s\n", p->a ? 'A' : 'B', what, gpuhal_status_message(s));
  gpuhal_status_free(s);
  p->failures++;
  return 0;
}

static int bs_ok_cu(bs_proc_t* p, CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return 1;
  fprintf(stderr, "bench_share %c: %s: CUresult %d\n", p->a ? 'A' : 'B', what, (int)r);
  p->failures++;
  return 0;
}

static int bs_sync(bs_proc_t* p, char what) {
  if (ts_note(p->sock, what) && ts_expect(p->sock, what)) return 1;
  fprintf(stderr, "bench_share %c: the other process did not reach '%c'\n", p->a ? 'A' : 'B', what);
  p->failures++;
  return 0;
}

static int bs_compare(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return a < b ? -1 : a > b;
}
static double bs_median(const double* v, int n) {
  double s[BS_MAX_REPS];
  memcpy(s, v, sizeof(double) * (size_t)n);
  qsort(s, (size_t)n, sizeof(double), bs_compare);
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void bs_row(const char* name, const double* ours, const double* theirs, int reps, double target) {
  double ratio[BS_MAX_REPS], mo = bs_median(ours, reps), mt;
  int i;
  if (!theirs) {
    printf("%-40s %10.2f\n", name, mo);
    return;
  }
  for (i = 0; i < reps; ++i) ratio[i] = theirs[i] > 0 ? ours[i] / theirs[i] : 0;
  mt = bs_median(theirs, reps);
  if (target <= 0) {
    printf("%-40s %10.2f %10.2f %7.2fx\n", name, mo, mt, bs_median(ratio, reps));
  } else {
    printf("%-40s %10.2f %10.2f %7.2fx %7.2fx %s\n", name, mo, mt, bs_median(ratio, reps), target,
           bs_median(ratio, reps) <= target ? "met" : "(over target)");
  }
  fflush(stdout);
}

/* A semaphore of A's, exported, sent to B over the socket, imported there. */
static gpuhal_semaphore_t* bs_share_semaphore(bs_proc_t* p) {
  gpuhal_semaphore_t* s = NULL;
  int fd = -1;
  if (p->a) {
    if (!bs_ok(p, gpuhal_semaphore_create(p->driver, 0, &s), "semaphore")) return NULL;
    if (!bs_ok(p, gpuhal_semaphore_export(s, &fd), "export") || !ts_send(p->sock, "S", 1, fd)) {
      p->failures++;
      gpuhal_semaphore_release(s);
      return NULL;
    }
    close(fd);
    return s;
  } else {
    char tag = 0;
    if (!ts_recv(p->sock, &tag, 1, &fd) || tag != 'S' || fd < 0) {
      p->failures++;
      return NULL;
    }
    bs_ok(p, gpuhal_semaphore_import(p->driver, fd, &s), "import");
    close(fd);
    return s;
  }
}

/* ---- 1. the GPU -> GPU chain ---- */

/* Submits this process's steps of a chain that starts above `base` on `s`: step i (0-based,
 * over the whole chain) waits for base+1+i and signals base+2+i; A (or queue 0) takes the
 * even steps, B (or queue 1) the odd ones. */
static int bs_chain_submit(bs_proc_t* p, gpuhal_semaphore_t* s, uint64_t base, int parity, gpuhal_device_t* device,
                           uint32_t queue, gpuhal_command_buffer_t* cb) {
  int i;
  for (i = parity; i < p->steps; i += 2) {
    uint64_t wait = base + 1 + (uint64_t)i, signal = base + 2 + (uint64_t)i;
    if (!bs_ok(p,
               gpuhal_queue_execute(device, queue, gpuhal_semaphore_list_one(&s, &wait),
                                    gpuhal_semaphore_list_one(&s, &signal), cb, NULL),
               "execute"))
      return 0;
  }
  return 1;
}

/* Microseconds per hop from the host signal of base+1 to the host seeing base+1+steps. */
static double bs_chain_run(bs_proc_t* p, gpuhal_semaphore_t* s, uint64_t base) {
  int64_t start = gpuhal_now_ns();
  if (!bs_ok(p, gpuhal_semaphore_signal(s, base + 1), "chain head") ||
      !bs_ok(p, gpuhal_semaphore_wait(s, base + 1 + (uint64_t)p->steps, bs_seconds(60)), "chain end"))
    return 0;
  return (double)(gpuhal_now_ns() - start) / 1000.0 / p->steps;
}

static double bs_chain_two_processes(bs_proc_t* p, gpuhal_semaphore_t* s, uint64_t base) {
  double us = 0;
  if (!bs_chain_submit(p, s, base, p->a ? 0 : 1, p->device, 0, p->cb) || !bs_sync(p, 'c')) return 0;
  if (p->a) us = bs_chain_run(p, s, base);
  bs_ok(p, gpuhal_device_wait_idle(p->device, bs_seconds(60)), "idle");
  bs_sync(p, 'C');
  return us;
}

static double bs_chain_one_process(bs_proc_t* p) {
  gpuhal_semaphore_t* s = NULL;
  double us = 0;
  if (!bs_ok(p, gpuhal_semaphore_create(p->driver, 0, &s), "semaphore")) return 0;
  if (bs_chain_submit(p, s, 0, 0, p->device, 0, p->cb) &&
      (p->odd_device ? bs_chain_submit(p, s, 0, 1, p->odd_device, 0, p->odd_cb)
                     : bs_chain_submit(p, s, 0, 1, p->device, 1, p->cb)))
    us = bs_chain_run(p, s, 0);
  bs_ok(p, gpuhal_device_wait_idle(p->device, bs_seconds(60)), "idle");
  if (p->odd_device) bs_ok(p, gpuhal_device_wait_idle(p->odd_device, bs_seconds(60)), "idle");
  gpuhal_semaphore_release(s);
  return us;
}

/* The same chain with the raw driver API on a pinned, device-mapped word: in one process
 * (A, two streams, `word` its own page; the odd steps' stream on device 1 when split) or in
 * two (each its own stream, `word` the page the parent shared before the fork, registered
 * in both). Every step is enqueued before A's host stores the head; A spins on the word for
 * the end. */
static double bs_chain_raw(bs_proc_t* p, volatile uint64_t* word, int two_processes) {
  const gpuhal__cuda_symbols_t* cu = p->device->cu;
  gpuhal_device_t* devices[2];
  gpuhal__context_scope_t scope;
  CUstream streams[2] = {NULL, NULL};
  CUdeviceptr word_dev[2] = {0, 0}, fill_dev[2];
  double us = 0;
  int i, k, ok = 1, registered = 0;
  devices[0] = p->device;
  devices[1] = !two_processes && p->odd_device ? p->odd_device : p->device;
  fill_dev[0] = p->scratch->address;
  fill_dev[1] = devices[1] == p->device ? p->scratch->address : p->odd_scratch->address;
  *word = 0;
  for (k = 0; ok && k < 2; ++k) {
    if (!bs_ok(p, gpuhal__context_enter(devices[k], &scope), "context")) return 0;
    ok = bs_ok_cu(p, cu->cuStreamCreate(&streams[k], CU_STREAM_NON_BLOCKING), "stream");
    if (ok && k == 0)
      ok = registered = bs_ok_cu(
          p, cu->cuMemHostRegister((void*)word, 4096, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
          "register");
    if (ok) ok = bs_ok_cu(p, cu->cuMemHostGetDevicePointer(&word_dev[k], (void*)word, 0), "device pointer");
    gpuhal__context_leave(devices[k], &scope);
  }
  for (i = 0; ok && i < p->steps; ++i) {
    k = i & 1;
    if (two_processes && k == p->a) continue; /* A takes the even steps */
    if (!bs_ok(p, gpuhal__context_enter(devices[k], &scope), "context")) break;
    ok =
        bs_ok_cu(p, cu->cuStreamWaitValue64(streams[k], word_dev[k], (cuuint64_t)i + 1, CU_STREAM_WAIT_VALUE_GEQ),
                 "wait") &&
        bs_ok_cu(p, cu->cuMemsetD32Async(fill_dev[k], (unsigned)i, 1, streams[k]), "fill") &&
        bs_ok_cu(p, cu->cuStreamWriteValue64(streams[k], word_dev[k], (cuuint64_t)i + 2, CU_STREAM_WRITE_VALUE_DEFAULT),
                 "write");
    gpuhal__context_leave(devices[k], &scope);
  }
  if (two_processes && !bs_sync(p, 'r')) ok = 0;
  if (ok && p->a) {
    int64_t start = gpuhal_now_ns();
    __atomic_store_n((uint64_t*)word, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n((uint64_t*)word, __ATOMIC_SEQ_CST) < (uint64_t)p->steps + 1) {
      if (gpuhal_now_ns() - start > 60000000000ll) {
        fprintf(stderr, "bench_share: the raw chain never ended\n");
        p->failures++;
        break;
      }
    }
    us = (double)(gpuhal_now_ns() - start) / 1000.0 / p->steps;
  }
  for (k = 1; k >= 0; --k) {
    if (!bs_ok(p, gpuhal__context_enter(devices[k], &scope), "context")) continue;
    if (streams[k]) {
      bs_ok_cu(p, cu->cuStreamSynchronize(streams[k]), "synchronize");
      cu->cuStreamDestroy(streams[k]);
    }
    if (k == 0 && registered) cu->cuMemHostUnregister((void*)word);
    gpuhal__context_leave(devices[k], &scope);
  }
  if (two_processes) bs_sync(p, 'R');
  return us;
}

/* ---- 2. host wake-ups ---- */

/* One side of the ping-pong over `steps` round trips above `base`: the pinger signals
 * base+1+2i and waits for base+2+2i; the ponger waits for base+1+2i and signals base+2+2i.
 * Microseconds per wake-up, as the pinger sees it. */
static double bs_host_ping_pong(bs_proc_t* p, gpuhal_semaphore_t* s, uint64_t base, int pinger) {
  int64_t start = gpuhal_now_ns();
  int i;
  for (i = 0; i < p->steps; ++i) {
    uint64_t ping = base + 1 + 2 * (uint64_t)i, pong = ping + 1;
    if (pinger) {
      if (!bs_ok(p, gpuhal_semaphore_signal(s, ping), "ping") ||
          !bs_ok(p, gpuhal_semaphore_wait(s, pong, bs_seconds(10)), "wait for pong"))
        return 0;
    } else {
      if (!bs_ok(p, gpuhal_semaphore_wait(s, ping, bs_seconds(10)), "wait for ping") ||
          !bs_ok(p, gpuhal_semaphore_signal(s, pong), "pong"))
        return 0;
    }
  }
  return (double)(gpuhal_now_ns() - start) / 1000.0 / (2.0 * p->steps);
}

typedef struct bs_ponger_s {
  bs_proc_t* p;
  gpuhal_semaphore_t* s;
} bs_ponger_t;

static void* bs_ponger_main(void* arg) {
  bs_ponger_t* t = (bs_ponger_t*)arg;
  bs_host_ping_pong(t->p, t->s, 0, 0);
  return NULL;
}

static double bs_host_one_process(bs_proc_t* p) {
  bs_ponger_t t;
  pthread_t thread;
  double us = 0;
  t.p = p;
  t.s = NULL;
  if (!bs_ok(p, gpuhal_semaphore_create(p->driver, 0, &t.s), "semaphore")) return 0;
  if (pthread_create(&thread, NULL, bs_ponger_main, &t) == 0) {
    us = bs_host_ping_pong(p, t.s, 0, 1);
    if (us == 0) gpuhal_semaphore_fail(t.s, gpuhal_status_make(GPUHAL_STATUS_ABORTED, "bench_share: pinger failed"));
    pthread_join(thread, NULL);
  } else {
    p->failures++;
  }
  gpuhal_semaphore_release(t.s);
  return us;
}

/* ---- the two processes ---- */

/* The tiny operation on `device`: a 4-byte fill of its own scratch buffer. */
static int bs_tiny(bs_proc_t* p, gpuhal_device_t* device, gpuhal_buffer_t** scratch, gpuhal_command_buffer_t** cb) {
  uint32_t pattern = 7;
  return bs_ok(p, gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, 256, scratch), "buffer") &&
         bs_ok(
             p,
             gpuhal_command_buffer_create(device, GPUHAL_COMMAND_BUFFER_REUSABLE | GPUHAL_COMMAND_BUFFER_STREAM, 0, cb),
             "command buffer") &&
         bs_ok(p, gpuhal_command_buffer_begin(*cb), "begin") &&
         bs_ok(p, gpuhal_cmd_fill(*cb, gpuhal_ref_buffer(*scratch, 0), 4, &pattern, 4), "fill") &&
         bs_ok(p, gpuhal_command_buffer_end(*cb), "end");
}

/* Whether A and B (and the one-process chains' two halves) run on two GPUs. */
static int bs_split(gpuhal_driver_t* driver) {
  const char* one = getenv("BS_ONE_GPU");
  int count = 0;
  if (one && one[0] == '1') return 0;
  return !gpuhal_driver_device_count(driver, &count) && count >= 2;
}

static int bs_open(bs_proc_t* p) {
  gpuhal_device_params_t params;
  int split;
  memset(&params, 0, sizeof(params));
  params.queue_count = 2;
  if (!bs_ok(p, gpuhal_driver_create(NULL, &p->driver), "driver")) return 0;
  split = bs_split(p->driver);
  if (!bs_ok(p, gpuhal_device_create(p->driver, split && !p->a ? 1 : 0, &params, &p->device), "device")) return 0;
  if (!gpuhal_driver_has_feature(p->driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS)) return 0;
  if (!bs_tiny(p, p->device, &p->scratch, &p->cb)) return 0;
  if (split && p->a &&
      (!bs_ok(p, gpuhal_device_create(p->driver, 1, &params, &p->odd_device), "device 1") ||
       !bs_tiny(p, p->odd_device, &p->odd_scratch, &p->odd_cb)))
    return 0;
  return 1;
}

static void bs_close(bs_proc_t* p) {
  if (p->device) bs_ok(p, gpuhal_device_wait_idle(p->device, bs_seconds(60)), "idle");
  if (p->odd_device) bs_ok(p, gpuhal_device_wait_idle(p->odd_device, bs_seconds(60)), "idle");
  gpuhal_command_buffer_release(p->cb);
  gpuhal_buffer_release(p->scratch);
  gpuhal_command_buffer_release(p->odd_cb);
  gpuhal_buffer_release(p->odd_scratch);
  gpuhal_device_release(p->device);
  gpuhal_device_release(p->odd_device);
  gpuhal_driver_release(p->driver);
}

static int bs_child(int sock, int a, int steps, int reps, volatile uint64_t* shared_page, volatile uint64_t* own_page) {
  bs_proc_t p;
  gpuhal_semaphore_t* chain = NULL;
  gpuhal_semaphore_t* host = NULL;
  double cross[BS_MAX_REPS], local[BS_MAX_REPS], raw[BS_MAX_REPS], raw2[BS_MAX_REPS], hcross[BS_MAX_REPS],
      hlocal[BS_MAX_REPS];
  char ready, other = 0;
  int r;
  memset(&p, 0, sizeof(p));
  p.sock = sock;
  p.a = a;
  p.steps = steps;
  p.reps = reps;
  /* Both say whether they can run; either one's "no" skips the run in both. */
  ready = bs_open(&p) && !p.failures ? 'y' : 'n';
  if (!ts_send(sock, &ready, 1, -1) || !ts_recv(sock, &other, 1, NULL)) p.failures++;
  if (ready == 'y' && other == 'y') {
    chain = bs_share_semaphore(&p);
    host = bs_share_semaphore(&p);
  }
  if (chain && host && !p.failures) {
    if (a)
      printf("bench_share: %d steps, median of %d repetitions, on %s (%s), %s\n%-40s %10s %10s %8s %8s\n", steps, reps,
             p.device->info.name, gpuhal_driver_cuda_library(p.driver),
             p.odd_device ? "A and even steps on device 0, B and odd steps on device 1" : "both processes on device 0",
             "case", "gpuhal us", "vs us", "ratio", "target");
    fflush(stdout);
    bs_chain_two_processes(&p, chain, 0); /* warm-up */
    for (r = 0; r < reps && !p.failures; ++r) {
      cross[r] = bs_chain_two_processes(&p, chain, (uint64_t)(r + 1) * ((uint64_t)steps + 1));
      raw2[r] = bs_chain_raw(&p, shared_page, 1);
      if (a) {
        local[r] = bs_chain_one_process(&p);
        raw[r] = bs_chain_raw(&p, own_page, 0);
      }
    }
    for (r = 0; r < reps && !p.failures; ++r) {
      uint64_t base = (uint64_t)r * 2 * (uint64_t)steps;
      if (!bs_sync(&p, 'h')) break;
      hcross[r] = bs_host_ping_pong(&p, host, base, a);
      if (!bs_sync(&p, 'H')) break;
      if (a) hlocal[r] = bs_host_one_process(&p);
    }
    if (a && !p.failures) {
      bs_row("1 GPU->GPU hop, two processes", cross, raw, reps, 1.2);
      bs_row("1b  raw, two processes (vs raw, one)", raw2, raw, reps, 0);
      bs_row("1c  gpuhal vs raw, both two processes", cross, raw2, reps, 0);
      bs_row("1d  gpuhal vs raw, both one process", local, raw, reps, 0);
      bs_row("2 host wake-up, two processes", hcross, hlocal, reps, 1.5);
    }
  }
  gpuhal_semaphore_release(chain);
  gpuhal_semaphore_release(host);
  bs_close(&p);
  fflush(stdout);
  fflush(stderr);
  if (p.failures) return 1;
  return ready == 'y' && other == 'y' ? 0 : 77;
}

int main(int argc, char** argv) {
  int steps = argc > 1 ? atoi(argv[1]) : BS_MAX_STEPS;
  int reps = argc > 2 ? atoi(argv[2]) : 5;
  int sv[2], status[2] = {0, 0}, done[2] = {0, 0}, i, result = 0;
  pid_t pid[2];
  int64_t deadline;
  volatile uint64_t* pages;
  if (steps < 2) steps = 2;
  if (steps > BS_MAX_STEPS) {
    printf(
        "bench_share: %d steps capped at %d (the raw chains are enqueued whole, and CUDA blocks an enqueue on a "
        "stalled stream past about a thousand entries)\n",
        steps, BS_MAX_STEPS);
    steps = BS_MAX_STEPS;
  }
  steps &= ~1; /* A and B take the same number of steps */
  /* The raw two-process chain's word: a page both children inherit. */
  pages = (volatile uint64_t*)mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if ((void*)pages == MAP_FAILED) return 1;
  if (reps < 1) reps = 1;
  if (reps > BS_MAX_REPS) reps = BS_MAX_REPS;
  deadline = gpuhal_now_ns() + 600ll * 1000000000;
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  fflush(stdout);
  for (i = 0; i < 2; ++i) {
    pid[i] = fork();
    if (pid[i] < 0) return 1;
    if (pid[i] == 0) {
      close(sv[1 - i]);
      _exit(bs_child(sv[i], i == 0, steps, reps, pages, pages + 4096 / sizeof(uint64_t)));
    }
  }
  close(sv[0]);
  close(sv[1]);
  while ((!done[0] || !done[1]) && gpuhal_now_ns() < deadline) {
    for (i = 0; i < 2; ++i)
      if (!done[i] && waitpid(pid[i], &status[i], WNOHANG) == pid[i]) done[i] = 1;
    if (!done[0] || !done[1]) usleep(1000);
  }
  for (i = 0; i < 2; ++i) {
    if (!done[i]) {
      fprintf(stderr, "bench_share: process %c hung: killed\n", 'A' + i);
      kill(pid[i], SIGKILL);
      waitpid(pid[i], &status[i], 0);
      result = 1;
    } else if (!WIFEXITED(status[i]) || (WEXITSTATUS(status[i]) != 0 && WEXITSTATUS(status[i]) != 77)) {
      fprintf(stderr, "bench_share: process %c failed (status 0x%x)\n", 'A' + i, status[i]);
      result = 1;
    } else if (WEXITSTATUS(status[i]) == 77 && !result) {
      result = 77;
    }
  }
  if (result == 77) printf("bench_share: skipped (no stream memory operations)\n");
  return result;
}
