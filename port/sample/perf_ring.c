/* perf_ring.c: reading one perf_event ring (ks_perf.h).
 *
 * The kernel writes records at data_head, the reader frees space by moving
 * data_tail; both count bytes from the ring's start and only grow, so a
 * position in the data is the count modulo its size (a power of two).
 * data_head is read with acquire order (the records before it are then
 * visible) and data_tail written with release order (the kernel may write
 * over what was read only after the reader is done with it). Records are
 * 8-byte aligned, so a header never wraps; a body that wraps the end is
 * copied whole into the reader's scratch buffer.
 */
#include <stdlib.h>

#include "ks_perf.h"

/* The bytes [pos, pos + len) of the ring, contiguous: in place, or copied. */
static const unsigned char *record_at(ks_pring *r, uint64_t pos, size_t len) {
  uint64_t off = pos & (r->size - 1), first;

  if (off + len <= r->size)
    return r->data + off;
  if (len > r->scratch_cap) {
    unsigned char *s = realloc(r->scratch, len);
    if (s == NULL)
      return NULL;
    r->scratch = s;
    r->scratch_cap = len;
  }
  first = r->size - off;
  memcpy(r->scratch, r->data + off, (size_t)first);
  memcpy(r->scratch + first, r->data, len - (size_t)first);
  return r->scratch;
}

uint64_t ks_pring_drain(ks_pring *r, ks_precord_fn fn, void *ctx) {
  uint64_t head = __atomic_load_n(r->head, __ATOMIC_ACQUIRE), tail = *r->tail, start = tail;
  const unsigned char *rec;
  uint16_t size;

  if (head - tail > r->size) {   /* never so far ahead: the reader lost its place */
    r->bad++;
    tail = head;
  }
  while (tail < head) {
    /* The header's size first: it never wraps (8-byte records in a 2^n ring). */
    memcpy(&size, r->data + (tail & (r->size - 1)) + 6, 2);
    if (size < 8 || (size & 7) != 0 || size > head - tail ||
        (rec = record_at(r, tail, size)) == NULL) {
      r->bad++;
      tail = head;   /* nothing after it can be found */
      break;
    }
    fn(ctx, rec, size);
    tail += size;
  }
  __atomic_store_n(r->tail, tail, __ATOMIC_RELEASE);
  return tail - start;
}

void ks_pring_free(ks_pring *r) {
  free(r->scratch);
  r->scratch = NULL;
  r->scratch_cap = 0;
}
