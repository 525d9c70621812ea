/* ks_ring.h: the shared-memory rings between the kprof_tracer NIF and kprof_sink.
 *
 * Why: a port tracer costs the traced process a term_to_binary and a port
 * task per event, and another scheduler a writev per event (~3.5 us of VM
 * CPU per event measured on the tiers bench). The NIF writes a small binary
 * record into a ring instead, in the traced process, and the sink reads it
 * every 1 to 16 ms, paced by how fast the rings fill (doc/internals-ring.md).
 *
 * Why a ring per writer: one ring shared by every scheduler needs a
 * compare-and-swap on one `head` word per record, and on a node with many
 * busy schedulers that cache line moves between cores on every event
 * (bench/RESULTS.md, "Ring per scheduler"). Here each writer thread owns a
 * ring: nothing a writer stores per record is stored by another core.
 *
 * Layout of the shared object (created by the sink with shm_open, mapped by
 * the NIF): a header page (ks_ring_hdr), then `rings` rings one after the
 * other, each a page of control (ks_ring) followed by `size` data bytes.
 * Both sides map each ring's data twice, back to back, so a record that
 * runs past the end of the data continues at its start in memory: records
 * never wrap. In memory a ring takes KS_RING_HDR + 2 * size bytes.
 *
 * Writers: a writer thread claims a free ring (owner 0 -> its token) at its
 * first event and keeps it until it exits (owner back to 0). The last ring
 * is never claimed (owner KS_RING_SHARED): threads that found no free ring
 * write it one at a time, under a lock of the writers' own. Either way a
 * ring has one writer at a time, which fills a record at `head` and then
 * publishes the new `head` with release order; a full ring counts a drop
 * instead. `head`, `drops` and `unsupported` are the writer's, on a line no
 * one else writes; the writer reads `tail` only when the tail it last saw
 * (its cache: `tail` only grows, so an old value only underestimates the
 * room) says the ring may be full.
 *
 * The reader: reads each ring's `head` with acquire order and trusts the
 * bytes before it; frees them by moving `tail`, once per drain. Records are
 * 8-byte aligned: word 0 = stamp (32) | len (16) | type (8) | flags (8), the
 * stamp being the record's position (a check, not a commit: `head` is), then
 * the type's fixed fields, then variable bytes, padded.
 *
 * Order: every event record carries `ts`, the VM's monotonic time in ns,
 * from one clock for all writers that never goes back within a ring, taken
 * after the definitions the record names are written. A record written
 * before another in real time (a process's events on the scheduler it left,
 * then on the one it moved to; a message's send, then its receipt) has a
 * time no later. The sink merges the rings by that time up to a watermark it
 * can prove is safe (port/ring/ring.c), so every record is handed on after
 * every record written before it, whichever rings they are in.
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
#define KS_RING_VERSION 4u
#define KS_RING_HDR 4096u                       /* the object's header, and each ring's control */
#define KS_RING_MAX_REC 65528u                  /* len is 16 bits, 8-aligned */
#define KS_RING_MIN_SIZE (64u << 10)            /* >= KS_RING_MAX_REC: a record fits the mirror */
#define KS_RING_MAX_SIZE (1ull << 32)
#define KS_RING_MAX_RINGS 1024u
#define KS_RING_SHARED UINT64_MAX               /* owner of the last ring: never claimed */

/* The object's header, at offset 0. */
typedef struct ks_ring_hdr {
  uint64_t magic;
  uint32_t version;
  uint32_t hdr_size;               /* KS_RING_HDR: the header, and each ring's control */
  uint64_t size;                   /* each ring's data bytes: a power of two, >= KS_RING_MIN_SIZE */
  uint32_t rings;                  /* 1 to KS_RING_MAX_RINGS; the last is the shared one */
  uint32_t reserved;
  _Alignas(64) _Atomic uint32_t closed;    /* the sink stopped reading */
  _Alignas(64) _Atomic uint64_t reads;     /* drains by the reader, 0 before the first */
} ks_ring_hdr;

/* A ring's control page; its data follows it. */
typedef struct ks_ring {
  _Alignas(64) _Atomic uint64_t owner;     /* 0 free, the writer's token, or KS_RING_SHARED */
  _Alignas(64) _Atomic uint64_t head;      /* next byte the writer writes; published per record */
  _Atomic uint64_t drops;                  /* events lost: the ring was full (or closed) */
  _Atomic uint64_t unsupported;            /* events the NIF cannot encode */
  _Alignas(64) _Atomic uint64_t tail;      /* next byte the reader reads */
} ks_ring;

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
 * each word, in one ring or another, before a record names it (a KS_REC_ATOM
 * / KS_REC_PID record), so the reader can name it: a definition is read
 * when the reader first walks over it, before any event it walked with. */
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

/* Whether a record of this type carries a time (at offset 8): every one but the definitions. */
static inline int ks_ring_is_event(unsigned type) {
  return type != KS_REC_ATOM && type != KS_REC_PID;
}

/* The bytes of the object, and of its mapping, for `rings` rings of `size` data bytes. */
static inline size_t ks_ring_object_bytes(uint64_t size, unsigned rings) {
  return KS_RING_HDR + (size_t)rings * (KS_RING_HDR + (size_t)size);
}

static inline size_t ks_ring_mapping_bytes(uint64_t size, unsigned rings) {
  return KS_RING_HDR + (size_t)rings * (KS_RING_HDR + 2 * (size_t)size);
}

/* Ring k of a mapping (size and rings as checked when it was mapped, never re-read). */
static inline ks_ring *ks_ring_at(ks_ring_hdr *h, uint64_t size, unsigned k) {
  return (ks_ring *)(void *)((unsigned char *)h + KS_RING_HDR +
                             (size_t)k * (KS_RING_HDR + 2 * (size_t)size));
}

static inline unsigned char *ks_ring_data(ks_ring *r) {
  return (unsigned char *)r + KS_RING_HDR;
}

/* Whether a header describes rings this code reads (bytes: the object's size, when known). */
static inline int ks_ring_hdr_ok(const ks_ring_hdr *h, uint64_t bytes) {
  return h->magic == KS_RING_MAGIC && h->version == KS_RING_VERSION &&
         h->hdr_size == KS_RING_HDR && h->size >= KS_RING_MIN_SIZE &&
         h->size <= KS_RING_MAX_SIZE && (h->size & (h->size - 1)) == 0 && h->rings >= 1 &&
         h->rings <= KS_RING_MAX_RINGS && bytes == ks_ring_object_bytes(h->size, h->rings);
}

/*
 * One writer's end of a ring: its own (claimed), or the shared one (then
 * the writers hold their lock around every use of it, and the writer is
 * theirs in common). `head` is the ring's, kept here: only this writer
 * moves it. `tail` is the writer's cache of the reader's. `last_ts` keeps
 * the ring's times from going back (ks_ring_time).
 */
typedef struct ks_ring_writer {
  ks_ring_hdr *h;
  ks_ring *r;                      /* NULL: none */
  unsigned char *data;
  uint64_t size, head, tail;
  int64_t last_ts;
} ks_ring_writer;

/* Writes ring k from where it stands (a claim, or the shared ring). */
static inline void ks_ring_writer_init(ks_ring_writer *w, ks_ring_hdr *h, uint64_t size,
                                       unsigned k) {
  w->h = h;
  w->r = ks_ring_at(h, size, k);
  w->data = ks_ring_data(w->r);
  w->size = size;
  w->head = atomic_load_explicit(&w->r->head, memory_order_relaxed);
  w->tail = atomic_load_explicit(&w->r->tail, memory_order_acquire);
  w->last_ts = INT64_MIN;
}

/*
 * Claims a free ring among the first rings - 1 for `token` (not 0, not
 * KS_RING_SHARED): its index, with w set to write it, or -1 when every one
 * is taken (then the caller writes the shared ring, rings - 1).
 */
static inline int ks_ring_claim(ks_ring_writer *w, ks_ring_hdr *h, uint64_t size, unsigned rings,
                                uint64_t token) {
  unsigned k;

  for (k = 0; k + 1 < rings; k++) {
    ks_ring *r = ks_ring_at(h, size, k);
    uint64_t free_ = 0;
    if (atomic_load_explicit(&r->owner, memory_order_relaxed) == 0 &&
        atomic_compare_exchange_strong_explicit(&r->owner, &free_, token, memory_order_acquire,
                                                memory_order_relaxed)) {
      ks_ring_writer_init(w, h, size, k);
      return (int)k;
    }
  }
  return -1;
}

/* The writer's thread is done with its ring: another may claim it. */
static inline void ks_ring_release(ks_ring_writer *w) {
  if (w->r != NULL)
    atomic_store_explicit(&w->r->owner, 0, memory_order_release);
  w->r = NULL;
}

/* A record's time: never before the ring's last (a clock a hair behind another thread's
 * that wrote this ring just before: the shared ring). */
static inline int64_t ks_ring_time(ks_ring_writer *w, int64_t ts) {
  if (ts < w->last_ts)
    ts = w->last_ts;
  return w->last_ts = ts;
}

static inline void ks_ring_count_drop(ks_ring_writer *w) {
  atomic_fetch_add_explicit(&w->r->drops, 1, memory_order_relaxed);
}

static inline void ks_ring_count_unsupported(ks_ring_writer *w) {
  atomic_fetch_add_explicit(&w->r->unsupported, 1, memory_order_relaxed);
}

/*
 * Room for a record of `len` bytes (8-aligned, <= KS_RING_MAX_REC) at the
 * writer's head: its address, or NULL (a drop is counted) when the ring is
 * full or closed. Nothing is visible to the reader before ks_ring_commit.
 */
static inline unsigned char *ks_ring_reserve(ks_ring_writer *w, size_t len) {
  if (w->head + len - w->tail > w->size) {
    /* Full by the cached tail (or a cache of another ring's, ahead of this
     * head: the subtraction wraps): read the real one once. */
    w->tail = atomic_load_explicit(&w->r->tail, memory_order_acquire);
    if (w->tail > w->head || w->head + len - w->tail > w->size) {
      ks_ring_count_drop(w);
      return NULL;
    }
  }
  if (atomic_load_explicit(&w->h->closed, memory_order_relaxed)) {
    ks_ring_count_drop(w);
    return NULL;
  }
  return w->data + (w->head & (w->size - 1));
}

/* Publishes the filled record at the head: its word 0, then the new head (release).
 * The line two past the new head is fetched for writing now: by the next records the
 * VM has done a trace call's other work, and their stores find the line in the cache
 * (a line of a ring is last in the reader's cache, or in none: about 5 ns a record
 * less in bench/ring_bench.c's writer). */
static inline void ks_ring_commit(ks_ring_writer *w, unsigned char *rec, size_t len, unsigned type,
                                  unsigned flags) {
  uint64_t w0 = ks_ring_word0(w->head, len, type, flags);

  memcpy(rec, &w0, sizeof(w0));
  w->head += len;
  atomic_store_explicit(&w->r->head, w->head, memory_order_release);
  __builtin_prefetch(w->data + ((w->head + 128) & (w->size - 1)), 1, 3);
}

/*
 * Maps the shared object open on fd (ks_ring_object_bytes(size, rings)
 * bytes) with each ring's data twice in a row. Returns the header or NULL.
 * ks_ring_unmap undoes it.
 */
static inline ks_ring_hdr *ks_ring_map(int fd, uint64_t size, unsigned rings) {
  size_t total = ks_ring_mapping_bytes(size, rings);
  unsigned char *base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  unsigned k;

  if (base == MAP_FAILED)
    return NULL;
  if (mmap(base, KS_RING_HDR, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
      MAP_FAILED)
    goto fail;
  for (k = 0; k < rings; k++) {
    unsigned char *ring = (unsigned char *)ks_ring_at((ks_ring_hdr *)(void *)base, size, k);
    off_t off = (off_t)(KS_RING_HDR + (size_t)k * (KS_RING_HDR + (size_t)size));
    if (mmap(ring, KS_RING_HDR + (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             fd, off) == MAP_FAILED ||
        mmap(ring + KS_RING_HDR + size, (size_t)size, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED, fd, off + KS_RING_HDR) == MAP_FAILED)
      goto fail;
  }
  return (ks_ring_hdr *)(void *)base;
fail:
  munmap(base, total);
  return NULL;
}

static inline void ks_ring_unmap(ks_ring_hdr *h, uint64_t size, unsigned rings) {
  munmap(h, ks_ring_mapping_bytes(size, rings));
}

#endif
