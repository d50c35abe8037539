/* memory_shared: device memory shared with other processes (memory.h, "sharing device memory
 * with other processes").
 *
 * Two ways, as CUDA offers them:
 *   - the virtual memory management API: the memory is a cuMemCreate allocation with a POSIX
 *     file descriptor handle, mapped at an address this process reserves; an importer
 *     imports the descriptor, reserves and maps its own range. Every process holds its own
 *     reference to the physical memory, so releases happen in any order.
 *   - legacy IPC: any cuMemAlloc memory has a 64-byte handle another process opens
 *     (cuIpcOpenMemHandle); the exporter's memory must outlive every importer's mapping.
 * Unmapping, releasing and closing go through gpuhal__device_sync_call like cuMemFree: they
 * are put off while queue work may wait on the GPU for a value. */
#include "memory.h"
#include "cuda_api.h"
#include "symbols.h"
#include "status.h"

typedef char gpuhal__ipc_handle_fits[sizeof(CUipcMemHandle) == sizeof(((gpuhal_buffer_handle_t*)0)->ipc) ? 1 : -1];

/* Whether `device` can make memory with a file descriptor handle (and gpuhal found the
 * entry points that takes), in *out_supported; a failed attribute query is an error, not a
 * "no". */
static gpuhal_status_t gpuhal__vmm_fd_supported(gpuhal_device_t* device, int* out_supported) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  int vmm = 0, fd = 0;
  *out_supported = 0;
  if (!cu->cuMemCreate || !cu->cuMemRelease || !cu->cuMemAddressReserve || !cu->cuMemAddressFree || !cu->cuMemMap ||
      !cu->cuMemUnmap || !cu->cuMemSetAccess || !cu->cuMemGetAllocationGranularity ||
      !cu->cuMemExportToShareableHandle || !cu->cuMemImportFromShareableHandle)
    return NULL;
  GPUHAL__CU_RETURN(cu, cuDeviceGetAttribute,
                    (&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device->cu_device));
  GPUHAL__CU_RETURN(cu, cuDeviceGetAttribute,
                    (&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device->cu_device));
  *out_supported = vmm && fd;
  return NULL;
}

static CUmemAllocationProp gpuhal__vmm_prop(gpuhal_device_t* device) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = (int)device->cu_device;
  return prop;
}

/* Reserves `size` bytes of addresses, maps `handle` there and lets `device` read and write
 * it; the context is current. Undoes what it did on failure. */
static gpuhal_status_t gpuhal__vmm_map_current(gpuhal_device_t* device, CUmemGenericAllocationHandle handle,
                                               uint64_t size, CUdeviceptr* out_address) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  CUmemAccessDesc access;
  CUdeviceptr address = 0;
  gpuhal_status_t status = GPUHAL__CU(cu, cuMemAddressReserve, (&address, (size_t)size, 0, 0, 0));
  if (status) return status;
  status = GPUHAL__CU(cu, cuMemMap, (address, (size_t)size, 0, handle, 0));
  if (!status) {
    memset(&access, 0, sizeof(access));
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = (int)device->cu_device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    status = GPUHAL__CU(cu, cuMemSetAccess, (address, (size_t)size, &access, 1));
    if (status) cu->cuMemUnmap(address, (size_t)size);
  }
  if (status) {
    cu->cuMemAddressFree(address, (size_t)size);
    return status;
  }
  *out_address = address;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__shared_memory_allocate_current(gpuhal_buffer_t* buffer) {
  gpuhal_device_t* device = buffer->device;
  const gpuhal__cuda_symbols_t* cu = device->cu;
  CUmemAllocationProp prop = gpuhal__vmm_prop(device);
  CUmemGenericAllocationHandle handle = 0;
  size_t granularity = 0;
  uint64_t size;
  gpuhal_status_t status;
  GPUHAL__CU_RETURN(cu, cuMemGetAllocationGranularity, (&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (granularity == 0) granularity = 1;
  size = (buffer->size + granularity - 1) / granularity * granularity;
  GPUHAL__CU_RETURN(cu, cuMemCreate, (&handle, (size_t)size, &prop, 0));
  status = gpuhal__vmm_map_current(device, handle, size, &buffer->address);
  if (status) {
    cu->cuMemRelease(handle);
    return status;
  }
  buffer->vmm_handle = (unsigned long long)handle;
  buffer->vmm_size = size;
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__shared_memory_free_current(const gpuhal__cuda_symbols_t* cu,
                                                                   const gpuhal__deferred_call_t* d) {
  gpuhal_status_t status;
  if (d->share == GPUHAL__SHARE_IPC_IMPORTED) return GPUHAL__CU(cu, cuIpcCloseMemHandle, (d->address));
  /* Unmapped, the range is given back and the reference to the memory dropped, whatever
   * failed: a failure is reported, nothing is kept. */
  status = GPUHAL__CU(cu, cuMemUnmap, (d->address, (size_t)d->vmm_size));
  if (!status) status = GPUHAL__CU(cu, cuMemAddressFree, (d->address, (size_t)d->vmm_size));
  if (!status) return GPUHAL__CU(cu, cuMemRelease, ((CUmemGenericAllocationHandle)d->vmm_handle));
  cu->cuMemRelease((CUmemGenericAllocationHandle)d->vmm_handle);
  return status;
}

GPUHAL_API gpuhal_status_t gpuhal_buffer_allocate_exportable(gpuhal_device_t* device, uint64_t size,
                                                             gpuhal_buffer_t** out_buffer) {
  gpuhal_buffer_t* buffer = NULL;
  gpuhal_status_t status;
  int vmm = 0;
  GPUHAL__CHECK_ARG(out_buffer != NULL, "out_buffer", "must not be NULL");
  *out_buffer = NULL;
  GPUHAL__CHECK_HANDLE(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG(size > 0, "size", "must be > 0");
  GPUHAL__CHECK_RANGE(size <= device->info.total_memory, "size", "exceeds the device's total memory");
  GPUHAL__RETURN_IF_ERROR(gpuhal__vmm_fd_supported(device, &vmm));
  GPUHAL__RETURN_IF_ERROR(gpuhal__buffer_new(device, GPUHAL_MEMORY_DEVICE, size, &buffer));
  if (vmm) buffer->share = GPUHAL__SHARE_VMM_OWN; /* else cuMemAlloc: legacy IPC */
  status = gpuhal__buffer_allocate_memory(buffer);
  if (status) {
    gpuhal__buffer_discard(buffer);
    return gpuhal_status_annotate(status, "allocating %llu bytes of exportable device memory on device %d",
                                  (unsigned long long)size, device->ordinal);
  }
  gpuhal__atomic_store(&buffer->state, (int32_t)GPUHAL__BUFFER_LIVE);
  *out_buffer = buffer;
  return NULL;
}

static gpuhal_status_t gpuhal__buffer_export_current(gpuhal_buffer_t* buffer, gpuhal_buffer_handle_t* out) {
  const gpuhal__cuda_symbols_t* cu = buffer->device->cu;
  if (buffer->share == GPUHAL__SHARE_VMM_OWN) {
    int fd = -1;
    GPUHAL__CU_RETURN(
        cu, cuMemExportToShareableHandle,
        (&fd, (CUmemGenericAllocationHandle)buffer->vmm_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    out->type = GPUHAL_BUFFER_HANDLE_FD;
    out->fd = fd;
    out->allocation_size = buffer->vmm_size;
  } else {
    CUipcMemHandle ipc;
    if (!cu->cuIpcGetMemHandle)
      return gpuhal_status_make(
          GPUHAL_STATUS_UNAVAILABLE,
          "gpuhal_buffer_export: the CUDA driver lacks cuIpcGetMemHandle (and this buffer was not "
          "made by gpuhal_buffer_allocate_exportable on a device with file descriptor handles)");
    GPUHAL__CU_RETURN(cu, cuIpcGetMemHandle, (&ipc, buffer->address));
    memcpy(out->ipc, ipc.reserved, sizeof(out->ipc));
    out->type = GPUHAL_BUFFER_HANDLE_IPC;
  }
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_buffer_export(gpuhal_buffer_t* buffer, gpuhal_buffer_handle_t* out_handle) {
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  GPUHAL__CHECK_ARG(out_handle != NULL, "out_handle", "must not be NULL");
  memset(out_handle, 0, sizeof(*out_handle));
  out_handle->fd = -1;
  GPUHAL__CHECK_OBJECT(buffer, GPUHAL__MAGIC_BUFFER);
  if (buffer->kind != GPUHAL_MEMORY_DEVICE || buffer->pending || buffer->share == GPUHAL__SHARE_VMM_IMPORTED ||
      buffer->share == GPUHAL__SHARE_IPC_IMPORTED || buffer->view)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "gpuhal_buffer_export: argument 'buffer' must be GPUHAL_MEMORY_DEVICE memory of "
                              "gpuhal_buffer_allocate or gpuhal_buffer_allocate_exportable (not %s)",
                              buffer->kind != GPUHAL_MEMORY_DEVICE ? "pinned or managed memory"
                              : buffer->pending                    ? "queue_alloca memory"
                              : buffer->view ? "a module's global (gpuhal_executable_global_buffer)"
                                             : "an imported buffer");
  if (gpuhal__atomic_load(&buffer->state) != GPUHAL__BUFFER_LIVE)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION, "gpuhal_buffer_export: the buffer has no memory");
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(buffer->device, &scope));
  status = gpuhal__buffer_export_current(buffer, out_handle);
  gpuhal__context_leave(buffer->device, &scope);
  if (status) {
    memset(out_handle, 0, sizeof(*out_handle));
    out_handle->fd = -1;
    return status;
  }
  out_handle->size = buffer->size;
  return NULL;
}

static gpuhal_status_t gpuhal__buffer_import_current(gpuhal_buffer_t* buffer, const gpuhal_buffer_handle_t* handle) {
  gpuhal_device_t* device = buffer->device;
  const gpuhal__cuda_symbols_t* cu = device->cu;
  if (handle->type == GPUHAL_BUFFER_HANDLE_FD) {
    CUmemGenericAllocationHandle h = 0;
    gpuhal_status_t status;
    int vmm = 0;
    GPUHAL__RETURN_IF_ERROR(gpuhal__vmm_fd_supported(device, &vmm));
    if (!vmm)
      return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                                "gpuhal_buffer_import: device %d cannot import memory from a file descriptor "
                                "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0)",
                                device->ordinal);
    GPUHAL__CU_RETURN(cu, cuMemImportFromShareableHandle,
                      (&h, (void*)(uintptr_t)handle->fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    status = gpuhal__vmm_map_current(device, h, handle->allocation_size, &buffer->address);
    if (status) {
      cu->cuMemRelease(h);
      return status;
    }
    buffer->share = GPUHAL__SHARE_VMM_IMPORTED;
    buffer->vmm_handle = (unsigned long long)h;
    buffer->vmm_size = handle->allocation_size;
  } else {
    CUipcMemHandle ipc;
    if (!cu->cuIpcOpenMemHandle || !cu->cuIpcCloseMemHandle)
      return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE, "gpuhal_buffer_import: the CUDA driver lacks legacy IPC");
    memcpy(ipc.reserved, handle->ipc, sizeof(ipc.reserved));
    GPUHAL__CU_RETURN(cu, cuIpcOpenMemHandle, (&buffer->address, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    buffer->share = GPUHAL__SHARE_IPC_IMPORTED;
  }
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_buffer_import(gpuhal_device_t* device, const gpuhal_buffer_handle_t* handle,
                                                gpuhal_buffer_t** out_buffer) {
  gpuhal_buffer_t* buffer = NULL;
  gpuhal__context_scope_t scope;
  gpuhal_status_t status;
  GPUHAL__CHECK_ARG(out_buffer != NULL, "out_buffer", "must not be NULL");
  *out_buffer = NULL;
  GPUHAL__CHECK_HANDLE(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG(handle != NULL, "handle", "must not be NULL");
  GPUHAL__CHECK_ARG(handle->type == GPUHAL_BUFFER_HANDLE_FD || handle->type == GPUHAL_BUFFER_HANDLE_IPC, "handle->type",
                    "must be GPUHAL_BUFFER_HANDLE_FD or GPUHAL_BUFFER_HANDLE_IPC");
  GPUHAL__CHECK_ARG(handle->size > 0, "handle->size", "must be > 0 (a handle from gpuhal_buffer_export)");
  GPUHAL__CHECK_ARG(handle->type != GPUHAL_BUFFER_HANDLE_FD || handle->fd >= 0, "handle->fd",
                    "must be the file descriptor of a GPUHAL_BUFFER_HANDLE_FD handle");
  GPUHAL__CHECK_ARG(handle->type != GPUHAL_BUFFER_HANDLE_FD || handle->allocation_size >= handle->size,
                    "handle->allocation_size", "must be at least handle->size");
  GPUHAL__RETURN_IF_ERROR(gpuhal__buffer_new(device, GPUHAL_MEMORY_DEVICE, handle->size, &buffer));
  status = gpuhal__context_enter(device, &scope);
  if (!status) {
    status = gpuhal__buffer_import_current(buffer, handle);
    gpuhal__context_leave(device, &scope);
  }
  if (status) {
    gpuhal__buffer_discard(buffer);
    return gpuhal_status_annotate(status, "importing %llu bytes of another process's memory on device %d",
                                  (unsigned long long)handle->size, device->ordinal);
  }
  gpuhal__atomic_store(&buffer->state, (int32_t)GPUHAL__BUFFER_LIVE);
  *out_buffer = buffer;
  return NULL;
}
