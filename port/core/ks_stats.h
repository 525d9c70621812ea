/* ks_stats.h: the sink's counters. */
#ifndef KS_STATS_H
#define KS_STATS_H

#include "ks.h"
#include "ks_event.h"

typedef struct ks_stats {
  uint64_t trace_events, commands, decode_errors, unknown, dropped, truncated;
  uint64_t events[KS_EV__COUNT];
  uint64_t *mfa_calls;      /* call events per MFA id */
  uint32_t mfa_calls_cap;
} ks_stats;

void ks_stats_init(ks_stats *st);
void ks_stats_free(ks_stats *st);
void ks_stats_reset(ks_stats *st);
/* Counts one decoded event; KS_ENOMEM if the per-MFA array could not grow. */
int ks_stats_event(ks_stats *st, const ks_event *ev);

#endif
