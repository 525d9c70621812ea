/* test_budget.c: the call budget of kprof:calls's max (include/ks_budget.h), as the
 * kprof_tracer NIF's schedulers take from it: exact under a race, for its own
 * generation only. */
#include <pthread.h>

#include "test_util.h"
#include "ks_budget.h"

START_TEST(no_budget_takes_nothing) {
  static ks_budget b;
  int k;

  ks_budget_set(&b, 0, 0);
  for (k = 0; k < 1000; k++)
    ck_assert_int_eq(ks_budget_take(&b, 7), 1);
  ck_assert_uint_eq(ks_budget_left(&b), 0);
  ck_assert_uint_eq(atomic_load(&b.over), 0);
}
END_TEST

START_TEST(exactly_n_then_over) {
  static ks_budget b;
  int k, taken = 0;

  ks_budget_set(&b, 42, 3);
  ck_assert_uint_eq(ks_budget_left(&b), 3);
  for (k = 0; k < 10; k++)
    taken += ks_budget_take(&b, 42);
  ck_assert_int_eq(taken, 3);
  ck_assert_uint_eq(ks_budget_left(&b), 0);
  ck_assert_uint_eq(atomic_load(&b.over), 7);
  /* Another generation (a later session, the tiers) is not limited by it. */
  for (k = 0; k < 10; k++)
    ck_assert_int_eq(ks_budget_take(&b, 43), 1);
  ck_assert_uint_eq(atomic_load(&b.over), 7);
  /* A new budget starts its counts again; a zero budget takes nothing. */
  ks_budget_set(&b, 42, 0);
  ck_assert_int_eq(ks_budget_take(&b, 42), 0);
  ck_assert_uint_eq(atomic_load(&b.over), 1);
  ks_budget_set(&b, 0, 0);
  ck_assert_int_eq(ks_budget_take(&b, 42), 1);
}
END_TEST

#define THREADS 4
#define TAKES 200000
#define BUDGET 345678

static ks_budget race;

static void *taker(void *arg) {
  long *taken = arg;
  int k;

  for (k = 0; k < TAKES; k++)
    *taken += ks_budget_take(&race, 9);
  return NULL;
}

/* Schedulers racing for the last calls: exactly BUDGET written, the rest over. */
START_TEST(exact_under_a_race) {
  pthread_t t[THREADS];
  long taken[THREADS] = {0}, sum = 0;
  int k;

  ks_budget_set(&race, 9, BUDGET);
  for (k = 0; k < THREADS; k++)
    ck_assert_int_eq(pthread_create(&t[k], NULL, taker, &taken[k]), 0);
  for (k = 0; k < THREADS; k++) {
    pthread_join(t[k], NULL);
    sum += taken[k];
  }
  ck_assert_int_eq(sum, BUDGET);
  ck_assert_uint_eq(atomic_load(&race.over), (uint64_t)THREADS * TAKES - BUDGET);
  ck_assert_uint_eq(ks_budget_left(&race), 0);
}
END_TEST

Suite *budget_suite(void) {
  Suite *s = suite_create("budget");
  TCase *tc = tcase_create("calls");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, no_budget_takes_nothing);
  tcase_add_test(tc, exactly_n_then_over);
  tcase_add_test(tc, exact_under_a_race);
  suite_add_tcase(s, tc);
  return s;
}
