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
  ks_hmap fslot;               /* frame -> function index: cg_slot (a: the frame) */
  cg_edge *edge;
  uint32_t nedge, cap_edge;
  ks_hmap eslot;               /* (from, to) -> edge index: cg_slot */
  uint32_t *stack, cap_stack;  /* function index at each depth of the walk */
  uint32_t *files, nfiles, cap_files;   /* module atom of each file: its MFA's first frame */
  uint8_t *file_named;
  char name[2048], other[2048];
} cg;

/* A slot of the function and edge tables: the index, and the key beside it. */
typedef struct cg_slot {
  uint32_t index;              /* KS_NONE: an empty slot */
  uint32_t a, b;               /* the frame (b 0), or an edge's from and to */
} cg_slot;

static uint64_t slot_hash(const void *e, const void *ctx) {
  const cg_slot *s = e;

  return ks_hmap_pair(s->a, s->b);
}

/* The index of key (a, b) in tab, or, when new, next (the caller's new
 * element), entered: KS_NONE without memory. *is_new says which. */
static uint32_t index_of(ks_hmap *tab, uint32_t a, uint32_t b, uint32_t next, int *is_new) {
  const cg_slot *s;
  size_t i;

  *is_new = 0;
  if (tab->v == NULL && ks_hmap_init(tab, sizeof(cg_slot), 1024) != KS_OK)
    return KS_NONE;
  for (s = ks_hmap_run(tab, sizeof(*s), ks_hmap_pair(a, b), &i); s != NULL;
       s = ks_hmap_step(tab, sizeof(*s), &i))
    if (s->a == a && s->b == b)
      return s->index;
  if (ks_hmap_full(tab)) {
    if (ks_hmap_grow(tab, slot_hash, NULL) != KS_OK)
      return KS_NONE;
    i = ks_hmap_end(tab, sizeof(cg_slot), ks_hmap_pair(a, b));
  }
  *(cg_slot *)ks_hmap_put(tab, sizeof(cg_slot), i) = (cg_slot){next, a, b};
  *is_new = 1;
  return next;
}

/* The function of a frame, made when new: its index, or KS_NONE (no memory). */
static uint32_t fn_of(cg *w, uint32_t frame) {
  uint32_t k;
  int is_new;

  if (ks_grow(&w->fn, &w->cap_fn, w->nfn, 1024, sizeof(*w->fn)) != KS_OK ||
      (k = index_of(&w->fslot, frame, 0, w->nfn, &is_new)) == KS_NONE)
    return KS_NONE;
  if (is_new)
    w->fn[w->nfn++] = (cg_fn){frame, NO_FILE, 0, 0};
  return k;
}

static cg_edge *edge_of(cg *w, uint32_t from, uint32_t to) {
  uint32_t k;
  int is_new;

  if (ks_grow(&w->edge, &w->cap_edge, w->nedge, 1024, sizeof(*w->edge)) != KS_OK ||
      (k = index_of(&w->eslot, from, to, w->nedge, &is_new)) == KS_NONE)
    return NULL;
  if (is_new)
    w->edge[w->nedge++] = (cg_edge){from, to, 0, 0};
  return &w->edge[k];
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
  if (ks_grow(&w->stack, &w->cap_stack, depth, 64, sizeof(*w->stack)) != KS_OK)
    return KS_ENOMEM;
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
  /* The first line says the format (desktops and KCachegrind look for it). The
   * header's cmd: says what made it and its desc: (type "kprof correction") the
   * correction (one line of ASCII, port/callpath/names.c); callgrind_annotate
   * prints both, KCachegrind shows them. No capture id: a replay (its own id)
   * writes the same bytes as the capture. */
  ks_callpath_correction_text(o->g, w.name, sizeof(w.name));
  fprintf(f, "# callgrind format\nversion: 1\ncreator: kprof " KS_VERSION "\n"
             "cmd: kprof flame\ndesc: %s\npositions: line\n"
             "event: us : Time (microseconds)\nevents: us\n\n",
          w.name);
  rc = ks_fwalk(o, 0, open_node, NULL, &w);
  if (rc >= 0) {
    for (k = 0; k < w.nfn; k++)
      total += w.fn[k].self;
    rc = write_body(&w, total);
  }
  free(w.fn);
  ks_hmap_free(&w.fslot);
  free(w.edge);
  ks_hmap_free(&w.eslot);
  free(w.stack);
  free(w.files);
  return rc < 0 ? rc : KS_OK;
}
