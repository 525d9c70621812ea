/* test_hmap.c: the one hash table (port/core/ks_hmap.h): probes, growth and
 * removal against a plain array of what it should hold, runs that wrap round
 * the end of the slots, hashes that put every key in a few homes. */
#include <stdlib.h>

#include "core/ks_hmap.h"
#include "test_util.h"

typedef struct ent {
  uint32_t key, val;   /* key KS_NONE: empty */
} ent;

/* The hash's home bits: spread (Fibonacci), or all keys into homes 0..3 of the
 * last four slots' neighbourhood (runs as long as the table allows). */
static int crowded;

static uint64_t key_hash(uint32_t key) {
  return crowded ? UINT32_MAX - key % 4 : ks_hmap_fib(key);
}

static uint64_t ent_hash(const void *e, const void *ctx) {
  (void)ctx;
  return key_hash(((const ent *)e)->key);
}

/* The key's slot, or the empty one that ends its run. */
static size_t slot(const ks_hmap *m, uint32_t key) {
  const ent *e;
  size_t i;

  for (e = ks_hmap_run(m, sizeof(*e), key_hash(key), &i); e != NULL;
       e = ks_hmap_step(m, sizeof(*e), &i))
    if (e->key == key)
      break;
  return i;
}

static const ent *find(const ks_hmap *m, uint32_t key) {
  const ent *e = ks_hmap_at(m, sizeof(ent), slot(m, key));

  return ks_hmap_empty(e) ? NULL : e;
}

static void put(ks_hmap *m, uint32_t key, uint32_t val) {
  size_t i = slot(m, key);
  ent *e;

  ck_assert(ks_hmap_empty(ks_hmap_at(m, sizeof(ent), i)));
  if (ks_hmap_full(m)) {
    ck_assert_int_eq(ks_hmap_grow(m, ent_hash, NULL), KS_OK);
    i = ks_hmap_end(m, sizeof(ent), key_hash(key));
  }
  e = ks_hmap_put(m, sizeof(ent), i);
  e->key = key;
  e->val = val;
}

/* Every key of want (want[k] != 0: held, with value want[k]) is found, no other.
 * One assertion per call, not per key: Check reports each assertion's place
 * through a pipe, a system call that valgrind makes slow (40 s of the suite). */
static void holds(const ks_hmap *m, const uint32_t *want, uint32_t n) {
  uint32_t k, count = 0, bad = 0, first = 0;
  const ent *e;

  for (k = 0; k < n; k++) {
    e = find(m, k);
    if (want[k] == 0 ? e != NULL : e == NULL || e->val != want[k]) {
      if (bad++ == 0)
        first = k;
    }
    count += want[k] != 0;
  }
  ck_assert_msg(bad == 0, "%u of %u keys wrong, the first %u (want %u, found %s %u)", bad, n,
                first, want[first], find(m, first) != NULL ? "value" : "none",
                find(m, first) != NULL ? find(m, first)->val : 0);
  ck_assert_uint_eq(m->n, count);
}

/* Random puts and removes, checked after each step against the array. */
static void churn(int crowd, uint32_t nkeys, uint32_t steps) {
  uint32_t *want = calloc(nkeys, sizeof(*want)), k, s;
  ks_hmap m;

  crowded = crowd;
  srand(7);
  ck_assert_int_eq(ks_hmap_init(&m, sizeof(ent), 8), KS_OK);
  for (s = 1; s <= steps; s++) {
    k = (uint32_t)rand() % nkeys;
    if (want[k] == 0) {
      put(&m, k, s);
      want[k] = s;
    } else {
      ks_hmap_remove(&m, sizeof(ent), slot(&m, k), ent_hash, NULL);
      want[k] = 0;
    }
    if (s % 97 == 0 || nkeys <= 64)
      holds(&m, want, nkeys);
  }
  holds(&m, want, nkeys);
  ks_hmap_free(&m);
  free(want);
  crowded = 0;
}

START_TEST(spread_keys) {
  churn(0, 5000, 40000);
}
END_TEST

/* Four homes at the slots' end: every run wraps round to slot 0, and removals
 * shift entries back across the wrap. */
START_TEST(crowded_keys_wrap) {
  churn(1, 40, 4000);
}
END_TEST

START_TEST(grow_and_clear) {
  uint32_t want[300] = {0}, k;
  ks_hmap m;

  ck_assert_int_eq(ks_hmap_init(&m, sizeof(ent), 4), KS_OK);
  for (k = 0; k < 300; k++) {
    put(&m, k, k + 1);
    want[k] = k + 1;
  }
  ck_assert_uint_ge(m.mask + 1, 600);   /* at most half full */
  holds(&m, want, 300);
  ks_hmap_clear(&m);
  memset(want, 0, sizeof(want));
  holds(&m, want, 300);
  ks_hmap_free(&m);
  ck_assert_int_eq(ks_hmap_init(&m, sizeof(ent), 6), KS_ENOMEM);   /* not a power of two */
  ck_assert_int_eq(ks_hmap_init(&m, 2, 8), KS_ENOMEM);              /* no room for the mark */
}
END_TEST

Suite *hmap_suite(void) {
  Suite *s = suite_create("hmap");
  TCase *tc = tcase_create("hmap");

  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, spread_keys);
  tcase_add_test(tc, crowded_keys_wrap);
  tcase_add_test(tc, grow_and_clear);
  suite_add_tcase(s, tc);
  return s;
}
