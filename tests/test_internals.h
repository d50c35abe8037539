/* The one way a test reaches gpuhal's internals: it includes this header (first, or after
 * the configuration macros it sets) instead of gpuhal.h, and so compiles the implementation
 * into itself. Every other test includes gpuhal.h alone and links the one implementation
 * the test build makes (tests/gpuhal_impl.c), so it can use nothing but the public API
 * (tests/CMakeLists.txt enforces this). Also the helpers built on internals that src/ does
 * not keep (src/ keeps no function only a test calls: tools/check_units.sh fails on one). */
#ifndef GPUHAL_TEST_INTERNALS_H
#define GPUHAL_TEST_INTERNALS_H

#ifdef TU_COUNT_WORK
/* Counts the steps of work src/ marks with GPUHAL__COUNT(name) (src/internal.h) under the
 * name the test watches, on any thread: a scaling test bounds a count, never a time (CI
 * machines are noisy). Defined before gpuhal.h, which no system header may precede. */
static const char* tu_count_watched;
static unsigned long long tu_count_total;
static int tu_count_same(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}
static void tu_count(const char* what) {
  const char* watched = __atomic_load_n(&tu_count_watched, __ATOMIC_ACQUIRE);
  if (watched && tu_count_same(what, watched)) __atomic_add_fetch(&tu_count_total, 1ull, __ATOMIC_RELAXED);
}
/* Starts counting `what` (NULL: stop) from zero. */
static void tu_count_watch(const char* what) {
  __atomic_store_n(&tu_count_watched, (const char*)0, __ATOMIC_RELEASE);
  __atomic_store_n(&tu_count_total, 0ull, __ATOMIC_RELAXED);
  __atomic_store_n(&tu_count_watched, what, __ATOMIC_RELEASE);
}
static unsigned long long tu_counted(void) { return __atomic_load_n(&tu_count_total, __ATOMIC_RELAXED); }
#define GPUHAL__COUNT(what) tu_count(#what)
#endif

#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

/* Each test uses some of these. */
#pragma GCC diagnostic ignored "-Wunused-function"

/* A queue action with no flags (the queue <-> command-buffer contract, queue.h). */
static gpuhal_status_t gpuhal__queue_submit(gpuhal_device_t* device, uint32_t queue_index, gpuhal_semaphore_list_t wait,
                                            gpuhal_semaphore_list_t signal, const gpuhal__action_ops_t* ops,
                                            void* user) {
  return gpuhal__queue_submit_ex(device, queue_index, wait, signal, ops, user, 0);
}

/* gpuhal__pool_alloc_current from any thread: it enters the device's context. */
static gpuhal_status_t gpuhal__pool_alloc_async(gpuhal_device_t* device, CUstream stream, uint64_t size,
                                                CUdeviceptr* out_ptr) {
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  *out_ptr = 0;
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  status = gpuhal__pool_alloc_current(device, stream, size, out_ptr);
  gpuhal__context_leave(device, &scope);
  return status;
}

/* For gpuhal_queue_dealloca: `buffer` must come from gpuhal_queue_alloca and must not
 * have been deallocated already. */
static gpuhal_status_t gpuhal__buffer_check_pending(const char* func, gpuhal_buffer_t* buffer) {
  if (!buffer->pending)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'buffer' was not allocated by gpuhal_queue_alloca (release it instead)",
                              func);
  if (gpuhal__atomic_load(&buffer->state) == GPUHAL__BUFFER_FREED)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION, "%s: argument 'buffer' was already deallocated", func);
  return NULL;
}

/* Issues a pending buffer's free on `stream` (queue_dealloca); the buffer becomes FREED. */
static gpuhal_status_t gpuhal__buffer_pending_free(gpuhal_buffer_t* buffer, gpuhal_device_t* device, CUstream stream) {
  if (gpuhal__atomic_load(&buffer->state) != GPUHAL__BUFFER_LIVE)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "queue_dealloca: the buffer's memory is not live (never allocated, or already freed)");
  GPUHAL__RETURN_IF_ERROR(gpuhal__pool_free_async(device, stream, buffer->address));
  gpuhal__atomic_store(&buffer->state, (int32_t)GPUHAL__BUFFER_FREED);
  return NULL;
}

/* Checks a whole disk-cache file held in memory and finds its payload, with the checks
 * gpuhal__disk_lookup makes while it reads a file (disk_cache.c). Pure: no I/O, no
 * allocation except for the status; safe on arbitrary bytes (the fuzzing entry point). NULL and the payload (a
 * pointer into `bytes`), or DATA_LOSS (corrupt, truncated, not ours) / FAILED_PRECONDITION
 * (another format version, or made for another key or image). */
static gpuhal_status_t gpuhal__disk_cache_parse(const void* bytes, size_t size, const gpuhal__disk_key_t* expected,
                                                const void** out_payload, size_t* out_payload_size) {
  const unsigned char* p = (const unsigned char*)bytes;
  gpuhal__disk_key_t found;
  const unsigned char* payload;
  uint64_t payload_size = 0;
  gpuhal_status_t st;
  *out_payload = NULL;
  *out_payload_size = 0;
  if (!p) size = 0;
  st = gpuhal__disk_header_check(p, size, expected, &found, &payload_size);
  if (st) return st;
  if (found.image_size && memcmp(found.image, expected->image, (size_t)found.image_size) != 0)
    return gpuhal__disk_image_mismatch(&found);
  payload = p + GPUHAL__DISK_HEADER_SIZE + (size_t)found.image_size;
  st = gpuhal__disk_payload_check(p, payload, (size_t)payload_size);
  if (st) return st;
  *out_payload = payload;
  *out_payload_size = (size_t)payload_size;
  return NULL;
}

#endif /* GPUHAL_TEST_INTERNALS_H */
