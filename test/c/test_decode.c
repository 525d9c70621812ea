/* test_decode.c: each trace message shape, built with ei, decoded into the expected event. */
#include <stdlib.h>

#include "test_util.h"

#define TS (-576460752303423489LL)
#define P(x) tb_pid(x, "n@h", 85, 0, 3)
#define P2(x) tb_pid(x, "n@h", 86, 1, 3)

typedef void (*build_fn)(ei_x_buff *x);

static ks_intern in;

static void setup(void) {
  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
}

static void teardown(void) {
  ks_intern_free(&in);
}

/* {Tag, P, What, ...}: the header of a trace message with `rest` more elements. */
static void head(ei_x_buff *x, int ts, const char *what, int rest) {
  ck_assert_int_eq(ei_x_encode_tuple_header(x, 3 + rest + (ts ? 1 : 0)), 0);
  tb_atom(x, ts ? "trace_ts" : "trace");
  P(x);
  tb_atom(x, what);
}

static void ts_int(ei_x_buff *x) {
  ck_assert_int_eq(ei_x_encode_longlong(x, TS), 0);
}

static void decode_expect(build_fn build, int want_rc, const char *want_line) {
  ei_x_buff x;
  ks_decoded d;
  char line[1024];
  int rc;

  tb_begin(&x);
  build(&x);
  rc = ks_decode_frame(&in, (const unsigned char *)x.buff, (size_t)x.index, &d);
  ck_assert_int_eq(rc, want_rc);
  if (want_line != NULL) {
    event_line(&in, rc, &d, line, sizeof(line));
    ck_assert_str_eq(line, want_line);
  }
  ei_x_free(&x);
}

static void b_call_arity(ei_x_buff *x) {
  head(x, 1, "call", 1);
  tb_mfa(x, "m", "f", 2);
  ts_int(x);
}
static void b_call_args_string(ei_x_buff *x) {
  head(x, 0, "call", 1);
  ei_x_encode_tuple_header(x, 3);
  tb_atom(x, "m");
  tb_atom(x, "f");
  ei_x_encode_string(x, "\x01\x02\x03");   /* [1,2,3] arrives as STRING_EXT */
}
static void b_call_args_list(ei_x_buff *x) {
  head(x, 0, "call", 1);
  ei_x_encode_tuple_header(x, 3);
  tb_atom(x, "m");
  tb_atom(x, "f");
  ei_x_encode_list_header(x, 2);
  tb_atom(x, "a");
  ei_x_encode_binary(x, "bin", 3);
  ei_x_encode_empty_list(x);
}
static void token(ei_x_buff *x, long label) {
  ei_x_encode_tuple_header(x, 5);
  ei_x_encode_long(x, 0);
  ei_x_encode_long(x, label);
  ei_x_encode_long(x, 1);
  P2(x);
  ei_x_encode_long(x, 0);
}
static void b_call_token(ei_x_buff *x) {
  head(x, 1, "call", 2);
  tb_mfa(x, "m", "f", 0);
  token(x, 42);
  ts_int(x);
}
static void b_call_no_token(ei_x_buff *x) {
  head(x, 1, "call", 2);
  tb_mfa(x, "m", "f", 0);
  ei_x_encode_empty_list(x);
  ts_int(x);
}
static void b_call_caller(ei_x_buff *x) {
  head(x, 1, "call", 2);
  tb_mfa(x, "m", "f", 0);
  tb_mfa(x, "c", "g", 1);
  ts_int(x);
}
static void b_call_token_caller(ei_x_buff *x) {
  head(x, 1, "call", 2);
  tb_mfa(x, "m", "f", 0);
  ei_x_encode_tuple_header(x, 2);
  token(x, 7);
  tb_mfa(x, "c", "g", 1);
  ts_int(x);
}
static void b_call_notoken_undefined(ei_x_buff *x) {
  head(x, 1, "call", 2);
  tb_mfa(x, "m", "f", 0);
  ei_x_encode_tuple_header(x, 2);
  ei_x_encode_empty_list(x);
  tb_atom(x, "undefined");
  ts_int(x);
}
static void b_call_other_extra(ei_x_buff *x) {
  head(x, 1, "call", 2);
  tb_mfa(x, "m", "f", 0);
  ei_x_encode_map_header(x, 1);
  tb_atom(x, "k");
  ei_x_encode_string(x, "v");
  ts_int(x);
}
static void b_return_from_big(ei_x_buff *x) {
  static char big[1 << 20];
  head(x, 1, "return_from", 2);
  tb_mfa(x, "m", "f", 1);
  ei_x_encode_binary(x, big, sizeof(big));
  ts_int(x);
}
static void b_exception_from(ei_x_buff *x) {
  head(x, 1, "exception_from", 2);
  tb_mfa(x, "m", "f", 1);
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, "error");
  tb_atom(x, "badarg");
  ts_int(x);
}
static void b_return_to(ei_x_buff *x) {
  head(x, 1, "return_to", 1);
  tb_mfa(x, "m", "g", 3);
  ts_int(x);
}
static void b_return_to_undefined(ei_x_buff *x) {
  head(x, 1, "return_to", 1);
  tb_atom(x, "undefined");
  ts_int(x);
}
static void b_in(ei_x_buff *x) {
  head(x, 1, "in", 1);
  tb_mfa(x, "gen_server", "loop", 7);
  ts_int(x);
}
static void b_out_zero(ei_x_buff *x) {
  head(x, 1, "out_exited", 1);
  ei_x_encode_long(x, 0);
  ts_int(x);
}
static void b_spawn(ei_x_buff *x) {
  head(x, 1, "spawn", 2);
  P2(x);
  ei_x_encode_tuple_header(x, 3);
  tb_atom(x, "erlang");
  tb_atom(x, "apply");
  ei_x_encode_list_header(x, 2);
  tb_atom(x, "a");
  ei_x_encode_empty_list(x);
  ei_x_encode_empty_list(x);
  ts_int(x);
}
static void b_exit(ei_x_buff *x) {
  head(x, 1, "exit", 1);
  tb_atom(x, "normal");
  ts_int(x);
}
static void b_link(ei_x_buff *x) {
  head(x, 0, "getting_unlinked", 1);
  P2(x);
}
static void b_register(ei_x_buff *x) {
  head(x, 1, "register", 1);
  tb_atom(x, "my_server");
  ts_int(x);
}
static void b_send_pid(ei_x_buff *x) {
  head(x, 1, "send", 2);
  ei_x_encode_string(x, "msg");
  P2(x);
  ts_int(x);
}
static void b_send_name_node(ei_x_buff *x) {
  head(x, 1, "send_to_non_existing_process", 2);
  ei_x_encode_string(x, "msg");
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, "name");
  tb_atom(x, "n@h");
  ts_int(x);
}
static void b_receive(ei_x_buff *x) {
  head(x, 1, "receive", 1);
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, "hello");
  ei_x_encode_long(x, 1);
  ts_int(x);
}
static void b_gc(ei_x_buff *x) {
  head(x, 1, "gc_major_start", 1);
  ei_x_encode_list_header(x, 1);
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, "heap_size");
  ei_x_encode_long(x, 987);
  ei_x_encode_empty_list(x);
  ts_int(x);
}
static void port_id(ei_x_buff *x) {
  erlang_port p;
  memset(&p, 0, sizeof(p));
  snprintf(p.node, sizeof(p.node), "n@h");
  p.id = 77;
  p.creation = 3;
  ck_assert_int_eq(ei_x_encode_port(x, &p), 0);
}
static void b_port_open(ei_x_buff *x) {
  ei_x_encode_tuple_header(x, 6);
  tb_atom(x, "trace_ts");
  port_id(x);
  tb_atom(x, "open");
  P(x);
  tb_atom(x, "tcp_inet");
  ts_int(x);
}
static void b_seq_trace_wall(ei_x_buff *x) {
  ei_x_encode_tuple_header(x, 4);
  tb_atom(x, "seq_trace");
  ei_x_encode_long(x, 9);
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, "print");
  ei_x_encode_string(x, "hi");
  ei_x_encode_tuple_header(x, 3);
  ei_x_encode_long(x, 1700);
  ei_x_encode_long(x, 123456);
  ei_x_encode_long(x, 789);
}
static void b_strict_ts(ei_x_buff *x) {
  head(x, 1, "call", 1);
  tb_mfa(x, "m", "f", 0);
  ei_x_encode_tuple_header(x, 2);
  ei_x_encode_longlong(x, TS);
  ei_x_encode_long(x, 12);
}
static void b_utf8_atoms(ei_x_buff *x) {
  ei_x_encode_tuple_header(x, 5);
  tb_atom_as(x, "trace_ts", ERLANG_UTF8);
  tb_pid(x, "n@h", 85, 0, 3);
  tb_atom_as(x, "call", ERLANG_UTF8);
  ei_x_encode_tuple_header(x, 3);
  tb_atom_as(x, "\xe6\x97\xa5\xe6\x9c\xac", ERLANG_UTF8);
  tb_atom_as(x, "h\xc3\xa9llo", ERLANG_UTF8);
  ei_x_encode_long(x, 1);
  ts_int(x);
}
/* ATOM_UTF8_EXT (2-byte length) is what OTP 26 writes for long atoms. */
static void b_long_utf8_atom_ext(ei_x_buff *x) {
  static const char hdr[] = {118, 0, 3};
  head(x, 0, "call", 1);
  ei_x_encode_tuple_header(x, 3);
  ei_x_append_buf(x, hdr, 3);
  ei_x_append_buf(x, "mod", 3);
  tb_atom_as(x, "f", ERLANG_UTF8);
  ei_x_encode_long(x, 0);
}
static void b_unknown_what(ei_x_buff *x) {
  head(x, 0, "bogus", 1);
  ei_x_encode_long(x, 1);
}
static void b_wrong_arity(ei_x_buff *x) {
  head(x, 0, "call", 3);
  tb_mfa(x, "m", "f", 0);
  tb_atom(x, "a");
  tb_atom(x, "b");
}
static void b_not_a_tuple(ei_x_buff *x) {
  tb_atom(x, "hello");
}
static void b_trailing_garbage(ei_x_buff *x) {
  b_call_arity(x);
  ei_x_append_buf(x, "\x61\x01", 2);
}
static void b_truncated_mfa(ei_x_buff *x) {
  head(x, 0, "call", 1);
  ei_x_encode_tuple_header(x, 3);
  tb_atom(x, "m");
}

#define L_PID "<0.85.0>"
#define L_TS "-576460752303423489"

START_TEST(call_shapes) {
  decode_expect(b_call_arity, KS_FRAME_TRACE, "call " L_PID " m:f/2 " L_TS " - - -");
  decode_expect(b_call_args_string, KS_FRAME_TRACE, "call " L_PID " m:f/3 - - - -");
  decode_expect(b_call_args_list, KS_FRAME_TRACE, "call " L_PID " m:f/2 - - - -");
  decode_expect(b_call_token, KS_FRAME_TRACE, "call " L_PID " m:f/0 " L_TS " 42 - -");
  decode_expect(b_call_no_token, KS_FRAME_TRACE, "call " L_PID " m:f/0 " L_TS " - - -");
  decode_expect(b_call_caller, KS_FRAME_TRACE, "call " L_PID " m:f/0 " L_TS " - - c:g/1");
  decode_expect(b_call_token_caller, KS_FRAME_TRACE,
                "call " L_PID " m:f/0 " L_TS " 7 - c:g/1");
  decode_expect(b_call_notoken_undefined, KS_FRAME_TRACE,
                "call " L_PID " m:f/0 " L_TS " - - -");
  decode_expect(b_call_other_extra, KS_FRAME_TRACE, "call " L_PID " m:f/0 " L_TS " - - -");
  decode_expect(b_strict_ts, KS_FRAME_TRACE, "call " L_PID " m:f/0 " L_TS " - - -");
}
END_TEST

START_TEST(return_shapes) {
  decode_expect(b_return_from_big, KS_FRAME_TRACE, "return_from " L_PID " m:f/1 " L_TS " - - -");
  decode_expect(b_exception_from, KS_FRAME_TRACE,
                "exception_from " L_PID " m:f/1 " L_TS " - - -");
  decode_expect(b_return_to, KS_FRAME_TRACE, "return_to " L_PID " m:g/3 " L_TS " - - -");
  decode_expect(b_return_to_undefined, KS_FRAME_TRACE, "return_to " L_PID " - " L_TS " - - -");
}
END_TEST

START_TEST(process_shapes) {
  decode_expect(b_in, KS_FRAME_TRACE, "in " L_PID " gen_server:loop/7 " L_TS " - - -");
  decode_expect(b_out_zero, KS_FRAME_TRACE, "out_exited " L_PID " - " L_TS " - - -");
  decode_expect(b_spawn, KS_FRAME_TRACE, "spawn " L_PID " erlang:apply/2 " L_TS " - <0.86.1> -");
  decode_expect(b_exit, KS_FRAME_TRACE, "exit " L_PID " - " L_TS " - - -");
  decode_expect(b_link, KS_FRAME_TRACE, "getting_unlinked " L_PID " - - - <0.86.1> -");
  decode_expect(b_register, KS_FRAME_TRACE, "register " L_PID " - " L_TS " my_server - -");
  decode_expect(b_send_pid, KS_FRAME_TRACE, "send " L_PID " - " L_TS " - <0.86.1> -");
  decode_expect(b_send_name_node, KS_FRAME_TRACE,
                "send_to_non_existing_process " L_PID " - " L_TS " - - -");
  decode_expect(b_receive, KS_FRAME_TRACE, "receive " L_PID " - " L_TS " - - -");
  decode_expect(b_gc, KS_FRAME_TRACE, "gc_major_start " L_PID " - " L_TS " - - -");
  decode_expect(b_port_open, KS_FRAME_TRACE, "open #Port<0.77> - " L_TS " - " L_PID " -");
  decode_expect(b_seq_trace_wall, KS_FRAME_TRACE,
                "seq_trace - - 1700123456000789000 9 - -");
}
END_TEST

START_TEST(atom_encodings) {
  decode_expect(b_utf8_atoms, KS_FRAME_TRACE,
                "call " L_PID " \xe6\x97\xa5\xe6\x9c\xac:h\xc3\xa9llo/1 " L_TS " - - -");
  decode_expect(b_long_utf8_atom_ext, KS_FRAME_TRACE, "call " L_PID " mod:f/0 - - - -");
  /* Same MFA in two encodings: one id. */
  ck_assert_uint_eq(in.n_mfas, 2);
}
END_TEST

START_TEST(bad_and_unknown_frames) {
  decode_expect(b_unknown_what, KS_EUNKNOWN, NULL);
  decode_expect(b_wrong_arity, KS_EUNKNOWN, NULL);
  decode_expect(b_not_a_tuple, KS_EUNKNOWN, NULL);
  decode_expect(b_trailing_garbage, KS_EBADTERM, NULL);
  decode_expect(b_truncated_mfa, KS_EBADTERM, NULL);
}
END_TEST

START_TEST(full_table_is_a_drop) {
  ks_intern_limits lim = {1, 16, 16};
  ks_decoded d;
  ei_x_buff x;

  ks_intern_free(&in);
  ck_assert_int_eq(ks_intern_init(&in, &lim), KS_OK);
  decode_expect(b_call_arity, KS_FRAME_TRACE, NULL);
  tb_begin(&x);
  b_return_to(&x);   /* m:g/3: a second MFA */
  ck_assert_int_eq(ks_decode_frame(&in, (const unsigned char *)x.buff, (size_t)x.index, &d),
                   KS_EFULL);
  ck_assert_int_eq(d.ev.kind, KS_EV_RETURN_TO);
  ck_assert_uint_eq(d.ev.mfa, KS_NONE);
  ei_x_free(&x);
}
END_TEST

/* Every prefix of every shape is refused without reading past it. */
START_TEST(every_prefix_is_safe) {
  build_fn all[] = {b_call_token_caller, b_spawn, b_port_open, b_seq_trace_wall, b_strict_ts,
                    b_send_name_node, b_gc, b_utf8_atoms};
  for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
    ei_x_buff x;
    tb_begin(&x);
    all[k](&x);
    for (size_t cut = 0; cut < (size_t)x.index; cut++) {
      unsigned char *copy = malloc(cut + 1);
      ks_decoded d;
      memcpy(copy, x.buff, cut);
      ck_assert_int_eq(ks_decode_frame(&in, copy, cut, &d), KS_EBADTERM);
      free(copy);
    }
    ei_x_free(&x);
  }
}
END_TEST

Suite *decode_suite(void) {
  Suite *s = suite_create("decode");
  TCase *tc = tcase_create("decode");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, call_shapes);
  tcase_add_test(tc, return_shapes);
  tcase_add_test(tc, process_shapes);
  tcase_add_test(tc, atom_encodings);
  tcase_add_test(tc, bad_and_unknown_frames);
  tcase_add_test(tc, full_table_is_a_drop);
  tcase_add_test(tc, every_prefix_is_safe);
  suite_add_tcase(s, tc);
  return s;
}
