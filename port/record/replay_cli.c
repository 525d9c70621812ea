/* replay_cli.c: kprof_sink --replay FILE... : a recording's files written with no VM.
 *
 *   kprof_sink --replay FILE... [--Flag Value]...
 *
 * The flags are include/ks_options.h's KS_REPLAY lines, with their rows'
 * bounds and values (replay_opts.c; with no FILE the usage line lists them).
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
  ks_replay_usage(stderr);
  return 2;
}

/* The top table of a replayed capture, in option top_by's order. */
static void print_top(const ks_replay *rp) {
  const ks_fcap *c = rp->c;
  uint32_t n, k;
  ks_fmfa *rows = ks_ffun_rows(&c->cp.fc, c->cp.o.hide, &n);

  ks_fmfa_sort(rows, n, c->cp.o.top_by);
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
      if (ks_replay_opt_arg(argc, argv, &i, &d, &ro) != KS_OK)
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
