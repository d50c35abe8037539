/* command_buffer: recorded GPU work (dispatches, copies, fills, updates, barriers) and
 * gpuhal_queue_execute (DESIGN §7).
 *
 * Two recorders behind one API:
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
 * the execute after the alloca's signal), or after its dealloca was issued (order the
 * dealloca after the execute's signal; a dealloca queued but not yet issued does not
 * refuse an execute issued before it). To use a new transient buffer at each execute,
 * name a binding slot.
 *
 * Recording: one thread at a time per command buffer. Every command is validated when it
 * is recorded; a rejected command leaves the command buffer as it was (still recording).
 * A command buffer retains the buffers and kernels (their executables) it names. */

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

/* A kernel argument: a buffer address (+offset) passed as a 64-bit pointer, a binding
 * slot (+offset) resolved at execute, or plain bytes copied when the dispatch is recorded.
 * Make them with the constructors below. */
typedef enum gpuhal_arg_kind_e {
  GPUHAL_ARG_BYTES = 0,
  GPUHAL_ARG_BUFFER = 1,
  GPUHAL_ARG_SLOT = 2
} gpuhal_arg_kind_t;
typedef struct gpuhal_arg_t {
  gpuhal_arg_kind_t kind;
  uint32_t slot;           /* SLOT */
  gpuhal_buffer_t* buffer; /* BUFFER */
  uint64_t offset;         /* BUFFER, SLOT: bytes added to the address */
  const void* data;        /* BYTES: the value; NULL: the value is in inline_value */
  uint32_t size;           /* BYTES: bytes of the value */
  uint64_t inline_value[2];
} gpuhal_arg_t;
GPUHAL_API gpuhal_arg_t gpuhal_arg_buffer(gpuhal_buffer_t* buffer, uint64_t offset);
GPUHAL_API gpuhal_arg_t gpuhal_arg_slot(uint32_t slot, uint64_t offset);
/* `data` must stay valid until the gpuhal_cmd_dispatch that takes the argument returns. */
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
 * Entries of slots the command buffer does not use may be NULL. */
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
/* Releasing NULL is a no-op. Executes in flight keep the command buffer alive. */
GPUHAL_API void gpuhal_command_buffer_release(gpuhal_command_buffer_t* command_buffer);
/* Starts recording; a command buffer is recorded once. */
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_begin(gpuhal_command_buffer_t* command_buffer);
/* Ends recording. A GRAPH command buffer is built and instantiated here (the CUDA errors
 * of building it surface here). */
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_end(gpuhal_command_buffer_t* command_buffer);

/* Launches `kernel` with one argument per kernel parameter. Checked: the kernel belongs to
 * the command buffer's device; grid and block within the device's limits; block threads
 * within the kernel's limit; shared_bytes within the kernel's dynamic shared memory limit;
 * argument count and sizes against the kernel's parameters (when the driver can say);
 * buffer arguments of this device with offset <= size; slots < binding_slots. */
GPUHAL_API gpuhal_status_t gpuhal_cmd_dispatch(gpuhal_command_buffer_t* command_buffer, gpuhal_kernel_t* kernel,
                                               gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared_bytes,
                                               uint32_t arg_count, const gpuhal_arg_t* args);
/* Copies size bytes from src to dst (the ranges must not overlap). */
GPUHAL_API gpuhal_status_t gpuhal_cmd_copy(gpuhal_command_buffer_t* command_buffer, gpuhal_buffer_ref_t src,
                                           gpuhal_buffer_ref_t dst, uint64_t size);
/* Repeats a pattern of 1, 2, 4, 8 or 16 bytes over [dst, dst + size); the offset and size
 * must be multiples of pattern_size. */
GPUHAL_API gpuhal_status_t gpuhal_cmd_fill(gpuhal_command_buffer_t* command_buffer, gpuhal_buffer_ref_t dst,
                                           uint64_t size, const void* pattern, uint32_t pattern_size);
/* Writes size host bytes to dst when executed; the bytes are copied now. */
GPUHAL_API gpuhal_status_t gpuhal_cmd_update(gpuhal_command_buffer_t* command_buffer, const void* host_src,
                                             gpuhal_buffer_ref_t dst, uint64_t size);
/* Everything recorded before the barrier completes before anything recorded after it. */
GPUHAL_API gpuhal_status_t gpuhal_cmd_barrier(gpuhal_command_buffer_t* command_buffer);

/* The CUgraph of an ended GRAPH command buffer (as void*: gpuhal's public header carries
 * no CUDA types), owned by the command buffer: for inspection (cuGraphGetNodes, ...) and
 * for embedding as a child graph. FAILED_PRECONDITION for STREAM or before end. */
GPUHAL_API gpuhal_status_t gpuhal_command_buffer_native_graph(gpuhal_command_buffer_t* command_buffer,
                                                              void** out_cu_graph);

/* Queues the command buffer on `queue` after `wait`; `signal` is reached when it has run.
 * A NULL command buffer is a barrier (it only orders wait before signal). `bindings`
 * supplies the binding slots (NULL when the command buffer uses none); its buffers are
 * retained until the work completes. Never blocks. Addresses of slots and transient
 * buffers are resolved when the execute is issued; one that has none then (see
 * "Transient buffers" above) fails `signal` with FAILED_PRECONDITION and nothing runs. */
GPUHAL_API gpuhal_status_t gpuhal_queue_execute(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                                gpuhal_semaphore_list_t signal,
                                                gpuhal_command_buffer_t* command_buffer,
                                                const gpuhal_binding_table_t* bindings);

/* Tells device.h that the command buffer hooks exist. */
#define GPUHAL__HAVE_COMMAND_BUFFER 1

/* ---- gpuhal:implementation ---- */

#define GPUHAL__MAGIC_COMMAND_BUFFER 0x434D4442u /* "CMDB" */

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

/* ---- built-in kernels ----
 * Their PTX (gpuhal__builtin_ptx_lines, one string per line) is generated from
 * tests/kernels/gpuhal_builtin_fill.cu by tools/embed_ptx.py; test_command_buffer checks
 * it against the checked-in .ptx, CI checks that against the .cu. */
#include "builtin_ptx.h"

/* The built-in kernels of one device (kept in its module cache state, loaded on first use). */
typedef struct gpuhal__builtins_s {
  gpuhal__module_entry_t* entry;
  CUfunction fill; /* (u8* dst, u64 size, u64 pattern_lo, u64 pattern_hi) */
  CUfunction copy; /* (u8* dst, const u8* src, u64 size) */
} gpuhal__builtins_t;

#define GPUHAL__BUILTIN_BLOCK 256u
#define GPUHAL__BUILTIN_MAX_GRID 1024u

/* The PTX text, joined; the caller frees it. */
static gpuhal_status_t gpuhal__builtin_ptx_join(const gpuhal_allocator_t* allocator, char** out_text,
                                                size_t* out_size) {
  size_t i, n = GPUHAL__ARRAY_SIZE(gpuhal__builtin_ptx_lines), size = 0;
  char* text;
  char* p;
  for (i = 0; i < n; ++i) size += strlen(gpuhal__builtin_ptx_lines[i]) + 1;
  text = (char*)gpuhal__alloc(allocator, size);
  if (!text) return gpuhal__status_oom("the built-in kernels' PTX", size);
  p = text;
  for (i = 0; i < n; ++i) {
    size_t len = strlen(gpuhal__builtin_ptx_lines[i]);
    memcpy(p, gpuhal__builtin_ptx_lines[i], len);
    p += len;
    *p++ = (i + 1 < n) ? '\n' : 0;
  }
  *out_text = text;
  *out_size = size - 1;
  return NULL;
}

static void gpuhal__builtins_destroy(gpuhal_device_t* device, void* opaque) {
  gpuhal__builtins_t* builtins = (gpuhal__builtins_t*)opaque;
  gpuhal__module_cache_release(device, builtins->entry);
  gpuhal__free(device->allocator, builtins);
}

static gpuhal_status_t gpuhal__builtins_load(gpuhal_device_t* device, gpuhal__builtins_t** out_builtins) {
  gpuhal__builtins_t* builtins = NULL;
  char* ptx = NULL;
  size_t ptx_size = 0;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  GPUHAL__RETURN_IF_ERROR(gpuhal__builtin_ptx_join(device->allocator, &ptx, &ptx_size));
  st = gpuhal__alloc_zeroed(device->allocator, sizeof(*builtins), "the built-in kernels", (void**)&builtins);
  if (!st) st = gpuhal__module_cache_load(device, ptx, ptx_size, NULL, &builtins->entry);
  gpuhal__free(device->allocator, ptx);
  if (!st) {
    st = gpuhal__context_enter(device, &scope);
    if (!st) {
      st = GPUHAL__CU(device->cu, cuModuleGetFunction, (&builtins->fill, builtins->entry->module, "gpuhal_builtin_fill"));
      if (!st)
        st = GPUHAL__CU(device->cu, cuModuleGetFunction,
                        (&builtins->copy, builtins->entry->module, "gpuhal_builtin_copy"));
      if (!st) st = gpuhal__function_load_now(device, builtins->fill);
      if (!st) st = gpuhal__function_load_now(device, builtins->copy);
      gpuhal__context_leave(device, &scope);
    }
  }
  if (st) {
    if (builtins && builtins->entry) gpuhal__module_cache_release(device, builtins->entry);
    gpuhal__free(device->allocator, builtins);
    return gpuhal_status_annotate(st, "loading gpuhal's built-in fill/copy kernels");
  }
  *out_builtins = builtins;
  return NULL;
}

/* The device's built-in kernels, loaded on first use (by the first thread to get there;
 * a racing loser drops its copy). */
static gpuhal_status_t gpuhal__builtins_get(gpuhal_device_t* device, gpuhal__builtins_t** out_builtins) {
  gpuhal__module_cache_t* cache = gpuhal__module_cache_of(device);
  gpuhal__builtins_t* loaded = NULL;
  gpuhal__mutex_lock(&cache->mutex);
  *out_builtins = (gpuhal__builtins_t*)cache->builtins;
  gpuhal__mutex_unlock(&cache->mutex);
  if (*out_builtins) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__builtins_load(device, &loaded));
  gpuhal__mutex_lock(&cache->mutex);
  if (!cache->builtins) {
    cache->builtins = loaded;
    cache->builtins_destroy = gpuhal__builtins_destroy;
    loaded = NULL;
  }
  *out_builtins = (gpuhal__builtins_t*)cache->builtins;
  gpuhal__mutex_unlock(&cache->mutex);
  if (loaded) gpuhal__builtins_destroy(device, loaded);
  return NULL;
}

/* On the memop path the built-in kernels load with the device: CUDA loads code only into an
 * idle context (tools/probe/park_probe.c), and later a stream may be parked on a value that
 * only the thread recording a fill will signal. (So creating a device there waits for the
 * context's work in flight, as loading an executable does.) If they do not load, the
 * device never parks on a GPU value wait; its first fill tries again and reports why. */
static void gpuhal__command_buffer_device_ready(gpuhal_device_t* device) {
  gpuhal__builtins_t* builtins = NULL;
  gpuhal_status_t status;
  if (!device->driver->memops) return;
  status = gpuhal__builtins_get(device, &builtins);
  if (!status) return;
  device->no_gpu_park = 1;
  gpuhal__log(device->logger, GPUHAL_LOG_WARN, "device %d: %s; its GPU work waits for semaphore values on the host",
              device->ordinal, gpuhal_status_message(status));
  gpuhal_status_free(status);
}

/* Grid for a built-in kernel over `size` bytes: one thread per 16 bytes (plus the head and
 * tail bytes), capped; the kernels loop with a grid stride. */
static uint32_t gpuhal__builtin_grid(uint64_t size) {
  uint64_t threads = size / 16 + 16;
  uint64_t blocks = (threads + GPUHAL__BUILTIN_BLOCK - 1) / GPUHAL__BUILTIN_BLOCK;
  return (uint32_t)GPUHAL__MIN(blocks, (uint64_t)GPUHAL__BUILTIN_MAX_GRID);
}

/* ---- recorded commands ---- */
typedef enum gpuhal__cmd_type_e {
  GPUHAL__CMD_DISPATCH = 1,
  GPUHAL__CMD_COPY = 2,
  GPUHAL__CMD_FILL = 3,
  GPUHAL__CMD_UPDATE = 4,
  GPUHAL__CMD_BARRIER = 5,
  GPUHAL__CMD_NATIVE = 6 /* multi-device hook: see "native commands" below */
} gpuhal__cmd_type_t;

/* Where an address comes from. */
typedef enum gpuhal__ref_kind_e {
  GPUHAL__REF_BUFFER = 0,  /* buffer->address (read at execute when it was 0 at record) */
  GPUHAL__REF_SLOT = 1,    /* the binding table's entry `slot` */
  GPUHAL__REF_STAGING = 2  /* the command buffer's device copy of its update bytes (graphs) */
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
  uint32_t value_offset;
} gpuhal__cmd_arg_t;

typedef struct gpuhal__cmd_s {
  gpuhal__cmd_type_t type;
  uint32_t late_args;   /* DISPATCH: arguments resolved at execute */
  uint32_t stale;       /* graph: node parameters must be rewritten at the next execute */
  CUgraphNode node;     /* graph: the node of this command */
  /* DISPATCH */
  CUfunction function;
  const char* kernel_name;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  uint32_t arg_first;
  uint32_t arg_count;
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
} gpuhal__cmd_t;

/* ---- trace hook (trace.h; see device.h): a GPU span per command of a STREAM execute ---- */
#ifdef GPUHAL__HAVE_TRACE
static void gpuhal__trace_command(gpuhal_device_t* device, CUstream stream, const gpuhal__cmd_t* cmd);
#endif

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

/* The device limits a dispatch is checked against. */
typedef struct gpuhal__dispatch_limits_s {
  int max_block[3];
  int max_grid[3];
  int max_threads_per_block;
} gpuhal__dispatch_limits_t;

struct gpuhal_command_buffer_s {
  gpuhal__object_t object;
  gpuhal_device_t* device; /* retained */
  gpuhal_command_buffer_flags_t flags;
  uint32_t binding_slots;
  gpuhal__cb_state_t state;
  int32_t executed; /* ONE_SHOT: set by the first execute */
  gpuhal__dispatch_limits_t limits;
  gpuhal__builtins_t* builtins; /* NULL until a command needs them */

  gpuhal__cmd_t* cmds;
  uint32_t cmd_count, cmd_capacity;
  gpuhal__cmd_arg_t* args;
  uint32_t arg_count, arg_capacity;
  unsigned char* values; /* kernel argument values, 8-byte aligned each */
  size_t values_size, values_capacity;
  unsigned char* update_data; /* bytes of cmd_update, 16-byte aligned each */
  size_t update_size, update_capacity;
  void** param_ptrs; /* built at end: the kernelParams arrays of every dispatch */

  uint64_t* slot_extent; /* per slot: the bytes past the table offset that commands touch */
  unsigned char* slot_used;

  gpuhal_buffer_t** retained_buffers;
  uint32_t retained_buffer_count, retained_buffer_capacity;
  gpuhal_executable_t** retained_executables;
  uint32_t retained_executable_count, retained_executable_capacity;

  /* Collectives (NATIVE commands) need every rank to take part at once when NCCL sets up
   * its connections, so such a command buffer is issued only on the device's worker (never
   * by the submitting thread), and a GRAPH one is built there at its first execute (not at
   * end, where one thread recording rank after rank would wait for itself). */
  int has_native;
  int graph_deferred; /* GRAPH with NATIVE commands, not built yet */

  /* GRAPH */
  CUgraph graph;
  CUgraphExec exec;
  uint32_t node_count;
  uint32_t* late_cmds; /* indices of dispatches with late arguments */
  uint32_t late_cmd_count;
  int reads_allocas; /* set at end: it names binding slots or queue_alloca buffers */
  CUdeviceptr staging; /* device copy of update_data (cuMemAlloc'ed at end) */

  gpuhal__mutex_t action_mutex;
  gpuhal__execute_action_t* free_actions;
};

/* Grows an array to hold `needed` elements (doubling). */
static gpuhal_status_t gpuhal__grow(const gpuhal_allocator_t* allocator, void** data, size_t* capacity,
                                    size_t needed, size_t element_size, const char* what) {
  size_t new_capacity;
  void* grown;
  if (needed <= *capacity) return NULL;
  new_capacity = *capacity ? *capacity : 16;
  while (new_capacity < needed) new_capacity *= 2;
  if (new_capacity > SIZE_MAX / element_size) return gpuhal__status_oom(what, SIZE_MAX);
  grown = gpuhal__alloc(allocator, new_capacity * element_size);
  if (!grown) return gpuhal__status_oom(what, new_capacity * element_size);
  if (*data) memcpy(grown, *data, *capacity * element_size);
  gpuhal__free(allocator, *data);
  *data = grown;
  *capacity = new_capacity;
  return NULL;
}
static gpuhal_status_t gpuhal__grow32(const gpuhal_allocator_t* allocator, void** data, uint32_t* capacity,
                                      size_t needed, size_t element_size, const char* what) {
  size_t cap = *capacity;
  if (needed > UINT32_MAX) return gpuhal__status_oom(what, SIZE_MAX);
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow(allocator, data, &cap, needed, element_size, what));
  *capacity = (uint32_t)GPUHAL__MIN(cap, (size_t)UINT32_MAX);
  return NULL;
}

/* A buffer's device address, or 0 while it has none (a queue_alloca not yet issued, or
 * a buffer already deallocated). */
static uint64_t gpuhal__buffer_address(gpuhal_buffer_t* buffer) {
  if (gpuhal__atomic_load(&buffer->state) != (int32_t)GPUHAL__BUFFER_LIVE) return 0;
  return (uint64_t)buffer->address;
}

/* ---- create / retain / release ---- */
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
                                               "a command buffer", (void**)&cb));
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
  gpuhal__mutex_init(&cb->action_mutex);
  *out_command_buffer = cb;
  return NULL;
}

GPUHAL_API void gpuhal_command_buffer_retain(gpuhal_command_buffer_t* command_buffer) {
  if (!command_buffer || gpuhal__atomic_load(&command_buffer->object.magic) != GPUHAL__MAGIC_COMMAND_BUFFER) return;
  gpuhal__object_user_retain(&command_buffer->object);
}

/* Destroys the graph, its instantiation and the staging memory; the device's context is
 * current. Every handle is cleared whatever fails (a failed destroy leaves the object to
 * the driver, which is all that can be done with it). */
static gpuhal_status_t gpuhal__cb_destroy_graph_current(void* arg) {
  gpuhal_command_buffer_t* cb = (gpuhal_command_buffer_t*)arg;
  const gpuhal__cuda_symbols_t* cu = cb->device->cu;
  gpuhal_status_t st = NULL, st2 = NULL, st3 = NULL;
  if (cb->exec) st = gpuhal__device_graph_exec_destroy(cb->device, cb->exec);
  if (cb->graph) st2 = GPUHAL__CU(cu, cuGraphDestroy, (cb->graph));
  if (cb->staging) st3 = gpuhal__device_free(cb->device, NULL, cb->staging); /* may be put off */
  cb->exec = NULL;
  cb->graph = NULL;
  cb->staging = 0;
  if (!st) st = st2;
  else gpuhal_status_free(st2);
  if (!st) st = st3;
  else gpuhal_status_free(st3);
  return st;
}

/* Runs on any thread, with no gpuhal lock held (a last release may come from the
 * completion thread or the worker). When this thread cannot take the device's context,
 * the worker, which holds it for its life, does the destroying (run directly when this is
 * the worker): the handles are never dropped with their objects still alive. */
static void gpuhal__cb_destroy_graph(gpuhal_command_buffer_t* cb) {
  gpuhal_device_t* device = cb->device;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  if (!cb->graph && !cb->exec && !cb->staging) return;
  st = gpuhal__context_enter(device, &scope);
  if (!st) {
    st = gpuhal__cb_destroy_graph_current(cb);
    gpuhal__context_leave(device, &scope);
  } else {
    gpuhal_status_free(st);
    st = gpuhal__worker_call(device, gpuhal__cb_destroy_graph_current, cb);
  }
  if (st) {
    gpuhal__log(device->logger, GPUHAL_LOG_WARN, "destroying a command buffer's graph: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
  }
}

static void gpuhal__cb_release_natives(gpuhal_command_buffer_t* cb); /* multi-device hook, defined below */
static void gpuhal__cb_destroy(gpuhal_command_buffer_t* cb) {
  gpuhal_device_t* device = cb->device;
  const gpuhal_allocator_t* a = device->allocator;
  uint32_t i;
  gpuhal__cb_destroy_graph(cb);
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

/* gpuhal's own references (queue actions). */
static void gpuhal__cb_retain_ref(gpuhal_command_buffer_t* cb) { gpuhal__object_retain(&cb->object); }
static void gpuhal__cb_release_ref(gpuhal_command_buffer_t* cb) {
  if (gpuhal__object_release(&cb->object)) gpuhal__cb_destroy(cb);
}

GPUHAL_API void gpuhal_command_buffer_release(gpuhal_command_buffer_t* command_buffer) {
  if (!command_buffer || gpuhal__atomic_load(&command_buffer->object.magic) != GPUHAL__MAGIC_COMMAND_BUFFER) return;
  if (!gpuhal__object_user_release(&command_buffer->object)) {
    gpuhal__log_extra_release(command_buffer->device->logger, __func__, "a command buffer");
    return;
  }
  gpuhal__cb_release_ref(command_buffer);
}

/* ---- recording: common checks and storage ---- */
static gpuhal_status_t gpuhal__cb_check_recording(gpuhal_command_buffer_t* cb, const char* func) {
  if (cb->state == GPUHAL__CB_RECORDING) return NULL;
  if (cb->state == GPUHAL__CB_INITIAL)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "%s: the command buffer is not recording: call gpuhal_command_buffer_begin first", func);
  return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                            "%s: the command buffer has ended: commands can only be recorded between begin and end",
                            func);
}

#define GPUHAL__CHECK_RECORDING(cb)                                   \
  do {                                                                \
    GPUHAL__CHECK_OBJECT(cb, GPUHAL__MAGIC_COMMAND_BUFFER);           \
    GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_recording((cb), __func__)); \
  } while (0)

static int gpuhal__cb_is_graph(const gpuhal_command_buffer_t* cb) {
  return (cb->flags & GPUHAL_COMMAND_BUFFER_STREAM) == 0;
}

/* A buffer operand: a live buffer of this device. */
static gpuhal_status_t gpuhal__cb_check_buffer(gpuhal_command_buffer_t* cb, gpuhal_buffer_t* buffer, const char* func,
                                               const char* what) {
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_check(buffer, GPUHAL__MAGIC_BUFFER, func, what));
  if (buffer->device != cb->device)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument '%s' is a buffer of another device (ordinal %d); the command buffer "
                              "belongs to device %d",
                              func, what, buffer->device->ordinal, cb->device->ordinal);
  return NULL;
}

/* Checks [offset, offset + size) of a ref (against the buffer, or later against the bound
 * buffer for a slot) and returns the ref in internal form. */
static gpuhal_status_t gpuhal__cb_check_ref(gpuhal_command_buffer_t* cb, gpuhal_buffer_ref_t ref, uint64_t size,
                                            const char* func, const char* what, gpuhal__ref_t* out) {
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

/* A ref whose address is resolved at each execute: a slot, or a transient (queue_alloca)
 * buffer, even one whose address is known now: its memory goes back to the pool at its
 * dealloca, and a later allocation may get the same address, so an address baked in at
 * record time could write into someone else's memory. */
static int gpuhal__ref_is_late(const gpuhal__ref_t* ref) {
  if (ref->kind == GPUHAL__REF_SLOT) return 1;
  return ref->kind == GPUHAL__REF_BUFFER && (ref->buffer->pending || gpuhal__buffer_address(ref->buffer) == 0);
}

/* Notes what a recorded ref needs from the binding table (after the command is accepted). */
static void gpuhal__cb_note_slot(gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref, uint64_t size) {
  if (ref->kind != GPUHAL__REF_SLOT) return;
  cb->slot_used[ref->slot] = 1;
  if (ref->offset + size > cb->slot_extent[ref->slot]) cb->slot_extent[ref->slot] = ref->offset + size;
}

static gpuhal_status_t gpuhal__cb_retain_buffer(gpuhal_command_buffer_t* cb, gpuhal_buffer_t* buffer) {
  if (!buffer) return NULL;
  if (cb->retained_buffer_count && cb->retained_buffers[cb->retained_buffer_count - 1] == buffer) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(cb->device->allocator, (void**)&cb->retained_buffers,
                                         &cb->retained_buffer_capacity, cb->retained_buffer_count + 1,
                                         sizeof(gpuhal_buffer_t*), "command buffer resources"));
  gpuhal__buffer_retain_ref(buffer);
  cb->retained_buffers[cb->retained_buffer_count++] = buffer;
  return NULL;
}

static gpuhal_status_t gpuhal__cb_retain_executable(gpuhal_command_buffer_t* cb, gpuhal_executable_t* executable) {
  if (cb->retained_executable_count && cb->retained_executables[cb->retained_executable_count - 1] == executable)
    return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(cb->device->allocator, (void**)&cb->retained_executables,
                                         &cb->retained_executable_capacity, cb->retained_executable_count + 1,
                                         sizeof(gpuhal_executable_t*), "command buffer resources"));
  gpuhal__executable_retain_ref(executable);
  cb->retained_executables[cb->retained_executable_count++] = executable;
  return NULL;
}

/* Makes room to retain `count` more buffers, so that retaining after a command was
 * appended cannot fail. */
static gpuhal_status_t gpuhal__cb_reserve_retained(gpuhal_command_buffer_t* cb, uint32_t count) {
  return gpuhal__grow32(cb->device->allocator, (void**)&cb->retained_buffers, &cb->retained_buffer_capacity,
                        (size_t)cb->retained_buffer_count + count, sizeof(gpuhal_buffer_t*), "command buffer resources");
}

/* Appends a zeroed command; the caller fills it in. */
static gpuhal_status_t gpuhal__cb_append(gpuhal_command_buffer_t* cb, gpuhal__cmd_type_t type, gpuhal__cmd_t** out) {
  gpuhal__cmd_t* cmd;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(cb->device->allocator, (void**)&cb->cmds, &cb->cmd_capacity,
                                         (size_t)cb->cmd_count + 1, sizeof(gpuhal__cmd_t), "recorded commands"));
  cmd = &cb->cmds[cb->cmd_count++];
  memset(cmd, 0, sizeof(*cmd));
  cmd->type = type;
  *out = cmd;
  return NULL;
}

/* Reserves room for `count` more arguments with `bytes` of values (so that appending them
 * cannot fail halfway). */
static gpuhal_status_t gpuhal__cb_reserve_args(gpuhal_command_buffer_t* cb, uint32_t count, size_t bytes) {
  size_t values_capacity = cb->values_capacity;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(cb->device->allocator, (void**)&cb->args, &cb->arg_capacity,
                                         (size_t)cb->arg_count + count, sizeof(gpuhal__cmd_arg_t),
                                         "kernel arguments"));
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow(cb->device->allocator, (void**)&cb->values, &values_capacity,
                                       cb->values_size + bytes, 1, "kernel argument values"));
  cb->values_capacity = values_capacity;
  if (cb->values_size + bytes > UINT32_MAX) return gpuhal__status_oom("kernel argument values", cb->values_size + bytes);
  return NULL;
}

/* Appends one argument value (space reserved by gpuhal__cb_reserve_args). */
static gpuhal__cmd_arg_t* gpuhal__cb_push_arg(gpuhal_command_buffer_t* cb, const void* value, uint32_t size) {
  gpuhal__cmd_arg_t* arg = &cb->args[cb->arg_count++];
  memset(arg, 0, sizeof(*arg));
  arg->value_offset = (uint32_t)cb->values_size;
  memcpy(cb->values + cb->values_size, value, size);
  cb->values_size += (size + 7u) & ~(size_t)7u;
  return arg;
}

/* An address argument: its value now when known, else resolved at execute. */
static void gpuhal__cb_push_address_arg(gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref) {
  uint64_t value = 0;
  gpuhal__cmd_arg_t* arg;
  int late = gpuhal__ref_is_late(ref) || ref->kind == GPUHAL__REF_STAGING;
  if (!late) value = gpuhal__buffer_address(ref->buffer) + ref->offset;
  arg = gpuhal__cb_push_arg(cb, &value, sizeof(value));
  arg->ref = *ref;
  arg->late = (uint32_t)late;
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
                                                   gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared_bytes) {
  static const char* const axis[3] = {"x", "y", "z"};
  uint32_t g[3], b[3];
  uint64_t threads;
  int i, max_dynamic_shared;
  g[0] = grid.x, g[1] = grid.y, g[2] = grid.z;
  b[0] = block.x, b[1] = block.y, b[2] = block.z;
  for (i = 0; i < 3; ++i) {
    if (g[i] == 0 || g[i] > (uint32_t)cb->limits.max_grid[i])
      return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                                "gpuhal_cmd_dispatch: argument 'grid.%s' is %u; it must be in 1..%d on this device",
                                axis[i], g[i], cb->limits.max_grid[i]);
    if (b[i] == 0 || b[i] > (uint32_t)cb->limits.max_block[i])
      return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                                "gpuhal_cmd_dispatch: argument 'block.%s' is %u; it must be in 1..%d on this device",
                                axis[i], b[i], cb->limits.max_block[i]);
  }
  threads = (uint64_t)b[0] * b[1] * b[2];
  if (threads > (uint64_t)kernel->info.max_threads_per_block)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_cmd_dispatch: argument 'block' has %llu threads; kernel '%s' allows at most %d per "
                              "block on this device",
                              (unsigned long long)threads, kernel->name, kernel->info.max_threads_per_block);
  max_dynamic_shared = __atomic_load_n(&kernel->info.max_dynamic_shared_bytes, __ATOMIC_RELAXED);
  if (shared_bytes > (uint32_t)max_dynamic_shared)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_cmd_dispatch: argument 'shared_bytes' (%u) exceeds kernel '%s''s dynamic shared "
                              "memory limit of %d bytes (raise it with gpuhal_kernel_set_max_dynamic_shared, up to %d)",
                              shared_bytes, kernel->name, max_dynamic_shared,
                              kernel->info.max_dynamic_shared_optin_bytes);
  return NULL;
}

/* Checks argument i against the kernel's parameter i (when the driver told us) and its
 * own rules. */
static gpuhal_status_t gpuhal__dispatch_check_arg(gpuhal_command_buffer_t* cb, const gpuhal_kernel_t* kernel,
                                                  uint32_t i, const gpuhal_arg_t* arg) {
  uint32_t size = arg->kind == GPUHAL_ARG_BYTES ? arg->size : 8u;
  char what[48];
  snprintf(what, sizeof(what), "args[%u]", i);
  switch (arg->kind) {
    case GPUHAL_ARG_BYTES:
      if (arg->size == 0)
        return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "gpuhal_cmd_dispatch: argument '%s' has size 0", what);
      if (!arg->data && arg->size > sizeof(arg->inline_value))
        return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                  "gpuhal_cmd_dispatch: argument '%s' has no data pointer and %u bytes (inline values "
                                  "hold at most 16): make it with gpuhal_arg_bytes",
                                  what, arg->size);
      break;
    case GPUHAL_ARG_BUFFER:
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_check_buffer(cb, arg->buffer, "gpuhal_cmd_dispatch", what));
      if (arg->offset > arg->buffer->size)
        return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                                  "gpuhal_cmd_dispatch: argument '%s': offset %llu is past the end of the buffer (%llu "
                                  "bytes)",
                                  what, (unsigned long long)arg->offset, (unsigned long long)arg->buffer->size);
      break;
    case GPUHAL_ARG_SLOT:
      if (arg->slot >= cb->binding_slots)
        return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                                  "gpuhal_cmd_dispatch: argument '%s' names binding slot %u but the command buffer has "
                                  "%u slot(s)",
                                  what, arg->slot, cb->binding_slots);
      break;
    default:
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "gpuhal_cmd_dispatch: argument '%s' has unknown kind %d (make arguments with "
                                "gpuhal_arg_buffer/_slot/_bytes/_u32/...)",
                                what, (int)arg->kind);
  }
  if (kernel->info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN && kernel->info.param_sizes[i] != size)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_dispatch: argument '%s' is %u bytes but parameter %u of kernel '%s' is %u "
                              "bytes",
                              what, size, i, kernel->name, kernel->info.param_sizes[i]);
  return NULL;
}

/* Appends a dispatch command whose arguments are then pushed by the caller. */
static gpuhal_status_t gpuhal__cb_append_dispatch(gpuhal_command_buffer_t* cb, CUfunction function,
                                                  const char* name, const uint32_t grid[3], const uint32_t block[3],
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
  for (i = 0; i < arg_count; ++i) bytes += ((args[i].kind == GPUHAL_ARG_BYTES ? args[i].size : 8u) + 7u) & ~7u;
  return bytes;
}

GPUHAL_API gpuhal_status_t gpuhal_cmd_dispatch(gpuhal_command_buffer_t* command_buffer, gpuhal_kernel_t* kernel,
                                               gpuhal_dim3_t grid, gpuhal_dim3_t block, uint32_t shared_bytes,
                                               uint32_t arg_count, const gpuhal_arg_t* args) {
  gpuhal_command_buffer_t* cb = command_buffer;
  gpuhal__cmd_t* cmd;
  uint32_t g[3], b[3], i;
  GPUHAL__CHECK_RECORDING(command_buffer);
  GPUHAL__CHECK_OBJECT(kernel, GPUHAL__MAGIC_KERNEL);
  if (kernel->executable->device != cb->device)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_dispatch: argument 'kernel' ('%s') was loaded on device %d; the command "
                              "buffer belongs to device %d",
                              kernel->name, kernel->executable->device->ordinal, cb->device->ordinal);
  GPUHAL__CHECK_ARG(arg_count == 0 || args != NULL, "args", "must not be NULL when arg_count > 0");
  if (kernel->info.param_count != GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN && arg_count != kernel->info.param_count)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_cmd_dispatch: argument 'arg_count' is %u but kernel '%s' has %u parameter(s)",
                              arg_count, kernel->name, kernel->info.param_count);
  GPUHAL__RETURN_IF_ERROR(gpuhal__dispatch_check_dims(cb, kernel, grid, block, shared_bytes));
  for (i = 0; i < arg_count; ++i) GPUHAL__RETURN_IF_ERROR(gpuhal__dispatch_check_arg(cb, kernel, i, &args[i]));

  /* Everything that can fail is reserved before anything is appended. */
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_reserve_args(cb, arg_count, gpuhal__args_value_bytes(arg_count, args)));
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(cb->device->allocator, (void**)&cb->cmds, &cb->cmd_capacity,
                                         (size_t)cb->cmd_count + 1, sizeof(gpuhal__cmd_t), "recorded commands"));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_reserve_retained(cb, arg_count));
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_retain_executable(cb, kernel->executable));
  g[0] = grid.x, g[1] = grid.y, g[2] = grid.z;
  b[0] = block.x, b[1] = block.y, b[2] = block.z;
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_append_dispatch(cb, kernel->function, kernel->name, g, b, shared_bytes, &cmd));
  for (i = 0; i < arg_count; ++i) {
    const gpuhal_arg_t* arg = &args[i];
    gpuhal__ref_t ref;
    if (arg->kind == GPUHAL_ARG_BYTES) {
      gpuhal__cb_push_arg(cb, arg->data ? arg->data : (const void*)arg->inline_value, arg->size);
      continue;
    }
    memset(&ref, 0, sizeof(ref));
    ref.offset = arg->offset;
    if (arg->kind == GPUHAL_ARG_SLOT) {
      ref.kind = GPUHAL__REF_SLOT;
      ref.slot = arg->slot;
      gpuhal__cb_note_slot(cb, &ref, 0);
    } else {
      ref.kind = GPUHAL__REF_BUFFER;
      ref.buffer = arg->buffer;
      gpuhal__cb_retain_buffer(cb, arg->buffer); /* cannot fail: reserved above */
    }
    gpuhal__cb_push_address_arg(cb, &ref);
    if (cb->args[cb->arg_count - 1].late) cmd->late_args++;
  }
  cmd->arg_count = arg_count;
  return NULL;
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

/* ---- native commands and peer copies (multi-device hook; owned by the multi-device
 * engineer, used by channel.h) ----
 * A NATIVE command is work that another module puts on a stream itself (NCCL collectives).
 * STREAM command buffers call ops->issue at every execute, on the device's worker, with the
 * queue's stream. GRAPH command buffers capture it once, when the graph is built (end): on
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
} gpuhal__native_ops_t;

/* Appends a NATIVE command (the caller checked the recording state). On success the
 * command buffer owns `user` (ops->release at destroy). */
static gpuhal_status_t gpuhal__cb_record_native(gpuhal_command_buffer_t* cb, const gpuhal__native_ops_t* ops,
                                                void* user) {
  gpuhal__cmd_t* cmd;
  const gpuhal__cmd_t* prev;
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_append(cb, GPUHAL__CMD_NATIVE, &cmd));
  prev = cb->cmd_count > 1 ? &cb->cmds[cb->cmd_count - 2] : NULL;
  cmd->native_ops = ops;
  cmd->native_user = user;
  cb->has_native = 1;
  cmd->native_follower =
      (uint32_t)(prev && prev->type == GPUHAL__CMD_NATIVE && prev->native_ops == ops && ops->group_begin);
  return NULL;
}

/* Issues the group that starts at `first` (a leader) into `stream`. */
static gpuhal_status_t gpuhal__native_issue_group(gpuhal_command_buffer_t* cb, const gpuhal__cmd_t* first,
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
    if (st) gpuhal_status_free(st2);
    else st = st2;
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
    if (!st) st = st2;
    else gpuhal_status_free(st2);
    if (st && c->graph) {
      cu->cuGraphDestroy(c->graph);
      c->graph = NULL;
    }
  }
  st2 = gpuhal__device_stream_destroy(c->cb->device, stream);
  if (!st) st = st2;
  else gpuhal_status_free(st2);
  return st;
}

/* Graph build: the group led by `cmd` becomes one child graph node. */
static gpuhal_status_t gpuhal__graph_add_native(gpuhal_command_buffer_t* cb, gpuhal__cmd_t* cmd,
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

/* Peer copies: a copy operand may be a buffer of another device of the same driver. */
static int gpuhal__ref_is_peer(const gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref) {
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
  if (r == CUDA_SUCCESS || (int)r == 704 /* CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED */) return NULL;
  return gpuhal__cuda_status(p->device->cu, r, "cuCtxEnablePeerAccess", __FILE__, __LINE__);
}

/* 1 when the two devices can reach each other's memory (access then enabled both ways);
 * 0 when they cannot (copies between them are staged through host memory). */
static gpuhal_status_t gpuhal__peer_prepare(gpuhal_device_t* a, gpuhal_device_t* b, int* out_peer) {
  int ab = 0, ba = 0;
  gpuhal__peer_enable_t p;
  *out_peer = 0;
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

/* gpuhal__cb_check_ref for copies: also accepts a buffer of another device of the driver. */
static gpuhal_status_t gpuhal__cb_check_copy_ref(gpuhal_command_buffer_t* cb, gpuhal_buffer_ref_t ref, uint64_t size,
                                                 const char* func, const char* what, gpuhal__ref_t* out) {
  gpuhal_buffer_t* buffer = ref.buffer;
  int peer = 0;
  if (!gpuhal__object_is_live(buffer, GPUHAL__MAGIC_BUFFER) || buffer->device == cb->device ||
      buffer->device->driver != cb->device->driver || buffer->kind != GPUHAL_MEMORY_DEVICE)
    return gpuhal__cb_check_ref(cb, ref, size, func, what, out); /* its messages for everything else */
  memset(out, 0, sizeof(*out));
  if (ref.offset > UINT64_MAX - size || ref.offset + size > buffer->size)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "%s: argument '%s': range [%llu, +%llu) is outside the buffer's %llu bytes", func, what,
                              (unsigned long long)ref.offset, (unsigned long long)size,
                              (unsigned long long)buffer->size);
  GPUHAL__RETURN_IF_ERROR(gpuhal__peer_prepare(cb->device, buffer->device, &peer));
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
/* ---- end of the multi-device hook ---- */

/* Records a copy (or an update, whose source is the staging buffer) from s to d. In a graph,
 * a late-bound address cannot sit in a memcpy node (drivers refuse address 0), so then the
 * built-in copy kernel does it and its node is patched at execute. */
static gpuhal_status_t gpuhal__cb_record_transfer(gpuhal_command_buffer_t* cb, gpuhal__cmd_type_t type,
                                                  gpuhal__ref_t s, gpuhal__ref_t d, uint64_t size) {
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

/* A memset can do it: 1, 2 or 4-byte pattern and a destination aligned to it. */
static int gpuhal__fill_is_memset(uint32_t pattern_size, uint64_t address) {
  return pattern_size <= 4 && address % pattern_size == 0;
}

GPUHAL_API gpuhal_status_t gpuhal_cmd_fill(gpuhal_command_buffer_t* command_buffer, gpuhal_buffer_ref_t dst,
                                           uint64_t size, const void* pattern, uint32_t pattern_size) {
  gpuhal_command_buffer_t* cb = command_buffer;
  gpuhal__ref_t d;
  uint32_t reduced;
  uint64_t expanded[2];
  GPUHAL__CHECK_RECORDING(command_buffer);
  GPUHAL__CHECK_ARG(pattern != NULL, "pattern", "must not be NULL");
  GPUHAL__CHECK_ARG(pattern_size == 1 || pattern_size == 2 || pattern_size == 4 || pattern_size == 8 ||
                        pattern_size == 16,
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

/* ---- end: freezing the recording, building the graph ---- */

/* kernelParams arrays for every dispatch: pointers into `values`, which no longer moves. */
static gpuhal_status_t gpuhal__cb_build_param_ptrs(gpuhal_command_buffer_t* cb) {
  uint32_t i;
  if (!cb->arg_count) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(cb->device->allocator, sizeof(void*) * cb->arg_count,
                                               "kernel parameter pointers", (void**)&cb->param_ptrs));
  for (i = 0; i < cb->arg_count; ++i) cb->param_ptrs[i] = cb->values + cb->args[i].value_offset;
  return NULL;
}

/* Graph: puts the update bytes in device memory, where memcpy nodes and the copy kernel
 * read them on every launch. */
static gpuhal_status_t gpuhal__cb_upload_staging(gpuhal_command_buffer_t* cb) {
  gpuhal_device_t* device = cb->device;
  if (!cb->update_size) return NULL;
  GPUHAL__CU_RETURN(device->cu, cuMemAlloc, (&cb->staging, cb->update_size));
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

static gpuhal_status_t gpuhal__cb_collect_late_cmds(gpuhal_command_buffer_t* cb) {
  uint32_t c, n = 0;
  for (c = 0; c < cb->cmd_count; ++c) n += cb->cmds[c].late_args ? 1u : 0u;
  if (!n) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(cb->device->allocator, sizeof(uint32_t) * n,
                                               "late-bound command list", (void**)&cb->late_cmds));
  for (c = 0; c < cb->cmd_count; ++c)
    if (cb->cmds[c].late_args) cb->late_cmds[cb->late_cmd_count++] = c;
  return NULL;
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

static void gpuhal__memcpy_params(CUdeviceptr dst, CUdeviceptr src, uint64_t size, CUDA_MEMCPY3D* m) {
  memset(m, 0, sizeof(*m));
  m->srcMemoryType = CU_MEMORYTYPE_DEVICE;
  m->srcDevice = src;
  m->dstMemoryType = CU_MEMORYTYPE_DEVICE;
  m->dstDevice = dst;
  m->WidthInBytes = (size_t)size;
  m->Height = 1;
  m->Depth = 1;
}

static unsigned gpuhal__memset_value(const gpuhal__cmd_t* cmd) {
  uint64_t mask = cmd->pattern_size == 4 ? 0xFFFFFFFFull : cmd->pattern_size == 2 ? 0xFFFFull : 0xFFull;
  return (unsigned)(cmd->pattern[0] & mask);
}

/* Builds the graph: nodes between barriers independent, each segment after a barrier
 * depending on the previous segment (directly when it has one node, else through an
 * empty join node). Empty segments carry the previous dependency forward, so leading,
 * trailing and repeated barriers add nothing and lose no ordering. */
typedef struct gpuhal__graph_builder_s {
  gpuhal_command_buffer_t* cb;
  CUgraphNode dependency; /* what nodes of the current segment depend on; NULL: nothing */
  CUgraphNode* segment;   /* nodes of the current segment */
  size_t segment_count, segment_capacity;
  int barrier_pending; /* a barrier came after the current segment's nodes */
} gpuhal__graph_builder_t;

static gpuhal_status_t gpuhal__graph_close_segment(gpuhal__graph_builder_t* b) {
  gpuhal_device_t* device = b->cb->device;
  b->barrier_pending = 0;
  if (b->segment_count == 1) {
    b->dependency = b->segment[0];
  } else if (b->segment_count > 1) {
    GPUHAL__CU_RETURN(device->cu, cuGraphAddEmptyNode,
                      (&b->dependency, b->cb->graph, b->segment, b->segment_count));
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
      gpuhal__kernel_node_params(cb, cmd, &p);
      GPUHAL__CU_RETURN(device->cu, cuGraphAddKernelNode, (&cmd->node, cb->graph, deps, dep_count, &p));
      break;
    }
    case GPUHAL__CMD_COPY:
    case GPUHAL__CMD_UPDATE: {
      CUDA_MEMCPY3D m;
      gpuhal__memcpy_params(gpuhal__cb_static_address(cb, &cmd->dst), gpuhal__cb_static_address(cb, &cmd->src),
                            cmd->size, &m);
      GPUHAL__CU_RETURN(device->cu, cuGraphAddMemcpyNode, (&cmd->node, cb->graph, deps, dep_count, &m, device->context));
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
      GPUHAL__CU_RETURN(device->cu, cuGraphAddMemsetNode, (&cmd->node, cb->graph, deps, dep_count, &m, device->context));
      break;
    }
    case GPUHAL__CMD_NATIVE: /* multi-device hook */
      if (cmd->native_follower) return NULL; /* captured with its group's leader */
      GPUHAL__RETURN_IF_ERROR(gpuhal__graph_add_native(cb, cmd, deps, dep_count));
      break;
    default:
      return gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "command buffer: unexpected command type %d", (int)cmd->type);
  }
  b->segment[b->segment_count++] = cmd->node;
  cb->node_count++;
  return NULL;
}

static gpuhal_status_t gpuhal__cb_build_graph(gpuhal_command_buffer_t* cb) {
  gpuhal_device_t* device = cb->device;
  gpuhal__graph_builder_t b;
  gpuhal_status_t st = NULL;
  uint32_t c;
  memset(&b, 0, sizeof(b));
  b.cb = cb;
  GPUHAL__CU_RETURN(device->cu, cuGraphCreate, (&cb->graph, 0));
  for (c = 0; c < cb->cmd_count && !st; ++c) {
    gpuhal__cmd_t* cmd = &cb->cmds[c];
    if (cmd->type == GPUHAL__CMD_BARRIER) {
      if (b.segment_count) b.barrier_pending = 1;
      continue;
    }
    if (b.barrier_pending) st = gpuhal__graph_close_segment(&b);
    if (!st) st = gpuhal__graph_add_node(&b, cmd);
  }
  gpuhal__free(device->allocator, b.segment);
  if (!st && cb->node_count) st = gpuhal__device_graph_instantiate(device, &cb->exec, cb->graph);
  return st;
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
  gpuhal__context_leave(cb->device, &scope);
  return st;
}

GPUHAL_API gpuhal_status_t gpuhal_command_buffer_end(gpuhal_command_buffer_t* command_buffer) {
  gpuhal_command_buffer_t* cb = command_buffer;
  gpuhal_status_t st;
  GPUHAL__CHECK_RECORDING(command_buffer);
  st = gpuhal__cb_build_param_ptrs(cb);
  if (!st && gpuhal__cb_is_graph(cb)) {
    if (cb->has_native)
      cb->graph_deferred = 1; /* built by the first execute, on the worker */
    else
      st = gpuhal__cb_finish_graph(cb);
  }
  if (!st) st = gpuhal__cb_collect_late_cmds(cb);
  if (st) {
    /* Back to recording with nothing built, so end can be retried (or the buffer dropped). */
    gpuhal__cb_destroy_graph(cb);
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
    cb->reads_allocas = cb->binding_slots > 0;
    for (i = 0; i < cb->retained_buffer_count && !cb->reads_allocas; ++i)
      cb->reads_allocas = cb->retained_buffers[i]->pending;
  }
  cb->state = GPUHAL__CB_EXECUTABLE;
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

/* ---- execute: resolving late addresses, issuing ---- */

/* What a recorded command is, for messages (a graph does a late-bound fill, copy or update
 * with a built-in kernel). */
static const char* gpuhal__cmd_name(const gpuhal__cmd_t* cmd) {
  switch (cmd->type) {
    case GPUHAL__CMD_DISPATCH:
      if (strcmp(cmd->kernel_name, "gpuhal_builtin_fill") == 0) return "fill, by the built-in kernel";
      if (strcmp(cmd->kernel_name, "gpuhal_builtin_copy") == 0) return "copy or update, by the built-in kernel";
      return cmd->kernel_name;
    case GPUHAL__CMD_COPY: return "copy";
    case GPUHAL__CMD_FILL: return "fill";
    case GPUHAL__CMD_UPDATE: return "update";
    case GPUHAL__CMD_NATIVE: return cmd->native_ops->name;
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
                            "address yet: its gpuhal_queue_alloca must be ordered before this execute (wait on its "
                            "signal), and its gpuhal_queue_dealloca after it",
                            (void*)buffer, (unsigned long long)buffer->size);
}
static gpuhal_status_t gpuhal__cb_resolve(const gpuhal_command_buffer_t* cb, const gpuhal__execute_action_t* action,
                                          const gpuhal__ref_t* ref, uint64_t* out_address) {
  uint64_t base;
  switch (ref->kind) {
    case GPUHAL__REF_BUFFER:
      base = gpuhal__buffer_address(ref->buffer);
      if (!base) return gpuhal__cb_unresolved_buffer(ref->buffer);
      break;
    case GPUHAL__REF_SLOT:
      base = gpuhal__buffer_address(action->buffers[ref->slot]);
      if (!base)
        return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                                  "gpuhal_queue_execute: the buffer bound to slot %u has no device address (not allocated yet, or "
                                  "deallocated): its "
                                  "gpuhal_queue_alloca must be ordered before this execute (wait on its signal)",
                                  ref->slot);
      base += action->offsets[ref->slot];
      break;
    default:
      base = (uint64_t)cb->staging;
      break;
  }
  *out_address = base + ref->offset;
  return NULL;
}

/* Writes the late arguments of a dispatch into `values`; *out_changed says whether any
 * differs from what was there. Nothing is written unless every address resolves. */
static gpuhal_status_t gpuhal__cb_resolve_args(gpuhal_command_buffer_t* cb, const gpuhal__execute_action_t* action,
                                               const gpuhal__cmd_t* cmd, int* out_changed) {
  uint32_t i;
  uint64_t address;
  *out_changed = 0;
  for (i = 0; i < cmd->arg_count; ++i) {
    const gpuhal__cmd_arg_t* arg = &cb->args[cmd->arg_first + i];
    if (arg->late) GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve(cb, action, &arg->ref, &address));
  }
  for (i = 0; i < cmd->arg_count; ++i) {
    const gpuhal__cmd_arg_t* arg = &cb->args[cmd->arg_first + i];
    unsigned char* value = cb->values + arg->value_offset;
    if (!arg->late) continue;
    gpuhal__cb_resolve(cb, action, &arg->ref, &address);
    if (memcmp(value, &address, sizeof(address)) != 0) {
      memcpy(value, &address, sizeof(address));
      *out_changed = 1;
    }
  }
  return NULL;
}

/* Graph: rewrites the parameters of late-bound kernel nodes whose addresses changed. */
static gpuhal_status_t gpuhal__cb_patch_graph(gpuhal_command_buffer_t* cb, const gpuhal__execute_action_t* action) {
  gpuhal_device_t* device = cb->device;
  uint32_t k;
  for (k = 0; k < cb->late_cmd_count; ++k) {
    gpuhal__cmd_t* cmd = &cb->cmds[cb->late_cmds[k]];
    CUDA_KERNEL_NODE_PARAMS p;
    int changed = 0;
    gpuhal_status_t st = gpuhal__cb_resolve_args(cb, action, cmd, &changed);
    if (st) return gpuhal_status_annotate(st, "command %u (%s) of a graph command buffer", cb->late_cmds[k],
                                          gpuhal__cmd_name(cmd));
    if (!changed && !cmd->stale) continue;
    gpuhal__kernel_node_params(cb, cmd, &p);
    cmd->stale = 1; /* until the driver took it */
    GPUHAL__CU_RETURN(device->cu, cuGraphExecKernelNodeSetParams, (cb->exec, cmd->node, &p));
    cmd->stale = 0;
  }
  return NULL;
}

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
      return GPUHAL__CU(cu, cuLaunchKernel,
                        (cmd->function, cmd->grid[0], cmd->grid[1], cmd->grid[2], cmd->block[0], cmd->block[1],
                         cmd->block[2], cmd->shared_bytes, stream,
                         cmd->arg_count ? cb->param_ptrs + cmd->arg_first : NULL, NULL));
    case GPUHAL__CMD_COPY:
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve(cb, action, &cmd->src, &src));
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve(cb, action, &cmd->dst, &dst));
      if (gpuhal__ref_is_peer(cb, &cmd->src) || gpuhal__ref_is_peer(cb, &cmd->dst)) /* multi-device: peer copy */
        return GPUHAL__CU(cu, cuMemcpyPeerAsync,
                          ((CUdeviceptr)dst, cmd->dst.kind == GPUHAL__REF_BUFFER ? cmd->dst.buffer->device->context
                                                                                  : cb->device->context,
                           (CUdeviceptr)src, cmd->src.kind == GPUHAL__REF_BUFFER ? cmd->src.buffer->device->context
                                                                                  : cb->device->context,
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
    default:
      return NULL; /* barriers: a stream is already in order */
  }
}

/* Resolves every address `cmd` needs, writing nothing. */
static gpuhal_status_t gpuhal__cmd_check_addresses(const gpuhal_command_buffer_t* cb,
                                                   const gpuhal__execute_action_t* action, const gpuhal__cmd_t* cmd) {
  uint64_t address;
  uint32_t i;
  switch (cmd->type) {
    case GPUHAL__CMD_DISPATCH:
      for (i = 0; i < cmd->arg_count; ++i) {
        const gpuhal__cmd_arg_t* arg = &cb->args[cmd->arg_first + i];
        if (arg->late) GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve(cb, action, &arg->ref, &address));
      }
      return NULL;
    case GPUHAL__CMD_COPY:
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve(cb, action, &cmd->src, &address));
      return gpuhal__cb_resolve(cb, action, &cmd->dst, &address);
    case GPUHAL__CMD_FILL:
    case GPUHAL__CMD_UPDATE:
      return gpuhal__cb_resolve(cb, action, &cmd->dst, &address);
    default:
      return NULL;
  }
}

/* STREAM: checks that every address resolves before anything is issued, so that a refused
 * execute runs none of its commands (as a refused graph is not launched). */
static gpuhal_status_t gpuhal__stream_check_addresses(const gpuhal_command_buffer_t* cb,
                                                      const gpuhal__execute_action_t* action) {
  uint32_t c;
  for (c = 0; c < cb->cmd_count; ++c) {
    gpuhal_status_t st = gpuhal__cmd_check_addresses(cb, action, &cb->cmds[c]);
    if (st) return gpuhal_status_annotate(st, "command %u (%s) of a stream command buffer", c,
                                          gpuhal__cmd_name(&cb->cmds[c]));
  }
  return NULL;
}

/* Puts an execute of `cb` on `stream`; `action` holds its binding table (NULL when the
 * command buffer has no binding slots: nothing refers to one then). */
static gpuhal_status_t gpuhal__execute_issue_on(gpuhal_command_buffer_t* cb, const gpuhal__execute_action_t* action,
                                                gpuhal_device_t* device, CUstream stream) {
  uint32_t c;
  if (gpuhal__cb_is_graph(cb)) {
    if (gpuhal__atomic_load(&cb->graph_deferred)) { /* only ever on the worker: see has_native */
      GPUHAL__RETURN_IF_ERROR(gpuhal__cb_finish_graph(cb));
      gpuhal__atomic_store(&cb->graph_deferred, 0);
    }
    if (!cb->exec) return NULL; /* nothing was recorded */
    GPUHAL__RETURN_IF_ERROR(gpuhal__cb_patch_graph(cb, action));
    return GPUHAL__CU(cb->device->cu, cuGraphLaunch, (cb->exec, stream));
  }
  GPUHAL__RETURN_IF_ERROR(gpuhal__stream_check_addresses(cb, action));
  for (c = 0; c < cb->cmd_count; ++c) {
    const gpuhal__cmd_t* cmd = &cb->cmds[c];
    gpuhal_status_t st;
    GPUHAL__TRACE(device, gpuhal__trace_command(device, stream, cmd)); /* trace hook */
    st = gpuhal__stream_issue_cmd(cb, action, cmd, stream);
    if (st) return gpuhal_status_annotate(st, "command %u (%s) of a stream command buffer", c, gpuhal__cmd_name(cmd));
  }
  return NULL;
}

static gpuhal_status_t gpuhal__execute_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  gpuhal__execute_action_t* action = (gpuhal__execute_action_t*)user;
  return gpuhal__execute_issue_on(action->command_buffer, action, device, stream);
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

static const gpuhal__action_ops_t gpuhal__execute_ops = {"execute", gpuhal__execute_issue, NULL,
                                                         gpuhal__execute_release};

/* A command buffer without binding slots needs no execute record: the queue action holds
 * the command buffer itself (one lock and one record fewer per execute, on submission and
 * on release). */
static gpuhal_status_t gpuhal__execute_unbound_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  return gpuhal__execute_issue_on((gpuhal_command_buffer_t*)user, NULL, device, stream);
}
static void gpuhal__execute_unbound_release(void* user, gpuhal_device_t* device) {
  GPUHAL__UNUSED(device);
  gpuhal__cb_release_ref((gpuhal_command_buffer_t*)user);
}
static const gpuhal__action_ops_t gpuhal__execute_unbound_ops = {"execute", gpuhal__execute_unbound_issue, NULL,
                                                                 gpuhal__execute_unbound_release};

/* The command buffer a queue action executes; NULL when it is no execute. */
static const gpuhal_command_buffer_t* gpuhal__action_command_buffer(const gpuhal__action_t* a) {
  if (a->ops == &gpuhal__execute_ops) return ((const gpuhal__execute_action_t*)a->user)->command_buffer;
  if (a->ops == &gpuhal__execute_unbound_ops) return (const gpuhal_command_buffer_t*)a->user;
  return NULL;
}

static gpuhal_status_t gpuhal__barrier_issue(void* user, gpuhal_device_t* device, CUstream stream) {
  GPUHAL__UNUSED(user);
  GPUHAL__UNUSED(device);
  GPUHAL__UNUSED(stream);
  return NULL;
}
static const gpuhal__action_ops_t gpuhal__barrier_ops = {"barrier", gpuhal__barrier_issue, NULL, NULL};

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
                                "belongs to device %d",
                                what, buffer->device->ordinal, cb->device->ordinal);
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
  GPUHAL__CHECK_OBJECT(cb, GPUHAL__MAGIC_COMMAND_BUFFER);
  if (cb->device != device)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_queue_execute: argument 'command_buffer' belongs to device %d, not device %d",
                              cb->device->ordinal, device->ordinal);
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
   * command buffer is launched in dependency order (GPUHAL__SUBMIT_NOT_PROVISIONAL). */
  int ordered = cb->reads_allocas || (gpuhal__cb_is_graph(cb) && (cb->flags & GPUHAL_COMMAND_BUFFER_REUSABLE));
  unsigned flags = ordered ? (unsigned)GPUHAL__SUBMIT_NOT_PROVISIONAL : 0u;
  return flags | (blocking ? 0u : (unsigned)GPUHAL__SUBMIT_CALLER_MAY_ISSUE);
}

GPUHAL_API gpuhal_status_t gpuhal_queue_execute(gpuhal_device_t* device, uint32_t queue, gpuhal_semaphore_list_t wait,
                                                gpuhal_semaphore_list_t signal,
                                                gpuhal_command_buffer_t* command_buffer,
                                                const gpuhal_binding_table_t* bindings) {
  gpuhal_command_buffer_t* cb = command_buffer;
  gpuhal__execute_action_t* action = NULL;
  gpuhal_status_t st;
  uint32_t i;
  GPUHAL__CHECK_OBJECT(device, GPUHAL__MAGIC_DEVICE);
  if (!cb) {
    /* A barrier issues nothing: the calling thread may issue it (no worker wake-up). */
    st = gpuhal__queue_submit_ex(device, queue, wait, signal, &gpuhal__barrier_ops, NULL,
                                 GPUHAL__SUBMIT_CALLER_MAY_ISSUE);
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
                                 gpuhal__execute_submit_flags(cb));
    if (!st) return NULL;
    gpuhal__atomic_store(&cb->executed, 0);
    gpuhal__cb_release_ref(cb);
    return gpuhal_status_annotate(st, "in gpuhal_queue_execute");
  }
  st = gpuhal__execute_action_acquire(cb, &action);
  if (st) {
    gpuhal__atomic_store(&cb->executed, 0);
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
                               gpuhal__execute_submit_flags(cb));
  if (st) {
    gpuhal__execute_action_recycle(action);
    gpuhal__atomic_store(&cb->executed, 0);
    gpuhal__cb_release_ref(cb);
    return gpuhal_status_annotate(st, "in gpuhal_queue_execute");
  }
  return NULL;
}
