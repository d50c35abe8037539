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

#endif /* GPUHAL_SRC_QUEUE_EXECUTE_H */
