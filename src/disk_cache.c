/* disk_cache: the module cache's files: names, the header format, validation, atomic
 * writes and eviction (disk_cache.h). */
#include "disk_cache.h"
#include "hash.h"
#include "module_image.h"

/* ---- the disk-cache file format ----
 *
 * A file is a 128-byte header, the image it was compiled from (PTX, or CUDA C source with
 * its options) and the payload (a cubin or fatbin; NVRTC's PTX). Integers little-endian:
 *     0  8  magic "GPUHALMC"
 *     8  4  format version (2)
 *    12  4  header size (128)
 *    16  8  image hash (the module cache's fast hash; it names the file)
 *    24  8  image size (the image's bytes follow the header)
 *    32  4  image format (1: PTX, 2: relocatable cubin, 16: CUDA C source and options)
 *    36  4  compute capability major     40  4  minor
 *    44  4  driver version (e.g. 13000)
 *    48  4  JIT optimization level       52  4  JIT max registers
 *    56  4  compiler (0: driver cuLink, 1: the user's compile hook, 2: NVRTC)
 *    60  4  reserved (0)
 *    64  8  payload size (the file is exactly 128 + image size + this)
 *    72  8  payload checksum (fast64, seeded)
 *    80 24  reserved (0)
 *   104  8  header checksum (fast64 of bytes 0..103, seeded)
 *   112 16  reserved (0)
 * Everything is checked before the payload is used, and the stored image is compared byte
 * for byte with the one being loaded: a hit is exact without a cryptographic digest (a
 * hash collision costs a compile, never the wrong code). */
#define GPUHAL__DISK_MAGIC "GPUHALMC"
#define GPUHAL__DISK_FORMAT_VERSION 2u
#define GPUHAL__DISK_HEADER_SIZE 128u
#define GPUHAL__DISK_SEED_HEADER 0x67707568616C6831ull  /* "gpuhalh1" */
#define GPUHAL__DISK_SEED_PAYLOAD 0x67707568616C7031ull /* "gpuhalp1" */
#define GPUHAL__DISK_MAX_FILE_BYTES ((uint64_t)1 << 30)
#define GPUHAL__DISK_SUFFIX ".gpuhal"
#define GPUHAL__DISK_TEMP_MARK ".gpuhal.tmp."

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

/* Writes the 128-byte header of a file holding key->image and `payload`. */
static void gpuhal__disk_header_encode(const gpuhal__disk_key_t* key, const void* payload, size_t payload_size,
                                       unsigned char* header) {
  memset(header, 0, GPUHAL__DISK_HEADER_SIZE);
  memcpy(header, GPUHAL__DISK_MAGIC, 8);
  gpuhal__put_le32(header + 8, GPUHAL__DISK_FORMAT_VERSION);
  gpuhal__put_le32(header + 12, GPUHAL__DISK_HEADER_SIZE);
  gpuhal__put_le64(header + 16, key->image_hash);
  gpuhal__put_le64(header + 24, key->image_size);
  gpuhal__put_le32(header + 32, key->image_format);
  gpuhal__put_le32(header + 36, (uint32_t)key->cc_major);
  gpuhal__put_le32(header + 40, (uint32_t)key->cc_minor);
  gpuhal__put_le32(header + 44, (uint32_t)key->driver_version);
  gpuhal__put_le32(header + 48, (uint32_t)key->optimization_level);
  gpuhal__put_le32(header + 52, (uint32_t)key->max_registers);
  gpuhal__put_le32(header + 56, key->compiler);
  gpuhal__put_le64(header + 64, (uint64_t)payload_size);
  gpuhal__put_le64(header + 72, gpuhal__hash_fast64(payload, payload_size, GPUHAL__DISK_SEED_PAYLOAD));
  gpuhal__put_le64(header + 104, gpuhal__hash_fast64(header, 104, GPUHAL__DISK_SEED_HEADER));
}

/* The key a header names; its image is the copy that follows the header (the caller has
 * checked that the file holds image_size bytes after it). */
static void gpuhal__disk_header_key(const unsigned char* header, gpuhal__disk_key_t* key) {
  memset(key, 0, sizeof(*key));
  key->image_hash = gpuhal__le64(header + 16);
  key->image_size = gpuhal__le64(header + 24);
  key->image = header + GPUHAL__DISK_HEADER_SIZE;
  key->image_format = gpuhal__le32(header + 32);
  key->cc_major = (int32_t)gpuhal__le32(header + 36);
  key->cc_minor = (int32_t)gpuhal__le32(header + 40);
  key->driver_version = (int32_t)gpuhal__le32(header + 44);
  key->optimization_level = (int32_t)gpuhal__le32(header + 48);
  key->max_registers = (int32_t)gpuhal__le32(header + 52);
  key->compiler = gpuhal__le32(header + 56);
}

/* Everything but the image bytes (compared last: they are the only costly part). */
static int gpuhal__disk_key_fields_equal(const gpuhal__disk_key_t* a, const gpuhal__disk_key_t* b) {
  return a->image_hash == b->image_hash && a->image_size == b->image_size && a->image_format == b->image_format &&
         a->cc_major == b->cc_major && a->cc_minor == b->cc_minor && a->driver_version == b->driver_version &&
         a->optimization_level == b->optimization_level && a->max_registers == b->max_registers &&
         a->compiler == b->compiler;
}

static int gpuhal__disk_reserved_zero(const unsigned char* p, size_t size) {
  size_t i;
  for (i = 0; i < size; ++i)
    if (p[i]) return 0;
  return 1;
}

/* Checks a file's header against the file's size and the key it must have been made for:
 * everything but the image bytes and the payload. *out_found is the header's key (its
 * image pointing just past the header) and *out_payload_size the payload's size. */
static gpuhal_status_t gpuhal__disk_header_check(const unsigned char* p, uint64_t size,
                                                 const gpuhal__disk_key_t* expected, gpuhal__disk_key_t* out_found,
                                                 uint64_t* out_payload_size) {
  uint64_t body, payload_size;
  if (size < GPUHAL__DISK_HEADER_SIZE)
    return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "truncated: %llu bytes, less than the %u-byte header",
                              (unsigned long long)size, GPUHAL__DISK_HEADER_SIZE);
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
  if (!gpuhal__disk_reserved_zero(p + 60, 4) || !gpuhal__disk_reserved_zero(p + 80, 24) ||
      !gpuhal__disk_reserved_zero(p + 112, 16))
    return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "reserved header bytes are not zero");
  gpuhal__disk_header_key(p, out_found);
  body = size - GPUHAL__DISK_HEADER_SIZE;
  payload_size = gpuhal__le64(p + 64);
  if (out_found->image_size > body || payload_size != body - out_found->image_size)
    return gpuhal_status_make(
        GPUHAL_STATUS_DATA_LOSS, "the header says %llu image and %llu payload bytes but the file has %llu after it",
        (unsigned long long)out_found->image_size, (unsigned long long)payload_size, (unsigned long long)body);
  if (!expected || !gpuhal__disk_key_fields_equal(out_found, expected))
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                              "made for another key (sm_%d%d, driver %d, compiler %u, image of %llu bytes)",
                              (int)out_found->cc_major, (int)out_found->cc_minor, (int)out_found->driver_version,
                              (unsigned)out_found->compiler, (unsigned long long)out_found->image_size);
  if (out_found->image_size && !expected->image)
    return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION, "no image to compare the file's with");
  if (payload_size == 0) return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "empty payload");
  *out_payload_size = payload_size;
  return NULL;
}

/* A stored image that differs from the one being loaded (same size and hash). */
static gpuhal_status_t gpuhal__disk_image_mismatch(const gpuhal__disk_key_t* found) {
  return gpuhal_status_make(GPUHAL_STATUS_FAILED_PRECONDITION,
                            "made for another image of the same size and hash (%016llx)",
                            (unsigned long long)found->image_hash);
}

/* Checks a payload against its header's checksum, and that it is a cubin or fatbin (or,
 * from NVRTC, PTX). */
static gpuhal_status_t gpuhal__disk_payload_check(const unsigned char* header, const unsigned char* payload,
                                                  size_t payload_size) {
  gpuhal__image_format_t format;
  size_t format_size;
  gpuhal_status_t st;
  if (gpuhal__hash_fast64(payload, payload_size, GPUHAL__DISK_SEED_PAYLOAD) != gpuhal__le64(header + 72))
    return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "payload checksum mismatch");
  st = gpuhal__image_detect(payload, payload_size, "disk cache payload", &format, &format_size);
  if (!st && format == GPUHAL__IMAGE_PTX && gpuhal__le32(header + 56) != GPUHAL__COMPILER_NVRTC)
    st = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "the payload is PTX text, not a cubin or fatbin");
  if (st) {
    gpuhal_status_t wrapped = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "bad payload: %s", gpuhal_status_message(st));
    gpuhal_status_free(st);
    return wrapped;
  }
  return NULL;
}

GPUHAL__PRIVATE void gpuhal__disk_file_name(const gpuhal__disk_key_t* key, char* out, size_t out_size) {
  snprintf(out, out_size, "%016llx-%llu-sm%d%d-drv%d-O%d-R%d-%s%s", (unsigned long long)key->image_hash,
           (unsigned long long)key->image_size, (int)key->cc_major, (int)key->cc_minor, (int)key->driver_version,
           (int)key->optimization_level, (int)key->max_registers,
           key->compiler == GPUHAL__COMPILER_HOOK    ? "hook"
           : key->compiler == GPUHAL__COMPILER_NVRTC ? "nvrtc"
                                                     : "driver",
           GPUHAL__DISK_SUFFIX);
}

GPUHAL__PRIVATE void gpuhal__disk_disable(gpuhal__disk_cache_t* disk, const char* what, int error) {
  int expected = 1;
  if (gpuhal__atomic_cas(&disk->enabled, &expected, 0))
    gpuhal__log(disk->device->logger, GPUHAL_LOG_WARN,
                "module cache: disk cache directory '%s' is not usable (%s: %s); caching in memory only", disk->dir,
                what, strerror(error));
}

GPUHAL__PRIVATE int gpuhal__make_dirs(const char* path) {
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

GPUHAL__PRIVATE int gpuhal__disk_path(const gpuhal__disk_cache_t* disk, const char* name, char* out, size_t out_size) {
  int n = snprintf(out, out_size, "%s/%s", disk->dir, name);
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
                                 S_ISFIFO(st->st_mode)   ? "a FIFO"
                                 : S_ISDIR(st->st_mode)  ? "a directory"
                                 : S_ISCHR(st->st_mode)  ? "a character device"
                                 : S_ISSOCK(st->st_mode) ? "a socket"
                                                         : "another kind");
    close(fd);
    return -1;
  }
  return fd;
}

/* Reads exactly `size` bytes at `offset`. 1 when all came. */
static int gpuhal__disk_pread_all(int fd, void* out, size_t size, uint64_t offset) {
  size_t done = 0;
  while (done < size) {
    ssize_t got = pread(fd, (unsigned char*)out + done, size - done, (off_t)(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return 0;
    done += (size_t)got;
  }
  return 1;
}

/* Compares the file's copy of the image (after the header) with `image`, through a small
 * buffer: a hit reads the image once, into memory that is already there. */
static gpuhal_status_t gpuhal__disk_image_compare(int fd, const gpuhal__disk_key_t* found, const void* image) {
  unsigned char chunk[8192];
  uint64_t at = 0;
  while (at < found->image_size) {
    size_t n = (size_t)GPUHAL__MIN((uint64_t)sizeof(chunk), found->image_size - at);
    if (!gpuhal__disk_pread_all(fd, chunk, n, GPUHAL__DISK_HEADER_SIZE + at))
      return gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "the file ended while its image was read");
    if (memcmp(chunk, (const unsigned char*)image + at, n) != 0) return gpuhal__disk_image_mismatch(found);
    at += n;
  }
  return NULL;
}

GPUHAL__PRIVATE gpuhal_status_t gpuhal__disk_lookup(gpuhal__disk_cache_t* disk, const gpuhal__disk_key_t* key,
                                                    const char* path, void** out_file, const void** out_payload,
                                                    size_t* out_payload_size) {
  gpuhal_device_t* device = disk->device;
  unsigned char header[GPUHAL__DISK_HEADER_SIZE];
  gpuhal__disk_key_t found;
  uint64_t payload_size = 0;
  unsigned char* payload = NULL;
  struct stat sb;
  gpuhal_status_t st;
  int fd;
  *out_file = NULL;
  *out_payload = NULL;
  *out_payload_size = 0;
  memset(header, 0, sizeof(header));
  memset(&sb, 0, sizeof(sb));
  fd = gpuhal__disk_open_regular(path, &sb, &st);
  if (fd < 0) return st;
  if (sb.st_size < 0 || (uint64_t)sb.st_size > GPUHAL__DISK_MAX_FILE_BYTES) {
    st = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "not a file of a sensible size");
  } else if ((uint64_t)sb.st_size >= GPUHAL__DISK_HEADER_SIZE &&
             !gpuhal__disk_pread_all(fd, header, GPUHAL__DISK_HEADER_SIZE, 0)) {
    st = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "the file ended while its header was read");
  } else {
    st = gpuhal__disk_header_check(header, (uint64_t)sb.st_size, key, &found, &payload_size);
  }
  if (!st) st = gpuhal__disk_image_compare(fd, &found, key->image);
  if (!st) {
    payload = (unsigned char*)gpuhal__alloc(device->allocator, (size_t)payload_size);
    if (!payload) st = gpuhal__status_oom("a disk cache file's payload", (size_t)payload_size);
  }
  if (!st && !gpuhal__disk_pread_all(fd, payload, (size_t)payload_size, GPUHAL__DISK_HEADER_SIZE + found.image_size))
    st = gpuhal_status_make(GPUHAL_STATUS_DATA_LOSS, "the file ended while its payload was read");
  if (!st) st = gpuhal__disk_payload_check(header, payload, (size_t)payload_size);
  if (!st) (void)futimens(fd, NULL); /* the LRU clock of the directory; may fail on a read-only dir: fine */
  close(fd);
  if (st) {
    gpuhal__free(device->allocator, payload);
    return st;
  }
  *out_file = payload;
  *out_payload = payload;
  *out_payload_size = (size_t)payload_size;
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

GPUHAL__PRIVATE int gpuhal__temp_file_create(const char* path, char* temp, size_t temp_size) {
  int fd = -1, attempt, n;
  errno = 0;
  for (attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    unsigned k = gpuhal__atomic_add_relaxed(&gpuhal__temp_counter, 1);
    /* The clock and a stack address tell apart processes of equal pids (containers). */
    uint64_t salt = (uint64_t)gpuhal_now_ns() ^ ((uint64_t)(uintptr_t)&k << 16) ^ ((uint64_t)attempt << 56);
    n = snprintf(temp, temp_size, "%s.tmp.%ld.%u.%llx", path, (long)getpid(), k, (unsigned long long)salt);
    if (n <= 0 || (size_t)n >= temp_size) {
      errno = ENAMETOOLONG;
      return -1;
    }
    fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) return -1;
  }
  return fd;
}

/* Writes header + image + payload to a unique temporary file in the directory, fsyncs it
 * and renames it over `path`: readers (other processes too) see the old file, the new file
 * or none, never a part. 0 or an errno; `what` says which step failed. */
static int gpuhal__disk_write_file(const char* path, const unsigned char* header, const gpuhal__disk_key_t* key,
                                   const void* payload, size_t payload_size, const char** what) {
  char temp[GPUHAL__PATH_MAX + 64];
  int err = 0;
  int fd = gpuhal__temp_file_create(path, temp, sizeof(temp));
  if (fd < 0) {
    *what = "creating a temporary file";
    return errno ? errno : EEXIST;
  }
  err = gpuhal__write_all(fd, header, GPUHAL__DISK_HEADER_SIZE);
  if (!err) err = gpuhal__write_all(fd, key->image, (size_t)key->image_size);
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
static void gpuhal__disk_evict(gpuhal__disk_cache_t* disk, const char* keep) {
  const gpuhal_allocator_t* allocator = disk->device->allocator;
  gpuhal__disk_file_t* files = NULL;
  size_t count = 0, capacity = 0, i;
  uint64_t total = 0;
  struct timespec now;
  struct dirent* de;
  char path[GPUHAL__PATH_MAX];
  DIR* dir = opendir(disk->dir);
  if (!dir) return;
  clock_gettime(CLOCK_REALTIME, &now);
  while ((de = readdir(dir)) != NULL) {
    struct stat st;
    int temp = strstr(de->d_name, GPUHAL__DISK_TEMP_MARK) != NULL;
    if (!temp && !gpuhal__ends_with(de->d_name, GPUHAL__DISK_SUFFIX)) continue;
    if (strlen(de->d_name) >= sizeof(files[0].name)) continue;
    /* lstat: a link or a FIFO planted here is neither counted nor followed. */
    if (!gpuhal__disk_path(disk, de->d_name, path, sizeof(path)) || lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (temp) {
      if ((int64_t)now.tv_sec - (int64_t)st.st_mtim.tv_sec > 3600) unlink(path);
      continue;
    }
    if (count == capacity) {
      gpuhal_status_t grown = gpuhal__grow(allocator, (void**)&files, &capacity, count + 1, sizeof(gpuhal__disk_file_t),
                                           "disk cache files");
      if (grown) {
        gpuhal_status_free(grown);
        break;
      }
    }
    files[count].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    files[count].bytes = (uint64_t)st.st_size;
    strcpy(files[count].name, de->d_name);
    total += (uint64_t)st.st_size;
    ++count;
  }
  closedir(dir);
  if (total > disk->max_bytes && count) {
    qsort(files, count, sizeof(gpuhal__disk_file_t), gpuhal__disk_file_older);
    for (i = 0; i < count && total > disk->max_bytes; ++i) {
      if (keep && strcmp(files[i].name, keep) == 0) continue;
      if (!gpuhal__disk_path(disk, files[i].name, path, sizeof(path))) continue;
      if (unlink(path) == 0) {
        GPUHAL__STAT_ADD(disk, evictions);
        gpuhal__log(disk->device->logger, GPUHAL_LOG_DEBUG, "module cache: evicted %s from disk", files[i].name);
      } else if (errno != ENOENT) {
        continue; /* still there: it still counts */
      }
      total -= files[i].bytes;
    }
  }
  gpuhal__free(allocator, files);
}

GPUHAL__PRIVATE void gpuhal__disk_store(gpuhal__disk_cache_t* disk, const gpuhal__disk_key_t* key, const char* name,
                                        const void* payload, size_t payload_size) {
  unsigned char header[GPUHAL__DISK_HEADER_SIZE];
  char path[GPUHAL__PATH_MAX];
  const char* what = "";
  int err;
  if (!gpuhal__disk_path(disk, name, path, sizeof(path))) {
    gpuhal__disk_disable(disk, "path too long", ENAMETOOLONG);
    return;
  }
  gpuhal__disk_header_encode(key, payload, payload_size, header);
  err = gpuhal__disk_write_file(path, header, key, payload, payload_size, &what);
  if (err == EISDIR || err == ENOTEMPTY || (err == EEXIST && strcmp(what, "rename") == 0)) {
    /* Something that is not a file sits at this entry's path (gpuhal only ever renames
     * files there): this entry is not kept; the rest of the cache works on. */
    gpuhal__log(disk->device->logger, GPUHAL_LOG_DEBUG, "module cache: cannot store %s (%s: %s); not kept", path, what,
                strerror(err));
    return;
  }
  if (err) {
    gpuhal__disk_disable(disk, what, err);
    return;
  }
  GPUHAL__STAT_ADD(disk, writes);
  gpuhal__disk_evict(disk, name);
}
