/* replay.c: feeds a recorded {packet,4} stream through a pipe into a program and times it.
 *
 *   replay [--expect N] [--stats] [--label L] STREAM -- PROGRAM [ARGS...]
 *   replay [--expect N] --inproc STREAM
 *
 * The stream is mmapped (and pre-faulted), the program is forked with a pipe
 * as stdin (F_SETPIPE_SZ to /proc/sys/fs/pipe-max-size on the write end) and
 * a pipe as stdout, which is drained as it runs; the stream is written in
 * 1 MiB writes, then, with --stats, the frames of {kprof, 1, sync} and
 * {kprof, 2, stats}, and stdin is closed. The time is taken with
 * CLOCK_MONOTONIC from the first write to the child's exit; the child's CPU
 * time comes from wait4's rusage.
 *
 * What the program printed is checked:
 *   --stats  (kprof_sink) the stdout frames are decoded with ei; the stats
 *            reply gives trace_events, decode_errors, dropped, unknown...;
 *   default  (frame_only) the line "frames N bytes B ...".
 * With --expect N the run fails loudly (exit 3) unless every message was
 * seen: frame_only's frames == N; kprof_sink's trace_events == N with
 * decode_errors, unknown, dropped, oversized and truncated all 0.
 *
 * --inproc frames the mapped stream in this process with ks_framer_feed and a
 * counting callback (no pipe, no second process): the framing cost alone.
 *
 * Prints one line: RESULT label=L msgs=N bytes=B secs=S user=U sys=S ... .
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <ei.h>

#include "core/ks_frame.h"
#include "ks_event.h"

#define CHUNK (1u << 20)

typedef struct buf {
  unsigned char *p;
  size_t n, cap;
} buf;

static void die(const char *fmt, const char *arg) {
  fprintf(stderr, "replay: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "%s%s\n", errno ? ": " : "", errno ? strerror(errno) : "");
  exit(2);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void append(buf *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n)
      cap *= 2;
    b->p = realloc(b->p, cap);
    if (b->p == NULL)
      die("out of memory%s", "");
    b->cap = cap;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
}

/* {kprof, Ref, Cmd} as term_to_binary writes it on OTP 25, with its length prefix. */
static void command_frame(buf *b, int ref, const char *cmd) {
  unsigned char t[64];
  size_t n = 0, k = strlen(cmd);

  t[n++] = 131;
  t[n++] = 104; t[n++] = 3;
  t[n++] = 100; t[n++] = 0; t[n++] = 5; memcpy(t + n, "kprof", 5); n += 5;
  t[n++] = 97; t[n++] = (unsigned char)ref;
  t[n++] = 100; t[n++] = 0; t[n++] = (unsigned char)k; memcpy(t + n, cmd, k); n += k;
  {
    unsigned char len[4];
    ks_put_be32(len, (uint32_t)n);
    append(b, len, 4);
  }
  append(b, t, n);
}

static long pipe_max(void) {
  FILE *f = fopen("/proc/sys/fs/pipe-max-size", "r");
  long v = 1 << 20;

  if (f != NULL) {
    if (fscanf(f, "%ld", &v) != 1)
      v = 1 << 20;
    fclose(f);
  }
  return v;
}

/* The sink's replies, decoded. */
typedef struct sink_stats {
  int have;
  unsigned long long synced;
  unsigned long long frames, bytes, trace_events, commands, decode_errors, unknown, dropped,
      oversized, empty, truncated, mfas, pids, pipe_size;
  unsigned long long events[KS_EV__COUNT];
} sink_stats;

static int decode_stats_map(const char *p, int *i, sink_stats *st) {
  int arity, k, type, size;
  char key[MAXATOMLEN_UTF8];

  if (ei_decode_map_header(p, i, &arity) != 0)
    return -1;
  for (k = 0; k < arity; k++) {
    unsigned long long v = 0;
    if (ei_decode_atom(p, i, key) != 0 || ei_get_type(p, i, &type, &size) != 0)
      return -1;
    if (strcmp(key, "events") == 0) {
      int n, j, e;
      char kind[MAXATOMLEN_UTF8];
      if (ei_decode_map_header(p, i, &n) != 0)
        return -1;
      for (j = 0; j < n; j++) {
        if (ei_decode_atom(p, i, kind) != 0 || ei_decode_ulonglong(p, i, &v) != 0)
          return -1;
        for (e = 0; e < KS_EV__COUNT; e++)
          if (strcmp(kind, ks_event_kind_names[e]) == 0)
            st->events[e] = v;
      }
      continue;
    }
    if (ei_decode_ulonglong(p, i, &v) != 0) {
      if (ei_skip_term(p, i) != 0)
        return -1;
      continue;
    }
#define KEY(f) else if (strcmp(key, #f) == 0) st->f = v
    if (0) {}
    KEY(frames); KEY(bytes); KEY(trace_events); KEY(commands); KEY(decode_errors);
    KEY(unknown); KEY(dropped); KEY(oversized); KEY(empty); KEY(truncated); KEY(mfas);
    KEY(pids); KEY(pipe_size);
#undef KEY
  }
  st->have = 1;
  return 0;
}

/* {kprof_reply, 1, {synced, N}} and {kprof_reply, 2, #{...}}. */
static int parse_replies(const buf *out, sink_stats *st) {
  size_t off = 0;

  while (out->n - off >= 4) {
    uint32_t len = ks_be32(out->p + off);
    const char *p = (const char *)out->p + off + 4;
    int i = 0, ver, arity;
    long ref;
    char tag[MAXATOMLEN_UTF8];

    if (out->n - off - 4 < len)
      return -1;
    if (ei_decode_version(p, &i, &ver) || ei_decode_tuple_header(p, &i, &arity) ||
        arity != 3 || ei_decode_atom(p, &i, tag))
      return -1;
    if (strcmp(tag, "kprof_reply") == 0 && ei_decode_long(p, &i, &ref) == 0) {
      if (ref == 1) {
        char a[MAXATOMLEN_UTF8];
        if (ei_decode_tuple_header(p, &i, &arity) || arity != 2 || ei_decode_atom(p, &i, a) ||
            strcmp(a, "synced") != 0 || ei_decode_ulonglong(p, &i, &st->synced))
          return -1;
      } else if (ref == 2 && decode_stats_map(p, &i, st) != 0) {
        return -1;
      }
    }
    off += 4 + (size_t)len;
  }
  return off == out->n ? 0 : -1;
}

static void count_cb(void *ctx, const unsigned char *frame, size_t len) {
  (void)frame;
  (void)len;
  ++*(uint64_t *)ctx;
}

static void usage(void) {
  fprintf(stderr, "usage: replay [--expect N] [--stats] [--label L] STREAM -- PROGRAM [ARGS...]\n"
                  "       replay [--expect N] --inproc STREAM\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *path = NULL, *label = NULL;
  char **prog = NULL;
  long long expect = -1;
  int stats = 0, inproc = 0, i, in_pipe[2], out_pipe[2], status;
  const unsigned char *map;
  struct stat sb;
  size_t size, off = 0;
  buf tail = {0}, out = {0};
  double t0, t_written = 0, t1, user, sys;
  struct rusage ru;
  pid_t pid;
  int fd, bad = 0;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--expect") == 0 && i + 1 < argc)
      expect = atoll(argv[++i]);
    else if (strcmp(argv[i], "--stats") == 0)
      stats = 1;
    else if (strcmp(argv[i], "--inproc") == 0)
      inproc = 1;
    else if (strcmp(argv[i], "--label") == 0 && i + 1 < argc)
      label = argv[++i];
    else if (strcmp(argv[i], "--") == 0) {
      prog = argv + i + 1;
      break;
    } else if (path == NULL)
      path = argv[i];
    else
      usage();
  }
  if (path == NULL || (!inproc && (prog == NULL || prog[0] == NULL)))
    usage();
  if (label == NULL)
    label = inproc ? "inproc" : prog[0];

  fd = open(path, O_RDONLY);
  if (fd < 0 || fstat(fd, &sb) != 0)
    die("%s", path);
  size = (size_t)sb.st_size;
  map = mmap(NULL, size ? size : 1, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  if (map == MAP_FAILED)
    die("mmap %s", path);
  close(fd);
  (void)madvise((void *)map, size, MADV_SEQUENTIAL | MADV_WILLNEED);
  {
    /* Touch every page so no run pays for page faults. */
    volatile unsigned char sum = 0;
    size_t k;
    for (k = 0; k < size; k += 4096)
      sum ^= map[k];
    (void)sum;
  }

  if (inproc) {
    ks_framer fr;
    uint64_t n = 0;
    if (ks_framer_init(&fr, 1u << 20, 64u << 20) != KS_OK)
      die("out of memory%s", "");
    t0 = now();
    for (off = 0; off < size; off += CHUNK)
      ks_framer_feed(&fr, map + off, size - off < CHUNK ? size - off : CHUNK, count_cb, &n);
    t1 = now();
    printf("RESULT label=%s msgs=%llu bytes=%zu secs=%.6f user=0 sys=0\n", label,
           (unsigned long long)n, size, t1 - t0);
    if (expect >= 0 && (long long)n != expect) {
      fprintf(stderr, "replay: FAIL: framed %llu messages, the stream has %lld\n",
              (unsigned long long)n, expect);
      return 3;
    }
    return 0;
  }

  if (stats) {
    command_frame(&tail, 1, "sync");
    command_frame(&tail, 2, "stats");
  }
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0)
    die("pipe%s", "");
  (void)fcntl(in_pipe[1], F_SETPIPE_SZ, (int)pipe_max());
  signal(SIGPIPE, SIG_IGN);
  pid = fork();
  if (pid < 0)
    die("fork%s", "");
  if (pid == 0) {
    if (dup2(in_pipe[0], 0) < 0 || dup2(out_pipe[1], 1) < 0)
      _exit(127);
    execvp(prog[0], prog);
    fprintf(stderr, "replay: exec %s: %s\n", prog[0], strerror(errno));
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);

  t0 = now();
  {
    int wfd = in_pipe[1], rfd = out_pipe[0];
    size_t toff = 0;
    unsigned char rb[65536];
    while (wfd >= 0 || rfd >= 0) {
      struct pollfd pf[2];
      int np = 0, wi = -1, ri = -1;
      if (wfd >= 0) {
        pf[np].fd = wfd; pf[np].events = POLLOUT; wi = np++;
      }
      if (rfd >= 0) {
        pf[np].fd = rfd; pf[np].events = POLLIN; ri = np++;
      }
      if (poll(pf, (nfds_t)np, -1) < 0) {
        if (errno == EINTR)
          continue;
        die("poll%s", "");
      }
      if (wi >= 0 && (pf[wi].revents & (POLLOUT | POLLERR | POLLHUP))) {
        /* The stream, then the command frames. */
        for (;;) {
          const unsigned char *p;
          size_t left;
          ssize_t k;
          if (off < size) {
            p = map + off;
            left = size - off < CHUNK ? size - off : CHUNK;
          } else if (toff < tail.n) {
            p = tail.p + toff;
            left = tail.n - toff;
          } else {
            close(wfd);
            wfd = -1;
            t_written = now();
            break;
          }
          k = write(wfd, p, left);
          if (k < 0 && errno == EINTR)
            continue;
          if (k < 0 && errno == EAGAIN)
            break;
          if (k < 0) {
            fprintf(stderr, "replay: write: %s (the child quit early)\n", strerror(errno));
            close(wfd);
            wfd = -1;
            bad = 1;
            break;
          }
          if (off < size)
            off += (size_t)k;
          else
            toff += (size_t)k;
        }
      }
      if (ri >= 0 && (pf[ri].revents & (POLLIN | POLLERR | POLLHUP))) {
        for (;;) {
          ssize_t k = read(rfd, rb, sizeof(rb));
          if (k > 0) {
            append(&out, rb, (size_t)k);
            continue;
          }
          if (k < 0 && errno == EINTR)
            continue;
          if (k < 0 && errno == EAGAIN)
            break;
          close(rfd);   /* EOF or error */
          rfd = -1;
          break;
        }
      }
    }
  }
  if (wait4(pid, &status, 0, &ru) < 0)
    die("wait4%s", "");
  t1 = now();
  user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
  sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "replay: FAIL: %s exited with status %d (signal %d)\n", prog[0],
            WIFEXITED(status) ? WEXITSTATUS(status) : -1,
            WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    bad = 1;
  }

  if (stats) {
    sink_stats st;
    int e;
    memset(&st, 0, sizeof(st));
    ei_init();
    if (parse_replies(&out, &st) != 0 || !st.have) {
      fprintf(stderr, "replay: FAIL: no readable stats reply from %s (%zu bytes of output)\n",
              prog[0], out.n);
      return 3;
    }
    printf("RESULT label=%s msgs=%llu bytes=%zu secs=%.6f user=%.6f sys=%.6f written=%.6f "
           "frames=%llu trace_events=%llu decode_errors=%llu unknown=%llu dropped=%llu "
           "oversized=%llu empty=%llu truncated=%llu mfas=%llu pids=%llu synced=%llu "
           "pipe_size=%llu",
           label, st.trace_events, size, t1 - t0, user, sys, t_written - t0, st.frames,
           st.trace_events, st.decode_errors, st.unknown, st.dropped, st.oversized, st.empty,
           st.truncated, st.mfas, st.pids, st.synced, st.pipe_size);
    for (e = 0; e < KS_EV__COUNT; e++)
      if (st.events[e] > 0)
        printf(" ev_%s=%llu", ks_event_kind_names[e], st.events[e]);
    printf("\n");
    if (expect >= 0 &&
        ((long long)st.trace_events != expect || st.decode_errors || st.unknown || st.dropped ||
         st.oversized || st.truncated || (long long)st.synced != expect + 1)) {
      fprintf(stderr,
              "replay: FAIL: kprof_sink did not decode every message: the stream has %lld, "
              "trace_events=%llu decode_errors=%llu unknown=%llu dropped=%llu oversized=%llu "
              "truncated=%llu synced=%llu\n",
              expect, st.trace_events, st.decode_errors, st.unknown, st.dropped, st.oversized,
              st.truncated, st.synced);
      return 3;
    }
  } else {
    unsigned long long frames = 0, bytes = 0;
    append(&out, "", 1);
    if (sscanf((const char *)out.p, "frames %llu bytes %llu", &frames, &bytes) != 2) {
      fprintf(stderr, "replay: FAIL: %s printed no frame count\n", prog[0]);
      return 3;
    }
    printf("RESULT label=%s msgs=%llu bytes=%llu secs=%.6f user=%.6f sys=%.6f written=%.6f\n",
           label, frames, bytes, t1 - t0, user, sys, t_written - t0);
    if (expect >= 0 && ((long long)frames != expect || bytes != size)) {
      fprintf(stderr, "replay: FAIL: %s framed %llu messages (%llu bytes), the stream has "
                      "%lld (%zu bytes)\n", prog[0], frames, bytes, expect, size);
      return 3;
    }
  }
  return bad ? 3 : 0;
}
