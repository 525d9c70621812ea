/* flame_sink.c: the sink's flame path on a real workload's events (`make bench-flame-sink`).
 *
 *   flame_sink TRACE RUNS
 *
 * TRACE is a stream dbg's file trace port wrote (bench/flame_real.erl record:
 * kprof's flags, {caller} on every call). Its events are turned into ring
 * records as the kprof_tracer NIF writes them (atoms and pids defined once,
 * calls as the pattern `true' writes them, or with their caller), into one
 * buffer in memory; each run then reads that buffer as the sink reads its
 * ring (ks_ring_replay: the record decoder, the MFA and pid tables) into one
 * flame capture of every process (ks_flame_event: stacks, the call-path
 * tree, the exact per-function counters of `top'), and writes the folded
 * file to /dev/null. Two captures of the same events: the flow rules (the
 * default: calls without their caller) and the search rules (callers =>
 * true). CPU time of this thread (CLOCK_THREAD_CPUTIME_ID) around the read,
 * and around the write; medians of RUNS. One RESULT line per mode.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "flame/ks_flame.h"
#include "ring/ks_ring_reader.h"

typedef struct buf {
  unsigned char *p;
  size_t n, cap;
} buf;

static void put(buf *b, const void *s, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = b->cap ? b->cap * 2 : (64u << 20);
    while (b->cap < b->n + n)
      b->cap *= 2;
    if ((b->p = realloc(b->p, b->cap)) == NULL) {
      perror("realloc");
      exit(2);
    }
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}

/* One record: word 0 (no stamp: ks_ring_replay reads no stamp), body, padding. */
static void rec(buf *b, unsigned type, unsigned flags, const void *body, size_t n) {
  size_t len = ks_ring_align(8 + n);
  uint64_t w0 = ks_ring_word0(0, len, type, flags);
  static const unsigned char zero[8];

  put(b, &w0, 8);
  put(b, body, n);
  put(b, zero, len - 8 - n);
}

/* Atom words: a fake immediate per distinct name (index << 6 | 0xB). */
static ks_itab atoms;
static uint32_t natoms;
static uint8_t *pid_done;
static uint32_t pid_cap;

static uint64_t atom_word(buf *b, const char *name) {
  size_t n = strlen(name);
  uint64_t h = ks_hash(name, n);
  uint32_t id = ks_itab_get(&atoms, name, n, h);
  uint64_t w;
  unsigned char body[16 + 1024];
  ks_rec_atom a;

  if (id != KS_NONE)
    return (uint64_t)id << 6 | 0xB;
  id = natoms++;
  if (ks_itab_put(&atoms, name, n, h, id, NULL) != KS_OK)
    exit(2);
  w = (uint64_t)id << 6 | 0xB;
  memset(&a, 0, sizeof(a));
  a.atom = w;
  a.len = (uint16_t)n;
  memcpy(body, (unsigned char *)&a + 8, sizeof(a) - 8);
  memcpy(body + sizeof(a) - 8, name, n);
  rec(b, KS_REC_ATOM, 0, body, sizeof(a) - 8 + n);
  return w;
}

/* A pid's word (its id in the converter's table), defined at first use. */
static uint64_t pid_word(buf *b, const ks_intern *in, uint32_t pid) {
  unsigned char body[64], etf[40];
  ks_pid_view v;
  ks_rec_pid p;
  size_t n = 0;

  if (pid >= pid_cap && ks_grow(&pid_done, &pid_cap, pid, 1024, 1) != KS_OK)
    exit(2);
  if (!pid_done[pid] && ks_intern_pid_get(in, pid, &v) == KS_OK) {
    etf[n++] = 88;   /* NEW_PID_EXT: node atom, id, serial, creation */
    etf[n++] = 119;
    etf[n++] = (unsigned char)strlen(v.node);
    memcpy(etf + n, v.node, strlen(v.node));
    n += strlen(v.node);
    ks_put_be32(etf + n, v.num);
    ks_put_be32(etf + n + 4, v.serial);
    ks_put_be32(etf + n + 8, v.creation);
    n += 12;
    memset(&p, 0, sizeof(p));
    p.pid = (uint64_t)pid << 4 | 3;
    p.len = (uint16_t)n;
    memcpy(body, (unsigned char *)&p + 8, sizeof(p) - 8);
    memcpy(body + sizeof(p) - 8, etf, n);
    rec(b, KS_REC_PID, 0, body, sizeof(p) - 8 + n);
    pid_done[pid] = 1;
  }
  return (uint64_t)pid << 4 | 3;
}

static void mfa_words(buf *b, const ks_intern *in, uint32_t mfa, uint64_t *m, uint64_t *f,
                      uint8_t *arity) {
  ks_mfa_view v;

  if (ks_intern_mfa_get(in, mfa, &v) != KS_OK)
    exit(2);
  *m = atom_word(b, v.m);
  *f = atom_word(b, v.f);
  *arity = (uint8_t)v.arity;
}

/* The trace's events as ring records; callers: calls with their {caller}. */
static void convert(const unsigned char *t, size_t size, int callers, buf *b, uint64_t *events) {
  ks_intern in;
  ks_decoded d;
  size_t off = 0, len;

  if (ks_intern_init(&in, NULL) != KS_OK || ks_itab_init(&atoms, 4096) != KS_OK)
    exit(2);
  natoms = 0;
  memset(pid_done, 0, pid_cap);
  *events = 0;
  while (off + 5 <= size && t[off] == 0 && off + 5 + (len = ks_be32(t + off + 1)) <= size) {
    if (ks_decode_frame(&in, t + off + 5, len, &d) == KS_FRAME_TRACE && d.ev.pid != KS_NONE &&
        (d.ev.flags & KS_EVF_TS)) {
      uint64_t pw = pid_word(b, &in, d.ev.pid);
      if (d.ev.kind == KS_EV_CALL && d.ev.mfa != KS_NONE) {
        ks_rec_call c;
        memset(&c, 0, sizeof(c));
        c.ts = d.ev.ts;
        c.pid = pw;
        mfa_words(b, &in, d.ev.mfa, &c.m, &c.f, &c.arity);
        if (callers && (d.ev.flags & KS_EVF_CALLER)) {
          mfa_words(b, &in, d.ev.caller, &c.caller_m, &c.caller_f, &c.caller_arity);
          rec(b, KS_REC_CALL, KS_RECF_CALLER, (unsigned char *)&c + 8, sizeof(c) - 8);
        } else {
          ks_rec_mfa r;
          memset(&r, 0, sizeof(r));
          r.ts = c.ts;
          r.pid = pw;
          r.m = c.m;
          r.f = c.f;
          r.arity = c.arity;
          rec(b, KS_REC_CALL_MFA, 0, (unsigned char *)&r + 8, sizeof(r) - 8);
        }
        ++*events;
      } else if (d.ev.kind == KS_EV_RETURN_TO) {
        ks_rec_mfa r;
        unsigned fl = 0;
        memset(&r, 0, sizeof(r));
        r.ts = d.ev.ts;
        r.pid = pw;
        if (d.ev.mfa != KS_NONE) {
          mfa_words(b, &in, d.ev.mfa, &r.m, &r.f, &r.arity);
          fl = KS_RECF_MFA;
        }
        rec(b, KS_REC_RETURN_TO, fl, (unsigned char *)&r + 8, sizeof(r) - 8);
        ++*events;
      } else if (d.ev.kind == KS_EV_IN || d.ev.kind == KS_EV_OUT || d.ev.kind == KS_EV_EXIT ||
                 d.ev.kind == KS_EV_SPAWN || d.ev.kind == KS_EV_SPAWNED ||
                 d.ev.kind == KS_EV_OUT_EXITED) {
        ks_rec_event e;
        unsigned fl = 0;
        memset(&e, 0, sizeof(e));
        e.ts = d.ev.ts;
        e.pid = pw;
        e.kind = d.ev.kind;
        if (d.ev.mfa != KS_NONE) {
          mfa_words(b, &in, d.ev.mfa, &e.m, &e.f, &e.arity);
          fl |= KS_RECF_MFA;
        }
        if (d.ev.other != KS_NONE &&
            (d.ev.kind == KS_EV_SPAWN || d.ev.kind == KS_EV_SPAWNED)) {
          e.other = pid_word(b, &in, d.ev.other);
          fl |= KS_RECF_OTHER;
        }
        rec(b, KS_REC_EVENT, fl, (unsigned char *)&e + 8, sizeof(e) - 8);
        ++*events;
      }
    }
    off += 5 + len;
  }
  ks_itab_free(&atoms);
  ks_intern_free(&in);
}

typedef struct run_ctx {
  ks_flame *fl;
  ks_intern *in;
  ks_fcap *c;
  int started;
} run_ctx;

static void on_event(void *ctx, ks_decoded *d) {
  run_ctx *r = ctx;

  if (!r->started) {   /* the first process is flame_apply's caller; children join */
    ks_flame_add_pid(r->fl, r->c, d->ev.pid, NULL, 0);
    r->started = 1;
  }
  ks_flame_event(r->fl, r->in, d);
}

static double cpu_s(void) {
  struct timespec ts;

  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;

  return x < y ? -1 : x > y;
}

/* One run: read, then write folded to /dev/null; seconds of CPU each. */
static void run(const buf *b, int callers, double *read_s, double *write_s, uint32_t *nodes,
                uint64_t *bytes) {
  ks_ring_reader r;
  ks_intern in;
  ks_flame fl;
  ks_fopts o;
  run_ctx ctx;
  uint64_t *total;
  ks_fout out;
  FILE *f;
  double t0;

  ks_ring_reader_init(&r);
  if (ks_intern_init(&in, NULL) != KS_OK)
    exit(2);
  ks_flame_init(&fl);
  ks_fopts_default(&o);
  o.children = 1;
  o.top = 20;
  o.callers = callers;
  o.hide = KS_NONE - 1;   /* as flame_apply (no MFA has this id): the first process's stack
                           * starts at its first frame */
  ctx.fl = &fl;
  ctx.in = &in;
  ctx.c = &fl.cap[ks_flame_start(&fl, 1, &o)];
  ctx.started = 0;
  t0 = cpu_s();
  ks_ring_replay(&r, &in, b->p, b->n, on_event, &ctx);
  ks_flame_finish(&fl, ctx.c, 0, 0);
  *read_s = cpu_s() - t0;
  *nodes = ctx.c->cp.tree.n;
  *bytes = ctx.c->cp.tree.peak;
  t0 = cpu_s();
  ks_ftree_order(&ctx.c->cp.tree);
  total = malloc((size_t)ctx.c->cp.tree.n * sizeof(*total));
  f = fopen("/dev/null", "w");
  if (total == NULL || f == NULL)
    exit(2);
  ks_ftree_totals(&ctx.c->cp.tree, total);
  out.g = &ctx.c->cp;
  out.in = &in;
  out.total = total;
  out.grand = total[0];
  ks_write_folded(&out, f);
  fclose(f);
  free(total);
  *write_s = cpu_s() - t0;
  ks_flame_free(&fl);
  ks_ring_close(&r);
  ks_intern_free(&in);
}

int main(int argc, char **argv) {
  const unsigned char *t;
  struct stat st;
  int fd, runs, k, callers;

  if (argc != 3) {
    fprintf(stderr, "usage: flame_sink TRACE RUNS\n");
    return 2;
  }
  runs = atoi(argv[2]);
  if (runs < 1 || runs > 99 || (fd = open(argv[1], O_RDONLY)) < 0 || fstat(fd, &st) != 0 ||
      (t = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
    perror(argv[1]);
    return 2;
  }
  for (callers = 0; callers <= 1; callers++) {
    double rd[99], wr[99];
    uint64_t events, bytes = 0;
    uint32_t nodes = 0;
    buf b = {0};
    convert(t, (size_t)st.st_size, callers, &b, &events);
    for (k = 0; k < runs; k++)
      run(&b, callers, &rd[k], &wr[k], &nodes, &bytes);
    qsort(rd, (size_t)runs, sizeof(*rd), cmp_double);
    qsort(wr, (size_t)runs, sizeof(*wr), cmp_double);
    printf("RESULT model=%s events=%llu records_mb=%.1f read_cpu_s=%.3f events_per_s=%.0f "
           "nodes=%u tree_mb=%.1f write_folded_cpu_s=%.3f\n",
           callers ? "callers" : "flow", (unsigned long long)events, (double)b.n / 1e6,
           rd[runs / 2], (double)events / rd[runs / 2], nodes, (double)bytes / 1048576.0,
           wr[runs / 2]);
    fflush(stdout);
    free(b.p);
  }
  free(pid_done);
  return 0;
}
