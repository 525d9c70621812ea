/* control.c: the owner's commands ({kprof, Ref, Command}), one table of them
 * (every feature's commands: the top of the sink, above tiers/ and flame/),
 * and the replies and alerts sent back (port/sink/ks_sink.h; the encoders are
 * port/proto/'s).
 *
 * Replies are encoded with erl_interface's ei_x_* into one buffer that starts
 * with a 4-byte hole for the {packet,4} length.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ei.h>

#include "ks_sink.h"
#include "record/ks_record.h"

/* {Tag, ... : the caller encodes the other two elements, then finish(). */
static int begin(ei_x_buff *x, const char *tag) {
  static const char hole[4] = {0, 0, 0, 0};

  if (ei_x_new(x) != 0)
    return KS_ENOMEM;
  if (ei_x_append_buf(x, hole, 4) || ei_x_encode_version(x) ||
      ei_x_encode_tuple_header(x, 3) || ei_x_encode_atom(x, tag)) {
    ei_x_free(x);
    return KS_ENOMEM;
  }
  return KS_OK;
}

static int begin_reply(ei_x_buff *x, ks_slice ref) {
  if (begin(x, "kprof_reply") != KS_OK)
    return KS_ENOMEM;
  if (ei_x_append_buf(x, (const char *)ref.p, (int)ref.n)) {
    ei_x_free(x);
    return KS_ENOMEM;
  }
  return KS_OK;
}

static void finish(ks_sink *s, ei_x_buff *x, int failed) {
  if (!failed) {
    ks_put_be32((unsigned char *)x->buff, (uint32_t)(x->index - 4));
    if (s->emit != NULL)
      s->emit(s->emit_ctx, (const unsigned char *)x->buff, (size_t)x->index);
    s->emitted++;
  }
  ei_x_free(x);
}

/* #{Ring => Drops} of the rings that dropped events (ring_drops is their sum). */
static void encode_ring_drops(const ks_ring_reader *r, ks_map *m) {
  ks_map d;
  unsigned k;

  ks_map_begin(&d, m->x);
  for (k = 0; k < r->rings; k++)
    if (r->cur[k].drops_seen > 0) {
      d.n++;
      d.e |= ei_x_encode_ulong(d.x, k) | ei_x_encode_ulonglong(d.x, r->cur[k].drops_seen);
    }
  m->e |= ks_map_end(&d);
}

static int encode_stats(const ks_sink *s, ei_x_buff *x) {
  const ks_stats *st = &s->st;
  const struct { const char *key; uint64_t v; } top[] = {
    {"frames", s->fr.frames}, {"bytes", s->fr.bytes},
    {"trace_events", st->trace_events}, {"commands", st->commands},
    {"decode_errors", st->decode_errors}, {"unknown", st->unknown},
    {"dropped", st->dropped}, {"dropped_mfas", s->in.dropped_mfas},
    {"dropped_pids", s->in.dropped_pids}, {"dropped_names", s->in.dropped_terms},
    {"oversized", s->fr.oversized}, {"empty", s->fr.empty},
    {"truncated", st->truncated}, {"mfas", s->in.n_mfas}, {"pids", ks_intern_pids_live(&s->in)},
    {"pids_freed", s->in.pids_freed},
    {"killed_requests", s->tiers.killed_total},
    {"names", s->in.n_terms}, {"max_frame", s->fr.max_frame},
    {"pipe_size", s->pipe_size}, {"replies", s->emitted},
    {"alerts", s->ov.alerts}, {"limited", s->lim.limited},
    {"lag_us", s->ov.lag_ns > 0 ? (uint64_t)s->ov.lag_ns / 1000 : 0},
    {"worst_lag_us", s->ov.worst_lag_ns > 0 ? (uint64_t)s->ov.worst_lag_ns / 1000 : 0},
    {"ring_size", s->ring.size}, {"ring_records", s->ring.records},
    {"ring_bytes", s->ring.bytes}, {"ring_drops", s->ring.drops_seen},
    {"ring_unsupported", s->ring.unsupported_seen}, {"ring_unresolved", s->ring.unresolved},
    {"ring_bad", s->ring.bad}, {"ring_full", s->ring.full},
    {"ring_rings", s->ring.rings}, {"ring_claimed", ks_ring_claimed(&s->ring)},
    {"ring_disorder", s->ring.disorder},
    {"ring_wait_ms", s->ring.h != NULL ? ks_sink_ring_wait(s) : 0},
    {"ring_wait_max_ms", s->ring_wait_max_ms}};
  ks_map m, ev;
  size_t k;

  ks_map_begin(&m, x);
  for (k = 0; k < sizeof(top) / sizeof(top[0]); k++)
    ks_map_u64(&m, top[k].key, top[k].v);
  ks_map_key(&m, "ring_drops_per_ring");
  encode_ring_drops(&s->ring, &m);
  ks_map_key(&m, "events");
  ks_map_begin(&ev, x);
  for (k = 0; k < KS_EV__COUNT; k++)
    ks_map_u64(&ev, ks_event_kind_names[k], st->events[k]);
  return ks_map_end(&ev) | ks_map_end(&m);
}

/* [{{M, F, Arity}, Count}] for every MFA called since the last reset. */
static int encode_calls(const ks_sink *s, ei_x_buff *x) {
  uint32_t id, n = s->st.mfa_calls_cap < s->in.n_mfas ? s->st.mfa_calls_cap : s->in.n_mfas;
  long count = 0;
  int e = 0;

  for (id = 0; id < n; id++)
    count += s->st.mfa_calls[id] != 0;
  if (count > 0)
    e |= ei_x_encode_list_header(x, count);
  for (id = 0; id < n && !e; id++) {
    if (s->st.mfa_calls[id] == 0)
      continue;
    e |= ei_x_encode_tuple_header(x, 2) || ks_enc_mfa(x, &s->in, id) ||
         ei_x_encode_ulonglong(x, (EI_ULONGLONG)s->st.mfa_calls[id]);
  }
  return e || ei_x_encode_empty_list(x);
}

/* The command's name: the atom, or a tuple's first element; *idx is just past it. */
static int command_name(ks_slice cmd, char *name, int *arity, int *idx) {
  const char *b = (const char *)cmd.p;

  *idx = 0;
  *arity = 0;
  if (ei_decode_atom(b, idx, name) == 0)
    return (size_t)*idx == cmd.n ? KS_OK : KS_EINVAL;
  *idx = 0;
  if (ei_decode_tuple_header(b, idx, arity) != 0 || *arity < 1 || ei_decode_atom(b, idx, name) != 0)
    return KS_EINVAL;
  return KS_OK;
}

/* The sink's own commands; the tiers' and flame captures' are in their folders. */

static int cmd_ping(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  return ei_x_encode_atom(x, "pong");
}

static int cmd_sync(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  ks_tiers_flush(&s->tiers, 0);
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "synced") ||
         ei_x_encode_ulonglong(x, (EI_ULONGLONG)s->fr.frames);
}

static int cmd_stats(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  return encode_stats(s, x);
}

/* Every counter starts again; what is set up (bounds, ids, captures) stays. */
static int cmd_reset(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  ks_stats_reset(&s->st);
  ks_intern_reset_counts(&s->in);
  ks_overload_reset(&s->ov);
  ks_framer_reset_counts(&s->fr);
  ks_limits_rearm(&s->lim);   /* the bounds stay, counted from here */
  ks_consumers_reset(&s->cons);
  return ei_x_encode_atom(x, "ok");
}

static int cmd_calls(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  return encode_calls(s, x);
}

/* The sink's resident bytes now (Linux: /proc/self/statm), -1 when unknown. */
static int64_t rss_now(void) {
  unsigned long long size, resident;
  long page = sysconf(_SC_PAGESIZE);
  FILE *f = fopen("/proc/self/statm", "r");
  int n;

  if (f == NULL)
    return -1;
  n = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  return n == 2 && page > 0 ? (int64_t)(resident * (unsigned long long)page) : -1;
}

/* memory: #{rss, peak_rss, flame_trees, flame_captures, ring} in bytes: the
 * sink's resident memory from the OS (undefined where it is not known), and the
 * parts it counts itself: the captures' call-path trees (what max_bytes
 * bounds, nodes and slots) and the rings' shared object. */
static int cmd_memory(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  uint64_t trees = 0, captures = 0;
  int64_t rss = rss_now(), peak = -1;
  struct rusage ru;
  ks_map m;
  int k;

  for (k = 0; k < KS_FLAME_MAX; k++)
    if (s->flame.cap[k].used) {
      trees += s->flame.cap[k].cp.tree.bytes;
      captures++;
    }
  if (getrusage(RUSAGE_SELF, &ru) == 0)
#ifdef __APPLE__
    peak = (int64_t)ru.ru_maxrss;          /* bytes */
#else
    peak = (int64_t)ru.ru_maxrss * 1024;   /* KiB */
#endif
  if (rss > peak)   /* the kernel's high-water mark may lag the page count read */
    peak = rss;
  ks_map_begin(&m, x);
  ks_map_i64_or_undefined(&m, "rss", rss, -1);
  ks_map_i64_or_undefined(&m, "peak_rss", peak, -1);
  ks_map_u64(&m, "flame_trees", trees);
  ks_map_u64(&m, "flame_captures", captures);
  ks_map_u64(&m, "ring", s->ring.h != NULL ? ks_ring_object_bytes(s->ring.size, s->ring.rings)
                                             : 0);
  return ks_map_end(&m);
}

/* The protocol `version' answers: KS_PROTOCOL. The fault-injection build
 * answers $KPROF_FAULT_PROTOCOL when it is set, so that kprof_sink's refusal
 * of a sink of another protocol is tested (kprof_fault_tests). */
static long protocol(void) {
#ifdef KS_FAULT_INJECTION
  const char *p = getenv("KPROF_FAULT_PROTOCOL");

  if (p != NULL && *p != 0)
    return atol(p);
#endif
  return KS_PROTOCOL;
}

static int cmd_version(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  return ei_x_encode_tuple_header(x, 3) || ei_x_encode_atom(x, "kprof_sink") ||
         ei_x_encode_string(x, KS_VERSION) || ei_x_encode_long(x, protocol());
}

/* {Name, Integer} with Integer in [lo, hi]. */
static int decode_arg(ks_cmd *c, long long lo, long long hi, long long *v) {
  return ei_decode_longlong((const char *)c->term.p, &c->idx, v) != 0 || *v < lo || *v > hi
             ? KS_EINVAL
             : KS_OK;
}

/* {clock, VmNs}: the VM's monotonic time now, for the lag. */
static int cmd_clock(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  long long v;

  if (decode_arg(c, INT64_MIN / 2, INT64_MAX, &v) != KS_OK)
    return ks_enc_error(x, "badarg");
  ks_overload_sync(&s->ov, v);
  return ei_x_encode_atom(x, "ok");
}

/* {overload, MaxLagMs}: 0 turns the bound off. kprof_guard sends 0 when
 * nothing is traced any more: an alert still owed then (a lag, or drops held
 * back by the one-a-second gap) is about events of what was traced, and would
 * come during the next mode and abort it (a capture ended with no files). It
 * is not sent (the drops stay counted), and the next mode's first alert is
 * not held back by the last one's gap. */
static int cmd_overload(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  long long v;

  if (decode_arg(c, 0, 3600000000ll, &v) != KS_OK)
    return ks_enc_error(x, "badarg");
  s->ov.max_lag_ns = v * 1000000;
  if (v == 0) {
    ks_overload_forget(&s->ov);
    s->ring.drops_pending = 0;
  }
  return ei_x_encode_atom(x, "ok");
}

#ifdef KS_FAULT_INJECTION
/* {test_delay_us, Us}: the fault-injection build sleeps this long per trace message. */
static int cmd_test_delay_us(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  long long v;

  if (decode_arg(c, 0, 3600000000ll, &v) != KS_OK)
    return ks_enc_error(x, "badarg");
  s->ov.test_delay_us = (uint32_t)v;
  return ei_x_encode_atom(x, "ok");
}
#endif

/* {limits, MaxEvents, RateMax, RatePerMs}: 0 for none; counted from here. */
static int cmd_limits(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  unsigned long long v[3];
  const char *b = (const char *)c->term.p;

  if (ei_decode_ulonglong(b, &c->idx, &v[0]) != 0 || ei_decode_ulonglong(b, &c->idx, &v[1]) != 0 ||
      ei_decode_ulonglong(b, &c->idx, &v[2]) != 0 || v[0] > (1ull << 62) || v[1] > (1ull << 62) ||
      v[2] > 100000000000ull || (v[1] > 0) != (v[2] > 0))
    return ks_enc_error(x, "badarg");
  ks_limits_set(&s->lim, v[0], v[1], (int64_t)v[2]);
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "ok") ||
         ei_x_encode_ulonglong(x, (EI_ULONGLONG)s->st.trace_events);
}

/* Tiers and flame captures both set local call patterns, and a capture's
 * end clears them all: one mode at a time. kprof_guard decides it for the
 * VM (its claim, before a mode sets anything); the sink keeps its own state
 * whole in command order (a capture holds its slot from flame_start to
 * flame_write/flame_drop, the tiers theirs from tiers_start to tiers_stop),
 * which also answers a start that follows an abort while the aborted
 * capture is still being written. */
static int cmd_tiers_start(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  if (s->flame.active > 0)
    return ks_enc_error2(x, "busy", "flame");
  return ks_enc_ok_or_error(x, ks_tiers_decode_start(&s->tiers, c));
}

static int cmd_flame_start(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  if (s->tiers.active)
    return ks_enc_error2(x, "busy", "tiers");
  return ks_cmd_flame_start(&s->flame, c, x);
}

/* A sampled profile is a flame capture too: the tiers refuse it, as they
 * refuse a traced one (and tiers_start answers {busy, flame} while it runs). */
static int cmd_sample_start(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  if (s->tiers.active)
    return ks_enc_error2(x, "busy", "tiers");
  return ks_cmd_sample_start(&s->sampling, c, x);
}

static int cmd_tiers_stop(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  ks_tiers_stop(&s->tiers);
  return ei_x_encode_atom(x, "ok");
}

static int cmd_tiers_reset(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  ks_tiers_reset(&s->tiers);
  return ei_x_encode_atom(x, "ok");
}

/* {tiers_report, Flush} or {tiers_report, Flush, Clear}. */
static int cmd_tiers_report(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  const char *b = (const char *)c->term.p;
  int flush = 0, clear = 0, e;

  if (ei_decode_boolean(b, &c->idx, &flush) != 0 ||
      (c->arity == 3 && ei_decode_boolean(b, &c->idx, &clear) != 0))
    return ks_enc_error(x, "badarg");
  ks_tiers_flush(&s->tiers, flush);
  e = ks_tiers_encode_report(&s->tiers, &s->in, x);
  if (clear)
    ks_tiers_clear_rows(&s->tiers);
  return e;
}

/* {ring_open, Bytes} | {ring_open, Bytes, Rings}: {ok, ShmName} | {error, badarg | enomem}.
 * Rings of Bytes each, the last one shared (one ring: every writer shares it). */
static int cmd_ring_open(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  unsigned long long size;
  unsigned long rings = 1;
  int rc;

  if (ei_decode_ulonglong((const char *)c->term.p, &c->idx, &size) != 0 ||
      (c->arity == 3 && ei_decode_ulong((const char *)c->term.p, &c->idx, &rings) != 0) ||
      rings > KS_RING_MAX_RINGS)
    rc = KS_EINVAL;
  else
    rc = ks_ring_open(&s->ring, size, (unsigned)rings);
  if (rc != KS_OK)
    return ks_enc_ok_or_error(x, rc);
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "ok") ||
         ei_x_encode_binary(x, s->ring.name, (int)strlen(s->ring.name));
}

/* {ring_wait_max, Ms}: ok | {error, badarg}. The longest wait between two
 * drains of the rings, 1 to KS_RING_WAIT_MAX_MS (1: every millisecond). */
static int cmd_ring_wait_max(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  unsigned long ms;

  if (ei_decode_ulong((const char *)c->term.p, &c->idx, &ms) != 0 || ms < 1 ||
      ms > KS_RING_WAIT_MAX_MS)
    return ks_enc_ok_or_error(x, KS_EINVAL);
  s->ring_wait_max_ms = (unsigned)ms;
  return ei_x_encode_atom(x, "ok");
}

static int cmd_ring_unlink(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  ks_ring_unlink(&s->ring);
  return ei_x_encode_atom(x, "ok");
}

static int cmd_ring_close(ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  ks_ring_close(&s->ring);
  return ei_x_encode_atom(x, "ok");
}

/* Every command: its name, the tuple arities it takes (0: a bare atom), its
 * handler: the sink's own (given the sink) or a feature's (given the
 * feature's state; declared in its header). doc/internals-protocol.md lists them with
 * their replies. */
typedef struct ks_command {
  const char *name;
  int min_arity, max_arity;
  int (*sink)(ks_sink *s, ks_cmd *c, ei_x_buff *x);
  int (*tiers)(ks_tiers *t, ks_cmd *c, ei_x_buff *x);
  int (*flame)(ks_flame *f, ks_cmd *c, ei_x_buff *x);
  int (*sample)(ks_sampling *sm, ks_cmd *c, ei_x_buff *x);
} ks_command;

static const ks_command commands[] = {
  {"ping", 0, 0, .sink = cmd_ping},
  {"sync", 0, 0, .sink = cmd_sync},
  {"stats", 0, 0, .sink = cmd_stats},
  {"reset", 0, 0, .sink = cmd_reset},
  {"calls", 0, 0, .sink = cmd_calls},
  {"version", 0, 0, .sink = cmd_version},
  {"memory", 0, 0, .sink = cmd_memory},
  {"clock", 2, 2, .sink = cmd_clock},
  {"overload", 2, 2, .sink = cmd_overload},
#ifdef KS_FAULT_INJECTION
  {"test_delay_us", 2, 2, .sink = cmd_test_delay_us},
#endif
  {"limits", 4, 4, .sink = cmd_limits},
  {"ring_open", 2, 3, .sink = cmd_ring_open},
  {"ring_wait_max", 2, 2, .sink = cmd_ring_wait_max},
  {"ring_unlink", 0, 0, .sink = cmd_ring_unlink},
  {"ring_close", 0, 0, .sink = cmd_ring_close},
  {"tiers_start", 3, 3, .sink = cmd_tiers_start},
  {"tiers_stop", 0, 0, .sink = cmd_tiers_stop},
  {"tiers_reset", 0, 0, .sink = cmd_tiers_reset},
  {"tiers_report", 2, 3, .sink = cmd_tiers_report},
  {"tiers_full_report", 2, 2, .tiers = ks_cmd_tiers_full_report},
  {"tiers_full_write", 5, 5, .tiers = ks_cmd_tiers_full_write},
  {"flame_start", 3, 3, .sink = cmd_flame_start},
  {"flame_pids", 3, 3, .flame = ks_cmd_flame_pids},
  {"flame_arm", 2, 2, .flame = ks_cmd_flame_arm},
  {"flame_status", 2, 2, .flame = ks_cmd_flame_status},
  {"flame_members", 2, 3, .flame = ks_cmd_flame_members},
  {"flame_drop", 2, 2, .flame = ks_cmd_flame_drop},
  {"flame_write", 6, 6, .flame = ks_cmd_flame_write},
  {"flame_dir", 2, 2, .flame = ks_cmd_flame_dir},
  {"flame_replay", 3, 3, .flame = ks_cmd_flame_replay},
  {"record_header", 2, 2, .flame = ks_cmd_record_header},
  {"sample_start", 3, 3, .sink = cmd_sample_start},
  {"sample_status", 2, 2, .sample = ks_cmd_sample_status},
  {"sample_window", 2, 2, .sample = ks_cmd_sample_window},
  {"sample_stop", 2, 2, .sample = ks_cmd_sample_stop},
  {"sample_write", 5, 5, .sample = ks_cmd_sample_write},
};

static const ks_command *find_command(const char *name, int arity) {
  size_t k;

  for (k = 0; k < sizeof(commands) / sizeof(commands[0]); k++)
    if (strcmp(commands[k].name, name) == 0 && arity >= commands[k].min_arity &&
        arity <= commands[k].max_arity)
      return &commands[k];
  return NULL;
}

static int run(const ks_command *r, ks_sink *s, ks_cmd *c, ei_x_buff *x) {
  if (r->tiers != NULL)
    return r->tiers(&s->tiers, c, x);
  if (r->flame != NULL)
    return r->flame(&s->flame, c, x);
  if (r->sample != NULL)
    return r->sample(&s->sampling, c, x);
  return r->sink(s, c, x);
}

void ks_control_command(ks_sink *s, ks_slice ref, ks_slice cmd) {
  char name[MAXATOMLEN] = "";
  const ks_command *r;
  ks_cmd c = {cmd, 0, 0, &s->in};
  ei_x_buff x;
  int e;

  if (begin_reply(&x, ref) != KS_OK)
    return;
  /* Command may come back verbatim: never echo what the owner cannot decode. */
  if (cmd.p != NULL && !ks_etf_echoable(cmd))
    cmd.p = NULL;
  if (cmd.p == NULL)
    e = ks_enc_error(&x, "bad_command");
  else if (command_name(cmd, name, &c.arity, &c.idx) != KS_OK ||
           (r = find_command(name, c.arity)) == NULL)
    e = ks_enc_unknown_command(&x, cmd);
  else
    e = run(r, s, &c, &x);
  finish(s, &x, e);
}

/* Every alert: {kprof_alert, Kind, #{what, value, bound, ...}} with what was
 * measured, the figure and the bound it passed first (kprof_alert.erl's one
 * shape; doc/internals-protocol.md); the caller adds its own keys to m, then finish()es
 * with ks_map_end(m). */
static int begin_alert(ks_sink *s, ei_x_buff *x, ks_map *m, const char *kind, const char *what,
                       uint64_t value, uint64_t bound) {
  int e;

  s->ov.alerts++;
  if (begin(x, "kprof_alert") != KS_OK)
    return KS_ENOMEM;
  e = ei_x_encode_atom(x, kind);
  ks_map_begin(m, x);
  m->e |= e;
  ks_map_atom(m, "what", what);
  ks_map_u64(m, "value", value);
  ks_map_u64(m, "bound", bound);
  return KS_OK;
}

/* The ring was full: events were lost. One alert per second at most. */
static void ring_alert(ks_sink *s) {
  ks_overload *o = &s->ov;
  ei_x_buff x;
  ks_map m;

  if (!s->ring.drops_pending || o->now_ns - o->last_alert_ns < o->alert_gap_ns)
    return;
  s->ring.drops_pending = 0;
  o->last_alert_ns = o->now_ns;
  if (begin_alert(s, &x, &m, "overload", "ring_drops", s->ring.drops_seen, 0) != KS_OK)
    return;
  ks_map_u64(&m, "ring_size", s->ring.size);
  ks_map_key(&m, "rings");
  encode_ring_drops(&s->ring, &m);
  ks_map_u64(&m, "events", s->st.trace_events);
  finish(s, &x, ks_map_end(&m));
}

/* A limit tripped: one alert per trip (the trip stays until the limits are set again). */
static void limit_alert(ks_sink *s) {
  ks_limits *l = &s->lim;
  ei_x_buff x;
  ks_map m;
  int rate = l->tripped == KS_LIMIT_RATE;

  if (!l->pending)
    return;
  l->pending = 0;
  if (begin_alert(s, &x, &m, "limit", rate ? "rate" : "max_events", l->value,
                  rate ? l->rate_max : l->max_events) != KS_OK)
    return;
  ks_map_u64(&m, "events", l->trip_events);
  if (rate)
    ks_map_u64(&m, "per_ms", (uint64_t)(l->rate_per_ns / 1000000));
  finish(s, &x, ks_map_end(&m));
}

/* A trace message older than the bound: the lag in ms, and exactly in us. */
static void lag_alert(ks_sink *s) {
  ks_overload *o = &s->ov;
  uint64_t lag_us = (uint64_t)o->pending_lag_ns / 1000, max_us = (uint64_t)o->max_lag_ns / 1000;
  ei_x_buff x;
  ks_map m;

  if (!o->pending)
    return;
  o->pending = 0;
  o->last_alert_ns = o->now_ns;
  o->pending_lag_ns = 0;
  if (begin_alert(s, &x, &m, "overload", "lag_ms", lag_us / 1000, max_us / 1000) != KS_OK)
    return;
  ks_map_u64(&m, "lag_us", lag_us);
  ks_map_u64(&m, "max_lag_us", max_us);
  ks_map_u64(&m, "events", s->st.trace_events);
  finish(s, &x, ks_map_end(&m));
}

void ks_control_alerts(ks_sink *s) {
  limit_alert(s);
  ring_alert(s);
  lag_alert(s);
}
