/* ks_ring_reader.h: the sink's end of the shared-memory ring (include/ks_ring.h). */
#ifndef KS_RING_READER_H
#define KS_RING_READER_H

#include "ks_decode.h"
#include "ks_ring.h"

/* A cache in front of the MFA table: most events name one of a few hundred
 * functions (KS_NONE: an empty slot). */
#define KS_RING_MFA_CACHE_BITS 12
#define KS_RING_MFA_CACHE (1u << KS_RING_MFA_CACHE_BITS)
typedef struct ks_ring_mfa_slot {
  uint64_t m, f;
  uint32_t arity, id;
} ks_ring_mfa_slot;

typedef struct ks_ring_reader {
  ks_ring_hdr *h;          /* NULL: no ring */
  uint64_t size;
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
  int drops_pending;       /* the ring dropped events since the last alert */
} ks_ring_reader;

/* Called per event, with the decoded record (the sink routes it like a frame's). */
typedef void (*ks_ring_event_fn)(void *ctx, ks_decoded *d);

void ks_ring_reader_init(ks_ring_reader *r);
/* Creates and maps a new ring of `size` data bytes (a power of two, >= 64 KiB). */
int ks_ring_open(ks_ring_reader *r, uint64_t size);
/* Removes the shm name (the NIF has mapped it). */
void ks_ring_unlink(ks_ring_reader *r);
/* Marks the ring closed for writers, drains nothing, unmaps. */
void ks_ring_close(ks_ring_reader *r);
/*
 * Reads up to `max` committed records; events go to fn. Returns the number
 * of records read. A record reserved but not yet committed stops the read
 * (the next drain resumes there).
 */
size_t ks_ring_drain(ks_ring_reader *r, ks_intern *in, size_t max, ks_ring_event_fn fn, void *ctx);
/* Forgets the pid words of the ids whose dead[id] is set (the ids being
 * released, ks_intern_pids_release): a word the NIF writes again later
 * (defined anew first) gets a new id. KS_OK or KS_ENOMEM. */
int ks_ring_forget_pids(ks_ring_reader *r, const uint8_t *dead, uint32_t n);
/* Reads a record stream (the bytes of a ring's data, from position 0) without a
 * shared ring: for tests and the fuzzer. Returns records read. */
size_t ks_ring_replay(ks_ring_reader *r, ks_intern *in, const unsigned char *data, size_t n,
                      ks_ring_event_fn fn, void *ctx);

#endif
