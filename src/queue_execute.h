/* gpuhal - gpuhal_queue_execute: a command buffer's execute as a queue action (the binding
 * table it runs with, pooled per command buffer), and queue barriers. Part of the queue
 * (its rules are at the top of queue.h); declared with the command buffer calls. */
#ifndef GPUHAL_SRC_QUEUE_EXECUTE_H
#define GPUHAL_SRC_QUEUE_EXECUTE_H

#include "internal.h"
#include "queue.h"
#include "command_buffer.h"

/* ---- gpuhal:internal ---- */

/* The command buffer a queue action executes; NULL when it is no execute. */
GPUHAL__PRIVATE const gpuhal_command_buffer_t* gpuhal__action_command_buffer(const gpuhal__action_t* a);
/* The label of an action's command buffer (gpuhal_command_buffer_set_label); "" without one
 * (the hooks' action_label: the queue names operations in failures with it). */
GPUHAL__PRIVATE const char* gpuhal__action_label(const gpuhal__action_t* a);

/* GPUHAL_HANG_REPORT (queue_report.c): a host wait has waited `waited_ns`; logs the
 * driver's pending report at warning level. */
GPUHAL__PRIVATE void gpuhal__queue_hang_report(gpuhal_driver_t* driver, int64_t waited_ns);

#endif /* GPUHAL_SRC_QUEUE_EXECUTE_H */
