/* ks_overload.h: how old trace messages are when the sink reads them. */
#ifndef KS_OVERLOAD_H
#define KS_OVERLOAD_H

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
  uint32_t test_delay_us;  /* test-only: sleep this long per trace message */
} ks_overload;

void ks_overload_init(ks_overload *o);
int64_t ks_overload_clock(void);
void ks_overload_sync(ks_overload *o, int64_t vm_ns);
/* Called per timestamped trace message: updates the lag, may set `pending`. */
void ks_overload_event(ks_overload *o, const ks_event *ev);

#endif
