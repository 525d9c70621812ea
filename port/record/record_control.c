/* record_control.c: recording and replay as the sink's commands (doc/internals-record.md),
 * and a recording as its capture's observer.
 *
 *   {flame_start, Id, [..., {record, Path}, ...]}   ok | {error, {record_failed, Path, Reason}}
 *   flame_status's and flame_write's record => #{path, files, bytes, events, cut_events, error}
 *   {flame_replay, Path | [Path], Opts}             flame_write's reply, Info with
 *                                                   replay => #{events, truncated, error}
 *                                                   | {error, {replay_failed, Path, Reason}}
 *   {record_header, Path}                           {ok, #{Key => Value}}: the options
 *                                                   the file was recorded with
 *                                                   | {error, {replay_failed, Path, Reason}}
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <ei.h>

#include "ks_record.h"
#include "core/ks_platform.h"
#include "proto/ks_proto.h"

#define MAX_FILES 1024

static int encode_bin(ei_x_buff *x, const char *s) {
  return ei_x_encode_binary(x, s, (long)strlen(s));
}

/* Why a recording was refused: an errno's atom, or the directory's reason. */
static int encode_refusal(ei_x_buff *x, const ks_record_refusal *why) {
  if (why->dir.why != KS_DIR_OK && why->dir.why != KS_DIR_ERRNO)
    return ks_enc_dir_why(x, &why->dir);
  return why->err == ENOTSUP ? ei_x_encode_atom(x, "not_supported") : ks_enc_errno(x, why->err);
}

/* The recording as an observer (ks_fobserver): what the capture is given, recorded. */
static void obs_event(void *r, const ks_decoded *d, int trigger) {
  ks_record_event(r, d, trigger);
}

static void obs_add_pid(void *r, uint32_t pid, const char *name, size_t n) {
  ks_record_add_pid(r, pid, name, n);
}

static void obs_set_call(void *r, uint32_t pid, const char *call, size_t n) {
  ks_record_set_call(r, pid, call, n);
}

static void obs_arm(void *r) {
  ks_record_arm(r);
}

/* The capture's end: the file ends with it (kept for the status). */
static void obs_finish(void *r, int has_end, int64_t end_ts) {
  ks_record_finish(r, has_end, end_ts);
  ks_record_close(r);
}

static void obs_forget(void *r, const uint8_t *dead, uint32_t n) {
  ks_record_forget(r, dead, n);
}

static void obs_free(void *r) {
  ks_record_free(r);
}

/* record => #{path, files, bytes, events, cut_events, error} */
static void obs_put_info(const void *rec, ks_map *m) {
  ks_record_status st;
  ks_map r;
  uint32_t k;
  int e = 0;

  ks_record_get_status(rec, &st);
  ks_map_key(m, "record");
  ks_map_begin(&r, m->x);
  ks_map_key(&r, "path");
  e = encode_bin(m->x, st.path);
  ks_map_key(&r, "files");
  if (st.nfiles > 0)
    e = e || ei_x_encode_list_header(m->x, st.nfiles);
  for (k = 0; k < st.nfiles && !e; k++)
    e = encode_bin(m->x, st.files[k]);
  e = e || ei_x_encode_empty_list(m->x);
  ks_map_u64(&r, "bytes", st.bytes);
  ks_map_u64(&r, "events", st.events);
  ks_map_u64(&r, "cut_events", st.cut_events);
  ks_map_key(&r, "error");
  e = e || (st.err ? ks_enc_errno(m->x, st.err) : ei_x_encode_atom(m->x, "none"));
  r.e |= e;
  m->e |= ks_map_end(&r);
}

int ks_record_capture(ks_flame *fl, ks_fcap *c, const ks_intern *in, const char *path,
                      ks_record_refusal *why) {
  ks_fobserver obs = {NULL, obs_event, obs_add_pid, obs_set_call, obs_arm, obs_finish,
                      obs_forget, obs_put_info, obs_free};
  ks_record *r;

  if (ks_record_open(&r, path, c, in, why) != KS_OK)
    return KS_EINVAL;
  obs.self = r;
  ks_flame_observe(fl, c, &obs);
  return KS_OK;
}

const ks_record *ks_record_of(const ks_fcap *c) {
  return c->obs.event == obs_event ? c->obs.self : NULL;
}

int ks_record_attach(ks_flame *fl, ks_fcap *c, const ks_intern *in, const char *b, int at,
                     ei_x_buff *x) {
  char path[KS_OUT_DIR_MAX];
  ks_record_refusal why;
  size_t n;

  if (ks_arg_bin(b, &at, path, sizeof(path), &n) != KS_OK || n == 0 ||
      memchr(path, 0, n) != NULL) {
    (void)ks_enc_error(x, "badarg");
    return KS_EINVAL;
  }
  if (ks_record_capture(fl, c, in, path, &why) == KS_OK)
    return KS_OK;
  (void)(ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error") ||
         ei_x_encode_tuple_header(x, 3) || ei_x_encode_atom(x, "record_failed") ||
         encode_bin(x, path) || encode_refusal(x, &why));
  return KS_EINVAL;
}

/* replay => #{events, truncated, error}: a replay's key in its Info. */
static void put_replay(ks_map *m, const void *ctx) {
  const ks_replay *rp = ctx;
  ks_map r;

  ks_map_key(m, "replay");
  ks_map_begin(&r, m->x);
  ks_map_u64(&r, "events", rp->events);
  ks_map_bool(&r, "truncated", rp->truncated);
  ks_map_atom(&r, "error", rp->err ? ks_rread_error_name(rp->err) : "none");
  m->e |= ks_map_end(&r);
}

/* A reader's fault as a term: its atom, or {open_failed, Errno}. */
static int encode_read_error(ei_x_buff *x, int err, int err_errno) {
  if (err == KS_RERR_OPEN)
    return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "open_failed") ||
           ks_enc_errno(x, err_errno);
  return ei_x_encode_atom(x, ks_rread_error_name(err));
}

/* {error, {replay_failed, Path, Reason}} */
static int encode_replay_failed(ei_x_buff *x, const char *path, int err, int err_errno) {
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error") ||
         ei_x_encode_tuple_header(x, 3) || ei_x_encode_atom(x, "replay_failed") ||
         encode_bin(x, path) || encode_read_error(x, err, err_errno);
}

int ks_replay_write(ks_replay *rp, const ks_fdest *d, ei_x_buff *x) {
  ks_flame_extra extra = {put_replay, rp};

  if (rp->c == NULL)
    return encode_replay_failed(x, rp->err_path ? rp->err_path : "", rp->err, rp->err_errno);
  return ks_flame_write_files(&rp->in, rp->c, d, x, &extra);
}

/* Paths: a binary or a list of them, copied into one buffer. */
static int decode_paths(const char *b, int *idx, char *buf, size_t cap, const char **paths,
                        size_t *n) {
  int type, size, list = 0, k, count = 1;
  size_t used = 0;
  long got;

  if (ei_get_type(b, idx, &type, &size) == 0 && type == ERL_LIST_EXT) {
    if (ei_decode_list_header(b, idx, &count) != 0 || count <= 0 || count > MAX_FILES)
      return KS_EINVAL;
    list = 1;
  }
  for (k = 0; k < count; k++) {
    if (ei_get_type(b, idx, &type, &size) != 0 || type != ERL_BINARY_EXT || size <= 0 ||
        (size_t)size + 1 > cap - used || ei_decode_binary(b, idx, buf + used, &got) != 0 ||
        memchr(buf + used, 0, (size_t)got) != NULL)
      return KS_EINVAL;
    buf[used + (size_t)got] = 0;
    paths[k] = buf + used;
    used += (size_t)got + 1;
  }
  *n = (size_t)count;
  return list && ei_decode_list_header(b, idx, &k) != 0 ? KS_EINVAL : KS_OK;
}

/* The dest's defaults: the current directory, the first file's name. */
static int default_dest(ks_fdest *d, const char *first) {
  const char *slash = strrchr(first, '/');

  d->fmts = 0;
  snprintf(d->base, sizeof(d->base), "%s", slash ? slash + 1 : first);
  return getcwd(d->dir, sizeof(d->dir) - 1100) != NULL ? KS_OK : KS_EINVAL;
}

int ks_cmd_flame_replay(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x) {
  const char *b = (const char *)cmd->term.p, *paths[MAX_FILES];
  int idx = cmd->idx;
  static char buf[MAX_FILES * 256];
  ks_replay_opts ro;
  ks_replay rp;
  ks_fdest d;
  size_t n;
  int k, count, e;

  ks_replay_default_opts(&ro);
  if (decode_paths(b, &idx, buf, sizeof(buf), paths, &n) != KS_OK ||
      default_dest(&d, paths[0]) != KS_OK || ei_decode_list_header(b, &idx, &count) != 0)
    return ks_enc_error(x, "badarg");
  for (k = 0; k < count; k++)
    if (ks_replay_opt_term(b, &idx, &d, &ro) != KS_OK)
      return ks_enc_error(x, "badarg");
  if (d.fmts == 0)
    d.fmts = ks_write_format_bit(NULL);
  if (ks_replay_files(&rp, paths, n, &ro) == KS_ENOMEM) {
    ks_replay_free(&rp);
    return ks_enc_error(x, "enomem");
  }
  e = ks_replay_write(&rp, &d, x);
  ks_replay_free(&rp);
  return e;
}

/* A header key's value as its row's type: an MFA or undefined, a boolean, an
 * enum's atom, an integer. */
static int encode_key(ei_x_buff *x, const ks_intern *in, const ks_record_key *k,
                      const ks_fopts *o) {
  uint64_t v = ks_option_load(o, k->field);
  size_t j;

  if (ks_record_key_is_mfa(k))
    return ks_enc_mfa(x, in, (uint32_t)v);
  if (k->row->type == KS_T_BOOL)
    return ei_x_encode_boolean(x, v != 0);
  for (j = 0; j < ks_noption_values && k->row->type == KS_T_ENUM; j++)
    if (strcmp(ks_option_values[j].key, k->row->key) == 0 && (uint64_t)ks_option_values[j].value == v)
      return ei_x_encode_atom(x, ks_option_values[j].atom);
  if (k->row->min < 0)
    return ei_x_encode_longlong(x, ks_record_unzigzag(ks_record_key_get(k, o)));
  return ei_x_encode_ulonglong(x, v);
}

int ks_cmd_record_header(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x) {
  char path[KS_OUT_DIR_MAX];
  const char *b = (const char *)cmd->term.p;
  ks_record_key k;
  ks_intern in;
  ks_fopts o;
  ks_rread *r;
  ks_map m;
  size_t n, i;
  int idx = cmd->idx, e;

  if (ks_arg_bin(b, &idx, path, sizeof(path), &n) != KS_OK || n == 0 ||
      memchr(path, 0, n) != NULL)
    return ks_enc_error(x, "badarg");
  if (ks_intern_init(&in, NULL) != KS_OK)
    return ks_enc_error(x, "enomem");
  if ((r = ks_rread_open(path, &in, &o)) == NULL) {
    ks_intern_free(&in);
    return ks_enc_error(x, "enomem");
  }
  if (ks_rread_error(r) != 0) {
    e = encode_replay_failed(x, path, ks_rread_error(r), ks_rread_errno(r));
  } else {
    e = ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "ok");
    ks_map_begin(&m, x);
    for (i = 0; ks_record_key_at(i, &k) == KS_OK; i++) {
      ks_map_key(&m, k.row->key);
      m.e |= encode_key(x, &in, &k, &o);
    }
    e = e || ks_map_end(&m);
  }
  ks_rread_close(r);
  ks_intern_free(&in);
  return e;
}
