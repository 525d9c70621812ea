/* test_frame.c: {packet,4} framing under every way a stream can be cut. */
#include <stdlib.h>

#include "test_util.h"

typedef struct seen {
  int n;
  size_t lens[64];
  unsigned char first[64];
} seen;

static void on_frame(void *ctx, const unsigned char *f, size_t len) {
  seen *s = ctx;

  ck_assert_int_lt(s->n, 64);
  s->lens[s->n] = len;
  s->first[s->n] = len ? f[0] : 0;
  /* Every byte of a frame is the frame's own fill byte (one check: Check's
   * asserts each record a mark point, far too slow per byte under valgrind). */
  size_t i = 0;
  while (i < len && f[i] == f[0])
    i++;
  ck_assert_uint_eq(i, len);
  s->n++;
}

/* Frames of the given lengths, frame k filled with byte 'a' + k. */
static unsigned char *stream(const size_t *lens, int n, size_t *total) {
  size_t t = 0, off = 0;
  unsigned char *b;
  int k;

  for (k = 0; k < n; k++)
    t += 4 + lens[k];
  b = malloc(t ? t : 1);
  for (k = 0; k < n; k++) {
    ks_put_be32(b + off, (uint32_t)lens[k]);
    memset(b + off + 4, 'a' + k, lens[k]);
    off += 4 + lens[k];
  }
  *total = t;
  return b;
}

static const size_t LENS[] = {5, 1, 300, 70000, 2, 4096};
#define NLENS (int)(sizeof(LENS) / sizeof(LENS[0]))

static void check_all_seen(const seen *s, const ks_framer *f) {
  ck_assert_int_eq(s->n, NLENS);
  for (int k = 0; k < NLENS; k++) {
    ck_assert_uint_eq(s->lens[k], LENS[k]);
    ck_assert_uint_eq(s->first[k], 'a' + k);
  }
  ck_assert_uint_eq(f->frames, NLENS);
  ck_assert_uint_eq(ks_framer_pending(f), 0);
}

START_TEST(merged_frames_in_one_read) {
  ks_framer f;
  seen s = {0};
  size_t total;
  unsigned char *b = stream(LENS, NLENS, &total);

  ck_assert_int_eq(ks_framer_init(&f, 1 << 20, 1 << 20), KS_OK);
  ck_assert_int_eq(ks_framer_feed(&f, b, total, on_frame, &s), KS_OK);
  check_all_seen(&s, &f);
  ck_assert_uint_eq(f.bytes, total);
  ks_framer_free(&f);
  free(b);
}
END_TEST

/* Every chunk size from 1 byte up: frames and length prefixes cut everywhere. */
START_TEST(split_at_every_size) {
  size_t total, chunk = (size_t)_i + 1;
  unsigned char *b = stream(LENS, NLENS, &total);
  ks_framer f;
  seen s = {0};

  ck_assert_int_eq(ks_framer_init(&f, 64, 1 << 20), KS_OK);
  for (size_t off = 0; off < total; off += chunk) {
    size_t k = total - off < chunk ? total - off : chunk;
    if (ks_framer_feed(&f, b + off, k, on_frame, &s) != KS_OK)
      ck_abort_msg("feed failed at %zu", off);
  }
  check_all_seen(&s, &f);
  /* Back to the small buffer once the 70000-byte frame is gone. */
  {
    unsigned char *p;
    size_t n;
    ck_assert_int_eq(ks_framer_space(&f, 16, &p, &n), KS_OK);
    ck_assert_uint_le(f.cap, 64);
  }
  ks_framer_free(&f);
  free(b);
}
END_TEST

START_TEST(zero_length_frames_are_counted_not_delivered) {
  const size_t lens[] = {0, 3, 0};
  size_t total;
  unsigned char *b = stream(lens, 3, &total);
  ks_framer f;
  seen s = {0};

  ck_assert_int_eq(ks_framer_init(&f, 64, 1024), KS_OK);
  ks_framer_feed(&f, b, total, on_frame, &s);
  ck_assert_int_eq(s.n, 1);
  ck_assert_uint_eq(s.lens[0], 3);
  ck_assert_uint_eq(f.empty, 2);
  ck_assert_uint_eq(f.frames, 3);
  ks_framer_free(&f);
  free(b);
}
END_TEST

/* An oversized frame is skipped as it streams by; the buffer never grows for it. */
START_TEST(oversized_frame_is_skipped_without_buffering) {
  const size_t lens[] = {10, 100000, 7};
  size_t total;
  unsigned char *b = stream(lens, 3, &total);
  ks_framer f;
  seen s = {0};

  ck_assert_int_eq(ks_framer_init(&f, 256, 1000), KS_OK);
  for (size_t off = 0; off < total; off += 100)
    ks_framer_feed(&f, b + off, total - off < 100 ? total - off : 100, on_frame, &s);
  ck_assert_int_eq(s.n, 2);
  ck_assert_uint_eq(s.lens[0], 10);
  ck_assert_uint_eq(s.lens[1], 7);
  ck_assert_uint_eq(s.first[1], 'c');
  ck_assert_uint_eq(f.oversized, 1);
  ck_assert_uint_le(f.cap, 1024);
  ks_framer_free(&f);
  free(b);
}
END_TEST

/* 0xFFFFFFFF as a length: no 4 GB allocation, the rest of the input is discarded. */
START_TEST(absurd_length_prefix) {
  unsigned char b[16] = {0xff, 0xff, 0xff, 0xff, 1, 2, 3};
  ks_framer f;
  seen s = {0};

  ck_assert_int_eq(ks_framer_init(&f, 64, 64u << 20), KS_OK);
  ks_framer_feed(&f, b, sizeof(b), on_frame, &s);
  ck_assert_int_eq(s.n, 0);
  ck_assert_uint_eq(f.oversized, 1);
  ck_assert_uint_eq(f.skip, 0xffffffffu - 12);
  ck_assert_uint_le(f.cap, 64);
  ks_framer_free(&f);
}
END_TEST

START_TEST(partial_frame_is_pending_at_eof) {
  unsigned char b[] = {0, 0, 0, 9, 1, 2};
  ks_framer f;
  seen s = {0};

  ck_assert_int_eq(ks_framer_init(&f, 64, 1024), KS_OK);
  ks_framer_feed(&f, b, sizeof(b), on_frame, &s);
  ck_assert_int_eq(s.n, 0);
  ck_assert_uint_eq(ks_framer_pending(&f), 6);
  ks_framer_free(&f);
}
END_TEST

/* The read path: space() then commit(), as libuv's alloc and read callbacks do. */
START_TEST(space_and_commit) {
  size_t total;
  unsigned char *b = stream(LENS, NLENS, &total), *p;
  size_t off = 0, n;
  ks_framer f;
  seen s = {0};

  ck_assert_int_eq(ks_framer_init(&f, 128, 1 << 20), KS_OK);
  while (off < total) {
    ck_assert_int_eq(ks_framer_space(&f, 32, &p, &n), KS_OK);
    ck_assert_uint_ge(n, 32);
    n = n < total - off ? n : total - off;
    n = n > 333 ? 333 : n;
    memcpy(p, b + off, n);
    ks_framer_commit(&f, n, on_frame, &s);
    off += n;
  }
  check_all_seen(&s, &f);
  ks_framer_free(&f);
  free(b);
}
END_TEST

Suite *frame_suite(void) {
  Suite *s = suite_create("frame");
  TCase *tc = tcase_create("frame");

  tcase_add_test(tc, merged_frames_in_one_read);
  tcase_add_loop_test(tc, split_at_every_size, 0, 40);
  tcase_add_test(tc, zero_length_frames_are_counted_not_delivered);
  tcase_add_test(tc, oversized_frame_is_skipped_without_buffering);
  tcase_add_test(tc, absurd_length_prefix);
  tcase_add_test(tc, partial_frame_is_pending_at_eof);
  tcase_add_test(tc, space_and_commit);
  suite_add_tcase(s, tc);
  return s;
}
