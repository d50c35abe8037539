/* trace: recording the Chrome-trace timeline and NVTX ranges, and writing the file
 * (trace.h). */
#include "trace.h"
#include "symbols.h"
#include "status.h"
#include "disk_cache.h"
#include "queue_execute.h"

#ifndef GPUHAL_TRACE_CAPACITY
#define GPUHAL_TRACE_CAPACITY 65536 /* records (about 120 bytes each) */
#endif
#define GPUHAL__TRACE_REBASE_MS 1000.0f
#define GPUHAL__TRACE_HOST_PID 1
#define GPUHAL__TRACE_DEVICE_PID 100 /* + ordinal */

typedef enum gpuhal__trace_kind_e {
  GPUHAL__TRACE_HOST_SPAN = 1, /* a span on a host thread */
  GPUHAL__TRACE_GPU_SPAN = 2,  /* a span on a device queue; `command` 0: the operation, i+1: its command i */
  GPUHAL__TRACE_SIGNAL = 3,    /* span `span` signals (semaphore, value) */
  GPUHAL__TRACE_WAIT = 4       /* span `span` waits for (semaphore, value) */
} gpuhal__trace_kind_t;

typedef enum gpuhal__trace_role_e {
  GPUHAL__TRACE_ROLE_USER = 0,     /* an application thread */
  GPUHAL__TRACE_ROLE_WORKER = 1,   /* a device's worker */
  GPUHAL__TRACE_ROLE_HOST_CALL = 2 /* a device's host-call thread */
} gpuhal__trace_role_t;

/* Host span flags. */
enum {
  GPUHAL__TRACE_SUBMIT = 1, /* a submit: the source of a "submit" flow to the GPU span */
  GPUHAL__TRACE_ANCHOR = 2  /* stands for the operation itself when it has no GPU span (host calls) */
};

static uint64_t gpuhal__trace_thread_key(void) { return gpuhal__thread_self_id(); }

/* ---- the ring ---- */

static void gpuhal__trace_put(gpuhal__trace_t* trace, const gpuhal__trace_record_t* record) {
  if (!trace->json) return;
  gpuhal__mutex_lock(&trace->mutex);
  trace->records[trace->head % trace->capacity] = *record;
  trace->head++;
  gpuhal__mutex_unlock(&trace->mutex);
}

/* Copies a name, truncated to fit (snprintf would make gcc warn about the truncation). */
static void gpuhal__trace_copy_name(char* dst, size_t size, const char* src) {
  size_t i = 0;
  for (; src && src[i] && i + 1 < size; ++i) dst[i] = src[i];
  dst[i] = 0;
}

static void gpuhal__trace_record_init(gpuhal__trace_record_t* r, gpuhal__trace_kind_t kind, const char* name) {
  memset(r, 0, sizeof(*r));
  r->kind = (uint8_t)kind;
  r->device = -1;
  gpuhal__trace_copy_name(r->name, sizeof(r->name), name);
}

static void gpuhal__trace_host_span(gpuhal__trace_t* trace, gpuhal_device_t* device, gpuhal__trace_role_t role,
                                    unsigned flags, uint32_t queue, uint64_t span, const char* verb, const char* what,
                                    int64_t t0, int64_t t1) {
  gpuhal__trace_record_t r;
  gpuhal__trace_record_init(&r, GPUHAL__TRACE_HOST_SPAN, NULL);
  {
    char text[2 * GPUHAL__TRACE_NAME];
    snprintf(text, sizeof(text), "%.40s%s%.40s", verb, verb[0] ? " " : "", what);
    gpuhal__trace_copy_name(r.name, sizeof(r.name), text);
  }
  r.role = (uint8_t)role;
  r.flags = (uint8_t)flags;
  r.device = (int16_t)device->ordinal;
  r.queue = queue;
  r.span = span;
  r.thread = gpuhal__trace_thread_key();
  r.ts_ns = t0;
  r.dur_ns = t1 - t0;
  gpuhal__trace_put(trace, &r);
}

static void gpuhal__trace_nvtx_push(gpuhal__trace_t* trace, const char* verb, const char* what) {
  char text[96];
  if (!trace->nvtx_push) return;
  snprintf(text, sizeof(text), "gpuhal %s %s", verb, what);
  trace->nvtx_push(text);
}
static void gpuhal__trace_nvtx_pop(gpuhal__trace_t* trace) {
  if (trace->nvtx_pop) trace->nvtx_pop();
}

/* ---- the driver's trace ---- */

static void gpuhal__trace_load_nvtx(gpuhal__trace_t* trace) {
  const char* lib = gpuhal__getenv("GPUHAL_NVTX_LIBRARY");
  const char* want = gpuhal__getenv("GPUHAL_NVTX");
  void* handle;
  void* push;
  void* pop;
  if (want && !strcmp(want, "0")) return;
  if (!want && !gpuhal__getenv("NVTX_INJECTION64_PATH")) return;
  handle = dlopen(lib ? lib : "libnvToolsExt.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    gpuhal__log(&trace->driver->logger, GPUHAL_LOG_INFO, "NVTX: '%s' not loaded; no NVTX ranges",
                lib ? lib : "libnvToolsExt.so.1");
    return;
  }
  push = dlsym(handle, "nvtxRangePushA");
  pop = dlsym(handle, "nvtxRangePop");
  if (!push || !pop) return; /* the library stays loaded, as CUDA's does */
  GPUHAL__STORE_FN(trace->nvtx_push, push);
  GPUHAL__STORE_FN(trace->nvtx_pop, pop);
  gpuhal__log(&trace->driver->logger, GPUHAL_LOG_INFO, "NVTX ranges on");
}

/* Called by gpuhal_driver_create: starts tracing when a path is set, or NVTX is wanted. */
static gpuhal_status_t gpuhal__trace_write(gpuhal__trace_t* trace);
static void gpuhal__trace_free(gpuhal_driver_t* driver, gpuhal__trace_t* trace);

GPUHAL__PRIVATE gpuhal_status_t gpuhal__trace_create(gpuhal_driver_t* driver) {
  gpuhal__trace_t* trace = NULL;
  gpuhal_status_t status;
  int json = driver->trace_path[0] != 0;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(&driver->allocator, sizeof(*trace), "trace state", (void**)&trace));
  trace->driver = driver;
  trace->json = json;
  gpuhal__trace_load_nvtx(trace);
  if (!json && !trace->nvtx_push) {
    gpuhal__free(&driver->allocator, trace);
    return NULL; /* tracing off: driver->trace stays NULL */
  }
  if (json) {
    trace->capacity = GPUHAL_TRACE_CAPACITY > 16 ? GPUHAL_TRACE_CAPACITY : 16;
    trace->records = (gpuhal__trace_record_t*)gpuhal__alloc(&driver->allocator,
                                                            (size_t)trace->capacity * sizeof(gpuhal__trace_record_t));
    if (!trace->records) {
      gpuhal__free(&driver->allocator, trace);
      return gpuhal__status_oom("trace ring", (size_t)GPUHAL_TRACE_CAPACITY * sizeof(gpuhal__trace_record_t));
    }
  }
  gpuhal__mutex_init(&trace->mutex);
  gpuhal__mutex_init(&trace->flush_mutex);
  trace->start_ns = gpuhal_now_ns();
  /* Fail now, not at the end of the run, when the file cannot be written; and write it
   * the way every flush does (whole, then renamed), so the path holds a valid (empty)
   * trace from the start instead of the truncated file another driver or process
   * tracing to the same path would otherwise see. */
  status = json ? gpuhal__trace_write(trace) : NULL;
  if (status && gpuhal_status_code(status) == GPUHAL_STATUS_RESOURCE_EXHAUSTED) {
    /* Out of host memory (the snapshot): nothing is wrong with the path, so say what ran out. */
    gpuhal__trace_free(driver, trace);
    return gpuhal_status_annotate(status, "gpuhal_driver_create: writing the trace file '%s'", driver->trace_path);
  }
  if (status) {
    gpuhal_status_t invalid = gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                                 "gpuhal_driver_create: the trace file '%s' (GPUHAL_TRACE or "
                                                 "options.trace_path) cannot be written: %s",
                                                 driver->trace_path, gpuhal_status_message(status));
    gpuhal_status_free(status);
    gpuhal__trace_free(driver, trace);
    return invalid;
  }
  driver->trace = trace;
  if (json) gpuhal__log(&driver->logger, GPUHAL_LOG_INFO, "tracing to '%s'", driver->trace_path);
  return NULL;
}

static void gpuhal__trace_free(gpuhal_driver_t* driver, gpuhal__trace_t* trace) {
  gpuhal__mutex_destroy(&trace->flush_mutex);
  gpuhal__mutex_destroy(&trace->mutex);
  gpuhal__free(&driver->allocator, trace->records);
  gpuhal__free(&driver->allocator, trace);
}

GPUHAL__PRIVATE void gpuhal__trace_destroy(gpuhal_driver_t* driver) {
  gpuhal__trace_t* trace = driver->trace;
  if (!trace) return;
  if (trace->json) {
    gpuhal_status_t status = gpuhal__trace_write(trace);
    if (status) {
      gpuhal__log(&driver->logger, GPUHAL_LOG_ERROR, "writing the trace: %s", gpuhal_status_message(status));
      gpuhal_status_free(status);
    }
  }
  driver->trace = NULL;
  gpuhal__trace_free(driver, trace);
}

GPUHAL_API int gpuhal_driver_trace_enabled(gpuhal_driver_t* driver) {
  if (!gpuhal__object_is_live(driver, GPUHAL__MAGIC_DRIVER)) return 0;
  return driver->trace && driver->trace->json;
}

GPUHAL_API gpuhal_status_t gpuhal_driver_trace_flush(gpuhal_driver_t* driver) {
  GPUHAL__CHECK_HANDLE(driver, GPUHAL__MAGIC_DRIVER);
  if (!driver->trace || !driver->trace->json)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_driver_trace_flush: tracing is off for this driver (set GPUHAL_TRACE=file.json "
                              "or gpuhal_driver_options_t.trace_path)");
  return gpuhal__trace_write(driver->trace);
}

/* ---- the device's trace: timing events on its context ---- */

/* The anchor: an event whose GPU time is known on the host clock. It completed between
 * the record call and the synchronize's return; of a few tries the tightest window is kept
 * (a few us on a GPU; a loaded CPU can stretch a window, hence tries) and its START taken:
 * the estimate is never later than the truth, so no GPU span is drawn later than it ran
 * (an arrow from it to the host never points back), and gpuhal__trace_correct_anchor moves
 * it up as issues prove it early. */
static gpuhal_status_t gpuhal__trace_device_start(void* arg) {
  gpuhal__trace_device_t* td = (gpuhal__trace_device_t*)arg;
  gpuhal_device_t* device = td->device;
  CUevent trial = NULL;
  gpuhal_status_t status = NULL;
  int64_t best = INT64_MAX;
  int i;
  GPUHAL__CU_RETURN(device->cu, cuEventCreate, (&td->anchor, 0));
  status = GPUHAL__CU(device->cu, cuEventCreate, (&trial, 0));
  for (i = 0; !status && i < 16 && best > 20000; ++i) {
    int64_t t0 = gpuhal_now_ns(), t1;
    status = GPUHAL__CU(device->cu, cuEventRecord, (trial, device->streams[0]));
    if (!status) status = GPUHAL__CU(device->cu, cuEventSynchronize, (trial));
    t1 = gpuhal_now_ns();
    if (!status && t1 - t0 < best) { /* the trial becomes the anchor */
      CUevent swap = td->anchor;
      td->anchor = trial;
      trial = swap;
      best = t1 - t0;
      td->anchor_ns = t0;
    }
  }
  if (trial) device->cu->cuEventDestroy(trial);
  return status;
}

static void gpuhal__trace_destroy_event(gpuhal_device_t* device, CUevent* event) {
  if (*event) device->cu->cuEventDestroy(*event);
  *event = NULL;
}

static gpuhal_status_t gpuhal__trace_device_stop(void* arg) {
  gpuhal__trace_device_t* td = (gpuhal__trace_device_t*)arg;
  gpuhal_device_t* device = td->device;
  gpuhal__trace_action_t* ta = td->all;
  while (ta) {
    gpuhal__trace_action_t* next = ta->next_all;
    uint32_t i;
    gpuhal__trace_destroy_event(device, &ta->start);
    gpuhal__trace_destroy_event(device, &ta->end);
    for (i = 0; i < ta->mark_capacity; ++i) gpuhal__trace_destroy_event(device, &ta->marks[i]);
    gpuhal__free(device->allocator, ta->marks);
    gpuhal__free(device->allocator, ta->mark_names);
    gpuhal__free(device->allocator, ta);
    ta = next;
  }
  td->all = NULL;
  td->free_list = NULL;
  gpuhal__trace_destroy_event(device, &td->anchor);
  return NULL;
}

/* Notes the device's tracks (devices of one ordinal share them). */
static void gpuhal__trace_add_track(gpuhal__trace_t* trace, const gpuhal_device_t* device) {
  uint32_t i;
  gpuhal__mutex_lock(&trace->mutex);
  for (i = 0; i < trace->track_count && trace->tracks[i].ordinal != device->ordinal; ++i) {
  }
  if (i == trace->track_count && i < GPUHAL__TRACE_TRACKS_MAX) {
    trace->tracks[i].ordinal = device->ordinal;
    trace->tracks[i].queues = 0;
    gpuhal__trace_copy_name(trace->tracks[i].name, sizeof(trace->tracks[i].name), device->info.name);
    trace->track_count++;
  }
  if (i < trace->track_count && device->queue_count > trace->tracks[i].queues)
    trace->tracks[i].queues = device->queue_count;
  gpuhal__mutex_unlock(&trace->mutex);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__trace_device_create(gpuhal_device_t* device) {
  gpuhal__trace_t* trace = device->driver->trace;
  gpuhal__trace_device_t* td = NULL;
  gpuhal_status_t status;
  if (!trace) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, sizeof(*td), "device trace state", (void**)&td));
  td->trace = trace;
  td->device = device;
  gpuhal__mutex_init(&td->mutex);
  if (trace->json) {
    status = gpuhal__worker_call(device, gpuhal__trace_device_start, td);
    if (status) {
      gpuhal_status_free(gpuhal__worker_call(device, gpuhal__trace_device_stop, td));
      gpuhal__mutex_destroy(&td->mutex);
      gpuhal__free(device->allocator, td);
      return gpuhal_status_annotate(status, "starting the trace of device %d", device->ordinal);
    }
  }
  gpuhal__trace_add_track(trace, device);
  device->trace = td;
  return NULL;
}

GPUHAL__PRIVATE void gpuhal__trace_device_destroy(gpuhal_device_t* device) {
  gpuhal__trace_device_t* td = device->trace;
  if (!td) return;
  device->trace = NULL;
  gpuhal_status_free(gpuhal__worker_call(device, gpuhal__trace_device_stop, td));
  gpuhal__mutex_destroy(&td->mutex);
  gpuhal__free(device->allocator, td);
}

/* ---- hooks of the queue (queue.h) ---- */

static gpuhal__trace_action_t* gpuhal__trace_action_acquire(gpuhal__trace_device_t* td) {
  gpuhal__trace_action_t* ta;
  gpuhal__mutex_lock(&td->mutex);
  ta = td->free_list;
  if (ta) {
    td->free_list = ta->next_free;
  } else {
    ta = (gpuhal__trace_action_t*)gpuhal__calloc(td->device->allocator, sizeof(*ta));
    if (ta) {
      ta->next_all = td->all;
      td->all = ta;
    }
  }
  gpuhal__mutex_unlock(&td->mutex);
  return ta;
}

/* The GPU span's name: the operation, with the command buffer's kind for executes. */
static void gpuhal__trace_describe(gpuhal__trace_action_t* ta, const gpuhal__action_t* a) {
  const gpuhal_command_buffer_t* cb = gpuhal__action_command_buffer(a);
  if (cb) {
    snprintf(ta->detail, sizeof(ta->detail), "execute %s (%u commands)", gpuhal__cb_is_graph(cb) ? "graph" : "stream",
             (unsigned)cb->cmd_count);
  } else {
    gpuhal__trace_copy_name(ta->detail, sizeof(ta->detail), a->ops->name);
  }
}

static void gpuhal__trace_list(gpuhal__trace_t* trace, gpuhal__trace_kind_t kind, uint64_t span,
                               gpuhal_semaphore_list_t list) {
  uint32_t i;
  for (i = 0; i < list.count; ++i) {
    gpuhal__trace_record_t r;
    gpuhal__trace_record_init(&r, kind, NULL);
    r.span = span;
    r.semaphore = (uint64_t)(uintptr_t)list.semaphores[i];
    r.value = list.values[i];
    gpuhal__trace_put(trace, &r);
  }
}

GPUHAL__PRIVATE uint64_t gpuhal__trace_submit_begin(gpuhal_device_t* device, gpuhal__action_t* a,
                                                    const gpuhal_semaphore_list_t* wait,
                                                    const gpuhal_semaphore_list_t* signal) {
  gpuhal__trace_device_t* td = device->trace;
  gpuhal__trace_action_t* ta = gpuhal__trace_action_acquire(td);
  if (!ta) return 0;
  ta->span = gpuhal__atomic_add(&td->trace->next_span, 1);
  ta->queue = a->queue_index;
  ta->name = a->ops->name;
  ta->timed = 0;
  ta->mark_count = 0;
  gpuhal__trace_describe(ta, a);
  gpuhal__trace_list(td->trace, GPUHAL__TRACE_WAIT, ta->span, *wait);
  gpuhal__trace_list(td->trace, GPUHAL__TRACE_SIGNAL, ta->span, *signal);
  a->trace = ta;
  gpuhal__trace_nvtx_push(td->trace, "submit", a->ops->name);
  return ta->span;
}

GPUHAL__PRIVATE void gpuhal__trace_submit_end(gpuhal_device_t* device, uint32_t queue, const char* name, uint64_t span,
                                              int64_t t0) {
  gpuhal__trace_t* trace = device->trace->trace;
  gpuhal__trace_nvtx_pop(trace);
  gpuhal__trace_host_span(trace, device,
                          gpuhal__on_worker(device) ? GPUHAL__TRACE_ROLE_WORKER : GPUHAL__TRACE_ROLE_USER,
                          GPUHAL__TRACE_SUBMIT, queue, span, "submit", name, t0, gpuhal_now_ns());
}

static int gpuhal__trace_event_record(gpuhal_device_t* device, CUevent* event, CUstream stream) {
  if (!*event && device->cu->cuEventCreate(event, 0) != CUDA_SUCCESS) {
    *event = NULL;
    return 0;
  }
  return device->cu->cuEventRecord(*event, stream) == CUDA_SUCCESS;
}

GPUHAL__PRIVATE int64_t gpuhal__trace_issue_begin(gpuhal_device_t* device, gpuhal__action_t* a, CUstream stream) {
  gpuhal__trace_device_t* td = device->trace;
  gpuhal__trace_action_t* ta = a->trace;
  td->issuing = ta;
  if (!ta) return 0;
  gpuhal__trace_nvtx_push(td->trace, "issue", ta->name);
  ta->mark_count = 0;
  ta->issued_ns = gpuhal_now_ns(); /* before the record: the event cannot complete earlier */
  ta->timed = td->trace->json && a->ops->issue && gpuhal__trace_event_record(device, &ta->start, stream);
  return gpuhal_now_ns();
}

GPUHAL__PRIVATE void gpuhal__trace_issue_end(gpuhal_device_t* device, gpuhal__action_t* a, CUstream stream, int64_t t0,
                                             int failed) {
  gpuhal__trace_device_t* td = device->trace;
  gpuhal__trace_action_t* ta = a->trace;
  td->issuing = NULL;
  if (!ta) return;
  if (ta->timed) ta->timed = !failed && gpuhal__trace_event_record(device, &ta->end, stream);
  gpuhal__trace_nvtx_pop(td->trace);
  gpuhal__trace_host_span(td->trace, device,
                          gpuhal__on_worker(device) ? GPUHAL__TRACE_ROLE_WORKER : GPUHAL__TRACE_ROLE_USER, 0,
                          a->queue_index, ta->span, "issue", ta->name, t0, gpuhal_now_ns());
}

/* Milliseconds from the device's anchor to `event` on the host clock (ns). */
static int gpuhal__trace_event_time(gpuhal__trace_device_t* td, CUevent event, int64_t* out_ns) {
  float ms = 0.0f;
  if (td->device->cu->cuEventElapsedTime(&ms, td->anchor, event) != CUDA_SUCCESS) return 0;
  *out_ns = td->anchor_ns + (int64_t)((double)ms * 1e6);
  return 1;
}

static void gpuhal__trace_gpu_span(gpuhal__trace_device_t* td, const gpuhal__trace_action_t* ta, uint32_t command,
                                   const char* name, int64_t t0, int64_t t1) {
  gpuhal__trace_record_t r;
  gpuhal__trace_record_init(&r, GPUHAL__TRACE_GPU_SPAN, name);
  r.device = (int16_t)td->device->ordinal;
  r.queue = ta->queue;
  r.span = ta->span;
  r.command = command;
  r.ts_ns = t0;
  r.dur_ns = t1 > t0 ? t1 - t0 : 0;
  gpuhal__trace_put(td->trace, &r);
}

/* The anchor's host time is an estimate (the middle of a window around a sync), and GPU
 * times have the resolution of cuEventElapsedTime. One bound is certain: the work started
 * after the host began recording its start event. A span found before that moves there,
 * and the anchor with it for the spans after it. Only ever later: spans of one stream are
 * converted with anchors that never decrease, so they stay in order, and no correction
 * overshoots (the corrected anchor is at most the true one). */
static void gpuhal__trace_correct_anchor(gpuhal__trace_device_t* td, const gpuhal__trace_action_t* ta, int64_t* t0,
                                         int64_t* t1) {
  int64_t shift = ta->issued_ns - *t0;
  if (shift <= 0) return;
  *t0 += shift;
  *t1 += shift;
  td->anchor_ns += shift;
}

GPUHAL__PRIVATE void gpuhal__trace_action_complete(gpuhal_device_t* device, gpuhal__action_t* a) {
  gpuhal__trace_device_t* td = device->trace;
  gpuhal__trace_action_t* ta = a->trace;
  int64_t t0, t1, m0, m1;
  uint32_t i;
  if (!td || !ta || !ta->timed) return;
  if (!gpuhal__trace_event_time(td, ta->start, &t0) || !gpuhal__trace_event_time(td, ta->end, &t1)) return;
  gpuhal__trace_correct_anchor(td, ta, &t0, &t1);
  gpuhal__trace_gpu_span(td, ta, 0, ta->detail, t0, t1);
  for (i = 0; i < ta->mark_count; ++i) {
    if (!gpuhal__trace_event_time(td, ta->marks[i], &m0)) continue;
    if (i + 1 == ta->mark_count || !gpuhal__trace_event_time(td, ta->marks[i + 1], &m1)) m1 = t1;
    gpuhal__trace_gpu_span(td, ta, i + 1, ta->mark_names[i], m0, m1);
  }
  if ((double)(t0 - td->anchor_ns) > (double)GPUHAL__TRACE_REBASE_MS * 1e6) {
    /* Re-base on this start event (keeps float milliseconds precise); the old anchor
     * becomes this action's start event for its next use. */
    CUevent old = td->anchor;
    td->anchor = ta->start;
    td->anchor_ns = t0;
    ta->start = old;
  }
}

GPUHAL__PRIVATE void gpuhal__trace_host_call(gpuhal_device_t* device, gpuhal__action_t* a, int64_t t0) {
  gpuhal__trace_device_t* td = device->trace;
  if (!td || !a->trace) return;
  gpuhal__trace_host_span(td->trace, device, GPUHAL__TRACE_ROLE_HOST_CALL, GPUHAL__TRACE_ANCHOR, a->queue_index,
                          a->trace->span, "", "host_call", t0, gpuhal_now_ns());
}

GPUHAL__PRIVATE void gpuhal__trace_action_release(gpuhal_device_t* device, gpuhal__action_t* a) {
  gpuhal__trace_device_t* td = device->trace;
  gpuhal__trace_action_t* ta = a->trace;
  a->trace = NULL;
  if (!td || !ta) return;
  gpuhal__mutex_lock(&td->mutex);
  ta->next_free = td->free_list;
  td->free_list = ta;
  gpuhal__mutex_unlock(&td->mutex);
}

/* ---- hook of command buffers (command_buffer_stream.c): STREAM commands ---- */

static const char* gpuhal__trace_command_name(const gpuhal__cmd_t* cmd) {
  switch (cmd->type) {
    case GPUHAL__CMD_DISPATCH: return cmd->kernel_name ? cmd->kernel_name : "dispatch";
    case GPUHAL__CMD_COPY: return "copy";
    case GPUHAL__CMD_FILL: return "fill";
    case GPUHAL__CMD_UPDATE: return "update";
    case GPUHAL__CMD_NATIVE: return "collective";
    default: return NULL; /* barriers do no work on a stream */
  }
}

GPUHAL__PRIVATE void gpuhal__trace_command(gpuhal_device_t* device, CUstream stream, const gpuhal__cmd_t* cmd) {
  gpuhal__trace_device_t* td = device->trace;
  gpuhal__trace_action_t* ta = td ? td->issuing : NULL;
  const char* name = gpuhal__trace_command_name(cmd);
  if (!ta || !ta->timed || !name) return;
  if (ta->mark_count == ta->mark_capacity) {
    gpuhal_status_t st = gpuhal__grow32_pair(device->allocator, &ta->mark_capacity, ta->mark_count + 1,
                                             (void**)&ta->mark_names, sizeof(*ta->mark_names), "trace command names",
                                             (void**)&ta->marks, sizeof(*ta->marks), "trace command events");
    if (st) {
      gpuhal_status_free(st); /* the command goes untimed */
      return;
    }
  }
  if (!gpuhal__trace_event_record(device, &ta->marks[ta->mark_count], stream)) return;
  gpuhal__trace_copy_name(ta->mark_names[ta->mark_count], GPUHAL__TRACE_NAME, name);
  ta->mark_count++;
}

/* ---- writing the JSON ---- */

/* A span of the file, by track. */
typedef struct gpuhal__trace_out_span_s {
  const gpuhal__trace_record_t* r;
  int pid, tid;
  int64_t ts, dur;  /* after the nesting fix-up */
  int64_t order_ts; /* the operation's start: keeps an operation and its commands together */
} gpuhal__trace_out_span_t;

typedef struct gpuhal__trace_thread_s {
  uint64_t key;
  int tid;
  const gpuhal__trace_record_t* first;
} gpuhal__trace_thread_t;

typedef struct gpuhal__trace_writer_s {
  FILE* f;
  int first;
  int64_t origin;
} gpuhal__trace_writer_t;

/* JSON must be UTF-8, and names and paths need not be (a library path is any bytes, a name
 * cut to fit can end inside a character): each byte that starts no well-formed character
 * becomes U+FFFD, so parsers take the file and the rest of the text stays readable. */
static void gpuhal__trace_json_string(FILE* f, const char* s) {
  fputc('"', f);
  while (*s) {
    unsigned char c = (unsigned char)*s;
    size_t n = gpuhal__utf8_char_len(s);
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else if (n == 0)
      fputs("\\ufffd", f);
    else
      fwrite(s, 1, n, f);
    s += n ? n : 1;
  }
  fputc('"', f);
}

/* Starts an event object: {"ph":"X","name":...,"pid":..,"tid":.. (the caller closes it). */
static void gpuhal__trace_begin_event(gpuhal__trace_writer_t* w, const char* ph, const char* name, int pid, int tid) {
  fprintf(w->f, "%s\n{\"ph\":\"%s\",\"name\":", w->first ? "" : ",", ph);
  w->first = 0;
  gpuhal__trace_json_string(w->f, name);
  fprintf(w->f, ",\"pid\":%d,\"tid\":%d", pid, tid);
}

static double gpuhal__trace_us(const gpuhal__trace_writer_t* w, int64_t ns) {
  return (double)(ns - w->origin) / 1000.0;
}

static void gpuhal__trace_meta(gpuhal__trace_writer_t* w, const char* what, int pid, int tid, const char* name,
                               int sort) {
  gpuhal__trace_begin_event(w, "M", what, pid, tid);
  fprintf(w->f, ",\"args\":{\"name\":");
  gpuhal__trace_json_string(w->f, name);
  fprintf(w->f, "}}");
  if (sort >= 0) {
    gpuhal__trace_begin_event(w, "M", !strcmp(what, "process_name") ? "process_sort_index" : "thread_sort_index", pid,
                              tid);
    fprintf(w->f, ",\"args\":{\"sort_index\":%d}}", sort);
  }
}

static int gpuhal__trace_span_cmp(const void* pa, const void* pb) {
  const gpuhal__trace_out_span_t* a = (const gpuhal__trace_out_span_t*)pa;
  const gpuhal__trace_out_span_t* b = (const gpuhal__trace_out_span_t*)pb;
  if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
  if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
  if (a->order_ts != b->order_ts) return a->order_ts < b->order_ts ? -1 : 1;
  if (a->r->span != b->r->span) return a->r->span < b->r->span ? -1 : 1;
  if (a->r->command != b->r->command) return a->r->command < b->r->command ? -1 : 1;
  return 0;
}

/* GPU spans of one track come from timestamps that float rounding can nudge: make every
 * operation start at or after the previous one's end, and every command lie inside its
 * operation, after the previous command, so the track nests exactly. Host spans keep their
 * clock's times: one thread's spans nest as its calls do (a submit's issue inside the
 * submit), which the format allows, and moving them would squash the inner ones. A command
 * whose operation the ring dropped (written first, it goes first) is dropped too: it has
 * nothing to nest in, and clamped into whatever came before it would show work where none
 * ran. Returns how many spans are left, in order at the front of `s`. */
static size_t gpuhal__trace_fix_nesting(gpuhal__trace_out_span_t* s, size_t n) {
  size_t i, kept = 0;
  int pid = -1, tid = -1, have_parent = 0;
  uint64_t parent_span = 0;
  int64_t op_end = INT64_MIN, cmd_end = INT64_MIN, parent_ts = 0, parent_end = 0;
  for (i = 0; i < n; ++i) {
    gpuhal__trace_out_span_t o = s[i];
    int64_t end = o.ts + o.dur;
    if (o.r->kind == GPUHAL__TRACE_GPU_SPAN && (o.pid != pid || o.tid != tid)) {
      /* a new track: nothing of the last one bounds it */
      pid = o.pid;
      tid = o.tid;
      op_end = INT64_MIN;
      have_parent = 0;
    }
    if (o.r->kind != GPUHAL__TRACE_GPU_SPAN) {
      /* a host span: kept as recorded */
    } else if (o.r->command == 0) {
      if (o.ts < op_end) o.ts = op_end;
      if (end < o.ts) end = o.ts;
      o.dur = end - o.ts;
      op_end = end;
      have_parent = 1;
      parent_span = o.r->span;
      parent_ts = o.ts;
      parent_end = end;
      cmd_end = parent_ts;
    } else {
      if (!have_parent || o.r->span != parent_span) continue;
      if (o.ts < cmd_end) o.ts = cmd_end;
      if (o.ts < parent_ts) o.ts = parent_ts;
      if (o.ts > parent_end) o.ts = parent_end;
      if (end > parent_end) end = parent_end;
      if (end < o.ts) end = o.ts;
      o.dur = end - o.ts;
      cmd_end = end;
    }
    s[kept++] = o;
  }
  return kept;
}

typedef struct gpuhal__trace_signal_s {
  uint64_t semaphore, value;
  const gpuhal__trace_out_span_t* at;
} gpuhal__trace_signal_t;

static int gpuhal__trace_signal_cmp(const void* pa, const void* pb) {
  const gpuhal__trace_signal_t* a = (const gpuhal__trace_signal_t*)pa;
  const gpuhal__trace_signal_t* b = (const gpuhal__trace_signal_t*)pb;
  if (a->semaphore != b->semaphore) return a->semaphore < b->semaphore ? -1 : 1;
  if (a->value != b->value) return a->value < b->value ? -1 : 1;
  return 0;
}

static int gpuhal__trace_anchor_cmp(const void* pa, const void* pb) {
  const gpuhal__trace_out_span_t* const* a = (const gpuhal__trace_out_span_t* const*)pa;
  const gpuhal__trace_out_span_t* const* b = (const gpuhal__trace_out_span_t* const*)pb;
  if ((*a)->r->span != (*b)->r->span) return (*a)->r->span < (*b)->r->span ? -1 : 1;
  return 0;
}

/* The span that stands for operation `span` in flows: its GPU span, else its host call. */
static const gpuhal__trace_out_span_t* gpuhal__trace_find_anchor(gpuhal__trace_out_span_t** anchors, size_t n,
                                                                 uint64_t span) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (anchors[mid]->r->span < span)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && anchors[lo]->r->span == span ? anchors[lo] : NULL;
}

/* Where a flow end sits in a span: viewers bind it to the span that encloses it, so inside,
 * just after the start (the order of starts is causal: a waiter starts after its signaller
 * ended, a GPU span after its submit began; midpoints need not be). */
static int64_t gpuhal__trace_flow_ts(const gpuhal__trace_out_span_t* s) { return s->ts + GPUHAL__MIN(s->dur / 2, 50); }

/* A flow arrow from `from` (at from_ts, inside it) to `to`. */
static void gpuhal__trace_flow(gpuhal__trace_writer_t* w, const char* cat, uint64_t id,
                               const gpuhal__trace_out_span_t* from, int64_t from_ts,
                               const gpuhal__trace_out_span_t* to, uint64_t value) {
  gpuhal__trace_begin_event(w, "s", cat, from->pid, from->tid);
  fprintf(w->f, ",\"cat\":\"%s\",\"id\":%llu,\"ts\":%.3f", cat, (unsigned long long)id, gpuhal__trace_us(w, from_ts));
  if (value) fprintf(w->f, ",\"args\":{\"value\":%llu}", (unsigned long long)value);
  fprintf(w->f, "}");
  gpuhal__trace_begin_event(w, "f", cat, to->pid, to->tid);
  fprintf(w->f, ",\"cat\":\"%s\",\"id\":%llu,\"bp\":\"e\",\"ts\":%.3f}", cat, (unsigned long long)id,
          gpuhal__trace_us(w, gpuhal__trace_flow_ts(to)));
}

static int gpuhal__trace_ts_cmp(const void* pa, const void* pb) {
  const gpuhal__trace_out_span_t* a = *(const gpuhal__trace_out_span_t* const*)pa;
  const gpuhal__trace_out_span_t* b = *(const gpuhal__trace_out_span_t* const*)pb;
  if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
  if (a->dur != b->dur) return a->dur > b->dur ? -1 : 1; /* parents before their children */
  return 0;
}

static void gpuhal__trace_write_span(gpuhal__trace_writer_t* w, const gpuhal__trace_out_span_t* s) {
  const gpuhal__trace_record_t* r = s->r;
  gpuhal__trace_begin_event(w, "X", r->name, s->pid, s->tid);
  fprintf(w->f, ",\"cat\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"span\":%llu,\"device\":%d,\"queue\":%u",
          r->kind == GPUHAL__TRACE_GPU_SPAN ? "gpu" : "host", gpuhal__trace_us(w, s->ts), (double)s->dur / 1000.0,
          (unsigned long long)r->span, (int)r->device, (unsigned)r->queue);
  if (r->command) fprintf(w->f, ",\"command\":%u", (unsigned)(r->command - 1));
  fprintf(w->f, "}}");
}

/* Writes everything that is not a span: process and track names. */
static void gpuhal__trace_write_tracks(gpuhal__trace_writer_t* w, const gpuhal__trace_track_t* tracks, size_t n,
                                       const gpuhal__trace_thread_t* threads, size_t thread_count) {
  size_t i;
  char name[160];
  snprintf(name, sizeof(name), "host (pid %ld)", (long)getpid());
  gpuhal__trace_meta(w, "process_name", GPUHAL__TRACE_HOST_PID, 0, name, 0);
  for (i = 0; i < thread_count; ++i) {
    const gpuhal__trace_record_t* r = threads[i].first;
    if (r->role == GPUHAL__TRACE_ROLE_WORKER)
      snprintf(name, sizeof(name), "gpuhal worker (device %d)", (int)r->device);
    else if (r->role == GPUHAL__TRACE_ROLE_HOST_CALL)
      snprintf(name, sizeof(name), "gpuhal host calls (device %d)", (int)r->device);
    else
      snprintf(name, sizeof(name), "thread %d", threads[i].tid);
    gpuhal__trace_meta(w, "thread_name", GPUHAL__TRACE_HOST_PID, threads[i].tid, name, threads[i].tid);
  }
  for (i = 0; i < n; ++i) {
    const gpuhal__trace_track_t* t = &tracks[i];
    uint32_t q;
    snprintf(name, sizeof(name), "GPU %d: %.48s", t->ordinal, t->name);
    gpuhal__trace_meta(w, "process_name", GPUHAL__TRACE_DEVICE_PID + t->ordinal, 0, name, 1 + t->ordinal);
    for (q = 0; q < t->queues; ++q) {
      snprintf(name, sizeof(name), "queue %u", (unsigned)q);
      gpuhal__trace_meta(w, "thread_name", GPUHAL__TRACE_DEVICE_PID + t->ordinal, (int)q, name, (int)q);
    }
  }
}

/* The small tid of a host thread key (threads in order of first appearance). */
static int gpuhal__trace_tid(gpuhal__trace_thread_t* threads, size_t* count, const gpuhal__trace_record_t* r) {
  size_t i;
  for (i = 0; i < *count; ++i)
    if (threads[i].key == r->thread) return threads[i].tid;
  threads[*count].key = r->thread;
  threads[*count].tid = (int)*count + 1;
  threads[*count].first = r;
  return threads[(*count)++].tid;
}

typedef struct gpuhal__trace_snapshot_s {
  gpuhal__trace_record_t* records;
  size_t count;
  gpuhal__trace_track_t tracks[GPUHAL__TRACE_TRACKS_MAX];
  size_t track_count;
  uint64_t dropped;
  gpuhal__trace_out_span_t* spans;
  size_t span_count;
  gpuhal__trace_thread_t* threads;
  size_t thread_count;
  gpuhal__trace_out_span_t** anchors; /* flow ends by span id */
  size_t anchor_count;
  gpuhal__trace_out_span_t** by_ts;
  gpuhal__trace_signal_t* signals;
  size_t signal_count;
} gpuhal__trace_snapshot_t;

static void gpuhal__trace_snapshot_free(const gpuhal_allocator_t* a, gpuhal__trace_snapshot_t* s) {
  gpuhal__free(a, s->records);
  gpuhal__free(a, s->spans);
  gpuhal__free(a, s->threads);
  gpuhal__free(a, s->anchors);
  gpuhal__free(a, s->by_ts);
  gpuhal__free(a, s->signals);
}

/* Copies the ring (oldest first) and sorts out spans, threads and flow ends. */
static gpuhal_status_t gpuhal__trace_snapshot(gpuhal__trace_t* trace, gpuhal__trace_snapshot_t* s) {
  const gpuhal_allocator_t* a = &trace->driver->allocator;
  size_t i, n, bytes;
  memset(s, 0, sizeof(*s));
  gpuhal__mutex_lock(&trace->mutex);
  n = (size_t)(trace->head < trace->capacity ? trace->head : trace->capacity);
  bytes = (n ? n : 1) * sizeof(gpuhal__trace_record_t);
  s->records = (gpuhal__trace_record_t*)gpuhal__alloc(a, bytes);
  if (s->records) {
    size_t first = (size_t)(trace->head - n) % (size_t)trace->capacity;
    for (i = 0; i < n; ++i) s->records[i] = trace->records[(first + i) % trace->capacity];
    s->dropped = trace->head - n;
  }
  memcpy(s->tracks, trace->tracks, trace->track_count * sizeof(trace->tracks[0]));
  s->track_count = trace->track_count;
  gpuhal__mutex_unlock(&trace->mutex);
  if (!s->records) return gpuhal__status_oom("trace snapshot", bytes);
  s->count = n;
  s->spans = (gpuhal__trace_out_span_t*)gpuhal__calloc(a, (n ? n : 1) * sizeof(*s->spans));
  s->threads = (gpuhal__trace_thread_t*)gpuhal__calloc(a, (n ? n : 1) * sizeof(*s->threads));
  s->anchors = (gpuhal__trace_out_span_t**)gpuhal__calloc(a, (n ? n : 1) * sizeof(*s->anchors));
  s->by_ts = (gpuhal__trace_out_span_t**)gpuhal__calloc(a, (n ? n : 1) * sizeof(*s->by_ts));
  s->signals = (gpuhal__trace_signal_t*)gpuhal__calloc(a, (n ? n : 1) * sizeof(*s->signals));
  if (!s->spans || !s->threads || !s->anchors || !s->by_ts || !s->signals)
    return gpuhal__status_oom("trace snapshot",
                              (n ? n : 1) * (sizeof(*s->spans) + sizeof(*s->threads) + sizeof(*s->anchors) +
                                             sizeof(*s->by_ts) + sizeof(*s->signals)));
  for (i = 0; i < n; ++i) {
    const gpuhal__trace_record_t* r = &s->records[i];
    gpuhal__trace_out_span_t* o;
    if (r->kind != GPUHAL__TRACE_HOST_SPAN && r->kind != GPUHAL__TRACE_GPU_SPAN) continue;
    o = &s->spans[s->span_count++];
    o->r = r;
    o->ts = r->ts_ns;
    o->dur = r->dur_ns;
    o->order_ts = r->ts_ns;
    if (r->kind == GPUHAL__TRACE_GPU_SPAN) {
      o->pid = GPUHAL__TRACE_DEVICE_PID + r->device;
      o->tid = (int)r->queue;
    } else {
      o->pid = GPUHAL__TRACE_HOST_PID;
      o->tid = gpuhal__trace_tid(s->threads, &s->thread_count, r);
    }
  }
  /* Commands sort with their operation: give them its start. GPU spans of one operation
   * are written together (the operation first), so one pass finds each parent. */
  for (i = 0; i < s->span_count; ++i) {
    gpuhal__trace_out_span_t* o = &s->spans[i];
    if (o->r->kind == GPUHAL__TRACE_GPU_SPAN && o->r->command == 0) {
      size_t j;
      for (j = i + 1; j < s->span_count && s->spans[j].r->kind == GPUHAL__TRACE_GPU_SPAN && s->spans[j].r->command &&
                      s->spans[j].r->span == o->r->span;
           ++j)
        s->spans[j].order_ts = o->ts;
    }
  }
  qsort(s->spans, s->span_count, sizeof(*s->spans), gpuhal__trace_span_cmp);
  s->span_count = gpuhal__trace_fix_nesting(s->spans, s->span_count);
  for (i = 0; i < s->span_count; ++i) {
    gpuhal__trace_out_span_t* o = &s->spans[i];
    s->by_ts[i] = o;
    if ((o->r->kind == GPUHAL__TRACE_GPU_SPAN && o->r->command == 0) ||
        (o->r->kind == GPUHAL__TRACE_HOST_SPAN && (o->r->flags & GPUHAL__TRACE_ANCHOR)))
      s->anchors[s->anchor_count++] = o;
  }
  qsort(s->by_ts, s->span_count, sizeof(*s->by_ts), gpuhal__trace_ts_cmp);
  qsort(s->anchors, s->anchor_count, sizeof(*s->anchors), gpuhal__trace_anchor_cmp);
  for (i = 0; i < n; ++i) {
    const gpuhal__trace_record_t* r = &s->records[i];
    const gpuhal__trace_out_span_t* at;
    if (r->kind != GPUHAL__TRACE_SIGNAL) continue;
    at = gpuhal__trace_find_anchor(s->anchors, s->anchor_count, r->span);
    if (!at) continue;
    s->signals[s->signal_count].semaphore = r->semaphore;
    s->signals[s->signal_count].value = r->value;
    s->signals[s->signal_count].at = at;
    s->signal_count++;
  }
  qsort(s->signals, s->signal_count, sizeof(*s->signals), gpuhal__trace_signal_cmp);
  return NULL;
}

static void gpuhal__trace_write_flows(gpuhal__trace_writer_t* w, const gpuhal__trace_snapshot_t* s) {
  size_t i;
  uint64_t flow_id = 1;
  /* submit -> the GPU span (or host call) it produced */
  for (i = 0; i < s->span_count; ++i) {
    const gpuhal__trace_out_span_t* o = &s->spans[i];
    const gpuhal__trace_out_span_t* to;
    if (o->r->kind != GPUHAL__TRACE_HOST_SPAN || !(o->r->flags & GPUHAL__TRACE_SUBMIT)) continue;
    to = gpuhal__trace_find_anchor(s->anchors, s->anchor_count, o->r->span);
    /* From the submit's start: its work was issued after that (GPU spans start no earlier
     * than their issue, see gpuhal__trace_correct_anchor), however short the submit. */
    if (to) gpuhal__trace_flow(w, "submit", flow_id++, o, o->ts, to, 0);
  }
  /* signal of (semaphore, value) -> each operation that waited for exactly that value */
  for (i = 0; i < s->count; ++i) {
    const gpuhal__trace_record_t* r = &s->records[i];
    gpuhal__trace_signal_t key;
    const gpuhal__trace_signal_t* found;
    const gpuhal__trace_out_span_t* to;
    if (r->kind != GPUHAL__TRACE_WAIT) continue;
    key.semaphore = r->semaphore;
    key.value = r->value;
    key.at = NULL;
    found = (const gpuhal__trace_signal_t*)bsearch(&key, s->signals, s->signal_count, sizeof(key),
                                                   gpuhal__trace_signal_cmp);
    to = gpuhal__trace_find_anchor(s->anchors, s->anchor_count, r->span);
    /* From the signaller's start: the waiter ran after its end, so the arrow keeps its
     * direction even where host and GPU clocks disagree by up to the signaller's length. */
    if (found && to && found->at != to)
      gpuhal__trace_flow(w, "semaphore", flow_id++, found->at, found->at->ts, to, r->value);
  }
}

/* Opens a new temporary file beside the trace (gpuhal__temp_file_create: a name no other
 * flush, driver or process uses, created afresh). NULL and *status when it cannot. */
static FILE* gpuhal__trace_open_temp(const char* path, char* tmp, size_t tmp_size, gpuhal_status_t* status) {
  FILE* f = NULL;
  int fd = gpuhal__temp_file_create(path, tmp, tmp_size);
  if (fd >= 0) {
    f = fdopen(fd, "w");
    if (!f) {
      int err = errno;
      close(fd);
      unlink(tmp);
      errno = err;
    }
  }
  *status = f ? NULL
              : gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "writing the trace: cannot create a file beside '%s': %s",
                                   path, strerror(errno));
  return f;
}

/* Opens `path` to write the trace in place (it is not a regular file, see
 * gpuhal__trace_write_file). Non-blocking open: a FIFO nobody reads fails at once (ENXIO)
 * instead of hanging the driver; the writes then block as usual. NULL and *status when
 * it cannot. */
static FILE* gpuhal__trace_open_in_place(const char* path, gpuhal_status_t* status) {
  FILE* f = NULL;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd >= 0) {
    int flags = fcntl(fd, F_GETFL);
    if (flags != -1) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    f = fdopen(fd, "w");
    if (!f) {
      int err = errno;
      close(fd);
      errno = err;
    }
  }
  *status = f ? NULL
              : gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "writing the trace: cannot open '%s': %s%s", path,
                                   strerror(errno), errno == ENXIO ? " (a FIFO with no reader)" : "");
  return f;
}

/* Follows the symlinks at `path` (32 at most) into `target`, each relative one from its
 * link's directory. 0, or -1 when a link cannot be read or the result does not fit. */
static int gpuhal__trace_follow_links(const char* path, char* target, size_t size) {
  char link[GPUHAL__PATH_MAX];
  struct stat st;
  int hops;
  if (snprintf(target, size, "%s", path) >= (int)size) return -1;
  for (hops = 0; hops < 32; ++hops) {
    const char* slash = strrchr(target, '/');
    size_t dir = 0;
    ssize_t n;
    if (lstat(target, &st) != 0 || !S_ISLNK(st.st_mode)) return 0;
    n = readlink(target, link, sizeof(link) - 1);
    if (n < 0) return -1;
    link[n] = 0;
    if (link[0] != '/' && slash) dir = (size_t)(slash - target) + 1;
    if (dir + (size_t)n >= size) return -1;
    memcpy(target + dir, link, (size_t)n + 1);
  }
  return -1;
}

/* The trace is written whole to a temporary file, then renamed over its path, only where
 * that path is a regular file or nothing: a rename replaces whatever is there, so a device
 * node (GPUHAL_TRACE=/dev/null, which as root would lose /dev/null), a FIFO or a symlink
 * would become a regular file. A symlink is followed: its final target, when a regular file
 * or nothing, is replaced (named in `target`). Anything else is opened and written in
 * place. Returns 1 when the trace goes through a temporary file renamed to `target`, 0
 * when it is written to `path` in place. */
static int gpuhal__trace_replaces(const char* path, char* target, size_t target_size) {
  struct stat st;
  snprintf(target, target_size, "%s", path);
  if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) return 1;
  if (!S_ISLNK(st.st_mode) || gpuhal__trace_follow_links(path, target, target_size) != 0) return 0;
  return lstat(target, &st) != 0 || S_ISREG(st.st_mode);
}

static void gpuhal__trace_write_json(gpuhal__trace_t* trace, const gpuhal__trace_snapshot_t* s, FILE* f) {
  gpuhal__trace_writer_t w;
  size_t i;
  w.f = f;
  w.first = 1;
  w.origin = trace->start_ns;
  fprintf(w.f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"gpuhal_version\":\"%s\",\"cuda_library\":",
          GPUHAL_VERSION_STRING);
  gpuhal__trace_json_string(w.f, trace->driver->cuda_library);
  fprintf(w.f, ",\"dropped_records\":%llu,\"capacity\":%llu},\n\"traceEvents\":[", (unsigned long long)s->dropped,
          (unsigned long long)trace->capacity);
  gpuhal__trace_write_tracks(&w, s->tracks, s->track_count, s->threads, s->thread_count);
  for (i = 0; i < s->span_count; ++i) gpuhal__trace_write_span(&w, s->by_ts[i]);
  gpuhal__trace_write_flows(&w, s);
  fprintf(w.f, "\n]}\n");
}

static gpuhal_status_t gpuhal__trace_write_file(gpuhal__trace_t* trace, const gpuhal__trace_snapshot_t* s) {
  char target[GPUHAL__PATH_MAX], tmp[GPUHAL__PATH_MAX + 64];
  const char* path = trace->driver->trace_path;
  int replace = gpuhal__trace_replaces(path, target, sizeof(target));
  gpuhal_status_t status;
  FILE* f;
  int err = 0;
  f = replace ? gpuhal__trace_open_temp(target, tmp, sizeof(tmp), &status) : gpuhal__trace_open_in_place(path, &status);
  if (!f) return status;
  gpuhal__trace_write_json(trace, s, f);
  if (ferror(f)) err = errno ? errno : EIO;
  if (fclose(f) != 0 && !err) err = errno ? errno : EIO;
  /* Written whole, then renamed: a reader never sees half a file, and concurrent writers
   * (other drivers, other processes) each replace it with a whole one. No fsync: a trace
   * is a diagnostic; what a crash of the machine loses is not worth a disk flush each time. */
  if (replace && !err && rename(tmp, target) != 0) err = errno;
  if (err) {
    if (replace) unlink(tmp);
    return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "writing the trace '%s' failed: %s", path, strerror(err));
  }
  return NULL;
}

static gpuhal_status_t gpuhal__trace_write(gpuhal__trace_t* trace) {
  gpuhal__trace_snapshot_t s;
  gpuhal_status_t status;
  gpuhal__mutex_lock(&trace->flush_mutex);
  status = gpuhal__trace_snapshot(trace, &s);
  if (!status) status = gpuhal__trace_write_file(trace, &s);
  gpuhal__trace_snapshot_free(&trace->driver->allocator, &s);
  gpuhal__mutex_unlock(&trace->flush_mutex);
  return status;
}
