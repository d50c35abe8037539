/* gpuhal - queue: the pending-work report (gpuhal_driver_report_pending), for hangs. Each
 * device is copied under its issue lock (nothing is issued meanwhile) and, for the lists the
 * completion side also touches, its state mutex; semaphores are retained while copied, and
 * asked who signals a value only after every device's locks are released (a semaphore's
 * lock is never taken under a state mutex). The text is built from the copy alone.
 *
 * Part of the queue (its rules are at the top of queue.h). */
#include "queue_execute.h"

#include <stdarg.h>

/* Operations a report copies in all (the rest are counted); a test may set it lower (at
 * least GPUHAL__REPORT_OPS_FIRST) before it compiles the implementation. */
#ifndef GPUHAL__REPORT_OPS_MAX
#define GPUHAL__REPORT_OPS_MAX (1 << 18)
#endif

enum {
  GPUHAL__REPORT_ENTRIES = 8,     /* waits and signals shown per operation */
  GPUHAL__REPORT_OPS_FIRST = 256, /* operations room at first; it doubles as needed */
  GPUHAL__REPORT_DEVICES = 64,    /* devices reported */
  GPUHAL__REPORT_CYCLE_MAX = 16,  /* operations named in a cycle */
  GPUHAL__REPORT_CYCLES_MAX = 16  /* cycles named */
};

/* HELD: ready, waiting for room on its queue's stream (tuning.queue_entries_max). */
typedef enum {
  GPUHAL__OP_QUEUED = 0,
  GPUHAL__OP_WAITING = 1,
  GPUHAL__OP_ISSUED = 2,
  GPUHAL__OP_HELD = 3
} gpuhal__op_state_t;

typedef struct gpuhal__report_entry_s {
  gpuhal_semaphore_t* semaphore; /* retained */
  uint64_t value;
  gpuhal__wait_state_t state; /* waits: checked once all is copied (gpuhal__report_check_waits) */
  gpuhal_status_t failure;    /* waits: owned, when FAILED */
  int32_t by;                 /* waits: the operation of the copy that signals it (-1: none) */
} gpuhal__report_entry_t;

/* One operation not done, as copied. */
typedef struct gpuhal__report_op_s {
  const char* kind;
  char label[GPUHAL_LABEL_MAX];
  int device;            /* ordinal */
  uint32_t device_index; /* in gpuhal__report_t.devices */
  uint32_t queue;
  uint64_t number; /* submission number on its device */
  gpuhal__op_state_t state;
  int blocked;                       /* not issued, or issued with a wait not reached: it cannot end */
  uint32_t wait_count, signal_count; /* all of them; at most GPUHAL__REPORT_ENTRIES copied */
  uint32_t unmet_count;              /* waits not reached when copied (listed first) */
  gpuhal__report_entry_t waits[GPUHAL__REPORT_ENTRIES];
  gpuhal__report_entry_t signals[GPUHAL__REPORT_ENTRIES];
  /* Past GPUHAL__REPORT_ENTRIES, not printed but followed: the waits not reached (a cycle
   * may go through any of them) and the signals (any may be the one another waits for). */
  gpuhal__report_entry_t* more_waits;
  gpuhal__report_entry_t* more_signals;
  uint32_t more_wait_count, more_signal_count;
  int mark;        /* cycle search: 0 new, 1 on the path, 2 done */
  int parent;      /* cycle search: the operation the path came from */
  uint32_t cursor; /* cycle search: its next wait to follow */
  int next;        /* a cycle being named: the operation it waits for in it */
} gpuhal__report_op_t;

/* An operation's copied waits (or signals): the printed ones, then the `more` ones. */
static uint32_t gpuhal__report_entry_count(uint32_t count, uint32_t more_count) {
  return (count < GPUHAL__REPORT_ENTRIES ? count : (uint32_t)GPUHAL__REPORT_ENTRIES) + more_count;
}

static gpuhal__report_entry_t* gpuhal__report_wait_at(gpuhal__report_op_t* op, uint32_t k) {
  return k < GPUHAL__REPORT_ENTRIES ? &op->waits[k] : &op->more_waits[k - GPUHAL__REPORT_ENTRIES];
}

static gpuhal__report_entry_t* gpuhal__report_signal_at(gpuhal__report_op_t* op, uint32_t k) {
  return k < GPUHAL__REPORT_ENTRIES ? &op->signals[k] : &op->more_signals[k - GPUHAL__REPORT_ENTRIES];
}

typedef struct gpuhal__report_queue_s {
  uint64_t last_done; /* submission number of the last completed operation (0: none) */
  const char* last_kind;
  uint32_t in_flight;     /* issued and not retired, listed or not */
  uint32_t first, listed; /* its operations: ops[first .. first + listed) once sorted */
  uint32_t issued;        /* of those, issued ones */
} gpuhal__report_queue_t;

typedef struct gpuhal__report_device_s {
  gpuhal_device_t* device; /* retained */
  uint32_t queue_count;
  gpuhal__report_queue_t* queues;
  int lost;
  uint32_t dropped; /* operations past GPUHAL__REPORT_OPS_MAX, or when out of memory */
} gpuhal__report_device_t;

typedef struct gpuhal__report_s {
  const gpuhal_allocator_t* allocator;
  gpuhal__report_device_t devices[GPUHAL__REPORT_DEVICES];
  uint32_t device_count;
  gpuhal__report_op_t* ops;
  uint32_t op_count, op_capacity;
  struct gpuhal__report_signal_s* signals; /* every copied signal, by semaphore and value */
  uint32_t signal_count;
  char* text; /* the caller's buffer */
  size_t capacity, length;
} gpuhal__report_t;

static void gpuhal__report_printf(gpuhal__report_t* r, const char* format, ...) {
  va_list args;
  int n;
  char* at = r->length < r->capacity ? r->text + r->length : NULL;
  size_t room = r->length < r->capacity ? r->capacity - r->length : 0;
  va_start(args, format);
  n = vsnprintf(at, room, format, args);
  va_end(args);
  if (n > 0) r->length += (size_t)n;
}

/* ---- the copy ---- */

static void gpuhal__report_copy_entry(gpuhal__report_entry_t* out, gpuhal_semaphore_t* s, uint64_t value) {
  gpuhal__object_retain(&s->object);
  out->semaphore = s;
  out->value = value;
}

/* Copies the waits of `a` not reached first, then the reached ones, up to
 * GPUHAL__REPORT_ENTRIES: a wait that holds the operation up is named (with its blocker)
 * however many waits it has. Reached or not is only a first look here (atomic loads, under
 * the device's locks): gpuhal__report_check_waits decides what the report says. */
static void gpuhal__report_copy_waits(gpuhal__report_t* r, gpuhal__report_op_t* op, const gpuhal__action_t* a) {
  uint32_t i, n = 0, more_room = 0;
  int reached;
  if (a->wait_count > GPUHAL__REPORT_ENTRIES) {
    for (i = 0; i < a->wait_count; ++i)
      more_room += gpuhal__atomic_load(&a->waits[i].semaphore->value) < a->waits[i].value;
    more_room = more_room > GPUHAL__REPORT_ENTRIES ? more_room - GPUHAL__REPORT_ENTRIES : 0;
    if (more_room)
      op->more_waits = (gpuhal__report_entry_t*)gpuhal__calloc(r->allocator, sizeof(*op->more_waits) * more_room);
  }
  for (reached = 0; reached <= 1; ++reached)
    for (i = 0; i < a->wait_count; ++i) {
      const gpuhal__action_wait_t* w = &a->waits[i];
      if ((gpuhal__atomic_load(&w->semaphore->value) >= w->value) != reached) continue;
      op->unmet_count += !reached;
      if (n < GPUHAL__REPORT_ENTRIES)
        gpuhal__report_copy_entry(&op->waits[n++], w->semaphore, w->value);
      else if (!reached && op->more_waits && op->more_wait_count < more_room)
        gpuhal__report_copy_entry(&op->more_waits[op->more_wait_count++], w->semaphore, w->value);
    }
}

/* Every signal of `a`: the first GPUHAL__REPORT_ENTRIES printed, the rest only indexed. */
static void gpuhal__report_copy_signals(gpuhal__report_t* r, gpuhal__report_op_t* op, const gpuhal__action_t* a) {
  uint32_t i;
  if (a->signal_count > GPUHAL__REPORT_ENTRIES)
    op->more_signals = (gpuhal__report_entry_t*)gpuhal__calloc(
        r->allocator, sizeof(*op->more_signals) * (a->signal_count - GPUHAL__REPORT_ENTRIES));
  for (i = 0; i < a->signal_count; ++i)
    if (i < GPUHAL__REPORT_ENTRIES)
      gpuhal__report_copy_entry(&op->signals[i], a->signals[i].semaphore, a->signals[i].value);
    else if (op->more_signals)
      gpuhal__report_copy_entry(&op->more_signals[op->more_signal_count++], a->signals[i].semaphore,
                                a->signals[i].value);
}

/* Makes room for at least `want` operations (doubling, from GPUHAL__REPORT_OPS_FIRST, up
 * to GPUHAL__REPORT_OPS_MAX); RESOURCE_EXHAUSTED naming the room when it cannot. Runs
 * under a device's locks: only the allocator is called (and a status made). */
static gpuhal_status_t gpuhal__report_reserve(gpuhal__report_t* r, uint64_t want) {
  uint32_t capacity = r->op_capacity ? r->op_capacity : (uint32_t)GPUHAL__REPORT_OPS_FIRST;
  gpuhal__report_op_t* ops;
  if (want > GPUHAL__REPORT_OPS_MAX) want = GPUHAL__REPORT_OPS_MAX;
  if (want <= r->op_capacity) return NULL;
  while (capacity < want) capacity *= 2;
  if (capacity > GPUHAL__REPORT_OPS_MAX) capacity = GPUHAL__REPORT_OPS_MAX;
  ops = (gpuhal__report_op_t*)gpuhal__alloc(r->allocator, sizeof(*ops) * capacity);
  if (!ops) return gpuhal__status_oom("a pending report's operations", sizeof(*ops) * capacity);
  if (r->op_count) memcpy(ops, r->ops, sizeof(*ops) * r->op_count);
  gpuhal__free(r->allocator, r->ops);
  r->ops = ops;
  r->op_capacity = capacity;
  return NULL;
}

/* Copies `a` (its device's locks held: it cannot be released meanwhile). */
static void gpuhal__report_copy_op(gpuhal__report_t* r, gpuhal__report_device_t* d, const gpuhal__action_t* a,
                                   gpuhal__op_state_t state) {
  gpuhal__report_op_t* op;
  if (r->op_count >= GPUHAL__REPORT_OPS_MAX) { /* as many as a report holds: the rest is counted */
    d->dropped++;
    return;
  }
  if (r->op_count == r->op_capacity) {
    gpuhal_status_t status = gpuhal__report_reserve(r, (uint64_t)r->op_count + 1);
    if (status) { /* the report says how many operations it left out */
      gpuhal_status_free(status);
      d->dropped++;
      return;
    }
  }
  op = &r->ops[r->op_count++];
  memset(op, 0, sizeof(*op));
  op->kind = a->ops->name;
  gpuhal__label_copy(op->label, gpuhal__action_label(a));
  op->device = d->device->ordinal;
  op->device_index = (uint32_t)(d - r->devices);
  op->queue = a->queue_index;
  op->number = a->submit_number;
  op->state = state;
  op->wait_count = a->wait_count;
  op->signal_count = a->signal_count;
  op->next = -1;
  gpuhal__report_copy_waits(r, op, a);
  gpuhal__report_copy_signals(r, op, a);
}

static void gpuhal__report_copy_list(gpuhal__report_t* r, gpuhal__report_device_t* d, gpuhal__list_node_t* list,
                                     gpuhal__op_state_t state) {
  gpuhal__list_node_t* n;
  for (n = list->next; n != list; n = n->next) {
    const gpuhal__action_t* a = GPUHAL__CONTAINER_OF(n, gpuhal__action_t, link);
    gpuhal__report_copy_op(r, d, a, state == GPUHAL__OP_WAITING && a->held ? GPUHAL__OP_HELD : state);
  }
}

/* What a report asks of a device's completion thread (state->report_request). */
typedef struct gpuhal__report_request_s {
  gpuhal__report_t* r;
  gpuhal__report_device_t* d;
  int answered;
} gpuhal__report_request_t;

/* How long a report waits for the completion thread to copy the work it watches; past it
 * that work is counted, not listed. */
#define GPUHAL__REPORT_ASK_NS 200000000ll

GPUHAL__PRIVATE void gpuhal__queue_report_answer_locked(gpuhal__queue_state_t* state) {
  gpuhal__report_request_t* q = state->report_request;
  uint32_t i;
  for (i = 0; i < q->d->queue_count; ++i) {
    gpuhal__queue_lane_t* lane = &state->lanes[i];
    gpuhal__report_copy_list(q->r, q->d, &lane->observing, GPUHAL__OP_ISSUED);
    gpuhal__report_copy_list(q->r, q->d, &lane->side_observing, GPUHAL__OP_ISSUED);
    gpuhal__report_copy_list(q->r, q->d, &lane->deferred, GPUHAL__OP_ISSUED);
  }
  q->answered = 1;
  state->report_request = NULL;
  gpuhal__cond_broadcast(&state->report_cond);
}

/* Under both of the device's locks, after its own lists were copied (`copied` operations
 * issued): the completion thread copies the work it has taken, while this waits (the wait
 * lends it state->mutex; nothing moves between the lists without that lock, and the
 * completion thread takes no issue_mutex). Bounded: past GPUHAL__REPORT_ASK_NS that work is
 * only counted. */
static void gpuhal__report_ask_completion_locked(gpuhal__report_t* r, gpuhal__report_device_t* d,
                                                 gpuhal__queue_state_t* state, uint32_t copied) {
  gpuhal__report_request_t q;
  gpuhal_timeout_t timeout;
  uint32_t i, counted = 0;
  for (i = 0; i < d->queue_count; ++i) counted += d->queues[i].in_flight;
  if (counted <= copied || !state->threads_started || state->threads_stop) return;
  while (state->report_request) /* another report is asking */
    if (!gpuhal__cond_wait_until(&state->report_cond, &state->mutex, gpuhal_timeout_relative_ns(GPUHAL__REPORT_ASK_NS)))
      return;
  q.r = r;
  q.d = d;
  q.answered = 0;
  state->report_request = &q;
  gpuhal__cond_signal(&state->completion_cond);
  timeout = gpuhal_timeout_relative_ns(GPUHAL__REPORT_ASK_NS);
  while (!q.answered)
    if (!gpuhal__cond_wait_until(&state->report_cond, &state->mutex, timeout) && !q.answered) {
      state->report_request = NULL; /* withdrawn: the completion thread has not begun it */
      break;
    }
}

static void gpuhal__report_copy_device(gpuhal__report_t* r, gpuhal__report_device_t* d) {
  gpuhal__queue_state_t* state = gpuhal__queue_state(d->device);
  uint32_t q, before;
  if (!state) return;
  gpuhal__mutex_lock(&state->issue_mutex);
  gpuhal__mutex_lock(&state->mutex);
  d->lost = state->lost != NULL;
  before = r->op_count;
  for (q = 0; q < d->queue_count; ++q) {
    gpuhal__queue_lane_t* lane = &state->lanes[q];
    d->queues[q].last_done = gpuhal__atomic_load(&lane->last_done);
    d->queues[q].last_kind = gpuhal__atomic_load(&lane->last_kind);
    d->queues[q].in_flight = gpuhal__atomic_load(&lane->count);
    gpuhal__report_copy_list(r, d, &lane->in_flight, GPUHAL__OP_ISSUED);
    gpuhal__report_copy_list(r, d, &lane->side, GPUHAL__OP_ISSUED);
  }
  gpuhal__report_ask_completion_locked(r, d, state, r->op_count - before + d->dropped);
  gpuhal__report_copy_list(r, d, &state->incoming, GPUHAL__OP_QUEUED);
  gpuhal__mutex_unlock(&state->mutex);
  gpuhal__report_copy_list(r, d, &state->pending, GPUHAL__OP_WAITING);
  gpuhal__mutex_unlock(&state->issue_mutex);
}

/* ---- who reaches a value ---- */

/* One signal of a copied operation. Sorted by semaphore and value, each entry also names
 * the best signaller among it and the entries after it of the same semaphore, so a lookup
 * is a binary search: the report stays fast with many thousands of operations. */
typedef struct gpuhal__report_signal_s {
  uintptr_t semaphore;
  uint64_t value;
  int32_t op;   /* in ops */
  int32_t best; /* the best op among this entry and the later ones of its semaphore */
} gpuhal__report_signal_t;

/* Submission order within a device and queue, devices and queues in report order. */
static int gpuhal__report_op_order(const void* x, const void* y) {
  const gpuhal__report_op_t* a = (const gpuhal__report_op_t*)x;
  const gpuhal__report_op_t* b = (const gpuhal__report_op_t*)y;
  if (a->device_index != b->device_index) return a->device_index < b->device_index ? -1 : 1;
  if (a->queue != b->queue) return a->queue < b->queue ? -1 : 1;
  return a->number < b->number ? -1 : a->number > b->number;
}

static int gpuhal__report_signal_order(const void* x, const void* y) {
  const gpuhal__report_signal_t* a = (const gpuhal__report_signal_t*)x;
  const gpuhal__report_signal_t* b = (const gpuhal__report_signal_t*)y;
  if (a->semaphore != b->semaphore) return a->semaphore < b->semaphore ? -1 : 1;
  if (a->value != b->value) return a->value < b->value ? -1 : 1;
  return a->op < b->op ? -1 : a->op > b->op;
}

/* The better signaller of two: the issued one, then the lower submission number. */
static int32_t gpuhal__report_better(const gpuhal__report_t* r, int32_t a, int32_t b) {
  int ia = r->ops[a].state == GPUHAL__OP_ISSUED, ib = r->ops[b].state == GPUHAL__OP_ISSUED;
  if (ia != ib) return ia ? a : b;
  return r->ops[b].number < r->ops[a].number ? b : a;
}

/* Sorts the operations into report order and builds the signal index. */
static gpuhal_status_t gpuhal__report_index(gpuhal__report_t* r) {
  uint32_t i, j, n = 0;
  if (r->op_count > 1) qsort(r->ops, r->op_count, sizeof(*r->ops), gpuhal__report_op_order);
  for (i = 0; i < r->op_count; ++i) {
    gpuhal__report_op_t* op = &r->ops[i];
    gpuhal__report_queue_t* q = &r->devices[op->device_index].queues[op->queue];
    if (!q->listed) q->first = i;
    q->listed++;
    q->issued += op->state == GPUHAL__OP_ISSUED;
    n += gpuhal__report_entry_count(op->signal_count, op->more_signal_count);
  }
  if (!n) return NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(r->allocator, sizeof(*r->signals) * n, "a pending report's signal index",
                                               (void**)&r->signals));
  for (i = 0; i < r->op_count; ++i)
    for (j = 0; j < gpuhal__report_entry_count(r->ops[i].signal_count, r->ops[i].more_signal_count); ++j) {
      gpuhal__report_signal_t* e = &r->signals[r->signal_count++];
      const gpuhal__report_entry_t* signal = gpuhal__report_signal_at(&r->ops[i], j);
      e->semaphore = (uintptr_t)signal->semaphore;
      e->value = signal->value;
      e->op = (int32_t)i;
    }
  qsort(r->signals, r->signal_count, sizeof(*r->signals), gpuhal__report_signal_order);
  for (i = r->signal_count; i-- > 0;) {
    gpuhal__report_signal_t* e = &r->signals[i];
    e->best = e->op;
    if (i + 1 < r->signal_count && r->signals[i + 1].semaphore == e->semaphore)
      e->best = gpuhal__report_better(r, e->op, r->signals[i + 1].best);
  }
  return NULL;
}

/* The operation of the copy that signals `s` to `value` or above: the issued one first,
 * then the lowest submission number; -1 when none does. */
static int gpuhal__report_signaller(const gpuhal__report_t* r, const gpuhal_semaphore_t* s, uint64_t value) {
  uint32_t lo = 0, hi = r->signal_count;
  uintptr_t key = (uintptr_t)s;
  while (lo < hi) { /* the first entry at or after (s, value) */
    uint32_t mid = lo + (hi - lo) / 2;
    const gpuhal__report_signal_t* e = &r->signals[mid];
    if (e->semaphore < key || (e->semaphore == key && e->value < value))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < r->signal_count && r->signals[lo].semaphore == key ? r->signals[lo].best : -1;
}

static const char* gpuhal__report_state_name(gpuhal__op_state_t state) {
  return state == GPUHAL__OP_ISSUED    ? "issued, not done"
         : state == GPUHAL__OP_WAITING ? "waiting"
         : state == GPUHAL__OP_HELD    ? "ready, waiting for room on its queue's stream"
                                       : "queued";
}

static void gpuhal__report_op_name(gpuhal__report_t* r, const gpuhal__report_op_t* op) {
  gpuhal__report_printf(r, "#%llu %s", (unsigned long long)op->number, op->kind);
  if (op->label[0]) gpuhal__report_printf(r, " '%s'", op->label);
}

static void gpuhal__report_semaphore_name(gpuhal__report_t* r, gpuhal_semaphore_t* s) {
  if (s->label[0])
    gpuhal__report_printf(r, "semaphore '%s'", s->label);
  else
    gpuhal__report_printf(r, "a semaphore without a label");
}

/* Checks every copied wait once (outside the devices' locks: a semaphore's lock may be
 * taken) and marks the operations that cannot end: those not issued, and issued ones with a
 * wait not reached. The latter are work parked on the GPU behind a value wait, or behind
 * such work; a cycle can go through them (gpuhal__report_cycles). Issued work whose waits
 * are all reached is left out: it ends by itself, so no chain of waits goes on through it. */
static void gpuhal__report_check_waits(gpuhal__report_t* r) {
  uint32_t i, j;
  for (i = 0; i < r->op_count; ++i) {
    gpuhal__report_op_t* op = &r->ops[i];
    op->blocked = op->state != GPUHAL__OP_ISSUED && op->state != GPUHAL__OP_HELD; /* held work goes by itself */
    for (j = 0; j < gpuhal__report_entry_count(op->wait_count, op->more_wait_count); ++j) {
      gpuhal__report_entry_t* w = gpuhal__report_wait_at(op, j);
      gpuhal__wait_query_t q;
      memset(&q, 0, sizeof(q));
      q.look_submitted = 1;
      w->state = gpuhal__semaphore_check(w->semaphore, w->value, &q);
      w->failure = q.failure;
      w->by = -1;
      if (w->state != GPUHAL__WAIT_COMPLETED && w->state != GPUHAL__WAIT_FAILED) {
        op->blocked = 1;
        w->by = gpuhal__report_signaller(r, w->semaphore, w->value);
      }
    }
  }
}

/* One wait of `op`: the value it needs, the value now, and who is expected to reach it. */
static void gpuhal__report_wait(gpuhal__report_t* r, const gpuhal__report_entry_t* w) {
  gpuhal_semaphore_t* s = w->semaphore;
  gpuhal__wait_state_t st = w->state;
  int by = w->by;
  gpuhal__report_printf(r, "      waits for ");
  gpuhal__report_semaphore_name(r, s);
  gpuhal__report_printf(r, " >= %llu: now %llu; ", (unsigned long long)w->value,
                        (unsigned long long)gpuhal__atomic_load(&s->value));
  if (st == GPUHAL__WAIT_FAILED) {
    gpuhal__report_printf(r, "failed: %s\n", gpuhal_status_message(w->failure));
  } else if (st == GPUHAL__WAIT_COMPLETED) {
    gpuhal__report_printf(r, "reached\n");
  } else if (by >= 0) {
    const gpuhal__report_op_t* b = &r->ops[by];
    gpuhal__report_printf(r, "to be signalled by ");
    gpuhal__report_op_name(r, b);
    gpuhal__report_printf(r, " (device %d queue %u, %s)\n", b->device, b->queue, gpuhal__report_state_name(b->state));
  } else if (st == GPUHAL__WAIT_SUBMITTED) {
    gpuhal__report_printf(r, "to be signalled by issued work the completion thread is watching\n");
  } else {
    gpuhal__report_printf(r, "nothing queued signals this value (only the host can: gpuhal_semaphore_signal)\n");
  }
}

/* ---- the text ---- */

static void gpuhal__report_op(gpuhal__report_t* r, gpuhal__report_op_t* op) {
  uint32_t i;
  gpuhal__report_printf(r, "    ");
  gpuhal__report_op_name(r, op);
  gpuhal__report_printf(r, ": %s\n", gpuhal__report_state_name(op->state));
  for (i = 0; i < op->wait_count && i < GPUHAL__REPORT_ENTRIES; ++i) gpuhal__report_wait(r, &op->waits[i]);
  if (op->unmet_count > GPUHAL__REPORT_ENTRIES) /* those not reached were listed first */
    gpuhal__report_printf(r, "      and %u more waits, %u of them not reached\n",
                          op->wait_count - GPUHAL__REPORT_ENTRIES, op->unmet_count - GPUHAL__REPORT_ENTRIES);
  else if (op->wait_count > GPUHAL__REPORT_ENTRIES)
    gpuhal__report_printf(r, "      and %u more waits, reached\n", op->wait_count - GPUHAL__REPORT_ENTRIES);
  for (i = 0; i < op->signal_count && i < GPUHAL__REPORT_ENTRIES; ++i) {
    gpuhal__report_printf(r, "      signals ");
    gpuhal__report_semaphore_name(r, op->signals[i].semaphore);
    gpuhal__report_printf(r, " = %llu\n", (unsigned long long)op->signals[i].value);
  }
}

/* Issued operations of (device d, queue q) that the completion thread has taken to watch:
 * its lists are its own, so they are counted, not listed (their signals still tell who
 * reaches a value: the semaphores' submitted values). */
static uint32_t gpuhal__report_unlisted(const gpuhal__report_queue_t* rq) {
  return rq->in_flight > rq->issued ? rq->in_flight - rq->issued : 0;
}

/* Operations of the copy, in submission order, that are on (device d, queue q). */
static void gpuhal__report_queue(gpuhal__report_t* r, const gpuhal__report_device_t* d, uint32_t q) {
  const gpuhal__report_queue_t* rq = &d->queues[q];
  uint32_t i, unlisted = gpuhal__report_unlisted(rq);
  gpuhal__report_printf(r, "  queue %u: ", q);
  if (rq->last_done)
    gpuhal__report_printf(r, "last completed #%llu %s", (unsigned long long)rq->last_done, rq->last_kind);
  else
    gpuhal__report_printf(r, "nothing completed yet");
  gpuhal__report_printf(r, "; %u not done\n", rq->listed + unlisted);
  for (i = 0; i < rq->listed; ++i) gpuhal__report_op(r, &r->ops[rq->first + i]);
  if (unlisted) gpuhal__report_printf(r, "    issued, watched by the completion thread (not listed): %u\n", unlisted);
}

/* Names the cycle closed by a wait of `from` on `to`, which is on the search's path: from
 * `to` along the path to `from`, written from its first submitted operation. */
static void gpuhal__report_cycle(gpuhal__report_t* r, int from, int to) {
  int at = from, start = to, steps = 0;
  r->ops[from].next = to;
  while (at != to) { /* the path's links, forward */
    int parent = r->ops[at].parent;
    const gpuhal__report_op_t *o = &r->ops[at], *f = &r->ops[start];
    if (o->device_index < f->device_index || (o->device_index == f->device_index && o->number < f->number)) start = at;
    r->ops[parent].next = at;
    at = parent;
  }
  gpuhal__report_printf(r, "cycle: ");
  at = start;
  do {
    gpuhal__report_op_name(r, &r->ops[at]);
    gpuhal__report_printf(r, " (device %d queue %u) waits for ", r->ops[at].device, r->ops[at].queue);
    at = r->ops[at].next;
  } while (at != start && ++steps < GPUHAL__REPORT_CYCLE_MAX);
  if (at != start) gpuhal__report_printf(r, "... ");
  gpuhal__report_op_name(r, &r->ops[at]);
  gpuhal__report_printf(r, "\n");
}

/* Waits between operations that cannot end (not issued, or parked on the GPU: `blocked`)
 * that go round. A depth-first search over every copied wait not reached whose signaller
 * cannot end either; each wait back onto the search's path closes a cycle. */
static void gpuhal__report_cycles(gpuhal__report_t* r) {
  uint32_t i, found = 0;
  for (i = 0; i < r->op_count; ++i) {
    int at = (int)i;
    if (r->ops[i].mark || !r->ops[i].blocked) continue;
    r->ops[i].mark = 1;
    r->ops[i].parent = -1;
    while (at >= 0) {
      gpuhal__report_op_t* op = &r->ops[at];
      int to;
      if (op->cursor == gpuhal__report_entry_count(op->wait_count, op->more_wait_count)) {
        op->mark = 2;
        at = op->parent;
        continue;
      }
      to = gpuhal__report_wait_at(op, op->cursor++)->by;
      if (to < 0 || !r->ops[to].blocked) continue;
      if (r->ops[to].mark == 0) {
        r->ops[to].mark = 1;
        r->ops[to].parent = at;
        at = to;
      } else if (r->ops[to].mark == 1 && found++ < GPUHAL__REPORT_CYCLES_MAX) {
        gpuhal__report_cycle(r, at, to);
      }
    }
  }
  if (found > GPUHAL__REPORT_CYCLES_MAX)
    gpuhal__report_printf(r, "and %u more waits that close a cycle\n", found - GPUHAL__REPORT_CYCLES_MAX);
  if (!found) gpuhal__report_printf(r, "no cycle among the operations waiting\n");
}

static void gpuhal__report_write(gpuhal__report_t* r) {
  uint32_t i, q, total = r->op_count;
  for (i = 0; i < r->device_count; ++i)
    for (q = 0; q < r->devices[i].queue_count; ++q) total += gpuhal__report_unlisted(&r->devices[i].queues[q]);
  gpuhal__report_printf(r, "gpuhal pending report: %u operations not done\n", total);
  for (i = 0; i < r->device_count; ++i) {
    const gpuhal__report_device_t* d = &r->devices[i];
    gpuhal__report_printf(r, "device %d%s:\n", d->device->ordinal, d->lost ? " (lost)" : "");
    for (q = 0; q < d->queue_count; ++q) gpuhal__report_queue(r, d, q);
    if (d->dropped) gpuhal__report_printf(r, "  and %u operations not copied\n", d->dropped);
  }
  gpuhal__report_cycles(r);
}

/* ---- the call ---- */

static void gpuhal__report_free(gpuhal__report_t* r) {
  uint32_t i, j;
  for (i = 0; i < r->op_count; ++i) {
    gpuhal__report_op_t* op = &r->ops[i];
    for (j = 0; j < gpuhal__report_entry_count(op->wait_count, op->more_wait_count); ++j) {
      gpuhal_status_free(gpuhal__report_wait_at(op, j)->failure);
      gpuhal__semaphore_release_ref(gpuhal__report_wait_at(op, j)->semaphore);
    }
    for (j = 0; j < gpuhal__report_entry_count(op->signal_count, op->more_signal_count); ++j)
      gpuhal__semaphore_release_ref(gpuhal__report_signal_at(op, j)->semaphore);
    gpuhal__free(r->allocator, op->more_waits);
    gpuhal__free(r->allocator, op->more_signals);
  }
  for (i = 0; i < r->device_count; ++i) {
    gpuhal__free(r->allocator, r->devices[i].queues);
    gpuhal__device_release_ref(r->devices[i].device);
  }
  gpuhal__free(r->allocator, r->ops);
  gpuhal__free(r->allocator, r->signals);
}

/* gpuhal__log formats into a buffer of 1024 bytes: a longer report goes out in several
 * warnings, each of whole lines where it can (a longer line is split). */
#define GPUHAL__HANG_REPORT_PIECE 800
static void gpuhal__queue_hang_report_log(gpuhal_driver_t* driver, int64_t waited_ns, const char* text, int cut) {
  size_t length = strlen(text), at = 0;
  int part = 0;
  do {
    size_t n = length - at;
    if (n > GPUHAL__HANG_REPORT_PIECE) {
      size_t end = GPUHAL__HANG_REPORT_PIECE;
      while (end > 0 && text[at + end - 1] != '\n') --end;
      n = end ? end : GPUHAL__HANG_REPORT_PIECE;
    }
    if (++part == 1)
      gpuhal__log(&driver->logger, GPUHAL_LOG_WARN, "a host wait has waited %.1f s (GPUHAL_HANG_REPORT)%s; %.*s",
                  (double)waited_ns / 1e9, cut ? " (the report kept growing: cut short)" : "", (int)n, text + at);
    else
      gpuhal__log(&driver->logger, GPUHAL_LOG_WARN, "(hang report, part %d) %.*s", part, (int)n, text + at);
    at += n;
  } while (at < length);
}

GPUHAL__PRIVATE void gpuhal__queue_hang_report(gpuhal_driver_t* driver, int64_t waited_ns) {
  size_t capacity = 4096, length = 0;
  char* text = NULL;
  gpuhal_status_t status = NULL;
  int attempt;
  /* Each call writes what fits and measures the whole report; work submitted meanwhile
   * may make the next one longer, so a larger buffer is tried until one holds it all. */
  for (attempt = 0; attempt < 8; ++attempt) {
    gpuhal__free(&driver->allocator, text);
    text = (char*)gpuhal__alloc(&driver->allocator, capacity);
    if (!text) break;
    status = gpuhal_driver_report_pending(driver, text, capacity, &length);
    if (status || length < capacity) break;
    capacity = length + length / 2 + 1;
  }
  if (text && !status)
    gpuhal__queue_hang_report_log(driver, waited_ns, text, length >= capacity);
  else
    gpuhal__log(&driver->logger, GPUHAL_LOG_WARN, "a host wait has waited %.1f s; no pending report: %s",
                (double)waited_ns / 1e9, status ? gpuhal_status_message(status) : "out of memory");
  gpuhal_status_free(status);
  gpuhal__free(&driver->allocator, text);
}

GPUHAL_API gpuhal_status_t gpuhal_driver_report_pending(gpuhal_driver_t* driver, char* buffer, size_t capacity,
                                                        size_t* out_length) {
  gpuhal__report_t* r = NULL;
  gpuhal__list_node_t* n;
  gpuhal_status_t status;
  uint64_t outstanding = 0;
  uint32_t i;
  GPUHAL__CHECK_OBJECT(driver, GPUHAL__MAGIC_DRIVER);
  GPUHAL__CHECK_ARG(buffer != NULL || capacity == 0, "buffer", "must not be NULL when capacity is above 0");
  if (out_length) *out_length = 0;
  if (capacity) buffer[0] = '\0';
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(&driver->allocator, sizeof(*r), "a pending report", (void**)&r));
  r->allocator = &driver->allocator;
  r->text = buffer;
  r->capacity = capacity;
  status = NULL;
  gpuhal__mutex_lock(&driver->devices_mutex);
  for (n = driver->devices.next; !status && n != &driver->devices && r->device_count < GPUHAL__REPORT_DEVICES;
       n = n->next) {
    gpuhal_device_t* device = GPUHAL__CONTAINER_OF(n, gpuhal_device_t, driver_link);
    gpuhal__report_device_t* d = &r->devices[r->device_count];
    /* A device whose teardown has begun (refcount 0, not yet off the list) is skipped. */
    if (!gpuhal__queue_state(device) || !gpuhal__object_try_retain(&device->header)) continue;
    d->device = device; /* released by gpuhal__report_free, outside devices_mutex */
    r->device_count++;
    status = gpuhal__alloc_zeroed(&driver->allocator, sizeof(*d->queues) * device->queue_count, "a pending report",
                                  (void**)&d->queues);
    if (!status) d->queue_count = device->queue_count;
  }
  gpuhal__mutex_unlock(&driver->devices_mutex);
  /* Room for what is outstanding now (more is added as needed while copying). */
  for (i = 0; i < r->device_count; ++i)
    outstanding += gpuhal__atomic_load(&gpuhal__queue_state(r->devices[i].device)->outstanding);
  if (!status) status = gpuhal__report_reserve(r, outstanding + 1);
  for (i = 0; !status && i < r->device_count; ++i) gpuhal__report_copy_device(r, &r->devices[i]);
  if (!status) status = gpuhal__report_index(r);
  if (!status) gpuhal__report_check_waits(r);
  if (!status) gpuhal__report_write(r);
  if (!status && out_length) *out_length = r->length;
  gpuhal__report_free(r);
  gpuhal__free(&driver->allocator, r);
  return status;
}
