/* base: status objects, timeouts and clocks, the allocator, threads and atomics.
 * Everything else in gpuhal stands on this module. */

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
/* Every allocation gpuhal makes goes through this (set per driver). Zeroed: malloc/free. */
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

/* ---- gpuhal:implementation ---- */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <pthread.h>
#include <dlfcn.h>

#ifndef GPUHAL_ASSERT
#include <assert.h>
#define GPUHAL_ASSERT(c) assert(c)
#endif

#if !defined(CLOCK_MONOTONIC)
#error "gpuhal: the implementation needs POSIX clocks: include gpuhal.h before any system header in the file that defines GPUHAL_IMPLEMENTATION, or compile with -D_POSIX_C_SOURCE=200809L"
#endif
#if !defined(__GNUC__) && !defined(__clang__)
#error "gpuhal: this compiler is not supported yet: gpuhal needs the GCC/Clang __atomic builtins"
#endif

#define GPUHAL__UNUSED(x) ((void)(x))
#define GPUHAL__MIN(a, b) ((a) < (b) ? (a) : (b))
#define GPUHAL__MAX(a, b) ((a) > (b) ? (a) : (b))
#define GPUHAL__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- status implementation ---- */
struct gpuhal_status_s {
  gpuhal_status_code_t code;
  int is_static; /* the out-of-memory fallbacks below are never freed */
  size_t length;
  char message[1]; /* "CODE: text", NUL-terminated; allocated to fit */
};

static const char* const gpuhal__status_code_names[] = {
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"};

GPUHAL_API const char* gpuhal_status_code_string(gpuhal_status_code_t code) {
  if ((unsigned)code < GPUHAL__ARRAY_SIZE(gpuhal__status_code_names)) return gpuhal__status_code_names[code];
  return "UNKNOWN_CODE";
}

/* One static status per code, for when a status cannot be allocated. */
#define GPUHAL__STATIC_STATUS(c) {c, 1, 0, {0}}
static struct gpuhal_status_s gpuhal__static_statuses[16] = {
    GPUHAL__STATIC_STATUS(GPUHAL_STATUS_OK), GPUHAL__STATIC_STATUS(GPUHAL_STATUS_CANCELLED),
    GPUHAL__STATIC_STATUS(GPUHAL_STATUS_UNKNOWN), GPUHAL__STATIC_STATUS(GPUHAL_STATUS_INVALID_ARGUMENT),
    GPUHAL__STATIC_STATUS(GPUHAL_STATUS_DEADLINE_EXCEEDED), GPUHAL__STATIC_STATUS(GPUHAL_STATUS_NOT_FOUND),
    GPUHAL__STATIC_STATUS(GPUHAL_STATUS_ALREADY_EXISTS), GPUHAL__STATIC_STATUS(GPUHAL_STATUS_PERMISSION_DENIED),
    GPUHAL__STATIC_STATUS(GPUHAL_STATUS_RESOURCE_EXHAUSTED),
    GPUHAL__STATIC_STATUS(GPUHAL_STATUS_FAILED_PRECONDITION), GPUHAL__STATIC_STATUS(GPUHAL_STATUS_ABORTED),
    GPUHAL__STATIC_STATUS(GPUHAL_STATUS_OUT_OF_RANGE), GPUHAL__STATIC_STATUS(GPUHAL_STATUS_UNIMPLEMENTED),
    GPUHAL__STATIC_STATUS(GPUHAL_STATUS_INTERNAL), GPUHAL__STATIC_STATUS(GPUHAL_STATUS_UNAVAILABLE),
    GPUHAL__STATIC_STATUS(GPUHAL_STATUS_DATA_LOSS)};

/* Test hook: when non-zero, status allocation fails (exercises the static fallback). */
static int gpuhal__status_alloc_fails = 0;

static gpuhal_status_t gpuhal__status_static(gpuhal_status_code_t code) {
  if ((unsigned)code >= GPUHAL__ARRAY_SIZE(gpuhal__static_statuses)) code = GPUHAL_STATUS_UNKNOWN;
  return &gpuhal__static_statuses[code];
}

static gpuhal_status_t gpuhal__status_alloc(gpuhal_status_code_t code, size_t text_length) {
  gpuhal_status_t s;
  if (gpuhal__status_alloc_fails) return NULL;
  s = (gpuhal_status_t)malloc(sizeof(struct gpuhal_status_s) + text_length);
  if (!s) return NULL;
  s->code = code;
  s->is_static = 0;
  s->length = text_length;
  s->message[text_length] = 0;
  return s;
}

static gpuhal_status_t gpuhal__status_vmake(gpuhal_status_code_t code, const char* format, va_list args) {
  const char* name = gpuhal_status_code_string(code);
  size_t name_length = strlen(name);
  va_list copy;
  int n;
  gpuhal_status_t s;
  va_copy(copy, args);
  n = vsnprintf(NULL, 0, format, copy);
  va_end(copy);
  if (n < 0) n = 0;
  s = gpuhal__status_alloc(code, name_length + 2 + (size_t)n);
  if (!s) return gpuhal__status_static(code);
  memcpy(s->message, name, name_length);
  s->message[name_length] = ':';
  s->message[name_length + 1] = ' ';
  vsnprintf(s->message + name_length + 2, (size_t)n + 1, format, args);
  return s;
}

GPUHAL_API gpuhal_status_t gpuhal_status_make(gpuhal_status_code_t code, const char* format, ...) {
  va_list args;
  gpuhal_status_t s;
  if (code == GPUHAL_STATUS_OK) return NULL;
  if (!format) format = "";
  va_start(args, format);
  s = gpuhal__status_vmake(code, format, args);
  va_end(args);
  return s;
}

GPUHAL_API gpuhal_status_code_t gpuhal_status_code(gpuhal_status_t status) {
  return status ? status->code : GPUHAL_STATUS_OK;
}

GPUHAL_API const char* gpuhal_status_message(gpuhal_status_t status) {
  if (!status) return "OK";
  if (status->is_static) return gpuhal_status_code_string(status->code);
  return status->message;
}

GPUHAL_API void gpuhal_status_free(gpuhal_status_t status) {
  if (status && !status->is_static) free(status);
}

GPUHAL_API gpuhal_status_t gpuhal_status_annotate(gpuhal_status_t status, const char* format, ...) {
  va_list args;
  int n;
  gpuhal_status_t grown;
  size_t old_length;
  if (!status) return NULL;
  if (status->is_static || !format) return status; /* a static status has no room for context */
  va_start(args, format);
  n = vsnprintf(NULL, 0, format, args);
  va_end(args);
  if (n <= 0) return status;
  old_length = status->length;
  grown = gpuhal__status_alloc(status->code, old_length + 2 + (size_t)n);
  if (!grown) return status; /* keep the cause, lose the context */
  memcpy(grown->message, status->message, old_length);
  grown->message[old_length] = ';';
  grown->message[old_length + 1] = ' ';
  va_start(args, format);
  vsnprintf(grown->message + old_length + 2, (size_t)n + 1, format, args);
  va_end(args);
  gpuhal_status_free(status);
  return grown;
}

GPUHAL_API gpuhal_status_t gpuhal_status_clone(gpuhal_status_t status) {
  gpuhal_status_t copy;
  if (!status || status->is_static) return status;
  copy = gpuhal__status_alloc(status->code, status->length);
  if (!copy) return gpuhal__status_static(status->code);
  memcpy(copy->message, status->message, status->length);
  return copy;
}

/* Internal shorthands. Every argument error names the function, the argument and the rule. */
#define GPUHAL__RETURN_IF_ERROR(expr)      \
  do {                                     \
    gpuhal_status_t gpuhal__s_ = (expr);   \
    if (gpuhal__s_) return gpuhal__s_;     \
  } while (0)
#define GPUHAL__CHECK_ARG(cond, arg, rule)                                                     \
  do {                                                                                         \
    if (!(cond))                                                                               \
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: argument '%s' %s", __func__, \
                                arg, rule);                                                    \
  } while (0)
#define GPUHAL__CHECK_RANGE(cond, arg, rule)                                                   \
  do {                                                                                         \
    if (!(cond))                                                                               \
      return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE, "%s: argument '%s' %s", __func__,  \
                                arg, rule);                                                    \
  } while (0)

/* ---- time ---- */
GPUHAL_API int64_t gpuhal_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}
GPUHAL_API gpuhal_timeout_t gpuhal_timeout_immediate(void) {
  gpuhal_timeout_t t;
  t.deadline_ns = INT64_MIN;
  return t;
}
GPUHAL_API gpuhal_timeout_t gpuhal_timeout_infinite(void) {
  gpuhal_timeout_t t;
  t.deadline_ns = INT64_MAX;
  return t;
}
GPUHAL_API gpuhal_timeout_t gpuhal_timeout_deadline_ns(int64_t monotonic_ns) {
  gpuhal_timeout_t t;
  t.deadline_ns = monotonic_ns;
  return t;
}
GPUHAL_API gpuhal_timeout_t gpuhal_timeout_relative_ns(int64_t ns) {
  int64_t now;
  if (ns <= 0) return gpuhal_timeout_immediate();
  now = gpuhal_now_ns();
  if (ns >= INT64_MAX - now) return gpuhal_timeout_infinite();
  return gpuhal_timeout_deadline_ns(now + ns);
}
static int gpuhal__timeout_is_immediate(gpuhal_timeout_t t) { return t.deadline_ns == INT64_MIN; }
static int gpuhal__timeout_is_infinite(gpuhal_timeout_t t) { return t.deadline_ns == INT64_MAX; }
static int gpuhal__timeout_expired(gpuhal_timeout_t t) {
  if (gpuhal__timeout_is_infinite(t)) return 0;
  if (gpuhal__timeout_is_immediate(t)) return 1;
  return gpuhal_now_ns() >= t.deadline_ns;
}
static void gpuhal__sleep_ns(int64_t ns) {
  struct timespec ts;
  if (ns <= 0) return;
  ts.tv_sec = (time_t)(ns / 1000000000);
  ts.tv_nsec = (long)(ns % 1000000000);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- allocator ---- */
static void* gpuhal__default_alloc(size_t size, void* user) {
  GPUHAL__UNUSED(user);
  return malloc(size);
}
static void gpuhal__default_free(void* ptr, void* user) {
  GPUHAL__UNUSED(user);
  free(ptr);
}
/* Fills in the defaults of a user allocator: both functions or neither. */
static gpuhal_allocator_t gpuhal__allocator_resolve(const gpuhal_allocator_t* a) {
  gpuhal_allocator_t r;
  if (a && a->alloc && a->free) return *a;
  r.alloc = gpuhal__default_alloc;
  r.free = gpuhal__default_free;
  r.user = NULL;
  return r;
}
static void* gpuhal__alloc(const gpuhal_allocator_t* a, size_t size) {
  return size ? a->alloc(size, a->user) : NULL;
}
static void* gpuhal__calloc(const gpuhal_allocator_t* a, size_t size) {
  void* p = gpuhal__alloc(a, size);
  if (p) memset(p, 0, size);
  return p;
}
static void gpuhal__free(const gpuhal_allocator_t* a, void* ptr) {
  if (ptr) a->free(ptr, a->user);
}
static gpuhal_status_t gpuhal__status_oom(const char* what, size_t size) {
  return gpuhal_status_make(GPUHAL_STATUS_RESOURCE_EXHAUSTED, "out of host memory allocating %s (%zu bytes)",
                            what, size);
}
/* Allocates zeroed memory for `what` or returns RESOURCE_EXHAUSTED naming it. */
static gpuhal_status_t gpuhal__alloc_zeroed(const gpuhal_allocator_t* a, size_t size, const char* what,
                                            void** out) {
  *out = gpuhal__calloc(a, size);
  return *out ? NULL : gpuhal__status_oom(what, size);
}
static char* gpuhal__strdup(const gpuhal_allocator_t* a, const char* s) {
  size_t n = strlen(s) + 1;
  char* p = (char*)gpuhal__alloc(a, n);
  if (p) memcpy(p, s, n);
  return p;
}

/* ---- atomics (GCC/Clang builtins; C99 has no atomics and C++ must compile this too) ---- */
#define gpuhal__atomic_load(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define gpuhal__atomic_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define gpuhal__atomic_add(p, v) __atomic_add_fetch((p), (v), __ATOMIC_ACQ_REL)
#define gpuhal__atomic_sub(p, v) __atomic_sub_fetch((p), (v), __ATOMIC_ACQ_REL)
#define gpuhal__atomic_cas(p, expected_ptr, desired) \
  __atomic_compare_exchange_n((p), (expected_ptr), (desired), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

/* ---- objects: a header every ref-counted gpuhal object starts with ----
 * `magic` names the type and is poisoned on final release, so a call on a released object
 * that is still in the quarantine (below) gets INVALID_ARGUMENT instead of a crash. */
typedef struct gpuhal__object_s {
  uint32_t magic;
  int32_t refcount;
} gpuhal__object_t;

#define GPUHAL__MAGIC_DEAD 0xDEADDEADu
static void gpuhal__object_init(gpuhal__object_t* o, uint32_t magic) {
  o->magic = magic;
  o->refcount = 1;
}
static void gpuhal__object_retain(gpuhal__object_t* o) { gpuhal__atomic_add(&o->refcount, 1); }
/* Returns 1 when this was the last reference (and poisons the magic). */
static int gpuhal__object_release(gpuhal__object_t* o) {
  if (gpuhal__atomic_sub(&o->refcount, 1) != 0) return 0;
  gpuhal__atomic_store(&o->magic, GPUHAL__MAGIC_DEAD);
  return 1;
}
/* Checks a handle argument: non-NULL, right type, not released. */
static gpuhal_status_t gpuhal__object_check(const void* object, uint32_t magic, const char* func,
                                            const char* arg) {
  uint32_t m;
  if (!object)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: argument '%s' must not be NULL", func, arg);
  m = gpuhal__atomic_load(&((const gpuhal__object_t*)object)->magic);
  if (m == GPUHAL__MAGIC_DEAD)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: argument '%s' was already released", func,
                              arg);
  if (m != magic)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument '%s' is not a gpuhal object of the right type", func, arg);
  return NULL;
}
/* The same test without making a status: for functions that return no status. */
static int gpuhal__object_is_live(const void* object, uint32_t magic) {
  return object && gpuhal__atomic_load(&((const gpuhal__object_t*)object)->magic) == magic;
}
#define GPUHAL__CHECK_OBJECT(obj, magic)                                              \
  do {                                                                                \
    if (!(obj)) return gpuhal__object_check(NULL, (magic), __func__, #obj);           \
    GPUHAL__RETURN_IF_ERROR(gpuhal__object_check((obj), (magic), __func__, #obj));    \
  } while (0)

/* Quarantine: the memory of released objects is held back for a while (poisoned magic
 * intact) so that a late call on a released handle is caught, not a use-after-free. */
#ifndef GPUHAL_QUARANTINE_SIZE
#define GPUHAL_QUARANTINE_SIZE 64
#endif
typedef struct gpuhal__quarantine_entry_s {
  void* ptr;
  gpuhal_allocator_t allocator;
  const void* owner; /* the driver; flushed when it goes */
} gpuhal__quarantine_entry_t;
static pthread_mutex_t gpuhal__quarantine_mutex = PTHREAD_MUTEX_INITIALIZER;
static gpuhal__quarantine_entry_t gpuhal__quarantine[GPUHAL_QUARANTINE_SIZE];
static unsigned gpuhal__quarantine_next = 0;

static void gpuhal__quarantine_free(const gpuhal_allocator_t* a, const void* owner, void* ptr) {
  gpuhal__quarantine_entry_t evicted;
  gpuhal__quarantine_entry_t* slot;
  if (!ptr) return;
  pthread_mutex_lock(&gpuhal__quarantine_mutex);
  slot = &gpuhal__quarantine[gpuhal__quarantine_next];
  gpuhal__quarantine_next = (gpuhal__quarantine_next + 1) % GPUHAL_QUARANTINE_SIZE;
  evicted = *slot;
  slot->ptr = ptr;
  slot->allocator = *a;
  slot->owner = owner;
  pthread_mutex_unlock(&gpuhal__quarantine_mutex);
  if (evicted.ptr) gpuhal__free(&evicted.allocator, evicted.ptr);
}
/* Frees every quarantined object of `owner` (all of them for NULL). */
static void gpuhal__quarantine_flush(const void* owner) {
  unsigned i;
  for (i = 0; i < GPUHAL_QUARANTINE_SIZE; ++i) {
    gpuhal__quarantine_entry_t e;
    pthread_mutex_lock(&gpuhal__quarantine_mutex);
    e = gpuhal__quarantine[i];
    if (e.ptr && (!owner || e.owner == owner)) {
      gpuhal__quarantine[i].ptr = NULL;
    } else {
      e.ptr = NULL;
    }
    pthread_mutex_unlock(&gpuhal__quarantine_mutex);
    if (e.ptr) gpuhal__free(&e.allocator, e.ptr);
  }
}

/* ---- threads ---- */
typedef pthread_mutex_t gpuhal__mutex_t;
typedef struct gpuhal__cond_s {
  pthread_cond_t cond;
} gpuhal__cond_t;
typedef pthread_t gpuhal__thread_t;
typedef pthread_once_t gpuhal__once_t;
#define GPUHAL__ONCE_INIT PTHREAD_ONCE_INIT

static void gpuhal__mutex_init(gpuhal__mutex_t* m) { pthread_mutex_init(m, NULL); }
static void gpuhal__mutex_destroy(gpuhal__mutex_t* m) { pthread_mutex_destroy(m); }
static void gpuhal__mutex_lock(gpuhal__mutex_t* m) { pthread_mutex_lock(m); }
static void gpuhal__mutex_unlock(gpuhal__mutex_t* m) { pthread_mutex_unlock(m); }

/* Condition variables wait on CLOCK_MONOTONIC, matching gpuhal_timeout_t. */
static void gpuhal__cond_init(gpuhal__cond_t* c) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cond, &attr);
  pthread_condattr_destroy(&attr);
}
static void gpuhal__cond_destroy(gpuhal__cond_t* c) { pthread_cond_destroy(&c->cond); }
static void gpuhal__cond_signal(gpuhal__cond_t* c) { pthread_cond_signal(&c->cond); }
static void gpuhal__cond_broadcast(gpuhal__cond_t* c) { pthread_cond_broadcast(&c->cond); }
static void gpuhal__cond_wait(gpuhal__cond_t* c, gpuhal__mutex_t* m) { pthread_cond_wait(&c->cond, m); }
/* Waits until signalled or the deadline passes; returns 0 on timeout (spurious wakeups
 * return 1 too: callers re-check their predicate in a loop, as always). */
static int gpuhal__cond_wait_until(gpuhal__cond_t* c, gpuhal__mutex_t* m, gpuhal_timeout_t timeout) {
  struct timespec ts;
  if (gpuhal__timeout_is_infinite(timeout)) {
    pthread_cond_wait(&c->cond, m);
    return 1;
  }
  if (gpuhal__timeout_expired(timeout)) return 0;
  ts.tv_sec = (time_t)(timeout.deadline_ns / 1000000000);
  ts.tv_nsec = (long)(timeout.deadline_ns % 1000000000);
  return pthread_cond_timedwait(&c->cond, m, &ts) != ETIMEDOUT;
}

typedef void* (*gpuhal__thread_fn_t)(void* arg);
static gpuhal_status_t gpuhal__thread_create(gpuhal__thread_t* thread, gpuhal__thread_fn_t fn, void* arg,
                                             const char* name) {
  int rc = pthread_create(thread, NULL, fn, arg);
  if (rc != 0)
    return gpuhal_status_make(GPUHAL_STATUS_RESOURCE_EXHAUSTED, "could not start thread '%s': %s", name,
                              strerror(rc));
#if defined(__linux__) && defined(__USE_GNU)
  pthread_setname_np(*thread, name);
#endif
  return NULL;
}
static void gpuhal__thread_join(gpuhal__thread_t thread) { pthread_join(thread, NULL); }
static void gpuhal__once(gpuhal__once_t* once, void (*fn)(void)) { pthread_once(once, fn); }

/* ---- intrusive doubly linked list ---- */
typedef struct gpuhal__list_node_s {
  struct gpuhal__list_node_s* prev;
  struct gpuhal__list_node_s* next;
} gpuhal__list_node_t;
static void gpuhal__list_init(gpuhal__list_node_t* head) { head->prev = head->next = head; }
static int gpuhal__list_empty(const gpuhal__list_node_t* head) { return head->next == head; }
static void gpuhal__list_push_back(gpuhal__list_node_t* head, gpuhal__list_node_t* node) {
  node->prev = head->prev;
  node->next = head;
  head->prev->next = node;
  head->prev = node;
}
static void gpuhal__list_remove(gpuhal__list_node_t* node) {
  node->prev->next = node->next;
  node->next->prev = node->prev;
  node->prev = node->next = node;
}
static gpuhal__list_node_t* gpuhal__list_pop_front(gpuhal__list_node_t* head) {
  gpuhal__list_node_t* n;
  if (gpuhal__list_empty(head)) return NULL;
  n = head->next;
  gpuhal__list_remove(n);
  return n;
}
#define GPUHAL__CONTAINER_OF(ptr, type, member) ((type*)(void*)((char*)(ptr)-offsetof(type, member)))

/* ---- hashing (FNV-1a 64; for hash tables, not for cache keys that must not collide) ---- */
static uint64_t gpuhal__hash64(const void* data, size_t size, uint64_t seed) {
  const unsigned char* p = (const unsigned char*)data;
  uint64_t h = 1469598103934665603ull ^ seed;
  size_t i;
  for (i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* ---- environment ---- */
static const char* gpuhal__getenv(const char* name) {
  const char* v = getenv(name);
  return (v && v[0]) ? v : NULL;
}
static gpuhal_log_level_t gpuhal__log_level_parse(const char* s, gpuhal_log_level_t fallback) {
  if (!s) return fallback;
  if (!strcmp(s, "none") || !strcmp(s, "off")) return GPUHAL_LOG_NONE;
  if (!strcmp(s, "error")) return GPUHAL_LOG_ERROR;
  if (!strcmp(s, "warn") || !strcmp(s, "warning")) return GPUHAL_LOG_WARN;
  if (!strcmp(s, "info")) return GPUHAL_LOG_INFO;
  if (!strcmp(s, "debug")) return GPUHAL_LOG_DEBUG;
  return fallback;
}
static const char* gpuhal__log_level_name(gpuhal_log_level_t level) {
  switch (level) {
    case GPUHAL_LOG_ERROR: return "error";
    case GPUHAL_LOG_WARN: return "warn";
    case GPUHAL_LOG_INFO: return "info";
    case GPUHAL_LOG_DEBUG: return "debug";
    default: return "none";
  }
}

/* A logger: a sink and a level. Drivers own one; modules log through their driver's. */
typedef struct gpuhal__logger_s {
  gpuhal_log_level_t level;
  gpuhal_log_fn_t fn; /* NULL: stderr */
  void* user;
} gpuhal__logger_t;

static void gpuhal__log(const gpuhal__logger_t* logger, gpuhal_log_level_t level, const char* format, ...)
    GPUHAL_PRINTF_ATTR(3, 4);
static void gpuhal__log(const gpuhal__logger_t* logger, gpuhal_log_level_t level, const char* format, ...) {
  char buffer[1024];
  va_list args;
  if (!logger || level == GPUHAL_LOG_NONE || level > logger->level) return;
  va_start(args, format);
  vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  if (logger->fn) {
    logger->fn(level, buffer, logger->user);
  } else {
    fprintf(stderr, "gpuhal %s: %s\n", gpuhal__log_level_name(level), buffer);
  }
}
