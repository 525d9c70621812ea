/* flame_correct.c: tracing's own cost taken off a finished capture.
 *
 * Each event a traced process makes costs it some time (the VM's trace code
 * and the tracer's), between its own instructions: the interval an event
 * ends holds part of that cost, the interval it starts the rest. The
 * capture counts, per call path (node) and per function, the events that
 * ended its intervals; at the write, correct_ns (the cost per event
 * kprof_flame_calib measured on this machine) times that count comes off
 * its time.
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

#include "ks_flame.h"

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

static void correct_functions(ks_fcount *fc, uint64_t per) {
  uint64_t ignored = 0, short_by;
  uint32_t k;

  for (k = 0; k < fc->cap; k++) {
    ks_ffun *f = &fc->v[k];
    /* Self: its events' cost and what its callees were short of, less what
     * it was short of itself and gave its callers. */
    f->self += f->moved_out;
    short_by = take(&f->self, f->self_n * per + f->moved_in, &ignored);
    (void)short_by;
    /* Inclusive: the cost of every event inside it, less what it was short
     * of and gave its callers (that cost is outside it: its callees' is
     * inside, in moved_in and in their events). Never below its self time
     * (recursion through another function moves cost inside it out and in
     * again: an approximation there). */
    f->incl += f->moved_out;
    (void)take(&f->incl, f->incl_n * per, &ignored);
    if (f->incl < f->self)
      f->incl = f->self;
    f->self_n = f->incl_n = 0;
    f->moved_in = f->moved_out = 0;
  }
}

void ks_flame_correct(ks_fcap *c) {
  ks_ftree *t = &c->tree;
  uint64_t per = c->o.correct_ns, events = 0, *owed, rest, raw = 0, cost = 0;
  uint32_t k, parent;

  if (per == 0)
    return;
  /* A capture whose whole time is less than its events' cost would be all
   * clamped, nothing left to draw: its raw times are kept, and that is said
   * (correct_ns 0, skipped_ns the cost not taken). */
  for (k = 1; k < t->n; k++) {
    raw += t->v[k].self;
    cost += t->v[k].n * per;
  }
  if (raw <= cost) {
    c->k.skipped_ns = per;
    c->o.correct_ns = 0;
    for (k = 0; k < t->n; k++)
      t->v[k].n = 0;
    return;
  }
  owed = calloc(t->n, sizeof(*owed));
  for (k = t->n; k-- > 1;) {
    ks_fnode *nd = &t->v[k];
    events += nd->n;
    rest = take(&nd->self, nd->n * per + (owed != NULL ? owed[k] : 0), &c->k.subtracted_ns);
    nd->n = 0;
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
