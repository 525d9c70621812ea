/* view.c: the graph as written, when processes are grouped or recursion folded.
 *
 * A graph's tree keeps one root node per process and every frame as it
 * was called. At write time (never while events arrive) it is copied into a
 * view's tree, node by node in creation order (parents before children, so
 * first-seen order is kept):
 *   - group (KS_GROUP_NAME, _CALL, _ALL): a process whose key (registered
 *     name, what it runs as ks_callpath_proc_call says, or `all') it shares with
 *     another process goes under one KS_FR_GROUP root, key(N_processes), and
 *     their stacks merge, times summed; a process alone with its key, or
 *     with none, keeps its own root;
 *   - fold_recursion: an MFA frame right above the same MFA is merged into
 *     it (f;f;f is f), its time and children going to the outer one, as
 *     eflame does (its calls are not added: they are the recursion's).
 * The view shares nothing the writers change; ks_callpath_view_free frees it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ks_callpath.h"

/* The group key of process p into buf: its length, 0 for none. */
static size_t key_of(const ks_callpath *g, const ks_intern *in, const ks_fproc *p, char *buf,
                     size_t cap) {
  switch (g->o.group) {
  case KS_GROUP_NAME:
    if (p->name == NULL)
      return 0;
    snprintf(buf, cap, "%s", p->name);
    return strlen(buf);
  case KS_GROUP_CALL:
    return ks_callpath_proc_call(g, in, p, buf, cap);
  case KS_GROUP_ALL:
    snprintf(buf, cap, "all");
    return 3;
  default:
    return 0;
  }
}

void ks_callpath_view_free(ks_callpath *view) {
  uint32_t k;

  for (k = 0; k < view->ngroups; k++)
    free(view->groups[k].key);
  free(view->groups);
  ks_ftree_free(&view->tree);
  view->groups = NULL;
  view->ngroups = 0;
}

/* Group index of key among the first n groups, or n. */
static uint32_t find_group(const ks_fgroup *g, uint32_t n, const char *key) {
  uint32_t k;

  for (k = 0; k < n && strcmp(g[k].key, key) != 0; k++)
    ;
  return k;
}

int ks_callpath_view(const ks_callpath *g, const ks_intern *in, ks_callpath *view) {
  const ks_ftree *src = &g->tree;
  uint32_t *map = NULL, *gid = NULL, k, ng = 0, cap_g = 0;
  ks_fgroup *groups = NULL;
  char key[1024];
  int rc = KS_ENOMEM;

  *view = *g;
  view->groups = NULL;
  view->ngroups = 0;
  memset(&view->tree, 0, sizeof(view->tree));
  map = malloc((size_t)src->n * sizeof(*map));
  gid = malloc((size_t)src->n * sizeof(*gid));
  if (map == NULL || gid == NULL)
    goto out;
  /* The groups: one per key, counted over the processes with time. */
  for (k = src->v[0].child; k != KS_NONE; k = src->v[k].sibling) {
    const ks_fproc *p = KS_FR_KIND(src->v[k].frame) == KS_FR_PROC
                            ? ks_callpath_proc(g, KS_FR_VAL(src->v[k].frame)) : NULL;
    uint32_t gi;
    gid[k] = KS_NONE;
    if (p == NULL || key_of(g, in, p, key, sizeof(key)) == 0)
      continue;
    gi = find_group(groups, ng, key);
    if (gi == ng) {
      if (ks_grow(&groups, &cap_g, ng, 16, sizeof(*groups)) != KS_OK)
        goto out;
      if ((groups[ng].key = malloc(strlen(key) + 1)) == NULL)
        goto out;
      strcpy(groups[ng].key, key);
      groups[ng++].n = 0;
    }
    groups[gi].n++;
    gid[k] = gi;
  }
  if (ks_ftree_init(&view->tree, src->n + ng + 16, KS_FTREE_NO_BUDGET) != KS_OK)
    goto out;
  map[0] = 0;
  for (k = 1; k < src->n; k++) {
    uint32_t parent = map[src->v[k].parent], frame = src->v[k].frame;
    if (src->v[k].parent == 0 && gid[k] != KS_NONE && groups[gid[k]].n > 1)
      frame = KS_FR(KS_FR_GROUP, gid[k]);
    if (g->o.fold_recursion && KS_FR_KIND(frame) == KS_FR_MFA && parent != 0 &&
        view->tree.v[parent].frame == frame)
      map[k] = parent;
    else
      map[k] = ks_ftree_child(&view->tree, parent, frame);
    view->tree.v[map[k]].self += src->v[k].self;
    /* Calls of a folded recursion are hidden with its frames (else its
     * caller would seem to call it that often). */
    if (map[k] != parent) {
      uint64_t calls = (uint64_t)view->tree.v[map[k]].calls + src->v[k].calls;
      view->tree.v[map[k]].calls = calls > UINT32_MAX ? UINT32_MAX : (uint32_t)calls;
    }
  }
  view->tree.v[0].self += src->v[0].self;
  ks_ftree_order(&view->tree);
  view->groups = groups;
  view->ngroups = ng;
  groups = NULL;
  rc = KS_OK;
out:
  if (groups != NULL) {
    for (k = 0; k < ng; k++)
      free(groups[k].key);
    free(groups);
  }
  if (rc != KS_OK)
    ks_ftree_free(&view->tree);
  free(map);
  free(gid);
  return rc;
}
