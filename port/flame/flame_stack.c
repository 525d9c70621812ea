/* flame_stack.c: one process's call stack from call, return_to and scheduling events.
 *
 * The stack is the BEAM's own, by the search rules of the stack model
 * (ks_stack.h): a frame per body call, a tail call takes the place of the
 * frame that made it, a caller found deeper pops the frames above it (left
 * without a return_to we could see), `return_to F` pops to the topmost frame
 * of F below the top. What is left to this file: a caller on no frame
 * (tracing started below it, or it is in a module that is not traced) and a
 * return_to a function on no frame are inferred as a frame (the new bottom
 * for a return_to); `return_to undefined` empties the stack; each frame's
 * node in the call-path tree (ks_fgraph: a capture's or a full-trace
 * aggregate's).
 *
 * Frames deeper than max_depth share one TRUNCATED node; more than max_stack
 * frames are only counted. Time between two events goes to the stack as it
 * was before the later event (p->cur): the top frame's node, or a SLEEP node
 * above it while scheduled out, and a GC node while collecting; with no frame,
 * a WAITING_TO_RUN node under the process before it first ran, else nothing.
 */
#include <stdlib.h>

#include "ks_flame.h"

/* How far down a call looks for its caller before calling it unknown. */
#define CALLER_SEARCH 256

static ks_fentry *entry_at(const ks_fproc *p, uint32_t i) {
  return (ks_fentry *)ks_stack_at(&p->st, i);
}

static uint32_t parent_node(const ks_fproc *p, uint32_t i) {
  return i == 0 ? p->root : entry_at(p, i - 1)->node;
}

/* The node of a frame at index i (depth i + 1) whose parent node is `parent`. */
static uint32_t node_at(const ks_fgraph *g, uint32_t parent, uint32_t i, uint32_t mfa) {
  if (i >= g->o->max_depth) {
    g->k->depth_capped++;
    if (i > g->o->max_depth)
      return parent;   /* already the TRUNCATED node */
    return ks_ftree_child(g->tree, parent, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_TRUNCATED));
  }
  return ks_ftree_child(g->tree, parent, KS_FR(KS_FR_MFA, mfa));
}

/* The top frame is new (pushed) or runs another function (a tail call): its node. */
static void top_changed(const ks_fgraph *g, ks_fproc *p, int how) {
  uint32_t i = p->st.n - 1;

  if (how == KS_SC_PUSH || how == KS_SC_TAIL)
    entry_at(p, i)->node = node_at(g, parent_node(p, i), i, entry_at(p, i)->f.mfa);
  else if (how == KS_SC_OVER)
    g->k->stack_overflow++;
}

static void push(const ks_fgraph *g, ks_fproc *p, uint32_t mfa, uint32_t base) {
  top_changed(g, p, ks_stack_push(&p->st, mfa, base) != NULL ? KS_SC_PUSH : KS_SC_OVER);
}

void ks_fstack_init(ks_fproc *p, uint32_t max_stack) {
  ks_stack_init(&p->st, sizeof(ks_fentry), max_stack);
}

void ks_fstack_clear(ks_fproc *p) {
  ks_stack_clear(&p->st);
}

void ks_fstack_infer(const ks_fgraph *g, ks_fproc *p, uint32_t mfa) {
  if (mfa != KS_NONE && mfa != g->o->hide)
    push(g, p, mfa, KS_NONE);
}

/* A trigger call's frame stays at the bottom until its meta return_from:
 * its {return_trace} keeps it on the BEAM stack even when it tail-calls. */
void ks_fstack_root(const ks_fgraph *g, ks_fproc *p, uint32_t mfa, uint32_t base) {
  ks_fstack_clear(p);
  push(g, p, mfa, base);
  p->st.pinned = p->st.n == 1;
}

void ks_fstack_call(const ks_fgraph *g, ks_fproc *p, uint32_t mfa, uint32_t caller) {
  int how = ks_stack_call_search(&p->st, mfa, caller, CALLER_SEARCH, &g->k->lost_frames);

  if (how == KS_SC_UNKNOWN) {
    g->k->unknown_callers++;
    ks_fstack_infer(g, p, caller);
    push(g, p, mfa, caller);
    return;
  }
  top_changed(g, p, how);
}

void ks_fstack_return_to(const ks_fgraph *g, ks_fproc *p, uint32_t to) {
  if (ks_stack_return_mfa(&p->st, to, &g->k->lost_frames) == KS_SR_GONE)
    ks_fstack_infer(g, p, to);
}

void ks_fstack_credit(const ks_fgraph *g, ks_fproc *p, int64_t ts) {
  if (!p->has_ts) {
    p->has_ts = 1;
    p->last_ts = ts;
    return;
  }
  if (ts <= p->last_ts)
    return;
  if (p->cur != KS_NONE)
    g->tree->v[p->cur].self += (uint64_t)(ts - p->last_ts);
  p->last_ts = ts;
}

void ks_fstack_update(const ks_fgraph *g, ks_fproc *p) {
  uint32_t node;

  if (!p->armed || p->dead) {
    p->cur = KS_NONE;
    return;
  }
  if (p->st.n == 0 && !p->out) {
    /* No frame and not scheduled out. Before its first run (a child between
     * spawn and its first `in`) it waits in the run queue: WAITING_TO_RUN,
     * time like SLEEP's (dropped with sleep => false). After that, it runs
     * code that is no frame (flame_apply's hidden wrapper, its exit): not
     * counted. So a process's own node never has time, and every format
     * shows all of a process's time as frames. (Before its first event,
     * nothing is credited: no node is made for it yet.) */
    if (p->ran || !g->o->sleep || !p->has_ts) {
      p->cur = KS_NONE;
      return;
    }
    p->cur = ks_ftree_child(g->tree, p->root, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_WAIT));
    return;
  }
  node = p->st.n > 0 ? entry_at(p, p->st.n - 1)->node : p->root;
  if (p->out) {
    if (!g->o->sleep) {
      p->cur = KS_NONE;
      return;
    }
    /* Scheduled out in a function the stack does not show (an untraced one). */
    if (p->out_mfa != KS_NONE && p->out_mfa != g->o->hide &&
        (p->st.n == 0 || entry_at(p, p->st.n - 1)->f.mfa != p->out_mfa) &&
        p->st.n < g->o->max_depth)
      node = ks_ftree_child(g->tree, node, KS_FR(KS_FR_MFA, p->out_mfa));
    node = ks_ftree_child(g->tree, node, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_SLEEP));
  }
  if (p->gc && g->o->gc)
    node = ks_ftree_child(g->tree, node, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_GC));
  p->cur = node;
}
