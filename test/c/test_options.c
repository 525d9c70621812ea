/* test_options.c: every row of the option table (include/ks_options.h) the sink
 * checks is enforced by its start command at its bounds and just past them,
 * and the rows only kprof checks are refused by the sink. */
#include <stdlib.h>
#include <string.h>

#include "sink/ks_sink.h"
#include "test_util.h"

static ks_sink sink;
static tb_out out;

static void setup(void) {
  tb_sink_open(&sink, NULL, &out);
}

static void teardown(void) {
  tb_sink_close(&sink, &out);
}

/* {Key, V}: an integer, or a boolean when is_bool. */
static void encode_opt(ei_x_buff *x, const char *key, long long v, int is_bool) {
  ei_x_encode_list_header(x, 1);
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, key);
  if (is_bool)
    ei_x_encode_boolean(x, (int)v);
  else
    ei_x_encode_longlong(x, v);
  ei_x_encode_empty_list(x);
}

/* {tiers_start, [{web, entry, '_', 0}], [{Key, V}]}'s arguments: KS_OK or an error. */
static int tiers_start(const char *key, long long v, int is_bool) {
  ei_x_buff x;
  ks_cmd cmd;
  int idx = 0, rc, ver;

  ei_x_new_with_version(&x);
  ei_x_encode_list_header(&x, 1);
  ei_x_encode_tuple_header(&x, 4);
  tb_atom(&x, "web");
  tb_atom(&x, "entry");
  tb_atom(&x, "_");
  ei_x_encode_long(&x, 0);
  ei_x_encode_empty_list(&x);
  encode_opt(&x, key, v, is_bool);
  ei_decode_version(x.buff, &idx, &ver);
  cmd = (ks_cmd){{(const unsigned char *)x.buff, (size_t)x.index}, idx, 3, &sink.in};
  rc = ks_tiers_decode_start(&sink.tiers, &cmd);
  if (rc == KS_OK)
    ks_tiers_free(&sink.tiers);
  ei_x_free(&x);
  return rc;
}

/* {flame_start, 1, [{Key, V}]}: KS_OK when the sink answers ok (the capture is dropped). */
static int flame_start(const char *key, long long v, int is_bool) {
  ei_x_buff x, reply;
  ks_cmd cmd;
  ks_fcap *c;
  int idx = 0, ver, ok;
  char atom[MAXATOMLEN];

  ei_x_new_with_version(&x);
  ei_x_encode_longlong(&x, 1);
  encode_opt(&x, key, v, is_bool);
  ei_decode_version(x.buff, &idx, &ver);
  cmd = (ks_cmd){{(const unsigned char *)x.buff, (size_t)x.index}, idx, 3, &sink.in};
  ei_x_new(&reply);
  ck_assert_int_eq(ks_cmd_flame_start(&sink.flame, &cmd, &reply), 0);
  idx = 0;
  ok = ei_decode_atom(reply.buff, &idx, atom) == 0 && strcmp(atom, "ok") == 0;
  if ((c = ks_flame_find(&sink.flame, 1)) != NULL)
    ks_flame_drop(&sink.flame, c);
  ei_x_free(&reply);
  ei_x_free(&x);
  return ok ? KS_OK : KS_EINVAL;
}

static int start(unsigned mode, const char *key, long long v, int is_bool) {
  return mode == KS_M_TIERS ? tiers_start(key, v, is_bool) : flame_start(key, v, is_bool);
}

/* At MIN and MAX accepted, past them refused; booleans: true and false only. */
static void check_row(const ks_option *o, unsigned mode) {
  const double big = 9.2e18;   /* past this a bound is no bound (KS_INF) */

  if (o->type == KS_T_BOOL) {
    ck_assert_msg(start(mode, o->key, 1, 1) == KS_OK, "%s true", o->key);
    ck_assert_msg(start(mode, o->key, 0, 1) == KS_OK, "%s false", o->key);
    ck_assert_msg(start(mode, o->key, 1, 0) != KS_OK, "%s 1", o->key);
    return;
  }
  ck_assert_int_eq(o->type, KS_T_INT);
  if (o->min > -big) {
    ck_assert_msg(start(mode, o->key, (long long)o->min, 0) == KS_OK, "%s at min", o->key);
    ck_assert_msg(start(mode, o->key, (long long)o->min - 1, 0) != KS_OK, "%s under min",
                  o->key);
  }
  if (o->max < big) {
    ck_assert_msg(start(mode, o->key, (long long)o->max, 0) == KS_OK, "%s at max", o->key);
    ck_assert_msg(start(mode, o->key, (long long)o->max + 1, 0) != KS_OK, "%s over max",
                  o->key);
  }
}

START_TEST(sink_rows_enforced_at_their_bounds) {
  size_t k;
  unsigned mode;
  int checked = 0;

  for (k = 0; k < ks_noptions; k++) {
    const ks_option *o = &ks_options[k];
    if (!(o->by & KS_BY_SINK) || (o->type != KS_T_INT && o->type != KS_T_BOOL))
      continue;
    for (mode = KS_M_TIERS; mode <= KS_M_FLAME; mode <<= 1)
      if (o->modes & mode) {
        ck_assert_ptr_eq(ks_option_find(mode, o->key), o);
        check_row(o, mode);
        checked++;
      }
  }
  ck_assert_int_ge(checked, 18);
}
END_TEST

START_TEST(kprof_only_rows_and_unknown_keys_refused) {
  size_t k;
  unsigned mode;

  for (k = 0; k < ks_noptions; k++) {
    const ks_option *o = &ks_options[k];
    if (o->by != KS_BY_ERLANG)
      continue;
    for (mode = KS_M_TIERS; mode <= KS_M_FLAME; mode <<= 1)
      if ((o->modes & mode) && ks_option_find(mode, o->key) == NULL) {
        ck_assert_msg(start(mode, o->key, 1, 0) != KS_OK, "%s taken by the sink", o->key);
        ck_assert_msg(start(mode, o->key, 1, 1) != KS_OK, "%s taken by the sink", o->key);
      }
  }
  ck_assert_int_ne(tiers_start("no_such_option", 1, 0), KS_OK);
  ck_assert_int_ne(flame_start("no_such_option", 1, 0), KS_OK);
  ck_assert_ptr_null(ks_option_find(KS_M_TIERS, "max_depth"));
  ck_assert_ptr_null(ks_option_find(KS_M_FLAME, "max_identities"));
}
END_TEST

/* A field of a feature's options struct, as the row stores it. */
static uint64_t field_value(const void *opts, const ks_option_field *f) {
  uint32_t u32;
  uint64_t u64;

  if (f->size == sizeof(u64)) {
    memcpy(&u64, (const char *)opts + f->off, sizeof(u64));
    return u64;
  }
  memcpy(&u32, (const char *)opts + f->off, sizeof(u32));
  return u32;
}

/* The C defaults are the table's: every row with a field and a DEFAULT holds
 * it (times its scale) in ks_fopts_default's and ks_tiers_default_opts's
 * structs, so no default is written twice. */
START_TEST(c_defaults_are_the_tables) {
  ks_fopts fo;
  ks_tier_opts to;
  size_t k;
  long long v;
  int checked = 0;

  ks_fopts_default(&fo);
  ks_tiers_default_opts(&to);
  for (k = 0; k < ks_noptions; k++) {
    const ks_option *o = &ks_options[k];
    if (ks_option_default(o, &v) != KS_OK)
      continue;
    if (ks_flame_fields[k].size != 0) {
      ck_assert_msg(field_value(&fo, &ks_flame_fields[k]) ==
                    (uint64_t)v * ks_flame_fields[k].scale, "flame %s", o->key);
      checked++;
    }
    if (ks_tier_fields[k].size != 0) {
#ifdef KS_TIERS_INFLIGHT
      /* The fuzzers' and the coverage build's smaller default (port/tiers/tier_control.c). */
      if (strcmp(o->key, "max_inflight") == 0)
        v = KS_TIERS_INFLIGHT;
#endif
      ck_assert_msg(field_value(&to, &ks_tier_fields[k]) ==
                    (uint64_t)v * ks_tier_fields[k].scale, "tiers %s", o->key);
      checked++;
    }
  }
  ck_assert_int_ge(checked, 20);
  /* The spot checks of what the rows say (grace_ms "100" into ns, a boolean). */
  ck_assert_uint_eq(to.grace_ns, 100 * 1000000ull);
  ck_assert_int_eq(fo.sleep, 1);
  ck_assert_uint_eq(fo.max_bytes, (uint64_t)2 << 30);   /* the row's "2147483648" */
  ck_assert_uint_eq(to.slow_ns, UINT64_MAX);   /* slow_us has none: off */
}
END_TEST

/* Every integer or boolean row the sink takes has a field in its feature (so
 * its decode is the table's loop), and every term row the feature's decoder. */
START_TEST(every_sink_row_has_a_field) {
  size_t k;

  for (k = 0; k < ks_noptions; k++) {
    const ks_option *o = &ks_options[k];
    int scalar = o->type == KS_T_INT || o->type == KS_T_BOOL || o->type == KS_T_ENUM;
    if (!(o->by & KS_BY_SINK))
      continue;
    /* A term row may have the field its feature's decoder stores into (trigger). */
    if (o->modes & KS_M_FLAME)
      ck_assert_msg(ks_flame_fields[k].size != 0 || !scalar, "flame %s", o->key);
    if (o->modes & KS_M_TIERS)
      ck_assert_msg(ks_tier_fields[k].size != 0 || !scalar, "tiers %s", o->key);
    ck_assert_msg(ks_flame_fields[k].size == 0 || ks_tier_fields[k].size == 0, "%s", o->key);
  }
}
END_TEST

/* A value given lands in its field times the row's scale. */
START_TEST(decoded_value_lands_scaled) {
  ei_x_buff x;
  ks_tier_opts to;
  const ks_option *term;
  int idx = 0, ver;

  ks_tiers_default_opts(&to);
  ei_x_new_with_version(&x);
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "grace_ms");
  ei_x_encode_longlong(&x, 7);
  ei_decode_version(x.buff, &idx, &ver);
  ck_assert_int_eq(ks_option_decode(KS_M_TIERS, ks_tier_fields, x.buff, &idx, &to, &term), KS_OK);
  ck_assert_ptr_null(term);
  ck_assert_uint_eq(to.grace_ns, 7 * 1000000ull);
  ck_assert_int_eq(idx, x.index);
  ei_x_free(&x);
}
END_TEST

Suite *options_suite(void) {
  Suite *s = suite_create("options");
  TCase *tc = tcase_create("table");

  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, sink_rows_enforced_at_their_bounds);
  tcase_add_test(tc, kprof_only_rows_and_unknown_keys_refused);
  tcase_add_test(tc, c_defaults_are_the_tables);
  tcase_add_test(tc, every_sink_row_has_a_field);
  tcase_add_test(tc, decoded_value_lands_scaled);
  suite_add_tcase(s, tc);
  return s;
}
