/* perf.c: `perf script` text, as if a sampling profiler had watched the processes.
 *
 * Each process is a thread (comm = its name, tid = the N of <0.N.S>); its
 * stacks start above it (the folded stacks' `root;frames` is `comm;frames`
 * here, as stackcollapse-perf.pl folds it). Its
 * merged timeline (see ks_fwalk) is sampled every `period`: a sample at
 * t = k * period + phase shows the call path whose self time (start, end]
 * holds t. phase is half a period, moved by less than 1 us to a point
 * where the folded file's running sum rounds (port/write/folded.c: 500 ns past
 * a whole us of the capture's timeline, on which this process starts at
 * `origin`): a path with a sample has a count of at least 1 in the folded
 * file, so no path of this file is missing there (a path of 0.4 us took a
 * sample and rounded to nothing in the folded file).
 * Viewers weigh samples by count (Firefox Profiler) or by the time between
 * them (speedscope), so evenly spaced samples are right for both; a path
 * with less than half a period of self time may not show. The period is
 * the capture's perf_period_us, or chosen so the file has about 20,000
 * samples (at least 10 us). Sample lines:
 *
 *   comm tid/tid [000] SECONDS: PERIOD_NS cpu-clock:
 *   \t<hex> Module:Function/Arity (erlang)      leaf first, one per frame
 *   <blank>
 */
#include <stdlib.h>

#include "ks_write.h"

#define TARGET_SAMPLES 20000
#define MIN_PERIOD_NS 10000

typedef struct perf {
  const ks_fout *o;
  FILE *f;
  uint64_t period;
  uint64_t origin;      /* where the process starts on the capture's timeline */
  char comm[1024];
  uint32_t tid;
  char *stack;          /* the lines of the current node's stack */
  size_t stack_len, stack_cap;
  char name[2048], esc[6144];
} perf;

static int append(perf *w, const char *s, size_t n) {
  if (w->stack_len + n > w->stack_cap) {
    size_t cap = w->stack_cap * 2 > w->stack_len + n ? w->stack_cap * 2 : w->stack_len + n;
    char *p = realloc(w->stack, cap);
    if (p == NULL)
      return KS_ENOMEM;
    w->stack = p;
    w->stack_cap = cap;
  }
  memcpy(w->stack + w->stack_len, s, n);
  w->stack_len += n;
  return KS_OK;
}

/* The frames from node down to the one above the process's root, leaf first:
 * the process is the sample's comm, not a frame (stackcollapse-perf.pl puts
 * the comm at the bottom, so a root frame would show the process twice). */
static int build_stack(perf *w, uint32_t node) {
  const ks_ftree *tr = &w->o->g->tree;
  char line[64];
  size_t n;
  int k;

  w->stack_len = 0;
  for (; node != 0 && node != KS_NONE && tr->v[node].parent != 0; node = tr->v[node].parent) {
    n = ks_callpath_frame_name(w->o->g, w->o->in, tr->v[node].frame, w->name, sizeof(w->name));
    n = ks_write_escape_folded(w->name, n, w->esc, sizeof(w->esc));
    k = snprintf(line, sizeof(line), "\t%x ", node);
    if (append(w, line, (size_t)k) != KS_OK || append(w, w->esc, n) != KS_OK ||
        append(w, " (erlang)\n", 10) != KS_OK)
      return KS_ENOMEM;
  }
  return KS_OK;
}

static int close_node(void *ctx, uint32_t node, uint32_t depth, uint64_t t) {
  perf *w = ctx;
  uint64_t end = t + w->o->total[node], self = w->o->g->tree.v[node].self;
  uint64_t start = end - self, half = w->period / 2, k, at;
  uint64_t phase = half + (1500 - (w->origin + half) % 1000) % 1000;

  if (self == 0)
    return 1;
  /* The first k with k * period + phase > start. */
  k = start < phase ? 0 : (start - phase) / w->period + 1;
  if (k * w->period + phase > end)
    return 1;
  if (build_stack(w, node) != KS_OK)
    return KS_ENOMEM;
  for (; (at = k * w->period + phase) <= end && !ferror(w->f); k++) {
    uint64_t us = 1000000 + at / 1000;   /* times start at 1 s: 0 reads as unset */
    fprintf(w->f, "%s %u/%u [000] %llu.%06llu: %llu cpu-clock:\n", w->comm, w->tid, w->tid,
            (unsigned long long)(us / 1000000), (unsigned long long)(us % 1000000),
            (unsigned long long)w->period);
    fwrite(w->stack, 1, w->stack_len, w->f);
    putc('\n', w->f);
  }
  return ferror(w->f) ? KS_EINVAL : 1;
}

int ks_write_perf(const ks_fout *o, FILE *f) {
  const ks_ftree *tr = &o->g->tree;
  ks_pid_view pv;
  perf w;
  uint32_t k;
  size_t n;
  int rc = KS_OK;

  memset(&w, 0, sizeof(w));
  w.o = o;
  w.f = f;
  /* A comment block of its own (a blank line after it: readers split events
   * on blank lines), as perf script's own header is. */
  ks_callpath_correction_text(o->g, w.name, sizeof(w.name));
  fprintf(f, "# %s\n\n", w.name);
  if (o->g->o.perf_period_us > 0) {
    w.period = (uint64_t)o->g->o.perf_period_us * 1000;
  } else {
    w.period = (o->grand / TARGET_SAMPLES + 999) / 1000 * 1000;
    if (w.period < MIN_PERIOD_NS)
      w.period = MIN_PERIOD_NS;
  }
  for (k = tr->v[0].child; k != KS_NONE && rc >= 0; k = tr->v[k].sibling) {
    n = ks_callpath_frame_name(o->g, o->in, tr->v[k].frame, w.name, sizeof(w.name));
    ks_write_escape_folded(w.name, n, w.comm, sizeof(w.comm));
    /* A group of processes (option group) is a thread of its own, numbered past any
     * pid; the budget's root-level OVER_BUDGET node is thread 0. */
    if (KS_FR_KIND(tr->v[k].frame) == KS_FR_GROUP)
      w.tid = 0x40000000u + KS_FR_VAL(tr->v[k].frame);
    else if (KS_FR_KIND(tr->v[k].frame) == KS_FR_PROC &&
             ks_intern_pid_get(o->in, KS_FR_VAL(tr->v[k].frame), &pv) == KS_OK)
      w.tid = pv.num;
    else
      w.tid = 0;
    /* Each process is its own timeline from 0, at origin on the capture's. */
    rc = ks_fwalk(o, k, NULL, close_node, &w);
    w.origin += o->total[k];
  }
  free(w.stack);
  return rc < 0 ? rc : KS_OK;
}
