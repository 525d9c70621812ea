/* sampler.c: a sampling session on a live VM (ks_sample.h): the events and
 * rings of its threads (perf_events.c), its perf map (perf_map.c), the ELF
 * names of its files (elf_syms.c) and its memory (vm_read.c), drained on
 * the sink's timer.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "ks_sample.h"

int64_t ks_sample_clock(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int live_read(void *ctx, const uint64_t *addrs, uint32_t n, uint64_t *out, uint8_t *ok) {
  ks_sampler *s = ctx;
  int rc = ks_vm_read_words(s->ospid, addrs, n, out, ok);

  if (s->rec.f != NULL)
    ks_srec_words(&s->rec, addrs, out, ok, n);
  return rc;
}

static void map_tap(void *ctx, int64_t now, const char *p, size_t n) {
  ks_srec_map(ctx, now, p, n);
}

static int by_id(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

  return x < y ? -1 : x > y;
}

void ks_sampler_sort_only(ks_sampler *s) {
  qsort(s->only, s->nonly, sizeof(*s->only), by_id);   /* a binary search per sample */
}

static int set_only(ks_sampler *s, const uint32_t *only, uint32_t n) {
  if (only == NULL)
    return KS_OK;
  if ((s->only = malloc((size_t)(n ? n : 1) * sizeof(*s->only))) == NULL)
    return KS_ENOMEM;
  memcpy(s->only, only, (size_t)n * sizeof(*only));
  s->nonly = n;
  ks_sampler_sort_only(s);
  return KS_OK;
}

int ks_sampler_start(ks_sampler *s, const ks_sampler_opts *o) {
  int rc;

  ks_sampler_free(s);
  if (o->pid_tmpl_n > sizeof(s->pid_tmpl) || o->hz == 0)
    return KS_EINVAL;
  s->ospid = o->ospid;
  s->hz = o->hz;
  s->period_ns = 1000000000ull / o->hz;
  memcpy(s->pid_tmpl, o->pid_tmpl, o->pid_tmpl_n);
  s->pid_tmpl_n = o->pid_tmpl_n;
  s->lay = o->lay;
  s->cal.nbeacons = o->nbeacons < KS_CAL_BEACONS ? o->nbeacons : KS_CAL_BEACONS;
  memcpy(s->cal.num, o->beacon_num, sizeof(s->cal.num));
  memcpy(s->cal.ser, o->beacon_ser, sizeof(s->cal.ser));
  s->calibrating = !s->lay.known && s->cal.nbeacons > 0;
  if ((rc = set_only(s, o->only, o->nonly)) != KS_OK)
    return rc;
  if (kill(s->ospid, 0) != 0 && errno == ESRCH) {
    ks_sampler_free(s);
    return -ESRCH;
  }
  if ((rc = ks_pmap_open(&s->map, s->ospid)) != KS_OK) {
    ks_sampler_free(s);
    return rc == -ENOENT ? KS_SAMPLE_NO_MAP : rc;
  }
  if ((rc = ks_pevents_start(&s->pe, s->ospid, s->hz)) != KS_OK) {
    ks_sampler_free(s);
    return rc;
  }
  s->max_stack = s->pe.max_stack;
  if (o->record != NULL && ks_srec_open(&s->rec, o->record, s, &s->lay) == KS_OK) {
    s->map.tap = map_tap;
    s->map.tap_ctx = &s->rec;
    if (s->only != NULL)
      ks_srec_only(&s->rec, s->in, s->only, s->nonly);
  }
  ks_elf_init(&s->elf, s->ospid);
  ks_elf_scan(&s->elf);
  ks_pmap_read(&s->map, ks_sample_clock(), ks_sampler_name, s);
  s->read_words = live_read;
  s->read_ctx = s;
  s->last_rescan = ks_sample_clock();
  s->active = 1;
  return KS_OK;
}

typedef struct drain_ctx {
  ks_sampler *s;
  ks_pevent *ev;
} drain_ctx;

static void on_record(void *ctx, const unsigned char *rec, size_t len) {
  drain_ctx *d = ctx;
  uint64_t read = d->s->k.read, lost = d->s->k.lost;

  if (d->s->rec.f != NULL)
    ks_srec_ring(&d->s->rec, d->ev->kind, rec, len);
  ks_sampler_record(d->s, d->ev->kind, rec, len);
  d->ev->samples += d->s->k.read - read;
  d->ev->lost += d->s->k.lost - lost;
}

/* Every ring into the pending samples, then the map, then the stacks. */
static void drain_all(ks_sampler *s, int64_t now) {
  drain_ctx d = {s, NULL};
  uint32_t k;

  for (k = 0; k < s->pe.n; k++) {
    d.ev = &s->pe.v[k];
    ks_pring_drain(&d.ev->ring, on_record, &d);
    s->k.bad += d.ev->ring.bad;
    d.ev->ring.bad = 0;
  }
  /* After the rings: every sample drained is older than this read, so the
   * lines its code was loaded with are in. */
  ks_pmap_read(&s->map, ks_sample_clock(), ks_sampler_name, s);
  ks_sampler_resolve(s);
  if (s->rec.f != NULL)
    ks_srec_drain(&s->rec, now);
}

int ks_sampler_drain(ks_sampler *s, int64_t now) {
  if (!s->active)
    return KS_OK;
  drain_all(s, now);
  if (now - s->last_rescan >= KS_RESCAN_NS) {
    s->last_rescan = now;
    ks_pevents_rescan(&s->pe);   /* threads gone were drained just now */
    if (s->k.unnamed > s->unnamed_at_scan) {   /* a library loaded since? */
      ks_elf_scan(&s->elf);
      s->unnamed_at_scan = s->k.unnamed;
    }
  }
  if (s->calibrating && ks_calib_result(&s->cal, KS_CAL_MIN, &s->lay) == KS_OK) {
    s->calibrating = 0;
    return KS_OK;
  }
  return s->calibrating ? KS_EINVAL : KS_OK;
}

void ks_sampler_window(ks_sampler *s, int64_t now) {
  s->calibrating = 0;
  s->windowed = 1;
  s->from = now;
  memset(&s->k, 0, sizeof(s->k));
  if (s->rec.f != NULL)
    ks_srec_layout(&s->rec, &s->lay, now);
}

void ks_sampler_stop(ks_sampler *s, int64_t now) {
  if (!s->active)
    return;
  ks_pevents_disable(&s->pe);
  drain_all(s, now);
  s->active = 0;
  if (s->rec.f != NULL)
    ks_srec_close(&s->rec);
}
