/* module_cache: executables (loaded kernel images: PTX, cubin, fatbin), their kernels, and
 * the per-device module cache with its persistent disk cache (DESIGN §8).
 *
 * An executable is one image loaded on one device. Loading goes through the device's
 * module cache: the same image loaded twice on one device shares one CUmodule. Kernels are
 * looked up by name, once per module: the CUfunction and its attributes are cached with
 * the module and shared by the kernel objects of every executable of that image. */

typedef struct gpuhal_executable_s gpuhal_executable_t;
typedef struct gpuhal_kernel_s gpuhal_kernel_t;

/* What a kernel needs and allows, as the driver reports it. */
#define GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN UINT32_MAX
typedef struct gpuhal_kernel_info_t {
  const char* name;                   /* the entry name; valid while the executable lives */
  int max_threads_per_block;          /* for this kernel on this device (registers may lower it) */
  int static_shared_bytes;            /* __shared__ arrays of fixed size */
  int max_dynamic_shared_bytes;       /* current limit of launch shared_bytes (48 KiB - static by default) */
  int max_dynamic_shared_optin_bytes; /* the most gpuhal_kernel_set_max_dynamic_shared can allow */
  int num_regs;                       /* registers per thread */
  int local_bytes;                    /* local memory per thread (spills, stack arrays) */
  int const_bytes;                    /* user __constant__ bytes */
  int ptx_version;                    /* major*10+minor of the PTX it came from; 0 for SASS only */
  int binary_version;                 /* major*10+minor of the SASS it runs */
  /* Parameters: count, byte offsets and sizes in the parameter buffer. param_count is
   * GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN (and the arrays NULL) when the driver cannot say
   * (no cuFuncGetParamInfo: drivers before CUDA 12.4); command buffers then skip the
   * argument count and size checks for this kernel. The arrays live as long as the
   * executable. */
  uint32_t param_count;
  const uint32_t* param_offsets;
  const uint32_t* param_sizes;
} gpuhal_kernel_info_t;

/* Loads an image on a device: PTX text (size may or may not count a terminating NUL),
 * a cubin (ELF) or a fatbin. The format is detected from the bytes; anything else is
 * INVALID_ARGUMENT. A PTX compile error returns the JIT log in the status. The image is
 * copied; the caller may free it on return. */
GPUHAL_API gpuhal_status_t gpuhal_executable_load(gpuhal_device_t* device, const void* image, size_t size,
                                                  gpuhal_executable_t** out_executable);
GPUHAL_API void gpuhal_executable_retain(gpuhal_executable_t* executable);
GPUHAL_API void gpuhal_executable_release(gpuhal_executable_t* executable);

/* The kernel named `name` (the .entry / extern "C" name). Unknown names are NOT_FOUND.
 * The kernel object is owned by the executable and valid while it lives: retain the
 * executable, not the kernel. Looking the same name up twice returns the same object. */
GPUHAL_API gpuhal_status_t gpuhal_executable_kernel(gpuhal_executable_t* executable, const char* name,
                                                    gpuhal_kernel_t** out_kernel);
GPUHAL_API gpuhal_status_t gpuhal_kernel_info(gpuhal_kernel_t* kernel, gpuhal_kernel_info_t* out_info);
/* Opt in to dynamic shared memory above the default 48 KiB (up to
 * max_dynamic_shared_optin_bytes). Affects every later launch of this kernel. */
GPUHAL_API gpuhal_status_t gpuhal_kernel_set_max_dynamic_shared(gpuhal_kernel_t* kernel, uint32_t bytes);

/* ---- the module cache (DESIGN §8) ----
 *
 * Every gpuhal_executable_load goes through its device's cache. In memory, an entry is
 * keyed by the exact image bytes and JIT options (found through a fast hash, confirmed by
 * comparing the bytes), so the same image on one device shares one CUmodule; each device
 * (each context) has its own cache, so a module never runs on another context. Entries are
 * reference-counted by executables; the CUfunction of each kernel name is looked up once
 * per entry. An unreferenced entry stays loaded until it is evicted (least recently used
 * first, past module_cache_max_entries / module_cache_max_bytes), trimmed, or its device
 * is released. No compile runs under the cache lock, and concurrent loads of one image
 * compile once: the others wait for that result, and get its error if it failed (the
 * failure is not cached: the next load tries again).
 *
 * Disk cache (params.module_cache_dir, else $GPUHAL_CACHE_DIR): PTX is JIT-linked to a
 * cubin once (cuLink*, or the compile hook) and kept in a file named by the BLAKE2b-256
 * hash of the PTX, the compute capability, the driver version, the JIT options and the
 * compiler (driver or hook). Files are written to a unique temporary name, fsync'ed and
 * renamed, so readers in other processes see a whole file or none; each carries a header
 * with every key field and checksums of itself and its payload, and is checked completely
 * before use: a corrupt, truncated or foreign file is ignored (debug log) and rebuilt. The
 * directory is kept under module_cache_disk_max_bytes by removing the files least recently
 * used (by mtime, which a hit refreshes). A directory that cannot be created or written
 * turns the disk cache off for the device, with one warning; loads go on in memory.
 * gpuhal's own built-in kernels (fills, copies) are a module of the cache too: loaded by the
 * first command that needs them, or at device creation on the memop path. */
typedef struct gpuhal_module_cache_stats_t {
  uint64_t hits;             /* loads served from memory (including those that waited for a compile in flight) */
  uint64_t misses;           /* loads that had to build a module (from disk or by compiling) */
  uint64_t waits;            /* hits that waited for another thread's compile of the same image */
  uint64_t compiles;         /* modules built from an image: PTX JIT (driver or hook) or a cubin/fatbin load */
  uint64_t compile_failures; /* builds that failed (their error went to every waiting load) */
  uint64_t disk_hits;        /* PTX loads served by a valid file of the disk cache */
  uint64_t disk_misses;      /* PTX loads that found no usable file */
  uint64_t disk_rejects;     /* files found but not used: corrupt, truncated, foreign, or refused by the driver */
  uint64_t disk_writes;      /* files written */
  uint64_t disk_evictions;   /* files this device removed to keep the directory within its bound */
  uint64_t evictions;        /* unreferenced entries unloaded to stay within the limits */
  uint64_t trimmed;          /* unreferenced entries unloaded by gpuhal_device_module_cache_trim */
  uint64_t entries;          /* modules loaded now (referenced or not) */
  uint64_t bytes;            /* image bytes of those entries */
  uint64_t max_entries;      /* the limits in force */
  uint64_t max_bytes;
  int disk_enabled;          /* 1 while the disk cache is in use */
} gpuhal_module_cache_stats_t;

/* A snapshot of the device's module cache counters. */
GPUHAL_API gpuhal_status_t gpuhal_device_module_cache_stats(gpuhal_device_t* device,
                                                            gpuhal_module_cache_stats_t* out_stats);
/* Unloads every entry no executable references (the disk cache is left alone). */
GPUHAL_API gpuhal_status_t gpuhal_device_module_cache_trim(gpuhal_device_t* device);

/* Tells device.h that the module cache hooks exist. */
#define GPUHAL__HAVE_MODULE_CACHE 1

/* ---- gpuhal:implementation ---- */

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define GPUHAL__MAGIC_EXECUTABLE 0x45584543u /* "EXEC" */
#define GPUHAL__MAGIC_KERNEL 0x4B45524Eu     /* "KERN" */

/* ---- image formats ---- */
typedef enum gpuhal__image_format_e {
  GPUHAL__IMAGE_PTX = 1,
  GPUHAL__IMAGE_CUBIN = 2,
  GPUHAL__IMAGE_FATBIN = 3
} gpuhal__image_format_t;

static const char* gpuhal__image_format_name(gpuhal__image_format_t f) {
  switch (f) {
    case GPUHAL__IMAGE_PTX: return "PTX";
    case GPUHAL__IMAGE_CUBIN: return "cubin";
    case GPUHAL__IMAGE_FATBIN: return "fatbin";
  }
  return "unknown";
}

static uint16_t gpuhal__le16(const unsigned char* p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t gpuhal__le32(const unsigned char* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t gpuhal__read_u64(const unsigned char* p) { /* native byte order */
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}
static uint64_t gpuhal__le64(const unsigned char* p) {
  return (uint64_t)gpuhal__le32(p) | ((uint64_t)gpuhal__le32(p + 4) << 32);
}

#define GPUHAL__ELF_EM_CUDA 190
#define GPUHAL__FATBIN_MAGIC 0xBA55ED50u

/* A cubin is an ELF file. A 64-bit one (every real cubin) must be for EM_CUDA and have its
 * section headers inside the image; anything else after the ELF magic is left for the
 * driver to judge (softcuda's stand-in cubins are ELF magic + PTX). */
static gpuhal_status_t gpuhal__image_check_cubin(const unsigned char* p, size_t size, const char* func) {
  uint64_t shoff;
  uint64_t shend;
  /* 52 bytes is the smallest ELF header (ELF32); nothing shorter is worth a driver call. */
  if (size < 52)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is a truncated ELF file (%zu bytes, less than the 52-byte "
                              "smallest ELF header)",
                              func, size);
  if (p[4] != 2) return NULL;
  if (size < 64)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is a truncated ELF64 file (%zu bytes, less than its 64-byte header)",
                              func, size);
  if (gpuhal__le16(p + 18) != GPUHAL__ELF_EM_CUDA)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is an ELF file for machine %u, not a CUDA cubin (EM_CUDA = %d)",
                              func, (unsigned)gpuhal__le16(p + 18), GPUHAL__ELF_EM_CUDA);
  shoff = gpuhal__le64(p + 0x28);
  shend = shoff + (uint64_t)gpuhal__le16(p + 0x3A) * gpuhal__le16(p + 0x3C);
  if (shoff > size || shend > size)
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is a truncated cubin: its section headers end at byte %llu "
                              "but 'size' is %zu",
                              func, (unsigned long long)shend, size);
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
    return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                              "%s: argument 'image' is a truncated fatbin: its header says %llu bytes but 'size' is %zu",
                              func, (unsigned long long)total, size);
  return NULL;
}

/* PTX: text (tabs, newlines, printable bytes; at most one NUL, at the very end) that has
 * a .version directive. *out_text_size excludes the NUL. */
static gpuhal_status_t gpuhal__image_check_ptx(const unsigned char* p, size_t size, const char* func,
                                               size_t* out_text_size) {
  size_t n = size;
  size_t i;
  if (n && p[n - 1] == 0) --n;
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
  return gpuhal_status_make(GPUHAL_STATUS_INVALID_ARGUMENT,
                            "%s: argument 'image' is text without a .version directive: not PTX (nor a cubin or fatbin)",
                            func);
}

/* Finds the format and the number of meaningful bytes (PTX: without its NUL). */
static gpuhal_status_t gpuhal__image_detect(const void* image, size_t size, const char* func,
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


/* ---- hashes ---- */

/* A fast 64-bit hash (four lanes of multiply-rotate, 32 bytes a step; the constants are
 * the usual 64-bit golden-ratio primes). It finds in-memory entries (confirmed by a byte
 * compare) and checksums disk-cache files; it is not the cache key on disk. Words are
 * read in native byte order. */
#define GPUHAL__FH_P1 0x9E3779B185EBCA87ull
#define GPUHAL__FH_P2 0xC2B2AE3D27D4EB4Full
#define GPUHAL__FH_P3 0x165667B19E3779F9ull
#define GPUHAL__FH_P4 0x85EBCA77C2B2AE63ull
#define GPUHAL__FH_P5 0x27D4EB2F165667C5ull

static uint64_t gpuhal__rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t gpuhal__fast64_round(uint64_t acc, uint64_t lane) {
  acc += lane * GPUHAL__FH_P2;
  return gpuhal__rotl64(acc, 31) * GPUHAL__FH_P1;
}
static uint64_t gpuhal__fast64_merge(uint64_t h, uint64_t lane) {
  h ^= gpuhal__fast64_round(0, lane);
  return h * GPUHAL__FH_P1 + GPUHAL__FH_P4;
}

static uint64_t gpuhal__hash_fast64(const void* data, size_t size, uint64_t seed) {
  const unsigned char* p = (const unsigned char*)data;
  const unsigned char* end = p + size;
  uint64_t h;
  if (size >= 32) {
    uint64_t v1 = seed + GPUHAL__FH_P1 + GPUHAL__FH_P2, v2 = seed + GPUHAL__FH_P2, v3 = seed, v4 = seed - GPUHAL__FH_P1;
    do {
      v1 = gpuhal__fast64_round(v1, gpuhal__read_u64(p));
      v2 = gpuhal__fast64_round(v2, gpuhal__read_u64(p + 8));
      v3 = gpuhal__fast64_round(v3, gpuhal__read_u64(p + 16));
      v4 = gpuhal__fast64_round(v4, gpuhal__read_u64(p + 24));
      p += 32;
    } while ((size_t)(end - p) >= 32);
    h = gpuhal__rotl64(v1, 1) + gpuhal__rotl64(v2, 7) + gpuhal__rotl64(v3, 12) + gpuhal__rotl64(v4, 18);
    h = gpuhal__fast64_merge(h, v1);
    h = gpuhal__fast64_merge(h, v2);
    h = gpuhal__fast64_merge(h, v3);
    h = gpuhal__fast64_merge(h, v4);
  } else {
    h = seed + GPUHAL__FH_P5;
  }
  h += (uint64_t)size;
  for (; (size_t)(end - p) >= 8; p += 8) {
    h ^= gpuhal__fast64_round(0, gpuhal__read_u64(p));
    h = gpuhal__rotl64(h, 27) * GPUHAL__FH_P1 + GPUHAL__FH_P4;
  }
  if ((size_t)(end - p) >= 4) {
    uint32_t w;
    memcpy(&w, p, sizeof(w));
    h ^= (uint64_t)w * GPUHAL__FH_P1;
    h = gpuhal__rotl64(h, 23) * GPUHAL__FH_P2 + GPUHAL__FH_P3;
    p += 4;
  }
  for (; p < end; ++p) {
    h ^= (uint64_t)*p * GPUHAL__FH_P5;
    h = gpuhal__rotl64(h, 11) * GPUHAL__FH_P1;
  }
  h ^= h >> 33;
  h *= GPUHAL__FH_P2;
  h ^= h >> 29;
  h *= GPUHAL__FH_P3;
  h ^= h >> 32;
  return h;
}

/* BLAKE2b (RFC 7693), unkeyed: the cryptographic hash that names disk-cache files, so two
 * different PTX images never share a file in practice. Byte-order independent. */
typedef struct gpuhal__blake2b_s {
  uint64_t h[8];
  uint64_t t[2]; /* bytes hashed so far, 128-bit */
  unsigned char block[128];
  size_t block_used;
  size_t digest_size;
} gpuhal__blake2b_t;

static const uint64_t gpuhal__blake2b_iv[8] = {0x6A09E667F3BCC908ull, 0xBB67AE8584CAA73Bull, 0x3C6EF372FE94F82Bull,
                                               0xA54FF53A5F1D36F1ull, 0x510E527FADE682D1ull, 0x9B05688C2B3E6C1Full,
                                               0x1F83D9ABFB41BD6Bull, 0x5BE0CD19137E2179ull};
static const unsigned char gpuhal__blake2b_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static uint64_t gpuhal__rotr64(uint64_t x, int r) { return (x >> r) | (x << (64 - r)); }

#define GPUHAL__B2B_G(a, b, c, d, x, y)      \
  do {                                       \
    v[a] = v[a] + v[b] + (x);                \
    v[d] = gpuhal__rotr64(v[d] ^ v[a], 32);  \
    v[c] = v[c] + v[d];                      \
    v[b] = gpuhal__rotr64(v[b] ^ v[c], 24);  \
    v[a] = v[a] + v[b] + (y);                \
    v[d] = gpuhal__rotr64(v[d] ^ v[a], 16);  \
    v[c] = v[c] + v[d];                      \
    v[b] = gpuhal__rotr64(v[b] ^ v[c], 63);  \
  } while (0)

/* One round, its message schedule a constant row of sigma (the rounds are unrolled so
 * the compiler keeps the message words in registers; tests/bench/RESULTS.md). */
#define GPUHAL__B2B_ROUND(r)                                                                     \
  do {                                                                                           \
    GPUHAL__B2B_G(0, 4, 8, 12, m[gpuhal__blake2b_sigma[r][0]], m[gpuhal__blake2b_sigma[r][1]]);   \
    GPUHAL__B2B_G(1, 5, 9, 13, m[gpuhal__blake2b_sigma[r][2]], m[gpuhal__blake2b_sigma[r][3]]);   \
    GPUHAL__B2B_G(2, 6, 10, 14, m[gpuhal__blake2b_sigma[r][4]], m[gpuhal__blake2b_sigma[r][5]]);  \
    GPUHAL__B2B_G(3, 7, 11, 15, m[gpuhal__blake2b_sigma[r][6]], m[gpuhal__blake2b_sigma[r][7]]);  \
    GPUHAL__B2B_G(0, 5, 10, 15, m[gpuhal__blake2b_sigma[r][8]], m[gpuhal__blake2b_sigma[r][9]]);  \
    GPUHAL__B2B_G(1, 6, 11, 12, m[gpuhal__blake2b_sigma[r][10]], m[gpuhal__blake2b_sigma[r][11]]); \
    GPUHAL__B2B_G(2, 7, 8, 13, m[gpuhal__blake2b_sigma[r][12]], m[gpuhal__blake2b_sigma[r][13]]);  \
    GPUHAL__B2B_G(3, 4, 9, 14, m[gpuhal__blake2b_sigma[r][14]], m[gpuhal__blake2b_sigma[r][15]]);  \
  } while (0)

static void gpuhal__blake2b_compress(gpuhal__blake2b_t* s, const unsigned char* block, int last) {
  uint64_t m[16], v[16];
  int i;
  for (i = 0; i < 16; ++i) m[i] = gpuhal__le64(block + 8 * i);
  for (i = 0; i < 8; ++i) {
    v[i] = s->h[i];
    v[i + 8] = gpuhal__blake2b_iv[i];
  }
  v[12] ^= s->t[0];
  v[13] ^= s->t[1];
  if (last) v[14] = ~v[14];
  GPUHAL__B2B_ROUND(0);
  GPUHAL__B2B_ROUND(1);
  GPUHAL__B2B_ROUND(2);
  GPUHAL__B2B_ROUND(3);
  GPUHAL__B2B_ROUND(4);
  GPUHAL__B2B_ROUND(5);
  GPUHAL__B2B_ROUND(6);
  GPUHAL__B2B_ROUND(7);
  GPUHAL__B2B_ROUND(8);
  GPUHAL__B2B_ROUND(9);
  GPUHAL__B2B_ROUND(10);
  GPUHAL__B2B_ROUND(11);
  for (i = 0; i < 8; ++i) s->h[i] ^= v[i] ^ v[i + 8];
}

static void gpuhal__blake2b_count(gpuhal__blake2b_t* s, uint64_t bytes) {
  s->t[0] += bytes;
  if (s->t[0] < bytes) s->t[1]++;
}

/* digest_size: 1..64 bytes. */
static void gpuhal__blake2b_init(gpuhal__blake2b_t* s, size_t digest_size) {
  int i;
  memset(s, 0, sizeof(*s));
  for (i = 0; i < 8; ++i) s->h[i] = gpuhal__blake2b_iv[i];
  s->h[0] ^= 0x01010000ull ^ (uint64_t)digest_size; /* depth 1, fanout 1, no key */
  s->digest_size = digest_size;
}

static void gpuhal__blake2b_update(gpuhal__blake2b_t* s, const void* data, size_t size) {
  const unsigned char* p = (const unsigned char*)data;
  while (size > 0) {
    size_t n;
    /* A full block is compressed only once more input follows: the last block is special. */
    if (s->block_used == 128) {
      gpuhal__blake2b_count(s, 128);
      gpuhal__blake2b_compress(s, s->block, 0);
      s->block_used = 0;
    }
    if (s->block_used == 0) {
      while (size > 128) {
        gpuhal__blake2b_count(s, 128);
        gpuhal__blake2b_compress(s, p, 0);
        p += 128;
        size -= 128;
      }
    }
    n = GPUHAL__MIN(128 - s->block_used, size);
    memcpy(s->block + s->block_used, p, n);
    s->block_used += n;
    p += n;
    size -= n;
  }
}

static void gpuhal__blake2b_final(gpuhal__blake2b_t* s, unsigned char* out) {
  size_t i;
  gpuhal__blake2b_count(s, s->block_used);
  memset(s->block + s->block_used, 0, 128 - s->block_used);
  gpuhal__blake2b_compress(s, s->block, 1);
  for (i = 0; i < s->digest_size; ++i) out[i] = (unsigned char)(s->h[i / 8] >> (8 * (i % 8)));
}

static void gpuhal__blake2b(const void* data, size_t size, unsigned char* out, size_t digest_size) {
  gpuhal__blake2b_t s;
  gpuhal__blake2b_init(&s, digest_size);
  gpuhal__blake2b_update(&s, data, size);
  gpuhal__blake2b_final(&s, out);
}

/* ---- the disk-cache file format ----
 *
 * A file is a 128-byte header and a payload (a cubin or fatbin). Integers little-endian:
 *     0  8  magic "GPUHALMC"
 *     8  4  format version (1)
 *    12  4  header size (128)
 *    16 32  BLAKE2b-256 of the image
 *    48  8  image size
 *    56  4  image format (1: PTX)
 *    60  4  compute capability major     64  4  minor
 *    68  4  driver version (e.g. 13000)
 *    72  4  JIT optimization level       76  4  JIT max registers
 *    80  4  compiler (0: driver cuLink, 1: the user's compile hook)
 *    84  4  reserved (0)
 *    88  8  payload size (the file is exactly 128 + this)
 *    96  8  payload checksum (fast64, seeded)
 *   104  8  header checksum (fast64 of bytes 0..103, seeded)
 *   112 16  reserved (0)
 * Everything is checked before the payload is used. */
#define GPUHAL__DISK_MAGIC "GPUHALMC"
#define GPUHAL__DISK_FORMAT_VERSION 1u
#define GPUHAL__DISK_HEADER_SIZE 128u
#define GPUHAL__DISK_SEED_HEADER 0x67707568616C6831ull  /* "gpuhalh1" */
#define GPUHAL__DISK_SEED_PAYLOAD 0x67707568616C7031ull /* "gpuhalp1" */
#define GPUHAL__DISK_MAX_FILE_BYTES ((uint64_t)1 << 30)
#define GPUHAL__DISK_SUFFIX ".gpuhal"
#define GPUHAL__DISK_TEMP_MARK ".gpuhal.tmp."

typedef enum gpuhal__compiler_e { GPUHAL__COMPILER_DRIVER = 0, GPUHAL__COMPILER_HOOK = 1 } gpuhal__compiler_t;

/* What a disk-cache file must have been made for. */
typedef struct gpuhal__disk_key_s {
  unsigned char image_digest[32];
  uint64_t image_size;
  uint32_t image_format;
  int32_t cc_major, cc_minor;
  int32_t driver_version;
  int32_t optimization_level; /* normalized: the driver default (-1) is 4 */
  int32_t max_registers;
  uint32_t compiler;
} gpuhal__disk_key_t;

static void gpuhal__put_le32(unsigned char* p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}
static void gpuhal__put_le64(unsigned char* p, uint64_t v) {
  gpuhal__put_le32(p, (uint32_t)v);
  gpuhal__put_le32(p + 4, (uint32_t)(v >> 32));
}

/* Writes the 128-byte header of a file holding `payload` for `key`. */
static void gpuhal__disk_header_encode(const gpuhal__disk_key_t* key, const void* payload, size_t payload_size,
                                       unsigned char* header) {
  memset(header, 0, GPUHAL__DISK_HEADER_SIZE);
  memcpy(header, GPUHAL__DISK_MAGIC, 8);
  gpuhal__put_le32(header + 8, GPUHAL__DISK_FORMAT_VERSION);
  gpuhal__put_le32(header + 12, GPUHAL__DISK_HEADER_SIZE);
  memcpy(header + 16, key->image_digest, 32);
  gpuhal__put_le64(header + 48, key->image_size);
  gpuhal__put_le32(header + 56, key->image_format);
  gpuhal__put_le32(header + 60, (uint32_t)key->cc_major);
  gpuhal__put_le32(header + 64, (uint32_t)key->cc_minor);
  gpuhal__put_le32(header + 68, (uint32_t)key->driver_version);
  gpuhal__put_le32(header + 72, (uint32_t)key->optimization_level);
  gpuhal__put_le32(header + 76, (uint32_t)key->max_registers);
  gpuhal__put_le32(header + 80, key->compiler);
  gpuhal__put_le64(header + 88, (uint64_t)payload_size);
  gpuhal__put_le64(header + 96, gpuhal__hash_fast64(payload, payload_size, GPUHAL__DISK_SEED_PAYLOAD));
  gpuhal__put_le64(header + 104, gpuhal__hash_fast64(header, 104, GPUHAL__DISK_SEED_HEADER));
}

static void gpuhal__disk_header_key(const unsigned char* header, gpuhal__disk_key_t* key) {
  memset(key, 0, sizeof(*key));
  memcpy(key->image_digest, header + 16, 32);
  key->image_size = gpuhal__le64(header + 48);
  key->image_format = gpuhal__le32(header + 56);
  key->cc_major = (int32_t)gpuhal__le32(header + 60);
  key->cc_minor = (int32_t)gpuhal__le32(header + 64);
  key->driver_version = (int32_t)gpuhal__le32(header + 68);
  key->optimization_level = (int32_t)gpuhal__le32(header + 72);
  key->max_registers = (int32_t)gpuhal__le32(header + 76);
  key->compiler = gpuhal__le32(header + 80);
}

static int gpuhal__disk_key_equal(const gpuhal__disk_key_t* a, const gpuhal__disk_key_t* b) {
  return memcmp(a->image_digest, b->image_digest, 32) == 0 && a->image_size == b->image_size &&
         a->image_format == b->image_format && a->cc_major == b->cc_major && a->cc_minor == b->cc_minor &&
         a->driver_version == b->driver_version && a->optimization_level == b->optimization_level &&
         a->max_registers == b->max_registers && a->compiler == b->compiler;
}

/* Checks a whole disk-cache file held in memory and finds its payload. Pure: no I/O, no
 * allocation except for the status; safe on arbitrary bytes (the fuzzing entry point).
 * NULL and the payload (a pointer into `bytes`), or DATA_LOSS (corrupt, truncated, not
 * ours) / FAILED_PRECONDITION (another format version, or made for another key). */
static gpuhal_status_t gpuhal__disk_cache_parse(const void* bytes, size_t size, const gpuhal__disk_key_t* expected,
                                                const void** out_payload, size_t* out_payload_size) {
  const unsigned char* p = (const unsigned char*)bytes;
  gpuhal__disk_key_t found;
  uint64_t payload_size;
  gpuhal__image_format_t format;
  size_t format_size;
  gpuhal_status_t st;
  *out_payload = NULL;
  *out_payload_size = 0;
  if (!p || size < GPUHAL__DISK_HEADER_SIZE)
    return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "truncated: %zu bytes, less than the %u-byte header", size,
                              GPUHAL__DISK_HEADER_SIZE);
  if (memcmp(p, GPUHAL__DISK_MAGIC, 8) != 0)
    return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "not a gpuhal module cache file (bad magic)");
  if (gpuhal__le32(p + 8) != GPUHAL__DISK_FORMAT_VERSION)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION, "format version %u (this gpuhal reads version %u)",
                              (unsigned)gpuhal__le32(p + 8), GPUHAL__DISK_FORMAT_VERSION);
  if (gpuhal__le32(p + 12) != GPUHAL__DISK_HEADER_SIZE)
    return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "header size %u (expected %u)", (unsigned)gpuhal__le32(p + 12),
                              GPUHAL__DISK_HEADER_SIZE);
  if (gpuhal__hash_fast64(p, 104, GPUHAL__DISK_SEED_HEADER) != gpuhal__le64(p + 104))
    return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "header checksum mismatch");
  if (gpuhal__le32(p + 84) != 0 || gpuhal__le64(p + 112) != 0 || gpuhal__le64(p + 120) != 0)
    return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "reserved header bytes are not zero");
  gpuhal__disk_header_key(p, &found);
  if (!expected || !gpuhal__disk_key_equal(&found, expected))
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "made for another key (sm_%d%d, driver %d, compiler %u, image of %llu bytes)",
                              (int)found.cc_major, (int)found.cc_minor, (int)found.driver_version,
                              (unsigned)found.compiler, (unsigned long long)found.image_size);
  payload_size = gpuhal__le64(p + 88);
  if (payload_size != (uint64_t)(size - GPUHAL__DISK_HEADER_SIZE))
    return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "the header says %llu payload bytes but the file has %zu",
                              (unsigned long long)payload_size, size - GPUHAL__DISK_HEADER_SIZE);
  if (payload_size == 0) return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "empty payload");
  if (gpuhal__hash_fast64(p + GPUHAL__DISK_HEADER_SIZE, (size_t)payload_size, GPUHAL__DISK_SEED_PAYLOAD) !=
      gpuhal__le64(p + 96))
    return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "payload checksum mismatch");
  st = gpuhal__image_detect(p + GPUHAL__DISK_HEADER_SIZE, (size_t)payload_size, "disk cache payload", &format,
                            &format_size);
  if (!st && format == GPUHAL__IMAGE_PTX)
    st = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "the payload is PTX text, not a cubin or fatbin");
  if (st) {
    gpuhal_status_t wrapped = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "bad payload: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
    return wrapped;
  }
  *out_payload = p + GPUHAL__DISK_HEADER_SIZE;
  *out_payload_size = (size_t)payload_size;
  return NULL;
}

/* The file name of a key: "<64 hex digest>-sm90-drv13000-O4-R0-driver.gpuhal". */
static void gpuhal__disk_file_name(const gpuhal__disk_key_t* key, char* out, size_t out_size) {
  static const char hex[] = "0123456789abcdef";
  char digest[65];
  int i;
  for (i = 0; i < 32; ++i) {
    digest[2 * i] = hex[key->image_digest[i] >> 4];
    digest[2 * i + 1] = hex[key->image_digest[i] & 15];
  }
  digest[64] = 0;
  snprintf(out, out_size, "%s-sm%d%d-drv%d-O%d-R%d-%s%s", digest, (int)key->cc_major, (int)key->cc_minor,
           (int)key->driver_version, (int)key->optimization_level, (int)key->max_registers,
           key->compiler == GPUHAL__COMPILER_HOOK ? "hook" : "driver", GPUHAL__DISK_SUFFIX);
}

/* The format and key size of an image from its first bytes alone (O(1)): enough to look
 * it up, since a hit compares every byte with an image that was fully checked when its
 * entry was made. A miss runs gpuhal__image_detect, which agrees with this on valid images. */
static void gpuhal__image_sniff(const void* image, size_t size, gpuhal__image_format_t* out_format,
                                size_t* out_size) {
  const unsigned char* p = (const unsigned char*)image;
  *out_size = size;
  if (size >= 4 && p[0] == 0x7F && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') {
    *out_format = GPUHAL__IMAGE_CUBIN;
  } else if (size >= 4 && gpuhal__le32(p) == GPUHAL__FATBIN_MAGIC) {
    *out_format = GPUHAL__IMAGE_FATBIN;
  } else {
    *out_format = GPUHAL__IMAGE_PTX;
    if (size && p[size - 1] == 0) *out_size = size - 1;
  }
}

/* ---- the cache ---- */
/* JIT options that change the compiled code, and so are part of the cache key. */
typedef struct gpuhal__jit_options_s {
  int optimization_level; /* 0..4; -1: the driver's default (4) */
  int max_registers;      /* 0: no limit */
} gpuhal__jit_options_t;

static gpuhal__jit_options_t gpuhal__jit_options_default(void) {
  gpuhal__jit_options_t o;
  o.optimization_level = -1;
  o.max_registers = 0;
  return o;
}

/* One kernel of a loaded module: its CUfunction and attributes, looked up once per entry
 * and shared by every executable of the entry. */
typedef struct gpuhal__function_record_s {
  struct gpuhal__function_record_s* next;
  CUfunction function;
  gpuhal_kernel_info_t info; /* name and param arrays point into this record */
  uint32_t* params;          /* offsets then sizes (NULL when unknown) */
  /* The name's bytes follow the record in its allocation. A pointer, not a trailing
   * name[1] array: writing past name[0] draws -Warray-bounds at -O3, and C++ has no
   * flexible array members. */
  char* name;
} gpuhal__function_record_t;

typedef enum gpuhal__entry_state_e {
  GPUHAL__ENTRY_LOADING = 0, /* one thread builds it; others wait on the cache's condvar */
  GPUHAL__ENTRY_READY = 1,
  GPUHAL__ENTRY_FAILED = 2 /* out of the table; waiters take a copy of `failure` */
} gpuhal__entry_state_t;

/* One loaded module. refcount, state, the chain and LRU links are guarded by the cache
 * mutex; the image copy and key never change after creation. */
typedef struct gpuhal__module_entry_s {
  gpuhal__list_node_t lru;                  /* in cache->idle while READY and unreferenced */
  struct gpuhal__module_entry_s* hash_next; /* chain of its bucket while in the table */
  int32_t refcount;
  gpuhal__entry_state_t state;
  int in_table;
  gpuhal_status_t failure;
  gpuhal__image_format_t format;
  gpuhal__jit_options_t jit;
  uint64_t hash; /* fast64 of format, options and image: finds the bucket */
  size_t size;   /* bytes of image (PTX: without NUL) */
  void* image;   /* a NUL-terminated copy: the exact key */
  CUmodule module;
  CUcontext context; /* the context the module lives in (the device's) */
  gpuhal__mutex_t functions_mutex;
  gpuhal__function_record_t* functions;
} gpuhal__module_entry_t;

#define GPUHAL__MODULE_CACHE_DEFAULT_ENTRIES 1024u
#define GPUHAL__MODULE_CACHE_DEFAULT_BYTES ((uint64_t)256 << 20)
#define GPUHAL__MODULE_CACHE_DEFAULT_DISK_BYTES ((uint64_t)1 << 30)
#define GPUHAL__PATH_MAX 4096

/* Per-device state (device->module_cache). `builtins` lets command_buffer.h keep its
 * lazily loaded built-in kernels here. */
typedef struct gpuhal__module_cache_s {
  gpuhal_device_t* device;
  gpuhal__mutex_t mutex;
  gpuhal__cond_t flight_done; /* a LOADING entry became READY or FAILED */
  gpuhal__module_entry_t** buckets;
  size_t bucket_count;  /* a power of two */
  size_t table_count;   /* entries in the table (loading or ready) */
  uint64_t ready_count; /* READY entries in the table */
  uint64_t ready_bytes;
  gpuhal__list_node_t idle; /* READY, unreferenced; front = least recently used */
  uint64_t max_entries, max_bytes;
  gpuhal_module_cache_stats_t stats; /* counters: atomics */
  /* disk */
  char* disk_dir; /* NULL: no disk cache */
  int disk_enabled; /* atomic: cleared (with one warning) when the directory fails us */
  uint64_t disk_max_bytes;
  void* builtins;
  void (*builtins_destroy)(gpuhal_device_t* device, void* builtins);
} gpuhal__module_cache_t;

#define GPUHAL__STAT_ADD(cache, field) ((void)__atomic_add_fetch(&(cache)->stats.field, 1, __ATOMIC_RELAXED))

static gpuhal__module_cache_t* gpuhal__module_cache_of(gpuhal_device_t* device) {
  return (gpuhal__module_cache_t*)device->module_cache;
}

/* ---- the disk cache: files ---- */

/* Turns the disk cache of this device off, warning once. */
static void gpuhal__disk_disable(gpuhal__module_cache_t* cache, const char* what, int error) {
  int expected = 1;
  if (__atomic_compare_exchange_n(&cache->disk_enabled, &expected, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    gpuhal__log(cache->device->logger, GPUHAL_LOG_WARN,
                "module cache: disk cache directory '%s' is not usable (%s: %s); caching in memory only",
                cache->disk_dir, what, strerror(error));
}

/* mkdir -p. 0 or an errno. */
static int gpuhal__make_dirs(const char* path) {
  char buffer[GPUHAL__PATH_MAX];
  size_t n = strlen(path), i;
  struct stat st;
  if (n == 0 || n >= sizeof(buffer)) return ENAMETOOLONG;
  memcpy(buffer, path, n + 1);
  for (i = 1; i <= n; ++i) {
    if (buffer[i] != '/' && buffer[i] != 0) continue;
    buffer[i] = 0;
    if (mkdir(buffer, 0755) != 0 && errno != EEXIST) return errno;
    buffer[i] = i < n ? '/' : 0;
  }
  if (stat(path, &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

static int gpuhal__disk_path(const gpuhal__module_cache_t* cache, const char* name, char* out, size_t out_size) {
  int n = snprintf(out, out_size, "%s/%s", cache->disk_dir, name);
  return n > 0 && (size_t)n < out_size;
}

/* Opens a cache file for reading, refusing what the cache never writes. The cache only
 * ever renames regular files into place, so anything else at an entry's path was put there
 * by someone else: O_NONBLOCK keeps a FIFO (or a device) from hanging the open and every
 * load of the image waiting behind it, O_NOFOLLOW refuses a symbolic link whatever it
 * points to, and fstat on the opened descriptor refuses the rest (no check-then-open race).
 * -1 with *status set (NOT_FOUND when there is no file, else DATA_LOSS), or the fd. */
static int gpuhal__disk_open_regular(const char* path, struct stat* st, gpuhal_status_t* status) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  *status = NULL;
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT)
      *status = gpuhal_status_make(GPUHAL_STATUS_NOT_FOUND, "no file");
    else if (err == ELOOP)
      *status = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "a symbolic link, not a file the cache wrote");
    else
      *status = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "cannot open: %s", strerror(err));
    return -1;
  }
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    *status = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "not a regular file (%s)",
                                 S_ISFIFO(st->st_mode)  ? "a FIFO"
                                 : S_ISDIR(st->st_mode) ? "a directory"
                                 : S_ISCHR(st->st_mode) ? "a character device"
                                 : S_ISSOCK(st->st_mode) ? "a socket"
                                                         : "another kind");
    close(fd);
    return -1;
  }
  return fd;
}

/* Reads a whole regular file (at most GPUHAL__DISK_MAX_FILE_BYTES) into a new buffer and
 * refreshes its mtime (the LRU clock of the directory). NOT_FOUND when there is none. */
static gpuhal_status_t gpuhal__disk_read_file(gpuhal_device_t* device, const char* path, void** out_bytes,
                                              size_t* out_size) {
  struct stat st;
  unsigned char* bytes;
  size_t done = 0;
  gpuhal_status_t status;
  int fd;
  memset(&st, 0, sizeof(st));
  fd = gpuhal__disk_open_regular(path, &st, &status);
  *out_bytes = NULL;
  *out_size = 0;
  if (fd < 0) return status;
  if (st.st_size < 0 || (uint64_t)st.st_size > GPUHAL__DISK_MAX_FILE_BYTES) {
    close(fd);
    return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "not a file of a sensible size");
  }
  bytes = (unsigned char*)gpuhal__alloc(device->allocator, st.st_size ? (size_t)st.st_size : 1);
  if (!bytes) {
    close(fd);
    return gpuhal__status_oom("a disk cache file", (size_t)st.st_size);
  }
  while (done < (size_t)st.st_size) {
    ssize_t got = read(fd, bytes + done, (size_t)st.st_size - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += (size_t)got;
  }
  if (done == (size_t)st.st_size) (void)futimens(fd, NULL); /* may fail on a read-only dir: fine */
  close(fd);
  *out_bytes = bytes;
  *out_size = done;
  return NULL;
}

/* Looks the key up on disk. On success *out_file is the file's bytes (free it) and
 * *out_payload points into it. A missing file is NOT_FOUND; a bad one, DATA_LOSS or
 * FAILED_PRECONDITION. */
static gpuhal_status_t gpuhal__disk_lookup(gpuhal__module_cache_t* cache, const gpuhal__disk_key_t* key,
                                           const char* path, void** out_file, const void** out_payload,
                                           size_t* out_payload_size) {
  gpuhal_device_t* device = cache->device;
  void* file = NULL;
  size_t size = 0;
  gpuhal_status_t st = gpuhal__disk_read_file(device, path, &file, &size);
  if (!st) st = gpuhal__disk_cache_parse(file, size, key, out_payload, out_payload_size);
  if (st) {
    gpuhal__free(device->allocator, file);
    return st;
  }
  *out_file = file;
  return NULL;
}

static int gpuhal__write_all(int fd, const void* data, size_t size) {
  const unsigned char* p = (const unsigned char*)data;
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return errno ? errno : EIO;
    p += n;
    size -= (size_t)n;
  }
  return 0;
}

static uint32_t gpuhal__temp_counter = 0;

/* Creates a new file beside `path` for writing (its name in `temp`), to be renamed over
 * `path` once whole. The name is unique per process, call and clock reading
 * ("<path>.tmp.<pid>.<n>.<salt>": a cache file's holds GPUHAL__DISK_TEMP_MARK), and
 * O_EXCL | O_NOFOLLOW create it afresh: whatever already sits at a name (another writer's file, a FIFO, a symbolic link to anything) is
 * never opened, never followed, never truncated; the next name is tried. Shared by the
 * disk cache and the trace. The fd, or -1 with errno set. */
static int gpuhal__temp_file_create(const char* path, char* temp, size_t temp_size) {
  int fd = -1, attempt, n;
  errno = 0;
  for (attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    unsigned k = __atomic_add_fetch(&gpuhal__temp_counter, 1, __ATOMIC_RELAXED);
    /* The clock and a stack address tell apart processes of equal pids (containers). */
    uint64_t salt = (uint64_t)gpuhal_now_ns() ^ ((uint64_t)(uintptr_t)&k << 16) ^ ((uint64_t)attempt << 56);
    n = snprintf(temp, temp_size, "%s.tmp.%ld.%u.%llx", path, (long)getpid(), k,
                 (unsigned long long)salt);
    if (n <= 0 || (size_t)n >= temp_size) {
      errno = ENAMETOOLONG;
      return -1;
    }
    fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) return -1;
  }
  return fd;
}

/* Writes header + payload to a unique temporary file in the directory, fsyncs it and
 * renames it over `path`: readers (other processes too) see the old file, the new file or
 * none, never a part. 0 or an errno; `what` says which step failed. */
static int gpuhal__disk_write_file(const char* path, const unsigned char* header,
                                   const void* payload, size_t payload_size, const char** what) {
  char temp[GPUHAL__PATH_MAX + 64];
  int err = 0;
  int fd = gpuhal__temp_file_create(path, temp, sizeof(temp));
  if (fd < 0) {
    *what = "creating a temporary file";
    return errno ? errno : EEXIST;
  }
  err = gpuhal__write_all(fd, header, GPUHAL__DISK_HEADER_SIZE);
  if (!err) err = gpuhal__write_all(fd, payload, payload_size);
  *what = "writing";
  if (!err && fsync(fd) != 0) err = errno, *what = "fsync";
  if (close(fd) != 0 && !err) err = errno, *what = "close";
  if (!err && rename(temp, path) != 0) err = errno, *what = "rename";
  if (err) unlink(temp);
  return err;
}

typedef struct gpuhal__disk_file_s {
  int64_t mtime_ns;
  uint64_t bytes;
  char name[256];
} gpuhal__disk_file_t;

static int gpuhal__disk_file_older(const void* a, const void* b) {
  const gpuhal__disk_file_t* x = (const gpuhal__disk_file_t*)a;
  const gpuhal__disk_file_t* y = (const gpuhal__disk_file_t*)b;
  if (x->mtime_ns != y->mtime_ns) return x->mtime_ns < y->mtime_ns ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int gpuhal__ends_with(const char* s, const char* suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* Keeps the directory within disk_max_bytes: lists the cache files, and removes the least
 * recently used (oldest mtime) until the rest fit, never `keep` (just written). Files may
 * vanish under the scan (other processes evict too): that is fine. Also removes temporary
 * files a crashed writer left (older than an hour). */
static void gpuhal__disk_evict(gpuhal__module_cache_t* cache, const char* keep) {
  const gpuhal_allocator_t* allocator = cache->device->allocator;
  gpuhal__disk_file_t* files = NULL;
  size_t count = 0, capacity = 0, i;
  uint64_t total = 0;
  struct timespec now;
  struct dirent* de;
  char path[GPUHAL__PATH_MAX];
  DIR* dir = opendir(cache->disk_dir);
  if (!dir) return;
  clock_gettime(CLOCK_REALTIME, &now);
  while ((de = readdir(dir)) != NULL) {
    struct stat st;
    int temp = strstr(de->d_name, GPUHAL__DISK_TEMP_MARK) != NULL;
    if (!temp && !gpuhal__ends_with(de->d_name, GPUHAL__DISK_SUFFIX)) continue;
    if (strlen(de->d_name) >= sizeof(files[0].name)) continue;
    /* lstat: a link or a FIFO planted here is neither counted nor followed. */
    if (!gpuhal__disk_path(cache, de->d_name, path, sizeof(path)) || lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (temp) {
      if ((int64_t)now.tv_sec - (int64_t)st.st_mtim.tv_sec > 3600) unlink(path);
      continue;
    }
    if (count == capacity) {
      size_t grown_capacity = capacity ? capacity * 2 : 64;
      gpuhal__disk_file_t* grown =
          (gpuhal__disk_file_t*)gpuhal__alloc(allocator, grown_capacity * sizeof(gpuhal__disk_file_t));
      if (!grown) break;
      if (files) memcpy(grown, files, count * sizeof(gpuhal__disk_file_t));
      gpuhal__free(allocator, files);
      files = grown;
      capacity = grown_capacity;
    }
    files[count].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    files[count].bytes = (uint64_t)st.st_size;
    strcpy(files[count].name, de->d_name);
    total += (uint64_t)st.st_size;
    ++count;
  }
  closedir(dir);
  if (total > cache->disk_max_bytes && count) {
    qsort(files, count, sizeof(gpuhal__disk_file_t), gpuhal__disk_file_older);
    for (i = 0; i < count && total > cache->disk_max_bytes; ++i) {
      if (keep && strcmp(files[i].name, keep) == 0) continue;
      if (!gpuhal__disk_path(cache, files[i].name, path, sizeof(path))) continue;
      if (unlink(path) == 0) {
        GPUHAL__STAT_ADD(cache, disk_evictions);
        gpuhal__log(cache->device->logger, GPUHAL_LOG_DEBUG, "module cache: evicted %s from disk", files[i].name);
      } else if (errno != ENOENT) {
        continue; /* still there: it still counts */
      }
      total -= files[i].bytes;
    }
  }
  gpuhal__free(allocator, files);
}

/* Stores a compiled payload for `key`; a failure turns the disk cache off (one warning). */
static void gpuhal__disk_store(gpuhal__module_cache_t* cache, const gpuhal__disk_key_t* key, const char* name,
                               const void* payload, size_t payload_size) {
  unsigned char header[GPUHAL__DISK_HEADER_SIZE];
  char path[GPUHAL__PATH_MAX];
  const char* what = "";
  int err;
  if (!gpuhal__disk_path(cache, name, path, sizeof(path))) {
    gpuhal__disk_disable(cache, "path too long", ENAMETOOLONG);
    return;
  }
  gpuhal__disk_header_encode(key, payload, payload_size, header);
  err = gpuhal__disk_write_file(path, header, payload, payload_size, &what);
  if (err) {
    gpuhal__disk_disable(cache, what, err);
    return;
  }
  GPUHAL__STAT_ADD(cache, disk_writes);
  gpuhal__disk_evict(cache, name);
}

/* ---- building a module (outside the cache lock) ---- */
#define GPUHAL__JIT_LOG_BYTES 4096

/* Fills JIT options: an error log, then the entry's code-changing options. */
static unsigned gpuhal__jit_options_fill(const gpuhal__jit_options_t* jit, char* log, CUjit_option* options,
                                         void** values) {
  unsigned count = 0;
  if (log) {
    options[count] = CU_JIT_ERROR_LOG_BUFFER;
    values[count++] = log;
    options[count] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
    values[count++] = (void*)(uintptr_t)GPUHAL__JIT_LOG_BYTES;
  }
  if (jit && jit->optimization_level >= 0) {
    options[count] = CU_JIT_OPTIMIZATION_LEVEL;
    values[count++] = (void*)(uintptr_t)jit->optimization_level;
  }
  if (jit && jit->max_registers > 0) {
    options[count] = CU_JIT_MAX_REGISTERS;
    values[count++] = (void*)(uintptr_t)jit->max_registers;
  }
  return count;
}

static gpuhal_status_t gpuhal__jit_annotate(gpuhal_status_t st, const char* log, const char* what, size_t size) {
  if (!st) return NULL;
  st = gpuhal_status_annotate(st, "loading a %s image of %zu bytes", what, size);
  if (log && log[0]) st = gpuhal_status_annotate(st, "JIT log: %s", log);
  return st;
}

/* cuModuleLoadDataEx of `image` with an error log, in the device's context. The log is
 * appended to the status of a failed load (for PTX it says which line failed). `jit` is
 * NULL for a cubin or fatbin (nothing to compile). */
static gpuhal_status_t gpuhal__module_load_image(gpuhal_device_t* device, const void* image, size_t size,
                                                 gpuhal__image_format_t format, const gpuhal__jit_options_t* jit,
                                                 CUmodule* out_module) {
  CUjit_option options[4];
  void* values[4];
  char* log = (char*)gpuhal__calloc(device->allocator, GPUHAL__JIT_LOG_BYTES);
  unsigned count = gpuhal__jit_options_fill(jit, log, options, values);
  gpuhal__context_scope_t scope;
  gpuhal_status_t st = gpuhal__device_park_pause(device, "loading a module");
  if (!st) st = gpuhal__context_enter(device, &scope);
  if (!st) {
    st = GPUHAL__CU(device->cu, cuModuleLoadDataEx, (out_module, image, count, options, values));
    gpuhal__context_leave(device, &scope);
  }
  gpuhal__device_park_resume(device);
  st = gpuhal__jit_annotate(st, log, gpuhal__image_format_name(format), size);
  gpuhal__free(device->allocator, log);
  return st;
}

/* A compiled cubin owned by gpuhal (copied out of the link state) or by the hook. */
typedef struct gpuhal__cubin_s {
  void* bytes;
  size_t size;
  int from_hook;
} gpuhal__cubin_t;

static void gpuhal__cubin_free(gpuhal_device_t* device, gpuhal__cubin_t* cubin) {
  if (!cubin->bytes) return;
  if (!cubin->from_hook) {
    gpuhal__free(device->allocator, cubin->bytes);
  } else if (device->params.compile_free_fn) {
    device->params.compile_free_fn(device->params.compile_user, cubin->bytes);
  }
  cubin->bytes = NULL;
}

/* Runs cuLinkCreate / AddData / Complete in the current context; copies the cubin out. */
static gpuhal_status_t gpuhal__link_in_context(gpuhal_device_t* device, const gpuhal__module_entry_t* entry, char* log,
                                               gpuhal__cubin_t* out) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  CUjit_option options[4];
  void* values[4];
  unsigned count = gpuhal__jit_options_fill(&entry->jit, log, options, values);
  CUlinkState link = NULL;
  void* linked = NULL;
  size_t linked_size = 0;
  gpuhal_status_t st = GPUHAL__CU(cu, cuLinkCreate, (count, options, values, &link));
  if (!st)
    st = GPUHAL__CU(cu, cuLinkAddData,
                    (link, CU_JIT_INPUT_PTX, entry->image, entry->size + 1, "gpuhal_module", 0, NULL, NULL));
  if (!st) st = GPUHAL__CU(cu, cuLinkComplete, (link, &linked, &linked_size));
  if (!st && (!linked || linked_size == 0))
    st = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "cuLinkComplete returned an empty cubin");
  if (!st) {
    out->bytes = gpuhal__alloc(device->allocator, linked_size);
    if (!out->bytes) st = gpuhal__status_oom("a linked cubin", linked_size);
    if (!st) memcpy(out->bytes, linked, linked_size);
    out->size = linked_size;
  }
  if (link) {
    gpuhal_status_t destroyed = GPUHAL__CU(cu, cuLinkDestroy, (link));
    if (!st) st = destroyed;
    else gpuhal_status_free(destroyed);
  }
  return st;
}

/* PTX -> cubin with the driver's linker (cuLink*), in the device's context. */
static gpuhal_status_t gpuhal__compile_with_driver(gpuhal_device_t* device, const gpuhal__module_entry_t* entry,
                                                   gpuhal__cubin_t* out) {
  char* log = (char*)gpuhal__calloc(device->allocator, GPUHAL__JIT_LOG_BYTES);
  gpuhal__context_scope_t scope;
  gpuhal_status_t st = gpuhal__context_enter(device, &scope);
  if (!st) {
    st = gpuhal__link_in_context(device, entry, log, out);
    gpuhal__context_leave(device, &scope);
  }
  if (st) {
    gpuhal__cubin_free(device, out);
    st = gpuhal__jit_annotate(st, log, "PTX (cuLink)", entry->size);
  }
  gpuhal__free(device->allocator, log);
  return st;
}

/* PTX -> cubin with the user's compile hook; what it returns must be a cubin or fatbin. */
static gpuhal_status_t gpuhal__compile_with_hook(gpuhal_device_t* device, const gpuhal__module_entry_t* entry,
                                                 gpuhal__cubin_t* out) {
  gpuhal__image_format_t format;
  size_t format_size;
  void* bytes = NULL;
  size_t size = 0;
  gpuhal_status_t st = device->params.compile_fn(device->params.compile_user, entry->image, entry->size,
                                                 device->info.compute_capability_major,
                                                 device->info.compute_capability_minor, &bytes, &size);
  if (st) return gpuhal_status_annotate(st, "the compile hook failed on a PTX image of %zu bytes", entry->size);
  out->bytes = bytes;
  out->size = size;
  out->from_hook = 1;
  if (!bytes || size == 0) {
    st = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "the compile hook returned success but no cubin (%p, %zu bytes)",
                            bytes, size);
  } else {
    gpuhal_status_t bad = gpuhal__image_detect(bytes, size, "the compile hook's output", &format, &format_size);
    if (bad || format == GPUHAL__IMAGE_PTX)
      st = gpuhal_status_make(GPUHAL_STATUS_INTERNAL, "the compile hook returned %zu bytes that are not a cubin or fatbin%s%s",
                              size, bad ? ": " : " (PTX text)", bad ? gpuhal_status_message(bad) : "");
    gpuhal_status_free(bad);
  }
  if (st) gpuhal__cubin_free(device, out);
  return st;
}

static void gpuhal__disk_key_make(gpuhal_device_t* device, const gpuhal__module_entry_t* entry, gpuhal__disk_key_t* key) {
  memset(key, 0, sizeof(*key));
  gpuhal__blake2b(entry->image, entry->size, key->image_digest, sizeof(key->image_digest));
  key->image_size = entry->size;
  key->image_format = (uint32_t)entry->format;
  key->cc_major = device->info.compute_capability_major;
  key->cc_minor = device->info.compute_capability_minor;
  key->driver_version = device->info.driver_version;
  key->optimization_level = entry->jit.optimization_level < 0 ? 4 : entry->jit.optimization_level;
  key->max_registers = entry->jit.max_registers;
  key->compiler = device->params.compile_fn ? GPUHAL__COMPILER_HOOK : GPUHAL__COMPILER_DRIVER;
}

/* Tries the disk cache: 1 (and *out_module) when a valid file loaded. A bad file or one
 * the driver refuses is reported at debug level and left to be replaced. */
static int gpuhal__build_from_disk(gpuhal__module_cache_t* cache, const gpuhal__disk_key_t* key, const char* name,
                                   CUmodule* out_module) {
  gpuhal_device_t* device = cache->device;
  char path[GPUHAL__PATH_MAX];
  void* file = NULL;
  const void* payload = NULL;
  size_t payload_size = 0;
  gpuhal_status_t st;
  if (!gpuhal__disk_path(cache, name, path, sizeof(path))) return 0;
  st = gpuhal__disk_lookup(cache, key, path, &file, &payload, &payload_size);
  if (!st) {
    st = gpuhal__module_load_image(device, payload, payload_size, GPUHAL__IMAGE_CUBIN, NULL, out_module);
    gpuhal__free(device->allocator, file);
    if (!st) {
      GPUHAL__STAT_ADD(cache, disk_hits);
      return 1;
    }
  }
  GPUHAL__STAT_ADD(cache, disk_misses);
  if (gpuhal_status_code(st) != GPUHAL_STATUS_NOT_FOUND) {
    GPUHAL__STAT_ADD(cache, disk_rejects);
    gpuhal__log(device->logger, GPUHAL_LOG_DEBUG, "module cache: ignoring disk cache file %s: %s", path,
                gpuhal_status_message(st));
  }
  gpuhal_status_free(st);
  return 0;
}

/* PTX through a cubin: from disk, else compiled (driver linker or hook), loaded, stored. */
static gpuhal_status_t gpuhal__build_via_cubin(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry) {
  gpuhal_device_t* device = cache->device;
  gpuhal__disk_key_t key;
  char name[256];
  gpuhal__cubin_t cubin;
  gpuhal_status_t st;
  int disk = __atomic_load_n(&cache->disk_enabled, __ATOMIC_ACQUIRE);
  memset(&cubin, 0, sizeof(cubin));
  if (disk) {
    gpuhal__disk_key_make(device, entry, &key);
    gpuhal__disk_file_name(&key, name, sizeof(name));
    if (gpuhal__build_from_disk(cache, &key, name, &entry->module)) return NULL;
  }
  GPUHAL__STAT_ADD(cache, compiles);
  st = device->params.compile_fn ? gpuhal__compile_with_hook(device, entry, &cubin)
                                 : gpuhal__compile_with_driver(device, entry, &cubin);
  if (!st) st = gpuhal__module_load_image(device, cubin.bytes, cubin.size, GPUHAL__IMAGE_CUBIN, NULL, &entry->module);
  if (!st && disk) gpuhal__disk_store(cache, &key, name, cubin.bytes, cubin.size);
  gpuhal__cubin_free(device, &cubin);
  return st;
}

/* Builds entry->module. PTX goes through a cubin when there is a disk cache or a compile
 * hook; otherwise the driver compiles it directly (and may use its own JIT cache). */
static gpuhal_status_t gpuhal__module_build(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry) {
  gpuhal_device_t* device = cache->device;
  if (entry->format == GPUHAL__IMAGE_PTX &&
      (device->params.compile_fn || __atomic_load_n(&cache->disk_enabled, __ATOMIC_ACQUIRE)))
    return gpuhal__build_via_cubin(cache, entry);
  GPUHAL__STAT_ADD(cache, compiles);
  return gpuhal__module_load_image(device, entry->image, entry->size, entry->format,
                                   entry->format == GPUHAL__IMAGE_PTX ? &entry->jit : NULL, &entry->module);
}

/* ---- the in-memory cache ---- */

static void gpuhal__module_entry_free(gpuhal_device_t* device, gpuhal__module_entry_t* entry) {
  gpuhal__function_record_t* record = entry->functions;
  while (record) {
    gpuhal__function_record_t* next = record->next;
    gpuhal__free(device->allocator, record->params);
    gpuhal__free(device->allocator, record);
    record = next;
  }
  gpuhal_status_free(entry->failure);
  gpuhal__mutex_destroy(&entry->functions_mutex);
  gpuhal__free(device->allocator, entry->image);
  gpuhal__free(device->allocator, entry);
}

typedef struct gpuhal__unload_work_s {
  gpuhal_device_t* device;
  gpuhal__list_node_t* victims;
} gpuhal__unload_work_t;

/* On the worker (its context always current: no context switch that could fail and leak
 * the module): unloads and frees every entry chained on the list. */
static gpuhal_status_t gpuhal__module_cache_unload_on_worker(void* arg) {
  gpuhal__unload_work_t* work = (gpuhal__unload_work_t*)arg;
  gpuhal_device_t* device = work->device;
  gpuhal__list_node_t* node;
  while ((node = gpuhal__list_pop_front(work->victims)) != NULL) {
    gpuhal__module_entry_t* entry = GPUHAL__CONTAINER_OF(node, gpuhal__module_entry_t, lru);
    if (entry->module) {
      gpuhal_status_t st = gpuhal__device_unload_module(device, entry->module);
      if (st) {
        gpuhal__log(device->logger, GPUHAL_LOG_WARN, "module unload failed: %s", gpuhal_status_message(st));
        gpuhal_status_free(st);
      }
    }
    gpuhal__module_entry_free(device, entry);
  }
  return NULL;
}

/* Unloads the entries chained on `victims` (through their lru links), outside the lock,
 * from any thread. */
static void gpuhal__module_cache_unload_list(gpuhal_device_t* device, gpuhal__list_node_t* victims) {
  gpuhal__unload_work_t work;
  if (gpuhal__list_empty(victims)) return;
  work.device = device;
  work.victims = victims;
  gpuhal_status_free(gpuhal__worker_call(device, gpuhal__module_cache_unload_on_worker, &work));
}

/* Unloads one entry (see gpuhal__module_cache_unload_list). */
static void gpuhal__module_entry_unload(gpuhal_device_t* device, gpuhal__module_entry_t* entry) {
  gpuhal__list_node_t victims;
  gpuhal__list_init(&victims);
  gpuhal__list_push_back(&victims, &entry->lru);
  gpuhal__module_cache_unload_list(device, &victims);
}

static gpuhal__module_entry_t** gpuhal__module_cache_bucket(gpuhal__module_cache_t* cache, uint64_t hash) {
  return &cache->buckets[hash & (cache->bucket_count - 1)];
}

/* Doubles the bucket array when the table gets full (best effort: a failed allocation
 * only makes chains longer). Under the lock. */
static void gpuhal__module_cache_grow_locked(gpuhal__module_cache_t* cache) {
  size_t count = cache->bucket_count * 2, i;
  gpuhal__module_entry_t** buckets;
  if (cache->table_count < cache->bucket_count) return;
  buckets = (gpuhal__module_entry_t**)gpuhal__calloc(cache->device->allocator, count * sizeof(*buckets));
  if (!buckets) return;
  for (i = 0; i < cache->bucket_count; ++i) {
    gpuhal__module_entry_t* e = cache->buckets[i];
    while (e) {
      gpuhal__module_entry_t* next = e->hash_next;
      gpuhal__module_entry_t** slot = &buckets[e->hash & (count - 1)];
      e->hash_next = *slot;
      *slot = e;
      e = next;
    }
  }
  gpuhal__free(cache->device->allocator, cache->buckets);
  cache->buckets = buckets;
  cache->bucket_count = count;
}

static void gpuhal__module_cache_insert_locked(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry) {
  gpuhal__module_entry_t** slot;
  gpuhal__module_cache_grow_locked(cache);
  slot = gpuhal__module_cache_bucket(cache, entry->hash);
  entry->hash_next = *slot;
  *slot = entry;
  entry->in_table = 1;
  cache->table_count++;
}

static void gpuhal__module_cache_unlink_locked(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry) {
  gpuhal__module_entry_t** slot = gpuhal__module_cache_bucket(cache, entry->hash);
  while (*slot && *slot != entry) slot = &(*slot)->hash_next;
  if (*slot) *slot = entry->hash_next;
  entry->hash_next = NULL;
  entry->in_table = 0;
  cache->table_count--;
  if (entry->state == GPUHAL__ENTRY_READY) {
    cache->ready_count--;
    cache->ready_bytes -= entry->size;
  }
}

/* The entry for the key, or NULL. Under the lock. The bytes are compared in full. */
static gpuhal__module_entry_t* gpuhal__module_cache_find_locked(gpuhal__module_cache_t* cache,
                                                                const gpuhal__module_entry_t* key) {
  gpuhal__module_entry_t* e = *gpuhal__module_cache_bucket(cache, key->hash);
  for (; e; e = e->hash_next) {
    if (e->hash == key->hash && e->size == key->size && e->format == key->format &&
        e->jit.optimization_level == key->jit.optimization_level && e->jit.max_registers == key->jit.max_registers &&
        memcmp(e->image, key->image, key->size) == 0)
      return e;
  }
  return NULL;
}

/* Unloads unreferenced entries, least recently used first, while a limit is exceeded
 * (`everything`: all of them). They are moved to `victims`. Under the lock. */
static uint64_t gpuhal__module_cache_evict_locked(gpuhal__module_cache_t* cache, int everything,
                                                  gpuhal__list_node_t* victims) {
  uint64_t evicted = 0;
  while (!gpuhal__list_empty(&cache->idle) &&
         (everything || cache->ready_count > cache->max_entries || cache->ready_bytes > cache->max_bytes)) {
    gpuhal__list_node_t* node = gpuhal__list_pop_front(&cache->idle);
    gpuhal__module_entry_t* e = GPUHAL__CONTAINER_OF(node, gpuhal__module_entry_t, lru);
    gpuhal__module_cache_unlink_locked(cache, e);
    gpuhal__list_push_back(victims, &e->lru);
    ++evicted;
  }
  return evicted;
}

/* Drops one reference under the lock. A READY entry left unreferenced joins the LRU list
 * (most recently used end); a FAILED one is freed by its last holder: 1 then. */
static int gpuhal__module_entry_unref_locked(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry,
                                             gpuhal__list_node_t* victims) {
  if (--entry->refcount > 0) return 0;
  if (entry->state == GPUHAL__ENTRY_READY && entry->in_table) {
    gpuhal__list_push_back(&cache->idle, &entry->lru);
    __atomic_add_fetch(&cache->stats.evictions, gpuhal__module_cache_evict_locked(cache, 0, victims), __ATOMIC_RELAXED);
    return 0;
  }
  return 1;
}

static gpuhal_status_t gpuhal__module_cache_create(gpuhal_device_t* device) {
  gpuhal__module_cache_t* cache = NULL;
  const gpuhal_device_params_t* params = &device->params;
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__alloc_zeroed(device->allocator, sizeof(*cache), "the module cache", (void**)&cache));
  cache->device = device;
  cache->bucket_count = 64;
  cache->buckets = (gpuhal__module_entry_t**)gpuhal__calloc(device->allocator, 64 * sizeof(*cache->buckets));
  if (!cache->buckets) {
    gpuhal__free(device->allocator, cache);
    return gpuhal__status_oom("the module cache table", 64 * sizeof(*cache->buckets));
  }
  gpuhal__mutex_init(&cache->mutex);
  gpuhal__cond_init(&cache->flight_done);
  gpuhal__list_init(&cache->idle);
  cache->max_entries = params->module_cache_max_entries ? params->module_cache_max_entries
                                                        : GPUHAL__MODULE_CACHE_DEFAULT_ENTRIES;
  cache->max_bytes = params->module_cache_max_bytes ? params->module_cache_max_bytes : GPUHAL__MODULE_CACHE_DEFAULT_BYTES;
  cache->disk_max_bytes = params->module_cache_disk_max_bytes ? params->module_cache_disk_max_bytes
                                                              : GPUHAL__MODULE_CACHE_DEFAULT_DISK_BYTES;
  device->module_cache = cache;
  if (params->module_cache_dir && params->module_cache_dir[0]) {
    int err;
    cache->disk_dir = (char*)params->module_cache_dir; /* the device owns the copy */
    cache->disk_enabled = 1;
    err = gpuhal__make_dirs(cache->disk_dir);
    if (err) gpuhal__disk_disable(cache, "creating it", err);
  }
  return NULL;
}

/* Called by device destruction after every executable is gone (a leaked executable's
 * module is unloaded here anyway: the context is about to go). */
static void gpuhal__module_cache_destroy(gpuhal_device_t* device) {
  gpuhal__module_cache_t* cache = gpuhal__module_cache_of(device);
  gpuhal__list_node_t victims;
  size_t i;
  if (!cache) return;
  if (cache->builtins && cache->builtins_destroy) cache->builtins_destroy(device, cache->builtins);
  cache->builtins = NULL;
  gpuhal__list_init(&victims);
  gpuhal__mutex_lock(&cache->mutex);
  for (i = 0; i < cache->bucket_count; ++i) {
    while (cache->buckets[i]) {
      gpuhal__module_entry_t* e = cache->buckets[i];
      if (e->refcount > 0)
        gpuhal__log(device->logger, GPUHAL_LOG_WARN, "device destroyed with a %s module still referenced %d time(s)",
                    gpuhal__image_format_name(e->format), (int)e->refcount);
      if (e->refcount == 0) gpuhal__list_remove(&e->lru);
      gpuhal__module_cache_unlink_locked(cache, e);
      gpuhal__list_push_back(&victims, &e->lru);
    }
  }
  gpuhal__mutex_unlock(&cache->mutex);
  gpuhal__module_cache_unload_list(device, &victims);
  gpuhal__cond_destroy(&cache->flight_done);
  gpuhal__mutex_destroy(&cache->mutex);
  gpuhal__free(device->allocator, cache->buckets);
  gpuhal__free(device->allocator, cache);
  device->module_cache = NULL;
}

/* Makes a new LOADING entry holding a NUL-terminated copy of the image. */
static gpuhal_status_t gpuhal__module_entry_create(gpuhal_device_t* device, const gpuhal__module_entry_t* key,
                                                   gpuhal__module_entry_t** out_entry) {
  gpuhal__module_entry_t* entry = NULL;
  GPUHAL__RETURN_IF_ERROR(
      gpuhal__alloc_zeroed(device->allocator, sizeof(*entry), "a module cache entry", (void**)&entry));
  entry->image = gpuhal__alloc(device->allocator, key->size + 1);
  if (!entry->image) {
    gpuhal__free(device->allocator, entry);
    return gpuhal__status_oom("a copy of a kernel image", key->size + 1);
  }
  memcpy(entry->image, key->image, key->size);
  ((char*)entry->image)[key->size] = 0;
  gpuhal__list_init(&entry->lru);
  gpuhal__mutex_init(&entry->functions_mutex);
  entry->refcount = 1;
  entry->state = GPUHAL__ENTRY_LOADING;
  entry->format = key->format;
  entry->jit = key->jit;
  entry->hash = key->hash;
  entry->size = key->size;
  entry->context = device->context;
  *out_entry = entry;
  return NULL;
}

/* Takes a reference on a found entry and waits while another thread builds it. Under the
 * lock (released while waiting). NULL: *out_entry is ready; else the build's error. */
static gpuhal_status_t gpuhal__module_cache_take_locked(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* e,
                                                        gpuhal__list_node_t* victims, int* out_free) {
  gpuhal_status_t st;
  *out_free = 0;
  if (e->refcount++ == 0 && e->state == GPUHAL__ENTRY_READY) gpuhal__list_remove(&e->lru); /* not idle now */
  GPUHAL__STAT_ADD(cache, hits);
  if (e->state == GPUHAL__ENTRY_LOADING) {
    GPUHAL__STAT_ADD(cache, waits);
    while (e->state == GPUHAL__ENTRY_LOADING) gpuhal__cond_wait(&cache->flight_done, &cache->mutex);
  }
  if (e->state == GPUHAL__ENTRY_READY) return NULL;
  st = gpuhal_status_clone(e->failure);
  *out_free = gpuhal__module_entry_unref_locked(cache, e, victims);
  return st;
}

/* Publishes the outcome of a build: READY, or FAILED (out of the table, so the next load
 * tries again). Returns the loader's status (a copy of the failure). */
static gpuhal_status_t gpuhal__module_cache_finish(gpuhal__module_cache_t* cache, gpuhal__module_entry_t* entry,
                                                   gpuhal_status_t build_status, gpuhal__list_node_t* victims,
                                                   int* out_free) {
  gpuhal_status_t st = NULL;
  *out_free = 0;
  gpuhal__mutex_lock(&cache->mutex);
  if (build_status) {
    gpuhal__module_cache_unlink_locked(cache, entry);
    entry->state = GPUHAL__ENTRY_FAILED;
    entry->failure = build_status;
    st = gpuhal_status_clone(build_status);
    GPUHAL__STAT_ADD(cache, compile_failures);
    *out_free = gpuhal__module_entry_unref_locked(cache, entry, victims);
  } else {
    entry->state = GPUHAL__ENTRY_READY;
    cache->ready_count++;
    cache->ready_bytes += entry->size;
    __atomic_add_fetch(&cache->stats.evictions, gpuhal__module_cache_evict_locked(cache, 0, victims), __ATOMIC_RELAXED);
  }
  gpuhal__cond_broadcast(&cache->flight_done);
  gpuhal__mutex_unlock(&cache->mutex);
  return st;
}

/* THE load path: a retained, READY entry for (image, JIT options) on this device. A hit
 * costs a fast hash of the image and one byte compare under the lock. A miss inserts a
 * LOADING entry (so that concurrent loads of the image wait for it instead of compiling),
 * builds it outside the lock, and publishes the result. */
static gpuhal_status_t gpuhal__module_cache_load(gpuhal_device_t* device, const void* image, size_t size,
                                                 const gpuhal__jit_options_t* jit_or_null,
                                                 gpuhal__module_entry_t** out_entry) {
  gpuhal__module_cache_t* cache = gpuhal__module_cache_of(device);
  gpuhal__module_entry_t key;
  gpuhal__module_entry_t* found;
  gpuhal__module_entry_t* entry = NULL;
  gpuhal__list_node_t victims;
  gpuhal_status_t st = NULL;
  int free_entry = 0;
  *out_entry = NULL;
  memset(&key, 0, sizeof(key));
  key.jit = jit_or_null ? *jit_or_null : gpuhal__jit_options_default();
  gpuhal__image_sniff(image, size, &key.format, &key.size);
  key.image = (void*)image;
  key.hash = gpuhal__hash_fast64(image, key.size,
                                 (uint64_t)key.format ^ ((uint64_t)(uint32_t)key.jit.optimization_level << 8) ^
                                     ((uint64_t)(uint32_t)key.jit.max_registers << 40));
  gpuhal__list_init(&victims);
  gpuhal__mutex_lock(&cache->mutex);
  found = gpuhal__module_cache_find_locked(cache, &key);
  if (!found) {
    /* Check and copy the image outside the lock, then look again: another thread may
     * have won. */
    gpuhal__image_format_t format;
    size_t checked_size;
    gpuhal__mutex_unlock(&cache->mutex);
    GPUHAL__RETURN_IF_ERROR(gpuhal__image_detect(image, size, "gpuhal_executable_load", &format, &checked_size));
    GPUHAL_ASSERT(format == key.format && checked_size == key.size);
    GPUHAL__RETURN_IF_ERROR(gpuhal__module_entry_create(device, &key, &entry));
    gpuhal__mutex_lock(&cache->mutex);
    found = gpuhal__module_cache_find_locked(cache, &key);
    if (!found) {
      gpuhal__module_cache_insert_locked(cache, entry);
      GPUHAL__STAT_ADD(cache, misses);
    }
  }
  if (found) st = gpuhal__module_cache_take_locked(cache, found, &victims, &free_entry);
  gpuhal__mutex_unlock(&cache->mutex);
  if (found) {
    if (entry) gpuhal__module_entry_free(device, entry); /* lost the race: unused */
    if (free_entry) gpuhal__module_entry_free(device, found);
    gpuhal__module_cache_unload_list(device, &victims);
    if (!st) *out_entry = found;
    return st;
  }
  st = gpuhal__module_cache_finish(cache, entry, gpuhal__module_build(cache, entry), &victims, &free_entry);
  if (free_entry) gpuhal__module_entry_free(device, entry);
  gpuhal__module_cache_unload_list(device, &victims);
  if (!st) *out_entry = entry;
  return st;
}

/* Drops one reference (any thread). The entry stays loaded, unreferenced, until it is
 * evicted, trimmed or the device goes. */
static void gpuhal__module_cache_release(gpuhal_device_t* device, gpuhal__module_entry_t* entry) {
  gpuhal__module_cache_t* cache = gpuhal__module_cache_of(device);
  gpuhal__list_node_t victims;
  int free_entry;
  gpuhal__list_init(&victims);
  gpuhal__mutex_lock(&cache->mutex);
  free_entry = gpuhal__module_entry_unref_locked(cache, entry, &victims);
  gpuhal__mutex_unlock(&cache->mutex);
  if (free_entry) gpuhal__module_entry_unload(device, entry);
  gpuhal__module_cache_unload_list(device, &victims);
}

GPUHAL_API gpuhal_status_t gpuhal_device_module_cache_trim(gpuhal_device_t* device) {
  gpuhal__module_cache_t* cache;
  gpuhal__list_node_t victims;
  GPUHAL__CHECK_HANDLE(device, GPUHAL__MAGIC_DEVICE);
  cache = gpuhal__module_cache_of(device);
  gpuhal__list_init(&victims);
  gpuhal__mutex_lock(&cache->mutex);
  __atomic_add_fetch(&cache->stats.trimmed, gpuhal__module_cache_evict_locked(cache, 1, &victims), __ATOMIC_RELAXED);
  gpuhal__mutex_unlock(&cache->mutex);
  gpuhal__module_cache_unload_list(device, &victims);
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_device_module_cache_stats(gpuhal_device_t* device,
                                                            gpuhal_module_cache_stats_t* out_stats) {
  gpuhal__module_cache_t* cache;
  GPUHAL__CHECK_HANDLE(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG(out_stats != NULL, "out_stats", "must not be NULL");
  cache = gpuhal__module_cache_of(device);
  memset(out_stats, 0, sizeof(*out_stats));
  gpuhal__mutex_lock(&cache->mutex);
#define GPUHAL__STAT_COPY(field) out_stats->field = __atomic_load_n(&cache->stats.field, __ATOMIC_RELAXED)
  GPUHAL__STAT_COPY(hits);
  GPUHAL__STAT_COPY(misses);
  GPUHAL__STAT_COPY(waits);
  GPUHAL__STAT_COPY(compiles);
  GPUHAL__STAT_COPY(compile_failures);
  GPUHAL__STAT_COPY(disk_hits);
  GPUHAL__STAT_COPY(disk_misses);
  GPUHAL__STAT_COPY(disk_rejects);
  GPUHAL__STAT_COPY(disk_writes);
  GPUHAL__STAT_COPY(disk_evictions);
  GPUHAL__STAT_COPY(evictions);
  GPUHAL__STAT_COPY(trimmed);
#undef GPUHAL__STAT_COPY
  out_stats->entries = cache->ready_count;
  out_stats->bytes = cache->ready_bytes;
  out_stats->max_entries = cache->max_entries;
  out_stats->max_bytes = cache->max_bytes;
  out_stats->disk_enabled = __atomic_load_n(&cache->disk_enabled, __ATOMIC_ACQUIRE);
  gpuhal__mutex_unlock(&cache->mutex);
  return NULL;
}

/* ---- executables and kernels ---- */
struct gpuhal_kernel_s {
  gpuhal__object_t object; /* magic only: a kernel lives exactly as long as its executable */
  gpuhal_kernel_t* next;
  gpuhal_executable_t* executable;
  CUfunction function;
  gpuhal_kernel_info_t info;
  char* name; /* owned; apart from the object, so kernel objects have one size (base.h's pool) */
};

struct gpuhal_executable_s {
  gpuhal__object_t object;
  gpuhal_device_t* device; /* retained */
  gpuhal__module_entry_t* entry;
  gpuhal__mutex_t mutex; /* guards kernels */
  gpuhal_kernel_t* kernels;
};

GPUHAL_API gpuhal_status_t gpuhal_executable_load(gpuhal_device_t* device, const void* image, size_t size,
                                                  gpuhal_executable_t** out_executable) {
  gpuhal_executable_t* executable = NULL;
  gpuhal__module_entry_t* entry = NULL;
  GPUHAL__CHECK_ARG(out_executable != NULL, "out_executable", "must not be NULL");
  *out_executable = NULL;
  GPUHAL__CHECK_OBJECT(device, GPUHAL__MAGIC_DEVICE);
  GPUHAL__CHECK_ARG(image != NULL, "image", "must not be NULL");
  GPUHAL__CHECK_ARG(size > 0, "size", "must be > 0");
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_alloc(&device->driver->objects, GPUHAL__MAGIC_EXECUTABLE, sizeof(*executable),
                                               "an executable", (void**)&executable));
  {
    gpuhal_status_t st = gpuhal__module_cache_load(device, image, size, NULL, &entry);
    if (st) {
      gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_EXECUTABLE, executable);
      return st;
    }
  }
  gpuhal__object_init(&executable->object, GPUHAL__MAGIC_EXECUTABLE);
  gpuhal__device_retain_ref(device);
  executable->device = device;
  executable->entry = entry;
  gpuhal__mutex_init(&executable->mutex);
  *out_executable = executable;
  return NULL;
}

GPUHAL_API void gpuhal_executable_retain(gpuhal_executable_t* executable) {
  if (!executable || gpuhal__atomic_load(&executable->object.magic) != GPUHAL__MAGIC_EXECUTABLE) return;
  gpuhal__object_user_retain(&executable->object);
}

static void gpuhal__executable_destroy(gpuhal_executable_t* executable) {
  gpuhal_device_t* device = executable->device;
  gpuhal_kernel_t* kernel = executable->kernels;
  while (kernel) {
    gpuhal_kernel_t* next = kernel->next;
    gpuhal__free(device->allocator, kernel->name);
    gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_KERNEL, kernel);
    kernel = next;
  }
  gpuhal__module_cache_release(device, executable->entry);
  gpuhal__mutex_destroy(&executable->mutex);
  gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_EXECUTABLE, executable);
  gpuhal__device_release_ref(device);
}

/* gpuhal's own references (command buffers that dispatch its kernels). */
static void gpuhal__executable_retain_ref(gpuhal_executable_t* executable) {
  gpuhal__object_retain(&executable->object);
}
static void gpuhal__executable_release_ref(gpuhal_executable_t* executable) {
  if (gpuhal__object_release(&executable->object)) gpuhal__executable_destroy(executable);
}

GPUHAL_API void gpuhal_executable_release(gpuhal_executable_t* executable) {
  if (!executable || gpuhal__atomic_load(&executable->object.magic) != GPUHAL__MAGIC_EXECUTABLE) return;
  if (!gpuhal__object_user_release(&executable->object)) {
    gpuhal__log_extra_release(executable->device->logger, __func__, "an executable");
    return;
  }
  gpuhal__executable_release_ref(executable);
}

/* cuFuncGetParamInfo for index 0, 1, ... until the driver says there is no such index. */
static gpuhal_status_t gpuhal__function_query_params(gpuhal_device_t* device, gpuhal__function_record_t* record) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  uint32_t count = 0, capacity = 0, i;
  uint32_t* offsets = NULL;
  record->info.param_count = GPUHAL_KERNEL_PARAM_COUNT_UNKNOWN;
  if (!cu->cuFuncGetParamInfo) return NULL;
  for (;;) {
    size_t offset = 0, size = 0;
    CUresult r = cu->cuFuncGetParamInfo(record->function, count, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break; /* index past the last parameter */
    if (r != CUDA_SUCCESS) {
      /* The driver has the entry point but cannot say for this kernel: checks are off. */
      gpuhal__log(device->logger, GPUHAL_LOG_DEBUG, "cuFuncGetParamInfo(%s, %u) returned %d: parameter checks off",
                  record->name, count, (int)r);
      gpuhal__free(device->allocator, offsets);
      return NULL;
    }
    if (count == capacity) {
      uint32_t grown_capacity = capacity ? capacity * 2 : 8;
      uint32_t* grown = (uint32_t*)gpuhal__alloc(device->allocator, sizeof(uint32_t) * 2 * grown_capacity);
      if (!grown) {
        gpuhal__free(device->allocator, offsets);
        return gpuhal__status_oom("kernel parameter info", sizeof(uint32_t) * 2 * grown_capacity);
      }
      if (offsets) memcpy(grown, offsets, sizeof(uint32_t) * 2 * capacity);
      gpuhal__free(device->allocator, offsets);
      offsets = grown;
      capacity = grown_capacity;
    }
    offsets[2 * count] = (uint32_t)offset;
    offsets[2 * count + 1] = (uint32_t)size;
    ++count;
  }
  /* Store as two arrays: offsets[0..count), sizes[count..2*count). */
  if (count) {
    record->params = (uint32_t*)gpuhal__alloc(device->allocator, sizeof(uint32_t) * 2 * count);
    if (!record->params) {
      gpuhal__free(device->allocator, offsets);
      return gpuhal__status_oom("kernel parameter info", sizeof(uint32_t) * 2 * count);
    }
    for (i = 0; i < count; ++i) {
      record->params[i] = offsets[2 * i];
      record->params[count + i] = offsets[2 * i + 1];
    }
    record->info.param_offsets = record->params;
    record->info.param_sizes = record->params + count;
  }
  gpuhal__free(device->allocator, offsets);
  record->info.param_count = count;
  return NULL;
}

static gpuhal_status_t gpuhal__function_query_attributes(gpuhal_device_t* device, gpuhal__function_record_t* record) {
  const gpuhal__cuda_symbols_t* cu = device->cu;
  gpuhal_kernel_info_t* info = &record->info;
  CUfunction f = record->function;
  int optin = device->info.max_shared_memory_per_block_optin;
  GPUHAL__RETURN_IF_ERROR(
      GPUHAL__CU(cu, cuFuncGetAttribute, (&info->max_threads_per_block, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f)));
  GPUHAL__RETURN_IF_ERROR(
      GPUHAL__CU(cu, cuFuncGetAttribute, (&info->static_shared_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f)));
  GPUHAL__RETURN_IF_ERROR(GPUHAL__CU(
      cu, cuFuncGetAttribute, (&info->max_dynamic_shared_bytes, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f)));
  GPUHAL__RETURN_IF_ERROR(GPUHAL__CU(cu, cuFuncGetAttribute, (&info->num_regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f)));
  GPUHAL__RETURN_IF_ERROR(
      GPUHAL__CU(cu, cuFuncGetAttribute, (&info->local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f)));
  GPUHAL__RETURN_IF_ERROR(
      GPUHAL__CU(cu, cuFuncGetAttribute, (&info->const_bytes, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, f)));
  GPUHAL__RETURN_IF_ERROR(GPUHAL__CU(cu, cuFuncGetAttribute, (&info->ptx_version, CU_FUNC_ATTRIBUTE_PTX_VERSION, f)));
  GPUHAL__RETURN_IF_ERROR(
      GPUHAL__CU(cu, cuFuncGetAttribute, (&info->binary_version, CU_FUNC_ATTRIBUTE_BINARY_VERSION, f)));
  info->max_dynamic_shared_optin_bytes = optin > info->static_shared_bytes ? optin - info->static_shared_bytes : 0;
  return gpuhal__function_query_params(device, record);
}

/* On the memop path, loads a kernel looked up lazily (CUDA_MODULE_LOADING=LAZY, the default)
 * right away, in the device's context. On an H200 the first graph instantiation of a kernel
 * never used blocks while any stream of the context is parked on a value wait, holding a
 * driver lock that cuEventRecord and cuLaunchKernel on every other thread then wait for: a
 * GRAPH command buffer recorded while work is parked stopped the whole device
 * (tools/probe/park_probe.c). After cuFuncLoad (CUDA 12.4) it does not block. */
static gpuhal_status_t gpuhal__function_load_now(gpuhal_device_t* device, CUfunction function) {
  if (!device->driver->memops || !device->cu->cuFuncLoad) return NULL;
  return GPUHAL__CU(device->cu, cuFuncLoad, (function));
}

/* cuModuleGetFunction and the attributes, in the device's context. */
static gpuhal_status_t gpuhal__function_record_create(gpuhal_device_t* device, gpuhal__module_entry_t* entry,
                                                      const char* name, gpuhal__function_record_t** out_record) {
  size_t name_length = strlen(name);
  gpuhal__function_record_t* record = NULL;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  CUresult r;
  GPUHAL_ASSERT(entry->context == device->context); /* a module is only ever used in its own context */
  GPUHAL__RETURN_IF_ERROR(gpuhal__alloc_zeroed(device->allocator, sizeof(*record) + name_length + 1,
                                               "a kernel function record", (void**)&record));
  record->name = (char*)(record + 1);
  memcpy(record->name, name, name_length + 1);
  record->info.name = record->name;
  st = gpuhal__context_enter(device, &scope);
  if (!st) {
    r = device->cu->cuModuleGetFunction(&record->function, entry->module, name);
    if (r == CUDA_ERROR_NOT_FOUND) {
      st = gpuhal_status_make(GPUHAL_STATUS_NOT_FOUND, "gpuhal_executable_kernel: no kernel named '%s' in this %s executable",
                              name, gpuhal__image_format_name(entry->format));
    } else if (r != CUDA_SUCCESS) {
      st = gpuhal__cuda_status(device->cu, r, "cuModuleGetFunction", __FILE__, __LINE__); /* not called again */
    } else {
      st = gpuhal__function_query_attributes(device, record);
      if (!st) st = gpuhal__function_load_now(device, record->function);
    }
    gpuhal__context_leave(device, &scope);
  }
  if (st) {
    gpuhal__free(device->allocator, record->params);
    gpuhal__free(device->allocator, record);
    return st;
  }
  *out_record = record;
  return NULL;
}

/* The entry's record for `name`, looked up in the driver on first use (then cached for
 * every executable of the entry). */
static gpuhal_status_t gpuhal__module_entry_function(gpuhal_device_t* device, gpuhal__module_entry_t* entry,
                                                     const char* name, gpuhal__function_record_t** out_record) {
  gpuhal__function_record_t* record;
  gpuhal_status_t st = NULL;
  gpuhal__mutex_lock(&entry->functions_mutex);
  for (record = entry->functions; record; record = record->next)
    if (strcmp(record->name, name) == 0) break;
  if (!record) {
    st = gpuhal__function_record_create(device, entry, name, &record);
    if (!st) {
      record->next = entry->functions;
      entry->functions = record;
    }
  }
  if (!st) *out_record = record;
  gpuhal__mutex_unlock(&entry->functions_mutex);
  return st;
}

/* Under the executable mutex. */
static gpuhal_kernel_t* gpuhal__executable_find_kernel_locked(gpuhal_executable_t* executable, const char* name) {
  gpuhal_kernel_t* k;
  for (k = executable->kernels; k; k = k->next)
    if (strcmp(k->name, name) == 0) return k;
  return NULL;
}

/* A kernel object of this executable over the entry's cached function record. */
static gpuhal_status_t gpuhal__kernel_create(gpuhal_executable_t* executable, const char* name,
                                             gpuhal_kernel_t** out_kernel) {
  gpuhal_device_t* device = executable->device;
  size_t name_length = strlen(name);
  gpuhal__function_record_t* record = NULL;
  gpuhal_kernel_t* kernel = NULL;
  GPUHAL__RETURN_IF_ERROR(gpuhal__module_entry_function(device, executable->entry, name, &record));
  GPUHAL__RETURN_IF_ERROR(gpuhal__object_alloc(&device->driver->objects, GPUHAL__MAGIC_KERNEL, sizeof(*kernel),
                                               "a kernel", (void**)&kernel));
  kernel->name = (char*)gpuhal__alloc(device->allocator, name_length + 1);
  if (!kernel->name) {
    gpuhal__object_free(&device->driver->objects, GPUHAL__MAGIC_KERNEL, kernel);
    return gpuhal__status_oom("a kernel's name", name_length + 1);
  }
  gpuhal__object_init(&kernel->object, GPUHAL__MAGIC_KERNEL);
  memcpy(kernel->name, name, name_length + 1);
  kernel->executable = executable;
  kernel->function = record->function;
  gpuhal__mutex_lock(&executable->entry->functions_mutex);
  kernel->info = record->info; /* param arrays stay the record's: the entry outlives the executable */
  gpuhal__mutex_unlock(&executable->entry->functions_mutex);
  kernel->info.name = kernel->name;
  *out_kernel = kernel;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_executable_kernel(gpuhal_executable_t* executable, const char* name,
                                                    gpuhal_kernel_t** out_kernel) {
  gpuhal_kernel_t* kernel;
  GPUHAL__CHECK_ARG(out_kernel != NULL, "out_kernel", "must not be NULL");
  *out_kernel = NULL;
  GPUHAL__CHECK_OBJECT(executable, GPUHAL__MAGIC_EXECUTABLE);
  GPUHAL__CHECK_ARG(name != NULL, "name", "must not be NULL");
  GPUHAL__CHECK_ARG(name[0] != 0, "name", "must not be empty");
  gpuhal__mutex_lock(&executable->mutex);
  kernel = gpuhal__executable_find_kernel_locked(executable, name);
  if (!kernel) {
    /* Created under the executable's lock: a lookup is rare and this keeps one object per name. */
    gpuhal_status_t st = gpuhal__kernel_create(executable, name, &kernel);
    if (st) {
      gpuhal__mutex_unlock(&executable->mutex);
      return st;
    }
    kernel->next = executable->kernels;
    executable->kernels = kernel;
  }
  gpuhal__mutex_unlock(&executable->mutex);
  *out_kernel = kernel;
  return NULL;
}

GPUHAL_API gpuhal_status_t gpuhal_kernel_info(gpuhal_kernel_t* kernel, gpuhal_kernel_info_t* out_info) {
  GPUHAL__CHECK_OBJECT(kernel, GPUHAL__MAGIC_KERNEL);
  GPUHAL__CHECK_ARG(out_info != NULL, "out_info", "must not be NULL");
  gpuhal__mutex_lock(&kernel->executable->mutex);
  *out_info = kernel->info;
  gpuhal__mutex_unlock(&kernel->executable->mutex);
  return NULL;
}

/* Later kernel objects of the entry start from the value the CUfunction now has. */
static void gpuhal__module_entry_note_shared(gpuhal__module_entry_t* entry, const char* name, int bytes) {
  gpuhal__function_record_t* record;
  gpuhal__mutex_lock(&entry->functions_mutex);
  for (record = entry->functions; record; record = record->next)
    if (strcmp(record->name, name) == 0) record->info.max_dynamic_shared_bytes = bytes;
  gpuhal__mutex_unlock(&entry->functions_mutex);
}

GPUHAL_API gpuhal_status_t gpuhal_kernel_set_max_dynamic_shared(gpuhal_kernel_t* kernel, uint32_t bytes) {
  gpuhal_device_t* device;
  gpuhal__context_scope_t scope;
  gpuhal_status_t st;
  GPUHAL__CHECK_OBJECT(kernel, GPUHAL__MAGIC_KERNEL);
  device = kernel->executable->device;
  if (bytes > (uint32_t)kernel->info.max_dynamic_shared_optin_bytes)
    return gpuhal_status_make(GPUHAL_STATUS_OUT_OF_RANGE,
                              "gpuhal_kernel_set_max_dynamic_shared: argument 'bytes' (%u) exceeds what kernel '%s' "
                              "can have on this device (%d: the opt-in limit less %d bytes of static shared memory)",
                              bytes, kernel->name, kernel->info.max_dynamic_shared_optin_bytes,
                              kernel->info.static_shared_bytes);
  GPUHAL__RETURN_IF_ERROR(gpuhal__context_enter(device, &scope));
  st = GPUHAL__CU(device->cu, cuFuncSetAttribute,
                  (kernel->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes));
  gpuhal__context_leave(device, &scope);
  if (st) return gpuhal_status_annotate(st, "gpuhal_kernel_set_max_dynamic_shared('%s', %u)", kernel->name, bytes);
  gpuhal__mutex_lock(&kernel->executable->mutex);
  __atomic_store_n(&kernel->info.max_dynamic_shared_bytes, (int)bytes, __ATOMIC_RELAXED);
  gpuhal__mutex_unlock(&kernel->executable->mutex);
  gpuhal__module_entry_note_shared(kernel->executable->entry, kernel->name, (int)bytes);
  return NULL;
}
