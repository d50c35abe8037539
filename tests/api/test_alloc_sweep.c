/* Host-allocation failure sweep: what happens when the application's allocator fails.
 *
 * The driver is given a counting allocator (gpuhal_driver_options_t.allocator) that can
 * fail the Nth allocation it is asked for (mode "one"), or every allocation from the Nth
 * on for a window of AS_WINDOW allocations, after which it recovers (mode "window": the
 * window reaches into the scenario's releases and into allocations made on gpuhal's own
 * threads). One scenario ("chain") drives the whole API: driver and device create;
 * semaphores; buffers; executable load and kernel; GRAPH and STREAM command buffers,
 * reusable and one-shot, recorded and executed with their waits submitted before their
 * signals; queue alloca and dealloca; a host call; host waits ANY and ALL; a second execute
 * of a reusable command buffer; wait idle; device and driver release. The others: "bound"
 * (late-bound arguments, long wait lists, a report), "peer" (two devices: peer copies,
 * cross-device waits, one device released before the other), "collective" (a channel over
 * two devices, an all-reduce in STREAM and GRAPH command buffers; softnccl), "share" (a
 * semaphore exported and imported, exportable buffers, releases while work waits on the
 * GPU for the shared word), "regions" (conditional command buffers, tensor maps), "globals"
 * (module globals on two devices, buffers over them outliving their executables) and
 * "traced" (the chain with a trace file).
 *
 * For each N from 1 until a run no longer reaches its Nth allocation, the scenario runs in
 * this process and must end so:
 *   - every step that fails returns RESOURCE_EXHAUSTED naming what could not be
 *     allocated ("out of host memory allocating ..."), and a wait on work that failed on a
 *     gpuhal thread fails with that status: nothing else may fail;
 *   - no wait times out (every wait has a timeout: a hang is a timeout), and every signal
 *     that accepted work promised has been reached or failed at the end;
 *   - a run whose steps all succeeded computed the right data;
 *   - once the driver is released, every allocation was freed (no leak) and softcuda
 *     holds no CUDA object of it;
 *   - the scenario then runs again with the allocator healthy, in the same process, and
 *     succeeds (the failure left nothing behind that breaks later use).
 * A run that takes longer than AS_RUN_LIMIT_S aborts the test naming the mode and N.
 *
 * Environment: GPUHAL_ALLOC_SWEEP_STRIDE (sweep every Nth allocation, default 1; a slow
 * build such as valgrind raises it), GPUHAL_ALLOC_SWEEP_VERBOSE=1 (a line per run),
 * GPUHAL_ALLOC_SWEEP_N (only the run that fails from the Nth allocation, to debug it);
 * test names as arguments run only those. Needs softcuda (its leak counters): on a real
 * driver it skips (77). GPUHAL_NCCL_LIBRARY defaults to softnccl beside softcuda.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#include "gpuhal.h"
#include "test_sweep_util.h"
#include "test_util.h"

#define AS_RUN_LIMIT_S 60 /* a run that takes longer hangs */
#define AS_WINDOW 24      /* mode "window": allocations failed in a row */

/* ============================================================ the allocator ===== */
static long as_calls;     /* allocations asked for since the last as_arm */
static long as_live;      /* allocations not freed yet */
static long as_fail_from; /* calls as_fail_from..as_fail_to fail; 0: none does */
static long as_fail_to;
static long as_failed;        /* allocations failed since the last as_arm */
static size_t as_failed_size; /* the size of the first of them (for messages) */

/* Where a failure is injected: a debugger's breakpoint. */
__attribute__((noinline)) static void as_alloc_failed(size_t size) {
  if (__atomic_add_fetch(&as_failed, 1, __ATOMIC_ACQ_REL) == 1)
    __atomic_store_n(&as_failed_size, size, __ATOMIC_RELEASE);
}

static void* as_alloc(size_t size, void* user) {
  long n = __atomic_add_fetch(&as_calls, 1, __ATOMIC_ACQ_REL);
  long from = __atomic_load_n(&as_fail_from, __ATOMIC_ACQUIRE);
  void* p;
  (void)user;
  if (from && n >= from && n <= __atomic_load_n(&as_fail_to, __ATOMIC_ACQUIRE)) {
    as_alloc_failed(size);
    return NULL;
  }
  p = malloc(size);
  if (p) __atomic_add_fetch(&as_live, 1, __ATOMIC_ACQ_REL);
  return p;
}

static void as_free(void* p, void* user) {
  (void)user;
  if (!p) return;
  __atomic_sub_fetch(&as_live, 1, __ATOMIC_ACQ_REL);
  free(p);
}

/* Counts from zero again; fails calls from..to (from 0: none). */
static void as_arm(long from, long to) {
  __atomic_store_n(&as_fail_from, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&as_calls, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&as_failed, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&as_fail_to, to, __ATOMIC_RELEASE);
  __atomic_store_n(&as_fail_from, from, __ATOMIC_RELEASE);
}

/* ============================================================ judging a step ==== */
/* A failure is acceptable only when it says that host memory ran out, and what for. */
static int as_names_host_memory(gpuhal_status_t s) {
  return gpuhal_status_code(s) == GPUHAL_STATUS_RESOURCE_EXHAUSTED &&
         strstr(gpuhal_status_message(s), "out of host memory allocating ") != NULL;
}

/* The scenario fails its gate itself once a step failed (so that no work waits for a
 * signal that is not coming): work behind the gate fails with that. */
static int as_is_gate_failure(const sweep_run_t* r, gpuhal_status_t s) {
  return r->first && gpuhal_status_code(s) == GPUHAL_STATUS_CANCELLED &&
         strstr(gpuhal_status_message(s), "sweep: gate") != NULL;
}

/* The run's judge (sweep_run_t): a timed-out step is a hang; any error but host memory
 * running out (or the gate failed after it) is bad. */
static void as_judge(sweep_run_t* r, gpuhal_status_t s, const char* step) {
  if (gpuhal_status_code(s) == GPUHAL_STATUS_DEADLINE_EXCEEDED) {
    sweep_mark_stuck(r, step, s);
  } else if (!as_names_host_memory(s) && !as_is_gate_failure(r, s) && !r->bad) {
    snprintf(r->bad_what, sizeof(r->bad_what), "%s: %s: %s", step, gpuhal_status_code_string(gpuhal_status_code(s)),
             gpuhal_status_message(s));
    r->bad = 1;
  }
}

/* ============================================================ the scenario ====== */
#define AS_SEMS 9
#define AS_CBS 4
typedef struct as_objs_s {
  gpuhal_driver_t* driver;
  gpuhal_device_t* device;
  gpuhal_device_t* peer; /* a second device (as_open_peer), released after `device` */
  gpuhal_executable_t* exe;
  gpuhal_executable_t* exe2;
  gpuhal_command_buffer_t* cb[AS_CBS];
  gpuhal_buffer_t* buf[4];
  gpuhal_buffer_t* scratch; /* the alloca's buffer (its memory goes with the dealloca) */
  gpuhal_semaphore_t* sem[AS_SEMS];
} as_objs_t;

static const char* as_trace_path; /* the driver's trace file (as_scenario_traced), or NULL */

/* The driver and `devices` (1 or 2) devices of two queues, semaphores, buffers of device 0. */
static int as_open_devices(sweep_run_t* r, as_objs_t* o, int devices) {
  gpuhal_driver_options_t options;
  gpuhal_device_params_t params;
  int i, count = 0;
  memset(o, 0, sizeof(*o));
  memset(&options, 0, sizeof(options));
  options.allocator.alloc = as_alloc;
  options.allocator.free = as_free;
  options.trace_path = as_trace_path;
  if (!sweep_ok(r, gpuhal_driver_create(&options, &o->driver), "driver_create") ||
      !sweep_ok(r, gpuhal_driver_device_count(o->driver, &count), "driver_device_count"))
    return 0;
  if (count < devices) return sweep_ok(r, gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "no device"), "device_count");
  memset(&params, 0, sizeof(params));
  params.queue_count = 2;
  if (!sweep_ok(r, gpuhal_device_create(o->driver, 0, &params, &o->device), "device_create")) return 0;
  if (devices > 1 && !sweep_ok(r, gpuhal_device_create(o->driver, 1, &params, &o->peer), "device_create 1")) return 0;
  for (i = 0; i < AS_SEMS; ++i)
    if (!sweep_ok(r, gpuhal_semaphore_create(o->driver, 0, &o->sem[i]), "semaphore_create")) return 0;
  for (i = 0; i < 4; ++i)
    if (!sweep_ok(r, gpuhal_buffer_allocate(o->device, GPUHAL_MEMORY_DEVICE, 1024, &o->buf[i]), "buffer_allocate"))
      return 0;
  return 1;
}

static int as_open(sweep_run_t* r, as_objs_t* o) { return as_open_devices(r, o, 1); }

static void as_close(sweep_run_t* r, as_objs_t* o) {
  int i;
  if (o->device)
    sweep_ok(r, gpuhal_device_wait_idle(o->device, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS)), "device_wait_idle");
  if (o->peer)
    sweep_ok(r, gpuhal_device_wait_idle(o->peer, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS)), "device_wait_idle 1");
  for (i = 0; i < AS_CBS; ++i) gpuhal_command_buffer_release(o->cb[i]);
  for (i = 0; i < 4; ++i) gpuhal_buffer_release(o->buf[i]);
  gpuhal_buffer_release(o->scratch);
  gpuhal_executable_release(o->exe);
  gpuhal_executable_release(o->exe2);
  for (i = 0; i < AS_SEMS; ++i) gpuhal_semaphore_release(o->sem[i]);
  gpuhal_device_release(o->device);
  gpuhal_device_release(o->peer);
  gpuhal_driver_release(o->driver);
  memset(o, 0, sizeof(*o));
}

/* The chain, every wait submitted before its signal (the gate is signalled last):
 *   q0: gate=1 -> GRAPH reusable (buf0 -> buf1)        -> s=1
 *   q1: s=1    -> STREAM reusable (buf1 -> buf2)       -> s=2
 *   q0: s=2    -> GRAPH one-shot (buf2 -> buf3)        -> s=3
 *   q1: s=3    -> STREAM one-shot (buf3 -> buf0)       -> t=1
 *   q0: gate=1 -> alloca scratch                       -> a=1
 *   q0: t=1, a=1 -> dealloca scratch                   -> d=1
 *   q1: t=1    -> host call                            -> h=1
 * then host waits ANY(t=1, h=1) and ALL(t=1, h=1, d=1), the data, and the reusable GRAPH
 * command buffer once more (s=4). */
static void as_scenario_chain(sweep_run_t* r) {
  as_objs_t o;
  gpuhal_kernel_t* fill = NULL;
  gpuhal_semaphore_t *gate, *s, *t, *a, *d, *h;
  gpuhal_semaphore_t* list[3];
  gpuhal_semaphore_t* ta[2];
  uint64_t values[3] = {1, 1, 1}, four = 4, ta_values[2] = {1, 1};
  gpuhal_semaphore_list_t wait_list;
  gpuhal_buffer_t* spare = NULL;
  gpuhal_command_buffer_t* spare_cb = NULL;
  int gate_signalled = 0, calls = 0;
  if (as_open(r, &o) && sweep_ok(r, tu_load_kernel(o.device, "fill_u32", &o.exe, &fill), "executable_load") &&
      sweep_record(r, o.device, fill, GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_REUSABLE, o.buf[0], o.buf[1],
                   &o.cb[0]) &&
      sweep_record(r, o.device, fill, GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE, o.buf[1], o.buf[2],
                   &o.cb[1]) &&
      sweep_record(r, o.device, fill, GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_ONE_SHOT, o.buf[2], o.buf[3],
                   &o.cb[2]) &&
      sweep_record(r, o.device, fill, GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_ONE_SHOT, o.buf[3], o.buf[0],
                   &o.cb[3])) {
    gate = o.sem[0];
    s = o.sem[1];
    t = o.sem[2];
    a = o.sem[3];
    d = o.sem[4];
    h = o.sem[5];
    ta[0] = t;
    ta[1] = a;
    if (sweep_ok(r,
                 gpuhal_queue_execute(o.device, 0, gpuhal_semaphore_list_one(&gate, &V1),
                                      gpuhal_semaphore_list_one(&s, &V1), o.cb[0], NULL),
                 "queue_execute GRAPH reusable") &&
        (sweep_expect(r, s, 1), 1) &&
        sweep_ok(r,
                 gpuhal_queue_execute(o.device, 1, gpuhal_semaphore_list_one(&s, &V1),
                                      gpuhal_semaphore_list_one(&s, &V2), o.cb[1], NULL),
                 "queue_execute STREAM reusable") &&
        (sweep_expect(r, s, 2), 1) &&
        sweep_ok(r,
                 gpuhal_queue_execute(o.device, 0, gpuhal_semaphore_list_one(&s, &V2),
                                      gpuhal_semaphore_list_one(&s, &V3), o.cb[2], NULL),
                 "queue_execute GRAPH one-shot") &&
        (sweep_expect(r, s, 3), 1) &&
        sweep_ok(r,
                 gpuhal_queue_execute(o.device, 1, gpuhal_semaphore_list_one(&s, &V3),
                                      gpuhal_semaphore_list_one(&t, &V1), o.cb[3], NULL),
                 "queue_execute STREAM one-shot") &&
        (sweep_expect(r, t, 1), 1) &&
        sweep_ok(r,
                 gpuhal_queue_alloca(o.device, 0, gpuhal_semaphore_list_one(&gate, &V1),
                                     gpuhal_semaphore_list_one(&a, &V1), 4096, &o.scratch),
                 "queue_alloca") &&
        (sweep_expect(r, a, 1), 1)) {
      wait_list.count = 2;
      wait_list.semaphores = ta;
      wait_list.values = ta_values;
      if (sweep_ok(r, gpuhal_queue_dealloca(o.device, 0, wait_list, gpuhal_semaphore_list_one(&d, &V1), o.scratch),
                   "queue_dealloca")) {
        sweep_expect(r, d, 1);
        if (sweep_ok(r,
                     gpuhal_queue_host_call(o.device, 1, gpuhal_semaphore_list_one(&t, &V1),
                                            gpuhal_semaphore_list_one(&h, &V1), sweep_host_fn, &calls),
                     "queue_host_call"))
          sweep_expect(r, h, 1);
      }
    }
    /* Releases while the work waits for the gate (on the GPU, with memops): the frees (a
     * buffer's, a GRAPH command buffer's staging memory) are put off until no work waits on
     * the GPU, and must not need an allocation then. */
    if (!r->first &&
        sweep_ok(r, gpuhal_buffer_allocate(o.device, GPUHAL_MEMORY_DEVICE, 4096, &spare), "buffer_allocate"))
      gpuhal_buffer_release(spare);
    if (!r->first) {
      sweep_record(r, o.device, fill, GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_REUSABLE, o.buf[0], o.buf[1],
                   &spare_cb);
      if (spare_cb) gpuhal_command_buffer_release(spare_cb);
    }
    gate_signalled = sweep_ok(r, gpuhal_semaphore_signal(gate, 1), "semaphore_signal");
    list[0] = t;
    list[1] = h;
    list[2] = d;
    wait_list.semaphores = list;
    wait_list.values = values;
    wait_list.count = 2;
    if (!r->first &&
        sweep_ok(r, gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, wait_list, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS)),
                 "semaphores_wait ANY") &&
        (wait_list.count = 3,
         sweep_ok(r, gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, wait_list, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS)),
                  "semaphores_wait ALL")) &&
        sweep_check_recorded(r, o.buf[0])) {
      if (__atomic_load_n(&calls, __ATOMIC_ACQUIRE) != 1) sweep_mark_wrong(r, "the host call did not run once");
      if (sweep_ok(r, gpuhal_buffer_write(o.buf[1], 0, values, sizeof(values)), "buffer_write") &&
          sweep_ok(r,
                   gpuhal_queue_execute(o.device, 0, gpuhal_semaphore_list_one(&s, &V3),
                                        gpuhal_semaphore_list_one(&s, &four), o.cb[0], NULL),
                   "queue_execute GRAPH reusable again")) {
        sweep_expect(r, s, 4);
        if (sweep_wait(r, s, 4, "wait s=4")) sweep_check_recorded(r, o.buf[1]);
      }
    }
    if (!gate_signalled) gpuhal_semaphore_fail(gate, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "sweep: gate"));
  }
  sweep_settle(r);
  as_close(r, &o);
}

/* Signals `gate` once the scenario's thread has gone to sleep in its host wait (so that the
 * wait registers with every semaphore of its list instead of finding them reached). */
static void* as_late_signal_main(void* arg) {
  gpuhal_semaphore_t* gate = (gpuhal_semaphore_t*)arg;
  tu_sleep_ns(3000000);
  gpuhal_status_free(gpuhal_semaphore_signal(gate, 1));
  return NULL;
}

/* Late-bound arguments, long wait lists, a release while work waits, a report:
 *   q0: w[0..5]=1 -> GRAPH reusable over slot 0 bound to buf0 -> x[0]=1
 *   q1: w[0..5]=1 -> the same, slot 0 bound to buf1            -> x[1]=1
 *   q0: x[0..1]=1, h=1 -> host call ...                         -> x[2]=1
 * w[1..5] and h are signalled by the host at once, w[0] (the gate) by another thread while
 * this one waits for all nine values of w and x; a spare buffer is released and the pending
 * work reported while the work waits for the gate. */
#define AS_W 6
static void as_scenario_bound(sweep_run_t* r) {
  as_objs_t o;
  gpuhal_kernel_t* fill = NULL;
  gpuhal_semaphore_t* w[AS_W + 3];
  uint64_t ones[AS_W + 3];
  gpuhal_semaphore_list_t waits, all;
  gpuhal_binding_table_t bindings;
  gpuhal_arg_t args[3];
  gpuhal_buffer_t* spare = NULL;
  pthread_t signaller;
  int signaller_started = 0, calls = 0, i;
  uint32_t value = 0x2468ACE0u;
  char report[4096];
  for (i = 0; i < AS_W + 3; ++i) ones[i] = 1;
  args[0] = gpuhal_arg_slot(0, 0);
  args[1] = gpuhal_arg_u32(0x11111111u);
  args[2] = gpuhal_arg_u32(64);
  if (as_open(r, &o) && sweep_ok(r, tu_load_kernel(o.device, "fill_u32", &o.exe, &fill), "executable_load") &&
      sweep_ok(r,
               gpuhal_command_buffer_create(o.device, GPUHAL_COMMAND_BUFFER_GRAPH | GPUHAL_COMMAND_BUFFER_REUSABLE, 1,
                                            &o.cb[0]),
               "command_buffer_create") &&
      sweep_ok(r, gpuhal_command_buffer_begin(o.cb[0]), "command_buffer_begin") &&
      sweep_ok(r, gpuhal_cmd_dispatch(o.cb[0], fill, gpuhal_dim3(1, 1, 1), gpuhal_dim3(64, 1, 1), 0, 3, args),
               "cmd_dispatch") &&
      sweep_ok(r, gpuhal_cmd_fill(o.cb[0], gpuhal_ref_slot(0, 256), 256, &value, 4), "cmd_fill") &&
      sweep_ok(r, gpuhal_command_buffer_end(o.cb[0]), "command_buffer_end")) {
    for (i = 0; i < AS_W + 3; ++i) w[i] = o.sem[i];
    waits.count = AS_W;
    waits.semaphores = w;
    waits.values = ones;
    bindings.count = 1;
    bindings.offsets = NULL;
    bindings.buffers = &o.buf[0];
    if (sweep_ok(r,
                 gpuhal_queue_execute(o.device, 0, waits, gpuhal_semaphore_list_one(&w[AS_W], &V1), o.cb[0], &bindings),
                 "queue_execute bound to buf0")) {
      sweep_expect(r, w[AS_W], 1);
      bindings.buffers = &o.buf[1];
      if (sweep_ok(r,
                   gpuhal_queue_execute(o.device, 1, waits, gpuhal_semaphore_list_one(&w[AS_W + 1], &V1), o.cb[0],
                                        &bindings),
                   "queue_execute bound to buf1")) {
        sweep_expect(r, w[AS_W + 1], 1);
        waits.semaphores = &w[AS_W];
        waits.count = 2;
        if (sweep_ok(r,
                     gpuhal_queue_host_call(o.device, 0, waits, gpuhal_semaphore_list_one(&w[AS_W + 2], &V1),
                                            sweep_host_fn, &calls),
                     "queue_host_call"))
          sweep_expect(r, w[AS_W + 2], 1);
      }
    }
    if (sweep_ok(r, gpuhal_buffer_allocate(o.device, GPUHAL_MEMORY_DEVICE, 4096, &spare), "buffer_allocate spare"))
      gpuhal_buffer_release(spare); /* while work waits for the gate */
    sweep_ok(r, gpuhal_driver_report_pending(o.driver, report, sizeof(report), NULL), "driver_report_pending");
    for (i = 1; i < AS_W; ++i) sweep_ok(r, gpuhal_semaphore_signal(w[i], 1), "semaphore_signal");
    signaller_started = pthread_create(&signaller, NULL, as_late_signal_main, w[0]) == 0;
    if (!signaller_started) gpuhal_semaphore_fail(w[0], gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "no thread"));
    all.count = AS_W + 3;
    all.semaphores = w;
    all.values = ones;
    if (sweep_ok(r, gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, all, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS)),
                 "semaphores_wait ALL of 9") &&
        sweep_check_words(r, o.buf[0], 0, 64, 0x11111111u, "dispatch bound to buf0") &&
        sweep_check_words(r, o.buf[0], 256, 64, value, "fill bound to buf0") &&
        sweep_check_words(r, o.buf[1], 0, 64, 0x11111111u, "dispatch bound to buf1") &&
        sweep_check_words(r, o.buf[1], 256, 64, value, "fill bound to buf1") &&
        __atomic_load_n(&calls, __ATOMIC_ACQUIRE) != 1)
      sweep_mark_wrong(r, "the host call did not run once");
    if (signaller_started) pthread_join(signaller, NULL);
  }
  sweep_settle(r);
  as_close(r, &o);
}

/* Two devices, every wait submitted before its signal (the gate last):
 *   peer q0:   gate=1 -> GRAPH: peer copy buf0 (device 0) -> p, barrier, p -> buf1 (device 0) -> s=1
 *   device q1: s=1    -> STREAM: peer copy p -> buf2, fill buf3                                -> s=2
 *   peer q1:   s=2    -> host call                                                              -> h=1
 * The waits of the second and third cross devices (on the GPU with memops). Then device 0 and
 * its buffers are released while the peer's GRAPH command buffer still holds buf0 and buf1:
 * its release, after device 0's, frees them and ends device 0. */
static void as_scenario_peer(sweep_run_t* r) {
  as_objs_t o;
  gpuhal_buffer_t* p = NULL;
  gpuhal_command_buffer_t *pull = NULL, *push = NULL;
  gpuhal_semaphore_t *gate, *s, *h;
  uint32_t words[256], nine = 0x99999999u;
  int gate_signalled = 0, calls = 0, i;
  for (i = 0; i < 256; ++i) words[i] = 0x13579BDFu;
  if (as_open_devices(r, &o, 2) &&
      sweep_ok(r, gpuhal_buffer_allocate(o.peer, GPUHAL_MEMORY_DEVICE, 1024, &p), "buffer_allocate peer") &&
      sweep_ok(r, gpuhal_buffer_write(o.buf[0], 0, words, sizeof(words)), "buffer_write") &&
      sweep_ok(r, gpuhal_command_buffer_create(o.peer, GPUHAL_COMMAND_BUFFER_GRAPH, 0, &pull),
               "command_buffer_create") &&
      sweep_ok(r, gpuhal_command_buffer_begin(pull), "command_buffer_begin") &&
      sweep_ok(r, gpuhal_cmd_copy(pull, gpuhal_ref_buffer(o.buf[0], 0), gpuhal_ref_buffer(p, 0), 1024),
               "cmd_copy pull") &&
      sweep_ok(r, gpuhal_cmd_barrier(pull), "cmd_barrier") &&
      sweep_ok(r, gpuhal_cmd_copy(pull, gpuhal_ref_buffer(p, 0), gpuhal_ref_buffer(o.buf[1], 0), 1024),
               "cmd_copy push") &&
      sweep_ok(r, gpuhal_command_buffer_end(pull), "command_buffer_end") &&
      sweep_ok(r, gpuhal_command_buffer_create(o.device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &push),
               "command_buffer_create") &&
      sweep_ok(r, gpuhal_command_buffer_begin(push), "command_buffer_begin") &&
      sweep_ok(r, gpuhal_cmd_copy(push, gpuhal_ref_buffer(p, 0), gpuhal_ref_buffer(o.buf[2], 0), 1024),
               "cmd_copy peer") &&
      sweep_ok(r, gpuhal_cmd_fill(push, gpuhal_ref_buffer(o.buf[3], 0), 1024, &nine, 4), "cmd_fill") &&
      sweep_ok(r, gpuhal_command_buffer_end(push), "command_buffer_end")) {
    gate = o.sem[0];
    s = o.sem[1];
    h = o.sem[2];
    if (sweep_ok(r,
                 gpuhal_queue_execute(o.peer, 0, gpuhal_semaphore_list_one(&gate, &V1),
                                      gpuhal_semaphore_list_one(&s, &V1), pull, NULL),
                 "queue_execute peer GRAPH") &&
        (sweep_expect(r, s, 1), 1) &&
        sweep_ok(r,
                 gpuhal_queue_execute(o.device, 1, gpuhal_semaphore_list_one(&s, &V1),
                                      gpuhal_semaphore_list_one(&s, &V2), push, NULL),
                 "queue_execute device STREAM") &&
        (sweep_expect(r, s, 2), 1) &&
        sweep_ok(r,
                 gpuhal_queue_host_call(o.peer, 1, gpuhal_semaphore_list_one(&s, &V2),
                                        gpuhal_semaphore_list_one(&h, &V1), sweep_host_fn, &calls),
                 "queue_host_call peer"))
      sweep_expect(r, h, 1);
    gate_signalled = sweep_ok(r, gpuhal_semaphore_signal(gate, 1), "semaphore_signal");
    if (!r->first && sweep_wait(r, h, 1, "wait h=1") &&
        sweep_check_words(r, o.buf[1], 0, 64, words[0], "pulled back") &&
        sweep_check_words(r, o.buf[2], 768, 64, words[0], "peer copy") &&
        sweep_check_words(r, o.buf[3], 0, 64, nine, "fill") && __atomic_load_n(&calls, __ATOMIC_ACQUIRE) != 1)
      sweep_mark_wrong(r, "the host call did not run once");
    if (!gate_signalled) gpuhal_semaphore_fail(gate, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "sweep: gate"));
  }
  sweep_settle(r);
  gpuhal_command_buffer_release(push);
  if (o.device) { /* device 0 goes first; `pull` holds two of its buffers */
    sweep_ok(r, gpuhal_device_wait_idle(o.device, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS)), "device_wait_idle");
    for (i = 0; i < 4; ++i) gpuhal_buffer_release(o.buf[i]);
    memset(o.buf, 0, sizeof(o.buf));
    gpuhal_device_release(o.device);
    o.device = NULL;
  }
  if (o.peer)
    sweep_ok(r, gpuhal_device_wait_idle(o.peer, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS)), "device_wait_idle 1");
  gpuhal_command_buffer_release(pull);
  gpuhal_buffer_release(p);
  as_close(r, &o);
}

/* A queue call whose issue fails runs none of its work:
 *   q0: gate=1 -> GRAPH fill of buf0 -> s=1
 * s reaches 1 with buf0 filled, or fails with buf0 as it was. A device's first execute grows
 * its event pool: one run fails that growth, which once came after the graph's launch (the
 * fill ran, and the failed action let go of its command buffer while the stream ran it). */
static void as_scenario_unrun(sweep_run_t* r) {
  as_objs_t o;
  gpuhal_semaphore_t *gate, *s;
  uint32_t words[256], fill = 0x5A5A5A5Au;
  uint64_t value = 0;
  gpuhal_status_t st;
  int gate_signalled = 0, i;
  for (i = 0; i < 256; ++i) words[i] = 0x0BADF00Du;
  if (as_open(r, &o) && sweep_ok(r, gpuhal_buffer_write(o.buf[0], 0, words, sizeof(words)), "buffer_write") &&
      sweep_ok(r, gpuhal_command_buffer_create(o.device, GPUHAL_COMMAND_BUFFER_GRAPH, 0, &o.cb[0]),
               "command_buffer_create") &&
      sweep_ok(r, gpuhal_command_buffer_begin(o.cb[0]), "command_buffer_begin") &&
      sweep_ok(r, gpuhal_cmd_fill(o.cb[0], gpuhal_ref_buffer(o.buf[0], 0), 1024, &fill, 4), "cmd_fill") &&
      sweep_ok(r, gpuhal_command_buffer_end(o.cb[0]), "command_buffer_end")) {
    gate = o.sem[0];
    s = o.sem[1];
    if (sweep_ok(r,
                 gpuhal_queue_execute(o.device, 0, gpuhal_semaphore_list_one(&gate, &V1),
                                      gpuhal_semaphore_list_one(&s, &V1), o.cb[0], NULL),
                 "queue_execute"))
      sweep_expect(r, s, 1);
    gate_signalled = sweep_ok(r, gpuhal_semaphore_signal(gate, 1), "semaphore_signal");
    if (!gate_signalled) gpuhal_semaphore_fail(gate, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "sweep: gate"));
    sweep_settle(r);
    if (sweep_ok(r, gpuhal_device_wait_idle(o.device, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS)), "device_wait_idle")) {
      /* The query's own failure (its status copy) says nothing about s. */
      st = gpuhal_semaphore_query(s, &value);
      if (!st && value >= 1)
        sweep_check_words(r, o.buf[0], 0, 256, fill, "the execute reached its signal: the fill");
      else if (st && strstr(gpuhal_status_message(st), "issuing queue 'execute'"))
        sweep_check_words(r, o.buf[0], 0, 256, words[0], "the execute failed as it was issued: buf0 untouched");
      gpuhal_status_free(st);
    }
  }
  as_close(r, &o);
}

/* Module globals on two devices (tests/kernels/globals.cu, one image both share):
 *   device q0: -> GRAPH: update of device 0's c_table, barrier, read_globals -> buf0 -> s=1
 *   peer q0:   s=1 -> STREAM: peer copy of device 0's g_scale into the peer's, barrier,
 *              read_globals -> p                                                 -> s=2
 * g_scale of device 0 is written by the host first. The executables are released once
 * recorded: the buffers over their globals and the command buffers keep their modules. */
static int as_check_globals(sweep_run_t* r, gpuhal_buffer_t* out, uint32_t scale, const uint32_t* table,
                            const char* what) {
  uint32_t data[64], i;
  if (!sweep_ok(r, gpuhal_buffer_read(out, 0, data, sizeof(data)), "buffer_read")) return 0;
  for (i = 0; i < 64; ++i) {
    uint32_t want = scale * table[i % 8] + i % 3; /* + (unsigned)bias[i % 3], bias {0.5, 1.5, 2.5} */
    if (data[i] != want) {
      char msg[200];
      snprintf(msg, sizeof(msg), "%s: word %u is %u, expected %u", what, i, data[i], want);
      sweep_mark_wrong(r, msg);
      return 0;
    }
  }
  return 1;
}

static void as_scenario_globals(sweep_run_t* r) {
  as_objs_t o;
  gpuhal_kernel_t* read[2] = {NULL, NULL};
  gpuhal_buffer_t *scale0 = NULL, *scale1 = NULL, *table0 = NULL, *p = NULL;
  gpuhal_command_buffer_t* cb[2] = {NULL, NULL};
  gpuhal_arg_t args[2];
  gpuhal_semaphore_t* s;
  uint64_t address = 0, size = 0;
  uint32_t scale = 3, table[8], initial[8], i;
  int d;
  for (i = 0; i < 8; ++i) table[i] = 10 + i, initial[i] = i + 1;
  if (as_open_devices(r, &o, 2) && sweep_ok(r, tu_load_kernel(o.device, "globals", &o.exe, NULL), "executable_load") &&
      sweep_ok(r, tu_load_kernel(o.peer, "globals", &o.exe2, NULL), "executable_load peer") &&
      sweep_ok(r, gpuhal_executable_global(o.exe, "g_scale", &address, &size), "executable_global") &&
      sweep_ok(r, gpuhal_executable_global_buffer(o.exe, "g_scale", &scale0), "executable_global_buffer") &&
      sweep_ok(r, gpuhal_executable_global_buffer(o.exe2, "g_scale", &scale1), "executable_global_buffer peer") &&
      sweep_ok(r, gpuhal_executable_global_buffer(o.exe, "c_table", &table0), "executable_global_buffer table") &&
      sweep_ok(r, gpuhal_buffer_allocate(o.peer, GPUHAL_MEMORY_DEVICE, 256, &p), "buffer_allocate peer") &&
      sweep_ok(r, gpuhal_buffer_write(scale0, 0, &scale, 4), "buffer_write g_scale") &&
      sweep_ok(r, gpuhal_executable_kernel(o.exe, "read_globals", &read[0]), "executable_kernel") &&
      sweep_ok(r, gpuhal_executable_kernel(o.exe2, "read_globals", &read[1]), "executable_kernel peer")) {
    for (d = 0; d < 2; ++d) {
      args[0] = gpuhal_arg_buffer(d ? p : o.buf[0], 0);
      args[1] = gpuhal_arg_u32(64);
      if (!sweep_ok(
              r,
              gpuhal_command_buffer_create(d ? o.peer : o.device,
                                           d ? GPUHAL_COMMAND_BUFFER_STREAM : GPUHAL_COMMAND_BUFFER_GRAPH, 0, &cb[d]),
              "command_buffer_create") ||
          !sweep_ok(r, gpuhal_command_buffer_begin(cb[d]), "command_buffer_begin") ||
          !sweep_ok(r,
                    d ? gpuhal_cmd_copy(cb[d], gpuhal_ref_buffer(scale0, 0), gpuhal_ref_buffer(scale1, 0), 4)
                      : gpuhal_cmd_update(cb[d], table, gpuhal_ref_buffer(table0, 0), sizeof(table)),
                    d ? "cmd_copy peer global" : "cmd_update global") ||
          !sweep_ok(r, gpuhal_cmd_barrier(cb[d]), "cmd_barrier") ||
          !sweep_ok(r, gpuhal_cmd_dispatch(cb[d], read[d], gpuhal_dim3(2, 1, 1), gpuhal_dim3(32, 1, 1), 0, 2, args),
                    "cmd_dispatch") ||
          !sweep_ok(r, gpuhal_command_buffer_end(cb[d]), "command_buffer_end"))
        break;
    }
    gpuhal_executable_release(o.exe); /* the buffers over its globals and the command buffer keep it */
    gpuhal_executable_release(o.exe2);
    o.exe = o.exe2 = NULL;
    s = o.sem[0];
    if (d == 2 && /* both recorded */
        sweep_ok(r,
                 gpuhal_queue_execute(o.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &V1),
                                      cb[0], NULL),
                 "queue_execute device GRAPH") &&
        (sweep_expect(r, s, 1), 1) &&
        sweep_ok(r,
                 gpuhal_queue_execute(o.peer, 0, gpuhal_semaphore_list_one(&s, &V1), gpuhal_semaphore_list_one(&s, &V2),
                                      cb[1], NULL),
                 "queue_execute peer STREAM")) {
      sweep_expect(r, s, 2);
      if (sweep_wait(r, s, 2, "wait s=2") && as_check_globals(r, o.buf[0], scale, table, "device 0"))
        as_check_globals(r, p, scale, initial, "peer");
    }
  }
  sweep_settle(r);
  for (d = 0; d < 2; ++d) gpuhal_command_buffer_release(cb[d]);
  gpuhal_buffer_release(scale0);
  gpuhal_buffer_release(scale1);
  gpuhal_buffer_release(table0);
  gpuhal_buffer_release(p);
  as_close(r, &o);
}

/* softnccl's wait for a peer that never comes (a rank whose issue failed): short, and
 * longer under the sanitizers. */
#ifdef SWEEP_SANITIZED
#define AS_PEER_TIMEOUT_MS "1000"
#else
#define AS_PEER_TIMEOUT_MS "300"
#endif

/* A channel over the two devices (ncclCommInitAll) and an all-reduce (sum of u32): rank 0
 * records it in a STREAM command buffer, rank 1 in a GRAPH one (captured at its first
 * execute). Both executions wait on one host gate, signalled only once both are submitted;
 * a submit that fails fails the gate instead, so no rank waits for a peer that is not
 * coming. A rank whose issue fails on gpuhal's threads leaves the other to softnccl's
 * peer timeout (sweep_wait_ranks). */
static void as_scenario_collective(sweep_run_t* r) {
  as_objs_t o;
  gpuhal_device_t* devices[2];
  gpuhal_channel_t* ch[2] = {NULL, NULL};
  gpuhal_buffer_t* b[4] = {NULL, NULL, NULL, NULL};
  gpuhal_semaphore_t *gate = NULL, *done[2];
  int i, submitted = 0, gate_signalled = 0;
  if (as_open_devices(r, &o, 2)) {
    devices[0] = o.device;
    devices[1] = o.peer;
    gate = o.sem[0];
    done[0] = o.sem[1];
    done[1] = o.sem[2];
    if (!gpuhal_driver_has_feature(o.driver, GPUHAL_FEATURE_NCCL)) {
      sweep_ok(r,
               gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "NCCL is not loaded: set GPUHAL_NCCL_LIBRARY to softnccl"),
               "driver_has_feature NCCL");
    } else if (sweep_ok(r, gpuhal_channel_create_local(o.driver, 2, devices, ch), "channel_create_local")) {
      for (i = 0; i < 2; ++i)
        if (!sweep_record_rank(r, devices[i], ch[i], i, b, &o.cb[i])) break;
      submitted = sweep_execute_ranks(r, devices, gate, done, o.cb);
      if (submitted == 2) gate_signalled = sweep_ok(r, gpuhal_semaphore_signal(gate, 1), "semaphore_signal");
      if (!gate_signalled) gpuhal_semaphore_fail(gate, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "sweep: gate"));
      if (submitted) {
        sweep_wait_ranks(r, done);
        sweep_check_ranks(r, b);
      }
    }
    if (gate && !gate_signalled)
      gpuhal_semaphore_fail(gate, gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "sweep: gate"));
  }
  sweep_settle(r);
  if (o.device)
    sweep_ok(r, gpuhal_device_wait_idle(o.device, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS)), "device_wait_idle");
  if (o.peer)
    sweep_ok(r, gpuhal_device_wait_idle(o.peer, gpuhal_timeout_relative_ns(SWEEP_WAIT_NS)), "device_wait_idle 1");
  /* Command buffers hold their channel; the channels go before the devices. */
  for (i = 0; i < 2; ++i) {
    gpuhal_command_buffer_release(o.cb[i]);
    o.cb[i] = NULL;
    gpuhal_channel_release(ch[i]);
  }
  for (i = 0; i < 4; ++i) gpuhal_buffer_release(b[i]);
  as_close(r, &o);
}

/* Sharing within one process (memops only: without them export is UNAVAILABLE, which the
 * scenario checks and stops): sem[0] exported and imported twice (`theirs`, `spare`), an
 * exportable buffer exported and imported on the same device (`in`):
 *   q0: theirs=1 -> STREAM fill of `in` -> s=1   (a GPU wait on the shared word: parked)
 * While that waits: `spare` is released (its mapping's unregistering is put off), a second
 * exportable buffer and its import are released (their frees put off), and `theirs` (the
 * work holds it: it goes when the work retires). Then the host signals sem[0]=1, waits
 * s=1 and reads the fill through the exporter's buffer. */
static void as_scenario_share(sweep_run_t* r) {
  as_objs_t o;
  gpuhal_semaphore_t *theirs = NULL, *spare = NULL, *s;
  gpuhal_buffer_t *mine = NULL, *in = NULL, *mine2 = NULL, *in2 = NULL;
  gpuhal_buffer_handle_t h, h2;
  uint32_t pattern = 0xB0B0B0B0u;
  int fd = -1, signalled = 0;
  memset(&h, 0, sizeof(h));
  memset(&h2, 0, sizeof(h2));
  h.fd = h2.fd = -1;
  if (as_open(r, &o)) {
    s = o.sem[1];
    if (!gpuhal_driver_has_feature(o.driver, GPUHAL_FEATURE_SEMAPHORE_MEMOPS)) {
      gpuhal_status_t st = gpuhal_semaphore_export(o.sem[0], &fd);
      if (gpuhal_status_code(st) != GPUHAL_STATUS_UNAVAILABLE)
        sweep_ok(r, st, "semaphore_export without memops");
      else
        gpuhal_status_free(st);
    } else if (sweep_ok(r, gpuhal_semaphore_export(o.sem[0], &fd), "semaphore_export") &&
               sweep_ok(r, gpuhal_semaphore_import(o.driver, fd, &theirs), "semaphore_import") &&
               sweep_ok(r, gpuhal_semaphore_import(o.driver, fd, &spare), "semaphore_import spare") &&
               sweep_ok(r, gpuhal_buffer_allocate_exportable(o.device, 4096, &mine), "buffer_allocate_exportable") &&
               sweep_ok(r, gpuhal_buffer_export(mine, &h), "buffer_export") &&
               sweep_ok(r, gpuhal_buffer_import(o.device, &h, &in), "buffer_import") &&
               sweep_ok(r, gpuhal_command_buffer_create(o.device, GPUHAL_COMMAND_BUFFER_STREAM, 0, &o.cb[0]),
                        "command_buffer_create") &&
               sweep_ok(r, gpuhal_command_buffer_begin(o.cb[0]), "command_buffer_begin") &&
               sweep_ok(r, gpuhal_cmd_fill(o.cb[0], gpuhal_ref_buffer(in, 0), 256, &pattern, 4), "cmd_fill") &&
               sweep_ok(r, gpuhal_command_buffer_end(o.cb[0]), "command_buffer_end") &&
               sweep_ok(r,
                        gpuhal_queue_execute(o.device, 0, gpuhal_semaphore_list_one(&theirs, &V1),
                                             gpuhal_semaphore_list_one(&s, &V1), o.cb[0], NULL),
                        "queue_execute fill")) {
      sweep_expect(r, s, 1);
      /* Releases while the work waits on the GPU for the shared word. */
      gpuhal_semaphore_release(spare);
      spare = NULL;
      if (sweep_ok(r, gpuhal_buffer_allocate_exportable(o.device, 4096, &mine2), "buffer_allocate_exportable 2") &&
          sweep_ok(r, gpuhal_buffer_export(mine2, &h2), "buffer_export 2"))
        sweep_ok(r, gpuhal_buffer_import(o.device, &h2, &in2), "buffer_import 2");
      gpuhal_buffer_release(in2);
      gpuhal_buffer_release(mine2);
      in2 = mine2 = NULL;
      gpuhal_semaphore_release(theirs);
      theirs = NULL;
      signalled = sweep_ok(r, gpuhal_semaphore_signal(o.sem[0], 1), "semaphore_signal");
      if (signalled && sweep_wait(r, s, 1, "wait s=1"))
        sweep_check_words(r, mine, 0, 64, pattern, "fill through the import");
    }
    if (!signalled) gpuhal_semaphore_fail(o.sem[0], gpuhal_status_make(GPUHAL_STATUS_CANCELLED, "sweep: gate"));
  }
  sweep_settle(r);
  if (fd >= 0) close(fd);
  if (h.fd >= 0) close(h.fd);
  if (h2.fd >= 0) close(h2.fd);
  gpuhal_buffer_release(in2);
  gpuhal_buffer_release(mine2);
  gpuhal_buffer_release(in);
  gpuhal_buffer_release(mine);
  gpuhal_semaphore_release(spare);
  gpuhal_semaphore_release(theirs);
  as_close(r, &o);
}

/* Device-side regions and tensor maps: a GRAPH command buffer with a WHILE
 * (cond_count_down, 5 trips) holding an IF (cond_set_from on the trip count, then
 * cond_add); a TMA tile copy (tma_tile_copy: one 32 x 8 tile of u32, + 1) through a map
 * over a buffer (encoded at record) in a GRAPH command buffer and over a binding slot
 * (encoded at execute) in a STREAM one. */
static void as_scenario_regions(sweep_run_t* r) {
  as_objs_t o;
  gpuhal_kernel_t *count = NULL, *set = NULL, *add = NULL, *copy = NULL;
  gpuhal_binding_table_t table;
  gpuhal_buffer_t* tiles[2] = {NULL, NULL};
  gpuhal_semaphore_t* s;
  if (as_open(r, &o)) {
    s = o.sem[0];
    if (sweep_load_conditional(r, o.device, &o.exe, &count, &set, &add) &&
        sweep_ok(r, tu_load_kernel(o.device, "tma_tile_copy", &o.exe2, &copy), "executable_load tma_tile_copy") &&
        sweep_allocate_tiles(r, o.device, tiles) &&
        sweep_record_regions(r, o.device, count, set, add, o.buf[0], &o.cb[0]) &&
        sweep_record_tile_copy(r, o.device, copy, tiles[0], tiles[1], &o.cb[1]) &&
        sweep_record_tile_copy(r, o.device, copy, NULL, tiles[0], &o.cb[2]) &&
        sweep_ok(r,
                 gpuhal_queue_execute(o.device, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &V1),
                                      o.cb[0], NULL),
                 "queue_execute regions") &&
        (sweep_expect(r, s, 1), 1) &&
        sweep_ok(r,
                 gpuhal_queue_execute(o.device, 0, gpuhal_semaphore_list_one(&s, &V1),
                                      gpuhal_semaphore_list_one(&s, &V2), o.cb[1], NULL),
                 "queue_execute tensor map (buffer)") &&
        (sweep_expect(r, s, 2), table.count = 1, table.buffers = &tiles[1], table.offsets = NULL,
         sweep_ok(r,
                  gpuhal_queue_execute(o.device, 0, gpuhal_semaphore_list_one(&s, &V2),
                                       gpuhal_semaphore_list_one(&s, &V3), o.cb[2], &table),
                  "queue_execute tensor map (slot)")) &&
        (sweep_expect(r, s, 3), 1) && sweep_wait(r, s, 3, "wait s=3") && sweep_check_regions(r, o.buf[0]))
      sweep_check_tiles(r, tiles[0]);
  }
  sweep_settle(r);
  gpuhal_buffer_release(tiles[0]);
  gpuhal_buffer_release(tiles[1]);
  as_close(r, &o);
}

/* The chain with tracing on (the driver's trace file, written at its release). */
static void as_scenario_traced(sweep_run_t* r) {
  char path[256];
  const char* tmp = getenv("TMPDIR");
  snprintf(path, sizeof(path), "%s/gpuhal-alloc-sweep-%d.json", tmp && tmp[0] ? tmp : "/tmp", (int)getpid());
  as_trace_path = path;
  as_scenario_chain(r);
  as_trace_path = NULL;
  unlink(path);
}

/* ============================================================ the sweep ========= */
typedef void (*as_scenario_fn)(sweep_run_t* r);
static const char* as_mode_name;
static as_scenario_fn as_scenario_now;
static char as_alarm_msg[160]; /* what as_on_alarm says: the run that hung */

static void as_on_alarm(int sig) {
  (void)sig;
  if (write(2, as_alarm_msg, strlen(as_alarm_msg)) < 0) {
  }
  _exit(1);
}

/* Runs the scenario once and checks it; `healthy`: nothing may fail. Returns the
 * allocations the run asked for; *injected: how many of them failed. */
static long as_run_once(long from, long to, int healthy, long* injected) {
  sweep_run_t r;
  unsigned long long leaks_before = sweep_query_leaks();
  long calls, live;
  size_t objects;
  int verbose = getenv("GPUHAL_ALLOC_SWEEP_VERBOSE") != NULL;
  memset(&r, 0, sizeof(r));
  r.judge = as_judge;
  snprintf(as_alarm_msg, sizeof(as_alarm_msg), "test_alloc_sweep: HANG: %s N=%ld%s ran past %d s\n", as_mode_name, from,
           healthy ? " (healthy rerun)" : "", AS_RUN_LIMIT_S);
  as_arm(from, to);
  alarm(AS_RUN_LIMIT_S);
  as_scenario_now(&r);
  alarm(0);
  calls = __atomic_load_n(&as_calls, __ATOMIC_ACQUIRE);
  *injected = __atomic_load_n(&as_failed, __ATOMIC_ACQUIRE);
  as_arm(0, 0);
  live = __atomic_load_n(&as_live, __ATOMIC_ACQUIRE);
  objects = sweep_leak_report(0);
  if (verbose || r.bad || r.stuck || r.wrong || live || objects || sweep_query_leaks() != leaks_before ||
      (healthy && r.first) || (!*injected && r.first))
    fprintf(stderr, "  run %s N=%ld%s: %ld allocations, %ld failed (the first of %zu bytes); first error: %s\n",
            as_mode_name, from, healthy ? " (healthy rerun)" : "", calls, *injected,
            *injected ? __atomic_load_n(&as_failed_size, __ATOMIC_ACQUIRE) : (size_t)0,
            r.first ? gpuhal_status_message(r.first) : "none");
  if (healthy) TU_CHECK(r.first == NULL);
  if (!*injected) TU_CHECK(r.first == NULL); /* nothing failed: nothing may report an error */
  if (r.bad) TU_FAIL_AT(__FILE__, __LINE__, "%s N=%ld: not a host-memory failure: %s", as_mode_name, from, r.bad_what);
  if (r.stuck) TU_FAIL_AT(__FILE__, __LINE__, "%s N=%ld: HANG: %s", as_mode_name, from, r.stuck_what);
  if (r.wrong) TU_FAIL_AT(__FILE__, __LINE__, "%s N=%ld: wrong data after OK: %s", as_mode_name, from, r.wrong_what);
  if (live) TU_FAIL_AT(__FILE__, __LINE__, "%s N=%ld: LEAK: %ld allocations not freed", as_mode_name, from, live);
  if (objects || sweep_query_leaks() != leaks_before) {
    TU_FAIL_AT(__FILE__, __LINE__, "%s N=%ld: softcuda: %zu CUDA objects still live, %llu leaked at context teardown",
               as_mode_name, from, objects, sweep_query_leaks() - leaks_before);
    sweep_leak_report(1);
  }
  __atomic_store_n(&as_live, 0, __ATOMIC_RELEASE); /* one leak is reported once */
  gpuhal_status_free(r.first);
  return calls;
}

static int as_stride(void) {
  const char* s = getenv("GPUHAL_ALLOC_SWEEP_STRIDE");
  int n = s ? atoi(s) : 1;
  return n > 0 ? n : 1;
}

/* For N = 1, 1 + stride, ...: a run failing allocations N..N+window-1, then a healthy
 * rerun; until N is past every run's allocations. */
static void as_sweep_every(const char* mode, as_scenario_fn scenario, long window, int every) {
  long n, injected, total, most, runs = 0, failed_runs = 0;
  int stride = as_stride() * every;
  int failures_before = tu_state.failed;
  as_mode_name = mode;
  as_scenario_now = scenario;
  total = most = as_run_once(0, 0, 1, &injected);
  TU_REQUIRE(tu_state.failed == failures_before);
  /* gpuhal's threads allocate too, so a run's count varies a little: the sweep ends past
   * the most any run asked for. */
  if (getenv("GPUHAL_ALLOC_SWEEP_N")) { /* one run, to look at (a debugger: break in as_alloc_failed) */
    as_run_once(atol(getenv("GPUHAL_ALLOC_SWEEP_N")), atol(getenv("GPUHAL_ALLOC_SWEEP_N")) + window - 1, 0, &injected);
    return;
  }
  for (n = 1; n <= most; n += stride) {
    long calls = as_run_once(n, n + window - 1, 0, &injected);
    if (calls > most) most = calls;
    runs++;
    if (!injected) continue;
    failed_runs++;
    calls = as_run_once(0, 0, 1, &injected);
    if (calls > most) most = calls;
    if (tu_state.failed - failures_before > 20) {
      fprintf(stderr, "  %s: stopping after 20 failures\n", mode);
      break;
    }
  }
  fprintf(stderr, "  %s: %ld allocations in a healthy run, %ld runs (%ld with a failed allocation)\n", mode, total,
          runs, failed_runs);
}

static void as_sweep(const char* mode, as_scenario_fn scenario, long window) {
  as_sweep_every(mode, scenario, window, 1);
}

/* The window mode of the later scenarios starts a window at every third allocation only:
 * their one-allocation mode fails each one, and the windows (of AS_WINDOW) still overlap;
 * it keeps the test's run time small under the sanitizers. */
#define AS_WINDOW_EVERY 3

static int as_setup(void) {
  struct sigaction sa;
  if (!tu_softcuda() || !sweep_softcuda_bind()) return 0;
  sweep_default_nccl(); /* the collective scenario's */
  setenv("SOFTNCCL_TIMEOUT_MS", AS_PEER_TIMEOUT_MS, 0);
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = as_on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  return 1;
}

TU_TEST(chain_fail_one_allocation) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep("chain/one", as_scenario_chain, 1);
}

TU_TEST(chain_fail_a_window_of_allocations) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep("chain/window", as_scenario_chain, AS_WINDOW);
}

TU_TEST(bound_fail_one_allocation) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep("bound/one", as_scenario_bound, 1);
}

TU_TEST(bound_fail_a_window_of_allocations) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep("bound/window", as_scenario_bound, AS_WINDOW);
}

TU_TEST(peer_fail_one_allocation) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep("peer/one", as_scenario_peer, 1);
}

TU_TEST(peer_fail_a_window_of_allocations) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep_every("peer/window", as_scenario_peer, AS_WINDOW, AS_WINDOW_EVERY);
}

TU_TEST(unrun_fail_one_allocation) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep("unrun/one", as_scenario_unrun, 1);
}

TU_TEST(collective_fail_one_allocation) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep("collective/one", as_scenario_collective, 1);
}

TU_TEST(collective_fail_a_window_of_allocations) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep_every("collective/window", as_scenario_collective, AS_WINDOW, AS_WINDOW_EVERY);
}

TU_TEST(share_fail_one_allocation) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep("share/one", as_scenario_share, 1);
}

TU_TEST(share_fail_a_window_of_allocations) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep_every("share/window", as_scenario_share, AS_WINDOW, AS_WINDOW_EVERY);
}

TU_TEST(regions_fail_one_allocation) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep("regions/one", as_scenario_regions, 1);
}

TU_TEST(regions_fail_a_window_of_allocations) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep_every("regions/window", as_scenario_regions, AS_WINDOW, AS_WINDOW_EVERY);
}

TU_TEST(globals_fail_one_allocation) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep("globals/one", as_scenario_globals, 1);
}

TU_TEST(globals_fail_a_window_of_allocations) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep_every("globals/window", as_scenario_globals, AS_WINDOW, AS_WINDOW_EVERY);
}

TU_TEST(traced_fail_one_allocation) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep("traced/one", as_scenario_traced, 1);
}

TU_TEST(traced_fail_a_window_of_allocations) {
  if (!as_setup()) TU_SKIP("needs softcuda");
  as_sweep_every("traced/window", as_scenario_traced, AS_WINDOW, AS_WINDOW_EVERY);
}

TU_MAIN(TU_CASE(chain_fail_one_allocation), TU_CASE(chain_fail_a_window_of_allocations),
        TU_CASE(bound_fail_one_allocation), TU_CASE(bound_fail_a_window_of_allocations),
        TU_CASE(peer_fail_one_allocation), TU_CASE(peer_fail_a_window_of_allocations),
        TU_CASE(unrun_fail_one_allocation), TU_CASE(collective_fail_one_allocation),
        TU_CASE(collective_fail_a_window_of_allocations), TU_CASE(share_fail_one_allocation),
        TU_CASE(share_fail_a_window_of_allocations), TU_CASE(regions_fail_one_allocation),
        TU_CASE(regions_fail_a_window_of_allocations), TU_CASE(globals_fail_one_allocation),
        TU_CASE(globals_fail_a_window_of_allocations), TU_CASE(traced_fail_one_allocation),
        TU_CASE(traced_fail_a_window_of_allocations))
