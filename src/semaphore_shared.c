/* semaphore_shared: timeline semaphores shared with other processes (semaphore.h, "sharing
 * a semaphore with other processes").
 *
 * The exporter makes a file of one page (created and unlinked at once in /dev/shm, else
 * /tmp, so its descriptors are all that name it) and moves the semaphore's word
 * there (gpuhal__semaphore_shared_t). Every process that maps the file registers it as
 * pinned memory mapped into every device, so GPU waits and signals of all of them meet on
 * that one word, with no host in between.
 *
 * Each process keeps its own semaphore object (value, timepoints, waiters) and takes in what
 * the others did when it looks ("pull": the word above its value, or a failure told in the
 * file). It looks at every query and check (submits, host waits), when completed work's
 * inputs are judged (gpuhal__semaphore_value_seen), and on a thread of the driver's (the
 * watch) that pulls every shared semaphore while any is left: 20 us after a change, backing
 * off to 1 ms. The watch is what tells queue work that waits on the host, and host waits
 * on several semaphores, of another process's signal.
 *
 * A host wait on one shared semaphore sleeps on a condition variable in the file (process-
 * shared, so glibc's futex-based one): every host-side advance or failure, in any process,
 * bumps `wake_seq` and broadcasts while someone sleeps. A GPU signal is seen on the host
 * when its process's completion side advances the value (which wakes the sleepers), or
 * when a sleeper's nap ends and it reads the word, whichever comes first. The mutex is
 * robust: a process that dies holding it does not block the others. */
#include "semaphore.h"
#include "memory.h"
#include "cuda_api.h"
#include "symbols.h"
#include "status.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GPUHAL__SHARED_MAGIC 0x53485347u /* "GSHS" */
#define GPUHAL__SHARED_FILE_BYTES 4096u
#define GPUHAL__SHARED_WATCH_MIN_NS 20000
#define GPUHAL__SHARED_WATCH_MAX_NS 1000000

typedef char gpuhal__shared_fits_a_page[sizeof(gpuhal__semaphore_shared_t) <= GPUHAL__SHARED_FILE_BYTES ? 1 : -1];

/* ---- the file ---- */

static gpuhal_status_t gpuhal__shared_file_create(int* out_fd) {
  static const char* const dirs[2] = {"/dev/shm", "/tmp"};
  int i, saved = 0;
  *out_fd = -1;
  for (i = 0; i < 2; ++i) {
    char path[512];
    int fd;
    if (snprintf(path, sizeof(path), "%s/gpuhal-semaphore-XXXXXX", dirs[i]) >= (int)sizeof(path)) continue;
    fd = mkstemp(path);
    if (fd < 0) {
      saved = errno;
      continue;
    }
    unlink(path);
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 || ftruncate(fd, GPUHAL__SHARED_FILE_BYTES) != 0) {
      saved = errno;
      close(fd);
      continue;
    }
    *out_fd = fd;
    return NULL;
  }
  return gpuhal_status_make(GPUHAL_STATUS_RESOURCE_EXHAUSTED,
                            "gpuhal_semaphore_export: could not make a shared file in /dev/shm or /tmp: %s",
                            strerror(saved));
}

static gpuhal_status_t gpuhal__shared_file_map(const char* func, int fd, gpuhal__semaphore_shared_t** out) {
  void* p = mmap(NULL, GPUHAL__SHARED_FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, "%s: could not map argument 'fd' (%d): %s", func, fd,
                              strerror(errno));
  *out = (gpuhal__semaphore_shared_t*)p;
  return NULL;
}

/* The file's process-shared mutex and condition variable (the exporter sets them up once). */
static int gpuhal__shared_sync_init(gpuhal__semaphore_shared_t* sh) {
  pthread_mutexattr_t ma;
  pthread_condattr_t ca;
  int rc = pthread_mutexattr_init(&ma);
  if (rc) return rc;
  rc = pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  if (!rc) rc = pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  if (!rc) rc = pthread_mutex_init(&sh->mutex, &ma);
  pthread_mutexattr_destroy(&ma);
  if (rc) return rc;
  rc = pthread_condattr_init(&ca);
  if (!rc) {
    rc = pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    if (!rc) rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!rc) rc = pthread_cond_init(&sh->cond, &ca);
    pthread_condattr_destroy(&ca);
  }
  if (rc) pthread_mutex_destroy(&sh->mutex);
  return rc;
}

/* 1 when the caller holds the file's mutex; a holder that died leaves it consistent again
 * (the state it guards is only the sleepers' condition, always safe to recheck). */
static int gpuhal__shared_lock(gpuhal__semaphore_shared_t* sh) {
  int rc = pthread_mutex_lock(&sh->mutex);
  if (rc == EOWNERDEAD) rc = pthread_mutex_consistent(&sh->mutex);
  return rc == 0;
}

/* ---- the mapping of the word into every device ---- */

/* A mapped file and where it is registered: what a semaphore takes when it is shared. */
typedef struct gpuhal__shared_mapping_s {
  gpuhal__semaphore_shared_t* sh;
  int fd;
  CUdevice cu_device; /* whose primary context registered it (retained) */
  CUcontext context;  /* NULL: not registered */
  CUdeviceptr address;
  /* Reserved before registering (gpuhal__shared_reserve): giving the mapping back happens
   * in releases, which cannot report that host memory ran out, so they must need none. */
  gpuhal__deferred_call_t* put_off;   /* the record its unregistering takes, put off */
  struct gpuhal__shared_kept_s* kept; /* the record that keeps it (gpuhal__semaphore_shared_destroy) */
} gpuhal__shared_mapping_t;

/* A mapping a destroyed semaphore could not give back yet (driver->shared_kept). */
typedef struct gpuhal__shared_kept_s {
  struct gpuhal__shared_kept_s* next;
  gpuhal__shared_mapping_t m;
} gpuhal__shared_kept_t;

/* Reserves what giving `m` back may take (see gpuhal__shared_mapping_t.put_off). */
static gpuhal_status_t gpuhal__shared_reserve(gpuhal_driver_t* driver, gpuhal__shared_mapping_t* m) {
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__deferred_call_reserve(&driver->allocator, "a shared semaphore's unregistering put off", &m->put_off));
  return gpuhal__alloc_zeroed(&driver->allocator, sizeof(*m->kept), "a shared semaphore's kept mapping",
                              (void**)&m->kept);
}

/* With no GPU wait in flight and none starting (gpuhal__driver_call_unparked).
 * tools/probe/park_probe.c found register + unregister waiting for a stream parked on a
 * value wait; a later probe (softcuda conformance, conf_share.c) puts that on
 * cuMemHostUnregister alone, which is put off (gpuhal__shared_mapping_drop). Registering
 * only unparked is kept until the H200 runs gpuhal's own export with work parked. */
typedef struct gpuhal__shared_register_s {
  gpuhal_driver_t* driver;
  gpuhal__shared_mapping_t* m;
} gpuhal__shared_register_t;
static gpuhal_status_t gpuhal__shared_register_unparked(void* arg) {
  gpuhal__shared_register_t* r = (gpuhal__shared_register_t*)arg;
  gpuhal__shared_mapping_t* m = r->m;
  const gpuhal__cuda_symbols_t* cu = &r->driver->cu;
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  if (!cu->cuMemHostRegister || !cu->cuMemHostUnregister)
    return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                              "sharing a semaphore: the CUDA driver lacks cuMemHostRegister, which maps the shared "
                              "value into the devices");
  GPUHAL__RETURN_IF_ERROR(GPUHAL__CU(cu, cuDeviceGet, (&m->cu_device, 0)));
  GPUHAL__RETURN_IF_ERROR(GPUHAL__CU(cu, cuDevicePrimaryCtxRetain, (&m->context, m->cu_device)));
  if (!gpuhal__context_push_any(cu, m->context, &scope)) {
    status = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "sharing a semaphore: could not make device 0 current");
  } else {
    status = GPUHAL__CU(
        cu, cuMemHostRegister,
        ((void*)m->sh, GPUHAL__SHARED_FILE_BYTES, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    if (!status) {
      status = GPUHAL__CU(cu, cuMemHostGetDevicePointer, (&m->address, (void*)m->sh, 0));
      if (status) cu->cuMemHostUnregister((void*)m->sh);
    }
    gpuhal__context_pop_any(cu, &scope);
  }
  if (status) {
    cu->cuDevicePrimaryCtxRelease(m->cu_device);
    m->context = NULL;
  }
  return status;
}

static gpuhal_status_t gpuhal__shared_register(gpuhal_driver_t* driver, const char* func, gpuhal__shared_mapping_t* m) {
  gpuhal__shared_register_t r;
  r.driver = driver;
  r.m = m;
  GPUHAL__RETURN_IF_ERROR(gpuhal__shared_reserve(driver, m));
  return gpuhal__driver_call_unparked(driver, func, gpuhal__shared_register_unparked, &r);
}

/* Undoes what of gpuhal__shared_register, the map and the descriptor `m` holds. The
 * unregistering (and the unmapping after it) is put off like a cuMemFree while queue work
 * waits on the GPU. */
static void gpuhal__shared_mapping_drop(gpuhal_driver_t* driver, gpuhal__shared_mapping_t* m) {
  gpuhal__free(&driver->allocator, m->kept); /* not kept: given back now */
  m->kept = NULL;
  if (m->context) {
    gpuhal__deferred_call_t call;
    gpuhal_status_t status;
    memset(&call, 0, sizeof(call));
    call.unregister = (void*)m->sh;
    call.unregister_bytes = GPUHAL__SHARED_FILE_BYTES;
    call.reserved = m->put_off;
    m->put_off = NULL;
    /* takes m->context and the reserved record */
    status = gpuhal__driver_sync_call(driver, m->cu_device, m->context, &call);
    if (status) {
      gpuhal__log(&driver->logger, GPUHAL_LOG_ERROR, "unsharing a semaphore: %s", gpuhal_status_message(status));
      gpuhal_status_free(status);
    } else {
      m->sh = NULL; /* unmapped by the call */
    }
    m->context = NULL;
  }
  gpuhal__free(&driver->allocator, m->put_off); /* never registered */
  m->put_off = NULL;
  if (m->sh) munmap((void*)m->sh, GPUHAL__SHARED_FILE_BYTES);
  m->sh = NULL;
  if (m->fd >= 0) close(m->fd);
  m->fd = -1;
}

/* ---- the driver's watch ---- */

static void* gpuhal__shared_watch_main(void* arg) {
  gpuhal_driver_t* driver = (gpuhal_driver_t*)arg;
  int64_t nap = GPUHAL__SHARED_WATCH_MIN_NS;
  gpuhal__capture_relax_thread(&driver->cu);
  gpuhal__mutex_lock(&driver->shared_mutex);
  while (!driver->shared_stop) {
    gpuhal__list_node_t* n;
    int changed = 0;
    if (gpuhal__list_empty(&driver->shared_semaphores)) {
      gpuhal__cond_wait_until(&driver->shared_cond, &driver->shared_mutex, gpuhal_timeout_infinite());
      continue;
    }
    /* Under shared_mutex, so no semaphore of the list is destroyed meanwhile (its last
     * release unlinks it under that mutex); a pull's notifications release nothing. */
    for (n = driver->shared_semaphores.next; n != &driver->shared_semaphores; n = n->next) {
      gpuhal_semaphore_t* s = GPUHAL__CONTAINER_OF(n, gpuhal_semaphore_t, shared_link);
      gpuhal__mutex_lock(&s->mutex);
      changed |= gpuhal__semaphore_shared_pull_locked(s);
      gpuhal__mutex_unlock(&s->mutex);
    }
    nap = changed ? GPUHAL__SHARED_WATCH_MIN_NS
                  : (nap * 2 > GPUHAL__SHARED_WATCH_MAX_NS ? GPUHAL__SHARED_WATCH_MAX_NS : nap * 2);
    gpuhal__cond_wait_until(&driver->shared_cond, &driver->shared_mutex, gpuhal_timeout_relative_ns(nap));
  }
  gpuhal__mutex_unlock(&driver->shared_mutex);
  return NULL;
}

/* Links `s` into the driver's watch, starting the watch thread with the first one. */
static gpuhal_status_t gpuhal__shared_watch_add(gpuhal_semaphore_t* s) {
  gpuhal_driver_t* driver = s->driver;
  gpuhal_status_t status = NULL;
  gpuhal__mutex_lock(&driver->shared_mutex);
  if (!driver->shared_thread_running) {
    status = gpuhal__thread_create(&driver->shared_thread, gpuhal__shared_watch_main, driver, "gpuhal-shared");
    if (!status) driver->shared_thread_running = 1;
  }
  if (!status) {
    gpuhal__list_push_back(&driver->shared_semaphores, &s->shared_link);
    gpuhal__cond_signal(&driver->shared_cond);
  }
  gpuhal__mutex_unlock(&driver->shared_mutex);
  return status;
}

GPUHAL__PRIVATE void gpuhal__semaphore_shared_driver_destroy(gpuhal_driver_t* driver) {
  int running;
  gpuhal__shared_kept_t* kept;
  gpuhal__mutex_lock(&driver->shared_mutex);
  GPUHAL_ASSERT(gpuhal__list_empty(&driver->shared_semaphores));
  running = driver->shared_thread_running;
  driver->shared_stop = 1;
  gpuhal__cond_signal(&driver->shared_cond);
  kept = driver->shared_kept;
  driver->shared_kept = NULL;
  gpuhal__mutex_unlock(&driver->shared_mutex);
  if (running) gpuhal__thread_join(driver->shared_thread);
  while (kept) { /* no device is left: nothing of this driver's writes them any more */
    gpuhal__shared_kept_t* next = kept->next;
    gpuhal__shared_mapping_drop(driver, &kept->m);
    gpuhal__free(&driver->allocator, kept);
    kept = next;
  }
}

/* ---- what semaphore.c asks of a shared semaphore ---- */

/* The value the page says is reached: the word, or the highest value a process reached
 * from the host when a GPU store has lowered the word under it since. Only meaningful
 * while no failure is told (failure_state 0, read after this). */
static uint64_t gpuhal__semaphore_shared_word(gpuhal__semaphore_shared_t* sh) {
  uint64_t word = gpuhal__atomic_load(&sh->value), high = gpuhal__atomic_load(&sh->high);
  return high > word ? high : word;
}

GPUHAL__PRIVATE uint64_t gpuhal__semaphore_shared_high(gpuhal_semaphore_t* s, uint64_t value) {
  gpuhal__semaphore_shared_t* sh = s->shared;
  uint64_t high;
  if (!sh) return value;
  high = gpuhal__atomic_load(&sh->high);
  while (high < value && !gpuhal__atomic_cas(&sh->high, &high, value)) {
  }
  return high > value ? high : value;
}

GPUHAL__PRIVATE uint64_t gpuhal__semaphore_value_seen(gpuhal_semaphore_t* s) {
  uint64_t value = gpuhal__atomic_load(&s->value), word;
  gpuhal__semaphore_shared_t* sh = s->shared;
  if (!sh) return value;
  word = gpuhal__semaphore_shared_word(sh);
  /* A failure is told before the word jumps to its failed value: read after the word, a
   * quiet failure_state means the word is a real value. */
  if (gpuhal__atomic_load(&sh->failure_state) != 0) return value;
  return word > value ? word : value;
}

GPUHAL__PRIVATE int gpuhal__semaphore_shared_pull_locked(gpuhal_semaphore_t* s) {
  gpuhal__semaphore_shared_t* sh = s->shared;
  uint64_t word;
  if (!sh || s->failure) return 0;
  word = gpuhal__semaphore_shared_word(sh);
  if (gpuhal__atomic_load(&sh->failure_state) == 2) {
    char text[GPUHAL_SEMAPHORE_SHARED_REASON_MAX];
    int code = gpuhal__atomic_load(&sh->failure_code);
    memcpy(text, sh->failure_text, sizeof(text));
    text[sizeof(text) - 1] = '\0';
    if (code <= GPUHAL_STATUS_OK || code > GPUHAL_STATUS_DATA_LOSS) code = GPUHAL_STATUS_ABORTED;
    gpuhal__semaphore_fail_locked(
        s, gpuhal_status_make((gpuhal_status_code_t)code, "%s (semaphore%s%s%s failed in process %d)", text,
                              GPUHAL__LABEL_ARGS(s->label), (int)gpuhal__atomic_load(&sh->failure_pid)));
    return 1;
  }
  if (gpuhal__atomic_load(&sh->failure_state) != 0 || word <= s->value) return 0;
  gpuhal__semaphore_advance_locked(s, word);
  return 1;
}

GPUHAL__PRIVATE void gpuhal__semaphore_shared_pull(gpuhal_semaphore_t* s) {
  if (!s->shared) return;
  gpuhal__mutex_lock(&s->mutex);
  gpuhal__semaphore_shared_pull_locked(s);
  gpuhal__mutex_unlock(&s->mutex);
}

GPUHAL__PRIVATE void gpuhal__semaphore_shared_wake(gpuhal_semaphore_t* s) {
  gpuhal__semaphore_shared_t* sh = s->shared;
  /* Sequentially consistent with the sleeper's count and recheck (gpuhal__semaphore_shared_sleep):
   * either this sees it counted, or it sees this bump before it sleeps. */
  gpuhal__atomic_add_seq_cst(&sh->wake_seq, 1u);
  if (gpuhal__atomic_load_seq_cst(&sh->sleepers) == 0) return;
  if (gpuhal__shared_lock(sh)) {
    pthread_cond_broadcast(&sh->cond);
    pthread_mutex_unlock(&sh->mutex);
  }
}

GPUHAL__PRIVATE void gpuhal__semaphore_shared_publish_failure(gpuhal_semaphore_t* s, gpuhal_status_t cause) {
  gpuhal__semaphore_shared_t* sh = s->shared;
  uint32_t quiet = 0;
  gpuhal_status_code_t code = gpuhal_status_code(cause);
  const char* message = gpuhal_status_message(cause);
  const char* name = gpuhal_status_code_string(code);
  size_t length = strlen(name);
  /* The text without the code's name in front: the other side's status puts it back. */
  if (strncmp(message, name, length) == 0 && message[length] == ':' && message[length + 1] == ' ')
    message += length + 2;
  length = strlen(message);
  /* The first failure of any process wins; a later one stays this process's own. */
  if (!gpuhal__atomic_cas(&sh->failure_state, &quiet, 1u)) return;
  if (length >= sizeof(sh->failure_text)) length = sizeof(sh->failure_text) - 1;
  memcpy(sh->failure_text, message, length);
  sh->failure_text[length] = '\0';
  gpuhal__atomic_store(&sh->failure_code, (int32_t)code);
  gpuhal__atomic_store(&sh->failure_pid, (int32_t)getpid());
  gpuhal__atomic_store(&sh->failure_state, 2u);
}

GPUHAL__PRIVATE uint32_t gpuhal__semaphore_shared_seq(gpuhal_semaphore_t* s) {
  return gpuhal__atomic_load_seq_cst(&s->shared->wake_seq);
}

GPUHAL__PRIVATE int gpuhal__semaphore_shared_moved(gpuhal_semaphore_t* s, uint64_t value, uint32_t seq) {
  gpuhal__semaphore_shared_t* sh = s->shared;
  return gpuhal__atomic_load_seq_cst(&sh->wake_seq) != seq || gpuhal__atomic_load(&sh->failure_state) != 0 ||
         gpuhal__semaphore_shared_word(sh) >= value;
}

GPUHAL__PRIVATE void gpuhal__semaphore_shared_sleep(gpuhal_semaphore_t* s, uint64_t value, uint32_t seq,
                                                    gpuhal_timeout_t nap) {
  gpuhal__semaphore_shared_t* sh = s->shared;
  struct timespec ts;
  if (!gpuhal__shared_lock(sh)) {
    gpuhal__sleep_ns(nap.deadline_ns - gpuhal_now_ns()); /* unrecoverable: nap without it */
    return;
  }
  gpuhal__atomic_add_seq_cst(&sh->sleepers, 1u);
  ts.tv_sec = (time_t)(nap.deadline_ns / 1000000000);
  ts.tv_nsec = (long)(nap.deadline_ns % 1000000000);
  /* One wait: a wake, a timeout or a spurious return all send the waiter back to look. */
  if (!gpuhal__semaphore_shared_moved(s, value, seq)) {
    int rc = pthread_cond_timedwait(&sh->cond, &sh->mutex, &ts);
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&sh->mutex);
  }
  gpuhal__atomic_sub_seq_cst(&sh->sleepers, 1u);
  pthread_mutex_unlock(&sh->mutex);
}

GPUHAL__PRIVATE void gpuhal__semaphore_shared_destroy(gpuhal_semaphore_t* s) {
  gpuhal_driver_t* driver = s->driver;
  gpuhal__shared_mapping_t m;
  gpuhal__shared_kept_t* kept = NULL;
  memset(&m, 0, sizeof(m));
  m.sh = s->shared;
  m.fd = s->shared_fd;
  m.cu_device = s->shared_cu_device;
  m.context = s->shared_context;
  m.put_off = s->shared_put_off;
  m.kept = s->shared_kept;
  /* A GPU write that may still land keeps the mapping until the driver goes, when no
   * device is left to write it (as a slab word is kept), in the record reserved for that. */
  if (s->word_unsafe && m.kept) {
    kept = m.kept;
    m.kept = NULL;
    kept->m = m;
  }
  gpuhal__mutex_lock(&driver->shared_mutex);
  gpuhal__list_remove(&s->shared_link);
  if (kept) {
    kept->next = driver->shared_kept;
    driver->shared_kept = kept;
  }
  gpuhal__mutex_unlock(&driver->shared_mutex);
  if (!kept) gpuhal__shared_mapping_drop(driver, &m);
  s->shared = NULL;
  s->shared_fd = -1;
  s->shared_put_off = NULL;
  s->shared_kept = NULL;
}

/* ---- export and import ---- */

/* Under the lock: `s` takes the shared file of `m` as its word (m is emptied). */
static void gpuhal__semaphore_share_locked(gpuhal_semaphore_t* s, gpuhal__shared_mapping_t* m) {
  s->unshared_word = s->word;
  s->shared = m->sh;
  s->shared_fd = m->fd;
  s->shared_cu_device = m->cu_device;
  s->shared_context = m->context;
  s->shared_put_off = m->put_off;
  s->shared_kept = m->kept;
  s->word_address = m->address;
  gpuhal__atomic_store(&s->word, (volatile uint64_t*)&m->sh->value);
  m->sh = NULL;
  m->fd = -1;
  m->context = NULL;
  m->put_off = NULL;
  m->kept = NULL;
  /* Another process may wait on any value: every signal writes the word, and every wait
   * goes to it (never to the host until this process's work is submitted). */
  gpuhal__atomic_store(&s->armed_until, UINT64_MAX);
  gpuhal__atomic_store(&s->armed_low, 0);
  gpuhal__atomic_store(&s->queue_signalled, 0);
}

static gpuhal_status_t gpuhal__shared_unavailable(const char* func, gpuhal_driver_t* driver) {
  if (driver->memops) return NULL;
  return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                            "%s: a shared semaphore needs stream memory operations (GPUHAL_FEATURE_SEMAPHORE_MEMOPS): "
                            "GPU work of each process waits on and writes its value in shared memory, and this driver "
                            "has them off (GPUHAL_SEMAPHORE_MEMOPS=0, or a device without 64-bit stream memory "
                            "operations, mapped pinned memory or unified addressing)",
                            func);
}

GPUHAL_API gpuhal_status_t gpuhal_semaphore_export(gpuhal_semaphore_t* semaphore, int* out_fd) {
  gpuhal_driver_t* driver;
  gpuhal__shared_mapping_t m;
  gpuhal_status_t status = NULL;
  int fd, busy = 0, shared;
  uint64_t value;
  GPUHAL__CHECK_ARG(out_fd != NULL, "out_fd", "must not be NULL");
  *out_fd = -1;
  GPUHAL__CHECK_OBJECT(semaphore, GPUHAL__MAGIC_SEMAPHORE);
  driver = semaphore->driver;
  GPUHAL__RETURN_IF_ERROR(gpuhal__shared_unavailable(__func__, driver));
  memset(&m, 0, sizeof(m));
  m.fd = -1;
  gpuhal__mutex_lock(&semaphore->mutex);
  shared = semaphore->shared != NULL;
  value = gpuhal__atomic_load(&semaphore->value);
  gpuhal__mutex_unlock(&semaphore->mutex);
  if (!shared && value > (uint64_t)INT64_MAX)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_semaphore_export: argument 'semaphore' is at %llu, above 2^63 - 1, the most a "
                              "shared semaphore may reach",
                              (unsigned long long)value);
  if (!shared) {
    GPUHAL__RETURN_IF_ERROR(gpuhal__shared_file_create(&m.fd));
    status = gpuhal__shared_file_map(__func__, m.fd, &m.sh);
    if (!status && gpuhal__shared_sync_init(m.sh) != 0) {
      munmap((void*)m.sh, GPUHAL__SHARED_FILE_BYTES);
      m.sh = NULL;
      status = gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                                  "gpuhal_semaphore_export: no process-shared robust mutex or condition variable here");
    }
    if (!status) {
      m.sh->layout = (uint32_t)sizeof(*m.sh);
      status = gpuhal__shared_register(driver, __func__, &m);
    }
    if (status) {
      gpuhal__shared_mapping_drop(driver, &m);
      return status;
    }
    gpuhal__mutex_lock(&semaphore->mutex);
    /* Work in flight signals through the word it was issued with, or waits on it: moving
     * the word now would hide those values from the other processes. */
    busy = !semaphore->shared &&
           (!gpuhal__list_empty(&semaphore->timepoints) || gpuhal__atomic_load(&semaphore->signalling) != 0 ||
            (semaphore->word && !semaphore->failure && semaphore->armed_until > semaphore->value));
    if (!semaphore->shared && !busy) {
      gpuhal__semaphore_shared_t* sh = m.sh;
      sh->value = sh->high = semaphore->value;
      gpuhal__atomic_store(&sh->magic, GPUHAL__SHARED_MAGIC);
      gpuhal__semaphore_share_locked(semaphore, &m);
      if (semaphore->failure) { /* told there as a later failure would be */
        gpuhal__semaphore_shared_publish_failure(semaphore, semaphore->failure);
        gpuhal__atomic_store(&sh->value, semaphore->value + (1ull << 62));
      }
    }
    gpuhal__mutex_unlock(&semaphore->mutex);
    if (m.sh) { /* busy, or another thread shared it first */
      gpuhal__shared_mapping_drop(driver, &m);
      if (busy)
        return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                                  "gpuhal_semaphore_export: queue work that signals or waits on the semaphore is in "
                                  "flight; export it before such work is submitted, or once that work is done");
    } else {
      /* Without the watch it is still shared: its own looks and waits see the others. */
      status = gpuhal__shared_watch_add(semaphore);
      if (status) return status;
    }
  }
  fd = fcntl(semaphore->shared_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0)
    return gpuhal_status_make(GPUHAL_STATUS_RESOURCE_EXHAUSTED, "gpuhal_semaphore_export: no file descriptor: %s",
                              strerror(errno));
  *out_fd = fd;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_semaphore_import(gpuhal_driver_t* driver, int fd,
                                                   gpuhal_semaphore_t** out_semaphore) {
  gpuhal__shared_mapping_t m;
  gpuhal_semaphore_t* s = NULL;
  gpuhal_status_t status;
  struct stat st;
  GPUHAL__CHECK_ARG(out_semaphore != NULL, "out_semaphore", "must not be NULL");
  *out_semaphore = NULL;
  GPUHAL__CHECK_OBJECT(driver, GPUHAL__MAGIC_DRIVER);
  GPUHAL__CHECK_ARG(fd >= 0, "fd", "must be a file descriptor from gpuhal_semaphore_export");
  GPUHAL__RETURN_IF_ERROR(gpuhal__shared_unavailable(__func__, driver));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != (off_t)GPUHAL__SHARED_FILE_BYTES)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_semaphore_import: argument 'fd' (%d) must be a file descriptor from "
                              "gpuhal_semaphore_export (it is not a file of %u bytes)",
                              fd, GPUHAL__SHARED_FILE_BYTES);
  memset(&m, 0, sizeof(m));
  m.fd = -1;
  GPUHAL__RETURN_IF_ERROR(gpuhal__shared_file_map(__func__, fd, &m.sh));
  if (gpuhal__atomic_load(&m.sh->magic) != GPUHAL__SHARED_MAGIC || m.sh->layout != (uint32_t)sizeof(*m.sh)) {
    gpuhal__shared_mapping_drop(driver, &m);
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_semaphore_import: argument 'fd' (%d) must be a file descriptor from "
                              "gpuhal_semaphore_export of this build of gpuhal (its header does not match)",
                              fd);
  }
  m.fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  status = m.fd < 0 ? gpuhal_status_make(GPUHAL_STATUS_RESOURCE_EXHAUSTED,
                                         "gpuhal_semaphore_import: no file descriptor: %s", strerror(errno))
                    : gpuhal__shared_register(driver, __func__, &m);
  if (!status) status = gpuhal_semaphore_create(driver, 0, &s);
  if (status) {
    gpuhal__shared_mapping_drop(driver, &m);
    return status;
  }
  gpuhal__mutex_lock(&s->mutex);
  gpuhal__semaphore_share_locked(s, &m);
  gpuhal__semaphore_shared_pull_locked(s); /* its value (or failure) now */
  gpuhal__mutex_unlock(&s->mutex);
  status = gpuhal__shared_watch_add(s);
  if (status) {
    gpuhal_semaphore_release(s);
    return status;
  }
  *out_semaphore = s;
  return NULL;
}
