/* flame_correct.c: tracing's own cost taken off a finished capture.
 *
 * Each event a traced process makes costs it some time (the VM's trace code
 * and the tracer's), between its own instructions: the interval an event
 * ends holds that cost. The capture counts, per call path (node) and per
 * function, the events that ended its intervals; at the write, correct_ns
 * (the cost per event kprof_flame_calib measured on this machine) times
 * that count comes off its time. A path whose time is less than that is
 * counted as 0 and counted in `clamped' with what it could not give: no
 * time goes negative, none is hidden. Taking the cost off per path rather
 * than per interval lets short intervals (an event's cost falls partly
 * before its time stamp, partly after) be made up by the long ones of the
 * same path. Inclusive times lose the cost of every event inside them.
 */
#include "ks_flame.h"

/* The cost of n events off *ns: what it took, what it could not (clamped). */
static uint64_t take(uint64_t *ns, uint64_t n, uint64_t per, uint64_t *short_by) {
  uint64_t cost = n * per;

  *short_by = 0;
  if (*ns >= cost) {
    *ns -= cost;
    return cost;
  }
  *short_by = cost - *ns;
  cost = *ns;
  *ns = 0;
  return cost;
}

void ks_flame_correct(ks_fcap *c) {
  uint64_t per = c->o.correct_ns, short_by, events = 0;
  uint32_t k;

  if (per == 0)
    return;
  for (k = 0; k < c->tree.n; k++) {
    ks_fnode *nd = &c->tree.v[k];
    events += nd->n;
    c->k.subtracted_ns += take(&nd->self, nd->n, per, &short_by);
    if (short_by > 0) {
      c->k.clamped++;
      c->k.clamped_ns += short_by;
    }
    nd->n = 0;
  }
  c->k.corrected = events;
  for (k = 0; k < c->fc.cap; k++) {
    ks_ffun *f = &c->fc.v[k];
    (void)take(&f->self, f->self_n, per, &short_by);
    (void)take(&f->incl, f->incl_n, per, &short_by);
    f->self_n = f->incl_n = 0;
  }
}
