/* resolve.c: samples into stacks (ks_sample.h says what a stack holds):
 * records are decoded as they are drained, then resolved together once the
 * drain has read the map's new lines and the processes' pids.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ks_sample.h"

/* Words read per sample while calibrating, else one. */
#define MAX_READS 65536

void ks_sampler_init(ks_sampler *s, ks_intern *in) {
  memset(s, 0, sizeof(*s));
  s->in = in;
  s->ospid = -1;
  ks_pmap_init(&s->map);
  ks_elf_init(&s->elf, 0);
  s->from = INT64_MIN;
  s->unknown = KS_NONE;
  s->nregs = KS_NREGS;
}

void ks_sampler_free(ks_sampler *s) {
  ks_intern *in = s->in;

  if (s->rec.f != NULL)
    ks_srec_close(&s->rec);
  ks_pevents_free(&s->pe);
  ks_pmap_free(&s->map);
  ks_elf_free(&s->elf);
  free(s->only);
  free(s->pend);
  free(s->ips);
  free(s->frames);
  free(s->native);
  free(s->reads.addr);
  free(s->reads.word);
  free(s->reads.ok);
  ks_sampler_init(s, in);
}

/* ---- names ---- */

static uint32_t intern(ks_sampler *s, const char *m, const char *f, uint32_t arity) {
  ks_atom am = {(const unsigned char *)m, strlen(m), 1};
  ks_atom af = {(const unsigned char *)f, strlen(f), 1};
  uint32_t id;

  if (ks_intern_mfa(s->in, &am, &af, arity, &id) == KS_OK)
    return id;
  am.utf8 = af.utf8 = 0;   /* not UTF-8: taken byte by byte, as Latin-1 */
  return ks_intern_mfa(s->in, &am, &af, arity, &id) == KS_OK ? id : KS_NONE;
}

uint32_t ks_sampler_native(ks_sampler *s, const char *module, const char *name) {
  char f[KS_NATIVE_MAX + 1];
  uint32_t id;
  size_t n = strlen(name);

  /* A C++ name may be longer than an atom may be (255 characters): its head
   * and a `..' (the top table's rows are atoms). */
  if (n > KS_NATIVE_MAX)
    snprintf(f, sizeof(f), "%.*s..", KS_NATIVE_MAX - 2, name);
  else
    memcpy(f, name, n + 1);
  if ((id = intern(s, module, f, 0)) == KS_NONE)
    return KS_NONE;
  if (id >= s->capnative &&
      ks_grow(&s->native, &s->capnative, id, 1024, sizeof(*s->native)) != KS_OK)
    return KS_NONE;
  s->native[id] = KS_NAT_NATIVE;
  return id;
}

uint32_t ks_sampler_name(void *ctx, const ks_pname *name) {
  ks_sampler *s = ctx;
  uint32_t id;

  switch (name->kind) {
  case KS_PNAME_ERLANG:
    id = intern(s, name->m, name->f, name->arity);
    /* The JIT's stubs a process's stack ends in (normal_exit is where its
     * first function returns to): no caller, left off the root. */
    if (id != KS_NONE && strcmp(name->m, "erts_beamasm") == 0 &&
        (id < s->capnative || ks_grow(&s->native, &s->capnative, id, 1024, 1) == KS_OK))
      s->native[id] = KS_NAT_BOTTOM;
    return id;
  case KS_PNAME_NATIVE:
    return ks_sampler_native(s, KS_MOD_JIT, name->native);
  default:
    return ks_sampler_native(s, KS_MOD_C, name->native);
  }
}

static int is_native(const ks_sampler *s, uint32_t mfa) {
  return mfa < s->capnative && s->native[mfa] == KS_NAT_NATIVE;
}

static int is_bottom(const ks_sampler *s, uint32_t mfa) {
  return mfa < s->capnative && s->native[mfa] == KS_NAT_BOTTOM;
}

/* ---- records ---- */

static int push_pending(ks_sampler *s, const ks_psample *p, int kind) {
  ks_spend *e;

  if (ks_grow(&s->pend, &s->cappend, s->npend, 64, sizeof(*s->pend)) != KS_OK ||
      (s->nips + p->nips >= s->capips &&
       ks_grow(&s->ips, &s->capips, s->nips + p->nips, 4096, sizeof(*s->ips)) != KS_OK))
    return KS_ENOMEM;
  e = &s->pend[s->npend++];
  memset(e, 0, sizeof(*e));
  e->time = (int64_t)p->time;
  e->r13 = p->r13;
  e->has_r13 = p->abi != 0 && p->r13 != 0;
  e->at = s->nips;
  e->nips = p->nips;
  e->kind = (uint32_t)kind;
  e->truncated = s->max_stack > 0 && p->nips >= s->max_stack;
  e->pid = KS_NONE;
  memcpy(s->ips + s->nips, p->ips, (size_t)p->nips * sizeof(*s->ips));
  s->nips += p->nips;
  return KS_OK;
}

void ks_sampler_record(ks_sampler *s, int kind, const unsigned char *rec, size_t len) {
  ks_perf_header h;
  uint64_t lost;

  if (ks_perf_header_read(rec, len, &h) != KS_OK) {
    s->k.bad++;
    return;
  }
  if (h.type == KS_PERF_RECORD_LOST || h.type == KS_PERF_RECORD_LOST_SAMPLES) {
    if (ks_perf_decode_lost(rec, h.size, &lost) == KS_OK)
      s->k.lost += lost;
    else
      s->k.bad++;
    return;
  }
  if (h.type != KS_PERF_RECORD_SAMPLE)
    return;   /* throttling and the like: nothing to count */
  if (ks_perf_decode_sample(rec, h.size, s->nregs, &s->scratch) != KS_OK ||
      s->scratch.nips == 0) {
    s->k.bad++;
    return;
  }
  if ((int64_t)s->scratch.time < s->from)
    return;   /* before the window (the calibration's) */
  s->k.read++;
  if (push_pending(s, &s->scratch, kind) != KS_OK)
    s->k.bad++;
}

/* ---- pids ---- */

static uint64_t cp_hash(uint64_t v) {
  return (v * 0x9e3779b97f4a7c15ull) >> 52;   /* 12 bits: KS_CP_SET slots */
}

static void cp_add(ks_cpset *c, uint64_t v) {
  uint32_t i = (uint32_t)cp_hash(v), k;

  for (k = 0; k < KS_CP_SET; k++, i = (i + 1) & (KS_CP_SET - 1)) {
    if (c->v[i] == v)
      return;
    if (c->v[i] == 0)
      break;
  }
  if (c->n >= KS_CP_SET / 2) {   /* full enough: forget them all, learn again */
    memset(c->v, 0, sizeof(c->v));
    c->n = 0;
    i = (uint32_t)cp_hash(v);
  }
  c->v[i] = v;
  c->n++;
}

static int cp_has(const ks_cpset *c, uint64_t v) {
  uint32_t i = (uint32_t)cp_hash(v), k;

  for (k = 0; k < KS_CP_SET && c->v[i] != 0; k++, i = (i + 1) & (KS_CP_SET - 1))
    if (c->v[i] == v)
      return 1;
  return 0;
}

static int add_read(ks_sampler *s, uint64_t addr) {
  ks_sreads *r = &s->reads;

  if (r->n >= MAX_READS ||
      (r->n >= r->cap && (ks_grow(&r->addr, &r->cap, r->n, 1024, sizeof(*r->addr)) != KS_OK)))
    return KS_EFULL;
  if (r->n >= r->capw) {
    uint32_t cw = r->capw;
    if (ks_grow(&r->word, &r->capw, r->n, 1024, sizeof(*r->word)) != KS_OK ||
        ks_grow(&r->ok, &cw, r->n, 1024, sizeof(*r->ok)) != KS_OK)
      return KS_EFULL;
  }
  r->addr[r->n++] = addr;
  return KS_OK;
}

uint32_t ks_sampler_pid(ks_sampler *s, uint32_t num, uint32_t ser) {
  unsigned char raw[sizeof(s->pid_tmpl)];
  ks_slice sl;
  uint32_t id;
  size_t at;

  if (s->pid_tmpl_n < 13)
    return KS_NONE;
  memcpy(raw, s->pid_tmpl, s->pid_tmpl_n);
  /* NEW_PID_EXT ends ID, Serial, Creation (4 bytes each); PID_EXT with a 1-byte creation. */
  at = raw[0] == 88 ? s->pid_tmpl_n - 12 : s->pid_tmpl_n - 9;
  ks_put_be32(raw + at, num);
  ks_put_be32(raw + at + 4, ser);
  sl.p = raw;
  sl.n = s->pid_tmpl_n;
  return ks_intern_pid(s->in, sl, &id) == KS_OK ? id : KS_NONE;
}

/* The pid id of a process's word: its number and serial as the layout says. */
static uint32_t pid_of_word(ks_sampler *s, uint64_t w) {
  const ks_playout *l = &s->lay;
  uint64_t num, ser;

  if ((w & 0xf) != 0x3)
    return KS_NONE;
  num = (w >> l->shift) & ((1ull << l->num_bits) - 1);
  ser = l->shift + l->num_bits < 64 ? w >> (l->shift + l->num_bits) : 0;
  if (l->ser_bits < 64)
    ser &= (1ull << l->ser_bits) - 1;
  return ser > UINT32_MAX ? KS_NONE : ks_sampler_pid(s, (uint32_t)num, (uint32_t)ser);
}

/* Whether the sample's chain holds an Erlang function (its leaf aside): C
 * code called from JIT code, which keeps r13 (callee-saved) as it was. */
static int called_from_erlang(ks_sampler *s, const ks_spend *e) {
  uint32_t k, f;

  for (k = 1; k < e->nips; k++)
    if ((f = ks_pmap_lookup(&s->map, s->ips[e->at + k], e->time)) != KS_NONE && !is_native(s, f))
      return 1;
  return 0;
}

/* Which samples' r13 to trust, and the words to read for them: JIT code's;
 * C code's called from Erlang code, or with an r13 JIT code had. */
static void plan_reads(ks_sampler *s) {
  uint32_t k, w;

  s->reads.n = 0;
  for (k = 0; k < s->npend; k++) {
    ks_spend *e = &s->pend[k];
    uint32_t leaf = ks_pmap_lookup(&s->map, s->ips[e->at], e->time);
    e->jit = leaf != KS_NONE;
    e->read_at = KS_NONE;
    if (!e->has_r13)
      continue;
    if (e->jit)
      cp_add(&s->cps, e->r13);
    else if (!cp_has(&s->cps, e->r13) && !called_from_erlang(s, e))
      continue;
    if (s->calibrating) {
      if (!e->jit || s->reads.n + KS_CAL_WORDS > MAX_READS)
        continue;
      e->read_at = s->reads.n;
      for (w = 0; w < KS_CAL_WORDS; w++)
        add_read(s, e->r13 + 8 * w);
    } else if (s->lay.known && add_read(s, e->r13 + s->lay.offset) == KS_OK) {
      e->read_at = s->reads.n - 1;
    }
  }
}

static void read_pids(ks_sampler *s) {
  ks_sreads *r = &s->reads;
  uint32_t k;

  if (r->n == 0 || s->read_words == NULL)
    return;
  if (s->read_words(s->read_ctx, r->addr, r->n, r->word, r->ok) < 0)
    memset(r->ok, 0, r->n);
  for (k = 0; k < s->npend; k++) {
    ks_spend *e = &s->pend[k];
    if (e->read_at == KS_NONE)
      continue;
    if (s->calibrating) {
      ks_calib_sample(&s->cal, &s->lay, r->word + e->read_at, r->ok + e->read_at);
      continue;
    }
    if (r->ok[e->read_at])
      e->pid = pid_of_word(s, r->word[e->read_at]);
    if (e->pid == KS_NONE && e->jit)
      s->k.pid_unreadable++;
  }
}

/* ---- stacks ---- */

static int wanted(const ks_sampler *s, uint32_t pid) {
  uint32_t lo = 0, hi = s->nonly;

  if (s->only == NULL)
    return 1;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (s->only[mid] == pid)
      return 1;
    if (s->only[mid] < pid)
      lo = mid + 1;
    else
      hi = mid;
  }
  return 0;
}

/* The frame of an address: the map's at the sample's time, else the ELF's. */
static uint32_t frame_at(ks_sampler *s, uint64_t ip, int64_t t) {
  uint32_t f = ks_pmap_lookup(&s->map, ip, t);

  return f != KS_NONE ? f : ks_elf_lookup(&s->elf, ip, ks_sampler_name, s);
}

/* Sample e's frames into s->frames, outermost first: its Erlang frames, then
 * its leaf when that is no Erlang code. Returns how many; flags into *flags. */
static uint32_t frames_of(ks_sampler *s, const ks_spend *e, unsigned *flags) {
  const uint64_t *ips = s->ips + e->at;
  uint32_t n = 0, k, f, leaf;

  if (e->nips + 1 > s->capframes &&
      ks_grow(&s->frames, &s->capframes, e->nips + 1, 256, sizeof(*s->frames)) != KS_OK)
    return 0;
  for (k = e->nips; k-- > 1;) {
    f = ks_pmap_lookup(&s->map, ips[k], e->time);
    if (f != KS_NONE && !is_native(s, f) && !(n == 0 && is_bottom(s, f)))
      s->frames[n++] = f;
  }
  leaf = frame_at(s, ips[0], e->time);
  if (leaf == KS_NONE) {
    s->k.unnamed++;
    leaf = s->unknown;
  }
  if (n == 0 && (leaf == KS_NONE || is_native(s, leaf)))
    *flags |= KS_SS_C_ONLY;   /* no Erlang frame: its leaf alone */
  if (leaf != KS_NONE)
    s->frames[n++] = leaf;
  return n;
}

static void emit(ks_sampler *s, const ks_spend *e) {
  ks_sstack st;

  st.flags = (e->truncated ? KS_SS_TRUNCATED : 0) | (e->jit ? KS_SS_JIT_LEAF : 0);
  st.pid = e->pid;
  st.thread_kind = (int)e->kind;
  st.time = e->time;
  st.n = frames_of(s, e, &st.flags);
  st.mfas = s->frames;
  if (!wanted(s, e->pid)) {
    s->k.filtered++;
    return;
  }
  if (s->admit != NULL && !s->admit(s->admit_ctx, e->time)) {
    s->k.limited++;
    return;
  }
  s->k.samples++;
  s->k.by_kind[e->kind < KS_THR_KINDS ? e->kind : KS_THR_SCHED]++;
  s->k.attributed += e->pid != KS_NONE;
  s->k.truncated += e->truncated;
  if (st.flags & KS_SS_C_ONLY) {
    s->k.c_only++;
    s->k.c_only_known += e->pid != KS_NONE;
  } else {
    s->k.erlang++;
  }
  if (s->emit != NULL && st.n > 0)
    s->emit(s->emit_ctx, &st);
}

void ks_sampler_resolve(ks_sampler *s) {
  uint32_t k;

  if (s->unknown == KS_NONE)
    s->unknown = ks_sampler_native(s, KS_MOD_UNKNOWN, "");
  plan_reads(s);
  read_pids(s);
  if (s->calibrating || !s->windowed)
    s->k.calibration += s->npend;
  else
    for (k = 0; k < s->npend; k++)
      emit(s, &s->pend[k]);
  s->npend = 0;
  s->nips = 0;
}
