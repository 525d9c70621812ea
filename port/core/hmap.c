/* hmap.c: the hash table's allocation and growth (ks_hmap.h says how it probes). */
#include <stdlib.h>

#include "ks_hmap.h"

int ks_hmap_init(ks_hmap *m, uint32_t size, uint32_t slots) {
  memset(m, 0, sizeof(*m));
  if (size < sizeof(uint32_t) || slots == 0 || (slots & (slots - 1)) != 0 ||
      (m->v = malloc((size_t)slots * size)) == NULL)
    return KS_ENOMEM;
  m->mask = slots - 1;
  m->size = size;
  ks_hmap_clear(m);
  return KS_OK;
}

void ks_hmap_free(ks_hmap *m) {
  free(m->v);
  memset(m, 0, sizeof(*m));
}

/* Each slot's mark (its first word) KS_NONE; the rest is never read empty. */
void ks_hmap_clear(ks_hmap *m) {
  size_t k;

  for (k = 0; k <= m->mask; k++)
    memset(m->v + k * m->size, 0xff, sizeof(uint32_t));
  m->n = 0;
}

int ks_hmap_grow(ks_hmap *m, ks_hmap_hash_fn hash, const void *ctx) {
  ks_hmap g;
  uint32_t k;
  size_t i;
  const unsigned char *e;

  if (m->mask >= UINT32_MAX / 2 || ks_hmap_init(&g, m->size, (m->mask + 1) * 2) != KS_OK)
    return KS_ENOMEM;
  for (k = 0; k <= m->mask; k++) {
    e = ks_hmap_at(m, m->size, k);
    if (ks_hmap_empty(e))
      continue;
    i = ks_hmap_end(&g, g.size, hash(e, ctx));
    memcpy(ks_hmap_at(&g, g.size, i), e, m->size);
  }
  g.n = m->n;
  free(m->v);
  *m = g;
  return KS_OK;
}
