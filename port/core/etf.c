/* etf.c: bounds-checked reading of the external term format.
 *
 * The hot path of the decoder reads tuple headers, atoms, pids and integers
 * itself: erl_interface's decoders do no bounds checks and copy atoms and node
 * names, so they are only used where a term has already been checked. Skipping
 * is iterative (a count of terms still owed), so a deeply nested return value
 * costs time in its size, never stack.
 */
#include "ks_etf.h"

#define NEED(c, k) do { if ((c)->n - (c)->i < (size_t)(k)) return KS_EBADTERM; } while (0)

int ks_etf_int64_slow(ks_etf *c, int64_t *v) {
  size_t n, k;
  uint64_t mag;
  int neg;

  NEED(c, 2);
  switch (c->p[c->i]) {
  case KS_TAG_SMALL_INTEGER:
    *v = c->p[c->i + 1];
    c->i += 2;
    return KS_OK;
  case KS_TAG_INTEGER:
    NEED(c, 5);
    *v = (int32_t)ks_be32(c->p + c->i + 1);
    c->i += 5;
    return KS_OK;
  case KS_TAG_SMALL_BIG:
    NEED(c, 3);
    n = c->p[c->i + 1];
    neg = c->p[c->i + 2];
    c->i += 3;
    break;
  case KS_TAG_LARGE_BIG:
    NEED(c, 6);
    n = ks_be32(c->p + c->i + 1);
    neg = c->p[c->i + 5];
    c->i += 6;
    break;
  default:
    return KS_EBADTERM;
  }
  NEED(c, n);
  /* Little-endian digits; anything wider than 63 bits is not a time we want. */
  mag = 0;
  k = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (n == 8) {   /* monotonic timestamps: one load */
    memcpy(&mag, c->p + c->i, 8);
    k = 8;
  }
#endif
  for (; k < n; k++) {
    unsigned char d = c->p[c->i + k];
    if (k >= 8) {
      if (d != 0)
        return KS_EBADTERM;
      continue;
    }
    mag |= (uint64_t)d << (8 * k);
  }
  if (mag > (uint64_t)INT64_MAX)
    return KS_EBADTERM;
  c->i += n;
  *v = neg ? -(int64_t)mag : (int64_t)mag;
  return KS_OK;
}

int ks_etf_pid(ks_etf *c, ks_slice *raw, int *is_port) {
  size_t start = c->i, tail;
  ks_atom node;
  int tag;

  NEED(c, 1);
  tag = c->p[c->i];
  switch (tag) {
  case KS_TAG_NEW_PID: tail = 12; *is_port = 0; break;
  case KS_TAG_PID: tail = 9; *is_port = 0; break;
  case KS_TAG_NEW_PORT: tail = 8; *is_port = 1; break;
  case KS_TAG_PORT: tail = 5; *is_port = 1; break;
  case KS_TAG_V4_PORT: tail = 12; *is_port = 1; break;
  default: return KS_EBADTERM;
  }
  c->i++;
  if (ks_etf_atom(c, &node) != KS_OK) {
    c->i = start;
    return KS_EBADTERM;
  }
  if (c->n - c->i < tail) {
    c->i = start;
    return KS_EBADTERM;
  }
  c->i += tail;
  raw->p = c->p + start;
  raw->n = c->i - start;
  return KS_OK;
}

int ks_etf_list_length(ks_etf *c, uint32_t *len) {
  uint32_t k, n;

  NEED(c, 1);
  switch (c->p[c->i]) {
  case KS_TAG_NIL:
    c->i++;
    *len = 0;
    return KS_OK;
  case KS_TAG_STRING:
    NEED(c, 3);
    n = (uint32_t)c->p[c->i + 1] << 8 | c->p[c->i + 2];
    NEED(c, 3 + (size_t)n);
    c->i += 3 + (size_t)n;
    *len = n;
    return KS_OK;
  case KS_TAG_LIST:
    NEED(c, 5);
    n = ks_be32(c->p + c->i + 1);
    if (n > c->n - c->i)       /* every element takes at least one byte */
      return KS_EBADTERM;
    c->i += 5;
    for (k = 0; k < n; k++)
      if (ks_etf_skip(c) != KS_OK)
        return KS_EBADTERM;
    NEED(c, 1);
    if (c->p[c->i] != KS_TAG_NIL)   /* an argument list is proper */
      return KS_EBADTERM;
    c->i++;
    *len = n;
    return KS_OK;
  default:
    return KS_EBADTERM;
  }
}

/* Bytes that follow a tag of fixed size, or -1. */
static int fixed_size(int tag) {
  switch (tag) {
  case KS_TAG_SMALL_INTEGER: return 1;
  case KS_TAG_INTEGER: return 4;
  case KS_TAG_NEW_FLOAT: return 8;
  case KS_TAG_FLOAT: return 31;
  case KS_TAG_NIL: return 0;
  default: return -1;
  }
}

static int valid_utf8(const unsigned char *s, size_t n);

/* What binary_to_term refuses but a plain skip lets through. */
static int strict_ok(const ks_etf *c, int tag) {
  const unsigned char *p = c->p + c->i;
  ks_etf t = *c;
  ks_atom a;

  switch (tag) {
  case KS_TAG_FLOAT:          /* the old text form: never written by term_to_binary since R13 */
  case KS_TAG_NEW_FUN:
  case KS_TAG_FUN:
  case KS_TAG_EXPORT:
    return 0;
  case KS_TAG_NEW_FLOAT:      /* NaN and infinities do not decode */
    return c->n - c->i >= 9 && ((p[1] & 0x7f) != 0x7f || (p[2] & 0xf0) != 0xf0);
  case KS_TAG_BIT_BINARY:
    return c->n - c->i >= 6 && p[5] >= 1 && p[5] <= 8 && ks_be32(p + 1) > 0;
  case KS_TAG_ATOM: case KS_TAG_SMALL_ATOM:
  case KS_TAG_ATOM_UTF8: case KS_TAG_SMALL_ATOM_UTF8:
    if (ks_etf_atom(&t, &a) != KS_OK || a.n > 255 * 4)
      return 0;
    return !a.utf8 ? a.n <= 255 : valid_utf8(a.s, a.n);
  default:
    return 1;
  }
}

/* A term that is a length and that many bytes (strings, binaries, bignums,
 * new funs): skipped. KS_EUNKNOWN for any other tag. */
static int skip_sized(ks_etf *c, int tag) {
  size_t hdr, len;

  switch (tag) {
  case KS_TAG_STRING:
    NEED(c, 3);
    hdr = 3;
    len = (size_t)c->p[c->i + 1] << 8 | c->p[c->i + 2];
    break;
  case KS_TAG_SMALL_BIG:
    NEED(c, 3);
    hdr = 3;
    len = c->p[c->i + 1];
    break;
  case KS_TAG_BINARY:
    NEED(c, 5);
    hdr = 5;
    len = ks_be32(c->p + c->i + 1);
    break;
  case KS_TAG_BIT_BINARY:
  case KS_TAG_LARGE_BIG:
    NEED(c, 6);
    hdr = 6;
    len = ks_be32(c->p + c->i + 1);
    break;
  case KS_TAG_NEW_FUN:
    /* Size counts itself and everything after the tag. */
    NEED(c, 5);
    hdr = 1;
    len = ks_be32(c->p + c->i + 1);
    if (len < 4)
      return KS_EBADTERM;
    break;
  default:
    return KS_EUNKNOWN;
  }
  NEED(c, hdr + len);
  c->i += hdr + len;
  return KS_OK;
}

/* A reference: its node atom and id words. */
static int skip_reference(ks_etf *c, int tag) {
  size_t words, cr = tag == KS_TAG_NEWER_REFERENCE ? 4 : 1;
  ks_atom a;

  if (tag == KS_TAG_REFERENCE) {
    c->i++;
    if (ks_etf_atom(c, &a) != KS_OK)
      return KS_EBADTERM;
    NEED(c, 5);
    c->i += 5;
    return KS_OK;
  }
  NEED(c, 3);
  words = (size_t)c->p[c->i + 1] << 8 | c->p[c->i + 2];
  if (words > 5)
    return KS_EBADTERM;
  c->i += 3;
  if (ks_etf_atom(c, &a) != KS_OK)
    return KS_EBADTERM;
  NEED(c, cr + 4 * words);
  c->i += cr + 4 * words;
  return KS_OK;
}

/* One term's own bytes, the terms it contains added to *owed. */
static int skip_one(ks_etf *c, int tag, uint64_t *owed) {
  ks_atom a;
  ks_slice raw;
  uint32_t ar;
  int is_port, rc;

  switch (tag) {
  case KS_TAG_ATOM: case KS_TAG_SMALL_ATOM:
  case KS_TAG_ATOM_UTF8: case KS_TAG_SMALL_ATOM_UTF8:
    return ks_etf_atom(c, &a) == KS_OK ? KS_OK : KS_EBADTERM;
  case KS_TAG_NEW_PID: case KS_TAG_PID: case KS_TAG_NEW_PORT:
  case KS_TAG_PORT: case KS_TAG_V4_PORT:
    return ks_etf_pid(c, &raw, &is_port) == KS_OK ? KS_OK : KS_EBADTERM;
  case KS_TAG_SMALL_TUPLE:
  case KS_TAG_LARGE_TUPLE:
    if (ks_etf_tuple(c, &ar) != KS_OK)
      return KS_EBADTERM;
    *owed += ar;
    return KS_OK;
  case KS_TAG_MAP:
    NEED(c, 5);
    *owed += 2 * (uint64_t)ks_be32(c->p + c->i + 1);
    c->i += 5;
    return KS_OK;
  case KS_TAG_LIST:
    NEED(c, 5);
    *owed += (uint64_t)ks_be32(c->p + c->i + 1) + 1;   /* elements and the tail */
    c->i += 5;
    return KS_OK;
  case KS_TAG_EXPORT:
    c->i++;
    *owed += 3;
    return KS_OK;
  case KS_TAG_FUN:
    /* Old fun: NumFree, then Pid, Module, Index, Uniq and NumFree terms. */
    NEED(c, 5);
    *owed += 4 + (uint64_t)ks_be32(c->p + c->i + 1);
    c->i += 5;
    return KS_OK;
  case KS_TAG_NEWER_REFERENCE: case KS_TAG_NEW_REFERENCE: case KS_TAG_REFERENCE:
    return skip_reference(c, tag);
  default:
    rc = skip_sized(c, tag);
    /* Compressed, atom cache refs, local ext, garbage: refused. */
    return rc == KS_OK ? KS_OK : KS_EBADTERM;
  }
}

/* Skips one term; strict also refuses what binary_to_term would (for echoed terms). */
static int skip_term(ks_etf *c, int strict) {
  uint64_t owed = 1;
  int tag, fixed;

  while (owed > 0) {
    owed--;
    NEED(c, 1);
    tag = c->p[c->i];
    if (strict && !strict_ok(c, tag))
      return KS_EBADTERM;
    fixed = fixed_size(tag);
    if (fixed >= 0) {
      NEED(c, 1 + (size_t)fixed);
      c->i += 1 + (size_t)fixed;
      continue;
    }
    if (skip_one(c, tag, &owed) != KS_OK)
      return KS_EBADTERM;
    /* Every owed term takes at least one byte: a claim beyond the frame is a lie. */
    if (owed > c->n - c->i)
      return KS_EBADTERM;
  }
  return KS_OK;
}

int ks_etf_skip(ks_etf *c) {
  return skip_term(c, 0);
}

int ks_etf_echoable(ks_slice term) {
  ks_etf c;

  ks_etf_init(&c, term.p, term.n);
  return skip_term(&c, 1) == KS_OK && ks_etf_at_end(&c);
}

/* Well-formed UTF-8 without NUL (keys are NUL-terminated), so replies decode. */
static int valid_utf8(const unsigned char *s, size_t n) {
  size_t i = 0, k, more;
  uint32_t cp;

  while (i < n) {
    unsigned char ch = s[i++];
    if (ch == 0)
      return 0;
    if (ch < 0x80)
      continue;
    if (ch >= 0xc2 && ch <= 0xdf) { more = 1; cp = ch & 0x1f; }
    else if (ch >= 0xe0 && ch <= 0xef) { more = 2; cp = ch & 0x0f; }
    else if (ch >= 0xf0 && ch <= 0xf4) { more = 3; cp = ch & 0x07; }
    else return 0;
    if (n - i < more)
      return 0;
    for (k = 0; k < more; k++) {
      if ((s[i] & 0xc0) != 0x80)
        return 0;
      cp = cp << 6 | (s[i++] & 0x3f);
    }
    if ((more == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (more == 3 && (cp < 0x10000 || cp > 0x10ffff)))
      return 0;
  }
  return 1;
}

int ks_atom_utf8(const ks_atom *a, char *out, size_t cap) {
  size_t i, o = 0;

  if (a->utf8) {
    if (a->n + 1 > cap || !valid_utf8(a->s, a->n))
      return KS_EBADTERM;
    memcpy(out, a->s, a->n);
    out[a->n] = 0;
    return (int)a->n;
  }
  for (i = 0; i < a->n; i++) {
    unsigned char ch = a->s[i];
    if (ch == 0)
      return KS_EBADTERM;
    if (o + 3 > cap)
      return KS_EBADTERM;
    if (ch < 0x80) {
      out[o++] = (char)ch;
    } else {
      out[o++] = (char)(0xc0 | ch >> 6);
      out[o++] = (char)(0x80 | (ch & 0x3f));
    }
  }
  if (o + 1 > cap)
    return KS_EBADTERM;
  out[o] = 0;
  return (int)o;
}
