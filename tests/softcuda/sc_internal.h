/* sc_internal.h - softcuda's internal model, shared by the parts that softcuda.c
 * includes (one translation unit: the exported CUDA names are assembler aliases of the
 * sc_ definitions, which must live in the same object).
 *
 * Model
 *   - One global mutex (sc.mu) guards every softcuda object; sc.cv is broadcast whenever
 *     any stream operation completes. Host waits and stream waits re-check under sc.mu.
 *   - Handles (CUcontext, CUstream, CUevent, CUmodule, CUfunction, CUmemoryPool,
 *     CUlinkState, graph handles) are ids, not pointers: (0x5c << 56 | kind << 48 | id).
 *     Ids are never reused, so a destroyed handle is always recognised.
 *   - Objects are reference-counted (under sc.mu); the handle table holds one reference,
 *     queued operations hold their own.
 *   - A stream is a worker thread running sc_op's in FIFO order. Each op has a sequence
 *     number; a stream's done_seq says how far it got. An event record is (stream, seq).
 *   - Device pointers are host pointers, tracked in a sorted allocation table: cuMemAlloc
 *     memory is a page-aligned range of one memfd (so that IPC can share it), the rest is
 *     malloc'ed; registered host ranges, IPC and VMM mappings are records too (share.c).
 */
#ifndef SC_INTERNAL_H
#define SC_INTERNAL_H

#if !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../src/cuda_api.h"
#include "softcuda.h"

#define SC_HIDDEN __attribute__((visibility("hidden")))

/* ---- entry point ids ---------------------------------------------------------------- */
#define SC_FN_ENUM(name, dlsym_name, pinned, params) SC_FN_##name,
/* softnccl's entry points (libnccl.so.2, a separate library) have ids here too, after the
 * CUDA ones, so that softcuda counts them and injects faults into them: softnccl asks
 * through softcuda_fault_point(). */
#define SC_NCCL_FN_ENUM(name, params) SC_FN_##name,
enum {
  GPUHAL_CUDA_REQUIRED_SYMBOLS(SC_FN_ENUM) GPUHAL_CUDA_OPTIONAL_SYMBOLS(SC_FN_ENUM) SC_FN_cuGetProcAddress,
  GPUHAL_NCCL_SYMBOLS(SC_NCCL_FN_ENUM) SC_FN_COUNT
};

/* Every implementation, with the exact parameters of the tables (a definition that does
 * not match its table entry fails to compile). */
#define SC_FN_PROTO(name, dlsym_name, pinned, params) SC_HIDDEN CUresult CUDAAPI sc_##name params;
GPUHAL_CUDA_REQUIRED_SYMBOLS(SC_FN_PROTO)
GPUHAL_CUDA_OPTIONAL_SYMBOLS(SC_FN_PROTO)
SC_HIDDEN CUresult CUDAAPI sc_cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                               CUdriverProcAddressQueryResult* symbolStatus);

/* ---- objects ------------------------------------------------------------------------ */
typedef enum sc_kind {
  SC_K_NONE = 0,
  SC_K_CTX,
  SC_K_STREAM,
  SC_K_EVENT,
  SC_K_MODULE,
  SC_K_FUNC,
  SC_K_POOL,
  SC_K_LINK,
  SC_K_GRAPH,
  SC_K_GRAPH_NODE,
  SC_K_GRAPH_EXEC,
  SC_K_MEMHANDLE, /* share.c: a physical allocation of the VMM API (cuMemCreate, import) */
  SC_K_LIBRARY,   /* module.c: cuLibraryLoadData, one per image for every context */
  SC_K_COUNT
} sc_kind;

typedef struct sc_ctx sc_ctx;
typedef struct sc_obj sc_obj;
struct sc_obj {
  sc_kind kind;
  int refs;
  uint64_t id;              /* 0 once unregistered */
  sc_ctx* owner;            /* context it belongs to (leak report), or NULL */
  void (*destroy)(sc_obj*); /* frees the object when refs reach 0 (under sc.mu) */
};

#define SC_MAX_DEVICES 16
#define SC_MAX_STACK 64

typedef struct sc_stream sc_stream;
typedef struct sc_op sc_op;
typedef struct sc_pool sc_pool;

struct sc_ctx {
  sc_obj h;
  int dev;
  int parked_now; /* streams blocked on an unmet stream memory wait */
  unsigned flags;
  int primary;
  int dead;               /* destroyed / released: torn down */
  CUresult sticky;        /* CUDA_SUCCESS or the sticky error that poisoned it */
  sc_stream* null_stream; /* the legacy default stream, created on first use */
  sc_stream** streams;    /* every stream with a live worker (including destroyed ones) */
  int nstreams, cap_streams;
  /* CUDA's store for streams and graph executables: grown in steps of SC_ROOM_STEP when
   * more are alive than it holds, and a step waits for every stream (sc_room_take_locked) */
  int room_live, room;
  uint64_t peers[SC_MAX_DEVICES * 4]; /* handle values of peer contexts with access enabled */
  int npeers;
};

struct sc_op {
  sc_op* next;
  uint64_t seq;
  sc_stream* stream;
  const char* what;        /* for messages */
  CUresult (*run)(sc_op*); /* runs on the worker WITHOUT sc.mu; non-success = sticky fault */
  void (*fini)(sc_op*);    /* under sc.mu after the op completed or was skipped */
  void* a;                 /* payload, owned by run/fini */
  void* b;
  void* c;
  uint64_t u0, u1, u2;
};

struct sc_stream {
  sc_obj h;
  sc_ctx* ctx;
  unsigned flags;
  int is_null;
  int destroyed; /* handle destroyed; the worker exits once drained */
  int stop;      /* teardown: exit when drained */
  int exited;
  int started;
  pthread_t thread;
  pthread_cond_t cv; /* work arrived */
  sc_op* head;
  sc_op* tail;
  uint64_t enq_seq;  /* last sequence number handed out */
  uint64_t done_seq; /* last sequence number completed */
  void* capture;     /* graph.c: stream capture state, NULL when not capturing */
  /* memop.c: what the worker is blocked on, for context teardown and the exit report */
  const struct sc_park* parked; /* a stream memory wait it is parked on, or NULL */
  sc_stream* waiting_on;        /* a stream it waits for (cuStreamWaitEvent), or NULL */
  int abandon;                  /* teardown released a wait that could never be met: skip the rest */
  sc_op* running;               /* the op the worker took off the queue and runs now, or NULL */
};

typedef struct sc_event {
  sc_obj h;
  sc_ctx* ctx;
  unsigned flags;
  int recorded;
  sc_stream* rs; /* stream of the last record (referenced) */
  uint64_t rseq; /* its sequence number */
  uint64_t gen;  /* bumped by every record */
  uint64_t ts_gen;
  int64_t ts_ns;
} sc_event;

typedef struct sc_param {
  size_t offset, size;
} sc_param;

typedef struct sc_module sc_module;
typedef struct sc_func {
  sc_obj h;
  sc_module* mod;
  char* name;
  int nparams;
  sc_param* params;
  size_t param_bytes;
  softcuda_twin_fn twin;
  softcuda_grid_twin_fn grid_twin;
  int max_dyn_shared;
  int nonportable_cluster; /* CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED */
  int carveout;
  int max_threads;     /* 1024, or what .maxntid / .reqntid allow */
  unsigned reqntid[3]; /* .reqntid: the only block shape a launch may have (0: any) */
  int static_shared;   /* CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES */
  int const_bytes;     /* CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: the module's .const variables its body names */
  int loaded;          /* launched, or cuFuncLoad: a graph instantiation needs no upload (see graph.c) */
} sc_func;

/* A module's .global or .const variable (cuModuleGetGlobal): its bytes lie in the
 * module's `data` at `offset`; `rec` is its record in the allocation table while the
 * module is loaded (NULL once unloaded: the address is no longer device memory). */
typedef struct sc_mglobal {
  char* name;
  size_t offset, size;
  struct sc_alloc* rec;
} sc_mglobal;

struct sc_module {
  sc_obj h;
  sc_ctx* ctx;
  int of_library; /* made by cuLibraryGetModule: its library unloads it */
  int nfuncs;
  sc_func** funcs;
  int ptx_version; /* major*10+minor */
  /* Its module-scope variables: every module (each context's module of a library too) has
   * its own copy, initialised as the PTX says. The memory lives as long as the module
   * object (queued launches hold it); the records go at the unload. */
  int nglobals;
  sc_mglobal* globals;
  unsigned char* data;
  size_t data_size;
  int data_dev; /* the device whose memory counts data_size while loaded; -1: none (unloaded) */
};

typedef enum sc_mem_type { SC_MEM_DEVICE = 1, SC_MEM_HOST, SC_MEM_MANAGED, SC_MEM_POOL } sc_mem_type;

/* Where the memory of an allocation record came from (share.c for all but the first). */
typedef enum sc_origin {
  SC_ORIGIN_ALLOC = 0,  /* softcuda allocated it (cuMemAlloc, cuMemHostAlloc, pools, ...) */
  SC_ORIGIN_REGISTERED, /* cuMemHostRegister: the caller's host memory (type SC_MEM_HOST) */
  SC_ORIGIN_VMM,        /* cuMemMap + cuMemSetAccess: no context owns it (type SC_MEM_DEVICE) */
  SC_ORIGIN_IPC,        /* cuIpcOpenMemHandle: another process's cuMemAlloc memory (SC_MEM_DEVICE) */
  SC_ORIGIN_MODULE      /* a module's .global / .const variable (module.c): the module owns the memory */
} sc_origin;

typedef struct sc_alloc {
  uintptr_t base;
  size_t size;
  sc_mem_type type;
  sc_ctx* ctx;     /* owning context (NULL for pool allocations) */
  sc_ctx* made_in; /* pool: the context of the allocating stream (sc_free_ctx_allocs_locked) */
  int dev;
  sc_pool* pool;
  int free_pending; /* pool: cuMemFreeAsync enqueued */
  unsigned long long id;
  unsigned flags;
  /* pool.c: where the pending free runs, and whether an allocation ordered after it on the
   * GPU took its block before it ran (then the free only retires this record) */
  sc_stream* free_stream;
  uint64_t free_seq;
  int handed_over;
  /* share.c */
  sc_origin origin;
  size_t map_size;      /* length of its own mapping (page-rounded); 0: malloc'ed, or not softcuda's */
  uint64_t arena_off;   /* cuMemAlloc memory in the arena (sc.arena_fd): its offset there */
  unsigned access_devs; /* VMM: bit d set while device d has access (cuMemSetAccess) */
  int ipc_refs;         /* IPC: opens of the handle in this context still to close */
  int ipc_pid;          /* IPC: the exporting process and its allocation's id there */
  unsigned long long ipc_id;
} sc_alloc;

typedef struct sc_block {
  struct sc_block* next;
  void* p;
  size_t size;
} sc_block;

struct sc_pool {
  sc_obj h;
  int dev;
  int is_default;
  int destroyed;
  size_t max_size;
  uint64_t threshold;
  int reuse_follow, reuse_opportunistic, reuse_internal;
  uint64_t reserved, reserved_high, used, used_high;
  int live_allocs;
  sc_block* free_blocks;
  uint64_t peer_access; /* devices (bits) given READWRITE access by cuMemPoolSetAccess */
};

typedef struct sc_device {
  int ordinal;
  size_t total;
  size_t used;
  sc_ctx* primary;
  int primary_refs;
  sc_pool* default_pool;
} sc_device;

typedef struct sc_tls {
  uint64_t stack[SC_MAX_STACK]; /* context handle values, [depth-1] is current */
  int depth;
  int in_callback;
  unsigned long long ctx_switches;
  unsigned long long round_trips;
  CUstreamCaptureMode capture_mode; /* cuThreadExchangeStreamCaptureMode; 0 (calloc): GLOBAL, CUDA's default */
  struct sc_tls* next;
} sc_tls;

typedef struct sc_fault {
  int fn;
  long nth; /* 0: every call */
  long count;
  CUresult result;
} sc_fault;

typedef struct sc_global {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int initialized;
  int config_done;
  int ndev;
  sc_device devs[SC_MAX_DEVICES];
  int jit_delay_ms;
  int driver_version; /* SOFTCUDA_DRIVER_VERSION (default 13000): what cuDriverGetVersion says; entry points
                         newer than it are not found */
  int leaks_fatal;
  int verbose;
  int no_memops;           /* SOFTCUDA_NO_MEMOPS: no 64-bit stream memory operations, no WAIT_VALUE_NOR */
  int pool_internal_reuse; /* SOFTCUDA_POOL_INTERNAL_REUSE=1: see pool.c */
  int stream_room;         /* SOFTCUDA_STREAM_ROOM: a context's first store of streams and executables; 0: unbounded */
  /* handle table */
  sc_obj** objs;
  uint64_t nobjs, cap_objs;
  /* allocations, sorted by base */
  sc_alloc** allocs;
  size_t nallocs, cap_allocs;
  unsigned long long next_alloc_id;
  /* memory.c: the arena, one memfd holding every cuMemAlloc allocation (IPC shares it) */
  int arena_state; /* 0: not made yet; 1: arena_fd is open; -1: no memfd (malloc, no IPC) */
  int arena_fd;
  uint64_t arena_ino, arena_next, arena_len;
  /* share.c: VMM address reservations (cuMemAddressReserve) */
  struct sc_resv** resvs;
  size_t nresvs, cap_resvs;
  /* callback thread */
  int cb_started;
  pthread_t cb_thread;
  pthread_cond_t cb_cv;
  struct sc_cb_job* cb_head;
  struct sc_cb_job* cb_tail;
  /* counters */
  unsigned long long calls[SC_FN_COUNT];
  unsigned long long violations[5];
  char last_violation[512];
  unsigned long long leaks;
  int parked_peak; /* most streams of one context blocked on memory waits at once */
  sc_tls* threads;
  /* faults */
  sc_fault faults[64];
  int nfaults;
} sc_global;

extern sc_global sc;

/* ---- helpers shared by the parts ---------------------------------------------------- */
#define SC_LOCK() pthread_mutex_lock(&sc.mu)
#define SC_UNLOCK() pthread_mutex_unlock(&sc.mu)

/* First statement of every entry point: counts it, refuses calls from callbacks, applies
 * fault injection and the cuInit rule. */
#define SC_ENTER(name)                                    \
  do {                                                    \
    CUresult sc_enter_r_ = sc_enter(SC_FN_##name, #name); \
    if (sc_enter_r_ != CUDA_SUCCESS) return sc_enter_r_;  \
  } while (0)

static CUresult sc_enter(int fn, const char* name);
static CUresult sc_violation(int kind, CUresult r, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static sc_tls* sc_thread(void);
static int64_t sc_now_ns(void);
static void* sc_xcalloc(size_t n, size_t size);

static void sc_obj_init(sc_obj* o, sc_kind kind, sc_ctx* owner, void (*destroy)(sc_obj*));
static uint64_t sc_obj_register(sc_obj* o); /* returns the handle value */
static void sc_obj_unregister(sc_obj* o);
static sc_obj* sc_obj_lookup(uint64_t handle, sc_kind kind);
static void sc_ref(sc_obj* o);
static void sc_unref(sc_obj* o);
static uint64_t sc_handle_of(const sc_obj* o);
#define SC_HANDLE(o) sc_handle_of(&(o)->h)

/* Current context of the calling thread; fails (and counts) when there is none, it is
 * destroyed, or it is poisoned by a sticky error. */
static CUresult sc_current_ctx(sc_ctx** out);
static CUresult sc_lookup_ctx(CUcontext h, sc_ctx** out);
/* Resolves a stream handle (0 / legacy / per-thread: the current context's null stream). */
static CUresult sc_get_stream(CUstream h, sc_stream** out);
static sc_stream* sc_null_stream(sc_ctx* ctx);
/* Enqueues op on s (under sc.mu), adding the legacy-stream implicit waits. */
static void sc_submit(sc_stream* s, sc_op* op);
static sc_op* sc_op_new(const char* what, CUresult (*run)(sc_op*), void (*fini)(sc_op*));
/* Host-waits (under sc.mu) until s has completed seq. */
static void sc_wait_stream_seq(sc_stream* s, uint64_t seq, int spin);
static void sc_pools_release(int dev);

static sc_alloc* sc_alloc_find(uintptr_t p); /* the live allocation containing p */
static CUresult sc_check_range(uintptr_t p, size_t bytes, int device_side, sc_alloc** out);
static void sc_alloc_insert(sc_alloc* a);
static void sc_alloc_remove(sc_alloc* a);
static CUresult sc_dev_reserve(int dev, size_t bytes);
static void sc_dev_unreserve(int dev, size_t bytes);
static void sc_alloc_release_locked(sc_alloc* a);
static int sc_arena_ready_locked(void); /* memory.c: 1 when cuMemAlloc memory is shareable */
/* module.c: takes a module's variables out of the allocation table (its unload, or its
 * context's teardown): their addresses are no longer device memory. Idempotent. */
static void sc_module_unload_globals_locked(sc_module* m);
static void sc_ctx_sync_locked(sc_ctx* c);
/* share.c: the leak report's lines for VMM reservations and their mappings (count them) */
static size_t sc_share_report_locked(FILE* f);

/* graph.c: when s->capture is set, sc_submit hands the op to sc_graph_capture_op, which
 * either records it into the capture graph (returns 1, and owns op) or returns 0. */
static int sc_graph_capture_op(sc_stream* s, sc_op* op);
/* graph.c (hooks in stream.c): cuStreamWaitEvent asks sc_graph_capture_wait first; it
 * returns 1 when the wait is a stream-capture fork/join (or error, in *r) and must not be
 * enqueued. cuStreamSynchronize / cuStreamQuery on a capturing stream return
 * sc_graph_capture_sync_refused(s) (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; invalidates). */
static int sc_graph_capture_wait(sc_stream* s, sc_event* e, CUresult* r);
/* memop.c: context teardown first releases waits that can never be met (reporting each
 * as a leak), so that it does not hang; the exit report lists waits still parked. */
static void sc_memop_teardown_locked(sc_ctx* c);
/* memop.c: as on two H200s (tools/probe/peer_park_probe.c), destroying a context first
 * waits for the work of every other context, a stream parked on a value wait included
 * (for ever, if nothing meets it). */
static void sc_ctx_wait_others_locked(sc_ctx* c);
static size_t sc_memop_report_parked_locked(FILE* f);
static CUresult sc_graph_capture_sync_refused(sc_stream* s);
/* graph.c: for the entry points CUDA calls "potentially unsafe" during a stream capture
 * (synchronizes, queries, plain allocations and frees, synchronous copies and fills, module
 * loads): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, invalidating the capture it offends, when
 * the calling thread's capture mode forbids them (under sc.mu). SC_UNSAFE_CALL() follows
 * SC_ENTER in each of them. */
static CUresult sc_graph_unsafe_call(void);
#define SC_UNSAFE_CALL()                                   \
  do {                                                     \
    CUresult sc_unsafe_r_;                                 \
    SC_LOCK();                                             \
    sc_unsafe_r_ = sc_graph_unsafe_call();                 \
    SC_UNLOCK();                                           \
    if (sc_unsafe_r_ != CUDA_SUCCESS) return sc_unsafe_r_; \
  } while (0)

#endif /* SC_INTERNAL_H */
