/* ks_hmap.h: the one open-addressing hash table of the sink's private tables.
 *
 * Linear probing over a power-of-two number of slots, all of one size: the
 * user's entry (its key, and its value or an index into the user's array).
 * The entry's first 32-bit word is never KS_NONE in a used slot: KS_NONE there
 * marks an empty one (a new table is all KS_NONE bytes). At most half full
 * unless the user fills it further when it cannot grow; an entry leaves by
 * backward shift (no tombstones), so runs stay unbroken.
 *
 * A slot's home is the low bits of its hash: ks_hash's for bytes, ks_hmap_fib's
 * for an integer key (Fibonacci hashing: its product's high 32 bits). A lookup
 * walks the run from the home, the caller comparing its own key, inline, with
 * a constant entry size (bench/RESULTS.md, "One hash map": the same
 * instructions per event as the tables written for each entry):
 *
 *   for (e = ks_hmap_run(m, sizeof(*e), h, &i); e != NULL; e = ks_hmap_step(m, sizeof(*e), &i))
 *     if (e->key == key)
 *       return e;
 *   ... not there: slot i is the empty one where it goes (ks_hmap_put), unless
 *   the table must grow first (ks_hmap_full, ks_hmap_grow, then ks_hmap_end).
 */
#ifndef KS_HMAP_H
#define KS_HMAP_H

#include "ks.h"

typedef struct ks_hmap {
  unsigned char *v;            /* (mask + 1) slots of size bytes */
  uint32_t mask;
  uint32_t n;                  /* entries */
  uint32_t size;
} ks_hmap;

/* Whose hash is an entry's (to move it when the table grows or an entry leaves). */
typedef uint64_t (*ks_hmap_hash_fn)(const void *entry, const void *ctx);

/* slots (a power of two) empty slots of size bytes (at least 4): KS_OK or KS_ENOMEM. */
int ks_hmap_init(ks_hmap *m, uint32_t size, uint32_t slots);
void ks_hmap_free(ks_hmap *m);
/* Doubles the slots, each entry moved to where hash(entry, ctx) puts it: KS_OK,
 * or KS_ENOMEM with the table as it was. */
int ks_hmap_grow(ks_hmap *m, ks_hmap_hash_fn hash, const void *ctx);
/* Every slot empty again (the slots stay). */
void ks_hmap_clear(ks_hmap *m);

static inline uint64_t ks_hmap_fib(uint64_t key) {
  return (key * 0x9e3779b97f4a7c15ull) >> 32;
}

/* A key of two 32-bit words, hashed as one. */
static inline uint64_t ks_hmap_pair(uint32_t a, uint32_t b) {
  return ks_hmap_fib((uint64_t)a << 32 | b);
}

static inline size_t ks_hmap_home(const ks_hmap *m, uint64_t h) {
  return (size_t)(h & m->mask);
}

/* Slot i, its entry being sz bytes (m->size, a constant at the call). */
static inline void *ks_hmap_at(const ks_hmap *m, uint32_t sz, size_t i) {
  return m->v + i * sz;
}

static inline int ks_hmap_empty(const void *entry) {
  uint32_t w;

  memcpy(&w, entry, sizeof(w));
  return w == KS_NONE;
}

/* The first entry of h's run (its home's), *i its slot; NULL: the home is empty.
 * (Slot indexes are size_t: no widening on the way to an address.) */
static inline void *ks_hmap_run(const ks_hmap *m, uint32_t sz, uint64_t h, size_t *i) {
  void *e = ks_hmap_at(m, sz, *i = (size_t)(h & m->mask));

  return ks_hmap_empty(e) ? NULL : e;
}

/* The next entry of the run, *i its slot; NULL: *i is the empty slot that ends it. */
static inline void *ks_hmap_step(const ks_hmap *m, uint32_t sz, size_t *i) {
  void *e = ks_hmap_at(m, sz, *i = (*i + 1) & m->mask);

  return ks_hmap_empty(e) ? NULL : e;
}

/* The empty slot that ends h's run: where a key that is not there goes. */
static inline size_t ks_hmap_end(const ks_hmap *m, uint32_t sz, uint64_t h) {
  size_t i;
  const void *e;

  for (e = ks_hmap_run(m, sz, h, &i); e != NULL; e = ks_hmap_step(m, sz, &i))
    ;
  return i;
}

/* Whether one more entry would fill the table past half. */
static inline int ks_hmap_full(const ks_hmap *m) {
  return (uint64_t)(m->n + 1) * 2 > (uint64_t)m->mask + 1;
}

/* Slot i (empty: the end of a run) taken: its entry, for the caller to fill. */
static inline void *ks_hmap_put(ks_hmap *m, uint32_t sz, size_t i) {
  m->n++;
  return ks_hmap_at(m, sz, i);
}

/* Takes the entry of slot i out: each later entry of its run whose home is
 * not in (i, j] moves back into the hole. */
static inline void ks_hmap_remove(ks_hmap *m, uint32_t sz, size_t i, ks_hmap_hash_fn hash,
                                  const void *ctx) {
  size_t j = i, k;
  void *e;

  for (;;) {
    j = (j + 1) & m->mask;
    e = ks_hmap_at(m, sz, j);
    if (ks_hmap_empty(e))
      break;
    k = ks_hmap_home(m, hash(e, ctx));
    if ((i <= j) ? (i < k && k <= j) : (i < k || k <= j))
      continue;
    memcpy(ks_hmap_at(m, sz, i), e, sz);
    i = j;
  }
  memset(ks_hmap_at(m, sz, i), 0xff, sizeof(uint32_t));
  m->n--;
}

#endif
