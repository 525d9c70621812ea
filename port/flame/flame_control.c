/* flame_control.c: the flame_* commands (doc/internals-flame.md) and the files a capture ends in.
 *
 *   {flame_start, Id, [{Key, Value}]}         ok | {error, Reason}
 *   {flame_pids, Id, [{Pid, Name | undefined} | {Pid, Name | undefined, Call | undefined}]}
 *                                             ok | {error, Reason}; a Pid already in the
 *                                             capture only gets its names
 *   {flame_arm, Id}                           ok: trigger calls count from now
 *   {flame_status, Id}                        #{events, calls_started, ...}
 *   {flame_members, Id}                       [Pid]: every process that joined
 *   {flame_members, Id, From}                 [Pid]: those that joined after the first From
 *   {flame_members, Id, own}                  [Pid]: those in no other capture
 *   {flame_write, Id, EndTs | undefined, Dir, Base, [Format]}
 *                      {ok, [Path], Info} | {error, no_events, Info} | {error, Reason}
 *   {flame_drop, Id}                          ok
 *   {flame_dir, Dir}                          ok | {error, {unsafe_directory, Path, Why}}
 *                                             | {error, {open_failed, Path, Errno}}
 *
 * flame_write ends the capture whatever happens. Its files are the writers'
 * (port/write/files.c: a directory checked, every file or none), as are
 * flame_dir's checks of the directory.
 */
#include <stdlib.h>
#include <ei.h>

#include "ks_flame.h"

/* {M, F, Arity} at *idx into an MFA id. */
static int decode_mfa(ks_intern *in, const char *b, size_t len, int *idx, uint32_t *id) {
  ks_etf e;
  ks_atom m, f;
  uint32_t ar;
  int64_t a;

  ks_etf_init(&e, b, len);
  e.i = (size_t)*idx;
  if (ks_etf_tuple(&e, &ar) != KS_OK || ar != 3 || ks_etf_atom(&e, &m) != KS_OK ||
      ks_etf_atom(&e, &f) != KS_OK || ks_etf_int64(&e, &a) != KS_OK || a < 0 || a > 255 ||
      ks_intern_mfa(in, &m, &f, (uint32_t)a, id) != KS_OK)
    return KS_EINVAL;
  *idx = (int)e.i;
  return KS_OK;
}

static int decode_u32(const char *b, int *idx, uint32_t lo, uint32_t hi, uint32_t *v) {
  long long n;

  if (ei_decode_longlong(b, idx, &n) != 0 || n < lo || n > hi)
    return KS_EINVAL;
  *v = (uint32_t)n;
  return KS_OK;
}

/* The KS_T_TERM rows' values: trigger, hide, record. */
static int decode_trigger(ks_intern *in, const char *b, size_t len, int *idx, ks_fopts *o) {
  return decode_mfa(in, b, len, idx, &o->trigger);
}

static int decode_hide(ks_intern *in, const char *b, size_t len, int *idx, ks_fopts *o) {
  return decode_mfa(in, b, len, idx, &o->hide);
}

/* record: a binary, opened once the capture is made (the observer the sink
 * registered, ks_flame.h: port/record/record_control.c's). */
static int decode_record(ks_intern *in, const char *b, size_t len, int *idx, ks_fopts *o) {
  int type, size;

  if (ei_get_type(b, idx, &type, &size) != 0 || type != ERL_BINARY_EXT || size <= 0 ||
      size >= KS_OUT_DIR_MAX)
    return KS_EINVAL;
  o->record_at = *idx;
  return ei_skip_term(b, idx) == 0 ? KS_OK : KS_EINVAL;
}

static const struct {
  const char *key;
  int (*decode)(ks_intern *, const char *, size_t, int *, ks_fopts *);
} term_rows[] = {
  {"trigger", decode_trigger}, {"hide", decode_hide}, {"record", decode_record}};

int ks_flame_decode_term(ks_intern *in, const char *key, const char *b, size_t len, int *idx,
                         ks_fopts *o) {
  size_t k;

  for (k = 0; k < sizeof(term_rows) / sizeof(term_rows[0]); k++)
    if (strcmp(key, term_rows[k].key) == 0)
      return term_rows[k].decode(in, b, len, idx, o);
  return KS_EINVAL;
}

/* Bounds and fields: the table's (include/ks_options.h); here only the terms. */
static int decode_opt(ks_intern *in, const char *b, size_t len, int *idx, ks_fopts *o) {
  const ks_option *term;

  if (ks_option_decode(KS_M_FLAME, ks_flame_fields, b, idx, o, &term) != KS_OK)
    return KS_EINVAL;
  return term == NULL ? KS_OK : ks_flame_decode_term(in, term->key, b, len, idx, o);
}

static const char *start(ks_flame *fl, ks_intern *in, const char *b, size_t len, int *idx,
                         int *slot, int *record_at) {
  long long id;
  ks_fopts o;
  int n, k, rc;

  ks_fopts_default(&o);
  if (ei_decode_longlong(b, idx, &id) != 0 || ei_decode_list_header(b, idx, &n) != 0)
    return "badarg";
  for (k = 0; k < n; k++)
    if (decode_opt(in, b, len, idx, &o) != KS_OK)
      return "badarg";
  if (o.trigger != KS_NONE && o.ncalls == 0)
    return "badarg";
  /* Tiers running: port/sink/control.c answers {error, {busy, tiers}} before this. */
  for (k = 0; k < KS_FLAME_MAX && o.trigger != KS_NONE; k++)
    if (fl->cap[k].used && fl->cap[k].cp.o.trigger == o.trigger)
      return "busy";         /* one meta tracer per function */
  rc = ks_flame_start(fl, id, &o);
  *slot = rc;
  *record_at = o.record_at;
  if (rc == KS_EINVAL)
    return "exists";
  if (rc == KS_EFULL)
    return "too_many_captures";
  return rc < 0 ? "enomem" : NULL;
}

/* A UTF-8 binary into out (*n bytes), or an atom (undefined) as *n = 0. */
static int decode_text(const char *b, int *idx, char *out, size_t cap, size_t *n) {
  char atom[MAXATOMLEN];

  *n = 0;
  if (ks_arg_bin(b, idx, out, cap, n) == KS_OK)
    return KS_OK;
  *n = 0;
  return ei_decode_atom(b, idx, atom) == 0 ? KS_OK : KS_EINVAL;
}

static const char *add_pids(ks_flame *fl, ks_intern *in, const char *b, size_t len, int *idx) {
  char name[1024];
  long long id;
  ks_fcap *c;
  ks_slice raw;
  ks_etf e;
  uint32_t pid;
  size_t nlen;
  int n, k, ar, is_port;

  if (ei_decode_longlong(b, idx, &id) != 0)
    return "badarg";
  if ((c = ks_flame_find(fl, id)) == NULL)
    return "not_found";
  if (ei_decode_list_header(b, idx, &n) != 0)
    return "badarg";
  for (k = 0; k < n; k++) {
    if (ei_decode_tuple_header(b, idx, &ar) != 0 || (ar != 2 && ar != 3))
      return "badarg";
    ks_etf_init(&e, b, len);
    e.i = (size_t)*idx;
    if (ks_etf_pid(&e, &raw, &is_port) != KS_OK || is_port)
      return "badarg";
    *idx = (int)e.i;
    if (ks_intern_pid(in, raw, &pid) != KS_OK)
      return "too_many_pids";
    if (decode_text(b, idx, name, sizeof(name), &nlen) != KS_OK)
      return "badarg";
    if (ks_flame_add_pid(fl, c, pid, nlen ? name : NULL, nlen) != KS_OK)
      return "too_many_processes";
    if (ar == 3) {   /* its initial call, "M:F/A", or undefined */
      if (decode_text(b, idx, name, sizeof(name), &nlen) != KS_OK)
        return "badarg";
      ks_flame_set_call(c, pid, name, nlen);
    }
  }
  return NULL;
}

/* A capture's counters: flame_status's reply, and the first keys of flame_write's Info. */
static void put_counters(ks_map *m, const void *ctx) {
  const ks_fcap *c = ctx;
  uint32_t armed = 0, k;

  for (k = 0; k < c->cp.nprocs; k++)
    armed += c->cp.procs[k].armed;
  ks_map_u64(m, "events", c->cp.k.events);
  ks_map_u64(m, "calls_started", c->cp.k.calls_started);
  ks_map_u64(m, "calls_done", c->cp.k.calls_done);
  ks_map_u64(m, "calls_refused", c->cp.k.calls_refused);
  ks_map_u64(m, "calls_early", c->cp.k.calls_early);
  ks_map_u64(m, "lost_frames", c->cp.k.lost_frames);
  ks_map_u64(m, "unknown_callers", c->cp.k.unknown_callers);
  ks_map_u64(m, "stack_overflow", c->cp.k.stack_overflow);
  ks_map_u64(m, "dropped_procs", c->cp.k.dropped_procs);
  ks_map_u64(m, "over_budget_paths", c->cp.tree.over_paths);
  ks_map_u64(m, "over_budget_calls", c->cp.k.over_budget_calls);
  ks_map_u64(m, "nodes", c->cp.tree.n);
  ks_map_u64(m, "tree_bytes", c->cp.tree.peak);
  ks_map_u64(m, "procs", c->cp.nprocs);
  ks_map_u64(m, "armed", armed);
  ks_map_u64(m, "max_bytes", c->cp.o.max_bytes);
  ks_map_u64(m, "max_stack", c->cp.o.max_stack);
  ks_map_u64(m, "correct_ns", c->cp.o.correct_ns);
  ks_map_u64(m, "corrected", c->cp.k.corrected);
  ks_map_u64(m, "subtracted_ns", c->cp.k.subtracted_ns);
  ks_map_u64(m, "clamped", c->cp.k.clamped);
  ks_map_u64(m, "clamped_ns", c->cp.k.clamped_ns);
  ks_map_u64(m, "skipped_ns", c->cp.k.skipped_ns);
  ks_map_u64(m, "correct_per_event_ns", ks_callpath_per_event_ns(&c->cp));
  ks_map_u64(m, "correct_call_ns", c->cp.k.cost_ns[KS_FIVL_CALL]);
  ks_map_u64(m, "correct_return_ns", c->cp.k.cost_ns[KS_FIVL_RETURN]);
  ks_map_u64(m, "correct_call_measured", (uint64_t)c->cp.k.cost_measured[KS_FIVL_CALL]);
  ks_map_u64(m, "correct_return_measured", (uint64_t)c->cp.k.cost_measured[KS_FIVL_RETURN]);
  ks_map_u64(m, "intervals_call", c->cp.ivl[KS_FIVL_CALL].n);
  ks_map_u64(m, "intervals_return", c->cp.ivl[KS_FIVL_RETURN].n);
  if (c->obs.self != NULL)
    c->obs.put_info(c->obs.self, m);
}

/* The time in OVER_BUDGET and in TOO_DEEP nodes (with the SLEEP and GC above
 * them): the share of the graph a limit cut. Neither nests in the other. */
static void cut_time(const ks_ftree *t, uint64_t *over, uint64_t *deep) {
  uint32_t k, f, parent;

  *over = *deep = 0;
  for (k = 1; k < t->n; k++) {
    f = t->v[k].frame;
    parent = t->v[k].parent;
    if (KS_FR_KIND(f) != KS_FR_PSEUDO)
      continue;
    if (KS_FR_VAL(f) == KS_PSEUDO_SLEEP || KS_FR_VAL(f) == KS_PSEUDO_GC)
      f = parent != 0 && parent != KS_NONE ? t->v[parent].frame : KS_NONE;
    if (f == KS_FR(KS_FR_PSEUDO, KS_PSEUDO_OVER))
      *over += t->v[k].self;
    else if (f == KS_FR(KS_FR_PSEUDO, KS_PSEUDO_DEEP))
      *deep += t->v[k].self;
  }
}

/* Whether process k of the capture is in no other capture (its routing bits). */
static int own(const ks_flame *fl, const ks_fcap *c, uint32_t k) {
  uint32_t pid = c->cp.procs[k].pid, bit = 1u << (c - fl->cap);

  return pid >= fl->mask_cap || (fl->mask[pid] & ~bit) == 0;
}

static int encode_members(ei_x_buff *x, const ks_flame *fl, const ks_intern *in, const ks_fcap *c,
                          uint32_t from, int only_own) {
  uint32_t k, n = 0;
  int e = 0;

  if (from > c->cp.nprocs)
    from = c->cp.nprocs;
  for (k = from; k < c->cp.nprocs; k++)
    n += !only_own || own(fl, c, k);
  if (n > 0)
    e = ei_x_encode_list_header(x, n);
  for (k = from; k < c->cp.nprocs && !e; k++)
    if (!only_own || own(fl, c, k))
      e = ks_enc_pid(x, in, c->cp.procs[k].pid);
  return e || ei_x_encode_empty_list(x);
}

/* flame_write's Info: the counters, and with top > 0 the per-function table
 * top => [{{M, F, Arity}, Calls, InclusiveNs, SelfNs}], in option top_by's order,
 * at most top rows of `functions' (port/callpath/top.c). */
typedef struct write_info {
  const ks_fcap *c;
  const ks_intern *in;
  const ks_flame_extra *extra; /* more keys (a replay's), or NULL */
  const ks_fmfa *rows;
  uint32_t n, functions;       /* rows sent, rows in all */
} write_info;

static void put_info(ks_map *m, const void *ctx) {
  const write_info *w = ctx;
  uint64_t over, deep;
  uint32_t k;
  int e = 0;

  put_counters(m, w->c);
  cut_time(&w->c->cp.tree, &over, &deep);
  ks_map_u64(m, "over_budget_ns", over);
  ks_map_u64(m, "too_deep_ns", deep);
  if (w->extra != NULL)
    w->extra->put(m, w->extra->ctx);
  if (w->c->cp.o.top == 0)
    return;
  ks_map_u64(m, "calls_uncounted", w->c->cp.fc.uncounted);
  ks_map_u64(m, "functions", w->functions);
  ks_map_key(m, "top");
  if (w->n > 0)
    e = ei_x_encode_list_header(m->x, w->n);
  for (k = 0; k < w->n && !e; k++)
    e = ei_x_encode_tuple_header(m->x, 4) || ks_enc_mfa(m->x, w->in, w->rows[k].mfa) ||
        ei_x_encode_ulonglong(m->x, w->rows[k].calls) ||
        ei_x_encode_ulonglong(m->x, w->rows[k].incl) ||
        ei_x_encode_ulonglong(m->x, w->rows[k].self);
  e = e || ei_x_encode_empty_list(m->x);
  m->e |= e;
}
static int write_tree(const ks_intern *in, const ks_callpath *g, const ks_fdest *dp, ei_x_buff *x,
                      const ks_fcap *cap, const ks_flame_extra *extra);

/* {ok, [], Info}: the capture's counters and its observer's, no file but the
 * recording (closed with its end by ks_flame_finish). */
static int record_only_reply(const ks_fcap *c, ei_x_buff *x) {
  ks_map m;
  int e = ei_x_encode_tuple_header(x, 3) || ei_x_encode_atom(x, "ok") ||
          ei_x_encode_empty_list(x);

  ks_map_begin(&m, x);
  put_counters(&m, c);
  ks_map_u64(&m, "total_us", 0);
  return e | ks_map_end(&m);
}

static int write_capture(ks_flame *fl, ks_intern *in, ks_fcap *c, const char *b, int *idx,
                         ei_x_buff *x) {
  char atom[MAXATOMLEN];
  long long end_ts = 0;
  int has_end = 0;
  ks_fdest d;

  if (ei_decode_longlong(b, idx, &end_ts) == 0)
    has_end = 1;
  else if (ei_decode_atom(b, idx, atom) != 0)
    return ks_enc_error(x, "badarg");
  /* No format: a capture that records only (output_format => []). */
  if (ks_write_decode_dest(b, idx, &d, 1) != KS_OK || (d.fmts == 0 && c->obs.self == NULL))
    return ks_enc_error(x, "badarg");
  ks_flame_finish(fl, c, has_end, end_ts);
  if (d.fmts == 0)
    return record_only_reply(c, x);
  return ks_flame_write_files(in, c, &d, x, NULL);
}

int ks_flame_write_files(const ks_intern *in, ks_fcap *c, const ks_fdest *d, ei_x_buff *x,
                         const ks_flame_extra *extra) {
  ks_callpath view;
  int e;

  ks_callpath_correct(&c->cp);
  ks_ftree_order(&c->cp.tree);
  /* Grouped or folded: the writers read a view of the graph (port/callpath/view.c). */
  if (c->cp.o.group != KS_GROUP_PID || c->cp.o.fold_recursion) {
    if (ks_callpath_view(&c->cp, in, &view) != KS_OK)
      return ks_enc_error(x, "enomem");
    e = write_tree(in, &view, d, x, c, extra);
    ks_callpath_view_free(&view);
    return e;
  }
  return write_tree(in, &c->cp, d, x, c, extra);
}

/* The files of a capture's graph (its own or a view of it); counters from cap. */
static int write_tree(const ks_intern *in, const ks_callpath *g, const ks_fdest *dp, ei_x_buff *x,
                      const ks_fcap *cap, const ks_flame_extra *extra) {
  ks_fdest d = *dp;
  uint64_t *total;
  write_info w = {0};
  ks_fmfa *rows;
  ks_fout o;
  int e;

  total = malloc((size_t)g->tree.n * sizeof(*total));
  if (total == NULL)
    return ks_enc_error(x, "enomem");
  ks_ftree_totals(&g->tree, total);
  o.g = g;
  o.in = in;
  o.total = total;
  o.grand = total[0];
  o.processes = cap->cp.nprocs;
  if (cap->cp.k.events == 0 || o.grand == 0) {
    ks_map m;
    free(total);
    e = ei_x_encode_tuple_header(x, 3) || ei_x_encode_atom(x, "error") ||
        ei_x_encode_atom(x, "no_events");
    ks_map_begin(&m, x);
    put_counters(&m, cap);
    ks_map_u64(&m, "total_us", 0);
    if (extra != NULL)
      extra->put(&m, extra->ctx);
    return e | ks_map_end(&m);
  }
  w.c = cap;
  w.in = in;
  w.extra = extra;
  /* The table from the capture's exact per-function counters (port/callpath/counts.c). */
  w.rows = rows =
      cap->cp.o.top > 0 ? ks_ffun_rows(&cap->cp.fc, cap->cp.o.hide, &w.functions) : NULL;
  ks_fmfa_sort(rows, w.functions, cap->cp.o.top_by);   /* the N the table keeps */
  w.n = w.functions < cap->cp.o.top ? w.functions : cap->cp.o.top;
  e = ks_write_reply(&o, &d, x, put_info, &w);
  free(rows);
  free(total);
  return e;
}

/* The flame_* commands (port/sink/control.c's table gives their arities). */

int ks_cmd_flame_start(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x) {
  int slot = -1, record_at = -1;
  const char *err = start(fl, cmd->in, (const char *)cmd->term.p, cmd->term.n, &cmd->idx, &slot,
                          &record_at);

  if (err)
    return ks_enc_error(x, err);
  if (record_at < 0)
    return ei_x_encode_atom(x, "ok");
  /* record: the observer the sink registered, or none (badarg). */
  if (fl->record == NULL) {
    ks_flame_drop(fl, &fl->cap[slot]);
    return ks_enc_error(x, "badarg");
  }
  if (fl->record(fl, &fl->cap[slot], cmd->in, (const char *)cmd->term.p, record_at, x) != KS_OK) {
    ks_flame_drop(fl, &fl->cap[slot]);
    return 0;   /* the error is in x */
  }
  return ei_x_encode_atom(x, "ok");
}

int ks_cmd_flame_pids(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x) {
  const char *err = add_pids(fl, cmd->in, (const char *)cmd->term.p, cmd->term.n, &cmd->idx);

  return err ? ks_enc_error(x, err) : ei_x_encode_atom(x, "ok");
}

/* The capture whose Id is at *idx, or NULL with the error encoded into x. */
static ks_fcap *capture(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x, int *e) {
  long long id;
  ks_fcap *c = NULL;

  if (ei_decode_longlong((const char *)cmd->term.p, &cmd->idx, &id) != 0)
    *e = ks_enc_error(x, "badarg");
  else if ((c = ks_flame_find(fl, id)) == NULL)
    *e = ks_enc_error(x, "not_found");
  return c;
}

int ks_cmd_flame_status(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x) {
  int e = 0;
  ks_fcap *c = capture(fl, cmd, x, &e);
  ks_map m;

  if (c == NULL)
    return e;
  ks_map_begin(&m, x);
  put_counters(&m, c);
  return ks_map_end(&m);
}

/* {flame_members, Id}, {flame_members, Id, From} or {flame_members, Id, own}. */
int ks_cmd_flame_members(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x) {
  const char *b = (const char *)cmd->term.p;
  int e = 0, only_own = 0, at;
  ks_fcap *c = capture(fl, cmd, x, &e);
  char atom[MAXATOMLEN];
  uint32_t from = 0;

  if (c == NULL)
    return e;
  at = cmd->idx;
  if (cmd->arity == 3 && ei_decode_atom(b, &at, atom) == 0 && strcmp(atom, "own") == 0)
    only_own = 1;
  else if (cmd->arity == 3 && decode_u32(b, &cmd->idx, 0, UINT32_MAX, &from) != KS_OK)
    return ks_enc_error(x, "badarg");
  return encode_members(x, fl, cmd->in, c, from, only_own);
}

int ks_cmd_flame_arm(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x) {
  int e = 0;
  ks_fcap *c = capture(fl, cmd, x, &e);

  if (c == NULL)
    return e;
  ks_flame_arm(c);
  return ei_x_encode_atom(x, "ok");
}

int ks_cmd_flame_drop(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x) {
  int e = 0;
  ks_fcap *c = capture(fl, cmd, x, &e);

  if (c == NULL)
    return e;
  ks_flame_drop(fl, c);
  return ei_x_encode_atom(x, "ok");
}

/* {flame_dir, Dir}: the directory made and checked as flame_write will
 * (port/write/files.c), so that a capture is refused before it starts rather
 * than lost at its end. */
int ks_cmd_flame_dir(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x) {
  char dir[KS_OUT_DIR_MAX];
  size_t n;

  if (ks_arg_bin((const char *)cmd->term.p, &cmd->idx, dir, sizeof(dir), &n) != KS_OK ||
      memchr(dir, 0, n) != NULL)
    return ks_enc_error(x, "badarg");
  return ks_write_dir_reply(dir, x);
}

/* Ends the capture whatever happens. */
int ks_cmd_flame_write(ks_flame *fl, ks_cmd *cmd, ei_x_buff *x) {
  int e = 0;
  ks_fcap *c = capture(fl, cmd, x, &e);

  if (c == NULL)
    return e;
  e = write_capture(fl, cmd->in, c, (const char *)cmd->term.p, &cmd->idx, x);
  ks_flame_drop(fl, c);
  return e;
}
