/* graph.c: a call-path graph (ks_callpath): its options' defaults, made, its
 * processes looked up by pid id and added, freed. */
#include <stdlib.h>

#include "ks_callpath.h"
#include "proto/ks_proto.h"

/* The flame rows' fields in ks_fopts (KS_FIELD(flame, ...) in include/ks_options.h). */
#define KS_FIELD_flame(m, scale) KS_OPTION_FIELD(ks_fopts, m, scale)
#define KS_FIELD_tiers(m, scale) KS_OPTION_NO_FIELD
#define KS_FIELD_sample(m, scale) KS_OPTION_NO_FIELD
const ks_option_field ks_flame_fields[] = {
#include "proto/ks_option_fields.h"
};
#undef KS_FIELD_sample
#undef KS_FIELD_tiers
#undef KS_FIELD_flame
_Static_assert(sizeof(ks_flame_fields) / sizeof(ks_flame_fields[0]) == KS_NOPTIONS,
               "one field per row");

void ks_fopts_default(ks_fopts *o) {
  memset(o, 0, sizeof(*o));
  ks_option_defaults(KS_M_FLAME, ks_flame_fields, o);
  /* What no option sets. */
  o->max_depth = 0;
  o->max_nodes = UINT32_MAX - 1;
  o->trigger = KS_NONE;
  o->hide = KS_NONE;
  o->group = KS_GROUP_PID;
  o->fold_depth = KS_FLAME_FOLD_DEPTH;
  o->learn = 1;
  o->record_at = -1;
}

int ks_callpath_init(ks_callpath *g, int64_t id, const ks_fopts *o) {
  memset(g, 0, sizeof(*g));
  g->id = id;
  g->o = *o;
  if (g->o.max_depth > 0 && g->o.max_stack < g->o.max_depth + 1)
    g->o.max_stack = g->o.max_depth + 1;
  if (ks_ftree_init(&g->tree, g->o.max_nodes, g->o.max_bytes) != KS_OK)
    return KS_ENOMEM;
  if (ks_hmap_init(&g->pids, sizeof(ks_fpid), 64) != KS_OK) {
    ks_ftree_free(&g->tree);
    return KS_ENOMEM;
  }
  return KS_OK;
}

void ks_callpath_free(ks_callpath *g) {
  uint32_t k;

  for (k = 0; k < g->nprocs; k++) {
    ks_stack_free(&g->procs[k].st);
    ks_ffun_free_proc(&g->procs[k]);
    free(g->procs[k].name);
    free(g->procs[k].call);
  }
  free(g->procs);
  ks_hmap_free(&g->pids);
  ks_ffun_free(&g->fc);
  ks_ftails_free(&g->tails);
  ks_ftree_free(&g->tree);
  memset(g, 0, sizeof(*g));
}

static uint64_t entry_hash(const void *e, const void *ctx) {
  return ks_hmap_fib(((const ks_fpid *)e)->pid);
}

ks_fproc *ks_callpath_add_proc(ks_callpath *g, uint32_t pid) {
  size_t slot;
  ks_fpid *e;
  ks_fproc *p;

  if (ks_callpath_proc(g, pid) != NULL)
    return NULL;
  /* The table must keep a hole: full and unable to grow, it takes no more. */
  if (ks_hmap_full(&g->pids) && ks_hmap_grow(&g->pids, entry_hash, NULL) != KS_OK &&
      g->pids.n + 2 >= g->pids.mask)
    return NULL;
  slot = ks_hmap_end(&g->pids, sizeof(ks_fpid), ks_hmap_fib(pid));
  if (ks_grow(&g->procs, &g->cap_procs, g->nprocs, 8, sizeof(*g->procs)) != KS_OK)
    return NULL;
  p = &g->procs[g->nprocs];
  memset(p, 0, sizeof(*p));
  ks_fstack_init(p, g->o.max_stack);
  p->pid = pid;
  p->root = ks_ftree_child(&g->tree, 0, KS_FR(KS_FR_PROC, pid));
  p->cur = KS_NONE;
  p->out_mfa = KS_NONE;
  p->run_mfa = KS_NONE;
  p->first_mfa = KS_NONE;
  p->spawn_mfa = KS_NONE;
  p->fc = g->o.top > 0 ? &g->fc : NULL;
  e = ks_hmap_put(&g->pids, sizeof(ks_fpid), slot);
  e->pid = pid;
  e->index = g->nprocs++;
  return p;
}
