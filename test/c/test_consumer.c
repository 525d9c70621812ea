/* test_consumer.c: the core's loop over its consumers (port/core/ks_consumer.h):
 * events only to the active ones, in order; pins and releases to every one;
 * a sink registers the tiers and the flame captures. */
#include "sink/ks_sink.h"
#include "test_util.h"

typedef struct fake {
  int active, events, pinned_for, forgot, resets, freed;
} fake;

static void f_event(void *self, const ks_intern *in, const ks_decoded *d) {
  ((fake *)self)->events++;
}
static void f_pin(const void *self, uint8_t *pin, uint32_t n) {
  pin[((const fake *)self)->pinned_for] = 1;
}
static void f_forget(void *self, const uint8_t *dead, uint32_t n) {
  ((fake *)self)->forgot += dead[2];
}
static void f_reset(void *self) {
  ((fake *)self)->resets++;
}
static void f_free(void *self) {
  ((fake *)self)->freed++;
}

static ks_consumer fake_consumer(fake *f) {
  return (ks_consumer){.name = "fake", .self = f, .active = &f->active, .event = f_event,
                       .pin_pids = f_pin, .forget_pids = f_forget, .reset = f_reset,
                       .free = f_free};
}

START_TEST(events_to_active_consumers_only) {
  ks_consumers cs = {0};
  fake a = {.active = 1, .pinned_for = 0}, b = {.active = 0, .pinned_for = 3};
  ks_consumer ca = fake_consumer(&a), cb = fake_consumer(&b);
  ks_decoded d;
  uint8_t pin[4] = {0}, dead[4] = {0, 0, 1, 0};
  int k;

  memset(&d, 0, sizeof(d));
  ck_assert_int_eq(ks_consumers_add(&cs, &ca), KS_OK);
  ck_assert_int_eq(ks_consumers_add(&cs, &cb), KS_OK);
  ks_consumers_event(&cs, NULL, &d);
  b.active = 1;
  ks_consumers_event(&cs, NULL, &d);
  ck_assert_int_eq(a.events, 2);
  ck_assert_int_eq(b.events, 1);
  /* Pins and releases go to every consumer, active or not. */
  b.active = 0;
  ks_consumers_pin_pids(&cs, pin, 4);
  ck_assert(pin[0] == 1 && pin[1] == 0 && pin[2] == 0 && pin[3] == 1);
  ks_consumers_forget_pids(&cs, dead, 4);
  ck_assert_int_eq(a.forgot + b.forgot, 2);
  ks_consumers_reset(&cs);
  ck_assert_int_eq(a.resets + b.resets, 2);
  for (k = 2; k < KS_CONSUMERS_MAX; k++)
    ck_assert_int_eq(ks_consumers_add(&cs, &ca), KS_OK);
  ck_assert_int_eq(ks_consumers_add(&cs, &ca), KS_EFULL);
  ks_consumers_free(&cs);
  ck_assert_int_eq(a.freed, KS_CONSUMERS_MAX - 1);
  ck_assert_int_eq(b.freed, 1);
  ck_assert_uint_eq(cs.n, 0);
}
END_TEST

/* A sink has the tiers and the flame captures, in that order, and nothing more. */
START_TEST(sink_registers_tiers_and_flame) {
  ks_sink s;

  ck_assert_int_eq(ks_sink_init(&s, NULL, NULL, NULL), KS_OK);
  ck_assert_uint_eq(s.cons.n, 2);
  ck_assert_str_eq(s.cons.c[0].name, "tiers");
  ck_assert_ptr_eq(s.cons.c[0].self, &s.tiers);
  ck_assert_str_eq(s.cons.c[1].name, "flame");
  ck_assert_ptr_eq(s.cons.c[1].self, &s.flame);
  ks_sink_free(&s);
}
END_TEST

Suite *consumer_suite(void) {
  Suite *s = suite_create("consumer");
  TCase *tc = tcase_create("loop");

  tcase_add_test(tc, events_to_active_consumers_only);
  tcase_add_test(tc, sink_registers_tiers_and_flame);
  suite_add_tcase(s, tc);
  return s;
}
