/* libFuzzer target: image-kind detection of gpuhal_executable_load (PTX / cubin / fatbin),
 * gpuhal__image_detect in src/module_cache.h. Arbitrary bytes must give a status or a
 * format whose claims hold: never a read past `size`, never an accepted image that is
 * shorter than its own header says; and PTX text read for its functions (.entry, .func,
 * .reqntid) and header ends, within the text. Seeds: tests/fuzz/corpus/image_detect. */
#define GPUHAL_IMPLEMENTATION
#include "gpuhal.h"

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_REQUIRE(c)                                                                   \
  do {                                                                                    \
    if (!(c)) {                                                                           \
      fprintf(stderr, "fuzz_image_detect: broken promise: %s (line %d)\n", #c, __LINE__); \
      abort();                                                                            \
    }                                                                                     \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpuhal__image_format_t format = (gpuhal__image_format_t)0;
  size_t meaningful = 0;
  /* A private copy of exactly `size` bytes, so ASan sees any read past the end. */
  unsigned char* copy = (unsigned char*)calloc(size ? size : 1, 1);
  gpuhal_status_t st;
  if (!copy) return 0;
  if (size) memcpy(copy, data, size);
  st = gpuhal__image_detect(copy, size, "fuzz", &format, &meaningful);
  if (st) {
    FUZZ_REQUIRE(gpuhal_status_code(st) == GPUHAL_STATUS_INVALID_ARGUMENT);
    FUZZ_REQUIRE(strstr(gpuhal_status_message(st), "image") != NULL); /* names the argument */
    gpuhal_status_free(st);
  } else {
    FUZZ_REQUIRE(meaningful <= size);
    switch (format) {
      case GPUHAL__IMAGE_CUBIN: {
        uint64_t shoff, shend;
        FUZZ_REQUIRE(memcmp(copy, "\177ELF", 4) == 0);
        /* The driver reads at least an ELF header from an ELF image: a shorter one is
         * refused here (ELF32: 52 bytes). */
        FUZZ_REQUIRE(size >= 52);
        if (copy[4] == 2) { /* ELF64: the section headers lie inside the image */
          FUZZ_REQUIRE(size >= 64);
          shoff = gpuhal__le64(copy + 0x28);
          shend = shoff + (uint64_t)gpuhal__le16(copy + 0x3A) * gpuhal__le16(copy + 0x3C);
          FUZZ_REQUIRE(shoff <= size && shend <= size && shend >= shoff);
          /* ...and so do the program headers, which nvcc puts last */
          if (gpuhal__le16(copy + 0x38) != 0) {
            uint64_t phoff = gpuhal__le64(copy + 0x20);
            FUZZ_REQUIRE(phoff <= size &&
                         (uint64_t)gpuhal__le16(copy + 0x38) * gpuhal__le16(copy + 0x36) <= size - phoff);
          }
        }
        break;
      }
      case GPUHAL__IMAGE_FATBIN: {
        uint64_t header = gpuhal__le16(copy + 6), payload = gpuhal__le64(copy + 8);
        FUZZ_REQUIRE(size >= 16);
        FUZZ_REQUIRE(payload <= size && header <= size && header + payload <= size);
        break;
      }
      case GPUHAL__IMAGE_PTX: {
        size_t i, cursor = 0, last = 0;
        gpuhal__ptx_function_t f;
        gpuhal__ptx_variable_t v;
        char version[72], target[72];
        FUZZ_REQUIRE(meaningful >= 8);
        for (i = 0; i < meaningful; ++i) FUZZ_REQUIRE(copy[i] != 0); /* text: NULs only at the end */
        /* What gpuhal reads of PTX text (kernel lookups): names inside the text, progress
         * on every call, an end. */
        while (gpuhal__ptx_next_function((const char*)copy, meaningful, &cursor, &f)) {
          FUZZ_REQUIRE(f.name_length > 0 && f.name >= (const char*)copy &&
                       f.name + f.name_length <= (const char*)copy + meaningful);
          FUZZ_REQUIRE(cursor > last && cursor <= meaningful);
          FUZZ_REQUIRE(f.is_entry || f.reqntid[0] == 0);
          last = cursor;
        }
        FUZZ_REQUIRE(cursor == meaningful);
        /* ...and of its variables (global lookups' NOT_FOUND) */
        cursor = 0, last = 0;
        while (gpuhal__ptx_next_variable((const char*)copy, meaningful, &cursor, &v)) {
          FUZZ_REQUIRE(v.name_length > 0 && v.name >= (const char*)copy &&
                       v.name + v.name_length <= (const char*)copy + meaningful);
          FUZZ_REQUIRE(cursor > last && cursor <= meaningful);
          FUZZ_REQUIRE(v.space == 'g' || v.space == 'c' || v.space == 's');
          last = cursor;
        }
        FUZZ_REQUIRE(cursor == meaningful);
        gpuhal__ptx_header((const char*)copy, meaningful, version, sizeof(version), target, sizeof(target));
        FUZZ_REQUIRE(strlen(version) < sizeof(version) && strlen(target) < sizeof(target));
        break;
      }
      default: FUZZ_REQUIRE(!"unknown format");
    }
  }
  free(copy);
  return 0;
}
