/* ks_sink.h: the sink without its event loop: frames in, events counted, replies out. */
#ifndef KS_SINK_H
#define KS_SINK_H

#include "core/ks_decode.h"
#include "flame/ks_flame.h"
#include "core/ks_frame.h"
#include "guard/ks_overload.h"
#include "ks_pid_reclaim.h"
#include "proto/ks_proto.h"
#include "ring/ks_ring_reader.h"
#include "sample/ks_sample.h"
#include "core/ks_stats.h"
#include "tiers/ks_tiers.h"

/* Receives one whole {packet,4} frame (length prefix included) to write to stdout. */
typedef void (*ks_emit_fn)(void *ctx, const unsigned char *frame, size_t len);

typedef struct ks_sink_opts {
  size_t read_buf;       /* initial input buffer */
  size_t max_frame;      /* longer frames are skipped and counted */
  ks_intern_limits limits;
} ks_sink_opts;

typedef struct ks_sink {
  ks_framer fr;
  ks_intern in;
  ks_stats st;
  ks_tiers tiers;
  ks_overload ov;
  ks_limits lim;         /* max_events and rate ({limits, ...}): past one, events are limited */
  ks_flame flame;        /* flame captures (flame.c) */
  ks_ring_reader ring;   /* events of the kprof_tracer NIF (ring.c) */
  ks_pid_reclaim pids;   /* exited processes whose ids are to be released (pid_reclaim.c) */
  ks_consumers cons;     /* what takes the events: the tiers and the flame captures */
  ks_sampling sampling;  /* a sampled profile of the VM (port/sample/) */
  ks_emit_fn emit;
  void *emit_ctx;
  int64_t ring_polled_ns;   /* the clock at the last drain of the rings (0: none yet) */
  int64_t ring_interval_ns; /* between the last two drains */
  unsigned ring_wait_max_ms; /* the longest wait between two drains ({ring_wait_max, Ms}) */
  size_t pipe_size;      /* what ks_pipe_enlarge gave (0: unknown), for stats */
  uint64_t emitted;      /* reply and alert frames handed to emit */
} ks_sink;

void ks_sink_default_opts(ks_sink_opts *o);
int ks_sink_init(ks_sink *s, const ks_sink_opts *o, ks_emit_fn emit, void *emit_ctx);
void ks_sink_free(ks_sink *s);
/* One frame's payload (the framer's callback; ctx is the sink). */
void ks_sink_frame(void *ctx, const unsigned char *frame, size_t len);
/* Bytes from the input, any split. */
int ks_sink_feed(ks_sink *s, const void *data, size_t n);
/* n bytes were read into the framer's space: frame them, then send owed alerts. */
void ks_sink_read(ks_sink *s, size_t n);
/* End of input: an unfinished frame is counted as truncated. */
void ks_sink_eof(ks_sink *s);
/* Reads what the rings hold (the event loop calls it while rings are open,
 * every ks_sink_ring_wait ms, and before every command), then sends owed
 * alerts. */
void ks_sink_poll_ring(ks_sink *s);
/* The milliseconds until the rings' next drain (ks_ring_pace, within 1 and
 * ring_wait_max_ms). */
unsigned ks_sink_ring_wait(const ks_sink *s);
/* Drains the sampler's rings (the event loop calls it every
 * ks_sampling_drain_ms while it samples, and before every command), then
 * sends owed alerts. */
void ks_sink_poll_sample(ks_sink *s);
/* One decoded trace event, from a frame or the ring: counted, then handed to
 * every active consumer unless the limits say it is past a bound. */
void ks_sink_trace(ks_sink *s, ks_decoded *d);

/* pid_reclaim.c: a process's exit event; a sweep (at_cap: a new pid met
 * max_pids) returns how many ids it released. */
void ks_sink_pid_exited(ks_sink *s, uint32_t pid, int64_t ts);
int ks_sink_reclaim_pids(ks_sink *s, int at_cap);

/* control.c: the owner's commands (one table of every command, the sink's own
 * and the features'), their replies, and the alerts. The encoders and what a
 * handler is given (ks_cmd): port/proto/ks_proto.h. */
void ks_control_command(ks_sink *s, ks_slice ref, ks_slice cmd);
/* Sends the alerts owed (overload, ring drops, a limit's trip), if any. */
void ks_control_alerts(ks_sink *s);

#endif
