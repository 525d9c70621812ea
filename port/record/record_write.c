/* record_write.c: a flame capture's event stream recorded to a file (ks_record.h).
 *
 * Ops are encoded into a block (varint ids of the file's own, defined at
 * their first use; ts as a delta from the last event's), and each block is
 * compressed into one zstd frame (zstd's level: the record_level option, 1
 * by default) written with write(2). The file's
 * bound is kept by whole frames: a frame that would pass max_record_bytes
 * (less room for the trailer) is not written, its events are counted as cut,
 * and the file ends with its trailer; then the recording stops (record_rotate
 * 0, and every later event is cut) or the files rotate: Path.K -> Path.K+1
 * (the oldest removed, its events cut), Path -> Path.1, a new Path whose
 * first ops are the capture's processes. A write that fails (ENOSPC, EFBIG,
 * ...) removes every file of the recording and stops it: the capture goes on.
 * Built with KS_NO_RECORD (no libzstd, the musl check), ks_record_open refuses
 * with ENOTSUP and nothing else is called.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "ks_record.h"

#ifdef KS_NO_RECORD

int ks_record_open(ks_record **out, const char *path, const ks_fcap *c, const ks_intern *in,
                ks_record_refusal *why) {
  *out = NULL;
  why->dir.why = KS_DIR_OK;
  why->err = ENOTSUP;
  return KS_EINVAL;
}
void ks_record_event(ks_record *r, const ks_decoded *d, int trigger) {}
void ks_record_add_pid(ks_record *r, uint32_t pid, const char *name, size_t n) {}
void ks_record_set_call(ks_record *r, uint32_t pid, const char *call, size_t n) {}
void ks_record_arm(ks_record *r) {}
void ks_record_finish(ks_record *r, int has_end, int64_t end_ts) {}
void ks_record_forget(ks_record *r, const uint8_t *dead, uint32_t n) {}
void ks_record_close(ks_record *r) {}
void ks_record_free(ks_record *r) {}
void ks_record_get_status(const ks_record *r, ks_record_status *st) {
  memset(st, 0, sizeof(*st));
}

#else

#include <zstd.h>

#define OP_MAX (6 * KS_REC_NAME_MAX + 64)   /* an op and the definitions it needs */
#define TRAILER_ROOM 64                      /* the trailer's frame, at most */
#define FILE_NAME_MAX 256

/* Live ids -> the file's own + 1 (0: not defined in this file). */
typedef struct idmap {
  uint32_t *v;
  uint32_t cap, n;
} idmap;

struct ks_record {
  const ks_fcap *c;
  const ks_intern *in;
  char path[KS_OUT_DIR_MAX];
  char base[FILE_NAME_MAX];
  int dirfd, fd;
  ZSTD_CCtx *z;
  unsigned char *buf, *zbuf;
  size_t n, block, zcap;
  uint64_t block_events;       /* events in buf */
  uint64_t file_bytes, file_events;
  uint64_t kept_bytes;         /* of the rotated files kept */
  uint64_t *rot_bytes, *rot_events;   /* Path.1 .. Path.N: [0] .. [N-1] */
  uint32_t nrot;               /* rotated files there */
  uint32_t segment;
  uint64_t events, cut;
  int err, stopped, closed;
  int rotating;                /* writing a new file's proc ops */
  idmap mfas, pids, names;
  uint32_t last_pid;           /* the file's id of the last event's pid, KS_NONE */
  int64_t last_ts;
  char **files;                /* Path.N .. Path.1, Path (rotate + 1 names) */
  const char **order;          /* the files kept, oldest first */
  uint32_t norder;
};

static void put_byte(ks_record *r, unsigned v) {
  r->buf[r->n++] = (unsigned char)v;
}

static void put_varint(ks_record *r, uint64_t v) {
  r->n += ks_record_put_varint(r->buf + r->n, v);
}

static void put_text(ks_record *r, const char *s, size_t n) {
  if (n > KS_REC_NAME_MAX)
    n = KS_REC_NAME_MAX;
  put_varint(r, n);
  memcpy(r->buf + r->n, s, n);
  r->n += n;
}

static int write_all(int fd, const unsigned char *p, size_t n) {
  ssize_t k;

  while (n > 0) {
    k = write(fd, p, n);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
    } else if (k == 0) {
      return EIO;
    } else if (errno != EINTR) {
      return errno;
    }
  }
  return 0;
}

static const char *file_name(const ks_record *r, uint32_t k) {
  return r->files[k];   /* k 0: Path, k: Path.k */
}

/* The files kept, oldest first. */
static void set_order(ks_record *r) {
  uint32_t k;

  r->norder = 0;
  if (r->err != 0)
    return;
  for (k = r->nrot; k >= 1; k--)
    r->order[r->norder++] = file_name(r, k);
  r->order[r->norder++] = r->path;
}

/* A write failed: the recording stops and every file of it is removed. */
static void fail(ks_record *r, int err) {
  uint32_t k;

  if (r->fd >= 0)
    close(r->fd);
  r->fd = -1;
  unlinkat(r->dirfd, r->base, 0);
  for (k = 1; k <= r->nrot; k++)
    unlinkat(r->dirfd, strrchr(file_name(r, k), '/') + 1, 0);
  r->nrot = 0;
  r->err = err;
  r->stopped = 1;
  r->cut += r->block_events;
  r->block_events = 0;
  r->n = 0;
  set_order(r);
}

static void header_kv(unsigned char *p, size_t *n, unsigned key, uint64_t v) {
  *n += ks_record_put_varint(p + *n, key);
  *n += ks_record_put_varint(p + *n, v);
}

static void header_mfa(unsigned char *p, size_t *n, const ks_intern *in, unsigned key,
                       uint32_t id) {
  ks_mfa_view m;
  size_t k;

  if (id == KS_NONE || ks_intern_mfa_get(in, id, &m) != KS_OK)
    return;
  *n += ks_record_put_varint(p + *n, key);
  k = strlen(m.m);
  *n += ks_record_put_varint(p + *n, k);
  memcpy(p + *n, m.m, k);
  *n += k;
  k = strlen(m.f);
  *n += ks_record_put_varint(p + *n, k);
  memcpy(p + *n, m.f, k);
  *n += k;
  *n += ks_record_put_varint(p + *n, m.arity);
}

/* The header: magic, version, segment, the options that shape the outputs
 * (the table's KS_RECORD_KEY lines, in their order). */
static int write_header(ks_record *r) {
  unsigned char p[20 + KS_REC_HEADER_MAX];
  const ks_fopts *o = &r->c->cp.o;
  ks_record_key k;
  size_t n = 20, i;

  for (i = 0; ks_record_key_at(i, &k) == KS_OK; i++)
    if (ks_record_key_is_mfa(&k))
      header_mfa(p, &n, r->in, k.id, (uint32_t)ks_option_load(o, k.field));
    else
      header_kv(p, &n, k.id, ks_record_key_get(&k, o));
  memcpy(p, KS_REC_MAGIC, 8);
  ks_record_put_u32le(p + 8, KS_REC_VERSION);
  ks_record_put_u32le(p + 12, r->segment);
  ks_record_put_u32le(p + 16, (uint32_t)(n - 20));
  r->file_bytes = n;
  return write_all(r->fd, p, n);
}

static void map_reset(idmap *m) {
  if (m->v != NULL)
    memset(m->v, 0, (size_t)m->cap * sizeof(*m->v));
  m->n = 0;
}

/* The file's id of a live id, KS_NONE when it must be defined (and room for it). */
static uint32_t map_get(idmap *m, uint32_t id) {
  if (id < m->cap && m->v[id] != 0)
    return m->v[id] - 1;
  return KS_NONE;
}

static uint32_t map_add(idmap *m, uint32_t id) {
  if (id >= m->cap && ks_grow(&m->v, &m->cap, id, 1024, sizeof(*m->v)) != KS_OK)
    return KS_NONE;
  m->v[id] = ++m->n;
  return m->n - 1;
}

static uint32_t def_mfa(ks_record *r, uint32_t id) {
  uint32_t k = id == KS_NONE ? KS_NONE : map_get(&r->mfas, id);
  ks_mfa_view m;

  if (k != KS_NONE || id == KS_NONE || ks_intern_mfa_get(r->in, id, &m) != KS_OK ||
      (k = map_add(&r->mfas, id)) == KS_NONE)
    return k;
  put_byte(r, KS_ROP_DEF_MFA);
  put_text(r, m.m, strlen(m.m));
  put_text(r, m.f, strlen(m.f));
  put_varint(r, m.arity);
  return k;
}

static uint32_t def_pid(ks_record *r, uint32_t id) {
  uint32_t k = id == KS_NONE ? KS_NONE : map_get(&r->pids, id);
  ks_pid_view v;

  if (k != KS_NONE || id == KS_NONE || ks_intern_pid_get(r->in, id, &v) != KS_OK ||
      v.is_port || (k = map_add(&r->pids, id)) == KS_NONE)
    return k;
  put_byte(r, KS_ROP_DEF_PID);
  put_text(r, v.node, strlen(v.node));
  put_varint(r, v.num);
  put_varint(r, v.serial);
  put_varint(r, v.creation);
  return k;
}

static uint32_t def_name(ks_record *r, uint32_t id) {
  uint32_t k = id == KS_NONE ? KS_NONE : map_get(&r->names, id);
  ks_slice raw;

  if (k != KS_NONE || id == KS_NONE)
    return k;
  raw = ks_intern_term_get(r->in, id);
  if (raw.p == NULL || raw.n > KS_REC_NAME_MAX || (k = map_add(&r->names, id)) == KS_NONE)
    return KS_NONE;
  put_byte(r, KS_ROP_DEF_NAME);
  put_text(r, (const char *)raw.p, raw.n);
  return k;
}

static void rotate(ks_record *r);

/* The ops so far into a frame, or cut when it would pass the bound. */
static void flush_block(ks_record *r) {
  size_t zn;
  int e;

  if (r->n == 0 || r->stopped)
    return;
  zn = ZSTD_compressCCtx(r->z, r->zbuf, r->zcap, r->buf, r->n, (int)r->c->cp.o.record_level);
  r->n = 0;
  if (ZSTD_isError(zn)) {
    fail(r, ENOMEM);
    return;
  }
  if (r->file_bytes + zn + TRAILER_ROOM > r->c->cp.o.max_record_bytes) {
    r->cut += r->block_events;
    r->block_events = 0;
    rotate(r);
    return;
  }
  if ((e = write_all(r->fd, r->zbuf, zn)) != 0) {
    fail(r, e);
    return;
  }
  r->file_bytes += zn;
  r->file_events += r->block_events;
  r->events += r->block_events;
  r->block_events = 0;
}

/* Room for one more op (its definitions included): the block is written when full. */
static int room(ks_record *r) {
  if (r->stopped)
    return 0;
  if (r->n >= r->block)
    flush_block(r);
  return !r->stopped;
}

/* The trailer in a frame of its own, and the file closed. */
static int end_file(ks_record *r) {
  unsigned char ops[32];
  size_t n = 0, zn;
  int e;

  ops[n++] = KS_ROP_TRAILER;
  n += ks_record_put_varint(ops + n, r->file_events);
  n += ks_record_put_varint(ops + n, r->cut);
  zn = ZSTD_compressCCtx(r->z, r->zbuf, r->zcap, ops, n, (int)r->c->cp.o.record_level);
  if (ZSTD_isError(zn))
    return ENOMEM;
  if ((e = write_all(r->fd, r->zbuf, zn)) != 0)
    return e;
  r->file_bytes += zn;
  e = close(r->fd) != 0 ? errno : 0;
  r->fd = -1;
  return e;
}

/* A process already in the capture, at the start of a rotated file. */
static void put_proc(ks_record *r, const ks_fproc *p) {
  uint32_t pid;
  unsigned state = ks_flame_proc_state(p);

  if (!room(r) || (pid = def_pid(r, p->pid)) == KS_NONE)
    return;
  put_byte(r, KS_ROP_PROC);
  put_varint(r, pid);
  put_byte(r, state);
  put_text(r, p->name ? p->name : "", p->name ? strlen(p->name) : 0);
  put_text(r, p->call ? p->call : "", p->call ? strlen(p->call) : 0);
}

/* Path.k -> Path.k+1 from the oldest (Path.N removed and its events cut), Path -> Path.1. */
static int shift_files(ks_record *r) {
  uint32_t k, max = r->c->cp.o.record_rotate;

  if (r->nrot == max) {
    unlinkat(r->dirfd, strrchr(file_name(r, max), '/') + 1, 0);
    r->cut += r->rot_events[max - 1];
    r->events -= r->rot_events[max - 1];   /* events: those in the files kept */
    r->kept_bytes -= r->rot_bytes[max - 1];
    r->nrot--;
  }
  for (k = r->nrot; k >= 1; k--) {
    if (renameat(r->dirfd, strrchr(file_name(r, k), '/') + 1, r->dirfd,
                 strrchr(file_name(r, k + 1), '/') + 1) != 0)
      return errno;
    r->rot_bytes[k] = r->rot_bytes[k - 1];
    r->rot_events[k] = r->rot_events[k - 1];
  }
  if (renameat(r->dirfd, r->base, r->dirfd, strrchr(file_name(r, 1), '/') + 1) != 0)
    return errno;
  r->rot_bytes[0] = r->file_bytes;
  r->rot_events[0] = r->file_events;
  r->kept_bytes += r->file_bytes;
  r->nrot++;
  return 0;
}

/* The file is past its bound: it ends, and the recording stops or goes on in a new one. */
static void rotate(ks_record *r) {
  uint32_t k;
  int e;

  if ((e = end_file(r)) != 0) {
    fail(r, e);
    return;
  }
  /* A new file that cannot even hold the capture's processes stops the recording. */
  if (r->c->cp.o.record_rotate == 0 || r->rotating || r->segment == UINT32_MAX) {
    r->stopped = 1;
    set_order(r);
    return;
  }
  if ((e = shift_files(r)) != 0) {
    fail(r, e);
    return;
  }
  r->fd = openat(r->dirfd, r->base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (r->fd < 0) {
    fail(r, errno);
    return;
  }
  r->segment++;
  map_reset(&r->mfas);
  map_reset(&r->pids);
  map_reset(&r->names);
  r->last_pid = KS_NONE;
  r->last_ts = 0;
  r->file_events = 0;
  set_order(r);
  if ((e = write_header(r)) != 0) {
    fail(r, e);
    return;
  }
  r->rotating = 1;
  for (k = 0; k < r->c->cp.nprocs && !r->stopped; k++)
    put_proc(r, &r->c->cp.procs[k]);
  r->rotating = 0;
}

static int alloc_files(ks_record *r, const char *path) {
  uint32_t k, n = r->c->cp.o.record_rotate + 1;
  size_t len = strlen(path) + 12;

  r->files = calloc(n, sizeof(*r->files));
  r->order = calloc(n, sizeof(*r->order));
  r->rot_bytes = calloc(n, sizeof(*r->rot_bytes));
  r->rot_events = calloc(n, sizeof(*r->rot_events));
  if (r->files == NULL || r->order == NULL || r->rot_bytes == NULL || r->rot_events == NULL)
    return KS_ENOMEM;
  for (k = 0; k < n; k++) {
    if ((r->files[k] = malloc(len)) == NULL)
      return KS_ENOMEM;
    if (k == 0)
      snprintf(r->files[k], len, "%s", path);
    else
      snprintf(r->files[k], len, "%s.%u", path, k);
  }
  return KS_OK;
}

static int alloc_rec(ks_record *r, const char *path) {
  uint64_t block = r->c->cp.o.max_record_bytes / 8;

  r->block = block < 1024 ? 1024 : block > KS_REC_BLOCK ? KS_REC_BLOCK : (size_t)block;
  r->buf = malloc(r->block + OP_MAX);
  r->zcap = ZSTD_compressBound(r->block + OP_MAX);
  r->zbuf = malloc(r->zcap);
  r->z = ZSTD_createCCtx();
  if (r->buf == NULL || r->zbuf == NULL || r->z == NULL)
    return KS_ENOMEM;
  return alloc_files(r, path);
}

/* The path's directory (opened and checked) and its last component. */
static int open_dir(ks_record *r, const char *path, ks_record_refusal *why) {
  const char *slash = strrchr(path, '/');
  char dir[KS_OUT_DIR_MAX];
  size_t dn;

  if (path[0] != '/' || slash == NULL) {
    why->dir.why = KS_DIR_RELATIVE;
    snprintf(why->dir.path, sizeof(why->dir.path), "%s", path);
    return KS_EINVAL;
  }
  dn = slash == path ? 1 : (size_t)(slash - path);
  if (strlen(path) + 12 >= KS_OUT_DIR_MAX || strlen(slash + 1) + 6 >= FILE_NAME_MAX) {
    why->err = ENAMETOOLONG;
    return KS_EINVAL;
  }
  if (slash[1] == 0) {
    why->err = EISDIR;
    return KS_EINVAL;
  }
  memcpy(dir, path, dn);
  dir[dn] = 0;
  snprintf(r->base, sizeof(r->base), "%s", slash + 1);
  snprintf(r->path, sizeof(r->path), "%s", path);
  if ((r->dirfd = ks_out_dir_open(dir, 0, &why->dir)) < 0) {
    why->err = why->dir.why == KS_DIR_ERRNO ? why->dir.err : 0;
    return KS_EINVAL;
  }
  return KS_OK;
}

int ks_record_open(ks_record **out, const char *path, const ks_fcap *c, const ks_intern *in,
                ks_record_refusal *why) {
  ks_record *r = calloc(1, sizeof(*r));
  int e;

  memset(why, 0, sizeof(*why));
  *out = NULL;
  if (r == NULL) {
    why->err = ENOMEM;
    return KS_EINVAL;
  }
  r->c = c;
  r->in = in;
  r->fd = r->dirfd = -1;
  r->last_pid = KS_NONE;
  if (open_dir(r, path, why) != KS_OK) {
    ks_record_free(r);
    return KS_EINVAL;
  }
  r->fd = openat(r->dirfd, r->base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (r->fd < 0) {
    why->err = errno;
    r->closed = 1;
    ks_record_free(r);
    return KS_EINVAL;
  }
  e = alloc_rec(r, path) != KS_OK ? ENOMEM : write_header(r);
  if (e != 0) {
    fail(r, e);
    why->err = e;
    r->closed = 1;
    ks_record_free(r);
    return KS_EINVAL;
  }
  set_order(r);
  *out = r;
  return KS_OK;
}

void ks_record_event(ks_record *r, const ks_decoded *d, int trigger) {
  const ks_event *ev = &d->ev;
  uint32_t pid, mfa, other, caller, name;
  unsigned has, fl;

  if (!room(r) || (pid = def_pid(r, ev->pid)) == KS_NONE) {
    r->cut += r->err == 0;
    return;
  }
  mfa = def_mfa(r, ev->mfa);
  other = def_pid(r, ev->other);
  caller = def_mfa(r, ev->caller);
  name = def_name(r, ev->name);
  fl = (ev->flags & KS_EVF_TS) ? KS_EVF_TS : 0;
  has = (pid != r->last_pid ? KS_RHAS_PID : 0) | (mfa != KS_NONE ? KS_RHAS_MFA : 0) |
        (other != KS_NONE ? KS_RHAS_OTHER : 0) | (caller != KS_NONE ? KS_RHAS_CALLER : 0) |
        (name != KS_NONE ? KS_RHAS_NAME : 0) | (fl ? KS_RHAS_TS : 0) |
        (ev->flags != fl ? KS_RHAS_FLAGS : 0) | (trigger ? KS_RHAS_TRIGGER : 0);
  put_byte(r, KS_ROP_EVENT + ev->kind);
  put_byte(r, has);
  if (has & KS_RHAS_PID)
    put_varint(r, pid);
  if (has & KS_RHAS_MFA)
    put_varint(r, mfa);
  if (has & KS_RHAS_OTHER)
    put_varint(r, other);
  if (has & KS_RHAS_CALLER)
    put_varint(r, caller);
  if (has & KS_RHAS_NAME)
    put_varint(r, name);
  if (has & KS_RHAS_TS) {
    put_varint(r, ks_record_zigzag((int64_t)((uint64_t)ev->ts - (uint64_t)r->last_ts)));
    r->last_ts = ev->ts;
  }
  if (has & KS_RHAS_FLAGS)
    put_byte(r, ev->flags);
  r->last_pid = pid;
  r->block_events++;
}

/* add_pid and set_call: a pid and a text. */
static void pid_text(ks_record *r, int op, uint32_t pid, const char *s, size_t n) {
  uint32_t k;

  if (!room(r) || (k = def_pid(r, pid)) == KS_NONE)
    return;
  put_byte(r, (unsigned)op);
  put_varint(r, k);
  put_text(r, s != NULL ? s : "", s != NULL ? n : 0);
}

void ks_record_add_pid(ks_record *r, uint32_t pid, const char *name, size_t n) {
  pid_text(r, KS_ROP_ADD_PID, pid, name, n);
}

void ks_record_set_call(ks_record *r, uint32_t pid, const char *call, size_t n) {
  pid_text(r, KS_ROP_SET_CALL, pid, call, n);
}

void ks_record_arm(ks_record *r) {
  if (room(r))
    put_byte(r, KS_ROP_ARM);
}

void ks_record_finish(ks_record *r, int has_end, int64_t end_ts) {
  if (!room(r))
    return;
  put_byte(r, KS_ROP_FINISH);
  put_byte(r, has_end ? 1 : 0);
  put_varint(r, ks_record_zigzag(has_end ? end_ts : 0));
}

void ks_record_forget(ks_record *r, const uint8_t *dead, uint32_t n) {
  uint32_t id;

  for (id = 0; id < n && id < r->pids.cap; id++)
    if (dead[id])
      r->pids.v[id] = 0;
}

void ks_record_close(ks_record *r) {
  int e;

  if (r->closed)
    return;
  r->closed = 1;
  flush_block(r);
  if (r->stopped)
    return;
  if ((e = end_file(r)) != 0)
    fail(r, e);
  set_order(r);
}

void ks_record_free(ks_record *r) {
  uint32_t k;

  if (r == NULL)
    return;
  if (r->z != NULL)
    ks_record_close(r);
  if (r->fd >= 0)
    close(r->fd);
  if (r->dirfd >= 0)
    close(r->dirfd);
  for (k = 0; r->files != NULL && k <= r->c->cp.o.record_rotate; k++)
    free(r->files[k]);
  free(r->files);
  free(r->order);
  free(r->rot_bytes);
  free(r->rot_events);
  free(r->mfas.v);
  free(r->pids.v);
  free(r->names.v);
  free(r->buf);
  free(r->zbuf);
  ZSTD_freeCCtx(r->z);
  free(r);
}

void ks_record_get_status(const ks_record *r, ks_record_status *st) {
  st->path = r->path;
  st->files = r->order;
  st->nfiles = r->norder;
  st->bytes = r->err ? 0 : r->kept_bytes + r->file_bytes;
  st->events = r->events;
  st->cut_events = r->cut;
  st->err = r->err;
}

#endif
