/* tree.c: the call-path tree of a graph.
 *
 * A node is (parent node, frame); the pair is interned in a hash table
 * (port/core/ks_hmap.h) whose slots hold the pair and the node, so finding the
 * stack one frame deeper is one probe, one cache line (a big tree's are all
 * misses).
 * Nodes are never removed: the tree grows with the number of distinct call
 * paths, not with the number of events. Its limits (ks_callpath.h): a
 * node count, where a would-be child's time goes to its parent (full trace's
 * aggregates), or a budget in bytes of the node array and the slots, where a
 * path that does not fit goes to an OVER_BUDGET node under its parent
 * (flame captures). The budget keeps 1/16 in reserve for those nodes; the
 * slot table's growth counts the old table and the new one, both alive
 * while it is rehashed.
 */
#include <stdlib.h>

#include "ks_callpath.h"

#define FIRST_NODES 1024u
#define FIRST_SLOTS 2048u
#define OVER_FRAME KS_FR(KS_FR_PSEUDO, KS_PSEUDO_OVER)

static uint64_t slot_hash(const void *slot, const void *ctx) {
  const ks_fslot *s = slot;

  return ks_hmap_pair(s->parent, s->frame);
}

/* The empty slot where (parent, frame), not in the table, goes. */
static size_t probe(const ks_ftree *t, uint32_t parent, uint32_t frame) {
  return ks_hmap_end(&t->slots, sizeof(ks_fslot), ks_hmap_pair(parent, frame));
}

static uint64_t slot_bytes(const ks_ftree *t) {
  return ((uint64_t)t->slots.mask + 1) * sizeof(ks_fslot);
}

static void add_bytes(ks_ftree *t, uint64_t plus, uint64_t minus) {
  t->bytes = t->bytes + plus - minus;
  if (t->bytes > t->peak)
    t->peak = t->bytes;
}

/* Whether `more` bytes fit under limit. */
static int fits(const ks_ftree *t, uint64_t more, uint64_t limit) {
  return limit == KS_FTREE_NO_BUDGET || (t->bytes <= limit && more <= limit - t->bytes);
}

/* Doubles the slots when the old and the new fit under limit together. */
static int grow_slots(ks_ftree *t, uint64_t limit) {
  uint64_t was = slot_bytes(t);

  if (!fits(t, 2 * was, limit) || ks_hmap_grow(&t->slots, slot_hash, NULL) != KS_OK)
    return KS_ENOMEM;
  add_bytes(t, 2 * was, was);
  return KS_OK;
}

/* Room for one more node: doubling, or what the limit leaves. */
static int grow_nodes(ks_ftree *t, uint64_t limit) {
  uint32_t cap = t->cap * 2 > t->max ? t->max : t->cap * 2;
  ks_fnode *v;

  if (limit != KS_FTREE_NO_BUDGET && !fits(t, (uint64_t)(cap - t->cap) * sizeof(*v), limit)) {
    uint64_t room = t->bytes < limit ? (limit - t->bytes) / sizeof(*v) : 0;
    cap = room > cap - t->cap ? cap : t->cap + (uint32_t)room;
  }
  if (cap <= t->cap || (v = realloc(t->v, (size_t)cap * sizeof(*v))) == NULL)
    return KS_ENOMEM;
  add_bytes(t, (uint64_t)(cap - t->cap) * sizeof(*v), 0);
  t->v = v;
  t->cap = cap;
  return KS_OK;
}

/* A new node (parent, frame) at slot i, within limit: its index, or KS_NONE. */
static uint32_t make(ks_ftree *t, uint32_t parent, uint32_t frame, size_t i, uint64_t limit) {
  ks_fnode *nd;
  ks_fslot *sl;
  uint32_t k;

  if (t->n >= t->max)
    return KS_NONE;
  /* Load at most 1/2 keeps probes short; a table that cannot grow takes
   * nodes up to 7/8 full, and the budget's reserve (OVER_BUDGET nodes, at
   * the full budget) up to 15/16. */
  if ((uint64_t)(t->n + 1) * 2 > (uint64_t)t->slots.mask + 1) {
    uint64_t room = limit == t->budget ? 15 : 14;
    if (grow_slots(t, limit) == KS_OK)
      i = probe(t, parent, frame);
    else if ((uint64_t)(t->n + 1) * 16 > ((uint64_t)t->slots.mask + 1) * room)
      return KS_NONE;
  }
  if (t->n == t->cap && grow_nodes(t, limit) != KS_OK)
    return KS_NONE;
  k = t->n++;
  sl = ks_hmap_put(&t->slots, sizeof(ks_fslot), i);
  sl->parent = parent;
  sl->frame = frame;
  sl->node = k;
  nd = &t->v[k];
  nd->parent = parent;
  nd->frame = frame;
  nd->child = KS_NONE;
  nd->self = 0;
  nd->n = nd->nr = 0;
  nd->calls = 0;
  /* Prepended: ks_ftree_order puts the lists in first-seen order. */
  nd->sibling = parent == KS_NONE ? KS_NONE : t->v[parent].child;
  if (parent != KS_NONE)
    t->v[parent].child = k;
  t->ordered = 0;
  return k;
}

/* The child (parent, frame): found, or made within limit (unless `full');
 * KS_NONE when it is neither. */
static uint32_t child_within(ks_ftree *t, uint32_t parent, uint32_t frame, uint64_t limit,
                             int full) {
  const ks_fslot *sl;
  size_t i;

  for (sl = ks_hmap_run(&t->slots, sizeof(*sl), ks_hmap_pair(parent, frame), &i); sl != NULL;
       sl = ks_hmap_step(&t->slots, sizeof(*sl), &i))
    if (sl->parent == parent && sl->frame == frame)
      return sl->node;
  return full ? KS_NONE : make(t, parent, frame, i, limit);
}

int ks_ftree_init(ks_ftree *t, uint32_t max_nodes, uint64_t budget) {
  memset(t, 0, sizeof(*t));
  t->max = max_nodes < 3 ? 3 : max_nodes;
  t->budget = budget;
  t->spill = KS_NONE;
  t->cap = FIRST_NODES;
  t->v = malloc(t->cap * sizeof(*t->v));
  if (t->v == NULL || ks_hmap_init(&t->slots, sizeof(ks_fslot), FIRST_SLOTS) != KS_OK) {
    ks_ftree_free(t);
    return KS_ENOMEM;
  }
  add_bytes(t, (uint64_t)t->cap * sizeof(*t->v) + slot_bytes(t), 0);
  /* The root: no parent, no frame; it is never looked up. */
  t->v[0].parent = KS_NONE;
  t->v[0].frame = KS_NONE;
  t->v[0].child = t->v[0].sibling = KS_NONE;
  t->v[0].self = 0;
  t->v[0].n = t->v[0].nr = 0;
  t->v[0].calls = 0;
  t->n = 1;
  /* With a budget, the last resort for paths past it: made now, so it is there. */
  if (budget != KS_FTREE_NO_BUDGET)
    t->spill = child_within(t, 0, OVER_FRAME, KS_FTREE_NO_BUDGET, 0);
  return KS_OK;
}

void ks_ftree_free(ks_ftree *t) {
  free(t->v);
  ks_hmap_free(&t->slots);
  memset(t, 0, sizeof(*t));
}

uint32_t ks_ftree_child(ks_ftree *t, uint32_t parent, uint32_t frame) {
  uint32_t k;

  if (t->budget == KS_FTREE_NO_BUDGET) {
    if ((k = child_within(t, parent, frame, KS_FTREE_NO_BUDGET, 0)) != KS_NONE)
      return k;
    t->dropped++;
    return parent;
  }
  /* Past OVER_BUDGET, frames stay in it; SLEEP and GC go above. */
  if (ks_ftree_is_over(t, parent) && frame != KS_FR(KS_FR_PSEUDO, KS_PSEUDO_SLEEP) &&
      frame != KS_FR(KS_FR_PSEUDO, KS_PSEUDO_GC))
    return parent;
  if (ks_ftree_is_over(t, parent) || frame == OVER_FRAME) {
    k = child_within(t, parent, frame, t->budget, 0);
    return k != KS_NONE ? k : t->spill;
  }
  /* Once a path did not fit, none is made from the reserve's room. */
  if ((k = child_within(t, parent, frame, t->budget - t->budget / 16, t->full)) != KS_NONE)
    return k;
  t->full = 1;
  t->over_paths++;
  k = child_within(t, parent, OVER_FRAME, t->budget, 0);
  return k != KS_NONE ? k : t->spill;
}

void ks_ftree_order(ks_ftree *t) {
  uint32_t k, prev, cur, next;

  if (t->ordered)
    return;
  for (k = 0; k < t->n; k++) {
    prev = KS_NONE;
    cur = t->v[k].child;
    while (cur != KS_NONE) {
      next = t->v[cur].sibling;
      t->v[cur].sibling = prev;
      prev = cur;
      cur = next;
    }
    t->v[k].child = prev;
  }
  t->ordered = 1;
}

void ks_ftree_totals(const ks_ftree *t, uint64_t *total) {
  uint32_t k;

  for (k = 0; k < t->n; k++)
    total[k] = t->v[k].self;
  /* A child's index is always above its parent's. */
  for (k = t->n; k-- > 1;)
    total[t->v[k].parent] += total[k];
}
