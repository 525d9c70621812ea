/* overload.c: measuring how far behind the VM the sink is, and deciding when to alert. */
#include <time.h>
#ifdef KS_FAULT_INJECTION
#include <unistd.h>   /* usleep */
#endif

#include "ks_overload.h"

void ks_overload_init(ks_overload *o) {
  memset(o, 0, sizeof(*o));
  /* No bound until {overload, Ms} sets one: kprof_guard does when it arms a
   * mode, and sets 0 again when nothing is armed (a late event is no alert then). */
  o->max_lag_ns = 0;
  o->alert_gap_ns = 1000 * 1000000ll;
  o->last_alert_ns = INT64_MIN / 2;
}

int64_t ks_overload_clock(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * A {clock, VmNs} command is never early, only late: it waits behind whatever
 * the pipe holds, and VmNs - now falls short of the true offset by that wait.
 * Taken as it is, a sync that waited behind a backlog would hide that
 * backlog's lag (it did: a 18 s backlog measured as 0.5 s). So the sink keeps
 * the largest estimate, let down by 1/64 of the time since the last sync:
 * the VM's time correction changes the rate of its monotonic clock by about
 * 1 % at most (erts' large adjustment is 20/2048), so a VM clock running slow
 * is followed and never taken for lag, and a backlog is hidden by at most
 * 1.6 % of its age.
 */
void ks_overload_sync(ks_overload *o, int64_t vm_ns) {
  int64_t now = ks_overload_clock(), est = vm_ns - now;

  if (o->synced) {
    int64_t kept = o->offset_ns - (now - o->synced_ns) / 64;
    if (kept > est)
      est = kept;
  }
  o->now_ns = now;
  o->offset_ns = est;
  o->synced_ns = now;
  o->synced = 1;
}

void ks_overload_reset(ks_overload *o) {
  o->worst_lag_ns = 0;
}

void ks_overload_forget(ks_overload *o) {
  o->pending = 0;
  o->pending_lag_ns = 0;
  o->last_alert_ns = INT64_MIN / 2;
}

void ks_overload_event(ks_overload *o, const ks_event *ev) {
#ifdef KS_FAULT_INJECTION
  /* A slow sink, for the guard's tests (_build/fault/kprof_sink only). */
  if (o->test_delay_us > 0) {
    usleep(o->test_delay_us);
    o->now_ns = ks_overload_clock();
  }
#endif
  if (!o->synced || !(ev->flags & KS_EVF_TS) || (ev->flags & KS_EVF_WALL))
    return;
  o->lag_ns = o->now_ns + o->offset_ns - ev->ts;
  if (o->lag_ns > o->worst_lag_ns)
    o->worst_lag_ns = o->lag_ns;
  if (o->max_lag_ns > 0 && o->lag_ns > o->max_lag_ns &&
      o->now_ns - o->last_alert_ns >= o->alert_gap_ns) {
    o->pending = 1;
    if (o->lag_ns > o->pending_lag_ns)
      o->pending_lag_ns = o->lag_ns;
  }
}

void ks_limits_init(ks_limits *l) {
  memset(l, 0, sizeof(*l));
}

void ks_limits_rearm(ks_limits *l) {
  l->counted = 0;
  l->win_count = 0;
  l->win_start = 0;
  l->tripped = 0;
  l->pending = 0;
  l->value = 0;
  l->trip_events = 0;
  l->limited = 0;
}

void ks_limits_set(ks_limits *l, uint64_t max_events, uint64_t rate_max, int64_t rate_per_ms) {
  uint64_t limited = l->limited;   /* a stats counter: only reset zeroes it */

  ks_limits_rearm(l);
  l->limited = limited;
  l->max_events = max_events;
  l->rate_max = rate_per_ms > 0 ? rate_max : 0;
  l->rate_per_ns = l->rate_max > 0 ? rate_per_ms * 1000000 : 0;
}

/* The event's time for the rate: its VM monotonic timestamp, else the sink's clock. */
static int64_t event_time(const ks_overload *o, const ks_event *ev) {
  if ((ev->flags & KS_EVF_TS) && !(ev->flags & KS_EVF_WALL))
    return ev->ts;
  return o->synced ? o->now_ns + o->offset_ns : o->now_ns;
}

static void trip(ks_limits *l, int what, uint64_t value, uint64_t seen) {
  l->tripped = what;
  l->pending = 1;
  l->value = value;
  l->trip_events = seen;
}

int ks_limits_event(ks_limits *l, const ks_overload *o, const ks_event *ev, uint64_t seen) {
  if (l->tripped) {
    l->limited++;
    return 1;
  }
  if (l->max_events == 0 && l->rate_max == 0)
    return 0;
  l->counted++;
  if (l->rate_max > 0) {
    int64_t t = event_time(o, ev);
    /* Out of order by a little (events of other schedulers) counts in the window. */
    if (l->win_count == 0 || t - l->win_start >= l->rate_per_ns) {
      l->win_start = t;
      l->win_count = 0;
    }
    l->win_count++;
  }
  if (l->max_events > 0 && l->counted > l->max_events)
    trip(l, KS_LIMIT_MAX_EVENTS, l->counted, seen);
  else if (l->rate_max > 0 && l->win_count > l->rate_max)
    trip(l, KS_LIMIT_RATE, l->win_count, seen);
  else
    return 0;
  l->limited++;
  return 1;
}
