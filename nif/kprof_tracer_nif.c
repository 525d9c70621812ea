/* kprof_tracer_nif.c: an erl_tracer module that writes trace events into kprof_sink's rings.
 *
 * erlang:trace(Pids, true, [{tracer, kprof_tracer, Gen} | Flags]) makes the
 * VM call enabled/3 and trace/5 below, in the traced process, for every
 * event. Each event becomes one binary record in a shared ring of
 * include/ks_ring.h (no term_to_binary, no port task, no syscall): `call`
 * (with its match-spec extra: a {caller}, a seq_trace token, a payload) and
 * `return_to` have records of their own; running (in, out, ...), procs
 * (spawn, spawned, exit, register, unregister), garbage_collection and
 * return_from / exception_from share the event record. Atoms and pids are
 * sent as the VM's term words, each defined by a record that names it
 * before the first record that uses it. Tags nobody reads (link, send,
 * receive, ...) are discarded in enabled/3, and so are those a generation's
 * mode does not read (discard/2); anything that cannot be encoded is
 * counted as unsupported.
 *
 * Each scheduler thread (normal, dirty CPU, dirty I/O) writes a ring of its
 * own, claimed at its first event in the mapping and released when the
 * thread exits (a thread-specific key's destructor); a thread that finds
 * none free writes the shared last ring under that mapping's lock. A
 * record's time is taken after the definitions it names, from one clock
 * for all threads (ks_vm_clock.h): the order the sink merges the rings by.
 *
 * A meta pattern's tracer, trace_pattern(MFA, MS, [{meta, kprof_tracer,
 * {meta, Gen}}]), writes the same records marked KS_RECF_META: a flame
 * capture's trigger (its match spec turns the caller's flags on with
 * {{tracer, kprof_tracer, Gen}} and names the capture in the call's
 * message). In a trace session of kprof's own (OTP 27+), where the
 * session's one tracer state serves its meta patterns too, a meta event is
 * told by its options instead (session_meta).
 *
 * attach/2 maps the rings the sink created and makes Gen the live tracer
 * state; a tracer whose state is not the live Gen (an older session), or any
 * tracer once detach/0 ran, answers `remove` and the VM drops it from the
 * process. detach/0 keeps the mapping, so resume/1 can make a new Gen live
 * on it and ring_info/0 can still read its counters; release/0 retires it.
 * Mappings are retired, not unmapped: a scheduler may still be inside
 * trace/5 with the old address. A retired mapping is unmapped at a later
 * attach or release once it has been retired for RETIRE_S seconds (no
 * trace/5 call lasts that long); with more than RETIRED mappings waiting,
 * a new one is left mapped rather than unmapped early.
 *
 * mark/3,4 writes a call's record without a trace event, for the process
 * that calls it: kprof_tiers's request markers.
 *
 * A call budget (kprof:calls's `max`, include/ks_budget.h): budget/2 gives
 * generation Gen N call records; trace_call of that generation takes one
 * before writing, and a call past the budget writes nothing and is counted
 * in `over` (not in the ring's drops: nothing was lost, the session had
 * what it asked for). The Erlang side polls budget/0 and turns tracing off
 * once `left` is 0. Any other generation (a new session after a detach) has
 * no budget: its cost is one relaxed load per call.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <erl_nif.h>

#include "ks_budget.h"
#include "ks_event.h"
#include "ks_ring.h"
#include "ks_nif_etf.h"
#include "ks_vm_clock.h"

static ERL_NIF_TERM am_trace, am_remove, am_discard, am_call, am_return_to, am_match_spec_result,
    am_true, am_false, am_ok, am_error, am_meta, am_extra, am_trace_status, am_undefined, am_timestamp;

/* The tags of the event record, and the kind each becomes. */
#define EVENT_TAGS(X)                                                                    \
  X(in, KS_EV_IN) X(out, KS_EV_OUT) X(return_from, KS_EV_RETURN_FROM)                   \
  X(exception_from, KS_EV_EXCEPTION_FROM) X(in_exiting, KS_EV_IN_EXITING)                \
  X(out_exiting, KS_EV_OUT_EXITING) X(out_exited, KS_EV_OUT_EXITED) X(spawn, KS_EV_SPAWN) \
  X(spawned, KS_EV_SPAWNED) X(exit, KS_EV_EXIT) X(register, KS_EV_REGISTER)               \
  X(unregister, KS_EV_UNREGISTER) X(gc_minor_start, KS_EV_GC_MINOR_START)                 \
  X(gc_minor_end, KS_EV_GC_MINOR_END) X(gc_major_start, KS_EV_GC_MAJOR_START)             \
  X(gc_major_end, KS_EV_GC_MAJOR_END)
#define X_COUNT(tag, kind) +1
enum { NTAGS = 0 EVENT_TAGS(X_COUNT) };
#undef X_COUNT
static struct {
  ERL_NIF_TERM atom;
  uint8_t kind;
} event_tags[NTAGS];

/*
 * A mapping of the sink's rings, as attach/2 checked its header (the sizes
 * are never read again from shared memory). `seq` is new for each mapping:
 * a thread's claim is of one (a retired mapping's memory may be a new one's
 * later, at the same address).
 */
typedef struct mapping {
  ks_ring_hdr *h;
  uint64_t size;               /* each ring's data bytes */
  unsigned rings;
  uint64_t seq;
  ErlNifTime at;               /* when it was retired (seconds, monotonic) */
  pthread_mutex_t lock;        /* the shared ring's writers, one at a time */
  ks_ring_writer shared;       /* the last ring, under `lock` */
} mapping;

static _Atomic(mapping *) live_map;   /* the current mapping, from attach to release */
static _Atomic uint64_t live_gen;     /* 0: none */
static _Atomic uint64_t live_term;    /* the live Gen as a term (0: none) */
static _Atomic uint64_t live_seq;     /* bumped by every change of the three above */
/* The call budget of kprof:calls's max (include/ks_budget.h). */
static ks_budget budget;
/* The event tags generation discard_gen's enabled/3 answers `discard` to
 * (discard/2), a bit per KS_EV_ kind: a mode that reads none of them (the
 * tiers read no spawn, spawned, register or unregister) spares the VM
 * building the event and the trace/5 call, the ring its record and the sink
 * its decoding. Any other generation (the next mode) is not affected. */
static _Atomic uint64_t discard_gen;
static _Atomic uint64_t discard_mask;
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
#define RETIRED 8
#define RETIRE_S 10
static mapping *retired[RETIRED], *current;
static uint64_t mapping_seq;

/*
 * Per scheduler thread (one struct behind one TLS pointer: in a shared
 * object each __thread access is a call to __tls_get_addr, several per event
 * before; the pointer is initial-exec, a register read). Allocated at the
 * thread's first event; freed, and its ring released, when the thread exits
 * (thread_key's destructor).
 *
 * Words already defined in the rings of generation gen: pids in a small
 * direct-mapped cache per thread; atoms (thousands in a compile) in the
 * process-wide stamp table below, else (an atom word of another shape) in a
 * per-thread cache. A word defined in any ring serves every ring: the sink
 * reads a definition when it first walks over it, before it hands on any
 * event written after it (port/ring/ring_drain.c).
 */
#define CACHE 1024
typedef struct thread_state {
  uint64_t seq;                 /* live_seq when `term` was found live with `own` to write */
  ERL_NIF_TERM term;            /* that tracer state (0: none): writer_of's fast path */
  uint64_t gen;                 /* the generation the caches are of */
  const mapping *m;             /* the mapping `own` is of, and its seq */
  uint64_t m_seq;
  ks_ring_writer own;           /* its ring (own.r NULL: none free, it writes the shared one) */
  ks_vm_epoch clock;            /* its copy of the clock's epoch */
  uint64_t atom_cache[CACHE], pid_cache[CACHE];
} thread_state;

static __thread thread_state *tls __attribute__((tls_model("initial-exec")));
static pthread_key_t thread_key;    /* its destructor lets a thread's ring go */
static int thread_key_made;

/* The VM's monotonic time for every thread (ks_vm_clock.h). */
static ks_vm_clock vm_clock;

static int64_t vm_time(void) {
  return enif_monotonic_time(ERL_NIF_NSEC);
}

/* A record's time: after the definitions it names, never before its ring's last. */
static inline __attribute__((always_inline)) int64_t record_time(ks_ring_writer *w) {
  return ks_ring_time(w, ks_vm_clock_now(&vm_clock, &tls->clock));
}

static inline size_t slot_of(uint64_t word) {
  return (size_t)((word >> 4) * 0x9E3779B97F4A7C15ULL >> 54) & (CACHE - 1);
}

/*
 * Atoms defined in the ring, process-wide: stamps[index] is the low 32 bits
 * of the generation that defined it. A local atom's term word is its index
 * shifted left by 6 over the tag 0x0B (erts' immediate atom, unchanged since
 * R7); the shape is checked, and any other word goes to the thread's cache.
 * Two threads may both define an atom before either stamps it: the reader
 * takes the second definition as it took the first.
 */
#define ATOM_TAG_MASK 0x3Fu
#define ATOM_TAG 0x0Bu
#define ATOM_STAMPS (1u << 20)
static _Atomic uint32_t *atom_stamps;

static inline _Atomic uint32_t *atom_stamp(uint64_t w) {
  uint64_t index = w >> 6;

  /* atom_stamps is made by load(), which fails without it */
  if ((w & ATOM_TAG_MASK) != ATOM_TAG || index >= ATOM_STAMPS)
    return NULL;
  return &atom_stamps[index];
}

/* Whether an atom was defined (the stamp, or this thread's cache). */
static inline int atom_defined(const thread_state *t, uint64_t w) {
  _Atomic uint32_t *stamp = atom_stamp(w);

  if (stamp != NULL)
    return atomic_load_explicit(stamp, memory_order_acquire) == (uint32_t)t->gen;
  return t->atom_cache[slot_of(w)] == w;
}

/* The most bytes an atom's name takes in UTF-8 (255 characters), and its NUL. */
#define ATOM_UTF8_MAX (255 * 4 + 1)

/*
 * The UTF-8 bytes of an atom the Latin-1 getter refused (a character past
 * U+00FF: a function named 'λ'), into buf with a NUL, as enif_get_atom
 * counts them; 0 if there are none. NIF 2.17 (OTP 26) has ERL_NIF_UTF8 in
 * its ErlNifCharEncoding enum and enif_get_atom takes it; before, the name is
 * read from the atom's external format, which for such an atom is
 * ATOM_UTF8_EXT (118, 2-byte length) or SMALL_ATOM_UTF8_EXT (119, 1 byte).
 * Only an atom not yet defined in the ring gets here.
 */
static int atom_utf8(ErlNifEnv *env, ERL_NIF_TERM atom, char *buf, size_t cap) {
#if ERL_NIF_MAJOR_VERSION > 2 || (ERL_NIF_MAJOR_VERSION == 2 && ERL_NIF_MINOR_VERSION >= 17)
  return enif_get_atom(env, atom, buf, (unsigned)cap, ERL_NIF_UTF8);
#else
  ErlNifBinary bin;
  size_t n = 0, at = 0;

  if (!enif_term_to_binary(env, atom, &bin))
    return 0;
  if (bin.size >= 3 && bin.data[0] == 131 && bin.data[1] == 119) {
    n = bin.data[2];
    at = 3;
  } else if (bin.size >= 4 && bin.data[0] == 131 && bin.data[1] == 118) {
    n = (size_t)bin.data[2] << 8 | bin.data[3];
    at = 4;
  }
  if (at == 0 || n == 0 || at + n != bin.size || n + 1 > cap) {
    enif_release_binary(&bin);
    return 0;
  }
  memcpy(buf, bin.data + at, n);
  buf[n] = 0;
  enif_release_binary(&bin);
  return (int)n + 1;
#endif
}

/* An atom's definition record: its name's n bytes, Latin-1 or UTF-8. */
static int write_atom(ks_ring_writer *w, uint64_t word, const char *name, size_t n, int utf8) {
  size_t len = ks_ring_align(sizeof(ks_rec_atom) + n);
  unsigned char *rec;
  ks_rec_atom *a;

  if ((rec = ks_ring_reserve(w, len)) == NULL)
    return 0;
  a = (ks_rec_atom *)(void *)rec;
  a->atom = word;
  a->len = (uint16_t)n;
  a->utf8 = (uint8_t)utf8;
  memcpy(rec + sizeof(*a), name, n);
  ks_ring_commit(w, rec, len, KS_REC_ATOM, 0);
  return 1;
}

/* A name outside Latin-1, from atom_utf8 (its buffer off the common path). */
static __attribute__((noinline)) int define_atom_utf8(ErlNifEnv *env, ks_ring_writer *w,
                                                      ERL_NIF_TERM atom) {
  char name[ATOM_UTF8_MAX];
  int n = atom_utf8(env, atom, name, sizeof(name));

  return n > 1 && write_atom(w, (uint64_t)atom, name, (size_t)(n - 1), 1);
}

/* Defines an atom (it was not, atom_defined says): its Latin-1 bytes, or its
 * UTF-8 bytes when it has a character past U+00FF. The stamp is stored after
 * the record is published: a thread that sees it writes its records after. */
static __attribute__((noinline)) int define_atom_slow(ErlNifEnv *env, ks_ring_writer *w,
                                                      ERL_NIF_TERM atom) {
  thread_state *t = tls;
  uint64_t word = (uint64_t)atom;
  _Atomic uint32_t *stamp = atom_stamp(word);
  char name[256];
  int n, ok;

  n = enif_get_atom(env, atom, name, sizeof(name), ERL_NIF_LATIN1);
  ok = n > 1 ? write_atom(w, word, name, (size_t)(n - 1), 0) : define_atom_utf8(env, w, atom);
  if (!ok)
    return 0;
  if (stamp != NULL)
    atomic_store_explicit(stamp, (uint32_t)t->gen, memory_order_release);
  else
    t->atom_cache[slot_of(word)] = word;
  return 1;
}

/* Defines an atom unless it was already. */
static inline __attribute__((always_inline)) int define_atom(ErlNifEnv *env, ks_ring_writer *w,
                                                             ERL_NIF_TERM atom) {
  return atom_defined(tls, (uint64_t)atom) || define_atom_slow(env, w, atom);
}

static __attribute__((noinline)) int define_pid_slow(ErlNifEnv *env, ks_ring_writer *wr,
                                                     ERL_NIF_TERM pid) {
  thread_state *t = tls;
  uint64_t w = (uint64_t)pid;
  size_t k = slot_of(w), len;
  ErlNifBinary bin;
  unsigned char *rec;
  ks_rec_pid *p;

  if (!enif_term_to_binary(env, pid, &bin))
    return 0;
  if (bin.size < 2 || bin.size > 256) {
    enif_release_binary(&bin);
    return 0;
  }
  len = ks_ring_align(sizeof(ks_rec_pid) + bin.size - 1);
  if ((rec = ks_ring_reserve(wr, len)) == NULL) {
    enif_release_binary(&bin);
    return 0;
  }
  p = (ks_rec_pid *)(void *)rec;
  p->pid = w;
  p->len = (uint16_t)(bin.size - 1);
  memcpy(rec + sizeof(*p), bin.data + 1, bin.size - 1);   /* without the version byte */
  enif_release_binary(&bin);
  ks_ring_commit(wr, rec, len, KS_REC_PID, 0);
  t->pid_cache[k] = w;
  return 1;
}

/* Defines a pid unless this thread already did. */
static inline int define_pid(ErlNifEnv *env, ks_ring_writer *w, ERL_NIF_TERM pid) {
  return tls->pid_cache[slot_of((uint64_t)pid)] == (uint64_t)pid || define_pid_slow(env, w, pid);
}

/* Whether a term is an atom: its word's tag (atom_stamp's shape), else the API's answer. */
static inline int is_atom(ErlNifEnv *env, ERL_NIF_TERM t) {
  return (t & ATOM_TAG_MASK) == ATOM_TAG || enif_is_atom(env, t);
}

/* {M, F, Arity} or {M, F, Args}: defines M and F; 0 if it is not one. Inlined: it is
 * most of a call's work, and its callers' records are filled from its answers. */
static inline __attribute__((always_inline)) int get_mfa(ErlNifEnv *env, ks_ring_writer *w,
                                                         ERL_NIF_TERM t, uint64_t *m,
                                                         uint64_t *f, uint8_t *arity) {
  const ERL_NIF_TERM *e;
  int n;
  unsigned a;

  if (!enif_get_tuple(env, t, &n, &e) || n != 3 || !is_atom(env, e[0]) || !is_atom(env, e[1]))
    return 0;
  /* A small integer's word is its value over the tag 0xF (erts' immediate;
   * anything else goes through the API). */
  if ((e[2] & 0xF) == 0xF && (e[2] >> 4) <= 255)
    a = (unsigned)(e[2] >> 4);
  else if (!enif_get_uint(env, e[2], &a) && !enif_get_list_length(env, e[2], &a))
    return 0;
  if (a > 255 || !define_atom(env, w, e[0]) || !define_atom(env, w, e[1]))
    return 0;
  *m = (uint64_t)e[0];
  *f = (uint64_t)e[1];
  *arity = (uint8_t)a;
  return 1;
}

/*
 * Whether t's external format is about `budget` bytes or fewer, found without
 * encoding it: a request identity is whatever the application passed (a
 * whole request, a body of megabytes), and enif_term_to_binary would copy all
 * of it, in the traced process, before the size check refuses it. The walk
 * counts each part's bytes (binaries by their size, lists cell by cell) and
 * stops as soon as the count passes the budget, so it costs O(budget) at
 * most, whatever the term. The count is close to the real size (within a
 * small factor: a byte list counts 1 per element, a pid 100 bytes) and never
 * replaces the size check after the encoding: it only bounds what is
 * encoded. A fun or a bignum, which have no size of their own to read, is
 * encoded alone to be measured (rare in an identity, and as big as it was to
 * make). Nesting deeper than FIT_DEPTH does not fit.
 */
#define FIT_DEPTH 64
static int fits(ErlNifEnv *env, ERL_NIF_TERM t, size_t *left, int depth) {
  ERL_NIF_TERM head, key, value;
  const ERL_NIF_TERM *e;
  ErlNifMapIterator it;
  ErlNifBinary bin;
  ErlNifSInt64 i64;
  unsigned alen;
  size_t need = 0, size;
  int n, k, ok = 1;

  if (depth > FIT_DEPTH)
    return 0;
  switch (enif_term_type(env, t)) {
  case ERL_NIF_TERM_TYPE_ATOM:
    need = enif_get_atom_length(env, t, &alen, ERL_NIF_LATIN1) ? alen + 3 : 255 * 4 + 3;
    break;
  case ERL_NIF_TERM_TYPE_BITSTRING:
    if (!enif_inspect_binary(env, t, &bin))
      goto encode;   /* bits that make no whole byte: no size to read */
    need = bin.size + 6;
    break;
  case ERL_NIF_TERM_TYPE_FLOAT:
    need = 9;
    break;
  case ERL_NIF_TERM_TYPE_INTEGER:
    if (enif_get_int64(env, t, &i64))
      need = 5;
    else
      goto encode;
    break;
  case ERL_NIF_TERM_TYPE_PID:
  case ERL_NIF_TERM_TYPE_PORT:
  case ERL_NIF_TERM_TYPE_REFERENCE:
    need = 100;
    break;
  case ERL_NIF_TERM_TYPE_TUPLE:
    if (!enif_get_tuple(env, t, &n, &e) || *left < 5)
      return 0;
    *left -= 5;
    for (k = 0; k < n && ok; k++)
      ok = fits(env, e[k], left, depth + 1);
    return ok;
  case ERL_NIF_TERM_TYPE_LIST:
    if (*left < 6)
      return 0;
    *left -= 6;
    while (enif_get_list_cell(env, t, &head, &t)) {
      /* A byte: one byte of a STRING_EXT; anything else its own size. */
      if (enif_get_int64(env, head, &i64) && i64 >= 0 && i64 <= 255) {
        if (*left < 1)
          return 0;
        *left -= 1;
      } else if (!fits(env, head, left, depth + 1)) {
        return 0;
      }
    }
    return enif_is_empty_list(env, t) || fits(env, t, left, depth + 1);
  case ERL_NIF_TERM_TYPE_MAP:
    if (*left < 5 || !enif_map_iterator_create(env, t, &it, ERL_NIF_MAP_ITERATOR_FIRST))
      return 0;
    *left -= 5;
    while (ok && enif_map_iterator_get_pair(env, &it, &key, &value)) {
      ok = fits(env, key, left, depth + 1) && fits(env, value, left, depth + 1);
      enif_map_iterator_next(env, &it);
    }
    enif_map_iterator_destroy(env, &it);
    return ok;
  default:
    goto encode;
  }
  if (need > *left)
    return 0;
  *left -= need;
  return 1;

encode:
  if (!enif_term_to_binary(env, t, &bin))
    return 0;
  size = bin.size;
  enif_release_binary(&bin);
  if (size > *left)
    return 0;
  *left -= size;
  return 1;
}

/* t fits a record's budget (fits above): the check before every encoding of a
 * term the application chose (a label, a payload). */
static int small_enough(ErlNifEnv *env, ERL_NIF_TERM t, size_t bytes) {
  return fits(env, t, &bytes, 0);
}

/* A term's external format without the version byte, as the VM would send it,
 * into out (cap bytes): ks_etf_put's, else the VM's (bounded first: the term may
 * be anything). 0 if it does not fit. */
static int etf_of(ErlNifEnv *env, ERL_NIF_TERM t, unsigned char *out, size_t cap, size_t *len) {
  ErlNifBinary bin;

  if ((*len = ks_etf_put(env, t, out, cap)) != 0)
    return 1;
  if (!small_enough(env, t, cap) || !enif_term_to_binary(env, t, &bin))
    return 0;
  if (bin.size < 2 || bin.size - 1 > cap) {
    enif_release_binary(&bin);
    return 0;
  }
  memcpy(out, bin.data + 1, bin.size - 1);
  *len = bin.size - 1;
  enif_release_binary(&bin);
  return 1;
}

static int is_token(ErlNifEnv *env, ERL_NIF_TERM t, const ERL_NIF_TERM **e) {
  int n;

  if (enif_is_empty_list(env, t)) {
    *e = NULL;
    return 1;
  }
  return enif_get_tuple(env, t, &n, e) && n == 5;
}

/* A call's full record: the ETF of the token's label (`label`, with
 * KS_RECF_LABEL in flags) and of a payload (`pay`, 0 for none) after it. */
static void write_call(ErlNifEnv *env, ks_ring_writer *w, unsigned flags, ks_rec_call c,
                       ERL_NIF_TERM label_term, ERL_NIF_TERM pay) {
  /* A label's length travels in a uint8_t (ks_rec_call.label_len): 255 bytes at most. */
  unsigned char label[UINT8_MAX], payload_buf[4096], *payload = NULL, *rec;
  size_t label_len = 0, payload_len = 0, len;
  ErlNifBinary big = {0};
  int have_big = 0;

  if ((flags & KS_RECF_LABEL) && !etf_of(env, label_term, label, sizeof(label), &label_len)) {
    ks_ring_count_unsupported(w);
    return;
  }
  if (pay != 0 && (payload_len = ks_etf_put(env, pay, payload_buf, sizeof(payload_buf))) != 0) {
    payload = payload_buf;
    flags |= KS_RECF_PAYLOAD;
  } else if (pay != 0) {
    /* The identity bounded before the VM encodes it: it may be anything. */
    if (!small_enough(env, pay, KS_RING_MAX_REC - sizeof(c) - sizeof(label)) ||
        !enif_term_to_binary(env, pay, &big) || big.size < 2 ||
        big.size > KS_RING_MAX_REC - sizeof(c) - sizeof(label)) {
      if (big.data != NULL)
        enif_release_binary(&big);
      ks_ring_count_unsupported(w);
      return;
    }
    have_big = 1;
    payload = big.data + 1;
    payload_len = big.size - 1;
    flags |= KS_RECF_PAYLOAD;
  }
  c.label_len = (uint8_t)label_len;
  c.payload_len = (uint32_t)payload_len;
  c.ts = record_time(w);
  len = ks_ring_align(sizeof(c) + label_len + payload_len);
  if ((rec = ks_ring_reserve(w, len)) != NULL) {
    memcpy(rec + 8, (unsigned char *)&c + 8, sizeof(c) - 8);
    memcpy(rec + sizeof(c), label, label_len);
    if (payload_len != 0)
      memcpy(rec + sizeof(c) + label_len, payload, payload_len);
    ks_ring_commit(w, rec, len, KS_REC_CALL, flags);
  }
  if (have_big)
    enif_release_binary(&big);
}

/* A call with a match-spec extra ({caller}, a token, a payload): the full record. */
static void trace_call_extra(ErlNifEnv *env, ks_ring_writer *w, ERL_NIF_TERM extra,
                             unsigned flags, ks_rec_call c) {
  const ERL_NIF_TERM *x = NULL, *tok = NULL;
  ERL_NIF_TERM token = 0, caller = 0, pay = 0, label = 0;
  int nx = 0;

  if (is_token(env, extra, &tok)) {
    token = extra;
  } else if (enif_get_tuple(env, extra, &nx, &x) && (nx == 2 || nx == 3) &&
             is_token(env, x[0], &tok)) {
    token = x[0];
    caller = x[1];
    if (nx == 3)
      pay = x[2];
  } else {
    caller = extra;
  }
  if (token != 0) {
    flags |= KS_RECF_TOKEN;
    if (tok != NULL) {
      label = tok[1];
      flags |= KS_RECF_LABEL;
    }
  }
  if (caller != 0 && get_mfa(env, w, caller, &c.caller_m, &c.caller_f, &c.caller_arity))
    flags |= KS_RECF_CALLER;
  write_call(env, w, flags, c, label, pay);
}

/*
 * A meta pattern's event in a trace session (OTP 27+, kprof_trace_session):
 * the session has one tracer, so its state cannot say meta as {meta, Gen}
 * does on the legacy API. The VM fixes a meta tracer's flags to [call,
 * timestamp], and gives its events `timestamp => timestamp` in the options;
 * kprof never sets the `timestamp` flag itself (the NIF takes its own
 * time), so no other event of kprof's has it. Asked only of a call with a
 * match spec's message (a trigger's meta call always has one) and of
 * return_from / exception_from: a plain call pays nothing.
 */
static int session_meta(ErlNifEnv *env, ERL_NIF_TERM opts) {
  ERL_NIF_TERM ts;

  return enif_get_map_value(env, opts, am_timestamp, &ts) && ts == am_timestamp;
}

static void trace_call(ErlNifEnv *env, thread_state *t, ks_ring_writer *w, ERL_NIF_TERM pid,
                       ERL_NIF_TERM mfa, ERL_NIF_TERM opts, unsigned flags) {
  ERL_NIF_TERM extra;
  ks_rec_call c;
  ks_rec_mfa *r;

  /* writer_of made t->gen this event's (live) generation. */
  if (!ks_budget_take(&budget, t->gen))
    return;
  memset(&c, 0, sizeof(c));
  if (!get_mfa(env, w, mfa, &c.m, &c.f, &c.arity) || !define_pid(env, w, pid)) {
    ks_ring_count_unsupported(w);
    return;
  }
  /* {message, Extra} of the match spec; `true` when there was none (the
   * flame captures' pattern): then the short record, filled in place. */
  if (enif_get_map_value(env, opts, am_match_spec_result, &extra) && extra != am_true) {
    if (session_meta(env, opts))
      flags |= KS_RECF_META;
    c.pid = (uint64_t)pid;
    trace_call_extra(env, w, extra, flags, c);
    return;
  }
  if ((r = (ks_rec_mfa *)(void *)ks_ring_reserve(w, sizeof(*r))) == NULL)
    return;
  r->ts = record_time(w);
  r->pid = (uint64_t)pid;
  r->m = c.m;
  r->f = c.f;
  memset(r->reserved, 0, sizeof(r->reserved));
  r->arity = c.arity;
  ks_ring_commit(w, (unsigned char *)r, sizeof(*r), KS_REC_CALL_MFA, flags);
}

static void trace_return_to(ErlNifEnv *env, ks_ring_writer *w, ERL_NIF_TERM pid,
                            ERL_NIF_TERM mfa) {
  ks_rec_mfa r;
  unsigned flags = 0;
  unsigned char *rec;

  memset(&r, 0, sizeof(r));
  if (!define_pid(env, w, pid)) {
    ks_ring_count_unsupported(w);
    return;
  }
  r.pid = (uint64_t)pid;
  if (get_mfa(env, w, mfa, &r.m, &r.f, &r.arity))
    flags |= KS_RECF_MFA;
  r.ts = record_time(w);
  if ((rec = ks_ring_reserve(w, sizeof(r))) != NULL) {
    memcpy(rec + 8, (unsigned char *)&r + 8, sizeof(r) - 8);
    ks_ring_commit(w, rec, sizeof(r), KS_REC_RETURN_TO, flags);
  }
}

/* A pid (spawn's child, spawned's parent) defined: its word, or 0. */
static uint64_t other_pid(ErlNifEnv *env, ks_ring_writer *w, ERL_NIF_TERM t) {
  return enif_is_pid(env, t) && define_pid(env, w, t) ? (uint64_t)t : 0;
}

/* Every tag of event_tags: the record carries what flame reads of it. */
static void trace_event(ErlNifEnv *env, ks_ring_writer *w, uint8_t kind, unsigned flags,
                        ERL_NIF_TERM pid, ERL_NIF_TERM term, ERL_NIF_TERM opts) {
  ERL_NIF_TERM extra;
  ks_rec_event r;
  unsigned char *rec;

  memset(&r, 0, sizeof(r));
  r.kind = kind;
  if (!define_pid(env, w, pid)) {
    ks_ring_count_unsupported(w);
    return;
  }
  r.pid = (uint64_t)pid;
  switch (kind) {
  case KS_EV_SPAWN:
  case KS_EV_SPAWNED:
    /* {trace, Pid, spawn | spawned, OtherPid, {M, F, Args}} */
    if ((r.other = other_pid(env, w, term)) != 0)
      flags |= KS_RECF_OTHER;
    if (enif_get_map_value(env, opts, am_extra, &extra) &&
        get_mfa(env, w, extra, &r.m, &r.f, &r.arity))
      flags |= KS_RECF_MFA;
    break;
  case KS_EV_REGISTER:
  case KS_EV_UNREGISTER:
    if (enif_is_atom(env, term) && define_atom(env, w, term)) {
      r.other = (uint64_t)term;
      flags |= KS_RECF_NAME;
    }
    break;
  case KS_EV_EXIT:
  case KS_EV_GC_MINOR_START:
  case KS_EV_GC_MINOR_END:
  case KS_EV_GC_MAJOR_START:
  case KS_EV_GC_MAJOR_END:
    break;   /* the reason, the heap sizes: nothing flame reads */
  default:
    /* in, out, ...: {M, F, Arity} or 0; return_from, exception_from: {M, F, Arity} */
    if (get_mfa(env, w, term, &r.m, &r.f, &r.arity))
      flags |= KS_RECF_MFA;
    break;
  }
  r.ts = record_time(w);
  if ((rec = ks_ring_reserve(w, sizeof(r))) != NULL) {
    memcpy(rec + 8, (unsigned char *)&r + 8, sizeof(r) - 8);
    ks_ring_commit(w, rec, sizeof(r), KS_REC_EVENT, flags);
  }
}

/* The live generation if `state` is it (Gen, or {meta, Gen} for *meta), else 0.
 * The live Gen's term (a small integer: an immediate, the same word in every
 * env) is kept beside it: the common case is one compare. */
static inline uint64_t live_state(ErlNifEnv *env, ERL_NIF_TERM state, int *meta) {
  ErlNifUInt64 gen;
  const ERL_NIF_TERM *e;
  int n;
  uint64_t live = atomic_load_explicit(&live_gen, memory_order_acquire);

  *meta = 0;
  if (live == 0)
    return 0;
  if (state == (ERL_NIF_TERM)atomic_load_explicit(&live_term, memory_order_relaxed))
    return live;
  if (enif_get_uint64(env, state, &gen))
    return gen == live ? live : 0;
  if (enif_get_tuple(env, state, &n, &e) && n == 2 && enif_is_identical(e[0], am_meta) &&
      enif_get_uint64(env, e[1], &gen) && gen == live) {
    *meta = 1;
    return live;
  }
  return 0;
}

/* This thread's state, at its first event: its key's destructor frees it. */
static thread_state *new_thread_state(void) {
  thread_state *t = calloc(1, sizeof(*t));

  if (t == NULL)
    return NULL;
  if (thread_key_made && pthread_setspecific(thread_key, t) != 0) {
    free(t);
    return NULL;
  }
  return tls = t;
}

/* The thread exits: its ring is free for another (if its mapping is still the live one:
 * a retired mapping is not written again). */
static void thread_gone(void *p) {
  thread_state *t = p;
  mapping *m = atomic_load_explicit(&live_map, memory_order_acquire);

  if (m != NULL && m == t->m && m->seq == t->m_seq)
    ks_ring_release(&t->own);
  tls = NULL;
  free(t);
}

/* A ring of its own for the thread in mapping m, if one is free (else own.r is NULL). */
static void claim_ring(thread_state *t, mapping *m) {
  t->m = m;
  t->m_seq = m->seq;
  if (ks_ring_claim(&t->own, m->h, m->size, m->rings, (uint64_t)(uintptr_t)t) < 0)
    t->own.r = NULL;
}

/* writer_of, past its fast path: every check, and the fast path's cache set. */
static __attribute__((noinline)) ks_ring_writer *writer_slow(ErlNifEnv *env, ERL_NIF_TERM state,
                                                             int *meta, mapping **locked) {
  uint64_t seq = atomic_load_explicit(&live_seq, memory_order_acquire);
  uint64_t live = live_state(env, state, meta);
  thread_state *t = tls;
  mapping *m;

  if (live == 0 || (t == NULL && (t = new_thread_state()) == NULL))
    return NULL;
  t->term = 0;
  if (t->gen != live) {
    memset(t->atom_cache, 0, sizeof(t->atom_cache));
    memset(t->pid_cache, 0, sizeof(t->pid_cache));
    t->gen = live;
  }
  m = atomic_load_explicit(&live_map, memory_order_acquire);
  /* An attach between the two looks at live_gen: this state's mapping is not m. */
  if (m == NULL || atomic_load_explicit(&live_gen, memory_order_acquire) != live)
    return NULL;
  if (t->m != m || t->m_seq != m->seq)
    claim_ring(t, m);
  if (t->own.r != NULL) {
    if (!*meta) {
      t->seq = seq;
      t->term = state;
    }
    return &t->own;
  }
  pthread_mutex_lock(&m->lock);
  *locked = m;
  return &m->shared;
}

/*
 * The writer of this tracer state on this thread: its own ring, or the
 * shared one with the mapping's lock held (*locked: unlock it after the
 * event). NULL: not live, or no memory for the thread's state. The common
 * case, the state this thread last wrote for and nothing changed since
 * (live_seq), is one load and two compares.
 */
static inline ks_ring_writer *writer_of(ErlNifEnv *env, ERL_NIF_TERM state, int *meta,
                                        mapping **locked) {
  thread_state *t = tls;

  *locked = NULL;
  *meta = 0;
  if (t != NULL && state == t->term &&
      atomic_load_explicit(&live_seq, memory_order_acquire) == t->seq)
    return &t->own;
  return writer_slow(env, state, meta, locked);
}

/* The event record's kind of a tag, or -1. */
static int event_kind(ERL_NIF_TERM tag) {
  int k;

  for (k = 0; k < NTAGS; k++)
    if (tag == event_tags[k].atom)
      return event_tags[k].kind;
  return -1;
}

static __attribute__((noinline)) ERL_NIF_TERM enabled_slow(ErlNifEnv *env,
                                                            const ERL_NIF_TERM argv[]) {
  int meta, kind;
  uint64_t live = live_state(env, argv[1], &meta);

  if (live == 0)
    return am_remove;
  /* Atoms are immediates: the same word in every env. */
  if (argv[0] == am_call || argv[0] == am_return_to || argv[0] == am_trace_status)
    return am_trace;
  if ((kind = event_kind(argv[0])) < 0)
    return am_discard;
  if ((atomic_load_explicit(&discard_mask, memory_order_relaxed) >> kind & 1) &&
      atomic_load_explicit(&discard_gen, memory_order_acquire) == live)
    return am_discard;
  return am_trace;
}

/* enabled(TraceTag, TracerState, Tracee): `discard` for the tags no record
 * carries (link, send, 'receive', ...), so trace/5 is not even called. The
 * common cases first, without a call: the VM asks twice per event, with
 * `trace_status` and with the event's tag (`call`, most often), for the
 * live Gen's term (0 when none is live: no state is that word). */
static ERL_NIF_TERM nif_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  if (argv[1] == (ERL_NIF_TERM)atomic_load_explicit(&live_term, memory_order_acquire) &&
      (argv[0] == am_trace_status || argv[0] == am_call))
    return am_trace;
  return enabled_slow(env, argv);
}

/* trace(TraceTag, TracerState, Tracee, TraceTerm, Opts) */
static ERL_NIF_TERM nif_trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  int meta, kind;
  mapping *locked;
  ks_ring_writer *w = writer_of(env, argv[1], &meta, &locked);

  if (w == NULL)
    return am_ok;
  if (argv[0] == am_call)
    trace_call(env, tls, w, argv[2], argv[3], argv[4], meta ? KS_RECF_META : 0);
  else if (argv[0] == am_return_to)
    trace_return_to(env, w, argv[2], argv[3]);
  else if ((kind = event_kind(argv[0])) >= 0) {
    if (!meta && (kind == KS_EV_RETURN_FROM || kind == KS_EV_EXCEPTION_FROM))
      meta = session_meta(env, argv[4]);
    trace_event(env, w, (uint8_t)kind, meta ? KS_RECF_META : 0, argv[2], argv[3], argv[4]);
  }
  else
    ks_ring_count_unsupported(w);
  if (locked != NULL)
    pthread_mutex_unlock(&locked->lock);
  return am_ok;
}

/*
 * mark(Gen, {M, F, Arity}, Label) and mark(Gen, {M, F, Arity}, Label, Payload):
 * the record a traced call of M:F/Arity by the calling process would write
 * with a match spec's {Token, Caller} or {Token, Caller, Payload} (a token
 * labelled Label; no caller), written by the process itself: kprof_tiers's
 * request markers (doc/internals-tiers.md), which so cost no trace event
 * (a global breakpoint, a match spec run, the VM's two tracer calls). The
 * sink cannot tell the two apart. `true` when Gen is the live generation
 * (the record written, or dropped for a full ring and counted as any
 * record is), `false` when it is not: nothing is written.
 */
static ERL_NIF_TERM nif_mark(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  const ERL_NIF_TERM *e;
  int n, meta;
  unsigned arity;
  mapping *locked;
  ks_ring_writer *w;
  ErlNifPid self;
  ERL_NIF_TERM pid;
  ks_rec_call c;

  /* The shape first: nothing is defined in the ring for a call refused. */
  if (!enif_is_number(env, argv[0]) || !enif_get_tuple(env, argv[1], &n, &e) || n != 3 ||
      !enif_is_atom(env, e[0]) || !enif_is_atom(env, e[1]) || !enif_get_uint(env, e[2], &arity) ||
      arity > 255 || enif_self(env, &self) == NULL)
    return enif_make_badarg(env);
  if ((w = writer_of(env, argv[0], &meta, &locked)) == NULL)
    return am_false;
  pid = enif_make_pid(env, &self);
  memset(&c, 0, sizeof(c));
  if (get_mfa(env, w, argv[1], &c.m, &c.f, &c.arity) && define_pid(env, w, pid)) {
    c.pid = (uint64_t)pid;
    write_call(env, w, KS_RECF_TOKEN | KS_RECF_LABEL, c, argv[2], argc > 3 ? argv[3] : 0);
  } else {
    ks_ring_count_unsupported(w);   /* a definition that did not fit */
  }
  if (locked != NULL)
    pthread_mutex_unlock(&locked->lock);
  return am_true;
}

static void unmap(mapping *m) {
  ks_ring_unmap(m->h, m->size, m->rings);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

/* The current mapping joins the retired ones (attach_lock held), and those
 * retired RETIRE_S ago are unmapped. */
static void retire_current(void) {
  ErlNifTime now = enif_monotonic_time(ERL_NIF_SEC);
  int k, placed = current == NULL;

  for (k = 0; k < RETIRED; k++) {
    if (retired[k] != NULL && now - retired[k]->at >= RETIRE_S) {
      unmap(retired[k]);
      retired[k] = NULL;
    }
    if (retired[k] == NULL && !placed) {
      retired[k] = current;
      retired[k]->at = now;
      placed = 1;
    }
  }
  current = NULL;
}

/* No state is live; the current mapping stays (attach_lock held): the threads' claims
 * in it hold for resume/1, and threads that exit give theirs back. */
static void stop_live(void) {
  atomic_store_explicit(&live_term, 0, memory_order_relaxed);
  atomic_store_explicit(&live_gen, 0, memory_order_release);
  atomic_fetch_add_explicit(&live_seq, 1, memory_order_acq_rel);
}

/* Gen is live: its term after it (stop_live zeroed both, term first), so a
 * reader that sees the new Gen sees no older term. A Gen past the small
 * integers would be a boxed term, not the same word twice: not kept. */
static void go_live(ErlNifEnv *env, uint64_t gen) {
  atomic_store_explicit(&live_gen, gen, memory_order_release);
  if (gen < ((uint64_t)1 << 59))
    atomic_store_explicit(&live_term, (uint64_t)enif_make_uint64(env, gen), memory_order_release);
  atomic_fetch_add_explicit(&live_seq, 1, memory_order_acq_rel);
}

/* Checks the shared object on fd holds rings of this version: sets each one's data
 * size and their number, or returns 0. */
static int probe_ring(int fd, uint64_t *size, unsigned *rings) {
  struct stat st;
  ks_ring_hdr probe;

  if (fstat(fd, &st) != 0 || st.st_size < (off_t)KS_RING_HDR ||
      pread(fd, &probe, sizeof(probe), 0) != (ssize_t)sizeof(probe) ||
      !ks_ring_hdr_ok(&probe, (uint64_t)st.st_size))
    return 0;
  *size = probe.size;
  *rings = probe.rings;
  return 1;
}

/* The mapping's descriptor, the shared ring's writer ready. */
static mapping *new_mapping(ks_ring_hdr *h, uint64_t size, unsigned rings) {
  mapping *m = calloc(1, sizeof(*m));

  if (m == NULL)
    return NULL;
  m->h = h;
  m->size = size;
  m->rings = rings;
  m->seq = ++mapping_seq;   /* attach_lock held */
  pthread_mutex_init(&m->lock, NULL);
  ks_ring_writer_init(&m->shared, h, size, rings - 1);
  return m;
}

static ERL_NIF_TERM error_tuple(ErlNifEnv *env, const char *why) {
  return enif_make_tuple2(env, am_error, enif_make_atom(env, why));
}

/* attach(ShmName :: binary(), Gen :: pos_integer()) -> ok | {error, Reason} */
static ERL_NIF_TERM nif_attach(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  ErlNifBinary name;
  ErlNifUInt64 gen;
  char path[256];
  ks_ring_hdr *h;
  uint64_t size;
  unsigned rings;
  mapping *m;
  int fd;

  if (!enif_inspect_binary(env, argv[0], &name) || name.size == 0 || name.size >= sizeof(path) ||
      !enif_get_uint64(env, argv[1], &gen) || gen == 0)
    return enif_make_badarg(env);
  memcpy(path, name.data, name.size);
  path[name.size] = 0;
  if ((fd = shm_open(path, O_RDWR, 0)) < 0)
    return error_tuple(env, "shm_open");
  if (!probe_ring(fd, &size, &rings)) {
    close(fd);
    return error_tuple(env, "bad_ring");
  }
  h = ks_ring_map(fd, size, rings);
  close(fd);
  if (h == NULL)
    return error_tuple(env, "mmap");
  pthread_mutex_lock(&attach_lock);
  if ((m = new_mapping(h, size, rings)) == NULL) {
    pthread_mutex_unlock(&attach_lock);
    ks_ring_unmap(h, size, rings);
    return error_tuple(env, "enomem");
  }
  stop_live();
  retire_current();
  current = m;
  atomic_store_explicit(&live_map, m, memory_order_release);
  go_live(env, gen);
  pthread_mutex_unlock(&attach_lock);
  return am_ok;
}

/* resume(Gen :: pos_integer()) -> ok | {error, no_ring}: Gen becomes the live
 * state on the ring attach/2 mapped (after a detach), unless the sink closed it. */
static ERL_NIF_TERM nif_resume(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  ErlNifUInt64 gen;
  ERL_NIF_TERM r = am_ok;

  if (!enif_get_uint64(env, argv[0], &gen) || gen == 0)
    return enif_make_badarg(env);
  pthread_mutex_lock(&attach_lock);
  if (current == NULL || atomic_load_explicit(&current->h->closed, memory_order_acquire))
    r = error_tuple(env, "no_ring");
  else
    go_live(env, gen);
  pthread_mutex_unlock(&attach_lock);
  return r;
}

/* detach() -> ok: every kprof_tracer state is stale from now on (the
 * mapping stays, for resume/1 and ring_info/0). */
static ERL_NIF_TERM nif_detach(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  pthread_mutex_lock(&attach_lock);
  stop_live();
  pthread_mutex_unlock(&attach_lock);
  return am_ok;
}

/* release() -> ok: detach, and the mapping is retired (the sink closed the ring). */
static ERL_NIF_TERM nif_release(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  pthread_mutex_lock(&attach_lock);
  stop_live();
  atomic_store_explicit(&live_map, NULL, memory_order_release);
  atomic_fetch_add_explicit(&live_seq, 1, memory_order_acq_rel);
  retire_current();
  pthread_mutex_unlock(&attach_lock);
  return am_ok;
}

/* live() -> Gen | 0 */
static ERL_NIF_TERM nif_live(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  return enif_make_uint64(env, atomic_load_explicit(&live_gen, memory_order_acquire));
}

/* budget(Gen, N) -> ok: generation Gen may write N more call records (budget
 * and over counted from here); budget(0, 0) -> ok: no budget. */
static ERL_NIF_TERM nif_set_budget(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  ErlNifUInt64 gen, n;

  if (!enif_get_uint64(env, argv[0], &gen) || !enif_get_uint64(env, argv[1], &n) ||
      n > (ErlNifUInt64)INT64_MAX)
    return enif_make_badarg(env);
  ks_budget_set(&budget, gen, (int64_t)n);
  return am_ok;
}

/* discard(Gen, Tags) -> ok: generation Gen's enabled/3 discards the events
 * of these tags (of those a record carries); discard(0, []) -> ok: none. */
static ERL_NIF_TERM nif_discard(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  ErlNifUInt64 gen;
  ERL_NIF_TERM list = argv[1], head;
  uint64_t mask = 0;
  int kind;

  if (!enif_get_uint64(env, argv[0], &gen))
    return enif_make_badarg(env);
  while (enif_get_list_cell(env, list, &head, &list)) {
    if ((kind = event_kind(head)) < 0)
      return enif_make_badarg(env);
    mask |= (uint64_t)1 << kind;
  }
  if (!enif_is_empty_list(env, list))
    return enif_make_badarg(env);
  /* As ks_budget_set: no generation while the mask changes. */
  atomic_store_explicit(&discard_gen, 0, memory_order_release);
  atomic_store_explicit(&discard_mask, mask, memory_order_relaxed);
  atomic_store_explicit(&discard_gen, gen, memory_order_release);
  return am_ok;
}

static int put_u64(ErlNifEnv *env, ERL_NIF_TERM *map, const char *key, uint64_t v) {
  return enif_make_map_put(env, *map, enif_make_atom(env, key), enif_make_uint64(env, v), map);
}

/* ring_info() -> #{head, tail, reads, drops, unsupported, size, rings, claimed, closed,
 * live} | undefined: the shared counters as they are now, head, tail, drops and
 * unsupported summed over the rings. Never blocks, never asks the sink: a watcher
 * compares two readings to see whether the reader moves. */
static ERL_NIF_TERM nif_ring_info(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  ERL_NIF_TERM map = enif_make_new_map(env);
  uint64_t head = 0, tail = 0, drops = 0, unsupported = 0, claimed = 0, size;
  ks_ring_hdr *h;
  unsigned rings, k;

  pthread_mutex_lock(&attach_lock);
  h = current != NULL ? current->h : NULL;
  size = current != NULL ? current->size : 0;
  rings = current != NULL ? current->rings : 0;
  pthread_mutex_unlock(&attach_lock);
  /* A retired mapping is unmapped only RETIRE_S after release: reading it here is safe. */
  if (h == NULL)
    return am_undefined;
  for (k = 0; k < rings; k++) {
    ks_ring *r = ks_ring_at(h, size, k);
    head += atomic_load_explicit(&r->head, memory_order_relaxed);
    tail += atomic_load_explicit(&r->tail, memory_order_relaxed);
    drops += atomic_load_explicit(&r->drops, memory_order_relaxed);
    unsupported += atomic_load_explicit(&r->unsupported, memory_order_relaxed);
    claimed += k + 1 < rings && atomic_load_explicit(&r->owner, memory_order_relaxed) != 0;
  }
  put_u64(env, &map, "head", head);
  put_u64(env, &map, "tail", tail);
  put_u64(env, &map, "reads", atomic_load_explicit(&h->reads, memory_order_relaxed));
  put_u64(env, &map, "drops", drops);
  put_u64(env, &map, "unsupported", unsupported);
  put_u64(env, &map, "size", size);
  put_u64(env, &map, "rings", rings);
  put_u64(env, &map, "claimed", claimed);
  put_u64(env, &map, "closed", atomic_load_explicit(&h->closed, memory_order_relaxed));
  put_u64(env, &map, "live", atomic_load_explicit(&live_gen, memory_order_acquire));
  return map;
}

/* budget() -> #{gen, left, over}: the call budget as it is now (left is 0
 * once spent, however many calls came past it: those are `over`). */
static ERL_NIF_TERM nif_budget(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  ERL_NIF_TERM map = enif_make_new_map(env);

  put_u64(env, &map, "gen", atomic_load_explicit(&budget.gen, memory_order_acquire));
  put_u64(env, &map, "left", ks_budget_left(&budget));
  put_u64(env, &map, "over", atomic_load_explicit(&budget.over, memory_order_relaxed));
  return map;
}

/* Instances of this library loaded (load, upgrade) and not unloaded: the last one
 * out deletes thread_key, whose destructor is code of this library. */
static int instances;

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info) {
  int k = 0;

  if (!thread_key_made) {
    if (pthread_key_create(&thread_key, thread_gone) != 0)
      return 1;
    thread_key_made = 1;
    ks_vm_clock_init(&vm_clock, vm_time, ks_tsc_is_clocksource());
  }
  instances++;
  /* 4 MiB, touched only where atoms are used; kept for the VM's life (an
   * upgrade keeps the first one: a scheduler may be reading it). */
  if (atom_stamps == NULL && (atom_stamps = calloc(ATOM_STAMPS, sizeof(*atom_stamps))) == NULL)
    return 1;
  am_trace = enif_make_atom(env, "trace");
  am_remove = enif_make_atom(env, "remove");
  am_discard = enif_make_atom(env, "discard");
  am_meta = enif_make_atom(env, "meta");
  am_extra = enif_make_atom(env, "extra");
  am_trace_status = enif_make_atom(env, "trace_status");
  am_undefined = enif_make_atom(env, "undefined");
  am_timestamp = enif_make_atom(env, "timestamp");
#define X_TAG(tag, kind_)                            \
  event_tags[k].atom = enif_make_atom(env, #tag);    \
  event_tags[k++].kind = (uint8_t)(kind_);
  EVENT_TAGS(X_TAG)
#undef X_TAG
  am_call = enif_make_atom(env, "call");
  am_return_to = enif_make_atom(env, "return_to");
  am_match_spec_result = enif_make_atom(env, "match_spec_result");
  am_true = enif_make_atom(env, "true");
  am_false = enif_make_atom(env, "false");
  ks_etf_probe(env);
  am_ok = enif_make_atom(env, "ok");
  am_error = enif_make_atom(env, "error");
  return 0;
}

/* The module is never purged while a ring may be live (kprof_tracer keeps it). */
static int upgrade(ErlNifEnv *env, void **priv, void **old, ERL_NIF_TERM info) {
  return load(env, priv, info);
}

/* Purged: once no instance is left, no thread's exit may call into this library. The
 * threads' states and claims are let go with the mappings (never unmapped while a
 * ring may be live). */
static void unload(ErlNifEnv *env, void *priv) {
  if (--instances == 0 && thread_key_made) {
    pthread_key_delete(thread_key);
    thread_key_made = 0;
  }
}

static ErlNifFunc funcs[] = {
    {"enabled", 3, nif_enabled, 0},
    {"trace", 5, nif_trace, 0},
    {"attach", 2, nif_attach, 0},
    {"detach", 0, nif_detach, 0},
    {"resume", 1, nif_resume, 0},
    {"release", 0, nif_release, 0},
    {"live", 0, nif_live, 0},
    {"ring_info", 0, nif_ring_info, 0},
    {"budget", 2, nif_set_budget, 0},
    {"budget", 0, nif_budget, 0},
    {"discard", 2, nif_discard, 0},
    {"mark", 3, nif_mark, 0},
    {"mark", 4, nif_mark, 0},
};

ERL_NIF_INIT(kprof_tracer, funcs, load, NULL, upgrade, unload)
