/* Bad input for the public functions the other bad-input tables leave out: the channel
 * handle functions, the recording commands given no command buffer, and list arguments
 * whose arrays are missing. Each returns the documented status naming the argument (or the
 * documented neutral value for functions without a status), never a crash. */
#include "gpuhal.h"
#include "test_util.h"

TU_TEST(channel_functions_refuse_bad_handles) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_channel_t* channel = NULL;
  gpuhal_channel_id_t id;
  memset(&id, 0, sizeof(id));
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_CHECK_STATUS(gpuhal_channel_create_rank(device, &id, 0, 1, NULL), GPUHAL_STATUS_INVALID_ARGUMENT, "out_channel");
  TU_CHECK_STATUS(gpuhal_channel_create_rank(NULL, &id, 0, 1, &channel), GPUHAL_STATUS_INVALID_ARGUMENT, "device");
  TU_CHECK_STATUS(gpuhal_channel_create_rank(device, NULL, 0, 1, &channel), GPUHAL_STATUS_INVALID_ARGUMENT, "id");
  TU_CHECK_STATUS(gpuhal_channel_create_rank(device, &id, 0, 0, &channel), GPUHAL_STATUS_INVALID_ARGUMENT, "size");
  TU_CHECK(channel == NULL);
  /* A device is not a channel: the getters give their neutral values, retain/release ignore it. */
  TU_CHECK_EQ_INT(gpuhal_channel_size(NULL), -1);
  TU_CHECK_EQ_INT(gpuhal_channel_rank(NULL), -1);
  TU_CHECK(gpuhal_channel_device(NULL) == NULL);
  TU_CHECK_EQ_INT(gpuhal_channel_size((gpuhal_channel_t*)(void*)device), -1);
  TU_CHECK(gpuhal_channel_device((gpuhal_channel_t*)(void*)device) == NULL);
  gpuhal_channel_retain(NULL);
  gpuhal_channel_release(NULL);
  gpuhal_channel_retain((gpuhal_channel_t*)(void*)device);
  gpuhal_channel_release((gpuhal_channel_t*)(void*)device);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_TEST(recording_commands_need_a_command_buffer) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_device_t* device = NULL;
  gpuhal_buffer_t* buffer = NULL;
  uint32_t pattern = 7;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_REQUIRE_OK(gpuhal_device_create(driver, 0, NULL, &device));
  TU_REQUIRE_OK(gpuhal_buffer_allocate(device, GPUHAL_MEMORY_DEVICE, 64, &buffer));
  TU_CHECK_STATUS(gpuhal_cmd_copy(NULL, gpuhal_ref_buffer(buffer, 0), gpuhal_ref_buffer(buffer, 32), 16),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "command_buffer");
  TU_CHECK_STATUS(gpuhal_cmd_fill(NULL, gpuhal_ref_buffer(buffer, 0), 16, &pattern, 4), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "command_buffer");
  TU_CHECK_STATUS(gpuhal_cmd_update(NULL, &pattern, gpuhal_ref_buffer(buffer, 0), 4), GPUHAL_STATUS_INVALID_ARGUMENT,
                  "command_buffer");
  /* Not a command buffer at all. */
  TU_CHECK_STATUS(
      gpuhal_cmd_fill((gpuhal_command_buffer_t*)(void*)buffer, gpuhal_ref_buffer(buffer, 0), 16, &pattern, 4),
      GPUHAL_STATUS_INVALID_ARGUMENT, "command_buffer");
  gpuhal_buffer_release(buffer);
  gpuhal_device_release(device);
  gpuhal_driver_release(driver);
}

TU_TEST(semaphore_lists_need_their_arrays) {
  gpuhal_driver_t* driver = NULL;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_semaphore_list_t list;
  uint64_t one = 1;
  TU_REQUIRE_OK(gpuhal_driver_create(NULL, &driver));
  TU_REQUIRE_OK(gpuhal_semaphore_create(driver, 0, &s));
  list.count = 1;
  list.semaphores = NULL;
  list.values = &one;
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ALL, list, gpuhal_timeout_immediate()),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "semaphores");
  list.semaphores = &s;
  list.values = NULL;
  TU_CHECK_STATUS(gpuhal_semaphores_wait(GPUHAL_WAIT_ANY, list, gpuhal_timeout_immediate()),
                  GPUHAL_STATUS_INVALID_ARGUMENT, "values");
  TU_CHECK_STATUS(
      gpuhal_semaphores_wait((gpuhal_wait_mode_t)7, gpuhal_semaphore_list_one(&s, &one), gpuhal_timeout_immediate()),
      GPUHAL_STATUS_INVALID_ARGUMENT, "mode");
  gpuhal_semaphore_release(s);
  gpuhal_driver_release(driver);
}

TU_MAIN(TU_CASE(channel_functions_refuse_bad_handles), TU_CASE(recording_commands_need_a_command_buffer),
        TU_CASE(semaphore_lists_need_their_arrays))
