/* tier_agg.c: finalised requests into per-identity rows of histograms, and the slowest few. */
#include <stdlib.h>

#include "ks_tiers.h"

static int ncols(const ks_tiers *t) {
  return t->ntiers + 2;   /* tiers, other, wall */
}

void ks_tiers_free_rows(ks_tiers *t) {
  uint32_t r;
  int c, k;

  if (t->rows != NULL)
    for (r = 0; r <= t->o.max_identities; r++) {
      if (t->rows[r].cols == NULL)
        continue;
      for (c = 0; c < ncols(t); c++)
        for (k = 0; k < KS_TSTAT__COUNT; k++)
          ks_hist_free(&t->rows[r].cols[c].h[k]);
      free(t->rows[r].cols);
    }
  free(t->rows);
  free(t->slow);
  t->rows = NULL;
  t->slow = NULL;
  t->n_slow = 0;
}

/* Keeps the slow_max longest requests at least slow_ns long, longest first. */
static void keep_if_slow(ks_tiers *t, const ks_req_result *res) {
  uint32_t k;

  if (t->o.slow_max == 0 || res->wall < t->o.slow_ns)
    return;
  if (t->n_slow == t->o.slow_max && res->wall <= t->slow[t->n_slow - 1].wall)
    return;
  k = t->n_slow < t->o.slow_max ? t->n_slow++ : t->n_slow - 1;
  while (k > 0 && t->slow[k - 1].wall < res->wall) {
    t->slow[k] = t->slow[k - 1];
    k--;
  }
  t->slow[k] = *res;
}

/* What a request adds to statistic k of tier c (KS_TIER_STATS' field). */
static uint64_t stat_value(const ks_req_result *res, int k, int c) {
  switch (k) {
#define KS_X(key, unit, field) \
  case KS_TSTAT_##key:         \
    return res->field[c];
    KS_TIER_STATS(KS_X)
#undef KS_X
  }
  return 0;
}

int ks_tiers_add_result(ks_tiers *t, const ks_req_result *res) {
  ks_tier_row *row = &t->rows[res->identity];
  int c, k, rc = KS_OK;

  if (row->cols == NULL) {
    row->cols = calloc((size_t)ncols(t), sizeof(*row->cols));
    if (row->cols == NULL)
      return KS_ENOMEM;
  }
  row->requests++;
  /* Every request is recorded in every column, zeros too: column means add up. */
  for (c = 0; c < t->ntiers; c++) {
    row->cols[c].calls += res->calls[c];
    for (k = 0; k < KS_TSTAT__COUNT; k++)
      rc |= ks_hist_record(&row->cols[c].h[k], stat_value(res, k, c));
  }
  rc |= ks_hist_record(&row->cols[t->ntiers].h[0], res->self[t->ntiers]);
  rc |= ks_hist_record(&row->cols[t->ntiers + 1].h[0], res->wall);
  keep_if_slow(t, res);
  return rc == KS_OK ? KS_OK : KS_ENOMEM;
}

/* Empties the rows, the slow list and the counters; requests in flight stay. */
void ks_tiers_clear_rows(ks_tiers *t) {
  uint32_t r;
  int c, k;

  if (t->rows != NULL)
    for (r = 0; r <= t->o.max_identities; r++) {
      t->rows[r].requests = 0;
      if (t->rows[r].cols == NULL)
        continue;
      for (c = 0; c < ncols(t); c++) {
        t->rows[r].cols[c].calls = 0;
        for (k = 0; k < KS_TSTAT__COUNT; k++)
          ks_hist_reset(&t->rows[r].cols[c].h[k]);
      }
    }
  t->n_slow = 0;
  t->requests = t->events = t->abandoned = t->truncated_requests = 0;
  t->killed_requests = 0;
  t->dropped_requests = t->dropped_events = t->orphan_events = t->folded_requests = 0;
  t->first_ts = t->last_ts;
}
