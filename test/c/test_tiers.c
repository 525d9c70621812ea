/* test_tiers.c: the request state machine and the walk, on event sequences whose
 * answer is known: nesting, recursion, tail calls, exceptions, several processes. */
#include <stdlib.h>

#include "test_util.h"

enum { HTTP, DB, TPL };

static ks_intern in;
static ks_tiers tiers;
static uint32_t pid_a, pid_b;
static const unsigned char label1[] = {97, 1}, label2[] = {97, 2};

static uint32_t mfa(const char *m, const char *f, uint32_t a) {
  return tb_intern_mfa(&in, m, f, a);
}

static uint32_t pid(unsigned num) {
  return tb_intern_pid(&in, num);
}

static ks_tier_spec spec(const char *m, const char *f, int role, int entry) {
  ks_tier_spec s;
  s.m = strdup(m);
  s.f = f ? strdup(f) : NULL;
  s.arity = -1;
  s.role = role;
  s.entry = entry;
  return s;
}

static void setup(void) {
  ks_tier_opts o;
  ks_tier_spec *specs = calloc(7, sizeof(*specs));

  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  ks_tiers_init(&tiers);
  specs[0] = spec("http", NULL, HTTP, 0);
  specs[1] = spec("db", NULL, DB, 0);
  specs[2] = spec("tpl", NULL, TPL, 0);
  specs[3] = spec("kprof_mark", "start", KS_ROLE_START, 0);
  specs[4] = spec("kprof_mark", "stop", KS_ROLE_STOP, 0);
  specs[5] = spec("web", "entry", KS_ROLE_NONE, 1);
  specs[6] = spec("kprof_mark", "resume", KS_ROLE_MARK, 0);
  ks_tiers_default_opts(&o);
  o.grace_ns = 1000;
  o.slow_ns = 0;
  o.slow_max = 2;
  ck_assert_int_eq(ks_tiers_start(&tiers, &in, specs, 7, 3, &o), KS_OK);
  pid_a = pid(1);
  pid_b = pid(2);
}

static void teardown(void) {
  ks_tiers_free(&tiers);
  ks_intern_free(&in);
}

static void ev(int kind, uint32_t p, int64_t ts, uint32_t m, uint32_t caller,
               const unsigned char *label, const unsigned char *payload, size_t plen) {
  ks_decoded d;

  tb_tier_event(&d, kind, p, ts, m, caller, label, payload, plen);
  ks_tiers_event(&tiers, &in, &d);
}

#define CALL(p, ts, m, c, l) ev(KS_EV_CALL, p, ts, m, c, l, NULL, 0)
#define RET(p, ts, to) ev(KS_EV_RETURN_TO, p, ts, to, KS_NONE, NULL, NULL, 0)

static const unsigned char ID_GET[] = {100, 0, 3, 'g', 'e', 't'};
static const unsigned char ID_PUT[] = {100, 0, 3, 'p', 'u', 't'};

/* start marker at t0, called from `req`; stop at t1. The markers are traced
 * global: no return_to follows them. */
static void start(uint32_t p, int64_t t, const unsigned char *label, const unsigned char *id) {
  uint32_t req = mfa("app", "req", 2);
  ev(KS_EV_CALL, p, t, mfa("kprof_mark", "start", 1), req, label, id, 6);
}

static void stop(uint32_t p, int64_t t, const unsigned char *label) {
  uint32_t req = mfa("app", "req", 2);
  CALL(p, t, mfa("kprof_mark", "stop", 0), req, label);
}

/* The row of identity `id` (0-based order of first appearance). */
static const ks_tier_row *row(uint32_t r) {
  ck_assert_ptr_nonnull(tiers.rows);
  return &tiers.rows[r];
}

static uint64_t self_total(uint32_t r, int col) {
  return row(r)->cols[col].h[KS_TSTAT_self].total;
}

static uint64_t incl_total(uint32_t r, int col) {
  return row(r)->cols[col].h[KS_TSTAT_inclusive].total;
}

/* req -> http (1000 ns self) -> body call db (3000) -> back in http (500). */
START_TEST(nested_tiers_and_other) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), db = mfa("db", "q", 1);

  start(pid_a, 0, label1, ID_GET);
  CALL(pid_a, 100, http, req, label1);
  CALL(pid_a, 1100, db, http, label1);
  RET(pid_a, 4100, http);
  RET(pid_a, 4600, req);
  stop(pid_a, 5000, label1);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(tiers.requests, 1);
  ck_assert_uint_eq(self_total(0, HTTP), 1500);
  ck_assert_uint_eq(self_total(0, DB), 3000);
  ck_assert_uint_eq(self_total(0, TPL), 0);
  ck_assert_uint_eq(self_total(0, 3), 500);    /* other: before http and after it */
  ck_assert_uint_eq(self_total(0, 4), 5000);   /* wall */
  ck_assert_uint_eq(incl_total(0, HTTP), 4500);
  ck_assert_uint_eq(incl_total(0, DB), 3000);
  ck_assert_uint_eq(row(0)->cols[HTTP].calls, 1);
  ck_assert_uint_eq(row(0)->cols[DB].calls, 1);
}
END_TEST

/* A marker's call (kprof_mark, traced global) has no return_to after it: it
 * opens no frame. The time after the resume marker in db is db's until db's
 * return_to, as is the time after the start marker until http's call: other. */
START_TEST(markers_open_no_frame) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), db = mfa("db", "q", 1);

  start(pid_a, 0, label1, ID_GET);
  CALL(pid_a, 100, http, req, label1);
  CALL(pid_a, 1000, db, http, label1);
  CALL(pid_a, 1500, mfa("kprof_mark", "resume", 0), db, label1);
  RET(pid_a, 2500, http);
  RET(pid_a, 3000, req);
  stop(pid_a, 3200, label1);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(tiers.requests, 1);
  ck_assert_uint_eq(tiers.orphan_events, 0);
  ck_assert_uint_eq(self_total(0, HTTP), 1400);
  ck_assert_uint_eq(self_total(0, DB), 1500);
  ck_assert_uint_eq(self_total(0, 3), 300);    /* other: before http and after it */
  ck_assert_uint_eq(incl_total(0, HTTP), 2900);
  ck_assert_uint_eq(row(0)->cols[DB].calls, 1);
}
END_TEST

/* The pids a request in flight has events of, and the entry pids of the slow
 * requests kept for the report, keep their ids (port/sink/pid_reclaim.c). */
START_TEST(requests_pin_their_pids) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), db = mfa("db", "q", 1);
  uint32_t pid_c = pid(3), pid_d = pid(4);
  uint8_t pin[8], dead[8];

  ck_assert_uint_lt(pid_d, sizeof(pin));
  start(pid_a, 0, label1, ID_GET);
  CALL(pid_a, 100, http, req, label1);
  CALL(pid_c, 200, db, KS_NONE, label1);
  RET(pid_c, 300, KS_NONE);
  memset(pin, 0, sizeof(pin));
  ks_tiers_pin_pids(&tiers, pin, sizeof(pin));
  ck_assert_int_eq(pin[pid_a], 1);
  ck_assert_int_eq(pin[pid_c], 1);
  ck_assert_int_eq(pin[pid_b], 0);
  ck_assert_int_eq(pin[pid_d], 0);
  RET(pid_a, 4600, req);
  stop(pid_a, 5000, label1);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(tiers.requests, 1);
  ck_assert_uint_eq(tiers.n_slow, 1);
  memset(pin, 0, sizeof(pin));
  ks_tiers_pin_pids(&tiers, pin, sizeof(pin));
  ck_assert_int_eq(pin[pid_a], 1);   /* the slow request's entry pid, for the report */
  ck_assert_int_eq(pin[pid_c], 0);
  /* A released id forgets which request it was last in. */
  ck_assert_uint_lt(pid_c, tiers.pid_cap);
  ck_assert_uint_ne(tiers.pid_slot[pid_c], KS_NONE);
  memset(dead, 0, sizeof(dead));
  dead[pid_c] = 1;
  ks_tiers_forget_pids(&tiers, dead, sizeof(dead));
  ck_assert_uint_eq(tiers.pid_slot[pid_c], KS_NONE);
}
END_TEST

/* http tail-calls db: one return_to ends both. */
START_TEST(tail_call_chain) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), db = mfa("db", "q", 1);

  start(pid_a, 0, label1, ID_GET);
  CALL(pid_a, 0, http, req, label1);
  CALL(pid_a, 1000, db, req, label1);   /* tail position: caller is req */
  RET(pid_a, 3000, req);
  stop(pid_a, 4000, label1);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(self_total(0, HTTP), 1000);
  ck_assert_uint_eq(self_total(0, DB), 2000);
  ck_assert_uint_eq(self_total(0, 3), 1000);
  ck_assert_uint_eq(incl_total(0, HTTP), 3000);
}
END_TEST

/* db recursing through itself: inclusive counts the outermost only; every call is counted. */
START_TEST(recursion_and_repeated_calls) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), db = mfa("db", "q", 1);

  start(pid_a, 0, label1, ID_GET);
  CALL(pid_a, 0, http, req, label1);
  CALL(pid_a, 100, db, http, label1);
  CALL(pid_a, 200, db, db, label1);
  CALL(pid_a, 300, db, db, label1);
  RET(pid_a, 400, db);
  RET(pid_a, 500, db);
  RET(pid_a, 600, http);
  CALL(pid_a, 700, db, http, label1);   /* a second, repeated call */
  RET(pid_a, 800, http);
  RET(pid_a, 1000, req);
  stop(pid_a, 1000, label1);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(row(0)->cols[DB].calls, 4);
  ck_assert_uint_eq(self_total(0, DB), 600);
  ck_assert_uint_eq(incl_total(0, DB), 600);
  ck_assert_uint_eq(self_total(0, HTTP), 400);
  ck_assert_uint_eq(incl_total(0, HTTP), 1000);
}
END_TEST

/* A request of GET at t0 whose http frame calls db n times. */
static void db_calls(const unsigned char *label, int64_t t0, int n) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), db = mfa("db", "q", 1);
  int k;

  start(pid_a, t0, label, ID_GET);
  CALL(pid_a, t0 + 100, http, req, label);
  for (k = 0; k < n; k++) {
    CALL(pid_a, t0 + 200 + 100 * k, db, http, label);
    RET(pid_a, t0 + 250 + 100 * k, http);
  }
  RET(pid_a, t0 + 200 + 100 * n, req);
  stop(pid_a, t0 + 300 + 100 * n, label);
}

/* calls_per_request: a histogram of each request's calls of a tier (its
 * `calls' sums them): 1 db call in one request, 4 in the next; none of tpl. */
START_TEST(calls_per_request_histogram) {
  const ks_hist *h;

  db_calls(label1, 0, 1);
  db_calls(label2, 1000, 4);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(tiers.requests, 2);
  ck_assert_uint_eq(row(0)->cols[DB].calls, 5);
  h = &row(0)->cols[DB].h[KS_TSTAT_calls_per_request];
  ck_assert_uint_eq(h->count, 2);
  ck_assert_uint_eq(h->total, 5);
  ck_assert_uint_eq(h->min, 1);
  ck_assert_uint_eq(h->max, 4);
  h = &row(0)->cols[HTTP].h[KS_TSTAT_calls_per_request];
  ck_assert(h->count == 2 && h->total == 2 && h->max == 1);
  h = &row(0)->cols[TPL].h[KS_TSTAT_calls_per_request];   /* zeros are recorded too */
  ck_assert(h->count == 2 && h->total == 0 && h->max == 0);
}
END_TEST

/* entries_per_request: a tier's calls from outside it. One request's db:q calls
 * db:encode and a pool worker runs db:exec for it (db's own: 3 calls, 1 entry);
 * the next calls db:q 3 times from http (3 and 3). */
START_TEST(entries_per_request_histogram) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), db = mfa("db", "q", 1),
           enc = mfa("db", "encode", 1), exec = mfa("db", "exec", 2);
  const ks_hist *calls, *entries;

  start(pid_a, 0, label1, ID_GET);
  CALL(pid_a, 100, http, req, label1);
  CALL(pid_a, 200, db, http, label1);
  CALL(pid_b, 220, exec, KS_NONE, label1);
  CALL(pid_a, 250, enc, db, label1);
  RET(pid_a, 280, db);
  RET(pid_a, 300, http);
  RET(pid_a, 400, req);
  stop(pid_a, 500, label1);
  db_calls(label2, 1000, 3);
  ks_tiers_flush(&tiers, 1);
  calls = &row(0)->cols[DB].h[KS_TSTAT_calls_per_request];
  entries = &row(0)->cols[DB].h[KS_TSTAT_entries_per_request];
  ck_assert(calls->count == 2 && calls->total == 6 && calls->min == 3 && calls->max == 3);
  ck_assert(entries->count == 2 && entries->total == 4 && entries->min == 1 && entries->max == 3);
  entries = &row(0)->cols[HTTP].h[KS_TSTAT_entries_per_request];
  ck_assert(entries->count == 2 && entries->total == 2);
}
END_TEST

/* An exception thrown in db, through tpl, caught in http: one return_to to http unwinds both. */
START_TEST(exception_unwinds_several_chains) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), db = mfa("db", "q", 1),
           tpl = mfa("tpl", "render", 1);

  start(pid_a, 0, label1, ID_GET);
  CALL(pid_a, 0, http, req, label1);
  CALL(pid_a, 100, tpl, http, label1);
  CALL(pid_a, 300, db, tpl, label1);
  RET(pid_a, 600, http);                /* thrown in db, caught in http */
  RET(pid_a, 1000, req);
  stop(pid_a, 1000, label1);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(self_total(0, TPL), 200);
  ck_assert_uint_eq(self_total(0, DB), 300);
  ck_assert_uint_eq(self_total(0, HTTP), 500);
  ck_assert_uint_eq(incl_total(0, TPL), 500);
}
END_TEST

/* A request nested in another (label2 inside http of label1): http's return_to,
 * after the inner request ended, ends a frame the outer request opened, so it
 * is the outer request's, though the process's last labelled call was the
 * inner stop marker. Without it http would stay open in the outer request
 * until its stop and take the 4000 ns of `other` after it. */
START_TEST(return_after_nested_request_goes_to_outer) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), db = mfa("db", "q", 1),
           inner = mfa("app", "inner", 1);

  start(pid_a, 0, label1, ID_GET);
  CALL(pid_a, 100, http, req, label1);
  /* http runs the inner request (its markers called from app:inner). */
  ev(KS_EV_CALL, pid_a, 200, mfa("kprof_mark", "start", 1), inner, label2, ID_PUT, 6);
  CALL(pid_a, 300, db, inner, label2);
  RET(pid_a, 1300, inner);
  CALL(pid_a, 1400, mfa("kprof_mark", "stop", 0), inner, label2);
  RET(pid_a, 1500, req);                /* out of http: no label, no resume marker */
  stop(pid_a, 5500, label1);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(tiers.requests, 2);
  ck_assert_uint_eq(tiers.orphan_events, 0);
  ck_assert_uint_eq(self_total(0, HTTP), 1400);
  ck_assert_uint_eq(incl_total(0, HTTP), 1400);
  ck_assert_uint_eq(self_total(0, 3), 4100);   /* other: before http and after it */
  ck_assert_uint_eq(self_total(0, 4), 5500);
  ck_assert_uint_eq(self_total(1, DB), 1000);  /* the inner request */
  ck_assert_uint_eq(self_total(1, HTTP), 0);
  ck_assert_uint_eq(self_total(1, 4), 1200);
}
END_TEST

/* The request's db work runs in a pool worker (another process) while the caller waits in http. */
START_TEST(work_in_another_process) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), db = mfa("db", "q", 1),
           loop = mfa("gen_server", "loop", 7);

  start(pid_a, 0, label1, ID_GET);
  CALL(pid_a, 0, http, req, label1);
  CALL(pid_b, 1000, db, loop, label1);  /* the worker got the request's message */
  RET(pid_b, 4000, loop);
  RET(pid_a, 4500, req);
  stop(pid_a, 5000, label1);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(self_total(0, HTTP), 1500);
  ck_assert_uint_eq(self_total(0, DB), 3000);
  ck_assert_uint_eq(self_total(0, 3), 500);
  ck_assert_uint_eq(self_total(0, 4), 5000);
}
END_TEST

/* Events arrive out of time order across processes, and after the end (in the grace window). */
START_TEST(out_of_order_and_stragglers) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1), db = mfa("db", "q", 1),
           loop = mfa("gen_server", "loop", 7);

  start(pid_a, 0, label1, ID_GET);
  CALL(pid_a, 0, http, req, label1);
  RET(pid_a, 4000, req);
  stop(pid_a, 4000, label1);
  CALL(pid_b, 1000, db, loop, label1);   /* earlier than the stop, seen after it */
  RET(pid_b, 3000, loop);
  CALL(pid_b, 4200, db, loop, label1);   /* after the end: extends the span */
  RET(pid_b, 4300, loop);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(tiers.requests, 1);
  ck_assert_uint_eq(self_total(0, HTTP), 2000);
  ck_assert_uint_eq(self_total(0, DB), 2100);
  ck_assert_uint_eq(self_total(0, 4), 4300);
}
END_TEST

/* A request is finalised once events are seen past its end plus the grace window. */
START_TEST(grace_window_and_identities) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1);

  start(pid_a, 0, label1, ID_GET);
  CALL(pid_a, 0, http, req, label1);
  RET(pid_a, 100, req);
  stop(pid_a, 100, label1);
  ck_assert_uint_eq(tiers.requests, 0);
  ck_assert_uint_eq(tiers.n_inflight, 1);
  start(pid_b, 5000, label2, ID_PUT);    /* 4900 ns later: past the 1000 ns grace */
  ck_assert_uint_eq(tiers.requests, 1);
  CALL(pid_b, 5000, http, req, label2);
  RET(pid_b, 5300, req);
  stop(pid_b, 5300, label2);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(tiers.requests, 2);
  ck_assert_uint_eq(tiers.n_identities, 2);
  ck_assert_uint_eq(row(0)->requests, 1);
  ck_assert_uint_eq(row(1)->requests, 1);
  ck_assert_uint_eq(self_total(1, HTTP), 300);
  ck_assert_uint_eq(tiers.n_slow, 2);
  ck_assert_uint_eq(tiers.slow[0].wall, 300);   /* longest first */
  ck_assert_uint_eq(tiers.slow[1].wall, 100);
}
END_TEST

/* An entry MFA opens the request itself and its return ends it. */
START_TEST(entry_opens_and_ends) {
  uint32_t acc = mfa("ranch", "loop", 3), entry = mfa("web", "entry", 2),
           db = mfa("db", "q", 1);

  CALL(pid_a, 0, entry, acc, label1);
  CALL(pid_a, 200, db, entry, label1);
  RET(pid_a, 700, entry);
  RET(pid_a, 1000, acc);
  ck_assert_uint_eq(tiers.n_inflight, 1);
  ks_tiers_flush(&tiers, 0);
  ck_assert_uint_eq(tiers.requests, 0);   /* ended, but within grace */
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(tiers.requests, 1);
  ck_assert_uint_eq(self_total(0, DB), 500);
  ck_assert_uint_eq(self_total(0, 3), 500);
  ck_assert_uint_eq(self_total(0, 4), 1000);
}
END_TEST

/* Requests whose process died never end: past max_age they give their slot back. */
/* The tiers again with one tier, 4 slots, a 10 ns grace and 1 ms max age. */
static void restart_small(void) {
  ks_tier_opts o;
  ks_tier_spec *specs = calloc(3, sizeof(*specs));

  ks_tiers_free(&tiers);
  ks_tiers_init(&tiers);
  specs[0] = spec("http", NULL, HTTP, 0);
  specs[1] = spec("kprof_mark", "start", KS_ROLE_START, 0);
  specs[2] = spec("kprof_mark", "stop", KS_ROLE_STOP, 0);
  ks_tiers_default_opts(&o);
  o.max_inflight = 4;
  o.grace_ns = 10;
  o.max_age_ns = 1000000;   /* 1 ms */
  ck_assert_int_eq(ks_tiers_start(&tiers, &in, specs, 3, 1, &o), KS_OK);
}

START_TEST(stale_requests_are_abandoned) {
  uint32_t req, http, k;
  unsigned char label[2] = {97, 0};

  restart_small();
  req = mfa("app", "req", 2);
  http = mfa("http", "handle", 1);
  for (k = 0; k < 4; k++) {   /* four requests whose processes are killed */
    label[1] = (unsigned char)k;
    start(pid_a, k, label, ID_GET);
    CALL(pid_a, k, http, req, label);
  }
  for (k = 10; k < 17; k++) {   /* seven normal ones, 10 ms later */
    int64_t t0 = 10000000 + (int64_t)k * 1000;
    label[1] = (unsigned char)k;
    start(pid_b, t0, label, ID_GET);
    CALL(pid_b, t0, http, req, label);
    RET(pid_b, t0 + 100, req);
    stop(pid_b, t0 + 100, label);
  }
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(tiers.requests, 7);
  ck_assert_uint_eq(tiers.abandoned, 4);
  ck_assert_uint_eq(tiers.dropped_requests, 0);
}
END_TEST

/* Every slot taken by fresh requests: new ones are dropped (no sweep can free
 * a slot before the oldest is max_request_ms old, and none is run); at that
 * age the oldest is abandoned at once and its slot taken. */
START_TEST(full_table_sweeps_when_one_can_be_stale) {
  uint32_t req, http, k;
  unsigned char label[2] = {97, 0};   /* labels are 2 bytes here (tb_tier_event) */

  restart_small();
  req = mfa("app", "req", 2);
  http = mfa("http", "handle", 1);
  for (k = 0; k < 4; k++) {   /* open at 0, 1000, 2000, 3000 ns */
    label[1] = (unsigned char)k;
    start(pid_a, (int64_t)k * 1000, label, ID_GET);
    CALL(pid_a, (int64_t)k * 1000, http, req, label);
  }
  for (k = 0; k < 1000; k++) {   /* no slot: dropped */
    label[0] = (unsigned char)(100 + k / 250);
    label[1] = (unsigned char)(k % 250);
    start(pid_b, 500000 + k, label, ID_GET);
  }
  ck_assert_uint_eq(tiers.dropped_requests, 1000);
  ck_assert_uint_eq(tiers.abandoned, 0);
  label[1] = 0;
  /* 1 ms and a bit after the first: it is abandoned, the new one takes its slot. */
  label[0] = 98;
  start(pid_b, 1000500, label, ID_GET);
  CALL(pid_b, 1000500, http, req, label);
  RET(pid_b, 1000600, req);
  stop(pid_b, 1000700, label);
  ck_assert_uint_eq(tiers.abandoned, 1);
  ck_assert_uint_eq(tiers.dropped_requests, 1000);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(tiers.requests, 1);
  ck_assert_uint_eq(tiers.n_inflight, 3);
}
END_TEST

/* ---- a request's process killed, through the decoder: trace messages into a sink ---- */

static ks_sink ksink;
static tb_out kout;

/* {trace_ts, <num.0.1>@n@h, What, ...: begun here, Ts to add. */
static void msg_head(ei_x_buff *x, unsigned num, const char *what, int arity) {
  tb_begin(x);
  ei_x_encode_tuple_header(x, arity);
  tb_atom(x, "trace_ts");
  tb_pid(x, "n@h", num, 0, 1);
  tb_atom(x, what);
}

/* A call with the token of label `label` and the caller req/2 (and an identity:
 * the start marker's payload), as the match specs of doc/internals-tiers.md send it. */
static void msg_call(unsigned num, const char *m, const char *f, int arity, long label,
                     const char *identity, long long ts) {
  ei_x_buff x;

  msg_head(&x, num, "call", 6);
  tb_mfa(&x, m, f, arity);
  ei_x_encode_tuple_header(&x, identity ? 3 : 2);
  ei_x_encode_tuple_header(&x, 5);   /* {Flags, Label, Serial, From, LastCnt} */
  ei_x_encode_long(&x, 0);
  ei_x_encode_long(&x, label);
  ei_x_encode_long(&x, 1);
  tb_pid(&x, "n@h", num, 0, 1);
  ei_x_encode_long(&x, 0);
  tb_mfa(&x, "app", "req", 2);
  if (identity)
    tb_atom(&x, identity);
  ei_x_encode_longlong(&x, ts);
  tb_feed(&ksink, &x);
}

static void msg_return_to(unsigned num, long long ts) {
  ei_x_buff x;

  msg_head(&x, num, "return_to", 5);
  tb_mfa(&x, "app", "req", 2);
  ei_x_encode_longlong(&x, ts);
  tb_feed(&ksink, &x);
}

static void msg_exit(unsigned num, const char *reason, long long ts) {
  ei_x_buff x;

  msg_head(&x, num, "exit", 5);
  tb_atom(&x, reason);
  ei_x_encode_longlong(&x, ts);
  tb_feed(&ksink, &x);
}

static void msg_request_start(unsigned num, long label, const char *identity, long long ts) {
  msg_call(num, "kprof_mark", "start", 1, label, identity, ts);
}

static void msg_request_stop(unsigned num, long label, long long ts) {
  msg_call(num, "kprof_mark", "stop", 0, label, NULL, ts);
}

static uint32_t sink_pid(unsigned num) {
  ei_x_buff x;
  ks_slice sl;
  uint32_t id;

  ei_x_new(&x);
  tb_pid(&x, "n@h", num, 0, 1);
  sl.p = (const unsigned char *)x.buff;
  sl.n = (size_t)x.index;
  ck_assert_int_eq(ks_intern_pid(&ksink.in, sl, &id), KS_OK);
  ei_x_free(&x);
  return id;
}

static void killed_setup(void) {
  ks_tier_opts o;
  ks_tier_spec *specs = calloc(4, sizeof(*specs));

  tb_sink_open(&ksink, NULL, &kout);
  specs[0] = spec("http", NULL, HTTP, 0);
  specs[1] = spec("db", NULL, DB, 0);
  specs[2] = spec("kprof_mark", "start", KS_ROLE_START, 0);
  specs[3] = spec("kprof_mark", "stop", KS_ROLE_STOP, 0);
  ks_tiers_default_opts(&o);
  o.max_inflight = 3;
  o.grace_ns = 1000;
  ck_assert_int_eq(ks_tiers_start(&ksink.tiers, &ksink.in, specs, 4, 2, &o), KS_OK);
}

static void killed_teardown(void) {
  tb_sink_close(&ksink, &kout);
}

/* Handlers killed in their requests (a web server's, on the client's
 * disconnect) give their slots back at their exit and count as killed, not
 * as requests; a worker's exit ends nothing; a request that ended keeps its
 * grace window; nested requests of a killed process all end. */
START_TEST(killed_process_frees_its_slot) {
  ks_tiers *t = &ksink.tiers;
  uint32_t handler, worker;
  uint64_t orphans;
  uint8_t pin[16];

  /* 1 (handler <0.1.0>) sends work to <0.2.0>, which exits normally. */
  msg_request_start(1, 1, "get", 1000);
  msg_call(1, "http", "handle", 1, 1, NULL, 1100);
  msg_call(2, "db", "q", 1, 1, NULL, 1200);
  msg_return_to(2, 1300);
  msg_exit(2, "normal", 1400);
  ck_assert_uint_eq(t->n_inflight, 1);
  ck_assert_uint_eq(t->killed_requests, 0);
  /* Two nested requests of <0.3.0>, and a third slot taken by <0.4.0>'s, which ends. */
  msg_request_start(3, 2, "outer", 1500);
  msg_request_start(3, 3, "inner", 1600);
  ck_assert_uint_eq(t->n_inflight, 3);
  msg_request_start(4, 4, "put", 1700);   /* no slot: dropped */
  ck_assert_uint_eq(t->dropped_requests, 1);
  handler = sink_pid(1);
  worker = sink_pid(2);
  memset(pin, 0, sizeof(pin));
  ks_tiers_pin_pids(t, pin, sizeof(pin));
  ck_assert_int_eq(pin[handler], 1);
  ck_assert_int_eq(pin[worker], 1);
  /* The handler is killed: no stop marker, its exit. */
  msg_exit(1, "killed", 2000);
  ck_assert_uint_eq(t->n_inflight, 2);
  ck_assert_uint_eq(t->n_free, 1);
  ck_assert_uint_eq(t->killed_requests, 1);
  ck_assert_uint_eq(t->requests, 0);
  memset(pin, 0, sizeof(pin));
  ks_tiers_pin_pids(t, pin, sizeof(pin));   /* its ids can be given back */
  ck_assert_int_eq(pin[handler], 0);
  ck_assert_int_eq(pin[worker], 0);
  /* Its late events are orphans; the freed slot takes a new request. */
  orphans = t->orphan_events;
  msg_call(2, "db", "q", 1, 1, NULL, 2100);
  ck_assert_uint_eq(t->orphan_events, orphans + 1);
  msg_request_start(5, 5, "put", 2200);
  msg_call(5, "http", "handle", 1, 5, NULL, 2300);
  msg_return_to(5, 2400);
  msg_request_stop(5, 5, 2500);
  ck_assert_uint_eq(t->n_inflight, 3);
  /* An exit after the stop marker, within the grace window: a request like any other. */
  msg_exit(5, "normal", 2600);
  ck_assert_uint_eq(t->n_inflight, 3);
  ck_assert_uint_eq(t->killed_requests, 1);
  /* Both of <0.3.0>'s requests end with it. */
  msg_exit(3, "shutdown", 2700);
  ck_assert_uint_eq(t->killed_requests, 3);
  ck_assert_uint_eq(t->n_inflight, 1);
  msg_exit(3, "shutdown", 2800);   /* once */
  ck_assert_uint_eq(t->killed_requests, 3);
  ks_tiers_flush(t, 1);
  ck_assert_uint_eq(t->requests, 1);
  ck_assert_uint_eq(t->n_identities, 4);   /* get, outer, inner, put */
  ck_assert_uint_eq(t->rows[0].requests + t->rows[1].requests + t->rows[2].requests, 0);
  ck_assert_uint_eq(t->rows[3].requests, 1);
  ck_assert_uint_eq(t->n_inflight, 0);
  ck_assert_uint_eq(t->n_free, 3);
  ck_assert_uint_eq(t->abandoned, 0);
  ck_assert_uint_eq(t->dropped_requests, 1);
  ck_assert_uint_eq(t->killed_total, 3);
}
END_TEST

/* The counter in the tier report and the sink's stats; a report's Clear zeroes
 * the report's, not the stats'. */
START_TEST(killed_in_report_and_stats) {
  ei_x_buff x;
  char *got;

  msg_request_start(1, 1, "get", 1000);
  msg_exit(1, "killed", 2000);
  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, 1);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "tiers_report");
  ei_x_encode_boolean(&x, 1);
  ei_x_encode_boolean(&x, 1);
  tb_feed(&ksink, &x);
  got = tb_out_reply(&kout, 0);
  ck_assert_ptr_nonnull(strstr(got, "killed_requests => 1,"));
  free(got);
  ck_assert_uint_eq(ksink.tiers.killed_requests, 0);
  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, 2);
  tb_atom(&x, "stats");
  tb_feed(&ksink, &x);
  got = tb_out_reply(&kout, 1);
  ck_assert_ptr_nonnull(strstr(got, "killed_requests => 1,"));
  free(got);
}
END_TEST

/* Every slot held by an ended request past its grace, not flushed yet (that
 * happens after each event): the event that opens a request flushes it first. */
START_TEST(past_grace_slots_are_taken) {
  ks_tier_opts o;
  ks_tier_spec *specs = calloc(2, sizeof(*specs));
  unsigned char label[2] = {97, 0};

  ks_tiers_free(&tiers);
  ks_tiers_init(&tiers);
  specs[0] = spec("kprof_mark", "start", KS_ROLE_START, 0);
  specs[1] = spec("kprof_mark", "stop", KS_ROLE_STOP, 0);
  ks_tiers_default_opts(&o);
  o.max_inflight = 1;
  o.grace_ns = 1000;
  ck_assert_int_eq(ks_tiers_start(&tiers, &in, specs, 2, 1, &o), KS_OK);
  start(pid_a, 0, label, ID_GET);
  stop(pid_a, 100, label);
  label[1] = 1;
  start(pid_a, 500, label, ID_GET);   /* within the first's grace: no slot */
  ck_assert_uint_eq(tiers.dropped_requests, 1);
  label[1] = 2;
  start(pid_a, 5000, label, ID_GET);  /* past it */
  stop(pid_a, 5100, label);
  ks_tiers_flush(&tiers, 1);
  ck_assert_uint_eq(tiers.requests, 2);
  ck_assert_uint_eq(tiers.dropped_requests, 1);
}
END_TEST

START_TEST(orphans_and_caps) {
  uint32_t req = mfa("app", "req", 2), http = mfa("http", "handle", 1);

  CALL(pid_a, 0, http, req, label1);   /* no request has this label */
  RET(pid_a, 10, req);
  ck_assert_uint_eq(tiers.orphan_events, 2);
  ck_assert_uint_eq(tiers.requests, 0);
}
END_TEST

/* Histogram layout: bucket bounds, merge, and quantiles within 1/64 of the truth. */
START_TEST(hist_quantile_error_bound) {
  ks_hist a, b, m;
  uint64_t v, vals[20000];
  int k, n = 20000;
  const double qs[] = {0.5, 0.9, 0.99, 0.999};

  ks_hist_init(&a);
  ks_hist_init(&b);
  ks_hist_init(&m);
  srand(7);
  for (k = 0; k < n; k++) {
    /* log-uniform from 1 ns to ~1 s */
    v = (uint64_t)1 << (rand() % 30);
    v += (uint64_t)rand() % (v + 1);
    vals[k] = v;
    if (ks_hist_record(k % 2 ? &a : &b, v) != KS_OK ||
        ks_hist_bucket_low(ks_hist_bucket(v)) > v || ks_hist_bucket_high(ks_hist_bucket(v)) < v)
      ck_abort_msg("value %llu: bucket %u", (unsigned long long)v, ks_hist_bucket(v));
  }
  ck_assert_int_eq(ks_hist_merge(&m, &a), KS_OK);
  ck_assert_int_eq(ks_hist_merge(&m, &b), KS_OK);
  ck_assert_uint_eq(m.count, (uint64_t)n);
  ck_assert_uint_eq(m.total, a.total + b.total);
  /* The answer for q must be within 1/64 of some value whose rank is q's rank. */
  for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
    uint64_t got = ks_hist_quantile(&m, qs[i]), tol = got / 64 + 1;
    size_t rank = (size_t)(qs[i] * n + 0.5), under = 0, upto = 0;
    for (k = 0; k < n; k++) {
      under += vals[k] + tol < got;
      upto += vals[k] <= got + tol;
    }
    ck_assert_uint_le(under, rank);
    ck_assert_uint_ge(upto, rank);
  }
  ck_assert_uint_eq(ks_hist_quantile(&m, 0), m.min);
  ck_assert_uint_eq(ks_hist_quantile(&m, 1), m.max);
  ks_hist_free(&a);
  ks_hist_free(&b);
  ks_hist_free(&m);
}
END_TEST

/* test/data/hist_vectors.txt, which kprof_hist_tests reads too: bucket bounds and
 * quantiles the sink's layout and kprof_hist.erl must agree on. */
static void hist_vector(char *line, int *nhist) {
  ks_hist h[2];
  char *tok, *save = NULL;
  int part = 0, checked = 0;

  ks_hist_init(&h[0]);
  ks_hist_init(&h[1]);
  strtok_r(line, " \n", &save);   /* "hist" */
  while ((tok = strtok_r(NULL, " \n", &save)) != NULL && strcmp(tok, ":") != 0)
    if (strcmp(tok, "|") == 0)
      part = 1;
    else
      ck_assert_int_eq(ks_hist_record(&h[part], strtoull(tok, NULL, 10)), KS_OK);
  ck_assert_int_eq(ks_hist_merge(&h[0], &h[1]), KS_OK);
  while ((tok = strtok_r(NULL, " \n", &save)) != NULL) {
    char *eq = strchr(tok, '=');
    ck_assert_ptr_nonnull(eq);
    *eq = 0;
    ck_assert_msg(ks_hist_quantile(&h[0], strtod(tok, NULL)) == strtoull(eq + 1, NULL, 10),
                  "hist %d: quantile %s is %llu, not %s", *nhist, tok,
                  (unsigned long long)ks_hist_quantile(&h[0], strtod(tok, NULL)), eq + 1);
    checked++;
  }
  ck_assert_int_gt(checked, 0);
  (*nhist)++;
  ks_hist_free(&h[0]);
  ks_hist_free(&h[1]);
}

START_TEST(hist_shared_vectors) {
  char path[4096], line[65536];
  unsigned long long v, lo, hi;
  unsigned b;
  int nbucket = 0, nhist = 0;
  FILE *f;

  snprintf(path, sizeof(path), "%s/hist_vectors.txt", test_data_dir());
  f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  while (fgets(line, sizeof(line), f) != NULL) {
    if (sscanf(line, "bucket %llu %u %llu %llu", &v, &b, &lo, &hi) == 4) {
      ck_assert_uint_eq(ks_hist_bucket(v), b);
      ck_assert_uint_eq(ks_hist_bucket_low(b), lo);
      ck_assert_uint_eq(ks_hist_bucket_high(b), hi);
      nbucket++;
    } else if (strncmp(line, "hist ", 5) == 0) {
      hist_vector(line, &nhist);
    }
  }
  fclose(f);
  ck_assert_int_ge(nbucket, 10);
  ck_assert_int_ge(nhist, 5);
}
END_TEST

Suite *tiers_suite(void) {
  Suite *s = suite_create("tiers");
  TCase *tc = tcase_create("tiers");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, nested_tiers_and_other);
  tcase_add_test(tc, markers_open_no_frame);
  tcase_add_test(tc, tail_call_chain);
  tcase_add_test(tc, recursion_and_repeated_calls);
  tcase_add_test(tc, calls_per_request_histogram);
  tcase_add_test(tc, entries_per_request_histogram);
  tcase_add_test(tc, exception_unwinds_several_chains);
  tcase_add_test(tc, work_in_another_process);
  tcase_add_test(tc, out_of_order_and_stragglers);
  tcase_add_test(tc, grace_window_and_identities);
  tcase_add_test(tc, entry_opens_and_ends);
  tcase_add_test(tc, orphans_and_caps);
  tcase_add_test(tc, stale_requests_are_abandoned);
  tcase_add_test(tc, full_table_sweeps_when_one_can_be_stale);
  tcase_add_test(tc, hist_quantile_error_bound);
  tcase_add_test(tc, hist_shared_vectors);
  tcase_add_test(tc, requests_pin_their_pids);
  tcase_add_test(tc, return_after_nested_request_goes_to_outer);
  tcase_add_test(tc, past_grace_slots_are_taken);
  suite_add_tcase(s, tc);
  tc = tcase_create("killed");
  tcase_add_checked_fixture(tc, killed_setup, killed_teardown);
  tcase_add_test(tc, killed_process_frees_its_slot);
  tcase_add_test(tc, killed_in_report_and_stats);
  suite_add_tcase(s, tc);
  return s;
}
