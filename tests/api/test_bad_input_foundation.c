/* Bad input to every public function of the foundation modules (driver, device, buffer):
 * each case returns INVALID_ARGUMENT or OUT_OF_RANGE (or FAILED_PRECONDITION for wrong
 * state) with a message naming the argument, and never crashes. One table row per case. */
#include "gpuhal.h"
#include "test_util.h"

/* Objects the rows use; set up once. released_* were released but are still quarantined
 * (their driver is alive), so using them must be caught. */
static gpuhal_driver_t* driver;
static gpuhal_driver_t* released_driver;
static gpuhal_device_t* device;
static gpuhal_device_t* released_device;
static gpuhal_buffer_t* buffer; /* 64 bytes of device memory */
static gpuhal_buffer_t* released_buffer;
static int device_count;
static unsigned char host[128];

typedef struct row_s {
  const char* what;
  gpuhal_status_t (*call)(void);
  gpuhal_status_code_t code;
  const char* needle;
  int needs_device;
} row_t;

#define ROW(name, body) \
  static gpuhal_status_t row_##name(void) { body }
#define OUT_DRIVER gpuhal_driver_t* d = NULL
#define OUT_DEVICE gpuhal_device_t* v = NULL
#define OUT_BUFFER gpuhal_buffer_t* b = NULL

/* gpuhal_driver_create */
static void only_free(void* p, void* user) {
  (void)user;
  free(p);
}
ROW(driver_create_null_out, return gpuhal_driver_create(NULL, NULL);)
ROW(driver_create_half_allocator, OUT_DRIVER; gpuhal_driver_options_t o; memset(&o, 0, sizeof(o));
    o.allocator.user = &o; o.allocator.free = only_free; (void)d; return gpuhal_driver_create(&o, &d);)
ROW(driver_create_bad_log_level, OUT_DRIVER; gpuhal_driver_options_t o; memset(&o, 0, sizeof(o));
    o.log_level = (gpuhal_log_level_t)99; return gpuhal_driver_create(&o, &d);)
/* gpuhal_driver_device_count */
ROW(count_null_driver, int c; return gpuhal_driver_device_count(NULL, &c);)
ROW(count_null_out, return gpuhal_driver_device_count(driver, NULL);)
ROW(count_released_driver, int c; return gpuhal_driver_device_count(released_driver, &c);)
ROW(count_wrong_type, int c; return gpuhal_driver_device_count((gpuhal_driver_t*)(void*)device, &c);)
/* gpuhal_driver_device_info */
ROW(info_null_driver, gpuhal_device_info_t i; return gpuhal_driver_device_info(NULL, 0, &i);)
ROW(info_null_out, return gpuhal_driver_device_info(driver, 0, NULL);)
ROW(info_negative_ordinal, gpuhal_device_info_t i; return gpuhal_driver_device_info(driver, -1, &i);)
ROW(info_ordinal_past_count, gpuhal_device_info_t i; return gpuhal_driver_device_info(driver, device_count, &i);)
ROW(info_huge_ordinal, gpuhal_device_info_t i; return gpuhal_driver_device_info(driver, 0x7fffffff, &i);)
ROW(info_released_driver, gpuhal_device_info_t i; return gpuhal_driver_device_info(released_driver, 0, &i);)
/* gpuhal_device_create */
ROW(device_create_null_driver, OUT_DEVICE; return gpuhal_device_create(NULL, 0, NULL, &v);)
ROW(device_create_null_out, return gpuhal_device_create(driver, 0, NULL, NULL);)
ROW(device_create_negative_ordinal, OUT_DEVICE; return gpuhal_device_create(driver, -1, NULL, &v);)
ROW(device_create_ordinal_past_count, OUT_DEVICE; return gpuhal_device_create(driver, device_count, NULL, &v);)
ROW(device_create_too_many_queues, OUT_DEVICE; gpuhal_device_params_t p; memset(&p, 0, sizeof(p));
    p.queue_count = GPUHAL_MAX_QUEUES + 1; return gpuhal_device_create(driver, 0, &p, &v);)
ROW(device_create_released_driver, OUT_DEVICE; return gpuhal_device_create(released_driver, 0, NULL, &v);)
/* gpuhal_device_info */
ROW(device_info_null_device, gpuhal_device_info_t i; return gpuhal_device_info(NULL, &i);)
ROW(device_info_null_out, return gpuhal_device_info(device, NULL);)
ROW(device_info_released, gpuhal_device_info_t i; return gpuhal_device_info(released_device, &i);)
ROW(device_info_wrong_type, gpuhal_device_info_t i; return gpuhal_device_info((gpuhal_device_t*)(void*)driver, &i);)
/* gpuhal_buffer_allocate */
ROW(allocate_null_device, OUT_BUFFER; return gpuhal_buffer_allocate(NULL, GPUHAL_MEMORY_DEVICE, 16, &b);)
ROW(allocate_null_out, return gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, 16, NULL);)
ROW(allocate_bad_kind, OUT_BUFFER; return gpuhal_buffer_allocate(device, (gpuhal_memory_kind_t)7, 16, &b);)
ROW(allocate_negative_kind, OUT_BUFFER; return gpuhal_buffer_allocate(device, (gpuhal_memory_kind_t)-1, 16, &b);)
ROW(allocate_zero_size, OUT_BUFFER; return gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, 0, &b);)
ROW(allocate_huge_size, OUT_BUFFER; return gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, UINT64_MAX, &b);)
ROW(allocate_more_than_the_device, OUT_BUFFER; gpuhal_device_info_t info;
    gpuhal_status_t s = gpuhal_device_info(device, &info); if (s) return s;
    return gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, info.total_memory + 1, &b);)
ROW(allocate_released_device, OUT_BUFFER; return gpuhal_buffer_allocate(released_device, GPUHAL_MEMORY_DEVICE, 16, &b);)
/* gpuhal_buffer_device_address */
ROW(trim_null_device, return gpuhal_device_trim(NULL);)
ROW(trim_released_device, return gpuhal_device_trim(released_device);)
ROW(trim_wrong_type, return gpuhal_device_trim((gpuhal_device_t*)(void*)driver);)
ROW(stats_null_device, gpuhal_memory_stats_t m; return gpuhal_device_memory_stats(NULL, &m);)
ROW(stats_null_out, return gpuhal_device_memory_stats(device, NULL);)
ROW(stats_released_device, gpuhal_memory_stats_t m; return gpuhal_device_memory_stats(released_device, &m);)
ROW(stats_wrong_type, gpuhal_memory_stats_t m; return gpuhal_device_memory_stats((gpuhal_device_t*)(void*)driver, &m);)

ROW(address_null_buffer, uint64_t a; return gpuhal_buffer_device_address(NULL, &a);)
ROW(address_null_out, return gpuhal_buffer_device_address(buffer, NULL);)
ROW(address_released, uint64_t a; return gpuhal_buffer_device_address(released_buffer, &a);)
ROW(address_wrong_type, uint64_t a; return gpuhal_buffer_device_address((gpuhal_buffer_t*)(void*)device, &a);)
/* gpuhal_buffer_read */
ROW(read_null_buffer, return gpuhal_buffer_read(NULL, 0, host, 1);)
ROW(read_null_dst, return gpuhal_buffer_read(buffer, 0, NULL, 1);)
ROW(read_zero_size, return gpuhal_buffer_read(buffer, 0, host, 0);)
ROW(read_offset_at_end, return gpuhal_buffer_read(buffer, 64, host, 1);)
ROW(read_offset_past_end, return gpuhal_buffer_read(buffer, 1000, host, 1);)
ROW(read_size_past_end, return gpuhal_buffer_read(buffer, 60, host, 5);)
ROW(read_size_overflows, return gpuhal_buffer_read(buffer, 1, host, UINT64_MAX);)
ROW(read_offset_overflows, return gpuhal_buffer_read(buffer, UINT64_MAX, host, 2);)
ROW(read_released, return gpuhal_buffer_read(released_buffer, 0, host, 1);)
/* gpuhal_buffer_write */
ROW(write_null_buffer, return gpuhal_buffer_write(NULL, 0, host, 1);)
ROW(write_null_src, return gpuhal_buffer_write(buffer, 0, NULL, 1);)
ROW(write_zero_size, return gpuhal_buffer_write(buffer, 0, host, 0);)
ROW(write_offset_at_end, return gpuhal_buffer_write(buffer, 64, host, 1);)
ROW(write_size_past_end, return gpuhal_buffer_write(buffer, 0, host, 65);)
ROW(write_size_overflows, return gpuhal_buffer_write(buffer, 63, host, UINT64_MAX);)
ROW(write_released, return gpuhal_buffer_write(released_buffer, 0, host, 1);)

#define INVALID GPUHAL_STATUS_INVALID_ARGUMENT
#define RANGE GPUHAL_STATUS_OUT_OF_RANGE
static const row_t rows[] = {
    {"driver_create(NULL out)", row_driver_create_null_out, INVALID, "'out_driver' must not be NULL", 0},
    {"driver_create(half allocator)", row_driver_create_half_allocator, INVALID, "'options->allocator'", 0},
    {"driver_create(log level 99)", row_driver_create_bad_log_level, RANGE, "'options->log_level'", 0},
    {"device_count(NULL)", row_count_null_driver, INVALID, "'driver' must not be NULL", 0},
    {"device_count(NULL out)", row_count_null_out, INVALID, "'out_count' must not be NULL", 0},
    {"device_count(released)", row_count_released_driver, INVALID, "'driver' was already released", 0},
    {"device_count(a device)", row_count_wrong_type, INVALID, "not a gpuhal object of the right type", 1},
    {"driver_device_info(NULL)", row_info_null_driver, INVALID, "'driver' must not be NULL", 0},
    {"driver_device_info(NULL out)", row_info_null_out, INVALID, "'out_info' must not be NULL", 0},
    {"driver_device_info(-1)", row_info_negative_ordinal, RANGE, "'ordinal' is -1", 0},
    {"driver_device_info(count)", row_info_ordinal_past_count, RANGE, "'ordinal'", 0},
    {"driver_device_info(INT_MAX)", row_info_huge_ordinal, RANGE, "'ordinal'", 0},
    {"driver_device_info(released)", row_info_released_driver, INVALID, "already released", 0},
    {"device_create(NULL driver)", row_device_create_null_driver, INVALID, "'driver' must not be NULL", 0},
    {"device_create(NULL out)", row_device_create_null_out, INVALID, "'out_device' must not be NULL", 0},
    {"device_create(-1)", row_device_create_negative_ordinal, RANGE, "'ordinal' is -1", 0},
    {"device_create(count)", row_device_create_ordinal_past_count, RANGE, "'ordinal'", 0},
    {"device_create(65 queues)", row_device_create_too_many_queues, RANGE, "'params->queue_count'", 1},
    {"device_create(released driver)", row_device_create_released_driver, INVALID, "already released", 0},
    {"device_info(NULL)", row_device_info_null_device, INVALID, "'device' must not be NULL", 0},
    {"device_info(NULL out)", row_device_info_null_out, INVALID, "'out_info' must not be NULL", 1},
    {"device_info(released)", row_device_info_released, INVALID, "already released", 1},
    {"device_info(a driver)", row_device_info_wrong_type, INVALID, "right type", 0},
    {"buffer_allocate(NULL device)", row_allocate_null_device, INVALID, "'device' must not be NULL", 0},
    {"buffer_allocate(NULL out)", row_allocate_null_out, INVALID, "'out_buffer' must not be NULL", 1},
    {"buffer_allocate(kind 7)", row_allocate_bad_kind, INVALID, "'kind'", 1},
    {"buffer_allocate(kind -1)", row_allocate_negative_kind, INVALID, "'kind'", 1},
    {"buffer_allocate(size 0)", row_allocate_zero_size, INVALID, "'size' must be > 0", 1},
    {"buffer_allocate(UINT64_MAX)", row_allocate_huge_size, RANGE, "'size'", 1},
    {"buffer_allocate(total + 1)", row_allocate_more_than_the_device, RANGE, "'size' exceeds the device", 1},
    {"buffer_allocate(released device)", row_allocate_released_device, INVALID, "already released", 1},
    {"device_trim(NULL)", row_trim_null_device, INVALID, "'device' must not be NULL", 0},
    {"device_trim(released)", row_trim_released_device, INVALID, "already released", 1},
    {"device_trim(a driver)", row_trim_wrong_type, INVALID, "right type", 0},
    {"device_memory_stats(NULL)", row_stats_null_device, INVALID, "'device' must not be NULL", 0},
    {"device_memory_stats(NULL out)", row_stats_null_out, INVALID, "'out_stats' must not be NULL", 1},
    {"device_memory_stats(released)", row_stats_released_device, INVALID, "already released", 1},
    {"device_memory_stats(a driver)", row_stats_wrong_type, INVALID, "right type", 0},
    {"device_address(NULL)", row_address_null_buffer, INVALID, "'buffer' must not be NULL", 0},
    {"device_address(NULL out)", row_address_null_out, INVALID, "'out_address' must not be NULL", 1},
    {"device_address(released)", row_address_released, INVALID, "already released", 1},
    {"device_address(a device)", row_address_wrong_type, INVALID, "right type", 1},
    {"buffer_read(NULL)", row_read_null_buffer, INVALID, "'buffer' must not be NULL", 0},
    {"buffer_read(NULL dst)", row_read_null_dst, INVALID, "'dst' must not be NULL", 1},
    {"buffer_read(size 0)", row_read_zero_size, INVALID, "'size' must be > 0", 1},
    {"buffer_read(offset == size)", row_read_offset_at_end, RANGE, "'offset' is 64, past the end", 1},
    {"buffer_read(offset 1000)", row_read_offset_past_end, RANGE, "'offset' is 1000", 1},
    {"buffer_read(60 + 5)", row_read_size_past_end, RANGE, "'size' is 5, but only 4 bytes follow", 1},
    {"buffer_read(1 + UINT64_MAX)", row_read_size_overflows, RANGE, "'size'", 1},
    {"buffer_read(UINT64_MAX + 2)", row_read_offset_overflows, RANGE, "'offset'", 1},
    {"buffer_read(released)", row_read_released, INVALID, "already released", 1},
    {"buffer_write(NULL)", row_write_null_buffer, INVALID, "'buffer' must not be NULL", 0},
    {"buffer_write(NULL src)", row_write_null_src, INVALID, "'src' must not be NULL", 1},
    {"buffer_write(size 0)", row_write_zero_size, INVALID, "'size' must be > 0", 1},
    {"buffer_write(offset == size)", row_write_offset_at_end, RANGE, "'offset'", 1},
    {"buffer_write(0 + 65)", row_write_size_past_end, RANGE, "'size' is 65", 1},
    {"buffer_write(63 + UINT64_MAX)", row_write_size_overflows, RANGE, "'size'", 1},
    {"buffer_write(released)", row_write_released, INVALID, "already released", 1},
};

static int setup(void) {
  gpuhal_status_t s;
  s = gpuhal_driver_create(NULL, &driver);
  if (!s) s = gpuhal_driver_create(NULL, &released_driver);
  if (!s) s = gpuhal_driver_device_count(driver, &device_count);
  if (!s && device_count > 0) {
    s = gpuhal_device_create(driver, 0, NULL, &device);
    if (!s) s = gpuhal_device_create(driver, 0, NULL, &released_device);
    if (!s) s = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, 64, &buffer);
    if (!s) s = gpuhal_buffer_allocate(device, GPUHAL_MEMORY_HOST_PINNED, 64, &released_buffer);
  }
  if (s) {
    fprintf(stderr, "  setup: %s\n", gpuhal_status_message(s));
    gpuhal_status_free(s);
    return 0;
  }
  gpuhal_driver_release(released_driver);
  gpuhal_device_release(released_device);
  gpuhal_buffer_release(released_buffer);
  return 1;
}

static void teardown(void) {
  gpuhal_buffer_release(buffer);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
  buffer = NULL;
  device = NULL;
  driver = NULL;
}

TU_TEST(every_row) {
  size_t i;
  int ran = 0;
  (void)tu_softcuda;
  if (!setup()) {
    teardown();
    TU_SKIP("no CUDA driver");
  }
  for (i = 0; i < sizeof(rows) / sizeof(rows[0]); ++i) {
    gpuhal_status_t s;
    if (rows[i].needs_device && !device) continue;
    s = rows[i].call();
    ran++;
    if (gpuhal_status_code(s) != rows[i].code || !strstr(gpuhal_status_message(s), rows[i].needle)) {
      TU_FAIL_AT(__FILE__, __LINE__, "%s -> '%s', expected %s mentioning '%s'", rows[i].what, gpuhal_status_message(s),
                 gpuhal_status_code_string(rows[i].code), rows[i].needle);
    }
    gpuhal_status_free(s);
  }
  fprintf(stderr, "  %d rows\n", ran);
  /* Nothing above disturbed the good objects. */
  if (buffer) {
    TU_CHECK_OK(gpuhal_buffer_write(buffer, 0, host, 64));
    TU_CHECK_OK(gpuhal_buffer_read(buffer, 0, host, 64));
  }
  teardown();
}

/* Functions that return no status answer bad input with a neutral value, and releasing
 * or retaining NULL or a released object does nothing. */
TU_TEST(non_status_functions) {
  if (!setup()) {
    teardown();
    TU_SKIP("no CUDA driver");
  }
  gpuhal_driver_retain(NULL);
  gpuhal_driver_release(NULL);
  gpuhal_driver_retain(released_driver);
  gpuhal_driver_release(released_driver);
  gpuhal_device_retain(NULL);
  gpuhal_device_release(NULL);
  gpuhal_buffer_retain(NULL);
  gpuhal_buffer_release(NULL);
  TU_CHECK(gpuhal_driver_has_feature(NULL, GPUHAL_FEATURE_MEMORY_POOLS) == 0);
  TU_CHECK(gpuhal_driver_has_feature(released_driver, GPUHAL_FEATURE_MEMORY_POOLS) == 0);
  TU_CHECK(gpuhal_driver_has_feature(driver, (gpuhal_feature_t)99) == 0);
  TU_CHECK(gpuhal_driver_has_feature(driver, (gpuhal_feature_t)-1) == 0);
  TU_CHECK(strcmp(gpuhal_driver_cuda_library(NULL), "") == 0);
  TU_CHECK(strcmp(gpuhal_driver_cuda_library(released_driver), "") == 0);
  TU_CHECK(gpuhal_driver_cuda_library(driver)[0] != 0);
  TU_CHECK(gpuhal_device_queue_count(NULL) == 0);
  TU_CHECK(gpuhal_device_driver(NULL) == NULL);
  TU_CHECK(gpuhal_buffer_size(NULL) == 0);
  TU_CHECK(gpuhal_buffer_kind(NULL) == GPUHAL_MEMORY_DEVICE);
  TU_CHECK(gpuhal_buffer_device(NULL) == NULL);
  TU_CHECK(gpuhal_buffer_host_pointer(NULL) == NULL);
  if (device) {
    gpuhal_device_retain(released_device);
    gpuhal_device_release(released_device);
    gpuhal_buffer_retain(released_buffer);
    gpuhal_buffer_release(released_buffer);
    TU_CHECK(gpuhal_device_queue_count(released_device) == 0);
    TU_CHECK(gpuhal_device_driver(released_device) == NULL);
    TU_CHECK(gpuhal_buffer_size(released_buffer) == 0);
    TU_CHECK(gpuhal_buffer_device(released_buffer) == NULL);
    TU_CHECK(gpuhal_buffer_host_pointer(released_buffer) == NULL);
    TU_CHECK(gpuhal_buffer_host_pointer(buffer) == NULL); /* device memory */
    TU_CHECK(gpuhal_device_queue_count(device) == 1);
  }
  teardown();
}

TU_MAIN(TU_CASE(every_row), TU_CASE(non_status_functions))
