/* ks_record.h: a flame capture recorded to a file, and the file replayed.
 *
 * The recorder (record_write.c) writes what a capture's processes do, as the
 * sink's flame code sees it: it is the capture's observer (record_control.c,
 * ks_fobserver), given the decoded events ks_flame_event routes to the
 * capture and what the membership commands do (flame_pids, flame_arm, the end), so
 * that the same events fed to a fresh capture with the same options rebuild
 * the same tree, counters and correction: the outputs are byte-identical.
 * The reader (record_read.c) decodes a file into those ops; the replay
 * (replay.c) runs them into a capture of its own and writes its files.
 * The file format, the options and the replies: doc/internals-record.md.
 */
#ifndef KS_RECORD_H
#define KS_RECORD_H

#include "core/ks_out_dir.h"
#include "flame/ks_flame.h"
#include "proto/ks_proto.h"

#define KS_REC_MAGIC "KPROFREC"
#define KS_REC_VERSION 1u
#define KS_REC_HEADER_MAX 4096           /* bytes of a header's options, at most */
#define KS_REC_BLOCK (64 * 1024)         /* ops compressed into one zstd frame */
#define KS_REC_NAME_MAX 1024             /* a name, a pid's node, a call: bytes */

/* Op codes (doc/internals-record.md). An event is KS_ROP_EVENT + its kind. */
enum {
  KS_ROP_DEF_MFA = 0x01,
  KS_ROP_DEF_PID = 0x02,
  KS_ROP_DEF_NAME = 0x03,
  KS_ROP_EVENT = 0x10,
  KS_ROP_ADD_PID = 0x60,
  KS_ROP_SET_CALL = 0x61,
  KS_ROP_ARM = 0x62,
  KS_ROP_PROC = 0x63,
  KS_ROP_FINISH = 0x64,
  KS_ROP_TRAILER = 0x65
};
/* An event op's `has' byte. */
enum {
  KS_RHAS_PID = 0x01,
  KS_RHAS_MFA = 0x02,
  KS_RHAS_OTHER = 0x04,
  KS_RHAS_CALLER = 0x08,
  KS_RHAS_NAME = 0x10,
  KS_RHAS_TS = 0x20,
  KS_RHAS_FLAGS = 0x40,
  KS_RHAS_TRIGGER = 0x80
};
/* A proc op's state bits: the capture's, KS_FPROC_* (port/flame/ks_flame.h). */
/* The header's option keys: KS_RKEY_<key> = its id (include/ks_options.h's
 * KS_RECORD_KEY lines). */
enum {
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc)
#define KS_FORMAT(name, ext, writer, all)
#define KS_RECORD_KEY(id, key) KS_RKEY_##key = (id),
#include "ks_options.h"
#undef KS_RECORD_KEY
#undef KS_FORMAT
#undef KS_OPTION
  KS_RKEY_NONE = 0
};

/* record_keys.c: a header key's row and how its value is written. */
typedef struct ks_record_key {
  unsigned id;
  const ks_option *row;           /* its flame row */
  const ks_option_field *field;   /* where ks_fopts holds it */
} ks_record_key;
/* The i-th key in the order written (KS_OK), KS_EINVAL past the last. */
int ks_record_key_at(size_t i, ks_record_key *k);
/* The key of an id read from a file: KS_OK, or KS_EINVAL for an id the table lacks. */
int ks_record_key_of(unsigned id, ks_record_key *k);
/* Whether the key's value is an MFA id (a KS_T_TERM row: trigger, hide). */
static inline int ks_record_key_is_mfa(const ks_record_key *k) {
  return k->row->type == KS_T_TERM;
}
/* A number key's value as written: its field, zigzagged when the row is signed. */
uint64_t ks_record_key_get(const ks_record_key *k, const ks_fopts *o);
/* A number key's value read: in the row's bounds (0 too for a row with no
 * default: off), stored into o: KS_OK, else KS_EINVAL. */
int ks_record_key_set(const ks_record_key *k, ks_fopts *o, uint64_t v);

/* LEB128 and zigzag, shared by the writer and the reader. */
static inline size_t ks_record_put_varint(unsigned char *p, uint64_t v) {
  size_t n = 0;

  while (v >= 0x80) {
    p[n++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (unsigned char)v;
  return n;
}

static inline uint64_t ks_record_zigzag(int64_t v) {
  return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int64_t ks_record_unzigzag(uint64_t v) {
  return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* The header's u32s, little-endian whatever the host. */
static inline void ks_record_put_u32le(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}

static inline uint32_t ks_record_get_u32le(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* record_write.c: the recorder of one capture. */
typedef struct ks_record ks_record;

/* Why a recording could not start: an errno (KS_DIR_OK with err), or the
 * directory refused (out_dir.c's reasons); err ENOTSUP: built without it. */
typedef struct ks_record_refusal {
  int err;
  ks_out_dir dir;
} ks_record_refusal;

/* Creates path (O_EXCL, O_NOFOLLOW, 0600, its directory checked and not made)
 * and writes its header from c's options: KS_OK, or KS_EINVAL with *why set. */
int ks_record_open(ks_record **out, const char *path, const ks_fcap *c, const ks_intern *in,
                ks_record_refusal *why);
/* One event routed to the capture (trigger: a meta call carrying its payload). */
void ks_record_event(ks_record *r, const ks_decoded *d, int trigger);
void ks_record_add_pid(ks_record *r, uint32_t pid, const char *name, size_t n);
void ks_record_set_call(ks_record *r, uint32_t pid, const char *call, size_t n);
void ks_record_arm(ks_record *r);
void ks_record_finish(ks_record *r, int has_end, int64_t end_ts);
/* Pid ids being released (port/sink/pid_reclaim.c): their names are defined again. */
void ks_record_forget(ks_record *r, const uint8_t *dead, uint32_t n);
/* Writes what is buffered and the trailer, and closes the file (kept for its status). */
void ks_record_close(ks_record *r);
void ks_record_free(ks_record *r);

typedef struct ks_record_status {
  const char *path;
  const char *const *files;    /* the files kept, oldest first */
  uint32_t nfiles;
  uint64_t bytes, events, cut_events;
  int err;                     /* the errno that stopped it, 0: none */
} ks_record_status;
void ks_record_get_status(const ks_record *r, ks_record_status *st);

/* record_read.c: the reader of one file, op by op. */
typedef struct ks_rread ks_rread;

/* What an op says, ids the file's own. */
typedef struct ks_rop {
  int op;                      /* KS_ROP_*; KS_ROP_EVENT for every event */
  ks_event ev;                 /* an event (ev.kind) */
  int trigger;
  uint32_t pid, state;         /* add_pid, set_call, proc */
  const char *text, *text2;    /* a name or call (add_pid, set_call, proc: name, call) */
  size_t text_n, text2_n;
  ks_mfa_view mfa;             /* def_mfa */
  ks_pid_view pidv;            /* def_pid */
  const unsigned char *raw;    /* def_name: the atom's ETF bytes */
  size_t raw_n;
  int has_end;                 /* finish */
  int64_t end_ts;
  uint64_t events, cut_events; /* trailer */
} ks_rop;

/* Reader errors (ks_rread_error): KS_OK, or one of these. */
enum {
  KS_RERR_TRUNCATED = 1,
  KS_RERR_MAGIC,
  KS_RERR_VERSION,
  KS_RERR_HEADER,
  KS_RERR_CORRUPT,
  KS_RERR_OPEN,                /* errno in ks_rread_errno */
  KS_RERR_UNSUPPORTED          /* a sink built without recording (KS_NO_RECORD) */
};

/* Reads the header of a file: *o gets its options (from the defaults), the
 * trigger and hide MFAs interned into in. NULL only without memory; a reader
 * whose header failed has ks_rread_error set and gives no ops. */
ks_rread *ks_rread_open(const char *path, ks_intern *in, ks_fopts *o);
/* The same from bytes in memory (the fuzzer); data must outlive the reader. */
ks_rread *ks_rread_open_mem(const void *data, size_t n, ks_intern *in, ks_fopts *o);
/* The next op: 1 and *op (its texts valid until the next call), 0 at the end
 * (the trailer read) or on an error (ks_rread_error). */
int ks_rread_next(ks_rread *r, ks_rop *op);
int ks_rread_error(const ks_rread *r);
int ks_rread_errno(const ks_rread *r);
void ks_rread_close(ks_rread *r);
/* The error's atom: truncated, bad_magic, ... (doc/internals-record.md). */
const char *ks_rread_error_name(int err);

/* replay.c: files replayed into a capture of their own. */
typedef struct ks_replay {
  ks_intern in;
  ks_flame fl;
  ks_fcap *c;                  /* NULL until a header was read */
  uint64_t events;             /* event ops replayed */
  int truncated;               /* the files ended before their trailer, or were corrupt */
  int err;                     /* KS_RERR_* of the first file that failed, 0: none */
  int err_errno;
  const char *err_path;        /* that file */
} ks_replay;

/* A replay's options (include/ks_options.h's KS_REPLAY lines): the values of
 * the overrides given, in a ks_fopts; a row not given keeps the recorded value. */
typedef struct ks_replay_opts {
  ks_fopts o;
  unsigned char given[KS_NOPTIONS];   /* row k of ks_options given */
} ks_replay_opts;

/* replay_opts.c */
void ks_replay_default_opts(ks_replay_opts *ro);
/* The overrides given into the first file's options. */
void ks_replay_override(const ks_replay_opts *ro, ks_fopts *o);
/* One {Key, Value} of flame_replay's options at *idx into d and ro: KS_OK or KS_EINVAL. */
int ks_replay_opt_term(const char *b, int *idx, ks_fdest *d, ks_replay_opts *ro);
/* One command-line flag (argv[*i], "--flag") and its value (argv[*i + 1], taken:
 * *i moves past it; a boolean row's flag alone is true, --no-flag false). */
int ks_replay_opt_arg(int argc, char **argv, int *i, ks_fdest *d, ks_replay_opts *ro);
/* kprof_sink --replay's usage line, from the table. */
void ks_replay_usage(FILE *f);

/* Replays the files in order into rp (ks_replay_free frees it): KS_OK when a
 * capture could be made (its outputs may still be partial: rp->truncated),
 * KS_EINVAL when the first file's header could not be read, KS_ENOMEM. */
int ks_replay_files(ks_replay *rp, const char *const *paths, size_t n, const ks_replay_opts *ro);
/* The same from one file's bytes in memory. */
int ks_replay_mem(ks_replay *rp, const void *data, size_t n, const ks_replay_opts *ro);
void ks_replay_free(ks_replay *rp);

/* record_control.c: a recording as the observer of a capture's events
 * (ks_fobserver, port/flame/ks_flame.h). ks_record_capture records c to path
 * from now: KS_OK, or KS_EINVAL with *why saying why. ks_record_attach is
 * flame_start's record option (a ks_fobserve_fn, the binary at b + at): KS_OK,
 * or KS_EINVAL with {error, badarg} or {error, {record_failed, Path, Reason}}
 * in x. A recording's keys in its capture's Info:
 * record => #{path, files, bytes, events, cut_events, error}. */
int ks_record_capture(ks_flame *fl, ks_fcap *c, const ks_intern *in, const char *path,
                      ks_record_refusal *why);
int ks_record_attach(ks_flame *fl, ks_fcap *c, const ks_intern *in, const char *b, int at,
                     ei_x_buff *x);
/* The capture's recording, or NULL. */
const ks_record *ks_record_of(const ks_fcap *c);
/* {flame_replay, Paths, Opts} (doc/internals-record.md). */
int ks_cmd_flame_replay(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x);
/* {record_header, Path}: {ok, #{Key => Value}}, the recording's options (its
 * header's keys, each as its row's type), or {error, {replay_failed, Path, Reason}}. */
int ks_cmd_record_header(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x);
/* A replay's files (ks_flame_write_files) with replay => #{...} in Info, or
 * {error, {replay_failed, Path, Reason}} when it made no capture. */
int ks_replay_write(ks_replay *rp, const ks_fdest *d, ei_x_buff *x);
/* replay_cli.c: kprof_sink --replay FILE... (argv after --replay): the exit code. */
int ks_replay_main(int argc, char **argv);

#endif
