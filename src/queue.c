/* queue: the queue's state and tuning, kicks and the woken stack, actions (their pool,
 * waits, retiring), failing and succeeding them, and park accounting. The queue's rules are
 * at the top of queue.h. */
#include "queue.h"

GPUHAL__PRIVATE gpuhal__queue_state_t* gpuhal__queue_state(gpuhal_device_t* device) {
  return (gpuhal__queue_state_t*)device->queue_state;
}

GPUHAL__PRIVATE gpuhal_queue_tuning_t gpuhal__queue_tuning_resolve(const gpuhal_queue_tuning_t* in) {
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
  if (t.graph_instances_max <= 0) t.graph_instances_max = 2;
  if (t.graph_instances_max > GPUHAL__GRAPH_INSTANCES_MAX) t.graph_instances_max = GPUHAL__GRAPH_INSTANCES_MAX;
  if (t.queue_entries_max == 0) t.queue_entries_max = GPUHAL__QUEUE_ENTRIES_DEFAULT;
  if (t.queue_entries_max < 0) t.queue_entries_max = -1; /* no bound */
  /* park_headroom: gpuhal__device_room_headroom (device.h) reads it */
  return t;
}

GPUHAL__PRIVATE int gpuhal__park_possible(const gpuhal__queue_state_t* state) {
  const gpuhal_device_t* device = state->device;
  return state->memops && state->tuning.gpu_parked_max > 0 && !device->no_gpu_park && device->driver->ordinals;
}

static int gpuhal__park_reserve(gpuhal__queue_state_t* state) {
  gpuhal_device_t* device = state->device;
  int32_t* count;
  int32_t now;
  if (!gpuhal__park_possible(state)) return 0;
  count = &device->driver->ordinals[device->ordinal].parked;
  now = gpuhal__atomic_load(count);
  while (now < state->tuning.gpu_parked_max)
    if (gpuhal__atomic_cas(count, &now, now + 1)) {
      /* and only while CUDA's store of streams has room (device.h, gpuhal__device_room_refill) */
      if (gpuhal__device_allows_park(device)) return 1;
      gpuhal__atomic_sub(count, 1);
      return 0;
    }
  return 0;
}

GPUHAL__PRIVATE void gpuhal__park_release(gpuhal__queue_state_t* state, int32_t n) {
  if (n > 0) gpuhal__atomic_sub(&state->device->driver->ordinals[state->device->ordinal].parked, n);
}

GPUHAL__PRIVATE int gpuhal__action_park_reserve(gpuhal__action_t* a) {
  if (!gpuhal__park_reserve(a->state)) return 0;
  if (!gpuhal__memory_gpu_wait_claim(a->state->device)) {
    gpuhal__park_release(a->state, 1);
    return 0;
  }
  a->gpu_wait_counted = 1; /* counted now: gpuhal__action_issue finds it so */
  a->park_reserved = 1;
  return 1;
}

GPUHAL__PRIVATE uint32_t gpuhal__action_side_entries(const gpuhal__action_t* a) {
  uint32_t work = a->ops->stream_entries ? a->ops->stream_entries(a->user) : 1u;
  return a->wait_count + 1u + work + a->signal_count + 1u;
}

GPUHAL__PRIVATE uint32_t gpuhal__action_lane_entries(const gpuhal__action_t* a) {
  uint32_t work;
  if (a->provisional) return 1u; /* the rest goes on its side stream (GPUHAL__PARK_CHAIN_ENTRIES) */
  work = a->ops->stream_entries ? a->ops->stream_entries(a->user) : 1u;
  return a->wait_count + work + a->signal_count + 1u + (a->state->device->trace ? 2u : 0u);
}

GPUHAL__PRIVATE void gpuhal__lane_done_locked(gpuhal__queue_state_t* state, gpuhal__queue_lane_t* lane, uint64_t mark) {
  if (mark <= gpuhal__atomic_load_relaxed(&lane->entries_done)) return;
  gpuhal__atomic_store(&lane->entries_done, mark);
  if (!gpuhal__atomic_load(&lane->held_waiting)) return; /* atomic: gpuhal__lane_wait_room reads it unlocked */
  gpuhal__atomic_store(&lane->held_waiting, 0);
  state->held_kick = 1;
}

/* 1 when every wait of `earlier` that was not reached when it was resolved is implied by a
 * wait of `a`: the same semaphore, at least that value (values only grow). */
static int gpuhal__action_waits_imply(const gpuhal__action_t* a, const gpuhal__action_t* earlier) {
  uint32_t i, j;
  for (i = 0; i < earlier->wait_count; ++i) {
    const gpuhal__action_wait_t* w = &earlier->waits[i];
    int implied = w->kind == GPUHAL__WAIT_NOTHING;
    for (j = 0; !implied && j < a->wait_count; ++j)
      implied = a->waits[j].semaphore == w->semaphore && a->waits[j].value >= w->value;
    if (!implied) return 0;
  }
  return 1;
}

GPUHAL__PRIVATE int gpuhal__action_park_chain(gpuhal__action_t* a) {
  gpuhal__queue_state_t* state = a->state;
  gpuhal__queue_lane_t* lane = &state->lanes[a->queue_index];
  gpuhal__side_stream_t* side = NULL;
  uint32_t entries;
  if (!state->memops || a->host_fn || a->chain_claim) return 0;
  entries = gpuhal__action_side_entries(a);
  gpuhal__mutex_lock(&state->mutex);
  if (lane->chain_side) side = &state->sides[lane->chain_side - 1];
  if (side && side->tail && !side->claim && !side->broken && side->tail->caller_may_issue &&
      side->entries + entries <= GPUHAL__PARK_CHAIN_ENTRIES && gpuhal__action_waits_imply(a, side->tail)) {
    side->claim = a;
    side->actions++;
    side->entries += entries;
    a->side = lane->chain_side;
    a->side_entries = entries;
    a->chain_claim = 1;
  }
  gpuhal__mutex_unlock(&state->mutex);
  if (!a->chain_claim) return 0;
  /* Counted like a reservation's GPU wait (frees are put off meanwhile); refused while a
   * call that waits for a whole context runs. Outside the state's lock (lock order). */
  if (!gpuhal__memory_gpu_wait_claim(state->device)) {
    gpuhal__action_chain_unclaim(a);
    return 0;
  }
  a->gpu_wait_counted = 1;
  return 1;
}

GPUHAL__PRIVATE void gpuhal__action_chain_unclaim(gpuhal__action_t* a) {
  gpuhal__queue_state_t* state = a->state;
  int freed;
  if (!a->chain_claim) return;
  gpuhal__mutex_lock(&state->mutex);
  state->sides[a->side - 1].claim = NULL;
  a->chain_claim = 0;
  freed = gpuhal__side_stream_leave_locked(state, a, 1);
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__action_gpu_wait_count(a, 0);
  if (freed) gpuhal__driver_park_allowed(state->device->driver);
}

GPUHAL__PRIVATE void gpuhal__action_park_denied(gpuhal__action_t* a, int denied) {
  gpuhal__queue_state_t* state = a->state;
  gpuhal_driver_t* driver = state->device->driver;
  if (a->park_denied != denied) {
    a->park_denied = denied;
    gpuhal__atomic_add(&state->park_denied, denied ? 1 : -1);
    gpuhal__atomic_add_seq_cst(&driver->park_denied, denied ? 1 : -1);
  }
  /* Counted before the look at the ends (gpuhal__driver_park_allowed counts its end first) */
  if (denied && gpuhal__atomic_load_seq_cst(&driver->park_allowed) != a->park_allowed) {
    gpuhal__atomic_store(&state->park_retry, 1);
    gpuhal__queue_kick_issue(state);
  }
}

GPUHAL__PRIVATE void gpuhal__queue_park_retry(gpuhal_device_t* device) {
  gpuhal__queue_state_t* state = gpuhal__queue_state(device);
  if (!state || !gpuhal__atomic_load(&state->park_denied)) return;
  gpuhal__atomic_store(&state->park_retry, 1);
  gpuhal__queue_kick_issue(state);
}

GPUHAL__PRIVATE int gpuhal__queue_owns_thread(gpuhal_device_t* device) {
  gpuhal__queue_state_t* state = gpuhal__queue_state(device);
  uint32_t i;
  if (!state || !state->threads_started) return 0;
  if (gpuhal__thread_is_current(state->completion_thread)) return 1;
  for (i = 0; i < device->queue_count; ++i)
    if (gpuhal__atomic_load(&state->lanes[i].host_call_started) &&
        gpuhal__thread_is_current(state->lanes[i].host_call_thread))
      return 1;
  return 0;
}

GPUHAL__PRIVATE void gpuhal__queue_kick(gpuhal__queue_state_t* state) {
  gpuhal__worker_post(state->device, &state->pump_task);
}

GPUHAL__PRIVATE void gpuhal__queue_kick_issue(gpuhal__queue_state_t* state) {
  gpuhal__atomic_store(&state->issue_needed, 1);
  gpuhal__queue_kick(state);
}

GPUHAL__PRIVATE void gpuhal__queue_kick_retired_locked(gpuhal__queue_state_t* state) {
  if (state->retired_unkicked == 0) return;
  state->retired_unkicked = 0;
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__queue_kick(state);
  gpuhal__mutex_lock(&state->mutex);
}

GPUHAL__PRIVATE void gpuhal__woken_push(gpuhal__queue_state_t* state, gpuhal__action_t* a) {
  gpuhal__action_t* head = gpuhal__atomic_load_relaxed(&state->woken);
  do {
    a->woken_next = head;
  } while (!gpuhal__atomic_cas_weak_release(&state->woken, &head, a));
}

GPUHAL__PRIVATE void gpuhal__action_wake(gpuhal__action_t* a) {
  gpuhal__atomic_store(&a->wake, 1);
  if (gpuhal__atomic_exchange(&a->on_woken, 1)) return; /* the pump will look at it */
  gpuhal__woken_push(a->state, a);
}

GPUHAL__PRIVATE void gpuhal__action_make_pending(gpuhal__queue_state_t* state, gpuhal__action_t* a) {
  a->in_pending = 1;
  a->pending_seq = ++state->pending_seq;
  gpuhal__list_push_back(&state->pending, &a->link);
}

/* A wait's semaphore (`s`, locked) changed so that the action may go on, or must fail. */
static void gpuhal__action_wait_changed(gpuhal__action_t* a, gpuhal_semaphore_t* s) {
  gpuhal__queue_state_t* state = a->state;
  gpuhal__action_wake(a);
  if (gpuhal__semaphore_after_has(s, gpuhal__queue_issue_woken, state)) return;
  if (gpuhal__semaphore_after_room(s)) {
    /* Counted before `stopping` is read, so a release either sees the count or is seen. */
    gpuhal__atomic_add_seq_cst(&state->signal_runs, 1);
    if (!gpuhal__atomic_load_seq_cst(&state->stopping)) {
      gpuhal__semaphore_after_add(s, gpuhal__queue_issue_woken, state);
      return;
    }
    gpuhal__atomic_sub_seq_cst(&state->signal_runs, 1);
  }
  gpuhal__queue_kick_issue(state);
}

GPUHAL__PRIVATE void gpuhal__action_wait_notify(gpuhal__semaphore_waiter_t* waiter) {
  gpuhal__action_wait_changed((gpuhal__action_t*)waiter->user,
                              GPUHAL__CONTAINER_OF(waiter, gpuhal__action_wait_t, waiter)->semaphore);
}

GPUHAL__PRIVATE void gpuhal__action_fail_watch_notify(gpuhal__semaphore_waiter_t* watch) {
  gpuhal__action_wait_changed((gpuhal__action_t*)watch->user,
                              GPUHAL__CONTAINER_OF(watch, gpuhal__action_wait_t, fail_watch)->semaphore);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__action_acquire_locked(gpuhal__queue_state_t* state, gpuhal__action_t** out) {
  gpuhal__action_t* a = state->free_actions;
  if (!a) {
    gpuhal__action_block_t* block = NULL;
    uint32_t i;
    GPUHAL__RETURN_IF_ERROR(
        gpuhal__alloc_zeroed(state->device->allocator, sizeof(*block), "queue action pool block", (void**)&block));
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
                                                   void* inline_storage, void** storage, uint32_t* capacity, void** out,
                                                   const char* what) {
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

GPUHAL__PRIVATE gpuhal_status_t gpuhal__action_reserve(gpuhal__queue_state_t* state, gpuhal__action_t* a,
                                                       uint32_t waits, uint32_t signals) {
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

GPUHAL__PRIVATE void gpuhal__action_retire(gpuhal__action_t* a) {
  gpuhal__queue_state_t* state = a->state;
  gpuhal__mutex_lock(&state->mutex);
  gpuhal__list_push_back(&state->retired, &a->link);
  state->retired_unkicked = 0;
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__queue_kick(state);
}

GPUHAL__PRIVATE void gpuhal__action_describe(const gpuhal__action_t* a, char* out, size_t size) {
  const char* label = gpuhal__hooks()->action_label(a);
  snprintf(out, size, "queue '%s'%s%s%s #%llu (device %d, queue %u)", a->ops->name, GPUHAL__LABEL_ARGS(label),
           (unsigned long long)a->submit_number, a->state->device->ordinal, a->queue_index);
}

/* `who` was to signal `signal`: each semaphore fails with the cause and who that was. */
static void gpuhal__fail_signals_for(gpuhal_semaphore_list_t signal, gpuhal_status_t cause, const char* who) {
  uint32_t i;
  for (i = 0; i < signal.count; ++i) {
    gpuhal_semaphore_t* s = signal.semaphores[i];
    gpuhal__semaphore_fail_owned(
        s, gpuhal_status_annotate(gpuhal_status_clone(cause), "failing semaphore%s%s%s that %s was to signal to %llu",
                                  GPUHAL__LABEL_ARGS(s->label), who, (unsigned long long)signal.values[i]));
  }
}

GPUHAL__PRIVATE void gpuhal__queue_fail_signals(gpuhal_semaphore_list_t signal, gpuhal_status_t cause, const char* what,
                                                int ordinal, uint32_t queue) {
  char who[96];
  snprintf(who, sizeof(who), "queue '%s' (device %d, queue %u)", what, ordinal, queue);
  gpuhal__fail_signals_for(signal, cause, who);
}

GPUHAL__PRIVATE void gpuhal__action_fail_signals(gpuhal__action_t* a, gpuhal_status_t cause) {
  char who[GPUHAL__ACTION_WHO_MAX];
  uint32_t i;
  gpuhal__action_describe(a, who, sizeof(who));
  for (i = 0; i < a->signal_count; ++i) {
    gpuhal__timepoint_t* tp = &a->signals[i];
    gpuhal_semaphore_list_t one = gpuhal_semaphore_list_one(&tp->semaphore, &tp->value);
    gpuhal__semaphore_remove_timepoint(tp);
    gpuhal__fail_signals_for(one, cause, who);
  }
}

GPUHAL__PRIVATE void gpuhal__action_fail(gpuhal__action_t* a, gpuhal_status_t cause) {
  if (!cause) cause = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "queue action failed without a cause");
  gpuhal__action_fail_signals(a, cause);
  if (a->ops->complete) a->ops->complete(a->user, cause);
  gpuhal_status_free(a->failure);
  a->failure = cause;
}

GPUHAL__PRIVATE void gpuhal__action_note_done(const gpuhal__action_t* a) {
  gpuhal__queue_lane_t* lane = &a->state->lanes[a->queue_index];
  gpuhal__atomic_store(&lane->last_kind, a->ops->name);
  gpuhal__atomic_store(&lane->last_done, a->submit_number);
}

GPUHAL__PRIVATE void gpuhal__action_succeed(gpuhal__action_t* a) {
  uint32_t i;
  gpuhal__action_note_done(a);
  for (i = 0; i < a->signal_count; ++i) gpuhal__semaphore_advance(a->signals[i].semaphore, a->signals[i].value);
  /* Advancing unlinked every timepoint of the action (each is at or below the new value). */
  a->completed_ok = 1;
  if (a->ops->complete) a->ops->complete(a->user, NULL);
}

GPUHAL__PRIVATE void gpuhal__queue_mark_lost(gpuhal__queue_state_t* state, gpuhal_status_t cause) {
  int first = 0;
  gpuhal__mutex_lock(&state->mutex);
  if (!state->lost) {
    state->lost = gpuhal_status_annotate(gpuhal_status_clone(cause), "device %d is lost", state->device->ordinal);
    gpuhal__atomic_store(&state->lost_flag, 1);
    first = 1;
  }
  gpuhal__atomic_store(&state->device->lost, 1);
  if (state->device->driver->ordinals)
    gpuhal__atomic_store(&state->device->driver->ordinals[state->device->ordinal].lost, 1);
  gpuhal__mutex_unlock(&state->mutex);
  if (first) {
    gpuhal__log(state->device->logger, GPUHAL_LOG_ERROR, "device %d lost: %s", state->device->ordinal,
                gpuhal_status_message(cause));
    gpuhal__queue_kick_issue(state);
  }
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__queue_lost_clone(gpuhal__queue_state_t* state) {
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

/* Also notes, for the first 32 signals, the highest wait on the same semaphore: such work
 * cannot advance it before it reaches that value (gpuhal__semaphore_signaller_add; that
 * waiter's signals_it and the timepoint's own_wait). Only that one wait counts the action,
 * so an action with several waits on the semaphore is never counted twice; the others are
 * implied by it (values only grow) and marked so, which also makes that wait the one the
 * action blocks on: blocked on a lower one, which counts nothing, a released semaphore was
 * never found abandoned. Past 32 the semaphore is simply taken as signalled by work that
 * may run, which never fails it wrongly. */
GPUHAL__PRIVATE void gpuhal__action_retain_semaphores(gpuhal__action_t* a) {
  uint32_t i, j;
  a->shared_signal_refs = 0;
  for (i = 0; i < a->wait_count; ++i) gpuhal__object_retain(&a->waits[i].semaphore->object);
  for (i = 0; i < a->signal_count; ++i) {
    gpuhal__timepoint_t* tp = &a->signals[i];
    gpuhal__action_wait_t* highest = NULL;
    for (j = 0; i < 32 && j < a->wait_count; ++j)
      if (a->waits[j].semaphore == tp->semaphore && (!highest || a->waits[j].value > highest->value))
        highest = &a->waits[j];
    tp->own_wait = highest ? highest->value : 0;
    if (highest) {
      for (j = 0; j < a->wait_count; ++j)
        if (a->waits[j].semaphore == tp->semaphore && &a->waits[j] != highest) a->waits[j].kind = GPUHAL__WAIT_NOTHING;
      highest->waiter.signals_it++;
      a->shared_signal_refs |= 1u << i;
    } else {
      gpuhal__object_retain(&tp->semaphore->object);
    }
    gpuhal__semaphore_signaller_add(tp->semaphore);
  }
}

GPUHAL__PRIVATE void gpuhal__action_drop_wait_events(gpuhal__action_t* a) {
  uint32_t i;
  for (i = 0; i < a->wait_count; ++i) {
    gpuhal__event_release(a->waits[i].event);
    a->waits[i].event = NULL;
  }
}

GPUHAL__PRIVATE void gpuhal__action_gpu_wait_count(gpuhal__action_t* a, int in) {
  if (a->gpu_wait_counted == in) return;
  a->gpu_wait_counted = in;
  gpuhal__memory_gpu_waits_add(a->state->device, in ? 1 : -1);
}

/* On the worker (or a harvesting submitter): drops everything the action holds. Its own
 * event, when this was the last reference, goes on `*events` (the state's pool). */
static void gpuhal__action_drop(gpuhal__action_t* a, gpuhal__event_t** events) {
  gpuhal__queue_state_t* state = a->state;
  uint32_t i;
  if (a->ops->release) a->ops->release(a->user, state->device);
  GPUHAL__TRACE(state->device, gpuhal__hooks()->trace_action_release(state->device, a)); /* trace hook */
  /* Only an action that never issued can still be registered (on its blocking wait); it
   * goes before its signals, which then no longer count it as blocked. */
  if (!a->event && a->next_wait < a->wait_count)
    gpuhal__semaphore_unregister(a->waits[a->next_wait].semaphore, &a->waits[a->next_wait].waiter);
  for (i = 0; a->fail_watching && i < a->wait_count; ++i)
    gpuhal__semaphore_unregister(a->waits[i].semaphore, &a->waits[i].fail_watch);
  if (a->input_watched) gpuhal__semaphore_unregister(a->input_watched, &a->input_watch);
  a->input_watched = NULL;
  for (i = 0; a->value_waits && i < a->wait_count; ++i) /* and its waits on the GPU */
    if (a->waits[i].kind == GPUHAL__WAIT_VALUE)
      gpuhal__semaphore_unregister(a->waits[i].semaphore, &a->waits[i].waiter);
  /* Signals first: a signal may share its semaphore reference with a wait. */
  for (i = 0; i < a->signal_count; ++i) {
    if (!a->completed_ok) gpuhal__semaphore_remove_timepoint(&a->signals[i]);
    gpuhal__semaphore_reassert_failure(a->signals[i].semaphore);
    gpuhal__semaphore_signaller_done(a->signals[i].semaphore);
    if (!gpuhal__action_signal_ref_shared(a, i)) gpuhal__semaphore_release_ref(a->signals[i].semaphore);
  }
  gpuhal__action_drop_wait_events(a);
  for (i = 0; i < a->wait_count; ++i) gpuhal__semaphore_release_ref(a->waits[i].semaphore);
  gpuhal__action_chain_unclaim(a);     /* never issued */
  gpuhal__action_gpu_wait_count(a, 0); /* an issue that failed */
  if (a->park_reserved) {              /* never issued */
    gpuhal__park_release(a->state, 1);
    gpuhal__driver_park_allowed(a->state->device->driver);
  }
  a->park_reserved = 0;
  gpuhal__action_park_denied(a, 0);
  a->completed_ok = 0;
  a->value_waits = 0;
  a->provisional = 0;
  a->foreign_waits = 0;
  a->shared_signal_refs = 0;
  gpuhal__event_release_to(a->event, events);
  a->event = NULL;
  gpuhal_status_free(a->failure);
  a->failure = NULL;
  a->ops = NULL;
  a->user = NULL;
  a->host_fn = NULL;
}

GPUHAL__PRIVATE void gpuhal__actions_release(gpuhal__queue_state_t* state, gpuhal__list_node_t* retired) {
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
  gpuhal__device_work_ended(state->device, count); /* before the count drops: a settle that waited sees it */
  gpuhal__mutex_lock(&state->mutex);
  last->next_free = state->free_actions;
  state->free_actions = first;
  if (gpuhal__atomic_sub(&state->outstanding, count) == 0) gpuhal__cond_broadcast(&state->idle_cond);
  gpuhal__mutex_unlock(&state->mutex);
}

GPUHAL__PRIVATE void gpuhal__list_splice_back(gpuhal__list_node_t* to, gpuhal__list_node_t* from) {
  if (gpuhal__list_empty(from)) return;
  from->next->prev = to->prev;
  to->prev->next = from->next;
  from->prev->next = to;
  to->prev = from->prev;
  gpuhal__list_init(from);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__action_wait_failure(const gpuhal__action_t* a, gpuhal_status_t cause_clone,
                                                            gpuhal_semaphore_t* s, uint64_t value) {
  char who[GPUHAL__ACTION_WHO_MAX];
  gpuhal__action_describe(a, who, sizeof(who));
  return gpuhal__semaphore_failure_for(cause_clone, who, s, value);
}
