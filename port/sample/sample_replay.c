/* sample_replay.c: a sampling session's recording (sample_record.c says its
 * format) read back into a sampler: its records through the same decoder,
 * its map text through the same map, its words answered from the recording,
 * each drain resolved where the session resolved it.
 */
#include <stdlib.h>

#include "ks_sample.h"

typedef struct replay {
  const unsigned char *w;      /* the 'w' chunk of the drain under way */
  uint32_t nw, next;
} replay;

static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p) {
  return get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* The recorded answers, in the order the words were asked for. */
static int replay_read(void *ctx, const uint64_t *addrs, uint32_t n, uint64_t *out, uint8_t *ok) {
  replay *rp = ctx;
  uint32_t k, got = 0;

  for (k = 0; k < n; k++, rp->next++) {
    const unsigned char *e = rp->next < rp->nw ? rp->w + 17 * (size_t)rp->next : NULL;
    ok[k] = e != NULL && get64(e) == addrs[k] && e[16] != 0;
    out[k] = ok[k] ? get64(e + 8) : 0;
    got += ok[k];
  }
  return (int)got;
}

/* Each whole record of an 'r' chunk. */
static int replay_ring(ks_sampler *s, const unsigned char *p, size_t n) {
  ks_perf_header h;
  uint32_t kind;

  if (n < 4 || (kind = get32(p)) >= KS_THR_KINDS)
    return KS_EBADTERM;
  for (p += 4, n -= 4; n > 0; p += h.size, n -= h.size) {
    if (ks_perf_header_read(p, n, &h) != KS_OK)
      return KS_EBADTERM;
    ks_sampler_record(s, (int)kind, p, h.size);
  }
  return KS_OK;
}

/* The processes asked for, as pids of the recording's node. */
static int replay_only(ks_sampler *s, const unsigned char *p, size_t n) {
  uint32_t k, m = (uint32_t)(n / 8), *v;

  if (n % 8 != 0 || s->only != NULL || (v = malloc((size_t)(m ? m : 1) * sizeof(*v))) == NULL)
    return KS_EBADTERM;
  for (k = 0; k < m; k++)
    v[k] = ks_sampler_pid(s, get32(p + 8 * k), get32(p + 8 * k + 4));
  s->only = v;
  s->nonly = m;
  ks_sampler_sort_only(s);
  return KS_OK;
}

static int replay_chunk(ks_sampler *s, replay *rp, char type, const unsigned char *p, size_t n) {
  switch (type) {
  case 'r':
    return replay_ring(s, p, n);
  case 'm':
    if (n < 8)
      return KS_EBADTERM;
    ks_pmap_feed(&s->map, (const char *)p + 8, n - 8, ks_sampler_name, s);
    return ks_pmap_commit(&s->map, (int64_t)get64(p)) == KS_OK ? KS_OK : KS_EBADTERM;
  case 'w':
    if (n % 17 != 0)
      return KS_EBADTERM;
    rp->w = p;
    rp->nw = (uint32_t)(n / 17);
    rp->next = 0;
    return KS_OK;
  case 'd':
    if (n != 8)
      return KS_EBADTERM;
    ks_sampler_resolve(s);
    rp->nw = rp->next = 0;
    return KS_OK;
  case 'p':
    return replay_only(s, p, n);
  case 'l':   /* as ks_sampler_window */
    if (n != 16 || (get32(p) != UINT32_MAX && (get32(p) % 8 != 0 ||
                                              get32(p) >= 8 * KS_CAL_WORDS || get32(p + 4) >= 64)))
      return KS_EBADTERM;
    if (get32(p) != UINT32_MAX) {
      s->lay.offset = get32(p);
      s->lay.shift = get32(p + 4);
      s->lay.known = 1;
    }
    s->calibrating = 0;
    s->windowed = 1;
    s->from = (int64_t)get64(p + 8);
    memset(&s->k, 0, sizeof(s->k));
    return KS_OK;
  default:
    return KS_EBADTERM;
  }
}

int ks_srec_replay(ks_sampler *s, const unsigned char *p, size_t n) {
  replay rp = {NULL, 0, 0};
  size_t at, tn;
  int rc = KS_OK;

  if (n < 24 || memcmp(p, "KSR1", 4) != 0)
    return KS_EBADTERM;
  s->nregs = get32(p + 4);
  s->max_stack = get32(p + 8);
  s->lay.num_bits = get32(p + 12);
  s->lay.ser_bits = get32(p + 16);
  tn = get32(p + 20);
  if (s->nregs > 1 || s->lay.num_bits == 0 || s->lay.num_bits > 32 ||
      s->lay.ser_bits > 64 || tn > sizeof(s->pid_tmpl) || tn > n - 24)
    return KS_EBADTERM;
  memcpy(s->pid_tmpl, p + 24, tn);
  s->pid_tmpl_n = tn;
  s->read_words = replay_read;
  s->read_ctx = &rp;
  for (at = 24 + tn; at < n && rc == KS_OK;) {
    size_t len;
    if (n - at < 5 || (len = get32(p + at + 1)) > n - at - 5) {
      rc = KS_EBADTERM;
      break;
    }
    rc = replay_chunk(s, &rp, (char)p[at], p + at + 5, len);
    at += 5 + len;
  }
  if (s->npend > 0)
    ks_sampler_resolve(s);   /* a recording cut short: what was read is resolved */
  s->read_words = NULL;
  s->read_ctx = NULL;
  return rc;
}
