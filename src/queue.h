/* queue: the deferred issue queue (DESIGN §6).
 *
 * Every queue operation waits on a semaphore list and signals a semaphore list. A call
 * copies and retains what it needs, appends an action and returns: it never blocks on the
 * GPU and never waits for its semaphores on the calling thread.
 *
 * Three threads serve a device:
 *  - the device's worker thread (device.h) runs the "pump": it issues every action whose
 *    waits are each *completed* (value reached) or *submitted* (the work that reaches it is
 *    issued and its event recorded: the wait becomes cuStreamWaitEvent), puts the action's
 *    work on its queue's stream, records one pooled event and publishes the signalled values
 *    as submitted timepoints. So chains of dependent work, across queues and devices, run on
 *    the GPU with no host round trip. It also releases retired actions (CUDA calls allowed).
 *  - the completion thread takes every issued action at once and observes the batch in issue
 *    order (cuEventQuery, spinning briefly, then between growing sleeps; one query of a
 *    newer event of the same stream covers the older ones: GPUHAL_COMPLETION_BATCH),
 *    advances the signalled semaphores, wakes waiters, and hands the actions back to the
 *    worker for release (in batches, one lock each). Between batches it naps rather than
 *    sleeps while work keeps coming (GPUHAL_COMPLETION_NAP_NS), so submitters need not
 *    wake it.
 *  - the host-call thread runs gpuhal_queue_host_call functions once their waits completed,
 *    then signals. No user function runs inside a CUDA callback; gpuhal never uses
 *    cuLaunchHostFunc.
 * Fast paths (DESIGN §6):
 *  - a submitter issues a ready action itself, inside a push/pop of the device's context,
 *    when nothing is queued ahead (GPUHAL__SUBMIT_CALLER_MAY_ISSUE);
 *  - a submitter that keeps issuing that way also retires the completed head of the issued
 *    list itself ("harvesting", below): in a busy steady state the completion thread and the
 *    worker have nothing to do, and an action's memory, its semaphores and its event stay
 *    in that thread's cache;
 *  - a host waiter polls the recorded event of the value it waits for and advances the
 *    semaphore itself once that event completed (semaphore.h).
 * A CUDA error fails the action's signal semaphores with the original error; actions that
 * wait on a failed semaphore fail with that cause in their message; a sticky error marks the
 * device lost and every pending and later action fails fast with it. */

#define GPUHAL__HAVE_QUEUE 1

/* A host function for gpuhal_queue_host_call: runs on a gpuhal thread; a returned error
 * fails the call's signal semaphores. It must not wait for work queued after it on the same
 * device's host calls. */
typedef gpuhal_status_t (*gpuhal_host_fn_t)(void* user);

#ifdef GPUHAL__HAVE_MEMORY
/* Allocates `size` bytes from the device's stream-ordered pool once `wait` is reached, then
 * signals `signal`. *out_buffer is returned at once; its device address is assigned when the
 * allocation is issued (use it only in queue work ordered after `signal`). Devices without
 * memory pool support allocate synchronously on the worker thread. */
GPUHAL_API gpuhal_status_t gpuhal_queue_alloca(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                               gpuhal_semaphore_list_t signal, uint64_t size,
                                               gpuhal_buffer_t** out_buffer);
/* Frees `buffer` (from gpuhal_queue_alloca) in stream order once `wait` is reached, then
 * signals `signal`. The call holds a reference to the buffer until then. */
GPUHAL_API gpuhal_status_t gpuhal_queue_dealloca(gpuhal_device_t* device, uint32_t queue,
                                                 gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal,
                                                 gpuhal_buffer_t* buffer);
#endif
/* Runs fn(user) on a gpuhal thread once `wait` is reached and the queue's earlier work is
 * done, then signals `signal` (or fails it with fn's error). */
GPUHAL_API gpuhal_status_t gpuhal_queue_host_call(gpuhal_device_t* device, uint32_t queue,
                                                  gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal,
                                                  gpuhal_host_fn_t fn, void* user);
/* Waits until every queue operation submitted to the device so far is done (completed or
 * failed, its resources released). Returns the loss cause if the device is lost. */
GPUHAL_API gpuhal_status_t gpuhal_device_wait_idle(gpuhal_device_t* device, gpuhal_timeout_t timeout);
/* NULL while the device is healthy; after a sticky CUDA error, a clone of the loss cause. */
GPUHAL_API gpuhal_status_t gpuhal_device_lost_status(gpuhal_device_t* device);

/* ---- gpuhal:implementation ---- */

/* What an action does; see the queue <-> command-buffer contract. */
typedef struct gpuhal__action_ops_s {
  const char* name; /* "execute", "alloca", "dealloca", "host_call", "barrier" */
  /* On the worker thread, context current, after every wait became a cuStreamWaitEvent (or
   * was already complete): put the work on `stream`. An error fails the signals. */
  gpuhal_status_t (*issue)(void* user, gpuhal_device_t* device, CUstream stream);
  /* Optional. Once the work is complete (status NULL) or failed. No CUDA calls. Runs on the
   * completion thread, on a submitting thread that harvests the action (see harvesting),
   * or on the worker for actions that failed before they were issued. */
  void (*complete)(void* user, gpuhal_status_t status);
  /* Optional. After completion or failure, on the worker thread or on a harvesting
   * submitter; no gpuhal lock is held either way, but only the worker is sure to have the
   * device's context current: a release that makes CUDA calls enters the context itself
   * (gpuhal__context_enter) or asks the worker, as buffer and command-buffer destruction
   * do. Always called exactly once for a submitted action, even one that never ran. */
  void (*release)(void* user, gpuhal_device_t* device);
} gpuhal__action_ops_t;

/* Flags of gpuhal__queue_submit_ex. */
enum {
  /* `issue` may also run on the submitting thread, with the device's context pushed and
   * serialized with every other issue of the device, when nothing is queued ahead
   * (DESIGN §6's fast path: no worker wake-up in a round trip). Such an issue must not
   * block and must not call gpuhal__worker_call. */
  GPUHAL__SUBMIT_CALLER_MAY_ISSUE = 1u << 0,
  /* The caller already ran gpuhal__queue_validate on these arguments. */
  GPUHAL__SUBMIT_VALIDATED = 1u << 1
};

/* The completion thread polls an event (cuEventQuery) for this long, then keeps polling with
 * sleeps that double up to GPUHAL_COMPLETION_MAX_SLEEP_NS. It never blocks inside the driver:
 * measured on an H200, a thread blocked in cuEventSynchronize on the event that a host waiter
 * is polling made that waiter's round trip bimodal (about 12 or 45 us). */
#ifndef GPUHAL_COMPLETION_SPIN_NS
#define GPUHAL_COMPLETION_SPIN_NS 2000
#endif
#ifndef GPUHAL_COMPLETION_MAX_SLEEP_NS
#define GPUHAL_COMPLETION_MAX_SLEEP_NS 200000
#endif
/* How long the completion thread watches for new work (a memory flag, no CUDA call) before
 * it sleeps on its condition variable. 0 by default: on an H200 a 20 us watch did not pay
 * in bench_queue (it competes for cores with the submitter and the worker). */
#ifndef GPUHAL_COMPLETION_IDLE_SPIN_NS
#define GPUHAL_COMPLETION_IDLE_SPIN_NS 0
#endif
/* GPUHAL_QUEUE_PROFILE=1 (benchmarks only): time spent in each step of submission and
 * issue, summed over all threads; bench_queue prints it per case. */
#ifndef GPUHAL_QUEUE_PROFILE
#define GPUHAL_QUEUE_PROFILE 0
#endif
#if GPUHAL_QUEUE_PROFILE
enum {
  GPUHAL__QP_VALIDATE, GPUHAL__QP_ACQUIRE, GPUHAL__QP_INIT, GPUHAL__QP_ISSUE_HERE, GPUHAL__QP_RESOLVE,
  GPUHAL__QP_CONTEXT, GPUHAL__QP_WAITS, GPUHAL__QP_WORK, GPUHAL__QP_EVENT_ACQUIRE, GPUHAL__QP_RECORD,
  GPUHAL__QP_TIMEPOINTS, GPUHAL__QP_DISPATCH, GPUHAL__QP_LEAVE, GPUHAL__QP_BUFFER, GPUHAL__QP_HARVEST,
  GPUHAL__QP_COUNT
};
static const char* const gpuhal__queue_profile_names[GPUHAL__QP_COUNT] = {
    "validate", "acquire+lock", "init+retain", "issue here (all)", " resolve", " context enter", " stream waits",
    " work (ops->issue)", " event acquire", " cuEventRecord", " timepoints", " dispatch (lock+signal)",
    " context leave", "alloca buffer object", "harvest"};
static int64_t gpuhal__queue_profile_ns[GPUHAL__QP_COUNT];
static int64_t gpuhal__queue_profile_calls[GPUHAL__QP_COUNT];
static void gpuhal__queue_profile_mark(int64_t* t, int section) {
  int64_t now = gpuhal_now_ns();
  __atomic_add_fetch(&gpuhal__queue_profile_ns[section], now - *t, __ATOMIC_RELAXED);
  __atomic_add_fetch(&gpuhal__queue_profile_calls[section], 1, __ATOMIC_RELAXED);
  *t = now;
}
#define GPUHAL__QP_START(t) int64_t t = gpuhal_now_ns()
#define GPUHAL__QP_RESTART(t) t = gpuhal_now_ns()
#define GPUHAL__QP_MARK(t, section) gpuhal__queue_profile_mark(&(t), (section))
#else
#define GPUHAL__QP_START(t) ((void)0)
#define GPUHAL__QP_RESTART(t) ((void)0)
#define GPUHAL__QP_MARK(t, section) ((void)0)
#endif

/* After work, the completion thread does not sleep on its condition variable at once: for
 * GPUHAL_COMPLETION_ACTIVE_NS it naps (timed waits of GPUHAL_COMPLETION_NAP_NS) and looks
 * for new work itself, so a submitter does not pay a futex wake-up (a system call, slow in
 * a virtual machine) for every action of a busy stream of submissions; host calls still wake
 * it at once. Nobody depends on its promptness for a fast path: host waiters watch their
 * own value's event, GPU waits use submitted timepoints. 0: sleep on the condition variable
 * whenever there is no work (every dispatch wakes it). */
#ifndef GPUHAL_COMPLETION_NAP_NS
#define GPUHAL_COMPLETION_NAP_NS 50000
#endif
#ifndef GPUHAL_COMPLETION_ACTIVE_NS
#define GPUHAL_COMPLETION_ACTIVE_NS 2000000
#endif
/* The completion thread takes every issued action at once and works through the batch in
 * issue order. Events of one stream complete in order, so for each queue it first queries
 * the newest action of the batch issued at least GPUHAL_COMPLETION_PROBE_AGE_NS before the
 * batch was taken: once that one is complete, so is every earlier action of that queue,
 * and they complete without a query each. Fewer cuEventQuery calls: on an H200 each cost
 * the completion thread about 2 us and made the submitting thread's own CUDA calls slower
 * (cuEventRecord 0.2 -> 0.45 us). 0: query every action's own event. */
#ifndef GPUHAL_COMPLETION_BATCH
#define GPUHAL_COMPLETION_BATCH 1
#endif
#ifndef GPUHAL_COMPLETION_PROBE_AGE_NS
#define GPUHAL_COMPLETION_PROBE_AGE_NS 10000
#endif
/* The completion thread lets issued work age this long before it takes it (unless a host
 * call is among it): it then handles many actions per look, with one query, one lock of
 * each semaphore and one hand-over to the worker for all of them, instead of competing with
 * the submitting thread for the same locks and for the driver on every action. Nobody's
 * fast path waits for it (host waiters poll their own value's event, GPU waits use submitted
 * timepoints, gpuhal_device_wait_idle cuts the nap short); what it delays is resource
 * release. On an H200 (bench_queue), 100 us took an alloca + dealloca pair from 4.0 to 2.8 us
 * and a graph execute from 2.8 to 2.3 us, against 3.2 and 2.7 us at 20 us. 0: take work as
 * soon as it is issued. */
#ifndef GPUHAL_COMPLETION_MIN_AGE_NS
#define GPUHAL_COMPLETION_MIN_AGE_NS 100000
#endif
#define GPUHAL__PROBE_SLOTS 8 /* queues probed per batch (by index modulo this) */
/* Retired actions are handed to the worker in batches of this many (and whenever the
 * completion thread runs out of work), not one wake-up each. The release at idle must
 * stay: retired actions hold references (command buffers, buffers) that keep the device
 * alive, so holding them back can keep a released device from ever being destroyed. */
#define GPUHAL__RETIRE_BATCH 32
#define GPUHAL__ACTION_INLINE_ENTRIES 4
#define GPUHAL__ACTION_POOL_BLOCK 32
#define GPUHAL__ACTION_ISSUE_BATCH 16 /* free actions the fast path takes per refill */

struct gpuhal__queue_state_s;

/* One wait of an action. */
typedef struct gpuhal__action_wait_s {
  gpuhal__semaphore_waiter_t waiter; /* registered while the action is blocked on this wait */
  gpuhal_semaphore_t* semaphore;     /* retained */
  uint64_t value;
  gpuhal__event_t* event; /* resolved by a submitted timepoint: wait on this event (retained) */
} gpuhal__action_wait_t;

typedef struct gpuhal__action_s {
  gpuhal__list_node_t link; /* in exactly one of the state's lists */
  struct gpuhal__action_s* next_free;
  struct gpuhal__queue_state_s* state;
  uint32_t queue_index;
  const gpuhal__action_ops_t* ops;
  void* user;
  gpuhal_host_fn_t host_fn; /* host calls: run after completion; signals are host signals */
  void* host_user;
  uint32_t wait_count;
  uint32_t signal_count;
  uint32_t next_wait; /* waits before this one are resolved */
  int32_t wake;       /* 1: new, or a semaphore it is blocked on changed: resolve it again */
  int completed_ok;   /* the work completed and its values were advanced */
  uint32_t shared_signal_refs; /* bit i: signal i uses a wait's semaphore reference */
  gpuhal__action_wait_t* waits;
  gpuhal__timepoint_t* signals;
  /* What the completion side reads of every action comes first (fewer cache lines). */
  gpuhal__event_t* event; /* recorded after the work (one reference) */
  gpuhal_status_t failure;
  int64_t dispatch_ns; /* when it was handed to the completion thread */
  uint64_t seq;        /* dispatch order on the device (state->dispatch_seq) */
  struct gpuhal__trace_action_s* trace; /* trace.h: NULL when tracing is off */
  /* Storage for lists longer than the inline one; kept across reuse (grow-only), so a
   * steady state of similar submissions allocates nothing. */
  gpuhal__action_wait_t* wait_storage;
  uint32_t wait_capacity;
  gpuhal__timepoint_t* signal_storage;
  uint32_t signal_capacity;
  gpuhal__timepoint_t inline_signals[GPUHAL__ACTION_INLINE_ENTRIES];
  gpuhal__action_wait_t inline_waits[GPUHAL__ACTION_INLINE_ENTRIES];
} gpuhal__action_t;

/* ---- trace hooks (trace.h; called through GPUHAL__TRACE(device, ...), see device.h) ---- */
#ifdef GPUHAL__HAVE_TRACE
static uint64_t gpuhal__trace_submit_begin(gpuhal_device_t* device, gpuhal__action_t* a, gpuhal_semaphore_list_t wait,
                                           gpuhal_semaphore_list_t signal);
static void gpuhal__trace_submit_end(gpuhal_device_t* device, uint32_t queue, const char* name, uint64_t span,
                                     int64_t t0);
static int64_t gpuhal__trace_issue_begin(gpuhal_device_t* device, gpuhal__action_t* a, CUstream stream);
static void gpuhal__trace_issue_end(gpuhal_device_t* device, gpuhal__action_t* a, CUstream stream, int64_t t0,
                                    int failed);
static void gpuhal__trace_action_complete(gpuhal_device_t* device, gpuhal__action_t* a);
static void gpuhal__trace_host_call(gpuhal_device_t* device, gpuhal__action_t* a, int64_t t0);
static void gpuhal__trace_action_release(gpuhal_device_t* device, gpuhal__action_t* a);
#endif
/* ---- end of trace hooks ---- */

typedef struct gpuhal__action_block_s {
  struct gpuhal__action_block_s* next;
  gpuhal__action_t actions[GPUHAL__ACTION_POOL_BLOCK];
} gpuhal__action_block_t;

typedef struct gpuhal__queue_state_s {
  gpuhal_device_t* device;
  gpuhal__mutex_t mutex; /* guards everything below up to `pending` */
  gpuhal__mutex_t issue_mutex; /* held by whoever issues: the pump, or a submitter's fast path */
  gpuhal__cond_t completion_cond;
  gpuhal__cond_t host_call_cond;
  gpuhal__cond_t idle_cond;
  gpuhal__list_node_t incoming;   /* submitted, not yet seen by the worker */
  gpuhal__list_node_t in_flight;  /* issued, in issue order: the completion thread's FIFO */
  gpuhal__list_node_t host_calls; /* host calls whose function is due */
  gpuhal__list_node_t retired;    /* done; release due on the worker */
  uint64_t outstanding;           /* submitted and not yet released (atomic; drops under mutex) */
  uint32_t incoming_count;        /* length of incoming (atomic; changes under mutex) */
  uint32_t in_flight_count;       /* length of in_flight, readable without the mutex */
  uint32_t retired_unkicked;      /* retired since the worker was last kicked */
  gpuhal_status_t lost;           /* the loss cause after a sticky error */
  int32_t lost_flag;              /* lost != NULL, readable without the mutex */
  int32_t issue_needed;           /* new submissions, woken or to-be-failed actions: the pump must look */
  int32_t stopping;               /* device release has begun: no new submissions (atomic) */
  int completion_sleeping;        /* the completion thread waits for a signal: dispatch must wake it */
  int completion_napping;         /* it naps (GPUHAL_COMPLETION_NAP_NS, MIN_AGE_NS): only host calls wake it */
  uint32_t in_flight_host_calls;  /* host calls in `in_flight`: the completion thread takes them at once */
  uint32_t idle_waiters;          /* threads in gpuhal_device_wait_idle: no aging while there are any */
  uint64_t dispatch_seq;          /* actions handed to the completion side so far (under mutex) */
  int32_t harvesting;             /* a submitter is harvesting (atomic; one at a time) */
  int32_t harvest_skip;           /* fast-path submissions left before the next look (atomic) */
  int32_t harvest_backoff;        /* what harvest_skip is set to after a fruitless look */
  int64_t last_harvest_ns;        /* when a submitter last retired work itself (under mutex) */
  int64_t harvest_due_ns;         /* when a look pays even with few actions in flight (atomic hint) */
  uint64_t harvest_looks, harvest_misses, harvested; /* statistics (atomic): queries, fruitless ones, actions */
  int threads_stop;
  gpuhal__action_t* free_actions;
  gpuhal__action_block_t* action_blocks;
  /* Under issue_mutex. */
  gpuhal__list_node_t pending; /* waiting for their waits */
  gpuhal__action_t* issue_free; /* free actions taken in bulk by the fast path (see below) */
  gpuhal__task_t pump_task; /* posted whenever something changed; the worker dedups it */
  gpuhal__event_pool_t events;
  gpuhal__thread_t completion_thread;
  gpuhal__thread_t host_call_thread;
  int threads_started;
} gpuhal__queue_state_t;

static gpuhal__queue_state_t* gpuhal__queue_state(gpuhal_device_t* device) {
  return (gpuhal__queue_state_t*)device->queue_state;
}

/* ---- kicking the pump ---- */
/* Makes sure the pump runs (again) on the worker soon. Any thread; no allocation. */
static void gpuhal__queue_kick(gpuhal__queue_state_t* state) { gpuhal__worker_post(state->device, &state->pump_task); }

/* Asks the pump to look at the pending actions (not only to release retired ones). */
static void gpuhal__queue_kick_issue(gpuhal__queue_state_t* state) {
  gpuhal__atomic_store(&state->issue_needed, 1);
  gpuhal__queue_kick(state);
}

static void gpuhal__action_wait_notify(gpuhal__semaphore_waiter_t* waiter) {
  gpuhal__action_t* a = (gpuhal__action_t*)waiter->user;
  gpuhal__atomic_store(&a->wake, 1);
  gpuhal__queue_kick_issue(a->state);
}

/* ---- the action pool ---- */
static gpuhal_status_t gpuhal__action_acquire_locked(gpuhal__queue_state_t* state, gpuhal__action_t** out) {
  gpuhal__action_t* a = state->free_actions;
  if (!a) {
    gpuhal__action_block_t* block = NULL;
    uint32_t i;
    GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(state->device->allocator, sizeof(*block), "queue action pool block",
                                                 (void**)&block));
    block->next = state->action_blocks;
    state->action_blocks = block;
    for (i = 0; i < GPUHAL__ACTION_POOL_BLOCK; ++i) {
      block->actions[i].next_free = state->free_actions;
      state->free_actions = &block->actions[i];
    }
    a = state->free_actions;
  }
  state->free_actions = a->next_free;
  a->next_free = NULL;
  *out = a;
  return NULL;
}

/* Room for the lists: inline, or the action's grow-only storage. */
static gpuhal_status_t gpuhal__action_reserve(gpuhal__queue_state_t* state, gpuhal__action_t* a, uint32_t waits,
                                              uint32_t signals) {
  const gpuhal_allocator_t* allocator = state->device->allocator;
  if (waits <= GPUHAL__ACTION_INLINE_ENTRIES) {
    a->waits = a->inline_waits;
  } else {
    if (waits > a->wait_capacity) {
      size_t bytes = sizeof(gpuhal__action_wait_t) * (size_t)waits;
      gpuhal__action_wait_t* grown = (gpuhal__action_wait_t*)gpuhal__alloc(allocator, bytes);
      if (!grown) return gpuhal__status_oom("queue action wait list", bytes);
      gpuhal__free(allocator, a->wait_storage);
      a->wait_storage = grown;
      a->wait_capacity = waits;
    }
    a->waits = a->wait_storage;
  }
  if (signals <= GPUHAL__ACTION_INLINE_ENTRIES) {
    a->signals = a->inline_signals;
  } else {
    if (signals > a->signal_capacity) {
      size_t bytes = sizeof(gpuhal__timepoint_t) * (size_t)signals;
      gpuhal__timepoint_t* grown = (gpuhal__timepoint_t*)gpuhal__alloc(allocator, bytes);
      if (!grown) return gpuhal__status_oom("queue action signal list", bytes);
      gpuhal__free(allocator, a->signal_storage);
      a->signal_storage = grown;
      a->signal_capacity = signals;
    }
    a->signals = a->signal_storage;
  }
  return NULL;
}

/* ---- failing and retiring ---- */

/* Hands a finished action to the worker for release. Any thread. With `batch`, the worker
 * is kicked only every GPUHAL__RETIRE_BATCH actions (the completion thread flushes when it
 * runs out of work). */
static void gpuhal__action_retire_ex(gpuhal__action_t* a, int batch) {
  gpuhal__queue_state_t* state = a->state;
  int kick;
  gpuhal__mutex_lock(&state->mutex);
  gpuhal__list_push_back(&state->retired, &a->link);
  kick = !batch || ++state->retired_unkicked >= GPUHAL__RETIRE_BATCH;
  if (kick) state->retired_unkicked = 0;
  gpuhal__mutex_unlock(&state->mutex);
  if (kick) gpuhal__queue_kick(state);
}
static void gpuhal__action_retire(gpuhal__action_t* a) { gpuhal__action_retire_ex(a, 0); }

/* Fails every signal of `a` with `cause` (owned; kept in the action) and tells its ops. */
static void gpuhal__action_fail(gpuhal__action_t* a, gpuhal_status_t cause) {
  uint32_t i;
  if (!cause) cause = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "queue action failed without a cause");
  for (i = 0; i < a->signal_count; ++i) {
    gpuhal__timepoint_t* tp = &a->signals[i];
    gpuhal__semaphore_remove_timepoint(tp);
    gpuhal__semaphore_fail_owned(
        tp->semaphore, gpuhal_status_annotate(gpuhal_status_clone(cause),
                                              "failing the semaphore that queue '%s' (device %d, queue %u) "
                                              "was to signal to %llu",
                                              a->ops->name, a->state->device->ordinal, a->queue_index,
                                              (unsigned long long)tp->value));
  }
  if (a->ops->complete) a->ops->complete(a->user, cause);
  gpuhal_status_free(a->failure);
  a->failure = cause;
}

/* The work reached its values: advance them (host calls: after their function ran). */
static void gpuhal__action_succeed(gpuhal__action_t* a) {
  uint32_t i;
  for (i = 0; i < a->signal_count; ++i) gpuhal__semaphore_advance(a->signals[i].semaphore, a->signals[i].value);
  /* Advancing unlinked every timepoint of the action (each is at or below the new value). */
  a->completed_ok = 1;
  if (a->ops->complete) a->ops->complete(a->user, NULL);
}

/* Marks the device lost (first cause wins) and kicks the pump so pending work fails fast. */
static void gpuhal__queue_mark_lost(gpuhal__queue_state_t* state, gpuhal_status_t cause) {
  int first = 0;
  gpuhal__mutex_lock(&state->mutex);
  if (!state->lost) {
    state->lost = gpuhal_status_annotate(gpuhal_status_clone(cause), "device %d is lost", state->device->ordinal);
    gpuhal__atomic_store(&state->lost_flag, 1);
    first = 1;
  }
  state->device->lost = 1;
  gpuhal__mutex_unlock(&state->mutex);
  if (first) {
    gpuhal__log(state->device->logger, GPUHAL_LOG_ERROR, "device %d lost: %s", state->device->ordinal,
                gpuhal_status_message(cause));
    gpuhal__queue_kick_issue(state);
  }
}

/* A clone of the loss cause, or NULL. */
static gpuhal_status_t gpuhal__queue_lost_clone(gpuhal__queue_state_t* state) {
  gpuhal_status_t s = NULL;
  if (!gpuhal__atomic_load(&state->lost_flag)) return NULL;
  gpuhal__mutex_lock(&state->mutex);
  if (state->lost) s = gpuhal_status_clone(state->lost);
  gpuhal__mutex_unlock(&state->mutex);
  return s;
}

/* 1 when signal `i` holds no semaphore reference of its own: a wait of the same semaphore
 * holds the one the action needs (a timeline that waits on one value and signals the next
 * costs one reference count change per submission and per release, not two). */
static int gpuhal__action_signal_ref_shared(const gpuhal__action_t* a, uint32_t i) {
  return i < 32 && ((a->shared_signal_refs >> i) & 1u);
}

/* At submission: takes the semaphore references of the lists, one per wait and one per
 * signal whose semaphore none of the waits has. */
static void gpuhal__action_retain_semaphores(gpuhal__action_t* a) {
  uint32_t i, j;
  a->shared_signal_refs = 0;
  for (i = 0; i < a->wait_count; ++i) gpuhal__object_retain(&a->waits[i].semaphore->object);
  for (i = 0; i < a->signal_count; ++i) {
    for (j = 0; i < 32 && j < a->wait_count && a->waits[j].semaphore != a->signals[i].semaphore; ++j) {
    }
    if (i < 32 && j < a->wait_count) {
      a->shared_signal_refs |= 1u << i;
    } else {
      gpuhal__object_retain(&a->signals[i].semaphore->object);
    }
  }
}

/* On the worker (or a harvesting submitter): drops everything the action holds. Its own
 * event, when this was the last reference, goes on `*events` (the state's pool). */
static void gpuhal__action_drop(gpuhal__action_t* a, gpuhal__event_t** events) {
  gpuhal__queue_state_t* state = a->state;
  uint32_t i;
  if (a->ops->release) a->ops->release(a->user, state->device);
  GPUHAL__TRACE(state->device, gpuhal__trace_action_release(state->device, a)); /* trace hook */
  /* Signals first: a signal may share its semaphore reference with a wait. */
  for (i = 0; i < a->signal_count; ++i) {
    if (!a->completed_ok) gpuhal__semaphore_remove_timepoint(&a->signals[i]);
    if (!gpuhal__action_signal_ref_shared(a, i)) gpuhal__semaphore_release_ref(a->signals[i].semaphore);
  }
  for (i = 0; i < a->wait_count; ++i) {
    gpuhal__action_wait_t* w = &a->waits[i];
    /* Only an action that never issued can still be registered (on its blocking wait). */
    if (!a->event && i == a->next_wait) gpuhal__semaphore_unregister(w->semaphore, &w->waiter);
    gpuhal__event_release(w->event);
    w->event = NULL;
    gpuhal__semaphore_release_ref(w->semaphore);
  }
  a->completed_ok = 0;
  a->shared_signal_refs = 0;
  gpuhal__event_release_to(a->event, events);
  a->event = NULL;
  gpuhal_status_free(a->failure);
  a->failure = NULL;
  a->ops = NULL;
  a->user = NULL;
  a->host_fn = NULL;
}

/* On the worker (or a harvesting submitter, holding no queue lock): releases a list of
 * retired actions and returns them, and their events, to the pools under one lock each
 * (not one per action: submitters take the state's lock on every submission). */
static void gpuhal__actions_release(gpuhal__queue_state_t* state, gpuhal__list_node_t* retired) {
  gpuhal__action_t* first = NULL;
  gpuhal__action_t* last = NULL;
  gpuhal__event_t* events = NULL;
  gpuhal__list_node_t* n;
  uint64_t count = 0;
  while ((n = gpuhal__list_pop_front(retired)) != NULL) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    gpuhal__action_drop(a, &events);
    a->next_free = first;
    if (!last) last = a;
    first = a;
    count++;
  }
  gpuhal__event_pool_put_chain(&state->events, events);
  if (!count) return;
  gpuhal__mutex_lock(&state->mutex);
  last->next_free = state->free_actions;
  state->free_actions = first;
  if (__atomic_sub_fetch(&state->outstanding, count, __ATOMIC_ACQ_REL) == 0) gpuhal__cond_broadcast(&state->idle_cond);
  gpuhal__mutex_unlock(&state->mutex);
}

/* ---- the pump (worker thread) ---- */

typedef enum gpuhal__resolve_e { GPUHAL__RESOLVE_READY, GPUHAL__RESOLVE_BLOCKED, GPUHAL__RESOLVE_FAILED } gpuhal__resolve_t;

/* Resolves the waits in order; stops at the first one neither completed nor submitted
 * (registering on its semaphore so its change kicks the pump). */
static gpuhal__resolve_t gpuhal__action_resolve(gpuhal__action_t* a, gpuhal_status_t* out_failure) {
  CUstream stream = a->state->device->streams[a->queue_index];
  while (a->next_wait < a->wait_count) {
    gpuhal__action_wait_t* w = &a->waits[a->next_wait];
    gpuhal_status_t failure = NULL;
    gpuhal__wait_state_t st;
    /* A value submitted on this action's own stream needs no wait: stream order has it
     * (told without the semaphore's lock when the newest submitted value covers it). */
    if (gpuhal__semaphore_covered_on_stream(w->semaphore, w->value, stream)) {
      a->next_wait++;
      continue;
    }
    st = gpuhal__semaphore_check(w->semaphore, w->value, &w->waiter, stream, &w->event, NULL, &failure);
    if (st == GPUHAL__WAIT_PENDING) return GPUHAL__RESOLVE_BLOCKED;
    if (st == GPUHAL__WAIT_FAILED) {
      char who[96];
      snprintf(who, sizeof(who), "queue '%s' (device %d, queue %u)", a->ops->name, a->state->device->ordinal,
               a->queue_index);
      *out_failure = gpuhal__semaphore_failure_for(failure, who, w->value);
      return GPUHAL__RESOLVE_FAILED;
    }
    a->next_wait++;
  }
  return GPUHAL__RESOLVE_READY;
}

/* Puts the action on its stream: stream waits, the work, the event; publishes timepoints. */
static gpuhal_status_t gpuhal__action_issue(gpuhal__action_t* a) {
  gpuhal_device_t* device = a->state->device;
  CUstream stream = device->streams[a->queue_index];
  gpuhal__event_t* event = NULL;
  uint32_t i;
  GPUHAL__QP_START(qp);
  for (i = 0; i < a->wait_count; ++i) {
    gpuhal__action_wait_t* w = &a->waits[i];
    if (!w->event) continue;
    /* On the same stream, order already implies the wait. Otherwise the wait captures the
     * event's current record, so the event may be reused after. */
    if (w->event->stream != stream)
      GPUHAL__RETURN_IF_ERROR(GPUHAL__CU(device->cu, cuStreamWaitEvent, (stream, w->event->handle, 0)));
    gpuhal__event_release(w->event);
    w->event = NULL;
  }
  GPUHAL__QP_MARK(qp, GPUHAL__QP_WAITS);
  if (a->ops->issue) {
    int64_t trace_t0 = 0; /* trace hook: GPU timing events around the work */
    gpuhal_status_t issued;
    GPUHAL__TRACE(device, trace_t0 = gpuhal__trace_issue_begin(device, a, stream));
    issued = a->ops->issue(a->user, device, stream);
    GPUHAL__TRACE(device, gpuhal__trace_issue_end(device, a, stream, trace_t0, issued != NULL));
    GPUHAL__RETURN_IF_ERROR(issued);
  }
  GPUHAL__QP_MARK(qp, GPUHAL__QP_WORK);
  GPUHAL__RETURN_IF_ERROR(gpuhal__event_pool_acquire(&a->state->events, &event));
  a->event = event;
  GPUHAL__QP_MARK(qp, GPUHAL__QP_EVENT_ACQUIRE);
  GPUHAL__CU_RETURN(device->cu, cuEventRecord, (event->handle, stream));
  event->stream = stream;
  GPUHAL__QP_MARK(qp, GPUHAL__QP_RECORD);
  if (!a->host_fn) {
    for (i = 0; i < a->signal_count; ++i) {
      a->signals[i].event = event;
      gpuhal__semaphore_add_timepoint(a->signals[i].semaphore, &a->signals[i]);
    }
  }
  GPUHAL__QP_MARK(qp, GPUHAL__QP_TIMEPOINTS);
  return NULL;
}

/* An issue failed: sticky errors (the stream says so too) lose the device. */
static void gpuhal__action_issue_failed(gpuhal__action_t* a, gpuhal_status_t status) {
  gpuhal__queue_state_t* state = a->state;
  CUresult r = state->device->cu->cuStreamQuery(state->device->streams[a->queue_index]);
  status = gpuhal_status_annotate(status, "issuing queue '%s' (device %d, queue %u)", a->ops->name,
                                  state->device->ordinal, a->queue_index);
  if (gpuhal__cuda_error_is_sticky(r)) gpuhal__queue_mark_lost(state, status);
  gpuhal__action_fail(a, status);
  gpuhal__action_retire(a);
}

/* Issues a ready action and hands it to the completion thread (or fails it). Under
 * issue_mutex with the device's context current. Returns when it was handed over (0: it
 * failed). */
static int64_t gpuhal__action_dispatch(gpuhal__queue_state_t* state, gpuhal__action_t* a) {
  gpuhal_status_t status = gpuhal__action_issue(a);
  int64_t now;
  if (status) {
    gpuhal__action_issue_failed(a, status);
    return 0;
  }
  GPUHAL__QP_START(qp);
  a->dispatch_ns = now = gpuhal_now_ns();
  gpuhal__mutex_lock(&state->mutex);
  a->seq = ++state->dispatch_seq;
  gpuhal__list_push_back(&state->in_flight, &a->link);
  if (a->host_fn) state->in_flight_host_calls++;
  gpuhal__atomic_add(&state->in_flight_count, 1);
  /* A napping completion thread finds the action at its next look (see
   * GPUHAL_COMPLETION_NAP_NS); a host call's function should not wait for that. */
  if (state->completion_sleeping || (state->completion_napping && a->host_fn))
    gpuhal__cond_signal(&state->completion_cond);
  gpuhal__mutex_unlock(&state->mutex);
  GPUHAL__QP_MARK(qp, GPUHAL__QP_DISPATCH);
  return now;
}

/* One pass over the pending actions; returns how many left the list. */
static int gpuhal__queue_pump_pass(gpuhal__queue_state_t* state) {
  gpuhal__list_node_t* n = state->pending.next;
  int progress = 0;
  while (n != &state->pending) {
    gpuhal__list_node_t* next = n->next;
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    gpuhal_status_t failure = gpuhal__queue_lost_clone(state);
    gpuhal__resolve_t r;
    /* An action blocked on a semaphore that did not change since is skipped unlocked:
     * a rescan costs nothing per blocked action. */
    if (!failure && !__atomic_exchange_n(&a->wake, 0, __ATOMIC_ACQ_REL)) {
      n = next;
      continue;
    }
    r = failure ? GPUHAL__RESOLVE_FAILED : gpuhal__action_resolve(a, &failure);
    if (r != GPUHAL__RESOLVE_BLOCKED) {
      gpuhal__list_remove(&a->link);
      progress++;
      if (r == GPUHAL__RESOLVE_FAILED) {
        gpuhal__action_fail(a, failure);
        gpuhal__action_retire(a);
      } else {
        gpuhal__action_dispatch(state, a);
      }
    }
    n = next;
  }
  return progress;
}

static void gpuhal__list_splice_back(gpuhal__list_node_t* to, gpuhal__list_node_t* from) {
  if (gpuhal__list_empty(from)) return;
  from->next->prev = to->prev;
  to->prev->next = from->next;
  from->prev->next = to;
  to->prev = from->prev;
  gpuhal__list_init(from);
}

static void gpuhal__queue_pump(gpuhal__queue_state_t* state) {
  gpuhal__list_node_t retired;
  gpuhal__list_init(&retired);
  /* Most kicks only bring retired actions: then leave issuing (and the fast path) alone.
   * New submissions move to `pending` under the issue lock, so a submitter's fast path
   * (which needs `incoming` empty and the issue lock) cannot overtake one of them that has
   * left `incoming` but is not issued yet: submission order holds. */
  if (__atomic_exchange_n(&state->issue_needed, 0, __ATOMIC_ACQ_REL)) {
    gpuhal__mutex_lock(&state->issue_mutex);
    gpuhal__mutex_lock(&state->mutex);
    gpuhal__list_splice_back(&state->pending, &state->incoming);
    gpuhal__atomic_store(&state->incoming_count, 0u);
    gpuhal__mutex_unlock(&state->mutex);
    while (gpuhal__queue_pump_pass(state) > 0) {
    }
    gpuhal__mutex_unlock(&state->issue_mutex);
  }
  gpuhal__mutex_lock(&state->mutex);
  gpuhal__list_splice_back(&retired, &state->retired);
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__actions_release(state, &retired);
}

static void gpuhal__queue_pump_task(gpuhal__task_t* task) {
  gpuhal__queue_pump(GPUHAL__CONTAINER_OF(task, gpuhal__queue_state_t, pump_task));
}

/* ---- the completion thread ---- */

/* Waits for the event: polls briefly, then polls between sleeps that grow (see above). */
static CUresult gpuhal__event_wait_spin_then_block(gpuhal__event_t* e) {
  const gpuhal__cuda_symbols_t* cu = e->pool->device->cu;
  int64_t spin_end = gpuhal_now_ns() + GPUHAL_COMPLETION_SPIN_NS;
  int64_t sleep_ns = 2000;
  for (;;) {
    CUresult r = cu->cuEventQuery(e->handle);
    if (r != CUDA_ERROR_NOT_READY) return r;
    if (gpuhal_now_ns() < spin_end) continue;
    gpuhal__sleep_ns(sleep_ns);
    if (sleep_ns < GPUHAL_COMPLETION_MAX_SLEEP_NS) sleep_ns *= 2;
  }
}

/* What the completion thread knows about one batch: per queue slot, the action probed (the
 * newest old enough) and whether it was found complete. */
typedef struct gpuhal__completion_batch_s {
  gpuhal__action_t* probe[GPUHAL__PROBE_SLOTS];
  int probed[GPUHAL__PROBE_SLOTS];   /* its event was queried */
  int complete[GPUHAL__PROBE_SLOTS]; /* ... and had completed: everything of its queue up to it has */
} gpuhal__completion_batch_t;

/* Picks the probes of a batch: the newest action per queue issued before `cutoff_ns`. */
static void gpuhal__completion_batch_init(gpuhal__completion_batch_t* b, gpuhal__list_node_t* batch,
                                          int64_t cutoff_ns) {
  gpuhal__list_node_t* n;
  memset(b, 0, sizeof(*b));
  if (!GPUHAL_COMPLETION_BATCH) return;
  for (n = batch->next; n != batch; n = n->next) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    uint32_t slot = a->queue_index % GPUHAL__PROBE_SLOTS;
    if (a->dispatch_ns > cutoff_ns) break; /* in dispatch order: the rest is newer */
    if (!b->probe[slot] || b->probe[slot]->queue_index == a->queue_index) b->probe[slot] = a;
  }
}

/* 1 when `a` is known complete through its queue's probe (querying the probe once). */
static int gpuhal__completion_batch_covers(gpuhal__completion_batch_t* b, gpuhal__action_t* a) {
  uint32_t slot = a->queue_index % GPUHAL__PROBE_SLOTS;
  gpuhal__action_t* probe = b->probe[slot];
  int covered;
  if (!probe || probe->queue_index != a->queue_index) return 0;
  if (!b->probed[slot]) {
    b->probed[slot] = 1;
    b->complete[slot] = probe != a && gpuhal__event_query(probe->event) == 0;
  }
  covered = b->complete[slot];
  if (probe == a) b->probe[slot] = NULL; /* later actions of this queue are past it */
  return covered;
}

/* 1 when `a` and `next` (of the same queue, not host calls) signal only the same semaphore,
 * `next` to a value at or above `a`'s: once both are known complete, `a` need not advance
 * it, `next` will (before either is released). */
static int gpuhal__actions_share_signal(const gpuhal__action_t* a, const gpuhal__action_t* next) {
  return next && next->queue_index == a->queue_index && !a->host_fn && !next->host_fn && a->signal_count == 1 &&
         next->signal_count == 1 && a->signals[0].semaphore == next->signals[0].semaphore &&
         next->signals[0].value >= a->signals[0].value;
}

/* gpuhal__actions_share_signal, with both known complete through the batch's probe. */
static int gpuhal__completion_may_skip_advance(const gpuhal__completion_batch_t* b, const gpuhal__action_t* a,
                                               const gpuhal__action_t* next) {
  uint32_t slot = a->queue_index % GPUHAL__PROBE_SLOTS;
  return b->probe[slot] && b->complete[slot] && gpuhal__actions_share_signal(a, next);
}

/* The work of `a` (not a host call) completed: advance its values, unless a later complete
 * action of its queue advances the same semaphore past them (`skip_advance`). */
static void gpuhal__action_complete_ok(gpuhal__action_t* a, int skip_advance) {
  if (skip_advance) {
    a->completed_ok = 1; /* its timepoint goes with the later action's advance */
    if (a->ops->complete) a->ops->complete(a->user, NULL);
  } else {
    gpuhal__action_succeed(a);
  }
}

/* Hands the actions observed so far to the worker for release, under one lock. */
static void gpuhal__completion_retire_done(gpuhal__queue_state_t* state, gpuhal__list_node_t* done, uint32_t* count) {
  int kick;
  if (!*count) return;
  gpuhal__mutex_lock(&state->mutex);
  gpuhal__list_splice_back(&state->retired, done);
  state->retired_unkicked += *count;
  kick = state->retired_unkicked >= GPUHAL__RETIRE_BATCH;
  if (kick) state->retired_unkicked = 0;
  gpuhal__mutex_unlock(&state->mutex);
  *count = 0;
  if (kick) gpuhal__queue_kick(state);
}

/* cuEventQuery of `a`'s event failed with `query_error`, which is not sticky: the work may
 * still be running, so its semaphores must not fail (or advance) yet. Retries the event a
 * few times (a transient failure), then waits until the queue's stream has drained: that
 * tells whether the work completed (CUDA_SUCCESS) or how it failed. On the completion
 * thread (the device's context is current there). */
static CUresult gpuhal__action_recheck(gpuhal__queue_state_t* state, gpuhal__action_t* a, CUresult query_error) {
  const gpuhal__cuda_symbols_t* cu = state->device->cu;
  const char* name = NULL;
  const char* text = NULL;
  int64_t sleep_ns = 2000;
  int tries;
  for (tries = 0; tries < 3; ++tries) {
    CUresult r;
    gpuhal__sleep_ns(sleep_ns);
    r = gpuhal__event_wait_spin_then_block(a->event);
    if (r == CUDA_SUCCESS || gpuhal__cuda_error_is_sticky(r)) return r;
  }
  gpuhal__cuda_error_describe(cu, query_error, &name, &text);
  gpuhal__log(state->device->logger, GPUHAL_LOG_WARN,
              "device %d, queue %u: cuEventQuery keeps failing (%s, %d); waiting for the queue's stream to drain "
              "to learn how queue '%s' ended",
              state->device->ordinal, a->queue_index, name ? name : "unknown CUDA error", (int)query_error,
              a->ops->name);
  for (;;) {
    CUresult r = cu->cuStreamQuery(state->device->streams[a->queue_index]);
    if (r != CUDA_ERROR_NOT_READY) return r;
    gpuhal__sleep_ns(sleep_ns);
    if (sleep_ns < GPUHAL_COMPLETION_MAX_SLEEP_NS) sleep_ns *= 2;
  }
}

/* Observes `a`: complete already when `known_complete` (a later event of its stream has
 * completed), else waits for its own event. A successful action goes on `done` (retired by
 * the caller, after any advance it skipped was made by a later action: `skip_advance`). */
static void gpuhal__action_observe(gpuhal__queue_state_t* state, gpuhal__action_t* a, int known_complete,
                                   int skip_advance, gpuhal__list_node_t* done, uint32_t* done_count) {
  CUresult r = known_complete ? CUDA_SUCCESS : gpuhal__event_wait_spin_then_block(a->event);
  gpuhal_status_t lost;
  if (r != CUDA_SUCCESS && !gpuhal__cuda_error_is_sticky(r)) r = gpuhal__action_recheck(state, a, r);
  if (r != CUDA_SUCCESS) {
    gpuhal_status_t status = gpuhal__cuda_status(state->device->cu, r, "cuEventQuery", __FILE__, __LINE__);
    if (gpuhal__cuda_error_is_sticky(r)) gpuhal__queue_mark_lost(state, status);
    /* After a loss, every later action fails with the original cause. */
    lost = gpuhal__queue_lost_clone(state);
    if (lost) {
      gpuhal_status_free(status);
      status = lost;
    }
    gpuhal__action_fail(a, gpuhal_status_annotate(status, "running queue '%s' (device %d, queue %u)", a->ops->name,
                                                  state->device->ordinal, a->queue_index));
    gpuhal__action_retire(a);
    return;
  }
  GPUHAL__TRACE(state->device, gpuhal__trace_action_complete(state->device, a)); /* trace hook */
  if (a->host_fn) {
    gpuhal__mutex_lock(&state->mutex);
    gpuhal__list_push_back(&state->host_calls, &a->link);
    gpuhal__cond_signal(&state->host_call_cond);
    gpuhal__mutex_unlock(&state->mutex);
    return;
  }
  gpuhal__action_complete_ok(a, skip_advance);
  gpuhal__list_push_back(done, &a->link);
  (*done_count)++;
}

/* Out of work: release what is retired, then watch the in-flight count for a short while
 * before sleeping. */
static void gpuhal__completion_idle(gpuhal__queue_state_t* state) {
  int64_t end;
  int kick;
  gpuhal__mutex_lock(&state->mutex);
  kick = state->retired_unkicked > 0;
  state->retired_unkicked = 0;
  gpuhal__mutex_unlock(&state->mutex);
  if (kick) gpuhal__queue_kick(state);
  end = gpuhal_now_ns() + GPUHAL_COMPLETION_IDLE_SPIN_NS;
  while (gpuhal__atomic_load(&state->in_flight_count) == 0 && gpuhal_now_ns() < end) {
  }
}

/* Under the state's mutex, with work in flight: 1 after napping while the oldest issued
 * action is younger than GPUHAL_COMPLETION_MIN_AGE_NS (look again), 0 to take the work now. */
static int gpuhal__completion_let_age(gpuhal__queue_state_t* state) {
  const gpuhal__action_t* oldest;
  int64_t age;
  if (GPUHAL_COMPLETION_MIN_AGE_NS <= 0 || state->threads_stop || state->in_flight_host_calls > 0 ||
      state->idle_waiters > 0)
    return 0;
  oldest = GPUHAL__CONTAINER_OF(state->in_flight.next, gpuhal__action_t, link);
  /* A submitter that harvested lately keeps the list short itself: leave it the work. */
  age = gpuhal_now_ns() -
        (state->last_harvest_ns > oldest->dispatch_ns ? state->last_harvest_ns : oldest->dispatch_ns);
  if (age >= GPUHAL_COMPLETION_MIN_AGE_NS) return 0;
  state->completion_napping = 1; /* a host call's dispatch wakes it */
  gpuhal__cond_wait_until(&state->completion_cond, &state->mutex,
                          gpuhal_timeout_relative_ns(GPUHAL_COMPLETION_MIN_AGE_NS - age));
  state->completion_napping = 0;
  return 1;
}

static void* gpuhal__completion_main(void* arg) {
  gpuhal__queue_state_t* state = (gpuhal__queue_state_t*)arg;
  gpuhal__context_scope_t scope;
  /* cuEventQuery/Synchronize need no context on CUDA, but a gpuhal thread may hold it. */
  gpuhal_status_t status = gpuhal__context_enter(state->device, &scope);
  int64_t last_work_ns = gpuhal_now_ns();
  gpuhal_status_free(status);
  for (;;) {
    gpuhal__list_node_t batch, done;
    gpuhal__completion_batch_t known;
    gpuhal__list_node_t* n;
    int64_t taken_ns;
    uint32_t done_count = 0;
    if (gpuhal__atomic_load(&state->in_flight_count) == 0) gpuhal__completion_idle(state);
    gpuhal__mutex_lock(&state->mutex);
    while (gpuhal__list_empty(&state->in_flight) && !state->threads_stop) {
      if (GPUHAL_COMPLETION_NAP_NS > 0 && gpuhal_now_ns() - last_work_ns < GPUHAL_COMPLETION_ACTIVE_NS) {
        state->completion_napping = 1;
        gpuhal__cond_wait_until(&state->completion_cond, &state->mutex,
                                gpuhal_timeout_relative_ns(GPUHAL_COMPLETION_NAP_NS));
        state->completion_napping = 0;
      } else {
        state->completion_sleeping = 1;
        gpuhal__cond_wait(&state->completion_cond, &state->mutex);
        state->completion_sleeping = 0;
      }
    }
    if (gpuhal__list_empty(&state->in_flight)) {
      gpuhal__mutex_unlock(&state->mutex);
      break;
    }
    if (gpuhal__completion_let_age(state)) {
      gpuhal__mutex_unlock(&state->mutex);
      continue;
    }
    /* The whole list, in issue order; in_flight_count counts it until each is observed. */
    gpuhal__list_init(&batch);
    gpuhal__list_splice_back(&batch, &state->in_flight);
    state->in_flight_host_calls = 0;
    gpuhal__mutex_unlock(&state->mutex);
    taken_ns = gpuhal_now_ns();
    gpuhal__completion_batch_init(&known, &batch, taken_ns - GPUHAL_COMPLETION_PROBE_AGE_NS);
    gpuhal__list_init(&done);
    while ((n = gpuhal__list_pop_front(&batch)) != NULL) {
      gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
      gpuhal__action_t* next =
          gpuhal__list_empty(&batch) ? NULL : GPUHAL__CONTAINER_OF(batch.next, gpuhal__action_t, link);
      int covered = gpuhal__completion_batch_covers(&known, a);
      int skip = covered && gpuhal__completion_may_skip_advance(&known, a, next);
      gpuhal__action_observe(state, a, covered, skip, &done, &done_count);
      gpuhal__atomic_sub(&state->in_flight_count, 1);
      if (!skip && done_count >= GPUHAL__RETIRE_BATCH) gpuhal__completion_retire_done(state, &done, &done_count);
    }
    gpuhal__completion_retire_done(state, &done, &done_count);
    last_work_ns = gpuhal_now_ns();
  }
  if (!status) gpuhal__context_leave(state->device, &scope);
  return NULL;
}

static void* gpuhal__host_call_main(void* arg) {
  gpuhal__queue_state_t* state = (gpuhal__queue_state_t*)arg;
  for (;;) {
    gpuhal__action_t* a;
    gpuhal_status_t status;
    gpuhal__mutex_lock(&state->mutex);
    while (gpuhal__list_empty(&state->host_calls) && !state->threads_stop)
      gpuhal__cond_wait(&state->host_call_cond, &state->mutex);
    if (gpuhal__list_empty(&state->host_calls)) {
      gpuhal__mutex_unlock(&state->mutex);
      break;
    }
    a = GPUHAL__CONTAINER_OF(gpuhal__list_pop_front(&state->host_calls), gpuhal__action_t, link);
    gpuhal__mutex_unlock(&state->mutex);
    {
      int64_t trace_t0 = 0; /* trace hook: the host function's span */
      GPUHAL__TRACE(state->device, trace_t0 = gpuhal_now_ns());
      status = a->host_fn(a->host_user);
      GPUHAL__TRACE(state->device, gpuhal__trace_host_call(state->device, a, trace_t0));
    }
    if (status) {
      gpuhal__action_fail(a, gpuhal_status_annotate(status, "in the function of gpuhal_queue_host_call (device %d, queue %u)",
                                                    state->device->ordinal, a->queue_index));
    } else {
      gpuhal__action_succeed(a);
    }
    gpuhal__action_retire(a);
  }
  return NULL;
}

/* ---- harvesting: a busy submitter retires completed work itself ----
 * While a thread keeps submitting on the fast path, it also takes the oldest issued actions
 * whose work has completed off the completion thread's list and retires them on the spot:
 * advances their values, drops their references and returns them to the pool. Everything
 * an action touches (the action, its semaphores' locks and counts, its event, a command
 * buffer's execute record) then stays in the submitting thread's cache instead of moving
 * through the completion thread and the worker on every operation, and the completion
 * thread's cuEventQuery calls no longer compete with the submitter's own calls for the
 * driver. One cuEventQuery covers every older action of the same stream (as in the
 * completion thread's batches); a look that finds nothing complete backs off (doubling,
 * GPUHAL_HARVEST_MAX_BACKOFF), so long-running work costs the submitter almost nothing.
 * The completion thread still takes whatever ages past GPUHAL_COMPLETION_MIN_AGE_NS (work
 * nobody harvested), host calls (the host-call thread runs them) and anything that failed.
 * Releasing here is safe: no queue lock is held, and every release that makes CUDA calls
 * enters the device's context itself (or asks the worker). Off while tracing (the trace's
 * GPU timing is the completion thread's). GPUHAL_HARVEST_MIN 0 turns harvesting off. */
#ifndef GPUHAL_HARVEST_MIN
#define GPUHAL_HARVEST_MIN 48 /* issued actions old enough to look at before one looks */
#endif
#ifndef GPUHAL_HARVEST_AGE_NS
#define GPUHAL_HARVEST_AGE_NS 10000 /* how long an action is issued before it is worth a query */
#endif
#ifndef GPUHAL_HARVEST_MAX_WAIT_NS
#define GPUHAL_HARVEST_MAX_WAIT_NS 80000 /* fewer than GPUHAL_HARVEST_MIN: look once the oldest is this old */
#endif
#ifndef GPUHAL_HARVEST_MAX_BACKOFF
#define GPUHAL_HARVEST_MAX_BACKOFF 256 /* fast-path submissions skipped at most after a fruitless look */
#endif
#define GPUHAL__HARVEST_SLOTS 4 /* queues probed per look */
#define GPUHAL__HARVEST_MAX_RUN 512 /* actions looked at per look: bounds the time under the state's lock */

typedef struct gpuhal__harvest_probe_s {
  uint32_t queue_index;
  uint64_t seq;           /* the newest action of the queue old enough to look at */
  gpuhal__event_t* event; /* its event, retained */
  int complete;
} gpuhal__harvest_probe_t;

/* Under the state's mutex: one probe per queue among the contiguous run of old-enough
 * actions at the front of in_flight (host calls end it), when that run is worth a query:
 * GPUHAL_HARVEST_MIN long, or its oldest has waited GPUHAL_HARVEST_MAX_WAIT_NS. Returns the
 * number of probes (their events retained). */
static uint32_t gpuhal__harvest_pick(gpuhal__queue_state_t* state, gpuhal__harvest_probe_t* probes) {
  int64_t now = gpuhal_now_ns(), cutoff = now - GPUHAL_HARVEST_AGE_NS;
  int64_t oldest = gpuhal__list_empty(&state->in_flight)
                       ? now
                       : GPUHAL__CONTAINER_OF(state->in_flight.next, gpuhal__action_t, link)->dispatch_ns;
  uint32_t run = 0, count = 0, k;
  gpuhal__list_node_t* n;
  for (n = state->in_flight.next; n != &state->in_flight; n = n->next) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    if (a->dispatch_ns > cutoff || a->host_fn || run == GPUHAL__HARVEST_MAX_RUN) break;
    for (k = 0; k < count && probes[k].queue_index != a->queue_index; ++k) {
    }
    if (k == count) {
      if (count == GPUHAL__HARVEST_SLOTS) break;
      probes[count++].queue_index = a->queue_index;
    }
    probes[k].seq = a->seq;
    probes[k].event = a->event;
    run++;
  }
  gpuhal__atomic_store(&state->harvest_due_ns, oldest + GPUHAL_HARVEST_MAX_WAIT_NS);
  if (run < (uint32_t)GPUHAL_HARVEST_MIN && (run == 0 || now - oldest < GPUHAL_HARVEST_MAX_WAIT_NS)) return 0;
  for (k = 0; k < count; ++k) {
    gpuhal__event_retain(probes[k].event);
    probes[k].complete = 0;
  }
  return count;
}

/* Under the state's mutex: moves the front actions that the completed probes cover to
 * `taken` (stopping at the first that is not covered: completion stays in issue order) and
 * returns how many. */
static uint32_t gpuhal__harvest_take(gpuhal__queue_state_t* state, const gpuhal__harvest_probe_t* probes,
                                     uint32_t count, gpuhal__list_node_t* taken) {
  uint32_t n = 0;
  while (!gpuhal__list_empty(&state->in_flight)) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(state->in_flight.next, gpuhal__action_t, link);
    uint32_t k;
    for (k = 0; k < count && probes[k].queue_index != a->queue_index; ++k) {
    }
    /* Taken by the completion thread since, and reused, means a newer seq: not covered. */
    if (k == count || !probes[k].complete || a->seq > probes[k].seq || a->host_fn) break;
    gpuhal__list_remove(&a->link);
    gpuhal__list_push_back(taken, &a->link);
    gpuhal__atomic_sub(&state->in_flight_count, 1);
    n++;
  }
  if (n) state->last_harvest_ns = gpuhal_now_ns();
  return n;
}

/* Queries the probes; 1 when at least one completed. Releases their events. */
static int gpuhal__harvest_query(gpuhal__harvest_probe_t* probes, uint32_t count) {
  uint32_t k;
  int any = 0;
  for (k = 0; k < count; ++k) {
    /* Errors and unfinished work alike are left to the completion thread. */
    probes[k].complete = gpuhal__event_query(probes[k].event) == 0;
    any |= probes[k].complete;
    gpuhal__event_release(probes[k].event);
    probes[k].event = NULL;
  }
  return any;
}

/* After a fast-path issue (at `now`, 0 if unknown), on the submitting thread, with no
 * queue lock held. */
static void gpuhal__queue_harvest(gpuhal__queue_state_t* state, int64_t now) {
  gpuhal__harvest_probe_t probes[GPUHAL__HARVEST_SLOTS];
  gpuhal__list_node_t taken;
  gpuhal__list_node_t* n;
  uint32_t count, in_flight = gpuhal__atomic_load(&state->in_flight_count);
  int32_t expected = 0;
  if (GPUHAL_HARVEST_MIN <= 0 || in_flight == 0 || state->device->trace) return;
  if (in_flight < (uint32_t)GPUHAL_HARVEST_MIN &&
      (now ? now : gpuhal_now_ns()) < gpuhal__atomic_load(&state->harvest_due_ns))
    return;
  if (gpuhal__atomic_load(&state->harvest_skip) > 0) {
    gpuhal__atomic_sub(&state->harvest_skip, 1);
    return;
  }
  if (!gpuhal__atomic_cas(&state->harvesting, &expected, 1)) return;
  gpuhal__mutex_lock(&state->mutex);
  count = gpuhal__harvest_pick(state, probes);
  gpuhal__mutex_unlock(&state->mutex);
  if (count) {
    __atomic_add_fetch(&state->harvest_looks, 1, __ATOMIC_RELAXED);
    if (gpuhal__harvest_query(probes, count)) {
      state->harvest_backoff = 0;
    } else {
      /* Nothing done yet: the GPU is behind. Look less often until it catches up. */
      int32_t backoff = state->harvest_backoff < 4 ? 4 : state->harvest_backoff * 2;
      if (backoff > GPUHAL_HARVEST_MAX_BACKOFF) backoff = GPUHAL_HARVEST_MAX_BACKOFF;
      state->harvest_backoff = backoff;
      gpuhal__atomic_store(&state->harvest_skip, backoff);
      __atomic_add_fetch(&state->harvest_misses, 1, __ATOMIC_RELAXED);
      count = 0;
    }
  }
  gpuhal__list_init(&taken);
  if (count) {
    uint32_t n_taken;
    gpuhal__mutex_lock(&state->mutex);
    n_taken = gpuhal__harvest_take(state, probes, count, &taken);
    gpuhal__mutex_unlock(&state->mutex);
    __atomic_add_fetch(&state->harvested, n_taken, __ATOMIC_RELAXED);
  }
  gpuhal__atomic_store(&state->harvesting, 0);
  for (n = taken.next; n != &taken; n = n->next) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    gpuhal__action_t* next = n->next == &taken ? NULL : GPUHAL__CONTAINER_OF(n->next, gpuhal__action_t, link);
    gpuhal__action_complete_ok(a, gpuhal__actions_share_signal(a, next));
  }
  gpuhal__actions_release(state, &taken);
}

/* ---- submission ---- */

/* The fast path: when nothing is queued ahead and no one else is issuing, the submitting
 * thread resolves and issues the action itself inside a push/pop of the device's context,
 * saving the worker's wake-up. The caller holds issue_mutex (taken with a trylock before
 * the action was acquired, so that "nothing queued ahead" is checked in the same critical
 * section of state->mutex as the acquisition) and releases it after. Returns when the
 * action was handed to the completion side (0: not issued here). */
static int64_t gpuhal__queue_issue_here(gpuhal__queue_state_t* state, gpuhal__action_t* a) {
  gpuhal__context_scope_t scope;
  gpuhal_status_t failure = NULL;
  gpuhal__resolve_t r;
  int64_t dispatched = 0;
  GPUHAL__QP_START(qp);
  a->wake = 0;
  r = gpuhal__action_resolve(a, &failure);
  GPUHAL__QP_MARK(qp, GPUHAL__QP_RESOLVE);
  if (r == GPUHAL__RESOLVE_BLOCKED) {
    /* Registered on the semaphore it waits for; its change kicks the pump. */
    gpuhal__list_push_back(&state->pending, &a->link);
  } else if (r == GPUHAL__RESOLVE_FAILED) {
    gpuhal__action_fail(a, failure);
    gpuhal__action_retire(a);
  } else if ((failure = gpuhal__context_enter(state->device, &scope)) != NULL) {
    gpuhal_status_free(failure); /* the worker will do it */
    a->wake = 1;
    gpuhal__list_push_back(&state->pending, &a->link);
    gpuhal__queue_kick_issue(state);
  } else {
    GPUHAL__QP_MARK(qp, GPUHAL__QP_CONTEXT);
    dispatched = gpuhal__action_dispatch(state, a);
    GPUHAL__QP_RESTART(qp);
    gpuhal__context_leave(state->device, &scope);
    GPUHAL__QP_MARK(qp, GPUHAL__QP_LEAVE);
  }
  return dispatched;
}

static gpuhal_status_t gpuhal__queue_validate_list(const char* func, const char* arg, gpuhal_driver_t* driver,
                                                   gpuhal_semaphore_list_t list) {
  uint32_t i;
  if (list.count == 0) return NULL;
  if (!list.semaphores || !list.values)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument '%s' has count %u but NULL semaphores or values", func, arg, list.count);
  for (i = 0; i < list.count; ++i) {
    gpuhal_semaphore_t* s = list.semaphores[i];
    gpuhal_status_t bad = gpuhal__object_check(s, GPUHAL__MAGIC_SEMAPHORE, func, arg);
    if (bad) return gpuhal_status_annotate(bad, "at index %u", i);
    if (s->driver != driver)
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "%s: argument '%s' entry %u is a semaphore of another driver than the device's",
                                func, arg, i);
  }
  return NULL;
}

/* The common argument checks of every queue operation; names `func` in messages. */
static gpuhal_status_t gpuhal__queue_validate(const char* func, gpuhal_device_t* device, uint32_t queue_index,
                                              gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal) {
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_check(device, GPUHAL__MAGIC_DEVICE, func, "device"));
  if (queue_index >= device->queue_count)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE, "%s: argument 'queue' (%u) must be below the device's queue count (%u)",
                              func, queue_index, device->queue_count);
  GPUHAL__RETURN_IF_ERROR(gpuhal__queue_validate_list(func, "wait", device->driver, wait));
  GPUHAL__RETURN_IF_ERROR(gpuhal__queue_validate_list(func, "signal", device->driver, signal));
  if (!gpuhal__queue_state(device))
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION, "%s: the device has no queues", func);
  return NULL;
}

/* The fast path's acquisition, with issue_mutex held and without the state's mutex (which
 * the worker and the completion thread also take): 1 with `*out` reserved and counted when
 * nothing is queued ahead for the worker, the device is healthy and not being released;
 * 0 sends the caller to the locked path (which also grows the pool and reports errors).
 * Free actions come from issue_free, refilled from the free list in batches under one lock. */
static int gpuhal__action_acquire_issuing(gpuhal__queue_state_t* state, uint32_t waits, uint32_t signals,
                                          gpuhal__action_t** out) {
  gpuhal__action_t* a;
  gpuhal_status_t status;
  if (gpuhal__atomic_load(&state->stopping) || gpuhal__atomic_load(&state->incoming_count) ||
      gpuhal__atomic_load(&state->lost_flag))
    return 0;
  if (!state->issue_free) {
    /* A bounded batch: the locked path must not find the free list empty (and grow the
     * pool) just because the fast path holds every free action. */
    uint32_t taken = 0;
    gpuhal__mutex_lock(&state->mutex);
    while (state->free_actions && taken < GPUHAL__ACTION_ISSUE_BATCH) {
      gpuhal__action_t* f = state->free_actions;
      state->free_actions = f->next_free;
      f->next_free = state->issue_free;
      state->issue_free = f;
      taken++;
    }
    gpuhal__mutex_unlock(&state->mutex);
    if (!state->issue_free) return 0;
  }
  a = state->issue_free;
  status = gpuhal__action_reserve(state, a, waits, signals);
  if (status) {
    gpuhal_status_free(status); /* the locked path tries again and reports it */
    return 0;
  }
  state->issue_free = a->next_free;
  a->next_free = NULL;
  __atomic_add_fetch(&state->outstanding, 1, __ATOMIC_ACQ_REL);
  *out = a;
  return 1;
}

/* The general acquisition, under the state's mutex: reserves and counts `*out`; *out_idle
 * tells whether a caller holding issue_mutex (`issuing`) may issue it here (nothing queued
 * ahead for the worker: issuing here keeps submission order). */
static gpuhal_status_t gpuhal__action_acquire_locked_path(gpuhal__queue_state_t* state, const char* func,
                                                          uint32_t waits, uint32_t signals, int issuing,
                                                          gpuhal__action_t** out, int* out_idle) {
  gpuhal__action_t* a = NULL;
  gpuhal_status_t status;
  gpuhal__mutex_lock(&state->mutex);
  if (gpuhal__atomic_load(&state->stopping)) {
    gpuhal__mutex_unlock(&state->mutex);
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION, "%s: the device is being released", func);
  }
  status = gpuhal__action_acquire_locked(state, &a);
  if (!status) {
    status = gpuhal__action_reserve(state, a, waits, signals);
    if (status) {
      a->next_free = state->free_actions;
      state->free_actions = a;
    }
  }
  if (!status) {
    __atomic_add_fetch(&state->outstanding, 1, __ATOMIC_ACQ_REL);
    *out_idle = issuing && gpuhal__list_empty(&state->incoming) && !state->lost;
    *out = a;
  }
  gpuhal__mutex_unlock(&state->mutex);
  return status;
}

static gpuhal_status_t gpuhal__queue_submit_impl(const char* func, gpuhal_device_t* device, uint32_t queue_index,
                                                 gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal,
                                                 const gpuhal__action_ops_t* ops, void* user,
                                                 gpuhal_host_fn_t host_fn, void* host_user, unsigned flags) {
  gpuhal__queue_state_t* state;
  gpuhal__action_t* a = NULL;
  gpuhal_status_t status;
  uint32_t i;
  int issuing = 0, idle = 0;
  int64_t dispatched = 0;
  uint64_t trace_span = 0; /* trace hook: the submit's host span */
  int64_t trace_t0 = 0;
  GPUHAL__QP_START(qp);
  if (!(flags & GPUHAL__SUBMIT_VALIDATED))
    GPUHAL__RETURN_IF_ERROR(gpuhal__queue_validate(func, device, queue_index, wait, signal));
  if (!ops || !ops->name)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: internal: action ops must be given", func);
  state = gpuhal__queue_state(device);
  GPUHAL__QP_MARK(qp, GPUHAL__QP_VALIDATE);
  /* The fast path needs the issue lock; without it (someone else is issuing) the worker
   * issues. Lock order: issue_mutex, then mutex (as in the pump). */
  if (flags & GPUHAL__SUBMIT_CALLER_MAY_ISSUE) issuing = pthread_mutex_trylock(&state->issue_mutex) == 0;
  if (issuing && gpuhal__action_acquire_issuing(state, wait.count, signal.count, &a)) {
    idle = 1;
  } else {
    status = gpuhal__action_acquire_locked_path(state, func, wait.count, signal.count, issuing, &a, &idle);
    if (status) {
      if (issuing) gpuhal__mutex_unlock(&state->issue_mutex);
      return status;
    }
  }
  GPUHAL__QP_MARK(qp, GPUHAL__QP_ACQUIRE);

  gpuhal__list_init(&a->link);
  a->state = state;
  a->queue_index = queue_index;
  a->ops = ops;
  a->user = user;
  a->host_fn = host_fn;
  a->host_user = host_user;
  a->wait_count = wait.count;
  a->signal_count = signal.count;
  a->next_wait = 0;
  a->wake = 1;
  a->event = NULL;
  a->failure = NULL;
  a->trace = NULL;
  for (i = 0; i < wait.count; ++i) {
    gpuhal__action_wait_t* w = &a->waits[i];
    gpuhal__semaphore_waiter_init(&w->waiter);
    w->waiter.wants_submitted = 1;
    w->waiter.notify = gpuhal__action_wait_notify;
    w->waiter.user = a;
    w->semaphore = wait.semaphores[i];
    w->value = wait.values[i];
    w->event = NULL;
  }
  for (i = 0; i < signal.count; ++i) {
    gpuhal__timepoint_t* tp = &a->signals[i];
    gpuhal__list_init(&tp->link);
    tp->semaphore = signal.semaphores[i];
    tp->value = signal.values[i];
    tp->event = NULL;
  }
  gpuhal__action_retain_semaphores(a);
  GPUHAL__TRACE(device, (trace_t0 = gpuhal_now_ns(), trace_span = gpuhal__trace_submit_begin(device, a, wait, signal)));
  /* From here `a` may complete and be reused at any time: the trace keeps only its span id. */
  GPUHAL__QP_MARK(qp, GPUHAL__QP_INIT);
  if (issuing && idle) dispatched = gpuhal__queue_issue_here(state, a);
  if (issuing) gpuhal__mutex_unlock(&state->issue_mutex);
  if (issuing && idle) {
    GPUHAL__QP_MARK(qp, GPUHAL__QP_ISSUE_HERE);
    gpuhal__queue_harvest(state, dispatched);
    GPUHAL__QP_MARK(qp, GPUHAL__QP_HARVEST);
  }
  if (!idle) {
    gpuhal__mutex_lock(&state->mutex);
    gpuhal__list_push_back(&state->incoming, &a->link);
    gpuhal__atomic_add(&state->incoming_count, 1u);
    gpuhal__mutex_unlock(&state->mutex);
    gpuhal__queue_kick_issue(state);
  }
  if (trace_span) GPUHAL__TRACE(device, gpuhal__trace_submit_end(device, queue_index, ops->name, trace_span, trace_t0));
  return NULL;
}

/* See the queue <-> command-buffer contract. */
static gpuhal_status_t gpuhal__queue_submit(gpuhal_device_t* device, uint32_t queue_index, gpuhal_semaphore_list_t wait,
                                            gpuhal_semaphore_list_t signal, const gpuhal__action_ops_t* ops,
                                            void* user) {
  return gpuhal__queue_submit_impl(ops && ops->name ? ops->name : "gpuhal__queue_submit", device, queue_index, wait,
                                   signal, ops, user, NULL, NULL, 0);
}

/* gpuhal__queue_submit with GPUHAL__SUBMIT_* flags. */
static gpuhal_status_t gpuhal__queue_submit_ex(gpuhal_device_t* device, uint32_t queue_index,
                                               gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal,
                                               const gpuhal__action_ops_t* ops, void* user, unsigned flags) {
  return gpuhal__queue_submit_impl(ops && ops->name ? ops->name : "gpuhal__queue_submit", device, queue_index, wait,
                                   signal, ops, user, NULL, NULL, flags);
}

/* ---- host calls ---- */
static const gpuhal__action_ops_t gpuhal__host_call_ops = {"host_call", NULL, NULL, NULL};

GPUHAL_API gpuhal_status_t gpuhal_queue_host_call(gpuhal_device_t* device, uint32_t queue,
                                                  gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal,
                                                  gpuhal_host_fn_t fn, void* user) {
  GPUHAL__CHECK_ARG(fn != NULL, "fn", "must not be NULL");
  return gpuhal__queue_submit_impl(__func__, device, queue, wait, signal, &gpuhal__host_call_ops, NULL, fn, user,
                                   GPUHAL__SUBMIT_CALLER_MAY_ISSUE);
}

#ifdef GPUHAL__HAVE_MEMORY
/* ---- alloca / dealloca ---- */
/* The address is assigned here, on the worker, when the allocation is issued; command
 * buffers that name the buffer resolve it when they are issued after this. */
static gpuhal_status_t gpuhal__alloca_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  gpuhal_buffer_t* buffer = (gpuhal_buffer_t*)user;
  CUdeviceptr address = 0;
  GPUHAL__RETURN_IF_ERROR(gpuhal__pool_alloc_current(device, stream, buffer->size, &address));
  buffer->address = address;
  gpuhal__atomic_store(&buffer->state, (int32_t)GPUHAL__BUFFER_LIVE);
  return NULL;
}
static gpuhal_status_t gpuhal__dealloca_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  gpuhal_buffer_t* buffer = (gpuhal_buffer_t*)user;
  if (gpuhal__atomic_load(&buffer->state) != GPUHAL__BUFFER_LIVE)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_queue_dealloca: the buffer has no memory to free: its gpuhal_queue_alloca "
                              "failed or was not ordered before the dealloca (wait on the alloca's signal)");
  GPUHAL__RETURN_IF_ERROR(gpuhal__pool_free_current(device, stream, buffer->address));
  gpuhal__atomic_store(&buffer->state, (int32_t)GPUHAL__BUFFER_FREED);
  return NULL;
}
static void gpuhal__buffer_action_release(void* user, gpuhal_device_t* device) {
  GPUHAL__UNUSED(device);
  gpuhal__buffer_release_ref((gpuhal_buffer_t*)user);
}
/* With a pool, allocation and free are stream-ordered calls that never block, so the
 * submitting thread may issue them; the synchronous fallback stays on the worker. */
static const gpuhal__action_ops_t gpuhal__alloca_ops = {"alloca", gpuhal__alloca_issue, NULL,
                                                        gpuhal__buffer_action_release};
static const gpuhal__action_ops_t gpuhal__dealloca_ops = {"dealloca", gpuhal__dealloca_issue, NULL,
                                                          gpuhal__buffer_action_release};
static unsigned gpuhal__pool_submit_flags(gpuhal_device_t* device) {
  unsigned flags = GPUHAL__SUBMIT_VALIDATED; /* by gpuhal_queue_alloca / _dealloca */
  if (device->memory && device->memory->pool) flags |= GPUHAL__SUBMIT_CALLER_MAY_ISSUE;
  return flags;
}

GPUHAL_API gpuhal_status_t gpuhal_queue_alloca(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                               gpuhal_semaphore_list_t signal, uint64_t size,
                                               gpuhal_buffer_t** out_buffer) {
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_status_t status;
  GPUHAL__CHECK_ARG(out_buffer != NULL, "out_buffer", "must not be NULL");
  *out_buffer = NULL;
  GPUHAL__CHECK_ARG(size > 0, "size", "must be > 0");
  GPUHAL__QP_START(qp);
  GPUHAL__RETURN_IF_ERROR(gpuhal__queue_validate(__func__, device, queue, wait, signal));
  GPUHAL__CHECK_RANGE(size <= device->info.total_memory, "size", "must not exceed the device's total memory");
  GPUHAL__RETURN_IF_ERROR(gpuhal__buffer_create_pending(device, size, &buffer));
  GPUHAL__QP_MARK(qp, GPUHAL__QP_BUFFER);
  gpuhal__buffer_retain_ref(buffer); /* the action's reference */
  status = gpuhal__queue_submit_impl(__func__, device, queue, wait, signal, &gpuhal__alloca_ops, buffer, NULL, NULL,
                                     gpuhal__pool_submit_flags(device));
  if (status) {
    gpuhal__buffer_release_ref(buffer);
    gpuhal_buffer_release(buffer);
    return status;
  }
  *out_buffer = buffer;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_queue_dealloca(gpuhal_device_t* device, uint32_t queue,
                                                 gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal,
                                                 gpuhal_buffer_t* buffer) {
  gpuhal_status_t status;
  GPUHAL__CHECK_OBJECT(buffer, GPUHAL__MAGIC_BUFFER);
  GPUHAL__RETURN_IF_ERROR(gpuhal__queue_validate(__func__, device, queue, wait, signal));
  if (buffer->device != device)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_queue_dealloca: argument 'buffer' belongs to another device");
  if (!buffer->pending)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_queue_dealloca: argument 'buffer' must come from gpuhal_queue_alloca");
  {
    /* One dealloca per buffer: the queue's per-buffer word records that it was submitted. */
    void* expected = NULL;
    if (!__atomic_compare_exchange_n(&buffer->queue_data, &expected, (void*)buffer, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                                "gpuhal_queue_dealloca: argument 'buffer' already has a dealloca queued");
  }
  gpuhal__buffer_retain_ref(buffer);
  status = gpuhal__queue_submit_impl(__func__, device, queue, wait, signal, &gpuhal__dealloca_ops, buffer, NULL, NULL,
                                     gpuhal__pool_submit_flags(device));
  if (status) {
    gpuhal__atomic_store(&buffer->queue_data, (void*)NULL);
    gpuhal__buffer_release_ref(buffer);
  }
  return status;
}

#endif /* GPUHAL__HAVE_MEMORY */

/* ---- idle, loss ---- */
/* Waits, up to `timeout`, until every action that is not blocked on a semaphore has been
 * released: issued work finished and the references it held dropped. For the application's
 * gpuhal_driver_release (device.h); actions still blocked are left for device release. */
static void gpuhal__queue_settle(gpuhal_device_t* device, gpuhal_timeout_t timeout) {
  gpuhal__queue_state_t* state = gpuhal__queue_state(device);
  if (!state) return;
  for (;;) {
    uint64_t outstanding, blocked = 0;
    gpuhal__list_node_t* n;
    gpuhal__mutex_lock(&state->issue_mutex);
    for (n = state->pending.next; n != &state->pending; n = n->next) ++blocked;
    gpuhal__mutex_unlock(&state->issue_mutex);
    gpuhal__mutex_lock(&state->mutex);
    outstanding = __atomic_load_n(&state->outstanding, __ATOMIC_ACQUIRE);
    gpuhal__mutex_unlock(&state->mutex);
    if (outstanding <= blocked || gpuhal__timeout_expired(timeout)) return;
    gpuhal__sleep_ns(50000);
  }
}

GPUHAL_API gpuhal_status_t gpuhal_device_wait_idle(gpuhal_device_t* device, gpuhal_timeout_t timeout) {
  gpuhal__queue_state_t* state;
  gpuhal_status_t result = NULL;
  GPUHAL__CHECK_OBJECT(device, GPUHAL__MAGIC_DEVICE);
  state = gpuhal__queue_state(device);
  if (!state) return NULL;
  gpuhal__mutex_lock(&state->mutex);
  state->idle_waiters++;
  if (state->completion_napping) gpuhal__cond_signal(&state->completion_cond); /* stop aging the work */
  while (__atomic_load_n(&state->outstanding, __ATOMIC_ACQUIRE) > 0) {
    if (!gpuhal__cond_wait_until(&state->idle_cond, &state->mutex, timeout) &&
        __atomic_load_n(&state->outstanding, __ATOMIC_ACQUIRE) > 0) {
      result = gpuhal_status_make(GPUHAL_STATUS_DEADLINE_EXCEEDED,
                                  "gpuhal_device_wait_idle: %llu queue operations still outstanding when the timeout passed",
                                  (unsigned long long)__atomic_load_n(&state->outstanding, __ATOMIC_ACQUIRE));
      break;
    }
  }
  state->idle_waiters--;
  if (!result && state->lost) result = gpuhal_status_clone(state->lost);
  gpuhal__mutex_unlock(&state->mutex);
  return result;
}

GPUHAL_API gpuhal_status_t gpuhal_device_lost_status(gpuhal_device_t* device) {
  gpuhal__queue_state_t* state;
  GPUHAL__CHECK_OBJECT(device, GPUHAL__MAGIC_DEVICE);
  state = gpuhal__queue_state(device);
  return state ? gpuhal__queue_lost_clone(state) : NULL;
}

/* ---- the device hooks ---- */

static gpuhal_status_t gpuhal__queue_state_create(gpuhal_device_t* device) {
  gpuhal__queue_state_t* state = NULL;
  gpuhal_status_t status;
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__alloc_zeroed(device->allocator, sizeof(*state), "queue state", (void**)&state));
  state->device = device;
  gpuhal__mutex_init(&state->mutex);
  gpuhal__mutex_init(&state->issue_mutex);
  gpuhal__cond_init(&state->completion_cond);
  gpuhal__cond_init(&state->host_call_cond);
  gpuhal__cond_init(&state->idle_cond);
  gpuhal__list_init(&state->incoming);
  gpuhal__list_init(&state->in_flight);
  gpuhal__list_init(&state->host_calls);
  gpuhal__list_init(&state->retired);
  gpuhal__list_init(&state->pending);
  gpuhal__list_init(&state->pump_task.node);
  state->pump_task.fn = gpuhal__queue_pump_task;
  gpuhal__event_pool_init(&state->events, device, GPUHAL_QUEUE_EVENT_FLAGS);
  device->queue_state = state;
  status = gpuhal__thread_create(&state->completion_thread, gpuhal__completion_main, state, "gpuhal-complete");
  if (!status) {
    status = gpuhal__thread_create(&state->host_call_thread, gpuhal__host_call_main, state, "gpuhal-hostcall");
    if (status) {
      gpuhal__mutex_lock(&state->mutex);
      state->threads_stop = 1;
      gpuhal__cond_broadcast(&state->completion_cond);
      gpuhal__mutex_unlock(&state->mutex);
      gpuhal__thread_join(state->completion_thread);
    }
  }
  if (status) {
    device->queue_state = NULL;
    gpuhal__event_pool_deinit(&state->events);
    gpuhal__cond_destroy(&state->idle_cond);
    gpuhal__cond_destroy(&state->host_call_cond);
    gpuhal__cond_destroy(&state->completion_cond);
    gpuhal__mutex_destroy(&state->issue_mutex);
    gpuhal__mutex_destroy(&state->mutex);
    gpuhal__free(device->allocator, state);
    return status;
  }
  state->threads_started = 1;
  return NULL;
}

/* On the worker: fails what is still waiting for its semaphores (it would never run). */
static gpuhal_status_t gpuhal__queue_abort_pending(void* arg) {
  gpuhal__queue_state_t* state = (gpuhal__queue_state_t*)arg;
  gpuhal__list_node_t* n;
  gpuhal__mutex_lock(&state->issue_mutex);
  gpuhal__mutex_lock(&state->mutex);
  gpuhal__list_splice_back(&state->pending, &state->incoming);
  gpuhal__atomic_store(&state->incoming_count, 0u);
  gpuhal__mutex_unlock(&state->mutex);
  /* Whatever can run now still runs; the rest is aborted. */
  while (gpuhal__queue_pump_pass(state) > 0) {
  }
  while ((n = gpuhal__list_pop_front(&state->pending)) != NULL) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    gpuhal__action_fail(a, gpuhal_status_make(GPUHAL_STATUS_ABORTED,
                                              "queue '%s' (device %d, queue %u) was aborted: the device was released "
                                              "while it still waited for its semaphores",
                                              a->ops->name, state->device->ordinal, a->queue_index));
    gpuhal__action_retire(a);
  }
  gpuhal__mutex_unlock(&state->issue_mutex);
  return NULL;
}

static gpuhal_status_t gpuhal__queue_finish_destroy(void* arg) {
  gpuhal__queue_state_t* state = (gpuhal__queue_state_t*)arg;
  gpuhal__queue_pump(state); /* releases the last retired actions */
  gpuhal__event_pool_deinit(&state->events);
  return NULL;
}

/* Device release: finishes issued work, fails work that never became ready, joins the
 * threads, frees everything. Called by device.h with the worker still running. */
static void gpuhal__queue_state_destroy(gpuhal_device_t* device) {
  gpuhal__queue_state_t* state = gpuhal__queue_state(device);
  gpuhal__action_block_t* block;
  if (!state) return;
  gpuhal__mutex_lock(&state->mutex);
  gpuhal__atomic_store(&state->stopping, 1);
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal_status_free(gpuhal__worker_call(device, gpuhal__queue_abort_pending, state));
  /* Issued work completes (or fails) on the completion and host-call threads and comes
   * back through the pump, which releases it. */
  gpuhal__mutex_lock(&state->mutex);
  while (__atomic_load_n(&state->outstanding, __ATOMIC_ACQUIRE) > 0) gpuhal__cond_wait(&state->idle_cond, &state->mutex);
  state->threads_stop = 1;
  gpuhal__cond_broadcast(&state->completion_cond);
  gpuhal__cond_broadcast(&state->host_call_cond);
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__thread_join(state->completion_thread);
  gpuhal__thread_join(state->host_call_thread);
  gpuhal_status_free(gpuhal__worker_call(device, gpuhal__queue_finish_destroy, state));
  block = state->action_blocks;
  while (block) {
    gpuhal__action_block_t* next = block->next;
    uint32_t i;
    for (i = 0; i < GPUHAL__ACTION_POOL_BLOCK; ++i) {
      gpuhal__free(device->allocator, block->actions[i].wait_storage);
      gpuhal__free(device->allocator, block->actions[i].signal_storage);
    }
    gpuhal__free(device->allocator, block);
    block = next;
  }
  gpuhal_status_free(state->lost);
  gpuhal__cond_destroy(&state->idle_cond);
  gpuhal__cond_destroy(&state->host_call_cond);
  gpuhal__cond_destroy(&state->completion_cond);
  gpuhal__mutex_destroy(&state->issue_mutex);
  gpuhal__mutex_destroy(&state->mutex);
  device->queue_state = NULL;
  gpuhal__free(device->allocator, state);
}
