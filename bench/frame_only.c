/* frame_only.c: the framing-only reader, the limit kprof_sink is measured against.
 *
 *   frame_only < STREAM      prints "frames N bytes B" at end of input
 *
 * Reads stdin with read() into the sink's own ks_framer the way main.c's file
 * path does (ks_framer_space with 64 KiB free, the default 1 MiB buffer), after
 * enlarging the stdin pipe to /proc/sys/fs/pipe-max-size as kprof_sink does,
 * and hands every frame to a callback that only counts it. Everything kprof_sink
 * does beyond this is decoding, interning and counting.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/ks_frame.h"
#include "core/ks_platform.h"

static void count(void *ctx, const unsigned char *frame, size_t len) {
  (void)frame;
  (void)len;
  ++*(uint64_t *)ctx;
}

int main(void) {
  ks_framer fr;
  uint64_t n = 0;

  (void)ks_pipe_enlarge(STDIN_FILENO, 0);   /* as kprof_sink does; not a pipe: harmless */
  if (ks_framer_init(&fr, 1u << 20, 64u << 20) != KS_OK) {
    fprintf(stderr, "frame_only: out of memory\n");
    return 1;
  }
  for (;;) {
    unsigned char *p;
    size_t room;
    ssize_t k;
    if (ks_framer_space(&fr, 64 * 1024, &p, &room) != KS_OK) {
      fprintf(stderr, "frame_only: out of memory\n");
      return 1;
    }
    k = read(STDIN_FILENO, p, room);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      perror("frame_only: read");
      return 1;
    }
    if (k == 0)
      break;
    ks_framer_commit(&fr, (size_t)k, count, &n);
  }
  /* Frames with a payload, like kprof_sink's trace_events; empty ones apart. */
  printf("frames %llu bytes %llu empty %llu pending %zu\n", (unsigned long long)n,
         (unsigned long long)fr.bytes, (unsigned long long)fr.empty, ks_framer_pending(&fr));
  ks_framer_free(&fr);
  return 0;
}
