/* gpuhal - command buffers: the public recording calls (create, begin, the gpuhal_cmd_*
 * commands, end). Every command is checked when it is recorded; a rejected one leaves the
 * command buffer as it was. Part of the implementation only (declared in command_buffer.h). */
#include "command_buffer.h"
#include "module_cache.h"

/* ---- create ---- */
static void gpuhal__dispatch_limits_of(const gpuhal_device_info_t* info, gpuhal__dispatch_limits_t* l) {
  int i;
  for (i = 0; i < 3; ++i) {
    l->max_block[i] = info->max_block_dim[i];
    l->max_grid[i] = info->max_grid_dim[i];
  }
  l->max_threads_per_block = info->max_threads_per_block;
}
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_create(gpuhal_device_t* device, gpuhal_command_buffer_flags_t flags,
                                                        uint32_t binding_slots,
                                                        gpuhal_command_buffer_t** out_command_buffer) {
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_status_t st;
  GPUHAL__CHECK_ARG(out_command_buffer != NULL, "out_command_buffer", "must not be NULL");
  *out_command_buffer = NULL;
  GPUHAL__CHECK_OBJECT(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG((flags & ~(uint32_t)(GPUHAL_COMMAND_BUFFER_REUSABLE | GPUHAL_COMMAND_BUFFER_STREAM)) == 0, "flags",
                    "has unknown bits (allowed: GPUHAL_COMMAND_BUFFER_REUSABLE, GPUHAL_COMMAND_BUFFER_STREAM)");
  GPUHAL__CHECK_ARG(binding_slots <= (1u << 20), "binding_slots", "must be <= 1048576");
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_alloc(&device->driver->objects, GPUHAL__MAGIC_COMMAND_BUFFER, sizeof(*cb),
                                               "gpuhal_command_buffer_t", (void**)&cb));
  gpuhal__dispatch_limits_of(&device->info, &cb->limits);
  st = NULL;
  if (binding_slots) {
    st = gpuhal__alloc_zeroed(device->allocator, (sizeof(uint64_t) + 1) * binding_slots, "binding slot extents",
                              (void**)&cb->slot_extent);
    if (!st) cb->slot_used = (unsigned char*)(cb->slot_extent + binding_slots);
  }
  if (st) {
    gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_COMMAND_BUFFER, cb);
    return st;
  }
  gpuhal__object_init(&cb->object, GPUHAL__MAGIC_COMMAND_BUFFER);
  gpuhal__device_retain_ref(device);
  cb->device = device;
  cb->flags = flags;
  cb->binding_slots = binding_slots;
  cb->state = GPUHAL__CB_INITIAL;
  cb->backend = (flags & GPUHAL_COMMAND_BUFFER_STREAM) ? gpuhal__cb_stream_backend() : gpuhal__cb_graph_backend();
  gpuhal__mutex_init(&cb->action_mutex);
  *out_command_buffer = cb;
  return NULL;
}
/* ---- begin / end ---- */
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_begin(gpuhal_command_buffer_t* command_buffer) {
  GPUHAL__CHECK_OBJECT(command_buffer, GPUHAL__MAGIC_COMMAND_BUFFER);
  if (command_buffer->state != GPUHAL__CB_INITIAL)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_command_buffer_begin: the command buffer was already %s: a command buffer is "
                              "recorded once (create a new one)",
                              command_buffer->state == GPUHAL__CB_RECORDING ? "begun" : "recorded");
  command_buffer->state = GPUHAL__CB_RECORDING;
  return NULL;
}
/* ---- dispatch ---- */
static gpuhal_status_t gpuhal__dispatch_check_dims(const gpuhal_command_buffer_t* cb, const gpuhal_kernel_t* kernel,
                                                   gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared_bytes,
                                                   const char* func) {
  static const char* const axis[3] = {"x", "y", "z"};
  uint32_t g[3], b[3];
  uint64_t threads;
  int i, max_dynamic_shared;
  g[0] = grid.x, g[1] = grid.y, g[2] = grid.z;
  b[0] = block.x, b[1] = block.y, b[2] = block.z;
  for (i = 0; i < 3; ++i) {
    if (g[i] == 0 || g[i] > (uint32_t)cb->limits.max_grid[i])
      return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                                "%s: argument 'grid.%s' is %u; it must be in 1..%d on this device", func, axis[i], g[i],
                                cb->limits.max_grid[i]);
    if (b[i] == 0 || b[i] > (uint32_t)cb->limits.max_block[i])
      return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                                "%s: argument 'block.%s' is %u; it must be in 1..%d on this device", func, axis[i],
                                b[i], cb->limits.max_block[i]);
  }
  threads = (uint64_t)b[0] * b[1] * b[2];
  if (threads > (uint64_t)kernel->info.max_threads_per_block)
    return gpuhal_status_make(
        GPUHAL_STATUS_OUT_OF_RANGE,
        "%s: argument 'block' has %llu threads; kernel '%s' allows at most %d per block on this device", func,
        (unsigned long long)threads, kernel->name, kernel->info.max_threads_per_block);
  if (kernel->info.required_block[0] &&
      (b[0] != kernel->info.required_block[0] || b[1] != kernel->info.required_block[1] ||
       b[2] != kernel->info.required_block[2]))
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'block' is %ux%ux%u; kernel '%s' requires %ux%ux%u (.reqntid): a launch "
                              "with any other block fails, and the kernel's code may assume that one",
                              func, b[0], b[1], b[2], kernel->name, kernel->info.required_block[0],
                              kernel->info.required_block[1], kernel->info.required_block[2]);
  max_dynamic_shared = gpuhal__kernel_max_dynamic_shared(kernel);
  if (shared_bytes > (uint32_t)max_dynamic_shared)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "%s: argument 'shared_bytes' (%u) exceeds kernel '%s''s dynamic shared "
                              "memory limit of %d bytes (raise it with gpuhal_kernel_set_max_dynamic_shared, up to %d)",
                              func, shared_bytes, kernel->name, max_dynamic_shared,
                              kernel->info.max_dynamic_shared_optin_bytes);
  return NULL;
}

/* The bytes an argument passes. */
static uint32_t gpuhal__arg_bytes_passed(const gpuhal_arg_t* arg) {
  return arg->kind == GPUHAL_ARG_BYTES ? arg->size : arg->kind == GPUHAL_ARG_TENSOR_MAP ? GPUHAL__TENSOR_MAP_BYTES : 8u;
}

/* Checks argument i against the kernel's parameter i (when the driver told us) and its
 * own rules. */
static gpuhal_status_t gpuhal__dispatch_check_arg(gpuhal_command_buffer_t* cb, const gpuhal_kernel_t* kernel,
                                                  uint32_t i, const gpuhal_arg_t* arg, const char* func) {
  uint32_t size = gpuhal__arg_bytes_passed(arg);
  char what[48];
  gpuhal_arg_kind_t kind = arg->kind;
  snprintf(what, sizeof(what), "args[%u]", i);
  if (kind == GPUHAL_ARG_TENSOR_MAP) { /* its memory is checked as a BUFFER or SLOT argument is */
    kind = arg->memory;
    if (kind != GPUHAL_ARG_BUFFER && kind != GPUHAL_ARG_SLOT)
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "%s: argument '%s.memory' is kind %d: a tensor map lies over a gpuhal_arg_buffer or "
                                "gpuhal_arg_slot",
                                func, what, (int)kind);
  }
  switch (kind) {
    case GPUHAL_ARG_BYTES:
      if (arg->size == 0)
        return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: argument '%s' has size 0", func, what);
      if (arg->size > GPUHAL__KERNEL_PARAM_BYTES_MAX)
        return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                  "%s: argument '%s' has %u bytes; a kernel's parameters hold at most %u bytes", func,
                                  what, arg->size, (unsigned)GPUHAL__KERNEL_PARAM_BYTES_MAX);
      if (!arg->data && arg->slot != 0)
        return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                  "%s: argument '%s' was made by gpuhal_arg_bytes with NULL data and %u bytes: "
                                  "data must point at the value",
                                  func, what, arg->size);
      if (!arg->data && arg->size > sizeof(arg->inline_value))
        return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                  "%s: argument '%s' has no data pointer and %u bytes (inline values "
                                  "hold at most 16): make it with gpuhal_arg_bytes",
                                  func, what, arg->size);
      break;
    case GPUHAL_ARG_BUFFER:
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_buffer(cb, arg->buffer, func, what));
      if (arg->offset > arg->buffer->size)
        return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                                  "%s: argument '%s': offset %llu is past the end of the buffer (%llu "
                                  "bytes)",
                                  func, what, (unsigned long long)arg->offset, (unsigned long long)arg->buffer->size);
      break;
    case GPUHAL_ARG_CONDITION: GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_condition_arg(cb, arg, func, what)); break;
    case GPUHAL_ARG_SLOT:
      if (arg->slot >= cb->binding_slots)
        return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                                  "%s: argument '%s' names binding slot %u but the command buffer has "
                                  "%u slot(s)",
                                  func, what, arg->slot, cb->binding_slots);
      break;
    default:
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "%s: argument '%s' has unknown kind %d (make arguments with "
                                "gpuhal_arg_buffer/_slot/_bytes/_tensor_map/_condition/_u32/...)",
                                func, what, (int)arg->kind);
  }
  if (arg->kind == GPUHAL_ARG_TENSOR_MAP) GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_tensor_map(cb, arg, func, what));
  if (kernel->info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN && kernel->info.param_sizes[i] != size)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument '%s' is %u bytes but parameter %u of kernel '%s' is %u "
                              "bytes",
                              func, what, size, i, kernel->name, kernel->info.param_sizes[i]);
  return NULL;
}

/* Appends a dispatch command whose arguments are then pushed by the caller. */
static gpuhal_status_t gpuhal__cb_append_dispatch(gpuhal_command_buffer_t* cb, CUfunction function, const char* name,
                                                  const uint32_t grid[3], const uint32_t block[3],
                                                  uint32_t shared_bytes, gpuhal__cmd_t** out_cmd) {
  gpuhal__cmd_t* cmd;
  int i;
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_append(cb, GPUHAL__CMD_DISPATCH, &cmd));
  cmd->function = function;
  cmd->kernel_name = name;
  for (i = 0; i < 3; ++i) {
    cmd->grid[i] = grid[i];
    cmd->block[i] = block[i];
  }
  cmd->shared_bytes = shared_bytes;
  cmd->arg_first = cb->arg_count;
  *out_cmd = cmd;
  return NULL;
}

static size_t gpuhal__args_value_bytes(uint32_t arg_count, const gpuhal_arg_t* args) {
  size_t bytes = 0;
  uint32_t i;
  for (i = 0; i < arg_count; ++i) bytes += ((size_t)gpuhal__arg_bytes_passed(&args[i]) + 7u) & ~(size_t)7u;
  return bytes;
}

/* gpuhal_cmd_dispatch and gpuhal_cmd_dispatch_ex (`func` names the call in messages). */
static gpuhal_status_t gpuhal__cb_record_dispatch(gpuhal_command_buffer_t* cb, gpuhal_kernel_t* kernel,
                                                  gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared_bytes,
                                                  const gpuhal_dispatch_options_t* options, uint32_t arg_count,
                                                  const gpuhal_arg_t* args, const char* func) {
  gpuhal__cmd_t* cmd;
  gpuhal_dispatch_options_t launch;
  uint32_t g[3], b[3], i, maps = 0;
  uint64_t total = 0;
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_check(cb, GPUHAL__MAGIC_COMMAND_BUFFER, func, "command_buffer"));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_recording(cb, func));
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_check(kernel, GPUHAL__MAGIC_KERNEL, func, "kernel"));
  if (kernel->executable->device != cb->device)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'kernel' ('%s') was loaded on device %d; the command "
                              "buffer belongs to device %d%s",
                              func, kernel->name, kernel->executable->device->ordinal, cb->device->ordinal,
                              gpuhal__device_pair_note(kernel->executable->device, cb->device));
  if (arg_count != 0 && args == NULL)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: argument 'args' must not be NULL when arg_count > 0",
                              func);
  if (kernel->info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN && arg_count != kernel->info.param_count)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'arg_count' is %u but kernel '%s' has %u parameter(s)", func, arg_count,
                              kernel->name, kernel->info.param_count);
  GPUHAL__RETURN_IF_ERROR(gpuhal__dispatch_check_dims(cb, kernel, grid, block, shared_bytes, func));
  for (i = 0; i < arg_count; ++i) {
    GPUHAL__RETURN_IF_ERROR(gpuhal__dispatch_check_arg(cb, kernel, i, &args[i], func));
    maps += args[i].kind == GPUHAL_ARG_TENSOR_MAP;
    total += gpuhal__arg_bytes_passed(&args[i]);
  }
  /* Checked against the kernel's parameters above when the driver says what they are; when
   * it cannot (before CUDA 12.4), arguments that could fit no kernel's are still refused. */
  if (total > GPUHAL__KERNEL_PARAM_BYTES_MAX)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'args' holds %llu bytes in its %u arguments; a kernel's parameters hold "
                              "at most %u bytes",
                              func, (unsigned long long)total, arg_count, (unsigned)GPUHAL__KERNEL_PARAM_BYTES_MAX);
  g[0] = grid.x, g[1] = grid.y, g[2] = grid.z;
  b[0] = block.x, b[1] = block.y, b[2] = block.z;
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_launch_check(cb, kernel, g, b, shared_bytes, options, &launch));

  /* Everything that can fail is reserved before anything is appended. */
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_reserve_args(cb, arg_count, gpuhal__args_value_bytes(arg_count, args)));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_reserve_tensor_maps(cb, maps));
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(cb->device->allocator, (void**)&cb->cmds, &cb->cmd_capacity,
                                         (size_t)cb->cmd_count + 1, sizeof(gpuhal__cmd_t), "recorded commands"));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_reserve_retained(cb, arg_count));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_retain_executable(cb, kernel->executable));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_append_dispatch(cb, kernel->function, kernel->name, g, b, shared_bytes, &cmd));
  cmd->launch = launch;
  for (i = 0; i < arg_count; ++i) {
    const gpuhal_arg_t* arg = &args[i];
    gpuhal__ref_t ref;
    if (arg->kind == GPUHAL_ARG_BYTES) {
      gpuhal__cb_push_arg(cb, arg->data ? arg->data : (const void*)arg->inline_value, arg->size);
      continue;
    }
    if (arg->kind == GPUHAL_ARG_CONDITION) {
      gpuhal__cb_push_condition_arg(cb, arg->condition);
      continue;
    }
    memset(&ref, 0, sizeof(ref));
    ref.offset = arg->offset;
    if ((arg->kind == GPUHAL_ARG_TENSOR_MAP ? arg->memory : arg->kind) == GPUHAL_ARG_SLOT) {
      ref.kind = GPUHAL__REF_SLOT;
      ref.slot = arg->slot;
      gpuhal__cb_note_slot(cb, &ref,
                           arg->kind == GPUHAL_ARG_TENSOR_MAP ? gpuhal__tensor_map_extent(arg->tensor_map) : 0);
    } else {
      ref.kind = GPUHAL__REF_BUFFER;
      ref.buffer = arg->buffer;
      gpuhal__cb_retain_buffer(cb, arg->buffer); /* cannot fail: reserved above */
    }
    if (arg->kind == GPUHAL_ARG_TENSOR_MAP) {
      gpuhal__cb_push_tensor_map_arg(cb, &ref, arg->tensor_map);
    } else {
      gpuhal__cb_push_address_arg(cb, &ref);
    }
    if (cb->args[cb->arg_count - 1].late) cmd->late_args++;
  }
  cmd->arg_count = arg_count;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_cmd_dispatch(gpuhal_command_buffer_t* command_buffer, gpuhal_kernel_t* kernel,
                                               gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared_bytes,
                                               uint32_t arg_count, const gpuhal_arg_t* args) {
  return gpuhal__cb_record_dispatch(command_buffer, kernel, grid, block, shared_bytes, NULL, arg_count, args,
                                    "gpuhal_cmd_dispatch");
}

GPUHAL_API gpuhal_status_t gpuhal_cmd_dispatch_ex(gpuhal_command_buffer_t* command_buffer, gpuhal_kernel_t* kernel,
                                                  gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared_bytes,
                                                  const gpuhal_dispatch_options_t* options, uint32_t arg_count,
                                                  const gpuhal_arg_t* args) {
  return gpuhal__cb_record_dispatch(command_buffer, kernel, grid, block, shared_bytes, options, arg_count, args,
                                    "gpuhal_cmd_dispatch_ex");
}
/* ---- copy / fill / update ---- */

/* Records a call of a built-in kernel: `refs` become the leading pointer arguments, then
 * `values` (8 bytes each). */
static gpuhal_status_t gpuhal__cb_record_builtin(gpuhal_command_buffer_t* cb, CUfunction function, const char* name,
                                                 uint64_t size, const gpuhal__ref_t* refs, uint32_t ref_count,
                                                 const uint64_t* values, uint32_t value_count) {
  gpuhal__cmd_t* cmd;
  uint32_t grid[3], block[3], i;
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_reserve_args(cb, ref_count + value_count, 8u * (ref_count + value_count)));
  grid[0] = gpuhal__builtin_grid(size), grid[1] = 1, grid[2] = 1;
  block[0] = GPUHAL__BUILTIN_BLOCK, block[1] = 1, block[2] = 1;
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_append_dispatch(cb, function, name, grid, block, 0, &cmd));
  for (i = 0; i < ref_count; ++i) {
    gpuhal__cb_push_address_arg(cb, &refs[i]);
    if (cb->args[cb->arg_count - 1].late) cmd->late_args++;
  }
  for (i = 0; i < value_count; ++i) gpuhal__cb_push_arg(cb, &values[i], 8);
  cmd->arg_count = ref_count + value_count;
  return NULL;
}

/* Retains a ref's buffer and notes its slot use, once the command is accepted. */
static gpuhal_status_t gpuhal__cb_take_ref(gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref, uint64_t size) {
  gpuhal__cb_note_slot(cb, ref, size);
  return ref->kind == GPUHAL__REF_BUFFER ? gpuhal__cb_retain_buffer(cb, ref->buffer) : NULL;
}

static int gpuhal__ref_same_buffer_overlap(const gpuhal__ref_t* a, const gpuhal__ref_t* b, uint64_t size) {
  if (a->kind != b->kind) return 0;
  if (a->kind == GPUHAL__REF_BUFFER && a->buffer != b->buffer) return 0;
  if (a->kind == GPUHAL__REF_SLOT && a->slot != b->slot) return 0;
  return a->offset < b->offset + size && b->offset < a->offset + size;
}
/* Records a copy (or an update, whose source is the staging buffer) from s to d. In a graph,
 * a late-bound address cannot sit in a memcpy node (drivers refuse address 0), so then the
 * built-in copy kernel does it and its node is patched at execute. */
static gpuhal_status_t gpuhal__cb_record_transfer(gpuhal_command_buffer_t* cb, gpuhal__cmd_type_t type, gpuhal__ref_t s,
                                                  gpuhal__ref_t d, uint64_t size) {
  gpuhal__cmd_t* cmd;
  if (gpuhal__cb_is_graph(cb) && (gpuhal__ref_is_late(&s) || gpuhal__ref_is_late(&d))) {
    gpuhal__ref_t refs[2];
    uint64_t value = size;
    if (!cb->builtins) GPUHAL__RETURN_IF_ERROR(gpuhal__builtins_get(cb->device, &cb->builtins));
    refs[0] = d;
    refs[1] = s;
    return gpuhal__cb_record_builtin(cb, cb->builtins->copy, "gpuhal_builtin_copy", size, refs, 2, &value, 1);
  }
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_append(cb, type, &cmd));
  cmd->src = s;
  cmd->dst = d;
  cmd->size = size;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_cmd_copy(gpuhal_command_buffer_t* command_buffer, gpuhal_buffer_ref_t src,
                                           gpuhal_buffer_ref_t dst, uint64_t size) {
  gpuhal_command_buffer_t* cb = command_buffer;
  gpuhal__ref_t s, d;
  GPUHAL__CHECK_RECORDING(command_buffer);
  GPUHAL__CHECK_ARG(size > 0, "size", "must be > 0");
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_copy_ref(cb, src, size, __func__, "src", &s)); /* multi-device: peers */
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_copy_ref(cb, dst, size, __func__, "dst", &d));
  GPUHAL__CHECK_ARG(!gpuhal__ref_same_buffer_overlap(&s, &d, size), "src",
                    "and 'dst' overlap (same buffer or slot, overlapping ranges)");
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_reserve_retained(cb, 2));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_record_transfer(cb, GPUHAL__CMD_COPY, s, d, size));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_take_ref(cb, &s, size));
  return gpuhal__cb_take_ref(cb, &d, size);
}

/* Shrinks a pattern that repeats within itself (e.g. 8 bytes of 0xAB -> 1 byte), so that
 * more fills can use CUDA's memsets. */
static uint32_t gpuhal__pattern_reduce(const unsigned char* p, uint32_t size) {
  while (size > 1 && memcmp(p, p + size / 2, size / 2) == 0) size /= 2;
  return size;
}

/* The pattern repeated to 16 bytes, as the built-in fill kernel takes it. */
static void gpuhal__pattern_expand(const unsigned char* p, uint32_t size, uint64_t out[2]) {
  unsigned char bytes[16];
  uint32_t i;
  for (i = 0; i < 16; ++i) bytes[i] = p[i % size];
  memcpy(out, bytes, 16);
}
GPUHAL_API gpuhal_status_t gpuhal_cmd_fill(gpuhal_command_buffer_t* command_buffer, gpuhal_buffer_ref_t dst,
                                           uint64_t size, const void* pattern, uint32_t pattern_size) {
  gpuhal_command_buffer_t* cb = command_buffer;
  gpuhal__ref_t d;
  uint32_t reduced;
  uint64_t expanded[2];
  GPUHAL__CHECK_RECORDING(command_buffer);
  GPUHAL__CHECK_ARG(pattern != NULL, "pattern", "must not be NULL");
  GPUHAL__CHECK_ARG(
      pattern_size == 1 || pattern_size == 2 || pattern_size == 4 || pattern_size == 8 || pattern_size == 16,
      "pattern_size", "must be 1, 2, 4, 8 or 16");
  GPUHAL__CHECK_ARG(size > 0, "size", "must be > 0");
  GPUHAL__CHECK_ARG(size % pattern_size == 0, "size", "must be a multiple of pattern_size");
  GPUHAL__CHECK_ARG(dst.offset % pattern_size == 0, "dst.offset", "must be a multiple of pattern_size");
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_ref(cb, dst, size, __func__, "dst", &d));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_reserve_retained(cb, 1));
  reduced = gpuhal__pattern_reduce((const unsigned char*)pattern, pattern_size);
  gpuhal__pattern_expand((const unsigned char*)pattern, pattern_size, expanded);
  if (!cb->builtins && (reduced > 4 || gpuhal__ref_is_late(&d) || !gpuhal__cb_is_graph(cb)))
    GPUHAL__RETURN_IF_ERROR(gpuhal__builtins_get(cb->device, &cb->builtins));
  if (gpuhal__cb_is_graph(cb) &&
      (gpuhal__ref_is_late(&d) || !gpuhal__fill_is_memset(reduced, gpuhal__buffer_address(d.buffer) + d.offset))) {
    uint64_t values[3];
    values[0] = size;
    values[1] = expanded[0];
    values[2] = expanded[1];
    GPUHAL__RETURN_IF_ERROR(
        gpuhal__cb_record_builtin(cb, cb->builtins->fill, "gpuhal_builtin_fill", size, &d, 1, values, 3));
  } else {
    gpuhal__cmd_t* cmd;
    GPUHAL__RETURN_IF_ERROR(gpuhal__cb_append(cb, GPUHAL__CMD_FILL, &cmd));
    cmd->dst = d;
    cmd->size = size;
    cmd->pattern[0] = expanded[0];
    cmd->pattern[1] = expanded[1];
    cmd->pattern_size = reduced;
  }
  return gpuhal__cb_take_ref(cb, &d, size);
}

GPUHAL_API gpuhal_status_t gpuhal_cmd_update(gpuhal_command_buffer_t* command_buffer, const void* host_src,
                                             gpuhal_buffer_ref_t dst, uint64_t size) {
  gpuhal_command_buffer_t* cb = command_buffer;
  gpuhal__ref_t d, s;
  size_t offset, update_capacity;
  GPUHAL__CHECK_RECORDING(command_buffer);
  GPUHAL__CHECK_ARG(host_src != NULL, "host_src", "must not be NULL");
  GPUHAL__CHECK_ARG(size > 0, "size", "must be > 0");
  GPUHAL__CHECK_ARG(size <= (uint64_t)(SIZE_MAX / 2), "size", "is too large for host memory");
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_ref(cb, dst, size, __func__, "dst", &d));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_reserve_retained(cb, 1));
  offset = (cb->update_size + 15u) & ~(size_t)15u;
  update_capacity = cb->update_capacity;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow(cb->device->allocator, (void**)&cb->update_data, &update_capacity,
                                       offset + (size_t)size, 1, "cmd_update data"));
  cb->update_capacity = update_capacity;
  memset(&s, 0, sizeof(s));
  s.kind = GPUHAL__REF_STAGING;
  s.offset = offset;
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_record_transfer(cb, GPUHAL__CMD_UPDATE, s, d, size));
  memcpy(cb->update_data + offset, host_src, (size_t)size);
  cb->update_size = offset + (size_t)size;
  return gpuhal__cb_take_ref(cb, &d, size);
}

GPUHAL_API gpuhal_status_t gpuhal_cmd_barrier(gpuhal_command_buffer_t* command_buffer) {
  gpuhal__cmd_t* cmd;
  GPUHAL__CHECK_RECORDING(command_buffer);
  /* Consecutive barriers are one barrier. */
  if (command_buffer->cmd_count && command_buffer->cmds[command_buffer->cmd_count - 1].type == GPUHAL__CMD_BARRIER)
    return NULL;
  return gpuhal__cb_append(command_buffer, GPUHAL__CMD_BARRIER, &cmd);
}

/* ---- end: freezing the recording ---- */

/* kernelParams arrays for every dispatch: pointers into `values`, which no longer moves. */
static gpuhal_status_t gpuhal__cb_build_param_ptrs(gpuhal_command_buffer_t* cb) {
  uint32_t i;
  if (!cb->arg_count) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(cb->device->allocator, sizeof(void*) * cb->arg_count,
                                               "kernel parameter pointers", (void**)&cb->param_ptrs));
  for (i = 0; i < cb->arg_count; ++i) cb->param_ptrs[i] = cb->values + cb->args[i].value_offset;
  return NULL;
}
static gpuhal_status_t gpuhal__cb_collect_late_cmds(gpuhal_command_buffer_t* cb) {
  uint32_t c, n = 0;
  for (c = 0; c < cb->cmd_count; ++c) n += cb->cmds[c].late_args ? 1u : 0u;
  if (!n) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(cb->device->allocator, sizeof(uint32_t) * n, "late-bound command list",
                                               (void**)&cb->late_cmds));
  for (c = 0; c < cb->cmd_count; ++c)
    if (cb->cmds[c].late_args) cb->late_cmds[cb->late_cmd_count++] = c;
  return NULL;
}
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_end(gpuhal_command_buffer_t* command_buffer) {
  gpuhal_command_buffer_t* cb = command_buffer;
  gpuhal_status_t st;
  GPUHAL__CHECK_RECORDING(command_buffer);
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_regions_at_end(cb));
  st = gpuhal__cb_build_param_ptrs(cb);
  if (!st) st = gpuhal__cb_collect_late_cmds(cb); /* the back end's end may use them */
  if (!st) st = cb->backend->end(cb);
  if (st) {
    /* Back to recording with nothing built, so end can be retried (or the buffer dropped). */
    cb->backend->discard(cb);
    gpuhal__free(cb->device->allocator, cb->param_ptrs);
    gpuhal__free(cb->device->allocator, cb->late_cmds);
    cb->param_ptrs = NULL;
    cb->late_cmds = NULL;
    cb->late_cmd_count = 0;
    cb->node_count = 0;
    return gpuhal_status_annotate(st, "gpuhal_command_buffer_end (%u commands)", cb->cmd_count);
  }
  {
    /* Its execute resolves slot and transient addresses at issue, so that issue must come
     * after the allocas it depends on were issued (GPUHAL__SUBMIT_NOT_PROVISIONAL). */
    uint32_t i;
    cb->reads_allocas = cb->reads_allocas || cb->binding_slots > 0;
    for (i = 0; i < cb->retained_buffer_count && !cb->reads_allocas; ++i)
      cb->reads_allocas = cb->retained_buffers[i]->pending;
  }
  cb->state = GPUHAL__CB_EXECUTABLE;
  return NULL;
}
