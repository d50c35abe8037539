/* The disk cache of the module cache (DESIGN §8): 70+ modules cold, warm and from disk
 * after a device release (results checked); a second process hits the cache; corrupted,
 * truncated, wrong-version, foreign and garbage files are ignored and rebuilt; the file
 * parser on arbitrary bytes; two processes filling one directory at once (with and
 * without eviction racing); LRU eviction by mtime with touch on hit; an unusable
 * directory degrading to memory with a warning; the compile hook's files kept apart; a
 * FIFO, socket, device or symbolic link at an entry's path refused without hanging (the
 * loads are bounded in time) and replaced by a regular file; a relocatable cubin linked
 * once. Child processes are this
 * binary run as `--child load ...` (see main). */
#define _DEFAULT_SOURCE 1 /* mknod, for a device node at an entry's path */
#include "test_internals.h"

#include "test_util.h"
#include "test_module_cache_util.h"

#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

#define MANY 72

/* Loads modules [first, first + count) (backwards when `reverse`) on a new device with
 * the disk cache in `dir`, checks every result. 0 or the number of failures. */
static int load_range(gpuhal_driver_t* driver, const char* dir, uint64_t disk_max_bytes, unsigned first, unsigned count,
                      int reverse, gpuhal_module_cache_stats_t* out_stats) {
  gpuhal_device_params_t params = mc_params(dir);
  gpuhal_device_t* device;
  unsigned i;
  int failures = 0;
  params.module_cache_disk_max_bytes = disk_max_bytes;
  device = mc_device(driver, 0, &params);
  if (!device) return 1;
  for (i = 0; i < count; ++i) {
    unsigned k = first + (reverse ? count - 1 - i : i);
    gpuhal_executable_t* exe = NULL;
    gpuhal_status_t st = mc_load(device, k, 0, &exe);
    if (!st) st = mc_run_check(device, exe, k);
    gpuhal_executable_release(exe);
    if (st) {
      fprintf(stderr, "  pid %ld: module %u: %s\n", (long)getpid(), k, gpuhal_status_message(st));
      gpuhal_status_free(st);
      failures++;
    }
  }
  if (out_stats) *out_stats = mc_stats(device);
  /* Everything the runs used is released once the queue is idle (a child exits next). */
  if (gpuhal_device_wait_idle(device, gpuhal_timeout_relative_ns(60ll * 1000000000ll)) != NULL) failures++;
  gpuhal_device_release(device);
  return failures;
}

/* ---- child mode: --child load DIR FIRST COUNT REVERSE DISK_MAX EXPECT_DISK_HITS EXPECT_COMPILES ---- */
static int child_main(int argc, char** argv) {
  gpuhal_driver_t* driver;
  gpuhal_module_cache_stats_t s;
  long expect_hits, expect_compiles;
  int failures;
  if (argc != 10 || strcmp(argv[2], "load") != 0) {
    fprintf(stderr, "child: bad arguments\n");
    return 2;
  }
  driver = mc_driver();
  if (!driver) return 3;
  memset(&s, 0, sizeof(s));
  failures = load_range(driver, argv[3], strtoull(argv[7], NULL, 10), (unsigned)atoi(argv[4]), (unsigned)atoi(argv[5]),
                        atoi(argv[6]), &s);
  expect_hits = atol(argv[8]);
  expect_compiles = atol(argv[9]);
  if (expect_hits >= 0 && (long)s.disk_hits != expect_hits) {
    fprintf(stderr, "  child: %llu disk hits, expected %ld\n", (unsigned long long)s.disk_hits, expect_hits);
    failures++;
  }
  if (expect_compiles >= 0 && (long)s.compiles != expect_compiles) {
    fprintf(stderr, "  child: %llu compiles, expected %ld\n", (unsigned long long)s.compiles, expect_compiles);
    failures++;
  }
  if (!s.disk_enabled) {
    fprintf(stderr, "  child: the disk cache turned itself off\n");
    failures++;
  }
  gpuhal_driver_release(driver);
  return failures ? 1 : 0;
}

static pid_t spawn_load(const char* dir, unsigned first, unsigned count, int reverse, uint64_t disk_max,
                        long expect_hits, long expect_compiles) {
  char a[6][32];
  const char* args[8];
  snprintf(a[0], 32, "%u", first);
  snprintf(a[1], 32, "%u", count);
  snprintf(a[2], 32, "%d", reverse);
  snprintf(a[3], 32, "%llu", (unsigned long long)disk_max);
  snprintf(a[4], 32, "%ld", expect_hits);
  snprintf(a[5], 32, "%ld", expect_compiles);
  args[0] = "load";
  args[1] = dir;
  args[2] = a[0];
  args[3] = a[1];
  args[4] = a[2];
  args[5] = a[3];
  args[6] = a[4];
  args[7] = a[5];
  return mc_spawn(args, 8);
}

/* ---- cases ---- */
TU_TEST(many_modules_cold_warm_and_from_disk) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe[MANY];
  gpuhal_module_cache_stats_t s;
  char dir[512];
  unsigned k;
  int round;
  if (!driver) TU_SKIP("no CUDA device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  params = mc_params(dir);
  for (round = 0; round < 2; ++round) { /* round 1: a new device: everything from disk */
    int64_t t0 = gpuhal_now_ns(), t1, t2;
    device = mc_device(driver, 0, &params);
    TU_REQUIRE(device != NULL);
    for (k = 0; k < MANY; ++k) {
      TU_CHECK_OK(mc_load(device, k, 0, &exe[k]));
      if (exe[k]) TU_CHECK_OK(mc_run_check(device, exe[k], k));
    }
    t1 = gpuhal_now_ns();
    s = mc_stats(device);
    TU_CHECK_EQ_INT(s.disk_enabled, 1);
    TU_CHECK_EQ_INT(s.misses, MANY);
    TU_CHECK_EQ_INT(s.compiles, round == 0 ? MANY : 0);
    TU_CHECK_EQ_INT(s.disk_writes, round == 0 ? MANY : 0);
    TU_CHECK_EQ_INT(s.disk_hits, round == 0 ? 0 : MANY);
    TU_CHECK_EQ_INT(s.disk_rejects, 0);
    for (k = 0; k < MANY; ++k) gpuhal_executable_release(exe[k]);
    for (k = 0; k < MANY; ++k) { /* warm: from memory */
      TU_CHECK_OK(mc_load(device, k, 0, &exe[k]));
      if (exe[k]) TU_CHECK_OK(mc_run_check(device, exe[k], k));
      gpuhal_executable_release(exe[k]);
    }
    t2 = gpuhal_now_ns();
    TU_CHECK_EQ_INT(mc_stats(device).hits, MANY);
    fprintf(stderr, "  round %d: %s %.1f ms, warm %.1f ms\n", round, round ? "from disk" : "cold", (t1 - t0) / 1e6,
            (t2 - t1) / 1e6);
    gpuhal_device_release(device);
  }
  TU_CHECK_EQ_INT(mc_dir_files(dir, NULL, NULL, 0), MANY);
  tu_remove_dir(dir);
  gpuhal_driver_release(driver);
}

TU_TEST(second_process_hits_the_disk_cache) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_module_cache_stats_t s;
  char dir[512];
  if (!driver) TU_SKIP("no CUDA device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  TU_CHECK_EQ_INT(load_range(driver, dir, 0, 5, 3, 0, &s), 0);
  TU_CHECK_EQ_INT(s.disk_writes, 3);
  TU_CHECK_EQ_INT(mc_wait(spawn_load(dir, 5, 3, 0, 0, 3, 0)), 0); /* 3 disk hits, 0 compiles */
  TU_CHECK_EQ_INT(mc_wait(spawn_load(dir, 5, 4, 0, 0, 3, 1)), 0); /* one more: compiled */
  tu_remove_dir(dir);
  gpuhal_driver_release(driver);
}

/* Rewrites the header checksum after an edit of the header (so that a later check fires). */
static void reseal_header(unsigned char* file) {
  gpuhal__put_le64(file + 104, gpuhal__hash_fast64(file, 104, GPUHAL__DISK_SEED_HEADER));
}

static int read_whole(const char* path, unsigned char** out, size_t* out_size) {
  FILE* f = fopen(path, "rb");
  long n;
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *out = (unsigned char*)malloc((size_t)n + 1);
  *out_size = fread(*out, 1, (size_t)n, f);
  fclose(f);
  return *out_size == (size_t)n;
}
static void write_whole(const char* path, const unsigned char* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f) return;
  if (size) fwrite(data, 1, size, f);
  fclose(f);
}

TU_TEST(bad_files_are_ignored_and_rebuilt) {
  static const char* const kinds[] = {"payload bit flip",
                                      "truncated",
                                      "wrong version",
                                      "foreign device",
                                      "garbage",
                                      "empty",
                                      "header only",
                                      "image byte changed (same hash)",
                                      "image size changed",
                                      "cut inside the PTX",
                                      "cut where the cubin starts",
                                      "padded"};
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_module_cache_stats_t s;
  char dir[512], path[4096];
  unsigned char* good = NULL;
  size_t good_size = 0;
  unsigned i;
  if (!driver) TU_SKIP("no CUDA device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  TU_CHECK_EQ_INT(load_range(driver, dir, 0, 3, 1, 0, &s), 0);
  TU_REQUIRE(mc_dir_files(dir, NULL, path, sizeof(path)) == 1);
  TU_REQUIRE(read_whole(path, &good, &good_size));
  for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); ++i) {
    unsigned char* bad = (unsigned char*)malloc(good_size + 64);
    size_t bad_size = good_size;
    size_t j;
    memcpy(bad, good, good_size);
    switch (i) {
      case 0: bad[good_size - 7] ^= 0x10; break;
      case 1: bad_size = good_size / 2; break;
      case 2:
        gpuhal__put_le32(bad + 8, GPUHAL__DISK_FORMAT_VERSION - 1);
        reseal_header(bad);
        break;
      case 3:
        gpuhal__put_le32(bad + 40, 7); /* compute capability minor */
        reseal_header(bad);
        break;
      case 4:
        for (j = 0; j < bad_size; ++j) bad[j] = (unsigned char)(j * 131 + 7);
        break;
      case 5: bad_size = 0; break;
      case 6: bad_size = GPUHAL__DISK_HEADER_SIZE; break;
      case 7: bad[GPUHAL__DISK_HEADER_SIZE + 20] ^= 0x01; break; /* the stored PTX: no checksum, compared */
      case 8:
        gpuhal__put_le64(bad + 24, gpuhal__le64(bad + 24) - 1);
        reseal_header(bad);
        break;
      case 9: bad_size = GPUHAL__DISK_HEADER_SIZE + 10; break;
      case 10: bad_size = GPUHAL__DISK_HEADER_SIZE + (size_t)gpuhal__le64(bad + 24); break;
      default:
        memset(bad + good_size, 0, 64);
        bad_size = good_size + 64;
        break;
    }
    write_whole(path, bad, bad_size);
    free(bad);
    mc_log_clear();
    TU_CHECK_EQ_INT(load_range(driver, dir, 0, 3, 1, 0, &s), 0); /* the right result anyway */
    if (s.disk_rejects != 1 || s.compiles != 1 || s.disk_writes != 1 || s.disk_hits != 0)
      TU_FAIL_AT(__FILE__, __LINE__, "%s: rejects %llu compiles %llu writes %llu hits %llu", kinds[i],
                 (unsigned long long)s.disk_rejects, (unsigned long long)s.compiles, (unsigned long long)s.disk_writes,
                 (unsigned long long)s.disk_hits);
    if (!mc_log_contains("ignoring disk cache file")) TU_FAIL_AT(__FILE__, __LINE__, "%s: no debug log", kinds[i]);
    TU_CHECK_EQ_INT(load_range(driver, dir, 0, 3, 1, 0, &s), 0); /* rebuilt: a hit now */
    TU_CHECK_EQ_INT(s.disk_hits, 1);
  }
  free(good);
  tu_remove_dir(dir);
  gpuhal_driver_release(driver);
}

/* A sound file that the driver refuses is a reject too, whatever error it gives:
 * CUDA_ERROR_NO_BINARY_FOR_GPU (NOT_FOUND as a status) as much as CUDA_ERROR_INVALID_IMAGE.
 * The module is rebuilt and the file rewritten either way. softcuda only (its faults). */
TU_TEST(a_file_the_driver_refuses_is_counted_as_a_reject) {
  static const char* const faults[] = {"cuModuleLoadDataEx@1=CUDA_ERROR_INVALID_IMAGE",
                                       "cuModuleLoadDataEx@1=CUDA_ERROR_NO_BINARY_FOR_GPU"};
  gpuhal_driver_t* driver;
  gpuhal_module_cache_stats_t s;
  char dir[512];
  unsigned i;
  if (!tu_softcuda()) TU_SKIP("needs softcuda's fault injection");
  driver = mc_driver();
  if (!driver) TU_SKIP("no CUDA device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  TU_CHECK_EQ_INT(load_range(driver, dir, 0, 3, 1, 0, &s), 0);
  for (i = 0; i < sizeof(faults) / sizeof(faults[0]); ++i) {
    TU_REQUIRE(tu_softcuda_faults(faults[i]) == 0);
    mc_log_clear();
    TU_CHECK_EQ_INT(load_range(driver, dir, 0, 3, 1, 0, &s), 0); /* the right result anyway */
    TU_CHECK_EQ_INT(tu_softcuda_faults(NULL), 0);
    if (s.disk_rejects != 1 || s.compiles != 1 || s.disk_writes != 1 || s.disk_hits != 0)
      TU_FAIL_AT(__FILE__, __LINE__, "%s: rejects %llu compiles %llu writes %llu hits %llu", faults[i],
                 (unsigned long long)s.disk_rejects, (unsigned long long)s.compiles, (unsigned long long)s.disk_writes,
                 (unsigned long long)s.disk_hits);
    if (!mc_log_contains("ignoring disk cache file")) TU_FAIL_AT(__FILE__, __LINE__, "%s: no debug log", faults[i]);
    TU_CHECK_EQ_INT(load_range(driver, dir, 0, 3, 1, 0, &s), 0); /* rewritten: a hit now */
    TU_CHECK_EQ_INT(s.disk_hits, 1);
  }
  tu_remove_dir(dir);
  gpuhal_driver_release(driver);
}

TU_TEST(parser_survives_arbitrary_bytes) {
  /* A valid file made by hand (softcuda's cubin format as payload: ELF magic then text),
   * then every truncation and many random corruptions: all rejected, none crash. */
  static const char payload[] = "\177ELF\nSOFTCUDA-CUBIN 1\n.version 8.0\n.target sm_75\n.address_size 64\n";
  static const char image[] = "ptx";
  gpuhal__disk_key_t key;
  unsigned char file[GPUHAL__DISK_HEADER_SIZE + 3 + sizeof(payload)];
  unsigned char copy[sizeof(file) + 16];
  const void* out = NULL;
  size_t out_size = 0, n;
  unsigned seed = 12345, i;
  memset(&key, 0, sizeof(key));
  key.image = image;
  key.image_size = 3;
  key.image_hash = gpuhal__hash_fast64(image, 3, 1);
  key.image_format = 1;
  key.cc_major = 9;
  key.driver_version = 13000;
  key.optimization_level = 4;
  gpuhal__disk_header_encode(&key, payload, sizeof(payload), file);
  memcpy(file + GPUHAL__DISK_HEADER_SIZE, image, 3);
  memcpy(file + GPUHAL__DISK_HEADER_SIZE + 3, payload, sizeof(payload));
  TU_CHECK_OK(gpuhal__disk_cache_parse(file, sizeof(file), &key, &out, &out_size));
  TU_CHECK(out == file + GPUHAL__DISK_HEADER_SIZE + 3 && out_size == sizeof(payload));
  for (n = 0; n < sizeof(file); ++n) {
    gpuhal_status_t st;
    memcpy(copy, file, n);
    st = gpuhal__disk_cache_parse(copy, n, &key, &out, &out_size);
    TU_CHECK(gpuhal_status_code(st) != GPUHAL_STATUS_OK);
    gpuhal_status_free(st);
  }
  TU_CHECK_STATUS(gpuhal__disk_cache_parse(NULL, 0, &key, &out, &out_size), GPUHAL_STATUS_DATA_LOSS, "truncated");
  for (i = 0; i < 20000; ++i) {
    unsigned flips = 1 + i % 4, f;
    gpuhal_status_t st;
    memcpy(copy, file, sizeof(file));
    for (f = 0; f < flips; ++f) {
      seed = seed * 1103515245u + 12345u;
      copy[(seed >> 8) % sizeof(file)] ^= (unsigned char)(1u << ((seed >> 4) & 7));
    }
    if (i % 5 == 0) reseal_header(copy); /* get past the header checksum sometimes */
    st = gpuhal__disk_cache_parse(copy, sizeof(file), &key, &out, &out_size);
    if (!st && memcmp(copy, file, sizeof(file)) != 0) {
      TU_FAIL_AT(__FILE__, __LINE__, "corruption %u accepted", i);
      break;
    }
    gpuhal_status_free(st);
    if (!st && out) TU_CHECK(out_size == sizeof(payload));
  }
  /* the image is compared byte for byte: same size and hash, other bytes, refused */
  key.image = "ptz";
  TU_CHECK_STATUS(gpuhal__disk_cache_parse(file, sizeof(file), &key, &out, &out_size),
                  GPUHAL_STATUS_FAILED_PRECONDITION, "another image of the same size and hash");
  key.image = image;
  /* the key fields each matter */
  key.cc_minor = 1;
  TU_CHECK_STATUS(gpuhal__disk_cache_parse(file, sizeof(file), &key, &out, &out_size),
                  GPUHAL_STATUS_FAILED_PRECONDITION, "another key");
}

TU_TEST(two_processes_fill_one_directory) {
  gpuhal_driver_t* driver = mc_driver();
  unsigned long long total = 0, bound;
  char dir[512];
  pid_t a, b;
  int files;
  if (!driver) TU_SKIP("no CUDA device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  /* Both compile and write the same 40 modules, in opposite orders, at the same time. */
  a = spawn_load(dir, 0, 40, 0, 0, -1, -1);
  b = spawn_load(dir, 0, 40, 1, 0, -1, -1);
  TU_CHECK_EQ_INT(mc_wait(a), 0);
  TU_CHECK_EQ_INT(mc_wait(b), 0);
  files = mc_dir_files(dir, &total, NULL, 0);
  TU_CHECK_EQ_INT(files, 40);
  TU_CHECK_EQ_INT(mc_wait(spawn_load(dir, 0, 40, 0, 0, 40, 0)), 0); /* a third: all from disk */
  tu_remove_dir(dir);
  /* Again with a bound of about ten files: the two evict under each other's feet. */
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  bound = total / 4;
  a = spawn_load(dir, 0, 40, 0, bound, -1, -1);
  b = spawn_load(dir, 0, 40, 1, bound, -1, -1);
  TU_CHECK_EQ_INT(mc_wait(a), 0);
  TU_CHECK_EQ_INT(mc_wait(b), 0);
  files = mc_dir_files(dir, &total, NULL, 0);
  TU_CHECK(files > 0 && total <= bound + 2 * (bound / 10 + 1) + 4096);
  fprintf(stderr, "  bounded: %d files, %llu bytes (bound %llu)\n", files, total, bound);
  tu_remove_dir(dir);
  gpuhal_driver_release(driver);
}

/* The path of module k's file in `dir` for `device`. */
static void path_of_module(const char* dir, unsigned k, gpuhal_device_t* device, char* path, size_t path_size) {
  /* The name comes from the module cache's hash of the PTX: recompute it the way the cache does. */
  char ptx[4096], name[256];
  gpuhal__module_entry_t entry;
  gpuhal__disk_key_t key;
  int n = gen_module_ptx(k, 0, ptx, sizeof(ptx));
  memset(&entry, 0, sizeof(entry));
  entry.image = ptx;
  entry.size = (size_t)n;
  entry.format = GPUHAL__IMAGE_PTX;
  entry.jit = gpuhal__jit_options_default();
  entry.hash = gpuhal__module_image_hash(entry.image, entry.size, entry.format, &entry.jit);
  gpuhal__disk_key_make(device, &entry, device->params.compile_fn != NULL, &key);
  gpuhal__disk_file_name(&key, name, sizeof(name));
  snprintf(path, path_size, "%s/%s", dir, name);
}

static int file_of_module_exists(const char* dir, unsigned k, gpuhal_device_t* device) {
  char path[4096];
  struct stat st;
  path_of_module(dir, k, device, path, sizeof(path));
  return stat(path, &st) == 0;
}

TU_TEST(disk_eviction_is_lru_with_touch_on_hit) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe = NULL;
  unsigned long long one_file = 0;
  char dir[512];
  unsigned k;
  if (!driver) TU_SKIP("no CUDA device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  params = mc_params(dir);
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  TU_CHECK_OK(mc_load(device, 70, 0, &exe));
  gpuhal_executable_release(exe);
  mc_dir_files(dir, &one_file, NULL, 0);
  gpuhal_device_release(device);
  /* Room for three files (the generated modules differ in size by a few bytes only). */
  params.module_cache_disk_max_bytes = one_file * 3 + one_file / 2;
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  for (k = 71; k < 73; ++k) {
    tu_sleep_ns(20000000);
    load_range(driver, dir, params.module_cache_disk_max_bytes, k, 1, 0, NULL);
  }
  TU_CHECK_EQ_INT(mc_dir_files(dir, NULL, NULL, 0), 3); /* 70 71 72 */
  tu_sleep_ns(20000000);
  load_range(driver, dir, params.module_cache_disk_max_bytes, 70, 1, 0, NULL); /* a hit touches 70 */
  tu_sleep_ns(20000000);
  load_range(driver, dir, params.module_cache_disk_max_bytes, 73, 1, 0, NULL); /* evicts 71, the LRU */
  TU_CHECK_EQ_INT(mc_dir_files(dir, NULL, NULL, 0), 3);
  TU_CHECK(file_of_module_exists(dir, 70, device));
  TU_CHECK(!file_of_module_exists(dir, 71, device));
  TU_CHECK(file_of_module_exists(dir, 72, device));
  TU_CHECK(file_of_module_exists(dir, 73, device));
  gpuhal_device_release(device);
  tu_remove_dir(dir);
  gpuhal_driver_release(driver);
}

TU_TEST(unusable_directory_degrades_to_memory) {
  gpuhal_driver_t* driver = mc_driver();
  char dir[512], blocked[600];
  const char* cases[2];
  int c;
  if (!driver) TU_SKIP("no CUDA device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  snprintf(blocked, sizeof(blocked), "%s/file", dir);
  write_whole(blocked, (const unsigned char*)"x", 1);
  strcat(blocked, "/cache"); /* under a regular file: cannot be created, even by root */
  cases[0] = blocked;
  cases[1] = "/proc/self"; /* exists, but no file can be created in it */
  for (c = 0; c < 2; ++c) {
    gpuhal_device_params_t params = mc_params(cases[c]);
    gpuhal_device_t* device;
    gpuhal_executable_t* exe = NULL;
    gpuhal_module_cache_stats_t s;
    mc_log_clear();
    device = mc_device(driver, 0, &params);
    TU_REQUIRE(device != NULL);
    TU_CHECK_OK(mc_load(device, 80, 0, &exe));
    if (exe) TU_CHECK_OK(mc_run_check(device, exe, 80));
    gpuhal_executable_release(exe);
    TU_CHECK_OK(mc_load(device, 80, 0, &exe)); /* memory still caches */
    gpuhal_executable_release(exe);
    s = mc_stats(device);
    TU_CHECK_EQ_INT(s.disk_enabled, 0);
    TU_CHECK_EQ_INT(s.disk_writes, 0);
    TU_CHECK_EQ_INT(s.hits, 1);
    if (!mc_log_contains("caching in memory only")) TU_FAIL_AT(__FILE__, __LINE__, "%s: no warning", cases[c]);
    gpuhal_device_release(device);
  }
  tu_remove_dir(dir);
  gpuhal_driver_release(driver);
}

/* A directory where one entry's file goes is that entry's problem, not the cache's: the
 * entry is not kept, every other one is (the whole disk cache was switched off). And a
 * relative directory is fixed when the device is made: a later chdir does not move it. */
TU_TEST(a_bad_entry_path_leaves_the_rest_of_the_cache_working) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params;
  gpuhal_device_t* device;
  gpuhal_executable_t* exe = NULL;
  gpuhal_module_cache_stats_t s;
  char dir[512], path[4096], cwd[4096], elsewhere[600];
  if (!driver) TU_SKIP("no CUDA device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  TU_REQUIRE(getcwd(cwd, sizeof(cwd)) != NULL);
  TU_REQUIRE(chdir(dir) == 0);
  params = mc_params("relative");
  device = mc_device(driver, 0, &params);
  TU_REQUIRE(device != NULL);
  snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", dir);
  TU_REQUIRE(mkdir(elsewhere, 0755) == 0);
  TU_REQUIRE(chdir(elsewhere) == 0); /* the cache stays in dir/relative */
  snprintf(path, sizeof(path), "%s/relative", dir);
  {
    char entry[4096];
    path_of_module(path, 90, device, entry, sizeof(entry));
    TU_REQUIRE(mkdir(entry, 0755) == 0); /* where module 90's file would go */
  }
  TU_CHECK_OK(mc_load(device, 90, 0, &exe));
  if (exe) TU_CHECK_OK(mc_run_check(device, exe, 90));
  gpuhal_executable_release(exe);
  exe = NULL;
  TU_CHECK_OK(mc_load(device, 91, 0, &exe));
  gpuhal_executable_release(exe);
  s = mc_stats(device);
  TU_CHECK_EQ_INT(s.disk_enabled, 1);
  TU_CHECK_EQ_INT(s.disk_writes, 1);
  TU_CHECK(file_of_module_exists(path, 91, device));
  TU_CHECK_EQ_INT(mc_dir_files(elsewhere, NULL, NULL, 0), 0);
  gpuhal_device_release(device);
  TU_CHECK(chdir(cwd) == 0);
  {
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    TU_CHECK(system(cmd) == 0);
  }
  gpuhal_driver_release(driver);
}

/* A hook that links with the driver (as test_module_cache.c's does), counting calls. */
static int hook_calls;
static gpuhal_device_t* hook_device;
static gpuhal_status_t link_hook(void* user, const void* ptx, size_t size, int cc_major, int cc_minor, void** out,
                                 size_t* out_size) {
  const gpuhal__cuda_symbols_t* cu = hook_device->cu;
  gpuhal__context_scope_t scope;
  CUlinkState link = NULL;
  void* cubin = NULL;
  size_t cubin_size = 0;
  gpuhal_status_t st;
  (void)user;
  (void)cc_major;
  (void)cc_minor;
  __atomic_add_fetch(&hook_calls, 1, __ATOMIC_RELAXED);
  st = gpuhal__context_enter(hook_device, &scope);
  if (st) return st;
  st = GPUHAL__CU(cu, cuLinkCreate, (0, NULL, NULL, &link));
  if (!st) st = GPUHAL__CU(cu, cuLinkAddData, (link, CU_JIT_INPUT_PTX, (void*)ptx, size + 1, "hook", 0, NULL, NULL));
  if (!st) st = GPUHAL__CU(cu, cuLinkComplete, (link, &cubin, &cubin_size));
  if (!st) {
    *out = malloc(cubin_size);
    memcpy(*out, cubin, cubin_size);
    *out_size = cubin_size;
  }
  if (link) cu->cuLinkDestroy(link);
  gpuhal__context_leave(hook_device, &scope);
  return st;
}
static void link_hook_free(void* user, void* cubin) {
  (void)user;
  free(cubin);
}

TU_TEST(compile_hook_files_are_kept_apart) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params;
  gpuhal_module_cache_stats_t s;
  gpuhal_executable_t* exe = NULL;
  char dir[512], first[4096];
  int round;
  if (!driver) TU_SKIP("no CUDA device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  params = mc_params(dir);
  params.compile_fn = link_hook;
  params.compile_free_fn = link_hook_free;
  for (round = 0; round < 2; ++round) {
    hook_device = mc_device(driver, 0, &params);
    TU_REQUIRE(hook_device != NULL);
    TU_CHECK_OK(mc_load(hook_device, 90, 0, &exe));
    if (exe) TU_CHECK_OK(mc_run_check(hook_device, exe, 90));
    gpuhal_executable_release(exe);
    s = mc_stats(hook_device);
    TU_CHECK_EQ_INT(hook_calls, 1); /* round 1: from disk, the hook is not called */
    TU_CHECK_EQ_INT(s.disk_hits, round);
    gpuhal_device_release(hook_device);
  }
  TU_CHECK_EQ_INT(mc_dir_files(dir, NULL, first, sizeof(first)), 1);
  TU_CHECK_STR_CONTAINS(first, "-hook.gpuhal");
  /* Without the hook the driver's own file is used (compiled once, then a second file). */
  TU_CHECK_EQ_INT(load_range(driver, dir, 0, 90, 1, 0, &s), 0);
  TU_CHECK_EQ_INT(s.compiles, 1);
  TU_CHECK_EQ_INT(s.disk_hits, 0);
  TU_CHECK_EQ_INT(mc_dir_files(dir, NULL, NULL, 0), 2);
  tu_remove_dir(dir);
  gpuhal_driver_release(driver);
}

/* ---- what someone else put at an entry's path ---- */

/* One load of module k on its own thread, so that the test can bound it in time. */
typedef struct bounded_load_s {
  gpuhal_device_t* device;
  unsigned k;
  gpuhal_status_t status;
  int done; /* atomic */
  pthread_t thread;
} bounded_load_t;

static void* bounded_load_main(void* arg) {
  bounded_load_t* l = (bounded_load_t*)arg;
  gpuhal_executable_t* exe = NULL;
  l->status = mc_load(l->device, l->k, 0, &exe);
  if (!l->status) l->status = mc_run_check(l->device, exe, l->k);
  gpuhal_executable_release(exe);
  __atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Loads module k on `count` threads at once (the second waits for the first's build) and
 * checks each result. Each must finish within 10 s: a load stuck in open() cannot be
 * undone, so a hang ends the test process as a failure. 0 or the number of failures. */
static int bounded_loads(gpuhal_device_t* device, unsigned k, int count, const char* what) {
  bounded_load_t loads[4];
  int64_t deadline = gpuhal_now_ns() + 10ll * 1000000000ll;
  int i, failures = 0;
  memset(loads, 0, sizeof(loads));
  for (i = 0; i < count && i < 4; ++i) {
    loads[i].device = device;
    loads[i].k = k;
    if (pthread_create(&loads[i].thread, NULL, bounded_load_main, &loads[i]) != 0) return 1;
  }
  for (i = 0; i < count && i < 4; ++i) {
    while (!__atomic_load_n(&loads[i].done, __ATOMIC_ACQUIRE) && gpuhal_now_ns() < deadline) tu_sleep_ns(1000000);
    if (!__atomic_load_n(&loads[i].done, __ATOMIC_ACQUIRE)) {
      fprintf(stderr, "  FAIL %s:%d: %s: load %d of module %u still running after 10 s (hung)\n", __FILE__, __LINE__,
              what, i, k);
      printf("0 passed, 1 failed, 0 skipped\n");
      fflush(stdout);
      _exit(1);
    }
    pthread_join(loads[i].thread, NULL);
    if (loads[i].status) {
      fprintf(stderr, "  %s: load %d: %s\n", what, i, gpuhal_status_message(loads[i].status));
      gpuhal_status_free(loads[i].status);
      failures++;
    }
  }
  return failures;
}

/* A socket at `path` (bound at a short name, then renamed: sun_path is short). */
static int plant_socket(const char* dir, const char* path) {
  struct sockaddr_un addr;
  int fd = socket(AF_UNIX, SOCK_STREAM, 0), ok;
  if (fd < 0) return 0;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  if ((size_t)snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/s", dir) >= sizeof(addr.sun_path)) {
    close(fd);
    return 0;
  }
  ok = bind(fd, (struct sockaddr*)&addr, sizeof(addr)) == 0 && rename(addr.sun_path, path) == 0;
  close(fd);
  return ok;
}

enum {
  PLANT_FIFO,
  PLANT_LINK_TO_FIFO,
  PLANT_LINK_TO_DEV_ZERO,
  PLANT_SOCKET,
  PLANT_CHAR_DEVICE,
  PLANT_LINK_TO_FILE,
  PLANT_KINDS
};
static const char* const plant_names[PLANT_KINDS] = {"FIFO",   "symlink to a FIFO", "symlink to /dev/zero",
                                                     "socket", "character device",  "symlink to a valid cache file"};

/* Puts the kind at `path`; 0 when this machine does not let us (a device node needs root). */
static int plant(int kind, const char* dir, const char* path, const char* good_file) {
  char other[4096];
  switch (kind) {
    case PLANT_FIFO: return mkfifo(path, 0644) == 0;
    case PLANT_LINK_TO_FIFO:
      snprintf(other, sizeof(other), "%s/target.fifo", dir);
      return mkfifo(other, 0644) == 0 && symlink(other, path) == 0;
    case PLANT_LINK_TO_DEV_ZERO: return symlink("/dev/zero", path) == 0;
    case PLANT_SOCKET: return plant_socket(dir, path);
    case PLANT_CHAR_DEVICE: return mknod(path, S_IFCHR | 0600, makedev(1, 5)) == 0; /* /dev/zero's numbers */
    default: return symlink(good_file, path) == 0;
  }
}

/* A relocatable cubin (nvcc -rdc) is linked by the driver once: later devices (and later
 * processes) load the linked cubin from disk. A compile hook, which takes PTX only, is not
 * called for it, and the driver's file serves a device that has one. */
TU_TEST(relocatable_cubin_is_linked_once) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params;
  gpuhal_device_info_t info;
  gpuhal_module_cache_stats_t s;
  char dir[512], first[4096];
  size_t size = 0;
  char* image = NULL;
  int round, calls_before = hook_calls;
  if (!driver) TU_SKIP("no CUDA device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  params = mc_params(dir);
  for (round = 0; round < 3; ++round) {
    gpuhal_executable_t* exe = NULL;
    if (round == 2) {
      params.compile_fn = link_hook;
      params.compile_free_fn = link_hook_free;
    }
    hook_device = mc_device(driver, 0, &params);
    TU_REQUIRE(hook_device != NULL);
    if (!image) {
      memset(&info, 0, sizeof(info));
      TU_CHECK_OK(gpuhal_device_info(hook_device, &info));
      image = tu_rdc_fill_image(tu_softcuda(), info.compute_capability_major, info.compute_capability_minor, &size);
      if (!image) {
        gpuhal_device_release(hook_device);
        tu_remove_dir(dir);
        gpuhal_driver_release(driver);
        TU_SKIP("the relocatable cubin fixture is for sm_90");
      }
    }
    TU_CHECK_OK(gpuhal_executable_load(hook_device, image, size, &exe));
    if (exe) TU_CHECK_OK(tu_check_fill_u32(driver, hook_device, exe, 0xAB000000u + (unsigned)round));
    gpuhal_executable_release(exe);
    s = mc_stats(hook_device);
    TU_CHECK_EQ_INT(s.compiles, round == 0 ? 1 : 0);
    TU_CHECK_EQ_INT(s.disk_writes, round == 0 ? 1 : 0);
    TU_CHECK_EQ_INT(s.disk_hits, round == 0 ? 0 : 1);
    TU_CHECK_EQ_INT(s.disk_rejects, 0);
    TU_CHECK_OK(gpuhal_device_wait_idle(hook_device, gpuhal_timeout_relative_ns(60ll * 1000000000ll)));
    gpuhal_device_release(hook_device);
  }
  TU_CHECK_EQ_INT(hook_calls, calls_before);
  TU_CHECK_EQ_INT(mc_dir_files(dir, NULL, first, sizeof(first)), 1);
  TU_CHECK_STR_CONTAINS(first, "-driver.gpuhal");
  free(image);
  tu_remove_dir(dir);
  gpuhal_driver_release(driver);
}

TU_TEST(non_regular_files_are_refused_without_hanging) {
  gpuhal_driver_t* driver = mc_driver();
  gpuhal_device_params_t params;
  gpuhal_device_t* device;
  gpuhal_module_cache_stats_t s;
  char dir[512], path[4096], good_file[4096], other[4096];
  unsigned char* good = NULL;
  size_t good_size = 0;
  int kind;
  struct stat st;
  if (!driver) TU_SKIP("no CUDA device");
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  params = mc_params(dir);
  /* A valid file of module 95, kept aside (outside the entry's name) for the last kind. */
  TU_CHECK_EQ_INT(load_range(driver, dir, 0, 95, 1, 0, &s), 0);
  TU_REQUIRE(mc_dir_files(dir, NULL, path, sizeof(path)) == 1);
  TU_REQUIRE(read_whole(path, &good, &good_size));
  unlink(path);
  snprintf(good_file, sizeof(good_file), "%s/good.bin", dir);
  write_whole(good_file, good, good_size);
  free(good);
  for (kind = 0; kind < PLANT_KINDS; ++kind) {
    const char* what = plant_names[kind];
    device = mc_device(driver, 0, &params);
    TU_REQUIRE(device != NULL);
    path_of_module(dir, 95, device, path, sizeof(path));
    unlink(path);
    snprintf(other, sizeof(other), "%s/target.fifo", dir);
    unlink(other);
    if (!plant(kind, dir, path, good_file)) {
      fprintf(stderr, "  %s: cannot be made here (%s): not tested\n", what, strerror(errno));
      gpuhal_device_release(device);
      continue;
    }
    mc_log_clear();
    /* Two loads of the image at once: neither may hang, the second waits on the first. */
    TU_CHECK_EQ_INT(bounded_loads(device, 95, 2, what), 0);
    s = mc_stats(device);
    if (s.compiles != 1 || s.disk_rejects != 1 || s.disk_writes != 1 || s.disk_hits != 0 || !s.disk_enabled)
      TU_FAIL_AT(__FILE__, __LINE__, "%s: compiles %llu rejects %llu writes %llu hits %llu enabled %d", what,
                 (unsigned long long)s.compiles, (unsigned long long)s.disk_rejects, (unsigned long long)s.disk_writes,
                 (unsigned long long)s.disk_hits, s.disk_enabled);
    if (!mc_log_contains("ignoring disk cache file")) TU_FAIL_AT(__FILE__, __LINE__, "%s: no debug log", what);
    if ((kind == PLANT_FIFO && !mc_log_contains("FIFO")) ||
        (kind == PLANT_LINK_TO_FIFO && !mc_log_contains("symbolic link")))
      TU_FAIL_AT(__FILE__, __LINE__, "%s: the debug log does not say what was refused", what);
    /* The store replaced the thing itself (never wrote through a link). */
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
      TU_FAIL_AT(__FILE__, __LINE__, "%s: the entry is not a regular file after the store", what);
    gpuhal_device_release(device);
    /* A new device: the rebuilt file serves it, again within the bound. */
    device = mc_device(driver, 0, &params);
    TU_REQUIRE(device != NULL);
    TU_CHECK_EQ_INT(bounded_loads(device, 95, 1, what), 0);
    s = mc_stats(device);
    if (s.disk_hits != 1 || s.compiles != 0)
      TU_FAIL_AT(__FILE__, __LINE__, "%s: second device: hits %llu compiles %llu", what,
                 (unsigned long long)s.disk_hits, (unsigned long long)s.compiles);
    gpuhal_device_release(device);
  }
  /* The link's target was never written through. */
  TU_REQUIRE(read_whole(good_file, &good, &good_size));
  free(good);
  TU_CHECK(stat(good_file, &st) == 0 && S_ISREG(st.st_mode));
  tu_remove_dir(dir);
  gpuhal_driver_release(driver);
}

/* The writer's temporary files: beside the entry, marked (so eviction can clear a crashed
 * writer's), a new regular file under a different name for every call. */
TU_TEST(temporary_files_are_unique_and_fresh) {
  char dir[512], base[4096], names[8][4096 + 64];
  int i, j;
  TU_REQUIRE(tu_temp_dir(dir, sizeof(dir), "mc"));
  snprintf(base, sizeof(base), "%s/entry.gpuhal", dir);
  for (i = 0; i < 8; ++i) {
    struct stat st;
    int fd = gpuhal__temp_file_create(base, names[i], sizeof(names[i]));
    TU_CHECK(fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0);
    if (fd >= 0) close(fd);
    TU_CHECK(strncmp(names[i], base, strlen(base)) == 0 && strstr(names[i], GPUHAL__DISK_TEMP_MARK) != NULL);
    for (j = 0; j < i; ++j) TU_CHECK(strcmp(names[i], names[j]) != 0);
  }
  /* A name that cannot be made says why (errno), not a hang or a crash. */
  TU_CHECK(gpuhal__temp_file_create("/nonexistent-dir/x", names[0], sizeof(names[0])) < 0 && errno == ENOENT);
  TU_CHECK(gpuhal__temp_file_create(base, names[0], 8) < 0 && errno == ENAMETOOLONG);
  tu_remove_dir(dir);
}

int main(int argc, char** argv) {
  static const tu_case_t cases[] = {
      TU_CASE(many_modules_cold_warm_and_from_disk),  TU_CASE(second_process_hits_the_disk_cache),
      TU_CASE(bad_files_are_ignored_and_rebuilt),     TU_CASE(parser_survives_arbitrary_bytes),
      TU_CASE(two_processes_fill_one_directory),      TU_CASE(disk_eviction_is_lru_with_touch_on_hit),
      TU_CASE(unusable_directory_degrades_to_memory), TU_CASE(a_bad_entry_path_leaves_the_rest_of_the_cache_working),
      TU_CASE(compile_hook_files_are_kept_apart),     TU_CASE(non_regular_files_are_refused_without_hanging),
      TU_CASE(temporary_files_are_unique_and_fresh),  TU_CASE(a_file_the_driver_refuses_is_counted_as_a_reject),
      TU_CASE(relocatable_cubin_is_linked_once)};
  mc_remember_self(argv[0]);
  if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main(argc, argv);
  return tu_run(cases, (int)(sizeof(cases) / sizeof(cases[0])), argc, argv);
}
