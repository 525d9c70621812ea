/* test_record.c: a flame capture recorded to a file (port/record/record_write.c) and replayed
 * (record_read.c, replay.c): the replay's files are byte-identical to the live capture's
 * (every format, flow and caller rules, children, names, the correction measured in the
 * capture); the bound with and without rotation (what is cut is counted); the files
 * refused at the start; a write that fails mid-capture (RLIMIT_FSIZE, in a child) removes
 * the recording and the capture still writes its files; truncated and corrupt files give
 * an error and the files of what was read; the command line (kprof_sink --replay). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "record/ks_record.h"

static ks_intern in;
static ks_flame fl;
static char dir[256];
static uint32_t pids[4];
static uint32_t fns[24];

static void setup(void) {
  char name[16];
  int k;

  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  ks_flame_init(&fl);
  snprintf(dir, sizeof(dir), "/tmp/kprof-rec-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  for (k = 0; k < 4; k++)
    pids[k] = tb_intern_pid(&in, 100 + (unsigned)k);
  for (k = 0; k < 24; k++) {
    snprintf(name, sizeof(name), "f%d", k);
    fns[k] = tb_intern_mfa(&in, k < 12 ? "alpha" : "beta", name, (uint32_t)k % 3);
  }
}

static void teardown(void) {
  char cmd[300];

  ks_flame_free(&fl);
  ks_intern_free(&in);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}

static void event(int kind, uint32_t pid, int64_t ts, uint32_t mfa, uint32_t other) {
  ks_decoded d;

  ks_decoded_clear(&d);
  d.ev.kind = (uint8_t)kind;
  d.ev.flags = KS_EVF_TS;
  d.ev.pid = pid;
  d.ev.ts = ts;
  d.ev.mfa = mfa;
  d.ev.other = other;
  ks_flame_event(&fl, &in, &d);
}

/* n events of a call tree per process, deterministic, with scheduling, GC and a
 * spawned child (pids[2], followed when the capture has children). */
static int64_t workload(int n, int64_t ts) {
  uint32_t seed = 12345, depth[4] = {0}, p;
  int k;

  event(KS_EV_SPAWNED, pids[2], ts, fns[3], pids[0]);
  for (k = 0; k < n; k++) {
    seed = seed * 1103515245u + 12345u;
    p = (seed >> 8) % 3;
    ts += 200 + (seed >> 16) % 900;
    if ((seed >> 4) % 23 == 0) {
      event(KS_EV_OUT, pids[p], ts, fns[p], KS_NONE);
      event(KS_EV_IN, pids[p], ts + 5000, fns[p], KS_NONE);
      ts += 5000;
    } else if ((seed >> 4) % 29 == 0) {
      event(KS_EV_GC_MINOR_START, pids[p], ts, KS_NONE, KS_NONE);
      event(KS_EV_GC_MINOR_END, pids[p], ts + 700, KS_NONE, KS_NONE);
      ts += 700;
    } else if (depth[p] < 8 && (seed >> 12) % 3 != 0) {
      event(KS_EV_CALL, pids[p], ts, fns[(seed >> 20) % 24], KS_NONE);
      depth[p]++;
    } else if (depth[p] > 0) {
      event(KS_EV_RETURN_TO, pids[p], ts, fns[(seed >> 18) % 24], KS_NONE);
      depth[p]--;
    }
  }
  return ts;
}

static ks_fcap *start_opts(const ks_fopts *o, const char *rec) {
  char path[512];
  ks_record_refusal why;
  int slot = ks_flame_start(&fl, 1, o);
  ks_fcap *c;

  ck_assert_int_ge(slot, 0);
  c = &fl.cap[slot];
  if (rec != NULL) {
    snprintf(path, sizeof(path), "%s/%s", dir, rec);
    ck_assert_int_eq(ks_record_capture(&fl, c, &in, path, &why), KS_OK);
  }
  ck_assert_int_eq(ks_flame_add_pid(&fl, c, pids[0], "main", 4), KS_OK);
  ks_flame_set_call(c, pids[0], "app:main/0", 10);
  ck_assert_int_eq(ks_flame_add_pid(&fl, c, pids[1], NULL, 0), KS_OK);
  return c;
}

static ks_fcap *start_rec(const char *rec, uint64_t max_bytes, uint32_t rotate) {
  ks_fopts o;

  ks_fopts_default(&o);
  o.children = 1;
  o.correct_ns = 150;
  o.top = 10;
  o.max_record_bytes = max_bytes;
  o.record_rotate = rotate;
  return start_opts(&o, rec);
}

/* The capture's files into dir/sub (made), base `cap', every format: the reply's text. */
static char *write_files(const ks_intern *tin, ks_fcap *c, const char *sub, ks_replay *rp) {
  ei_x_buff x;
  ks_fdest d;
  char *text = NULL;
  int idx = 0;

  memset(&d, 0, sizeof(d));
  snprintf(d.dir, sizeof(d.dir), "%s/%s", dir, sub);
  snprintf(d.base, sizeof(d.base), "cap");
  d.fmts = ks_write_format_bit(NULL);
  ck_assert_int_eq(ei_x_new(&x), 0);
  if (rp != NULL)
    ck_assert_int_eq(ks_replay_write(rp, &d, &x), 0);
  else
    ck_assert_int_eq(ks_flame_write_files(tin, c, &d, &x, NULL), 0);
  ck_assert_int_eq(ei_s_print_term(&text, x.buff, &idx) > 0, 1);
  ei_x_free(&x);
  return text;
}

static unsigned char *file_at(const char *sub, const char *name, size_t *n) {
  char path[512];

  snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
  return read_file(path, n);
}

/* Every format's file of sub a and sub b, byte for byte. */
static void same_files(const char *a, const char *b) {
  static const char *const names[] = {"cap.folded", "cap.perf", "cap.speedscope.json",
                                      "cap.svg", "callgrind.out.cap", "cap.meta.json"};
  size_t k, na, nb;

  for (k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
    unsigned char *fa = file_at(a, names[k], &na), *fb = file_at(b, names[k], &nb);
    ck_assert_msg(fa != NULL && fb != NULL, "%s missing", names[k]);
    ck_assert_msg(na == nb && memcmp(fa, fb, na) == 0, "%s differs (%zu, %zu bytes)", names[k],
                  na, nb);
    ck_assert_uint_gt(na, 100);
    free(fa);
    free(fb);
  }
}

static void rec_path(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", dir, name);
}

static void status(const ks_fcap *c, ks_record_status *st) {
  ck_assert_ptr_nonnull(ks_record_of(c));
  ks_record_get_status(ks_record_of(c), st);
}

/* Live files and the replay's, byte for byte; the replay's counts are the recording's. */
static void check_identical(ks_fcap *c, uint64_t *events_out) {
  const char *paths[1];
  char path[300], *live, *rep;
  ks_record_status st;
  ks_replay rp;
  ks_replay_opts ro;

  ks_flame_finish(&fl, c, 1, 1000000000000LL);
  live = write_files(&in, c, "live", NULL);
  ck_assert_ptr_nonnull(strstr(live, "record => #{"));
  status(c, &st);
  ck_assert_int_eq(st.err, 0);
  ck_assert_uint_eq(st.cut_events, 0);
  ck_assert_uint_gt(st.events, 1000);
  rec_path(path, sizeof(path), "r.rec");
  paths[0] = path;
  ks_replay_default_opts(&ro);
  ck_assert_int_eq(ks_replay_files(&rp, paths, 1, &ro), KS_OK);
  ck_assert_int_eq(rp.err, 0);
  ck_assert_int_eq(rp.truncated, 0);
  ck_assert_uint_eq(rp.events, st.events);
  rep = write_files(NULL, NULL, "replay", &rp);
  same_files("live", "replay");
  ck_assert_ptr_nonnull(strstr(rep, "replay => #{"));
  *events_out = st.events;
  free(live);
  free(rep);
  ks_replay_free(&rp);
}

START_TEST(replay_is_identical) {
  ks_fcap *c = start_rec("r.rec", (uint64_t)1 << 30, 0);
  uint64_t events;
  struct stat sb;
  char path[300];

  workload(60000, 1000000);
  check_identical(c, &events);
  rec_path(path, sizeof(path), "r.rec");
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_int_eq(sb.st_mode & 0777, 0600);
  /* the aim of issue 25: at most 4 bytes an event (this workload's times are random) */
  ck_assert_msg((uint64_t)sb.st_size < events * 4, "%lld bytes for %llu events",
                (long long)sb.st_size, (unsigned long long)events);
}
END_TEST

/* record_level: zstd's level; a higher one makes a file no bigger that
 * replays to the same files. */
START_TEST(record_level_sizes) {
  ks_fcap *c = start_rec("r.rec", (uint64_t)1 << 30, 0);
  ks_fopts o;
  uint64_t events;
  struct stat fast, small;
  char path[300], path9[300];
  const char *paths[1] = {path9};
  ks_replay rp;
  ks_replay_opts ro;

  ck_assert_uint_eq(c->cp.o.record_level, 1);   /* the table's default */
  workload(60000, 1000000);
  check_identical(c, &events);
  ks_flame_drop(&fl, c);
  ks_fopts_default(&o);
  o.children = 1;
  o.correct_ns = 150;
  o.top = 10;
  o.record_level = 9;
  c = start_opts(&o, "r9.rec");
  workload(60000, 1000000);
  ks_flame_finish(&fl, c, 1, 1000000000000LL);
  rec_path(path, sizeof(path), "r.rec");
  rec_path(path9, sizeof(path9), "r9.rec");
  ck_assert_int_eq(stat(path, &fast), 0);
  ck_assert_int_eq(stat(path9, &small), 0);
  ck_assert_msg(small.st_size <= fast.st_size, "level 9: %lld bytes, level 1: %lld",
                (long long)small.st_size, (long long)fast.st_size);
  ks_replay_default_opts(&ro);
  ck_assert_int_eq(ks_replay_files(&rp, paths, 1, &ro), KS_OK);
  ck_assert_int_eq(rp.err, 0);
  ck_assert_uint_eq(rp.events, events);
  ks_replay_free(&rp);
}
END_TEST

/* The search rules (calls with {caller}), a trigger held until flame_arm. */
START_TEST(replay_trigger_callers) {
  static const unsigned char payload[] = {104, 2, 119, 11, 'k', 'p', 'r', 'o', 'f', '_', 'f',
                                          'l', 'a', 'm', 'e', 97, 1};
  ks_fopts o;
  ks_fcap *c;
  ks_decoded d;
  uint64_t events;
  char path[300];
  ks_record_refusal why;
  int k;

  ks_fopts_default(&o);
  o.callers = 1;
  o.trigger = fns[0];
  o.ncalls = 50;
  o.hold = 1;
  o.max_record_bytes = (uint64_t)1 << 30;
  c = &fl.cap[ks_flame_start(&fl, 1, &o)];
  rec_path(path, sizeof(path), "r.rec");
  ck_assert_int_eq(ks_record_capture(&fl, c, &in, path, &why), KS_OK);
  for (k = 0; k < 3000; k++) {
    int64_t t = 1000000 + (int64_t)k * 10000;
    if (k == 5)
      ks_flame_arm(c);
    ks_decoded_clear(&d);
    d.ev.kind = KS_EV_CALL;
    d.ev.flags = KS_EVF_TS | KS_EVF_META;
    d.ev.pid = pids[k % 2];
    d.ev.ts = t;
    d.ev.mfa = fns[0];
    d.payload = (ks_slice){payload, sizeof(payload)};
    ks_flame_event(&fl, &in, &d);
    d.payload = (ks_slice){NULL, 0};
    d.ev.flags = KS_EVF_TS | KS_EVF_CALLER;
    d.ev.mfa = fns[1 + k % 7];
    d.ev.caller = fns[0];
    d.ev.ts = t + 1000 + k % 13;
    ks_flame_event(&fl, &in, &d);
    d.ev.kind = KS_EV_RETURN_TO;
    d.ev.flags = KS_EVF_TS;
    d.ev.mfa = fns[0];
    d.ev.ts = t + 3000;
    ks_flame_event(&fl, &in, &d);
    d.ev.kind = KS_EV_RETURN_FROM;
    d.ev.flags = KS_EVF_TS | KS_EVF_META;
    d.ev.ts = t + 4000 + k % 5;
    ks_flame_event(&fl, &in, &d);
  }
  ck_assert_uint_gt(c->cp.k.calls_early, 0);
  check_identical(c, &events);
}
END_TEST

/* Past max_record_bytes with record_rotate 0: the file ends, what follows is cut. */
START_TEST(bound_cuts) {
  ks_fcap *c = start_rec("r.rec", 8192, 0);
  ks_record_status st;
  ks_replay rp;
  ks_replay_opts ro;
  struct stat sb;
  char path[300];
  const char *paths[1] = {path};

  workload(60000, 1000000);
  ks_flame_finish(&fl, c, 0, 0);
  status(c, &st);
  ck_assert_int_eq(st.err, 0);
  ck_assert_uint_gt(st.cut_events, 0);
  ck_assert_uint_gt(st.events, 0);
  ck_assert_uint_eq(st.nfiles, 1);
  rec_path(path, sizeof(path), "r.rec");
  ck_assert_str_eq(st.files[0], path);
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_int_le(sb.st_size, 8192);
  ck_assert_uint_eq(st.bytes, (uint64_t)sb.st_size);
  ks_replay_default_opts(&ro);
  ck_assert_int_eq(ks_replay_files(&rp, paths, 1, &ro), KS_OK);
  ck_assert_int_eq(rp.err, 0);   /* a whole file: its trailer says what was cut */
  ck_assert_uint_eq(rp.events, st.events);
  ks_replay_free(&rp);
}
END_TEST

/* record_rotate 2: r.rec.2, r.rec.1, r.rec; the older files removed and counted. */
START_TEST(rotation) {
  ks_fcap *c = start_rec("r.rec", 8192, 2);
  ks_record_status st;
  ks_replay rp;
  ks_replay_opts ro;
  struct stat sb;
  char path[300];
  uint32_t k;

  workload(120000, 1000000);
  ks_flame_finish(&fl, c, 0, 0);
  status(c, &st);
  ck_assert_int_eq(st.err, 0);
  ck_assert_uint_eq(st.nfiles, 3);
  ck_assert_uint_gt(st.cut_events, 0);
  for (k = 0; k < 3; k++) {
    ck_assert_int_eq(stat(st.files[k], &sb), 0);
    ck_assert_int_le(sb.st_size, 8192);
  }
  rec_path(path, sizeof(path), "r.rec.2");
  ck_assert_str_eq(st.files[0], path);
  rec_path(path, sizeof(path), "r.rec.3");
  ck_assert_int_ne(stat(path, &sb), 0);
  ks_replay_default_opts(&ro);
  ck_assert_int_eq(ks_replay_files(&rp, st.files, 3, &ro), KS_OK);
  ck_assert_int_eq(rp.err, 0);
  ck_assert_uint_gt(rp.events, 0);
  ck_assert_uint_eq(rp.events, st.events);   /* events: those in the files kept */
  ck_assert_uint_gt(rp.c->cp.k.events, 0);   /* the later files' processes came back (proc ops) */
  ks_replay_free(&rp);
}
END_TEST

static int refused(const char *path, ks_record_refusal *why) {
  ks_fopts o;
  int slot, rc;

  ks_fopts_default(&o);
  slot = ks_flame_start(&fl, 9, &o);
  ck_assert_int_ge(slot, 0);
  rc = ks_record_capture(&fl, &fl.cap[slot], &in, path, why);
  ck_assert_int_eq(fl.observed, rc == KS_OK ? 1u << slot : 0);
  ks_flame_drop(&fl, &fl.cap[slot]);
  return rc;
}

START_TEST(refused_at_start) {
  char path[300], link[300], sub[300];
  ks_record_refusal why;

  rec_path(path, sizeof(path), "taken");
  ck_assert_int_eq(close(open(path, O_CREAT | O_WRONLY, 0600)), 0);
  ck_assert_int_eq(refused(path, &why), KS_EINVAL);
  ck_assert_int_eq(why.err, EEXIST);
  rec_path(path, sizeof(path), "nodir/r.rec");
  ck_assert_int_eq(refused(path, &why), KS_EINVAL);
  ck_assert_int_eq(why.err, ENOENT);
  rec_path(path, sizeof(path), "taken/r.rec");   /* a file where a directory should be */
  ck_assert_int_eq(refused(path, &why), KS_EINVAL);
  ck_assert_int_ne(why.dir.why, KS_DIR_OK);
  rec_path(sub, sizeof(sub), "real");
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  rec_path(link, sizeof(link), "link");
  ck_assert_int_eq(symlink(sub, link), 0);
  rec_path(path, sizeof(path), "link/r.rec");
  ck_assert_int_eq(refused(path, &why), KS_EINVAL);
  ck_assert_int_eq(why.dir.why, KS_DIR_SYMLINK);
  ck_assert_int_eq(chmod(sub, 0777), 0);
  rec_path(path, sizeof(path), "real/r.rec");
  ck_assert_int_eq(refused(path, &why), KS_EINVAL);
  ck_assert_int_eq(why.dir.why, KS_DIR_WRITABLE);
  ck_assert_int_eq(refused("relative/r.rec", &why), KS_EINVAL);
  ck_assert_int_eq(why.dir.why, KS_DIR_RELATIVE);
  ck_assert_int_eq(access(path, F_OK), -1);   /* nothing was created */
}
END_TEST

/* In a child with RLIMIT_FSIZE (SIGXFSZ ignored): the recording fails with efbig and its
 * file is removed; the capture goes on and writes its files. */
START_TEST(write_error_mid_capture) {
  struct rlimit lim = {48 * 1024, RLIM_INFINITY};
  pid_t child = fork();
  int wst;

  ck_assert_int_ge(child, 0);
  if (child == 0) {
    ks_record_status st;
    ks_fcap *c;
    char path[300], *reply;
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
      _exit(10);
    c = start_rec("r.rec", (uint64_t)1 << 30, 0);
    workload(400000, 1000000);
    ks_record_get_status(ks_record_of(c), &st);
    if (st.err != EFBIG)
      _exit(11);
    rec_path(path, sizeof(path), "r.rec");
    if (access(path, F_OK) == 0 || st.nfiles != 0)
      _exit(12);
    ks_flame_finish(&fl, c, 0, 0);
    lim.rlim_cur = RLIM_INFINITY;   /* room again: the capture's own files */
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
      _exit(14);
    reply = write_files(&in, c, "live", NULL);
    if (strncmp(reply, "{ok,", 4) != 0 || strstr(reply, "error => efbig") == NULL)
      { fprintf(stderr, "REPLY %.600s\n", reply); _exit(13); }
    _exit(0);
  }
  ck_assert_int_eq(waitpid(child, &wst, 0), child);
  ck_assert_msg(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "child: %d", WEXITSTATUS(wst));
}
END_TEST

/* A recorded file's bytes (the caller frees). */
static unsigned char *recorded(size_t *n, uint64_t *events) {
  ks_fcap *c = start_rec("r.rec", (uint64_t)1 << 30, 0);
  ks_record_status st;
  char path[300];

  workload(60000, 1000000);
  ks_flame_finish(&fl, c, 1, 1000000000000LL);
  status(c, &st);
  *events = st.events;
  rec_path(path, sizeof(path), "r.rec");
  return read_file(path, n);
}

START_TEST(truncated_file) {
  ks_replay rp;
  ks_replay_opts ro;
  uint64_t events;
  size_t n;
  unsigned char *data = recorded(&n, &events);
  char *reply;

  ks_replay_default_opts(&ro);
  ck_assert_int_eq(ks_replay_mem(&rp, data, n / 2, &ro), KS_OK);
  ck_assert_int_eq(rp.truncated, 1);
  ck_assert_int_eq(rp.err, KS_RERR_TRUNCATED);
  ck_assert_uint_gt(rp.events, 0);
  ck_assert_uint_lt(rp.events, events);
  reply = write_files(NULL, NULL, "half", &rp);
  ck_assert_msg(strncmp(reply, "{ok,", 4) == 0, "%s", reply);
  ck_assert_ptr_nonnull(strstr(reply, "truncated => true"));
  ck_assert_ptr_nonnull(strstr(reply, "error => truncated"));
  free(reply);
  ks_replay_free(&rp);
  free(data);
}
END_TEST

START_TEST(corrupt_file) {
  ks_replay rp;
  ks_replay_opts ro;
  uint64_t events;
  size_t n, k;
  unsigned char *data = recorded(&n, &events);
  char *reply;

  ks_replay_default_opts(&ro);
  for (k = n / 2; k < n / 2 + 64; k++)
    data[k] ^= 0x5a;
  ck_assert_int_eq(ks_replay_mem(&rp, data, n, &ro), KS_OK);
  ck_assert_int_eq(rp.truncated, 1);
  ck_assert_int_eq(rp.err, KS_RERR_CORRUPT);
  ck_assert_uint_gt(rp.events, 0);
  ks_replay_free(&rp);
  memcpy(data, "KPROFREX", 8);   /* not a recording: no capture, replay_failed */
  ck_assert_int_eq(ks_replay_mem(&rp, data, n, &ro), KS_EINVAL);
  ck_assert_int_eq(rp.err, KS_RERR_MAGIC);
  reply = write_files(NULL, NULL, "none", &rp);
  ck_assert_ptr_nonnull(strstr(reply, "replay_failed"));
  ck_assert_ptr_nonnull(strstr(reply, "bad_magic"));
  free(reply);
  ks_replay_free(&rp);
  free(data);
}
END_TEST

/* kprof_sink --replay: the files, exit 0; a truncated file, exit 1; bad arguments, 2. */
START_TEST(command_line) {
  uint64_t events;
  size_t n;
  unsigned char *data = recorded(&n, &events);
  char path[300], half[300], out[300];
  char *ok[] = {path, "--out", out, "--format", "folded,callgrind", "--top", "5"};
  char *cut[] = {half, "--out", out, "--name", "half"};
  char *bad[] = {path, "--format", "png"};
  int fd;

  rec_path(path, sizeof(path), "r.rec");
  rec_path(half, sizeof(half), "half.rec");
  rec_path(out, sizeof(out), "cli");
  fd = open(half, O_CREAT | O_WRONLY, 0600);
  ck_assert_int_eq(write(fd, data, n / 3), (ssize_t)(n / 3));
  close(fd);
  ck_assert_int_eq(ks_replay_main(7, ok), 0);
  free(file_at("cli", "r.rec.folded", &n));
  ck_assert_uint_gt(n, 100);
  free(file_at("cli", "callgrind.out.r.rec", &n));
  ck_assert_uint_gt(n, 100);
  ck_assert_int_eq(ks_replay_main(5, cut), 1);
  free(file_at("cli", "half.folded", &n));
  ck_assert_uint_gt(n, 10);
  ck_assert_int_eq(ks_replay_main(3, bad), 2);
  ck_assert_int_eq(ks_replay_main(0, bad), 2);
  free(data);
}
END_TEST

/* The stack lines of a folded file (a comment line, if any, left out). */
static char *stack_lines(const char *text) {
  char *out = calloc(1, strlen(text) + 1), *w = out;
  const char *l = text, *nl;

  for (; *l != 0; l = nl + 1) {
    nl = strchr(l, '\n');
    if (nl == NULL)
      nl = l + strlen(l) - 1;
    if (*l != '#') {
      memcpy(w, l, (size_t)(nl - l + 1));
      w += nl - l + 1;
    }
  }
  return out;
}

/* A recording written before the header's keys came from the table (by the
 * sink of main 1e6389e: flame_apply with group => name, names => elixir,
 * fold_recursion => true, top => 3, max_bytes => 1048576) reads with the same
 * options, replays whole and writes the stacks that sink wrote. */
START_TEST(old_recording_reads) {
  char path[512], folded[512], out[300];
  char *argv[] = {path, "--out", out, "--name", "v1", "--format", "folded"};
  unsigned char *want, *got;
  char *want_s, *got_s;
  ks_intern in2;
  ks_fopts o;
  ks_rread *r;
  size_t n;

  snprintf(path, sizeof(path), "%s/flame_v1.kprec", test_data_dir());
  snprintf(folded, sizeof(folded), "%s/flame_v1.folded", test_data_dir());
  ck_assert_int_eq(ks_intern_init(&in2, NULL), KS_OK);
  r = ks_rread_open(path, &in2, &o);
  ck_assert_ptr_nonnull(r);
  ck_assert_int_eq(ks_rread_error(r), 0);
  ck_assert_int_eq(o.group, KS_GROUP_NAME);
  ck_assert_int_eq(o.elixir_names, 1);
  ck_assert_int_eq(o.fold_recursion, 1);
  ck_assert_uint_eq(o.top, 3);
  ck_assert_uint_eq(o.max_bytes, 1048576);
  ck_assert_uint_ne(o.hide, KS_NONE);     /* flame_apply's wrapper */
  ck_assert_uint_eq(o.trigger, KS_NONE);
  ks_rread_close(r);
  ks_intern_free(&in2);
  rec_path(out, sizeof(out), "v1");
  ck_assert_int_eq(ks_replay_main(7, argv), 0);
  got = file_at("v1", "v1.folded", &n);
  want = read_file(folded, &n);
  ck_assert_ptr_nonnull(want);
  want_s = stack_lines((const char *)want);
  got_s = stack_lines((const char *)got);
  ck_assert_str_eq(got_s, want_s);
  free(want_s);
  free(got_s);
  free(want);
  free(got);
}
END_TEST

/* Every header key of the table is written and read back: a capture whose
 * every key is off its default records a header that gives the same options. */
START_TEST(header_keys_round_trip) {
  char path[300];
  ks_record_refusal why;
  ks_record_key k;
  ks_intern in2;
  ks_fopts o, back;
  ks_mfa_view a, b;
  ks_rread *r;
  ks_fcap *c;
  size_t i;
  int slot;

  ks_fopts_default(&o);
  o.sleep = 0;
  o.gc = 0;
  o.children = 1;
  o.max_bytes = 3u << 20;
  o.max_stack = 999;
  o.max_procs = 77;
  o.trigger = fns[4];
  o.ncalls = 5;
  o.hold = 1;
  o.time_offset = -1234567890123LL;
  o.perf_period_us = 250;
  o.top = 9;
  o.elixir_names = 1;
  o.group = KS_GROUP_ALL;
  o.fold_recursion = 1;
  o.callers = 1;
  o.correct_ns = 321;
  o.hide = fns[13];
  slot = ks_flame_start(&fl, 1, &o);
  ck_assert_int_ge(slot, 0);
  c = &fl.cap[slot];
  rec_path(path, sizeof(path), "keys.rec");
  ck_assert_int_eq(ks_record_capture(&fl, c, &in, path, &why), KS_OK);
  ks_flame_finish(&fl, c, 1, 1000);
  ks_flame_drop(&fl, c);
  ck_assert_int_eq(ks_intern_init(&in2, NULL), KS_OK);
  r = ks_rread_open(path, &in2, &back);
  ck_assert_int_eq(ks_rread_error(r), 0);
  for (i = 0; ks_record_key_at(i, &k) == KS_OK; i++) {
    if (!ks_record_key_is_mfa(&k)) {
      ck_assert_msg(ks_option_load(&back, k.field) == ks_option_load(&o, k.field), "%s",
                    k.row->key);
      continue;
    }
    ck_assert_int_eq(ks_intern_mfa_get(&in, (uint32_t)ks_option_load(&o, k.field), &a), KS_OK);
    ck_assert_int_eq(ks_intern_mfa_get(&in2, (uint32_t)ks_option_load(&back, k.field), &b), KS_OK);
    ck_assert_str_eq(a.f, b.f);
  }
  ck_assert_uint_eq(i, 18);   /* every KS_RECORD_KEY line resolved to a flame row */
  ks_rread_close(r);
  ks_intern_free(&in2);
}
END_TEST

/* The command line's flags, bounds and usage are the table's. */
START_TEST(command_line_table) {
  uint64_t events;
  size_t n;
  unsigned char *data = recorded(&n, &events);
  char path[300], out[300], *text = NULL;
  char *no[] = {path, "--out", out, "--no-fold-recursion", "--group", "initial_call"};
  char *top_past[] = {path, "--top", "100001"};
  char *mb_under[] = {path, "--max-bytes", "65535"};
  char *value_bad[] = {path, "--names", "python"};
  char *no_int[] = {path, "--no-top"};
  FILE *f;

  free(data);
  rec_path(path, sizeof(path), "r.rec");
  rec_path(out, sizeof(out), "cli2");
  ck_assert_int_eq(ks_replay_main(6, no), 0);
  ck_assert_int_eq(ks_replay_main(3, top_past), 2);
  ck_assert_int_eq(ks_replay_main(3, mb_under), 2);
  ck_assert_int_eq(ks_replay_main(3, value_bad), 2);
  ck_assert_int_eq(ks_replay_main(2, no_int), 2);
  f = open_memstream(&text, &n);
  ks_replay_usage(f);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(text, "folded,perf,speedscope,svg,callgrind,folded_calls"));
  ck_assert_ptr_nonnull(strstr(text, "[--top 0..100000]"));
  ck_assert_ptr_nonnull(strstr(text, "[--max-bytes 65536..1099511627776]"));
  ck_assert_ptr_nonnull(strstr(text, "[--group pid|name|initial_call|all]"));
  ck_assert_ptr_nonnull(strstr(text, "[--fold-recursion]"));
  ck_assert_ptr_null(strstr(text, "info"));
  free(text);
}
END_TEST

/* sleep at replay: a recording with SLEEP frames (the capture's default) replayed
 * without them (--no-sleep, the table's KS_REPLAY line): the same stacks but
 * SLEEP's, and less time in all by SLEEP's; --sleep gives them back. */
START_TEST(replay_without_sleep) {
  uint64_t events;
  size_t n;
  unsigned char *data = recorded(&n, &events);
  char path[300], out[300], *file, *line, *save;
  char *keep[] = {path, "--out", out, "--name", "on", "--format", "folded", "--sleep"};
  char *drop[] = {path, "--out", out, "--name", "off", "--format", "folded", "--no-sleep"};
  const char *names[] = {"on.folded", "off.folded"};
  int64_t total[2] = {0, 0}, sleep = 0, paths = 0, diff;
  int k;

  free(data);
  rec_path(path, sizeof(path), "r.rec");
  rec_path(out, sizeof(out), "sleep");
  ck_assert_int_eq(ks_replay_main(8, keep), 0);
  ck_assert_int_eq(ks_replay_main(8, drop), 0);
  for (k = 0; k < 2; k++) {
    file = (char *)file_at("sleep", names[k], &n);
    ck_assert(k == 1 || strstr(file, ";SLEEP ") != NULL);
    ck_assert(k == 0 || strstr(file, "SLEEP") == NULL);
    save = NULL;
    for (line = strtok_r(file, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
      if (line[0] == '#')
        continue;
      total[k] += (int64_t)strtoull(strrchr(line, ' ') + 1, NULL, 10);
      if (strstr(line, ";SLEEP ") != NULL)
        sleep += (int64_t)strtoull(strrchr(line, ' ') + 1, NULL, 10);
      paths++;
    }
    free(file);
  }
  ck_assert_int_gt(sleep, 0);
  /* The rest is the same time: each file's counts are rounded on its own running
   * sum, no path off by more than 1 us. */
  diff = total[0] - sleep - total[1];
  ck_assert_int_le(diff < 0 ? -diff : diff, paths);
}
END_TEST

/* The commands: flame_start's record option, flame_status's record map, flame_replay. */
static void command_rec(ks_sink *sk, long ref, const char *cmd, long id, const char *path,
                        int bad_path) {
  ei_x_buff x;
  size_t n;
  unsigned char *f;

  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, ref);
  if (strcmp(cmd, "flame_replay") == 0) {
    ei_x_encode_tuple_header(&x, 3);
    tb_atom(&x, cmd);
    ei_x_encode_binary(&x, path, (long)strlen(path));
    ei_x_encode_list_header(&x, 1);
    ei_x_encode_tuple_header(&x, 2);
    tb_atom(&x, "output_directory");
    ei_x_encode_binary(&x, dir, (long)strlen(dir));
    ei_x_encode_empty_list(&x);
  } else if (strcmp(cmd, "flame_write") == 0) {   /* no format: record only */
    ei_x_encode_tuple_header(&x, 6);
    tb_atom(&x, cmd);
    ei_x_encode_long(&x, id);
    tb_atom(&x, "undefined");
    ei_x_encode_binary(&x, dir, (long)strlen(dir));
    ei_x_encode_binary(&x, "w", 1);
    ei_x_encode_empty_list(&x);
  } else {
    ei_x_encode_tuple_header(&x, strcmp(cmd, "flame_start") == 0 ? 3 : 2);
    tb_atom(&x, cmd);
    ei_x_encode_long(&x, id);
  }
  if (strcmp(cmd, "flame_start") == 0 && bad_path == 2) {   /* no record option */
    ei_x_encode_empty_list(&x);
  } else if (strcmp(cmd, "flame_start") == 0) {
    ei_x_encode_list_header(&x, 1);
    ei_x_encode_tuple_header(&x, 2);
    tb_atom(&x, "record");
    if (bad_path)
      ei_x_encode_long(&x, 42);
    else
      ei_x_encode_binary(&x, path, (long)strlen(path));
    ei_x_encode_empty_list(&x);
  }
  f = tb_framed(&x, &n);
  ck_assert_int_eq(ks_sink_feed(sk, f, n), KS_OK);
  free(f);
  ei_x_free(&x);
}

static void reply_has(const tb_out *o, int k, const char *a, const char *b) {
  char *got = tb_out_reply(o, k);

  ck_assert_msg(strstr(got, a) != NULL && (b == NULL || strstr(got, b) != NULL), "%s", got);
  free(got);
}

START_TEST(commands) {
  ks_sink sk;
  tb_out o;
  char path[300];

  memset(&o, 0, sizeof(o));
  ck_assert_int_eq(ks_sink_init(&sk, NULL, tb_out_emit, &o), KS_OK);
  rec_path(path, sizeof(path), "s.rec");
  command_rec(&sk, 1, "flame_start", 1, path, 0);
  command_rec(&sk, 2, "flame_status", 1, NULL, 0);
  command_rec(&sk, 3, "flame_start", 2, path, 0);
  command_rec(&sk, 4, "flame_start", 3, path, 1);
  command_rec(&sk, 5, "flame_status", 2, NULL, 0);
  command_rec(&sk, 6, "flame_write", 1, NULL, 0);
  command_rec(&sk, 7, "flame_replay", 0, path, 0);
  command_rec(&sk, 8, "flame_start", 4, NULL, 2);
  command_rec(&sk, 9, "flame_write", 4, NULL, 0);
  ck_assert_int_eq(o.frames, 9);
  reply_has(&o, 0, "ok", NULL);
  reply_has(&o, 1, "record => #{path => #Bin<", "cut_events => 0, error => none}");
  reply_has(&o, 2, "{error, {record_failed, #Bin<", "eexist}}");
  reply_has(&o, 3, "{error, badarg}", NULL);
  reply_has(&o, 4, "{error, not_found}", NULL);   /* refused: no capture was made */
  /* flame_write with no format ends a recording capture: its counters and the
   * recording's, no file but the recording. */
  reply_has(&o, 5, "{ok, [], #{", "record => #{path => #Bin<");
  reply_has(&o, 6, "{error, no_events, #{", "replay => #{events => 0, truncated => false");
  reply_has(&o, 7, "ok", NULL);
  reply_has(&o, 8, "{error, badarg}", NULL);   /* no format and no recording */
  /* No observer registered for the record option: refused, and no capture left. */
  sk.flame.record = NULL;
  rec_path(path, sizeof(path), "t.rec");
  command_rec(&sk, 10, "flame_start", 5, path, 0);
  command_rec(&sk, 11, "flame_status", 5, NULL, 0);
  ck_assert_int_eq(o.frames, 11);
  reply_has(&o, 9, "{error, badarg}", NULL);
  reply_has(&o, 10, "{error, not_found}", NULL);
  ck_assert_int_eq(access(path, F_OK), -1);
  ck_assert_int_eq(sk.flame.active, 0);
  ks_sink_free(&sk);
  tb_out_free(&o);
}
END_TEST

/* {kprof, Ref, {flame_replay, Paths, Opts}}: Paths a list of n paths (n < 0: the
 * path alone, a binary), Opts built by opts(x) (its list header included). */
static void replay_cmd(ks_sink *sk, long ref, const char *path, int n, void (*opts)(ei_x_buff *x)) {
  ei_x_buff x;
  size_t len;
  unsigned char *f;
  int k;

  tb_begin(&x);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "kprof");
  ei_x_encode_long(&x, ref);
  ei_x_encode_tuple_header(&x, 3);
  tb_atom(&x, "flame_replay");
  if (n < 0) {
    ei_x_encode_binary(&x, path, (long)strlen(path));
  } else {
    if (n > 0)
      ei_x_encode_list_header(&x, n);
    for (k = 0; k < n; k++)
      ei_x_encode_binary(&x, path, (long)strlen(path));
    ei_x_encode_empty_list(&x);
  }
  opts(&x);
  f = tb_framed(&x, &len);
  ck_assert_int_eq(ks_sink_feed(sk, f, len), KS_OK);
  free(f);
  ei_x_free(&x);
}

static void opt_bin(ei_x_buff *x, const char *key, const char *v) {
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, key);
  ei_x_encode_binary(x, v, (long)strlen(v));
}

static void opt_atom(ei_x_buff *x, const char *key, const char *v) {
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, key);
  tb_atom(x, v);
}

static void opt_long(ei_x_buff *x, const char *key, long v) {
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, key);
  ei_x_encode_long(x, v);
}

/* Every option flame_replay takes. */
static void opts_all(ei_x_buff *x) {
  ei_x_encode_list_header(x, 8);
  opt_bin(x, "output_directory", dir);
  opt_bin(x, "name", "opt");
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, "output_format");
  ei_x_encode_list_header(x, 2);
  tb_atom(x, "folded");
  tb_atom(x, "callgrind");
  ei_x_encode_empty_list(x);
  opt_long(x, "top", 5);
  opt_long(x, "max_bytes", 1L << 20);
  opt_atom(x, "group", "all");
  opt_atom(x, "fold_recursion", "true");
  opt_atom(x, "names", "elixir");
  ei_x_encode_empty_list(x);
}

static void opts_dir(ei_x_buff *x) {
  ei_x_encode_list_header(x, 1);
  opt_bin(x, "output_directory", dir);
  ei_x_encode_empty_list(x);
}

static void one_bad(ei_x_buff *x, int which) {
  ei_x_encode_list_header(x, 1);
  switch (which) {
  case 0: opt_atom(x, "group", "nope"); break;
  case 1: opt_bin(x, "name", "a/b"); break;
  case 2: opt_long(x, "top", -1); break;
  case 3: opt_long(x, "max_bytes", 10); break;
  case 4: opt_atom(x, "nope", "x"); break;
  case 5: opt_atom(x, "fold_recursion", "maybe"); break;
  default:
    ei_x_encode_tuple_header(x, 2);
    tb_atom(x, "output_format");
    ei_x_encode_list_header(x, 1);
    tb_atom(x, "png");
    ei_x_encode_empty_list(x);
  }
  ei_x_encode_empty_list(x);
}

static void bad0(ei_x_buff *x) { one_bad(x, 0); }
static void bad1(ei_x_buff *x) { one_bad(x, 1); }
static void bad2(ei_x_buff *x) { one_bad(x, 2); }
static void bad3(ei_x_buff *x) { one_bad(x, 3); }
static void bad4(ei_x_buff *x) { one_bad(x, 4); }
static void bad5(ei_x_buff *x) { one_bad(x, 5); }
static void bad6(ei_x_buff *x) { one_bad(x, 6); }

/* flame_replay through the sink: every option, the segments as a list, each
 * bad option refused, a file that is not there; flame_start's refusals of the
 * record path as the command says them. */
START_TEST(replay_command_options) {
  void (*const bad[])(ei_x_buff *) = {bad0, bad1, bad2, bad3, bad4, bad5, bad6};
  ks_fcap *c = start_rec("r.rec", (uint64_t)1 << 30, 0);
  char path[300], missing[300], sub[300], link[300], file[300];
  ks_sink sk;
  tb_out o;
  size_t k;

  workload(20000, 1000000);
  ks_flame_finish(&fl, c, 1, 1000000000000LL);
  ks_flame_drop(&fl, c);
  rec_path(path, sizeof(path), "r.rec");
  rec_path(missing, sizeof(missing), "missing.rec");
  memset(&o, 0, sizeof(o));
  ck_assert_int_eq(ks_sink_init(&sk, NULL, tb_out_emit, &o), KS_OK);
  replay_cmd(&sk, 1, path, 1, opts_all);
  replay_cmd(&sk, 2, path, 0, opts_dir);            /* no path */
  replay_cmd(&sk, 3, missing, -1, opts_dir);
  for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
    replay_cmd(&sk, 10 + (long)k, path, -1, bad[k]);
  rec_path(sub, sizeof(sub), "open");
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  ck_assert_int_eq(chmod(sub, 0777), 0);
  rec_path(link, sizeof(link), "link");
  ck_assert_int_eq(symlink(sub, link), 0);
  rec_path(file, sizeof(file), "r.rec/x.rec");
  command_rec(&sk, 20, "flame_start", 20, "rel/x.rec", 0);
  rec_path(path, sizeof(path), "link/x.rec");
  command_rec(&sk, 21, "flame_start", 21, path, 0);
  rec_path(path, sizeof(path), "open/x.rec");
  command_rec(&sk, 22, "flame_start", 22, path, 0);
  command_rec(&sk, 23, "flame_start", 23, file, 0);
  ck_assert_int_eq(o.frames, 3 + 7 + 4);
  reply_has(&o, 0, "{ok, [#Bin<", "replay => #{events => ");
  reply_has(&o, 0, "write_us => #{folded => ", "callgrind => ");
  reply_has(&o, 0, "top => [", NULL);
  rec_path(path, sizeof(path), "opt.folded");         /* the name and the formats asked */
  ck_assert_int_eq(access(path, F_OK), 0);
  rec_path(path, sizeof(path), "callgrind.out.opt");
  ck_assert_int_eq(access(path, F_OK), 0);
  rec_path(path, sizeof(path), "opt.svg");
  ck_assert_int_eq(access(path, F_OK), -1);
  reply_has(&o, 1, "{error, badarg}", NULL);
  reply_has(&o, 2, "{error, {replay_failed, #Bin<", "{open_failed, enoent}}}");
  for (k = 0; k < 7; k++)
    reply_has(&o, 3 + (int)k, "{error, badarg}", NULL);
  reply_has(&o, 10, "record_failed", "relative}}");
  reply_has(&o, 11, "record_failed", "symlink}}");
  reply_has(&o, 12, "record_failed", "{writable, \"0777\"}}}");
  reply_has(&o, 13, "record_failed", "not_directory}}");
  ks_sink_free(&sk);
  tb_out_free(&o);
}
END_TEST

/* {record_header, Path}: the options the file was recorded with, each as its row's
 * type; a file that is not there and a path that is no binary refused. */
START_TEST(record_header_command) {
  uint64_t events;
  size_t n;
  unsigned char *data = recorded(&n, &events);
  char path[300], missing[300];
  const char *paths[] = {path, missing};
  ks_sink sk;
  ei_x_buff x;
  tb_out o;
  int k;

  free(data);
  rec_path(path, sizeof(path), "r.rec");
  rec_path(missing, sizeof(missing), "missing.rec");
  memset(&o, 0, sizeof(o));
  ck_assert_int_eq(ks_sink_init(&sk, NULL, tb_out_emit, &o), KS_OK);
  for (k = 0; k < 3; k++) {
    tb_cmd_begin(&x, k + 1, "record_header", 2);
    if (k < 2)
      ei_x_encode_binary(&x, paths[k], (long)strlen(paths[k]));
    else
      ei_x_encode_long(&x, 42);
    tb_feed(&sk, &x);
  }
  ck_assert_int_eq(o.frames, 3);
  /* start_rec's capture: children, top 10, correct_ns 150, no trigger, no hidden frame. */
  reply_has(&o, 0, "{ok, #{sleep => true, gc => true, children => true, max_bytes => 2147483648,",
            "top => 10, names => erlang, group => pid, fold_recursion => false,");
  reply_has(&o, 0, "hold => false, time_offset => 0,", "correct_ns => 150, trigger => undefined, "
                                                       "hide => undefined}}");
  reply_has(&o, 1, "{error, {replay_failed, #Bin<", "{open_failed, enoent}}}");
  reply_has(&o, 2, "{error, badarg}", NULL);
  ks_sink_free(&sk);
  tb_out_free(&o);
}
END_TEST

Suite *record_suite(void) {
  Suite *s = suite_create("record");
  TCase *tc = tcase_create("record");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, replay_is_identical);
  tcase_add_test(tc, record_level_sizes);
  tcase_add_test(tc, replay_trigger_callers);
  tcase_add_test(tc, bound_cuts);
  tcase_add_test(tc, rotation);
  tcase_add_test(tc, refused_at_start);
  tcase_add_test(tc, write_error_mid_capture);
  tcase_add_test(tc, truncated_file);
  tcase_add_test(tc, corrupt_file);
  tcase_add_test(tc, command_line);
  tcase_add_test(tc, commands);
  tcase_add_test(tc, replay_command_options);
  tcase_add_test(tc, old_recording_reads);
  tcase_add_test(tc, header_keys_round_trip);
  tcase_add_test(tc, command_line_table);
  tcase_add_test(tc, record_header_command);
  tcase_add_test(tc, replay_without_sleep);
  suite_add_tcase(s, tc);
  return s;
}
