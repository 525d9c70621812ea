/* stacks.c: one process's call stack from call, return_to and scheduling events.
 *
 * Two rule sets (ks_stack.h). Without {caller} (the default), the flow
 * rules: every call a frame but direct recursion and short loops, and the
 * top always the function that runs. With {caller} (option callers, and
 * full trace), the stack is the BEAM's own, by the search rules of the stack
 * model: a frame per body call, a tail call takes the place of the
 * frame that made it, a caller found deeper pops the frames above it (left
 * without a return_to we could see), `return_to F` pops to the topmost frame
 * of F below the top. What is left to this file: a caller on no frame
 * (tracing started below it, or it is in a module that is not traced) and a
 * return_to a function on no frame are inferred as a frame (the new bottom
 * for a return_to); `return_to undefined` empties the stack; each frame's
 * node in the call-path tree (ks_fgraph: a capture's or a full-trace
 * aggregate's).
 *
 * With max_depth (full trace's aggregates), deeper frames share one
 * TRUNCATED node; more than max_stack frames are only counted, and their
 * time goes to a TOO_DEEP node above the deepest kept frame. Time between
 * two events goes to the stack as it was before the later event (p->cur):
 * the top frame's node, or a SLEEP node above it while scheduled out, and a
 * GC node while collecting; with no frame, a WAITING_TO_RUN node under the
 * process before it first ran, else nothing.
 *
 * With per-function counters (p->fc, the top table), each frame that starts
 * running a function opens it (ks_ffun_enter) and each that stops closes it
 * (the stack's leave hook, ks_stack.h), and time the process ran goes to the
 * function it runs (p->run_mfa: the last call or return_to, exact even past
 * the stack cap).
 */
#include <stdlib.h>

#include "ks_callpath.h"

/* How far down a call looks for its caller before calling it unknown. */
#define CALLER_SEARCH 256

static ks_fentry *entry_at(const ks_fproc *p, uint32_t i) {
  return (ks_fentry *)ks_stack_at(&p->st, i);
}

static uint32_t parent_node(const ks_fproc *p, uint32_t i) {
  return i == 0 ? p->root : entry_at(p, i - 1)->node;
}

/* The child of the frame below index i (or of the process's root) for
 * `frame': that frame's hint, else the tree's table (and the hint is set). */
static uint32_t child_below(const ks_fgraph *g, ks_fproc *p, uint32_t i, uint32_t frame) {
  ks_fentry *below;

  if (i == 0)
    return ks_ftree_child(g->tree, p->root, frame);
  below = entry_at(p, i - 1);
  if (below->hint_node != KS_NONE && below->hint_frame == frame)
    return below->hint_node;
  below->hint_frame = frame;
  return below->hint_node = ks_ftree_child(g->tree, below->node, frame);
}

static void leave_hook(void *ctx, uint32_t mfa) {
  ks_fproc *p = ctx;

  ks_ffun_leave(p->fc, p, mfa);
}

/* The stack's leave hook for p (p moves when its capture's process array grows). */
static ks_stack *stack_of(ks_fproc *p) {
  p->st.leave = p->fc != NULL ? leave_hook : NULL;
  p->st.leave_ctx = p;
  return &p->st;
}

/* The node of a frame at index i (depth i + 1). */
static uint32_t node_at(const ks_fgraph *g, ks_fproc *p, uint32_t i, uint32_t mfa) {
  if (g->o->max_depth > 0 && i >= g->o->max_depth) {
    g->k->depth_capped++;
    if (i > g->o->max_depth)
      return parent_node(p, i);   /* already the TRUNCATED node */
    return child_below(g, p, i, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_TRUNCATED));
  }
  return child_below(g, p, i, KS_FR(KS_FR_MFA, mfa));
}

/* The top frame is new (pushed) or runs another function (a tail call): its node. */
static void top_changed(const ks_fgraph *g, ks_fproc *p, int how) {
  uint32_t i = p->st.n - 1;
  ks_fentry *e;

  if (how == KS_SC_PUSH || how == KS_SC_TAIL) {
    e = entry_at(p, i);
    e->node = node_at(g, p, i, e->f.mfa);
    e->hint_node = KS_NONE;
    /* The node's cache line is the next credit's anyway (p->cur). */
    g->tree->v[e->node].calls += g->tree->v[e->node].calls != UINT32_MAX;
    if (p->fc != NULL)
      ks_ffun_enter(p->fc, p, e->f.mfa);
  } else if (how == KS_SC_OVER) {
    g->k->stack_overflow++;
  }
}

static void push(const ks_fgraph *g, ks_fproc *p, uint32_t mfa, uint32_t base) {
  top_changed(g, p, ks_stack_push(&p->st, mfa, base) != NULL ? KS_SC_PUSH : KS_SC_OVER);
}

void ks_fstack_init(ks_fproc *p, uint32_t max_stack) {
  ks_stack_init(&p->st, sizeof(ks_fentry), max_stack);
}

void ks_fstack_clear(ks_fproc *p) {
  if (p->fc != NULL)
    ks_ffun_leave_all(p->fc, p);
  ks_stack_clear(&p->st);
  p->run_mfa = KS_NONE;
}

void ks_fstack_infer(const ks_fgraph *g, ks_fproc *p, uint32_t mfa) {
  if (mfa != KS_NONE && mfa != g->o->hide) {
    push(g, p, mfa, KS_NONE);
    p->run_mfa = mfa;
  }
}

/* A trigger call's frame stays at the bottom until its meta return_from:
 * its {return_trace} keeps it on the BEAM stack even when it tail-calls. */
void ks_fstack_root(const ks_fgraph *g, ks_fproc *p, uint32_t mfa, uint32_t base) {
  ks_fstack_clear(p);
  push(g, p, mfa, base);
  p->st.pinned = p->st.n == 1;
  p->run_mfa = mfa;
}

/* A call's frame went past the budget: counted. */
static void count_over(const ks_fgraph *g, const ks_fproc *p) {
  if (p->st.over == 0 && p->st.n > 0 && ks_ftree_is_over(g->tree, entry_at(p, p->st.n - 1)->node))
    g->k->over_budget_calls++;
}

void ks_fstack_call(const ks_fgraph *g, ks_fproc *p, uint32_t mfa, uint32_t caller) {
  int how = ks_stack_call_search(stack_of(p), mfa, caller, CALLER_SEARCH, &g->k->lost_frames);

  p->run_mfa = mfa;
  if (how == KS_SC_UNKNOWN) {
    g->k->unknown_callers++;
    ks_fstack_infer(g, p, caller);
    push(g, p, mfa, caller);
  } else {
    top_changed(g, p, how);
  }
  count_over(g, p);
}

void ks_fstack_return_to(const ks_fgraph *g, ks_fproc *p, uint32_t to) {
  if (ks_stack_return_mfa(stack_of(p), to, &g->k->lost_frames) == KS_SR_GONE)
    ks_fstack_infer(g, p, to);
  p->run_mfa = to;
}

void ks_fstack_call_flow(const ks_fgraph *g, ks_fproc *p, uint32_t mfa) {
  const ks_sframe *top = ks_stack_top(&p->st);
  int how;

  /* A call the last chain of this pair showed to be a tail call (not out of
   * a pinned trigger frame, which stays). */
  uint32_t was = p->st.n, from, k;

  if (g->tails != NULL && top != NULL && p->st.over == 0 && top->mfa != mfa &&
      !(p->st.pinned && p->st.n == 1) &&
      ks_ftails_get(g->tails, top->mfa, mfa) == KS_FTAIL_TAIL) {
    how = ks_stack_tail_flow(stack_of(p), mfa);
  } else {
    how = ks_stack_call_flow(stack_of(p), mfa, g->o->fold_depth, &from);
    /* A loop came round: its calls are taken for tail calls from now on (a
     * pair seen as a body call stays one). */
    if (how == KS_SC_LOOP && from != KS_NONE && g->tails != NULL) {
      for (k = from + 1; k < was; k++)
        ks_ftails_set(g->tails, entry_at(p, k - 1)->f.mfa, entry_at(p, k)->f.mfa, KS_FTAIL_TAIL);
      ks_ftails_set(g->tails, entry_at(p, was - 1)->f.mfa, mfa, KS_FTAIL_TAIL);
    }
  }
  p->run_mfa = mfa;
  if (how == KS_SC_PUSH || how == KS_SC_TAIL || how == KS_SC_OVER)
    top_changed(g, p, how);
  count_over(g, p);
}

/* The chain a return_to popped, frames [n, was) (still readable above the
 * stack): the first a body call out of frame n - 1, the others tail calls. */
static void learn(const ks_fgraph *g, const ks_fproc *p, uint32_t was) {
  uint32_t n = p->st.n, k;

  if (n == 0 || was <= n || was > p->st.cap)
    return;
  ks_ftails_set(g->tails, entry_at(p, n - 1)->f.mfa, entry_at(p, n)->f.mfa, KS_FTAIL_BODY);
  for (k = n + 1; k < was; k++)
    ks_ftails_set(g->tails, entry_at(p, k - 1)->f.mfa, entry_at(p, k)->f.mfa, KS_FTAIL_TAIL);
}

void ks_fstack_return_flow(const ks_fgraph *g, ks_fproc *p, uint32_t to) {
  uint32_t was = p->st.n;
  int how = ks_stack_return_flow(stack_of(p), to, p->bottom);

  if (how == KS_SR_GONE)
    ks_fstack_infer(g, p, to);
  else if (how == KS_SR_REPLACED)
    top_changed(g, p, KS_SC_TAIL);
  else if (how == KS_SR_TOP && g->tails != NULL)
    learn(g, p, was);
  p->run_mfa = to;
}

/* [last_ts, ts) to the current node, and to the function running's self
 * time; `event' (KS_FEV_*): what ended the interval (it is counted with the
 * time: the correction for tracing's cost takes its cost off at the write,
 * correct.c). */
static void credit(const ks_fgraph *g, ks_fproc *p, int64_t ts, int event) {
  ks_fnode *nd;
  uint64_t dt;

  if (!p->has_ts) {
    p->has_ts = 1;
    p->last_ts = ts;
    return;
  }
  if (ts < p->last_ts)
    ts = p->last_ts;   /* never back: an interval of 0 */
  dt = (uint64_t)(ts - p->last_ts);
  p->last_ts = ts;
  if (p->cur == KS_NONE)
    return;
  nd = &g->tree->v[p->cur];
  nd->self += dt;
  if (event != KS_FEV_NONE && nd->n != UINT32_MAX) {
    nd->n++;
    nd->nr += event == KS_FEV_RETURN;
  }
  p->clock += dt;
  p->events += event != KS_FEV_NONE;
  p->returns += event == KS_FEV_RETURN;
  if (p->fc != NULL && !p->out && !(p->gc && g->o->gc) && p->run_mfa != KS_NONE)
    ks_ffun_self(p->fc, p->run_mfa, dt, event);
}

void ks_fstack_credit(const ks_fgraph *g, ks_fproc *p, int64_t ts) {
  credit(g, p, ts, KS_FEV_OTHER);
}

void ks_fstack_credit_return(const ks_fgraph *g, ks_fproc *p, int64_t ts) {
  credit(g, p, ts, KS_FEV_RETURN);
}

void ks_fstack_credit_end(const ks_fgraph *g, ks_fproc *p, int64_t ts) {
  credit(g, p, ts, KS_FEV_NONE);
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
  if (p->st.over > 0)   /* frames past the stack cap: counted, their time here */
    node = ks_ftree_child(g->tree, node, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_DEEP));
  if (p->out) {
    if (!g->o->sleep) {
      p->cur = KS_NONE;
      return;
    }
    /* Scheduled out in a function the stack does not show (an untraced one). */
    if (p->out_mfa != KS_NONE && p->out_mfa != g->o->hide &&
        (p->st.n == 0 || entry_at(p, p->st.n - 1)->f.mfa != p->out_mfa) && p->st.over == 0 &&
        (g->o->max_depth == 0 || p->st.n < g->o->max_depth))
      node = ks_ftree_child(g->tree, node, KS_FR(KS_FR_MFA, p->out_mfa));
    node = ks_ftree_child(g->tree, node, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_SLEEP));
  }
  if (p->gc && g->o->gc)
    node = ks_ftree_child(g->tree, node, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_GC));
  p->cur = node;
}
