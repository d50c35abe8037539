/* libFuzzer target: the module cache's disk file checks (src/disk_cache.c), through
 * gpuhal__disk_cache_parse in tests/test_internals.h ("pure: no I/O ... safe on arbitrary
 * bytes"). A corrupt or foreign file must be refused with DATA_LOSS / FAILED_PRECONDITION,
 * never trusted, never read past its end. So that the fuzzer gets past the checksums,
 * inputs whose first byte is odd are "repaired" first (image and payload sizes made to
 * fit, checksums recomputed) and parsed against the key their own header names (its image
 * the file's own copy). Seeds: tests/fuzz/corpus/disk_cache. */
#include "test_internals.h"

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_REQUIRE(c)                                                                 \
  do {                                                                                  \
    if (!(c)) {                                                                         \
      fprintf(stderr, "fuzz_disk_cache: broken promise: %s (line %d)\n", #c, __LINE__); \
      abort();                                                                          \
    }                                                                                   \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
#if defined(GPUHAL__DISK_HEADER_SIZE)
  unsigned char* file;
  gpuhal__disk_key_t key;
  const void* payload = NULL;
  size_t payload_size = 0;
  gpuhal_status_t st;
  int repair;
  if (size == 0) return 0;
  repair = data[0] & 1;
  data++;
  size--;
  file = (unsigned char*)calloc(size ? size : 1, 1); /* exactly `size` bytes: ASan sees overreads */
  if (!file) return 0;
  if (size) memcpy(file, data, size);
  memset(&key, 0, sizeof(key));
  if (size >= GPUHAL__DISK_HEADER_SIZE) {
    size_t body = size - GPUHAL__DISK_HEADER_SIZE;
    if (repair) { /* sizes made consistent, checksums recomputed */
      uint64_t image_size = gpuhal__le64(file + 24) % (body + 1);
      gpuhal__put_le64(file + 24, image_size);
      gpuhal__put_le64(file + 64, body - image_size);
      gpuhal__put_le64(file + 72, gpuhal__hash_fast64(file + GPUHAL__DISK_HEADER_SIZE + image_size,
                                                      body - (size_t)image_size, GPUHAL__DISK_SEED_PAYLOAD));
      gpuhal__put_le64(file + 104, gpuhal__hash_fast64(file, 104, GPUHAL__DISK_SEED_HEADER));
    }
    gpuhal__disk_header_key(file, &key);
    if (key.image_size > body) key.image = NULL; /* the header lies: nothing to point at */
  }
  st = gpuhal__disk_cache_parse(file, size, &key, &payload, &payload_size);
  if (st) {
    gpuhal_status_code_t code = gpuhal_status_code(st);
    FUZZ_REQUIRE(code == GPUHAL_STATUS_DATA_LOSS || code == GPUHAL_STATUS_FAILED_PRECONDITION);
    FUZZ_REQUIRE(payload == NULL && payload_size == 0);
    gpuhal_status_free(st);
  } else {
    FUZZ_REQUIRE(size > GPUHAL__DISK_HEADER_SIZE + key.image_size);
    FUZZ_REQUIRE((const unsigned char*)payload == file + GPUHAL__DISK_HEADER_SIZE + key.image_size);
    FUZZ_REQUIRE(payload_size == size - GPUHAL__DISK_HEADER_SIZE - key.image_size);
  }
  /* Against a key it was not made for: never accepted. */
  key.driver_version ^= 1;
  st = gpuhal__disk_cache_parse(file, size, &key, &payload, &payload_size);
  FUZZ_REQUIRE(st != NULL);
  gpuhal_status_free(st);
  st = gpuhal__disk_cache_parse(file, size, NULL, &payload, &payload_size);
  FUZZ_REQUIRE(st != NULL);
  gpuhal_status_free(st);
  free(file);
#else
  (void)data;
  (void)size;
#endif
  return 0;
}
