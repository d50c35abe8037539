/* stream.c - stream workers, the op queue, the legacy default stream, events, stream
 * waits, host functions and their callback thread. Part of softcuda.c.
 *
 * A graph launch (graph.c) is one sc_op whose run() executes the whole graph on the
 * worker; it is enqueued with sc_submit like any other op. */

static sc_op* sc_op_new(const char* what, CUresult (*run)(sc_op*), void (*fini)(sc_op*)) {
  sc_op* op = (sc_op*)sc_xcalloc(1, sizeof(sc_op));
  op->what = what;
  op->run = run;
  op->fini = fini;
  return op;
}

static void* sc_worker_main(void* arg) {
  sc_stream* s = (sc_stream*)arg;
  /* A name of its own, not its creator's: a test that counts gpuhal's threads by name
   * ("gpuhal-worker" creates the streams) must not count a stream that drains after its
   * destroy, as a GPU's work may. */
  pthread_setname_np(pthread_self(), "softcuda-stream");
  SC_LOCK();
  for (;;) {
    sc_op* op;
    CUresult r = CUDA_SUCCESS;
    int poisoned;
    while (!s->head && !s->stop && !s->destroyed) pthread_cond_wait(&s->cv, &sc.mu);
    if (!s->head) break;
    op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    poisoned = s->ctx->sticky != CUDA_SUCCESS || s->abandon;
    s->running = op;
    SC_UNLOCK();
    /* a poisoned context runs nothing more, nor does a stream whose wait teardown released */
    if (!poisoned && op->run) r = op->run(op);
    SC_LOCK();
    s->running = NULL;
    if (r != CUDA_SUCCESS && s->ctx->sticky == CUDA_SUCCESS) {
      s->ctx->sticky = r;
      if (sc.verbose) fprintf(stderr, "softcuda: %s faulted with %d: context poisoned\n", op->what, (int)r);
    }
    s->done_seq = op->seq;
    if (op->fini) op->fini(op);
    free(op);
    pthread_cond_broadcast(&sc.cv);
  }
  s->exited = 1;
  pthread_cond_broadcast(&sc.cv);
  SC_UNLOCK();
  return NULL;
}

static void sc_stream_free(sc_obj* o) {
  sc_stream* s = (sc_stream*)o;
  pthread_cond_destroy(&s->cv);
  free(s);
}

/* Joins workers of destroyed streams that have drained (under sc.mu). */
static void sc_reap_locked(sc_ctx* c) {
  int i = 0;
  while (i < c->nstreams) {
    sc_stream* s = c->streams[i];
    if (s->exited) {
      pthread_join(s->thread, NULL);
      c->streams[i] = c->streams[--c->nstreams];
      sc_unref(&s->h); /* the worker's reference */
    } else {
      ++i;
    }
  }
}

static sc_stream* sc_stream_new_locked(sc_ctx* c, unsigned flags, int is_null) {
  sc_stream* s = (sc_stream*)sc_xcalloc(1, sizeof(sc_stream));
  pthread_attr_t attr;
  sc_obj_init(&s->h, SC_K_STREAM, c, sc_stream_free);
  s->ctx = c;
  s->flags = flags;
  s->is_null = is_null;
  pthread_cond_init(&s->cv, NULL);
  sc_obj_register(&s->h); /* the handle's reference */
  sc_ref(&s->h);          /* the worker's reference, dropped when it is joined */
  if (c->nstreams == c->cap_streams) {
    int cap = c->cap_streams ? c->cap_streams * 2 : 8;
    sc_stream** n = (sc_stream**)realloc(c->streams, (size_t)cap * sizeof(sc_stream*));
    if (!n) abort();
    c->streams = n;
    c->cap_streams = cap;
  }
  c->streams[c->nstreams++] = s;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, (size_t)1 << 20);
  if (pthread_create(&s->thread, &attr, sc_worker_main, s) != 0) {
    fprintf(stderr, "softcuda: cannot start a stream worker thread\n");
    abort();
  }
  pthread_attr_destroy(&attr);
  s->started = 1;
  return s;
}

/* Stops and joins every worker of c (under sc.mu; its work is already done). */
static void sc_streams_stop_locked(sc_ctx* c) {
  int i;
  for (i = 0; i < c->nstreams; ++i) {
    c->streams[i]->stop = 1;
    pthread_cond_signal(&c->streams[i]->cv);
  }
  for (i = 0; i < c->nstreams; ++i)
    while (!c->streams[i]->exited) pthread_cond_wait(&sc.cv, &sc.mu);
  sc_reap_locked(c);
  c->null_stream = NULL;
}

static sc_stream* sc_null_stream(sc_ctx* c) {
  if (!c->null_stream) c->null_stream = sc_stream_new_locked(c, 0, 1);
  return c->null_stream;
}

static CUresult sc_get_stream(CUstream h, sc_stream** out) {
  sc_obj* o;
  sc_stream* s;
  if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    sc_ctx* c = NULL;
    CUresult r = sc_current_ctx(&c);
    if (r != CUDA_SUCCESS) return r;
    *out = sc_null_stream(c);
    return CUDA_SUCCESS;
  }
  *out = NULL; /* written on every path: callers test the result, not the pointer */
  o = sc_obj_lookup((uint64_t)(uintptr_t)h, SC_K_STREAM);
  if (!o) return sc_bad_handle("stream", (const void*)h);
  s = (sc_stream*)o;
  if (s->ctx->sticky != CUDA_SUCCESS) return s->ctx->sticky;
  *out = s;
  return CUDA_SUCCESS;
}

static void sc_enqueue_raw(sc_stream* s, sc_op* op) {
  op->seq = ++s->enq_seq;
  op->stream = s;
  op->next = NULL;
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  pthread_cond_signal(&s->cv);
}

/* Waits (under sc.mu) on the worker of s until stream t has completed seq; s says what it
 * waits for, so that context teardown can tell a stream stuck behind a parked one. */
static void sc_wait_other_stream_locked(sc_stream* s, sc_stream* t, uint64_t seq) {
  s->waiting_on = t;
  while (t->done_seq < seq && !s->abandon) pthread_cond_wait(&sc.cv, &sc.mu);
  s->waiting_on = NULL;
}

/* Waits on the worker until stream t has completed seq. */
static CUresult sc_run_wait(sc_op* op) {
  SC_LOCK();
  sc_wait_other_stream_locked(op->stream, (sc_stream*)op->a, op->u0);
  SC_UNLOCK();
  return CUDA_SUCCESS;
}

static void sc_fini_wait(sc_op* op) { sc_unref(&((sc_stream*)op->a)->h); }

static void sc_enqueue_wait(sc_stream* s, sc_stream* target, uint64_t seq) {
  sc_op* w = sc_op_new("stream wait", sc_run_wait, sc_fini_wait);
  sc_ref(&target->h);
  w->a = target;
  w->u0 = seq;
  sc_enqueue_raw(s, w);
}

/* A GPU holds only so much work per stream: past SC_STREAM_DEPTH ops not done, CUDA blocks
 * the enqueueing thread until the stream drains, for ever when the stream is stalled on a
 * wait only that thread would meet (an H200 holds about 1,020 memsets behind an unmet
 * cuStreamWaitValue64). So does softcuda, saying so on stderr after a while. Under sc.mu. */
#define SC_STREAM_DEPTH 1020
static void sc_submit_room_locked(sc_stream* s) {
  int64_t warn_at = sc_now_ns() + 5000000000ll;
  int warned = 0;
  while (s->enq_seq - s->done_seq >= SC_STREAM_DEPTH && s->ctx->sticky == CUDA_SUCCESS && !s->abandon &&
         !s->ctx->dead) {
    struct timespec until; /* sc.cv runs on the realtime clock */
    int64_t wake;
    clock_gettime(CLOCK_REALTIME, &until);
    wake = (int64_t)until.tv_sec * 1000000000ll + until.tv_nsec + 100000000ll;
    if (!warned && sc_now_ns() >= warn_at) {
      fprintf(stderr,
              "softcuda: an enqueue on stream %p has waited 5 s for room: %llu ops not done%s (a GPU blocks "
              "here too)\n",
              (void*)s, (unsigned long long)(s->enq_seq - s->done_seq),
              s->parked || s->waiting_on ? ", the stream stalled on a wait" : "");
      warned = 1;
    }
    until.tv_sec = (time_t)(wake / 1000000000ll);
    until.tv_nsec = (long)(wake % 1000000000ll);
    pthread_cond_timedwait(&sc.cv, &sc.mu, &until);
  }
}

static void sc_submit(sc_stream* s, sc_op* op) {
  sc_ctx* c = s->ctx;
  int i;
  if (s->capture && sc_graph_capture_op(s, op)) return;
  sc_submit_room_locked(s);
  /* the legacy default stream and blocking streams wait for each other */
  if (s->is_null) {
    for (i = 0; i < c->nstreams; ++i) {
      sc_stream* b = c->streams[i];
      if (b != s && !(b->flags & CU_STREAM_NON_BLOCKING) && b->enq_seq > b->done_seq) sc_enqueue_wait(s, b, b->enq_seq);
    }
  } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && c->null_stream &&
             c->null_stream->enq_seq > c->null_stream->done_seq) {
    sc_enqueue_wait(s, c->null_stream, c->null_stream->enq_seq);
  }
  sc_enqueue_raw(s, op);
}

static void sc_wait_stream_seq(sc_stream* s, uint64_t seq, int spin) {
  if (spin) {
    int64_t until = sc_now_ns() + 50000;
    while (s->done_seq < seq && sc_now_ns() < until) {
      SC_UNLOCK();
      sched_yield();
      SC_LOCK();
    }
  }
  while (s->done_seq < seq) pthread_cond_wait(&sc.cv, &sc.mu);
}

/* ---- streams ------------------------------------------------------------------------ */

CUresult CUDAAPI sc_cuStreamCreate(CUstream* phStream, unsigned int flags) {
  sc_ctx* c;
  CUresult r;
  SC_ENTER(cuStreamCreate);
  if (!phStream) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) {
    sc_stream* s;
    sc_reap_locked(c);
    sc_room_take_locked(c);
    s = sc_stream_new_locked(c, flags, 0);
    *phStream = (CUstream)(uintptr_t)SC_HANDLE(s);
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuStreamDestroy(CUstream hStream) {
  sc_obj* o;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuStreamDestroy);
  SC_LOCK();
  o = sc_obj_lookup((uint64_t)(uintptr_t)hStream, SC_K_STREAM);
  if (!o) {
    r = sc_bad_handle("stream", (const void*)hStream);
  } else {
    sc_stream* s = (sc_stream*)o;
    /* returns at once; queued work still runs, then the worker exits */
    s->destroyed = 1;
    sc_room_give_locked(s->ctx);
    pthread_cond_signal(&s->cv);
    sc_obj_unregister(o);
  }
  SC_UNLOCK();
  return r;
}

static CUresult sc_run_nothing(sc_op* op) {
  (void)op;
  return CUDA_SUCCESS;
}

/* Waits for everything queued on s so far (under sc.mu). */
static CUresult sc_sync_stream_locked(sc_stream* s) {
  int spin = !(s->ctx->flags & CU_CTX_SCHED_BLOCKING_SYNC);
  if (s->is_null) sc_submit(s, sc_op_new("sync marker", sc_run_nothing, NULL)); /* picks up blocking streams */
  sc_wait_stream_seq(s, s->enq_seq, spin);
  sc_pools_release(s->ctx->dev);
  return s->ctx->sticky;
}

CUresult CUDAAPI sc_cuStreamSynchronize(CUstream hStream) {
  sc_stream* s;
  CUresult r;
  SC_ENTER(cuStreamSynchronize);
  SC_UNSAFE_CALL();
  sc_thread()->round_trips++;
  SC_LOCK();
  r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS && s->capture) r = sc_graph_capture_sync_refused(s); /* graph.c hook */
  if (r == CUDA_SUCCESS) r = sc_sync_stream_locked(s);
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuStreamQuery(CUstream hStream) {
  sc_stream* s;
  CUresult r;
  SC_ENTER(cuStreamQuery);
  SC_UNSAFE_CALL();
  SC_LOCK();
  r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS && s->capture) r = sc_graph_capture_sync_refused(s); /* graph.c hook */
  if (r == CUDA_SUCCESS && s->done_seq < s->enq_seq) r = CUDA_ERROR_NOT_READY;
  SC_UNLOCK();
  return r;
}

/* ---- events ------------------------------------------------------------------------- */

static void sc_event_free(sc_obj* o) {
  sc_event* e = (sc_event*)o;
  if (e->rs) sc_unref(&e->rs->h);
  free(e);
}

static CUresult sc_get_event(CUevent h, sc_event** out) {
  sc_obj* o = sc_obj_lookup((uint64_t)(uintptr_t)h, SC_K_EVENT);
  *out = (sc_event*)o; /* NULL on failure: written on every path */
  if (!o) return sc_bad_handle("event", (const void*)h);
  *out = (sc_event*)o;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuEventCreate(CUevent* phEvent, unsigned int flags) {
  sc_ctx* c;
  CUresult r;
  SC_ENTER(cuEventCreate);
  if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS))
    return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) {
    sc_event* e = (sc_event*)sc_xcalloc(1, sizeof(sc_event));
    sc_obj_init(&e->h, SC_K_EVENT, c, sc_event_free);
    e->ctx = c;
    e->flags = flags;
    sc_obj_register(&e->h);
    *phEvent = (CUevent)(uintptr_t)SC_HANDLE(e);
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuEventDestroy(CUevent hEvent) {
  sc_event* e;
  CUresult r;
  SC_ENTER(cuEventDestroy);
  SC_LOCK();
  r = sc_get_event(hEvent, &e);
  if (r == CUDA_SUCCESS) sc_obj_unregister(&e->h); /* a pending record keeps its own reference */
  SC_UNLOCK();
  return r;
}

static CUresult sc_run_record(sc_op* op) {
  sc_event* e = (sc_event*)op->a;
  SC_LOCK();
  if (e->gen == op->u0) {
    e->ts_ns = sc_now_ns();
    e->ts_gen = op->u0;
  }
  SC_UNLOCK();
  return CUDA_SUCCESS;
}

static void sc_fini_record(sc_op* op) { sc_unref(&((sc_event*)op->a)->h); }

/* Records e on s (under sc.mu; e and s already checked). */
static void sc_event_record_locked(sc_event* e, sc_stream* s) {
  sc_op* op = sc_op_new("event record", sc_run_record, sc_fini_record);
  sc_ref(&e->h);
  op->a = e;
  op->u0 = ++e->gen;
  sc_submit(s, op);
  if (op->stream == s) { /* not captured */
    if (e->rs) sc_unref(&e->rs->h);
    sc_ref(&s->h);
    e->rs = s;
    e->rseq = s->enq_seq;
    e->recorded = 1;
  }
}

CUresult CUDAAPI sc_cuEventRecord(CUevent hEvent, CUstream hStream) {
  sc_event* e;
  sc_stream* s;
  sc_ctx* cur;
  CUresult r;
  SC_ENTER(cuEventRecord);
  SC_LOCK();
  r = sc_get_event(hEvent, &e);
  if (r == CUDA_SUCCESS) r = sc_current_ctx(&cur);
  if (r == CUDA_SUCCESS) r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS && e->ctx != s->ctx)
    r = sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_HANDLE,
                     "cuEventRecord: the event and the stream belong to different contexts");
  if (r == CUDA_SUCCESS && cur != s->ctx)
    r = sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_CONTEXT,
                     "cuEventRecord on a stream of context %p while %p is current", (void*)(uintptr_t)SC_HANDLE(s->ctx),
                     (void*)(uintptr_t)SC_HANDLE(cur));
  if (r == CUDA_SUCCESS) sc_event_record_locked(e, s);
  SC_UNLOCK();
  return r;
}

static int sc_event_done(const sc_event* e) { return !e->recorded || e->rs->done_seq >= e->rseq; }

CUresult CUDAAPI sc_cuEventQuery(CUevent hEvent) {
  sc_event* e;
  CUresult r;
  SC_ENTER(cuEventQuery);
  SC_UNSAFE_CALL();
  SC_LOCK();
  r = sc_get_event(hEvent, &e);
  if (r == CUDA_SUCCESS && e->recorded) {
    if (e->rs->ctx->sticky != CUDA_SUCCESS)
      r = e->rs->ctx->sticky;
    else if (!sc_event_done(e))
      r = CUDA_ERROR_NOT_READY;
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuEventSynchronize(CUevent hEvent) {
  sc_event* e;
  CUresult r;
  SC_ENTER(cuEventSynchronize);
  SC_UNSAFE_CALL();
  sc_thread()->round_trips++;
  SC_LOCK();
  r = sc_get_event(hEvent, &e);
  if (r == CUDA_SUCCESS && e->recorded) {
    sc_stream* s = e->rs;
    sc_wait_stream_seq(s, e->rseq, !(e->flags & CU_EVENT_BLOCKING_SYNC));
    r = s->ctx->sticky;
    sc_pools_release(s->ctx->dev);
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  sc_event *a, *b;
  CUresult r;
  SC_ENTER(cuEventElapsedTime);
  if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_event(hStart, &a);
  if (r == CUDA_SUCCESS) r = sc_get_event(hEnd, &b);
  if (r == CUDA_SUCCESS && ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)) r = CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS && (!a->recorded || !b->recorded)) r = CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS && (a->rs->ctx->sticky || b->rs->ctx->sticky))
    r = a->rs->ctx->sticky ? a->rs->ctx->sticky : b->rs->ctx->sticky;
  if (r == CUDA_SUCCESS && (!sc_event_done(a) || !sc_event_done(b))) r = CUDA_ERROR_NOT_READY;
  if (r == CUDA_SUCCESS) *pMilliseconds = (float)((double)(b->ts_ns - a->ts_ns) / 1e6);
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int flags) {
  sc_stream* s;
  sc_event* e;
  CUresult r;
  SC_ENTER(cuStreamWaitEvent);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS) r = sc_get_event(hEvent, &e);
  /* waits for exactly the record in force now; a never-recorded event is no wait at all */
  if (r == CUDA_SUCCESS && sc_graph_capture_wait(s, e, &r)) {
    /* graph.c hook: a fork or join inside a stream capture (nothing to enqueue) */
  } else if (r == CUDA_SUCCESS && e->recorded && e->rs->done_seq < e->rseq) {
    sc_op* w = sc_op_new("stream wait event", sc_run_wait, sc_fini_wait);
    sc_ref(&e->rs->h);
    w->a = e->rs;
    w->u0 = e->rseq;
    w->b = e; /* graph.c: the event, for capture */
    sc_submit(s, w);
  }
  SC_UNLOCK();
  return r;
}

/* ---- host functions ----------------------------------------------------------------- */

typedef struct sc_cb_job {
  struct sc_cb_job* next;
  CUhostFn fn;
  void* data;
  int done;
} sc_cb_job;

static void* sc_callback_main(void* arg) {
  pthread_setname_np(pthread_self(), "softcuda-host");
  (void)arg;
  sc_thread()->in_callback = 1; /* every CUDA call from here is refused */
  SC_LOCK();
  for (;;) {
    sc_cb_job* j;
    while (!sc.cb_head) pthread_cond_wait(&sc.cb_cv, &sc.mu);
    j = sc.cb_head;
    sc.cb_head = j->next;
    if (!sc.cb_head) sc.cb_tail = NULL;
    SC_UNLOCK();
    j->fn(j->data);
    SC_LOCK();
    j->done = 1;
    pthread_cond_broadcast(&sc.cv);
  }
  return NULL;
}

/* Runs on the stream's worker: hands the function to the callback thread and waits, so
 * the stream does not move on before the callback returned. */
static CUresult sc_run_host_fn(sc_op* op) {
  sc_cb_job job;
  job.next = NULL;
  memcpy(&job.fn, &op->u0, sizeof job.fn);
  job.data = op->a;
  job.done = 0;
  SC_LOCK();
  if (!sc.cb_started) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_cond_init(&sc.cb_cv, NULL);
    if (pthread_create(&sc.cb_thread, &attr, sc_callback_main, NULL) != 0) abort();
    pthread_attr_destroy(&attr);
    sc.cb_started = 1;
  }
  if (sc.cb_tail)
    sc.cb_tail->next = &job;
  else
    sc.cb_head = &job;
  sc.cb_tail = &job;
  pthread_cond_signal(&sc.cb_cv);
  while (!job.done) pthread_cond_wait(&sc.cv, &sc.mu);
  SC_UNLOCK();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  sc_stream* s;
  CUresult r;
  sc_ctx* cur;
  SC_ENTER(cuLaunchHostFunc);
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&cur);
  if (r == CUDA_SUCCESS) r = sc_get_stream(hStream, &s);
  if (r == CUDA_SUCCESS) {
    sc_op* op = sc_op_new("host function", sc_run_host_fn, NULL);
    memcpy(&op->u0, &fn, sizeof fn);
    op->a = userData;
    sc_submit(s, op);
  }
  SC_UNLOCK();
  return r;
}

/* ---- softnccl hook: softcuda_stream_enqueue (see softcuda.h) ------------------------- */
typedef int (*sc_ext_run_fn)(void* payload);
typedef void (*sc_ext_fini_fn)(void* payload);

static CUresult sc_run_ext(sc_op* op) {
  sc_ext_run_fn run;
  memcpy(&run, &op->u0, sizeof run);
  return (CUresult)run(op->a);
}

static void sc_fini_ext(sc_op* op) {
  sc_ext_fini_fn fini;
  memcpy(&fini, &op->u1, sizeof fini);
  if (fini) fini(op->a);
}

SOFTCUDA_API int softcuda_stream_enqueue(void* stream, const char* what, int (*run)(void* payload),
                                         void (*fini)(void* payload), void* payload) {
  sc_stream* s;
  CUresult r;
  if (!run) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_get_stream((CUstream)stream, &s);
  if (r == CUDA_SUCCESS) {
    sc_op* op = sc_op_new(what ? what : "external op", sc_run_ext, sc_fini_ext);
    memcpy(&op->u0, &run, sizeof run);
    memcpy(&op->u1, &fini, sizeof fini);
    op->a = payload;
    sc_submit(s, op);
  }
  SC_UNLOCK();
  return (int)r;
}
/* ---- end softnccl hook ---------------------------------------------------------------- */
