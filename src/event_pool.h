/* event_pool: a per-device pool of CUevents (internal; no public declarations).
 *
 * The queue records one event per issued action and hands references to the timepoints
 * and to GPU waits of other actions, so events are reference-counted: the last release puts
 * the event back on the free list (no CUDA call, any thread). New events are created by
 * whoever issues (the device's worker thread, or a submitter inside a push of the device's
 * context: cuEventCreate needs it), a block at a time, so steady-state submission creates
 * none.
 *
 * The queue creates its events with CU_EVENT_DISABLE_TIMING only (cheaper record and
 * query); blocking-sync events made every record dearer and woke a blocked waiter later
 * than polling does (tests/bench/RESULTS.md). The completion thread never
 * blocks in the driver (queue.h).
 */

/* ---- gpuhal:implementation ---- */

#ifndef GPUHAL_EVENT_POOL_BLOCK
#define GPUHAL_EVENT_POOL_BLOCK 32 /* events created per growth step */
#endif

typedef struct gpuhal__event_s {
  struct gpuhal__event_s* next_free;
  struct gpuhal__event_pool_s* pool;
  CUevent handle;
  CUstream stream; /* where it was last recorded: a wait on the same stream is implied by order */
  int32_t refcount;
} gpuhal__event_t;

typedef struct gpuhal__event_block_s {
  struct gpuhal__event_block_s* next;
  uint32_t count;
  gpuhal__event_t events[GPUHAL_EVENT_POOL_BLOCK];
} gpuhal__event_block_t;

typedef struct gpuhal__event_pool_s {
  gpuhal_device_t* device;
  gpuhal__mutex_t mutex;
  gpuhal__cond_t returned; /* signalled when `outstanding` drops to zero */
  gpuhal__event_t* free_list;
  gpuhal__event_block_t* blocks;
  uint32_t total;
  uint32_t outstanding; /* events out of free_list: handed out, or in acquire_cache */
  unsigned flags;
  /* Events taken from free_list in bulk for gpuhal__event_pool_acquire, whose callers are
   * serialized (the queue's issue lock): most acquires take no lock, so the submitting
   * thread does not contend with the worker returning events on every action. */
  gpuhal__event_t* acquire_cache;
  uint32_t acquire_cached;
} gpuhal__event_pool_t;

static void gpuhal__event_pool_init(gpuhal__event_pool_t* pool, gpuhal_device_t* device, unsigned flags) {
  memset(pool, 0, sizeof(*pool));
  pool->device = device;
  pool->flags = flags;
  gpuhal__mutex_init(&pool->mutex);
  gpuhal__cond_init(&pool->returned);
}

/* Creates one block of events. On the worker thread (or with the context entered). */
static gpuhal_status_t gpuhal__event_pool_grow(gpuhal__event_pool_t* pool) {
  gpuhal__event_block_t* block = NULL;
  uint32_t i;
  gpuhal_status_t status =
      gpuhal__alloc_zeroed(pool->device->allocator, sizeof(*block), "event pool block", (void**)&block);
  if (status) return status;
  for (i = 0; i < GPUHAL_EVENT_POOL_BLOCK; ++i) {
    gpuhal__event_t* e = &block->events[i];
    status = GPUHAL__CU(pool->device->cu, cuEventCreate, (&e->handle, pool->flags));
    if (status) break;
    e->pool = pool;
    block->count++;
  }
  if (block->count == 0) {
    gpuhal__free(pool->device->allocator, block);
    return status;
  }
  gpuhal_status_free(status); /* a partial block is still useful */
  gpuhal__mutex_lock(&pool->mutex);
  for (i = 0; i < block->count; ++i) {
    block->events[i].next_free = pool->free_list;
    pool->free_list = &block->events[i];
  }
  block->next = pool->blocks;
  pool->blocks = block;
  pool->total += block->count;
  gpuhal__mutex_unlock(&pool->mutex);
  return NULL;
}

/* Moves every free event to the acquire cache (under the pool's lock). */
static void gpuhal__event_pool_refill_cache(gpuhal__event_pool_t* pool) {
  gpuhal__event_t* e;
  gpuhal__mutex_lock(&pool->mutex);
  while ((e = pool->free_list) != NULL) {
    pool->free_list = e->next_free;
    e->next_free = pool->acquire_cache;
    pool->acquire_cache = e;
    pool->acquire_cached++;
    pool->outstanding++;
  }
  gpuhal__mutex_unlock(&pool->mutex);
}

/* An event with one reference. Callers are serialized (the queue's issue lock), with the
 * device's context current: may grow the pool. */
static gpuhal_status_t gpuhal__event_pool_acquire(gpuhal__event_pool_t* pool, gpuhal__event_t** out_event) {
  gpuhal__event_t* e;
  while (!pool->acquire_cache) {
    gpuhal__event_pool_refill_cache(pool);
    if (!pool->acquire_cache) GPUHAL__RETURN_IF_ERROR(gpuhal__event_pool_grow(pool));
  }
  e = pool->acquire_cache;
  pool->acquire_cache = e->next_free;
  pool->acquire_cached--;
  e->next_free = NULL;
  e->stream = NULL;
  e->refcount = 1;
  *out_event = e;
  return NULL;
}

static void gpuhal__event_retain(gpuhal__event_t* e) { gpuhal__atomic_add(&e->refcount, 1); }

/* Drops a reference; an event whose last reference this was goes on `*chain` (linked
 * through next_free) for gpuhal__event_pool_put_chain: whoever releases many events of one
 * pool at once takes its lock once. */
static void gpuhal__event_release_to(gpuhal__event_t* e, gpuhal__event_t** chain) {
  if (!e || gpuhal__atomic_sub(&e->refcount, 1) != 0) return;
  e->next_free = *chain;
  *chain = e;
}

/* Returns a chain of events of `pool` (from gpuhal__event_release_to) under one lock. */
static void gpuhal__event_pool_put_chain(gpuhal__event_pool_t* pool, gpuhal__event_t* chain) {
  gpuhal__event_t* last = chain;
  uint32_t n = 1;
  if (!chain) return;
  while (last->next_free) {
    last = last->next_free;
    n++;
  }
  gpuhal__mutex_lock(&pool->mutex);
  last->next_free = pool->free_list;
  pool->free_list = chain;
  pool->outstanding -= n;
  if (pool->outstanding == 0) gpuhal__cond_broadcast(&pool->returned);
  gpuhal__mutex_unlock(&pool->mutex);
}

/* Drops a reference; the last one returns the event to its pool. No CUDA call. */
static void gpuhal__event_release(gpuhal__event_t* e) {
  gpuhal__event_t* chain = NULL;
  gpuhal__event_release_to(e, &chain);
  if (chain) gpuhal__event_pool_put_chain(chain->pool, chain);
}

/* 0: complete; 1: not yet; -1: error (left for the completion thread to report).
 * cuEventQuery needs no current context. */
static int gpuhal__event_query(gpuhal__event_t* e) {
  CUresult r = e->pool->device->cu->cuEventQuery(e->handle);
  if (r == CUDA_SUCCESS) return 0;
  if (r == CUDA_ERROR_NOT_READY) return 1;
  return -1;
}

/* Waits until every event is back, then destroys them all. On the worker thread. */
static void gpuhal__event_pool_deinit(gpuhal__event_pool_t* pool) {
  gpuhal__event_block_t* block;
  if (!pool->device) return;
  gpuhal__mutex_lock(&pool->mutex);
  pool->outstanding -= pool->acquire_cached; /* nobody acquires any more */
  pool->acquire_cache = NULL;
  pool->acquire_cached = 0;
  while (pool->outstanding > 0) gpuhal__cond_wait(&pool->returned, &pool->mutex);
  gpuhal__mutex_unlock(&pool->mutex);
  block = pool->blocks;
  while (block) {
    gpuhal__event_block_t* next = block->next;
    uint32_t i;
    for (i = 0; i < block->count; ++i) {
      gpuhal_status_t status = GPUHAL__CU(pool->device->cu, cuEventDestroy, (block->events[i].handle));
      gpuhal_status_free(status); /* nothing to do about it while tearing down */
    }
    gpuhal__free(pool->device->allocator, block);
    block = next;
  }
  pool->blocks = NULL;
  pool->free_list = NULL;
  gpuhal__cond_destroy(&pool->returned);
  gpuhal__mutex_destroy(&pool->mutex);
  pool->device = NULL;
}
