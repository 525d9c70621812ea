/* frame.c: cuts the input stream into {packet,4} frames, zero-copy where possible. */
#include <stdlib.h>

#include "ks_frame.h"

int ks_framer_init(ks_framer *f, size_t cap, size_t max_frame) {
  memset(f, 0, sizeof(*f));
  if (cap < 64)
    cap = 64;
  f->buf = malloc(cap);
  if (f->buf == NULL)
    return KS_ENOMEM;
  f->cap = f->base_cap = cap;
  f->max_frame = max_frame;
  return KS_OK;
}

void ks_framer_free(ks_framer *f) {
  free(f->buf);
  f->buf = NULL;
}

size_t ks_framer_pending(const ks_framer *f) {
  return (size_t)(f->end - f->start) + (size_t)f->skip;
}

/* Moves unframed bytes to the front; grows to hold `need` bytes from start. */
static int make_room(ks_framer *f, size_t need) {
  size_t have = f->end - f->start;

  if (f->start > 0) {
    memmove(f->buf, f->buf + f->start, have);
    f->start = 0;
    f->end = have;
  }
  if (need > f->cap) {
    size_t cap = f->cap;
    unsigned char *b;
    while (cap < need)
      cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    b = realloc(f->buf, cap);
    if (b == NULL)
      return KS_ENOMEM;
    f->buf = b;
    f->cap = cap;
  }
  return KS_OK;
}

int ks_framer_space(ks_framer *f, size_t min_free, unsigned char **p, size_t *n) {
  size_t have = f->end - f->start, need = have + min_free;

  /* A partial frame whose length is known: make room for all of it at once. */
  if (f->skip == 0 && have >= 4) {
    size_t len = ks_be32(f->buf + f->start);
    if (len <= f->max_frame && 4 + len > need)
      need = 4 + len;
  }
  /* Back to the normal size once a big frame is gone. */
  if (have == 0 && f->cap > f->base_cap && need <= f->base_cap) {
    unsigned char *b = realloc(f->buf, f->base_cap);
    if (b != NULL) {
      f->buf = b;
      f->cap = f->base_cap;
    }
    f->start = f->end = 0;
  }
  if (f->cap - f->end < min_free || f->cap - f->start < need)
    if (make_room(f, need) != KS_OK)
      return KS_ENOMEM;
  *p = f->buf + f->end;
  *n = f->cap - f->end;
  return KS_OK;
}

void ks_framer_commit(ks_framer *f, size_t n, ks_frame_cb cb, void *ctx) {
  f->end += n;
  f->bytes += n;
  for (;;) {
    size_t have = f->end - f->start;
    uint32_t len;

    if (f->skip > 0) {
      size_t d = have < f->skip ? have : (size_t)f->skip;
      f->start += d;
      f->skip -= d;
      if (f->skip > 0)
        break;
      continue;
    }
    if (have < 4)
      break;
    len = ks_be32(f->buf + f->start);
    if (len > f->max_frame) {
      f->oversized++;
      f->start += 4;
      f->skip = len;
      continue;
    }
    if (have - 4 < len)
      break;
    f->frames++;
    if (len == 0)
      f->empty++;
    else
      cb(ctx, f->buf + f->start + 4, len);
    f->start += 4 + (size_t)len;
  }
  if (f->start == f->end)
    f->start = f->end = 0;
}

int ks_framer_feed(ks_framer *f, const void *data, size_t n, ks_frame_cb cb, void *ctx) {
  const unsigned char *d = data;

  while (n > 0) {
    unsigned char *p;
    size_t room, k;
    if (ks_framer_space(f, 1, &p, &room) != KS_OK)
      return KS_ENOMEM;
    k = n < room ? n : room;
    memcpy(p, d, k);
    ks_framer_commit(f, k, cb, ctx);
    d += k;
    n -= k;
  }
  return KS_OK;
}

void ks_framer_reset_counts(ks_framer *f) {
  f->frames = f->bytes = f->empty = f->oversized = 0;
}
