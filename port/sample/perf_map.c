/* perf_map.c: the VM's perf map, read as it grows, and the name of an
 * address at a sample's time (ks_symbols.h says how a line's time of
 * validity is decided).
 *
 * A line is `START SIZE NAME' (hexadecimal, START with or without 0x), as
 * the JIT writes it for every function it emits (`+JPperf map').
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ks_symbols.h"

void ks_pmap_init(ks_pmap *m) {
  memset(m, 0, sizeof(*m));
  m->last_read = INT64_MIN;
  m->fd = -1;
}

void ks_pmap_free(ks_pmap *m) {
  if (m->fd >= 0)
    close(m->fd);
  free(m->cache);
  free(m->cur);
  free(m->old);
  free(m->fresh);
  ks_pmap_init(m);
}

/* ---- names ---- */

/* One escape of a quoted atom at s[*i] (after the backslash) into out. */
static void unescape(const char *s, size_t n, size_t *i, char *out, size_t *o, size_t cap) {
  static const char from[] = "ntrsbfvde", to[] = "\n\t\r \b\f\v\x7f\x1b";
  const char *k = strchr(from, s[*i]);
  unsigned long v = 0;
  size_t j = *i;

  if (s[j] != 0 && k != NULL) {
    v = (unsigned char)to[k - from];
    *i = j + 1;
  } else if (s[j] >= '0' && s[j] <= '7') {   /* \NNN, octal */
    while (j < n && j < *i + 3 && s[j] >= '0' && s[j] <= '7')
      v = v * 8 + (unsigned long)(s[j++] - '0');
    *i = j;
  } else {   /* \' \\ and anything else: the character itself */
    v = (unsigned char)s[j];
    *i = j + 1;
  }
  if (*o + 1 < cap)
    out[(*o)++] = (char)v;
}

/* An atom at s[*i]: 'quoted' (escapes undone) or bare up to the byte stop.
 * KS_OK with the text in out, or KS_EINVAL. */
static int atom_text(const char *s, size_t n, size_t *i, char stop, char *out, size_t cap) {
  size_t o = 0;

  if (*i < n && s[*i] == '\'') {
    for ((*i)++; *i < n && s[*i] != '\''; ) {
      if (s[*i] == '\\' && *i + 1 < n) {
        (*i)++;
        unescape(s, n, i, out, &o, cap);
      } else if (o + 1 < cap) {
        out[o++] = s[(*i)++];
      } else {
        return KS_EINVAL;
      }
    }
    if (*i >= n)
      return KS_EINVAL;
    (*i)++;
  } else {
    for (; *i < n && s[*i] != stop; (*i)++) {
      if (o + 1 >= cap)
        return KS_EINVAL;
      out[o++] = s[*i];
    }
  }
  out[o] = 0;
  return o > 0 ? KS_OK : KS_EINVAL;
}

/* M:F/A[-CodeInfoPrologue] into out; KS_EINVAL when s is not of that shape. */
static int erlang_name(const char *s, size_t n, ks_pname *out) {
  static const char prologue[] = "-CodeInfoPrologue";
  size_t i = 0, digits = 0;
  uint64_t a = 0;

  if (atom_text(s, n, &i, ':', out->m, sizeof(out->m)) != KS_OK || i + 1 >= n || s[i] != ':' ||
      s[i + 1] == ':')
    return KS_EINVAL;
  i++;
  if (atom_text(s, n, &i, '/', out->f, sizeof(out->f)) != KS_OK || i >= n || s[i] != '/')
    return KS_EINVAL;
  for (i++; i < n && s[i] >= '0' && s[i] <= '9' && digits < 4; i++, digits++)
    a = a * 10 + (uint64_t)(s[i] - '0');
  if (digits == 0 || a > 255)
    return KS_EINVAL;
  if (i < n && !(n - i == sizeof(prologue) - 1 && memcmp(s + i, prologue, n - i) == 0))
    return KS_EINVAL;
  out->arity = (uint32_t)a;
  out->kind = KS_PNAME_ERLANG;
  return KS_OK;
}

int ks_pmap_parse_name(const char *s, size_t n, ks_pname *out) {
  if (n > 0 && s[0] == '$') {
    s++;
    n--;
  }
  if (erlang_name(s, n, out) == KS_OK)
    return KS_OK;
  if (n >= sizeof(out->native))
    return KS_EINVAL;
  memcpy(out->native, s, n);
  out->native[n] = 0;
  out->kind = KS_PNAME_NATIVE;
  return KS_OK;
}

/* ---- lines ---- */

static int hex(const char **p, const char *end, uint64_t *v) {
  const char *s = *p;
  int d = 0;

  if (end - s > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    s += 2;
  *v = 0;
  for (; s < end && d < 17; s++, d++) {
    int c = *s;
    if (c >= '0' && c <= '9') c -= '0';
    else if (c >= 'a' && c <= 'f') c -= 'a' - 10;
    else if (c >= 'A' && c <= 'F') c -= 'A' - 10;
    else break;
    *v = *v << 4 | (uint64_t)c;
  }
  if (d == 0 || d > 16)
    return KS_EINVAL;
  *p = s;
  return KS_OK;
}

static void add_fresh(ks_pmap *m, uint64_t start, uint64_t size, uint32_t frame) {
  ks_pmap_ent *e;

  if (ks_grow(&m->fresh, &m->capfresh, m->nfresh, 256, sizeof(*m->fresh)) != KS_OK) {
    m->bad_lines++;
    return;
  }
  e = &m->fresh[m->nfresh++];
  e->start = start;
  e->end = start + size;
  e->frame = frame;
  e->seq = m->lines;
}

static void line(ks_pmap *m, const char *s, size_t n, ks_sym_name_fn name_fn, void *ctx) {
  const char *p = s, *end = s + n;
  uint64_t start, size;
  ks_pname name;
  uint32_t frame;

  m->lines++;
  if (hex(&p, end, &start) != KS_OK || p >= end || *p++ != ' ' || hex(&p, end, &size) != KS_OK ||
      p >= end || *p++ != ' ' || size == 0 || start + size < start ||
      ks_pmap_parse_name(p, (size_t)(end - p), &name) != KS_OK ||
      (frame = name_fn(ctx, &name)) == KS_NONE) {
    m->bad_lines++;
    return;
  }
  add_fresh(m, start, size, frame);
}

void ks_pmap_feed(ks_pmap *m, const char *p, size_t n, ks_sym_name_fn name_fn, void *ctx) {
  const char *nl;
  size_t take;

  while (n > 0) {
    nl = memchr(p, '\n', n);
    take = nl ? (size_t)(nl - p) : n;
    if (m->line_n + take < sizeof(m->line)) {
      memcpy(m->line + m->line_n, p, take);
      m->line_n += take;
    } else {
      m->line_n = sizeof(m->line);   /* too long: counted bad at its end */
    }
    if (nl == NULL)
      return;
    if (m->line_n < sizeof(m->line))
      line(m, m->line, m->line_n, name_fn, ctx);
    else
      m->lines++, m->bad_lines++;
    m->line_n = 0;
    p = nl + 1;
    n -= take + 1;
  }
}

/* ---- the map over time ---- */

static int by_start(const void *a, const void *b) {
  const ks_pmap_ent *x = a, *y = b;

  return x->start < y->start ? -1 : x->start > y->start;
}

static int retire(ks_pmap *m, const ks_pmap_ent *e, int64_t until) {
  m->retired++;
  if (until <= e->since)
    return KS_OK;   /* never valid: two lines of one read */
  if (ks_grow(&m->old, &m->capold, m->nold, 64, sizeof(*m->old)) != KS_OK)
    return KS_ENOMEM;
  m->old[m->nold] = *e;
  m->old[m->nold++].until = until;
  return KS_OK;
}

/* Of two lines that overlap, the later in the file wins; the other retires. */
static int keep_newer(ks_pmap *m, ks_pmap_ent *v, uint32_t *n, const ks_pmap_ent *e) {
  ks_pmap_ent *last = *n > 0 ? &v[*n - 1] : NULL;

  if (last == NULL || last->end <= e->start) {
    v[(*n)++] = *e;
    return KS_OK;
  }
  if (last->seq > e->seq)   /* e is the older: only the samples before last's time */
    return retire(m, e, last->since);
  retire(m, last, e->since);
  *last = *e;
  return KS_OK;
}

/*
 * The fresh lines, sorted by start, merged into cur (both sorted): of lines
 * that overlap, the newer stays and the older is retired. Only the last line
 * kept can overlap the next one (the kept lines never overlap each other).
 */
int ks_pmap_commit(ks_pmap *m, int64_t now) {
  int64_t since = m->last_read;
  uint32_t i = 0, j = 0, n = 0, k, cap = m->n + m->nfresh;
  ks_pmap_ent *v;

  m->last_read = now;
  if (m->nfresh == 0)
    return KS_OK;
  for (k = 0; k < m->nfresh; k++) {
    m->fresh[k].since = since;
    m->fresh[k].until = INT64_MAX;
  }
  qsort(m->fresh, m->nfresh, sizeof(*m->fresh), by_start);
  if ((v = malloc((size_t)cap * sizeof(*v))) == NULL) {
    m->bad_lines += m->nfresh;
    m->nfresh = 0;
    return KS_ENOMEM;
  }
  while (i < m->n || j < m->nfresh) {
    const ks_pmap_ent *e = (j >= m->nfresh || (i < m->n && m->cur[i].start < m->fresh[j].start))
                               ? &m->cur[i++] : &m->fresh[j++];
    keep_newer(m, v, &n, e);
  }
  free(m->cur);
  m->cur = v;
  m->n = n;
  m->cap = cap;
  m->nfresh = 0;
  m->gen++;   /* every remembered lookup is stale */
  return KS_OK;
}

uint32_t ks_pmap_lookup(ks_pmap *m, uint64_t addr, int64_t ts) {
  uint32_t lo = 0, hi = m->n, k, best = KS_NONE;
  uint64_t best_seq = 0;
  ks_pmap_hit *hit = NULL;

  if (m->cache == NULL)
    m->cache = calloc(KS_PMAP_CACHE, sizeof(*m->cache));
  if (m->cache != NULL) {
    hit = &m->cache[(addr * 0x9e3779b97f4a7c15ull) >> 52];
    if (hit->ip == addr && hit->gen == m->gen + 1 && ts >= hit->since)
      return hit->frame;
  }
  while (lo < hi) {   /* the first line that starts past addr */
    uint32_t mid = lo + (hi - lo) / 2;
    if (m->cur[mid].start <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo > 0 && addr < m->cur[lo - 1].end && ts >= m->cur[lo - 1].since) {
    if (hit != NULL)
      *hit = (ks_pmap_hit){addr, m->cur[lo - 1].since, m->cur[lo - 1].frame, m->gen + 1};
    return m->cur[lo - 1].frame;
  }
  /* A line retired since: the newest that held addr at ts. */
  for (k = 0; k < m->nold; k++) {
    const ks_pmap_ent *e = &m->old[k];
    if (addr >= e->start && addr < e->end && ts >= e->since && ts < e->until &&
        (best == KS_NONE || e->seq > best_seq)) {
      best = e->frame;
      best_seq = e->seq;
    }
  }
  return best;
}

int ks_pmap_open(ks_pmap *m, int ospid) {
  char path[128];
  int fd;

  snprintf(path, sizeof(path), "/proc/%d/root/tmp/perf-%d.map", ospid, ospid);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
    /* /proc/PID/root needs the right to trace the VM: our own /tmp is its
     * /tmp when both share a mount namespace. */
    snprintf(path, sizeof(path), "/tmp/perf-%d.map", ospid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
      return -errno;
  }
  if (m->fd >= 0)
    close(m->fd);
  m->fd = fd;
  return KS_OK;
}

int ks_pmap_read(ks_pmap *m, int64_t now, ks_sym_name_fn name_fn, void *ctx) {
  char buf[65536];
  ssize_t k;
  int tapped = 0;

  while (m->fd >= 0 && (k = read(m->fd, buf, sizeof(buf))) != 0) {
    if (k < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    ks_pmap_feed(m, buf, (size_t)k, name_fn, ctx);
    if (m->tap != NULL)
      m->tap(m->tap_ctx, now, buf, (size_t)k);
    tapped = 1;
  }
  if (m->tap != NULL && !tapped)
    m->tap(m->tap_ctx, now, buf, 0);   /* a read that found nothing still dates the next */
  return ks_pmap_commit(m, now);
}
