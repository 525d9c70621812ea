/* folded.c: folded stacks, one `root;frame;...;leaf COUNT` line per call path.
 *
 * folded: COUNT is the path's self time in whole microseconds. Rounding is
 * done on the running sum along the merged timeline, so the counts add up to
 * the capture's total time (rounded once) and no path's count is off by more
 * than 1. Paths whose count rounds to 0 are left out.
 * folded_calls: COUNT is the calls of the path's leaf frame on that path (the
 * node's `calls', the frames the stack rules entered there), so a frame's
 * width is the calls made in it and below; paths with no call are left out
 * (`flamegraph.pl --countname=calls').
 * Lines come parent first, siblings in first-seen order. flamegraph.pl,
 * inferno, speedscope and Firefox Profiler read this. Nothing else is in the
 * file: those readers take any other line for a bad one (a comment too), so
 * the correction and the capture's identity go into Base.meta.json (meta.c).
 */
#include <stdlib.h>

#include "ks_write.h"

typedef struct folded {
  const ks_fout *o;
  FILE *f;
  char *path;
  size_t cap;
  size_t *len;          /* path length at each depth */
  uint32_t len_cap;
  int calls;            /* folded_calls: COUNT is the node's calls */
  char name[2048], esc[6144];
} folded;

static int reserve(folded *w, size_t need, uint32_t depth) {
  if (need > w->cap) {
    size_t cap = w->cap * 2 > need ? w->cap * 2 : need;
    char *p = realloc(w->path, cap);
    if (p == NULL)
      return KS_ENOMEM;
    w->path = p;
    w->cap = cap;
  }
  return ks_grow(&w->len, &w->len_cap, depth, 64, sizeof(*w->len));
}

static int open_node(void *ctx, uint32_t node, uint32_t depth, uint64_t t) {
  folded *w = ctx;
  uint64_t end, count;
  size_t n, at;

  if (depth == 0) {   /* the tree's root is not a frame */
    if (reserve(w, 1, 0) != KS_OK)
      return KS_ENOMEM;
    w->len[0] = 0;
    return 1;
  }
  n = ks_callpath_frame_name(w->o->g, w->o->in, w->o->g->tree.v[node].frame, w->name,
                          sizeof(w->name));
  n = ks_write_escape_folded(w->name, n, w->esc, sizeof(w->esc));
  at = w->len[depth - 1];
  if (reserve(w, at + n + 2, depth) != KS_OK)
    return KS_ENOMEM;
  if (depth > 1)
    w->path[at++] = ';';
  memcpy(w->path + at, w->esc, n);
  w->len[depth] = at + n;
  /* The node's self time is [end - self, end) of the merged timeline. */
  end = t + w->o->total[node];
  count = w->calls ? w->o->g->tree.v[node].calls
                   : (end + 500) / 1000 - (end - w->o->g->tree.v[node].self + 500) / 1000;
  if (count == 0)
    return 1;
  fwrite(w->path, 1, w->len[depth], w->f);
  fprintf(w->f, " %llu\n", (unsigned long long)count);
  return ferror(w->f) ? KS_EINVAL : 1;
}

static int write_lines(const ks_fout *o, FILE *f, int calls) {
  folded w;
  int rc;

  memset(&w, 0, sizeof(w));
  w.o = o;
  w.f = f;
  w.calls = calls;
  rc = ks_fwalk(o, 0, open_node, NULL, &w);
  free(w.path);
  free(w.len);
  return rc < 0 ? rc : KS_OK;
}

int ks_write_folded(const ks_fout *o, FILE *f) {
  return write_lines(o, f, 0);
}

int ks_write_folded_calls(const ks_fout *o, FILE *f) {
  const ks_ftree *t = &o->g->tree;
  ks_fout by_calls = *o;
  uint64_t *total = malloc((size_t)t->n * sizeof(*total));
  uint32_t k;
  int rc;

  if (total == NULL)
    return KS_ENOMEM;
  /* The walk's spans by calls: a subtree without a call is left out. */
  for (k = 0; k < t->n; k++)
    total[k] = t->v[k].calls;
  for (k = t->n; k-- > 1;)   /* a child's index is above its parent's */
    total[t->v[k].parent] += total[k];
  by_calls.total = total;
  by_calls.grand = total[0];
  rc = write_lines(&by_calls, f, 1);
  free(total);
  return rc;
}
