/* counts.c: a graph's exact per-function counters (the top table).
 *
 * Per MFA id: calls (every call event), self ns (the time the function ran:
 * the process was not scheduled out nor in a GC frame) and inclusive ns. No
 * budget of the call-path tree touches them, so the table stays right when
 * the graph is cut.
 *
 * Inclusive time follows tprof's semantics: from the moment a function
 * starts running in a frame of a process (a call, or a tail call into it)
 * to the moment that frame stops running it (its return, a tail call out of
 * it, an exception unwinding it, the end of the capture), waits and callees
 * included; while the function is open in an outer frame of the same
 * process, inner frames add nothing (recursion is not counted twice). Each
 * process keeps a small hash table of the functions open on its stack (how
 * many frames, and the process's clock when the outermost opened); the clock
 * is the time credited to the process so far (ks_fstack_credit), so the
 * correction for tracing's cost and dropped SLEEP time apply to inclusive
 * times as they do to the graph. Frames past the stack cap (only counted)
 * open nothing.
 */
#include <stdlib.h>

#include "ks_callpath.h"

#define FIRST_OPEN 16u

/* The counters of mfa, grown as needed; NULL when out of memory. */
static ks_ffun *fun(ks_fcount *fc, uint32_t mfa) {
  if (mfa == KS_NONE)
    return NULL;
  if (mfa >= fc->cap && ks_grow(&fc->v, &fc->cap, mfa, 256, sizeof(*fc->v)) != KS_OK) {
    fc->uncounted++;
    return NULL;
  }
  return &fc->v[mfa];
}

void ks_ffun_call(ks_fcount *fc, uint32_t mfa) {
  ks_ffun *f = fun(fc, mfa);

  if (f != NULL)
    f->calls++;
}

void ks_ffun_self(ks_fcount *fc, uint32_t mfa, uint64_t ns, int event) {
  ks_ffun *f = fun(fc, mfa);

  if (f != NULL) {
    f->self += ns;
    f->self_n += event != KS_FEV_NONE;
    f->self_nr += event == KS_FEV_RETURN;
  }
}

static uint64_t open_hash(const void *e, const void *ctx) {
  return ks_hmap_fib(((const ks_fopen *)e)->mfa);
}

/* mfa among p's open functions, or NULL with *slot the empty slot where it goes. */
static inline ks_fopen *find_open(const ks_fproc *p, uint32_t mfa, size_t *slot) {
  ks_fopen *o;

  for (o = ks_hmap_run(&p->open, sizeof(*o), ks_hmap_fib(mfa), slot); o != NULL;
       o = ks_hmap_step(&p->open, sizeof(*o), slot))
    if (o->mfa == mfa)
      return o;
  return NULL;
}

/* The slot of a function not open in p (i: where it goes now), made room for:
 * KS_NONE without memory. */
static size_t new_slot(ks_fproc *p, size_t i, uint32_t mfa) {
  if (!ks_hmap_full(&p->open))
    return i;
  if (ks_hmap_grow(&p->open, open_hash, NULL) != KS_OK)
    return SIZE_MAX;
  return ks_hmap_end(&p->open, sizeof(ks_fopen), ks_hmap_fib(mfa));
}

void ks_ffun_enter(ks_fcount *fc, ks_fproc *p, uint32_t mfa) {
  size_t i;
  ks_fopen *o;

  if (mfa == KS_NONE)
    return;
  if (p->open.v == NULL && ks_hmap_init(&p->open, sizeof(ks_fopen), FIRST_OPEN) != KS_OK) {
    fc->uncounted++;
    return;
  }
  if ((o = find_open(p, mfa, &i)) == NULL) {
    if ((i = new_slot(p, i, mfa)) == SIZE_MAX) {
      fc->uncounted++;
      return;
    }
    o = ks_hmap_put(&p->open, sizeof(ks_fopen), i);
    o->mfa = mfa;
    o->count = 0;
  }
  if (o->count++ == 0) {
    o->since = p->clock;
    o->since_events = p->events;
    o->since_returns = p->returns;
  }
}

void ks_ffun_leave(ks_fcount *fc, ks_fproc *p, uint32_t mfa) {
  size_t i;
  ks_fopen *o;
  ks_ffun *f;

  if (mfa == KS_NONE || p->open.v == NULL)
    return;
  if ((o = find_open(p, mfa, &i)) == NULL)
    return;   /* not counted when it opened (out of memory) */
  if (--o->count > 0)
    return;
  if ((f = fun(fc, mfa)) != NULL) {
    f->incl += p->clock - o->since;
    f->incl_n += p->events - o->since_events;
    f->incl_nr += p->returns - o->since_returns;
  }
  ks_hmap_remove(&p->open, sizeof(ks_fopen), i, open_hash, NULL);
}

void ks_ffun_leave_all(ks_fcount *fc, ks_fproc *p) {
  uint32_t k;
  ks_fopen *o;
  ks_ffun *f;

  for (k = 0; p->open.v != NULL && p->open.n > 0 && k <= p->open.mask; k++) {
    o = ks_hmap_at(&p->open, sizeof(*o), k);
    if (ks_hmap_empty(o))
      continue;
    if ((f = fun(fc, o->mfa)) != NULL) {
      f->incl += p->clock - o->since;
      f->incl_n += p->events - o->since_events;
      f->incl_nr += p->returns - o->since_returns;
    }
    o->mfa = KS_NONE;
    p->open.n--;
  }
}

void ks_ffun_free_proc(ks_fproc *p) {
  ks_hmap_free(&p->open);
}

void ks_ffun_free(ks_fcount *fc) {
  free(fc->v);
  memset(fc, 0, sizeof(*fc));
}

ks_fmfa *ks_ffun_rows(const ks_fcount *fc, uint32_t hide, uint32_t *nout) {
  uint32_t k, n = 0;
  ks_fmfa *out;

  *nout = 0;
  for (k = 0; k < fc->cap; k++)
    n += k != hide && (fc->v[k].calls | fc->v[k].self | fc->v[k].incl) != 0;
  if (n == 0 || (out = malloc((size_t)n * sizeof(*out))) == NULL)
    return NULL;
  n = 0;
  for (k = 0; k < fc->cap; k++) {
    if (k == hide || (fc->v[k].calls | fc->v[k].self | fc->v[k].incl) == 0)
      continue;
    out[n].mfa = k;
    out[n].calls = fc->v[k].calls;
    out[n].self = fc->v[k].self;
    out[n].incl = fc->v[k].incl;
    n++;
  }
  qsort(out, n, sizeof(*out), ks_fmfa_by_self);
  *nout = n;
  return out;
}
