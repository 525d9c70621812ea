/* speedscope.c: speedscope's JSON file format, one evented profile per process.
 *
 * https://www.speedscope.app/file-format-schema.json. Frames are shared;
 * each process's profile is its merged timeline (see ks_fwalk): an O event
 * where a call path starts, a C event where it ends, in microseconds from 0,
 * siblings in first-seen order and a node's self time after its children.
 * Events are balanced and `at` never decreases. Time order is therefore not
 * the order things happened in (nothing is stored per event to know it):
 * the "Left Heavy" and "Sandwich" views are exact, "Time Order" shows the
 * merged timeline. The process is the profile's name, not a frame. The
 * file's name says whether the times are corrected for tracing's cost.
 */
#include <stdlib.h>

#include "ks_write.h"

/* A slot of the frame table: a frame id's index in shared.frames. */
typedef struct frame_slot {
  uint32_t index, frame;       /* index KS_NONE: an empty slot */
} frame_slot;

typedef struct sscope {
  const ks_fout *o;
  FILE *f;
  ks_hmap frames;              /* of frame_slot, sized for every node: it never grows */
  int first;
} sscope;

/* The frame's slot, or the empty one where it goes. */
static size_t slot_of(const sscope *w, uint32_t frame) {
  const frame_slot *s;
  size_t i;

  for (s = ks_hmap_run(&w->frames, sizeof(*s), ks_hmap_fib(frame), &i); s != NULL;
       s = ks_hmap_step(&w->frames, sizeof(*s), &i))
    if (s->frame == frame)
      break;
  return i;
}

static frame_slot *slot_at(const sscope *w, size_t i) {
  return ks_hmap_at(&w->frames, sizeof(frame_slot), i);
}

static void put_us(FILE *f, uint64_t ns) {
  fprintf(f, "%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
}

static int event(sscope *w, char type, uint32_t node, uint64_t at) {
  const frame_slot *s = slot_at(w, slot_of(w, w->o->g->tree.v[node].frame));

  fprintf(w->f, "%s{\"type\":\"%c\",\"frame\":%u,\"at\":", w->first ? "" : ",", type, s->index);
  put_us(w->f, at);
  putc('}', w->f);
  w->first = 0;
  return ferror(w->f) ? KS_EINVAL : 1;
}

static int open_node(void *ctx, uint32_t node, uint32_t depth, uint64_t t) {
  return depth == 0 ? 1 : event(ctx, 'O', node, t);
}

static int close_node(void *ctx, uint32_t node, uint32_t depth, uint64_t t) {
  sscope *w = ctx;

  return depth == 0 ? 1 : event(w, 'C', node, t + w->o->total[node]);
}

/* shared.frames: every frame below a process root that has time, first seen first. */
static int write_frames(sscope *w) {
  const ks_ftree *tr = &w->o->g->tree;
  char name[2048];
  uint32_t k, nframes = 0, size = 16;
  size_t i;
  frame_slot *s;
  size_t n;

  while (size < 2 * tr->n)
    size *= 2;
  if (ks_hmap_init(&w->frames, sizeof(frame_slot), size) != KS_OK)
    return KS_ENOMEM;
  fputs("\"shared\":{\"frames\":[", w->f);
  for (k = 1; k < tr->n && !ferror(w->f); k++) {
    if (w->o->total[k] == 0 || tr->v[k].parent == 0)
      continue;
    i = slot_of(w, tr->v[k].frame);
    if (!ks_hmap_empty(slot_at(w, i)))
      continue;
    s = ks_hmap_put(&w->frames, sizeof(frame_slot), i);
    s->index = nframes;
    s->frame = tr->v[k].frame;
    n = ks_callpath_frame_name(w->o->g, w->o->in, tr->v[k].frame, name, sizeof(name));
    fputs(nframes++ ? ",{\"name\":" : "{\"name\":", w->f);
    ks_write_put_json(w->f, name, n);
    putc('}', w->f);
  }
  fputs("]},", w->f);
  return ferror(w->f) ? KS_EINVAL : KS_OK;
}

int ks_write_speedscope(const ks_fout *o, FILE *f) {
  const ks_ftree *tr = &o->g->tree;
  char name[2048];
  sscope w;
  uint32_t k;
  size_t n;
  int rc, nprof = 0;

  memset(&w, 0, sizeof(w));
  w.o = o;
  w.f = f;
  fputs("{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",", f);
  /* The file's name (speedscope's title) says whether times are corrected. */
  n = (size_t)snprintf(name, sizeof(name), "kprof flame %lld; ", (long long)o->g->id);
  n += ks_callpath_correction_text(o->g, name + n, sizeof(name) - n);
  fputs("\"name\":", f);
  if (ferror(f))
    return KS_EINVAL;
  ks_write_put_json(f, name, n);
  fputs(",\"exporter\":\"kprof " KS_VERSION "\",\"activeProfileIndex\":0,", f);
  rc = write_frames(&w);
  if (rc == KS_OK) {
    fputs("\"profiles\":[", f);
    for (k = tr->v[0].child; k != KS_NONE && rc >= 0; k = tr->v[k].sibling) {
      if (o->total[k] == 0)
        continue;
      n = ks_callpath_frame_name(o->g, o->in, tr->v[k].frame, name, sizeof(name));
      fputs(nprof++ ? ",{\"type\":\"evented\",\"name\":" : "{\"type\":\"evented\",\"name\":", f);
      ks_write_put_json(f, name, n);
      fputs(",\"unit\":\"microseconds\",\"startValue\":0,\"endValue\":", f);
      put_us(f, o->total[k]);
      fputs(",\"events\":[", f);
      w.first = 1;
      rc = ks_fwalk(o, k, open_node, close_node, &w);
      fputs("]}", f);
    }
    fputs("]}\n", f);
  }
  ks_hmap_free(&w.frames);
  if (rc < 0)
    return rc;
  return ferror(f) ? KS_EINVAL : KS_OK;
}
