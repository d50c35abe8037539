/* semaphore: timeline semaphores (DESIGN §5).
 *
 * A semaphore holds a 64-bit value that only grows, or a failure status. It belongs to
 * the driver, so every device of that driver may wait on it and signal it. The host signals
 * and waits with the functions below; the queue (queue.h) signals it from GPU work and turns
 * GPU-side waits into cuStreamWaitEvent on the event of the work that reaches the value. */

typedef struct gpuhal_semaphore_s gpuhal_semaphore_t;

/* A list of (semaphore, value) pairs: `count` entries of `semaphores` and `values`. */
typedef struct gpuhal_semaphore_list_t {
  uint32_t count;
  gpuhal_semaphore_t* const* semaphores;
  const uint64_t* values;
} gpuhal_semaphore_list_t;

typedef enum gpuhal_wait_mode_e {
  GPUHAL_WAIT_ALL = 0, /* every entry reached its value */
  GPUHAL_WAIT_ANY = 1  /* at least one entry reached its value */
} gpuhal_wait_mode_t;

/* A new semaphore of `driver` holding `initial_value`. */
GPUHAL_API gpuhal_status_t gpuhal_semaphore_create(gpuhal_driver_t* driver, uint64_t initial_value,
                                                   gpuhal_semaphore_t** out_semaphore);
GPUHAL_API void gpuhal_semaphore_retain(gpuhal_semaphore_t* semaphore);
/* Releasing NULL is a no-op. Queue operations that wait on or signal a semaphore hold their
 * own reference until they are done. */
GPUHAL_API void gpuhal_semaphore_release(gpuhal_semaphore_t* semaphore);
/* The current (completed) value; a failed semaphore returns a clone of its failure status. */
GPUHAL_API gpuhal_status_t gpuhal_semaphore_query(gpuhal_semaphore_t* semaphore, uint64_t* out_value);
/* Host signal: sets the value to `value`, which must be above the current one
 * (FAILED_PRECONDITION otherwise). Wakes every waiter it satisfies. */
GPUHAL_API gpuhal_status_t gpuhal_semaphore_signal(gpuhal_semaphore_t* semaphore, uint64_t value);
/* Fails the semaphore. Takes ownership of `cause` (NULL becomes a generic ABORTED cause);
 * the first cause wins. Every waiter, host or queue, fails with a message carrying it. */
GPUHAL_API void gpuhal_semaphore_fail(gpuhal_semaphore_t* semaphore, gpuhal_status_t cause);
/* Waits until the semaphore reaches `value`. DEADLINE_EXCEEDED when the timeout passes
 * first (an immediate timeout never blocks); the failure cause when the semaphore fails. */
GPUHAL_API gpuhal_status_t gpuhal_semaphore_wait(gpuhal_semaphore_t* semaphore, uint64_t value,
                                                 gpuhal_timeout_t timeout);
/* Waits until every (GPUHAL_WAIT_ALL) or any (GPUHAL_WAIT_ANY) entry reached its value.
 * An empty list is satisfied at once. A failed entry fails the wait (for ANY only when no
 * entry is satisfied). */
GPUHAL_API gpuhal_status_t gpuhal_semaphores_wait(gpuhal_wait_mode_t mode, gpuhal_semaphore_list_t list,
                                                  gpuhal_timeout_t timeout);
/* A list with no entries. */
GPUHAL_API gpuhal_semaphore_list_t gpuhal_semaphore_list_empty(void);
/* A list with one entry; both pointers must stay valid while the list is used. */
GPUHAL_API gpuhal_semaphore_list_t gpuhal_semaphore_list_one(gpuhal_semaphore_t* const* semaphore,
                                                             const uint64_t* value);

/* ---- gpuhal:implementation ---- */

#define GPUHAL__MAGIC_SEMAPHORE 0x414D4553u /* "SEMA" */

#include <sched.h>

/* A host wait on a value whose work is submitted waits on that value's own recorded event,
 * on the waiting thread, in three phases (DESIGN §6's host-waiter fast path):
 *  1. poll it (cuEventQuery) for GPUHAL_HOST_WAIT_SPIN_NS: a short op's round trip against
 *     a raw cuEventSynchronize lives in this window;
 *  2. optionally, keep polling, yielding the CPU between polls, up to GPUHAL_HOST_WAIT_YIELD_NS
 *     after the start (0, the default, or anything at or below the spin window: no such
 *     phase). Off by default: on 2 H200s a waiter polling back to back for 2 ms slowed the
 *     NCCL launches of the device's worker (4 MiB all-reduces at 0.88-0.90 of raw NCCL's
 *     bandwidth against 0.94 without it), while phase 3 alone kept a 1000-node graph's
 *     replay (735 us) at 1.01x the raw cuStreamSynchronize;
 *  3. with blocking-sync events (GPUHAL_QUEUE_EVENT_FLAGS; not the default, see event_pool.h),
 *     an infinite timeout and one event to wait for: block in cuEventSynchronize on that
 *     event, woken by the driver. Otherwise, when the waiter needs only that event (a wait
 *     on one value, or ALL), keep polling it between sleeps that grow with the time already
 *     waited (1/GPUHAL_HOST_WAIT_SLEEP_FRACTION of it, at least 10 us, at most
 *     GPUHAL_HOST_WAIT_MAX_SLEEP_NS): the wake-up comes within a small fraction of the
 *     wait's length, and a long wait costs almost no CPU. On 2 H200s, leaving this phase to
 *     the completion thread (the semaphore's condition variable, polled at most every
 *     GPUHAL_COMPLETION_MAX_SLEEP_NS) kept 64 MiB all-reduces at 0.95 of raw NCCL's bus
 *     bandwidth; this phase brought them to 0.98. Waits on ANY of several values sleep on
 *     the condition variable until the completion thread advances a semaphore, fails it,
 *     or the timeout passes.
 * Every phase ends early when the value is reached another way or the semaphore fails,
 * except the blocking cuEventSynchronize: there a failure is seen once the event's work is
 * done (that work always finishes: it waits only on work already recorded). */
#ifndef GPUHAL_HOST_WAIT_SPIN_NS
#define GPUHAL_HOST_WAIT_SPIN_NS 200000
#endif
#ifndef GPUHAL_HOST_WAIT_YIELD_NS
#define GPUHAL_HOST_WAIT_YIELD_NS 0
#endif
#ifndef GPUHAL_HOST_WAIT_SLEEP_FRACTION
#define GPUHAL_HOST_WAIT_SLEEP_FRACTION 64
#endif
#ifndef GPUHAL_HOST_WAIT_MAX_SLEEP_NS
#define GPUHAL_HOST_WAIT_MAX_SLEEP_NS 1000000
#endif
#ifndef GPUHAL_HOST_WAIT_BLOCK
#define GPUHAL_HOST_WAIT_BLOCK 1 /* 0: phase 3 always sleeps on the condition variable */
#endif

/* A registration on a semaphore. `notify` runs under the semaphore's lock (so it must not
 * call back into the semaphore) when the value reaches `value`, when a submitted timepoint
 * at or above `value` appears (only if `wants_submitted`), or when the semaphore fails.
 * The registration is removed before `notify` runs. */
typedef struct gpuhal__semaphore_waiter_s {
  gpuhal__list_node_t link; /* in semaphore->waiters; self-linked while not registered */
  uint64_t value;
  int wants_submitted;
  void (*notify)(struct gpuhal__semaphore_waiter_s* waiter);
  void* user;
} gpuhal__semaphore_waiter_t;

/* A pending value whose GPU work is issued and whose event is recorded ("submitted").
 * Owned by the queue action that signals it (embedded, so timepoints come from the action
 * pool); linked into semaphore->timepoints (sorted by value) until the value completes,
 * the semaphore fails, or the action retires. */
typedef struct gpuhal__timepoint_s {
  gpuhal__list_node_t link;
  gpuhal_semaphore_t* semaphore; /* retained by the owning action */
  uint64_t value;
  gpuhal__event_t* event; /* the action's event; the action holds the reference */
} gpuhal__timepoint_t;

struct gpuhal_semaphore_s {
  gpuhal__object_t object;
  gpuhal_driver_t* driver;
  gpuhal_allocator_t allocator;
  gpuhal__mutex_t mutex;
  uint64_t value;          /* completed value; written under mutex, read atomically */
  gpuhal_status_t failure; /* NULL while healthy; first cause wins */
  gpuhal__list_node_t timepoints;
  gpuhal__list_node_t waiters;
  /* The newest submitted timepoint, readable without the mutex (a sequence lock: written
   * under the mutex, `newest_seq` odd while it changes): lets a queue action whose wait is
   * covered by work already issued on its own stream skip the lock (see
   * gpuhal__semaphore_covered_on_stream). */
  uint32_t newest_seq;
  uint64_t newest_value; /* 0: no submitted timepoint */
  CUstream newest_stream;
};

static void gpuhal__semaphore_waiter_init(gpuhal__semaphore_waiter_t* w) { gpuhal__list_init(&w->link); }
static int gpuhal__semaphore_waiter_registered(const gpuhal__semaphore_waiter_t* w) {
  return !gpuhal__list_empty(&w->link);
}

/* Under the lock: the waiters satisfied by (value, submitted_value, failed) are unlinked and
 * notified. `submitted_value` is the value of a newly submitted timepoint (0: none). */
static void gpuhal__semaphore_notify_locked(gpuhal_semaphore_t* s, uint64_t submitted_value) {
  gpuhal__list_node_t* n = s->waiters.next;
  while (n != &s->waiters) {
    gpuhal__list_node_t* next = n->next;
    gpuhal__semaphore_waiter_t* w = GPUHAL__CONTAINER_OF(n, gpuhal__semaphore_waiter_t, link);
    int hit = s->failure != NULL || s->value >= w->value ||
              (w->wants_submitted && submitted_value >= w->value);
    if (hit) {
      gpuhal__list_remove(&w->link);
      w->notify(w);
    }
    n = next;
  }
}

/* Under the lock: republishes the newest submitted timepoint after the list changed. */
static void gpuhal__semaphore_publish_newest_locked(gpuhal_semaphore_t* s) {
  const gpuhal__timepoint_t* newest =
      gpuhal__list_empty(&s->timepoints) ? NULL : GPUHAL__CONTAINER_OF(s->timepoints.prev, gpuhal__timepoint_t, link);
  uint64_t value = newest ? newest->value : 0;
  CUstream stream = newest ? newest->event->stream : NULL;
  uint32_t seq = __atomic_load_n(&s->newest_seq, __ATOMIC_RELAXED);
  if (value == gpuhal__atomic_load(&s->newest_value) && stream == gpuhal__atomic_load(&s->newest_stream)) return;
  __atomic_store_n(&s->newest_seq, seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&s->newest_value, value, __ATOMIC_RELAXED);
  __atomic_store_n(&s->newest_stream, stream, __ATOMIC_RELAXED);
  __atomic_store_n(&s->newest_seq, seq + 2, __ATOMIC_RELEASE);
}

/* Without the lock: 1 when a wait for `value` needs nothing on `stream`: the value is
 * reached, or the newest submitted timepoint, at or above it, was recorded on that stream
 * (work issued there later runs after it). 0 when that cannot be told this way: ask
 * gpuhal__semaphore_check. A failure seen or not here is the same race as with the lock. */
static int gpuhal__semaphore_covered_on_stream(gpuhal_semaphore_t* s, uint64_t value, CUstream stream) {
  uint32_t seq;
  uint64_t newest_value;
  CUstream newest_stream;
  if (gpuhal__atomic_load(&s->failure) != NULL) return 0;
  if (gpuhal__atomic_load(&s->value) >= value) return 1;
  seq = __atomic_load_n(&s->newest_seq, __ATOMIC_ACQUIRE);
  if (seq & 1u) return 0;
  newest_value = __atomic_load_n(&s->newest_value, __ATOMIC_RELAXED);
  newest_stream = __atomic_load_n(&s->newest_stream, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  if (__atomic_load_n(&s->newest_seq, __ATOMIC_RELAXED) != seq) return 0;
  return newest_stream == stream && stream != NULL && newest_value >= value;
}

/* Under the lock: forgets timepoints at or below the completed value. */
static void gpuhal__semaphore_drop_completed_timepoints_locked(gpuhal_semaphore_t* s) {
  while (!gpuhal__list_empty(&s->timepoints)) {
    gpuhal__timepoint_t* tp = GPUHAL__CONTAINER_OF(s->timepoints.next, gpuhal__timepoint_t, link);
    if (tp->value > s->value) break;
    gpuhal__list_remove(&tp->link);
  }
  gpuhal__semaphore_publish_newest_locked(s);
}

/* Raises the value to `value` (no-op if not above, or failed) and wakes who it satisfies.
 * The completion path and host waiters that saw the event complete call this. */
static void gpuhal__semaphore_advance(gpuhal_semaphore_t* s, uint64_t value) {
  gpuhal__mutex_lock(&s->mutex);
  if (!s->failure && value > s->value) {
    gpuhal__atomic_store(&s->value, value);
    gpuhal__semaphore_drop_completed_timepoints_locked(s);
    gpuhal__semaphore_notify_locked(s, 0);
  }
  gpuhal__mutex_unlock(&s->mutex);
}

/* Publishes a submitted timepoint: GPU waits on values up to tp->value may now be turned
 * into stream waits on its event. A value that is already complete is not published. */
static void gpuhal__semaphore_add_timepoint(gpuhal_semaphore_t* s, gpuhal__timepoint_t* tp) {
  gpuhal__list_node_t* n;
  gpuhal__mutex_lock(&s->mutex);
  if (s->failure || tp->value <= s->value) {
    gpuhal__mutex_unlock(&s->mutex);
    return;
  }
  /* Sorted insert, searching from the back: values are mostly signalled in order. */
  n = s->timepoints.prev;
  while (n != &s->timepoints && GPUHAL__CONTAINER_OF(n, gpuhal__timepoint_t, link)->value > tp->value) n = n->prev;
  tp->link.prev = n;
  tp->link.next = n->next;
  n->next->prev = &tp->link;
  n->next = &tp->link;
  gpuhal__semaphore_publish_newest_locked(s);
  gpuhal__semaphore_notify_locked(s, tp->value);
  gpuhal__mutex_unlock(&s->mutex);
}

static void gpuhal__semaphore_remove_timepoint(gpuhal__timepoint_t* tp) {
  gpuhal_semaphore_t* s = tp->semaphore;
  gpuhal__mutex_lock(&s->mutex);
  gpuhal__list_remove(&tp->link);
  gpuhal__semaphore_publish_newest_locked(s);
  gpuhal__mutex_unlock(&s->mutex);
}

/* Fails the semaphore with `cause` (owned); keeps the first cause. */
static void gpuhal__semaphore_fail_owned(gpuhal_semaphore_t* s, gpuhal_status_t cause) {
  if (!cause) cause = gpuhal_status_make(GPUHAL_STATUS_ABORTED, "semaphore failed without a cause");
  gpuhal__mutex_lock(&s->mutex);
  if (s->failure) {
    gpuhal__mutex_unlock(&s->mutex);
    gpuhal_status_free(cause);
    return;
  }
  gpuhal__atomic_store(&s->failure, cause); /* host waiters read it without the mutex */
  while (!gpuhal__list_empty(&s->timepoints)) gpuhal__list_pop_front(&s->timepoints);
  gpuhal__semaphore_publish_newest_locked(s);
  gpuhal__semaphore_notify_locked(s, 0);
  gpuhal__mutex_unlock(&s->mutex);
}

/* What a wait on (semaphore, value) can do right now. */
typedef enum gpuhal__wait_state_e {
  GPUHAL__WAIT_COMPLETED = 0, /* the value is reached */
  GPUHAL__WAIT_SUBMITTED = 1, /* work reaching it is issued: *out_event is retained for the caller */
  GPUHAL__WAIT_PENDING = 2,   /* neither; `waiter` (if given) is registered */
  GPUHAL__WAIT_FAILED = 3     /* the semaphore failed: *out_status is a clone of the cause */
} gpuhal__wait_state_t;

/* Checks (semaphore, value) and, when pending, registers `waiter` (if not NULL and not
 * registered already) in the same critical section, so no change is missed. With
 * out_event NULL, submitted timepoints are not looked at. A submitted value whose event
 * was recorded on `order_stream` (NULL: none) is SUBMITTED without an event: work issued
 * on that stream after now is ordered after it anyway. */
static gpuhal__wait_state_t gpuhal__semaphore_check(gpuhal_semaphore_t* s, uint64_t value,
                                                     gpuhal__semaphore_waiter_t* waiter, CUstream order_stream,
                                                     gpuhal__event_t** out_event, uint64_t* out_event_value,
                                                     gpuhal_status_t* out_status) {
  gpuhal__wait_state_t state = GPUHAL__WAIT_PENDING;
  gpuhal__mutex_lock(&s->mutex);
  if (s->failure) {
    if (out_status) *out_status = gpuhal_status_clone(s->failure);
    state = GPUHAL__WAIT_FAILED;
  } else if (s->value >= value) {
    state = GPUHAL__WAIT_COMPLETED;
  } else {
    gpuhal__list_node_t* n;
    if (out_event) {
      /* The earliest submitted timepoint at or above `value`: search from the newest, since
       * a chain waits on the value just submitted while many older ones are in flight. */
      gpuhal__timepoint_t* best = NULL;
      for (n = s->timepoints.prev; n != &s->timepoints; n = n->prev) {
        gpuhal__timepoint_t* tp = GPUHAL__CONTAINER_OF(n, gpuhal__timepoint_t, link);
        if (tp->value < value) break;
        best = tp;
      }
      if (best) {
        if (!order_stream || best->event->stream != order_stream) {
          gpuhal__event_retain(best->event);
          *out_event = best->event;
        }
        if (out_event_value) *out_event_value = best->value;
        state = GPUHAL__WAIT_SUBMITTED;
      }
    }
    if (state == GPUHAL__WAIT_PENDING && waiter && !gpuhal__semaphore_waiter_registered(waiter)) {
      waiter->value = value;
      gpuhal__list_push_back(&s->waiters, &waiter->link);
    }
  }
  gpuhal__mutex_unlock(&s->mutex);
  return state;
}

static void gpuhal__semaphore_unregister(gpuhal_semaphore_t* s, gpuhal__semaphore_waiter_t* waiter) {
  gpuhal__mutex_lock(&s->mutex);
  gpuhal__list_remove(&waiter->link);
  gpuhal__mutex_unlock(&s->mutex);
}

/* A failure status for a waiter of a failed semaphore: the cause first, then who waited. */
static gpuhal_status_t gpuhal__semaphore_failure_for(gpuhal_status_t cause_clone, const char* who, uint64_t value) {
  return gpuhal_status_annotate(cause_clone, "while %s waited for a semaphore to reach %llu", who,
                                (unsigned long long)value);
}

/* ---- public: lifetime and host signalling ---- */

GPUHAL_API gpuhal_status_t gpuhal_semaphore_create(gpuhal_driver_t* driver, uint64_t initial_value,
                                                   gpuhal_semaphore_t** out_semaphore) {
  gpuhal_semaphore_t* s = NULL;
  GPUHAL__CHECK_ARG(out_semaphore != NULL, "out_semaphore", "must not be NULL");
  *out_semaphore = NULL;
  GPUHAL__CHECK_OBJECT(driver, GPUHAL__MAGIC_DRIVER);
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_alloc(&driver->objects, GPUHAL__MAGIC_SEMAPHORE, sizeof(*s),
                                               "gpuhal_semaphore_create: semaphore", (void**)&s));
  gpuhal__object_init(&s->object, GPUHAL__MAGIC_SEMAPHORE);
  gpuhal__driver_retain_ref(driver); /* a semaphore may outlive the user's driver reference */
  s->driver = driver;
  s->allocator = driver->allocator;
  gpuhal__mutex_init(&s->mutex);
  s->value = initial_value;
  gpuhal__list_init(&s->timepoints);
  gpuhal__list_init(&s->waiters);
  *out_semaphore = s;
  return NULL;
}

GPUHAL_API void gpuhal_semaphore_retain(gpuhal_semaphore_t* semaphore) {
  if (!gpuhal__object_is_live(semaphore, GPUHAL__MAGIC_SEMAPHORE)) return;
  gpuhal__object_user_retain(&semaphore->object);
}

/* gpuhal's own references (queue actions take theirs with gpuhal__object_retain). */
static void gpuhal__semaphore_release_ref(gpuhal_semaphore_t* semaphore) {
  if (!gpuhal__object_release(&semaphore->object)) return;
  /* Nothing can be registered now: waiters and actions hold references. */
  GPUHAL_ASSERT(gpuhal__list_empty(&semaphore->waiters));
  gpuhal_status_free(semaphore->failure);
  semaphore->failure = NULL;
  gpuhal__mutex_destroy(&semaphore->mutex);
  {
    gpuhal_driver_t* driver = semaphore->driver;
    gpuhal__object_free(&driver->objects, GPUHAL__MAGIC_SEMAPHORE, semaphore);
    gpuhal__driver_release_ref(driver);
  }
}

GPUHAL_API void gpuhal_semaphore_release(gpuhal_semaphore_t* semaphore) {
  /* NULL or a released handle: ignore rather than crash */
  if (!gpuhal__object_is_live(semaphore, GPUHAL__MAGIC_SEMAPHORE)) return;
  if (!gpuhal__object_user_release(&semaphore->object)) {
    gpuhal__log_extra_release(&semaphore->driver->logger, __func__, "a semaphore");
    return;
  }
  gpuhal__semaphore_release_ref(semaphore);
}

/* Looks at the newest submitted value's event (one cuEventQuery; never blocks) and advances
 * the semaphore if that work is done, so a query is current even before the completion
 * thread gets there: after waiting on work that depended on this value, a query shows it. */
static void gpuhal__semaphore_poll(gpuhal_semaphore_t* s) {
  gpuhal__event_t* event = NULL;
  uint64_t value = 0;
  gpuhal__mutex_lock(&s->mutex);
  if (!s->failure && !gpuhal__list_empty(&s->timepoints)) {
    gpuhal__timepoint_t* newest = GPUHAL__CONTAINER_OF(s->timepoints.prev, gpuhal__timepoint_t, link);
    event = newest->event;
    value = newest->value;
    gpuhal__event_retain(event);
  }
  gpuhal__mutex_unlock(&s->mutex);
  if (!event) return;
  if (gpuhal__event_query(event) == 0) gpuhal__semaphore_advance(s, value);
  gpuhal__event_release(event);
}

GPUHAL_API gpuhal_status_t gpuhal_semaphore_query(gpuhal_semaphore_t* semaphore, uint64_t* out_value) {
  gpuhal_status_t failure = NULL;
  GPUHAL__CHECK_ARG(out_value != NULL, "out_value", "must not be NULL");
  *out_value = 0;
  GPUHAL__CHECK_OBJECT(semaphore, GPUHAL__MAGIC_SEMAPHORE);
  gpuhal__semaphore_poll(semaphore);
  gpuhal__mutex_lock(&semaphore->mutex);
  if (semaphore->failure) failure = gpuhal_status_clone(semaphore->failure);
  *out_value = semaphore->value;
  gpuhal__mutex_unlock(&semaphore->mutex);
  return failure;
}

GPUHAL_API gpuhal_status_t gpuhal_semaphore_signal(gpuhal_semaphore_t* semaphore, uint64_t value) {
  gpuhal_status_t result = NULL;
  GPUHAL__CHECK_OBJECT(semaphore, GPUHAL__MAGIC_SEMAPHORE);
  gpuhal__mutex_lock(&semaphore->mutex);
  if (semaphore->failure) {
    result = gpuhal_status_annotate(gpuhal_status_clone(semaphore->failure),
                                    "gpuhal_semaphore_signal: the semaphore has failed");
  } else if (value <= semaphore->value) {
    result = gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                                "gpuhal_semaphore_signal: argument 'value' (%llu) must be above the current "
                                "value (%llu): timeline values only grow",
                                (unsigned long long)value, (unsigned long long)semaphore->value);
  } else {
    gpuhal__atomic_store(&semaphore->value, value);
    gpuhal__semaphore_drop_completed_timepoints_locked(semaphore);
    gpuhal__semaphore_notify_locked(semaphore, 0);
  }
  gpuhal__mutex_unlock(&semaphore->mutex);
  return result;
}

GPUHAL_API void gpuhal_semaphore_fail(gpuhal_semaphore_t* semaphore, gpuhal_status_t cause) {
  gpuhal_status_t bad = gpuhal__object_check(semaphore, GPUHAL__MAGIC_SEMAPHORE, __func__, "semaphore");
  if (bad) {
    gpuhal_status_free(bad);
    gpuhal_status_free(cause);
    return;
  }
  gpuhal__semaphore_fail_owned(semaphore, cause);
}

GPUHAL_API gpuhal_semaphore_list_t gpuhal_semaphore_list_empty(void) {
  gpuhal_semaphore_list_t list;
  list.count = 0;
  list.semaphores = NULL;
  list.values = NULL;
  return list;
}

GPUHAL_API gpuhal_semaphore_list_t gpuhal_semaphore_list_one(gpuhal_semaphore_t* const* semaphore,
                                                             const uint64_t* value) {
  gpuhal_semaphore_list_t list;
  list.count = (semaphore && value) ? 1u : 0u;
  list.semaphores = semaphore;
  list.values = value;
  return list;
}

/* ---- host waits ----
 * A host wait registers one waiter node per entry on the entry's semaphore; the nodes share
 * one mutex + condition variable, on which the waiting thread sleeps. Notifiers run under
 * the semaphore's lock and take the shared mutex to update the count, so once the waiting
 * thread has unregistered every node (under each semaphore's lock) no notifier can still be
 * touching its stack. */
typedef struct gpuhal__host_wait_s {
  gpuhal__mutex_t mutex;
  gpuhal__cond_t cond;
  uint32_t notified; /* nodes notified so far */
} gpuhal__host_wait_t;

static void gpuhal__host_wait_notify(gpuhal__semaphore_waiter_t* waiter) {
  gpuhal__host_wait_t* hw = (gpuhal__host_wait_t*)waiter->user;
  gpuhal__mutex_lock(&hw->mutex);
  hw->notified++;
  gpuhal__cond_signal(&hw->cond);
  gpuhal__mutex_unlock(&hw->mutex);
}

/* Phase 3 without a blocking event: polls `event` between sleeps that grow with the time
 * waited since `start`. Returns as gpuhal__event_query (1: still pending when the value was
 * reached another way, the semaphore failed or the timeout passed). */
static int gpuhal__semaphore_sleep_poll_event(gpuhal_semaphore_t* s, uint64_t value, gpuhal__event_t* event,
                                             int64_t start, gpuhal_timeout_t timeout) {
  int infinite = gpuhal__timeout_is_infinite(timeout);
  for (;;) {
    int64_t now = gpuhal_now_ns();
    int64_t sleep_ns = (now - start) / GPUHAL_HOST_WAIT_SLEEP_FRACTION;
    int r;
    if (sleep_ns < 10000) sleep_ns = 10000;
    if (sleep_ns > GPUHAL_HOST_WAIT_MAX_SLEEP_NS) sleep_ns = GPUHAL_HOST_WAIT_MAX_SLEEP_NS;
    if (!infinite) {
      if (now >= timeout.deadline_ns) return 1;
      if (sleep_ns > timeout.deadline_ns - now) sleep_ns = timeout.deadline_ns - now;
    }
    gpuhal__sleep_ns(sleep_ns);
    r = gpuhal__event_query(event);
    if (r != 1) return r;
    if (gpuhal__atomic_load(&s->value) >= value || gpuhal__atomic_load(&s->failure) != NULL) return 1;
  }
}

/* Waits for the event that reaches `event_value` on this thread (the phases above); once
 * it completed, the value is advanced right here (the work that reaches it is done), without
 * waiting for the completion thread to wake us. Returns 1 when it completed, 0 when the
 * window or the timeout passed first, or the query failed (errors are the completion
 * thread's to report). `may_block` allows phase 3. Consumes the event reference. */
static int gpuhal__semaphore_await_event(gpuhal_semaphore_t* s, uint64_t value, gpuhal__event_t* event,
                                         uint64_t event_value, gpuhal_timeout_t timeout, int may_block) {
  int64_t start = gpuhal_now_ns();
  int64_t spin_end = start + GPUHAL_HOST_WAIT_SPIN_NS;
  int64_t yield_end = start + GPUHAL_HOST_WAIT_YIELD_NS;
  int infinite = gpuhal__timeout_is_infinite(timeout);
  int r;
  if (yield_end < spin_end) yield_end = spin_end;
  if (!infinite && timeout.deadline_ns < spin_end) spin_end = timeout.deadline_ns;
  if (!infinite && timeout.deadline_ns < yield_end) yield_end = timeout.deadline_ns;
  for (;;) {
    int64_t now;
    r = gpuhal__event_query(event);
    if (r != 1) break;
    /* Reached through another path (the completion thread, a host signal) or failed. */
    if (gpuhal__atomic_load(&s->value) >= value || gpuhal__atomic_load(&s->failure) != NULL) break;
    now = gpuhal_now_ns();
    if (now >= yield_end) break;
    if (now >= spin_end) sched_yield();
  }
  if (r == 1 && may_block && infinite && GPUHAL_HOST_WAIT_BLOCK && (event->pool->flags & CU_EVENT_BLOCKING_SYNC) &&
      gpuhal__atomic_load(&s->value) < value && gpuhal__atomic_load(&s->failure) == NULL) {
    /* cuEventSynchronize needs no current context. The event stays recorded as it is while
     * we hold our reference (the pool reuses it only after the last one is dropped). */
    r = event->pool->device->cu->cuEventSynchronize(event->handle) == CUDA_SUCCESS ? 0 : -1;
  } else if (r == 1 && may_block) {
    r = gpuhal__semaphore_sleep_poll_event(s, value, event, start, timeout);
  }
  if (r == 0) gpuhal__semaphore_advance(s, event_value);
  gpuhal__event_release(event);
  return r == 0;
}

/* The outcome of the entries: 1 when satisfied for `mode`, 0 when not; a failure status
 * in *out_status (for ALL: any failed entry; for ANY: only when every entry failed). */
static int gpuhal__host_wait_evaluate(gpuhal_wait_mode_t mode, gpuhal_semaphore_list_t list,
                                      gpuhal__semaphore_waiter_t* nodes, int register_nodes,
                                      gpuhal_status_t* out_status, gpuhal__event_t** out_event,
                                      uint64_t* out_event_value, uint32_t* out_event_index) {
  uint32_t i, completed = 0, failed = 0;
  gpuhal_status_t first_failure = NULL;
  for (i = 0; i < list.count; ++i) {
    gpuhal_status_t failure = NULL;
    gpuhal__event_t* event = NULL;
    uint64_t event_value = 0;
    gpuhal__wait_state_t st = gpuhal__semaphore_check(list.semaphores[i], list.values[i],
                                                      register_nodes ? &nodes[i] : NULL, NULL,
                                                      (out_event && !*out_event) ? &event : NULL, &event_value,
                                                      &failure);
    if (st == GPUHAL__WAIT_COMPLETED) {
      completed++;
      if (mode == GPUHAL_WAIT_ANY) break;
    } else if (st == GPUHAL__WAIT_FAILED) {
      failed++;
      if (!first_failure) {
        first_failure = gpuhal__semaphore_failure_for(failure, "a host wait", list.values[i]);
      } else {
        gpuhal_status_free(failure);
      }
      if (mode == GPUHAL_WAIT_ALL) break;
    } else if (st == GPUHAL__WAIT_SUBMITTED) {
      *out_event = event;
      *out_event_value = event_value;
      *out_event_index = i;
    }
  }
  if ((mode == GPUHAL_WAIT_ALL && completed == list.count) || (mode == GPUHAL_WAIT_ANY && completed > 0)) {
    gpuhal_status_free(first_failure);
    return 1;
  }
  if (first_failure && (mode == GPUHAL_WAIT_ALL || failed == list.count)) {
    *out_status = first_failure;
    return 1;
  }
  gpuhal_status_free(first_failure);
  return 0;
}

static gpuhal_status_t gpuhal__validate_wait_list(const char* func, gpuhal_semaphore_list_t list) {
  uint32_t i;
  if (list.count == 0) return NULL;
  if (!list.semaphores || !list.values)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'list' has count %u but NULL semaphores or values", func, list.count);
  for (i = 0; i < list.count; ++i) {
    gpuhal_status_t bad = gpuhal__object_check(list.semaphores[i], GPUHAL__MAGIC_SEMAPHORE, func, "list.semaphores[i]");
    if (bad) return gpuhal_status_annotate(bad, "at index %u", i);
  }
  return NULL;
}

#define GPUHAL__HOST_WAIT_INLINE_NODES 8

static gpuhal_status_t gpuhal__semaphores_wait_impl(gpuhal_wait_mode_t mode, gpuhal_semaphore_list_t list,
                                                    gpuhal_timeout_t timeout) {
  gpuhal__semaphore_waiter_t inline_nodes[GPUHAL__HOST_WAIT_INLINE_NODES];
  gpuhal__semaphore_waiter_t* nodes = inline_nodes;
  const gpuhal_allocator_t* allocator = &list.semaphores[0]->allocator;
  gpuhal__host_wait_t hw;
  gpuhal_status_t result = NULL;
  uint32_t i;
  int polled = 0;

  /* First, without registering: satisfied already, or a recorded event worth polling? */
  for (;;) {
    gpuhal__event_t* event = NULL;
    uint64_t event_value = 0;
    uint32_t event_index = 0;
    int done = gpuhal__host_wait_evaluate(mode, list, NULL, 0, &result, polled ? NULL : &event, &event_value,
                                          &event_index);
    if (done) {
      if (event) gpuhal__event_release(event);
      return result;
    }
    if (gpuhal__timeout_is_immediate(timeout) || !event) break;
    /* Each completed event advances an entry, so this loop ends; one that did not complete
     * in its window sends us to the condition variable. */
    if (!gpuhal__semaphore_await_event(list.semaphores[event_index], list.values[event_index], event, event_value,
                                       timeout, mode == GPUHAL_WAIT_ALL || list.count == 1))
      polled = 1;
  }
  if (gpuhal__timeout_expired(timeout))
    return gpuhal_status_make(GPUHAL_STATUS_DEADLINE_EXCEEDED, "semaphore wait: the timeout passed first");

  if (list.count > GPUHAL__HOST_WAIT_INLINE_NODES) {
    size_t bytes = sizeof(*nodes) * (size_t)list.count;
    nodes = (gpuhal__semaphore_waiter_t*)gpuhal__alloc(allocator, bytes);
    if (!nodes) return gpuhal__status_oom("semaphore wait nodes", bytes);
  }
  gpuhal__mutex_init(&hw.mutex);
  gpuhal__cond_init(&hw.cond);
  hw.notified = 0;
  for (i = 0; i < list.count; ++i) {
    gpuhal__semaphore_waiter_init(&nodes[i]);
    nodes[i].wants_submitted = 0;
    nodes[i].notify = gpuhal__host_wait_notify;
    nodes[i].user = &hw;
  }
  for (;;) {
    uint32_t seen;
    int done;
    gpuhal__mutex_lock(&hw.mutex);
    seen = hw.notified;
    gpuhal__mutex_unlock(&hw.mutex);
    /* Registers the nodes not registered yet (notified ones were unlinked) and checks. */
    done = gpuhal__host_wait_evaluate(mode, list, nodes, 1, &result, NULL, NULL, NULL);
    if (done) break;
    gpuhal__mutex_lock(&hw.mutex);
    while (hw.notified == seen) {
      if (!gpuhal__cond_wait_until(&hw.cond, &hw.mutex, timeout) && hw.notified == seen) break;
    }
    done = hw.notified == seen; /* timed out with nothing new */
    gpuhal__mutex_unlock(&hw.mutex);
    if (done && gpuhal__timeout_expired(timeout)) {
      done = gpuhal__host_wait_evaluate(mode, list, nodes, 0, &result, NULL, NULL, NULL);
      if (!done)
        result = gpuhal_status_make(GPUHAL_STATUS_DEADLINE_EXCEEDED, "semaphore wait: the timeout passed first");
      break;
    }
  }
  for (i = 0; i < list.count; ++i) gpuhal__semaphore_unregister(list.semaphores[i], &nodes[i]);
  gpuhal__cond_destroy(&hw.cond);
  gpuhal__mutex_destroy(&hw.mutex);
  if (nodes != inline_nodes) gpuhal__free(allocator, nodes);
  return result;
}

GPUHAL_API gpuhal_status_t gpuhal_semaphore_wait(gpuhal_semaphore_t* semaphore, uint64_t value,
                                                 gpuhal_timeout_t timeout) {
  GPUHAL__CHECK_OBJECT(semaphore, GPUHAL__MAGIC_SEMAPHORE);
  return gpuhal__semaphores_wait_impl(GPUHAL_WAIT_ALL, gpuhal_semaphore_list_one(&semaphore, &value), timeout);
}

GPUHAL_API gpuhal_status_t gpuhal_semaphores_wait(gpuhal_wait_mode_t mode, gpuhal_semaphore_list_t list,
                                                  gpuhal_timeout_t timeout) {
  GPUHAL__CHECK_ARG(mode == GPUHAL_WAIT_ALL || mode == GPUHAL_WAIT_ANY, "mode",
                    "must be GPUHAL_WAIT_ALL or GPUHAL_WAIT_ANY");
  GPUHAL__RETURN_IF_ERROR(gpuhal__validate_wait_list(__func__, list));
  if (list.count == 0) return NULL;
  return gpuhal__semaphores_wait_impl(mode, list, timeout);
}
