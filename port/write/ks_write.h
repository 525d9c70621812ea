/* ks_write.h: the files of a call-path graph (doc/flame.md, "The formats").
 *
 * Each format's writer takes a finished graph (port/callpath/ks_callpath.h:
 * a flame capture's, a replay's, a view of a full-trace aggregate's), never
 * what built it. The writers share a walk of the tree (walk.c) and the
 * escapes of their formats (escape.c); a write makes every requested file
 * or none (files.c), each through a stream that keeps the errno of a failed
 * write (file.c).
 */
#ifndef KS_WRITE_H
#define KS_WRITE_H

#include <stdio.h>

#include "callpath/ks_callpath.h"
#include "proto/ks_proto.h"

/* Output formats: bit KS_FMT_name for each KS_FORMAT row of include/ks_options.h,
 * in its order. */
enum {
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc)
#define KS_FORMAT(name, ext, writer, all) KS_FMT_INDEX_##name,
#include "ks_options.h"
#undef KS_FORMAT
  KS_NFORMATS
};
enum {
#define KS_FORMAT(name, ext, writer, all) KS_FMT_##name = 1 << KS_FMT_INDEX_##name,
#include "ks_options.h"
#undef KS_FORMAT
#undef KS_OPTION
  /* Base.meta.json (meta.c): no format of its own, written with a folded one. */
  KS_FMT_META = 1 << KS_NFORMATS
};

/* What a writer gets: a finished graph, totals, and its names. */
typedef struct ks_fout {
  const ks_callpath *g;
  const ks_intern *in;
  const uint64_t *total;       /* inclusive ns per node */
  uint64_t grand;              /* total[0] */
  uint64_t processes;          /* the processes the graph was made of (meta.c) */
  int fmts;                    /* the formats written (KS_FMT_*; files.c sets it) */
} ks_fout;

/*
 * walk.c: walks the subtree of `start` depth first, children in first-seen order,
 * laid out on a timeline: a node spans [t, t + total) from the start of the
 * walk, and its self time comes after its children (a merged timeline, like
 * a sampled profile collapsed). Nodes with no time are left out. open()
 * returns 0 to leave out the node's children (close is still called); any
 * negative return stops the walk and is returned.
 */
typedef int (*ks_fvisit_fn)(void *ctx, uint32_t node, uint32_t depth, uint64_t t);
int ks_fwalk(const ks_fout *o, uint32_t start, ks_fvisit_fn open, ks_fvisit_fn close,
             void *ctx);

/* folded.c, perf.c, speedscope.c, svg.c, callgrind.c: each format's writer (its
 * KS_FORMAT row names it). Each returns KS_OK, KS_ENOMEM, or KS_EINVAL as soon
 * as the stream is in error (ferror); why it failed is the stream's to say
 * (ks_wfile). */
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc)
#define KS_FORMAT(name, ext, writer, all) int writer(const ks_fout *o, FILE *f);
#include "ks_options.h"
#undef KS_FORMAT
#undef KS_OPTION
/* meta.c: Base.meta.json, beside the folded files: the capture's identity and
 * correction, which a folded file has no room for. */
int ks_write_meta(const ks_fout *o, FILE *f);

/* escape.c: names for the writers (raw UTF-8, port/callpath/names.c) as each
 * format takes them. out gets at most cap-1 bytes and a NUL. */
size_t ks_write_escape_folded(const char *s, size_t n, char *out, size_t cap);
void ks_write_put_json(FILE *f, const char *s, size_t n);
void ks_write_put_xml(FILE *f, const char *s, size_t n);
void ks_write_put_line(FILE *f, const char *s, size_t n);   /* callgrind: one line, UTF-8 */

/* file.c: a file the writers write to. Its stream keeps the first errno of
 * write(2) or close(2), where it happened (stdio may report it only at fclose). */
typedef struct ks_wfile {
  FILE *f;                     /* the writers' stream; NULL once closed */
  int fd;
  int err;                     /* first errno of a write or the close; 0: none */
} ks_wfile;

/* Creates name in the directory dirfd (O_EXCL, mode 0600) and its stream: KS_OK or
 * -errno (-EEXIST: taken); nothing is left behind on failure. */
int ks_wfile_create_at(ks_wfile *w, int dirfd, const char *name);
/* Flushes and closes: KS_OK when every byte reached the file, else -errno (the first
 * that write(2) or close(2) gave; -EIO if stdio failed with none). */
int ks_wfile_close(ks_wfile *w);

/* files.c: where the files go: Dir/Base.ext for each format bit (Base-1, ...
 * when taken), and the reply of a write. */
typedef struct ks_fdest {
  char dir[4096], base[1024];
  int fmts;
} ks_fdest;

/* A format's bit (KS_FMT_*), 0 for none; NULL: every format's. */
int ks_write_format_bit(const char *atom);
/* A format's name (its atom) from its bit; "" for none. */
const char *ks_write_format_name(int bit);
/* Dir (binary), Base (binary), [Format] at *idx: KS_OK, or KS_EINVAL (no format
 * named: KS_EINVAL too, unless may_be_empty). */
int ks_write_decode_dest(const char *b, int *idx, ks_fdest *d, int may_be_empty);
/* Writes the files and encodes {ok, [Path], Info} or {error, Reason} into x;
 * info() adds Info's first keys to m (total_us and write_us follow). [Path]
 * has one path per format asked, in the KS_FORMAT order; Base.meta.json,
 * written when folded or folded_calls is asked, is not in it. */
int ks_write_reply(const ks_fout *o, const ks_fdest *d, ei_x_buff *x,
                   void (*info)(ks_map *m, const void *ctx), const void *ctx);
/* The directory made and checked as ks_write_reply will (port/core/out_dir.c):
 * `ok', or the refusal ks_write_reply would give, into x. */
int ks_write_dir_reply(const char *dir, ei_x_buff *x);

#endif
