/* gpuhal - queue: submission and the public queue calls (gpuhal_queue_host_call, alloca and
 * dealloca, gpuhal_device_wait_idle). A call validates its arguments, takes references,
 * and either issues on the caller's thread (the fast path) or hands the action to the
 * worker; a call that fails after its arguments were accepted fails its signals.
 *
 * Part of the queue (its rules are at the top of queue.h). gpuhal_queue_execute lives in
 * queue_execute.c. */
#include "queue.h"
#include "status.h"

/* ---- submission ---- */

/* The fast path: when nothing is queued ahead and no one else is issuing, the submitting
 * thread resolves and issues the action itself inside a push/pop of the device's context,
 * saving the worker's wake-up (gpuhal__context_enter_enqueue: an issue is asynchronous stream
 * work, and wraps its few unsafe calls in relaxed capture mode itself, device.h). The caller
 * holds issue_mutex (taken with a trylock before the action was acquired, so that "nothing
 * queued ahead" is checked in the same critical section of state->mutex as the acquisition)
 * and releases it after. Returns when the action was handed to the completion side (0: not
 * issued here). */
static int64_t gpuhal__queue_issue_here(gpuhal__queue_state_t* state, gpuhal__action_t* a) {
  gpuhal__context_scope_t scope;
  gpuhal_status_t failure = NULL;
  gpuhal__resolve_t r;
  int64_t dispatched = 0;
  gpuhal__atomic_store(&a->wake, 0);
  r = gpuhal__action_resolve(a, 1, &failure);
  if (r == GPUHAL__RESOLVE_FAILED) {
    gpuhal__action_fail(a, failure);
    gpuhal__action_retire(a);
    return 0;
  }
  if (r == GPUHAL__RESOLVE_BLOCKED) {
    /* Registered on the semaphore it waits for; its change kicks the pump. */
    gpuhal__action_make_pending(state, a);
    if (!gpuhal__queue_holds(state)) return 0;
  }
  if ((failure = gpuhal__context_enter_enqueue(state->device, &scope)) != NULL) {
    gpuhal_status_free(failure); /* the worker will do it */
    if (r == GPUHAL__RESOLVE_READY) {
      gpuhal__action_drop_wait_events(a);
      gpuhal__action_make_pending(state, a);
      gpuhal__action_wake(a);
    }
    gpuhal__queue_kick_issue(state);
    return 0;
  }
  if (r == GPUHAL__RESOLVE_READY) dispatched = gpuhal__action_issue_or_hold(state, a);
  /* Work held for room on a full stream goes as room comes, and so does what its issue lets
   * go (a chain on the queue): here too, as a signalling thread does, so that a submitter
   * keeps its queue going while the worker is busy. */
  if (gpuhal__queue_holds(state) && gpuhal__queue_issue_ready(state, GPUHAL__SIGNAL_ISSUE_MAX, 1))
    gpuhal__queue_kick_issue(state);
  gpuhal__context_leave(state->device, &scope);
  return dispatched;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__queue_validate(const char* func, gpuhal_device_t* device, uint32_t queue_index,
                                                       gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal) {
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_check(device, GPUHAL__MAGIC_DEVICE, func, "device"));
  if (queue_index >= device->queue_count)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "%s: argument 'queue' (%u) must be below the device's queue count (%u)", func,
                              queue_index, device->queue_count);
  GPUHAL__RETURN_IF_ERROR(gpuhal__semaphore_list_check(func, "wait", wait, device->driver, 0));
  GPUHAL__RETURN_IF_ERROR(gpuhal__semaphore_list_check(func, "signal", signal, device->driver, 1));
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
  gpuhal__atomic_add(&state->outstanding, 1);
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
    gpuhal__atomic_add(&state->outstanding, 1);
    *out_idle = issuing && gpuhal__list_empty(&state->incoming) && !state->lost;
    *out = a;
  }
  gpuhal__mutex_unlock(&state->mutex);
  return status;
}

static gpuhal_status_t gpuhal__queue_submit_impl(const char* func, gpuhal_device_t* device, uint32_t queue_index,
                                                 gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal,
                                                 const gpuhal__action_ops_t* ops, void* user, gpuhal_host_fn_t host_fn,
                                                 void* host_user, unsigned flags) {
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
    issuing = gpuhal__mutex_trylock(&state->issue_mutex);
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
  gpuhal__atomic_store(&a->wake, 1); /* atomic: a stale entry of its last life may be read by the pump */
  a->event = NULL;
  a->failure = NULL;
  a->trace = NULL;
  a->value_waits = 0;
  a->provisional = 0;
  a->foreign_waits = 0;
  a->park_reserved = 0;
  a->side = 0;
  a->chain_claim = 0;
  a->held = 0;
  a->not_provisional = (flags & GPUHAL__SUBMIT_NOT_PROVISIONAL) != 0;
  a->caller_may_issue = (flags & GPUHAL__SUBMIT_CALLER_MAY_ISSUE) != 0;
  a->polled = 0;
  a->fail_watching = 0;
  a->failed_early = 0;
  a->input_watched = NULL;
  a->stream = NULL;
  a->gpu_wait_counted = 0;
  a->submit_number = gpuhal__atomic_add(&state->submit_count, 1);
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
    w->cover_lane = 0;
    w->cover_seq = 0;
  }
  for (i = 0; i < signal.count; ++i) {
    gpuhal__timepoint_t* tp = &a->signals[i];
    gpuhal__list_init(&tp->link);
    tp->semaphore = signal.semaphores[i];
    tp->value = signal.values[i];
    tp->event = NULL;
    tp->provisional = 0;
    tp->inputs_checked = 0;
    tp->word_written = 0;
    tp->issue_seq = 0;
    tp->issue_lane = 0;
  }
  gpuhal__action_retain_semaphores(a);
  GPUHAL__TRACE(device, (trace_t0 = gpuhal_now_ns(),
                         trace_span = gpuhal__hooks()->trace_submit_begin(device, a, &wait, &signal)));
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
  if (trace_span)
    GPUHAL__TRACE(device, gpuhal__hooks()->trace_submit_end(device, queue_index, ops->name, trace_span, trace_t0));
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__queue_submit_ex(gpuhal_device_t* device, uint32_t queue_index,
                                                        gpuhal_semaphore_list_t wait, gpuhal_semaphore_list_t signal,
                                                        const gpuhal__action_ops_t* ops, void* user, unsigned flags) {
  return gpuhal__queue_submit_impl(ops && ops->name ? ops->name : "gpuhal__queue_submit", device, queue_index, wait,
                                   signal, ops, user, NULL, NULL, flags);
}

/* ---- host calls ---- */
static const gpuhal__action_ops_t gpuhal__host_call_ops = {"host_call", NULL, NULL, NULL, NULL};

GPUHAL_API gpuhal_status_t gpuhal_queue_host_call(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                                  gpuhal_semaphore_list_t signal, gpuhal_host_fn_t fn, void* user) {
  gpuhal_status_t status;
  GPUHAL__CHECK_ARG(fn != NULL, "fn", "must not be NULL");
  GPUHAL__RETURN_IF_ERROR(gpuhal__queue_validate(__func__, device, queue, wait, signal));
  status = gpuhal__queue_host_call_thread_start(gpuhal__queue_state(device), queue);
  if (status) {
    gpuhal__queue_fail_signals(signal, status, "host_call", device->ordinal, queue);
    return status;
  }
  /* Never parked on the GPU: its function runs only once its inputs are reached on the
   * host anyway, so a GPU value wait would gain nothing and hold one of the few streams
   * that may park (and a device release would have to fail the semaphore it waits for). */
  return gpuhal__queue_submit_impl(
      __func__, device, queue, wait, signal, &gpuhal__host_call_ops, NULL, fn, user,
      GPUHAL__SUBMIT_CALLER_MAY_ISSUE | GPUHAL__SUBMIT_NOT_PROVISIONAL | GPUHAL__SUBMIT_VALIDATED);
}

/* ---- calls done at once ---- */

/* An alloca or dealloca whose waits are all reached, submitted while nothing is queued
 * ahead for the worker and nothing is in flight on its queue's stream, is done when its
 * stream-ordered call returns: the idle stream runs it at once, waits on the GPU for
 * nothing, and the pool hands it only memory whose frees have run (never a block whose
 * free is queued elsewhere: no_hidden_waits, memory.c). Such a call issues on
 * the caller's thread and signals from the host (gpuhal__semaphore_signal_at_once): no
 * action, no event, nothing for the completion side, as IREE's alloca does always (it is
 * host-synchronous). `issue` must not make the stream wait on the GPU. 1: done; 0: take
 * the queue's path, which also reports errors (a failed attempt changed nothing). */
static int gpuhal__queue_issue_at_once(gpuhal_device_t* device, uint32_t queue_index, gpuhal_semaphore_list_t wait,
                                       gpuhal_semaphore_list_t signal,
                                       gpuhal_status_t (*issue)(void*, gpuhal_device_t*, CUstream), void* user) {
  gpuhal__queue_state_t* state = gpuhal__queue_state(device);
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  uint32_t i;
  if (!device->memory || !device->memory->no_hidden_waits || state->tuning.no_caller_issue || device->trace) return 0;
  for (i = 0; i < wait.count; ++i)
    if (!gpuhal__semaphore_reached(wait.semaphores[i], wait.values[i])) return 0;
  if (!gpuhal__mutex_trylock(&state->issue_mutex)) return 0;
  /* Issues are serialized by issue_mutex: under it, an empty lane stays empty. */
  if (gpuhal__atomic_load(&state->stopping) || gpuhal__atomic_load(&state->incoming_count) ||
      gpuhal__atomic_load(&state->lost_flag) || gpuhal__atomic_load(&state->lanes[queue_index].count) ||
      !gpuhal__list_empty(&state->lanes[queue_index].held)) {
    gpuhal__mutex_unlock(&state->issue_mutex);
    return 0;
  }
  status = gpuhal__context_enter(device, &scope);
  if (!status) {
    status = issue(user, device, device->streams[queue_index]);
    gpuhal__context_leave(device, &scope);
  }
  if (!status) gpuhal__atomic_store(&state->lanes[queue_index].at_once, 1);
  gpuhal__mutex_unlock(&state->issue_mutex);
  if (status) {
    gpuhal_status_free(status);
    return 0;
  }
  for (i = 0; i < signal.count; ++i) gpuhal__semaphore_signal_at_once(signal.semaphores[i], signal.values[i]);
  return 1;
}

/* gpuhal_device_wait_idle's part for calls done at once: they leave no action to wait for, so
 * their streams are polled (in a push/pop) until what was issued there has run. Work
 * issued there after them was waited for as actions, so this is short. */
static gpuhal_status_t gpuhal__queue_wait_at_once(gpuhal__queue_state_t* state, gpuhal_timeout_t timeout) {
  gpuhal_device_t* device = state->device;
  gpuhal__context_scope_t scope;
  gpuhal_status_t status = NULL;
  uint32_t i;
  for (i = 0; i < device->queue_count && !status; ++i) {
    gpuhal__backoff_t backoff = gpuhal__backoff(1000, 1000000);
    CUresult r;
    if (!gpuhal__atomic_exchange(&state->lanes[i].at_once, 0)) continue;
    GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
    while ((r = device->cu->cuStreamQuery(device->streams[i])) == CUDA_ERROR_NOT_READY &&
           !gpuhal__timeout_expired(timeout))
      gpuhal__backoff_sleep(&backoff);
    gpuhal__context_leave(device, &scope);
    if (r == CUDA_ERROR_NOT_READY) {
      gpuhal__atomic_store(&state->lanes[i].at_once, 1);
      status =
          gpuhal_status_make(GPUHAL_STATUS_DEADLINE_EXCEEDED,
                             "gpuhal_device_wait_idle: queue %u's stream was still busy when the timeout passed", i);
    } else if (r != CUDA_SUCCESS) {
      status = gpuhal__cuda_status(device->cu, r, "cuStreamQuery", __FILE__, __LINE__);
    }
  }
  return status;
}

/* ---- alloca / dealloca ---- */
/* The address is assigned here, on the worker, when the allocation is issued; command
 * buffers that name the buffer resolve it when they are issued after this. */
static gpuhal_status_t gpuhal__alloca_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  return gpuhal__buffer_pending_allocate((gpuhal_buffer_t*)user, device, stream, 1);
}
/* Done as issued: out of memory it leaves the recovery (which may wait on the GPU for other
 * queues' frees) to the queue's path. */
static gpuhal_status_t gpuhal__alloca_issue_at_once(void* user, gpuhal_device_t* device, CUstream stream) {
  return gpuhal__buffer_pending_allocate((gpuhal_buffer_t*)user, device, stream, 0);
}
static gpuhal_status_t gpuhal__dealloca_issue(void* user, gpuhal_device_t* device, CUstream stream);
/* Done as issued: the signal comes before the free has run; the pool is told (trims and
 * allocas out of memory wait for it). */
static gpuhal_status_t gpuhal__dealloca_issue_at_once(void* user, gpuhal_device_t* device, CUstream stream) {
  GPUHAL__RETURN_IF_ERROR(gpuhal__dealloca_issue(user, device, stream));
  gpuhal__pool_mark_free(device, stream);
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
                                                        gpuhal__buffer_action_release, NULL};
static const gpuhal__action_ops_t gpuhal__dealloca_ops = {"dealloca", gpuhal__dealloca_issue, NULL,
                                                          gpuhal__buffer_action_release, NULL};
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
  if (gpuhal__queue_issue_at_once(device, queue, wait, signal, gpuhal__alloca_issue_at_once, buffer)) {
    *out_buffer = buffer;
    return NULL;
  }
  gpuhal__buffer_retain_ref(buffer); /* the action's reference */
  /* Never behind a GPU wait: its memory is taken from the pool when it is issued, so issued
   * ahead of a dealloca still waiting on the host (a dealloca never parks) it could run out
   * of the memory that dealloca gives back, though the program orders the two. */
  status = gpuhal__queue_submit_impl(__func__, device, queue, wait, signal, &gpuhal__alloca_ops, buffer, NULL, NULL,
                                     gpuhal__pool_submit_flags(device) | GPUHAL__SUBMIT_NOT_PROVISIONAL);
  if (status) {
    gpuhal__buffer_release_ref(buffer);
    gpuhal_buffer_release(buffer);
    return status;
  }
  *out_buffer = buffer;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_queue_dealloca(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                                 gpuhal_semaphore_list_t signal, gpuhal_buffer_t* buffer) {
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
    if (!gpuhal__atomic_cas(&buffer->queue_data, &expected, (void*)buffer)) {
      /* A state refusal after valid arguments, as a ONE_SHOT's second execute: waiters on
       * the signals learn it. */
      status = gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                                  "gpuhal_queue_dealloca: argument 'buffer' already has a dealloca queued");
      gpuhal__queue_fail_signals(signal, status, "dealloca", device->ordinal, queue);
      return status;
    }
  }
  if (gpuhal__queue_issue_at_once(device, queue, wait, signal, gpuhal__dealloca_issue_at_once, buffer)) return NULL;
  gpuhal__buffer_retain_ref(buffer);
  status = gpuhal__queue_submit_impl(__func__, device, queue, wait, signal, &gpuhal__dealloca_ops, buffer, NULL, NULL,
                                     gpuhal__pool_submit_flags(device) | GPUHAL__SUBMIT_NOT_PROVISIONAL);
  if (status) {
    gpuhal__atomic_store(&buffer->queue_data, (void*)NULL);
    gpuhal__buffer_release_ref(buffer);
  }
  return status;
}

/* Under the state's mutex: host calls whose function is running, and those due behind it on
 * its queue. A settle waits for them only so long (GPUHAL__SETTLE_HOST_FUNCTION_NS): the
 * application's own code may be waiting for the application, which is inside a release;
 * the device then goes at a later release, or at its own teardown once they return. A
 * function that has returned is waited for as work is (it signals right after: the
 * application may see that and make its last release). */
static uint64_t gpuhal__queue_running_host_calls_locked(gpuhal__queue_state_t* state) {
  uint64_t n = 0;
  uint32_t q;
  for (q = 0; q < state->device->queue_count; ++q) {
    const gpuhal__queue_lane_t* lane = &state->lanes[q];
    const gpuhal__list_node_t* due;
    if (!gpuhal__atomic_load(&lane->in_function)) continue;
    n++;
    for (due = lane->host_calls_due.next; due != &lane->host_calls_due; due = due->next) n++;
  }
  return n;
}

GPUHAL__PRIVATE void gpuhal__queue_settle(gpuhal_device_t* device, gpuhal_timeout_t timeout) {
  gpuhal__queue_state_t* state = gpuhal__queue_state(device);
  int64_t functions_due = gpuhal_now_ns() + GPUHAL__SETTLE_HOST_FUNCTION_NS;
  uint32_t begun = 0;
  uint64_t last_outstanding = UINT64_MAX;
  if (!state) return;
  for (;;) {
    uint64_t outstanding, blocked = 0;
    gpuhal__list_node_t* n;
    /* The count first: finished work wakes what waited for it before it stops counting,
     * so an action that is about to move is either still behind counted work, or woken. */
    gpuhal__mutex_lock(&state->mutex);
    outstanding = gpuhal__atomic_load(&state->outstanding);
    if (gpuhal_now_ns() >= functions_due) blocked += gpuhal__queue_running_host_calls_locked(state);
    gpuhal__mutex_unlock(&state->mutex);
    /* What the completion side found blocked on the GPU counts only from a pass that began
     * after the count last changed: work that ended may have released the GPU wait of work
     * an earlier pass found blocked. */
    if (outstanding != last_outstanding) {
      last_outstanding = outstanding;
      begun = gpuhal__atomic_load(&state->passes_begun);
    }
    gpuhal__mutex_lock(&state->issue_mutex);
    for (n = state->pending.next; n != &state->pending; n = n->next) {
      const gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
      if (!gpuhal__atomic_load(&a->wake) && !a->held) ++blocked; /* held work is ready: it goes on */
    }
    gpuhal__mutex_unlock(&state->issue_mutex);
    if ((int32_t)(gpuhal__atomic_load(&state->gpu_blocked_pass) - begun) > 0)
      blocked += gpuhal__atomic_load(&state->gpu_blocked);
    if (outstanding <= blocked || gpuhal__timeout_expired(timeout)) return;
    gpuhal__sleep_ns(50000);
  }
}

GPUHAL_API gpuhal_status_t gpuhal_device_wait_idle(gpuhal_device_t* device, gpuhal_timeout_t timeout) {
  gpuhal__queue_state_t* state;
  gpuhal_status_t result = NULL;
  gpuhal__hang_watch_t watch;
  GPUHAL__CHECK_OBJECT(device, GPUHAL__MAGIC_DEVICE);
  state = gpuhal__queue_state(device);
  if (!state) return NULL;
  /* The caller's own host call is an operation of the device not done until it returns. */
  if (gpuhal__queue_owns_thread(device))
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_device_wait_idle: called from a host function of device %d: the host call "
                              "running it is one of the operations it would wait for (order the work with a "
                              "semaphore instead)",
                              device->ordinal);
  watch = gpuhal__hang_watch(device->driver, gpuhal_now_ns());
  gpuhal__mutex_lock(&state->mutex);
  state->idle_waiters++;
  if (state->completion_napping) gpuhal__cond_signal(&state->completion_cond); /* stop aging the work */
  gpuhal__queue_kick_retired_locked(state); /* what the completion thread holds back for a batch */
  while (gpuhal__atomic_load(&state->outstanding) > 0) {
    if (!gpuhal__cond_wait_until(&state->idle_cond, &state->mutex, gpuhal__hang_watch_bound(&watch, timeout)) &&
        watch.due && !gpuhal__timeout_expired(timeout)) {
      gpuhal__mutex_unlock(&state->mutex); /* the report takes the queue's locks */
      gpuhal__hang_watch_check(&watch);
      gpuhal__mutex_lock(&state->mutex);
      continue;
    }
    if (gpuhal__timeout_expired(timeout) && gpuhal__atomic_load(&state->outstanding) > 0) {
      result =
          gpuhal_status_make(GPUHAL_STATUS_DEADLINE_EXCEEDED,
                             "gpuhal_device_wait_idle: %llu queue operations still outstanding when the timeout passed",
                             (unsigned long long)gpuhal__atomic_load(&state->outstanding));
      break;
    }
  }
  state->idle_waiters--;
  if (!result && state->lost) result = gpuhal_status_clone(state->lost);
  gpuhal__mutex_unlock(&state->mutex);
  if (!result) result = gpuhal__queue_wait_at_once(state, timeout);
  return result;
}

GPUHAL_API gpuhal_status_t gpuhal_device_lost_status(gpuhal_device_t* device) {
  gpuhal__queue_state_t* state;
  GPUHAL__CHECK_OBJECT(device, GPUHAL__MAGIC_DEVICE);
  state = gpuhal__queue_state(device);
  return state ? gpuhal__queue_lost_clone(state) : NULL;
}
