/* ks_frame.h: {packet,4} framing of a byte stream that arrives in arbitrary pieces. */
#ifndef KS_FRAME_H
#define KS_FRAME_H

#include "ks.h"

typedef void (*ks_frame_cb)(void *ctx, const unsigned char *frame, size_t len);

/*
 * One buffer: [start, end) holds bytes read but not yet framed. Whole frames
 * are handed to the callback in place (no copy); a frame cut by a read waits
 * for the rest. A frame longer than max_frame is never buffered: its bytes are
 * discarded as they arrive and it is counted.
 */
typedef struct ks_framer {
  unsigned char *buf;
  size_t cap, base_cap;
  size_t start, end;
  size_t max_frame;
  uint64_t skip;        /* bytes of an oversized frame still to discard */
  uint64_t frames, bytes, empty, oversized;
} ks_framer;

int ks_framer_init(ks_framer *f, size_t cap, size_t max_frame);
void ks_framer_free(ks_framer *f);
/* Where the next read may write, and how much: always at least min_free bytes. */
int ks_framer_space(ks_framer *f, size_t min_free, unsigned char **p, size_t *n);
/* The next n bytes were written at the space given: frame them. */
void ks_framer_commit(ks_framer *f, size_t n, ks_frame_cb cb, void *ctx);
/* Copies data in and frames it (tests, fuzzers). */
int ks_framer_feed(ks_framer *f, const void *data, size_t n, ks_frame_cb cb, void *ctx);
/* Bytes of an unfinished frame (counted as truncated at end of input). */
size_t ks_framer_pending(const ks_framer *f);
/* The owner's `reset`: the counters start again (what is buffered stays). */
void ks_framer_reset_counts(ks_framer *f);

#endif
