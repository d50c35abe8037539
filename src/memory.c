/* memory: buffers, the device's stream-ordered pool, running out of memory, and the
 * calls put off while work waits on the GPU (memory.h). */
#include "memory.h"
#include "symbols.h"
#include "status.h"

#include <sys/mman.h>

static void gpuhal__driver_flush_deferred_locked(gpuhal_driver_t* driver);

/* ---- the device pool ---- */

static gpuhal_status_t gpuhal__pool_set_threshold(gpuhal_device_t* device, CUmemoryPool pool) {
  cuuint64_t threshold = (cuuint64_t)device->params.pool_release_threshold;
  return GPUHAL__CU(device->cu, cuMemPoolSetAttribute, (pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
}

/* Left to itself, CUDA may hand an allocation a block whose free is still queued on another
 * stream and make the allocating stream wait for that free
 * (CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, on by default): a wait between queues
 * that nothing asked for (a queue held up by another's long work), and one a call done at
 * once (queue_submit.c) cannot see. gpuhal's own pool turns it off; out of memory,
 * gpuhal__pool_wait_for_frees makes such waits itself, explicitly. The device's default
 * pool is shared with the rest of the process, so it is left as it is. */
static void gpuhal__pool_forbid_hidden_waits(gpuhal_device_t* device) {
  int off = 0;
  gpuhal_status_t status = GPUHAL__CU(device->cu, cuMemPoolSetAttribute,
                                      (device->memory->pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, &off));
  if (status) {
    gpuhal__log(device->logger, GPUHAL_LOG_INFO, "device %d: %s; allocas keep their events", device->ordinal,
                gpuhal_status_message(status));
    gpuhal_status_free(status);
    return;
  }
  device->memory->no_hidden_waits = 1;
}

/* Our own pool (device-located, pinned, release threshold from the params); the device's
 * default pool when creating one fails. The default pool is process-wide, shared with the
 * application's own cuMemAllocAsync, and outlives the device: none of its attributes are
 * changed (its release threshold stays what the application made it, so
 * pool_release_threshold does not apply to it). Runs on the worker. */
static gpuhal_status_t gpuhal__pool_create(void* arg) {
  gpuhal_device_t* device = (gpuhal_device_t*)arg;
  const gpuhal__cuda_symbols_t* cu = device->cu;
  gpuhal__memory_state_t* memory = device->memory;
  CUmemPoolProps props;
  gpuhal_status_t status;
  memset(&props, 0, sizeof(props));
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device->ordinal;
  props.maxSize = (size_t)device->params.pool_max_bytes;
  status = GPUHAL__CU(cu, cuMemPoolCreate, (&memory->pool, &props));
  if (!status) {
    memory->owns_pool = 1;
    gpuhal__pool_forbid_hidden_waits(device);
  } else if (device->params.pool_max_bytes) {
    /* The default pool has no limit: falling back would drop the one asked for. */
    return gpuhal_status_annotate(status,
                                  "creating a pool of at most %llu bytes (params->pool_max_bytes; "
                                  "CUDA 12.2 or later)",
                                  (unsigned long long)device->params.pool_max_bytes);
  } else if (cu->cuDeviceGetDefaultMemPool) {
    gpuhal__log(device->logger, GPUHAL_LOG_INFO, "device %d: %s; using the default pool", device->ordinal,
                gpuhal_status_message(status));
    gpuhal_status_free(status);
    memory->pool = NULL;
    GPUHAL__CU_RETURN(cu, cuDeviceGetDefaultMemPool, (&memory->pool, device->cu_device));
    return NULL;
  } else {
    return status;
  }
  return gpuhal__pool_set_threshold(device, memory->pool);
}

GPUHAL__PRIVATE void gpuhal__pool_grant_peer(gpuhal_device_t* device, gpuhal_device_t* peer) {
  gpuhal__memory_state_t* memory = device->memory;
  uint64_t bit = peer->ordinal < 64 ? (uint64_t)1 << peer->ordinal : 0;
  CUmemAccessDesc desc;
  gpuhal_status_t status;
  if (!memory || !memory->pool || !memory->owns_pool || peer->cu_device == device->cu_device) return;
  if (bit && (gpuhal__atomic_load(&memory->pool_peers) & bit)) return;
  if (!device->cu->cuMemPoolSetAccess) return;
  memset(&desc, 0, sizeof(desc));
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = (int)peer->cu_device;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  status = GPUHAL__CU(device->cu, cuMemPoolSetAccess, (memory->pool, &desc, 1));
  if (!status) {
    if (bit) gpuhal__atomic_or(&memory->pool_peers, bit);
    return;
  }
  gpuhal__log(device->logger, GPUHAL_LOG_WARN,
              "device %d: its memory pool stays closed to device %d (GRAPH command buffers of that device cannot "
              "copy its transient buffers): %s",
              device->ordinal, peer->ordinal, gpuhal_status_message(status));
  gpuhal_status_free(status);
}

GPUHAL__PRIVATE int gpuhal__pool_opened_to(const gpuhal_device_t* device, const gpuhal_device_t* peer) {
  const gpuhal__memory_state_t* memory = device->memory;
  if (!memory || !memory->pool || peer->cu_device == device->cu_device) return 1; /* no pool: plain memory */
  if (!memory->owns_pool) return 0;
  return peer->ordinal >= 64 || ((gpuhal__atomic_load(&memory->pool_peers) >> peer->ordinal) & 1);
}

static gpuhal_status_t gpuhal__pool_destroy(void* arg) {
  gpuhal_device_t* device = (gpuhal_device_t*)arg;
  gpuhal__memory_state_t* memory = device->memory;
  gpuhal_status_t status = NULL;
  uint32_t i;
  if (memory->oom_event) status = GPUHAL__CU(device->cu, cuEventDestroy, (memory->oom_event));
  memory->oom_event = NULL;
  for (i = 0; i < GPUHAL_MAX_QUEUES; ++i) {
    if (memory->free_marks[i]) gpuhal_status_free(GPUHAL__CU(device->cu, cuEventDestroy, (memory->free_marks[i])));
    memory->free_marks[i] = NULL;
  }
  if (memory->pool && memory->owns_pool) {
    gpuhal_status_t destroyed = GPUHAL__CU(device->cu, cuMemPoolDestroy, (memory->pool));
    if (!status) {
      status = destroyed;
    } else {
      gpuhal_status_free(destroyed);
    }
  }
  memory->pool = NULL;
  return status;
}

static void gpuhal__memory_flush_task(gpuhal__task_t* task);

GPUHAL__PRIVATE gpuhal_status_t gpuhal__memory_state_create(gpuhal_device_t* device) {
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, sizeof(gpuhal__memory_state_t), "device memory state",
                                               (void**)&device->memory));
  gpuhal__mutex_init(&device->memory->copy_mutex);
  gpuhal__list_init(&device->memory->flush_task.node);
  device->memory->flush_task.fn = gpuhal__memory_flush_task;
  device->memory->flush_device = device;
  if (!device->context_release)
    GPUHAL__RETURN_IF_ERROR(gpuhal__deferred_call_reserve(device->allocator, "the record of a context's release",
                                                          &device->context_release));
  if (!device->info.memory_pools_supported && device->params.pool_max_bytes)
    return gpuhal_status_make(GPUHAL_STATUS_UNIMPLEMENTED,
                              "gpuhal_device_create: argument 'params->pool_max_bytes' needs stream-ordered pools, "
                              "which device %d does not support",
                              device->ordinal);
  if (!device->info.memory_pools_supported) {
    gpuhal__log(device->logger, GPUHAL_LOG_INFO, "device %d: no stream-ordered pools; queue allocations use cuMemAlloc",
                device->ordinal);
    return NULL;
  }
  return gpuhal_status_annotate(gpuhal__worker_call(device, gpuhal__pool_create, device),
                                "creating the memory pool of device %d", device->ordinal);
}

static gpuhal_status_t gpuhal__memory_flush_call(void* driver);
static gpuhal_status_t gpuhal__copy_streams_destroy(void* arg);

GPUHAL__PRIVATE void gpuhal__memory_state_destroy(gpuhal_device_t* device) {
  gpuhal__memory_state_t* memory = device->memory;
  if (!memory) return;
  /* The queue is gone: nothing of this device waits on the GPU any more. What was put off
   * runs once no other device's work does (on this thread, or a flush task of theirs). */
  gpuhal__mutex_lock(&device->driver->parked_mutex);
  device->driver->gpu_waits -= memory->gpu_waits;
  memory->gpu_waits = 0;
  gpuhal__mutex_unlock(&device->driver->parked_mutex);
  /* On the worker, after any flush task still queued there. */
  gpuhal_status_free(gpuhal__worker_call(device, gpuhal__memory_flush_call, device->driver));
  gpuhal_status_free(gpuhal__worker_call(device, gpuhal__copy_streams_destroy, device));
  if (device->memory->pool) {
    gpuhal_status_t status = gpuhal__worker_call(device, gpuhal__pool_destroy, device);
    if (status) {
      gpuhal__log(device->logger, GPUHAL_LOG_ERROR, "device %d: %s", device->ordinal, gpuhal_status_message(status));
      gpuhal_status_free(status);
    }
  }
  gpuhal__mutex_destroy(&memory->copy_mutex);
  gpuhal__free(device->allocator, device->memory);
  device->memory = NULL;
}

/* Allocates `size` bytes in stream order on `stream` from the device pool; without pool
 * support, a synchronous cuMemAlloc. The _current form needs the device's context current
 * (the queue's issue); the _async form enters it (any thread). Allocations and frees,
 * stream-ordered ones too, are calls CUDA refuses during another thread's global stream
 * capture: they run in relaxed mode (this may be the caller-issue path, device.h). */
static gpuhal_status_t gpuhal__pool_alloc_current(gpuhal_device_t* device, CUstream stream, uint64_t size,
                                                  CUdeviceptr* out_ptr) {
  gpuhal__capture_scope_t capture;
  gpuhal_status_t status;
  *out_ptr = 0;
  if (size > (uint64_t)SIZE_MAX)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE, "allocation of %llu bytes exceeds the address space",
                              (unsigned long long)size);
  gpuhal__capture_relax(device->cu, &capture);
  if (device->memory && device->memory->pool)
    status = GPUHAL__CU(device->cu, cuMemAllocFromPoolAsync, (out_ptr, (size_t)size, device->memory->pool, stream));
  else
    status = GPUHAL__CU(device->cu, cuMemAlloc, (out_ptr, (size_t)size));
  gpuhal__capture_restore(device->cu, &capture);
  return status;
}

/* The index of the queue whose stream is `stream`, or -1. */
static int gpuhal__stream_queue_index(gpuhal_device_t* device, CUstream stream) {
  uint32_t i;
  for (i = 0; device->streams && i < device->queue_count; ++i)
    if (device->streams[i] == stream) return (int)i;
  return -1;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__pool_free_current(gpuhal_device_t* device, CUstream stream, CUdeviceptr ptr) {
  gpuhal__capture_scope_t capture;
  gpuhal_status_t status;
  if (!ptr) return NULL;
  gpuhal__capture_relax(device->cu, &capture); /* as gpuhal__pool_alloc_current */
  if (device->memory && device->memory->pool) {
    int queue = gpuhal__stream_queue_index(device, stream);
    if (queue >= 0) gpuhal__atomic_store(&device->memory->frees_issued[queue], 1);
    status = GPUHAL__CU(device->cu, cuMemFreeAsync, (ptr, stream));
  } else {
    status = GPUHAL__CU(device->cu, cuStreamSynchronize, (stream));
    if (!status) status = GPUHAL__CU(device->cu, cuMemFree, (ptr));
  }
  gpuhal__capture_restore(device->cu, &capture);
  return status;
}

GPUHAL__PRIVATE void gpuhal__pool_mark_free(gpuhal_device_t* device, CUstream stream) {
  gpuhal__memory_state_t* memory = device->memory;
  int queue = gpuhal__stream_queue_index(device, stream);
  gpuhal_status_t status = NULL;
  if (!memory || queue < 0) return;
  if (!memory->free_marks[queue])
    status = GPUHAL__CU(device->cu, cuEventCreate, (&memory->free_marks[queue], CU_EVENT_DISABLE_TIMING));
  if (!status) status = GPUHAL__CU(device->cu, cuEventRecord, (memory->free_marks[queue], stream));
  if (status) {
    gpuhal__log(device->logger, GPUHAL_LOG_DEBUG, "device %d: marking a dealloca's free: %s", device->ordinal,
                gpuhal_status_message(status));
    gpuhal_status_free(status);
    return;
  }
  gpuhal__atomic_add(&memory->free_mark_seq[queue], 1u); /* after the record: a waiter syncs on it */
}

/* An out-of-memory status whose recovery failed at `step`: the shortage stays the cause
 * (the first line), the step's error follows. */
static gpuhal_status_t gpuhal__oom_recovery_failed(gpuhal_status_t oom, gpuhal_status_t step) {
  gpuhal_status_t status =
      gpuhal_status_annotate(oom, "and recovering from it failed: %s", gpuhal_status_message(step));
  gpuhal_status_free(step);
  return status;
}

/* Waits for the frees of at-once deallocas (gpuhal__pool_mark_free); the context is current. */
static gpuhal_status_t gpuhal__pool_settle_marked_current(gpuhal_device_t* device) {
  gpuhal__memory_state_t* memory = device->memory;
  uint32_t i;
  for (i = 0; memory && i < device->queue_count; ++i) {
    uint32_t seq = gpuhal__atomic_load(&memory->free_mark_seq[i]);
    if (seq == gpuhal__atomic_load(&memory->free_settled_seq[i])) continue;
    /* The record in force now covers every mark counted in seq. */
    GPUHAL__CU_RETURN(device->cu, cuEventSynchronize, (memory->free_marks[i]));
    gpuhal__atomic_store(&memory->free_settled_seq[i], seq); /* racing waiters: at worst one more sync later */
  }
  return NULL;
}

/* ---- running out of memory ---- */

static int gpuhal__status_is_oom(gpuhal_status_t status) {
  return gpuhal_status_code(status) == GPUHAL_STATUS_RESOURCE_EXHAUSTED;
}

/* Gives the pool's unused memory back to the device (no pool: nothing to do). */
/* Also on the default pool when gpuhal uses it: a trim gives back only memory no
 * allocation holds, so the application's live allocations are untouched, and what it
 * would keep cached is what the application's own release threshold allows anyway. */
static gpuhal_status_t gpuhal__pool_trim_current(gpuhal_device_t* device) {
  if (!device->memory || !device->memory->pool) return NULL;
  return GPUHAL__CU(device->cu, cuMemPoolTrimTo, (device->memory->pool, 0));
}

static gpuhal_status_t gpuhal__pool_attribute(gpuhal_device_t* device, CUmemPool_attribute attr, uint64_t* out) {
  cuuint64_t value = 0;
  GPUHAL__CU_RETURN(device->cu, cuMemPoolGetAttribute, (device->memory->pool, attr, &value));
  *out = (uint64_t)value;
  return NULL;
}

/* gpuhal_device_memory_stats with the device's context current. */
static gpuhal_status_t gpuhal__memory_stats_current(gpuhal_device_t* device, gpuhal_memory_stats_t* out) {
  size_t free_bytes = 0, total_bytes = 0;
  memset(out, 0, sizeof(*out));
  if (device->memory) {
    out->buffers_allocated = gpuhal__atomic_load_relaxed(&device->memory->buffers_allocated);
    if (device->memory->pool) {
      GPUHAL__RETURN_IF_ERROR(
          gpuhal__pool_attribute(device, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &out->pool_reserved));
      GPUHAL__RETURN_IF_ERROR(gpuhal__pool_attribute(device, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &out->pool_used));
      GPUHAL__RETURN_IF_ERROR(
          gpuhal__pool_attribute(device, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &out->pool_reserved_high));
      GPUHAL__RETURN_IF_ERROR(gpuhal__pool_attribute(device, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &out->pool_used_high));
    }
  }
  GPUHAL__CU_RETURN(device->cu, cuMemGetInfo, (&free_bytes, &total_bytes));
  out->device_free = (uint64_t)free_bytes;
  out->device_total = (uint64_t)total_bytes;
  return NULL;
}

/* Adds to an out-of-memory status what was asked and what the pool and the device hold. */
static gpuhal_status_t gpuhal__oom_describe(gpuhal_device_t* device, gpuhal_status_t status, const char* what,
                                            uint64_t size) {
  gpuhal_memory_stats_t stats;
  gpuhal_status_t failed = gpuhal__memory_stats_current(device, &stats);
  if (failed) {
    status = gpuhal_status_annotate(status,
                                    "%s of %llu bytes on device %d failed after trimming the pool (no memory "
                                    "statistics: %s)",
                                    what, (unsigned long long)size, device->ordinal, gpuhal_status_message(failed));
    gpuhal_status_free(failed);
    return status;
  }
  return gpuhal_status_annotate(status,
                                "%s of %llu bytes on device %d failed after trimming the pool: the pool holds %llu "
                                "bytes (%llu in use; limit %llu, 0 = none), device buffers %llu; the device has "
                                "%llu of %llu bytes free",
                                what, (unsigned long long)size, device->ordinal,
                                (unsigned long long)stats.pool_reserved, (unsigned long long)stats.pool_used,
                                (unsigned long long)device->params.pool_max_bytes,
                                (unsigned long long)stats.buffers_allocated, (unsigned long long)stats.device_free,
                                (unsigned long long)stats.device_total);
}

/* Makes `stream` wait (on the GPU) for what is issued so far on each other queue stream
 * that issued a pool free and is still busy, so the pool may hand that memory on by its
 * event-dependency reuse rule. Never blocks. *out_count: the streams it waits for;
 * *out_ran: those found idle, whose frees ran (perhaps only after the caller's trim). */
static gpuhal_status_t gpuhal__pool_wait_for_frees(gpuhal_device_t* device, CUstream stream, int* out_count,
                                                   int* out_ran) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  gpuhal__memory_state_t* memory = device->memory;
  uint32_t i;
  *out_count = 0;
  *out_ran = 0;
  for (i = 0; i < device->queue_count; ++i) {
    CUstream other = device->streams[i];
    CUresult r;
    if (other == stream || !gpuhal__atomic_exchange(&memory->frees_issued[i], 0)) continue;
    r = cu->cuStreamQuery(other);
    if (r == CUDA_SUCCESS) { /* idle: its frees ran, maybe after the trim */
      (*out_ran)++;
      continue;
    }
    gpuhal__atomic_store(&memory->frees_issued[i], 1);
    if (r != CUDA_ERROR_NOT_READY) return gpuhal__cuda_status(cu, r, "cuStreamQuery", __FILE__, __LINE__);
    if (!memory->oom_event) GPUHAL__CU_RETURN(cu, cuEventCreate, (&memory->oom_event, CU_EVENT_DISABLE_TIMING));
    /* A wait takes the record in force when it is made, so one event serves every stream. */
    GPUHAL__CU_RETURN(cu, cuEventRecord, (memory->oom_event, other));
    GPUHAL__CU_RETURN(cu, cuStreamWaitEvent, (stream, memory->oom_event, 0));
    (*out_count)++;
  }
  return NULL;
}

/* gpuhal__pool_alloc_or_recover's recovery from `status`, the first attempt's shortage. */
static gpuhal_status_t gpuhal__pool_recover(gpuhal_device_t* device, CUstream stream, uint64_t size,
                                            CUdeviceptr* out_ptr, gpuhal_status_t status) {
  gpuhal_status_t step;
  int waited = 0, ran = 0;
  step = gpuhal__pool_settle_marked_current(device);
  if (!step) step = gpuhal__pool_trim_current(device);
  if (!step) {
    gpuhal_status_free(status);
    status = gpuhal__pool_alloc_current(device, stream, size, out_ptr);
    if (gpuhal__status_is_oom(status) && device->memory && device->memory->pool)
      step = gpuhal__pool_wait_for_frees(device, stream, &waited, &ran);
    if (!step && ran) step = gpuhal__pool_trim_current(device);
  }
  if (step) return gpuhal__oom_recovery_failed(status, step);
  if (waited || ran) {
    gpuhal_status_free(status);
    status = gpuhal__pool_alloc_current(device, stream, size, out_ptr);
  }
  return gpuhal__status_is_oom(status) ? gpuhal__oom_describe(device, status, "queue_alloca", size) : status;
}

/* A queue_alloca's allocation on `stream` (context current, issues serialized). Out of
 * memory, it waits for the frees of deallocas that already signalled (at once), trims the
 * pool and tries again; then, if other queues have pool frees in flight, waits for them on
 * the GPU, trims again when some had run meanwhile, and tries a last time. */
static gpuhal_status_t gpuhal__pool_alloc_or_recover(gpuhal_device_t* device, CUstream stream, uint64_t size,
                                                     CUdeviceptr* out_ptr) {
  gpuhal_status_t status = gpuhal__pool_alloc_current(device, stream, size, out_ptr);
  gpuhal__capture_scope_t capture;
  if (!gpuhal__status_is_oom(status)) return status;
  /* Its synchronizes and queries in relaxed capture mode: this may be the caller-issue path,
   * which does not relax its scope (device.h). */
  gpuhal__capture_relax(device->cu, &capture);
  status = gpuhal__pool_recover(device, stream, size, out_ptr, status);
  gpuhal__capture_restore(device->cu, &capture);
  return status;
}

/* Frees `ptr` in stream order; without pool support, waits for `stream` then cuMemFree.
 * Any thread: it enters the device's context. */
static gpuhal_status_t gpuhal__pool_free_async(gpuhal_device_t* device, CUstream stream, CUdeviceptr ptr) {
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  if (!ptr) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  status = gpuhal__pool_free_current(device, stream, ptr);
  gpuhal__context_leave(device, &scope);
  return status;
}

/* ---- buffers ---- */

/* Sets up a zeroed buffer object of `device` (taking a device reference), no memory yet. */
static void gpuhal__buffer_init(gpuhal_buffer_t* buffer, gpuhal_device_t* device, gpuhal_memory_kind_t kind,
                                uint64_t size) {
  gpuhal__object_init(&buffer->header, GPUHAL__MAGIC_BUFFER);
  gpuhal__device_retain_ref(device);
  buffer->device = device;
  buffer->kind = kind;
  buffer->size = size;
  buffer->state = GPUHAL__BUFFER_UNALLOCATED;
}

static gpuhal_status_t gpuhal__buffer_object_new(gpuhal_device_t* device, gpuhal_memory_kind_t kind, uint64_t size,
                                                 gpuhal_buffer_t** out_buffer) {
  gpuhal_buffer_t* buffer = NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_alloc(&device->driver->objects, GPUHAL__MAGIC_BUFFER, sizeof(*buffer),
                                               "gpuhal_buffer_t", (void**)&buffer));
  gpuhal__buffer_init(buffer, device, kind, size);
  *out_buffer = buffer;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__buffer_new(gpuhal_device_t* device, gpuhal_memory_kind_t kind, uint64_t size,
                                                   gpuhal_buffer_t** out_buffer) {
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_status_t status;
  GPUHAL__RETURN_IF_ERROR(gpuhal__buffer_object_new(device, kind, size, &buffer));
  status = gpuhal__deferred_call_reserve(device->allocator, "a buffer's free put off", &buffer->put_off);
  if (status) {
    gpuhal__buffer_discard(buffer);
    return status;
  }
  *out_buffer = buffer;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__buffer_create_pending(gpuhal_device_t* device, uint64_t size,
                                                              gpuhal_buffer_t** out_buffer) {
  GPUHAL__RETURN_IF_ERROR(gpuhal__buffer_object_new(device, GPUHAL_MEMORY_DEVICE, size, out_buffer));
  (*out_buffer)->pending = 1;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__buffer_pending_allocate(gpuhal_buffer_t* buffer, gpuhal_device_t* device,
                                                                CUstream stream, int recover) {
  CUdeviceptr ptr = 0;
  gpuhal_status_t status;
  if (gpuhal__atomic_load(&buffer->state) != GPUHAL__BUFFER_UNALLOCATED)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION, "queue_alloca: the buffer was already allocated");
  status = recover ? gpuhal__pool_alloc_or_recover(device, stream, buffer->size, &ptr)
                   : gpuhal__pool_alloc_current(device, stream, buffer->size, &ptr);
  if (status && !gpuhal__status_is_oom(status))
    status = gpuhal_status_annotate(status, "queue_alloca of %llu bytes on device %d", (unsigned long long)buffer->size,
                                    device->ordinal);
  GPUHAL__RETURN_IF_ERROR(status);
  gpuhal__atomic_store(&buffer->address, ptr);
  gpuhal__atomic_store(&buffer->state, (int32_t)GPUHAL__BUFFER_LIVE);
  return NULL;
}

/* Allocates a plain buffer's memory of its kind; the device's context is current. */
static gpuhal_status_t gpuhal__buffer_allocate_current(gpuhal_buffer_t* buffer) {
  const gpuhal__cuda_symbols_t* cu = buffer->device->cu;
  size_t size = (size_t)buffer->size;
  gpuhal_status_t status = NULL;
  if (buffer->share == GPUHAL__SHARE_VMM_OWN) return gpuhal__shared_memory_allocate_current(buffer);
  switch (buffer->kind) {
    case GPUHAL_MEMORY_DEVICE: status = GPUHAL__CU(cu, cuMemAlloc, (&buffer->address, size)); break;
    case GPUHAL_MEMORY_HOST_PINNED:
      status = GPUHAL__CU(cu, cuMemAllocHost, (&buffer->host_pointer, size));
      /* Unified addressing (every 64-bit platform CUDA still supports) makes the host
       * pointer valid on the device too. */
      if (!status) buffer->address = (CUdeviceptr)(uintptr_t)buffer->host_pointer;
      break;
    case GPUHAL_MEMORY_MANAGED:
      status = GPUHAL__CU(cu, cuMemAllocManaged, (&buffer->address, size, CU_MEM_ATTACH_GLOBAL));
      if (!status) buffer->host_pointer = (void*)(uintptr_t)buffer->address;
      break;
  }
  return status;
}

/* Out of device (or managed) memory, the pool may be holding what is missing, and frees
 * put off (or of deallocas that signalled at once) may not have run yet: run them (unless
 * work waits on the GPU), trim the pool and try once more. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__buffer_allocate_memory(gpuhal_buffer_t* buffer) {
  gpuhal_device_t* device = buffer->device;
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  status = gpuhal__buffer_allocate_current(buffer);
  if (gpuhal__status_is_oom(status) && buffer->kind != GPUHAL_MEMORY_HOST_PINNED) {
    gpuhal_status_t trimmed;
    gpuhal__driver_flush_deferred(device->driver);
    trimmed = gpuhal__pool_settle_marked_current(device);
    if (!trimmed) trimmed = gpuhal__pool_trim_current(device);
    if (trimmed) {
      status = gpuhal__oom_recovery_failed(status, trimmed);
    } else {
      gpuhal_status_free(status);
      status = gpuhal__buffer_allocate_current(buffer);
      if (gpuhal__status_is_oom(status)) status = gpuhal__oom_describe(device, status, "buffer_allocate", buffer->size);
    }
  }
  gpuhal__context_leave(device, &scope);
  if (!status && buffer->kind == GPUHAL_MEMORY_DEVICE && device->memory)
    gpuhal__atomic_add_relaxed(&device->memory->buffers_allocated, buffer->size);
  return status;
}

/* Frees queue_alloca memory that was never deallocated, on the worker. */
static gpuhal_status_t gpuhal__pending_free_now(gpuhal_device_t* device, CUdeviceptr address) {
  CUstream stream = device->streams ? device->streams[0] : NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__pool_free_async(device, stream, address));
  return GPUHAL__CU(device->cu, cuStreamSynchronize, (stream));
}

static gpuhal_status_t gpuhal__buffer_free_pending_sync(void* arg) {
  gpuhal_buffer_t* buffer = (gpuhal_buffer_t*)arg;
  return gpuhal__pending_free_now(buffer->device, buffer->address);
}

/* The same, put off (gpuhal__put_off_begin, or another device's worker): a task handed to the
 * worker that owns the memory (gpuhal__worker_hand_off: it holds the device, and the
 * application's last release waits for it), so the releasing thread does not wait for that
 * worker. */
typedef struct gpuhal__pending_free_s {
  gpuhal__task_t task;
  gpuhal_device_t* device;
  CUdeviceptr address;
} gpuhal__pending_free_t;

static void gpuhal__pending_free_run(gpuhal__task_t* task) {
  gpuhal__pending_free_t* f = GPUHAL__CONTAINER_OF(task, gpuhal__pending_free_t, task);
  gpuhal_device_t* device = f->device;
  gpuhal_status_t status = gpuhal__pending_free_now(device, f->address);
  if (status) {
    gpuhal__log(device->logger, GPUHAL_LOG_ERROR, "freeing queue_alloca memory put off: %s",
                gpuhal_status_message(status));
    gpuhal_status_free(status);
  }
  gpuhal__free(device->allocator, f);
  gpuhal__worker_hand_off_done(device);
}

/* 1 when the free of `buffer`'s pending memory was handed to the worker; 0 when it must be
 * made now (no memory for the task: then the caller waits for the worker after all). */
static int gpuhal__pending_free_put_off(gpuhal_buffer_t* buffer) {
  gpuhal_device_t* device = buffer->device;
  gpuhal__pending_free_t* f = NULL;
  gpuhal_status_t status = gpuhal__alloc_zeroed(device->allocator, sizeof(*f), "a free put off", (void**)&f);
  if (status) {
    gpuhal_status_free(status);
    return 0;
  }
  gpuhal__list_init(&f->task.node);
  f->task.fn = gpuhal__pending_free_run;
  f->device = device;
  f->address = buffer->address;
  gpuhal__worker_hand_off(device, &f->task);
  return 1;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__deferred_call_run(const gpuhal__cuda_symbols_t* cu,
                                                          const gpuhal__deferred_call_t* d) {
  if (d->share) return gpuhal__shared_memory_free_current(cu, d);
  if (d->unregister) {
    gpuhal_status_t status = GPUHAL__CU(cu, cuMemHostUnregister, (d->unregister));
    munmap(d->unregister, d->unregister_bytes);
    return status;
  }
  if (d->host) return GPUHAL__CU(cu, cuMemFreeHost, (d->host));
  if (d->module) return GPUHAL__CU(cu, cuModuleUnload, (d->module));
  if (d->library) return GPUHAL__CU(cu, cuLibraryUnload, (d->library));
  if (d->address) return GPUHAL__CU(cu, cuMemFree, (d->address));
  return NULL; /* names nothing: only its context's reference goes */
}

static GPUHAL__THREAD_LOCAL int gpuhal__put_off_depth = 0;

GPUHAL__PRIVATE void gpuhal__put_off_begin(void) { gpuhal__put_off_depth++; }
GPUHAL__PRIVATE void gpuhal__put_off_end(void) { gpuhal__put_off_depth--; }

/* Under parked_mutex with no GPU wait counted: runs fn(arg) with the mutex let go, counted in
 * sync_calls so that no queue work parks on the GPU until it returns (gpuhal__memory_gpu_wait_claim);
 * returns with the mutex held again. The mutex is not held across the call: the call may wait
 * for this device's GPU work, and that for another device's issue (a collective's peer), which
 * may need the mutex (its own free, its own park). Work denied a park meanwhile asks again
 * once no such call runs. */
static gpuhal_status_t gpuhal__driver_run_unparked_locked(gpuhal_driver_t* driver, gpuhal_status_t (*fn)(void*),
                                                          void* arg) {
  gpuhal_status_t status;
  driver->sync_calls++;
  gpuhal__mutex_unlock(&driver->parked_mutex);
  status = fn(arg);
  gpuhal__mutex_lock(&driver->parked_mutex);
  if (--driver->sync_calls == 0) {
    gpuhal__mutex_unlock(&driver->parked_mutex);
    gpuhal__driver_park_allowed(driver);
    gpuhal__mutex_lock(&driver->parked_mutex);
  }
  return status;
}

/* A call run in its own context where it names one (a put-off call), else in the current
 * one. A put-off call then lets go of its context: also with the mutex let go, since a last
 * release destroys the context, which waits for the GPU work of every device. */
typedef struct gpuhal__deferred_run_s {
  const gpuhal__cuda_symbols_t* cu;
  const gpuhal__deferred_call_t* call;
} gpuhal__deferred_run_t;

static gpuhal_status_t gpuhal__deferred_run(void* arg) {
  const gpuhal__deferred_run_t* r = (const gpuhal__deferred_run_t*)arg;
  gpuhal__context_scope_t scope;
  gpuhal_status_t status = NULL;
  if (!r->call->context) return gpuhal__deferred_call_run(r->cu, r->call);
  if (gpuhal__context_push_any(r->cu, r->call->context, &scope)) {
    status = gpuhal__deferred_call_run(r->cu, r->call);
    gpuhal__context_pop_any(r->cu, &scope);
  }
  r->cu->cuDevicePrimaryCtxRelease(r->call->cu_device);
  return status;
}

/* A copy of `call` to put off, in the record its owner reserved (call->reserved) or, with
 * none, a new one. */
static gpuhal_status_t gpuhal__deferred_call_copy(const gpuhal_allocator_t* allocator,
                                                  const gpuhal__deferred_call_t* call, gpuhal__deferred_call_t** out) {
  gpuhal__deferred_call_t* d = call->reserved;
  if (!d) GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(allocator, sizeof(*d), "a call put off", (void**)&d));
  *d = *call;
  d->reserved = NULL;
  *out = d;
  return NULL;
}

/* Runs `call` (cuMemFree, cuMemFreeHost, cuModuleUnload or cuLibraryUnload) with the device's context
 * current, or puts it off: while queue work of any device of the driver may wait on the GPU
 * for a value (these calls wait until the whole context is idle, tools/probe/park_probe.c,
 * and the value may only come from the calling thread later), and inside a queue call's
 * harvest (gpuhal__put_off_begin: the call must not wait for the GPU; the worker runs it
 * soon). The check shares driver->parked_mutex with the count of such work, and the call
 * is counted in sync_calls while it runs, so none is enqueued while it waits for the
 * context. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_sync_call(gpuhal_device_t* device, const gpuhal__deferred_call_t* call) {
  gpuhal_driver_t* driver = device->driver;
  gpuhal_status_t status = NULL;
  int put_off = gpuhal__put_off_depth > 0 && device->memory != NULL;
  int flush = 0;
  if (!driver->memops && !put_off) { /* nothing ever parks */
    status = gpuhal__deferred_call_run(device->cu, call);
    gpuhal__free(device->allocator, call->reserved);
    return status;
  }
  gpuhal__mutex_lock(&driver->parked_mutex);
  if (driver->gpu_waits > 0 || put_off) {
    gpuhal__deferred_call_t* d = NULL;
    status = gpuhal__deferred_call_copy(device->allocator, call, &d);
    if (!status) {
      d->cu_device = device->cu_device;
      status = GPUHAL__CU(device->cu, cuDevicePrimaryCtxRetain, (&d->context, device->cu_device));
    }
    if (!status) {
      d->next = driver->deferred;
      driver->deferred = d;
      flush = driver->gpu_waits == 0; /* else the last GPU wait's end flushes */
    } else {
      gpuhal__free(device->allocator, d);
    }
  } else {
    gpuhal__deferred_run_t run;
    run.cu = device->cu;
    run.call = call; /* names no context: the device's is current */
    status = gpuhal__driver_run_unparked_locked(driver, gpuhal__deferred_run, &run);
    gpuhal__free(device->allocator, call->reserved); /* not needed: the call ran */
  }
  gpuhal__mutex_unlock(&driver->parked_mutex);
  if (flush) gpuhal__worker_post(device, &device->memory->flush_task);
  return status;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__driver_sync_call(gpuhal_driver_t* driver, CUdevice cu_device, CUcontext context,
                                                         const gpuhal__deferred_call_t* call) {
  const gpuhal__cuda_symbols_t* cu = &driver->cu;
  gpuhal__deferred_call_t* d = NULL;
  gpuhal_status_t status;
  gpuhal__mutex_lock(&driver->parked_mutex);
  status = gpuhal__deferred_call_copy(&driver->allocator, call, &d);
  if (!status) {
    d->cu_device = cu_device;
    d->context = context;
    /* Run now by the flush when nothing waits on the GPU; else the last GPU wait's end
     * flushes it. */
    d->next = driver->deferred;
    driver->deferred = d;
    gpuhal__driver_flush_deferred_locked(driver);
  }
  gpuhal__mutex_unlock(&driver->parked_mutex);
  if (status) cu->cuDevicePrimaryCtxRelease(cu_device); /* no record to put it off in */
  return status;
}

GPUHAL__PRIVATE void gpuhal__driver_release_context(gpuhal_driver_t* driver, CUdevice cu_device, CUcontext context,
                                                    gpuhal__deferred_call_t* reserved) {
  gpuhal__deferred_call_t call;
  gpuhal_status_t status;
  memset(&call, 0, sizeof(call));
  call.reserved = reserved;
  status = gpuhal__driver_sync_call(driver, cu_device, context, &call);
  if (status) {
    gpuhal__log(&driver->logger, GPUHAL_LOG_ERROR, "releasing the context of CUDA device %d: %s", (int)cu_device,
                gpuhal_status_message(status));
    gpuhal_status_free(status);
  }
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__driver_call_unparked(gpuhal_driver_t* driver, const char* func,
                                                             gpuhal_status_t (*fn)(void*), void* arg) {
  gpuhal_status_t status;
  gpuhal__mutex_lock(&driver->parked_mutex);
  status = driver->gpu_waits > 0
               ? gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                                    "%s: queue work of this driver that waits on the GPU for a semaphore value is in "
                                    "flight, and mapping shared memory into the devices (cuMemHostRegister) may "
                                    "wait for it; call it before such work is queued, or once it is done",
                                    func)
               : gpuhal__driver_run_unparked_locked(driver, fn, arg);
  gpuhal__mutex_unlock(&driver->parked_mutex);
  return status;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__deferred_call_reserve(const gpuhal_allocator_t* allocator, const char* what,
                                                              gpuhal__deferred_call_t** out) {
  return gpuhal__alloc_zeroed(allocator, sizeof(**out), what, (void**)out);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_free(gpuhal_device_t* device, void* host, CUdeviceptr address,
                                                    gpuhal__deferred_call_t* reserved) {
  gpuhal__deferred_call_t call;
  memset(&call, 0, sizeof(call));
  call.host = host;
  call.address = address;
  call.reserved = reserved;
  return gpuhal__device_sync_call(device, &call);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_unload_module(gpuhal_device_t* device, CUmodule module,
                                                             gpuhal__deferred_call_t* reserved) {
  gpuhal__deferred_call_t call;
  memset(&call, 0, sizeof(call));
  call.module = module;
  call.reserved = reserved;
  return gpuhal__device_sync_call(device, &call);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__device_unload_library(gpuhal_device_t* device, CUlibrary library,
                                                              gpuhal__deferred_call_t* reserved) {
  gpuhal__deferred_call_t call;
  memset(&call, 0, sizeof(call));
  call.library = library;
  call.reserved = reserved;
  return gpuhal__device_sync_call(device, &call);
}

/* Under parked_mutex: runs what was put off, each in its context, unless queue work may wait
 * on the GPU again. Any thread; several may flush at once (each call is taken off the list
 * under the mutex, which is let go while it runs). */
static void gpuhal__driver_flush_deferred_locked(gpuhal_driver_t* driver) {
  const gpuhal__cuda_symbols_t* cu = &driver->cu;
  while (driver->gpu_waits == 0 && driver->deferred) {
    gpuhal__deferred_call_t* d = driver->deferred;
    gpuhal__deferred_run_t run;
    gpuhal_status_t status;
    driver->deferred = d->next;
    run.cu = cu;
    run.call = d;
    status = gpuhal__driver_run_unparked_locked(driver, gpuhal__deferred_run, &run);
    if (status) {
      gpuhal__log(&driver->logger, GPUHAL_LOG_ERROR, "a call put off while work waited on the GPU: %s",
                  gpuhal_status_message(status));
      gpuhal_status_free(status);
    }
    gpuhal__free(&driver->allocator, d);
  }
}

GPUHAL__PRIVATE void gpuhal__driver_flush_deferred(gpuhal_driver_t* driver) {
  gpuhal__mutex_lock(&driver->parked_mutex);
  gpuhal__driver_flush_deferred_locked(driver);
  gpuhal__mutex_unlock(&driver->parked_mutex);
}

static gpuhal_status_t gpuhal__memory_flush_call(void* driver) {
  gpuhal__driver_flush_deferred((gpuhal_driver_t*)driver);
  return NULL;
}

static void gpuhal__memory_flush_task(gpuhal__task_t* task) {
  gpuhal__memory_state_t* memory = GPUHAL__CONTAINER_OF(task, gpuhal__memory_state_t, flush_task);
  gpuhal__driver_flush_deferred(memory->flush_device->driver);
}

GPUHAL__PRIVATE int gpuhal__memory_gpu_wait_claim(gpuhal_device_t* device) {
  gpuhal__memory_state_t* memory = device->memory;
  gpuhal_driver_t* driver = device->driver;
  int claimed;
  if (!memory) return 1; /* nothing is put off for such a device (gpuhal__memory_gpu_waits_add) */
  gpuhal__mutex_lock(&driver->parked_mutex);
  claimed = driver->sync_calls == 0;
  if (claimed) {
    memory->gpu_waits++;
    driver->gpu_waits++;
  }
  gpuhal__mutex_unlock(&driver->parked_mutex);
  return claimed;
}

GPUHAL__PRIVATE void gpuhal__memory_gpu_waits_add(gpuhal_device_t* device, int32_t delta) {
  gpuhal__memory_state_t* memory = device->memory;
  gpuhal_driver_t* driver = device->driver;
  int flush;
  if (!memory) return;
  gpuhal__mutex_lock(&driver->parked_mutex);
  memory->gpu_waits += delta;
  driver->gpu_waits += delta;
  flush = driver->gpu_waits == 0 && driver->deferred != NULL;
  gpuhal__mutex_unlock(&driver->parked_mutex);
  if (flush) gpuhal__worker_post(device, &memory->flush_task);
}

/* Frees a (non-pending) buffer's memory; the device's context is current. The free takes
 * the record the buffer reserved, so putting it off needs no allocation. */
static gpuhal_status_t gpuhal__buffer_free_current(void* arg) {
  gpuhal_buffer_t* buffer = (gpuhal_buffer_t*)arg;
  gpuhal__deferred_call_t call;
  memset(&call, 0, sizeof(call));
  if (buffer->share) {
    call.address = buffer->address;
    call.share = buffer->share;
    call.vmm_handle = buffer->vmm_handle;
    call.vmm_size = buffer->vmm_size;
  } else if (buffer->kind == GPUHAL_MEMORY_HOST_PINNED) {
    call.host = buffer->host_pointer;
  } else {
    call.address = buffer->address;
  }
  call.reserved = buffer->put_off;
  buffer->put_off = NULL;
  return gpuhal__device_sync_call(buffer->device, &call);
}

static gpuhal_status_t gpuhal__buffer_free_memory(gpuhal_buffer_t* buffer) {
  gpuhal_device_t* device = buffer->device;
  gpuhal__context_scope_t scope;
  gpuhal_status_t status = NULL;
  if (gpuhal__atomic_load(&buffer->state) != GPUHAL__BUFFER_LIVE) return NULL;
  if (buffer->pending) {
    /* Handed to the owning worker without waiting from a queue call's harvest, and from
     * another device's worker (a peer copy's action dropping the last reference): two
     * workers each waiting for the other would never return. */
    if ((gpuhal__put_off_depth > 0 || gpuhal__on_other_worker(device)) && gpuhal__pending_free_put_off(buffer))
      return NULL;
    return gpuhal__worker_call(device, gpuhal__buffer_free_pending_sync, buffer);
  }
  status = gpuhal__context_enter(device, &scope);
  if (status) {
    /* This thread cannot take the device's context now; the worker thread holds it for its
     * life, so free there rather than leak the memory. */
    gpuhal_status_free(status);
    return gpuhal__worker_call(device, gpuhal__buffer_free_current, buffer);
  }
  status = gpuhal__buffer_free_current(buffer);
  gpuhal__context_leave(device, &scope);
  return status;
}

/* ---- buffers over memory a module owns (gpuhal_executable_global_buffer) ---- */

/* What a view's last release does, reserved when the view is made. */
typedef struct gpuhal__buffer_view_s {
  gpuhal__task_t task; /* handed to the device's worker when the release runs on another device's worker */
  gpuhal_device_t* device;
  struct gpuhal_executable_s* executable; /* retained: its module holds the memory */
} gpuhal__buffer_view_t;

/* Drops the view's executable reference (its last may unload the module, on `device`'s
 * worker) and frees the record. */
static void gpuhal__buffer_view_release(gpuhal__buffer_view_t* view) {
  struct gpuhal_executable_s* executable = view->executable;
  gpuhal__free(view->device->allocator, view); /* the executable holds the device meanwhile */
  gpuhal__hooks()->executable_release_ref(executable);
}

/* The same as a task handed to the device's worker: the hand-off's reference keeps the
 * device past the executable's, which may be its last but one. */
static void gpuhal__buffer_view_release_task(gpuhal__task_t* task) {
  gpuhal__buffer_view_t* view = GPUHAL__CONTAINER_OF(task, gpuhal__buffer_view_t, task);
  gpuhal_device_t* device = view->device;
  gpuhal__buffer_view_release(view);
  gpuhal__worker_hand_off_done(device);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__buffer_create_view(gpuhal_device_t* device, CUdeviceptr address, uint64_t size,
                                                           struct gpuhal_executable_s* executable,
                                                           gpuhal_buffer_t** out_buffer) {
  gpuhal__buffer_view_t* view = NULL;
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_status_t status;
  *out_buffer = NULL;
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__alloc_zeroed(device->allocator, sizeof(*view), "a global's buffer record", (void**)&view));
  status = gpuhal__buffer_object_new(device, GPUHAL_MEMORY_DEVICE, size, &buffer);
  if (status) {
    gpuhal__free(device->allocator, view);
    return status;
  }
  gpuhal__list_init(&view->task.node);
  view->task.fn = gpuhal__buffer_view_release_task;
  view->device = device;
  view->executable = executable;
  buffer->view = view;
  buffer->address = address;
  gpuhal__atomic_store(&buffer->state, (int32_t)GPUHAL__BUFFER_LIVE);
  *out_buffer = buffer;
  return NULL;
}

/* A view's last release: the buffer object goes, then the executable reference, handed to
 * the device's worker when this is another device's worker (a peer copy's action dropping
 * the last reference): the executable's last reference may unload its module through the
 * worker, and no worker waits for another. */
static void gpuhal__buffer_view_destroy(gpuhal_buffer_t* buffer) {
  gpuhal__buffer_view_t* view = buffer->view;
  gpuhal__atomic_store(&buffer->state, (int32_t)GPUHAL__BUFFER_FREED);
  gpuhal__buffer_discard(buffer); /* its device reference: the executable holds another */
  if (gpuhal__on_other_worker(view->device))
    gpuhal__worker_hand_off(view->device, &view->task);
  else
    gpuhal__buffer_view_release(view);
}

static void gpuhal__buffer_destroy(gpuhal_buffer_t* buffer) {
  gpuhal_device_t* device = buffer->device;
  gpuhal_status_t status;
  if (buffer->view) {
    gpuhal__buffer_view_destroy(buffer);
    return;
  }
  if (!buffer->pending && buffer->kind == GPUHAL_MEMORY_DEVICE && device->memory &&
      buffer->share != GPUHAL__SHARE_VMM_IMPORTED && buffer->share != GPUHAL__SHARE_IPC_IMPORTED &&
      gpuhal__atomic_load(&buffer->state) == GPUHAL__BUFFER_LIVE)
    gpuhal__atomic_sub_relaxed(&device->memory->buffers_allocated, buffer->size);
  status = gpuhal__buffer_free_memory(buffer);
  if (status) {
    gpuhal__log(device->logger, GPUHAL_LOG_ERROR, "freeing a buffer of %llu bytes: %s",
                (unsigned long long)buffer->size, gpuhal_status_message(status));
    gpuhal_status_free(status);
  }
  gpuhal__atomic_store(&buffer->state, (int32_t)GPUHAL__BUFFER_FREED);
  gpuhal__buffer_discard(buffer);
}

GPUHAL_API gpuhal_status_t gpuhal_buffer_allocate(gpuhal_device_t* device, gpuhal_memory_kind_t kind, uint64_t size,
                                                  gpuhal_buffer_t** out_buffer) {
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_status_t status;
  GPUHAL__CHECK_ARG(out_buffer != NULL, "out_buffer", "must not be NULL");
  *out_buffer = NULL;
  GPUHAL__CHECK_HANDLE(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG((unsigned)kind <= (unsigned)GPUHAL_MEMORY_MANAGED, "kind",
                    "must be GPUHAL_MEMORY_DEVICE, _HOST_PINNED or _MANAGED");
  GPUHAL__CHECK_ARG(size > 0, "size", "must be > 0");
  GPUHAL__CHECK_RANGE(size <= (uint64_t)SIZE_MAX, "size", "exceeds the address space (SIZE_MAX)");
  GPUHAL__CHECK_RANGE(size <= device->info.total_memory || kind != GPUHAL_MEMORY_DEVICE, "size",
                      "exceeds the device's total memory");
  if (kind == GPUHAL_MEMORY_MANAGED && !device->info.managed_memory)
    return gpuhal_status_make(GPUHAL_STATUS_UNIMPLEMENTED, "%s: device %d does not support managed memory", __func__,
                              device->ordinal);
  GPUHAL__RETURN_IF_ERROR(gpuhal__buffer_new(device, kind, size, &buffer));
  status = gpuhal__buffer_allocate_memory(buffer);
  if (status) {
    gpuhal__buffer_discard(buffer);
    return gpuhal_status_annotate(status, "allocating %llu bytes of %s memory on device %d", (unsigned long long)size,
                                  kind == GPUHAL_MEMORY_DEVICE        ? "device"
                                  : kind == GPUHAL_MEMORY_HOST_PINNED ? "pinned host"
                                                                      : "managed",
                                  device->ordinal);
  }
  gpuhal__atomic_store(&buffer->state, (int32_t)GPUHAL__BUFFER_LIVE);
  *out_buffer = buffer;
  return NULL;
}

GPUHAL__PRIVATE void gpuhal__buffer_discard(gpuhal_buffer_t* buffer) {
  gpuhal_device_t* device = buffer->device;
  gpuhal__free(device->allocator, buffer->put_off); /* unless its free took it */
  gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_BUFFER, buffer);
  gpuhal__device_release_ref(device);
}

GPUHAL__PRIVATE void gpuhal__buffer_retain_ref(gpuhal_buffer_t* buffer) {
  if (buffer) gpuhal__object_retain(&buffer->header);
}

GPUHAL__PRIVATE void gpuhal__buffer_release_ref(gpuhal_buffer_t* buffer) {
  if (buffer && gpuhal__object_release(&buffer->header)) gpuhal__buffer_destroy(buffer);
}

GPUHAL_API void gpuhal_buffer_retain(gpuhal_buffer_t* buffer) {
  if (gpuhal__object_is_held(buffer, GPUHAL__MAGIC_BUFFER)) gpuhal__object_user_retain(&buffer->header);
}

GPUHAL_API void gpuhal_buffer_release(gpuhal_buffer_t* buffer) {
  gpuhal_driver_t* driver;
  uint64_t settle; /* gpuhal__driver_settle_begin: 0, or the settle begun */
  if (!gpuhal__object_is_live(buffer, GPUHAL__MAGIC_BUFFER)) return;
  if (!gpuhal__object_user_release(&buffer->header)) {
    gpuhal__log_extra_release(buffer->device->logger, __func__, "a buffer");
    return;
  }
  driver = buffer->device->driver;
  settle = gpuhal__driver_settle_begin(driver);
  gpuhal__buffer_release_ref(buffer);
  gpuhal__driver_settle_end(driver, settle);
}

GPUHAL_API uint64_t gpuhal_buffer_size(gpuhal_buffer_t* buffer) {
  return gpuhal__object_is_held(buffer, GPUHAL__MAGIC_BUFFER) ? buffer->size : 0;
}

GPUHAL_API gpuhal_memory_kind_t gpuhal_buffer_kind(gpuhal_buffer_t* buffer) {
  return gpuhal__object_is_held(buffer, GPUHAL__MAGIC_BUFFER) ? buffer->kind : GPUHAL_MEMORY_DEVICE;
}

GPUHAL_API gpuhal_device_t* gpuhal_buffer_device(gpuhal_buffer_t* buffer) {
  return gpuhal__object_is_held(buffer, GPUHAL__MAGIC_BUFFER) ? buffer->device : NULL;
}

GPUHAL_API void* gpuhal_buffer_host_pointer(gpuhal_buffer_t* buffer) {
  return gpuhal__object_is_held(buffer, GPUHAL__MAGIC_BUFFER) ? buffer->host_pointer : NULL;
}

/* FAILED_PRECONDITION unless the buffer's memory is LIVE. */
static gpuhal_status_t gpuhal__buffer_check_live(gpuhal_buffer_t* buffer, const char* func) {
  int32_t state = gpuhal__atomic_load(&buffer->state);
  if (state == GPUHAL__BUFFER_LIVE) return NULL;
  return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION, "%s: argument 'buffer' %s", func,
                            state == GPUHAL__BUFFER_UNALLOCATED
                                ? "has no memory: its gpuhal_queue_alloca has not been issued yet (wait on its "
                                  "signal first) or it failed (its signal semaphores carry the cause)"
                                : "has no memory any more: its queue_dealloca was issued");
}

GPUHAL_API gpuhal_status_t gpuhal_buffer_device_address(gpuhal_buffer_t* buffer, uint64_t* out_address) {
  GPUHAL__CHECK_HANDLE(buffer, GPUHAL__MAGIC_BUFFER);
  GPUHAL__CHECK_ARG(out_address != NULL, "out_address", "must not be NULL");
  *out_address = 0;
  GPUHAL__RETURN_IF_ERROR(gpuhal__buffer_check_live(buffer, __func__));
  *out_address = (uint64_t)buffer->address;
  return NULL;
}

/* Checks [offset, offset + size) lies inside the buffer, without overflow. */
static gpuhal_status_t gpuhal__buffer_check_range(gpuhal_buffer_t* buffer, uint64_t offset, uint64_t size,
                                                  const char* func) {
  if (size == 0) return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: argument 'size' must be > 0", func);
  if (offset >= buffer->size)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "%s: argument 'offset' is %llu, past the end of the buffer (%llu bytes)", func,
                              (unsigned long long)offset, (unsigned long long)buffer->size);
  if (size > buffer->size - offset)
    return gpuhal_status_make(
        GPUHAL_STATUS_OUT_OF_RANGE, "%s: argument 'size' is %llu, but only %llu bytes follow offset %llu in the buffer",
        func, (unsigned long long)size, (unsigned long long)(buffer->size - offset), (unsigned long long)offset);
  return NULL;
}

/* memcpy of a range gpuhal__buffer_check_range accepted. No buffer comes near PTRDIFF_MAX
 * bytes, so the test always passes; it shows the optimiser that a huge constant size from
 * a caller's bad-input path (refused by the check) never reaches memcpy, which it would
 * otherwise report at -O2/-O3 (-Wstringop-overflow) once the call is inlined. */
static void gpuhal__host_copy(void* dst, const void* src, uint64_t size) {
  if (size <= (uint64_t)PTRDIFF_MAX) memcpy(dst, src, (size_t)size);
}

/* ---- copy streams: gpuhal_buffer_read / _write ----
 * The synchronous copies (cuMemcpyHtoD, cuMemcpyDtoH) and cuStreamSynchronize(NULL) use the
 * legacy default stream of the primary context, which the application shares: it waits for
 * all prior work of the context's blocking streams (the application's, the CUDA runtime's)
 * and makes their later work wait for it, so a buffer write would wait for unrelated work
 * of the application, forever if that work waits for something the caller does after the
 * write. So each copy runs on a non-blocking stream of gpuhal's own, taken for that copy
 * alone: an async copy, then a synchronize of that stream only. A copy in flight holds its
 * stream, so concurrent callers never wait for each other's copies; up to
 * GPUHAL__COPY_STREAMS_IDLE_MAX streams are kept for the next ones (a copy finding none
 * makes one; a stream given back to a full store is destroyed). The calls need the
 * device's context current. */

/* A copy stream's destruction has no caller to report to: its failure is logged. */
static void gpuhal__copy_stream_destroy(gpuhal_device_t* device, CUstream stream) {
  gpuhal_status_t status = gpuhal__device_stream_destroy(device, stream);
  if (!status) return;
  gpuhal__log(device->logger, GPUHAL_LOG_ERROR, "device %d: destroying a copy stream: %s", device->ordinal,
              gpuhal_status_message(status));
  gpuhal_status_free(status);
}

static gpuhal_status_t gpuhal__copy_stream_take(gpuhal_device_t* device, CUstream* out) {
  gpuhal__memory_state_t* memory = device->memory;
  *out = NULL;
  gpuhal__mutex_lock(&memory->copy_mutex);
  if (memory->copy_stream_count > 0) *out = memory->copy_streams[--memory->copy_stream_count];
  gpuhal__mutex_unlock(&memory->copy_mutex);
  return *out ? NULL : gpuhal__device_stream_create(device, out);
}

/* `healthy`: 0 after a failed copy, whose stream is not kept. */
static void gpuhal__copy_stream_give(gpuhal_device_t* device, CUstream stream, int healthy) {
  gpuhal__memory_state_t* memory = device->memory;
  gpuhal__mutex_lock(&memory->copy_mutex);
  if (healthy && memory->copy_stream_count < GPUHAL__COPY_STREAMS_IDLE_MAX) {
    memory->copy_streams[memory->copy_stream_count++] = stream;
    stream = NULL;
  }
  gpuhal__mutex_unlock(&memory->copy_mutex);
  if (stream) gpuhal__copy_stream_destroy(device, stream);
}

/* Destroys the idle copy streams (on the worker, at device teardown: no copy is in flight,
 * each buffer holds its device). */
static gpuhal_status_t gpuhal__copy_streams_destroy(void* arg) {
  gpuhal_device_t* device = (gpuhal_device_t*)arg;
  gpuhal__memory_state_t* memory = device->memory;
  while (memory->copy_stream_count > 0)
    gpuhal__copy_stream_destroy(device, memory->copy_streams[--memory->copy_stream_count]);
  return NULL;
}

/* A host-synchronous copy on a copy stream: from pageable memory cuMemcpyHtoDAsync may
 * return before the DMA lands (it is staged), so the copy is complete only once its stream
 * is synchronized; pinned memory is copied in stream order, and synchronizing covers it too. */
static gpuhal_status_t gpuhal__buffer_copy(gpuhal_buffer_t* buffer, uint64_t offset, void* dst, const void* src,
                                           uint64_t size) {
  gpuhal_device_t* device = buffer->device;
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  CUstream stream = NULL;
  CUdeviceptr address = buffer->address + (CUdeviceptr)offset;
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  status = gpuhal__copy_stream_take(device, &stream);
  if (!status && src)
    status = GPUHAL__CU(device->cu, cuMemcpyHtoDAsync, (address, src, (size_t)size, stream));
  else if (!status)
    status = GPUHAL__CU(device->cu, cuMemcpyDtoHAsync, (dst, address, (size_t)size, stream));
  if (!status) status = GPUHAL__CU(device->cu, cuStreamSynchronize, (stream));
  if (stream) gpuhal__copy_stream_give(device, stream, status == NULL);
  gpuhal__context_leave(device, &scope);
  return status;
}

static gpuhal_status_t gpuhal__buffer_copy_to_device(gpuhal_buffer_t* buffer, uint64_t offset, const void* src,
                                                     uint64_t size) {
  return gpuhal__buffer_copy(buffer, offset, NULL, src, size);
}

static gpuhal_status_t gpuhal__buffer_copy_from_device(gpuhal_buffer_t* buffer, uint64_t offset, void* dst,
                                                       uint64_t size) {
  return gpuhal__buffer_copy(buffer, offset, dst, NULL, size);
}

GPUHAL_API gpuhal_status_t gpuhal_buffer_read(gpuhal_buffer_t* buffer, uint64_t offset, void* dst, uint64_t size) {
  GPUHAL__CHECK_HANDLE(buffer, GPUHAL__MAGIC_BUFFER);
  GPUHAL__CHECK_ARG(dst != NULL, "dst", "must not be NULL");
  GPUHAL__RETURN_IF_ERROR(gpuhal__buffer_check_range(buffer, offset, size, __func__));
  GPUHAL__RETURN_IF_ERROR(gpuhal__buffer_check_live(buffer, __func__));
  /* Pinned memory is plain host memory. Managed memory goes through the driver, which is
   * safe even on devices without concurrent managed access. */
  if (buffer->kind == GPUHAL_MEMORY_HOST_PINNED) {
    gpuhal__host_copy(dst, (const char*)buffer->host_pointer + offset, size);
    return NULL;
  }
  return gpuhal_status_annotate(gpuhal__buffer_copy_from_device(buffer, offset, dst, size),
                                "reading %llu bytes at offset %llu", (unsigned long long)size,
                                (unsigned long long)offset);
}

GPUHAL_API gpuhal_status_t gpuhal_buffer_write(gpuhal_buffer_t* buffer, uint64_t offset, const void* src,
                                               uint64_t size) {
  GPUHAL__CHECK_HANDLE(buffer, GPUHAL__MAGIC_BUFFER);
  GPUHAL__CHECK_ARG(src != NULL, "src", "must not be NULL");
  GPUHAL__RETURN_IF_ERROR(gpuhal__buffer_check_range(buffer, offset, size, __func__));
  GPUHAL__RETURN_IF_ERROR(gpuhal__buffer_check_live(buffer, __func__));
  if (buffer->kind == GPUHAL_MEMORY_HOST_PINNED) {
    gpuhal__host_copy((char*)buffer->host_pointer + offset, src, size);
    return NULL;
  }
  return gpuhal_status_annotate(gpuhal__buffer_copy_to_device(buffer, offset, src, size),
                                "writing %llu bytes at offset %llu", (unsigned long long)size,
                                (unsigned long long)offset);
}

/* ---- device memory: trim and statistics ---- */

GPUHAL_API gpuhal_status_t gpuhal_device_trim(gpuhal_device_t* device) {
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  GPUHAL__CHECK_HANDLE(device, GPUHAL__MAGIC_DEVICE);
  if (!device->memory || !device->memory->pool) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  status = gpuhal__pool_settle_marked_current(device);
  if (!status) status = gpuhal__pool_trim_current(device);
  gpuhal__context_leave(device, &scope);
  return gpuhal_status_annotate(status, "trimming the memory pool of device %d", device->ordinal);
}

GPUHAL_API gpuhal_status_t gpuhal_device_memory_stats(gpuhal_device_t* device, gpuhal_memory_stats_t* out_stats) {
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  GPUHAL__CHECK_ARG(out_stats != NULL, "out_stats", "must not be NULL");
  memset(out_stats, 0, sizeof(*out_stats));
  GPUHAL__CHECK_HANDLE(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  status = gpuhal__memory_stats_current(device, out_stats);
  gpuhal__context_leave(device, &scope);
  return gpuhal_status_annotate(status, "reading the memory statistics of device %d", device->ordinal);
}
