/* ring.c: the sink's end of the shared-memory rings: create them, read their records as events.
 *
 * The kprof_tracer NIF writes `call`, `return_to` and event records (in, out,
 * spawn, gc_*, ...) that name atoms and pids by the VM's term words, each
 * defined by a record in one ring or another (include/ks_ring.h). Here the
 * words are mapped to the sink's own MFA and pid ids (the intern tables every
 * frame goes through), so the tiers and flame code see the same events
 * whichever way they came; ring_drain.c walks the rings and merges them. The
 * rings are untrusted input like stdin: every length is checked, an unknown
 * word or a bad record is counted, never followed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "core/ks_platform.h"
#include "ks_ring_reader.h"

void ks_ring_reader_init(ks_ring_reader *r) {
  memset(r, 0, sizeof(*r));
}

static void free_maps(ks_ring_reader *r) {
  ks_itab_free(&r->atoms);
  ks_itab_free(&r->mfas);
  ks_itab_free(&r->pids);
  free(r->names);
  r->names = NULL;
  r->names_len = r->names_cap = 0;
}

static int init_maps(ks_ring_reader *r) {
  uint32_t k;

  free_maps(r);
  for (k = 0; k < KS_RING_MFA_CACHE; k++)
    r->mfa_cache[k].id = KS_NONE;
  if (ks_itab_init(&r->atoms, 1024) != KS_OK || ks_itab_init(&r->mfas, 1024) != KS_OK ||
      ks_itab_init(&r->pids, 1024) != KS_OK) {
    free_maps(r);
    return KS_ENOMEM;
  }
  return KS_OK;
}

/* 64 unpredictable bits: another local user cannot guess the name and
 * create it first (O_EXCL would then refuse it, and the tracer fall back). */
static uint64_t name_bits(void) {
  uint64_t v;
  struct timespec ts;

  if (ks_random64(&v))
    return v;
  clock_gettime(CLOCK_MONOTONIC, &ts);   /* no entropy yet at boot: unlikely, still unique */
  return ks_hash(&ts, sizeof(ts)) ^ (uint64_t)getpid();
}

/* A fresh shm object under a name nobody else has: EEXIST means a clash (or
 * somebody's squatting), so another name is tried. */
static int create_shm(ks_ring_reader *r) {
  int k, fd;

  for (k = 0; k < 16; k++) {
    snprintf(r->name, sizeof(r->name), "/kprof-%ld-%016llx", (long)getpid(),
             (unsigned long long)name_bits());
    fd = shm_open(r->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0 || errno != EEXIST)
      return fd;
  }
  return -1;
}

/* The reader's cursors and merge heap for r->rings rings. */
static int init_cursors(ks_ring_reader *r) {
  unsigned k;

  r->cur = calloc(r->rings, sizeof(*r->cur));
  r->heap = calloc(r->rings, sizeof(*r->heap));
  r->heap_ts = calloc(r->rings, sizeof(*r->heap_ts));
  if (r->cur == NULL || r->heap == NULL || r->heap_ts == NULL)
    return KS_ENOMEM;
  for (k = 0; k < r->rings; k++) {
    r->cur[k].r = ks_ring_at(r->h, r->size, k);
    r->cur[k].data = ks_ring_data(r->cur[k].r);
  }
  r->watermark = INT64_MIN;
  return KS_OK;
}

uint64_t ks_ring_fit(uint64_t size, unsigned rings, uint64_t avail) {
  while (ks_ring_object_bytes(size, rings) > avail / 2) {
    if (size <= KS_RING_MIN_SIZE)
      return 0;
    size >>= 1;
  }
  return size;
}

/* The object's pages are taken from its file system (a tmpfs: /dev/shm, 64 MB
 * in a container by default) as the writers first touch them, and a writer
 * that touches a page the file system has no room for gets SIGBUS: the VM
 * dies. So the rings are sized down to fit half of the room there is now
 * (another user who fills /dev/shm later can still take it). */
static int fit_shm(int fd, uint64_t *size, unsigned rings) {
  struct statvfs fs;

  if (fstatvfs(fd, &fs) != 0)
    return KS_OK;   /* nothing to go by: as asked */
  *size = ks_ring_fit(*size, rings, (uint64_t)fs.f_bavail * fs.f_frsize);
  return *size == 0 ? KS_ENOSPC : KS_OK;
}

int ks_ring_open(ks_ring_reader *r, uint64_t size, unsigned rings) {
  size_t bytes;
  ks_ring_hdr *h;
  int fd, rc;

  if (size < KS_RING_MIN_SIZE || size > KS_RING_MAX_SIZE || (size & (size - 1)) != 0 ||
      rings < 1 || rings > KS_RING_MAX_RINGS)
    return KS_EINVAL;
  ks_ring_close(r);
  if (init_maps(r) != KS_OK)
    return KS_ENOMEM;
  fd = create_shm(r);
  if (fd < 0) {
    free_maps(r);
    return KS_EINVAL;
  }
  if ((rc = fit_shm(fd, &size, rings)) == KS_OK) {
    bytes = ks_ring_object_bytes(size, rings);
    if (ftruncate(fd, (off_t)bytes) != 0 || (h = ks_ring_map(fd, size, rings)) == NULL)
      rc = KS_ENOMEM;
  }
  if (rc != KS_OK) {   /* nothing of this open is kept */
    close(fd);
    shm_unlink(r->name);
    free_maps(r);
    return rc;
  }
  close(fd);
  h->magic = KS_RING_MAGIC;
  h->version = KS_RING_VERSION;
  h->hdr_size = KS_RING_HDR;
  h->size = size;
  h->rings = rings;
  /* The last ring is for the writers that find none free, one at a time. */
  atomic_store_explicit(&ks_ring_at(h, size, rings - 1)->owner, KS_RING_SHARED,
                        memory_order_relaxed);
  r->h = h;
  r->size = size;
  r->rings = rings;
  r->linked = 1;
  if (init_cursors(r) != KS_OK) {
    ks_ring_close(r);
    return KS_ENOMEM;
  }
  return KS_OK;
}

void ks_ring_unlink(ks_ring_reader *r) {
  if (r->linked) {
    shm_unlink(r->name);
    r->linked = 0;
  }
}

void ks_ring_close(ks_ring_reader *r) {
  if (r->h != NULL) {
    atomic_store_explicit(&r->h->closed, 1, memory_order_release);
    ks_ring_unmap(r->h, r->size, r->rings);
    r->h = NULL;
  }
  ks_ring_unlink(r);
  free_maps(r);
  free(r->cur);
  free(r->heap);
  free(r->heap_ts);
  free(r->pid_ts);
  r->cur = NULL;
  r->heap = NULL;
  r->heap_ts = NULL;
  r->pid_ts = NULL;
  r->pid_ts_cap = 0;
  r->rings = 0;
  r->size = 0;
}

unsigned ks_ring_claimed(const ks_ring_reader *r) {
  unsigned k, n = 0;

  for (k = 0; r->h != NULL && k + 1 < r->rings; k++)
    n += atomic_load_explicit(&r->cur[k].r->owner, memory_order_relaxed) != 0;
  return n;
}

static int put_name(ks_ring_reader *r, uint64_t word, const unsigned char *s, size_t n, int utf8) {
  uint32_t off;

  if (ks_itab_get(&r->atoms, &word, 8, ks_hash(&word, 8)) != KS_NONE)
    return KS_OK;
  if (r->names_len + 3 + n > r->names_cap) {
    size_t cap = r->names_cap ? r->names_cap * 2 : 4096;
    unsigned char *p;
    while (cap < r->names_len + 3 + n)
      cap *= 2;
    if (cap > UINT32_MAX || (p = realloc(r->names, cap)) == NULL)
      return KS_ENOMEM;
    r->names = p;
    r->names_cap = cap;
  }
  off = (uint32_t)r->names_len;
  r->names[off] = (unsigned char)(n >> 8);
  r->names[off + 1] = (unsigned char)n;
  r->names[off + 2] = (unsigned char)utf8;
  memcpy(r->names + off + 3, s, n);
  r->names_len += 3 + n;
  return ks_itab_put(&r->atoms, &word, 8, ks_hash(&word, 8), off, NULL);
}

static int atom_of(const ks_ring_reader *r, uint64_t word, ks_atom *a) {
  uint32_t off = ks_itab_get(&r->atoms, &word, 8, ks_hash(&word, 8));

  if (off == KS_NONE)
    return KS_EUNKNOWN;
  a->n = ((size_t)r->names[off] << 8) | r->names[off + 1];
  a->utf8 = r->names[off + 2];
  a->s = r->names + off + 3;
  return KS_OK;
}

/* The sink's MFA id of (M, F, Arity) words: the cache's slot, else the table
 * (and the slot is set). */
static int mfa_id(ks_ring_reader *r, ks_intern *in, uint64_t m, uint64_t f, uint8_t arity,
                  uint32_t *id) {
  uint32_t k = (uint32_t)(((m * 0x9e3779b97f4a7c15ull) ^ (f * 0xc2b2ae3d27d4eb4full) ^ arity) >>
                          (64 - KS_RING_MFA_CACHE_BITS));
  ks_ring_mfa_slot *c = &r->mfa_cache[k];
  unsigned char key[17];
  uint64_t h;
  ks_atom am, af;
  int rc;

  if (c->id != KS_NONE && c->m == m && c->f == f && c->arity == arity) {
    *id = c->id;
    return KS_OK;
  }
  memcpy(key, &m, 8);
  memcpy(key + 8, &f, 8);
  key[16] = arity;
  h = ks_hash(key, sizeof(key));
  if ((*id = ks_itab_get(&r->mfas, key, sizeof(key), h)) == KS_NONE) {
    if (atom_of(r, m, &am) != KS_OK || atom_of(r, f, &af) != KS_OK)
      return KS_EUNKNOWN;
    if ((rc = ks_intern_mfa(in, &am, &af, arity, id)) != KS_OK ||
        (rc = ks_itab_put(&r->mfas, key, sizeof(key), h, *id, NULL)) != KS_OK)
      return rc;
  }
  c->m = m;
  c->f = f;
  c->arity = arity;
  c->id = *id;
  return KS_OK;
}

static int pid_id(ks_ring_reader *r, uint64_t word, uint32_t *id) {
  *id = ks_itab_get(&r->pids, &word, 8, ks_hash(&word, 8));
  return *id == KS_NONE ? KS_EUNKNOWN : KS_OK;
}

int ks_ring_forget_pids(ks_ring_reader *r, const uint8_t *dead, uint32_t n) {
  ks_dead_ids d = {dead, n};
  uint32_t id;

  for (id = 0; id < n && id < r->pid_ts_cap; id++)
    if (dead[id])
      r->pid_ts[id] = INT64_MIN;   /* the id's next process starts afresh */
  if (r->pids.slots == NULL)
    return KS_OK;
  return ks_itab_filter(&r->pids, ks_keep_live_id, &d);
}

/* The kinds an event record may carry (what the NIF writes one for). */
static int event_kind_ok(unsigned kind) {
  switch (kind) {
  case KS_EV_RETURN_FROM: case KS_EV_EXCEPTION_FROM:
  case KS_EV_IN: case KS_EV_OUT: case KS_EV_IN_EXITING: case KS_EV_OUT_EXITING:
  case KS_EV_OUT_EXITED:
  case KS_EV_SPAWN: case KS_EV_SPAWNED: case KS_EV_EXIT:
  case KS_EV_REGISTER: case KS_EV_UNREGISTER:
  case KS_EV_GC_MINOR_START: case KS_EV_GC_MINOR_END:
  case KS_EV_GC_MAJOR_START: case KS_EV_GC_MAJOR_END:
    return 1;
  default:
    return 0;
  }
}

/* A registered name as the port tracer would send it: the atom's ETF bytes, interned. */
static int name_id(ks_ring_reader *r, ks_intern *in, uint64_t word, uint32_t *id) {
  unsigned char etf[3 + 255 * 4];
  ks_slice raw;
  ks_atom a;
  int rc;

  if ((rc = atom_of(r, word, &a)) != KS_OK)
    return rc;
  if (a.n > 255 * 4)
    return KS_EBADTERM;
  etf[0] = 118;   /* ATOM_UTF8_EXT; a Latin-1 name is turned into UTF-8 below */
  if (a.utf8) {
    memcpy(etf + 3, a.s, a.n);
    raw.n = 3 + a.n;
  } else {
    size_t k, n = 0;
    for (k = 0; k < a.n; k++) {
      unsigned char ch = a.s[k];
      if (ch < 0x80) {
        etf[3 + n++] = ch;
      } else {
        etf[3 + n++] = (unsigned char)(0xc0 | ch >> 6);
        etf[3 + n++] = (unsigned char)(0x80 | (ch & 0x3f));
      }
    }
    raw.n = 3 + n;
  }
  etf[1] = (unsigned char)((raw.n - 3) >> 8);
  etf[2] = (unsigned char)(raw.n - 3);
  raw.p = etf;
  return ks_intern_term(in, raw, id);
}

/* An event record into d: the fields its flags say are there. */
static int read_event(ks_ring_reader *r, ks_intern *in, const unsigned char *rec, size_t len,
                      unsigned flags, ks_decoded *d) {
  ks_rec_event e;
  int rc;

  if (len < sizeof(e))
    return KS_EBADTERM;
  memcpy(&e, rec, sizeof(e));
  if (!event_kind_ok(e.kind) || ((flags & KS_RECF_OTHER) && (flags & KS_RECF_NAME)))
    return KS_EBADTERM;
  d->ev.kind = e.kind;
  d->ev.ts = e.ts;
  if ((rc = pid_id(r, e.pid, &d->ev.pid)) != KS_OK)
    return rc;
  if ((flags & KS_RECF_MFA) && (rc = mfa_id(r, in, e.m, e.f, e.arity, &d->ev.mfa)) != KS_OK)
    return rc;
  if ((flags & KS_RECF_OTHER) && (rc = pid_id(r, e.other, &d->ev.other)) != KS_OK)
    return rc;
  if ((flags & KS_RECF_NAME) && (rc = name_id(r, in, e.other, &d->ev.name)) != KS_OK)
    return rc;
  return KS_OK;
}

/* A definition or an event. Returns KS_OK, or an error for the counters. */
int ks_ring_read_record(ks_ring_reader *r, ks_intern *in, const unsigned char *rec, size_t len,
                        unsigned type, unsigned flags, ks_ring_event_fn fn, void *ctx) {
  ks_decoded d;
  int rc;

  if (type == KS_REC_ATOM) {
    ks_rec_atom a;
    if (len < sizeof(a))
      return KS_EBADTERM;
    memcpy(&a, rec, sizeof(a));
    if (a.len == 0 || a.len > 255 * 4 || sizeof(a) + a.len > len)
      return KS_EBADTERM;
    return put_name(r, a.atom, rec + sizeof(a), a.len, a.utf8 != 0);
  }
  if (type == KS_REC_PID) {
    ks_rec_pid p;
    ks_slice raw;
    uint32_t id;
    if (len < sizeof(p))
      return KS_EBADTERM;
    memcpy(&p, rec, sizeof(p));
    if (p.len == 0 || sizeof(p) + p.len > len)
      return KS_EBADTERM;
    if (ks_itab_get(&r->pids, &p.pid, 8, ks_hash(&p.pid, 8)) != KS_NONE)
      return KS_OK;
    raw.p = rec + sizeof(p);
    raw.n = p.len;
    if ((rc = ks_intern_pid(in, raw, &id)) != KS_OK)
      return rc;
    return ks_itab_put(&r->pids, &p.pid, 8, ks_hash(&p.pid, 8), id, NULL);
  }
  ks_decoded_clear(&d);
  d.ev.flags = KS_EVF_TS;
  if (type == KS_REC_CALL) {
    ks_rec_call c;
    if (len < sizeof(c))
      return KS_EBADTERM;
    memcpy(&c, rec, sizeof(c));
    if (sizeof(c) + (size_t)c.label_len + c.payload_len > len ||
        (!(flags & KS_RECF_LABEL) && c.label_len != 0) ||
        (!(flags & KS_RECF_PAYLOAD) && c.payload_len != 0) ||
        ((flags & KS_RECF_LABEL) && c.label_len == 0))
      return KS_EBADTERM;
    d.ev.kind = KS_EV_CALL;
    d.ev.ts = c.ts;
    if ((rc = pid_id(r, c.pid, &d.ev.pid)) != KS_OK ||
        (rc = mfa_id(r, in, c.m, c.f, c.arity, &d.ev.mfa)) != KS_OK)
      return rc;
    if (flags & KS_RECF_CALLER) {
      if ((rc = mfa_id(r, in, c.caller_m, c.caller_f, c.caller_arity, &d.ev.caller)) != KS_OK)
        return rc;
      d.ev.flags |= KS_EVF_CALLER;
    }
    if (flags & KS_RECF_TOKEN)
      d.ev.flags |= KS_EVF_TOKEN;
    if (flags & KS_RECF_LABEL) {
      d.label.p = rec + sizeof(c);
      d.label.n = c.label_len;
      d.ev.flags |= KS_EVF_LABEL;
    }
    if (flags & KS_RECF_PAYLOAD) {
      d.payload.p = rec + sizeof(c) + c.label_len;
      d.payload.n = c.payload_len;
    }
  } else if (type == KS_REC_RETURN_TO || type == KS_REC_CALL_MFA) {
    ks_rec_mfa t;
    if (len < sizeof(t) || (type == KS_REC_CALL_MFA && (flags & ~KS_RECF_META) != 0))
      return KS_EBADTERM;
    memcpy(&t, rec, sizeof(t));
    d.ev.kind = type == KS_REC_CALL_MFA ? KS_EV_CALL : KS_EV_RETURN_TO;
    d.ev.ts = t.ts;
    if ((rc = pid_id(r, t.pid, &d.ev.pid)) != KS_OK)
      return rc;
    if ((type == KS_REC_CALL_MFA || (flags & KS_RECF_MFA)) &&
        (rc = mfa_id(r, in, t.m, t.f, t.arity, &d.ev.mfa)) != KS_OK)
      return rc;
  } else if (type == KS_REC_EVENT) {
    if ((rc = read_event(r, in, rec, len, flags, &d)) != KS_OK)
      return rc;
  } else {
    return KS_EBADTERM;
  }
  if (flags & KS_RECF_META)
    d.ev.flags |= KS_EVF_META;
  fn(ctx, &d);
  return KS_OK;
}

void ks_ring_count(ks_ring_reader *r, int rc) {
  if (rc == KS_EUNKNOWN)
    r->unresolved++;
  else if (rc == KS_EFULL)
    r->full++;   /* an intern table at its cap: the event is lost, and counted there too */
  else if (rc != KS_OK)
    r->bad++;
}

size_t ks_ring_replay(ks_ring_reader *r, ks_intern *in, const unsigned char *data, size_t n,
                      ks_ring_event_fn fn, void *ctx) {
  size_t at = 0, count_read = 0;

  if (r->atoms.slots == NULL && init_maps(r) != KS_OK)
    return 0;
  while (n - at >= 8) {
    uint64_t w0;
    size_t len;
    memcpy(&w0, data + at, 8);
    len = (size_t)(w0 >> 32) & 0xffff;
    if (len < 8 || (len & 7) != 0 || len > n - at) {
      r->bad++;
      break;
    }
    ks_ring_count(r, ks_ring_read_record(r, in, data + at, len, (unsigned)(w0 >> 48) & 0xff,
                                         (unsigned)(w0 >> 56), fn, ctx));
    at += len;
    r->records++;
    count_read++;
  }
  return count_read;
}
