/* channel: NCCL communicators and the collectives recorded into command buffers
 * (channel.h). */
#include "channel.h"
#include "symbols.h"
#include "status.h"
#include "memory.h"

#define GPUHAL__MAGIC_CHANNEL 0x4C4E4843u /* "CHNL" */
#define GPUHAL__CHANNEL_MAX_LOCAL 64

struct gpuhal_channel_s {
  gpuhal__object_t header;
  gpuhal_device_t* device; /* retained */
  ncclComm_t comm;
  int rank;
  int size;
};

GPUHAL_API uint32_t gpuhal_element_type_size(gpuhal_element_type_t type) {
  switch (type) {
    case GPUHAL_ELEMENT_INT8:
    case GPUHAL_ELEMENT_UINT8: return 1;
    case GPUHAL_ELEMENT_FLOAT16:
    case GPUHAL_ELEMENT_BFLOAT16: return 2;
    case GPUHAL_ELEMENT_INT32:
    case GPUHAL_ELEMENT_UINT32:
    case GPUHAL_ELEMENT_FLOAT32: return 4;
    case GPUHAL_ELEMENT_INT64:
    case GPUHAL_ELEMENT_UINT64:
    case GPUHAL_ELEMENT_FLOAT64: return 8;
    default: return 0;
  }
}

static ncclDataType_t gpuhal__nccl_type(gpuhal_element_type_t type) {
  switch (type) {
    case GPUHAL_ELEMENT_INT8: return ncclInt8;
    case GPUHAL_ELEMENT_UINT8: return ncclUint8;
    case GPUHAL_ELEMENT_INT32: return ncclInt32;
    case GPUHAL_ELEMENT_UINT32: return ncclUint32;
    case GPUHAL_ELEMENT_INT64: return ncclInt64;
    case GPUHAL_ELEMENT_UINT64: return ncclUint64;
    case GPUHAL_ELEMENT_FLOAT16: return ncclFloat16;
    case GPUHAL_ELEMENT_FLOAT64: return ncclFloat64;
    case GPUHAL_ELEMENT_BFLOAT16: return ncclBfloat16;
    default: return ncclFloat32;
  }
}

static ncclRedOp_t gpuhal__nccl_op(gpuhal_reduction_t op) {
  switch (op) {
    case GPUHAL_REDUCTION_PROD: return ncclProd;
    case GPUHAL_REDUCTION_MIN: return ncclMin;
    case GPUHAL_REDUCTION_MAX: return ncclMax;
    case GPUHAL_REDUCTION_AVG: return ncclAvg;
    default: return ncclSum;
  }
}

static const char* gpuhal__collective_name(gpuhal_collective_kind_t kind) {
  static const char* const names[] = {"all-reduce", "all-gather", "reduce-scatter", "broadcast", "reduce",
                                      "send",       "recv"};
  return (unsigned)kind < GPUHAL__ARRAY_SIZE(names) ? names[kind] : "unknown collective";
}

/* UNAVAILABLE unless NCCL is loaded (never with GPUHAL_NO_NCCL). */
static gpuhal_status_t gpuhal__channel_check_nccl(gpuhal_driver_t* driver, const char* func) {
  if (gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_NCCL)) return NULL;
#if defined(GPUHAL_NO_NCCL)
  return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "%s: gpuhal was built with GPUHAL_NO_NCCL: no collectives",
                            func);
#else
  return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                            "%s: NCCL is not loaded: install libnccl.so.2 or point GPUHAL_NCCL_LIBRARY (or "
                            "gpuhal_driver_options_t.nccl_library) at it",
                            func);
#endif
}

/* NCCL sets the current device itself; on a worker, put the device's context back if it
 * moved (the worker's context must stay current for its whole life). */
static gpuhal_status_t gpuhal__channel_restore_worker_context(gpuhal_device_t* device) {
  CUcontext current = NULL;
  GPUHAL__CU_RETURN(device->cu, cuCtxGetCurrent, (&current));
  if (current != device->context) GPUHAL__CU_RETURN(device->cu, cuCtxSetCurrent, (device->context));
  return NULL;
}

static const gpuhal__nccl_symbols_t* gpuhal__channel_nccl(gpuhal_device_t* device) { return &device->driver->nccl; }

/* ---- creation ---- */

static gpuhal_status_t gpuhal__channel_new(gpuhal_device_t* device, ncclComm_t comm, int rank, int size,
                                           gpuhal_channel_t** out) {
  gpuhal_channel_t* ch = NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_alloc(&device->driver->objects, GPUHAL__MAGIC_CHANNEL, sizeof(*ch),
                                               "gpuhal_channel_t", (void**)&ch));
  gpuhal__object_init(&ch->header, GPUHAL__MAGIC_CHANNEL);
  gpuhal__device_retain_ref(device);
  ch->device = device;
  ch->comm = comm;
  ch->rank = rank;
  ch->size = size;
  *out = ch;
  return NULL;
}

typedef struct gpuhal__comm_destroy_s {
  gpuhal_device_t* device;
  ncclComm_t comm;
} gpuhal__comm_destroy_t;

static gpuhal_status_t gpuhal__comm_destroy_on_worker(void* arg) {
  gpuhal__comm_destroy_t* d = (gpuhal__comm_destroy_t*)arg;
  gpuhal_status_t st = GPUHAL__NCCL(gpuhal__channel_nccl(d->device), ncclCommDestroy, (d->comm));
  gpuhal_status_t st2 = gpuhal__channel_restore_worker_context(d->device);
  st = gpuhal__status_first(st, st2);
  return st;
}

/* Destroys a communicator on its device's worker, logging a failure. */
static void gpuhal__comm_destroy(gpuhal_device_t* device, ncclComm_t comm) {
  gpuhal__comm_destroy_t d;
  gpuhal_status_t st;
  if (!comm) return;
  d.device = device;
  d.comm = comm;
  st = gpuhal__worker_call(device, gpuhal__comm_destroy_on_worker, &d);
  if (st) {
    gpuhal__log(device->logger, GPUHAL_LOG_ERROR, "device %d: destroying an NCCL communicator: %s", device->ordinal,
                gpuhal_status_message(st));
    gpuhal_status_free(st);
  }
}

typedef struct gpuhal__init_all_s {
  gpuhal_device_t* device; /* whose worker runs it */
  ncclComm_t* comms;
  int count;
  const int* ordinals;
} gpuhal__init_all_t;

static gpuhal_status_t gpuhal__init_all_on_worker(void* arg) {
  gpuhal__init_all_t* a = (gpuhal__init_all_t*)arg;
  gpuhal_status_t st =
      GPUHAL__NCCL(gpuhal__channel_nccl(a->device), ncclCommInitAll, (a->comms, a->count, a->ordinals));
  gpuhal_status_t st2 = gpuhal__channel_restore_worker_context(a->device);
  st = gpuhal__status_first(st, st2);
  return st;
}

static gpuhal_status_t gpuhal__channel_check_local_devices(gpuhal_driver_t* driver, uint32_t count,
                                                           gpuhal_device_t* const* devices, int* ordinals) {
  uint32_t i, j;
  for (i = 0; i < count; ++i) {
    gpuhal_status_t bad =
        gpuhal__object_check(devices[i], GPUHAL__MAGIC_DEVICE, "gpuhal_channel_create_local", "devices[i]");
    if (bad) return gpuhal_status_annotate(bad, "at index %u", i);
    if (devices[i]->driver != driver)
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "gpuhal_channel_create_local: argument 'devices[%u]' is a device of another driver", i);
    for (j = 0; j < i; ++j)
      if (devices[j]->ordinal == devices[i]->ordinal)
        return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                  "gpuhal_channel_create_local: argument 'devices' names device %d twice (entries %u "
                                  "and %u): each rank needs its own GPU",
                                  devices[i]->ordinal, j, i);
    ordinals[i] = devices[i]->ordinal;
  }
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_channel_create_local(gpuhal_driver_t* driver, uint32_t device_count,
                                                       gpuhal_device_t* const* devices,
                                                       gpuhal_channel_t** out_channels) {
  int ordinals[GPUHAL__CHANNEL_MAX_LOCAL];
  ncclComm_t comms[GPUHAL__CHANNEL_MAX_LOCAL];
  gpuhal__init_all_t init;
  gpuhal_status_t st = NULL;
  uint32_t i;
  GPUHAL__CHECK_ARG(out_channels != NULL, "out_channels", "must not be NULL");
  GPUHAL__CHECK_OBJECT(driver, GPUHAL__MAGIC_DRIVER);
  GPUHAL__CHECK_ARG(device_count > 0, "device_count", "must be > 0");
  GPUHAL__CHECK_RANGE(device_count <= GPUHAL__CHANNEL_MAX_LOCAL, "device_count", "must be at most 64");
  GPUHAL__CHECK_ARG(devices != NULL, "devices", "must not be NULL");
  for (i = 0; i < device_count; ++i) out_channels[i] = NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__channel_check_local_devices(driver, device_count, devices, ordinals));
  GPUHAL__RETURN_IF_ERROR(gpuhal__channel_check_nccl(driver, __func__));
  memset(comms, 0, sizeof(comms));
  init.device = devices[0];
  init.comms = comms;
  init.count = (int)device_count;
  init.ordinals = ordinals;
  GPUHAL__RETURN_IF_ERROR(gpuhal_status_annotate(gpuhal__worker_call(devices[0], gpuhal__init_all_on_worker, &init),
                                                 "gpuhal_channel_create_local (%u devices)", device_count));
  for (i = 0; i < device_count && !st; ++i)
    st = gpuhal__channel_new(devices[i], comms[i], (int)i, (int)device_count, &out_channels[i]);
  if (st) {
    for (i = 0; i < device_count; ++i) {
      if (out_channels[i]) {
        gpuhal_channel_release(out_channels[i]);
        out_channels[i] = NULL;
      } else {
        gpuhal__comm_destroy(devices[i], comms[i]);
      }
    }
    return st;
  }
  gpuhal__log(&driver->logger, GPUHAL_LOG_INFO, "NCCL channels for %u local devices created", device_count);
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_channel_id_create(gpuhal_driver_t* driver, gpuhal_channel_id_t* out_id) {
  ncclUniqueId id;
  CUcontext before = NULL, after = NULL;
  gpuhal_status_t st;
  GPUHAL__CHECK_ARG(out_id != NULL, "out_id", "must not be NULL");
  memset(out_id, 0, sizeof(*out_id));
  GPUHAL__CHECK_OBJECT(driver, GPUHAL__MAGIC_DRIVER);
  GPUHAL__RETURN_IF_ERROR(gpuhal__channel_check_nccl(driver, __func__));
  /* No device is involved; should NCCL touch the current device, put it back. */
  GPUHAL__CU_RETURN(&driver->cu, cuCtxGetCurrent, (&before));
  memset(&id, 0, sizeof(id));
  st = GPUHAL__NCCL(&driver->nccl, ncclGetUniqueId, (&id));
  if (driver->cu.cuCtxGetCurrent(&after) == CUDA_SUCCESS && after != before) driver->cu.cuCtxSetCurrent(before);
  if (st) return gpuhal_status_annotate(st, "gpuhal_channel_id_create");
  memcpy(out_id->bytes, &id, GPUHAL__MIN(sizeof(id), sizeof(out_id->bytes)));
  return NULL;
}

typedef struct gpuhal__init_rank_s {
  gpuhal_device_t* device;
  ncclComm_t comm;
  ncclUniqueId id;
  int rank, size;
} gpuhal__init_rank_t;

static gpuhal_status_t gpuhal__init_rank_on_worker(void* arg) {
  gpuhal__init_rank_t* a = (gpuhal__init_rank_t*)arg;
  gpuhal_status_t st =
      GPUHAL__NCCL(gpuhal__channel_nccl(a->device), ncclCommInitRank, (&a->comm, a->size, a->id, a->rank));
  gpuhal_status_t st2 = gpuhal__channel_restore_worker_context(a->device);
  st = gpuhal__status_first(st, st2);
  return st;
}

GPUHAL_API gpuhal_status_t gpuhal_channel_create_rank(gpuhal_device_t* device, const gpuhal_channel_id_t* id, int rank,
                                                      int size, gpuhal_channel_t** out_channel) {
  gpuhal__init_rank_t init;
  gpuhal_status_t st;
  GPUHAL__CHECK_ARG(out_channel != NULL, "out_channel", "must not be NULL");
  *out_channel = NULL;
  GPUHAL__CHECK_OBJECT(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG(id != NULL, "id", "must not be NULL");
  GPUHAL__CHECK_ARG(size > 0, "size", "must be > 0");
  if (rank < 0 || rank >= size)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_channel_create_rank: argument 'rank' is %d, must be in [0, %d)", rank, size);
  GPUHAL__RETURN_IF_ERROR(gpuhal__channel_check_nccl(device->driver, __func__));
  memset(&init, 0, sizeof(init));
  init.device = device;
  memcpy(&init.id, id->bytes, GPUHAL__MIN(sizeof(init.id), sizeof(id->bytes)));
  init.rank = rank;
  init.size = size;
  GPUHAL__RETURN_IF_ERROR(gpuhal_status_annotate(gpuhal__worker_call(device, gpuhal__init_rank_on_worker, &init),
                                                 "gpuhal_channel_create_rank (rank %d of %d, device %d)", rank, size,
                                                 device->ordinal));
  st = gpuhal__channel_new(device, init.comm, rank, size, out_channel);
  if (st) gpuhal__comm_destroy(device, init.comm);
  return st;
}

GPUHAL_API void gpuhal_channel_retain(gpuhal_channel_t* channel) {
  if (gpuhal__object_is_held(channel, GPUHAL__MAGIC_CHANNEL)) gpuhal__object_user_retain(&channel->header);
}

/* gpuhal's own references (recorded collectives). */
static void gpuhal__channel_release_ref(gpuhal_channel_t* channel) {
  gpuhal_device_t* device;
  if (!gpuhal__object_release(&channel->header)) return;
  device = channel->device;
  gpuhal__comm_destroy(device, channel->comm);
  channel->comm = NULL;
  gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_CHANNEL, channel);
  gpuhal__device_release_ref(device);
}

GPUHAL_API void gpuhal_channel_release(gpuhal_channel_t* channel) {
  gpuhal_driver_t* driver;
  uint64_t settle; /* gpuhal__driver_settle_begin: 0, or the settle begun */
  if (!gpuhal__object_is_live(channel, GPUHAL__MAGIC_CHANNEL)) return;
  if (!gpuhal__object_user_release(&channel->header)) {
    gpuhal__log_extra_release(channel->device->logger, __func__, "a channel");
    return;
  }
  driver = channel->device->driver;
  settle = gpuhal__driver_settle_begin(driver);
  gpuhal__channel_release_ref(channel);
  gpuhal__driver_settle_end(driver, settle);
}

GPUHAL_API int gpuhal_channel_rank(gpuhal_channel_t* channel) {
  if (!gpuhal__object_is_held(channel, GPUHAL__MAGIC_CHANNEL)) return -1;
  return channel->rank;
}
GPUHAL_API int gpuhal_channel_size(gpuhal_channel_t* channel) {
  if (!gpuhal__object_is_held(channel, GPUHAL__MAGIC_CHANNEL)) return -1;
  return channel->size;
}
GPUHAL_API gpuhal_device_t* gpuhal_channel_device(gpuhal_channel_t* channel) {
  if (!gpuhal__object_is_held(channel, GPUHAL__MAGIC_CHANNEL)) return NULL;
  return channel->device;
}

/* ---- recording ---- */

/* A recorded collective: what the NATIVE command of the command buffer holds. */
typedef struct gpuhal__collective_cmd_s {
  gpuhal_channel_t* channel; /* retained */
  gpuhal_collective_kind_t kind;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root_or_peer;
  size_t count;
  gpuhal_buffer_t* send; /* retained; NULL when unused */
  uint64_t send_offset;
  gpuhal_buffer_t* recv; /* retained; NULL when unused */
  uint64_t recv_offset;
  uint64_t bytes; /* on a one-rank channel: what the copy moves */
  /* A one-rank copy of a REUSABLE STREAM command buffer, as a graph of one memcpy node
   * launched at every execute: a graph launch costs the host far less than a stream copy's
   * enqueue (tests/bench/RESULTS.md). Built when the command is recorded, on the worker (as
   * GRAPH command buffers are), if both operands have their addresses then and differ; its
   * operands are fixed buffers, and a buffer's address never changes once it has one. NULL:
   * stream copies (a copy larger than one graph copy piece, whose GPU time hides their
   * cost, a queue_alloca buffer not issued yet, or a build that failed). */
  CUgraphExec copy_exec;
} gpuhal__collective_cmd_t;

/* The device address of a buffer operand now; FAILED_PRECONDITION without one. */
static gpuhal_status_t gpuhal__collective_address(gpuhal_buffer_t* buffer, uint64_t offset, const char* what,
                                                  void** out) {
  uint64_t base;
  *out = NULL;
  if (!buffer) return NULL;
  base = gpuhal__buffer_address(buffer);
  if (!base && gpuhal__atomic_load(&buffer->state) == (int32_t)GPUHAL__BUFFER_FREED)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "the %s buffer of a collective (%llu bytes, from gpuhal_queue_alloca) was deallocated "
                              "(gpuhal_queue_dealloca) before this execute: a command buffer that names a transient "
                              "buffer cannot run after its dealloca",
                              what, (unsigned long long)buffer->size);
  if (!base)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "the %s buffer of a collective has no device address: order its gpuhal_queue_alloca "
                              "before the command buffer is built (GRAPH) or executed (STREAM)",
                              what);
  *out = (void*)(uintptr_t)(base + offset);
  return NULL;
}

static gpuhal_status_t gpuhal__collective_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  gpuhal__collective_cmd_t* c = (gpuhal__collective_cmd_t*)user;
  const gpuhal__nccl_symbols_t* nccl = gpuhal__channel_nccl(device);
  ncclComm_t comm = c->channel->comm;
  void* send = NULL;
  void* recv = NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__collective_address(c->send, c->send_offset, "send", &send));
  GPUHAL__RETURN_IF_ERROR(gpuhal__collective_address(c->recv, c->recv_offset, "recv", &recv));
  switch (c->kind) {
    case GPUHAL_COLLECTIVE_ALL_REDUCE:
      return GPUHAL__NCCL(nccl, ncclAllReduce, (send, recv, c->count, c->type, c->op, comm, stream));
    case GPUHAL_COLLECTIVE_ALL_GATHER:
      return GPUHAL__NCCL(nccl, ncclAllGather, (send, recv, c->count, c->type, comm, stream));
    case GPUHAL_COLLECTIVE_REDUCE_SCATTER:
      return GPUHAL__NCCL(nccl, ncclReduceScatter, (send, recv, c->count, c->type, c->op, comm, stream));
    case GPUHAL_COLLECTIVE_BROADCAST:
      return GPUHAL__NCCL(nccl, ncclBroadcast,
                          (send ? send : recv, recv, c->count, c->type, c->root_or_peer, comm, stream));
    case GPUHAL_COLLECTIVE_REDUCE:
      return GPUHAL__NCCL(nccl, ncclReduce,
                          (send, recv ? recv : send, c->count, c->type, c->op, c->root_or_peer, comm, stream));
    case GPUHAL_COLLECTIVE_SEND:
      return GPUHAL__NCCL(nccl, ncclSend, (send, c->count, c->type, c->root_or_peer, comm, stream));
    default: return GPUHAL__NCCL(nccl, ncclRecv, (recv, c->count, c->type, c->root_or_peer, comm, stream));
  }
}

typedef struct gpuhal__collective_copy_build_s {
  gpuhal__collective_cmd_t* c;
  CUdeviceptr dst, src;
} gpuhal__collective_copy_build_t;

/* On the worker: the copy's graph executable. */
static gpuhal_status_t gpuhal__collective_copy_build_on_worker(void* arg) {
  gpuhal__collective_copy_build_t* b = (gpuhal__collective_copy_build_t*)arg;
  gpuhal_device_t* device = b->c->channel->device;
  const gpuhal__cuda_symbols_t* cu = device->cu;
  CUgraph graph = NULL;
  CUgraphNode node;
  CUDA_MEMCPY3D m;
  gpuhal_status_t st;
  gpuhal__memcpy_params(b->dst, b->src, b->c->bytes, &m);
  st = GPUHAL__CU(cu, cuGraphCreate, (&graph, 0));
  if (!st) st = GPUHAL__CU(cu, cuGraphAddMemcpyNode, (&node, graph, NULL, 0, &m, device->context));
  if (!st) st = gpuhal__device_graph_instantiate(device, &b->c->copy_exec, graph, 0);
  if (st) b->c->copy_exec = NULL;
  if (graph) cu->cuGraphDestroy(graph); /* the executable holds its own copy */
  return st;
}

/* Builds the copy's graph of a one-rank collective of a REUSABLE STREAM command buffer, when
 * it copies at all and both operands have their addresses. A build that fails leaves the
 * stream copies, which do the same work: it is logged, not returned. */
static void gpuhal__collective_copy_prepare(gpuhal__collective_cmd_t* c) {
  gpuhal_device_t* device = c->channel->device;
  gpuhal__collective_copy_build_t b;
  gpuhal_status_t st;
  b.c = c;
  b.src = c->send ? gpuhal__buffer_address(c->send) : 0;
  b.dst = c->recv ? gpuhal__buffer_address(c->recv) : 0;
  if ((c->send && !b.src) || (c->recv && !b.dst)) return; /* a queue_alloca buffer not issued yet */
  if (b.src) b.src += c->send_offset;
  if (b.dst) b.dst += c->recv_offset;
  if (!b.src) b.src = b.dst; /* as gpuhal__collective_one_rank_issue pairs them */
  if (!b.dst) b.dst = b.src;
  if (b.src == b.dst) return; /* in place: nothing to copy */
  st = gpuhal__worker_call(device, gpuhal__collective_copy_build_on_worker, &b);
  if (st) {
    gpuhal__log(device->logger, GPUHAL_LOG_WARN,
                "a one-rank collective's copy graph: %s (its executes use stream copies)", gpuhal_status_message(st));
    gpuhal_status_free(st);
  }
}

/* A collective of a one-rank channel other than a send or a receive leaves in its output
 * what its input holds (a reduction or a gather over one rank is its input), and NCCL makes
 * it a cudaMemcpyAsync. gpuhal issues that copy itself, in pieces of at most
 * GPUHAL__GRAPH_COPY_PIECE bytes, so that a GRAPH command buffer's capture of it holds
 * memcpy nodes the GPU runs at a stream copy's speed (NCCL's single node of a large copy
 * runs at about 0.64x; command_buffer.h); in place, it issues nothing. A REUSABLE STREAM
 * command buffer launches it as a graph of its own where it has one (copy_exec). */
static gpuhal_status_t gpuhal__collective_one_rank_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  gpuhal__collective_cmd_t* c = (gpuhal__collective_cmd_t*)user;
  void* send = NULL;
  void* recv = NULL;
  uint64_t done, n;
  GPUHAL__RETURN_IF_ERROR(gpuhal__collective_address(c->send, c->send_offset, "send", &send));
  GPUHAL__RETURN_IF_ERROR(gpuhal__collective_address(c->recv, c->recv_offset, "recv", &recv));
  if (!send) send = recv; /* a broadcast from the root's receive buffer */
  if (!recv) recv = send; /* a reduce into the root's send buffer */
  if (send != recv && c->copy_exec) return GPUHAL__CU(device->cu, cuGraphLaunch, (c->copy_exec, stream));
  for (done = 0; send != recv && done < c->bytes; done += n) {
    n = c->bytes - done < GPUHAL__GRAPH_COPY_PIECE ? c->bytes - done : GPUHAL__GRAPH_COPY_PIECE;
    GPUHAL__CU_RETURN(device->cu, cuMemcpyAsync,
                      ((CUdeviceptr)(uintptr_t)recv + done, (CUdeviceptr)(uintptr_t)send + done, (size_t)n, stream));
  }
  return NULL;
}

/* A GRAPH command buffer's capture baked the operands' addresses in: each execute checks
 * that they still have them (a queue_alloca buffer deallocated since has none). */
static gpuhal_status_t gpuhal__collective_check_addresses(void* user) {
  gpuhal__collective_cmd_t* c = (gpuhal__collective_cmd_t*)user;
  void* address = NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__collective_address(c->send, c->send_offset, "send", &address));
  return gpuhal__collective_address(c->recv, c->recv_offset, "recv", &address);
}

static gpuhal_status_t gpuhal__collective_group_begin(gpuhal_device_t* device) {
  return GPUHAL__NCCL(gpuhal__channel_nccl(device), ncclGroupStart, ());
}

static gpuhal_status_t gpuhal__collective_group_end(gpuhal_device_t* device) {
  gpuhal_status_t st = GPUHAL__NCCL(gpuhal__channel_nccl(device), ncclGroupEnd, ());
  gpuhal_status_t st2 = gpuhal__channel_restore_worker_context(device);
  st = gpuhal__status_first(st, st2);
  return st;
}

/* With the device's context current. */
static gpuhal_status_t gpuhal__collective_copy_destroy_current(void* arg) {
  gpuhal__collective_cmd_t* c = (gpuhal__collective_cmd_t*)arg;
  return gpuhal__device_graph_exec_destroy(c->channel->device, c->copy_exec);
}

static void gpuhal__collective_release(void* user) {
  gpuhal__collective_cmd_t* c = (gpuhal__collective_cmd_t*)user;
  gpuhal_channel_t* channel = c->channel;
  const gpuhal_allocator_t* allocator = channel->device->allocator;
  if (c->copy_exec) {
    gpuhal_status_t st = gpuhal__device_call_current(channel->device, gpuhal__collective_copy_destroy_current, c);
    if (st) {
      gpuhal__log(channel->device->logger, GPUHAL_LOG_WARN, "destroying a one-rank collective's copy graph: %s",
                  gpuhal_status_message(st));
      gpuhal_status_free(st);
    }
  }
  gpuhal__buffer_release_ref(c->send);
  gpuhal__buffer_release_ref(c->recv);
  gpuhal__free(allocator, c);
  gpuhal__channel_release_ref(channel);
}

static const gpuhal__native_ops_t gpuhal__collective_ops = {"NCCL collective",
                                                            gpuhal__collective_issue,
                                                            gpuhal__collective_group_begin,
                                                            gpuhal__collective_group_end,
                                                            gpuhal__collective_release,
                                                            1,
                                                            gpuhal__collective_check_addresses};
/* Neither grouped nor blocking: it makes no NCCL call, so the submitting thread may issue it. */
static const gpuhal__native_ops_t gpuhal__collective_one_rank_ops = {
    "NCCL collective (one rank: a copy)", gpuhal__collective_one_rank_issue, NULL, NULL, gpuhal__collective_release, 0,
    gpuhal__collective_check_addresses};

/* The element counts a collective reads from send and writes to recv (0: not used on this
 * rank). */
static void gpuhal__collective_extents(const gpuhal_collective_t* c, int rank, int size, uint64_t* send_count,
                                       uint64_t* recv_count) {
  uint64_t n = c->count, all = c->count * (uint64_t)size;
  *send_count = n;
  *recv_count = n;
  switch (c->kind) {
    case GPUHAL_COLLECTIVE_ALL_GATHER: *recv_count = all; break;
    case GPUHAL_COLLECTIVE_REDUCE_SCATTER: *send_count = all; break;
    case GPUHAL_COLLECTIVE_BROADCAST:
      if (rank != c->root) *send_count = 0;
      break;
    case GPUHAL_COLLECTIVE_REDUCE:
      if (rank != c->root) *recv_count = 0;
      break;
    case GPUHAL_COLLECTIVE_SEND: *recv_count = 0; break;
    case GPUHAL_COLLECTIVE_RECV: *send_count = 0; break;
    default: break;
  }
}

/* A buffer operand of `elements` elements: a live device or managed buffer of the
 * channel's device with the range inside it. A NULL buffer is allowed only when unused. */
static gpuhal_status_t gpuhal__collective_check_ref(gpuhal_channel_t* ch, gpuhal_buffer_ref_t ref, uint64_t elements,
                                                    uint32_t element_size, const char* what, const char* name) {
  uint64_t bytes;
  if (!ref.buffer) {
    if (elements == 0) return NULL;
    if (ref.slot != 0 || ref.offset != 0)
      return gpuhal_status_make(GPUHAL_STATUS_UNIMPLEMENTED,
                                "gpuhal_cmd_collective: argument 'collective->%s' names a binding slot: collectives "
                                "take buffers only",
                                what);
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_collective: argument 'collective->%s.buffer' must not be NULL for this "
                              "collective on rank %d (collectives take buffers, not binding slots)",
                              what, ch->rank);
  }
  {
    char arg[40];
    snprintf(arg, sizeof(arg), "collective->%s.buffer", what);
    GPUHAL__RETURN_IF_ERROR(gpuhal__object_check(ref.buffer, GPUHAL__MAGIC_BUFFER, "gpuhal_cmd_collective", arg));
  }
  if (ref.buffer->device != ch->device)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_collective: argument 'collective->%s' is a buffer of device %d; the channel "
                              "belongs to device %d%s",
                              what, ref.buffer->device->ordinal, ch->device->ordinal,
                              gpuhal__device_pair_note(ref.buffer->device, ch->device));
  if (ref.buffer->kind == GPUHAL_MEMORY_HOST_PINNED)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_collective: argument 'collective->%s' is pinned host memory: collectives "
                              "need device or managed buffers",
                              what);
  if (elements > UINT64_MAX / element_size || ref.offset > UINT64_MAX - elements * element_size)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_cmd_collective: argument 'collective->%s': %llu elements at offset %llu overflow",
                              what, (unsigned long long)elements, (unsigned long long)ref.offset);
  bytes = elements * element_size;
  if (ref.offset + bytes > ref.buffer->size)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_cmd_collective: argument 'collective->%s': %s needs [%llu, %llu) but the buffer "
                              "has %llu bytes",
                              what, name, (unsigned long long)ref.offset, (unsigned long long)(ref.offset + bytes),
                              (unsigned long long)ref.buffer->size);
  return NULL;
}

static gpuhal_status_t gpuhal__collective_check(gpuhal_channel_t* ch, const gpuhal_collective_t* c,
                                                uint64_t* send_count, uint64_t* recv_count) {
  uint32_t element_size;
  const char* name = gpuhal__collective_name(c->kind);
  if ((unsigned)c->kind > (unsigned)GPUHAL_COLLECTIVE_RECV)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_collective: argument 'collective->kind' (%d) is not a "
                              "gpuhal_collective_kind_t",
                              (int)c->kind);
  element_size = gpuhal_element_type_size(c->type);
  if (!element_size)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_collective: argument 'collective->type' (%d) is not a gpuhal_element_type_t",
                              (int)c->type);
  if ((c->kind == GPUHAL_COLLECTIVE_ALL_REDUCE || c->kind == GPUHAL_COLLECTIVE_REDUCE_SCATTER ||
       c->kind == GPUHAL_COLLECTIVE_REDUCE) &&
      (unsigned)c->op > (unsigned)GPUHAL_REDUCTION_AVG)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_collective: argument 'collective->op' (%d) is not a gpuhal_reduction_t",
                              (int)c->op);
  if (c->count == 0 || c->count > (uint64_t)SIZE_MAX / (uint64_t)ch->size)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_collective: argument 'collective->count' is %llu; a %s needs at least one "
                              "element (and a count whose total fits in size_t)",
                              (unsigned long long)c->count, name);
  if ((c->kind == GPUHAL_COLLECTIVE_BROADCAST || c->kind == GPUHAL_COLLECTIVE_REDUCE) &&
      (c->root < 0 || c->root >= ch->size))
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_cmd_collective: argument 'collective->root' is %d, must be in [0, %d) for a %s",
                              c->root, ch->size, name);
  if ((c->kind == GPUHAL_COLLECTIVE_SEND || c->kind == GPUHAL_COLLECTIVE_RECV) && (c->peer < 0 || c->peer >= ch->size))
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_cmd_collective: argument 'collective->peer' is %d, must be in [0, %d) for a %s",
                              c->peer, ch->size, name);
  gpuhal__collective_extents(c, ch->rank, ch->size, send_count, recv_count);
  GPUHAL__RETURN_IF_ERROR(gpuhal__collective_check_ref(ch, c->send, *send_count, element_size, "send", name));
  return gpuhal__collective_check_ref(ch, c->recv, *recv_count, element_size, "recv", name);
}

GPUHAL_API gpuhal_status_t gpuhal_cmd_collective(gpuhal_command_buffer_t* command_buffer, gpuhal_channel_t* channel,
                                                 const gpuhal_collective_t* collective) {
  gpuhal_command_buffer_t* cb = command_buffer;
  gpuhal__collective_cmd_t* rec = NULL;
  uint64_t send_count = 0, recv_count = 0;
  gpuhal_status_t st;
  int one_rank;
  GPUHAL__CHECK_RECORDING(command_buffer);
  GPUHAL__CHECK_OBJECT(channel, GPUHAL__MAGIC_CHANNEL);
  GPUHAL__CHECK_ARG(collective != NULL, "collective", "must not be NULL");
  if (channel->device != cb->device)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_collective: argument 'channel' belongs to device %d; the command buffer "
                              "belongs to device %d%s",
                              channel->device->ordinal, cb->device->ordinal,
                              gpuhal__device_pair_note(channel->device, cb->device));
  GPUHAL__RETURN_IF_ERROR(gpuhal__collective_check(channel, collective, &send_count, &recv_count));
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__alloc_zeroed(cb->device->allocator, sizeof(*rec), "a recorded collective", (void**)&rec));
  rec->channel = channel;
  rec->kind = collective->kind;
  rec->type = gpuhal__nccl_type(collective->type);
  rec->op = gpuhal__nccl_op(collective->op);
  rec->root_or_peer = (collective->kind == GPUHAL_COLLECTIVE_SEND || collective->kind == GPUHAL_COLLECTIVE_RECV)
                          ? collective->peer
                          : collective->root;
  rec->count = (size_t)collective->count;
  if (send_count) rec->send = collective->send.buffer, rec->send_offset = collective->send.offset;
  if (recv_count) rec->recv = collective->recv.buffer, rec->recv_offset = collective->recv.offset;
  rec->bytes = collective->count * gpuhal_element_type_size(collective->type);
  one_rank =
      channel->size == 1 && collective->kind != GPUHAL_COLLECTIVE_SEND && collective->kind != GPUHAL_COLLECTIVE_RECV;
  st = gpuhal__cb_record_native(cb, one_rank ? &gpuhal__collective_one_rank_ops : &gpuhal__collective_ops, rec);
  if (st) {
    gpuhal__free(cb->device->allocator, rec);
    return gpuhal_status_annotate(st, "gpuhal_cmd_collective");
  }
  gpuhal__object_retain(&channel->header);
  gpuhal__buffer_retain_ref(rec->send);
  gpuhal__buffer_retain_ref(rec->recv);
  /* The operands are not among the command buffer's retained buffers, which end looks at. */
  if ((rec->send && rec->send->pending) || (rec->recv && rec->recv->pending)) cb->reads_allocas = 1;
  /* A ONE_SHOT command buffer's copy runs once: building a graph for it would cost more. */
  if (one_rank && !gpuhal__cb_is_graph(cb) && (cb->flags & GPUHAL_COMMAND_BUFFER_REUSABLE) && rec->bytes > 0 &&
      rec->bytes <= GPUHAL__GRAPH_COPY_PIECE) {
    gpuhal__collective_copy_prepare(rec);
    if (rec->copy_exec) cb->launches_own_graph = 1;
  }
  return NULL;
}
