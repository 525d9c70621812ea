/* test_replay.c: streams the real VM wrote (test/data/NAME.bin) decoded into exactly the
 * lines the recorder derived from binary_to_term (test/data/NAME.txt). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

typedef struct replay {
  ks_intern in;
  char *expect;         /* the .txt, lines cut in place */
  char *next;
  int line;
  int mismatches;
  int fast;             /* frames the fast path answered too */
  const char *name;
  uint64_t kinds[KS_EV__COUNT];
} replay;

static char *next_line(char **p) {
  char *s = *p, *nl;

  if (s == NULL || *s == 0)
    return NULL;
  nl = strchr(s, '\n');
  if (nl != NULL) {
    *nl = 0;
    *p = nl + 1;
  } else {
    *p = s + strlen(s);
  }
  return s;
}

/* Where the fast path answers, the general decoder answers the same, field for field. */
static void same_as_general(replay *r, const unsigned char *f, size_t len, const ks_decoded *fd) {
  ks_decoded g;

  ck_assert_int_eq(ks_decode_frame_general(&r->in, f, len, &g), KS_FRAME_TRACE);
  ck_assert_msg(memcmp(&g.ev, &fd->ev, sizeof(g.ev)) == 0,
                "%s frame %d: the fast path and the general decoder disagree", r->name, r->line);
  ck_assert(g.label.p == NULL && g.payload.p == NULL && fd->label.p == NULL &&
            fd->payload.p == NULL);
  r->fast++;
}

static void on_frame(void *ctx, const unsigned char *f, size_t len) {
  replay *r = ctx;
  ks_decoded d;
  char got[2048];
  const char *want;
  int rc = ks_decode_frame_fast(&r->in, f, len, &d);

  if (rc != 0)
    same_as_general(r, f, len, &d);
  else
    rc = ks_decode_frame_general(&r->in, f, len, &d);

  r->line++;
  event_line(&r->in, rc, &d, got, sizeof(got));
  if (rc == KS_FRAME_TRACE)
    r->kinds[d.ev.kind]++;
  want = next_line(&r->next);
  if (want == NULL || strcmp(want, got) != 0) {
    if (r->mismatches++ < 5)
      fprintf(stderr, "%s line %d:\n  want: %s\n  got:  %s\n", r->name, r->line,
              want ? want : "(end of expectations)", got);
  }
}

static int replay_one(const char *dir, const char *bin_name, unsigned seed, int *fast) {
  char path[1024];
  size_t blen, tlen, off = 0;
  unsigned char *bin;
  replay r;
  ks_framer fr;

  memset(&r, 0, sizeof(r));
  r.name = bin_name;
  snprintf(path, sizeof(path), "%s/%s", dir, bin_name);
  bin = read_file(path, &blen);
  ck_assert_msg(bin != NULL, "cannot read %s", path);
  snprintf(path + strlen(path) - 4, 5, ".txt");
  r.expect = (char *)read_file(path, &tlen);
  ck_assert_msg(r.expect != NULL, "no expectations %s", path);
  r.next = r.expect;
  ck_assert_int_eq(ks_intern_init(&r.in, NULL), KS_OK);
  ck_assert_int_eq(ks_framer_init(&fr, 256, 64u << 20), KS_OK);
  /* Random read sizes: the same stream cut differently must decode the same. */
  srand(seed);
  while (off < blen) {
    size_t k = seed == 0 ? blen : (size_t)(rand() % 4000) + 1;
    if (k > blen - off)
      k = blen - off;
    ks_framer_feed(&fr, bin + off, k, on_frame, &r);
    off += k;
  }
  ck_assert_msg(r.mismatches == 0, "%s: %d lines differ", bin_name, r.mismatches);
  ck_assert_msg(next_line(&r.next) == NULL, "%s: fewer frames than expectations", bin_name);
  ck_assert_uint_eq(ks_framer_pending(&fr), 0);
  ck_assert_int_gt(r.line, 0);
  ks_framer_free(&fr);
  ks_intern_free(&r.in);
  free(bin);
  free(r.expect);
  /* calls, returns and return_tos with monotonic timestamps: the fast path's own ground */
  if (strcmp(bin_name, "calls_ts.bin") == 0)
    ck_assert_msg(r.fast * 2 > r.line, "the fast path answered %d of %d calls_ts frames", r.fast,
                  r.line);
  *fast += r.fast;
  return r.line;
}

START_TEST(recorded_streams_decode_as_binary_to_term_says) {
  const char *dir = test_data_dir();
  DIR *dh = opendir(dir);
  struct dirent *e;
  int files = 0, frames = 0, fast = 0;

  ck_assert_msg(dh != NULL, "no test data directory %s", dir);
  while ((e = readdir(dh)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 4, ".bin") != 0)
      continue;
    frames += replay_one(dir, e->d_name, 0, &fast);
    frames += replay_one(dir, e->d_name, 12345, &fast);
    files++;
  }
  closedir(dh);
  /* The recorder writes one stream per scenario (test/data/README.md). */
  ck_assert_int_ge(files, 8);
  fprintf(stderr, "replayed %d recorded streams, %d frames (%d by the fast path, the same as "
          "the general decoder's)\n", files, frames / 2, fast / 2);
}
END_TEST

Suite *replay_suite(void) {
  Suite *s = suite_create("replay");
  TCase *tc = tcase_create("replay");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, recorded_streams_decode_as_binary_to_term_says);
  suite_add_tcase(s, tc);
  return s;
}
