/* test_channel_one_rank: collectives of a one-rank channel, which gpuhal issues as copies
 * (channel.c) in pieces of GPUHAL__GRAPH_COPY_PIECE bytes: shrunk here to 4 KiB so that a
 * few thousand elements span many pieces. Every kind but send and receive, in place and
 * not, in STREAM and GRAPH command buffers, checked element by element; on softcuda, also
 * that no NCCL collective was called and how many copies were issued or captured. */
#define GPUHAL__GRAPH_COPY_PIECE ((uint64_t)4096)
#include "test_internals.h"
#include "test_util.h"
#include "test_multi_device_util.h"

#define OR_COUNT 10007u /* floats: 40,028 bytes, 10 pieces (the last one short) */

typedef struct or_s {
  md_fixture_t f;
  gpuhal_channel_t* ch;
  gpuhal_semaphore_t* sem;
  uint64_t value;
  gpuhal_buffer_t* a; /* inputs: a[i] = i + 0.5 */
  gpuhal_buffer_t* b; /* outputs, poisoned before each run */
} or_t;

static float or_input(size_t i) { return (float)i + 0.5f; }

/* 1 when `s` is OK, else a failure naming `what` (the status is freed). */
static int or_ok(gpuhal_status_t s, const char* what, int line) {
  if (!s) return 1;
  TU_FAIL_AT(__FILE__, line, "%s -> %s", what, gpuhal_status_message(s));
  gpuhal_status_free(s);
  return 0;
}
#define OR_OK(expr) or_ok((expr), #expr, __LINE__)

static int or_open(or_t* t) {
  float* host;
  size_t i;
  memset(t, 0, sizeof(*t));
  if (!md_open(&t->f, 1, 1, NULL)) return 0;
  if (!gpuhal_driver_has_feature(t->f.driver, GPUHAL_FEATURE_NCCL)) {
    fprintf(stderr, "  NCCL is not loaded\n");
    md_close(&t->f);
    return 0;
  }
  if (!OR_OK(gpuhal_channel_create_local(t->f.driver, 1, t->f.devices, &t->ch)) ||
      !OR_OK(gpuhal_semaphore_create(t->f.driver, 0, &t->sem)) ||
      !OR_OK(gpuhal_buffer_allocate(t->f.devices[0], GPUHAL_MEMORY_DEVICE, OR_COUNT * 4, &t->a)) ||
      !OR_OK(gpuhal_buffer_allocate(t->f.devices[0], GPUHAL_MEMORY_DEVICE, OR_COUNT * 4, &t->b)))
    return 0;
  host = (float*)malloc(OR_COUNT * 4);
  if (!host) return 0;
  for (i = 0; i < OR_COUNT; ++i) host[i] = or_input(i);
  TU_CHECK_OK(gpuhal_buffer_write(t->a, 0, host, OR_COUNT * 4));
  free(host);
  return 1;
}

/* Fills `buffer` with a NaN no input equals. */
static void or_poison(gpuhal_buffer_t* buffer) {
  uint32_t* host = (uint32_t*)malloc(OR_COUNT * 4);
  size_t i;
  TU_REQUIRE(host != NULL);
  for (i = 0; i < OR_COUNT; ++i) host[i] = 0x7fc00001u;
  TU_CHECK_OK(gpuhal_buffer_write(buffer, 0, host, OR_COUNT * 4));
  free(host);
}

static void or_close(or_t* t) {
  gpuhal_buffer_release(t->a);
  gpuhal_buffer_release(t->b);
  gpuhal_semaphore_release(t->sem);
  gpuhal_channel_release(t->ch);
  md_close(&t->f);
}

/* Poisons b, records `c` alone in a command buffer of `mode` and runs it. Returns how many
 * cuMemcpyAsync calls the recording and the execute made (softcuda counts them; -1 on a
 * real driver): a GRAPH command buffer captures the copies at end, a STREAM one issues them
 * at execute. */
static int or_run(or_t* t, uint32_t mode, const gpuhal_collective_t* c) {
  gpuhal_command_buffer_t* cb = NULL;
  unsigned long long before;
  uint64_t v = ++t->value;
  or_poison(t->b);
  before = md_softcuda_calls("cuMemcpyAsync");
  if (OR_OK(gpuhal_command_buffer_create(t->f.devices[0], mode, 0, &cb)) && OR_OK(gpuhal_command_buffer_begin(cb)) &&
      OR_OK(gpuhal_cmd_collective(cb, t->ch, c)) && OR_OK(gpuhal_command_buffer_end(cb)) &&
      OR_OK(gpuhal_queue_execute(t->f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                 gpuhal_semaphore_list_one(&t->sem, &v), cb, NULL)))
    TU_CHECK_OK(gpuhal_semaphore_wait(t->sem, v, md_seconds(60)));
  gpuhal_command_buffer_release(cb);
  return tu_softcuda() ? (int)(md_softcuda_calls("cuMemcpyAsync") - before) : -1;
}

/* Checks that `buffer` holds the inputs, naming the first wrong element. */
static void or_check_inputs(gpuhal_buffer_t* buffer, const char* what, uint32_t mode) {
  float* got = (float*)malloc(OR_COUNT * 4);
  size_t i;
  TU_REQUIRE(got != NULL);
  TU_CHECK_OK(gpuhal_buffer_read(buffer, 0, got, OR_COUNT * 4));
  for (i = 0; i < OR_COUNT; ++i)
    if (got[i] != or_input(i)) {
      TU_FAIL_AT(__FILE__, __LINE__, "%s %s: element %zu is %g, want %g",
                 mode == GPUHAL_COMMAND_BUFFER_STREAM ? "STREAM" : "GRAPH", what, i, (double)got[i],
                 (double)or_input(i));
      break;
    }
  free(got);
}

static gpuhal_collective_t or_collective(gpuhal_collective_kind_t kind, gpuhal_reduction_t op, gpuhal_buffer_t* send,
                                         gpuhal_buffer_t* recv) {
  gpuhal_collective_t c;
  memset(&c, 0, sizeof(c));
  c.kind = kind;
  c.type = GPUHAL_ELEMENT_FLOAT32;
  c.op = op;
  c.count = OR_COUNT;
  c.send = gpuhal_ref_buffer(send, 0);
  c.recv = gpuhal_ref_buffer(recv, 0);
  return c;
}

static void or_every_kind(uint32_t mode) {
  static const struct {
    gpuhal_collective_kind_t kind;
    gpuhal_reduction_t op;
    const char* name;
  } kinds[] = {{GPUHAL_COLLECTIVE_ALL_REDUCE, GPUHAL_REDUCTION_SUM, "all-reduce sum"},
               {GPUHAL_COLLECTIVE_ALL_REDUCE, GPUHAL_REDUCTION_AVG, "all-reduce avg"},
               {GPUHAL_COLLECTIVE_ALL_REDUCE, GPUHAL_REDUCTION_MAX, "all-reduce max"},
               {GPUHAL_COLLECTIVE_ALL_GATHER, GPUHAL_REDUCTION_SUM, "all-gather"},
               {GPUHAL_COLLECTIVE_REDUCE_SCATTER, GPUHAL_REDUCTION_PROD, "reduce-scatter prod"},
               {GPUHAL_COLLECTIVE_BROADCAST, GPUHAL_REDUCTION_SUM, "broadcast"},
               {GPUHAL_COLLECTIVE_REDUCE, GPUHAL_REDUCTION_MIN, "reduce min"}};
  unsigned long long nccl_before = md_softcuda_calls("ncclAllReduce") + md_softcuda_calls("ncclAllGather") +
                                   md_softcuda_calls("ncclReduceScatter") + md_softcuda_calls("ncclBroadcast") +
                                   md_softcuda_calls("ncclReduce") + md_softcuda_calls("ncclGroupStart");
  unsigned long long nccl_after;
  size_t k;
  or_t t;
  if (!or_open(&t)) TU_SKIP("needs a device and NCCL");
  for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); ++k) {
    gpuhal_collective_t c = or_collective(kinds[k].kind, kinds[k].op, t.a, t.b);
    int copies = or_run(&t, mode, &c);
    or_check_inputs(t.b, kinds[k].name, mode);
    if (copies >= 0) TU_CHECK_EQ_INT(copies, 10); /* 40,028 bytes in 4 KiB pieces */
  }
  /* In place (send and receive the same memory): nothing to copy. */
  {
    gpuhal_collective_t c = or_collective(GPUHAL_COLLECTIVE_BROADCAST, GPUHAL_REDUCTION_SUM, t.a, t.a);
    TU_CHECK(or_run(&t, mode, &c) <= 0);
    or_check_inputs(t.a, "broadcast in place", mode);
    c = or_collective(GPUHAL_COLLECTIVE_REDUCE, GPUHAL_REDUCTION_SUM, t.a, t.a);
    TU_CHECK(or_run(&t, mode, &c) <= 0);
    or_check_inputs(t.a, "reduce in place", mode);
    c = or_collective(GPUHAL_COLLECTIVE_ALL_REDUCE, GPUHAL_REDUCTION_SUM, t.a, t.a);
    TU_CHECK(or_run(&t, mode, &c) <= 0);
    or_check_inputs(t.a, "all-reduce in place", mode);
  }
  nccl_after = md_softcuda_calls("ncclAllReduce") + md_softcuda_calls("ncclAllGather") +
               md_softcuda_calls("ncclReduceScatter") + md_softcuda_calls("ncclBroadcast") +
               md_softcuda_calls("ncclReduce") + md_softcuda_calls("ncclGroupStart");
  TU_CHECK(nccl_after == nccl_before); /* 0 = 0 on a real driver, which counts nothing */
  or_close(&t);
}
TU_TEST(every_kind_stream) { or_every_kind(GPUHAL_COMMAND_BUFFER_STREAM); }
TU_TEST(every_kind_graph) { or_every_kind(GPUHAL_COMMAND_BUFFER_GRAPH); }

/* Sends and receives still go to NCCL: a one-rank send to itself with its receive, in one
 * group, moves the data. */
TU_TEST(send_to_itself) {
  or_t t;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_collective_t c;
  uint64_t v;
  if (!or_open(&t)) TU_SKIP("needs a device and NCCL");
  or_poison(t.b);
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.f.devices[0], GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb));
  TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));
  c = or_collective(GPUHAL_COLLECTIVE_SEND, GPUHAL_REDUCTION_SUM, t.a, NULL);
  c.recv = gpuhal_ref_buffer(NULL, 0);
  TU_REQUIRE_OK(gpuhal_cmd_collective(cb, t.ch, &c));
  c = or_collective(GPUHAL_COLLECTIVE_RECV, GPUHAL_REDUCTION_SUM, t.b, t.b);
  c.send = gpuhal_ref_buffer(NULL, 0);
  TU_REQUIRE_OK(gpuhal_cmd_collective(cb, t.ch, &c));
  TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
  v = ++t.value;
  TU_CHECK_OK(gpuhal_queue_execute(t.f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                   gpuhal_semaphore_list_one(&t.sem, &v), cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(t.sem, v, md_seconds(60)));
  or_check_inputs(t.b, "send to itself", GPUHAL_COMMAND_BUFFER_STREAM);
  gpuhal_command_buffer_release(cb);
  or_close(&t);
}

/* ---- a REUSABLE STREAM command buffer's copy: one graph of its own, launched each time ---- */
#define OR_SMALL 1000u /* floats: 4,000 bytes, one copy piece */

static gpuhal_command_buffer_t* or_reusable_copy(or_t* t, gpuhal_buffer_t* from, gpuhal_buffer_t* to) {
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_collective_t c = or_collective(GPUHAL_COLLECTIVE_ALL_REDUCE, GPUHAL_REDUCTION_SUM, from, to);
  c.count = OR_SMALL;
  if (!OR_OK(gpuhal_command_buffer_create(t->f.devices[0],
                                          GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb)) ||
      !OR_OK(gpuhal_command_buffer_begin(cb)) || !OR_OK(gpuhal_cmd_collective(cb, t->ch, &c)) ||
      !OR_OK(gpuhal_command_buffer_end(cb))) {
    gpuhal_command_buffer_release(cb);
    return NULL;
  }
  return cb;
}

/* Each execute copies what the input holds then: new data every time, checked element by
 * element; on softcuda, the executes are graph launches of one executable, built once when
 * the command was recorded. */
TU_TEST(reusable_stream_copy_each_execute) {
  or_t t;
  gpuhal_command_buffer_t* cb;
  unsigned long long launches, instantiations, copies;
  uint32_t host[OR_SMALL], got[OR_SMALL];
  int k, executes = 50;
  size_t i;
  if (!or_open(&t)) TU_SKIP("needs a device and NCCL");
  instantiations = md_softcuda_calls("cuGraphInstantiateWithFlags");
  cb = or_reusable_copy(&t, t.a, t.b);
  TU_REQUIRE(cb != NULL);
  launches = md_softcuda_calls("cuGraphLaunch");
  copies = md_softcuda_calls("cuMemcpyAsync");
  for (k = 0; k < executes; ++k) {
    uint64_t v = ++t.value;
    for (i = 0; i < OR_SMALL; ++i) host[i] = (uint32_t)(k * 7919 + i);
    TU_REQUIRE_OK(gpuhal_buffer_write(t.a, 0, host, sizeof(host)));
    TU_REQUIRE_OK(gpuhal_queue_execute(t.f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                       gpuhal_semaphore_list_one(&t.sem, &v), cb, NULL));
    TU_REQUIRE_OK(gpuhal_semaphore_wait(t.sem, v, md_seconds(60)));
    TU_REQUIRE_OK(gpuhal_buffer_read(t.b, 0, got, sizeof(got)));
    for (i = 0; i < OR_SMALL && got[i] == host[i]; ++i) {
    }
    if (i < OR_SMALL) TU_FAIL_AT(__FILE__, __LINE__, "execute %d: element %zu is %u, want %u", k, i, got[i], host[i]);
  }
  if (tu_softcuda()) {
    TU_CHECK_EQ_INT((int)(md_softcuda_calls("cuGraphLaunch") - launches), executes);
    TU_CHECK_EQ_INT((int)(md_softcuda_calls("cuGraphInstantiateWithFlags") - instantiations), 1);
    TU_CHECK_EQ_INT((int)(md_softcuda_calls("cuMemcpyAsync") - copies), 0);
  }
  gpuhal_command_buffer_release(cb); /* destroys the executable (softcuda: leaks are fatal) */
  or_close(&t);
}

/* In place there is nothing to copy: no graph is built, and executes issue nothing. */
TU_TEST(reusable_stream_copy_in_place) {
  or_t t;
  gpuhal_command_buffer_t* cb;
  unsigned long long instantiations, launches;
  uint64_t v;
  if (!or_open(&t)) TU_SKIP("needs a device and NCCL");
  instantiations = md_softcuda_calls("cuGraphInstantiateWithFlags");
  launches = md_softcuda_calls("cuGraphLaunch");
  cb = or_reusable_copy(&t, t.a, t.a);
  TU_REQUIRE(cb != NULL);
  v = ++t.value;
  TU_CHECK_OK(gpuhal_queue_execute(t.f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                   gpuhal_semaphore_list_one(&t.sem, &v), cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(t.sem, v, md_seconds(60)));
  TU_CHECK_EQ_INT((int)(md_softcuda_calls("cuGraphInstantiateWithFlags") - instantiations), 0);
  TU_CHECK_EQ_INT((int)(md_softcuda_calls("cuGraphLaunch") - launches), 0);
  gpuhal_command_buffer_release(cb);
  or_close(&t);
}

/* CUDA runs the launches of one graph executable in order, so such a command buffer must not
 * be issued behind a GPU wait for a value that a later execute of it signals: the execute on
 * queue 1 waits for a value that the one on queue 0, submitted after it, signals. Both end. */
TU_TEST(reusable_stream_copy_waiting_on_its_next_execute) {
  static const gpuhal_device_params_t* saved;
  gpuhal_device_params_t params;
  or_t t;
  gpuhal_command_buffer_t* cb;
  gpuhal_semaphore_t* gate = NULL;
  uint64_t one = 1, second;
  memset(&params, 0, sizeof(params));
  params.queue_count = 2;
  saved = md_device_params;
  md_device_params = &params;
  if (!or_open(&t)) {
    md_device_params = saved;
    TU_SKIP("needs a device and NCCL");
  }
  md_device_params = saved;
  cb = or_reusable_copy(&t, t.a, t.b);
  TU_REQUIRE(cb != NULL);
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.f.driver, 0, &gate));
  second = ++t.value;
  TU_REQUIRE_OK(gpuhal_queue_execute(t.f.devices[0], 1, gpuhal_semaphore_list_one(&gate, &one),
                                     gpuhal_semaphore_list_one(&t.sem, &second), cb, NULL));
  TU_REQUIRE_OK(gpuhal_queue_execute(t.f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                     gpuhal_semaphore_list_one(&gate, &one), cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(gate, 1, md_seconds(30)));
  TU_CHECK_OK(gpuhal_semaphore_wait(t.sem, second, md_seconds(30)));
  TU_CHECK_OK(gpuhal_device_wait_idle(t.f.devices[0], md_seconds(30)));
  gpuhal_command_buffer_release(cb);
  gpuhal_semaphore_release(gate);
  or_close(&t);
}

/* A collective over a gpuhal_queue_alloca buffer, in a REUSABLE command buffer executed
 * once, then the buffer's dealloca and a new alloca (which may get the same address): the
 * next execute is refused (FAILED_PRECONDITION, naming the dealloca) and writes nothing,
 * in STREAM and GRAPH alike. Before, a GRAPH one ran its captured copy into the freed
 * address, over the new buffer. */
static void or_transient_after_dealloca(uint32_t mode) {
  or_t t;
  gpuhal_buffer_t *transient = NULL, *next = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_collective_t c;
  uint32_t* host;
  uint64_t v;
  size_t i;
  if (!or_open(&t)) TU_SKIP("needs NCCL");
  v = ++t.value;
  TU_CHECK_OK(gpuhal_queue_alloca(t.f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                  gpuhal_semaphore_list_one(&t.sem, &v), OR_COUNT * 4, &transient));
  TU_CHECK_OK(gpuhal_semaphore_wait(t.sem, v, md_seconds(60)));
  c = or_collective(GPUHAL_COLLECTIVE_ALL_REDUCE, GPUHAL_REDUCTION_SUM, t.a, transient);
  TU_CHECK_OK(gpuhal_command_buffer_create(t.f.devices[0], mode | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_collective(cb, t.ch, &c));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  v = ++t.value;
  TU_CHECK_OK(gpuhal_queue_execute(t.f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                   gpuhal_semaphore_list_one(&t.sem, &v), cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(t.sem, v, md_seconds(60)));
  or_check_inputs(transient, "the transient buffer", mode);
  v = ++t.value;
  TU_CHECK_OK(gpuhal_queue_dealloca(t.f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                    gpuhal_semaphore_list_one(&t.sem, &v), transient));
  TU_CHECK_OK(gpuhal_semaphore_wait(t.sem, v, md_seconds(60)));
  v = ++t.value;
  TU_CHECK_OK(gpuhal_queue_alloca(t.f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                  gpuhal_semaphore_list_one(&t.sem, &v), OR_COUNT * 4, &next));
  TU_CHECK_OK(gpuhal_semaphore_wait(t.sem, v, md_seconds(60)));
  or_poison(next);
  v = ++t.value;
  {
    gpuhal_status_t st = gpuhal_queue_execute(t.f.devices[0], 0, gpuhal_semaphore_list_empty(),
                                              gpuhal_semaphore_list_one(&t.sem, &v), cb, NULL);
    if (!st) st = gpuhal_semaphore_wait(t.sem, v, md_seconds(60));
    TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_FAILED_PRECONDITION);
    if (st) TU_CHECK_STR_CONTAINS(gpuhal_status_message(st), "gpuhal_queue_dealloca");
    gpuhal_status_free(st);
  }
  host = (uint32_t*)malloc(OR_COUNT * 4);
  TU_REQUIRE(host != NULL);
  TU_CHECK_OK(gpuhal_buffer_read(next, 0, host, OR_COUNT * 4));
  for (i = 0; i < OR_COUNT; ++i)
    if (host[i] != 0x7fc00001u) {
      TU_FAIL_AT(__FILE__, __LINE__, "the new buffer was written at element %zu", i);
      break;
    }
  free(host);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(transient);
  gpuhal_buffer_release(next); /* the device frees it when it goes */
  or_close(&t);
}
TU_TEST(a_transient_buffer_after_its_dealloca_stream) { or_transient_after_dealloca(GPUHAL_COMMAND_BUFFER_STREAM); }
TU_TEST(a_transient_buffer_after_its_dealloca_graph) { or_transient_after_dealloca(GPUHAL_COMMAND_BUFFER_GRAPH); }

/* A STREAM command buffer whose only use of a gpuhal_queue_alloca buffer is a collective's
 * operand, executed in order after the alloca's signal (through a barrier submitted after
 * it), while the alloca itself waits on the host (both parked streams are taken): the
 * execute must wait for the alloca's issue too. Before, nothing marked the command buffer
 * as reading a transient buffer, so its execute was chained at once behind parked work and
 * failed with "no device address", its signal with it (memop path). */
static void or_collective_of_a_transient_in_order(uint32_t flags) {
  static const gpuhal_device_params_t* saved;
  gpuhal_device_params_t params;
  or_t t;
  gpuhal_semaphore_t *h = NULL, *w = NULL, *x = NULL, *y = NULL, *z = NULL;
  gpuhal_buffer_t *transient = NULL, *scratch = NULL;
  gpuhal_command_buffer_t *filler[2] = {NULL, NULL}, *cb = NULL;
  gpuhal_collective_t c;
  uint64_t one = 1;
  uint32_t pattern = 7;
  int i;
  memset(&params, 0, sizeof(params));
  params.queue_count = 3;
  params.tuning.gpu_parked_max = 2;
  saved = md_device_params;
  md_device_params = &params;
  if (!or_open(&t)) {
    md_device_params = saved;
    TU_SKIP("needs a device and NCCL");
  }
  md_device_params = saved;
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.f.driver, 0, &h));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.f.driver, 0, &w));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.f.driver, 0, &x));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.f.driver, 0, &y));
  TU_REQUIRE_OK(gpuhal_semaphore_create(t.f.driver, 0, &z));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(t.f.devices[0], GPUHAL_MEMORY_DEVICE, 512, &scratch));
  for (i = 0; i < 2; ++i) { /* each fills its own half: the two executes are not ordered */
    TU_REQUIRE_OK(gpuhal_command_buffer_create(
        t.f.devices[0], GPUHAL_COMMAND_BUFFER_STREAM | GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &filler[i]));
    TU_REQUIRE_OK(gpuhal_command_buffer_begin(filler[i]));
    TU_REQUIRE_OK(gpuhal_cmd_fill(filler[i], gpuhal_ref_buffer(scratch, 256u * i), 256, &pattern, 4));
    TU_REQUIRE_OK(gpuhal_command_buffer_end(filler[i]));
  }
  /* Two executes waiting for the host take both parked streams. */
  TU_CHECK_OK(gpuhal_queue_execute(t.f.devices[0], 1, gpuhal_semaphore_list_one(&h, &one),
                                   gpuhal_semaphore_list_empty(), filler[0], NULL));
  TU_CHECK_OK(gpuhal_queue_execute(t.f.devices[0], 2, gpuhal_semaphore_list_one(&y, &one),
                                   gpuhal_semaphore_list_empty(), filler[1], NULL));
  TU_CHECK_OK(gpuhal_queue_alloca(t.f.devices[0], 0, gpuhal_semaphore_list_one(&w, &one),
                                  gpuhal_semaphore_list_one(&x, &one), OR_COUNT * 4, &transient));
  c = or_collective(GPUHAL_COLLECTIVE_ALL_REDUCE, GPUHAL_REDUCTION_SUM, transient, t.b);
  TU_REQUIRE_OK(gpuhal_command_buffer_create(t.f.devices[0], GPUHAL_COMMAND_BUFFER_STREAM | flags, 0, &cb));
  TU_REQUIRE_OK(gpuhal_command_buffer_begin(cb));
  TU_REQUIRE_OK(gpuhal_cmd_collective(cb, t.ch, &c));
  TU_REQUIRE_OK(gpuhal_command_buffer_end(cb));
  /* The execute waits for y, which a barrier signals once the alloca's x is reached. */
  TU_CHECK_OK(gpuhal_queue_execute(t.f.devices[0], 2, gpuhal_semaphore_list_one(&y, &one),
                                   gpuhal_semaphore_list_one(&z, &one), cb, NULL));
  TU_CHECK_OK(gpuhal_queue_execute(t.f.devices[0], 0, gpuhal_semaphore_list_one(&x, &one),
                                   gpuhal_semaphore_list_one(&y, &one), NULL, NULL));
  TU_CHECK_OK(gpuhal_semaphore_signal(h, 1));
  TU_CHECK_OK(gpuhal_semaphore_signal(w, 1));
  TU_CHECK_OK(gpuhal_semaphore_wait(z, 1, md_seconds(30)));
  TU_CHECK_OK(gpuhal_queue_dealloca(t.f.devices[0], 0, gpuhal_semaphore_list_one(&z, &one),
                                    gpuhal_semaphore_list_empty(), transient));
  TU_CHECK_OK(gpuhal_device_wait_idle(t.f.devices[0], md_seconds(30)));
  gpuhal_command_buffer_release(cb);
  for (i = 0; i < 2; ++i) gpuhal_command_buffer_release(filler[i]);
  gpuhal_buffer_release(transient);
  gpuhal_buffer_release(scratch);
  gpuhal_semaphore_release(h);
  gpuhal_semaphore_release(w);
  gpuhal_semaphore_release(x);
  gpuhal_semaphore_release(y);
  gpuhal_semaphore_release(z);
  or_close(&t);
}
TU_TEST(a_collective_of_a_transient_in_order_one_shot) { or_collective_of_a_transient_in_order(0); }
TU_TEST(a_collective_of_a_transient_in_order_reusable) {
  or_collective_of_a_transient_in_order(GPUHAL_COMMAND_BUFFER_REUSABLE);
}

TU_MAIN(TU_CASE(every_kind_stream), TU_CASE(every_kind_graph), TU_CASE(send_to_itself),
        TU_CASE(reusable_stream_copy_each_execute), TU_CASE(reusable_stream_copy_in_place),
        TU_CASE(reusable_stream_copy_waiting_on_its_next_execute),
        TU_CASE(a_transient_buffer_after_its_dealloca_stream), TU_CASE(a_transient_buffer_after_its_dealloca_graph),
        TU_CASE(a_collective_of_a_transient_in_order_one_shot), TU_CASE(a_collective_of_a_transient_in_order_reusable))
