/* test_out_dir.c: the directory a capture's files go into (port/core/out_dir.c):
 * missing parts made 0700, a symlink, a file, a directory others can write to
 * (sticky or not), a symlink above it, a relative path, refused or taken as
 * port/core/ks_out_dir.h says; as root, directories and links of another user
 * (uid 65534) and a group that is not ours. Then the files themselves: mode
 * 0600, and flame_dir / flame_write refusing through the sink with the reason.
 * (erlang/test/kprof_security_tests.erl does the same with a real second user.) */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/ks_out_dir.h"
#include "test_util.h"

#define OTHER 65534   /* nobody: a uid that is not ours, as root */

static char top[64];

static void setup(void) {
  tb_tmpdir(top, sizeof(top), "outdir");
}

static void teardown(void) {
  tb_tmpdir_remove(top);
}

static const char *in_top(const char *rel) {
  static char path[4][512];
  static int k;

  k = (k + 1) % 4;
  snprintf(path[k], sizeof(path[k]), "%s/%s", top, rel);
  return path[k];
}

/* Opens dir (create set) and expects it taken. */
static void expect_ok(const char *dir) {
  ks_out_dir r;
  int fd = ks_out_dir_open(dir, 1, &r);

  ck_assert_msg(fd >= 0, "%s refused: why %d at %s (errno %d, uid %d, mode %o)", dir, r.why,
                r.path, r.err, (int)r.uid, (unsigned)r.mode);
  close(fd);
}

/* Expects dir refused for why, at the component at. */
static ks_out_dir expect_refused(const char *dir, int why, const char *at) {
  ks_out_dir r;
  int fd = ks_out_dir_open(dir, 1, &r);

  ck_assert_msg(fd < 0, "%s taken", dir);
  ck_assert_msg(r.why == why, "%s: why %d, want %d (at %s, errno %d)", dir, r.why, why, r.path,
                r.err);
  ck_assert_str_eq(r.path, at);
  return r;
}

static unsigned mode_of(const char *path) {
  struct stat st;

  ck_assert_int_eq(lstat(path, &st), 0);
  return (unsigned)st.st_mode & 07777;
}

START_TEST(made_private) {
  mode_t old = umask(0);

  expect_ok(in_top("a/b/c"));
  umask(old);
  ck_assert_uint_eq(mode_of(in_top("a")), 0700);
  ck_assert_uint_eq(mode_of(in_top("a/b/c")), 0700);
  /* There already, with the path written in odd ways. */
  expect_ok(in_top("a//b/./c/"));
  expect_ok(in_top("a/b/../b/c"));
}
END_TEST

START_TEST(symlink_and_file) {
  ck_assert_int_eq(mkdir(in_top("real"), 0700), 0);
  ck_assert_int_eq(symlink(in_top("real"), in_top("link")), 0);
  expect_refused(in_top("link"), KS_DIR_SYMLINK, in_top("link"));
  /* Our own symlink above the directory is followed. */
  expect_ok(in_top("link/sub"));
  ck_assert_int_eq(access(in_top("real/sub"), F_OK), 0);
  ck_assert_int_eq(close(open(in_top("file"), O_CREAT | O_WRONLY, 0600)), 0);
  expect_refused(in_top("file"), KS_DIR_NOT_DIR, in_top("file"));
  expect_refused(in_top("file/below"), KS_DIR_NOT_DIR, in_top("file"));
  expect_refused("relative/dir", KS_DIR_RELATIVE, "relative/dir");
}
END_TEST

START_TEST(writable_by_others) {
  ks_out_dir r;

  ck_assert_int_eq(mkdir(in_top("open"), 0700), 0);
  ck_assert_int_eq(chmod(in_top("open"), 0777), 0);
  r = expect_refused(in_top("open"), KS_DIR_WRITABLE, in_top("open"));
  ck_assert_uint_eq(r.mode, 0777);
  /* Below it too: anybody could rename our directory away. */
  expect_refused(in_top("open/mine"), KS_DIR_WRITABLE, in_top("open"));
  /* Sticky and ours: taken, as /tmp is above every test here. */
  ck_assert_int_eq(chmod(in_top("open"), 01777), 0);
  expect_ok(in_top("open"));
  expect_ok(in_top("open/mine"));
  /* Our own group may write. */
  ck_assert_int_eq(mkdir(in_top("group"), 0770), 0);
  ck_assert_int_eq(chmod(in_top("group"), 0770), 0);
  ck_assert_int_eq(chown(in_top("group"), (uid_t)-1, getegid()), 0);
  expect_ok(in_top("group"));
}
END_TEST

/* A symlink above the directory, ours: followed, and the directory it leads to
 * checked. The files land in its target. */
START_TEST(symlink_above) {
  ck_assert_int_eq(mkdir(in_top("target"), 0700), 0);
  ck_assert_int_eq(symlink("target", in_top("rel")), 0);
  ck_assert_int_eq(symlink(in_top("target"), in_top("abs")), 0);
  expect_ok(in_top("rel/x"));
  expect_ok(in_top("abs/y"));
  ck_assert_int_eq(access(in_top("target/x"), F_OK), 0);
  ck_assert_int_eq(access(in_top("target/y"), F_OK), 0);
  ck_assert_int_eq(chmod(in_top("target"), 0777), 0);
  expect_refused(in_top("rel/x"), KS_DIR_WRITABLE, in_top("rel"));
  ck_assert_int_eq(symlink("loop", in_top("loop")), 0);
  expect_refused(in_top("loop/x"), KS_DIR_ERRNO, in_top("loop"));
}
END_TEST

/* As root: what another user owns is refused, with its uid. */
START_TEST(another_user) {
  ks_out_dir r;

  if (geteuid() != 0) {
    printf("another_user: SKIPPED: needs root to give a directory to uid %d\n", OTHER);
    return;
  }
  ck_assert_int_eq(mkdir(in_top("theirs"), 0755), 0);
  ck_assert_int_eq(chown(in_top("theirs"), OTHER, OTHER), 0);
  r = expect_refused(in_top("theirs"), KS_DIR_OWNER, in_top("theirs"));
  ck_assert_int_eq((int)r.uid, OTHER);
  /* Created below theirs: the parent could rename it. */
  expect_refused(in_top("theirs/mine"), KS_DIR_OWNER, in_top("theirs"));
  ck_assert_int_ne(access(in_top("theirs/mine"), F_OK), 0);
  /* Sticky but theirs: still refused as the output directory. */
  ck_assert_int_eq(chmod(in_top("theirs"), 01777), 0);
  expect_refused(in_top("theirs"), KS_DIR_OWNER, in_top("theirs"));
  /* Their symlink to our directory, above it or as it. */
  ck_assert_int_eq(mkdir(in_top("ours"), 0700), 0);
  ck_assert_int_eq(symlink(in_top("ours"), in_top("their-link")), 0);
  ck_assert_int_eq(lchown(in_top("their-link"), OTHER, OTHER), 0);
  expect_refused(in_top("their-link/x"), KS_DIR_OWNER, in_top("their-link"));
  expect_refused(in_top("their-link"), KS_DIR_SYMLINK, in_top("their-link"));
  /* A group that is not ours may not write. */
  ck_assert_int_eq(mkdir(in_top("grp"), 0770), 0);
  ck_assert_int_eq(chmod(in_top("grp"), 0770), 0);
  ck_assert_int_eq(chown(in_top("grp"), 0, OTHER), 0);
  expect_refused(in_top("grp"), KS_DIR_WRITABLE, in_top("grp"));
}
END_TEST

/* Through the sink: {flame_dir, Dir} and a capture's flame_write. */
static ks_sink sink;
static tb_out outb;

static void dir_cmd(long ref, const char *dir, size_t len) {
  ei_x_buff x;

  tb_cmd_begin(&x, ref, "flame_dir", 2);
  ei_x_encode_binary(&x, dir, (long)len);
  tb_feed(&sink, &x);
}

static void expect_reply(int k, const char *want) {
  char *r = tb_out_reply(&outb, k);

  ck_assert_msg(strcmp(r, want) == 0, "reply %d: %s, want %s", k, r, want);
  free(r);
}

/* A one-process capture of 1 ms written as folded and svg into dir. */
static void capture_into(long ref, long id, const char *dir) {
  ei_x_buff x;

  tb_cmd_begin(&x, ref, "flame_start", 3);
  ei_x_encode_long(&x, id);
  ei_x_encode_empty_list(&x);
  tb_feed(&sink, &x);
  tb_flame_pids(&sink, ref + 1, id, 5, 0);
  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 6);
  tb_atom(&x, "trace_ts");
  tb_pid(&x, "n@h", 5, 0, 1);
  tb_atom(&x, "call");
  tb_mfa(&x, "m", "f", 0);
  tb_atom(&x, "undefined");
  ei_x_encode_longlong(&x, 1000000);
  tb_feed(&sink, &x);
  tb_flame_write(&sink, ref + 2, id, dir, "cap");
}

START_TEST(through_the_sink) {
  char nul[64];
  int n;

  tb_sink_open(&sink, NULL, &outb);
  dir_cmd(1, in_top("made/here"), strlen(in_top("made/here")));
  ck_assert_int_eq(chmod(top, 0777), 0);
  dir_cmd(2, in_top("made/here"), strlen(in_top("made/here")));
  ck_assert_int_eq(chmod(top, 0700), 0);
  ck_assert_int_eq(symlink(in_top("made"), in_top("link")), 0);
  dir_cmd(3, in_top("link"), strlen(in_top("link")));
  /* A NUL inside would name another directory than asked. */
  memset(nul, 0, sizeof(nul));
  n = snprintf(nul, sizeof(nul) - 8, "%s", in_top("made"));
  dir_cmd(4, nul, (size_t)n + 4);
  capture_into(10, 7, in_top("link"));
  capture_into(20, 8, in_top("made/here"));
  ck_assert_int_eq(outb.frames, 10);
  expect_reply(0, "ok");
  {
    /* ei prints a binary as its bytes: the path is checked by out_dir's tests above. */
    char *r = tb_out_reply(&outb, 1);
    ck_assert_ptr_nonnull(strstr(r, "unsafe_directory"));
    ck_assert_ptr_nonnull(strstr(r, "{writable, \"0777\"}"));
    free(r);
    r = tb_out_reply(&outb, 2);
    ck_assert_msg(strstr(r, "unsafe_directory") != NULL && strstr(r, ", symlink}") != NULL,
                  "got %s", r);
    free(r);
  }
  expect_reply(3, "{error, badarg}");
  {
    char *r = tb_out_reply(&outb, 6);   /* flame_write into the symlink */
    ck_assert_msg(strstr(r, "{error, {unsafe_directory, ") == r && strstr(r, ", symlink}}"),
                  "got %s", r);
    free(r);
    r = tb_out_reply(&outb, 9);
    ck_assert_msg(strncmp(r, "{ok, [#Bin<", 11) == 0, "got %s", r);
    free(r);
  }
  /* Private: only the owner reads a profile. */
  ck_assert_uint_eq(mode_of(in_top("made/here/cap.folded")), 0600);
  ck_assert_uint_eq(mode_of(in_top("made/here/cap.svg")), 0600);
  ck_assert_int_eq(sink.flame.active, 0);
  tb_sink_close(&sink, &outb);
}
END_TEST

Suite *out_dir_suite(void) {
  Suite *s = suite_create("out_dir");
  TCase *tc = tcase_create("out_dir");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, made_private);
  tcase_add_test(tc, symlink_and_file);
  tcase_add_test(tc, writable_by_others);
  tcase_add_test(tc, symlink_above);
  tcase_add_test(tc, another_user);
  tcase_add_test(tc, through_the_sink);
  suite_add_tcase(s, tc);
  return s;
}
