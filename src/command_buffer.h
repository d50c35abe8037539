/* command_buffer: recorded GPU work (dispatches, copies, fills, updates, barriers) and
 * gpuhal_queue_execute (DESIGN §7). This header: the public declarations, the recorded
 * commands and the command buffer object. command_buffer.c: recording storage, late-address
 * resolution and the multi-device hook; the recording calls are in command_buffer_record.c,
 * the two back ends (gpuhal__cb_backend_t) in command_buffer_graph.c and
 * command_buffer_stream.c, device-side IF/WHILE regions in command_buffer_condition.c, the
 * execute in queue_execute.c, the built-in kernels in builtin_kernels.c.
 *
 * Two back ends behind one API:
 *   GRAPH (default)  the commands become a CUgraph, instantiated once at end; every
 *                    execute is one cuGraphLaunch. Commands between two barriers have no
 *                    edges among themselves; a barrier orders all before it before all
 *                    after it.
 *   STREAM           the commands are kept and issued one by one into the queue's stream at
 *                    execute (no instantiate cost: for one-shot, tiny work).
 * ONE_SHOT (default) command buffers execute once; REUSABLE ones any number of times.
 *
 * Late binding: a dispatch argument or a copy/fill/update operand may be a binding slot,
 * filled from the binding table given to gpuhal_queue_execute, or a transient buffer (a
 * gpuhal_queue_alloca result). Both are resolved when the execute is issued; a graph then
 * gets the changed node parameters rewritten in place (no re-instantiation). A late-bound
 * copy, fill or update in a graph is done by gpuhal's built-in copy/fill kernel (a kernel
 * node's parameters can be rewritten freely; memcpy/memset nodes only under narrow rules).
 *
 * Transient buffers, named directly (not through a slot), in both recorders: the address
 * is read at every execute, never baked in at record time, even when the buffer already
 * had one then (its memory returns to the pool at its dealloca and a later
 * gpuhal_queue_alloca may get the same address). An execute issued when such a buffer has
 * no address fails its signal semaphores with FAILED_PRECONDITION naming the command and
 * the buffer, and runs none of its commands: before the buffer's alloca was issued (order
 * the execute after the alloca's signal: with GPUHAL_FEATURE_SEMAPHORE_MEMOPS an alloca
 * that waits for a value is issued at once, behind a GPU wait, so an execute not ordered
 * after it is not caught there and may run before the memory is allocated), or after its
 * dealloca was issued (order the
 * dealloca after the execute's signal; a dealloca queued but not yet issued does not
 * refuse an execute issued before it). To use a new transient buffer at each execute,
 * name a binding slot.
 *
 * Recording: one thread at a time per command buffer. Every command is validated when it
 * is recorded; a rejected command leaves the command buffer as it was (still recording).
 * A command buffer retains the buffers and kernels (their executables) it names. */
#ifndef GPUHAL_SRC_COMMAND_BUFFER_H
#define GPUHAL_SRC_COMMAND_BUFFER_H

#include "internal.h"
#include "device.h"
#include "memory.h"
#include "semaphore.h"
#include "executable.h"
#include "builtin_kernels.h"

typedef struct gpuhal_command_buffer_s gpuhal_command_buffer_t;

typedef struct gpuhal_dim3_t {
  uint32_t x, y, z;
} gpuhal_dim3_t;
GPUHAL_API gpuhal_dim3_t gpuhal_dim3(uint32_t x, uint32_t y, uint32_t z);

typedef enum gpuhal_command_buffer_flag_bits_e {
  GPUHAL_COMMAND_BUFFER_ONE_SHOT = 0,      /* executes once (default) */
  GPUHAL_COMMAND_BUFFER_REUSABLE = 1 << 0, /* executes any number of times */
  GPUHAL_COMMAND_BUFFER_GRAPH = 0,         /* recorded into a CUDA graph (default) */
  GPUHAL_COMMAND_BUFFER_STREAM = 1 << 1    /* issued command by command into the stream */
} gpuhal_command_buffer_flag_bits_t;
typedef uint32_t gpuhal_command_buffer_flags_t;

/* A tensor map (TMA, compute capability 9.0): how a kernel's cp.async.bulk.tensor sees a
 * tensor in global memory. gpuhal encodes it (cuTensorMapEncodeTiled) with the address of
 * the buffer or binding slot it is given with (gpuhal_arg_tensor_map) and passes the
 * 128-byte CUtensorMap by value (declare the parameter `const __grid_constant__
 * CUtensorMap`). Zero in an optional field means its default. */
typedef enum gpuhal_tensor_type_e { /* CUtensorMapDataType */
                                    GPUHAL_TENSOR_U8 = 0,
                                    GPUHAL_TENSOR_U16 = 1,
                                    GPUHAL_TENSOR_U32 = 2,
                                    GPUHAL_TENSOR_I32 = 3,
                                    GPUHAL_TENSOR_U64 = 4,
                                    GPUHAL_TENSOR_I64 = 5,
                                    GPUHAL_TENSOR_F16 = 6,
                                    GPUHAL_TENSOR_F32 = 7,
                                    GPUHAL_TENSOR_F64 = 8,
                                    GPUHAL_TENSOR_BF16 = 9,
                                    GPUHAL_TENSOR_F32_FTZ = 10,
                                    GPUHAL_TENSOR_TF32 = 11,
                                    GPUHAL_TENSOR_TF32_FTZ = 12
} gpuhal_tensor_type_t;
#define GPUHAL_TENSOR_MAX_RANK 5
typedef struct gpuhal_tensor_map_t {
  gpuhal_tensor_type_t type;
  uint32_t rank;                                    /* 1..5; 3..5 with interleave */
  uint64_t dims[GPUHAL_TENSOR_MAX_RANK];            /* elements per dimension, innermost first; 1..2^32 */
  uint64_t strides[GPUHAL_TENSOR_MAX_RANK - 1];     /* bytes between indices of dimension i+1: a multiple of
                                                        16 (32 with 32-byte interleave) below 2^40; 0: packed */
  uint32_t box[GPUHAL_TENSOR_MAX_RANK];             /* the tile one copy moves, elements: 1..256; box[0] x element
                                                        size a multiple of 16 bytes without interleave */
  uint32_t element_strides[GPUHAL_TENSOR_MAX_RANK]; /* traversal step, 1..8 (0: 1) */
  uint32_t interleave;                              /* CUtensorMapInterleave: 0 none, 1 16 B, 2 32 B */
  uint32_t swizzle;                                 /* CUtensorMapSwizzle: 0 none, 1 32 B, 2 64 B, 3 128 B */
  uint32_t l2_promotion;                            /* CUtensorMapL2promotion: 0 none, 1 64 B, 2 128 B, 3 256 B */
  uint32_t oob_fill;                                /* 0: out-of-bounds elements read zero; 1: NaN (floats) */
} gpuhal_tensor_map_t;

/* A kernel argument: a buffer address (+offset) passed as a 64-bit pointer, a binding
 * slot (+offset) resolved at execute, plain bytes copied when the dispatch is recorded, or
 * a tensor map over a buffer or slot (encoded at every execute, with the address the
 * buffer or slot has then). Make them with the constructors below. */
typedef enum gpuhal_arg_kind_e {
  GPUHAL_ARG_BYTES = 0,
  GPUHAL_ARG_BUFFER = 1,
  GPUHAL_ARG_SLOT = 2,
  GPUHAL_ARG_TENSOR_MAP = 3,
  GPUHAL_ARG_CONDITION = 4
} gpuhal_arg_kind_t;
typedef struct gpuhal_arg_t {
  gpuhal_arg_kind_t kind;
  uint32_t slot;           /* SLOT; BYTES: nonzero when gpuhal_arg_bytes got NULL data (refused) */
  gpuhal_buffer_t* buffer; /* BUFFER */
  uint64_t offset;         /* BUFFER, SLOT: bytes added to the address */
  const void* data;        /* BYTES: the value; NULL: the value is in inline_value (u32..f64) */
  uint32_t size;           /* BYTES: bytes of the value */
  uint64_t inline_value[2];
  gpuhal_arg_kind_t memory;              /* TENSOR_MAP: BUFFER or SLOT (buffer/slot/offset say which) */
  const gpuhal_tensor_map_t* tensor_map; /* TENSOR_MAP: valid until the dispatch that takes it returns */
  uint32_t condition;                    /* CONDITION: gpuhal_condition_t.id */
} gpuhal_arg_t;
GPUHAL_API gpuhal_arg_t gpuhal_arg_buffer(gpuhal_buffer_t* buffer, uint64_t offset);
GPUHAL_API gpuhal_arg_t gpuhal_arg_slot(uint32_t slot, uint64_t offset);
/* A tensor map over `memory` (a gpuhal_arg_buffer or gpuhal_arg_slot: the tensor starts at
 * its address, which must be 16-byte aligned). `map` must stay valid until the dispatch
 * that takes the argument returns; gpuhal keeps a copy. */
GPUHAL_API gpuhal_arg_t gpuhal_arg_tensor_map(gpuhal_arg_t memory, const gpuhal_tensor_map_t* map);
/* `data` must stay valid until the gpuhal_cmd_dispatch that takes the argument returns;
 * `size` is 1 to 32764 bytes (the most a launch's parameters hold). NULL `data` is refused
 * at dispatch (INVALID_ARGUMENT naming args[i]); for a value held in inline_value use the
 * constructors below, or a struct whose `slot` is 0. */
GPUHAL_API gpuhal_arg_t gpuhal_arg_bytes(const void* data, uint32_t size);
GPUHAL_API gpuhal_arg_t gpuhal_arg_u32(uint32_t value);
GPUHAL_API gpuhal_arg_t gpuhal_arg_i32(int32_t value);
GPUHAL_API gpuhal_arg_t gpuhal_arg_u64(uint64_t value);
GPUHAL_API gpuhal_arg_t gpuhal_arg_f32(float value);
GPUHAL_API gpuhal_arg_t gpuhal_arg_f64(double value);

/* A copy/fill/update operand: a buffer or a binding slot, plus a byte offset. */
typedef struct gpuhal_buffer_ref_t {
  gpuhal_buffer_t* buffer; /* NULL: the binding slot `slot` */
  uint32_t slot;
  uint64_t offset;
} gpuhal_buffer_ref_t;
GPUHAL_API gpuhal_buffer_ref_t gpuhal_ref_buffer(gpuhal_buffer_t* buffer, uint64_t offset);
GPUHAL_API gpuhal_buffer_ref_t gpuhal_ref_slot(uint32_t slot, uint64_t offset);

/* The buffers of binding slots 0..count-1 for one execute (offsets may be NULL: all 0).
 * `count` covers every slot of the command buffer (more entries are ignored); entries of
 * slots it does not use may be NULL. A slot takes a buffer of the command buffer's own
 * device (name another device's buffer directly, as gpuhal_cmd_copy's src or dst). */
typedef struct gpuhal_binding_table_t {
  uint32_t count;
  gpuhal_buffer_t* const* buffers;
  const uint64_t* offsets;
} gpuhal_binding_table_t;

/* A new command buffer of `device` with `binding_slots` slots (0 for none). */
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_create(gpuhal_device_t* device, gpuhal_command_buffer_flags_t flags,
                                                        uint32_t binding_slots,
                                                        gpuhal_command_buffer_t** out_command_buffer);
GPUHAL_API void gpuhal_command_buffer_retain(gpuhal_command_buffer_t* command_buffer);
/* Names the command buffer's executes in reports (gpuhal_driver_report_pending); `label` is
 * copied (at most GPUHAL_LABEL_MAX - 1 bytes, cut between UTF-8 characters; control
 * characters become '?'), NULL or "" removes it. Set it before the
 * command buffer is executed. */
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_set_label(gpuhal_command_buffer_t* command_buffer, const char* label);
/* Releasing NULL is a no-op. Executes in flight keep the command buffer alive. */
GPUHAL_API void gpuhal_command_buffer_release(gpuhal_command_buffer_t* command_buffer);
/* Starts recording; a command buffer is recorded once. */
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_begin(gpuhal_command_buffer_t* command_buffer);
/* Ends recording. A GRAPH command buffer is built and instantiated here (the CUDA errors
 * of building it surface here). */
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_end(gpuhal_command_buffer_t* command_buffer);

/* Launches `kernel` with one argument per kernel parameter. Checked: the kernel belongs to
 * the command buffer's device; grid and block within the device's limits; block threads
 * within the kernel's limit, and the block its .reqntid requires (gpuhal_kernel_info_t.
 * required_block); shared_bytes within the kernel's dynamic shared memory limit; argument
 * count and sizes against the kernel's parameters (when the driver can say), and their
 * bytes together against the 32764 a launch's parameters hold (always); buffer arguments
 * of this device with offset <= size; slots < binding_slots. */
GPUHAL_API gpuhal_status_t gpuhal_cmd_dispatch(gpuhal_command_buffer_t* command_buffer, gpuhal_kernel_t* kernel,
                                               gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared_bytes,
                                               uint32_t arg_count, const gpuhal_arg_t* args);

/* Launch attributes of gpuhal_cmd_dispatch_ex. A zeroed struct (or NULL) launches as
 * gpuhal_cmd_dispatch does.
 *
 *   cluster       thread-block cluster shape in blocks ({0,0,0}: no cluster; an axis left
 *                 0 counts as 1). Each axis must divide the grid's (INVALID_ARGUMENT), and
 *                 the cluster may hold at most gpuhal_kernel_max_cluster_size blocks for
 *                 this block size and shared memory (OUT_OF_RANGE). Needs a device with
 *                 cluster launch (compute capability 9.0+; UNAVAILABLE otherwise).
 *   COOPERATIVE   every block of the grid is resident at once, so device code may sync
 *                 the whole grid (cooperative_groups::this_grid().sync()). The grid may
 *                 hold at most gpuhal_kernel_occupancy x the device's SM count blocks
 *                 (OUT_OF_RANGE saying so). Not with a cluster (UNIMPLEMENTED).
 *   PROGRAMMATIC  programmatic dependent launch: the dispatch may start while the dispatch
 *                 it is ordered after is still running, so its prologue overlaps that
 *                 kernel's tail. Its device code must wait (griddepcontrol.wait, i.e.
 *                 cudaGridDependencySynchronize()) before it touches anything the earlier
 *                 dispatch writes or reads; the earlier one may let it start sooner with
 *                 griddepcontrol.launch_dependents. It applies where the dispatch is
 *                 ordered after exactly one dispatch of the same command buffer: in STREAM
 *                 command buffers the command recorded just before it; in GRAPH ones a
 *                 dispatch that is alone between the two barriers before it. Anywhere else,
 *                 on devices below compute capability 9.0, and for GRAPH on drivers before
 *                 CUDA 12.3, it is ordered fully, which is always correct.
 *   priority      0: the default. Otherwise the kernel's scheduling priority in CUDA's
 *                 terms (lower is more urgent): within the device's range, e.g. -5..0
 *                 (OUT_OF_RANGE names the range). */
typedef enum gpuhal_dispatch_flag_bits_e {
  GPUHAL_DISPATCH_COOPERATIVE = 1 << 0,
  GPUHAL_DISPATCH_PROGRAMMATIC = 1 << 1
} gpuhal_dispatch_flag_bits_t;
typedef uint32_t gpuhal_dispatch_flags_t;
typedef struct gpuhal_dispatch_options_t {
  gpuhal_dim3_t cluster;
  gpuhal_dispatch_flags_t flags;
  int32_t priority;
} gpuhal_dispatch_options_t;

/* gpuhal_cmd_dispatch with launch attributes (`options` may be NULL). Checked as
 * gpuhal_cmd_dispatch is, plus the rules of each attribute above. */
GPUHAL_API gpuhal_status_t gpuhal_cmd_dispatch_ex(gpuhal_command_buffer_t* command_buffer, gpuhal_kernel_t* kernel,
                                                  gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared_bytes,
                                                  const gpuhal_dispatch_options_t* options, uint32_t arg_count,
                                                  const gpuhal_arg_t* args);
/* Copies size bytes from src to dst (the ranges must not overlap). Like every command that
 * moves bytes, size 0 is INVALID_ARGUMENT: a command that does nothing is most often a bug
 * of its caller. */
GPUHAL_API gpuhal_status_t gpuhal_cmd_copy(gpuhal_command_buffer_t* command_buffer, gpuhal_buffer_ref_t src,
                                           gpuhal_buffer_ref_t dst, uint64_t size);
/* Repeats a pattern of 1, 2, 4, 8 or 16 bytes over [dst, dst + size); the offset and size
 * must be multiples of pattern_size, and size > 0. */
GPUHAL_API gpuhal_status_t gpuhal_cmd_fill(gpuhal_command_buffer_t* command_buffer, gpuhal_buffer_ref_t dst,
                                           uint64_t size, const void* pattern, uint32_t pattern_size);
/* Writes size host bytes (> 0) to dst when executed; the bytes are copied now. */
GPUHAL_API gpuhal_status_t gpuhal_cmd_update(gpuhal_command_buffer_t* command_buffer, const void* host_src,
                                             gpuhal_buffer_ref_t dst, uint64_t size);
/* Everything recorded before the barrier completes before anything recorded after it. */
GPUHAL_API gpuhal_status_t gpuhal_cmd_barrier(gpuhal_command_buffer_t* command_buffer);

/* Device-side control flow in GRAPH command buffers (conditional graph nodes: CUDA driver
 * 12.3 or later). A region of recorded commands runs on the device if (IF), or as long as
 * (WHILE), a condition that device code sets is non-zero: a loop that runs until a
 * device-computed residual is small costs no host round trip per iteration.
 *
 *   gpuhal_command_buffer_condition_create  makes a condition of the command buffer. At
 *       the start of every execute it is reset to `default_value`. It belongs to the
 *       region being recorded when it is made (or to the top level).
 *   gpuhal_arg_condition  passes it to a kernel: an 8-byte cudaGraphConditionalHandle that
 *       device code sets with cudaGraphSetConditional(handle, value) (from
 *       cuda_runtime.h; the PTX loads as it is, the driver provides the function). Only
 *       dispatches recorded in the condition's region, at any depth, may take it.
 *   gpuhal_cmd_begin_if, gpuhal_cmd_begin_while  open a region controlled by a condition,
 *       in the region the condition belongs to; one region per condition.
 *       gpuhal_cmd_end_region closes the innermost open region. IF runs the region once if
 *       the condition is non-zero when the region is reached; WHILE checks it before every
 *       iteration (a kernel in the region sets it to 0 to stop).
 *
 * A region is one step of the level it is recorded in: barriers order it like any other
 * command (record a barrier between the kernel that sets an IF's condition and the IF).
 * Inside a region, commands are ordered among themselves by barriers as at the top level.
 * Regions nest (GPUHAL_REGION_DEPTH_MAX deep) and may hold dispatches (late-bound
 * arguments, tensor maps and launch attributes included), copies, fills, updates and
 * barriers; collectives cannot go in one (UNIMPLEMENTED). A region left open, a condition
 * that controls no region, or a WHILE that could never end (no dispatch in it takes its
 * condition, which is non-zero by default or set by a dispatch outside it), at
 * gpuhal_command_buffer_end is FAILED_PRECONDITION. STREAM command buffers issue from the
 * host and cannot loop on device values: condition_create, begin_if and begin_while say
 * UNIMPLEMENTED there, and on drivers before CUDA 12.3 (naming the driver's version). */
#define GPUHAL_REGION_DEPTH_MAX 16
typedef struct gpuhal_condition_t {
  uint32_t id; /* 0: none; else 1 + its index in its command buffer */
} gpuhal_condition_t;
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_condition_create(gpuhal_command_buffer_t* command_buffer,
                                                                  uint32_t default_value,
                                                                  gpuhal_condition_t* out_condition);
GPUHAL_API gpuhal_arg_t gpuhal_arg_condition(gpuhal_condition_t condition);
GPUHAL_API gpuhal_status_t gpuhal_cmd_begin_if(gpuhal_command_buffer_t* command_buffer, gpuhal_condition_t condition);
GPUHAL_API gpuhal_status_t gpuhal_cmd_begin_while(gpuhal_command_buffer_t* command_buffer,
                                                  gpuhal_condition_t condition);
GPUHAL_API gpuhal_status_t gpuhal_cmd_end_region(gpuhal_command_buffer_t* command_buffer);

/* The CUgraph of an ended GRAPH command buffer (as void*: gpuhal's public header carries
 * no CUDA types), owned by the command buffer: for inspection (cuGraphGetNodes, ...) and
 * for embedding as a child graph. Nodes with late-bound arguments hold those of the last
 * execute that made an instantiation (placeholders before the first). The graph, and any
 * graph made from it (a clone, a child-graph node, its instantiations), uses memory the
 * command buffer owns (its staged update bytes, its executables' modules, its buffers):
 * it is valid only while the command buffer, and the device, live. FAILED_PRECONDITION
 * for STREAM or before end. */
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_native_graph(gpuhal_command_buffer_t* command_buffer,
                                                              void** out_cu_graph);

/* Queues the command buffer on `queue` after `wait`; `signal` is reached when it has run.
 * A NULL command buffer is a barrier (it only orders wait before signal). `bindings`
 * supplies the binding slots (NULL when the command buffer uses none); its buffers are
 * retained until the work completes. Never blocks. Addresses of slots and transient
 * buffers are resolved when the execute is issued; one that has none then (see
 * "Transient buffers" above) fails `signal` with FAILED_PRECONDITION and nothing runs. */
GPUHAL_API gpuhal_status_t gpuhal_queue_execute(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                                gpuhal_semaphore_list_t signal, gpuhal_command_buffer_t* command_buffer,
                                                const gpuhal_binding_table_t* bindings);

/* ---- gpuhal:internal ---- */

#define GPUHAL__MAGIC_COMMAND_BUFFER 0x434D4442u /* "CMDB" */
/* ---- recorded commands ---- */
typedef enum gpuhal__cmd_type_e {
  GPUHAL__CMD_DISPATCH = 1,
  GPUHAL__CMD_COPY = 2,
  GPUHAL__CMD_FILL = 3,
  GPUHAL__CMD_UPDATE = 4,
  GPUHAL__CMD_BARRIER = 5,
  GPUHAL__CMD_NATIVE = 6,       /* multi-device hook: see "native commands" below */
  GPUHAL__CMD_REGION_BEGIN = 7, /* GRAPH: an IF or WHILE region up to its REGION_END */
  GPUHAL__CMD_REGION_END = 8
} gpuhal__cmd_type_t;

/* Where an address comes from. */
typedef enum gpuhal__ref_kind_e {
  GPUHAL__REF_BUFFER = 0, /* buffer->address (read at execute when it was 0 at record) */
  GPUHAL__REF_SLOT = 1,   /* the binding table's entry `slot` */
  GPUHAL__REF_STAGING = 2 /* the command buffer's device copy of its update bytes (graphs) */
} gpuhal__ref_kind_t;

typedef struct gpuhal__ref_s {
  gpuhal__ref_kind_t kind;
  uint32_t slot;
  gpuhal_buffer_t* buffer;
  uint64_t offset;
} gpuhal__ref_t;

/* One kernel parameter: its value lives in cb->values at value_offset; a late one holds an
 * address resolved at execute (or, for STAGING, at end). */
typedef struct gpuhal__cmd_arg_s {
  gpuhal__ref_t ref;
  uint32_t late;
  uint32_t late_size;  /* bytes a late value takes: 8 (an address) or 128 (a tensor map) */
  uint32_t tensor_map; /* 0, or 1 + the index of its map in cb->tensor_maps */
  uint32_t condition;  /* 0, or 1 + the index of its condition: its handle is written when the graph is built */
  uint32_t value_offset;
} gpuhal__cmd_arg_t;

typedef struct gpuhal__cmd_s {
  gpuhal__cmd_type_t type;
  uint32_t late_args; /* DISPATCH: arguments resolved at execute */
  CUgraphNode node;   /* graph: the node of this command */
  /* DISPATCH */
  CUfunction function;
  const char* kernel_name;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  uint32_t arg_first;
  uint32_t arg_count;
  gpuhal_dispatch_options_t launch; /* cluster axes 1 when set; all zero: a plain launch */
  /* COPY, FILL, UPDATE (UPDATE: src.offset indexes cb->update_data) */
  gpuhal__ref_t src;
  gpuhal__ref_t dst;
  uint64_t size;
  uint64_t pattern[2];
  uint32_t pattern_size;
  /* NATIVE (multi-device hook): work put on a stream by another module (channel.h) */
  const struct gpuhal__native_ops_s* native_ops;
  void* native_user;
  uint32_t native_follower; /* grouped with the NATIVE command before it */
  /* REGION_BEGIN */
  uint32_t condition;    /* the index of its condition */
  uint32_t region_while; /* WHILE; 0: IF */
} gpuhal__cmd_t;

/* A condition (command_buffer_condition.c). */
typedef struct gpuhal__cb_condition_s {
  uint32_t default_value;
  uint32_t region;                 /* the region it belongs to: 0 the top level, else 1 + its REGION_BEGIN's index */
  uint32_t begun;                  /* 1 + the index of the REGION_BEGIN it controls; 0: none yet */
  CUgraphConditionalHandle handle; /* made when the graph of its region is built */
} gpuhal__cb_condition_t;
typedef enum gpuhal__cb_state_e {
  GPUHAL__CB_INITIAL = 0,
  GPUHAL__CB_RECORDING = 1,
  GPUHAL__CB_EXECUTABLE = 2
} gpuhal__cb_state_t;

/* An execute in flight: the command buffer and the binding table it runs with. Pooled per
 * command buffer, so steady-state executes allocate nothing. */
typedef struct gpuhal__execute_action_s {
  struct gpuhal__execute_action_s* next_free;
  gpuhal_command_buffer_t* command_buffer;
  gpuhal_buffer_t** buffers; /* binding_slots entries, retained (NULL for unused slots) */
  uint64_t* offsets;
} gpuhal__execute_action_t;

/* GRAPH: one instantiation of the command buffer's graph. A REUSABLE one with late-bound
 * arguments keeps up to tuning.graph_instances_max of them (at most
 * GPUHAL__GRAPH_INSTANCES_MAX), made on demand with the bindings of the execute that needs
 * one (the first at the first execute), so that bindings used in turn each keep an
 * instance; a patch rewrites only what differs from an instance's last bindings
 * (command_buffer_graph.c). */
typedef struct gpuhal__graph_instance_s {
  CUgraphExec exec;
  CUevent done;          /* recorded after each launch (several instances only); NULL otherwise */
  unsigned char* values; /* late argument values its kernel nodes hold (layout of cb->values) */
  int launched;          /* `done` has been recorded */
} gpuhal__graph_instance_t;

/* The device limits a dispatch is checked against. */
typedef struct gpuhal__dispatch_limits_s {
  int max_block[3];
  int max_grid[3];
  int max_threads_per_block;
} gpuhal__dispatch_limits_t;

/* How an ended recording runs (DESIGN §7): GRAPH builds a CUDA graph at end and launches
 * it at every execute (command_buffer_graph.c); STREAM issues the recorded commands one by
 * one at every execute (command_buffer_stream.c). Recording is the same for both. */
typedef struct gpuhal__cb_backend_s {
  const char* name;
  /* At end, after the common freezing (kernel parameter pointers): build what executes
   * run, or put it off. */
  gpuhal_status_t (*end)(gpuhal_command_buffer_t* cb);
  /* Drops what `end` built (a failed end, destruction). Any thread, no gpuhal lock held. */
  void (*discard)(gpuhal_command_buffer_t* cb);
  /* Puts one execute on `stream`; `action` holds its binding table (NULL when the command
   * buffer has no binding slots: nothing refers to one then). */
  gpuhal_status_t (*issue)(gpuhal_command_buffer_t* cb, const gpuhal__execute_action_t* action, gpuhal_device_t* device,
                           CUstream stream);
} gpuhal__cb_backend_t;

struct gpuhal_command_buffer_s {
  gpuhal__object_t object;
  gpuhal_device_t* device;      /* retained */
  char label[GPUHAL_LABEL_MAX]; /* gpuhal_command_buffer_set_label; "" without one */
  gpuhal_command_buffer_flags_t flags;
  uint32_t binding_slots;
  gpuhal__cb_state_t state;
  const gpuhal__cb_backend_t* backend; /* GRAPH or STREAM, from the flags */
  int32_t executed;                    /* ONE_SHOT: set by the first execute */
  gpuhal__dispatch_limits_t limits;
  gpuhal__builtins_t* builtins; /* NULL until a command needs them */

  gpuhal__cmd_t* cmds;
  uint32_t cmd_count, cmd_capacity;
  gpuhal__cmd_arg_t* args;
  uint32_t arg_count, arg_capacity;
  unsigned char* values; /* kernel argument values, 8-byte aligned each */
  size_t values_size, values_capacity;
  /* The dispatches' tensor maps with their last encoding (command_buffer_tensor_map.c). */
  struct gpuhal__cb_tensor_map_s* tensor_maps;
  uint32_t tensor_map_count, tensor_map_capacity;
  gpuhal__cb_condition_t* conditions; /* GRAPH: device-side conditions */
  uint32_t condition_count, condition_capacity;
  uint32_t regions[GPUHAL_REGION_DEPTH_MAX]; /* the open regions' REGION_BEGIN indices, outermost first */
  uint32_t region_depth;
  unsigned char* update_data; /* bytes of cmd_update, 16-byte aligned each */
  size_t update_size, update_capacity;
  void** param_ptrs; /* built at end: the kernelParams arrays of every dispatch */

  uint64_t* slot_extent; /* per slot: the bytes past the table offset that commands touch */
  unsigned char* slot_used;

  gpuhal_buffer_t** retained_buffers;
  uint32_t retained_buffer_count, retained_buffer_capacity;
  gpuhal_executable_t** retained_executables;
  uint32_t retained_executable_count, retained_executable_capacity;

  /* Collectives (NATIVE commands whose ops may_block) need every rank to take part at once
   * when NCCL sets up its connections, so such a command buffer is issued only on the
   * device's worker (never by the submitting thread), and a GRAPH one is built there at its
   * first execute (not at end, where one thread recording rank after rank would wait for
   * itself). */
  int has_native;
  int graph_deferred; /* GRAPH with NATIVE commands, not built yet */
  int native_checks;  /* NATIVE commands with ops->check: a GRAPH execute calls each */

  /* GRAPH */
  CUgraph graph;
  CUgraphExec exec; /* instances[0].exec: made at end (or at a deferred build) */
  gpuhal__graph_instance_t instances[GPUHAL__GRAPH_INSTANCES_MAX];
  uint32_t instance_count, instance_next; /* under the device's issue serialization */
  unsigned char* graph_values;            /* late argument values the graph's nodes were built with */
  uint32_t node_count;
  uint32_t* late_cmds; /* indices of dispatches with late arguments */
  uint32_t late_cmd_count;
  int reads_allocas; /* it names binding slots or queue_alloca buffers: set at end, and by
                        collectives while recording */
  /* A command launches a graph executable of its own at every execute (a one-rank
   * collective's copy in a REUSABLE STREAM command buffer, channel.c). CUDA runs the launches
   * of one graph executable in order, so its executes are issued in dependency order, as a
   * REUSABLE GRAPH command buffer's are (queue_execute.c). */
  int launches_own_graph;
  CUdeviceptr staging;                             /* device copy of update_data (cuMemAlloc'ed at end) */
  struct gpuhal__deferred_call_s* staging_put_off; /* the record its free takes (gpuhal__deferred_call_reserve) */

  gpuhal__mutex_t action_mutex;
  gpuhal__execute_action_t* free_actions;
};
/* A buffer's device address, or 0 while it has none (a queue_alloca not yet issued, or
 * a buffer already deallocated). */
GPUHAL__PRIVATE uint64_t gpuhal__buffer_address(gpuhal_buffer_t* buffer);
/* ---- recording: common checks and storage ---- */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_recording(gpuhal_command_buffer_t* cb, const char* func);

#define GPUHAL__CHECK_RECORDING(cb)                                      \
  do {                                                                   \
    GPUHAL__CHECK_OBJECT(cb, GPUHAL__MAGIC_COMMAND_BUFFER);              \
    GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_recording((cb), __func__)); \
  } while (0)

GPUHAL__PRIVATE int gpuhal__cb_is_graph(const gpuhal_command_buffer_t* cb);

/* A buffer operand: a live buffer of this device. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_buffer(gpuhal_command_buffer_t* cb, gpuhal_buffer_t* buffer,
                                                        const char* func, const char* what);

/* Checks [offset, offset + size) of a ref (against the buffer, or later against the bound
 * buffer for a slot) and returns the ref in internal form. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_ref(gpuhal_command_buffer_t* cb, gpuhal_buffer_ref_t ref,
                                                     uint64_t size, const char* func, const char* what,
                                                     gpuhal__ref_t* out);

/* A ref whose address is resolved at each execute: a slot, or a transient (queue_alloca)
 * buffer, even one whose address is known now: its memory goes back to the pool at its
 * dealloca, and a later allocation may get the same address, so an address baked in at
 * record time could write into someone else's memory. */
GPUHAL__PRIVATE int gpuhal__ref_is_late(const gpuhal__ref_t* ref);

/* Notes what a recorded ref needs from the binding table (after the command is accepted). */
GPUHAL__PRIVATE void gpuhal__cb_note_slot(gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref, uint64_t size);

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_retain_buffer(gpuhal_command_buffer_t* cb, gpuhal_buffer_t* buffer);

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_retain_executable(gpuhal_command_buffer_t* cb,
                                                             gpuhal_executable_t* executable);

/* Makes room to retain `count` more buffers, so that retaining after a command was
 * appended cannot fail. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_reserve_retained(gpuhal_command_buffer_t* cb, uint32_t count);

/* Appends a zeroed command; the caller fills it in. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_append(gpuhal_command_buffer_t* cb, gpuhal__cmd_type_t type,
                                                  gpuhal__cmd_t** out);

/* Reserves room for `count` more arguments with `bytes` of values (so that appending them
 * cannot fail halfway). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_reserve_args(gpuhal_command_buffer_t* cb, uint32_t count, size_t bytes);

/* The most bytes of parameters a kernel launch takes (CUDA 12.1 and later, compute capability
 * 7.0 and later); a larger gpuhal_arg_bytes can never be passed. */
#define GPUHAL__KERNEL_PARAM_BYTES_MAX 32764u

/* Appends one argument value (space reserved by gpuhal__cb_reserve_args). */
GPUHAL__PRIVATE gpuhal__cmd_arg_t* gpuhal__cb_push_arg(gpuhal_command_buffer_t* cb, const void* value, uint32_t size);

/* An address argument: its value now when known, else resolved at execute. */
GPUHAL__PRIVATE void gpuhal__cb_push_address_arg(gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref);

/* ---- tensor map arguments (command_buffer_tensor_map.c) ---- */
#define GPUHAL__TENSOR_MAP_BYTES 128u
#define GPUHAL__LATE_VALUE_MAX GPUHAL__TENSOR_MAP_BYTES
/* Checks a TENSOR_MAP argument's map and memory (`what` is "args[i]"): every rule of
 * cuTensorMapEncodeTiled, naming the field; a buffer's alignment and extent. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_tensor_map(gpuhal_command_buffer_t* cb, const gpuhal_arg_t* arg,
                                                            const char* func, const char* what);
/* The bytes a map's tensor spans from its address (the last element's end). */
GPUHAL__PRIVATE uint64_t gpuhal__tensor_map_extent(const gpuhal_tensor_map_t* map);
/* Makes room for `count` more tensor maps. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_reserve_tensor_maps(gpuhal_command_buffer_t* cb, uint32_t count);
/* Appends a tensor map argument over `ref` (room reserved), encoded at each execute. */
GPUHAL__PRIVATE void gpuhal__cb_push_tensor_map_arg(gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref,
                                                    const gpuhal_tensor_map_t* map);
/* The value of a late argument for an execute: its address, or its tensor map encoded with
 * it (arg->late_size bytes into `out`). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_late_value(const gpuhal_command_buffer_t* cb,
                                                      const gpuhal__execute_action_t* action,
                                                      const gpuhal__cmd_arg_t* arg,
                                                      unsigned char out[GPUHAL__LATE_VALUE_MAX]);
/* ---- conditions and regions (command_buffer_condition.c) ---- */
/* Checks a CONDITION argument (`what` is "args[i]"): a condition of this command buffer
 * whose region encloses the dispatch being recorded. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_condition_arg(const gpuhal_command_buffer_t* cb,
                                                               const gpuhal_arg_t* arg, const char* func,
                                                               const char* what);
/* Appends a CONDITION argument (room reserved): 8 bytes, written when the graph is built. */
GPUHAL__PRIVATE void gpuhal__cb_push_condition_arg(gpuhal_command_buffer_t* cb, uint32_t condition_id);
/* At end: FAILED_PRECONDITION while a region is open or a condition controls none. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_regions_at_end(const gpuhal_command_buffer_t* cb);
/* GRAPH build: makes the handles of the conditions of `region` (0: the top level) on
 * `graph`, which holds that region's commands, and writes them into the arguments that
 * take them. In the device's context. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__graph_make_conditions(gpuhal_command_buffer_t* cb, CUgraph graph,
                                                              uint32_t region);
/* GRAPH build: adds the conditional node of the REGION_BEGIN command `cmd` to `graph`
 * (cmd->node) and returns its body graph, owned by the node. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__graph_add_region(gpuhal_command_buffer_t* cb, CUgraph graph, gpuhal__cmd_t* cmd,
                                                         const CUgraphNode* deps, size_t dep_count, CUgraph* out_body);
/* A memset can do it: 1, 2 or 4-byte pattern and a destination aligned to it. */
GPUHAL__PRIVATE int gpuhal__fill_is_memset(uint32_t pattern_size, uint64_t address);
GPUHAL__PRIVATE unsigned gpuhal__memset_value(const gpuhal__cmd_t* cmd);
/* The largest piece of a copy in a graph. An H200 (driver 580) runs a device-to-device
 * memcpy node of 512 MiB or more at about 0.64x the speed of the same copy on a stream, and
 * pieces of up to 256 MiB, chained, at the stream's speed (tests/bench/RESULTS.md). So a
 * graph's copies are memcpy nodes of at most this many bytes, one after another, and so are
 * the copies that one-rank collectives capture (channel.c). A test may define it smaller. */
#ifndef GPUHAL__GRAPH_COPY_PIECE
#define GPUHAL__GRAPH_COPY_PIECE ((uint64_t)256 << 20)
#endif
/* A device-to-device copy of `size` bytes as a memcpy node's parameters. */
GPUHAL__PRIVATE void gpuhal__memcpy_params(CUdeviceptr dst, CUdeviceptr src, uint64_t size, CUDA_MEMCPY3D* m);
/* ---- native commands and peer copies (multi-device hook; owned by the multi-device
 * engineer, used by channel.h) ----
 * A NATIVE command is work that another module puts on a stream itself (NCCL collectives).
 * STREAM command buffers call ops->issue at every execute with the queue's stream: on the
 * device's worker when ops->may_block, else on whichever thread issues the execute. GRAPH command buffers capture it once, when the graph is built (end): on
 * the device's worker, into a scratch stream in relaxed capture mode, and add the captured
 * graph as a child graph node. Consecutive NATIVE commands with the same ops (no barrier or
 * other command between them) form one group: group_begin, every issue, group_end (for
 * NCCL: ncclGroupStart/End), captured into one child graph. */
typedef struct gpuhal__native_ops_s {
  const char* name;
  gpuhal_status_t (*issue)(void* user, gpuhal_device_t* device, CUstream stream);
  gpuhal_status_t (*group_begin)(gpuhal_device_t* device); /* optional */
  gpuhal_status_t (*group_end)(gpuhal_device_t* device);   /* optional; called whenever begin succeeded */
  void (*release)(void* user);                             /* optional; when the command buffer goes */
  /* 1: the issue may block until other ranks join (NCCL), so the command buffer is issued
   * on the worker and a GRAPH one built there (has_native); 0: any thread may issue it. */
  int may_block;
  /* Optional; at every execute of a GRAPH command buffer, before its launch: an error when
   * what the capture baked in is gone (a queue_alloca buffer deallocated since). */
  gpuhal_status_t (*check)(void* user);
} gpuhal__native_ops_t;

/* Appends a NATIVE command (the caller checked the recording state). On success the
 * command buffer owns `user` (ops->release at destroy). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_record_native(gpuhal_command_buffer_t* cb, const gpuhal__native_ops_t* ops,
                                                         void* user);

/* Issues the group that starts at `first` (a leader) into `stream`. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__native_issue_group(gpuhal_command_buffer_t* cb, const gpuhal__cmd_t* first,
                                                           CUstream stream);

/* Graph build: the group led by `cmd` becomes one child graph node. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__graph_add_native(gpuhal_command_buffer_t* cb, gpuhal__cmd_t* cmd,
                                                         const CUgraphNode* deps, size_t dep_count);

/* Peer copies: a copy operand may be a buffer of another device of the same driver. */
GPUHAL__PRIVATE int gpuhal__ref_is_peer(const gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref);

/* gpuhal__cb_check_ref for copies: also accepts a buffer of another device of the driver. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_copy_ref(gpuhal_command_buffer_t* cb, gpuhal_buffer_ref_t ref,
                                                          uint64_t size, const char* func, const char* what,
                                                          gpuhal__ref_t* out);
/* ---- end of the multi-device hook ---- */
/* What a recorded command is, for messages (a graph does a late-bound fill, copy or update
 * with a built-in kernel). */
GPUHAL__PRIVATE const char* gpuhal__cmd_name(const gpuhal__cmd_t* cmd);
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_resolve(const gpuhal_command_buffer_t* cb,
                                                   const gpuhal__execute_action_t* action, const gpuhal__ref_t* ref,
                                                   uint64_t* out_address);

/* Writes the late arguments of a dispatch into `values`; *out_changed says whether any
 * differs from what was there. Nothing is written unless every address resolves. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_resolve_args(gpuhal_command_buffer_t* cb,
                                                        const gpuhal__execute_action_t* action,
                                                        const gpuhal__cmd_t* cmd, int* out_changed);
/* gpuhal's own references (queue actions). */
GPUHAL__PRIVATE void gpuhal__cb_retain_ref(gpuhal_command_buffer_t* cb);
GPUHAL__PRIVATE void gpuhal__cb_release_ref(gpuhal_command_buffer_t* cb);

/* ---- launch attributes (command_buffer_launch.c) ---- */
/* Checks `options` for a dispatch of `kernel` with this geometry and returns them in
 * recorded form (cluster axes 0 made 1, or all zero for no cluster). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_launch_check(gpuhal_command_buffer_t* cb, const gpuhal_kernel_t* kernel,
                                                        const uint32_t grid[3], const uint32_t block[3],
                                                        uint32_t shared_bytes, const gpuhal_dispatch_options_t* options,
                                                        gpuhal_dispatch_options_t* out);
/* 1 when the dispatch has launch attributes (then it is launched with cuLaunchKernelEx). */
GPUHAL__PRIVATE int gpuhal__cmd_has_launch_attrs(const gpuhal__cmd_t* cmd);
/* STREAM: launches dispatch `index` of the command buffer with its attributes; the
 * programmatic one only when the command before it is a dispatch. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_launch_ex(gpuhal_command_buffer_t* cb, uint32_t index, CUstream stream);
/* GRAPH: sets the kernel node's attributes (cluster, cooperative, priority). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__graph_set_launch_attrs(gpuhal_command_buffer_t* cb, const gpuhal__cmd_t* cmd);
/* GRAPH: 1 when `cmd`, ordered after the node of `dependency_cmd` alone (NULL: after
 * something else), gets a programmatic edge from it (gpuhal_dispatch_options_t). */
GPUHAL__PRIVATE int gpuhal__graph_is_programmatic(const gpuhal_command_buffer_t* cb,
                                                  const gpuhal__cmd_t* dependency_cmd, const gpuhal__cmd_t* cmd);
GPUHAL__PRIVATE gpuhal_status_t gpuhal__graph_add_programmatic_edge(gpuhal_command_buffer_t* cb, CUgraph graph,
                                                                    CUgraphNode from, CUgraphNode to);
/* GRAPH: the flags to instantiate with (node priorities when a dispatch has one). */
GPUHAL__PRIVATE unsigned long long gpuhal__graph_instantiate_flags(const gpuhal_command_buffer_t* cb);

/* The GRAPH back end (command_buffer.h, gpuhal__cb_backend_t). */
GPUHAL__PRIVATE const gpuhal__cb_backend_t* gpuhal__cb_graph_backend(void);

/* The STREAM back end (command_buffer.h, gpuhal__cb_backend_t). */
GPUHAL__PRIVATE const gpuhal__cb_backend_t* gpuhal__cb_stream_backend(void);

#endif /* GPUHAL_SRC_COMMAND_BUFFER_H */
