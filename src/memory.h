/* memory: buffers (device, pinned host, managed) and each device's stream-ordered pool. */
#ifndef GPUHAL_SRC_MEMORY_H
#define GPUHAL_SRC_MEMORY_H

#include "internal.h"
#include "device.h"

typedef struct gpuhal_buffer_s gpuhal_buffer_t;

typedef enum gpuhal_memory_kind_e {
  GPUHAL_MEMORY_DEVICE = 0,      /* device memory (cuMemAlloc) */
  GPUHAL_MEMORY_HOST_PINNED = 1, /* page-locked host memory the GPU can reach (cuMemAllocHost) */
  GPUHAL_MEMORY_MANAGED = 2      /* unified memory that migrates on demand (cuMemAllocManaged) */
} gpuhal_memory_kind_t;

/* Allocates `size` bytes (> 0) of `kind` on `device`. The buffer retains the device. */
GPUHAL_API gpuhal_status_t gpuhal_buffer_allocate(gpuhal_device_t* device, gpuhal_memory_kind_t kind, uint64_t size,
                                                  gpuhal_buffer_t** out_buffer);
GPUHAL_API void gpuhal_buffer_retain(gpuhal_buffer_t* buffer);
/* Releasing NULL is a no-op. The last release frees the memory: at once, or, while queue
 * work of the device's ordinal waits on the GPU for a value (CUDA's cuMemFree would wait
 * for it), once that work is done; gpuhal_device_memory_stats stops counting it at once. A
 * buffer over a module's global (gpuhal_executable_global_buffer) frees nothing: its last
 * release lets go of its executable. */
GPUHAL_API void gpuhal_buffer_release(gpuhal_buffer_t* buffer);
/* Size, kind and device of a buffer; 0 / GPUHAL_MEMORY_DEVICE / NULL for bad input. */
GPUHAL_API uint64_t gpuhal_buffer_size(gpuhal_buffer_t* buffer);
GPUHAL_API gpuhal_memory_kind_t gpuhal_buffer_kind(gpuhal_buffer_t* buffer);
GPUHAL_API gpuhal_device_t* gpuhal_buffer_device(gpuhal_buffer_t* buffer);
/* The address kernels use. FAILED_PRECONDITION while a queue_alloca buffer is not yet
 * issued (an alloca waits on the host until what it waits for is submitted), or after it
 * was deallocated. */
GPUHAL_API gpuhal_status_t gpuhal_buffer_device_address(gpuhal_buffer_t* buffer, uint64_t* out_address);
/* The host pointer of pinned and managed memory; NULL for device memory (and bad input). */
GPUHAL_API void* gpuhal_buffer_host_pointer(gpuhal_buffer_t* buffer);
/* Synchronous copies between the buffer and host memory. They are not ordered with queue
 * work (wait on the semaphore that work signals first), nor with the application's own
 * work in the same context: they run on streams of gpuhal's own, which do not wait for
 * the legacy default stream or blocking streams (the CUDA runtime's). Any thread. */
GPUHAL_API gpuhal_status_t gpuhal_buffer_read(gpuhal_buffer_t* buffer, uint64_t offset, void* dst, uint64_t size);
GPUHAL_API gpuhal_status_t gpuhal_buffer_write(gpuhal_buffer_t* buffer, uint64_t offset, const void* src,
                                               uint64_t size);

/* ---- sharing device memory with other processes ----
 * A buffer exported in one process and imported in another is the same device memory: GPU
 * work of both reads and writes it, ordered by semaphores they share
 * (gpuhal_semaphore_export), with no copy through the host. Each process releases its own
 * buffer as usual, in either order.
 *
 * gpuhal_buffer_allocate_exportable makes device memory with a file descriptor handle
 * (cuMemCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, rounded up to the device's
 * allocation granularity) where the device supports it, and the memory lives until every
 * process released it. Elsewhere, and for any other GPUHAL_MEMORY_DEVICE buffer of
 * gpuhal_buffer_allocate, export gives a legacy IPC handle (cuIpcGetMemHandle): the
 * exporting process must then keep its buffer until every importer released theirs
 * (CUDA's rule), and an importer must be another process. */
typedef enum gpuhal_buffer_handle_type_e {
  GPUHAL_BUFFER_HANDLE_FD = 1, /* `fd` names the memory: pass it with SCM_RIGHTS (a Unix socket) */
  GPUHAL_BUFFER_HANDLE_IPC = 2 /* `ipc` names it (plain bytes); `fd` is -1 */
} gpuhal_buffer_handle_type_t;

/* What another process needs to import a buffer: send the struct's bytes, and its `fd`
 * (when not -1) with SCM_RIGHTS. */
typedef struct gpuhal_buffer_handle_t {
  uint32_t type;            /* gpuhal_buffer_handle_type_t */
  int32_t fd;               /* GPUHAL_BUFFER_HANDLE_FD: the caller's to close once sent */
  uint64_t size;            /* the buffer's size */
  uint64_t allocation_size; /* GPUHAL_BUFFER_HANDLE_FD: the memory's size (granularity-rounded) */
  uint8_t ipc[64];          /* GPUHAL_BUFFER_HANDLE_IPC: the CUipcMemHandle */
} gpuhal_buffer_handle_t;

/* A GPUHAL_MEMORY_DEVICE buffer of `size` (> 0) bytes made to be exported (see above). */
GPUHAL_API gpuhal_status_t gpuhal_buffer_allocate_exportable(gpuhal_device_t* device, uint64_t size,
                                                             gpuhal_buffer_t** out_buffer);
/* Fills *out_handle for gpuhal_buffer_import in another process. The buffer must be
 * GPUHAL_MEMORY_DEVICE memory of gpuhal_buffer_allocate(_exportable) (not queue_alloca
 * memory, not an imported buffer). Each call makes a new `fd`. */
GPUHAL_API gpuhal_status_t gpuhal_buffer_export(gpuhal_buffer_t* buffer, gpuhal_buffer_handle_t* out_handle);
/* A GPUHAL_MEMORY_DEVICE buffer of `device` over the memory another process exported.
 * handle->fd stays the caller's to close. */
GPUHAL_API gpuhal_status_t gpuhal_buffer_import(gpuhal_device_t* device, const gpuhal_buffer_handle_t* handle,
                                                gpuhal_buffer_t** out_buffer);

/* Memory of a device. The pool is the stream-ordered pool of gpuhal_queue_alloca: it keeps
 * memory that deallocas gave back (up to gpuhal_device_params_t.pool_release_threshold,
 * by default all of it) for the next allocas. An allocation that runs out of memory
 * (gpuhal_buffer_allocate or gpuhal_queue_alloca) trims the pool and tries once more; an
 * alloca also waits, on the GPU, for deallocas other queues issued that are still in
 * flight (see gpuhal_queue_alloca). Without pool support the pool_* figures are 0. */
typedef struct gpuhal_memory_stats_t {
  uint64_t pool_reserved;      /* bytes the pool holds from the device now */
  uint64_t pool_used;          /* ... of which allocas use */
  uint64_t pool_reserved_high; /* the most pool_reserved has been since the device was created */
  uint64_t pool_used_high;     /* the most pool_used has been since the device was created */
  uint64_t buffers_allocated;  /* bytes asked for by live GPUHAL_MEMORY_DEVICE buffers of gpuhal_buffer_allocate
                                  and gpuhal_buffer_allocate_exportable (the device rounds the latter up to
                                  its granularity; imported buffers are not counted) */
  uint64_t device_free;        /* free device memory (cuMemGetInfo: every process and pool counts) */
  uint64_t device_total;
} gpuhal_memory_stats_t;

/* Gives the pool's unused memory back to the device. Memory of deallocas still in flight
 * on the GPU is not unused yet: wait for their signals (or gpuhal_device_wait_idle) first.
 * (A dealloca may signal as soon as its free is enqueued on an idle stream; the trim waits
 * the few microseconds until such frees have run.) */
GPUHAL_API gpuhal_status_t gpuhal_device_trim(gpuhal_device_t* device);
/* Fills *out_stats. The high-water marks are never reset. */
GPUHAL_API gpuhal_status_t gpuhal_device_memory_stats(gpuhal_device_t* device, gpuhal_memory_stats_t* out_stats);

/* ---- gpuhal:internal ---- */

#define GPUHAL__MAGIC_BUFFER 0x47425546u /* "GBUF" */

/* A buffer's memory: UNALLOCATED until a queue_alloca is issued, LIVE while usable,
 * FREED after a queue_dealloca was issued. Plain allocations are LIVE from the start. */
typedef enum gpuhal__buffer_state_e {
  GPUHAL__BUFFER_UNALLOCATED = 0,
  GPUHAL__BUFFER_LIVE = 1,
  GPUHAL__BUFFER_FREED = 2
} gpuhal__buffer_state_t;

struct gpuhal_buffer_s {
  gpuhal__object_t header;
  gpuhal_device_t* device; /* retained */
  gpuhal_memory_kind_t kind;
  uint64_t size;
  /* Device address; 0 until issued for a pending (queue_alloca) buffer. The queue writes
   * it before storing state LIVE (release); readers load state (acquire) first. */
  CUdeviceptr address;
  void* host_pointer; /* pinned and managed */
  int32_t state;      /* gpuhal__buffer_state_t, atomic */
  int pending;        /* memory comes from the device pool through the queue */
  /* How the memory is shared with other processes (memory_shared.c); 0: it is not. */
  int share;                     /* gpuhal__buffer_share_t */
  unsigned long long vmm_handle; /* GPUHAL__SHARE_VMM_*: the CUmemGenericAllocationHandle */
  uint64_t vmm_size;             /* GPUHAL__SHARE_VMM_*: the mapped (granularity-rounded) size */
  void* queue_data;              /* the queue's own per-buffer state */
  /* The record its free takes when it must be put off (gpuhal__device_sync_call), reserved
   * when the buffer is made (not for a pending buffer, whose memory goes back to the pool):
   * a release cannot report that it ran out of host memory, so it must need none. */
  struct gpuhal__deferred_call_s* put_off;
  /* A buffer over memory an executable's module owns (gpuhal_executable_global_buffer,
   * gpuhal__buffer_create_view): nothing to free; NULL for every other buffer. */
  struct gpuhal__buffer_view_s* view;
};

typedef enum gpuhal__buffer_share_e {
  GPUHAL__SHARE_NONE = 0,
  GPUHAL__SHARE_VMM_OWN = 1,      /* cuMemCreate'd here, mapped at `address` */
  GPUHAL__SHARE_VMM_IMPORTED = 2, /* imported from a file descriptor, mapped at `address` */
  GPUHAL__SHARE_IPC_IMPORTED = 3  /* cuIpcOpenMemHandle'd at `address` */
} gpuhal__buffer_share_t;

/* At most this many idle copy streams are kept per device; a copy finding none makes one. */
#define GPUHAL__COPY_STREAMS_IDLE_MAX 4

/* The stream-ordered pool of one device. */
typedef struct gpuhal__memory_state_s {
  CUmemoryPool pool; /* NULL: no pool support; pool allocations fall back to cuMemAlloc */
  int owns_pool;     /* 1: created by us (destroyed with the device); 0: the device's default pool */
  /* Ordinals (below 64) whose contexts were given access to the pool's memory
   * (gpuhal__pool_grant_peer; atomic): peer access between contexts does not cover it. */
  uint64_t pool_peers;
  /* 1: an allocation never makes its stream wait for another stream's free
   * (gpuhal__pool_forbid_hidden_waits), so one on an idle stream is done when issued */
  int no_hidden_waits;
  /* Per queue: 1 once a pool free was issued on its stream, until an alloca that ran out of
   * memory found the stream idle (atomic). Such an alloca waits for the streams still busy. */
  int32_t frees_issued[GPUHAL_MAX_QUEUES];
  CUevent oom_event; /* recorded on those streams for the alloca to wait on; lazily made */
  /* Per queue: recorded right behind an at-once dealloca's free (gpuhal__pool_mark_free),
   * made lazily under issue_mutex; free_mark_seq counts the records, free_settled_seq the
   * last count a trim or an alloca out of memory waited for (atomic): a waiter that finds
   * them equal has nothing to wait for, and two waiters at once both wait. */
  CUevent free_marks[GPUHAL_MAX_QUEUES];
  uint32_t free_mark_seq[GPUHAL_MAX_QUEUES];
  uint32_t free_settled_seq[GPUHAL_MAX_QUEUES];
  uint64_t buffers_allocated; /* bytes of live gpuhal_buffer_allocate device memory (atomic) */
  /* This device's share of driver->gpu_waits (under driver->parked_mutex): queue work in
   * flight that may wait on the GPU for a value. See gpuhal__device_sync_call. */
  int32_t gpu_waits;
  gpuhal__task_t flush_task; /* posted when driver->gpu_waits drops to zero with calls put off */
  gpuhal_device_t* flush_device;
  /* Idle streams for gpuhal_buffer_read / _write (gpuhal__copy_stream_take), under
   * copy_mutex: non-blocking streams of gpuhal's own, one per copy in flight. */
  gpuhal__mutex_t copy_mutex;
  CUstream copy_streams[GPUHAL__COPY_STREAMS_IDLE_MAX];
  uint32_t copy_stream_count;
} gpuhal__memory_state_t;

/* A call that waits for a whole context, put off (see gpuhal__device_sync_call). It keeps
 * the primary context of `cu_device` retained, so it outlives the device that made it. */
typedef struct gpuhal__deferred_call_s {
  struct gpuhal__deferred_call_s* next;
  CUdevice cu_device;
  CUcontext context;
  void* host;          /* cuMemFreeHost, or */
  CUdeviceptr address; /* cuMemFree, or */
  CUmodule module;     /* cuModuleUnload, or */
  CUlibrary library;   /* cuLibraryUnload, or */
  int share;           /* a shared buffer's memory at `address` (gpuhal__buffer_share_t), or */
  unsigned long long vmm_handle;
  uint64_t vmm_size;
  void* unregister;        /* cuMemHostUnregister, then munmap of unregister_bytes */
  size_t unregister_bytes; /* (a shared semaphore's file, semaphore_shared.c), or nothing: */
  /* only the context's reference goes (gpuhal__driver_release_context). */
  /* A record reserved by the call's owner when it was made, which gpuhal__device_sync_call
   * takes (uses, or frees when the call runs at once); NULL: one is allocated if needed. */
  struct gpuhal__deferred_call_s* reserved;
} gpuhal__deferred_call_t;

GPUHAL__PRIVATE gpuhal_status_t gpuhal__memory_state_create(gpuhal_device_t* device);

GPUHAL__PRIVATE void gpuhal__memory_state_destroy(gpuhal_device_t* device);

/* Lets `peer`'s context reach the memory of `device`'s own pool (its transient buffers):
 * enabling peer access between two contexts does not cover stream-ordered pools, whose
 * access is set per pool (cuMemPoolSetAccess). Once per pair; nothing for the default pool,
 * which is the application's too. A refusal is logged: it only closes the pool to GRAPH
 * copies (gpuhal__pool_opened_to); a STREAM copy (cuMemcpyPeerAsync) needs no access. */
GPUHAL__PRIVATE void gpuhal__pool_grant_peer(gpuhal_device_t* device, gpuhal_device_t* peer);
/* 1 when `peer`'s work may touch `device`'s transient buffers directly (a kernel or a graph
 * copy of `peer`): same GPU, no pool (plain allocations), or its own pool opened to `peer`. */
GPUHAL__PRIVATE int gpuhal__pool_opened_to(const gpuhal_device_t* device, const gpuhal_device_t* peer);

/* gpuhal__pool_free_async with the device's context already current (the queue's issue). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__pool_free_current(gpuhal_device_t* device, CUstream stream, CUdeviceptr ptr);
/* An at-once dealloca (queue_submit.c) signals as soon as its free is enqueued on an idle
 * stream, before the free has run on the GPU: its memory is not free for a trim, nor for
 * the pool to grow from, yet. This records an event right behind the free, so that
 * gpuhal_device_trim and an alloca out of memory first wait for it (microseconds: the
 * stream was idle). Best effort: without the event they only lose that. Under issue_mutex
 * with the context current. */
GPUHAL__PRIVATE void gpuhal__pool_mark_free(gpuhal_device_t* device, CUstream stream);

/* A device buffer with no memory yet, for queue_alloca: the queue sets `address` (then
 * state LIVE) when the allocation is issued. Its object comes from the driver's object pool
 * like every buffer's, so a steady stream of allocas reuses released objects. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__buffer_create_pending(gpuhal_device_t* device, uint64_t size,
                                                              gpuhal_buffer_t** out_buffer);

/* Issues a pending buffer's allocation on `stream` (the queue's issue of a queue_alloca,
 * context current): sets its address, then makes it LIVE. Out of memory, with `recover`,
 * it recovers what it can first (gpuhal__pool_alloc_or_recover, which may make `stream`
 * wait on the GPU for other queues' frees); it never blocks. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__buffer_pending_allocate(gpuhal_buffer_t* buffer, gpuhal_device_t* device,
                                                                CUstream stream, int recover);

/* Runs `call` now or puts it off (see gpuhal__device_sync_call in memory.c). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_sync_call(gpuhal_device_t* device, const gpuhal__deferred_call_t* call);

/* For calls that wait for a whole context without a gpuhal device at hand: runs `call` in
 * the primary context of `cu_device` now, or puts it off while queue work of the driver
 * may wait on the GPU for a value. Takes over the reference to that primary context the
 * caller retained (`context`): released once the call has run, whatever happened (so
 * nothing here needs a retain of its own, which could fail). Takes `call->reserved` as
 * gpuhal__device_sync_call does: with it, this allocates nothing. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__driver_sync_call(gpuhal_driver_t* driver, CUdevice cu_device, CUcontext context,
                                                         const gpuhal__deferred_call_t* call);
/* Releases a device's reference to the primary context of `cu_device` now, or puts it off
 * while queue work of any device of the driver may wait on the GPU for a value: the last
 * release destroys the context, and destroying a context waits for the work of every
 * device, a stream parked on a value another device's release would have let go included
 * (tools/probe/peer_park_probe.c). Takes `reserved` (the device's context_release, or NULL). */
GPUHAL__PRIVATE void gpuhal__driver_release_context(gpuhal_driver_t* driver, CUdevice cu_device, CUcontext context,
                                                    gpuhal__deferred_call_t* reserved);
/* Runs fn(arg) (which makes calls that wait for a whole context) while no queue work of the
 * driver waits on the GPU for a value, none being enqueued meanwhile; FAILED_PRECONDITION,
 * naming `func`, while some does (the call would wait for that work, which may wait for
 * the caller). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__driver_call_unparked(gpuhal_driver_t* driver, const char* func,
                                                             gpuhal_status_t (*fn)(void*), void* arg);

/* The call `d` names, in the current context. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__deferred_call_run(const gpuhal__cuda_symbols_t* cu,
                                                          const gpuhal__deferred_call_t* d);

/* memory_shared.c: unmaps (and releases) or closes a shared buffer's memory, current context. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__shared_memory_free_current(const gpuhal__cuda_symbols_t* cu,
                                                                   const gpuhal__deferred_call_t* d);

/* memory.c's, for memory_shared.c: a zeroed buffer object of `device` (a device
 * reference taken), no memory yet; and its undoing before it went LIVE. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__buffer_new(gpuhal_device_t* device, gpuhal_memory_kind_t kind, uint64_t size,
                                                   gpuhal_buffer_t** out_buffer);
GPUHAL__PRIVATE void gpuhal__buffer_discard(gpuhal_buffer_t* buffer);
/* Allocates a new buffer's memory of its kind (GPUHAL__SHARE_VMM_OWN: exportable), trimming
 * the pool and trying again once when out of memory. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__buffer_allocate_memory(gpuhal_buffer_t* buffer);
/* memory_shared.c: cuMemCreate'd, mapped memory for a GPUHAL__SHARE_VMM_OWN buffer. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__shared_memory_allocate_current(gpuhal_buffer_t* buffer);

/* The record a call that may be put off takes (gpuhal__device_sync_call), reserved by the
 * owner of what the call frees when it makes that: a release cannot report that it ran out
 * of host memory, so it must need none. The helpers below take it (`reserved`: uses or
 * frees it); NULL: one is allocated if the call is put off. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__deferred_call_reserve(const gpuhal_allocator_t* allocator, const char* what,
                                                              gpuhal__deferred_call_t** out);

/* Frees `host` (cuMemFreeHost) or `address` (cuMemFree); see gpuhal__device_sync_call. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_free(gpuhal_device_t* device, void* host, CUdeviceptr address,
                                                    gpuhal__deferred_call_t* reserved);

/* cuModuleUnload; see gpuhal__device_sync_call. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_unload_module(gpuhal_device_t* device, CUmodule module,
                                                             gpuhal__deferred_call_t* reserved);

/* cuLibraryUnload (it unloads the library's module from every context, which waits as
 * cuModuleUnload does); see gpuhal__device_sync_call. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_unload_library(gpuhal_device_t* device, CUlibrary library,
                                                              gpuhal__deferred_call_t* reserved);

/* Between these (nested), the calling thread is an application thread inside a queue call
 * that releases what it retired (a harvest): gpuhal__device_free and
 * gpuhal__device_unload_module, which wait until the whole context is idle, are put off to
 * the device's worker rather than run there, so the queue call does not wait for the GPU. */
GPUHAL__PRIVATE void gpuhal__put_off_begin(void);
GPUHAL__PRIVATE void gpuhal__put_off_end(void);
GPUHAL__PRIVATE void gpuhal__driver_flush_deferred(gpuhal_driver_t* driver);

/* The queue is about to enqueue (+1), or has seen the end of (-1), work that may wait on the
 * GPU for a value. When no such work is left, what was put off runs on this device's
 * worker. +1 without a claim only for work that waits behind work already counted. */
GPUHAL__PRIVATE void gpuhal__memory_gpu_waits_add(gpuhal_device_t* device, int32_t delta);

/* The queue asks to park work on the GPU (a value wait): 1 and counted (+1) unless a call
 * that waits for a whole context is running (see gpuhal__device_sync_call); then 0 and the
 * work waits on the host instead. Never blocks: that call may be waiting for this device's
 * peers (a collective), whose issue must not wait for it. */
GPUHAL__PRIVATE int gpuhal__memory_gpu_wait_claim(gpuhal_device_t* device);

/* A LIVE GPUHAL_MEMORY_DEVICE buffer of `device` over `size` bytes at `address` that
 * `executable`'s module owns (a global: gpuhal_executable_global_buffer). It takes over the
 * caller's reference to the executable (kept only on success) and frees no memory: its last
 * release drops that reference (the hooks table's executable_release_ref; put off to the
 * device's worker when that release runs on another device's worker, which must not wait
 * for it), with a record reserved here, so a release needs no memory. */
struct gpuhal_executable_s; /* executable.h, a later module: named by its tag */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__buffer_create_view(gpuhal_device_t* device, CUdeviceptr address, uint64_t size,
                                                           struct gpuhal_executable_s* executable,
                                                           gpuhal_buffer_t** out_buffer);

/* gpuhal's own references (command buffers, queue actions, collectives); NULL is fine. */
GPUHAL__PRIVATE void gpuhal__buffer_retain_ref(gpuhal_buffer_t* buffer);
GPUHAL__PRIVATE void gpuhal__buffer_release_ref(gpuhal_buffer_t* buffer);

#endif /* GPUHAL_SRC_MEMORY_H */
