/* Failures say where they came from (issue #17 item 4): a three-hop chain whose first
 * operation fails at issue; every later status keeps the original CUDA cause first, then
 * names the operation that failed (kind, label, submission number, device, queue) and each
 * hop it travelled through (which semaphore, by label, and which value). Hops submitted
 * before the ones they wait on; across two devices when there are two. A failure passed
 * down a chain of 2,000 hops keeps its cause and stays bounded. */
#include "test_internals.h"

#include "test_queue_util.h"

#define QP_WAIT_S 10

static uint64_t qp_one = 1;

/* Each of `parts` appears in `text`, in that order. */
static void qp_check_in_order(const char* text, const char* const* parts, int count) {
  const char* at = text;
  int i;
  for (i = 0; i < count; ++i) {
    const char* found = strstr(at, parts[i]);
    if (!found) {
      TU_FAIL_AT(__FILE__, __LINE__, "'%s' is not in what follows of:\n%s", parts[i], text);
      return;
    }
    at = found + strlen(parts[i]);
  }
}

static gpuhal_semaphore_t* qp_semaphore(gpuhal_driver_t* driver, const char* label) {
  gpuhal_semaphore_t* s = qc_semaphore_new(driver);
  if (s) TU_CHECK_OK(gpuhal_semaphore_set_label(s, label));
  return s;
}

TU_TEST(failure_names_its_origin_and_path) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t *d0 = NULL, *d1 = NULL;
  gpuhal_device_params_t params;
  gpuhal_executable_t *exe0 = NULL, *exe1 = NULL;
  gpuhal_kernel_t *k0 = NULL, *k1 = NULL;
  gpuhal_buffer_t *c0 = NULL, *c1 = NULL;
  gpuhal_command_buffer_t *middle = NULL, *last = NULL;
  gpuhal_semaphore_t *s1, *s2, *s3;
  gpuhal_status_t st;
  gpuhal_arg_t arg;
  uint32_t zero = 0;
  int devices = 0;
  char middle_who[128], last_who[128];
  memset(&params, 0, sizeof(params));
  params.queue_count = 2;
  st = gpuhal_driver_create(NULL, &driver);
  if (!st) st = gpuhal_driver_device_count(driver, &devices);
  if (!st) st = gpuhal_device_create(driver, 0, &params, &d0);
  if (!st && devices > 1) st = gpuhal_device_create(driver, 1, &params, &d1);
  if (!st && !d1) {
    d1 = d0;
    gpuhal_device_retain(d1);
  }
  if (!st) st = qc_load_kernel(d0, "atomic_inc", &exe0, &k0);
  if (!st) st = qc_load_kernel(d1, "atomic_inc", &exe1, &k1);
  if (!st) st = gpuhal_buffer_allocate(d0, GPUHAL_MEMORY_DEVICE, 4, &c0);
  if (!st) st = gpuhal_buffer_allocate(d1, GPUHAL_MEMORY_DEVICE, 4, &c1);
  if (!st) st = gpuhal_buffer_write(c0, 0, &zero, 4);
  if (!st) st = gpuhal_buffer_write(c1, 0, &zero, 4);
  arg = gpuhal_arg_buffer(c1, 0);
  if (!st) st = qc_record_dispatch(d1, GPUHAL_COMMAND_BUFFER_STREAM, k1, 1, 1, 1, &arg, &middle);
  arg = gpuhal_arg_buffer(c0, 0);
  if (!st) st = qc_record_dispatch(d0, GPUHAL_COMMAND_BUFFER_GRAPH, k0, 1, 1, 1, &arg, &last);
  if (!st) st = gpuhal_command_buffer_set_label(middle, "middle");
  if (!st) st = gpuhal_command_buffer_set_label(last, "last");
  if (st) {
    fprintf(stderr, "  fixture: %s\n", gpuhal_status_message(st));
    gpuhal_status_free(st);
    TU_SKIP("no device or test kernels");
  }
  s1 = qp_semaphore(driver, "weights");
  s2 = qp_semaphore(driver, "activations");
  s3 = qp_semaphore(driver, "out");
  TU_REQUIRE(s1 && s2 && s3);
  /* Last hop first (#1 on device 0), then the middle (#1 on d1, or #2 on a shared device),
   * then the op that fails at issue. */
  TU_CHECK_OK(gpuhal_queue_execute(d0, 0, gpuhal_semaphore_list_one(&s2, &qp_one),
                                   gpuhal_semaphore_list_one(&s3, &qp_one), last, NULL));
  TU_CHECK_OK(gpuhal_queue_execute(d1, 1, gpuhal_semaphore_list_one(&s1, &qp_one),
                                   gpuhal_semaphore_list_one(&s2, &qp_one), middle, NULL));
  TU_CHECK_OK(gpuhal__queue_submit(d0, 1, gpuhal_semaphore_list_empty(), gpuhal_semaphore_list_one(&s1, &qp_one),
                                   &qt_failing_ops, NULL));
  st = gpuhal_semaphore_wait(s3, 1, qt_seconds(QP_WAIT_S));
  snprintf(middle_who, sizeof(middle_who), "queue 'execute' 'middle' #%d (device %d, queue 1)", d1 == d0 ? 2 : 1,
           devices > 1 ? 1 : 0);
  snprintf(last_who, sizeof(last_who), "queue 'execute' 'last' #1 (device 0, queue 0)");
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_RESOURCE_EXHAUSTED);
  {
    char failing_who[96], p1[256], p2[256], p3[256], p4[256], p5[256];
    const char* parts[8];
    snprintf(failing_who, sizeof(failing_who), "queue 'test_failing' #%d (device 0, queue 1)", d1 == d0 ? 3 : 2);
    snprintf(p1, sizeof(p1), "issuing %s", failing_who);
    snprintf(p2, sizeof(p2), "failing semaphore 'weights' that %s was to signal to 1", failing_who);
    snprintf(p3, sizeof(p3), "while %s waited for semaphore 'weights' to reach 1", middle_who);
    snprintf(p4, sizeof(p4), "failing semaphore 'activations' that %s was to signal to 1", middle_who);
    snprintf(p5, sizeof(p5), "while %s waited for semaphore 'activations' to reach 1", last_who);
    parts[0] = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    parts[1] = p1;
    parts[2] = p2;
    parts[3] = p3;
    parts[4] = p4;
    parts[5] = p5;
    parts[6] = "failing semaphore 'out' that queue 'execute' 'last' #1 (device 0, queue 0) was to signal to 1";
    parts[7] = "while a host wait waited for semaphore 'out' to reach 1";
    qp_check_in_order(gpuhal_status_message(st), parts, 8);
    /* The original cause comes first. */
    TU_CHECK(strstr(gpuhal_status_message(st), "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES") <
             strstr(gpuhal_status_message(st), "issuing"));
  }
  gpuhal_status_free(st);
  TU_CHECK_OK(gpuhal_device_wait_idle(d0, qt_seconds(QP_WAIT_S)));
  TU_CHECK_OK(gpuhal_device_wait_idle(d1, qt_seconds(QP_WAIT_S)));
  gpuhal_command_buffer_release(middle);
  gpuhal_command_buffer_release(last);
  gpuhal_buffer_release(c0);
  gpuhal_buffer_release(c1);
  gpuhal_executable_release(exe0);
  gpuhal_executable_release(exe1);
  gpuhal_semaphore_release(s1);
  gpuhal_semaphore_release(s2);
  gpuhal_semaphore_release(s3);
  gpuhal_device_release(d1);
  gpuhal_device_release(d0);
  gpuhal_driver_release(driver);
}

enum { QP_HOPS = 2000 };

/* A failure passed down QP_HOPS host calls, each waiting on the semaphore of the one before
 * and signalling its own: each hop adds context, yet the last status starts with the cause,
 * ends with the last hop and stays under 4 KiB (the middle is cut). */
TU_TEST(long_failure_chain_is_bounded) {
  qt_fixture_t f;
  gpuhal_semaphore_t** sems;
  gpuhal_status_t st;
  const char* message;
  char last[96];
  int i;
  TU_REQUIRE(qt_open(&f, 2, NULL));
  sems = (gpuhal_semaphore_t**)calloc(QP_HOPS, sizeof(*sems));
  TU_REQUIRE(sems);
  for (i = 0; i < QP_HOPS; ++i) {
    char label[32];
    snprintf(label, sizeof(label), "hop %d", i);
    sems[i] = qp_semaphore(f.driver, label);
    TU_REQUIRE(sems[i]);
  }
  for (i = 1; i < QP_HOPS; ++i)
    TU_CHECK_OK(gpuhal_queue_host_call(f.device, (uint32_t)(i % 2), gpuhal_semaphore_list_one(&sems[i - 1], &qp_one),
                                       gpuhal_semaphore_list_one(&sems[i], &qp_one), qt_host_fn_nop, NULL));
  gpuhal_semaphore_fail(sems[0], gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "qp distinctive cause"));
  st = gpuhal_semaphore_wait(sems[QP_HOPS - 1], 1, qt_seconds(60));
  message = gpuhal_status_message(st);
  TU_CHECK_EQ_INT(gpuhal_status_code(st), GPUHAL_STATUS_DATA_LOSS);
  TU_CHECK(strncmp(message, "DATA_LOSS: qp distinctive cause", 31) == 0);
  TU_CHECK(strlen(message) < 4096);
  TU_CHECK_STR_CONTAINS(message, "; [...]");
  TU_CHECK_STR_CONTAINS(message, "waited for semaphore 'hop 0' to reach 1");
  snprintf(last, sizeof(last), "while a host wait waited for semaphore 'hop %d' to reach 1", QP_HOPS - 1);
  TU_CHECK_STR_CONTAINS(message, last);
  gpuhal_status_free(st);
  TU_CHECK_OK(gpuhal_device_wait_idle(f.device, qt_seconds(QP_WAIT_S)));
  for (i = 0; i < QP_HOPS; ++i) gpuhal_semaphore_release(sems[i]);
  free(sems);
  qt_close(&f);
}

TU_MAIN(TU_CASE(failure_names_its_origin_and_path), TU_CASE(long_failure_chain_is_bounded))
