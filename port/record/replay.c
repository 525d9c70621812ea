/* replay.c: recorded files replayed into a capture of their own (ks_record.h).
 *
 * The first file's header gives the capture's options (the output-shaping
 * ones can be overridden); its ops are run through the same functions the
 * sink's commands and events call (ks_flame_event, ks_flame_add_pid, ...),
 * with the file's ids mapped to the replay's own intern table: the names are
 * interned in the order the file defines them, which is the order the live
 * capture first met them. Each file has ids of its own (a rotated file
 * defines its names again). A fault stops the replay where it is: what was
 * read stays in the capture, which is finished as flame_write would without
 * an end time, and rp->truncated and rp->err say why.
 */
#include <stdlib.h>

#include "ks_record.h"

#define REPLAY_ID 1

/* A file's ids -> the replay's, per table. */
typedef struct fmap {
  uint32_t *v;
  uint32_t n, cap;
} fmap;

typedef struct fmaps {
  fmap mfa, pid, name;
} fmaps;

static int fmap_push(fmap *m, uint32_t id) {
  if (ks_grow(&m->v, &m->cap, m->n, 256, sizeof(*m->v)) != KS_OK)
    return KS_ENOMEM;
  m->v[m->n++] = id;
  return KS_OK;
}

/* The replay's id of a file id: KS_NONE stays none; an id not defined is KS_EINVAL. */
static int fmap_get(const fmap *m, uint32_t id, uint32_t *out) {
  if (id == KS_NONE) {
    *out = KS_NONE;
    return KS_OK;
  }
  if (id >= m->n)
    return KS_EINVAL;
  *out = m->v[id];
  return KS_OK;
}

static void fmaps_free(fmaps *f) {
  free(f->mfa.v);
  free(f->pid.v);
  free(f->name.v);
  memset(f, 0, sizeof(*f));
}

/* A pid's text as the external term format's NEW_PID_EXT, interned. */
static int def_pid(ks_replay *rp, const ks_rop *op, uint32_t *id) {
  unsigned char raw[4 + KS_REC_NAME_MAX + 12];
  const ks_pid_view *v = &op->pidv;
  size_t n = op->text_n, k = 0;
  const uint32_t f[3] = {v->num, v->serial, v->creation};
  int i;

  if (n > 255 * 4)
    return KS_EINVAL;
  raw[k++] = 88;    /* NEW_PID_EXT */
  raw[k++] = 118;   /* ATOM_UTF8_EXT */
  raw[k++] = (unsigned char)(n >> 8);
  raw[k++] = (unsigned char)n;
  memcpy(raw + k, v->node, n);
  k += n;
  for (i = 0; i < 3; i++) {
    raw[k++] = (unsigned char)(f[i] >> 24);
    raw[k++] = (unsigned char)(f[i] >> 16);
    raw[k++] = (unsigned char)(f[i] >> 8);
    raw[k++] = (unsigned char)f[i];
  }
  return ks_intern_pid(&rp->in, (ks_slice){raw, k}, id) == KS_OK ? KS_OK : KS_EINVAL;
}

static int def_op(ks_replay *rp, fmaps *fm, const ks_rop *op) {
  ks_atom m = {(const unsigned char *)op->mfa.m, op->text_n, 1};
  ks_atom f = {(const unsigned char *)op->mfa.f, op->text2_n, 1};
  uint32_t id;

  switch (op->op) {
  case KS_ROP_DEF_MFA:
    if (m.n > 255 * 4 || f.n > 255 * 4 || ks_intern_mfa(&rp->in, &m, &f, op->mfa.arity, &id) != KS_OK)
      return KS_EINVAL;
    return fmap_push(&fm->mfa, id);
  case KS_ROP_DEF_PID:
    if (def_pid(rp, op, &id) != KS_OK)
      return KS_EINVAL;
    return fmap_push(&fm->pid, id);
  default:   /* a name: an atom's bytes, never empty */
    if (op->raw_n == 0 || ks_intern_term(&rp->in, (ks_slice){op->raw, op->raw_n}, &id) != KS_OK)
      return KS_EINVAL;
    return fmap_push(&fm->name, id);
  }
}

/* {kprof_flame, REPLAY_ID}: a trigger call's payload, as the match spec gives it. */
static const unsigned char trigger_payload[] = {104, 2, 119, 11, 'k', 'p', 'r', 'o', 'f', '_',
                                                'f', 'l', 'a', 'm', 'e', 97, REPLAY_ID};

static int event_op(ks_replay *rp, const fmaps *fm, const ks_rop *op) {
  ks_decoded d;
  const ks_event *e = &op->ev;

  ks_decoded_clear(&d);
  d.ev = *e;
  if (fmap_get(&fm->pid, e->pid, &d.ev.pid) != KS_OK ||
      fmap_get(&fm->mfa, e->mfa, &d.ev.mfa) != KS_OK ||
      fmap_get(&fm->pid, e->other, &d.ev.other) != KS_OK ||
      fmap_get(&fm->mfa, e->caller, &d.ev.caller) != KS_OK ||
      fmap_get(&fm->name, e->name, &d.ev.name) != KS_OK)
    return KS_EINVAL;
  if (op->trigger)
    d.payload = (ks_slice){trigger_payload, sizeof(trigger_payload)};
  ks_flame_event(&rp->fl, &rp->in, &d);
  rp->events++;
  return KS_OK;
}

static int apply(ks_replay *rp, fmaps *fm, const ks_rop *op) {
  ks_fcap *c = rp->c;
  uint32_t pid;

  switch (op->op) {
  case KS_ROP_DEF_MFA:
  case KS_ROP_DEF_PID:
  case KS_ROP_DEF_NAME:
    return def_op(rp, fm, op);
  case KS_ROP_EVENT:
    return event_op(rp, fm, op);
  case KS_ROP_ARM:
    c->cp.o.hold = 0;
    return KS_OK;
  case KS_ROP_FINISH:
    if (!c->stopped)
      ks_flame_finish(&rp->fl, c, op->has_end, op->end_ts);
    return KS_OK;
  case KS_ROP_TRAILER:
    return KS_OK;
  default:
    break;
  }
  if (fmap_get(&fm->pid, op->pid, &pid) != KS_OK || pid == KS_NONE)
    return KS_EINVAL;
  if (op->op == KS_ROP_ADD_PID)
    ks_flame_add_pid(&rp->fl, c, pid, op->text_n ? op->text : NULL, op->text_n);
  else if (op->op == KS_ROP_SET_CALL)
    ks_flame_set_call(c, pid, op->text, op->text_n);
  else
    ks_flame_restore_proc(&rp->fl, c, pid, op->state, op->text, op->text_n, op->text2,
                          op->text2_n);
  return KS_OK;
}

/* The capture, from the first file's header and the overrides. */
static int make_capture(ks_replay *rp, ks_fopts *o, const ks_replay_opts *ro) {
  int slot;

  ks_replay_override(ro, o);
  if ((slot = ks_flame_start(&rp->fl, REPLAY_ID, o)) < 0)
    return KS_ENOMEM;
  rp->c = &rp->fl.cap[slot];
  return KS_OK;
}

/* One file's ops: KS_OK, or KS_EINVAL when its header failed (nothing replayed). */
static int replay_one(ks_replay *rp, ks_rread *r, const char *path, const ks_replay_opts *ro,
                      ks_fopts *o) {
  fmaps fm;
  ks_rop op;
  int bad = 0;

  memset(&fm, 0, sizeof(fm));

  if (ks_rread_error(r) == 0 && rp->c == NULL && make_capture(rp, o, ro) != KS_OK) {
    rp->err = KS_RERR_CORRUPT;   /* no memory for the capture */
    return KS_ENOMEM;
  }
  while (!bad && ks_rread_error(r) == 0 && ks_rread_next(r, &op))
    bad = apply(rp, &fm, &op) != KS_OK;
  fmaps_free(&fm);
  if (bad || ks_rread_error(r) != 0) {
    rp->truncated = 1;
    rp->err = bad ? KS_RERR_CORRUPT : ks_rread_error(r);
    rp->err_errno = ks_rread_errno(r);
    rp->err_path = path;
  }
  return rp->c == NULL ? KS_EINVAL : KS_OK;
}

static void replay_init(ks_replay *rp) {
  memset(rp, 0, sizeof(*rp));
  ks_intern_init(&rp->in, NULL);   /* the sink's default limits */
  ks_flame_init(&rp->fl);
}

/* The end: what flame_write does before it writes (no end time: the last events'). */
static void replay_end(ks_replay *rp) {
  if (rp->c != NULL && !rp->c->stopped)
    ks_flame_finish(&rp->fl, rp->c, 0, 0);
}

int ks_replay_files(ks_replay *rp, const char *const *paths, size_t n, const ks_replay_opts *ro) {
  ks_fopts o;
  ks_rread *r;
  size_t k;
  int rc = KS_OK;

  replay_init(rp);
  for (k = 0; k < n && rp->err == 0; k++) {
    if ((r = ks_rread_open(paths[k], &rp->in, &o)) == NULL)
      return KS_ENOMEM;
    rc = replay_one(rp, r, paths[k], ro, &o);
    ks_rread_close(r);
    if (rc == KS_ENOMEM)
      return rc;
  }
  replay_end(rp);
  return rp->c != NULL ? KS_OK : KS_EINVAL;
}

int ks_replay_mem(ks_replay *rp, const void *data, size_t n, const ks_replay_opts *ro) {
  ks_fopts o;
  ks_rread *r;
  int rc;

  replay_init(rp);
  if ((r = ks_rread_open_mem(data, n, &rp->in, &o)) == NULL)
    return KS_ENOMEM;
  rc = replay_one(rp, r, "memory", ro, &o);
  ks_rread_close(r);
  replay_end(rp);
  return rc == KS_ENOMEM ? rc : rp->c != NULL ? KS_OK : KS_EINVAL;
}

void ks_replay_free(ks_replay *rp) {
  ks_flame_free(&rp->fl);
  ks_intern_free(&rp->in);
  memset(rp, 0, sizeof(*rp));
}
