/* sample_control.c: the sample_* commands (ks_sample.h lists them, doc/internals-sample.md
 * says their keys and replies) and the sampling session's life in the sink.
 *
 * sample_start's options are rows of include/ks_options.h of mode
 * KS_M_SAMPLE: the flame rows a sampled capture takes (group, names, top,
 * max_bytes, ...) into its capture's ks_fopts, the sampler's own (hz,
 * os_pid) into this file's struct, the terms (the pid template and layout,
 * the beacons, the processes asked for, the recording) decoded here.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "ks_sample.h"

typedef struct sample_opts {
  ks_fopts f;                  /* the capture's */
  uint32_t hz, os_pid;
  ks_sampler_opts so;
  uint32_t only[4096];         /* pids asked for (ids) */
  char record[KS_OUT_DIR_MAX];
} sample_opts;

#define KS_FIELD_flame(m, scale) KS_OPTION_FIELD(sample_opts, f.m, scale)
#define KS_FIELD_sample(m, scale) KS_OPTION_FIELD(sample_opts, m, scale)
#define KS_FIELD_tiers(m, scale) KS_OPTION_NO_FIELD
static const ks_option_field fields[] = {
#include "proto/ks_option_fields.h"
};
#undef KS_FIELD_tiers
#undef KS_FIELD_sample
#undef KS_FIELD_flame
_Static_assert(sizeof(fields) / sizeof(fields[0]) == KS_NOPTIONS, "one field per row");

static int admit_all(void *ctx, int64_t t) {
  return 1;
}

void ks_sampling_init(ks_sampling *sm, ks_flame *fl, ks_intern *in) {
  uint32_t k;

  memset(sm, 0, sizeof(*sm));
  ks_sampler_init(&sm->smp, in);
  sm->fl = fl;
  sm->smp.admit = admit_all;
  for (k = 0; k < KS_THR_KINDS; k++)
    sm->roots[k] = KS_NONE;
}

void ks_sampling_free(ks_sampling *sm) {
  ks_sampler_free(&sm->smp);
  free(sm->seen);
  sm->seen = NULL;
  sm->capseen = 0;
}

int ks_sampling_drain_ms(const ks_sampling *sm) {
  uint32_t hz = sm->smp.hz > 0 ? sm->smp.hz : 1, ms = 5000 / hz;

  return ms < 10 ? 10 : ms > 50 ? 50 : (int)ms;
}

void ks_sampling_poll(ks_sampling *sm, int64_t now) {
  if (!sm->smp.active)
    return;
  if (ks_flame_find(sm->fl, sm->id) == NULL) {   /* its capture was dropped: nothing to feed */
    ks_sampler_stop(&sm->smp, now);
    sm->stopped_at = now;
    return;
  }
  ks_sampler_drain(&sm->smp, now);
  if (sm->smp.pe.n == 0 && kill(sm->smp.ospid, 0) != 0 && errno == ESRCH) {
    ks_sampler_stop(&sm->smp, now);   /* the VM is gone */
    sm->stopped_at = now;
    sm->gone = 1;
  }
}

/* ---- sample_start ---- */

static int decode_pid(ks_intern *in, const char *b, size_t len, int *idx, ks_slice *raw) {
  ks_etf e;
  int is_port;

  ks_etf_init(&e, b, len);
  e.i = (size_t)*idx;
  if (ks_etf_pid(&e, raw, &is_port) != KS_OK || is_port)
    return KS_EINVAL;
  *idx = (int)e.i;
  return KS_OK;
}

/* {A, B}: two integers in [0, max]. */
static int decode_pair(const char *b, int *idx, long long max, uint32_t *a, uint32_t *c) {
  long long x, y;
  int ar;

  if (ei_decode_tuple_header(b, idx, &ar) != 0 || ar != 2 || ei_decode_longlong(b, idx, &x) != 0 ||
      ei_decode_longlong(b, idx, &y) != 0 || x < 0 || y < 0 || x > max || y > max)
    return KS_EINVAL;
  *a = (uint32_t)x;
  *c = (uint32_t)y;
  return KS_OK;
}

/* [Pid]: each a pid of the node; into ids (interned) or numbers (beacons). */
static int decode_pids(ks_intern *in, const char *b, size_t len, int *idx, sample_opts *o,
                       int beacons) {
  ks_pid_view v;
  ks_slice raw;
  uint32_t id;
  int n, k;

  if (ei_decode_list_header(b, idx, &n) != 0 || n < 0 ||
      n > (beacons ? KS_CAL_BEACONS : (int)(sizeof(o->only) / sizeof(o->only[0]))))
    return KS_EINVAL;
  for (k = 0; k < n; k++) {
    if (decode_pid(in, b, len, idx, &raw) != KS_OK || ks_intern_pid(in, raw, &id) != KS_OK ||
        ks_intern_pid_get(in, id, &v) != KS_OK)
      return KS_EINVAL;
    if (beacons) {
      o->so.beacon_num[k] = v.num;
      o->so.beacon_ser[k] = v.serial;
    } else {
      o->only[k] = id;
    }
  }
  if (n > 0 && (ei_decode_list_header(b, idx, &n) != 0 || n != 0))
    return KS_EINVAL;
  if (beacons)
    o->so.nbeacons = (uint32_t)k;
  else {
    o->so.only = o->only;
    o->so.nonly = (uint32_t)k;
  }
  return KS_OK;
}

static int decode_term(ks_intern *in, const char *key, const char *b, size_t len, int *idx,
                       sample_opts *o) {
  ks_slice raw;
  size_t n;
  int type, size;
  long got;

  if (strcmp(key, "pid_template") == 0) {
    if (decode_pid(in, b, len, idx, &raw) != KS_OK || raw.n > sizeof(((ks_sampler *)0)->pid_tmpl))
      return KS_EINVAL;
    o->so.pid_tmpl = raw.p;
    o->so.pid_tmpl_n = raw.n;
    return KS_OK;
  }
  if (strcmp(key, "pid_bits") == 0)
    return decode_pair(b, idx, 32, &o->so.lay.num_bits, &o->so.lay.ser_bits) == KS_OK &&
                   o->so.lay.num_bits > 0 ? KS_OK : KS_EINVAL;
  if (strcmp(key, "layout") == 0) {
    if (decode_pair(b, idx, 8 * (KS_CAL_WORDS - 1), &o->so.lay.offset, &o->so.lay.shift) != KS_OK ||
        o->so.lay.offset % 8 != 0 || o->so.lay.shift >= KS_CAL_SHIFTS)
      return KS_EINVAL;
    o->so.lay.known = 1;
    return KS_OK;
  }
  if (strcmp(key, "beacons") == 0 || strcmp(key, "pids") == 0)
    return decode_pids(in, b, len, idx, o, key[0] == 'b');
  if (strcmp(key, "raw_record") == 0) {
    if (ei_get_type(b, idx, &type, &size) != 0 || type != ERL_BINARY_EXT || size <= 1 ||
        (size_t)size >= sizeof(o->record) || ei_decode_binary(b, idx, o->record, &got) != 0)
      return KS_EINVAL;
    n = (size_t)got;
    o->record[n] = 0;
    if (o->record[0] != '/' || memchr(o->record, 0, n) != NULL)
      return KS_EINVAL;
    o->so.record = o->record;
    return KS_OK;
  }
  return ks_flame_decode_term(in, key, b, len, idx, &o->f);
}

static const char *decode_start(ks_intern *in, const char *b, size_t len, int *idx,
                                long long *id, sample_opts *o) {
  const ks_option *term;
  int n, k;

  memset(o, 0, sizeof(*o));
  ks_fopts_default(&o->f);
  ks_option_defaults(KS_M_SAMPLE, fields, o);
  if (ei_decode_longlong(b, idx, id) != 0 || ei_decode_list_header(b, idx, &n) != 0)
    return "badarg";
  for (k = 0; k < n; k++)
    if (ks_option_decode(KS_M_SAMPLE, fields, b, idx, o, &term) != KS_OK ||
        (term != NULL && decode_term(in, term->key, b, len, idx, o) != KS_OK))
      return "badarg";
  if (o->os_pid == 0 || o->so.pid_tmpl == NULL || o->so.lay.num_bits == 0)
    return "badarg";
  o->so.ospid = (int)o->os_pid;
  o->so.hz = o->hz;
  o->f.sample_hz = o->hz;
  return NULL;
}

/* The sink's own path, for the hint of a permission refused. */
static void sink_path(char *buf, size_t cap) {
  ssize_t n = readlink("/proc/self/exe", buf, cap - 1);

  if (n <= 0)
    snprintf(buf, cap, "kprof_sink");
  else
    buf[n] = 0;
}

/* {error, Reason} for a session that could not start (ks_sampler_start's rc). */
static int encode_refusal(ei_x_buff *x, int rc, int ospid, int err) {
  char path[2048], hint[2300];
  int e = ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error");

  if (rc == KS_SAMPLE_NO_MAP)
    return e || ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "needs_emulator_flag") ||
           ei_x_encode_string(x, "+JPperf map");
  if (rc == KS_PERF_ENOTSUP)
    return e || ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "not_supported") ||
           ei_x_encode_atom(x, "perf_events");
  if (rc == -ESRCH || rc == -ENOENT)
    return e || ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "no_such_process") ||
           ei_x_encode_long(x, ospid);
  if (rc == KS_PERF_EMLOCK)
    return e || ei_x_encode_tuple_header(x, 3) || ei_x_encode_atom(x, "perf_event_mmap") ||
           ks_enc_errno(x, err) ||
           ei_x_encode_string(x, "ulimit -l (RLIMIT_MEMLOCK), or sysctl kernel.perf_event_mlock_kb");
  if (rc == -EACCES || rc == -EPERM) {
    sink_path(path, sizeof(path));
    snprintf(hint, sizeof(hint),
             "sysctl kernel.perf_event_paranoid=2, or setcap cap_perfmon+ep %s", path);
    return e || ei_x_encode_tuple_header(x, 3) || ei_x_encode_atom(x, "perf_event_open") ||
           ks_enc_errno(x, -rc) || ei_x_encode_string(x, hint);
  }
  return e || ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "perf_event_open") ||
         ks_enc_errno(x, rc < 0 ? -rc : EINVAL);
}

int ks_cmd_sample_start(ks_sampling *sm, ks_cmd *cmd, ei_x_buff *x) {
  static sample_opts o;   /* large (the pids asked for): one command at a time */
  const char *err;
  long long id;
  int rc;

  if (sm->smp.active)
    return ks_enc_error(x, "busy");
  if ((err = decode_start(cmd->in, (const char *)cmd->term.p, cmd->term.n, &cmd->idx, &id, &o)))
    return ks_enc_error(x, err);
  if ((rc = ks_flame_start(sm->fl, id, &o.f)) < 0)
    return ks_enc_error(x, rc == KS_EINVAL ? "exists" : rc == KS_EFULL ? "too_many_captures"
                                                                         : "enomem");
  ks_sampling_free(sm);
  ks_sampler_init(&sm->smp, cmd->in);
  if ((rc = ks_sampler_start(&sm->smp, &o.so)) != KS_OK) {
    int e = encode_refusal(x, rc, o.so.ospid, sm->smp.pe.err);
    ks_flame_drop(sm->fl, ks_flame_find(sm->fl, id));
    ks_sampler_free(&sm->smp);
    return e;
  }
  ks_sampling_attach(sm, id);
  return ei_x_encode_atom(x, "ok");
}

void ks_sampling_attach(ks_sampling *sm, int64_t id) {
  sm->smp.emit = ks_sampling_feed;
  sm->smp.emit_ctx = sm;
  sm->smp.admit = sm->admit != NULL ? sm->admit : admit_all;
  sm->smp.admit_ctx = sm->admit_ctx;
  sm->id = id;
  sm->has = 1;
  sm->stopped_at = 0;
  sm->gone = 0;
  for (int k = 0; k < KS_THR_KINDS; k++)
    sm->roots[k] = KS_NONE;
}

/* ---- the session's figures ---- */

static void put_counters(ks_map *m, const ks_sampling *sm) {
  const ks_sampler *s = &sm->smp;
  const ks_scounters *k = &s->k;
  const struct { const char *key; uint64_t v; } rows[] = {
    {"hz", s->hz}, {"period_ns", s->period_ns}, {"samples", k->samples}, {"read", k->read},
    {"lost", k->lost}, {"bad", k->bad}, {"erlang", k->erlang}, {"c_only", k->c_only},
    {"c_only_known", k->c_only_known}, {"attributed", k->attributed},
    {"truncated", k->truncated}, {"unnamed", k->unnamed},
    {"pid_unreadable", k->pid_unreadable}, {"filtered", k->filtered},
    {"limited", k->limited}, {"calibration_samples", k->calibration},
    {"scheduler", k->by_kind[KS_THR_SCHED]}, {"dirty_cpu", k->by_kind[KS_THR_DIRTY_CPU]},
    {"dirty_io", k->by_kind[KS_THR_DIRTY_IO]}, {"threads", s->pe.n},
    {"threads_opened", s->pe.opened}, {"threads_closed", s->pe.closed},
    {"threads_unmapped", s->pe.unmapped}, {"ring_bytes", s->pe.ring_bytes},
    {"max_stack", s->max_stack}, {"map_lines", s->map.lines},
    {"map_bad_lines", s->map.bad_lines}, {"map_retired", s->map.retired},
    {"elf_files", s->elf.nfiles}};
  size_t r;

  for (r = 0; r < sizeof(rows) / sizeof(rows[0]); r++)
    ks_map_u64(m, rows[r].key, rows[r].v);
  ks_map_atom(m, "phase", s->active ? (s->calibrating ? "calibrating" : "sampling")
                                    : (sm->gone ? "vm_gone" : "stopped"));
  ks_map_key(m, "layout");
  if (s->lay.known)
    m->e |= ei_x_encode_tuple_header(m->x, 2) || ei_x_encode_ulonglong(m->x, s->lay.offset) ||
            ei_x_encode_ulonglong(m->x, s->lay.shift);
  else
    m->e |= ei_x_encode_atom(m->x, "undefined");
}

/* The session whose Id is at the command's idx, or the error in x. */
static int session(ks_sampling *sm, ks_cmd *cmd, ei_x_buff *x, int *e) {
  long long id;

  if (ei_decode_longlong((const char *)cmd->term.p, &cmd->idx, &id) != 0) {
    *e = ks_enc_error(x, "badarg");
    return 0;
  }
  if (!sm->has || id != sm->id) {
    *e = ks_enc_error(x, "not_found");
    return 0;
  }
  return 1;
}

static int encode_counters(ei_x_buff *x, const ks_sampling *sm) {
  ks_map m;

  ks_map_begin(&m, x);
  put_counters(&m, sm);
  return ks_map_end(&m);
}

int ks_cmd_sample_status(ks_sampling *sm, ks_cmd *cmd, ei_x_buff *x) {
  int e = 0;

  return session(sm, cmd, x, &e) ? encode_counters(x, sm) : e;
}

int ks_cmd_sample_window(ks_sampling *sm, ks_cmd *cmd, ei_x_buff *x) {
  int e = 0;

  if (!session(sm, cmd, x, &e))
    return e;
  if (!sm->smp.active)
    return ks_enc_error(x, "stopped");
  ks_sampler_window(&sm->smp, ks_sample_clock());
  return ei_x_encode_atom(x, "ok");
}

/* The session's figures under `sample' in the files' Info. */
static void put_sample(ks_map *m, const void *ctx) {
  ks_map inner;

  ks_map_key(m, "sample");
  ks_map_begin(&inner, m->x);
  put_counters(&inner, ctx);
  m->e |= ks_map_end(&inner);
}

/* {sample_write, Id, Dir, Base, [Format]}: sampling off (if it was not), the
 * capture's files as flame_write writes a traced one's, the session's
 * figures in their Info; the capture ends whatever happens. */
int ks_cmd_sample_write(ks_sampling *sm, ks_cmd *cmd, ei_x_buff *x) {
  const char *b = (const char *)cmd->term.p;
  ks_flame_extra extra = {put_sample, sm};
  long long id;
  ks_fcap *c;
  ks_fdest d;
  int e;

  if (ei_decode_longlong(b, &cmd->idx, &id) != 0)
    return ks_enc_error(x, "badarg");
  if ((c = ks_flame_find(sm->fl, id)) == NULL || id != sm->id)
    return ks_enc_error(x, "not_found");
  if (sm->smp.active) {
    ks_sampler_stop(&sm->smp, ks_sample_clock());
    sm->stopped_at = ks_sample_clock();
  }
  sm->has = 0;
  if (ks_write_decode_dest(b, &cmd->idx, &d, 0) != KS_OK) {
    ks_flame_drop(sm->fl, c);
    return ks_enc_error(x, "badarg");
  }
  ks_flame_finish(sm->fl, c, 0, 0);
  e = ks_flame_write_files(cmd->in, c, &d, x, &extra);
  ks_flame_drop(sm->fl, c);
  return e;
}

int ks_cmd_sample_stop(ks_sampling *sm, ks_cmd *cmd, ei_x_buff *x) {
  int64_t now = ks_sample_clock();
  int e = 0;

  if (!session(sm, cmd, x, &e))
    return e;
  if (sm->smp.active) {
    ks_sampler_stop(&sm->smp, now);
    sm->stopped_at = now;
  }
  return encode_counters(x, sm);   /* its capture stays for sample_write */
}
