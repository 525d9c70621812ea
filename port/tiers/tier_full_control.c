/* tier_full_control.c: the full-trace commands (doc/tiers.md, "Full trace").
 *
 *   {tier_full_report, Top}   #{on, requests, dropped_requests, dropped_events,
 *                               truncated, filtered_events, chain_overflow,
 *                               identities => [{Identity, IdMap}]}
 *                             | {error, not_started}
 *        IdMap = #{requests, events, truncated, nodes, dropped_nodes, lost_frames,
 *                  unknown_callers, depth_capped, total_ns, mfas => [MfaRow]}
 *        MfaRow = {{M, F, Arity}, Calls, InclusiveNs, SelfNs}, largest inclusive
 *                 first, at most Top
 *   {tier_full_write, Identity, Dir, Base, [Format]}
 *                             {ok, [Path], Info} | {error, not_found | no_events | ...}
 *                             | {error, {open_failed | write_failed, Path, Errno}}
 *        the files as flame_write writes them (ks_flame_write_reply): a failed one
 *        leaves none of the identity's files
 *
 * Commands were bounds-checked by the decoder, so ei reads them safely.
 */
#include <ei.h>
#include <stdlib.h>

#include "ks_sink.h"

static int put_u64(ei_x_buff *x, const char *key, uint64_t v) {
  return ei_x_encode_atom(x, key) || ei_x_encode_ulonglong(x, (EI_ULONGLONG)v);
}

static int encode_error(ei_x_buff *x, const char *reason) {
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error") ||
         ei_x_encode_atom(x, reason);
}

static int encode_mfa(ei_x_buff *x, const ks_intern *in, uint32_t mfa) {
  ks_mfa_view v;

  if (ks_intern_mfa_get(in, mfa, &v) != KS_OK)
    return ei_x_encode_atom(x, "undefined");
  return ei_x_encode_tuple_header(x, 3) ||
         ei_x_encode_atom_as(x, v.m, ERLANG_UTF8, ERLANG_UTF8) ||
         ei_x_encode_atom_as(x, v.f, ERLANG_UTF8, ERLANG_UTF8) ||
         ei_x_encode_ulong(x, v.arity);
}

static uint64_t tree_total(const ks_ftree *tr) {
  uint64_t sum = 0;
  uint32_t k;

  for (k = 0; k < tr->n; k++)
    sum += tr->v[k].self;
  return sum;
}

static int encode_agg(ei_x_buff *x, const ks_sink *s, const ks_full_agg *a, uint32_t top) {
  uint32_t n = 0, k;
  ks_full_mfa *m = ks_full_mfas(a, &n);
  int e;

  if (n > top)
    n = top;
  e = ei_x_encode_map_header(x, 10) || put_u64(x, "requests", a->requests) ||
      put_u64(x, "events", a->events) || put_u64(x, "truncated", a->truncated) ||
      put_u64(x, "nodes", a->tree.n) || put_u64(x, "dropped_nodes", a->tree.dropped) ||
      put_u64(x, "lost_frames", a->k.lost_frames) ||
      put_u64(x, "unknown_callers", a->k.unknown_callers) ||
      put_u64(x, "depth_capped", a->k.depth_capped) ||
      put_u64(x, "total_ns", tree_total(&a->tree)) || ei_x_encode_atom(x, "mfas");
  if (n > 0)
    e = e || ei_x_encode_list_header(x, n);
  for (k = 0; k < n && !e; k++)
    e = ei_x_encode_tuple_header(x, 4) || encode_mfa(x, &s->in, m[k].mfa) ||
        ei_x_encode_ulonglong(x, m[k].calls) || ei_x_encode_ulonglong(x, m[k].incl) ||
        ei_x_encode_ulonglong(x, m[k].self);
  free(m);
  return e || ei_x_encode_empty_list(x);
}

static int report(const ks_sink *s, const char *b, int *idx, ei_x_buff *x) {
  const ks_tiers *t = &s->tiers;
  const ks_full *f = &t->full;
  unsigned long long top;
  uint64_t requests = 0;
  uint32_t r, n = 0;
  int e;

  if (ei_decode_ulonglong(b, idx, &top) != 0 || top > 1000000)
    return encode_error(x, "badarg");
  if (t->rows == NULL)
    return encode_error(x, "not_started");
  if (f->on)
    for (r = 0; r < t->o.max_identities; r++)
      if (f->agg[r] != NULL) {
        n++;
        requests += f->agg[r]->requests;
      }
  e = ei_x_encode_map_header(x, 8) || ei_x_encode_atom(x, "on") ||
      ei_x_encode_boolean(x, f->on) || put_u64(x, "requests", requests) ||
      put_u64(x, "dropped_requests", f->dropped_requests) ||
      put_u64(x, "dropped_events", f->dropped_events) ||
      put_u64(x, "truncated", f->truncated_requests) ||
      put_u64(x, "filtered_events", f->filtered_events) ||
      put_u64(x, "chain_overflow", f->chain_overflow) || ei_x_encode_atom(x, "identities");
  if (n > 0)
    e = e || ei_x_encode_list_header(x, n);
  for (r = 0; r < t->o.max_identities && n > 0 && !e; r++)
    if (f->agg[r] != NULL)
      e = ei_x_encode_tuple_header(x, 2) || ks_tier_encode_identity(x, t, r) ||
          encode_agg(x, s, f->agg[r], (uint32_t)top);
  return e || ei_x_encode_empty_list(x);
}

static int write_info(ei_x_buff *x, const void *ctx, int extra) {
  const ks_full_agg *a = ctx;

  return ei_x_encode_map_header(x, 4 + extra) || put_u64(x, "requests", a->requests) ||
         put_u64(x, "nodes", a->tree.n) || put_u64(x, "dropped_nodes", a->tree.dropped) ||
         put_u64(x, "lost_frames", a->k.lost_frames);
}

static int write_files(ks_sink *s, const char *b, int *idx, ei_x_buff *x) {
  ks_tiers *t = &s->tiers;
  ks_full_agg *a = NULL;
  uint64_t *total;
  ks_fdest d;
  ks_fout o;
  ks_fcap view;
  uint32_t row;
  int start = *idx, e;

  if (ei_skip_term(b, idx) != 0)
    return encode_error(x, "badarg");
  row = ks_itab_get(&t->identities, b + start, (size_t)(*idx - start),
                    ks_hash(b + start, (size_t)(*idx - start)));
  if (ks_flame_decode_dest(b, idx, &d) != KS_OK)
    return encode_error(x, "badarg");
  if (t->rows == NULL)
    return encode_error(x, "not_started");
  if (t->full.on && row != KS_NONE && row < t->o.max_identities)
    a = t->full.agg[row];
  if (a == NULL)
    return encode_error(x, "not_found");
  ks_ftree_order(&a->tree);
  if ((total = malloc((size_t)a->tree.n * sizeof(*total))) == NULL)
    return encode_error(x, "enomem");
  ks_ftree_totals(&a->tree, total);
  /* The writers read a capture: a view of the aggregate as one (the tree
   * shared, read only), its options the aggregates' and its id the row. */
  memset(&view, 0, sizeof(view));
  ks_flame_default_opts(&view.o);
  view.o.sleep = 0;
  view.o.gc = 0;
  view.o.max_nodes = t->o.full_max_nodes;
  view.used = 1;
  view.id = row;
  view.tree = a->tree;
  view.k = a->k;
  o.c = &view;
  o.in = &s->in;
  o.total = total;
  o.grand = total[0];
  e = o.grand == 0 ? encode_error(x, "no_events") : ks_flame_write_reply(&o, &d, x, write_info, a);
  free(total);
  return e;
}

int ks_tier_full_command(ks_sink *s, const char *name, int arity, ks_slice cmd, int idx,
                         ei_x_buff *x) {
  const char *b = (const char *)cmd.p;

  ks_tiers_flush(&s->tiers, 1);
  if (strcmp(name, "tier_full_report") == 0 && arity == 2)
    return report(s, b, &idx, x);
  if (strcmp(name, "tier_full_write") == 0 && arity == 5)
    return write_files(s, b, &idx, x);
  return encode_error(x, "badarg");
}
