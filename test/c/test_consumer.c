/* test_consumer.c: the core's loop over its consumers (port/core/ks_consumer.h):
 * events only to the active ones (their switches' bits), in order; pins and
 * releases to every one; a sink registers the tiers and the flame captures,
 * whose switches follow their starts and stops. */
#include "sink/ks_sink.h"
#include "test_util.h"

typedef struct fake {
  int active, events, pinned_for, forgot, resets, freed;
  ks_switch sw;
} fake;

static void fake_set(fake *f, int active) {
  f->active = active;
  ks_switch_set(&f->sw, active);
}

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
  return (ks_consumer){.name = "fake", .self = f, .active = &f->active, .sw = &f->sw, .event = f_event,
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
  ck_assert_uint_eq(cs.on, 1);   /* a was on when added */
  ks_consumers_event(&cs, NULL, &d);
  fake_set(&b, 1);
  ks_consumers_event(&cs, NULL, &d);
  ck_assert_int_eq(a.events, 2);
  ck_assert_int_eq(b.events, 1);
  fake_set(&a, 0);
  fake_set(&b, 0);
  ck_assert_uint_eq(cs.on, 0);
  ks_consumers_event(&cs, NULL, &d);
  ck_assert_int_eq(a.events + b.events, 3);
  fake_set(&a, 1);
  /* Pins and releases go to every consumer, active or not. */
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
  ck_assert_ptr_null(a.sw.mask);   /* untied: setting it writes nowhere */
  fake_set(&a, 1);
}
END_TEST

/* Consumer k's bit of the mask is what the feature itself says (*active). */
static void check_switches(const ks_sink *s) {
  uint32_t k;

  for (k = 0; k < s->cons.n; k++)
    ck_assert_int_eq((s->cons.on >> k) & 1, *s->cons.c[k].active != 0);
}

static void start_tiers(ks_sink *s) {
  ks_tier_opts o;
  ks_tier_spec *specs = calloc(1, sizeof(*specs));

  specs[0].m = strdup("web");
  specs[0].f = strdup("entry");
  specs[0].arity = -1;
  specs[0].entry = 1;
  ks_tiers_default_opts(&o);
  ck_assert_int_eq(ks_tiers_start(&s->tiers, &s->in, specs, 1, 1, &o), KS_OK);
}

/* The tiers and the flame captures keep their switches as they start, stop,
 * reset and drop, so the per-event test of the mask never misses one. */
START_TEST(sink_switches_follow_the_features) {
  ks_sink s;
  ks_fopts o;
  int c1, c2;

  ck_assert_int_eq(ks_sink_init(&s, NULL, NULL, NULL), KS_OK);
  ck_assert_uint_eq(s.cons.on, 0);
  start_tiers(&s);
  check_switches(&s);
  ck_assert_uint_eq(s.cons.on, 1);
  ks_tiers_reset(&s.tiers);
  check_switches(&s);
  ck_assert_uint_eq(s.cons.on, 1);
  ks_tiers_stop(&s.tiers);
  check_switches(&s);
  ks_tiers_reset(&s.tiers);   /* a stopped tiers stays off */
  check_switches(&s);
  ck_assert_uint_eq(s.cons.on, 0);
  start_tiers(&s);
  ks_tiers_free(&s.tiers);
  check_switches(&s);
  ck_assert_uint_eq(s.cons.on, 0);
  start_tiers(&s);   /* still registered after a free */
  ck_assert_uint_eq(s.cons.on, 1);
  ks_tiers_stop(&s.tiers);
  ks_fopts_default(&o);
  c1 = ks_flame_start(&s.flame, 1, &o);
  c2 = ks_flame_start(&s.flame, 2, &o);
  ck_assert(c1 >= 0 && c2 >= 0);
  check_switches(&s);
  ck_assert_uint_eq(s.cons.on, 2);
  ks_flame_drop(&s.flame, &s.flame.cap[c1]);
  check_switches(&s);
  ck_assert_uint_eq(s.cons.on, 2);
  ks_flame_drop(&s.flame, &s.flame.cap[c2]);
  check_switches(&s);
  ck_assert_uint_eq(s.cons.on, 0);
  ks_sink_free(&s);
  ck_assert_ptr_null(s.tiers.sw.mask);
  ck_assert_ptr_null(s.flame.sw.mask);
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
  tcase_add_test(tc, sink_switches_follow_the_features);
  suite_add_tcase(s, tc);
  return s;
}
