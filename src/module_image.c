/* module_image: telling PTX, cubin and fatbin images apart and checking them
 * (module_image.h). */
#include "module_image.h"
#include "hash.h"

GPUHAL__PRIVATE const char* gpuhal__image_format_name(gpuhal__image_format_t f) {
  switch (f) {
    case GPUHAL__IMAGE_PTX: return "PTX";
    case GPUHAL__IMAGE_CUBIN: return "cubin";
    case GPUHAL__IMAGE_FATBIN: return "fatbin";
    case GPUHAL__IMAGE_CUDA_SOURCE: return "CUDA C source";
  }
  return "unknown";
}

#define GPUHAL__ELF_EM_CUDA 190
#define GPUHAL__FATBIN_MAGIC 0xBA55ED50u

/* A table of `count` entries of `entry_size` bytes at `offset` (an ELF header's section or
 * program headers): refused unless it lies inside the image. */
static gpuhal_status_t gpuhal__image_check_elf_table(uint64_t offset, uint64_t count, uint64_t entry_size,
                                                     uint64_t min_entry_size, size_t size, const char* what,
                                                     const char* func) {
  if (offset > size)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is a truncated cubin: its %s start at byte %llu but 'size' is %zu",
                              func, what, (unsigned long long)offset, size);
  if (count == 0) return NULL;
  if (entry_size < min_entry_size)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is not a valid cubin: its %s are %llu bytes each (at least %llu)",
                              func, what, (unsigned long long)entry_size, (unsigned long long)min_entry_size);
  if (count * entry_size > size - offset)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is a truncated cubin: its %s end at byte %llu but 'size' is %zu",
                              func, what, (unsigned long long)(offset + count * entry_size), size);
  return NULL;
}

/* A cubin (ELF): the header names EM_CUDA, and the section headers, the program headers
 * and every section's bytes lie inside the image. The driver takes no size with an image,
 * so whatever the headers point at, it reads. softcuda's stand-in cubins (neither ELF32
 * nor ELF64) go to it unchecked. */
static gpuhal_status_t gpuhal__image_check_cubin(const unsigned char* p, size_t size, const char* func) {
  int elf64;
  uint64_t shoff, shnum, shentsize, i;
  /* 52 bytes is the smallest ELF header (ELF32); nothing shorter is worth a driver call. */
  if (size < 52)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is a truncated ELF file (%zu bytes, less than the 52-byte "
                              "smallest ELF header)",
                              func, size);
  if (p[4] != 1 && p[4] != 2) return NULL;
  elf64 = p[4] == 2;
  if (elf64 && size < 64)
    return gpuhal_status_make(
        GPUHAL_STATUS_INVALID_ARGUMENT,
        "%s: argument 'image' is a truncated ELF64 file (%zu bytes, less than its 64-byte header)", func, size);
  if (gpuhal__le16(p + 18) != GPUHAL__ELF_EM_CUDA)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is an ELF file for machine %u, not a CUDA cubin (EM_CUDA = %d)",
                              func, (unsigned)gpuhal__le16(p + 18), GPUHAL__ELF_EM_CUDA);
  shoff = elf64 ? gpuhal__le64(p + 0x28) : gpuhal__le32(p + 0x20);
  shentsize = gpuhal__le16(p + (elf64 ? 0x3A : 0x2E));
  shnum = gpuhal__le16(p + (elf64 ? 0x3C : 0x30));
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__image_check_elf_table(shoff, shnum, shentsize, elf64 ? 64 : 40, size, "section headers", func));
  GPUHAL__RETURN_IF_ERROR(gpuhal__image_check_elf_table(
      elf64 ? gpuhal__le64(p + 0x20) : gpuhal__le32(p + 0x1C), gpuhal__le16(p + (elf64 ? 0x38 : 0x2C)),
      gpuhal__le16(p + (elf64 ? 0x36 : 0x2A)), elf64 ? 56 : 32, size, "program headers", func));
  for (i = 0; i < shnum; ++i) {
    const unsigned char* sh = p + shoff + i * shentsize;
    uint32_t type = gpuhal__le32(sh + 4);
    uint64_t offset = elf64 ? gpuhal__le64(sh + 0x18) : gpuhal__le32(sh + 0x10);
    uint64_t bytes = elf64 ? gpuhal__le64(sh + 0x20) : gpuhal__le32(sh + 0x14);
    if (type == 0 || type == 8) continue; /* SHT_NULL, SHT_NOBITS: no bytes in the file */
    if (offset > size || bytes > size - offset)
      return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                                "%s: argument 'image' is a truncated cubin: section %llu ends at byte %llu but "
                                "'size' is %zu",
                                func, (unsigned long long)i, (unsigned long long)offset + bytes, size);
  }
  return NULL;
}

/* A fatbin starts with {u32 magic, u16 version, u16 header size, u64 payload size}. */
static gpuhal_status_t gpuhal__image_check_fatbin(const unsigned char* p, size_t size, const char* func) {
  uint64_t total;
  if (size < 16)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' has the fatbin magic but only %zu bytes", func, size);
  /* (compared piecewise: a huge payload size must not wrap the sum) */
  total = (uint64_t)gpuhal__le16(p + 6) + GPUHAL__MIN(gpuhal__le64(p + 8), (uint64_t)SIZE_MAX);
  if (gpuhal__le64(p + 8) > (uint64_t)size || total > size)
    return gpuhal_status_make(
        GPUHAL_STATUS_INVALID_ARGUMENT,
        "%s: argument 'image' is a truncated fatbin: its header says %llu bytes but 'size' is %zu", func,
        (unsigned long long)total, size);
  return NULL;
}

/* PTX: text (tabs, newlines, printable bytes) that has a .version directive, then any
 * number of NULs (build tools pad embedded PTX to an alignment; the driver reads up to the
 * first NUL). *out_text_size excludes them. */
static gpuhal_status_t gpuhal__image_check_ptx(const unsigned char* p, size_t size, const char* func,
                                               size_t* out_text_size) {
  size_t n = size;
  size_t i;
  while (n && p[n - 1] == 0) --n;
  for (i = 0; i < n; ++i) {
    /* Eight bytes at a time while none is a control byte other than \t \n \v \f \r
     * (per-byte compares in one word: each byte is or'ed with 0x80 first, so no borrow
     * crosses bytes). */
    const uint64_t high = 0x8080808080808080ull, ones = 0x0101010101010101ull;
    while (i + 8 <= n) {
      uint64_t w = gpuhal__read_u64(p + i), low7 = (w & ~high) | high;
      uint64_t ge20 = low7 - ones * 0x20, ge09 = low7 - ones * 0x09, ge0e = low7 - ones * 0x0E;
      if ((~w & ~ge20 & ~(ge09 & ~ge0e) & high) != 0) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] >= 0x20 || (unsigned char)(p[i] - 9) < 5) continue;
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is not PTX, a cubin (ELF) or a fatbin: byte %zu is 0x%02x "
                              "(not text) and the image starts with no known magic number",
                              func, i, (unsigned)p[i]);
  }
  for (i = 0; i + 8 <= n; ++i) {
    if (memcmp(p + i, ".version", 8) == 0) {
      *out_text_size = n;
      return NULL;
    }
  }
  return gpuhal_status_make(
      GPUHAL_STATUS_INVALID_ARGUMENT,
      "%s: argument 'image' is text without a .version directive: not PTX (nor a cubin or fatbin)", func);
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__image_detect(const void* image, size_t size, const char* func,
                                                     gpuhal__image_format_t* out_format, size_t* out_size) {
  const unsigned char* p = (const unsigned char*)image;
  *out_size = size;
  if (size >= 4 && p[0] == 0x7F && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') {
    *out_format = GPUHAL__IMAGE_CUBIN;
    return gpuhal__image_check_cubin(p, size, func);
  }
  if (size >= 4 && gpuhal__le32(p) == GPUHAL__FATBIN_MAGIC) {
    *out_format = GPUHAL__IMAGE_FATBIN;
    return gpuhal__image_check_fatbin(p, size, func);
  }
  *out_format = GPUHAL__IMAGE_PTX;
  return gpuhal__image_check_ptx(p, size, func, out_size);
}

GPUHAL__PRIVATE int gpuhal__image_is_relocatable_cubin(const void* image, size_t size) {
  const unsigned char* p = (const unsigned char*)image;
  return size >= 52 && p[0] == 0x7F && p[1] == 'E' && p[2] == 'L' && p[3] == 'F' && (p[4] == 1 || p[4] == 2) &&
         gpuhal__le16(p + 16) == 1; /* e_type ET_REL */
}

GPUHAL__PRIVATE void gpuhal__image_sniff(const void* image, size_t size, gpuhal__image_format_t* out_format,
                                         size_t* out_size) {
  const unsigned char* p = (const unsigned char*)image;
  *out_size = size;
  if (size >= 4 && p[0] == 0x7F && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') {
    *out_format = GPUHAL__IMAGE_CUBIN;
  } else if (size >= 4 && gpuhal__le32(p) == GPUHAL__FATBIN_MAGIC) {
    *out_format = GPUHAL__IMAGE_FATBIN;
  } else {
    *out_format = GPUHAL__IMAGE_PTX;
    while (*out_size && p[*out_size - 1] == 0) --*out_size;
  }
}

/* ---- PTX text ---- */

static int gpuhal__ptx_is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
         c == '.' || c == '%';
}

/* Past white space and comments from p[i]. */
static size_t gpuhal__ptx_skip_space(const char* p, size_t n, size_t i) {
  for (;;) {
    while (i < n && (p[i] == ' ' || (unsigned char)(p[i] - 9) < 5)) i++;
    if (i + 1 < n && p[i] == '/' && p[i + 1] == '/') {
      while (i < n && p[i] != '\n') i++;
    } else if (i + 1 < n && p[i] == '/' && p[i + 1] == '*') {
      for (i += 2; i + 1 < n && !(p[i] == '*' && p[i + 1] == '/');) i++;
      i = i + 2 <= n ? i + 2 : n;
    } else {
      return i;
    }
  }
}

/* The token at or after p[i]: an identifier, directive or number, a whole string, or one
 * other character, as [*start, *start + *length); returns the index after it (*length 0 at
 * the end). */
static size_t gpuhal__ptx_token(const char* p, size_t n, size_t i, size_t* start, size_t* length) {
  i = gpuhal__ptx_skip_space(p, n, i);
  *start = i;
  if (i < n && gpuhal__ptx_is_ident(p[i])) {
    while (i < n && gpuhal__ptx_is_ident(p[i])) i++;
  } else if (i < n && p[i] == '"') {
    for (i++; i < n && p[i] != '"' && p[i] != '\n';) i++;
    if (i < n) i++;
  } else if (i < n) {
    i++;
  }
  *length = i - *start;
  return i;
}

static int gpuhal__ptx_token_is(const char* p, size_t start, size_t length, const char* word) {
  return length == strlen(word) && memcmp(p + start, word, length) == 0;
}

/* Past the balanced group whose opening character is p[i]. */
static size_t gpuhal__ptx_skip_group(const char* p, size_t n, size_t i, char open, char close) {
  size_t start, length;
  long depth = 0;
  do {
    i = gpuhal__ptx_token(p, n, i, &start, &length);
    if (length == 1 && p[start] == open) depth++;
    if (length == 1 && p[start] == close) depth--;
  } while (length && depth > 0);
  return i;
}

/* A PTX integer constant (decimal, 0x hex, 0b binary, 0-led octal, an optional U suffix)
 * at p[0..length), clamped to UINT32_MAX; 0 when it is not one. */
static uint32_t gpuhal__ptx_read_uint(const char* p, size_t length) {
  uint64_t v = 0;
  unsigned base = 10;
  size_t k = 0;
  if (length && p[length - 1] == 'U') length--;
  if (length > 1 && p[0] == '0') {
    if (p[1] == 'x' || p[1] == 'X')
      base = 16, k = 2;
    else if (p[1] == 'b' || p[1] == 'B')
      base = 2, k = 2;
    else
      base = 8, k = 1;
    if (k == length && base != 8) return 0; /* "0x" alone */
  }
  if (k == length && base == 10) return 0;
  for (; k < length; ++k) {
    char c = p[k];
    unsigned digit = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16u;
    if (digit >= base) return 0;
    v = GPUHAL__MIN(v * base + digit, (uint64_t)UINT32_MAX);
  }
  return (uint32_t)v;
}

/* ".reqntid X[, Y[, Z]]" after the directive: the dimensions (left out: 1). One that is not
 * a positive integer constant leaves all three at zero: nothing is enforced, rather than a
 * wrong shape that would refuse every launch. */
static size_t gpuhal__ptx_read_dims(const char* p, size_t n, size_t i, uint32_t dims[3]) {
  size_t start, length, d;
  dims[0] = dims[1] = dims[2] = 1;
  for (d = 0; d < 3; ++d) {
    size_t next = gpuhal__ptx_token(p, n, i, &start, &length);
    uint32_t v = length ? gpuhal__ptx_read_uint(p + start, length) : 0;
    if (!v) {
      dims[0] = dims[1] = dims[2] = 0;
      break;
    }
    dims[d] = v;
    i = next;
    next = gpuhal__ptx_token(p, n, i, &start, &length);
    if (length != 1 || p[start] != ',') break;
    i = next;
  }
  return i;
}

GPUHAL__PRIVATE int gpuhal__ptx_next_function(const char* ptx, size_t size, size_t* cursor,
                                              gpuhal__ptx_function_t* out) {
  size_t i = *cursor, start, length, next;
  memset(out, 0, sizeof(*out));
  for (;;) {
    i = gpuhal__ptx_token(ptx, size, i, &start, &length);
    if (!length) {
      *cursor = size;
      return 0;
    }
    if (length == 1 && ptx[start] == '{') { /* an initialiser */
      i = gpuhal__ptx_skip_group(ptx, size, start, '{', '}');
      continue;
    }
    if (!gpuhal__ptx_token_is(ptx, start, length, ".entry") && !gpuhal__ptx_token_is(ptx, start, length, ".func"))
      continue;
    out->is_entry = ptx[start + 1] == 'e';
    next = gpuhal__ptx_token(ptx, size, i, &start, &length);
    if (!out->is_entry && length == 1 && ptx[start] == '(') { /* a .func's return parameter */
      i = gpuhal__ptx_skip_group(ptx, size, start, '(', ')');
      next = gpuhal__ptx_token(ptx, size, i, &start, &length);
    }
    if (length && gpuhal__ptx_is_ident(ptx[start]) && ptx[start] != '.') break;
    i = next; /* not a function after all */
  }
  out->name = ptx + start;
  out->name_length = length;
  i = next;
  for (;;) { /* parameters and directives up to the body, or the ';' of a declaration */
    next = gpuhal__ptx_token(ptx, size, i, &start, &length);
    if (!length) {
      i = size;
      break;
    }
    if (length == 1 && (ptx[start] == '(' || ptx[start] == '{')) {
      i = gpuhal__ptx_skip_group(ptx, size, start, ptx[start], ptx[start] == '(' ? ')' : '}');
      if (ptx[start] == '{') break;
      continue;
    }
    i = next;
    if (length == 1 && ptx[start] == ';') break;
    if (out->is_entry && gpuhal__ptx_token_is(ptx, start, length, ".reqntid"))
      i = gpuhal__ptx_read_dims(ptx, size, i, out->reqntid);
  }
  *cursor = i;
  return 1;
}

GPUHAL__PRIVATE int gpuhal__ptx_next_variable(const char* ptx, size_t size, size_t* cursor,
                                              gpuhal__ptx_variable_t* out) {
  size_t i = *cursor, start, length, next;
  int after_extern = 0;
  memset(out, 0, sizeof(*out));
  for (;;) {
    int is_extern = after_extern;
    i = gpuhal__ptx_token(ptx, size, i, &start, &length);
    if (!length) break;
    after_extern = gpuhal__ptx_token_is(ptx, start, length, ".extern");
    if (length == 1 && (ptx[start] == '{' || ptx[start] == '(')) { /* a body, an initialiser, parameters */
      i = gpuhal__ptx_skip_group(ptx, size, start, ptx[start], ptx[start] == '{' ? '}' : ')');
      continue;
    }
    if (!gpuhal__ptx_token_is(ptx, start, length, ".global") && !gpuhal__ptx_token_is(ptx, start, length, ".const") &&
        !gpuhal__ptx_token_is(ptx, start, length, ".shared"))
      continue;
    out->space = ptx[start + 1];
    out->is_extern = is_extern;
    for (;;) { /* the name: the first word that is neither a directive nor a number */
      next = gpuhal__ptx_token(ptx, size, i, &start, &length);
      if (!length || (length == 1 && (ptx[start] == ';' || ptx[start] == '=' || ptx[start] == '{'))) break;
      if (length == 1 && (ptx[start] == '(' || ptx[start] == '[')) { /* .attribute(.managed), a .const bank */
        i = gpuhal__ptx_skip_group(ptx, size, start, ptx[start], ptx[start] == '(' ? ')' : ']');
        continue;
      }
      i = next;
      if (gpuhal__ptx_is_ident(ptx[start]) && ptx[start] != '.' && (ptx[start] < '0' || ptx[start] > '9')) {
        out->name = ptx + start;
        out->name_length = length;
        *cursor = i;
        return 1;
      }
    }
    out->space = 0; /* no name: not a variable after all */
    out->is_extern = 0;
  }
  *cursor = size;
  return 0;
}

GPUHAL__PRIVATE void gpuhal__ptx_header(const char* ptx, size_t size, char* version, size_t version_capacity,
                                        char* target, size_t target_capacity) {
  size_t i = 0, start, length;
  version[0] = 0;
  target[0] = 0;
  while (!version[0] || !target[0]) {
    int is_version, is_target;
    i = gpuhal__ptx_token(ptx, size, i, &start, &length);
    if (!length) return;
    if (length == 1 && ptx[start] == '{') return; /* the header is behind */
    is_version = gpuhal__ptx_token_is(ptx, start, length, ".version") && !version[0];
    is_target = gpuhal__ptx_token_is(ptx, start, length, ".target") && !target[0];
    if (!is_version && !is_target) continue;
    i = gpuhal__ptx_token(ptx, size, i, &start, &length);
    snprintf(is_version ? version : target, is_version ? version_capacity : target_capacity, "%.*s",
             (int)GPUHAL__MIN(length, (size_t)64), ptx + start);
  }
}
