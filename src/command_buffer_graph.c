/* gpuhal - command buffers, the GRAPH back end: the recording becomes a CUgraph at end,
 * instantiated then; every execute launches an instance after patching the late-bound
 * kernel nodes whose addresses differ from that instance's (a rebinding command buffer may
 * keep several instances: see gpuhal__graph_instance_t). Commands between two barriers
 * have no edges among themselves; a barrier orders all before it before all after it. An
 * IF or WHILE region becomes a conditional node of its level, its commands that node's body
 * graph, built the same way (command_buffer_condition.c).
 * Part of the implementation only. */
#include "command_buffer.h"
#include "symbols.h"
#include "status.h"

/* Destroys the graph, its instantiation and the staging memory; the device's context is
 * current. Every handle is cleared whatever fails (a failed destroy leaves the object to
 * the driver, which is all that can be done with it). */
static gpuhal_status_t gpuhal__cb_destroy_graph_current(void* arg) {
  gpuhal_command_buffer_t* cb = (gpuhal_command_buffer_t*)arg;
  gpuhal_device_t* device = cb->device;
  const gpuhal__cuda_symbols_t* cu = device->cu;
  gpuhal_status_t st = NULL;
  uint32_t i;
  for (i = 0; i < cb->instance_count; ++i) {
    gpuhal__graph_instance_t* inst = &cb->instances[i];
    st = gpuhal__status_first(st, gpuhal__device_graph_exec_destroy(device, inst->exec));
    if (inst->done) st = gpuhal__status_first(st, GPUHAL__CU(cu, cuEventDestroy, (inst->done)));
    gpuhal__free(device->allocator, inst->values);
    memset(inst, 0, sizeof(*inst));
  }
  if (cb->graph) st = gpuhal__status_first(st, GPUHAL__CU(cu, cuGraphDestroy, (cb->graph)));
  if (cb->staging) /* may be put off */
    st = gpuhal__status_first(st, gpuhal__device_free(device, NULL, cb->staging, cb->staging_put_off));
  else
    gpuhal__free(device->allocator, cb->staging_put_off);
  cb->staging_put_off = NULL;
  gpuhal__free(device->allocator, cb->graph_values);
  cb->graph_values = NULL;
  cb->instance_count = cb->instance_next = 0;
  cb->exec = NULL;
  cb->graph = NULL;
  cb->staging = 0;
  return st;
}

/* Runs on any thread, with no gpuhal lock held (a last release may come from an
 * application thread, a harvesting submitter or the worker). */
static void gpuhal__cb_destroy_graph(gpuhal_command_buffer_t* cb) {
  gpuhal_device_t* device = cb->device;
  gpuhal_status_t st;
  if (!cb->graph && !cb->instance_count && !cb->staging) return;
  st = gpuhal__device_call_current(device, gpuhal__cb_destroy_graph_current, cb);
  if (st) {
    gpuhal__log(device->logger, GPUHAL_LOG_WARN, "destroying a command buffer's graph: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
  }
}
/* Graph: puts the update bytes in device memory, where memcpy nodes and the copy kernel
 * read them on every launch. */
static gpuhal_status_t gpuhal__cb_upload_staging(gpuhal_command_buffer_t* cb) {
  gpuhal_device_t* device = cb->device;
  gpuhal_status_t st;
  if (!cb->update_size) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__deferred_call_reserve(device->allocator, "a command buffer's staging free put off",
                                                        &cb->staging_put_off));
  st = GPUHAL__CU(device->cu, cuMemAlloc, (&cb->staging, cb->update_size));
  if (st) {
    gpuhal__free(device->allocator, cb->staging_put_off);
    cb->staging_put_off = NULL;
    return st;
  }
  GPUHAL__CU_RETURN(device->cu, cuMemcpyHtoD, (cb->staging, cb->update_data, cb->update_size));
  return NULL;
}

/* Graph: staging arguments get their address now, before the nodes are made. (They stay
 * marked late, so a retried end rewrites them; at execute they resolve to the same value
 * and cause no node update.) */
static void gpuhal__cb_bind_staging_args(gpuhal_command_buffer_t* cb) {
  uint32_t i;
  for (i = 0; i < cb->arg_count; ++i) {
    gpuhal__cmd_arg_t* arg = &cb->args[i];
    uint64_t address;
    if (!arg->late || arg->ref.kind != GPUHAL__REF_STAGING) continue;
    address = (uint64_t)cb->staging + arg->ref.offset;
    memcpy(cb->values + arg->value_offset, &address, sizeof(address));
  }
}
/* The address of a ref known when the graph is built. */
static CUdeviceptr gpuhal__cb_static_address(const gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref) {
  if (ref->kind == GPUHAL__REF_STAGING) return cb->staging + ref->offset;
  return (CUdeviceptr)(gpuhal__buffer_address(ref->buffer) + ref->offset);
}

static void gpuhal__kernel_node_params(const gpuhal_command_buffer_t* cb, const gpuhal__cmd_t* cmd,
                                       CUDA_KERNEL_NODE_PARAMS* p) {
  memset(p, 0, sizeof(*p));
  p->func = cmd->function;
  p->gridDimX = cmd->grid[0];
  p->gridDimY = cmd->grid[1];
  p->gridDimZ = cmd->grid[2];
  p->blockDimX = cmd->block[0];
  p->blockDimY = cmd->block[1];
  p->blockDimZ = cmd->block[2];
  p->sharedMemBytes = cmd->shared_bytes;
  p->kernelParams = cmd->arg_count ? cb->param_ptrs + cmd->arg_first : NULL;
}

GPUHAL__PRIVATE void gpuhal__memcpy_params(CUdeviceptr dst, CUdeviceptr src, uint64_t size, CUDA_MEMCPY3D* m) {
  memset(m, 0, sizeof(*m));
  m->srcMemoryType = CU_MEMORYTYPE_DEVICE;
  m->srcDevice = src;
  m->dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m->dstDevice = dst;
  m->WidthInBytes = (size_t)size;
  m->Height = 1;
  m->Depth = 1;
}
/* Builds the graph: nodes between barriers independent, each segment after a barrier
 * depending on the previous segment (directly when it has one node, else through an
 * empty join node). Empty segments carry the previous dependency forward, so leading,
 * trailing and repeated barriers add nothing and lose no ordering. */
typedef struct gpuhal__graph_builder_s {
  gpuhal_command_buffer_t* cb;
  CUgraph graph;                       /* the graph of the level being built: cb->graph or a region's body */
  CUgraph body;                        /* the body of the region node added last */
  CUgraphNode dependency;              /* what nodes of the current segment depend on; NULL: nothing */
  const gpuhal__cmd_t* dependency_cmd; /* the command whose node `dependency` is; NULL for a join */
  const gpuhal__cmd_t* segment_first;  /* the command of segment[0] */
  CUgraphNode* segment;                /* nodes of the current segment */
  size_t segment_count, segment_capacity;
  int barrier_pending; /* a barrier came after the current segment's nodes */
} gpuhal__graph_builder_t;

static gpuhal_status_t gpuhal__graph_close_segment(gpuhal__graph_builder_t* b) {
  gpuhal_device_t* device = b->cb->device;
  b->barrier_pending = 0;
  if (b->segment_count == 1) {
    b->dependency = b->segment[0];
    b->dependency_cmd = b->segment_first;
  } else if (b->segment_count > 1) {
    GPUHAL__CU_RETURN(device->cu, cuGraphAddEmptyNode, (&b->dependency, b->graph, b->segment, b->segment_count));
    b->dependency_cmd = NULL;
    b->cb->node_count++;
  }
  b->segment_count = 0;
  return NULL;
}

static gpuhal_status_t gpuhal__graph_add_node(gpuhal__graph_builder_t* b, gpuhal__cmd_t* cmd) {
  gpuhal_command_buffer_t* cb = b->cb;
  gpuhal_device_t* device = cb->device;
  const CUgraphNode* deps = b->dependency ? &b->dependency : NULL;
  size_t dep_count = b->dependency ? 1 : 0;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow(device->allocator, (void**)&b->segment, &b->segment_capacity,
                                       b->segment_count + 1, sizeof(CUgraphNode), "graph build state"));
  switch (cmd->type) {
    case GPUHAL__CMD_DISPATCH: {
      CUDA_KERNEL_NODE_PARAMS p;
      int programmatic = b->dependency && gpuhal__graph_is_programmatic(cb, b->dependency_cmd, cmd);
      gpuhal__kernel_node_params(cb, cmd, &p);
      GPUHAL__CU_RETURN(device->cu, cuGraphAddKernelNode,
                        (&cmd->node, b->graph, programmatic ? NULL : deps, programmatic ? 0 : dep_count, &p));
      if (gpuhal__cmd_has_launch_attrs(cmd)) GPUHAL__RETURN_IF_ERROR(gpuhal__graph_set_launch_attrs(cb, cmd));
      if (programmatic)
        GPUHAL__RETURN_IF_ERROR(gpuhal__graph_add_programmatic_edge(cb, b->graph, b->dependency, cmd->node));
      break;
    }
    case GPUHAL__CMD_COPY:
    case GPUHAL__CMD_UPDATE: { /* in pieces (GPUHAL__GRAPH_COPY_PIECE), each after the one before */
      CUdeviceptr dst = gpuhal__cb_static_address(cb, &cmd->dst), src = gpuhal__cb_static_address(cb, &cmd->src);
      uint64_t done = 0;
      CUgraphNode prev = NULL;
      do {
        uint64_t n = cmd->size - done < GPUHAL__GRAPH_COPY_PIECE ? cmd->size - done : GPUHAL__GRAPH_COPY_PIECE;
        CUDA_MEMCPY3D m;
        gpuhal__memcpy_params(dst + done, src + done, n, &m);
        GPUHAL__CU_RETURN(device->cu, cuGraphAddMemcpyNode,
                          (&cmd->node, b->graph, deps, dep_count, &m, device->context));
        done += n;
        if (done < cmd->size) {
          prev = cmd->node;
          deps = &prev;
          dep_count = 1;
          cb->node_count++;
        }
      } while (done < cmd->size);
      break;
    }
    case GPUHAL__CMD_FILL: {
      CUDA_MEMSET_NODE_PARAMS m;
      memset(&m, 0, sizeof(m));
      m.dst = gpuhal__cb_static_address(cb, &cmd->dst);
      m.elementSize = cmd->pattern_size;
      m.width = (size_t)(cmd->size / cmd->pattern_size);
      m.height = 1;
      m.pitch = (size_t)cmd->size;
      m.value = gpuhal__memset_value(cmd);
      GPUHAL__CU_RETURN(device->cu, cuGraphAddMemsetNode, (&cmd->node, b->graph, deps, dep_count, &m, device->context));
      break;
    }
    case GPUHAL__CMD_REGION_BEGIN: /* its body is built next (gpuhal__graph_build_level) */
      GPUHAL__RETURN_IF_ERROR(gpuhal__graph_add_region(cb, b->graph, cmd, deps, dep_count, &b->body));
      break;
    case GPUHAL__CMD_NATIVE:                 /* multi-device hook; only at the top level */
      if (cmd->native_follower) return NULL; /* captured with its group's leader */
      GPUHAL__RETURN_IF_ERROR(gpuhal__graph_add_native(cb, cmd, deps, dep_count));
      break;
    default:
      return gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "command buffer: unexpected command type %d", (int)cmd->type);
  }
  if (b->segment_count == 0) b->segment_first = cmd;
  b->segment[b->segment_count++] = cmd->node;
  cb->node_count++;
  return NULL;
}

/* ---- instances ---- */

/* How many instances the command buffer may have: up to tuning.graph_instances_max when
 * executes may rebind (REUSABLE, late-bound arguments); one otherwise. */
static uint32_t gpuhal__graph_instances_max(const gpuhal_command_buffer_t* cb) {
  int32_t max = cb->device->params.tuning.graph_instances_max; /* resolved: 1 to GPUHAL__GRAPH_INSTANCES_MAX */
  return (cb->flags & GPUHAL_COMMAND_BUFFER_REUSABLE) && cb->late_cmd_count && max > 1 ? (uint32_t)max : 1u;
}

/* 1 when the late arguments of `cmd` (resolved into cb->values) differ from `held`, what
 * a node holds (the graph's: graph_values; an instance's: its values; layout of cb->values). */
static int gpuhal__graph_cmd_differs(const gpuhal_command_buffer_t* cb, const gpuhal__cmd_t* cmd,
                                     const unsigned char* held) {
  uint32_t i;
  for (i = 0; i < cmd->arg_count; ++i) {
    const gpuhal__cmd_arg_t* arg = &cb->args[cmd->arg_first + i];
    if (arg->late && memcmp(cb->values + arg->value_offset, held + arg->value_offset, arg->late_size) != 0) return 1;
  }
  return 0;
}

/* Notes in `held` that the node of `cmd` took its late arguments from cb->values. */
static void gpuhal__graph_cmd_held(const gpuhal_command_buffer_t* cb, const gpuhal__cmd_t* cmd, unsigned char* held) {
  uint32_t i;
  for (i = 0; i < cmd->arg_count; ++i) {
    const gpuhal__cmd_arg_t* arg = &cb->args[cmd->arg_first + i];
    if (arg->late) memcpy(held + arg->value_offset, cb->values + arg->value_offset, arg->late_size);
  }
}

/* Writes the execute's late arguments (resolved into cb->values) into the graph's nodes
 * that hold others, so that an instance made next holds them from the start: on an H200
 * (driver 580) an instantiation most of whose kernel nodes were patched runs its launches
 * about 1.27x slower than a fresh one, for good (tests/bench/RESULTS.md). Where the driver
 * cannot (no cuGraphKernelNodeSetParams, or it refuses a node), the nodes keep what they
 * hold (graph_values), and the instance is patched. */
static void gpuhal__graph_take_values(gpuhal_command_buffer_t* cb) {
  const gpuhal__cuda_symbols_t* cu = cb->device->cu;
  uint32_t k;
  if (!cu->cuGraphKernelNodeSetParams) return;
  for (k = 0; k < cb->late_cmd_count; ++k) {
    const gpuhal__cmd_t* cmd = &cb->cmds[cb->late_cmds[k]];
    CUDA_KERNEL_NODE_PARAMS p;
    if (!gpuhal__graph_cmd_differs(cb, cmd, cb->graph_values)) continue;
    gpuhal__kernel_node_params(cb, cmd, &p);
    if (cu->cuGraphKernelNodeSetParams(cmd->node, &p) != CUDA_SUCCESS) return;
    gpuhal__graph_cmd_held(cb, cmd, cb->graph_values);
  }
}

/* Instantiates the graph once more: at end without late-bound arguments; else at an
 * execute, with that execute's arguments (resolved into cb->values) where the driver lets
 * the graph take them, else with the values the graph holds (graph_values), to be patched.
 * In the device's context. */
static gpuhal_status_t gpuhal__graph_instance_add(gpuhal_command_buffer_t* cb) {
  gpuhal_device_t* device = cb->device;
  gpuhal__graph_instance_t* inst = &cb->instances[cb->instance_count];
  gpuhal_status_t st = NULL;
  if (cb->late_cmd_count) gpuhal__graph_take_values(cb);
  memset(inst, 0, sizeof(*inst));
  if (cb->late_cmd_count) {
    GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, cb->values_size ? cb->values_size : 1,
                                                 "graph instance argument values", (void**)&inst->values));
    memcpy(inst->values, cb->graph_values, cb->values_size);
  }
  if (gpuhal__graph_instances_max(cb) > 1)
    st = GPUHAL__CU(device->cu, cuEventCreate, (&inst->done, CU_EVENT_DISABLE_TIMING));
  if (!st) st = gpuhal__device_graph_instantiate(device, &inst->exec, cb->graph, gpuhal__graph_instantiate_flags(cb));
  if (st) {
    if (inst->done) device->cu->cuEventDestroy(inst->done);
    gpuhal__free(device->allocator, inst->values);
    memset(inst, 0, sizeof(*inst));
    return st;
  }
  if (cb->instance_count++ == 0) cb->exec = inst->exec;
  return NULL;
}

static int gpuhal__graph_instance_differs(const gpuhal_command_buffer_t* cb, const gpuhal__graph_instance_t* inst) {
  uint32_t k;
  for (k = 0; k < cb->late_cmd_count; ++k)
    if (gpuhal__graph_cmd_differs(cb, &cb->cmds[cb->late_cmds[k]], inst->values)) return 1;
  return 0;
}

/* The first instance from instance_next on whose launch has run, or none. Its event queries
 * run in relaxed capture mode: the caller-issue path does not relax its scope (device.h). */
static gpuhal_status_t gpuhal__graph_instance_idle(gpuhal_command_buffer_t* cb, uint32_t count,
                                                   gpuhal__graph_instance_t** out) {
  const gpuhal__cuda_symbols_t* cu = cb->device->cu;
  gpuhal__capture_scope_t capture;
  gpuhal_status_t st = NULL;
  uint32_t k;
  for (k = 0; k < count && !*out; ++k)
    if (!cb->instances[(cb->instance_next + k) % count].launched)
      *out = &cb->instances[(cb->instance_next + k) % count];
  if (*out) return NULL;
  gpuhal__capture_relax(cu, &capture);
  for (k = 0; k < count && !*out && !st; ++k) {
    gpuhal__graph_instance_t* inst = &cb->instances[(cb->instance_next + k) % count];
    CUresult r = cu->cuEventQuery(inst->done);
    if (r == CUDA_SUCCESS)
      *out = inst;
    else if (r != CUDA_ERROR_NOT_READY)
      st = gpuhal__cuda_status(cu, r, "cuEventQuery", __FILE__, __LINE__);
  }
  gpuhal__capture_restore(cu, &capture);
  return st;
}

/* The instance an execute launches, its late arguments resolved into cb->values: one whose
 * nodes hold them already (launching it patches nothing, in flight or not); else a new one,
 * made with them, while fewer than the bound exist (the first at the first execute); else
 * one not in flight; else the next in turn (patched in flight, as with one instance). Under
 * the device's issue serialization, in its context. */
static gpuhal_status_t gpuhal__graph_instance_pick(gpuhal_command_buffer_t* cb, gpuhal__graph_instance_t** out) {
  uint32_t k, count = cb->instance_count, max = gpuhal__graph_instances_max(cb);
  *out = NULL;
  if (max == 1 && count == 1) { /* the only one: its patch compares the nodes, once */
    *out = &cb->instances[0];
    return NULL;
  }
  for (k = 0; k < count && !*out; ++k) {
    gpuhal__graph_instance_t* inst = &cb->instances[(cb->instance_next + k) % count];
    if (!gpuhal__graph_instance_differs(cb, inst)) *out = inst;
  }
  if (!*out && count < max) {
    gpuhal_status_t st = gpuhal__graph_instance_add(cb);
    if (!st) {
      *out = &cb->instances[count];
    } else if (!count) {
      return st; /* none to fall back on */
    } else {     /* the instances there are will do */
      gpuhal__log(cb->device->logger, GPUHAL_LOG_WARN, "command buffer: one more graph instance: %s",
                  gpuhal_status_message(st));
      gpuhal_status_free(st);
    }
  }
  if (!*out) GPUHAL__RETURN_IF_ERROR(gpuhal__graph_instance_idle(cb, count, out));
  if (!*out) *out = &cb->instances[cb->instance_next % count];
  cb->instance_next = (uint32_t)(*out - cb->instances + 1) % cb->instance_count;
  return NULL;
}

/* Rewrites the instance's late-bound kernel nodes whose arguments differ. */
static gpuhal_status_t gpuhal__graph_instance_patch(gpuhal_command_buffer_t* cb, gpuhal__graph_instance_t* inst) {
  uint32_t k;
  for (k = 0; k < cb->late_cmd_count; ++k) {
    gpuhal__cmd_t* cmd = &cb->cmds[cb->late_cmds[k]];
    CUDA_KERNEL_NODE_PARAMS p;
    if (!gpuhal__graph_cmd_differs(cb, cmd, inst->values)) continue;
    gpuhal__kernel_node_params(cb, cmd, &p);
    GPUHAL__CU_RETURN(cb->device->cu, cuGraphExecKernelNodeSetParams, (inst->exec, cmd->node, &p));
    gpuhal__graph_cmd_held(cb, cmd, inst->values); /* only once the driver took them */
  }
  return NULL;
}

/* Builds the commands from *c on into `graph`, up to the REGION_END that closes `region`
 * (0: the top level, up to the last command); *c ends past it. A region's body is built
 * the same way, into the body graph of its node, as soon as the node is added. */
static gpuhal_status_t gpuhal__graph_build_level(gpuhal_command_buffer_t* cb, CUgraph graph, uint32_t region,
                                                 uint32_t* c) {
  gpuhal__graph_builder_t b;
  gpuhal_status_t st;
  memset(&b, 0, sizeof(b));
  b.cb = cb;
  b.graph = graph;
  st = gpuhal__graph_make_conditions(cb, graph, region);
  while (!st && *c < cb->cmd_count) {
    gpuhal__cmd_t* cmd = &cb->cmds[(*c)++];
    if (cmd->type == GPUHAL__CMD_REGION_END) break;
    if (cmd->type == GPUHAL__CMD_BARRIER) {
      if (b.segment_count) b.barrier_pending = 1;
      continue;
    }
    if (b.barrier_pending) st = gpuhal__graph_close_segment(&b);
    if (!st) st = gpuhal__graph_add_node(&b, cmd);
    if (!st && cmd->type == GPUHAL__CMD_REGION_BEGIN) st = gpuhal__graph_build_level(cb, b.body, *c, c);
  }
  gpuhal__free(cb->device->allocator, b.segment);
  return st;
}

static gpuhal_status_t gpuhal__cb_build_graph(gpuhal_command_buffer_t* cb) {
  gpuhal_status_t st;
  uint32_t c = 0;
  GPUHAL__CU_RETURN(cb->device->cu, cuGraphCreate, (&cb->graph, 0));
  st = gpuhal__graph_build_level(cb, cb->graph, 0, &c);
  if (st || !cb->node_count) return st;
  if (!cb->late_cmd_count) return gpuhal__graph_instance_add(cb);
  /* With late-bound arguments the first instance is made at the first execute, with its
   * arguments (gpuhal__graph_instance_add); the graph holds these values until then. */
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(cb->device->allocator, cb->values_size ? cb->values_size : 1,
                                               "graph argument values", (void**)&cb->graph_values));
  memcpy(cb->graph_values, cb->values, cb->values_size);
  return NULL;
}

/* In the device's context: staging, graph, instantiation. */
static gpuhal_status_t gpuhal__cb_finish_graph(gpuhal_command_buffer_t* cb) {
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(cb->device, &scope));
  st = gpuhal__cb_upload_staging(cb);
  if (!st) {
    gpuhal__cb_bind_staging_args(cb);
    st = gpuhal__cb_build_graph(cb);
  }
  /* What the attempt made goes: a later try (a deferred graph's next execute) starts afresh. */
  if (st) gpuhal_status_free(gpuhal__cb_destroy_graph_current(cb));
  gpuhal__context_leave(cb->device, &scope);
  return st;
}
/* Resolves every late argument of the execute into cb->values. */
static gpuhal_status_t gpuhal__cb_resolve_graph_args(gpuhal_command_buffer_t* cb,
                                                     const gpuhal__execute_action_t* action) {
  uint32_t k;
  for (k = 0; k < cb->late_cmd_count; ++k) {
    int changed = 0;
    gpuhal_status_t st = gpuhal__cb_resolve_args(cb, action, &cb->cmds[cb->late_cmds[k]], &changed);
    if (st)
      return gpuhal_status_annotate(st, "command %u (%s) of a graph command buffer", cb->late_cmds[k],
                                    gpuhal__cmd_name(&cb->cmds[cb->late_cmds[k]]));
  }
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_command_buffer_native_graph(gpuhal_command_buffer_t* command_buffer,
                                                              void** out_cu_graph) {
  GPUHAL__CHECK_ARG(out_cu_graph != NULL, "out_cu_graph", "must not be NULL");
  *out_cu_graph = NULL;
  GPUHAL__CHECK_OBJECT(command_buffer, GPUHAL__MAGIC_COMMAND_BUFFER);
  if (!gpuhal__cb_is_graph(command_buffer))
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_command_buffer_native_graph: a STREAM command buffer has no graph");
  if (command_buffer->state != GPUHAL__CB_EXECUTABLE)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_command_buffer_native_graph: the graph exists once the command buffer has ended");
  if (gpuhal__atomic_load(&command_buffer->graph_deferred))
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_command_buffer_native_graph: a command buffer with collectives builds its graph "
                              "at its first execute");
  *out_cu_graph = (void*)command_buffer->graph;
  return NULL;
}

/* GRAPH's end: the graph is built now, or, with collectives, by the first execute on the
 * worker (see has_native). */
static gpuhal_status_t gpuhal__cb_graph_end(gpuhal_command_buffer_t* cb) {
  if (!cb->has_native) return gpuhal__cb_finish_graph(cb);
  cb->graph_deferred = 1;
  return NULL;
}

/* GRAPH's execute: one cuGraphLaunch after the late-bound nodes are patched. */
static gpuhal_status_t gpuhal__cb_graph_issue(gpuhal_command_buffer_t* cb, const gpuhal__execute_action_t* action,
                                              gpuhal_device_t* device, CUstream stream) {
  gpuhal__graph_instance_t* inst = NULL;
  GPUHAL__UNUSED(device);
  if (gpuhal__atomic_load(&cb->graph_deferred)) { /* only ever on the worker: see has_native */
    GPUHAL__RETURN_IF_ERROR(gpuhal__cb_finish_graph(cb));
    gpuhal__atomic_store(&cb->graph_deferred, 0);
  }
  if (!cb->node_count) return NULL; /* nothing was recorded */
  if (cb->native_checks) {
    uint32_t i;
    for (i = 0; i < cb->cmd_count; ++i)
      if (cb->cmds[i].type == GPUHAL__CMD_NATIVE && cb->cmds[i].native_ops->check)
        GPUHAL__RETURN_IF_ERROR(cb->cmds[i].native_ops->check(cb->cmds[i].native_user));
  }
  if (!cb->late_cmd_count) return GPUHAL__CU(cb->device->cu, cuGraphLaunch, (cb->exec, stream));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve_graph_args(cb, action));
  GPUHAL__RETURN_IF_ERROR(gpuhal__graph_instance_pick(cb, &inst));
  GPUHAL__RETURN_IF_ERROR(gpuhal__graph_instance_patch(cb, inst));
  GPUHAL__CU_RETURN(cb->device->cu, cuGraphLaunch, (inst->exec, stream));
  if (!inst->done) return NULL;
  GPUHAL__CU_RETURN(cb->device->cu, cuEventRecord, (inst->done, stream));
  inst->launched = 1;
  return NULL;
}

GPUHAL__PRIVATE const gpuhal__cb_backend_t* gpuhal__cb_graph_backend(void) {
  static const gpuhal__cb_backend_t backend = {"GRAPH", gpuhal__cb_graph_end, gpuhal__cb_destroy_graph,
                                               gpuhal__cb_graph_issue};
  return &backend;
}
