/* tier_walk.c: from one request's events to its time per tier.
 *
 * Call stacks come from `call` events (with the caller from the match spec)
 * and `return_to` events. The VM sends one return_to per chain of tail calls,
 * so frames are grouped in chains: a call whose caller is the function the
 * top chain returns to was made in tail position and joins that chain; any
 * other call starts a new chain. (The VM's {caller} skips the return_to
 * frame of a chain, so a tail call names the function below the chain.) A return_to pops the top chain, and keeps
 * popping while a deeper chain returns to the function named (an exception
 * unwinding several chains at once).
 *
 * Time between two events goes to the most recently opened frame still open
 * in any process of the request (its tier's self time), or to `other`;
 * inclusive time goes to every tier with a frame open.
 */
#include <stdlib.h>

#include "ks_tiers.h"

void ks_frames_free(ks_frames *s) {
  free(s->v);
  memset(s, 0, sizeof(*s));
}

int ks_frames_call(ks_frames *s, uint32_t mfa, uint32_t caller, int role, uint32_t seq) {
  ks_frame *top = s->n ? &s->v[s->n - 1] : NULL;
  ks_frame f;

  if (s->n == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 16;
    ks_frame *v = realloc(s->v, cap * sizeof(*v));
    if (v == NULL)
      return KS_ENOMEM;
    s->v = v;
    s->cap = cap;
    top = s->n ? &s->v[s->n - 1] : NULL;
  }
  f.mfa = mfa;
  f.role = role;
  f.seq = seq;
  /* A function calling itself is taken as a body call: when it is really a
   * tail call the frames merged or split all belong to that one function. */
  if (top != NULL && caller != KS_NONE && caller == top->base && caller != top->mfa) {
    f.base = top->base;       /* a tail call: the chain goes on */
    f.chain = top->chain;
  } else {
    f.base = caller;
    f.chain = s->next_chain++;
  }
  s->v[s->n++] = f;
  return KS_OK;
}

static void pop_chain(ks_frames *s) {
  uint32_t chain = s->v[s->n - 1].chain;

  while (s->n > 0 && s->v[s->n - 1].chain == chain)
    s->n--;
}

uint32_t ks_frames_return_to(ks_frames *s, uint32_t to) {
  uint32_t before = s->n, k;
  int deeper = 0;

  if (s->n == 0)
    return 0;
  /* Does a chain below the top return to `to`? Then unwind down to it. */
  if (s->v[s->n - 1].base != to && to != KS_NONE)
    for (k = 0; k + 1 < s->n; k++)
      if (s->v[k].base == to) {
        deeper = 1;
        break;
      }
  if (!deeper) {
    pop_chain(s);
    return before - s->n;
  }
  while (s->n > 0) {
    int last = s->v[s->n - 1].base == to;
    pop_chain(s);
    if (last)
      break;
  }
  return before - s->n;
}

int ks_req_ev_less(const void *a, const void *b) {
  const ks_req_ev *x = a, *y = b;

  if (x->ts != y->ts)
    return x->ts < y->ts ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static ks_frames *stack_of(ks_tiers *t, uint32_t pid) {
  uint32_t k;

  for (k = 0; k < t->n_stacks; k++)
    if (t->stack_pids[k] == pid)
      return &t->stacks[k];
  if (t->n_stacks == t->cap_stacks) {
    uint32_t cap = t->cap_stacks ? t->cap_stacks * 2 : 8;
    ks_frames *s = realloc(t->stacks, cap * sizeof(*s));
    uint32_t *p;
    if (s == NULL)
      return NULL;
    t->stacks = s;
    p = realloc(t->stack_pids, cap * sizeof(*p));
    if (p == NULL)
      return NULL;
    t->stack_pids = p;
    memset(t->stacks + t->cap_stacks, 0, (cap - t->cap_stacks) * sizeof(*s));
    t->cap_stacks = cap;
  }
  t->stack_pids[t->n_stacks] = pid;
  t->stacks[t->n_stacks].n = 0;
  t->stacks[t->n_stacks].next_chain = 0;
  return &t->stacks[t->n_stacks++];
}

/* Credits [from, to) to the open frames. */
static void credit(ks_tiers *t, ks_req_result *res, int64_t from, int64_t to) {
  uint32_t open[KS_TIER_MAX] = {0};
  const ks_frame *active = NULL;
  uint64_t d;
  uint32_t k, i;

  if (to <= from)
    return;
  d = (uint64_t)(to - from);
  for (k = 0; k < t->n_stacks; k++) {
    const ks_frames *s = &t->stacks[k];
    if (s->n == 0)
      continue;
    if (active == NULL || s->v[s->n - 1].seq > active->seq)
      active = &s->v[s->n - 1];
    for (i = 0; i < s->n; i++)
      if (s->v[i].role >= 0)
        open[s->v[i].role] = 1;
  }
  if (active != NULL && active->role >= 0)
    res->self[active->role] += d;
  else
    res->self[t->ntiers] += d;
  for (i = 0; i < (uint32_t)t->ntiers; i++)
    if (open[i])
      res->incl[i] += d;
}

int ks_tiers_walk(ks_tiers *t, ks_req *r, ks_req_result *res) {
  int64_t now = r->start_ts, end = r->end_ts;
  uint32_t k;

  memset(res, 0, sizeof(*res));
  res->identity = r->identity;
  res->entry_pid = r->entry_pid;
  res->start_ts = r->start_ts;
  t->n_stacks = 0;
  qsort(r->ev, r->n_ev, sizeof(*r->ev), ks_req_ev_less);
  for (k = 0; k < r->n_ev; k++) {
    const ks_req_ev *e = &r->ev[k];
    ks_frames *s;
    int64_t at = e->ts < r->start_ts ? r->start_ts : e->ts;

    /* The entry process is done at the end; the others may still run (stragglers). */
    if (r->ended && e->pid == r->entry_pid && at > end)
      continue;
    credit(t, res, now, at);
    if (at > now)
      now = at;
    if ((s = stack_of(t, e->pid)) == NULL)
      return KS_ENOMEM;
    if (e->kind == KS_EV_CALL) {
      if (e->role >= 0)
        res->calls[e->role]++;
      if (ks_frames_call(s, e->mfa, e->caller, e->role >= 0 ? e->role : KS_ROLE_NONE,
                         e->seq) != KS_OK)
        return KS_ENOMEM;
    } else {
      ks_frames_return_to(s, e->mfa);
    }
  }
  if (!r->ended || now > end)
    end = now;
  credit(t, res, now, end);
  res->wall = end > r->start_ts ? (uint64_t)(end - r->start_ts) : 0;
  return KS_OK;
}
