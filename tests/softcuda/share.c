/* share.c - memory shared with the device or with other processes: host registration
 * (cuMemHostRegister), legacy IPC of cuMemAlloc memory (cuIpc*MemHandle) and the virtual
 * memory management API (cuMemCreate .. cuMemGetAllocationGranularity) with POSIX file
 * descriptors. Part of softcuda.c.
 *
 * Model
 *   - A registration is an allocation record over the caller's bytes [p, p+bytesize)
 *     (type SC_MEM_HOST, origin REGISTERED, the register flags, whose DEVICEMAP and PORTABLE
 *     are cuMemHostAlloc's values): the checks treat it as pinned memory of the registering
 *     context, and its device address is its host address. It may be any mapped memory,
 *     a MAP_SHARED mapping that another process maps too: stream memory waits re-read the
 *     memory at every poll (memop.c), so the other process's stores meet them.
 *   - VMM: a physical allocation (cuMemCreate) is a memfd of its size, named
 *     "softcuda-vmm-dev<N>", held by a handle object (SC_K_MEMHANDLE). A reservation is a
 *     PROT_NONE mapping; cuMemMap maps the memfd over part of one (MAP_SHARED|MAP_FIXED,
 *     still PROT_NONE); cuMemSetAccess makes it readable and writable and enters it in the
 *     allocation table (origin VMM, owned by no context), which is what makes it device
 *     memory for copies, fills, kernels and memops; before that every range check refuses
 *     it. Export dup()s the memfd; import dup()s the descriptor it is given (the caller
 *     keeps its own) after checking that it is softcuda's. The kernel keeps a memfd's pages
 *     while any process holds a descriptor or a mapping of it.
 *   - Legacy IPC: cuMemAlloc memory is a range of one memfd of the process (the arena,
 *     memory.c). A handle names the exporting process, the arena's descriptor and inode,
 *     and the range; the opener (another process only) maps that range of
 *     /proc/<pid>/fd/<fd>, which needs the exporter alive and ptrace-readable by it (same
 *     user).
 *   - What waits for the context's work (a stream parked on a memory wait included), as on
 *     an H200 (driver 580): cuMemHostUnregister and the last cuIpcCloseMemHandle, like
 *     cuMemFree. cuMemHostRegister and every VMM call do not. So that work still queued on
 *     VMM memory that is unmapped or loses its access cannot fault the process (on a GPU
 *     that is the application's bug), such memory leaves the allocation table at once
 *     (later calls refuse it) but its addresses stay readable and writable (once unmapped,
 *     as zero-filled scratch pages) until they are mapped again or the reservation is freed.
 *   - Error codes are an H200's where softcuda checks what the driver checks (probed, see
 *     conformance/conf_share.c); the rest is softcuda's strictness, counted as violations.
 */

/* The VMM granularity, minimum and recommended: a GPU's 2 MiB. */
#define SC_VMM_GRANULARITY ((size_t)2 << 20)

typedef struct sc_vmm_mem {
  sc_obj h;
  int fd;
  size_t size;
  int dev;
  unsigned handle_types; /* CUmemAllocationHandleType bits it may be exported as */
  int imported;          /* cuMemImportFromShareableHandle: not counted in the device's memory */
} sc_vmm_mem;

typedef struct sc_vmm_map {
  struct sc_vmm_map* next;
  uintptr_t base;
  size_t size, offset;
  sc_vmm_mem* mem; /* referenced */
  sc_alloc* alloc; /* in the allocation table while a device has access, else NULL */
  int was_open;    /* a device had access once: work may still use it, it stays writable */
} sc_vmm_map;

typedef struct sc_resv {
  uintptr_t base;
  size_t size;
  sc_vmm_map* maps;
} sc_resv;

/* ---- host registration ------------------------------------------------------------------ */

/* The last record starting before end, or NULL (records do not overlap, so it is the one
 * that overlaps [.., end) if any does). */
static sc_alloc* sc_alloc_last_before(uintptr_t end) {
  size_t i = sc_alloc_lower_bound(end - 1);
  return i ? sc.allocs[i - 1] : NULL;
}

static sc_resv* sc_resv_overlapping(uintptr_t p, size_t n) {
  size_t i;
  for (i = 0; i < sc.nresvs; ++i)
    if (p < sc.resvs[i]->base + sc.resvs[i]->size && sc.resvs[i]->base < p + n) return sc.resvs[i];
  return NULL;
}

/* Whether every page of [first, first+len) is mapped (first page-aligned): mincore fails
 * with ENOMEM where one is not (and, unlike msync, valgrind does not take it for a read). */
static int sc_range_mapped(uintptr_t first, size_t len) {
  unsigned char vec[1024];
  size_t page = sc_page_size(), step = sizeof vec * page;
  while (len) {
    size_t n = len < step ? len : step;
    if (mincore((void*)first, n, vec) != 0 && errno == ENOMEM) return 0;
    first += n;
    len -= n;
  }
  return 1;
}

/* [p, p+n) must be mapped host memory that no record or reservation overlaps. */
static CUresult sc_register_check_locked(uintptr_t p, size_t n) {
  size_t page = sc_page_size();
  uintptr_t first = p & ~(uintptr_t)(page - 1);
  sc_alloc* a = sc_alloc_last_before(p + n);
  if (a && a->base + a->size > p) {
    if (a->origin == SC_ORIGIN_REGISTERED) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    /* pinned memory is INVALID_VALUE too, as on an H200 */
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                        "cuMemHostRegister(0x%llx, %zu): overlaps %s #%llu", (unsigned long long)p, n,
                        sc_alloc_kind_name(a), a->id);
  }
  if (sc_resv_overlapping(p, n))
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                        "cuMemHostRegister(0x%llx, %zu): overlaps a cuMemAddressReserve range", (unsigned long long)p,
                        n);
  if (!sc_range_mapped(first, p + n - first))
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                        "cuMemHostRegister(0x%llx, %zu): the range is not mapped memory", (unsigned long long)p, n);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
                         CU_MEMHOSTREGISTER_READ_ONLY;
  uintptr_t b = (uintptr_t)p;
  sc_ctx* c;
  CUresult r;
  SC_ENTER(cuMemHostRegister);
  if (!p || bytesize == 0 || b + bytesize < b || (Flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
  /* no I/O memory; CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED reads 0 */
  if (Flags & (CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)) return CUDA_ERROR_NOT_SUPPORTED;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS) r = sc_register_check_locked(b, bytesize); /* no wait for work: as an H200 */
  if (r == CUDA_SUCCESS) {
    sc_alloc* a = (sc_alloc*)sc_xcalloc(1, sizeof(sc_alloc));
    a->base = b;
    a->size = bytesize;
    a->type = SC_MEM_HOST;
    a->origin = SC_ORIGIN_REGISTERED;
    a->flags = Flags;
    a->ctx = c;
    a->dev = c->dev;
    sc_alloc_insert(a);
  }
  SC_UNLOCK();
  return r;
}

static sc_alloc* sc_registration_at(uintptr_t p) {
  sc_alloc* a = sc_alloc_find(p);
  return a && a->base == p && a->origin == SC_ORIGIN_REGISTERED ? a : NULL;
}

CUresult CUDAAPI sc_cuMemHostUnregister(void* p) {
  sc_ctx* c;
  sc_alloc* a = NULL;
  CUresult r;
  SC_ENTER(cuMemHostUnregister);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS && !(a = sc_registration_at((uintptr_t)p)))
    /* inside a registered range but not its start: CUDA_ERROR_INVALID_VALUE on an H200 */
    r = sc_violation(SOFTCUDA_VIOLATION_RANGE,
                     sc_alloc_find((uintptr_t)p) ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                     "cuMemHostUnregister(%p): not the start of a registered range", p);
  if (r == CUDA_SUCCESS) {
    sc_ctx_sync_locked(a->ctx); /* as an H200 (and cuMemFree); sc.mu is released meanwhile */
    a = sc_registration_at((uintptr_t)p);
    if (a)
      sc_alloc_release_locked(a);
    else
      r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED; /* another thread unregistered it meanwhile */
  }
  SC_UNLOCK();
  return r;
}

static int sc_alloc_is_live(const sc_alloc* a) {
  size_t i;
  for (i = 0; i < sc.nallocs; ++i)
    if (sc.allocs[i] == a) return 1;
  return 0;
}

/* ---- legacy IPC ------------------------------------------------------------------------- */

/* What a CUipcMemHandle of softcuda holds (the rest of the 64 bytes is zero). */
typedef struct sc_ipc_handle {
  char magic[8];   /* SC_IPC_MAGIC */
  int32_t pid;     /* the exporting process */
  int32_t fd;      /* its arena descriptor */
  uint64_t ino;    /* the arena's inode, to tell a reused descriptor number */
  uint64_t offset; /* the allocation's range in the arena */
  uint64_t size;
  uint64_t id; /* the allocation's id in the exporting process */
  int32_t dev;
} sc_ipc_handle;
typedef char sc_ipc_handle_fits[sizeof(sc_ipc_handle) <= sizeof(CUipcMemHandle) ? 1 : -1];
static const char sc_ipc_magic[8] = "scIPCv1";

CUresult CUDAAPI sc_cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  sc_ctx* c;
  sc_alloc* a;
  CUresult r;
  SC_ENTER(cuIpcGetMemHandle);
  if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  r = sc_current_ctx(&c);
  a = sc_alloc_find((uintptr_t)dptr);
  /* any address inside names the whole allocation, as on an H200 (the opener gets its start) */
  if (r == CUDA_SUCCESS && (!a || a->type != SC_MEM_DEVICE || a->origin != SC_ORIGIN_ALLOC))
    r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                     "cuIpcGetMemHandle(0x%llx): not in a live cuMemAlloc allocation", (unsigned long long)dptr);
  if (r == CUDA_SUCCESS && !a->map_size) r = CUDA_ERROR_NOT_SUPPORTED; /* no memfd: malloc'ed */
  if (r == CUDA_SUCCESS) {
    sc_ipc_handle h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, sc_ipc_magic, sizeof h.magic);
    h.pid = (int32_t)getpid();
    h.fd = sc.arena_fd;
    h.ino = sc.arena_ino;
    h.offset = a->arena_off;
    h.size = a->size;
    h.id = a->id;
    h.dev = a->dev;
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle->reserved, &h, sizeof h);
  }
  SC_UNLOCK();
  return r;
}

/* The open of handle h in context c, if any (not one being closed). */
static sc_alloc* sc_ipc_find_open(const sc_ctx* c, const sc_ipc_handle* h) {
  size_t i;
  for (i = 0; i < sc.nallocs; ++i) {
    sc_alloc* a = sc.allocs[i];
    if (a->origin == SC_ORIGIN_IPC && a->ctx == c && a->ipc_refs > 0 && a->ipc_pid == h->pid && a->ipc_id == h->id)
      return a;
  }
  return NULL;
}

/* Maps the exporter's range; *len gets the mapping's length. */
static CUresult sc_ipc_map(const sc_ipc_handle* h, void** out, size_t* len) {
  char path[64];
  struct stat st;
  int fd;
  void* p;
  *len = sc_round_up((size_t)h->size, sc_page_size());
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
  fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_HANDLE,
                        "cuIpcOpenMemHandle: cannot open %s (%s): has the exporting process exited?", path,
                        strerror(errno));
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != h->ino || (uint64_t)st.st_size < h->offset + *len) {
    close(fd);
    return sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_HANDLE,
                        "cuIpcOpenMemHandle: %s is no longer the exporting process's device memory", path);
  }
  p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)h->offset);
  close(fd); /* the mapping keeps the file */
  if (p == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  *out = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  sc_ipc_handle h;
  sc_ctx* c;
  sc_alloc* a;
  CUresult r;
  SC_ENTER(cuIpcOpenMemHandle);
  memcpy(&h, handle.reserved, sizeof h);
  /* "Must be specified as CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS": an H200 refuses 0 too */
  if (!pdptr || Flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) return CUDA_ERROR_INVALID_VALUE;
  if (memcmp(h.magic, sc_ipc_magic, sizeof h.magic) != 0 || h.size == 0)
    return sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_VALUE,
                        "cuIpcOpenMemHandle: not a handle from cuIpcGetMemHandle");
  SC_LOCK();
  r = sc_current_ctx(&c);
  if (r == CUDA_SUCCESS && h.pid == (int32_t)getpid()) /* as CUDA: "invalid device context" */
    r = sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_CONTEXT,
                     "cuIpcOpenMemHandle: the handle was exported by this process");
  if (r == CUDA_SUCCESS && (a = sc_ipc_find_open(c, &h)) != NULL) { /* opened here already: counted */
    a->ipc_refs++;
    *pdptr = (CUdeviceptr)a->base;
  } else if (r == CUDA_SUCCESS) {
    void* p = NULL;
    size_t len = 0;
    r = sc_ipc_map(&h, &p, &len);
    if (r == CUDA_SUCCESS) {
      a = (sc_alloc*)sc_xcalloc(1, sizeof(sc_alloc));
      a->base = (uintptr_t)p;
      a->size = (size_t)h.size;
      a->map_size = len;
      a->type = SC_MEM_DEVICE;
      a->origin = SC_ORIGIN_IPC;
      a->ctx = c;
      a->dev = c->dev;
      a->ipc_refs = 1;
      a->ipc_pid = h.pid;
      a->ipc_id = h.id;
      sc_alloc_insert(a);
      *pdptr = (CUdeviceptr)a->base;
    }
  }
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuIpcCloseMemHandle(CUdeviceptr dptr) {
  sc_ctx* c;
  sc_alloc* a;
  CUresult r;
  SC_ENTER(cuIpcCloseMemHandle);
  SC_LOCK();
  r = sc_current_ctx(&c);
  a = sc_alloc_find((uintptr_t)dptr);
  if (r == CUDA_SUCCESS && (!a || a->base != (uintptr_t)dptr || a->origin != SC_ORIGIN_IPC || a->ipc_refs <= 0))
    r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                     "cuIpcCloseMemHandle(0x%llx): not an address cuIpcOpenMemHandle returned",
                     (unsigned long long)dptr);
  else if (r == CUDA_SUCCESS && a->ctx != c)
    r = sc_violation(SOFTCUDA_VIOLATION_CONTEXT, CUDA_ERROR_INVALID_CONTEXT,
                     "cuIpcCloseMemHandle(0x%llx): opened in another context", (unsigned long long)dptr);
  if (r == CUDA_SUCCESS && --a->ipc_refs == 0) {
    /* the last close unmaps it once the context's work is done, as cuMemFree frees (a
     * record at 0 is closing: nothing finds it, sc.mu is released while waiting) */
    sc_ctx_sync_locked(c);
    if (sc_alloc_is_live(a)) sc_alloc_release_locked(a); /* (unless its context died meanwhile) */
  }
  SC_UNLOCK();
  return r;
}

/* ---- VMM: physical allocations ------------------------------------------------------------ */

static void sc_vmm_mem_free(sc_obj* o) {
  sc_vmm_mem* m = (sc_vmm_mem*)o;
  close(m->fd);
  if (!m->imported) sc_dev_unreserve(m->dev, m->size);
  free(m);
}

static sc_vmm_mem* sc_vmm_mem_new_locked(int fd, size_t size, int dev, unsigned handle_types, int imported) {
  sc_vmm_mem* m = (sc_vmm_mem*)sc_xcalloc(1, sizeof(sc_vmm_mem));
  sc_obj_init(&m->h, SC_K_MEMHANDLE, NULL, sc_vmm_mem_free);
  m->fd = fd;
  m->size = size;
  m->dev = dev;
  m->handle_types = handle_types;
  m->imported = imported;
  sc_obj_register(&m->h);
  return m;
}

static sc_vmm_mem* sc_vmm_mem_lookup(CUmemGenericAllocationHandle h) {
  return (sc_vmm_mem*)sc_obj_lookup((uint64_t)h, SC_K_MEMHANDLE);
}

/* What cuMemCreate accepts: pinned memory of a device, shareable as a POSIX file
 * descriptor or not at all. The codes are an H200's, but for unknown handle types (it
 * accepts them) and host locations (it has host VMM; softcuda has none). */
static CUresult sc_vmm_check_prop(const CUmemAllocationProp* prop) {
  const unsigned known = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 |
                         CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC;
  unsigned types = (unsigned)prop->requestedHandleTypes;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (types & ~known)
    return sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                        "cuMemCreate: unknown requestedHandleTypes bits 0x%x", types & ~known);
  if (prop->win32HandleMetaData) return CUDA_ERROR_INVALID_VALUE; /* "required to be zero" off Windows */
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST || prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
    return CUDA_ERROR_NOT_SUPPORTED; /* HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED reads 0 */
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.id < 0 || prop->location.id >= sc.ndev) return CUDA_ERROR_INVALID_DEVICE;
  if (types & CU_MEM_HANDLE_TYPE_FABRIC) return CUDA_ERROR_NOT_PERMITTED; /* no IMEX channel */
  if (types & (CU_MEM_HANDLE_TYPE_WIN32 | CU_MEM_HANDLE_TYPE_WIN32_KMT)) return CUDA_ERROR_INVALID_VALUE;
  /* usage (a tile pool, ...) is a hint here, but such memory is not exportable: as an H200 */
  if (prop->allocFlags.usage != 0 && types != 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS; /* compression is a hint too: none here */
}

/* The same for every property, as on an H200 (2 MiB, minimum and recommended), which checks
 * only the pointers and the option. */
CUresult CUDAAPI sc_cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                  CUmemAllocationGranularity_flags option) {
  SC_ENTER(cuMemGetAllocationGranularity);
  if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  *granularity = SC_VMM_GRANULARITY;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                unsigned long long flags) {
  char name[32];
  int fd;
  CUresult r;
  SC_ENTER(cuMemCreate);
  if (!handle || !prop || flags != 0 || size == 0 || size % SC_VMM_GRANULARITY != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((r = sc_vmm_check_prop(prop)) != CUDA_SUCCESS) return r;
  snprintf(name, sizeof name, "softcuda-vmm-dev%d", prop->location.id);
  SC_LOCK();
  r = sc_dev_reserve(prop->location.id, size);
  if (r == CUDA_SUCCESS) {
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
      if (fd >= 0) close(fd);
      sc_dev_unreserve(prop->location.id, size);
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      sc_vmm_mem* m = sc_vmm_mem_new_locked(fd, size, prop->location.id, (unsigned)prop->requestedHandleTypes, 0);
      *handle = (CUmemGenericAllocationHandle)SC_HANDLE(m);
    }
  }
  SC_UNLOCK();
  return r;
}

/* The handle goes; the memory stays while mappings (or, across processes, descriptors or
 * mappings elsewhere) hold it. */
CUresult CUDAAPI sc_cuMemRelease(CUmemGenericAllocationHandle handle) {
  sc_vmm_mem* m;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuMemRelease);
  SC_LOCK();
  m = sc_vmm_mem_lookup(handle);
  if (!m)
    r = sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_VALUE,
                     "cuMemRelease: invalid or released handle 0x%llx", (unsigned long long)handle);
  else
    sc_obj_unregister(&m->h);
  SC_UNLOCK();
  return r;
}

CUresult CUDAAPI sc_cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                                 CUmemAllocationHandleType handleType, unsigned long long flags) {
  sc_vmm_mem* m;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuMemExportToShareableHandle);
  if (!shareableHandle || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  /* a type the allocation was not created for: INVALID_VALUE, as on an H200 */
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  m = sc_vmm_mem_lookup(handle);
  if (!m) {
    r = sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_VALUE,
                     "cuMemExportToShareableHandle: invalid or released handle 0x%llx", (unsigned long long)handle);
  } else if (!(m->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    r = sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_VALUE,
                     "cuMemExportToShareableHandle: handle 0x%llx was created without "
                     "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in requestedHandleTypes",
                     (unsigned long long)handle);
  } else {
    int fd = dup(m->fd); /* the caller's to close (or to send: SCM_RIGHTS) */
    if (fd < 0)
      r = CUDA_ERROR_OPERATING_SYSTEM;
    else
      *(int*)shareableHandle = fd;
  }
  SC_UNLOCK();
  return r;
}

/* The device of a descriptor of softcuda's VMM memory ("/memfd:softcuda-vmm-dev<N>"), or -1. */
static int sc_vmm_fd_device(int fd) {
  static const char prefix[] = "/memfd:softcuda-vmm-dev";
  char path[64], target[256];
  ssize_t n;
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return -1;
  target[n] = 0;
  if (strncmp(target, prefix, sizeof prefix - 1) != 0) return -1;
  return atoi(target + sizeof prefix - 1);
}

CUresult CUDAAPI sc_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                   CUmemAllocationHandleType shHandleType) {
  int fd = (int)(intptr_t)osHandle, dev, mine;
  struct stat st;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuMemImportFromShareableHandle);
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return shHandleType == CU_MEM_HANDLE_TYPE_WIN32 || shHandleType == CU_MEM_HANDLE_TYPE_WIN32_KMT ||
                   shHandleType == CU_MEM_HANDLE_TYPE_FABRIC
               ? CUDA_ERROR_NOT_SUPPORTED
               : CUDA_ERROR_INVALID_VALUE;
  dev = fd >= 0 ? sc_vmm_fd_device(fd) : -1;
  /* not an export (a pipe, -1): CUDA_ERROR_UNKNOWN, as on an H200 */
  if (dev < 0 || fstat(fd, &st) != 0 || st.st_size <= 0 || (size_t)st.st_size % SC_VMM_GRANULARITY != 0)
    return sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_UNKNOWN,
                        "cuMemImportFromShareableHandle: descriptor %d is not one cuMemExportToShareableHandle made",
                        fd);
  if (dev >= sc.ndev) return CUDA_ERROR_INVALID_DEVICE; /* this process sees fewer devices */
  mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);                 /* the caller keeps (and closes) its own */
  if (mine < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  SC_LOCK();
  *handle = (CUmemGenericAllocationHandle)SC_HANDLE(
      sc_vmm_mem_new_locked(mine, (size_t)st.st_size, dev, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1));
  SC_UNLOCK();
  return r;
}

/* ---- VMM: address reservations and mappings ------------------------------------------------- */

static sc_resv* sc_resv_containing(uintptr_t p, size_t n) {
  size_t i;
  for (i = 0; i < sc.nresvs; ++i) {
    sc_resv* v = sc.resvs[i];
    if (p >= v->base && n <= v->size && p - v->base <= v->size - n) return v;
  }
  return NULL;
}

/* A PROT_NONE range of size bytes aligned to align (a power of two), at addr if that is
 * free and aligned (a hint, as in CUDA); NULL when there is no room. */
static void* sc_reserve_range(size_t size, size_t align, uintptr_t addr) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  uintptr_t b, aligned;
  void* p;
  if (addr && addr % align == 0) {
    p = mmap((void*)addr, size, PROT_NONE, flags, -1, 0);
    if (p != MAP_FAILED && (uintptr_t)p == addr) return p;
    if (p != MAP_FAILED) munmap(p, size);
  }
  if (size > SIZE_MAX - align) return NULL;
  p = mmap(NULL, size + align, PROT_NONE, flags, -1, 0);
  if (p == MAP_FAILED) return NULL;
  b = (uintptr_t)p;
  aligned = (b + align - 1) & ~(uintptr_t)(align - 1);
  if (aligned > b) munmap(p, aligned - b);
  if (b + size + align > aligned + size) munmap((void*)(aligned + size), b + size + align - (aligned + size));
  return (void*)aligned;
}

CUresult CUDAAPI sc_cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                        unsigned long long flags) {
  size_t page = sc_page_size(), align;
  void* p;
  SC_ENTER(cuMemAddressReserve);
  /* the size a multiple of the granularity, not only of the page: as on an H200 */
  if (!ptr || size == 0 || size % SC_VMM_GRANULARITY != 0 || addr % page != 0 || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
  align = alignment > SC_VMM_GRANULARITY ? alignment : SC_VMM_GRANULARITY;
  p = sc_reserve_range(size, align, (uintptr_t)addr);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  SC_LOCK();
  if (sc.nresvs == sc.cap_resvs) {
    size_t cap = sc.cap_resvs ? sc.cap_resvs * 2 : 16;
    sc_resv** n = (sc_resv**)realloc(sc.resvs, cap * sizeof(sc_resv*));
    if (!n) abort();
    sc.resvs = n;
    sc.cap_resvs = cap;
  }
  sc.resvs[sc.nresvs] = (sc_resv*)sc_xcalloc(1, sizeof(sc_resv));
  sc.resvs[sc.nresvs]->base = (uintptr_t)p;
  sc.resvs[sc.nresvs]->size = size;
  sc.nresvs++;
  *ptr = (CUdeviceptr)(uintptr_t)p;
  SC_UNLOCK();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sc_cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  size_t i;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuMemAddressFree);
  SC_LOCK();
  for (i = 0; i < sc.nresvs; ++i)
    if (sc.resvs[i]->base == (uintptr_t)ptr && sc.resvs[i]->size == size) break;
  if (i == sc.nresvs) {
    r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                     "cuMemAddressFree(0x%llx, %zu): not a reservation (pointer and size as cuMemAddressReserve gave)",
                     (unsigned long long)ptr, size);
  } else if (sc.resvs[i]->maps) {
    r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                     "cuMemAddressFree(0x%llx, %zu): still mapped: cuMemUnmap first", (unsigned long long)ptr, size);
  } else {
    munmap((void*)sc.resvs[i]->base, sc.resvs[i]->size);
    free(sc.resvs[i]);
    sc.resvs[i] = sc.resvs[--sc.nresvs];
  }
  SC_UNLOCK();
  return r;
}

/* Whether the mappings of v cover [p, p+n) exactly, each one whole; counts them. */
static int sc_maps_cover(const sc_resv* v, uintptr_t p, size_t n, int* count) {
  const sc_vmm_map* m;
  size_t covered = 0;
  *count = 0;
  for (m = v->maps; m; m = m->next) {
    if (m->base + m->size <= p || m->base >= p + n) continue;
    if (m->base < p || m->base + m->size > p + n) return 0; /* a part of a mapping */
    covered += m->size;
    ++*count;
  }
  return *count > 0 && covered == n;
}

CUresult CUDAAPI sc_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                             unsigned long long flags) {
  const size_t g = SC_VMM_GRANULARITY;
  uintptr_t p = (uintptr_t)ptr;
  sc_vmm_mem* mem;
  sc_resv* v;
  sc_vmm_map* m;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuMemMap);
  if (flags != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  /* an H200 (driver 580) answers NOT_SUPPORTED for an offset (it has to be 0), a misaligned
   * address or size, a range past the allocation or outside a reservation */
  if (offset != 0 || p % g || size % g) return CUDA_ERROR_NOT_SUPPORTED;
  SC_LOCK();
  mem = sc_vmm_mem_lookup(handle);
  v = sc_resv_containing(p, size);
  if (!mem) {
    r = sc_violation(SOFTCUDA_VIOLATION_HANDLE, CUDA_ERROR_INVALID_VALUE, "cuMemMap: invalid or released handle 0x%llx",
                     (unsigned long long)handle);
  } else if (offset > mem->size || size > mem->size - offset) {
    r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_NOT_SUPPORTED,
                     "cuMemMap: offset %zu + size %zu is beyond the allocation's %zu bytes", offset, size, mem->size);
  } else if (!v) {
    r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_NOT_SUPPORTED,
                     "cuMemMap(0x%llx, %zu): not inside one cuMemAddressReserve range", (unsigned long long)p, size);
  } else {
    for (m = v->maps; m; m = m->next)
      if (m->base < p + size && p < m->base + m->size) break;
    if (m)
      r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                       "cuMemMap(0x%llx, %zu): overlaps the mapping at 0x%llx", (unsigned long long)p, size,
                       (unsigned long long)m->base);
    else if (mmap((void*)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, mem->fd, (off_t)offset) == MAP_FAILED)
      r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (r == CUDA_SUCCESS) {
    m = (sc_vmm_map*)sc_xcalloc(1, sizeof(sc_vmm_map));
    m->base = p;
    m->size = size;
    m->offset = offset;
    m->mem = mem;
    sc_ref(&mem->h);
    m->next = v->maps;
    v->maps = m;
  }
  SC_UNLOCK();
  return r;
}

/* Takes m out of the allocation table: no device has access any more (its pages stay
 * writable for work queued before, which a GPU would run into a fault). */
static void sc_vmm_map_revoke_locked(sc_vmm_map* m) {
  if (!m->alloc) return;
  sc_alloc_remove(m->alloc);
  free(m->alloc);
  m->alloc = NULL;
}

CUresult CUDAAPI sc_cuMemUnmap(CUdeviceptr ptr, size_t size) {
  uintptr_t p = (uintptr_t)ptr;
  sc_resv* v;
  int count = 0;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuMemUnmap);
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  SC_LOCK();
  v = sc_resv_containing(p, size);
  if (!v || !sc_maps_cover(v, p, size, &count)) {
    r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                     "cuMemUnmap(0x%llx, %zu): not exactly whole cuMemMap mappings", (unsigned long long)p, size);
  } else { /* no wait for work: as an H200 */
    sc_vmm_map** link = &v->maps;
    while (*link) {
      sc_vmm_map* m = *link;
      if (m->base >= p && m->base + m->size <= p + size) {
        *link = m->next;
        sc_vmm_map_revoke_locked(m);
        /* back to the reservation: the memfd's pages go (scratch ones where work may write) */
        mmap((void*)m->base, m->size, m->was_open ? PROT_READ | PROT_WRITE : PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        sc_unref(&m->mem->h);
        free(m);
      } else {
        link = &m->next;
      }
    }
  }
  SC_UNLOCK();
  return r;
}

static CUresult sc_vmm_check_desc(const CUmemAccessDesc* d) {
  if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (d->location.id < 0 || d->location.id >= sc.ndev) return CUDA_ERROR_INVALID_DEVICE;
  if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
      d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

/* Gives m the access mask; a nonzero one makes it device memory (PROT_READ is not enforced:
 * softcuda maps it writable too). */
static void sc_vmm_map_set_access_locked(sc_vmm_map* m, unsigned mask) {
  if (!mask) {
    sc_vmm_map_revoke_locked(m);
    return;
  }
  if (!m->alloc) {
    sc_alloc* a = (sc_alloc*)sc_xcalloc(1, sizeof(sc_alloc));
    if (!m->was_open) mprotect((void*)m->base, m->size, PROT_READ | PROT_WRITE);
    m->was_open = 1;
    a->base = m->base;
    a->size = m->size;
    a->type = SC_MEM_DEVICE;
    a->origin = SC_ORIGIN_VMM;
    a->dev = m->mem->dev;
    a->flags = m->mem->handle_types;
    sc_alloc_insert(a);
    m->alloc = a;
  }
  m->alloc->access_devs = mask;
}

CUresult CUDAAPI sc_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  uintptr_t p = (uintptr_t)ptr;
  sc_resv* v;
  sc_vmm_map* m;
  size_t i;
  int nmaps = 0;
  CUresult r = CUDA_SUCCESS;
  SC_ENTER(cuMemSetAccess);
  if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  for (i = 0; i < count; ++i)
    if ((r = sc_vmm_check_desc(&desc[i])) != CUDA_SUCCESS) return r;
  SC_LOCK();
  v = sc_resv_containing(p, size);
  if (!v || !sc_maps_cover(v, p, size, &nmaps)) {
    r = sc_violation(SOFTCUDA_VIOLATION_RANGE, CUDA_ERROR_INVALID_VALUE,
                     "cuMemSetAccess(0x%llx, %zu): not a fully mapped range of whole cuMemMap mappings",
                     (unsigned long long)p, size);
  } else { /* taking access away waits for no work either: as an H200 */
    for (m = v->maps; m; m = m->next) {
      unsigned mask;
      if (m->base < p || m->base + m->size > p + size) continue;
      mask = m->alloc ? m->alloc->access_devs : 0;
      for (i = 0; i < count; ++i) {
        unsigned bit = 1u << desc[i].location.id;
        mask = desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ? mask & ~bit : mask | bit;
      }
      sc_vmm_map_set_access_locked(m, mask);
    }
  }
  SC_UNLOCK();
  return r;
}

/* ---- leak report ------------------------------------------------------------------------ */

static size_t sc_share_report_locked(FILE* f) {
  size_t i, n = 0;
  for (i = 0; i < sc.nresvs; ++i) {
    const sc_resv* v = sc.resvs[i];
    const sc_vmm_map* m;
    if (f)
      fprintf(f, "softcuda: leak: address reservation (cuMemAddressReserve) of %zu bytes at 0x%llx\n", v->size,
              (unsigned long long)v->base);
    n++;
    for (m = v->maps; m; m = m->next) {
      if (f)
        fprintf(f,
                "softcuda: leak: mapping (cuMemMap) of %zu bytes at 0x%llx, offset %zu of memory handle %p "
                "(device %d, access mask 0x%x)\n",
                m->size, (unsigned long long)m->base, m->offset, (void*)(uintptr_t)SC_HANDLE(m->mem), m->mem->dev,
                m->alloc ? m->alloc->access_devs : 0u);
      n++;
    }
  }
  return n;
}
