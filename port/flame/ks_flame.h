/* ks_flame.h: flame-graph captures in the sink (doc/internals-flame.md says what they compute).
 *
 * A capture is a call-path graph (port/callpath/ks_callpath.h) built from
 * the trace events of its processes: which processes belong to it (by
 * command, by a trigger call, by being spawned), their events routed to it,
 * and its end. Its files are the writers' (port/write/), its commands
 * flame_control.c's.
 */
#ifndef KS_FLAME_H
#define KS_FLAME_H

#include <stdio.h>

#include "callpath/ks_callpath.h"
#include "core/ks_consumer.h"
#include "proto/ks_proto.h"
#include "write/ks_write.h"

#define KS_FLAME_MAX 32   /* captures at once: one bit each in the pid routing mask */

/* An observer of a capture's event stream (its recording, port/record/): it is
 * given what the capture is given, just before the capture takes it, from the
 * moment it is attached (ks_flame_observe) to the capture's end: the events
 * routed to the capture and what the commands do to it. A capture has one at
 * most; self NULL: none. The capture frees it with itself. */
typedef struct ks_fobserver {
  void *self;
  /* An event the capture is given; trigger: a meta call carrying its payload
   * (the event by which a process joins a flame_capture). */
  void (*event)(void *self, const ks_decoded *d, int trigger);
  void (*add_pid)(void *self, uint32_t pid, const char *name, size_t n);
  void (*set_call)(void *self, uint32_t pid, const char *call, size_t n);
  void (*arm)(void *self);
  /* The capture's end: nothing more comes but forget_pids, put_info and free. */
  void (*finish)(void *self, int has_end, int64_t end_ts);
  /* Pid ids being released (port/sink/pid_reclaim.c). */
  void (*forget_pids)(void *self, const uint8_t *dead, uint32_t n);
  /* Its keys in flame_status's reply and flame_write's Info. */
  void (*put_info)(const void *self, ks_map *m);
  void (*free)(void *self);
} ks_fobserver;

typedef struct ks_fcap {
  int used;
  int stopped;                 /* finished: takes no more events */
  ks_callpath cp;              /* its graph: options, tree, processes, counters */
  uint32_t last_pid, last_proc;   /* the last event's process (the next is most often it) */
  ks_fobserver obs;            /* what watches its events (its recording), self NULL: none */
} ks_fcap;

typedef struct ks_flame ks_flame;

/* What flame_start's `record' option attaches to the new capture c: the option's
 * value is the term at b + at; the reply, ok or the error, is encoded into x;
 * KS_OK when an observer was attached (else the capture is dropped). The sink
 * registers the recording's (port/sink/sink.c: ks_record_attach); NULL: the
 * option is refused (badarg). */
typedef int (*ks_fobserve_fn)(ks_flame *fl, ks_fcap *c, const ks_intern *in, const char *b,
                              int at, ei_x_buff *x);

struct ks_flame {
  int active;                  /* captures in use */
  ks_switch sw;                /* on while any is (port/core/ks_consumer.h) */
  ks_fcap cap[KS_FLAME_MAX];
  uint32_t *mask;              /* pid id -> bit per capture */
  uint32_t mask_cap;
  uint32_t observed;           /* a bit per capture with an observer (and not finished) */
  ks_fobserve_fn record;       /* flame_start's record option (above), kept by a free */
};

void ks_flame_init(ks_flame *fl);
void ks_flame_free(ks_flame *fl);
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
/* Attaches obs to a capture in use that has none, from now (above). */
void ks_flame_observe(ks_flame *fl, ks_fcap *c, const ks_fobserver *obs);
/* flame_arm: trigger calls count from now (observed). */
void ks_flame_arm(ks_fcap *c);
/* A process's state bits, as ks_flame_restore_proc takes them (a recording's
 * proc ops carry them, port/record/ks_record.h). */
enum {
  KS_FPROC_ARMED = 1,
  KS_FPROC_CHILD = 2,
  KS_FPROC_BOTTOM = 4,
  KS_FPROC_DEAD = 8,
  KS_FPROC_NAMED = 16
};
unsigned ks_flame_proc_state(const ks_fproc *p);
/* A process already in the capture when a rotated record file began
 * (port/record/replay.c): added with its state bits (KS_FPROC_*), names and an
 * empty stack, unless it is in. */
void ks_flame_restore_proc(ks_flame *fl, ks_fcap *c, uint32_t pid, unsigned state,
                           const char *name, size_t name_n, const char *call, size_t call_n);

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
 * same rows, port/sample/sample_control.c). */
int ks_flame_decode_term(ks_intern *in, const char *key, const char *b, size_t len, int *idx,
                         ks_fopts *o);
/* More keys for a write's Info (a replay's `replay' map). */
typedef struct ks_flame_extra {
  void (*put)(ks_map *m, const void *ctx);
  const void *ctx;
} ks_flame_extra;
/* Corrects, orders and writes a capture's files (directly or through its
 * view), with its reply in x; extra may be NULL. */
int ks_flame_write_files(const ks_intern *in, ks_fcap *c, const ks_fdest *d, ei_x_buff *x,
                         const ks_flame_extra *extra);

#endif
