/* flame_tree.c: the call-path tree of a flame capture.
 *
 * A node is (parent node, frame); the pair is interned in an open-addressing
 * table of node indices, so finding the stack one frame deeper is one probe.
 * Nodes are never removed: the tree grows with the number of distinct call
 * paths, not with the number of events. At max nodes, a would-be child is
 * counted and its time goes to the parent.
 */
#include <stdlib.h>

#include "ks_flame.h"

static uint32_t slot_of(uint32_t parent, uint32_t frame, uint32_t mask) {
  uint64_t h = ((uint64_t)parent << 32 | frame) * 0x9e3779b97f4a7c15ull;

  return (uint32_t)(h >> 32) & mask;
}

static int grow_slots(ks_ftree *t) {
  uint32_t n = (t->mask + 1) * 2, mask = n - 1, i, k;
  uint32_t *slots = malloc((size_t)n * sizeof(*slots));

  if (slots == NULL)
    return KS_ENOMEM;
  memset(slots, 0xff, (size_t)n * sizeof(*slots));
  for (k = 0; k < t->n; k++) {
    i = slot_of(t->v[k].parent, t->v[k].frame, mask);
    while (slots[i] != KS_NONE)
      i = (i + 1) & mask;
    slots[i] = k;
  }
  free(t->slots);
  t->slots = slots;
  t->mask = mask;
  return KS_OK;
}

int ks_ftree_init(ks_ftree *t, uint32_t max_nodes) {
  memset(t, 0, sizeof(*t));
  t->max = max_nodes < 2 ? 2 : max_nodes;
  t->cap = 1024;
  t->v = malloc(t->cap * sizeof(*t->v));
  t->slots = malloc(2048 * sizeof(*t->slots));
  if (t->v == NULL || t->slots == NULL) {
    ks_ftree_free(t);
    return KS_ENOMEM;
  }
  memset(t->slots, 0xff, 2048 * sizeof(*t->slots));
  t->mask = 2047;
  /* The root: no parent, no frame; it is never looked up. */
  t->v[0].parent = KS_NONE;
  t->v[0].frame = KS_NONE;
  t->v[0].child = t->v[0].sibling = KS_NONE;
  t->v[0].self = 0;
  t->n = 1;
  return KS_OK;
}

void ks_ftree_free(ks_ftree *t) {
  free(t->v);
  free(t->slots);
  memset(t, 0, sizeof(*t));
}

uint32_t ks_ftree_child(ks_ftree *t, uint32_t parent, uint32_t frame) {
  uint32_t i = slot_of(parent, frame, t->mask), k;
  ks_fnode *nd;

  for (;;) {
    k = t->slots[i];
    if (k == KS_NONE)
      break;
    if (t->v[k].parent == parent && t->v[k].frame == frame)
      return k;
    i = (i + 1) & t->mask;
  }
  if (t->n >= t->max) {
    t->dropped++;
    return parent;
  }
  /* Load at most 1/2 keeps probes short; a table that cannot grow still takes
   * nodes until it is nearly full. */
  if ((uint64_t)(t->n + 1) * 2 > (uint64_t)t->mask + 1) {
    if (grow_slots(t) == KS_OK) {
      i = slot_of(parent, frame, t->mask);
      while (t->slots[i] != KS_NONE)
        i = (i + 1) & t->mask;
    } else if (t->n + 2 > t->mask) {
      t->dropped++;
      return parent;
    }
  }
  if (t->n == t->cap) {
    uint32_t cap = t->cap * 2 > t->max ? t->max : t->cap * 2;
    ks_fnode *v = realloc(t->v, (size_t)cap * sizeof(*v));
    if (v == NULL) {
      t->dropped++;
      return parent;
    }
    t->v = v;
    t->cap = cap;
  }
  k = t->n++;
  t->slots[i] = k;
  nd = &t->v[k];
  nd->parent = parent;
  nd->frame = frame;
  nd->child = KS_NONE;
  nd->self = 0;
  /* Prepended: ks_ftree_order puts the lists in first-seen order. */
  nd->sibling = t->v[parent].child;
  t->v[parent].child = k;
  t->ordered = 0;
  return k;
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

typedef struct walk_item {
  uint32_t node, next;   /* next: the child to visit next */
  uint64_t t, at;        /* t: where the node starts; at: where the next child starts */
  int skip;
} walk_item;

int ks_fwalk(const ks_fout *o, uint32_t start, ks_fvisit_fn open, ks_fvisit_fn close,
             void *ctx) {
  const ks_ftree *tr = &o->c->tree;
  walk_item *st;
  uint32_t n = 0, cap = 64;
  int rc = KS_OK, r;

  if (start >= tr->n || o->total[start] == 0)
    return KS_OK;
  if ((st = malloc(cap * sizeof(*st))) == NULL)
    return KS_ENOMEM;
  r = open ? open(ctx, start, 0, 0) : 1;
  if (r < 0) {
    free(st);
    return r;
  }
  st[n++] = (walk_item){start, tr->v[start].child, 0, 0, r == 0};
  while (n > 0) {
    walk_item *it = &st[n - 1];
    uint32_t k = it->skip ? KS_NONE : it->next;
    while (k != KS_NONE && o->total[k] == 0)
      k = tr->v[k].sibling;
    if (k == KS_NONE) {
      if (close != NULL && (r = close(ctx, it->node, n - 1, it->t)) < 0) {
        rc = r;
        break;
      }
      n--;
      continue;
    }
    it->next = tr->v[k].sibling;
    if (n == cap) {
      walk_item *v = realloc(st, 2 * cap * sizeof(*st));
      if (v == NULL) {
        rc = KS_ENOMEM;
        break;
      }
      st = v;
      cap *= 2;
      it = &st[n - 1];
    }
    r = open ? open(ctx, k, n, it->at) : 1;
    if (r < 0) {
      rc = r;
      break;
    }
    st[n] = (walk_item){k, tr->v[k].child, it->at, it->at, r == 0};
    it->at += o->total[k];
    n++;
  }
  free(st);
  return rc;
}
