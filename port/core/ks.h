/* ks.h: error codes, byte slices and the hash shared by every part of the sink. */
#ifndef KS_H
#define KS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KS_VERSION "0.1.0"
#define KS_PROTOCOL 2

/* Error codes: negative, returned, never fatal. */
enum {
  KS_OK = 0,
  KS_EBADTERM = -1,   /* not a well-formed external term, or a wrong shape */
  KS_ENOMEM = -2,
  KS_EFULL = -3,      /* a table reached its cap: the caller counts a drop */
  KS_EINVAL = -4,
  KS_EUNKNOWN = -5,   /* well formed, but not something the sink knows */
  KS_ENOSPC = -6      /* the file system has no room for it */
};

#define KS_NONE UINT32_MAX

/*
 * Grows a vector until index `need` fits: *(T **)pp has *cap elements of elem
 * bytes; the capacity doubles, from `first` when it was 0, and stops at
 * UINT32_MAX; the new elements are zeroed. On KS_ENOMEM nothing changed (the
 * caller counts its drop). pp is the address of the vector's pointer, of any
 * type: it is read and written with memcpy.
 */
static inline int ks_grow(void *pp, uint32_t *cap, uint32_t need, uint32_t first, size_t elem) {
  uint32_t c = *cap ? *cap : first;
  void *v;

  if (need < *cap)
    return KS_OK;
  while (c <= need && c < UINT32_MAX)
    c = c > UINT32_MAX / 2 ? UINT32_MAX : c * 2;
  memcpy(&v, pp, sizeof(v));
  if (c <= need || (v = realloc(v, (size_t)c * elem)) == NULL)
    return KS_ENOMEM;
  memset((char *)v + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
  memcpy(pp, &v, sizeof(v));
  *cap = c;
  return KS_OK;
}

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

static inline uint64_t ks_load64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* Up to 8 bytes, zero-extended. */
static inline uint64_t ks_load_upto8(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  memcpy(&v, p, n);
  return v;
}

/* 64x64 -> 128-bit multiply, folded: the mixing step of wyhash. */
static inline uint64_t ks_mum(uint64_t a, uint64_t b) {
  __uint128_t r = (__uint128_t)a * b;
  return (uint64_t)r ^ (uint64_t)(r >> 64);
}

/*
 * Keys are short (pids ~28 bytes, MFA tuples ~25): two independent multiplies
 * cover up to 32 bytes with overlapping loads; longer keys loop 16 bytes a step.
 */
static inline uint64_t ks_hash(const void *key, size_t n) {
  const unsigned char *p = key;
  const uint64_t s0 = 0xa0761d6478bd642full, s1 = 0xe7037ed1a0b428dbull,
                 s2 = 0x8ebc6af09c88c6e3ull, s3 = 0x589965cc75374cc3ull;
  uint64_t a, b, h = s0 ^ n;

  if (n <= 16) {
    if (n >= 8) {
      a = ks_load64(p);
      b = ks_load64(p + n - 8);
    } else {
      a = ks_load_upto8(p, n);
      b = 0;
    }
    return ks_mum(a ^ s1, b ^ h);
  }
  while (n > 32) {
    h = ks_mum(ks_load64(p) ^ s1, ks_load64(p + 8) ^ h);
    p += 16;
    n -= 16;
  }
  a = ks_mum(ks_load64(p) ^ s1, ks_load64(p + 8) ^ h);
  b = ks_mum(ks_load64(p + n - 16) ^ s2, ks_load64(p + n - 8) ^ s3);
  return ks_mum(a ^ s2, b ^ n);
}

/* Equality of short keys without a call into libc. */
static inline int ks_key_eq(const unsigned char *a, const unsigned char *b, size_t n) {
  if (n >= 8) {
    size_t i;
    for (i = 0; i + 8 <= n; i += 8)
      if (ks_load64(a + i) != ks_load64(b + i))
        return 0;
    return ks_load64(a + n - 8) == ks_load64(b + n - 8);
  }
  return memcmp(a, b, n) == 0;
}

#endif
