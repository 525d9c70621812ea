/* ks.h: error codes, byte slices and the hash shared by every part of the sink. */
#ifndef KS_H
#define KS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KS_VERSION "0.1.0"
#define KS_PROTOCOL 1

/* Error codes: negative, returned, never fatal. */
enum {
  KS_OK = 0,
  KS_EBADTERM = -1,   /* not a well-formed external term, or a wrong shape */
  KS_ENOMEM = -2,
  KS_EFULL = -3,      /* a table reached its cap: the caller counts a drop */
  KS_EINVAL = -4,
  KS_EUNKNOWN = -5    /* well formed, but not something the sink knows */
};

#define KS_NONE UINT32_MAX

/* A read-only view into a frame. */
typedef struct ks_slice {
  const unsigned char *p;
  size_t n;
} ks_slice;

static inline uint32_t ks_be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void ks_put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

/* A small multiply-xorshift hash: keys are short (atoms, pids), 8 bytes a step. */
static inline uint64_t ks_hash(const void *key, size_t n) {
  const unsigned char *s = key;
  uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)n * 0xff51afd7ed558ccdull);
  uint64_t v;
  while (n >= 8) {
    memcpy(&v, s, 8);
    h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    s += 8;
    n -= 8;
  }
  v = 0;
  memcpy(&v, s, n);
  h = (h ^ v) * 0x94d049bb133111ebull;
  h ^= h >> 29;
  return h;
}

#endif
