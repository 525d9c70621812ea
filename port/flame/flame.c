/* flame.c: flame captures: which processes belong to which capture, and their events.
 *
 * A capture is keyed by the set of its processes. A process joins
 *   - by command (flame_pids: kprof:flame_apply's caller, flame_pid's pids);
 *   - by a trigger call (flame_capture): the meta trace call of the trigger
 *     MFA carries {kprof_flame, Id} as its match-spec payload;
 *   - by being spawned by a process of a capture that follows children.
 * Every pid id has a bitmask of the captures it is in, so an event costs one
 * array read when no capture wants it. Several captures may share a process.
 *
 * Trigger calls are seen through meta tracing (the VM turns the process's
 * trace flags on at the call): the meta call and its return_from or
 * exception_from come marked KS_EVF_META from the tracer NIF's ring, with
 * monotonic timestamps; through a port they carry wall-clock timestamps
 * (KS_EVF_WALL, the only events that do), turned into monotonic time with
 * the VM's time offset. The process counts (is armed) from the call to its
 * return; calls beyond ncalls are refused and counted, and so are calls
 * made before flame_arm says every trace pattern is in place.
 */
#include <stdlib.h>

#include "ks_flame.h"

/* Calls per function, for the table flame_write's Info carries (top > 0). */
static void count_call(ks_fcap *c, uint32_t mfa) {
  if (c->cp.o.top > 0 && mfa != c->cp.o.hide)
    ks_ffun_call(&c->cp.fc, mfa);
}

void ks_flame_init(ks_flame *fl) {
  memset(fl, 0, sizeof(*fl));
}

static void free_cap(ks_fcap *c) {
  if (c->obs.self != NULL)
    c->obs.free(c->obs.self);
  ks_callpath_free(&c->cp);
  memset(c, 0, sizeof(*c));
}

void ks_flame_free(ks_flame *fl) {
  ks_switch sw;
  ks_fobserve_fn record;
  int i;

  for (i = 0; i < KS_FLAME_MAX; i++)
    if (fl->cap[i].used)
      free_cap(&fl->cap[i]);
  free(fl->mask);
  sw = fl->sw;   /* the registrations stay */
  record = fl->record;
  memset(fl, 0, sizeof(*fl));
  fl->sw = sw;
  fl->record = record;
  ks_switch_set(&fl->sw, 0);
}

ks_fcap *ks_flame_find(ks_flame *fl, int64_t id) {
  int i;

  for (i = 0; i < KS_FLAME_MAX; i++)
    if (fl->cap[i].used && fl->cap[i].cp.id == id)
      return &fl->cap[i];
  return NULL;
}

int ks_flame_start(ks_flame *fl, int64_t id, const ks_fopts *o) {
  ks_fcap *c = NULL;
  int i;

  if (ks_flame_find(fl, id) != NULL)
    return KS_EINVAL;
  for (i = 0; i < KS_FLAME_MAX && c == NULL; i++)
    if (!fl->cap[i].used)
      c = &fl->cap[i];
  if (c == NULL)
    return KS_EFULL;
  memset(c, 0, sizeof(*c));
  if (ks_callpath_init(&c->cp, id, o) != KS_OK)
    return KS_ENOMEM;
  c->used = 1;
  c->last_pid = KS_NONE;
  ks_switch_set(&fl->sw, ++fl->active);
  return (int)(c - fl->cap);
}

/* Whether the capture's observer (if any) is still given what it is. */
static int watched(const ks_fcap *c) {
  return c->obs.self != NULL && !c->stopped;
}

static ks_fproc *proc_find(ks_fcap *c, uint32_t pid) {
  ks_fproc *p;

  if (pid == c->last_pid)
    return &c->cp.procs[c->last_proc];
  if ((p = ks_callpath_proc(&c->cp, pid)) == NULL)
    return NULL;
  c->last_pid = pid;
  c->last_proc = (uint32_t)(p - c->cp.procs);
  return p;
}

/* The capture's process for pid, added (not armed) when new; NULL at a cap. */
static ks_fproc *proc_add(ks_flame *fl, ks_fcap *c, uint32_t pid) {
  ks_fproc *p = ks_callpath_proc(&c->cp, pid);

  if (p != NULL)
    return p;
  if (c->cp.nprocs >= c->cp.o.max_procs) {
    c->cp.k.dropped_procs++;
    return NULL;
  }
  if (pid >= fl->mask_cap &&
      ks_grow(&fl->mask, &fl->mask_cap, pid, 1024, sizeof(*fl->mask)) != KS_OK)
    return NULL;
  c->last_pid = KS_NONE;   /* the processes may move */
  if ((p = ks_callpath_add_proc(&c->cp, pid)) != NULL)
    fl->mask[pid] |= 1u << (c - fl->cap);
  return p;
}

static void set_name(ks_fproc *p, const char *name, size_t len) {
  char *s = malloc(len + 1);

  if (s == NULL)
    return;
  memcpy(s, name, len);
  s[len] = 0;
  free(p->name);
  p->name = s;
  p->named = 1;
}

static char *dup_text(const char *s, size_t len) {
  char *d = malloc(len + 1);

  if (d != NULL) {
    memcpy(d, s, len);
    d[len] = 0;
  }
  return d;
}

void ks_flame_set_call(ks_fcap *c, uint32_t pid, const char *call, size_t len) {
  ks_fproc *p = ks_callpath_proc(&c->cp, pid);
  char *d;

  if (watched(c))
    c->obs.set_call(c->obs.self, pid, call, len);
  if (p == NULL || call == NULL || len == 0 || (d = dup_text(call, len)) == NULL)
    return;
  free(p->call);
  p->call = d;
}

int ks_flame_add_pid(ks_flame *fl, ks_fcap *c, uint32_t pid, const char *name, size_t name_len) {
  ks_fgraph g = ks_callpath_graph(&c->cp);
  int known = ks_callpath_proc(&c->cp, pid) != NULL;
  ks_fproc *p;

  if (watched(c))
    c->obs.add_pid(c->obs.self, pid, name, name_len);
  p = proc_add(fl, c, pid);
  if (p == NULL)
    return KS_EFULL;
  if (name != NULL && name_len > 0)
    set_name(p, name, name_len);
  if (known)
    return KS_OK;   /* names only: it is armed, done or dead as its events said */
  if (c->cp.o.trigger == KS_NONE && !c->stopped) {
    p->armed = 1;
    /* flame_apply's caller starts its stack at the function applied; a
     * flame_pid process may be anywhere in its stack. */
    p->bottom = c->cp.o.hide != KS_NONE;
    ks_fstack_update(&g, p);
  }
  return KS_OK;
}

void ks_flame_drop(ks_flame *fl, ks_fcap *c) {
  uint32_t bit = 1u << (c - fl->cap), k;

  for (k = 0; k < c->cp.nprocs; k++)
    if (c->cp.procs[k].pid < fl->mask_cap)
      fl->mask[c->cp.procs[k].pid] &= ~bit;
  fl->observed &= ~bit;
  free_cap(c);
  ks_switch_set(&fl->sw, --fl->active);
}

void ks_flame_pin_pids(const ks_flame *fl, uint8_t *pin, uint32_t n) {
  uint32_t c, k;

  for (c = 0; c < KS_FLAME_MAX; c++)
    for (k = 0; fl->cap[c].used && k < fl->cap[c].cp.nprocs; k++)
      if (fl->cap[c].cp.procs[k].pid < n)
        pin[fl->cap[c].cp.procs[k].pid] = 1;
}

void ks_flame_forget_pids(ks_flame *fl, const uint8_t *dead, uint32_t n) {
  uint32_t id, c;

  for (id = 0; id < n && id < fl->mask_cap; id++)
    if (dead[id])
      fl->mask[id] = 0;
  for (c = 0; c < KS_FLAME_MAX; c++) {
    fl->cap[c].last_pid = KS_NONE;
    if (fl->cap[c].obs.self != NULL)
      fl->cap[c].obs.forget_pids(fl->cap[c].obs.self, dead, n);
  }
}

void ks_flame_finish(ks_flame *fl, ks_fcap *c, int has_end, int64_t end_ts) {
  ks_fgraph g = ks_callpath_graph(&c->cp);
  uint32_t bit = 1u << (c - fl->cap), k;

  if (watched(c))
    c->obs.finish(c->obs.self, has_end, end_ts);
  fl->observed &= ~bit;
  for (k = 0; k < c->cp.nprocs; k++) {
    ks_fproc *p = &c->cp.procs[k];
    if (p->armed && !p->dead && has_end)
      ks_fstack_credit_end(&g, p, end_ts);
    if (p->fc != NULL)
      ks_ffun_leave_all(p->fc, p);   /* inclusive times of what is still open end here */
    p->armed = 0;
    p->cur = KS_NONE;
    if (p->pid < fl->mask_cap)
      fl->mask[p->pid] &= ~bit;
  }
  c->stopped = 1;
}

/* A meta trace event, from the ring (KS_EVF_META) or a port (wall-clock time). */
static int is_meta(const ks_event *ev) {
  return (ev->flags & (KS_EVF_META | KS_EVF_WALL)) != 0;
}

/* A meta event's time on the VM's monotonic clock, never back. */
static int64_t meta_ts(const ks_fcap *c, const ks_fproc *p, const ks_event *ev) {
  int64_t t = (ev->flags & KS_EVF_WALL) ? ev->ts - c->cp.o.time_offset : ev->ts;

  if (p->has_ts && t < p->last_ts)
    t = p->last_ts;
  return t;
}

static void trigger_event(ks_fcap *c, ks_fproc *p, const ks_event *ev) {
  ks_fgraph g = ks_callpath_graph(&c->cp);
  int64_t t;

  if (!(ev->flags & KS_EVF_TS))
    return;
  t = meta_ts(c, p, ev);
  if (ev->kind == KS_EV_CALL) {
    if (p->armed && p->trig_depth > 0) {
      p->trig_depth++;   /* a recursive trigger call: its local call event pushed it */
      return;
    }
    if (c->cp.o.hold) {
      c->cp.k.calls_early++;   /* the trace patterns were still being set up */
      return;
    }
    if (c->cp.k.calls_started >= c->cp.o.ncalls) {
      c->cp.k.calls_refused++;
      return;
    }
    c->cp.k.calls_started++;
    c->cp.k.events++;
    p->armed = 1;
    p->bottom = 1;
    p->out = p->gc = 0;
    p->trig_depth = 1;
    p->has_ts = 1;
    p->last_ts = t;
    ks_fstack_root(&g, p, ev->mfa, (ev->flags & KS_EVF_CALLER) ? ev->caller : KS_NONE);
    count_call(c, ev->mfa);
    ks_fstack_update(&g, p);
  } else if (ev->kind == KS_EV_RETURN_FROM || ev->kind == KS_EV_EXCEPTION_FROM) {
    if (!p->armed || p->trig_depth == 0 || --p->trig_depth > 0)
      return;
    c->cp.k.events++;
    ks_fstack_credit(&g, p, t);
    c->cp.k.calls_done++;
    p->armed = 0;
    ks_fstack_clear(p);
    ks_fstack_update(&g, p);
  }
}

static void register_name(ks_fproc *p, const ks_intern *in, const ks_event *ev) {
  ks_slice raw = ks_intern_term_get(in, ev->name);
  char buf[1024];
  ks_etf e;
  ks_atom a;
  int n;

  if (raw.p == NULL)
    return;
  ks_etf_init(&e, raw.p, raw.n);
  if (ks_etf_atom(&e, &a) != KS_OK || (n = ks_atom_utf8(&a, buf, sizeof(buf))) < 0)
    return;
  set_name(p, buf, (size_t)n);
}

/* What spawn and proc_lib run a process's initial function in: not its label. */
static int spawn_wrapper(const ks_intern *in, uint32_t mfa) {
  ks_mfa_view m;

  if (mfa == KS_NONE || ks_intern_mfa_get(in, mfa, &m) != KS_OK)
    return 1;
  return (strcmp(m.m, "erlang") == 0 && strcmp(m.f, "apply") == 0) ||
         (strcmp(m.m, "proc_lib") == 0 &&
          (strcmp(m.f, "init_p") == 0 || strcmp(m.f, "init_p_do_apply") == 0));
}

/* A run interval's length, by the kind of event that ends it (ks_fivl). */
static void count_interval(ks_fcap *c, const ks_fproc *p, const ks_event *ev) {
  uint64_t dt, b;
  int kind;

  if (!p->has_ts || p->cur == KS_NONE || p->out || (p->gc && c->cp.o.gc) || ev->ts < p->last_ts)
    return;
  kind = ev->kind == KS_EV_RETURN_TO ? KS_FIVL_RETURN : KS_FIVL_CALL;
  dt = (uint64_t)(ev->ts - p->last_ts);
  b = dt / KS_FIVL_BIN_NS;
  c->cp.ivl[kind].bin[b < KS_FIVL_BINS ? b : KS_FIVL_BINS - 1]++;
  c->cp.ivl[kind].n++;
  c->cp.ivl[kind].total += dt;
}

static void proc_event(ks_fcap *c, ks_fproc *p, const ks_intern *in, const ks_decoded *d) {
  ks_fgraph g = ks_callpath_graph(&c->cp);
  const ks_event *ev = &d->ev;

  if (is_meta(ev)) {
    if (c->cp.o.trigger != KS_NONE && ev->mfa == c->cp.o.trigger)
      trigger_event(c, p, ev);
    return;   /* the trigger's own events: never a frame of the stacks */
  }
  if (ev->kind == KS_EV_REGISTER && !p->named && ev->name != KS_NONE)
    register_name(p, in, ev);
  if (!p->armed || p->dead)
    return;
  if (ev->flags & KS_EVF_TS) {
    count_interval(c, p, ev);
    if (ev->kind == KS_EV_RETURN_TO)
      ks_fstack_credit_return(&g, p, ev->ts);
    else
      ks_fstack_credit(&g, p, ev->ts);
  }
  c->cp.k.events++;
  switch (ev->kind) {
  case KS_EV_CALL:
  case KS_EV_RETURN_TO:
  case KS_EV_IN:
  case KS_EV_IN_EXITING:
  case KS_EV_OUT:
  case KS_EV_OUT_EXITING:
    p->ran = 1;   /* no longer waiting for its first run */
    break;
  default:
    break;
  }
  switch (ev->kind) {
  case KS_EV_CALL:
    if (p->child && p->first_mfa == KS_NONE && ev->mfa != c->cp.o.hide &&
        !spawn_wrapper(in, ev->mfa))
      p->first_mfa = ev->mfa;
    if (c->cp.o.callers)
      ks_fstack_call(&g, p, ev->mfa, (ev->flags & KS_EVF_CALLER) ? ev->caller : KS_NONE);
    else
      ks_fstack_call_flow(&g, p, ev->mfa);
    count_call(c, ev->mfa);
    break;
  case KS_EV_RETURN_TO:
    if (ev->mfa != KS_NONE && ev->mfa == c->cp.o.hide) {
      p->armed = 0;   /* flame_apply's function returned to the wrapper: done */
      ks_fstack_clear(p);
      break;
    }
    if (c->cp.o.callers)
      ks_fstack_return_to(&g, p, ev->mfa);
    else
      ks_fstack_return_flow(&g, p, ev->mfa);
    break;
  case KS_EV_IN:
  case KS_EV_IN_EXITING:
    p->out = 0;
    if (p->st.n == 0)
      ks_fstack_infer(&g, p, ev->mfa);
    break;
  case KS_EV_OUT:
  case KS_EV_OUT_EXITING:
    p->out = 1;
    p->out_mfa = ev->mfa;
    break;
  case KS_EV_OUT_EXITED:
  case KS_EV_EXIT:
    p->dead = 1;
    ks_fstack_clear(p);
    break;
  case KS_EV_GC_MINOR_START:
  case KS_EV_GC_MAJOR_START:
    p->gc = 1;
    break;
  case KS_EV_GC_MINOR_END:
  case KS_EV_GC_MAJOR_END:
    p->gc = 0;
    break;
  case KS_EV_SPAWNED:
    if (ev->mfa != KS_NONE)
      p->spawn_mfa = ev->mfa;
    /* fall through */
  default:
    c->cp.k.events--;   /* links, sends, ...: not about stacks */
    if (!p->ran)
      ks_fstack_update(&g, p);   /* a child's first event (spawned): it waits from now */
    return;
  }
  ks_fstack_update(&g, p);
}

/* {kprof_flame, Id}: the payload of a trigger's meta call. */
static int payload_id(ks_slice s, int64_t *id) {
  ks_etf e;
  ks_atom a;
  uint32_t ar;

  ks_etf_init(&e, s.p, s.n);
  if (ks_etf_tuple(&e, &ar) != KS_OK || ar != 2 || ks_etf_atom(&e, &a) != KS_OK ||
      !ks_etf_atom_is(&a, "kprof_flame") || ks_etf_int64(&e, id) != KS_OK)
    return KS_EINVAL;
  return KS_OK;
}

static void join_trigger(ks_flame *fl, const ks_decoded *d) {
  int64_t id;
  ks_fcap *c;

  if (payload_id(d->payload, &id) != KS_OK || (c = ks_flame_find(fl, id)) == NULL ||
      c->stopped || c->cp.o.trigger == KS_NONE)
    return;
  if (proc_add(fl, c, d->ev.pid) == NULL)
    c->cp.k.calls_refused++;
}

static void join_child(ks_flame *fl, const ks_event *ev) {
  uint32_t m = ev->other < fl->mask_cap ? fl->mask[ev->other] : 0;
  ks_fproc *parent, *p;
  int i;

  while (m != 0) {
    ks_fcap *c;
    i = __builtin_ctz(m);
    m &= m - 1;
    c = &fl->cap[i];
    if (!c->cp.o.children || c->stopped || (parent = proc_find(c, ev->other)) == NULL ||
        !parent->armed || parent->dead)
      continue;
    if ((p = proc_add(fl, c, ev->pid)) != NULL && !p->armed) {
      ks_fgraph g = ks_callpath_graph(&c->cp);
      p->armed = 1;
      p->child = 1;   /* seen from its start: its first call is its initial call */
      p->bottom = 1;
      ks_fstack_update(&g, p);
    }
  }
}

/* The observers an event concerns get it first, as the capture will see it:
 * an event of its processes, a child of one spawned, its trigger's meta call. */
static void observe_event(ks_flame *fl, const ks_decoded *d) {
  const ks_event *ev = &d->ev;
  uint32_t m = fl->observed, bit, in_pid, in_parent;
  int64_t id;
  int i, trigger;

  in_pid = ev->pid < fl->mask_cap ? fl->mask[ev->pid] : 0;
  in_parent = ev->kind == KS_EV_SPAWNED && ev->other < fl->mask_cap ? fl->mask[ev->other] : 0;
  while (m != 0) {
    ks_fcap *c;
    i = __builtin_ctz(m);
    m &= m - 1;
    bit = 1u << i;
    c = &fl->cap[i];
    trigger = ev->kind == KS_EV_CALL && d->payload.p != NULL && is_meta(ev) &&
              c->cp.o.trigger != KS_NONE && payload_id(d->payload, &id) == KS_OK && id == c->cp.id;
    if (trigger || (in_pid & bit) || ((in_parent & bit) && c->cp.o.children))
      c->obs.event(c->obs.self, d, trigger);
  }
}

void ks_flame_event(ks_flame *fl, const ks_intern *in, const ks_decoded *d) {
  const ks_event *ev = &d->ev;
  uint32_t m;
  int i;

  if (ev->pid == KS_NONE || (ev->flags & KS_EVF_PORT))
    return;
  if (__builtin_expect(fl->observed != 0, 0))
    observe_event(fl, d);
  if (ev->kind == KS_EV_CALL && d->payload.p != NULL && is_meta(ev))
    join_trigger(fl, d);
  else if (ev->kind == KS_EV_SPAWNED && ev->other != KS_NONE)
    join_child(fl, ev);
  m = ev->pid < fl->mask_cap ? fl->mask[ev->pid] : 0;
  while (m != 0) {
    ks_fcap *c;
    ks_fproc *p;
    i = __builtin_ctz(m);
    m &= m - 1;
    c = &fl->cap[i];
    if ((p = proc_find(c, ev->pid)) != NULL)
      proc_event(c, p, in, d);
  }
}

/* The flame captures as one of the sink's consumers (port/core/ks_consumer.h). */
static void consumer_event(void *self, const ks_intern *in, const ks_decoded *d) {
  ks_flame_event(self, in, d);
}

static void consumer_pin(const void *self, uint8_t *pin, uint32_t n) {
  ks_flame_pin_pids(self, pin, n);
}

static void consumer_forget(void *self, const uint8_t *dead, uint32_t n) {
  ks_flame_forget_pids(self, dead, n);
}

static void consumer_free(void *self) {
  ks_flame_free(self);
}

void ks_flame_consumer(ks_flame *fl, ks_consumer *c) {
  *c = (ks_consumer){.name = "flame", .self = fl, .active = &fl->active, .sw = &fl->sw,
                     .event = consumer_event,
                     .pin_pids = consumer_pin, .forget_pids = consumer_forget,
                     .reset = NULL, .free = consumer_free};
}

void ks_flame_observe(ks_flame *fl, ks_fcap *c, const ks_fobserver *obs) {
  c->obs = *obs;
  fl->observed |= 1u << (c - fl->cap);
}

void ks_flame_arm(ks_fcap *c) {
  if (watched(c))
    c->obs.arm(c->obs.self);
  c->cp.o.hold = 0;
}

unsigned ks_flame_proc_state(const ks_fproc *p) {
  return (p->armed ? KS_FPROC_ARMED : 0) | (p->child ? KS_FPROC_CHILD : 0) |
         (p->bottom ? KS_FPROC_BOTTOM : 0) | (p->dead ? KS_FPROC_DEAD : 0) |
         (p->named ? KS_FPROC_NAMED : 0);
}

void ks_flame_restore_proc(ks_flame *fl, ks_fcap *c, uint32_t pid, unsigned state,
                           const char *name, size_t name_n, const char *call, size_t call_n) {
  ks_fgraph g = ks_callpath_graph(&c->cp);
  ks_fproc *p;

  if (c->stopped || ks_callpath_proc(&c->cp, pid) != NULL || (p = proc_add(fl, c, pid)) == NULL)
    return;
  p->armed = (state & KS_FPROC_ARMED) != 0;
  p->child = (state & KS_FPROC_CHILD) != 0;
  p->bottom = (state & KS_FPROC_BOTTOM) != 0;
  p->dead = (state & KS_FPROC_DEAD) != 0;
  if (name_n > 0)
    set_name(p, name, name_n);
  p->named = (state & KS_FPROC_NAMED) != 0;
  if (call_n > 0)
    p->call = dup_text(call, call_n);
  ks_fstack_update(&g, p);
}
