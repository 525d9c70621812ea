/* test_sample.c: the sampler's parts on their own (port/sample/): perf
 * records decoded, a ring read across its end, the perf map's names and
 * their times (a reload that reuses addresses), ELF symbols of this very
 * program, the pid layout calibrated from beacons, and whole samples
 * resolved against a made-up VM. The commands through the sink, a live
 * session and recorded sessions of real VMs: test_sample_sink.c. */
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"
#include "sample/ks_sample.h"

/* ---- records as the kernel writes them ---- */

typedef struct recbuf {
  unsigned char b[16384];
  size_t n;
} recbuf;

static void put64(recbuf *r, uint64_t v) {
  memcpy(r->b + r->n, &v, 8);
  r->n += 8;
}

/* A sample record: ip is ips[0]; chain: PERF_CONTEXT_USER then ips. */
static size_t sample_rec(recbuf *r, uint32_t tid, uint64_t time, const uint64_t *ips,
                         uint32_t nips, uint64_t r13) {
  size_t at = r->n;
  uint32_t k, v;
  uint16_t size;

  put64(r, 0);   /* the header, below */
  put64(r, ips[0]);
  v = 1000;
  memcpy(r->b + r->n, &v, 4);
  memcpy(r->b + r->n + 4, &tid, 4);
  r->n += 8;
  put64(r, time);
  put64(r, nips + 1);
  put64(r, (uint64_t)-512);   /* PERF_CONTEXT_USER */
  for (k = 0; k < nips; k++)
    put64(r, ips[k]);
  put64(r, r13 != 0 ? 2 : 0);   /* PERF_SAMPLE_REGS_ABI_64, or none */
  if (r13 != 0)
    put64(r, r13);
  v = KS_PERF_RECORD_SAMPLE;
  size = (uint16_t)(r->n - at);
  memcpy(r->b + at, &v, 4);
  memset(r->b + at + 4, 0, 2);
  memcpy(r->b + at + 6, &size, 2);
  return r->n - at;
}

static void lost_rec(recbuf *r, uint64_t lost) {
  uint32_t type = KS_PERF_RECORD_LOST;
  uint16_t size = 24;

  memcpy(r->b + r->n, &type, 4);
  memset(r->b + r->n + 4, 0, 2);
  memcpy(r->b + r->n + 6, &size, 2);
  r->n += 8;
  put64(r, 7);   /* the event's id */
  put64(r, lost);
}

START_TEST(test_decode_sample) {
  static ks_psample s;
  uint64_t ips[3] = {0x1010, 0x2020, 0x3030};
  recbuf r = {.n = 0};
  ks_perf_header h;
  size_t len = sample_rec(&r, 42, 123456789, ips, 3, 0xabc0);
  uint64_t lost;

  ck_assert_int_eq(ks_perf_header_read(r.b, r.n, &h), KS_OK);
  ck_assert_uint_eq(h.type, KS_PERF_RECORD_SAMPLE);
  ck_assert_uint_eq(h.size, len);
  ck_assert_int_eq(ks_perf_decode_sample(r.b, len, 1, &s), KS_OK);
  ck_assert_uint_eq(s.tid, 42);
  ck_assert_uint_eq(s.time, 123456789);
  ck_assert_uint_eq(s.chain_nr, 4);   /* the marker counted, not kept */
  ck_assert_uint_eq(s.nips, 3);
  ck_assert_uint_eq(s.ips[0], 0x1010);
  ck_assert_uint_eq(s.ips[2], 0x3030);
  ck_assert_uint_eq(s.r13, 0xabc0);
  /* Every cut of the record is refused, never read past. */
  for (size_t cut = 8; cut < len; cut += 8)
    ck_assert_int_eq(ks_perf_decode_sample(r.b, cut, 1, &s), KS_EBADTERM);
  /* A chain longer than the record says it is. */
  r.b[8 + 24] = 200;
  ck_assert_int_eq(ks_perf_decode_sample(r.b, len, 1, &s), KS_EBADTERM);
  /* A header whose size is no multiple of 8, or past the bytes. */
  r.b[6] = 13;
  ck_assert_int_eq(ks_perf_header_read(r.b, r.n, &h), KS_EBADTERM);
  r.b[6] = 0;
  r.b[7] = 1;
  ck_assert_int_eq(ks_perf_header_read(r.b, 64, &h), KS_EBADTERM);
  r.n = 0;
  lost_rec(&r, 99);
  ck_assert_int_eq(ks_perf_decode_lost(r.b, r.n, &lost), KS_OK);
  ck_assert_uint_eq(lost, 99);
}
END_TEST

/* ---- the ring ---- */

typedef struct seen {
  size_t len[64];
  uint64_t first[64];
  int n;
} seen;

static void on_rec(void *ctx, const unsigned char *rec, size_t len) {
  seen *s = ctx;
  uint64_t v;

  ck_assert_int_lt(s->n, 64);
  memcpy(&v, rec + 8, 8);
  s->len[s->n] = len;
  s->first[s->n++] = v;
}

START_TEST(test_ring_wraps) {
  unsigned char data[512];
  uint64_t head = 0, tail = 0, pos = 0;
  ks_pring ring = {&head, &tail, data, sizeof(data), NULL, 0, 0};
  uint64_t ips[4] = {1, 2, 3, 4};
  seen got = {.n = 0};
  recbuf r;
  int k, round;

  /* Rounds of 3 records (104 bytes each) written at the head, wrapping the
   * 512-byte ring, then read: each comes out whole and in order. */
  for (round = 0; round < 6; round++) {
    for (k = 0; k < 3; k++) {
      size_t len, b;
      r.n = 0;
      ips[0] = (uint64_t)(round * 3 + k + 100);
      len = sample_rec(&r, 1, 5, ips, 4, 0);
      for (b = 0; b < len; b++)
        data[(pos + b) % sizeof(data)] = r.b[b];
      pos += len;
    }
    head = pos;
    ck_assert_uint_eq(ks_pring_drain(&ring, on_rec, &got), 3 * r.n);
    ck_assert_uint_eq(tail, head);
  }
  ck_assert_int_eq(got.n, 18);
  for (k = 0; k < 18; k++) {
    ck_assert_uint_eq(got.first[k], (uint64_t)k + 100);
    ck_assert_uint_eq(got.len[k], r.n);
  }
  ck_assert_uint_eq(ring.bad, 0);
  /* A record whose size is impossible: the rest of what was written is skipped. */
  memset(data + (pos % sizeof(data)), 0, 8);
  data[(pos % sizeof(data)) + 6] = 12;
  head = pos + 64;
  ks_pring_drain(&ring, on_rec, &got);
  ck_assert_uint_eq(ring.bad, 1);
  ck_assert_uint_eq(tail, head);
  ck_assert_int_eq(got.n, 18);
  ks_pring_free(&ring);
}
END_TEST

/* ---- names ---- */

START_TEST(test_map_names) {
  static ks_pname p;

  ck_assert_int_eq(ks_pmap_parse_name("$lists:seq/2", 12, &p), KS_OK);
  ck_assert_int_eq(p.kind, KS_PNAME_ERLANG);
  ck_assert_str_eq(p.m, "lists");
  ck_assert_str_eq(p.f, "seq");
  ck_assert_uint_eq(p.arity, 2);
#define NAME(s) ks_pmap_parse_name(s, strlen(s), &p)
  ck_assert_int_eq(NAME("$erl_init:'-restart/0-fun-0-'/0-CodeInfoPrologue"), KS_OK);
  ck_assert_int_eq(p.kind, KS_PNAME_ERLANG);
  ck_assert_str_eq(p.f, "-restart/0-fun-0-");
  ck_assert_uint_eq(p.arity, 0);
  ck_assert_int_eq(NAME("$'Elixir.Enum':'map'/2"), KS_OK);
  ck_assert_str_eq(p.m, "Elixir.Enum");
  ck_assert_str_eq(p.f, "map");
  ck_assert_int_eq(NAME("$m:'it''s\\'\\\\ \\n'/1"), KS_OK);   /* a quote ends the atom */
  ck_assert_int_eq(p.kind, KS_PNAME_NATIVE);
  ck_assert_int_eq(NAME("$m:'it\\'s \\\\ \\n\\101'/1"), KS_OK);
  ck_assert_int_eq(p.kind, KS_PNAME_ERLANG);
  ck_assert_str_eq(p.f, "it's \\ \nA");
  ck_assert_int_eq(NAME("$m:'\xc3\xa9t\xc3\xa9'/3"), KS_OK);   /* UTF-8 as it is */
  ck_assert_str_eq(p.f, "\xc3\xa9t\xc3\xa9");
  ck_assert_int_eq(NAME("$global::call_bif_shared"), KS_OK);
  ck_assert_int_eq(p.kind, KS_PNAME_NATIVE);
  ck_assert_str_eq(p.native, "global::call_bif_shared");
  ck_assert_int_eq(NAME("$lists::codeHeader"), KS_OK);
  ck_assert_int_eq(p.kind, KS_PNAME_NATIVE);
  ck_assert_int_eq(NAME("$m:f/256"), KS_OK);   /* no such arity: not an MFA */
  ck_assert_int_eq(p.kind, KS_PNAME_NATIVE);
  ck_assert_int_eq(NAME("$m:f/2-Other"), KS_OK);
  ck_assert_int_eq(p.kind, KS_PNAME_NATIVE);
  ck_assert_int_eq(NAME("$m:'open/1"), KS_OK);
  ck_assert_int_eq(p.kind, KS_PNAME_NATIVE);
#undef NAME
}
END_TEST

/* Names kept as "M:F/A" or "native" strings, frame = index. */
typedef struct names {
  char v[64][128];
  uint32_t n;
} names;

static uint32_t name_cb(void *ctx, const ks_pname *p) {
  names *t = ctx;

  ck_assert_uint_lt(t->n, 64);
  if (p->kind == KS_PNAME_ERLANG)
    snprintf(t->v[t->n], sizeof(t->v[0]), "%.60s:%.60s/%u", p->m, p->f, p->arity);
  else
    snprintf(t->v[t->n], sizeof(t->v[0]), "%s%.120s", p->kind == KS_PNAME_C ? "C " : "", p->native);
  return t->n++;
}

static const char *at(ks_pmap *m, const names *t, uint64_t addr, int64_t ts) {
  uint32_t f = ks_pmap_lookup(m, addr, ts);

  return f == KS_NONE ? "-" : t->v[f];
}

static void feed(ks_pmap *m, names *t, const char *text, int64_t now) {
  ks_pmap_feed(m, text, strlen(text), name_cb, t);
  ck_assert_int_eq(ks_pmap_commit(m, now), KS_OK);
}

START_TEST(test_map_lines) {
  static names t;
  ks_pmap m;
  const char *text = "0x1000 100 $a:f/0\n0x1100 80 $a:g/1\n1180 80 $global::x\n"
                     "zz 10 $a:h/0\n0x2000 0 $a:empty/0\n";
  size_t k, len = strlen(text);

  t.n = 0;
  ks_pmap_init(&m);
  /* The bytes split anywhere, a line across two feeds. */
  for (k = 0; k < len; k += 7)
    ks_pmap_feed(&m, text + k, len - k < 7 ? len - k : 7, name_cb, &t);
  ck_assert_int_eq(ks_pmap_commit(&m, 100), KS_OK);
  ck_assert_uint_eq(m.lines, 5);
  ck_assert_uint_eq(m.bad_lines, 2);   /* no address; no size */
  ck_assert_str_eq(at(&m, &t, 0x1000, 0), "a:f/0");
  ck_assert_str_eq(at(&m, &t, 0x10ff, 0), "a:f/0");
  ck_assert_str_eq(at(&m, &t, 0x1100, 0), "a:g/1");
  ck_assert_str_eq(at(&m, &t, 0x11ff, 0), "global::x");
  ck_assert_str_eq(at(&m, &t, 0x1200, 0), "-");
  ck_assert_str_eq(at(&m, &t, 0xfff, 0), "-");
  /* A line not yet ended waits for its end. */
  ks_pmap_feed(&m, "0x3000 10 $b:", 13, name_cb, &t);
  ck_assert_int_eq(ks_pmap_commit(&m, 200), KS_OK);
  ck_assert_str_eq(at(&m, &t, 0x3000, 300), "-");
  feed(&m, &t, "k/0\n", 300);
  ck_assert_str_eq(at(&m, &t, 0x3000, 300), "b:k/0");
  ks_pmap_free(&m);
}
END_TEST

/* A module reloaded where a purged one was: each sample is named by the
 * line that held its address at its time. Reads at 100 (the first: valid
 * from the start), 200, 300, 400. */
START_TEST(test_map_reload_reuses_addresses) {
  static names t;
  ks_pmap m;

  t.n = 0;
  ks_pmap_init(&m);
  feed(&m, &t, "0x1000 100 $v1:f/0\n0x1100 100 $v1:g/0\n", 100);
  feed(&m, &t, "", 200);
  /* v2 loaded elsewhere, v1 purged, then v3 at v1's addresses (read at 300:
   * valid from the read before, 200), then v4 over part of v3 (read at 400). */
  feed(&m, &t, "0x5000 100 $v2:f/0\n0x1000 100 $v3:f/0\n0x1100 80 $v3:g/0\n", 300);
  feed(&m, &t, "0x1040 100 $v4:f/0\n", 400);
  ck_assert_str_eq(at(&m, &t, 0x1050, 50), "v1:f/0");
  ck_assert_str_eq(at(&m, &t, 0x1050, 199), "v1:f/0");
  ck_assert_str_eq(at(&m, &t, 0x1050, 200), "v3:f/0");
  ck_assert_str_eq(at(&m, &t, 0x1050, 299), "v3:f/0");
  ck_assert_str_eq(at(&m, &t, 0x1050, 300), "v4:f/0");
  ck_assert_str_eq(at(&m, &t, 0x1010, 350), "-");   /* v3:f's part before v4: retired */
  ck_assert_str_eq(at(&m, &t, 0x1010, 250), "v3:f/0");
  ck_assert_str_eq(at(&m, &t, 0x1170, 150), "v1:g/0");
  ck_assert_str_eq(at(&m, &t, 0x1170, 250), "v3:g/0");
  ck_assert_str_eq(at(&m, &t, 0x11c0, 150), "v1:g/0");
  ck_assert_str_eq(at(&m, &t, 0x11c0, 250), "-");   /* v3:g is shorter */
  ck_assert_str_eq(at(&m, &t, 0x5010, 150), "-");   /* v2 was not there yet */
  ck_assert_str_eq(at(&m, &t, 0x5010, 250), "v2:f/0");
  ck_assert_uint_eq(m.retired, 4);   /* v1:f, v1:g, v3:f and v3:g's overlap */
  /* Two lines of one read over the same addresses: the later wins. */
  feed(&m, &t, "0x7000 10 $w:a/0\n0x7000 10 $w:b/0\n", 500);
  ck_assert_str_eq(at(&m, &t, 0x7004, 450), "w:b/0");
  ks_pmap_free(&m);
}
END_TEST

/* ---- ELF symbols: this program's own ---- */

__attribute__((noinline, used)) int ks_test_sample_marker(int x);
__attribute__((noinline, used)) int ks_test_sample_marker(int x) {
  return x * 3 + 1;
}

START_TEST(test_elf_names_own_code) {
  static names t;
  ks_elf e;
  uint32_t f;
  uint64_t addr = (uint64_t)(uintptr_t)&ks_test_sample_marker;

  t.n = 0;
  ks_elf_init(&e, (int)getpid());   /* /proc/PID/maps, the files under /proc/PID/root */
  ck_assert_int_eq(ks_elf_scan(&e), KS_OK);
  ck_assert_uint_gt(e.nmods, 0);
  f = ks_elf_lookup(&e, addr + 2, name_cb, &t);
  ck_assert_uint_ne(f, KS_NONE);
  ck_assert_str_eq(t.v[f], "C ks_test_sample_marker");
  ck_assert_uint_eq(ks_elf_lookup(&e, addr, name_cb, &t), f);   /* named once */
  ck_assert_uint_eq(t.n, 1);
  /* An address of libc is libc's; one of no mapping is nobody's. */
  f = ks_elf_lookup(&e, (uint64_t)(uintptr_t)&qsort, name_cb, &t);
  ck_assert_uint_ne(f, KS_NONE);
  ck_assert_ptr_nonnull(strstr(t.v[f], "C "));
  ck_assert_uint_eq(ks_elf_lookup(&e, 16, name_cb, &t), KS_NONE);
  ks_elf_free(&e);
}
END_TEST

/* ---- the pid's place, calibrated ---- */

/* 64 words of a made-up process struct: noise, and the pid at word `slot'. */
static void fake_proc(uint64_t *w, uint8_t *ok, uint32_t slot, uint64_t pid_word, uint64_t seed) {
  uint32_t k;

  for (k = 0; k < KS_CAL_WORDS; k++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    w[k] = seed;
    ok[k] = 1;
  }
  w[1] = 0x7f0000001233ull;   /* a pointer that happens to carry the pid tag */
  w[slot] = pid_word;
}

START_TEST(test_calibration) {
  static ks_calib c;
  ks_playout lay = {0, 0, 0, 28, 32}, got;
  uint64_t w[KS_CAL_WORDS];
  uint8_t ok[KS_CAL_WORDS];
  int k;

  /* OTP 27's layout: the number at bit 7; beacons <0.70083.0> and <0.70084.0>. */
  memset(&c, 0, sizeof(c));
  c.nbeacons = 2;
  c.num[0] = 70083;
  c.num[1] = 70084;
  for (k = 0; k < 6; k++) {
    fake_proc(w, ok, 0, (uint64_t)c.num[k % 2] << 7 | 3, (uint64_t)k);
    ks_calib_sample(&c, &lay, w, ok);
    if (k < 4)   /* two samples of each: not yet three */
      ck_assert_int_eq(ks_calib_result(&c, KS_CAL_MIN, &got), KS_EINVAL);
    fake_proc(w, ok, 5, 0x1234ull << 7 | 3, (uint64_t)k + 100);   /* another process */
    ks_calib_sample(&c, &lay, w, ok);
  }
  ck_assert_int_eq(ks_calib_result(&c, KS_CAL_MIN, &got), KS_OK);
  ck_assert_uint_eq(got.offset, 0);
  ck_assert_uint_eq(got.shift, 7);
  /* OTP 25's: the table index above bit 32 (it holds the number too), the
   * number at bit 4, the serial above it: <0.4543.2>, <0.4544.2> at word 2. */
  memset(&c, 0, sizeof(c));
  lay.num_bits = 15;
  lay.ser_bits = 13;
  c.nbeacons = 2;
  c.num[0] = 4543;
  c.num[1] = 4544;
  c.ser[0] = c.ser[1] = 2;
  for (k = 0; k < 6; k++) {
    uint64_t data = (uint64_t)c.ser[k % 2] << 15 | c.num[k % 2];
    fake_proc(w, ok, 2, (uint64_t)c.num[k % 2] << 35 | data << 4 | 3, (uint64_t)k);
    ks_calib_sample(&c, &lay, w, ok);
  }
  ck_assert_int_eq(ks_calib_result(&c, KS_CAL_MIN, &got), KS_OK);
  ck_assert_uint_eq(got.offset, 16);
  ck_assert_uint_eq(got.shift, 4);
  /* Words that could not be read vote for nothing. */
  memset(&c, 0, sizeof(c));
  c.nbeacons = 1;
  c.num[0] = 4543;
  for (k = 0; k < 6; k++) {
    fake_proc(w, ok, 2, (uint64_t)4543 << 4 | 3, (uint64_t)k);
    ok[2] = 0;
    ks_calib_sample(&c, &lay, w, ok);
  }
  ck_assert_int_eq(ks_calib_result(&c, KS_CAL_MIN, &got), KS_EINVAL);
}
END_TEST

/* ---- whole samples, against a made-up VM ---- */

typedef struct stacks {
  char v[16][512];
  int n;
  const ks_intern *in;
} stacks;

static void collect_stack(void *ctx, const ks_sstack *st) {
  stacks *c = ctx;
  ks_pid_view pv;
  ks_mfa_view m;
  size_t o = 0;
  uint32_t k;

  ck_assert_int_lt(c->n, 16);
  if (st->pid != KS_NONE && ks_intern_pid_get(c->in, st->pid, &pv) == KS_OK)
    o += (size_t)snprintf(c->v[c->n], 512, "<0.%u.%u>", pv.num, pv.serial);
  else
    o += (size_t)snprintf(c->v[c->n], 512, "thread%d", st->thread_kind);
  if (st->flags & KS_SS_TRUNCATED)
    o += (size_t)snprintf(c->v[c->n] + o, 512 - o, ";TRUNCATED");
  for (k = 0; k < st->n; k++) {
    ck_assert_int_eq(ks_intern_mfa_get(c->in, st->mfas[k], &m), KS_OK);
    o += (size_t)snprintf(c->v[c->n] + o, 512 - o, ";%s:%s/%u", m.m, m.f, m.arity);
  }
  if (st->flags & KS_SS_C_ONLY)
    snprintf(c->v[c->n] + o, 512 - o, " c_only");
  c->n++;
}

/* The made-up VM's memory: two processes' structs, the pid in their second word. */
static int fake_read(void *ctx, const uint64_t *addrs, uint32_t n, uint64_t *out, uint8_t *ok) {
  uint32_t k, got = 0;

  for (k = 0; k < n; k++) {
    ok[k] = addrs[k] == 0x5008 || addrs[k] == 0x6008;
    out[k] = addrs[k] == 0x5008 ? (uint64_t)85 << 7 | 3 : (uint64_t)86 << 7 | 3;
    got += ok[k];
  }
  return (int)got;
}

static void one(ks_sampler *s, int kind, const uint64_t *ips, uint32_t n, uint64_t r13) {
  recbuf r = {.n = 0};
  size_t len = sample_rec(&r, 7, 1000, ips, n, r13);

  ks_sampler_record(s, kind, r.b, len);
}

START_TEST(test_resolve_samples) {
  static ks_sampler s;
  static stacks got;
  ks_intern in;
  ei_x_buff x;
  const char *map = "0x1000 100 $app:main/0\n0x1100 100 $app:work/1\n"
                    "0x1200 100 $global::gc_shared\n0x1300 100 $erts_beamasm:normal_exit/0\n";
  uint64_t a[] = {0x1150, 0x1050, 0x1310}, b[] = {0xdead0000, 0x1050}, c[] = {0xdead0000},
           d[] = {0x1210, 0x1150, 0x1050}, e[] = {0x1150, 0x1150, 0x1150, 0x1150};
  uint32_t only;
  ks_slice raw;

  ck_assert_int_eq(ks_intern_init(&in, NULL), KS_OK);
  ks_sampler_init(&s, &in);
  tb_begin(&x);
  tb_pid(&x, "n@h", 1, 0, 1);
  memcpy(s.pid_tmpl, x.buff + 1, (size_t)x.index - 1);
  s.pid_tmpl_n = (size_t)x.index - 1;
  ei_x_free(&x);
  s.lay = (ks_playout){1, 8, 7, 28, 32};
  s.max_stack = 4;
  s.windowed = 1;
  s.read_words = fake_read;
  s.emit = collect_stack;
  s.emit_ctx = &got;
  got.in = &in;
  ks_pmap_feed(&s.map, map, strlen(map), ks_sampler_name, &s);
  ck_assert_int_eq(ks_pmap_commit(&s.map, 0), KS_OK);
  one(&s, KS_THR_SCHED, a, 3, 0x5000);        /* JIT code: r13 is its process */
  one(&s, KS_THR_SCHED, b, 2, 0x5000);        /* C code, r13 as JIT code had it */
  one(&s, KS_THR_DIRTY_CPU, c, 1, 0x9000);    /* C code, r13 unknown: no process */
  one(&s, KS_THR_SCHED, d, 3, 0x6000);        /* the JIT's own code at the leaf */
  one(&s, KS_THR_SCHED, e, 4, 0x5000);        /* as long as the kernel's cap: cut */
  ks_sampler_resolve(&s);
  ck_assert_int_eq(got.n, 5);
  ck_assert_str_eq(got.v[0], "<0.85.0>;app:main/0;app:work/1");
  ck_assert_str_eq(got.v[1], "<0.85.0>;app:main/0;[unknown]:/0");
  ck_assert_str_eq(got.v[2], "thread1;[unknown]:/0 c_only");
  ck_assert_str_eq(got.v[3], "<0.86.0>;app:main/0;app:work/1;[JIT]:global::gc_shared/0");
  ck_assert_str_eq(got.v[4], "<0.85.0>;TRUNCATED;app:work/1;app:work/1;app:work/1;app:work/1");
  ck_assert_uint_eq(s.k.samples, 5);
  ck_assert_uint_eq(s.k.c_only, 1);
  ck_assert_uint_eq(s.k.attributed, 4);
  ck_assert_uint_eq(s.k.truncated, 1);
  /* Only <0.85.0> asked for: the others' samples are dropped and counted. */
  tb_begin(&x);
  tb_pid(&x, "n@h", 85, 0, 1);
  raw.p = (const unsigned char *)x.buff + 1;
  raw.n = (size_t)x.index - 1;
  ck_assert_int_eq(ks_intern_pid(&in, raw, &only), KS_OK);
  ei_x_free(&x);
  s.only = malloc(sizeof(only));
  s.only[0] = only;
  s.nonly = 1;
  got.n = 0;
  one(&s, KS_THR_SCHED, a, 3, 0x5000);
  one(&s, KS_THR_SCHED, d, 3, 0x6000);
  one(&s, KS_THR_SCHED, c, 1, 0x9000);
  ks_sampler_resolve(&s);
  ck_assert_int_eq(got.n, 1);
  ck_assert_uint_eq(s.k.filtered, 2);
  ks_sampler_free(&s);
  ks_intern_free(&in);
}
END_TEST

/* A pid word as the VM keeps it (tag 0x3, number then serial above it):
 * made and decoded back for OTP 25's 15-bit numbers and for wider ones;
 * other tags, widths and OTP 25's serials past 13 bits refused. */
START_TEST(test_pid_words) {
  static const struct { uint32_t num, serial, bits; } ok[] = {
    {0, 0, 15}, {88, 0, 15}, {32767, 8191, 15}, {88, 3, 28}, {(1u << 28) - 1, 7, 28},
    {5, (1u << 28) - 1, 32}};
  uint32_t num, serial;
  size_t k;

  for (k = 0; k < sizeof(ok) / sizeof(ok[0]); k++) {
    uint64_t w = ks_pid_word_make(ok[k].num, ok[k].serial, ok[k].bits);
    ck_assert_uint_eq(w & 0xf, 0x3);
    ck_assert_int_eq(ks_pid_word_decode(w, ok[k].bits, &num, &serial), KS_OK);
    ck_assert_uint_eq(num, ok[k].num);
    ck_assert_uint_eq(serial, ok[k].serial);
  }
  ck_assert_int_eq(ks_pid_word_decode(ks_pid_word_make(1, 1, 15) ^ 0x1, 15, &num, &serial),
                   KS_EINVAL);   /* another tag */
  ck_assert_int_eq(ks_pid_word_decode(0x3, 0, &num, &serial), KS_EINVAL);
  ck_assert_int_eq(ks_pid_word_decode(0x3, 33, &num, &serial), KS_EINVAL);
  ck_assert_int_eq(ks_pid_word_decode(ks_pid_word_make(1, 1u << 13, 15), 15, &num, &serial),
                   KS_EINVAL);
  ck_assert_int_eq(ks_pid_word_decode(((uint64_t)1 << 40 << 4) | 0x3, 4, &num, &serial),
                   KS_EINVAL);   /* a serial past 32 bits */
}
END_TEST

/* This process's own words, read as the sampler reads the VM's: more than
 * one call's batch, with unmapped addresses (page 0) at the start, in a
 * batch and at the end, each left unread and the rest read. Without
 * perf_event_open (KS_PORTABLE) nothing is read. */
START_TEST(test_vm_read_words) {
  enum { N = 1200 };
  uint64_t *src = malloc(N * sizeof(*src)), *addrs = malloc(N * sizeof(*addrs));
  uint64_t *got = calloc(N, sizeof(*got));
  uint8_t *ok = malloc(N);
  uint32_t k;
  int rc;

  ck_assert(src != NULL && addrs != NULL && got != NULL && ok != NULL);
  for (k = 0; k < N; k++) {
    src[k] = 0x5eed0000u + k;
    addrs[k] = (uint64_t)(uintptr_t)&src[k];
  }
  addrs[0] = 8;
  addrs[700] = 16;
  addrs[N - 1] = 24;
  rc = ks_vm_read_words((int)getpid(), addrs, N, got, ok);
#if KS_PERF_EVENTS
  ck_assert_int_eq(rc, N - 3);
  for (k = 0; k < N; k++) {
    if (k == 0 || k == 700 || k == N - 1) {
      ck_assert_uint_eq(ok[k], 0);
      continue;
    }
    ck_assert_msg(ok[k] == 1 && got[k] == src[k], "word %u: ok %u, %llx", k, ok[k],
                  (unsigned long long)got[k]);
  }
  /* None readable: the error of the last call. */
  for (k = 0; k < 4; k++)
    addrs[k] = 8;
  ck_assert_int_lt(ks_vm_read_words((int)getpid(), addrs, 4, got, ok), 0);
  ck_assert_uint_eq(ok[0] + ok[1] + ok[2] + ok[3], 0);
#else
  ck_assert_int_eq(rc, KS_PERF_ENOTSUP);
  for (k = 0; k < N; k++)
    ck_assert_uint_eq(ok[k], 0);
#endif
  free(src);
  free(addrs);
  free(got);
  free(ok);
}
END_TEST

Suite *sample_suite(void) {
  Suite *s = suite_create("sample");
  TCase *tc = tcase_create("core");

  tcase_add_test(tc, test_decode_sample);
  tcase_add_test(tc, test_ring_wraps);
  tcase_add_test(tc, test_map_names);
  tcase_add_test(tc, test_map_lines);
  tcase_add_test(tc, test_map_reload_reuses_addresses);
  tcase_add_test(tc, test_elf_names_own_code);
  tcase_add_test(tc, test_calibration);
  tcase_add_test(tc, test_resolve_samples);
  tcase_add_test(tc, test_pid_words);
  tcase_add_test(tc, test_vm_read_words);
  suite_add_tcase(s, tc);
  return s;
}
