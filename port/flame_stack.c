/* flame_stack.c: one process's call stack from call, return_to and scheduling events.
 *
 * The stack is the BEAM's own: a frame per body call, and a tail call takes
 * the place of the frame that made it. A call's {caller} (from the match
 * spec) is the function the new frame returns to, which tells them apart:
 *   - caller is the top frame: a body call, push;
 *   - caller is what the top frame returns to: a tail call, replace the top;
 *   - caller is deeper: frames above it were left without a return_to we
 *     could see (tail calls out of them, a caught exception): pop to it;
 *   - caller is nowhere: tracing started below it, or it is in a module
 *     that is not traced: it is inferred as a frame, then the call pushed;
 *   - caller undefined: the call returns to nothing, it is the bottom frame.
 * `return_to F` pops to the topmost frame of F below the top (an exception
 * may unwind several at once); F nowhere: the frames we had are gone and
 * F is the new bottom. `return_to undefined` empties the stack.
 *
 * Frames deeper than max_depth share one TRUNCATED node; more than max_stack
 * frames are only counted. Time between two events goes to the stack as it
 * was before the later event (p->cur): the top frame's node, or a SLEEP node
 * above it while scheduled out, and a GC node while collecting.
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
static uint32_t node_at(ks_fcap *c, uint32_t parent, uint32_t i, uint32_t mfa) {
  if (i >= c->o.max_depth) {
    c->k.depth_capped++;
    if (i > c->o.max_depth)
      return parent;   /* already the TRUNCATED node */
    return ks_ftree_child(&c->tree, parent, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_TRUNCATED));
  }
  return ks_ftree_child(&c->tree, parent, KS_FR(KS_FR_MFA, mfa));
}

/* The top frame is new (pushed) or runs another function (a tail call): its node. */
static void top_changed(ks_fcap *c, ks_fproc *p, int how) {
  uint32_t i = p->st.n - 1;

  if (how == KS_SC_PUSH || how == KS_SC_TAIL)
    entry_at(p, i)->node = node_at(c, parent_node(p, i), i, entry_at(p, i)->f.mfa);
  else if (how == KS_SC_OVER)
    c->k.stack_overflow++;
}

static void push(ks_fcap *c, ks_fproc *p, uint32_t mfa, uint32_t base) {
  top_changed(c, p, ks_stack_push(&p->st, mfa, base) != NULL ? KS_SC_PUSH : KS_SC_OVER);
}

void ks_fstack_init(ks_fproc *p, uint32_t max_stack) {
  ks_stack_init(&p->st, sizeof(ks_fentry), max_stack);
}

void ks_fstack_clear(ks_fproc *p) {
  ks_stack_clear(&p->st);
}

void ks_fstack_infer(ks_fcap *c, ks_fproc *p, uint32_t mfa) {
  if (mfa != KS_NONE && mfa != c->o.hide)
    push(c, p, mfa, KS_NONE);
}

/* A trigger call's frame stays at the bottom until its meta return_from:
 * its {return_trace} keeps it on the BEAM stack even when it tail-calls. */
void ks_fstack_root(ks_fcap *c, ks_fproc *p, uint32_t mfa, uint32_t base) {
  ks_fstack_clear(p);
  push(c, p, mfa, base);
  p->st.pinned = p->st.n == 1;
}

void ks_fstack_call(ks_fcap *c, ks_fproc *p, uint32_t mfa, uint32_t caller) {
  int how = ks_stack_call_search(&p->st, mfa, caller, CALLER_SEARCH, &c->k.lost_frames);

  if (how == KS_SC_UNKNOWN) {
    c->k.unknown_callers++;
    ks_fstack_infer(c, p, caller);
    push(c, p, mfa, caller);
    return;
  }
  top_changed(c, p, how);
}

void ks_fstack_return_to(ks_fcap *c, ks_fproc *p, uint32_t to) {
  if (ks_stack_return_mfa(&p->st, to, &c->k.lost_frames) == KS_SR_GONE)
    ks_fstack_infer(c, p, to);
}

void ks_fstack_credit(ks_fcap *c, ks_fproc *p, int64_t ts) {
  if (!p->has_ts) {
    p->has_ts = 1;
    p->last_ts = ts;
    return;
  }
  if (ts <= p->last_ts)
    return;
  if (p->cur != KS_NONE)
    c->tree.v[p->cur].self += (uint64_t)(ts - p->last_ts);
  p->last_ts = ts;
}

void ks_fstack_update(ks_fcap *c, ks_fproc *p) {
  uint32_t node;

  if (!p->armed || p->dead) {
    p->cur = KS_NONE;
    return;
  }
  node = p->st.n > 0 ? entry_at(p, p->st.n - 1)->node : p->root;
  if (p->out) {
    if (!c->o.sleep) {
      p->cur = KS_NONE;
      return;
    }
    /* Scheduled out in a function the stack does not show (an untraced one). */
    if (p->out_mfa != KS_NONE && p->out_mfa != c->o.hide &&
        (p->st.n == 0 || entry_at(p, p->st.n - 1)->f.mfa != p->out_mfa) &&
        p->st.n < c->o.max_depth)
      node = ks_ftree_child(&c->tree, node, KS_FR(KS_FR_MFA, p->out_mfa));
    node = ks_ftree_child(&c->tree, node, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_SLEEP));
  }
  if (p->gc && c->o.gc)
    node = ks_ftree_child(&c->tree, node, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_GC));
  p->cur = node;
}
