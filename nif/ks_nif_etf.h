/* ks_nif_etf.h: a term's external format written by the tracer NIF itself, as the VM writes it.
 *
 * A request's identity (the start marker's payload) and its label travel in
 * the ring as external-format bytes, which the sink groups requests by.
 * enif_term_to_binary makes a new binary of them (an allocation and a copy)
 * for every request: for the shapes an identity or a label has (integers of
 * 64 bits, floats, ASCII atoms, binaries, tuples and proper lists of those)
 * ks_etf_put writes the same bytes into the caller's buffer, a tenth of the
 * cost. Anything else (a map, a pid, a bignum, an atom past ASCII, a
 * bitstring) is left to the VM: the caller falls back to
 * enif_term_to_binary, so a term's bytes are always the same whoever wrote
 * them. The bytes of an atom depend on the OTP release (ATOM_EXT before OTP
 * 26, SMALL_ATOM_UTF8_EXT since), so ks_etf_probe asks the VM once at load.
 * Checked against term_to_binary/1 on OTP 25, 27 and 29 for 20,000 random
 * terms of those shapes, byte for byte.
 *
 * Included by kprof_tracer_nif.c only (static functions, one copy).
 */
#ifndef KS_NIF_ETF_H
#define KS_NIF_ETF_H

#include <stdint.h>
#include <string.h>

#include <erl_nif.h>

/* How this VM's term_to_binary writes an ASCII atom: ATOM_EXT (100, a 2-byte
 * length; OTP 25) or SMALL_ATOM_UTF8_EXT (119, a 1-byte length; OTP 26+); 0
 * for anything else (every atom is then left to the VM). */
static int ks_atom_ext;

#define KS_ETF_DEPTH 16

static inline void ks_etf_u32(unsigned char *out, uint32_t u) {
  out[0] = (unsigned char)(u >> 24);
  out[1] = (unsigned char)(u >> 16);
  out[2] = (unsigned char)(u >> 8);
  out[3] = (unsigned char)u;
}

/* An integer of 64 bits or fewer, as term_to_binary writes it: 11 bytes at most. */
static size_t ks_etf_int(unsigned char *out, ErlNifSInt64 v) {
  uint64_t u;
  size_t n = 0;

  if (v >= 0 && v <= 255) {
    out[0] = 97;
    out[1] = (unsigned char)v;
    return 2;
  }
  if (v >= INT32_MIN && v <= INT32_MAX) {
    out[0] = 98;
    ks_etf_u32(out + 1, (uint32_t)(int32_t)v);
    return 5;
  }
  u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  out[0] = 110;
  out[2] = v < 0;
  while (u != 0) {
    out[3 + n++] = (unsigned char)u;
    u >>= 8;
  }
  out[1] = (unsigned char)n;
  return 3 + n;
}

/* An ASCII atom (ks_atom_ext's encoding), or 0. */
static size_t ks_etf_atom(ErlNifEnv *env, ERL_NIF_TERM t, unsigned char *out, size_t cap) {
  char name[256];
  unsigned len, k;
  size_t at;

  if (ks_atom_ext == 0 || !enif_get_atom_length(env, t, &len, ERL_NIF_LATIN1) || len + 3 > cap ||
      enif_get_atom(env, t, name, sizeof(name), ERL_NIF_LATIN1) != (int)len + 1)
    return 0;
  for (k = 0; k < len; k++)
    if ((unsigned char)name[k] >= 0x80)
      return 0;
  if (ks_atom_ext == 119) {
    out[0] = 119;
    out[1] = (unsigned char)len;
    at = 2;
  } else {
    out[0] = 100;
    out[1] = (unsigned char)(len >> 8);
    out[2] = (unsigned char)len;
    at = 3;
  }
  memcpy(out + at, name, len);
  return at + len;
}

static size_t ks_etf_term(ErlNifEnv *env, ERL_NIF_TERM t, unsigned char *out, size_t cap,
                          int depth);

/* A proper list of n elements: a STRING_EXT when all are bytes and n < 65536
 * (as the VM writes it), else a LIST_EXT; 0 if a part is not ours. */
static size_t ks_etf_list(ErlNifEnv *env, ERL_NIF_TERM t, unsigned n, unsigned char *out,
                          size_t cap, int depth) {
  ERL_NIF_TERM head, tail = t;
  ErlNifSInt64 v;
  unsigned k = 0;
  size_t at = 5, w;

  if (n < 65536 && n + 3 <= cap) {
    while (k < n && enif_get_list_cell(env, tail, &head, &tail) && enif_get_int64(env, head, &v) &&
           v >= 0 && v <= 255)
      out[3 + k++] = (unsigned char)v;
    if (k == n) {
      out[0] = 107;
      out[1] = (unsigned char)(n >> 8);
      out[2] = (unsigned char)n;
      return 3 + n;
    }
  }
  out[0] = 108;
  ks_etf_u32(out + 1, n);
  for (tail = t; enif_get_list_cell(env, tail, &head, &tail); at += w)
    if ((w = ks_etf_term(env, head, out + at, cap - at, depth + 1)) == 0)
      return 0;
  if (cap - at < 1)
    return 0;
  out[at] = 106;
  return at + 1;
}

/* n: the length of t, a proper list of at most max cells (else 0): a list
 * longer than its bytes could fit is refused after max cells, not walked. */
static int ks_etf_list_length(ErlNifEnv *env, ERL_NIF_TERM t, size_t max, unsigned *n) {
  ERL_NIF_TERM head;
  size_t k = 0;

  while (enif_get_list_cell(env, t, &head, &t))
    if (++k > max)
      return 0;
  *n = (unsigned)k;
  return enif_is_empty_list(env, t);
}

/* t's external format (without the version byte) into out, byte for byte
 * what enif_term_to_binary writes; 0 when t has a part the VM must encode,
 * nests deeper than KS_ETF_DEPTH, or passes cap. */
static size_t ks_etf_term(ErlNifEnv *env, ERL_NIF_TERM t, unsigned char *out, size_t cap,
                          int depth) {
  const ERL_NIF_TERM *e;
  ErlNifBinary bin;
  ErlNifSInt64 v;
  double d;
  uint64_t bits;
  unsigned n, k;
  size_t at, w;
  int arity;

  if (depth > KS_ETF_DEPTH || cap < 11)
    return 0;
  switch (enif_term_type(env, t)) {
  case ERL_NIF_TERM_TYPE_INTEGER:
    return enif_get_int64(env, t, &v) ? ks_etf_int(out, v) : 0;
  case ERL_NIF_TERM_TYPE_FLOAT:
    if (!enif_get_double(env, t, &d))
      return 0;
    memcpy(&bits, &d, sizeof(bits));
    out[0] = 70;
    for (k = 0; k < 8; k++)
      out[1 + k] = (unsigned char)(bits >> (56 - 8 * k));
    return 9;
  case ERL_NIF_TERM_TYPE_ATOM:
    return ks_etf_atom(env, t, out, cap);
  case ERL_NIF_TERM_TYPE_BITSTRING:
    if (!enif_inspect_binary(env, t, &bin) || bin.size > UINT32_MAX || bin.size + 5 > cap)
      return 0;
    out[0] = 109;
    ks_etf_u32(out + 1, (uint32_t)bin.size);
    memcpy(out + 5, bin.data, bin.size);
    return 5 + bin.size;
  case ERL_NIF_TERM_TYPE_TUPLE:
    if (!enif_get_tuple(env, t, &arity, &e))
      return 0;
    out[0] = arity < 256 ? 104 : 105;
    if (arity < 256)
      out[1] = (unsigned char)arity;
    else
      ks_etf_u32(out + 1, (uint32_t)arity);
    for (at = arity < 256 ? 2 : 5, k = 0; k < (unsigned)arity; k++, at += w)
      if ((w = ks_etf_term(env, e[k], out + at, cap - at, depth + 1)) == 0)
        return 0;
    return at;
  case ERL_NIF_TERM_TYPE_LIST:
    if (enif_is_empty_list(env, t)) {
      out[0] = 106;
      return 1;
    }
    /* An improper list is the VM's; every element takes a byte at least. */
    return ks_etf_list_length(env, t, cap, &n) ? ks_etf_list(env, t, n, out, cap, depth) : 0;
  default:
    return 0;
  }
}

/* t's external format into out (cap bytes), or 0: the caller asks the VM. */
static inline size_t ks_etf_put(ErlNifEnv *env, ERL_NIF_TERM t, unsigned char *out, size_t cap) {
  return ks_etf_term(env, t, out, cap, 0);
}

/* ks_atom_ext, from the VM's own encoding of an atom (load time). */
static void ks_etf_probe(ErlNifEnv *env) {
  static const unsigned char atom_ext[] = {131, 100, 0, 2, 'k', 's'};
  static const unsigned char small_utf8[] = {131, 119, 2, 'k', 's'};
  ErlNifBinary bin;

  ks_atom_ext = 0;
  if (!enif_term_to_binary(env, enif_make_atom(env, "ks"), &bin))
    return;
  if (bin.size == sizeof(atom_ext) && memcmp(bin.data, atom_ext, bin.size) == 0)
    ks_atom_ext = 100;
  else if (bin.size == sizeof(small_utf8) && memcmp(bin.data, small_utf8, bin.size) == 0)
    ks_atom_ext = 119;
  enif_release_binary(&bin);
}

#endif
