/* gpuhal - queue: the device hooks that create and destroy a device's queue state (its
 * lanes, threads, event pool and side streams), called from device.h.
 *
 * Part of the queue (its rules are at the top of queue.h). */
#include "queue.h"
#include "status.h"

GPUHAL__PRIVATE gpuhal_status_t gpuhal__queue_state_create(gpuhal_device_t* device) {
  gpuhal__queue_state_t* state = NULL;
  gpuhal_status_t status;
  uint32_t i;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, sizeof(*state), "queue state", (void**)&state));
  state->device = device;
  gpuhal__mutex_init(&state->mutex);
  gpuhal__mutex_init(&state->issue_mutex);
  gpuhal__cond_init(&state->completion_cond);
  gpuhal__cond_init(&state->idle_cond);
  gpuhal__cond_init(&state->report_cond);
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
    gpuhal__list_init(&state->lanes[i].host_calls_due);
    gpuhal__list_init(&state->lanes[i].held);
    gpuhal__cond_init(&state->lanes[i].host_call_cond);
    state->lanes[i].state = state;
  }
  gpuhal__list_init(&state->incoming);
  gpuhal__list_init(&state->retired);
  gpuhal__list_init(&state->pending);
  gpuhal__list_init(&state->pump_task.node);
  state->pump_task.fn = gpuhal__queue_pump_task;
  gpuhal__event_pool_init(&state->events, device, CU_EVENT_DISABLE_TIMING);
  device->queue_state = state;
  status = gpuhal__thread_create(&state->completion_thread, gpuhal__completion_main, state, "gpuhal-complete");
  if (status) {
    device->queue_state = NULL;
    gpuhal__event_pool_deinit(&state->events);
    gpuhal__cond_destroy(&state->idle_cond);
    gpuhal__cond_destroy(&state->report_cond);
    for (i = 0; i < device->queue_count; ++i) gpuhal__cond_destroy(&state->lanes[i].host_call_cond);
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
  gpuhal__backoff_t backoff = gpuhal__backoff(10000, 1000000);
  gpuhal__list_node_t* n;
  /* Whatever can run now still runs; the rest is aborted. Ready work held for room on its
   * queue's stream (tuning.queue_entries_max) goes as that stream's work is seen complete,
   * which needs no thread of ours (the kicks this worker gets meanwhile find nothing). */
  for (;;) {
    gpuhal__mutex_lock(&state->issue_mutex);
    gpuhal__queue_issue_ready(state, INT_MAX, 0);
    if (!gpuhal__queue_holds(state)) {
      /* Held work issued last may have let pending work go (woken, not resolved yet): that
       * runs too. A pass empties the woken set, so this ends. */
      if (!state->woken_order.root && !gpuhal__atomic_load(&state->woken)) break;
      gpuhal__mutex_unlock(&state->issue_mutex);
      continue;
    }
    gpuhal__mutex_unlock(&state->issue_mutex);
    gpuhal__backoff_sleep(&backoff);
  }
  while ((n = gpuhal__list_pop_front(&state->pending)) != NULL) {
    gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    a->in_pending = 0;
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
  int32_t gpu_waits = 0;
  gpuhal__side_left_t* left;
  uint32_t i;
  gpuhal__queue_pump(state); /* releases the last retired actions */
  gpuhal__event_pool_deinit(&state->events);
  /* Every action is released: nothing is left on the side streams but what a failed
   * issue left there, which the abandoned value waits released. */
  for (i = 0; i < state->device->queue_count; ++i)
    if (state->lanes[i].side_tail)
      gpuhal_status_free(GPUHAL__CU(state->device->cu, cuEventDestroy, (state->lanes[i].side_tail)));
  for (i = 0; i < state->side_count; ++i) {
    gpuhal_status_t status = gpuhal__device_stream_destroy(state->device, state->sides[i].stream);
    if (status) {
      gpuhal__log(state->device->logger, GPUHAL_LOG_WARN, "device %d: destroying a side stream: %s",
                  state->device->ordinal, gpuhal_status_message(status));
      gpuhal_status_free(status);
    }
    /* the GPU waits a failed issue left there, and the GPU wait they kept counted; not seen
     * drained, a wait may still read its word, which then must not go to another semaphore */
    for (left = state->sides[i].left; left; left = left->next) gpuhal__semaphore_word_keep(left->semaphore);
    gpuhal__side_left_free(state, state->sides[i].left);
    state->sides[i].left = NULL;
    if (state->sides[i].gpu_wait_held) gpu_waits++;
  }
  gpuhal__side_left_free(state, state->left_drained); /* the pump above took them (threads stopped) */
  state->left_drained = NULL;
  while (state->left_spare) {
    left = state->left_spare;
    state->left_spare = left->next;
    gpuhal__free(state->device->allocator, left);
  }
  /* Broken ones not seen drained still hold their reservations. */
  if (state->side_count > state->side_free_count) {
    gpuhal__park_release(state, (int32_t)(state->side_count - state->side_free_count));
    gpuhal__driver_park_allowed(state->device->driver); /* another device of the ordinal may park */
  }
  if (gpu_waits) gpuhal__memory_gpu_waits_add(state->device, -gpu_waits);
  state->sides_draining = 0;
  gpuhal__free(state->device->allocator, state->sides);
  gpuhal__free(state->device->allocator, state->side_free);
  state->sides = NULL;
  state->side_free = NULL;
  state->side_count = state->side_free_count = state->side_capacity = 0;
  return NULL;
}

GPUHAL__PRIVATE void gpuhal__queue_state_destroy(gpuhal_device_t* device) {
  gpuhal__queue_state_t* state = gpuhal__queue_state(device);
  gpuhal__action_block_t* block;
  uint32_t i;
  if (!state) return;
  gpuhal__mutex_lock(&state->mutex);
  gpuhal__atomic_store_seq_cst(&state->stopping, 1);
  gpuhal__mutex_unlock(&state->mutex);
  /* Issues asked of signalling threads before they could see `stopping` end soon (they
   * only try the issue lock); later ones kick the worker. */
  while (gpuhal__atomic_load_seq_cst(&state->signal_runs) > 0) gpuhal__sleep_ns(10000);
  gpuhal_status_free(gpuhal__worker_call(device, gpuhal__queue_abort_pending, state));
  /* Issued work completes (or fails) on the completion and host-call threads and comes
   * back through the pump, which releases it. GPU value waits that nothing reached, and
   * that no issued work of this device is to reach, would keep their streams blocked
   * forever: the completion thread fails those semaphores. */
  gpuhal__mutex_lock(&state->mutex);
  state->idle_waiters++;
  state->abandon_value_waits = 1;
  gpuhal__cond_signal(&state->completion_cond);
  while (gpuhal__atomic_load(&state->outstanding) > 0) {
    /* Value waits issued since the last look (none are: submission is closed) or found
     * after it: look again now and then. */
    if (!gpuhal__cond_wait_until(&state->idle_cond, &state->mutex, gpuhal_timeout_relative_ns(10000000)) &&
        gpuhal__atomic_load(&state->outstanding) > 0) {
      state->abandon_value_waits = 1;
      gpuhal__cond_signal(&state->completion_cond);
    }
  }
  state->idle_waiters--;
  state->threads_stop = 1;
  gpuhal__cond_broadcast(&state->completion_cond);
  for (i = 0; i < device->queue_count; ++i) gpuhal__cond_broadcast(&state->lanes[i].host_call_cond);
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__thread_join(state->completion_thread);
  for (i = 0; i < device->queue_count; ++i)
    if (state->lanes[i].host_call_started) gpuhal__thread_join(state->lanes[i].host_call_thread);
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
  for (i = 0; i < device->queue_count; ++i) gpuhal__cond_destroy(&state->lanes[i].host_call_cond);
  gpuhal__cond_destroy(&state->completion_cond);
  gpuhal__mutex_destroy(&state->issue_mutex);
  gpuhal__mutex_destroy(&state->mutex);
  device->queue_state = NULL;
  gpuhal__free(device->allocator, state->lanes);
  gpuhal__free(device->allocator, state);
}
