/* gpuhal - queue: progress. The completion thread observes each queue's lane on its own
 * (never waiting on one lane while another has finished work), the host-call thread runs
 * host functions, and a busy submitter harvests its own queue's completed work.
 *
 * Part of the queue (its rules are at the top of queue.h). */
#include "queue.h"
#include "symbols.h"
#include "status.h"

/* ---- the completion thread: progress, per queue ---- */

/* 1 when `a` and `next` (of the same queue, not host calls) signal only the same semaphore,
 * `next` to a value at or above `a`'s, and `next` did not fail as it was issued: once both
 * are known complete, `a` need not advance it, `next` will (before either is released). */
static int gpuhal__actions_share_signal(const gpuhal__action_t* a, const gpuhal__action_t* next) {
  return next && !next->failure && next->queue_index == a->queue_index && !a->host_fn && !next->host_fn &&
         a->signal_count == 1 && next->signal_count == 1 && a->signals[0].semaphore == next->signals[0].semaphore &&
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
   * the values it waited on must be seen reached (another lane may not be observed yet).
   * Nor is it for work behind another device's event: that device's loss ends the wait
   * without its work having run. */
  for (i = 0; (a->provisional || a->host_fn || a->foreign_waits) && i < a->wait_count; ++i) {
    const gpuhal__action_wait_t* w = &a->waits[i];
    gpuhal__wait_query_t q;
    /* (A shared semaphore's word may be ahead of what this process took in yet.) */
    if (gpuhal__semaphore_value_seen(w->semaphore) >= w->value) continue;
    if (!gpuhal__atomic_load(&w->semaphore->failure)) {
      result = GPUHAL__INPUTS_UNKNOWN;
      continue;
    }
    if (!out_failure) return GPUHAL__INPUTS_FAILED;
    memset(&q, 0, sizeof(q));
    gpuhal__semaphore_check(w->semaphore, w->value, &q);
    *out_failure = gpuhal__action_wait_failure(a, q.failure, w->semaphore, w->value);
    return GPUHAL__INPUTS_FAILED;
  }
  return result;
}

/* Work parked on the GPU whose GPU waits do not all let it go yet: some waited value is
 * neither reached nor failed (a failure store releases the waits on its own semaphore). */
static int gpuhal__action_held(const gpuhal__action_t* a) {
  uint32_t i;
  for (i = 0; i < a->wait_count; ++i) {
    const gpuhal__action_wait_t* w = &a->waits[i];
    if (gpuhal__semaphore_value_seen(w->semaphore) < w->value && !gpuhal__atomic_load(&w->semaphore->failure)) return 1;
  }
  return 0;
}

/* Under the semaphore's lock (a waiter's notify): an input that deferred work watches
 * advanced or failed. The completion thread looks again before it sleeps; the signal is
 * sent without state->mutex (no lock is taken under a semaphore's but the worker's), so one
 * that comes just before it waits is lost, and the wait ends at its poll bound instead. */
static void gpuhal__action_input_notify(gpuhal__semaphore_waiter_t* watch) {
  gpuhal__queue_state_t* state = ((gpuhal__action_t*)watch->user)->state;
  gpuhal__atomic_store(&state->inputs_changed, 1);
  gpuhal__cond_signal(&state->completion_cond);
}

/* Deferred work (done, an input not seen reached): watches its first such input, so that
 * the thread that advances it (another lane's or device's completion, a host signal) wakes
 * this completion thread. Without it, a chain that alternates devices was seen done one hop
 * per poll of each completion thread (bench_multi_gpu's hop). */
static void gpuhal__action_watch_inputs(gpuhal__queue_state_t* state, gpuhal__action_t* a) {
  uint32_t i;
  for (i = 0; i < a->wait_count; ++i) {
    const gpuhal__action_wait_t* w = &a->waits[i];
    gpuhal__wait_query_t q;
    if (gpuhal__semaphore_value_seen(w->semaphore) >= w->value || gpuhal__atomic_load(&w->semaphore->failure)) continue;
    /* Registered (or just notified: inputs_changed says so). */
    if (a->input_watched == w->semaphore && a->input_watch.value == w->value) return;
    if (a->input_watched) gpuhal__semaphore_unregister(a->input_watched, &a->input_watch);
    gpuhal__semaphore_waiter_init(&a->input_watch);
    a->input_watch.wants_submitted = 0;
    a->input_watch.notify = gpuhal__action_input_notify;
    a->input_watch.user = a;
    a->input_watched = w->semaphore;
    memset(&q, 0, sizeof(q));
    q.waiter = &a->input_watch;
    if (gpuhal__semaphore_check(w->semaphore, w->value, &q) != GPUHAL__WAIT_PENDING) {
      a->input_watched = NULL; /* reached or failed meanwhile: not registered */
      gpuhal__atomic_store(&state->inputs_changed, 1);
    }
    gpuhal_status_free(q.failure);
    return;
  }
}

/* `a` is done, on inputs not known good yet: it waits on the lane's `deferred` list. */
static void gpuhal__action_defer(gpuhal__queue_state_t* state, gpuhal__queue_lane_t* lane, gpuhal__action_t* a) {
  gpuhal__list_push_back(&lane->deferred, &a->link);
  gpuhal__action_watch_inputs(state, a);
}

GPUHAL__PRIVATE int gpuhal__timepoint_settled(const gpuhal__timepoint_t* tp) {
  return gpuhal__action_inputs((const gpuhal__action_t*)tp->owner, NULL) == GPUHAL__INPUTS_REACHED;
}

/* The work of `a` (not a host call) completed: advance its values, unless a later complete
 * action of its queue advances the same semaphore past them (`skip_advance`). */
static void gpuhal__action_complete_ok(gpuhal__action_t* a, int skip_advance) {
  gpuhal_status_t failed = NULL;
  if (a->failure) return; /* its issue failed, its work had to pass first (gpuhal__action_keep_until_passed) */
  if (gpuhal__action_inputs(a, &failed) == GPUHAL__INPUTS_FAILED) {
    gpuhal__action_fail(a, failed);
  } else if (skip_advance) {
    a->completed_ok = 1; /* its timepoint goes with the later action's advance */
    gpuhal__action_note_done(a);
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
  if (state->retired_unkicked == 0) state->retired_since_ns = gpuhal_now_ns();
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
 * it failed. Blocks the completion thread (every lane of the device) while it polls, and
 * only on this rare path; a queue's stream never waits for a value not submitted, so it
 * drains (work on side streams is
 * asked without waiting: gpuhal__completion_observe_lane). */
static CUresult gpuhal__action_recheck(gpuhal__queue_state_t* state, gpuhal__action_t* a, CUresult query_error) {
  const gpuhal__cuda_symbols_t* cu = state->device->cu;
  const char* name = NULL;
  const char* text = NULL;
  gpuhal__backoff_t backoff = gpuhal__backoff(GPUHAL__COMPLETION_FIRST_SLEEP_NS, state->tuning.completion_max_sleep_ns);
  int tries;
  for (tries = 0; tries < 3; ++tries) {
    CUresult r;
    gpuhal__sleep_ns(GPUHAL__COMPLETION_FIRST_SLEEP_NS);
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
    gpuhal__backoff_sleep(&backoff);
  }
}

/* Records how `a` ended (`r`: its event's query). A successful action goes on `done`
 * (retired by the caller); a host call goes to the host-call thread. */
static void gpuhal__action_observe(gpuhal__queue_state_t* state, gpuhal__action_t* a, CUresult r, int skip_advance,
                                   gpuhal__list_node_t* done, uint32_t* done_count) {
  gpuhal_status_t lost;
  char who[GPUHAL__ACTION_WHO_MAX];
  if (r != CUDA_SUCCESS && !gpuhal__cuda_error_is_sticky(r)) r = gpuhal__action_recheck(state, a, r);
  if (r != CUDA_SUCCESS) {
    gpuhal_status_t status = gpuhal__cuda_status(state->device->cu, r, "cuEventQuery", __FILE__, __LINE__);
    if (gpuhal__cuda_error_is_sticky(r)) gpuhal__queue_mark_lost(state, status);
    if (a->failure) { /* it failed as it was issued (its signals then): only its work was awaited */
      gpuhal_status_free(status);
      gpuhal__action_retire(a);
      return;
    }
    /* After a loss, every later action fails with the original cause. */
    lost = gpuhal__queue_lost_clone(state);
    if (lost) {
      gpuhal_status_free(status);
      status = lost;
    }
    gpuhal__action_describe(a, who, sizeof(who));
    gpuhal__action_fail(a, gpuhal_status_annotate(status, "running %s", who));
    gpuhal__action_retire(a);
    return;
  }
  GPUHAL__TRACE(state->device, gpuhal__hooks()->trace_action_complete(state->device, a)); /* trace hook */
  if (a->host_fn) {
    gpuhal__queue_lane_t* lane = &state->lanes[a->queue_index];
    gpuhal__mutex_lock(&state->mutex);
    gpuhal__list_push_back(&lane->host_calls_due, &a->link);
    gpuhal__cond_signal(&lane->host_call_cond);
    gpuhal__mutex_unlock(&state->mutex);
    return;
  }
  gpuhal__action_complete_ok(a, skip_advance);
  gpuhal__list_push_back(done, &a->link);
  (*done_count)++;
}

/* `a`'s work left its lane's stream (complete, or its query failed): so did what was issued
 * before it there. Published at the end of the pass (gpuhal__completion_uncount_locked). */
static void gpuhal__completion_seen(gpuhal__queue_lane_t* lane, const gpuhal__action_t* a) {
  if (a->entries_mark > lane->done_seen) lane->done_seen = a->entries_mark;
}

/* Observes a lane's taken actions in order without blocking: stops at the first whose work
 * is not done. One query of the newest covers every older one (a stream runs in order).
 * Returns how many were observed. */
static uint32_t gpuhal__completion_observe_lane(gpuhal__queue_state_t* state, gpuhal__queue_lane_t* lane,
                                                gpuhal__list_node_t* done, uint32_t* done_count, uint32_t* blocked) {
  const gpuhal__cuda_symbols_t* cu = state->device->cu;
  gpuhal__list_node_t* list = &lane->observing;
  uint32_t observed = 0;
  int all_done = 0, halved = 0;
  int64_t now;
  gpuhal__list_node_t* n = lane->deferred.next;
  while (n != &lane->deferred) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    n = n->next;
    if (gpuhal__action_inputs(a, NULL) == GPUHAL__INPUTS_UNKNOWN) {
      ++*blocked;
      gpuhal__action_watch_inputs(state, a);
      continue;
    }
    gpuhal__list_remove(&a->link);
    gpuhal__action_observe(state, a, CUDA_SUCCESS, 0, done, done_count);
    lane->uncounted++;
    observed++;
  }
  /* Work on side streams: each looked at on its own (a stream holds one parked action and
   * what was chained behind it). */
  n = lane->side_observing.next;
  while (n != &lane->side_observing) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    CUresult r = cu->cuEventQuery(a->event->handle);
    n = n->next;
    /* A query that failed (not sticky) is asked of the stream (done: so is this work), and
     * never waited for here (gpuhal__action_recheck): the stream may wait for a value
     * that only this thread's progress brings (a host call it hands over). Not known yet:
     * the next pass asks again. */
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY && !gpuhal__cuda_error_is_sticky(r)) {
      r = cu->cuStreamQuery(a->stream);
      if (r != CUDA_SUCCESS && !gpuhal__cuda_error_is_sticky(r)) r = CUDA_ERROR_NOT_READY;
    }
    if (r == CUDA_ERROR_NOT_READY) {
      /* A failed input released only the GPU waits on its own semaphore: one on another
       * semaphore may still hold the work, for ever perhaps. Its signals fail now (the
       * action itself once its work ends, as any whose input failed). */
      gpuhal_status_t failed = NULL;
      if (gpuhal__action_held(a)) ++*blocked;
      if (!a->failed_early && gpuhal__action_inputs(a, &failed) == GPUHAL__INPUTS_FAILED) {
        a->failed_early = 1;
        gpuhal__action_fail_signals(a, failed);
        gpuhal_status_free(failed);
      }
      continue;
    }
    gpuhal__list_remove(&a->link);
    gpuhal__action_gpu_wait_count(a, 0);
    gpuhal__completion_seen(lane, a);
    /* It leaves its side stream, which is free once nothing else is on it (after an error,
     * once it also drained: nothing more goes there until then); a pending action denied a
     * parked stream may now have one, or room behind this stream's tail. */
    gpuhal__mutex_lock(&state->mutex);
    gpuhal__side_stream_leave_locked(state, a, r == CUDA_SUCCESS);
    gpuhal__mutex_unlock(&state->mutex);
    gpuhal__driver_park_allowed(state->device->driver);
    if (r == CUDA_SUCCESS) {
      if (gpuhal__action_inputs(a, NULL) == GPUHAL__INPUTS_UNKNOWN) {
        gpuhal__action_defer(state, lane, a);
        ++*blocked;
        continue;
      }
    }
    gpuhal__action_observe(state, a, r, 0, done, done_count);
    lane->uncounted++;
    observed++;
  }
  if (gpuhal__list_empty(list)) return observed;
  now = gpuhal_now_ns();
  if (list->next != list->prev)
    all_done =
        cu->cuEventQuery(GPUHAL__CONTAINER_OF(list->prev, gpuhal__action_t, link)->event->handle) == CUDA_SUCCESS;
  while (!gpuhal__list_empty(list)) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(list->next, gpuhal__action_t, link);
    gpuhal__action_t* next =
        list->next->next == list ? NULL : GPUHAL__CONTAINER_OF(list->next->next, gpuhal__action_t, link);
    int skip;
    CUresult r = all_done ? CUDA_SUCCESS : cu->cuEventQuery(a->event->handle);
    if (r == CUDA_ERROR_NOT_READY) {
      a->polled = 1;
      break;
    }
    gpuhal__list_remove(&a->link);
    gpuhal__completion_seen(lane, a);
    /* Done, but on inputs not known good yet: other lanes will tell (perhaps only once this
     * lane's later work is observed, so the lane goes on without it). */
    if (r == CUDA_SUCCESS && gpuhal__action_inputs(a, NULL) == GPUHAL__INPUTS_UNKNOWN) {
      gpuhal__action_defer(state, lane, a);
      continue;
    }
    /* `a` may leave its advance to `next` only when `next` will make it now: a `next` that
     * waits for inputs (perhaps for `a`'s own value, through another lane) would not. */
    skip = all_done && gpuhal__actions_share_signal(a, next) &&
           gpuhal__action_inputs(next, NULL) == GPUHAL__INPUTS_REACHED;
    if (r == CUDA_SUCCESS && now > a->dispatch_ns) { /* seen finish: its time; done at first look: less */
      int64_t typical = lane->typical_ns;
      if (a->polled || !typical)
        gpuhal__atomic_store(&lane->typical_ns,
                             typical ? (3 * typical + (now - a->dispatch_ns)) / 4 : now - a->dispatch_ns);
      else if (!halved++) /* once a pass: a batch found done at once is one sign */
        gpuhal__atomic_store(&lane->typical_ns, typical / 2);
    }
    gpuhal__action_observe(state, a, r, skip, done, done_count);
    lane->uncounted++;
    observed++;
    if (*done_count >= GPUHAL__RETIRE_BATCH && !skip) gpuhal__completion_retire_done(state, done, done_count);
  }
  return observed;
}

/* Under the state's mutex: moves to each lane's `observing` list the issued actions old
 * enough to look at (everything while a host call is in flight on any queue, someone waits
 * for idle or the device stops: a host call's function runs only once the values it waits
 * for are seen reached, and those may come from another queue's work; a lane's at
 * GPUHAL__HARVEST_MAX_WAIT_NS of age while ready work waits for room on its stream,
 * held_waiting). Returns when the
 * youngest action left behind ages (INT64_MAX: none left). */
static int64_t gpuhal__completion_take_locked(gpuhal__queue_state_t* state) {
  int64_t now = gpuhal_now_ns(), next_due = INT64_MAX;
  int take_all = state->threads_stop || state->idle_waiters > 0 || state->tuning.completion_min_age_ns == 0;
  uint32_t q;
  for (q = 0; !take_all && q < state->device->queue_count; ++q) take_all = state->lanes[q].host_calls > 0;
  state->completion_first_sleep_ns = INT64_MAX;
  for (q = 0; q < state->device->queue_count; ++q) {
    gpuhal__queue_lane_t* lane = &state->lanes[q];
    /* A submitter (or the worker) that harvested lately keeps the lane short itself: leave it
     * the work. */
    int64_t since = lane->last_harvest_ns;
    /* Work like the lane's earlier work is not done before most of its usual time. */
    int64_t look = lane->typical_ns / 4 * 3 < GPUHAL__COMPLETION_LOOK_MAX_NS ? lane->typical_ns / 4 * 3
                                                                             : GPUHAL__COMPLETION_LOOK_MAX_NS;
    int64_t age = look > state->tuning.completion_min_age_ns ? look : state->tuning.completion_min_age_ns;
    /* Work held for room on the lane's stream waits for this look: the work ages only as
     * long as a harvest would let it (a busy submitter still retires it itself). */
    if (gpuhal__atomic_load(&lane->held_waiting) && age > GPUHAL__HARVEST_MAX_WAIT_NS)
      age = GPUHAL__HARVEST_MAX_WAIT_NS;
    while (!gpuhal__list_empty(&lane->in_flight)) {
      gpuhal__action_t* a = GPUHAL__CONTAINER_OF(lane->in_flight.next, gpuhal__action_t, link);
      int64_t due = (a->dispatch_ns > since ? a->dispatch_ns : since) + age;
      if (!take_all && due > now) {
        if (due < next_due) next_due = due;
        break;
      }
      gpuhal__list_remove(&a->link);
      if (a->host_fn) lane->host_calls--;
      gpuhal__list_push_back(&lane->observing, &a->link);
    }
    gpuhal__list_splice_back(&lane->side_observing, &lane->side);
    if (!gpuhal__list_empty(&lane->observing)) {
      int64_t first = lane->typical_ns / 16 > GPUHAL__COMPLETION_FIRST_SLEEP_NS ? lane->typical_ns / 16
                                                                                : GPUHAL__COMPLETION_FIRST_SLEEP_NS;
      if (first < state->completion_first_sleep_ns) state->completion_first_sleep_ns = first;
    }
    if (!gpuhal__list_empty(&lane->side_observing)) /* side work: at the usual pace */
      state->completion_first_sleep_ns = GPUHAL__COMPLETION_FIRST_SLEEP_NS;
  }
  if (state->completion_first_sleep_ns == INT64_MAX)
    state->completion_first_sleep_ns = GPUHAL__COMPLETION_FIRST_SLEEP_NS;
  return next_due;
}

/* 1 when `value` of `s` is reached, or is to be reached by work of this device that is
 * issued, not provisional, with its inputs known, and that writes the word: such work waits
 * for nothing that is not submitted on this device, so it ends a GPU wait on the word by
 * itself. (At release, work held for room on its stream, tuning.queue_entries_max, is issued
 * only after the waits on its values went to the GPU.) Another device's work is not followed:
 * it may never end (its collective's peer part was just aborted here), and this release must
 * not wait for it. */
static int gpuhal__value_submitted(gpuhal__queue_state_t* state, gpuhal_semaphore_t* s, uint64_t value) {
  gpuhal__wait_query_t q;
  gpuhal__wait_state_t st;
  memset(&q, 0, sizeof(q));
  q.look_submitted = 1;
  q.skip_provisional = 1;
  q.local_events = &state->events;
  st = gpuhal__semaphore_check(s, value, &q);
  gpuhal_status_free(q.failure);
  return st == GPUHAL__WAIT_COMPLETED || (st == GPUHAL__WAIT_SUBMITTED && q.word_written && !q.foreign);
}

/* The same for the GPU waits failed issues left on side streams (gpuhal__side_left_t). Only
 * this thread takes them off a stream (gpuhal__completion_drain_sides); an issuer puts more
 * in front, which a later look finds. */
static void gpuhal__completion_abandon_left_waits(gpuhal__queue_state_t* state) {
  uint32_t i;
  for (i = 0;; ++i) {
    gpuhal__side_left_t* left;
    gpuhal__mutex_lock(&state->mutex);
    if (i >= state->side_count) {
      gpuhal__mutex_unlock(&state->mutex);
      return;
    }
    left = state->sides[i].left;
    gpuhal__mutex_unlock(&state->mutex);
    for (; left; left = left->next) {
      gpuhal_semaphore_t* s = left->semaphore;
      uint64_t value = left->waiter.value;
      if (gpuhal__atomic_load(&s->value) >= value || gpuhal__value_submitted(state, s, value)) continue;
      gpuhal__semaphore_fail_owned(s,
                                   gpuhal_status_make(GPUHAL_STATUS_ABORTED,
                                                      "device %d was released while a GPU wait that a failed issue "
                                                      "left on a side stream waited for this semaphore to reach %llu",
                                                      state->device->ordinal, (unsigned long long)value));
    }
  }
}

/* At device release, for GPU value waits whose values nobody reached or is to reach:
 * fails those semaphores (the failure store releases the waits), so the streams drain.
 * (Release looks again every few milliseconds while work is outstanding: a value that was
 * submitted, and whose work failed instead, is abandoned then.) */
static void gpuhal__completion_abandon_value_waits(gpuhal__queue_state_t* state) {
  uint32_t q;
  for (q = 0; q < state->device->queue_count; ++q) {
    gpuhal__list_node_t* n;
    for (n = state->lanes[q].side_observing.next; n != &state->lanes[q].side_observing; n = n->next) {
      gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
      uint32_t i;
      for (i = 0; a->value_waits && i < a->wait_count; ++i) {
        gpuhal__action_wait_t* w = &a->waits[i];
        if (w->kind != GPUHAL__WAIT_VALUE || gpuhal__atomic_load(&w->semaphore->value) >= w->value ||
            gpuhal__value_submitted(state, w->semaphore, w->value))
          continue;
        gpuhal__semaphore_fail_owned(
            w->semaphore,
            gpuhal_status_make(GPUHAL_STATUS_ABORTED,
                               "device %d was released while queue '%s' (queue %u) waited on the GPU "
                               "for this semaphore to reach %llu",
                               state->device->ordinal, a->ops->name, a->queue_index, (unsigned long long)w->value));
      }
    }
  }
  gpuhal__completion_abandon_left_waits(state);
}

/* Under the state's mutex: release asked to abandon GPU value waits, and no host call may
 * still signal what they wait for (its function may be the one that released the device). */
static int gpuhal__completion_abandon_due_locked(gpuhal__queue_state_t* state) {
  uint32_t i;
  if (!state->abandon_value_waits) return 0;
  for (i = 0; i < state->device->queue_count; ++i)
    if (!gpuhal__list_empty(&state->lanes[i].host_calls_due) || state->lanes[i].host_call_running) return 0;
  return 1;
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

/* When the oldest action the completion thread watches was issued (INT64_MAX: none). The
 * observing lists are the completion thread's own: no lock. */
static int64_t gpuhal__completion_oldest_ns(gpuhal__queue_state_t* state) {
  int64_t oldest = INT64_MAX;
  uint32_t q;
  for (q = 0; q < state->device->queue_count; ++q) {
    gpuhal__list_node_t* front = state->lanes[q].observing.next;
    if (front != &state->lanes[q].observing) {
      int64_t t = GPUHAL__CONTAINER_OF(front, gpuhal__action_t, link)->dispatch_ns;
      if (t < oldest) oldest = t;
    }
  }
  return oldest;
}

/* The longest sleep before the next poll of running work: tuning.completion_max_sleep_ns,
 * or, for work that has run long, 1/GPUHAL__COMPLETION_SLEEP_FRACTION of the oldest's age
 * (at most tuning.host_wait_max_sleep_ns, the host waits' own bound). Work that runs for
 * tens of milliseconds is then polled a few dozen times, not hundreds, and what waits on it
 * learns of its end within a small fraction of its length. */
static int64_t gpuhal__completion_max_sleep_ns(gpuhal__queue_state_t* state, int64_t now) {
  int64_t cap = state->tuning.completion_max_sleep_ns, oldest = gpuhal__completion_oldest_ns(state);
  if (oldest != INT64_MAX && now > oldest) {
    int64_t aged = (now - oldest) / GPUHAL__COMPLETION_SLEEP_FRACTION;
    if (aged > state->tuning.host_wait_max_sleep_ns) aged = state->tuning.host_wait_max_sleep_ns;
    if (aged > cap) cap = aged;
  }
  return cap;
}

/* Under the state's mutex, which it lets go around the kick: held work got room. */
static void gpuhal__queue_kick_held_locked(gpuhal__queue_state_t* state) {
  if (!state->held_kick) return;
  state->held_kick = 0;
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__queue_kick_issue(state);
  gpuhal__mutex_lock(&state->mutex);
}

/* Under the state's mutex: takes what this pass observed off the lanes' counts, and what
 * left their streams off their bounds (then held work goes: the pump is kicked). */
static void gpuhal__completion_uncount_locked(gpuhal__queue_state_t* state) {
  uint32_t q;
  for (q = 0; q < state->device->queue_count; ++q) {
    gpuhal__queue_lane_t* lane = &state->lanes[q];
    gpuhal__lane_done_locked(state, lane, lane->done_seen);
    if (!lane->uncounted) continue;
    gpuhal__atomic_store(&lane->count, gpuhal__atomic_load_relaxed(&lane->count) - lane->uncounted);
    lane->uncounted = 0;
  }
  gpuhal__queue_kick_held_locked(state);
}

/* No lane has issued work not yet observed (the lanes' counts are the only tally: a
 * device-wide one would cost every submission one more read-modify-write). */
static int gpuhal__queue_lanes_idle(gpuhal__queue_state_t* state) {
  uint32_t q;
  for (q = 0; q < state->device->queue_count; ++q)
    if (gpuhal__atomic_load(&state->lanes[q].count)) return 0;
  return 1;
}

/* Under the state's mutex: hands the actions retired since the worker's last kick to the
 * worker when they are due. Each kick wakes the worker, so while work keeps running they
 * wait for a batch (GPUHAL__RETIRE_BATCH), at most GPUHAL__RETIRE_MAX_DELAY_NS; they go at
 * once when the lanes are idle or someone waits for idle or release (what they hold, the
 * outstanding count and references, is wanted then). */
static void gpuhal__completion_kick_if_due_locked(gpuhal__queue_state_t* state) {
  if (state->retired_unkicked == 0) return;
  if (!state->threads_stop && state->idle_waiters == 0 && !gpuhal__queue_lanes_idle(state) &&
      gpuhal_now_ns() - state->retired_since_ns < GPUHAL__RETIRE_MAX_DELAY_NS)
    return;
  gpuhal__queue_kick_retired_locked(state);
}

/* Broken side streams with no action left on them (state->sides_draining): each is free
 * again once CUDA says what a failure left there drained (a GPU wait whose value came, or
 * whose semaphore failed), with its reservation, its GPU wait (gpu_wait_held) and its
 * `left` waits given back (those to the pump). Only this thread frees them (and the
 * release, once it stopped). No lock held. */
static void gpuhal__completion_drain_sides(gpuhal__queue_state_t* state) {
  const gpuhal__cuda_symbols_t* cu = state->device->cu;
  uint32_t i;
  int32_t gpu_waits = 0;
  int freed = 0, left = 0;
  gpuhal__mutex_lock(&state->mutex);
  for (i = 0; state->sides_draining && i < state->side_count; ++i) {
    CUstream stream = state->sides[i].stream;
    CUresult r;
    if (!state->sides[i].broken || state->sides[i].actions) continue;
    gpuhal__mutex_unlock(&state->mutex); /* `sides` may grow meanwhile: indexed again after */
    r = cu->cuStreamQuery(stream);
    gpuhal__mutex_lock(&state->mutex);
    if (r == CUDA_ERROR_NOT_READY) continue;
    left |= state->sides[i].left != NULL;
    gpu_waits += gpuhal__side_stream_drained_locked(state, i);
    freed = 1;
  }
  gpuhal__mutex_unlock(&state->mutex);
  if (left) gpuhal__queue_kick(state); /* the pump frees them */
  if (gpu_waits) gpuhal__memory_gpu_waits_add(state->device, -gpu_waits);
  if (freed) gpuhal__driver_park_allowed(state->device->driver);
}

/* Under the state's mutex: `due`, or sooner when retired actions wait for their kick. */
static int64_t gpuhal__completion_retire_due_locked(gpuhal__queue_state_t* state, int64_t due) {
  int64_t kick = state->retired_since_ns + GPUHAL__RETIRE_MAX_DELAY_NS;
  return state->retired_unkicked > 0 && kick < due ? kick : due;
}

static int gpuhal__completion_observing(gpuhal__queue_state_t* state) {
  uint32_t q;
  if (state->sides_draining && !state->threads_stop) return 1; /* until they drain (the release destroys them) */
  for (q = 0; q < state->device->queue_count; ++q)
    if (!gpuhal__list_empty(&state->lanes[q].observing) || !gpuhal__list_empty(&state->lanes[q].deferred) ||
        !gpuhal__list_empty(&state->lanes[q].side_observing))
      return 1;
  return 0;
}

/* What pass `pass` found blocked (state->gpu_blocked): the count first, then its pass. */
static void gpuhal__completion_note_blocked(gpuhal__queue_state_t* state, uint32_t pass, uint32_t blocked) {
  gpuhal__atomic_store(&state->gpu_blocked, blocked);
  gpuhal__atomic_store(&state->gpu_blocked_pass, pass);
}

GPUHAL__PRIVATE void* gpuhal__completion_main(void* arg) {
  gpuhal__queue_state_t* state = (gpuhal__queue_state_t*)arg;
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  /* Its cuEventQuery calls must not fail (nor break the capture) while an application
   * captures a stream in global mode. */
  gpuhal__capture_relax_thread(state->device->cu);
  /* cuEventQuery needs no current context on CUDA, but a gpuhal thread may hold it. */
  status = gpuhal__context_enter(state->device, &scope);
  int64_t last_work_ns = gpuhal_now_ns();
  gpuhal__driver_thread_begin(state->device->driver);
  int64_t poll_sleep_ns = 0;
  gpuhal_status_free(status);
  for (;;) {
    gpuhal__list_node_t done;
    uint32_t done_count = 0, observed = 0, blocked, pass, q;
    int64_t next_due, now;
    int observing, draining;
    gpuhal__mutex_lock(&state->mutex);
    if (state->report_request) gpuhal__queue_report_answer_locked(state); /* before it takes more */
    next_due = gpuhal__completion_take_locked(state);
    observing = gpuhal__completion_observing(state);
    draining = state->sides_draining != 0;
    if (gpuhal__completion_abandon_due_locked(state)) {
      state->abandon_value_waits = 0;
      gpuhal__mutex_unlock(&state->mutex);
      gpuhal__completion_abandon_value_waits(state);
      gpuhal__mutex_lock(&state->mutex);
    }
    if (!observing) {
      gpuhal__completion_note_blocked(state, gpuhal__atomic_add(&state->passes_begun, 1u), 0); /* watches nothing */
      if (state->threads_stop && gpuhal__queue_lanes_idle(state)) {
        gpuhal__mutex_unlock(&state->mutex);
        break;
      }
      /* Nothing to look at yet: sleep until the oldest issued action ages, or, with
       * nothing issued, nap while work keeps coming, then sleep until woken. */
      gpuhal__completion_kick_if_due_locked(state);
      now = gpuhal_now_ns();
      if (next_due == INT64_MAX && now - last_work_ns < GPUHAL__COMPLETION_ACTIVE_NS)
        next_due = now + GPUHAL__COMPLETION_NAP_NS;
      gpuhal__completion_sleep_locked(state, gpuhal__completion_retire_due_locked(state, next_due));
      gpuhal__mutex_unlock(&state->mutex);
      poll_sleep_ns = 0;
      continue;
    }
    gpuhal__mutex_unlock(&state->mutex);
    if (draining) gpuhal__completion_drain_sides(state); /* rare: no lock taken for it otherwise */
    gpuhal__list_init(&done);
    blocked = 0;
    pass = gpuhal__atomic_add(&state->passes_begun, 1u);
    for (q = 0; q < state->device->queue_count; ++q)
      observed += gpuhal__completion_observe_lane(state, &state->lanes[q], &done, &done_count, &blocked);
    gpuhal__completion_note_blocked(state, pass, blocked);
    gpuhal__completion_retire_done(state, &done, &done_count);
    gpuhal__mutex_lock(&state->mutex);
    gpuhal__completion_uncount_locked(state);
    gpuhal__completion_kick_if_due_locked(state);
    last_work_ns = gpuhal_now_ns();
    if (observed) {
      poll_sleep_ns = 0;
    } else {
      /* Work is running on some lane: poll again after a sleep that doubles, and sooner
       * when issued work ages or a host call arrives. */
      int64_t max_sleep_ns;
      now = gpuhal_now_ns();
      max_sleep_ns = gpuhal__completion_max_sleep_ns(state, now);
      poll_sleep_ns = poll_sleep_ns ? poll_sleep_ns * 2 : state->completion_first_sleep_ns;
      if (poll_sleep_ns > max_sleep_ns) poll_sleep_ns = max_sleep_ns;
      if (next_due > now + poll_sleep_ns) next_due = now + poll_sleep_ns;
      next_due = gpuhal__completion_retire_due_locked(state, next_due);
      if (!state->threads_stop && state->idle_waiters == 0 && !gpuhal__completion_abandon_due_locked(state) &&
          !gpuhal__atomic_exchange(&state->inputs_changed, 0))
        gpuhal__completion_sleep_locked(state, next_due);
    }
    gpuhal__mutex_unlock(&state->mutex);
  }
  if (!status) gpuhal__context_leave(state->device, &scope);
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__queue_host_call_thread_start(gpuhal__queue_state_t* state, uint32_t queue) {
  gpuhal__queue_lane_t* lane = &state->lanes[queue];
  gpuhal_status_t status = NULL;
  char name[16];
  if (gpuhal__atomic_load(&lane->host_call_started)) return NULL;
  snprintf(name, sizeof(name), "gpuhal-host%u", queue);
  gpuhal__mutex_lock(&state->mutex);
  if (state->threads_stop || state->stopping) {
    status =
        gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION, "gpuhal_queue_host_call: the device is being released");
  } else if (!lane->host_call_started) {
    /* Under the mutex, so that teardown sees every thread it must join. */
    status = gpuhal__thread_create(&lane->host_call_thread, gpuhal__host_call_main, lane, name);
    if (!status) gpuhal__atomic_store(&lane->host_call_started, 1);
  }
  gpuhal__mutex_unlock(&state->mutex);
  return status;
}

GPUHAL__PRIVATE void* gpuhal__host_call_main(void* arg) {
  gpuhal__queue_lane_t* lane = (gpuhal__queue_lane_t*)arg;
  gpuhal__queue_state_t* state = lane->state;
  gpuhal__driver_thread_begin(state->device->driver);
  /* Its releases make CUDA calls; the application's function runs in relaxed mode too. */
  gpuhal__capture_relax_thread(state->device->cu);
  for (;;) {
    gpuhal__action_t* a;
    gpuhal_status_t status;
    gpuhal__mutex_lock(&state->mutex);
    while (gpuhal__list_empty(&lane->host_calls_due) && !state->threads_stop)
      gpuhal__cond_wait(&lane->host_call_cond, &state->mutex);
    if (gpuhal__list_empty(&lane->host_calls_due)) {
      gpuhal__mutex_unlock(&state->mutex);
      break;
    }
    a = GPUHAL__CONTAINER_OF(gpuhal__list_pop_front(&lane->host_calls_due), gpuhal__action_t, link);
    lane->host_call_running = 1;
    gpuhal__mutex_unlock(&state->mutex);
    status = NULL;
    if (gpuhal__action_inputs(a, &status) != GPUHAL__INPUTS_FAILED) {
      int64_t trace_t0 = 0; /* trace hook: the host function's span */
      GPUHAL__TRACE(state->device, trace_t0 = gpuhal_now_ns());
      gpuhal__atomic_store(&lane->in_function, 1);
      status = a->host_fn(a->host_user);
      gpuhal__atomic_store(&lane->in_function, 0); /* before its signals: a waiter may settle next */
      GPUHAL__TRACE(state->device, gpuhal__hooks()->trace_host_call(state->device, a, trace_t0));
      if (status)
        status = gpuhal_status_annotate(status, "in the function of gpuhal_queue_host_call (device %d, queue %u)",
                                        state->device->ordinal, a->queue_index);
    }
    if (status) {
      gpuhal__action_fail(a, status);
    } else {
      gpuhal__action_succeed(a);
    }
    gpuhal__mutex_lock(&state->mutex);
    lane->host_call_running = 0;
    if (state->abandon_value_waits) gpuhal__cond_signal(&state->completion_cond);
    gpuhal__mutex_unlock(&state->mutex);
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
 * whatever ages past tuning.completion_min_age_ns, host calls and failures. The worker
 * harvests too, between turns of a long run of issues (gpuhal__queue_pump). Releasing here
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
  if (run < (uint32_t)state->tuning.harvest_min && (run == 0 || now - oldest < GPUHAL__HARVEST_MAX_WAIT_NS))
    return NULL;
  return probe;
}

/* Under the state's mutex: moves the lane's front actions up to `seq` to `taken`. */
static uint32_t gpuhal__harvest_take(gpuhal__queue_lane_t* lane, uint64_t seq, gpuhal__list_node_t* taken) {
  uint32_t n = 0;
  while (!gpuhal__list_empty(&lane->in_flight)) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(lane->in_flight.next, gpuhal__action_t, link);
    /* Provisional work (its inputs checked once known) is left to the completion thread. */
    if (a->seq > seq || a->host_fn || a->provisional || a->foreign_waits) break;
    gpuhal__list_remove(&a->link);
    gpuhal__list_push_back(taken, &a->link);
    gpuhal__lane_done_locked(lane->state, lane, a->entries_mark);
    n++;
  }
  if (n) {
    int64_t now = gpuhal_now_ns();
    const gpuhal__action_t* front = gpuhal__list_empty(&lane->in_flight)
                                        ? NULL
                                        : GPUHAL__CONTAINER_OF(lane->in_flight.next, gpuhal__action_t, link);
    gpuhal__atomic_store(&lane->count, gpuhal__atomic_load_relaxed(&lane->count) - n);
    lane->last_harvest_ns = now;
    gpuhal__atomic_store(&lane->harvest_due_ns, (front ? front->dispatch_ns : now) + GPUHAL__HARVEST_MAX_WAIT_NS);
  }
  return n;
}

/* Under the state's mutex: notes, per lane, how far the actions in `list` prove other lanes'
 * work complete (gpuhal__action_wait_t.cover_lane). */
static void gpuhal__harvest_note_covers(gpuhal__queue_state_t* state, const gpuhal__list_node_t* list) {
  const gpuhal__list_node_t* n;
  uint32_t queues = state->device->queue_count;
  for (n = list->next; n != list; n = n->next) {
    const gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    uint32_t i;
    for (i = 0; i < a->wait_count; ++i) {
      const gpuhal__action_wait_t* w = &a->waits[i];
      gpuhal__queue_lane_t* lane;
      if (w->kind != GPUHAL__WAIT_EVENT || !w->cover_lane || w->cover_lane > queues ||
          w->cover_lane - 1 == a->queue_index)
        continue;
      lane = &state->lanes[w->cover_lane - 1];
      if (w->cover_seq > lane->cover_seq) lane->cover_seq = w->cover_seq;
    }
  }
}

/* Under the state's mutex: the actions in `list` completed, so did the work they waited for
 * on the GPU through an event recorded on another lane's own stream, and everything issued
 * before it there. Takes that too (and in turn what it waited for), each lane's run as one
 * segment, put before `list`'s actions. So a chain across queues costs one query per look,
 * not one per queue. Returns how many it took. */
static uint32_t gpuhal__harvest_take_covered(gpuhal__queue_state_t* state, gpuhal__list_node_t* list) {
  gpuhal__list_node_t covered, segment;
  uint32_t total = 0, q, queues = state->device->queue_count;
  gpuhal__list_init(&covered);
  gpuhal__harvest_note_covers(state, list);
  for (;;) {
    for (q = 0; q < queues && !state->lanes[q].cover_seq; ++q) {
    }
    if (q == queues) break;
    gpuhal__list_init(&segment);
    /* Each pass clears one lane's mark and takes actions, or finds none: it ends. */
    total += gpuhal__harvest_take(&state->lanes[q], state->lanes[q].cover_seq, &segment);
    state->lanes[q].cover_seq = 0;
    gpuhal__harvest_note_covers(state, &segment);
    gpuhal__list_splice_back(&segment, &covered); /* covered = segment + covered */
    gpuhal__list_splice_back(&covered, &segment);
  }
  gpuhal__list_splice_back(&covered, list); /* list = covered + list */
  gpuhal__list_splice_back(list, &covered);
  return total;
}

/* The look itself: picks a probe, queries it, takes what it covers. */
static uint32_t gpuhal__harvest_look(gpuhal__queue_state_t* state, gpuhal__queue_lane_t* lane,
                                     gpuhal__list_node_t* taken) {
  gpuhal__action_t* probe;
  gpuhal__event_t* event = NULL;
  uint64_t seq = 0;
  int complete;
  uint32_t n = 0, covered;
  gpuhal__mutex_lock(&state->mutex);
  probe = gpuhal__harvest_pick(state, lane);
  if (probe) {
    event = probe->event;
    seq = probe->seq;
    gpuhal__event_retain(event);
  }
  gpuhal__mutex_unlock(&state->mutex);
  if (!probe) return 0;
  gpuhal__atomic_add_relaxed(&state->harvest_looks, 1);
  /* Errors and unfinished work alike are left to the completion thread. */
  complete = gpuhal__event_query(event) == 0;
  gpuhal__event_release(event);
  if (!complete) {
    /* Nothing done yet: the GPU is behind. Look less often until it catches up. */
    int32_t backoff = lane->harvest_backoff < 4 ? 4 : lane->harvest_backoff * 2;
    if (backoff > GPUHAL__HARVEST_MAX_BACKOFF) backoff = GPUHAL__HARVEST_MAX_BACKOFF;
    lane->harvest_backoff = backoff;
    gpuhal__atomic_store(&lane->harvest_skip, backoff);
    gpuhal__atomic_add_relaxed(&state->harvest_misses, 1);
    return 0;
  }
  lane->harvest_backoff = 0;
  /* Taken by the completion thread since means the front moved on: take what is left. */
  gpuhal__mutex_lock(&state->mutex);
  n = gpuhal__harvest_take(lane, seq, taken);
  covered = n ? gpuhal__harvest_take_covered(state, taken) : 0;
  gpuhal__queue_kick_held_locked(state); /* room for held work: the pump issues it */
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__atomic_add_relaxed(&state->harvested, n + covered);
  gpuhal__atomic_add_relaxed(&state->harvest_covered, covered);
  return n + covered;
}

GPUHAL__PRIVATE void gpuhal__queue_harvest(gpuhal__queue_state_t* state, uint32_t queue, int64_t now) {
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
  /* A queue call must not wait for the GPU: frees these releases make go to the worker. */
  gpuhal__put_off_begin();
  gpuhal__actions_release(state, &taken);
  gpuhal__put_off_end();
}
