/* pid_reclaim.c: pid ids given back once their process has exited.
 *
 * Every pid the sink sees gets an id (intern.c), and ids are capped
 * (--max-pids, 2^20 by default): a server that spawns a process per request
 * would fill the table and then drop every event of a new process. So the
 * id of a process that exited (its `exit` trace event: the tiers and flame
 * captures trace `procs`) is released, and reused, once nothing refers to it:
 *   - its last events are read: KS_PID_GRACE_NS of event time after the exit;
 *   - no consumer of the events pins it (port/core/ks_consumer.h): no tiers
 *     request in flight or slow request kept for the report has an event of
 *     it, no flame capture, running or waiting for its files, has it.
 * A pinned id stays listed and is tried again at the next sweep. Releasing
 * means: the ring reader forgets the pid's word, the intern tables its keys
 * (their arenas shrink), every consumer its per-id state. A sweep costs
 * a pass over the ids and the in-flight requests' events, so it runs when the
 * exited pids are a quarter of the live ones (at least 1024), or when a new
 * pid meets the cap (then at most once per new exit or grace period).
 */
#include <stdlib.h>

#include "ks_pid_reclaim.h"
#include "ks_sink.h"

#define SWEEP_MIN 1024

void ks_pid_reclaim_init(ks_pid_reclaim *pr) {
  memset(pr, 0, sizeof(*pr));
}

void ks_pid_reclaim_free(ks_pid_reclaim *pr) {
  free(pr->dead);
  free(pr->listed);
  memset(pr, 0, sizeof(*pr));
}

static int grow_bytes(uint8_t **v, uint32_t *cap, uint32_t need) {
  return need <= *cap ? KS_OK : ks_grow(v, cap, need - 1, 1024, 1);
}

void ks_sink_pid_exited(ks_sink *s, uint32_t pid, int64_t ts) {
  ks_pid_reclaim *pr = &s->pids;

  if (pid == KS_NONE || grow_bytes(&pr->listed, &pr->listed_cap, pid + 1) != KS_OK ||
      pr->listed[pid])
    return;   /* out of memory: the id is only not reused */
  if (ks_grow(&pr->dead, &pr->cap, pr->n, 256, sizeof(*pr->dead)) != KS_OK)
    return;
  pr->dead[pr->n].id = pid;
  pr->dead[pr->n].ts = ts;
  pr->n++;
  pr->listed[pid] = 1;
  if (pr->n >= SWEEP_MIN && pr->n >= ks_intern_pids_live(&s->in) / 4)
    ks_sink_reclaim_pids(s, 0);
}

/* mark: 1 pinned, 2 released by this sweep. */
int ks_sink_reclaim_pids(ks_sink *s, int at_cap) {
  ks_pid_reclaim *pr = &s->pids;
  uint32_t n_ids = s->in.n_pids, k, kept = 0, freed = 0;
  uint8_t *mark;

  if (pr->n == 0)
    return 0;
  if (at_cap && pr->n == pr->tried_n && pr->last_ts - pr->tried_ts < KS_PID_GRACE_NS)
    return 0;   /* nothing new since a sweep that released nothing */
  if ((mark = calloc(n_ids ? n_ids : 1, 1)) == NULL)
    return 0;
  ks_consumers_pin_pids(&s->cons, mark, n_ids);
  for (k = 0; k < pr->n; k++) {
    ks_pid_dead d = pr->dead[k];
    if (d.id < n_ids && mark[d.id] == 0 && pr->last_ts - d.ts >= KS_PID_GRACE_NS) {
      mark[d.id] = 2;
      freed++;
    } else {
      pr->dead[kept++] = d;
    }
  }
  if (freed == 0) {
    pr->tried_n = pr->n;
    pr->tried_ts = pr->last_ts;
    free(mark);
    return 0;
  }
  for (k = 0; k < n_ids; k++)
    mark[k] = mark[k] == 2;
  /* The ring's words first: if the tables then fail, the ids are only not reused. */
  if (ks_ring_forget_pids(&s->ring, mark, n_ids) != KS_OK ||
      ks_intern_pids_release(&s->in, mark, n_ids) != KS_OK) {
    for (k = 0; k < n_ids; k++)   /* listed again: a later sweep retries */
      if (mark[k])
        pr->dead[kept++] = (ks_pid_dead){k, pr->last_ts - KS_PID_GRACE_NS};
    pr->n = kept;
    free(mark);
    return 0;
  }
  ks_consumers_forget_pids(&s->cons, mark, n_ids);
  for (k = 0; k < n_ids; k++)
    if (mark[k])
      pr->listed[k] = 0;
  pr->n = kept;
  pr->tried_n = 0;
  free(mark);
  return (int)freed;
}
