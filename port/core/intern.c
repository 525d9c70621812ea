/* intern.c: compact ids for MFAs, pids/ports and arbitrary terms (seq_trace labels).
 *
 * Two levels per table: the raw bytes of the frame (hashed as they are, no
 * decoding) find the id in one probe; on a miss the bytes are turned into a
 * canonical key (UTF-8 atoms), which is looked up or added, and the raw bytes
 * are remembered. Nothing is allocated unless a key is new.
 */
#include <stdlib.h>

#include "ks_intern.h"

#define ATOM_MAX 1024        /* 255 characters, 4 UTF-8 bytes each, and a NUL */
#define ARENA_MAX UINT32_MAX /* offsets are 32-bit */

static uint64_t slot_hash(const void *e, const void *ctx) {
  return ((const ks_itab_slot *)e)->hash;
}

static ks_itab_slot *slot_at(const ks_itab *t, uint32_t i) {
  return ks_hmap_at(&t->map, sizeof(ks_itab_slot), i);
}

int ks_itab_init(ks_itab *t, size_t slots_hint) {
  size_t n = 16;

  while (n < slots_hint)
    n <<= 1;
  memset(t, 0, sizeof(*t));
  return n > UINT32_MAX / 2 ? KS_ENOMEM : ks_hmap_init(&t->map, sizeof(ks_itab_slot), (uint32_t)n);
}

void ks_itab_free(ks_itab *t) {
  ks_hmap_free(&t->map);
  free(t->arena);
  memset(t, 0, sizeof(*t));
}

int ks_itab_filter(ks_itab *t, int (*keep)(void *ctx, uint32_t val, uint32_t new_off), void *ctx) {
  ks_itab n;
  size_t cap = 4096;
  uint32_t i;
  const ks_itab_slot *o;

  while (cap < t->arena_len)
    cap *= 2;
  if (ks_itab_init(&n, (size_t)t->map.n * 2) != KS_OK)
    return KS_ENOMEM;
  if ((n.arena = malloc(cap)) == NULL) {
    ks_itab_free(&n);
    return KS_ENOMEM;
  }
  n.arena_cap = cap;   /* every kept key fits: no put below can fail */
  for (i = 0; i <= t->map.mask; i++) {
    o = slot_at(t, i);
    if (o->val == KS_NONE || !keep(ctx, o->val, (uint32_t)n.arena_len))
      continue;
    ks_itab_put(&n, t->arena + o->off, o->len, o->hash, o->val, NULL);
  }
  ks_itab_free(t);
  *t = n;
  return KS_OK;
}

const unsigned char *ks_itab_key(const ks_itab *t, uint32_t off) {
  return t->arena + off;
}

uint32_t ks_itab_get(const ks_itab *t, const void *key, size_t len, uint64_t hash) {
  const ks_itab_slot *s;
  size_t i;

  for (s = ks_hmap_run(&t->map, sizeof(*s), hash, &i); s != NULL;
       s = ks_hmap_step(&t->map, sizeof(*s), &i))
    if (s->hash == hash && s->len == len && ks_key_eq(t->arena + s->off, key, len))
      return s->val;
  return KS_NONE;
}

int ks_itab_put(ks_itab *t, const void *key, size_t len, uint64_t hash, uint32_t val,
                uint32_t *off) {
  ks_itab_slot *s;

  if (val == KS_NONE)
    return KS_EINVAL;
  /* Keep the load under 1/2 so probes stay short. */
  if (ks_hmap_full(&t->map) && ks_hmap_grow(&t->map, slot_hash, NULL) != KS_OK)
    return KS_ENOMEM;
  if (len > ARENA_MAX - t->arena_len)
    return KS_EFULL;
  if (t->arena_len + len > t->arena_cap) {
    size_t cap = t->arena_cap ? t->arena_cap : 4096;
    unsigned char *a;
    while (cap < t->arena_len + len)
      cap *= 2;
    a = realloc(t->arena, cap);
    if (a == NULL)
      return KS_ENOMEM;
    t->arena = a;
    t->arena_cap = cap;
  }
  memcpy(t->arena + t->arena_len, key, len);
  s = ks_hmap_put(&t->map, sizeof(*s), ks_hmap_end(&t->map, sizeof(*s), hash));
  s->val = val;
  s->off = (uint32_t)t->arena_len;
  s->hash = hash;
  s->len = (uint32_t)len;
  if (off != NULL)
    *off = (uint32_t)t->arena_len;
  t->arena_len += len;
  return KS_OK;
}

/* Appends one id -> offset record, growing the array by doubling. */
static int push_off(uint32_t **v, uint32_t *n, uint32_t *cap, uint32_t off) {
  if (*n == *cap && ks_grow(v, cap, *n, 256, sizeof(**v)) != KS_OK)
    return KS_ENOMEM;
  (*v)[(*n)++] = off;
  return KS_OK;
}

int ks_intern_init(ks_intern *in, const ks_intern_limits *lim) {
  memset(in, 0, sizeof(*in));
  in->max_mfas = lim ? lim->max_mfas : 1u << 20;
  in->max_pids = lim ? lim->max_pids : 1u << 20;
  in->max_terms = lim ? lim->max_terms : 1u << 20;
  if (ks_itab_init(&in->mfa_raw, 1024) || ks_itab_init(&in->mfa_canon, 1024) ||
      ks_itab_init(&in->mfa_tuple, 1024) ||
      ks_itab_init(&in->pid_raw, 1024) || ks_itab_init(&in->pid_canon, 1024) ||
      ks_itab_init(&in->terms, 256) ||
      (in->mfa_recent = calloc(KS_MFA_RECENT, sizeof(*in->mfa_recent))) == NULL) {
    ks_intern_free(in);
    return KS_ENOMEM;
  }
  return KS_OK;
}

void ks_intern_free(ks_intern *in) {
  ks_itab_free(&in->mfa_raw);
  ks_itab_free(&in->mfa_canon);
  ks_itab_free(&in->mfa_tuple);
  ks_itab_free(&in->pid_raw);
  ks_itab_free(&in->pid_canon);
  ks_itab_free(&in->terms);
  free(in->mfa_recent);
  free(in->mfas);
  free(in->pids);
  free(in->pid_free);
  free(in->termv);
  memset(in, 0, sizeof(*in));
}

/* A key refused at a cap is a drop of this table (see ks_intern.dropped_*). */
static int refused(int rc, uint64_t *dropped) {
  if (rc == KS_EFULL)
    (*dropped)++;
  return rc;
}

/* Adds a canonical key the table does not have (hash h) under the next id. */
static int new_canon_id(ks_itab *t, const unsigned char *key, size_t len, uint64_t h,
                        uint32_t **offs, uint32_t *n, uint32_t *cap, uint32_t *id) {
  uint32_t off;
  int rc;

  if ((rc = ks_itab_put(t, key, len, h, *n, &off)) != KS_OK)
    return rc;
  if ((rc = push_off(offs, n, cap, off)) != KS_OK)
    return rc;
  *id = *n - 1;
  return KS_OK;
}

/* Looks up or adds a canonical key; a new key gets the next id. */
static int canon_id(ks_itab *t, const unsigned char *key, size_t len, uint32_t **offs,
                    uint32_t *n, uint32_t *cap, uint32_t max, uint32_t *id) {
  uint64_t h = ks_hash(key, len);
  uint32_t v = ks_itab_get(t, key, len, h);

  if (v != KS_NONE) {
    *id = v;
    return KS_OK;
  }
  if (*n >= max)
    return KS_EFULL;
  return new_canon_id(t, key, len, h, offs, n, cap, id);
}

int ks_intern_mfa(ks_intern *in, const ks_atom *m, const ks_atom *f, uint32_t arity,
                  uint32_t *id) {
  /* Raw key: the two atoms' encoded bytes (tag included) and the arity. */
  unsigned char raw[2 * (5 + ATOM_MAX) + 4], key[2 * ATOM_MAX + 4];
  size_t rn = 0, kn;
  uint64_t h;
  uint32_t v;
  int n1, n2, rc;

  if (m->n >= ATOM_MAX || f->n >= ATOM_MAX)
    return KS_EBADTERM;
  raw[rn++] = (unsigned char)(m->utf8 ? 1 : 0);
  ks_put_be32(raw + rn, (uint32_t)m->n); rn += 4;
  memcpy(raw + rn, m->s, m->n); rn += m->n;
  raw[rn++] = (unsigned char)(f->utf8 ? 1 : 0);
  memcpy(raw + rn, f->s, f->n); rn += f->n;
  ks_put_be32(raw + rn, arity); rn += 4;
  h = ks_hash(raw, rn);
  v = ks_itab_get(&in->mfa_raw, raw, rn, h);
  if (v != KS_NONE) {
    *id = v;
    return KS_OK;
  }
  if ((n1 = ks_atom_utf8(m, (char *)key, ATOM_MAX)) < 0)
    return KS_EBADTERM;
  if ((n2 = ks_atom_utf8(f, (char *)key + n1 + 1, ATOM_MAX)) < 0)
    return KS_EBADTERM;
  kn = (size_t)n1 + 1 + (size_t)n2 + 1;
  ks_put_be32(key + kn, arity);
  kn += 4;
  rc = canon_id(&in->mfa_canon, key, kn, &in->mfas, &in->n_mfas, &in->cap_mfas,
                in->max_mfas, &v);
  if (rc != KS_OK)
    return refused(rc, &in->dropped_mfas);
  if ((rc = ks_itab_put(&in->mfa_raw, raw, rn, h, v, NULL)) != KS_OK)
    return refused(rc, &in->dropped_mfas);
  *id = v;
  return KS_OK;
}

int ks_intern_mfa_raw(ks_intern *in, ks_slice raw, const ks_atom *m, const ks_atom *f,
                      uint32_t arity, uint32_t *id) {
  uint64_t h = ks_hash(raw.p, raw.n);
  uint32_t v = ks_itab_get(&in->mfa_tuple, raw.p, raw.n, h);
  int rc;

  if (v != KS_NONE) {
    *id = v;
    return KS_OK;
  }
  if ((rc = ks_intern_mfa(in, m, f, arity, &v)) != KS_OK)
    return rc;   /* counted by ks_intern_mfa */
  if ((rc = ks_itab_put(&in->mfa_tuple, raw.p, raw.n, h, v, NULL)) != KS_OK)
    return refused(rc, &in->dropped_mfas);
  *id = v;
  return KS_OK;
}

/*
 * The recent-MFA slot of a tuple: its last 8 bytes (the function's tail and
 * the arity) and its length (the module's) mixed by one multiply. Every
 * tuple is at least 8 bytes: {104, 3}, two atoms of 2 bytes or more, {97, A}.
 */
static inline ks_mfa_recent *recent_slot(const ks_intern *in, const unsigned char *t, size_t n) {
  uint64_t k = (ks_load64(t + n - 8) ^ n) * 0x9e3779b97f4a7c15ull;

  return &in->mfa_recent[k >> 56];
}

int ks_intern_mfa_known(ks_intern *in, const unsigned char *tuple, size_t n, uint32_t *id) {
  ks_mfa_recent *r;
  uint32_t v;

  if (n < 8)
    return KS_EINVAL;
  r = recent_slot(in, tuple, n);
  if (r->len == n && ks_key_eq(r->key, tuple, n)) {
    *id = r->id;
    return KS_OK;
  }
  v = ks_itab_get(&in->mfa_tuple, tuple, n, ks_hash(tuple, n));
  if (v == KS_NONE)
    return KS_EINVAL;
  if (n <= KS_MFA_RECENT_KEY) {
    memcpy(r->key, tuple, n);
    r->len = (uint32_t)n;
    r->id = v;
  }
  *id = v;
  return KS_OK;
}

/* The tail of a pid (num, serial, creation) is what differs between pids. */
static uint64_t pid_hash(ks_slice raw) {
  return raw.n >= 16 ? ks_hash(raw.p + raw.n - 16, 16) ^ raw.n : ks_hash(raw.p, raw.n);
}

uint32_t ks_intern_pids_live(const ks_intern *in) {
  return in->n_pids - in->n_pid_free;
}

/* canon_id for pids: a released id is taken before a new one, and the cap
 * is on the pids that hold an id now. */
static int pid_canon_id(ks_intern *in, const unsigned char *key, size_t len, uint32_t *id) {
  uint64_t h = ks_hash(key, len);
  uint32_t v = ks_itab_get(&in->pid_canon, key, len, h), off;
  int rc;

  if (v != KS_NONE) {
    *id = v;
    return KS_OK;
  }
  /* At the cap, exited processes' ids may be released (and the tables rebuilt: h stays good). */
  if (ks_intern_pids_live(in) >= in->max_pids &&
      (in->pids_full == NULL || in->pids_full(in->pids_full_ctx) <= 0))
    return KS_EFULL;
  if (in->n_pid_free == 0)
    return new_canon_id(&in->pid_canon, key, len, h, &in->pids, &in->n_pids, &in->cap_pids, id);
  v = in->pid_free[in->n_pid_free - 1];
  if ((rc = ks_itab_put(&in->pid_canon, key, len, h, v, &off)) != KS_OK)
    return rc;
  in->n_pid_free--;
  in->pids[v] = off;
  *id = v;
  return KS_OK;
}

int ks_keep_live_id(void *ctx, uint32_t id, uint32_t new_off) {
  const ks_dead_ids *d = ctx;

  (void)new_off;
  return id >= d->n || !d->dead[id];
}

typedef struct pid_filter {
  ks_dead_ids ids;
  ks_intern *in;
} pid_filter;

static int keep_canon_pid(void *ctx, uint32_t id, uint32_t new_off) {
  pid_filter *f = ctx;

  if (!ks_keep_live_id(&f->ids, id, new_off))
    return 0;
  f->in->pids[id] = new_off;
  return 1;
}

int ks_intern_pids_release(ks_intern *in, const uint8_t *dead, uint32_t n) {
  pid_filter f = {{dead, n < in->n_pids ? n : in->n_pids}, in};
  uint32_t id, count = 0;

  for (id = 0; id < f.ids.n; id++)
    count += dead[id] && in->pids[id] != KS_NONE;
  if (count == 0)
    return KS_OK;
  if (ks_grow(&in->pid_free, &in->cap_pid_free, in->n_pid_free + count - 1, 256,
              sizeof(*in->pid_free)) != KS_OK)
    return KS_ENOMEM;
  /* The raw table first: if the canonical one then fails, the pids are
   * only looked up the slow way, under the same ids. */
  if (ks_itab_filter(&in->pid_raw, ks_keep_live_id, &f.ids) != KS_OK ||
      ks_itab_filter(&in->pid_canon, keep_canon_pid, &f) != KS_OK)
    return KS_ENOMEM;
  for (id = f.ids.n; id-- > 0;) {
    if (dead[id] && in->pids[id] != KS_NONE) {
      in->pids[id] = KS_NONE;
      in->pid_free[in->n_pid_free++] = id;
    }
  }
  in->pids_freed += count;
  in->last_pid_len = 0;   /* it may have been one of them */
  return KS_OK;
}

int ks_intern_pid(ks_intern *in, ks_slice raw, uint32_t *id) {
  unsigned char key[ATOM_MAX + 1 + 12];
  uint64_t h, port_id;
  uint32_t v, num, serial, creation;
  ks_etf c;
  ks_atom node;
  size_t kn, need;
  int tag, n, rc;

  if (raw.n == in->last_pid_len && ks_key_eq(raw.p, in->last_pid, raw.n)) {
    *id = in->last_pid_id;
    return KS_OK;
  }
  h = pid_hash(raw);
  v = ks_itab_get(&in->pid_raw, raw.p, raw.n, h);
  if (v != KS_NONE) {
    *id = v;
    if (raw.n <= sizeof(in->last_pid)) {
      memcpy(in->last_pid, raw.p, raw.n);
      in->last_pid_len = raw.n;
      in->last_pid_id = v;
    }
    return KS_OK;
  }
  ks_etf_init(&c, raw.p, raw.n);
  tag = raw.p[0];
  c.i = 1;
  if (ks_etf_atom(&c, &node) != KS_OK)
    return KS_EBADTERM;
  /* The fields after the node, as many bytes as the tag says: a ring record's
   * pid bytes come unchecked (a frame's went through ks_etf_pid). */
  switch (tag) {
  case KS_TAG_NEW_PID: case KS_TAG_V4_PORT: need = 12; break;
  case KS_TAG_PID: need = 9; break;
  case KS_TAG_NEW_PORT: need = 8; break;
  case KS_TAG_PORT: need = 5; break;
  default: return KS_EBADTERM;
  }
  if (raw.n < c.i + need)
    return KS_EBADTERM;
  switch (tag) {
  case KS_TAG_NEW_PID:
    num = ks_be32(raw.p + c.i);
    serial = ks_be32(raw.p + c.i + 4);
    creation = ks_be32(raw.p + c.i + 8);
    break;
  case KS_TAG_PID:
    num = ks_be32(raw.p + c.i);
    serial = ks_be32(raw.p + c.i + 4);
    creation = raw.p[c.i + 8];
    break;
  case KS_TAG_V4_PORT:
    port_id = (uint64_t)ks_be32(raw.p + c.i) << 32 | ks_be32(raw.p + c.i + 4);
    num = (uint32_t)(port_id >> 32);
    serial = (uint32_t)port_id;
    creation = ks_be32(raw.p + c.i + 8);
    break;
  case KS_TAG_NEW_PORT:
    num = 0;
    serial = ks_be32(raw.p + c.i);
    creation = ks_be32(raw.p + c.i + 4);
    break;
  default:   /* KS_TAG_PORT */
    num = 0;
    serial = ks_be32(raw.p + c.i);
    creation = raw.p[c.i + 4];
    break;
  }
  if ((n = ks_atom_utf8(&node, (char *)key, ATOM_MAX)) < 0)
    return KS_EBADTERM;
  kn = (size_t)n + 1;
  key[kn++] = (unsigned char)(tag == KS_TAG_NEW_PID || tag == KS_TAG_PID ? 0 : 1);
  ks_put_be32(key + kn, num); kn += 4;
  ks_put_be32(key + kn, serial); kn += 4;
  ks_put_be32(key + kn, creation); kn += 4;
  rc = pid_canon_id(in, key, kn, &v);
  if (rc != KS_OK)
    return refused(rc, &in->dropped_pids);
  if ((rc = ks_itab_put(&in->pid_raw, raw.p, raw.n, h, v, NULL)) != KS_OK)
    return refused(rc, &in->dropped_pids);
  *id = v;
  return KS_OK;
}

int ks_intern_term(ks_intern *in, ks_slice raw, uint32_t *id) {
  uint32_t off;
  uint64_t h = ks_hash(raw.p, raw.n);
  uint32_t v = ks_itab_get(&in->terms, raw.p, raw.n, h);
  int rc;

  if (v != KS_NONE) {
    *id = v;
    return KS_OK;
  }
  if (in->n_terms >= in->max_terms)
    return refused(KS_EFULL, &in->dropped_terms);
  if (in->n_terms == in->cap_terms &&
      ks_grow(&in->termv, &in->cap_terms, in->n_terms, 64, sizeof(*in->termv)) != KS_OK)
    return KS_ENOMEM;
  if ((rc = ks_itab_put(&in->terms, raw.p, raw.n, h, in->n_terms, &off)) != KS_OK)
    return refused(rc, &in->dropped_terms);
  in->termv[in->n_terms].off = off;
  in->termv[in->n_terms].len = (uint32_t)raw.n;
  *id = in->n_terms++;
  return KS_OK;
}

int ks_intern_mfa_get(const ks_intern *in, uint32_t id, ks_mfa_view *v) {
  const char *k;

  if (id >= in->n_mfas)
    return KS_EINVAL;
  k = (const char *)ks_itab_key(&in->mfa_canon, in->mfas[id]);
  v->m = k;
  v->f = k + strlen(k) + 1;
  v->arity = ks_be32((const unsigned char *)v->f + strlen(v->f) + 1);
  return KS_OK;
}

int ks_intern_pid_get(const ks_intern *in, uint32_t id, ks_pid_view *v) {
  const unsigned char *k;

  if (id >= in->n_pids || in->pids[id] == KS_NONE)
    return KS_EINVAL;
  k = ks_itab_key(&in->pid_canon, in->pids[id]);
  v->node = (const char *)k;
  k += strlen(v->node) + 1;
  v->is_port = k[0];
  v->num = ks_be32(k + 1);
  v->serial = ks_be32(k + 5);
  v->creation = ks_be32(k + 9);
  return KS_OK;
}

ks_slice ks_intern_term_get(const ks_intern *in, uint32_t id) {
  ks_slice s = {NULL, 0};

  if (id < in->n_terms) {
    s.p = ks_itab_key(&in->terms, in->termv[id].off);
    s.n = in->termv[id].len;
  }
  return s;
}

void ks_intern_reset_counts(ks_intern *in) {
  in->dropped_mfas = in->dropped_pids = in->dropped_terms = 0;
}
