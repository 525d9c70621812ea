/* ks_tiers.h: tiered request profiling in the sink (doc/internals-tiers.md says what it computes). */
#ifndef KS_TIERS_H
#define KS_TIERS_H

#include "core/ks_consumer.h"
#include "core/ks_decode.h"
#include "callpath/ks_callpath.h"
#include "core/ks_hist.h"
#include "core/ks_hmap.h"
#include "proto/ks_proto.h"
#include "stack/ks_stack.h"

#define KS_TIER_MAX 32

/* What an MFA is to the tier profiler. The request markers (start, stop,
 * mark) are traced global: no return_to follows their calls, so they open
 * no frame (KS_ROLE_IS_MARK). */
enum {
  KS_ROLE_MARK = -5,     /* a marker in no tier (kprof_mark:resume/0) */
  KS_ROLE_UNSEEN = -4,   /* not classified yet */
  KS_ROLE_NONE = -3,     /* traced but in no tier */
  KS_ROLE_START = -2,    /* kprof_mark:start/1: opens a request */
  KS_ROLE_STOP = -1      /* kprof_mark:stop/0: ends it */
  /* >= 0: a tier index */
};
#define KS_ROLE_IS_MARK(r) ((r) == KS_ROLE_START || (r) == KS_ROLE_STOP || (r) == KS_ROLE_MARK)

typedef struct ks_tier_spec {
  char *m, *f;           /* UTF-8; f == NULL: any function */
  int arity;             /* -1: any arity */
  int role;              /* tier index, KS_ROLE_START, _STOP, _MARK or _NONE */
  int entry;             /* calls of this MFA open a request by themselves */
} ks_tier_spec;

typedef struct ks_tier_opts {
  uint32_t max_identities;      /* further identities fold into one row */
  uint32_t max_inflight;        /* requests open or in their grace window */
  uint32_t max_request_events;  /* events buffered per request */
  uint32_t slow_max;            /* slowest requests kept */
  uint64_t grace_ns;            /* how long after its end a request still takes events */
  uint64_t slow_ns;             /* requests at least this long are candidates */
  uint64_t max_age_ns;          /* an open request older than this is abandoned */
  uint32_t full_max_events;     /* full trace: events buffered per request */
  uint32_t full_max_nodes;      /* full trace: call paths per identity */
  uint32_t full_max_identities; /* full trace: identities with an aggregate */
} ks_tier_opts;

/* Per MFA id, besides its role: what the specs say of it. */
enum {
  KS_MFA_ENTRY = 1,             /* an entry MFA */
  KS_MFA_TIERED = 2             /* named by a spec: traced without full trace too */
};

/* One event of a request, buffered until the request is finalised. */
typedef struct ks_req_ev {
  int64_t ts;
  uint32_t pid, mfa, caller, seq;
  uint8_t kind;                 /* KS_EV_CALL or KS_EV_RETURN_TO */
  int8_t role;
  uint16_t pad;
} ks_req_ev;

/* A frame of the walk (ks_stack.h, top rules): a traced call and the traced
 * tail calls that replaced it, all open until the frame's return_to. */
typedef struct ks_wframe {
  ks_sframe f;
  uint32_t seq;                 /* the latest call's: the latest frame gets the self time */
  uint32_t roles;               /* bit per tier of a call in the frame: open (inclusive) */
  int role;                     /* the latest call's tier, or KS_ROLE_NONE */
} ks_wframe;

typedef struct ks_req {
  unsigned char *label;         /* the seq_trace label's bytes: the key */
  uint32_t label_len;
  unsigned char label_buf[16];  /* where `label` points when it fits (no malloc) */
  uint64_t hash;
  uint32_t gen;                 /* bumped each time the slot is reused */
  uint32_t identity;            /* row */
  uint32_t entry_pid;
  int64_t start_ts, end_ts;
  int used, ended, by_entry, truncated, abandoned;
  ks_stack entry_stack;         /* by_entry: the entry process's frames (ks_sframe), to see
                                 * the end */
  ks_req_ev *ev;
  uint32_t n_ev, cap_ev;
  uint32_t next_ended;          /* FIFO of ended requests, by end */
  uint32_t entry_prev, entry_next; /* slot + 1: the entry process's other requests in flight */
  int full, full_truncated;     /* full trace: its identity is selected */
  ks_req_ev *fev;               /* full trace: every event, tier functions' too */
  uint32_t n_fev, cap_fev;
} ks_req;

/* What one finalised request adds up to. */
typedef struct ks_req_result {
  uint32_t identity, entry_pid;
  int64_t start_ts;
  uint64_t wall;
  uint64_t calls[KS_TIER_MAX];
  uint64_t entries[KS_TIER_MAX];    /* calls made from outside the tier (tier_walk.c) */
  uint64_t self[KS_TIER_MAX + 1];   /* [ntiers] is `other` */
  uint64_t incl[KS_TIER_MAX];
} ks_req_result;

/* The statistics of a tier column of the report, one row each: its key in
 * the report, its unit (ns or count: the Erlang side gives ns in ms), and
 * the ks_req_result array a finalised request records into its histogram
 * (tier_agg.c records, tier_control.c encodes; doc/internals-tiers.md, "The report").
 * A new statistic of a tier is one row here. */
#define KS_TIER_STATS(X) \
  X(self, ns, self)      /* time in the tier's own code */ \
  X(inclusive, ns, incl) /* time with a frame of the tier open */ \
  X(calls_per_request, count, calls) /* the tier's calls in one request (N+1 queries) */ \
  X(entries_per_request, count, entries) /* of them, those from outside the tier */

enum {
#define KS_X(key, unit, field) KS_TSTAT_##key,
  KS_TIER_STATS(KS_X)
#undef KS_X
  KS_TSTAT__COUNT
};

/* A column's histograms: a tier's KS_TIER_STATS; `other` and `wall` only
 * their first (the time in no tier, the request's wall time). */
typedef struct ks_tier_col {
  uint64_t calls;
  ks_hist h[KS_TSTAT__COUNT];
} ks_tier_col;

typedef struct ks_tier_row {
  uint64_t requests;
  ks_tier_col *cols;            /* ntiers + 2: tiers, other, wall */
} ks_tier_row;

/* A frame of a process's stack as the requests see it (ks_stack.h, top
 * rules), kept per pid id across requests (tiers.c). Every labelled call
 * opens or joins one; a return_to that ends it belongs to the request that
 * opened it, not to the process's last labelled call (a nested request may
 * have come since). With full trace every function is traced: `tiered` says
 * that a tier-traced function ran in the frame, so that without full trace
 * the VM would have sent the return_to that ends it. */
typedef struct ks_chain {
  ks_sframe f;
  uint32_t tiered;
  uint32_t slot, gen;           /* the request of the call that opened it; KS_NONE: none */
} ks_chain;

/* One identity's full trace: a call-path tree (the flame writers' input) and
 * calls per MFA id. Self and inclusive time per MFA come from the tree. */
typedef struct ks_full_agg {
  ks_ftree tree;
  ks_fcounters k;
  uint64_t *calls;
  uint32_t calls_cap;
  uint64_t requests, events, truncated;
} ks_full_agg;

typedef struct ks_full {
  int on, all;                  /* on: full-trace patterns are set; all: every identity */
  ks_itab selected;             /* identity bytes -> 1 */
  uint8_t *row_on;              /* per identity row: selected */
  ks_full_agg **agg;            /* per identity row, made at its first request */
  uint32_t n_agg;
  uint32_t *pid_slot, *pid_gen; /* per pid id: the request of its last labelled call */
  uint32_t pid_cap;
  ks_fproc *procs;              /* scratch of the walk */
  uint32_t nprocs, cap_procs;
  uint64_t dropped_requests;    /* finalised without an aggregate (identity cap, memory) */
  uint64_t dropped_events;      /* past full_max_events */
  uint64_t truncated_requests, filtered_events, chain_overflow;
} ks_full;

typedef struct ks_tiers {
  int active;
  ks_switch sw;                 /* on while active (port/core/ks_consumer.h) */
  int ntiers;
  ks_tier_spec *specs;
  uint32_t nspecs;
  ks_tier_opts o;
  int8_t *roles;                /* per MFA id; KS_ROLE_UNSEEN until classified */
  uint8_t *is_entry;
  uint32_t roles_cap;
  /* In-flight requests: slots, and a hash table of label -> slot (of uint32_t). */
  ks_req *reqs;
  ks_hmap index;
  uint32_t n_inflight;
  uint32_t *free_slots, n_free;
  uint32_t ended_head, ended_tail;   /* slot + 1, 0 = none */
  /* Per pid id: the request its last labelled call belonged to. */
  uint32_t *pid_slot, *pid_gen;
  uint32_t pid_cap;
  /* Per pid id: slot + 1 of the newest request in flight it opened (then entry_next). */
  uint32_t *entry_head;
  uint32_t entry_cap;
  uint32_t seq;
  uint32_t sweep_tick;          /* events since start: stale requests are swept every 64k */
  int64_t last_ts;
  int64_t stale_at;             /* no open request is stale before this event time */
  /* Identities: raw bytes -> row. Row max_identities is the fold row. */
  ks_itab identities;
  uint32_t n_identities;
  ks_tier_row *rows;
  ks_req_result *slow;
  uint32_t n_slow;
  /* Per pid id: its stack of ks_chain (kept by a reset: stacks did not change). */
  ks_stack *chains;
  uint32_t chains_cap;
  /* Scratch of the walk. */
  ks_stack *stacks;             /* of ks_wframe */
  uint32_t *stack_pids;
  uint32_t n_stacks, cap_stacks;
  /* Counters (doc/internals-tiers.md). */
  uint64_t requests, events, abandoned, truncated_requests, dropped_requests,
      dropped_events, orphan_events, folded_requests;
  /* Requests whose entry process exited before their end: in the report (its
   * Clear zeroes it) and since start or reset (the sink's stats). */
  uint64_t killed_requests, killed_total;
  int64_t first_ts;
  ks_full full;                 /* full trace of selected identities (tier_full.c) */
} ks_tiers;

void ks_tiers_init(ks_tiers *t);
void ks_tiers_free(ks_tiers *t);
void ks_tiers_default_opts(ks_tier_opts *o);
/* Takes ownership of specs (freed by ks_tiers_free / the next start). */
int ks_tiers_start(ks_tiers *t, const ks_intern *in, ks_tier_spec *specs, uint32_t nspecs,
                   int ntiers, const ks_tier_opts *o);
void ks_tiers_stop(ks_tiers *t);
void ks_tiers_reset(ks_tiers *t);
/* One decoded trace event (calls, return_to, and the exit of a request's process). */
void ks_tiers_event(ks_tiers *t, const ks_intern *in, const ks_decoded *d);
/* Sets pin[pid] (pin has n entries) for every pid id an in-flight request or
 * a kept slow request refers to; ks_tiers_forget_pids drops the per-id state
 * of released ids (dead[id] set): port/sink/pid_reclaim.c. */
void ks_tiers_pin_pids(const ks_tiers *t, uint8_t *pin, uint32_t n);
void ks_tiers_forget_pids(ks_tiers *t, const uint8_t *dead, uint32_t n);
/* The tiers as a consumer of the sink's events (port/core/ks_consumer.h). */
void ks_tiers_consumer(ks_tiers *t, ks_consumer *c);
/* Finalises ended requests: all of them if `all`, else those past their grace. */
void ks_tiers_flush(ks_tiers *t, int all);

/* tier_walk.c: one request's events into a result. */
int ks_tiers_walk(ks_tiers *t, ks_req *r, ks_req_result *res);
/* qsort order of a request's events (tier walk, full trace): by time, then as they arrived. */
int ks_req_ev_less(const void *a, const void *b);

/* tier_full.c: full trace. Select after ks_tiers_start: all, or the identities'
 * external-format bytes (no version byte). ks_tiers_reset keeps the selection. */
int ks_full_select(ks_tiers *t, int all, const ks_slice *ids, uint32_t n);
void ks_full_free(ks_full *f, uint32_t nrows);
/* What a reset keeps: the selection. Detach before ks_tiers_free, attach after ks_tiers_start. */
void ks_full_detach(ks_full *f, ks_full *keep);
int ks_full_attach(ks_tiers *t, ks_full *keep);
/* Whether a new identity row is selected. */
void ks_full_row_added(ks_tiers *t, uint32_t row, ks_slice id);
/* A request's full-trace events into its identity's aggregate. */
void ks_full_walk(ks_tiers *t, ks_req *r);
/* Per-MFA totals of an aggregate, largest inclusive first (*n of them, caller
 * frees; NULL with *n = 0 when empty or out of memory). Inclusive: summed over
 * processes, a recursive function's inner frames not counted again. */
ks_fmfa *ks_full_mfas(const ks_full_agg *a, uint32_t *n);

/* tier_control.c: tiers_start's options (the tiers' state t, the intern
 * table in c), the report; the other tiers_* commands are rows of the command
 * table (port/sink/control.c; ks_cmd: port/proto/ks_proto.h). */
int ks_tiers_decode_start(ks_tiers *t, ks_cmd *c);
int ks_tiers_encode_report(const ks_tiers *t, const ks_intern *in, ei_x_buff *x);
/* A row's identity term (kprof_other_identities: the fold row). */
int ks_tiers_encode_identity(ei_x_buff *x, const ks_tiers *t, uint32_t row);
/* tier_full_control.c */
int ks_cmd_tiers_full_report(ks_tiers *t, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_tiers_full_write(ks_tiers *t, ks_cmd *cmd, ei_x_buff *x);

/* tier_agg.c */
int ks_tiers_add_result(ks_tiers *t, const ks_req_result *res);
void ks_tiers_free_rows(ks_tiers *t);
void ks_tiers_clear_rows(ks_tiers *t);

#endif
