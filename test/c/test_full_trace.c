/* test_full_trace.c: full request trace (tier_full.c). A request with a known
 * call tree, every function traced, goes through the tiers; its tier rows must
 * be those of the same request traced without full trace (tier events only),
 * and its identity's aggregate must hold the known calls, times and paths. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

enum { HTTP, DB };

static ks_intern in;
static ks_tiers full, plain;   /* full trace on / the same request, tier events only */
static uint32_t pid_a, pid_b, pid_c;
static const unsigned char label1[] = {97, 1}, label2[] = {97, 2};
static const unsigned char ID_GET[] = {100, 0, 3, 'g', 'e', 't'};
static const unsigned char ID_PUT[] = {100, 0, 3, 'p', 'u', 't'};

static uint32_t mfa(const char *m, const char *f, uint32_t a) {
  return tb_intern_mfa(&in, m, f, a);
}

static ks_tier_spec spec(const char *m, const char *f, int role) {
  ks_tier_spec s;
  s.m = strdup(m);
  s.f = f ? strdup(f) : NULL;
  s.arity = -1;
  s.role = role;
  s.entry = 0;
  return s;
}

static void start_tiers(ks_tiers *t) {
  ks_tier_opts o;
  ks_tier_spec *specs = calloc(4, sizeof(*specs));

  ks_tiers_init(t);
  specs[0] = spec("http", NULL, HTTP);
  specs[1] = spec("db", NULL, DB);
  specs[2] = spec("kprof_mark", "start", KS_ROLE_START);
  specs[3] = spec("kprof_mark", "stop", KS_ROLE_STOP);
  ks_tiers_default_opts(&o);
  o.grace_ns = 1000;
  ck_assert_int_eq(ks_tiers_start(t, &in, specs, 4, 2, &o), KS_OK);
}

static void setup(void) {
  ks_slice sel = {ID_GET, sizeof(ID_GET)};

  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  start_tiers(&full);
  start_tiers(&plain);
  ck_assert_int_eq(ks_full_select(&full, 0, &sel, 1), KS_OK);
  pid_a = tb_intern_pid(&in, 1);
  pid_b = tb_intern_pid(&in, 2);
  pid_c = tb_intern_pid(&in, 3);
}

static void teardown(void) {
  ks_tiers_free(&full);
  ks_tiers_free(&plain);
  ks_intern_free(&in);
}

/* One event to the full-trace sink, and to the plain one when `tier` says the
 * VM would send it without full trace. Times are in microseconds. */
static void ev(int tier, int kind, uint32_t p, int64_t us, uint32_t m, uint32_t caller,
               const unsigned char *label, const unsigned char *payload) {
  ks_decoded d;

  tb_tier_event(&d, kind, p, us * 1000, m, caller, label, payload, payload ? 6 : 0);
  ks_tiers_event(&full, &in, &d);
  if (tier)
    ks_tiers_event(&plain, &in, &d);
}

/* T: a tier function's event; F: one only full trace makes. */
#define T_CALL(p, us, m, c, l) ev(1, KS_EV_CALL, p, us, m, c, l, NULL)
#define F_CALL(p, us, m, c, l) ev(0, KS_EV_CALL, p, us, m, c, l, NULL)
#define T_RET(p, us, to) ev(1, KS_EV_RETURN_TO, p, us, to, KS_NONE, NULL, NULL)
#define F_RET(p, us, to) ev(0, KS_EV_RETURN_TO, p, us, to, KS_NONE, NULL, NULL)

/* The markers are traced global: no return_to follows them. */
static void start(uint32_t p, int64_t us, const unsigned char *label, const unsigned char *id) {
  uint32_t req = mfa("app", "req", 2);
  ev(1, KS_EV_CALL, p, us, mfa("kprof_mark", "start", 1), req, label, id);
}

static void stop(uint32_t p, int64_t us, const unsigned char *label) {
  uint32_t req = mfa("app", "req", 2);
  T_CALL(p, us, mfa("kprof_mark", "stop", 0), req, label);
}

/* Every column of every row of both sinks alike: full trace changed nothing. */
static void assert_same_rows(void) {
  uint32_t r;
  int c, k;

  ck_assert_uint_eq(full.requests, plain.requests);
  ck_assert_uint_eq(full.events, plain.events);
  ck_assert_uint_eq(full.orphan_events, plain.orphan_events);
  for (r = 0; r <= full.o.max_identities; r++) {
    ck_assert_uint_eq(full.rows[r].requests, plain.rows[r].requests);
    if (full.rows[r].cols == NULL)
      continue;
    for (c = 0; c < full.ntiers + 2; c++) {
      ck_assert_uint_eq(full.rows[r].cols[c].calls, plain.rows[r].cols[c].calls);
      for (k = 0; k < KS_TSTAT__COUNT; k++)
        ck_assert_uint_eq(full.rows[r].cols[c].h[k].total, plain.rows[r].cols[c].h[k].total);
    }
  }
}

static const ks_fmfa *find(const ks_fmfa *v, uint32_t n, uint32_t m) {
  uint32_t k;

  for (k = 0; k < n; k++)
    if (v[k].mfa == m)
      return &v[k];
  return NULL;
}

#define ASSERT_MFA(v, n, m, calls_, incl_us, self_us)                                    \
  do {                                                                                    \
    const ks_fmfa *x_ = find(v, n, m);                                                \
    ck_assert_ptr_nonnull(x_);                                                            \
    ck_assert_uint_eq(x_->calls, calls_);                                                 \
    ck_assert_uint_eq(x_->incl, (uint64_t)(incl_us) * 1000);                              \
    ck_assert_uint_eq(x_->self, (uint64_t)(self_us) * 1000);                              \
  } while (0)

static char *folded(const ks_full_agg *a) {
  uint64_t *total = malloc(a->tree.n * sizeof(*total));
  ks_ftree *tr = (ks_ftree *)&a->tree;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ks_fout o;
  ks_callpath view;   /* the writers read a graph: the aggregate's tree as one */

  ck_assert_ptr_nonnull(total);
  ks_ftree_order(tr);
  ks_ftree_totals(tr, total);
  memset(&view, 0, sizeof(view));
  ks_fopts_default(&view.o);
  view.tree = *tr;
  o.g = &view;
  o.in = &in;
  o.total = total;
  o.grand = total[0];
  ck_assert_int_eq(ks_write_folded(&o, f), KS_OK);
  fclose(f);
  free(total);
  return buf;
}

/*
 * GET, selected (pid a, worker c):   PUT, not selected (pid b): the same code.
 *   req -> run (body) -> a (body) -> db:q (tier, body)
 *                        a tail-calls b
 *   while a runs, worker c: gen:loop -> srv:h (not tiers)
 */
static void known_request(uint32_t p, const unsigned char *label, const unsigned char *id,
                          int64_t t0, int worker) {
  uint32_t req = mfa("app", "req", 2), run = mfa("app", "run", 0), a = mfa("app", "a", 0),
           b = mfa("app", "b", 0), q = mfa("db", "q", 1), loop = mfa("gen", "loop", 1),
           h = mfa("srv", "h", 1);

  start(p, t0, label, id);
  F_CALL(p, t0 + 100, run, req, label);
  F_CALL(p, t0 + 200, a, run, label);
  T_CALL(p, t0 + 300, q, a, label);
  if (worker) {
    F_CALL(pid_c, t0 + 500, h, loop, label);
    F_RET(pid_c, t0 + 800, loop);
  }
  T_RET(p, t0 + 1300, a);
  F_CALL(p, t0 + 1500, b, run, label);   /* tail call: b returns to run */
  F_RET(p, t0 + 2000, run);
  F_RET(p, t0 + 2100, req);
  stop(p, t0 + 2200, label);
}

START_TEST(known_tree_per_mfa_and_path) {
  uint32_t req = mfa("app", "req", 2), run = mfa("app", "run", 0), a = mfa("app", "a", 0),
           b = mfa("app", "b", 0), q = mfa("db", "q", 1), h = mfa("srv", "h", 1),
           loop = mfa("gen", "loop", 1);
  const ks_full_agg *agg;
  ks_fmfa *m;
  uint32_t n;
  char *text;

  known_request(pid_a, label1, ID_GET, 0, 1);
  known_request(pid_b, label2, ID_PUT, 10000, 0);
  ks_tiers_flush(&full, 1);
  ks_tiers_flush(&plain, 1);
  assert_same_rows();
  ck_assert_uint_eq(full.rows[0].cols[DB].h[KS_TSTAT_self].total, 1000 * 1000);
  ck_assert_uint_eq(full.rows[0].cols[DB].calls, 1);

  /* GET (row 0) has an aggregate, PUT (row 1) none. */
  ck_assert_ptr_nonnull(full.full.agg[0]);
  ck_assert_ptr_null(full.full.agg[1]);
  ck_assert_uint_eq(full.full.n_agg, 1);
  agg = full.full.agg[0];
  ck_assert_uint_eq(agg->requests, 1);
  m = ks_full_mfas(agg, &n);
  ck_assert_ptr_nonnull(m);
  /* req is inferred (kprof:request's frame) at run's call, so never called;
   * the start marker's call and return are not frames. */
  ASSERT_MFA(m, n, req, 0, 2100, 100);
  ASSERT_MFA(m, n, run, 1, 2000, 200);
  ASSERT_MFA(m, n, a, 1, 1300, 300);
  ASSERT_MFA(m, n, q, 1, 1000, 1000);
  ASSERT_MFA(m, n, b, 1, 500, 500);
  ASSERT_MFA(m, n, h, 1, 300, 300);
  ASSERT_MFA(m, n, loop, 0, 300, 0);
  ck_assert_ptr_null(find(m, n, mfa("kprof_mark", "start", 1)));
  ck_assert_uint_eq(m[0].mfa, req);   /* largest inclusive first */
  free(m);

  text = folded(agg);
  ck_assert_str_eq(text,
                   "app:req/2 100\n"
                   "app:req/2;app:run/0 200\n"
                   "app:req/2;app:run/0;app:a/0 300\n"
                   "app:req/2;app:run/0;app:a/0;db:q/1 1000\n"
                   "app:req/2;app:run/0;app:b/0 500\n"
                   "gen:loop/1;srv:h/1 300\n");
  free(text);
}
END_TEST

/* f -> f -> f (body recursion): every call counted, inclusive once. */
START_TEST(recursion_counts_inclusive_once) {
  uint32_t req = mfa("app", "req", 2), f = mfa("app", "f", 1);
  ks_fmfa *m;
  uint32_t n;

  start(pid_a, 0, label1, ID_GET);
  F_CALL(pid_a, 1000, f, req, label1);
  F_CALL(pid_a, 2000, f, f, label1);
  F_CALL(pid_a, 3000, f, f, label1);
  F_RET(pid_a, 4000, f);
  F_RET(pid_a, 5000, f);
  F_RET(pid_a, 6000, req);
  stop(pid_a, 7000, label1);
  ks_tiers_flush(&full, 1);
  ks_tiers_flush(&plain, 1);
  assert_same_rows();
  m = ks_full_mfas(full.full.agg[0], &n);
  ASSERT_MFA(m, n, f, 3, 5000, 5000);
  ASSERT_MFA(m, n, req, 0, 6000, 1000);
  free(m);
}
END_TEST

/* A tier function tail-called by one that is not, and an exception caught two
 * chains down: the tiers see the return_to events they saw before. */
START_TEST(tail_calls_and_exceptions_keep_tier_times) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), g = mfa("app", "g", 0),
           q = mfa("db", "q", 1), x = mfa("app", "x", 0);

  start(pid_a, 0, label1, ID_GET);
  T_CALL(pid_a, 100, http, req, label1);
  F_CALL(pid_a, 200, g, http, label1);     /* body call of g from http */
  T_CALL(pid_a, 300, q, http, label1);     /* g tail-calls db:q */
  F_CALL(pid_a, 400, x, q, label1);        /* q calls x, which throws */
  T_RET(pid_a, 600, http);                 /* caught in http: one return_to */
  T_RET(pid_a, 900, req);
  stop(pid_a, 1000, label1);
  ks_tiers_flush(&full, 1);
  ks_tiers_flush(&plain, 1);
  assert_same_rows();
  ck_assert_uint_eq(full.rows[0].cols[DB].h[KS_TSTAT_self].total, 300 * 1000);
  ck_assert_uint_eq(full.rows[0].cols[HTTP].h[KS_TSTAT_self].total, 500 * 1000);
}
END_TEST

/* Past full_max_events a request is truncated and counted; the tiers are not. */
START_TEST(caps_are_counted) {
  uint32_t req = mfa("app", "req", 2), f = mfa("app", "f", 0);
  int k;

  full.o.full_max_events = 8;
  start(pid_a, 0, label1, ID_GET);
  for (k = 0; k < 20; k++) {
    F_CALL(pid_a, 10 + 2 * k, f, req, label1);
    F_RET(pid_a, 11 + 2 * k, req);
  }
  stop(pid_a, 100, label1);
  ks_tiers_flush(&full, 1);
  ks_tiers_flush(&plain, 1);
  assert_same_rows();
  ck_assert_uint_eq(full.full.truncated_requests, 1);
  ck_assert_uint_gt(full.full.dropped_events, 0);
  ck_assert_uint_eq(full.full.agg[0]->truncated, 1);
}
END_TEST

/* tiers_reset keeps the selection: the next request of GET is full-traced again. */
START_TEST(reset_keeps_selection) {
  ks_tiers_reset(&full);
  ck_assert_int_eq(full.full.on, 1);
  known_request(pid_a, label1, ID_GET, 0, 0);
  ks_tiers_flush(&full, 1);
  ck_assert_ptr_nonnull(full.full.agg[0]);
  ck_assert_uint_eq(full.full.agg[0]->requests, 1);
}
END_TEST

/* The commands, through a sink: {tiers_start, ..., [{full_trace, all}]} (the sink's own
 * tiers), a known request, then {tiers_full_report, Top} and {tiers_full_write, ...}: the
 * report's rows, the folded file, and the errors (not started, bad arguments, an
 * identity with no aggregate, a directory the sink refuses). */
static ks_sink sink;
static tb_out outb;
/* The identity `get' as term_to_binary writes it (SMALL_ATOM_UTF8_EXT). */
static const unsigned char GET_UTF8[] = {119, 3, 'g', 'e', 't'};

static void tier_spec(ei_x_buff *x, const char *m, const char *f, const char *role, long tier) {
  ei_x_encode_tuple_header(x, 4);
  tb_atom(x, m);
  tb_atom(x, f ? f : "_");
  tb_atom(x, "_");
  if (role)
    tb_atom(x, role);
  else
    ei_x_encode_long(x, tier);
}

static void write_cmd(long ref, const unsigned char *id, size_t idlen, const char *dir) {
  ei_x_buff x;

  tb_cmd_begin(&x, ref, "tiers_full_write", 5);
  ei_x_append_buf(&x, (const char *)id, (int)idlen);
  ei_x_encode_binary(&x, dir, (long)strlen(dir));
  ei_x_encode_binary(&x, "full", 4);
  ei_x_encode_list_header(&x, 1);
  tb_atom(&x, "folded");
  ei_x_encode_empty_list(&x);
  tb_feed(&sink, &x);
}

static void sink_ev(int kind, uint32_t p, int64_t us, uint32_t m, uint32_t caller,
                    const unsigned char *label, const unsigned char *payload, size_t plen) {
  ks_decoded d;

  tb_tier_event(&d, kind, p, us * 1000, m, caller, label, payload, plen);
  ks_tiers_event(&sink.tiers, &sink.in, &d);
}

static char *nth_reply(int k) {
  return tb_out_reply(&outb, k);
}

START_TEST(commands) {
  char dir[64], path[256], *r;
  uint32_t p, req, run, q, start, stop;
  unsigned char *file;
  ei_x_buff x;
  size_t len;

  tb_tmpdir(dir, sizeof(dir), "full-cmd");
  tb_sink_open(&sink, NULL, &outb);
  /* Before the tiers start: not_started. */
  tb_cmd_begin(&x, 1, "tiers_full_report", 2);
  ei_x_encode_long(&x, 10);
  tb_feed(&sink, &x);
  write_cmd(2, GET_UTF8, sizeof(GET_UTF8), dir);
  tb_cmd_begin(&x, 3, "tiers_start", 3);
  ei_x_encode_list_header(&x, 4);
  tier_spec(&x, "http", NULL, NULL, 0);
  tier_spec(&x, "db", NULL, NULL, 1);
  tier_spec(&x, "kprof_mark", "start", "start", 0);
  tier_spec(&x, "kprof_mark", "stop", "stop", 0);
  ei_x_encode_empty_list(&x);
  ei_x_encode_list_header(&x, 2);
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "full_trace");
  tb_atom(&x, "all");
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "grace_ms");
  ei_x_encode_long(&x, 0);
  ei_x_encode_empty_list(&x);
  tb_feed(&sink, &x);
  /* One request of `get': req -> run -> db:q, 1 ms in q; req is inferred (kprof:request's
 * frame), the time after the last return_to is the stop marker's, in no frame. */
  p = tb_intern_pid(&sink.in, 1);
  req = tb_intern_mfa(&sink.in, "app", "req", 2);
  run = tb_intern_mfa(&sink.in, "app", "run", 0);
  q = tb_intern_mfa(&sink.in, "db", "q", 1);
  start = tb_intern_mfa(&sink.in, "kprof_mark", "start", 1);
  stop = tb_intern_mfa(&sink.in, "kprof_mark", "stop", 0);
  sink_ev(KS_EV_CALL, p, 0, start, req, label1, GET_UTF8, sizeof(GET_UTF8));
  sink_ev(KS_EV_CALL, p, 100, run, req, label1, NULL, 0);
  sink_ev(KS_EV_CALL, p, 200, q, run, label1, NULL, 0);
  sink_ev(KS_EV_RETURN_TO, p, 1200, run, KS_NONE, NULL, NULL, 0);
  sink_ev(KS_EV_RETURN_TO, p, 1300, req, KS_NONE, NULL, NULL, 0);
  sink_ev(KS_EV_CALL, p, 1400, stop, req, label1, NULL, 0);
  tb_cmd_begin(&x, 4, "tiers_full_report", 2);
  ei_x_encode_long(&x, 2);
  tb_feed(&sink, &x);
  tb_cmd_begin(&x, 5, "tiers_full_report", 2);
  tb_atom(&x, "many");
  tb_feed(&sink, &x);
  write_cmd(6, GET_UTF8, sizeof(GET_UTF8), dir);
  write_cmd(7, (const unsigned char *)"\x77\x03put", 5, dir);
  tb_cmd_begin(&x, 8, "tiers_full_write", 5);
  tb_atom(&x, "get");
  ei_x_encode_long(&x, 1);   /* not a directory's binary */
  ei_x_encode_binary(&x, "full", 4);
  ei_x_encode_empty_list(&x);
  tb_feed(&sink, &x);
  ck_assert_int_eq(chmod(dir, 0777), 0);
  write_cmd(9, GET_UTF8, sizeof(GET_UTF8), dir);
  ck_assert_int_eq(chmod(dir, 0700), 0);

  ck_assert_int_eq(outb.frames, 9);
  r = nth_reply(0); ck_assert_str_eq(r, "{error, not_started}"); free(r);
  r = nth_reply(1); ck_assert_str_eq(r, "{error, not_started}"); free(r);
  r = nth_reply(2); ck_assert_str_eq(r, "ok"); free(r);
  r = nth_reply(3);
  ck_assert_msg(strstr(r, "on => true") && strstr(r, "requests => 1") &&
                strstr(r, "identities => [#{identity => get, ") &&
                strstr(r, "total_ns => 1300000") &&
                strstr(r, "mfas => [#{mfa => {app, req, 2}, calls => 0, inclusive_ns => 1300000, "
                          "self_ns => 100000}, #{mfa => {app, run, 0}, calls => 1, "
                          "inclusive_ns => 1200000, self_ns => 200000}]"),
                "got %s", r);
  free(r);
  r = nth_reply(4); ck_assert_str_eq(r, "{error, badarg}"); free(r);
  r = nth_reply(5);
  ck_assert_msg(strncmp(r, "{ok, [#Bin<", 11) == 0 && strstr(r, "requests => 1"), "got %s", r);
  free(r);
  r = nth_reply(6); ck_assert_str_eq(r, "{error, not_found}"); free(r);
  r = nth_reply(7); ck_assert_str_eq(r, "{error, badarg}"); free(r);
  r = nth_reply(8);
  ck_assert_msg(strstr(r, "{error, {unsafe_directory, ") == r && strstr(r, "{writable, \"0777\"}"),
                "got %s", r);
  free(r);
  snprintf(path, sizeof(path), "%s/full.folded", dir);
  file = read_file(path, &len);
  ck_assert_ptr_nonnull(file);
  ck_assert_str_eq((char *)file, "app:req/2 100\napp:req/2;app:run/0 200\n"
                                 "app:req/2;app:run/0;db:q/1 1000\n");
  free(file);
  tb_tmpdir_remove(dir);
  tb_sink_close(&sink, &outb);
}
END_TEST

Suite *full_trace_suite(void) {
  Suite *s = suite_create("full_trace");
  TCase *tc = tcase_create("full_trace");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, known_tree_per_mfa_and_path);
  tcase_add_test(tc, recursion_counts_inclusive_once);
  tcase_add_test(tc, tail_calls_and_exceptions_keep_tier_times);
  tcase_add_test(tc, caps_are_counted);
  tcase_add_test(tc, reset_keeps_selection);
  tcase_add_test(tc, commands);
  suite_add_tcase(s, tc);
  return s;
}
