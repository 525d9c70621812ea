/* tier_walk.c: from one request's events to its time per tier.
 *
 * Call stacks come from `call` events (with the caller from the match spec)
 * and `return_to` events, by the top rules of the stack model (ks_stack.h;
 * the request markers' calls, which no return_to follows, open no frame):
 * a traced tail call replaces the top frame's function, and every tier that
 * ran in a frame stays open until the frame's return_to.
 *
 * A call of a tier while no frame of the tier is open in any process of the
 * request enters it (the tier's entries: round trips to the database, not its
 * own calls, nor its pool worker's on the caller's behalf).
 *
 * Time between two events goes to the most recently opened frame still open
 * in any process of the request (its tier's self time), or to `other`;
 * inclusive time goes to every tier with a frame open.
 */
#include <stdlib.h>

#include "ks_tiers.h"

int ks_req_ev_less(const void *a, const void *b) {
  const ks_req_ev *x = a, *y = b;

  if (x->ts != y->ts)
    return x->ts < y->ts ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static ks_stack *stack_of(ks_tiers *t, uint32_t pid) {
  uint32_t k;

  for (k = 0; k < t->n_stacks; k++)
    if (t->stack_pids[k] == pid)
      return &t->stacks[k];
  if (t->n_stacks == t->cap_stacks) {
    uint32_t cap = t->cap_stacks;
    if (ks_grow(&t->stacks, &cap, t->n_stacks, 8, sizeof(*t->stacks)) != KS_OK)
      return NULL;
    cap = t->cap_stacks;
    if (ks_grow(&t->stack_pids, &cap, t->n_stacks, 8, sizeof(*t->stack_pids)) != KS_OK)
      return NULL;
    for (k = t->cap_stacks; k < cap; k++)
      ks_stack_init(&t->stacks[k], sizeof(ks_wframe), UINT32_MAX);
    t->cap_stacks = cap;
  }
  t->stack_pids[t->n_stacks] = pid;
  ks_stack_clear(&t->stacks[t->n_stacks]);
  return &t->stacks[t->n_stacks++];
}

/* Whether a frame that ran the tier is open in a process of the request: a
 * call of the tier is then the tier's own (or its worker's on its behalf), not
 * an entry into it. */
static int role_open(const ks_tiers *t, int role) {
  uint32_t k, i;

  for (k = 0; k < t->n_stacks; k++)
    for (i = 0; i < t->stacks[k].n; i++)
      if (((const ks_wframe *)ks_stack_at(&t->stacks[k], i))->roles & 1u << role)
        return 1;
  return 0;
}

/* A call: a new frame, or the tail call joins the top frame. */
static int walk_call(ks_stack *s, const ks_req_ev *e) {
  int role = e->role >= 0 ? e->role : KS_ROLE_NONE;
  int how = ks_stack_call_top(s, e->mfa, e->caller);
  ks_wframe *w = (ks_wframe *)ks_stack_top(s);

  if (how == KS_SC_OVER)
    return KS_ENOMEM;
  if (how == KS_SC_PUSH)
    w->roles = 0;
  w->seq = e->seq;
  w->role = role;
  if (role >= 0)
    w->roles |= 1u << role;
  return KS_OK;
}

/* Credits [from, to) to the open frames. */
static void credit(ks_tiers *t, ks_req_result *res, int64_t from, int64_t to) {
  uint32_t open = 0;
  const ks_wframe *active = NULL;
  uint64_t d;
  uint32_t k, i;

  if (to <= from)
    return;
  d = (uint64_t)(to - from);
  for (k = 0; k < t->n_stacks; k++) {
    const ks_stack *s = &t->stacks[k];
    const ks_wframe *top = (const ks_wframe *)ks_stack_top(s);
    if (top == NULL)
      continue;
    if (active == NULL || top->seq > active->seq)
      active = top;
    for (i = 0; i < s->n; i++)
      open |= ((const ks_wframe *)ks_stack_at(s, i))->roles;
  }
  if (active != NULL && active->role >= 0)
    res->self[active->role] += d;
  else
    res->self[t->ntiers] += d;
  for (i = 0; i < (uint32_t)t->ntiers; i++)
    if (open & 1u << i)
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
    ks_stack *s;
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
      if (e->role >= 0) {
        res->calls[e->role]++;
        res->entries[e->role] += !role_open(t, e->role);
      }
      if (!KS_ROLE_IS_MARK(e->role) && walk_call(s, e) != KS_OK)
        return KS_ENOMEM;   /* a marker opens no frame: no return_to ends one */
    } else {
      ks_stack_return_base(s, e->mfa);
    }
  }
  if (!r->ended || now > end)
    end = now;
  credit(t, res, now, end);
  res->wall = end > r->start_ts ? (uint64_t)(end - r->start_ts) : 0;
  return KS_OK;
}
