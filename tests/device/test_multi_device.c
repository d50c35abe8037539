/* test_multi_device: several devices of one driver working at once: a two-device
 * pipeline ordered only by semaphores (device B consumes what device A produced, A waits
 * until B has taken it), peer copies in STREAM and GRAPH command buffers, and every public
 * function called from a thread with its own current context, which must stay current.
 * CTest runs it on softcuda with 4 soft devices; on a GPU machine it needs 2 GPUs. */
#include "test_internals.h"
#include "test_util.h"
#include "test_multi_device_util.h"

#define MD_WORDS 64u

/* A spin_store dispatch (slow writer of `value` into dst[0..MD_WORDS)) in a one-shot cb. */
static gpuhal_status_t md_producer(md_fixture_t* f, int dev, gpuhal_buffer_t* dst, unsigned value, uint64_t us,
                                   gpuhal_command_buffer_t** out) {
  gpuhal_arg_t args[4];
  args[0] = gpuhal_arg_buffer(dst, 0);
  args[1] = gpuhal_arg_u32(value);
  args[2] = gpuhal_arg_u32(MD_WORDS);
  args[3] = gpuhal_arg_u64(us);
  GPUHAL__RETURN_IF_ERROR(gpuhal_command_buffer_create(f->devices[dev], 0, 0, out));
  GPUHAL__RETURN_IF_ERROR(gpuhal_command_buffer_begin(*out));
  GPUHAL__RETURN_IF_ERROR(
      gpuhal_cmd_dispatch(*out, f->spin_store[dev], gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 4, args));
  return gpuhal_command_buffer_end(*out);
}

/* Device A writes stage i into one buffer; device B copies it (a peer copy, recorded on B)
 * into slot i of its own buffer. A's next write waits for B's copy (`consumed`), B's copy
 * waits for A's write (`produced`): the host only submits, then waits once at the end. */
static void md_pipeline_body(uint32_t consumer_mode) {
  md_fixture_t f;
  gpuhal_semaphore_t *produced = NULL, *consumed = NULL;
  gpuhal_buffer_t *a_buf = NULL, *b_buf = NULL;
  const unsigned stages = 8;
  unsigned i, w;
  unsigned long long waits_before = md_softcuda_calls("cuStreamWaitEvent");
  uint32_t* host;
  if (!md_open(&f, 2, 2, NULL)) TU_SKIP("needs 2 devices");
  TU_REQUIRE_OK(md_load_kernels(&f));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &produced));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &consumed));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.devices[0], GPUHAL_MEMORY_DEVICE, MD_WORDS * 4, &a_buf));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.devices[1], GPUHAL_MEMORY_DEVICE, (uint64_t)stages * MD_WORDS * 4, &b_buf));
  for (i = 1; i <= stages; ++i) {
    gpuhal_command_buffer_t *a_cb = NULL, *b_cb = NULL;
    uint64_t prev = i - 1, cur = i;
    TU_CHECK_OK(md_producer(&f, 0, a_buf, i, 3000, &a_cb));
    TU_CHECK_OK(gpuhal_command_buffer_create(f.devices[1], consumer_mode, 0, &b_cb));
    TU_CHECK_OK(gpuhal_command_buffer_begin(b_cb));
    TU_CHECK_OK(gpuhal_cmd_copy(b_cb, gpuhal_ref_buffer(a_buf, 0), gpuhal_ref_buffer(b_buf, (i - 1) * MD_WORDS * 4),
                                MD_WORDS * 4));
    TU_CHECK_OK(gpuhal_command_buffer_end(b_cb));
    TU_CHECK_OK(gpuhal_queue_execute(f.devices[0], 0, gpuhal_semaphore_list_one(&consumed, &prev),
                                     gpuhal_semaphore_list_one(&produced, &cur), a_cb, NULL));
    TU_CHECK_OK(gpuhal_queue_execute(f.devices[1], 0, gpuhal_semaphore_list_one(&produced, &cur),
                                     gpuhal_semaphore_list_one(&consumed, &cur), b_cb, NULL));
    gpuhal_command_buffer_release(a_cb);
    gpuhal_command_buffer_release(b_cb);
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(consumed, stages, md_seconds(60)));
  host = (uint32_t*)malloc(stages * MD_WORDS * 4);
  TU_CHECK_OK(gpuhal_buffer_read(b_buf, 0, host, (uint64_t)stages * MD_WORDS * 4));
  for (i = 0; i < stages; ++i)
    for (w = 0; w < MD_WORDS; ++w)
      if (host[i * MD_WORDS + w] != i + 1) {
        TU_FAIL_AT(__FILE__, __LINE__, "stage %u word %u: %u, want %u", i + 1, w, host[i * MD_WORDS + w], i + 1);
        w = MD_WORDS;
        i = stages;
      }
  free(host);
  /* The cross-device waits became GPU-side stream waits (most of them: a value that is
   * already complete when its waiter is issued needs none). */
  if (tu_softcuda()) TU_CHECK(md_softcuda_calls("cuStreamWaitEvent") > waits_before);
  gpuhal_buffer_release(a_buf);
  gpuhal_buffer_release(b_buf);
  gpuhal_semaphore_release(produced);
  gpuhal_semaphore_release(consumed);
  md_close(&f);
}
TU_TEST(pipeline_two_devices_stream) { md_pipeline_body(GPUHAL_COMMAND_BUFFER_STREAM); }
TU_TEST(pipeline_two_devices_graph) { md_pipeline_body(GPUHAL_COMMAND_BUFFER_GRAPH); }

/* A command buffer of device 1 pulls from device 0 and, after a barrier, pushes back. */
static void md_peer_copy_body(uint32_t mode) {
  md_fixture_t f;
  gpuhal_buffer_t *src0 = NULL, *mid1 = NULL, *dst0 = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t* s = NULL;
  unsigned char in[4096], out[4096];
  uint64_t one = 1;
  size_t i;
  if (!md_open(&f, 2, 2, NULL)) TU_SKIP("needs 2 devices");
  for (i = 0; i < sizeof(in); ++i) in[i] = (unsigned char)(i * 7 + 3);
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.devices[0], GPUHAL_MEMORY_DEVICE, sizeof(in), &src0));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.devices[1], GPUHAL_MEMORY_DEVICE, sizeof(in), &mid1));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.devices[0], GPUHAL_MEMORY_DEVICE, sizeof(in), &dst0));
  TU_CHECK_OK(gpuhal_buffer_write(src0, 0, in, sizeof(in)));
  TU_CHECK_OK(gpuhal_command_buffer_create(f.devices[1], mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(src0, 0), gpuhal_ref_buffer(mid1, 0), sizeof(in)));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(mid1, 0), gpuhal_ref_buffer(dst0, 0), sizeof(in)));
  TU_CHECK_STATUS(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(src0, 0), gpuhal_ref_buffer(dst0, 4000), 200),
                  GPUHAL_STATUS_OUT_OF_RANGE, "dst");
  /* A peer buffer the application released is refused, even while a command buffer still
   * holds it (as a buffer of the command buffer's own device is). */
  {
    gpuhal_buffer_t* gone = NULL;
    gpuhal_command_buffer_t* holder = NULL;
    uint32_t word = 5;
    TU_CHECK_OK(gpuhal_buffer_allocate(f.devices[0], GPUHAL_MEMORY_DEVICE, 256, &gone));
    TU_CHECK_OK(gpuhal_command_buffer_create(f.devices[0], GPUHAL_COMMAND_BUFFER_ONE_SHOT, 0, &holder));
    TU_CHECK_OK(gpuhal_command_buffer_begin(holder));
    TU_CHECK_OK(gpuhal_cmd_fill(holder, gpuhal_ref_buffer(gone, 0), 256, &word, 4));
    gpuhal_buffer_release(gone);
    TU_CHECK_STATUS(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(gone, 0), gpuhal_ref_buffer(mid1, 0), 16),
                    GPUHAL_STATUS_INVALID_ARGUMENT, "'src' was already released");
    TU_CHECK_STATUS(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(mid1, 0), gpuhal_ref_buffer(gone, 0), 16),
                    GPUHAL_STATUS_INVALID_ARGUMENT, "'dst' was already released");
    gpuhal_command_buffer_release(holder);
  }
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(gpuhal_queue_execute(f.devices[1], 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one),
                                   cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, md_seconds(30)));
  memset(out, 0, sizeof(out));
  TU_CHECK_OK(gpuhal_buffer_read(dst0, 0, out, sizeof(out)));
  TU_CHECK(memcmp(in, out, sizeof(in)) == 0);
  memset(out, 0, sizeof(out));
  TU_CHECK_OK(gpuhal_buffer_read(mid1, 0, out, sizeof(out)));
  TU_CHECK(memcmp(in, out, sizeof(in)) == 0);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(src0);
  gpuhal_buffer_release(mid1);
  gpuhal_buffer_release(dst0);
  gpuhal_semaphore_release(s);
  md_close(&f);
}
TU_TEST(peer_copy_stream) { md_peer_copy_body(GPUHAL_COMMAND_BUFFER_STREAM); }
TU_TEST(peer_copy_graph) { md_peer_copy_body(GPUHAL_COMMAND_BUFFER_GRAPH); }

/* Two gpuhal devices opened on one ordinal share its primary context: a copy between their
 * buffers needs no peer access, in GRAPH command buffers too (cuDeviceCanAccessPeer says 0
 * for a device and itself, and GRAPH refused the copy). Needs one GPU. What still does not
 * mix (a fill of the other's buffer, an execute on the other device) is refused with a
 * message that says why, not "device 0 ... device 0". */
static void md_same_ordinal_copy_body(uint32_t mode) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t *a = NULL, *b = NULL;
  gpuhal_buffer_t *src = NULL, *dst = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t* s = NULL;
  unsigned char in[1024], out[1024];
  uint64_t one = 1;
  size_t i;
  gpuhal_status_t st = gpuhal_driver_create(NULL, &driver);
  if (!st) st = gpuhal_device_create(driver, 0, NULL, &a);
  if (!st) st = gpuhal_device_create(driver, 0, NULL, &b);
  if (st) {
    md_print_status("setup", st);
    gpuhal_device_release(a);
    gpuhal_driver_release(driver);
    TU_SKIP("no device");
  }
  for (i = 0; i < sizeof(in); ++i) in[i] = (unsigned char)(i * 13 + 5);
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s));
  TU_CHECK_OK(gpuhal_buffer_allocate(a, GPUHAL_MEMORY_DEVICE, sizeof(in), &src));
  TU_CHECK_OK(gpuhal_buffer_allocate(b, GPUHAL_MEMORY_DEVICE, sizeof(in), &dst));
  TU_CHECK_OK(gpuhal_buffer_write(src, 0, in, sizeof(in)));
  TU_CHECK_OK(gpuhal_command_buffer_create(b, mode, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(src, 0), gpuhal_ref_buffer(dst, 0), sizeof(in)));
  TU_CHECK_STATUS(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(src, 0), 4, &one, 4), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "two gpuhal devices of one ordinal");
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_STATUS(gpuhal_queue_execute(a, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_empty(), cb, NULL),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "two gpuhal devices of one ordinal");
  TU_CHECK_OK(gpuhal_queue_execute(b, 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one), cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(s, 1, md_seconds(30)));
  memset(out, 0, sizeof(out));
  TU_CHECK_OK(gpuhal_buffer_read(dst, 0, out, sizeof(out)));
  TU_CHECK(memcmp(in, out, sizeof(in)) == 0);
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(src);
  gpuhal_buffer_release(dst);
  gpuhal_semaphore_release(s);
  gpuhal_device_release(a);
  gpuhal_device_release(b);
  gpuhal_driver_release(driver);
}
TU_TEST(same_ordinal_copy_stream) { md_same_ordinal_copy_body(GPUHAL_COMMAND_BUFFER_STREAM); }
TU_TEST(same_ordinal_copy_graph) { md_same_ordinal_copy_body(GPUHAL_COMMAND_BUFFER_GRAPH); }

/* Device 0 copies from queue_alloca memory of device 1 (a peer copy), and its action holds
 * the last reference to that buffer. Freeing such memory is device 1's worker's job; device
 * 0's worker, releasing the action, hands it over and goes on, even while device 1's worker
 * is busy (held here until the test lets it go): two workers each waiting for the other's
 * would never return. */
typedef struct md_hold_s {
  gpuhal__task_t task;
  int32_t held, let_go;
} md_hold_t;
static void md_hold_run(gpuhal__task_t* task) {
  md_hold_t* h = GPUHAL__CONTAINER_OF(task, md_hold_t, task);
  int64_t end = gpuhal_now_ns() + (int64_t)60 * 1000000000;
  gpuhal__atomic_store(&h->held, 1);
  while (!gpuhal__atomic_load(&h->let_go) && gpuhal_now_ns() < end) tu_sleep_ns(100000);
}
TU_TEST(peer_alloca_freed_without_waiting_for_its_worker) {
  md_fixture_t f;
  gpuhal_buffer_t *b1 = NULL, *dst0 = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t *s0 = NULL, *s1 = NULL;
  unsigned char in[4096], out[4096];
  uint64_t one = 1, two = 2;
  md_hold_t hold;
  int64_t end;
  size_t i;
  if (!md_open(&f, 2, 2, NULL)) TU_SKIP("needs 2 devices");
  for (i = 0; i < sizeof(in); ++i) in[i] = (unsigned char)(i * 5 + 1);
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s0));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s1));
  TU_CHECK_OK(gpuhal_queue_alloca(f.devices[1], 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s1, &one),
                                  sizeof(in), &b1));
  TU_CHECK_OK(gpuhal_semaphore_wait(s1, 1, md_seconds(30)));
  TU_CHECK_OK(gpuhal_buffer_write(b1, 0, in, sizeof(in)));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.devices[0], GPUHAL_MEMORY_DEVICE, sizeof(in), &dst0));
  TU_REQUIRE(b1 && dst0 && !tu_state.failed);
  TU_CHECK_OK(gpuhal_command_buffer_create(f.devices[0], GPUHAL_COMMAND_BUFFER_STREAM, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(b1, 0), gpuhal_ref_buffer(dst0, 0), sizeof(in)));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  memset(&hold, 0, sizeof(hold));
  gpuhal__list_init(&hold.task.node);
  hold.task.fn = md_hold_run;
  gpuhal__worker_post(f.devices[1], &hold.task);
  end = gpuhal_now_ns() + (int64_t)10 * 1000000000;
  while (!gpuhal__atomic_load(&hold.held) && gpuhal_now_ns() < end) tu_sleep_ns(100000);
  TU_CHECK(gpuhal__atomic_load(&hold.held));
  TU_CHECK_OK(gpuhal_queue_execute(f.devices[0], 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s0, &one),
                                   cb, NULL));
  gpuhal_command_buffer_release(cb); /* the action's references are the last */
  gpuhal_buffer_release(b1);
  TU_CHECK_OK(gpuhal_semaphore_wait(s0, 1, md_seconds(30)));
  /* Every action of device 0 released: the last one's release freed b1, or handed it over. */
  TU_CHECK_OK(gpuhal_device_wait_idle(f.devices[0], md_seconds(5)));
  TU_CHECK_OK(gpuhal_queue_execute(f.devices[0], 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s0, &two),
                                   NULL, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(s0, 2, md_seconds(5)));
  gpuhal__atomic_store(&hold.let_go, 1);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.devices[1], md_seconds(30)));
  memset(out, 0, sizeof(out));
  TU_CHECK_OK(gpuhal_buffer_read(dst0, 0, out, sizeof(out)));
  TU_CHECK(memcmp(in, out, sizeof(in)) == 0);
  gpuhal_buffer_release(dst0);
  gpuhal_semaphore_release(s0);
  gpuhal_semaphore_release(s1);
  md_close(&f);
}

/* Device B's work waits for a value that device A's work has not been submitted to reach
 * (so it waits on the host: B parks nothing on the GPU here). When A's work is issued, the
 * thread that issued it issues B's work too, as a host signal does, instead of leaving it
 * to B's worker, which is busy here until the test lets it go: a chain across devices
 * whose every hop waits to be submitted (the whole chain submitted at once, past the bound
 * on a queue's stream) would otherwise go one wake-up of the other device's worker per hop.
 * A's work is issued by the application's thread, or by A's worker (no_caller_issue). */
static void md_woken_body(int a_worker_issues) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* dev[2] = {NULL, NULL};
  gpuhal_device_params_t params[2];
  gpuhal_semaphore_t *s = NULL, *t = NULL;
  uint64_t one = 1, value = 0;
  md_hold_t hold;
  int count = 0, i;
  int64_t end;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_CHECK_OK(gpuhal_driver_device_count(driver, &count));
  if (count < 2) {
    gpuhal_driver_release(driver);
    TU_SKIP("needs 2 devices");
  }
  memset(params, 0, sizeof(params));
  for (i = 0; i < 2; ++i) params[i].tuning.gpu_parked_max = -1;
  params[0].tuning.no_caller_issue = a_worker_issues;
  for (i = 0; i < 2; ++i) TU_CHECK_OK(gpuhal_device_create(driver, i, &params[i], &dev[i]));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &s));
  TU_CHECK_OK(gpuhal_semaphore_create(driver, 0, &t));
  TU_REQUIRE(dev[0] && dev[1] && s && t && !tu_state.failed);
  memset(&hold, 0, sizeof(hold));
  gpuhal__list_init(&hold.task.node);
  hold.task.fn = md_hold_run;
  gpuhal__worker_post(dev[1], &hold.task);
  end = gpuhal_now_ns() + (int64_t)10 * 1000000000;
  while (!gpuhal__atomic_load(&hold.held) && gpuhal_now_ns() < end) tu_sleep_ns(100000);
  TU_CHECK(gpuhal__atomic_load(&hold.held));
  /* B: a barrier behind s = 1, which nothing is submitted to reach yet. */
  TU_CHECK_OK(gpuhal_queue_execute(dev[1], 0, gpuhal_semaphore_list_one(&s, &one), gpuhal_semaphore_list_one(&t, &one),
                                   NULL, NULL));
  TU_CHECK_OK(gpuhal_semaphore_query(t, &value));
  TU_CHECK(value == 0);
  /* A: the work that reaches s = 1. */
  TU_CHECK_OK(
      gpuhal_queue_execute(dev[0], 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s, &one), NULL, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(t, 1, md_seconds(5))); /* B's worker is still busy */
  TU_CHECK(!gpuhal__atomic_load(&hold.let_go));
  gpuhal__atomic_store(&hold.let_go, 1);
  for (i = 0; i < 2; ++i) TU_CHECK_OK(gpuhal_device_wait_idle(dev[i], md_seconds(30)));
  gpuhal_semaphore_release(s);
  gpuhal_semaphore_release(t);
  for (i = 0; i < 2; ++i) gpuhal_device_release(dev[i]);
  gpuhal_driver_release(driver);
}
TU_TEST(submission_issues_the_peer_work_it_lets_go) { md_woken_body(0); }
TU_TEST(worker_issues_the_peer_work_it_lets_go) { md_woken_body(1); }

/* A ping-pong between two devices, every hop submitted at once, far past a small bound on
 * each queue's stream (tuning.queue_entries_max): held work, and work waiting for a value
 * not submitted, issued in turn by whichever thread lets it go (the application's, either
 * worker, each issuing the other device's work). Every value is reached, in order, within
 * the bound of the wait. */
TU_TEST(held_ping_pong_across_devices) {
  md_fixture_t f;
  gpuhal_device_params_t params;
  gpuhal_semaphore_t *ping = NULL, *pong = NULL;
  gpuhal_buffer_t* buf[2] = {NULL, NULL};
  gpuhal_command_buffer_t* cb[2] = {NULL, NULL};
  gpuhal_arg_t args[4];
  const uint64_t hops = 400;
  uint64_t i, value = 0;
  int d;
  memset(&params, 0, sizeof(params));
  params.tuning.queue_entries_max = 16;
  md_device_params = &params;
  if (!md_open(&f, 2, 2, NULL)) {
    md_device_params = NULL;
    TU_SKIP("needs 2 devices");
  }
  md_device_params = NULL;
  TU_REQUIRE_OK(md_load_kernels(&f));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &ping));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &pong));
  for (d = 0; d < 2; ++d) { /* each hop: a 20 us spin_store */
    TU_CHECK_OK(gpuhal_buffer_allocate(f.devices[d], GPUHAL_MEMORY_DEVICE, 256, &buf[d]));
    args[0] = gpuhal_arg_buffer(buf[d], 0);
    args[1] = gpuhal_arg_u32(1);
    args[2] = gpuhal_arg_u32(1);
    args[3] = gpuhal_arg_u64(20);
    TU_CHECK_OK(gpuhal_command_buffer_create(f.devices[d], GPUHAL_COMMAND_BUFFER_REUSABLE, 0, &cb[d]));
    TU_CHECK_OK(gpuhal_command_buffer_begin(cb[d]));
    TU_CHECK_OK(gpuhal_cmd_dispatch(cb[d], f.spin_store[d], gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 4, args));
    TU_CHECK_OK(gpuhal_command_buffer_end(cb[d]));
  }
  TU_REQUIRE(ping && pong && cb[0] && cb[1] && !tu_state.failed);
  for (i = 1; i <= hops && !tu_state.failed; ++i) {
    uint64_t prev = i - 1;
    TU_CHECK_OK(gpuhal_queue_execute(f.devices[0], 0, gpuhal_semaphore_list_one(&pong, &prev),
                                     gpuhal_semaphore_list_one(&ping, &i), cb[0], NULL));
    TU_CHECK_OK(gpuhal_queue_execute(f.devices[1], 0, gpuhal_semaphore_list_one(&ping, &i),
                                     gpuhal_semaphore_list_one(&pong, &i), cb[1], NULL));
  }
  TU_CHECK_OK(gpuhal_semaphore_wait(pong, hops, md_seconds(60)));
  TU_CHECK_OK(gpuhal_semaphore_query(ping, &value));
  TU_CHECK(value == hops);
  for (d = 0; d < 2; ++d) {
    gpuhal_command_buffer_release(cb[d]);
    gpuhal_buffer_release(buf[d]);
  }
  gpuhal_semaphore_release(ping);
  gpuhal_semaphore_release(pong);
  md_close(&f);
}

/* A GRAPH command buffer of device 0 copies from and into device 1's transient buffers
 * (gpuhal_queue_alloca): their memory comes from device 1's own pool, which context peer
 * access does not open to device 0 (on a GPU, an illegal address that lost both devices). */
TU_TEST(graph_copies_reach_a_peers_transient_buffers) {
  md_fixture_t f;
  gpuhal_buffer_t *from1 = NULL, *into1 = NULL, *mid0 = NULL;
  gpuhal_command_buffer_t* cb = NULL;
  gpuhal_semaphore_t *s0 = NULL, *s1 = NULL;
  unsigned char in[8192], out[8192];
  uint64_t one = 1, two = 2, three = 3;
  size_t i;
  if (!md_open(&f, 2, 2, NULL)) TU_SKIP("needs 2 devices");
  for (i = 0; i < sizeof(in); ++i) in[i] = (unsigned char)(i * 7 + 3);
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s0));
  TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &s1));
  TU_CHECK_OK(gpuhal_queue_alloca(f.devices[1], 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s1, &one),
                                  sizeof(in), &from1));
  TU_CHECK_OK(gpuhal_queue_alloca(f.devices[1], 0, gpuhal_semaphore_list_one(&s1, &one),
                                  gpuhal_semaphore_list_one(&s1, &two), sizeof(in), &into1));
  TU_CHECK_OK(gpuhal_semaphore_wait(s1, 2, md_seconds(30)));
  if (from1) TU_CHECK_OK(gpuhal_buffer_write(from1, 0, in, sizeof(in)));
  TU_CHECK_OK(gpuhal_buffer_allocate(f.devices[0], GPUHAL_MEMORY_DEVICE, sizeof(in), &mid0));
  TU_REQUIRE(from1 && into1 && mid0 && !tu_state.failed);
  TU_CHECK_OK(gpuhal_command_buffer_create(f.devices[0], GPUHAL_COMMAND_BUFFER_GRAPH, 0, &cb));
  TU_CHECK_OK(gpuhal_command_buffer_begin(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(from1, 0), gpuhal_ref_buffer(mid0, 0), sizeof(in)));
  TU_CHECK_OK(gpuhal_cmd_barrier(cb));
  TU_CHECK_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(mid0, 0), gpuhal_ref_buffer(into1, 0), sizeof(in)));
  TU_CHECK_OK(gpuhal_command_buffer_end(cb));
  TU_CHECK_OK(gpuhal_queue_execute(f.devices[0], 0, gpuhal_semaphore_list_one(&s1, &two),
                                   gpuhal_semaphore_list_one(&s0, &one), cb, NULL));
  TU_CHECK_OK(gpuhal_semaphore_wait(s0, 1, md_seconds(30)));
  memset(out, 0, sizeof(out));
  TU_CHECK_OK(gpuhal_buffer_read(into1, 0, out, sizeof(out)));
  TU_CHECK(memcmp(in, out, sizeof(in)) == 0);
  TU_CHECK_OK(gpuhal_device_lost_status(f.devices[0]));
  TU_CHECK_OK(gpuhal_device_lost_status(f.devices[1]));
  TU_CHECK_OK(gpuhal_queue_dealloca(f.devices[1], 0, gpuhal_semaphore_list_one(&s0, &one),
                                    gpuhal_semaphore_list_empty(), from1));
  TU_CHECK_OK(gpuhal_queue_dealloca(f.devices[1], 0, gpuhal_semaphore_list_one(&s0, &one),
                                    gpuhal_semaphore_list_one(&s1, &three), into1));
  TU_CHECK_OK(gpuhal_semaphore_wait(s1, 3, md_seconds(30)));
  gpuhal_command_buffer_release(cb);
  gpuhal_buffer_release(from1);
  gpuhal_buffer_release(into1);
  gpuhal_buffer_release(mid0);
  gpuhal_semaphore_release(s0);
  gpuhal_semaphore_release(s1);
  md_close(&f);
}

/* ---- no gpuhal call changes the calling thread's current context ---- */
typedef struct md_ctx_test_s {
  const gpuhal__cuda_symbols_t* cu;
  CUcontext own;
  int failures;
  int calls;
} md_ctx_test_t;

static md_ctx_test_t md_ctx;

/* After every call: the thread's own context is still current. */
#define MD_CTX(expr)                                                                                \
  do {                                                                                              \
    CUcontext md_now_ = NULL;                                                                       \
    expr;                                                                                           \
    md_ctx.calls++;                                                                                 \
    md_ctx.cu->cuCtxGetCurrent(&md_now_);                                                           \
    if (md_now_ != md_ctx.own) {                                                                    \
      fprintf(stderr, "  FAIL %s:%d: %s changed the current context\n", __FILE__, __LINE__, #expr); \
      md_ctx.failures++;                                                                            \
      md_ctx.cu->cuCtxSetCurrent(md_ctx.own);                                                       \
    }                                                                                               \
  } while (0)
#define MD_CTX_OK(expr) MD_CTX(TU_CHECK_OK(expr))
/* ... and a pure submission or host-side call does not even touch it. */
#define MD_CTX_UNTOUCHED(expr)                                                                                  \
  do {                                                                                                          \
    unsigned long long md_sw_ = md_softcuda_switches_this_thread();                                             \
    MD_CTX_OK(expr);                                                                                            \
    if (md_softcuda_switches_this_thread() != md_sw_) {                                                         \
      fprintf(stderr, "  FAIL %s:%d: %s switched contexts on the calling thread\n", __FILE__, __LINE__, #expr); \
      md_ctx.failures++;                                                                                        \
    }                                                                                                           \
  } while (0)

static gpuhal_status_t md_host_fn(void* user) {
  (*(int*)user)++;
  return NULL;
}

static void md_every_function(const gpuhal__cuda_symbols_t* cu, CUcontext own) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* dev[2] = {NULL, NULL};
  gpuhal_device_info_t info;
  gpuhal_semaphore_t* sem = NULL;
  gpuhal_buffer_t *b0 = NULL, *b1 = NULL, *pinned = NULL, *pending = NULL;
  gpuhal_executable_t* exe = NULL;
  gpuhal_kernel_t* kernel = NULL;
  gpuhal_kernel_info_t kinfo;
  gpuhal_command_buffer_t *cb = NULL, *ccb = NULL;
  gpuhal_channel_t* ch[2] = {NULL, NULL};
  gpuhal_channel_id_t id;
  gpuhal_arg_t args[4];
  uint64_t v1 = 1, v2 = 2, v3 = 3, v4 = 4, v5 = 5, value = 0, address = 0;
  uint32_t word = 7, pattern = 0xABCDABCDu;
  int count = 0, host_calls = 0;
  size_t ptx_size = 0;
  char* ptx = md_read_file("spin_store.ptx", &ptx_size);
  void* graph = NULL;
  md_ctx.cu = cu;
  md_ctx.own = own;
  MD_CTX_OK(gpuhal_driver_create(NULL, &driver));
  MD_CTX_OK(gpuhal_driver_device_count(driver, &count));
  MD_CTX_OK(gpuhal_driver_device_info(driver, 0, &info));
  MD_CTX((void)gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_PEER_ACCESS));
  MD_CTX((void)gpuhal_driver_cuda_library(driver));
  MD_CTX_OK(gpuhal_device_create(driver, 0, NULL, &dev[0]));
  MD_CTX_OK(gpuhal_device_create(driver, 1, NULL, &dev[1]));
  MD_CTX_OK(gpuhal_device_info(dev[1], &info));
  MD_CTX((void)gpuhal_device_queue_count(dev[0]));
  MD_CTX_UNTOUCHED(gpuhal_semaphore_create(driver, 0, &sem));
  MD_CTX_OK(gpuhal_buffer_allocate(dev[0], GPUHAL_MEMORY_DEVICE, 4096, &b0));
  MD_CTX_OK(gpuhal_buffer_allocate(dev[1], GPUHAL_MEMORY_DEVICE, 4096, &b1));
  MD_CTX_OK(gpuhal_buffer_allocate(dev[0], GPUHAL_MEMORY_HOST_PINNED, 4096, &pinned));
  MD_CTX_OK(gpuhal_buffer_write(b0, 0, &word, 4));
  MD_CTX_OK(gpuhal_buffer_read(b0, 0, &word, 4));
  MD_CTX_OK(gpuhal_buffer_device_address(b0, &address));
  MD_CTX((void)gpuhal_buffer_host_pointer(pinned));
  if (ptx) {
    MD_CTX_OK(gpuhal_executable_load(dev[0], ptx, ptx_size, &exe));
    MD_CTX_OK(gpuhal_executable_kernel(exe, "spin_store", &kernel));
    MD_CTX_OK(gpuhal_kernel_info(kernel, &kinfo));
  }
  MD_CTX_OK(gpuhal_queue_alloca(dev[0], 0, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&sem, &v1), 256,
                                &pending));
  MD_CTX_OK(gpuhal_command_buffer_create(dev[0], GPUHAL_COMMAND_BUFFER_GRAPH, 0, &cb));
  MD_CTX_UNTOUCHED(gpuhal_command_buffer_begin(cb));
  if (kernel) {
    args[0] = gpuhal_arg_buffer(b0, 0);
    args[1] = gpuhal_arg_u32(5);
    args[2] = gpuhal_arg_u32(4);
    args[3] = gpuhal_arg_u64(1);
    MD_CTX_OK(gpuhal_cmd_dispatch(cb, kernel, gpuhal_dim3(1, 1, 1), gpuhal_dim3(1, 1, 1), 0, 4, args));
  }
  MD_CTX_OK(gpuhal_cmd_barrier(cb));
  MD_CTX_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(b0, 0), gpuhal_ref_buffer(b1, 0), 1024)); /* a peer copy */
  MD_CTX_OK(gpuhal_cmd_fill(cb, gpuhal_ref_buffer(b0, 1024), 1024, &pattern, 4));
  MD_CTX_OK(gpuhal_cmd_update(cb, &pattern, gpuhal_ref_buffer(b0, 2048), 4));
  MD_CTX_OK(gpuhal_cmd_copy(cb, gpuhal_ref_buffer(pending, 0), gpuhal_ref_buffer(b0, 3072), 256));
  MD_CTX_OK(gpuhal_command_buffer_end(cb));
  MD_CTX_OK(gpuhal_command_buffer_native_graph(cb, &graph));
  MD_CTX_OK(gpuhal_queue_execute(dev[0], 0, gpuhal_semaphore_list_one(&sem, &v1), gpuhal_semaphore_list_one(&sem, &v2),
                                 cb, NULL));
  MD_CTX_OK(gpuhal_queue_execute(dev[1], 0, gpuhal_semaphore_list_one(&sem, &v2), gpuhal_semaphore_list_one(&sem, &v3),
                                 NULL, NULL));
  MD_CTX_OK(gpuhal_queue_host_call(dev[1], 0, gpuhal_semaphore_list_one(&sem, &v3),
                                   gpuhal_semaphore_list_one(&sem, &v4), md_host_fn, &host_calls));
  MD_CTX_OK(gpuhal_queue_dealloca(dev[0], 0, gpuhal_semaphore_list_one(&sem, &v4), gpuhal_semaphore_list_one(&sem, &v5),
                                  pending));
  MD_CTX_OK(gpuhal_semaphore_wait(sem, 5, md_seconds(60)));
  MD_CTX_UNTOUCHED(gpuhal_semaphore_query(sem, &value));
  MD_CTX_UNTOUCHED(gpuhal_semaphore_signal(sem, 6));
  MD_CTX_UNTOUCHED(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, gpuhal_semaphore_list_one(&sem, &v5), md_seconds(1)));
  TU_CHECK(host_calls == 1);
  MD_CTX_OK(gpuhal_device_wait_idle(dev[0], md_seconds(60)));
  MD_CTX_OK(gpuhal_device_wait_idle(dev[1], md_seconds(60)));
  MD_CTX_UNTOUCHED(gpuhal_device_lost_status(dev[0]));
  if (gpuhal_driver_has_feature(driver, GPUHAL_FEATURE_NCCL)) {
    gpuhal_collective_t c;
    MD_CTX_OK(gpuhal_channel_id_create(driver, &id));
    MD_CTX_OK(gpuhal_channel_create_local(driver, 2, dev, ch));
    MD_CTX((void)gpuhal_channel_rank(ch[0]));
    MD_CTX_OK(gpuhal_command_buffer_create(dev[0], GPUHAL_COMMAND_BUFFER_GRAPH, 0, &ccb));
    MD_CTX_OK(gpuhal_command_buffer_begin(ccb));
    memset(&c, 0, sizeof(c));
    c.kind = GPUHAL_COLLECTIVE_SEND;
    c.type = GPUHAL_ELEMENT_UINT8;
    c.count = 16;
    c.send = gpuhal_ref_buffer(b0, 0);
    c.peer = 0; /* to itself: needs no other rank */
    MD_CTX_OK(gpuhal_cmd_collective(ccb, ch[0], &c));
    c.kind = GPUHAL_COLLECTIVE_RECV;
    c.recv = gpuhal_ref_buffer(b0, 16);
    MD_CTX_OK(gpuhal_cmd_collective(ccb, ch[0], &c));
    MD_CTX_OK(gpuhal_command_buffer_end(ccb)); /* captures NCCL calls (on the worker) */
    MD_CTX(gpuhal_command_buffer_release(ccb));
    MD_CTX(gpuhal_channel_release(ch[0]));
    MD_CTX(gpuhal_channel_release(ch[1]));
  }
  MD_CTX(gpuhal_command_buffer_release(cb));
  MD_CTX(gpuhal_executable_release(exe));
  MD_CTX(gpuhal_buffer_release(pending));
  MD_CTX(gpuhal_buffer_release(pinned));
  MD_CTX(gpuhal_buffer_release(b1));
  MD_CTX(gpuhal_buffer_release(b0));
  MD_CTX(gpuhal_semaphore_release(sem));
  MD_CTX(gpuhal_device_release(dev[1]));
  MD_CTX(gpuhal_device_release(dev[0]));
  MD_CTX(gpuhal_driver_release(driver));
  free(ptx);
}

typedef struct md_thread_arg_s {
  gpuhal_driver_t* raw; /* a driver whose symbol table the thread uses for raw CUDA calls */
  int failures;
  int depth_ok;
} md_thread_arg_t;

static void* md_context_thread(void* p) {
  md_thread_arg_t* a = (md_thread_arg_t*)p;
  const gpuhal__cuda_symbols_t* cu = &a->raw->cu;
  CUdevice last = 0;
  CUcontext own = NULL, popped = NULL, after = NULL;
  int count = a->raw->device_count;
  /* the thread's own context: the primary context of the last device (not one gpuhal
   * opens below), pushed on an empty stack */
  if (cu->cuDeviceGet(&last, count - 1) != CUDA_SUCCESS || cu->cuDevicePrimaryCtxRetain(&own, last) != CUDA_SUCCESS) {
    a->failures = -1;
    return NULL;
  }
  cu->cuCtxPushCurrent(own);
  md_ctx.failures = 0;
  md_ctx.calls = 0;
  md_every_function(cu, own);
  a->failures = md_ctx.failures;
  /* the stack is exactly as it was: popping gives our context and leaves nothing */
  a->depth_ok = cu->cuCtxPopCurrent(&popped) == CUDA_SUCCESS && popped == own &&
                cu->cuCtxGetCurrent(&after) == CUDA_SUCCESS && after == NULL;
  cu->cuDevicePrimaryCtxRelease(last);
  return NULL;
}

TU_TEST(context_unchanged_by_every_function) {
  md_thread_arg_t arg;
  pthread_t thread;
  int count = 0;
  memset(&arg, 0, sizeof(arg));
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &arg.raw));
  TU_CHECK_OK(gpuhal_driver_device_count(arg.raw, &count));
  if (count < 2) {
    gpuhal_driver_release(arg.raw);
    TU_SKIP("needs 2 devices");
  }
  TU_REQUIRE(pthread_create(&thread, NULL, md_context_thread, &arg) == 0);
  pthread_join(thread, NULL);
  TU_CHECK(arg.failures == 0);
  TU_CHECK(arg.depth_ok);
  fprintf(stderr, "  %d calls checked, the caller's context stayed current\n", md_ctx.calls);
  gpuhal_driver_release(arg.raw);
}

/* ---- several devices, each with its own threads, running at once ---- */
TU_TEST(devices_run_concurrently) {
  md_fixture_t f;
  gpuhal_semaphore_t* sem[MD_MAX_DEVICES];
  gpuhal_buffer_t* buf[MD_MAX_DEVICES];
  int i, k;
  int64_t start, elapsed;
  const int chain = 4;
  const uint64_t us = 20000;
  if (!md_open(&f, 4, 2, NULL)) TU_SKIP("needs 2 devices");
  TU_REQUIRE_OK(md_load_kernels(&f));
  memset(sem, 0, sizeof(sem));
  memset(buf, 0, sizeof(buf));
  for (i = 0; i < f.count; ++i) {
    TU_CHECK_OK(gpuhal_semaphore_create(f.driver, 0, &sem[i]));
    TU_CHECK_OK(gpuhal_buffer_allocate(f.devices[i], GPUHAL_MEMORY_DEVICE, MD_WORDS * 4, &buf[i]));
  }
  start = gpuhal_now_ns();
  for (k = 1; k <= chain; ++k)
    for (i = 0; i < f.count; ++i) {
      gpuhal_command_buffer_t* cb = NULL;
      uint64_t v = (uint64_t)k;
      TU_CHECK_OK(md_producer(&f, i, buf[i], (unsigned)k, us, &cb));
      TU_CHECK_OK(gpuhal_queue_execute(f.devices[i], 0, gpuhal_semaphore_list_empty(),
                                       gpuhal_semaphore_list_one(&sem[i], &v), cb, NULL));
      gpuhal_command_buffer_release(cb);
    }
  for (i = 0; i < f.count; ++i) TU_CHECK_OK(gpuhal_semaphore_wait(sem[i], (uint64_t)chain, md_seconds(60)));
  elapsed = gpuhal_now_ns() - start;
  /* serial would take count * chain * us; concurrent devices about chain * us */
  fprintf(stderr, "  %d devices x %d x %llu us: %.1f ms (serial: %.1f ms)\n", f.count, chain, (unsigned long long)us,
          (double)elapsed / 1e6, (double)f.count * chain * (double)us / 1e3);
  TU_CHECK(elapsed < (int64_t)((double)f.count * chain * (double)us * 1000.0 * 0.9));
  for (i = 0; i < f.count; ++i) {
    gpuhal_semaphore_release(sem[i]);
    gpuhal_buffer_release(buf[i]);
  }
  md_close(&f);
}

TU_MAIN(TU_CASE(pipeline_two_devices_stream), TU_CASE(pipeline_two_devices_graph), TU_CASE(peer_copy_stream),
        TU_CASE(same_ordinal_copy_stream), TU_CASE(same_ordinal_copy_graph), TU_CASE(peer_copy_graph),
        TU_CASE(peer_alloca_freed_without_waiting_for_its_worker), TU_CASE(submission_issues_the_peer_work_it_lets_go),
        TU_CASE(worker_issues_the_peer_work_it_lets_go), TU_CASE(held_ping_pong_across_devices),
        TU_CASE(graph_copies_reach_a_peers_transient_buffers), TU_CASE(context_unchanged_by_every_function),
        TU_CASE(devices_run_concurrently))
