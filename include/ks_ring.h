/* ks_ring.h: the shared-memory ring between the kprof_tracer NIF and kprof_sink.
 *
 * Why: a port tracer costs the traced process a term_to_binary and a port
 * task per event, and another scheduler a writev per event (~3.5 us of VM
 * CPU per event measured on the tiers bench). The NIF writes a small binary
 * record into this ring instead, in the traced process, and the sink reads
 * it every millisecond (doc/internals-ring.md).
 *
 * Layout of the shared object (created by the sink with shm_open, mapped by
 * the NIF): one page of header, then `size` bytes of data. Both sides map the
 * data twice, back to back, so a record that runs past the end of the data
 * continues at its start in memory: records never wrap.
 *
 * Many writers (the VM's schedulers), one reader (the sink). A writer
 * reserves bytes by a compare-and-swap on `head` (or counts a drop when the
 * ring is full), fills the record, then stores its first word last, with
 * release order; the reader sees a record once that word carries the
 * record's own position stamp, and frees it by moving `tail`.
 *
 * The cost of a record is the cache lines it shares between cores: the
 * reader publishes `tail` once per drain, not per record, and a writer reads
 * `tail` only when the tail it last saw (its cache: `tail` only grows, so
 * an old value only underestimates the room) says the ring may be full.
 * Nothing is counted per record in the header: `head` and `tail` say how
 * many bytes went through.
 *
 * Records are 8-byte aligned: word 0 = stamp (32) | len (16) | type (8) |
 * flags (8), then the type's fixed fields, then variable bytes, padded.
 *
 * The reader reports that it is alive through `reads`, which it bumps on
 * every drain: a VM-side watcher (kprof_guard) that sees `head` ahead of
 * `tail` while `reads` and `tail` stand still knows the reader stopped,
 * without asking it anything.
 */
#ifndef KS_RING_H
#define KS_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define KS_RING_MAGIC 0x31676e69726b706bULL   /* "kpkring1", little-endian */
#define KS_RING_VERSION 3u
#define KS_RING_HDR 4096u
#define KS_RING_MAX_REC 65528u                  /* len is 16 bits, 8-aligned */

typedef struct ks_ring_hdr {
  uint64_t magic;
  uint32_t version;
  uint32_t hdr_size;               /* bytes before the data: KS_RING_HDR */
  uint64_t size;                   /* data bytes: a power of two, page multiple */
  _Alignas(64) _Atomic uint64_t head;      /* next byte writers reserve */
  _Alignas(64) _Atomic uint64_t tail;      /* next byte the reader reads */
  _Alignas(64) _Atomic uint64_t drops;     /* events lost: the ring was full */
  _Atomic uint64_t unsupported;            /* events the NIF cannot encode */
  _Atomic uint32_t closed;                 /* the sink stopped reading */
  _Alignas(64) _Atomic uint64_t reads;     /* drains by the reader, 0 before the first */
} ks_ring_hdr;

enum ks_rec_type {
  KS_REC_CALL = 1,       /* ks_rec_call + label + payload */
  KS_REC_RETURN_TO = 2,  /* ks_rec_mfa */
  KS_REC_ATOM = 3,       /* ks_rec_atom + name (Latin-1 or UTF-8 bytes) */
  KS_REC_PID = 4,        /* ks_rec_pid + the pid's ETF bytes (no version byte) */
  KS_REC_EVENT = 5,      /* ks_rec_event: every other trace tag (in, out, spawn, gc_*, ...) */
  KS_REC_CALL_MFA = 6    /* ks_rec_mfa: a call with no match-spec extra (the pattern `true') */
};

/* flags of a call / return_to */
enum {
  KS_RECF_TOKEN = 1,     /* the match-spec extra had a token field ([] or a token) */
  KS_RECF_LABEL = 2,     /* ... with a label (its ETF bytes follow) */
  KS_RECF_CALLER = 4,    /* caller_m/f/arity are set */
  KS_RECF_PAYLOAD = 8,   /* a third element of the extra (ETF bytes follow the label) */
  KS_RECF_MFA = 16,      /* return_to, event: m/f/arity are set (not `undefined` or 0) */
  KS_RECF_OTHER = 32,    /* event: `other` is a pid word (spawn: the child, spawned: the parent) */
  KS_RECF_NAME = 64,     /* event: `other` is an atom word (register, unregister) */
  KS_RECF_META = 128     /* call, event: from the meta tracer (a pattern's {meta, ...} tracer) */
};

/* Atoms and pids are the VM's own term words: stable for the VM's life
 * (atoms are never freed; a local pid term is its word). The NIF defines
 * each word once per ring (a KS_REC_ATOM / KS_REC_PID record) before its
 * first use, so the reader can name it. */
typedef struct ks_rec_call {
  uint64_t word0;
  int64_t ts;                      /* erlang:monotonic_time(nanosecond) */
  uint64_t pid, m, f, caller_m, caller_f;
  uint8_t arity, caller_arity, label_len, reserved;
  uint32_t payload_len;
} ks_rec_call;                     /* 64 bytes */

/* A return_to, or a call that has nothing but its function (KS_REC_CALL_MFA). */
typedef struct ks_rec_mfa {
  uint64_t word0;
  int64_t ts;
  uint64_t pid, m, f;
  uint8_t arity, reserved[7];
} ks_rec_mfa;                      /* 48 bytes */

/* Any other trace tag: `kind` is its ks_event_kind (include/ks_event.h). */
typedef struct ks_rec_event {
  uint64_t word0;
  int64_t ts;
  uint64_t pid, m, f;
  uint64_t other;                  /* a pid word (KS_RECF_OTHER) or an atom word (KS_RECF_NAME) */
  uint8_t kind, arity, reserved[6];
} ks_rec_event;                    /* 56 bytes */

typedef struct ks_rec_atom {
  uint64_t word0;
  uint64_t atom;
  uint16_t len;
  uint8_t utf8, reserved[5];
} ks_rec_atom;                     /* 24 bytes + name */

typedef struct ks_rec_pid {
  uint64_t word0;
  uint64_t pid;
  uint16_t len;
  uint8_t reserved[6];
} ks_rec_pid;                      /* 24 bytes + ETF */

static inline size_t ks_ring_align(size_t n) {
  return (n + 7) & ~(size_t)7;
}

static inline uint32_t ks_ring_stamp(uint64_t pos) {
  return (uint32_t)(pos >> 3) + 1u;   /* never 0: zeroed memory is not a record */
}

static inline uint64_t ks_ring_word0(uint64_t pos, size_t len, unsigned type, unsigned flags) {
  return (uint64_t)ks_ring_stamp(pos) | ((uint64_t)len << 32) | ((uint64_t)type << 48) |
         ((uint64_t)flags << 56);
}

static inline unsigned char *ks_ring_data(ks_ring_hdr *h) {
  return (unsigned char *)h + KS_RING_HDR;
}

/*
 * Writers: reserve `len` (8-aligned, <= KS_RING_MAX_REC) bytes. Returns the
 * record's address and sets *pos, or NULL (a drop is counted) when the ring
 * is full or closed. *tail is the writer's cache of `tail` (0 at first: it
 * is read then); ks_ring_reserve_from starts from a head the caller read
 * (the tests give it a stale one).
 */
static inline unsigned char *ks_ring_reserve_from(ks_ring_hdr *h, size_t len, uint64_t *pos,
                                                  uint64_t head, uint64_t *tail_cache) {
  uint64_t tail = *tail_cache;
  int fresh = 0;

  for (;;) {
    /* `head` may be older than `tail` (other writers moved on and the reader
     * caught up): take a fresh one, or head - tail wraps and looks full. A
     * cached tail ahead of the head is not this ring's: read the real one. */
    if (head < tail) {
      if (!fresh) {
        tail = *tail_cache = atomic_load_explicit(&h->tail, memory_order_acquire);
        fresh = 1;
      } else {
        head = atomic_load_explicit(&h->head, memory_order_relaxed);
      }
      continue;
    }
    if (head + len - tail > h->size) {
      if (!fresh) {   /* full by the cached tail: read the real one once */
        tail = *tail_cache = atomic_load_explicit(&h->tail, memory_order_acquire);
        fresh = 1;
        continue;
      }
      atomic_fetch_add_explicit(&h->drops, 1, memory_order_relaxed);
      return NULL;
    }
    if (atomic_load_explicit(&h->closed, memory_order_relaxed)) {
      atomic_fetch_add_explicit(&h->drops, 1, memory_order_relaxed);
      return NULL;
    }
    if (atomic_compare_exchange_weak_explicit(&h->head, &head, head + len,
                                              memory_order_relaxed, memory_order_relaxed))
      break;
  }
  *pos = head;
  return ks_ring_data(h) + (head & (h->size - 1));
}

static inline unsigned char *ks_ring_reserve(ks_ring_hdr *h, size_t len, uint64_t *pos,
                                             uint64_t *tail_cache) {
  return ks_ring_reserve_from(h, len, pos, atomic_load_explicit(&h->head, memory_order_relaxed),
                              tail_cache);
}

/* Writers: publish a filled record (its word 0 last). */
static inline void ks_ring_commit(ks_ring_hdr *h, unsigned char *rec, uint64_t pos, size_t len,
                                  unsigned type, unsigned flags) {
  (void)h;
  atomic_store_explicit((_Atomic uint64_t *)(void *)rec, ks_ring_word0(pos, len, type, flags),
                        memory_order_release);
}

/*
 * Maps the shared object open on fd (KS_RING_HDR + size bytes) with its data
 * twice in a row. Returns the header or NULL. ks_ring_unmap undoes it.
 */
static inline ks_ring_hdr *ks_ring_map(int fd, uint64_t size) {
  size_t total = KS_RING_HDR + 2 * (size_t)size;
  unsigned char *base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

  if (base == MAP_FAILED)
    return NULL;
  if (mmap(base, KS_RING_HDR + (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
           0) == MAP_FAILED ||
      mmap(base + KS_RING_HDR + size, (size_t)size, PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_FIXED, fd, KS_RING_HDR) == MAP_FAILED) {
    munmap(base, total);
    return NULL;
  }
  return (ks_ring_hdr *)(void *)base;
}

static inline void ks_ring_unmap(ks_ring_hdr *h, uint64_t size) {
  munmap(h, KS_RING_HDR + 2 * (size_t)size);
}

#endif
