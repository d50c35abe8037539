/* Randomized queue traffic (issue #14): 4 threads x 2 devices x 3 queues, through the
 * public API only.
 *
 * Each thread owns a timeline semaphore and submits its operations in batches: a batch is
 * a chain of hops (hop j waits the timeline at base + j and signals base + j + 1), submitted
 * from the LAST hop to the first, so every hop is queued before the one it waits on. A hop
 * is a dispatch (STREAM or GRAPH, reusable or a one-shot command buffer released right
 * after the call) adding 1 to its device's counter, a host call adding 1 to a host counter,
 * an alloca + dealloca pair, or a barrier; on a random device and queue. Some batches start
 * behind a host gate the thread signals after submitting the batch; some of those are
 * submitted first hop first instead, all on one device and queue, every hop waiting on the
 * gate too (on the memop path the hops park, and go behind each other on a parked stream:
 * gpuhal__action_park_chain); some hops also wait on a value another thread has already
 * submitted in full (so no cycle can form). Between
 * batches the thread polls (immediate timeouts: OK or DEADLINE_EXCEEDED, nothing else) and
 * waits with timeouts. Now and then (also while a gated batch waits for its gate) it
 * allocates a buffer and releases it at once: a free that waits for the whole context,
 * which no work may park beside (gpuhal__memory_gpu_wait_claim).
 *
 * Checks: every timeline ends exactly at its final value; each device's counter equals the
 * dispatches run on it; the host counter equals the host calls; nothing hangs (every wait
 * has a timeout, a global watchdog); nothing leaks (softcuda's report, fatal under CTest).
 *
 * Environment: GPUHAL_RANDOM_SEED (default: time-based, printed), GPUHAL_RANDOM_OPS (hops
 * per thread, default 300; raise it on a GPU). */
#include "test_internals.h"

#include "test_queue_util.h"

#define QR_THREADS 4
#define QR_DEVICES 2
#define QR_QUEUES 3
#define QR_MAX_BATCH 8

typedef struct qr_world_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* devices[QR_DEVICES];
  gpuhal_executable_t* exes[QR_DEVICES];
  gpuhal_kernel_t* inc[QR_DEVICES];
  gpuhal_buffer_t* counters[QR_DEVICES];
  gpuhal_command_buffer_t* reusable[QR_DEVICES][2]; /* STREAM, GRAPH */
  gpuhal_semaphore_t* timelines[QR_THREADS];
  uint64_t submitted[QR_THREADS]; /* a timeline value whose every hop is queued (atomic) */
  int32_t dispatches[QR_DEVICES];
  int32_t host_calls_submitted;
  int32_t host_calls_run;
  int32_t failures;
  int ops;
  uint64_t seed;
  int32_t gpu_parked_max; /* the devices' tuning.gpu_parked_max */
} qr_world_t;

typedef struct qr_thread_s {
  qr_world_t* world;
  int index;
  uint64_t rng;
  pthread_t thread;
  int fixed_device, fixed_queue; /* >= 0: the device and queue of every hop of the batch */
} qr_thread_t;

static uint32_t qr_rand(qr_thread_t* t, uint32_t n) {
  uint64_t x = t->rng;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  t->rng = x;
  return (uint32_t)((x >> 11) % n);
}

#define QR_FAIL(w, ...)                                      \
  do {                                                       \
    fprintf(stderr, "  FAIL: " __VA_ARGS__);                 \
    fprintf(stderr, "\n");                                   \
    __atomic_add_fetch(&(w)->failures, 1, __ATOMIC_SEQ_CST); \
  } while (0)

static int qr_ok(qr_world_t* w, gpuhal_status_t st, const char* what) {
  if (!st) return 1;
  QR_FAIL(w, "%s: %s", what, gpuhal_status_message(st));
  gpuhal_status_free(st);
  return 0;
}

static gpuhal_status_t qr_host_fn(void* user) {
  __atomic_add_fetch(&((qr_world_t*)user)->host_calls_run, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/* Submits one hop: waits `wait`, signals (timeline, value). */
static void qr_submit_hop(qr_thread_t* t, gpuhal_semaphore_list_t wait, uint64_t value) {
  /* A batch on one queue takes only work that may park: STREAM dispatches, allocas, barriers. */
  static const uint32_t parkable[4] = {0, 2, 4, 5};
  qr_world_t* w = t->world;
  gpuhal_semaphore_t* timeline = w->timelines[t->index];
  gpuhal_semaphore_list_t signal = gpuhal_semaphore_list_one(&timeline, &value);
  uint32_t d = qr_rand(t, QR_DEVICES), q = qr_rand(t, QR_QUEUES);
  gpuhal_device_t* device;
  if (t->fixed_device >= 0) {
    d = (uint32_t)t->fixed_device;
    q = (uint32_t)t->fixed_queue;
  }
  device = w->devices[d];
  switch (t->fixed_device >= 0 ? parkable[qr_rand(t, 4)] : qr_rand(t, 6)) {
    case 0:
    case 1: { /* reusable dispatch */
      if (qr_ok(w,
                gpuhal_queue_execute(device, q, wait, signal, w->reusable[d][t->fixed_device >= 0 ? 0 : qr_rand(t, 2)],
                                     NULL),
                "execute"))
        __atomic_add_fetch(&w->dispatches[d], 1, __ATOMIC_SEQ_CST);
      break;
    }
    case 2: { /* one-shot dispatch, released while in flight */
      gpuhal_command_buffer_t* cb = NULL;
      gpuhal_arg_t arg = gpuhal_arg_buffer(w->counters[d], 0);
      gpuhal_command_buffer_flags_t flags =
          t->fixed_device >= 0 || qr_rand(t, 2) ? GPUHAL_COMMAND_BUFFER_STREAM : GPUHAL_COMMAND_BUFFER_GRAPH;
      if (qr_ok(w, qc_record_dispatch(device, flags, w->inc[d], 1, 1, 1, &arg, &cb), "record") &&
          qr_ok(w, gpuhal_queue_execute(device, q, wait, signal, cb, NULL), "execute one-shot"))
        __atomic_add_fetch(&w->dispatches[d], 1, __ATOMIC_SEQ_CST);
      gpuhal_command_buffer_release(cb);
      break;
    }
    case 3: /* host call */
      if (qr_ok(w, gpuhal_queue_host_call(device, q, wait, signal, qr_host_fn, w), "host_call"))
        __atomic_add_fetch(&w->host_calls_submitted, 1, __ATOMIC_SEQ_CST);
      break;
    case 4: { /* alloca, then dealloca on another queue, through a private semaphore */
      gpuhal_semaphore_t* mid = NULL;
      gpuhal_buffer_t* buffer = NULL;
      uint64_t one = 1;
      if (!qr_ok(w, gpuhal_semaphore_create(w->driver, 0, &mid), "semaphore")) break;
      if (qr_ok(w,
                gpuhal_queue_alloca(device, q, wait, gpuhal_semaphore_list_one(&mid, &one), 4096u << qr_rand(t, 6),
                                    &buffer),
                "alloca"))
        qr_ok(
            w,
            gpuhal_queue_dealloca(device, qr_rand(t, QR_QUEUES), gpuhal_semaphore_list_one(&mid, &one), signal, buffer),
            "dealloca");
      gpuhal_buffer_release(buffer);
      gpuhal_semaphore_release(mid);
      break;
    }
    default: /* barrier */ qr_ok(w, gpuhal_queue_execute(device, q, wait, signal, NULL, NULL), "barrier"); break;
  }
}

/* On the first blocking wait that times out: what every queue holds (a hang's picture, read
 * racily from the internals; gpuhal has no public report of pending work yet). */
static int qr_dumped;
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/syscall.h>
long syscall(long number, ...); /* not declared under -std=c99 */
static void qr_backtrace_handler(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  (void)sig;
  backtrace_symbols_fd(frames, n, 2);
  if (write(2, "  ----\n", 7) < 0) return;
}
static void qr_dump_action(const char* where, gpuhal__action_t* a) {
  uint32_t i;
  const gpuhal__cuda_symbols_t* cu = a->state->device->cu;
  int ev = a->event ? (int)cu->cuEventQuery(a->event->handle) : -1;
  fprintf(stderr, "    [%s] %s q%u prov=%d park=%d vw=%d side=%d ev=%d ok=%d next_wait=%u/%u seq=%llu\n", where,
          a->ops->name, a->queue_index, a->provisional, a->park_reserved, a->value_waits,
          a->stream && a->stream != a->state->device->streams[a->queue_index], ev, a->completed_ok, a->next_wait,
          a->wait_count, (unsigned long long)a->seq);
  for (i = 0; i < a->wait_count; ++i) {
    gpuhal__action_wait_t* w = &a->waits[i];
    gpuhal_semaphore_t* s = w->semaphore;
    fprintf(stderr, "       wait %p >= %llu kind %d (value %llu word %lld newest %llu fail %d)\n", (void*)s,
            (unsigned long long)w->value, w->kind, (unsigned long long)s->value, s->word ? (long long)*s->word : -1LL,
            (unsigned long long)s->newest_value, s->failure != NULL);
  }
  for (i = 0; i < a->signal_count; ++i)
    fprintf(stderr, "       signal %p = %llu (value %llu word %lld)\n", (void*)a->signals[i].semaphore,
            (unsigned long long)a->signals[i].value, (unsigned long long)a->signals[i].semaphore->value,
            a->signals[i].semaphore->word ? (long long)*a->signals[i].semaphore->word : -1LL);
}
static void qr_dump_list(const char* where, gpuhal__list_node_t* head) {
  gpuhal__list_node_t* n;
  int k = 0;
  for (n = head->next; n != head && k < 400; n = n->next, ++k)
    qr_dump_action(where, GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link));
}
static void qr_dump(qr_world_t* w) {
  int d;
  uint32_t q;
  if (__atomic_exchange_n(&qr_dumped, 1, __ATOMIC_SEQ_CST)) return;
  {
    struct sigaction sa;
    void* warm[4];
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = qr_backtrace_handler;
    sigaction(SIGUSR2, &sa, NULL);
    backtrace(warm, 4); /* loads what backtrace needs outside the handler */
    {
      DIR* dir = opendir("/proc/self/task");
      struct dirent* e;
      long self = syscall(SYS_gettid);
      while (dir && (e = readdir(dir)) != NULL) {
        long tid = atol(e->d_name);
        if (tid <= 0 || tid == self) continue;
        fprintf(stderr, "  stack of thread %ld:\n", tid);
        fflush(stderr);
        syscall(SYS_tgkill, (long)getpid(), tid, SIGUSR2);
        qc_sleep_ms(100);
      }
      if (dir) closedir(dir);
    }
  }
  for (d = 0; d < QR_THREADS; ++d)
    fprintf(stderr, "  timeline %d %p value %llu word %lld submitted %llu\n", d, (void*)w->timelines[d],
            (unsigned long long)w->timelines[d]->value,
            w->timelines[d]->word ? (long long)*w->timelines[d]->word : -1LL, (unsigned long long)w->submitted[d]);
  for (d = 0; d < QR_THREADS; ++d) {
    gpuhal__list_node_t* n;
    gpuhal_semaphore_t* s = w->timelines[d];
    for (n = s->timepoints.next; n != &s->timepoints; n = n->next) {
      gpuhal__timepoint_t* tp = GPUHAL__CONTAINER_OF(n, gpuhal__timepoint_t, link);
      fprintf(stderr, "  timeline %d timepoint %llu provisional %d event %d\n", d, (unsigned long long)tp->value,
              tp->provisional, (int)w->devices[0]->cu->cuEventQuery(tp->event->handle));
    }
  }
  for (d = 0; d < QR_DEVICES; ++d) {
    gpuhal__queue_state_t* st = gpuhal__queue_state(w->devices[d]);
    gpuhal__ordinal_t* o = &w->devices[d]->driver->ordinals[0];
    uint32_t in_flight = 0;
    for (q = 0; q < w->devices[d]->queue_count; ++q) in_flight += st->lanes[q].count;
    fprintf(stderr, "  device %d: parked %d streams+graphs %d of room %d outstanding %llu in_flight %u side %u/%u\n", d,
            o->parked, o->room_live, o->room, (unsigned long long)st->outstanding, in_flight, st->side_count,
            st->side_free_count);
    qr_dump_list("pending", &st->pending);
    qr_dump_list("incoming", &st->incoming);
    qr_dump_list("retired", &st->retired);
    for (q = 0; q < w->devices[d]->queue_count; ++q) {
      gpuhal__queue_lane_t* l = &st->lanes[q];
      char name[32];
      snprintf(name, sizeof(name), "q%u in_flight", q);
      qr_dump_list(name, &l->in_flight);
      snprintf(name, sizeof(name), "q%u host calls due", q);
      qr_dump_list(name, &l->host_calls_due);
      snprintf(name, sizeof(name), "q%u observing", q);
      qr_dump_list(name, &l->observing);
      snprintf(name, sizeof(name), "q%u deferred", q);
      qr_dump_list(name, &l->deferred);
      snprintf(name, sizeof(name), "q%u side", q);
      qr_dump_list(name, &l->side);
      snprintf(name, sizeof(name), "q%u side_obs", q);
      qr_dump_list(name, &l->side_observing);
    }
  }
}

/* A buffer of a random device allocated and released on the spot: its free waits for the
 * whole context, so it runs only while no queue work waits on the GPU (else it is put off)
 * and no work parks while it runs; work denied a park meanwhile asks again once it ended. */
static void qr_buffer_churn(qr_thread_t* t) {
  gpuhal_buffer_t* buffer = NULL;
  if (qr_ok(t->world,
            gpuhal_buffer_allocate(t->world->devices[qr_rand(t, QR_DEVICES)], GPUHAL_MEMORY_DEVICE,
                                   4096u << qr_rand(t, 6), &buffer),
            "buffer allocate"))
    gpuhal_buffer_release(buffer);
}

/* Between batches: polls and short waits on values of any thread. */
static void qr_probe(qr_thread_t* t) {
  qr_world_t* w = t->world;
  uint32_t other = qr_rand(t, QR_THREADS);
  uint64_t v = __atomic_load_n(&w->submitted[other], __ATOMIC_SEQ_CST);
  gpuhal_status_t st;
  if (v == 0) return;
  v = 1 + qr_rand(t, (uint32_t)v);
  switch (qr_rand(t, 4)) {
    case 0:
    case 1:
      st = gpuhal_semaphore_wait(w->timelines[other], v, gpuhal_timeout_immediate());
      if (st && gpuhal_status_code(st) != GPUHAL_STATUS_DEADLINE_EXCEEDED)
        qr_ok(w, st, "poll");
      else
        gpuhal_status_free(st);
      break;
    case 2: {
      gpuhal_semaphore_t* sems[2];
      uint64_t values[2];
      gpuhal_semaphore_list_t list;
      sems[0] = w->timelines[other];
      sems[1] = w->timelines[t->index];
      values[0] = v;
      values[1] = __atomic_load_n(&w->submitted[t->index], __ATOMIC_SEQ_CST);
      list.count = values[1] ? 2 : 1;
      list.semaphores = sems;
      list.values = values;
      st = gpuhal_semaphores_wait(qr_rand(t, 2) ? GPUHAL_WAIT_ANY : GPUHAL_WAIT_ALL, list, gpuhal_timeout_immediate());
      if (st && gpuhal_status_code(st) != GPUHAL_STATUS_DEADLINE_EXCEEDED)
        qr_ok(w, st, "poll list");
      else
        gpuhal_status_free(st);
      break;
    }
    default: /* a blocking wait on a value whose hops are all queued: it must come */
      st = gpuhal_semaphore_wait(w->timelines[other], v, qt_seconds(20));
      if (st) {
        fprintf(stderr, "  thread %d: timeline %u did not reach %llu; the queues:\n", t->index, other,
                (unsigned long long)v);
        qr_dump(w);
      }
      qr_ok(w, st, "blocking wait");
      break;
  }
}

static void* qr_thread_main(void* p) {
  qr_thread_t* t = (qr_thread_t*)p;
  qr_world_t* w = t->world;
  gpuhal_semaphore_t* timeline = w->timelines[t->index];
  gpuhal_semaphore_t* gate = NULL;
  uint64_t base = 0, gate_value = 0;
  int done = 0;
  if (!qr_ok(w, gpuhal_semaphore_create(w->driver, 0, &gate), "gate")) return NULL;
  while (done < w->ops) {
    int hops = 1 + (int)qr_rand(t, QR_MAX_BATCH), j, k;
    int gated = qr_rand(t, 3) == 0;
    int forward = gated && qr_rand(t, 2) == 0;
    if (forward) hops *= 4;
    if (hops > w->ops - done) hops = w->ops - done;
    t->fixed_device = forward ? (int)qr_rand(t, QR_DEVICES) : -1;
    t->fixed_queue = forward ? (int)qr_rand(t, QR_QUEUES) : -1;
    for (k = 0; k < hops; ++k) {
      gpuhal_semaphore_t* sems[3];
      uint64_t values[3];
      gpuhal_semaphore_list_t wait;
      uint32_t other = qr_rand(t, QR_THREADS);
      uint64_t other_value = __atomic_load_n(&w->submitted[other], __ATOMIC_SEQ_CST);
      j = forward ? k : hops - 1 - k;
      wait.count = 0;
      wait.semaphores = sems;
      wait.values = values;
      if (base + (uint64_t)j > 0) {
        sems[wait.count] = timeline;
        values[wait.count++] = base + (uint64_t)j;
      }
      if (gated && (j == 0 || forward)) {
        sems[wait.count] = gate;
        values[wait.count++] = gate_value + 1;
      }
      if (other != (uint32_t)t->index && other_value > 0 && qr_rand(t, 4) == 0) {
        sems[wait.count] = w->timelines[other];
        values[wait.count++] = 1 + qr_rand(t, (uint32_t)other_value);
      }
      qr_submit_hop(t, wait, base + (uint64_t)j + 1);
    }
    if (forward) qc_sleep_ms(1);                    /* what may park, and chain, does so first */
    if (gated && qr_rand(t, 2)) qr_buffer_churn(t); /* with the batch behind its gate */
    if (gated) qr_ok(w, gpuhal_semaphore_signal(gate, ++gate_value), "gate signal");
    base += (uint64_t)hops;
    done += hops;
    __atomic_store_n(&w->submitted[t->index], base, __ATOMIC_SEQ_CST);
    qr_probe(t);
    if (qr_rand(t, 4) == 0) qr_buffer_churn(t);
  }
  qr_ok(w, gpuhal_semaphore_wait(timeline, base, qt_seconds(60)), "final wait");
  gpuhal_semaphore_release(gate);
  return NULL;
}

static uint64_t qr_env_u64(const char* name, uint64_t fallback) {
  const char* v = getenv(name);
  return v && v[0] ? strtoull(v, NULL, 0) : fallback;
}

static int qr_world_open(qr_world_t* w) {
  gpuhal_device_params_t params;
  gpuhal_status_t st;
  int count = 0, d, k;
  uint32_t zero = 0;
  memset(&params, 0, sizeof(params));
  params.queue_count = QR_QUEUES;
  params.tuning.gpu_parked_max = w->gpu_parked_max;
  st = gpuhal_driver_create(NULL, &w->driver);
  if (!st) st = gpuhal_driver_device_count(w->driver, &count);
  if (!st && count < 1) st = gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "no devices");
  for (d = 0; !st && d < QR_DEVICES; ++d) {
    gpuhal_arg_t arg;
    /* one GPU: two gpuhal devices of ordinal 0 */
    st = gpuhal_device_create(w->driver, d < count ? d : 0, &params, &w->devices[d]);
    if (!st) st = qc_load_kernel(w->devices[d], "atomic_inc", &w->exes[d], &w->inc[d]);
    if (!st) st = gpuhal_buffer_allocate(w->devices[d], GPUHAL_MEMORY_DEVICE, 4, &w->counters[d]);
    if (!st) st = gpuhal_buffer_write(w->counters[d], 0, &zero, 4);
    arg = gpuhal_arg_buffer(w->counters[d], 0);
    for (k = 0; !st && k < 2; ++k)
      st = qc_record_dispatch(
          w->devices[d],
          GPUHAL_COMMAND_BUFFER_REUSABLE | (k ? GPUHAL_COMMAND_BUFFER_GRAPH : GPUHAL_COMMAND_BUFFER_STREAM), w->inc[d],
          1, 1, 1, &arg, &w->reusable[d][k]);
  }
  for (k = 0; !st && k < QR_THREADS; ++k) st = gpuhal_semaphore_create(w->driver, 0, &w->timelines[k]);
  if (st) {
    fprintf(stderr, "  setup: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    return 0;
  }
  return 1;
}

/* Releases everything, in an order that depends on the seed. */
static void qr_world_close(qr_world_t* w, qr_thread_t* rng) {
  int d, k, order = (int)qr_rand(rng, 2);
  for (k = 0; k < QR_THREADS; ++k) gpuhal_semaphore_release(w->timelines[k]);
  for (d = 0; d < QR_DEVICES; ++d) {
    int dd = order ? d : QR_DEVICES - 1 - d;
    if (qr_rand(rng, 2)) {
      gpuhal_executable_release(w->exes[dd]);
      gpuhal_command_buffer_release(w->reusable[dd][0]);
      gpuhal_command_buffer_release(w->reusable[dd][1]);
    } else {
      gpuhal_command_buffer_release(w->reusable[dd][1]);
      gpuhal_command_buffer_release(w->reusable[dd][0]);
      gpuhal_executable_release(w->exes[dd]);
    }
    gpuhal_buffer_release(w->counters[dd]);
    gpuhal_device_release(w->devices[dd]);
  }
  gpuhal_driver_release(w->driver);
}

static void qr_run(int32_t gpu_parked_max) {
  static qr_world_t w;
  qr_thread_t threads[QR_THREADS], closer;
  int k, d;
  memset(&w, 0, sizeof(w));
  w.gpu_parked_max = gpu_parked_max;
  w.seed = qr_env_u64("GPUHAL_RANDOM_SEED", (uint64_t)gpuhal_now_ns());
  w.ops = (int)qr_env_u64("GPUHAL_RANDOM_OPS", 300);
  fprintf(stderr, "  seed %llu (GPUHAL_RANDOM_SEED=%llu reruns it), %d hops per thread\n", (unsigned long long)w.seed,
          (unsigned long long)w.seed, w.ops);
  qc_watchdog_arm(200, "the randomized queue traffic (setup, run and checks)");
  if (!qr_world_open(&w)) {
    qc_watchdog_disarm();
    memset(&closer, 0, sizeof(closer));
    closer.rng = w.seed | 1;
    qr_world_close(&w, &closer);
    TU_SKIP("no device or test kernels");
  }
  for (k = 0; k < QR_THREADS; ++k) {
    threads[k].world = &w;
    threads[k].index = k;
    threads[k].rng = (w.seed + 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1)) | 1;
    threads[k].fixed_device = threads[k].fixed_queue = -1;
    TU_REQUIRE(pthread_create(&threads[k].thread, NULL, qr_thread_main, &threads[k]) == 0);
  }
  for (k = 0; k < QR_THREADS; ++k) pthread_join(threads[k].thread, NULL);
  TU_CHECK_EQ_INT(__atomic_load_n(&w.failures, __ATOMIC_SEQ_CST), 0);
  for (k = 0; k < QR_THREADS; ++k) {
    uint64_t v = 0;
    TU_CHECK_OK(gpuhal_semaphore_query(w.timelines[k], &v));
    TU_CHECK_EQ_INT(v, w.submitted[k]);
    TU_CHECK_EQ_INT(v, w.ops);
  }
  for (d = 0; d < QR_DEVICES; ++d) {
    uint32_t count = 0;
    TU_CHECK_OK(gpuhal_device_wait_idle(w.devices[d], qt_seconds(60)));
    TU_CHECK_OK(gpuhal_buffer_read(w.counters[d], 0, &count, 4));
    TU_CHECK_EQ_INT(count, w.dispatches[d]);
  }
  TU_CHECK_EQ_INT(w.host_calls_run, w.host_calls_submitted);
  memset(&closer, 0, sizeof(closer));
  closer.rng = w.seed | 1;
  qc_watchdog_arm(60, "releasing the objects, devices and driver of the randomized traffic");
  qr_world_close(&w, &closer);
  qc_watchdog_disarm();
}

TU_TEST(random_traffic) { qr_run(0); }
/* One stream of a GPU may park: most parked work goes behind other parked work of its
 * queue (gpuhal__action_park_chain) or waits on the host. */
TU_TEST(random_traffic_one_parked) { qr_run(1); }

TU_MAIN(TU_CASE(random_traffic), TU_CASE(random_traffic_one_parked))
