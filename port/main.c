/* main.c: kprof_sink's event loop. stdin is read into the framer, replies go out with uv_write.
 *
 *   kprof_sink [--max-frame BYTES] [--read-buf BYTES] [--pipe-size BYTES] [--max-pids N]
 *
 * --max-pids caps the processes (and ports) that hold an id at once (2^20 by
 * default); an exited process's id is released (port/sink/pid_reclaim.c).
 *
 * While the kprof_tracer NIF writes to rings (port/ring/ring.c), a timer reads
 * them, after a wait each drain sets (port/ring/ring_pace.c: 1 to 16 ms); the
 * timer runs only while rings are open.
 *
 * The sink lives as long as its stdin: at end of file it stops reading, lets
 * the writes it owes drain (close_out), and exits 0.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <ei.h>
#include <uv.h>

#include "core/ks_platform.h"
#include "proto/ks_proto.h"
#include "sink/ks_sink.h"
#include "record/ks_record.h"

typedef struct out_req {
  uv_write_t req;
  uv_buf_t buf;
} out_req;

static uv_loop_t *loop;
static uv_pipe_t in_pipe, out_pipe;
static uv_timer_t ring_timer, sample_timer;
static int ring_timer_on, sample_timer_on;   /* sample_timer_on: its period in ms */
static int out_is_pipe;
static ks_sink sink;

static void on_written(uv_write_t *req, int status) {
  out_req *w = (out_req *)req;

  if (status < 0)
    fprintf(stderr, "kprof_sink: write: %s\n", uv_strerror(status));
  free(w->buf.base);
  free(w);
}

/* Never blocks: a pipe write is queued by libuv; a file (tests) is written directly. */
static void emit(void *ctx, const unsigned char *frame, size_t len) {
  out_req *w;

  if (!out_is_pipe) {
    size_t off = 0;
    while (off < len) {
      ssize_t k = write(STDOUT_FILENO, frame + off, len - off);
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        return;
      off += (size_t)k;
    }
    return;
  }
  w = malloc(sizeof(*w));
  if (w == NULL)
    return;
  w->buf.base = malloc(len);
  if (w->buf.base == NULL) {
    free(w);
    return;
  }
  memcpy(w->buf.base, frame, len);
  w->buf.len = len;
  if (uv_write(&w->req, (uv_stream_t *)&out_pipe, &w->buf, 1, on_written) < 0) {
    free(w->buf.base);
    free(w);
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  unsigned char *p;
  size_t n;

  if (ks_framer_space(&sink.fr, 64 * 1024, &p, &n) != KS_OK) {
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  buf->base = (char *)p;
  buf->len = n;
}

/* One shot: each drain sets the wait before the next (ring_pace.c). */
static void on_ring_timer(uv_timer_t *t) {
  ks_sink_poll_ring(&sink);
  if (sink.ring.h != NULL)
    uv_timer_start(&ring_timer, on_ring_timer, ks_sink_ring_wait(&sink), 0);
  else
    ring_timer_on = 0;
}

static void watch_ring(void);

static void on_sample_timer(uv_timer_t *t) {
  ks_sink_poll_sample(&sink);
  watch_ring();   /* the session may have ended by itself (the VM gone) */
}

/* A command may have opened or closed the ring, or started or stopped sampling. */
static void watch_ring(void) {
  int sampling = ks_sampling_active(&sink.sampling);

  if (sink.ring.h != NULL && !ring_timer_on) {
    uv_timer_start(&ring_timer, on_ring_timer, 1, 0);
    ring_timer_on = 1;
  } else if (sink.ring.h == NULL && ring_timer_on) {
    uv_timer_stop(&ring_timer);
    ring_timer_on = 0;
  }
  if (sampling && sample_timer_on != ks_sampling_drain_ms(&sink.sampling)) {
    sample_timer_on = ks_sampling_drain_ms(&sink.sampling);
    uv_timer_start(&sample_timer, on_sample_timer, (uint64_t)sample_timer_on,
                   (uint64_t)sample_timer_on);
  } else if (!sampling && sample_timer_on) {
    uv_timer_stop(&sample_timer);
    sample_timer_on = 0;
  }
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  if (nread > 0) {
    ks_sink_read(&sink, (size_t)nread);
    watch_ring();
    return;
  }
  if (nread == 0)
    return;
  if (nread != UV_EOF)
    fprintf(stderr, "kprof_sink: read: %s\n", uv_strerror((int)nread));
  ks_sink_eof(&sink);
  uv_read_stop(stream);
  uv_close((uv_handle_t *)stream, NULL);
  uv_timer_stop(&ring_timer);
  uv_close((uv_handle_t *)&ring_timer, NULL);
  uv_timer_stop(&sample_timer);
  uv_close((uv_handle_t *)&sample_timer, NULL);
  /* stdout stays open: its queued writes keep the loop running until they
   * are written (main closes it then). */
}

/* At end of input, once every reply queued on stdout is written. (Closing it
 * with writes queued would cancel them: libuv calls their callbacks with
 * UV_ECANCELED, and a slow reader lost the replies.) */
static void close_out(void) {
  uv_run(loop, UV_RUN_DEFAULT);
  if (out_is_pipe) {
    uv_close((uv_handle_t *)&out_pipe, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
  }
}

/* Input that is a file (replays, tests): plain blocking reads. */
static void read_file_input(void) {
  for (;;) {
    unsigned char *p;
    size_t n;
    ssize_t k;
    if (ks_framer_space(&sink.fr, 64 * 1024, &p, &n) != KS_OK)
      break;
    k = read(STDIN_FILENO, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    ks_sink_read(&sink, (size_t)k);
  }
  ks_sink_eof(&sink);
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  unsigned long long v;

  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != 0)
    return -1;
  *out = (size_t)v;
  return 0;
}

static void usage(void) {
  fprintf(stderr, "usage: kprof_sink --replay FILE... (kprof_sink --replay --help)\n");
  fprintf(stderr, "usage: kprof_sink [--max-frame BYTES] [--read-buf BYTES] "
                  "[--pipe-size BYTES] [--max-pids N]\n");
}

int main(int argc, char **argv) {
  ks_sink_opts opts;
  size_t pipe_size = 0, max_pids = 0;
  int i, rc;

  if (argc > 1 && strcmp(argv[1], "--replay") == 0)
    return ks_replay_main(argc - 2, argv + 2);   /* a recording's files, no VM */
  ks_sink_default_opts(&opts);
  for (i = 1; i < argc; i += 2) {   /* each option takes a value */
    size_t *dst = NULL;
    if (strcmp(argv[i], "--max-frame") == 0)
      dst = &opts.max_frame;
    else if (strcmp(argv[i], "--read-buf") == 0)
      dst = &opts.read_buf;
    else if (strcmp(argv[i], "--pipe-size") == 0)
      dst = &pipe_size;
    else if (strcmp(argv[i], "--max-pids") == 0)
      dst = &max_pids;
    if (dst == NULL || i + 1 >= argc || parse_size(argv[i + 1], dst) != 0 ||
        (dst == &max_pids && (max_pids == 0 || max_pids > 1u << 30))) {
      usage();
      return 2;
    }
    if (dst == &max_pids)
      opts.limits.max_pids = (uint32_t)max_pids;
  }
  ei_init();
  if (ks_sink_init(&sink, &opts, emit, NULL) != KS_OK) {
    fprintf(stderr, "kprof_sink: out of memory\n");
    return 1;
  }
  loop = uv_default_loop();
  out_is_pipe = uv_guess_handle(STDOUT_FILENO) == UV_NAMED_PIPE;
  if (out_is_pipe) {
    ks_pipe_enlarge(STDOUT_FILENO, pipe_size);
    if (uv_pipe_init(loop, &out_pipe, 0) || uv_pipe_open(&out_pipe, STDOUT_FILENO))
      out_is_pipe = 0;
  }
  if (uv_guess_handle(STDIN_FILENO) == UV_NAMED_PIPE) {
    sink.pipe_size = ks_pipe_enlarge(STDIN_FILENO, pipe_size);
    if ((rc = uv_timer_init(loop, &ring_timer)) || (rc = uv_timer_init(loop, &sample_timer)) ||
        (rc = uv_pipe_init(loop, &in_pipe, 0)) || (rc = uv_pipe_open(&in_pipe, STDIN_FILENO)) ||
        (rc = uv_read_start((uv_stream_t *)&in_pipe, on_alloc, on_read))) {
      fprintf(stderr, "kprof_sink: stdin: %s\n", uv_strerror(rc));
      return 1;
    }
    uv_run(loop, UV_RUN_DEFAULT);
  } else {
    read_file_input();
  }
  close_out();
  uv_loop_close(loop);
  ks_sink_free(&sink);
  return 0;
}
