/* command_buffer: dispatch arguments and references, recording storage and checks, the
 * command buffer object's life, late-address resolution and the multi-device hook
 * (command_buffer.h). */
#include "command_buffer.h"
#include "symbols.h"
#include "status.h"

/* ---- argument constructors ---- */
GPUHAL_API gpuhal_dim3_t gpuhal_dim3(uint32_t x, uint32_t y, uint32_t z) {
  gpuhal_dim3_t d;
  d.x = x;
  d.y = y;
  d.z = z;
  return d;
}

static gpuhal_arg_t gpuhal__arg_zero(gpuhal_arg_kind_t kind) {
  gpuhal_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = kind;
  return a;
}
GPUHAL_API gpuhal_arg_t gpuhal_arg_buffer(gpuhal_buffer_t* buffer, uint64_t offset) {
  gpuhal_arg_t a = gpuhal__arg_zero(GPUHAL_ARG_BUFFER);
  a.buffer = buffer;
  a.offset = offset;
  a.size = 8;
  return a;
}
GPUHAL_API gpuhal_arg_t gpuhal_arg_slot(uint32_t slot, uint64_t offset) {
  gpuhal_arg_t a = gpuhal__arg_zero(GPUHAL_ARG_SLOT);
  a.slot = slot;
  a.offset = offset;
  a.size = 8;
  return a;
}
GPUHAL_API gpuhal_arg_t gpuhal_arg_bytes(const void* data, uint32_t size) {
  gpuhal_arg_t a = gpuhal__arg_zero(GPUHAL_ARG_BYTES);
  a.data = data;
  a.size = size;
  /* NULL data would read as "the value is inline" (all zeros): mark it so the dispatch that
   * takes it refuses it, naming the argument. */
  a.slot = data == NULL && size > 0;
  return a;
}
static gpuhal_arg_t gpuhal__arg_inline(const void* value, uint32_t size) {
  gpuhal_arg_t a = gpuhal__arg_zero(GPUHAL_ARG_BYTES);
  memcpy(a.inline_value, value, size);
  a.size = size;
  return a;
}
GPUHAL_API gpuhal_arg_t gpuhal_arg_u32(uint32_t value) { return gpuhal__arg_inline(&value, sizeof(value)); }
GPUHAL_API gpuhal_arg_t gpuhal_arg_i32(int32_t value) { return gpuhal__arg_inline(&value, sizeof(value)); }
GPUHAL_API gpuhal_arg_t gpuhal_arg_u64(uint64_t value) { return gpuhal__arg_inline(&value, sizeof(value)); }
GPUHAL_API gpuhal_arg_t gpuhal_arg_f32(float value) { return gpuhal__arg_inline(&value, sizeof(value)); }
GPUHAL_API gpuhal_arg_t gpuhal_arg_f64(double value) { return gpuhal__arg_inline(&value, sizeof(value)); }

GPUHAL_API gpuhal_buffer_ref_t gpuhal_ref_buffer(gpuhal_buffer_t* buffer, uint64_t offset) {
  gpuhal_buffer_ref_t r;
  r.buffer = buffer;
  r.slot = 0;
  r.offset = offset;
  return r;
}
GPUHAL_API gpuhal_buffer_ref_t gpuhal_ref_slot(uint32_t slot, uint64_t offset) {
  gpuhal_buffer_ref_t r;
  r.buffer = NULL;
  r.slot = slot;
  r.offset = offset;
  return r;
}

GPUHAL__PRIVATE uint64_t gpuhal__buffer_address(gpuhal_buffer_t* buffer) {
  if (gpuhal__atomic_load(&buffer->state) != (int32_t)GPUHAL__BUFFER_LIVE) return 0;
  return (uint64_t)buffer->address;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_recording(gpuhal_command_buffer_t* cb, const char* func) {
  if (cb->state == GPUHAL__CB_RECORDING) return NULL;
  if (cb->state == GPUHAL__CB_INITIAL)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "%s: the command buffer is not recording: call gpuhal_command_buffer_begin first", func);
  return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                            "%s: the command buffer has ended: commands can only be recorded between begin and end",
                            func);
}

GPUHAL__PRIVATE int gpuhal__cb_is_graph(const gpuhal_command_buffer_t* cb) {
  return (cb->flags & GPUHAL_COMMAND_BUFFER_STREAM) == 0;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_buffer(gpuhal_command_buffer_t* cb, gpuhal_buffer_t* buffer,
                                                        const char* func, const char* what) {
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_check(buffer, GPUHAL__MAGIC_BUFFER, func, what));
  if (buffer->device != cb->device)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument '%s' is a buffer of another device (ordinal %d); the command buffer "
                              "belongs to device %d%s",
                              func, what, buffer->device->ordinal, cb->device->ordinal,
                              gpuhal__device_pair_note(buffer->device, cb->device));
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_ref(gpuhal_command_buffer_t* cb, gpuhal_buffer_ref_t ref,
                                                     uint64_t size, const char* func, const char* what,
                                                     gpuhal__ref_t* out) {
  memset(out, 0, sizeof(*out));
  out->offset = ref.offset;
  if (ref.offset > UINT64_MAX - size)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE, "%s: argument '%s': offset %llu + size %llu overflows", func,
                              what, (unsigned long long)ref.offset, (unsigned long long)size);
  if (!ref.buffer) {
    if (ref.slot >= cb->binding_slots)
      return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                                "%s: argument '%s' names binding slot %u but the command buffer has %u slot(s)", func,
                                what, ref.slot, cb->binding_slots);
    out->kind = GPUHAL__REF_SLOT;
    out->slot = ref.slot;
    return NULL;
  }
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_buffer(cb, ref.buffer, func, what));
  if (ref.offset + size > ref.buffer->size)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "%s: argument '%s': range [%llu, %llu) is outside the buffer's %llu bytes", func, what,
                              (unsigned long long)ref.offset, (unsigned long long)(ref.offset + size),
                              (unsigned long long)ref.buffer->size);
  out->kind = GPUHAL__REF_BUFFER;
  out->buffer = ref.buffer;
  return NULL;
}

GPUHAL__PRIVATE int gpuhal__ref_is_late(const gpuhal__ref_t* ref) {
  if (ref->kind == GPUHAL__REF_SLOT) return 1;
  return ref->kind == GPUHAL__REF_BUFFER && (ref->buffer->pending || gpuhal__buffer_address(ref->buffer) == 0);
}

GPUHAL__PRIVATE void gpuhal__cb_note_slot(gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref, uint64_t size) {
  if (ref->kind != GPUHAL__REF_SLOT) return;
  uint64_t end =
      ref->offset > UINT64_MAX - size ? UINT64_MAX : ref->offset + size; /* saturated: no buffer is that big */
  cb->slot_used[ref->slot] = 1;
  if (end > cb->slot_extent[ref->slot]) cb->slot_extent[ref->slot] = end;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_retain_buffer(gpuhal_command_buffer_t* cb, gpuhal_buffer_t* buffer) {
  if (!buffer) return NULL;
  if (cb->retained_buffer_count && cb->retained_buffers[cb->retained_buffer_count - 1] == buffer) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(cb->device->allocator, (void**)&cb->retained_buffers,
                                         &cb->retained_buffer_capacity, cb->retained_buffer_count + 1,
                                         sizeof(gpuhal_buffer_t*), "command buffer resources"));
  gpuhal__buffer_retain_ref(buffer);
  cb->retained_buffers[cb->retained_buffer_count++] = buffer;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_retain_executable(gpuhal_command_buffer_t* cb,
                                                             gpuhal_executable_t* executable) {
  if (cb->retained_executable_count && cb->retained_executables[cb->retained_executable_count - 1] == executable)
    return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(cb->device->allocator, (void**)&cb->retained_executables,
                                         &cb->retained_executable_capacity, cb->retained_executable_count + 1,
                                         sizeof(gpuhal_executable_t*), "command buffer resources"));
  gpuhal__executable_retain_ref(executable);
  cb->retained_executables[cb->retained_executable_count++] = executable;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_reserve_retained(gpuhal_command_buffer_t* cb, uint32_t count) {
  return gpuhal__grow32(cb->device->allocator, (void**)&cb->retained_buffers, &cb->retained_buffer_capacity,
                        (size_t)cb->retained_buffer_count + count, sizeof(gpuhal_buffer_t*),
                        "command buffer resources");
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_append(gpuhal_command_buffer_t* cb, gpuhal__cmd_type_t type,
                                                  gpuhal__cmd_t** out) {
  gpuhal__cmd_t* cmd;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(cb->device->allocator, (void**)&cb->cmds, &cb->cmd_capacity,
                                         (size_t)cb->cmd_count + 1, sizeof(gpuhal__cmd_t), "recorded commands"));
  cmd = &cb->cmds[cb->cmd_count++];
  memset(cmd, 0, sizeof(*cmd));
  cmd->type = type;
  *out = cmd;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_reserve_args(gpuhal_command_buffer_t* cb, uint32_t count, size_t bytes) {
  size_t values_capacity = cb->values_capacity;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(cb->device->allocator, (void**)&cb->args, &cb->arg_capacity,
                                         (size_t)cb->arg_count + count, sizeof(gpuhal__cmd_arg_t), "kernel arguments"));
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow(cb->device->allocator, (void**)&cb->values, &values_capacity,
                                       cb->values_size + bytes, 1, "kernel argument values"));
  cb->values_capacity = values_capacity;
  if (cb->values_size + bytes > UINT32_MAX)
    return gpuhal__status_oom("kernel argument values", cb->values_size + bytes);
  return NULL;
}

GPUHAL__PRIVATE gpuhal__cmd_arg_t* gpuhal__cb_push_arg(gpuhal_command_buffer_t* cb, const void* value, uint32_t size) {
  gpuhal__cmd_arg_t* arg = &cb->args[cb->arg_count++];
  memset(arg, 0, sizeof(*arg));
  arg->value_offset = (uint32_t)cb->values_size;
  memcpy(cb->values + cb->values_size, value, size);
  cb->values_size += ((size_t)size + 7u) & ~(size_t)7u;
  return arg;
}

GPUHAL__PRIVATE void gpuhal__cb_push_address_arg(gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref) {
  uint64_t value = 0;
  gpuhal__cmd_arg_t* arg;
  int late = gpuhal__ref_is_late(ref) || ref->kind == GPUHAL__REF_STAGING;
  if (!late) value = gpuhal__buffer_address(ref->buffer) + ref->offset;
  arg = gpuhal__cb_push_arg(cb, &value, sizeof(value));
  arg->ref = *ref;
  arg->late = (uint32_t)late;
  arg->late_size = (uint32_t)sizeof(value);
}

GPUHAL__PRIVATE int gpuhal__fill_is_memset(uint32_t pattern_size, uint64_t address) {
  return pattern_size <= 4 && address % pattern_size == 0;
}

GPUHAL__PRIVATE unsigned gpuhal__memset_value(const gpuhal__cmd_t* cmd) {
  uint64_t mask = cmd->pattern_size == 4 ? 0xFFFFFFFFull : cmd->pattern_size == 2 ? 0xFFFFull : 0xFFull;
  return (unsigned)(cmd->pattern[0] & mask);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_record_native(gpuhal_command_buffer_t* cb, const gpuhal__native_ops_t* ops,
                                                         void* user) {
  gpuhal__cmd_t* cmd;
  const gpuhal__cmd_t* prev;
  if (cb->region_depth)
    return gpuhal_status_make(GPUHAL_STATUS_UNIMPLEMENTED,
                              "%s cannot be recorded inside a device-side region (gpuhal_cmd_begin_if/_while): a "
                              "conditional graph body holds kernels, copies and fills only",
                              ops->name);
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_append(cb, GPUHAL__CMD_NATIVE, &cmd));
  prev = cb->cmd_count > 1 ? &cb->cmds[cb->cmd_count - 2] : NULL;
  cmd->native_ops = ops;
  cmd->native_user = user;
  if (ops->may_block) cb->has_native = 1;
  if (ops->check) cb->native_checks = 1;
  cmd->native_follower =
      (uint32_t)(prev && prev->type == GPUHAL__CMD_NATIVE && prev->native_ops == ops && ops->group_begin);
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__native_issue_group(gpuhal_command_buffer_t* cb, const gpuhal__cmd_t* first,
                                                           CUstream stream) {
  const gpuhal__native_ops_t* ops = first->native_ops;
  const gpuhal__cmd_t* end = cb->cmds + cb->cmd_count;
  const gpuhal__cmd_t* cmd = first;
  gpuhal_status_t st = NULL;
  if (ops->group_begin) GPUHAL__RETURN_IF_ERROR(ops->group_begin(cb->device));
  do {
    st = ops->issue(cmd->native_user, cb->device, stream);
    ++cmd;
  } while (!st && cmd < end && cmd->type == GPUHAL__CMD_NATIVE && cmd->native_follower);
  if (ops->group_end) {
    gpuhal_status_t st2 = ops->group_end(cb->device);
    if (st)
      gpuhal_status_free(st2);
    else
      st = st2;
  }
  return st ? gpuhal_status_annotate(st, "issuing '%s'", ops->name) : NULL;
}

typedef struct gpuhal__native_capture_s {
  gpuhal_command_buffer_t* cb;
  const gpuhal__cmd_t* first;
  CUgraph graph;
} gpuhal__native_capture_t;

/* On the worker: captures one group into a new graph. */
static gpuhal_status_t gpuhal__native_capture_on_worker(void* arg) {
  gpuhal__native_capture_t* c = (gpuhal__native_capture_t*)arg;
  const gpuhal__cuda_symbols_t* cu = c->cb->device->cu;
  CUstream stream = NULL;
  gpuhal_status_t st, st2;
  GPUHAL__RETURN_IF_ERROR(gpuhal__device_stream_create(c->cb->device, &stream));
  st = GPUHAL__CU(cu, cuStreamBeginCapture, (stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  if (!st) {
    st = gpuhal__native_issue_group(c->cb, c->first, stream);
    st2 = GPUHAL__CU(cu, cuStreamEndCapture, (stream, &c->graph));
    if (!st)
      st = st2;
    else
      gpuhal_status_free(st2);
    if (st && c->graph) {
      cu->cuGraphDestroy(c->graph);
      c->graph = NULL;
    }
  }
  st2 = gpuhal__device_stream_destroy(c->cb->device, stream);
  if (!st)
    st = st2;
  else
    gpuhal_status_free(st2);
  return st;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__graph_add_native(gpuhal_command_buffer_t* cb, gpuhal__cmd_t* cmd,
                                                         const CUgraphNode* deps, size_t dep_count) {
  gpuhal__native_capture_t c;
  gpuhal_status_t st;
  c.cb = cb;
  c.first = cmd;
  c.graph = NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__worker_call(cb->device, gpuhal__native_capture_on_worker, &c));
  st = GPUHAL__CU(cb->device->cu, cuGraphAddChildGraphNode, (&cmd->node, cb->graph, deps, dep_count, c.graph));
  cb->device->cu->cuGraphDestroy(c.graph); /* the node holds its own copy */
  return st;
}

static void gpuhal__cb_release_natives(gpuhal_command_buffer_t* cb) {
  uint32_t i;
  for (i = 0; i < cb->cmd_count; ++i)
    if (cb->cmds[i].type == GPUHAL__CMD_NATIVE && cb->cmds[i].native_ops->release)
      cb->cmds[i].native_ops->release(cb->cmds[i].native_user);
}

GPUHAL__PRIVATE int gpuhal__ref_is_peer(const gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref) {
  return ref->kind == GPUHAL__REF_BUFFER && ref->buffer->device != cb->device &&
         ref->buffer->kind == GPUHAL_MEMORY_DEVICE;
}

typedef struct gpuhal__peer_enable_s {
  gpuhal_device_t* device;
  gpuhal_device_t* peer;
} gpuhal__peer_enable_t;

/* On `device`'s worker: lets its context reach `peer`'s memory (idempotent). */
static gpuhal_status_t gpuhal__peer_enable_on_worker(void* arg) {
  gpuhal__peer_enable_t* p = (gpuhal__peer_enable_t*)arg;
  CUresult r = p->device->cu->cuCtxEnablePeerAccess(p->peer->context, 0);
  if (r != CUDA_SUCCESS && (int)r != 704 /* CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED */)
    return gpuhal__cuda_status(p->device->cu, r, "cuCtxEnablePeerAccess", __FILE__, __LINE__);
  /* and the peer's transient buffers: a refusal only keeps them out of GRAPH copies
   * (gpuhal__pool_opened_to), as the default pool's are */
  gpuhal__pool_grant_peer(p->peer, p->device);
  return NULL;
}

/* 1 when the two devices can reach each other's memory (access then enabled both ways, or
 * not needed: devices of one ordinal share its primary context); 0 when they cannot
 * (copies between them are staged through host memory). */
static gpuhal_status_t gpuhal__peer_prepare(gpuhal_device_t* a, gpuhal_device_t* b, int* out_peer) {
  int ab = 0, ba = 0;
  gpuhal__peer_enable_t p;
  *out_peer = 0;
  if (a->context == b->context) { /* two gpuhal devices of one ordinal: one address space */
    *out_peer = 1;
    return NULL;
  }
  if (!gpuhal_driver_has_feature(a->driver, GPUHAL_FEATURE_PEER_ACCESS)) return NULL;
  GPUHAL__CU_RETURN(a->cu, cuDeviceCanAccessPeer, (&ab, a->cu_device, b->cu_device));
  GPUHAL__CU_RETURN(a->cu, cuDeviceCanAccessPeer, (&ba, b->cu_device, a->cu_device));
  if (!ab || !ba) return NULL;
  p.device = a;
  p.peer = b;
  GPUHAL__RETURN_IF_ERROR(gpuhal__worker_call(a, gpuhal__peer_enable_on_worker, &p));
  p.device = b;
  p.peer = a;
  GPUHAL__RETURN_IF_ERROR(gpuhal__worker_call(b, gpuhal__peer_enable_on_worker, &p));
  *out_peer = 1;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_copy_ref(gpuhal_command_buffer_t* cb, gpuhal_buffer_ref_t ref,
                                                          uint64_t size, const char* func, const char* what,
                                                          gpuhal__ref_t* out) {
  gpuhal_buffer_t* buffer = ref.buffer;
  int peer = 0;
  /* Held, not just alive: a buffer the application released is refused even while queued
   * work still holds it (gpuhal__cb_check_ref says so). */
  if (!gpuhal__object_is_held(buffer, GPUHAL__MAGIC_BUFFER) || buffer->device == cb->device ||
      buffer->device->driver != cb->device->driver || buffer->kind != GPUHAL_MEMORY_DEVICE)
    return gpuhal__cb_check_ref(cb, ref, size, func, what, out); /* its messages for everything else */
  memset(out, 0, sizeof(*out));
  if (ref.offset > UINT64_MAX - size || ref.offset + size > buffer->size)
    return gpuhal_status_make(
        GPUHAL_STATUS_OUT_OF_RANGE, "%s: argument '%s': range [%llu, +%llu) is outside the buffer's %llu bytes", func,
        what, (unsigned long long)ref.offset, (unsigned long long)size, (unsigned long long)buffer->size);
  GPUHAL__RETURN_IF_ERROR(gpuhal__peer_prepare(cb->device, buffer->device, &peer));
  if (peer && buffer->pending && gpuhal__cb_is_graph(cb) && !gpuhal__pool_opened_to(buffer->device, cb->device))
    return gpuhal_status_make(GPUHAL_STATUS_UNIMPLEMENTED,
                              "%s: argument '%s' is a transient buffer (gpuhal_queue_alloca) of device %d, whose "
                              "memory pool is not open to device %d (the device's default pool, which gpuhal leaves "
                              "alone, or cuMemPoolSetAccess refused: see the log): copy it in a STREAM command buffer",
                              func, what, buffer->device->ordinal, cb->device->ordinal);
  if (!peer) {
    if (gpuhal__cb_is_graph(cb))
      return gpuhal_status_make(GPUHAL_STATUS_UNIMPLEMENTED,
                                "%s: argument '%s' is a buffer of device %d, which has no peer access to device %d: "
                                "copies between them work only in STREAM command buffers (staged through host memory)",
                                func, what, buffer->device->ordinal, cb->device->ordinal);
    gpuhal__log(cb->device->logger, GPUHAL_LOG_DEBUG,
                "%s: devices %d and %d have no peer access: the copy is staged through host memory "
                "(cuMemcpyPeerAsync)",
                func, cb->device->ordinal, buffer->device->ordinal);
  }
  out->kind = GPUHAL__REF_BUFFER;
  out->buffer = buffer;
  out->offset = ref.offset;
  return NULL;
}

GPUHAL__PRIVATE const char* gpuhal__cmd_name(const gpuhal__cmd_t* cmd) {
  switch (cmd->type) {
    case GPUHAL__CMD_DISPATCH:
      if (strcmp(cmd->kernel_name, "gpuhal_builtin_fill") == 0) return "fill, by the built-in kernel";
      if (strcmp(cmd->kernel_name, "gpuhal_builtin_copy") == 0) return "copy or update, by the built-in kernel";
      return cmd->kernel_name;
    case GPUHAL__CMD_COPY: return "copy";
    case GPUHAL__CMD_FILL: return "fill";
    case GPUHAL__CMD_UPDATE: return "update";
    case GPUHAL__CMD_NATIVE: return cmd->native_ops->name;
    case GPUHAL__CMD_REGION_BEGIN: return cmd->region_while ? "WHILE region" : "IF region";
    case GPUHAL__CMD_REGION_END: return "end of region";
    default: return "barrier";
  }
}

/* Why a buffer a command names directly has no address at this execute. */
static gpuhal_status_t gpuhal__cb_unresolved_buffer(gpuhal_buffer_t* buffer) {
  if (gpuhal__atomic_load(&buffer->state) == (int32_t)GPUHAL__BUFFER_FREED)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_queue_execute: buffer %p (%llu bytes, from gpuhal_queue_alloca) has no device "
                              "address: it was deallocated (gpuhal_queue_dealloca) before this execute; a command "
                              "buffer that names a transient buffer directly cannot run after its dealloca (name a "
                              "binding slot to use a new buffer at each execute)",
                              (void*)buffer, (unsigned long long)buffer->size);
  return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                            "gpuhal_queue_execute: buffer %p (%llu bytes, from gpuhal_queue_alloca) has no device "
                            "address: its gpuhal_queue_alloca must be ordered before this execute (wait on its "
                            "signal), and its gpuhal_queue_dealloca after it; or that alloca failed (its signal "
                            "carries the cause)",
                            (void*)buffer, (unsigned long long)buffer->size);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_resolve(const gpuhal_command_buffer_t* cb,
                                                   const gpuhal__execute_action_t* action, const gpuhal__ref_t* ref,
                                                   uint64_t* out_address) {
  uint64_t base;
  switch (ref->kind) {
    case GPUHAL__REF_BUFFER:
      base = gpuhal__buffer_address(ref->buffer);
      if (!base) return gpuhal__cb_unresolved_buffer(ref->buffer);
      break;
    case GPUHAL__REF_SLOT:
      base = gpuhal__buffer_address(action->buffers[ref->slot]);
      if (!base)
        return gpuhal_status_make(
            GPUHAL_STATUS_FAILED_PRECONDITION,
            "gpuhal_queue_execute: the buffer bound to slot %u has no device address (not allocated yet, or "
            "deallocated): its "
            "gpuhal_queue_alloca must be ordered before this execute (wait on its signal)",
            ref->slot);
      base += action->offsets[ref->slot];
      break;
    default: base = (uint64_t)cb->staging; break;
  }
  *out_address = base + ref->offset;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_resolve_args(gpuhal_command_buffer_t* cb,
                                                        const gpuhal__execute_action_t* action,
                                                        const gpuhal__cmd_t* cmd, int* out_changed) {
  uint32_t i;
  unsigned char late[GPUHAL__LATE_VALUE_MAX];
  *out_changed = 0;
  /* Every value first, writing none: a refused execute changes nothing. */
  for (i = 0; i < cmd->arg_count; ++i) {
    const gpuhal__cmd_arg_t* arg = &cb->args[cmd->arg_first + i];
    if (arg->late) GPUHAL__RETURN_IF_ERROR(gpuhal__cb_late_value(cb, action, arg, late));
  }
  for (i = 0; i < cmd->arg_count; ++i) {
    const gpuhal__cmd_arg_t* arg = &cb->args[cmd->arg_first + i];
    unsigned char* value = cb->values + arg->value_offset;
    if (!arg->late) continue;
    gpuhal__cb_late_value(cb, action, arg, late);
    if (memcmp(value, late, arg->late_size) != 0) {
      memcpy(value, late, arg->late_size);
      *out_changed = 1;
    }
  }
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_command_buffer_set_label(gpuhal_command_buffer_t* command_buffer, const char* label) {
  GPUHAL__CHECK_OBJECT(command_buffer, GPUHAL__MAGIC_COMMAND_BUFFER);
  gpuhal__label_copy(command_buffer->label, label);
  return NULL;
}

GPUHAL_API void gpuhal_command_buffer_retain(gpuhal_command_buffer_t* command_buffer) {
  if (!gpuhal__object_is_held(command_buffer, GPUHAL__MAGIC_COMMAND_BUFFER)) return;
  gpuhal__object_user_retain(&command_buffer->object);
}
static void gpuhal__cb_destroy(gpuhal_command_buffer_t* cb) {
  gpuhal_device_t* device = cb->device;
  const gpuhal_allocator_t* a = device->allocator;
  uint32_t i;
  cb->backend->discard(cb);
  gpuhal__cb_release_natives(cb); /* multi-device hook */
  for (i = 0; i < cb->retained_buffer_count; ++i) gpuhal__buffer_release_ref(cb->retained_buffers[i]);
  for (i = 0; i < cb->retained_executable_count; ++i) gpuhal__executable_release_ref(cb->retained_executables[i]);
  while (cb->free_actions) {
    gpuhal__execute_action_t* next = cb->free_actions->next_free;
    gpuhal__free(a, cb->free_actions);
    cb->free_actions = next;
  }
  gpuhal__free(a, cb->cmds);
  gpuhal__free(a, cb->args);
  gpuhal__free(a, cb->values);
  gpuhal__free(a, cb->tensor_maps);
  gpuhal__free(a, cb->conditions);
  gpuhal__free(a, cb->update_data);
  gpuhal__free(a, cb->param_ptrs);
  gpuhal__free(a, cb->slot_extent);
  gpuhal__free(a, cb->retained_buffers);
  gpuhal__free(a, cb->retained_executables);
  gpuhal__free(a, cb->late_cmds);
  gpuhal__mutex_destroy(&cb->action_mutex);
  gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_COMMAND_BUFFER, cb);
  gpuhal__device_release_ref(device);
}

GPUHAL__PRIVATE void gpuhal__cb_retain_ref(gpuhal_command_buffer_t* cb) { gpuhal__object_retain(&cb->object); }

GPUHAL__PRIVATE void gpuhal__cb_release_ref(gpuhal_command_buffer_t* cb) {
  if (gpuhal__object_release(&cb->object)) gpuhal__cb_destroy(cb);
}

GPUHAL_API void gpuhal_command_buffer_release(gpuhal_command_buffer_t* command_buffer) {
  gpuhal_driver_t* driver;
  uint64_t settle; /* gpuhal__driver_settle_begin: 0, or the settle begun */
  if (!gpuhal__object_is_live(command_buffer, GPUHAL__MAGIC_COMMAND_BUFFER)) return;
  if (!gpuhal__object_user_release(&command_buffer->object)) {
    gpuhal__log_extra_release(command_buffer->device->logger, __func__, "a command buffer");
    return;
  }
  driver = command_buffer->device->driver;
  settle = gpuhal__driver_settle_begin(driver);
  gpuhal__cb_release_ref(command_buffer);
  gpuhal__driver_settle_end(driver, settle);
}
