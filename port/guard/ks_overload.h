/* ks_overload.h: how old trace messages are when the sink reads them. */
#ifndef KS_OVERLOAD_H
#define KS_OVERLOAD_H

#include "core/ks.h"
#include "ks_event.h"

/*
 * The VM's monotonic clock (erlang:monotonic_time(nanosecond)) is the OS
 * monotonic clock plus an offset of the VM's own. The owner sends the VM's
 * time in a {clock, VmNs} command once a second; the sink estimates
 * offset = VmNs - its own CLOCK_MONOTONIC when it reads the command. A command
 * that waited behind a backlog gives too small an offset, so the largest
 * estimate is kept (see ks_overload_sync).
 * A message's lag is then (now + offset) - its timestamp; `now` is read once
 * per read from stdin, not per message.
 */
typedef struct ks_overload {
  int synced;
  int64_t offset_ns;
  int64_t synced_ns;       /* the sink's clock at the last sync */
  int64_t now_ns;          /* the sink's clock at the current read */
  int64_t max_lag_ns;      /* 0: no bound */
  int64_t lag_ns;          /* lag of the last timestamped message */
  int64_t worst_lag_ns;    /* since reset */
  int64_t last_alert_ns;
  int64_t alert_gap_ns;    /* at most one alert this often */
  uint64_t alerts;
  int pending;             /* the bound was crossed: an alert is owed */
  int64_t pending_lag_ns;
#ifdef KS_FAULT_INJECTION
  uint32_t test_delay_us;  /* the fault-injection build's: sleep this long per trace message */
#endif
} ks_overload;

void ks_overload_init(ks_overload *o);
int64_t ks_overload_clock(void);
void ks_overload_sync(ks_overload *o, int64_t vm_ns);
/* Called per timestamped trace message: updates the lag, may set `pending`. */
void ks_overload_event(ks_overload *o, const ks_event *ev);
/* The owner's `reset`: the worst lag starts again (the bound and clock stay). */
void ks_overload_reset(ks_overload *o);
/* Nothing is traced any more ({overload, 0}): an alert owed is not sent, and
 * the next bound's first alert is not held back by the last one's gap. */
void ks_overload_forget(ks_overload *o);

/*
 * recon_trace-style limits on the trace events the sink reads, set by the
 * owner's {limits, MaxEvents, RateMax, RatePerMs} command (doc/internals-protocol.md).
 * The sink reads every event in stream order, so the count is exact relative
 * to the command: events before it are not counted.
 *
 * max_events: the (max_events + 1)-th event after arming trips.
 * rate: fixed windows of rate_per_ns. A window opens at the first event past
 * the previous one's end; the (rate_max + 1)-th event in one window trips.
 * (A burst that straddles two windows may pass up to 2 * rate_max events in
 * rate_per_ns without tripping.) An event's time is its VM monotonic
 * timestamp when it has one (KS_EVF_TS without KS_EVF_WALL); otherwise the
 * sink's clock at the read, moved onto the VM's clock once synced.
 *
 * The event that trips and every event after it are `limited`: counted in
 * the stats but not given to the tiers or flame captures, until the limits
 * are set again ({limits, ...}, all zeros clears them) or the counters are
 * reset (the bounds stay, counted from the reset). One alert per trip.
 */
enum { KS_LIMIT_MAX_EVENTS = 1, KS_LIMIT_RATE = 2 };

typedef struct ks_limits {
  uint64_t max_events;     /* 0: no bound */
  uint64_t rate_max;       /* 0: no bound */
  int64_t rate_per_ns;
  uint64_t counted;        /* events since the limits were armed */
  int64_t win_start;       /* the current rate window (win_count > 0) */
  uint64_t win_count;
  int tripped;             /* KS_LIMIT_*: a bound was passed, events are limited */
  int pending;             /* the trip's alert is owed */
  uint64_t value;          /* the figure that passed the bound */
  uint64_t trip_events;    /* the sink's trace_events at the trip (the alert's `events`) */
  uint64_t limited;        /* events not aggregated (stats `limited`, zeroed by reset) */
} ks_limits;

void ks_limits_init(ks_limits *l);
/* Arms the bounds (0: none), counting from now; all zeros turns the limits off. */
void ks_limits_set(ks_limits *l, uint64_t max_events, uint64_t rate_max, int64_t rate_per_ms);
/* The counters' reset: the bounds stay, counted from now; a trip is forgotten. */
void ks_limits_rearm(ks_limits *l);
/* Called per trace event after it is counted (`seen`: the sink's count of
 * trace events, this one included): 1 if the event is limited (not to be
 * aggregated); may set `pending`. */
int ks_limits_event(ks_limits *l, const ks_overload *o, const ks_event *ev, uint64_t seen);

#endif
