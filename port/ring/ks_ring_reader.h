/* ks_ring_reader.h: the sink's end of the shared-memory rings (include/ks_ring.h).
 * ring.c creates the object and turns records into events; ring_drain.c reads the
 * rings and merges them by time. */
#ifndef KS_RING_READER_H
#define KS_RING_READER_H

#include "core/ks_decode.h"
#include "ks_ring.h"

/* A cache in front of the MFA table: most events name one of a few hundred
 * functions (KS_NONE: an empty slot). */
#define KS_RING_MFA_CACHE_BITS 12
#define KS_RING_MFA_CACHE (1u << KS_RING_MFA_CACHE_BITS)
typedef struct ks_ring_mfa_slot {
  uint64_t m, f;
  uint32_t arity, id;
} ks_ring_mfa_slot;

/* The reader's place in one ring: [tail, scan) is walked (its definitions
 * read, its records checked) but holds events not yet handed on. */
typedef struct ks_ring_cursor {
  ks_ring *r;
  unsigned char *data;
  uint64_t tail;           /* the first record not handed on; published to the ring */
  uint64_t scan;           /* walked up to here */
  uint64_t first;          /* the drain's first look at the head */
  int broken;              /* the record at `scan` broke the format: skip to the head once
                            * the events before it are handed on */
  int dead;                /* the head is not one a writer could have written: not read */
  uint64_t records, bytes, drops_seen, unsupported_seen;
} ks_ring_cursor;

typedef struct ks_ring_reader {
  ks_ring_hdr *h;          /* NULL: no rings */
  uint64_t size;           /* each ring's data bytes */
  unsigned rings;
  ks_ring_cursor *cur;     /* one per ring */
  unsigned *heap;          /* the merge's heap of rings (ring_drain.c) */
  int64_t *heap_ts;
  int64_t watermark;       /* the newest time of a record walked by the drains' first looks */
  char name[64];           /* the shm name, until unlinked */
  int linked;
  ks_itab atoms;           /* atom word -> offset of its name in `names` */
  unsigned char *names;    /* [len:2][utf8:1][bytes] per atom */
  size_t names_len, names_cap;
  ks_itab mfas;            /* M word, F word, arity -> MFA id */
  ks_ring_mfa_slot mfa_cache[KS_RING_MFA_CACHE];
  ks_itab pids;            /* pid word -> pid id */
  uint64_t records, bytes, unresolved, bad, drops_seen, unsupported_seen;
  uint64_t full;           /* events lost to a full intern table (pids, MFAs, names) */
  uint64_t disorder;       /* events handed on before one their process wrote earlier */
  uint64_t fullest;        /* bytes the fullest ring held at the last drain's first look */
  int64_t *pid_ts;         /* per pid id: the time of its last event handed on */
  uint32_t pid_ts_cap;
  int drops_pending;       /* a ring dropped events since the last alert */
  /* Tests: called after the drain's first look at ring k's head, so that writers
   * can be interleaved with the drain's steps exactly (test_ring). NULL: none. */
  void (*look)(void *ctx, unsigned k);
  void *look_ctx;
} ks_ring_reader;

/* Called per event, with the decoded record (the sink routes it like a frame's). */
typedef void (*ks_ring_event_fn)(void *ctx, ks_decoded *d);

void ks_ring_reader_init(ks_ring_reader *r);
/* Creates and maps new rings: `rings` rings (1 to KS_RING_MAX_RINGS, the last
 * one shared) of `size` data bytes each (a power of two, >= 64 KiB), or of
 * less where their file system has not room for them (ks_ring_fit): r->size
 * says which. KS_ENOSPC when not even 64 KiB rings fit. */
int ks_ring_open(ks_ring_reader *r, uint64_t size, unsigned rings);
/* The largest ring size, `size` halved as often as needed, whose object takes
 * at most half of `avail` free bytes; 0 when not even KS_RING_MIN_SIZE does. */
uint64_t ks_ring_fit(uint64_t size, unsigned rings, uint64_t avail);
/* Removes the shm name (the NIF has mapped it). */
void ks_ring_unlink(ks_ring_reader *r);
/* Marks the rings closed for writers, drains nothing, unmaps. */
void ks_ring_close(ks_ring_reader *r);
/* The rings a writer holds now (the shared one not counted). */
unsigned ks_ring_claimed(const ks_ring_reader *r);
/*
 * Reads what the writers published, in every ring, and hands up to `max`
 * events to fn, merged by time so that none comes before one written ahead
 * of it (ring_drain.c says why that holds). Returns the events handed on.
 */
size_t ks_ring_drain(ks_ring_reader *r, ks_intern *in, size_t max, ks_ring_event_fn fn, void *ctx);
/* The longest wait between two drains, by default and at most ({ring_wait_max, Ms}). */
#define KS_RING_WAIT_MAX_MS 16

/* ring_pace.c: the milliseconds to wait before the next drain (1 to max_ms):
 * no ring fills past half in that time, at the writers' peak rate nor at the
 * rate the fullest ring filled (`fullest` bytes in the `interval_ns` since
 * the drain before), and it is within a quarter of max_lag_ns (0: none). */
unsigned ks_ring_pace(int64_t interval_ns, uint64_t fullest, uint64_t size, int64_t max_lag_ns,
                      unsigned max_ms);
/* Forgets the pid words of the ids whose dead[id] is set (the ids being
 * released, ks_intern_pids_release): a word the NIF writes again later
 * (defined anew first) gets a new id. KS_OK or KS_ENOMEM. */
int ks_ring_forget_pids(ks_ring_reader *r, const uint8_t *dead, uint32_t n);
/* Reads a record stream (the bytes of one ring's data, from position 0)
 * without a shared ring: for tests and the fuzzer. Returns records read. */
size_t ks_ring_replay(ks_ring_reader *r, ks_intern *in, const unsigned char *data, size_t n,
                      ks_ring_event_fn fn, void *ctx);

/* ring.c, for ring_drain.c: a record into the word tables (a definition) or into an
 * event for fn. KS_OK, or an error for ks_ring_count. */
int ks_ring_read_record(ks_ring_reader *r, ks_intern *in, const unsigned char *rec, size_t len,
                        unsigned type, unsigned flags, ks_ring_event_fn fn, void *ctx);
void ks_ring_count(ks_ring_reader *r, int rc);

#endif
