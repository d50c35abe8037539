/* core.c - globals, strictness, handles, errors, cuInit, devices, contexts, the query
 * API, fault injection and the leak report. Part of softcuda.c (one translation unit). */

sc_global sc = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static __thread sc_tls* sc_tls_self;

static const char* const sc_fn_names[SC_FN_COUNT] = {
#define SC_FN_NAME(name, dlsym_name, pinned, params) #name,
#define SC_NCCL_FN_NAME(name, params) #name,
    GPUHAL_CUDA_REQUIRED_SYMBOLS(SC_FN_NAME) GPUHAL_CUDA_OPTIONAL_SYMBOLS(SC_FN_NAME) "cuGetProcAddress",
    GPUHAL_NCCL_SYMBOLS(SC_NCCL_FN_NAME)};

/* ---- small helpers ------------------------------------------------------------------ */

static int64_t sc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void* sc_xcalloc(size_t n, size_t size) {
  void* p = calloc(n ? n : 1, size ? size : 1);
  if (!p) {
    fprintf(stderr, "softcuda: out of host memory\n");
    abort();
  }
  return p;
}

static char* sc_strdup(const char* s) {
  size_t n = strlen(s) + 1;
  char* d = (char*)sc_xcalloc(n, 1);
  memcpy(d, s, n);
  return d;
}

static sc_tls* sc_thread(void) {
  if (!sc_tls_self) {
    sc_tls* t = (sc_tls*)sc_xcalloc(1, sizeof(sc_tls));
    SC_LOCK();
    t->next = sc.threads;
    sc.threads = t;
    SC_UNLOCK();
    sc_tls_self = t;
  }
  return sc_tls_self;
}

static size_t sc_parse_size(const char* s, size_t dflt) {
  char* end = NULL;
  double v;
  if (!s || !*s) return dflt;
  v = strtod(s, &end);
  if (end == s || v <= 0) return dflt;
  switch (*end) {
    case 'k':
    case 'K': v *= 1024.0; break;
    case 'm':
    case 'M': v *= 1024.0 * 1024.0; break;
    case 'g':
    case 'G': v *= 1024.0 * 1024.0 * 1024.0; break;
    default: break;
  }
  return (size_t)v;
}

static int sc_parse_faults_locked(const char* spec);

/* Reads the environment once (under sc.mu). */
static void sc_configure_locked(void) {
  const char* e;
  int i;
  size_t mem;
  if (sc.config_done) return;
  sc.config_done = 1;
  e = getenv("SOFTCUDA_DEVICES");
  sc.ndev = e && *e ? atoi(e) : 2;
  if (sc.ndev < 0) sc.ndev = 0;
  if (sc.ndev > SC_MAX_DEVICES) sc.ndev = SC_MAX_DEVICES;
  mem = sc_parse_size(getenv("SOFTCUDA_DEVICE_MEMORY"), (size_t)1 << 30);
  for (i = 0; i < SC_MAX_DEVICES; ++i) {
    sc.devs[i].ordinal = i;
    sc.devs[i].total = mem;
  }
  e = getenv("SOFTCUDA_JIT_DELAY_MS");
  sc.jit_delay_ms = e && *e ? atoi(e) : 0;
  e = getenv("SOFTCUDA_LEAKS");
  sc.leaks_fatal = e && strcmp(e, "fatal") == 0;
  e = getenv("SOFTCUDA_NO_MEMOPS");
  sc.no_memops = e && *e && strcmp(e, "0") != 0;
  e = getenv("SOFTCUDA_POOL_INTERNAL_REUSE");
  sc.pool_internal_reuse = e && *e && strcmp(e, "0") != 0;
  e = getenv("SOFTCUDA_STREAM_ROOM");
  sc.stream_room = e && *e ? atoi(e) : 32;
  e = getenv("SOFTCUDA_DRIVER_VERSION");
  sc.driver_version = e && *e ? atoi(e) : 13000;
  e = getenv("SOFTCUDA_VERBOSE");
  sc.verbose = e && *e && strcmp(e, "0") != 0;
  e = getenv("SOFTCUDA_FAULTS");
  if (e && *e && sc_parse_faults_locked(e) != 0) fprintf(stderr, "softcuda: ignoring bad SOFTCUDA_FAULTS '%s'\n", e);
}

/* last_violation has its own lock: violations are raised with and without sc.mu held */
static pthread_mutex_t sc_vmu = PTHREAD_MUTEX_INITIALIZER;

static CUresult sc_violation(int kind, CUresult r, const char* fmt, ...) {
  va_list ap;
  char buf[512];
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  __atomic_add_fetch(&sc.violations[kind], 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&sc.violations[0], 1, __ATOMIC_RELAXED);
  /* last_violation is written under its own small lock: sc.mu may be held already */
  pthread_mutex_lock(&sc_vmu);
  memcpy(sc.last_violation, buf, sizeof buf);
  pthread_mutex_unlock(&sc_vmu);
  if (sc.verbose) fprintf(stderr, "softcuda: violation: %s\n", buf);
  return r;
}

static CUresult sc_enter(int fn, const char* name) {
  sc_tls* t = sc_thread();
  int i;
  CUresult r = CUDA_SUCCESS;
  __atomic_add_fetch(&sc.calls[fn], 1, __ATOMIC_RELAXED);
  if (t->in_callback)
    return sc_violation(SOFTCUDA_VIOLATION_CALLBACK, CUDA_ERROR_NOT_PERMITTED,
                        "%s called from inside a host-function callback", name);
  SC_LOCK();
  sc_configure_locked();
  for (i = 0; i < sc.nfaults; ++i) {
    sc_fault* f = &sc.faults[i];
    if (f->fn != fn) continue;
    f->count++;
    if (f->nth == 0 || f->count == f->nth) {
      r = f->result;
      break;
    }
  }
  if (r == CUDA_SUCCESS && !sc.initialized && fn != SC_FN_cuInit && fn != SC_FN_cuDriverGetVersion &&
      fn != SC_FN_cuGetErrorName && fn != SC_FN_cuGetErrorString && fn != SC_FN_cuGetProcAddress)
    r = CUDA_ERROR_NOT_INITIALIZED;
  SC_UNLOCK();
  if (r != CUDA_SUCCESS && sc.verbose)
    fprintf(stderr, "softcuda: %s -> %d (injected or not initialised)\n", name, (int)r);
  return r;
}

/* ---- handles ------------------------------------------------------------------------ */

#define SC_HANDLE_TAG ((uint64_t)0x5c << 56)

static void sc_obj_init(sc_obj* o, sc_kind kind, sc_ctx* owner, void (*destroy)(sc_obj*)) {
  o->kind = kind;
  o->refs = 1;
  o->id = 0;
  o->owner = owner;
  o->destroy = destroy;
}

static uint64_t sc_handle_of(const sc_obj* o) { return o->id ? SC_HANDLE_TAG | ((uint64_t)o->kind << 48) | o->id : 0; }

static uint64_t sc_obj_register(sc_obj* o) {
  if (sc.nobjs + 1 >= sc.cap_objs) {
    uint64_t cap = sc.cap_objs ? sc.cap_objs * 2 : 1024;
    sc_obj** n = (sc_obj**)realloc(sc.objs, cap * sizeof(sc_obj*));
    if (!n) abort();
    memset(n + sc.cap_objs, 0, (cap - sc.cap_objs) * sizeof(sc_obj*));
    sc.objs = n;
    sc.cap_objs = cap;
  }
  o->id = ++sc.nobjs; /* ids start at 1 and are never reused */
  sc.objs[o->id] = o;
  return sc_handle_of(o);
}

static void sc_obj_unregister(sc_obj* o) {
  if (!o->id) return;
  sc.objs[o->id] = NULL;
  o->id = 0;
  sc_unref(o);
}

static sc_obj* sc_obj_lookup(uint64_t handle, sc_kind kind) {
  uint64_t id;
  sc_obj* o;
  if ((handle & ((uint64_t)0xff << 56)) != SC_HANDLE_TAG) return NULL;
  if (((handle >> 48) & 0xff) != (uint64_t)kind) return NULL;
  id = handle & (((uint64_t)1 << 48) - 1);
  if (id == 0 || id > sc.nobjs) return NULL;
  o = sc.objs[id];
  return o && o->kind == kind ? o : NULL;
}

static void sc_ref(sc_obj* o) { o->refs++; }

static void sc_unref(sc_obj* o) {
  if (--o->refs == 0 && o->destroy) o->destroy(o);
}

static const char* sc_kind_name(sc_kind k) {
  static const char* const names[SC_K_COUNT] = {"?",          "context",       "stream", "event", "module",
                                                "function",   "pool",          "link",   "graph", "graph node",
                                                "graph exec", "memory handle", "library"};
  return (int)k < SC_K_COUNT ? names[k] : "?";
}

/* A handle that is not live: destroyed (id in range, kind matches, slot empty) or never
 * ours. Counted as a handle violation. */
static CUresult sc_bad_handle(const char* what, const void* h) {
  return sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_HANDLE, "invalid or destroyed %s handle %p", what,
                      h);
}

/* ---- errors ------------------------------------------------------------------------- */

typedef struct sc_err {
  int value;
  const char* name;
} sc_err;
static const sc_err sc_errors[] = {
#include "sc_errors.inc"
};

static const char* sc_error_name(int v) {
  size_t i;
  for (i = 0; i < sizeof sc_errors / sizeof sc_errors[0]; ++i)
    if (sc_errors[i].value == v) return sc_errors[i].name;
  return NULL;
}

CUresult CUDAAPI sc_cuGetErrorName(CUresult error, const char** pStr) {
  const char* n;
  SC_ENTER(cuGetErrorName);
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  n = sc_error_name((int)error);
  *pStr = n;
  return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI sc_cuGetErrorString(CUresult error, const char** pStr) {
  static const sc_err strings[] = {
      {0, "no error"},
      {1, "invalid argument"},
      {2, "out of memory"},
      {3, "initialization error"},
      {100, "no CUDA-capable device is detected"},
      {101, "invalid device ordinal"},
      {200, "device kernel image is invalid"},
      {201, "invalid device context"},
      {209, "no kernel image is available for execution on the device"},
      {218, "a PTX JIT compilation failed"},
      {400, "invalid resource handle"},
      {500, "named symbol not found"},
      {600, "device not ready"},
      {700, "an illegal memory access was encountered"},
      {709, "context is destroyed"},
      {800, "operation not permitted"},
      {801, "operation not supported"},
      {999, "unknown error"},
  };
  static char derived[sizeof sc_errors / sizeof sc_errors[0]][96];
  size_t i;
  SC_ENTER(cuGetErrorString);
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  for (i = 0; i < sizeof strings / sizeof strings[0]; ++i)
    if (strings[i].value == (int)error) {
      *pStr = strings[i].name;
      return CUDA_SUCCESS;
    }
  for (i = 0; i < sizeof sc_errors / sizeof sc_errors[0]; ++i)
    if (sc_errors[i].value == (int)error) {
      /* "CUDA_ERROR_NOT_MAPPED" -> "not mapped"; written once under sc.mu */
      SC_LOCK();
      if (!derived[i][0]) {
        const char* s = sc_errors[i].name + (strncmp(sc_errors[i].name, "CUDA_ERROR_", 11) == 0 ? 11 : 0);
        size_t k;
        for (k = 0; s[k] && k + 1 < sizeof derived[i]; ++k)
          derived[i][k] = s[k] == '_' ? ' ' : (char)(s[k] >= 'A' && s[k] <= 'Z' ? s[k] - 'A' + 'a' : s[k]);
      }
      SC_UNLOCK();
      *pStr = derived[i];
      return CUDA_SUCCESS;
    }
  *pStr = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

/* ---- init, version, devices --------------------------------------------------------- */

CUresult CUDAAPI sc_cuInit(unsigned int flags) {
  SC_ENTER(cuInit);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  sc.initialized = 1;
  SC_UNLOCK();
  return sc.ndev > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult CUDAAPI sc_cuDriverGetVersion(int* driverVersion) {
  SC_ENTER(cuDriverGetVersion);
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = sc.driver_version;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuDeviceGetCount(int* count) {
  SC_ENTER(cuDeviceGetCount);
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = sc.ndev;
  return CUDA_SUCCESS;
}

static int sc_valid_dev(CUdevice d) { return d >= 0 && d < sc.ndev; }

CUresult CUDAAPI sc_cuDeviceGet(CUdevice* device, int ordinal) {
  SC_ENTER(cuDeviceGet);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!sc_valid_dev(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuDeviceGetName(char* name, int len, CUdevice dev) {
  SC_ENTER(cuDeviceGetName);
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!sc_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "softcuda CPU device %d", dev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  SC_ENTER(cuDeviceGetUuid);
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (!sc_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  memcpy(uuid->bytes, "softcuda-dev-\0\0\0", 16);
  uuid->bytes[14] = (char)(dev >> 8);
  uuid->bytes[15] = (char)dev;
  return CUDA_SUCCESS;
}

#define SC_CC_MAJOR 9
#define SC_CC_MINOR 0
#define SC_SM_COUNT 8
#define SC_MAX_SHARED_OPTIN 232448

CUresult CUDAAPI sc_cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  int v = 0;
  SC_ENTER(cuDeviceGetAttribute);
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (!sc_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if ((int)attrib <= 0 || (int)attrib >= (int)CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1755000; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = SC_SM_COUNT; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = 0x10 + dev; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 52428800; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 2; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = SC_CC_MAJOR; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = SC_CC_MINOR; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: v = SC_CC_MAJOR >= 9; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = SC_MAX_SHARED_OPTIN; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: /* what CUDA says to test for IPC: memory IPC here */
      SC_LOCK();
      v = sc_arena_ready_locked();
      SC_UNLOCK();
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: v = !sc.no_memops; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: v = !sc.no_memops; break;
    default: v = 0; break;
  }
  *pi = v;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  SC_ENTER(cuDeviceTotalMem);
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!sc_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = sc.devs[dev].total;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  SC_ENTER(cuDeviceGetPCIBusId);
  if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!sc_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", 0x10 + dev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  SC_ENTER(cuDeviceCanAccessPeer);
  if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
  if (!sc_valid_dev(dev) || !sc_valid_dev(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
  *canAccessPeer = dev != peerDev;
  return CUDA_SUCCESS;
}

/* ---- contexts ----------------------------------------------------------------------- */

static void sc_ctx_free(sc_obj* o) {
  sc_ctx* c = (sc_ctx*)o;
  free(c->streams);
  free(c);
}

static sc_ctx* sc_ctx_new_locked(int dev, unsigned flags, int primary) {
  sc_ctx* c = (sc_ctx*)sc_xcalloc(1, sizeof(sc_ctx));
  sc_obj_init(&c->h, SC_K_CTX, NULL, sc_ctx_free);
  c->dev = dev;
  c->flags = flags;
  c->primary = primary;
  c->sticky = CUDA_SUCCESS;
  sc_obj_register(&c->h);
  return c;
}

static CUresult sc_lookup_ctx(CUcontext h, sc_ctx** out) {
  sc_obj* o = sc_obj_lookup((uint64_t)(uintptr_t)h, SC_K_CTX);
  *out = (sc_ctx*)o; /* NULL on failure: written on every path */
  if (!o) {
    if (((uint64_t)(uintptr_t)h & ((uint64_t)0xff << 56)) == SC_HANDLE_TAG &&
        (((uint64_t)(uintptr_t)h >> 48) & 0xff) == SC_K_CTX)
      return sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_CONTEXT_IS_DESTROYED, "context %p is destroyed",
                          (void*)h);
    return sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_CONTEXT, "invalid context handle %p", (void*)h);
  }
  *out = (sc_ctx*)o;
  return CUDA_SUCCESS;
}

/* Under sc.mu. */
static CUresult sc_current_ctx(sc_ctx** out) {
  sc_tls* t = sc_thread();
  sc_obj* o;
  *out = NULL; /* written on every path */
  if (t->depth == 0)
    return sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_CONTEXT, "no current context on this thread");
  o = sc_obj_lookup(t->stack[t->depth - 1], SC_K_CTX);
  if (!o)
    return sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_CONTEXT_IS_DESTROYED,
                        "the current context of this thread is destroyed");
  *out = (sc_ctx*)o;
  return ((sc_ctx*)o)->sticky;
}

static void sc_count_switch(uint64_t before, uint64_t after) {
  if (before != after) sc_thread()->ctx_switches++;
}

static uint64_t sc_top(sc_tls* t) { return t->depth ? t->stack[t->depth - 1] : 0; }

CUresult CUDAAPI sc_cuCtxGetCurrent(CUcontext* pctx) {
  sc_tls* t;
  SC_ENTER(cuCtxGetCurrent);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  t = sc_thread();
  *pctx = (CUcontext)(uintptr_t)sc_top(t);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuCtxSetCurrent(CUcontext ctx) {
  sc_tls* t;
  sc_ctx* c;
  uint64_t before;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuCtxSetCurrent);
  t = sc_thread();
  before = sc_top(t);
  SC_LOCK();
  if (ctx == NULL) {
    if (t->depth) t->depth--;
  } else if ((r = sc_lookup_ctx(ctx, &c)) == CUDA_SUCCESS) {
    if (t->depth == 0) t->depth = 1;
    t->stack[t->depth - 1] = (uint64_t)(uintptr_t)ctx;
  }
  SC_UNLOCK();
  sc_count_switch(before, sc_top(t));
  return r;
}

CUresult CUDAAPI sc_cuCtxPushCurrent(CUcontext ctx) {
  sc_tls* t;
  sc_ctx* c;
  uint64_t before;
  CUresult r;
  SC_ENTER(cuCtxPushCurrent);
  t = sc_thread();
  before = sc_top(t);
  SC_LOCK();
  r = ctx ? sc_lookup_ctx(ctx, &c) : CUDA_ERROR_INVALID_CONTEXT;
  if (r == CUDA_SUCCESS) {
    if (t->depth == SC_MAX_STACK)
      r = CUDA_ERROR_OUT_OF_MEMORY;
    else
      t->stack[t->depth++] = (uint64_t)(uintptr_t)ctx;
  }
  SC_UNLOCK();
  sc_count_switch(before, sc_top(t));
  return r;
}

CUresult CUDAAPI sc_cuCtxPopCurrent(CUcontext* pctx) {
  sc_tls* t;
  uint64_t before;
  SC_ENTER(cuCtxPopCurrent);
  t = sc_thread();
  if (t->depth == 0)
    return sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_CONTEXT,
                        "cuCtxPopCurrent with an empty context stack");
  before = sc_top(t);
  t->depth--;
  if (pctx) *pctx = (CUcontext)(uintptr_t)before;
  sc_count_switch(before, sc_top(t));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuCtxGetDevice(CUdevice* device) {
  sc_ctx* c;
  CUresult r;
  SC_ENTER(cuCtxGetDevice);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) *device = c->dev;
  SC_UNLOCK();
  return r;
}

/* As on an H200: priorities 0 (least urgent) to -5 (most). Needs a current context. */
CUresult CUDAAPI sc_cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  sc_ctx* c;
  CUresult r;
  SC_ENTER(cuCtxGetStreamPriorityRange);
  SC_LOCK();
  r = sc_current_ctx(&c);
  SC_UNLOCK();
  if (r != CUDA_SUCCESS) return r;
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

/* Waits for every stream of c (under sc.mu). */
static void sc_ctx_sync_locked(sc_ctx* c) {
  int i;
  for (i = 0; i < c->nstreams; ++i) {
    sc_stream* s = c->streams[i];
    if (s->is_null) {
      /* the legacy stream: a marker op waits for every blocking stream, too */
      continue;
    }
    sc_wait_stream_seq(s, s->enq_seq, 0);
  }
  if (c->null_stream) sc_wait_stream_seq(c->null_stream, c->null_stream->enq_seq, 0);
}

/* A stream or graph executable is about to be created in c (under sc.mu). As on an H200
 * (tools/probe/live_probe.c): the context's store for them starts with room for 32, grows by
 * a step when more are alive at once, keeps its size when they die, and a step waits for
 * every stream of the context, one parked on a value wait too (with sc.mu released). */
#define SC_ROOM_STEP 43
static void sc_room_take_locked(sc_ctx* c) {
  if (c->room == 0) c->room = sc.stream_room;
  if (++c->room_live <= c->room || sc.stream_room <= 0) return;
  c->room += SC_ROOM_STEP;
  sc_ctx_sync_locked(c);
}
static void sc_room_give_locked(sc_ctx* c) {
  if (c->room_live > 0) c->room_live--;
}

CUresult CUDAAPI sc_cuCtxSynchronize(void) {
  sc_ctx* c;
  CUresult r;
  SC_ENTER(cuCtxSynchronize);
  SC_UNSAFE_CALL();
  sc_thread()->round_trips++;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) {
    sc_ctx_sync_locked(c);
    r = c->sticky;
    sc_pools_release(c->dev);
  }
  SC_UNLOCK();
  return r;
}

static size_t sc_report_ctx_leaks_locked(sc_ctx* c, FILE* f);
static void sc_streams_stop_locked(sc_ctx* c);
static void sc_free_ctx_allocs_locked(sc_ctx* c);

/* Tears a context down (under sc.mu): waits for its work, stops its workers, reports and
 * frees what it still owns, invalidates its handle. */
static void sc_ctx_teardown_locked(sc_ctx* c) {
  size_t n;
  uint64_t i;
  sc_ctx_wait_others_locked(c);
  sc_memop_teardown_locked(c); /* a wait that can never be met must not hang the sync */
  sc_ctx_sync_locked(c);
  if (c->sticky == CUDA_SUCCESS) {
    n = sc_report_ctx_leaks_locked(c, stderr);
    sc.leaks += n;
  }
  /* the objects it owned die with it */
  for (i = 1; i <= sc.nobjs; ++i) {
    sc_obj* o = sc.objs[i];
    if (o && o->owner == c && o->kind != SC_K_FUNC) {
      if (o->kind == SC_K_STREAM) ((sc_stream*)o)->destroyed = 1;
      if (o->kind == SC_K_MODULE) sc_module_unload_globals_locked((sc_module*)o);
      sc_obj_unregister(o);
    }
  }
  sc_streams_stop_locked(c);
  sc_free_ctx_allocs_locked(c);
  c->dead = 1;
  sc_obj_unregister(&c->h);
}

CUresult CUDAAPI sc_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  sc_device* d;
  SC_ENTER(cuDevicePrimaryCtxRetain);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!sc_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  SC_LOCK();
  d = &sc.devs[dev];
  if (d->primary_refs == 0) d->primary = sc_ctx_new_locked(dev, 0, 1);
  d->primary_refs++;
  *pctx = (CUcontext)(uintptr_t)SC_HANDLE(d->primary);
  SC_UNLOCK();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuDevicePrimaryCtxRelease(CUdevice dev) {
  sc_device* d;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuDevicePrimaryCtxRelease);
  if (!sc_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  SC_LOCK();
  d = &sc.devs[dev];
  if (d->primary_refs == 0) {
    r = sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_CONTEXT,
                     "cuDevicePrimaryCtxRelease(%d) without a matching retain", dev);
  } else if (--d->primary_refs == 0) {
    sc_ctx* c = d->primary;
    d->primary = NULL;
    sc_ctx_teardown_locked(c);
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  sc_ctx* c;
  sc_tls* t;
  uint64_t before;
  SC_ENTER(cuCtxCreate);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(unsigned)CU_CTX_FLAGS_MASK) return CUDA_ERROR_INVALID_VALUE;
  if (!sc_valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
  t = sc_thread();
  if (t->depth == SC_MAX_STACK) return CUDA_ERROR_OUT_OF_MEMORY;
  before = sc_top(t);
  SC_LOCK();
  c = sc_ctx_new_locked(dev, flags, 0);
  *pctx = (CUcontext)(uintptr_t)SC_HANDLE(c);
  t->stack[t->depth++] = SC_HANDLE(c);
  SC_UNLOCK();
  sc_count_switch(before, sc_top(t));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuCtxDestroy(CUcontext ctx) {
  sc_ctx* c;
  sc_tls* t;
  CUresult r;
  SC_ENTER(cuCtxDestroy);
  t = sc_thread();
  SC_LOCK();
  r = sc_lookup_ctx(ctx, &c);
  if (r == CUDA_SUCCESS && c->primary) r = CUDA_ERROR_INVALID_CONTEXT;
  if (r == CUDA_SUCCESS) {
    /* popped from the calling thread's stack when it is current there */
    if (t->depth && t->stack[t->depth - 1] == (uint64_t)(uintptr_t)ctx) t->depth--;
    sc_ctx_teardown_locked(c);
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int flags) {
  sc_ctx *c, *p;
  CUresult r;
  int i;
  SC_ENTER(cuCtxEnablePeerAccess);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) r = sc_lookup_ctx(peerContext, &p);
  if (r == CUDA_SUCCESS && p->dev == c->dev) r = CUDA_ERROR_INVALID_DEVICE;
  for (i = 0; r == CUDA_SUCCESS && i < c->npeers; ++i)
    if (c->peers[i] == (uint64_t)(uintptr_t)peerContext) r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  if (r == CUDA_SUCCESS) {
    if (c->npeers == (int)(sizeof c->peers / sizeof c->peers[0]))
      r = CUDA_ERROR_TOO_MANY_PEERS;
    else
      c->peers[c->npeers++] = (uint64_t)(uintptr_t)peerContext;
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuCtxDisablePeerAccess(CUcontext peerContext) {
  sc_ctx *c, *p;
  CUresult r;
  int i;
  SC_ENTER(cuCtxDisablePeerAccess);
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) r = sc_lookup_ctx(peerContext, &p);
  if (r == CUDA_SUCCESS) {
    r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    for (i = 0; i < c->npeers; ++i)
      if (c->peers[i] == (uint64_t)(uintptr_t)peerContext) {
        c->peers[i] = c->peers[--c->npeers];
        r = CUDA_SUCCESS;
        break;
      }
  }
  SC_UNLOCK();
  return r;
}

/* ---- fault injection ---------------------------------------------------------------- */

static int sc_fn_index(const char* name, size_t len) {
  int i;
  for (i = 0; i < SC_FN_COUNT; ++i)
    if (strlen(sc_fn_names[i]) == len && strncmp(sc_fn_names[i], name, len) == 0) return i;
  return -1;
}

static int sc_parse_faults_locked(const char* spec) {
  sc_fault parsed[64];
  int n = 0;
  const char* p = spec;
  while (*p) {
    const char *at, *eq, *end;
    char buf[96];
    size_t k;
    sc_fault f;
    while (*p == ',' || *p == ' ') p++;
    if (!*p) break;
    end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    at = memchr(p, '@', (size_t)(end - p));
    eq = at ? memchr(at, '=', (size_t)(end - at)) : NULL;
    if (!at || !eq || n == 64) return -1;
    f.fn = sc_fn_index(p, (size_t)(at - p));
    if (f.fn < 0) return -1;
    if (at[1] == '*' && at + 2 == eq) {
      f.nth = 0;
    } else {
      char* e2;
      f.nth = strtol(at + 1, &e2, 10);
      if (e2 != eq || f.nth <= 0) return -1;
    }
    k = (size_t)(end - eq - 1);
    if (k == 0 || k >= sizeof buf) return -1;
    memcpy(buf, eq + 1, k);
    buf[k] = 0;
    if (buf[0] >= '0' && buf[0] <= '9') {
      f.result = (CUresult)atoi(buf);
    } else {
      size_t i;
      f.result = (CUresult)-1;
      for (i = 0; i < sizeof sc_errors / sizeof sc_errors[0]; ++i)
        if (strcmp(sc_errors[i].name, buf) == 0) f.result = (CUresult)sc_errors[i].value;
      if ((int)f.result == -1) return -1;
    }
    f.count = 0;
    parsed[n++] = f;
    p = end;
  }
  if (sc.nfaults + n > 64) return -1;
  memcpy(sc.faults + sc.nfaults, parsed, (size_t)n * sizeof(sc_fault));
  sc.nfaults += n;
  return 0;
}

SOFTCUDA_API int softcuda_set_faults(const char* spec) {
  int r;
  if (!spec) return -1;
  SC_LOCK();
  sc_configure_locked();
  r = sc_parse_faults_locked(spec);
  SC_UNLOCK();
  return r;
}

/* The fault point of an entry point softcuda does not implement (softnccl's nccl*): the
 * call is counted, and the matching rule's result (or 0) comes back. No cuInit or
 * callback rule: those are CUDA's, and the caller applies its own. */
SOFTCUDA_API int softcuda_fault_point(const char* entry_name) {
  int fn, i, r = 0;
  if (!entry_name) return 0;
  fn = sc_fn_index(entry_name, strlen(entry_name));
  if (fn < 0) return 0;
  __atomic_add_fetch(&sc.calls[fn], 1, __ATOMIC_RELAXED);
  SC_LOCK();
  sc_configure_locked();
  for (i = 0; i < sc.nfaults; ++i) {
    sc_fault* f = &sc.faults[i];
    if (f->fn != fn) continue;
    f->count++;
    if (f->nth == 0 || f->count == f->nth) {
      r = (int)f->result;
      break;
    }
  }
  SC_UNLOCK();
  if (r != 0 && sc.verbose) fprintf(stderr, "softcuda: %s -> %d (injected)\n", entry_name, r);
  return r;
}

SOFTCUDA_API void softcuda_clear_faults(void) {
  SC_LOCK();
  sc.nfaults = 0;
  SC_UNLOCK();
}

/* ---- query API ---------------------------------------------------------------------- */

SOFTCUDA_API unsigned long long softcuda_query_calls(const char* entry_name) {
  unsigned long long n = 0;
  int i;
  if (!entry_name) {
    for (i = 0; i < SC_FN_COUNT; ++i) n += __atomic_load_n(&sc.calls[i], __ATOMIC_RELAXED);
    return n;
  }
  i = sc_fn_index(entry_name, strlen(entry_name));
  return i < 0 ? 0 : __atomic_load_n(&sc.calls[i], __ATOMIC_RELAXED);
}

static unsigned long long sc_sum_threads(size_t offset, int scope) {
  unsigned long long n = 0;
  sc_tls* t;
  if (scope == SOFTCUDA_THIS_THREAD) return *(unsigned long long*)((char*)sc_thread() + offset);
  SC_LOCK();
  for (t = sc.threads; t; t = t->next) n += __atomic_load_n((unsigned long long*)((char*)t + offset), __ATOMIC_RELAXED);
  SC_UNLOCK();
  return n;
}

SOFTCUDA_API unsigned long long softcuda_query_context_switches(int scope) {
  return sc_sum_threads(offsetof(sc_tls, ctx_switches), scope);
}

SOFTCUDA_API unsigned long long softcuda_query_host_round_trips(int scope) {
  return sc_sum_threads(offsetof(sc_tls, round_trips), scope);
}

SOFTCUDA_API unsigned long long softcuda_query_violations(int kind) {
  if (kind < 0 || kind > 4) return 0;
  return __atomic_load_n(&sc.violations[kind], __ATOMIC_RELAXED);
}

SOFTCUDA_API const char* softcuda_query_last_violation(void) {
  static __thread char copy[512];
  pthread_mutex_lock(&sc_vmu);
  memcpy(copy, sc.last_violation, sizeof copy);
  pthread_mutex_unlock(&sc_vmu);
  copy[sizeof copy - 1] = 0;
  return copy;
}

SOFTCUDA_API unsigned long long softcuda_query_leaks(void) {
  unsigned long long n;
  SC_LOCK();
  n = sc.leaks;
  SC_UNLOCK();
  return n;
}

SOFTCUDA_API int softcuda_query_parked_peak(int reset) {
  int n;
  SC_LOCK();
  n = sc.parked_peak;
  if (reset) sc.parked_peak = 0;
  SC_UNLOCK();
  return n;
}

SOFTCUDA_API int softcuda_query_device_count(void) {
  int n;
  SC_LOCK();
  sc_configure_locked();
  n = sc.ndev;
  SC_UNLOCK();
  return n;
}

SOFTCUDA_API void softcuda_reset_counters(void) {
  sc_tls* t;
  int i;
  SC_LOCK();
  for (i = 0; i < SC_FN_COUNT; ++i) __atomic_store_n(&sc.calls[i], 0, __ATOMIC_RELAXED);
  for (i = 0; i < 5; ++i) __atomic_store_n(&sc.violations[i], 0, __ATOMIC_RELAXED);
  for (t = sc.threads; t; t = t->next) {
    __atomic_store_n(&t->ctx_switches, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->round_trips, 0, __ATOMIC_RELAXED);
  }
  SC_UNLOCK();
  pthread_mutex_lock(&sc_vmu);
  sc.last_violation[0] = 0;
  pthread_mutex_unlock(&sc_vmu);
}

/* ---- leak report -------------------------------------------------------------------- */

static const char* sc_mem_type_name(sc_mem_type t) {
  switch (t) {
    case SC_MEM_DEVICE: return "device allocation";
    case SC_MEM_HOST: return "pinned host allocation";
    case SC_MEM_MANAGED: return "managed allocation";
    case SC_MEM_POOL: return "pool allocation";
  }
  return "allocation";
}

static const char* sc_alloc_kind_name(const sc_alloc* a) {
  switch (a->origin) {
    case SC_ORIGIN_REGISTERED: return "host registration (cuMemHostRegister)";
    case SC_ORIGIN_IPC: return "IPC mapping (cuIpcOpenMemHandle)";
    case SC_ORIGIN_MODULE: return "module variable";
    case SC_ORIGIN_VMM:
    case SC_ORIGIN_ALLOC: break;
  }
  return sc_mem_type_name(a->type);
}

/* Lists what c still owns (or, for c == NULL, everything alive). Under sc.mu. */
static size_t sc_report_locked(sc_ctx* c, FILE* f, int all) {
  size_t n = 0, i;
  uint64_t k;
  for (i = 0; i < sc.nallocs; ++i) {
    sc_alloc* a = sc.allocs[i];
    if (!all && a->ctx != c) continue;
    if (a->type == SC_MEM_POOL && !all) continue;
    if (a->origin == SC_ORIGIN_VMM) continue;    /* listed with its reservation below */
    if (a->origin == SC_ORIGIN_MODULE) continue; /* its module is listed */
    if (f)
      fprintf(f, "softcuda: leak: %s #%llu of %zu bytes at 0x%llx (device %d)\n", sc_alloc_kind_name(a), a->id, a->size,
              (unsigned long long)a->base, a->dev);
    n++;
  }
  if (all) n += sc_share_report_locked(f); /* VMM reservations and mappings: no context owns them */
  for (k = 1; k <= sc.nobjs; ++k) {
    sc_obj* o = sc.objs[k];
    if (!o || o->kind == SC_K_FUNC || o->kind == SC_K_GRAPH_NODE) continue;
    if (!all && o->owner != c) continue;
    if (o->kind == SC_K_STREAM && ((sc_stream*)o)->is_null) continue;
    if (o->kind == SC_K_POOL && ((sc_pool*)o)->is_default) continue;
    if (o->kind == SC_K_CTX && !all) continue;
    if (o->kind == SC_K_MODULE && ((sc_module*)o)->of_library) continue; /* its library is listed */
    if (f) fprintf(f, "softcuda: leak: %s %p\n", sc_kind_name(o->kind), (void*)(uintptr_t)sc_handle_of(o));
    n++;
  }
  return n;
}

static size_t sc_report_ctx_leaks_locked(sc_ctx* c, FILE* f) {
  size_t n = sc_report_locked(c, NULL, 0);
  if (n && f) {
    fprintf(f, "softcuda: %zu leaked object(s) at teardown of context %p (device %d):\n", n,
            (void*)(uintptr_t)SC_HANDLE(c), c->dev);
    sc_report_locked(c, f, 0);
  }
  return n;
}

SOFTCUDA_API size_t softcuda_leak_report(int print) {
  size_t n;
  SC_LOCK();
  n = sc_report_locked(NULL, print ? stderr : NULL, 1);
  SC_UNLOCK();
  return n;
}

/* At process exit (softcuda is linked -z nodelete, so this never runs at dlclose). */
__attribute__((destructor)) static void sc_at_exit(void) {
  size_t n;
  int tries = 0;
  /* Workers parked on stream memory waits take sc.mu briefly and often: retry a while
   * before concluding that a thread died holding it (then say nothing). */
  while (pthread_mutex_trylock(&sc.mu) != 0) {
    struct timespec pause = {0, 1000000};
    if (++tries > 200) return;
    nanosleep(&pause, NULL);
  }
  if (!sc.config_done) {
    pthread_mutex_unlock(&sc.mu);
    return;
  }
  n = sc_report_locked(NULL, NULL, 1);
  if (n) {
    fprintf(stderr, "softcuda: %zu leaked object(s) at exit:\n", n);
    sc_report_locked(NULL, stderr, 1);
  }
  n += sc_memop_report_parked_locked(stderr);
  n += sc.leaks;
  pthread_mutex_unlock(&sc.mu);
  if (n && sc.leaks_fatal) {
    fprintf(stderr, "softcuda: SOFTCUDA_LEAKS=fatal: failing the process for %zu leak(s)\n", n);
    fflush(NULL);
    _exit(1);
  }
}
