/* ks_sample.h: the sampler: a profile of the VM from the kernel's samples of
 * its scheduler threads (doc/sampling.md says what it shows and costs).
 *
 * Every few milliseconds the sink drains each thread's ring (ks_perf.h),
 * then reads what the perf map gained, then the pid of the process each
 * sample ran (r13 in JIT code points to it; its pid is read from the VM's
 * memory now, while the process most likely still lives), and resolves
 * every sample into a stack:
 *
 *   - the Erlang frames of its callchain, outermost first, each named by
 *     the perf map as it was at the sample's time (ks_symbols.h);
 *   - then its leaf when that is not Erlang code: the C function of
 *     beam.smp or a library it ran (`[C]erts_garbage_collect'), or the
 *     JIT's shared code (`[JIT]global::call_bif_shared'), or [unknown];
 *   - a sample with no Erlang frame is its leaf alone;
 *   - a callchain the kernel cut (kernel.perf_event_max_stack) starts with
 *     a TRUNCATED frame.
 *
 * Native frames are MFA ids of the intern table under the reserved modules
 * `[C]' and `[JIT]' (function: the symbol, arity 0), so that every writer
 * and the top table take them as functions; their names are written as
 * `[C]symbol' (port/callpath/names.c). A sample whose process is not
 * known hangs from a root of its thread's kind instead of a process's:
 * [scheduler], [dirty_cpu_scheduler], [dirty_io_scheduler].
 *
 * The sample's process: r13 is trusted in JIT code (the JIT keeps the
 * running process there), and in C code only when it holds a value JIT code
 * had in r13 (a C function called from JIT code that left r13 alone). Where
 * the pid sits in the process's struct, and how the pid is laid out in its
 * word, is learnt at run time, never assumed for an OTP: while the Erlang
 * side runs beacon processes of known pids, the sampler finds the offset
 * from r13 and the bit position of the pid's number that give the beacons'
 * pids in every beacon sample (calibrate.c), then checks every later JIT
 * sample's word (pid_unreadable counts those that are no pid).
 */
#ifndef KS_SAMPLE_H
#define KS_SAMPLE_H

#include <stdio.h>

#include "core/ks_intern.h"
#include "flame/ks_flame.h"
#include "ks_perf.h"
#include "ks_symbols.h"

/* The reserved modules of native frames, and of addresses nothing names. */
#define KS_MOD_C "[C]"
#define KS_MOD_JIT "[JIT]"
#define KS_MOD_UNKNOWN "[unknown]"
/* A native name's bytes at most (an atom holds 255 characters). */
#define KS_NATIVE_MAX 240

/* What the sampler knows of an MFA id: nothing (an Erlang function), a
 * native frame, or a JIT stub a stack ends in (module erts_beamasm, whose
 * normal_exit its first function returns to: left off a stack's root). */
enum { KS_NAT_ERLANG = 0, KS_NAT_NATIVE = 1, KS_NAT_BOTTOM = 2 };

/* What a resolved sample is: where its process came from, if anywhere. */
enum {
  KS_SS_C_ONLY = 1,            /* no Erlang frame: its leaf alone */
  KS_SS_TRUNCATED = 2,         /* the kernel cut its callchain */
  KS_SS_JIT_LEAF = 4           /* it ran JIT code (r13 was the process) */
};

/* One sample, resolved. */
typedef struct ks_sstack {
  uint32_t pid;                /* pid id in the intern table, KS_NONE: not known */
  int thread_kind;             /* KS_THR_* */
  int64_t time;                /* CLOCK_MONOTONIC ns */
  uint32_t n;                  /* frames, outermost first: MFA ids */
  const uint32_t *mfas;
  unsigned flags;              /* KS_SS_* */
} ks_sstack;

/* Called with each resolved sample (a sampled capture adds it to its tree). */
typedef void (*ks_sstack_fn)(void *ctx, const ks_sstack *st);

/* How the pid of a process struct is found: the word at r13 + offset; the
 * pid's number in its bits [shift, shift + num_bits), the serial in the
 * ser_bits above. num_bits and ser_bits are the VM's (kprof_sample asks it:
 * list_to_pid/1 takes numbers below 2^num_bits); offset and shift are
 * calibrated. */
typedef struct ks_playout {
  int known;
  uint32_t offset, shift, num_bits, ser_bits;
} ks_playout;

/* The calibration: beacons of known number and serial, and the votes of
 * their samples for each (offset, shift). */
#define KS_CAL_WORDS 64        /* words read at r13 while calibrating */
#define KS_CAL_SHIFTS 40       /* shifts tried: 0 to 39 */
#define KS_CAL_BEACONS 4
typedef struct ks_calib {
  uint32_t nbeacons;
  uint32_t num[KS_CAL_BEACONS], ser[KS_CAL_BEACONS];
  /* votes[b][k][s]: samples whose word k, its number at shift s, is beacon b's pid */
  uint32_t votes[KS_CAL_BEACONS][KS_CAL_WORDS][KS_CAL_SHIFTS];
  uint32_t samples;            /* JIT samples looked at */
} ks_calib;

/* Beacon samples needed for each beacon before a layout is taken. */
#define KS_CAL_MIN 3

/* One sample's words at r13 (KS_CAL_WORDS of them, ok[k] for those read). */
void ks_calib_sample(ks_calib *c, const ks_playout *lay, const uint64_t *words, const uint8_t *ok);
/* Done when every beacon has at least `min' samples and one (offset, shift)
 * explains all of them (the lowest such offset, then shift): KS_OK and the
 * layout; KS_EINVAL while not. */
int ks_calib_result(const ks_calib *c, uint32_t min, ks_playout *lay);

/* How the sampler reads the VM: live (vm_read.c), or a recording (tests). */
typedef int (*ks_vm_read_fn)(void *ctx, const uint64_t *addrs, uint32_t n, uint64_t *out,
                             uint8_t *ok);

/* A sample waiting for its drain to end (names and pids are read once per
 * drain): its frames are in the sampler's ips, from `at'. */
typedef struct ks_spend {
  int64_t time;
  uint64_t r13;
  uint32_t at, nips;
  uint32_t kind;               /* KS_THR_* */
  uint8_t has_r13, truncated;
  uint8_t jit;                 /* its leaf is JIT code: r13 is its process */
  uint32_t read_at;            /* its words among the drain's reads, KS_NONE: none */
  uint32_t pid;                /* resolved: pid id or KS_NONE */
} ks_spend;

/* The words one drain reads from the VM, in one batch. */
typedef struct ks_sreads {
  uint64_t *addr, *word;
  uint8_t *ok;
  uint32_t n, cap, capw;
} ks_sreads;

typedef struct ks_scounters {
  uint64_t read;               /* samples read from the rings in the window */
  uint64_t samples;            /* of them, in the profile */
  uint64_t lost;               /* samples the kernel lost (a full ring) */
  uint64_t bad;                /* records that could not be read */
  uint64_t erlang;             /* with an Erlang frame */
  uint64_t c_only;             /* with none: their leaf alone */
  uint64_t c_only_known;       /* of them, whose process is known */
  uint64_t truncated;          /* callchains the kernel cut */
  uint64_t unnamed;            /* frames no map or symbol named */
  uint64_t attributed;         /* samples whose process is known */
  uint64_t pid_unreadable;     /* JIT samples whose word at r13 was no pid */
  uint64_t filtered;           /* samples of processes not asked for (option pid) */
  uint64_t limited;            /* samples past the guard's limits */
  uint64_t calibration;        /* samples before the window (the calibration's), not kept */
  uint64_t by_kind[KS_THR_KINDS];
} ks_scounters;

/* A session's recording (sample_record.c). */
typedef struct ks_srec {
  FILE *f;
  int err;
} ks_srec;

/* The set of r13 values JIT code had: a C sample's r13 is trusted when it
 * is one of them. */
#define KS_CP_SET 4096
typedef struct ks_cpset {
  uint64_t v[KS_CP_SET];       /* 0: empty */
  uint32_t n;
} ks_cpset;

typedef struct ks_sampler {
  int active;
  int calibrating;             /* samples go to the calibration, not to stacks */
  int windowed;                /* the window started: samples go to stacks (ks_sampler_window) */
  int ospid;
  uint32_t hz;
  uint64_t period_ns;
  ks_pevents pe;
  ks_pmap map;
  ks_elf elf;
  ks_intern *in;
  uint8_t *native;             /* native[mfa]: KS_NAT_* */
  uint32_t capnative;
  uint32_t unknown;            /* the frame of a leaf nothing names */
  uint32_t nregs;              /* registers in a sample (KS_NREGS, or a recording's) */
  uint32_t max_stack;          /* the kernel's cap on a callchain: a chain that long is cut */
  ks_playout lay;
  ks_calib cal;
  ks_cpset cps;
  unsigned char pid_tmpl[300]; /* a local pid's external term: the node and creation */
  size_t pid_tmpl_n;
  uint32_t *only;              /* pid ids asked for (sorted), NULL: every process */
  uint32_t nonly;
  int64_t from;                /* samples before this time are dropped (the window) */
  ks_spend *pend;
  uint32_t npend, cappend;
  uint64_t *ips;               /* the pending samples' frames, innermost first */
  uint32_t nips, capips;
  uint32_t *frames;            /* one resolved stack, outermost first */
  uint32_t capframes;
  ks_sreads reads;
  ks_vm_read_fn read_words;
  void *read_ctx;
  ks_sstack_fn emit;
  void *emit_ctx;
  int (*admit)(void *ctx, int64_t time);   /* 0: the sample is past a limit */
  void *admit_ctx;
  int64_t last_rescan;
  uint64_t unnamed_at_scan;    /* unnamed frames at the last scan of the mappings */
  ks_scounters k;
  ks_srec rec;                 /* the session's recording (rec.f NULL: none) */
  ks_psample scratch;          /* the record being decoded */
} ks_sampler;

/* CLOCK_MONOTONIC in ns: the samples' clock. */
int64_t ks_sample_clock(void);

void ks_sampler_init(ks_sampler *s, ks_intern *in);
void ks_sampler_free(ks_sampler *s);

/* The sampled MFA of a native name: [C] or [JIT] as its module, its symbol
 * as its function, arity 0 (KS_NONE when the table is full). */
uint32_t ks_sampler_native(ks_sampler *s, const char *module, const char *name);
/* The perf map's and ELF's names as frames (ks_sym_name_fn; ctx: the sampler). */
uint32_t ks_sampler_name(void *ctx, const ks_pname *name);

/* sample_record.c: a session written as it happens (a file of the format
 * the file's top comment describes). */
int ks_srec_open(ks_srec *r, const char *path, const struct ks_sampler *s, const ks_playout *lay);
void ks_srec_ring(ks_srec *r, int kind, const unsigned char *rec, size_t len);
void ks_srec_map(ks_srec *r, int64_t t, const char *p, size_t n);
void ks_srec_words(ks_srec *r, const uint64_t *addr, const uint64_t *word, const uint8_t *ok,
                   uint32_t n);
void ks_srec_drain(ks_srec *r, int64_t t);
void ks_srec_layout(ks_srec *r, const ks_playout *lay, int64_t from);
void ks_srec_only(ks_srec *r, const ks_intern *in, const uint32_t *only, uint32_t n);
int ks_srec_close(ks_srec *r);
/* sample_replay.c: a recording read back into a sampler whose intern table
 * and emit are set: KS_OK, or KS_EBADTERM for a file that is not one or is
 * cut (what came before it is resolved). */
int ks_srec_replay(struct ks_sampler *s, const unsigned char *p, size_t n);

/* sampler.c: a session on a live VM. */
typedef struct ks_sampler_opts {
  int ospid;                   /* the VM's OS process */
  uint32_t hz;                 /* samples a second of each thread's CPU time */
  const unsigned char *pid_tmpl;   /* a local pid's external term (the node's name, creation) */
  size_t pid_tmpl_n;
  ks_playout lay;              /* known (calibrated before), or its num_bits and ser_bits */
  uint32_t nbeacons;           /* lay unknown: the beacons' pids, to calibrate with */
  uint32_t beacon_num[KS_CAL_BEACONS], beacon_ser[KS_CAL_BEACONS];
  const uint32_t *only;        /* pid ids whose samples are kept; NULL: all */
  uint32_t nonly;
  const char *record;          /* write the session to this file (NULL: no) */
} ks_sampler_opts;

/* Why a session could not start: -errno of the first refusal, or these. */
enum { KS_SAMPLE_NO_MAP = -101 };   /* the VM has no perf map: no +JPperf map */

/* Opens an event on every scheduler thread, the perf map and the ELF names:
 * KS_OK; KS_SAMPLE_NO_MAP; KS_PERF_ENOTSUP; -errno (-EACCES: not allowed). */
int ks_sampler_start(ks_sampler *s, const ks_sampler_opts *o);
/* Drains every ring, reads the map's new lines, resolves what was drained;
 * rescans the threads every KS_RESCAN_NS. While calibrating, ends the
 * calibration when the beacons' samples decide it (KS_OK), gives KS_EINVAL
 * while they do not yet. */
#define KS_RESCAN_NS 250000000ll
int ks_sampler_drain(ks_sampler *s, int64_t now);
/* The window starts now: samples before it are dropped. */
void ks_sampler_window(ks_sampler *s, int64_t now);
/* Sampling off, the rings drained a last time; the session's figures stay. */
void ks_sampler_stop(ks_sampler *s, int64_t now);

/* The pid id of the node's process <0.num.ser> (the template's node). */
uint32_t ks_sampler_pid(ks_sampler *s, uint32_t num, uint32_t ser);
/* s->only sorted, as the resolver's binary search wants it. */
void ks_sampler_sort_only(ks_sampler *s);

/* One record of a ring of a thread of `kind' (the sampler's or a recording's). */
void ks_sampler_record(ks_sampler *s, int kind, const unsigned char *rec, size_t len);
/* Every pending sample resolved (names as the map has them now, pids read
 * now) and handed to emit; `now' is when the map was last read. */
void ks_sampler_resolve(ks_sampler *s);

/*
 * The sampling feature of the sink: one session at a time, whose profile is
 * a flame capture (ks_flame.h) of the session's id: sample_write writes its
 * files as flame_write does, flame_members and flame_pids name its
 * processes, as for a trace.
 *
 *   {sample_start, Id, [{Key, Value}]}   ok | {error, Reason}
 *   {sample_status, Id}                  #{phase, layout, samples, ...}
 *   {sample_window, Id}                  ok: the profile starts now (calibration over)
 *   {sample_stop, Id}                    #{...}: sampling off, the last samples in
 *   {sample_write, Id, Dir, Base, [Format]}  as flame_write (port/flame/flame_control.c),
 *                                        the figures above under Info's `sample'
 *
 * (doc/internals-sample.md lists the keys and replies.)
 */
typedef struct ks_sampling {
  ks_sampler smp;
  ks_flame *fl;                /* the captures its profile is one of */
  int64_t id;                  /* its capture's id */
  int has;                     /* a session exists (started, not yet stopped) */
  int64_t stopped_at;          /* when it stopped (0: running) */
  int gone;                    /* it stopped because the VM's process was gone */
  uint32_t roots[KS_THR_KINDS];   /* [no process] roots, by thread kind */
  uint32_t *seen;              /* per MFA: the last sample counted in its inclusive time */
  uint32_t capseen, stamp;
  int (*admit)(void *ctx, int64_t time);   /* the sink's limits (ks_sampler.admit) */
  void *admit_ctx;
} ks_sampling;

void ks_sampling_init(ks_sampling *sm, ks_flame *fl, ks_intern *in);
void ks_sampling_free(ks_sampling *sm);
/* The timer's drain, while a session samples: every 10 ms, or up to every
 * 50 ms at low rates (each wake-up of the sink costs about as much as a few
 * samples; the rings hold far more than 50 ms at any rate). The time between
 * two drains is also the one window in which a sample of code reloaded into
 * the addresses of purged code may be named by the new code (ks_symbols.h). */
int ks_sampling_drain_ms(const ks_sampling *sm);
void ks_sampling_poll(ks_sampling *sm, int64_t now);
static inline int ks_sampling_active(const ks_sampling *sm) {
  return sm->smp.active;
}
/* sample_control.c: the session's sampler, started (or replaying a recording),
 * feeds capture `id' from now on: a session exists, running, with no roots yet. */
void ks_sampling_attach(ks_sampling *sm, int64_t id);
/* sample_feed.c: a resolved sample into the session's capture (ks_sstack_fn). */
void ks_sampling_feed(void *ctx, const ks_sstack *st);
/* sample_control.c: the sample_* commands (port/sink/control.c's table). */
int ks_cmd_sample_start(ks_sampling *sm, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_sample_status(ks_sampling *sm, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_sample_window(ks_sampling *sm, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_sample_stop(ks_sampling *sm, ks_cmd *cmd, ei_x_buff *x);
int ks_cmd_sample_write(ks_sampling *sm, ks_cmd *cmd, ei_x_buff *x);

#endif
