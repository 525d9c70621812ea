/* sink.c: routes each frame to the decoder, then to the counters or to the control protocol. */
#include "ks_sink.h"
#include "record/ks_record.h"

void ks_sink_default_opts(ks_sink_opts *o) {
  o->read_buf = 1u << 20;
  o->max_frame = 64u << 20;
  o->limits.max_mfas = 1u << 20;
  o->limits.max_pids = 1u << 20;
  o->limits.max_terms = 1u << 20;
}

static int pids_full(void *ctx) {
  return ks_sink_reclaim_pids(ctx, 1);
}

/* A sample is an event for the guard's bounds: its age when read (max_lag_ms,
 * on the sink's own clock: the samples' clock), max_events and rate. */
static int admit_sample(void *ctx, int64_t t) {
  ks_sink *s = ctx;
  ks_event ev;

  memset(&ev, 0, sizeof(ev));
  ev.flags = KS_EVF_TS;
  ev.ts = t + s->ov.offset_ns;
  ks_overload_event(&s->ov, &ev);
  return !ks_limits_event(&s->lim, &s->ov, &ev, s->sampling.smp.k.read);
}

int ks_sink_init(ks_sink *s, const ks_sink_opts *o, ks_emit_fn emit, void *emit_ctx) {
  ks_sink_opts d;
  ks_consumer c;

  if (o == NULL) {
    ks_sink_default_opts(&d);
    o = &d;
  }
  memset(s, 0, sizeof(*s));
  s->ring_wait_max_ms = KS_RING_WAIT_MAX_MS;
  if (ks_framer_init(&s->fr, o->read_buf, o->max_frame) != KS_OK)
    return KS_ENOMEM;
  if (ks_intern_init(&s->in, &o->limits) != KS_OK) {
    ks_framer_free(&s->fr);
    return KS_ENOMEM;
  }
  ks_stats_init(&s->st);
  ks_tiers_init(&s->tiers);
  ks_overload_init(&s->ov);
  ks_limits_init(&s->lim);
  ks_flame_init(&s->flame);
  ks_ring_reader_init(&s->ring);
  ks_pid_reclaim_init(&s->pids);
  ks_sampling_init(&s->sampling, &s->flame, &s->in);
  s->sampling.admit = admit_sample;
  s->sampling.admit_ctx = s;
  /* The features that take events; the loops below name none of them. */
  ks_tiers_consumer(&s->tiers, &c);
  ks_consumers_add(&s->cons, &c);
  ks_flame_consumer(&s->flame, &c);
  ks_consumers_add(&s->cons, &c);
  /* A capture's recording is an observer of its events (flame_start's record). */
  s->flame.record = ks_record_attach;
  s->in.pids_full = pids_full;
  s->in.pids_full_ctx = s;
  s->emit = emit;
  s->emit_ctx = emit_ctx;
  return KS_OK;
}

void ks_sink_free(ks_sink *s) {
  ks_framer_free(&s->fr);
  ks_intern_free(&s->in);
  ks_stats_free(&s->st);
  ks_consumers_free(&s->cons);
  ks_sampling_free(&s->sampling);
  ks_ring_close(&s->ring);
  ks_pid_reclaim_free(&s->pids);
}

void ks_sink_trace(ks_sink *s, ks_decoded *d) {
  int mono = (d->ev.flags & (KS_EVF_TS | KS_EVF_WALL)) == KS_EVF_TS;

  if (mono && d->ev.ts > s->pids.last_ts)
    s->pids.last_ts = d->ev.ts;
  ks_overload_event(&s->ov, &d->ev);
  if (ks_stats_event(&s->st, &d->ev) != KS_OK)
    s->st.dropped++;
  /* Past max_events or the rate: the report holds exactly the events up to the
   * bound, whatever the VM still sends before tracing is off. */
  if (!ks_limits_event(&s->lim, &s->ov, &d->ev, s->st.trace_events))
    ks_consumers_event(&s->cons, &s->in, d);
  /* After the routing: the captures saw the exit with the id still the process's. */
  if (d->ev.kind == KS_EV_EXIT && mono)
    ks_sink_pid_exited(s, d->ev.pid, d->ev.ts);
}

static void ring_event(void *ctx, ks_decoded *d) {
  ks_sink_trace(ctx, d);
}

void ks_sink_poll_ring(ks_sink *s) {
  if (s->ring.h == NULL)
    return;
  s->ov.now_ns = ks_overload_clock();
  s->ring_interval_ns = s->ring_polled_ns > 0 ? s->ov.now_ns - s->ring_polled_ns : 0;
  s->ring_polled_ns = s->ov.now_ns;
  ks_ring_drain(&s->ring, &s->in, SIZE_MAX, ring_event, s);
  ks_control_alerts(s);
}

unsigned ks_sink_ring_wait(const ks_sink *s) {
  return ks_ring_pace(s->ring_interval_ns, s->ring.fullest, s->ring.size, s->ov.max_lag_ns,
                      s->ring_wait_max_ms);
}

void ks_sink_poll_sample(ks_sink *s) {
  if (!ks_sampling_active(&s->sampling))
    return;
  s->ov.now_ns = ks_overload_clock();
  ks_sampling_poll(&s->sampling, s->ov.now_ns);
  ks_control_alerts(s);
}

void ks_sink_frame(void *ctx, const unsigned char *frame, size_t len) {
  ks_sink *s = ctx;
  ks_decoded d;

  switch (ks_decode_frame(&s->in, frame, len, &d)) {
  case KS_FRAME_TRACE:
    ks_sink_trace(s, &d);
    break;
  case KS_FRAME_COMMAND:
    /* Everything the ring holds came before this command, and the samples too. */
    ks_sink_poll_ring(s);
    ks_sink_poll_sample(s);
    /* The reply carries Ref verbatim: one the owner could not decode gets none. */
    if (!ks_etf_echoable(d.ref)) {
      s->st.decode_errors++;
      break;
    }
    s->st.commands++;
    ks_control_command(s, d.ref, d.cmd);
    break;
  case KS_EFULL:
    s->st.dropped++;
    break;
  case KS_EUNKNOWN:
    s->st.unknown++;
    break;
  default:
    s->st.decode_errors++;
    break;
  }
}

int ks_sink_feed(ks_sink *s, const void *data, size_t n) {
  int rc;

  s->ov.now_ns = ks_overload_clock();
  rc = ks_framer_feed(&s->fr, data, n, ks_sink_frame, s);
  ks_control_alerts(s);
  return rc;
}

void ks_sink_read(ks_sink *s, size_t n) {
  s->ov.now_ns = ks_overload_clock();
  ks_framer_commit(&s->fr, n, ks_sink_frame, s);
  ks_control_alerts(s);
}

void ks_sink_eof(ks_sink *s) {
  ks_sink_poll_ring(s);
  if (ks_framer_pending(&s->fr) > 0)
    s->st.truncated++;
}
