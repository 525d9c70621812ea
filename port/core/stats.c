/* stats.c: counting what the sink saw, per event kind and per called MFA. */
#include <stdlib.h>

#include "ks_stats.h"

void ks_stats_init(ks_stats *st) {
  memset(st, 0, sizeof(*st));
}

void ks_stats_free(ks_stats *st) {
  free(st->mfa_calls);
  memset(st, 0, sizeof(*st));
}

void ks_stats_reset(ks_stats *st) {
  uint64_t *calls = st->mfa_calls;
  uint32_t cap = st->mfa_calls_cap;

  memset(st, 0, sizeof(*st));
  if (calls != NULL)
    memset(calls, 0, (size_t)cap * sizeof(*calls));
  st->mfa_calls = calls;
  st->mfa_calls_cap = cap;
}

static int grow_calls(ks_stats *st, uint32_t id) {
  return ks_grow(&st->mfa_calls, &st->mfa_calls_cap, id, 1024, sizeof(*st->mfa_calls));
}

int ks_stats_event(ks_stats *st, const ks_event *ev) {
  st->trace_events++;
  st->events[ev->kind]++;
  if (ev->kind == KS_EV_CALL && ev->mfa != KS_NONE) {
    if (ev->mfa >= st->mfa_calls_cap && grow_calls(st, ev->mfa) != KS_OK)
      return KS_ENOMEM;
    st->mfa_calls[ev->mfa]++;
  }
  return KS_OK;
}
