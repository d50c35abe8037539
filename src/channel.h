/* channel: collectives through NCCL (DESIGN §10).
 *
 * A channel is one rank of a communicator, bound to one device. Make them for several
 * devices of this process at once (gpuhal_channel_create_local: ncclCommInitAll), or one
 * per process from an id the application hands to every rank (gpuhal_channel_id_create
 * on one rank, send the 128 bytes to the others by any means, gpuhal_channel_create_rank
 * on each: ncclCommInitRank) - the way past one machine.
 *
 * Collectives are recorded into command buffers of the channel's device with
 * gpuhal_cmd_collective and run when the command buffer executes, ordered by semaphores
 * like any other work. STREAM command buffers call NCCL at every execute; GRAPH command
 * buffers capture the NCCL calls once (at end) into a child graph node, so a collective
 * replays with the rest of the graph. Consecutive collectives of one command buffer (no
 * barrier or other command between them) are one NCCL group (ncclGroupStart/End): a rank
 * that sends to and receives from a peer records both back to back. Every rank must record
 * the same collectives in the same order, as NCCL requires.
 *
 * NCCL is optional and loaded at run time (gpuhal_driver_options_t.nccl_library,
 * $GPUHAL_NCCL_LIBRARY, else libnccl.so.2): without it, and with GPUHAL_NO_NCCL, every
 * function here returns UNAVAILABLE and everything else in gpuhal works.
 *
 * Threads: every NCCL call runs on a device's worker thread (NCCL sets the current device
 * itself), so no channel function changes the calling thread's current context. */
#ifndef GPUHAL_SRC_CHANNEL_H
#define GPUHAL_SRC_CHANNEL_H

#include "internal.h"
#include "device.h"
#include "command_buffer.h"

typedef struct gpuhal_channel_s gpuhal_channel_t;

#define GPUHAL_CHANNEL_ID_BYTES 128
/* The rendezvous id of a multi-process group (an ncclUniqueId): plain bytes to pass around. */
typedef struct gpuhal_channel_id_t {
  uint8_t bytes[GPUHAL_CHANNEL_ID_BYTES];
} gpuhal_channel_id_t;

typedef enum gpuhal_collective_kind_e {
  GPUHAL_COLLECTIVE_ALL_REDUCE = 0, /* recv[count] = op over ranks of send[count] */
  GPUHAL_COLLECTIVE_ALL_GATHER = 1, /* recv[size * count] = the send[count] of every rank, by rank */
  GPUHAL_COLLECTIVE_REDUCE_SCATTER =
      2,                           /* recv[count] = op over ranks of send[rank * count ..] (send has size * count) */
  GPUHAL_COLLECTIVE_BROADCAST = 3, /* recv[count] = send[count] of `root` (send is read on root only) */
  GPUHAL_COLLECTIVE_REDUCE = 4,    /* recv[count] on `root` = op over ranks of send[count] */
  GPUHAL_COLLECTIVE_SEND = 5,      /* send[count] to rank `peer` */
  GPUHAL_COLLECTIVE_RECV = 6       /* recv[count] from rank `peer` */
} gpuhal_collective_kind_t;

typedef enum gpuhal_element_type_e {
  GPUHAL_ELEMENT_INT8 = 0,
  GPUHAL_ELEMENT_UINT8 = 1,
  GPUHAL_ELEMENT_INT32 = 2,
  GPUHAL_ELEMENT_UINT32 = 3,
  GPUHAL_ELEMENT_INT64 = 4,
  GPUHAL_ELEMENT_UINT64 = 5,
  GPUHAL_ELEMENT_FLOAT16 = 6,
  GPUHAL_ELEMENT_FLOAT32 = 7,
  GPUHAL_ELEMENT_FLOAT64 = 8,
  GPUHAL_ELEMENT_BFLOAT16 = 9
} gpuhal_element_type_t;

typedef enum gpuhal_reduction_e {
  GPUHAL_REDUCTION_SUM = 0,
  GPUHAL_REDUCTION_PROD = 1,
  GPUHAL_REDUCTION_MIN = 2,
  GPUHAL_REDUCTION_MAX = 3,
  GPUHAL_REDUCTION_AVG = 4 /* the sum divided by the number of ranks */
} gpuhal_reduction_t;

/* One collective. `count` is in elements of `type`; see gpuhal_collective_kind_t for what
 * it counts. `op` is read by ALL_REDUCE, REDUCE_SCATTER and REDUCE; `root` by BROADCAST and
 * REDUCE; `peer` by SEND and RECV. Unused buffers may be {NULL}. Buffers must be device
 * (or managed) buffers of the channel's device with addresses known by the time the
 * command buffer is built (GRAPH) or issued (STREAM); binding slots are not supported. */
typedef struct gpuhal_collective_t {
  gpuhal_collective_kind_t kind;
  gpuhal_element_type_t type;
  gpuhal_reduction_t op;
  gpuhal_buffer_ref_t send;
  gpuhal_buffer_ref_t recv;
  uint64_t count;
  int root;
  int peer;
} gpuhal_collective_t;

/* Bytes of one element of `type`; 0 for an unknown type. */
GPUHAL_API uint32_t gpuhal_element_type_size(gpuhal_element_type_t type);

/* One channel per device (ncclCommInitAll): out_channels[i] is rank i on devices[i].
 * The devices must be distinct devices of `driver`. */
GPUHAL_API gpuhal_status_t gpuhal_channel_create_local(gpuhal_driver_t* driver, uint32_t device_count,
                                                       gpuhal_device_t* const* devices,
                                                       gpuhal_channel_t** out_channels);
/* A new id for a multi-process group (ncclGetUniqueId); made once, by one rank. */
GPUHAL_API gpuhal_status_t gpuhal_channel_id_create(gpuhal_driver_t* driver, gpuhal_channel_id_t* out_id);
/* Rank `rank` of a group of `size` ranks (ncclCommInitRank). Blocks until every rank has
 * joined (NCCL's own timeouts apply); meanwhile the device's queue does not issue. */
GPUHAL_API gpuhal_status_t gpuhal_channel_create_rank(gpuhal_device_t* device, const gpuhal_channel_id_t* id, int rank,
                                                      int size, gpuhal_channel_t** out_channel);
GPUHAL_API void gpuhal_channel_retain(gpuhal_channel_t* channel);
/* Releasing NULL is a no-op. Command buffers that record a channel hold a reference. */
GPUHAL_API void gpuhal_channel_release(gpuhal_channel_t* channel);
/* The rank and the number of ranks; -1 for bad input. */
GPUHAL_API int gpuhal_channel_rank(gpuhal_channel_t* channel);
GPUHAL_API int gpuhal_channel_size(gpuhal_channel_t* channel);
/* The channel's device (not retained); NULL for bad input. */
GPUHAL_API gpuhal_device_t* gpuhal_channel_device(gpuhal_channel_t* channel);

/* Records a collective of `channel` into a command buffer of the channel's device. An
 * execute of it is issued by the device's worker, and NCCL's enqueue may block it until
 * every rank has enqueued its part; meanwhile nothing else of that device is issued (its
 * other queues included; work already issued runs on). So a rank's collective must not
 * wait for work another rank's device issues only after its own collective of the group:
 * queue each rank's inputs to its collective before, or on another device. */
GPUHAL_API gpuhal_status_t gpuhal_cmd_collective(gpuhal_command_buffer_t* command_buffer, gpuhal_channel_t* channel,
                                                 const gpuhal_collective_t* collective);

/* ---- gpuhal:internal ---- */

#endif /* GPUHAL_SRC_CHANNEL_H */
