/* base: status objects, timeouts and clocks, the allocator, threads and atomics.
 * Everything else in gpuhal stands on this module. */
#ifndef GPUHAL_SRC_BASE_H
#define GPUHAL_SRC_BASE_H

#include "prologue.h"

/* ---------------------------------------------------------------- status ---- */
/* A status is NULL for success; otherwise an owned object holding a code and a message
 * chain. The first line of the message is the original cause; annotations made on the
 * way up are appended after it, so the cause is never lost. */
typedef enum gpuhal_status_code_e {
  GPUHAL_STATUS_OK = 0,
  GPUHAL_STATUS_CANCELLED = 1,
  GPUHAL_STATUS_UNKNOWN = 2,
  GPUHAL_STATUS_INVALID_ARGUMENT = 3,
  GPUHAL_STATUS_DEADLINE_EXCEEDED = 4,
  GPUHAL_STATUS_NOT_FOUND = 5,
  GPUHAL_STATUS_ALREADY_EXISTS = 6,
  GPUHAL_STATUS_PERMISSION_DENIED = 7,
  GPUHAL_STATUS_RESOURCE_EXHAUSTED = 8,
  GPUHAL_STATUS_FAILED_PRECONDITION = 9,
  GPUHAL_STATUS_ABORTED = 10,
  GPUHAL_STATUS_OUT_OF_RANGE = 11,
  GPUHAL_STATUS_UNIMPLEMENTED = 12,
  GPUHAL_STATUS_INTERNAL = 13,
  GPUHAL_STATUS_UNAVAILABLE = 14,
  GPUHAL_STATUS_DATA_LOSS = 15
} gpuhal_status_code_t;

typedef struct gpuhal_status_s* gpuhal_status_t;

/* The longest label (gpuhal_semaphore_set_label, gpuhal_command_buffer_set_label) kept,
 * with its terminating NUL; longer ones are cut. */
#define GPUHAL_LABEL_MAX 48

/* The code of a status; GPUHAL_STATUS_OK for NULL. */
GPUHAL_API gpuhal_status_code_t gpuhal_status_code(gpuhal_status_t status);
/* The whole message, original cause first: "CODE: cause; context; more context".
 * "OK" for NULL. Valid until the status is freed. */
GPUHAL_API const char* gpuhal_status_message(gpuhal_status_t status);
/* "INVALID_ARGUMENT" and so on. */
GPUHAL_API const char* gpuhal_status_code_string(gpuhal_status_code_t code);
/* A new status; GPUHAL_STATUS_OK gives NULL. If memory for it cannot be had, a static
 * status of the same code is returned (still usable, still freeable). */
GPUHAL_API gpuhal_status_t gpuhal_status_make(gpuhal_status_code_t code, const char* format, ...)
    GPUHAL_PRINTF_ATTR(2, 3);
/* Appends "; context" to the message and returns the (possibly moved) status. NULL stays NULL. */
GPUHAL_API gpuhal_status_t gpuhal_status_annotate(gpuhal_status_t status, const char* format, ...)
    GPUHAL_PRINTF_ATTR(2, 3);
/* An independent copy (same code and message). */
GPUHAL_API gpuhal_status_t gpuhal_status_clone(gpuhal_status_t status);
/* Frees a status; NULL is fine. */
GPUHAL_API void gpuhal_status_free(gpuhal_status_t status);

/* -------------------------------------------------------------- timeouts ---- */
/* A timeout is an absolute deadline on the monotonic clock, so it can be passed down
 * through several waits without stretching. */
typedef struct gpuhal_timeout_t {
  int64_t deadline_ns; /* INT64_MIN: immediate; INT64_MAX: infinite */
} gpuhal_timeout_t;

GPUHAL_API gpuhal_timeout_t gpuhal_timeout_immediate(void);
GPUHAL_API gpuhal_timeout_t gpuhal_timeout_infinite(void);
/* ns from now; ns <= 0 is immediate. */
GPUHAL_API gpuhal_timeout_t gpuhal_timeout_relative_ns(int64_t ns);
/* An absolute deadline on gpuhal_now_ns()'s clock. */
GPUHAL_API gpuhal_timeout_t gpuhal_timeout_deadline_ns(int64_t monotonic_ns);
/* The monotonic clock gpuhal uses (CLOCK_MONOTONIC), in ns. */
GPUHAL_API int64_t gpuhal_now_ns(void);

/* ------------------------------------------------------------- allocator ---- */
/* Every allocation gpuhal makes goes through this (set per driver), but the driver object
 * itself: that comes from a process-wide pool (malloc), so that a released driver's handle
 * is still caught once its allocator is gone. Zeroed: malloc/free. */
typedef struct gpuhal_allocator_t {
  void* (*alloc)(size_t size, void* user); /* returns NULL on failure; 16-byte aligned */
  void (*free)(void* ptr, void* user);
  void* user;
} gpuhal_allocator_t;

/* ---------------------------------------------------------------- logging ---- */
typedef enum gpuhal_log_level_e {
  GPUHAL_LOG_NONE = 0,
  GPUHAL_LOG_ERROR = 1,
  GPUHAL_LOG_WARN = 2,
  GPUHAL_LOG_INFO = 3,
  GPUHAL_LOG_DEBUG = 4
} gpuhal_log_level_t;

/* A log sink: called from any gpuhal thread, must not call back into gpuhal. */
typedef void (*gpuhal_log_fn_t)(gpuhal_log_level_t level, const char* message, void* user);

/* ---- gpuhal:internal ---- */

#endif /* GPUHAL_SRC_BASE_H */
