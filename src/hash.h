/* gpuhal - the fast 64-bit hash (the module cache's lookups and disk file names, file
 * checksums) and the byte readers it shares with the image and file formats. Part of the
 * implementation only. */
#ifndef GPUHAL_SRC_HASH_H
#define GPUHAL_SRC_HASH_H

#include "internal.h"

/* ---- gpuhal:internal ---- */

/* Little-endian (and native) reads of unaligned bytes. */
GPUHAL__PRIVATE uint16_t gpuhal__le16(const unsigned char* p);
GPUHAL__PRIVATE uint32_t gpuhal__le32(const unsigned char* p);
GPUHAL__PRIVATE uint64_t gpuhal__read_u64(const unsigned char* p);
GPUHAL__PRIVATE uint64_t gpuhal__le64(const unsigned char* p);

GPUHAL__PRIVATE uint64_t gpuhal__hash_fast64(const void* data, size_t size, uint64_t seed);

#endif /* GPUHAL_SRC_HASH_H */
