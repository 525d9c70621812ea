/* test_control.c: commands interleaved with trace messages, and the replies they get. */
#include <stdlib.h>

#include "test_util.h"

static ks_sink sink;
static tb_out out;

static void setup(void) {
  tb_sink_open(&sink, NULL, &out);
}

static void teardown(void) {
  tb_sink_close(&sink, &out);
}

static void command(long ref, const char *cmd) {
  ei_x_buff x;

  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, ref);
  tb_atom(&x, cmd);
  tb_feed(&sink, &x);
}

/* {trace_ts, <num.0.3>@n@h, call, {m, F, Arity}, Ts} into x (begun here). */
static void call_x(ei_x_buff *x, unsigned num, const char *f, int arity, long long ts) {
  tb_begin(x);
  ei_x_encode_tuple_header(x, 5);
  tb_atom(x, "trace_ts");
  tb_pid(x, "n@h", num, 0, 3);
  tb_atom(x, "call");
  tb_mfa(x, "m", f, arity);
  ei_x_encode_longlong(x, ts);
}

static void call_event(const char *f, int arity) {
  ei_x_buff x;

  call_x(&x, 85, f, arity, -5);
  tb_feed(&sink, &x);
}

static void expect_reply(int k, const char *want) {
  char *got = tb_out_reply(&out, k);
  ck_assert_str_eq(got, want);
  free(got);
}

/* Reply k holds both texts. */
static void expect_reply_has(int k, const char *a, const char *b) {
  char *got = tb_out_reply(&out, k);
  ck_assert_ptr_nonnull(strstr(got, a));
  ck_assert_ptr_nonnull(strstr(got, b));
  free(got);
}

START_TEST(ping_version_unknown) {
  command(1, "ping");
  command(2, "version");
  command(3, "frobnicate");
  ck_assert_int_eq(out.frames, 3);
  expect_reply(0, "pong");
  expect_reply(1, "{kprof_sink, \"" KS_VERSION "\", 2}");
  expect_reply(2, "{error, {unknown_command, frobnicate}}");
}
END_TEST

/* {kprof, Ref, {Name, 1, ...}} with n integer arguments. */
static void command_args(long ref, const char *name, int n) {
  ei_x_buff x;
  int k;

  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, ref);
  ei_x_encode_tuple_header(&x, n + 1);
  tb_atom(&x, name);
  for (k = 0; k < n; k++)
    ei_x_encode_long(&x, 1);
  tb_feed(&sink, &x);
}

/* The command table: a known name with an arity its row does not take is as
 * unknown as a name no row has, for every feature's commands alike. */
START_TEST(known_names_with_other_arities_are_unknown) {
  command_args(1, "ping", 1);
  command_args(2, "tiers_report", 3);   /* {tiers_report, 1, 1, 1}: arity 4 */
  command_args(3, "flame_status", 2);  /* {flame_status, 1, 1} */
  command_args(4, "tiers_full_report", 2);
  command_args(5, "flame_status", 1);  /* {flame_status, 1}: a known command */
  command_args(6, "test_delay_us", 1); /* the fault-injection build's only */
  expect_reply(0, "{error, {unknown_command, {ping, 1}}}");
  expect_reply(1, "{error, {unknown_command, {tiers_report, 1, 1, 1}}}");
  expect_reply(2, "{error, {unknown_command, {flame_status, 1, 1}}}");
  expect_reply(3, "{error, {unknown_command, {tiers_full_report, 1, 1}}}");
  expect_reply(4, "{error, not_found}");
  expect_reply(5, "{error, {unknown_command, {test_delay_us, 1}}}");
}
END_TEST

/* ks_map: the header's count is the keys added, nested maps included, and
 * the bytes are those of ei's header written first with that count. */
START_TEST(maps_count_their_keys) {
  ei_x_buff a, b;
  ks_map m, inner;
  int idx = 0, ver, arity;

  ei_x_new_with_version(&a);
  ks_map_begin(&m, &a);
  ks_map_u64(&m, "x", 1);
  ks_map_key(&m, "inner");
  ks_map_begin(&inner, &a);
  ks_map_bool(&inner, "on", 1);
  ks_map_i64_or_undefined(&inner, "ts", INT64_MIN, INT64_MIN);
  ck_assert_int_eq(ks_map_end(&inner), 0);
  ks_map_atom(&m, "what", "rate");
  ck_assert_int_eq(ks_map_end(&m), 0);

  ei_x_new_with_version(&b);
  ei_x_encode_map_header(&b, 3);
  ei_x_encode_atom(&b, "x");
  ei_x_encode_ulonglong(&b, 1);
  ei_x_encode_atom(&b, "inner");
  ei_x_encode_map_header(&b, 2);
  ei_x_encode_atom(&b, "on");
  ei_x_encode_boolean(&b, 1);
  ei_x_encode_atom(&b, "ts");
  ei_x_encode_atom(&b, "undefined");
  ei_x_encode_atom(&b, "what");
  ei_x_encode_atom(&b, "rate");
  ck_assert_int_eq(a.index, b.index);
  ck_assert_int_eq(memcmp(a.buff, b.buff, (size_t)a.index), 0);
  ck_assert_int_eq(ei_decode_version(a.buff, &idx, &ver), 0);
  ck_assert_int_eq(ei_decode_map_header(a.buff, &idx, &arity), 0);
  ck_assert_int_eq(arity, 3);
  ei_x_free(&a);
  ei_x_free(&b);
}
END_TEST

/* The reply names the Ref it answers, byte for byte. */
START_TEST(reply_carries_ref) {
  ei_x_buff x;
  int idx = 0, v, ar;
  long ref;
  const char *b;

  command(123456789, "ping");
  b = (const char *)out.buf + 4;
  ck_assert_int_eq(ei_decode_version(b, &idx, &v), 0);
  ck_assert_int_eq(ei_decode_tuple_header(b, &idx, &ar), 0);
  ck_assert_int_eq(ar, 3);
  {
    char tag[MAXATOMLEN];
    ck_assert_int_eq(ei_decode_atom(b, &idx, tag), 0);
    ck_assert_str_eq(tag, "kprof_reply");
  }
  ck_assert_int_eq(ei_decode_long(b, &idx, &ref), 0);
  ck_assert_int_eq(ref, 123456789);
  (void)x;
}
END_TEST

/* sync answers after everything before it: the counts it sees include every frame. */
START_TEST(sync_is_a_barrier_and_calls_count) {
  int k;

  for (k = 0; k < 3; k++)
    call_event("f", 2);
  call_event("g", 0);
  command(1, "sync");
  command(2, "calls");
  expect_reply(0, "{synced, 5}");
  expect_reply(1, "[{{m, f, 2}, 3}, {{m, g, 0}, 1}]");
  ck_assert_uint_eq(sink.st.events[KS_EV_CALL], 4);
}
END_TEST

START_TEST(stats_and_reset) {
  const unsigned char junk[] = {0, 0, 0, 3, 1, 2, 3, 0, 0, 0, 0};
  char *txt;

  call_event("f", 1);
  ks_sink_feed(&sink, junk, sizeof(junk));
  command(1, "stats");
  txt = tb_out_reply(&out, 0);
  ck_assert_ptr_nonnull(strstr(txt, "trace_events => 1"));
  ck_assert_ptr_nonnull(strstr(txt, "call => 1"));
  ck_assert_ptr_nonnull(strstr(txt, "decode_errors => 1"));
  ck_assert_ptr_nonnull(strstr(txt, "empty => 1"));
  ck_assert_ptr_nonnull(strstr(txt, "commands => 1"));
  ck_assert_ptr_nonnull(strstr(txt, "mfas => 1"));
  free(txt);
  command(2, "reset");
  expect_reply(1, "ok");
  command(3, "calls");
  expect_reply(2, "[]");
  ck_assert_uint_eq(sink.st.trace_events, 0);
  ck_assert_uint_eq(sink.st.decode_errors, 0);
  /* Interned ids survive a reset. */
  ck_assert_uint_eq(sink.in.n_mfas, 1);
}
END_TEST

static void call_from(unsigned num, const char *f) {
  ei_x_buff x;

  call_x(&x, num, f, 0, -5);
  tb_feed(&sink, &x);
}

/* Small caps: the stats reply says which table refused, `dropped` counts the messages. */
START_TEST(stats_split_drops_by_table) {
  ks_sink_opts o;
  char *txt;

  tb_sink_close(&sink, &out);
  ks_sink_default_opts(&o);
  o.limits.max_pids = 2;
  o.limits.max_mfas = 3;
  tb_sink_open(&sink, &o, &out);
  call_from(1, "f");
  call_from(2, "f");
  call_from(3, "f");   /* a third pid: refused */
  call_from(4, "f");   /* a fourth: refused */
  call_from(1, "g");
  call_from(1, "h");
  call_from(1, "i");   /* a fourth MFA: refused */
  call_from(5, "j");   /* both full: one message, one drop in each table */
  command(1, "stats");
  txt = tb_out_reply(&out, 0);
  ck_assert_ptr_nonnull(strstr(txt, "dropped => 4,"));
  ck_assert_ptr_nonnull(strstr(txt, "dropped_pids => 3,"));
  ck_assert_ptr_nonnull(strstr(txt, "dropped_mfas => 2,"));
  ck_assert_ptr_nonnull(strstr(txt, "dropped_names => 0,"));
  free(txt);
  command(2, "reset");
  command(3, "stats");
  txt = tb_out_reply(&out, 2);
  ck_assert_ptr_nonnull(strstr(txt, "dropped => 0,"));
  ck_assert_ptr_nonnull(strstr(txt, "dropped_pids => 0,"));
  ck_assert_ptr_nonnull(strstr(txt, "dropped_mfas => 0,"));
  free(txt);
}
END_TEST

START_TEST(badly_shaped_commands) {
  ei_x_buff x;

  tb_begin(&x);   /* {kprof, 7}: Ref readable */
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, 7);
  tb_feed(&sink, &x);
  expect_reply(0, "{error, bad_command}");
  tb_begin(&x);   /* {kprof}: nothing to answer */
  ei_x_encode_tuple_header(&x, 1);
  tb_atom(&x, "kprof");
  tb_feed(&sink, &x);
  ck_assert_int_eq(out.frames, 1);
  ck_assert_uint_eq(sink.st.decode_errors, 1);
  tb_begin(&x);   /* a command that is a tuple: unknown, echoed */
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, 8);
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "set");
  ei_x_encode_long(&x, 1);
  tb_feed(&sink, &x);
  expect_reply(1, "{error, {unknown_command, {set, 1}}}");
}
END_TEST

START_TEST(truncated_input_at_eof) {
  const unsigned char part[] = {0, 0, 0, 50, 131, 104};

  ks_sink_feed(&sink, part, sizeof(part));
  ks_sink_eof(&sink);
  ck_assert_uint_eq(sink.st.truncated, 1);
}
END_TEST

static void command_int(long ref, const char *cmd, long long v) {
  ei_x_buff x;

  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, ref);
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, cmd);
  ei_x_encode_longlong(&x, v);
  tb_feed(&sink, &x);
}

static void call_at(long long ts) {
  ei_x_buff x;

  call_x(&x, 85, "f", 0, ts);
  tb_feed(&sink, &x);
}

/* {ring_wait_max, Ms}: 1 to 16 taken, the rest refused and the bound kept;
 * stats says it, and no wait while no ring is open. */
START_TEST(ring_wait_max_bounds) {
  ck_assert_uint_eq(sink.ring_wait_max_ms, 16);
  command_int(1, "ring_wait_max", 0);
  command_int(2, "ring_wait_max", 17);
  command_int(3, "ring_wait_max", -1);
  ck_assert_uint_eq(sink.ring_wait_max_ms, 16);
  command_int(4, "ring_wait_max", 1);
  ck_assert_uint_eq(sink.ring_wait_max_ms, 1);
  command_int(5, "ring_wait_max", 16);
  ck_assert_uint_eq(sink.ring_wait_max_ms, 16);
  command_int(6, "ring_wait_max", 3);
  expect_reply(0, "{error, badarg}");
  expect_reply(1, "{error, badarg}");
  expect_reply(2, "{error, badarg}");
  expect_reply(3, "ok");
  expect_reply(4, "ok");
  expect_reply(5, "ok");
  command(7, "stats");
  expect_reply_has(6, "ring_wait_max_ms => 3", "ring_wait_ms => 0");
}
END_TEST

/* Messages older than the bound: one overload alert, then quiet for a second. */
START_TEST(overload_alert_on_lag) {
  long long vm_now = -576460751000000000LL;
  char *txt;

  command_int(1, "clock", vm_now);        /* VM time == now */
  command_int(2, "overload", 100);        /* 100 ms */
  ck_assert_int_eq(out.frames, 2);
  call_at(vm_now);                        /* fresh: no alert */
  ck_assert_int_eq(out.frames, 2);
  call_at(vm_now - 2000000000LL);         /* 2 s old */
  ck_assert_int_eq(out.frames, 3);
  txt = tb_out_reply(&out, 2);
  ck_assert_ptr_nonnull(strstr(txt, "max_lag_us => 100000"));
  ck_assert_ptr_nonnull(strstr(txt, "lag_us => 2"));
  /* kprof's one alert shape: what was measured, the figure (ms), the bound. */
  ck_assert_ptr_nonnull(strstr(txt, "what => lag_ms"));
  ck_assert_ptr_nonnull(strstr(txt, "value => 2"));
  ck_assert_ptr_nonnull(strstr(txt, "bound => 100,"));
  free(txt);
  call_at(vm_now - 3000000000LL);         /* still behind, but alerts are rate-limited */
  ck_assert_int_eq(out.frames, 3);
  ck_assert_uint_eq(sink.ov.alerts, 1);
  ck_assert_int_ge(sink.ov.worst_lag_ns, 3000000000LL);
  command_int(3, "overload", 0);          /* bound off */
  expect_reply(3, "ok");
}
END_TEST

/* {overload, 0}, sent as the last traced mode ends: ring drops the gap held
 * back are not sent later (they would abort the next mode), and the next
 * bound's first alert is not held back by the last one's gap. */
START_TEST(overload_off_forgets_owed_alerts) {
  long long vm_now = -576460751000000000LL;
  char *txt;

  command_int(1, "clock", vm_now);
  command_int(2, "overload", 100);
  call_at(vm_now - 2000000000LL);         /* the lag's alert */
  ck_assert_int_eq(out.frames, 3);
  sink.ring.drops_pending = 1;            /* drops within the second: held back */
  ks_control_alerts(&sink);
  ck_assert_int_eq(out.frames, 3);
  command_int(3, "overload", 0);
  expect_reply(3, "ok");
  sink.ov.now_ns = ks_overload_clock() + 2000000000LL;   /* past the gap */
  ks_control_alerts(&sink);
  ck_assert_int_eq(out.frames, 4);        /* nothing owed any more */
  ck_assert_int_eq(sink.ring.drops_pending, 0);
  command_int(4, "overload", 100);        /* the next mode */
  call_at(vm_now - 3000000000LL);
  ck_assert_int_eq(out.frames, 6);        /* its alert, at once */
  txt = tb_out_reply(&out, 5);
  ck_assert_ptr_nonnull(strstr(txt, "what => lag_ms"));
  free(txt);
  ck_assert_uint_eq(sink.ov.alerts, 2);
}
END_TEST

/* A FLOAT_EXT whose text is not a number: ei and binary_to_term refuse it, so the
 * sink must not copy it into a reply (found by fuzz_sink). */
START_TEST(unechoable_terms_are_not_echoed) {
  static const unsigned char bad_float[32] = {99, 'x'};
  ei_x_buff x;

  tb_begin(&x);   /* {kprof, BadFloat, ping}: no reply at all */
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_append_buf(&x, (const char *)bad_float, 32);
  tb_atom(&x, "ping");
  tb_feed(&sink, &x);
  ck_assert_int_eq(out.frames, 0);
  ck_assert_uint_eq(sink.st.decode_errors, 1);
  tb_begin(&x);   /* {kprof, 5, {foo, BadFloat}}: a bad command, not echoed */
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, 5);
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "foo");
  ei_x_append_buf(&x, (const char *)bad_float, 32);
  tb_feed(&sink, &x);
  expect_reply(0, "{error, bad_command}");
}
END_TEST


static void command_limits(long ref, long long max, long long rate_max, long long per_ms) {
  ei_x_buff x;

  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, ref);
  ei_x_encode_tuple_header(&x, 4);
  tb_atom(&x, "limits");
  ei_x_encode_longlong(&x, max);
  ei_x_encode_longlong(&x, rate_max);
  ei_x_encode_longlong(&x, per_ms);
  tb_feed(&sink, &x);
}

/* Tiers on web:entry (an entry of tier 0): every labelled call of it the sink
 * passes on is one more of tiers.events. */
static void start_entry_tiers(void) {
  ks_tier_opts o;
  ks_tier_spec *specs = calloc(1, sizeof(*specs));

  specs[0].m = strdup("web");
  specs[0].f = strdup("entry");
  specs[0].arity = -1;
  specs[0].role = 0;
  specs[0].entry = 1;
  ks_tiers_default_opts(&o);
  ck_assert_int_eq(ks_tiers_start(&sink.tiers, &sink.in, specs, 1, 1, &o), KS_OK);
}

/* One labelled web:entry call at VM time ts (ns), as the ring reader hands it
 * to the sink; then the alerts owed, as after a read. */
static void entry_call(int64_t ts) {
  static const unsigned char label[] = {97, 1};
  ks_decoded d;

  tb_tier_event(&d, KS_EV_CALL, tb_intern_pid(&sink.in, 1), ts,
                tb_intern_mfa(&sink.in, "web", "entry", 0), KS_NONE, label, NULL, 0);
  sink.ov.now_ns = ks_overload_clock();
  ks_sink_trace(&sink, &d);
  ks_control_alerts(&sink);
}

static void entry_calls(int n) {
  int k;

  for (k = 0; k < n; k++)
    entry_call(1000000000LL + k);
}

/* max_events 10: counted from the command; the 11th event sends one alert and
 * neither it nor any later one reaches the tiers; they count as `limited`. */
START_TEST(limits_max_events) {
  char *txt;

  start_entry_tiers();
  entry_calls(3);                          /* before the command: not counted */
  command_limits(1, 10, 0, 0);
  expect_reply(0, "{ok, 3}");
  entry_calls(10);
  ck_assert_int_eq(out.frames, 1);         /* at the bound: no alert */
  ck_assert_uint_eq(sink.tiers.events, 13);
  entry_calls(1);
  ck_assert_int_eq(out.frames, 2);
  txt = tb_out_reply(&out, 1);
  ck_assert_ptr_nonnull(strstr(txt, "what => max_events"));
  ck_assert_ptr_nonnull(strstr(txt, "value => 11,"));
  ck_assert_ptr_nonnull(strstr(txt, "bound => 10,"));
  ck_assert_ptr_nonnull(strstr(txt, "events => 14"));
  free(txt);
  entry_calls(9);                          /* the VM goes on until tracing is off */
  ck_assert_int_eq(out.frames, 2);         /* one alert per trip */
  ck_assert_uint_eq(sink.tiers.events, 13);
  ck_assert_uint_eq(sink.lim.limited, 10);
  ck_assert_uint_eq(sink.st.trace_events, 23);
  command(2, "stats");
  expect_reply_has(2, "limited => 10,", "trace_events => 23,");
}
END_TEST

/* rate {5, 100 ms} by the events' timestamps, in fixed windows. */
START_TEST(limits_rate) {
  const int64_t t0 = -576460751000000000LL, ms = 1000000;
  char *txt;
  int k;

  start_entry_tiers();
  command_limits(1, 0, 5, 100);
  expect_reply(0, "{ok, 0}");
  for (k = 0; k < 5; k++)
    entry_call(t0 + k * ms);               /* 5 in the first window */
  for (k = 0; k < 5; k++)
    entry_call(t0 + (100 + k) * ms);       /* a new window: 5 again */
  ck_assert_int_eq(out.frames, 1);
  ck_assert_uint_eq(sink.tiers.events, 10);
  entry_call(t0 + 199 * ms);               /* the 6th in 100 ms */
  ck_assert_int_eq(out.frames, 2);
  txt = tb_out_reply(&out, 1);
  ck_assert_ptr_nonnull(strstr(txt, "what => rate"));
  ck_assert_ptr_nonnull(strstr(txt, "value => 6,"));
  ck_assert_ptr_nonnull(strstr(txt, "bound => 5,"));
  ck_assert_ptr_nonnull(strstr(txt, "per_ms => 100"));
  free(txt);
  entry_call(t0 + 10000 * ms);             /* even in a quiet window: limited */
  ck_assert_uint_eq(sink.tiers.events, 10);
  ck_assert_uint_eq(sink.lim.limited, 2);
  ck_assert_int_eq(out.frames, 2);
}
END_TEST

/* {limits, 0, 0, 0} clears a trip and the bounds; a new command re-arms from itself. */
START_TEST(limits_cleared_and_rearmed) {
  start_entry_tiers();
  command_limits(1, 2, 0, 0);
  entry_calls(3);
  ck_assert_int_eq(out.frames, 2);
  ck_assert_uint_eq(sink.tiers.events, 2);
  command_limits(2, 0, 0, 0);
  expect_reply(2, "{ok, 3}");
  entry_calls(100);                        /* no bound */
  ck_assert_uint_eq(sink.tiers.events, 102);
  ck_assert_uint_eq(sink.lim.limited, 1);  /* a counter: only reset zeroes it */
  ck_assert_int_eq(out.frames, 3);
  command_limits(3, 4, 0, 0);              /* counted from here, not from the first */
  expect_reply(3, "{ok, 103}");
  entry_calls(4);
  ck_assert_int_eq(out.frames, 4);
  entry_calls(1);
  ck_assert_int_eq(out.frames, 5);
  ck_assert_uint_eq(sink.tiers.events, 106);
  /* Bad shapes change nothing. */
  command_limits(4, 1, 5, 0);
  expect_reply(5, "{error, badarg}");
  command_limits(5, -1, 0, 0);
  expect_reply(6, "{error, badarg}");
  entry_calls(1);
  ck_assert_uint_eq(sink.tiers.events, 106);
  ck_assert_uint_eq(sink.lim.limited, 3);
}
END_TEST

/* reset forgets the trip and zeroes `limited`; the bounds stay, counted from the reset. */
START_TEST(limits_reset) {
  char *txt;

  start_entry_tiers();
  command_limits(1, 10, 0, 0);
  entry_calls(12);
  ck_assert_int_eq(out.frames, 2);
  ck_assert_uint_eq(sink.lim.limited, 2);
  command(2, "reset");
  expect_reply(2, "ok");
  ck_assert_uint_eq(sink.lim.limited, 0);
  entry_calls(10);
  ck_assert_uint_eq(sink.tiers.events, 20);
  ck_assert_int_eq(out.frames, 3);
  entry_calls(1);                          /* the 11th since the reset */
  ck_assert_int_eq(out.frames, 4);
  txt = tb_out_reply(&out, 3);
  ck_assert_ptr_nonnull(strstr(txt, "value => 11,"));
  ck_assert_ptr_nonnull(strstr(txt, "events => 11"));
  free(txt);
  ck_assert_uint_eq(sink.tiers.events, 20);
  ck_assert_uint_eq(sink.lim.limited, 1);
}
END_TEST

/* A trace frame through the port: same count as the ring's events; the alert
 * goes out after the read that tripped it, and names the sink's count at the
 * trip, not at the end of the read. */
START_TEST(limits_on_port_frames) {
  ei_x_buff x;
  unsigned char *both;
  size_t n1, n2;
  unsigned char *f1, *f2;
  char *txt;

  command_limits(1, 2, 0, 0);
  call_event("f", 0);
  call_event("f", 0);
  ck_assert_int_eq(out.frames, 1);
  call_event("f", 0);
  ck_assert_int_eq(out.frames, 2);
  txt = tb_out_reply(&out, 1);
  ck_assert_ptr_nonnull(strstr(txt, "value => 3,"));
  free(txt);
  ck_assert_uint_eq(sink.lim.limited, 1);
  ck_assert_uint_eq(sink.ov.alerts, 1);
  /* Two events in one read, the first of them trips. */
  command_limits(2, 1, 0, 0);
  expect_reply(2, "{ok, 3}");
  call_event("f", 0);
  call_x(&x, 85, "f", 0, -5);
  f1 = tb_framed(&x, &n1);
  f2 = tb_framed(&x, &n2);
  ei_x_free(&x);
  both = malloc(n1 + n2);
  memcpy(both, f1, n1);
  memcpy(both + n1, f2, n2);
  ck_assert_int_eq(ks_sink_feed(&sink, both, n1 + n2), KS_OK);
  free(both);
  free(f1);
  free(f2);
  ck_assert_int_eq(out.frames, 4);
  txt = tb_out_reply(&out, 3);
  ck_assert_ptr_nonnull(strstr(txt, "value => 2,"));
  ck_assert_ptr_nonnull(strstr(txt, "events => 5"));   /* not 6 */
  free(txt);
  ck_assert_uint_eq(sink.st.trace_events, 6);
}
END_TEST

/* {kprof, Ref, {flame_start, Id, []}}, {flame_drop, Id}: a capture's slot in the sink. */
static void command_flame(long ref, const char *cmd, long id) {
  ei_x_buff x;

  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, ref);
  ei_x_encode_tuple_header(&x, strcmp(cmd, "flame_start") == 0 ? 3 : 2);
  tb_atom(&x, cmd);
  ei_x_encode_long(&x, id);
  if (strcmp(cmd, "flame_start") == 0)
    ei_x_encode_empty_list(&x);
  tb_feed(&sink, &x);
}

/* {kprof, Ref, {tiers_start, [{web, entry, '_', 0}], []}} */
static void command_tiers_start(long ref) {
  ei_x_buff x;

  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, ref);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "tiers_start");
  ei_x_encode_list_header(&x, 1);
  ei_x_encode_tuple_header(&x, 4);
  tb_atom(&x, "web");
  tb_atom(&x, "entry");
  tb_atom(&x, "_");
  ei_x_encode_long(&x, 0);
  ei_x_encode_empty_list(&x);
  ei_x_encode_empty_list(&x);
  tb_feed(&sink, &x);
}

/* Tiers and flame captures refuse each other, in command order: a capture
 * holds its slot from flame_start to flame_drop (or flame_write), the tiers
 * theirs from tiers_start to tiers_stop (issue 11: a capture's end cleared
 * the patterns of tiers started while it ran). */
START_TEST(tiers_and_flame_refuse_each_other) {
  command_flame(1, "flame_start", 7);
  expect_reply(0, "ok");
  command_tiers_start(2);
  expect_reply(1, "{error, {busy, flame}}");
  ck_assert_int_eq(sink.tiers.active, 0);
  command_flame(3, "flame_start", 8);            /* captures among themselves: fine */
  expect_reply(2, "ok");
  command_flame(4, "flame_drop", 7);
  command_tiers_start(5);                        /* one capture left */
  expect_reply(4, "{error, {busy, flame}}");
  command_flame(6, "flame_drop", 8);
  command_tiers_start(7);
  expect_reply(6, "ok");
  ck_assert_int_eq(sink.tiers.active, 1);
  command_flame(8, "flame_start", 9);
  expect_reply(7, "{error, {busy, tiers}}");
  ck_assert_int_eq(sink.flame.active, 0);
  command(9, "tiers_reset");                      /* still running */
  command_flame(10, "flame_start", 9);
  expect_reply(9, "{error, {busy, tiers}}");
  command(11, "tiers_stop");
  command_flame(12, "flame_start", 9);
  expect_reply(11, "ok");
  ck_assert_int_eq(sink.flame.active, 1);
}
END_TEST

/* The value of `Key => N' in a printed reply map; -1 when it is not a number. */
static long long map_int(const char *txt, const char *key) {
  char pat[64];
  const char *at;
  long long v;

  snprintf(pat, sizeof(pat), "%s => ", key);
  at = strstr(txt, pat);
  ck_assert_msg(at != NULL, "no %s in %s", key, txt);
  return sscanf(at + strlen(pat), "%lld", &v) == 1 ? v : -1;
}

/* memory: the resident bytes from the OS (Linux here), and a capture's
 * call-path tree counted while the capture is held, gone with it. */
START_TEST(memory_counts_captures) {
  char *txt;

  command(1, "memory");
  txt = tb_out_reply(&out, 0);
  ck_assert_int_eq(map_int(txt, "flame_trees"), 0);
  ck_assert_int_eq(map_int(txt, "flame_captures"), 0);
  ck_assert_int_eq(map_int(txt, "ring"), 0);
  ck_assert_int_gt(map_int(txt, "rss"), 0);
  ck_assert_int_ge(map_int(txt, "peak_rss"), map_int(txt, "rss"));
  free(txt);
  command_flame(2, "flame_start", 7);
  command(3, "memory");
  txt = tb_out_reply(&out, 2);
  ck_assert_int_eq(map_int(txt, "flame_captures"), 1);
  ck_assert_int_gt(map_int(txt, "flame_trees"), 0);
  ck_assert_int_eq(map_int(txt, "flame_trees"), (long long)sink.flame.cap[0].cp.tree.bytes);
  free(txt);
  command_flame(4, "flame_drop", 7);
  command(5, "memory");
  txt = tb_out_reply(&out, 4);
  ck_assert_int_eq(map_int(txt, "flame_trees"), 0);
  free(txt);
}
END_TEST

Suite *control_suite(void) {
  Suite *s = suite_create("control");
  TCase *tc = tcase_create("control");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, ping_version_unknown);
  tcase_add_test(tc, known_names_with_other_arities_are_unknown);
  tcase_add_test(tc, maps_count_their_keys);
  tcase_add_test(tc, reply_carries_ref);
  tcase_add_test(tc, sync_is_a_barrier_and_calls_count);
  tcase_add_test(tc, stats_and_reset);
  tcase_add_test(tc, ring_wait_max_bounds);
  tcase_add_test(tc, stats_split_drops_by_table);
  tcase_add_test(tc, badly_shaped_commands);
  tcase_add_test(tc, truncated_input_at_eof);
  tcase_add_test(tc, overload_alert_on_lag);
  tcase_add_test(tc, overload_off_forgets_owed_alerts);
  tcase_add_test(tc, unechoable_terms_are_not_echoed);
  tcase_add_test(tc, limits_max_events);
  tcase_add_test(tc, limits_rate);
  tcase_add_test(tc, limits_cleared_and_rearmed);
  tcase_add_test(tc, limits_reset);
  tcase_add_test(tc, limits_on_port_frames);
  tcase_add_test(tc, tiers_and_flame_refuse_each_other);
  tcase_add_test(tc, memory_counts_captures);
  suite_add_tcase(s, tc);
  return s;
}

