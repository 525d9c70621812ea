/* tier_control.c: the tier profiler's part of the control protocol (doc/internals-tiers.md):
 * {tiers_start, Specs, Opts}, tiers_stop, tiers_reset, {tiers_report, Flush}
 * (their rows are in port/sink/control.c's table).
 * Commands were bounds-checked by the decoder, so ei reads them safely.
 */
#include <ei.h>
#include <stdlib.h>

#include "ks_tiers.h"

/* Full trace: {full_trace, all | [Identity]}; the identities' bytes stay in b. */
typedef struct full_sel {
  int on, all;
  ks_slice *ids;
  uint32_t n;
} full_sel;

static int decode_full(const char *b, int *idx, full_sel *fs) {
  char atom[MAXATOMLEN];
  int n, k, start;

  if (fs->on)
    return KS_EINVAL;   /* given twice */
  fs->on = 1;
  if (ei_decode_atom(b, idx, atom) == 0)
    return strcmp(atom, "all") == 0 ? (fs->all = 1, KS_OK) : KS_EINVAL;
  if (ei_decode_list_header(b, idx, &n) != 0 || n < 1 || n > 100000)
    return KS_EINVAL;
  if ((fs->ids = calloc((size_t)n, sizeof(*fs->ids))) == NULL)
    return KS_ENOMEM;
  for (k = 0; k < n; k++) {
    start = *idx;
    if (ei_skip_term(b, idx) != 0)
      return KS_EINVAL;
    fs->ids[k].p = (const unsigned char *)b + start;
    fs->ids[k].n = (size_t)(*idx - start);
  }
  fs->n = (uint32_t)n;
  return ei_decode_list_header(b, idx, &n) == 0 && n == 0 ? KS_OK : KS_EINVAL;
}

/* Bounds and fields: the table's (include/ks_options.h); here only full_trace. */
static int decode_opts(const char *b, int *idx, ks_tier_opts *o, full_sel *fs) {
  const ks_option *term;
  int n, k;

  if (ei_decode_list_header(b, idx, &n) != 0)
    return KS_EINVAL;
  for (k = 0; k < n; k++) {
    if (ks_option_decode(KS_M_TIERS, ks_tier_fields, b, idx, o, &term) != KS_OK)
      return KS_EINVAL;
    if (term != NULL && (strcmp(term->key, "full_trace") != 0 || decode_full(b, idx, fs) != KS_OK))
      return KS_EINVAL;
  }
  if (n > 0 && ei_decode_list_header(b, idx, &n) != 0)   /* the tail */
    return KS_EINVAL;
  return KS_OK;
}

/* An atom or '_' (NULL). */
static int decode_name(const char *b, int *idx, char **out) {
  char buf[MAXATOMLEN_UTF8];
  erlang_char_encoding enc;

  if (ei_decode_atom_as(b, idx, buf, sizeof(buf), ERLANG_UTF8, &enc, NULL) != 0)
    return KS_EINVAL;
  if (strcmp(buf, "_") == 0) {
    *out = NULL;
    return KS_OK;
  }
  *out = strdup(buf);
  return *out != NULL ? KS_OK : KS_ENOMEM;
}

/* [{M, F | '_', A | '_', Role}], Role: tier index | start | stop | mark | entry | traced */
static int decode_specs(const char *b, int *idx, ks_tier_spec **out, uint32_t *nout,
                        int *ntiers) {
  int n, k, ar, type, size;
  ks_tier_spec *v;

  *ntiers = 0;
  if (ei_decode_list_header(b, idx, &n) != 0 || n < 1 || n > 100000)
    return KS_EINVAL;
  v = calloc((size_t)n, sizeof(*v));
  if (v == NULL)
    return KS_ENOMEM;
  *out = v;
  *nout = 0;
  for (k = 0; k < n; k++) {
    ks_tier_spec *s = &v[k];
    char role[MAXATOMLEN];
    long l;
    if (ei_decode_tuple_header(b, idx, &ar) != 0 || ar != 4 || decode_name(b, idx, &s->m) != 0)
      return KS_EINVAL;
    (*nout)++;
    if (s->m == NULL || decode_name(b, idx, &s->f) != 0)
      return KS_EINVAL;
    ei_get_type(b, idx, &type, &size);
    if (type == ERL_ATOM_EXT || type == ERL_SMALL_ATOM_EXT || type == ERL_ATOM_UTF8_EXT ||
        type == ERL_SMALL_ATOM_UTF8_EXT) {
      char *any;
      if (decode_name(b, idx, &any) != 0 || any != NULL) {
        free(any);
        return KS_EINVAL;
      }
      s->arity = -1;
    } else if (ei_decode_long(b, idx, &l) == 0 && l >= 0 && l <= 255) {
      s->arity = (int)l;
    } else {
      return KS_EINVAL;
    }
    ei_get_type(b, idx, &type, &size);
    if (type == ERL_SMALL_INTEGER_EXT || type == ERL_INTEGER_EXT) {
      if (ei_decode_long(b, idx, &l) != 0 || l < 0 || l >= KS_TIER_MAX)
        return KS_EINVAL;
      s->role = (int)l;
      if ((int)l + 1 > *ntiers)
        *ntiers = (int)l + 1;
    } else if (ei_decode_atom(b, idx, role) == 0) {
      if (strcmp(role, "start") == 0)
        s->role = KS_ROLE_START;
      else if (strcmp(role, "stop") == 0)
        s->role = KS_ROLE_STOP;
      else if (strcmp(role, "mark") == 0)
        s->role = KS_ROLE_MARK;   /* a marker in no tier: no return_to, no frame */
      else if (strcmp(role, "entry") == 0) {
        s->role = KS_ROLE_NONE;
        s->entry = 1;
      } else if (strcmp(role, "traced") == 0)
        s->role = KS_ROLE_NONE;   /* in no tier, but traced without full trace too */
      else
        return KS_EINVAL;
    } else {
      return KS_EINVAL;
    }
  }
  if (ei_decode_list_header(b, idx, &n) != 0 || n != 0)
    return KS_EINVAL;
  return KS_OK;
}

static void free_specs(ks_tier_spec *v, uint32_t n) {
  uint32_t k;

  for (k = 0; k < n; k++) {
    free(v[k].m);
    free(v[k].f);
  }
  free(v);
}

int ks_tiers_decode_start(ks_tiers *t, ks_cmd *c) {
  const char *b = (const char *)c->term.p;
  int *idx = &c->idx;
  ks_tier_spec *specs = NULL;
  ks_tier_opts o;
  full_sel fs = {0, 0, NULL, 0};
  uint32_t n = 0;
  int ntiers, rc;

  ks_tiers_default_opts(&o);
  rc = decode_specs(b, idx, &specs, &n, &ntiers);
  if (rc == KS_OK)
    rc = decode_opts(b, idx, &o, &fs);
  if (rc == KS_OK && ntiers < 1)
    rc = KS_EINVAL;
  if (rc == KS_OK)
    rc = ks_tiers_start(t, c->in, specs, n, ntiers, &o);
  if (rc != KS_OK)
    free_specs(specs, n);
  else if (fs.on && (rc = ks_full_select(t, fs.all, fs.ids, fs.n)) != KS_OK)
    ks_tiers_free(t);
  free(fs.ids);
  return rc;
}

/* #{count, total, min, max, buckets => [{Bucket, N}]}: the buckets sparse and
 * ascending; quantiles are read from them in Erlang (kprof_hist), after merges. */
static int encode_hist(ei_x_buff *x, const ks_hist *h) {
  uint32_t b, nz = 0;
  ks_map m;

  ks_map_begin(&m, x);
  ks_map_u64(&m, "count", h->count);
  ks_map_u64(&m, "total", h->total);
  ks_map_u64(&m, "min", h->min);
  ks_map_u64(&m, "max", h->max);
  ks_map_key(&m, "buckets");
  if (h->buckets != NULL)
    for (b = 0; b < KS_HIST_BUCKETS; b++)
      nz += h->buckets[b] != 0;
  if (nz > 0) {
    m.e |= ei_x_encode_list_header(x, nz);
    for (b = 0; b < KS_HIST_BUCKETS; b++)
      if (h->buckets[b] != 0)
        m.e |= ei_x_encode_tuple_header(x, 2) || ei_x_encode_ulong(x, b) ||
               ei_x_encode_ulong(x, h->buckets[b]);
  }
  m.e |= ei_x_encode_empty_list(x);
  return ks_map_end(&m);
}

/* The identity term of a row, or kprof_other_identities for the fold row. */
int ks_tiers_encode_identity(ei_x_buff *x, const ks_tiers *t, uint32_t row) {
  const ks_itab *it = &t->identities;
  size_t i;

  if (row < t->n_identities)
    for (i = 0; i <= it->map.mask; i++)
      if (it->slots[i].val == row) {
        const char *key = (const char *)ks_itab_key(it, it->slots[i].off);
        return ei_x_append_buf(x, key, (int)it->slots[i].len);
      }
  return ei_x_encode_atom(x, "kprof_other_identities");
}

/* The statistics of a tier column, in KS_TIER_STATS' order: [{Key, Unit}]. */
static int encode_stats(ei_x_buff *x) {
  static const char *const stats[][2] = {
#define KS_X(key, unit, field) {#key, #unit},
    KS_TIER_STATS(KS_X)
#undef KS_X
  };
  int k, e = ei_x_encode_list_header(x, KS_TSTAT__COUNT);

  for (k = 0; k < KS_TSTAT__COUNT; k++)
    e |= ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, stats[k][0]) ||
         ei_x_encode_atom(x, stats[k][1]);
  return e | ei_x_encode_empty_list(x);
}

/* A tier's column: #{calls, Stat => Hist...} (KS_TIER_STATS). */
static int encode_col(ei_x_buff *x, const ks_tier_col *col) {
  static const char *const keys[] = {
#define KS_X(key, unit, field) #key,
    KS_TIER_STATS(KS_X)
#undef KS_X
  };
  ks_map m;
  int k;

  ks_map_begin(&m, x);
  ks_map_u64(&m, "calls", col->calls);
  for (k = 0; k < KS_TSTAT__COUNT; k++) {
    ks_map_key(&m, keys[k]);
    m.e |= encode_hist(x, &col->h[k]);
  }
  return ks_map_end(&m);
}

/* #{identity, requests, tiers => [Col], other => Hist, wall => Hist}. */
static int encode_row(ei_x_buff *x, const ks_tiers *t, uint32_t r) {
  const ks_tier_row *row = &t->rows[r];
  ks_map m;
  int c;

  ks_map_begin(&m, x);
  ks_map_key(&m, "identity");
  m.e |= ks_tiers_encode_identity(x, t, r);
  ks_map_u64(&m, "requests", row->requests);
  ks_map_key(&m, "tiers");
  m.e |= ei_x_encode_list_header(x, t->ntiers);
  for (c = 0; c < t->ntiers; c++)
    m.e |= encode_col(x, &row->cols[c]);
  m.e |= ei_x_encode_empty_list(x);
  ks_map_key(&m, "other");
  m.e |= encode_hist(x, &row->cols[t->ntiers].h[0]);
  ks_map_key(&m, "wall");
  m.e |= encode_hist(x, &row->cols[t->ntiers + 1].h[0]);
  return ks_map_end(&m);
}

/* #{identity, pid, start, wall, tiers => [#{calls, self, inclusive}], other}:
 * one slow request, times in ns, start in VM monotonic ns. */
static int encode_slow(ei_x_buff *x, const ks_tiers *t, const ks_intern *in,
                       const ks_req_result *q) {
  ks_map m, tm;
  int c;

  ks_map_begin(&m, x);
  ks_map_key(&m, "identity");
  m.e |= ks_tiers_encode_identity(x, t, q->identity);
  ks_map_key(&m, "pid");
  m.e |= ks_enc_pid(x, in, q->entry_pid);
  ks_map_key(&m, "start");
  m.e |= ei_x_encode_longlong(x, q->start_ts);
  ks_map_u64(&m, "wall", q->wall);
  ks_map_key(&m, "tiers");
  m.e |= ei_x_encode_list_header(x, t->ntiers);
  for (c = 0; c < t->ntiers; c++) {
    ks_map_begin(&tm, x);
    ks_map_u64(&tm, "calls", q->calls[c]);
    ks_map_u64(&tm, "self", q->self[c]);
    ks_map_u64(&tm, "inclusive", q->incl[c]);
    m.e |= ks_map_end(&tm);
  }
  m.e |= ei_x_encode_empty_list(x);
  ks_map_u64(&m, "other", q->self[t->ntiers]);
  return ks_map_end(&m);
}

int ks_tiers_encode_report(const ks_tiers *t, const ks_intern *in, ei_x_buff *x) {
  uint32_t r, nrows = 0, k;
  int e = 0;
  ks_map m;

  if (t->rows == NULL)
    return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error") ||
           ei_x_encode_atom(x, "not_started");
  for (r = 0; r <= t->o.max_identities; r++)
    nrows += t->rows[r].requests > 0;
  ks_map_begin(&m, x);
  ks_map_bool(&m, "active", t->active);
  ks_map_u64(&m, "ntiers", (uint64_t)t->ntiers);
  ks_map_u64(&m, "requests", t->requests);
  ks_map_u64(&m, "inflight", t->n_inflight);
  ks_map_u64(&m, "events", t->events);
  ks_map_u64(&m, "abandoned", t->abandoned);
  ks_map_u64(&m, "killed_requests", t->killed_requests);
  ks_map_u64(&m, "truncated", t->truncated_requests);
  ks_map_u64(&m, "dropped_requests", t->dropped_requests);
  ks_map_u64(&m, "dropped_events", t->dropped_events);
  ks_map_u64(&m, "orphan_events", t->orphan_events);
  ks_map_u64(&m, "folded_requests", t->folded_requests);
  ks_map_u64(&m, "identities", t->n_identities);
  ks_map_i64_or_undefined(&m, "first_ts", t->first_ts, INT64_MIN);
  ks_map_i64_or_undefined(&m, "last_ts", t->last_ts, INT64_MIN);
  ks_map_key(&m, "stats");
  e |= encode_stats(x);
  ks_map_key(&m, "rows");
  if (nrows > 0)
    e |= ei_x_encode_list_header(x, nrows);
  for (r = 0; r <= t->o.max_identities && !e; r++)
    if (t->rows[r].requests > 0)
      e |= encode_row(x, t, r);
  e |= ei_x_encode_empty_list(x);
  ks_map_key(&m, "slow");
  if (t->n_slow > 0)
    e |= ei_x_encode_list_header(x, t->n_slow);
  for (k = 0; k < t->n_slow && !e; k++)
    e |= encode_slow(x, t, in, &t->slow[k]);
  e |= ei_x_encode_empty_list(x);
  return e | ks_map_end(&m);
}
