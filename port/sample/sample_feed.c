/* sample_feed.c: resolved samples into the call-path graph (port/callpath/)
 * of a flame capture (port/flame/ks_flame.h), so that a sampled profile is
 * written, named, grouped and tabled by the same code as a traced one.
 *
 * A sample adds its period (1/frequency of CPU time) to the self time of
 * its path: its process's root (`name(<0.N.S>)', as for a trace), or, when
 * its process is not known, a root for the thread's kind (`[no process]
 * scheduler'); then TRUNCATED when the kernel cut its callchain; then its
 * frames. The top table's counters: the leaf's self time and one sample
 * (in `calls': a sampled capture counts samples, not calls), each function
 * of the path once for its inclusive time.
 */
#include <stdlib.h>

#include "ks_sample.h"

static const char *const kind_names[KS_THR_KINDS] = {"[scheduler]", "[dirty_cpu_scheduler]",
                                                     "[dirty_io_scheduler]"};

/* The node a sample's frames hang from, KS_NONE when it cannot be made. */
static uint32_t root_of(ks_sampling *sm, ks_fcap *c, const ks_sstack *st) {
  const ks_fproc *p;
  uint32_t kind = st->thread_kind >= 0 && st->thread_kind < KS_THR_KINDS
                      ? (uint32_t)st->thread_kind : KS_THR_SCHED;

  if (st->pid != KS_NONE) {
    if ((p = ks_callpath_proc(&c->cp, st->pid)) == NULL) {
      if (ks_flame_add_pid(sm->fl, c, st->pid, NULL, 0) != KS_OK)
        return KS_NONE;   /* past max_procs: counted by the capture */
      /* Its trace events, should any other capture trace it, are not ours. */
      if (st->pid < sm->fl->mask_cap)
        sm->fl->mask[st->pid] &= ~(1u << (c - sm->fl->cap));
      p = ks_callpath_proc(&c->cp, st->pid);
    }
    return p != NULL ? p->root : KS_NONE;
  }
  if (sm->roots[kind] == KS_NONE)
    sm->roots[kind] = ks_sampler_native(&sm->smp, kind_names[kind], "");
  return sm->roots[kind] == KS_NONE ? KS_NONE
                                    : ks_ftree_child(&c->cp.tree, 0, KS_FR(KS_FR_MFA, sm->roots[kind]));
}

/* Each function of the path once: its inclusive time. */
static void count_path(ks_sampling *sm, ks_fcap *c, const ks_sstack *st) {
  uint32_t k, mfa;

  if (++sm->stamp == 0) {   /* wrapped: every stamp is stale */
    memset(sm->seen, 0, (size_t)sm->capseen * sizeof(*sm->seen));
    sm->stamp = 1;
  }
  for (k = 0; k < st->n; k++) {
    mfa = st->mfas[k];
    if (mfa >= sm->capseen &&
        ks_grow(&sm->seen, &sm->capseen, mfa, 1024, sizeof(*sm->seen)) != KS_OK) {
      c->cp.fc.uncounted++;
      continue;
    }
    if (sm->seen[mfa] == sm->stamp)
      continue;
    sm->seen[mfa] = sm->stamp;
    ks_ffun_self(&c->cp.fc, mfa, 0, KS_FEV_NONE);   /* makes its counters */
    if (mfa < c->cp.fc.cap)
      c->cp.fc.v[mfa].incl += sm->smp.period_ns;
  }
  mfa = st->mfas[st->n - 1];
  ks_ffun_self(&c->cp.fc, mfa, sm->smp.period_ns, KS_FEV_NONE);
  if (mfa < c->cp.fc.cap)
    c->cp.fc.v[mfa].calls++;
}

void ks_sampling_feed(void *ctx, const ks_sstack *st) {
  ks_sampling *sm = ctx;
  ks_fcap *c = ks_flame_find(sm->fl, sm->id);
  uint32_t node, k;

  if (c == NULL || c->stopped || st->n == 0)
    return;
  if ((node = root_of(sm, c, st)) == KS_NONE)
    return;
  if (st->flags & KS_SS_TRUNCATED)
    node = ks_ftree_child(&c->cp.tree, node, KS_FR(KS_FR_PSEUDO, KS_PSEUDO_TRUNCATED));
  for (k = 0; k < st->n; k++)
    node = ks_ftree_child(&c->cp.tree, node, KS_FR(KS_FR_MFA, st->mfas[k]));
  c->cp.tree.v[node].self += sm->smp.period_ns;
  c->cp.k.events++;
  if (c->cp.o.top > 0)
    count_path(sm, c, st);
}
