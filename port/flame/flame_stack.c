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

static uint32_t parent_node(const ks_fproc *p, uint32_t i) {
  return i == 0 ? p->root : p->st[i - 1].node;
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

static void push(ks_fcap *c, ks_fproc *p, uint32_t mfa, uint32_t base) {
  ks_fentry *e;

  if (p->n >= c->o.max_stack || p->over > 0) {
    p->over++;
    c->k.stack_overflow++;
    return;
  }
  if (p->n == p->cap) {
    uint32_t cap = p->cap ? p->cap * 2 : 16;
    ks_fentry *st;
    if (cap > c->o.max_stack)
      cap = c->o.max_stack;
    st = realloc(p->st, (size_t)cap * sizeof(*st));
    if (st == NULL) {
      p->over++;
      c->k.stack_overflow++;
      return;
    }
    p->st = st;
    p->cap = cap;
  }
  e = &p->st[p->n];
  e->mfa = mfa;
  e->base = base;
  e->node = node_at(c, parent_node(p, p->n), p->n, mfa);
  p->n++;
}

/* The top frame becomes mfa (a tail call); its base stays. */
static void replace_top(ks_fcap *c, ks_fproc *p, uint32_t mfa) {
  ks_fentry *e = &p->st[p->n - 1];

  if (e->mfa == mfa)
    return;
  e->mfa = mfa;
  e->node = node_at(c, parent_node(p, p->n - 1), p->n - 1, mfa);
}

/* Frames above n are gone without a return_to we saw. */
static void pop_to(ks_fcap *c, ks_fproc *p, uint32_t n) {
  if (n < p->n) {
    c->k.lost_frames += p->n - n;
    p->n = n;
  }
}

void ks_fstack_clear(ks_fproc *p) {
  p->n = 0;
  p->over = 0;
  p->pinned = 0;
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
  p->pinned = p->n == 1;
}

void ks_fstack_call(ks_fcap *c, ks_fproc *p, uint32_t mfa, uint32_t caller) {
  uint32_t j, stop;

  if (p->over > 0) {
    /* Past max_stack the frames are only counted. */
    p->over++;
    c->k.stack_overflow++;
    return;
  }
  if (caller == KS_NONE) {
    if (p->pinned) {
      pop_to(c, p, 1);
    } else {
      ks_fstack_clear(p);
    }
    push(c, p, mfa, KS_NONE);
    return;
  }
  stop = p->n > CALLER_SEARCH ? p->n - CALLER_SEARCH : 0;
  for (j = p->n; j-- > stop;) {
    if (p->st[j].mfa == caller) {          /* a body call from frame j */
      pop_to(c, p, j + 1);
      push(c, p, mfa, caller);
      return;
    }
    if (p->st[j].base == caller) {         /* a tail call out of frame j */
      pop_to(c, p, j + 1);
      if (j == 0 && p->pinned)
        push(c, p, mfa, caller);
      else
        replace_top(c, p, mfa);
      return;
    }
  }
  c->k.unknown_callers++;
  ks_fstack_infer(c, p, caller);
  push(c, p, mfa, caller);
}

void ks_fstack_return_to(ks_fcap *c, ks_fproc *p, uint32_t to) {
  uint32_t j;

  if (p->over > 0) {
    p->over--;
    return;
  }
  if (to == KS_NONE) {
    ks_fstack_clear(p);
    return;
  }
  for (j = p->n - (p->n > 0); j-- > 0;)
    if (p->st[j].mfa == to) {
      c->k.lost_frames += p->n - j - 2;
      p->n = j + 1;
      return;
    }
  if (p->n > 0 && p->st[p->n - 1].mfa == to)
    return;   /* back in the top frame from a callee we did not see */
  if (p->pinned && p->st[0].base == to) {
    if (p->n > 1)
      c->k.lost_frames += p->n - 2;
    p->n = 1;   /* out of what the trigger tail-called, into its return_trace frame */
    return;
  }
  if (p->n > 1)
    c->k.lost_frames += p->n - 1;
  ks_fstack_clear(p);
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
  node = p->n > 0 ? p->st[p->n - 1].node : p->root;
  if (p->out) {
    if (!c->o.sleep) {
      p->cur = KS_NONE;
      return;
    }
    /* Scheduled out in a function the stack does not show (an untraced one). */
    if (p->out_mfa != KS_NONE && p->out_mfa != c->o.hide &&
        (p->n == 0 || p->st[p->n - 1].mfa != p->out_mfa) && p->n < c->o.max_depth)
      node = ks_ftree_child(&c->tree, node, KS_FR(KS_FR_MFA, p->out_mfa));
    node = ks_ftree_child(&c->tree, node, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_SLEEP));
  }
  if (p->gc && c->o.gc)
    node = ks_ftree_child(&c->tree, node, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_GC));
  p->cur = node;
}
