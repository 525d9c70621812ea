/* ring_drain.c: the sink reads the writers' rings and merges them by time.
 *
 * Each writer thread has a ring of its own (include/ks_ring.h), so events
 * of one process are in several rings as it moves between schedulers, and
 * events that depend on each other (a send and what its receiver does) may
 * be in two rings. The tiers and flame code need each process's events in
 * the order they happened, and a word defined before any event names it.
 *
 * Say q is before r when q was published before r's time was taken: a
 * process's last event on the scheduler it left and its first on the next
 * (the VM hands a process over through its run queues, after the NIF
 * returned), an event and the next of the same thread, a word's definition
 * and the events that name it (the NIF takes the time after writing the
 * definitions). Then q's time <= r's: one clock for all writers. A drain:
 *   1. reads each ring's head (cursor `first`);
 *   2. walks each ring up to it; W = the newest time of any event walked by
 *      a step 2 or 3 of this drain's predecessors, or this step 2;
 *   3. reads each head again and walks up to it;
 *   4. hands on the walked events of time <= W, merged by time (a heap of
 *      rings: each ring is in time order already), ring order among equals.
 * Walking a record reads it if it is a definition.
 * When r is handed on, every q before r was walked (so its definitions were
 * read, and it is handed on before r, in this merge or an earlier one):
 *   - r walked in step 2: r was published before step 1 read its ring, q
 *     before r, and step 3 reads q's ring after step 1 ended: q is walked.
 *   - r walked in step 3 only, with time <= W: W is the time of an event
 *     published before step 1 ended, so r's time was taken before then (the
 *     clock, in ns, moves on within the microseconds of a drain), and q,
 *     published earlier still, was walked by step 3.
 * Every event published before a drain's step 1 has a time <= W: the drain
 * hands it on (unless `max` stops it: it goes first at the next). Events
 * walked but past W wait in their ring for the next drain (ring_pace.c).
 * test_ring checks this with writers interleaved with a drain's steps and
 * with writers on threads of their own. The reader checks it as it goes:
 * an event of a process older than the last one of that process it handed
 * on is counted in `disorder` (stats: ring_disorder; 0 unless the writers'
 * clocks disagree).
 */
#include <stdlib.h>

#include "ks_ring_reader.h"

static uint32_t word0_len(uint64_t w0) {
  return (uint32_t)(w0 >> 32) & 0xffff;
}

static uint64_t word0_at(const ks_ring_cursor *c, uint64_t mask, uint64_t pos) {
  uint64_t w0;

  memcpy(&w0, c->data + (pos & mask), sizeof(w0));
  return w0;
}

/* An event's time (a record too short for one is refused later: any time will do). */
static int64_t event_time(const ks_ring_cursor *c, uint64_t mask, uint64_t pos, uint32_t len) {
  int64_t ts;

  if (len < 16)
    return INT64_MIN;
  memcpy(&ts, c->data + ((pos + 8) & mask), sizeof(ts));
  return ts;
}

/* The ring's head, if a writer could have written it (else the ring is given up: counted). */
static uint64_t head_of(ks_ring_reader *r, ks_ring_cursor *c) {
  uint64_t head = atomic_load_explicit(&c->r->head, memory_order_acquire);

  if (c->dead)
    return c->scan;
  if (head < c->scan || head - c->tail > r->size) {
    c->dead = 1;
    r->bad++;
    return c->scan;
  }
  return head;
}

/* A record as a writer may write it at pos, within `room` bytes (its length in word 0). */
static int record_ok(uint64_t w0, uint64_t pos, uint64_t room) {
  uint32_t len = word0_len(w0);

  return (uint32_t)w0 == ks_ring_stamp(pos) && len >= 8 && (len & 7) == 0 && len <= room;
}

/* Walks c up to `upto`: definitions read, events' times into *newest. */
static void walk(ks_ring_reader *r, ks_intern *in, ks_ring_cursor *c, uint64_t upto,
                 int64_t *newest) {
  uint64_t mask = r->size - 1;

  while (!c->broken && c->scan < upto) {
    unsigned char *rec = c->data + (c->scan & mask);
    uint64_t w0 = word0_at(c, mask, c->scan);
    uint32_t len = word0_len(w0);
    unsigned type = (unsigned)(w0 >> 48) & 0xff;
    if (!record_ok(w0, c->scan, upto - c->scan)) {
      /* A writer broke the format: nothing after it can be trusted. */
      c->broken = 1;
      r->bad++;
      break;
    }
    if (ks_ring_is_event(type)) {
      int64_t ts = event_time(c, mask, c->scan, len);
      if (ts > *newest)
        *newest = ts;
    } else {
      ks_ring_count(r, ks_ring_read_record(r, in, rec, len, type, (unsigned)(w0 >> 56), NULL,
                                           NULL));
    }
    c->scan += len;
    c->records++;
    c->bytes += len;
    r->records++;
    r->bytes += len;
  }
}

/* The record at c's tail as walked, unless a writer has rewritten it since (written
 * behind its head: its word 0 no longer one for its place): then what is left walked
 * is given up, counted in `bad`, and 0. */
static int tail_intact(ks_ring_reader *r, ks_ring_cursor *c, uint64_t w0) {
  if (record_ok(w0, c->tail, c->scan - c->tail))
    return 1;
  c->tail = c->scan;
  r->bad++;
  return 0;
}

/* Moves c's tail past definitions (read when walked): 1 and its time if an event is
 * next, 0 if nothing walked is left (or a record was rewritten: tail_intact; read again
 * it could say a length that never moves the tail). */
static int next_event(ks_ring_reader *r, ks_ring_cursor *c, uint64_t mask, int64_t *ts) {
  while (c->tail < c->scan) {
    uint64_t w0 = word0_at(c, mask, c->tail);
    if (!tail_intact(r, c, w0))
      return 0;
    if (ks_ring_is_event((unsigned)(w0 >> 48) & 0xff)) {
      *ts = event_time(c, mask, c->tail, word0_len(w0));
      return 1;
    }
    c->tail += word0_len(w0);
  }
  return 0;
}

/* The merge's heap of rings, by the time of each one's next event, then ring. */
static int heap_less(const ks_ring_reader *r, unsigned a, unsigned b) {
  return r->heap_ts[a] < r->heap_ts[b] ||
         (r->heap_ts[a] == r->heap_ts[b] && r->heap[a] < r->heap[b]);
}

static void heap_swap(ks_ring_reader *r, unsigned a, unsigned b) {
  unsigned k = r->heap[a];
  int64_t ts = r->heap_ts[a];

  r->heap[a] = r->heap[b];
  r->heap_ts[a] = r->heap_ts[b];
  r->heap[b] = k;
  r->heap_ts[b] = ts;
}

static void heap_push(ks_ring_reader *r, unsigned *n, unsigned ring, int64_t ts) {
  unsigned at = (*n)++;

  r->heap[at] = ring;
  r->heap_ts[at] = ts;
  while (at > 0 && heap_less(r, at, (at - 1) / 2)) {
    heap_swap(r, at, (at - 1) / 2);
    at = (at - 1) / 2;
  }
}

static void heap_pop(ks_ring_reader *r, unsigned *n) {
  unsigned at = 0;

  heap_swap(r, 0, --*n);
  for (;;) {
    unsigned least = at, kid = 2 * at + 1;
    if (kid < *n && heap_less(r, kid, least))
      least = kid;
    if (kid + 1 < *n && heap_less(r, kid + 1, least))
      least = kid + 1;
    if (least == at)
      return;
    heap_swap(r, at, least);
    at = least;
  }
}

/* The event on its way to the caller's fn, its process's order checked. */
typedef struct handing {
  ks_ring_reader *r;
  ks_ring_event_fn fn;
  void *ctx;
} handing;

static void hand_on(void *ctx, ks_decoded *d) {
  handing *h = ctx;
  ks_ring_reader *r = h->r;
  uint32_t pid = d->ev.pid, old = r->pid_ts_cap;

  if (pid >= old && ks_grow(&r->pid_ts, &r->pid_ts_cap, pid, 1024, sizeof(*r->pid_ts)) == KS_OK)
    while (old < r->pid_ts_cap)
      r->pid_ts[old++] = INT64_MIN;
  if (pid < r->pid_ts_cap) {
    if (d->ev.ts < r->pid_ts[pid])
      r->disorder++;
    else
      r->pid_ts[pid] = d->ev.ts;
  }
  h->fn(h->ctx, d);
}

/* Step 4: the walked events of time <= upto, merged; returns how many. */
static size_t merge(ks_ring_reader *r, ks_intern *in, int64_t upto, size_t max,
                    ks_ring_event_fn fn, void *ctx) {
  uint64_t mask = r->size - 1;
  unsigned k, n = 0;
  size_t handed = 0;
  handing h = {r, fn, ctx};
  int64_t ts;

  for (k = 0; k < r->rings; k++)
    if (next_event(r, &r->cur[k], mask, &ts) && ts <= upto)
      heap_push(r, &n, k, ts);
  while (n > 0 && handed < max) {
    ks_ring_cursor *c = &r->cur[r->heap[0]];
    uint64_t w0 = word0_at(c, mask, c->tail);
    uint32_t len = word0_len(w0);
    k = r->heap[0];
    heap_pop(r, &n);
    /* As next_event found it, unless rewritten in between. */
    if (!tail_intact(r, c, w0))
      continue;
    ks_ring_count(r, ks_ring_read_record(r, in, c->data + (c->tail & mask), len,
                                         (unsigned)(w0 >> 48) & 0xff, (unsigned)(w0 >> 56),
                                         hand_on, &h));
    c->tail += len;
    handed++;
    if (next_event(r, c, mask, &ts) && ts <= upto)
      heap_push(r, &n, k, ts);
  }
  return handed;
}

/* After the merge: the ring's tail published, a broken ring skipped to its head
 * once the events before the break are out, its counters taken. */
static void settle(ks_ring_reader *r, ks_ring_cursor *c) {
  uint64_t mask = r->size - 1, drops, unsupported;
  int64_t ts;

  if (!next_event(r, c, mask, &ts) && c->broken && !c->dead) {
    uint64_t head = atomic_load_explicit(&c->r->head, memory_order_acquire);
    if (head >= c->scan && head - c->tail <= r->size)
      c->tail = c->scan = head;
    else
      c->dead = 1;
    c->broken = 0;
  }
  if (c->tail != atomic_load_explicit(&c->r->tail, memory_order_relaxed))
    atomic_store_explicit(&c->r->tail, c->tail, memory_order_release);
  drops = atomic_load_explicit(&c->r->drops, memory_order_relaxed);
  if (drops > c->drops_seen) {
    r->drops_seen += drops - c->drops_seen;
    c->drops_seen = drops;
    r->drops_pending = 1;
  }
  unsupported = atomic_load_explicit(&c->r->unsupported, memory_order_relaxed);
  if (unsupported > c->unsupported_seen) {
    r->unsupported_seen += unsupported - c->unsupported_seen;
    c->unsupported_seen = unsupported;
  }
}

size_t ks_ring_drain(ks_ring_reader *r, ks_intern *in, size_t max, ks_ring_event_fn fn,
                     void *ctx) {
  int64_t upto, newest;
  size_t handed;
  unsigned k;

  if (r->h == NULL)
    return 0;
  r->fullest = 0;
  for (k = 0; k < r->rings; k++) {
    r->cur[k].first = head_of(r, &r->cur[k]);
    if (r->cur[k].first - r->cur[k].tail > r->fullest)
      r->fullest = r->cur[k].first - r->cur[k].tail;
    if (r->look != NULL)
      r->look(r->look_ctx, k);
  }
  upto = r->watermark;
  for (k = 0; k < r->rings; k++)
    walk(r, in, &r->cur[k], r->cur[k].first, &upto);
  newest = upto;
  for (k = 0; k < r->rings; k++)
    walk(r, in, &r->cur[k], head_of(r, &r->cur[k]), &newest);
  handed = merge(r, in, upto, max, fn, ctx);
  r->watermark = newest;
  for (k = 0; k < r->rings; k++)
    settle(r, &r->cur[k]);
  /* Alive, whether or not there was anything to read (ks_ring.h, `reads`). */
  atomic_fetch_add_explicit(&r->h->reads, 1, memory_order_relaxed);
  return handed;
}
