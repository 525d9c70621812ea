/* replay_opts.c: a replay's options (include/ks_options.h's KS_REPLAY lines),
 * from flame_replay's {Key, Value} terms or kprof_sink --replay's flags, and
 * the command line's usage, all from the table: an override is a flame row's
 * decode, bounds and field; only where the files go is decoded here. */
#include <stdlib.h>
#include <unistd.h>
#include <ei.h>

#include "ks_record.h"

typedef struct replay_row {
  const char *key, *flag;
  int how;
} replay_row;

static const replay_row rows[] = {
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc)
#define KS_FORMAT(name, ext, writer, all)
#define KS_REPLAY(key, flag, how) {#key, flag, how},
#include "ks_options.h"
#undef KS_REPLAY
#undef KS_FORMAT
#undef KS_OPTION
};

static const char *const formats[] = {
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc)
#define KS_FORMAT(name, ext, writer, all) #name,
#include "ks_options.h"
#undef KS_FORMAT
#undef KS_OPTION
};

#define NROWS (sizeof(rows) / sizeof(rows[0]))
#define DIR_CAP (sizeof(((ks_fdest *)0)->dir) - 1100)   /* room for the file names */

static const replay_row *by_key(const char *key) {
  size_t k;

  for (k = 0; k < NROWS; k++)
    if (strcmp(rows[k].key, key) == 0)
      return &rows[k];
  return NULL;
}

static const replay_row *by_flag(const char *flag) {
  size_t k;

  for (k = 0; k < NROWS; k++)
    if (rows[k].flag[0] != 0 && strcmp(rows[k].flag, flag) == 0)
      return &rows[k];
  return NULL;
}

void ks_replay_default_opts(ks_replay_opts *ro) {
  memset(ro, 0, sizeof(*ro));
  ks_fopts_default(&ro->o);
}

void ks_replay_override(const ks_replay_opts *ro, ks_fopts *o) {
  size_t k;

  for (k = 0; k < KS_NOPTIONS; k++)
    if (ro->given[k])
      memcpy((char *)o + ks_flame_fields[k].off, (const char *)&ro->o + ks_flame_fields[k].off,
             ks_flame_fields[k].size);
}

/* A non-empty binary with no NUL into out (cap bytes with its NUL). */
static int decode_text(const char *b, int *idx, char *out, size_t cap) {
  int type, size;
  long got;

  if (ei_get_type(b, idx, &type, &size) != 0 || type != ERL_BINARY_EXT || size <= 0 ||
      (size_t)size >= cap || ei_decode_binary(b, idx, out, &got) != 0 ||
      memchr(out, 0, (size_t)got) != NULL)
    return KS_EINVAL;
  out[got] = 0;
  return KS_OK;
}

/* [Format] into d->fmts. */
static int decode_formats(const char *b, int *idx, ks_fdest *d) {
  char atom[MAXATOMLEN];
  int n, k, bit;

  if (ei_decode_list_header(b, idx, &n) != 0)
    return KS_EINVAL;
  for (k = 0; k < n; k++) {
    if (ei_decode_atom(b, idx, atom) != 0 || (bit = ks_write_format_bit(atom)) == 0)
      return KS_EINVAL;
    d->fmts |= bit;
  }
  return n > 0 && ei_decode_list_header(b, idx, &n) != 0 ? KS_EINVAL : KS_OK;
}

static const ks_option *row_of(const replay_row *r) {
  return ks_option_find(KS_M_FLAME, r->key);
}

int ks_replay_opt_term(const char *b, int *idx, ks_fdest *d, ks_replay_opts *ro) {
  char key[MAXATOMLEN];
  const replay_row *r;
  const ks_option *o, *term;
  int at = *idx, ar;

  if (ei_decode_tuple_header(b, idx, &ar) != 0 || ar != 2 || ei_decode_atom(b, idx, key) != 0 ||
      (r = by_key(key)) == NULL)
    return KS_EINVAL;
  switch (r->how) {
  case KS_R_OVERRIDE:
    *idx = at;
    if ((o = row_of(r)) == NULL ||
        ks_option_decode(KS_M_FLAME, ks_flame_fields, b, idx, &ro->o, &term) != KS_OK ||
        term != NULL)
      return KS_EINVAL;
    ro->given[o - ks_options] = 1;
    return KS_OK;
  case KS_R_DIR:
    return decode_text(b, idx, d->dir, DIR_CAP);
  case KS_R_NAME:
    return decode_text(b, idx, d->base, sizeof(d->base)) == KS_OK && strchr(d->base, '/') == NULL
               ? KS_OK
               : KS_EINVAL;
  case KS_R_FORMATS:
    return decode_formats(b, idx, d);
  default:
    return KS_EINVAL;   /* kprof's own (KS_R_ERLANG): never sent */
  }
}

/* A comma-separated list of formats into d->fmts. */
static int parse_formats(const char *arg, ks_fdest *d) {
  char list[256], *tok, *save = NULL;
  int bit;

  if (snprintf(list, sizeof(list), "%s", arg) >= (int)sizeof(list))
    return KS_EINVAL;
  for (tok = strtok_r(list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    if ((bit = ks_write_format_bit(tok)) == 0)
      return KS_EINVAL;
    d->fmts |= bit;
  }
  return d->fmts != 0 ? KS_OK : KS_EINVAL;
}

/* --out DIR, made absolute (the output directory's rules want it so: out_dir.c). */
static int parse_dir(const char *v, ks_fdest *d) {
  char cwd[2048];

  if (v[0] == '/')
    return snprintf(d->dir, DIR_CAP, "%s", v) < (int)DIR_CAP ? KS_OK : KS_EINVAL;
  if (getcwd(cwd, sizeof(cwd)) == NULL)
    return KS_EINVAL;
  return snprintf(d->dir, DIR_CAP, "%s/%s", cwd, v) < (int)DIR_CAP ? KS_OK : KS_EINVAL;
}

static int parse_override(const ks_option *o, const char *v, ks_replay_opts *ro) {
  if (ks_option_parse(o, &ks_flame_fields[o - ks_options], v, &ro->o) != KS_OK)
    return KS_EINVAL;
  ro->given[o - ks_options] = 1;
  return KS_OK;
}

int ks_replay_opt_arg(int argc, char **argv, int *i, ks_fdest *d, ks_replay_opts *ro) {
  const char *flag = argv[*i] + 2, *v;
  const replay_row *r = by_flag(flag);
  const ks_option *o = NULL;
  int no = 0;

  if (r == NULL && strncmp(flag, "no-", 3) == 0 && (r = by_flag(flag + 3)) != NULL)
    no = 1;
  if (r == NULL || (r->how == KS_R_OVERRIDE && (o = row_of(r)) == NULL))
    return KS_EINVAL;
  if (o != NULL && o->type == KS_T_BOOL)   /* a boolean's flag takes no value */
    return parse_override(o, no ? "false" : "true", ro);
  if (no || *i + 1 >= argc)
    return KS_EINVAL;
  v = argv[++*i];
  switch (r->how) {
  case KS_R_OVERRIDE:
    return parse_override(o, v, ro);
  case KS_R_DIR:
    return parse_dir(v, d);
  case KS_R_NAME:
    return strchr(v, '/') == NULL && v[0] != 0 &&
                   snprintf(d->base, sizeof(d->base), "%s", v) < (int)sizeof(d->base)
               ? KS_OK
               : KS_EINVAL;
  default:
    return parse_formats(v, d);
  }
}

/* What an override's flag takes: its bounds, its values, or nothing (a boolean). */
static void usage_value(FILE *f, const ks_option *o) {
  size_t k;
  const char *sep = " ";

  if (o->type == KS_T_INT) {
    fprintf(f, " %.0f..%.0f", o->min, o->max);
    return;
  }
  for (k = 0; k < ks_noption_values && o->type == KS_T_ENUM; k++)
    if (strcmp(ks_option_values[k].key, o->key) == 0) {
      fprintf(f, "%s%s", sep, ks_option_values[k].atom);
      sep = "|";
    }
}

void ks_replay_usage(FILE *f) {
  size_t k, j;

  fprintf(f, "usage: kprof_sink --replay FILE...");
  for (k = 0; k < NROWS; k++) {
    if (rows[k].flag[0] == 0)
      continue;
    fprintf(f, " [--%s", rows[k].flag);
    if (rows[k].how == KS_R_DIR)
      fprintf(f, " DIR");
    else if (rows[k].how == KS_R_NAME)
      fprintf(f, " NAME");
    else if (rows[k].how == KS_R_FORMATS)
      for (j = 0; j < sizeof(formats) / sizeof(formats[0]); j++)
        fprintf(f, "%s%s", j == 0 ? " " : ",", formats[j]);
    else if (row_of(&rows[k]) != NULL)
      usage_value(f, row_of(&rows[k]));
    fprintf(f, "]");
  }
  fprintf(f, "\n");
}
