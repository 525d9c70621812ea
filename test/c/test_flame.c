/* test_flame.c: flame captures on synthetic event sequences whose stacks and times are
 * known: body and tail calls, exceptions unwinding several frames, return_to undefined,
 * scheduling (SLEEP), GC, the depth cap, inferred callers, trigger calls, children,
 * shared processes, the node cap; then every writer, the escapes, and the commands; then
 * write errors: each writer on a stream that fails, and ks_write_reply on a full
 * tmpfs and over RLIMIT_FSIZE (the reason is the errno's, and no file is left). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#define US 1000   /* timestamps below are in microseconds */

static ks_intern in;
static ks_flame fl;
static uint32_t pid_a, pid_b, pid_c;

static uint32_t mfa(const char *m, const char *f, uint32_t a) {
  return tb_intern_mfa(&in, m, f, a);
}

static uint32_t M(const char *f) {
  return mfa("m", f, 0);
}

static uint32_t pid(unsigned num) {
  return tb_intern_pid(&in, num);
}

static void setup(void) {
  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  ks_flame_init(&fl);
  pid_a = pid(1);
  pid_b = pid(2);
  pid_c = pid(3);
}

static void teardown(void) {
  ks_flame_free(&fl);
  ks_intern_free(&in);
}

static ks_fcap *start_with(const ks_fopts *o, int64_t id) {
  int slot = ks_flame_start(&fl, id, o);
  ck_assert_int_ge(slot, 0);
  return &fl.cap[slot];
}

/* A pid-mode capture of pid_a (and pid_b when both), its calls with their
 * {caller} (the search rules: BEAM stacks). */
static ks_fcap *start(int both) {
  ks_fopts o;
  ks_fcap *c;

  ks_fopts_default(&o);
  o.callers = 1;
  c = start_with(&o, 1);
  ck_assert_int_eq(ks_flame_add_pid(&fl, c, pid_a, NULL, 0), KS_OK);
  if (both)
    ck_assert_int_eq(ks_flame_add_pid(&fl, c, pid_b, "worker", 6), KS_OK);
  return c;
}

/* The function of process k's frame i in capture c. */
static uint32_t entry_at_test(const ks_fcap *c, uint32_t k, uint32_t i) {
  return ks_stack_at(&c->cp.procs[k].st, i)->mfa;
}

static void ev_full(int kind, uint32_t p, int64_t ts, uint32_t m, uint32_t caller, uint32_t other,
                    int wall, const unsigned char *payload, size_t plen) {
  ks_decoded d;

  memset(&d, 0, sizeof(d));
  d.ev.kind = (uint8_t)kind;
  d.ev.flags = KS_EVF_TS | (wall ? KS_EVF_WALL : 0);
  d.ev.pid = p;
  d.ev.ts = ts;
  d.ev.mfa = m;
  d.ev.caller = caller;
  d.ev.other = other;
  d.ev.name = KS_NONE;
  if (caller != KS_NONE)
    d.ev.flags |= KS_EVF_CALLER;
  d.payload.p = payload;
  d.payload.n = plen;
  ks_flame_event(&fl, &in, &d);
}

static void ev(int kind, uint32_t p, int64_t us, uint32_t m, uint32_t caller) {
  ev_full(kind, p, us * US, m, caller, KS_NONE, 0, NULL, 0);
}

#define CALL(p, t, m, c) ev(KS_EV_CALL, p, t, m, c)
#define RET(p, t, to) ev(KS_EV_RETURN_TO, p, t, to, KS_NONE)
#define OUT(p, t, m) ev(KS_EV_OUT, p, t, m, KS_NONE)
#define IN(p, t, m) ev(KS_EV_IN, p, t, m, KS_NONE)

/* Runs a writer on the finished capture into a string (caller frees). */
static char *write_with(ks_callpath *g, int (*writer)(const ks_fout *, FILE *)) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  uint64_t *total = malloc(g->tree.n * sizeof(*total));
  ks_fout o = {0};

  ck_assert_ptr_nonnull(f);
  ks_ftree_order(&g->tree);
  ks_ftree_totals(&g->tree, total);
  o.g = g;
  o.in = &in;
  o.total = total;
  o.grand = total[0];
  ck_assert_int_eq(writer(&o, f), KS_OK);
  fclose(f);
  free(total);
  return buf;
}

/* A folded file, checked to hold only `frame;...;frame COUNT' lines (no
 * comment: flamegraph.pl and difffolded.pl take any other line for a bad one). */
static char *only_stacks(char *all) {
  const char *line = all, *nl, *sp;

  for (; *line != 0; line = nl + 1) {
    nl = strchr(line, '\n');
    ck_assert_msg(nl != NULL, "no newline after %.60s", line);
    for (sp = nl; sp > line && sp[-1] >= '0' && sp[-1] <= '9'; sp--)
      ;
    ck_assert_msg(sp < nl && sp - 1 > line && sp[-1] == ' ' && line[0] != '#', "bad line %.*s",
                  (int)(nl - line), line);
  }
  return all;
}

static char *folded(ks_fcap *c, int64_t end_us) {
  ks_flame_finish(&fl, c, end_us >= 0, end_us * US);
  return only_stacks(write_with(&c->cp, ks_write_folded));
}

#define EXPECT_FOLDED(c, end, want)            \
  do {                                         \
    char *got_ = folded(c, end);               \
    ck_assert_str_eq(got_, want);              \
    free(got_);                                \
  } while (0)

START_TEST(body_and_tail_calls) {
  ks_fcap *c = start(0);

  CALL(pid_a, 0, M("a"), KS_NONE);     /* bottom frame */
  CALL(pid_a, 10, M("b"), M("a"));     /* a: 10 */
  RET(pid_a, 30, M("a"));              /* b: 20 */
  CALL(pid_a, 35, M("c"), M("a"));     /* a: 5 */
  CALL(pid_a, 45, M("d"), M("a"));     /* c: 10; c tail-calls d: d replaces c */
  CALL(pid_a, 50, M("e"), M("a"));     /* d: 5; d tail-calls e */
  RET(pid_a, 60, M("a"));              /* e: 10 */
  ck_assert_uint_eq(c->cp.procs[0].st.n, 1);
  EXPECT_FOLDED(c, 70,                 /* a: 10 more */
                "<0.1.0>;m:a/0 25\n"
                "<0.1.0>;m:a/0;m:b/0 20\n"
                "<0.1.0>;m:a/0;m:c/0 10\n"
                "<0.1.0>;m:a/0;m:d/0 5\n"
                "<0.1.0>;m:a/0;m:e/0 10\n");
  ck_assert_uint_eq(c->cp.k.lost_frames, 0);
}
END_TEST

/* The flow rules (no {caller}, the default): a call is a frame under the
 * function that made it, a tail call too until a return_to has shown it to
 * be one: the chain c -> d -> e returned at once into a, so the next c -> d
 * and d -> e replace their caller's frame as on the BEAM. Self times exact;
 * inclusive times per function too. */
START_TEST(flow_learns_tail_calls) {
  ks_fopts o;
  ks_fcap *c;
  ks_fmfa *rows;
  uint32_t n, k;
  uint64_t want[][3] = {{0, 30, 100}, {0, 20, 20}, {0, 20, 35}, {0, 10, 20}, {0, 20, 20}};

  ks_fopts_default(&o);
  o.hide = M("wrap");   /* flame_apply's: the stack starts at the function applied */
  o.top = 10;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_a, 10, M("b"), KS_NONE);
  RET(pid_a, 30, M("a"));
  CALL(pid_a, 35, M("c"), KS_NONE);
  CALL(pid_a, 45, M("d"), KS_NONE);     /* a tail call: not known yet */
  CALL(pid_a, 50, M("e"), KS_NONE);
  RET(pid_a, 60, M("a"));               /* c, d, e: one chain, c a body call */
  ck_assert_uint_eq(c->cp.procs[0].st.n, 1);
  CALL(pid_a, 70, M("c"), KS_NONE);
  CALL(pid_a, 80, M("d"), KS_NONE);     /* known: d replaces c */
  ck_assert_uint_eq(c->cp.procs[0].st.n, 2);
  CALL(pid_a, 85, M("e"), KS_NONE);
  RET(pid_a, 95, M("a"));
  ck_assert_uint_eq(c->cp.procs[0].st.n, 1);
  EXPECT_FOLDED(c, 100,
                "<0.1.0>;m:a/0 30\n"
                "<0.1.0>;m:a/0;m:b/0 20\n"
                "<0.1.0>;m:a/0;m:c/0 20\n"
                "<0.1.0>;m:a/0;m:c/0;m:d/0 5\n"
                "<0.1.0>;m:a/0;m:c/0;m:d/0;m:e/0 10\n"
                "<0.1.0>;m:a/0;m:d/0 5\n"
                "<0.1.0>;m:a/0;m:e/0 10\n");
  rows = ks_ffun_rows(&c->cp.fc, o.hide, &n);
  ck_assert_uint_eq(n, 5);
  for (k = 0; k < n; k++) {
    uint32_t f = rows[k].mfa == M("a") ? 0 : rows[k].mfa == M("b") ? 1 : rows[k].mfa == M("c") ? 2
                 : rows[k].mfa == M("d") ? 3 : 4;
    ck_assert_uint_eq(rows[k].self, want[f][1] * US);
    ck_assert_uint_eq(rows[k].incl, want[f][2] * US);
    ck_assert_uint_eq(rows[k].calls, f == 0 || f == 1 ? 1 : 2);
  }
  free(rows);
}
END_TEST

/* Flow rules: a server's loop of tail calls (loop -> decode -> handle ->
 * loop, the callback returning into handle) never returns; once the stack
 * is fold_depth deep it folds back to the first round, takes the loop's
 * calls for tail calls from then on, and stays flat. Direct recursion is one
 * frame. */
START_TEST(flow_server_loop) {
  ks_fopts o;
  ks_fcap *c;
  uint32_t flat = 0;
  int k;

  ks_fopts_default(&o);
  o.hide = M("wrap");
  o.fold_depth = 8;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("init"), KS_NONE);
  for (k = 0; k < 20; k++) {
    CALL(pid_a, 10 * k + 1, M("loop"), KS_NONE);
    CALL(pid_a, 10 * k + 2, M("decode"), KS_NONE);
    CALL(pid_a, 10 * k + 3, M("handle"), KS_NONE);
    CALL(pid_a, 10 * k + 4, M("cb"), KS_NONE);
    CALL(pid_a, 10 * k + 5, M("cb"), KS_NONE);   /* recursion: the same frame */
    RET(pid_a, 10 * k + 6, M("handle"));
    ck_assert_uint_le(c->cp.procs[0].st.n, 8);
    if (k == 10)
      flat = c->cp.procs[0].st.n;
  }
  /* After the fold: init, the first round's loop, and one frame running the
   * loop's functions in turn: flat. */
  ck_assert_uint_eq(c->cp.procs[0].st.n, 3);
  ck_assert_uint_eq(flat, 3);
  ck_assert_uint_eq(entry_at_test(c, 0, 2), M("handle"));
}
END_TEST

/* Flow rules in a flame_pid capture: tracing started somewhere in the
 * stack, so a return_to a function on no frame starts it again there. */
START_TEST(flow_mid_stack) {
  ks_fopts o;
  ks_fcap *c;

  ks_fopts_default(&o);
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  IN(pid_a, 0, M("b"));
  CALL(pid_a, 10, M("c"), KS_NONE);
  RET(pid_a, 20, M("b"));
  RET(pid_a, 30, M("z"));   /* b returned into z, never seen: z is the bottom */
  ck_assert_uint_eq(c->cp.procs[0].st.n, 1);
  EXPECT_FOLDED(c, 40,
                "<0.1.0>;m:b/0 20\n"
                "<0.1.0>;m:b/0;m:c/0 10\n"
                "<0.1.0>;m:z/0 10\n");
}
END_TEST

/* A top-table row: its function, self and inclusive ns. */
#define EXPECT_ROW(r, f, self_ns, incl_ns)                  \
  do {                                                      \
    ck_assert_uint_eq((r)->mfa, M(f));                      \
    ck_assert_uint_eq((r)->self, (uint64_t)(self_ns));      \
    ck_assert_uint_eq((r)->incl, (uint64_t)(incl_ns));      \
  } while (0)

/* The correction for tracing's cost: each event's cost comes off the call
 * path whose interval it ended; a path shorter than its events' cost gives
 * all it has and its caller's path the rest (the cost of a call and its
 * return falls partly in the caller's intervals); per function the same off
 * self and inclusive times; the capture's end is no event. What no caller
 * can give is counted: a process's root gives nothing. With fewer than
 * KS_FCORR_MIN_INTERVALS intervals of a kind, the cost is the calibration's
 * (correct_ns), at most the mean of the intervals of that kind. */
START_TEST(correction) {
  ks_fopts o;
  ks_fcap *c;
  ks_fmfa *rows;
  uint32_t n, k;

  ks_fopts_default(&o);
  o.hide = M("wrap");
  o.top = 10;
  o.correct_ns = 2 * US;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  for (k = 0; k < 3; k++) {          /* b: 10 us, then 1 us in a, three times */
    CALL(pid_a, 1 + 11 * k, M("b"), KS_NONE);
    RET(pid_a, 11 + 11 * k, M("a"));
  }
  CALL(pid_a, 34, M("c"), KS_NONE);  /* c: 1 us, shorter than an event's 2 */
  RET(pid_a, 35, M("a"));
  ks_flame_finish(&fl, c, 1, 45 * US);   /* a: 10 us more, no event at the end */
  ks_callpath_correct(&c->cp);
  /* The calls ended four intervals of 1 us: a call costs 1 us here (the
   * calibration's 2 is more than they hold); the return_tos' four average
   * 7.75 us: 2. b: 30 us, 3 intervals an event ended: 24; c: 1 in 1: 0, 1
   * us short, which a gives; a: 1 + 1 + 1 + 1 + 10 = 14 us, 4 intervals a
   * call ended: 14 - 4 - 1 = 9. (The first event ends no interval.) */
  ck_assert_uint_eq(c->cp.k.corrected, 8);
  ck_assert_uint_eq(c->cp.k.cost_ns[KS_FIVL_CALL], 1 * US);
  ck_assert_uint_eq(c->cp.k.cost_ns[KS_FIVL_RETURN], 2 * US);
  ck_assert_int_eq(c->cp.k.cost_measured[KS_FIVL_CALL], 0);
  ck_assert_uint_eq(c->cp.k.clamped, 0);
  ck_assert_uint_eq(c->cp.k.clamped_ns, 0);
  ck_assert_uint_eq(c->cp.k.subtracted_ns, (5 + 6 + 1) * US);
  EXPECT_FOLDED(c, -1,
                "<0.1.0>;m:a/0 9\n"
                "<0.1.0>;m:a/0;m:b/0 24\n");
  rows = ks_ffun_rows(&c->cp.fc, o.hide, &n);
  ck_assert_uint_eq(n, 3);
  EXPECT_ROW(&rows[0], "b", 24 * US, 24 * US);
  EXPECT_ROW(&rows[1], "a", 9 * US, (45 - 4 * 1 - 4 * 2) * US);   /* every event inside it */
  EXPECT_ROW(&rows[2], "c", 0, 0);
  free(rows);
}
END_TEST

/* What a process's own first frame is short of has no caller's path to go
 * to: counted, not hidden. */
START_TEST(correction_clamped) {
  ks_fopts o;
  ks_fcap *c;

  ks_fopts_default(&o);
  o.hide = M("wrap");
  o.correct_ns = 5 * US;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_a, 2, M("b"), KS_NONE);   /* a: 2 us */
  RET(pid_a, 12, M("a"));            /* b: 10 us, 5 */
  CALL(pid_a, 20, M("d"), KS_NONE);  /* a: 8 us: calls cost 5 (their mean) */
  RET(pid_a, 21, M("a"));            /* d: 1 us, 4 short: a's, which is 4 short */
  ks_flame_finish(&fl, c, 1, 21 * US);
  ks_callpath_correct(&c->cp);
  ck_assert_uint_eq(c->cp.k.corrected, 4);
  ck_assert_uint_eq(c->cp.k.clamped, 1);
  ck_assert_uint_eq(c->cp.k.clamped_ns, 4 * US);
  ck_assert_uint_eq(c->cp.k.subtracted_ns, 16 * US);
  EXPECT_FOLDED(c, -1, "<0.1.0>;m:a/0;m:b/0 5\n");
}
END_TEST

/* A function short of its events' cost on one path (b under c) and not on
 * another (b under a): what it gives c's path is outside it, so its
 * inclusive time is its self time plus its callees', never below its self
 * time; c's inclusive holds what b gave it. */
START_TEST(correction_inclusive) {
  ks_fopts o;
  ks_fcap *c;
  ks_fmfa *rows;
  uint32_t n;

  ks_fopts_default(&o);
  o.hide = M("wrap");
  o.top = 10;
  o.correct_ns = 2 * US;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_a, 1, M("b"), KS_NONE);
  RET(pid_a, 11, M("a"));            /* b under a: 10 us, one event */
  CALL(pid_a, 12, M("c"), KS_NONE);
  CALL(pid_a, 20, M("b"), KS_NONE);
  RET(pid_a, 21, M("c"));            /* b under c: 1 us for 2: c gives 1 */
  RET(pid_a, 22, M("a"));
  ks_flame_finish(&fl, c, 1, 30 * US);
  ks_callpath_correct(&c->cp);
  ck_assert_uint_eq(c->cp.k.clamped, 0);
  EXPECT_FOLDED(c, -1,
                "<0.1.0>;m:a/0 6\n"
                "<0.1.0>;m:a/0;m:b/0 8\n"
                "<0.1.0>;m:a/0;m:c/0 4\n");
  rows = ks_ffun_rows(&c->cp.fc, o.hide, &n);
  ck_assert_uint_eq(n, 3);
  EXPECT_ROW(&rows[0], "b", 8 * US, 8 * US);
  EXPECT_ROW(&rows[1], "a", 6 * US, 18 * US);
  EXPECT_ROW(&rows[2], "c", 4 * US, 4 * US);
  free(rows);
}
END_TEST

/* A capture whose whole time is less than its events' cost keeps its raw
 * times, and says so: nothing corrected, the cost not taken in skipped_ns
 * and the header, the same times as without correction. (The cost is at
 * most the mean of the run intervals: here short sleeps, which events end
 * too, make the rest.) */
START_TEST(correction_skipped) {
  ks_fopts o;
  ks_fcap *c;
  char head[256];

  ks_fopts_default(&o);
  o.hide = M("wrap");
  o.correct_ns = 50 * US;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  OUT(pid_a, 10, M("a"));            /* runs 10 us */
  IN(pid_a, 11, M("a"));             /* sleeps 1 */
  OUT(pid_a, 12, M("a"));            /* runs 1: events cost 5.5 us (the mean) */
  IN(pid_a, 13, M("a"));
  ks_flame_finish(&fl, c, 1, 13 * US);
  ks_callpath_correct(&c->cp);
  ck_assert_uint_eq(c->cp.k.corrected, 0);
  ck_assert_uint_eq(c->cp.k.subtracted_ns, 0);
  ck_assert_uint_eq(c->cp.k.clamped, 0);
  ck_assert_uint_eq(c->cp.k.skipped_ns, 50 * US);
  ck_assert_uint_eq(c->cp.o.correct_ns, 0);
  ks_callpath_correction_text(&c->cp, head, sizeof head);
  ck_assert_msg(strstr(head, "kprof correction: none, skipped_per_event_ns=50000 ") == head,
                "got %s", head);
  EXPECT_FOLDED(c, -1,
                "<0.1.0>;m:a/0 11\n"
                "<0.1.0>;m:a/0;SLEEP 2\n");
}
END_TEST

/* With KS_FCORR_MIN_INTERVALS intervals of a kind or more, its cost is
 * measured in the capture: the mean of its run intervals up to 4 times their
 * median (a long one, the program's own work, is left out), whatever the
 * calibration says; the header says each cost and where it came from. */
/* a calls b n times from t = 1 us: a runs 1 us before each call, b 3 us (once
 * 100) before its return_to; returns the time of the last return_to. */
static int64_t a_calls_b(int n) {
  int64_t t = 1;
  int k;

  CALL(pid_a, 0, M("a"), KS_NONE);
  for (k = 0; k < n; k++) {
    CALL(pid_a, t, M("b"), KS_NONE);
    t += k == 7 ? 100 : 3;
    RET(pid_a, t, M("a"));
    t += 1;
  }
  return t - 1;
}

START_TEST(correction_measured) {
  char head[512];
  ks_fopts o;
  ks_fcap *c;
  int64_t end;

  ks_fopts_default(&o);
  o.correct_ns = 400;
  o.hide = M("wrap");
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  end = a_calls_b(KS_FCORR_MIN_INTERVALS + 200);
  ks_flame_finish(&fl, c, 1, end * US);
  ks_callpath_correct(&c->cp);
  ck_assert_uint_eq(c->cp.k.cost_ns[KS_FIVL_CALL], 1 * US);
  ck_assert_uint_eq(c->cp.k.cost_ns[KS_FIVL_RETURN], 3 * US);
  ck_assert_int_eq(c->cp.k.cost_measured[KS_FIVL_CALL], 1);
  ck_assert_int_eq(c->cp.k.cost_measured[KS_FIVL_RETURN], 1);
  ck_assert_uint_eq(c->cp.k.clamped, 0);
  ks_callpath_correction_text(&c->cp, head, sizeof head);
  ck_assert_msg(strstr(head, "kprof correction: per_event_ns=2000 events=2400 call_ns=1000 "
                             "call_from=capture return_ns=3000 return_from=capture "
                             "calibration_ns=400 ") == head, "got %s", head);
  EXPECT_FOLDED(c, -1, "<0.1.0>;m:a/0;m:b/0 97\n");
}
END_TEST

/* A self tail call keeps one frame; a body recursion grows the stack. */
START_TEST(recursion) {
  ks_fcap *c = start(0);
  int k;

  CALL(pid_a, 0, M("loop"), KS_NONE);
  for (k = 1; k <= 100; k++)
    CALL(pid_a, k, M("loop"), KS_NONE);   /* tail recursion from the bottom frame */
  ck_assert_uint_eq(c->cp.procs[0].st.n, 1);
  CALL(pid_a, 200, M("f"), M("loop"));
  CALL(pid_a, 210, M("f"), M("f"));
  CALL(pid_a, 220, M("f"), M("f"));
  ck_assert_uint_eq(c->cp.procs[0].st.n, 4);
  RET(pid_a, 230, M("f"));
  RET(pid_a, 240, M("f"));
  RET(pid_a, 250, M("loop"));
  EXPECT_FOLDED(c, 250,
                "<0.1.0>;m:loop/0 200\n"
                "<0.1.0>;m:loop/0;m:f/0 20\n"
                "<0.1.0>;m:loop/0;m:f/0;m:f/0 20\n"
                "<0.1.0>;m:loop/0;m:f/0;m:f/0;m:f/0 10\n");
}
END_TEST

/* An exception thrown four frames down and caught in a: one return_to a. */
START_TEST(exception_unwinds_several) {
  ks_fcap *c = start(0);

  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_a, 10, M("b"), M("a"));
  CALL(pid_a, 20, M("c"), M("b"));
  CALL(pid_a, 30, M("d"), M("c"));
  CALL(pid_a, 40, M("e"), M("d"));
  RET(pid_a, 50, M("a"));
  ck_assert_uint_eq(c->cp.procs[0].st.n, 1);
  ck_assert_uint_eq(c->cp.k.lost_frames, 3);
  CALL(pid_a, 60, M("f"), M("a"));
  RET(pid_a, 70, M("a"));
  EXPECT_FOLDED(c, 70,
                "<0.1.0>;m:a/0 20\n"
                "<0.1.0>;m:a/0;m:b/0 10\n"
                "<0.1.0>;m:a/0;m:b/0;m:c/0 10\n"
                "<0.1.0>;m:a/0;m:b/0;m:c/0;m:d/0 10\n"
                "<0.1.0>;m:a/0;m:b/0;m:c/0;m:d/0;m:e/0 10\n"
                "<0.1.0>;m:a/0;m:f/0 10\n");
}
END_TEST

/* Frames left by tail calls out of untraced code: the next call finds its caller deeper. */
START_TEST(lost_frames_and_unknown_callers) {
  ks_fcap *c = start(0);

  CALL(pid_a, 0, M("b"), M("a"));      /* empty stack: a is inferred */
  ck_assert_uint_eq(c->cp.procs[0].st.n, 2);
  ck_assert_uint_eq(c->cp.k.unknown_callers, 1);
  CALL(pid_a, 10, M("x"), M("u"));     /* u is nowhere: inferred above b */
  ck_assert_uint_eq(c->cp.procs[0].st.n, 4);
  CALL(pid_a, 20, M("g"), M("a"));     /* returns to a: u and x were left, b replaced */
  ck_assert_uint_eq(c->cp.procs[0].st.n, 2);
  ck_assert_uint_eq(c->cp.k.lost_frames, 2);
  RET(pid_a, 30, M("z"));              /* back into z, never seen: z is the new bottom */
  ck_assert_uint_eq(c->cp.procs[0].st.n, 1);
  EXPECT_FOLDED(c, 40,
                "<0.1.0>;m:a/0;m:b/0 10\n"
                "<0.1.0>;m:a/0;m:b/0;m:u/0;m:x/0 10\n"
                "<0.1.0>;m:a/0;m:g/0 10\n"
                "<0.1.0>;m:z/0 10\n");
}
END_TEST

START_TEST(return_to_undefined) {
  ks_fcap *c = start(0);

  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_a, 10, M("b"), M("a"));
  ev(KS_EV_RETURN_TO, pid_a, 20, KS_NONE, KS_NONE);
  ck_assert_uint_eq(c->cp.procs[0].st.n, 0);
  /* After it, the process runs no frame (it exits): its last 30 us are not
   * counted, and the process's own node never has time. */
  EXPECT_FOLDED(c, 50,
                "<0.1.0>;m:a/0 10\n"
                "<0.1.0>;m:a/0;m:b/0 10\n");
}
END_TEST

/* Scheduled out: SLEEP above the stack (above the function it waits in, when untraced). */
START_TEST(sleep_and_gc) {
  ks_fcap *c = start(0);

  CALL(pid_a, 0, M("a"), KS_NONE);
  OUT(pid_a, 10, M("a"));
  IN(pid_a, 110, M("a"));
  OUT(pid_a, 120, mfa("timer", "sleep", 1));
  IN(pid_a, 220, mfa("timer", "sleep", 1));
  ev(KS_EV_GC_MINOR_START, pid_a, 230, KS_NONE, KS_NONE);
  ev(KS_EV_GC_MINOR_END, pid_a, 235, KS_NONE, KS_NONE);
  EXPECT_FOLDED(c, 240,
                "<0.1.0>;m:a/0 35\n"
                "<0.1.0>;m:a/0;SLEEP 100\n"
                "<0.1.0>;m:a/0;timer:sleep/1;SLEEP 100\n"
                "<0.1.0>;m:a/0;GC 5\n");
}
END_TEST

START_TEST(sleep_dropped) {
  ks_fopts o;
  ks_fcap *c;

  ks_fopts_default(&o);
  o.sleep = 0;
  o.gc = 0;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  OUT(pid_a, 10, M("a"));
  IN(pid_a, 110, M("a"));
  ev(KS_EV_GC_MAJOR_START, pid_a, 120, KS_NONE, KS_NONE);
  ev(KS_EV_GC_MAJOR_END, pid_a, 125, KS_NONE, KS_NONE);
  EXPECT_FOLDED(c, 130, "<0.1.0>;m:a/0 30\n");
}
END_TEST

/* The first event of a process that was idle: its in event says where it waits. */
START_TEST(in_gives_the_bottom_frame) {
  ks_fcap *c = start(0);

  IN(pid_a, 0, mfa("gen_server", "loop", 7));
  CALL(pid_a, 10, M("h"), mfa("gen_server", "loop", 7));
  RET(pid_a, 30, mfa("gen_server", "loop", 7));
  OUT(pid_a, 35, mfa("gen_server", "loop", 7));
  EXPECT_FOLDED(c, 45,
                "<0.1.0>;gen_server:loop/7 15\n"
                "<0.1.0>;gen_server:loop/7;m:h/0 20\n"
                "<0.1.0>;gen_server:loop/7;SLEEP 10\n");
}
END_TEST

START_TEST(depth_cap) {
  ks_fopts o;
  ks_fcap *c;
  int k;

  ks_fopts_default(&o);
  o.callers = 1;
  o.max_depth = 3;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("r"), KS_NONE);
  for (k = 1; k < 10; k++)
    CALL(pid_a, k * 10, M("r"), M("r"));
  ck_assert_uint_eq(c->cp.procs[0].st.n, 10);
  for (k = 9; k >= 1; k--)
    RET(pid_a, 100 + (10 - k) * 10, M("r"));
  ck_assert_uint_eq(c->cp.procs[0].st.n, 1);
  ck_assert_uint_eq(c->cp.k.depth_capped, 7);
  EXPECT_FOLDED(c, 190,
                "<0.1.0>;m:r/0 10\n"
                "<0.1.0>;m:r/0;m:r/0 20\n"
                "<0.1.0>;m:r/0;m:r/0;m:r/0 20\n"
                "<0.1.0>;m:r/0;m:r/0;m:r/0;TRUNCATED 140\n");
}
END_TEST

/* Per process: two processes interleaved get their own stacks and roots. */
START_TEST(processes_apart) {
  ks_fcap *c = start(1);

  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_b, 5, M("b"), KS_NONE);
  CALL(pid_a, 10, M("a2"), M("a"));
  CALL(pid_b, 25, M("b2"), M("b"));
  CALL(pid_c, 30, M("other"), KS_NONE);   /* not in the capture */
  RET(pid_a, 40, M("a"));
  RET(pid_b, 45, M("b"));
  ck_assert_uint_eq(c->cp.nprocs, 2);
  EXPECT_FOLDED(c, 50,
                "<0.1.0>;m:a/0 20\n"
                "<0.1.0>;m:a/0;m:a2/0 30\n"
                "worker(<0.2.0>);m:b/0 25\n"
                "worker(<0.2.0>);m:b/0;m:b2/0 20\n");
}
END_TEST

/* {kprof_flame, 7}: what the trigger's meta pattern puts in the call message. */
static const unsigned char payload7[] = {104, 2, 100, 0, 11, 'k', 'p', 'r', 'o', 'f', '_',
                                         'f', 'l', 'a', 'm', 'e', 97, 7};

START_TEST(trigger_calls) {
  ks_fopts o;
  ks_fcap *c;
  int64_t off = 1000000000000ll;   /* wall = monotonic + off */
  uint32_t trig = M("trig"), loop = M("loop");

  ks_fopts_default(&o);
  o.callers = 1;
  o.trigger = trig;
  o.ncalls = 2;
  o.time_offset = off;
  c = start_with(&o, 7);
  /* Before any trigger: not in the capture. */
  CALL(pid_a, 0, M("x"), KS_NONE);
  /* First call in pid_a: only the meta call (flags come on inside it). */
  ev_full(KS_EV_CALL, pid_a, 10 * US + off, trig, loop, KS_NONE, 1, payload7, sizeof(payload7));
  ck_assert_uint_eq(c->cp.nprocs, 1);
  CALL(pid_a, 20, M("w"), trig);
  RET(pid_a, 50, trig);
  ev_full(KS_EV_RETURN_FROM, pid_a, 55 * US + off, trig, KS_NONE, KS_NONE, 1, NULL, 0);
  ck_assert_uint_eq(c->cp.k.calls_done, 1);
  /* Outside a trigger call: not counted. */
  RET(pid_a, 60, loop);
  CALL(pid_a, 70, M("y"), loop);
  /* Second call, in pid_b: its local call event comes first, then the meta one. */
  CALL(pid_b, 100, trig, loop);
  ev_full(KS_EV_CALL, pid_b, 100 * US + off, trig, loop, KS_NONE, 1, payload7, sizeof(payload7));
  CALL(pid_b, 110, trig, trig);   /* recursive trigger call: local, then meta */
  ev_full(KS_EV_CALL, pid_b, 110 * US + off, trig, trig, KS_NONE, 1, payload7, sizeof(payload7));
  RET(pid_b, 140, trig);
  ev_full(KS_EV_RETURN_FROM, pid_b, 140 * US + off, trig, KS_NONE, KS_NONE, 1, NULL, 0);
  ck_assert_uint_eq(c->cp.k.calls_done, 1);
  ev_full(KS_EV_RETURN_FROM, pid_b, 150 * US + off, trig, KS_NONE, KS_NONE, 1, NULL, 0);
  ck_assert_uint_eq(c->cp.k.calls_done, 2);
  /* A third call is refused. */
  ev_full(KS_EV_CALL, pid_c, 200 * US + off, trig, loop, KS_NONE, 1, payload7, sizeof(payload7));
  CALL(pid_c, 210, M("z"), trig);
  ck_assert_uint_eq(c->cp.k.calls_started, 2);
  ck_assert_uint_eq(c->cp.k.calls_refused, 1);
  ck_assert_uint_eq(c->cp.nprocs, 3);   /* pid_c is known, to be untraced */
  EXPECT_FOLDED(c, 300,
                "<0.1.0>;m:trig/0 15\n"
                "<0.1.0>;m:trig/0;m:w/0 30\n"
                "<0.2.0>;m:trig/0 20\n"
                "<0.2.0>;m:trig/0;m:trig/0 30\n");
}
END_TEST

/* A trigger that tail-calls stays the bottom frame (its return_trace frame
 * is still there); its caller's return_to may come before the meta return_from. */
START_TEST(trigger_tail_calls) {
  ks_fopts o;
  ks_fcap *c;
  uint32_t trig = M("trig"), loop = M("loop"), lc = M("lc");

  ks_fopts_default(&o);
  o.trigger = trig;
  o.ncalls = 1;
  c = start_with(&o, 7);
  ev_full(KS_EV_CALL, pid_a, 0, trig, loop, KS_NONE, 1, payload7, sizeof(payload7));
  CALL(pid_a, 10, lc, loop);           /* trig tail-calls lc */
  CALL(pid_a, 20, M("leaf"), lc);
  RET(pid_a, 30, lc);
  CALL(pid_a, 35, lc, loop);           /* lc tail-recurses */
  RET(pid_a, 40, loop);                /* lc returns into trig's return_trace frame */
  ck_assert_uint_eq(c->cp.procs[0].st.n, 1);
  ev_full(KS_EV_RETURN_FROM, pid_a, 45 * US, trig, KS_NONE, KS_NONE, 1, NULL, 0);
  ck_assert_uint_eq(c->cp.k.calls_done, 1);
  EXPECT_FOLDED(c, 100,
                "<0.1.0>;m:trig/0 15\n"
                "<0.1.0>;m:trig/0;m:lc/0 20\n"
                "<0.1.0>;m:trig/0;m:lc/0;m:leaf/0 10\n");
}
END_TEST

/* Before flame_arm (hold) trigger calls are counted, not traced. */
START_TEST(trigger_hold) {
  ks_fopts o;
  ks_fcap *c;
  uint32_t trig = M("trig"), loop = M("loop");

  ks_fopts_default(&o);
  o.trigger = trig;
  o.ncalls = 1;
  o.hold = 1;
  c = start_with(&o, 7);
  ev_full(KS_EV_CALL, pid_a, 0, trig, loop, KS_NONE, 1, payload7, sizeof(payload7));
  CALL(pid_a, 10, M("early"), trig);
  ev_full(KS_EV_RETURN_FROM, pid_a, 20 * US, trig, KS_NONE, KS_NONE, 1, NULL, 0);
  ck_assert_uint_eq(c->cp.k.calls_early, 1);
  ck_assert_uint_eq(c->cp.k.calls_started, 0);
  c->cp.o.hold = 0;   /* what flame_arm does */
  CALL(pid_a, 30, trig, loop);
  ev_full(KS_EV_CALL, pid_a, 30 * US, trig, loop, KS_NONE, 1, payload7, sizeof(payload7));
  CALL(pid_a, 40, M("late"), trig);
  RET(pid_a, 50, trig);
  ev_full(KS_EV_RETURN_FROM, pid_a, 50 * US, trig, KS_NONE, KS_NONE, 1, NULL, 0);
  ck_assert_uint_eq(c->cp.k.calls_done, 1);
  EXPECT_FOLDED(c, 60,
                "<0.1.0>;m:trig/0 10\n"
                "<0.1.0>;m:trig/0;m:late/0 10\n");
}
END_TEST

START_TEST(children_follow) {
  ks_fopts o;
  ks_fcap *c;

  ks_fopts_default(&o);
  o.children = 1;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  ev_full(KS_EV_SPAWN, pid_a, 10 * US, KS_NONE, KS_NONE, pid_b, 0, NULL, 0);
  ev_full(KS_EV_SPAWNED, pid_b, 12 * US, KS_NONE, KS_NONE, pid_a, 0, NULL, 0);
  CALL(pid_b, 20, M("child"), KS_NONE);
  ev_full(KS_EV_EXIT, pid_b, 50 * US, KS_NONE, KS_NONE, KS_NONE, 0, NULL, 0);
  CALL(pid_b, 60, M("late"), KS_NONE);   /* after its exit: ignored */
  ev_full(KS_EV_SPAWNED, pid_c, 70 * US, KS_NONE, KS_NONE, pid_b, 0, NULL, 0);
  ck_assert_uint_eq(c->cp.nprocs, 2);   /* a dead parent spawns nothing we follow */
  EXPECT_FOLDED(c, 100,
                "<0.1.0>;m:a/0 100\n"
                "m:child/0(<0.2.0>);WAITING_TO_RUN 8\n"
                "m:child/0(<0.2.0>);m:child/0 30\n");
}
END_TEST

START_TEST(children_not_followed) {
  ks_fcap *c = start(0);

  CALL(pid_a, 0, M("a"), KS_NONE);
  ev_full(KS_EV_SPAWNED, pid_b, 12 * US, KS_NONE, KS_NONE, pid_a, 0, NULL, 0);
  CALL(pid_b, 20, M("child"), KS_NONE);
  ck_assert_uint_eq(c->cp.nprocs, 1);
  EXPECT_FOLDED(c, 30, "<0.1.0>;m:a/0 30\n");
}
END_TEST

/* Two captures of one process each get every event; dropping one leaves the other. */
START_TEST(shared_process) {
  ks_fopts o;
  ks_fcap *c1, *c2;

  ks_fopts_default(&o);
  c1 = start_with(&o, 1);
  c2 = start_with(&o, 2);
  ck_assert_int_eq(ks_flame_start(&fl, 2, &o), KS_EINVAL);
  ks_flame_add_pid(&fl, c1, pid_a, NULL, 0);
  ks_flame_add_pid(&fl, c2, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_a, 10, M("b"), M("a"));
  ks_flame_drop(&fl, c1);
  ck_assert_int_eq(fl.active, 1);
  RET(pid_a, 20, M("a"));
  EXPECT_FOLDED(c2, 30,
                "<0.1.0>;m:a/0 20\n"
                "<0.1.0>;m:a/0;m:b/0 10\n");
}
END_TEST

START_TEST(too_many_captures) {
  ks_fopts o;
  int k;

  ks_fopts_default(&o);
  for (k = 0; k < KS_FLAME_MAX; k++)
    ck_assert_int_ge(ks_flame_start(&fl, k, &o), 0);
  ck_assert_int_eq(ks_flame_start(&fl, 1000, &o), KS_EFULL);
}
END_TEST

/* Full trace's node cap: a new path's time goes to its parent, counted. */
START_TEST(node_cap) {
  ks_ftree t;
  uint32_t proc, a, b;

  ck_assert_int_eq(ks_ftree_init(&t, 4, KS_FTREE_NO_BUDGET), KS_OK);   /* root, proc, a, b */
  proc = ks_ftree_child(&t, 0, KS_FR(KS_FR_PROC, 1));
  a = ks_ftree_child(&t, proc, KS_FR(KS_FR_MFA, 1));
  b = ks_ftree_child(&t, a, KS_FR(KS_FR_MFA, 2));
  ck_assert_uint_eq(t.n, 4);
  ck_assert_uint_eq(ks_ftree_child(&t, a, KS_FR(KS_FR_MFA, 3)), a);
  ck_assert_uint_eq(ks_ftree_child(&t, b, KS_FR(KS_FR_MFA, 3)), b);
  ck_assert_uint_eq(t.dropped, 2);
  ck_assert_uint_eq(t.spill, KS_NONE);
  ks_ftree_free(&t);
}
END_TEST

/* The byte budget: the tree's bytes never pass it; a path that does not fit
 * goes to the OVER_BUDGET child of its parent, frames past that stay in it
 * (SLEEP and GC go above), and once the reserve is spent, to the root-level
 * spill node. */
START_TEST(budget_tree) {
  const uint64_t budget = 80000;
  uint32_t proc, k, made = 0, over = 0, x, deep, sleep, last = 0;
  ks_ftree t;

  ck_assert_int_eq(ks_ftree_init(&t, UINT32_MAX - 1, budget), KS_OK);
  ck_assert_uint_ne(t.spill, KS_NONE);
  ck_assert(ks_ftree_is_over(&t, t.spill));
  ck_assert_uint_eq(t.v[t.spill].parent, 0);
  proc = ks_ftree_child(&t, 0, KS_FR(KS_FR_PROC, 1));
  for (k = 0; k < 5000; k++) {
    x = ks_ftree_child(&t, proc, KS_FR(KS_FR_MFA, k));
    ck_assert_uint_le(t.bytes, budget);
    if (ks_ftree_is_over(&t, x)) {
      ck_assert_uint_eq(t.v[x].parent, proc);   /* under the deepest kept frame */
      over++;
    } else {
      ck_assert_uint_eq(t.v[x].frame, KS_FR(KS_FR_MFA, k));
      ck_assert_uint_eq(over, 0);   /* once over, every new path is */
      made++;
      last = x;
    }
  }
  ck_assert_uint_gt(made, 1000);
  ck_assert_uint_eq(over, 5000 - made);
  ck_assert_uint_eq(t.over_paths, over);
  /* Kept paths are found again, not sent over. */
  ck_assert_uint_eq(ks_ftree_child(&t, proc, KS_FR(KS_FR_MFA, made - 1)), last);
  /* Past OVER_BUDGET: a frame stays in it, SLEEP goes above it. */
  x = ks_ftree_child(&t, proc, KS_FR(KS_FR_MFA, 9999));
  ck_assert(ks_ftree_is_over(&t, x));
  ck_assert_uint_eq(ks_ftree_child(&t, x, KS_FR(KS_FR_MFA, 1)), x);
  ck_assert_uint_eq(ks_ftree_child(&t, x, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_DEEP)), x);
  sleep = ks_ftree_child(&t, x, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_SLEEP));
  ck_assert_uint_ne(sleep, x);
  ck_assert_uint_eq(t.v[sleep].parent, x);
  /* Every kept node wants an OVER_BUDGET child of its own: the reserve runs
   * out, and what is left goes to the spill node. */
  for (k = 0; k < made; k++) {
    deep = ks_ftree_child(&t, ks_ftree_child(&t, proc, KS_FR(KS_FR_MFA, k)),
                          KS_FR(KS_FR_MFA, 100000 + k));
    ck_assert(ks_ftree_is_over(&t, deep));
    ck_assert_uint_le(t.bytes, budget);
  }
  ck_assert_uint_eq(deep, t.spill);
  ck_assert_uint_le(t.peak, budget);
  ks_ftree_free(&t);
}
END_TEST

/* A process calls 3000 distinct functions from m:a/0, each running 10 us:
 * past the budget their time and calls go to OVER_BUDGET under m:a/0,
 * counted, and the top table (exact counters) is the same as with no budget
 * to speak of. */
static void many_paths(ks_fcap *c, uint32_t p, uint32_t n) {
  uint32_t k;

  ks_flame_add_pid(&fl, c, p, NULL, 0);
  CALL(p, 0, M("a"), KS_NONE);
  for (k = 0; k < n; k++) {
    CALL(p, 10 + 20 * k, mfa("m", "n", k), M("a"));
    RET(p, 20 + 20 * k, M("a"));
  }
}

START_TEST(over_budget_capture) {
  ks_fopts o;
  ks_fcap *c, *whole;
  ks_fmfa *rows, *rows_whole;
  uint32_t n, n_whole, k, over_calls;
  char *got, *line;

  ks_fopts_default(&o);
  o.top = 10;
  whole = start_with(&o, 1);
  many_paths(whole, pid_b, 3000);
  o.max_bytes = 80000;
  c = start_with(&o, 2);
  many_paths(c, pid_a, 3000);
  over_calls = (uint32_t)c->cp.k.over_budget_calls;
  ck_assert_uint_gt(over_calls, 1000);
  ck_assert_uint_lt(over_calls, 3000);
  ck_assert_uint_eq(c->cp.tree.over_paths, over_calls);
  ck_assert_uint_eq(whole->cp.k.over_budget_calls, 0);
  ck_assert_uint_le(c->cp.tree.peak, 80000);
  got = folded(c, 60000);
  /* Their 10 us each under m:a/0, as one visible frame. */
  line = strstr(got, "<0.1.0>;m:a/0;OVER_BUDGET ");
  ck_assert_ptr_nonnull(line);
  ck_assert_uint_eq(strtoul(line + strlen("<0.1.0>;m:a/0;OVER_BUDGET "), NULL, 10),
                    10 * over_calls);
  ck_assert_ptr_nonnull(strstr(got, "<0.1.0>;m:a/0;m:n/0 10\n"));   /* the first paths kept */
  free(got);
  ks_flame_finish(&fl, whole, 1, 60000 * US);
  rows = ks_ffun_rows(&c->cp.fc, KS_NONE, &n);
  rows_whole = ks_ffun_rows(&whole->cp.fc, KS_NONE, &n_whole);
  ck_assert_uint_eq(n, 3001);
  ck_assert_uint_eq(n, n_whole);
  for (k = 0; k < n; k++) {
    ck_assert_uint_eq(rows[k].mfa, rows_whole[k].mfa);
    ck_assert_uint_eq(rows[k].calls, rows_whole[k].calls);
    ck_assert_uint_eq(rows[k].self, rows_whole[k].self);
    ck_assert_uint_eq(rows[k].incl, rows_whole[k].incl);
  }
  ck_assert_uint_eq(rows[0].mfa, M("a"));
  ck_assert_uint_eq(rows[0].self, (60000 - 10 * 3000) * (uint64_t)US);
  ck_assert_uint_eq(rows[0].incl, 60000 * (uint64_t)US);
  ck_assert_uint_eq(rows[1].calls, 1);
  ck_assert_uint_eq(rows[1].self, 10 * (uint64_t)US);
  free(rows);
  free(rows_whole);
}
END_TEST

/* Past the stack cap, frames are counted and their time is in TOO_DEEP above
 * the deepest kept frame; the top table still has every call and self time. */
START_TEST(too_deep) {
  ks_fopts o;
  ks_fcap *c;
  ks_fmfa *rows;
  uint32_t n;
  int k;

  ks_fopts_default(&o);
  o.max_stack = 3;
  o.top = 10;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_a, 10, M("b"), M("a"));
  CALL(pid_a, 20, M("c"), M("b"));
  CALL(pid_a, 30, M("d"), M("c"));   /* the 4th frame: only counted */
  CALL(pid_a, 40, M("e"), M("d"));
  RET(pid_a, 50, M("d"));
  RET(pid_a, 60, M("c"));
  RET(pid_a, 70, M("b"));
  ck_assert_uint_eq(c->cp.k.stack_overflow, 2);
  EXPECT_FOLDED(c, 100,
                "<0.1.0>;m:a/0 10\n"
                "<0.1.0>;m:a/0;m:b/0 40\n"
                "<0.1.0>;m:a/0;m:b/0;m:c/0 20\n"
                "<0.1.0>;m:a/0;m:b/0;m:c/0;TOO_DEEP 30\n");
  rows = ks_ffun_rows(&c->cp.fc, KS_NONE, &n);
  ck_assert_uint_eq(n, 5);
  for (k = 0; k < 5; k++) {
    ck_assert_uint_eq(rows[k].calls, 1);
    ck_assert_uint_ge(rows[k].self, 10 * US);
  }
  ck_assert_uint_eq(rows[0].mfa, M("b"));   /* 10 us + 30 us after its callee returned */
  ck_assert_uint_eq(rows[0].self, 40 * US);
  free(rows);
}
END_TEST

/* Many paths: the hash table grows, every node is found again. */
START_TEST(tree_grows) {
  ks_ftree t;
  uint32_t k, a[5000];

  ck_assert_int_eq(ks_ftree_init(&t, 100000, KS_FTREE_NO_BUDGET), KS_OK);
  for (k = 0; k < 5000; k++)
    a[k] = ks_ftree_child(&t, k % 7 == 0 ? 0 : a[k - 1], k % 13);
  for (k = 0; k < 5000; k++)
    ck_assert_uint_eq(ks_ftree_child(&t, k % 7 == 0 ? 0 : a[k - 1], k % 13), a[k]);
  ck_assert_uint_le(t.n, 5001);
  ks_ftree_free(&t);
}
END_TEST

/* Per-function totals: a recursive function's inner frame adds to its self
 * time but not again to its inclusive time; calls are the caller's counts. */
START_TEST(top_by_function) {
  enum { A = 1, B = 2, C = 3 };
  uint64_t calls[4] = {0, 2, 1, 2}, total[16];
  uint32_t proc, a1, b, a2, c1, c2, n = 0;
  ks_fmfa *rows;
  ks_ftree t;

  ck_assert_int_eq(ks_ftree_init(&t, 100, KS_FTREE_NO_BUDGET), KS_OK);
  proc = ks_ftree_child(&t, 0, KS_FR(KS_FR_PROC, 7));
  a1 = ks_ftree_child(&t, proc, KS_FR(KS_FR_MFA, A));
  b = ks_ftree_child(&t, a1, KS_FR(KS_FR_MFA, B));
  a2 = ks_ftree_child(&t, b, KS_FR(KS_FR_MFA, A));
  c1 = ks_ftree_child(&t, a2, KS_FR(KS_FR_MFA, C));
  c2 = ks_ftree_child(&t, proc, KS_FR(KS_FR_MFA, C));
  (void)ks_ftree_child(&t, c2, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_SLEEP));
  t.v[a1].self = 10;
  t.v[b].self = 5;
  t.v[a2].self = 20;
  t.v[c1].self = 7;
  t.v[c2].self = 3;
  t.v[t.n - 1].self = 100;     /* c2 asleep: inclusive, not self */
  ck_assert_uint_le(t.n, 16);
  ks_ftree_totals(&t, total);
  rows = ks_ftree_mfas(&t, total, calls, 4, KS_FMFA_BY_SELF, &n);
  ck_assert_ptr_nonnull(rows);
  ck_assert_uint_eq(n, 3);
  ck_assert_uint_eq(rows[0].mfa, A);
  ck_assert_uint_eq(rows[0].self, 30);
  ck_assert_uint_eq(rows[0].incl, 42);
  ck_assert_uint_eq(rows[0].calls, 2);
  ck_assert_uint_eq(rows[1].mfa, C);
  ck_assert_uint_eq(rows[1].self, 10);
  ck_assert_uint_eq(rows[1].incl, 110);
  ck_assert_uint_eq(rows[1].calls, 2);
  ck_assert_uint_eq(rows[2].mfa, B);
  ck_assert_uint_eq(rows[2].self, 5);
  ck_assert_uint_eq(rows[2].incl, 32);
  free(rows);
  rows = ks_ftree_mfas(&t, total, calls, 4, KS_FMFA_BY_INCL, &n);
  ck_assert_uint_eq(rows[0].mfa, C);
  ck_assert_uint_eq(rows[1].mfa, A);
  free(rows);
  ks_ftree_free(&t);
}
END_TEST

/* names => elixir: frames as Elixir prints them, quoted where it quotes. */
START_TEST(elixir_names) {
  ks_fopts o;
  ks_fcap *c;
  char *got;

  ks_fopts_default(&o);
  o.elixir_names = 1;
  c = start_with(&o, 1);
  ck_assert_int_eq(ks_flame_add_pid(&fl, c, pid_a, NULL, 0), KS_OK);
  CALL(pid_a, 0, mfa("Elixir.MixDemo", "work", 1), KS_NONE);
  CALL(pid_a, 10, mfa("Elixir.Enum", "-map/2-fun-0-", 3), mfa("Elixir.MixDemo", "work", 1));
  CALL(pid_a, 20, mfa("lists", "reverse", 1), mfa("Elixir.Enum", "-map/2-fun-0-", 3));
  CALL(pid_a, 30, mfa("my-mod", "valid?", 0), mfa("lists", "reverse", 1));
  CALL(pid_a, 40, mfa("a", "say \"hi\"", 0), mfa("my-mod", "valid?", 0));
  got = folded(c, 50);
  ck_assert_str_eq(got, "<0.1.0>;MixDemo.work/1 10\n"
                        "<0.1.0>;MixDemo.work/1;Enum.\"-map/2-fun-0-\"/3 10\n"
                        "<0.1.0>;MixDemo.work/1;Enum.\"-map/2-fun-0-\"/3;:lists.reverse/1 10\n"
                        "<0.1.0>;MixDemo.work/1;Enum.\"-map/2-fun-0-\"/3;:lists.reverse/1;"
                        ":\"my-mod\".valid?/0 10\n"
                        "<0.1.0>;MixDemo.work/1;Enum.\"-map/2-fun-0-\"/3;:lists.reverse/1;"
                        ":\"my-mod\".valid?/0;:a.\"say%20\\\"hi\\\"\"/0 10\n");
  free(got);
}
END_TEST

/* Counts add up to the total even when every path has a fraction of a microsecond. */
START_TEST(folded_rounding) {
  ks_fcap *c = start(0);
  char *got, *p;
  unsigned long sum = 0;
  int k;

  CALL(pid_a, 0, M("a"), KS_NONE);
  for (k = 0; k < 10; k++) {
    ev_full(KS_EV_CALL, pid_a, 1000 * k + 100, mfa("m", "x", (uint32_t)k), M("a"), KS_NONE, 0, NULL, 0);
    ev_full(KS_EV_RETURN_TO, pid_a, 1000 * k + 700, M("a"), KS_NONE, KS_NONE, 0, NULL, 0);
  }
  got = folded(c, 10);
  for (p = got; (p = strchr(p, ' ')) != NULL; p++)
    sum += strtoul(p + 1, NULL, 10);
  ck_assert_uint_eq(sum, 10);
  free(got);
}
END_TEST

static void small_capture(ks_fcap *c) {
  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_a, 100, M("b"), M("a"));
  OUT(pid_a, 150, M("b"));
  IN(pid_a, 250, M("b"));
  RET(pid_a, 300, M("a"));
  CALL(pid_b, 0, M("c"), KS_NONE);
  ks_flame_finish(&fl, c, 1, 400 * US);
}

static int count(const char *s, const char *sub) {
  int n = 0;
  for (; (s = strstr(s, sub)) != NULL; s += strlen(sub))
    n++;
  return n;
}

START_TEST(speedscope_events) {
  ks_fcap *c = start(1);
  char *got;

  small_capture(c);
  got = write_with(&c->cp, ks_write_speedscope);
  ck_assert_ptr_nonnull(strstr(got, "\"$schema\":\"https://www.speedscope.app/file-format-schema.json\""));
  ck_assert_ptr_nonnull(strstr(got, "\"frames\":[{\"name\":\"m:a/0\"},{\"name\":\"m:b/0\"},"
                                    "{\"name\":\"SLEEP\"},{\"name\":\"m:c/0\"}]"));
  ck_assert_ptr_nonnull(strstr(got, "{\"type\":\"evented\",\"name\":\"<0.1.0>\",\"unit\":"
                                    "\"microseconds\",\"startValue\":0,\"endValue\":400.000,"
                                    "\"events\":[{\"type\":\"O\",\"frame\":0,\"at\":0.000},"
                                    "{\"type\":\"O\",\"frame\":1,\"at\":0.000},"
                                    "{\"type\":\"O\",\"frame\":2,\"at\":0.000},"
                                    "{\"type\":\"C\",\"frame\":2,\"at\":100.000},"
                                    "{\"type\":\"C\",\"frame\":1,\"at\":200.000},"
                                    "{\"type\":\"C\",\"frame\":0,\"at\":400.000}]}"));
  ck_assert_ptr_nonnull(strstr(got, "\"name\":\"worker(<0.2.0>)\""));
  ck_assert_int_eq(count(got, "\"type\":\"O\""), count(got, "\"type\":\"C\""));
  free(got);
}
END_TEST

/* Issue 13: a's own process, b and c children that run m:w/0 (after 5 and 2 us
 * waiting to run), written as grouped views. */
static ks_fcap *two_workers(int group) {
  ks_fopts o;
  ks_fcap *c;

  ks_fopts_default(&o);
  o.children = 1;
  o.group = group;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  ev_full(KS_EV_SPAWN, pid_a, 10 * US, KS_NONE, KS_NONE, pid_b, 0, NULL, 0);
  ev_full(KS_EV_SPAWNED, pid_b, 10 * US, mfa("erlang", "apply", 2), KS_NONE, pid_a, 0, NULL, 0);
  CALL(pid_b, 15, mfa("erlang", "apply", 2), KS_NONE);   /* a spawn wrapper: not its label */
  CALL(pid_b, 15, M("w"), mfa("erlang", "apply", 2));
  ev_full(KS_EV_EXIT, pid_b, 35 * US, KS_NONE, KS_NONE, KS_NONE, 0, NULL, 0);
  ev_full(KS_EV_SPAWNED, pid_c, 20 * US, KS_NONE, KS_NONE, pid_a, 0, NULL, 0);
  CALL(pid_c, 22, M("w"), KS_NONE);
  ev_full(KS_EV_EXIT, pid_c, 32 * US, KS_NONE, KS_NONE, KS_NONE, 0, NULL, 0);
  ks_flame_finish(&fl, c, 1, 50 * US);
  return c;
}

static char *view_with(ks_fcap *c, int (*writer)(const ks_fout *, FILE *)) {
  ks_callpath view;
  char *got;

  ck_assert_int_eq(ks_callpath_view(&c->cp, &in, &view), KS_OK);
  got = write_with(&view, writer);
  ks_callpath_view_free(&view);
  return got;
}

START_TEST(labels_and_groups) {
  ks_fcap *c = two_workers(KS_GROUP_PID);
  char *got = only_stacks(write_with(&c->cp, ks_write_folded));

  /* Children are labelled by their first call past the spawn wrapper. */
  ck_assert_str_eq(got, "<0.1.0>;m:a/0 50\n"
                        "m:w/0(<0.2.0>);WAITING_TO_RUN 5\n"
                        "m:w/0(<0.2.0>);erlang:apply/2;m:w/0 20\n"
                        "m:w/0(<0.3.0>);WAITING_TO_RUN 2\n"
                        "m:w/0(<0.3.0>);m:w/0 10\n");
  free(got);
  /* An initial call from kprof_flame_srv wins; a registered name wins over it. */
  ks_flame_set_call(c, pid_a, "my_worker:init/1", 16);
  ks_flame_set_call(c, pid_c, "x:y/2", 5);
  ck_assert_int_eq(ks_flame_add_pid(&fl, c, pid_c, "reg", 3), KS_OK);
  ck_assert_uint_eq(c->cp.nprocs, 3);
  got = only_stacks(write_with(&c->cp, ks_write_folded));
  ck_assert_ptr_nonnull(strstr(got, "my_worker:init/1(<0.1.0>);m:a/0 50\n"));
  ck_assert_ptr_nonnull(strstr(got, "reg(<0.3.0>);m:w/0 10\n"));
  free(got);
}
END_TEST

START_TEST(group_by_call) {
  ks_fcap *c = two_workers(KS_GROUP_CALL);
  char *got = only_stacks(view_with(c, ks_write_folded));

  /* b and c both run m:w/0: one root, their stacks merged, times summed. */
  ck_assert_str_eq(got, "<0.1.0>;m:a/0 50\n"
                        "m:w/0(2_processes);WAITING_TO_RUN 7\n"
                        "m:w/0(2_processes);erlang:apply/2;m:w/0 20\n"
                        "m:w/0(2_processes);m:w/0 10\n");
  free(got);
  /* perf: the group is the comm, never a frame; speedscope: the profile's name. */
  got = view_with(c, ks_write_perf);
  ck_assert_ptr_nonnull(strstr(got, "m:w/0(2_processes) 1073741824/1073741824 [000] "));
  ck_assert_ptr_null(strstr(got, "(2_processes) (erlang)"));
  free(got);
  got = view_with(c, ks_write_speedscope);
  ck_assert_ptr_nonnull(strstr(got, "\"name\":\"m:w/0(2_processes)\",\"unit\""));
  free(got);
  got = view_with(c, ks_write_svg);
  ck_assert_ptr_nonnull(strstr(got, "<title>m:w/0(2_processes) (37 us, 42.53%)</title>"));
  free(got);
}
END_TEST

START_TEST(group_all_and_name) {
  ks_fcap *c = two_workers(KS_GROUP_ALL);
  char *got = only_stacks(view_with(c, ks_write_folded));

  ck_assert_str_eq(got, "all(3_processes);m:a/0 50\n"
                        "all(3_processes);WAITING_TO_RUN 7\n"
                        "all(3_processes);erlang:apply/2;m:w/0 20\n"
                        "all(3_processes);m:w/0 10\n");
  free(got);
  /* name: only processes that share a registered name merge. */
  c->cp.o.group = KS_GROUP_NAME;
  ks_flame_add_pid(&fl, c, pid_b, "w", 1);
  ks_flame_add_pid(&fl, c, pid_c, "w", 1);
  got = only_stacks(view_with(c, ks_write_folded));
  ck_assert_str_eq(got, "<0.1.0>;m:a/0 50\n"
                        "w(2_processes);WAITING_TO_RUN 7\n"
                        "w(2_processes);erlang:apply/2;m:w/0 20\n"
                        "w(2_processes);m:w/0 10\n");
  free(got);
}
END_TEST

START_TEST(fold_recursion) {
  ks_fopts o;
  ks_fcap *c;
  char *got;

  ks_fopts_default(&o);
  o.callers = 1;
  o.fold_recursion = 1;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_a, 10, M("a"), M("a"));
  CALL(pid_a, 20, M("a"), M("a"));
  CALL(pid_a, 30, M("b"), M("a"));
  CALL(pid_a, 35, M("a"), M("b"));   /* not direct: a under b stays */
  ks_flame_finish(&fl, c, 1, 40 * US);
  got = only_stacks(write_with(&c->cp, ks_write_folded));
  ck_assert_str_eq(got, "<0.1.0>;m:a/0 10\n<0.1.0>;m:a/0;m:a/0 10\n<0.1.0>;m:a/0;m:a/0;m:a/0 10\n"
                        "<0.1.0>;m:a/0;m:a/0;m:a/0;m:b/0 5\n"
                        "<0.1.0>;m:a/0;m:a/0;m:a/0;m:b/0;m:a/0 5\n");
  free(got);
  got = only_stacks(view_with(c, ks_write_folded));
  ck_assert_str_eq(got, "<0.1.0>;m:a/0 30\n<0.1.0>;m:a/0;m:b/0 5\n<0.1.0>;m:a/0;m:b/0;m:a/0 5\n");
  free(got);
}
END_TEST

/* The body of a callgrind file (after its header's blank line). */
static char *callgrind_body(char *all) {
  char *at = strstr(all, "\nevents: us\n\n"), *body;

  ck_assert_msg(strncmp(all, "# callgrind format\nversion: 1\ncreator: kprof ", 42) == 0,
                "got %.60s", all);
  ck_assert_msg(strstr(all, "\ndesc: kprof correction: ") != NULL, "got %.200s", all);
  ck_assert_ptr_nonnull(at);
  body = strdup(at + 13);
  free(all);
  return body;
}

/* a calls b twice, the second b calls c: the calls of callgrind_graph. */
static void a_b_b_c(void) {
  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_a, 100, M("b"), M("a"));
  RET(pid_a, 300, M("a"));
  CALL(pid_a, 400, M("b"), M("a"));
  CALL(pid_a, 450, M("c"), M("b"));
  RET(pid_a, 550, M("b"));
  RET(pid_a, 600, M("a"));
}

START_TEST(callgrind_graph) {
  ks_fcap *c = start(0);
  char *got;

  a_b_b_c();
  ks_flame_finish(&fl, c, 1, 700 * US);
  got = callgrind_body(write_with(&c->cp, ks_write_callgrind));
  /* Self cost per function, calls and inclusive cost per callee; names compressed. */
  ck_assert_str_eq(got, "fl=(0) ???\nfn=(1) <0.1.0>\n0 0\ncfi=(1) m\ncfn=(2) m:a/0\ncalls=1 0\n0 700\n\n"
                        "fl=(1)\nfn=(2)\n0 300\ncfi=(1)\ncfn=(3) m:b/0\ncalls=2 0\n0 400\n\n"
                        "fl=(1)\nfn=(3)\n0 300\ncfi=(1)\ncfn=(4) m:c/0\ncalls=1 0\n0 100\n\n"
                        "fl=(1)\nfn=(4)\n0 100\n\ntotals: 700\n");
  free(got);
}
END_TEST

/* folded_calls: the calls of each path's leaf, not its time; a path with no
 * call of its own (the process) only prefixes the others; not in `all'. */
START_TEST(folded_calls_counts_calls) {
  ks_fcap *c = start(0);
  char *got;

  a_b_b_c();
  CALL(pid_a, 610, M("c"), M("a"));
  RET(pid_a, 611, M("a"));   /* 1 us: no time to speak of, still a call */
  ks_flame_finish(&fl, c, 1, 700 * US);
  got = only_stacks(write_with(&c->cp, ks_write_folded_calls));
  ck_assert_str_eq(got, "<0.1.0>;m:a/0 1\n"
                             "<0.1.0>;m:a/0;m:b/0 2\n"
                             "<0.1.0>;m:a/0;m:b/0;m:c/0 1\n"
                             "<0.1.0>;m:a/0;m:c/0 1\n");
  free(got);
  ck_assert_int_eq(KS_FMT_folded_calls, 1 << KS_FMT_INDEX_folded_calls);
}
END_TEST

/* flat: one line per function, most self time first, the top table's counts;
 * not in `all'. */
START_TEST(flat_lists_functions) {
  ks_fcap *c = start(0);
  char *got;

  a_b_b_c();
  ks_flame_finish(&fl, c, 1, 700 * US);
  got = write_with(&c->cp, ks_write_flat);
  ck_assert_str_eq(got, "function\tcalls\tself_ns\tinclusive_ns\n"
                        "m:a/0\t1\t300000\t700000\n"
                        "m:b/0\t2\t300000\t400000\n"
                        "m:c/0\t1\t100000\t100000\n");
  free(got);
  ck_assert_int_eq(ks_write_format_bit("flat"), KS_FMT_flat);
}
END_TEST

/* top_by: the top table's order, and so which N it keeps; decoded from the
 * table's values like any enum row. */
START_TEST(top_by_orders_the_table) {
  const int orders[] = {KS_FMFA_BY_SELF, KS_FMFA_BY_INCL, KS_FMFA_BY_CALLS};
  const char *firsts[] = {"a", "a", "b"};   /* a: 300 self, 700 incl; b: 2 calls */
  const ks_option *term;
  ks_fmfa *rows;
  ks_fopts o;
  ks_fcap *c;
  ei_x_buff x;
  uint32_t n;
  int k, idx = 0, ver;

  ks_fopts_default(&o);
  ck_assert_int_eq(o.top_by, KS_FMFA_BY_SELF);   /* the row's default, "self" */
  ei_x_new_with_version(&x);
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_atom(&x, "top_by");
  ei_x_encode_atom(&x, "calls");
  ei_decode_version(x.buff, &idx, &ver);
  ck_assert_int_eq(ks_option_decode(KS_M_FLAME, ks_flame_fields, x.buff, &idx, &o, &term), KS_OK);
  ck_assert_int_eq(o.top_by, KS_FMFA_BY_CALLS);
  ei_x_free(&x);
  o.callers = 1;
  o.top = 10;
  c = start_with(&o, 1);
  ck_assert_int_eq(ks_flame_add_pid(&fl, c, pid_a, NULL, 0), KS_OK);
  a_b_b_c();
  ks_flame_finish(&fl, c, 1, 700 * US);
  for (k = 0; k < 3; k++) {
    rows = ks_ffun_rows(&c->cp.fc, o.hide, &n);
    ck_assert_uint_eq(n, 3);
    ks_fmfa_sort(rows, n, orders[k]);
    ck_assert_uint_eq(rows[0].mfa, M(firsts[k]));
    ck_assert(k != 2 || (rows[0].calls == 2 && rows[1].calls == 1));
    ck_assert(k != 1 || (rows[0].incl >= rows[1].incl && rows[1].incl >= rows[2].incl));
    free(rows);
  }
}
END_TEST

/* A function on several paths: one entry, its costs summed; folded recursion's
 * calls are not calls from its caller; totals are the folded file's. */
START_TEST(callgrind_sums_paths) {
  ks_fopts o;
  ks_fcap *c;
  char *got, *fold, *p;
  unsigned long sum = 0;
  ks_callpath view;

  ks_fopts_default(&o);
  o.callers = 1;
  o.fold_recursion = 1;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  CALL(pid_a, 0, M("a"), KS_NONE);
  CALL(pid_a, 10, M("a"), M("a"));
  CALL(pid_a, 20, M("a"), M("a"));
  CALL(pid_a, 30, M("b"), M("a"));
  CALL(pid_a, 35, M("a"), M("b"));   /* not direct: a under b stays */
  ks_flame_finish(&fl, c, 1, 40 * US);
  ck_assert_int_eq(ks_callpath_view(&c->cp, &in, &view), KS_OK);
  got = callgrind_body(write_with(&view, ks_write_callgrind));
  fold = only_stacks(write_with(&view, ks_write_folded));
  ks_callpath_view_free(&view);
  ck_assert_str_eq(got,
                   "fl=(0) ???\nfn=(1) <0.1.0>\n0 0\ncfi=(1) m\ncfn=(2) m:a/0\ncalls=1 0\n0 40\n\n"
                        "fl=(1)\nfn=(2)\n0 35\ncfi=(1)\ncfn=(3) m:b/0\ncalls=1 0\n0 10\n\n"
                        "fl=(1)\nfn=(3)\n0 5\ncfi=(1)\ncfn=(2)\ncalls=1 0\n0 5\n\ntotals: 40\n");
  for (p = fold; (p = strchr(p, ' ')) != NULL; p++)
    sum += strtoul(p + 1, NULL, 10);
  ck_assert_uint_eq(sum, 40);
  free(got);
  free(fold);
}
END_TEST

START_TEST(perf_samples) {
  ks_fopts o;
  ks_fcap *c;
  char *got;

  ks_fopts_default(&o);
  o.perf_period_us = 10;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  ks_flame_add_pid(&fl, c, pid_b, "worker", 6);
  small_capture(c);
  got = write_with(&c->cp, ks_write_perf);
  /* a: 400 us in all, 40 samples; b's sleep 100 us: 10 samples; c: 40. */
  ck_assert_int_eq(count(got, "cpu-clock:\n"), 80);
  ck_assert_int_eq(count(got, "<0.1.0> 1/1 [000] "), 40);
  ck_assert_int_eq(count(got, "worker(<0.2.0>) 2/2 [000] "), 40);
  /* Addresses are node numbers: root 0, the budget's spill node 1, processes 2
   * and 3, then a, b, SLEEP. */
  /* The process is the comm only, never a frame (stackcollapse-perf.pl would
   * put it at the root twice). */
  ck_assert_int_eq(count(got, "\t6 SLEEP (erlang)\n\t5 m:b/0 (erlang)\n\t4 m:a/0 (erlang)\n\n"),
                   10);
  ck_assert_ptr_null(strstr(got, "\t2 <0.1.0> (erlang)"));
  ck_assert_ptr_null(strstr(got, "worker(<0.2.0>) (erlang)"));
  /* The merged timeline: b's SLEEP [0, 100), b [100, 200), a's own time [200, 400). */
  ck_assert_ptr_nonnull(strstr(got, "<0.1.0> 1/1 [000] 1.000195: 10000 cpu-clock:\n"
                                    "\t5 m:b/0 (erlang)\n\t4 m:a/0 (erlang)\n\n"
                                    "<0.1.0> 1/1 [000] 1.000205: 10000 cpu-clock:\n"
                                    "\t4 m:a/0 (erlang)\n\n"));
  free(got);
}
END_TEST

/* Issue 30: a path the perf script file samples is in the folded file too. A
 * path under 1 us may round to no line of the folded file (its count is the
 * running sum's, rounded 500 ns past each whole us of the capture's timeline);
 * perf's samples fell on whole us of each process's own timeline, so such a
 * path could take one: b at [4.6, 5.4) us took the sample at 5 us, e at
 * [4.9, 5.1) us of the second process (which starts at 39.7 us) too, and
 * neither is in the folded file. */
START_TEST(perf_paths_in_folded) {
  static const char *names[] = {"m:b/0", "m:e/0", "m:d/0", "m:c/0"};
  ks_fopts o;
  ks_fcap *c;
  char *perf, *fold;
  size_t k;

  ks_fopts_default(&o);
  o.perf_period_us = 10;
  c = start_with(&o, 1);
  ks_flame_add_pid(&fl, c, pid_a, NULL, 0);
  ks_flame_add_pid(&fl, c, pid_b, NULL, 0);
  ev_full(KS_EV_CALL, pid_a, 300, M("a"), KS_NONE, KS_NONE, 0, NULL, 0);
  ev_full(KS_EV_CALL, pid_a, 300, M("c"), M("a"), KS_NONE, 0, NULL, 0);
  ev_full(KS_EV_RETURN_TO, pid_a, 4900, M("a"), KS_NONE, KS_NONE, 0, NULL, 0);
  ev_full(KS_EV_CALL, pid_a, 4900, M("b"), M("a"), KS_NONE, 0, NULL, 0);
  ev_full(KS_EV_RETURN_TO, pid_a, 5700, M("a"), KS_NONE, KS_NONE, 0, NULL, 0);
  ev_full(KS_EV_CALL, pid_b, 0, M("x"), KS_NONE, KS_NONE, 0, NULL, 0);
  ev_full(KS_EV_CALL, pid_b, 0, M("d"), M("x"), KS_NONE, 0, NULL, 0);
  ev_full(KS_EV_RETURN_TO, pid_b, 4900, M("x"), KS_NONE, KS_NONE, 0, NULL, 0);
  ev_full(KS_EV_CALL, pid_b, 4900, M("e"), M("x"), KS_NONE, 0, NULL, 0);
  ev_full(KS_EV_RETURN_TO, pid_b, 5100, M("x"), KS_NONE, KS_NONE, 0, NULL, 0);
  ks_flame_finish(&fl, c, 1, 40 * US);
  perf = write_with(&c->cp, ks_write_perf);
  fold = write_with(&c->cp, ks_write_folded);
  for (k = 0; k < sizeof(names) / sizeof(names[0]); k++)
    ck_assert_msg(strstr(perf, names[k]) == NULL || strstr(fold, names[k]) != NULL,
                  "%s sampled in perf, not in folded:\n%s\n%s", names[k], fold, perf);
  /* Still a sample every 10 us of each process's 39.7 and 40 us. */
  ck_assert_int_eq(count(perf, "cpu-clock:\n"), 8);
  free(perf);
  free(fold);
}
END_TEST

START_TEST(svg_frames) {
  ks_fcap *c = start(1);
  char *got;

  small_capture(c);
  got = write_with(&c->cp, ks_write_svg);
  ck_assert_ptr_nonnull(strstr(got, "<svg version=\"1.1\""));
  ck_assert_ptr_nonnull(strstr(got, "<g data-d=\"0\" data-n=\"all\"><title>all (800 us, 100.00%)"));
  ck_assert_ptr_nonnull(strstr(got, "data-n=\"m:b/0\"><title>m:b/0 (200 us, 25.00%)</title>"));
  ck_assert_ptr_nonnull(strstr(got, "data-n=\"worker(&lt;0.2.0&gt;)\""));
  ck_assert_int_eq(count(got, "<g data-d="), 7);
  ck_assert_ptr_nonnull(strstr(got, "function zoom("));
  ck_assert_ptr_nonnull(strstr(got, "function search("));
  ck_assert_ptr_null(strstr(got, "http://www.w3.org/1999/xlink"));   /* nothing external */
  free(got);
}
END_TEST

START_TEST(escapes) {
  ks_fcap *c = start(0);
  uint32_t odd = mfa("my mod;x", "f\"<1>%", 2);
  char out[64], *got, *buf = NULL;
  size_t len = 0;
  FILE *f;

  ck_assert_uint_eq(ks_write_escape_folded("(a b;c%\n", 8, out, sizeof(out)), 18);
  ck_assert_str_eq(out, "%28a%20b%3Bc%25%0A");
  CALL(pid_a, 0, odd, KS_NONE);
  got = folded(c, 5);
  ck_assert_str_eq(got, "<0.1.0>;my%20mod%3Bx:f\"<1>%25/2 5\n");
  free(got);
  f = open_memstream(&buf, &len);
  ks_write_put_json(f, "a\"b\\c\x01", 6);
  ks_write_put_xml(f, "<&>\"'\x02", 6);
  fclose(f);
  ck_assert_str_eq(buf, "\"a\\\"b\\\\c\\u0001\"&lt;&amp;&gt;&quot;&#39;\xef\xbf\xbd");
  free(buf);
  /* Bytes that are not UTF-8 (a stray continuation, an overlong form, a surrogate, a
   * sequence cut short): U+FFFD in JSON and XML, %XX in folded; UTF-8 passes. */
  buf = NULL;
  f = open_memstream(&buf, &len);
  ks_write_put_json(f, "\x80\xc0\xaf\xed\xa0\x80\xc3\xa9\xe2\x82", 10);
  ks_write_put_xml(f, "\xff\xe6\x97\xa5", 4);
  fclose(f);
  ck_assert_str_eq(buf, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                        "\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\""
                        "\xef\xbf\xbd\xe6\x97\xa5");
  free(buf);
  ck_assert_uint_eq(ks_write_escape_folded("\xff\xc3\xa9;", 4, out, sizeof(out)), 8);
  ck_assert_str_eq(out, "%FF\xc3\xa9%3B");
  /* Cut at out's end: a character whole or not at all. */
  ck_assert_uint_eq(ks_write_escape_folded("ab\xe6\x97\xa5", 5, out, 5), 2);
  ck_assert_str_eq(out, "ab");
  /* A callgrind name: one line of UTF-8, no `(' first, never empty; spaces and `;' stay. */
  buf = NULL;
  f = open_memstream(&buf, &len);
  ks_write_put_line(f, "(a b;c\n\x7f\xff\xc3\xa9", 11);
  putc('|', f);
  ks_write_put_line(f, "", 0);
  fclose(f);
  ck_assert_str_eq(buf, "[a b;c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xc3\xa9|''");
  free(buf);
}
END_TEST

/*
 * Write errors. A stream that takes `room` bytes, then fails every write with
 * ENOSPC and counts the writes made after the first failure.
 */
typedef struct failing {
  size_t room, taken;
  int after;
} failing;

static ssize_t failing_write(void *cookie, const char *buf, size_t n) {
  failing *s = cookie;
  size_t k = n < s->room - s->taken ? n : s->room - s->taken;

  (void)buf;
  s->taken += k;
  if (k < n) {
    s->after++;
    errno = ENOSPC;
  }
  return (ssize_t)k;
}

static int failing_close(void *cookie) {
  (void)cookie;
  return 0;
}

static void finished(ks_callpath *g, ks_fout *o) {
  uint64_t *total = malloc(g->tree.n * sizeof(*total));

  ck_assert_ptr_nonnull(total);
  ks_ftree_order(&g->tree);
  ks_ftree_totals(&g->tree, total);
  memset(o, 0, sizeof(*o));
  o->g = g;
  o->in = &in;
  o->total = total;
  o->grand = total[0];
  o->processes = g->nprocs;
}

/* pid_a calls n functions of its own from m:root/0, 5 us each: n + 2 call paths. */
static void wide_capture(ks_fcap *c, int n) {
  char f[16];
  int k;

  CALL(pid_a, 0, M("root"), KS_NONE);
  for (k = 0; k < n; k++) {
    snprintf(f, sizeof(f), "f%d", k);
    CALL(pid_a, 10 * k + 1, M(f), M("root"));
    RET(pid_a, 10 * k + 6, M("root"));
  }
  ks_flame_finish(&fl, c, 1, (10 * n + 10) * US);
}

/* Every writer notices a write that fails anywhere in its output (unbuffered: each
 * write reaches the stream at once) and stops there rather than write on into it. */
START_TEST(writers_stop_at_a_failed_write) {
  static const struct {
    const char *name;
    int (*write)(const ks_fout *, FILE *);
  } w[] = {{"folded", ks_write_folded}, {"perf", ks_write_perf},
           {"speedscope", ks_write_speedscope}, {"svg", ks_write_svg},
           {"callgrind", ks_write_callgrind}};
  cookie_io_functions_t io = {NULL, failing_write, NULL, failing_close};
  ks_fcap *c = start(0);
  ks_fout o;
  size_t k, len, cut;

  wide_capture(c, 300);
  finished(&c->cp, &o);
  for (k = 0; k < sizeof(w) / sizeof(w[0]); k++) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_int_eq(w[k].write(&o, f), KS_OK);
    fclose(f);
    free(buf);
    for (cut = 0; cut < len; cut += cut < 2 || cut + 2 >= len ? 1 : len / 17) {
      failing s = {cut, 0, 0};
      f = fopencookie(&s, "w", io);
      ck_assert_ptr_nonnull(f);
      setvbuf(f, NULL, _IONBF, 0);
      ck_assert_msg(w[k].write(&o, f) < 0, "%s: a write failing after %zu of %zu bytes "
                    "went unnoticed", w[k].name, cut, len);
      fclose(f);
      /* A writer that went on would write at least once per node (300 of them); one
       * that stops writes what is left of its header or of one node (at most 25). */
      ck_assert_msg(s.after < 64, "%s: %d writes after the failure at %zu of %zu", w[k].name,
                    s.after, cut, len);
    }
  }
  free((void *)o.total);
}
END_TEST

static void no_info(ks_map *m, const void *ctx) {
  (void)m;
  (void)ctx;
}

static void write_reply(const ks_fout *o, const char *dir, const char *base, int fmts,
                        ei_x_buff *x) {
  ks_fdest d;

  ck_assert_uint_lt(strlen(dir), sizeof(d.dir) - 1100);
  snprintf(d.dir, sizeof(d.dir), "%s", dir);
  snprintf(d.base, sizeof(d.base), "%s", base);
  d.fmts = fmts;
  ck_assert_int_eq(ei_x_new(x), 0);
  ck_assert_int_eq(ks_write_reply(o, &d, x, no_info, NULL), 0);
}

/* x holds {error, {What, Dir/File, Reason}}; freed. */
static void check_path_error(ei_x_buff *x, const char *what, const char *dir, const char *file,
                             const char *reason) {
  char atom[MAXATOMLEN], path[8192], want[8192], *txt = NULL;
  int idx = 0, idx2 = 0, ar;
  long plen;

  ck_assert_int_ge(ei_s_print_term(&txt, x->buff, &idx2), 0);
  snprintf(want, sizeof(want), "%s/%s", dir, file);
  ck_assert_msg(ei_decode_tuple_header(x->buff, &idx, &ar) == 0 && ar == 2 &&
                ei_decode_atom(x->buff, &idx, atom) == 0 && strcmp(atom, "error") == 0 &&
                ei_decode_tuple_header(x->buff, &idx, &ar) == 0 && ar == 3 &&
                ei_decode_atom(x->buff, &idx, atom) == 0 && strcmp(atom, what) == 0 &&
                ei_decode_binary(x->buff, &idx, path, &plen) == 0 && plen < (long)sizeof(path),
                "want {error, {%s, %s, %s}}, got %s", what, want, reason, txt);
  path[plen] = 0;
  ck_assert_str_eq(path, want);
  ck_assert_int_eq(ei_decode_atom(x->buff, &idx, atom), 0);
  ck_assert_msg(strcmp(atom, reason) == 0, "want %s, got %s", reason, txt);
  free(txt);
  ei_x_free(x);
}

static void expect_path_error(const ks_fout *o, const char *dir, const char *base, int fmts,
                              const char *what, const char *file, const char *reason) {
  ei_x_buff x;

  write_reply(o, dir, base, fmts, &x);
  check_path_error(&x, what, dir, file, reason);
}

static void expect_written(const ks_fout *o, const char *dir, const char *base, int fmts) {
  char *txt = NULL;
  int idx = 0;
  ei_x_buff x;

  write_reply(o, dir, base, fmts, &x);
  ck_assert_int_ge(ei_s_print_term(&txt, x.buff, &idx), 0);
  ck_assert_msg(strncmp(txt, "{ok, [#Bin<", 11) == 0, "got %s", txt);
  free(txt);
  ei_x_free(&x);
}

/* The names in dir, but `keep`, space separated ("" when none). */
static void names_in(const char *dir, const char *keep, char *out, size_t cap) {
  DIR *d = opendir(dir);
  struct dirent *e;
  size_t n = 0;

  ck_assert_ptr_nonnull(d);
  out[0] = 0;
  while ((e = readdir(d)) != NULL && n + 1 < cap)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
        (keep == NULL || strcmp(e->d_name, keep) != 0))
      n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? " " : "", e->d_name);
  closedir(d);
}

#define EXPECT_NO_FILES(dir, keep)                                  \
  do {                                                              \
    char left_[4096];                                               \
    names_in(dir, keep, left_, sizeof(left_));                      \
    ck_assert_msg(left_[0] == 0, "files left in %s: %s", dir, left_); \
  } while (0)

/*
 * A tmpfs mounted with `opts` on dir in a mount namespace of a child of ours,
 * which holds it until released: this process reaches it at /proc/PID/root/dir.
 * As root the namespace is a mount namespace; otherwise a user namespace too.
 */
typedef struct holder {
  pid_t pid;
  int release;          /* closing it lets the child exit (and the tmpfs go) */
  char dir[4096];       /* the tmpfs, as seen from here */
} holder;

/* 0, or why the tmpfs could not be had (an errno, printed by the caller). */
static int hold_tmpfs(holder *h, const char *dir, const char *opts) {
  int ready[2], release[2], err = 0;
  char c;

  ck_assert_int_eq(pipe2(ready, O_CLOEXEC), 0);
  ck_assert_int_eq(pipe2(release, O_CLOEXEC), 0);
  h->pid = fork();
  ck_assert_int_ge(h->pid, 0);
  if (h->pid == 0) {
    close(ready[0]);
    close(release[1]);
    err = tb_private_mounts();
    if (err == 0 && mount("tmpfs", dir, "tmpfs", 0, opts) != 0)
      err = errno;
    if (write(ready[1], &err, sizeof(err)) != sizeof(err) || err != 0)
      _exit(1);
    while (read(release[0], &c, 1) > 0 || errno == EINTR)
      ;
    _exit(0);
  }
  close(ready[1]);
  close(release[0]);
  h->release = release[1];
  if (read(ready[0], &err, sizeof(err)) != sizeof(err))
    err = ECHILD;
  close(ready[0]);
  snprintf(h->dir, sizeof(h->dir), "/proc/%d/root%s", (int)h->pid, dir);
  if (err != 0) {
    close(h->release);
    waitpid(h->pid, NULL, 0);
  }
  return err;
}

/* The child exits 0 (under valgrind, non-zero if it found an error in it). */
static void let_go(holder *h) {
  int status;

  close(h->release);
  ck_assert_int_eq(waitpid(h->pid, &status, 0), h->pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the tmpfs holder: status %d",
                status);
}

/* Writes into dir/filler until the file system is full. */
static void fill(const char *dir) {
  char path[4200], block[4096];
  int fd;

  memset(block, 'x', sizeof(block));
  snprintf(path, sizeof(path), "%s/filler", dir);
  fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ck_assert_int_ge(fd, 0);
  while (write(fd, block, sizeof(block)) > 0)
    ;
  ck_assert_int_eq(errno, ENOSPC);
  close(fd);
}

/*
 * A full disk, for real: a 256 KiB tmpfs. The SVG of a wide capture does not fit
 * (it fails while written), the folded stacks do: the reply names the SVG and
 * ENOSPC, and neither file is left, so a retry gets the same names. Then the
 * disk is filled: a small file fails only at fclose (its bytes were buffered),
 * with ENOSPC too. With room again, the same name is written. A tmpfs with one
 * inode: the second file cannot be created, the first is removed.
 */
START_TEST(full_disk) {
  char dir[64], path[4300];
  ks_fcap *wide = start(0), *small;
  ks_fout big, little;
  holder h, h1;
  size_t folded_len, svg_len;
  int err;
  char *text;

  tb_tmpdir(dir, sizeof(dir), "full-disk");
  if ((err = hold_tmpfs(&h, dir, "size=256k,mode=0700")) != 0) {
    printf("full_disk: skipped: this machine cannot mount a tmpfs in a namespace of "
           "its own (%s)\n", strerror(err));
    rmdir(dir);
    return;
  }
  wide_capture(wide, 3000);
  text = only_stacks(write_with(&wide->cp, ks_write_folded));
  folded_len = strlen(text);
  free(text);
  text = write_with(&wide->cp, ks_write_svg);
  svg_len = strlen(text);
  free(text);
  ck_assert_uint_lt(folded_len, 200 * 1024);
  ck_assert_uint_gt(svg_len, 512 * 1024);
  finished(&wide->cp, &big);
  expect_path_error(&big, h.dir, "wide", KS_FMT_folded | KS_FMT_svg, "write_failed",
                    "wide.svg", "enospc");
  EXPECT_NO_FILES(h.dir, NULL);
  expect_path_error(&big, h.dir, "wide", KS_FMT_folded | KS_FMT_svg, "write_failed",
                    "wide.svg", "enospc");
  EXPECT_NO_FILES(h.dir, NULL);

  ks_flame_drop(&fl, wide);
  small = start(1);
  small_capture(small);
  finished(&small->cp, &little);
  fill(h.dir);
  expect_path_error(&little, h.dir, "small", KS_FMT_folded, "write_failed", "small.folded",
                    "enospc");
  EXPECT_NO_FILES(h.dir, "filler");
  snprintf(path, sizeof(path), "%s/filler", h.dir);
  ck_assert_int_eq(unlink(path), 0);
  expect_written(&little, h.dir, "small", KS_FMT_folded);
  snprintf(path, sizeof(path), "%s/small.folded", h.dir);
  ck_assert_int_eq(access(path, F_OK), 0);
  let_go(&h);

  ck_assert_int_eq(hold_tmpfs(&h1, dir, "nr_inodes=2,size=256k,mode=0700"), 0);
  expect_path_error(&little, h1.dir, "small", KS_FMT_folded | KS_FMT_svg, "open_failed",
                    "small.svg", "enospc");
  EXPECT_NO_FILES(h1.dir, NULL);
  let_go(&h1);
  ck_assert_int_eq(rmdir(dir), 0);
  free((void *)big.total);
  free((void *)little.total);
}
END_TEST

/* A file over RLIMIT_FSIZE: EFBIG (SIGXFSZ ignored), no file left. Needs no privilege. */
START_TEST(file_too_big) {
  char dir[64];
  struct rlimit old, lim;
  ks_fcap *c = start(0);
  void (*was)(int);
  ks_fout o;
  ei_x_buff x;

  tb_tmpdir(dir, sizeof(dir), "fsize");
  wide_capture(c, 200);
  finished(&c->cp, &o);
  ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 1000;
  was = signal(SIGXFSZ, SIG_IGN);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  write_reply(&o, dir, "big", KS_FMT_folded, &x);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, was);
  check_path_error(&x, "write_failed", dir, "big.folded", "efbig");
  EXPECT_NO_FILES(dir, NULL);
  ck_assert_int_eq(rmdir(dir), 0);
  free((void *)o.total);
}
END_TEST

/* The commands, end to end through a sink: start, pids, events, status, members, write. */
static ks_sink sink;
static tb_out outb;

static void trace_call(unsigned p, long long ts, const char *f, const char *caller) {
  ei_x_buff x;

  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 6);
  tb_atom(&x, "trace_ts");
  tb_pid(&x, "n@h", p, 0, 1);
  tb_atom(&x, "call");
  tb_mfa(&x, "w", f, 0);
  if (caller)
    tb_mfa(&x, "w", caller, 0);
  else
    tb_atom(&x, "undefined");
  ei_x_encode_longlong(&x, ts);
  tb_feed(&sink, &x);
}

static char *reply(int k) {
  return tb_out_reply(&outb, k);
}

static void start_cmd(long ref, long id) {
  ei_x_buff x;

  tb_cmd_begin(&x, ref, "flame_start", 3);
  ei_x_encode_long(&x, id);
  ei_x_encode_list_header(&x, 2);
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "sleep");
  tb_atom(&x, "false");
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "max_bytes");
  ei_x_encode_long(&x, 1 << 20);
  ei_x_encode_empty_list(&x);
  tb_feed(&sink, &x);
}

/* {flame_members, Id, own}: a process another capture also has is left out,
 * so closing one capture does not take the other's flags off. */
START_TEST(members_own) {
  ei_x_buff x;
  char *r;

  tb_sink_open(&sink, NULL, &outb);
  start_cmd(1, 1);
  start_cmd(2, 2);
  tb_flame_pids(&sink, 3, 1, 7, 9);
  tb_flame_pids(&sink, 4, 2, 9, 0);
  tb_cmd_begin(&x, 5, "flame_members", 3);
  ei_x_encode_long(&x, 1);
  tb_atom(&x, "own");
  tb_feed(&sink, &x);
  tb_cmd_begin(&x, 6, "flame_members", 3);
  ei_x_encode_long(&x, 2);
  tb_atom(&x, "own");
  tb_feed(&sink, &x);
  tb_cmd_begin(&x, 7, "flame_members", 3);
  ei_x_encode_long(&x, 1);
  tb_atom(&x, "mine");
  tb_feed(&sink, &x);
  ck_assert_int_eq(outb.frames, 7);
  r = reply(4); ck_assert_str_eq(r, "[<n@h.7.0>]"); free(r);
  r = reply(5); ck_assert_str_eq(r, "[]"); free(r);
  r = reply(6); ck_assert_str_eq(r, "{error, badarg}"); free(r);
  tb_sink_close(&sink, &outb);
}
END_TEST

START_TEST(commands) {
  char dir[64], path[256], *r, *at;
  unsigned char *file;
  ei_x_buff x;
  size_t len, k;

  tb_tmpdir(dir, sizeof(dir), "flame-test");
  tb_sink_open(&sink, NULL, &outb);
  start_cmd(1, 42);
  start_cmd(2, 42);
  tb_cmd_begin(&x, 3, "flame_pids", 3);
  ei_x_encode_long(&x, 42);
  ei_x_encode_list_header(&x, 1);
  ei_x_encode_tuple_header(&x, 2);
  tb_pid(&x, "n@h", 9, 0, 1);
  ei_x_encode_binary(&x, "srv", 3);
  ei_x_encode_empty_list(&x);
  tb_feed(&sink, &x);
  trace_call(9, 1000000, "top", NULL);
  trace_call(9, 1500000, "leaf", "top");
  trace_call(8, 1600000, "elsewhere", NULL);
  tb_cmd_begin(&x, 4, "flame_status", 2);
  ei_x_encode_long(&x, 42);
  tb_feed(&sink, &x);
  tb_cmd_begin(&x, 5, "flame_members", 2);
  ei_x_encode_long(&x, 42);
  tb_feed(&sink, &x);
  tb_flame_write(&sink, 6, 42, dir, "cap");
  tb_flame_write(&sink, 7, 42, dir, "cap");   /* gone with the first write */
  tb_cmd_begin(&x, 8, "flame_bogus", 2);
  ei_x_encode_long(&x, 1);
  tb_feed(&sink, &x);
  ck_assert_int_eq(outb.frames, 8);
  r = reply(0); ck_assert_str_eq(r, "ok"); free(r);
  r = reply(1); ck_assert_str_eq(r, "{error, exists}"); free(r);
  r = reply(2); ck_assert_str_eq(r, "ok"); free(r);
  r = reply(3);
  ck_assert_ptr_nonnull(strstr(r, "events => 2"));
  ck_assert_ptr_nonnull(strstr(r, "procs => 1"));
  free(r);
  r = reply(4); ck_assert_str_eq(r, "[<n@h.9.0>]"); free(r);
  r = reply(5);
  ck_assert_msg(strncmp(r, "{ok, [#Bin<", 11) == 0, "got %s", r);
  ck_assert_ptr_nonnull(strstr(r, "total_us => 1000"));
  ck_assert_ptr_nonnull(strstr(r, "write_us => #{folded => "));
  free(r);
  r = reply(6); ck_assert_str_eq(r, "{error, not_found}"); free(r);
  r = reply(7); ck_assert_str_eq(r, "{error, {unknown_command, {flame_bogus, 1}}}"); free(r);
  snprintf(path, sizeof(path), "%s/cap.folded", dir);
  file = read_file(path, &len);
  ck_assert_ptr_nonnull(file);
  ck_assert_str_eq((char *)file, "srv(<0.9.0>);w:top/0 500\n"
                                 "srv(<0.9.0>);w:top/0;w:leaf/0 500\n");
  free(file);
  /* Beside it, what the folded file has no room for; the reply lists only the
   * formats asked (two paths). */
  snprintf(path, sizeof(path), "%s/cap.meta.json", dir);
  file = read_file(path, &len);
  ck_assert_ptr_nonnull(file);
  ck_assert_str_eq((char *)file,
                   "{\"kprof\":\"" KS_VERSION "\",\"id\":42,\"processes\":1,\"total_us\":1000,"
                   "\"formats\":[\"folded\",\"svg\"],\"units\":{\"folded\":\"us\"},"
                   "\"correction\":{\"applied\":false,\"text\":\"kprof correction: none (raw "
                   "times: each event's tracing cost is in them)\"}}\n");
  free(file);
  r = reply(5);
  for (k = 0, at = r; (at = strstr(at, "#Bin<")) != NULL; at++)
    k++;
  ck_assert_msg(k == 2, "got %s", r);
  free(r);
  /* Same base again: the files are not overwritten, the name gets -1. */
  start_cmd(9, 43);
  tb_cmd_begin(&x, 10, "flame_pids", 3);
  ei_x_encode_long(&x, 43);
  ei_x_encode_list_header(&x, 1);
  ei_x_encode_tuple_header(&x, 2);
  tb_pid(&x, "n@h", 9, 0, 1);
  tb_atom(&x, "undefined");
  ei_x_encode_empty_list(&x);
  tb_feed(&sink, &x);
  trace_call(9, 1700000, "top", NULL);
  tb_flame_write(&sink, 11, 43, dir, "cap");
  r = reply(10);
  ck_assert_msg(strncmp(r, "{ok, [#Bin<", 11) == 0, "got %s", r);
  free(r);
  snprintf(path, sizeof(path), "%s/cap-1.folded", dir);
  ck_assert_int_eq(access(path, F_OK), 0);
  snprintf(path, sizeof(path), "%s/cap-1.svg", dir);
  ck_assert_int_eq(access(path, F_OK), 0);
  snprintf(path, sizeof(path), "%s/cap-1.meta.json", dir);
  ck_assert_int_eq(access(path, F_OK), 0);
  /* No events: no files. */
  start_cmd(12, 44);
  tb_flame_write(&sink, 13, 44, dir, "none");
  r = reply(12);
  ck_assert_msg(strncmp(r, "{error, no_events, #{", 21) == 0, "got %s", r);
  free(r);
  snprintf(path, sizeof(path), "%s/none.folded", dir);
  ck_assert_int_ne(access(path, F_OK), 0);
  ck_assert_int_eq(sink.flame.active, 0);
  tb_sink_close(&sink, &outb);
  tb_tmpdir_remove(dir);
}
END_TEST

Suite *flame_suite(void) {
  Suite *s = suite_create("flame");
  TCase *tc = tcase_create("flame");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, correction);
  tcase_add_test(tc, correction_clamped);
  tcase_add_test(tc, correction_skipped);
  tcase_add_test(tc, correction_inclusive);
  tcase_add_test(tc, correction_measured);
  tcase_add_test(tc, flow_learns_tail_calls);
  tcase_add_test(tc, flow_server_loop);
  tcase_add_test(tc, flow_mid_stack);
  tcase_add_test(tc, body_and_tail_calls);
  tcase_add_test(tc, recursion);
  tcase_add_test(tc, exception_unwinds_several);
  tcase_add_test(tc, lost_frames_and_unknown_callers);
  tcase_add_test(tc, return_to_undefined);
  tcase_add_test(tc, sleep_and_gc);
  tcase_add_test(tc, sleep_dropped);
  tcase_add_test(tc, in_gives_the_bottom_frame);
  tcase_add_test(tc, depth_cap);
  tcase_add_test(tc, processes_apart);
  tcase_add_test(tc, trigger_calls);
  tcase_add_test(tc, trigger_tail_calls);
  tcase_add_test(tc, trigger_hold);
  tcase_add_test(tc, children_follow);
  tcase_add_test(tc, children_not_followed);
  tcase_add_test(tc, shared_process);
  tcase_add_test(tc, too_many_captures);
  tcase_add_test(tc, node_cap);
  tcase_add_test(tc, budget_tree);
  tcase_add_test(tc, over_budget_capture);
  tcase_add_test(tc, too_deep);
  tcase_add_test(tc, tree_grows);
  tcase_add_test(tc, folded_rounding);
  tcase_add_test(tc, speedscope_events);
  tcase_add_test(tc, perf_samples);
  tcase_add_test(tc, perf_paths_in_folded);
  tcase_add_test(tc, top_by_function);
  tcase_add_test(tc, elixir_names);
  tcase_add_test(tc, labels_and_groups);
  tcase_add_test(tc, group_by_call);
  tcase_add_test(tc, group_all_and_name);
  tcase_add_test(tc, fold_recursion);
  tcase_add_test(tc, callgrind_graph);
  tcase_add_test(tc, folded_calls_counts_calls);
  tcase_add_test(tc, flat_lists_functions);
  tcase_add_test(tc, top_by_orders_the_table);
  tcase_add_test(tc, callgrind_sums_paths);
  tcase_add_test(tc, svg_frames);
  tcase_add_test(tc, escapes);
  tcase_add_test(tc, commands);
  tcase_add_test(tc, members_own);
  suite_add_tcase(s, tc);
  tc = tcase_create("files");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, writers_stop_at_a_failed_write);
  tcase_add_test(tc, full_disk);
  tcase_add_test(tc, file_too_big);
  suite_add_tcase(s, tc);
  return s;
}
