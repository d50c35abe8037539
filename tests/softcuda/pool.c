/* pool.c - memory pools and stream-ordered allocation. Part of softcuda.c.
 *
 * A pool reserves blocks (malloc'ed, counted against the device's memory) and hands them
 * out. cuMemAllocFromPoolAsync returns an address at once (as CUDA does); the memory is
 * valid for work ordered after it. cuMemFreeAsync makes the pointer invalid for any work
 * enqueued later and returns the block to the pool when the free runs on the stream.
 * Before it runs, the block may go only to an allocation that the GPU runs after the free:
 * on the same stream, or on a stream with a pending cuStreamWaitEvent for an event
 * recorded after the free (CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES); softcuda does
 * that only when the pool cannot grow. Unused blocks above the release threshold go back
 * to the device at synchronisation points and on cuMemPoolTrimTo; the pool's maxSize and
 * the device's memory (SOFTCUDA_DEVICE_MEMORY) bound what it reserves. */

static void sc_pool_free(sc_obj* o) {
  sc_pool* p = (sc_pool*)o;
  while (p->free_blocks) {
    sc_block* b = p->free_blocks;
    p->free_blocks = b->next;
    sc_dev_unreserve(p->dev, b->size);
    free(b->p);
    free(b);
  }
  free(p);
}

/* Releases free blocks until reserved <= keep (under sc.mu). */
static void sc_pool_trim_locked(sc_pool* p, uint64_t keep) {
  sc_block** link = &p->free_blocks;
  while (*link && p->reserved > keep) {
    sc_block* b = *link;
    *link = b->next;
    p->reserved -= b->size;
    sc_dev_unreserve(p->dev, b->size);
    free(b->p);
    free(b);
  }
}

static void sc_pools_release(int dev) {
  uint64_t i;
  for (i = 1; i <= sc.nobjs; ++i) {
    sc_obj* o = sc.objs[i];
    if (o && o->kind == SC_K_POOL && ((sc_pool*)o)->dev == dev)
      sc_pool_trim_locked((sc_pool*)o, ((sc_pool*)o)->threshold);
  }
}

static sc_pool* sc_pool_new_locked(int dev, int is_default, size_t max_size) {
  sc_pool* p = (sc_pool*)sc_xcalloc(1, sizeof(sc_pool));
  sc_obj_init(&p->h, SC_K_POOL, NULL, sc_pool_free);
  p->dev = dev;
  p->is_default = is_default;
  p->max_size = max_size;
  p->reuse_follow = p->reuse_opportunistic = p->reuse_internal = 1;
  sc_obj_register(&p->h);
  return p;
}

static CUresult sc_get_pool(CUmemoryPool h, sc_pool** out) {
  sc_obj* o = sc_obj_lookup((uint64_t)(uintptr_t)h, SC_K_POOL);
  *out = (sc_pool*)o; /* NULL on failure: written on every path */
  if (!o) return sc_bad_handle("memory pool", (const void*)h);
  *out = (sc_pool*)o;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  SC_ENTER(cuMemPoolCreate);
  if (!pool || !poolProps) return CUDA_ERROR_INVALID_VALUE;
  if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (poolProps->location.id < 0 || poolProps->location.id >= sc.ndev) return CUDA_ERROR_INVALID_DEVICE;
  if (poolProps->handleTypes != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_NOT_SUPPORTED;
  SC_LOCK();
  *pool = (CUmemoryPool)(uintptr_t)SC_HANDLE(sc_pool_new_locked(poolProps->location.id, 0, poolProps->maxSize));
  SC_UNLOCK();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuMemPoolDestroy(CUmemoryPool pool) {
  sc_pool* p;
  CUresult r;
  SC_ENTER(cuMemPoolDestroy);
  SC_LOCK();
  r = sc_get_pool(pool, &p);
  if (r == CUDA_SUCCESS && p->is_default) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    /* outstanding allocations keep it alive (and are reported as leaks at exit) */
    p->destroyed = 1;
    sc_obj_unregister(&p->h);
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuDeviceGetDefaultMemPool(CUmemoryPool* poolOut, CUdevice dev) {
  SC_ENTER(cuDeviceGetDefaultMemPool);
  if (!poolOut) return CUDA_ERROR_INVALID_VALUE;
  if (!sc_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  SC_LOCK();
  if (!sc.devs[dev].default_pool) sc.devs[dev].default_pool = sc_pool_new_locked(dev, 1, 0);
  *poolOut = (CUmemoryPool)(uintptr_t)SC_HANDLE(sc.devs[dev].default_pool);
  SC_UNLOCK();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  sc_pool* p;
  CUresult r;
  SC_ENTER(cuMemPoolSetAttribute);
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_pool(pool, &p);
  if (r == CUDA_SUCCESS) {
    switch (attr) {
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: p->reuse_follow = *(int*)value != 0; break;
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: p->reuse_opportunistic = *(int*)value != 0; break;
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: p->reuse_internal = *(int*)value != 0; break;
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->threshold = *(cuuint64_t*)value; break;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(cuuint64_t*)value != 0)
          r = CUDA_ERROR_INVALID_VALUE;
        else
          p->reserved_high = p->reserved;
        break;
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t*)value != 0)
          r = CUDA_ERROR_INVALID_VALUE;
        else
          p->used_high = p->used;
        break;
      default: r = CUDA_ERROR_INVALID_VALUE; break;
    }
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  sc_pool* p;
  CUresult r;
  SC_ENTER(cuMemPoolGetAttribute);
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_pool(pool, &p);
  if (r == CUDA_SUCCESS) {
    switch (attr) {
      case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: *(int*)value = p->reuse_follow; break;
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: *(int*)value = p->reuse_opportunistic; break;
      case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *(int*)value = p->reuse_internal; break;
      case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t*)value = p->threshold; break;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t*)value = p->reserved; break;
      case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t*)value = p->reserved_high; break;
      case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t*)value = p->used; break;
      case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t*)value = p->used_high; break;
      default: r = CUDA_ERROR_INVALID_VALUE; break;
    }
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  sc_pool* p;
  CUresult r;
  SC_ENTER(cuMemPoolTrimTo);
  SC_LOCK();
  r = sc_get_pool(pool, &p);
  if (r == CUDA_SUCCESS) sc_pool_trim_locked(p, minBytesToKeep);
  SC_UNLOCK();
  return r;
}

/* Access of other devices to a pool's memory: as in CUDA, peer access between contexts does
 * not cover it; each device is given it here (READ counts as READWRITE). The owner's own
 * access cannot be changed. */
CUresult CUDAAPI sc_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  sc_pool* p;
  CUresult r;
  size_t i;
  SC_ENTER(cuMemPoolSetAccess);
  if (!map || !count) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_pool(pool, &p);
  for (i = 0; r == CUDA_SUCCESS && i < count; ++i) {
    const CUmemAccessDesc* d = &map[i];
    if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || d->location.id < 0 || d->location.id >= sc.ndev ||
        (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
         d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
      r = CUDA_ERROR_INVALID_VALUE;
    else if (d->location.id == p->dev && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      r = CUDA_ERROR_INVALID_DEVICE;
  }
  for (i = 0; r == CUDA_SUCCESS && i < count; ++i) {
    uint64_t bit = (uint64_t)1 << map[i].location.id;
    if (map[i].location.id == p->dev) continue;
    if (map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE)
      p->peer_access &= ~bit;
    else
      p->peer_access |= bit;
  }
  SC_UNLOCK();
  return r;
}

/* Allocation granularity of pools: CUDA rounds to at least 512 bytes (really 2 MiB
 * chunks); softcuda rounds to 256 so that overruns are still caught. */
static size_t sc_pool_round(size_t n) { return (n + 255) & ~(size_t)255; }

/* Reserves a new block of `need` bytes for p (within its maximum and the device's memory). */
static CUresult sc_pool_grow_locked(sc_pool* p, size_t need, sc_block** out) {
  void* mem = NULL;
  sc_block* b;
  CUresult r;
  if (p->max_size && p->reserved + need > p->max_size) return CUDA_ERROR_OUT_OF_MEMORY;
  if ((r = sc_dev_reserve(p->dev, need)) != CUDA_SUCCESS) return r;
  if (posix_memalign(&mem, 256, need) != 0) {
    sc_dev_unreserve(p->dev, need);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  b = (sc_block*)sc_xcalloc(1, sizeof(sc_block));
  b->p = mem;
  b->size = need;
  p->reserved += need;
  if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
  *out = b;
  return CUDA_SUCCESS;
}

/* 1 when op is a wait of its stream for stream t to reach at least seq. */
static int sc_op_waits_for(const sc_op* op, const sc_stream* t, uint64_t seq) {
  return op && op->run == sc_run_wait && op->a == t && op->u0 >= seq;
}

/* 1 when work enqueued on s now runs after op `seq` of stream t: the same stream, or s has
 * a wait for it that has not finished (a finished one means the op already ran). Direct
 * waits only; CUDA also follows chains of them. */
static int sc_stream_follows(const sc_stream* s, const sc_stream* t, uint64_t seq, int follow_events) {
  const sc_op* op;
  if (s == t) return 1;
  if (!follow_events) return 0;
  if (sc_op_waits_for(s->running, t, seq)) return 1;
  for (op = s->head; op; op = op->next)
    if (sc_op_waits_for(op, t, seq)) return 1;
  return 0;
}

/* A block of p freed with cuMemFreeAsync whose free has not run yet, but which work on s
 * is ordered after (CUDA's stream-order and event-dependency reuse), of a size fit for
 * `need`; it becomes a plain block record and the old allocation record is marked handed
 * over. NULL when there is none. Only when the pool cannot grow: as a last resort, so
 * that addresses are otherwise as before.
 * With `internal` (CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES), a block whose free
 * s is not ordered after may be taken too: as CUDA does, s then waits for that free (a
 * dependency the application never asked for, which CUDA inserts rather than fail, as an
 * H200 does for a full pool; with SOFTCUDA_POOL_INTERNAL_REUSE=1 softcuda does it before
 * growing the pool too, so tests meet it). */
static sc_block* sc_pool_take_pending_locked(sc_pool* p, sc_stream* s, size_t need, int internal) {
  size_t i;
  for (i = 0; i < sc.nallocs; ++i) {
    sc_alloc* a = sc.allocs[i];
    sc_block* b;
    if (a->pool != p || !a->free_pending || a->handed_over || !a->free_stream) continue;
    if (a->flags < need || a->flags > 2 * need) continue;
    if (!sc_stream_follows(s, a->free_stream, a->free_seq, p->reuse_follow)) {
      if (!internal || s->capture || a->free_stream->ctx != s->ctx) continue;
      sc_enqueue_wait(s, a->free_stream, a->free_seq);
    }
    a->handed_over = 1;
    p->used -= a->flags; /* counted again for the new allocation */
    b = (sc_block*)sc_xcalloc(1, sizeof(sc_block));
    b->p = (void*)a->base;
    b->size = a->flags;
    return b;
  }
  return NULL;
}

static CUresult sc_pool_alloc_locked(sc_pool* p, sc_stream* s, size_t bytes, uintptr_t* out) {
  size_t need = sc_pool_round(bytes);
  sc_block **link, *b = NULL;
  sc_alloc* a;
  CUresult r;
  for (link = &p->free_blocks; *link; link = &(*link)->next)
    if ((*link)->size >= need && (*link)->size <= 2 * need) {
      b = *link;
      *link = b->next;
      break;
    }
  if (!b && p->reuse_internal && sc.pool_internal_reuse) b = sc_pool_take_pending_locked(p, s, need, 1);
  if (!b) {
    if (need < bytes) return CUDA_ERROR_OUT_OF_MEMORY; /* the rounding wrapped: a size near SIZE_MAX */
    r = sc_pool_grow_locked(p, need, &b);
    /* Full: a pending free this stream is ordered after, else (as CUDA does with the
     * attribute on) one it is made to wait for. */
    if (r != CUDA_SUCCESS && !(b = sc_pool_take_pending_locked(p, s, need, 0)) &&
        !(p->reuse_internal && (b = sc_pool_take_pending_locked(p, s, need, 1))))
      return r;
  }
  a = (sc_alloc*)sc_xcalloc(1, sizeof(sc_alloc));
  a->base = (uintptr_t)b->p;
  a->size = bytes; /* the caller's size: overruns past it are caught */
  a->type = SC_MEM_POOL;
  a->ctx = NULL;
  a->made_in = s ? s->ctx : NULL;
  a->dev = p->dev;
  a->pool = p;
  a->flags = (unsigned)b->size; /* the block's real size */
  free(b);
  sc_alloc_insert(a);
  sc_ref(&p->h);
  p->live_allocs++;
  p->used += a->flags;
  if (p->used > p->used_high) p->used_high = p->used;
  *out = a->base;
  return CUDA_SUCCESS;
}

static CUresult sc_alloc_async(CUdeviceptr* dptr, size_t bytesize, sc_pool* p, CUstream hStream) {
  sc_stream* s;
  sc_ctx* cur;
  CUresult r;
  uintptr_t out;
  r = sc_current_ctx(&cur);
  if (r == CUDA_SUCCESS) r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS && !p) {
    int dev = s->ctx->dev;
    if (!sc.devs[dev].default_pool) sc.devs[dev].default_pool = sc_pool_new_locked(dev, 1, 0);
    p = sc.devs[dev].default_pool;
  }
  if (r == CUDA_SUCCESS) r = sc_pool_alloc_locked(p, s, bytesize, &out);
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)out;
  return r;
}

CUresult CUDAAPI sc_cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  CUresult r;
  SC_ENTER(cuMemAllocAsync);
  if (!dptr || !bytesize) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_alloc_async(dptr, bytesize, NULL, hStream);
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  sc_pool* p;
  CUresult r;
  SC_ENTER(cuMemAllocFromPoolAsync);
  if (!dptr || !bytesize) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_pool(pool, &p);
  if (r == CUDA_SUCCESS) r = sc_alloc_async(dptr, bytesize, p, hStream);
  SC_UNLOCK();
  return r;
}

/* Runs in stream order: the block goes back to its pool (unless an allocation ordered
 * after this free took it already). */
/* A pool allocation's block goes back to its pool (under sc.mu): its free ran, or its
 * context died of a sticky error (sc_free_ctx_allocs_locked). */
static void sc_pool_reclaim_locked(sc_alloc* a) {
  sc_pool* p = a->pool;
  sc_block* b;
  sc_alloc_remove(a);
  if (a->handed_over) {
    p->live_allocs--;
    free(a);
    sc_unref(&p->h);
    return;
  }
  b = (sc_block*)sc_xcalloc(1, sizeof(sc_block));
  b->p = (void*)a->base;
  b->size = a->flags;
  b->next = p->free_blocks;
  p->free_blocks = b;
  p->used -= a->flags;
  p->live_allocs--;
  free(a);
  sc_unref(&p->h);
}

static CUresult sc_run_pool_free(sc_op* op) {
  SC_LOCK();
  sc_pool_reclaim_locked((sc_alloc*)op->a);
  SC_UNLOCK();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  sc_stream* s;
  sc_ctx* cur;
  sc_alloc* a;
  CUresult r;
  SC_ENTER(cuMemFreeAsync);
  SC_LOCK();
  r = sc_current_ctx(&cur);
  if (r == CUDA_SUCCESS) r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS) {
    a = sc_alloc_find((uintptr_t)dptr);
    if (!a || a->base != (uintptr_t)dptr || a->type != SC_MEM_POOL || a->free_pending) {
      r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                       "cuMemFreeAsync(0x%llx): not the start of a live stream-ordered allocation",
                       (unsigned long long)dptr);
    } else {
      sc_op* op = sc_op_new("pool free", sc_run_pool_free, NULL);
      int captured = s->capture != NULL;
      a->free_pending = 1;
      op->a = a;
      sc_submit(s, op);
      if (!captured) { /* its place in stream order: later work of s, or work waiting for it, may reuse the block */
        a->free_stream = s;
        a->free_seq = op->seq;
      }
    }
  }
  SC_UNLOCK();
  return r;
}
