/* test_etf.c: the bounded term reader: every tag skipped, every truncation refused. */
#include <stdlib.h>

#include "test_util.h"

/* A term using every tag ei can write, nested. */
static void rich_term(ei_x_buff *x) {
  erlang_ref r;
  erlang_port port;
  erlang_fun fun;
  char bits[3] = {1, 2, 3};

  ck_assert_int_eq(ei_x_encode_tuple_header(x, 14), 0);
  tb_atom(x, "latin1");
  tb_atom_as(x, "utf8_\xc3\xa9", ERLANG_UTF8);
  ck_assert_int_eq(ei_x_encode_long(x, 7), 0);
  ck_assert_int_eq(ei_x_encode_long(x, -100000), 0);
  ck_assert_int_eq(ei_x_encode_longlong(x, -1234567890123456789LL), 0);
  ck_assert_int_eq(ei_x_encode_double(x, 3.5), 0);
  ck_assert_int_eq(ei_x_encode_string(x, "abc"), 0);
  ck_assert_int_eq(ei_x_encode_binary(x, "xyz", 3), 0);
  ck_assert_int_eq(ei_x_encode_bitstring(x, bits, 0, 20), 0);
  tb_pid(x, "a@b", 1, 2, 3);
  memset(&r, 0, sizeof(r));
  snprintf(r.node, sizeof(r.node), "n@h");
  r.len = 3;
  r.n[0] = 1; r.n[1] = 2; r.n[2] = 3;
  r.creation = 9;
  ck_assert_int_eq(ei_x_encode_ref(x, &r), 0);
  memset(&port, 0, sizeof(port));
  snprintf(port.node, sizeof(port.node), "n@h");
  port.id = 77;
  port.creation = 5;
  ck_assert_int_eq(ei_x_encode_port(x, &port), 0);
  /* A map with a list inside, and an improper list. */
  ck_assert_int_eq(ei_x_encode_map_header(x, 1), 0);
  tb_atom(x, "k");
  ck_assert_int_eq(ei_x_encode_list_header(x, 2), 0);
  ck_assert_int_eq(ei_x_encode_long(x, 1), 0);
  ck_assert_int_eq(ei_x_encode_long(x, 2), 0);
  ck_assert_int_eq(ei_x_encode_long(x, 3), 0);   /* the improper tail */
  memset(&fun, 0, sizeof(fun));
  fun.type = EI_FUN_EXPORT;
  snprintf(fun.module, sizeof(fun.module), "lists");
  fun.u.exprt.func = "map";
  fun.u.exprt.func_allocated = 0;
  fun.arity = 2;
  ck_assert_int_eq(ei_x_encode_fun(x, &fun), 0);
}

START_TEST(skips_every_tag) {
  ei_x_buff x;
  ks_etf c;

  tb_begin(&x);
  rich_term(&x);
  ks_etf_init(&c, x.buff, (size_t)x.index);
  ck_assert_int_eq(ks_etf_version(&c), KS_OK);
  ck_assert_int_eq(ks_etf_skip(&c), KS_OK);
  ck_assert(ks_etf_at_end(&c));
  ei_x_free(&x);
}
END_TEST

/* Cut anywhere, the term is refused, and the reader stays inside the bytes it was given. */
START_TEST(every_truncation_is_refused) {
  ei_x_buff x;
  size_t cut;

  tb_begin(&x);
  rich_term(&x);
  for (cut = 1; cut < (size_t)x.index; cut++) {
    unsigned char *copy = malloc(cut);   /* exact size: ASan sees any overread */
    ks_etf c;
    memcpy(copy, x.buff, cut);
    ks_etf_init(&c, copy, cut);
    ck_assert_int_eq(ks_etf_version(&c), KS_OK);
    ck_assert_int_eq(ks_etf_skip(&c), KS_EBADTERM);
    ck_assert_uint_le(c.i, cut);
    free(copy);
  }
  ei_x_free(&x);
}
END_TEST

/* Lies about sizes are caught before any loop runs over them. */
START_TEST(absurd_counts) {
  const unsigned char list[] = {131, 108, 0xff, 0xff, 0xff, 0xff, 106};
  const unsigned char tuple[] = {131, 105, 0x7f, 0xff, 0xff, 0xff};
  const unsigned char map[] = {131, 116, 0x7f, 0xff, 0xff, 0xff};
  const unsigned char bin[] = {131, 109, 0xff, 0xff, 0xff, 0xf0, 1};
  const unsigned char *cases[] = {list, tuple, map, bin};
  const size_t lens[] = {sizeof(list), sizeof(tuple), sizeof(map), sizeof(bin)};

  for (int k = 0; k < 4; k++) {
    ks_etf c;
    ks_etf_init(&c, cases[k], lens[k]);
    ck_assert_int_eq(ks_etf_version(&c), KS_OK);
    ck_assert_int_eq(ks_etf_skip(&c), KS_EBADTERM);
  }
}
END_TEST

/* [[[...[]...]]] 100k deep: no recursion, no stack overflow. */
START_TEST(deep_nesting) {
  size_t depth = 100000, i, o = 0;
  unsigned char *b = malloc(1 + depth * 5 + 1 + depth);
  ks_etf c;

  b[o++] = 131;
  for (i = 0; i < depth; i++) {
    b[o++] = 108;
    ks_put_be32(b + o, 1);
    o += 4;
  }
  b[o++] = 106;          /* the innermost element */
  for (i = 0; i < depth; i++)
    b[o++] = 106;        /* each level's tail */
  ks_etf_init(&c, b, o);
  ck_assert_int_eq(ks_etf_version(&c), KS_OK);
  ck_assert_int_eq(ks_etf_skip(&c), KS_OK);
  ck_assert(ks_etf_at_end(&c));
  free(b);
}
END_TEST

START_TEST(int64_forms) {
  const long long vals[] = {0, 255, 256, -1, 2147483647LL, -2147483648LL,
                            -576460752303423489LL, 9223372036854775807LL,
                            -9223372036854775807LL};
  for (size_t k = 0; k < sizeof(vals) / sizeof(vals[0]); k++) {
    ei_x_buff x;
    ks_etf c;
    int64_t v;
    tb_begin(&x);
    ck_assert_int_eq(ei_x_encode_longlong(&x, vals[k]), 0);
    ks_etf_init(&c, x.buff, (size_t)x.index);
    ck_assert_int_eq(ks_etf_version(&c), KS_OK);
    ck_assert_int_eq(ks_etf_int64(&c, &v), KS_OK);
    ck_assert_int_eq(v, vals[k]);
    ck_assert(ks_etf_at_end(&c));
    ei_x_free(&x);
  }
  {
    /* 2^64: a bignum past 63 bits is refused. */
    const unsigned char big[] = {131, 110, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    ks_etf c;
    int64_t v;
    ks_etf_init(&c, big, sizeof(big));
    ks_etf_version(&c);
    ck_assert_int_eq(ks_etf_int64(&c, &v), KS_EBADTERM);
  }
}
END_TEST

START_TEST(atom_text_to_utf8) {
  const unsigned char latin1[] = {'h', 0xe9, 'l'};
  const unsigned char bad_utf8[] = {'a', 0xc3};
  ks_atom a = {latin1, 3, 0};
  char out[16];

  ck_assert_int_eq(ks_atom_utf8(&a, out, sizeof(out)), 4);
  ck_assert_str_eq(out, "h\xc3\xa9l");
  a.s = bad_utf8;
  a.n = 2;
  a.utf8 = 1;
  ck_assert_int_eq(ks_atom_utf8(&a, out, sizeof(out)), KS_EBADTERM);
  a.s = (const unsigned char *)"abc";
  a.n = 3;
  ck_assert_int_eq(ks_atom_utf8(&a, out, 3), KS_EBADTERM);   /* no room for NUL */
}
END_TEST

START_TEST(list_length_of_args) {
  ei_x_buff x;
  ks_etf c;
  uint32_t n;

  tb_begin(&x);
  ck_assert_int_eq(ei_x_encode_list_header(&x, 3), 0);
  tb_atom(&x, "a");
  ck_assert_int_eq(ei_x_encode_binary(&x, "bb", 2), 0);
  ck_assert_int_eq(ei_x_encode_string(&x, "ccc"), 0);
  ck_assert_int_eq(ei_x_encode_empty_list(&x), 0);
  ck_assert_int_eq(ei_x_encode_string(&x, "hello"), 0);   /* STRING_EXT: 5 args */
  ck_assert_int_eq(ei_x_encode_empty_list(&x), 0);
  ks_etf_init(&c, x.buff, (size_t)x.index);
  ks_etf_version(&c);
  ck_assert_int_eq(ks_etf_list_length(&c, &n), KS_OK);
  ck_assert_uint_eq(n, 3);
  ck_assert_int_eq(ks_etf_list_length(&c, &n), KS_OK);
  ck_assert_uint_eq(n, 5);
  ck_assert_int_eq(ks_etf_list_length(&c, &n), KS_OK);
  ck_assert_uint_eq(n, 0);
  ck_assert(ks_etf_at_end(&c));
  ei_x_free(&x);
}
END_TEST

Suite *etf_suite(void) {
  Suite *s = suite_create("etf");
  TCase *tc = tcase_create("etf");

  tcase_add_test(tc, skips_every_tag);
  tcase_add_test(tc, every_truncation_is_refused);
  tcase_add_test(tc, absurd_counts);
  tcase_add_test(tc, deep_nesting);
  tcase_add_test(tc, int64_forms);
  tcase_add_test(tc, atom_text_to_utf8);
  tcase_add_test(tc, list_length_of_args);
  suite_add_tcase(s, tc);
  return s;
}
