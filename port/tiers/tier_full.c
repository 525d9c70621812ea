/* tier_full.c: full request trace (doc/internals-tiers.md, "Full trace").
 *
 * With full trace on, every function of every loaded module is traced in
 * processes that carry a request's token, not only the tier functions. Two
 * things follow here.
 *
 * The tier accounting must see what it saw before: the calls of functions a
 * spec names (KS_MFA_TIERED), and the return_to events the VM would have sent
 * without full trace. The VM sends one return_to per chain of tail calls
 * started by a traced call; with every function traced, chains start at more
 * calls, and a chain sends the return_to it would have sent alone iff a
 * tier-traced function was in it. So each process's stack is kept by the
 * walk's rules (ks_stack.h, top rules; tiers.c keeps it), each frame with a
 * `tiered` bit, and a return_to is passed on to the tiers only when a frame
 * it ends had one.
 *
 * Requests of selected identities also keep every event, and when finalised
 * they are walked with the call-path model's stack rules
 * (port/callpath/stacks.c) into their identity's call-path tree
 * (port/callpath/tree.c): one tree per identity, every
 * process of the request a stack from the root, time per process. Calls are
 * counted per MFA; self and inclusive time per MFA come from the tree.
 */
#include <stdlib.h>

#include "ks_tiers.h"

int ks_full_select(ks_tiers *t, int all, const ks_slice *ids, uint32_t n) {
  ks_full *f = &t->full;
  uint32_t k, rows = t->o.max_identities + 1;

  ks_full_free(f, rows);
  if (ks_itab_init(&f->selected, n * 2 + 16) != KS_OK)
    return KS_ENOMEM;
  for (k = 0; k < n; k++)
    if (ks_itab_get(&f->selected, ids[k].p, ids[k].n, ks_hash(ids[k].p, ids[k].n)) == KS_NONE &&
        ks_itab_put(&f->selected, ids[k].p, ids[k].n, ks_hash(ids[k].p, ids[k].n), 1, NULL) !=
            KS_OK) {
      ks_full_free(f, rows);
      return KS_ENOMEM;
    }
  f->row_on = calloc(rows, 1);
  f->agg = calloc(rows, sizeof(*f->agg));
  if (f->row_on == NULL || f->agg == NULL) {
    ks_full_free(f, rows);
    return KS_ENOMEM;
  }
  f->all = all;
  f->on = 1;
  return KS_OK;
}

static void free_agg(ks_full_agg *a) {
  ks_ftree_free(&a->tree);
  free(a->calls);
  free(a);
}

void ks_full_free(ks_full *f, uint32_t nrows) {
  uint32_t k;

  if (f->agg != NULL)
    for (k = 0; k < nrows; k++)
      if (f->agg[k] != NULL)
        free_agg(f->agg[k]);
  for (k = 0; k < f->cap_procs; k++)
    ks_stack_free(&f->procs[k].st);
  free(f->agg);
  free(f->row_on);
  free(f->pid_slot);
  free(f->pid_gen);
  free(f->procs);
  ks_itab_free(&f->selected);
  memset(f, 0, sizeof(*f));
}

void ks_full_detach(ks_full *f, ks_full *keep) {
  memset(keep, 0, sizeof(*keep));
  keep->on = f->on;
  keep->all = f->all;
  keep->selected = f->selected;
  memset(&f->selected, 0, sizeof(f->selected));
}

int ks_full_attach(ks_tiers *t, ks_full *keep) {
  ks_full *f = &t->full;
  uint32_t rows = t->o.max_identities + 1;

  if (!keep->on) {
    ks_full_free(keep, 0);
    return KS_OK;
  }
  ks_full_free(f, rows);
  f->row_on = calloc(rows, 1);
  f->agg = calloc(rows, sizeof(*f->agg));
  if (f->row_on == NULL || f->agg == NULL) {
    ks_full_free(f, rows);
    ks_full_free(keep, 0);
    return KS_ENOMEM;
  }
  f->selected = keep->selected;
  f->all = keep->all;
  f->on = 1;
  memset(keep, 0, sizeof(*keep));
  return KS_OK;
}

void ks_full_row_added(ks_tiers *t, uint32_t row, ks_slice id) {
  ks_full *f = &t->full;

  if (!f->on || row >= t->o.max_identities)
    return;   /* the fold row mixes identities: never full-traced */
  f->row_on[row] = f->all || ks_itab_get(&f->selected, id.p, id.n, ks_hash(id.p, id.n)) != KS_NONE;
}

/* ---- a finalised request into its identity's aggregate ---- */

/* The stack rules' options for an aggregate: no sleep or GC frames (the
 * full stream has no scheduling events), a depth cap of 256 (TRUNCATED), a node
 * cap and no byte budget. */
static void agg_opts(const ks_tiers *t, ks_fopts *o) {
  ks_fopts_default(o);
  o->sleep = 0;
  o->gc = 0;
  o->max_depth = 256;
  o->max_nodes = t->o.full_max_nodes;
  o->max_bytes = KS_FTREE_NO_BUDGET;
}

static ks_full_agg *agg_of(ks_tiers *t, uint32_t row) {
  ks_full *f = &t->full;
  ks_full_agg *a;

  if (f->agg[row] != NULL)
    return f->agg[row];
  if (f->n_agg >= t->o.full_max_identities || (a = calloc(1, sizeof(*a))) == NULL)
    return NULL;
  if (ks_ftree_init(&a->tree, t->o.full_max_nodes, KS_FTREE_NO_BUDGET) != KS_OK) {
    free(a);
    return NULL;
  }
  f->agg[row] = a;
  f->n_agg++;
  return a;
}

/* The walk's process for pid; its stack array is kept from request to request. */
static ks_fproc *proc_of(ks_full *f, uint32_t pid) {
  ks_fopts o;
  ks_fproc *p;
  uint32_t k;

  for (k = 0; k < f->nprocs; k++)
    if (f->procs[k].pid == pid)
      return &f->procs[k];
  if (f->nprocs == f->cap_procs) {
    uint32_t old = f->cap_procs;
    if (ks_grow(&f->procs, &f->cap_procs, f->nprocs, 8, sizeof(*f->procs)) != KS_OK)
      return NULL;
    ks_fopts_default(&o);   /* the aggregates' (agg_of) */
    for (k = old; k < f->cap_procs; k++)   /* freed with procs from here on */
      ks_fstack_init(&f->procs[k], o.max_stack);
  }
  p = &f->procs[f->nprocs++];
  {
    ks_stack st = p->st;
    memset(p, 0, sizeof(*p));
    p->st = st;
    ks_fstack_clear(p);
  }
  p->pid = pid;
  p->root = 0;
  p->cur = KS_NONE;
  p->out_mfa = KS_NONE;
  p->armed = 1;
  return p;
}

/* Time goes to a process's top frame; a process with no frame has none. */
static void update(const ks_fgraph *g, ks_fproc *p) {
  ks_fstack_update(g, p);
  if (p->st.n == 0)
    p->cur = KS_NONE;
}

void ks_full_walk(ks_tiers *t, ks_req *r) {
  ks_full *f = &t->full;
  ks_full_agg *a = agg_of(t, r->identity);
  int64_t end = r->ended ? r->end_ts : r->start_ts;
  ks_fproc *entry;
  ks_fopts o;
  ks_fgraph g = {NULL, NULL, &o, NULL, NULL};
  uint32_t k;

  if (a == NULL) {
    f->dropped_requests++;
    return;
  }
  agg_opts(t, &o);
  g.tree = &a->tree;
  g.k = &a->k;
  f->nprocs = 0;
  qsort(r->fev, r->n_fev, sizeof(*r->fev), ks_req_ev_less);
  for (k = 0; k < r->n_fev; k++) {
    const ks_req_ev *e = &r->fev[k];
    int64_t at = e->ts < r->start_ts ? r->start_ts : e->ts;
    ks_fproc *p;

    if (r->ended && e->pid == r->entry_pid && at > r->end_ts)
      continue;   /* as in the tier walk: the entry process is done at the end */
    if ((p = proc_of(f, e->pid)) == NULL)
      break;
    if (!r->ended && at > end)
      end = at;
    ks_fstack_credit(&g, p, at);
    if (e->kind == KS_EV_CALL) {
      if (KS_ROLE_IS_MARK(e->role))
        continue;   /* kprof's markers are not the request's code (no return_to follows) */
      (void)ks_fcount_call(&a->calls, &a->calls_cap, e->mfa);
      ks_fstack_call(&g, p, e->mfa, e->caller);
    } else {
      ks_fstack_return_to(&g, p, e->mfa);
    }
    update(&g, p);
    a->k.events++;
  }
  /* The entry process runs to the end; the others to their last event. */
  entry = proc_of(f, r->entry_pid);
  if (entry != NULL && entry->has_ts)
    ks_fstack_credit(&g, entry, end);
  a->requests++;
  a->events += r->n_fev;
  a->truncated += r->full_truncated != 0;
}

/* ---- per-MFA totals, from the tree (port/callpath/top.c) ---- */

ks_fmfa *ks_full_mfas(const ks_full_agg *a, uint32_t *nout) {
  const ks_ftree *tr = &a->tree;
  uint64_t *total = malloc((size_t)tr->n * sizeof(*total));
  ks_fmfa *out;

  *nout = 0;
  if (total == NULL)
    return NULL;
  ks_ftree_totals(tr, total);
  out = ks_ftree_mfas(tr, total, a->calls, a->calls_cap, KS_FMFA_BY_INCL, nout);
  free(total);
  return out;
}
