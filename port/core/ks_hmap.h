/* ks_hmap.h: the one open-addressing hash table of the sink's private tables.
 *
 * Linear probing over a power-of-two number of slots, all of one size: the
 * user's entry (its key, and its value or an index into the user's array).
 * The entry's first 32-bit word is never KS_NONE in a used slot: KS_NONE there
 * marks an empty one (a new table is all KS_NONE bytes). At most half full
 * unless the user fills it further when it cannot grow; an entry leaves by
 * backward shift (no tombstones), so probe runs stay unbroken.
 *
 * The probe and the removal are inline and take the entry's size, the hash
 * and the equality from the caller: with a constant size and functions the
 * compiler sees, they compile to the code of a table written for that entry
 * (bench/RESULTS.md, "One hash map": instructions per event before and
 * after). A slot's home is the high 32 bits of its hash (ks_hmap_fib for an
 * integer key: Fibonacci hashing; ks_hash for bytes).
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

/* Is the key equal to the entry's? Whose hash is an entry's (to move it)? */
typedef int (*ks_hmap_eq_fn)(const void *entry, const void *key);
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
  return key * 0x9e3779b97f4a7c15ull;
}

static inline uint32_t ks_hmap_home(const ks_hmap *m, uint64_t h) {
  return (uint32_t)(h >> 32) & m->mask;
}

/* Slot i, its entry being sz bytes (m->size, a constant at the call). */
static inline void *ks_hmap_at(const ks_hmap *m, uint32_t sz, uint32_t i) {
  return m->v + (size_t)i * sz;
}

static inline int ks_hmap_empty(const void *entry) {
  uint32_t w;

  memcpy(&w, entry, sizeof(w));
  return w == KS_NONE;
}

/* Whether one more entry would fill the table past half. */
static inline int ks_hmap_full(const ks_hmap *m) {
  return (uint64_t)(m->n + 1) * 2 > (uint64_t)m->mask + 1;
}

/* The slot of the entry eq(entry, key) accepts, else of the empty slot that
 * ends the probe (where the key goes: ks_hmap_put). */
static inline __attribute__((always_inline)) uint32_t
ks_hmap_probe(const ks_hmap *m, uint32_t sz, uint64_t h, ks_hmap_eq_fn eq, const void *key) {
  uint32_t i = ks_hmap_home(m, h);
  const void *e;

  for (;;) {
    e = ks_hmap_at(m, sz, i);
    if (ks_hmap_empty(e) || eq(e, key))
      return i;
    i = (i + 1) & m->mask;
  }
}

/* Slot i (empty, from a probe) taken: its entry, for the caller to fill. */
static inline void *ks_hmap_put(ks_hmap *m, uint32_t sz, uint32_t i) {
  m->n++;
  return ks_hmap_at(m, sz, i);
}

/* Takes the entry of slot i out: each later entry of its run whose home is
 * not in (i, j] moves back into the hole. */
static inline __attribute__((always_inline)) void
ks_hmap_remove(ks_hmap *m, uint32_t sz, uint32_t i, ks_hmap_hash_fn hash, const void *ctx) {
  uint32_t j = i, k;
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
