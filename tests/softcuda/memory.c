/* memory.c - allocations (device, pinned host, managed), the allocation table with range
 * checks, memcpy / memset (sync and async), cuMemGetInfo, pointer attributes.
 * Part of softcuda.c. */

/* ---- the arena: cuMemAlloc memory, shareable ------------------------------------------ */
/* Every cuMemAlloc allocation is its own page-aligned range of one memfd (MAP_SHARED), so
 * that cuIpcGetMemHandle (share.c) can name it to another process, which maps the same
 * range of /proc/<pid>/fd/<fd>. Offsets are never reused: a freed range is punched out of
 * the file (its pages go back to the system; a process that still has it open reads
 * zeros, where CUDA leaves the use of freed exported memory undefined). Without
 * memfd_create the memory is malloc'ed and IPC is CUDA_ERROR_NOT_SUPPORTED. */

#define SC_ARENA_STEP ((uint64_t)1 << 30) /* the file grows (sparse) in steps of this */

static size_t sc_page_size(void) {
  static size_t page; /* any thread may ask first: relaxed atomics, the value is always the same */
  size_t p = __atomic_load_n(&page, __ATOMIC_RELAXED);
  if (!p) {
    p = (size_t)sysconf(_SC_PAGESIZE);
    __atomic_store_n(&page, p, __ATOMIC_RELAXED);
  }
  return p;
}

/* n rounded up to a multiple of align (a power of two); 0 when that overflows. */
static size_t sc_round_up(size_t n, size_t align) {
  if (n > SIZE_MAX - (align - 1)) return 0;
  return (n + align - 1) & ~(align - 1);
}

/* Under sc.mu. */
static int sc_arena_ready_locked(void) {
  struct stat st;
  if (sc.arena_state != 0) return sc.arena_state > 0;
  sc.arena_state = -1;
  sc.arena_fd = memfd_create("softcuda-device-memory", MFD_CLOEXEC);
  if (sc.arena_fd < 0) return 0;
  if (fstat(sc.arena_fd, &st) != 0) {
    close(sc.arena_fd);
    return 0;
  }
  sc.arena_ino = (uint64_t)st.st_ino;
  sc.arena_state = 1;
  return 1;
}

/* Maps a new range of the arena for bytes; NULL when there is no arena or no room. */
static void* sc_arena_map_locked(size_t bytes, uint64_t* off, size_t* len) {
  size_t n = sc_round_up(bytes, sc_page_size());
  void* p;
  if (n == 0 || !sc_arena_ready_locked()) return NULL;
  if (sc.arena_next + n > sc.arena_len) {
    uint64_t want = (sc.arena_next + n + SC_ARENA_STEP - 1) / SC_ARENA_STEP * SC_ARENA_STEP;
    if (ftruncate(sc.arena_fd, (off_t)want) != 0) return NULL;
    sc.arena_len = want;
  }
  p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, sc.arena_fd, (off_t)sc.arena_next);
  if (p == MAP_FAILED) return NULL;
  *off = sc.arena_next;
  *len = n;
  sc.arena_next += n;
  return p;
}

static void sc_arena_unmap_locked(sc_alloc* a) {
  munmap((void*)a->base, a->map_size);
  fallocate(sc.arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a->arena_off, (off_t)a->map_size);
}

/* ---- allocation table (sorted by base, under sc.mu) --------------------------------- */

static size_t sc_alloc_lower_bound(uintptr_t p) {
  size_t lo = 0, hi = sc.nallocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (sc.allocs[mid]->base <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo; /* first index with base > p */
}

static sc_alloc* sc_alloc_find(uintptr_t p) {
  size_t i = sc_alloc_lower_bound(p);
  sc_alloc* a;
  if (i == 0) return NULL;
  a = sc.allocs[i - 1];
  return p >= a->base && p < a->base + a->size ? a : NULL;
}

static void sc_alloc_insert(sc_alloc* a) {
  size_t i;
  if (sc.nallocs == sc.cap_allocs) {
    size_t cap = sc.cap_allocs ? sc.cap_allocs * 2 : 256;
    sc_alloc** n = (sc_alloc**)realloc(sc.allocs, cap * sizeof(sc_alloc*));
    if (!n) abort();
    sc.allocs = n;
    sc.cap_allocs = cap;
  }
  i = sc_alloc_lower_bound(a->base);
  memmove(sc.allocs + i + 1, sc.allocs + i, (sc.nallocs - i) * sizeof(sc_alloc*));
  sc.allocs[i] = a;
  sc.nallocs++;
  a->id = ++sc.next_alloc_id;
}

/* Two records share a base only while a pool block freed with cuMemFreeAsync was handed
 * to a new allocation before that free ran (pool.c): the newer record comes later. */
static void sc_alloc_remove(sc_alloc* a) {
  size_t i = sc_alloc_lower_bound(a->base);
  while (i > 0 && sc.allocs[i - 1] != a && sc.allocs[i - 1]->base == a->base) --i;
  if (i == 0 || sc.allocs[i - 1] != a) return;
  memmove(sc.allocs + i - 1, sc.allocs + i, (sc.nallocs - i) * sizeof(sc_alloc*));
  sc.nallocs--;
}

/* VMM mappings side by side are one range of device memory, as on a GPU: 1 when the
 * records after a (a VMM mapping holding p) continue it without a gap up to p+bytes. */
static int sc_vmm_continues(const sc_alloc* a, uintptr_t p, size_t bytes) {
  while (a && a->origin == SC_ORIGIN_VMM) {
    uintptr_t end = a->base + a->size;
    if (bytes <= end - p) return 1;
    bytes -= end - p;
    p = end;
    a = sc_alloc_find(end);
    if (a && a->base != end) return 0;
  }
  return 0;
}

/* Under sc.mu: 0 when `a` is pool memory that device `dev` was not given access to
 * (cuMemPoolSetAccess; peer access between contexts does not cover pools). */
static int sc_pool_reaches(const sc_alloc* a, int dev) {
  return !a || !a->pool || a->pool->dev == dev || (a->pool->peer_access >> dev) & 1;
}

/* 1 when [p, p+bytes) lies in a record of the allocation containing p, the newest or an
 * older one sharing its base (work ordered before a handed-over block's free still runs
 * on the old record's extent), or in adjacent VMM mappings. */
static int sc_alloc_covers(uintptr_t p, size_t bytes) {
  size_t i = sc_alloc_lower_bound(p);
  uintptr_t base;
  if (i == 0) return 0;
  if (p - sc.allocs[i - 1]->base < sc.allocs[i - 1]->size && sc_vmm_continues(sc.allocs[i - 1], p, bytes)) return 1;
  base = sc.allocs[i - 1]->base;
  for (; i > 0 && sc.allocs[i - 1]->base == base; --i) {
    sc_alloc* a = sc.allocs[i - 1];
    if (p >= a->base && bytes <= a->size && p - a->base <= a->size - bytes) return 1;
  }
  return 0;
}

/* [p, p+bytes) must lie in one live allocation. device_side: p must be in one at all
 * (a device pointer); otherwise an unknown p is host memory and passes. */
static CUresult sc_check_range(uintptr_t p, size_t bytes, int device_side, sc_alloc** out) {
  sc_alloc* a = sc_alloc_find(p);
  if (out) *out = a;
  if (!a) {
    if (!device_side) return CUDA_SUCCESS;
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE, "0x%llx is not in any live allocation",
                        (unsigned long long)p);
  }
  if (a->free_pending)
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                        "0x%llx is in pool allocation #%llu, already freed with cuMemFreeAsync", (unsigned long long)p,
                        a->id);
  if ((bytes > a->size || p - a->base > a->size - bytes) && !sc_vmm_continues(a, p, bytes))
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                        "range 0x%llx+%zu overruns allocation #%llu [0x%llx, +%zu)", (unsigned long long)p, bytes,
                        a->id, (unsigned long long)a->base, a->size);
  return CUDA_SUCCESS;
}

SOFTCUDA_API int softcuda_accessible(const void* ptr, size_t bytes) {
  int ok;
  SC_LOCK();
  /* Run-time check: a pool block freed with cuMemFreeAsync stays accessible until that
   * free runs on its stream (work ordered before the free may still use it); the enqueue
   * checks (sc_check_range) refuse work enqueued after the free. */
  ok = sc_alloc_covers((uintptr_t)ptr, bytes);
  SC_UNLOCK();
  return ok;
}

static CUresult sc_dev_reserve(int dev, size_t bytes) {
  sc_device* d = &sc.devs[dev];
  if (bytes > d->total - d->used) {
    sc_pools_release(dev); /* hand back unused pool memory first, as CUDA does */
    if (bytes > d->total - d->used) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  d->used += bytes;
  return CUDA_SUCCESS;
}

static void sc_dev_unreserve(int dev, size_t bytes) { sc.devs[dev].used -= bytes; }

static CUresult sc_alloc_new_locked(sc_ctx* c, sc_mem_type type, size_t bytes, unsigned flags, sc_alloc** out) {
  void* p = NULL;
  sc_alloc* a;
  CUresult r;
  uint64_t off = 0;
  size_t len = 0;
  if (type != SC_MEM_HOST && (r = sc_dev_reserve(c->dev, bytes)) != CUDA_SUCCESS) return r;
  if (type == SC_MEM_DEVICE) p = sc_arena_map_locked(bytes, &off, &len);
  if (!p && posix_memalign(&p, 256, bytes) != 0) {
    if (type != SC_MEM_HOST) sc_dev_unreserve(c->dev, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a = (sc_alloc*)sc_xcalloc(1, sizeof(sc_alloc));
  a->map_size = len;
  a->arena_off = off;
  a->base = (uintptr_t)p;
  a->size = bytes;
  a->type = type;
  a->ctx = c;
  a->dev = c->dev;
  a->flags = flags;
  sc_alloc_insert(a);
  *out = a;
  return CUDA_SUCCESS;
}

/* Drops a record and what it owns: its memory when softcuda allocated it, the mapping of
 * an IPC open; a registration leaves the caller's memory alone (VMM records are share.c's). */
static void sc_alloc_release_locked(sc_alloc* a) {
  sc_alloc_remove(a);
  switch (a->origin) {
    case SC_ORIGIN_ALLOC:
      if (a->type == SC_MEM_DEVICE || a->type == SC_MEM_MANAGED) sc_dev_unreserve(a->dev, a->size);
      if (a->map_size)
        sc_arena_unmap_locked(a);
      else
        free((void*)a->base);
      break;
    case SC_ORIGIN_IPC: munmap((void*)a->base, a->map_size); break;
    case SC_ORIGIN_REGISTERED:
    case SC_ORIGIN_VMM:
    case SC_ORIGIN_MODULE: break; /* the module frees its variables' memory */
  }
  free(a);
}

static void sc_pool_reclaim_locked(sc_alloc* a);

/* Frees the plain allocations a dying context still owns. Pool allocations belong to their
 * pool, except when the context died of a sticky error: then no call can free them any
 * more, and destroying the context gives their memory back to the pool. Under sc.mu. */
static void sc_free_ctx_allocs_locked(sc_ctx* c) {
  size_t i = 0;
  while (i < sc.nallocs) {
    sc_alloc* a = sc.allocs[i];
    if (a->ctx == c && a->type != SC_MEM_POOL && a->origin != SC_ORIGIN_MODULE) /* the module's go with it */
      sc_alloc_release_locked(a);
    else if (a->type == SC_MEM_POOL && a->made_in == c && c->sticky != CUDA_SUCCESS)
      sc_pool_reclaim_locked(a);
    else
      ++i;
  }
}

static CUresult sc_alloc_entry(sc_mem_type type, size_t bytes, unsigned flags, uintptr_t* out) {
  sc_ctx* c;
  sc_alloc* a;
  CUresult r;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) r = sc_alloc_new_locked(c, type, bytes, flags, &a);
  if (r == CUDA_SUCCESS) *out = a->base;
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuMemAlloc(CUdeviceptr* dptr, size_t bytesize) {
  uintptr_t p;
  CUresult r;
  SC_ENTER(cuMemAlloc);
  SC_UNSAFE_CALL();
  if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  r = sc_alloc_entry(SC_MEM_DEVICE, bytesize, 0, &p);
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)p;
  return r;
}

CUresult CUDAAPI sc_cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  uintptr_t p;
  CUresult r;
  SC_ENTER(cuMemAllocManaged);
  SC_UNSAFE_CALL();
  if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  r = sc_alloc_entry(SC_MEM_MANAGED, bytesize, flags, &p);
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)p;
  return r;
}

CUresult CUDAAPI sc_cuMemAllocHost(void** pp, size_t bytesize) {
  uintptr_t p;
  CUresult r;
  SC_ENTER(cuMemAllocHost);
  SC_UNSAFE_CALL();
  if (!pp || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  r = sc_alloc_entry(SC_MEM_HOST, bytesize, 0, &p);
  if (r == CUDA_SUCCESS) *pp = (void*)p;
  return r;
}

CUresult CUDAAPI sc_cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  uintptr_t p;
  CUresult r;
  SC_ENTER(cuMemHostAlloc);
  SC_UNSAFE_CALL();
  if (!pp || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  r = sc_alloc_entry(SC_MEM_HOST, bytesize, flags, &p);
  if (r == CUDA_SUCCESS) *pp = (void*)p;
  return r;
}

/* Frees a plain allocation after the work of its context is done (cuMemFree and
 * cuMemFreeHost synchronise, as in CUDA). */
static CUresult sc_free_entry(uintptr_t p, int host) {
  sc_ctx* c;
  sc_alloc* a;
  CUresult r;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) {
    a = sc_alloc_find(p);
    if (!a || a->base != p || a->type == SC_MEM_POOL || a->origin != SC_ORIGIN_ALLOC ||
        (host != (a->type == SC_MEM_HOST))) {
      r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                       "%s(0x%llx): not the start of a live %s allocation", host ? "cuMemFreeHost" : "cuMemFree",
                       (unsigned long long)p, host ? "pinned host" : "device or managed");
    } else {
      sc_ctx_sync_locked(a->ctx);
      sc_alloc_release_locked(a);
    }
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuMemFree(CUdeviceptr dptr) {
  SC_ENTER(cuMemFree);
  SC_UNSAFE_CALL();
  return sc_free_entry((uintptr_t)dptr, 0);
}

CUresult CUDAAPI sc_cuMemFreeHost(void* p) {
  SC_ENTER(cuMemFreeHost);
  SC_UNSAFE_CALL();
  return sc_free_entry((uintptr_t)p, 1);
}

CUresult CUDAAPI sc_cuMemGetInfo(size_t* freeBytes, size_t* totalBytes) {
  sc_ctx* c;
  CUresult r;
  SC_ENTER(cuMemGetInfo);
  if (!freeBytes || !totalBytes) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) {
    *totalBytes = sc.devs[c->dev].total;
    *freeBytes = sc.devs[c->dev].total - sc.devs[c->dev].used;
  }
  SC_UNLOCK();
  return r;
}

/* ---- copies and fills --------------------------------------------------------------- */

static CUresult sc_run_copy(sc_op* op) {
  if (op->u0) memmove(op->a, op->b, (size_t)op->u0);
  return CUDA_SUCCESS;
}

static void sc_fini_copy(sc_op* op) { free(op->c); /* staging copy of pageable source */ }

static CUresult sc_run_fill(sc_op* op) {
  size_t i, n = (size_t)op->u1;
  switch (op->u2) {
    case 1: memset(op->a, (int)(op->u0 & 0xff), n); break;
    case 2:
      for (i = 0; i < n; ++i) ((uint16_t*)op->a)[i] = (uint16_t)op->u0;
      break;
    default:
      for (i = 0; i < n; ++i) ((uint32_t*)op->a)[i] = (uint32_t)op->u0;
      break;
  }
  return CUDA_SUCCESS;
}

/* Where a pointer of a copy lives. */
typedef enum { SC_SIDE_DEVICE, SC_SIDE_HOST, SC_SIDE_UNIFIED } sc_side;

/* 1 when p is pinned (or managed) memory the device can reach asynchronously. */
static int sc_is_pinned(uintptr_t p) {
  sc_alloc* a = sc_alloc_find(p);
  return a != NULL;
}

/* The common path of every copy. sync: the legacy stream of the current context, then
 * wait. Under no lock on entry. */
static CUresult sc_copy(uintptr_t dst, sc_side dside, uintptr_t src, sc_side sside, size_t n, CUstream hs, int sync,
                        CUcontext dctx, CUcontext sctx) {
  sc_ctx *c, *tmp;
  sc_stream* s = NULL;
  sc_op* op;
  CUresult r;
  int wait = sync, host_dst;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS && dctx) r = sc_lookup_ctx(dctx, &tmp);
  if (r == CUDA_SUCCESS && sctx) r = sc_lookup_ctx(sctx, &tmp);
  if (r == CUDA_SUCCESS) r = sync ? (s = sc_null_stream(c), CUDA_SUCCESS) : sc_get_stream(hs, &s);
  if (r == CUDA_SUCCESS && (!dst || !src) && n) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS && dside != SC_SIDE_HOST) r = sc_check_range(dst, n, dside == SC_SIDE_DEVICE, NULL);
  if (r == CUDA_SUCCESS && sside != SC_SIDE_HOST) r = sc_check_range(src, n, sside == SC_SIDE_DEVICE, NULL);
  if (r != CUDA_SUCCESS || n == 0) {
    SC_UNLOCK();
    return r;
  }
  op = sc_op_new(sync ? "memcpy" : "memcpy async", sc_run_copy, sc_fini_copy);
  op->a = (void*)dst;
  op->b = (void*)src;
  op->u0 = n;
  if (!sync && !sc_is_pinned(src) && sside != SC_SIDE_DEVICE) {
    /* pageable source: CUDA stages it before returning, so the caller may reuse it */
    op->c = malloc(n);
    if (!op->c) {
      free(op);
      SC_UNLOCK();
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(op->c, (void*)src, n);
    op->b = op->c;
  }
  host_dst = dside != SC_SIDE_DEVICE && !sc_is_pinned(dst);
  if (!sync && host_dst) wait = 1; /* into pageable memory CUDA returns only when done */
  sc_submit(s, op);
  if (wait) {
    sc_thread()->round_trips++;
    sc_wait_stream_seq(s, s->enq_seq, 1);
    r = s->ctx->sticky;
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t byteCount) {
  SC_ENTER(cuMemcpy);
  SC_UNSAFE_CALL();
  return sc_copy((uintptr_t)dst, SC_SIDE_UNIFIED, (uintptr_t)src, SC_SIDE_UNIFIED, byteCount, NULL, 1, NULL, NULL);
}
CUresult CUDAAPI sc_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t byteCount, CUstream hStream) {
  SC_ENTER(cuMemcpyAsync);
  return sc_copy((uintptr_t)dst, SC_SIDE_UNIFIED, (uintptr_t)src, SC_SIDE_UNIFIED, byteCount, hStream, 0, NULL, NULL);
}
CUresult CUDAAPI sc_cuMemcpyHtoD(CUdeviceptr dstDevice, const void* srcHost, size_t byteCount) {
  SC_ENTER(cuMemcpyHtoD);
  SC_UNSAFE_CALL();
  return sc_copy((uintptr_t)dstDevice, SC_SIDE_DEVICE, (uintptr_t)srcHost, SC_SIDE_HOST, byteCount, NULL, 1, NULL,
                 NULL);
}
CUresult CUDAAPI sc_cuMemcpyDtoH(void* dstHost, CUdeviceptr srcDevice, size_t byteCount) {
  SC_ENTER(cuMemcpyDtoH);
  SC_UNSAFE_CALL();
  return sc_copy((uintptr_t)dstHost, SC_SIDE_HOST, (uintptr_t)srcDevice, SC_SIDE_DEVICE, byteCount, NULL, 1, NULL,
                 NULL);
}
CUresult CUDAAPI sc_cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t byteCount) {
  SC_ENTER(cuMemcpyDtoD);
  SC_UNSAFE_CALL();
  return sc_copy((uintptr_t)dstDevice, SC_SIDE_DEVICE, (uintptr_t)srcDevice, SC_SIDE_DEVICE, byteCount, NULL, 1, NULL,
                 NULL);
}
CUresult CUDAAPI sc_cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void* srcHost, size_t byteCount, CUstream hStream) {
  SC_ENTER(cuMemcpyHtoDAsync);
  return sc_copy((uintptr_t)dstDevice, SC_SIDE_DEVICE, (uintptr_t)srcHost, SC_SIDE_HOST, byteCount, hStream, 0, NULL,
                 NULL);
}
CUresult CUDAAPI sc_cuMemcpyDtoHAsync(void* dstHost, CUdeviceptr srcDevice, size_t byteCount, CUstream hStream) {
  SC_ENTER(cuMemcpyDtoHAsync);
  return sc_copy((uintptr_t)dstHost, SC_SIDE_HOST, (uintptr_t)srcDevice, SC_SIDE_DEVICE, byteCount, hStream, 0, NULL,
                 NULL);
}
CUresult CUDAAPI sc_cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t byteCount,
                                      CUstream hStream) {
  SC_ENTER(cuMemcpyDtoDAsync);
  return sc_copy((uintptr_t)dstDevice, SC_SIDE_DEVICE, (uintptr_t)srcDevice, SC_SIDE_DEVICE, byteCount, hStream, 0,
                 NULL, NULL);
}
CUresult CUDAAPI sc_cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                      CUcontext srcContext, size_t byteCount, CUstream hStream) {
  SC_ENTER(cuMemcpyPeerAsync);
  if (!dstContext || !srcContext) return CUDA_ERROR_INVALID_CONTEXT;
  return sc_copy((uintptr_t)dstDevice, SC_SIDE_DEVICE, (uintptr_t)srcDevice, SC_SIDE_DEVICE, byteCount, hStream, 0,
                 dstContext, srcContext);
}
CUresult CUDAAPI sc_cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                 CUcontext srcContext, size_t byteCount) {
  SC_ENTER(cuMemcpyPeer);
  SC_UNSAFE_CALL();
  if (!dstContext || !srcContext) return CUDA_ERROR_INVALID_CONTEXT;
  return sc_copy((uintptr_t)dstDevice, SC_SIDE_DEVICE, (uintptr_t)srcDevice, SC_SIDE_DEVICE, byteCount, NULL, 1,
                 dstContext, srcContext);
}

static CUresult sc_fill(uintptr_t dst, unsigned value, size_t n, unsigned elem, CUstream hs, int sync) {
  sc_ctx* c;
  sc_stream* s = NULL;
  sc_op* op;
  CUresult r;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) r = sync ? (s = sc_null_stream(c), CUDA_SUCCESS) : sc_get_stream(hs, &s);
  if (r == CUDA_SUCCESS && dst % elem != 0) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS && n) r = sc_check_range(dst, n * elem, 1, NULL);
  if (r != CUDA_SUCCESS || n == 0) {
    SC_UNLOCK();
    return r;
  }
  op = sc_op_new("memset", sc_run_fill, NULL);
  op->a = (void*)dst;
  op->u0 = value;
  op->u1 = n;
  op->u2 = elem;
  sc_submit(s, op);
  if (sync) {
    sc_thread()->round_trips++;
    sc_wait_stream_seq(s, s->enq_seq, 1);
    r = s->ctx->sticky;
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t n) {
  SC_ENTER(cuMemsetD8);
  SC_UNSAFE_CALL();
  return sc_fill((uintptr_t)dstDevice, uc, n, 1, NULL, 1);
}
CUresult CUDAAPI sc_cuMemsetD16(CUdeviceptr dstDevice, unsigned short us, size_t n) {
  SC_ENTER(cuMemsetD16);
  SC_UNSAFE_CALL();
  return sc_fill((uintptr_t)dstDevice, us, n, 2, NULL, 1);
}
CUresult CUDAAPI sc_cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t n) {
  SC_ENTER(cuMemsetD32);
  SC_UNSAFE_CALL();
  return sc_fill((uintptr_t)dstDevice, ui, n, 4, NULL, 1);
}
CUresult CUDAAPI sc_cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t n, CUstream hStream) {
  SC_ENTER(cuMemsetD8Async);
  return sc_fill((uintptr_t)dstDevice, uc, n, 1, hStream, 0);
}
CUresult CUDAAPI sc_cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t n, CUstream hStream) {
  SC_ENTER(cuMemsetD16Async);
  return sc_fill((uintptr_t)dstDevice, us, n, 2, hStream, 0);
}
CUresult CUDAAPI sc_cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t n, CUstream hStream) {
  SC_ENTER(cuMemsetD32Async);
  return sc_fill((uintptr_t)dstDevice, ui, n, 4, hStream, 0);
}

/* ---- pointer attributes ------------------------------------------------------------- */

CUresult CUDAAPI sc_cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  sc_alloc* a;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuPointerGetAttribute);
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  a = sc_alloc_find((uintptr_t)ptr);
  if (!a || a->free_pending) {
    SC_UNLOCK();
    return CUDA_ERROR_INVALID_VALUE;
  }
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *(CUcontext*)data = a->ctx ? (CUcontext)(uintptr_t)SC_HANDLE(a->ctx) : NULL;
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *(unsigned int*)data = a->type == SC_MEM_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr*)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (a->type == SC_MEM_DEVICE || a->type == SC_MEM_POOL)
        r = CUDA_ERROR_INVALID_VALUE;
      else
        *(void**)data = (void*)(uintptr_t)ptr;
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned int*)data = a->type == SC_MEM_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int*)data = a->dev; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long*)data = a->id; break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(unsigned int*)data = 1; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr*)data = (CUdeviceptr)a->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t*)data = a->size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned int*)data = 1; break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      *(unsigned int*)data = a->origin == SC_ORIGIN_ALLOC && a->type == SC_MEM_DEVICE && a->map_size != 0;
      break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: /* VMM: the flags are the handle types */
      *(unsigned long long*)data = a->origin == SC_ORIGIN_VMM ? a->flags : 0;
      break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *(CUmemoryPool*)data = a->pool ? (CUmemoryPool)(uintptr_t)SC_HANDLE(a->pool) : NULL;
      break;
    default: r = CUDA_ERROR_INVALID_VALUE; break;
  }
  SC_UNLOCK();
  return r;
}

/* ---- tensor maps -------------------------------------------------------------------- */
/* cuTensorMapEncodeTiled with every rule of the CUDA 13 reference checked (a broken one is
 * CUDA_ERROR_INVALID_VALUE and a range violation naming it); the 128 bytes hold a magic and
 * the fields, which twins read back with softcuda_tensor_map_read. Packed sub-byte types
 * (13 and up) are not modelled. */
#define SC_TMAP_MAGIC 0x50414d54u /* "TMAP" */
typedef struct sc_tmap_bytes {
  unsigned magic;
  unsigned char type, rank, element_bytes, interleave, swizzle, l2_promotion, oob_fill, pad;
  unsigned long long address;
  unsigned long long dims[5];
  unsigned long long strides[4]; /* of dims 1..rank-1 */
  unsigned short box[5];
  unsigned char element_strides[5];
} sc_tmap_bytes;
typedef char sc_tmap_fits[sizeof(sc_tmap_bytes) <= sizeof(CUtensorMap) ? 1 : -1];

static unsigned sc_tmap_element_bytes(unsigned type) {
  static const unsigned char bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  return type < sizeof bytes ? bytes[type] : 0;
}

#define SC_TMAP_BAD(...) return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE, __VA_ARGS__)

CUresult CUDAAPI sc_cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                           cuuint32_t tensorRank, void* globalAddress, const cuuint64_t* globalDim,
                                           const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
                                           const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
                                           CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                           CUtensorMapFloatOOBfill oobFill) {
  sc_tmap_bytes m;
  unsigned esize = sc_tmap_element_bytes((unsigned)tensorDataType), i;
  unsigned long long inner;
  sc_ctx* ctx = NULL;
  CUresult r;
  SC_ENTER(cuTensorMapEncodeTiled);
  /* The driver wants a current context (CUDA_ERROR_INVALID_CONTEXT on an H200 otherwise). */
  SC_LOCK();
  r = sc_current_ctx(&ctx);
  SC_UNLOCK();
  if (r != CUDA_SUCCESS) return r;
  if (!tensorMap || !globalDim || !boxDim || !elementStrides || (tensorRank > 1 && !globalStrides))
    SC_TMAP_BAD("cuTensorMapEncodeTiled: a NULL pointer argument");
  if ((uintptr_t)tensorMap % 64)
    SC_TMAP_BAD("cuTensorMapEncodeTiled: tensorMap %p is not 64-byte aligned", (void*)tensorMap);
  if (!esize) SC_TMAP_BAD("cuTensorMapEncodeTiled: data type %d is not modelled", (int)tensorDataType);
  if (tensorRank < 1 || tensorRank > 5) SC_TMAP_BAD("cuTensorMapEncodeTiled: rank %u (1..5)", tensorRank);
  if ((unsigned)interleave > 2u || (unsigned)swizzle > 3u || (unsigned)l2Promotion > 3u || (unsigned)oobFill > 1u)
    SC_TMAP_BAD("cuTensorMapEncodeTiled: an enum out of range");
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && tensorRank < 3)
    SC_TMAP_BAD("cuTensorMapEncodeTiled: interleave needs rank >= 3 (rank %u)", tensorRank);
  if ((uintptr_t)globalAddress % (interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32u : 16u))
    SC_TMAP_BAD("cuTensorMapEncodeTiled: globalAddress %p is misaligned", globalAddress);
  for (i = 0; i < tensorRank; ++i) {
    if (globalDim[i] == 0 || globalDim[i] > (1ull << 32))
      SC_TMAP_BAD("cuTensorMapEncodeTiled: globalDim[%u] %llu", i, (unsigned long long)globalDim[i]);
    if (boxDim[i] == 0 || boxDim[i] > 256) SC_TMAP_BAD("cuTensorMapEncodeTiled: boxDim[%u] %u", i, boxDim[i]);
    if (elementStrides[i] == 0 || elementStrides[i] > 8)
      SC_TMAP_BAD("cuTensorMapEncodeTiled: elementStrides[%u] %u", i, elementStrides[i]);
  }
  for (i = 0; i + 1 < tensorRank; ++i) {
    unsigned long long s = globalStrides[i];
    if (s % (interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32u : 16u) || s >= (1ull << 40))
      SC_TMAP_BAD("cuTensorMapEncodeTiled: globalStrides[%u] %llu", i, s);
    if (s < (i ? globalStrides[i - 1] * globalDim[i] : globalDim[0] * esize))
      SC_TMAP_BAD("cuTensorMapEncodeTiled: globalStrides[%u] %llu is less than the dimensions below span", i, s);
  }
  inner = (unsigned long long)boxDim[0] * esize;
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && inner % 16)
    SC_TMAP_BAD("cuTensorMapEncodeTiled: boxDim[0] * element size is %llu bytes, not a multiple of 16", inner);
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && swizzle != CU_TENSOR_MAP_SWIZZLE_NONE &&
      inner > (16ull << (unsigned)swizzle))
    SC_TMAP_BAD("cuTensorMapEncodeTiled: an inner box of %llu bytes is wider than the swizzle span", inner);
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_32B && swizzle != CU_TENSOR_MAP_SWIZZLE_32B)
    SC_TMAP_BAD("cuTensorMapEncodeTiled: 32-byte interleave needs 32-byte swizzle");
  if (oobFill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE && tensorDataType < CU_TENSOR_MAP_DATA_TYPE_FLOAT16)
    SC_TMAP_BAD("cuTensorMapEncodeTiled: NaN fill for an integer type");
  memset(&m, 0, sizeof m);
  m.magic = SC_TMAP_MAGIC;
  m.type = (unsigned char)tensorDataType;
  m.rank = (unsigned char)tensorRank;
  m.element_bytes = (unsigned char)esize;
  m.interleave = (unsigned char)interleave;
  m.swizzle = (unsigned char)swizzle;
  m.l2_promotion = (unsigned char)l2Promotion;
  m.oob_fill = (unsigned char)oobFill;
  m.address = (unsigned long long)(uintptr_t)globalAddress;
  for (i = 0; i < tensorRank; ++i) {
    m.dims[i] = globalDim[i];
    m.box[i] = (unsigned short)boxDim[i];
    m.element_strides[i] = (unsigned char)elementStrides[i];
    if (i + 1 < tensorRank) m.strides[i] = globalStrides[i];
  }
  memset(tensorMap, 0, sizeof *tensorMap);
  memcpy(tensorMap, &m, sizeof m);
  return CUDA_SUCCESS;
}

SOFTCUDA_API int softcuda_tensor_map_read(const void* map, softcuda_tensor_map* out) {
  sc_tmap_bytes m;
  unsigned i;
  memcpy(&m, map, sizeof m);
  if (m.magic != SC_TMAP_MAGIC) return 0;
  memset(out, 0, sizeof *out);
  out->type = m.type;
  out->rank = m.rank;
  out->element_bytes = m.element_bytes;
  out->interleave = m.interleave;
  out->swizzle = m.swizzle;
  out->l2_promotion = m.l2_promotion;
  out->oob_fill = m.oob_fill;
  out->address = m.address;
  for (i = 0; i < m.rank && i < 5; ++i) {
    out->dims[i] = m.dims[i];
    out->strides[i] = i ? m.strides[i - 1] : m.element_bytes;
    out->box[i] = m.box[i];
    out->element_strides[i] = m.element_strides[i];
  }
  return 1;
}
