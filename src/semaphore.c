/* semaphore: timeline semaphores, their GPU-resident words, timepoints and waiters,
 * and host waits (semaphore.h). */
#include "semaphore.h"
#include "cuda_api.h"
#include "symbols.h"
#include "status.h"

/* A host wait on a value whose work is submitted polls that value's own recorded event on
 * the waiting thread (cuEventQuery) for the device's tuning.host_wait_spin_ns, then keeps
 * polling between sleeps that grow with the time already waited (1/16 of it, at least
 * 10 us, at most tuning.host_wait_max_sleep_ns): the wake-up comes within a small fraction
 * of the wait's length, and a long wait costs almost no CPU. The first sleep reaches to most
 * of the semaphore's recent wait length (gpuhal__host_wait_first_poll_ns). A wait on values that are not
 * submitted, or on several values, sleeps on a condition variable that every advance of
 * its semaphores signals; where the values live in device-mapped memory it also reads them
 * there between sleeps (GPU signals write them directly). Every path returns every
 * reference it took, whatever the timeout. */
#define GPUHAL__HOST_WAIT_SLEEP_FRACTION 16
#define GPUHAL__HOST_WAIT_MIN_SLEEP_NS 10000
#define GPUHAL__WORD_SLAB_WORDS 4096 /* 32 KiB of value words per pinned allocation */
/* CUDA's GEQ compares with wraparound ((int64_t)(*word - value) >= 0): a word 2^63 or more
 * above a wait's value does not release it, and one that far below does. So a word is kept
 * where that compare is the plain one: GPU waits are made only for values up to
 * GPUHAL__WORD_WAIT_MAX (above, they wait on the host, as on the event path), and the word
 * holds the value but never more than GPUHAL__WORD_MAX, which still releases every such
 * wait (a host signal of UINT64_MAX included). A failed semaphore's word holds
 * GPUHAL__WORD_MAX. A shared semaphore's word is its value for other processes: it is
 * stored whole, so its values stay at or below GPUHAL__WORD_MAX (signals above are refused:
 * gpuhal__semaphore_check_shared_value), its waits go to the GPU only up to 2^62 above its
 * value, and failing it stores the value + 2^62, which releases those. */
#define GPUHAL__WORD_MAX ((uint64_t)INT64_MAX)
#define GPUHAL__WORD_WAIT_MAX (1ull << 62)
#define GPUHAL__WORD_FAILED(s) ((s)->shared ? (s)->value + GPUHAL__WORD_WAIT_MAX : GPUHAL__WORD_MAX)

GPUHAL__PRIVATE uint64_t gpuhal__semaphore_word_value(const gpuhal_semaphore_t* s, uint64_t value) {
  return s->shared || value <= GPUHAL__WORD_MAX ? value : GPUHAL__WORD_MAX;
}

/* Whether a GPU wait on `s` for `value` compares right whatever the word will hold. */
static int gpuhal__semaphore_word_may_wait(const gpuhal_semaphore_t* s, uint64_t value) {
  return s->shared ? value - s->value <= GPUHAL__WORD_WAIT_MAX : value <= GPUHAL__WORD_WAIT_MAX;
}

/* A fresh slab in `device`'s primary context; its words go on the driver's free list. Under
 * driver->words_mutex. */
static gpuhal_status_t gpuhal__word_slab_create(gpuhal_driver_t* driver, gpuhal_device_t* device) {
  const gpuhal__cuda_symbols_t* cu = &driver->cu;
  gpuhal__word_slab_t* slab = NULL;
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  void* host = NULL;
  uint32_t i;
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__alloc_zeroed(&driver->allocator, sizeof(*slab), "semaphore word slab", (void**)&slab));
  status = GPUHAL__CU(cu, cuDevicePrimaryCtxRetain, (&slab->context, device->cu_device));
  if (status) {
    gpuhal__free(&driver->allocator, slab);
    return status;
  }
  slab->cu_device = device->cu_device;
  status = gpuhal__context_enter(device, &scope);
  if (!status) {
    status = GPUHAL__CU(
        cu, cuMemHostAlloc,
        (&host, GPUHAL__WORD_SLAB_WORDS * sizeof(uint64_t), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    if (!status) {
      status = GPUHAL__CU(cu, cuMemHostGetDevicePointer, (&slab->address, host, 0));
      if (status) cu->cuMemFreeHost(host);
    }
    gpuhal__context_leave(device, &scope);
  }
  if (status) {
    cu->cuDevicePrimaryCtxRelease(slab->cu_device);
    gpuhal__free(&driver->allocator, slab);
    return gpuhal_status_annotate(status, "allocating pinned memory for semaphore values");
  }
  slab->words = (uint64_t*)host;
  for (i = GPUHAL__WORD_SLAB_WORDS; i-- > 0;) {
    slab->words[i] = (uint64_t)(uintptr_t)driver->free_words;
    driver->free_words = &slab->words[i];
  }
  slab->next = driver->word_slabs;
  driver->word_slabs = slab;
  return NULL;
}

/* The device address of `word` (a word of one of the driver's slabs). */
static CUdeviceptr gpuhal__word_address(gpuhal_driver_t* driver, const volatile uint64_t* word) {
  gpuhal__word_slab_t* slab;
  for (slab = driver->word_slabs; slab; slab = slab->next)
    if (word >= slab->words && word < slab->words + GPUHAL__WORD_SLAB_WORDS)
      return slab->address + (CUdeviceptr)((const uint64_t*)word - slab->words) * sizeof(uint64_t);
  return 0;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__word_acquire(gpuhal_driver_t* driver, gpuhal_device_t* device, uint64_t** out) {
  gpuhal_status_t status = NULL;
  gpuhal__mutex_lock(&driver->words_mutex);
  if (!driver->free_words) status = gpuhal__word_slab_create(driver, device);
  if (!status) {
    *out = driver->free_words;
    driver->free_words = (uint64_t*)(uintptr_t) * *out;
  }
  gpuhal__mutex_unlock(&driver->words_mutex);
  return status;
}

GPUHAL__PRIVATE void gpuhal__word_return(gpuhal_driver_t* driver, volatile uint64_t* word) {
  gpuhal__mutex_lock(&driver->words_mutex);
  *word = (uint64_t)(uintptr_t)driver->free_words;
  driver->free_words = (uint64_t*)word;
  gpuhal__mutex_unlock(&driver->words_mutex);
}

static void gpuhal__semaphore_words_free(gpuhal_driver_t* driver) {
  const gpuhal__cuda_symbols_t* cu = &driver->cu;
  while (driver->word_slabs) {
    gpuhal__word_slab_t* slab = driver->word_slabs;
    gpuhal__context_scope_t scope;
    driver->word_slabs = slab->next;
    /* The slab is freed and the caller's context kept even when a push or pop fails. */
    if (gpuhal__context_push_any(cu, slab->context, &scope)) {
      gpuhal_status_t status = GPUHAL__CU(cu, cuMemFreeHost, (slab->words));
      if (status) {
        gpuhal__log(&driver->logger, GPUHAL_LOG_ERROR, "freeing semaphore words: %s", gpuhal_status_message(status));
        gpuhal_status_free(status);
      }
      gpuhal__context_pop_any(cu, &scope);
    }
    cu->cuDevicePrimaryCtxRelease(slab->cu_device);
    gpuhal__free(&driver->allocator, slab);
  }
  driver->free_words = NULL;
}

GPUHAL__PRIVATE void gpuhal__semaphore_driver_destroy(gpuhal_driver_t* driver) {
  gpuhal__semaphore_shared_driver_destroy(driver);
  gpuhal__semaphore_words_free(driver);
}

/* Raises an armed word to `value`, never lowering it: GPU signals write the word directly
 * and run ahead of what the host has observed (work signalling 5 may have written it while
 * the host only now learns that 4 is reached); storing 4 over that 5 would hold back GPU
 * waits for 5 that had not looked yet until the host learns of 5. */
static void gpuhal__word_raise(volatile uint64_t* word, uint64_t value) {
  uint64_t now = gpuhal__atomic_load(word);
  while (now < value && !gpuhal__atomic_cas_weak_release(word, &now, value)) {
  }
}

/* Under the lock: the value (and, once armed, its word) becomes `value`; a shared
 * semaphore's word goes to the highest value any process reached, and its sleepers in
 * every process wake. */
static void gpuhal__semaphore_store_locked(gpuhal_semaphore_t* s, uint64_t value) {
  gpuhal__atomic_store(&s->value, value);
  if (s->word) gpuhal__word_raise(s->word, gpuhal__semaphore_word_value(s, gpuhal__semaphore_shared_high(s, value)));
  if (s->shared) gpuhal__semaphore_shared_wake(s);
}

GPUHAL__PRIVATE void gpuhal__semaphore_waiter_init(gpuhal__semaphore_waiter_t* w) {
  gpuhal__list_init(&w->link);
  w->by_value = 0;
  w->signals_it = 0;
}
static int gpuhal__semaphore_waiter_registered(const gpuhal__semaphore_waiter_t* w) {
  return !gpuhal__list_empty(&w->link);
}

/* Under the lock: registers `w` for its value (see semaphore->waiting). */
static void gpuhal__semaphore_waiter_link_locked(gpuhal_semaphore_t* s, gpuhal__semaphore_waiter_t* w) {
  gpuhal__list_push_back(&s->waiters, &w->link);
  w->order.key = w->value;
  gpuhal__heap_push(&s->waiting, &w->order);
  w->by_value = 1;
}

/* Under the lock: takes `w` out of whichever of the semaphore's lists holds it (none: nothing). */
static void gpuhal__semaphore_waiter_unlink_locked(gpuhal_semaphore_t* s, gpuhal__semaphore_waiter_t* w) {
  if (w->by_value) gpuhal__heap_remove(&s->waiting, &w->order);
  w->by_value = 0;
  gpuhal__list_remove(&w->link);
}

GPUHAL__PRIVATE int gpuhal__semaphore_after_has(const gpuhal_semaphore_t* s, void (*run)(void*), const void* arg) {
  uint32_t i;
  for (i = 0; s->after && i < s->after->count; ++i)
    if (s->after->calls[i].run == run && s->after->calls[i].arg == arg) return 1;
  return 0;
}

GPUHAL__PRIVATE int gpuhal__semaphore_after_room(const gpuhal_semaphore_t* s) {
  return s->after && s->after->count < GPUHAL__SIGNAL_AFTER_MAX;
}

GPUHAL__PRIVATE void gpuhal__semaphore_after_add(gpuhal_semaphore_t* s, void (*run)(void*), void* arg) {
  s->after->calls[s->after->count].run = run;
  s->after->calls[s->after->count].arg = arg;
  s->after->count++;
}

/* Under the lock: the waiters satisfied by (value, submitted_value, failed) are unlinked and
 * notified. `submitted_value` is the value of a newly submitted timepoint (0: none). */
static void gpuhal__semaphore_notify_locked(gpuhal_semaphore_t* s, uint64_t submitted_value) {
  uint64_t highest = s->value > submitted_value ? s->value : submitted_value;
  gpuhal__heap_node_t* unmet = NULL; /* taken out but not satisfied: back in afterwards */
  gpuhal__heap_node_t* top;
  while ((top = s->waiting.root) != NULL && (s->failure != NULL || top->key <= highest)) {
    gpuhal__semaphore_waiter_t* w = GPUHAL__CONTAINER_OF(top, gpuhal__semaphore_waiter_t, order);
    gpuhal__heap_pop(&s->waiting);
    if (s->failure == NULL && s->value < w->value && !(w->wants_submitted && submitted_value >= w->value)) {
      top->next = unmet; /* waits for the value itself, which is only submitted */
      unmet = top;
      continue;
    }
    w->by_value = 0;
    gpuhal__list_remove(&w->link);
    w->notify(w);
  }
  while (unmet) {
    top = unmet;
    unmet = top->next;
    gpuhal__heap_push(&s->waiting, top);
  }
}

/* Under the lock: republishes the newest submitted timepoint after the list changed. */
static void gpuhal__semaphore_publish_newest_locked(gpuhal_semaphore_t* s) {
  const gpuhal__timepoint_t* newest =
      gpuhal__list_empty(&s->timepoints) ? NULL : GPUHAL__CONTAINER_OF(s->timepoints.prev, gpuhal__timepoint_t, link);
  uint64_t value = newest ? newest->value : 0;
  /* A provisional newest value is not "covered" without the lock: the waiter must learn
   * that it is provisional (gpuhal__semaphore_check); nor is one whose work's inputs are
   * still to be checked (the waiter inherits that check). */
  CUstream stream = newest && !newest->provisional && !newest->inputs_checked ? newest->event->stream : NULL;
  uint32_t seq = gpuhal__atomic_load_relaxed(&s->newest_seq);
  if (value == gpuhal__atomic_load(&s->newest_value) && stream == gpuhal__atomic_load(&s->newest_stream)) return;
  gpuhal__atomic_store_relaxed(&s->newest_seq, seq + 1);
  gpuhal__atomic_fence_release();
  gpuhal__atomic_store_relaxed(&s->newest_value, value);
  gpuhal__atomic_store_relaxed(&s->newest_stream, stream);
  gpuhal__atomic_store(&s->newest_seq, seq + 2);
}

GPUHAL__PRIVATE int gpuhal__semaphore_covered_on_stream(gpuhal_semaphore_t* s, uint64_t value, CUstream stream) {
  uint32_t seq;
  uint64_t newest_value;
  CUstream newest_stream;
  if (gpuhal__atomic_load(&s->failure) != NULL) return 0;
  if (gpuhal__atomic_load(&s->value) >= value) return 1;
  seq = gpuhal__atomic_load(&s->newest_seq);
  if (seq & 1u) return 0;
  newest_value = gpuhal__atomic_load_relaxed(&s->newest_value);
  newest_stream = gpuhal__atomic_load_relaxed(&s->newest_stream);
  gpuhal__atomic_fence_acquire();
  if (gpuhal__atomic_load_relaxed(&s->newest_seq) != seq) return 0;
  return newest_stream == stream && stream != NULL && newest_value >= value;
}

/* Under the lock: forgets timepoints at or below the completed value. */
static void gpuhal__semaphore_drop_completed_timepoints_locked(gpuhal_semaphore_t* s) {
  while (!gpuhal__list_empty(&s->timepoints)) {
    gpuhal__timepoint_t* tp = GPUHAL__CONTAINER_OF(s->timepoints.next, gpuhal__timepoint_t, link);
    if (tp->value > s->value) break;
    gpuhal__list_remove(&tp->link);
  }
  gpuhal__semaphore_publish_newest_locked(s);
}

GPUHAL__PRIVATE void gpuhal__semaphore_advance(gpuhal_semaphore_t* s, uint64_t value) {
  gpuhal__mutex_lock(&s->mutex);
  if (s->failure) {
    /* GPU work that signals a failed semaphore writes its value over the failed word when
     * it runs: store it again once that work is seen done, so no GPU wait stays blocked. */
    if (s->word) gpuhal__atomic_store(s->word, GPUHAL__WORD_FAILED(s));
  } else if (value > s->value) {
    gpuhal__semaphore_store_locked(s, value);
    gpuhal__semaphore_drop_completed_timepoints_locked(s);
    gpuhal__semaphore_notify_locked(s, 0);
  } else if (s->word) {
    /* Work that signalled a value not above one already reached is done: its GPU write (a
     * plain store: the GPU has no maximum) may have landed after the higher value's and
     * lowered the word, holding back GPU waits for a value reached (of this process, or
     * of another sharing it). Raise it back: done work writes nothing more. */
    gpuhal__word_raise(s->word, gpuhal__semaphore_word_value(s, gpuhal__semaphore_shared_high(s, s->value)));
  }
  gpuhal__mutex_unlock(&s->mutex);
}

/* The work of submitted timepoint (`event`, `value`) is done: advance to `value` unless the
 * the work's inputs are not all known reached yet (then the completion side advances it or
 * fails it once the work's inputs are known). 1 when the value is reached (or failed). */
static int gpuhal__semaphore_advance_from_event(gpuhal_semaphore_t* s, const gpuhal__event_t* event, uint64_t value) {
  gpuhal__list_node_t* n;
  int reached = 1;
  gpuhal__mutex_lock(&s->mutex);
  if (!s->failure && s->value < value) {
    for (n = s->timepoints.next; n != &s->timepoints; n = n->next) {
      gpuhal__timepoint_t* tp = GPUHAL__CONTAINER_OF(n, gpuhal__timepoint_t, link);
      if (tp->event == event && tp->value == value) break;
    }
    if (n == &s->timepoints) {
      reached = 0;
    } else {
      gpuhal__timepoint_t* tp = GPUHAL__CONTAINER_OF(n, gpuhal__timepoint_t, link);
      reached = !(tp->provisional || tp->inputs_checked) || tp->settled(tp);
    }
    if (reached) {
      gpuhal__semaphore_store_locked(s, value);
      gpuhal__semaphore_drop_completed_timepoints_locked(s);
      gpuhal__semaphore_notify_locked(s, 0);
    }
  }
  gpuhal__mutex_unlock(&s->mutex);
  return reached;
}

/* Under the lock: gives `s` its word, *spare_word (which is then consumed: set to NULL),
 * unless it has one; the word starts at the value. */
static void gpuhal__semaphore_install_word_locked(gpuhal_semaphore_t* s, uint64_t** spare_word) {
  if (s->word) return;
  **spare_word = gpuhal__semaphore_word_value(s, s->value);
  s->word_address = gpuhal__word_address(s->driver, *spare_word);
  gpuhal__atomic_store(&s->word, (volatile uint64_t*)*spare_word);
  *spare_word = NULL;
}

/* Without the lock (or under it): whether a signal to `value` may satisfy an armed wait. */
static int gpuhal__semaphore_armed_for(gpuhal_semaphore_t* s, uint64_t value) {
  uint64_t now = gpuhal__atomic_load(&s->value), low = gpuhal__atomic_load(&s->armed_low);
  return gpuhal__atomic_load(&s->armed_until) > now && (low <= now || value >= low);
}

/* Under the lock: a wait arms `s` for `value` (above the current value). */
static void gpuhal__semaphore_arm_locked(gpuhal_semaphore_t* s, uint64_t value) {
  if (s->shared) return; /* armed for every value from its export on */
  if (value > s->armed_until) gpuhal__atomic_store(&s->armed_until, value);
  if (s->armed_low <= s->value || value < s->armed_low) gpuhal__atomic_store(&s->armed_low, value);
}

GPUHAL__PRIVATE int gpuhal__semaphore_wants_word(gpuhal_semaphore_t* s, uint64_t value) {
  return !gpuhal__atomic_load(&s->word) && gpuhal__semaphore_armed_for(s, value);
}

GPUHAL__PRIVATE CUdeviceptr gpuhal__semaphore_signal_begin(gpuhal_semaphore_t* s, uint64_t value, uint64_t** spare_word,
                                                           int always) {
  CUdeviceptr armed;
  int wanted;
  if (!*spare_word) {
    /* Without the lock (the issue's fast path): an arming that saw `signalling` at 0 just
     * before this increment and whose armed_until this misses makes a GPU wait on the word
     * that this signal does not write; the host's store of the value, once it sees this
     * work's event complete, releases that wait a little later. An arming that sees the
     * increment is refused, as under the lock. */
    volatile uint64_t* word;
    gpuhal__atomic_add(&s->signalling, 1u);
    word = gpuhal__atomic_load(&s->word);
    return word && (always || gpuhal__semaphore_armed_for(s, value)) ? s->word_address : 0;
  }
  gpuhal__mutex_lock(&s->mutex);
  gpuhal__atomic_add(&s->signalling, 1u);
  wanted = always || gpuhal__semaphore_armed_for(s, value);
  if (wanted) gpuhal__semaphore_install_word_locked(s, spare_word);
  armed = s->word && wanted ? s->word_address : 0;
  gpuhal__mutex_unlock(&s->mutex);
  return armed;
}

/* Under the lock: one signal issue of `s` ended; the last one wakes the GPU waits that
 * were refused an arming meanwhile (wants_submitted waiters look again). */
static void gpuhal__semaphore_signal_end_locked(gpuhal_semaphore_t* s) {
  if (gpuhal__atomic_sub(&s->signalling, 1u) > 0 || !s->arm_refused) return;
  s->arm_refused = 0;
  gpuhal__semaphore_notify_locked(s, UINT64_MAX);
}

GPUHAL__PRIVATE void gpuhal__semaphore_word_keep(gpuhal_semaphore_t* s) {
  gpuhal__mutex_lock(&s->mutex);
  s->word_unsafe = 1;
  gpuhal__mutex_unlock(&s->mutex);
}

GPUHAL__PRIVATE void gpuhal__semaphore_parked_keep(gpuhal_semaphore_t* s, gpuhal__semaphore_waiter_t* waiter,
                                                   uint64_t value) {
  gpuhal__mutex_lock(&s->mutex);
  waiter->value = value;
  waiter->signals_it = 0;
  gpuhal__list_push_back(&s->parked, &waiter->link);
  gpuhal__mutex_unlock(&s->mutex);
}

GPUHAL__PRIVATE void gpuhal__semaphore_signal_end(gpuhal_semaphore_t* s, int wrote) {
  gpuhal__mutex_lock(&s->mutex);
  if (wrote) s->word_unsafe = 1;
  gpuhal__semaphore_signal_end_locked(s);
  gpuhal__mutex_unlock(&s->mutex);
}

/* Under the lock: whether nothing can advance `s` any more while something waits for a
 * value it has not reached. The application holds no reference (no host signal can come),
 * no other process shares it, and every queue action that signals it is itself blocked on
 * a value of `s` not reached yet (a chain on one timeline whose head waits for a signal
 * that now never comes). Such waits would hold their work, its command buffer and device
 * forever: the caller fails `s` instead (gpuhal__semaphore_abandon_locked). `self_blocked`
 * and `unmet` count the caller's own wait, not registered yet. Work blocked on another
 * abandoned semaphore is found through that one's failure, which fails the work and drops
 * its signals. Cycles through several semaphores are not looked for. */
static int gpuhal__semaphore_abandoned_locked(gpuhal_semaphore_t* s, uint32_t self_blocked, int unmet) {
  gpuhal__list_node_t* n;
  uint32_t live;
  if (s->failure || s->shared || gpuhal__atomic_load(&s->object.user_refs) > 0) return 0;
  live = gpuhal__atomic_load(&s->signallers);
  /* Submitted signals, oldest first: the head of a moving chain waits for nothing unreached,
   * so a healthy chain is told apart at its first timepoint. */
  for (n = s->timepoints.next; n != &s->timepoints; n = n->next) {
    const gpuhal__timepoint_t* tp = GPUHAL__CONTAINER_OF(n, gpuhal__timepoint_t, link);
    if (tp->own_wait <= s->value) return 0;
    self_blocked++;
    unmet = 1;
  }
  /* Waits on the host, then waits on the GPU (work not issued yet counts there, as it is
   * in no timepoint). Counting one action twice could make the sum match by mistake; once
   * too few only delays the finding. */
  for (n = s->waiters.next; n != &s->waiters; n = n->next) {
    const gpuhal__semaphore_waiter_t* w = GPUHAL__CONTAINER_OF(n, gpuhal__semaphore_waiter_t, link);
    if (w->value <= s->value) continue;
    unmet = 1;
    self_blocked += w->signals_it;
  }
  for (n = s->parked.next; n != &s->parked; n = n->next) {
    const gpuhal__semaphore_waiter_t* w = GPUHAL__CONTAINER_OF(n, gpuhal__semaphore_waiter_t, link);
    if (w->value <= s->value) continue;
    unmet = 1;
    self_blocked += w->signals_it;
  }
  return unmet && self_blocked == live;
}

/* Under the lock: fails an abandoned `s` (see above), releasing everything that waits. */
static void gpuhal__semaphore_abandon_locked(gpuhal_semaphore_t* s) {
  gpuhal__semaphore_fail_locked(
      s, gpuhal_status_make(GPUHAL_STATUS_ABORTED,
                            "semaphore%s%s%s was released by the application at value %llu while work (queued, or a "
                            "host wait) still waited for a higher value, and nothing else can signal it: that "
                            "work is abandoned",
                            GPUHAL__LABEL_ARGS(s->label), (unsigned long long)s->value));
}

GPUHAL__PRIVATE void gpuhal__semaphore_add_timepoint(gpuhal_semaphore_t* s, gpuhal__timepoint_t* tp) {
  gpuhal__list_node_t* n;
  gpuhal__signal_after_t after;
  uint32_t i;
  after.count = 0;
  gpuhal__mutex_lock(&s->mutex);
  if (s->failure || tp->value <= s->value) {
    gpuhal__semaphore_signal_end_locked(s);
    gpuhal__mutex_unlock(&s->mutex);
    return;
  }
  /* Sorted insert, searching from the back: values are mostly signalled in order. */
  n = s->timepoints.prev;
  while (n != &s->timepoints && GPUHAL__CONTAINER_OF(n, gpuhal__timepoint_t, link)->value > tp->value) n = n->prev;
  gpuhal__list_insert_after(n, &tp->link);
  /* A shared semaphore's waits always go to the word: another process may signal it. */
  if (!s->queue_signalled && !s->shared) gpuhal__atomic_store(&s->queue_signalled, 1);
  gpuhal__semaphore_publish_newest_locked(s);
  /* Work of another device that this submission lets go is issued on this thread, as a host
   * signal does (gpuhal__queue_issue_woken: a trylock of that device's issue lock), not left
   * to a wake-up of its worker: a chain across devices whose every hop waits to be
   * submitted would otherwise go one worker wake-up per hop. */
  s->after = &after;
  gpuhal__semaphore_notify_locked(s, tp->value);
  s->after = NULL;
  gpuhal__semaphore_signal_end_locked(s);
  /* Work that waits on the GPU for this same semaphore, issued after the application let go
   * of it: it counts as blocked only from here (gpuhal__semaphore_parked_issued). */
  if (tp->own_wait > s->value && gpuhal__atomic_load(&s->object.user_refs) == 0 &&
      gpuhal__semaphore_abandoned_locked(s, 0, 0))
    gpuhal__semaphore_abandon_locked(s);
  gpuhal__mutex_unlock(&s->mutex);
  for (i = 0; i < after.count; ++i) after.calls[i].run(after.calls[i].arg);
}

GPUHAL__PRIVATE void gpuhal__semaphore_remove_timepoint(gpuhal__timepoint_t* tp) {
  gpuhal_semaphore_t* s = tp->semaphore;
  gpuhal__mutex_lock(&s->mutex);
  gpuhal__list_remove(&tp->link);
  gpuhal__semaphore_publish_newest_locked(s);
  gpuhal__mutex_unlock(&s->mutex);
}

GPUHAL__PRIVATE void gpuhal__semaphore_reassert_failure(gpuhal_semaphore_t* s) {
  if (!gpuhal__atomic_load(&s->failure) || !gpuhal__atomic_load(&s->word)) return;
  gpuhal__mutex_lock(&s->mutex);
  gpuhal__atomic_store(s->word, GPUHAL__WORD_FAILED(s));
  gpuhal__mutex_unlock(&s->mutex);
}

GPUHAL__PRIVATE CUdeviceptr gpuhal__semaphore_failed_word(gpuhal_semaphore_t* s, uint64_t* out_value) {
  CUdeviceptr address = 0;
  if (!gpuhal__atomic_load(&s->failure) || !gpuhal__atomic_load(&s->word)) return 0;
  gpuhal__mutex_lock(&s->mutex);
  if (s->word) {
    address = s->word_address;
    *out_value = GPUHAL__WORD_FAILED(s);
  }
  gpuhal__mutex_unlock(&s->mutex);
  return address;
}

GPUHAL__PRIVATE void gpuhal__semaphore_fail_owned(gpuhal_semaphore_t* s, gpuhal_status_t cause) {
  if (!cause) cause = gpuhal_status_make(GPUHAL_STATUS_ABORTED, "semaphore failed without a cause");
  gpuhal__mutex_lock(&s->mutex);
  if (s->failure) {
    /* Work that failed after signalling may have written its value over the failed word
     * (its value write precedes its event): store it again. */
    if (s->word) gpuhal__atomic_store(s->word, GPUHAL__WORD_FAILED(s));
    gpuhal__mutex_unlock(&s->mutex);
    gpuhal_status_free(cause);
    return;
  }
  if (s->shared) gpuhal__semaphore_shared_publish_failure(s, cause); /* before the word says failed */
  gpuhal__semaphore_fail_locked(s, cause);
  gpuhal__mutex_unlock(&s->mutex);
}

GPUHAL__PRIVATE void gpuhal__semaphore_fail_locked(gpuhal_semaphore_t* s, gpuhal_status_t cause) {
  gpuhal__atomic_store(&s->failure, cause);                           /* host waiters read it without the mutex */
  if (s->word) gpuhal__atomic_store(s->word, GPUHAL__WORD_FAILED(s)); /* releases GPU waits */
  if (s->shared) gpuhal__semaphore_shared_wake(s);
  while (!gpuhal__list_empty(&s->timepoints)) gpuhal__list_pop_front(&s->timepoints);
  gpuhal__semaphore_publish_newest_locked(s);
  gpuhal__semaphore_notify_locked(s, 0);
  while (!gpuhal__list_empty(&s->fail_watchers)) {
    gpuhal__semaphore_waiter_t* w =
        GPUHAL__CONTAINER_OF(gpuhal__list_pop_front(&s->fail_watchers), gpuhal__semaphore_waiter_t, link);
    w->notify(w);
  }
}

GPUHAL__PRIVATE void gpuhal__semaphore_signaller_add(gpuhal_semaphore_t* s) { gpuhal__atomic_add(&s->signallers, 1u); }

GPUHAL__PRIVATE void gpuhal__semaphore_parked_issued(gpuhal_semaphore_t* s, gpuhal__semaphore_waiter_t* waiter) {
  if (!waiter->signals_it) return;
  gpuhal__mutex_lock(&s->mutex);
  waiter->signals_it = 0;
  gpuhal__mutex_unlock(&s->mutex);
}

GPUHAL__PRIVATE void gpuhal__semaphore_signaller_done(gpuhal_semaphore_t* s) {
  /* Against the application's release (gpuhal_semaphore_release), a store-then-load
   * handshake: this one sees its release, or that one sees this signaller gone. */
  gpuhal__atomic_sub_seq_cst(&s->signallers, 1u);
  if (gpuhal__atomic_load_seq_cst(&s->object.user_refs) > 0) return;
  gpuhal__mutex_lock(&s->mutex);
  if (gpuhal__semaphore_abandoned_locked(s, 0, 0)) gpuhal__semaphore_abandon_locked(s);
  gpuhal__mutex_unlock(&s->mutex);
}

GPUHAL__PRIVATE void gpuhal__semaphore_advance_locked(gpuhal_semaphore_t* s, uint64_t value) {
  if (s->failure || value <= s->value) return;
  gpuhal__atomic_store(&s->value, value);
  gpuhal__semaphore_drop_completed_timepoints_locked(s);
  gpuhal__semaphore_notify_locked(s, 0);
}

GPUHAL__PRIVATE gpuhal__wait_state_t gpuhal__semaphore_check(gpuhal_semaphore_t* s, uint64_t value,
                                                             gpuhal__wait_query_t* q) {
  gpuhal__wait_state_t state = GPUHAL__WAIT_PENDING;
  GPUHAL__COUNT(semaphore_check);
  gpuhal__mutex_lock(&s->mutex);
  if (s->shared) gpuhal__semaphore_shared_pull_locked(s);
  if (s->failure) {
    q->failure = gpuhal_status_clone(s->failure);
    state = GPUHAL__WAIT_FAILED;
  } else if (s->value >= value) {
    state = GPUHAL__WAIT_COMPLETED;
  } else {
    gpuhal__list_node_t* n;
    if (q->look_submitted) {
      /* The earliest submitted timepoint at or above `value`: search from the newest, since
       * a chain waits on the value just submitted while many older ones are in flight. */
      gpuhal__timepoint_t* best = NULL;
      for (n = s->timepoints.prev; n != &s->timepoints; n = n->prev) {
        gpuhal__timepoint_t* tp = GPUHAL__CONTAINER_OF(n, gpuhal__timepoint_t, link);
        if (tp->value < value) break;
        /* Provisional work signalling above `value` may itself wait (through a GPU value
         * wait) for `value`: a GPU wait on its event could close a cycle. Such a wait
         * waits on the word instead (which passes `value` no later than that work runs),
         * or on the host. */
        if (tp->provisional && (q->skip_provisional || (q->order_stream && tp->value != value))) {
          if (tp->event->pool == q->local_events) q->provisional_skipped = 1;
          continue;
        }
        best = tp;
      }
      if (best) {
        if (q->take_event && (!q->order_stream || best->event->stream != q->order_stream)) {
          gpuhal__event_retain(best->event);
          q->event = best->event;
          if (best->event->pool == q->local_events) {
            q->event_lane = best->issue_lane;
            q->event_seq = best->issue_seq;
          }
        }
        q->event_value = best->value;
        q->foreign = (q->local_events && best->event->pool != q->local_events) || best->inputs_checked;
        q->provisional = best->provisional;
        q->word_written = best->word_written;
        state = GPUHAL__WAIT_SUBMITTED;
      }
    }
    /* No refusal while a signal is being issued: that signal's timepoint then says its work
     * does not write the word, and the host waiter queries its event instead. */
    if (state == GPUHAL__WAIT_PENDING && q->waiter && !gpuhal__semaphore_waiter_registered(q->waiter) &&
        gpuhal__semaphore_abandoned_locked(s, q->waiter->signals_it, 1)) {
      gpuhal__semaphore_abandon_locked(s);
      q->failure = gpuhal_status_clone(s->failure);
      gpuhal__mutex_unlock(&s->mutex);
      return GPUHAL__WAIT_FAILED;
    }
    if (state == GPUHAL__WAIT_PENDING && q->host_arm && q->waiter && !gpuhal__semaphore_waiter_registered(q->waiter))
      gpuhal__semaphore_arm_locked(s, value);
    if (state == GPUHAL__WAIT_PENDING && q->spare_word && !gpuhal__semaphore_word_may_wait(s, value)) {
      /* too far above for the GPU's compare: the wait stays on the host */
    } else if (state == GPUHAL__WAIT_PENDING && q->spare_word && !gpuhal__atomic_load(&s->signalling)) {
      gpuhal__semaphore_install_word_locked(s, &q->spare_word);
      q->word_address = s->word_address;
      gpuhal__semaphore_arm_locked(s, value);
      if (q->waiter) {
        /* Still registered from a try that could not park (no stream free): on the GPU now. */
        gpuhal__semaphore_waiter_unlink_locked(s, q->waiter);
        q->waiter->value = value;
        gpuhal__list_push_back(&s->parked, &q->waiter->link);
      }
      state = GPUHAL__WAIT_ARMED;
    } else if (state == GPUHAL__WAIT_PENDING && q->spare_word) {
      /* Not armed while a signal is being issued (see gpuhal__semaphore_signal_begin): the
       * wait stays on the host until that signal is published, then looks again. */
      s->arm_refused = 1;
    }
    if (state == GPUHAL__WAIT_PENDING) {
      if (q->waiter && !gpuhal__semaphore_waiter_registered(q->waiter)) {
        q->waiter->value = value;
        gpuhal__semaphore_waiter_link_locked(s, q->waiter);
      }
    }
  }
  gpuhal__mutex_unlock(&s->mutex);
  return state;
}

GPUHAL__PRIVATE void gpuhal__semaphore_unregister(gpuhal_semaphore_t* s, gpuhal__semaphore_waiter_t* waiter) {
  gpuhal__mutex_lock(&s->mutex);
  gpuhal__semaphore_waiter_unlink_locked(s, waiter);
  gpuhal__mutex_unlock(&s->mutex);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__semaphore_watch_failure(gpuhal_semaphore_t* s,
                                                                gpuhal__semaphore_waiter_t* watch) {
  gpuhal_status_t failure = NULL;
  gpuhal__mutex_lock(&s->mutex);
  if (s->shared) gpuhal__semaphore_shared_pull_locked(s);
  if (s->failure)
    failure = gpuhal_status_clone(s->failure);
  else if (!gpuhal__semaphore_waiter_registered(watch))
    gpuhal__list_push_back(&s->fail_watchers, &watch->link);
  gpuhal__mutex_unlock(&s->mutex);
  return failure;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__semaphore_failure_for(gpuhal_status_t cause_clone, const char* who,
                                                              const gpuhal_semaphore_t* s, uint64_t value) {
  return gpuhal_status_annotate(cause_clone, "while %s waited for semaphore%s%s%s to reach %llu", who,
                                GPUHAL__LABEL_ARGS(s->label), (unsigned long long)value);
}

/* ---- public: lifetime and host signalling ---- */

GPUHAL_API gpuhal_status_t gpuhal_semaphore_create(gpuhal_driver_t* driver, uint64_t initial_value,
                                                   gpuhal_semaphore_t** out_semaphore) {
  gpuhal_semaphore_t* s = NULL;
  GPUHAL__CHECK_ARG(out_semaphore != NULL, "out_semaphore", "must not be NULL");
  *out_semaphore = NULL;
  GPUHAL__CHECK_OBJECT(driver, GPUHAL__MAGIC_DRIVER);
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__object_alloc(&driver->objects, GPUHAL__MAGIC_SEMAPHORE, sizeof(*s), "gpuhal_semaphore_t", (void**)&s));
  gpuhal__object_init(&s->object, GPUHAL__MAGIC_SEMAPHORE);
  gpuhal__driver_retain_ref(driver); /* a semaphore may outlive the user's driver reference */
  s->driver = driver;
  s->allocator = driver->allocator;
  gpuhal__mutex_init(&s->mutex);
  s->value = initial_value;
  s->shared_fd = -1;
  gpuhal__list_init(&s->timepoints);
  gpuhal__list_init(&s->waiters);
  gpuhal__list_init(&s->parked);
  gpuhal__list_init(&s->fail_watchers);
  gpuhal__list_init(&s->shared_link);
  *out_semaphore = s;
  return NULL;
}

GPUHAL_API void gpuhal_semaphore_retain(gpuhal_semaphore_t* semaphore) {
  if (!gpuhal__object_is_held(semaphore, GPUHAL__MAGIC_SEMAPHORE)) return;
  gpuhal__object_user_retain(&semaphore->object);
}

GPUHAL__PRIVATE void gpuhal__semaphore_release_ref(gpuhal_semaphore_t* semaphore) {
  if (!gpuhal__object_release(&semaphore->object)) return;
  /* First out of the driver's watch, whose thread reads the semaphore until then. */
  if (semaphore->shared) {
    gpuhal__semaphore_shared_destroy(semaphore);
    semaphore->word = semaphore->unshared_word;
  }
  /* Nothing can be registered now: waiters and actions hold references. */
  GPUHAL_ASSERT(gpuhal__list_empty(&semaphore->waiters) && !semaphore->waiting.root &&
                gpuhal__list_empty(&semaphore->parked));
  gpuhal_status_free(semaphore->failure);
  semaphore->failure = NULL;
  /* No GPU work refers to the word now: every action that used it held a reference. */
  if (semaphore->word && !semaphore->word_unsafe) gpuhal__word_return(semaphore->driver, semaphore->word);
  semaphore->word = NULL;
  gpuhal__mutex_destroy(&semaphore->mutex);
  {
    gpuhal_driver_t* driver = semaphore->driver;
    gpuhal__object_free(&driver->objects, GPUHAL__MAGIC_SEMAPHORE, semaphore);
    gpuhal__driver_release_ref(driver);
  }
}

GPUHAL_API void gpuhal_semaphore_release(gpuhal_semaphore_t* semaphore) {
  gpuhal_driver_t* driver;
  uint64_t settle; /* gpuhal__driver_settle_begin: 0, or the settle begun */
  /* NULL or a released handle: ignore rather than crash */
  if (!gpuhal__object_is_live(semaphore, GPUHAL__MAGIC_SEMAPHORE)) return;
  if (!gpuhal__object_user_release(&semaphore->object)) {
    gpuhal__log_extra_release(&semaphore->driver->logger, __func__, "a semaphore");
    return;
  }
  driver = semaphore->driver;
  settle = gpuhal__driver_settle_begin(driver);
  gpuhal__atomic_fence(); /* the release before the look at signallers (gpuhal__semaphore_signaller_done) */
  /* Queue work still holds it: if none of that work can signal it, what waits never runs. */
  if (gpuhal__atomic_load(&semaphore->object.refcount) > 1) {
    gpuhal__mutex_lock(&semaphore->mutex);
    if (gpuhal__semaphore_abandoned_locked(semaphore, 0, 0)) gpuhal__semaphore_abandon_locked(semaphore);
    gpuhal__mutex_unlock(&semaphore->mutex);
  }
  gpuhal__semaphore_release_ref(semaphore);
  gpuhal__driver_settle_end(driver, settle);
}

/* Looks at the newest submitted value's event (one cuEventQuery; never blocks) and advances
 * the semaphore if that work is done, so a query is current even before the completion
 * thread gets there: after waiting on work that depended on this value, a query shows it. */
static void gpuhal__semaphore_poll(gpuhal_semaphore_t* s) {
  gpuhal__event_t* event = NULL;
  uint64_t value = 0;
  gpuhal__mutex_lock(&s->mutex);
  if (!s->failure && !gpuhal__list_empty(&s->timepoints)) {
    gpuhal__timepoint_t* newest = GPUHAL__CONTAINER_OF(s->timepoints.prev, gpuhal__timepoint_t, link);
    event = newest->event;
    value = newest->value;
    gpuhal__event_retain(event);
  }
  gpuhal__mutex_unlock(&s->mutex);
  if (!event) return;
  if (gpuhal__event_query(event) == 0) gpuhal__semaphore_advance_from_event(s, event, value);
  gpuhal__event_release(event);
}

GPUHAL_API gpuhal_status_t gpuhal_semaphore_query(gpuhal_semaphore_t* semaphore, uint64_t* out_value) {
  gpuhal_status_t failure = NULL;
  GPUHAL__CHECK_ARG(out_value != NULL, "out_value", "must not be NULL");
  *out_value = 0;
  GPUHAL__CHECK_OBJECT(semaphore, GPUHAL__MAGIC_SEMAPHORE);
  gpuhal__semaphore_poll(semaphore);
  gpuhal__mutex_lock(&semaphore->mutex);
  if (semaphore->shared) gpuhal__semaphore_shared_pull_locked(semaphore);
  if (semaphore->failure) failure = gpuhal_status_clone(semaphore->failure);
  *out_value = semaphore->value;
  gpuhal__mutex_unlock(&semaphore->mutex);
  return failure;
}

/* A signal made on the host: the value is stored, its waiters woken, and the actions that
 * woke are issued on this thread once the lock is released. From gpuhal_semaphore_signal
 * (`by_queue` 0: a failed semaphore or a value not above the current one is an error) or a
 * queue call done as it was issued (gpuhal__semaphore_signal_at_once: those are ignored, as
 * an action's signal ignores them). */
static gpuhal_status_t gpuhal__semaphore_signal_host(gpuhal_semaphore_t* semaphore, uint64_t value, int by_queue) {
  gpuhal_status_t result = NULL;
  gpuhal__signal_after_t after;
  uint32_t i;
  after.count = 0;
  gpuhal__mutex_lock(&semaphore->mutex);
  /* Another process may have raised or failed it since this one last looked. */
  if (semaphore->shared) gpuhal__semaphore_shared_pull_locked(semaphore);
  if (semaphore->failure) {
    if (!by_queue)
      result = gpuhal_status_annotate(gpuhal_status_clone(semaphore->failure),
                                      "gpuhal_semaphore_signal: the semaphore has failed");
  } else if (value <= semaphore->value) {
    if (!by_queue)
      result = gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                                  "gpuhal_semaphore_signal: argument 'value' (%llu) must be above the current "
                                  "value (%llu): timeline values only grow",
                                  (unsigned long long)value, (unsigned long long)semaphore->value);
  } else {
    gpuhal__semaphore_store_locked(semaphore, value);
    if (semaphore->queue_signalled != by_queue && !semaphore->shared)
      gpuhal__atomic_store(&semaphore->queue_signalled, by_queue);
    gpuhal__semaphore_drop_completed_timepoints_locked(semaphore);
    semaphore->after = &after;
    gpuhal__semaphore_notify_locked(semaphore, 0);
    semaphore->after = NULL;
  }
  gpuhal__mutex_unlock(&semaphore->mutex);
  /* Each call keeps what its arg points to alive until it ran (gpuhal__queue_issue_woken). */
  for (i = 0; i < after.count; ++i) after.calls[i].run(after.calls[i].arg);
  return result;
}

/* A shared semaphore's word holds its value whole, and the GPU compares with wraparound:
 * values of 2^63 and more would hold GPU waits for small values forever. */
static gpuhal_status_t gpuhal__semaphore_check_shared_value(const gpuhal_semaphore_t* s, uint64_t value,
                                                            const char* func, const char* arg) {
  if (!s->shared || value <= GPUHAL__WORD_MAX) return NULL;
  return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                            "%s: argument '%s' (%llu) is above 2^63 - 1, the most a shared semaphore may reach (GPU "
                            "waits compare its values with wraparound)",
                            func, arg, (unsigned long long)value);
}

GPUHAL_API gpuhal_status_t gpuhal_semaphore_signal(gpuhal_semaphore_t* semaphore, uint64_t value) {
  GPUHAL__CHECK_OBJECT(semaphore, GPUHAL__MAGIC_SEMAPHORE);
  GPUHAL__RETURN_IF_ERROR(gpuhal__semaphore_check_shared_value(semaphore, value, __func__, "value"));
  return gpuhal__semaphore_signal_host(semaphore, value, 0);
}

GPUHAL__PRIVATE void gpuhal__semaphore_signal_at_once(gpuhal_semaphore_t* s, uint64_t value) {
  gpuhal__semaphore_signal_host(s, value, 1);
}

GPUHAL__PRIVATE int gpuhal__semaphore_reached(gpuhal_semaphore_t* s, uint64_t value) {
  if (s->shared && gpuhal__atomic_load(&s->value) < value && gpuhal__semaphore_value_seen(s) >= value)
    gpuhal__semaphore_shared_pull(s);
  return gpuhal__atomic_load(&s->failure) == NULL && gpuhal__atomic_load(&s->value) >= value;
}

GPUHAL_API gpuhal_status_t gpuhal_semaphore_set_label(gpuhal_semaphore_t* semaphore, const char* label) {
  GPUHAL__CHECK_OBJECT(semaphore, GPUHAL__MAGIC_SEMAPHORE);
  gpuhal__label_copy(semaphore->label, label);
  return NULL;
}

GPUHAL_API void gpuhal_semaphore_fail(gpuhal_semaphore_t* semaphore, gpuhal_status_t cause) {
  gpuhal_status_t bad = gpuhal__object_check(semaphore, GPUHAL__MAGIC_SEMAPHORE, __func__, "semaphore");
  if (bad) {
    gpuhal_status_free(bad);
    gpuhal_status_free(cause);
    return;
  }
  gpuhal__semaphore_fail_owned(semaphore, cause);
}

GPUHAL_API gpuhal_semaphore_list_t gpuhal_semaphore_list_empty(void) {
  gpuhal_semaphore_list_t list;
  list.count = 0;
  list.semaphores = NULL;
  list.values = NULL;
  return list;
}

GPUHAL_API gpuhal_semaphore_list_t gpuhal_semaphore_list_one(gpuhal_semaphore_t* const* semaphore,
                                                             const uint64_t* value) {
  gpuhal_semaphore_list_t list;
  list.count = (semaphore && value) ? 1u : 0u;
  list.semaphores = semaphore;
  list.values = value;
  return list;
}

/* ---- host waits ----
 * A host wait registers one waiter node per entry on the entry's semaphore; the nodes share
 * one mutex + condition variable, on which the waiting thread sleeps. Notifiers run under
 * the semaphore's lock and take the shared mutex to update the count, so once the waiting
 * thread has unregistered every node (under each semaphore's lock) no notifier can still be
 * touching its stack. */
typedef struct gpuhal__host_wait_s {
  gpuhal__mutex_t mutex;
  gpuhal__cond_t cond;
  uint32_t notified; /* nodes notified so far */
  /* The one shared semaphore waited on, whose sleepers sleep on its shared wake-up
   * (gpuhal__semaphore_shared_sleep): a notification wakes that too. */
  gpuhal_semaphore_t* shared;
} gpuhal__host_wait_t;

static void gpuhal__host_wait_notify(gpuhal__semaphore_waiter_t* waiter) {
  gpuhal__host_wait_t* hw = (gpuhal__host_wait_t*)waiter->user;
  gpuhal__mutex_lock(&hw->mutex);
  gpuhal__atomic_add(&hw->notified, 1u); /* also read unlocked by a spinning waiter */
  gpuhal__cond_signal(&hw->cond);
  gpuhal__mutex_unlock(&hw->mutex);
  if (hw->shared) gpuhal__semaphore_shared_wake(hw->shared);
}

/* The sleep before the next poll of a wait that started at `start`: a small fraction of the
 * time waited, or until `first_poll` if that is later, bounded, and never past the
 * deadline. */
static int64_t gpuhal__host_wait_sleep_ns(int64_t start, int64_t first_poll, int64_t max_sleep_ns,
                                          gpuhal_timeout_t timeout) {
  int64_t now = gpuhal_now_ns();
  int64_t sleep_ns = (now - start) / GPUHAL__HOST_WAIT_SLEEP_FRACTION;
  if (sleep_ns < GPUHAL__HOST_WAIT_MIN_SLEEP_NS) sleep_ns = GPUHAL__HOST_WAIT_MIN_SLEEP_NS;
  if (sleep_ns < first_poll - now) sleep_ns = first_poll - now;
  if (sleep_ns > max_sleep_ns) sleep_ns = max_sleep_ns;
  if (!gpuhal__timeout_is_infinite(timeout) && sleep_ns > timeout.deadline_ns - now)
    sleep_ns = timeout.deadline_ns - now;
  return sleep_ns;
}

/* The spin window of a host wait on `s`, adapted to how long its waits take: a wait that
 * outlasts the full window (tuning.host_wait_spin_ns) is one a pipeline makes on work far
 * ahead (bench_pipeline), where spinning only burns a core, so the next wait spins half as
 * long (down to 1/256); a wait that ends inside the full window is one spinning catches
 * sooner than a sleep would, so the next spins fully again. */
#define GPUHAL__HOST_WAIT_MAX_SPIN_HALVINGS 8
static int64_t gpuhal__host_wait_spin_ns(const gpuhal_semaphore_t* s, const gpuhal_queue_tuning_t* tuning) {
  int32_t halvings = gpuhal__atomic_load_relaxed(&s->spin_halvings);
  return tuning->host_wait_spin_ns > 0 ? tuning->host_wait_spin_ns >> halvings : tuning->host_wait_spin_ns;
}
static void gpuhal__host_wait_spin_learn(gpuhal_semaphore_t* s, const gpuhal_queue_tuning_t* tuning, int64_t waited) {
  int32_t halvings = gpuhal__atomic_load_relaxed(&s->spin_halvings);
  if (tuning->host_wait_spin_ns <= 0) return;
  if (waited <= tuning->host_wait_spin_ns) {
    if (halvings) gpuhal__atomic_store_relaxed(&s->spin_halvings, 0);
  } else if (halvings < GPUHAL__HOST_WAIT_MAX_SPIN_HALVINGS) {
    gpuhal__atomic_store_relaxed(&s->spin_halvings, halvings + 1);
  }
}

/* When a host wait past its spin window first polls: a wait on work that takes about as long
 * as this semaphore's last two waits is not over before half of their length, so polling
 * sooner only burns CPU: a pipeline's throttle wait polled about 30 times a batch where a
 * dozen do (bench_pipeline, tests/bench/RESULTS.md). The shorter of the two counts, so waits
 * that alternate long and short poll as the short ones need; a wait shorter than half of
 * both oversleeps once (by at most a sleep's bound), and the learning starts over. Half, not
 * the completion thread's 3/4: pipeline waits vary enough that 3/4 started over often, and
 * cost more than it saved (RESULTS.md). */
static int64_t gpuhal__host_wait_first_poll_ns(const gpuhal_semaphore_t* s) {
  return gpuhal__atomic_load_relaxed(&s->wait_typical_ns) / 2;
}
/* `waited`: how long a wait took, or 0 when its first poll after the learned sleep found the
 * work done already: it may have ended long before (work shorter than the last), so nothing
 * is known and the learning starts over (else a short wait after long ones would teach its
 * own oversleep, and each of the next ones oversleep a little less). */
static void gpuhal__host_wait_length_learn(gpuhal_semaphore_t* s, int64_t waited) {
  int64_t last = gpuhal__atomic_load_relaxed(&s->wait_last_ns);
  gpuhal__atomic_store_relaxed(&s->wait_typical_ns, last < waited ? last : waited);
  gpuhal__atomic_store_relaxed(&s->wait_last_ns, waited);
}

/* Waits on this thread for `event`, which reaches `event_value` >= `value` of `s` (or for
 * the word, when `word_written`: see inside): polls it for the spin window
 * (gpuhal__host_wait_spin_ns), then (with `may_sleep`: the wait needs nothing
 * else) between growing sleeps until the timeout. Once it completed, the value is advanced
 * right here. Returns 1 when it completed, 0 when the window or the timeout passed first,
 * the value was reached or failed another way, or the query failed (errors are the
 * completion side's to report). Always releases the event. */
GPUHAL__PRIVATE gpuhal__hang_watch_t gpuhal__hang_watch(gpuhal_driver_t* driver, int64_t start) {
  gpuhal__hang_watch_t w;
  w.driver = driver;
  w.start = start;
  w.due = driver->hang_report_ns ? start + driver->hang_report_ns : 0;
  return w;
}
GPUHAL__PRIVATE gpuhal_timeout_t gpuhal__hang_watch_bound(const gpuhal__hang_watch_t* w, gpuhal_timeout_t timeout) {
  return w->due && w->due < timeout.deadline_ns ? gpuhal_timeout_deadline_ns(w->due) : timeout;
}
GPUHAL__PRIVATE void gpuhal__hang_watch_check(gpuhal__hang_watch_t* w) {
  int64_t now;
  if (!w->due || (now = gpuhal_now_ns()) < w->due) return;
  w->due = 0;
  gpuhal__hooks()->hang_report(w->driver, now - w->start);
}

static int gpuhal__semaphore_await_event(gpuhal_semaphore_t* s, uint64_t value, gpuhal__event_t* event,
                                         uint64_t event_value, int word_written, gpuhal_timeout_t timeout,
                                         int may_sleep, gpuhal__hang_watch_t* watch) {
  const gpuhal_queue_tuning_t* tuning = &event->pool->device->params.tuning;
  int64_t start = gpuhal_now_ns();
  int64_t spin_end = start + gpuhal__host_wait_spin_ns(s, tuning);
  int64_t first_poll = start + gpuhal__host_wait_first_poll_ns(s);
  int poll = gpuhal__timeout_expired(timeout); /* a look, not a wait: it teaches no length */
  int early = 0; /* the last sleep reached toward first_poll: what it ended on was not seen end */
  /* The work writes the word after it ran (the write fences what came before it in its
   * stream): the word passing the value is as good as the event completing, and reading it
   * costs nothing. (It may also pass for a later signal or a failure store: the timeline
   * is past the value then too, and a failure is looked at first.) A value above what a word
   * holds is told by the event alone. */
  volatile uint64_t* word = word_written && event_value == gpuhal__semaphore_word_value(s, event_value)
                                ? gpuhal__atomic_load(&s->word)
                                : NULL;
  int r, advanced = 0;
  gpuhal__capture_scope_t capture; /* relaxed at the first query, for the loop (device.h) */
  capture.changed = 0;
  for (;;) {
    int64_t now;
    if (word && !gpuhal__atomic_load(&s->failure) && gpuhal__atomic_load(word) >= event_value) {
      word = NULL; /* once: if work it waited on is not known reached yet, the event decides */
      if (gpuhal__semaphore_advance_from_event(s, event, event_value)) {
        r = 0;
        advanced = 1;
        break;
      }
    }
    if (!word && !capture.changed) gpuhal__capture_relax(event->pool->device->cu, &capture);
    r = word ? 1 : gpuhal__event_query(event);
    if (r != 1) break;
    if (gpuhal__atomic_load(&s->value) >= value || gpuhal__atomic_load(&s->failure) != NULL) break;
    now = gpuhal_now_ns();
    if (gpuhal__timeout_expired(timeout) || (now >= spin_end && !may_sleep)) break;
    early = now >= spin_end && now < first_poll;
    if (now >= spin_end)
      gpuhal__sleep_ns(gpuhal__host_wait_sleep_ns(start, first_poll, tuning->host_wait_max_sleep_ns, timeout));
    gpuhal__hang_watch_check(watch);
  }
  gpuhal__capture_restore(event->pool->device->cu, &capture);
  if (r == 0 && !advanced && !gpuhal__semaphore_advance_from_event(s, event, event_value)) r = 1;
  /* However it ended (here, or by the completion side advancing the value first). */
  if (may_sleep && (r == 0 || gpuhal__atomic_load(&s->value) >= value)) {
    int64_t waited = gpuhal_now_ns() - start;
    gpuhal__host_wait_spin_learn(s, tuning, waited);
    if (!poll) gpuhal__host_wait_length_learn(s, early ? 0 : waited);
  }
  gpuhal__event_release(event);
  return r == 0;
}

/* What a host wait has seen of its entries so far. */
typedef struct gpuhal__host_wait_tally_s {
  uint32_t completed;
  gpuhal_status_t first_failure; /* the first failed entry's, as its waiter reports it */
} gpuhal__host_wait_tally_t;

/* Counts entry `i`'s state (`q`: what gpuhal__semaphore_check said) into `t`; 1 when that
 * ends the look early for `mode` (ANY: an entry reached; ALL: an entry failed). */
static int gpuhal__host_wait_tally(gpuhal_wait_mode_t mode, gpuhal_semaphore_list_t list, uint32_t i,
                                   gpuhal__wait_state_t st, gpuhal__wait_query_t* q, gpuhal__host_wait_tally_t* t) {
  if (st == GPUHAL__WAIT_COMPLETED) {
    t->completed++;
    return mode == GPUHAL_WAIT_ANY;
  }
  if (st != GPUHAL__WAIT_FAILED) return 0;
  if (!t->first_failure) {
    t->first_failure = gpuhal__semaphore_failure_for(q->failure, "a host wait", list.semaphores[i], list.values[i]);
  } else {
    gpuhal_status_free(q->failure);
  }
  return mode == GPUHAL_WAIT_ALL;
}

/* The outcome of a look at the entries: 1 when the wait is over for `mode` (satisfied, or
 * failed with *out_status: for ALL any failed entry; for ANY a failed entry while none is
 * reached), 0 when not. Takes t->first_failure either way. */
static int gpuhal__host_wait_outcome(gpuhal_wait_mode_t mode, uint32_t count, gpuhal__host_wait_tally_t* t,
                                     gpuhal_status_t* out_status) {
  gpuhal_status_t failure = t->first_failure;
  t->first_failure = NULL;
  if ((mode == GPUHAL_WAIT_ALL && t->completed == count) || (mode == GPUHAL_WAIT_ANY && t->completed > 0)) {
    gpuhal_status_free(failure);
    return 1;
  }
  if (failure) {
    *out_status = failure;
    return 1;
  }
  return 0;
}

/* One look at every entry (gpuhal__host_wait_outcome says what it returns). With `nodes`,
 * entries not reached register their node. */
static int gpuhal__host_wait_evaluate(gpuhal_wait_mode_t mode, gpuhal_semaphore_list_t list,
                                      gpuhal__semaphore_waiter_t* nodes, gpuhal_status_t* out_status) {
  gpuhal__host_wait_tally_t t;
  uint32_t i;
  memset(&t, 0, sizeof(t));
  for (i = 0; i < list.count; ++i) {
    gpuhal__wait_query_t q;
    memset(&q, 0, sizeof(q));
    q.waiter = nodes ? &nodes[i] : NULL;
    /* Registering on a value not submitted yet (memops): its signal's work will write the
     * word, which this thread reads once the value is submitted (cheaper and sooner than
     * querying the event; tests/bench/RESULTS.md). */
    q.host_arm = nodes && list.semaphores[i]->driver->memops; /* on registering: see gpuhal__semaphore_check */
    if (gpuhal__host_wait_tally(mode, list, i, gpuhal__semaphore_check(list.semaphores[i], list.values[i], &q), &q, &t))
      break;
  }
  return gpuhal__host_wait_outcome(mode, list.count, &t, out_status);
}

static gpuhal_status_t gpuhal__host_wait_deadline(void) {
  return gpuhal_status_make(GPUHAL_STATUS_DEADLINE_EXCEEDED, "semaphore wait: the timeout passed first");
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__semaphore_list_check(const char* func, const char* arg,
                                                             gpuhal_semaphore_list_t list,
                                                             const gpuhal_driver_t* driver, int signals) {
  uint32_t i;
  if (list.count == 0) return NULL;
  if (!list.semaphores || !list.values)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument '%s' has count %u but NULL semaphores or values", func, arg, list.count);
  for (i = 0; i < list.count; ++i) {
    gpuhal_semaphore_t* s = list.semaphores[i];
    gpuhal_status_t bad = gpuhal__object_check(s, GPUHAL__MAGIC_SEMAPHORE, func, arg);
    if (bad) return gpuhal_status_annotate(bad, "at index %u", i);
    if (driver && s->driver != driver)
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "%s: argument '%s' entry %u is a semaphore of another driver than the device's", func,
                                arg, i);
    if (signals) {
      bad = gpuhal__semaphore_check_shared_value(s, list.values[i], func, arg);
      if (bad) return gpuhal_status_annotate(bad, "at index %u", i);
    }
  }
  return NULL;
}

#define GPUHAL__HOST_WAIT_INLINE_NODES 8
/* A wait on values not submitted yet spins on its notifications this long from its start
 * before it sleeps on its condition variable: a sleeping thread takes longer to wake than
 * the GPU work it waits for takes to run (bench_queue case 6 vs 6b, tests/bench/RESULTS.md). */
#define GPUHAL__HOST_WAIT_UNSUBMITTED_SPIN_NS 200000
#define GPUHAL__HOST_WAIT_MAX_SLEEP_NS 1000000 /* between reads of armed words while registered */

/* Phase 1: no registration. Polls the events of the submitted entries on this thread, in
 * order, each once at most; for a single value or ALL that may run until the timeout. An
 * immediate timeout still looks at each submitted entry's work once (one query, or a read
 * of its word), as gpuhal_semaphore_query does: a polling loop of zero-timeout waits sees
 * work end as soon as it ends, not when the completion side gets to it (bench_queue case 8).
 * One look at all entries first (an outcome already decided ends the wait before any work
 * is polled), then one pass that polls each submitted entry's work and looks at that entry
 * again when its work ended or its semaphore failed: O(n) looks in all. A change to an entry
 * the pass went by is seen by the caller's next look. 1 when the wait is over (*out_status
 * says how), 0 to go on registered. */
static int gpuhal__host_wait_poll(gpuhal_wait_mode_t mode, gpuhal_semaphore_list_t list, gpuhal_timeout_t timeout,
                                  gpuhal_status_t* out_status, gpuhal__hang_watch_t* watch) {
  int immediate = gpuhal__timeout_is_immediate(timeout);
  gpuhal__host_wait_tally_t t;
  uint32_t i;
  if (gpuhal__host_wait_evaluate(mode, list, NULL, out_status)) return 1;
  memset(&t, 0, sizeof(t));
  for (i = 0; i < list.count; ++i) {
    gpuhal_semaphore_t* s = list.semaphores[i];
    gpuhal__wait_query_t q;
    gpuhal__wait_state_t st;
    memset(&q, 0, sizeof(q));
    /* For ANY, once an entry failed only a reached one can save the wait: no more polling. */
    q.look_submitted = q.take_event = mode == GPUHAL_WAIT_ALL || !t.first_failure;
    st = gpuhal__semaphore_check(s, list.values[i], &q);
    if (st == GPUHAL__WAIT_SUBMITTED && q.event) {
      /* Only a wait on this one value may sleep here: with more entries, another one's
       * failure (or, for ANY, its completion) must end the wait, which the registered phase
       * sees. */
      int ended = gpuhal__semaphore_await_event(s, list.values[i], q.event, q.event_value, q.word_written, timeout,
                                                list.count == 1, watch);
      if (!immediate && gpuhal__timeout_expired(timeout)) {
        gpuhal_status_free(t.first_failure);
        return 0;
      }
      if (!ended && !gpuhal__atomic_load(&s->failure)) continue;
      memset(&q, 0, sizeof(q));
      st = gpuhal__semaphore_check(s, list.values[i], &q);
    }
    if (gpuhal__host_wait_tally(mode, list, i, st, &q, &t)) break;
  }
  return gpuhal__host_wait_outcome(mode, list.count, &t, out_status);
}

static gpuhal_status_t gpuhal__semaphores_wait_held(gpuhal_wait_mode_t mode, gpuhal_semaphore_list_t list,
                                                    gpuhal_timeout_t timeout) {
  gpuhal__semaphore_waiter_t inline_nodes[GPUHAL__HOST_WAIT_INLINE_NODES];
  gpuhal__semaphore_waiter_t* nodes = inline_nodes;
  const gpuhal_allocator_t* allocator = &list.semaphores[0]->allocator;
  gpuhal__host_wait_t hw;
  gpuhal_status_t result = NULL;
  int64_t start = gpuhal_now_ns();
  gpuhal__hang_watch_t watch = gpuhal__hang_watch(list.semaphores[0]->driver, start);
  /* A wait on one shared semaphore sleeps where every process's signal wakes it
   * (semaphore_shared.c); with more entries, the naps between looks bound how late a
   * change another process made is seen (the driver's watch tells the others). */
  gpuhal_semaphore_t* shared = list.count == 1 && list.semaphores[0]->shared ? list.semaphores[0] : NULL;
  uint32_t i;

  if (gpuhal__host_wait_poll(mode, list, timeout, &result, &watch)) return result;
  if (gpuhal__timeout_expired(timeout)) {
    /* One last look, so a value reached during the poll's last sleep still counts. */
    if (gpuhal__host_wait_evaluate(mode, list, NULL, &result)) return result;
    return gpuhal__host_wait_deadline();
  }
  if (list.count > GPUHAL__HOST_WAIT_INLINE_NODES) {
    size_t bytes = sizeof(*nodes) * (size_t)list.count;
    nodes = (gpuhal__semaphore_waiter_t*)gpuhal__alloc(allocator, bytes);
    if (!nodes) return gpuhal__status_oom("semaphore wait nodes", bytes);
  }
  gpuhal__mutex_init(&hw.mutex);
  gpuhal__cond_init(&hw.cond);
  hw.notified = 0;
  hw.shared = shared;
  for (i = 0; i < list.count; ++i) {
    gpuhal__semaphore_waiter_init(&nodes[i]);
    nodes[i].wants_submitted = 1; /* a value submitted meanwhile is polled on this thread */
    nodes[i].notify = gpuhal__host_wait_notify;
    nodes[i].user = &hw;
  }
  for (;;) {
    uint32_t seen = gpuhal__atomic_load(&hw.notified);
    uint32_t shared_seen = shared ? gpuhal__semaphore_shared_seq(shared) : 0;
    int notified;
    int64_t spin_end = start + GPUHAL__HOST_WAIT_UNSUBMITTED_SPIN_NS;
    if (spin_end > timeout.deadline_ns) spin_end = timeout.deadline_ns; /* INT64_MAX when infinite */
    /* Registers the nodes not registered yet (notified ones were unlinked) and checks. */
    if (gpuhal__host_wait_evaluate(mode, list, nodes, &result)) break;
    if (gpuhal__timeout_expired(timeout)) {
      result = gpuhal__host_wait_deadline();
      break;
    }
    if (gpuhal_now_ns() < spin_end) {
      /* Early in the wait: spin on the notification count (bounded like a nap). */
      while (gpuhal__atomic_load(&hw.notified) == seen && gpuhal_now_ns() < spin_end &&
             !(shared && gpuhal__semaphore_shared_moved(shared, list.values[0], shared_seen))) {
      }
    } else if (shared) {
      gpuhal__semaphore_shared_sleep(
          shared, list.values[0], shared_seen,
          gpuhal_timeout_relative_ns(gpuhal__host_wait_sleep_ns(start, 0, GPUHAL__HOST_WAIT_MAX_SLEEP_NS, timeout)));
    } else {
      /* Sleep until notified, bounded so that words written by GPU signals are read again. */
      gpuhal_timeout_t nap =
          gpuhal_timeout_relative_ns(gpuhal__host_wait_sleep_ns(start, 0, GPUHAL__HOST_WAIT_MAX_SLEEP_NS, timeout));
      gpuhal__mutex_lock(&hw.mutex);
      while (gpuhal__atomic_load(&hw.notified) == seen && gpuhal__cond_wait_until(&hw.cond, &hw.mutex, nap)) {
      }
      gpuhal__mutex_unlock(&hw.mutex);
    }
    notified = gpuhal__atomic_load(&hw.notified) != seen;
    /* Notified: a value was reached, failed or submitted; a submitted one is polled here. */
    if (notified && gpuhal__host_wait_poll(mode, list, timeout, &result, &watch)) break;
    gpuhal__hang_watch_check(&watch);
  }
  for (i = 0; i < list.count; ++i) gpuhal__semaphore_unregister(list.semaphores[i], &nodes[i]);
  gpuhal__cond_destroy(&hw.cond);
  gpuhal__mutex_destroy(&hw.mutex);
  if (nodes != inline_nodes) gpuhal__free(allocator, nodes);
  return result;
}

/* The wait holds a reference on each semaphore: another thread may release the
 * application's last one meanwhile (the wait then ends as the abandonment rule says, or at
 * its timeout), and the semaphore must outlive the wait's look at it. */
static gpuhal_status_t gpuhal__semaphores_wait_impl(const char* func, const char* arg, gpuhal_wait_mode_t mode,
                                                    gpuhal_semaphore_list_t list, gpuhal_timeout_t timeout) {
  gpuhal_status_t result;
  uint32_t i;
  for (i = 0; i < list.count; ++i) {
    /* The last reference may have gone since the arguments were checked: then it stays
     * gone (a plain retain would bring it back to life, and free it twice). */
    if (!gpuhal__object_try_retain(&list.semaphores[i]->object)) {
      while (i > 0) gpuhal__semaphore_release_ref(list.semaphores[--i]);
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: argument '%s' was already released", func, arg);
    }
  }
  result = gpuhal__semaphores_wait_held(mode, list, timeout);
  for (i = 0; i < list.count; ++i) gpuhal__semaphore_release_ref(list.semaphores[i]);
  return result;
}

GPUHAL_API gpuhal_status_t gpuhal_semaphore_wait(gpuhal_semaphore_t* semaphore, uint64_t value,
                                                 gpuhal_timeout_t timeout) {
  GPUHAL__CHECK_OBJECT(semaphore, GPUHAL__MAGIC_SEMAPHORE);
  return gpuhal__semaphores_wait_impl(__func__, "semaphore", GPUHAL_WAIT_ALL,
                                      gpuhal_semaphore_list_one(&semaphore, &value), timeout);
}

GPUHAL_API gpuhal_status_t gpuhal_semaphores_wait(gpuhal_wait_mode_t mode, gpuhal_semaphore_list_t list,
                                                  gpuhal_timeout_t timeout) {
  GPUHAL__CHECK_ARG(mode == GPUHAL_WAIT_ALL || mode == GPUHAL_WAIT_ANY, "mode",
                    "must be GPUHAL_WAIT_ALL or GPUHAL_WAIT_ANY");
  GPUHAL__RETURN_IF_ERROR(gpuhal__semaphore_list_check(__func__, "list", list, NULL, 0));
  if (list.count == 0) return NULL;
  return gpuhal__semaphores_wait_impl(__func__, "list", mode, list, timeout);
}
