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
#ifndef GPUHAL_SRC_EVENT_POOL_H
#define GPUHAL_SRC_EVENT_POOL_H

#include "internal.h"
#include "device.h"

/* ---- gpuhal:internal ---- */

#ifndef GPUHAL_EVENT_POOL_BLOCK
#define GPUHAL_EVENT_POOL_BLOCK 32 /* events created per growth step */
#endif
#define GPUHAL__EVENT_ACQUIRE_BATCH 8 /* free events an acquire takes under one lock */

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

GPUHAL__PRIVATE void gpuhal__event_pool_init(gpuhal__event_pool_t* pool, gpuhal_device_t* device, unsigned flags);

/* An event with one reference. Callers are serialized (the queue's issue lock), with the
 * device's context current: may grow the pool. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__event_pool_acquire(gpuhal__event_pool_t* pool, gpuhal__event_t** out_event);

GPUHAL__PRIVATE void gpuhal__event_retain(gpuhal__event_t* e);

/* Drops a reference; an event whose last reference this was goes on `*chain` (linked
 * through next_free) for gpuhal__event_pool_put_chain: whoever releases many events of one
 * pool at once takes its lock once. */
GPUHAL__PRIVATE void gpuhal__event_release_to(gpuhal__event_t* e, gpuhal__event_t** chain);

/* Returns a chain of events of `pool` (from gpuhal__event_release_to) under one lock. */
GPUHAL__PRIVATE void gpuhal__event_pool_put_chain(gpuhal__event_pool_t* pool, gpuhal__event_t* chain);

/* Drops a reference; the last one returns the event to its pool. No CUDA call. */
GPUHAL__PRIVATE void gpuhal__event_release(gpuhal__event_t* e);

/* 0: complete; 1: not yet; -1: error (left for the completion thread to report).
 * cuEventQuery needs no current context. */
GPUHAL__PRIVATE int gpuhal__event_query(gpuhal__event_t* e);

/* Waits until every event is back, then destroys them all. On the worker thread. */
GPUHAL__PRIVATE void gpuhal__event_pool_deinit(gpuhal__event_pool_t* pool);

#endif /* GPUHAL_SRC_EVENT_POOL_H */
