/* gpuhal - queue: resolving an action's waits and issuing it onto a stream.
 *
 * Part of the queue (its rules are at the top of queue.h). The pump runs on the device's
 * worker; a submitter's fast path resolves and issues on its own thread inside a push/pop of
 * the device's context. Both hold issue_mutex, so issues are serialized per device. On the
 * memop path, waits that would block may go to the GPU (a value wait on a side stream), up to
 * the per-ordinal bound on parked streams. */
#include "queue.h"
#include "symbols.h"
#include "status.h"

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

/* Gives back what gpuhal__action_spare_word handed out and arming did not consume. */
static void gpuhal__action_spare_word_return(gpuhal__queue_state_t* state, uint64_t* word) {
  if (word && word != &gpuhal__arm_sentinel) gpuhal__word_return(state->device->driver, word);
}

/* The event a wait resolved to (NULL: none to wait for), and what its completion covers on
 * the lane that recorded it (a harvest's look uses that: gpuhal__harvest_take_covered). */
static void gpuhal__action_wait_take_event(gpuhal__action_wait_t* w, const gpuhal__wait_query_t* q) {
  w->event = q->event;
  w->cover_lane = q->event ? q->event_lane : 0;
  w->cover_seq = q->event_seq;
}

/* Blocked on wait `a->next_wait`, or (`from` 0) ready but held for room: its waits from
 * `from` on are watched for failure (set up on the first watch), since one failing fails
 * the action whatever the blocking wait, or the room, does. 1 with *out_failure when one
 * has failed already. */
static int gpuhal__action_watch_failures(gpuhal__action_t* a, uint32_t from, gpuhal_status_t* out_failure) {
  uint32_t i;
  if (!a->fail_watching) {
    for (i = 0; i < a->wait_count; ++i) {
      gpuhal__semaphore_waiter_init(&a->waits[i].fail_watch);
      a->waits[i].fail_watch.notify = gpuhal__action_fail_watch_notify;
      a->waits[i].fail_watch.user = a;
    }
    a->fail_watching = 1;
  }
  for (i = from; i < a->wait_count; ++i) {
    gpuhal__action_wait_t* w = &a->waits[i];
    gpuhal_status_t failure;
    if (w->kind == GPUHAL__WAIT_NOTHING) continue; /* implied by another, or reached */
    failure = gpuhal__semaphore_watch_failure(w->semaphore, &w->fail_watch);
    if (failure) {
      *out_failure = gpuhal__action_wait_failure(a, failure, w->semaphore, w->value);
      return 1;
    }
  }
  return 0;
}

/* Resolves the waits in order; stops at the first one that can be neither skipped, turned
 * into an event wait nor (memops) a value wait, registering on its semaphore so that its
 * change kicks the pump. With `take_events` (the action will be issued right away if
 * ready) event waits keep their event; on BLOCKED every event is dropped again. */
static gpuhal__resolve_t gpuhal__action_resolve_waits(gpuhal__action_t* a, int take_events,
                                                      gpuhal_status_t* out_failure) {
  gpuhal__queue_state_t* state = a->state;
  CUstream stream = state->device->streams[a->queue_index];
  int may_park = -1, park; /* may_park: asked once, when a wait first could go to the GPU */
  int denied = 0;
  while (a->next_wait < a->wait_count) {
    gpuhal__action_wait_t* w = &a->waits[a->next_wait];
    gpuhal__wait_query_t q;
    gpuhal__wait_state_t st;
    if (w->kind == GPUHAL__WAIT_NOTHING) { /* implied by another wait (gpuhal__action_retain_semaphores) */
      a->next_wait++;
      continue;
    }
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
    q.local_events = &state->events;
    /* First as on the event path, which settles most waits; a wait that would block there may
     * go to the GPU (asking only then whether another stream may park). */
    park = a->provisional;
    st = a->provisional ? GPUHAL__WAIT_PENDING : gpuhal__semaphore_check(w->semaphore, w->value, &q);
    /* A value the host is to signal waits on the GPU; so does one that provisional work of
     * this device signals (it is submitted, but may wait for the host itself): behind that
     * work's event (the same value) or the word. Either needs a parked stream, or a place
     * behind the queue's newest parked work. (Provisional work of another device is not
     * followed so: each device's completion thread learns its work's inputs reached only at
     * its own pace, so a chain that alternates devices all provisional was seen done hop by
     * hop at the pace of two threads' polls: bench_share's one-process chain on two H100s,
     * 15 us a hop on the host, 30-56 us so.) */
    if (st == GPUHAL__WAIT_PENDING && !park && state->memops && !a->not_provisional &&
        (!gpuhal__atomic_load(&w->semaphore->queue_signalled) || q.provisional_skipped)) {
      if (may_park < 0) {
        a->park_allowed = gpuhal__atomic_load_seq_cst(&state->device->driver->park_allowed);
        may_park = gpuhal__action_park_reserve(a) || gpuhal__action_park_chain(a);
      }
      park = may_park;
      denied = !park && gpuhal__park_possible(state);
    }
    if (st == GPUHAL__WAIT_PENDING) {
      q.waiter = &w->waiter;
      q.skip_provisional = !park;
      q.spare_word = park ? gpuhal__action_spare_word(state, w->semaphore) : NULL;
      st = gpuhal__semaphore_check(w->semaphore, w->value, &q);
      gpuhal__action_spare_word_return(state, q.spare_word);
    }
    if (st == GPUHAL__WAIT_PENDING) {
      gpuhal__action_drop_wait_events(a);
      if (gpuhal__action_watch_failures(a, a->next_wait + 1, out_failure)) return GPUHAL__RESOLVE_FAILED;
      gpuhal__action_park_denied(a, denied); /* then the end of what denied it wakes it to ask again */
      return GPUHAL__RESOLVE_BLOCKED;
    }
    if (st == GPUHAL__WAIT_FAILED) {
      gpuhal__action_drop_wait_events(a);
      *out_failure = gpuhal__action_wait_failure(a, q.failure, w->semaphore, w->value);
      return GPUHAL__RESOLVE_FAILED;
    }
    w->kind = st == GPUHAL__WAIT_ARMED       ? GPUHAL__WAIT_VALUE
              : st != GPUHAL__WAIT_SUBMITTED ? GPUHAL__WAIT_NOTHING
              : q.event || !take_events      ? GPUHAL__WAIT_EVENT
                                             : GPUHAL__WAIT_STREAM;
    gpuhal__action_wait_take_event(w, &q);
    w->word = q.word_address;
    if (w->kind == GPUHAL__WAIT_VALUE) a->value_waits = 1;
    if (st == GPUHAL__WAIT_SUBMITTED && q.foreign) a->foreign_waits = 1;
    if (w->kind == GPUHAL__WAIT_VALUE || (st == GPUHAL__WAIT_SUBMITTED && q.provisional)) a->provisional = 1;
    a->next_wait++;
  }
  return GPUHAL__RESOLVE_READY;
}

GPUHAL__PRIVATE gpuhal__resolve_t gpuhal__action_resolve(gpuhal__action_t* a, int take_events,
                                                         gpuhal_status_t* out_failure) {
  gpuhal__resolve_t r = gpuhal__action_resolve_waits(a, take_events, out_failure);
  if (r != GPUHAL__RESOLVE_BLOCKED && a->park_denied) {
    gpuhal__action_park_denied(a, 0);
    /* Woken to ask again, perhaps in place of other denied work (gpuhal__queue_wake_park_denied
     * wakes as many as there may be room for), and it needs no parked stream now: the next
     * denied work asks in its place. */
    if (!a->provisional) gpuhal__queue_park_retry(a->state->device);
  }
  if (a->park_reserved && !a->provisional) { /* reserved, then not needed */
    gpuhal__park_release(a->state, 1);
    a->park_reserved = 0;
    gpuhal__action_gpu_wait_count(a, 0);
    gpuhal__driver_park_allowed(a->state->device->driver);
  }
  if (a->chain_claim && !a->provisional) gpuhal__action_chain_unclaim(a); /* likewise */
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
  q.local_events = &a->state->events;
  q.skip_provisional = !a->provisional; /* as when it was resolved: off its queue's stream only */
  st = gpuhal__semaphore_check(w->semaphore, w->value, &q);
  if (st == GPUHAL__WAIT_FAILED) return gpuhal__action_wait_failure(a, q.failure, w->semaphore, w->value);
  if (st == GPUHAL__WAIT_PENDING)
    return gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "queue '%s': a submitted value %llu is no longer submitted",
                              a->ops->name, (unsigned long long)w->value);
  if (q.foreign) a->foreign_waits = 1;
  gpuhal__action_wait_take_event(w, &q);
  return NULL;
}

/* A note for a GPU value wait about to be enqueued on a side stream: a spare one
 * (state->left_spare) or a new one; NULL without memory. Under issue_mutex. */
static gpuhal__side_left_t* gpuhal__side_left_take(gpuhal__queue_state_t* state) {
  gpuhal__side_left_t* left = state->left_spare;
  if (left) {
    state->left_spare = left->next;
    return left;
  }
  return (gpuhal__side_left_t*)gpuhal__alloc(state->device->allocator, sizeof(*left));
}

/* `a`'s notes back to the spares: its issue succeeded (its waiters on the semaphores stand
 * for its GPU waits) or left nothing. Under issue_mutex. */
static void gpuhal__action_left_notes_spare(gpuhal__action_t* a) {
  gpuhal__queue_state_t* state = a->state;
  while (a->left_notes) {
    gpuhal__side_left_t* left = a->left_notes;
    a->left_notes = left->next;
    left->next = state->left_spare;
    state->left_spare = left;
  }
}

/* Puts the action's waits on `stream` (its queue's, or a side stream). Each GPU value wait
 * is noted (a->left_notes) before its cuStreamWaitValue64: should the issue fail, the note
 * is what lets that wait go (gpuhal__action_issue_failed), so without memory for it the
 * issue fails before the call, leaving nothing on the GPU. A wait whose call failed is
 * noted too: CUDA may have enqueued it all the same, and a wait left un-noted would hold
 * its stream (and a put-off free, and the device's release) for ever when its value does
 * not come, while a note of a wait that is not there only holds its semaphore on the
 * stream's parked list until the completion thread sees the stream drained (at once). */
static gpuhal_status_t gpuhal__action_issue_waits(gpuhal__action_t* a, CUstream stream) {
  gpuhal_device_t* device = a->state->device;
  int side = stream != device->streams[a->queue_index];
  uint32_t i;
  for (i = 0; i < a->wait_count; ++i) {
    gpuhal__action_wait_t* w = &a->waits[i];
    if (w->kind == GPUHAL__WAIT_VALUE) {
      gpuhal__side_left_t* left = gpuhal__side_left_take(a->state);
      if (!left)
        return gpuhal_status_make(GPUHAL_STATUS_RESOURCE_EXHAUSTED,
                                  "out of host memory allocating the note of a GPU wait on a side stream (%zu bytes)",
                                  sizeof(*left));
      left->semaphore = w->semaphore;
      left->waiter.value = w->value;
      left->next = a->left_notes;
      a->left_notes = left;
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

/* A side stream for provisional work `a`: the one it is chained to (gpuhal__action_park_chain),
 * else a free one, else a new one; `a` becomes its tail, and the newest parked work of its
 * lane. Under issue_mutex with the device's context current (issues are serialized: only
 * this adds streams). */
static gpuhal_status_t gpuhal__side_stream_acquire(gpuhal__queue_state_t* state, gpuhal__action_t* a, CUstream* out) {
  const gpuhal_allocator_t* allocator = state->device->allocator;
  gpuhal__side_stream_t* side;
  CUstream stream = NULL;
  gpuhal_status_t status = NULL;
  uint32_t index;
  gpuhal__mutex_lock(&state->mutex);
  if (a->chain_claim) {
    side = &state->sides[a->side - 1];
    side->claim = NULL;
    side->tail = a;
    a->chain_claim = 0;
    *out = side->stream;
    gpuhal__mutex_unlock(&state->mutex);
    return NULL;
  }
  if (state->side_free_count) {
    index = state->side_free[--state->side_free_count];
  } else {
    if (state->side_count == state->side_capacity) /* both read by the completion thread under the lock */
      status = gpuhal__grow32_pair(allocator, &state->side_capacity, state->side_count + 1u, (void**)&state->side_free,
                                   sizeof(uint32_t), "the free side streams", (void**)&state->sides,
                                   sizeof(gpuhal__side_stream_t), "side streams");
    gpuhal__mutex_unlock(&state->mutex);
    GPUHAL__RETURN_IF_ERROR(status);
    GPUHAL__RETURN_IF_ERROR(gpuhal__device_stream_create(state->device, &stream));
    gpuhal__mutex_lock(&state->mutex);
    index = state->side_count++;
    memset(&state->sides[index], 0, sizeof(state->sides[index]));
    state->sides[index].stream = stream;
  }
  side = &state->sides[index];
  side->actions = 1;
  side->entries = a->side_entries = gpuhal__action_side_entries(a);
  side->tail = a; /* no claim: a stream is free (or new) only with nothing on it */
  a->side = index + 1;
  state->lanes[a->queue_index].chain_side = index + 1;
  *out = side->stream;
  gpuhal__mutex_unlock(&state->mutex);
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

/* Side stream `index` holds nothing: free again, its reservation given back (and no lane
 * chains behind it). Under the state's mutex. */
static void gpuhal__side_stream_free_locked(gpuhal__queue_state_t* state, uint32_t index) {
  uint32_t q;
  state->side_free[state->side_free_count++] = index;
  gpuhal__park_release(state, 1);
  for (q = 0; q < state->device->queue_count; ++q)
    if (state->lanes[q].chain_side == index + 1) state->lanes[q].chain_side = 0;
}

GPUHAL__PRIVATE int gpuhal__side_stream_leave_locked(gpuhal__queue_state_t* state, gpuhal__action_t* a, int ok) {
  gpuhal__side_stream_t* side;
  uint32_t index = a->side;
  if (!index) return 0;
  side = &state->sides[index - 1];
  a->side = 0;
  side->actions--;
  side->entries -= a->side_entries;
  if (side->tail == a) side->tail = NULL; /* nothing more goes behind finished work */
  if (!ok) side->broken = 1;
  if (side->actions) return 0;
  if (side->broken) {
    /* What failed may have left work there (a GPU wait for a value to come): the completion
     * thread frees it once CUDA says it drained. */
    state->sides_draining++;
    if (state->completion_sleeping || state->completion_napping) gpuhal__cond_signal(&state->completion_cond);
    return 0;
  }
  gpuhal__side_stream_free_locked(state, index - 1);
  return 1;
}

GPUHAL__PRIVATE int gpuhal__side_stream_drained_locked(gpuhal__queue_state_t* state, uint32_t index) {
  gpuhal__side_stream_t* side = &state->sides[index];
  int gpu_wait = side->gpu_wait_held;
  while (side->left) {
    gpuhal__side_left_t* left = side->left;
    side->left = left->next;
    left->next = state->left_drained;
    state->left_drained = left;
  }
  side->gpu_wait_held = 0;
  side->broken = 0;
  state->sides_draining--;
  gpuhal__side_stream_free_locked(state, index);
  return gpu_wait;
}

GPUHAL__PRIVATE void gpuhal__side_left_free(gpuhal__queue_state_t* state, gpuhal__side_left_t* left) {
  while (left) {
    gpuhal__side_left_t* next = left->next;
    gpuhal__semaphore_unregister(left->semaphore, &left->waiter);
    gpuhal__semaphore_release_ref(left->semaphore);
    gpuhal__free(state->device->allocator, left);
    left = next;
  }
}

static void gpuhal__side_left_notify(gpuhal__semaphore_waiter_t* waiter) { GPUHAL__UNUSED(waiter); }

/* The note of a GPU value wait that failed issue `a` enqueued (or may have) on its side
 * stream, made before the wait (gpuhal__action_issue_waits): it now stands for that wait
 * among the GPU waits on its semaphore, which it holds until the stream drained. */
static void gpuhal__side_left_keep(gpuhal__side_left_t* left) {
  uint64_t value = left->waiter.value;
  gpuhal__object_retain(&left->semaphore->object);
  gpuhal__semaphore_waiter_init(&left->waiter);
  left->waiter.notify = gpuhal__side_left_notify;
  left->waiter.user = NULL;
  left->waiter.wants_submitted = 0;
  gpuhal__semaphore_parked_keep(left->semaphore, &left->waiter, value);
}

/* The signals, after the work: the armed words are written first, then the action's event
 * (taken from the pool before the work) is recorded, then the timepoints are published (see
 * gpuhal__semaphore_signal_begin). */
static gpuhal_status_t gpuhal__action_issue_signals(gpuhal__action_t* a, CUstream stream) {
  gpuhal_device_t* device = a->state->device;
  gpuhal__event_t* event = a->event;
  gpuhal_status_t status = NULL;
  uint32_t i, begun = 0, written = 0;
  /* Its waits on the GPU counted it as blocked on their semaphores; its timepoints will. */
  for (i = 0; !a->host_fn && a->value_waits && i < a->wait_count; ++i)
    if (a->waits[i].kind == GPUHAL__WAIT_VALUE)
      gpuhal__semaphore_parked_issued(a->waits[i].semaphore, &a->waits[i].waiter);
  for (i = 0; !a->host_fn && i < a->signal_count && !status; ++i) {
    gpuhal_semaphore_t* s = a->signals[i].semaphore;
    /* Work behind a GPU wait ends when the host signals: its waiters read the word. So do
     * host waiters that registered before this signal was submitted (wants_word). */
    uint64_t value = a->signals[i].value;
    uint64_t* spare =
        a->provisional || gpuhal__semaphore_wants_word(s, value) ? gpuhal__action_spare_word(a->state, s) : NULL;
    CUdeviceptr word = gpuhal__semaphore_signal_begin(s, value, &spare, a->provisional);
    gpuhal__action_spare_word_return(a->state, spare);
    begun++;
    a->signals[i].word_written = word != 0;
    if (word)
      status = GPUHAL__CU(device->cu, cuStreamWriteValue64,
                          (stream, word, gpuhal__semaphore_word_value(s, value), CU_STREAM_WRITE_VALUE_DEFAULT));
    if (word) written = begun; /* a failed enqueue may have gone through all the same */
  }
  if (!status) {
    status = GPUHAL__CU(device->cu, cuEventRecord, (event->handle, stream));
    event->stream = stream;
  }
  if (status) {
    for (i = 0; i < begun; ++i) gpuhal__semaphore_signal_end(a->signals[i].semaphore, i < written);
    return status;
  }
  for (i = 0; i < begun; ++i) {
    a->signals[i].event = a->event;
    a->signals[i].issue_seq = a->seq;
    a->signals[i].issue_lane = stream == device->streams[a->queue_index] ? a->queue_index + 1 : 0;
    a->signals[i].provisional = a->provisional;
    a->signals[i].inputs_checked = a->foreign_waits;
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
  gpuhal_status_t status = a->provisional ? gpuhal__side_stream_acquire(a->state, a, &stream) : NULL;
  a->seq = ++a->state->dispatch_seq; /* issue order: issues are serialized by issue_mutex */
  a->stream = stream;
  if (!status && a->provisional) a->park_reserved = 0; /* the side stream holds it now */
  /* Side work may wait on the GPU for a value not submitted (directly, or through other
   * side work): count it before it is enqueued. */
  if (a->provisional) gpuhal__action_gpu_wait_count(a, 1);
  if (!status && a->provisional) status = gpuhal__side_stream_follow(a->state, a->queue_index, stream);
  if (!status) status = gpuhal__action_issue_waits(a, stream);
  /* The signal's event comes from the pool before the work goes on the stream: a pool that
   * cannot grow (host memory, cuEventCreate) then fails the issue with nothing enqueued. A
   * failure after the work was enqueued would retire the action, and let go of what the
   * work uses, while the stream may still run it. From here on work of it may be on the
   * stream (gpuhal__action_keep_until_passed). */
  if (!status) status = gpuhal__event_pool_acquire(&a->state->events, &a->event);
  if (status) {
    gpuhal__action_drop_wait_events(a);
    return status;
  }
  if (a->ops->issue) {
    int64_t trace_t0 = 0; /* trace hook: GPU timing events around the work */
    gpuhal_status_t issued;
    GPUHAL__TRACE(device, trace_t0 = gpuhal__hooks()->trace_issue_begin(device, a, stream));
    issued = a->ops->issue(a->user, device, stream);
    GPUHAL__TRACE(device, gpuhal__hooks()->trace_issue_end(device, a, stream, trace_t0, issued != NULL));
    GPUHAL__RETURN_IF_ERROR(issued);
  }
  GPUHAL__RETURN_IF_ERROR(gpuhal__action_issue_signals(a, stream));
  gpuhal__action_left_notes_spare(a); /* its waiters on the semaphores stand for its GPU waits */
  return NULL;
}

/* The words a failed issue wrote (cuStreamWriteValue64 of its signals' values) are written
 * when the stream gets there, perhaps long after the failure stored the failed value (on a
 * side stream, once its gate opens): that lowers the word again, and a GPU wait not yet
 * polling then stays blocked. A write of the failed value behind each puts it back, in
 * stream order. Best effort: on a broken stream (sticky error) the device is lost, and its
 * release stores the failures again. */
static void gpuhal__action_rewrite_failed_words(gpuhal__action_t* a, CUresult stream_state) {
  uint32_t i;
  if (gpuhal__cuda_error_is_sticky(stream_state)) return;
  for (i = 0; i < a->signal_count; ++i) {
    uint64_t value = 0;
    CUdeviceptr word;
    if (!a->signals[i].word_written) continue;
    word = gpuhal__semaphore_failed_word(a->signals[i].semaphore, &value);
    if (word) (void)a->state->device->cu->cuStreamWriteValue64(a->stream, word, value, CU_STREAM_WRITE_VALUE_DEFAULT);
  }
}

/* The issue of `a` failed after some of its work may have gone on its queue's stream (a
 * CUDA call failed in or after ops->issue), which is still running: the work runs when the
 * stream gets there and uses what the action holds (its command buffer and the buffers
 * that holds). Its event is recorded behind the work, and the action stays on its lane
 * like issued work until that event completes, failed already: then it is only retired
 * (gpuhal__action_complete_ok). 1 when so; 0: nothing of it can still run, or the record
 * failed too (the action is retired at once: the application's releases may then free
 * memory the stream still uses). Side streams: their work waits for values and may never
 * run; a failed side issue is retired at once, as before. */
static int gpuhal__action_keep_until_passed(gpuhal__action_t* a, CUresult stream_state) {
  const gpuhal__cuda_symbols_t* cu = a->state->device->cu;
  gpuhal__capture_scope_t capture;
  CUresult r;
  if (!a->event || a->side || stream_state != CUDA_ERROR_NOT_READY) return 0; /* no event: nothing enqueued */
  gpuhal__capture_relax(cu, &capture); /* perhaps the caller-issue path (device.h) */
  r = cu->cuEventRecord(a->event->handle, a->stream);
  gpuhal__capture_restore(cu, &capture);
  if (r != CUDA_SUCCESS) return 0;
  a->event->stream = a->stream;
  return 1;
}

/* An issue failed: sticky errors (the stream says so too) lose the device. 1 when the
 * action stays on its lane until its stream passed its work (gpuhal__action_keep_until_passed);
 * else it was retired. */
static int gpuhal__action_issue_failed(gpuhal__action_t* a, gpuhal_status_t status) {
  gpuhal__queue_state_t* state = a->state;
  char who[GPUHAL__ACTION_WHO_MAX];
  gpuhal__capture_scope_t capture;
  CUresult r;
  gpuhal__side_left_t *left, *it;
  gpuhal__capture_relax(state->device->cu, &capture); /* perhaps the caller-issue path (device.h) */
  r = state->device->cu->cuStreamQuery(a->stream);
  gpuhal__capture_restore(state->device->cu, &capture);
  /* The GPU value waits it enqueued (those noted: up to the one whose call failed) stay on
   * the side stream until their values come; the stream keeps their notes, which hold their
   * semaphores (and so their words) until it drained. */
  if (!a->side) gpuhal__action_left_notes_spare(a); /* none: value waits go on side streams */
  left = a->left_notes;
  a->left_notes = NULL;
  for (it = left; it; it = it->next) gpuhal__side_left_keep(it);
  gpuhal__mutex_lock(&state->mutex); /* what it enqueued may never run: nothing more goes there */
  if (a->side) {
    /* Those waits still hold the stream: its count goes to the stream, not away with the
     * action (a free or an unregistering run now would wait for a value that may only come
     * from the thread running it), until the stream drained. */
    gpuhal__side_stream_t* side = &state->sides[a->side - 1];
    if (a->gpu_wait_counted && !side->gpu_wait_held) {
      side->gpu_wait_held = 1;
      a->gpu_wait_counted = 0; /* handed over, still counted */
    }
    while (left) {
      gpuhal__side_left_t* next = left->next;
      left->next = side->left;
      side->left = left;
      left = next;
    }
  }
  gpuhal__side_stream_leave_locked(state, a, 0);
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__action_describe(a, who, sizeof(who));
  status = gpuhal_status_annotate(status, "issuing %s", who);
  if (gpuhal__cuda_error_is_sticky(r)) gpuhal__queue_mark_lost(state, status);
  gpuhal__action_fail(a, status);
  gpuhal__action_rewrite_failed_words(a, r);
  if (gpuhal__action_keep_until_passed(a, r)) return 1;
  gpuhal__action_retire(a);
  return 0;
}

GPUHAL__PRIVATE int64_t gpuhal__action_dispatch(gpuhal__queue_state_t* state, gpuhal__action_t* a, uint32_t entries) {
  gpuhal__queue_lane_t* lane = &state->lanes[a->queue_index];
  gpuhal_status_t status = gpuhal__action_issue(a);
  int64_t now;
  lane->entries_issued += entries;
  if (status && !gpuhal__action_issue_failed(a, status)) return 0;
  a->entries_mark = lane->entries_issued;
  if (a->stream == state->device->streams[a->queue_index]) lane->stream_mark = lane->entries_issued;
  a->dispatch_ns = now = gpuhal_now_ns();
  gpuhal__mutex_lock(&state->mutex);
  if (a->stream != state->device->streams[a->queue_index]) {
    gpuhal__list_push_back(&lane->side, &a->link);
  } else {
    gpuhal__list_push_back(&lane->in_flight, &a->link);
    if (a->host_fn) lane->host_calls++;
  }
  gpuhal__atomic_store(&lane->count, gpuhal__atomic_load_relaxed(&lane->count) + 1u); /* written under the mutex */
  /* A napping completion thread finds the action at its next look; a host call's function
   * should not wait for that. */
  if (state->completion_sleeping || (state->completion_napping && a->host_fn))
    gpuhal__cond_signal(&state->completion_cond);
  gpuhal__mutex_unlock(&state->mutex);
  return now;
}

/* ---- the bound on a queue's stream (tuning.queue_entries_max) ----
 * CUDA blocks a thread that enqueues on a stream holding about 1,020 entries until the
 * stream drains; an issuer holds issue_mutex, so every queue of the device would wait for
 * one queue's long kernel. Ready work beyond the bound waits on its lane's `held` list (in
 * `pending`, in the order it became ready: later ready work of the lane goes behind it, on
 * the fast path too) and is issued as the lane's work is seen complete: the completion
 * thread or a harvester raises entries_done and kicks the pump when held work asked for it
 * (held_waiting). Nothing waits for room on any thread. */

/* 1 when `need` more entries may go on `lane`'s stream now. Under issue_mutex (room only
 * grows meanwhile: entries_done rises, entries_issued and stream_mark are ours). */
static int gpuhal__lane_room(const gpuhal__queue_state_t* state, const gpuhal__queue_lane_t* lane, uint32_t need) {
  uint64_t done = gpuhal__atomic_load(&lane->entries_done);
  if (state->tuning.queue_entries_max < 0 || done >= lane->stream_mark) return 1; /* nothing of its own in flight */
  return lane->entries_issued - done + need <= (uint64_t)state->tuning.queue_entries_max;
}

/* 1 when ready `a` must wait for room: earlier ready work of its lane waits, or it does not fit.
 * *out_entries: the entries its issue will put on the lane (gpuhal__action_dispatch counts
 * them; taken before the issue, as a failed issue may have enqueued some). */
static int gpuhal__action_must_hold(const gpuhal__queue_state_t* state, const gpuhal__action_t* a,
                                    uint32_t* out_entries) {
  const gpuhal__queue_lane_t* lane = &state->lanes[a->queue_index];
  *out_entries = gpuhal__action_lane_entries(a);
  return !gpuhal__list_empty(&lane->held) || !gpuhal__lane_room(state, lane, *out_entries);
}

/* Ready `a` waits for room. It holds no event meanwhile (an event wait takes its event again
 * at issue, gpuhal__action_wait_event; a device's release must not wait for another's), and
 * its waits are watched for failure: one failing wakes it, and the pump fails it then
 * (gpuhal__queue_pump_pass), not once room comes. 1 with *out_failure, `a` not held, when a
 * wait has failed already. */
static int gpuhal__action_hold(gpuhal__queue_state_t* state, gpuhal__action_t* a, gpuhal_status_t* out_failure) {
  gpuhal__action_drop_wait_events(a);
  if (gpuhal__action_watch_failures(a, 0, out_failure)) return 1;
  a->held = 1;
  state->held_count++;
  gpuhal__list_push_back(&state->lanes[a->queue_index].held, &a->held_link);
  return 0;
}

static void gpuhal__action_unhold(gpuhal__queue_state_t* state, gpuhal__action_t* a) {
  if (!a->held) return;
  a->held = 0;
  state->held_count--;
  gpuhal__list_remove(&a->held_link);
}

/* No room for `need` on `lane`: asks whoever sees its work complete to kick the pump
 * (held_waiting), unless room came meanwhile (1). Under issue_mutex. */
static int gpuhal__lane_wait_room(gpuhal__queue_state_t* state, gpuhal__queue_lane_t* lane, uint32_t need) {
  int room;
  if (gpuhal__atomic_load(&lane->held_waiting)) return 0; /* asked already: whoever clears it kicks */
  gpuhal__mutex_lock(&state->mutex);                      /* as gpuhal__lane_done_locked: no kick is lost */
  room = gpuhal__lane_room(state, lane, need);
  if (!room) {
    gpuhal__atomic_store(&lane->held_waiting, 1);
    /* The completion thread then looks at the lane's work without letting it age. */
    if (state->completion_sleeping || state->completion_napping) gpuhal__cond_signal(&state->completion_cond);
  }
  gpuhal__mutex_unlock(&state->mutex);
  return room;
}

/* Issues `lane`'s held actions in order while they fit, at most *budget of them; on an
 * application thread (`caller`) only what a submitter may issue (the worker is kicked for
 * the rest). What does not fit waits for room. Under issue_mutex with the device's context
 * current. */
static void gpuhal__lane_issue_held(gpuhal__queue_state_t* state, gpuhal__queue_lane_t* lane, int* budget, int caller) {
  while (!gpuhal__list_empty(&lane->held)) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(lane->held.next, gpuhal__action_t, held_link);
    uint32_t need = gpuhal__action_lane_entries(a);
    if (!gpuhal__lane_room(state, lane, need) && !gpuhal__lane_wait_room(state, lane, need)) return;
    if (*budget <= 0 || (caller && !a->caller_may_issue)) {
      gpuhal__queue_kick_issue(state);
      return;
    }
    gpuhal__action_unhold(state, a);
    gpuhal__list_remove(&a->link);
    a->in_pending = 0;
    (*budget)--;
    gpuhal__action_dispatch(state, a, need);
  }
}

/* gpuhal__lane_issue_held for every lane that holds work (none on a lost device: the pump's
 * pass fails it). */
static void gpuhal__queue_issue_held(gpuhal__queue_state_t* state, int* budget, int caller) {
  uint32_t q;
  if (gpuhal__atomic_load(&state->lost_flag)) return;
  for (q = 0; q < state->device->queue_count; ++q)
    if (!gpuhal__list_empty(&state->lanes[q].held)) gpuhal__lane_issue_held(state, &state->lanes[q], budget, caller);
}

GPUHAL__PRIVATE int gpuhal__queue_holds(const gpuhal__queue_state_t* state) { return state->held_count != 0; }

GPUHAL__PRIVATE int64_t gpuhal__action_issue_or_hold(gpuhal__queue_state_t* state, gpuhal__action_t* a) {
  gpuhal_status_t failure = NULL;
  uint32_t entries;
  if (!gpuhal__action_must_hold(state, a, &entries)) return gpuhal__action_dispatch(state, a, entries);
  if (gpuhal__action_hold(state, a, &failure)) {
    gpuhal__action_fail(a, failure);
    gpuhal__action_retire(a);
    return 0;
  }
  gpuhal__action_make_pending(state, a);
  return 0;
}

/* Resolves a pending action again and issues or fails it when it is no longer blocked (or
 * holds it when its lane's stream has no room); returns 1 when it left the pending list. */
static int gpuhal__queue_pump_one(gpuhal__queue_state_t* state, gpuhal__action_t* a, gpuhal_status_t failure) {
  gpuhal__resolve_t r = failure ? GPUHAL__RESOLVE_FAILED : gpuhal__action_resolve(a, 1, &failure);
  uint32_t entries = 0;
  if (r == GPUHAL__RESOLVE_BLOCKED) return 0;
  if (r == GPUHAL__RESOLVE_READY && gpuhal__action_must_hold(state, a, &entries)) {
    if (!gpuhal__action_hold(state, a, &failure)) return 0;
    r = GPUHAL__RESOLVE_FAILED; /* a wait failed meanwhile */
  }
  gpuhal__list_remove(&a->link);
  a->in_pending = 0;
  gpuhal__action_unhold(state, a);
  if (r == GPUHAL__RESOLVE_FAILED) {
    gpuhal__action_fail(a, failure);
    gpuhal__action_retire(a);
  } else {
    gpuhal__action_dispatch(state, a, entries);
  }
  return 1;
}

/* One pass over the woken pending actions (on a lost device, over all of them), issuing or
 * failing at most *budget of them (the rest stay woken); returns how many left the list.
 * On an application thread (`caller`), an action that only the worker may issue ends the
 * pass with *budget at 0. Under issue_mutex with the device's context current. */
static int gpuhal__queue_pump_pass(gpuhal__queue_state_t* state, int* budget, int caller) {
  gpuhal__action_t* batch;
  gpuhal__heap_node_t* top;
  int progress = 0;
  batch = gpuhal__atomic_exchange_acquire(&state->woken, NULL);
  if (gpuhal__atomic_load(&state->lost_flag)) {
    gpuhal__list_node_t* n = state->pending.next;
    while (batch) { /* dropped: everything pending fails below */
      gpuhal__action_t* a = batch;
      batch = a->woken_next; /* read before on_woken is cleared: then a notify may reuse it */
      gpuhal__atomic_store_seq_cst(&a->on_woken, 0);
    }
    while ((top = gpuhal__heap_pop(&state->woken_order)) != NULL)
      gpuhal__atomic_store_seq_cst(&GPUHAL__CONTAINER_OF(top, gpuhal__action_t, woken_node)->on_woken, 0);
    while (n != &state->pending) {
      gpuhal__list_node_t* next = n->next;
      progress += gpuhal__queue_pump_one(state, GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link),
                                         gpuhal__queue_lost_clone(state));
      n = next;
    }
    return progress;
  }
  while (batch) {
    gpuhal__action_t* a = batch;
    batch = a->woken_next;
    a->woken_node.key = a->pending_seq;
    gpuhal__heap_push(&state->woken_order, &a->woken_node);
  }
  while ((top = state->woken_order.root) != NULL) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(top, gpuhal__action_t, woken_node);
    gpuhal__heap_pop(&state->woken_order);
    if (top->key != a->pending_seq) {
      /* Left over from an earlier pass, and pending again since (issued on a submitter's
       * fast path, released and reused meanwhile): its place is its new pending_seq. */
      top->key = a->pending_seq;
      gpuhal__heap_push(&state->woken_order, top);
      continue;
    }
    if (*budget <= 0 || (caller && !a->caller_may_issue)) {
      *budget = 0;
      gpuhal__heap_push(&state->woken_order, top); /* still woken: the next pass starts here */
      break;
    }
    /* Out of the order first, then take the wake: a notify in between pushes it again. An
     * entry may be stale (woken while it was being issued on a submitter's fast path). */
    gpuhal__atomic_store_seq_cst(&a->on_woken, 0);
    if (!a->in_pending || !gpuhal__atomic_exchange_seq_cst(&a->wake, 0)) continue;
    if (a->held) {
      /* Ready: its lane's `held` list issues it. Woken by a failure watch: a wait failed, and
       * it fails now, not once room comes (it leaves the list; nothing is issued for it, so
       * the order of what is issued holds). */
      gpuhal_status_t failure = NULL;
      if (gpuhal__action_watch_failures(a, 0, &failure) && gpuhal__queue_pump_one(state, a, failure)) {
        progress++;
        (*budget)--;
      }
      continue;
    }
    if (gpuhal__queue_pump_one(state, a, NULL)) {
      progress++;
      (*budget)--;
    }
  }
  return progress;
}

/* Moves the submissions the worker has not seen yet to `pending`, woken. Under
 * issue_mutex. */
static void gpuhal__queue_take_incoming(gpuhal__queue_state_t* state) {
  gpuhal__list_node_t incoming;
  gpuhal__list_node_t* n;
  gpuhal__list_init(&incoming);
  gpuhal__mutex_lock(&state->mutex);
  gpuhal__list_splice_back(&incoming, &state->incoming);
  gpuhal__atomic_store(&state->incoming_count, 0u);
  gpuhal__mutex_unlock(&state->mutex);
  while ((n = gpuhal__list_pop_front(&incoming)) != NULL) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    gpuhal__action_make_pending(state, a);
    gpuhal__action_wake(a);
  }
}

/* Wakes the first pending actions that were denied a parked stream, as many as there may be
 * free now (at least one), in submission order. Under issue_mutex. */
static void gpuhal__queue_wake_park_denied(gpuhal__queue_state_t* state) {
  gpuhal_device_t* device = state->device;
  int32_t room = state->tuning.gpu_parked_max - gpuhal__atomic_load(&device->driver->ordinals[device->ordinal].parked);
  gpuhal__list_node_t* n;
  if (room < 1) room = 1;
  for (n = state->pending.next; n != &state->pending && room > 0; n = n->next) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    if (!a->park_denied) continue;
    gpuhal__action_wake(a);
    room--;
  }
}

GPUHAL__PRIVATE int gpuhal__queue_issue_ready(gpuhal__queue_state_t* state, int budget, int caller) {
  gpuhal__queue_take_incoming(state);
  if (gpuhal__atomic_load(&state->park_retry) && gpuhal__atomic_exchange(&state->park_retry, 0))
    gpuhal__queue_wake_park_denied(state);
  gpuhal__queue_issue_held(state, &budget, caller); /* what became ready first goes first */
  while (gpuhal__queue_pump_pass(state, &budget, caller) > 0 && budget > 0) {
  }
  gpuhal__queue_issue_held(state, &budget, caller); /* what the passes held waits for room */
  return budget <= 0 && (state->woken_order.root != NULL || gpuhal__atomic_load(&state->woken) != NULL);
}

GPUHAL__PRIVATE void gpuhal__queue_issue_woken(void* arg) {
  gpuhal__queue_state_t* state = (gpuhal__queue_state_t*)arg;
  gpuhal_device_t* device = state->device;
  int left = 1;
  if (!state->tuning.no_caller_issue && !gpuhal__on_worker(device) && !gpuhal__queue_owns_thread(device) &&
      gpuhal__mutex_trylock(&state->issue_mutex)) {
    gpuhal__context_scope_t scope;
    gpuhal_status_t status = gpuhal__context_enter_enqueue(device, &scope); /* issues only (device.h) */
    if (!status) {
      left = gpuhal__queue_issue_ready(state, GPUHAL__SIGNAL_ISSUE_MAX, 1);
      gpuhal__context_leave(device, &scope);
    }
    gpuhal_status_free(status);
    gpuhal__mutex_unlock(&state->issue_mutex);
  }
  if (left) gpuhal__queue_kick_issue(state);
  gpuhal__atomic_sub_seq_cst(&state->signal_runs, 1);
}

GPUHAL__PRIVATE void gpuhal__queue_pump(gpuhal__queue_state_t* state) {
  gpuhal__side_left_t* left;
  gpuhal__list_node_t retired;
  gpuhal__list_init(&retired);
  /* Most kicks only bring retired actions: then leave issuing (and the fast path) alone.
   * New submissions move to `pending` under the issue lock, so a submitter's fast path
   * (which needs `incoming` empty and the issue lock) cannot overtake one of them that has
   * left `incoming` but is not issued yet: submission order holds. */
  if (gpuhal__atomic_exchange(&state->issue_needed, 0)) {
    int more;
    do {
      uint32_t q;
      gpuhal__mutex_lock(&state->issue_mutex);
      more = gpuhal__queue_issue_ready(state, GPUHAL__PUMP_ISSUE_BATCH, 0);
      gpuhal__mutex_unlock(&state->issue_mutex);
      /* A long run of issues (a chain released at once) retires its own completed work as a
       * submitter does, in one query per look, instead of leaving it to the completion
       * thread, whose many small looks compete with these issues inside the driver. */
      for (q = 0; q < state->device->queue_count; ++q) gpuhal__queue_harvest(state, q, 0);
    } while (more);
  }
  gpuhal__mutex_lock(&state->mutex);
  gpuhal__list_splice_back(&retired, &state->retired);
  left = state->left_drained;
  state->left_drained = NULL;
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__actions_release(state, &retired);
  gpuhal__side_left_free(state, left);
}

GPUHAL__PRIVATE void gpuhal__queue_pump_task(gpuhal__task_t* task) {
  gpuhal__queue_pump(GPUHAL__CONTAINER_OF(task, gpuhal__queue_state_t, pump_task));
}
