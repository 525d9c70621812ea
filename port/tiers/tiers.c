/* tiers.c: requests of the tier profiler: classify MFAs, keep each request's events
 * from its start to the end of its grace window, then hand it to the walk.
 *
 * A request is keyed by its seq_trace label. It opens with a call of the start
 * marker (identity in the payload) or of an entry MFA, and ends with a call of
 * the stop marker or when the entry call's chain returns. Events with its label
 * (and return_to events of processes whose last call had it) are buffered.
 * Its entry process's exit before that end (killed: a web server's handler on
 * the client's disconnect) drops it, counted in killed_requests: its times are
 * not a request's (doc/tiers.md).
 */
#include <stdlib.h>

#include "ks_tiers.h"

void ks_tiers_init(ks_tiers *t) {
  memset(t, 0, sizeof(*t));
  ks_tiers_default_opts(&t->o);
}

static void free_specs(ks_tiers *t) {
  uint32_t k;

  for (k = 0; k < t->nspecs; k++) {
    free(t->specs[k].m);
    free(t->specs[k].f);
  }
  free(t->specs);
  t->specs = NULL;
  t->nspecs = 0;
}

static void free_label(ks_req *r) {
  if (r->label != r->label_buf)
    free(r->label);
  r->label = NULL;
}

static void free_req(ks_req *r) {
  free_label(r);
  free(r->ev);
  free(r->fev);
  ks_stack_free(&r->entry_stack);
  memset(r, 0, sizeof(*r));
}

static void free_inflight(ks_tiers *t) {
  uint32_t k;

  if (t->reqs != NULL)
    for (k = 0; k < t->o.max_inflight; k++)
      free_req(&t->reqs[k]);
  free(t->reqs);
  ks_hmap_free(&t->index);
  free(t->free_slots);
  t->reqs = NULL;
  t->free_slots = NULL;
  t->n_free = 0;
  t->n_inflight = 0;
  t->ended_head = t->ended_tail = 0;
}

void ks_tiers_free(ks_tiers *t) {
  ks_switch sw;
  uint32_t k;

  free_inflight(t);
  ks_full_free(&t->full, t->o.max_identities + 1);
  free_specs(t);
  ks_itab_free(&t->identities);
  ks_tiers_free_rows(t);
  free(t->roles);
  free(t->is_entry);
  free(t->pid_slot);
  free(t->pid_gen);
  free(t->entry_head);
  for (k = 0; k < t->cap_stacks; k++)
    ks_stack_free(&t->stacks[k]);
  for (k = 0; k < t->chains_cap; k++)
    ks_stack_free(&t->chains[k]);
  free(t->chains);
  free(t->stacks);
  free(t->stack_pids);
  sw = t->sw;   /* the registration stays */
  memset(t, 0, sizeof(*t));
  t->sw = sw;
  ks_switch_set(&t->sw, 0);
  ks_tiers_default_opts(&t->o);
}

static void set_active(ks_tiers *t, int active) {
  t->active = active;
  ks_switch_set(&t->sw, active);
}

int ks_tiers_start(ks_tiers *t, const ks_intern *in, ks_tier_spec *specs, uint32_t nspecs,
                   int ntiers, const ks_tier_opts *o) {
  uint32_t n = 16;

  (void)in;
  if (ntiers < 1 || ntiers > KS_TIER_MAX || o->max_inflight == 0 ||
      o->max_identities == 0 || o->max_request_events == 0)
    return KS_EINVAL;
  ks_tiers_free(t);
  t->o = *o;
  t->ntiers = ntiers;
  while (n < o->max_inflight * 2)
    n <<= 1;
  t->reqs = calloc(o->max_inflight, sizeof(*t->reqs));
  if (t->reqs == NULL || ks_hmap_init(&t->index, sizeof(uint32_t), n) != KS_OK ||
      ks_itab_init(&t->identities, 64) != KS_OK) {
    ks_tiers_free(t);
    return KS_ENOMEM;
  }
  t->rows = calloc((size_t)o->max_identities + 1, sizeof(*t->rows));
  t->slow = calloc(o->slow_max ? o->slow_max : 1, sizeof(*t->slow));
  if (t->rows == NULL || t->slow == NULL) {
    ks_tiers_free(t);
    return KS_ENOMEM;
  }
  t->free_slots = malloc(o->max_inflight * sizeof(*t->free_slots));
  if (t->free_slots == NULL) {
    ks_tiers_free(t);
    return KS_ENOMEM;
  }
  for (n = 0; n < o->max_inflight; n++)
    t->free_slots[n] = o->max_inflight - 1 - n;
  t->n_free = o->max_inflight;
  t->first_ts = INT64_MIN;
  t->last_ts = INT64_MIN;
  t->stale_at = INT64_MAX;
  t->specs = specs;   /* owned from here on; on failure the caller keeps them */
  t->nspecs = nspecs;
  set_active(t, 1);
  return KS_OK;
}

void ks_tiers_stop(ks_tiers *t) {
  set_active(t, 0);
}

/* Classifies an MFA against the specs the first time it is seen; *entry gets
 * its KS_MFA_* bits. */
static int role_of(ks_tiers *t, const ks_intern *in, uint32_t mfa, int *entry) {
  ks_mfa_view v;
  uint32_t k;
  int role = KS_ROLE_NONE, is_entry = 0;

  *entry = 0;
  if (mfa == KS_NONE)
    return KS_ROLE_NONE;
  if (mfa >= t->roles_cap) {
    uint32_t cap = t->roles_cap, old = t->roles_cap;
    if (ks_grow(&t->roles, &cap, mfa, 1024, 1) != KS_OK)
      return KS_ROLE_NONE;
    cap = old;
    if (ks_grow(&t->is_entry, &cap, mfa, 1024, 1) != KS_OK)
      return KS_ROLE_NONE;
    memset(t->roles + old, KS_ROLE_UNSEEN, cap - old);
    t->roles_cap = cap;
  }
  if (t->roles[mfa] != KS_ROLE_UNSEEN) {
    *entry = t->is_entry[mfa];
    return t->roles[mfa];
  }
  if (ks_intern_mfa_get(in, mfa, &v) == KS_OK)
    for (k = 0; k < t->nspecs; k++) {
      const ks_tier_spec *s = &t->specs[k];
      if (strcmp(s->m, v.m) != 0 || (s->f != NULL && strcmp(s->f, v.f) != 0) ||
          (s->arity >= 0 && (uint32_t)s->arity != v.arity))
        continue;
      is_entry |= KS_MFA_TIERED;
      if (s->entry)
        is_entry |= KS_MFA_ENTRY;
      else if (role == KS_ROLE_NONE)
        role = s->role;
    }
  t->roles[mfa] = (int8_t)role;
  t->is_entry[mfa] = (uint8_t)is_entry;
  *entry = is_entry;
  return role;
}

/* ---- the in-flight table: label bytes -> slot (port/core/ks_hmap.h, sized at
 * start for every slot at half load: it never grows) ---- */

static uint64_t slot_hash(const void *e, const void *reqs) {
  return ((const ks_req *)reqs)[*(const uint32_t *)e].hash;
}

static uint32_t find_slot(const ks_tiers *t, ks_slice label, uint64_t h) {
  const uint32_t *e;
  const ks_req *r;
  size_t i;

  for (e = ks_hmap_run(&t->index, sizeof(*e), h, &i); e != NULL;
       e = ks_hmap_step(&t->index, sizeof(*e), &i)) {
    r = &t->reqs[*e];
    if (r->hash == h && r->label_len == label.n && memcmp(r->label, label.p, label.n) == 0)
      return *e;
  }
  return KS_NONE;
}

static void index_remove(ks_tiers *t, uint32_t slot) {
  const uint32_t *e;
  size_t i;

  for (e = ks_hmap_run(&t->index, sizeof(*e), t->reqs[slot].hash, &i); e != NULL && *e != slot;
       e = ks_hmap_step(&t->index, sizeof(*e), &i))
    ;
  if (e != NULL)
    ks_hmap_remove(&t->index, sizeof(*e), i, slot_hash, t->reqs);
}

static void release(ks_tiers *t, uint32_t slot);

/* ---- per entry process: its requests in flight, newest first ----
 * A doubly linked list through the slots (entry_prev, entry_next: slot + 1),
 * so that release unlinks in O(1) and an exit finds its requests without a
 * pass over the table. A process opens several when they nest. */

static void link_entry(ks_tiers *t, uint32_t slot) {
  ks_req *r = &t->reqs[slot];
  uint32_t pid = r->entry_pid, head;

  if (pid == KS_NONE)
    return;
  if (pid >= t->entry_cap) {
    uint32_t cap = t->entry_cap ? t->entry_cap : 1024;
    uint32_t *v;
    while (cap <= pid)
      cap *= 2;
    if ((v = realloc(t->entry_head, cap * sizeof(*v))) == NULL)
      return;   /* unlinked: its exit is not seen, max_age ends it */
    memset(v + t->entry_cap, 0, (cap - t->entry_cap) * sizeof(*v));
    t->entry_head = v;
    t->entry_cap = cap;
  }
  head = t->entry_head[pid];
  r->entry_prev = 0;
  r->entry_next = head;
  if (head != 0)
    t->reqs[head - 1].entry_prev = slot + 1;
  t->entry_head[pid] = slot + 1;
}

static void unlink_entry(ks_tiers *t, uint32_t slot) {
  ks_req *r = &t->reqs[slot];
  uint32_t pid = r->entry_pid;

  if (pid >= t->entry_cap || (r->entry_prev == 0 && t->entry_head[pid] != slot + 1))
    return;   /* never linked */
  if (r->entry_prev != 0)
    t->reqs[r->entry_prev - 1].entry_next = r->entry_next;
  else
    t->entry_head[pid] = r->entry_next;
  if (r->entry_next != 0)
    t->reqs[r->entry_next - 1].entry_prev = r->entry_prev;
}

/*
 * A request that never ends, its process's exit not seen (not traced, or lost
 * with the events of a full ring): past max_age it is dropped and counted as
 * abandoned, so its slot comes back. Swept when slots run out and every 64k
 * events, but only once the oldest open request can be stale (stale_at: the
 * oldest start the last sweep saw, or a request opened since, plus
 * max_request_ms): with every slot taken, a sweep of them all for each new
 * request made the sink 10 times slower per event, and later still, just
 * when requests were piling up.
 */
static void sweep_stale(ks_tiers *t) {
  int64_t oldest = INT64_MAX;
  uint32_t k;

  if (t->last_ts < t->stale_at)
    return;
  for (k = 0; k < t->o.max_inflight; k++) {
    ks_req *r = &t->reqs[k];
    if (!r->used || r->ended)
      continue;
    if ((uint64_t)(t->last_ts - r->start_ts) > t->o.max_age_ns) {
      t->abandoned++;
      release(t, k);
    } else if (r->start_ts < oldest) {
      oldest = r->start_ts;
    }
  }
  t->stale_at = oldest == INT64_MAX ? INT64_MAX : oldest + (int64_t)t->o.max_age_ns;
}

/* Out of slots: first the ended requests past their grace (flushed after each
 * event, so one can still hold its slot when this event opens a request), then
 * the stale ones. */
static uint32_t take_slot(ks_tiers *t) {
  if (t->n_free == 0)
    ks_tiers_flush(t, 0);
  if (t->n_free == 0)
    sweep_stale(t);
  return t->n_free > 0 ? t->free_slots[--t->n_free] : KS_NONE;
}

/* The slot's event buffer stays for its next request (no malloc per
 * request) unless it grew past KEEP_EV events. */
#define KEEP_EV 64

static void release(ks_tiers *t, uint32_t slot) {
  ks_req *r = &t->reqs[slot];
  uint32_t gen = r->gen, cap_ev = r->cap_ev;
  ks_req_ev *ev = r->ev;

  index_remove(t, slot);
  unlink_entry(t, slot);
  free_label(r);
  if (cap_ev > KEEP_EV) {
    free(ev);
    ev = NULL;
    cap_ev = 0;
  }
  free(r->fev);
  r->fev = NULL;
  ks_stack_free(&r->entry_stack);
  memset(r, 0, sizeof(*r));
  r->gen = gen + 1;
  r->ev = ev;
  r->cap_ev = cap_ev;
  t->n_inflight--;
  t->free_slots[t->n_free++] = slot;
}

static void finalize(ks_tiers *t, uint32_t slot) {
  ks_req_result res;

  if (t->reqs[slot].full)
    ks_full_walk(t, &t->reqs[slot]);
  if (ks_tiers_walk(t, &t->reqs[slot], &res) == KS_OK) {
    t->requests++;
    if (t->reqs[slot].truncated)
      t->truncated_requests++;
    if (ks_tiers_add_result(t, &res) != KS_OK)
      t->dropped_requests++;
  } else {
    t->dropped_requests++;
  }
  release(t, slot);
}

static void mark_ended(ks_tiers *t, uint32_t slot, int64_t ts) {
  ks_req *r = &t->reqs[slot];

  if (r->ended)
    return;
  r->ended = 1;
  r->end_ts = ts;
  r->next_ended = 0;
  if (t->ended_tail != 0)
    t->reqs[t->ended_tail - 1].next_ended = slot + 1;
  else
    t->ended_head = slot + 1;
  t->ended_tail = slot + 1;
}

/* Unlinks a slot from the ended FIFO (it is finalised out of turn). */
static void unlink_ended(ks_tiers *t, uint32_t slot) {
  uint32_t prev = 0, cur = t->ended_head;

  while (cur != 0 && cur != slot + 1) {
    prev = cur;
    cur = t->reqs[cur - 1].next_ended;
  }
  if (cur == 0)
    return;
  if (prev == 0)
    t->ended_head = t->reqs[slot].next_ended;
  else
    t->reqs[prev - 1].next_ended = t->reqs[slot].next_ended;
  if (t->ended_tail == slot + 1)
    t->ended_tail = prev;
}

void ks_tiers_flush(ks_tiers *t, int all) {
  while (t->ended_head != 0) {
    uint32_t slot = t->ended_head - 1;
    ks_req *r = &t->reqs[slot];
    if (!all && (uint64_t)(t->last_ts - r->end_ts) <= t->o.grace_ns)
      break;
    t->ended_head = r->next_ended;
    if (t->ended_head == 0)
      t->ended_tail = 0;
    finalize(t, slot);
  }
}

static uint32_t identity_row(ks_tiers *t, ks_slice id) {
  uint64_t h = ks_hash(id.p, id.n);
  uint32_t row = ks_itab_get(&t->identities, id.p, id.n, h);

  if (row != KS_NONE)
    return row;
  if (t->n_identities >= t->o.max_identities ||
      ks_itab_put(&t->identities, id.p, id.n, h, t->n_identities, NULL) != KS_OK) {
    t->folded_requests++;
    return t->o.max_identities;   /* the fold row */
  }
  ks_full_row_added(t, t->n_identities, id);
  return t->n_identities++;
}

/* A buffered event: what the walk needs of it, in arrival order (seq). */
static void fill_ev(ks_tiers *t, ks_req_ev *e, const ks_decoded *d, int role) {
  e->ts = d->ev.ts;
  e->pid = d->ev.pid;
  e->mfa = d->ev.mfa;
  e->caller = d->ev.caller;
  e->seq = t->seq++;
  e->kind = d->ev.kind;
  e->role = (int8_t)role;
}

static int append(ks_tiers *t, ks_req *r, const ks_decoded *d, int role) {

  if (r->n_ev == r->cap_ev) {
    uint32_t cap = r->cap_ev ? r->cap_ev * 2 : 16;
    ks_req_ev *v;
    if (r->cap_ev >= t->o.max_request_events) {
      r->truncated = 1;
      t->dropped_events++;
      return KS_EFULL;
    }
    if (cap > t->o.max_request_events)
      cap = t->o.max_request_events;
    v = realloc(r->ev, cap * sizeof(*v));
    if (v == NULL) {
      t->dropped_events++;
      return KS_ENOMEM;
    }
    r->ev = v;
    r->cap_ev = cap;
  }
  fill_ev(t, &r->ev[r->n_ev++], d, role);
  t->events++;
  return KS_OK;
}

/* Full trace: every event of a selected request, up to full_max_events. */
static void append_full(ks_tiers *t, ks_req *r, const ks_decoded *d, int role) {

  if (r->n_fev == r->cap_fev) {
    uint32_t cap = r->cap_fev ? r->cap_fev * 2 : 64;
    ks_req_ev *v;
    if (r->cap_fev >= t->o.full_max_events) {
      if (!r->full_truncated)
        t->full.truncated_requests++;
      r->full_truncated = 1;
      t->full.dropped_events++;
      return;
    }
    if (cap > t->o.full_max_events)
      cap = t->o.full_max_events;
    if ((v = realloc(r->fev, cap * sizeof(*v))) == NULL) {
      t->full.dropped_events++;
      return;
    }
    r->fev = v;
    r->cap_fev = cap;
  }
  fill_ev(t, &r->fev[r->n_fev++], d, role);
}

/* {M, F, Arity} in external format, into buf: an entry's identity when it has no other. */
static ks_slice mfa_term(const ks_intern *in, uint32_t mfa, unsigned char *buf, size_t cap) {
  ks_slice s = {NULL, 0};
  ks_mfa_view v;
  size_t lm, lf, n = 0;

  if (ks_intern_mfa_get(in, mfa, &v) != KS_OK)
    return s;
  lm = strlen(v.m);
  lf = strlen(v.f);
  if (2 + 3 + lm + 3 + lf + 2 > cap)
    return s;
  buf[n++] = 104;
  buf[n++] = 3;
  buf[n++] = 118;
  buf[n++] = (unsigned char)(lm >> 8);
  buf[n++] = (unsigned char)lm;
  memcpy(buf + n, v.m, lm);
  n += lm;
  buf[n++] = 118;
  buf[n++] = (unsigned char)(lf >> 8);
  buf[n++] = (unsigned char)lf;
  memcpy(buf + n, v.f, lf);
  n += lf;
  buf[n++] = 97;
  buf[n++] = (unsigned char)v.arity;
  s.p = buf;
  s.n = n;
  return s;
}

/* Opens a request for this label; an older one with the label is finalised first. */
static uint32_t open_request(ks_tiers *t, const ks_intern *in, const ks_decoded *d, uint64_t h,
                             int by_entry) {
  static const unsigned char nil[1] = {106};
  unsigned char mfa_buf[2 * 1024 + 16];
  uint32_t slot = find_slot(t, d->label, h);
  size_t i;
  ks_req *r;
  ks_slice ident = d->payload;

  if (slot != KS_NONE) {
    if (!t->reqs[slot].ended) {
      t->reqs[slot].abandoned = 1;
      t->abandoned++;
      mark_ended(t, slot, d->ev.ts);
    }
    unlink_ended(t, slot);
    finalize(t, slot);
  }
  if ((slot = take_slot(t)) == KS_NONE) {
    t->dropped_requests++;
    return KS_NONE;
  }
  r = &t->reqs[slot];
  r->label = d->label.n <= sizeof(r->label_buf) ? r->label_buf : malloc(d->label.n);
  if (r->label == NULL) {
    t->free_slots[t->n_free++] = slot;
    t->dropped_requests++;
    return KS_NONE;
  }
  memcpy(r->label, d->label.p, d->label.n);
  r->label_len = (uint32_t)d->label.n;
  r->hash = h;
  r->used = 1;
  r->by_entry = by_entry;
  ks_stack_init(&r->entry_stack, sizeof(ks_sframe), UINT32_MAX);
  r->entry_pid = d->ev.pid;
  link_entry(t, slot);
  r->start_ts = d->ev.ts;
  if (r->start_ts < t->stale_at - (int64_t)t->o.max_age_ns)
    t->stale_at = r->start_ts + (int64_t)t->o.max_age_ns;
  if (ident.p == NULL && by_entry)
    ident = mfa_term(in, d->ev.mfa, mfa_buf, sizeof(mfa_buf));
  if (ident.p == NULL) {
    ident.p = nil;
    ident.n = 1;
  }
  r->identity = identity_row(t, ident);
  r->full = t->full.on && t->full.row_on[r->identity];
  i = ks_hmap_end(&t->index, sizeof(uint32_t), h);
  *(uint32_t *)ks_hmap_put(&t->index, sizeof(uint32_t), i) = slot;
  t->n_inflight++;
  if (t->first_ts == INT64_MIN)
    t->first_ts = d->ev.ts;
  return slot;
}

/* pid id -> the slot (and its generation) of the request of its last labelled call. */
static int remember_in(ks_tiers *t, uint32_t **slots, uint32_t **gens, uint32_t *pcap,
                       uint32_t pid, uint32_t slot) {
  if (pid == KS_NONE)
    return KS_EINVAL;
  if (pid >= *pcap) {
    uint32_t cap = *pcap, old = *pcap;
    if (ks_grow(slots, &cap, pid, 1024, sizeof(**slots)) != KS_OK)
      return KS_ENOMEM;
    cap = old;
    if (ks_grow(gens, &cap, pid, 1024, sizeof(**gens)) != KS_OK)
      return KS_ENOMEM;
    for (; old < cap; old++)
      (*slots)[old] = KS_NONE;
    *pcap = cap;
  }
  (*slots)[pid] = slot;
  (*gens)[pid] = t->reqs[slot].gen;
  return KS_OK;
}

static int remember_pid(ks_tiers *t, uint32_t pid, uint32_t slot) {
  return remember_in(t, &t->pid_slot, &t->pid_gen, &t->pid_cap, pid, slot);
}

static uint32_t slot_in(const ks_tiers *t, const uint32_t *slots, const uint32_t *gens,
                        uint32_t cap, uint32_t pid) {
  uint32_t slot;

  if (pid == KS_NONE || pid >= cap || (slot = slots[pid]) == KS_NONE)
    return KS_NONE;
  if (!t->reqs[slot].used || t->reqs[slot].gen != gens[pid])
    return KS_NONE;
  return slot;
}

static uint32_t slot_of_pid(const ks_tiers *t, uint32_t pid) {
  return slot_in(t, t->pid_slot, t->pid_gen, t->pid_cap, pid);
}

/* Full trace: where a process's next return_to goes in the full stream, which
 * follows every labelled call (the tier stream follows tier calls only). */
static void full_remember(ks_tiers *t, uint32_t pid, uint32_t slot) {
  ks_full *f = &t->full;

  if (slot != KS_NONE)
    remember_in(t, &f->pid_slot, &f->pid_gen, &f->pid_cap, pid, slot);
  else if (pid < f->pid_cap)
    f->pid_slot[pid] = KS_NONE;
}

/* ---- each process's stack: the request a return_to belongs to ---- */

/* Frames kept per process; deeper ones are only counted. */
#define KS_CHAINS_MAX 65536

static ks_stack *chains_of(ks_tiers *t, uint32_t pid, int make) {
  if (pid == KS_NONE)
    return NULL;
  if (pid >= t->chains_cap) {
    uint32_t k = t->chains_cap;
    if (!make || ks_grow(&t->chains, &t->chains_cap, pid, 1024, sizeof(*t->chains)) != KS_OK)
      return NULL;
    for (; k < t->chains_cap; k++)
      ks_stack_init(&t->chains[k], sizeof(ks_chain), KS_CHAINS_MAX);
  }
  return &t->chains[pid];
}

/* The request that opened a frame, if still in flight. */
static uint32_t chain_req(const ks_tiers *t, const ks_chain *c) {
  if (c->slot == KS_NONE || !t->reqs[c->slot].used || t->reqs[c->slot].gen != c->gen)
    return KS_NONE;
  return c->slot;
}

/* A labelled call on its process's stack: the frame it opened or joined,
 * NULL when it was only counted. */
static ks_chain *chain_call(ks_tiers *t, const ks_decoded *d, int tiered) {
  ks_stack *s = chains_of(t, d->ev.pid, 1);
  ks_chain *c;
  int how;

  if (s == NULL)
    return NULL;
  how = ks_stack_call_top(s, d->ev.mfa, d->ev.caller);
  if (how == KS_SC_OVER) {
    t->full.chain_overflow += t->full.on;
    return NULL;
  }
  c = (ks_chain *)ks_stack_top(s);
  if (how == KS_SC_PUSH) {
    c->tiered = (uint32_t)tiered;
    c->slot = KS_NONE;
  } else {
    c->tiered |= (uint32_t)tiered;
  }
  return c;
}

/* The frame's request is the call's, unless one in flight opened it. */
static void chain_owner(ks_tiers *t, ks_chain *c, uint32_t slot) {
  if (c != NULL && slot != KS_NONE && chain_req(t, c) == KS_NONE) {
    c->slot = slot;
    c->gen = t->reqs[slot].gen;
  }
}

/*
 * A return_to on its process's stack. Returns whether it would have been
 * sent without full trace (a tiered frame ended, or none we saw); own[0] and
 * own[1] get the requests of the topmost and the deepest frame it ended
 * (tiered ones only under full trace) that are still in flight, KS_NONE
 * else: an exception may unwind a nested request's frames and its outer
 * request's at once.
 */
static int chain_return(ks_tiers *t, const ks_decoded *d, uint32_t own[2]) {
  ks_stack *s = chains_of(t, d->ev.pid, 0);
  uint32_t tiered = 0, k, popped, slot;

  own[0] = own[1] = KS_NONE;
  if (s == NULL || s->n == 0)
    return 1;   /* a frame we never saw start: pass it on, as before */
  if ((popped = ks_stack_return_base(s, d->ev.mfa)) == 0)
    return 1;   /* one only counted past the cap */
  for (k = popped; k-- > 0;) {   /* popped frames stay above n, topmost last */
    const ks_chain *c = (const ks_chain *)ks_stack_at(s, s->n + k);
    tiered |= c->tiered;
    if ((c->tiered || !t->full.on) && (slot = chain_req(t, c)) != KS_NONE) {
      if (own[0] == KS_NONE)
        own[0] = slot;
      own[1] = slot;
    }
  }
  return (int)tiered;
}

/* Full trace: a labelled call of a function no spec names. */
static uint32_t on_full_call(ks_tiers *t, const ks_decoded *d) {
  uint32_t slot = find_slot(t, d->label, ks_hash(d->label.p, d->label.n));

  full_remember(t, d->ev.pid, slot);
  if (slot != KS_NONE && t->reqs[slot].full)
    append_full(t, &t->reqs[slot], d, KS_ROLE_NONE);
  else
    t->full.filtered_events++;
  return slot;
}

static void on_call(ks_tiers *t, const ks_intern *in, const ks_decoded *d) {
  uint64_t h;
  uint32_t slot;
  int entry, role = role_of(t, in, d->ev.mfa, &entry), tiered = (entry & KS_MFA_TIERED) != 0;
  /* A marker's call has no return_to: it opens no frame. */
  ks_chain *c = KS_ROLE_IS_MARK(role) ? NULL : chain_call(t, d, tiered);
  ks_req *r;

  if (t->full.on && !tiered) {
    chain_owner(t, c, on_full_call(t, d));
    return;
  }
  h = ks_hash(d->label.p, d->label.n);
  slot = find_slot(t, d->label, h);
  if (role == KS_ROLE_START ||
      ((entry & KS_MFA_ENTRY) && (slot == KS_NONE || t->reqs[slot].ended))) {
    slot = open_request(t, in, d, h, role != KS_ROLE_START);
    if (slot == KS_NONE)
      return;
  }
  if (t->full.on)
    full_remember(t, d->ev.pid, slot);
  if (slot == KS_NONE) {
    t->orphan_events++;
    return;
  }
  chain_owner(t, c, slot);
  r = &t->reqs[slot];
  remember_pid(t, d->ev.pid, slot);
  append(t, r, d, role);
  if (r->full)
    append_full(t, r, d, role);
  if (r->by_entry && !r->ended && d->ev.pid == r->entry_pid)
    ks_stack_call_top(&r->entry_stack, d->ev.mfa, d->ev.caller);
  if (role == KS_ROLE_STOP && d->ev.pid == r->entry_pid)
    mark_ended(t, slot, d->ev.ts);
}

/* A return_to into a request's events; the entry call's return ends it. */
static void return_into(ks_tiers *t, uint32_t slot, const ks_decoded *d) {
  ks_req *r = &t->reqs[slot];

  append(t, r, d, KS_ROLE_NONE);
  if (r->by_entry && !r->ended && d->ev.pid == r->entry_pid) {
    ks_stack_return_base(&r->entry_stack, d->ev.mfa);
    if (r->entry_stack.n == 0)
      mark_ended(t, slot, d->ev.ts);
  }
}

static void on_return_to(ks_tiers *t, const ks_decoded *d) {
  uint32_t slot, own[2];
  int tiered = chain_return(t, d, own);

  if (t->full.on) {
    const ks_full *f = &t->full;
    slot = slot_in(t, f->pid_slot, f->pid_gen, f->pid_cap, d->ev.pid);
    if (slot != KS_NONE && t->reqs[slot].full)
      append_full(t, &t->reqs[slot], d, KS_ROLE_NONE);
    if (!tiered) {
      t->full.filtered_events += slot == KS_NONE || !t->reqs[slot].full;
      return;
    }
  }
  if (own[0] == KS_NONE)
    own[0] = own[1] = slot_of_pid(t, d->ev.pid);
  if (own[0] == KS_NONE) {
    t->orphan_events++;
    return;
  }
  return_into(t, own[0], d);
  if (own[1] != own[0])
    return_into(t, own[1], d);
}

/*
 * A process exited: the requests it opened that have not ended never will
 * (no stop marker, no return of the entry call): a killed handler. Each gives
 * its slot back at once and counts in killed_requests; its times are not
 * recorded (cut short by the kill, not the request's; doc/tiers.md). Requests
 * it only worked for go on (their entry process ends them), and its ended
 * ones keep their grace window. Events of its other processes that come
 * later count as orphan_events.
 */
static void on_process_exit(ks_tiers *t, uint32_t pid) {
  uint32_t s, next;

  if (pid >= t->entry_cap)
    return;
  for (s = t->entry_head[pid]; s != 0; s = next) {
    next = t->reqs[s - 1].entry_next;
    if (!t->reqs[s - 1].ended) {
      t->killed_requests++;
      t->killed_total++;
      release(t, s - 1);
    }
  }
}

void ks_tiers_event(ks_tiers *t, const ks_intern *in, const ks_decoded *d) {
  const ks_event *ev = &d->ev;

  if (!t->active || !(ev->flags & KS_EVF_TS))
    return;
  if (ev->kind == KS_EV_CALL) {
    if (!(ev->flags & KS_EVF_LABEL))
      return;   /* not in a request: a trace pattern kprof does not own */
    if (ev->ts > t->last_ts)
      t->last_ts = ev->ts;
    on_call(t, in, d);
  } else if (ev->kind == KS_EV_RETURN_TO) {
    if (ev->ts > t->last_ts)
      t->last_ts = ev->ts;
    on_return_to(t, d);
  } else if (ev->kind == KS_EV_EXIT) {
    if (ev->ts > t->last_ts)
      t->last_ts = ev->ts;
    on_process_exit(t, ev->pid);
  } else {
    return;
  }
  if ((++t->sweep_tick & 0xffff) == 0)
    sweep_stale(t);
  ks_tiers_flush(t, 0);
}

static void pin(uint8_t *v, uint32_t n, uint32_t pid) {
  if (pid < n)
    v[pid] = 1;
}

void ks_tiers_pin_pids(const ks_tiers *t, uint8_t *v, uint32_t n) {
  uint32_t k, i;

  for (k = 0; t->reqs != NULL && k < t->o.max_inflight; k++) {
    const ks_req *r = &t->reqs[k];
    if (!r->used)
      continue;
    pin(v, n, r->entry_pid);
    for (i = 0; i < r->n_ev; i++)
      pin(v, n, r->ev[i].pid);
    for (i = 0; i < r->n_fev; i++)
      pin(v, n, r->fev[i].pid);
  }
  for (k = 0; t->slow != NULL && k < t->n_slow; k++)
    pin(v, n, t->slow[k].entry_pid);
}

void ks_tiers_forget_pids(ks_tiers *t, const uint8_t *dead, uint32_t n) {
  ks_full *f = &t->full;
  uint32_t id;

  for (id = 0; id < n; id++) {
    if (!dead[id])
      continue;
    if (id < t->pid_cap)
      t->pid_slot[id] = KS_NONE;
    if (id < t->entry_cap)
      t->entry_head[id] = 0;   /* empty already: its requests pinned the id */
    if (id < f->pid_cap)
      f->pid_slot[id] = KS_NONE;
    if (id < t->chains_cap)
      ks_stack_clear(&t->chains[id]);
  }
}

/* The requests of a reset are gone: no frame refers to a slot any more. */
static void forget_owners(ks_stack *chains, uint32_t n) {
  uint32_t k, i;

  for (k = 0; k < n; k++)
    for (i = 0; i < chains[k].n; i++)
      ((ks_chain *)ks_stack_at(&chains[k], i))->slot = KS_NONE;
}

void ks_tiers_reset(ks_tiers *t) {
  ks_tier_opts o = t->o;
  ks_tier_spec *specs = t->specs;
  uint32_t nspecs = t->nspecs;
  int ntiers = t->ntiers, active = t->active;
  ks_stack *chains = t->chains;
  uint32_t chains_cap = t->chains_cap;
  ks_full keep;

  /* Keep the configuration and the processes' stacks (they did not change:
   * only the requests that opened their frames are gone); drop requests,
   * rows and counters. */
  t->specs = NULL;
  t->nspecs = 0;
  t->chains = NULL;
  t->chains_cap = 0;
  forget_owners(chains, chains_cap);
  ks_full_detach(&t->full, &keep);
  ks_tiers_free(t);
  if (ntiers > 0 && ks_tiers_start(t, NULL, specs, nspecs, ntiers, &o) == KS_OK) {
    t->chains = chains;
    t->chains_cap = chains_cap;
    set_active(t, active);
    if (ks_full_attach(t, &keep) != KS_OK)
      set_active(t, 0);
    return;
  }
  ks_full_free(&keep, 0);
  for (uint32_t k = 0; k < chains_cap; k++)
    ks_stack_free(&chains[k]);
  free(chains);
  for (uint32_t k = 0; k < nspecs; k++) {
    free(specs[k].m);
    free(specs[k].f);
  }
  free(specs);
}

/* The tiers as one of the sink's consumers (port/core/ks_consumer.h). */
static void consumer_event(void *self, const ks_intern *in, const ks_decoded *d) {
  ks_tiers_event(self, in, d);
}

static void consumer_pin(const void *self, uint8_t *pin, uint32_t n) {
  ks_tiers_pin_pids(self, pin, n);
}

static void consumer_forget(void *self, const uint8_t *dead, uint32_t n) {
  ks_tiers_forget_pids(self, dead, n);
}

static void consumer_free(void *self) {
  ks_tiers_free(self);
}

void ks_tiers_consumer(ks_tiers *t, ks_consumer *c) {
  *c = (ks_consumer){.name = "tiers", .self = t, .active = &t->active, .sw = &t->sw,
                     .event = consumer_event,
                     .pin_pids = consumer_pin, .forget_pids = consumer_forget,
                     .reset = NULL, .free = consumer_free};
}
