/* gpuhal - command buffers: launch attributes of dispatches (thread-block clusters,
 * cooperative and programmatic launches, priority; gpuhal_dispatch_options_t). Their checks
 * when a dispatch is recorded, and how each back end applies them: STREAM launches with
 * cuLaunchKernelEx, GRAPH sets kernel node attributes and programmatic edges. Part of the
 * implementation only (declared in command_buffer.h). */
#include "command_buffer.h"
#include "symbols.h"
#include "status.h"

GPUHAL__PRIVATE int gpuhal__cmd_has_launch_attrs(const gpuhal__cmd_t* cmd) {
  return cmd->launch.cluster.x || cmd->launch.flags || cmd->launch.priority;
}

/* UNAVAILABLE naming the driver entry an option needs, when it is missing. */
static gpuhal_status_t gpuhal__launch_need(const gpuhal_device_t* device, int present, const char* entry,
                                           const char* what) {
  if (present) return NULL;
  return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                            "gpuhal_cmd_dispatch_ex: argument '%s' needs %s, which the loaded CUDA driver (version "
                            "%d) does not have",
                            what, entry, device->info.driver_version);
}

static gpuhal_status_t gpuhal__launch_check_cluster(gpuhal_command_buffer_t* cb, const gpuhal_kernel_t* kernel,
                                                    const uint32_t grid[3], const uint32_t block[3],
                                                    uint32_t shared_bytes, const gpuhal_dispatch_options_t* options,
                                                    gpuhal_dispatch_options_t* out) {
  static const char* const axis[3] = {"x", "y", "z"};
  gpuhal_device_t* device = cb->device;
  const gpuhal__cuda_symbols_t* cu = device->cu;
  gpuhal__context_scope_t scope;
  CUlaunchConfig config;
  gpuhal_status_t st;
  uint32_t c[3];
  uint64_t size;
  int i, max = 0;
  c[0] = options->cluster.x ? options->cluster.x : 1;
  c[1] = options->cluster.y ? options->cluster.y : 1;
  c[2] = options->cluster.z ? options->cluster.z : 1;
  if (!device->info.cluster_launch)
    return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                              "gpuhal_cmd_dispatch_ex: argument 'options.cluster' needs a device with thread-block "
                              "clusters (compute capability 9.0 or newer); device %d is %d.%d",
                              device->ordinal, device->info.compute_capability_major,
                              device->info.compute_capability_minor);
  GPUHAL__RETURN_IF_ERROR(gpuhal__launch_need(device, cu->cuOccupancyMaxPotentialClusterSize != NULL,
                                              "cuOccupancyMaxPotentialClusterSize", "options.cluster"));
  for (i = 0; i < 3; ++i)
    if (grid[i] % c[i])
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "gpuhal_cmd_dispatch_ex: argument 'options.cluster.%s' is %u; it must divide grid.%s "
                                "(%u)",
                                axis[i], c[i], axis[i], grid[i]);
  if (options->flags & GPUHAL_DISPATCH_COOPERATIVE)
    return gpuhal_status_make(GPUHAL_STATUS_UNIMPLEMENTED,
                              "gpuhal_cmd_dispatch_ex: argument 'options' asks for a cooperative launch with a "
                              "cluster; gpuhal does not launch cooperative clusters");
  memset(&config, 0, sizeof(config));
  config.gridDimX = grid[0], config.gridDimY = grid[1], config.gridDimZ = grid[2];
  config.blockDimX = block[0], config.blockDimY = block[1], config.blockDimZ = block[2];
  config.sharedMemBytes = shared_bytes;
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  st = GPUHAL__CU(cu, cuOccupancyMaxPotentialClusterSize, (&max, kernel->function, &config));
  gpuhal__context_leave(device, &scope);
  GPUHAL__RETURN_IF_ERROR(st);
  size = (uint64_t)c[0] * c[1] * c[2];
  if (size > (uint64_t)(max > 0 ? max : 0))
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_cmd_dispatch_ex: argument 'options.cluster' (%ux%ux%u) has %llu blocks; kernel "
                              "'%s' with %u threads per block and %u bytes of dynamic shared memory allows at most %d "
                              "per cluster on this device",
                              c[0], c[1], c[2], (unsigned long long)size, kernel->name, block[0] * block[1] * block[2],
                              shared_bytes, max);
  out->cluster.x = c[0], out->cluster.y = c[1], out->cluster.z = c[2];
  return NULL;
}

static gpuhal_status_t gpuhal__launch_check_cooperative(gpuhal_command_buffer_t* cb, const gpuhal_kernel_t* kernel,
                                                        const uint32_t grid[3], const uint32_t block[3],
                                                        uint32_t shared_bytes) {
  gpuhal_device_t* device = cb->device;
  const gpuhal__cuda_symbols_t* cu = device->cu;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  uint32_t threads = block[0] * block[1] * block[2];
  uint64_t blocks = (uint64_t)grid[0] * grid[1] * grid[2], resident;
  int per_sm = 0;
  if (!device->info.cooperative_launch)
    return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                              "gpuhal_cmd_dispatch_ex: argument 'options.flags' asks for a cooperative launch, which "
                              "device %d (%s) does not support",
                              device->ordinal, device->info.name);
  GPUHAL__RETURN_IF_ERROR(gpuhal__launch_need(device, cu->cuOccupancyMaxActiveBlocksPerMultiprocessor != NULL,
                                              "cuOccupancyMaxActiveBlocksPerMultiprocessor", "options.flags"));
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  st = GPUHAL__CU(cu, cuOccupancyMaxActiveBlocksPerMultiprocessor,
                  (&per_sm, kernel->function, (int)threads, (size_t)shared_bytes));
  gpuhal__context_leave(device, &scope);
  GPUHAL__RETURN_IF_ERROR(st);
  resident = (uint64_t)(per_sm > 0 ? per_sm : 0) * (uint64_t)device->info.sm_count;
  if (blocks > resident)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_cmd_dispatch_ex: argument 'grid' has %llu blocks; a cooperative launch of kernel "
                              "'%s' needs them all resident at once, and at most %llu can be on this device (%d per SM "
                              "with %u threads per block and %u bytes of dynamic shared memory, x %d SMs)",
                              (unsigned long long)blocks, kernel->name, (unsigned long long)resident, per_sm, threads,
                              shared_bytes, device->info.sm_count);
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_launch_check(gpuhal_command_buffer_t* cb, const gpuhal_kernel_t* kernel,
                                                        const uint32_t grid[3], const uint32_t block[3],
                                                        uint32_t shared_bytes, const gpuhal_dispatch_options_t* options,
                                                        gpuhal_dispatch_options_t* out) {
  gpuhal_device_t* device = cb->device;
  const gpuhal__cuda_symbols_t* cu = device->cu;
  memset(out, 0, sizeof(*out));
  if (!options) return NULL;
  if ((options->flags & ~(uint32_t)(GPUHAL_DISPATCH_COOPERATIVE | GPUHAL_DISPATCH_PROGRAMMATIC)) != 0)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_dispatch_ex: argument 'options.flags' has unknown bits (allowed: "
                              "GPUHAL_DISPATCH_COOPERATIVE, GPUHAL_DISPATCH_PROGRAMMATIC)");
  if (options->cluster.x || options->cluster.y || options->cluster.z || options->flags || options->priority) {
    /* every attribute but PROGRAMMATIC (which orders fully without them) needs both */
    const char* what = options->priority ? "options.priority" : "options";
    GPUHAL__RETURN_IF_ERROR(gpuhal__launch_need(device, cu->cuLaunchKernelEx != NULL, "cuLaunchKernelEx", what));
    GPUHAL__RETURN_IF_ERROR(
        gpuhal__launch_need(device, cu->cuGraphKernelNodeSetAttribute != NULL, "cuGraphKernelNodeSetAttribute", what));
  }
  if (options->cluster.x || options->cluster.y || options->cluster.z)
    GPUHAL__RETURN_IF_ERROR(gpuhal__launch_check_cluster(cb, kernel, grid, block, shared_bytes, options, out));
  if (options->flags & GPUHAL_DISPATCH_COOPERATIVE)
    GPUHAL__RETURN_IF_ERROR(gpuhal__launch_check_cooperative(cb, kernel, grid, block, shared_bytes));
  if (options->priority &&
      (device->priority_least == device->priority_greatest || options->priority > device->priority_least ||
       options->priority < device->priority_greatest))
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_cmd_dispatch_ex: argument 'options.priority' is %d; device %d takes %d (least "
                              "urgent) to %d (most urgent), or 0 for the default",
                              (int)options->priority, device->ordinal, device->priority_least,
                              device->priority_greatest);
  out->flags = options->flags;
  out->priority = options->priority;
  return NULL;
}

/* The attributes of a dispatch but PROGRAMMATIC (which depends on where it runs). */
static unsigned gpuhal__launch_attrs(const gpuhal__cmd_t* cmd, CUlaunchAttribute attrs[3]) {
  unsigned n = 0;
  memset(attrs, 0, 3 * sizeof(CUlaunchAttribute));
  if (cmd->launch.cluster.x) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = cmd->launch.cluster.x;
    attrs[n].value.clusterDim.y = cmd->launch.cluster.y;
    attrs[n].value.clusterDim.z = cmd->launch.cluster.z;
    n++;
  }
  if (cmd->launch.flags & GPUHAL_DISPATCH_COOPERATIVE) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[n].value.cooperative = 1;
    n++;
  }
  if (cmd->launch.priority) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    attrs[n].value.priority = cmd->launch.priority;
    n++;
  }
  return n;
}

/* Programmatic dependent launch needs compute capability 9.0. */
static int gpuhal__device_has_pdl(const gpuhal_device_t* device) { return device->info.compute_capability_major >= 9; }

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_launch_ex(gpuhal_command_buffer_t* cb, uint32_t index, CUstream stream) {
  const gpuhal__cuda_symbols_t* cu = cb->device->cu;
  const gpuhal__cmd_t* cmd = &cb->cmds[index];
  CUlaunchAttribute attrs[4];
  CUlaunchConfig config;
  uint32_t before = index;
  unsigned n = gpuhal__launch_attrs(cmd, attrs);
  /* A stream runs in order anyway: the barriers between two dispatches add nothing. */
  while (before > 0 && cb->cmds[before - 1].type == GPUHAL__CMD_BARRIER) before--;
  if ((cmd->launch.flags & GPUHAL_DISPATCH_PROGRAMMATIC) && before > 0 &&
      cb->cmds[before - 1].type == GPUHAL__CMD_DISPATCH && gpuhal__device_has_pdl(cb->device) && cu->cuLaunchKernelEx) {
    memset(&attrs[n], 0, sizeof(attrs[n]));
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n].value.programmaticStreamSerializationAllowed = 1;
    n++;
  }
  if (n == 0) /* PROGRAMMATIC where it does not apply */
    return GPUHAL__CU(
        cu, cuLaunchKernel,
        (cmd->function, cmd->grid[0], cmd->grid[1], cmd->grid[2], cmd->block[0], cmd->block[1], cmd->block[2],
         cmd->shared_bytes, stream, cmd->arg_count ? cb->param_ptrs + cmd->arg_first : NULL, NULL));
  memset(&config, 0, sizeof(config));
  config.gridDimX = cmd->grid[0], config.gridDimY = cmd->grid[1], config.gridDimZ = cmd->grid[2];
  config.blockDimX = cmd->block[0], config.blockDimY = cmd->block[1], config.blockDimZ = cmd->block[2];
  config.sharedMemBytes = cmd->shared_bytes;
  config.hStream = stream;
  config.attrs = attrs;
  config.numAttrs = n;
  return GPUHAL__CU(cu, cuLaunchKernelEx,
                    (&config, cmd->function, cmd->arg_count ? cb->param_ptrs + cmd->arg_first : NULL, NULL));
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__graph_set_launch_attrs(gpuhal_command_buffer_t* cb, const gpuhal__cmd_t* cmd) {
  const gpuhal__cuda_symbols_t* cu = cb->device->cu;
  CUlaunchAttribute attrs[3];
  unsigned i, n = gpuhal__launch_attrs(cmd, attrs);
  for (i = 0; i < n; ++i)
    GPUHAL__CU_RETURN(cu, cuGraphKernelNodeSetAttribute, (cmd->node, attrs[i].id, &attrs[i].value));
  return NULL;
}

GPUHAL__PRIVATE int gpuhal__graph_is_programmatic(const gpuhal_command_buffer_t* cb,
                                                  const gpuhal__cmd_t* dependency_cmd, const gpuhal__cmd_t* cmd) {
  return (cmd->launch.flags & GPUHAL_DISPATCH_PROGRAMMATIC) && dependency_cmd &&
         dependency_cmd->type == GPUHAL__CMD_DISPATCH && gpuhal__device_has_pdl(cb->device) &&
         cb->device->cu->cuGraphAddDependencies;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__graph_add_programmatic_edge(gpuhal_command_buffer_t* cb, CUgraph graph,
                                                                    CUgraphNode from, CUgraphNode to) {
  CUgraphEdgeData edge;
  memset(&edge, 0, sizeof(edge));
  edge.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
  edge.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
  GPUHAL__CU_RETURN(cb->device->cu, cuGraphAddDependencies, (graph, &from, &to, &edge, 1));
  return NULL;
}

/* Node priorities count only in a graph instantiated to use them. */
#define GPUHAL__GRAPH_INSTANTIATE_USE_NODE_PRIORITY 8ull /* CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY */

GPUHAL__PRIVATE unsigned long long gpuhal__graph_instantiate_flags(const gpuhal_command_buffer_t* cb) {
  uint32_t c;
  for (c = 0; c < cb->cmd_count; ++c)
    if (cb->cmds[c].type == GPUHAL__CMD_DISPATCH && cb->cmds[c].launch.priority)
      return GPUHAL__GRAPH_INSTANTIATE_USE_NODE_PRIORITY;
  return 0;
}
