/* callgrind.c: the call graph in the callgrind format, for KCachegrind,
 * qcachegrind and callgrind_annotate (valgrind's docs, "Callgrind Format").
 *
 * One event, `us': microseconds. The call-path tree is summed per function
 * (a frame: an MFA, a process or a group of them, a pseudo frame): its self
 * cost, and per callee the calls and their inclusive cost. The numbers are
 * those of the folded file: a path's self time in microseconds rounded on the
 * running sum of the merged timeline (folded.c), a call's inclusive
 * cost the sum of its subtree's, so the file's total is the folded file's.
 * calls= counts the frames the stack rules entered on that path: a recursion
 * or loop the rules folded (or fold_recursion hid) is not a call.
 *
 * Processes: the root frame of each process (group => pid) or of each group
 * is a function calling that process's stacks, as in the folded file. No
 * `part:' lines: callgrind_annotate reads one part per file, and KCachegrind
 * shows a process's calls under its root function anyway.
 *
 * Positions: the sink has no source lines, so every cost is at line 0 and a
 * function's file (fl=) is its module's name; processes and pseudo frames are
 * in file `???', as valgrind writes for code without debug information. Names
 * are compressed (fn=(N) Name the first time, then fn=(N)), on one line of
 * UTF-8 (ks_write_put_line).
 */
#include <stdlib.h>

#include "ks_write.h"

#define NO_FILE UINT32_MAX

typedef struct cg_fn {
  uint32_t frame, file;        /* file: index among the files, NO_FILE: `???' */
  uint64_t self;               /* us */
  int named;                   /* its fn=(N) Name written */
} cg_fn;

typedef struct cg_edge {
  uint32_t from, to;           /* function indexes */
  uint64_t calls, incl;
} cg_edge;

typedef struct cg {
  const ks_fout *o;
  FILE *f;
  cg_fn *fn;
  uint32_t nfn, cap_fn;
  uint32_t *fslot, fmask;      /* frame -> function index + 1 */
  cg_edge *edge;
  uint32_t nedge, cap_edge;
  uint32_t *eslot, emask;      /* (from, to) -> edge index + 1 */
  uint32_t *stack, cap_stack;  /* function index at each depth of the walk */
  uint32_t *files, nfiles, cap_files;   /* module atom of each file: its MFA's first frame */
  uint8_t *file_named;
  char name[2048], other[2048];
} cg;

static uint32_t hash32(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (uint32_t)k;
}

/* Grows a table of slots (index + 1, 0: empty) keyed by key_of; KS_OK or KS_ENOMEM. */
static int rehash(uint32_t **slots, uint32_t *mask, uint32_t n, uint64_t (*key_of)(cg *, uint32_t),
                  cg *w) {
  uint32_t cap = (*mask + 1) * 2, k, i, *s;

  if (*slots != NULL && n * 2 < *mask + 1)
    return KS_OK;
  if (*slots == NULL)
    cap = 1024;
  if ((s = calloc(cap, sizeof(*s))) == NULL)
    return KS_ENOMEM;
  for (k = 0; k < n; k++) {
    for (i = hash32(key_of(w, k)) & (cap - 1); s[i] != 0; i = (i + 1) & (cap - 1))
      ;
    s[i] = k + 1;
  }
  free(*slots);
  *slots = s;
  *mask = cap - 1;
  return KS_OK;
}

static uint64_t fn_key(cg *w, uint32_t k) {
  return w->fn[k].frame;
}

static uint64_t edge_key(cg *w, uint32_t k) {
  return (uint64_t)w->edge[k].from << 32 | w->edge[k].to;
}

/* The function of a frame, made when new: its index, or KS_NONE (no memory). */
static uint32_t fn_of(cg *w, uint32_t frame) {
  uint32_t i, s;

  if (rehash(&w->fslot, &w->fmask, w->nfn, fn_key, w) != KS_OK)
    return KS_NONE;
  for (i = hash32(frame) & w->fmask; (s = w->fslot[i]) != 0; i = (i + 1) & w->fmask)
    if (w->fn[s - 1].frame == frame)
      return s - 1;
  if (ks_grow(&w->fn, &w->cap_fn, w->nfn, 1024, sizeof(*w->fn)) != KS_OK)
    return KS_NONE;
  w->fn[w->nfn] = (cg_fn){frame, NO_FILE, 0, 0};
  w->fslot[i] = w->nfn + 1;
  return w->nfn++;
}

static cg_edge *edge_of(cg *w, uint32_t from, uint32_t to) {
  uint64_t key = (uint64_t)from << 32 | to;
  uint32_t i, s;

  if (rehash(&w->eslot, &w->emask, w->nedge, edge_key, w) != KS_OK)
    return NULL;
  for (i = hash32(key) & w->emask; (s = w->eslot[i]) != 0; i = (i + 1) & w->emask)
    if (edge_key(w, s - 1) == key)
      return &w->edge[s - 1];
  if (ks_grow(&w->edge, &w->cap_edge, w->nedge, 1024, sizeof(*w->edge)) != KS_OK)
    return NULL;
  w->edge[w->nedge] = (cg_edge){from, to, 0, 0};
  w->eslot[i] = w->nedge + 1;
  return &w->edge[w->nedge++];
}

/* Sums one node into its function and its caller's edge. Nodes come parent first. */
static int open_node(void *ctx, uint32_t node, uint32_t depth, uint64_t t) {
  cg *w = ctx;
  const ks_fnode *nd = &w->o->g->tree.v[node];
  uint64_t end = t + w->o->total[node];
  uint32_t fi;
  cg_edge *e;

  if (depth == 0)   /* the tree's root is not a frame */
    return 1;
  if ((fi = fn_of(w, nd->frame)) == KS_NONE)
    return KS_ENOMEM;
  if (depth >= w->cap_stack) {
    uint32_t cap = w->cap_stack * 2 > depth + 1 ? w->cap_stack * 2 : depth + 1;
    uint32_t *s = realloc(w->stack, cap * sizeof(*s));
    if (s == NULL)
      return KS_ENOMEM;
    w->stack = s;
    w->cap_stack = cap;
  }
  w->stack[depth] = fi;
  /* As folded.c counts: self is [end - self, end) of the merged timeline. */
  w->fn[fi].self += (end + 500) / 1000 - (end - nd->self + 500) / 1000;
  if (depth > 1) {
    if ((e = edge_of(w, w->stack[depth - 1], fi)) == NULL)
      return KS_ENOMEM;
    e->calls += nd->calls;
    e->incl += (end + 500) / 1000 - (t + 500) / 1000;
  }
  return 1;
}

/* The file of an MFA function: its module's name, one index per module. */
static uint32_t file_of(cg *w, uint32_t frame) {
  ks_mfa_view m, other;
  uint32_t k;

  if (KS_FR_KIND(frame) != KS_FR_MFA || ks_intern_mfa_get(w->o->in, KS_FR_VAL(frame), &m) != KS_OK)
    return NO_FILE;
  for (k = 0; k < w->nfiles; k++)
    if (ks_intern_mfa_get(w->o->in, w->files[k], &other) == KS_OK && strcmp(other.m, m.m) == 0)
      return k;
  if (ks_grow(&w->files, &w->cap_files, w->nfiles, 64, sizeof(*w->files)) != KS_OK)
    return NO_FILE;
  w->files[w->nfiles] = KS_FR_VAL(frame);
  return w->nfiles++;
}

/* fl=, cfi= (file) or fn=, cfn= (function), compressed. */
static void put_file(cg *w, const char *key, uint32_t file, uint8_t *named) {
  ks_mfa_view m;

  if (file == NO_FILE) {
    fprintf(w->f, "%s=(0)%s\n", key, named[0] ? "" : " ???");
    named[0] = 1;
    return;
  }
  fprintf(w->f, "%s=(%u)", key, file + 1);
  if (!named[file + 1] && ks_intern_mfa_get(w->o->in, w->files[file], &m) == KS_OK) {
    putc(' ', w->f);
    ks_write_put_line(w->f, m.m, strlen(m.m));
  }
  named[file + 1] = 1;
  putc('\n', w->f);
}

static void put_fn(cg *w, const char *key, uint32_t fi) {
  size_t n;

  fprintf(w->f, "%s=(%u)", key, fi + 1);
  if (!w->fn[fi].named) {
    n = ks_callpath_frame_name(w->o->g, w->o->in, w->fn[fi].frame, w->name, sizeof(w->name));
    putc(' ', w->f);
    ks_write_put_line(w->f, w->name, n);
    w->fn[fi].named = 1;
  }
  putc('\n', w->f);
}

static int write_body(cg *w, uint64_t total) {
  uint32_t *first = NULL, *order = NULL, k, at;
  uint8_t *named = NULL;
  int rc = KS_ENOMEM;

  /* The edges grouped by caller, in first-seen order. */
  first = calloc((size_t)w->nfn + 1, sizeof(*first));
  order = malloc(((size_t)w->nedge + 1) * sizeof(*order));
  if (first == NULL || order == NULL)
    goto out;
  for (k = 0; k < w->nedge; k++)
    first[w->edge[k].from + 1]++;
  for (k = 0; k < w->nfn; k++)
    first[k + 1] += first[k];
  for (k = 0; k < w->nedge; k++)
    order[first[w->edge[k].from]++] = k;
  for (k = w->nfn; k > 0; k--)
    first[k] = first[k - 1];
  first[0] = 0;
  for (k = 0; k < w->nfn; k++)
    w->fn[k].file = file_of(w, w->fn[k].frame);   /* NO_FILE out of memory too: `???' */
  if ((named = calloc((size_t)w->nfiles + 1, 1)) == NULL)
    goto out;
  for (k = 0; k < w->nfn && !ferror(w->f); k++) {
    put_file(w, "fl", w->fn[k].file, named);
    put_fn(w, "fn", k);
    fprintf(w->f, "0 %llu\n", (unsigned long long)w->fn[k].self);
    for (at = first[k]; at < first[k + 1] && !ferror(w->f); at++) {
      const cg_edge *e = &w->edge[order[at]];
      put_file(w, "cfi", w->fn[e->to].file, named);
      put_fn(w, "cfn", e->to);
      fprintf(w->f, "calls=%llu 0\n0 %llu\n", (unsigned long long)e->calls,
              (unsigned long long)e->incl);
    }
    putc('\n', w->f);
  }
  fprintf(w->f, "totals: %llu\n", (unsigned long long)total);
  rc = ferror(w->f) ? KS_EINVAL : KS_OK;
out:
  free(first);
  free(order);
  free(named);
  return rc;
}

int ks_write_callgrind(const ks_fout *o, FILE *f) {
  cg w;
  uint64_t total = 0;
  uint32_t k;
  int rc;

  memset(&w, 0, sizeof(w));
  w.o = o;
  w.f = f;
  /* The first line says the format (desktops and KCachegrind look for it); then the
   * correction, a comment every reader skips. */
  ks_callpath_correction_text(o->g, w.name, sizeof(w.name));
  fprintf(f, "# callgrind format\n# %s\nversion: 1\ncreator: kprof\npositions: line\n"
             "event: us : Time (microseconds)\nevents: us\n\n",
          w.name);
  rc = ks_fwalk(o, 0, open_node, NULL, &w);
  if (rc >= 0) {
    for (k = 0; k < w.nfn; k++)
      total += w.fn[k].self;
    rc = write_body(&w, total);
  }
  free(w.fn);
  free(w.fslot);
  free(w.edge);
  free(w.eslot);
  free(w.stack);
  free(w.files);
  return rc < 0 ? rc : KS_OK;
}
