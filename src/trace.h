/* trace: a Chrome-trace JSON timeline of what gpuhal did, for Perfetto (ui.perfetto.dev)
 * and chrome://tracing; and NVTX ranges for Nsight Systems.
 *
 * Turn it on with $GPUHAL_TRACE=file.json or gpuhal_driver_options_t.trace_path (a relative
 * path is made absolute when the driver is created: a later chdir does not move it). The
 * timeline has
 *   - one track per device queue (a "process" per GPU) with a GPU span for every queue
 *     operation that ran there (execute, alloca, dealloca, barrier), timed on the GPU by
 *     CUDA timing events, and inside each STREAM command buffer's span one span per
 *     command (the kernel's name for a dispatch);
 *   - one track per host thread with host spans: "submit <op>" on the thread that called
 *     gpuhal_queue_*, "issue <op>" where the op was put on its stream (the device's worker,
 *     or the submitting thread on the fast path), "host_call" where a host function ran;
 *   - flow arrows: from each submit to the GPU span it produced ("submit"), and from the
 *     span that signalled (semaphore, value) to each span that waited for it ("semaphore").
 * GPU times are put on the host clock through one base event per device, recorded and
 * synchronized when the device is created (later re-based every second of GPU time, so
 * float precision of cuEventElapsedTime never exceeds ~0.1 us).
 *
 * Memory is bounded: records go to a ring of GPUHAL_TRACE_CAPACITY entries (the oldest are
 * overwritten; the file says how many). The file is written when the driver is created
 * (an empty trace), when it is released (after its devices) and by
 * gpuhal_driver_trace_flush; always whole, to a temporary file of its own renamed over the
 * path, so a reader, other threads' flushes, other drivers and other processes tracing to
 * the same path only ever see a complete file (the last one written). Only a regular file
 * (or nothing) is replaced: a symlink is followed to its target, and a FIFO or a device
 * node is written in place, never turned into a regular file (a FIFO must have a reader
 * when the file is written, else that write fails at once).
 *
 * NVTX: when $NVTX_INJECTION64_PATH is set (Nsight Systems / Compute set it) or
 * $GPUHAL_NVTX=1, gpuhal loads $GPUHAL_NVTX_LIBRARY (default libnvToolsExt.so.1) at run
 * time and pushes a range for each host span, so Nsight shows gpuhal's work too. Without
 * the library nothing happens.
 *
 * With tracing off the cost is one NULL test of a pointer per queue operation. */
#ifndef GPUHAL_SRC_TRACE_H
#define GPUHAL_SRC_TRACE_H

#include "internal.h"
#include "device.h"
#include "semaphore.h"
#include "queue.h"
#include "command_buffer.h"

/* 1 when the driver writes a trace (GPUHAL_TRACE or options.trace_path); 0 otherwise. */
GPUHAL_API int gpuhal_driver_trace_enabled(gpuhal_driver_t* driver);
/* Writes the trace file now with everything recorded so far (the file is rewritten whole;
 * work still in flight appears in a later flush). The driver's release flushes too. Safe
 * from any thread; flushes of one driver run one at a time. FAILED_PRECONDITION when
 * tracing is off. */
GPUHAL_API gpuhal_status_t gpuhal_driver_trace_flush(gpuhal_driver_t* driver);

/* ---- gpuhal:internal ---- */

#include <unistd.h>
#define GPUHAL__TRACE_NAME 48

typedef struct gpuhal__trace_record_s {
  uint8_t kind;
  uint8_t role;
  uint8_t flags;
  int16_t device;
  uint32_t queue;
  uint32_t command;
  uint64_t thread;
  uint64_t span;
  uint64_t semaphore;
  uint64_t value;
  int64_t ts_ns;
  int64_t dur_ns;
  char name[GPUHAL__TRACE_NAME];
} gpuhal__trace_record_t;

typedef int (*gpuhal__nvtx_push_fn_t)(const char* message);
typedef int (*gpuhal__nvtx_pop_fn_t)(void);

/* One GPU's tracks: its process (pid GPUHAL__TRACE_DEVICE_PID + ordinal) and a thread per
 * queue (the most any device of the ordinal had). Past GPUHAL__TRACE_TRACKS_MAX ordinals
 * the tracks are written unnamed. */
#define GPUHAL__TRACE_TRACKS_MAX 64
typedef struct gpuhal__trace_track_s {
  int ordinal;
  uint32_t queues;
  char name[GPUHAL__TRACE_NAME];
} gpuhal__trace_track_t;

typedef struct gpuhal__trace_s {
  gpuhal_driver_t* driver;
  gpuhal__mutex_t mutex; /* guards the ring */
  /* One flush at a time per driver: a flush reads the whole ring and writes the whole
   * file; two at once would only race to the same rename. Taken before `mutex`. */
  gpuhal__mutex_t flush_mutex;
  gpuhal__trace_record_t* records;
  uint64_t capacity;
  uint64_t head; /* records ever written */
  /* Every device ordinal traced, for its track names: kept beside the ring (under `mutex`),
   * so a run that wraps the ring still names its GPU tracks. */
  gpuhal__trace_track_t tracks[GPUHAL__TRACE_TRACKS_MAX];
  uint32_t track_count;
  int64_t start_ns;
  uint64_t next_span; /* atomic */
  int json;           /* a file is written (else NVTX only) */
  gpuhal__nvtx_push_fn_t nvtx_push;
  gpuhal__nvtx_pop_fn_t nvtx_pop;
} gpuhal__trace_t;

/* The trace side of one queue action: its span id and its timing events. Pooled per device. */
typedef struct gpuhal__trace_action_s {
  struct gpuhal__trace_action_s* next_free;
  struct gpuhal__trace_action_s* next_all;
  uint64_t span;
  uint32_t queue;
  const char* name;
  char detail[GPUHAL__TRACE_NAME]; /* the GPU span's name */
  CUevent start, end;              /* timing events around the work (created on first use) */
  int timed;                       /* both were recorded by this issue */
  int64_t issued_ns;               /* host clock just before the start event was recorded */
  uint32_t mark_count, mark_capacity;
  CUevent* marks; /* STREAM command buffers: one before each command */
  char (*mark_names)[GPUHAL__TRACE_NAME];
} gpuhal__trace_action_t;

typedef struct gpuhal__trace_device_s {
  gpuhal__trace_t* trace;
  gpuhal_device_t* device;
  gpuhal__mutex_t mutex; /* guards the pool */
  gpuhal__trace_action_t* free_list;
  gpuhal__trace_action_t* all;
  gpuhal__trace_action_t* issuing; /* under the queue's issue_mutex: the action being issued */
  CUevent anchor;                  /* completion thread: GPU times are measured from it */
  int64_t anchor_ns;               /* its time on the host clock */
} gpuhal__trace_device_t;

GPUHAL__PRIVATE gpuhal_status_t gpuhal__trace_create(gpuhal_driver_t* driver);

/* Called when the driver goes (after its devices): writes the file and frees the trace. */
GPUHAL__PRIVATE void gpuhal__trace_destroy(gpuhal_driver_t* driver);

/* Device hook (device.h): before the queue exists. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__trace_device_create(gpuhal_device_t* device);

/* Device hook: after the queue drained (every action came back to the pool). */
GPUHAL__PRIVATE void gpuhal__trace_device_destroy(gpuhal_device_t* device);

/* Submit (any thread, before the action can run): gives the action its span and records
 * what it waits for and signals. Returns the span id (0 when the trace could not keep up). */
GPUHAL__PRIVATE uint64_t gpuhal__trace_submit_begin(gpuhal_device_t* device, gpuhal__action_t* a,
                                                    const gpuhal_semaphore_list_t* wait,
                                                    const gpuhal_semaphore_list_t* signal);

/* Submit returned (the action may already be gone: only the copied span id is used). */
GPUHAL__PRIVATE void gpuhal__trace_submit_end(gpuhal_device_t* device, uint32_t queue, const char* name, uint64_t span,
                                              int64_t t0);

/* Issue (under the issue mutex, context current), just before ops->issue. */
GPUHAL__PRIVATE int64_t gpuhal__trace_issue_begin(gpuhal_device_t* device, gpuhal__action_t* a, CUstream stream);

/* Issue done (or failed: then no GPU span). */
GPUHAL__PRIVATE void gpuhal__trace_issue_end(gpuhal_device_t* device, gpuhal__action_t* a, CUstream stream, int64_t t0,
                                             int failed);

/* Completion thread, once the action's work completed: resolves its GPU times. */
GPUHAL__PRIVATE void gpuhal__trace_action_complete(gpuhal_device_t* device, gpuhal__action_t* a);

/* Host-call thread: the host function of a gpuhal_queue_host_call ran from t0 to now. */
GPUHAL__PRIVATE void gpuhal__trace_host_call(gpuhal_device_t* device, gpuhal__action_t* a, int64_t t0);

/* Worker, when the action is released: back to the pool (events kept for reuse). */
GPUHAL__PRIVATE void gpuhal__trace_action_release(gpuhal_device_t* device, gpuhal__action_t* a);

/* Before each command of a STREAM command buffer is put on the stream. */
GPUHAL__PRIVATE void gpuhal__trace_command(gpuhal_device_t* device, CUstream stream, const gpuhal__cmd_t* cmd);

#endif /* GPUHAL_SRC_TRACE_H */
