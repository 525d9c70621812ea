/* test_vm_clock.c: the tracer NIF's clock (nif/ks_vm_clock.h): one line from ticks to the
 * VM's time for every thread, never going back, leaning to the VM's clock. The ticks here
 * are a counter the tests move (2 per ns, as a 2 GHz time stamp counter) and the VM's
 * clock a function of them, so every reading is exact; test_ring's writers on threads
 * use the real ticks. */
#include <pthread.h>
#include <stdlib.h>

#include "test_util.h"

static uint64_t fake_ticks;
#define KS_VM_TICKS(c) ((void)(c), fake_ticks)
#include "../../nif/ks_vm_clock.h"

#define TICKS_PER_MS 2000000ULL
#define EPOCH_TICKS (KS_EPOCH_NS / 1000000 * TICKS_PER_MS)

/* The VM's clock: 1 ns per 2 ticks up to `bend`, then `ppm` parts per million faster
 * (negative: slower), continuous. */
static uint64_t bend = UINT64_MAX;
static int64_t ppm;

static int64_t fake_vm(void) {
  int64_t ns = (int64_t)(fake_ticks / 2);

  if (fake_ticks > bend) {
    int64_t after = (int64_t)((fake_ticks - bend) / 2);
    ns += after * ppm / 1000000;
  }
  return 1000000000 + ns;   /* any origin */
}

static void fresh(ks_vm_clock *c, uint64_t bend_ticks, int64_t bend_ppm) {
  fake_ticks = 0;
  bend = bend_ticks;
  ppm = bend_ppm;
  ks_vm_clock_init(c, fake_vm, 0);
}

static int64_t abs64(int64_t v) {
  return v < 0 ? -v : v;
}

/* Before a rate is known (the first KS_CALIBRATE_NS): the VM's own time. */
START_TEST(test_clock_calibrates_first) {
  ks_vm_clock c;
  ks_vm_epoch mine = {0, 0, 0, 0};

  fresh(&c, UINT64_MAX, 0);
  fake_ticks = TICKS_PER_MS / 2;
  ck_assert_int_eq(ks_vm_clock_now(&c, &mine), fake_vm());
  ck_assert_uint_eq(mine.span, 0);
  fake_ticks = TICKS_PER_MS + 2;
  ck_assert_int_eq(ks_vm_clock_now(&c, &mine), fake_vm());
  /* An epoch now: 10 ms of VM time, 2 ticks per ns. */
  ck_assert_uint_eq(mine.span, EPOCH_TICKS);
  ck_assert_uint_eq(mine.mult, 1ull << 31);
  fake_ticks += 4 * TICKS_PER_MS;
  ck_assert_int_eq(ks_vm_clock_now(&c, &mine), fake_vm());
  pthread_mutex_destroy(&c.lock);
}
END_TEST

/* The VM's clock runs 1 % fast from 30.3 ms on (more than erts' time correction
 * ever makes it), then the line follows: every reading at or after the one
 * before, off by at most what 1 % of an epoch is, back on the VM's clock
 * within three epochs (the rest of the epoch the change fell in, one to
 * measure the new rate, one to steer onto it). And 1 % slow, the same. */
static void follow(int64_t bend_ppm) {
  ks_vm_clock c;
  ks_vm_epoch mine = {0, 0, 0, 0};
  int64_t last = INT64_MIN, worst = 0, late = 0;
  uint64_t end = 120 * TICKS_PER_MS, at = 30 * TICKS_PER_MS + TICKS_PER_MS * 3 / 10;

  fresh(&c, at, bend_ppm);
  for (fake_ticks = 0; fake_ticks < end; fake_ticks += 777) {
    int64_t t = ks_vm_clock_now(&c, &mine), err = abs64(t - fake_vm());
    ck_assert_int_ge(t, last);
    last = t;
    if (err > worst)
      worst = err;
    if (fake_ticks > at + 3 * EPOCH_TICKS && err > late)
      late = err;
  }
  ck_assert_int_gt(worst, 0);
  ck_assert_int_le(worst, KS_EPOCH_NS / 100);
  ck_assert_int_le(late, KS_EPOCH_NS / 10000);
  pthread_mutex_destroy(&c.lock);
}

START_TEST(test_clock_follows_a_faster_vm) {
  follow(10000);
}
END_TEST

START_TEST(test_clock_follows_a_slower_vm) {
  follow(-10000);
}
END_TEST

/* Two threads' copies: one moves the clock to a new epoch; the other, whose
 * copy ended, reads ticks from before that epoch began: it gets no more than
 * the new epoch's start, and no less than it read before. */
START_TEST(test_clock_stale_copy) {
  ks_vm_clock c;
  ks_vm_epoch a = {0, 0, 0, 0}, b = {0, 0, 0, 0};
  int64_t ta, tb, stale, next;
  uint64_t before;

  fresh(&c, UINT64_MAX, 0);
  fake_ticks = 2 * TICKS_PER_MS;
  ta = ks_vm_clock_now(&c, &a);
  fake_ticks = a.at + a.span + 5;
  before = fake_ticks - 1;
  tb = ks_vm_clock_now(&c, &b);   /* b makes the next epoch, at `fake_ticks` */
  ck_assert_uint_eq(c.now.at, fake_ticks);
  fake_ticks = before;            /* a reads ticks taken before it began */
  stale = ks_vm_clock_now(&c, &a);
  ck_assert_int_ge(stale, ta);
  ck_assert_int_le(stale, tb);
  ck_assert_int_eq(stale, c.now.vm_at);
  fake_ticks = before + 100;
  next = ks_vm_clock_now(&c, &a);
  ck_assert_int_ge(next, stale);
  pthread_mutex_destroy(&c.lock);
}
END_TEST

Suite *vm_clock_suite(void) {
  Suite *s = suite_create("vm_clock");
  TCase *tc = tcase_create("vm_clock");

  tcase_add_test(tc, test_clock_calibrates_first);
  tcase_add_test(tc, test_clock_follows_a_faster_vm);
  tcase_add_test(tc, test_clock_follows_a_slower_vm);
  tcase_add_test(tc, test_clock_stale_copy);
  suite_add_tcase(s, tc);
  return s;
}
