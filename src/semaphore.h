/* semaphore: timeline semaphores (DESIGN §5).
 *
 * A semaphore holds a 64-bit value that only grows, or a failure status. It belongs to
 * the driver, so every device of that driver may wait on it and signal it. The host signals
 * and waits with the functions below; the queue (queue.h) signals it from GPU work and turns
 * GPU-side waits into cuStreamWaitEvent on the event of the work that reaches the value. */
#ifndef GPUHAL_SRC_SEMAPHORE_H
#define GPUHAL_SRC_SEMAPHORE_H

#include "internal.h"
#include "device.h"
#include "event_pool.h"

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
 * own reference until they are done, and may still signal it; so does a host wait in
 * progress on another thread. Once the application's last reference is gone, a semaphore
 * that queue work or a host wait waits on but nothing can advance any more (no queued work
 * signals it, or all that does waits on it itself, for a value it has not reached) fails
 * with ABORTED: that work fails with it instead of staying queued, with its command buffer
 * and device, forever. As with gpuhal_semaphore_fail, work already waiting
 * on the GPU for the value (GPUHAL_FEATURE_SEMAPHORE_MEMOPS) is let go by the failure and
 * runs, its signals failed; work still waiting on the host never runs. A semaphore shared
 * with another process is left as it is (that process may signal it). Cycles through
 * several released semaphores (A's only signaller waits on B, B's on A) are not looked
 * for: that work stays queued until the device or driver goes. */
GPUHAL_API void gpuhal_semaphore_release(gpuhal_semaphore_t* semaphore);
/* The current (completed) value; a failed semaphore returns a clone of its failure status. */
GPUHAL_API gpuhal_status_t gpuhal_semaphore_query(gpuhal_semaphore_t* semaphore, uint64_t* out_value);
/* Host signal: sets the value to `value`, which must be above the current one
 * (FAILED_PRECONDITION otherwise). Wakes every waiter it satisfies. A queue operation's
 * signal is not checked so (its value is known only when its work ends, and queues may
 * finish out of order): one that is not above the value then reached leaves the value as
 * it is, and the operation succeeds. */
GPUHAL_API gpuhal_status_t gpuhal_semaphore_signal(gpuhal_semaphore_t* semaphore, uint64_t value);
/* Names the semaphore in reports (gpuhal_driver_report_pending) and messages; `label` is
 * copied (at most GPUHAL_LABEL_MAX - 1 bytes, cut between UTF-8 characters; control
 * characters become '?'), NULL or "" removes it. Set it before the
 * semaphore is shared with other threads. */
GPUHAL_API gpuhal_status_t gpuhal_semaphore_set_label(gpuhal_semaphore_t* semaphore, const char* label);
/* Fails the semaphore. Takes ownership of `cause` (NULL becomes a generic ABORTED cause);
 * the first cause wins. Every waiter, host or queue, fails with a message carrying it. */
GPUHAL_API void gpuhal_semaphore_fail(gpuhal_semaphore_t* semaphore, gpuhal_status_t cause);
/* Waits until the semaphore reaches `value`. DEADLINE_EXCEEDED when the timeout passes
 * first (an immediate timeout never blocks, but still looks once whether the work that
 * reaches the value has ended); the failure cause when the semaphore fails. */
GPUHAL_API gpuhal_status_t gpuhal_semaphore_wait(gpuhal_semaphore_t* semaphore, uint64_t value,
                                                 gpuhal_timeout_t timeout);
/* Waits until every (GPUHAL_WAIT_ALL) or any (GPUHAL_WAIT_ANY) entry reached its value.
 * An empty list is satisfied at once. A failed entry fails the wait (for ANY only when no
 * entry is satisfied). */
GPUHAL_API gpuhal_status_t gpuhal_semaphores_wait(gpuhal_wait_mode_t mode, gpuhal_semaphore_list_t list,
                                                  gpuhal_timeout_t timeout);
/* ---- sharing a semaphore with other processes ----
 * An exported semaphore's value lives in memory both processes map, pinned and mapped into
 * every device, so GPU work of either process waits for it and signals it on the GPU (no
 * host round trip), and host waiters of either process sleep until a signal from either
 * side wakes them. A failure crosses too: the other side's waiters fail with its status
 * code and the first GPUHAL_SEMAPHORE_SHARED_REASON_MAX - 1 bytes of its message. Nothing
 * tells a process that the other one died: give its waits a timeout, and fail the
 * semaphore yourself (gpuhal_semaphore_fail) to release everything waiting on it.
 * Needs GPUHAL_FEATURE_SEMAPHORE_MEMOPS (UNAVAILABLE without it, saying why) and POSIX
 * shared memory; both processes must use the same build of gpuhal.h. A shared semaphore's
 * values stay at or below 2^63 - 1 (its word holds them whole, and the GPU compares with
 * wraparound): a signal above that, from the host or a queue, is OUT_OF_RANGE. */
#define GPUHAL_SEMAPHORE_SHARED_REASON_MAX 512

/* A file descriptor another process opens the semaphore with (gpuhal_semaphore_import):
 * pass it over a Unix socket (SCM_RIGHTS), or to a child: it is opened close-on-exec, so
 * clear FD_CLOEXEC (fcntl(fd, F_SETFD, 0)) for a child that execs. It is the caller's to
 * close; the semaphore stays shared. Export it before queue work signals or waits on it
 * (FAILED_PRECONDITION while such work is in flight), at a value of 2^63 - 1 or less
 * (OUT_OF_RANGE above). Exporting again gives another descriptor of the same semaphore. */
GPUHAL_API gpuhal_status_t gpuhal_semaphore_export(gpuhal_semaphore_t* semaphore, int* out_fd);
/* Opens a semaphore another process exported, as a semaphore of `driver` holding its
 * current value (or failure). `fd` stays the caller's to close. INVALID_ARGUMENT when `fd`
 * is not an exported semaphore of this build of gpuhal. */
GPUHAL_API gpuhal_status_t gpuhal_semaphore_import(gpuhal_driver_t* driver, int fd, gpuhal_semaphore_t** out_semaphore);

/* A list with no entries. */
GPUHAL_API gpuhal_semaphore_list_t gpuhal_semaphore_list_empty(void);
/* A list with one entry; both pointers must stay valid while the list is used. */
GPUHAL_API gpuhal_semaphore_list_t gpuhal_semaphore_list_one(gpuhal_semaphore_t* const* semaphore,
                                                             const uint64_t* value);

/* ---- gpuhal:internal ---- */

#define GPUHAL__MAGIC_SEMAPHORE 0x414D4553u /* "SEMA" */

/* A registration on a semaphore. `notify` runs under the semaphore's lock (so it must not
 * call back into the semaphore) when the value reaches `value`, when a submitted timepoint
 * at or above `value` appears (only if `wants_submitted`), or when the semaphore fails.
 * The registration is removed before `notify` runs. */
typedef struct gpuhal__semaphore_waiter_s {
  gpuhal__list_node_t link;  /* in semaphore->waiters (or parked, fail_watchers); self-linked while not registered */
  gpuhal__heap_node_t order; /* in semaphore->waiting (keyed by `value`) while in semaphore->waiters */
  int by_value;              /* in semaphore->waiters, so in semaphore->waiting too */
  uint64_t value;
  int wants_submitted;
  /* How many signals of this same semaphore the waiting queue work makes: work blocked on
   * a value it cannot reach itself (see gpuhal__semaphore_abandoned_locked). 0 for host
   * waits, and for a parked wait once its work is issued (its timepoints count it then). */
  uint32_t signals_it;
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
  /* Provisional: the work's GPU waits may have been released by a failure store (a value
   * wait, or an event of work that was), so its event completing means the value is reached
   * only when `settled` (called under the semaphore's lock while the timepoint is linked,
   * so its owner is alive) says every input of the work is known reached. */
  int provisional;
  /* The work waited on another device's event, which that device's loss ends without its
   * work: reached, too, only when `settled`. */
  int inputs_checked;
  int (*settled)(const struct gpuhal__timepoint_s* tp);
  void* owner;
  /* The highest value of this same semaphore the owner waits for (0: none): until the
   * semaphore reaches it, this signal cannot come before another one does. */
  uint64_t own_wait;
  /* The owner's issue order (its seq) and 1 + its queue when it was issued on that queue's
   * own stream (0: a side stream): see gpuhal__action_wait_t.cover_lane. */
  uint64_t issue_seq;
  uint32_t issue_lane;
  /* The work writes the semaphore's word before its event: a host wait reads the word
   * until it passes, then looks at the event once (a load is far cheaper than
   * cuEventQuery: tests/bench/RESULTS.md). */
  int word_written;
} gpuhal__timepoint_t;

/* What notifications hand back to a thread that signals a semaphore from the host, to run
 * on that thread once the semaphore's lock is released: queue work its signal made ready is
 * issued there (as a submitter issues its own), not by waking the device's worker. */
#define GPUHAL__SIGNAL_AFTER_MAX 4
typedef struct gpuhal__signal_after_s {
  uint32_t count;
  struct {
    void (*run)(void* arg);
    void* arg;
  } calls[GPUHAL__SIGNAL_AFTER_MAX];
} gpuhal__signal_after_t;

/* What processes sharing a semaphore map (semaphore_shared.c): a file of one page. */
typedef struct gpuhal__semaphore_shared_s {
  uint64_t value; /* the semaphore's word: GPU work of every process waits on it and writes it */
  /* The highest value a process has reached from the host (a host signal, or its own GPU
   * work seen done); only ever raised. A GPU signal is a plain store to `value`, which may
   * land over another process's higher value: every process raises the word to at least
   * this when it advances, and readers take the larger of the two. */
  uint64_t high;
  uint32_t magic;  /* GPUHAL__SHARED_MAGIC once the exporter set everything up */
  uint32_t layout; /* sizeof(gpuhal__semaphore_shared_t): the same build on both sides */
  /* Bumped by every advance or failure a process makes from the host; sleepers wait on
   * `cond` (under `mutex`, both process-shared) for it to change, and an advance
   * broadcasts only while `sleepers` is not 0. */
  uint32_t wake_seq;
  uint32_t sleepers;
  /* 0 healthy; 1 a process is writing its failure; 2 failed: failure_code, failure_pid and
   * failure_text say how (written before the word is set to the failed value) */
  uint32_t failure_state;
  int32_t failure_code;
  int32_t failure_pid;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  char failure_text[GPUHAL_SEMAPHORE_SHARED_REASON_MAX];
} gpuhal__semaphore_shared_t;

struct gpuhal_semaphore_s {
  gpuhal__object_t object;
  gpuhal_driver_t* driver;
  gpuhal_allocator_t allocator;
  gpuhal__mutex_t mutex;
  uint64_t value;          /* completed value; written under mutex, read atomically */
  gpuhal_status_t failure; /* NULL while healthy; first cause wins */
  gpuhal__list_node_t timepoints;
  /* Registered waiters (gpuhal__semaphore_check), in no order, and the same by value: a
   * notification takes them out smallest first and stops at the first value beyond what
   * changed (a chain of thousands of blocked actions costs nothing per change), and a
   * registration costs O(1), a removal O(log n), in whatever order values come. */
  gpuhal__list_node_t waiters;
  gpuhal__heap_t waiting;
  /* Queue waits put on the GPU (armed: a cuStreamWaitValue64 on the word), by waiter node,
   * from the arming until their action is dropped, or, left by a failed issue, until their
   * stream drained (gpuhal__semaphore_parked_keep): what still waits for a value on the GPU
   * (gpuhal__semaphore_abandoned_locked). Never notified: the word releases them. */
  gpuhal__list_node_t parked;
  /* Failure watches (gpuhal__semaphore_watch_failure): queue work blocked on another of its
   * waits, which must fail as soon as this semaphore does. Notified, and unlinked, only by
   * a failure. */
  gpuhal__list_node_t fail_watchers;
  char label[GPUHAL_LABEL_MAX]; /* gpuhal_semaphore_set_label; "" without one */
  /* The newest submitted timepoint, readable without the mutex (a sequence lock: written
   * under the mutex, `newest_seq` odd while it changes): lets a queue action whose wait is
   * covered by work already issued on its own stream skip the lock (see
   * gpuhal__semaphore_covered_on_stream). */
  uint32_t newest_seq;
  uint64_t newest_value; /* 0: no submitted timepoint */
  CUstream newest_stream;
  /* The value's word in pinned, device-mapped memory (GPUHAL_FEATURE_SEMAPHORE_MEMOPS), made
   * when the first GPU wait on a value that is not submitted yet is issued ("armed"): from
   * then on every advance (host signal, completion, failure) stores the value there too, and
   * GPU work that signals the semaphore writes it in stream order after its work. NULL:
   * the value lives in `value` alone. Set once, under the mutex. */
  volatile uint64_t* word;
  CUdeviceptr word_address;
  /* The highest value a GPU wait was armed for, or a host waiter registered for before it
   * was submitted (gpuhal__wait_query_t.host_arm). Only while the value is below it do
   * signals write the word (a cuStreamWriteValue64 costs several times an event record to
   * enqueue): past it no wait needs their writes, and host advances keep raising the word
   * for the waits armed later. Written under the mutex, read atomically. */
  uint64_t armed_until;
  /* The lowest value armed since the value last passed it (a wait armed for 10 and one for 20:
   * 10; once 10 is reached it is stale until the next arming sets it): a signal below it
   * satisfies no armed wait, so its work need not write the word. Stale, every signal below
   * armed_until writes. Written under the mutex, read atomically. */
  uint64_t armed_low;
  /* 1 when the latest signal came from queue work (a published timepoint), 0 when from the
   * host (gpuhal_semaphore_signal) or none came yet. Only a value the host is expected to
   * signal is worth a GPU wait: one that queue work signals is awaited on the host until
   * that work is submitted and then issued behind an event wait, which is cheaper to
   * enqueue and to pass (bench_queue case 7). Atomic. */
  int32_t queue_signalled;
  /* Signals of this semaphore being issued (between gpuhal__semaphore_signal_begin and
   * gpuhal__semaphore_add_timepoint): their work writes the word before its event is
   * recorded only if the word was armed at the begin, so no arming happens meanwhile.
   * `arm_refused`: a GPU wait was told to wait on the host for that reason; the end of
   * the issue wakes it to try again. Atomic: raised without the mutex, lowered under it.
   * `arm_refused` under the mutex. */
  uint32_t signalling;
  int arm_refused;
  /* Queue actions holding a signal of this semaphore, submitted and not yet dropped (one per
   * signal entry). With no application reference left and every such action blocked on a
   * value of this semaphore, nothing can advance it: gpuhal__semaphore_abandoned_locked.
   * Atomic. */
  uint32_t signallers;
  gpuhal__signal_after_t* after; /* during gpuhal_semaphore_signal's notifications only (mutex) */
  /* How many times a host wait on a submitted value of this semaphore halves its spin
   * window (tuning.host_wait_spin_ns): each wait that outlasted the full window adds one,
   * each that ended inside it resets it to 0 (see gpuhal__semaphore_await_event). Atomic,
   * relaxed: a hint. */
  int32_t spin_halvings;
  /* How long the last host wait on a submitted value of this semaphore took, and the
   * shorter of the last two (0: not two yet). A wait past its spin window sleeps until half
   * of the shorter before its first poll (gpuhal__semaphore_await_event). Atomic, relaxed:
   * hints. */
  int64_t wait_last_ns;
  int64_t wait_typical_ns;
  int word_unsafe; /* a GPU write of the word may still land, or a GPU wait still read it: not
                      returned (for reuse) at destruction */
  /* Shared with other processes (gpuhal_semaphore_export / _import): `word` is
   * &shared->value from then on, always armed (another process may wait on any value), and
   * the value advances also when the word or the shared failure says so
   * (gpuhal__semaphore_shared_pull_locked). NULL: this process alone. */
  gpuhal__semaphore_shared_t* shared;
  int shared_fd;             /* the shared file, kept to export again; closed at destruction */
  CUdevice shared_cu_device; /* whose primary context registered the mapping (retained) */
  CUcontext shared_context;
  /* Reserved with the mapping (gpuhal__shared_register), so that giving it back at
   * destruction needs no memory: the record its put-off unregistering takes, and the record
   * that keeps it until the driver goes when a GPU write may still land. */
  struct gpuhal__deferred_call_s* shared_put_off;
  struct gpuhal__shared_kept_s* shared_kept;
  volatile uint64_t* unshared_word; /* the slab word it had before export: returned at destruction */
  gpuhal__list_node_t shared_link;  /* in driver->shared_semaphores */
};

/* GPUHAL_HANG_REPORT: a host wait (of semaphores, or gpuhal_device_wait_idle) that has
 * waited driver->hang_report_ns logs the pending report once (queue_report.c, through the
 * hooks: the queue comes later in the order). The check takes queue locks: call it with
 * none held. */
typedef struct gpuhal__hang_watch_s {
  gpuhal_driver_t* driver;
  int64_t due; /* 0: off, or reported */
  int64_t start;
} gpuhal__hang_watch_t;
GPUHAL__PRIVATE gpuhal__hang_watch_t gpuhal__hang_watch(gpuhal_driver_t* driver, int64_t start);
/* `timeout`, or the report's time when that comes first: a sleep to wake for it. */
GPUHAL__PRIVATE gpuhal_timeout_t gpuhal__hang_watch_bound(const gpuhal__hang_watch_t* w, gpuhal_timeout_t timeout);
GPUHAL__PRIVATE void gpuhal__hang_watch_check(gpuhal__hang_watch_t* w);

/* A slab of value words: pinned host memory mapped into every context (portable), at the
 * same address on the host and every device (unified addressing). */
typedef struct gpuhal__word_slab_s {
  struct gpuhal__word_slab_s* next;
  uint64_t* words;
  CUdeviceptr address;
  CUdevice cu_device; /* whose primary context holds the allocation (retained by the driver) */
  CUcontext context;
} gpuhal__word_slab_t;

/* A free word of the driver (a new slab through `device` when none is left). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__word_acquire(gpuhal_driver_t* driver, gpuhal_device_t* device, uint64_t** out);

GPUHAL__PRIVATE void gpuhal__word_return(gpuhal_driver_t* driver, volatile uint64_t* word);

GPUHAL__PRIVATE void gpuhal__semaphore_waiter_init(gpuhal__semaphore_waiter_t* w);

/* Under the lock, from a notification: whether run(arg) is asked for already on the
 * signalling thread after the lock is released. */
GPUHAL__PRIVATE int gpuhal__semaphore_after_has(const gpuhal_semaphore_t* s, void (*run)(void*), const void* arg);
/* Whether there is room to ask for one more (the change comes from a host signal). */
GPUHAL__PRIVATE int gpuhal__semaphore_after_room(const gpuhal_semaphore_t* s);
/* Asks for run(arg) on the signalling thread after the lock is released; needs room. */
GPUHAL__PRIVATE void gpuhal__semaphore_after_add(gpuhal_semaphore_t* s, void (*run)(void*), void* arg);

/* Without the lock: 1 when a wait for `value` needs nothing on `stream`: the value is
 * reached, or the newest submitted timepoint, at or above it, was recorded on that stream
 * (work issued there later runs after it). 0 when that cannot be told this way: ask
 * gpuhal__semaphore_check. A failure seen or not here is the same race as with the lock. */
GPUHAL__PRIVATE int gpuhal__semaphore_covered_on_stream(gpuhal_semaphore_t* s, uint64_t value, CUstream stream);

/* Raises the value to `value` (no-op if not above, or failed) and wakes who it satisfies.
 * The completion path and host waiters that saw the event complete call this. */
GPUHAL__PRIVATE void gpuhal__semaphore_advance(gpuhal_semaphore_t* s, uint64_t value);

/* A queue call done as it was issued (gpuhal__queue_issue_at_once) signals `value` from the
 * host: as gpuhal_semaphore_signal, but a failed semaphore or a value not above the current
 * one is ignored (as an action's signal ignores them), and the signal counts as queue work's
 * (queue_signalled). */
GPUHAL__PRIVATE void gpuhal__semaphore_signal_at_once(gpuhal_semaphore_t* s, uint64_t value);

/* Without the lock: 1 when `value` is reached and `s` has not failed. */
GPUHAL__PRIVATE int gpuhal__semaphore_reached(gpuhal_semaphore_t* s, uint64_t value);

/* A queue action starts issuing a signal of `s` to `value` (before its work's event is
 * recorded). Returns the device address of the word when a wait armed it for a value not
 * reached yet that `value` may satisfy (armed_until, armed_low), or with `always` (work behind a GPU wait, whose end is the host's to
 * learn: host waits then read the word), else 0. When the word is wanted and `s` has none,
 * it takes *spare_word (setting it to NULL). The work must then write its value there
 * before the event, so that whoever sees the event complete (and may store a higher value,
 * as a host call after it does) comes after the write. Until
 * gpuhal__semaphore_add_timepoint or gpuhal__semaphore_signal_end, no wait arms `s`. */
GPUHAL__PRIVATE CUdeviceptr gpuhal__semaphore_signal_begin(gpuhal_semaphore_t* s, uint64_t value, uint64_t** spare_word,
                                                           int always);

/* Without the lock: 1 when a wait armed `s` for a value above its own that a signal to
 * `value` may satisfy, but `s` has no word yet: that signal's issue should bring a spare word
 * to signal_begin. */
GPUHAL__PRIVATE int gpuhal__semaphore_wants_word(gpuhal_semaphore_t* s, uint64_t value);
/* What the word of `s` holds for `value`: the value, capped where the GPU's wraparound
 * compare would misread it (see GPUHAL__WORD_MAX in semaphore.c). GPU signals write this. */
GPUHAL__PRIVATE uint64_t gpuhal__semaphore_word_value(const gpuhal_semaphore_t* s, uint64_t value);

/* A GPU wait on the word may outlive `s` unseen (a side stream a failed issue left it on was
 * destroyed at a device's release before it was seen drained): the word is never handed to
 * another semaphore. */
GPUHAL__PRIVATE void gpuhal__semaphore_word_keep(gpuhal_semaphore_t* s);
/* Such a wait, for `value`, stays on its stream until the value comes: `waiter` (no notify
 * is made to it) stands for it among the GPU waits on `s`, so that `s`, released with
 * nothing left to signal it, is found abandoned and fails, which lets the wait go. The
 * caller holds a reference to `s` and unregisters `waiter` (gpuhal__semaphore_unregister)
 * before it drops it. */
GPUHAL__PRIVATE void gpuhal__semaphore_parked_keep(gpuhal_semaphore_t* s, gpuhal__semaphore_waiter_t* waiter,
                                                   uint64_t value);

/* The issue begun by gpuhal__semaphore_signal_begin failed before publishing. `wrote`: a
 * write of the word was enqueued, which nothing will see land (no event follows it): the
 * word is never reused. */
GPUHAL__PRIVATE void gpuhal__semaphore_signal_end(gpuhal_semaphore_t* s, int wrote);

/* Publishes a submitted timepoint (its event recorded) and ends the issue begun by
 * gpuhal__semaphore_signal_begin: GPU waits on values up to tp->value may now be turned
 * into stream waits on its event. A value that is already complete is not published. */
GPUHAL__PRIVATE void gpuhal__semaphore_add_timepoint(gpuhal_semaphore_t* s, gpuhal__timepoint_t* tp);

GPUHAL__PRIVATE void gpuhal__semaphore_remove_timepoint(gpuhal__timepoint_t* tp);

/* A GPU signal of a failed semaphore writes its value over the failed word when it runs
 * (its write precedes its event): whoever retires such work stores the failure again, so
 * no GPU wait stays blocked behind the failure. */
GPUHAL__PRIVATE void gpuhal__semaphore_reassert_failure(gpuhal_semaphore_t* s);
/* When `s` has failed and has a word: the word's device address, and in *out_value what a
 * failure stores there; else 0. For work whose issue failed after it wrote the word: no
 * retire comes after that write runs (gpuhal__action_issue_failed). */
GPUHAL__PRIVATE CUdeviceptr gpuhal__semaphore_failed_word(gpuhal_semaphore_t* s, uint64_t* out_value);

/* A queue action submitted with a signal of `s` (gpuhal__semaphore_signaller_add), and the
 * same action dropping it, after its timepoint left the list and its own registration was
 * removed (gpuhal__semaphore_signaller_done: when the application holds no reference any
 * more, that may leave `s` abandoned, which fails it). */
GPUHAL__PRIVATE void gpuhal__semaphore_signaller_add(gpuhal_semaphore_t* s);
/* The work of a parked wait (gpuhal__semaphore_check: GPUHAL__WAIT_ARMED, linked on
 * s->parked) is being issued: its timepoints count it from now on. Before they are added. */
GPUHAL__PRIVATE void gpuhal__semaphore_parked_issued(gpuhal_semaphore_t* s, gpuhal__semaphore_waiter_t* waiter);
GPUHAL__PRIVATE void gpuhal__semaphore_signaller_done(gpuhal_semaphore_t* s);

/* Under the lock, `s` healthy: `cause` (owned) becomes its failure; GPU waits on its word
 * are released and every waiter is notified. */
GPUHAL__PRIVATE void gpuhal__semaphore_fail_locked(gpuhal_semaphore_t* s, gpuhal_status_t cause);
/* Under the lock: raises the value to `value` (no-op if not above, or failed) and notifies
 * who it satisfies, without touching the word (it holds `value` already). */
GPUHAL__PRIVATE void gpuhal__semaphore_advance_locked(gpuhal_semaphore_t* s, uint64_t value);

/* Fails the semaphore with `cause` (owned); keeps the first cause. */
GPUHAL__PRIVATE void gpuhal__semaphore_fail_owned(gpuhal_semaphore_t* s, gpuhal_status_t cause);

/* What a wait on (semaphore, value) can do right now. */
typedef enum gpuhal__wait_state_e {
  GPUHAL__WAIT_COMPLETED = 0, /* the value is reached */
  GPUHAL__WAIT_SUBMITTED = 1, /* work reaching it is issued: *out_event is retained for the caller */
  GPUHAL__WAIT_PENDING = 2,   /* neither; `waiter` (if given) is registered */
  GPUHAL__WAIT_FAILED = 3,    /* the semaphore failed: *out_status is a clone of the cause */
  GPUHAL__WAIT_ARMED = 4      /* not submitted: wait on the word at *out_word_address (memops) */
} gpuhal__wait_state_t;

/* How gpuhal__semaphore_check looks at (semaphore, value). */
typedef struct gpuhal__wait_query_s {
  gpuhal__semaphore_waiter_t* waiter;       /* registered when PENDING (if not registered already) */
  CUstream order_stream;                    /* a value submitted there is SUBMITTED without an event */
  int look_submitted;                       /* tell SUBMITTED from PENDING (else submitted values are PENDING) */
  int take_event;                           /* SUBMITTED: retain the event in *event (NULL on order_stream) */
  int skip_provisional;                     /* provisional timepoints count as not submitted */
  const gpuhal__event_pool_t* local_events; /* provisional_skipped counts only timepoints whose event is of this pool */
  int provisional_skipped;                  /* out: such a provisional timepoint at or above the value was skipped */
  uint64_t* spare_word;                     /* not NULL: arm the semaphore (with this word unless it has one)
                              instead of PENDING; the word is consumed when used */
  int host_arm;             /* PENDING, registering `waiter`: signals issued from now on write the word up to `value`
                              (their issue gives the semaphore a word if it has none), so a host
                              waiter that registered before the value's work was submitted reads
                              the word instead of querying the event; the state stays PENDING */
  gpuhal__event_t* event;   /* out */
  uint64_t event_value;     /* out: the submitted value found */
  int provisional;          /* out, SUBMITTED: that timepoint is provisional */
  int word_written;         /* out, SUBMITTED: its work writes the word (gpuhal__timepoint_t) */
  uint32_t event_lane;      /* out, *event taken of local_events: its timepoint's issue_lane (else 0) */
  uint64_t event_seq;       /* out, with event_lane: its timepoint's issue_seq */
  int foreign;              /* out, SUBMITTED (local_events given): its work is of another event pool (device),
                               or its own inputs are still to be checked (gpuhal__timepoint_t.inputs_checked) */
  CUdeviceptr word_address; /* out, ARMED */
  gpuhal_status_t failure;  /* out, FAILED: a clone of the cause */
} gpuhal__wait_query_t;

/* Checks (semaphore, value) as `q` asks, in one critical section (so no change is missed
 * between the check and a registration or an arming). */
GPUHAL__PRIVATE gpuhal__wait_state_t gpuhal__semaphore_check(gpuhal_semaphore_t* s, uint64_t value,
                                                             gpuhal__wait_query_t* q);

GPUHAL__PRIVATE void gpuhal__semaphore_unregister(gpuhal_semaphore_t* s, gpuhal__semaphore_waiter_t* waiter);
/* Queue work blocked on one wait learns at once that another of its waits failed: the
 * failure (a clone) when `s` has failed, else `watch` is linked (once) into its failure
 * watches and notified (under the lock, unlinked first) when it fails. Unlinked by
 * gpuhal__semaphore_unregister. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__semaphore_watch_failure(gpuhal_semaphore_t* s,
                                                                gpuhal__semaphore_waiter_t* watch);

/* A failure status for a waiter of failed `s`: the cause first, then who waited for which
 * semaphore (its label) and value. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__semaphore_failure_for(gpuhal_status_t cause_clone, const char* who,
                                                              const gpuhal_semaphore_t* s, uint64_t value);

/* ---- shared semaphores (semaphore_shared.c) ---- */

/* Under the lock: takes in what other processes did (a higher word, a failure). 1 when the
 * value or the failure changed. */
GPUHAL__PRIVATE int gpuhal__semaphore_shared_pull_locked(gpuhal_semaphore_t* s);
/* gpuhal__semaphore_shared_pull_locked under the lock; nothing for a semaphore not shared. */
GPUHAL__PRIVATE void gpuhal__semaphore_shared_pull(gpuhal_semaphore_t* s);
/* Raises the shared page's highest reached value to `value`; returns the larger of the two
 * (`value` itself for a semaphore not shared). */
GPUHAL__PRIVATE uint64_t gpuhal__semaphore_shared_high(gpuhal_semaphore_t* s, uint64_t value);
/* Without any lock (so also under another semaphore's): the value as far as this process
 * knows, raised to the shared word while no failure is being told there. */
GPUHAL__PRIVATE uint64_t gpuhal__semaphore_value_seen(gpuhal_semaphore_t* s);
/* Wakes the sleepers of every process after this one stored a new value or failure. */
GPUHAL__PRIVATE void gpuhal__semaphore_shared_wake(gpuhal_semaphore_t* s);
/* Under the lock, failing `s` with `cause` (not from the shared failure): tells the other
 * processes (the first failure wins there too). */
GPUHAL__PRIVATE void gpuhal__semaphore_shared_publish_failure(gpuhal_semaphore_t* s, gpuhal_status_t cause);
/* The wake sequence a host waiter reads before it looks at the value. */
GPUHAL__PRIVATE uint32_t gpuhal__semaphore_shared_seq(gpuhal_semaphore_t* s);
/* Whether a wake came since `seq`, or the word reached `value`, or a failure is told. */
GPUHAL__PRIVATE int gpuhal__semaphore_shared_moved(gpuhal_semaphore_t* s, uint64_t value, uint32_t seq);
/* Sleeps until gpuhal__semaphore_shared_moved or `nap` passes. */
GPUHAL__PRIVATE void gpuhal__semaphore_shared_sleep(gpuhal_semaphore_t* s, uint64_t value, uint32_t seq,
                                                    gpuhal_timeout_t nap);
/* At the semaphore's destruction: unmaps, unregisters, closes (or, where a GPU write may
 * still land, keeps the mapping for the driver's end); leaves the driver's watch. */
GPUHAL__PRIVATE void gpuhal__semaphore_shared_destroy(gpuhal_semaphore_t* s);
/* At the driver's destruction (no semaphore or device is left): stops the watch thread
 * and gives back the mappings kept. */
GPUHAL__PRIVATE void gpuhal__semaphore_shared_driver_destroy(gpuhal_driver_t* driver);

/* At driver destruction (no semaphore is left): frees every word slab and stops the
 * shared watch. */
GPUHAL__PRIVATE void gpuhal__semaphore_driver_destroy(gpuhal_driver_t* driver);

/* gpuhal's own references (queue actions take theirs with gpuhal__object_retain). */
GPUHAL__PRIVATE void gpuhal__semaphore_release_ref(gpuhal_semaphore_t* semaphore);

/* The one check of a gpuhal_semaphore_list_t argument (named `arg` in messages): NULL
 * arrays with a count, a bad or released handle (with its index), when `driver` is given,
 * a semaphore of another driver, and with `signals` (a list of values to signal), a value
 * its sharing rules refuse. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__semaphore_list_check(const char* func, const char* arg,
                                                             gpuhal_semaphore_list_t list,
                                                             const gpuhal_driver_t* driver, int signals);

#endif /* GPUHAL_SRC_SEMAPHORE_H */
