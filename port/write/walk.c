/* walk.c: the walk of a graph's tree that the writers share (ks_fwalk). */
#include <stdlib.h>

#include "ks_write.h"

typedef struct walk_item {
  uint32_t node, next;   /* next: the child to visit next */
  uint64_t t, at;        /* t: where the node starts; at: where the next child starts */
  int skip;
} walk_item;

int ks_fwalk(const ks_fout *o, uint32_t start, ks_fvisit_fn open, ks_fvisit_fn close,
             void *ctx) {
  const ks_ftree *tr = &o->g->tree;
  walk_item *st = NULL;
  uint32_t n = 0, cap = 0;
  int rc = KS_OK, r;

  if (start >= tr->n || o->total[start] == 0)
    return KS_OK;
  if (ks_grow(&st, &cap, 0, 64, sizeof(*st)) != KS_OK)
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
    if (ks_grow(&st, &cap, n, 64, sizeof(*st)) != KS_OK) {
      rc = KS_ENOMEM;
      break;
    }
    it = &st[n - 1];
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
