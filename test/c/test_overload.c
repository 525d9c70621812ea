/* test_overload.c: the lag of trace messages against the VM's clock, and clock syncs
 * that arrive late (they wait behind the same backlog as the messages). */
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
  ck_assert_int_eq(ov.pending, 1);            /* over the default 1 s bound */
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

Suite *overload_suite(void) {
  Suite *s = suite_create("overload");
  TCase *tc = tcase_create("overload");

  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, lag_is_measured_against_the_synced_clock);
  tcase_add_test(tc, a_late_sync_does_not_hide_the_backlog);
  tcase_add_test(tc, a_larger_offset_is_taken_at_once);
  tcase_add_test(tc, a_slower_vm_clock_is_followed);
  suite_add_tcase(s, tc);
  return s;
}
