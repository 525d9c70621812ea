/* control.c: the owner's commands ({kprof, Ref, Command}) and the replies and alerts sent back.
 *
 * Replies are encoded with erl_interface's ei_x_* into one buffer that starts
 * with a 4-byte hole for the {packet,4} length.
 */
#include <ei.h>

#include "ks_sink.h"

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

static int put_key_u64(ei_x_buff *x, const char *key, uint64_t v) {
  return ei_x_encode_atom(x, key) || ei_x_encode_ulonglong(x, (EI_ULONGLONG)v);
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
    {"ring_bad", s->ring.bad}, {"ring_full", s->ring.full}};
  size_t k, n = sizeof(top) / sizeof(top[0]);
  int e;

  e = ei_x_encode_map_header(x, (long)n + 1);
  for (k = 0; k < n; k++)
    e |= put_key_u64(x, top[k].key, top[k].v);
  e |= ei_x_encode_atom(x, "events");
  e |= ei_x_encode_map_header(x, KS_EV__COUNT);
  for (k = 0; k < KS_EV__COUNT; k++)
    e |= put_key_u64(x, ks_event_kind_names[k], st->events[k]);
  return e;
}

static int encode_atom_utf8(ei_x_buff *x, const char *s) {
  return ei_x_encode_atom_len_as(x, s, (int)strlen(s), ERLANG_UTF8, ERLANG_UTF8);
}

/* [{{M, F, Arity}, Count}] for every MFA called since the last reset. */
static int encode_calls(const ks_sink *s, ei_x_buff *x) {
  uint32_t id, n = s->st.mfa_calls_cap < s->in.n_mfas ? s->st.mfa_calls_cap : s->in.n_mfas;
  long count = 0;
  ks_mfa_view v;
  int e = 0;

  for (id = 0; id < n; id++)
    count += s->st.mfa_calls[id] != 0;
  if (count > 0)
    e |= ei_x_encode_list_header(x, count);
  for (id = 0; id < n && !e; id++) {
    if (s->st.mfa_calls[id] == 0 || ks_intern_mfa_get(&s->in, id, &v) != KS_OK)
      continue;
    e |= ei_x_encode_tuple_header(x, 2) || ei_x_encode_tuple_header(x, 3) ||
         encode_atom_utf8(x, v.m) || encode_atom_utf8(x, v.f) ||
         ei_x_encode_ulong(x, v.arity) ||
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

static int encode_error(ei_x_buff *x, const char *reason) {
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error") ||
         ei_x_encode_atom(x, reason);
}

/* {error, {busy, Mode}}: the other mode (tiers or flame) holds the trace patterns. */
static int encode_busy(ei_x_buff *x, const char *mode) {
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error") ||
         ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "busy") ||
         ei_x_encode_atom(x, mode);
}

static int encode_ok_or_error(ei_x_buff *x, int rc) {
  if (rc == KS_OK)
    return ei_x_encode_atom(x, "ok");
  return encode_error(x, rc == KS_ENOMEM ? "enomem" : "badarg");
}

#define IS(n, a) (strcmp(name, n) == 0 && arity == (a))

void ks_control_command(ks_sink *s, ks_slice ref, ks_slice cmd) {
  char name[MAXATOMLEN] = "";
  ei_x_buff x;
  int e = 0, arity = -1, idx = 0;

  if (begin_reply(&x, ref) != KS_OK)
    return;
  /* Command may come back verbatim: never echo what the owner cannot decode. */
  if (cmd.p != NULL && !ks_etf_echoable(cmd))
    cmd.p = NULL;   /* answered as a badly shaped command */
  if (cmd.p == NULL)
    e = encode_error(&x, "bad_command");
  else if (command_name(cmd, name, &arity, &idx) != KS_OK)
    arity = -1;   /* unknown */
  if (cmd.p == NULL) {
  } else if (IS("ping", 0)) {
    e = ei_x_encode_atom(&x, "pong");
  } else if (IS("sync", 0)) {
    ks_tiers_flush(&s->tiers, 0);
    e = ei_x_encode_tuple_header(&x, 2) || ei_x_encode_atom(&x, "synced") ||
        ei_x_encode_ulonglong(&x, (EI_ULONGLONG)s->fr.frames);
  } else if (IS("stats", 0)) {
    e = encode_stats(s, &x);
  } else if (IS("reset", 0)) {
    ks_stats_reset(&s->st);
    s->in.dropped_mfas = s->in.dropped_pids = s->in.dropped_terms = 0;
    s->ov.worst_lag_ns = 0;
    s->fr.frames = s->fr.bytes = s->fr.empty = s->fr.oversized = 0;
    ks_limits_rearm(&s->lim);   /* the bounds stay, counted from here */
    e = ei_x_encode_atom(&x, "ok");
  } else if (IS("calls", 0)) {
    e = encode_calls(s, &x);
  } else if (IS("version", 0)) {
    e = ei_x_encode_tuple_header(&x, 3) || ei_x_encode_atom(&x, "kprof_sink") ||
        ei_x_encode_string(&x, KS_VERSION) || ei_x_encode_long(&x, KS_PROTOCOL);
  } else if (IS("clock", 2) || IS("overload", 2) || IS("test_delay_us", 2)) {
    long long v;
    if (ei_decode_longlong((const char *)cmd.p, &idx, &v) != 0 || v < INT64_MIN / 2 ||
        (name[0] != 'c' && (v < 0 || v > 3600000000ll))) {
      e = encode_error(&x, "badarg");
    } else {
      if (name[0] == 'c')
        ks_overload_sync(&s->ov, v);
      else if (name[0] == 'o')
        s->ov.max_lag_ns = v * 1000000;   /* ms; 0 turns the bound off */
      else
        s->ov.test_delay_us = (uint32_t)v;
      e = ei_x_encode_atom(&x, "ok");
    }
  } else if (IS("limits", 4)) {
    /* {limits, MaxEvents, RateMax, RatePerMs}: 0 for none; counted from here. */
    unsigned long long v[3];
    const char *b = (const char *)cmd.p;
    if (ei_decode_ulonglong(b, &idx, &v[0]) != 0 || ei_decode_ulonglong(b, &idx, &v[1]) != 0 ||
        ei_decode_ulonglong(b, &idx, &v[2]) != 0 || v[0] > (1ull << 62) || v[1] > (1ull << 62) ||
        v[2] > 100000000000ull || (v[1] > 0) != (v[2] > 0)) {
      e = encode_error(&x, "badarg");
    } else {
      ks_limits_set(&s->lim, v[0], v[1], (int64_t)v[2]);
      e = ei_x_encode_tuple_header(&x, 2) || ei_x_encode_atom(&x, "ok") ||
          ei_x_encode_ulonglong(&x, (EI_ULONGLONG)s->st.trace_events);
    }
  } else if (IS("tiers_start", 3)) {
    /* Tiers and flame captures both set local call patterns, and a capture's
     * end clears them all: one mode at a time, decided here, in command order
     * (a capture holds its slot from flame_start to flame_write/flame_drop,
     * the tiers theirs from tiers_start to tiers_stop). */
    if (s->flame.active > 0)
      e = encode_busy(&x, "flame");
    else
      e = encode_ok_or_error(&x, ks_tier_command_start(s, (const char *)cmd.p, &idx));
  } else if (IS("tiers_stop", 0)) {
    ks_tiers_stop(&s->tiers);
    e = ei_x_encode_atom(&x, "ok");
  } else if (IS("tier_reset", 0)) {
    ks_tiers_reset(&s->tiers);
    e = ei_x_encode_atom(&x, "ok");
  } else if (IS("tier_report", 2) || IS("tier_report", 3)) {
    int flush = 0, clear = 0;
    if (ei_decode_boolean((const char *)cmd.p, &idx, &flush) != 0 ||
        (arity == 3 && ei_decode_boolean((const char *)cmd.p, &idx, &clear) != 0)) {
      e = encode_error(&x, "badarg");
    } else {
      ks_tiers_flush(&s->tiers, flush);
      e = ks_tier_encode_report(s, &x);
      if (clear)
        ks_tiers_clear_rows(&s->tiers);
    }
  } else if (strncmp(name, "tier_full_", 10) == 0 && arity >= 2) {
    e = ks_tier_full_command(s, name, arity, cmd, idx, &x);
  } else if (IS("ring_open", 2)) {
    unsigned long long size;
    int rc;
    if (ei_decode_ulonglong((const char *)cmd.p, &idx, &size) != 0)
      rc = KS_EINVAL;
    else
      rc = ks_ring_open(&s->ring, size);
    if (rc == KS_OK)
      e = ei_x_encode_tuple_header(&x, 2) || ei_x_encode_atom(&x, "ok") ||
          ei_x_encode_binary(&x, s->ring.name, (int)strlen(s->ring.name));
    else
      e = encode_ok_or_error(&x, rc);   /* never KS_OK here: the error */
  } else if (IS("ring_unlink", 0)) {
    ks_ring_unlink(&s->ring);
    e = ei_x_encode_atom(&x, "ok");
  } else if (IS("ring_close", 0)) {
    ks_ring_close(&s->ring);
    e = ei_x_encode_atom(&x, "ok");
  } else if (IS("flame_start", 3) && s->tiers.active) {
    e = encode_busy(&x, "tiers");   /* see tiers_start */
  } else if (strncmp(name, "flame_", 6) == 0 && arity >= 2) {
    e = ks_flame_command(s, name, arity, cmd, idx, &x);
  } else {
    e = ei_x_encode_tuple_header(&x, 2) || ei_x_encode_atom(&x, "error") ||
        ei_x_encode_tuple_header(&x, 2) || ei_x_encode_atom(&x, "unknown_command") ||
        ei_x_append_buf(&x, (const char *)cmd.p, (int)cmd.n);
  }
  finish(s, &x, e);
}

/* The ring was full: events were lost. One alert per second at most. */
static void ring_alert(ks_sink *s) {
  ks_overload *o = &s->ov;
  ei_x_buff x;
  int e;

  if (!s->ring.drops_pending || o->now_ns - o->last_alert_ns < o->alert_gap_ns)
    return;
  s->ring.drops_pending = 0;
  o->last_alert_ns = o->now_ns;
  o->alerts++;
  if (begin(&x, "kprof_alert") != KS_OK)
    return;
  e = ei_x_encode_atom(&x, "overload") || ei_x_encode_map_header(&x, 3) ||
      put_key_u64(&x, "ring_drops", s->ring.drops_seen) ||
      put_key_u64(&x, "ring_size", s->ring.size) ||
      put_key_u64(&x, "events", s->st.trace_events);
  finish(s, &x, e);
}

/* A limit tripped: one alert per trip (the trip stays until the limits are set again). */
static void limit_alert(ks_sink *s) {
  ks_limits *l = &s->lim;
  ei_x_buff x;
  int e, rate = l->tripped == KS_LIMIT_RATE;

  if (!l->pending)
    return;
  l->pending = 0;
  s->ov.alerts++;
  if (begin(&x, "kprof_alert") != KS_OK)
    return;
  e = ei_x_encode_atom(&x, "limit") || ei_x_encode_map_header(&x, rate ? 5 : 4) ||
      ei_x_encode_atom(&x, "what") || ei_x_encode_atom(&x, rate ? "rate" : "max_events") ||
      put_key_u64(&x, "value", l->value) ||
      put_key_u64(&x, "bound", rate ? l->rate_max : l->max_events) ||
      put_key_u64(&x, "events", l->trip_events);
  if (rate)
    e = e || put_key_u64(&x, "per_ms", (uint64_t)(l->rate_per_ns / 1000000));
  finish(s, &x, e);
}

void ks_control_alerts(ks_sink *s) {
  ks_overload *o = &s->ov;
  ei_x_buff x;
  int e;

  limit_alert(s);
  ring_alert(s);
  if (!o->pending)
    return;
  o->pending = 0;
  o->last_alert_ns = o->now_ns;
  o->alerts++;
  if (begin(&x, "kprof_alert") != KS_OK)
    return;
  e = ei_x_encode_atom(&x, "overload") || ei_x_encode_map_header(&x, 3) ||
      put_key_u64(&x, "lag_us", (uint64_t)o->pending_lag_ns / 1000) ||
      put_key_u64(&x, "max_lag_us", (uint64_t)o->max_lag_ns / 1000) ||
      put_key_u64(&x, "events", s->st.trace_events);
  o->pending_lag_ns = 0;
  finish(s, &x, e);
}
