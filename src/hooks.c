/* gpuhal - the hooks table (see device.h, "hooks"): the calls that go up the module order,
 * bound here, after every module that defines one. Part of the implementation only. */
#include "device.h"
#include "memory.h"
#include "semaphore.h"
#include "queue.h"
#include "queue_execute.h"
#include "module_cache.h"
#include "executable.h"
#include "builtin_kernels.h"
#include "trace.h"

static const gpuhal__hooks_t gpuhal__hooks_table = {
    gpuhal__trace_create,
    gpuhal__trace_destroy,
    gpuhal__driver_flush_deferred,
    gpuhal__driver_release_context,
    gpuhal__semaphore_driver_destroy,
    gpuhal__trace_device_create,
    gpuhal__trace_device_destroy,
    gpuhal__memory_state_create,
    gpuhal__memory_state_destroy,
    gpuhal__module_cache_create,
    gpuhal__module_cache_destroy,
    gpuhal__queue_state_create,
    gpuhal__queue_state_destroy,
    gpuhal__command_buffer_device_ready,
    gpuhal__queue_settle,
    gpuhal__queue_owns_thread,
    gpuhal__queue_park_retry,
    gpuhal__trace_submit_begin,
    gpuhal__trace_submit_end,
    gpuhal__trace_issue_begin,
    gpuhal__trace_issue_end,
    gpuhal__trace_action_complete,
    gpuhal__trace_host_call,
    gpuhal__trace_action_release,
    gpuhal__trace_command,
    gpuhal__queue_hang_report,
    gpuhal__action_label,
    gpuhal__executable_release_ref,
};

GPUHAL__PRIVATE const gpuhal__hooks_t* gpuhal__hooks(void) { return &gpuhal__hooks_table; }
