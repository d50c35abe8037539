/* hash: the fast 64-bit hash and the byte readers (hash.h). */
#include "hash.h"

GPUHAL__PRIVATE uint16_t gpuhal__le16(const unsigned char* p) { return (uint16_t)(p[0] | (p[1] << 8)); }

GPUHAL__PRIVATE uint32_t gpuhal__le32(const unsigned char* p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

GPUHAL__PRIVATE uint64_t gpuhal__read_u64(const unsigned char* p) { /* native byte order */
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

GPUHAL__PRIVATE uint64_t gpuhal__le64(const unsigned char* p) {
  return (uint64_t)gpuhal__le32(p) | ((uint64_t)gpuhal__le32(p + 4) << 32);
}

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

GPUHAL__PRIVATE uint64_t gpuhal__hash_fast64(const void* data, size_t size, uint64_t seed) {
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
