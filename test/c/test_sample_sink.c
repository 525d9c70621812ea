/* test_sample_sink.c: the sample_* commands through the sink (refusals, bad
 * arguments, unknown sessions), a live session of this very program (a
 * thread named as a scheduler, spinning in a function a perf map of ours
 * names), its recording replayed to the same stacks, and sessions of real
 * VMs recorded in test/data (sample_*.ksr, test/data/README.md) replayed to
 * the stacks the live sessions wrote. The live parts need perf_event_open
 * (kernel.perf_event_paranoid <= 2 for a process's own threads): refused,
 * they say SKIPPED loudly. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"
#include "sample/ks_sample.h"

/* {sample_start, Id, Opts} with this process as the VM; extra options
 * (encoded by add, which returns how many) after the required ones. */
static void start(ks_sink *s, long ref, long id, int ospid, int hz,
                  int (*add)(ei_x_buff *x, void *ctx), void *ctx) {
  ei_x_buff x, extra;
  int n = 0;

  ei_x_new(&extra);
  if (add != NULL)
    n = add(&extra, ctx);
  tb_cmd_begin(&x, ref, "sample_start", 3);
  ei_x_encode_long(&x, id);
  ei_x_encode_list_header(&x, 4 + n);
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "os_pid");
  ei_x_encode_long(&x, ospid);
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "hz");
  ei_x_encode_long(&x, hz);
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "pid_template");
  tb_pid(&x, "n@h", 1, 0, 1);
  ei_x_encode_tuple_header(&x, 2);
  tb_atom(&x, "pid_bits");
  ei_x_encode_tuple_header(&x, 2);
  ei_x_encode_long(&x, 28);
  ei_x_encode_long(&x, 32);
  ei_x_append_buf(&x, extra.buff, extra.index);
  ei_x_encode_empty_list(&x);
  ei_x_free(&extra);
  tb_feed(s, &x);
}

static void simple(ks_sink *s, long ref, const char *name, long id) {
  ei_x_buff x;

  tb_cmd_begin(&x, ref, name, 2);
  ei_x_encode_long(&x, id);
  tb_feed(s, &x);
}

static void write_cmd(ks_sink *s, long ref, long id, const char *dir, const char *base) {
  ei_x_buff x;

  tb_cmd_begin(&x, ref, "sample_write", 5);
  ei_x_encode_long(&x, id);
  ei_x_encode_binary(&x, dir, (long)strlen(dir));
  ei_x_encode_binary(&x, base, (long)strlen(base));
  ei_x_encode_list_header(&x, 1);
  tb_atom(&x, "folded");
  ei_x_encode_empty_list(&x);
  tb_feed(s, &x);
}

static char *reply(tb_out *out, int k) {
  return tb_out_reply(out, k);
}

static int add_bad_hz(ei_x_buff *x, void *ctx) {
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, "hz");
  ei_x_encode_long(x, 0);
  return 1;
}

static int add_bad_layout(ei_x_buff *x, void *ctx) {
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, "layout");
  ei_x_encode_tuple_header(x, 2);
  ei_x_encode_long(x, 4);   /* not a word's offset */
  ei_x_encode_long(x, 7);
  return 1;
}

static int add_relative_record(ei_x_buff *x, void *ctx) {
  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, "raw_record");
  ei_x_encode_binary(x, "rel.ksr", 7);
  return 1;
}

START_TEST(test_refusals) {
  ks_sink s;
  tb_out out;
  char *r, gone[64];
  int k = 0, nobody = 4194000;

  while (kill(nobody, 0) == 0 || errno != ESRCH)   /* a pid no process has */
    nobody--;
  snprintf(gone, sizeof(gone), "{error, {no_such_process, %d}}", nobody);
  tb_sink_open(&s, NULL, &out);
  start(&s, 1, 1, 1, 97, add_bad_hz, NULL);
  start(&s, 2, 1, 1, 97, add_bad_layout, NULL);
  start(&s, 3, 1, 1, 97, add_relative_record, NULL);
  start(&s, 4, 1, nobody, 97, NULL, NULL);
  /* A process that writes no perf map: this one, before it makes one. */
  start(&s, 5, 1, (int)getpid(), 97, NULL, NULL);
  simple(&s, 6, "sample_status", 1);
  simple(&s, 7, "sample_window", 1);
  simple(&s, 8, "sample_stop", 1);
  write_cmd(&s, 9, 1, "/tmp", "x");
  const char *want[] = {"{error, badarg}", "{error, badarg}", "{error, badarg}",
                        gone,
                        "{error, {needs_emulator_flag, \"+JPperf map\"}}",
                        "{error, not_found}", "{error, not_found}", "{error, not_found}",
                        "{error, not_found}"};
  for (k = 0; k < 9; k++) {
    r = reply(&out, k);
    ck_assert_str_eq(r, want[k]);
    free(r);
  }
  ck_assert_int_eq(s.flame.active, 0);   /* no capture left behind */
  tb_sink_close(&s, &out);
}
END_TEST

/* ---- a live session of this program ---- */

static volatile int spin_stop;

__attribute__((noinline, used)) void ks_test_sample_spin(void);
__attribute__((noinline, used)) void ks_test_sample_spin(void) {
  while (!spin_stop)
    __asm__ volatile("" ::: "memory");
}

static void *spinner(void *arg) {
  pthread_setname_np(pthread_self(), "1_scheduler");   /* sampled as a VM's scheduler */
  ks_test_sample_spin();
  return NULL;
}

static int under_valgrind(void) {
  const char *p = getenv("LD_PRELOAD");

  return p != NULL && strstr(p, "vgpreload") != NULL;
}

static int add_record(ei_x_buff *x, void *ctx) {
  const char *path = ctx;

  ei_x_encode_tuple_header(x, 2);
  tb_atom(x, "raw_record");
  ei_x_encode_binary(x, path, (long)strlen(path));
  return 1;
}

/* The folded file's lines, without its header, into buf. */
static void folded(const char *dir, const char *base, char *buf, size_t cap) {
  char path[512];
  unsigned char *text;
  size_t n;

  snprintf(path, sizeof(path), "%s/%s.folded", dir, base);
  text = read_file(path, &n);
  ck_assert_ptr_nonnull(text);
  snprintf(buf, cap, "%s", (char *)text);   /* only "frames count" lines */
  free(text);
}

typedef struct tally {
  uint64_t spin, other;
  const ks_intern *in;
} tally;

static void count_stack(void *ctx, const ks_sstack *st) {
  tally *t = ctx;
  ks_mfa_view m;

  if (st->n == 1 && ks_intern_mfa_get(t->in, st->mfas[0], &m) == KS_OK &&
      strcmp(m.m, "fake") == 0 && strcmp(m.f, "spin") == 0)
    t->spin++;
  else
    t->other++;
}

START_TEST(test_live_session) {
  char dir[256], map[64], rec[320], text[8192], *r;
  ks_sink s;
  tb_out out;
  pthread_t th;
  FILE *f;
  struct timespec t0, t, cpu0, cpu1;
  clockid_t spin_clock;
  int64_t ms = 0;
  unsigned char *bytes;
  size_t n;

  tb_tmpdir(dir, sizeof(dir), "sample");
  snprintf(rec, sizeof(rec), "%s/live.ksr", dir);
  snprintf(map, sizeof(map), "/tmp/perf-%d.map", (int)getpid());
  ck_assert_ptr_nonnull(f = fopen(map, "w"));
  /* 4 KiB: the function's code however a sanitizer grows it (only the
   * spinner's thread is sampled, so what follows it is never named so). */
  fprintf(f, "%llx 1000 $fake:spin/0\n", (unsigned long long)(uintptr_t)&ks_test_sample_spin);
  fclose(f);
  spin_stop = 0;
  ck_assert_int_eq(pthread_create(&th, NULL, spinner, NULL), 0);
  usleep(20000);   /* named before the session looks for threads */
  tb_sink_open(&s, NULL, &out);
  start(&s, 1, 5, (int)getpid(), 997, add_record, rec);
  r = reply(&out, 0);
  if (strncmp(r, "{error, {perf_event_open", 24) == 0 ||
      strcmp(r, "{error, {not_supported, perf_events}}") == 0) {
    fprintf(stderr, "\n*** test_sample_sink: SKIPPED: the live session: %s ***\n", r);
    free(r);
    spin_stop = 1;
    pthread_join(th, NULL);
    tb_sink_close(&s, &out);
    unlink(map);
    tb_tmpdir_remove(dir);
    return;
  }
  ck_assert_str_eq(r, "ok");
  free(r);
  ck_assert_int_eq(pthread_getcpuclockid(th, &spin_clock), 0);
  clock_gettime(spin_clock, &cpu0);
  simple(&s, 2, "sample_window", 5);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (ms < 400) {   /* the sink's timer, by hand */
    usleep(10000);
    ks_sink_poll_sample(&s);
    clock_gettime(CLOCK_MONOTONIC, &t);
    ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
  }
  /* Stopped before the spinner's thread ends: its exit runs the C library's
   * (and a sanitizer's) teardown under its scheduler name, which is no part
   * of the spin (ASan's allocator gave memory back to the OS there for 31 ms
   * of a full suite's run: 31 of 182 samples). */
  clock_gettime(spin_clock, &cpu1);
  simple(&s, 3, "sample_stop", 5);
  spin_stop = 1;
  pthread_join(th, NULL);
  r = reply(&out, 2);
  ck_assert_ptr_nonnull(strstr(r, "phase=stopped") != NULL ? r : strstr(r, "stopped"));
  free(r);
  /* The samples the kernel took, read or lost, against the spinner's own CPU
   * time at 997 Hz (a full perf ring loses samples and counts them: under
   * valgrind, where the reader is slow, the kernel's ring may fill). */
  {
    uint64_t samples = s.sampling.smp.k.samples, lost = s.sampling.smp.k.lost;
    double cpu_s = (double)(cpu1.tv_sec - cpu0.tv_sec) + (double)(cpu1.tv_nsec - cpu0.tv_nsec) / 1e9;
    double expect = cpu_s * 997;

    ck_assert_msg(expect > 20, "the spinner had %.0f ms of CPU in the window", cpu_s * 1000);
    ck_assert_msg((double)(samples + lost) > expect / 2,
                  "%llu samples read and %llu lost, for %.0f ms of the spinner's CPU at 997 Hz",
                  (unsigned long long)samples, (unsigned long long)lost, cpu_s * 1000);
    ck_assert_msg(samples > 0, "none of %llu samples read", (unsigned long long)lost);
    if (lost > 0)
      fprintf(stderr, "\n*** test_sample_sink: the live session: %llu samples read, %llu lost "
                      "(counted) for %.0f ms of CPU ***\n",
              (unsigned long long)samples, (unsigned long long)lost, cpu_s * 1000);
  }
  write_cmd(&s, 4, 5, dir, "live");
  r = reply(&out, 3);
  ck_assert_ptr_nonnull(strstr(r, "{ok, ["));
  free(r);
  folded(dir, "live", text, sizeof(text));
  /* Under valgrind the thread runs valgrind's translation of the code, at
   * addresses no map names: the samples are taken, not named. */
  if (under_valgrind())
    fprintf(stderr, "\n*** test_sample_sink: SKIPPED: the live samples' names (valgrind runs "
                    "a translation of the code) ***\n");
  else
    ck_assert_ptr_nonnull(strstr(text, "[scheduler];fake:spin/0 "));
  /* The recording replayed: the same samples, the spinner's all named. */
  {
    static ks_sampler rp;
    tally tl = {0, 0, &s.in};
    bytes = read_file(rec, &n);
    ck_assert_ptr_nonnull(bytes);
    ks_sampler_init(&rp, &s.in);
    rp.emit = count_stack;
    rp.emit_ctx = &tl;
    ck_assert_int_eq(ks_srec_replay(&rp, bytes, n), KS_OK);
    ck_assert_uint_eq(rp.k.samples, s.sampling.smp.k.samples);
    if (!under_valgrind())
      ck_assert_msg(tl.spin > 9 * (tl.spin + tl.other) / 10,
                    "%llu of %llu replayed samples in fake:spin/0 alone; the live folded file:\n%s",
                    (unsigned long long)tl.spin, (unsigned long long)(tl.spin + tl.other), text);
    /* Cut anywhere: refused or read up to the cut, never past it. */
    for (size_t cut = 0; cut < n; cut += n / 37 + 1) {
      ks_sampler_free(&rp);
      ks_sampler_init(&rp, &s.in);
      ks_srec_replay(&rp, bytes, cut);
      ck_assert_uint_le(rp.k.samples, s.sampling.smp.k.samples);
    }
    ks_sampler_free(&rp);
    free(bytes);
  }
  tb_sink_close(&s, &out);
  unlink(map);
  tb_tmpdir_remove(dir);
}
END_TEST

/* ---- recorded sessions of real VMs ---- */

typedef struct stacks {
  char **line;                 /* "pid;frame;...;leaf" */
  uint32_t *count;
  uint32_t n, cap;
  const ks_intern *in;
} stacks;

static void add_stack(void *ctx, const ks_sstack *st) {
  stacks *t = ctx;
  char buf[8192];
  size_t o = 0;
  ks_pid_view pv;
  ks_mfa_view m;
  uint32_t k;

  ck_assert_uint_ne(st->pid, KS_NONE);   /* the session asked for one process */
  ck_assert_int_eq(ks_intern_pid_get(t->in, st->pid, &pv), KS_OK);
  o += (size_t)snprintf(buf, sizeof(buf), "<0.%u.%u>", pv.num, pv.serial);
  for (k = 0; k < st->n && o < sizeof(buf); k++) {
    ck_assert_int_eq(ks_intern_mfa_get(t->in, st->mfas[k], &m), KS_OK);
    o += (size_t)(m.m[0] == '[' ? snprintf(buf + o, sizeof(buf) - o, ";%s%s", m.m, m.f)
                                : snprintf(buf + o, sizeof(buf) - o, ";%s:%s/%u", m.m, m.f, m.arity));
  }
  for (k = 0; k < t->n && strcmp(t->line[k], buf) != 0; k++)
    ;
  if (k == t->n) {
    ck_assert_int_eq(ks_grow(&t->line, &t->cap, t->n, 16, sizeof(*t->line)), KS_OK);
    t->count = realloc(t->count, (size_t)t->cap * sizeof(*t->count));
    t->line[t->n] = strdup(buf);
    t->count[t->n++] = 0;
  }
  t->count[k]++;
}

static void replay_recording(const char *name) {
  static ks_sampler rp;
  char path[512], got[65536], line[8300], *want;
  stacks t = {NULL, NULL, 0, 0, NULL};
  unsigned char *bytes;
  ks_intern in;
  size_t n, o = 0, wn;
  uint32_t k, g;

  snprintf(path, sizeof(path), "%s/%s.ksr", test_data_dir(), name);
  ck_assert_ptr_nonnull(bytes = read_file(path, &n));
  snprintf(path, sizeof(path), "%s/%s.txt", test_data_dir(), name);
  ck_assert_ptr_nonnull(want = (char *)read_file(path, &wn));
  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  t.in = &in;
  ks_sampler_init(&rp, &in);
  rp.emit = add_stack;
  rp.emit_ctx = &t;
  ck_assert_int_eq(ks_srec_replay(&rp, bytes, n), KS_OK);
  /* Every version of the reloaded function has its samples, each named by
   * the map as it was: a naming by the last line at an address would give
   * none to 1 and 3 (or 2 and 4). */
  for (g = 1; g <= 6; g++) {
    uint32_t c = 0;
    snprintf(line, sizeof(line), ";rmod:g%u/1", g);
    for (k = 0; k < t.n; k++)
      if (strstr(t.line[k], line) != NULL)
        c += t.count[k];
    ck_assert_uint_ge(c, 5);
  }
  /* Exactly the live session's stacks, in its order (sorted by line). */
  for (k = 0; k < t.n; k++)
    for (g = k + 1; g < t.n; g++)
      if (strcmp(t.line[g], t.line[k]) < 0) {
        char *l = t.line[k];
        uint32_t c = t.count[k];
        t.line[k] = t.line[g], t.count[k] = t.count[g];
        t.line[g] = l, t.count[g] = c;
      }
  for (k = 0; k < t.n; k++)
    o += (size_t)snprintf(got + o, sizeof(got) - o, "%s %u\n", t.line[k], t.count[k]);
  ck_assert_str_eq(got, want);
  for (k = 0; k < t.n; k++)
    free(t.line[k]);
  free(t.line);
  free(t.count);
  free(want);
  free(bytes);
  ks_sampler_free(&rp);
  ks_intern_free(&in);
}

/* A recorded session of a real VM through the sink's own feed into a
 * capture, as a live session's samples go (ks_sampling_feed): each stack
 * under its process's root, the top table counting samples, and the
 * written folded file holding every stack the replay named, under its
 * process, with its count of samples. */
START_TEST(test_recorded_into_a_capture) {
  char path[512], dir[256], line[8300], *r, *want, *w, *nl;
  static char text[1 << 16];
  unsigned char *bytes;
  size_t n, wn;
  ks_sink s;
  tb_out out;
  ks_fopts o;
  ks_sampling *sm;
  unsigned lines = 0;

  tb_tmpdir(dir, sizeof(dir), "sample-capture");
  snprintf(path, sizeof(path), "%s/sample_reload_otp25.ksr", test_data_dir());
  ck_assert_ptr_nonnull(bytes = read_file(path, &n));
  snprintf(path, sizeof(path), "%s/sample_reload_otp25.txt", test_data_dir());
  ck_assert_ptr_nonnull(want = (char *)read_file(path, &wn));
  tb_sink_open(&s, NULL, &out);
  sm = &s.sampling;
  ks_fopts_default(&o);
  o.top = 5;
  o.sample_hz = 997;
  ck_assert_int_ge(ks_flame_start(sm->fl, 9, &o), 0);
  ks_sampler_init(&sm->smp, &s.in);
  sm->smp.hz = 997;   /* as sample_start sets them */
  sm->smp.period_ns = 1000000000ull / 997;
  ks_sampling_attach(sm, 9);
  ck_assert_int_eq(ks_srec_replay(&sm->smp, bytes, n), KS_OK);
  ck_assert_uint_gt(sm->smp.k.samples, 100);
  write_cmd(&s, 1, 9, dir, "rec");
  r = reply(&out, 0);
  ck_assert_msg(strstr(r, "{ok, [") != NULL && strstr(r, "top") != NULL, "%s", r);
  free(r);
  text[0] = '\n';   /* each line after a newline, the first too */
  folded(dir, "rec", text + 1, sizeof(text) - 1);
  /* "<0.88.0>;frames count" in the replay's stacks: the same line, the
   * process (unnamed) its root. */
  for (w = want; (nl = strchr(w, '\n')) != NULL; w = nl + 1) {
    const char *space = nl, *hit;
    size_t len;

    while (space > w && *space != ' ')
      space--;
    ck_assert_uint_lt((size_t)(space - w) + 32, sizeof(line));
    /* ";frames T": T the samples' time in microseconds, a period each (the
     * writer rounds each line so that the lines add up to the whole: within
     * 1 us of it) */
    len = (size_t)snprintf(line, sizeof(line), "\n%.*s ", (int)(space - w), w);
    hit = strstr(text, line);
    ck_assert_msg(hit != NULL, "the replay's stack %.*s is not in the folded file:\n%s",
                  (int)(nl - w), w, text);
    {
      double got = strtod(hit + len, NULL);
      double t = strtod(space + 1, NULL) * (double)sm->smp.period_ns / 1000;
      ck_assert_msg(got >= t - 1 && got <= t + 1, "%.*s: %.0f us in the folded file, %.1f wanted",
                    (int)(nl - w), w, got, t);
    }
    lines++;
  }
  ck_assert_uint_gt(lines, 10);
  ck_assert_ptr_nonnull(strstr(text, "<0.88.0>"));
  tb_sink_close(&s, &out);
  tb_tmpdir_remove(dir);
  free(want);
  free(bytes);
}
END_TEST

/* A recording written by the recorder's own calls, read back: the
 * processes asked for, the words read from the VM, the window's layout and a
 * drain, on the header of a real session's sampler (its pid template); a
 * recording that cannot be opened is refused. */
START_TEST(test_recorder_round_trip) {
  static ks_sampler a, b;
  char path[512], dir[256];
  unsigned char *bytes;
  size_t n;
  ks_intern in;
  ks_srec rec = {NULL, 0};
  uint32_t ids[2];
  uint64_t addrs[3] = {0x1000, 0x1008, 0x1010}, words[3] = {0x883, 0, 0x903};
  uint8_t ok[3] = {1, 0, 1};
  ks_pid_view v;
  tally tl = {0, 0, NULL};

  tb_tmpdir(dir, sizeof(dir), "sample-rec");
  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  tl.in = &in;
  snprintf(path, sizeof(path), "%s/sample_reload_otp25.ksr", test_data_dir());
  ck_assert_ptr_nonnull(bytes = read_file(path, &n));
  ks_sampler_init(&a, &in);
  a.emit = count_stack;
  a.emit_ctx = &tl;
  ck_assert_int_eq(ks_srec_replay(&a, bytes, n), KS_OK);
  free(bytes);
  ids[0] = ks_sampler_pid(&a, 88, 0);
  ids[1] = ks_sampler_pid(&a, 4000, 2);
  ck_assert_uint_ne(ids[0], KS_NONE);
  ck_assert_uint_ne(ids[1], KS_NONE);
  snprintf(path, sizeof(path), "%s/no/such/dir/x.ksr", dir);
  ck_assert_int_ne(ks_srec_open(&rec, path, &a, &a.lay), KS_OK);
  snprintf(path, sizeof(path), "%s/round.ksr", dir);
  ck_assert_int_eq(ks_srec_open(&rec, path, &a, &a.lay), KS_OK);
  ks_srec_only(&rec, &in, ids, 2);
  ks_srec_words(&rec, addrs, words, ok, 3);
  ks_srec_layout(&rec, &a.lay, 5);
  ks_srec_drain(&rec, 6);
  ck_assert_int_eq(ks_srec_close(&rec), KS_OK);
  ck_assert_ptr_nonnull(bytes = read_file(path, &n));
  ks_sampler_init(&b, &in);
  b.emit = count_stack;
  b.emit_ctx = &tl;
  ck_assert_int_eq(ks_srec_replay(&b, bytes, n), KS_OK);
  ck_assert_uint_eq(b.nonly, 2);
  ck_assert_int_eq(ks_intern_pid_get(&in, b.only[0] == ids[0] ? b.only[1] : b.only[0], &v), KS_OK);
  ck_assert_uint_eq(v.num, 4000);
  ck_assert_uint_eq(v.serial, 2);
  ck_assert(b.only[0] == ids[0] || b.only[1] == ids[0]);
  ck_assert_int_eq(b.lay.known, a.lay.known);
  if (a.lay.known) {
    ck_assert_uint_eq(b.lay.offset, a.lay.offset);
    ck_assert_uint_eq(b.lay.shift, a.lay.shift);
  }
  /* Cut anywhere: refused or read up to the cut, never past it. */
  for (size_t cut = 0; cut < n; cut++) {
    ks_sampler_free(&b);
    ks_sampler_init(&b, &in);
    b.emit = count_stack;
    b.emit_ctx = &tl;
    (void)ks_srec_replay(&b, bytes, cut);
    ck_assert_uint_le(b.nonly, 2);
  }
  free(bytes);
  ks_sampler_free(&a);
  ks_sampler_free(&b);
  ks_intern_free(&in);
  tb_tmpdir_remove(dir);
}
END_TEST

START_TEST(test_recorded_otp25) {
  replay_recording("sample_reload_otp25");
}
END_TEST

START_TEST(test_recorded_otp29) {
  replay_recording("sample_reload_otp29");
}
END_TEST

Suite *sample_sink_suite(void) {
  Suite *s = suite_create("sample_sink");
  TCase *tc = tcase_create("commands");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_refusals);
  tcase_add_test(tc, test_recorded_into_a_capture);
  tcase_add_test(tc, test_recorder_round_trip);
  tcase_add_test(tc, test_live_session);
  tcase_add_test(tc, test_recorded_otp25);
  tcase_add_test(tc, test_recorded_otp29);
  suite_add_tcase(s, tc);
  return s;
}
