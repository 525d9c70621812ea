/* ks_callpath.h: the call-path model: processes' stacks built into a tree of
 * call paths, with what was counted building it (doc/internals-flame.md says what
 * they compute).
 *
 * Time between two events of a process is credited to the stack it had
 * before the later one. Stacks are not stored: each stack is a node of a
 * call-path tree (node = parent node + frame, interned in a hash table) and
 * only the node's self time grows. The tree has a budget in bytes: paths
 * that do not fit go to an OVER_BUDGET node under their deepest kept frame.
 * The top table comes from per-function counters (counts.c) that no budget
 * touches. A graph (ks_callpath) is what the correction, the view, the names
 * and the writers (port/write/) read; the flame captures (port/flame/) and
 * the tiers' full trace (port/tiers/tier_full.c) build one.
 */
#ifndef KS_CALLPATH_H
#define KS_CALLPATH_H

#include "core/ks_decode.h"
#include "core/ks_hmap.h"
#include "stack/ks_stack.h"

/* Frame ids in the tree: an MFA id, a process (its pid id), a pseudo frame, or
 * a group of processes (an index into the written view's groups, see group). */
enum { KS_FR_MFA = 0, KS_FR_PROC = 1, KS_FR_PSEUDO = 2, KS_FR_GROUP = 3 };
/* How processes are grouped at the root of the written graph (option group). */
enum { KS_GROUP_PID = 0, KS_GROUP_NAME = 1, KS_GROUP_CALL = 2, KS_GROUP_ALL = 3 };
/* TRUNCATED: past a depth cap (full trace's aggregates); OVER_BUDGET: paths past
 * the tree's byte budget; TOO_DEEP: frames past a process's stack cap. */
enum {
  KS_PSEUDO_SLEEP = 0,
  KS_PSEUDO_GC = 1,
  KS_PSEUDO_TRUNCATED = 2,
  KS_PSEUDO_WAIT = 3,
  KS_PSEUDO_OVER = 4,
  KS_PSEUDO_DEEP = 5
};
#define KS_FR(kind, v) ((uint32_t)(kind) << 30 | (uint32_t)(v))
#define KS_FR_KIND(f) ((f) >> 30)
#define KS_FR_VAL(f) ((f) & 0x3fffffffu)

/* The options of a graph: the flame rows of include/ks_options.h
 * (KS_FIELD(flame, ...)), as flame_start gives them. What the model reads
 * (the stack rules, the tree's limits, the correction, the view, the names)
 * and what only its capture reads (trigger, ncalls, hold, time_offset,
 * max_procs, children) or its capture's recording (record_*) are one struct:
 * one decode of the command's options. Defaults: ks_fopts_default (graph.c). */
typedef struct ks_fopts {
  int sleep, gc, children;
  uint32_t max_depth;          /* deeper frames go to one TRUNCATED frame; 0: none (full
                                * trace's aggregates have one, flame captures none) */
  uint32_t max_nodes;          /* nodes of the tree (full trace's aggregates) */
  uint64_t max_bytes;          /* the tree's budget in bytes (flame captures) */
  uint32_t max_stack, max_procs;
  uint32_t trigger;            /* flame_capture's MFA id; KS_NONE otherwise */
  uint32_t ncalls;             /* trigger calls to capture */
  int hold;                    /* trigger calls are not taken until flame_arm */
  uint32_t hide;               /* the apply wrapper: never a frame; returning to it ends */
  int64_t time_offset;         /* erlang:time_offset(nanosecond): meta (wall) ts -> monotonic */
  uint32_t perf_period_us;     /* 0: chosen from the total time */
  uint32_t top;                /* rows of the per-function table in flame_write's Info; 0: none */
  int top_by;                  /* its order: KS_FMFA_BY_SELF, _INCL or _CALLS (option top_by) */
  int elixir_names;            /* frames named as Elixir does (names => elixir) */
  int group;                   /* KS_GROUP_*: processes merged at the root when written */
  int fold_recursion;          /* f;f;f written as one f (direct recursion) */
  int callers;                 /* calls carry {caller}: the search rules (BEAM stacks);
                                * else the flow rules (ks_stack.h) */
  uint32_t fold_depth;         /* flow rules: loops past this depth fold (KS_FLAME_FOLD_DEPTH) */
  int learn;                   /* flow rules: learn tail calls from return_tos (tails.c) */
  uint32_t correct_ns;         /* tracing's cost per event, taken off at the write (0: none) */
  uint64_t max_record_bytes;   /* the recording's bound per file (port/record/ks_record.h) */
  uint32_t record_rotate;      /* files kept past the bound; 0: the recording stops */
  uint32_t record_level;       /* zstd's compression level of its frames */
  int record_at;               /* flame_start's decode: where the record path is in the
                                * command (port/flame/flame_control.c), -1: none */
  uint32_t sample_hz;          /* a sampled profile's rate (port/sample/); 0: traced */
} ks_fopts;

/* The depth past which the flow rules fold loops and recursion (doc/internals-flame.md
 * says why this one). */
#define KS_FLAME_FOLD_DEPTH 128

/* graph.c: the defaults, from the table's flame rows; what no option sets
 * (no depth cap, no node cap, no trigger, no hidden wrapper, ...) besides. */
void ks_fopts_default(ks_fopts *o);

/* A call path. Node 0 is the root of every process; children are in a list. */
typedef struct ks_fnode {
  uint32_t parent, frame;
  uint32_t child, sibling;     /* first child, next sibling (KS_NONE ends) */
  uint64_t self;               /* ns credited while this was the stack */
  uint32_t n;                  /* of them, intervals an event ended (saturates): the
                                * correction for tracing's cost takes n of its cost off */
  uint32_t nr;                 /* of n, those a return_to ended (correct.c) */
  uint32_t calls;              /* frames the stack rules entered on this path (saturates;
                                * callgrind's calls=); with nr, the node is 40 bytes */
} ks_fnode;

/*
 * Two limits, one per user:
 *   - max nodes (full trace's aggregates): at the cap a would-be child is
 *     counted in `dropped` and its time goes to its parent;
 *   - budget, bytes of the node array and the hash slots (flame captures):
 *     a path that does not fit in budget less a reserve (1/16) goes to the
 *     OVER_BUDGET child of its parent (counted in over_paths), made from the
 *     reserve; frames past an OVER_BUDGET node stay in it (SLEEP and GC
 *     still go above it); when even the reserve is spent, to
 *     `spill', a root-level OVER_BUDGET node made at init. Nothing is freed.
 */
/* A slot of the tree's table: the key beside its node (parent KS_NONE: empty). */
typedef struct ks_fslot {
  uint32_t parent, frame, node;
} ks_fslot;

typedef struct ks_ftree {
  ks_fnode *v;
  uint32_t n, cap, max;
  ks_hmap slots;               /* (parent, frame) -> node: ks_fslot */
  int ordered;                 /* child lists put in first-seen order */
  uint64_t dropped;            /* nodes not created at the cap (time went to the parent) */
  uint64_t budget;             /* bytes of v and slots at most (UINT64_MAX: none) */
  uint64_t bytes, peak;        /* bytes of v and slots now, and their most */
  uint64_t over_paths;         /* paths past the budget, sent to OVER_BUDGET */
  int full;                    /* a path did not fit: no more are made but OVER_BUDGET */
  uint32_t spill;              /* root-level OVER_BUDGET (KS_NONE without a budget) */
} ks_ftree;

/* tree.c */
#define KS_FTREE_NO_BUDGET UINT64_MAX
int ks_ftree_init(ks_ftree *t, uint32_t max_nodes, uint64_t budget);
void ks_ftree_free(ks_ftree *t);
/* The child of `parent` for `frame`, created when new; `parent` itself at the
 * node cap; an OVER_BUDGET node past the budget (above). */
uint32_t ks_ftree_child(ks_ftree *t, uint32_t parent, uint32_t frame);
/* Whether node k is an OVER_BUDGET node. */
static inline int ks_ftree_is_over(const ks_ftree *t, uint32_t k) {
  return t->v[k].frame == KS_FR(KS_FR_PSEUDO, KS_PSEUDO_OVER);
}
/* Child lists were built by prepending: reverses them once, for first-seen order. */
void ks_ftree_order(ks_ftree *t);
/* Inclusive ns of every node into total[t->n] (children come after parents). */
void ks_ftree_totals(const ks_ftree *t, uint64_t *total);

/* Exact per-function counters (counts.c), indexed by MFA id: calls,
 * self ns (the function ran: not scheduled out, not in a GC frame) and
 * inclusive ns (from the outermost frame's start to its end, on the
 * process's clock: a recursive function's inner frames are not counted
 * again). No tree budget touches them. */
typedef struct ks_ffun {
  uint64_t calls, self, incl;
  uint64_t self_n, incl_n;     /* events that ended their intervals (the correction's) */
  uint64_t self_nr, incl_nr;   /* of them, return_tos */
  uint64_t moved_in, moved_out;   /* correction moved from callees / to callers (at the write) */
} ks_ffun;

typedef struct ks_fcount {
  ks_ffun *v;
  uint32_t cap;
  uint64_t uncounted;          /* calls or times that found no memory */
} ks_fcount;

/* One frame of a process's stack (ks_stack.h) and its tree node; the child
 * it last looked up (the next call from it is most often the same callee:
 * no probe of the tree's table, which is a cache miss on a big tree). */
typedef struct ks_fentry {
  ks_sframe f;
  uint32_t node;
  uint32_t hint_frame, hint_node;   /* hint_node KS_NONE: none */
} ks_fentry;

/* A function open on a process's stack, for its exact inclusive time
 * (counts.c): how many frames run it, and the process's clock when the
 * outermost one opened. */
typedef struct ks_fopen {
  uint32_t mfa, count;         /* mfa KS_NONE: an empty slot */
  uint64_t since, since_events;   /* the process's clock and events then */
  uint64_t since_returns;         /* and return_to events */
} ks_fopen;

/* A process of a graph: its stack and where its time goes, and what names it
 * (its capture sets the state bits: armed, child, ...). */
typedef struct ks_fproc {
  uint32_t pid;                /* pid id */
  uint32_t root;               /* the process's tree node */
  ks_stack st;                 /* of ks_fentry, at most max_stack kept; pinned: the bottom
                                * frame is a trigger call, never replaced */
  uint32_t cur;                /* the node time goes to now, KS_NONE for none */
  uint32_t out_mfa;            /* where it was scheduled out */
  uint32_t trig_depth;         /* flame_capture: trigger calls open in this process */
  uint32_t run_mfa;            /* the function it runs (last call or return_to), KS_NONE */
  int64_t last_ts;
  uint64_t clock;              /* ns credited to it so far (its inclusive times' clock) */
  uint64_t events;             /* events that ended those intervals */
  uint64_t returns;            /* of them, return_tos */
  ks_fcount *fc;               /* its graph's per-function counters, NULL: none */
  ks_hmap open;                /* of ks_fopen: functions open on its stack (top table
                                * only); v NULL until the first */
  uint8_t armed, out, gc, dead, has_ts, named;
  uint8_t ran;                 /* has been scheduled in (or made a call) since it joined */
  uint8_t child;               /* joined as a spawned child (children => true) */
  uint8_t bottom;              /* its bottom frame is its first (seen from its start or
                                * its trigger call): no return_to goes below it */
  char *name;                  /* registered name, UTF-8, or NULL */
  char *call;                  /* initial call "M:F/A" as kprof_flame_srv found it, or NULL */
  uint32_t first_mfa;          /* a child's first function called that is no spawn wrapper */
  uint32_t spawn_mfa;          /* spawn's {M, F, Args} as M:F/length(Args) (children) */
} ks_fproc;

/* A slot of a graph's pid table. */
typedef struct ks_fpid {
  uint32_t pid, index;         /* pid KS_NONE: an empty slot */
} ks_fpid;

/* A group of processes in a written graph: its key (a registered name, an
 * initial call, `all') and how many processes it merges. */
typedef struct ks_fgroup {
  char *key;
  uint32_t n;
} ks_fgroup;

typedef struct ks_fcounters {
  uint64_t events;             /* events that changed a stack or its time */
  uint64_t calls_started, calls_done, calls_refused;   /* a capture's trigger calls */
  uint64_t calls_early;        /* trigger calls before flame_arm, not taken */
  uint64_t lost_frames;        /* frames popped without their return_to (tail calls, exceptions) */
  uint64_t unknown_callers;    /* callers not on the stack: inferred */
  uint64_t depth_capped;       /* pushes beyond max_depth */
  uint64_t stack_overflow;     /* pushes beyond max_stack: their time is in TOO_DEEP */
  uint64_t over_budget_calls;  /* calls whose frame went to OVER_BUDGET */
  uint64_t corrected;          /* events whose cost the correction took off (correct.c) */
  uint64_t subtracted_ns;      /* what it took off the graph in all */
  uint64_t clamped;            /* call paths shorter than their events' cost that no caller's
                                * path could make up for: counted as 0 */
  uint64_t clamped_ns;         /* the cost they could not give (never a negative time) */
  uint64_t skipped_ns;         /* the cost per event not taken off: the capture's whole time
                                * was less than its events' cost (0: none skipped) */
  uint64_t cost_ns[2];         /* the cost taken off per event, by KS_FIVL_* kind */
  int cost_measured[2];        /* 1: measured in the capture's own intervals; 0: the
                                * calibration's (o.correct_ns): too few intervals */
  uint64_t cost_total_ns;      /* the corrected events' cost in all (subtracted + clamped) */
  uint64_t dropped_procs;      /* processes beyond max_procs */
} ks_fcounters;

/* tails.c: what the flow rules learnt of calls, per (caller, callee) function. */
enum { KS_FTAIL_UNKNOWN = 0, KS_FTAIL_TAIL = 1, KS_FTAIL_BODY = 2 };
#define KS_FTAILS_MAX (1u << 22)
typedef struct ks_ftail {
  uint32_t caller, callee;     /* caller KS_NONE: an empty slot */
  uint8_t kind;                /* KS_FTAIL_* */
} ks_ftail;

typedef struct ks_ftails {
  ks_hmap map;                 /* of ks_ftail; v NULL until the first pair */
} ks_ftails;

int ks_ftails_get(const ks_ftails *t, uint32_t caller, uint32_t callee);
void ks_ftails_set(ks_ftails *t, uint32_t caller, uint32_t callee, int kind);
void ks_ftails_free(ks_ftails *t);

/* The intervals of a graph's processes while they ran (not scheduled out,
 * not in a GC frame), by the kind of event that ended them (a return_to, or
 * a call or any other event), in 16 ns bins up to 8 us: what an event costs
 * in this capture (correct.c). One increment an event. */
enum { KS_FIVL_CALL = 0, KS_FIVL_RETURN = 1, KS_FIVL_KINDS = 2 };
#define KS_FIVL_BIN_NS 16
#define KS_FIVL_BINS 512
typedef struct ks_fivl {
  uint64_t bin[KS_FIVL_BINS];   /* the last bin: 8176 ns and more */
  uint64_t n, total;             /* intervals, and their ns added up */
} ks_fivl;

/* A call-path graph: its tree, what building it counted, its processes (the
 * roots of the tree, looked up by pid id) and the options it was built under.
 * A flame capture's, a replay's, or (tree and counters only, its options the
 * defaults) a view of a full-trace aggregate's for the writers. */
typedef struct ks_callpath {
  int64_t id;                  /* its name in the files: the capture's id, an aggregate's row */
  ks_fopts o;
  ks_ftree tree;
  ks_fcounters k;
  ks_fcount fc;                /* per function, counted only when o.top > 0 */
  ks_ftails tails;             /* the flow rules' tail calls (o.learn) */
  ks_fivl ivl[KS_FIVL_KINDS];  /* run intervals by the event that ended them */
  ks_fproc *procs;
  uint32_t nprocs, cap_procs;
  ks_hmap pids;                /* of ks_fpid: pid id -> index in procs */
  ks_fgroup *groups;           /* a written view's groups (KS_FR_GROUP frames), else NULL */
  uint32_t ngroups;
} ks_callpath;

/* graph.c: a graph made under o (its tree's limits: o->max_nodes, o->max_bytes;
 * max_stack at least max_depth + 1): KS_OK or KS_ENOMEM. */
int ks_callpath_init(ks_callpath *g, int64_t id, const ks_fopts *o);
void ks_callpath_free(ks_callpath *g);
/* The process of pid id, or NULL (not const: as strchr, for the graph's owner).
 * Inline: a capture looks its process up at most events. */
static inline ks_fproc *ks_callpath_proc(const ks_callpath *g, uint32_t pid) {
  const ks_fpid *e;
  size_t i;

  for (e = ks_hmap_run(&g->pids, sizeof(*e), ks_hmap_fib(pid), &i); e != NULL;
       e = ks_hmap_step(&g->pids, sizeof(*e), &i))
    if (e->pid == pid)
      return &g->procs[e->index];
  return NULL;
}
/* A new process of the graph (pid not in it): its root node made, no frame,
 * not armed; NULL without memory. Pointers to processes move when it grows. */
ks_fproc *ks_callpath_add_proc(ks_callpath *g, uint32_t pid);

/* What the stack rules (stacks.c) build into: a call-path tree and its
 * counters, under a graph's options. A graph's own (ks_callpath_graph), or a
 * full-trace aggregate's (port/tiers/tier_full.c), which is no graph. */
typedef struct ks_fgraph {
  ks_ftree *tree;
  ks_fcounters *k;
  const ks_fopts *o;
  ks_fcount *fc;               /* per-function counters, NULL: not counted */
  ks_ftails *tails;            /* the flow rules' tail calls, NULL: none learnt */
} ks_fgraph;

static inline ks_fgraph ks_callpath_graph(ks_callpath *g) {
  ks_fgraph r = {&g->tree, &g->k, &g->o, g->o.top > 0 ? &g->fc : NULL,
                 g->o.learn ? &g->tails : NULL};
  return r;
}

/* stacks.c: the stack rules, for one process of a graph or aggregate. */
void ks_fstack_call(const ks_fgraph *g, ks_fproc *p, uint32_t mfa, uint32_t caller);
void ks_fstack_return_to(const ks_fgraph *g, ks_fproc *p, uint32_t to);
/* The flow rules (no {caller}): a call, a return_to. */
void ks_fstack_call_flow(const ks_fgraph *g, ks_fproc *p, uint32_t mfa);
void ks_fstack_return_flow(const ks_fgraph *g, ks_fproc *p, uint32_t to);
void ks_fstack_infer(const ks_fgraph *g, ks_fproc *p, uint32_t mfa);
/* The stack becomes the one frame mfa, returning to base (a trigger call). */
void ks_fstack_root(const ks_fgraph *g, ks_fproc *p, uint32_t mfa, uint32_t base);
void ks_fstack_clear(ks_fproc *p);
/* A process's stack before its first frame (max_stack frames kept). */
void ks_fstack_init(ks_fproc *p, uint32_t max_stack);
/* What ended an interval, for the correction's costs (correct.c). */
enum { KS_FEV_NONE = 0, KS_FEV_OTHER = 1, KS_FEV_RETURN = 2 };
/* An event at ts: credits [last_ts, ts) to the current node, counted as an
 * interval an event ended; ts never goes back. _return: the event was a
 * return_to. */
void ks_fstack_credit(const ks_fgraph *g, ks_fproc *p, int64_t ts);
void ks_fstack_credit_return(const ks_fgraph *g, ks_fproc *p, int64_t ts);
/* The graph's end at ts (no event: nothing to take off). */
void ks_fstack_credit_end(const ks_fgraph *g, ks_fproc *p, int64_t ts);
/* Recomputes p->cur after a change of stack or state. */
void ks_fstack_update(const ks_fgraph *g, ks_fproc *p);

/* correct.c: takes o.correct_ns per event off a finished graph's tree and
 * per-function counters (once; the counters say what it did). */
void ks_callpath_correct(ks_callpath *g);
/* The mean of h's intervals up to `times' their median (bins' middles); 0: none. */
uint64_t ks_fivl_body_mean(const ks_fivl *h, uint64_t times);
/* Below this many intervals of a kind, its cost is the calibration's. */
#define KS_FCORR_MIN_INTERVALS 1000

/* top.c: per-function totals of a tree (tprof's table). Self: summed over
 * the function's nodes; inclusive: over its outermost nodes only (recursion is
 * not counted twice); calls: calls[mfa] (calls_cap of them) as the caller
 * counted them. Ordered by inclusive or by self time, largest first; *n rows,
 * the caller frees; NULL with *n = 0 when empty or out of memory. */
typedef struct ks_fmfa {
  uint32_t mfa;
  uint64_t calls, incl, self;
} ks_fmfa;
/* Orders of the rows; BY_SELF, BY_INCL and BY_CALLS are option top_by's values. */
enum { KS_FMFA_BY_SELF = 0, KS_FMFA_BY_INCL = 1, KS_FMFA_BY_CALLS = 2 };
/* The rows in an order: most self time, inclusive time or calls first. */
void ks_fmfa_sort(ks_fmfa *rows, uint32_t n, int order);
ks_fmfa *ks_ftree_mfas(const ks_ftree *tr, const uint64_t *total, const uint64_t *calls,
                       uint32_t calls_cap, int order, uint32_t *n);
/* One call of mfa into a per-MFA counter vector (grown as needed; KS_NONE is
 * not counted): KS_OK or KS_ENOMEM (the call is not counted). */
int ks_fcount_call(uint64_t **calls, uint32_t *cap, uint32_t mfa);
/* qsort's order of rows by self time, largest first (then inclusive, then id). */
int ks_fmfa_by_self(const void *a, const void *b);

/* counts.c: exact per-function counters (ks_fcount). Memory that runs
 * out is counted in fc->uncounted, never fatal. */
void ks_ffun_call(ks_fcount *fc, uint32_t mfa);
/* event: KS_FEV_NONE (no event ended it), KS_FEV_OTHER or KS_FEV_RETURN. */
void ks_ffun_self(ks_fcount *fc, uint32_t mfa, uint64_t ns, int event);
/* A frame of p starts running mfa / stops running it (inclusive time). */
void ks_ffun_enter(ks_fcount *fc, ks_fproc *p, uint32_t mfa);
void ks_ffun_leave(ks_fcount *fc, ks_fproc *p, uint32_t mfa);
/* Every frame of p stops: their open functions' inclusive times end now. */
void ks_ffun_leave_all(ks_fcount *fc, ks_fproc *p);
void ks_ffun_free_proc(ks_fproc *p);
void ks_ffun_free(ks_fcount *fc);
/* The rows of every function counted but `hide', most self time first; *n of
 * them (the caller frees), NULL with *n = 0 when none or out of memory. */
ks_fmfa *ks_ffun_rows(const ks_fcount *fc, uint32_t hide, uint32_t *n);

/* names.c: frame names, raw UTF-8 (writers escape them). Returns the length. */
size_t ks_callpath_frame_name(const ks_callpath *g, const ks_intern *in, uint32_t frame,
                              char *buf, size_t cap);
/* What the graph's times are, as each writer states it in its header: the
 * correction for tracing's cost and its counters, or none. Words and
 * `key=value' only (no `space digits' a folded or perf reader could take for
 * a count or a thread id). Returns the length. */
size_t ks_callpath_correction_text(const ks_callpath *g, char *buf, size_t cap);
/* The mean cost taken off per corrected event (0: none corrected). */
uint64_t ks_callpath_per_event_ns(const ks_callpath *g);
/* What a process runs, for its label and group: the initial call kprof_flame_srv
 * sent, else (a spawned child, seen from its start) the first function it called
 * that is no spawn wrapper, else its spawn MFA; 0 when none is known. */
size_t ks_callpath_proc_call(const ks_callpath *g, const ks_intern *in, const ks_fproc *p,
                            char *buf, size_t cap);

/* view.c: the graph as written: processes merged by g->o.group, direct recursion
 * folded (g->o.fold_recursion), into *view (a copy of g with its own tree and
 * groups, its processes shared). Returns KS_OK with view->tree ordered, or
 * KS_ENOMEM; ks_callpath_view_free frees it. */
int ks_callpath_view(const ks_callpath *g, const ks_intern *in, ks_callpath *view);
void ks_callpath_view_free(ks_callpath *view);

#endif
