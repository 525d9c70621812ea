/* test_overload.c: the lag of trace messages against the VM's clock, and clock syncs
 * that arrive late (they wait behind the same backlog as the messages); the
 * max_events and rate limits' counting. */
#include "test_util.h"

#define SEC 1000000000LL

static ks_overload ov;

/* A timestamped event `age` ns old by the VM clock that runs `offset` from the sink's. */
static void event_aged(int64_t offset, int64_t age) {
  ks_event ev;

  memset(&ev, 0, sizeof(ev));
  ev.kind = KS_EV_CALL;
  ev.flags = KS_EVF_TS;
  ov.now_ns = ks_overload_clock();
  ev.ts = ov.now_ns + offset - age;
  ks_overload_event(&ov, &ev);
}

static void setup(void) {
  ks_overload_init(&ov);
}

/* The VM runs 1000 s ahead of the sink's clock in these tests. */
static const int64_t vm_offset = 1000 * SEC;

START_TEST(lag_is_measured_against_the_synced_clock) {
  event_aged(vm_offset, 2 * SEC);
  ck_assert_int_eq(ov.lag_ns, 0);             /* no sync yet: nothing measured */
  ks_overload_sync(&ov, ks_overload_clock() + vm_offset);
  event_aged(vm_offset, 2 * SEC);
  ck_assert_int_ge(ov.lag_ns, 2 * SEC - SEC / 100);
  ck_assert_int_le(ov.lag_ns, 2 * SEC + SEC / 100);
  ck_assert_int_eq(ov.pending, 0);            /* no bound set: measured, no alert */
  ov.max_lag_ns = SEC;                        /* as {overload, 1000} sets it */
  event_aged(vm_offset, 2 * SEC);
  ck_assert_int_eq(ov.pending, 1);
}
END_TEST

/* The bug this guards against: each sync waited behind the backlog, lowered the
 * offset by its own wait, and the backlog's lag never showed. */
START_TEST(a_late_sync_does_not_hide_the_backlog) {
  int k;

  ks_overload_sync(&ov, ks_overload_clock() + vm_offset);   /* on time, queue empty */
  for (k = 1; k <= 10; k++) {
    /* a backlog of k * 2 s: the sync read now was sent k * 2 s ago */
    ks_overload_sync(&ov, ks_overload_clock() + vm_offset - k * 2 * SEC);
    event_aged(vm_offset, k * 2 * SEC);
    ck_assert_msg(ov.lag_ns >= k * 2 * SEC - SEC / 100, "backlog %d s measured as %lld ms",
                  k * 2, (long long)(ov.lag_ns / 1000000));
  }
  ck_assert_int_ge(ov.worst_lag_ns, 20 * SEC - SEC / 100);
}
END_TEST

/* A VM clock that runs faster than the sink's (a larger offset) is taken at once. */
START_TEST(a_larger_offset_is_taken_at_once) {
  ks_overload_sync(&ov, ks_overload_clock() + vm_offset);
  ks_overload_sync(&ov, ks_overload_clock() + vm_offset + SEC);
  event_aged(vm_offset + SEC, 0);
  ck_assert_int_le(ov.lag_ns, SEC / 100);
  ck_assert_int_ge(ov.lag_ns, -SEC / 100);
}
END_TEST

/* A VM clock that runs slower (time correction, up to ~1 %): the kept estimate is
 * let down by 1/64 of the time since the last sync, so it follows and never reads
 * the difference as lag. */
START_TEST(a_slower_vm_clock_is_followed) {
  ks_overload_sync(&ov, ks_overload_clock() + vm_offset);
  /* 64 s later by the sink's clock, the VM's clock has lost 0.64 s (1 %) */
  ov.synced_ns -= 64 * SEC;
  ks_overload_sync(&ov, ks_overload_clock() + vm_offset - 64 * SEC / 100);
  event_aged(vm_offset - 64 * SEC / 100, 0);
  ck_assert_msg(ov.lag_ns <= SEC / 100, "a 1 %% slower VM clock read as %lld ms of lag",
                (long long)(ov.lag_ns / 1000000));
  /* and what was let down is at most 1/64 of the time: a 0.5 s lag a second
   * after a sync still shows as about 0.5 s */
  ks_overload_sync(&ov, ks_overload_clock() + vm_offset - 64 * SEC / 100);
  ov.synced_ns -= SEC;
  ks_overload_sync(&ov, ks_overload_clock() + vm_offset - 64 * SEC / 100 - SEC / 2);
  event_aged(vm_offset - 64 * SEC / 100, SEC / 2);
  ck_assert_int_ge(ov.lag_ns, SEC / 2 - SEC / 64 - SEC / 100);
}
END_TEST


/* An event of the kind the limits see; flags 0: no timestamp. */
static int limit_event(ks_limits *l, int flags, int64_t ts) {
  ks_event ev;

  memset(&ev, 0, sizeof(ev));
  ev.kind = KS_EV_CALL;
  ev.flags = (uint8_t)flags;
  ev.ts = ts;
  return ks_limits_event(l, &ov, &ev, 0);
}

/* max_events alone: exactly the bound passes; the trip is kept until set again. */
START_TEST(limits_count_exactly) {
  ks_limits l;
  int k;

  ks_limits_init(&l);
  for (k = 0; k < 100; k++)
    ck_assert_int_eq(limit_event(&l, 0, 0), 0);   /* no limits: nothing counted */
  ck_assert_uint_eq(l.counted, 0);
  ks_limits_set(&l, 10, 0, 0);
  for (k = 0; k < 10; k++)
    ck_assert_int_eq(limit_event(&l, KS_EVF_TS, k), 0);
  ck_assert_int_eq(l.pending, 0);
  ck_assert_int_eq(limit_event(&l, KS_EVF_TS, 10), 1);
  ck_assert_int_eq(l.tripped, KS_LIMIT_MAX_EVENTS);
  ck_assert_int_eq(l.pending, 1);
  ck_assert_uint_eq(l.value, 11);
  l.pending = 0;                                   /* the alert went out */
  for (k = 0; k < 5; k++)
    ck_assert_int_eq(limit_event(&l, KS_EVF_TS, 11 + k), 1);
  ck_assert_int_eq(l.pending, 0);                  /* one alert per trip */
  ck_assert_uint_eq(l.limited, 6);
  ks_limits_set(&l, 0, 0, 0);                      /* cleared */
  ck_assert_int_eq(limit_event(&l, 0, 0), 0);
  ck_assert_int_eq(l.tripped, 0);
  ck_assert_uint_eq(l.limited, 6);
  ks_limits_set(&l, 1, 0, 0);
  ks_limits_rearm(&l);                             /* reset: the bound stays */
  ck_assert_uint_eq(l.limited, 0);
  ck_assert_int_eq(limit_event(&l, 0, 0), 0);
  ck_assert_int_eq(limit_event(&l, 0, 0), 1);
}
END_TEST

/* The rate by the sink's clock when an event has no VM monotonic timestamp
 * (none, or a wall-clock one): on the VM's time scale once synced. */
START_TEST(limits_rate_on_the_sink_clock) {
  ks_limits l;
  int k;

  ks_limits_init(&l);
  ks_limits_set(&l, 0, 3, 50);
  ov.now_ns = 5 * SEC;
  for (k = 0; k < 3; k++)
    ck_assert_int_eq(limit_event(&l, 0, 0), 0);
  ov.now_ns += 50 * 1000000;                        /* the window is over */
  for (k = 0; k < 3; k++)
    ck_assert_int_eq(limit_event(&l, KS_EVF_TS | KS_EVF_WALL, 1), 0);
  ck_assert_int_eq(limit_event(&l, 0, 0), 1);      /* the 4th in 50 ms */
  ck_assert_int_eq(l.tripped, KS_LIMIT_RATE);
  ck_assert_uint_eq(l.value, 4);
  /* Synced: the sink's clock moved onto the VM's, comparable with timestamps. */
  ks_overload_sync(&ov, ks_overload_clock() + vm_offset);
  ks_limits_set(&l, 0, 2, 1000);
  ov.now_ns = ks_overload_clock();
  ck_assert_int_eq(limit_event(&l, KS_EVF_TS, ov.now_ns + vm_offset), 0);
  ck_assert_int_eq(limit_event(&l, 0, 0), 0);
  ck_assert_int_eq(limit_event(&l, 0, 0), 1);      /* same window: the 3rd */
}
END_TEST

Suite *overload_suite(void) {
  Suite *s = suite_create("overload");
  TCase *tc = tcase_create("overload");

  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, lag_is_measured_against_the_synced_clock);
  tcase_add_test(tc, a_late_sync_does_not_hide_the_backlog);
  tcase_add_test(tc, a_larger_offset_is_taken_at_once);
  tcase_add_test(tc, a_slower_vm_clock_is_followed);
  tcase_add_test(tc, limits_count_exactly);
  tcase_add_test(tc, limits_rate_on_the_sink_clock);
  suite_add_tcase(s, tc);
  return s;
}
