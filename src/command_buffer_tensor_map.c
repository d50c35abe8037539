/* command_buffer_tensor_map: tensor map arguments (TMA). The map's rules are checked when
 * the dispatch is recorded, naming the field, and the driver is asked then too (a trial
 * encoding); the map is encoded (cuTensorMapEncodeTiled) at every execute, with the address
 * its buffer or binding slot has then, as late address arguments are resolved, and passed
 * by value as a 128-byte CUtensorMap (command_buffer.h). */
#include "command_buffer.h"
#include "status.h"

/* A dispatch's tensor map, and its encoding at the address it was last encoded for: an
 * execute whose address is the same copies that instead of asking the driver again
 * (executes of one command buffer resolve their arguments one at a time). */
struct gpuhal__cb_tensor_map_s {
  gpuhal_tensor_map_t map;
  uint64_t address;
  int encoded;
  unsigned char value[GPUHAL__TENSOR_MAP_BYTES];
};

GPUHAL_API gpuhal_arg_t gpuhal_arg_tensor_map(gpuhal_arg_t memory, const gpuhal_tensor_map_t* map) {
  gpuhal_arg_t a = memory;
  a.memory = memory.kind;
  a.kind = GPUHAL_ARG_TENSOR_MAP;
  a.tensor_map = map;
  a.size = GPUHAL__TENSOR_MAP_BYTES;
  return a;
}

/* Bytes of one element; 0 for a type gpuhal does not know. */
static uint32_t gpuhal__tensor_element_bytes(gpuhal_tensor_type_t type) {
  static const unsigned char bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  return (unsigned)type < sizeof(bytes) ? bytes[type] : 0;
}

/* The alignment the address and the strides need. */
static uint64_t gpuhal__tensor_alignment(const gpuhal_tensor_map_t* m) { return m->interleave == 2 ? 32u : 16u; }

/* The byte stride of dimension i (0: the element): given, else packed over the ones below.
 * Saturates at UINT64_MAX. */
static uint64_t gpuhal__tensor_stride(const gpuhal_tensor_map_t* m, uint32_t i) {
  uint64_t below;
  if (i == 0) return gpuhal__tensor_element_bytes(m->type);
  if (m->strides[i - 1]) return m->strides[i - 1];
  below = gpuhal__tensor_stride(m, i - 1);
  if (m->dims[i - 1] && below > UINT64_MAX / m->dims[i - 1]) return UINT64_MAX;
  return below * m->dims[i - 1];
}

GPUHAL__PRIVATE uint64_t gpuhal__tensor_map_extent(const gpuhal_tensor_map_t* m) {
  uint64_t extent = gpuhal__tensor_element_bytes(m->type);
  uint32_t i;
  for (i = 0; i < m->rank && i < GPUHAL_TENSOR_MAX_RANK; ++i) {
    uint64_t stride = gpuhal__tensor_stride(m, i), span;
    if (m->dims[i] == 0) continue;
    if (stride && m->dims[i] - 1 > UINT64_MAX / stride) return UINT64_MAX;
    span = (m->dims[i] - 1) * stride;
    if (extent > UINT64_MAX - span) return UINT64_MAX;
    extent += span;
  }
  return extent;
}

#define GPUHAL__TMAP_BAD(...) return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

/* The dimensions' rules (cuTensorMapEncodeTiled's, CUDA 13). */
static gpuhal_status_t gpuhal__tensor_map_dims_check(const gpuhal_tensor_map_t* m, const char* func, const char* what) {
  uint64_t align = gpuhal__tensor_alignment(m);
  uint32_t i;
  for (i = 0; i < m->rank; ++i) {
    if (m->dims[i] == 0 || m->dims[i] > (1ull << 32))
      GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->dims[%u]' is %llu: must be in 1..2^32", func, what, (unsigned)i,
                       (unsigned long long)m->dims[i]);
    if (m->box[i] == 0 || m->box[i] > 256)
      GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->box[%u]' is %u: must be in 1..256", func, what, (unsigned)i,
                       (unsigned)m->box[i]);
    if (m->element_strides[i] > 8)
      GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->element_strides[%u]' is %u: must be in 1..8 (0: 1)", func, what,
                       (unsigned)i, (unsigned)m->element_strides[i]);
  }
  for (i = 1; i < m->rank; ++i) {
    uint64_t stride = gpuhal__tensor_stride(m, i), below = gpuhal__tensor_stride(m, i - 1);
    uint64_t spans = below > UINT64_MAX / m->dims[i - 1] ? UINT64_MAX : below * m->dims[i - 1]; /* saturated */
    if (stride % align || stride >= (1ull << 40))
      GPUHAL__TMAP_BAD(
          "%s: argument '%s.tensor_map->strides[%u]' is %llu bytes%s: must be a multiple of %llu below "
          "2^40%s",
          func, what, (unsigned)(i - 1), (unsigned long long)stride, m->strides[i - 1] ? "" : " (0: packed)",
          (unsigned long long)align, m->strides[i - 1] ? "" : "; give a padded stride");
    if (m->strides[i - 1] && below != UINT64_MAX && stride < spans)
      GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->strides[%u]' is %llu bytes: less than dimension %u spans (%s%llu)",
                       func, what, (unsigned)(i - 1), (unsigned long long)stride, (unsigned)(i - 1),
                       spans == UINT64_MAX ? "at least " : "", (unsigned long long)spans);
  }
  return NULL;
}

/* Every rule of the map itself, naming the field. */
static gpuhal_status_t gpuhal__tensor_map_rules(const gpuhal_tensor_map_t* m, const char* func, const char* what) {
  uint32_t esize;
  uint64_t inner;
  if (!m) GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map' must not be NULL", func, what);
  esize = gpuhal__tensor_element_bytes(m->type);
  if (!esize)
    GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->type' is %d: must be a gpuhal_tensor_type_t (0..12)", func, what,
                     (int)m->type);
  if (m->rank < 1 || m->rank > GPUHAL_TENSOR_MAX_RANK)
    GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->rank' is %u: must be in 1..5", func, what, (unsigned)m->rank);
  {
    static const char* const names[4] = {"interleave", "swizzle", "l2_promotion", "oob_fill"};
    const uint32_t values[4] = {m->interleave, m->swizzle, m->l2_promotion, m->oob_fill};
    static const uint32_t max[4] = {2, 3, 3, 1};
    int k;
    for (k = 0; k < 4; ++k)
      if (values[k] > max[k])
        GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->%s' is %u: must be in 0..%u", func, what, names[k],
                         (unsigned)values[k], (unsigned)max[k]);
  }
  if (m->interleave && m->rank < 3)
    GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->rank' is %u: an interleaved tensor has rank 3..5", func, what,
                     (unsigned)m->rank);
  GPUHAL__RETURN_IF_ERROR(gpuhal__tensor_map_dims_check(m, func, what));
  inner = (uint64_t)m->box[0] * esize;
  if (!m->interleave && inner % 16)
    GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->box[0]' is %u: %llu bytes of %u-byte elements, not a multiple of 16",
                     func, what, (unsigned)m->box[0], (unsigned long long)inner, (unsigned)esize);
  if (!m->interleave && m->swizzle && inner > (16ull << m->swizzle))
    GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->box[0]' spans %llu bytes: the %llu-byte swizzle allows at most that",
                     func, what, (unsigned long long)inner, 16ull << m->swizzle);
  if (m->interleave == 2 && m->swizzle != 1)
    GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->swizzle' is %u: 32-byte interleave needs the 32-byte swizzle (1)",
                     func, what, (unsigned)m->swizzle);
  if (m->oob_fill && m->type < GPUHAL_TENSOR_F16)
    GPUHAL__TMAP_BAD("%s: argument '%s.tensor_map->oob_fill' is NaN for an integer type", func, what);
  return NULL;
}

/* Encodes `m` at `address` into `out` (128 bytes), in the device's context (the driver
 * wants one current: CUDA_ERROR_INVALID_CONTEXT otherwise). */
static gpuhal_status_t gpuhal__tensor_map_encode(gpuhal_device_t* device, const gpuhal_tensor_map_t* m,
                                                 uint64_t address, unsigned char* out) {
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  /* The driver wants the map 64-byte aligned; a C99 CUtensorMap is not. */
  unsigned char storage[GPUHAL__TENSOR_MAP_BYTES + 64];
  CUtensorMap* map = (CUtensorMap*)(void*)(storage + ((64u - (uintptr_t)storage % 64u) % 64u));
  cuuint64_t dims[GPUHAL_TENSOR_MAX_RANK], strides[GPUHAL_TENSOR_MAX_RANK];
  cuuint32_t box[GPUHAL_TENSOR_MAX_RANK], steps[GPUHAL_TENSOR_MAX_RANK];
  uint32_t i;
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  for (i = 0; i < m->rank; ++i) {
    dims[i] = m->dims[i];
    box[i] = m->box[i];
    steps[i] = m->element_strides[i] ? m->element_strides[i] : 1u;
    strides[i] = i + 1 < m->rank ? gpuhal__tensor_stride(m, i + 1) : 0;
  }
  st = GPUHAL__CU(device->cu, cuTensorMapEncodeTiled,
                  (map, (CUtensorMapDataType)m->type, m->rank, (void*)(uintptr_t)address, dims, strides, box, steps,
                   (CUtensorMapInterleave)m->interleave, (CUtensorMapSwizzle)m->swizzle,
                   (CUtensorMapL2promotion)m->l2_promotion, (CUtensorMapFloatOOBfill)m->oob_fill));
  gpuhal__context_leave(device, &scope);
  if (!st) memcpy(out, map, GPUHAL__TENSOR_MAP_BYTES);
  return st;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_check_tensor_map(gpuhal_command_buffer_t* cb, const gpuhal_arg_t* arg,
                                                            const char* func, const char* what) {
  gpuhal_device_t* device = cb->device;
  const gpuhal_tensor_map_t* m = arg->tensor_map;
  unsigned char scratch[GPUHAL__TENSOR_MAP_BYTES];
  uint64_t align, extent, address;
  gpuhal_status_t st;
  if (!device->cu->cuTensorMapEncodeTiled)
    return gpuhal_status_make(GPUHAL_STATUS_UNAVAILABLE,
                              "%s: argument '%s': tensor maps need cuTensorMapEncodeTiled (CUDA 12.0), which the "
                              "driver lacks",
                              func, what);
  if (device->info.compute_capability_major < 9)
    return gpuhal_status_make(
        GPUHAL_STATUS_UNAVAILABLE, "%s: argument '%s': tensor maps need compute capability 9.0; device %d is %d.%d",
        func, what, device->ordinal, device->info.compute_capability_major, device->info.compute_capability_minor);
  GPUHAL__RETURN_IF_ERROR(gpuhal__tensor_map_rules(m, func, what));
  align = gpuhal__tensor_alignment(m);
  if (arg->offset % align)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument '%s.offset' is %llu: a tensor starts %llu-byte aligned", func, what,
                              (unsigned long long)arg->offset, (unsigned long long)align);
  extent = gpuhal__tensor_map_extent(m);
  if (arg->memory == GPUHAL_ARG_BUFFER && (extent > arg->buffer->size || arg->offset > arg->buffer->size - extent))
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "%s: argument '%s': the tensor spans %llu bytes from offset %llu, past the end of the "
                              "buffer (%llu bytes)",
                              func, what, (unsigned long long)extent, (unsigned long long)arg->offset,
                              (unsigned long long)arg->buffer->size);
  /* The driver's own check, now: at the buffer's address when it has one, else at an
   * aligned stand-in (only the alignment of the address matters to the encoding's rules). */
  address = arg->memory == GPUHAL_ARG_BUFFER && gpuhal__buffer_address(arg->buffer)
                ? gpuhal__buffer_address(arg->buffer) + arg->offset
                : 256u;
  st = gpuhal__tensor_map_encode(device, m, address, scratch);
  if (st) return gpuhal_status_annotate(st, "%s: argument '%s': the driver refuses the tensor map", func, what);
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_reserve_tensor_maps(gpuhal_command_buffer_t* cb, uint32_t count) {
  if (!count) return NULL;
  return gpuhal__grow32(cb->device->allocator, (void**)&cb->tensor_maps, &cb->tensor_map_capacity,
                        (size_t)cb->tensor_map_count + count, sizeof(struct gpuhal__cb_tensor_map_s), "tensor maps");
}

GPUHAL__PRIVATE void gpuhal__cb_push_tensor_map_arg(gpuhal_command_buffer_t* cb, const gpuhal__ref_t* ref,
                                                    const gpuhal_tensor_map_t* map) {
  unsigned char value[GPUHAL__TENSOR_MAP_BYTES];
  gpuhal__cmd_arg_t* arg;
  struct gpuhal__cb_tensor_map_s* copy = &cb->tensor_maps[cb->tensor_map_count++];
  memset(copy, 0, sizeof(*copy));
  copy->map = *map;
  memset(value, 0, sizeof(value));
  /* Always encoded at execute, like a late address: the encoding is a driver call that can
   * fail, and a recording must not be left half-appended (an execute that cannot encode is
   * refused before anything runs). A GRAPH patches the node only when the map changed. */
  arg = gpuhal__cb_push_arg(cb, value, GPUHAL__TENSOR_MAP_BYTES);
  arg->ref = *ref;
  arg->late = 1;
  arg->late_size = GPUHAL__TENSOR_MAP_BYTES;
  arg->tensor_map = cb->tensor_map_count;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__cb_late_value(const gpuhal_command_buffer_t* cb,
                                                      const gpuhal__execute_action_t* action,
                                                      const gpuhal__cmd_arg_t* arg,
                                                      unsigned char out[GPUHAL__LATE_VALUE_MAX]) {
  struct gpuhal__cb_tensor_map_s* t;
  const gpuhal_tensor_map_t* m;
  uint64_t address = 0;
  gpuhal_status_t st;
  GPUHAL__RETURN_IF_ERROR(gpuhal__cb_resolve(cb, action, &arg->ref, &address));
  if (!arg->tensor_map) {
    memcpy(out, &address, sizeof(address));
    return NULL;
  }
  t = &cb->tensor_maps[arg->tensor_map - 1];
  m = &t->map;
  if (t->encoded && t->address == address) {
    memcpy(out, t->value, GPUHAL__TENSOR_MAP_BYTES);
    return NULL;
  }
  if (address % gpuhal__tensor_alignment(m))
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "gpuhal_queue_execute: a tensor map's address 0x%llx (%s) is not %llu-byte aligned",
                              (unsigned long long)address,
                              arg->ref.kind == GPUHAL__REF_SLOT ? "its binding slot's buffer and offset" : "its buffer",
                              (unsigned long long)gpuhal__tensor_alignment(m));
  st = gpuhal__tensor_map_encode(cb->device, m, address, out);
  if (st)
    return gpuhal_status_annotate(st, "gpuhal_queue_execute: encoding a tensor map at 0x%llx",
                                  (unsigned long long)address);
  memcpy(t->value, out, GPUHAL__TENSOR_MAP_BYTES);
  t->address = address;
  t->encoded = 1;
  return NULL;
}
