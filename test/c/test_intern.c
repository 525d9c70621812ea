/* test_intern.c: ids for MFAs, pids and terms: stable, encoding-blind, capped. */
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

static ks_atom atom(const char *s, int utf8) {
  ks_atom a = {(const unsigned char *)s, strlen(s), utf8};
  return a;
}

START_TEST(same_mfa_same_id_whatever_the_encoding) {
  ks_intern in;
  uint32_t a, b, c, d;
  ks_atom m1 = atom("mod", 0), f1 = atom("fun", 0), m2 = atom("mod", 1), f2 = atom("fun", 1);
  ks_atom lat = atom("h\xe9", 0), utf = atom("h\xc3\xa9", 1);
  ks_mfa_view v;

  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  ck_assert_int_eq(ks_intern_mfa(&in, &m1, &f1, 2, &a), KS_OK);
  ck_assert_int_eq(ks_intern_mfa(&in, &m2, &f2, 2, &b), KS_OK);
  ck_assert_int_eq(ks_intern_mfa(&in, &m1, &f1, 3, &c), KS_OK);
  ck_assert_uint_eq(a, b);
  ck_assert_uint_ne(a, c);
  ck_assert_int_eq(ks_intern_mfa(&in, &m1, &lat, 0, &c), KS_OK);
  ck_assert_int_eq(ks_intern_mfa(&in, &m2, &utf, 0, &d), KS_OK);
  ck_assert_uint_eq(c, d);
  ck_assert_uint_eq(in.n_mfas, 3);
  ck_assert_int_eq(ks_intern_mfa_get(&in, d, &v), KS_OK);
  ck_assert_str_eq(v.m, "mod");
  ck_assert_str_eq(v.f, "h\xc3\xa9");
  ck_assert_uint_eq(v.arity, 0);
  ck_assert_int_eq(ks_intern_mfa_get(&in, 99, &v), KS_EINVAL);
  ks_intern_free(&in);
}
END_TEST

/* The split between module and function is part of the key: {ab, c} is not {a, bc}. */
START_TEST(module_function_boundary) {
  ks_intern in;
  uint32_t a, b;
  ks_atom ab = atom("ab", 0), c = atom("c", 0), a1 = atom("a", 0), bc = atom("bc", 0);

  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  ks_intern_mfa(&in, &ab, &c, 1, &a);
  ks_intern_mfa(&in, &a1, &bc, 1, &b);
  ck_assert_uint_ne(a, b);
  ks_intern_free(&in);
}
END_TEST

static ks_slice pid_bytes(ei_x_buff *x, const char *node, unsigned num, unsigned serial,
                          unsigned creation) {
  ks_slice s;
  ck_assert_int_eq(ei_x_new(x), 0);
  tb_pid(x, node, num, serial, creation);
  s.p = (const unsigned char *)x->buff;
  s.n = (size_t)x->index;
  return s;
}

/* A pid's bytes cut short after the node (as a ring record may carry them:
 * they are not parsed by ks_etf_pid first) are refused, never read past. */
START_TEST(short_pid_bytes_are_refused) {
  ks_intern in;
  ei_x_buff x;
  ks_slice s;
  uint32_t id;
  size_t cut;

  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  s = pid_bytes(&x, "a@b", 85, 0, 2);
  for (cut = 1; cut < s.n; cut++) {
    /* A copy of exactly `cut` bytes, so ASan sees a read past it. */
    unsigned char *p = malloc(cut);
    ks_slice t = {p, cut};
    ck_assert_ptr_nonnull(p);
    memcpy(p, s.p, cut);
    ck_assert_int_eq(ks_intern_pid(&in, t, &id), KS_EBADTERM);
    free(p);
  }
  ck_assert_int_eq(ks_intern_pid(&in, s, &id), KS_OK);
  ei_x_free(&x);
  ks_intern_free(&in);
}
END_TEST

START_TEST(pids_and_their_encodings) {
  ks_intern in;
  ei_x_buff x1, x2, x3;
  uint32_t a, b, c, d;
  ks_pid_view v;
  /* PID_EXT of the same pid as x1's NEW_PID_EXT: node atom, num, serial, 1-byte creation. */
  unsigned char old[] = {103, 100, 0, 3, 'a', '@', 'b', 0, 0, 0, 85, 0, 0, 0, 0, 2};

  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  ck_assert_int_eq(ks_intern_pid(&in, pid_bytes(&x1, "a@b", 85, 0, 2), &a), KS_OK);
  ck_assert_int_eq(ks_intern_pid(&in, pid_bytes(&x2, "a@b", 86, 0, 2), &b), KS_OK);
  ck_assert_int_eq(ks_intern_pid(&in, pid_bytes(&x3, "a@b", 85, 0, 2), &c), KS_OK);
  ck_assert_uint_ne(a, b);
  ck_assert_uint_eq(a, c);
  {
    ks_slice s = {old, sizeof(old)};
    ck_assert_int_eq(ks_intern_pid(&in, s, &d), KS_OK);
    ck_assert_uint_eq(a, d);
  }
  ck_assert_int_eq(ks_intern_pid_get(&in, b, &v), KS_OK);
  ck_assert_str_eq(v.node, "a@b");
  ck_assert_uint_eq(v.num, 86);
  ck_assert_int_eq(v.is_port, 0);
  ei_x_free(&x1);
  ei_x_free(&x2);
  ei_x_free(&x3);
  ks_intern_free(&in);
}
END_TEST

START_TEST(caps_give_efull_and_keep_old_ids) {
  ks_intern_limits lim = {4, 2, 3};
  ks_intern in;
  uint32_t id, first;
  char name[16];
  int k;

  ck_assert_int_eq(ks_intern_init(&in, &lim), KS_OK);
  for (k = 0; k < 6; k++) {
    ks_atom m = atom("m", 0), f;
    snprintf(name, sizeof(name), "f%d", k);
    f = atom(name, 0);
    ck_assert_int_eq(ks_intern_mfa(&in, &m, &f, 0, &id), k < 4 ? KS_OK : KS_EFULL);
    if (k == 0)
      first = id;
  }
  {
    ks_atom m = atom("m", 0), f = atom("f0", 0);
    ck_assert_int_eq(ks_intern_mfa(&in, &m, &f, 0, &id), KS_OK);
    ck_assert_uint_eq(id, first);
  }
  for (k = 0; k < 5; k++) {
    unsigned char t[2] = {97, (unsigned char)k};
    ks_slice s = {t, 2};
    ck_assert_int_eq(ks_intern_term(&in, s, &id), k < 3 ? KS_OK : KS_EFULL);
  }
  ck_assert_uint_eq(in.n_mfas, 4);
  ck_assert_uint_eq(in.n_terms, 3);
  ks_intern_free(&in);
}
END_TEST

/* Each table counts the keys its cap refused, and only its own (stats: dropped_*). */
START_TEST(each_table_counts_its_drops) {
  ks_intern_limits lim = {2, 3, 1};
  ks_intern in;
  ei_x_buff x;
  uint32_t id;
  char name[16];
  int k;

  ck_assert_int_eq(ks_intern_init(&in, &lim), KS_OK);
  for (k = 0; k < 5; k++) {   /* 3 pids fit, 2 are refused */
    ck_assert_int_eq(ks_intern_pid(&in, pid_bytes(&x, "a@b", 100 + k, 0, 1), &id),
                     k < 3 ? KS_OK : KS_EFULL);
    ei_x_free(&x);
  }
  ck_assert_uint_eq(in.dropped_pids, 2);
  ck_assert_uint_eq(in.dropped_mfas, 0);
  ck_assert_uint_eq(in.dropped_terms, 0);
  /* A known pid is no drop, however full the table. */
  ck_assert_int_eq(ks_intern_pid(&in, pid_bytes(&x, "a@b", 100, 0, 1), &id), KS_OK);
  ei_x_free(&x);
  ck_assert_uint_eq(in.dropped_pids, 2);
  for (k = 0; k < 3; k++) {   /* 2 MFAs fit; the raw-tuple path counts the same */
    ks_atom m = atom("m", 0), f;
    unsigned char tuple[10] = {104, 3, 119, 1, 'm', 119, 1, (unsigned char)('a' + k), 97, 0};
    ks_slice raw = {tuple, sizeof(tuple)};
    snprintf(name, sizeof(name), "%c", 'a' + k);
    f = atom(name, 0);
    ck_assert_int_eq(ks_intern_mfa_raw(&in, raw, &m, &f, 0, &id), k < 2 ? KS_OK : KS_EFULL);
  }
  ck_assert_uint_eq(in.dropped_mfas, 1);
  for (k = 0; k < 4; k++) {   /* 1 term fits */
    unsigned char t[2] = {97, (unsigned char)k};
    ks_slice s = {t, 2};
    ck_assert_int_eq(ks_intern_term(&in, s, &id), k < 1 ? KS_OK : KS_EFULL);
  }
  ck_assert_uint_eq(in.dropped_terms, 3);
  ck_assert_uint_eq(in.dropped_pids, 2);
  ck_assert_uint_eq(in.dropped_mfas, 1);
  ks_intern_free(&in);
}
END_TEST

/* 200k distinct keys: tables grow, every id comes back the same. */
START_TEST(many_keys) {
  ks_intern in;
  uint32_t id, k, n = 200000;
  char name[32];

  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  for (k = 0; k < n; k++) {
    ks_atom m = atom("mod", 0), f;
    snprintf(name, sizeof(name), "fun_%u", k);
    f = atom(name, 0);
    if (ks_intern_mfa(&in, &m, &f, k % 7, &id) != KS_OK || id != k)
      ck_abort_msg("key %u got id %u", k, id);
  }
  for (k = 0; k < n; k += 997) {
    ks_atom m = atom("mod", 1), f;
    ks_mfa_view v;
    snprintf(name, sizeof(name), "fun_%u", k);
    f = atom(name, 1);
    ck_assert_int_eq(ks_intern_mfa(&in, &m, &f, k % 7, &id), KS_OK);
    ck_assert_uint_eq(id, k);
    ck_assert_int_eq(ks_intern_mfa_get(&in, id, &v), KS_OK);
    ck_assert_str_eq(v.f, name);
  }
  ck_assert_uint_eq(in.n_mfas, n);
  ks_intern_free(&in);
}
END_TEST

Suite *intern_suite(void) {
  Suite *s = suite_create("intern");
  TCase *tc = tcase_create("intern");

  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, same_mfa_same_id_whatever_the_encoding);
  tcase_add_test(tc, module_function_boundary);
  tcase_add_test(tc, pids_and_their_encodings);
  tcase_add_test(tc, caps_give_efull_and_keep_old_ids);
  tcase_add_test(tc, each_table_counts_its_drops);
  tcase_add_test(tc, many_keys);
  tcase_add_test(tc, short_pid_bytes_are_refused);
  suite_add_tcase(s, tc);
  return s;
}
