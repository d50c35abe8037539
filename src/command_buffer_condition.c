/* command_buffer_condition: device-side control flow in GRAPH command buffers (conditions,
 * IF and WHILE regions; command_buffer.h). A region is recorded as REGION_BEGIN ...
 * REGION_END around its commands; the graph builder (command_buffer_graph.c) turns it into
 * a conditional node whose body graph it builds from the commands in between, at any
 * depth. A condition's handle exists only once the graph of its region does, so recording
 * keeps indices and the build writes the handles into the arguments that take them. */
#include "command_buffer.h"
#include "symbols.h"
#include "status.h"

/* The driver release conditional nodes (with cuGraphAddNode's edge data) came with. */
#define GPUHAL__CONDITIONAL_DRIVER_VERSION 12030

GPUHAL_API gpuhal_arg_t gpuhal_arg_condition(gpuhal_condition_t condition) {
  gpuhal_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = GPUHAL_ARG_CONDITION;
  a.condition = condition.id;
  a.size = 8;
  return a;
}

/* The region being recorded: 0 at the top level, else 1 + its REGION_BEGIN's index. */
static uint32_t gpuhal__cb_current_region(const gpuhal_command_buffer_t* cb) {
  return cb->region_depth ? cb->regions[cb->region_depth - 1] + 1 : 0;
}

/* 1 when `region` is the top level or an open region (so it encloses what is recorded now). */
static int gpuhal__cb_region_is_open(const gpuhal_command_buffer_t* cb, uint32_t region) {
  uint32_t d;
  if (region == 0) return 1;
  for (d = 0; d < cb->region_depth; ++d)
    if (cb->regions[d] + 1 == region) return 1;
  return 0;
}

/* GRAPH command buffers on a driver with conditional nodes. */
static gpuhal_status_t gpuhal__cb_check_conditionals(const gpuhal_command_buffer_t* cb, const char* func) {
  const gpuhal_device_t* device = cb->device;
  int version = device->info.driver_version;
  if (!gpuhal__cb_is_graph(cb))
    return gpuhal_status_make(GPUHAL_STATUS_UNIMPLEMENTED,
                              "%s: device-side conditions need a GRAPH command buffer (conditional graph nodes); a "
                              "STREAM command buffer issues its commands from the host",
                              func);
  if (version < GPUHAL__CONDITIONAL_DRIVER_VERSION || !device->cu->cuGraphConditionalHandleCreate ||
      !device->cu->cuGraphAddNode)
    return gpuhal_status_make(GPUHAL_STATUS_UNIMPLEMENTED,
                              "%s: device-side conditions need conditional graph nodes, from CUDA driver 12.3 on; this "
                              "driver is CUDA %d.%d",
                              func, version / 1000, version % 1000 / 10);
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_command_buffer_condition_create(gpuhal_command_buffer_t* command_buffer,
                                                                  uint32_t default_value,
                                                                  gpuhal_condition_t* out_condition) {
  gpuhal_command_buffer_t* cb = command_buffer;
  gpuhal__cb_condition_t* condition;
  GPUHAL__CHECK_ARG(out_condition != NULL, "out_condition", "must not be NULL");
  out_condition->id = 0;
  GPUHAL__CHECK_RECORDING(command_buffer);
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_conditionals(cb, __func__));
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(cb->device->allocator, (void**)&cb->conditions, &cb->condition_capacity,
                                         (size_t)cb->condition_count + 1, sizeof(*cb->conditions),
                                         "command buffer conditions"));
  condition = &cb->conditions[cb->condition_count++];
  memset(condition, 0, sizeof(*condition));
  condition->default_value = default_value;
  condition->region = gpuhal__cb_current_region(cb);
  out_condition->id = cb->condition_count;
  return NULL;
}

/* The condition `id` names, checked to be one of this command buffer's. */
static gpuhal_status_t gpuhal__cb_condition_get(const gpuhal_command_buffer_t* cb, uint32_t id, const char* func,
                                                const char* what, const gpuhal__cb_condition_t** out) {
  *out = NULL;
  if (id == 0 || id > cb->condition_count)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument '%s' (id %u) is not a condition of this command buffer (it has %u; make "
                              "them with gpuhal_command_buffer_condition_create)",
                              func, what, id, cb->condition_count);
  *out = &cb->conditions[id - 1];
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_condition_arg(const gpuhal_command_buffer_t* cb,
                                                               const gpuhal_arg_t* arg, const char* func,
                                                               const char* what) {
  const gpuhal__cb_condition_t* condition;
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_condition_get(cb, arg->condition, func, what, &condition));
  if (!gpuhal__cb_region_is_open(cb, condition->region))
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument '%s': condition %u belongs to the region begun by command %u, which does "
                              "not enclose this dispatch (a condition is set only from inside its own region)",
                              func, what, arg->condition, condition->region - 1);
  return NULL;
}

GPUHAL__PRIVATE void gpuhal__cb_push_condition_arg(gpuhal_command_buffer_t* cb, uint32_t condition_id) {
  uint64_t none = 0;
  gpuhal__cmd_arg_t* arg = gpuhal__cb_push_arg(cb, &none, sizeof(none));
  arg->condition = condition_id;
}

/* gpuhal_cmd_begin_if and gpuhal_cmd_begin_while. */
static gpuhal_status_t gpuhal__cb_begin_region(gpuhal_command_buffer_t* cb, gpuhal_condition_t condition,
                                               uint32_t is_while, const char* func) {
  const gpuhal__cb_condition_t* c;
  gpuhal__cmd_t* cmd;
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_check(cb, GPUHAL__MAGIC_COMMAND_BUFFER, func, "command_buffer"));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_recording(cb, func));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_conditionals(cb, func));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_condition_get(cb, condition.id, func, "condition", &c));
  if (c->begun)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'condition' (id %u) already controls the region begun by command %u (a "
                              "condition controls one region)",
                              func, condition.id, c->begun - 1);
  if (c->region != gpuhal__cb_current_region(cb)) {
    char where[64];
    if (c->region)
      snprintf(where, sizeof(where), "the region begun by command %u", c->region - 1);
    else
      snprintf(where, sizeof(where), "the top level");
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'condition' (id %u) belongs to %s, not to the region being recorded: "
                              "begin a region where its condition was made",
                              func, condition.id, where);
  }
  if (cb->region_depth == GPUHAL_REGION_DEPTH_MAX)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE, "%s: regions nest at most GPUHAL_REGION_DEPTH_MAX (%d) deep",
                              func, GPUHAL_REGION_DEPTH_MAX);
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_append(cb, GPUHAL__CMD_REGION_BEGIN, &cmd));
  cmd->condition = condition.id - 1;
  cmd->region_while = is_while;
  cb->conditions[condition.id - 1].begun = cb->cmd_count;
  cb->regions[cb->region_depth++] = cb->cmd_count - 1;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_cmd_begin_if(gpuhal_command_buffer_t* command_buffer, gpuhal_condition_t condition) {
  return gpuhal__cb_begin_region(command_buffer, condition, 0, "gpuhal_cmd_begin_if");
}

GPUHAL_API gpuhal_status_t gpuhal_cmd_begin_while(gpuhal_command_buffer_t* command_buffer,
                                                  gpuhal_condition_t condition) {
  return gpuhal__cb_begin_region(command_buffer, condition, 1, "gpuhal_cmd_begin_while");
}

GPUHAL_API gpuhal_status_t gpuhal_cmd_end_region(gpuhal_command_buffer_t* command_buffer) {
  gpuhal__cmd_t* cmd;
  GPUHAL__CHECK_RECORDING(command_buffer);
  if (!command_buffer->region_depth)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_cmd_end_region: no region is open (open one with gpuhal_cmd_begin_if or "
                              "gpuhal_cmd_begin_while)");
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_append(command_buffer, GPUHAL__CMD_REGION_END, &cmd));
  command_buffer->region_depth--;
  return NULL;
}

/* 1 when a dispatch among commands [first, end) takes condition `id` (1 + its index). */
static int gpuhal__cb_dispatch_takes(const gpuhal_command_buffer_t* cb, uint32_t first, uint32_t end, uint32_t id) {
  uint32_t c, i;
  for (c = first; c < end; ++c) {
    const gpuhal__cmd_t* cmd = &cb->cmds[c];
    if (cmd->type != GPUHAL__CMD_DISPATCH) continue;
    for (i = 0; i < cmd->arg_count; ++i)
      if (cb->args[cmd->arg_first + i].condition == id) return 1;
  }
  return 0;
}

/* The WHILE region begun by command `begin` loops for ever when nothing in it can set its
 * condition to 0 (only a dispatch in the region may) and it may be non-zero on entry (its
 * default is, or a dispatch outside the region sets it): on a GPU, until the device is
 * reset. Refused when recording ends, as a mistake. */
static gpuhal_status_t gpuhal__cb_check_while_can_end(const gpuhal_command_buffer_t* cb, uint32_t begin) {
  const gpuhal__cmd_t* cmd = &cb->cmds[begin];
  const gpuhal__cb_condition_t* condition = &cb->conditions[cmd->condition];
  uint32_t id = cmd->condition + 1, end = begin + 1, depth = 1;
  for (; end < cb->cmd_count && depth; ++end) {
    if (cb->cmds[end].type == GPUHAL__CMD_REGION_BEGIN) depth++;
    if (cb->cmds[end].type == GPUHAL__CMD_REGION_END) depth--;
  }
  if (gpuhal__cb_dispatch_takes(cb, begin + 1, end, id)) return NULL;
  if (condition->default_value == 0 && !gpuhal__cb_dispatch_takes(cb, 0, cb->cmd_count, id)) return NULL;
  return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                            "gpuhal_command_buffer_end: the WHILE region begun by command %u could never end: no "
                            "dispatch in it takes its condition %u (gpuhal_arg_condition), so nothing can set it to 0, "
                            "and it may be non-zero on entry (%s)",
                            begin, id, condition->default_value ? "its default is" : "a dispatch outside it sets it");
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_regions_at_end(const gpuhal_command_buffer_t* cb) {
  uint32_t k;
  if (cb->region_depth)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_command_buffer_end: %u region(s) still open, the innermost begun by command %u "
                              "(close each with gpuhal_cmd_end_region)",
                              cb->region_depth, cb->regions[cb->region_depth - 1]);
  /* CUDA refuses to instantiate a graph with a conditional handle no node uses */
  for (k = 0; k < cb->condition_count; ++k)
    if (!cb->conditions[k].begun)
      return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                                "gpuhal_command_buffer_end: condition %u controls no region (every condition must "
                                "begin one, with gpuhal_cmd_begin_if or gpuhal_cmd_begin_while)",
                                k + 1);
  for (k = 0; k < cb->cmd_count; ++k)
    if (cb->cmds[k].type == GPUHAL__CMD_REGION_BEGIN && cb->cmds[k].region_while)
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_while_can_end(cb, k));
  return NULL;
}

/* ---- building the graph ---- */

GPUHAL__PRIVATE gpuhal_status_t gpuhal__graph_make_conditions(gpuhal_command_buffer_t* cb, CUgraph graph,
                                                              uint32_t region) {
  gpuhal_device_t* device = cb->device;
  uint32_t k, i;
  for (k = 0; k < cb->condition_count; ++k) {
    gpuhal__cb_condition_t* condition = &cb->conditions[k];
    if (condition->region != region) continue;
    GPUHAL__CU_RETURN(
        device->cu, cuGraphConditionalHandleCreate,
        (&condition->handle, graph, device->context, condition->default_value, CU_GRAPH_COND_ASSIGN_DEFAULT));
    for (i = 0; i < cb->arg_count; ++i)
      if (cb->args[i].condition == k + 1)
        memcpy(cb->values + cb->args[i].value_offset, &condition->handle, sizeof(condition->handle));
  }
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__graph_add_region(gpuhal_command_buffer_t* cb, CUgraph graph, gpuhal__cmd_t* cmd,
                                                         const CUgraphNode* deps, size_t dep_count, CUgraph* out_body) {
  gpuhal_device_t* device = cb->device;
  CUgraphNodeParams params;
  memset(&params, 0, sizeof(params));
  params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  params.conditional.handle = cb->conditions[cmd->condition].handle;
  params.conditional.type = cmd->region_while ? CU_GRAPH_COND_TYPE_WHILE : CU_GRAPH_COND_TYPE_IF;
  params.conditional.size = 1;
  params.conditional.ctx = device->context;
  GPUHAL__CU_RETURN(device->cu, cuGraphAddNode, (&cmd->node, graph, deps, NULL, dep_count, &params));
  *out_body = params.conditional.phGraph_out[0];
  return NULL;
}
