/* ks_tiers.h: tiered request profiling in the sink (doc/tiers.md says what it computes). */
#ifndef KS_TIERS_H
#define KS_TIERS_H

#include "ks_decode.h"
#include "ks_hist.h"

#define KS_TIER_MAX 32

/* What an MFA is to the tier profiler. */
enum {
  KS_ROLE_UNSEEN = -4,   /* not classified yet */
  KS_ROLE_NONE = -3,     /* traced but in no tier (markers' own frames count here) */
  KS_ROLE_START = -2,    /* kprof_mark:start/1: opens a request */
  KS_ROLE_STOP = -1      /* kprof_mark:stop/0: ends it */
  /* >= 0: a tier index */
};

typedef struct ks_tier_spec {
  char *m, *f;           /* UTF-8; f == NULL: any function */
  int arity;             /* -1: any arity */
  int role;              /* tier index or KS_ROLE_START / KS_ROLE_STOP */
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
} ks_tier_opts;

/* One event of a request, buffered until the request is finalised. */
typedef struct ks_req_ev {
  int64_t ts;
  uint32_t pid, mfa, caller, seq;
  uint8_t kind;                 /* KS_EV_CALL or KS_EV_RETURN_TO */
  int8_t role;
  uint16_t pad;
} ks_req_ev;

/* A frame of the walk: one traced call on a process's stack. */
typedef struct ks_frame {
  uint32_t mfa, base;           /* base: the caller the frame's chain returns to */
  uint32_t chain, seq;
  int role;
} ks_frame;

typedef struct ks_frames {
  ks_frame *v;
  uint32_t n, cap;
  uint32_t next_chain;
} ks_frames;

typedef struct ks_req {
  unsigned char *label;         /* the seq_trace label's bytes: the key */
  uint32_t label_len;
  uint64_t hash;
  uint32_t gen;                 /* bumped each time the slot is reused */
  uint32_t identity;            /* row */
  uint32_t entry_pid;
  int64_t start_ts, end_ts;
  int used, ended, by_entry, truncated, abandoned;
  ks_frames entry_stack;        /* by_entry: the entry process's frames, to see the end */
  ks_req_ev *ev;
  uint32_t n_ev, cap_ev;
  uint32_t next_ended;          /* FIFO of ended requests, by end */
} ks_req;

/* What one finalised request adds up to. */
typedef struct ks_req_result {
  uint32_t identity, entry_pid;
  int64_t start_ts;
  uint64_t wall;
  uint64_t calls[KS_TIER_MAX];
  uint64_t self[KS_TIER_MAX + 1];   /* [ntiers] is `other` */
  uint64_t incl[KS_TIER_MAX];
} ks_req_result;

typedef struct ks_tier_col {
  uint64_t calls;
  ks_hist self, incl;
} ks_tier_col;

typedef struct ks_tier_row {
  uint64_t requests;
  ks_tier_col *cols;            /* ntiers + 2: tiers, other, wall (self only) */
} ks_tier_row;

typedef struct ks_tiers {
  int active;
  int ntiers;
  ks_tier_spec *specs;
  uint32_t nspecs;
  ks_tier_opts o;
  int8_t *roles;                /* per MFA id; KS_ROLE_UNSEEN until classified */
  uint8_t *is_entry;
  uint32_t roles_cap;
  /* In-flight requests: slots, and an open-addressing index of label -> slot + 1. */
  ks_req *reqs;
  uint32_t *index;
  uint32_t index_mask;
  uint32_t n_inflight;
  uint32_t *free_slots, n_free;
  uint32_t ended_head, ended_tail;   /* slot + 1, 0 = none */
  /* Per pid id: the request its last labelled call belonged to. */
  uint32_t *pid_slot, *pid_gen;
  uint32_t pid_cap;
  uint32_t seq;
  uint32_t sweep_tick;          /* events since start: stale requests are swept every 64k */
  int64_t last_ts;
  /* Identities: raw bytes -> row. Row max_identities is the fold row. */
  ks_itab identities;
  uint32_t n_identities;
  ks_tier_row *rows;
  ks_req_result *slow;
  uint32_t n_slow;
  /* Scratch of the walk. */
  ks_frames *stacks;
  uint32_t *stack_pids;
  uint32_t n_stacks, cap_stacks;
  /* Counters (doc/tiers.md). */
  uint64_t requests, events, abandoned, truncated_requests, dropped_requests,
      dropped_events, orphan_events, folded_requests;
  int64_t first_ts;
} ks_tiers;

void ks_tiers_init(ks_tiers *t);
void ks_tiers_free(ks_tiers *t);
void ks_tiers_default_opts(ks_tier_opts *o);
/* Takes ownership of specs (freed by ks_tiers_free / the next start). */
int ks_tiers_start(ks_tiers *t, const ks_intern *in, ks_tier_spec *specs, uint32_t nspecs,
                   int ntiers, const ks_tier_opts *o);
void ks_tiers_stop(ks_tiers *t);
void ks_tiers_reset(ks_tiers *t);
/* One decoded trace event. */
void ks_tiers_event(ks_tiers *t, const ks_intern *in, const ks_decoded *d);
/* Finalises ended requests: all of them if `all`, else those past their grace. */
void ks_tiers_flush(ks_tiers *t, int all);

/* tier_walk.c: one request's events into a result. */
int ks_tiers_walk(ks_tiers *t, ks_req *r, ks_req_result *res);
/* The chain rules shared by the walk and the entry-end watch. */
int ks_frames_call(ks_frames *s, uint32_t mfa, uint32_t caller, int role, uint32_t seq);
uint32_t ks_frames_return_to(ks_frames *s, uint32_t to);
void ks_frames_free(ks_frames *s);

/* tier_agg.c */
int ks_tiers_add_result(ks_tiers *t, const ks_req_result *res);
void ks_tiers_free_rows(ks_tiers *t);
void ks_tiers_clear_rows(ks_tiers *t);

#endif
