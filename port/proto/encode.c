/* encode.c: the pieces the sink's replies are made of (port/proto/ks_proto.h). */
#include <string.h>

#include <stdio.h>
#include "ks_proto.h"
#include "core/ks_platform.h"

int ks_enc_error(ei_x_buff *x, const char *reason) {
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error") ||
         ei_x_encode_atom(x, reason);
}

int ks_enc_error2(ei_x_buff *x, const char *tag, const char *v) {
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error") ||
         ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, tag) || ei_x_encode_atom(x, v);
}

int ks_enc_ok_or_error(ei_x_buff *x, int rc) {
  if (rc == KS_OK)
    return ei_x_encode_atom(x, "ok");
  return ks_enc_error(x, rc == KS_ENOMEM ? "enomem" : rc == KS_ENOSPC ? "enospc" : "badarg");
}

/* The command comes back verbatim: control.c answers a command that is not
 * echoable (ks_etf_echoable) as bad_command before it gets here. */
int ks_enc_unknown_command(ei_x_buff *x, ks_slice cmd) {
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error") ||
         ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "unknown_command") ||
         ei_x_append_buf(x, (const char *)cmd.p, (int)cmd.n);
}

int ks_enc_atom_utf8(ei_x_buff *x, const char *s) {
  return ei_x_encode_atom_len_as(x, s, (int)strlen(s), ERLANG_UTF8, ERLANG_UTF8);
}

int ks_enc_mfa(ei_x_buff *x, const ks_intern *in, uint32_t mfa) {
  ks_mfa_view v;

  if (ks_intern_mfa_get(in, mfa, &v) != KS_OK)
    return ei_x_encode_atom(x, "undefined");
  return ei_x_encode_tuple_header(x, 3) || ks_enc_atom_utf8(x, v.m) ||
         ks_enc_atom_utf8(x, v.f) || ei_x_encode_ulong(x, v.arity);
}

int ks_enc_pid(ei_x_buff *x, const ks_intern *in, uint32_t id) {
  ks_pid_view v;
  erlang_pid p;

  if (id == KS_NONE || ks_intern_pid_get(in, id, &v) != KS_OK || v.is_port)
    return ei_x_encode_atom(x, "undefined");
  memset(&p, 0, sizeof(p));
  snprintf(p.node, sizeof(p.node), "%s", v.node);
  p.num = v.num;
  p.serial = v.serial;
  p.creation = v.creation;
  return ei_x_encode_pid(x, &p);
}

void ks_map_begin(ks_map *m, ei_x_buff *x) {
  m->x = x;
  m->at = x->index;
  m->n = 0;
  m->e = ei_x_encode_map_header(x, 0);
}

void ks_map_key(ks_map *m, const char *key) {
  m->n++;
  m->e |= ei_x_encode_atom(m->x, key);
}

void ks_map_u64(ks_map *m, const char *key, uint64_t v) {
  ks_map_key(m, key);
  m->e |= ei_x_encode_ulonglong(m->x, (EI_ULONGLONG)v);
}

void ks_map_i64_or_undefined(ks_map *m, const char *key, int64_t v, int64_t undefined) {
  ks_map_key(m, key);
  m->e |= v == undefined ? ei_x_encode_atom(m->x, "undefined") : ei_x_encode_longlong(m->x, v);
}

void ks_map_bool(ks_map *m, const char *key, int v) {
  ks_map_key(m, key);
  m->e |= ei_x_encode_boolean(m->x, v);
}

void ks_map_atom(ks_map *m, const char *key, const char *v) {
  ks_map_key(m, key);
  m->e |= ei_x_encode_atom(m->x, v);
}

int ks_map_end(ks_map *m) {
  unsigned char *h = (unsigned char *)m->x->buff + m->at;

  /* ei writes every map header as MAP_EXT and a 4-byte big-endian arity. */
  if (m->e || m->x->index < m->at + 5 || h[0] != ERL_MAP_EXT)
    return -1;
  ks_put_be32(h + 1, m->n);
  return 0;
}

int ks_enc_errno(ei_x_buff *x, int err) {
  const char *name = ks_errno_name(err);

  return ei_x_encode_atom(x, name != NULL ? name : "unknown");
}

int ks_enc_dir_why(ei_x_buff *x, const ks_out_dir *r) {
  char mode[8];

  switch (r->why) {
  case KS_DIR_RELATIVE:
    return ei_x_encode_atom(x, "relative");
  case KS_DIR_SYMLINK:
    return ei_x_encode_atom(x, "symlink");
  case KS_DIR_NOT_DIR:
    return ei_x_encode_atom(x, "not_directory");
  case KS_DIR_OWNER:
    return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "owner") ||
           ei_x_encode_ulonglong(x, (EI_ULONGLONG)r->uid);
  default:
    snprintf(mode, sizeof(mode), "%04o", (unsigned)r->mode & 07777);
    return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "writable") ||
           ei_x_encode_string(x, mode);
  }
}
