/* fuzz_ring.c: libFuzzer target for the sink's end of the shared-memory rings
 * (port/ring/ring.c, ring_drain.c).
 *
 * The input's first byte picks the path:
 *   bit 0 clear: ks_ring_replay over the rest as a record stream (include/ks_ring.h:
 *     word 0 = stamp, length, type, flags; then the type's fields), record parsing alone;
 *   bit 0 set: real rings (64 KiB each, mapped twice), bits 1-2 their number less one
 *     (the last is the shared one), the rest a script: per step a selector byte, then
 *       selector < 128: a record (word 0 and the bytes its length says) written by the
 *         writer of ring selector % rings with ks_ring_reserve / ks_ring_commit, so its
 *         stamp and the head are right; records straddle the end of the data as the
 *         rings fill and empty, and a full ring is drained (ks_ring_drain) to make room;
 *       selector >= 128: (bit 3 of the first byte clear only) an 8-byte argument and an
 *         act on ring selector % rings, as a broken or hostile writer would do it:
 *         (selector >> 4) & 7 = 0 a drain; 1 its head set to the argument; 2 its head
 *         moved on by 8 * (argument % 64) bytes nobody wrote (stale or zero bytes
 *         published: torn records); 3 the argument written over 8 bytes of what it
 *         holds unread (a length, a type, a time); 4 its owner word set; 5 the
 *         header's `closed`; 6 its tail set (the writer's view of the reader); 7 a
 *         drain of at most (argument % 8) events.
 *     A drain every 8 records and at the end.
 *   bit 3 set ("strict"): no acts; each event's time is the harness's, a serial that
 *     rises in writing order (its low bit the input's, below): then every drain must
 *     leave every ring empty, hand on each event once (never twice: a bitmap of the
 *     serials), in time order within the drain, none of a process before one it wrote
 *     earlier (`disorder`), and every event written must be handed on or counted
 *     (unresolved, bad, full).
 * Every event handed out must be consistent: a kind some record carries (call,
 * return_to, or one of the event record's), ids resolvable in their intern tables
 * (small caps, so they fill: pid, MFA, other pid, name), label and payload slices
 * only with their flags, META only from a meta record, never a wall-clock time.
 *
 * An exit event whose time is odd releases its pid's id at once, from inside the
 * drain as the sink's reclaim may (port/sink/pid_reclaim.c, without its grace): the
 * reader forgets the word, the tables the keys, and the id is handed out again; the
 * tables must stay consistent (every id live or free, never both) and later records
 * of the word resolve or are counted. The rings are made anew every 512 inputs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/ks_ring_reader.h"

#define MAX_RINGS 4
#define SIZE (64u << 10)
#define SERIALS (1u << 16)

static ks_ring_reader ring[MAX_RINGS], replay;
static ks_intern in;
static int ready;
static unsigned runs;

/* The strict path's bookkeeping. */
static uint8_t seen[SERIALS / 8];
static uint64_t serial_base;   /* serials go on rising from input to input */
static int64_t drain_last;   /* the time of the last event handed on in this drain */
static uint64_t handed;
static int strict;

static void fail(const char *what) {
  fprintf(stderr, "fuzz_ring: %s\n", what);
  abort();
}

static int ring_kind(unsigned kind) {
  switch (kind) {
  case KS_EV_CALL: case KS_EV_RETURN_TO: case KS_EV_RETURN_FROM: case KS_EV_EXCEPTION_FROM:
  case KS_EV_IN: case KS_EV_OUT: case KS_EV_IN_EXITING: case KS_EV_OUT_EXITING:
  case KS_EV_OUT_EXITED: case KS_EV_SPAWN: case KS_EV_SPAWNED: case KS_EV_EXIT:
  case KS_EV_REGISTER: case KS_EV_UNREGISTER: case KS_EV_GC_MINOR_START:
  case KS_EV_GC_MINOR_END: case KS_EV_GC_MAJOR_START: case KS_EV_GC_MAJOR_END:
    return 1;
  default:
    return 0;
  }
}

/* Every id handed out is live (its key names it) or free (in the free list), not both. */
static void check_pid_ids(void) {
  uint32_t id, k, free_n = 0;
  ks_pid_view p;

  if (in.n_pid_free > in.n_pids || ks_intern_pids_live(&in) > in.max_pids)
    fail("pid id counts");
  for (id = 0; id < in.n_pids; id++) {
    int live = ks_intern_pid_get(&in, id, &p) == KS_OK;
    for (k = 0; k < in.n_pid_free; k++)
      if (in.pid_free[k] == id) {
        if (live)
          fail("a free pid id still resolves");
        free_n++;
      }
    if (!live && in.pids[id] != KS_NONE)
      fail("a live pid id does not resolve");
  }
  if (free_n != in.n_pid_free)
    fail("free pid ids");
}

static void release_pid(uint32_t id) {
  uint8_t dead[64];
  unsigned k;

  if (id >= sizeof(dead))
    fail("pid id past the cap");
  memset(dead, 0, sizeof(dead));
  dead[id] = 1;
  /* Every reader: they share the intern tables (the sink has one reader). */
  for (k = 0; k < MAX_RINGS; k++)
    if (ks_ring_forget_pids(&ring[k], dead, sizeof(dead)) != KS_OK)
      fail("release");
  if (ks_ring_forget_pids(&replay, dead, sizeof(dead)) != KS_OK ||
      ks_intern_pids_release(&in, dead, sizeof(dead)) != KS_OK)
    fail("release");
  check_pid_ids();
}

/* The strict path: each serial once, in time order within a drain. */
static void check_order(int64_t ts) {
  uint64_t serial = ((uint64_t)ts >> 1) - serial_base;

  if ((uint64_t)ts >> 1 < serial_base || serial >= SERIALS)
    fail("a time the harness never wrote");
  if (seen[serial / 8] & (1u << (serial % 8)))
    fail("an event handed on twice");
  seen[serial / 8] |= (uint8_t)(1u << (serial % 8));
  if (ts < drain_last)
    fail("events out of time order");
  drain_last = ts;
  handed++;
}

static void check(void *ctx, ks_decoded *d) {
  ks_mfa_view v;
  ks_pid_view p;

  if (!ring_kind(d->ev.kind))
    fail("kind");
  if (d->ev.other != KS_NONE && ks_intern_pid_get(&in, d->ev.other, &p) != KS_OK)
    fail("other pid id");
  if (d->ev.name != KS_NONE && ks_intern_term_get(&in, d->ev.name).p == NULL)
    fail("name id");
  if (d->ev.flags & KS_EVF_WALL)
    fail("wall-clock time from the ring");
  if (ks_intern_pid_get(&in, d->ev.pid, &p) != KS_OK)
    fail("pid id");
  if (d->ev.kind == KS_EV_CALL && ks_intern_mfa_get(&in, d->ev.mfa, &v) != KS_OK)
    fail("mfa id");
  if (d->ev.mfa != KS_NONE && ks_intern_mfa_get(&in, d->ev.mfa, &v) != KS_OK)
    fail("return_to mfa id");
  if ((d->ev.flags & KS_EVF_CALLER) && ks_intern_mfa_get(&in, d->ev.caller, &v) != KS_OK)
    fail("caller id");
  if (!!(d->ev.flags & KS_EVF_LABEL) != (d->label.p != NULL) || (d->label.p && d->label.n == 0))
    fail("label slice");
  if (d->payload.p == NULL && d->payload.n != 0)
    fail("payload slice");
  /* Touch the bytes (volatile: the reads stay): ASan checks they are inside the mapping. */
  (void)ctx;
  if (d->label.n > 0)
    (void)*(volatile const unsigned char *)(d->label.p + d->label.n - 1);
  if (d->payload.n > 0)
    (void)*(volatile const unsigned char *)(d->payload.p + d->payload.n - 1);
  if (strict)
    check_order(d->ev.ts);
  if (d->ev.kind == KS_EV_EXIT && (d->ev.ts & 1))
    release_pid(d->ev.pid);
}

/* One reader per number of rings, made anew every 512 inputs (a reader's first
 * drains, the words it has never seen, are where most goes wrong). */
static void setup(void) {
  ks_intern_limits lim = {64, 64, 16};
  unsigned k;

  if (ready && ++runs % 512 != 0)
    return;
  if (ready) {
    for (k = 0; k < MAX_RINGS; k++)
      ks_ring_close(&ring[k]);
    ks_ring_close(&replay);
    ks_intern_free(&in);
  }
  ks_ring_reader_init(&replay);
  if (ks_intern_init(&in, &lim) != KS_OK)
    fail("setup");
  for (k = 0; k < MAX_RINGS; k++) {
    ks_ring_reader_init(&ring[k]);
    if (ks_ring_open(&ring[k], SIZE, k + 1) != KS_OK)
      fail("setup");
    ks_ring_unlink(&ring[k]);
  }
  ready = 1;
}

static void drain(ks_ring_reader *r, size_t max) {
  drain_last = INT64_MIN;
  ks_ring_drain(r, &in, max, check, NULL);
}

/* Whether every ring of r is read up to its head. */
static int empty(const ks_ring_reader *r) {
  unsigned k;

  for (k = 0; k < r->rings; k++)
    if (atomic_load(&r->cur[k].r->tail) != atomic_load(&r->cur[k].r->head))
      return 0;
  return 1;
}

/* The writers of r's rings, from where each stands (a new one every input: the
 * heads are the rings'). */
static void writers(ks_ring_reader *r, ks_ring_writer *w) {
  unsigned k;

  for (k = 0; k < r->rings; k++)
    ks_ring_writer_init(&w[k], r->h, SIZE, k);
}

/* A broken writer's act on ring k (see the top). */
static void act(ks_ring_reader *r, ks_ring_writer *w, unsigned k, unsigned op, uint64_t arg) {
  switch (op) {
  case 0:
    drain(r, SIZE_MAX);
    break;
  case 1:
    w[k].head = arg;
    atomic_store(&w[k].r->head, arg);
    break;
  case 2:
    w[k].head += 8 * (arg % 64);
    atomic_store(&w[k].r->head, w[k].head);
    break;
  case 3:
    memcpy(w[k].data + ((r->cur[k].tail + 8 * (arg >> 58)) & (SIZE - 1)), &arg, 8);
    break;
  case 4:
    atomic_store(&w[k].r->owner, arg);
    break;
  case 5:
    atomic_store(&r->h->closed, (uint32_t)arg & 1);
    break;
  case 6:
    atomic_store(&w[k].r->tail, arg);
    break;
  default:
    drain(r, arg % 8);
    break;
  }
}

/* Writes one record of the input into w; its length, clamped to what is left. */
static size_t write_record(ks_ring_reader *r, ks_ring_writer *w, const uint8_t *at, size_t left,
                           uint64_t *written, uint64_t *serial) {
  uint64_t w0;
  size_t len;
  unsigned char *rec;
  unsigned type;

  memcpy(&w0, at, 8);
  len = (size_t)(w0 >> 32) & 0xffff;
  len = ks_ring_align(len < 8 ? 8 : len);
  if (len > left)
    len = left & ~(size_t)7;
  type = (unsigned)(w0 >> 48) & 0xff;
  if (strict && *serial + 1 >= SERIALS)
    return len;   /* past what the bitmap holds: not written */
  if ((rec = ks_ring_reserve(w, len)) == NULL) {
    /* Full: a drain makes room for any record (they are shorter than a ring). */
    drain(r, SIZE_MAX);
    if ((rec = ks_ring_reserve(w, len)) == NULL) {
      if (strict)
        fail("no room in an empty ring");
      return len;   /* a hostile act closed it or broke its tail: counted as a drop */
    }
  }
  memcpy(rec + 8, at + 8, len - 8);
  if (strict && ks_ring_is_event(type) && len >= 16) {
    int64_t ts = (int64_t)((serial_base + ++*serial) << 1 | ((uint64_t)at[8] & 1));
    memcpy(rec + 8, &ts, 8);
    ++*written;
  }
  ks_ring_commit(w, rec, len, type, (unsigned)(w0 >> 56));
  return len;
}

/* Whether an earlier input's acts left r as no writer could (a ring given up, or
 * broken, or records the reader cannot reach): the strict path starts afresh. */
static int damaged(const ks_ring_reader *r) {
  unsigned k;

  for (k = 0; k < r->rings; k++)
    if (r->cur[k].dead || r->cur[k].broken)
      return 1;
  return !empty(r);
}

static void rings_path(unsigned first, const uint8_t *data, size_t size) {
  ks_ring_reader *r = &ring[(first >> 1) & 3];
  ks_ring_writer w[MAX_RINGS];
  uint64_t written = 0, serial = 0, before, disorder;
  size_t at = 0;
  unsigned n = 0;

  strict = 0;
  drain(r, SIZE_MAX);   /* what an earlier input left, before this one is counted */
  if ((first & 8) != 0 && damaged(r)) {
    ks_ring_close(r);
    if (ks_ring_open(r, SIZE, r - ring + 1) != KS_OK)
      fail("setup");
    ks_ring_unlink(r);
  }
  strict = (first & 8) != 0;
  if (strict)   /* an earlier input's times are its own (hostile ones among them) */
    for (n = 0; n < r->pid_ts_cap; n++)
      r->pid_ts[n] = INT64_MIN;
  n = 0;
  memset(seen, 0, sizeof(seen));
  handed = 0;
  before = r->unresolved + r->bad + r->full;
  disorder = r->disorder;
  writers(r, w);
  atomic_store(&r->h->closed, 0);
  while (size - at >= 9) {
    unsigned sel = data[at++], k = (sel & 0x7f) % r->rings;
    if (sel >= 0x80) {
      uint64_t arg;
      memcpy(&arg, data + at, 8);
      at += 8;
      if (!strict)
        act(r, w, k, (sel >> 4) & 7, arg);
      continue;
    }
    at += write_record(r, &w[k], data + at, size - at, &written, &serial);
    if (++n % 8 == 0)
      drain(r, SIZE_MAX);
    if (strict && n % 8 == 0 && !empty(r))
      fail("a drain left records of a single-threaded writer");
  }
  drain(r, SIZE_MAX);
  if (strict && (!empty(r) || handed > written ||
                 handed + (r->unresolved + r->bad + r->full - before) < written))
    fail("events neither handed on nor counted");
  if (strict && r->disorder != disorder)
    fail("a process's events out of order");
  serial_base += serial + 1;
  strict = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  setup();
  if ((data[0] & 1) == 0)
    ks_ring_replay(&replay, &in, data + 1, size - 1, check, NULL);
  else
    rings_path(data[0], data + 1, size - 1);
  return 0;
}
