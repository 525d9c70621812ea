/* overload.c: measuring how far behind the VM the sink is, and deciding when to alert. */
#include <time.h>
#include <unistd.h>

#include "ks_overload.h"

void ks_overload_init(ks_overload *o) {
  memset(o, 0, sizeof(*o));
  o->max_lag_ns = 1000 * 1000000ll;
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

void ks_overload_event(ks_overload *o, const ks_event *ev) {
  if (o->test_delay_us > 0) {
    usleep(o->test_delay_us);
    o->now_ns = ks_overload_clock();
  }
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
