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

static uint32_t open_slot(const ks_fproc *p, uint32_t mfa) {
  uint32_t i = (uint32_t)((mfa * 0x9e3779b97f4a7c15ull) >> 40) & p->open_mask;

  while (p->open[i].mfa != KS_NONE && p->open[i].mfa != mfa)
    i = (i + 1) & p->open_mask;
  return i;
}

static int grow_open(ks_fproc *p) {
  uint32_t n = p->open == NULL ? FIRST_OPEN : (p->open_mask + 1) * 2, k, old = p->open_mask + 1;
  ks_fopen *was = p->open, *v = malloc((size_t)n * sizeof(*v));

  if (v == NULL)
    return KS_ENOMEM;
  for (k = 0; k < n; k++)
    v[k].mfa = KS_NONE;
  p->open = v;
  p->open_mask = n - 1;
  for (k = 0; was != NULL && k < old; k++)
    if (was[k].mfa != KS_NONE)
      p->open[open_slot(p, was[k].mfa)] = was[k];
  free(was);
  return KS_OK;
}

void ks_ffun_enter(ks_fcount *fc, ks_fproc *p, uint32_t mfa) {
  uint32_t i;

  if (mfa == KS_NONE)
    return;
  if ((p->open == NULL || (p->open_n + 1) * 2 > p->open_mask + 1) && grow_open(p) != KS_OK) {
    fc->uncounted++;
    return;
  }
  i = open_slot(p, mfa);
  if (p->open[i].mfa == KS_NONE) {
    p->open[i].mfa = mfa;
    p->open[i].count = 0;
    p->open_n++;
  }
  if (p->open[i].count++ == 0) {
    p->open[i].since = p->clock;
    p->open[i].since_events = p->events;
    p->open[i].since_returns = p->returns;
  }
}

/* Removes slot i (linear probing: later entries of its run move back). */
static void remove_slot(ks_fproc *p, uint32_t i) {
  uint32_t j = i, k;

  for (;;) {
    j = (j + 1) & p->open_mask;
    if (p->open[j].mfa == KS_NONE)
      break;
    k = (uint32_t)((p->open[j].mfa * 0x9e3779b97f4a7c15ull) >> 40) & p->open_mask;
    /* Entry j stays unless its home k is cyclically outside (i, j]. */
    if ((i <= j) ? (i < k && k <= j) : (i < k || k <= j))
      continue;
    p->open[i] = p->open[j];
    i = j;
  }
  p->open[i].mfa = KS_NONE;
  p->open_n--;
}

void ks_ffun_leave(ks_fcount *fc, ks_fproc *p, uint32_t mfa) {
  uint32_t i;
  ks_ffun *f;

  if (mfa == KS_NONE || p->open == NULL)
    return;
  i = open_slot(p, mfa);
  if (p->open[i].mfa == KS_NONE)
    return;   /* not counted when it opened (out of memory) */
  if (--p->open[i].count > 0)
    return;
  if ((f = fun(fc, mfa)) != NULL) {
    f->incl += p->clock - p->open[i].since;
    f->incl_n += p->events - p->open[i].since_events;
    f->incl_nr += p->returns - p->open[i].since_returns;
  }
  remove_slot(p, i);
}

void ks_ffun_leave_all(ks_fcount *fc, ks_fproc *p) {
  uint32_t k;
  ks_ffun *f;

  for (k = 0; p->open != NULL && k <= p->open_mask; k++)
    if (p->open[k].mfa != KS_NONE) {
      if ((f = fun(fc, p->open[k].mfa)) != NULL) {
        f->incl += p->clock - p->open[k].since;
        f->incl_n += p->events - p->open[k].since_events;
        f->incl_nr += p->returns - p->open[k].since_returns;
      }
      p->open[k].mfa = KS_NONE;
    }
  p->open_n = 0;
}

void ks_ffun_free_proc(ks_fproc *p) {
  free(p->open);
  p->open = NULL;
  p->open_mask = p->open_n = 0;
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
