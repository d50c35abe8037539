/* queue: the deferred issue queue (DESIGN §6).
 *
 * Every queue operation waits on a semaphore list and signals a semaphore list. A call
 * copies and retains what it needs, appends an action and returns: it never blocks on the
 * GPU and never waits for its semaphores on the calling thread.
 *
 * THE RULES (one page; CONTRIBUTING and docs keep to it)
 *
 * Threads of a device and the CUDA calls each may make:
 *  - a submitting thread (any application thread): with the issue lock and the device's
 *    context pushed, it issues an action whose waits are resolved when nothing is queued
 *    ahead ("fast path": stream waits, the work, cuEventRecord, value writes); it may also
 *    harvest (below): cuEventQuery, then releases (which enter the context themselves).
 *  - the worker (device.h; context current for life): the pump issues whatever became ready,
 *    in submission order, and releases retired actions. Every other context-dependent call
 *    of a subsystem runs here or in a push/pop of the device's context.
 *  - the completion thread: cuEventQuery (cuStreamQuery when a query keeps failing), never a
 *    blocking call. It observes each queue
 *    (lane) on its own: per lane in issue order, one query of the newest covering the older
 *    ones, never waiting on one lane while another has finished work.
 *  - the host-call thread: runs gpuhal_queue_host_call functions; no CUDA call.
 *  No CUDA call is made inside a CUDA callback (gpuhal never uses cuLaunchHostFunc). No
 *  gpuhal thread joins or waits for itself: a device teardown that would run on one of the
 *  device's own threads (a host function releasing the device) runs on a teardown thread.
 *
 * Who advances a semaphore's value: one function, gpuhal__semaphore_advance (and its twin
 * for an observed event, gpuhal__semaphore_advance_from_event), under the semaphore's lock,
 * stores the value (and, when armed, its device word) and wakes every waiter it satisfies.
 * It is called by whoever learns that the work reaching a value is done: the completion
 * thread, a harvesting submitter, a host waiter that saw the value's own event complete, the
 * host-call thread after a host function, or gpuhal_semaphore_signal. GPU work never changes
 * the value the host sees; it only writes the word other GPU work waits on.
 *
 * How a wait is resolved (the action's waits, in order): reached -> nothing; submitted on the
 * action's own stream -> nothing (stream order); submitted elsewhere -> cuStreamWaitEvent on
 * that value's event at issue (no event is held while the action is still blocked, so a
 * device's release never waits for another device's pending work); not submitted -> with
 * GPU-resident values (GPUHAL_FEATURE_SEMAPHORE_MEMOPS, opt-in), cuStreamWaitValue64 on the
 * semaphore's word and the action issues at once; otherwise the action waits on the host,
 * registered on the semaphore, until the value is submitted or reached. Work behind a value
 * wait, or behind such work ("provisional"), runs on a side stream of its own that first
 * follows its queue's stream: a queue's stream never waits for a value not submitted, so
 * nothing queued after such work waits for it unless it waits for its values. GPU work that
 * signals an armed semaphore writes the word before its event is recorded (whoever sees the
 * event complete, and may then store a higher value, comes after the write); a semaphore is
 * not armed while a signal of it is being issued. Such a wait never takes the event of
 * provisional work that signals a higher value (that work may wait for this very value).
 * At most tuning.gpu_parked_max side streams per ordinal (all gpuhal devices of it share
 * its context) are busy at once: CUDA shares a few hardware queues among a context's
 * streams, and past a few parked ones other streams' work stalls behind them; beyond the
 * bound, work waits on the host as on the event path. A queue's stream never waits on
 * provisional work's event. While any work may wait on the GPU, calls that wait for an idle
 * context (frees, module unloads) are put off driver-wide (gpuhal__device_sync_call);
 * gpuhal's own kernels load at device creation.
 *
 * Failure: a CUDA error fails the action's signal semaphores with the original error; an
 * action waiting on a failed semaphore fails with that cause in its message; a queue call
 * that fails after its arguments were accepted fails its signal semaphores; a sticky error
 * marks the device lost and every pending and later action fails fast with it. A failed
 * semaphore's word is set far above its value, which releases every GPU wait on it; work
 * that ran behind such a wait ("provisional") counts as done only once every value it
 * waited on is known reached on the host side, else it fails with the cause.
 *
 * Harvesting: a thread that keeps submitting on the fast path retires the completed head of
 * its queue's lane itself (one cuEventQuery per look, backing off while the GPU is behind),
 * so a busy steady state needs neither the completion thread nor the worker. The completion
 * thread leaves issued work alone for tuning.completion_min_age_ns (host calls, idle waits
 * and release cut that short): nothing's promptness depends on it. */

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
  /* With the device's context current, after every wait became a stream wait (or was
   * already complete): put the work on `stream`. An error fails the signals. */
  gpuhal_status_t (*issue)(void* user, gpuhal_device_t* device, CUstream stream);
  /* Optional. Once the work is complete (status NULL) or failed. No CUDA calls. Runs on the
   * completion thread, on a submitting thread that harvests the action, or on whichever
   * thread failed it before it was issued. */
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
   * (no worker wake-up in a round trip). Such an issue must not block and must not call
   * gpuhal__worker_call. */
  GPUHAL__SUBMIT_CALLER_MAY_ISSUE = 1u << 0,
  /* The caller already ran gpuhal__queue_validate on these arguments. */
  GPUHAL__SUBMIT_VALIDATED = 1u << 1,
  /* Never provisional: issued only once every waited value is reached or submitted by work
   * that is not provisional (no GPU value wait for it). For an issue that reads what the
   * issue of its producers set up (a queue_alloca's address), and for launches that CUDA
   * orders one after another whatever their streams (a reusable graph exec: a launch
   * issued ahead of one it depends on would wait for it forever). */
  GPUHAL__SUBMIT_NOT_PROVISIONAL = 1u << 2
};

/* Fixed constants of the machinery (the tunable ones are gpuhal_queue_tuning_t). */
#define GPUHAL__ACTION_INLINE_ENTRIES 4
#define GPUHAL__ACTION_POOL_BLOCK 32
#define GPUHAL__ACTION_ISSUE_BATCH 16     /* free actions the fast path takes per refill */
#define GPUHAL__RETIRE_BATCH 32           /* retired actions per wake-up of the worker */
#define GPUHAL__COMPLETION_FIRST_SLEEP_NS 2000 /* the completion thread's first sleep between polls */
#define GPUHAL__COMPLETION_NAP_NS 50000   /* its nap while work keeps coming, instead of a wake-up */
#define GPUHAL__COMPLETION_ACTIVE_NS 2000000 /* how long after work it keeps napping */
#define GPUHAL__HARVEST_AGE_NS 10000      /* an action is issued this long before a harvest queries it */
#define GPUHAL__HARVEST_MAX_WAIT_NS 80000 /* below harvest_min in flight: look once the oldest is this old */
#define GPUHAL__HARVEST_MAX_BACKOFF 256   /* fast-path submissions skipped at most after a fruitless look */
#define GPUHAL__HARVEST_MAX_RUN 512       /* actions looked at per look: bounds the time under the lock */

struct gpuhal__queue_state_s;

/* How one wait of an action was resolved. */
enum {
  GPUHAL__WAIT_UNRESOLVED = 0,
  GPUHAL__WAIT_NOTHING = 1, /* reached, or submitted on the action's own stream: no GPU wait */
  GPUHAL__WAIT_EVENT = 2,   /* submitted elsewhere: cuStreamWaitEvent on its event at issue */
  GPUHAL__WAIT_VALUE = 3,   /* not submitted (memops): cuStreamWaitValue64 on the word at issue */
  GPUHAL__WAIT_STREAM = 4   /* submitted on the queue's own stream: nothing there, an event wait
                               when the action goes to a side stream */
};

/* One wait of an action. */
typedef struct gpuhal__action_wait_s {
  gpuhal__semaphore_waiter_t waiter; /* registered while the action is blocked on this wait */
  gpuhal_semaphore_t* semaphore;     /* retained */
  uint64_t value;
  int kind;                /* GPUHAL__WAIT_* above */
  gpuhal__event_t* event;  /* EVENT: retained only between resolving and issuing at once */
  CUdeviceptr word;        /* VALUE: the semaphore's word */
} gpuhal__action_wait_t;

typedef struct gpuhal__action_s {
  gpuhal__list_node_t link; /* in exactly one list at a time */
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
  int value_waits;    /* some wait is GPUHAL__WAIT_VALUE */
  int not_provisional; /* GPUHAL__SUBMIT_NOT_PROVISIONAL */
  int park_reserved;  /* holds one of its ordinal's parked streams (gpuhal__park_reserve) */
  int provisional;    /* it may run on a failed input: a value wait (a failure store releases
                         it), or a wait on provisional work; see gpuhal__action_inputs */
  uint32_t shared_signal_refs; /* bit i: signal i uses a wait's semaphore reference */
  gpuhal__action_wait_t* waits;
  gpuhal__timepoint_t* signals;
  CUstream stream; /* where it was issued: its queue's stream, or a side stream */
  int gpu_wait_counted; /* it adds to the device's count of GPU value waits in flight */
  /* What the completion side reads of every action comes first (fewer cache lines). */
  gpuhal__event_t* event; /* recorded after the work (one reference) */
  gpuhal_status_t failure;
  int64_t dispatch_ns; /* when it was issued */
  uint64_t seq;        /* issue order on the device */
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

/* One queue (stream) of the device: its issued actions in issue order. Progress is observed
 * per lane, so no queue waits for another's work. */
typedef struct gpuhal__queue_lane_s {
  gpuhal__list_node_t in_flight; /* issued, not taken by the completion thread or a harvest (mutex) */
  gpuhal__list_node_t observing; /* taken by the completion thread; only it touches this list */
  gpuhal__list_node_t deferred;  /* done on the GPU, inputs not known yet (completion thread only) */
  gpuhal__list_node_t side;      /* issued on side streams, not taken yet (mutex) */
  gpuhal__list_node_t side_observing; /* taken: each observed on its own (completion thread only) */
  CUevent side_tail;             /* recorded on the queue's stream for side work to follow (issue_mutex) */
  uint32_t count;                /* in_flight + observing (atomic) */
  uint32_t host_calls;           /* host calls in in_flight: taken at once (mutex) */
  int32_t harvesting;            /* a submitter is harvesting this lane (atomic; one at a time) */
  int32_t harvest_skip;          /* fast-path submissions left before the next look (atomic) */
  int32_t harvest_backoff;       /* what harvest_skip is set to after a fruitless look */
  int64_t harvest_due_ns;        /* when a look pays even with few actions in flight (atomic hint) */
  int64_t last_harvest_ns;       /* when a submitter last retired work of this lane (mutex) */
} gpuhal__queue_lane_t;

typedef struct gpuhal__queue_state_s {
  gpuhal_device_t* device;
  gpuhal_queue_tuning_t tuning; /* device->params.tuning with the defaults filled in */
  int memops;                   /* the driver keeps values in device-mapped words */
  gpuhal__mutex_t mutex;        /* guards the lists and counters below up to `pending` */
  gpuhal__mutex_t issue_mutex;  /* held by whoever issues: the pump, or a submitter's fast path */
  gpuhal__cond_t completion_cond;
  gpuhal__cond_t host_call_cond;
  gpuhal__cond_t idle_cond;
  gpuhal__queue_lane_t* lanes;    /* device->queue_count */
  gpuhal__list_node_t incoming;   /* submitted, not yet seen by the worker */
  gpuhal__list_node_t host_calls; /* host calls whose function is due */
  gpuhal__list_node_t retired;    /* done; release due on the worker */
  uint64_t outstanding;           /* submitted and not yet released (atomic; drops under mutex) */
  uint32_t incoming_count;        /* length of incoming (atomic; changes under mutex) */
  uint32_t in_flight_count;       /* issued and not yet observed, all lanes (atomic) */
  uint32_t retired_unkicked;      /* retired since the worker was last kicked */
  gpuhal_status_t lost;           /* the loss cause after a sticky error */
  int32_t lost_flag;              /* lost != NULL, readable without the mutex */
  int32_t issue_needed;           /* new submissions, woken or to-be-failed actions: the pump must look */
  int32_t stopping;               /* device release has begun: no new submissions (atomic) */
  int completion_sleeping;        /* the completion thread waits untimed: dispatch must wake it */
  int completion_napping;         /* it waits timed: only host calls and idle waiters wake it */
  uint32_t idle_waiters;          /* threads in gpuhal_device_wait_idle: no aging while there are any */
  int abandon_value_waits;        /* release: fail what GPU value waits still wait for */
  uint64_t dispatch_seq;          /* actions issued so far (under mutex) */
  uint64_t harvest_looks, harvest_misses, harvested; /* statistics (atomic): queries, fruitless ones, actions */
  int threads_stop;
  gpuhal__action_t* free_actions;
  gpuhal__action_block_t* action_blocks;
  /* Under issue_mutex. */
  gpuhal__list_node_t pending; /* waiting for their waits */
  gpuhal__action_t* issue_free; /* free actions taken in bulk by the fast path (see below) */
  gpuhal__task_t pump_task; /* posted whenever something changed; the worker dedups it */
  gpuhal__event_pool_t events;
  /* Side streams (memops): provisional work runs on one of its own, so that a GPU wait on
   * a value not submitted yet holds up nothing else of its queue. Under mutex; a stream is
   * free again once its work was seen complete. */
  CUstream* side_streams;
  CUstream* side_free;
  uint32_t side_count, side_free_count, side_capacity;
  gpuhal__thread_t completion_thread;
  gpuhal__thread_t host_call_thread;
  int threads_started;
} gpuhal__queue_state_t;

static gpuhal__queue_state_t* gpuhal__queue_state(gpuhal_device_t* device) {
  return (gpuhal__queue_state_t*)device->queue_state;
}

/* The device's tuning with every default filled in (zero fields take the defaults). */
static gpuhal_queue_tuning_t gpuhal__queue_tuning_resolve(const gpuhal_queue_tuning_t* in) {
  gpuhal_queue_tuning_t t = *in;
  if (t.host_wait_spin_ns == 0) t.host_wait_spin_ns = 200000;
  if (t.host_wait_spin_ns < 0) t.host_wait_spin_ns = 0;
  if (t.host_wait_max_sleep_ns <= 0) t.host_wait_max_sleep_ns = 1000000;
  if (t.completion_min_age_ns == 0) t.completion_min_age_ns = 100000;
  if (t.completion_min_age_ns < 0) t.completion_min_age_ns = 0;
  if (t.completion_max_sleep_ns <= 0) t.completion_max_sleep_ns = 200000;
  if (t.harvest_min == 0) t.harvest_min = 48;
  if (t.harvest_min < 0) t.harvest_min = 0; /* off */
  if (t.gpu_parked_max == 0) {
    const char* env = gpuhal__getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    long connections = env && env[0] ? strtol(env, NULL, 10) : 8;
    t.gpu_parked_max = (int32_t)(connections > 0 && connections <= 1024 ? connections / 4 : 2);
  }
  if (t.gpu_parked_max < 0) t.gpu_parked_max = 0; /* none */
  return t;
}

/* Reserves one of the streams of the device's ordinal that may park on the GPU (see
 * gpuhal_queue_tuning_t.gpu_parked_max): 0 when all are taken. The reservation becomes the
 * side stream's at issue, which gives it back once its work is seen complete. Devices of one
 * ordinal share its context, hence its hardware queues and the bound. */
static int gpuhal__park_reserve(gpuhal__queue_state_t* state) {
  gpuhal_device_t* device = state->device;
  int32_t* count;
  int32_t now;
  if (!state->memops || state->tuning.gpu_parked_max <= 0 || device->no_gpu_park || !device->driver->parked_streams)
    return 0;
  count = &device->driver->parked_streams[device->ordinal];
  now = gpuhal__atomic_load(count);
  while (now < state->tuning.gpu_parked_max)
    if (gpuhal__atomic_cas(count, &now, now + 1)) return 1;
  return 0;
}

static void gpuhal__park_release(gpuhal__queue_state_t* state, int32_t n) {
  if (n > 0) gpuhal__atomic_sub(&state->device->driver->parked_streams[state->device->ordinal], n);
}

/* 1 when the calling thread is one of the queue's own threads (device teardown must not
 * run there: it joins them). */
static int gpuhal__queue_owns_thread(gpuhal_device_t* device) {
  gpuhal__queue_state_t* state = gpuhal__queue_state(device);
  pthread_t self = pthread_self();
  return state && state->threads_started &&
         (pthread_equal(self, state->completion_thread) || pthread_equal(self, state->host_call_thread));
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

/* Room for `count` entries of `size` bytes: inline, or the action's grow-only storage. */
static gpuhal_status_t gpuhal__action_reserve_list(const gpuhal_allocator_t* allocator, uint32_t count, size_t size,
                                                   void* inline_storage, void** storage, uint32_t* capacity,
                                                   void** out, const char* what) {
  if (count <= GPUHAL__ACTION_INLINE_ENTRIES) {
    *out = inline_storage;
    return NULL;
  }
  if (count > *capacity) {
    size_t bytes = size * (size_t)count;
    void* grown = gpuhal__alloc(allocator, bytes);
    if (!grown) return gpuhal__status_oom(what, bytes);
    gpuhal__free(allocator, *storage);
    *storage = grown;
    *capacity = count;
  }
  *out = *storage;
  return NULL;
}

static gpuhal_status_t gpuhal__action_reserve(gpuhal__queue_state_t* state, gpuhal__action_t* a, uint32_t waits,
                                              uint32_t signals) {
  const gpuhal_allocator_t* allocator = state->device->allocator;
  void* waits_at = NULL;
  void* signals_at = NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__action_reserve_list(allocator, waits, sizeof(gpuhal__action_wait_t), a->inline_waits,
                                                      (void**)&a->wait_storage, &a->wait_capacity, &waits_at,
                                                      "queue action wait list"));
  GPUHAL__RETURN_IF_ERROR(gpuhal__action_reserve_list(allocator, signals, sizeof(gpuhal__timepoint_t),
                                                      a->inline_signals, (void**)&a->signal_storage,
                                                      &a->signal_capacity, &signals_at, "queue action signal list"));
  a->waits = (gpuhal__action_wait_t*)waits_at;
  a->signals = (gpuhal__timepoint_t*)signals_at;
  return NULL;
}

/* ---- failing and retiring ---- */

/* Hands a finished action to the worker for release. Any thread. */
static void gpuhal__action_retire(gpuhal__action_t* a) {
  gpuhal__queue_state_t* state = a->state;
  gpuhal__mutex_lock(&state->mutex);
  gpuhal__list_push_back(&state->retired, &a->link);
  state->retired_unkicked = 0;
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__queue_kick(state);
}

/* Fails every semaphore of `signal` with a clone of `cause` (annotated with `what`): so a
 * queue call that fails after its arguments were accepted tells whoever waits for its
 * signals, and work that would have signalled them fails them the same way. */
static void gpuhal__queue_fail_signals(gpuhal_semaphore_list_t signal, gpuhal_status_t cause, const char* what,
                                       int ordinal, uint32_t queue) {
  uint32_t i;
  for (i = 0; i < signal.count; ++i)
    gpuhal__semaphore_fail_owned(
        signal.semaphores[i],
        gpuhal_status_annotate(gpuhal_status_clone(cause),
                               "failing the semaphore that queue '%s' (device %d, queue %u) was to signal to %llu", what,
                               ordinal, queue, (unsigned long long)signal.values[i]));
}

/* Fails every signal of `a` with `cause` (owned; kept in the action) and tells its ops. */
static void gpuhal__action_fail(gpuhal__action_t* a, gpuhal_status_t cause) {
  uint32_t i;
  if (!cause) cause = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "queue action failed without a cause");
  for (i = 0; i < a->signal_count; ++i) {
    gpuhal__timepoint_t* tp = &a->signals[i];
    gpuhal_semaphore_list_t one = gpuhal_semaphore_list_one(&tp->semaphore, &tp->value);
    gpuhal__semaphore_remove_timepoint(tp);
    gpuhal__queue_fail_signals(one, cause, a->ops->name, a->state->device->ordinal, a->queue_index);
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

/* Drops the events that resolved waits hold (an action blocked on a later wait must hold no
 * other device's event: that device's release would wait for it). */
static void gpuhal__action_drop_wait_events(gpuhal__action_t* a) {
  uint32_t i;
  for (i = 0; i < a->wait_count; ++i) {
    gpuhal__event_release(a->waits[i].event);
    a->waits[i].event = NULL;
  }
}

/* Counts `a` (side work) in (1) or out (0) of the device's work that may wait on the GPU
 * for a value, which puts off frees that would wait for the whole device (memory.h). A
 * free that looked just before such work was enqueued still waits for it: a window of a
 * few instructions against the free's own CUDA call. */
static void gpuhal__action_gpu_wait_count(gpuhal__action_t* a, int in) {
  if (a->gpu_wait_counted == in) return;
  a->gpu_wait_counted = in;
#ifdef GPUHAL__HAVE_MEMORY
  gpuhal__memory_gpu_waits_add(a->state->device, in ? 1 : -1);
#endif
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
    gpuhal__semaphore_reassert_failure(a->signals[i].semaphore);
    if (!gpuhal__action_signal_ref_shared(a, i)) gpuhal__semaphore_release_ref(a->signals[i].semaphore);
  }
  gpuhal__action_drop_wait_events(a);
  for (i = 0; i < a->wait_count; ++i) {
    gpuhal__action_wait_t* w = &a->waits[i];
    /* Only an action that never issued can still be registered (on its blocking wait). */
    if (!a->event && i == a->next_wait) gpuhal__semaphore_unregister(w->semaphore, &w->waiter);
    gpuhal__semaphore_release_ref(w->semaphore);
  }
  gpuhal__action_gpu_wait_count(a, 0); /* an issue that failed */
  if (a->park_reserved) gpuhal__park_release(a->state, 1); /* never issued */
  a->park_reserved = 0;
  a->completed_ok = 0;
  a->value_waits = 0;
  a->provisional = 0;
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

static void gpuhal__list_splice_back(gpuhal__list_node_t* to, gpuhal__list_node_t* from) {
  if (gpuhal__list_empty(from)) return;
  from->next->prev = to->prev;
  to->prev->next = from->next;
  from->prev->next = to;
  to->prev = from->prev;
  gpuhal__list_init(from);
}

/* A failure of a wait of `a` on a failed semaphore: its cause, then who waited for what. */
static gpuhal_status_t gpuhal__action_wait_failure(const gpuhal__action_t* a, gpuhal_status_t cause_clone,
                                                  uint64_t value) {
  char who[96];
  snprintf(who, sizeof(who), "queue '%s' (device %d, queue %u)", a->ops->name, a->state->device->ordinal,
           a->queue_index);
  return gpuhal__semaphore_failure_for(cause_clone, who, value);
}

/* ---- resolving and issuing (the pump on the worker, or a submitter's fast path) ---- */

typedef enum gpuhal__resolve_e { GPUHAL__RESOLVE_READY, GPUHAL__RESOLVE_BLOCKED, GPUHAL__RESOLVE_FAILED } gpuhal__resolve_t;

/* A spare word for arming `s` (memops): a sentinel when it has one already, else a new one
 * (NULL when none could be had: the wait then blocks on the host as on the event path). */
static uint64_t gpuhal__arm_sentinel;
static uint64_t* gpuhal__action_spare_word(gpuhal__queue_state_t* state, gpuhal_semaphore_t* s) {
  uint64_t* word = NULL;
  gpuhal_status_t status;
  if (!state->memops) return NULL;
  if (gpuhal__atomic_load(&s->word)) return &gpuhal__arm_sentinel;
  status = gpuhal__word_acquire(state->device->driver, state->device, &word);
  if (status) {
    gpuhal__log(state->device->logger, GPUHAL_LOG_WARN, "device %d: no semaphore word (%s); waiting on the host",
                state->device->ordinal, gpuhal_status_message(status));
    gpuhal_status_free(status);
    return NULL;
  }
  return word;
}

/* Resolves the waits in order; stops at the first one that can be neither skipped, turned
 * into an event wait nor (memops) a value wait, registering on its semaphore so that its
 * change kicks the pump. With `take_events` (the action will be issued right away if
 * ready) event waits keep their event; on BLOCKED every event is dropped again. */
static gpuhal__resolve_t gpuhal__action_resolve_waits(gpuhal__action_t* a, int take_events, gpuhal_status_t* out_failure) {
  gpuhal__queue_state_t* state = a->state;
  CUstream stream = state->device->streams[a->queue_index];
  int may_park = -1, park; /* may_park: asked once, when a wait first could go to the GPU */
  while (a->next_wait < a->wait_count) {
    gpuhal__action_wait_t* w = &a->waits[a->next_wait];
    gpuhal__wait_query_t q;
    gpuhal__wait_state_t st;
    /* A value submitted on this action's own stream needs no wait: stream order has it
     * (told without the semaphore's lock when the newest submitted value covers it). */
    if (gpuhal__semaphore_covered_on_stream(w->semaphore, w->value, stream)) {
      w->kind = GPUHAL__WAIT_STREAM;
      a->next_wait++;
      continue;
    }
    memset(&q, 0, sizeof(q));
    q.order_stream = stream;
    q.look_submitted = 1;
    q.take_event = take_events;
    q.skip_provisional = 1;
    /* First as on the event path, which settles most waits; a wait that would block there may
     * go to the GPU (asking only then whether another stream may park). */
    park = a->provisional;
    st = a->provisional ? GPUHAL__WAIT_PENDING : gpuhal__semaphore_check(w->semaphore, w->value, &q);
    if (st == GPUHAL__WAIT_PENDING && !park && state->memops && !a->not_provisional) {
      if (may_park < 0) may_park = a->park_reserved = gpuhal__park_reserve(state);
      park = may_park;
    }
    if (st == GPUHAL__WAIT_PENDING) {
      q.waiter = &w->waiter;
      q.skip_provisional = !park;
      q.spare_word = park ? gpuhal__action_spare_word(state, w->semaphore) : NULL;
      st = gpuhal__semaphore_check(w->semaphore, w->value, &q);
      if (q.spare_word && q.spare_word != &gpuhal__arm_sentinel) gpuhal__word_return(state->device->driver, q.spare_word);
    }
    if (st == GPUHAL__WAIT_PENDING) {
      gpuhal__action_drop_wait_events(a);
      return GPUHAL__RESOLVE_BLOCKED;
    }
    if (st == GPUHAL__WAIT_FAILED) {
      gpuhal__action_drop_wait_events(a);
      *out_failure = gpuhal__action_wait_failure(a, q.failure, w->value);
      return GPUHAL__RESOLVE_FAILED;
    }
    w->kind = st == GPUHAL__WAIT_ARMED                                   ? GPUHAL__WAIT_VALUE
              : st != GPUHAL__WAIT_SUBMITTED                             ? GPUHAL__WAIT_NOTHING
              : q.event || !take_events                                  ? GPUHAL__WAIT_EVENT
                                                                         : GPUHAL__WAIT_STREAM;
    w->event = q.event;
    w->word = q.word_address;
    if (w->kind == GPUHAL__WAIT_VALUE) a->value_waits = 1;
    if (w->kind == GPUHAL__WAIT_VALUE || (st == GPUHAL__WAIT_SUBMITTED && q.provisional)) a->provisional = 1;
    a->next_wait++;
  }
  return GPUHAL__RESOLVE_READY;
}

/* gpuhal__action_resolve_waits, giving back a parked-stream reservation the action turned
 * out not to need (it keeps it while any wait of it goes to the GPU). */
static gpuhal__resolve_t gpuhal__action_resolve(gpuhal__action_t* a, int take_events, gpuhal_status_t* out_failure) {
  gpuhal__resolve_t r = gpuhal__action_resolve_waits(a, take_events, out_failure);
  if (a->park_reserved && !a->provisional) {
    gpuhal__park_release(a->state, 1);
    a->park_reserved = 0;
  }
  return r;
}

/* An event wait resolved earlier without keeping its event: the event of the submitted
 * value again (a submitted value stays submitted until it is reached or fails). */
static gpuhal_status_t gpuhal__action_wait_event(gpuhal__action_t* a, gpuhal__action_wait_t* w, CUstream stream) {
  gpuhal__wait_query_t q;
  gpuhal__wait_state_t st;
  memset(&q, 0, sizeof(q));
  q.order_stream = stream;
  q.look_submitted = 1;
  q.take_event = 1;
  q.skip_provisional = !a->provisional; /* as when it was resolved: off its queue's stream only */
  st = gpuhal__semaphore_check(w->semaphore, w->value, &q);
  if (st == GPUHAL__WAIT_FAILED) return gpuhal__action_wait_failure(a, q.failure, w->value);
  if (st == GPUHAL__WAIT_PENDING)
    return gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "queue '%s': a submitted value %llu is no longer submitted",
                              a->ops->name, (unsigned long long)w->value);
  w->event = q.event;
  return NULL;
}

/* Puts the action's waits on `stream` (its queue's, or a side stream). */
static gpuhal_status_t gpuhal__action_issue_waits(gpuhal__action_t* a, CUstream stream) {
  gpuhal_device_t* device = a->state->device;
  int side = stream != device->streams[a->queue_index];
  uint32_t i;
  for (i = 0; i < a->wait_count; ++i) {
    gpuhal__action_wait_t* w = &a->waits[i];
    if (w->kind == GPUHAL__WAIT_VALUE) {
      GPUHAL__CU_RETURN(device->cu, cuStreamWaitValue64, (stream, w->word, w->value, CU_STREAM_WAIT_VALUE_GEQ));
    } else if (w->kind == GPUHAL__WAIT_EVENT || (w->kind == GPUHAL__WAIT_STREAM && side)) {
      if (!w->event) GPUHAL__RETURN_IF_ERROR(gpuhal__action_wait_event(a, w, stream));
      /* The wait captures the event's current record, so the event may be reused after. */
      if (w->event && w->event->stream != stream)
        GPUHAL__RETURN_IF_ERROR(GPUHAL__CU(device->cu, cuStreamWaitEvent, (stream, w->event->handle, 0)));
      gpuhal__event_release(w->event);
      w->event = NULL;
    }
  }
  return NULL;
}

static int gpuhal__timepoint_settled(const gpuhal__timepoint_t* tp);

/* A side stream for provisional work: a free one, else a new one. Under issue_mutex with
 * the device's context current (issues are serialized: only this adds streams). */
static gpuhal_status_t gpuhal__side_stream_acquire(gpuhal__queue_state_t* state, CUstream* out) {
  const gpuhal_allocator_t* allocator = state->device->allocator;
  CUstream* all = NULL;
  CUstream* free_list = NULL;
  CUstream stream = NULL;
  uint32_t capacity;
  gpuhal__mutex_lock(&state->mutex);
  if (state->side_free_count) {
    *out = state->side_free[--state->side_free_count];
    gpuhal__mutex_unlock(&state->mutex);
    return NULL;
  }
  capacity = state->side_capacity;
  gpuhal__mutex_unlock(&state->mutex);
  if (state->side_count == capacity) {
    /* Grown here, outside the lock; the completion thread only reads under it. */
    uint32_t grown = capacity ? capacity * 2 : 8;
    GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(allocator, sizeof(CUstream) * grown, "side streams", (void**)&all));
    if (gpuhal__alloc_zeroed(allocator, sizeof(CUstream) * grown, "side streams", (void**)&free_list) != NULL) {
      gpuhal__free(allocator, all);
      return gpuhal_status_make(GPUHAL_STATUS_RESOURCE_EXHAUSTED, "out of host memory for %u side streams", grown);
    }
    gpuhal__mutex_lock(&state->mutex);
    if (state->side_count) memcpy(all, state->side_streams, sizeof(CUstream) * state->side_count);
    if (state->side_free_count) memcpy(free_list, state->side_free, sizeof(CUstream) * state->side_free_count);
    gpuhal__free(allocator, state->side_streams);
    gpuhal__free(allocator, state->side_free);
    state->side_streams = all;
    state->side_free = free_list;
    state->side_capacity = grown;
    gpuhal__mutex_unlock(&state->mutex);
  }
  GPUHAL__CU_RETURN(state->device->cu, cuStreamCreate, (&stream, CU_STREAM_NON_BLOCKING));
  gpuhal__mutex_lock(&state->mutex);
  state->side_streams[state->side_count++] = stream;
  gpuhal__mutex_unlock(&state->mutex);
  *out = stream;
  return NULL;
}

/* Side work on `side` starts after what its queue issued before it, as it would on the
 * queue's stream (which never waits on a value not submitted, so this cannot deadlock).
 * Under issue_mutex with the device's context current. */
static gpuhal_status_t gpuhal__side_stream_follow(gpuhal__queue_state_t* state, uint32_t queue, CUstream side) {
  const gpuhal__cuda_symbols_t* cu = state->device->cu;
  gpuhal__queue_lane_t* lane = &state->lanes[queue];
  if (!lane->side_tail) GPUHAL__CU_RETURN(cu, cuEventCreate, (&lane->side_tail, CU_EVENT_DISABLE_TIMING));
  GPUHAL__CU_RETURN(cu, cuEventRecord, (lane->side_tail, state->device->streams[queue]));
  return GPUHAL__CU(cu, cuStreamWaitEvent, (side, lane->side_tail, 0));
}

/* The work on side stream `stream` is seen complete: the stream is free again. Under the
 * state's mutex. */
static void gpuhal__side_stream_put_locked(gpuhal__queue_state_t* state, CUstream stream) {
  state->side_free[state->side_free_count++] = stream;
  gpuhal__park_release(state, 1);
}

/* The signals, after the work: the armed words are written first, then the event is
 * recorded, then the timepoints are published (see gpuhal__semaphore_signal_begin). */
static gpuhal_status_t gpuhal__action_issue_signals(gpuhal__action_t* a, CUstream stream) {
  gpuhal_device_t* device = a->state->device;
  gpuhal__event_t* event = NULL;
  gpuhal_status_t status = NULL;
  uint32_t i, begun = 0, written = 0;
  for (i = 0; !a->host_fn && i < a->signal_count && !status; ++i) {
    CUdeviceptr word = gpuhal__semaphore_signal_begin(a->signals[i].semaphore);
    begun++;
    if (word)
      status = GPUHAL__CU(device->cu, cuStreamWriteValue64, (stream, word, a->signals[i].value, CU_STREAM_WRITE_VALUE_DEFAULT));
    if (word) written = begun; /* a failed enqueue may have gone through all the same */
  }
  if (!status) status = gpuhal__event_pool_acquire(&a->state->events, &event);
  if (!status) {
    a->event = event;
    status = GPUHAL__CU(device->cu, cuEventRecord, (event->handle, stream));
    event->stream = stream;
  }
  if (status) {
    for (i = 0; i < begun; ++i) gpuhal__semaphore_signal_end(a->signals[i].semaphore, i < written);
    return status;
  }
  for (i = 0; i < begun; ++i) {
    a->signals[i].event = a->event;
    a->signals[i].provisional = a->provisional;
    a->signals[i].settled = gpuhal__timepoint_settled;
    a->signals[i].owner = a;
    gpuhal__semaphore_add_timepoint(a->signals[i].semaphore, &a->signals[i]);
  }
  return NULL;
}

/* Puts the action on its stream: waits, the work, the signals. Provisional work (behind a
 * GPU value wait, or behind other such work) goes to a side stream of its own. */
static gpuhal_status_t gpuhal__action_issue(gpuhal__action_t* a) {
  gpuhal_device_t* device = a->state->device;
  CUstream stream = device->streams[a->queue_index];
  gpuhal_status_t status = a->provisional ? gpuhal__side_stream_acquire(a->state, &stream) : NULL;
  a->stream = stream;
  if (!status && a->provisional) a->park_reserved = 0; /* the side stream holds it now */
  /* Side work may wait on the GPU for a value not submitted (directly, or through other
   * side work): count it before it is enqueued. */
  if (a->provisional) gpuhal__action_gpu_wait_count(a, 1);
  if (!status && a->provisional) status = gpuhal__side_stream_follow(a->state, a->queue_index, stream);
  if (!status) status = gpuhal__action_issue_waits(a, stream);
  if (status) {
    gpuhal__action_drop_wait_events(a);
    return status;
  }
  if (a->ops->issue) {
    int64_t trace_t0 = 0; /* trace hook: GPU timing events around the work */
    gpuhal_status_t issued;
    GPUHAL__TRACE(device, trace_t0 = gpuhal__trace_issue_begin(device, a, stream));
    issued = a->ops->issue(a->user, device, stream);
    GPUHAL__TRACE(device, gpuhal__trace_issue_end(device, a, stream, trace_t0, issued != NULL));
    GPUHAL__RETURN_IF_ERROR(issued);
  }
  return gpuhal__action_issue_signals(a, stream);
}

/* An issue failed: sticky errors (the stream says so too) lose the device. */
static void gpuhal__action_issue_failed(gpuhal__action_t* a, gpuhal_status_t status) {
  gpuhal__queue_state_t* state = a->state;
  CUresult r = state->device->cu->cuStreamQuery(a->stream);
  status = gpuhal_status_annotate(status, "issuing queue '%s' (device %d, queue %u)", a->ops->name,
                                  state->device->ordinal, a->queue_index);
  if (gpuhal__cuda_error_is_sticky(r)) gpuhal__queue_mark_lost(state, status);
  gpuhal__action_fail(a, status);
  gpuhal__action_retire(a);
}

/* Issues a ready action and puts it on its lane (or fails it). Under issue_mutex with the
 * device's context current. Returns when it was issued (0: it failed). */
static int64_t gpuhal__action_dispatch(gpuhal__queue_state_t* state, gpuhal__action_t* a) {
  gpuhal_status_t status = gpuhal__action_issue(a);
  gpuhal__queue_lane_t* lane = &state->lanes[a->queue_index];
  int64_t now;
  if (status) {
    gpuhal__action_issue_failed(a, status);
    return 0;
  }
  a->dispatch_ns = now = gpuhal_now_ns();
  gpuhal__mutex_lock(&state->mutex);
  a->seq = ++state->dispatch_seq;
  if (a->stream != state->device->streams[a->queue_index]) {
    gpuhal__list_push_back(&lane->side, &a->link);
  } else {
    gpuhal__list_push_back(&lane->in_flight, &a->link);
    if (a->host_fn) lane->host_calls++;
  }
  gpuhal__atomic_add(&lane->count, 1u);
  gpuhal__atomic_add(&state->in_flight_count, 1u);
  /* A napping completion thread finds the action at its next look; a host call's function
   * should not wait for that. */
  if (state->completion_sleeping || (state->completion_napping && a->host_fn))
    gpuhal__cond_signal(&state->completion_cond);
  gpuhal__mutex_unlock(&state->mutex);
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
    r = failure ? GPUHAL__RESOLVE_FAILED : gpuhal__action_resolve(a, 1, &failure);
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

/* ---- the completion thread: progress, per queue ---- */

/* 1 when `a` and `next` (of the same queue, not host calls) signal only the same semaphore,
 * `next` to a value at or above `a`'s: once both are known complete, `a` need not advance
 * it, `next` will (before either is released). */
static int gpuhal__actions_share_signal(const gpuhal__action_t* a, const gpuhal__action_t* next) {
  return next && next->queue_index == a->queue_index && !a->host_fn && !next->host_fn && a->signal_count == 1 &&
         next->signal_count == 1 && a->signals[0].semaphore == next->signals[0].semaphore &&
         next->signals[0].value >= a->signals[0].value;
}

/* What is known of the inputs of an action whose work ran. A provisional action's GPU waits
 * may have been released by a failure store (or by work that was): its waited values count
 * as reached only once the host side has them (the signalling work observed, or a host
 * signal). Anything else ran behind work that really completed. Atomic loads only. */
typedef enum gpuhal__inputs_e {
  GPUHAL__INPUTS_REACHED, /* every waited value is reached: the work ran on good input */
  GPUHAL__INPUTS_UNKNOWN, /* some value is neither reached nor failed yet: look again later */
  GPUHAL__INPUTS_FAILED   /* some waited semaphore failed below its value: *out_failure says why */
} gpuhal__inputs_t;

static gpuhal__inputs_t gpuhal__action_inputs(const gpuhal__action_t* a, gpuhal_status_t* out_failure) {
  gpuhal__inputs_t result = GPUHAL__INPUTS_REACHED;
  uint32_t i;
  /* A host call's function may look at what it waited for: its event done is not enough,
   * the values it waited on must be seen reached (another lane may not be observed yet). */
  for (i = 0; (a->provisional || a->host_fn) && i < a->wait_count; ++i) {
    const gpuhal__action_wait_t* w = &a->waits[i];
    gpuhal__wait_query_t q;
    if (gpuhal__atomic_load(&w->semaphore->value) >= w->value) continue;
    if (!gpuhal__atomic_load(&w->semaphore->failure)) {
      result = GPUHAL__INPUTS_UNKNOWN;
      continue;
    }
    if (!out_failure) return GPUHAL__INPUTS_FAILED;
    memset(&q, 0, sizeof(q));
    gpuhal__semaphore_check(w->semaphore, w->value, &q);
    *out_failure = gpuhal__action_wait_failure(a, q.failure, w->value);
    return GPUHAL__INPUTS_FAILED;
  }
  return result;
}

/* Timepoint callback (under the signalled semaphore's lock, the action alive): 1 when the
 * action's inputs are all reached, so its completed event means its values are reached. */
static int gpuhal__timepoint_settled(const gpuhal__timepoint_t* tp) {
  return gpuhal__action_inputs((const gpuhal__action_t*)tp->owner, NULL) == GPUHAL__INPUTS_REACHED;
}

/* The work of `a` (not a host call) completed: advance its values, unless a later complete
 * action of its queue advances the same semaphore past them (`skip_advance`). */
static void gpuhal__action_complete_ok(gpuhal__action_t* a, int skip_advance) {
  gpuhal_status_t failed = NULL;
  if (gpuhal__action_inputs(a, &failed) == GPUHAL__INPUTS_FAILED) {
    gpuhal__action_fail(a, failed);
  } else if (skip_advance) {
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
 * still be running, so its semaphores must not fail (or advance) yet. Waits until the
 * queue's stream has drained: that tells whether the work completed (CUDA_SUCCESS) or how
 * it failed. Blocks this queue's progress only, and only on this rare path. */
static CUresult gpuhal__action_recheck(gpuhal__queue_state_t* state, gpuhal__action_t* a, CUresult query_error) {
  const gpuhal__cuda_symbols_t* cu = state->device->cu;
  const char* name = NULL;
  const char* text = NULL;
  int64_t sleep_ns = GPUHAL__COMPLETION_FIRST_SLEEP_NS;
  int tries;
  for (tries = 0; tries < 3; ++tries) {
    CUresult r;
    gpuhal__sleep_ns(sleep_ns);
    r = cu->cuEventQuery(a->event->handle);
    if (r == CUDA_SUCCESS || gpuhal__cuda_error_is_sticky(r)) return r;
  }
  gpuhal__cuda_error_describe(cu, query_error, &name, &text);
  gpuhal__log(state->device->logger, GPUHAL_LOG_WARN,
              "device %d, queue %u: cuEventQuery keeps failing (%s, %d); waiting for the queue's stream to drain "
              "to learn how queue '%s' ended",
              state->device->ordinal, a->queue_index, name ? name : "unknown CUDA error", (int)query_error,
              a->ops->name);
  for (;;) {
    CUresult r = cu->cuStreamQuery(a->stream);
    if (r != CUDA_ERROR_NOT_READY) return r;
    gpuhal__sleep_ns(sleep_ns);
    if (sleep_ns < state->tuning.completion_max_sleep_ns) sleep_ns *= 2;
  }
}

/* Records how `a` ended (`r`: its event's query). A successful action goes on `done`
 * (retired by the caller); a host call goes to the host-call thread. */
static void gpuhal__action_observe(gpuhal__queue_state_t* state, gpuhal__action_t* a, CUresult r, int skip_advance,
                                   gpuhal__list_node_t* done, uint32_t* done_count) {
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

/* Observes a lane's taken actions in order without blocking: stops at the first whose work
 * is not done. One query of the newest covers every older one (a stream runs in order).
 * Returns how many were observed. */
static uint32_t gpuhal__completion_observe_lane(gpuhal__queue_state_t* state, gpuhal__queue_lane_t* lane,
                                                gpuhal__list_node_t* done, uint32_t* done_count) {
  const gpuhal__cuda_symbols_t* cu = state->device->cu;
  gpuhal__list_node_t* list = &lane->observing;
  uint32_t observed = 0;
  int all_done = 0;
  gpuhal__list_node_t* n = lane->deferred.next;
  while (n != &lane->deferred) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    n = n->next;
    if (gpuhal__action_inputs(a, NULL) == GPUHAL__INPUTS_UNKNOWN) continue;
    gpuhal__list_remove(&a->link);
    gpuhal__action_observe(state, a, CUDA_SUCCESS, 0, done, done_count);
    gpuhal__atomic_sub(&lane->count, 1u);
    gpuhal__atomic_sub(&state->in_flight_count, 1u);
    observed++;
  }
  /* Work on side streams: each on a stream of its own, so each is looked at on its own. */
  n = lane->side_observing.next;
  while (n != &lane->side_observing) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    CUresult r = cu->cuEventQuery(a->event->handle);
    n = n->next;
    if (r == CUDA_ERROR_NOT_READY) continue;
    gpuhal__list_remove(&a->link);
    gpuhal__action_gpu_wait_count(a, 0);
    if (r == CUDA_SUCCESS) {
      /* Nothing follows the event on a side stream: it is idle. (After an error it is not
       * used again.) */
      gpuhal__mutex_lock(&state->mutex);
      gpuhal__side_stream_put_locked(state, a->stream);
      gpuhal__mutex_unlock(&state->mutex);
      if (gpuhal__action_inputs(a, NULL) == GPUHAL__INPUTS_UNKNOWN) {
        gpuhal__list_push_back(&lane->deferred, &a->link);
        continue;
      }
    }
    gpuhal__action_observe(state, a, r, 0, done, done_count);
    gpuhal__atomic_sub(&lane->count, 1u);
    gpuhal__atomic_sub(&state->in_flight_count, 1u);
    observed++;
  }
  if (gpuhal__list_empty(list)) return observed;
  if (list->next != list->prev)
    all_done = cu->cuEventQuery(GPUHAL__CONTAINER_OF(list->prev, gpuhal__action_t, link)->event->handle) == CUDA_SUCCESS;
  while (!gpuhal__list_empty(list)) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(list->next, gpuhal__action_t, link);
    gpuhal__action_t* next = list->next->next == list ? NULL : GPUHAL__CONTAINER_OF(list->next->next, gpuhal__action_t, link);
    int skip;
    CUresult r = all_done ? CUDA_SUCCESS : cu->cuEventQuery(a->event->handle);
    if (r == CUDA_ERROR_NOT_READY) break;
    gpuhal__list_remove(&a->link);
    /* Done, but on inputs not known good yet: other lanes will tell (perhaps only once this
     * lane's later work is observed, so the lane goes on without it). */
    if (r == CUDA_SUCCESS && gpuhal__action_inputs(a, NULL) == GPUHAL__INPUTS_UNKNOWN) {
      gpuhal__list_push_back(&lane->deferred, &a->link);
      continue;
    }
    /* `a` may leave its advance to `next` only when `next` will make it now: a `next` that
     * waits for inputs (perhaps for `a`'s own value, through another lane) would not. */
    skip = all_done && gpuhal__actions_share_signal(a, next) &&
           gpuhal__action_inputs(next, NULL) == GPUHAL__INPUTS_REACHED;
    gpuhal__action_observe(state, a, r, skip, done, done_count);
    gpuhal__atomic_sub(&lane->count, 1u);
    gpuhal__atomic_sub(&state->in_flight_count, 1u);
    observed++;
    if (*done_count >= GPUHAL__RETIRE_BATCH && !skip)
      gpuhal__completion_retire_done(state, done, done_count);
  }
  return observed;
}

/* Under the state's mutex: moves to each lane's `observing` list the issued actions old
 * enough to look at (all of a lane with a host call, and everything while someone waits for
 * idle or the device stops). Returns when the youngest action left behind ages (INT64_MAX:
 * none left). */
static int64_t gpuhal__completion_take_locked(gpuhal__queue_state_t* state) {
  int64_t now = gpuhal_now_ns(), next_due = INT64_MAX;
  int take_all = state->threads_stop || state->idle_waiters > 0 || state->tuning.completion_min_age_ns == 0;
  uint32_t q;
  for (q = 0; q < state->device->queue_count; ++q) {
    gpuhal__queue_lane_t* lane = &state->lanes[q];
    /* A submitter that harvested lately keeps the lane short itself: leave it the work. */
    int64_t since = lane->last_harvest_ns;
    while (!gpuhal__list_empty(&lane->in_flight)) {
      gpuhal__action_t* a = GPUHAL__CONTAINER_OF(lane->in_flight.next, gpuhal__action_t, link);
      int64_t due = (a->dispatch_ns > since ? a->dispatch_ns : since) + state->tuning.completion_min_age_ns;
      if (!take_all && lane->host_calls == 0 && due > now) {
        if (due < next_due) next_due = due;
        break;
      }
      gpuhal__list_remove(&a->link);
      if (a->host_fn) lane->host_calls--;
      gpuhal__list_push_back(&lane->observing, &a->link);
    }
    gpuhal__list_splice_back(&lane->side_observing, &lane->side);
  }
  return next_due;
}

/* At device release, for GPU value waits whose values nobody reached: fails those
 * semaphores (the failure store releases the waits), so the streams drain. */
static void gpuhal__completion_abandon_value_waits(gpuhal__queue_state_t* state) {
  uint32_t q;
  for (q = 0; q < state->device->queue_count; ++q) {
    gpuhal__list_node_t* n;
    for (n = state->lanes[q].side_observing.next; n != &state->lanes[q].side_observing; n = n->next) {
      gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
      uint32_t i;
      for (i = 0; a->value_waits && i < a->wait_count; ++i) {
        gpuhal__action_wait_t* w = &a->waits[i];
        if (w->kind != GPUHAL__WAIT_VALUE || gpuhal__atomic_load(&w->semaphore->value) >= w->value) continue;
        gpuhal__semaphore_fail_owned(
            w->semaphore, gpuhal_status_make(GPUHAL_STATUS_ABORTED,
                                             "device %d was released while queue '%s' (queue %u) waited on the GPU "
                                             "for this semaphore to reach %llu",
                                             state->device->ordinal, a->ops->name, a->queue_index,
                                             (unsigned long long)w->value));
      }
    }
  }
}

/* Sleeps until `until` (INT64_MAX: until woken). Under the state's mutex. */
static void gpuhal__completion_sleep_locked(gpuhal__queue_state_t* state, int64_t until) {
  if (until == INT64_MAX) {
    state->completion_sleeping = 1;
    gpuhal__cond_wait(&state->completion_cond, &state->mutex);
    state->completion_sleeping = 0;
  } else {
    state->completion_napping = 1;
    gpuhal__cond_wait_until(&state->completion_cond, &state->mutex, gpuhal_timeout_deadline_ns(until));
    state->completion_napping = 0;
  }
}

static int gpuhal__completion_observing(gpuhal__queue_state_t* state) {
  uint32_t q;
  for (q = 0; q < state->device->queue_count; ++q)
    if (!gpuhal__list_empty(&state->lanes[q].observing) || !gpuhal__list_empty(&state->lanes[q].deferred) ||
        !gpuhal__list_empty(&state->lanes[q].side_observing))
      return 1;
  return 0;
}

static void* gpuhal__completion_main(void* arg) {
  gpuhal__queue_state_t* state = (gpuhal__queue_state_t*)arg;
  gpuhal__context_scope_t scope;
  /* cuEventQuery needs no current context on CUDA, but a gpuhal thread may hold it. */
  gpuhal_status_t status = gpuhal__context_enter(state->device, &scope);
  int64_t last_work_ns = gpuhal_now_ns();
  int64_t poll_sleep_ns = 0;
  gpuhal_status_free(status);
  for (;;) {
    gpuhal__list_node_t done;
    uint32_t done_count = 0, observed = 0, q;
    int64_t next_due, now;
    int observing;
    gpuhal__mutex_lock(&state->mutex);
    next_due = gpuhal__completion_take_locked(state);
    observing = gpuhal__completion_observing(state);
    if (state->abandon_value_waits) {
      state->abandon_value_waits = 0;
      gpuhal__mutex_unlock(&state->mutex);
      gpuhal__completion_abandon_value_waits(state);
      gpuhal__mutex_lock(&state->mutex);
    }
    if (!observing) {
      if (state->threads_stop && gpuhal__atomic_load(&state->in_flight_count) == 0) {
        gpuhal__mutex_unlock(&state->mutex);
        break;
      }
      /* Nothing to look at yet: sleep until the oldest issued action ages, or, with
       * nothing issued, nap while work keeps coming, then sleep until woken. */
      now = gpuhal_now_ns();
      if (next_due == INT64_MAX && now - last_work_ns < GPUHAL__COMPLETION_ACTIVE_NS) next_due = now + GPUHAL__COMPLETION_NAP_NS;
      gpuhal__completion_sleep_locked(state, next_due);
      gpuhal__mutex_unlock(&state->mutex);
      poll_sleep_ns = 0;
      continue;
    }
    gpuhal__mutex_unlock(&state->mutex);
    gpuhal__list_init(&done);
    for (q = 0; q < state->device->queue_count; ++q)
      observed += gpuhal__completion_observe_lane(state, &state->lanes[q], &done, &done_count);
    gpuhal__completion_retire_done(state, &done, &done_count);
    gpuhal__mutex_lock(&state->mutex);
    if (state->retired_unkicked > 0) {
      state->retired_unkicked = 0;
      gpuhal__mutex_unlock(&state->mutex);
      gpuhal__queue_kick(state);
      gpuhal__mutex_lock(&state->mutex);
    }
    last_work_ns = gpuhal_now_ns();
    if (observed) {
      poll_sleep_ns = 0;
    } else {
      /* Work is running on some lane: poll again after a sleep that doubles, and sooner
       * when issued work ages or a host call arrives. */
      poll_sleep_ns = poll_sleep_ns ? poll_sleep_ns * 2 : GPUHAL__COMPLETION_FIRST_SLEEP_NS;
      if (poll_sleep_ns > state->tuning.completion_max_sleep_ns) poll_sleep_ns = state->tuning.completion_max_sleep_ns;
      now = gpuhal_now_ns();
      if (next_due > now + poll_sleep_ns) next_due = now + poll_sleep_ns;
      if (!state->threads_stop && state->idle_waiters == 0 && !state->abandon_value_waits)
        gpuhal__completion_sleep_locked(state, next_due);
    }
    gpuhal__mutex_unlock(&state->mutex);
  }
  if (!status) gpuhal__context_leave(state->device, &scope);
  return NULL;
}

/* ---- the host-call thread ---- */
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
    status = NULL;
    if (gpuhal__action_inputs(a, &status) != GPUHAL__INPUTS_FAILED) {
      int64_t trace_t0 = 0; /* trace hook: the host function's span */
      GPUHAL__TRACE(state->device, trace_t0 = gpuhal_now_ns());
      status = a->host_fn(a->host_user);
      GPUHAL__TRACE(state->device, gpuhal__trace_host_call(state->device, a, trace_t0));
      if (status)
        status = gpuhal_status_annotate(status, "in the function of gpuhal_queue_host_call (device %d, queue %u)",
                                        state->device->ordinal, a->queue_index);
    }
    if (status) {
      gpuhal__action_fail(a, status);
    } else {
      gpuhal__action_succeed(a);
    }
    gpuhal__action_retire(a);
  }
  return NULL;
}

/* ---- harvesting: a busy submitter retires completed work of its queue itself ----
 * While a thread keeps submitting on the fast path, it also takes the oldest issued actions
 * of its queue whose work has completed and retires them on the spot: advances their
 * values, drops their references and returns them to the pool. Everything an action
 * touches then stays in that thread's cache instead of moving through the completion
 * thread and the worker on every operation, and the completion thread's cuEventQuery calls
 * no longer compete with the submitter's own calls for the driver. One cuEventQuery covers
 * every older action of the queue; a look that finds nothing complete backs off, so
 * long-running work costs the submitter almost nothing. The completion thread still takes
 * whatever ages past tuning.completion_min_age_ns, host calls and failures. Releasing here
 * is safe: no queue lock is held, and every release that makes CUDA calls enters the
 * device's context itself (or asks the worker). Off while tracing (the trace's GPU timing
 * belongs to the completion thread) and with tuning.harvest_min < 0. */

/* Under the state's mutex: the newest action of the lane's contiguous run of old-enough
 * actions (host calls end it), when that run is worth a query (tuning.harvest_min long, or
 * its oldest has waited GPUHAL__HARVEST_MAX_WAIT_NS); NULL otherwise. */
static gpuhal__action_t* gpuhal__harvest_pick(gpuhal__queue_state_t* state, gpuhal__queue_lane_t* lane) {
  int64_t now = gpuhal_now_ns(), cutoff = now - GPUHAL__HARVEST_AGE_NS;
  int64_t oldest = gpuhal__list_empty(&lane->in_flight)
                       ? now
                       : GPUHAL__CONTAINER_OF(lane->in_flight.next, gpuhal__action_t, link)->dispatch_ns;
  gpuhal__action_t* probe = NULL;
  uint32_t run = 0;
  gpuhal__list_node_t* n;
  for (n = lane->in_flight.next; n != &lane->in_flight; n = n->next) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    if (a->dispatch_ns > cutoff || a->host_fn || run == GPUHAL__HARVEST_MAX_RUN) break;
    probe = a;
    run++;
  }
  gpuhal__atomic_store(&lane->harvest_due_ns, oldest + GPUHAL__HARVEST_MAX_WAIT_NS);
  if (run < (uint32_t)state->tuning.harvest_min && (run == 0 || now - oldest < GPUHAL__HARVEST_MAX_WAIT_NS)) return NULL;
  return probe;
}

/* Under the state's mutex: moves the lane's front actions up to `seq` to `taken`. */
static uint32_t gpuhal__harvest_take(gpuhal__queue_state_t* state, gpuhal__queue_lane_t* lane, uint64_t seq,
                                     gpuhal__list_node_t* taken) {
  uint32_t n = 0;
  while (!gpuhal__list_empty(&lane->in_flight)) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(lane->in_flight.next, gpuhal__action_t, link);
    /* Provisional work (its inputs checked once known) is left to the completion thread. */
    if (a->seq > seq || a->host_fn || a->provisional) break;
    gpuhal__list_remove(&a->link);
    gpuhal__list_push_back(taken, &a->link);
    gpuhal__atomic_sub(&lane->count, 1u);
    gpuhal__atomic_sub(&state->in_flight_count, 1u);
    n++;
  }
  if (n) {
    int64_t now = gpuhal_now_ns();
    const gpuhal__action_t* front =
        gpuhal__list_empty(&lane->in_flight) ? NULL : GPUHAL__CONTAINER_OF(lane->in_flight.next, gpuhal__action_t, link);
    lane->last_harvest_ns = now;
    gpuhal__atomic_store(&lane->harvest_due_ns, (front ? front->dispatch_ns : now) + GPUHAL__HARVEST_MAX_WAIT_NS);
  }
  return n;
}

/* The look itself: picks a probe, queries it, takes what it covers. */
static uint32_t gpuhal__harvest_look(gpuhal__queue_state_t* state, gpuhal__queue_lane_t* lane,
                                     gpuhal__list_node_t* taken) {
  gpuhal__action_t* probe;
  gpuhal__event_t* event = NULL;
  uint64_t seq = 0;
  int complete;
  uint32_t n = 0;
  gpuhal__mutex_lock(&state->mutex);
  probe = gpuhal__harvest_pick(state, lane);
  if (probe) {
    event = probe->event;
    seq = probe->seq;
    gpuhal__event_retain(event);
  }
  gpuhal__mutex_unlock(&state->mutex);
  if (!probe) return 0;
  __atomic_add_fetch(&state->harvest_looks, 1, __ATOMIC_RELAXED);
  /* Errors and unfinished work alike are left to the completion thread. */
  complete = gpuhal__event_query(event) == 0;
  gpuhal__event_release(event);
  if (!complete) {
    /* Nothing done yet: the GPU is behind. Look less often until it catches up. */
    int32_t backoff = lane->harvest_backoff < 4 ? 4 : lane->harvest_backoff * 2;
    if (backoff > GPUHAL__HARVEST_MAX_BACKOFF) backoff = GPUHAL__HARVEST_MAX_BACKOFF;
    lane->harvest_backoff = backoff;
    gpuhal__atomic_store(&lane->harvest_skip, backoff);
    __atomic_add_fetch(&state->harvest_misses, 1, __ATOMIC_RELAXED);
    return 0;
  }
  lane->harvest_backoff = 0;
  /* Taken by the completion thread since means the front moved on: take what is left. */
  gpuhal__mutex_lock(&state->mutex);
  n = gpuhal__harvest_take(state, lane, seq, taken);
  gpuhal__mutex_unlock(&state->mutex);
  __atomic_add_fetch(&state->harvested, n, __ATOMIC_RELAXED);
  return n;
}

/* After a fast-path issue on `queue` (at `now`, 0 if unknown), on the submitting thread,
 * with no queue lock held. */
static void gpuhal__queue_harvest(gpuhal__queue_state_t* state, uint32_t queue, int64_t now) {
  gpuhal__queue_lane_t* lane = &state->lanes[queue];
  gpuhal__list_node_t taken;
  gpuhal__list_node_t* n;
  uint32_t in_flight = gpuhal__atomic_load(&lane->count);
  int32_t expected = 0;
  if (state->tuning.harvest_min <= 0 || in_flight == 0 || state->device->trace) return;
  if (in_flight < (uint32_t)state->tuning.harvest_min &&
      (now ? now : gpuhal_now_ns()) < gpuhal__atomic_load(&lane->harvest_due_ns))
    return;
  if (gpuhal__atomic_load(&lane->harvest_skip) > 0) {
    gpuhal__atomic_sub(&lane->harvest_skip, 1);
    return;
  }
  if (!gpuhal__atomic_cas(&lane->harvesting, &expected, 1)) return;
  gpuhal__list_init(&taken);
  gpuhal__harvest_look(state, lane, &taken);
  gpuhal__atomic_store(&lane->harvesting, 0);
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
  a->wake = 0;
  r = gpuhal__action_resolve(a, 1, &failure);
  if (r == GPUHAL__RESOLVE_BLOCKED) {
    /* Registered on the semaphore it waits for; its change kicks the pump. */
    gpuhal__list_push_back(&state->pending, &a->link);
  } else if (r == GPUHAL__RESOLVE_FAILED) {
    gpuhal__action_fail(a, failure);
    gpuhal__action_retire(a);
  } else if ((failure = gpuhal__context_enter(state->device, &scope)) != NULL) {
    gpuhal_status_free(failure); /* the worker will do it */
    gpuhal__action_drop_wait_events(a);
    a->wake = 1;
    gpuhal__list_push_back(&state->pending, &a->link);
    gpuhal__queue_kick_issue(state);
  } else {
    dispatched = gpuhal__action_dispatch(state, a);
    gpuhal__context_leave(state->device, &scope);
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
  if (!(flags & GPUHAL__SUBMIT_VALIDATED))
    GPUHAL__RETURN_IF_ERROR(gpuhal__queue_validate(func, device, queue_index, wait, signal));
  if (!ops || !ops->name)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: internal: action ops must be given", func);
  state = gpuhal__queue_state(device);
  /* The fast path needs the issue lock; without it (someone else is issuing) the worker
   * issues. Lock order: issue_mutex, then mutex (as in the pump). */
  if ((flags & GPUHAL__SUBMIT_CALLER_MAY_ISSUE) && !state->tuning.no_caller_issue)
    issuing = pthread_mutex_trylock(&state->issue_mutex) == 0;
  if (issuing && gpuhal__action_acquire_issuing(state, wait.count, signal.count, &a)) {
    idle = 1;
  } else {
    status = gpuhal__action_acquire_locked_path(state, func, wait.count, signal.count, issuing, &a, &idle);
    if (status) {
      if (issuing) gpuhal__mutex_unlock(&state->issue_mutex);
      /* The arguments were fine: whoever waits for the signals must learn of this too. */
      gpuhal__queue_fail_signals(signal, status, ops->name, device->ordinal, queue_index);
      return status;
    }
  }

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
  a->value_waits = 0;
  a->provisional = 0;
  a->park_reserved = 0;
  a->not_provisional = (flags & GPUHAL__SUBMIT_NOT_PROVISIONAL) != 0;
  a->stream = NULL;
  a->gpu_wait_counted = 0;
  for (i = 0; i < wait.count; ++i) {
    gpuhal__action_wait_t* w = &a->waits[i];
    gpuhal__semaphore_waiter_init(&w->waiter);
    w->waiter.wants_submitted = 1;
    w->waiter.notify = gpuhal__action_wait_notify;
    w->waiter.user = a;
    w->semaphore = wait.semaphores[i];
    w->value = wait.values[i];
    w->kind = GPUHAL__WAIT_UNRESOLVED;
    w->event = NULL;
    w->word = 0;
  }
  for (i = 0; i < signal.count; ++i) {
    gpuhal__timepoint_t* tp = &a->signals[i];
    gpuhal__list_init(&tp->link);
    tp->semaphore = signal.semaphores[i];
    tp->value = signal.values[i];
    tp->event = NULL;
    tp->provisional = 0;
  }
  gpuhal__action_retain_semaphores(a);
  GPUHAL__TRACE(device, (trace_t0 = gpuhal_now_ns(), trace_span = gpuhal__trace_submit_begin(device, a, wait, signal)));
  /* From here `a` may complete and be reused at any time: the trace keeps only its span id. */
  if (issuing && idle) dispatched = gpuhal__queue_issue_here(state, a);
  if (issuing) gpuhal__mutex_unlock(&state->issue_mutex);
  if (issuing && idle) {
    gpuhal__queue_harvest(state, queue_index, dispatched);
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
  return gpuhal__buffer_pending_allocate((gpuhal_buffer_t*)user, device, stream);
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
  GPUHAL__RETURN_IF_ERROR(gpuhal__queue_validate(__func__, device, queue, wait, signal));
  GPUHAL__CHECK_RANGE(size <= device->info.total_memory, "size", "must not exceed the device's total memory");
  status = gpuhal__buffer_create_pending(device, size, &buffer);
  if (status) {
    gpuhal__queue_fail_signals(signal, status, "alloca", device->ordinal, queue);
    return status;
  }
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
                                     gpuhal__pool_submit_flags(device) | GPUHAL__SUBMIT_NOT_PROVISIONAL);
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
  uint32_t i;
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__alloc_zeroed(device->allocator, sizeof(*state), "queue state", (void**)&state));
  state->device = device;
  gpuhal__mutex_init(&state->mutex);
  gpuhal__mutex_init(&state->issue_mutex);
  gpuhal__cond_init(&state->completion_cond);
  gpuhal__cond_init(&state->host_call_cond);
  gpuhal__cond_init(&state->idle_cond);
  state->tuning = gpuhal__queue_tuning_resolve(&device->params.tuning);
  device->params.tuning = state->tuning; /* host waits read it from the device */
  state->memops = device->driver->memops;
  status = gpuhal__alloc_zeroed(device->allocator, sizeof(*state->lanes) * device->queue_count, "queue lanes",
                                (void**)&state->lanes);
  if (status) {
    gpuhal__free(device->allocator, state);
    return status;
  }
  for (i = 0; i < device->queue_count; ++i) {
    gpuhal__list_init(&state->lanes[i].in_flight);
    gpuhal__list_init(&state->lanes[i].observing);
    gpuhal__list_init(&state->lanes[i].deferred);
    gpuhal__list_init(&state->lanes[i].side);
    gpuhal__list_init(&state->lanes[i].side_observing);
  }
  gpuhal__list_init(&state->incoming);
  gpuhal__list_init(&state->host_calls);
  gpuhal__list_init(&state->retired);
  gpuhal__list_init(&state->pending);
  gpuhal__list_init(&state->pump_task.node);
  state->pump_task.fn = gpuhal__queue_pump_task;
  gpuhal__event_pool_init(&state->events, device, CU_EVENT_DISABLE_TIMING);
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
    gpuhal__free(device->allocator, state->lanes);
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
  uint32_t i;
  gpuhal__queue_pump(state); /* releases the last retired actions */
  gpuhal__event_pool_deinit(&state->events);
  /* Every action is released: nothing is left on the side streams but what a failed
   * issue left there, which the abandoned value waits released. */
  for (i = 0; i < state->device->queue_count; ++i)
    if (state->lanes[i].side_tail) gpuhal_status_free(GPUHAL__CU(state->device->cu, cuEventDestroy, (state->lanes[i].side_tail)));
  for (i = 0; i < state->side_count; ++i) {
    gpuhal_status_t status = GPUHAL__CU(state->device->cu, cuStreamDestroy, (state->side_streams[i]));
    if (status) {
      gpuhal__log(state->device->logger, GPUHAL_LOG_WARN, "device %d: destroying a side stream: %s",
                  state->device->ordinal, gpuhal_status_message(status));
      gpuhal_status_free(status);
    }
  }
  gpuhal__park_release(state, (int32_t)(state->side_count - state->side_free_count)); /* left by failed issues */
  gpuhal__free(state->device->allocator, state->side_streams);
  gpuhal__free(state->device->allocator, state->side_free);
  state->side_streams = state->side_free = NULL;
  state->side_count = state->side_free_count = state->side_capacity = 0;
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
   * back through the pump, which releases it. GPU value waits that nothing reached would
   * keep their streams blocked forever: the completion thread fails those semaphores. */
  gpuhal__mutex_lock(&state->mutex);
  state->idle_waiters++;
  state->abandon_value_waits = 1;
  gpuhal__cond_signal(&state->completion_cond);
  while (__atomic_load_n(&state->outstanding, __ATOMIC_ACQUIRE) > 0) {
    /* Value waits issued since the last look (none are: submission is closed) or found
     * after it: look again now and then. */
    if (!gpuhal__cond_wait_until(&state->idle_cond, &state->mutex, gpuhal_timeout_relative_ns(10000000)) &&
        __atomic_load_n(&state->outstanding, __ATOMIC_ACQUIRE) > 0) {
      state->abandon_value_waits = 1;
      gpuhal__cond_signal(&state->completion_cond);
    }
  }
  state->idle_waiters--;
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
  gpuhal__free(device->allocator, state->lanes);
  gpuhal__free(device->allocator, state);
}
