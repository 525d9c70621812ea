/* replay_cli.c: kprof_sink --replay FILE... : a recording's files written with no VM.
 *
 *   kprof_sink --replay FILE... [--out DIR] [--name NAME] [--format folded,callgrind,...]
 *              [--group pid|name|initial_call|all] [--fold-recursion] [--names erlang|elixir]
 *              [--top N] [--max-bytes N]
 *
 * Writes the files as flame_replay does (record_control.c) and prints each
 * one's path on a line, then with --top the table. Exit 0; 1 when a file is
 * truncated or corrupt (the outputs of what was read are still written) or
 * nothing could be written; 2 on bad arguments (usage on stderr).
 */
#include <stdlib.h>
#include <unistd.h>
#include <ei.h>

#include "ks_record.h"
#include "proto/ks_proto.h"

#define MAX_FILES 1024

static int usage(void) {
  fprintf(stderr, "usage: kprof_sink --replay FILE... [--out DIR] [--name NAME] "
                  "[--format folded,perf,speedscope,svg,callgrind] "
                  "[--group pid|name|initial_call|all] [--fold-recursion] "
                  "[--names erlang|elixir] [--top N] [--max-bytes N]\n");
  return 2;
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

static int parse_num(const char *s, long long lo, long long hi, long long *v) {
  char *end;

  *v = strtoll(s, &end, 10);
  return *end == 0 && end != s && *v >= lo && *v <= hi ? KS_OK : KS_EINVAL;
}

/* --out DIR, made absolute (the output directory's rules want it so: out_dir.c). */
static int out_dir(const char *v, ks_fdest *d) {
  char cwd[2048];
  size_t cap = sizeof(d->dir) - 1100;

  if (v[0] == '/')
    return snprintf(d->dir, cap, "%s", v) < (int)cap ? KS_OK : KS_EINVAL;
  if (getcwd(cwd, sizeof(cwd)) == NULL)
    return KS_EINVAL;
  return snprintf(d->dir, cap, "%s/%s", cwd, v) < (int)cap ? KS_OK : KS_EINVAL;
}

/* One option and its value (argv[*i + 1]): KS_OK or KS_EINVAL. */
static int parse_opt(int argc, char **argv, int *i, ks_fdest *d, ks_replay_opts *ro) {
  const char *o = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  long long n;

  if (strcmp(o, "--fold-recursion") == 0)
    return ro->fold_recursion = 1, KS_OK;
  if (v == NULL)
    return KS_EINVAL;
  (*i)++;
  if (strcmp(o, "--out") == 0)
    return out_dir(v, d);
  if (strcmp(o, "--name") == 0)
    return strchr(v, '/') == NULL && v[0] != 0 &&
                   snprintf(d->base, sizeof(d->base), "%s", v) < (int)sizeof(d->base) ? KS_OK
                                                                               : KS_EINVAL;
  if (strcmp(o, "--format") == 0)
    return parse_formats(v, d);
  if (strcmp(o, "--group") == 0 || strcmp(o, "--names") == 0)
    return ks_replay_opt_atom(o + 2, v, ro);
  if (strcmp(o, "--top") == 0 && parse_num(v, 0, 100000, &n) == KS_OK)
    return ro->top = n, KS_OK;
  if (strcmp(o, "--max-bytes") == 0 && parse_num(v, 1 << 16, 1LL << 40, &n) == KS_OK)
    return ro->max_bytes = (uint64_t)n, KS_OK;
  return KS_EINVAL;
}

/* The top table of a replayed capture, most self time first. */
static void print_top(const ks_replay *rp) {
  const ks_fcap *c = rp->c;
  uint32_t n, k;
  ks_fmfa *rows = ks_ffun_rows(&c->cp.fc, c->cp.o.hide, &n);
  char name[1024];

  printf("%-60s %12s %14s %14s\n", "function", "calls", "incl_us", "self_us");
  for (k = 0; k < n && k < c->cp.o.top; k++) {
    ks_callpath_frame_name(&c->cp, &rp->in, KS_FR(KS_FR_MFA, rows[k].mfa), name, sizeof(name));
    printf("%-60s %12llu %14llu %14llu\n", name, (unsigned long long)rows[k].calls,
           (unsigned long long)(rows[k].incl / 1000), (unsigned long long)(rows[k].self / 1000));
  }
  free(rows);
}

/* The reply ({ok, [Path], Info} or an error) to stdout and stderr: the exit code. */
static int report(const ks_replay *rp, const ei_x_buff *x) {
  char atom[MAXATOMLEN], path[4096 + 256], *text = NULL;
  int idx = 0, ar, n, k, bad = 0;
  long got;

  ei_decode_version(x->buff, &idx, &k);
  if (ei_decode_tuple_header(x->buff, &idx, &ar) != 0 || ei_decode_atom(x->buff, &idx, atom) != 0 ||
      strcmp(atom, "ok") != 0 || ei_decode_list_header(x->buff, &idx, &n) != 0) {
    idx = 0;
    ei_decode_version(x->buff, &idx, &k);
    ei_s_print_term(&text, x->buff, &idx);
    fprintf(stderr, "kprof_sink: replay: %s\n", text ? text : "error");
    free(text);
    return 1;
  }
  for (k = 0; k < n && !bad; k++) {
    bad = ei_decode_binary(x->buff, &idx, path, &got) != 0;
    if (!bad)
      printf("%.*s\n", (int)got, path);
  }
  if (rp->c->cp.o.top > 0)
    print_top(rp);
  if (rp->err != 0) {
    fprintf(stderr, "kprof_sink: replay: %s: %s (%llu events read; the files hold them)\n",
            rp->err_path, ks_rread_error_name(rp->err), (unsigned long long)rp->events);
    return 1;
  }
  return bad;
}

int ks_replay_main(int argc, char **argv) {
  const char *paths[MAX_FILES];
  ks_replay_opts ro;
  ks_replay rp;
  ks_fdest d;
  ei_x_buff x;
  size_t n = 0;
  int i, rc;

  ks_replay_default_opts(&ro);
  memset(&d, 0, sizeof(d));
  for (i = 0; i < argc; i++) {
    if (strncmp(argv[i], "--", 2) == 0) {
      if (parse_opt(argc, argv, &i, &d, &ro) != KS_OK)
        return usage();
    } else if (n < MAX_FILES) {
      paths[n++] = argv[i];
    } else {
      return usage();
    }
  }
  if (n == 0)
    return usage();
  if (d.dir[0] == 0 && getcwd(d.dir, sizeof(d.dir) - 1100) == NULL)
    return usage();
  if (d.base[0] == 0)
    snprintf(d.base, sizeof(d.base), "%s", strrchr(paths[0], '/') ? strrchr(paths[0], '/') + 1 : paths[0]);
  if (d.fmts == 0)
    d.fmts = ks_write_format_bit(NULL);
  ei_init();
  if (ks_replay_files(&rp, paths, n, &ro) == KS_ENOMEM || ei_x_new_with_version(&x) != 0) {
    fprintf(stderr, "kprof_sink: replay: out of memory\n");
    return 1;
  }
  ks_replay_write(&rp, &d, &x);
  rc = report(&rp, &x);
  ei_x_free(&x);
  ks_replay_free(&rp);
  return rc;
}
