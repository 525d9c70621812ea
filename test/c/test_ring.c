/* test_ring.c: the shared-memory ring: records written as the kprof_tracer NIF writes them
 * (include/ks_ring.h), read back by port/ring/ring.c as events. */
#include <stdlib.h>
#include <sys/stat.h>

#include "test_util.h"
#include "ring/ks_ring_reader.h"

#define M_WORD 0x1000bULL   /* atom words (any distinct values) */
#define F_WORD 0x2000bULL
#define G_WORD 0x3000bULL
#define PID_WORD 0x4003ULL
#define PID2_WORD 0x5003ULL

static uint64_t tail_cache;   /* the writers' cache of the ring's tail (ks_ring_reserve) */

typedef struct got {
  ks_decoded d[64];
  unsigned char label[64][16];
  unsigned char payload[64][64];
  int n;
} got;

static void collect(void *ctx, ks_decoded *d) {
  got *g = ctx;

  ck_assert_int_lt(g->n, 64);
  g->d[g->n] = *d;
  /* The slices point into the ring, which the reader zeroes after the call. */
  ck_assert_uint_le(d->label.n, sizeof(g->label[0]));
  ck_assert_uint_le(d->payload.n, sizeof(g->payload[0]));
  if (d->label.n > 0)
    memcpy(g->label[g->n], d->label.p, d->label.n);
  if (d->payload.n > 0)
    memcpy(g->payload[g->n], d->payload.p, d->payload.n);
  g->d[g->n].label.p = g->label[g->n];
  g->d[g->n].payload.p = g->payload[g->n];
  g->n++;
}

static void collect_none(void *ctx, ks_decoded *d) {
  (void)ctx;
  (void)d;
}

static void put_pid(ks_ring_hdr *h, uint64_t word, unsigned num) {
  ei_x_buff x;
  ks_rec_pid p;
  uint64_t pos;
  size_t len;
  unsigned char *rec;

  tb_begin(&x);
  tb_pid(&x, "n@h", num, 0, 1);   /* as tb_intern_pid makes it */
  len = ks_ring_align(sizeof(p) + (size_t)x.index - 1);
  rec = ks_ring_reserve(h, len, &pos, &tail_cache);
  ck_assert_ptr_nonnull(rec);
  memset(&p, 0, sizeof(p));
  p.pid = word;
  p.len = (uint16_t)(x.index - 1);
  memcpy(rec + 8, (unsigned char *)&p + 8, sizeof(p) - 8);
  memcpy(rec + sizeof(p), x.buff + 1, (size_t)x.index - 1);
  ks_ring_commit(h, rec, pos, len, KS_REC_PID, 0);
  ei_x_free(&x);
}

/* A call of M:F/1 from M:G/0 with label 7 (SMALL_INTEGER_EXT) and a payload;
 * commit = 0 leaves it reserved, not committed (its address is returned). */
static unsigned char *put_call(ks_ring_hdr *h, int64_t ts, uint64_t m, int commit,
                               uint64_t *pos_out) {
  static const unsigned char label[] = {97, 7}, payload[] = {100, 0, 2, 'h', 'i'};
  size_t len = ks_ring_align(sizeof(ks_rec_call) + sizeof(label) + sizeof(payload));
  uint64_t pos;
  unsigned char *rec = ks_ring_reserve(h, len, &pos, &tail_cache);
  ks_rec_call c;

  ck_assert_ptr_nonnull(rec);
  memset(&c, 0, sizeof(c));
  c.ts = ts;
  c.pid = PID_WORD;
  c.m = m;
  c.f = F_WORD;
  c.arity = 1;
  c.caller_m = M_WORD;
  c.caller_f = G_WORD;
  c.caller_arity = 0;
  c.label_len = sizeof(label);
  c.payload_len = sizeof(payload);
  memcpy(rec + 8, (unsigned char *)&c + 8, sizeof(c) - 8);
  memcpy(rec + sizeof(c), label, sizeof(label));
  memcpy(rec + sizeof(c) + sizeof(label), payload, sizeof(payload));
  if (commit)
    ks_ring_commit(h, rec, pos, len, KS_REC_CALL,
                   KS_RECF_TOKEN | KS_RECF_LABEL | KS_RECF_CALLER | KS_RECF_PAYLOAD);
  if (pos_out != NULL)
    *pos_out = pos;
  return rec;
}

/* A return_to, or (type KS_REC_CALL_MFA) a call with nothing but its function. */
static void put_mfa_record(ks_ring_hdr *h, int64_t ts, unsigned type, unsigned flags) {
  uint64_t pos;
  unsigned char *rec = ks_ring_reserve(h, sizeof(ks_rec_mfa), &pos, &tail_cache);
  ks_rec_mfa r;

  ck_assert_ptr_nonnull(rec);
  memset(&r, 0, sizeof(r));
  r.ts = ts;
  r.pid = PID_WORD;
  r.m = M_WORD;
  r.f = G_WORD;
  r.arity = 0;
  memcpy(rec + 8, (unsigned char *)&r + 8, sizeof(r) - 8);
  ks_ring_commit(h, rec, pos, sizeof(r), type, flags);
}

static void put_return_to(ks_ring_hdr *h, int64_t ts) {
  put_mfa_record(h, ts, KS_REC_RETURN_TO, KS_RECF_MFA);
}

static void define_all(ks_ring_hdr *h) {
  tb_ring_atom(h, M_WORD, "shop_db", &tail_cache);
  tb_ring_atom(h, F_WORD, "query", &tail_cache);
  tb_ring_atom(h, G_WORD, "run", &tail_cache);
  put_pid(h, PID_WORD, 42);
}

typedef struct fixture {
  ks_ring_reader r;
  ks_intern in;
  got g;
} fixture;

static void setup(fixture *f, uint64_t size) {
  memset(f, 0, sizeof(*f));
  tail_cache = 0;
  ks_ring_reader_init(&f->r);
  ck_assert_int_eq(ks_intern_init(&f->in, NULL), KS_OK);
  ck_assert_int_eq(ks_ring_open(&f->r, size), KS_OK);
  ck_assert_ptr_nonnull(f->r.h);
}

static void teardown(fixture *f) {
  ks_ring_close(&f->r);
  ks_intern_free(&f->in);
}

START_TEST(test_events) {
  fixture f;
  ks_mfa_view v;
  uint32_t pid = KS_NONE;

  setup(&f, 64u << 10);
  define_all(f.r.h);
  put_call(f.r.h, -5000, M_WORD, 1, NULL);
  put_return_to(f.r.h, -4000);
  ck_assert_uint_eq(ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g), 6);
  ck_assert_int_eq(f.g.n, 2);
  /* The call: the same ids the decoder would give, label and payload bytes. */
  ck_assert_int_eq(f.g.d[0].ev.kind, KS_EV_CALL);
  ck_assert_int_eq(f.g.d[0].ev.ts, -5000);
  ck_assert_int_eq(f.g.d[0].ev.flags,
                   KS_EVF_TS | KS_EVF_TOKEN | KS_EVF_LABEL | KS_EVF_CALLER);
  ck_assert_uint_eq(f.g.d[0].ev.mfa, tb_intern_mfa(&f.in, "shop_db", "query", 1));
  ck_assert_uint_eq(f.g.d[0].ev.caller, tb_intern_mfa(&f.in, "shop_db", "run", 0));
  ck_assert_int_eq(ks_intern_mfa_get(&f.in, f.g.d[0].ev.mfa, &v), KS_OK);
  ck_assert_str_eq(v.m, "shop_db");
  pid = tb_intern_pid(&f.in, 42);
  ck_assert_uint_eq(f.g.d[0].ev.pid, pid);
  ck_assert_uint_eq(f.g.d[0].label.n, 2);
  ck_assert_int_eq(f.g.d[0].label.p[1], 7);
  ck_assert_uint_eq(f.g.d[0].payload.n, 5);
  ck_assert_int_eq(memcmp(f.g.d[0].payload.p, "\x64\x00\x02hi", 5), 0);
  /* The return_to. */
  ck_assert_int_eq(f.g.d[1].ev.kind, KS_EV_RETURN_TO);
  ck_assert_uint_eq(f.g.d[1].ev.mfa, tb_intern_mfa(&f.in, "shop_db", "run", 0));
  ck_assert_uint_eq(f.g.d[1].ev.pid, pid);
  ck_assert_uint_eq(f.r.unresolved + f.r.bad, 0);
  ck_assert_uint_eq(atomic_load(&f.r.h->tail), atomic_load(&f.r.h->head));
  teardown(&f);
}
END_TEST

/* A call of the pattern `true' (no match-spec extra): the short record, a
 * call event with its function and nothing else; meta allowed, any other
 * flag is a bad record. */
START_TEST(test_call_mfa) {
  fixture f;

  setup(&f, 64u << 10);
  define_all(f.r.h);
  put_mfa_record(f.r.h, 7000, KS_REC_CALL_MFA, 0);
  put_mfa_record(f.r.h, 7100, KS_REC_CALL_MFA, KS_RECF_META);
  put_mfa_record(f.r.h, 7200, KS_REC_CALL_MFA, KS_RECF_CALLER);
  ck_assert_uint_eq(ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g), 7);
  ck_assert_int_eq(f.g.n, 2);
  ck_assert_int_eq(f.g.d[0].ev.kind, KS_EV_CALL);
  ck_assert_int_eq(f.g.d[0].ev.ts, 7000);
  ck_assert_int_eq(f.g.d[0].ev.flags, KS_EVF_TS);
  ck_assert_uint_eq(f.g.d[0].ev.mfa, tb_intern_mfa(&f.in, "shop_db", "run", 0));
  ck_assert_uint_eq(f.g.d[0].ev.caller, KS_NONE);
  ck_assert_uint_eq(f.g.d[0].ev.pid, tb_intern_pid(&f.in, 42));
  ck_assert_int_eq(f.g.d[1].ev.flags, KS_EVF_TS | KS_EVF_META);
  ck_assert_uint_eq(f.r.bad, 1);
  teardown(&f);
}
END_TEST

/* An event record as the NIF writes one (kind: a ks_event_kind). */
static void put_event_of(ks_ring_hdr *h, uint64_t pid, int64_t ts, uint8_t kind,
                         unsigned flags, uint64_t m, uint64_t f, uint8_t arity, uint64_t other) {
  uint64_t pos;
  unsigned char *rec = ks_ring_reserve(h, sizeof(ks_rec_event), &pos, &tail_cache);
  ks_rec_event e;

  ck_assert_ptr_nonnull(rec);
  memset(&e, 0, sizeof(e));
  e.ts = ts;
  e.pid = pid;
  e.m = m;
  e.f = f;
  e.arity = arity;
  e.other = other;
  e.kind = kind;
  memcpy(rec + 8, (unsigned char *)&e + 8, sizeof(e) - 8);
  ks_ring_commit(h, rec, pos, sizeof(e), KS_REC_EVENT, flags);
}

static void put_event(ks_ring_hdr *h, int64_t ts, uint8_t kind, unsigned flags, uint64_t m,
                      uint64_t f, uint8_t arity, uint64_t other) {
  put_event_of(h, PID_WORD, ts, kind, flags, m, f, arity, other);
}

/* The same event as a port tracer sends it: {trace_ts, <42>, What, Args..., 1234},
 * decoded, as the line test/data's recorder prints. */
static void port_line(ks_intern *in, const char *what, int nargs,
                      void (*args)(ei_x_buff *), char *line, size_t cap) {
  ei_x_buff x;
  ks_decoded d;
  int rc;

  tb_begin(&x);
  ck_assert_int_eq(ei_x_encode_tuple_header(&x, 4 + nargs), 0);
  tb_atom(&x, "trace_ts");
  tb_pid(&x, "n@h", 42, 0, 1);
  tb_atom(&x, what);
  args(&x);
  ck_assert_int_eq(ei_x_encode_long(&x, 1234), 0);
  rc = ks_decode_frame(in, (const unsigned char *)x.buff, (size_t)x.index, &d);
  ck_assert_int_eq(rc, KS_FRAME_TRACE);
  event_line(in, rc, &d, line, cap);
  ei_x_free(&x);
}

static void a_mfa(ei_x_buff *x) { tb_mfa(x, "shop_db", "query", 1); }
static void a_zero(ei_x_buff *x) { ck_assert_int_eq(ei_x_encode_long(x, 0), 0); }
static void a_spawn(ei_x_buff *x) {
  tb_pid(x, "n@h", 43, 0, 1);
  ck_assert_int_eq(ei_x_encode_tuple_header(x, 3), 0);
  tb_atom(x, "shop_db");
  tb_atom(x, "run");
  ck_assert_int_eq(ei_x_encode_list_header(x, 1), 0);
  tb_atom(x, "a");
  ck_assert_int_eq(ei_x_encode_empty_list(x), 0);
}
static void a_name(ei_x_buff *x) { tb_atom(x, "shop_db"); }
static void a_reason(ei_x_buff *x) { tb_atom(x, "normal"); }
static void a_gc(ei_x_buff *x) { ck_assert_int_eq(ei_x_encode_empty_list(x), 0); }
static void a_return(ei_x_buff *x) {
  a_mfa(x);
  ck_assert_int_eq(ei_x_encode_long(x, 7), 0);
}
static void a_exception(ei_x_buff *x) {
  a_mfa(x);
  ck_assert_int_eq(ei_x_encode_tuple_header(x, 2), 0);
  tb_atom(x, "error");
  tb_atom(x, "badarg");
}

/* Every tag the event record carries gives the event a port frame gives:
 * stacks, tree and writers see one kind of event whichever way it came. */
START_TEST(test_event_records_match_the_decoder) {
  static const struct {
    const char *what;
    int nargs;
    void (*args)(ei_x_buff *);
    uint8_t kind;
    unsigned flags;
    uint64_t m, f, other;
    uint8_t arity;
  } cases[] = {
    {"in", 1, a_mfa, KS_EV_IN, KS_RECF_MFA, M_WORD, F_WORD, 0, 1},
    {"out", 1, a_zero, KS_EV_OUT, 0, 0, 0, 0, 0},
    {"out_exited", 1, a_zero, KS_EV_OUT_EXITED, 0, 0, 0, 0, 0},
    {"spawn", 2, a_spawn, KS_EV_SPAWN, KS_RECF_MFA | KS_RECF_OTHER, M_WORD, G_WORD, PID2_WORD, 1},
    {"spawned", 2, a_spawn, KS_EV_SPAWNED, KS_RECF_MFA | KS_RECF_OTHER, M_WORD, G_WORD, PID2_WORD, 1},
    {"register", 1, a_name, KS_EV_REGISTER, KS_RECF_NAME, 0, 0, M_WORD, 0},
    {"exit", 1, a_reason, KS_EV_EXIT, 0, 0, 0, 0, 0},
    {"gc_minor_start", 1, a_gc, KS_EV_GC_MINOR_START, 0, 0, 0, 0, 0},
    {"gc_major_end", 1, a_gc, KS_EV_GC_MAJOR_END, 0, 0, 0, 0, 0},
    {"return_from", 2, a_return, KS_EV_RETURN_FROM, KS_RECF_MFA | KS_RECF_META, M_WORD, F_WORD, 0, 1},
    {"exception_from", 2, a_exception, KS_EV_EXCEPTION_FROM, KS_RECF_MFA | KS_RECF_META, M_WORD,
     F_WORD, 0, 1},
  };
  char want[2048], have[2048];
  fixture f;
  size_t k;

  setup(&f, 64u << 10);
  define_all(f.r.h);
  put_pid(f.r.h, PID2_WORD, 43);
  for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
    put_event(f.r.h, 1234, cases[k].kind, cases[k].flags, cases[k].m, cases[k].f,
              cases[k].arity, cases[k].other);
  ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g);
  ck_assert_int_eq(f.g.n, (int)(sizeof(cases) / sizeof(cases[0])));
  ck_assert_uint_eq(f.r.bad + f.r.unresolved + f.r.full, 0);
  for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    port_line(&f.in, cases[k].what, cases[k].nargs, cases[k].args, want, sizeof(want));
    event_line(&f.in, KS_FRAME_TRACE, &f.g.d[k], have, sizeof(have));
    ck_assert_str_eq(have, want);
    /* A meta tracer's record says so; nothing else does. */
    ck_assert_int_eq((f.g.d[k].ev.flags & KS_EVF_META) != 0, (cases[k].flags & KS_RECF_META) != 0);
    ck_assert_int_eq(f.g.d[k].ev.flags & KS_EVF_WALL, 0);
  }
  teardown(&f);
}
END_TEST

/* Event records the NIF never writes, or that name what was never defined. */
START_TEST(test_bad_event_records) {
  fixture f;

  setup(&f, 64u << 10);
  define_all(f.r.h);
  put_event(f.r.h, 1, KS_EV_CALL, 0, 0, 0, 0, 0);               /* calls have their own record */
  put_event(f.r.h, 1, KS_EV__COUNT + 3, 0, 0, 0, 0, 0);         /* no such kind */
  put_event(f.r.h, 1, KS_EV_SEND, 0, 0, 0, 0, 0);               /* discarded by the NIF */
  put_event(f.r.h, 1, KS_EV_SPAWN, KS_RECF_OTHER | KS_RECF_NAME, 0, 0, 0, PID_WORD);
  ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g);
  ck_assert_uint_eq(f.r.bad, 4);
  put_event(f.r.h, 1, KS_EV_SPAWN, KS_RECF_OTHER, 0, 0, 0, 0x7777ULL);   /* unknown pid */
  put_event(f.r.h, 1, KS_EV_REGISTER, KS_RECF_NAME, 0, 0, 0, 0x8887ULL); /* unknown atom */
  put_event(f.r.h, 1, KS_EV_IN, KS_RECF_MFA, 0x9997ULL, F_WORD, 0, 0);   /* unknown module */
  ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g);
  ck_assert_uint_eq(f.r.unresolved, 3);
  ck_assert_int_eq(f.g.n, 0);
  teardown(&f);
}
END_TEST

/* The reader shows it is alive on every drain, records or none; and no two
 * rings share a name, nor is it one another user could guess. */
START_TEST(test_reads_and_names) {
  fixture f, g;
  uint64_t before;

  setup(&f, 64u << 10);
  before = atomic_load(&f.r.h->reads);
  ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g);
  ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g);
  ck_assert_uint_eq(atomic_load(&f.r.h->reads), before + 2);
  setup(&g, 64u << 10);
  ck_assert_str_ne(f.r.name, g.r.name);
  /* /kprof-<os pid>-<16 hex digits of random> */
  ck_assert_uint_eq(strlen(strrchr(f.r.name, '-') + 1), 16);
  teardown(&g);
  teardown(&f);
}
END_TEST

START_TEST(test_uncommitted_stops_the_read) {
  fixture f;
  uint64_t pos;
  unsigned char *rec;
  size_t len = ks_ring_align(sizeof(ks_rec_call) + 2 + 5);

  setup(&f, 64u << 10);
  define_all(f.r.h);
  rec = put_call(f.r.h, 1, M_WORD, 0, &pos);    /* reserved by a slow writer */
  put_return_to(f.r.h, 2);                      /* committed after it */
  ck_assert_uint_eq(ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g), 4);
  ck_assert_int_eq(f.g.n, 0);
  ks_ring_commit(f.r.h, rec, pos, len, KS_REC_CALL,
                 KS_RECF_TOKEN | KS_RECF_LABEL | KS_RECF_CALLER | KS_RECF_PAYLOAD);
  ck_assert_uint_eq(ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g), 2);
  ck_assert_int_eq(f.g.n, 2);
  ck_assert_int_eq(f.g.d[0].ev.kind, KS_EV_CALL);   /* in ring order */
  ck_assert_int_eq(f.g.d[1].ev.kind, KS_EV_RETURN_TO);
  teardown(&f);
}
END_TEST

START_TEST(test_full_ring_counts_drops) {
  fixture f;
  int k, written = 0;
  uint64_t pos;

  setup(&f, 64u << 10);
  define_all(f.r.h);
  for (k = 0; k < 2000; k++) {
    if (ks_ring_reserve(f.r.h, 48, &pos, &tail_cache) == NULL)
      continue;
    /* commit a return_to in place */
    {
      unsigned char *rec = ks_ring_data(f.r.h) + (pos & (f.r.size - 1));
      ks_rec_mfa r;
      memset(&r, 0, sizeof(r));
      r.pid = PID_WORD;
      memcpy(rec + 8, (unsigned char *)&r + 8, sizeof(r) - 8);
      ks_ring_commit(f.r.h, rec, pos, sizeof(r), KS_REC_RETURN_TO, 0);
      written++;
    }
  }
  ck_assert_int_lt(written, 2000);
  ck_assert_uint_eq(atomic_load(&f.r.h->drops), (uint64_t)(2000 - written));
  while (ks_ring_drain(&f.r, &f.in, 64, collect, &f.g) > 0)
    f.g.n = 0;
  ck_assert_int_eq(f.r.drops_pending, 1);
  ck_assert_uint_eq(f.r.drops_seen, (uint64_t)(2000 - written));
  /* Room again once read. */
  ck_assert_ptr_nonnull(ks_ring_reserve(f.r.h, 48, &pos, &tail_cache));
  teardown(&f);
}
END_TEST

/* A writer whose head was read before other writers moved on and the reader
 * caught up must not take the ring for full (bench-tiers saw 1-2 such false
 * drops abort a run). */
START_TEST(test_stale_head_is_not_full) {
  fixture f;
  uint64_t pos, stale;
  int k;

  setup(&f, 64u << 10);
  define_all(f.r.h);
  stale = atomic_load(&f.r.h->head);
  for (k = 0; k < 100; k++)
    put_return_to(f.r.h, k);
  ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect_none, NULL);
  ck_assert_uint_gt(atomic_load(&f.r.h->tail), stale);
  tail_cache = atomic_load(&f.r.h->tail);   /* a writer that saw the reader catch up */
  ck_assert_ptr_nonnull(ks_ring_reserve_from(f.r.h, 48, &pos, stale, &tail_cache));
  ck_assert_uint_eq(pos, atomic_load(&f.r.h->tail));
  ck_assert_uint_eq(atomic_load(&f.r.h->drops), 0);
  teardown(&f);
}
END_TEST

/* A writer's cached tail from another ring (ahead of this one's head: the
 * fuzzer's ring was made anew under it) must not hang it or look full. */
START_TEST(test_foreign_tail_cache) {
  fixture f;
  uint64_t pos;

  setup(&f, 64u << 10);
  tail_cache = 1ull << 40;
  ck_assert_ptr_nonnull(ks_ring_reserve(f.r.h, 48, &pos, &tail_cache));
  ck_assert_uint_eq(pos, 0);
  ck_assert_uint_eq(tail_cache, 0);
  teardown(&f);
}
END_TEST

START_TEST(test_wraps_around) {
  fixture f;
  int lap, k, total = 0;

  setup(&f, 64u << 10);
  define_all(f.r.h);
  ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g);
  /* 72-byte records over 16 laps and more: records straddle the end of the data. */
  for (lap = 0; lap < 20 * 64; lap++) {
    for (k = 0; k < 12; k++)
      put_call(f.r.h, lap * 100 + k, M_WORD, 1, NULL);
    f.g.n = 0;
    ck_assert_uint_eq(ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g), 12);
    for (k = 0; k < 12; k++) {
      ck_assert_int_eq(f.g.d[k].ev.ts, lap * 100 + k);
      ck_assert_int_eq(f.g.d[k].payload.p[4], 'i');
    }
    total += f.g.n;
  }
  ck_assert_uint_gt(atomic_load(&f.r.h->head), 16 * (64u << 10));
  ck_assert_int_eq(total, 20 * 64 * 12);
  ck_assert_uint_eq(f.r.bad + f.r.unresolved, 0);
  teardown(&f);
}
END_TEST

START_TEST(test_unknown_words_and_bad_records) {
  fixture f;
  uint64_t pos;
  unsigned char *rec;

  setup(&f, 64u << 10);
  /* A call naming atoms never defined: counted, no event. */
  put_pid(f.r.h, PID_WORD, 1);
  put_call(f.r.h, 1, 0x9999bULL, 1, NULL);
  ck_assert_uint_eq(ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g), 2);
  ck_assert_int_eq(f.g.n, 0);
  ck_assert_uint_eq(f.r.unresolved, 1);
  /* A call whose lengths run past its record: bad. */
  rec = ks_ring_reserve(f.r.h, 64, &pos, &tail_cache);
  ck_assert_ptr_nonnull(rec);
  if (rec == NULL)
    return;
  memset(rec + 8, 0, 56);
  rec[8 + 48] = 200;   /* label_len */
  ks_ring_commit(f.r.h, rec, pos, 64, KS_REC_CALL, KS_RECF_LABEL);
  /* A record of an unknown type: bad. */
  rec = ks_ring_reserve(f.r.h, 16, &pos, &tail_cache);
  ks_ring_commit(f.r.h, rec, pos, 16, 99, 0);
  ck_assert_uint_eq(ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g), 2);
  ck_assert_uint_eq(f.r.bad, 2);
  /* A length the reader cannot trust: it gives up to the head, counted. */
  rec = ks_ring_reserve(f.r.h, 16, &pos, &tail_cache);
  atomic_store((_Atomic uint64_t *)(void *)rec, ks_ring_word0(pos, 4, KS_REC_CALL, 0));
  ck_assert_uint_eq(ks_ring_drain(&f.r, &f.in, SIZE_MAX, collect, &f.g), 0);
  ck_assert_uint_eq(f.r.bad, 3);
  ck_assert_uint_eq(atomic_load(&f.r.h->tail), atomic_load(&f.r.h->head));
  ck_assert_int_eq(f.g.n, 0);
  teardown(&f);
}
END_TEST

START_TEST(test_sink_routes_ring_events) {
  ks_sink s;
  tb_out out = {0};

  tb_sink_open(&s, NULL, &out);
  ck_assert_int_eq(ks_ring_open(&s.ring, 64u << 10), KS_OK);
  define_all(s.ring.h);
  put_call(s.ring.h, 10, M_WORD, 1, NULL);
  put_return_to(s.ring.h, 20);
  ks_sink_poll_ring(&s);
  ck_assert_uint_eq(s.st.trace_events, 2);
  ck_assert_uint_eq(s.st.events[KS_EV_CALL], 1);
  ck_assert_uint_eq(s.st.events[KS_EV_RETURN_TO], 1);
  /* A full ring makes an overload alert. */
  atomic_store(&s.ring.h->drops, 5);
  ks_sink_poll_ring(&s);
  ck_assert_int_eq(out.frames, 1);
  {
    char *alert = tb_out_reply(&out, 0);
    ck_assert_ptr_nonnull(strstr(alert, "what => ring_drops"));
    ck_assert_ptr_nonnull(strstr(alert, "value => 5,"));
    ck_assert_ptr_nonnull(strstr(alert, "bound => 0,"));
    free(alert);
  }
  tb_sink_close(&s, &out);
}
END_TEST

/* Process k of a run: its pid word, defined, then in, exit, out_exited; `at` ms. */
/* Process k's pid word (any distinct values). */
static uint64_t word_of(unsigned k) {
  return 0x100003ULL + ((uint64_t)k << 8);
}

static void short_lived(ks_sink *s, unsigned k, int64_t at_ms) {
  uint64_t word = word_of(k);
  int64_t ts = at_ms * 1000000;

  put_pid(s->ring.h, word, 1000 + k);
  put_event_of(s->ring.h, word, ts, KS_EV_IN, 0, 0, 0, 0, 0);
  put_event_of(s->ring.h, word, ts + 1000, KS_EV_EXIT, 0, 0, 0, 0, 0);
  put_event_of(s->ring.h, word, ts + 2000, KS_EV_OUT_EXITED, 0, 0, 0, 0, 0);
}

static ks_sink *pid_capped_sink(uint32_t max_pids, tb_out *out) {
  ks_sink *s = calloc(1, sizeof(*s));
  ks_sink_opts o;

  ck_assert_ptr_nonnull(s);
  ks_sink_default_opts(&o);
  o.limits.max_pids = max_pids;
  tb_sink_open(s, &o, out);
  ck_assert_int_eq(ks_ring_open(&s->ring, 256u << 10), KS_OK);
  return s;
}

/* A process per request, 5,000 of them, 5 ms apart, with room for 50 pids:
 * every exited process's id comes back, nothing is dropped or unresolved. */
START_TEST(test_exited_pids_give_their_ids_back) {
  tb_out out = {0};
  ks_sink *s = pid_capped_sink(50, &out);
  unsigned k;

  for (k = 0; k < 5000; k++) {
    short_lived(s, k, 5 * (int64_t)k);
    if (k % 25 == 24)
      ks_sink_poll_ring(s);
  }
  ks_sink_poll_ring(s);
  ck_assert_uint_eq(s->st.trace_events, 3 * 5000);
  ck_assert_uint_eq(s->in.dropped_pids, 0);
  ck_assert_uint_eq(s->ring.full, 0);
  ck_assert_uint_eq(s->ring.unresolved, 0);
  ck_assert_uint_eq(s->ring.bad, 0);
  ck_assert_uint_le(ks_intern_pids_live(&s->in), 50);
  ck_assert_uint_le(s->in.n_pids, 50);
  /* Those within the grace (100 ms: 20 processes) or not yet swept keep theirs. */
  ck_assert_uint_ge(s->in.pids_freed, 5000 - 50);
  ks_sink_free(s);
  free(s);
  tb_out_free(&out);
}
END_TEST

/* The same without reclaiming (processes that do not exit): the cap drops, counted. */
START_TEST(test_live_pids_past_the_cap_are_counted) {
  tb_out out = {0};
  ks_sink *s = pid_capped_sink(50, &out);
  unsigned k;

  for (k = 0; k < 60; k++) {
    put_pid(s->ring.h, word_of(k), 1000 + k);
    put_event_of(s->ring.h, word_of(k), 5000000 * (int64_t)k, KS_EV_IN, 0, 0, 0, 0, 0);
  }
  ks_sink_poll_ring(s);
  ck_assert_uint_eq(s->in.dropped_pids, 10);
  ck_assert_uint_eq(s->ring.full, 10);
  ck_assert_uint_eq(s->in.pids_freed, 0);
  tb_sink_close(s, &out);
  free(s);
}
END_TEST

/* The id the sink's ring reader has for a pid word, KS_NONE if none. */
static uint32_t id_of_word(const ks_sink *s, uint64_t word) {
  return ks_itab_get(&s->ring.pids, &word, 8, ks_hash(&word, 8));
}

/* A process of a flame capture keeps its id, exited or not, until the capture
 * is dropped (its files are written from those ids); then it is released. */
START_TEST(test_captured_pid_is_kept_until_the_capture_goes) {
  tb_out out = {0};
  ks_sink *s = pid_capped_sink(8, &out);
  ks_fopts o;
  ks_pid_view v;
  uint32_t id;
  unsigned k;
  int slot;

  put_pid(s->ring.h, PID_WORD, 42);
  put_event(s->ring.h, 1000000, KS_EV_IN, 0, 0, 0, 0, 0);
  ks_sink_poll_ring(s);
  id = id_of_word(s, PID_WORD);
  ck_assert_uint_ne(id, KS_NONE);
  ks_fopts_default(&o);
  slot = ks_flame_start(&s->flame, 1, &o);
  ck_assert_int_ge(slot, 0);
  ck_assert_int_eq(ks_flame_add_pid(&s->flame, &s->flame.cap[slot], id, NULL, 0), KS_OK);
  put_event(s->ring.h, 2000000, KS_EV_EXIT, 0, 0, 0, 0, 0);
  /* 25 ms apart: 4 processes within a grace period, and the captured one: room for 8. */
  for (k = 0; k < 200; k++) {
    short_lived(s, k, 10 + 25 * (int64_t)k);
    ks_sink_poll_ring(s);
  }
  ck_assert_uint_eq(s->in.dropped_pids, 0);
  ck_assert_int_eq(ks_intern_pid_get(&s->in, id, &v), KS_OK);
  ck_assert_uint_eq(v.num, 42);
  ck_assert_uint_eq(id_of_word(s, PID_WORD), id);
  ks_flame_drop(&s->flame, &s->flame.cap[slot]);
  for (k = 200; k < 400; k++) {
    short_lived(s, k, 10 + 25 * (int64_t)k);
    ks_sink_poll_ring(s);
  }
  ck_assert_uint_eq(s->in.dropped_pids, 0);
  ck_assert_uint_eq(id_of_word(s, PID_WORD), KS_NONE);
  ck_assert(ks_intern_pid_get(&s->in, id, &v) != KS_OK || v.num != 42);
  tb_sink_close(s, &out);
  free(s);
}
END_TEST

/* Issue 11: the shm name was predictable, so another local user could create
 * it first and push the tiers onto the port. Now each ring gets 64 random
 * bits in its name, created O_EXCL with mode 0600 (ring.c, create_shm). */
START_TEST(test_ring_names_are_unpredictable) {
  ks_ring_reader r[8];
  char path[96];
  struct stat st;
  int k, j;

  for (k = 0; k < 8; k++) {
    ks_ring_reader_init(&r[k]);
    ck_assert_int_eq(ks_ring_open(&r[k], 64u << 10), KS_OK);
    ck_assert_uint_ge(strlen(r[k].name), strlen("/kprof-1-") + 16);
    snprintf(path, sizeof(path), "/dev/shm%s", r[k].name);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    for (j = 0; j < k; j++) {
      /* The random part differs, not only the name. */
      ck_assert_str_ne(strrchr(r[k].name, '-'), strrchr(r[j].name, '-'));
    }
  }
  for (k = 0; k < 8; k++)
    ks_ring_close(&r[k]);
}
END_TEST

START_TEST(test_replay_garbage) {
  fixture f;
  unsigned char junk[512];
  size_t k;

  memset(&f, 0, sizeof(f));
  ks_ring_reader_init(&f.r);
  ck_assert_int_eq(ks_intern_init(&f.in, NULL), KS_OK);
  for (k = 0; k < sizeof(junk); k++)
    junk[k] = (unsigned char)(k * 37 + 11);
  ks_ring_replay(&f.r, &f.in, junk, sizeof(junk), collect, &f.g);
  ck_assert_uint_ge(f.r.bad, 1);
  ks_ring_close(&f.r);
  ks_intern_free(&f.in);
}
END_TEST

Suite *ring_suite(void) {
  Suite *s = suite_create("ring");
  TCase *tc = tcase_create("ring");

  tcase_add_test(tc, test_events);
  tcase_add_test(tc, test_call_mfa);
  tcase_add_test(tc, test_event_records_match_the_decoder);
  tcase_add_test(tc, test_bad_event_records);
  tcase_add_test(tc, test_reads_and_names);
  tcase_add_test(tc, test_uncommitted_stops_the_read);
  tcase_add_test(tc, test_full_ring_counts_drops);
  tcase_add_test(tc, test_stale_head_is_not_full);
  tcase_add_test(tc, test_foreign_tail_cache);
  tcase_add_test(tc, test_wraps_around);
  tcase_add_test(tc, test_unknown_words_and_bad_records);
  tcase_add_test(tc, test_sink_routes_ring_events);
  tcase_add_test(tc, test_replay_garbage);
  tcase_add_test(tc, test_ring_names_are_unpredictable);
  tcase_add_test(tc, test_exited_pids_give_their_ids_back);
  tcase_add_test(tc, test_live_pids_past_the_cap_are_counted);
  tcase_add_test(tc, test_captured_pid_is_kept_until_the_capture_goes);
  suite_add_tcase(s, tc);
  return s;
}
