/* stack_quality.c: flame stacks without {caller} against the BEAM's own (`make bench-stacks`).
 *
 *   stack_quality TRACE [DEPTH...]
 *
 * TRACE is a stream dbg's file trace port wrote (bench/flame_real.erl:
 * each event a 0 byte, a 4-byte length and the VM's external term), traced
 * with kprof's flags and {message, {caller}}. Every event goes through the
 * sink's flame code into several captures of every process at once: one
 * with the search rules (callers: the BEAM's stack, the reference) and one
 * with the flow rules (no caller read) per DEPTH, the depth past which they
 * fold loops: N, learning tail calls, or Nn, not (default 128n 32 64 128
 * 1000000).
 * Before each event, the stacks the captures hold for its process are
 * compared over the time since the process's last event (it is the stack
 * that time goes to), while the process runs:
 *   top      the top frames run the same function;
 *   parent   ... and the frames below them too;
 *   equal    the flow stack is the BEAM stack with direct recursion folded
 *            (f;f;f as f);
 *   subseq   the folded BEAM stack's frames are all in the flow stack, in
 *            order (the flow stack may have more: tail callers);
 *   subseq_folded  the same, the BEAM stack folded past DEPTH as the flow
 *            rules fold theirs;
 * and the mean and largest depths, the tree's nodes (distinct paths). One
 * RESULT line per capture.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flame/ks_flame.h"

#define MAXCAP 16

typedef struct score {
  double top, parent, equal, subseq, folded, time, depth;
  uint32_t max_depth;
} score;

static ks_intern in;
static ks_flame fl;
static ks_fcap *caps[MAXCAP];
static uint32_t depths[MAXCAP];
static int learns[MAXCAP];
static score scores[MAXCAP];
static int ncaps;
static uint32_t *norm, *flow, *loops;
static size_t cap_frames;

/* out[0, n) folded as the flow rules fold a stack (ks_stack_call_flow): past
 * `depth' frames, a function already on it goes back to its first frame. */
static size_t fold_deep(uint32_t *out, size_t n, uint32_t depth) {
  size_t m = 0, i, j;

  for (j = 0; j < n; j++) {
    if (m > 0 && out[m - 1] == out[j])
      continue;
    for (i = 0; m >= depth && i + 1 < m && out[i] != out[j]; i++)
      ;
    if (m >= depth && i + 1 < m)
      m = i + 1;
    else
      out[m++] = out[j];
  }
  return m;
}

/* The stack's functions, bottom first; with fold, direct recursion as one. */
static size_t frames_of(const ks_fproc *p, int fold, uint32_t *out) {
  size_t n = 0;
  uint32_t k, m;

  for (k = 0; k < p->st.n && k < cap_frames; k++) {
    m = ks_stack_at(&p->st, k)->mfa;
    if (!fold || n == 0 || out[n - 1] != m)
      out[n++] = m;
  }
  return n;
}

static int subsequence(const uint32_t *a, size_t na, const uint32_t *b, size_t nb) {
  size_t i = 0, j;

  for (j = 0; j < nb && i < na; j++)
    if (a[i] == b[j])
      i++;
  return i == na;
}

/* Scores the stacks of pid for the time until ts. */
static void compare(uint32_t pid, int64_t ts) {
  const ks_fproc *ref = ks_callpath_proc(&caps[0]->cp, pid), *p;
  size_t nr, nf;
  double dt;
  int c;

  if (ref == NULL || !ref->has_ts || ts <= ref->last_ts || ref->out || ref->st.n == 0 ||
      !ref->armed || ref->dead)
    return;
  dt = (double)(ts - ref->last_ts);
  nr = frames_of(ref, 1, norm);
  for (c = 0; c < ncaps; c++) {
    score *s = &scores[c];
    p = c == 0 ? ref : ks_callpath_proc(&caps[c]->cp, pid);
    if (p == NULL)
      continue;
    nf = frames_of(p, c != 0, flow);
    if (c == 0)
      nf = frames_of(p, 0, flow);
    s->time += dt;
    s->depth += dt * (double)nf;
    if (nf > s->max_depth)
      s->max_depth = (uint32_t)nf;
    if (c == 0)
      continue;
    if (nf > 0 && flow[nf - 1] == norm[nr - 1]) {
      s->top += dt;
      if ((nf == 1 && nr == 1) || (nf > 1 && nr > 1 && flow[nf - 2] == norm[nr - 2]))
        s->parent += dt;
    }
    if (nf == nr && memcmp(flow, norm, nr * sizeof(*norm)) == 0)
      s->equal += dt;
    if (subsequence(norm, nr, flow, nf))
      s->subseq += dt;
    memcpy(loops, norm, nr * sizeof(*norm));
    if (subsequence(loops, fold_deep(loops, nr, depths[c]), flow, nf))
      s->folded += dt;
  }
}

static void add_pid(uint32_t pid) {
  int c;

  for (c = 0; c < ncaps; c++)
    if (ks_callpath_proc(&caps[c]->cp, pid) == NULL) {
      ks_flame_add_pid(&fl, caps[c], pid, NULL, 0);
      /* Traced from its start (set_on_spawn, or the recorder's process
       * before its work): no return goes below its bottom frame. */
      ks_callpath_proc(&caps[c]->cp, pid)->bottom = 1;
    }
}

int main(int argc, char **argv) {
  const unsigned char *b;
  struct stat st;
  size_t off = 0, len;
  uint64_t events = 0;
  ks_decoded d;
  ks_fopts o;
  int fd, c, k;


  if (argc < 2) {
    fprintf(stderr, "usage: stack_quality TRACE [WINDOW...]\n");
    return 2;
  }
  if ((fd = open(argv[1], O_RDONLY)) < 0 || fstat(fd, &st) != 0 ||
      (b = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
    perror(argv[1]);
    return 2;
  }
  if (ks_intern_init(&in, NULL) != KS_OK)
    return 2;
  ks_flame_init(&fl);
  cap_frames = 1 << 16;
  norm = malloc(cap_frames * sizeof(*norm));
  flow = malloc(cap_frames * sizeof(*flow));
  loops = malloc(cap_frames * sizeof(*loops));
  if (norm == NULL || flow == NULL || loops == NULL)
    return 2;
  /* DEPTH arguments: N (learning tail calls) or Nn (not learning). */
  for (k = 1; k < (argc > 2 ? argc : 6) && ncaps < MAXCAP; k++) {
    static const char *const def[] = {"", "128n", "32", "64", "128", "1000000"};
    const char *w = argc > 2 ? argv[k] : def[k - 1];
    ks_fopts_default(&o);
    o.max_bytes = (uint64_t)8 << 30;   /* no path left out: both graphs whole */
    o.callers = k == 1;                /* the first: the search rules, the reference */
    if (k > 1) {
      o.fold_depth = (uint32_t)strtoul(w, NULL, 10);
      o.learn = strchr(w, 'n') == NULL;
    }
    depths[ncaps] = o.fold_depth;
    learns[ncaps] = o.learn;
    caps[ncaps] = &fl.cap[ks_flame_start(&fl, ncaps + 1, &o)];
    ncaps++;
  }
  while (off + 5 <= (size_t)st.st_size) {
    len = ks_be32(b + off + 1);
    if (b[off] != 0 || off + 5 + len > (size_t)st.st_size)
      break;
    if (ks_decode_frame(&in, b + off + 5, len, &d) == KS_FRAME_TRACE && d.ev.pid != KS_NONE) {
      if (d.ev.kind == KS_EV_SPAWNED || events == 0 ||
          (d.ev.kind != KS_EV_SPAWN && ks_callpath_proc(&caps[0]->cp, d.ev.pid) == NULL))
        add_pid(d.ev.pid);
      if (d.ev.flags & KS_EVF_TS)
        compare(d.ev.pid, d.ev.ts);
      ks_flame_event(&fl, &in, &d);
      events++;
    }
    off += 5 + len;
  }
  printf("events %llu\n", (unsigned long long)events);
  for (c = 0; c < ncaps; c++) {
    score *s = &scores[c];
    double t = scores[0].time > 0 ? scores[0].time : 1;
    if (c == 0)
      printf("RESULT model=callers nodes=%u mean_depth=%.1f max_depth=%u lost=%llu unknown=%llu\n",
             caps[c]->cp.tree.n, s->depth / t, s->max_depth,
             (unsigned long long)caps[c]->cp.k.lost_frames,
             (unsigned long long)caps[c]->cp.k.unknown_callers);
    else
      printf("RESULT model=flow fold_depth=%u learn=%d nodes=%u mean_depth=%.1f max_depth=%u "
             "top=%.4f parent=%.4f equal=%.4f subseq=%.4f subseq_folded=%.4f\n",
             depths[c], learns[c], caps[c]->cp.tree.n, s->depth / t, s->max_depth, s->top / t, s->parent / t,
             s->equal / t, s->subseq / t, s->folded / t);
  }
  ks_flame_free(&fl);
  ks_intern_free(&in);
  free(norm);
  free(flow);
  free(loops);
  return 0;
}
