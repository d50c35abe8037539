/* queue: the deferred issue queue (DESIGN §6).
 *
 * Every queue operation waits on a semaphore list and signals a semaphore list. A call
 * copies and retains what it needs, appends an action and returns: it never waits for its
 * semaphores or its work on the calling thread. (A submitter that harvests runs the
 * releases of what it retired; the frees they make go to the worker without waiting, but a
 * module unload, when a release pushes the module cache past its limits, still waits for
 * the worker; creating a side stream may wait for CUDA to grow its store.)
 *
 * THE RULES (one page; CONTRIBUTING and docs keep to it)
 *
 * Threads of a device and the CUDA calls each may make (a push/pop: cuCtxGetCurrent,
 * cuCtxPushCurrent, cuCtxPopCurrent; any thread names a CUDA error it gets with
 * cuGetErrorName/cuGetErrorString). An issue makes: its waits' cuStreamWaitEvent and
 * cuStreamWaitValue64; the work's own calls (cuLaunchKernel, cuMemcpyAsync/PeerAsync/
 * HtoDAsync, cuMemsetD8/16/32Async, cuGraphExecKernelNodeSetParams + cuGraphLaunch,
 * cuMemFreeAsync, cuMemAllocFromPoolAsync; out of memory, cuMemPoolTrimTo, cuStreamQuery,
 * cuEventCreate/Record + cuStreamWaitEvent on busy queues, cuMemPoolGetAttribute,
 * cuMemGetInfo); its signals' cuStreamWriteValue64 and cuEventRecord; for side work,
 * cuStreamCreate (growing CUDA's store: cuStreamCreate/Destroy) and, to follow its queue's
 * stream, cuEventCreate/Record + cuStreamWaitEvent; event pool growth: cuEventCreate; a
 * semaphore word slab: cuDevicePrimaryCtxRetain, cuMemHostAlloc and cuMemHostGetDevicePointer
 * in a push/pop (failing: cuMemFreeHost, cuDevicePrimaryCtxRelease); cuStreamQuery after a
 * failed issue, and cuEventRecord behind the work it left on a running stream; tracing:
 * cuEventCreate/Record.
 *  - a submitting thread (any application thread): with the issue lock and the device's
 *    context pushed, it issues an action whose waits are resolved when nothing is queued
 *    ahead ("fast path"; only what a submitter may issue: no NCCL call, no GRAPH build, no
 *    alloca/dealloca without a pool); while any queue's ready work waits for room on its
 *    stream (below), it then issues what became ready as a signalling thread does (up to
 *    GPUHAL__SIGNAL_ISSUE_MAX); it may also harvest (below): cuEventQuery, then
 *    releases, each in a push/pop of its own (cuGraphExecDestroy, cuGraphDestroy; a free,
 *    which waits for the whole device, is put off to the worker: cuDevicePrimaryCtxRetain,
 *    gpuhal__put_off_begin; so is the free of queue_alloca memory never deallocated, as a
 *    worker task); module unloads, NCCL communicators and whatever a failed push leaves it
 *    hands to the worker and waits for.
 *    An alloca or dealloca whose waits are reached, on a queue with nothing in flight or
 *    queued ahead, is done as it is issued: the caller, holding the issue lock, makes its
 *    pool call in a push/pop and signals from the host ("at once", queue_submit.c);
 *    gpuhal_device_wait_idle then polls that stream (cuStreamQuery in a push/pop). Such a
 *    dealloca records an event behind its free (cuEventCreate once, cuEventRecord), which
 *    gpuhal_device_trim and an allocation out of memory wait for (cuEventSynchronize in a
 *    push/pop, or on the worker): microseconds, the stream was idle.
 *  - a thread in gpuhal_semaphore_signal (an application thread): a push/pop and issues (no
 *    harvest) of woken actions, its signal's among them, once the semaphore's lock is
 *    released (up to GPUHAL__SIGNAL_ISSUE_MAX, only actions a submitter may issue, only with
 *    the issue lock free, never on a thread of their device; else the worker). So does any
 *    thread that issues work (a submitter, a worker, a signalling thread) for the actions
 *    of other devices that its signals' submission woke: with its own device's issue lock
 *    held and context pushed, it takes the other device's issue lock only by a trylock and
 *    pushes that device's context over its own (a chain across devices then needs no
 *    worker wake-up per hop).
 *  - a host waiter (gpuhal_semaphore_wait, gpuhal_semaphores_wait, gpuhal_semaphore_query):
 *    cuEventQuery.
 *  - a thread in gpuhal_buffer_read / _write (memory.c, not the queue): in a push/pop, a copy
 *    stream of gpuhal's own (cuStreamCreate/Destroy through the counted store), cuMemcpy*Async
 *    and cuStreamSynchronize of that stream.
 *  - the worker (device.h; cuCtxSetCurrent: context current for life): the pump issues what
 *    became ready (only woken actions are looked at, in the order they became pending; on a
 *    lost device all, to fail them; GPUHAL__PUMP_ISSUE_BATCH per hold of the issue lock,
 *    harvesting between holds as a submitter does: cuEventQuery), also what a submitter may
 *    not: collectives (NCCL, then cuCtxGetCurrent/cuCtxSetCurrent), a GRAPH built at its
 *    first execute (cuMemAlloc, cuMemcpyHtoD, cuGraphCreate, cuGraphAdd*Node,
 *    cuStreamBeginCapture/EndCapture on a stream of its own, cuGraphDestroy,
 *    cuGraphInstantiateWithFlags), without a pool cuMemAlloc and cuStreamSynchronize +
 *    cuMemFree. It releases retired actions (as a harvester, plus what
 *    is handed to it: cuModuleUnload, cuMemFreeAsync + cuStreamSynchronize), runs calls put
 *    off (in a push/pop of their context; cuDevicePrimaryCtxRelease) and subsystems'
 *    gpuhal__worker_call (setup and teardown: creates and destroys of streams, the pool,
 *    events and graphs, cuStreamSynchronize, cuEventSynchronize; peer access; NCCL). Every
 *    other context-dependent call of a subsystem runs here or in a push/pop of its context.
 *  - the completion thread: a push/pop for its life; cuEventQuery, cuStreamQuery (side work
 *    whose query failed; a side stream an issue or its work failed on, until it drains; a
 *    queue's stream, polled until it drains, when queries of its work keep failing),
 *    cuEventElapsedTime when tracing; never a blocking call. It observes each
 *    queue (lane) on its own: per lane in issue order, one query of the newest covering the
 *    older ones, never waiting on one lane while another has finished work (but in a drain).
 *  - the host-call threads (one per queue, started by its first host call): run
 *    gpuhal_queue_host_call functions in the order they became due; no CUDA call of their own
 *    (a function's gpuhal calls make theirs, a submit's fast path included).
 *  Stream capture (device.h): gpuhal's threads run in CU_STREAM_CAPTURE_MODE_RELAXED for life;
 *  on an application's thread every push/pop relaxes the mode for its length and gives the
 *  caller's back, except the issues above (submitter, signaller), which enqueue only and
 *  relax just around their unsafe calls (event queries, instantiation, the pool's
 *  out-of-memory recovery); the host waiter's queries and the harvest's likewise. So an
 *  application's capture in global mode neither refuses gpuhal's calls nor is invalidated.
 *  No CUDA call is made inside a CUDA callback (gpuhal never uses cuLaunchHostFunc). No
 *  gpuhal thread joins or waits for itself: a device's teardown runs where its last reference
 *  goes, but on a teardown thread if that is one of its own (a host function releasing it).
 *
 * Who advances a semaphore's value: gpuhal__semaphore_advance (or its twin for an observed
 * event, gpuhal__semaphore_advance_from_event; gpuhal_semaphore_signal does the same itself),
 * under the semaphore's lock, stores the value (and, when armed, its device word) and wakes
 * every waiter it satisfies. It is called by whoever learns that the work reaching a value is
 * done: the completion thread, a harvesting submitter or worker, a host waiter or query that
 * saw the value's own event complete (or, waiting, its word pass the value), the host-call
 * thread after a host function, gpuhal_semaphore_signal, or the caller of an alloca or
 * dealloca done at once. GPU work never changes the value the host sees; it only writes the
 * word other GPU work waits on.
 *
 * How a wait is resolved (the action's waits, in order): reached -> nothing; submitted on the
 * action's own stream -> nothing (stream order); submitted elsewhere -> cuStreamWaitEvent on
 * that value's event at issue (no event is held while the action is blocked, so a device's
 * release never waits for another device's pending work); not submitted -> with GPU-resident
 * values (GPUHAL_FEATURE_SEMAPHORE_MEMOPS, the default where supported) and a semaphore whose
 * latest signal came from the host (or that has none), cuStreamWaitValue64 on its word and
 * the action issues at once; submitted only by provisional work (below) -> the same, behind
 * that work's event when it signals exactly this value; otherwise the action waits on the
 * host, registered on the semaphore, until the value is submitted or reached. Work behind a
 * value wait, or behind such work ("provisional"), runs on a side stream that first follows
 * its queue's stream: a queue's stream never waits for a value not submitted, nor on
 * provisional work's event, so nothing queued after such work waits for it unless it waits
 * for its values. A side stream holds one parked action, and what was chained behind it:
 * work of the same queue whose waits imply the parked tail's (gpuhal__action_park_chain), so
 * that it waits for that work's run time at most, never for a value only it brings. GPU
 * work that signals an armed semaphore (by a GPU wait, or by a host waiter that registered
 * before the value was submitted: it then reads the word, not the event) writes the word
 * before its event is recorded (whoever sees the event complete, and may then store a
 * higher value, comes after the write); a semaphore is not armed for the GPU while a signal
 * of it is being issued. An event wait never takes the
 * event of provisional work that signals a higher value (that work may wait for this value).
 * Work too long for a stalled stream is never issued behind a wait that is not met: a GPU
 * holds only so many entries behind a stream's unmet wait (an H200: about 1,020), and CUDA
 * then blocks the enqueueing thread until the wait is met, which may be never when that
 * thread is to signal it. So a STREAM command buffer of more than GPUHAL__PARK_COMMANDS_MAX
 * commands is submitted not provisional (it waits on the host for its values), like a
 * reusable GRAPH one (one launch, but CUDA orders its launches) and alloca readers.
 * At most tuning.gpu_parked_max side streams per ordinal (its gpuhal devices share its
 * context) are busy at once (CUDA shares a few hardware queues among a context's streams:
 * past a few parked ones, other streams' work stalls); beyond the bound work goes behind
 * its queue's newest parked work where its waits imply that work's (local work only, up to
 * GPUHAL__PARK_CHAIN_ENTRIES stream entries on the stream), else, and while CUDA's
 * store of streams and graph executables has less than tuning.park_headroom room left (a
 * step of its growth waits for parked streams; gpuhal grows it ahead while none are:
 * gpuhal__device_room_refill, device.h), it waits on the host as on the event path (and is
 * woken to ask again whenever parked work completes). While
 * any work may wait on the GPU, calls that wait for an idle context (frees, module unloads)
 * are put off driver-wide (gpuhal__device_sync_call); module loads wait for parked work with
 * a bound (gpuhal__device_park_pause); gpuhal's own kernels load at device creation.
 *
 * Failure: a CUDA error fails the action's signal semaphores with the original error (then
 * the operation: gpuhal__action_describe, kind, label, #number, device, queue); an
 * action waiting on a failed semaphore fails with that cause in its message (one blocked on
 * an earlier wait watches its later ones: gpuhal__semaphore_watch_failure; ready work held
 * for room watches all of its waits, and fails at once, not when room comes; work parked on
 * the GPU behind a wait not reached has its signals failed by the completion thread as soon
 * as another input failed, and fails itself once its work ends); a queue call
 * that fails after its arguments were accepted fails its signal semaphores; a sticky error
 * marks the device lost and every pending and later action fails fast with it; a
 * semaphore the application released that nothing left can advance fails with ABORTED
 * (gpuhal__semaphore_abandoned_locked, checked at its release, when a signaller of it is
 * dropped, and when work registers a wait on it), and so does the work waiting on it. A failed
 * semaphore's word is set far above its value, which releases every GPU wait on it; work
 * that ran behind such a wait ("provisional") counts as done only once every value it
 * waited on is known reached on the host side, else it fails with the cause. An issue that
 * fails on a side stream fails its signals at once, and its stream takes nothing more
 * (one without host memory to note a GPU wait fails before enqueuing it: each is noted first);
 * what it enqueued there (a GPU wait whose value has not come) keeps the stream, its
 * parked-stream reservation and a GPU wait counted until the completion thread sees the
 * stream drained (cuStreamQuery), and is let go as a parked action's wait is: by its value,
 * or by its semaphore's failure (when the application releases it with nothing left to
 * signal it, or the device is released).
 *
 * A queue's own stream holds at most tuning.queue_entries_max stream entries (counted from
 * above: gpuhal__action_lane_entries) of work not seen complete, half of what a GPU holds:
 * past about 1,020 CUDA blocks the enqueueing thread until the stream drains, and that
 * thread holds the issue lock, so a long kernel on one queue would hold up every queue's
 * issues, and the submitter's call, for its whole run. Ready work beyond the bound waits
 * on its lane's `held` list (still pending, in the order it became ready: later ready work
 * of the queue, the fast path's too, goes behind it), holding no event, and is issued from
 * there when the completion thread or a harvester sees the queue's work complete and kicks
 * the pump (held_waiting; the completion thread then lets that queue's work age only
 * GPUHAL__HARVEST_MAX_WAIT_NS), or by the next submitter's fast path. A held action whose
 * wait fails meanwhile leaves the list and fails at once (its waits are watched for failure
 * while it is held); nothing is issued for it, so what is issued keeps its order. No thread
 * waits for room; work larger than the bound goes alone once
 * nothing of the queue's own is in flight on its stream. A device's release issues held
 * work as room comes before it aborts what still waits for semaphores; a lost device
 * fails it as all pending work.
 *
 * Harvesting: a thread that keeps submitting on the fast path retires the completed head of
 * its queue's lane itself (one cuEventQuery per look, backing off while the GPU is behind),
 * so a busy steady state needs neither the completion thread nor the worker; so does the
 * worker between turns of a long run of issues (a chain released at once), whose work the
 * completion thread would otherwise poll in many small looks that compete with the issues
 * inside the driver. A look also retires what that work waited for through events of other
 * lanes' own streams (and all issued before it there): its completion proves theirs. The
 * completion thread leaves issued work alone for tuning.completion_min_age_ns, or 3/4 of the
 * usual time of its queue's work where that is longer (lane typical_ns; host calls, idle waits and
 * release cut that short; side work it takes at once): nothing's promptness depends on it. */
#ifndef GPUHAL_SRC_QUEUE_H
#define GPUHAL_SRC_QUEUE_H

#include "internal.h"
#include "device.h"
#include "memory.h"
#include "event_pool.h"
#include "semaphore.h"

/* A host function for gpuhal_queue_host_call: runs on its queue's host-call thread; a
 * returned error fails the call's signal semaphores. A queue's host functions run one at a
 * time, in the order their calls became due, so one must not wait for a host call of its
 * own queue that becomes due after it; host calls of other queues run on threads of their
 * own and may be waited for. */
typedef gpuhal_status_t (*gpuhal_host_fn_t)(void* user);

/* Allocates `size` bytes from the device's stream-ordered pool once `wait` is reached, then
 * signals `signal`. *out_buffer is returned at once; its device address is assigned when the
 * allocation is issued (use it only in queue work ordered after `signal`). Devices without
 * memory pool support allocate synchronously on the worker thread. A `size` over the
 * device's total memory is an argument error (OUT_OF_RANGE, `signal` untouched, as for any
 * invalid argument); one the pool cannot serve when the alloca runs fails `signal` with
 * RESOURCE_EXHAUSTED. */
GPUHAL_API gpuhal_status_t gpuhal_queue_alloca(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                               gpuhal_semaphore_list_t signal, uint64_t size,
                                               gpuhal_buffer_t** out_buffer);
/* Frees `buffer` (from gpuhal_queue_alloca) in stream order once `wait` is reached, then
 * signals `signal`. The call holds a reference to the buffer until then. A second dealloca
 * of one buffer is refused with FAILED_PRECONDITION and fails its `signal`. */
GPUHAL_API gpuhal_status_t gpuhal_queue_dealloca(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                                 gpuhal_semaphore_list_t signal, gpuhal_buffer_t* buffer);
/* Writes a report of every queue operation of `driver` not done yet, for hangs: per device
 * and queue, the last completed operation, then each operation not done in submission
 * order (#number, kind, command buffer label; queued, waiting or issued), each of its waits
 * with the value it needs, the value now and who is expected to reach it (the operation
 * that signals it, issued work, or "nothing queued signals this value"), its signals, and
 * any cycle of waits between operations not issued yet. Written like snprintf: at most
 * `capacity` bytes with the NUL; *out_length (if given) receives the whole length, so a
 * second call with a larger buffer gets all of it. GPUHAL_HANG_REPORT=<seconds> makes a host
 * wait (of semaphores, or gpuhal_device_wait_idle) that has waited that long log it once
 * (warning level). */
GPUHAL_API gpuhal_status_t gpuhal_driver_report_pending(gpuhal_driver_t* driver, char* buffer, size_t capacity,
                                                        size_t* out_length);
/* Runs fn(user) on the queue's host-call thread once `wait` is reached and the work issued
 * on the queue before it has completed, then signals `signal` (or fails it with fn's error).
 * Work of the queue still waiting for its own semaphores is not issued yet and does not
 * hold the call up (no queue operation does): order the call after it with a semaphore.
 * The queue's first host call starts the thread; if that fails, so does the call.
 * CUDA context: fn may call the CUDA driver and gpuhal (gpuhal enters the device's context
 * itself for its own calls). The thread starts with no context current, and gpuhal does
 * not reset what a function leaves current: a function sees no context current unless an
 * earlier function on the same queue left one. A function that calls CUDA itself should
 * push the context it needs (cuCtxPushCurrent) and pop it before it returns. */
GPUHAL_API gpuhal_status_t gpuhal_queue_host_call(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                                  gpuhal_semaphore_list_t signal, gpuhal_host_fn_t fn, void* user);
/* Waits until every queue operation submitted to the device so far is done (completed or
 * failed, its resources released). Returns the loss cause if the device is lost. Called from
 * a host function of one of the device's queues (which is itself an operation not done) it
 * waits for nothing and says FAILED_PRECONDITION. */
GPUHAL_API gpuhal_status_t gpuhal_device_wait_idle(gpuhal_device_t* device, gpuhal_timeout_t timeout);
/* NULL while the device is healthy; after a sticky CUDA error, a clone of the loss cause. */
GPUHAL_API gpuhal_status_t gpuhal_device_lost_status(gpuhal_device_t* device);

/* ---- gpuhal:internal ---- */

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
  /* Optional. How many stream entries (launches, copies, fills) `issue` may enqueue at
   * most; NULL: 1. Bounds what is chained behind one GPU wait (GPUHAL__PARK_CHAIN_ENTRIES). */
  uint32_t (*stream_entries)(void* user);
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
#define GPUHAL__ACTION_ISSUE_BATCH 16          /* free actions the fast path takes per refill */
#define GPUHAL__SIGNAL_ISSUE_MAX 16            /* actions a host signal issues on its thread; the worker the rest */
#define GPUHAL__PUMP_ISSUE_BATCH 32            /* actions the worker issues per hold of the issue lock, then harvests */
#define GPUHAL__RETIRE_BATCH 32                /* retired actions per wake-up of the worker */
#define GPUHAL__RETIRE_MAX_DELAY_NS 1000000    /* the longest retired actions wait for that batch */
#define GPUHAL__COMPLETION_FIRST_SLEEP_NS 2000 /* the completion thread's first sleep between polls */
#define GPUHAL__COMPLETION_SLEEP_FRACTION 16   /* its sleeps may reach this fraction of the oldest's age */
#define GPUHAL__COMPLETION_NAP_NS 50000        /* its nap while work keeps coming, instead of a wake-up */
#define GPUHAL__COMPLETION_ACTIVE_NS 2000000   /* how long after work it keeps napping */
#define GPUHAL__COMPLETION_LOOK_MAX_NS 4000000 /* the longest it leaves a lane's work alone (typical_ns) */
/* A settle waits this long for host functions that run before it leaves them running. */
#define GPUHAL__SETTLE_HOST_FUNCTION_NS 1000000000ll
#define GPUHAL__HARVEST_AGE_NS 10000      /* an action is issued this long before a harvest queries it */
#define GPUHAL__HARVEST_MAX_WAIT_NS 80000 /* below harvest_min in flight: look once the oldest is this old */
#define GPUHAL__HARVEST_MAX_BACKOFF 256   /* fast-path submissions skipped at most after a fruitless look */
#define GPUHAL__HARVEST_MAX_RUN 512       /* actions looked at per look: bounds the time under the lock */
#define GPUHAL__PARK_COMMANDS_MAX 256     /* a longer STREAM command buffer never waits on the GPU (see top) */
#define GPUHAL__PARK_CHAIN_ENTRIES 512    /* stream entries at most behind one parked stream's waits (see top) */
#define GPUHAL__QUEUE_ENTRIES_DEFAULT 512 /* tuning.queue_entries_max: half of what a stream holds (see top) */

struct gpuhal__queue_state_s;

/* How one wait of an action was resolved. */
enum {
  GPUHAL__WAIT_UNRESOLVED = 0,
  GPUHAL__WAIT_NOTHING = 1, /* reached, or implied by another wait of the action: no GPU wait */
  GPUHAL__WAIT_EVENT = 2,   /* submitted elsewhere: cuStreamWaitEvent on its event at issue */
  GPUHAL__WAIT_VALUE = 3,   /* not submitted (memops): cuStreamWaitValue64 on the word at issue */
  GPUHAL__WAIT_STREAM = 4   /* submitted on the queue's own stream: nothing there, an event wait
                               when the action goes to a side stream */
};

/* One wait of an action. */
typedef struct gpuhal__action_wait_s {
  gpuhal__semaphore_waiter_t waiter; /* registered while the action is blocked on this wait */
  /* Linked while the action is blocked on an earlier wait, or held for room
   * (gpuhal__semaphore_watch_failure): this one failing fails the action then, not once the
   * earlier value, or the room, comes. */
  gpuhal__semaphore_waiter_t fail_watch;
  gpuhal_semaphore_t* semaphore; /* retained */
  uint64_t value;
  int kind;               /* GPUHAL__WAIT_* above */
  gpuhal__event_t* event; /* EVENT: retained only between resolving and issuing at once */
  CUdeviceptr word;       /* VALUE: the semaphore's word */
  /* EVENT: 1 + the lane whose own stream recorded the event, and the issue order (seq) of
   * the work that recorded it (0: none, or another device's). This action's work completing
   * proves that lane's work up to cover_seq complete: a harvest takes it too. */
  uint32_t cover_lane;
  uint64_t cover_seq;
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
  int32_t on_woken;   /* on state->woken or in state->woken_order: woken_next / woken_node are in use (atomic) */
  struct gpuhal__action_s* woken_next;
  int in_pending;       /* in state->pending (issue_mutex) */
  uint64_t pending_seq; /* when it entered pending: woken actions are resolved in this order */
  int completed_ok;     /* the work completed and its values were advanced */
  int value_waits;      /* some wait is GPUHAL__WAIT_VALUE */
  int not_provisional;  /* GPUHAL__SUBMIT_NOT_PROVISIONAL */
  int caller_may_issue; /* GPUHAL__SUBMIT_CALLER_MAY_ISSUE: an application thread may issue it */
  int polled;           /* the completion thread found it not done once (lane typical_ns) */
  int fail_watching;    /* its waits' fail_watch nodes are in use (set up once blocked or held) */
  int failed_early;     /* parked work with a failed input: its signals failed already */
  /* In state->woken_order, keyed by the pending_seq it had when it went in. */
  gpuhal__heap_node_t woken_node;
  /* Work done whose inputs are not all seen reached yet (a lane's `deferred`): registered on
   * one of them (input_watched), whose advance or failure wakes the completion thread. */
  gpuhal__semaphore_waiter_t input_watch;
  gpuhal_semaphore_t* input_watched;
  /* Ready, but its queue's stream holds tuning.queue_entries_max entries: it waits, still in
   * `pending`, on its lane's `held` list (issue_mutex), and is issued from there in order,
   * or fails as soon as a wait of it fails (its fail watches wake it). */
  int held;
  gpuhal__list_node_t held_link;
  uint64_t entries_mark; /* its lane's entries_issued once it was issued: seen complete, that many are */
  int park_reserved;     /* holds one of its ordinal's parked streams (gpuhal__action_park_reserve) */
  int park_denied;       /* pending because it could not park: woken when what denied it ends */
  int32_t park_allowed;  /* driver->park_allowed before it last asked to park */
  uint32_t side;         /* 1 + index of its side stream in state->sides (0: none); set at issue, or
                                  at resolve when it is chained (gpuhal__action_park_chain) */
  uint32_t side_entries; /* what it counts in that side stream's `entries` */
  int chain_claim;       /* it holds its side stream's `claim`: resolved to go behind its tail */
  /* During its issue (issue_mutex): a note for each GPU value wait enqueued so far, made
   * before the wait (gpuhal__action_issue_waits); a failed issue leaves them with its side
   * stream, a done one gives them back to state->left_spare. */
  struct gpuhal__side_left_s* left_notes;
  int provisional;             /* it may run on a failed input: a value wait (a failure store releases
                         it), or a wait on provisional work; see gpuhal__action_inputs */
  int foreign_waits;           /* some wait is on an event of another device, which a loss of that
                                  device ends without its work, or on work with such waits: its
                                  inputs are checked as a provisional action's are
                                  (gpuhal__action_inputs) */
  uint32_t shared_signal_refs; /* bit i: signal i uses a wait's semaphore reference */
  gpuhal__action_wait_t* waits;
  gpuhal__timepoint_t* signals;
  CUstream stream;      /* where it was issued: its queue's stream, or a side stream */
  int gpu_wait_counted; /* it adds to the device's count of GPU value waits in flight */
  /* What the completion side reads of every action comes first (fewer cache lines). */
  gpuhal__event_t* event; /* taken before the work, recorded after it (one reference) */
  gpuhal_status_t failure;
  int64_t dispatch_ns;                  /* when it was issued */
  uint64_t seq;                         /* issue order on the device (set when its issue begins) */
  uint64_t submit_number;               /* submission order on the device, from 1 (reports) */
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

/* A GPU value wait that a failed issue left on a side stream (gpuhal__action_issue_failed):
 * it stays there until its value comes. Made before the wait was enqueued (an issue without
 * memory for it fails first), so every such wait has one. `waiter` stands for it among the GPU waits on its
 * semaphore (retained), so that the semaphore, released with nothing left to signal it,
 * fails, which lets the wait go (gpuhal__semaphore_parked_keep); a device's release fails
 * it too, as it does the semaphores parked work waits for. */
typedef struct gpuhal__side_left_s {
  struct gpuhal__side_left_s* next;
  gpuhal_semaphore_t* semaphore;
  gpuhal__semaphore_waiter_t waiter;
} gpuhal__side_left_t;

/* A side stream (memops) and what is on it. It holds one of its ordinal's parked-stream
 * reservations from its first action's issue until it is free again. */
typedef struct gpuhal__side_stream_s {
  CUstream stream;
  uint32_t actions;        /* issued on it, or claimed for it, and not seen complete */
  uint32_t entries;        /* the stream entries those enqueue (gpuhal__action_t.side_entries) */
  gpuhal__action_t* tail;  /* the last action issued on it, until it is seen complete (NULL: none) */
  gpuhal__action_t* claim; /* resolved to go behind `tail`, not issued yet: nothing else may meanwhile */
  /* An issue on it failed, or its work: nothing more goes on it. Once no action is left on
   * it (state->sides_draining), the completion thread asks CUDA whether what the failure
   * left there has drained, and then frees it (gpuhal__side_stream_drained_locked): its
   * reservation, its GPU wait and its `left` go back. */
  int broken;
  /* A failed issue left GPU value waits on it (gpuhal__action_issue_failed): they stay until
   * their values come, and calls that wait for an idle context would wait for them, so the
   * stream keeps one GPU wait counted (gpuhal__memory_gpu_wait_claim) until it drained, or
   * the device's release destroys it. */
  int gpu_wait_held;
  gpuhal__side_left_t* left; /* those waits, until it drained */
} gpuhal__side_stream_t;

typedef struct gpuhal__action_block_s {
  struct gpuhal__action_block_s* next;
  gpuhal__action_t actions[GPUHAL__ACTION_POOL_BLOCK];
} gpuhal__action_block_t;

/* One queue (stream) of the device: its issued actions in issue order. Progress is observed
 * per lane, so no queue waits for another's work. */
typedef struct gpuhal__queue_lane_s {
  gpuhal__list_node_t in_flight;      /* issued, not taken by the completion thread or a harvest (mutex) */
  gpuhal__list_node_t observing;      /* taken by the completion thread; only it touches this list */
  gpuhal__list_node_t deferred;       /* done on the GPU, inputs not known yet (completion thread only) */
  gpuhal__list_node_t side;           /* issued on side streams, not taken yet (mutex) */
  gpuhal__list_node_t side_observing; /* taken: each observed on its own (completion thread only) */
  CUevent side_tail;                  /* recorded on the queue's stream for side work to follow (issue_mutex) */
  uint32_t chain_side;                /* 1 + index of the side stream of the lane's newest parked work, which
                                         later parked work may go behind (0: none; mutex) */
  /* in_flight + side + observing + deferred: written under the mutex only (a plain store), read
   * anywhere (atomic). The completion thread takes what it observed off at the end of its pass
   * (uncounted), so a dispatch pays no locked instruction for it. */
  uint32_t count;
  uint32_t uncounted;      /* observed by the completion thread, not yet taken off count (its own) */
  uint32_t host_calls;     /* host calls in in_flight: taken at once (mutex) */
  int32_t harvesting;      /* a submitter is harvesting this lane (atomic; one at a time) */
  int32_t harvest_skip;    /* fast-path submissions left before the next look (atomic) */
  int32_t harvest_backoff; /* what harvest_skip is set to after a fruitless look */
  int64_t harvest_due_ns;  /* when a look pays even with few actions in flight (atomic hint) */
  int64_t last_harvest_ns; /* when a submitter last retired work of this lane (mutex) */
  uint64_t cover_seq;      /* a harvest's scratch: complete up to this seq, proven by another lane (mutex) */
  uint64_t last_done;      /* submit_number of the last operation that completed (atomic; reports) */
  const char* last_kind;   /* and its kind (atomic) */
  int32_t at_once; /* a call done at once went on the stream since gpuhal_device_wait_idle last saw it run (atomic) */
  /* The bound on the queue's stream (tuning.queue_entries_max). Entries are counted from
   * above when issued (gpuhal__action_lane_entries): entries_issued and stream_mark (its
   * value after the last action issued on the queue's own stream, not a side stream) under
   * issue_mutex; entries_done, the highest entries_mark of its work seen complete, is raised
   * under the mutex and read atomically. Side work counts its follow of the queue's stream
   * (one entry, which its completion proves). Once entries_done reaches stream_mark, nothing
   * of the lane's own is in flight there: the stream is free whatever the count says. */
  uint64_t entries_issued;
  uint64_t stream_mark;
  uint64_t entries_done;
  uint64_t done_seen;       /* the completion thread's own: raised in a pass, published at its end */
  gpuhal__list_node_t held; /* ready actions waiting for room, in the order they became ready (issue_mutex) */
  /* Held actions wait for room (written under the mutex, read atomically): whoever raises
   * entries_done clears it and kicks the pump (gpuhal__lane_done_locked), so the completion
   * thread and harvesters issue nothing. */
  int held_waiting;
  /* How long its actions have taken, from dispatch to seen done (a running average of
   * those the completion thread saw finish; halved by one it found done at its first look;
   * the completion thread's only): it looks at the lane's work once 3/4 of that passed (at
   * most GPUHAL__COMPLETION_LOOK_MAX_NS), and polls it from 1/16 of it on, so work that runs
   * long is polled a few times, not a dozen (gpuhal__completion_take_locked). Stored
   * atomically, for tests that read it. */
  int64_t typical_ns;
  /* Host calls: each queue has a thread of its own for their functions, started by the
   * queue's first host call, so a function that blocks (for a host call of another queue,
   * say) holds up only its own queue's host calls. Under the state's mutex but the thread. */
  struct gpuhal__queue_state_s* state;
  gpuhal__list_node_t host_calls_due; /* host calls whose function is due, in order */
  gpuhal__cond_t host_call_cond;
  int host_call_running; /* its thread is in a function (its signals are due) */
  int32_t in_function;   /* atomic: the application's function itself runs (gpuhal__queue_settle) */
  int host_call_started; /* host_call_thread runs (set under the mutex, once) */
  gpuhal__thread_t host_call_thread;
} gpuhal__queue_lane_t;

typedef struct gpuhal__queue_state_s {
  gpuhal_device_t* device;
  gpuhal_queue_tuning_t tuning; /* device->params.tuning with the defaults filled in */
  int memops;                   /* the driver keeps values in device-mapped words */
  gpuhal__mutex_t mutex;        /* guards the lists and counters below up to `pending` */
  gpuhal__mutex_t issue_mutex;  /* held by whoever issues: the pump, or a submitter's fast path */
  gpuhal__cond_t completion_cond;
  gpuhal__cond_t idle_cond;
  /* A pending report asks the completion thread for the work it watches (its own lists):
   * queue_report.c. Under mutex; report_cond tells the asker it was answered. */
  struct gpuhal__report_request_s* report_request;
  gpuhal__cond_t report_cond;
  gpuhal__queue_lane_t* lanes;  /* device->queue_count */
  gpuhal__list_node_t incoming; /* submitted, not yet seen by the worker */
  gpuhal__list_node_t retired;  /* done; release due on the worker */
  uint64_t outstanding;         /* submitted and not yet released (atomic; drops under mutex) */
  /* Issued work the completion thread's last pass found waiting for a value not seen reached:
   * on a side stream, parked on the GPU (or behind such work), or done behind such inputs.
   * It may never run; a driver's settle leaves it alone, as it does pending work, once a
   * pass that began after the settle did (passes_begun, gpu_blocked_pass) says so: a count
   * from before may miss a signal the application made just before (atomics). */
  uint32_t gpu_blocked;
  uint32_t passes_begun;
  uint32_t gpu_blocked_pass;
  uint32_t incoming_count;   /* length of incoming (atomic; changes under mutex) */
  uint32_t retired_unkicked; /* retired since the worker was last kicked */
  int64_t retired_since_ns;  /* when the first of those was retired */
  gpuhal_status_t lost;      /* the loss cause after a sticky error */
  int32_t lost_flag;         /* lost != NULL, readable without the mutex */
  int32_t issue_needed;      /* new submissions, woken or to-be-failed actions: the pump must look */
  int32_t stopping;          /* device release has begun: no new submissions (atomic) */
  int32_t park_denied;       /* pending actions with park_denied set (atomic) */
  int32_t park_retry;        /* what denied them a park ended while some were: wake them (atomic) */
  int32_t signal_runs;       /* gpuhal__queue_issue_woken calls due on signalling threads (atomic) */
  int completion_sleeping;   /* the completion thread waits untimed: dispatch must wake it */
  int completion_napping;    /* it waits timed: only host calls and idle waiters wake it */
  int inputs_changed;        /* atomic: an input deferred work watches advanced or failed: look again before sleeping */
  int64_t completion_first_sleep_ns; /* its first sleep between polls of the work it took (its own) */
  uint32_t idle_waiters;             /* threads in gpuhal_device_wait_idle: no aging while there are any */
  int abandon_value_waits; /* release: fail what GPU value waits still wait for (and nothing issued here reaches) */
  uint64_t dispatch_seq;   /* actions issued so far, each numbered when its issue begins (issue_mutex) */
  uint64_t submit_count;   /* actions submitted so far (atomic) */
  /* Statistics (atomic): queries, fruitless ones, actions, of those taken from lanes other
   * than the one queried (harvest_covered). */
  uint64_t harvest_looks, harvest_misses, harvested, harvest_covered;
  int threads_stop;
  int held_kick; /* a lane's held work got room: kick the pump once the mutex is let go (mutex) */
  gpuhal__action_t* free_actions;
  gpuhal__action_block_t* action_blocks;
  /* Under issue_mutex. */
  gpuhal__list_node_t pending;  /* waiting for their waits */
  uint64_t pending_seq;         /* the last pending_seq given */
  gpuhal__action_t* woken;      /* a stack of woken pending actions (pushed by any thread, atomic) */
  gpuhal__action_t* issue_free; /* free actions taken in bulk by the fast path (see below) */
  uint32_t held_count;          /* actions on the lanes' `held` lists (issue_mutex) */
  gpuhal__task_t pump_task;     /* posted whenever something changed; the worker dedups it */
  /* The woken actions a pump pass took off the stack and has not resolved yet, by
   * pending_seq: a pass issues GPUHAL__PUMP_ISSUE_BATCH of them, and the rest wait here in
   * order, so that releasing N actions at once costs O(N log N), not a sort per pass. */
  gpuhal__heap_t woken_order;
  gpuhal__event_pool_t events;
  /* Side streams (memops): provisional work runs on one of its own, so that a GPU wait on
   * a value not submitted yet holds up nothing else of its queue (or behind parked work of
   * its queue whose waits its own imply: gpuhal__action_park_chain). Under mutex; a stream
   * is free again once all its work was seen complete. */
  gpuhal__side_stream_t* sides;
  uint32_t* side_free; /* indices into sides */
  uint32_t side_count, side_free_count, side_capacity;
  uint32_t sides_draining; /* broken side streams with no action left on them (mutex) */
  /* The `left` waits of side streams that drained, for the pump to free (mutex): the last
   * release of a semaphore is not for the completion thread. */
  gpuhal__side_left_t* left_drained;
  /* Notes that issues made for their GPU value waits and did not need (issue_mutex): taken
   * first by later ones, so a steady state allocates none. */
  gpuhal__side_left_t* left_spare;
  gpuhal__thread_t completion_thread;
  int threads_started;
} gpuhal__queue_state_t;

GPUHAL__PRIVATE gpuhal__queue_state_t* gpuhal__queue_state(gpuhal_device_t* device);

/* The device's tuning with every default filled in (zero fields take the defaults). */
GPUHAL__PRIVATE gpuhal_queue_tuning_t gpuhal__queue_tuning_resolve(const gpuhal_queue_tuning_t* in);

/* Reserves for `a` one of the streams of the device's ordinal that may park on the GPU (see
 * gpuhal_queue_tuning_t.gpu_parked_max) and counts its GPU wait (gpuhal__memory_gpu_wait_claim):
 * 0, with neither, when all are taken or a call that waits for a whole context is running.
 * The reservation becomes the side stream's at issue, which gives it back once its work is
 * seen complete. Devices of one ordinal share its context, hence its hardware queues and the
 * bound. */
GPUHAL__PRIVATE int gpuhal__action_park_reserve(gpuhal__action_t* a);

/* Gives back `n` reservations of the device's ordinal. */
GPUHAL__PRIVATE void gpuhal__park_release(gpuhal__queue_state_t* state, int32_t n);
/* 1 when work of the device may park at all (the memop path, tuning.gpu_parked_max > 0, a
 * device that allows it): only there is work that could not park counted as denied. */
GPUHAL__PRIVATE int gpuhal__park_possible(const gpuhal__queue_state_t* state);
/* When no parked stream may be reserved for `a`: puts it behind the newest parked work of
 * its queue (the lane's chain_side) instead, if that work's GPU waits are all implied by
 * waits of `a` (same semaphore, at least that value: once `a` could run, so could it, and
 * its own work ends without anything else), it is local work (no collective that may
 * wait for peers), and the stream holds less than GPUHAL__PARK_CHAIN_ENTRIES entries with
 * it. `a` then waits on the GPU at the cost of that work's own run time, instead of on the
 * host: a chain of waits on values that another process or the host signals keeps the GPU
 * busy as a raw stream of value waits would. 1: claimed (a->chain_claim, the GPU wait
 * counted). Under issue_mutex. */
GPUHAL__PRIVATE int gpuhal__action_park_chain(gpuhal__action_t* a);
/* The stream entries `a` puts on a side stream: its waits, the follow of its queue's
 * stream, its work (ops->stream_entries), its signals' value writes and its event. */
GPUHAL__PRIVATE uint32_t gpuhal__action_side_entries(const gpuhal__action_t* a);
/* The entries `a` puts on its queue's stream (tuning.queue_entries_max), counted from above:
 * its waits, its work (ops->stream_entries), its signals' value writes and its event (and
 * a trace's timing events); for side work, its follow of the queue's stream. */
GPUHAL__PRIVATE uint32_t gpuhal__action_lane_entries(const gpuhal__action_t* a);
/* Under the state's mutex: `lane`'s work up to `mark` (an entries_mark) was seen complete.
 * Sets state->held_kick when held work waits for that room (the caller kicks the pump with
 * gpuhal__queue_kick_issue once the mutex is let go). */
GPUHAL__PRIVATE void gpuhal__lane_done_locked(gpuhal__queue_state_t* state, gpuhal__queue_lane_t* lane, uint64_t mark);
/* Gives back a claim of gpuhal__action_park_chain that was not issued. */
GPUHAL__PRIVATE void gpuhal__action_chain_unclaim(gpuhal__action_t* a);
/* Side work `a` is seen complete (`ok`) or failed: it leaves its side stream, which is free
 * again (and gives back its reservation) once nothing else is on it; a broken one (!ok
 * breaks it) once it drained too (state->sides_draining, for the completion thread). Under
 * the state's mutex; returns 1 when the stream became free. */
GPUHAL__PRIVATE int gpuhal__side_stream_leave_locked(gpuhal__queue_state_t* state, gpuhal__action_t* a, int ok);
/* Broken side stream `index`, with no action left on it, drained (CUDA says so): it is free
 * again, its reservation given back, its `left` waits moved to state->left_drained (the
 * caller kicks the pump, which frees them). Returns 1 when it held a GPU wait
 * (gpu_wait_held), which the caller gives back. Under the state's mutex. */
GPUHAL__PRIVATE int gpuhal__side_stream_drained_locked(gpuhal__queue_state_t* state, uint32_t index);
/* Unregisters and frees a list of waits failed issues left (gpuhal__side_left_t), dropping
 * their semaphore references: on the worker, no queue lock held. */
GPUHAL__PRIVATE void gpuhal__side_left_free(gpuhal__queue_state_t* state, gpuhal__side_left_t* left);
/* Sets or clears a->park_denied, keeping state->park_denied and driver->park_denied
 * counted. A denial that something ending since a->park_allowed was read may have lifted
 * asks again at once (gpuhal__driver_park_allowed). */
GPUHAL__PRIVATE void gpuhal__action_park_denied(gpuhal__action_t* a, int denied);
/* The hook of gpuhal__driver_park_allowed: the device's pending actions denied a park are
 * woken to ask again (on the worker, through gpuhal__queue_issue_ready). */
GPUHAL__PRIVATE void gpuhal__queue_park_retry(gpuhal_device_t* device);

/* 1 when the calling thread is one of the queue's own threads (device teardown must not
 * run there: it joins them). */
GPUHAL__PRIVATE int gpuhal__queue_owns_thread(gpuhal_device_t* device);

/* ---- kicking the pump ---- */
/* Makes sure the pump runs (again) on the worker soon. Any thread; no allocation. */
GPUHAL__PRIVATE void gpuhal__queue_kick(gpuhal__queue_state_t* state);

/* Asks the pump to look at the pending actions (not only to release retired ones). */
GPUHAL__PRIVATE void gpuhal__queue_kick_issue(gpuhal__queue_state_t* state);

/* Under the state's mutex (released around the kick): kicks the pump for the actions the
 * completion thread retired and holds back for a batch, if there are any. */
GPUHAL__PRIVATE void gpuhal__queue_kick_retired_locked(gpuhal__queue_state_t* state);

/* Marks `a` for the pump to resolve again and pushes it on the woken stack, so a pump pass
 * looks only at woken actions, never at every blocked one. An action is on the stack (or in
 * a pump's batch) at most once: on_woken guards woken_next. Any thread. */
GPUHAL__PRIVATE void gpuhal__woken_push(gpuhal__queue_state_t* state, gpuhal__action_t* a);
GPUHAL__PRIVATE void gpuhal__action_wake(gpuhal__action_t* a);

/* Enters the pending list; under issue_mutex. */
GPUHAL__PRIVATE void gpuhal__action_make_pending(gpuhal__queue_state_t* state, gpuhal__action_t* a);

GPUHAL__PRIVATE void gpuhal__queue_issue_woken(void* arg);

/* A semaphore an action waits on changed. When a host signal changed it, or an issue
 * submitted a value it waits for, that thread issues what became ready once it released
 * the semaphore (no worker wake-up between a signal and the GPU work it lets go), unless it
 * is a thread of the action's device or cannot take its issue lock at once; otherwise the
 * pump is kicked. */
GPUHAL__PRIVATE void gpuhal__action_wait_notify(gpuhal__semaphore_waiter_t* waiter);
/* The same for a failure watch (gpuhal__action_wait_t.fail_watch): a later wait failed. */
GPUHAL__PRIVATE void gpuhal__action_fail_watch_notify(gpuhal__semaphore_waiter_t* watch);

/* ---- the action pool ---- */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__action_acquire_locked(gpuhal__queue_state_t* state, gpuhal__action_t** out);

GPUHAL__PRIVATE gpuhal_status_t gpuhal__action_reserve(gpuhal__queue_state_t* state, gpuhal__action_t* a,
                                                       uint32_t waits, uint32_t signals);

/* ---- failing and retiring ---- */

/* Hands a finished action to the worker for release. Any thread. */
GPUHAL__PRIVATE void gpuhal__action_retire(gpuhal__action_t* a);

/* Fails every semaphore of `signal` with a clone of `cause` (annotated with `what`): so a
 * queue call that fails after its arguments were accepted tells whoever waits for its
 * signals, and work that would have signalled them fails them the same way. */
GPUHAL__PRIVATE void gpuhal__queue_fail_signals(gpuhal_semaphore_list_t signal, gpuhal_status_t cause, const char* what,
                                                int ordinal, uint32_t queue);

/* Fails every signal of `a` with `cause` (owned; kept in the action) and tells its ops. */
GPUHAL__PRIVATE void gpuhal__action_fail(gpuhal__action_t* a, gpuhal_status_t cause);
/* The signal part of gpuhal__action_fail (`cause` is not taken): its semaphores fail with it. */
GPUHAL__PRIVATE void gpuhal__action_fail_signals(gpuhal__action_t* a, gpuhal_status_t cause);

/* The work reached its values: advance them (host calls: after their function ran). */
GPUHAL__PRIVATE void gpuhal__action_succeed(gpuhal__action_t* a);
/* On the completion thread at the top of its loop, under state->mutex, when
 * state->report_request is set: copies the work it watches into that pending report
 * (queue_report.c) and tells the asker. */
GPUHAL__PRIVATE void gpuhal__queue_report_answer_locked(gpuhal__queue_state_t* state);
/* Records `a` as its queue's last completed operation (reports). */
GPUHAL__PRIVATE void gpuhal__action_note_done(const gpuhal__action_t* a);

/* Marks the device lost (first cause wins) and kicks the pump so pending work fails fast. */
GPUHAL__PRIVATE void gpuhal__queue_mark_lost(gpuhal__queue_state_t* state, gpuhal_status_t cause);

/* A clone of the loss cause, or NULL. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__queue_lost_clone(gpuhal__queue_state_t* state);

/* At submission: takes the semaphore references of the lists, one per wait and one per
 * signal whose semaphore none of the waits has. */
GPUHAL__PRIVATE void gpuhal__action_retain_semaphores(gpuhal__action_t* a);

/* Drops the events that resolved waits hold (an action blocked on a later wait must hold no
 * other device's event: that device's release would wait for it). */
GPUHAL__PRIVATE void gpuhal__action_drop_wait_events(gpuhal__action_t* a);

/* Counts `a` (side work) in (1) or out (0) of the device's work that may wait on the GPU
 * for a value, which puts off frees that would wait for the whole device (memory.h). A
 * free that looked just before such work was enqueued still waits for it: a window of a
 * few instructions against the free's own CUDA call. */
GPUHAL__PRIVATE void gpuhal__action_gpu_wait_count(gpuhal__action_t* a, int in);

/* On the worker (or a harvesting submitter, holding no queue lock): releases a list of
 * retired actions and returns them, and their events, to the pools under one lock each
 * (not one per action: submitters take the state's lock on every submission). */
GPUHAL__PRIVATE void gpuhal__actions_release(gpuhal__queue_state_t* state, gpuhal__list_node_t* retired);

GPUHAL__PRIVATE void gpuhal__list_splice_back(gpuhal__list_node_t* to, gpuhal__list_node_t* from);

/* A failure of a wait of `a` on failed `s`: its cause, then who waited for what. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__action_wait_failure(const gpuhal__action_t* a, gpuhal_status_t cause_clone,
                                                            gpuhal_semaphore_t* s, uint64_t value);
/* Names `a` in failures: "queue 'KIND' 'LABEL' #NUMBER (device D, queue Q)" (the label of its
 * command buffer when it has one). */
enum { GPUHAL__ACTION_WHO_MAX = GPUHAL_LABEL_MAX + 96 };
GPUHAL__PRIVATE void gpuhal__action_describe(const gpuhal__action_t* a, char* out, size_t size);
/* ---- resolving and issuing (the pump on the worker, or a submitter's fast path) ---- */

typedef enum gpuhal__resolve_e {
  GPUHAL__RESOLVE_READY,
  GPUHAL__RESOLVE_BLOCKED,
  GPUHAL__RESOLVE_FAILED
} gpuhal__resolve_t;

/* gpuhal__action_resolve_waits, giving back a parked-stream reservation the action turned
 * out not to need (it keeps it while any wait of it goes to the GPU). */
GPUHAL__PRIVATE gpuhal__resolve_t gpuhal__action_resolve(gpuhal__action_t* a, int take_events,
                                                         gpuhal_status_t* out_failure);

GPUHAL__PRIVATE int gpuhal__timepoint_settled(const gpuhal__timepoint_t* tp);

/* Issues a ready action and puts it on its lane (or fails it). Under issue_mutex with the
 * device's context current. Returns when it was issued (0: it failed). */
GPUHAL__PRIVATE int64_t gpuhal__action_dispatch(gpuhal__queue_state_t* state, gpuhal__action_t* a, uint32_t entries);

/* A submitter's fast path: issues ready `a` (not in `pending`), or, when its queue's stream
 * has no room or earlier ready work of the queue waits for room, puts it in `pending` on
 * its lane's `held` list (tuning.queue_entries_max; the caller then runs
 * gpuhal__queue_issue_ready, which asks for room). Under issue_mutex with the device's
 * context current. Returns when it was issued (0: held, or it failed). */
GPUHAL__PRIVATE int64_t gpuhal__action_issue_or_hold(gpuhal__queue_state_t* state, gpuhal__action_t* a);
/* 1 when some lane holds ready work waiting for room. Under issue_mutex. */
GPUHAL__PRIVATE int gpuhal__queue_holds(const gpuhal__queue_state_t* state);

/* Issues whatever became ready, until a pass finds nothing more or `budget` actions left
 * the pending list (`caller`: see gpuhal__queue_pump_pass); returns 0 when nothing woken is
 * left. Under issue_mutex with the device's context current. */
GPUHAL__PRIVATE int gpuhal__queue_issue_ready(gpuhal__queue_state_t* state, int budget, int caller);

/* Asked for by gpuhal__action_wait_notify on a thread that signalled from the host, once
 * the semaphore's lock is released: issues what the signal made ready here, with the
 * device's context pushed, as a submitter's fast path does (up to GPUHAL__SIGNAL_ISSUE_MAX;
 * the worker takes the rest). The device's own threads, and a thread that finds another
 * issuing, leave it to the worker. The state outlives the call (signal_runs). */
GPUHAL__PRIVATE void gpuhal__queue_issue_woken(void* arg);

GPUHAL__PRIVATE void gpuhal__queue_pump(gpuhal__queue_state_t* state);

GPUHAL__PRIVATE void gpuhal__queue_pump_task(gpuhal__task_t* task);

/* Timepoint callback (under the signalled semaphore's lock, the action alive): 1 when the
 * action's inputs are all reached, so its completed event means its values are reached. */
GPUHAL__PRIVATE int gpuhal__timepoint_settled(const gpuhal__timepoint_t* tp);

GPUHAL__PRIVATE void* gpuhal__completion_main(void* arg);

/* ---- the host-call threads ---- */
GPUHAL__PRIVATE void* gpuhal__host_call_main(void* arg);
/* Starts `queue`'s host-call thread unless it runs (gpuhal_queue_host_call calls it before
 * submitting, on any thread, a host function included). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__queue_host_call_thread_start(gpuhal__queue_state_t* state, uint32_t queue);

/* After a fast-path issue on `queue` (at `now`, 0 if unknown), on the submitting thread,
 * with no queue lock held. */
GPUHAL__PRIVATE void gpuhal__queue_harvest(gpuhal__queue_state_t* state, uint32_t queue, int64_t now);

/* The common argument checks of every queue operation; names `func` in messages. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__queue_validate(const char* func, gpuhal_device_t* device, uint32_t queue_index,
                                                       gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal);

/* gpuhal__queue_submit with GPUHAL__SUBMIT_* flags. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__queue_submit_ex(gpuhal_device_t* device, uint32_t queue_index,
                                                        gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal,
                                                        const gpuhal__action_ops_t* ops, void* user, unsigned flags);

/* ---- idle, loss ---- */
/* Waits, up to `timeout`, until every action that is not blocked on a semaphore has been
 * released: issued work finished and the references it held dropped. For the application's
 * last release (device.h); actions still blocked (pending, or issued behind a GPU wait for
 * a value not reached: state->gpu_blocked) are left for device release, and so are host
 * calls whose function still runs after GPUHAL__SETTLE_HOST_FUNCTION_NS (the application's
 * code: it may wait for the application). */
GPUHAL__PRIVATE void gpuhal__queue_settle(gpuhal_device_t* device, gpuhal_timeout_t timeout);
/* ---- the device hooks ---- */

GPUHAL__PRIVATE gpuhal_status_t gpuhal__queue_state_create(gpuhal_device_t* device);

/* Device release: finishes issued work, fails work that never became ready, joins the
 * threads, frees everything. Called by device.h with the worker still running. */
GPUHAL__PRIVATE void gpuhal__queue_state_destroy(gpuhal_device_t* device);

#endif /* GPUHAL_SRC_QUEUE_H */
