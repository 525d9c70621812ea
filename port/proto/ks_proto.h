/* ks_proto.h: the sink's protocol (port/proto/): what a command's handler is
 * given, the encoders every reply and alert is built with, and the option
 * table's rows. It names no feature: the command table and the sink's own
 * commands are in port/sink/control.c, each feature's handlers in its folder
 * (tiers/, flame/), declared in its header.
 *
 * A command is an atom or a tuple {Name, Args...} (doc/internals-protocol.md); a command
 * whose name and arity match no row of the table is answered
 * {error, {unknown_command, Cmd}}.
 *
 * Replies are erl_interface's ei_x_* buffers. A map is built with ks_map,
 * which counts its keys as they are added and writes the count into the
 * header at the end (a map header is always MAP_EXT and a 4-byte arity in
 * ei, so the bytes are those of a header written first with the right count).
 */
#ifndef KS_PROTO_H
#define KS_PROTO_H

#include <ei.h>

#include "core/ks_intern.h"
#include "core/ks_out_dir.h"

/* A command as its handler gets it: the command's bytes, idx just past its
 * name (the handler decodes its arguments from there), the tuple's arity (0
 * for a bare atom) and the intern table that names MFAs and pids. A handler
 * encodes the whole reply into its ei_x_buff and returns nonzero if encoding
 * failed. */
typedef struct ks_cmd {
  ks_slice term;
  int idx;
  int arity;
  ks_intern *in;
} ks_cmd;

/* encode.c: the pieces replies are made of. Each returns nonzero on failure. */
int ks_enc_error(ei_x_buff *x, const char *reason);              /* {error, Reason} */
int ks_enc_error2(ei_x_buff *x, const char *tag, const char *v); /* {error, {Tag, V}} */
int ks_enc_ok_or_error(ei_x_buff *x, int rc);  /* ok, {error, enomem} or {error, badarg} */
int ks_enc_unknown_command(ei_x_buff *x, ks_slice cmd);          /* {error, {unknown_command, Cmd}} */
int ks_enc_atom_utf8(ei_x_buff *x, const char *s);
/* {M, F, Arity}, or undefined for an id the intern table does not hold. */
int ks_enc_mfa(ei_x_buff *x, const ks_intern *in, uint32_t mfa);
/* The pid, or undefined (KS_NONE, a port, an id the table does not hold). */
int ks_enc_pid(ei_x_buff *x, const ks_intern *in, uint32_t id);
/* An errno's name as Erlang's file module gives it (enospc, eacces, ...), or
 * `unknown' for one the table does not hold. */
int ks_enc_errno(ei_x_buff *x, int err);
/* Why a directory was refused (out_dir.c), r->why not KS_DIR_ERRNO: relative,
 * symlink, not_directory, {owner, Uid} or {writable, "Mode"} (octal). */
int ks_enc_dir_why(ei_x_buff *x, const ks_out_dir *r);

/* args.c: a binary at *idx copied into out, NUL-terminated (*n bytes, NULs
 * inside it kept: the caller refuses them where they matter): KS_OK, or
 * KS_EINVAL when it is no binary or does not fit in cap. */
int ks_arg_bin(const char *b, int *idx, char *out, size_t cap, size_t *n);

/* A map under construction: ks_map_begin, then keys, then ks_map_end. */
typedef struct ks_map {
  ei_x_buff *x;
  int at;        /* the header's offset in x */
  uint32_t n;    /* keys so far */
  int e;         /* an encoding failed */
} ks_map;
void ks_map_begin(ks_map *m, ei_x_buff *x);
/* Key => value; ks_map_key encodes the key only, the caller its value next. */
void ks_map_u64(ks_map *m, const char *key, uint64_t v);
void ks_map_i64_or_undefined(ks_map *m, const char *key, int64_t v, int64_t undefined);
void ks_map_bool(ks_map *m, const char *key, int v);
void ks_map_atom(ks_map *m, const char *key, const char *v);
void ks_map_key(ks_map *m, const char *key);
/* Writes the count into the header; nonzero if anything failed. */
int ks_map_end(ks_map *m);

/* options.c: the sink's view of the option table (include/ks_options.h).
 * ks_option_find gives the row of a key the sink takes in a start command
 * (KS_BY_SINK or KS_BY_BOTH); ks_option_check says whether an integer or
 * boolean value is within the row's bounds. The handlers in tier_control.c
 * and flame_control.c only decode and store: the bounds are the table's. */
#define KS_INF 1e300   /* no bound; doubles hold every integer bound exactly */

enum { KS_M_TIERS = 1, KS_M_FLAME = 2, KS_M_GUARD = 4, KS_M_CALLS = 8, KS_M_SAMPLE = 16 };
enum { KS_T_INT, KS_T_NUM, KS_T_NUMX, KS_T_INTINF, KS_T_BOOL, KS_T_TERM, KS_T_ENUM };
/* How a replay takes its option (KS_REPLAY rows). */
enum { KS_R_OVERRIDE, KS_R_DIR, KS_R_NAME, KS_R_FORMATS, KS_R_ERLANG };
enum { KS_BY_ERLANG = 1, KS_BY_SINK = 2, KS_BY_BOTH = 3 };

typedef struct ks_option {
  unsigned modes;
  const char *key;
  int type;
  double min, max;
  const char *def;   /* an Erlang term's text; "" when none */
  int by;
  const char *doc;
} ks_option;

extern const ks_option ks_options[];
extern const size_t ks_noptions;

/* The row of key in a start command of mode (KS_M_TIERS, KS_M_FLAME), or NULL. */
const ks_option *ks_option_find(unsigned mode, const char *key);
/* KS_OK when v is within the row's bounds (KS_T_INT, KS_T_BOOL) or one of its
 * values (KS_T_ENUM), else KS_EINVAL. */
int ks_option_check(const ks_option *o, long long v);

/* An enum row's value (KS_VALUE lines): the key's atoms and what the sink stores. */
typedef struct ks_option_value {
  const char *key, *atom;
  int value;
} ks_option_value;
extern const ks_option_value ks_option_values[];
extern const size_t ks_noption_values;
/* The value of atom for key: KS_OK and *v, or KS_EINVAL when key has no such atom. */
int ks_option_value_of(const char *key, const char *atom, long long *v);

/* The rows of the table, as a constant (a feature's fields array has as many). */
enum {
  KS_NOPTIONS = 0
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc) + 1
#define KS_FORMAT(name, ext, writer, all)
#include "ks_options.h"
#undef KS_OPTION
#undef KS_FORMAT
};

/* Where a row's value goes in a feature's options struct: row k of ks_options
 * is fields[k] of the feature's array, built from the KS_FIELD of the table's
 * lines (proto/ks_option_fields.h). size 0: no field (another feature's row, or a
 * KS_T_TERM row the feature's own decoder takes). */
typedef struct ks_option_field {
  uint32_t off, size;   /* size: 4 or 8 bytes (uint32_t, int, uint64_t, int64_t) */
  uint64_t scale;       /* the field holds the value times scale */
} ks_option_field;

/* The fields array's initialiser lines for the feature whose struct is `type`:
 *   #define KS_FIELD_flame(m, scale) KS_OPTION_FIELD(ks_fopts, m, scale)
 *   #define KS_FIELD_tiers(m, scale) KS_OPTION_NO_FIELD
 *   #define KS_FIELD_sample(m, scale) KS_OPTION_NO_FIELD
 *   static const ks_option_field fields[] = {
 *   #include "ks_option_fields.h"
 *   };  */
#define KS_OPTION_FIELD(type, m, scale) \
  {(uint32_t)offsetof(type, m), (uint32_t)sizeof(((type *)0)->m), (scale)}
#define KS_OPTION_NO_FIELD {0, 0, 0}

/* The features' arrays (port/callpath/graph.c, port/tiers/tier_opts.c; the
 * sampler's is port/sample/sample_control.c's own). */
extern const ks_option_field ks_flame_fields[], ks_tier_fields[];

/* One {Key, Value} of a start command of mode at *idx: a row with a field is
 * checked against the table's bounds (an enum's atom against its values) and
 * stored into opts (*term NULL); a KS_T_TERM row is left at its value for the
 * feature's decoder (*term: the row). KS_EINVAL for an unknown key, a wrong
 * type or a value out of bounds. */
int ks_option_decode(unsigned mode, const ks_option_field *fields, const char *b, int *idx,
                     void *opts, const ks_option **term);
/* The same from text (a command line's value): an integer, true | false, or an
 * enum's atom, for row o (a row with a field) into opts. */
int ks_option_parse(const ks_option *o, const ks_option_field *f, const char *text, void *opts);
/* A field's value (its size's unsigned integer), and one stored: v times the
 * field's scale, saturated. */
uint64_t ks_option_load(const void *opts, const ks_option_field *f);
void ks_option_store(void *opts, const ks_option_field *f, long long v);
/* Every field of mode set to its row's DEFAULT (rows without one are left). */
void ks_option_defaults(unsigned mode, const ks_option_field *fields, void *opts);
/* The row's DEFAULT as an integer (true 1, false 0, an enum's value); KS_EINVAL
 * when it has none. */
int ks_option_default(const ks_option *o, long long *v);

#endif
