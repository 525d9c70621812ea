/* ks_etf.h: a bounds-checked cursor over external term format bytes. */
#ifndef KS_ETF_H
#define KS_ETF_H

#include "ks.h"

/* External term format tags this reader knows (OTP: erts/emulator/beam/external.h). */
enum {
  KS_TAG_VERSION = 131,
  KS_TAG_NEW_FLOAT = 70,
  KS_TAG_BIT_BINARY = 77,
  KS_TAG_NEW_PID = 88,
  KS_TAG_NEW_PORT = 89,
  KS_TAG_NEWER_REFERENCE = 90,
  KS_TAG_SMALL_INTEGER = 97,
  KS_TAG_INTEGER = 98,
  KS_TAG_FLOAT = 99,
  KS_TAG_ATOM = 100,
  KS_TAG_REFERENCE = 101,
  KS_TAG_PORT = 102,
  KS_TAG_PID = 103,
  KS_TAG_SMALL_TUPLE = 104,
  KS_TAG_LARGE_TUPLE = 105,
  KS_TAG_NIL = 106,
  KS_TAG_STRING = 107,
  KS_TAG_LIST = 108,
  KS_TAG_BINARY = 109,
  KS_TAG_SMALL_BIG = 110,
  KS_TAG_LARGE_BIG = 111,
  KS_TAG_NEW_FUN = 112,
  KS_TAG_EXPORT = 113,
  KS_TAG_NEW_REFERENCE = 114,
  KS_TAG_SMALL_ATOM = 115,
  KS_TAG_MAP = 116,
  KS_TAG_FUN = 117,
  KS_TAG_ATOM_UTF8 = 118,
  KS_TAG_SMALL_ATOM_UTF8 = 119,
  KS_TAG_V4_PORT = 120
};

typedef struct ks_etf {
  const unsigned char *p;
  size_t n;   /* bytes in the term */
  size_t i;   /* read position */
} ks_etf;

/* An atom as it sits in the frame: bytes and whether they are UTF-8. */
typedef struct ks_atom {
  const unsigned char *s;
  size_t n;
  int utf8;
} ks_atom;

static inline void ks_etf_init(ks_etf *c, const void *p, size_t n) {
  c->p = p;
  c->n = n;
  c->i = 0;
}

static inline int ks_etf_peek(const ks_etf *c) {
  return c->i < c->n ? c->p[c->i] : -1;
}

static inline int ks_etf_at_end(const ks_etf *c) {
  return c->i == c->n;
}

/* The hot readers are inline: the decoder calls them several times per message. */
#define KS_NEED(c, k) ((c)->n - (c)->i >= (size_t)(k))

static inline int ks_etf_version(ks_etf *c) {
  if (!KS_NEED(c, 1) || c->p[c->i] != KS_TAG_VERSION)
    return KS_EBADTERM;
  c->i++;
  return KS_OK;
}

static inline int ks_etf_tuple(ks_etf *c, uint32_t *arity) {
  if (!KS_NEED(c, 2))
    return KS_EBADTERM;
  if (c->p[c->i] == KS_TAG_SMALL_TUPLE) {
    *arity = c->p[c->i + 1];
    c->i += 2;
    return KS_OK;
  }
  if (c->p[c->i] == KS_TAG_LARGE_TUPLE && KS_NEED(c, 5)) {
    *arity = ks_be32(c->p + c->i + 1);
    c->i += 5;
    return KS_OK;
  }
  return KS_EBADTERM;
}

static inline __attribute__((always_inline)) int ks_etf_atom(ks_etf *c, ks_atom *a) {
  size_t len, hdr;
  int tag;

  if (!KS_NEED(c, 2))
    return KS_EBADTERM;
  tag = c->p[c->i];
  if (tag == KS_TAG_SMALL_ATOM_UTF8 || tag == KS_TAG_SMALL_ATOM) {
    hdr = 2;
    len = c->p[c->i + 1];
  } else if ((tag == KS_TAG_ATOM || tag == KS_TAG_ATOM_UTF8) && KS_NEED(c, 3)) {
    hdr = 3;
    len = (size_t)c->p[c->i + 1] << 8 | c->p[c->i + 2];
  } else {
    return KS_EBADTERM;
  }
  if (!KS_NEED(c, hdr + len))
    return KS_EBADTERM;
  a->utf8 = tag == KS_TAG_SMALL_ATOM_UTF8 || tag == KS_TAG_ATOM_UTF8;
  a->s = c->p + c->i + hdr;
  a->n = len;
  c->i += hdr + len;
  return KS_OK;
}

/* An atom equal to an ASCII string literal (both encodings agree on ASCII). */
#define ks_etf_atom_is(a, lit) \
  ((a)->n == sizeof(lit) - 1 && memcmp((a)->s, (lit), sizeof(lit) - 1) == 0)

int ks_etf_int64_slow(ks_etf *c, int64_t *v);

static inline int ks_etf_int64(ks_etf *c, int64_t *v) {
  if (KS_NEED(c, 2) && c->p[c->i] == KS_TAG_SMALL_INTEGER) {
    *v = c->p[c->i + 1];
    c->i += 2;
    return KS_OK;
  }
  return ks_etf_int64_slow(c, v);
}
/* Skips one term of any shape without recursion; fails on any byte out of bounds. */
int ks_etf_skip(ks_etf *c);
/* The term (whole slice) is one that binary_to_term accepts, as far as the
 * cheap checks go: safe to copy into a reply. */
int ks_etf_echoable(ks_slice term);
/* A list of terms (NIL, STRING_EXT or proper LIST_EXT): skips it, gives its length. */
int ks_etf_list_length(ks_etf *c, uint32_t *len);
/* A pid or port: its encoded bytes, tag included, and whether it is a port. */
int ks_etf_pid(ks_etf *c, ks_slice *raw, int *is_port);
/* Latin-1 or UTF-8 atom text to UTF-8 into out (cap bytes); returns length or KS_EBADTERM. */
int ks_atom_utf8(const ks_atom *a, char *out, size_t cap);

#endif
