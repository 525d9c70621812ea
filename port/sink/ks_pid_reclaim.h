/* ks_pid_reclaim.h: pid ids given back once their process has exited (port/sink/pid_reclaim.c). */
#ifndef KS_PID_RECLAIM_H
#define KS_PID_RECLAIM_H

#include "core/ks.h"

/* Event time (ns) an exited process keeps its id: its last events (out_exited
 * after exit) may still be on their way, from another scheduler's part of the ring. */
#define KS_PID_GRACE_NS 100000000

typedef struct ks_pid_dead {
  uint32_t id;
  int64_t ts;            /* its exit event's time */
} ks_pid_dead;

typedef struct ks_pid_reclaim {
  ks_pid_dead *dead;     /* exited, id not yet released */
  uint32_t n, cap;
  uint8_t *listed;       /* per pid id: in `dead` */
  uint32_t listed_cap;
  int64_t last_ts;       /* the newest event time seen */
  uint32_t tried_n;      /* `n` and `last_ts` at the last sweep that released nothing */
  int64_t tried_ts;
} ks_pid_reclaim;

void ks_pid_reclaim_init(ks_pid_reclaim *pr);
void ks_pid_reclaim_free(ks_pid_reclaim *pr);

#endif
