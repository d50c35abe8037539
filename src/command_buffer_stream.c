/* gpuhal - command buffers, the STREAM back end: the recorded commands are issued one by
 * one into the queue's stream at every execute (no instantiation: for one-shot and tiny
 * work). Part of the implementation only. */
#include "command_buffer.h"
#include "symbols.h"
#include "status.h"

static gpuhal_status_t gpuhal__stream_launch_builtin(gpuhal_device_t* device, CUfunction function, uint64_t size,
                                                     void** params, CUstream stream) {
  return GPUHAL__CU(device->cu, cuLaunchKernel,
                    (function, gpuhal__builtin_grid(size), 1, 1, GPUHAL__BUILTIN_BLOCK, 1, 1, 0, stream, params, NULL));
}

static gpuhal_status_t gpuhal__stream_fill(gpuhal_command_buffer_t* cb, const gpuhal__cmd_t* cmd, CUdeviceptr dst,
                                           CUstream stream) {
  const gpuhal__cuda_symbols_t* cu = cb->device->cu;
  size_t n = (size_t)(cmd->size / cmd->pattern_size);
  if (gpuhal__fill_is_memset(cmd->pattern_size, dst)) {
    unsigned value = gpuhal__memset_value(cmd);
    if (cmd->pattern_size == 1) return GPUHAL__CU(cu, cuMemsetD8Async, (dst, (unsigned char)value, n, stream));
    if (cmd->pattern_size == 2) return GPUHAL__CU(cu, cuMemsetD16Async, (dst, (unsigned short)value, n, stream));
    return GPUHAL__CU(cu, cuMemsetD32Async, (dst, value, n, stream));
  } else {
    uint64_t d = (uint64_t)dst, size = cmd->size, lo = cmd->pattern[0], hi = cmd->pattern[1];
    void* params[4];
    params[0] = &d;
    params[1] = &size;
    params[2] = &lo;
    params[3] = &hi;
    return gpuhal__stream_launch_builtin(cb->device, cb->builtins->fill, size, params, stream);
  }
}

static gpuhal_status_t gpuhal__stream_issue_cmd(gpuhal_command_buffer_t* cb, const gpuhal__execute_action_t* action,
                                                const gpuhal__cmd_t* cmd, CUstream stream) {
  const gpuhal__cuda_symbols_t* cu = cb->device->cu;
  uint64_t src = 0, dst = 0;
  int changed;
  switch (cmd->type) {
    case GPUHAL__CMD_DISPATCH:
      if (cmd->late_args) GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve_args(cb, action, cmd, &changed));
      if (gpuhal__cmd_has_launch_attrs(cmd)) return gpuhal__cb_launch_ex(cb, (uint32_t)(cmd - cb->cmds), stream);
      return GPUHAL__CU(
          cu, cuLaunchKernel,
          (cmd->function, cmd->grid[0], cmd->grid[1], cmd->grid[2], cmd->block[0], cmd->block[1], cmd->block[2],
           cmd->shared_bytes, stream, cmd->arg_count ? cb->param_ptrs + cmd->arg_first : NULL, NULL));
    case GPUHAL__CMD_COPY:
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve(cb, action, &cmd->src, &src));
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve(cb, action, &cmd->dst, &dst));
      if (gpuhal__ref_is_peer(cb, &cmd->src) || gpuhal__ref_is_peer(cb, &cmd->dst)) /* multi-device: peer copy */
        return GPUHAL__CU(cu, cuMemcpyPeerAsync,
                          ((CUdeviceptr)dst,
                           cmd->dst.kind == GPUHAL__REF_BUFFER ? cmd->dst.buffer->device->context : cb->device->context,
                           (CUdeviceptr)src,
                           cmd->src.kind == GPUHAL__REF_BUFFER ? cmd->src.buffer->device->context : cb->device->context,
                           (size_t)cmd->size, stream));
      return GPUHAL__CU(cu, cuMemcpyAsync, ((CUdeviceptr)dst, (CUdeviceptr)src, (size_t)cmd->size, stream));
    case GPUHAL__CMD_FILL:
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve(cb, action, &cmd->dst, &dst));
      return gpuhal__stream_fill(cb, cmd, (CUdeviceptr)dst, stream);
    case GPUHAL__CMD_UPDATE:
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve(cb, action, &cmd->dst, &dst));
      return GPUHAL__CU(cu, cuMemcpyHtoDAsync,
                        ((CUdeviceptr)dst, cb->update_data + cmd->src.offset, (size_t)cmd->size, stream));
    case GPUHAL__CMD_NATIVE: /* multi-device hook */
      return cmd->native_follower ? NULL : gpuhal__native_issue_group(cb, cmd, stream);
    default: return NULL; /* barriers: a stream is already in order */
  }
}

/* Resolves every address `cmd` needs, writing nothing. */
static gpuhal_status_t gpuhal__cmd_check_addresses(const gpuhal_command_buffer_t* cb,
                                                   const gpuhal__execute_action_t* action, const gpuhal__cmd_t* cmd) {
  uint64_t address;
  unsigned char late[GPUHAL__LATE_VALUE_MAX];
  uint32_t i;
  switch (cmd->type) {
    case GPUHAL__CMD_DISPATCH:
      for (i = 0; i < cmd->arg_count; ++i) {
        const gpuhal__cmd_arg_t* arg = &cb->args[cmd->arg_first + i];
        if (arg->late) GPUHAL__RETURN_IF_ERROR(gpuhal__cb_late_value(cb, action, arg, late));
      }
      return NULL;
    case GPUHAL__CMD_COPY:
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve(cb, action, &cmd->src, &address));
      return gpuhal__cb_resolve(cb, action, &cmd->dst, &address);
    case GPUHAL__CMD_FILL:
    case GPUHAL__CMD_UPDATE: return gpuhal__cb_resolve(cb, action, &cmd->dst, &address);
    default: return NULL;
  }
}

/* STREAM: checks that every address resolves before anything is issued, so that a refused
 * execute runs none of its commands (as a refused graph is not launched). */
static gpuhal_status_t gpuhal__stream_check_addresses(const gpuhal_command_buffer_t* cb,
                                                      const gpuhal__execute_action_t* action) {
  uint32_t c;
  for (c = 0; c < cb->cmd_count; ++c) {
    gpuhal_status_t st = gpuhal__cmd_check_addresses(cb, action, &cb->cmds[c]);
    if (st)
      return gpuhal_status_annotate(st, "command %u (%s) of a stream command buffer", c,
                                    gpuhal__cmd_name(&cb->cmds[c]));
  }
  return NULL;
}

/* Puts an execute of `cb` on `stream`; `action` holds its binding table (NULL when the
 * command buffer has no binding slots: nothing refers to one then). */

/* STREAM's execute: every command issued into the queue's stream, after every address was
 * checked (a refused execute runs none of its commands). */
static gpuhal_status_t gpuhal__cb_stream_issue(gpuhal_command_buffer_t* cb, const gpuhal__execute_action_t* action,
                                               gpuhal_device_t* device, CUstream stream) {
  uint32_t c;
  GPUHAL__RETURN_IF_ERROR(gpuhal__stream_check_addresses(cb, action));
  for (c = 0; c < cb->cmd_count; ++c) {
    const gpuhal__cmd_t* cmd = &cb->cmds[c];
    gpuhal_status_t st;
    GPUHAL__TRACE(device, gpuhal__hooks()->trace_command(device, stream, cmd)); /* trace hook */
    st = gpuhal__stream_issue_cmd(cb, action, cmd, stream);
    if (st) return gpuhal_status_annotate(st, "command %u (%s) of a stream command buffer", c, gpuhal__cmd_name(cmd));
  }
  return NULL;
}

/* Nothing is built at end: the recording is what runs. */
static gpuhal_status_t gpuhal__cb_stream_end(gpuhal_command_buffer_t* cb) {
  GPUHAL__UNUSED(cb);
  return NULL;
}
static void gpuhal__cb_stream_discard(gpuhal_command_buffer_t* cb) { GPUHAL__UNUSED(cb); }

GPUHAL__PRIVATE const gpuhal__cb_backend_t* gpuhal__cb_stream_backend(void) {
  static const gpuhal__cb_backend_t backend = {"STREAM", gpuhal__cb_stream_end, gpuhal__cb_stream_discard,
                                               gpuhal__cb_stream_issue};
  return &backend;
}
