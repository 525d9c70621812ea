/* test_util.c: term builders, event printing, output capture, a sink fed
 * commands, temporary directories, ring records and mount namespaces for the
 * suites. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "test_util.h"

void tb_begin(ei_x_buff *x) {
  ck_assert_int_eq(ei_x_new_with_version(x), 0);
}

void tb_atom_as(ei_x_buff *x, const char *a, erlang_char_encoding enc) {
  ck_assert_int_eq(ei_x_encode_atom_len_as(x, a, (int)strlen(a), ERLANG_UTF8, enc), 0);
}

void tb_atom(ei_x_buff *x, const char *a) {
  tb_atom_as(x, a, ERLANG_LATIN1);
}

void tb_pid(ei_x_buff *x, const char *node, unsigned num, unsigned serial, unsigned creation) {
  erlang_pid p;

  memset(&p, 0, sizeof(p));
  snprintf(p.node, sizeof(p.node), "%s", node);
  p.num = num;
  p.serial = serial;
  p.creation = creation;
  ck_assert_int_eq(ei_x_encode_pid(x, &p), 0);
}

void tb_mfa(ei_x_buff *x, const char *m, const char *f, int arity) {
  ck_assert_int_eq(ei_x_encode_tuple_header(x, 3), 0);
  tb_atom(x, m);
  tb_atom(x, f);
  ck_assert_int_eq(ei_x_encode_long(x, arity), 0);
}

uint32_t tb_intern_mfa(ks_intern *in, const char *m, const char *f, uint32_t arity) {
  ks_atom am = {(const unsigned char *)m, strlen(m), 1}, af = {(const unsigned char *)f, strlen(f), 1};
  uint32_t id;

  ck_assert_int_eq(ks_intern_mfa(in, &am, &af, arity, &id), KS_OK);
  return id;
}

uint32_t tb_intern_pid(ks_intern *in, unsigned num) {
  ei_x_buff x;
  ks_slice s;
  uint32_t id;

  ck_assert_int_eq(ei_x_new(&x), 0);
  tb_pid(&x, "n@h", num, 0, 1);
  s.p = (const unsigned char *)x.buff;
  s.n = (size_t)x.index;
  ck_assert_int_eq(ks_intern_pid(in, s, &id), KS_OK);
  ei_x_free(&x);
  return id;
}

unsigned char *tb_framed(const ei_x_buff *x, size_t *len) {
  unsigned char *f = malloc((size_t)x->index + 4);

  ck_assert_ptr_nonnull(f);
  ks_put_be32(f, (uint32_t)x->index);
  memcpy(f + 4, x->buff, (size_t)x->index);
  *len = (size_t)x->index + 4;
  return f;
}

static void put_pid(const ks_intern *in, uint32_t id, char *out, size_t cap) {
  ks_pid_view v;

  if (id == KS_NONE || ks_intern_pid_get(in, id, &v) != KS_OK)
    snprintf(out, cap, "-");
  else if (v.is_port)
    snprintf(out, cap, "#Port<0.%" PRIu64 ">", (uint64_t)v.num << 32 | v.serial);
  else
    snprintf(out, cap, "<0.%u.%u>", v.num, v.serial);
}

static void put_mfa(const ks_intern *in, uint32_t id, char *out, size_t cap) {
  ks_mfa_view v;

  if (id == KS_NONE || ks_intern_mfa_get(in, id, &v) != KS_OK)
    snprintf(out, cap, "-");
  else
    snprintf(out, cap, "%s:%s/%u", v.m, v.f, v.arity);
}

static void put_term(ks_slice s, char *out, size_t cap) {
  char *txt = NULL;
  int idx = 0;

  if (s.p == NULL || ei_s_print_term(&txt, (const char *)s.p, &idx) < 0)
    snprintf(out, cap, "-");
  else
    snprintf(out, cap, "%s", txt);
  free(txt);
}

void event_line(const ks_intern *in, int rc, const ks_decoded *d, char *out, size_t cap) {
  const ks_event *ev = &d->ev;
  char pid[64], mfa[600], label[256], other[64], caller[600], ts[32];

  if (rc != KS_FRAME_TRACE && rc != KS_EFULL) {
    snprintf(out, cap, "error %d", rc);
    return;
  }
  put_pid(in, ev->pid, pid, sizeof(pid));
  put_mfa(in, ev->mfa, mfa, sizeof(mfa));
  if (ev->flags & KS_EVF_LABEL)
    put_term(d->label, label, sizeof(label));
  else if (ev->name != KS_NONE)
    put_term(ks_intern_term_get(in, ev->name), label, sizeof(label));
  else
    snprintf(label, sizeof(label), "-");
  put_pid(in, ev->other, other, sizeof(other));
  put_mfa(in, (ev->flags & KS_EVF_CALLER) ? ev->caller : KS_NONE, caller, sizeof(caller));
  if (ev->flags & KS_EVF_TS)
    snprintf(ts, sizeof(ts), "%" PRId64, ev->ts);
  else
    snprintf(ts, sizeof(ts), "-");
  snprintf(out, cap, "%s %s %s %s %s %s %s", ks_event_kind_names[ev->kind], pid, mfa, ts,
           label, other, caller);
}

void tb_out_emit(void *ctx, const unsigned char *frame, size_t len) {
  tb_out *o = ctx;

  if (o->len + len > o->cap) {
    o->cap = (o->len + len) * 2;
    o->buf = realloc(o->buf, o->cap);
    ck_assert_ptr_nonnull(o->buf);
  }
  memcpy(o->buf + o->len, frame, len);
  o->len += len;
  o->frames++;
}

char *tb_out_reply(const tb_out *o, int k) {
  size_t off = 0;
  char *txt = NULL;
  int idx, arity, version;

  while (k-- > 0) {
    ck_assert_uint_le(off + 4, o->len);
    off += 4 + ks_be32(o->buf + off);
  }
  ck_assert_uint_le(off + 4, o->len);
  idx = 0;
  {
    const char *b = (const char *)o->buf + off + 4;
    ck_assert_int_eq(ei_decode_version(b, &idx, &version), 0);
    ck_assert_int_eq(ei_decode_tuple_header(b, &idx, &arity), 0);
    ck_assert_int_eq(arity, 3);
    ck_assert_int_eq(ei_skip_term(b, &idx), 0);   /* kprof_reply | kprof_alert */
    ck_assert_int_eq(ei_skip_term(b, &idx), 0);   /* Ref | Kind */
    ck_assert_int_ge(ei_s_print_term(&txt, b, &idx), 0);
    ck_assert_int_eq(idx, (int)ks_be32(o->buf + off));
  }
  return txt;
}

void tb_out_free(tb_out *o) {
  free(o->buf);
  memset(o, 0, sizeof(*o));
}

void tb_sink_open(ks_sink *s, const ks_sink_opts *o, tb_out *out) {
  memset(out, 0, sizeof(*out));
  ck_assert_int_eq(ks_sink_init(s, o, tb_out_emit, out), KS_OK);
}

void tb_sink_close(ks_sink *s, tb_out *out) {
  ks_sink_free(s);
  tb_out_free(out);
}

void tb_feed(ks_sink *s, ei_x_buff *x) {
  size_t n;
  unsigned char *f = tb_framed(x, &n);

  ck_assert_int_eq(ks_sink_feed(s, f, n), KS_OK);
  free(f);
  ei_x_free(x);
}

void tb_cmd_begin(ei_x_buff *x, long ref, const char *name, int arity) {
  tb_begin(x);
  ei_x_encode_tuple_header(x, 3);
  tb_atom(x, "kprof");
  ei_x_encode_long(x, ref);
  ei_x_encode_tuple_header(x, arity);
  tb_atom(x, name);
}

void tb_flame_pids(ks_sink *s, long ref, long id, unsigned a, unsigned b) {
  ei_x_buff x;

  tb_cmd_begin(&x, ref, "flame_pids", 3);
  ei_x_encode_long(&x, id);
  ei_x_encode_list_header(&x, b ? 2 : 1);
  ei_x_encode_tuple_header(&x, 2);
  tb_pid(&x, "n@h", a, 0, 1);
  tb_atom(&x, "undefined");
  if (b) {
    ei_x_encode_tuple_header(&x, 2);
    tb_pid(&x, "n@h", b, 0, 1);
    tb_atom(&x, "undefined");
  }
  ei_x_encode_empty_list(&x);
  tb_feed(s, &x);
}

void tb_flame_write(ks_sink *s, long ref, long id, const char *dir, const char *base) {
  ei_x_buff x;

  tb_cmd_begin(&x, ref, "flame_write", 6);
  ei_x_encode_long(&x, id);
  ei_x_encode_longlong(&x, 2000000);
  ei_x_encode_binary(&x, dir, (long)strlen(dir));
  ei_x_encode_binary(&x, base, (long)strlen(base));
  ei_x_encode_list_header(&x, 2);
  tb_atom(&x, "folded");
  tb_atom(&x, "svg");
  ei_x_encode_empty_list(&x);
  tb_feed(s, &x);
}

void tb_tmpdir(char *dir, size_t cap, const char *what) {
  ck_assert_int_lt(snprintf(dir, cap, "/tmp/kprof-%s-XXXXXX", what), (int)cap);
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

void tb_tmpdir_remove(const char *dir) {
  char cmd[4200];

  ck_assert_int_lt(snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir), (int)sizeof(cmd));
  ck_assert_int_eq(system(cmd), 0);
}

uint64_t tb_ring_atom(ks_ring_writer *w, uint64_t word, const char *name) {
  size_t n = strlen(name), len = ks_ring_align(sizeof(ks_rec_atom) + n);
  uint64_t pos = w->head;
  unsigned char *rec = ks_ring_reserve(w, len);
  ks_rec_atom a;

  ck_assert_ptr_nonnull(rec);
  memset(&a, 0, sizeof(a));
  a.atom = word;
  a.len = (uint16_t)n;
  memcpy(rec + 8, (unsigned char *)&a + 8, sizeof(a) - 8);
  memcpy(rec + sizeof(a), name, n);
  ks_ring_commit(w, rec, len, KS_REC_ATOM, 0);
  return pos;
}

unsigned char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  unsigned char *b;
  long n;

  if (f == NULL)
    return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  b = malloc((size_t)n + 1);
  if (b == NULL || fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    fclose(f);
    return NULL;
  }
  fclose(f);
  b[n] = 0;
  *len = (size_t)n;
  return b;
}

const char *test_data_dir(void) {
  const char *d = getenv("KPROF_TEST_DATA");
  return d != NULL ? d : "test/data";
}

void tb_tier_event(ks_decoded *d, int kind, uint32_t pid, int64_t ts, uint32_t mfa,
                   uint32_t caller, const unsigned char *label, const unsigned char *payload,
                   size_t plen) {
  memset(d, 0, sizeof(*d));
  d->ev.kind = (uint8_t)kind;
  d->ev.flags = KS_EVF_TS;
  d->ev.pid = pid;
  d->ev.ts = ts;
  d->ev.mfa = mfa;
  d->ev.caller = caller;
  d->ev.other = d->ev.name = KS_NONE;
  if (caller != KS_NONE)
    d->ev.flags |= KS_EVF_CALLER;
  if (label != NULL) {
    d->ev.flags |= KS_EVF_LABEL | KS_EVF_TOKEN;
    d->label.p = label;
    d->label.n = 2;
  }
  d->payload.p = payload;
  d->payload.n = plen;
}

static int put_proc(const char *file, const char *text) {
  int fd = open(file, O_WRONLY), ok;

  if (fd < 0)
    return -1;
  ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  close(fd);
  return ok ? 0 : -1;
}

int tb_private_mounts(void) {
  char map[64];
  unsigned uid = (unsigned)getuid(), gid = (unsigned)getgid();

  if (unshare(CLONE_NEWNS) != 0) {
    if (errno != EPERM || unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return errno;
    snprintf(map, sizeof(map), "0 %u 1", uid);
    if (put_proc("/proc/self/setgroups", "deny") != 0 || put_proc("/proc/self/uid_map", map) != 0)
      return errno;
    snprintf(map, sizeof(map), "0 %u 1", gid);
    if (put_proc("/proc/self/gid_map", map) != 0)
      return errno;
  }
  /* Source and type are ignored for MS_PRIVATE; valgrind wants them readable. */
  return mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) == 0 ? 0 : errno;
}
