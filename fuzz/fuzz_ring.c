/* fuzz_ring.c: libFuzzer target for the sink's end of the shared-memory ring (port/ring/ring.c).
 *
 * The input is a stream of ring records (include/ks_ring.h: word 0 = stamp,
 * length, type, flags; then the type's fields), as the kprof_tracer NIF
 * writes them. Its first byte picks the path:
 *   even: ks_ring_replay over the bytes as they are (record parsing alone);
 *   odd:  each record is copied into a real ring (64 KiB, mapped twice) with
 *         ks_ring_reserve / ks_ring_commit, so its stamp is right, and
 *         ks_ring_drain reads them, every 8 records and at the end; records
 *         straddle the end of the data as the ring fills and empties.
 * Every event handed out must be consistent: a kind some record carries
 * (call, return_to, or one of the event record's), ids resolvable in their
 * intern tables (small caps, so they fill: pid, MFA, other pid, name),
 * label and payload slices only with their flags, META only from a meta
 * record, never a wall-clock time. The ring is created once.
 *
 * An exit event whose time is odd releases its pid's id at once, from
 * inside the drain as the sink's reclaim may (port/sink/pid_reclaim.c, without
 * its grace): the reader forgets the word, the tables the keys, and the id
 * is handed out again; the tables must stay consistent (every id live or
 * free, never both) and later records of the word resolve or are counted.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/ks_ring_reader.h"

static ks_ring_reader ring, replay;
static uint64_t tail_cache;   /* the writer's, as the NIF keeps one per thread */
static ks_intern in;
static int ready;
static unsigned runs;

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

  if (id >= sizeof(dead))
    fail("pid id past the cap");
  memset(dead, 0, sizeof(dead));
  dead[id] = 1;
  /* Both readers: they share the intern tables (the sink has one reader). */
  if (ks_ring_forget_pids(&ring, dead, sizeof(dead)) != KS_OK ||
      ks_ring_forget_pids(&replay, dead, sizeof(dead)) != KS_OK ||
      ks_intern_pids_release(&in, dead, sizeof(dead)) != KS_OK)
    fail("release");
  check_pid_ids();
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
  if (d->ev.kind == KS_EV_EXIT && (d->ev.ts & 1))
    release_pid(d->ev.pid);
}

static void setup(void) {
  ks_intern_limits lim = {64, 64, 16};

  if (ready && ++runs % 512 != 0)
    return;
  if (ready) {
    ks_ring_close(&ring);
    ks_ring_close(&replay);
    ks_intern_free(&in);
  }
  ks_ring_reader_init(&ring);
  ks_ring_reader_init(&replay);
  if (ks_intern_init(&in, &lim) != KS_OK || ks_ring_open(&ring, 64u << 10) != KS_OK)
    fail("setup");
  ks_ring_unlink(&ring);
  tail_cache = 0;
  ready = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t at = 1;
  unsigned k = 0;

  if (size < 1)
    return 0;
  setup();
  if ((data[0] & 1) == 0) {
    ks_ring_replay(&replay, &in, data + 1, size - 1, check, NULL);
    return 0;
  }
  while (size - at >= 8) {
    uint64_t w0, pos;
    size_t len;
    unsigned char *rec;
    memcpy(&w0, data + at, 8);
    len = (size_t)(w0 >> 32) & 0xffff;
    if (len < 8)
      len = 8;
    len = ks_ring_align(len);
    if (len > size - at)
      len = (size - at) & ~(size_t)7;
    if ((rec = ks_ring_reserve(ring.h, len, &pos, &tail_cache)) == NULL) {
      /* Full: a drain makes room for any record (they are shorter than the ring). */
      ks_ring_drain(&ring, &in, SIZE_MAX, check, NULL);
      if ((rec = ks_ring_reserve(ring.h, len, &pos, &tail_cache)) == NULL)
        fail("no room in an empty ring");
    }
    memcpy(rec + 8, data + at + 8, len - 8);
    ks_ring_commit(ring.h, rec, pos, len, (unsigned)(w0 >> 48) & 0xff, (unsigned)(w0 >> 56));
    at += len;
    if (++k % 8 == 0)
      ks_ring_drain(&ring, &in, SIZE_MAX, check, NULL);
  }
  ks_ring_drain(&ring, &in, SIZE_MAX, check, NULL);
  if (atomic_load(&ring.h->tail) != atomic_load(&ring.h->head))
    fail("records left in the ring");
  return 0;
}
