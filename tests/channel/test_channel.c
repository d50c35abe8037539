/* test_channel: NCCL collectives on several devices of one process (ncclCommInitAll),
 * recorded into STREAM and GRAPH command buffers, checked against a CPU reference.
 * CTest runs it on softcuda + softnccl with 4 soft devices; on a GPU machine it runs on
 * every GPU (at least 2) with the real libnccl.so.2. */
#include "test_internals.h"
#include "test_util.h"
#include "test_multi_device_util.h"

#include <pthread.h>

typedef struct ct_s {
  md_fixture_t f;
  int n;
  gpuhal_channel_t* ch[MD_MAX_DEVICES];
  gpuhal_semaphore_t* sem[MD_MAX_DEVICES];
  uint64_t value[MD_MAX_DEVICES];
  gpuhal_buffer_t* send[MD_MAX_DEVICES];
  gpuhal_buffer_t* recv[MD_MAX_DEVICES];
} ct_t;

static int ct_open(ct_t* t) {
  int i;
  memset(t, 0, sizeof(*t));
  if (!md_open(&t->f, 4, 2, NULL)) return 0;
  if (!gpuhal_driver_has_feature(t->f.driver, GPUHAL_FEATURE_NCCL)) {
    fprintf(stderr, "  NCCL is not loaded\n");
    md_close(&t->f);
    return 0;
  }
  t->n = t->f.count;
  fprintf(stderr, "  %d ranks\n", t->n);
  for (i = 0; i < t->n; ++i) {
    gpuhal_status_t s = gpuhal_semaphore_create(t->f.driver, 0, &t->sem[i]);
    if (s) {
      md_print_status("semaphore", s);
      return 0;
    }
  }
  {
    gpuhal_status_t s = gpuhal_channel_create_local(t->f.driver, (uint32_t)t->n, t->f.devices, t->ch);
    if (s) {
      md_print_status("gpuhal_channel_create_local", s);
      return 0;
    }
  }
  return 1;
}

static void ct_free_buffers(ct_t* t) {
  int i;
  for (i = 0; i < t->n; ++i) {
    gpuhal_buffer_release(t->send[i]);
    gpuhal_buffer_release(t->recv[i]);
    t->send[i] = t->recv[i] = NULL;
  }
}

static void ct_close(ct_t* t) {
  int i;
  ct_free_buffers(t);
  for (i = 0; i < t->n; ++i) {
    gpuhal_channel_release(t->ch[i]);
    gpuhal_semaphore_release(t->sem[i]);
  }
  md_close(&t->f);
}

static gpuhal_status_t ct_alloc(ct_t* t, uint64_t send_bytes, uint64_t recv_bytes) {
  int i;
  ct_free_buffers(t);
  for (i = 0; i < t->n; ++i) {
    GPUHAL__RETURN_IF_ERROR(gpuhal_buffer_allocate(t->f.devices[i], GPUHAL_MEMORY_DEVICE, send_bytes, &t->send[i]));
    GPUHAL__RETURN_IF_ERROR(gpuhal_buffer_allocate(t->f.devices[i], GPUHAL_MEMORY_DEVICE, recv_bytes, &t->recv[i]));
  }
  return NULL;
}

/* Records the same collective (with rank-specific fields from `make`) on every rank. */
typedef void (*ct_make_fn)(ct_t* t, int rank, gpuhal_collective_t* c, void* user);

static gpuhal_status_t ct_record_all(ct_t* t, uint32_t flags, ct_make_fn make, void* user, int collectives_per_cb,
                                     gpuhal_command_buffer_t** cbs) {
  int r, k;
  for (r = 0; r < t->n; ++r) {
    GPUHAL__RETURN_IF_ERROR(gpuhal_command_buffer_create(t->f.devices[r], flags, 0, &cbs[r]));
    GPUHAL__RETURN_IF_ERROR(gpuhal_command_buffer_begin(cbs[r]));
    for (k = 0; k < collectives_per_cb; ++k) {
      gpuhal_collective_t c;
      memset(&c, 0, sizeof(c));
      c.root = k; /* `make` may use it as the index of the collective */
      make(t, r, &c, user);
      GPUHAL__RETURN_IF_ERROR(gpuhal_cmd_collective(cbs[r], t->ch[r], &c));
    }
  }
  for (r = 0; r < t->n; ++r) GPUHAL__RETURN_IF_ERROR(gpuhal_command_buffer_end(cbs[r]));
  return NULL;
}

/* Executes cbs[r] on every device at once and waits for all. */
static gpuhal_status_t ct_execute_all(ct_t* t, gpuhal_command_buffer_t** cbs) {
  int r;
  for (r = 0; r < t->n; ++r) {
    uint64_t v = ++t->value[r];
    GPUHAL__RETURN_IF_ERROR(gpuhal_queue_execute(t->f.devices[r], 0, gpuhal_semaphore_list_empty(),
                                                 gpuhal_semaphore_list_one(&t->sem[r], &v), cbs[r], NULL));
  }
  for (r = 0; r < t->n; ++r) GPUHAL__RETURN_IF_ERROR(gpuhal_semaphore_wait(t->sem[r], t->value[r], md_seconds(120)));
  return NULL;
}

static gpuhal_status_t ct_run(ct_t* t, uint32_t flags, ct_make_fn make, void* user, int per_cb) {
  gpuhal_command_buffer_t* cbs[MD_MAX_DEVICES];
  gpuhal_status_t s;
  int r;
  memset(cbs, 0, sizeof(cbs));
  s = ct_record_all(t, flags, make, user, per_cb, cbs);
  if (!s) s = ct_execute_all(t, cbs);
  for (r = 0; r < t->n; ++r) gpuhal_command_buffer_release(cbs[r]);
  return s;
}

static const char* ct_mode_name(uint32_t mode) { return mode == GPUHAL_COMMAND_BUFFER_STREAM ? "STREAM" : "GRAPH"; }

/* ---- all-reduce: every op, every type, against the CPU ---- */
typedef struct ct_reduce_case_s {
  gpuhal_element_type_t type;
  gpuhal_reduction_t op;
  uint64_t count;
} ct_reduce_case_t;

static double ct_input(gpuhal_reduction_t op, int rank, size_t i) {
  if (op == GPUHAL_REDUCTION_PROD) return (double)(1 + (i + (size_t)rank) % 3);
  return (double)(1 + (i % 7) + (size_t)rank * 2);
}

static double ct_reference(gpuhal_reduction_t op, int n, size_t i) {
  double acc = ct_input(op, 0, i);
  int r;
  for (r = 1; r < n; ++r) {
    double x = ct_input(op, r, i);
    switch (op) {
      case GPUHAL_REDUCTION_PROD: acc *= x; break;
      case GPUHAL_REDUCTION_MIN: acc = x < acc ? x : acc; break;
      case GPUHAL_REDUCTION_MAX: acc = x > acc ? x : acc; break;
      default: acc += x; break;
    }
  }
  return op == GPUHAL_REDUCTION_AVG ? acc / n : acc;
}

static void ct_make_all_reduce(ct_t* t, int rank, gpuhal_collective_t* c, void* user) {
  const ct_reduce_case_t* rc = (const ct_reduce_case_t*)user;
  c->kind = GPUHAL_COLLECTIVE_ALL_REDUCE;
  c->type = rc->type;
  c->op = rc->op;
  c->count = rc->count;
  c->send = gpuhal_ref_buffer(t->send[rank], 0);
  c->recv = gpuhal_ref_buffer(t->recv[rank], 0);
  c->root = 0;
}

static int ct_check_all_reduce(ct_t* t, uint32_t mode, const ct_reduce_case_t* rc) {
  uint32_t es = gpuhal_element_type_size(rc->type);
  size_t bytes = (size_t)rc->count * es, i;
  unsigned char* host = (unsigned char*)malloc(bytes);
  int r, ok = 1;
  for (r = 0; r < t->n && ok; ++r) {
    memset(host, 0xEE, bytes);
    TU_CHECK_OK(gpuhal_buffer_read(t->recv[r], 0, host, bytes));
    for (i = 0; i < rc->count; ++i) {
      double want = ct_reference(rc->op, t->n, i), got = md_get(host, rc->type, i);
      if (fabs(got - want) > 1e-6 * fabs(want)) {
        TU_FAIL_AT(__FILE__, __LINE__, "%s all-reduce %s op %d rank %d element %zu: got %g, want %g",
                   ct_mode_name(mode), md_type_name(rc->type), (int)rc->op, r, i, got, want);
        ok = 0;
        break;
      }
    }
  }
  free(host);
  return ok;
}

static void ct_all_reduce_case(ct_t* t, uint32_t mode, const ct_reduce_case_t* rc) {
  uint32_t es = gpuhal_element_type_size(rc->type);
  size_t bytes = (size_t)rc->count * es, i;
  unsigned char* host = (unsigned char*)malloc(bytes);
  int r;
  TU_CHECK_OK(ct_alloc(t, bytes, bytes));
  for (r = 0; r < t->n; ++r) {
    for (i = 0; i < rc->count; ++i) md_set(host, rc->type, i, ct_input(rc->op, r, i));
    TU_CHECK_OK(gpuhal_buffer_write(t->send[r], 0, host, bytes));
  }
  free(host);
  TU_CHECK_OK(ct_run(t, mode, ct_make_all_reduce, (void*)rc, 1));
  ct_check_all_reduce(t, mode, rc);
}

static int ct_is_float(gpuhal_element_type_t type) {
  return type == GPUHAL_ELEMENT_FLOAT16 || type == GPUHAL_ELEMENT_FLOAT32 || type == GPUHAL_ELEMENT_FLOAT64 ||
         type == GPUHAL_ELEMENT_BFLOAT16;
}

static void ct_all_reduce_body(uint32_t mode) {
  ct_t t;
  int type, op;
  if (!ct_open(&t)) TU_SKIP("needs 2+ devices and NCCL");
  for (type = 0; type <= (int)GPUHAL_ELEMENT_BFLOAT16; ++type) {
    for (op = 0; op <= (int)GPUHAL_REDUCTION_AVG; ++op) {
      ct_reduce_case_t rc;
      /* NCCL's integer average truncates; the reference here is exact, so only floats */
      if (op == GPUHAL_REDUCTION_AVG && !ct_is_float((gpuhal_element_type_t)type)) continue;
      rc.type = (gpuhal_element_type_t)type;
      rc.op = (gpuhal_reduction_t)op;
      rc.count = 1001;
      ct_all_reduce_case(&t, mode, &rc);
    }
  }
  {
    /* larger than softnccl's 256 KiB chunk: several rounds */
    ct_reduce_case_t rc;
    rc.type = GPUHAL_ELEMENT_FLOAT32;
    rc.op = GPUHAL_REDUCTION_SUM;
    rc.count = 150000;
    ct_all_reduce_case(&t, mode, &rc);
  }
  ct_close(&t);
}
TU_TEST(all_reduce_stream) { ct_all_reduce_body(GPUHAL_COMMAND_BUFFER_STREAM); }
TU_TEST(all_reduce_graph) { ct_all_reduce_body(GPUHAL_COMMAND_BUFFER_GRAPH); }

/* ---- the other collectives ---- */
#define CT_COUNT 1000u

static float ct_value(int rank, size_t i) { return (float)(rank * 10000 + (int)i); }

static void ct_write_inputs(ct_t* t, size_t elements) {
  float* host = (float*)malloc(elements * sizeof(float));
  size_t i;
  int r;
  for (r = 0; r < t->n; ++r) {
    for (i = 0; i < elements; ++i) host[i] = ct_value(r, i);
    TU_CHECK_OK(gpuhal_buffer_write(t->send[r], 0, host, elements * sizeof(float)));
  }
  free(host);
}

static float* ct_read(gpuhal_buffer_t* buffer, size_t elements) {
  float* host = (float*)malloc(elements * sizeof(float));
  gpuhal_status_t s = gpuhal_buffer_read(buffer, 0, host, elements * sizeof(float));
  if (s) {
    md_print_status("read", s);
    memset(host, 0, elements * sizeof(float));
  }
  return host;
}

static void ct_make_kind(ct_t* t, int rank, gpuhal_collective_t* c, void* user) {
  c->kind = *(const gpuhal_collective_kind_t*)user;
  c->type = GPUHAL_ELEMENT_FLOAT32;
  c->op = GPUHAL_REDUCTION_SUM;
  c->count = CT_COUNT;
  c->send = gpuhal_ref_buffer(t->send[rank], 0);
  c->recv = gpuhal_ref_buffer(t->recv[rank], 0);
  c->root = t->n - 1;
}

static void ct_collectives_body(uint32_t mode) {
  ct_t t;
  gpuhal_collective_kind_t kind;
  size_t i;
  int r, q;
  if (!ct_open(&t)) TU_SKIP("needs 2+ devices and NCCL");
  TU_CHECK_OK(ct_alloc(&t, (uint64_t)CT_COUNT * 4 * (uint64_t)t.n, (uint64_t)CT_COUNT * 4 * (uint64_t)t.n));
  ct_write_inputs(&t, (size_t)CT_COUNT * (size_t)t.n);

  kind = GPUHAL_COLLECTIVE_ALL_GATHER;
  TU_CHECK_OK(ct_run(&t, mode, ct_make_kind, &kind, 1));
  for (r = 0; r < t.n; ++r) {
    float* got = ct_read(t.recv[r], (size_t)CT_COUNT * (size_t)t.n);
    int bad = 0;
    for (q = 0; q < t.n && !bad; ++q)
      for (i = 0; i < CT_COUNT && !bad; ++i) bad = got[(size_t)q * CT_COUNT + i] != ct_value(q, i);
    if (bad) TU_FAIL_AT(__FILE__, __LINE__, "%s all-gather: rank %d wrong", ct_mode_name(mode), r);
    free(got);
  }

  kind = GPUHAL_COLLECTIVE_REDUCE_SCATTER;
  TU_CHECK_OK(ct_run(&t, mode, ct_make_kind, &kind, 1));
  for (r = 0; r < t.n; ++r) {
    float* got = ct_read(t.recv[r], CT_COUNT);
    int bad = 0;
    for (i = 0; i < CT_COUNT && !bad; ++i) {
      float want = 0;
      for (q = 0; q < t.n; ++q) want += ct_value(q, (size_t)r * CT_COUNT + i);
      bad = got[i] != want;
    }
    if (bad) TU_FAIL_AT(__FILE__, __LINE__, "%s reduce-scatter: rank %d wrong", ct_mode_name(mode), r);
    free(got);
  }

  kind = GPUHAL_COLLECTIVE_BROADCAST;
  TU_CHECK_OK(ct_run(&t, mode, ct_make_kind, &kind, 1));
  for (r = 0; r < t.n; ++r) {
    float* got = ct_read(t.recv[r], CT_COUNT);
    int bad = 0;
    for (i = 0; i < CT_COUNT && !bad; ++i) bad = got[i] != ct_value(t.n - 1, i);
    if (bad) TU_FAIL_AT(__FILE__, __LINE__, "%s broadcast: rank %d wrong", ct_mode_name(mode), r);
    free(got);
  }

  kind = GPUHAL_COLLECTIVE_REDUCE;
  TU_CHECK_OK(ct_run(&t, mode, ct_make_kind, &kind, 1));
  {
    float* got = ct_read(t.recv[t.n - 1], CT_COUNT);
    int bad = 0;
    for (i = 0; i < CT_COUNT && !bad; ++i) {
      float want = 0;
      for (q = 0; q < t.n; ++q) want += ct_value(q, i);
      bad = got[i] != want;
    }
    if (bad) TU_FAIL_AT(__FILE__, __LINE__, "%s reduce: root wrong", ct_mode_name(mode));
    free(got);
  }
  ct_close(&t);
}
TU_TEST(collectives_stream) { ct_collectives_body(GPUHAL_COMMAND_BUFFER_STREAM); }
TU_TEST(collectives_graph) { ct_collectives_body(GPUHAL_COMMAND_BUFFER_GRAPH); }

/* ---- send/recv: a ring, each rank's send and recv back to back (one NCCL group) ---- */
static void ct_make_ring(ct_t* t, int rank, gpuhal_collective_t* c, void* user) {
  int index = c->root;
  (void)user;
  c->type = GPUHAL_ELEMENT_FLOAT32;
  c->count = 100000; /* several softnccl chunks: both directions must progress together */
  if (index == 0) {
    c->kind = GPUHAL_COLLECTIVE_SEND;
    c->send = gpuhal_ref_buffer(t->send[rank], 0);
    c->peer = (rank + 1) % t->n;
  } else {
    c->kind = GPUHAL_COLLECTIVE_RECV;
    c->recv = gpuhal_ref_buffer(t->recv[rank], 0);
    c->peer = (rank + t->n - 1) % t->n;
  }
  c->root = 0;
}

static void ct_send_recv_body(uint32_t mode) {
  ct_t t;
  int r;
  size_t i;
  if (!ct_open(&t)) TU_SKIP("needs 2+ devices and NCCL");
  TU_CHECK_OK(ct_alloc(&t, 100000 * 4, 100000 * 4));
  ct_write_inputs(&t, 100000);
  TU_CHECK_OK(ct_run(&t, mode, ct_make_ring, NULL, 2));
  for (r = 0; r < t.n; ++r) {
    float* got = ct_read(t.recv[r], 100000);
    int prev = (r + t.n - 1) % t.n, bad = 0;
    for (i = 0; i < 100000 && !bad; ++i) bad = got[i] != ct_value(prev, i);
    if (bad)
      TU_FAIL_AT(__FILE__, __LINE__, "%s send/recv ring: rank %d got element %zu = %g", ct_mode_name(mode), r, i - 1,
                 (double)got[i - 1]);
    free(got);
  }
  ct_close(&t);
}
TU_TEST(send_recv_ring_stream) { ct_send_recv_body(GPUHAL_COMMAND_BUFFER_STREAM); }
TU_TEST(send_recv_ring_graph) { ct_send_recv_body(GPUHAL_COMMAND_BUFFER_GRAPH); }

/* ---- a REUSABLE graph: all-reduce, barrier, all-reduce of the result; run twice with new
 * inputs, so the captured collectives really run on every launch and in order ---- */
static void ct_graph_reusable_body(uint32_t mode) {
  ct_t t;
  gpuhal_command_buffer_t* cbs[MD_MAX_DEVICES];
  gpuhal_buffer_t* tmp[MD_MAX_DEVICES];
  int r, round;
  size_t i;
  const size_t count = 4096;
  memset(cbs, 0, sizeof(cbs));
  memset(tmp, 0, sizeof(tmp));
  if (!ct_open(&t)) TU_SKIP("needs 2+ devices and NCCL");
  TU_CHECK_OK(ct_alloc(&t, count * 4, count * 4));
  for (r = 0; r < t.n; ++r) {
    gpuhal_collective_t c;
    TU_CHECK_OK(gpuhal_buffer_allocate(t.f.devices[r], GPUHAL_MEMORY_DEVICE, count * 4, &tmp[r]));
    TU_CHECK_OK(gpuhal_command_buffer_create(t.f.devices[r], mode | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cbs[r]));
    TU_CHECK_OK(gpuhal_command_buffer_begin(cbs[r]));
    memset(&c, 0, sizeof(c));
    c.kind = GPUHAL_COLLECTIVE_ALL_REDUCE;
    c.type = GPUHAL_ELEMENT_INT32;
    c.op = GPUHAL_REDUCTION_SUM;
    c.count = count;
    c.send = gpuhal_ref_buffer(t.send[r], 0);
    c.recv = gpuhal_ref_buffer(tmp[r], 0);
    TU_CHECK_OK(gpuhal_cmd_collective(cbs[r], t.ch[r], &c));
    TU_CHECK_OK(gpuhal_cmd_barrier(cbs[r]));
    c.send = gpuhal_ref_buffer(tmp[r], 0);
    c.recv = gpuhal_ref_buffer(t.recv[r], 0);
    c.op = GPUHAL_REDUCTION_MAX;
    TU_CHECK_OK(gpuhal_cmd_collective(cbs[r], t.ch[r], &c));
    TU_CHECK_OK(gpuhal_command_buffer_end(cbs[r]));
  }
  if (mode == GPUHAL_COMMAND_BUFFER_GRAPH) {
    /* with collectives the graph is built at the first execute, on the device worker, where
     * every rank can take part in NCCL's connection setup at once */
    void* graph = NULL;
    TU_CHECK_STATUS(gpuhal_command_buffer_native_graph(cbs[0], &graph), GPUHAL_STATUS_FAILED_PRECONDITION,
                    "first execute");
  }
  for (round = 1; round <= 2; ++round) {
    int32_t* host = (int32_t*)malloc(count * 4);
    for (r = 0; r < t.n; ++r) {
      for (i = 0; i < count; ++i) host[i] = (int32_t)(round * 100 + r + (int)i);
      TU_CHECK_OK(gpuhal_buffer_write(t.send[r], 0, host, count * 4));
    }
    TU_CHECK_OK(ct_execute_all(&t, cbs));
    if (mode == GPUHAL_COMMAND_BUFFER_GRAPH) {
      void* graph = NULL;
      TU_CHECK_OK(gpuhal_command_buffer_native_graph(cbs[0], &graph));
      TU_CHECK(graph != NULL);
    }
    for (r = 0; r < t.n; ++r) {
      int bad = 0;
      TU_CHECK_OK(gpuhal_buffer_read(t.recv[r], 0, host, count * 4));
      for (i = 0; i < count && !bad; ++i) {
        int32_t want = 0;
        int q;
        for (q = 0; q < t.n; ++q) want += (int32_t)(round * 100 + q + (int)i);
        bad = host[i] != want;
      }
      if (bad) TU_FAIL_AT(__FILE__, __LINE__, "%s reusable round %d rank %d wrong", ct_mode_name(mode), round, r);
    }
    free(host);
  }
  for (r = 0; r < t.n; ++r) {
    gpuhal_command_buffer_release(cbs[r]);
    gpuhal_buffer_release(tmp[r]);
  }
  ct_close(&t);
}
TU_TEST(reusable_graph_two_steps) { ct_graph_reusable_body(GPUHAL_COMMAND_BUFFER_GRAPH); }
TU_TEST(reusable_stream_two_steps) { ct_graph_reusable_body(GPUHAL_COMMAND_BUFFER_STREAM); }

/* ---- a free on one device while its collective waits for a peer ----
 * cuMemFree waits for the work of its context, here rank 0's all-reduce, which waits for
 * rank 1's part. A free on rank 1's device meanwhile (its worker retiring earlier work does
 * that, as does an application thread) must not wait for rank 0's free: it once did, on a
 * driver-wide lock held across the call, and rank 1's part then never came (a hang on a
 * GPU; softnccl's timeout here, as CI saw once in a few hundred runs). */
typedef struct ct_free_arg_s {
  gpuhal_buffer_t* buffer;
  int done; /* atomic */
} ct_free_arg_t;

static void* ct_free_thread(void* p) {
  ct_free_arg_t* arg = (ct_free_arg_t*)p;
  gpuhal_buffer_release(arg->buffer);
  __atomic_store_n(&arg->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Polls `arg->done` for up to `ms` milliseconds. */
static int ct_wait_done(ct_free_arg_t* arg, int ms) {
  int i;
  for (i = 0; i < ms && !__atomic_load_n(&arg->done, __ATOMIC_ACQUIRE); ++i) tu_sleep_ns(1000000);
  return __atomic_load_n(&arg->done, __ATOMIC_ACQUIRE);
}

TU_TEST(free_while_a_collective_waits_for_a_peer) {
  ct_t t;
  gpuhal_command_buffer_t* cbs[MD_MAX_DEVICES];
  ct_reduce_case_t rc;
  ct_free_arg_t first, second;
  pthread_t first_thread, second_thread;
  int r, round;
  if (!ct_open(&t)) TU_SKIP("needs 2+ devices and NCCL");
  rc.type = GPUHAL_ELEMENT_FLOAT32;
  rc.op = GPUHAL_REDUCTION_SUM;
  rc.count = 1001;
  for (round = 0; round < 3; ++round) {
    TU_CHECK_OK(ct_alloc(&t, rc.count * 4, rc.count * 4));
    {
      float host[1001];
      size_t i;
      for (r = 0; r < t.n; ++r) {
        for (i = 0; i < rc.count; ++i) host[i] = (float)ct_input(rc.op, r, i);
        TU_CHECK_OK(gpuhal_buffer_write(t.send[r], 0, host, sizeof(host)));
      }
    }
    memset(cbs, 0, sizeof(cbs));
    memset(&first, 0, sizeof(first));
    memset(&second, 0, sizeof(second));
    TU_CHECK_OK(gpuhal_buffer_allocate(t.f.devices[0], GPUHAL_MEMORY_DEVICE, 4096, &first.buffer));
    TU_CHECK_OK(gpuhal_buffer_allocate(t.f.devices[1], GPUHAL_MEMORY_DEVICE, 4096, &second.buffer));
    TU_CHECK_OK(ct_record_all(&t, GPUHAL_COMMAND_BUFFER_STREAM, ct_make_all_reduce, &rc, 1, cbs));
    /* Rank 0 first (the first round also connects the communicators, all ranks at once). */
    if (round > 0) {
      uint64_t v = ++t.value[0];
      TU_CHECK_OK(gpuhal_queue_execute(t.f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                       gpuhal_semaphore_list_one(&t.sem[0], &v), cbs[0], NULL));
      tu_sleep_ns(20000000); /* its all-reduce is on the GPU, waiting for the others */
      TU_REQUIRE(pthread_create(&first_thread, NULL, ct_free_thread, &first) == 0);
      tu_sleep_ns(20000000); /* that free waits for the all-reduce */
      TU_REQUIRE(pthread_create(&second_thread, NULL, ct_free_thread, &second) == 0);
      if (!ct_wait_done(&second, 5000))
        TU_FAIL_AT(__FILE__, __LINE__,
                   "round %d: a free on device 1 waited for device 0's free, which waits for "
                   "device 1's part of the all-reduce",
                   round);
      for (r = 1; r < t.n; ++r) {
        uint64_t w = ++t.value[r];
        TU_CHECK_OK(gpuhal_queue_execute(t.f.devices[r], 0, gpuhal_semaphore_list_empty(),
                                         gpuhal_semaphore_list_one(&t.sem[r], &w), cbs[r], NULL));
      }
      for (r = 0; r < t.n; ++r) TU_CHECK_OK(gpuhal_semaphore_wait(t.sem[r], t.value[r], md_seconds(120)));
      TU_CHECK(ct_wait_done(&first, 120000));
      pthread_join(first_thread, NULL);
      pthread_join(second_thread, NULL);
    } else {
      TU_CHECK_OK(ct_execute_all(&t, cbs));
      gpuhal_buffer_release(first.buffer);
      gpuhal_buffer_release(second.buffer);
    }
    for (r = 0; r < t.n; ++r) gpuhal_command_buffer_release(cbs[r]);
    ct_check_all_reduce(&t, GPUHAL_COMMAND_BUFFER_STREAM, &rc);
  }
  ct_close(&t);
}

/* Every rank's collective is queued behind a gate semaphore that is then failed (round 0)
 * or released by the application with nothing to signal it (round 1), not signalled: every
 * rank's signal fails with the cause, none waits for ever. Before, on the memop path, one
 * rank's execute could already be issued behind a GPU wait (its collective then ran when the
 * failure released that wait) while another's failed on the host: the first waited in NCCL
 * for a peer that never came. Collectives now wait on the host until their values are
 * reached (or failed). The channel works afterwards. */
static void ct_failed_gate_body(uint32_t mode) {
  ct_t t;
  ct_reduce_case_t rc;
  int r, round;
  if (!ct_open(&t)) TU_SKIP("needs 2+ devices and NCCL");
  rc.type = GPUHAL_ELEMENT_FLOAT32;
  rc.op = GPUHAL_REDUCTION_SUM;
  rc.count = 256;
  TU_CHECK_OK(ct_alloc(&t, rc.count * 4, rc.count * 4));
  for (round = 0; round < 2; ++round) {
    gpuhal_command_buffer_t* cbs[MD_MAX_DEVICES];
    gpuhal_semaphore_t* gate = NULL;
    uint64_t one = 1;
    memset(cbs, 0, sizeof(cbs));
    TU_CHECK_OK(gpuhal_semaphore_create(t.f.driver, 0, &gate));
    TU_CHECK_OK(ct_record_all(&t, mode, ct_make_all_reduce, &rc, 1, cbs));
    for (r = 0; r < t.n; ++r) {
      float host[256];
      uint64_t v = ++t.value[r];
      memset(host, 0, sizeof(host));
      /* A synchronous copy between the executes, as an application's setup would do. */
      TU_CHECK_OK(gpuhal_buffer_write(t.send[r], 0, host, sizeof(host)));
      TU_CHECK_OK(gpuhal_queue_execute(t.f.devices[r], 0, gpuhal_semaphore_list_one(&gate, &one),
                                       gpuhal_semaphore_list_one(&t.sem[r], &v), cbs[r], NULL));
    }
    if (round == 0) {
      gpuhal_semaphore_fail(gate, gpuhal_status_make(GPUHAL_STATUS_ABORTED, "the producer failed"));
    } else {
      gpuhal_semaphore_release(gate);
      gate = NULL;
    }
    for (r = 0; r < t.n; ++r) {
      gpuhal_status_t st = gpuhal_semaphore_wait(t.sem[r], t.value[r], md_seconds(30));
      if (gpuhal_status_code(st) != GPUHAL_STATUS_ABORTED)
        TU_FAIL_AT(__FILE__, __LINE__, "%s round %d rank %d: %s", ct_mode_name(mode), round, r,
                   st ? gpuhal_status_message(st) : "OK");
      gpuhal_status_free(st);
      gpuhal_command_buffer_release(cbs[r]);
    }
    gpuhal_semaphore_release(gate);
    /* The failed semaphores are replaced for what follows. */
    for (r = 0; r < t.n; ++r) {
      gpuhal_semaphore_release(t.sem[r]);
      t.sem[r] = NULL;
      t.value[r] = 0;
      TU_CHECK_OK(gpuhal_semaphore_create(t.f.driver, 0, &t.sem[r]));
    }
  }
  ct_all_reduce_case(&t, mode, &rc);
  ct_close(&t);
}
TU_TEST(a_failed_gate_fails_every_rank_stream) { ct_failed_gate_body(GPUHAL_COMMAND_BUFFER_STREAM); }
TU_TEST(a_failed_gate_fails_every_rank_graph) { ct_failed_gate_body(GPUHAL_COMMAND_BUFFER_GRAPH); }

/* ---- argument checks ---- */
/* Raw NCCL, as an application drives several GPUs from one thread: every rank's first
 * collective in one ncclGroupStart/End. Real NCCL connects the ranks of a group together;
 * softnccl must too (bench_multi_gpu's raw reference does exactly this). */
TU_TEST(raw_group_of_all_ranks_from_one_thread) {
  ct_t t;
  const gpuhal__nccl_symbols_t* nccl;
  const gpuhal__cuda_symbols_t* cu;
  ncclComm_t comms[MD_MAX_DEVICES];
  int ordinals[MD_MAX_DEVICES];
  CUcontext before = NULL;
  const size_t count = 1024;
  int32_t host[1024];
  int r;
  size_t i;
  if (!ct_open(&t)) TU_SKIP("needs 2+ devices and NCCL");
  nccl = &t.f.driver->nccl;
  cu = t.f.devices[0]->cu;
  TU_CHECK_OK(ct_alloc(&t, count * 4, count * 4));
  for (r = 0; r < t.n; ++r) {
    for (i = 0; i < count; ++i) host[i] = (int32_t)(r + 1);
    TU_CHECK_OK(gpuhal_buffer_write(t.send[r], 0, host, count * 4));
    ordinals[r] = t.f.devices[r]->ordinal;
  }
  TU_CHECK(cu->cuCtxGetCurrent(&before) == CUDA_SUCCESS);
  TU_CHECK(nccl->ncclCommInitAll(comms, t.n, ordinals) == ncclSuccess);
  TU_CHECK(nccl->ncclGroupStart() == ncclSuccess);
  for (r = 0; r < t.n; ++r)
    TU_CHECK(nccl->ncclAllReduce((const void*)(uintptr_t)t.send[r]->address, (void*)(uintptr_t)t.recv[r]->address,
                                 count, ncclInt32, ncclSum, comms[r], t.f.devices[r]->streams[0]) == ncclSuccess);
  TU_CHECK(nccl->ncclGroupEnd() == ncclSuccess);
  for (r = 0; r < t.n; ++r) {
    CUcontext popped;
    int bad = 0;
    TU_CHECK(cu->cuCtxPushCurrent(t.f.devices[r]->context) == CUDA_SUCCESS);
    TU_CHECK(cu->cuStreamSynchronize(t.f.devices[r]->streams[0]) == CUDA_SUCCESS);
    TU_CHECK(cu->cuCtxPopCurrent(&popped) == CUDA_SUCCESS);
    TU_CHECK_OK(gpuhal_buffer_read(t.recv[r], 0, host, count * 4));
    for (i = 0; i < count && !bad; ++i) bad = host[i] != (int32_t)(t.n * (t.n + 1) / 2);
    TU_CHECK(!bad);
  }
  for (r = 0; r < t.n; ++r) TU_CHECK(nccl->ncclCommDestroy(comms[r]) == ncclSuccess);
  TU_CHECK(cu->cuCtxSetCurrent(before) == CUDA_SUCCESS); /* NCCL moved this thread's device */
  ct_close(&t);
}

TU_TEST(bad_input) {
  ct_t t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_collective_t c;
  gpuhal_buffer_t* pinned = NULL;
  gpuhal_channel_t* out[MD_MAX_DEVICES];
  gpuhal_device_t* twice[2];
  gpuhal_channel_id_t id;
  if (!ct_open(&t)) TU_SKIP("needs 2+ devices and NCCL");
  TU_CHECK_OK(ct_alloc(&t, 4096, 4096 * 8));
  TU_CHECK_OK(gpuhal_buffer_allocate(t.f.devices[0], GPUHAL_MEMORY_HOST_PINNED, 4096, &pinned));
  TU_CHECK_OK(gpuhal_command_buffer_create(t.f.devices[0], GPUHAL_COMMAND_BUFFER_STREAM, 1, &cb));
  memset(&c, 0, sizeof(c));
  c.kind = GPUHAL_COLLECTIVE_ALL_REDUCE;
  c.type = GPUHAL_ELEMENT_FLOAT32;
  c.count = 16;
  c.send = gpuhal_ref_buffer(t.send[0], 0);
  c.recv = gpuhal_ref_buffer(t.recv[0], 0);
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_FAILED_PRECONDITION, "begin");
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_STATUS(gpuhal_cmd_collective(NULL, t.ch[0], &c), GPUHAL_STATUS_INVALID_ARGUMENT, "command_buffer");
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, NULL, &c), GPUHAL_STATUS_INVALID_ARGUMENT, "channel");
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "collective");
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[1], &c), GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  c.kind = (gpuhal_collective_kind_t)42;
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_INVALID_ARGUMENT, "kind");
  c.kind = GPUHAL_COLLECTIVE_ALL_REDUCE;
  c.type = (gpuhal_element_type_t)77;
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_INVALID_ARGUMENT, "type");
  c.type = GPUHAL_ELEMENT_FLOAT32;
  c.op = (gpuhal_reduction_t)9;
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_INVALID_ARGUMENT, "op");
  c.op = GPUHAL_REDUCTION_SUM;
  c.count = 0;
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_INVALID_ARGUMENT, "count");
  c.count = 4096; /* 16 KiB: more than the 4 KiB send buffer */
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_OUT_OF_RANGE, "send");
  c.count = 16;
  c.send = gpuhal_ref_buffer(t.send[1], 0);
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  c.send = gpuhal_ref_slot(0, 0);
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_INVALID_ARGUMENT, "send");
  c.send = gpuhal_ref_buffer(pinned, 0);
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_INVALID_ARGUMENT, "pinned");
  c.send = gpuhal_ref_buffer(t.send[0], 0);
  c.kind = GPUHAL_COLLECTIVE_BROADCAST;
  c.root = t.n;
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_OUT_OF_RANGE, "root");
  c.kind = GPUHAL_COLLECTIVE_SEND;
  c.peer = -1;
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_OUT_OF_RANGE, "peer");
  c.kind = GPUHAL_COLLECTIVE_ALL_GATHER; /* recv needs n * count */
  c.count = 1024;
  c.recv = gpuhal_ref_buffer(t.recv[0], 4096 * 8 - 1024 * 4);
  TU_CHECK_STATUS(gpuhal_cmd_collective(cb, t.ch[0], &c), GPUHAL_STATUS_OUT_OF_RANGE, "recv");
  TU_CHECK_OK(gpuhal_command_buffer_end(cb)); /* nothing was recorded: the failures left it clean */

  TU_CHECK_STATUS(gpuhal_channel_create_local(t.f.driver, 0, t.f.devices, out), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "device_count");
  TU_CHECK_STATUS(gpuhal_channel_create_local(t.f.driver, 2, NULL, out), GPUHAL_STATUS_INVALID_ARGUMENT, "devices");
  TU_CHECK_STATUS(gpuhal_channel_create_local(t.f.driver, 2, t.f.devices, NULL), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "out_channels");
  twice[0] = twice[1] = t.f.devices[0];
  TU_CHECK_STATUS(gpuhal_channel_create_local(t.f.driver, 2, twice, out), GPUHAL_STATUS_INVALID_ARGUMENT, "twice");
  TU_CHECK_STATUS(gpuhal_channel_create_rank(t.f.devices[0], NULL, 0, 2, &out[0]), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "id");
  TU_CHECK_OK(gpuhal_channel_id_create(t.f.driver, &id));
  TU_CHECK_STATUS(gpuhal_channel_create_rank(t.f.devices[0], &id, 2, 2, &out[0]), GPUHAL_STATUS_OUT_OF_RANGE, "rank");
  TU_CHECK_STATUS(gpuhal_channel_create_rank(t.f.devices[0], &id, 0, 0, &out[0]), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "size");
  TU_CHECK_STATUS(gpuhal_channel_id_create(t.f.driver, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "out_id");
  TU_CHECK(gpuhal_channel_rank(t.ch[1]) == 1);
  TU_CHECK(gpuhal_channel_size(t.ch[1]) == t.n);
  TU_CHECK(gpuhal_channel_device(t.ch[1]) == t.f.devices[1]);
  TU_CHECK(gpuhal_channel_rank(NULL) == -1);
  TU_CHECK(gpuhal_element_type_size(GPUHAL_ELEMENT_BFLOAT16) == 2);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(pinned);
  ct_close(&t);
}

/* ---- without NCCL: collectives are UNAVAILABLE, everything else works ---- */
TU_TEST(unavailable_without_nccl) {
  md_fixture_t f;
  gpuhal_channel_t* out[MD_MAX_DEVICES];
  gpuhal_channel_id_t id;
  gpuhal_buffer_t* buffer = NULL;
  uint32_t pattern = 0x12345678u, got = 0;
  if (!md_open(&f, 2, 1, "/nonexistent/libnccl.so.2")) TU_SKIP("no device");
  TU_CHECK(!gpuhal_driver_has_feature(f.driver, GPUHAL_FEATURE_NCCL));
  TU_CHECK_STATUS(gpuhal_channel_create_local(f.driver, (uint32_t)f.count, f.devices, out), GPUHAL_STATUS_UNAVAILABLE,
                  "NCCL");
  TU_CHECK_STATUS(gpuhal_channel_id_create(f.driver, &id), GPUHAL_STATUS_UNAVAILABLE, "NCCL");
  memset(&id, 0, sizeof(id));
  TU_CHECK_STATUS(gpuhal_channel_create_rank(f.devices[0], &id, 0, 1, &out[0]), GPUHAL_STATUS_UNAVAILABLE, "NCCL");
  /* everything else still works */
  TU_CHECK_OK(gpuhal_buffer_allocate(f.devices[0], GPUHAL_MEMORY_DEVICE, 64, &buffer));
  {
    gpuhal_command_buffer_t* cb = NULL;
    gpuhal_semaphore_t* s = NULL;
    uint64_t one = 1;
    TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
    TU_CHECK_OK(gpuhal_command_buffer_create(f.devices[0], 0, 0, &cb));
    TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
    TU_CHECK_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(buffer, 0), 64, &pattern, 4));
    TU_CHECK_OK(gpuhal_command_buffer_end(cb));
    TU_CHECK_OK(gpuhal_queue_execute(f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                     gpuhal_semaphore_list_one(&s, &one), cb, NULL));
    TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, md_seconds(30)));
    TU_CHECK_OK(gpuhal_buffer_read(buffer, 60, &got, 4));
    TU_CHECK(got == pattern);
    gpuhal_command_buffer_release(cb);
    gpuhal_semaphore_release(s);
  }
  gpuhal_buffer_release(buffer);
  md_close(&f);
}

TU_MAIN(TU_CASE(all_reduce_stream), TU_CASE(all_reduce_graph), TU_CASE(collectives_stream), TU_CASE(collectives_graph),
        TU_CASE(send_recv_ring_stream), TU_CASE(send_recv_ring_graph), TU_CASE(reusable_graph_two_steps),
        TU_CASE(reusable_stream_two_steps), TU_CASE(free_while_a_collective_waits_for_a_peer),
        TU_CASE(raw_group_of_all_ranks_from_one_thread), TU_CASE(bad_input), TU_CASE(unavailable_without_nccl),
        TU_CASE(a_failed_gate_fails_every_rank_stream), TU_CASE(a_failed_gate_fails_every_rank_graph))
