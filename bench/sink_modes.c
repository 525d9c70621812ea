/* sink_modes.c: the sink's work per message by mode, in one process (`make bench-sink`).
 *
 *   sink_modes STREAM REQUESTS RUNS
 *
 * Everything runs in this process (no pipe, no second process), through
 * ks_sink_feed as main.c feeds what it reads, so the figures are the sink's
 * own work, side by side:
 *   framing only   ks_framer_feed with a counting callback (the limit);
 *   decoded        STREAM (the recorded VM stream of bench/run.sh) decoded and counted;
 *   flame stacks   the same with a flame capture of every process in it
 *                  (flame_start + flame_pids commands first): per-process
 *                  stacks and the call-path tree built from every event;
 *   tier-aggregated  REQUESTS synthetic requests of 10 events each, shaped as
 *                  kprof's tiers make them (a request marker, three tier calls
 *                  in two processes, return_tos, the stop marker, seq_trace
 *                  labels, four identities), after a tiers_start command;
 *                  every request is walked and aggregated into histograms.
 * Prints one RESULT line per mode with the median of RUNS runs (msgs, secs,
 * msgs/s), read by bench/run.sh.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <ei.h>

#include "sink/ks_sink.h"

static double now_s(void) {
  struct timespec t;

  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;

  return x < y ? -1 : x > y;
}

static void drop_output(void *ctx, const unsigned char *frame, size_t len) {
  (void)ctx;
  (void)frame;
  (void)len;
}

static void count_frame(void *ctx, const unsigned char *frame, size_t len) {
  (void)frame;
  (void)len;
  (*(uint64_t *)ctx)++;
}

/* x gets a {packet,4} frame of the term built so far (from its version byte). */
static void frame_of(ei_x_buff *term, ei_x_buff *out) {
  unsigned char len[4];

  ks_put_be32(len, (uint32_t)term->index);
  ei_x_append_buf(out, (const char *)len, 4);
  ei_x_append_buf(out, term->buff, term->index);
}

static void begin_command(ei_x_buff *x, long ref) {
  ei_x_new_with_version(x);
  ei_x_encode_tuple_header(x, 3);
  ei_x_encode_atom(x, "kprof");
  ei_x_encode_long(x, ref);
}

static void feed_term(ks_sink *s, ei_x_buff *term) {
  ei_x_buff f;

  ei_x_new(&f);
  frame_of(term, &f);
  ks_sink_feed(s, f.buff, (size_t)f.index);
  ei_x_free(&f);
  ei_x_free(term);
}

static void pid(ei_x_buff *x, unsigned num) {
  erlang_pid p;

  memset(&p, 0, sizeof(p));
  strcpy(p.node, "bench@host");
  p.num = num;
  p.serial = 0;
  p.creation = 1;
  ei_x_encode_pid(x, &p);
}

static void mfa(ei_x_buff *x, const char *m, const char *f, long a) {
  ei_x_encode_tuple_header(x, 3);
  ei_x_encode_atom(x, m);
  ei_x_encode_atom(x, f);
  ei_x_encode_long(x, a);
}

/* {trace_ts, Pid, call, MFA, {Token(L), Caller[, Identity]}, Ts} */
static void call(ei_x_buff *out, unsigned p, const char *m, const char *f, long a, long label,
                 const char *cm, const char *cf, long ca, long identity, long long ts) {
  ei_x_buff t;

  ei_x_new_with_version(&t);
  ei_x_encode_tuple_header(&t, 6);
  ei_x_encode_atom(&t, "trace_ts");
  pid(&t, p);
  ei_x_encode_atom(&t, "call");
  mfa(&t, m, f, a);
  ei_x_encode_tuple_header(&t, identity >= 0 ? 3 : 2);
  ei_x_encode_tuple_header(&t, 5);
  ei_x_encode_long(&t, 0);
  ei_x_encode_long(&t, label);
  ei_x_encode_long(&t, 0);
  pid(&t, p);
  ei_x_encode_long(&t, 0);
  mfa(&t, cm, cf, ca);
  if (identity >= 0) {
    ei_x_encode_tuple_header(&t, 2);
    ei_x_encode_atom(&t, "route");
    ei_x_encode_long(&t, identity);
  }
  ei_x_encode_longlong(&t, ts);
  frame_of(&t, out);
  ei_x_free(&t);
}

static void return_to(ei_x_buff *out, unsigned p, const char *m, const char *f, long a,
                      long long ts) {
  ei_x_buff t;

  ei_x_new_with_version(&t);
  ei_x_encode_tuple_header(&t, 5);
  ei_x_encode_atom(&t, "trace_ts");
  pid(&t, p);
  ei_x_encode_atom(&t, "return_to");
  mfa(&t, m, f, a);
  ei_x_encode_longlong(&t, ts);
  frame_of(&t, out);
  ei_x_free(&t);
}

/* Requests first .. first + n - 1 as kprof's tiers make them: 10 events each, two
 * processes. *ts runs on from block to block. */
static void tier_stream(ei_x_buff *out, long first, long n, long long *tsp) {
  long long ts = *tsp;
  long r;

  /* The block's room up front (about 1.1 KB a request): ei_x_buff grows by
   * 100 bytes at a time, and the copies of that growth were 96 % of the
   * Ir that bench/ir.sh counted for the whole run, hiding the sink's. */
  ei_x_new(out);
  free(out->buff);
  out->buffsz = (int)(n * 2048);
  out->buff = malloc((size_t)out->buffsz);
  if (out->buff == NULL) {
    fprintf(stderr, "sink_modes: no memory for a block of %ld requests\n", n);
    exit(1);
  }
  for (r = first; r < first + n; r++) {
    unsigned p = 100 + (unsigned)(r % 500), db = 7;
    long label = 1000 + r;
    call(out, p, "kprof_mark", "start", 1, label, "kprof_tiers", "enter", 1, r % 4, ts += 900);
    return_to(out, p, "kprof_tiers", "enter", 1, ts += 300);
    call(out, p, "shop_http", "handle", 1, label, "kprof", "request", 2, -1, ts += 2000);
    call(out, db, "shop_db", "query", 2, label, "gen_server", "try_handle_call", 4, -1,
         ts += 5000);
    return_to(out, db, "gen_server", "try_handle_call", 4, ts += 20000);
    call(out, p, "shop_tpl", "render", 2, label, "shop_http", "handle", 1, -1, ts += 3000);
    return_to(out, p, "shop_http", "handle", 1, ts += 8000);
    return_to(out, p, "kprof", "request", 2, ts += 1000);
    call(out, p, "kprof_mark", "stop", 0, label, "kprof_tiers", "leave", 1, -1, ts += 500);
    return_to(out, p, "kprof_tiers", "leave", 1, ts += 300);
  }
  *tsp = ts;
}

static void tiers_start(ks_sink *s) {
  static const struct { const char *m, *f; long a; const char *role; long tier; } specs[] = {
    {"shop_http", "handle", 1, NULL, 0}, {"shop_db", "query", 2, NULL, 1},
    {"shop_tpl", "render", 2, NULL, 2}, {"kprof_mark", "start", 1, "start", 0},
    {"kprof_mark", "stop", 0, "stop", 0}};
  ei_x_buff x;
  size_t k;

  begin_command(&x, 1);
  ei_x_encode_tuple_header(&x, 3);
  ei_x_encode_atom(&x, "tiers_start");
  ei_x_encode_list_header(&x, (long)(sizeof(specs) / sizeof(specs[0])));
  for (k = 0; k < sizeof(specs) / sizeof(specs[0]); k++) {
    ei_x_encode_tuple_header(&x, 4);
    ei_x_encode_atom(&x, specs[k].m);
    ei_x_encode_atom(&x, specs[k].f);
    ei_x_encode_long(&x, specs[k].a);
    if (specs[k].role != NULL)
      ei_x_encode_atom(&x, specs[k].role);
    else
      ei_x_encode_long(&x, specs[k].tier);
  }
  ei_x_encode_empty_list(&x);
  ei_x_encode_empty_list(&x);
  feed_term(s, &x);
}

/* A capture of every process the sink has seen (the stream was fed once). */
static void flame_all(ks_sink *s) {
  ei_x_buff x;
  uint32_t k;
  ks_pid_view v;
  long n = 0;

  begin_command(&x, 2);
  ei_x_encode_tuple_header(&x, 3);
  ei_x_encode_atom(&x, "flame_start");
  ei_x_encode_long(&x, 1);
  ei_x_encode_empty_list(&x);
  feed_term(s, &x);
  begin_command(&x, 3);
  ei_x_encode_tuple_header(&x, 3);
  ei_x_encode_atom(&x, "flame_pids");
  ei_x_encode_long(&x, 1);
  for (k = 0; k < s->in.n_pids; k++)
    n += ks_intern_pid_get(&s->in, k, &v) == KS_OK && !v.is_port;
  ei_x_encode_list_header(&x, n);
  for (k = 0; k < s->in.n_pids; k++) {
    erlang_pid p;
    if (ks_intern_pid_get(&s->in, k, &v) != KS_OK || v.is_port)
      continue;
    memset(&p, 0, sizeof(p));
    snprintf(p.node, sizeof(p.node), "%s", v.node);
    p.num = v.num;
    p.serial = v.serial;
    p.creation = v.creation;
    ei_x_encode_tuple_header(&x, 2);
    ei_x_encode_pid(&x, &p);
    ei_x_encode_atom(&x, "undefined");
  }
  ei_x_encode_empty_list(&x);
  feed_term(s, &x);
}

static void report(const char *label, uint64_t msgs, double *secs, int runs) {
  double med;

  qsort(secs, (size_t)runs, sizeof(double), cmp_double);
  med = secs[runs / 2];
  printf("RESULT mode=%s msgs=%llu secs=%.4f rate=%.0f\n", label, (unsigned long long)msgs, med,
         (double)msgs / med);
  fflush(stdout);
}

int main(int argc, char **argv) {
  int fd, runs, r;
  struct stat st;
  const unsigned char *stream;
  long requests;
  double t[64];
  uint64_t frames = 0, events = 0;

  if (argc != 4 || (runs = atoi(argv[3])) < 1 || runs > 64 || (requests = atol(argv[2])) < 1) {
    fprintf(stderr, "usage: sink_modes STREAM REQUESTS RUNS\n");
    return 2;
  }
  if ((fd = open(argv[1], O_RDONLY)) < 0 || fstat(fd, &st) != 0) {
    perror(argv[1]);
    return 1;
  }
  stream = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  if (stream == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  ei_init();

  /* SINK_MODES_ONLY=tier_aggregated (or another mode) runs that one alone (profiling). */
  const char *only = getenv("SINK_MODES_ONLY");
#define RUN(m) (only == NULL || strcmp(only, m) == 0)
  for (r = 0; r < runs && RUN("framing_only"); r++) {   /* framing only */
    ks_framer fr;
    ks_framer_init(&fr, 1u << 20, 64u << 20);
    frames = 0;
    t[r] = now_s();
    ks_framer_feed(&fr, stream, (size_t)st.st_size, count_frame, &frames);
    t[r] = now_s() - t[r];
    ks_framer_free(&fr);
  }
  if (RUN("framing_only"))
    report("framing_only", frames, t, runs);

  for (r = 0; r < runs && RUN("decoded"); r++) {   /* decoded */
    ks_sink s;
    ks_sink_init(&s, NULL, drop_output, NULL);
    t[r] = now_s();
    ks_sink_feed(&s, stream, (size_t)st.st_size);
    t[r] = now_s() - t[r];
    events = s.st.trace_events;
    ks_sink_free(&s);
  }
  if (RUN("decoded"))
    report("decoded", events, t, runs);

  for (r = 0; r < runs && RUN("flame_stacks"); r++) {   /* flame stacks: every process captured */
    ks_sink s;
    ks_sink_init(&s, NULL, drop_output, NULL);
    ks_sink_feed(&s, stream, (size_t)st.st_size);   /* learns the pids */
    flame_all(&s);
    if (!s.flame.active) {
      fprintf(stderr, "sink_modes: the flame capture did not start\n");
      return 1;
    }
    ks_stats_reset(&s.st);
    t[r] = now_s();
    ks_sink_feed(&s, stream, (size_t)st.st_size);
    t[r] = now_s() - t[r];
    events = s.st.trace_events;
    if (r == 0) {
      const ks_fcounters *k = &s.flame.cap[0].cp.k;
      fprintf(stderr, "sink_modes: flame: %u processes, %llu events changed a stack; "
              "dropped procs %llu, depth capped %llu, overflow %llu, lost frames %llu\n",
              s.flame.cap[0].cp.nprocs, (unsigned long long)k->events,
              (unsigned long long)k->dropped_procs, (unsigned long long)k->depth_capped,
              (unsigned long long)k->stack_overflow, (unsigned long long)k->lost_frames);
    }
    ks_sink_free(&s);
  }
  if (RUN("flame_stacks"))
    report("flame_stacks", events, t, runs);

  for (r = 0; r < runs && RUN("tier_aggregated"); r++) {   /* tier-aggregated: in blocks */
    ks_sink s;
    long first;
    long long ts = -576460751000000000LL;
    double t0;
    ks_sink_init(&s, NULL, drop_output, NULL);
    tiers_start(&s);
    if (!s.tiers.active) {
      fprintf(stderr, "sink_modes: tiers_start failed\n");
      return 1;
    }
    t[r] = 0;
    for (first = 0; first < requests; first += 10000) {
      ei_x_buff block;
      tier_stream(&block, first, requests - first < 10000 ? requests - first : 10000, &ts);
      t0 = now_s();
      ks_sink_feed(&s, block.buff, (size_t)block.index);
      t[r] += now_s() - t0;
      ei_x_free(&block);
    }
    t0 = now_s();
    ks_tiers_flush(&s.tiers, 1);
    t[r] += now_s() - t0;
    events = s.st.trace_events;
    if (s.tiers.requests < (uint64_t)requests * 9 / 10) {
      fprintf(stderr, "sink_modes: %llu of %ld requests recorded\n",
              (unsigned long long)s.tiers.requests, requests);
      return 1;
    }
    ks_sink_free(&s);
  }
  if (RUN("tier_aggregated"))
    report("tier_aggregated", events, t, runs);
  return 0;
}
