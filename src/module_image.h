/* gpuhal - kernel images: what gpuhal_executable_load accepts (PTX, a cubin, a fatbin),
 * told apart and checked before the driver sees them. Part of the implementation only. */
#ifndef GPUHAL_SRC_MODULE_IMAGE_H
#define GPUHAL_SRC_MODULE_IMAGE_H

#include "internal.h"

/* ---- gpuhal:internal ---- */

/* ---- image formats ---- */
typedef enum gpuhal__image_format_e {
  GPUHAL__IMAGE_PTX = 1,
  GPUHAL__IMAGE_CUBIN = 2,
  GPUHAL__IMAGE_FATBIN = 3,
  /* CUDA C source with its compile options (executable_compile.c): never loaded, only the
   * image of a disk-cache key whose payload is NVRTC's output. */
  GPUHAL__IMAGE_CUDA_SOURCE = 16
} gpuhal__image_format_t;

GPUHAL__PRIVATE const char* gpuhal__image_format_name(gpuhal__image_format_t f);

/* Finds the format and the number of meaningful bytes (PTX: without its NUL). */
GPUHAL__PRIVATE gpuhal_status_t gpuhal__image_detect(const void* image, size_t size, const char* func,
                                                     gpuhal__image_format_t* out_format, size_t* out_size);

/* 1 for an ELF cubin of type ET_REL: relocatable device code (nvcc -rdc=true, -dc), meant
 * for a device link. The driver loads some of it as it is and fails its kernels one by one
 * (CUDA_ERROR_INVALID_IMAGE at their lookup), so gpuhal links it first. */
GPUHAL__PRIVATE int gpuhal__image_is_relocatable_cubin(const void* image, size_t size);

/* The format and key size of an image from its first bytes alone (O(1)): enough to look
 * it up, since a hit compares every byte with an image that was fully checked when its
 * entry was made. A miss runs gpuhal__image_detect, which agrees with this on valid images. */
GPUHAL__PRIVATE void gpuhal__image_sniff(const void* image, size_t size, gpuhal__image_format_t* out_format,
                                         size_t* out_size);

/* ---- what gpuhal reads of PTX text ----
 * The driver says nothing of some things a PTX image declares, which compilers built on
 * LLVM emit: a kernel's .reqntid (the one block shape it may be launched with), whether a
 * name that is not a kernel is a device function, and which variables an image has (for a
 * global lookup's NOT_FOUND). gpuhal reads them from the text: module scope only
 * (comments, strings, initialisers and bodies are skipped). */

/* One function of a PTX image: a kernel (.entry) or a device function (.func). */
typedef struct gpuhal__ptx_function_s {
  int is_entry;
  const char* name; /* into the image: name_length bytes, not NUL-terminated */
  size_t name_length;
  uint32_t reqntid[3]; /* an .entry's .reqntid (dimensions left out are 1); zeros: none */
} gpuhal__ptx_function_t;

/* The next .entry or .func of PTX text (`size` bytes) from *cursor (0 to start): 1 with
 * *out, *cursor past it (body and all); 0 at the end. */
GPUHAL__PRIVATE int gpuhal__ptx_next_function(const char* ptx, size_t size, size_t* cursor,
                                              gpuhal__ptx_function_t* out);

/* One module-scope variable of a PTX image: a global (.global: __device__; .const:
 * __constant__) or a .shared one, which has no address on the host. */
typedef struct gpuhal__ptx_variable_s {
  char space;       /* 'g' (.global), 'c' (.const) or 's' (.shared) */
  int is_extern;    /* declared .extern: defined in another image */
  const char* name; /* into the image: name_length bytes, not NUL-terminated */
  size_t name_length;
} gpuhal__ptx_variable_t;

/* The next module-scope .global, .const or .shared variable of PTX text (`size` bytes) from
 * *cursor (0 to start): 1 with *out, *cursor past its name; 0 at the end. Parameter lists,
 * bodies and initialisers are skipped whole. */
GPUHAL__PRIVATE int gpuhal__ptx_next_variable(const char* ptx, size_t size, size_t* cursor,
                                              gpuhal__ptx_variable_t* out);

/* The first .version and .target operands of PTX text ("9.9", "sm_100"), NUL-terminated
 * in the buffers; "" when absent. */
GPUHAL__PRIVATE void gpuhal__ptx_header(const char* ptx, size_t size, char* version, size_t version_capacity,
                                        char* target, size_t target_capacity);

#endif /* GPUHAL_SRC_MODULE_IMAGE_H */
