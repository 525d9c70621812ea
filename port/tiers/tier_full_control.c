/* tier_full_control.c: the full-trace commands (doc/internals-tiers.md, "Full trace").
 *
 *   {tiers_full_report, Top}   #{on, requests, dropped_requests, dropped_events,
 *                               truncated, filtered_events, chain_overflow,
 *                               identities => [IdMap]}
 *                             | {error, not_started}
 *        IdMap = #{identity, requests, events, truncated, nodes, dropped_nodes,
 *                  lost_frames, unknown_callers, depth_capped, total_ns,
 *                  mfas => [#{mfa => {M, F, Arity}, calls, inclusive_ns, self_ns}]},
 *                  mfas largest inclusive first, at most Top
 *   {tiers_full_write, Identity, Dir, Base, [Format]}
 *                             {ok, [Path], Info} | {error, not_found | no_events | ...}
 *                             | {error, {open_failed | write_failed, Path, Errno}}
 *        the files as flame_write writes them (ks_write_reply): a failed one
 *        leaves none of the identity's files
 *
 * Commands were bounds-checked by the decoder, so ei reads them safely.
 */
#include <ei.h>
#include <stdlib.h>

#include "write/ks_write.h"
#include "ks_tiers.h"

static uint64_t tree_total(const ks_ftree *tr) {
  uint64_t sum = 0;
  uint32_t k;

  for (k = 0; k < tr->n; k++)
    sum += tr->v[k].self;
  return sum;
}

static int encode_mfa(ei_x_buff *x, const ks_intern *in, const ks_fmfa *f) {
  ks_map m;

  ks_map_begin(&m, x);
  ks_map_key(&m, "mfa");
  m.e |= ks_enc_mfa(x, in, f->mfa);
  ks_map_u64(&m, "calls", f->calls);
  ks_map_u64(&m, "inclusive_ns", f->incl);
  ks_map_u64(&m, "self_ns", f->self);
  return ks_map_end(&m);
}

static int encode_agg(ei_x_buff *x, const ks_tiers *t, const ks_intern *in, uint32_t row,
                      uint32_t top) {
  const ks_full_agg *a = t->full.agg[row];
  uint32_t n = 0, k;
  ks_fmfa *m = ks_full_mfas(a, &n);
  ks_map map;
  int e = 0;

  if (n > top)
    n = top;
  ks_map_begin(&map, x);
  ks_map_key(&map, "identity");
  map.e |= ks_tiers_encode_identity(x, t, row);
  ks_map_u64(&map, "requests", a->requests);
  ks_map_u64(&map, "events", a->events);
  ks_map_u64(&map, "truncated", a->truncated);
  ks_map_u64(&map, "nodes", a->tree.n);
  ks_map_u64(&map, "dropped_nodes", a->tree.dropped);
  ks_map_u64(&map, "lost_frames", a->k.lost_frames);
  ks_map_u64(&map, "unknown_callers", a->k.unknown_callers);
  ks_map_u64(&map, "depth_capped", a->k.depth_capped);
  ks_map_u64(&map, "total_ns", tree_total(&a->tree));
  ks_map_key(&map, "mfas");
  if (n > 0)
    e = ei_x_encode_list_header(x, n);
  for (k = 0; k < n && !e; k++)
    e = encode_mfa(x, in, &m[k]);
  free(m);
  e = e || ei_x_encode_empty_list(x);
  return e | ks_map_end(&map);
}

static int report(const ks_tiers *t, const ks_intern *in, const char *b, int *idx, ei_x_buff *x) {
  const ks_full *f = &t->full;
  unsigned long long top;
  uint64_t requests = 0;
  uint32_t r, n = 0;
  ks_map m;
  int e = 0;

  if (ei_decode_ulonglong(b, idx, &top) != 0 || top > 1000000)
    return ks_enc_error(x, "badarg");
  if (t->rows == NULL)
    return ks_enc_error(x, "not_started");
  if (f->on)
    for (r = 0; r < t->o.max_identities; r++)
      if (f->agg[r] != NULL) {
        n++;
        requests += f->agg[r]->requests;
      }
  ks_map_begin(&m, x);
  ks_map_bool(&m, "on", f->on);
  ks_map_u64(&m, "requests", requests);
  ks_map_u64(&m, "dropped_requests", f->dropped_requests);
  ks_map_u64(&m, "dropped_events", f->dropped_events);
  ks_map_u64(&m, "truncated", f->truncated_requests);
  ks_map_u64(&m, "filtered_events", f->filtered_events);
  ks_map_u64(&m, "chain_overflow", f->chain_overflow);
  ks_map_key(&m, "identities");
  if (n > 0)
    e = ei_x_encode_list_header(x, n);
  for (r = 0; r < t->o.max_identities && n > 0 && !e; r++)
    if (f->agg[r] != NULL)
      e = encode_agg(x, t, in, r, (uint32_t)top);
  e = e || ei_x_encode_empty_list(x);
  return e | ks_map_end(&m);
}

static void write_info(ks_map *m, const void *ctx) {
  const ks_full_agg *a = ctx;

  ks_map_u64(m, "requests", a->requests);
  ks_map_u64(m, "nodes", a->tree.n);
  ks_map_u64(m, "dropped_nodes", a->tree.dropped);
  ks_map_u64(m, "lost_frames", a->k.lost_frames);
}

static int write_files(ks_tiers *t, const ks_intern *in, const char *b, int *idx, ei_x_buff *x) {
  ks_full_agg *a = NULL;
  uint64_t *total;
  ks_fdest d;
  ks_fout o;
  ks_callpath view;
  uint32_t row, k;
  int start = *idx, end, e;

  if (ei_skip_term(b, idx) != 0)
    return ks_enc_error(x, "badarg");
  end = *idx;
  if (ks_write_decode_dest(b, idx, &d, 0) != KS_OK)
    return ks_enc_error(x, "badarg");
  /* Never started: no identity table to look in (it was read before this check,
   * and the sink crashed on a tiers_full_write before tiers_start). */
  if (t->rows == NULL)
    return ks_enc_error(x, "not_started");
  row = ks_itab_get(&t->identities, b + start, (size_t)(end - start),
                    ks_hash(b + start, (size_t)(end - start)));
  if (t->full.on && row != KS_NONE && row < t->o.max_identities)
    a = t->full.agg[row];
  if (a == NULL)
    return ks_enc_error(x, "not_found");
  ks_ftree_order(&a->tree);
  if ((total = malloc((size_t)a->tree.n * sizeof(*total))) == NULL)
    return ks_enc_error(x, "enomem");
  ks_ftree_totals(&a->tree, total);
  /* The writers read a graph: a view of the aggregate as one (the tree
   * shared, read only), its options the aggregates' and its id the row. */
  memset(&view, 0, sizeof(view));
  ks_fopts_default(&view.o);
  view.o.sleep = 0;
  view.o.gc = 0;
  view.o.max_nodes = t->o.full_max_nodes;
  view.id = row;
  view.tree = a->tree;
  view.k = a->k;
  o.g = &view;
  o.in = in;
  o.total = total;
  o.grand = total[0];
  /* Every process of a request is a stack from the root (tier_full.c). */
  o.processes = 0;
  for (k = a->tree.v[0].child; k != KS_NONE; k = a->tree.v[k].sibling)
    o.processes++;
  e = o.grand == 0 ? ks_enc_error(x, "no_events") : ks_write_reply(&o, &d, x, write_info, a);
  free(total);
  return e;
}

/* The full trace's commands (port/sink/control.c's table gives their arities);
 * both first flush the tiers, so that every ended request is in the aggregates. */
int ks_cmd_tiers_full_report(ks_tiers *t, ks_cmd *cmd, ei_x_buff *x) {
  ks_tiers_flush(t, 1);
  return report(t, cmd->in, (const char *)cmd->term.p, &cmd->idx, x);
}

int ks_cmd_tiers_full_write(ks_tiers *t, ks_cmd *cmd, ei_x_buff *x) {
  ks_tiers_flush(t, 1);
  return write_files(t, cmd->in, (const char *)cmd->term.p, &cmd->idx, x);
}
