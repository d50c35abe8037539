/* queue_execute: gpuhal_queue_execute and barriers as queue actions, with their
 * pooled binding tables (queue_execute.h). */
#include "queue_execute.h"
#include "device.h"
#include "memory.h"
#include "semaphore.h"

static gpuhal_status_t gpuhal__execute_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  gpuhal__execute_action_t* action = (gpuhal__execute_action_t*)user;
  return action->command_buffer->backend->issue(action->command_buffer, action, device, stream);
}

/* Drops what the action holds and returns it to its command buffer's pool. */
static void gpuhal__execute_action_recycle(gpuhal__execute_action_t* action) {
  gpuhal_command_buffer_t* cb = action->command_buffer;
  uint32_t i;
  for (i = 0; i < cb->binding_slots; ++i) {
    gpuhal__buffer_release_ref(action->buffers[i]);
    action->buffers[i] = NULL;
  }
  gpuhal__mutex_lock(&cb->action_mutex);
  action->next_free = cb->free_actions;
  cb->free_actions = action;
  gpuhal__mutex_unlock(&cb->action_mutex);
}

static void gpuhal__execute_release(void* user, gpuhal_device_t* device) {
  gpuhal__execute_action_t* action = (gpuhal__execute_action_t*)user;
  gpuhal_command_buffer_t* cb = action->command_buffer;
  GPUHAL__UNUSED(device);
  gpuhal__execute_action_recycle(action);
  gpuhal__cb_release_ref(cb); /* may free the pool, action included */
}

/* What an execute may enqueue on a stream: a graph launch, or each command of a STREAM
 * command buffer (counted twice: a command may take a few CUDA calls). */
static uint32_t gpuhal__execute_entries_of(const gpuhal_command_buffer_t* cb) {
  return gpuhal__cb_is_graph(cb) ? 2u : 2u * cb->cmd_count;
}
static uint32_t gpuhal__execute_entries(void* user) {
  return gpuhal__execute_entries_of(((const gpuhal__execute_action_t*)user)->command_buffer);
}

static const gpuhal__action_ops_t gpuhal__execute_ops = {"execute", gpuhal__execute_issue, NULL,
                                                         gpuhal__execute_release, gpuhal__execute_entries};

/* A command buffer without binding slots needs no execute record: the queue action holds
 * the command buffer itself (one lock and one record fewer per execute, on submission and
 * on release). */
static gpuhal_status_t gpuhal__execute_unbound_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  return ((gpuhal_command_buffer_t*)user)->backend->issue((gpuhal_command_buffer_t*)user, NULL, device, stream);
}
static void gpuhal__execute_unbound_release(void* user, gpuhal_device_t* device) {
  GPUHAL__UNUSED(device);
  gpuhal__cb_release_ref((gpuhal_command_buffer_t*)user);
}
static uint32_t gpuhal__execute_unbound_entries(void* user) {
  return gpuhal__execute_entries_of((const gpuhal_command_buffer_t*)user);
}
static const gpuhal__action_ops_t gpuhal__execute_unbound_ops = {
    "execute", gpuhal__execute_unbound_issue, NULL, gpuhal__execute_unbound_release, gpuhal__execute_unbound_entries};

GPUHAL__PRIVATE const gpuhal_command_buffer_t* gpuhal__action_command_buffer(const gpuhal__action_t* a) {
  if (a->ops == &gpuhal__execute_ops) return ((const gpuhal__execute_action_t*)a->user)->command_buffer;
  if (a->ops == &gpuhal__execute_unbound_ops) return (const gpuhal_command_buffer_t*)a->user;
  return NULL;
}

GPUHAL__PRIVATE const char* gpuhal__action_label(const gpuhal__action_t* a) {
  const gpuhal_command_buffer_t* cb = gpuhal__action_command_buffer(a);
  return cb ? cb->label : "";
}

static gpuhal_status_t gpuhal__barrier_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  GPUHAL__UNUSED(user);
  GPUHAL__UNUSED(device);
  GPUHAL__UNUSED(stream);
  return NULL;
}
static const gpuhal__action_ops_t gpuhal__barrier_ops = {"barrier", gpuhal__barrier_issue, NULL, NULL, NULL};

/* Checks the table against what the command buffer's slots need. */
static gpuhal_status_t gpuhal__execute_check_bindings(const gpuhal_command_buffer_t* cb,
                                                      const gpuhal_binding_table_t* bindings) {
  uint32_t i, used = 0;
  for (i = 0; i < cb->binding_slots; ++i) used += cb->slot_used[i];
  if (!bindings) {
    if (used)
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "gpuhal_queue_execute: argument 'bindings' must not be NULL: the command buffer uses "
                                "%u binding slot(s)",
                                used);
    return NULL;
  }
  if (bindings->count < cb->binding_slots)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_queue_execute: argument 'bindings' has %u entries; the command buffer has %u "
                              "binding slots",
                              bindings->count, cb->binding_slots);
  if (bindings->count && !bindings->buffers)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_queue_execute: argument 'bindings.buffers' must not be NULL when count > 0");
  for (i = 0; i < cb->binding_slots; ++i) {
    gpuhal_buffer_t* buffer = bindings->buffers[i];
    uint64_t offset = bindings->offsets ? bindings->offsets[i] : 0;
    char what[48];
    if (!cb->slot_used[i]) continue;
    snprintf(what, sizeof(what), "bindings.buffers[%u]", i);
    GPUHAL__RETURN_IF_ERROR(gpuhal__object_check(buffer, GPUHAL__MAGIC_BUFFER, "gpuhal_queue_execute", what));
    if (buffer->device != cb->device)
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "gpuhal_queue_execute: argument '%s' is a buffer of device %d; the command buffer "
                                "belongs to device %d%s",
                                what, buffer->device->ordinal, cb->device->ordinal,
                                gpuhal__device_pair_note(buffer->device, cb->device));
    if (offset > buffer->size || cb->slot_extent[i] > buffer->size - offset)
      return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                                "gpuhal_queue_execute: argument '%s': slot %u is used up to %llu bytes past its offset "
                                "%llu, but the buffer has %llu bytes",
                                what, i, (unsigned long long)cb->slot_extent[i], (unsigned long long)offset,
                                (unsigned long long)buffer->size);
  }
  return NULL;
}

static gpuhal_status_t gpuhal__execute_action_acquire(gpuhal_command_buffer_t* cb,
                                                      gpuhal__execute_action_t** out_action) {
  gpuhal__execute_action_t* action;
  size_t size;
  gpuhal__mutex_lock(&cb->action_mutex);
  action = cb->free_actions;
  if (action) cb->free_actions = action->next_free;
  gpuhal__mutex_unlock(&cb->action_mutex);
  if (!action) {
    size = sizeof(*action) + cb->binding_slots * (sizeof(gpuhal_buffer_t*) + sizeof(uint64_t));
    GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(cb->device->allocator, size, "an execute", (void**)&action));
    action->offsets = (uint64_t*)(void*)(action + 1);
    action->buffers = (gpuhal_buffer_t**)(void*)(action->offsets + cb->binding_slots);
  }
  action->next_free = NULL;
  action->command_buffer = cb;
  *out_action = action;
  return NULL;
}

static gpuhal_status_t gpuhal__execute_check(gpuhal_device_t* device, gpuhal_command_buffer_t* cb,
                                             const gpuhal_binding_table_t* bindings) {
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__object_check(cb, GPUHAL__MAGIC_COMMAND_BUFFER, "gpuhal_queue_execute", "command_buffer"));
  if (cb->device != device)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_queue_execute: argument 'command_buffer' belongs to device %d, not device %d%s",
                              cb->device->ordinal, device->ordinal, gpuhal__device_pair_note(cb->device, device));
  if (cb->state != GPUHAL__CB_EXECUTABLE)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_queue_execute: the command buffer %s: call gpuhal_command_buffer_end before "
                              "executing it",
                              cb->state == GPUHAL__CB_RECORDING ? "is still recording" : "was never recorded");
  GPUHAL__RETURN_IF_ERROR(gpuhal__execute_check_bindings(cb, bindings));
  return NULL;
}

/* A ONE_SHOT command buffer runs once. Checked last, after every argument: a second execute
 * fails its signal semaphores too (see gpuhal__queue_fail_signals). */
static gpuhal_status_t gpuhal__execute_claim(gpuhal_command_buffer_t* cb) {
  int32_t expected = 0;
  if (!(cb->flags & GPUHAL_COMMAND_BUFFER_REUSABLE) && !gpuhal__atomic_cas(&cb->executed, &expected, 1))
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_queue_execute: the ONE_SHOT command buffer was already executed (create it "
                              "with GPUHAL_COMMAND_BUFFER_REUSABLE to execute it again)");
  return NULL;
}

/* The issue (node patching, a graph launch or stream launches) never blocks and never
 * needs the worker: the calling thread may issue it when nothing is queued ahead. Not so
 * with collectives in a STREAM command buffer, or in a GRAPH one not built yet: NCCL may
 * block there until every rank joins (see has_native). Once built, a GRAPH command buffer's
 * collectives are graph nodes, and its execute is a graph launch like any other. */
static unsigned gpuhal__execute_submit_flags(gpuhal_command_buffer_t* cb) {
  int blocking = cb->has_native && (!gpuhal__cb_is_graph(cb) || gpuhal__atomic_load(&cb->graph_deferred));
  /* CUDA orders each launch of a graph exec after the previous one, so a reusable GRAPH
   * command buffer is launched in dependency order (GPUHAL__SUBMIT_NOT_PROVISIONAL), and so
   * is one whose commands launch a graph exec of their own (launches_own_graph). So is a
   * STREAM command buffer too long to wait on the GPU (GPUHAL__PARK_COMMANDS_MAX). So are
   * collectives (has_native): issued behind a GPU wait whose semaphore then fails, one
   * rank's collective would run and wait for ever for a peer whose execute failed on the
   * host. */
  int ordered = cb->reads_allocas || cb->launches_own_graph || cb->has_native ||
                (gpuhal__cb_is_graph(cb) && (cb->flags & GPUHAL_COMMAND_BUFFER_REUSABLE)) ||
                (!gpuhal__cb_is_graph(cb) && cb->cmd_count > GPUHAL__PARK_COMMANDS_MAX);
  unsigned flags = ordered ? (unsigned)GPUHAL__SUBMIT_NOT_PROVISIONAL : 0u;
  return flags | (blocking ? 0u : (unsigned)GPUHAL__SUBMIT_CALLER_MAY_ISSUE);
}

GPUHAL_API gpuhal_status_t gpuhal_queue_execute(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                                gpuhal_semaphore_list_t signal, gpuhal_command_buffer_t* command_buffer,
                                                const gpuhal_binding_table_t* bindings) {
  gpuhal_command_buffer_t* cb = command_buffer;
  gpuhal__execute_action_t* action = NULL;
  gpuhal_status_t st;
  uint32_t i;
  /* Every argument first: only calls with valid lists may fail their signals. */
  GPUHAL__RETURN_IF_ERROR(gpuhal__queue_validate(__func__, device, queue, wait, signal));
  if (!cb) {
    /* A barrier issues nothing: the calling thread may issue it (no worker wake-up). */
    st = gpuhal__queue_submit_ex(device, queue, wait, signal, &gpuhal__barrier_ops, NULL,
                                 GPUHAL__SUBMIT_VALIDATED | GPUHAL__SUBMIT_CALLER_MAY_ISSUE);
    return st ? gpuhal_status_annotate(st, "in gpuhal_queue_execute") : NULL;
  }
  GPUHAL__RETURN_IF_ERROR(gpuhal__execute_check(device, cb, bindings));
  st = gpuhal__execute_claim(cb);
  if (st) {
    gpuhal__queue_fail_signals(signal, st, "execute", device->ordinal, queue);
    return st;
  }
  if (cb->binding_slots == 0) {
    gpuhal__cb_retain_ref(cb); /* the action's reference */
    st = gpuhal__queue_submit_ex(device, queue, wait, signal, &gpuhal__execute_unbound_ops, cb,
                                 GPUHAL__SUBMIT_VALIDATED | gpuhal__execute_submit_flags(cb));
    if (!st) return NULL;
    gpuhal__atomic_store(&cb->executed, 0);
    gpuhal__cb_release_ref(cb);
    return gpuhal_status_annotate(st, "in gpuhal_queue_execute");
  }
  st = gpuhal__execute_action_acquire(cb, &action);
  if (st) {
    gpuhal__atomic_store(&cb->executed, 0);
    gpuhal__queue_fail_signals(signal, st, "execute", device->ordinal, queue);
    return st;
  }
  gpuhal__cb_retain_ref(cb);
  for (i = 0; i < cb->binding_slots; ++i) {
    action->offsets[i] = 0;
    action->buffers[i] = NULL;
    if (!cb->slot_used[i]) continue;
    action->buffers[i] = bindings->buffers[i];
    action->offsets[i] = bindings->offsets ? bindings->offsets[i] : 0;
    gpuhal__buffer_retain_ref(action->buffers[i]);
  }
  st = gpuhal__queue_submit_ex(device, queue, wait, signal, &gpuhal__execute_ops, action,
                               GPUHAL__SUBMIT_VALIDATED | gpuhal__execute_submit_flags(cb));
  if (st) {
    gpuhal__execute_action_recycle(action);
    gpuhal__atomic_store(&cb->executed, 0);
    gpuhal__cb_release_ref(cb);
    return gpuhal_status_annotate(st, "in gpuhal_queue_execute");
  }
  return NULL;
}
