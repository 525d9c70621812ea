/* test_main.c: the sink program itself (port/main.c), run as kprof_sink runs it: through
 * pipes, a command and its reply, a ring opened by command and read by the paced timer
 * while the test writes records into it as the tracer NIF does, end of input ending
 * the program with status 0 once its replies are out; stdin and stdout as files (the
 * replays' way); its options, and status 2 with the usage for a bad one. The binary is
 * $KPROF_SINK (check.mk: erlang/priv/kprof_sink; the coverage build its own). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/ks_platform.h"
#include "ks_ring.h"
#include "test_util.h"

static const char *sink_path(void) {
  const char *p = getenv("KPROF_SINK");

  ck_assert_msg(p != NULL && access(p, X_OK) == 0,
                "KPROF_SINK must name the kprof_sink binary (got %s)", p ? p : "nothing");
  return p;
}

typedef struct child {
  pid_t pid;
  int in, out;   /* our ends: its stdin, its stdout */
} child;

/* The sink with args, stdin and stdout from in_fd / out_fd, or pipes when -1. */
static child spawn_sink(char *const args[], int in_fd, int out_fd) {
  int to[2] = {-1, -1}, from[2] = {-1, -1};
  child c = {0, -1, -1};

  if (in_fd < 0)
    ck_assert_int_eq(pipe(to), 0);
  if (out_fd < 0)
    ck_assert_int_eq(pipe(from), 0);
  c.pid = fork();
  ck_assert_int_ge(c.pid, 0);
  if (c.pid == 0) {
    dup2(in_fd < 0 ? to[0] : in_fd, STDIN_FILENO);
    dup2(out_fd < 0 ? from[1] : out_fd, STDOUT_FILENO);
    if (in_fd < 0) {
      close(to[0]);
      close(to[1]);
    }
    if (out_fd < 0) {
      close(from[0]);
      close(from[1]);
    }
    execv(sink_path(), args);
    _exit(127);
  }
  if (in_fd < 0) {
    close(to[0]);
    c.in = to[1];
  }
  if (out_fd < 0) {
    close(from[1]);
    c.out = from[0];
  }
  return c;
}

static int wait_status(pid_t pid) {
  int status;

  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status), "the sink did not exit (status %d)", status);
  return WEXITSTATUS(status);
}

static void write_all(int fd, const unsigned char *p, size_t n) {
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    ck_assert_int_gt(k, 0);
    p += k;
    n -= (size_t)k;
  }
}

static void command(int fd, long ref, const char *name, long arg) {
  ei_x_buff x;
  unsigned char *fr;
  size_t n;

  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, ref);
  if (arg >= 0) {
    ei_x_encode_tuple_header(&x, 2);
    tb_atom(&x, name);
    ei_x_encode_long(&x, arg);
  } else {
    tb_atom(&x, name);
  }
  fr = tb_framed(&x, &n);
  write_all(fd, fr, n);
  free(fr);
  ei_x_free(&x);
}

/* One {packet,4} frame from fd, its reply printed ({kprof_reply, Ref, Reply}: Reply). */
static char *read_reply(int fd) {
  unsigned char len[4], *buf;
  size_t n, got = 0;
  char *txt = NULL;
  int idx = 0, ver, ar;
  char tag[MAXATOMLEN];

  while (got < 4) {
    ssize_t k = read(fd, len + got, 4 - got);
    ck_assert_int_gt(k, 0);
    got += (size_t)k;
  }
  n = ks_be32(len);
  buf = malloc(n);
  ck_assert_ptr_nonnull(buf);
  for (got = 0; got < n;) {
    ssize_t k = read(fd, buf + got, n - got);
    ck_assert_int_gt(k, 0);
    got += (size_t)k;
  }
  ck_assert_int_eq(ei_decode_version((char *)buf, &idx, &ver), 0);
  ck_assert_int_eq(ei_decode_tuple_header((char *)buf, &idx, &ar), 0);
  ck_assert_int_eq(ei_decode_atom((char *)buf, &idx, tag), 0);
  ck_assert_str_eq(tag, "kprof_reply");
  ck_assert_int_eq(ei_skip_term((char *)buf, &idx), 0);
  ck_assert_int_ge(ei_s_print_term(&txt, (char *)buf, &idx), 0);
  free(buf);
  return txt;
}

static void expect_eof(int fd) {
  char b;

  ck_assert_int_eq(read(fd, &b, 1), 0);
}

/* The stats reply's value of key (its text), as a number. */
static long stat_of(const char *stats, const char *key) {
  char pat[64];
  const char *at;

  snprintf(pat, sizeof(pat), "%s => ", key);
  at = strstr(stats, pat);
  ck_assert_msg(at != NULL, "no %s in %s", key, stats);
  return strtol(at + strlen(pat), NULL, 10);
}

START_TEST(through_pipes) {
  char *args[] = {"kprof_sink", "--pipe-size", "65536", "--max-pids", "1000", NULL};
  child c = spawn_sink(args, -1, -1);
  char *r, name[256];
  const char *q;
  struct timespec pause = {0, 5 * 1000 * 1000};
  ks_ring_hdr *h;
  ks_ring_writer w;
  int fd, k;
  long records = 0;

  command(c.in, 1, "version", -1);
  r = read_reply(c.out);
  ck_assert_msg(strncmp(r, "{kprof_sink, ", 13) == 0, "got %s", r);
  free(r);
  /* A ring: opened by command ({ring_open, Bytes}: one ring, the shared one), written
   * here as the NIF writes, read by the timer. */
  command(c.in, 2, "ring_open", 64 << 10);
  r = read_reply(c.out);
  ck_assert_msg(strncmp(r, "{ok, #Bin<", 10) == 0, "got %s", r);
  /* The name's bytes, printed by ei as #Bin<47,107,...>. */
  for (q = r + 10, k = 0; *q != '>' && k < (int)sizeof(name) - 1; k++) {
    name[k] = (char)strtol(q, (char **)&q, 10);
    if (*q == ',')
      q++;
  }
  name[k] = 0;
  free(r);
  fd = shm_open(name, O_RDWR, 0);
  ck_assert_int_ge(fd, 0);
  h = ks_ring_map(fd, 64 << 10, 1);
  ck_assert_ptr_nonnull(h);
  close(fd);
  ck_assert_uint_eq(h->rings, 1);
  ck_assert_uint_eq(atomic_load(&ks_ring_at(h, 64 << 10, 0)->owner), KS_RING_SHARED);
  ks_ring_writer_init(&w, h, 64 << 10, 0);
  tb_ring_atom(&w, 0x1000b, "shop_db");
  tb_ring_atom(&w, 0x2000b, "query");
  /* The timer reads it without any command (stats would read it too: wait first). */
  for (k = 0; k < 2000 && atomic_load(&w.r->tail) != atomic_load(&w.r->head); k++)
    nanosleep(&pause, NULL);
  command(c.in, 3, "stats", -1);
  r = read_reply(c.out);
  records = stat_of(r, "ring_records");
  ck_assert_int_eq(records, 2);
  /* --pipe-size where the platform can set it; 0 ("unknown") where it cannot. */
#if KS_PIPE_SETSIZE
  ck_assert_int_eq(stat_of(r, "pipe_size"), 65536);
#else
  ck_assert_int_eq(stat_of(r, "pipe_size"), 0);
#endif
  free(r);
  command(c.in, 4, "ring_close", -1);
  r = read_reply(c.out);
  ck_assert_str_eq(r, "ok");
  free(r);
  ks_ring_unmap(h, 64 << 10, 1);
  shm_unlink(name);
  /* End of input: the replies still owed go out, then status 0. */
  command(c.in, 5, "ping", -1);
  close(c.in);
  r = read_reply(c.out);
  ck_assert_str_eq(r, "pong");
  free(r);
  expect_eof(c.out);
  close(c.out);
  ck_assert_int_eq(wait_status(c.pid), 0);
}
END_TEST

/* stdin and stdout files: read to the end, replies written straight to the file. */
START_TEST(through_files) {
  char in_path[] = "/tmp/kprof-main-in-XXXXXX", out_path[] = "/tmp/kprof-main-out-XXXXXX";
  char *args[] = {"kprof_sink", "--max-frame", "4096", "--read-buf", "128", NULL};
  int in = mkstemp(in_path), out = mkstemp(out_path);
  child c;
  char *r;

  ck_assert_int_ge(in, 0);
  ck_assert_int_ge(out, 0);
  command(in, 1, "ping", -1);
  command(in, 2, "version", -1);
  ck_assert_int_eq(lseek(in, 0, SEEK_SET), 0);
  c = spawn_sink(args, in, out);
  ck_assert_int_eq(wait_status(c.pid), 0);
  ck_assert_int_eq(lseek(out, 0, SEEK_SET), 0);
  r = read_reply(out);
  ck_assert_str_eq(r, "pong");
  free(r);
  r = read_reply(out);
  ck_assert_msg(strncmp(r, "{kprof_sink, ", 13) == 0, "got %s", r);
  free(r);
  expect_eof(out);
  close(in);
  close(out);
  unlink(in_path);
  unlink(out_path);
}
END_TEST

/* Files in, a pipe out: the replies are queued on the pipe and written before exit. */
START_TEST(file_in_pipe_out) {
  char in_path[] = "/tmp/kprof-main-in-XXXXXX";
  char *args[] = {"kprof_sink", NULL};
  int in = mkstemp(in_path);
  child c;
  char *r;

  ck_assert_int_ge(in, 0);
  command(in, 1, "ping", -1);
  ck_assert_int_eq(lseek(in, 0, SEEK_SET), 0);
  c = spawn_sink(args, in, -1);
  r = read_reply(c.out);
  ck_assert_str_eq(r, "pong");
  free(r);
  expect_eof(c.out);
  close(c.out);
  ck_assert_int_eq(wait_status(c.pid), 0);
  close(in);
  unlink(in_path);
}
END_TEST

START_TEST(bad_options) {
  char *unknown[] = {"kprof_sink", "--nope", "1", NULL};
  char *missing[] = {"kprof_sink", "--max-frame", NULL};
  char *not_number[] = {"kprof_sink", "--read-buf", "12x", NULL};
  char *no_pids[] = {"kprof_sink", "--max-pids", "0", NULL};
  char *too_many[] = {"kprof_sink", "--max-pids", "2000000000", NULL};
  char **cases[] = {unknown, missing, not_number, no_pids, too_many};
  int devnull = open("/dev/null", O_RDWR), k;

  ck_assert_int_ge(devnull, 0);
  for (k = 0; k < 5; k++) {
    child c = spawn_sink(cases[k], devnull, devnull);
    ck_assert_msg(wait_status(c.pid) == 2, "%s %s: not the usage's status", cases[k][1],
                  cases[k][2] ? cases[k][2] : "");
  }
  close(devnull);
}
END_TEST

Suite *main_suite(void) {
  Suite *s = suite_create("main");
  TCase *tc = tcase_create("main");

  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, through_pipes);
  tcase_add_test(tc, through_files);
  tcase_add_test(tc, file_in_pipe_out);
  tcase_add_test(tc, bad_options);
  suite_add_tcase(s, tc);
  return s;
}
