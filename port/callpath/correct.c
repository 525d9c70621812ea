/* correct.c: tracing's own cost taken off a finished graph.
 *
 * Each event a traced process makes costs it some time (the VM's trace code
 * and the tracer's), between its own instructions: the interval an event
 * ends holds part of that cost, the interval it starts the rest. The
 * capture counts, per call path (node) and per function, the events that
 * ended its intervals, and of them the return_tos; at the write, each
 * event's cost comes off its interval's path and function.
 *
 * What an event costs is measured in the capture itself (doc/internals-flame.md says
 * why this rule): per kind of event that ended an interval (a return_to; a
 * call or any other event), the mean of the capture's run intervals of that
 * kind up to 4 times their median. Most intervals of real code are mostly
 * tracing's cost (compile:file's calls average 37 ns untraced, its events
 * 300 to 600 ns), so this body of the distribution is the cost as it was
 * in this capture, with its cache misses and the machine's load, without
 * the long intervals that hold the program's own long work (a BIF over a big
 * table) or a core the OS gave to another job. A kind with fewer than
 * KS_FCORR_MIN_INTERVALS intervals takes the calibration's cost
 * (kprof_flame_calib, o.correct_ns), at most the mean of its intervals:
 * never more than what the capture's intervals hold (a calibration made
 * in a loaded moment overshoots).
 *
 * A call's cost falls partly in its caller's interval before it, partly in
 * the callee's after it, and a return_to's the other way round: a callee
 * that does little may have less time than its events' cost while its
 * caller has more. So the paths are done from the deepest up (a child's
 * index is above its parent's) and what a path is short of goes to its
 * parent path; per function, the same amounts move from callee to caller
 * (the top table). What reaches a path that is no function's (a process's
 * root, a pseudo frame) or that no parent can give is counted in `clamped'
 * and `clamped_ns': no time goes negative, none is hidden. A capture whose
 * whole time is less than its events' cost keeps its raw times (skipped_ns).
 */
#include <stdlib.h>

#include "ks_callpath.h"

/* A function's node: its MFA id, else KS_NONE. */
static uint32_t mfa_of(const ks_ftree *t, uint32_t k) {
  uint32_t f = t->v[k].frame;

  return k != 0 && KS_FR_KIND(f) == KS_FR_MFA ? KS_FR_VAL(f) : KS_NONE;
}

/* Moves `ns' of cost from function `from' to `to' in the top table's counters
 * (from a function to itself: nothing moves, its self time is the same). */
static void move(ks_fcount *fc, uint32_t from, uint32_t to, uint64_t ns) {
  if (fc->v == NULL || from == to)
    return;
  if (from < fc->cap)
    fc->v[from].moved_out += ns;
  if (to < fc->cap)
    fc->v[to].moved_in += ns;
}

/* What of `cost' *ns gives (all of it, or all it has): the rest is returned. */
static uint64_t take(uint64_t *ns, uint64_t cost, uint64_t *took) {
  if (*ns >= cost) {
    *ns -= cost;
    *took += cost;
    return 0;
  }
  *took += *ns;
  cost -= *ns;
  *ns = 0;
  return cost;
}

/* The cost of n events of which nr were return_tos. */
static uint64_t cost_of(const uint64_t cost[2], uint64_t n, uint64_t nr) {
  if (nr > n)
    nr = n;
  return (n - nr) * cost[KS_FIVL_CALL] + nr * cost[KS_FIVL_RETURN];
}

static void correct_functions(ks_fcount *fc, const uint64_t cost[2]) {
  uint64_t ignored = 0, short_by;
  uint32_t k;

  for (k = 0; k < fc->cap; k++) {
    ks_ffun *f = &fc->v[k];
    /* Self: its events' cost and what its callees were short of, less what
     * it was short of itself and gave its callers. */
    f->self += f->moved_out;
    short_by = take(&f->self, cost_of(cost, f->self_n, f->self_nr) + f->moved_in, &ignored);
    (void)short_by;
    /* Inclusive: the cost of every event inside it, less what it was short
     * of and gave its callers (that cost is outside it: its callees' is
     * inside, in moved_in and in their events). Never below its self time
     * (recursion through another function moves cost inside it out and in
     * again: an approximation there). */
    f->incl += f->moved_out;
    (void)take(&f->incl, cost_of(cost, f->incl_n, f->incl_nr), &ignored);
    if (f->incl < f->self)
      f->incl = f->self;
    f->self_n = f->incl_n = f->self_nr = f->incl_nr = 0;
    f->moved_in = f->moved_out = 0;
  }
}

static uint64_t quantile(const ks_fivl *h, double q);

/* The cost per event of each kind (above). */
static void event_costs(ks_callpath *c) {
  uint64_t body, all;
  int kind;

  for (kind = 0; kind < KS_FIVL_KINDS; kind++) {
    const ks_fivl *h = &c->ivl[kind];
    body = ks_fivl_body_mean(h, 4);
    all = h->n > 0 ? h->total / h->n : 0;
    c->k.cost_measured[kind] = h->n >= KS_FCORR_MIN_INTERVALS && body > 0;
    if (c->k.cost_measured[kind])
      c->k.cost_ns[kind] = body;
    else
      c->k.cost_ns[kind] = h->n > 0 && all < c->o.correct_ns ? all : c->o.correct_ns;
  }
}

void ks_callpath_correct(ks_callpath *c) {
  ks_ftree *t = &c->tree;
  uint64_t events = 0, *owed, rest, raw = 0, cost = 0, *per = c->k.cost_ns;
  uint32_t k, parent;

  if (c->o.correct_ns == 0)
    return;
  event_costs(c);
  /* A capture whose whole time is less than its events' cost would be all
   * clamped, nothing left to draw: its raw times are kept, and that is said
   * (correct_ns 0, skipped_ns the cost not taken). */
  for (k = 1; k < t->n; k++) {
    raw += t->v[k].self;
    cost += cost_of(per, t->v[k].n, t->v[k].nr);
  }
  if (raw <= cost) {
    c->k.skipped_ns = c->o.correct_ns;
    c->o.correct_ns = 0;
    c->k.cost_ns[0] = c->k.cost_ns[1] = 0;
    for (k = 0; k < t->n; k++)
      t->v[k].n = t->v[k].nr = 0;
    return;
  }
  owed = calloc(t->n, sizeof(*owed));
  for (k = t->n; k-- > 1;) {
    ks_fnode *nd = &t->v[k];
    events += nd->n;
    c->k.cost_total_ns += cost_of(per, nd->n, nd->nr);
    rest = take(&nd->self, cost_of(per, nd->n, nd->nr) + (owed != NULL ? owed[k] : 0),
                &c->k.subtracted_ns);
    nd->n = nd->nr = 0;
    if (rest == 0)
      continue;
    parent = nd->parent;
    if (owed != NULL && parent != 0 && parent != KS_NONE && mfa_of(t, parent) != KS_NONE &&
        mfa_of(t, k) != KS_NONE) {
      owed[parent] += rest;
      move(&c->fc, mfa_of(t, k), mfa_of(t, parent), rest);
    } else {
      c->k.clamped++;
      c->k.clamped_ns += rest;
    }
  }
  free(owed);
  c->k.corrected = events;
  correct_functions(&c->fc, per);
}

/* The interval at quantile q (0..1) of h: its bin's middle. */
static uint64_t quantile(const ks_fivl *h, double q) {
  uint64_t want = (uint64_t)(q * (double)h->n), seen = 0;
  uint32_t b;

  for (b = 0; b < KS_FIVL_BINS; b++) {
    seen += h->bin[b];
    if (seen > want)
      return (uint64_t)b * KS_FIVL_BIN_NS + KS_FIVL_BIN_NS / 2;
  }
  return (uint64_t)KS_FIVL_BINS * KS_FIVL_BIN_NS;
}

uint64_t ks_fivl_body_mean(const ks_fivl *h, uint64_t times) {
  uint64_t cut = quantile(h, 0.5) * times, mid, sum = 0, n = 0;
  uint32_t b;

  if (h->n == 0)
    return 0;
  for (b = 0; b < KS_FIVL_BINS - 1; b++) {
    mid = (uint64_t)b * KS_FIVL_BIN_NS + KS_FIVL_BIN_NS / 2;
    if (mid > cut)
      break;
    sum += h->bin[b] * mid;
    n += h->bin[b];
  }
  return n > 0 ? sum / n : 0;
}
