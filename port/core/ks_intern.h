/* ks_intern.h: byte-string keyed hash tables and the MFA, pid and term tables built on them. */
#ifndef KS_INTERN_H
#define KS_INTERN_H

#include "ks.h"
#include "ks_etf.h"
#include "ks_hmap.h"

/* A table of byte-string keys (ks_hmap.h's); keys are copied into an arena once. */
typedef struct ks_itab_slot {
  uint32_t val;   /* KS_NONE marks an empty slot */
  uint32_t off;   /* key offset in the arena */
  uint64_t hash;
  uint32_t len;
} ks_itab_slot;

typedef struct ks_itab {
  union {
    ks_hmap map;          /* of ks_itab_slot */
    ks_itab_slot *slots;  /* the same slots as an array (map.v): NULL before init */
  };
  unsigned char *arena;
  size_t arena_len, arena_cap;
} ks_itab;

int ks_itab_init(ks_itab *t, size_t slots_hint);
void ks_itab_free(ks_itab *t);
/* Returns the value or KS_NONE. */
uint32_t ks_itab_get(const ks_itab *t, const void *key, size_t len, uint64_t hash);
/* Copies the key into the arena; *off (may be NULL) gets its offset. */
int ks_itab_put(ks_itab *t, const void *key, size_t len, uint64_t hash, uint32_t val,
                uint32_t *off);
const unsigned char *ks_itab_key(const ks_itab *t, uint32_t off);
/*
 * Rebuilds the table with only the entries keep(ctx, val, new_off) accepts
 * (called once per entry, with the offset its key has in the new arena): the
 * way entries leave a table, and the arena shrinks with them. On KS_ENOMEM
 * the table is as it was.
 */
int ks_itab_filter(ks_itab *t, int (*keep)(void *ctx, uint32_t val, uint32_t new_off), void *ctx);
/* Ids being released: dead[id] set (ids at or past n are not). */
typedef struct ks_dead_ids {
  const uint8_t *dead;
  uint32_t n;
} ks_dead_ids;
/* A ks_itab_filter keep function (ctx: a ks_dead_ids): keeps the entries whose
 * value is an id not being released. */
int ks_keep_live_id(void *ctx, uint32_t id, uint32_t new_off);

/*
 * Canonical keys, which are also what an id stands for:
 *   MFA: "Module\0Function\0" + arity (4 bytes), UTF-8;
 *   pid: "Node\0" + kind (1 byte: 0 pid, 1 port) + num, serial, creation (4 bytes
 *        each; a port keeps its 64-bit id in num:serial).
 * The id's record holds the key's offset in the canonical table's arena.
 */
typedef struct ks_mfa_view {
  const char *m, *f;
  uint32_t arity;
} ks_mfa_view;

typedef struct ks_pid_view {
  const char *node;
  int is_port;
  uint32_t num, serial, creation;
} ks_pid_view;

typedef struct ks_term {
  uint32_t off, len;       /* raw ETF bytes (no version byte) in the table arena */
} ks_term;

/*
 * The sink's three tables. Each maps the raw bytes seen in frames to an id
 * (fast path: one hash of the bytes, one probe) and, on a miss, a canonical
 * key to the same id, so the same MFA or pid gets one id whatever atom
 * encoding the VM used.
 */
/* A direct-mapped cache in front of mfa_tuple for the fast path (ks_intern_mfa_known). */
#define KS_MFA_RECENT 256
#define KS_MFA_RECENT_KEY 56
typedef struct ks_mfa_recent {
  uint32_t len;   /* 0: empty */
  uint32_t id;
  unsigned char key[KS_MFA_RECENT_KEY];
} ks_mfa_recent;

typedef struct ks_intern {
  ks_itab mfa_raw, mfa_canon;
  ks_mfa_recent *mfa_recent;   /* KS_MFA_RECENT entries */
  uint32_t *mfas;          /* id -> canonical key offset */
  uint32_t n_mfas, cap_mfas, max_mfas;
  ks_itab mfa_tuple;       /* raw {M,F,Arity} tuple bytes -> id */
  ks_itab pid_raw, pid_canon;
  unsigned char last_pid[64];   /* the last pid seen, raw: runs of one process are common */
  size_t last_pid_len;
  uint32_t last_pid_id;
  uint32_t *pids;          /* id -> canonical key offset; KS_NONE: a released id */
  uint32_t n_pids, cap_pids, max_pids;   /* n_pids: ids handed out (the live ones and the free) */
  uint32_t *pid_free;      /* released ids, reused before new ones */
  uint32_t n_pid_free, cap_pid_free;
  uint64_t pids_freed;     /* ids released (ks_intern_pids_release) */
  /* Called when a new pid meets max_pids: returns how many ids it released
   * (the sink's reclaim, port/sink/pid_reclaim.c); NULL: none. */
  int (*pids_full)(void *ctx);
  void *pids_full_ctx;
  ks_itab terms;
  ks_term *termv;
  uint32_t n_terms, cap_terms, max_terms;
  /*
   * New keys refused at a cap (KS_EFULL), per table. Counted here because only
   * the table knows which one is full: the decoder and the ring reader see one
   * KS_EFULL for a frame or record. The stats reply shows them as dropped_mfas,
   * dropped_pids and dropped_names; the `reset` command zeroes them.
   */
  uint64_t dropped_mfas, dropped_pids, dropped_terms;
} ks_intern;

typedef struct ks_intern_limits {
  uint32_t max_mfas, max_pids, max_terms;
} ks_intern_limits;

int ks_intern_init(ks_intern *in, const ks_intern_limits *lim);
void ks_intern_free(ks_intern *in);
/* Each returns KS_OK and sets *id, KS_EFULL at the cap (counted in the table's dropped_*),
 * KS_EBADTERM on bad atoms. */
int ks_intern_mfa(ks_intern *in, const ks_atom *m, const ks_atom *f, uint32_t arity, uint32_t *id);
/* Same, keyed first by `raw`, the {M, F, Arity} tuple's bytes in the frame. */
int ks_intern_mfa_raw(ks_intern *in, ks_slice raw, const ks_atom *m, const ks_atom *f,
                      uint32_t arity, uint32_t *id);
int ks_intern_pid(ks_intern *in, ks_slice raw, uint32_t *id);
/* Pids that hold an id now (handed out and not released). */
uint32_t ks_intern_pids_live(const ks_intern *in);
/*
 * Releases the pid ids whose dead[id] is set (dead has n entries; ids past it
 * are kept): their raw and canonical keys leave the tables, and the ids are
 * handed out again to the next new pids. The caller makes sure nothing still
 * refers to them (doc: port/sink/pid_reclaim.c). KS_OK or KS_ENOMEM (nothing
 * released).
 */
int ks_intern_pids_release(ks_intern *in, const uint8_t *dead, uint32_t n);
/* A lookup only, of a tuple's bytes the table has seen: KS_OK and *id, or KS_EINVAL. */
int ks_intern_mfa_known(ks_intern *in, const unsigned char *tuple, size_t n, uint32_t *id);
int ks_intern_term(ks_intern *in, ks_slice raw, uint32_t *id);
/* Views stay valid until the next intern call. Return KS_EINVAL for an unknown id. */
int ks_intern_mfa_get(const ks_intern *in, uint32_t id, ks_mfa_view *v);
int ks_intern_pid_get(const ks_intern *in, uint32_t id, ks_pid_view *v);
/* The owner's `reset`: the drop counters start again (the ids stay). */
void ks_intern_reset_counts(ks_intern *in);
ks_slice ks_intern_term_get(const ks_intern *in, uint32_t id);

#endif
