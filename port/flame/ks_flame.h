/* ks_flame.h: flame-graph captures in the sink (doc/internals-flame.md says what they compute).
 *
 * A capture turns the trace events of its processes into per-process call
 * stacks and credits the time between two events of a process to the stack
 * it had before the later one. Stacks are not stored: each stack is a node
 * of a call-path tree (node = parent node + frame, interned in a hash table)
 * and only the node's self time grows. The writers (write_*.c) walk the tree.
 * The tree has a budget in bytes: paths that do not fit go to an OVER_BUDGET
 * node under their deepest kept frame. The top table comes from per-function
 * counters (flame_count.c) that no budget touches.
 */
#ifndef KS_FLAME_H
#define KS_FLAME_H

#include <stdio.h>

#include "core/ks_consumer.h"
#include "core/ks_decode.h"
#include "proto/ks_proto.h"
#include "stack/ks_stack.h"

#define KS_FLAME_MAX 32   /* captures at once: one bit each in the pid routing mask */

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

/* Output formats: bit KS_FMT_name for each KS_FORMAT row of include/ks_options.h,
 * in its order. */
enum {
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc)
#define KS_FORMAT(name, ext, writer, all) KS_FMT_INDEX_##name,
#include "ks_options.h"
#undef KS_FORMAT
  KS_NFORMATS
};
enum {
#define KS_FORMAT(name, ext, writer, all) KS_FMT_##name = 1 << KS_FMT_INDEX_##name,
#include "ks_options.h"
#undef KS_FORMAT
#undef KS_OPTION
};

/* A call path. Node 0 is the root of every process; children are in a list. */
typedef struct ks_fnode {
  uint32_t parent, frame;
  uint32_t child, sibling;     /* first child, next sibling (KS_NONE ends) */
  uint64_t self;               /* ns credited while this was the stack */
  uint32_t n;                  /* of them, intervals an event ended (saturates): the
                                * correction for tracing's cost takes n of its cost off */
  uint32_t nr;                 /* of n, those a return_to ended (flame_correct.c) */
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
/* A slot of the tree's table: the key beside its node (node KS_NONE: empty). */
typedef struct ks_fslot {
  uint32_t parent, frame, node;
} ks_fslot;

typedef struct ks_ftree {
  ks_fnode *v;
  uint32_t n, cap, max;
  ks_fslot *slots;             /* (parent, frame) -> node */
  uint32_t mask;
  int ordered;                 /* child lists put in first-seen order */
  uint64_t dropped;            /* nodes not created at the cap (time went to the parent) */
  uint64_t budget;             /* bytes of v and slots at most (UINT64_MAX: none) */
  uint64_t bytes, peak;        /* bytes of v and slots now, and their most */
  uint64_t over_paths;         /* paths past the budget, sent to OVER_BUDGET */
  int full;                    /* a path did not fit: no more are made but OVER_BUDGET */
  uint32_t spill;              /* root-level OVER_BUDGET (KS_NONE without a budget) */
} ks_ftree;

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

/* Exact per-function counters (flame_count.c), indexed by MFA id: calls,
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
 * (flame_count.c): how many frames run it, and the process's clock when the
 * outermost one opened. */
typedef struct ks_fopen {
  uint32_t mfa, count;         /* mfa KS_NONE: an empty slot */
  uint64_t since, since_events;   /* the process's clock and events then */
  uint64_t since_returns;         /* and return_to events */
} ks_fopen;

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
  ks_fcount *fc;               /* its capture's per-function counters, NULL: none */
  ks_fopen *open;              /* functions open on its stack (top table only), hashed */
  uint32_t open_mask, open_n;
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

/* A group of processes in a written graph: its key (a registered name, an
 * initial call, `all') and how many processes it merges. */
typedef struct ks_fgroup {
  char *key;
  uint32_t n;
} ks_fgroup;

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
  int elixir_names;            /* frames named as Elixir does (names => elixir) */
  int group;                   /* KS_GROUP_*: processes merged at the root when written */
  int fold_recursion;          /* f;f;f written as one f (direct recursion) */
  int callers;                 /* calls carry {caller}: the search rules (BEAM stacks);
                                * else the flow rules (ks_stack.h) */
  uint32_t fold_depth;         /* flow rules: loops past this depth fold (KS_FLAME_FOLD_DEPTH) */
  int learn;                   /* flow rules: learn tail calls from return_tos (flame_tails.c) */
  uint32_t correct_ns;         /* tracing's cost per event, taken off at the write (0: none) */
  uint64_t max_record_bytes;   /* the recording's bound per file (ks_record.h) */
  uint32_t record_rotate;      /* files kept past the bound; 0: the recording stops */
  uint32_t record_level;       /* zstd's compression level of its frames */
  int record_at;               /* flame_start's decode: where the record path is in the
                                * command (record_control.c), -1: none */
  uint32_t sample_hz;          /* a sampled profile's rate (port/sample/); 0: traced */
} ks_fopts;

/* The depth past which the flow rules fold loops and recursion (doc/internals-flame.md
 * says why this one). */
#define KS_FLAME_FOLD_DEPTH 128

/* The default budget of a flame capture's tree (doc/internals-flame.md says why this much). */
#define KS_FLAME_MAX_BYTES ((uint64_t)2 << 30)

typedef struct ks_fcounters {
  uint64_t events;             /* events that changed a stack or its time */
  uint64_t calls_started, calls_done, calls_refused;
  uint64_t calls_early;        /* trigger calls before flame_arm, not taken */
  uint64_t lost_frames;        /* frames popped without their return_to (tail calls, exceptions) */
  uint64_t unknown_callers;    /* callers not on the stack: inferred */
  uint64_t depth_capped;       /* pushes beyond max_depth */
  uint64_t stack_overflow;     /* pushes beyond max_stack: their time is in TOO_DEEP */
  uint64_t over_budget_calls;  /* calls whose frame went to OVER_BUDGET */
  uint64_t corrected;          /* events whose cost the correction took off (flame_correct.c) */
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

/* flame_tails.c: what the flow rules learnt of calls, per (caller, callee) function. */
enum { KS_FTAIL_UNKNOWN = 0, KS_FTAIL_TAIL = 1, KS_FTAIL_BODY = 2 };
#define KS_FTAILS_MAX (1u << 22)
typedef struct ks_ftails {
  uint64_t *keys;              /* caller << 32 | callee; UINT64_MAX is empty */
  uint8_t *kind;
  uint32_t mask, n;
} ks_ftails;

int ks_ftails_get(const ks_ftails *t, uint32_t caller, uint32_t callee);
void ks_ftails_set(ks_ftails *t, uint32_t caller, uint32_t callee, int kind);
void ks_ftails_free(ks_ftails *t);

/* The intervals of a capture's processes while they ran (not scheduled out,
 * not in a GC frame), by the kind of event that ended them (a return_to, or
 * a call or any other event), in 16 ns bins up to 8 us: what an event costs
 * in this capture (flame_correct.c). One increment an event. */
enum { KS_FIVL_CALL = 0, KS_FIVL_RETURN = 1, KS_FIVL_KINDS = 2 };
#define KS_FIVL_BIN_NS 16
#define KS_FIVL_BINS 512
typedef struct ks_fivl {
  uint64_t bin[KS_FIVL_BINS];   /* the last bin: 8176 ns and more */
  uint64_t n, total;             /* intervals, and their ns added up */
} ks_fivl;

typedef struct ks_fcap {
  int used;
  int stopped;                 /* finished: takes no more events */
  int64_t id;
  ks_fopts o;
  ks_ftree tree;
  ks_fproc *procs;
  uint32_t nprocs, cap_procs;
  uint32_t *pslots;            /* pid id -> proc index + 1, open addressing */
  uint32_t pmask;
  uint32_t last_pid, last_proc;
  ks_fcounters k;
  ks_fcount fc;                /* per function, counted only when o.top > 0 */
  ks_ftails tails;             /* the flow rules' tail calls (o.learn) */
  ks_fgroup *groups;           /* a written view's groups (KS_FR_GROUP frames), else NULL */
  uint32_t ngroups;
  ks_fivl ivl[KS_FIVL_KINDS];  /* run intervals by the event that ended them */
  struct ks_record *rec;          /* its recording (ks_record.h), NULL: none */
} ks_fcap;

/* What the stack rules (flame_stack.c) build into: a call-path tree and its
 * counters, under a capture's options. A capture's own (ks_fcap_graph), or a
 * full-trace aggregate's (tier_full.c), which has no capture. */
typedef struct ks_fgraph {
  ks_ftree *tree;
  ks_fcounters *k;
  const ks_fopts *o;
  ks_fcount *fc;               /* per-function counters, NULL: not counted */
  ks_ftails *tails;            /* the flow rules' tail calls, NULL: none learnt */
} ks_fgraph;

static inline ks_fgraph ks_fcap_graph(ks_fcap *c) {
  ks_fgraph g = {&c->tree, &c->k, &c->o, c->o.top > 0 ? &c->fc : NULL,
                 c->o.learn ? &c->tails : NULL};
  return g;
}

typedef struct ks_flame {
  int active;                  /* captures in use */
  ks_switch sw;                /* on while any is (port/core/ks_consumer.h) */
  ks_fcap cap[KS_FLAME_MAX];
  uint32_t *mask;              /* pid id -> bit per capture */
  uint32_t mask_cap;
  uint32_t recording;          /* a bit per capture being recorded (and not finished) */
} ks_flame;

void ks_flame_init(ks_flame *fl);
void ks_flame_free(ks_flame *fl);
void ks_flame_default_opts(ks_fopts *o);
/* Returns the capture's slot, KS_EINVAL for an id in use, KS_EFULL when all are. */
int ks_flame_start(ks_flame *fl, int64_t id, const ks_fopts *o);
ks_fcap *ks_flame_find(ks_flame *fl, int64_t id);
/* Adds a process (armed: its events count from now); name may be NULL. A process
 * already in the capture only has its name updated (when given). */
int ks_flame_add_pid(ks_flame *fl, ks_fcap *c, uint32_t pid, const char *name, size_t name_len);
/* The initial call text of a process of the capture (ignored when it is not in it). */
void ks_flame_set_call(ks_fcap *c, uint32_t pid, const char *call, size_t len);
void ks_flame_drop(ks_flame *fl, ks_fcap *c);
/* One decoded trace event, for every capture it concerns. */
void ks_flame_event(ks_flame *fl, const ks_intern *in, const ks_decoded *d);
/* Sets pin[pid] for every process of a capture in use (its files not yet
 * written); ks_flame_forget_pids clears released ids' routing (port/sink/pid_reclaim.c). */
void ks_flame_pin_pids(const ks_flame *fl, uint8_t *pin, uint32_t n);
void ks_flame_forget_pids(ks_flame *fl, const uint8_t *dead, uint32_t n);
/* The flame captures as a consumer of the sink's events (port/core/ks_consumer.h). */
void ks_flame_consumer(ks_flame *fl, ks_consumer *c);
/* Stops the capture's processes: their open intervals run to end_ts (if has_end). */
void ks_flame_finish(ks_flame *fl, ks_fcap *c, int has_end, int64_t end_ts);
/* Records the capture to path from now (record_write.c): KS_OK, or KS_EINVAL with
 * *why (a struct ks_record_refusal) saying why. */
int ks_flame_record(ks_flame *fl, ks_fcap *c, const ks_intern *in, const char *path,
                    void *why);
/* flame_arm: trigger calls count from now (recorded). */
void ks_flame_arm(ks_fcap *c);
/* A process already in the capture when a rotated record file began (replay.c):
 * added with its state bits (KS_RPROC_*), names and an empty stack, unless it is in. */
void ks_flame_restore_proc(ks_flame *fl, ks_fcap *c, uint32_t pid, unsigned state,
                           const char *name, size_t name_n, const char *call, size_t call_n);

/* flame_stack.c: the stack rules, for one process of a capture or aggregate. */
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
/* What ended an interval, for the correction's costs (flame_correct.c). */
enum { KS_FEV_NONE = 0, KS_FEV_OTHER = 1, KS_FEV_RETURN = 2 };
/* An event at ts: credits [last_ts, ts) to the current node, counted as an
 * interval an event ended; ts never goes back. _return: the event was a
 * return_to. */
void ks_fstack_credit(const ks_fgraph *g, ks_fproc *p, int64_t ts);
void ks_fstack_credit_return(const ks_fgraph *g, ks_fproc *p, int64_t ts);
/* The capture's end at ts (no event: nothing to take off). */
void ks_fstack_credit_end(const ks_fgraph *g, ks_fproc *p, int64_t ts);

/* flame_correct.c: takes o.correct_ns per event off a finished capture's
 * tree and per-function counters (once; the counters say what it did). */
void ks_flame_correct(ks_fcap *c);
/* The mean of h's intervals up to `times' their median (bins' middles); 0: none. */
uint64_t ks_fivl_body_mean(const ks_fivl *h, uint64_t times);
/* Below this many intervals of a kind, its cost is the calibration's. */
#define KS_FCORR_MIN_INTERVALS 1000
/* Recomputes p->cur after a change of stack or state. */
void ks_fstack_update(const ks_fgraph *g, ks_fproc *p);

/* flame_top.c: per-function totals of a tree (tprof's table). Self: summed over
 * the function's nodes; inclusive: over its outermost nodes only (recursion is
 * not counted twice); calls: calls[mfa] (calls_cap of them) as the caller
 * counted them. Ordered by inclusive or by self time, largest first; *n rows,
 * the caller frees; NULL with *n = 0 when empty or out of memory. */
typedef struct ks_fmfa {
  uint32_t mfa;
  uint64_t calls, incl, self;
} ks_fmfa;
enum { KS_FMFA_BY_INCL = 0, KS_FMFA_BY_SELF = 1 };
ks_fmfa *ks_ftree_mfas(const ks_ftree *tr, const uint64_t *total, const uint64_t *calls,
                       uint32_t calls_cap, int order, uint32_t *n);
/* One call of mfa into a per-MFA counter vector (grown as needed; KS_NONE is
 * not counted): KS_OK or KS_ENOMEM (the call is not counted). */
int ks_fcount_call(uint64_t **calls, uint32_t *cap, uint32_t mfa);
/* qsort's order of rows by self time, largest first (then inclusive, then id). */
int ks_fmfa_by_self(const void *a, const void *b);

/* flame_count.c: exact per-function counters (ks_fcount). Memory that runs
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

/* flame_names.c: frame names, raw UTF-8 (writers escape them). Returns the length. */
size_t ks_flame_frame_name(const ks_fcap *c, const ks_intern *in, uint32_t frame, char *buf,
                           size_t cap);
/* What the capture's times are, as each writer states it in its header: the
 * correction for tracing's cost and its counters, or none. Words and
 * `key=value' only (no `space digits' a folded or perf reader could take for
 * a count or a thread id). Returns the length. */
size_t ks_flame_correction_text(const ks_fcap *c, char *buf, size_t cap);
/* The mean cost taken off per corrected event (0: none corrected). */
uint64_t ks_flame_per_event_ns(const ks_fcap *c);
/* The process of a root node's frame, or NULL. */
const ks_fproc *ks_flame_proc_of(const ks_fcap *c, uint32_t pid);
/* What a process runs, for its label and group: the initial call kprof_flame_srv
 * sent, else (a spawned child, seen from its start) the first function it called
 * that is no spawn wrapper, else its spawn MFA; 0 when none is known. */
size_t ks_flame_proc_call(const ks_fcap *c, const ks_intern *in, const ks_fproc *p, char *buf,
                          size_t cap);
/* The graph as written: processes merged by c->o.group, direct recursion folded
 * (c->o.fold_recursion), into *view (a copy of c with its own tree and groups).
 * Returns KS_OK with view->tree ordered, or KS_ENOMEM; ks_flame_view_free frees it. */
int ks_flame_view(const ks_fcap *c, const ks_intern *in, ks_fcap *view);
void ks_flame_view_free(ks_fcap *view);

/* What a writer gets: a finished capture, totals, and its names. */
typedef struct ks_fout {
  const ks_fcap *c;
  const ks_intern *in;
  const uint64_t *total;       /* inclusive ns per node */
  uint64_t grand;              /* total[0] */
} ks_fout;

/*
 * Walks the subtree of `start` depth first, children in first-seen order,
 * laid out on a timeline: a node spans [t, t + total) from the start of the
 * walk, and its self time comes after its children (a merged timeline, like
 * a sampled profile collapsed). Nodes with no time are left out. open()
 * returns 0 to leave out the node's children (close is still called); any
 * negative return stops the walk and is returned.
 */
typedef int (*ks_fvisit_fn)(void *ctx, uint32_t node, uint32_t depth, uint64_t t);
int ks_fwalk(const ks_fout *o, uint32_t start, ks_fvisit_fn open, ks_fvisit_fn close,
             void *ctx);

/* write_*.c: each format's writer (its KS_FORMAT row names it). Each returns
 * KS_OK, KS_ENOMEM, or KS_EINVAL as soon as the stream is in error (ferror);
 * why it failed is the stream's to say (ks_wfile). */
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc)
#define KS_FORMAT(name, ext, writer, all) int writer(const ks_fout *o, FILE *f);
#include "ks_options.h"
#undef KS_FORMAT
#undef KS_OPTION

/* write_file.c: a file the writers write to. Its stream keeps the first errno of
 * write(2) or close(2), where it happened (stdio may report it only at fclose). */
typedef struct ks_wfile {
  FILE *f;                     /* the writers' stream; NULL once closed */
  int fd;
  int err;                     /* first errno of a write or the close; 0: none */
} ks_wfile;

/* Creates name in the directory dirfd (O_EXCL, mode 0600) and its stream: KS_OK or
 * -errno (-EEXIST: taken); nothing is left behind on failure. */
int ks_wfile_create_at(ks_wfile *w, int dirfd, const char *name);
/* Flushes and closes: KS_OK when every byte reached the file, else -errno (the first
 * that write(2) or close(2) gave; -EIO if stdio failed with none). */
int ks_wfile_close(ks_wfile *w);

/* Where files go: Dir/Base.ext for each format bit (Base-1, ... when taken).
 * The flame_* commands and the reply that writes the files: below. */
typedef struct ks_fdest {
  char dir[4096], base[1024];
  int fmts;
} ks_fdest;

/* Escapes for the writers (flame_names.c): out gets at most cap-1 bytes and a NUL. */
size_t ks_flame_escape_folded(const char *s, size_t n, char *out, size_t cap);
void ks_flame_put_json(FILE *f, const char *s, size_t n);
void ks_flame_put_xml(FILE *f, const char *s, size_t n);
void ks_flame_put_line(FILE *f, const char *s, size_t n);   /* callgrind: one line, UTF-8 */

/* flame_control.c: the flame_* commands, rows of the command table
 * (port/sink/control.c; what a handler gets, ks_cmd: port/proto/ks_proto.h). */
int ks_cmd_flame_start(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_flame_pids(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_flame_status(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_flame_members(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_flame_arm(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_flame_drop(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_flame_write(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_flame_dir(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x);
/* The value of a flame row of type KS_T_TERM (group, names, trigger, hide,
 * record) at *idx into o: KS_OK or KS_EINVAL (sampled captures take the
 * same rows). */
int ks_flame_decode_term(ks_intern *in, const char *key, const char *b, size_t len, int *idx,
                         ks_fopts *o);
/* Dir (binary), Base (binary), [Format] at *idx. */
int ks_flame_decode_dest(const char *b, int *idx, ks_fdest *d);
/* Writes the files and encodes {ok, [Path], Info} or {error, Reason} into x;
 * info() adds Info's first keys to m (total_us and write_us follow). */
int ks_flame_write_reply(const ks_fout *o, const ks_fdest *d, ei_x_buff *x,
                         void (*info)(ks_map *m, const void *ctx), const void *ctx);
/* More keys for a write's Info (a replay's `replay' map). */
typedef struct ks_flame_extra {
  void (*put)(ks_map *m, const void *ctx);
  const void *ctx;
} ks_flame_extra;
/* Corrects, orders and writes a capture's files (directly or through its
 * view), with its reply in x; extra may be NULL. */
int ks_flame_write_files(const ks_intern *in, ks_fcap *c, const ks_fdest *d, ei_x_buff *x,
                         const ks_flame_extra *extra);
/* A format's bit (KS_FMT_*), 0 for none; NULL: every format's. */
int ks_flame_format_bit(const char *atom);

#endif
