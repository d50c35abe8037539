/* event_pool: a device's recycled CUevents (event_pool.h). */
#include "event_pool.h"
#include "status.h"

GPUHAL__PRIVATE void gpuhal__event_pool_init(gpuhal__event_pool_t* pool, gpuhal_device_t* device, unsigned flags) {
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

/* Moves up to GPUHAL__EVENT_ACQUIRE_BATCH free events to the (empty) acquire cache, under
 * the pool's lock, the most recently returned first and in that order: the events in use
 * stay few and warm in the driver. (Cycling through the whole pool, gpuhal's cuEventRecord
 * cost an H200 more than the raw loop's record of one event; with the few most recently
 * returned, the same: tests/bench/RESULTS.md.) */
static void gpuhal__event_pool_refill_cache(gpuhal__event_pool_t* pool) {
  gpuhal__event_t** tail = &pool->acquire_cache;
  gpuhal__event_t* e;
  gpuhal__mutex_lock(&pool->mutex);
  while (pool->acquire_cached < GPUHAL__EVENT_ACQUIRE_BATCH && (e = pool->free_list) != NULL) {
    pool->free_list = e->next_free;
    e->next_free = NULL;
    *tail = e;
    tail = &e->next_free;
    pool->acquire_cached++;
    pool->outstanding++;
  }
  gpuhal__mutex_unlock(&pool->mutex);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__event_pool_acquire(gpuhal__event_pool_t* pool, gpuhal__event_t** out_event) {
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

GPUHAL__PRIVATE void gpuhal__event_retain(gpuhal__event_t* e) { gpuhal__atomic_add(&e->refcount, 1); }

GPUHAL__PRIVATE void gpuhal__event_release_to(gpuhal__event_t* e, gpuhal__event_t** chain) {
  if (!e || gpuhal__atomic_sub(&e->refcount, 1) != 0) return;
  e->next_free = *chain;
  *chain = e;
}

GPUHAL__PRIVATE void gpuhal__event_pool_put_chain(gpuhal__event_pool_t* pool, gpuhal__event_t* chain) {
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

GPUHAL__PRIVATE void gpuhal__event_release(gpuhal__event_t* e) {
  gpuhal__event_t* chain = NULL;
  gpuhal__event_release_to(e, &chain);
  if (chain) gpuhal__event_pool_put_chain(chain->pool, chain);
}

GPUHAL__PRIVATE int gpuhal__event_query(gpuhal__event_t* e) {
  const gpuhal__cuda_symbols_t* cu = e->pool->device->cu;
  gpuhal__capture_scope_t capture;
  CUresult r;
  /* Relaxed: harvests, polls and host waits query on the application's threads, where a
   * stream capture in global mode would refuse the query (device.h). */
  gpuhal__capture_relax(cu, &capture);
  r = cu->cuEventQuery(e->handle);
  gpuhal__capture_restore(cu, &capture);
  if (r == CUDA_SUCCESS) return 0;
  if (r == CUDA_ERROR_NOT_READY) return 1;
  return -1;
}

GPUHAL__PRIVATE void gpuhal__event_pool_deinit(gpuhal__event_pool_t* pool) {
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
