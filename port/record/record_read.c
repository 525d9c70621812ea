/* record_read.c: a recorded capture's file read back, op by op (ks_record.h).
 *
 * The header is read and checked first (magic, version, options in their
 * bounds); then the zstd frames are decompressed into a window that always
 * holds a whole op when the file does (an op is at most a few KiB), and each
 * op is decoded with every length checked against what is there. Whatever a
 * file holds, the reader gives the ops up to the first fault and says why it
 * stopped: truncated (the file ended before its trailer), corrupt (a zstd
 * error, an op that does not decode). Ids stay the file's own: replay.c maps
 * them. Built with KS_NO_RECORD, every file is not_supported.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "ks_record.h"

#ifndef KS_NO_RECORD
#include <zstd.h>
#endif

#define IN_CAP (64 * 1024)
#define OUT_CAP (256 * 1024)
#define OP_WINDOW (16 * 1024)   /* bytes kept ahead of an op: more than the longest */

struct ks_rread {
  int fd;                      /* -1: reading from memory */
  const unsigned char *mem;
  size_t mem_n, mem_off;
  int err, eno;
  int drained;                 /* no more input, and the decompressor emptied */
  int mid_frame;               /* the last frame was not complete */
  int done;                    /* the trailer was read */
#ifndef KS_NO_RECORD
  ZSTD_DStream *z;
  ZSTD_inBuffer zin;
#endif
  unsigned char *in, *out;
  size_t out_n, pos;
  uint32_t last_pid;
  int64_t last_ts;
};

const char *ks_rread_error_name(int err) {
  static const char *const names[] = {"none", "truncated", "bad_magic", "bad_version",
                                      "bad_header", "corrupt", "open_failed",
                                      "not_supported"};

  return err >= 0 && err <= KS_RERR_UNSUPPORTED ? names[err] : "corrupt";
}

int ks_rread_error(const ks_rread *r) {
  return r->err;
}

int ks_rread_errno(const ks_rread *r) {
  return r->eno;
}

/* Up to n bytes of the file's input: how many (0 at its end, -1 on an error). */
static ssize_t input(ks_rread *r, unsigned char *p, size_t n) {
  ssize_t k;

  if (r->fd < 0) {
    k = (ssize_t)(r->mem_n - r->mem_off < n ? r->mem_n - r->mem_off : n);
    memcpy(p, r->mem + r->mem_off, (size_t)k);
    r->mem_off += (size_t)k;
    return k;
  }
  do
    k = read(r->fd, p, n);
  while (k < 0 && errno == EINTR);
  if (k < 0) {
    r->eno = errno;
    r->err = KS_RERR_OPEN;
  }
  return k;
}

/* Exactly n bytes, or an error (truncated when the input ended). */
static int input_all(ks_rread *r, unsigned char *p, size_t n) {
  ssize_t k;

  while (n > 0) {
    if ((k = input(r, p, n)) <= 0) {
      if (k == 0)
        r->err = KS_RERR_TRUNCATED;
      return KS_EINVAL;
    }
    p += k;
    n -= (size_t)k;
  }
  return KS_OK;
}

/* A cursor over bytes: every read checked; bad set past the end. */
typedef struct cur {
  const unsigned char *p;
  size_t i, n;
  int bad;
} cur;

static uint64_t get_varint(cur *c) {
  uint64_t v = 0;
  unsigned shift = 0;

  while (c->i < c->n && shift < 64) {
    unsigned char b = c->p[c->i++];
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return v;
    shift += 7;
  }
  c->bad = 1;
  return 0;
}

static unsigned get_byte(cur *c) {
  if (c->i >= c->n) {
    c->bad = 1;
    return 0;
  }
  return c->p[c->i++];
}

static const char *get_text(cur *c, size_t *n) {
  uint64_t len = get_varint(c);
  const char *s = (const char *)c->p + c->i;

  if (c->bad || len > KS_REC_NAME_MAX || len > c->n - c->i) {
    c->bad = 1;
    *n = 0;
    return "";
  }
  c->i += (size_t)len;
  *n = (size_t)len;
  return s;
}

static uint32_t get_u32(cur *c, uint64_t max) {
  uint64_t v = get_varint(c);

  if (v > max)
    c->bad = 1;
  return (uint32_t)v;
}

/* An MFA of the header, interned. */
static int header_mfa(cur *c, ks_intern *in, uint32_t *id) {
  ks_atom m = {0}, f = {0};
  size_t n;
  uint32_t arity;

  m.s = (const unsigned char *)get_text(c, &n);
  m.n = n;
  m.utf8 = 1;
  f.s = (const unsigned char *)get_text(c, &n);
  f.n = n;
  f.utf8 = 1;
  arity = get_u32(c, 255);
  if (c->bad || m.n > 255 * 4 || f.n > 255 * 4)
    return KS_EINVAL;
  return ks_intern_mfa(in, &m, &f, arity, id) == KS_OK ? KS_OK : KS_EINVAL;
}

/* One key of the header's options (record_keys.c), in its row's bounds. */
static int header_key(cur *c, unsigned id, ks_intern *in, ks_fopts *o) {
  ks_record_key k;
  uint32_t mfa;
  uint64_t v;

  if (ks_record_key_of(id, &k) != KS_OK)
    return KS_EINVAL;
  if (ks_record_key_is_mfa(&k)) {
    if (header_mfa(c, in, &mfa) != KS_OK)
      return KS_EINVAL;
    ks_option_store(o, k.field, mfa);
    return KS_OK;
  }
  v = get_varint(c);
  return c->bad ? KS_EINVAL : ks_record_key_set(&k, o, v);
}

static int read_header(ks_rread *r, ks_intern *in, ks_fopts *o) {
  unsigned char h[20], opts[KS_REC_HEADER_MAX];
  uint32_t version, len;
  cur c;

  if (input_all(r, h, 8) != KS_OK || memcmp(h, KS_REC_MAGIC, 8) != 0) {
    r->err = r->err == KS_RERR_OPEN ? r->err : KS_RERR_MAGIC;
    return KS_EINVAL;
  }
  if (input_all(r, h + 8, 12) != KS_OK)
    return KS_EINVAL;
  version = ks_record_get_u32le(h + 8);
  len = ks_record_get_u32le(h + 16);   /* h + 12: the segment, a reader's of no use */
  if (version != KS_REC_VERSION) {
    r->err = KS_RERR_VERSION;
    return KS_EINVAL;
  }
  if (len > KS_REC_HEADER_MAX) {
    r->err = KS_RERR_HEADER;
    return KS_EINVAL;
  }
  if (input_all(r, opts, len) != KS_OK)
    return KS_EINVAL;
  c = (cur){opts, 0, len, 0};
  while (c.i < c.n)
    if (header_key(&c, get_u32(&c, UINT32_MAX), in, o) != KS_OK) {
      r->err = KS_RERR_HEADER;
      return KS_EINVAL;
    }
  return KS_OK;
}

static ks_rread *rread_new(int fd, const void *data, size_t n, ks_intern *in, ks_fopts *o) {
  ks_rread *r = calloc(1, sizeof(*r));

  if (r == NULL)
    return NULL;
  r->fd = fd;
  r->mem = data;
  r->mem_n = n;
  r->last_pid = KS_NONE;
  ks_fopts_default(o);
#ifdef KS_NO_RECORD
  (void)read_header;   /* no zstd: every file is not_supported */
  r->err = KS_RERR_UNSUPPORTED;
  return r;
#else
  r->in = malloc(IN_CAP);
  r->out = malloc(OUT_CAP);
  r->z = ZSTD_createDStream();
  if (r->in == NULL || r->out == NULL || r->z == NULL) {
    ks_rread_close(r);
    return NULL;
  }
  ZSTD_initDStream(r->z);
  r->zin = (ZSTD_inBuffer){r->in, 0, 0};
  if (r->err == 0)
    read_header(r, in, o);
  return r;
#endif
}

ks_rread *ks_rread_open(const char *path, ks_intern *in, ks_fopts *o) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ks_rread *r;

  if (fd < 0) {
    ks_fopts_default(o);
    if ((r = calloc(1, sizeof(*r))) == NULL)
      return NULL;
    r->fd = -1;
    r->err = KS_RERR_OPEN;
    r->eno = errno;
    return r;
  }
  if ((r = rread_new(fd, NULL, 0, in, o)) == NULL)
    close(fd);
  return r;
}

ks_rread *ks_rread_open_mem(const void *data, size_t n, ks_intern *in, ks_fopts *o) {
  return rread_new(-1, data, n, in, o);
}

void ks_rread_close(ks_rread *r) {
  if (r == NULL)
    return;
  if (r->fd >= 0)
    close(r->fd);
#ifndef KS_NO_RECORD
  ZSTD_freeDStream(r->z);
#endif
  free(r->in);
  free(r->out);
  free(r);
}

#ifndef KS_NO_RECORD
/* The window holds OP_WINDOW bytes ahead of pos, or all that is left. */
static void refill(ks_rread *r) {
  ZSTD_outBuffer zo;
  ssize_t k;
  size_t ret;

  memmove(r->out, r->out + r->pos, r->out_n - r->pos);
  r->out_n -= r->pos;
  r->pos = 0;
  while (r->out_n < OP_WINDOW && !r->drained && r->err == 0) {
    if (r->zin.pos == r->zin.size) {
      if ((k = input(r, r->in, IN_CAP)) <= 0) {
        r->drained = 1;
        break;
      }
      r->zin = (ZSTD_inBuffer){r->in, (size_t)k, 0};
    }
    zo = (ZSTD_outBuffer){r->out, OUT_CAP, r->out_n};
    ret = ZSTD_decompressStream(r->z, &zo, &r->zin);
    if (ZSTD_isError(ret)) {
      r->err = KS_RERR_CORRUPT;
      break;
    }
    r->out_n = zo.pos;
    r->mid_frame = ret != 0;
  }
}
#endif

/* An event op's fields (kind: op - KS_ROP_EVENT). */
static void get_event(ks_rread *r, cur *c, unsigned kind, ks_rop *op) {
  unsigned has = get_byte(c);
  ks_event *ev = &op->ev;

  memset(ev, 0, sizeof(*ev));
  ev->kind = (uint8_t)kind;
  ev->pid = (has & KS_RHAS_PID) ? get_u32(c, UINT32_MAX - 1) : r->last_pid;
  ev->mfa = (has & KS_RHAS_MFA) ? get_u32(c, UINT32_MAX - 1) : KS_NONE;
  ev->other = (has & KS_RHAS_OTHER) ? get_u32(c, UINT32_MAX - 1) : KS_NONE;
  ev->caller = (has & KS_RHAS_CALLER) ? get_u32(c, UINT32_MAX - 1) : KS_NONE;
  ev->name = (has & KS_RHAS_NAME) ? get_u32(c, UINT32_MAX - 1) : KS_NONE;
  if (has & KS_RHAS_TS) {
    r->last_ts = (int64_t)((uint64_t)r->last_ts + (uint64_t)ks_record_unzigzag(get_varint(c)));
    ev->ts = r->last_ts;
    ev->flags = KS_EVF_TS;
  }
  if (has & KS_RHAS_FLAGS)
    ev->flags = (uint8_t)get_byte(c);
  op->trigger = (has & KS_RHAS_TRIGGER) != 0;
  if (ev->pid == KS_NONE)
    c->bad = 1;
  r->last_pid = ev->pid;
}

/* The op at c: KS_OK, or KS_EINVAL (c->bad, or an op code that is none). */
static int get_op(ks_rread *r, cur *c, ks_rop *op) {
  unsigned code = get_byte(c);

  op->op = code >= KS_ROP_EVENT && code < KS_ROP_EVENT + KS_EV__COUNT ? KS_ROP_EVENT : (int)code;
  switch (op->op) {
  case KS_ROP_DEF_MFA:
    op->mfa.m = get_text(c, &op->text_n);
    op->mfa.f = get_text(c, &op->text2_n);
    op->mfa.arity = get_u32(c, 255);
    break;
  case KS_ROP_DEF_PID:
    op->pidv.node = get_text(c, &op->text_n);
    op->pidv.is_port = 0;
    op->pidv.num = get_u32(c, UINT32_MAX);
    op->pidv.serial = get_u32(c, UINT32_MAX);
    op->pidv.creation = get_u32(c, UINT32_MAX);
    break;
  case KS_ROP_DEF_NAME:
    op->raw = (const unsigned char *)get_text(c, &op->raw_n);
    break;
  case KS_ROP_EVENT:
    get_event(r, c, code - KS_ROP_EVENT, op);
    break;
  case KS_ROP_ADD_PID:
  case KS_ROP_SET_CALL:
    op->pid = get_u32(c, UINT32_MAX - 1);
    op->text = get_text(c, &op->text_n);
    break;
  case KS_ROP_ARM:
    break;
  case KS_ROP_PROC:
    op->pid = get_u32(c, UINT32_MAX - 1);
    op->state = get_byte(c);
    op->text = get_text(c, &op->text_n);
    op->text2 = get_text(c, &op->text2_n);
    break;
  case KS_ROP_FINISH:
    op->has_end = get_byte(c) != 0;
    op->end_ts = ks_record_unzigzag(get_varint(c));
    break;
  case KS_ROP_TRAILER:
    op->events = get_varint(c);
    op->cut_events = get_varint(c);
    break;
  default:
    return KS_EINVAL;
  }
  return c->bad ? KS_EINVAL : KS_OK;
}

int ks_rread_next(ks_rread *r, ks_rop *op) {
#ifdef KS_NO_RECORD
  (void)get_op;
  return 0;
#else
  cur c;

  if (r->err != 0 || r->done)
    return 0;
  if (r->out_n - r->pos < OP_WINDOW)
    refill(r);
  if (r->err != 0)
    return 0;
  if (r->pos == r->out_n) {
    r->err = KS_RERR_TRUNCATED;   /* the input ended, and no trailer */
    return 0;
  }
  c = (cur){r->out, r->pos, r->out_n, 0};
  if (get_op(r, &c, op) != KS_OK) {
    /* An op cut by the end of what could be read: the file was cut there. */
    r->err = c.bad && r->drained && c.i >= c.n ? KS_RERR_TRUNCATED : KS_RERR_CORRUPT;
    return 0;
  }
  r->pos = c.i;
  if (op->op == KS_ROP_TRAILER)
    r->done = 1;
  return 1;
#endif
}
