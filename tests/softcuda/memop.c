/* memop.c - stream memory operations: cuStreamWaitValue32/64, cuStreamWriteValue32/64 and
 * cuStreamBatchMemOp, and the device address of mapped pinned host memory
 * (cuMemHostGetDevicePointer). Part of softcuda.c; included before graph.c, which adds
 * the batch memop graph nodes on top of the op defined here.
 *
 * Model
 *   - Every call enqueues ONE op holding a checked copy of its CUstreamBatchMemOpParams
 *     (a single wait or write is a batch of one). Captured, it becomes a batch memop node.
 *   - A write is an atomic store (sequentially consistent: the default memory barrier),
 *     followed by a broadcast of sc.cv so that parked waiters look at once.
 *   - A wait parks the stream's worker on sc.cv with a short timeout: writes from streams
 *     wake it at once, stores from host threads (plain stores to mapped pinned memory) are
 *     seen at the next poll, 20 us growing to 200 us while nothing happens.
 *   - Addresses are checked at the call: aligned (4 / 8 bytes), inside one live device,
 *     managed or pool allocation of the stream's device (or a peer's, with peer access), an
 *     opened IPC handle, VMM memory the stream's device has access to (cuMemSetAccess), or
 *     inside pinned host memory allocated or registered with DEVICEMAP (and PORTABLE when
 *     the stream belongs to another context). At run time memory freed in between is an
 *     illegal address (the context is poisoned).
 *   - A wait re-reads the memory at every poll, so a store from another process (to a
 *     MAP_SHARED mapping both registered, or to VMM / IPC memory both mapped) meets it
 *     within the poll interval.
 *   - Context teardown with a stream parked on a wait nothing can meet any more releases
 *     it (and whatever queued behind it) and reports it as a leak; at exit, streams still
 *     parked are reported too (SOFTCUDA_LEAKS=fatal fails the process for either).
 *   - SOFTCUDA_NO_MEMOPS=1: the 64-bit operations and WAIT_VALUE_NOR are unsupported
 *     (their attributes read 0, the calls return CUDA_ERROR_NOT_SUPPORTED); the 32-bit
 *     ones stay, as they are always there in CUDA 12.
 */

/* ---- mapped pinned host memory -------------------------------------------------------- */

/* Pinned host memory, allocated (cuMemHostAlloc) or registered (cuMemHostRegister), is
 * device-visible only when mapped (DEVICEMAP); its device address is the host address
 * (unified addressing). Flags must be 0. */
CUresult CUDAAPI sc_cuMemHostGetDevicePointer(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  sc_ctx* c;
  sc_alloc* a;
  CUresult r;
  SC_ENTER(cuMemHostGetDevicePointer);
  if (!pdptr || !p || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) {
    a = sc_alloc_find((uintptr_t)p);
    if (!a || a->type != SC_MEM_HOST)
      r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                       "cuMemHostGetDevicePointer(%p): not in live pinned host memory (allocated or registered)", p);
    else if (!(a->flags & CU_MEMHOSTALLOC_DEVICEMAP))
      r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                       "cuMemHostGetDevicePointer(%p): #%llu was not allocated or registered with DEVICEMAP", p, a->id);
    else
      *pdptr = (CUdeviceptr)(uintptr_t)p;
  }
  SC_UNLOCK();
  return r;
}

/* ---- checks at the call ---------------------------------------------------------------- */

/* The payload of a memop op: the operations, checked for context ctx. */
typedef struct sc_memops {
  uint64_t ctx; /* handle of the context the addresses were checked for */
  unsigned count;
  CUstreamBatchMemOpParams ops[1]; /* count of them */
} sc_memops;

/* What a parked worker waits for (on its stack; s->parked points at it while parked). */
typedef struct sc_park {
  const char* what;
  uint64_t addr;
  uint64_t value;
  unsigned cmp;
  int wide;
} sc_park;

static int sc_memop_is_wide(CUstreamBatchMemOpType t) {
  return t == CU_STREAM_MEM_OP_WAIT_VALUE_64 || t == CU_STREAM_MEM_OP_WRITE_VALUE_64;
}

static int sc_ctx_has_peer_on(const sc_ctx* c, int dev) {
  int i;
  for (i = 0; i < c->npeers; ++i) {
    sc_obj* o = sc_obj_lookup(c->peers[i], SC_K_CTX);
    if (o && ((sc_ctx*)o)->dev == dev) return 1;
  }
  return 0;
}

/* addr must be width-aligned device-visible memory for context c. Under sc.mu. */
static CUresult sc_memop_check_addr(const char* what, CUdeviceptr addr, size_t width, const sc_ctx* c) {
  sc_alloc* a = NULL;
  CUresult r;
  if (addr % width)
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                        "%s: address 0x%llx is not %zu-byte aligned", what, (unsigned long long)addr, width);
  if (!sc_alloc_find((uintptr_t)addr))
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                        "%s: address 0x%llx is not device-visible memory (no live allocation holds it)", what,
                        (unsigned long long)addr);
  r = sc_check_range((uintptr_t)addr, width, 1, &a);
  if (r != CUDA_SUCCESS) return r;
  if (a->type == SC_MEM_HOST) {
    if (!(a->flags & CU_MEMHOSTALLOC_DEVICEMAP))
      return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                          "%s: address 0x%llx is pinned host memory (#%llu) not mapped for the device: allocate or "
                          "register it with DEVICEMAP",
                          what, (unsigned long long)addr, a->id);
    if (!(a->flags & CU_MEMHOSTALLOC_PORTABLE) && a->ctx != c)
      return sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_VALUE,
                          "%s: address 0x%llx is pinned host memory (#%llu) of another context, allocated or "
                          "registered without PORTABLE",
                          what, (unsigned long long)addr, a->id);
    return CUDA_SUCCESS;
  }
  if (a->origin == SC_ORIGIN_VMM) { /* mapped memory: the devices cuMemSetAccess named */
    if (c->dev < 32 && (a->access_devs >> c->dev & 1u)) return CUDA_SUCCESS;
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                        "%s: address 0x%llx is mapped memory (cuMemMap) that device %d was given no access to "
                        "(cuMemSetAccess)",
                        what, (unsigned long long)addr, c->dev);
  }
  if (a->dev != c->dev && !sc_ctx_has_peer_on(c, a->dev))
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                        "%s: address 0x%llx is memory of device %d, which device %d has no peer access to", what,
                        (unsigned long long)addr, a->dev, c->dev);
  return CUDA_SUCCESS;
}

/* Whether a 64-bit operation or WAIT_VALUE_NOR may be used (the device attributes). */
static CUresult sc_memop_supported(const char* what, const char* feature) {
  if (!sc.no_memops) return CUDA_SUCCESS;
  if (sc.verbose) fprintf(stderr, "softcuda: %s: %s is off (SOFTCUDA_NO_MEMOPS)\n", what, feature);
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* One operation, for context c. Under sc.mu. */
static CUresult sc_memop_check(const char* what, const CUstreamBatchMemOpParams* m, const sc_ctx* c) {
  CUresult r;
  switch (m->operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
      unsigned cmp = m->waitValue.flags & ~(unsigned)CU_STREAM_WAIT_VALUE_FLUSH;
      if (cmp > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
      /* CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES reads 0 */
      if (m->waitValue.flags & CU_STREAM_WAIT_VALUE_FLUSH) return CUDA_ERROR_NOT_SUPPORTED;
      if (sc_memop_is_wide(m->operation) && (r = sc_memop_supported(what, "64-bit memops")) != CUDA_SUCCESS) return r;
      if (cmp == CU_STREAM_WAIT_VALUE_NOR && (r = sc_memop_supported(what, "WAIT_VALUE_NOR")) != CUDA_SUCCESS) return r;
      return sc_memop_check_addr(what, m->waitValue.address, sc_memop_is_wide(m->operation) ? 8 : 4, c);
    }
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      /* CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER "is not supported in the v2 API" */
      if (m->writeValue.flags != CU_STREAM_WRITE_VALUE_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
      if (sc_memop_is_wide(m->operation) && (r = sc_memop_supported(what, "64-bit memops")) != CUDA_SUCCESS) return r;
      return sc_memop_check_addr(what, m->writeValue.address, sc_memop_is_wide(m->operation) ? 8 : 4, c);
    case CU_STREAM_MEM_OP_BARRIER:
      return m->memoryBarrier.flags <= CU_STREAM_MEMORY_BARRIER_TYPE_GPU ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      if (m->flushRemoteWrites.flags != 0) return CUDA_ERROR_INVALID_VALUE;
      return CUDA_ERROR_NOT_SUPPORTED; /* CAN_FLUSH_REMOTE_WRITES reads 0 */
  }
  return CUDA_ERROR_INVALID_VALUE;
}

/* Copies and checks a batch for context c; *out is the payload (caller frees). Under sc.mu. */
static CUresult sc_memops_build(const char* what, unsigned count, const CUstreamBatchMemOpParams* ops, const sc_ctx* c,
                                sc_memops** out) {
  sc_memops* b;
  unsigned i;
  *out = NULL;
  if (count == 0 || !ops) return CUDA_ERROR_INVALID_VALUE;
  for (i = 0; i < count; ++i) {
    CUresult r = sc_memop_check(what, &ops[i], c);
    if (r != CUDA_SUCCESS) return r;
  }
  b = (sc_memops*)sc_xcalloc(1, sizeof(sc_memops) + (size_t)(count - 1) * sizeof(CUstreamBatchMemOpParams));
  b->ctx = SC_HANDLE(c);
  b->count = count;
  memcpy(b->ops, ops, (size_t)count * sizeof(CUstreamBatchMemOpParams));
  *out = b;
  return CUDA_SUCCESS;
}

/* Re-checks a batch built earlier (graph launch: memory may have been freed since). */
static CUresult sc_memops_recheck(const sc_memops* b) {
  sc_obj* o = sc_obj_lookup(b->ctx, SC_K_CTX);
  unsigned i;
  if (!o) return CUDA_ERROR_INVALID_VALUE; /* its context is gone */
  for (i = 0; i < b->count; ++i) {
    CUresult r = sc_memop_check("batch memop node", &b->ops[i], (sc_ctx*)o);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

/* ---- running ------------------------------------------------------------------------------ */

/* Whether [addr, addr+width) is still live memory (under sc.mu). */
static int sc_memop_live(uint64_t addr, size_t width) {
  sc_alloc* a = sc_alloc_find((uintptr_t)addr);
  return a && width <= a->size && (uintptr_t)addr - a->base <= a->size - width;
}

static uint64_t sc_memop_load(uint64_t addr, int wide) {
  if (wide) return __atomic_load_n((uint64_t*)(uintptr_t)addr, __ATOMIC_ACQUIRE);
  return __atomic_load_n((uint32_t*)(uintptr_t)addr, __ATOMIC_ACQUIRE);
}

/* The wait condition, in the width of the operation (GEQ is cyclic: it ignores wrap). */
static int sc_memop_met(uint64_t cur, uint64_t value, unsigned cmp, int wide) {
  uint64_t mask = wide ? ~(uint64_t)0 : 0xffffffffu;
  cur &= mask;
  value &= mask;
  switch (cmp) {
    case CU_STREAM_WAIT_VALUE_GEQ: return wide ? (int64_t)(cur - value) >= 0 : (int32_t)(uint32_t)(cur - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return cur == value;
    case CU_STREAM_WAIT_VALUE_AND: return (cur & value) != 0;
    default: return (~(cur | value) & mask) != 0; /* NOR */
  }
}

static const char* sc_memop_cmp_name(unsigned cmp) {
  static const char* const names[] = {"GEQ", "EQ", "AND", "NOR"};
  return names[cmp & 3];
}

/* One line naming the stream, the address and the value a parked wait waits for. */
static void sc_memop_print_park(FILE* f, const sc_stream* s, const sc_park* k, const char* when) {
  char name[64];
  if (s->h.id)
    snprintf(name, sizeof name, "stream %p", (void*)(uintptr_t)sc_handle_of(&s->h));
  else
    snprintf(name, sizeof name, "a destroyed stream");
  fprintf(f,
          "softcuda: leak: %s (context %p, device %d) %s parked on %s: waiting for the %d-bit value at 0x%llx "
          "%s %llu (it holds %llu)\n",
          name, (void*)(uintptr_t)sc_handle_of(&s->ctx->h), s->ctx->dev, when, k->what, k->wide ? 64 : 32,
          (unsigned long long)k->addr, sc_memop_cmp_name(k->cmp), (unsigned long long)k->value,
          (unsigned long long)(sc_memop_live(k->addr, k->wide ? 8 : 4) ? sc_memop_load(k->addr, k->wide) : 0));
}

static void sc_timespec_after_ns(struct timespec* ts, int64_t ns) {
  clock_gettime(CLOCK_REALTIME, ts); /* sc.cv uses the default clock */
  ts->tv_nsec += (long)ns;
  while (ts->tv_nsec >= 1000000000L) {
    ts->tv_nsec -= 1000000000L;
    ts->tv_sec++;
  }
}

/* Parks the worker of s until the wait is met. Under sc.mu. */
static CUresult sc_memop_wait_locked(sc_stream* s, const char* what, const CUstreamBatchMemOpParams* m) {
  sc_park k;
  int64_t pause_ns = 20000;
  int counted = 0; /* in s->ctx->parked_now */
  k.what = what;
  k.addr = m->waitValue.address;
  k.wide = sc_memop_is_wide(m->operation);
  k.value = k.wide ? m->waitValue.value64 : m->waitValue.value;
  k.cmp = m->waitValue.flags & 3u;
  for (;;) {
    struct timespec until;
    if (!sc_memop_live(k.addr, k.wide ? 8 : 4)) {
      s->parked = NULL;
      if (counted) s->ctx->parked_now--;
      return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_ILLEGAL_ADDRESS,
                          "%s: the memory at 0x%llx was freed while the stream waited on it", what,
                          (unsigned long long)k.addr);
    }
    if (sc_memop_met(sc_memop_load(k.addr, k.wide), k.value, k.cmp, k.wide)) break;
    if (s->ctx->sticky != CUDA_SUCCESS) break; /* the context faulted: nothing runs any more */
    if (s->abandon) {                          /* context teardown: this wait can never be met */
      sc_memop_print_park(stderr, s, &k, "was");
      fprintf(stderr, "softcuda: released at the teardown of its context; the work queued behind it is dropped\n");
      sc.leaks++;
      break;
    }
    s->parked = &k;
    if (!counted) {
      counted = 1;
      if (++s->ctx->parked_now > sc.parked_peak) sc.parked_peak = s->ctx->parked_now;
    }
    sc_timespec_after_ns(&until, pause_ns);
    pthread_cond_timedwait(&sc.cv, &sc.mu, &until);
    if (pause_ns < 200000) pause_ns *= 2;
  }
  s->parked = NULL;
  if (counted) s->ctx->parked_now--;
  return CUDA_SUCCESS;
}

static CUresult sc_memop_write_locked(const char* what, const CUstreamBatchMemOpParams* m) {
  int wide = sc_memop_is_wide(m->operation);
  uint64_t addr = m->writeValue.address;
  if (!sc_memop_live(addr, wide ? 8 : 4))
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_ILLEGAL_ADDRESS,
                        "%s: the memory at 0x%llx was freed before the write ran", what, (unsigned long long)addr);
  if (wide)
    __atomic_store_n((uint64_t*)(uintptr_t)addr, m->writeValue.value64, __ATOMIC_SEQ_CST);
  else
    __atomic_store_n((uint32_t*)(uintptr_t)addr, m->writeValue.value, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast(&sc.cv); /* parked waiters look now */
  return CUDA_SUCCESS;
}

/* Runs a batch in order on the stream's worker (or a graph launch's). */
static CUresult sc_run_memops(sc_op* op) {
  const sc_memops* b = (const sc_memops*)op->a;
  CUresult r = CUDA_SUCCESS;
  unsigned i;
  SC_LOCK();
  for (i = 0; i < b->count && r == CUDA_SUCCESS && !op->stream->abandon; ++i) {
    const CUstreamBatchMemOpParams* m = &b->ops[i];
    switch (m->operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      case CU_STREAM_MEM_OP_WAIT_VALUE_64: r = sc_memop_wait_locked(op->stream, op->what, m); break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      case CU_STREAM_MEM_OP_WRITE_VALUE_64: r = sc_memop_write_locked(op->what, m); break;
      default: __atomic_thread_fence(__ATOMIC_SEQ_CST); break; /* barrier */
    }
  }
  SC_UNLOCK();
  return r;
}

static void sc_fini_memops(sc_op* op) { free(op->a); }

/* ---- entry points ------------------------------------------------------------------------------ */

/* Checks, copies and enqueues a batch on hStream (captured: a batch memop node). */
static CUresult sc_memops_enqueue(const char* what, CUstream hStream, unsigned count,
                                  const CUstreamBatchMemOpParams* ops, unsigned flags) {
  sc_ctx* cur;
  sc_stream* s;
  sc_memops* b = NULL;
  CUresult r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&cur);
  if (r == CUDA_SUCCESS) r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS) r = sc_memops_build(what, count, ops, s->ctx, &b);
  if (r == CUDA_SUCCESS) {
    sc_op* op = sc_op_new(what, sc_run_memops, sc_fini_memops);
    op->a = b;
    sc_submit(s, op);
  }
  SC_UNLOCK();
  return r;
}

static CUresult sc_memop_one(const char* what, CUstream stream, CUstreamBatchMemOpType type, CUdeviceptr addr,
                             cuuint64_t value, unsigned int flags) {
  CUstreamBatchMemOpParams m;
  memset(&m, 0, sizeof m);
  m.operation = type;
  if (type == CU_STREAM_MEM_OP_WAIT_VALUE_32 || type == CU_STREAM_MEM_OP_WAIT_VALUE_64) {
    m.waitValue.address = addr;
    if (type == CU_STREAM_MEM_OP_WAIT_VALUE_64)
      m.waitValue.value64 = value;
    else
      m.waitValue.value = (cuuint32_t)value;
    m.waitValue.flags = flags;
  } else {
    m.writeValue.address = addr;
    if (type == CU_STREAM_MEM_OP_WRITE_VALUE_64)
      m.writeValue.value64 = value;
    else
      m.writeValue.value = (cuuint32_t)value;
    m.writeValue.flags = flags;
  }
  return sc_memops_enqueue(what, stream, 1, &m, 0);
}

CUresult CUDAAPI sc_cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  SC_ENTER(cuStreamWaitValue32);
  return sc_memop_one("cuStreamWaitValue32", stream, CU_STREAM_MEM_OP_WAIT_VALUE_32, addr, value, flags);
}

CUresult CUDAAPI sc_cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  SC_ENTER(cuStreamWaitValue64);
  return sc_memop_one("cuStreamWaitValue64", stream, CU_STREAM_MEM_OP_WAIT_VALUE_64, addr, value, flags);
}

CUresult CUDAAPI sc_cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  SC_ENTER(cuStreamWriteValue32);
  return sc_memop_one("cuStreamWriteValue32", stream, CU_STREAM_MEM_OP_WRITE_VALUE_32, addr, value, flags);
}

CUresult CUDAAPI sc_cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  SC_ENTER(cuStreamWriteValue64);
  return sc_memop_one("cuStreamWriteValue64", stream, CU_STREAM_MEM_OP_WRITE_VALUE_64, addr, value, flags);
}

CUresult CUDAAPI sc_cuStreamBatchMemOp(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* paramArray,
                                       unsigned int flags) {
  SC_ENTER(cuStreamBatchMemOp);
  return sc_memops_enqueue("cuStreamBatchMemOp", stream, count, paramArray, flags);
}

/* ---- teardown and exit ------------------------------------------------------------------------- */

enum { SC_STREAM_IDLE, SC_STREAM_RUNNING, SC_STREAM_STALLED };

/* Idle (drained), stalled (parked on a memop wait, or waiting for a stream that is), or
 * running. Under sc.mu. */
static int sc_stream_state(const sc_stream* s, int depth) {
  if (s->done_seq >= s->enq_seq) return SC_STREAM_IDLE;
  if (s->parked) return SC_STREAM_STALLED;
  if (s->waiting_on && depth < 16 && sc_stream_state(s->waiting_on, depth + 1) == SC_STREAM_STALLED)
    return SC_STREAM_STALLED;
  return SC_STREAM_RUNNING;
}

/* Before a context's teardown waits for its streams: once nothing in it runs and some of
 * its streams have stayed stalled for a while (nothing left that could meet their waits
 * but host stores, which a destroyed context may not count on), release them. */
static void sc_memop_teardown_locked(sc_ctx* c) {
  int64_t stalled_since = 0;
  for (;;) {
    int running = 0, stalled = 0, i;
    struct timespec until;
    for (i = 0; i < c->nstreams; ++i) {
      int st = sc_stream_state(c->streams[i], 0);
      running += st == SC_STREAM_RUNNING;
      stalled += st == SC_STREAM_STALLED;
    }
    if (!stalled && !running) return;
    if (running || !stalled) {
      stalled_since = 0;
    } else if (!stalled_since) {
      stalled_since = sc_now_ns();
    } else if (sc_now_ns() - stalled_since > 50 * 1000000LL) {
      for (i = 0; i < c->nstreams; ++i)
        if (sc_stream_state(c->streams[i], 0) == SC_STREAM_STALLED) c->streams[i]->abandon = 1;
      pthread_cond_broadcast(&sc.cv);
      return;
    }
    sc_timespec_after_ns(&until, 2000000);
    pthread_cond_timedwait(&sc.cv, &sc.mu, &until);
  }
}

/* Before a context's destruction (under sc.mu, let go while waiting): until no stream of
 * another live context has work left, stalled ones included. A wait longer than a second
 * says once on stderr what it waits for, since nothing may ever meet that wait. */
static void sc_ctx_wait_others_locked(sc_ctx* c) {
  int64_t since = sc_now_ns();
  int told = 0;
  for (;;) {
    sc_stream* busy = NULL;
    sc_ctx* owner = NULL;
    struct timespec until;
    uint64_t k;
    int i;
    for (k = 1; !busy && k <= sc.nobjs; ++k) {
      sc_obj* o = sc.objs[k];
      if (!o || o->kind != SC_K_CTX || (sc_ctx*)o == c) continue;
      for (i = 0; !busy && i < ((sc_ctx*)o)->nstreams; ++i)
        if (sc_stream_state(((sc_ctx*)o)->streams[i], 0) != SC_STREAM_IDLE) {
          busy = ((sc_ctx*)o)->streams[i];
          owner = (sc_ctx*)o;
        }
    }
    if (!busy) return;
    if (!told && sc_now_ns() - since > 1000000000LL) {
      told = 1;
      fprintf(stderr,
              "softcuda: destroying the context of device %d waits for stream %p of device %d, %s (a GPU waits "
              "too: for ever, if nothing meets that wait)\n",
              (int)c->dev, (void*)busy, (int)owner->dev,
              sc_stream_state(busy, 0) == SC_STREAM_STALLED ? "stalled on a value wait" : "still running");
    }
    sc_timespec_after_ns(&until, 2000000);
    pthread_cond_timedwait(&sc.cv, &sc.mu, &until);
  }
}

/* Whether some live context has a stream still running (neither drained nor stalled). */
static int sc_memop_any_running_locked(void) {
  uint64_t k;
  int i;
  for (k = 1; k <= sc.nobjs; ++k) {
    sc_obj* o = sc.objs[k];
    if (!o || o->kind != SC_K_CTX) continue;
    for (i = 0; i < ((sc_ctx*)o)->nstreams; ++i)
      if (sc_stream_state(((sc_ctx*)o)->streams[i], 0) == SC_STREAM_RUNNING) return 1;
  }
  return 0;
}

/* At exit: lists the streams still parked on a wait; returns how many. A wait enqueued
 * just before exit may not have reached its worker yet: streams still running get up to
 * 100 ms to park or drain first. Under sc.mu. */
static size_t sc_memop_report_parked_locked(FILE* f) {
  size_t n = 0;
  uint64_t k;
  int i;
  int64_t until = sc_now_ns() + 100 * 1000000LL;
  while (sc_memop_any_running_locked() && sc_now_ns() < until) {
    struct timespec ts;
    sc_timespec_after_ns(&ts, 1000000);
    pthread_cond_timedwait(&sc.cv, &sc.mu, &ts);
  }
  for (k = 1; k <= sc.nobjs; ++k) {
    sc_obj* o = sc.objs[k];
    sc_ctx* c;
    if (!o || o->kind != SC_K_CTX) continue;
    c = (sc_ctx*)o;
    for (i = 0; i < c->nstreams; ++i) {
      if (!c->streams[i]->parked) continue;
      if (f) sc_memop_print_park(f, c->streams[i], c->streams[i]->parked, "is still");
      n++;
    }
  }
  return n;
}
