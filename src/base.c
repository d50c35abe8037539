/* base: statuses, timeouts and clocks, the default allocator, array growth, threads,
 * object pools, lists and logging (declared in base.h and internal.h). */
#include "internal.h"

/* ---- status implementation ---- */
struct gpuhal_status_s {
  gpuhal_status_code_t code;
  int is_static; /* the out-of-memory fallbacks below are never freed */
  size_t length;
  char message[1]; /* "CODE: text", NUL-terminated; allocated to fit */
};

static const char* const gpuhal__status_code_names[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS"};

GPUHAL_API const char* gpuhal_status_code_string(gpuhal_status_code_t code) {
  if ((unsigned)code < GPUHAL__ARRAY_SIZE(gpuhal__status_code_names)) return gpuhal__status_code_names[code];
  return "UNKNOWN_CODE";
}

/* One static status per code, for when a status cannot be allocated. */
#define GPUHAL__STATIC_STATUS(c) \
  {                              \
    c, 1, 0, { 0 }               \
  }
static struct gpuhal_status_s gpuhal__static_statuses[16] = {GPUHAL__STATIC_STATUS(GPUHAL_STATUS_OK),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_CANCELLED),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_UNKNOWN),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_INVALID_ARGUMENT),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_DEADLINE_EXCEEDED),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_NOT_FOUND),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_ALREADY_EXISTS),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_PERMISSION_DENIED),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_RESOURCE_EXHAUSTED),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_FAILED_PRECONDITION),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_ABORTED),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_OUT_OF_RANGE),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_UNIMPLEMENTED),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_INTERNAL),
                                                             GPUHAL__STATIC_STATUS(GPUHAL_STATUS_UNAVAILABLE),
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

/* A message stays under GPUHAL__STATUS_MESSAGE_MAX bytes (with its NUL): a failure that travels down a long
 * chain of waits gains context at every hop, so past the bound the middle goes. The first
 * GPUHAL__STATUS_MESSAGE_HEAD bytes (the original cause and where it first struck) and the
 * newest context stay, with GPUHAL__STATUS_CUT between them. */
#define GPUHAL__STATUS_MESSAGE_MAX 4096
#define GPUHAL__STATUS_MESSAGE_HEAD 1536
#define GPUHAL__STATUS_CUT "; [...]"

GPUHAL_API gpuhal_status_t gpuhal_status_annotate(gpuhal_status_t status, const char* format, ...) {
  va_list args;
  int n;
  gpuhal_status_t grown;
  size_t old_length, head, tail, cut_length = sizeof(GPUHAL__STATUS_CUT) - 1, at;
  if (!status) return NULL;
  if (status->is_static || !format) return status; /* a static status has no room for context */
  va_start(args, format);
  n = vsnprintf(NULL, 0, format, args);
  va_end(args);
  if (n <= 0) return status;
  if (n > GPUHAL__STATUS_MESSAGE_MAX / 4) n = GPUHAL__STATUS_MESSAGE_MAX / 4; /* the newest context, cut */
  old_length = status->length;
  head = old_length;
  tail = 0;
  if (old_length + 2 + (size_t)n >= GPUHAL__STATUS_MESSAGE_MAX) {
    head = GPUHAL__STATUS_MESSAGE_HEAD;
    tail = GPUHAL__STATUS_MESSAGE_MAX - 1 - head - cut_length - 2 - (size_t)n;
  }
  grown = gpuhal__status_alloc(status->code, head + (tail ? cut_length + tail : 0) + 2 + (size_t)n);
  if (!grown) return status; /* keep the cause, lose the context */
  memcpy(grown->message, status->message, head);
  at = head;
  if (tail) {
    memcpy(grown->message + at, GPUHAL__STATUS_CUT, cut_length);
    at += cut_length;
    memcpy(grown->message + at, status->message + old_length - tail, tail);
    at += tail;
  }
  grown->message[at] = ';';
  grown->message[at + 1] = ' ';
  va_start(args, format);
  vsnprintf(grown->message + at + 2, (size_t)n + 1, format, args);
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

GPUHAL__PRIVATE int gpuhal__timeout_is_immediate(gpuhal_timeout_t t) { return t.deadline_ns == INT64_MIN; }

GPUHAL__PRIVATE int gpuhal__timeout_is_infinite(gpuhal_timeout_t t) { return t.deadline_ns == INT64_MAX; }

GPUHAL__PRIVATE int gpuhal__timeout_expired(gpuhal_timeout_t t) {
  if (gpuhal__timeout_is_infinite(t)) return 0;
  if (gpuhal__timeout_is_immediate(t)) return 1;
  return gpuhal_now_ns() >= t.deadline_ns;
}

GPUHAL__PRIVATE void gpuhal__label_copy(char* out, const char* label) {
  size_t n = label ? strlen(label) : 0, i;
  if (n > GPUHAL_LABEL_MAX - 1) {
    n = GPUHAL_LABEL_MAX - 1;
    /* not inside a UTF-8 character: back off its continuation bytes and its lead byte */
    while (n > 0 && ((unsigned char)label[n] & 0xC0) == 0x80) --n;
  }
  /* Control characters would break the lines of reports and messages: '?' for them. */
  for (i = 0; i < n; ++i) out[i] = (unsigned char)label[i] < 0x20 || label[i] == 0x7F ? '?' : label[i];
  out[n] = '\0';
}

GPUHAL__PRIVATE size_t gpuhal__utf8_char_len(const char* s) {
  const unsigned char* u = (const unsigned char*)s;
  unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range (RFC 3629's table) */
  size_t n, i;
  if (u[0] < 0x80) return 1;
  if (u[0] < 0xC2) return 0; /* a continuation byte, or the lead of an overlong pair */
  if (u[0] < 0xE0) {
    n = 2;
  } else if (u[0] < 0xF0) {
    n = 3;
    if (u[0] == 0xE0) lo = 0xA0; /* overlong */
    if (u[0] == 0xED) hi = 0x9F; /* surrogates */
  } else if (u[0] < 0xF5) {
    n = 4;
    if (u[0] == 0xF0) lo = 0x90; /* overlong */
    if (u[0] == 0xF4) hi = 0x8F; /* past U+10FFFF */
  } else {
    return 0;
  }
  for (i = 1; i < n; ++i, lo = 0x80, hi = 0xBF)
    if (u[i] < lo || u[i] > hi) return 0;
  return n;
}

GPUHAL__PRIVATE void gpuhal__sleep_ns(int64_t ns) {
  struct timespec ts;
  if (ns <= 0) return;
  ts.tv_sec = (time_t)(ns / 1000000000);
  ts.tv_nsec = (long)(ns % 1000000000);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

GPUHAL__PRIVATE gpuhal__backoff_t gpuhal__backoff(int64_t first_ns, int64_t max_ns) {
  gpuhal__backoff_t b;
  b.ns = first_ns;
  b.max_ns = max_ns > first_ns ? max_ns : first_ns;
  return b;
}

GPUHAL__PRIVATE void gpuhal__backoff_sleep(gpuhal__backoff_t* b) {
  gpuhal__sleep_ns(b->ns);
  b->ns = b->ns > b->max_ns / 2 ? b->max_ns : 2 * b->ns;
}

GPUHAL__PRIVATE void* gpuhal__default_alloc(size_t size, void* user) {
  GPUHAL__UNUSED(user);
  return malloc(size);
}
static void gpuhal__default_free(void* ptr, void* user) {
  GPUHAL__UNUSED(user);
  free(ptr);
}

GPUHAL__PRIVATE gpuhal_allocator_t gpuhal__allocator_resolve(const gpuhal_allocator_t* a) {
  gpuhal_allocator_t r;
  if (a && a->alloc && a->free) return *a;
  r.alloc = gpuhal__default_alloc;
  r.free = gpuhal__default_free;
  r.user = NULL;
  return r;
}

GPUHAL__PRIVATE void* gpuhal__alloc(const gpuhal_allocator_t* a, size_t size) {
  return size ? a->alloc(size, a->user) : NULL;
}

GPUHAL__PRIVATE void* gpuhal__calloc(const gpuhal_allocator_t* a, size_t size) {
  void* p = gpuhal__alloc(a, size);
  if (p) memset(p, 0, size);
  return p;
}

GPUHAL__PRIVATE void gpuhal__free(const gpuhal_allocator_t* a, void* ptr) {
  if (ptr) a->free(ptr, a->user);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__status_first(gpuhal_status_t first, gpuhal_status_t next) {
  if (!first) return next;
  gpuhal_status_free(next);
  return first;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__status_oom(const char* what, size_t size) {
  return gpuhal_status_make(GPUHAL_STATUS_RESOURCE_EXHAUSTED, "out of host memory allocating %s (%zu bytes)", what,
                            size);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__alloc_zeroed(const gpuhal_allocator_t* a, size_t size, const char* what,
                                                     void** out) {
  *out = gpuhal__calloc(a, size);
  return *out ? NULL : gpuhal__status_oom(what, size);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__grow(const gpuhal_allocator_t* allocator, void** data, size_t* capacity,
                                             size_t needed, size_t element_size, const char* what) {
  size_t new_capacity;
  unsigned char* grown;
  if (needed <= *capacity) return NULL;
  new_capacity = *capacity ? *capacity : 16;
  while (new_capacity < needed) new_capacity *= 2;
  if (new_capacity > SIZE_MAX / element_size) return gpuhal__status_oom(what, SIZE_MAX);
  grown = (unsigned char*)gpuhal__alloc(allocator, new_capacity * element_size);
  if (!grown) return gpuhal__status_oom(what, new_capacity * element_size);
  if (*data) memcpy(grown, *data, *capacity * element_size);
  memset(grown + *capacity * element_size, 0, (new_capacity - *capacity) * element_size);
  gpuhal__free(allocator, *data);
  *data = grown;
  *capacity = new_capacity;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__grow32(const gpuhal_allocator_t* allocator, void** data, uint32_t* capacity,
                                               size_t needed, size_t element_size, const char* what) {
  size_t cap = *capacity;
  if (needed > UINT32_MAX) return gpuhal__status_oom(what, SIZE_MAX);
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow(allocator, data, &cap, needed, element_size, what));
  *capacity = (uint32_t)GPUHAL__MIN(cap, (size_t)UINT32_MAX);
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__grow32_pair(const gpuhal_allocator_t* allocator, uint32_t* capacity,
                                                    size_t needed, void** first, size_t first_size,
                                                    const char* first_what, void** second, size_t second_size,
                                                    const char* second_what) {
  uint32_t first_capacity = *capacity;
  GPUHAL__RETURN_IF_ERROR(gpuhal__grow32(allocator, first, &first_capacity, needed, first_size, first_what));
  return gpuhal__grow32(allocator, second, capacity, first_capacity, second_size, second_what);
}

GPUHAL__PRIVATE char* gpuhal__strdup(const gpuhal_allocator_t* a, const char* s) {
  size_t n = strlen(s) + 1;
  char* p = (char*)gpuhal__alloc(a, n);
  if (p) memcpy(p, s, n);
  return p;
}

GPUHAL__PRIVATE void gpuhal__object_init(gpuhal__object_t* o, uint32_t magic) {
  o->magic = magic;
  o->refcount = 1;
  o->user_refs = 1;
  o->lent = 0;
  o->next_released = NULL;
}

GPUHAL__PRIVATE void gpuhal__object_retain(gpuhal__object_t* o) { gpuhal__atomic_add(&o->refcount, 1); }

GPUHAL__PRIVATE int gpuhal__object_try_retain(gpuhal__object_t* o) {
  int32_t n = gpuhal__atomic_load(&o->refcount);
  while (n > 0)
    if (gpuhal__atomic_cas(&o->refcount, &n, n + 1)) return 1;
  return 0;
}

GPUHAL__PRIVATE int gpuhal__object_release(gpuhal__object_t* o) {
  if (gpuhal__atomic_sub(&o->refcount, 1) != 0) return 0;
  gpuhal__atomic_store(&o->magic, GPUHAL__MAGIC_DEAD);
  return 1;
}

GPUHAL__PRIVATE void gpuhal__object_user_retain(gpuhal__object_t* o) {
  gpuhal__atomic_add(&o->user_refs, 1);
  gpuhal__object_retain(o);
}

GPUHAL__PRIVATE int gpuhal__object_user_release(gpuhal__object_t* o) {
  int32_t n = gpuhal__atomic_load(&o->user_refs);
  while (n > 0)
    if (gpuhal__atomic_cas(&o->user_refs, &n, n - 1)) return 1;
  return 0;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__object_check(const void* object, uint32_t magic, const char* func,
                                                     const char* arg) {
  uint32_t m;
  if (!object)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: argument '%s' must not be NULL", func, arg);
  m = gpuhal__atomic_load(&((const gpuhal__object_t*)object)->magic);
  if (m == GPUHAL__MAGIC_DEAD || (m == magic && !gpuhal__object_is_held(object, magic)))
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: argument '%s' was already released", func, arg);
  if (m != magic)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument '%s' is not a gpuhal object of the right type", func, arg);
  return NULL;
}

GPUHAL__PRIVATE int gpuhal__object_is_held(const void* object, uint32_t magic) {
  const gpuhal__object_t* o = (const gpuhal__object_t*)object;
  return gpuhal__object_is_live(object, magic) && (o->lent || gpuhal__atomic_load(&o->user_refs) > 0);
}

GPUHAL__PRIVATE int gpuhal__object_is_live(const void* object, uint32_t magic) {
  return object && gpuhal__atomic_load(&((const gpuhal__object_t*)object)->magic) == magic;
}
typedef pthread_once_t gpuhal__once_t;
#define GPUHAL__ONCE_INIT PTHREAD_ONCE_INIT

GPUHAL__PRIVATE void gpuhal__mutex_init(gpuhal__mutex_t* m) { pthread_mutex_init(m, NULL); }

GPUHAL__PRIVATE void gpuhal__mutex_destroy(gpuhal__mutex_t* m) { pthread_mutex_destroy(m); }

GPUHAL__PRIVATE void gpuhal__mutex_lock(gpuhal__mutex_t* m) { pthread_mutex_lock(m); }

GPUHAL__PRIVATE void gpuhal__mutex_unlock(gpuhal__mutex_t* m) { pthread_mutex_unlock(m); }

GPUHAL__PRIVATE int gpuhal__mutex_trylock(gpuhal__mutex_t* m) { return pthread_mutex_trylock(m) == 0; }

GPUHAL__PRIVATE void gpuhal__cond_init(gpuhal__cond_t* c) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cond, &attr);
  pthread_condattr_destroy(&attr);
}

GPUHAL__PRIVATE void gpuhal__cond_destroy(gpuhal__cond_t* c) { pthread_cond_destroy(&c->cond); }

GPUHAL__PRIVATE void gpuhal__cond_signal(gpuhal__cond_t* c) { pthread_cond_signal(&c->cond); }

GPUHAL__PRIVATE void gpuhal__cond_broadcast(gpuhal__cond_t* c) { pthread_cond_broadcast(&c->cond); }

GPUHAL__PRIVATE void gpuhal__cond_wait(gpuhal__cond_t* c, gpuhal__mutex_t* m) { pthread_cond_wait(&c->cond, m); }

GPUHAL__PRIVATE int gpuhal__cond_wait_until(gpuhal__cond_t* c, gpuhal__mutex_t* m, gpuhal_timeout_t timeout) {
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

/* Threads carry their names (top -H, gdb, /proc) also when the implementation is compiled in
 * a strict mode that hides the declaration: glibc and musl have had the function for years. */
#if defined(__linux__) && !defined(__USE_GNU) && !defined(__cplusplus)
extern int pthread_setname_np(pthread_t thread, const char* name);
#endif

GPUHAL__PRIVATE gpuhal_status_t gpuhal__thread_create(gpuhal__thread_t* thread, gpuhal__thread_fn_t fn, void* arg,
                                                      const char* name) {
  gpuhal__thread_t detached;
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc == 0 && !thread) rc = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (rc == 0) rc = pthread_create(thread ? thread : &detached, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  if (rc != 0)
    return gpuhal_status_make(GPUHAL_STATUS_RESOURCE_EXHAUSTED, "could not start thread '%s': %s", name, strerror(rc));
#if defined(__linux__) && (defined(__USE_GNU) || !defined(__cplusplus))
  if (thread) pthread_setname_np(*thread, name); /* a detached one may be gone: it names itself */
#endif
  return NULL;
}

GPUHAL__PRIVATE void gpuhal__thread_name_self(const char* name) {
#if defined(__linux__) && (defined(__USE_GNU) || !defined(__cplusplus))
  pthread_setname_np(pthread_self(), name);
#else
  GPUHAL__UNUSED(name);
#endif
}

GPUHAL__PRIVATE void gpuhal__thread_join(gpuhal__thread_t thread) { pthread_join(thread, NULL); }
static void gpuhal__once(gpuhal__once_t* once, void (*fn)(void)) { pthread_once(once, fn); }

/* ---- object pools: type-stable memory for gpuhal objects ----
 * Handles are raw pointers (the API passes gpuhal_buffer_t* and so on), so a handle cannot
 * carry a generation: once an address holds a new live object of the same type, an old
 * handle to it is indistinguishable from the new one. What the pool guarantees instead:
 *   - the memory of a released object is never given back to the allocator while its
 *     driver lives (the pool frees it with the driver), so reading a stale handle's header
 *     is always safe and finds the poison or another object's magic, never freed memory;
 *   - a released object's memory is reused only for an object of the same type, oldest
 *     released first, and only once GPUHAL_HANDLE_REUSE_DISTANCE more objects of that type
 *     have been released after it. So a stale handle is reported as released until at
 *     least that many later objects of its type were released; after that it may name a
 *     newer object of its type (still gpuhal memory of the right type, never a crash).
 * Memory held back: at most GPUHAL_HANDLE_REUSE_DISTANCE released objects per type (plus
 * the peak of live ones), reached only by a program that churns objects of that type.
 * The checks stay one load of the magic: no lock, no lookup. */
#ifndef GPUHAL_HANDLE_REUSE_DISTANCE
#define GPUHAL_HANDLE_REUSE_DISTANCE 4096
#endif

GPUHAL__PRIVATE void gpuhal__object_pool_init(gpuhal__object_pool_t* pool, const gpuhal_allocator_t* allocator) {
  memset(pool->types, 0, sizeof(pool->types));
  pool->allocator = *allocator;
  gpuhal__mutex_init(&pool->mutex);
}

GPUHAL__PRIVATE void gpuhal__object_pool_deinit(gpuhal__object_pool_t* pool) {
  unsigned i;
  for (i = 0; i < GPUHAL__OBJECT_POOL_TYPES; ++i) {
    gpuhal__object_t* o = pool->types[i].oldest;
    while (o) {
      gpuhal__object_t* next = o->next_released;
      gpuhal__free(&pool->allocator, o);
      o = next;
    }
  }
  memset(pool->types, 0, sizeof(pool->types));
  gpuhal__mutex_destroy(&pool->mutex);
}
/* Under the mutex: the FIFO of `magic`, claimed on first use; NULL if all are taken.
 * `size` 0: any (a free). */
static gpuhal__object_fifo_t* gpuhal__object_fifo_locked(gpuhal__object_pool_t* pool, uint32_t magic, size_t size) {
  unsigned i;
  for (i = 0; i < GPUHAL__OBJECT_POOL_TYPES; ++i) {
    gpuhal__object_fifo_t* fifo = &pool->types[i];
    if (fifo->magic == 0) {
      fifo->magic = magic;
      fifo->size = size;
      fifo->name = NULL;
    }
    if (fifo->magic == magic) {
      if (!fifo->size) fifo->size = size;
      GPUHAL_ASSERT(size == 0 || fifo->size == size); /* one size per type: a reused object must fit */
      return fifo;
    }
  }
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__object_alloc(gpuhal__object_pool_t* pool, uint32_t magic, size_t size,
                                                     const char* what, void** out) {
  gpuhal__object_t* reused = NULL;
  gpuhal__object_fifo_t* fifo;
  gpuhal_status_t status;
  GPUHAL_ASSERT(size >= sizeof(gpuhal__object_t));
  gpuhal__mutex_lock(&pool->mutex);
  fifo = gpuhal__object_fifo_locked(pool, magic, size);
  if (fifo && fifo->count > GPUHAL_HANDLE_REUSE_DISTANCE) {
    reused = fifo->oldest;
    fifo->oldest = reused->next_released;
    if (!fifo->oldest) fifo->newest = NULL;
    fifo->count--;
  }
  if (fifo) {
    if (!fifo->name) fifo->name = what;
    fifo->live++; /* taken back below if the allocation fails */
  }
  gpuhal__mutex_unlock(&pool->mutex);
  if (reused) {
    memset(reused, 0, size);
    *out = reused;
    return NULL;
  }
  status = gpuhal__alloc_zeroed(&pool->allocator, size, what, out);
  if (status && fifo) {
    gpuhal__mutex_lock(&pool->mutex);
    fifo->live--;
    gpuhal__mutex_unlock(&pool->mutex);
  }
  return status;
}

GPUHAL__PRIVATE void gpuhal__object_free(gpuhal__object_pool_t* pool, uint32_t magic, void* object) {
  gpuhal__object_t* o = (gpuhal__object_t*)object;
  gpuhal__object_fifo_t* fifo;
  if (!o) return;
  gpuhal__atomic_store(&o->magic, GPUHAL__MAGIC_DEAD);
  /* Atomic: an extra release racing with the last (another thread's) still reads them. */
  gpuhal__atomic_store(&o->refcount, 0);
  gpuhal__atomic_store(&o->user_refs, 0);
  o->next_released = NULL;
  gpuhal__mutex_lock(&pool->mutex);
  fifo = gpuhal__object_fifo_locked(pool, magic, 0);
  if (fifo) {
    if (fifo->live > 0) fifo->live--;
    if (fifo->newest) {
      fifo->newest->next_released = o;
    } else {
      fifo->oldest = o;
    }
    fifo->newest = o;
    fifo->count++;
  }
  gpuhal__mutex_unlock(&pool->mutex);
  if (!fifo) gpuhal__free(&pool->allocator, o); /* cannot happen: more FIFOs than types */
}

/* Objects that outlive every driver (the drivers themselves, when they use the default
 * allocator: a user's allocator may be gone once its driver is): one process-wide pool,
 * never torn down; what it holds stays reachable from here, so leak checkers are content. */
static gpuhal__object_pool_t gpuhal__process_objects;
static gpuhal__once_t gpuhal__process_objects_once = GPUHAL__ONCE_INIT;
static void gpuhal__process_objects_init(void) {
  gpuhal_allocator_t a = gpuhal__allocator_resolve(NULL);
  gpuhal__object_pool_init(&gpuhal__process_objects, &a);
}

GPUHAL__PRIVATE gpuhal__object_pool_t* gpuhal__process_object_pool(void) {
  gpuhal__once(&gpuhal__process_objects_once, gpuhal__process_objects_init);
  return &gpuhal__process_objects;
}

GPUHAL__PRIVATE size_t gpuhal__object_pool_describe_live(gpuhal__object_pool_t* pool, uint32_t except, char* out,
                                                         size_t capacity) {
  size_t total = 0, used = 0;
  unsigned i;
  if (capacity) out[0] = '\0';
  gpuhal__mutex_lock(&pool->mutex);
  for (i = 0; i < GPUHAL__OBJECT_POOL_TYPES; ++i) {
    const gpuhal__object_fifo_t* fifo = &pool->types[i];
    int n;
    if (!fifo->magic || fifo->magic == except || fifo->live == 0) continue;
    total += fifo->live;
    if (used >= capacity) continue;
    n = snprintf(out + used, capacity - used, "%s%lu %s", used ? ", " : "", (unsigned long)fifo->live,
                 fifo->name ? fifo->name : "object");
    if (n > 0) used += (size_t)n;
  }
  gpuhal__mutex_unlock(&pool->mutex);
  return total;
}

GPUHAL__PRIVATE void gpuhal__list_init(gpuhal__list_node_t* head) { head->prev = head->next = head; }

GPUHAL__PRIVATE int gpuhal__list_empty(const gpuhal__list_node_t* head) { return head->next == head; }

GPUHAL__PRIVATE void gpuhal__list_push_back(gpuhal__list_node_t* head, gpuhal__list_node_t* node) {
  node->prev = head->prev;
  node->next = head;
  head->prev->next = node;
  head->prev = node;
}

GPUHAL__PRIVATE void gpuhal__list_insert_after(gpuhal__list_node_t* at, gpuhal__list_node_t* node) {
  node->prev = at;
  node->next = at->next;
  at->next->prev = node;
  at->next = node;
}

GPUHAL__PRIVATE void gpuhal__list_remove(gpuhal__list_node_t* node) {
  node->prev->next = node->next;
  node->next->prev = node->prev;
  node->prev = node->next = node;
}

GPUHAL__PRIVATE gpuhal__list_node_t* gpuhal__list_pop_front(gpuhal__list_node_t* head) {
  gpuhal__list_node_t* n;
  if (gpuhal__list_empty(head)) return NULL;
  n = head->next;
  gpuhal__list_remove(n);
  return n;
}

/* Links two roots: the larger becomes the first child of the smaller, which is returned
 * (its `next` and `prev` are left to the caller). */
static gpuhal__heap_node_t* gpuhal__heap_meld(gpuhal__heap_node_t* a, gpuhal__heap_node_t* b) {
  GPUHAL__COUNT(order_compare);
  if (b->key < a->key) {
    gpuhal__heap_node_t* t = a;
    a = b;
    b = t;
  }
  b->prev = a;
  b->next = a->child;
  if (a->child) a->child->prev = b;
  a->child = b;
  return a;
}

/* Melds a list of siblings into one root: pairs left to right, then the pairs right to
 * left (the two passes are what make taking the smallest amortized O(log n)). */
static gpuhal__heap_node_t* gpuhal__heap_meld_siblings(gpuhal__heap_node_t* first) {
  gpuhal__heap_node_t *pairs = NULL, *root;
  while (first) { /* pairs end up in reverse order, linked by `next` */
    gpuhal__heap_node_t *a = first, *b = first->next, *m = a;
    first = b ? b->next : NULL;
    if (b) m = gpuhal__heap_meld(a, b);
    m->next = pairs;
    pairs = m;
  }
  root = pairs;
  pairs = pairs ? pairs->next : NULL;
  while (pairs) {
    gpuhal__heap_node_t* next = pairs->next;
    root = gpuhal__heap_meld(root, pairs);
    pairs = next;
  }
  if (root) root->next = root->prev = NULL;
  return root;
}

GPUHAL__PRIVATE void gpuhal__heap_push(gpuhal__heap_t* heap, gpuhal__heap_node_t* node) {
  node->child = node->next = node->prev = NULL;
  heap->root = heap->root ? gpuhal__heap_meld(heap->root, node) : node;
  heap->root->next = heap->root->prev = NULL;
}

GPUHAL__PRIVATE gpuhal__heap_node_t* gpuhal__heap_pop(gpuhal__heap_t* heap) {
  gpuhal__heap_node_t* min = heap->root;
  if (!min) return NULL;
  heap->root = gpuhal__heap_meld_siblings(min->child);
  min->child = NULL;
  return min;
}

GPUHAL__PRIVATE void gpuhal__heap_remove(gpuhal__heap_t* heap, gpuhal__heap_node_t* node) {
  gpuhal__heap_node_t* below;
  if (node == heap->root) {
    gpuhal__heap_pop(heap);
    return;
  }
  if (node->prev->child == node) { /* a first child: prev is its parent */
    node->prev->child = node->next;
  } else {
    node->prev->next = node->next;
  }
  if (node->next) node->next->prev = node->prev;
  below = gpuhal__heap_meld_siblings(node->child); /* its children were never smaller than it */
  node->child = node->next = node->prev = NULL;
  if (below) heap->root = gpuhal__heap_meld(heap->root, below);
  heap->root->next = heap->root->prev = NULL;
}

GPUHAL__PRIVATE const char* gpuhal__getenv(const char* name) {
  const char* v = getenv(name);
  return (v && v[0]) ? v : NULL;
}

/* 1 when `a` and `b` are equal but for the case of ASCII letters. */
static int gpuhal__equal_nocase(const char* a, const char* b) {
  for (; *a && *b; ++a, ++b) {
    char x = (char)(*a >= 'A' && *a <= 'Z' ? *a - 'A' + 'a' : *a);
    char y = (char)(*b >= 'A' && *b <= 'Z' ? *b - 'A' + 'a' : *b);
    if (x != y) return 0;
  }
  return *a == *b;
}

GPUHAL__PRIVATE int gpuhal__log_level_parse(const char* s, gpuhal_log_level_t* level) {
  static const struct {
    const char* name;
    gpuhal_log_level_t level;
  } names[] = {{"none", GPUHAL_LOG_NONE},  {"off", GPUHAL_LOG_NONE},     {"error", GPUHAL_LOG_ERROR},
               {"warn", GPUHAL_LOG_WARN},  {"warning", GPUHAL_LOG_WARN}, {"info", GPUHAL_LOG_INFO},
               {"debug", GPUHAL_LOG_DEBUG}};
  size_t i;
  for (i = 0; s && i < sizeof(names) / sizeof(names[0]); ++i)
    if (gpuhal__equal_nocase(s, names[i].name)) {
      *level = names[i].level;
      return 1;
    }
  return 0;
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
GPUHAL__PRIVATE void gpuhal__log(const gpuhal__logger_t* logger, gpuhal_log_level_t level, const char* format, ...) {
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

GPUHAL__PRIVATE void gpuhal__log_extra_release(const gpuhal__logger_t* logger, const char* func, const char* what) {
  gpuhal__log(logger, GPUHAL_LOG_ERROR,
              "%s: %s was released more times than it was created and retained; this release is ignored", func, what);
}
