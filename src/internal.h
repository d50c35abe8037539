/* internal: what every module of the implementation stands on (base's internal half):
 * GPUHAL__PRIVATE, system headers, assertions, the object header and pools, lists,
 * array growth, atomics, mutexes, threads, clocks, logging and the status macros. */
#ifndef GPUHAL_SRC_INTERNAL_H
#define GPUHAL_SRC_INTERNAL_H

#include "base.h"

/* ---- gpuhal:internal ---- */

/* Functions that one file of the implementation defines and another calls. gpuhal.h is one
 * translation unit, so they are static there; tools/check_units.sh compiles each src/ .c on
 * its own with -DGPUHAL__PRIVATE= (external linkage), which fails on any use of a name
 * whose declaration the file does not include. */
#ifndef GPUHAL__PRIVATE
#define GPUHAL__PRIVATE static
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <limits.h>
#include <time.h>
#include <pthread.h>
#include <dlfcn.h>

#if !defined(CLOCK_MONOTONIC)
#error \
    "gpuhal: the implementation needs POSIX clocks: include gpuhal.h before any system header in the file that defines GPUHAL_IMPLEMENTATION, or compile with -D_POSIX_C_SOURCE=200809L"
#endif
#if !defined(__GNUC__) && !defined(__clang__)
#error "gpuhal: this compiler is not supported yet: gpuhal needs the GCC/Clang __atomic builtins"
#endif

#ifndef GPUHAL_ASSERT
#include <assert.h>
#define GPUHAL_ASSERT(c) assert(c)
#endif

/* Marks one step of work whose number must stay near-linear in what it serves (a key
 * comparison, a lock taken per entry): a test defines it to count them (tests/test_internals.h,
 * TU_COUNT_WORK), so a path that turns quadratic fails a test by count, not by time. */
#ifndef GPUHAL__COUNT
#define GPUHAL__COUNT(what) ((void)0)
#endif
#define GPUHAL__UNUSED(x) ((void)(x))
#define GPUHAL__MIN(a, b) ((a) < (b) ? (a) : (b))
#define GPUHAL__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Internal shorthands. Every argument error names the function, the argument and the rule. */
#define GPUHAL__RETURN_IF_ERROR(expr)    \
  do {                                   \
    gpuhal_status_t gpuhal__s_ = (expr); \
    if (gpuhal__s_) return gpuhal__s_;   \
  } while (0)
#define GPUHAL__CHECK_ARG(cond, arg, rule)                                                                    \
  do {                                                                                                        \
    if (!(cond))                                                                                              \
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: argument '%s' %s", __func__, arg, rule); \
  } while (0)
#define GPUHAL__CHECK_RANGE(cond, arg, rule)                                                                         \
  do {                                                                                                               \
    if (!(cond)) return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE, "%s: argument '%s' %s", __func__, arg, rule); \
  } while (0)
GPUHAL__PRIVATE int gpuhal__timeout_is_immediate(gpuhal_timeout_t t);
GPUHAL__PRIVATE int gpuhal__timeout_is_infinite(gpuhal_timeout_t t);
GPUHAL__PRIVATE int gpuhal__timeout_expired(gpuhal_timeout_t t);
GPUHAL__PRIVATE void gpuhal__sleep_ns(int64_t ns);
/* Copies `label` into `out` (GPUHAL_LABEL_MAX bytes), cut to fit (not inside a UTF-8
 * character), control characters as '?'; NULL gives "". */
GPUHAL__PRIVATE void gpuhal__label_copy(char* out, const char* label);
/* The length (1 to 4) of the well-formed UTF-8 character that starts `s`, 0 when its bytes
 * are not one (a stray or missing continuation byte, an overlong form, a surrogate, past
 * U+10FFFF); a NUL ends a character early, so it never reads past the string. */
GPUHAL__PRIVATE size_t gpuhal__utf8_char_len(const char* s);
/* The three arguments of a "%s%s%s" that prints ` 'label'` when `label` is set, nothing
 * when it is "" (messages and reports name labelled objects this way). */
#define GPUHAL__LABEL_ARGS(label) (label)[0] ? " '" : "", (label), (label)[0] ? "'" : ""
/* The one poll-and-sleep backoff: each sleep twice the last, from `ns` up to `max_ns`. */
typedef struct gpuhal__backoff_s {
  int64_t ns, max_ns;
} gpuhal__backoff_t;
GPUHAL__PRIVATE gpuhal__backoff_t gpuhal__backoff(int64_t first_ns, int64_t max_ns);
GPUHAL__PRIVATE void gpuhal__backoff_sleep(gpuhal__backoff_t* b);

/* ---- allocator ---- */
GPUHAL__PRIVATE void* gpuhal__default_alloc(size_t size, void* user);
/* Fills in the defaults of a user allocator: both functions or neither. */
GPUHAL__PRIVATE gpuhal_allocator_t gpuhal__allocator_resolve(const gpuhal_allocator_t* a);
GPUHAL__PRIVATE void* gpuhal__alloc(const gpuhal_allocator_t* a, size_t size);
GPUHAL__PRIVATE void* gpuhal__calloc(const gpuhal_allocator_t* a, size_t size);
GPUHAL__PRIVATE void gpuhal__free(const gpuhal_allocator_t* a, void* ptr);
GPUHAL__PRIVATE gpuhal_status_t gpuhal__status_oom(const char* what, size_t size);
/* Of two outcomes of a sequence that goes on after a failure (a teardown), the first
 * failure: `first` if set (then `next` is freed), else `next`. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__status_first(gpuhal_status_t first, gpuhal_status_t next);
/* Allocates zeroed memory for `what` or returns RESOURCE_EXHAUSTED naming it. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__alloc_zeroed(const gpuhal_allocator_t* a, size_t size, const char* what,
                                                     void** out);
/* The one array growth: makes `*data` (`*capacity` elements of `element_size` bytes) hold
 * at least `needed`, doubling from 16; the new elements are zeroed. On failure nothing
 * changes and RESOURCE_EXHAUSTED names `what`. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__grow(const gpuhal_allocator_t* allocator, void** data, size_t* capacity,
                                             size_t needed, size_t element_size, const char* what);
/* gpuhal__grow for a uint32_t capacity. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__grow32(const gpuhal_allocator_t* allocator, void** data, uint32_t* capacity,
                                               size_t needed, size_t element_size, const char* what);
/* Two arrays that share `capacity`, grown to at least `needed` elements: `first` first, so a
 * failure leaves `capacity` true for both (`first` may then be the larger). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__grow32_pair(const gpuhal_allocator_t* allocator, uint32_t* capacity,
                                                    size_t needed, void** first, size_t first_size,
                                                    const char* first_what, void** second, size_t second_size,
                                                    const char* second_what);
GPUHAL__PRIVATE char* gpuhal__strdup(const gpuhal_allocator_t* a, const char* s);

/* ---- atomics (GCC/Clang builtins; C99 has no atomics and C++ must compile this too) ----
 * Every atomic access in gpuhal goes through these. The plain names are the usual orders
 * (acquire loads, release stores, acq_rel read-modify-writes); a suffix names any other, so
 * each call site says which order it relies on. The add/sub forms return the new value. */
#define gpuhal__atomic_load(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define gpuhal__atomic_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define gpuhal__atomic_add(p, v) __atomic_add_fetch((p), (v), __ATOMIC_ACQ_REL)
#define gpuhal__atomic_sub(p, v) __atomic_sub_fetch((p), (v), __ATOMIC_ACQ_REL)
#define gpuhal__atomic_cas(p, expected_ptr, desired) \
  __atomic_compare_exchange_n((p), (expected_ptr), (desired), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#define gpuhal__atomic_exchange(p, v) __atomic_exchange_n((p), (v), __ATOMIC_ACQ_REL)
#define gpuhal__atomic_or(p, v) __atomic_or_fetch((p), (v), __ATOMIC_ACQ_REL)
/* Counters and hints nothing else is ordered by (statistics, "is anything there" peeks). */
#define gpuhal__atomic_load_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define gpuhal__atomic_store_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define gpuhal__atomic_add_relaxed(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define gpuhal__atomic_sub_relaxed(p, v) __atomic_sub_fetch((p), (v), __ATOMIC_RELAXED)
/* Store-then-load handshakes between two threads (Dekker): each side's store must be seen
 * before its own later load of the other side's flag. */
#define gpuhal__atomic_load_seq_cst(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define gpuhal__atomic_store_seq_cst(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define gpuhal__atomic_add_seq_cst(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
#define gpuhal__atomic_sub_seq_cst(p, v) __atomic_sub_fetch((p), (v), __ATOMIC_SEQ_CST)
#define gpuhal__atomic_exchange_seq_cst(p, v) __atomic_exchange_n((p), (v), __ATOMIC_SEQ_CST)
/* Taking a whole list another thread published with release stores. */
#define gpuhal__atomic_exchange_acquire(p, v) __atomic_exchange_n((p), (v), __ATOMIC_ACQUIRE)
/* A compare-exchange retry loop that publishes (a lock-free push, a monotonic maximum). */
#define gpuhal__atomic_cas_weak_release(p, expected_ptr, desired) \
  __atomic_compare_exchange_n((p), (expected_ptr), (desired), 1, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)
/* Orders a store before a later load of another variable (two threads that each store one
 * flag and then read the other's: at least one sees the other's). */
#define gpuhal__atomic_fence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
/* A sequence lock's fences (semaphore.c): its relaxed data accesses ordered against its
 * counter's. */
#define gpuhal__atomic_fence_release() __atomic_thread_fence(__ATOMIC_RELEASE)
#define gpuhal__atomic_fence_acquire() __atomic_thread_fence(__ATOMIC_ACQUIRE)

/* ---- objects: a header every ref-counted gpuhal object starts with ----
 * `magic` names the type. An object's memory comes from its driver's object pool (below),
 * which never hands it back to the allocator while the driver lives: a released object
 * keeps its header, poisoned (GPUHAL__MAGIC_DEAD), so a late call on a released handle
 * reads that and gets INVALID_ARGUMENT instead of touching freed memory.
 *
 * Two counts, because gpuhal holds references of its own (a recorded command buffer holds
 * its buffers, a queued action its semaphores, a buffer its device): `refcount` counts
 * every reference and frees the object at zero; `user_refs` counts the application's
 * alone (its create and its gpuhal_X_retain / gpuhal_X_release calls). A public release
 * takes one of the application's, never one of gpuhal's, so a release too many is refused
 * (logged as an error) instead of destroying the object under work that still uses it.
 * Once the application's count is zero the handle is released for every call, though
 * gpuhal's references may keep the object alive a while: a command buffer executed after
 * its release must not run. Drivers and devices are `lent` (gpuhal_device_driver,
 * gpuhal_buffer_device and gpuhal_channel_device hand them out without a reference): calls
 * on them are accepted while they live. */
typedef struct gpuhal__object_s {
  uint32_t magic;
  int32_t refcount;                       /* every reference: the application's and gpuhal's own */
  int32_t user_refs;                      /* the application's: created with one, public retain/release */
  int32_t lent;                           /* 1: usable while it lives (see above) */
  struct gpuhal__object_s* next_released; /* its pool's FIFO while released */
} gpuhal__object_t;

#define GPUHAL__MAGIC_DEAD 0xDEADDEADu
GPUHAL__PRIVATE void gpuhal__object_init(gpuhal__object_t* o, uint32_t magic);
/* gpuhal's own references. */
GPUHAL__PRIVATE void gpuhal__object_retain(gpuhal__object_t* o);
/* Takes a reference unless the count already reached zero (the object is being torn
 * down, e.g. a device still on its driver's list): 1 when it took one. */
GPUHAL__PRIVATE int gpuhal__object_try_retain(gpuhal__object_t* o);
/* Returns 1 when this was the last reference (and poisons the magic). */
GPUHAL__PRIVATE int gpuhal__object_release(gpuhal__object_t* o);
/* The application's references: gpuhal_X_retain takes one of each count. */
GPUHAL__PRIVATE void gpuhal__object_user_retain(gpuhal__object_t* o);
/* For gpuhal_X_release: drops one of the application's references and returns 1 (the
 * caller then drops the object reference that goes with it), or returns 0 when the
 * application holds none: the caller logs that and ignores the call. */
GPUHAL__PRIVATE int gpuhal__object_user_release(gpuhal__object_t* o);
/* Checks a handle argument: non-NULL, right type, not released by the application. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__object_check(const void* object, uint32_t magic, const char* func,
                                                     const char* arg);
/* The same test without making a status: for functions that return no status. */
GPUHAL__PRIVATE int gpuhal__object_is_held(const void* object, uint32_t magic);
/* Right type and not destroyed (gpuhal may hold it after the application released it):
 * for the public release calls, which then tell a release too many by the count, and for
 * gpuhal's own references. */
GPUHAL__PRIVATE int gpuhal__object_is_live(const void* object, uint32_t magic);
#define GPUHAL__CHECK_OBJECT(obj, magic)                                           \
  do {                                                                             \
    if (!(obj)) return gpuhal__object_check(NULL, (magic), __func__, #obj);        \
    GPUHAL__RETURN_IF_ERROR(gpuhal__object_check((obj), (magic), __func__, #obj)); \
  } while (0)

/* ---- threads ---- */
typedef pthread_mutex_t gpuhal__mutex_t;
typedef struct gpuhal__cond_s {
  pthread_cond_t cond;
} gpuhal__cond_t;
typedef pthread_t gpuhal__thread_t;

GPUHAL__PRIVATE void gpuhal__mutex_init(gpuhal__mutex_t* m);
GPUHAL__PRIVATE void gpuhal__mutex_destroy(gpuhal__mutex_t* m);
GPUHAL__PRIVATE void gpuhal__mutex_lock(gpuhal__mutex_t* m);
GPUHAL__PRIVATE void gpuhal__mutex_unlock(gpuhal__mutex_t* m);
GPUHAL__PRIVATE int gpuhal__mutex_trylock(gpuhal__mutex_t* m);

/* Condition variables wait on CLOCK_MONOTONIC, matching gpuhal_timeout_t. */
GPUHAL__PRIVATE void gpuhal__cond_init(gpuhal__cond_t* c);
GPUHAL__PRIVATE void gpuhal__cond_destroy(gpuhal__cond_t* c);
GPUHAL__PRIVATE void gpuhal__cond_signal(gpuhal__cond_t* c);
GPUHAL__PRIVATE void gpuhal__cond_broadcast(gpuhal__cond_t* c);
GPUHAL__PRIVATE void gpuhal__cond_wait(gpuhal__cond_t* c, gpuhal__mutex_t* m);
/* Waits until signalled or the deadline passes; returns 0 on timeout (spurious wakeups
 * return 1 too: callers re-check their predicate in a loop, as always). */
GPUHAL__PRIVATE int gpuhal__cond_wait_until(gpuhal__cond_t* c, gpuhal__mutex_t* m, gpuhal_timeout_t timeout);

typedef void* (*gpuhal__thread_fn_t)(void* arg);
/* Starts `fn(arg)` on a new thread named `name`; with `thread` NULL the thread is detached
 * (nothing joins it) and names itself (gpuhal__thread_name_self): it may be gone before its
 * creator could name it. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__thread_create(gpuhal__thread_t* thread, gpuhal__thread_fn_t fn, void* arg,
                                                      const char* name);
/* Names the calling thread (at most 15 characters); until then it bears its creator's. */
GPUHAL__PRIVATE void gpuhal__thread_name_self(const char* name);
GPUHAL__PRIVATE void gpuhal__thread_join(gpuhal__thread_t thread);
/* A variable of which each thread has its own copy (GCC/Clang; C99 has none). */
#define GPUHAL__THREAD_LOCAL __thread
/* 1 when the calling thread is `thread`. */
#define gpuhal__thread_is_current(thread) pthread_equal(pthread_self(), (thread))
/* A number that names the calling thread while it lives (trace records' thread ids). */
#define gpuhal__thread_self_id() ((uint64_t)pthread_self())
#define GPUHAL__OBJECT_POOL_TYPES 16 /* more than gpuhal's object types */

/* One type's objects: how many are live, and the released ones, oldest first. */
typedef struct gpuhal__object_fifo_s {
  uint32_t magic;   /* 0: unclaimed */
  const char* name; /* the type's name, from its first allocation's `what` */
  size_t size;
  size_t live;
  gpuhal__object_t* oldest;
  gpuhal__object_t* newest;
  size_t count;
} gpuhal__object_fifo_t;

typedef struct gpuhal__object_pool_s {
  gpuhal__mutex_t mutex; /* taken to create and to free an object, never to check one */
  gpuhal_allocator_t allocator;
  gpuhal__object_fifo_t types[GPUHAL__OBJECT_POOL_TYPES];
} gpuhal__object_pool_t;

GPUHAL__PRIVATE void gpuhal__object_pool_init(gpuhal__object_pool_t* pool, const gpuhal_allocator_t* allocator);
/* Frees every released object (the pool's owner is going: no handle of it is usable now).
 * Objects still live are the application's leak and stay as they are. */
GPUHAL__PRIVATE void gpuhal__object_pool_deinit(gpuhal__object_pool_t* pool);
/* Zeroed memory for an object of type `magic` (the caller then runs gpuhal__object_init):
 * the oldest released one once it is GPUHAL_HANDLE_REUSE_DISTANCE releases old, otherwise
 * new memory. `what` is the type's name ("gpuhal_buffer_t"); RESOURCE_EXHAUSTED names it. */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__object_alloc(gpuhal__object_pool_t* pool, uint32_t magic, size_t size,
                                                     const char* what, void** out);
/* Releases an object's memory to its pool: poisons the header (a late call on the handle
 * is caught) and queues it for reuse. Also for an object whose creation failed. */
GPUHAL__PRIVATE void gpuhal__object_free(gpuhal__object_pool_t* pool, uint32_t magic, void* object);
GPUHAL__PRIVATE gpuhal__object_pool_t* gpuhal__process_object_pool(void);
/* The pool's live objects as "2 gpuhal_buffer_t, 1 gpuhal_semaphore_t" in `out` (empty
 * when none, cut short to fit); `except` is a type not to count (0: none). The number of
 * live objects listed. */
GPUHAL__PRIVATE size_t gpuhal__object_pool_describe_live(gpuhal__object_pool_t* pool, uint32_t except, char* out,
                                                         size_t capacity);

/* ---- intrusive doubly linked list ---- */
typedef struct gpuhal__list_node_s {
  struct gpuhal__list_node_s* prev;
  struct gpuhal__list_node_s* next;
} gpuhal__list_node_t;
GPUHAL__PRIVATE void gpuhal__list_init(gpuhal__list_node_t* head);
GPUHAL__PRIVATE int gpuhal__list_empty(const gpuhal__list_node_t* head);
GPUHAL__PRIVATE void gpuhal__list_push_back(gpuhal__list_node_t* head, gpuhal__list_node_t* node);
GPUHAL__PRIVATE void gpuhal__list_insert_after(gpuhal__list_node_t* at, gpuhal__list_node_t* node);
GPUHAL__PRIVATE void gpuhal__list_remove(gpuhal__list_node_t* node);
GPUHAL__PRIVATE gpuhal__list_node_t* gpuhal__list_pop_front(gpuhal__list_node_t* head);
#define GPUHAL__CONTAINER_OF(ptr, type, member) ((type*)(void*)((char*)(ptr)-offsetof(type, member)))

/* ---- intrusive pairing heap ---- */
/* A min-heap by `key` for what must come out smallest first however it went in: pushing is
 * O(1) and taking the smallest amortized O(log n), where a sorted list costs a search per
 * insert out of order. Keys that compare equal come out in no particular order. */
typedef struct gpuhal__heap_node_s {
  struct gpuhal__heap_node_s* child; /* the first of its children */
  struct gpuhal__heap_node_s* next;  /* its next sibling */
  struct gpuhal__heap_node_s* prev;  /* its previous sibling, or its parent when it is a first child; NULL: a root */
  uint64_t key;
} gpuhal__heap_node_t;
typedef struct gpuhal__heap_s {
  gpuhal__heap_node_t* root; /* the smallest; NULL when empty */
} gpuhal__heap_t;
GPUHAL__PRIVATE void gpuhal__heap_push(gpuhal__heap_t* heap, gpuhal__heap_node_t* node);
/* Takes the smallest node out (NULL when empty). */
GPUHAL__PRIVATE gpuhal__heap_node_t* gpuhal__heap_pop(gpuhal__heap_t* heap);
/* Takes `node`, which is in `heap`, out wherever it is. */
GPUHAL__PRIVATE void gpuhal__heap_remove(gpuhal__heap_t* heap, gpuhal__heap_node_t* node);

/* ---- environment ---- */
GPUHAL__PRIVATE const char* gpuhal__getenv(const char* name);
/* Sets *level to the level `s` names (none/off, error, warn/warning, info, debug; any case)
 * and returns 1; 0, *level untouched, when `s` is NULL or names none. */
GPUHAL__PRIVATE int gpuhal__log_level_parse(const char* s, gpuhal_log_level_t* level);

/* A logger: a sink and a level. Drivers own one; modules log through their driver's. */
typedef struct gpuhal__logger_s {
  gpuhal_log_level_t level;
  gpuhal_log_fn_t fn; /* NULL: stderr */
  void* user;
} gpuhal__logger_t;

GPUHAL__PRIVATE void gpuhal__log(const gpuhal__logger_t* logger, gpuhal_log_level_t level, const char* format, ...)
    GPUHAL_PRINTF_ATTR(3, 4);

/* For a public release the application had no reference left for (see gpuhal__object_t). */
GPUHAL__PRIVATE void gpuhal__log_extra_release(const gpuhal__logger_t* logger, const char* func, const char* what);

#endif /* GPUHAL_SRC_INTERNAL_H */
