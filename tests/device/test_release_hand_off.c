/* test_release_hand_off: the application's last release waits for what one device's worker
 * handed to another's. Two releases are handed over without waiting (no worker waits for
 * another, memory.c):
 *  - the free of queue_alloca memory never deallocated, when a peer copy's action, released
 *    on the copying device's worker, drops the last reference to the buffer
 *    (gpuhal__pending_free_put_off);
 *  - the executable reference of a buffer over a module's global
 *    (gpuhal_executable_global_buffer), dropped the same way (gpuhal__buffer_view_destroy).
 *
 * Device A owns the source, device B copies it into its own buffer (a STREAM command buffer
 * on B). B's copy waits for a host call whose function, once the application has begun its
 * releases, keeps A's worker busy for a while (a task of the test's, as other work of A's
 * would): the hand-off then waits behind it. The application releases everything, in
 * several orders (A settled before B, B before A, the driver, B or A last), or makes its
 * last release inside that host function. When the last release returns (from the
 * application's thread), nothing of gpuhal is left: no gpuhal thread (a detached reaper
 * aside, which ends right after), no CUDA object (softcuda), nothing allocated with the
 * driver's allocator, and nothing calls that allocator later.
 *
 * Before the fix the release returned while the hand-off was still queued: it settled A
 * before B's copy handed A its release, and then waited only for teardowns under way. A,
 * its worker, context, streams, pool and memory lived on, and A's teardown and the
 * driver's ran later on a reaper thread, calling the application's allocator (and logger)
 * after the application was done with them. A release made inside a host function does
 * not wait for its own thread: there everything goes once the host call and the copy are
 * done (the case checks that it returns at once, and that everything goes then). Every
 * wait has a bound; an alarm ends a hang. A's worker stays busy RH_HOLD_NS after the
 * application's last release began (and at least that long), so that the last release finds
 * it busy however slowly the releases before it ran (on two H200s under ctest -j10 the
 * executable's release took longer than a fixed hold). The hand-off's timing is still the
 * scenario's: a run in which it did not queue behind the busy worker runs again, 3 runs at
 * most. */
#include "test_internals.h"
#include "test_leak_check.h"
#include "test_util.h"

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#define RH_FN_DELAY_NS 200000000ll /* the host function's pause once the releases began */
#define RH_HOLD_NS 700000000ll     /* how long A's worker stays busy then, and after the last release began */

static gpuhal_timeout_t rh_seconds(int s) { return gpuhal_timeout_relative_ns((int64_t)s * 1000000000ll); }

/* The driver's allocator (test_leak_check.h), with the calls made after the application's
 * last release returned. */
static tu_counter_t rh_alloc_state;

/* Keeps A's worker busy: until let go, or RH_HOLD_NS after both its start and the beginning
 * of the application's last release (bounded: 30 s). When it ends it notes whether a task
 * waited behind it (the hand-off). */
typedef struct rh_hold_s {
  gpuhal__task_t task;
  gpuhal_device_t* device;
  int32_t started, done, let_go, queued_behind;
  int64_t last_release_ns; /* when the application's last release began; 0: not yet */
} rh_hold_t;
static int rh_hold_over(rh_hold_t* h, int64_t start) {
  int64_t now = gpuhal_now_ns(), last = gpuhal__atomic_load(&h->last_release_ns);
  if (gpuhal__atomic_load(&h->let_go) || now > start + 30ll * 1000000000) return 1;
  return now > start + RH_HOLD_NS && last != 0 && now > last + RH_HOLD_NS;
}
static void rh_hold_run(gpuhal__task_t* task) {
  rh_hold_t* h = GPUHAL__CONTAINER_OF(task, rh_hold_t, task);
  int64_t start = gpuhal_now_ns();
  gpuhal__atomic_store(&h->started, 1);
  while (!rh_hold_over(h, start)) tu_sleep_ns(1000000);
  gpuhal__mutex_lock(&h->device->worker.mutex);
  h->queued_behind = !gpuhal__list_empty(&h->device->worker.tasks);
  gpuhal__mutex_unlock(&h->device->worker.mutex);
  gpuhal__atomic_store(&h->done, 1);
}

typedef enum rh_source_e { RH_ALLOCA, RH_GLOBAL } rh_source_t;
typedef enum rh_order_e {
  RH_DRIVER_LAST,       /* everything else first (no release settles before the driver's) */
  RH_COPIER_LAST,       /* the driver first, then A, ..., B last */
  RH_OWNER_LAST,        /* the driver first, then B (its release drains the copy), ..., A last */
  RH_LAST_IN_HOST_CALL, /* everything else first, the driver inside the host function */
} rh_order_t;

typedef struct rh_case_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* owner;  /* A */
  gpuhal_device_t* copier; /* B */
  gpuhal_executable_t* exe;
  gpuhal_buffer_t *src, *dst;
  gpuhal_command_buffer_t* cb;
  gpuhal_semaphore_t *ready, *gate;
  rh_order_t order;
  int32_t releasing;       /* the application began its releases */
  int64_t host_release_ns; /* RH_LAST_IN_HOST_CALL: how long the driver release took there */
  rh_hold_t hold;
} rh_case_t;

/* B's host call: a moment after the application began releasing (the release that settles
 * has settled A by then), A's worker gets busy; B's copy, behind this call, hands A its
 * release while it is. */
static gpuhal_status_t rh_busy_owner_fn(void* user) {
  rh_case_t* c = (rh_case_t*)user;
  int64_t end = gpuhal_now_ns() + 10ll * 1000000000;
  while (!gpuhal__atomic_load(&c->releasing) && gpuhal_now_ns() < end) tu_sleep_ns(1000000);
  tu_sleep_ns(RH_FN_DELAY_NS);
  gpuhal__worker_post(c->owner, &c->hold.task);
  if (c->order == RH_LAST_IN_HOST_CALL) {
    int64_t t0 = gpuhal_now_ns();
    gpuhal__atomic_store(&c->hold.last_release_ns, t0);
    gpuhal_driver_release(c->driver); /* the application's last: it must not wait for this thread */
    c->host_release_ns = gpuhal_now_ns() - t0;
  }
  return NULL;
}

static void rh_release_objects(rh_case_t* c) {
  gpuhal_buffer_release(c->src);
  gpuhal_executable_release(c->exe);
  gpuhal_command_buffer_release(c->cb);
  gpuhal_buffer_release(c->dst);
  gpuhal_semaphore_release(c->ready);
  gpuhal_semaphore_release(c->gate);
}

/* The application's last release: noted for the busy worker's end. */
static void rh_last_device_release(rh_case_t* c, gpuhal_device_t* device) {
  gpuhal__atomic_store(&c->hold.last_release_ns, gpuhal_now_ns());
  gpuhal_device_release(device);
}

/* The application releases everything in `order`. */
static void rh_release_all(rh_case_t* c) {
  gpuhal__atomic_store(&c->releasing, 1);
  switch (c->order) {
    case RH_DRIVER_LAST:
      rh_release_objects(c);
      gpuhal_device_release(c->owner);
      gpuhal_device_release(c->copier);
      gpuhal__atomic_store(&c->hold.last_release_ns, gpuhal_now_ns());
      gpuhal_driver_release(c->driver);
      break;
    case RH_COPIER_LAST:
      gpuhal_driver_release(c->driver);
      gpuhal_device_release(c->owner);
      rh_release_objects(c);
      rh_last_device_release(c, c->copier);
      break;
    case RH_OWNER_LAST:
      gpuhal_driver_release(c->driver);
      gpuhal_device_release(c->copier);
      rh_release_objects(c);
      rh_last_device_release(c, c->owner);
      break;
    case RH_LAST_IN_HOST_CALL:
      rh_release_objects(c);
      gpuhal_device_release(c->owner);
      gpuhal_device_release(c->copier);
      break;
  }
}

/* A driver (with the counting allocator) and two devices, A created first unless
 * `copier_first`; 0 (the case skipped or failed) otherwise. */
static int rh_open(rh_case_t* c, int copier_first) {
  gpuhal_driver_options_t options;
  gpuhal_device_t* d[2] = {NULL, NULL};
  gpuhal_status_t st;
  int count = 0, i;
  memset(&options, 0, sizeof(options));
  tu_counter_init(&rh_alloc_state);
  options.allocator = rh_alloc_state.allocator;
  st = gpuhal_driver_create(&options, &c->driver);
  if (!st) st = gpuhal_driver_device_count(c->driver, &count);
  if (!st && count < 2) {
    gpuhal_driver_release(c->driver);
    tu_state.skipped = 1;
    tu_state.skip_reason = "needs 2 devices";
    return 0;
  }
  for (i = 0; !st && i < 2; ++i) st = gpuhal_device_create(c->driver, i, NULL, &d[i]);
  if (st) {
    TU_FAIL_AT(__FILE__, __LINE__, "driver and devices: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
    gpuhal_device_release(d[0]);
    gpuhal_device_release(d[1]);
    gpuhal_driver_release(c->driver);
    return 0;
  }
  c->owner = d[copier_first ? 1 : 0];
  c->copier = d[copier_first ? 0 : 1];
  return 1;
}

/* A's source: queue_alloca memory (never deallocated) or a buffer over a module global. */
static gpuhal_status_t rh_make_source(rh_case_t* c, rh_source_t source) {
  uint64_t one = 1;
  if (source == RH_GLOBAL) {
    GPUHAL__RETURN_IF_ERROR(tu_load_kernel(c->owner, "globals", &c->exe, NULL));
    return gpuhal_executable_global_buffer(c->exe, "g_scale", &c->src);
  }
  GPUHAL__RETURN_IF_ERROR(gpuhal_semaphore_create(c->driver, 0, &c->ready));
  GPUHAL__RETURN_IF_ERROR(gpuhal_queue_alloca(c->owner, 0, gpuhal_semaphore_list_empty(),
                                              gpuhal_semaphore_list_one(&c->ready, &one), 256, &c->src));
  return gpuhal_semaphore_wait(c->ready, 1, rh_seconds(30));
}

/* B: the host call, then the peer copy of A's source behind it. */
static gpuhal_status_t rh_submit_copy(rh_case_t* c) {
  uint64_t one = 1, two = 2;
  GPUHAL__RETURN_IF_ERROR(gpuhal_buffer_allocate(c->copier, GPUHAL_MEMORY_DEVICE, 256, &c->dst));
  GPUHAL__RETURN_IF_ERROR(gpuhal_command_buffer_create(c->copier, GPUHAL_COMMAND_BUFFER_STREAM, 0, &c->cb));
  GPUHAL__RETURN_IF_ERROR(gpuhal_command_buffer_begin(c->cb));
  GPUHAL__RETURN_IF_ERROR(gpuhal_cmd_copy(c->cb, gpuhal_ref_buffer(c->src, 0), gpuhal_ref_buffer(c->dst, 0), 4));
  GPUHAL__RETURN_IF_ERROR(gpuhal_command_buffer_end(c->cb));
  GPUHAL__RETURN_IF_ERROR(gpuhal_semaphore_create(c->driver, 0, &c->gate));
  GPUHAL__RETURN_IF_ERROR(gpuhal_queue_host_call(c->copier, 0, gpuhal_semaphore_list_empty(),
                                                 gpuhal_semaphore_list_one(&c->gate, &one), rh_busy_owner_fn, c));
  return gpuhal_queue_execute(c->copier, 0, gpuhal_semaphore_list_one(&c->gate, &one),
                              gpuhal_semaphore_list_one(&c->gate, &two), c->cb, NULL);
}

/* Waits (bounded) until everything of gpuhal is gone, whenever that is. */
static void rh_wait_gone(void) {
  int64_t end = gpuhal_now_ns() + 20ll * 1000000000;
  while (gpuhal_now_ns() < end &&
         (tu_gpuhal_threads() > 0 || tu_softcuda_objects() > 0 || tu_counter_live(&rh_alloc_state) > 0))
    tu_sleep_ns(1000000);
  tu_sleep_ns(20000000); /* a reaper's last steps after its allocator calls */
}

/* One run of the scenario; 0 when the hand-off did not queue behind the busy worker (the
 * scenario's timing did not come about: on a loaded host the copy may end, and its release
 * run, elsewhere), 1 otherwise, or when the case was skipped or could not start. */
static int rh_attempt(rh_source_t source, rh_order_t order, int copier_first) {
  static rh_case_t c; /* a late hand-off must not find it gone */
  gpuhal_status_t st;
  int threads;
  size_t objects;
  int64_t live;
  alarm(120);
  memset(&c, 0, sizeof(c));
  c.order = order;
  if (!rh_open(&c, copier_first)) return 1;
  gpuhal__list_init(&c.hold.task.node);
  c.hold.task.fn = rh_hold_run;
  c.hold.device = c.owner;
  st = rh_make_source(&c, source);
  if (!st) st = rh_submit_copy(&c);
  TU_CHECK_OK(st);
  rh_release_all(&c);
  /* The application's last release has returned (on its thread, or inside the host call). */
  if (order == RH_LAST_IN_HOST_CALL) {
    int64_t end = gpuhal_now_ns() + 20ll * 1000000000;
    while (!gpuhal__atomic_load(&c.hold.started) && gpuhal_now_ns() < end) tu_sleep_ns(1000000);
    rh_wait_gone(); /* it may not wait for its own thread: everything goes on its own */
  }
  threads = tu_gpuhal_threads();
  objects = tu_softcuda_objects();
  live = tu_counter_live(&rh_alloc_state);
  gpuhal__atomic_store(&rh_alloc_state.closed, 1);
  TU_CHECK_EQ_INT(threads, 0);
  TU_CHECK(objects == 0);
  TU_CHECK(live == 0);
  if (threads || objects || live)
    fprintf(stderr, "  after the last release: %d gpuhal threads, %zu CUDA objects, %lld allocations left\n", threads,
            objects, (long long)live);
  /* Let whatever is left finish before the next case (and the process) goes on. */
  gpuhal__atomic_store(&c.hold.let_go, 1);
  rh_wait_gone();
  TU_CHECK(gpuhal__atomic_load(&c.hold.done));
  TU_CHECK(gpuhal__atomic_load(&rh_alloc_state.late) == 0);
  if (order == RH_LAST_IN_HOST_CALL) TU_CHECK(c.host_release_ns < RH_HOLD_NS / 2);
  alarm(0);
  return c.hold.queued_behind;
}

/* The scenario, until the hand-off did wait behind the busy worker (3 runs at most): every
 * run checks that nothing is left, and one of them must have had the hand-off. */
static void rh_case(rh_source_t source, rh_order_t order, int copier_first) {
  int run;
  for (run = 1; run <= 3; ++run) {
    if (rh_attempt(source, order, copier_first)) return;
    fprintf(stderr, "  run %d: the hand-off did not queue behind the busy worker (timing); again\n", run);
  }
  TU_FAIL_AT(__FILE__, __LINE__, "%s", "in 3 runs the hand-off never queued behind the busy worker");
}

TU_TEST(alloca_driver_last) { rh_case(RH_ALLOCA, RH_DRIVER_LAST, 0); }
TU_TEST(alloca_copier_last) { rh_case(RH_ALLOCA, RH_COPIER_LAST, 0); }
TU_TEST(alloca_owner_last) { rh_case(RH_ALLOCA, RH_OWNER_LAST, 0); }
TU_TEST(alloca_driver_last_copier_settled_first) { rh_case(RH_ALLOCA, RH_DRIVER_LAST, 1); }
TU_TEST(alloca_last_release_in_a_host_call) { rh_case(RH_ALLOCA, RH_LAST_IN_HOST_CALL, 0); }
TU_TEST(global_driver_last) { rh_case(RH_GLOBAL, RH_DRIVER_LAST, 0); }
TU_TEST(global_copier_last) { rh_case(RH_GLOBAL, RH_COPIER_LAST, 0); }
TU_TEST(global_owner_last) { rh_case(RH_GLOBAL, RH_OWNER_LAST, 0); }
TU_TEST(global_driver_last_copier_settled_first) { rh_case(RH_GLOBAL, RH_DRIVER_LAST, 1); }
TU_TEST(global_last_release_in_a_host_call) { rh_case(RH_GLOBAL, RH_LAST_IN_HOST_CALL, 0); }

TU_MAIN(TU_CASE(alloca_driver_last), TU_CASE(alloca_copier_last), TU_CASE(alloca_owner_last),
        TU_CASE(alloca_driver_last_copier_settled_first), TU_CASE(alloca_last_release_in_a_host_call),
        TU_CASE(global_driver_last), TU_CASE(global_copier_last), TU_CASE(global_owner_last),
        TU_CASE(global_driver_last_copier_settled_first), TU_CASE(global_last_release_in_a_host_call))
