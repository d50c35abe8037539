/* hash: the 64-bit hash and BLAKE2b (hash.h). */
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

#define GPUHAL__B2B_G(a, b, c, d, x, y)     \
  do {                                      \
    v[a] = v[a] + v[b] + (x);               \
    v[d] = gpuhal__rotr64(v[d] ^ v[a], 32); \
    v[c] = v[c] + v[d];                     \
    v[b] = gpuhal__rotr64(v[b] ^ v[c], 24); \
    v[a] = v[a] + v[b] + (y);               \
    v[d] = gpuhal__rotr64(v[d] ^ v[a], 16); \
    v[c] = v[c] + v[d];                     \
    v[b] = gpuhal__rotr64(v[b] ^ v[c], 63); \
  } while (0)

/* One round, its message schedule a constant row of sigma (the rounds are unrolled so
 * the compiler keeps the message words in registers; tests/bench/RESULTS.md). */
#define GPUHAL__B2B_ROUND(r)                                                                       \
  do {                                                                                             \
    GPUHAL__B2B_G(0, 4, 8, 12, m[gpuhal__blake2b_sigma[r][0]], m[gpuhal__blake2b_sigma[r][1]]);    \
    GPUHAL__B2B_G(1, 5, 9, 13, m[gpuhal__blake2b_sigma[r][2]], m[gpuhal__blake2b_sigma[r][3]]);    \
    GPUHAL__B2B_G(2, 6, 10, 14, m[gpuhal__blake2b_sigma[r][4]], m[gpuhal__blake2b_sigma[r][5]]);   \
    GPUHAL__B2B_G(3, 7, 11, 15, m[gpuhal__blake2b_sigma[r][6]], m[gpuhal__blake2b_sigma[r][7]]);   \
    GPUHAL__B2B_G(0, 5, 10, 15, m[gpuhal__blake2b_sigma[r][8]], m[gpuhal__blake2b_sigma[r][9]]);   \
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

GPUHAL__PRIVATE void gpuhal__blake2b(const void* data, size_t size, unsigned char* out, size_t digest_size) {
  gpuhal__blake2b_t s;
  gpuhal__blake2b_init(&s, digest_size);
  gpuhal__blake2b_update(&s, data, size);
  gpuhal__blake2b_final(&s, out);
}
