/* top.c: per-function totals of a call-path tree (tprof's table).
 *
 * Self time of a function is the self time of every node of its frame;
 * inclusive time is the inclusive time of its outermost nodes only (a node
 * under another node of the same function is already in that one's time),
 * so recursion is not counted twice. One depth-first pass over the tree
 * with a count, per function, of its nodes open on the path from the root.
 * Calls come from the caller's counters (per MFA id): the tree has none.
 */
#include <stdlib.h>

#include "ks_callpath.h"

static int by_incl(const void *a, const void *b) {
  const ks_fmfa *x = a, *y = b;

  if (x->incl != y->incl)
    return x->incl > y->incl ? -1 : 1;
  if (x->self != y->self)
    return x->self > y->self ? -1 : 1;
  return x->mfa < y->mfa ? -1 : x->mfa > y->mfa;
}

int ks_fmfa_by_self(const void *a, const void *b) {
  const ks_fmfa *x = a, *y = b;

  if (x->self != y->self)
    return x->self > y->self ? -1 : 1;
  if (x->incl != y->incl)
    return x->incl > y->incl ? -1 : 1;
  return x->mfa < y->mfa ? -1 : x->mfa > y->mfa;
}

static int by_calls(const void *a, const void *b) {
  const ks_fmfa *x = a, *y = b;

  if (x->calls != y->calls)
    return x->calls > y->calls ? -1 : 1;
  return ks_fmfa_by_self(a, b);
}

void ks_fmfa_sort(ks_fmfa *rows, uint32_t n, int order) {
  if (rows != NULL)
    qsort(rows, n, sizeof(*rows),
          order == KS_FMFA_BY_CALLS ? by_calls : order == KS_FMFA_BY_INCL ? by_incl : ks_fmfa_by_self);
}

/* Adds each node's self time, and the inclusive time of outermost nodes. */
static void walk(const ks_ftree *tr, const uint64_t *total, uint32_t *open, uint64_t *self,
                 uint64_t *incl) {
  uint32_t node = tr->v[0].child, fr;

  while (node != KS_NONE) {
    fr = tr->v[node].frame;
    if (KS_FR_KIND(fr) == KS_FR_MFA) {
      self[KS_FR_VAL(fr)] += tr->v[node].self;
      if (open[KS_FR_VAL(fr)]++ == 0)
        incl[KS_FR_VAL(fr)] += total[node];
    }
    if (tr->v[node].child != KS_NONE) {
      node = tr->v[node].child;
      continue;
    }
    /* Leave the node, and its parents while they have no next sibling. */
    for (;;) {
      fr = tr->v[node].frame;
      if (KS_FR_KIND(fr) == KS_FR_MFA)
        open[KS_FR_VAL(fr)]--;
      if (tr->v[node].sibling != KS_NONE) {
        node = tr->v[node].sibling;
        break;
      }
      node = tr->v[node].parent;
      if (node == 0 || node == KS_NONE) {
        node = KS_NONE;
        break;
      }
    }
  }
}

ks_fmfa *ks_ftree_mfas(const ks_ftree *tr, const uint64_t *total, const uint64_t *calls,
                       uint32_t calls_cap, int order, uint32_t *nout) {
  uint32_t ids = calls_cap, k, n = 0, *open = NULL;
  uint64_t *self = NULL, *incl = NULL;
  ks_fmfa *out = NULL;

  *nout = 0;
  for (k = 1; k < tr->n; k++)
    if (KS_FR_KIND(tr->v[k].frame) == KS_FR_MFA && KS_FR_VAL(tr->v[k].frame) + 1 > ids)
      ids = KS_FR_VAL(tr->v[k].frame) + 1;
  if (ids == 0)
    return NULL;
  self = calloc(ids, sizeof(*self));
  incl = calloc(ids, sizeof(*incl));
  open = calloc(ids, sizeof(*open));
  if (self == NULL || incl == NULL || open == NULL)
    goto done;
  walk(tr, total, open, self, incl);
  for (k = 0; k < ids; k++)
    n += (k < calls_cap && calls[k] > 0) || self[k] > 0 || incl[k] > 0;
  if (n == 0 || (out = malloc((size_t)n * sizeof(*out))) == NULL)
    goto done;
  n = 0;
  for (k = 0; k < ids; k++) {
    uint64_t c = k < calls_cap ? calls[k] : 0;
    if (c == 0 && self[k] == 0 && incl[k] == 0)
      continue;
    out[n].mfa = k;
    out[n].calls = c;
    out[n].incl = incl[k];
    out[n].self = self[k];
    n++;
  }
  ks_fmfa_sort(out, n, order);
  *nout = n;
done:
  free(self);
  free(incl);
  free(open);
  return out;
}

int ks_fcount_call(uint64_t **calls, uint32_t *cap, uint32_t mfa) {
  if (mfa == KS_NONE)
    return KS_OK;
  if (mfa >= *cap && ks_grow(calls, cap, mfa, 256, sizeof(**calls)) != KS_OK)
    return KS_ENOMEM;
  (*calls)[mfa]++;
  return KS_OK;
}
