/* files.c: the files a write makes (doc/flame.md): one per format asked, all
 * of them or none.
 *
 * The directory is made (0700) and checked (port/core/ks_out_dir.h: ours, not
 * a symlink, nobody else can write to it) and the files are created in it
 * with openat(), mode 0600, O_EXCL: when Dir/Base.* exists, Base-1, Base-2,
 * ... are tried, so two writes never go over each other (or over anything
 * else). A file that cannot be created or written (a full disk, a quota, ...)
 * is {error, {open_failed | write_failed, Path, Errno}}, Errno the errno's
 * atom (enospc, edquot, efbig, eacces, ...), and every file of the write is
 * removed. A directory refused is {error, {unsafe_directory, Path, Why}} or
 * {error, {open_failed, Path, Errno}}.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <ei.h>

#include "core/ks_out_dir.h"
#include "ks_write.h"

#define PATH_MAX_LEN 4096
#define NAME_MAX_LEN 256   /* a file name, NAME_MAX + 1 */

/* The formats, their bits (KS_FMT_name, ks_write.h), extensions and
 * writers: the KS_FORMAT rows of include/ks_options.h, then the meta file
 * (meta.c), which no one asks for by name: it goes with a folded file. */

static const struct {
  int bit;
  const char *atom, *ext;
  int (*write)(const ks_fout *, FILE *);
} formats[] = {
#define KS_OPTION(modes, key, type, min, max, def, by, field, doc)
#define KS_FORMAT(name, ext, writer, all) {KS_FMT_##name, #name, ext, writer},
#include "ks_options.h"
#undef KS_FORMAT
#undef KS_OPTION
    {KS_FMT_META, "meta", ".meta.json", ks_write_meta},
};
#define NFILES (sizeof(formats) / sizeof(formats[0]))
#define NFORMATS ((size_t)KS_NFORMATS)   /* the rows a user names */
#define FOLDED (KS_FMT_folded | KS_FMT_folded_calls)

int ks_write_format_bit(const char *atom) {
  size_t f;
  int all = 0;

  for (f = 0; f < NFORMATS; f++) {
    if (atom != NULL && strcmp(atom, formats[f].atom) == 0)
      return formats[f].bit;
    all |= formats[f].bit;
  }
  return atom == NULL ? all : 0;
}

const char *ks_write_format_name(int bit) {
  size_t f;

  for (f = 0; f < NFORMATS; f++)
    if (formats[f].bit == bit)
      return formats[f].atom;
  return "";
}

static int64_t now_us(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Base.ext, or Base-Try.ext after a clash (Prefix.Base, Prefix.Base-Try for an
 * extension that is a prefix), into name; Dir/name into path:
 * KS_OK or -ENAMETOOLONG. */
static int file_path(char *path, char *name, const char *dir, const char *base, int try,
                     size_t f) {
  const char *ext = formats[f].ext;
  size_t n = strlen(ext);
  int k;

  /* An extension that ends in `.' is a prefix (callgrind.out.Base). */
  if (n > 0 && ext[n - 1] == '.')
    k = try == 0 ? snprintf(name, NAME_MAX_LEN, "%s%s", ext, base)
                 : snprintf(name, NAME_MAX_LEN, "%s%s-%d", ext, base, try);
  else if (try == 0)
    k = snprintf(name, NAME_MAX_LEN, "%s%s", base, ext);
  else
    k = snprintf(name, NAME_MAX_LEN, "%s-%d%s", base, try, ext);
  if (k < 0 || k >= NAME_MAX_LEN)
    return -ENAMETOOLONG;
  k = snprintf(path, PATH_MAX_LEN, "%s/%s", dir, name);
  return k < 0 || k >= PATH_MAX_LEN ? -ENAMETOOLONG : KS_OK;
}

/* A write's files: their directory (out_dir.c), names in it and full paths. */
typedef struct fileset {
  int dirfd;
  ks_wfile w[NFILES];
  char names[NFILES][NAME_MAX_LEN];
  char paths[NFILES][PATH_MAX_LEN];
} fileset;

/* Closes whatever is still open and removes every file of the set: nothing is left. */
static void discard_files(int fmts, fileset *fs) {
  size_t f;

  for (f = 0; f < NFILES; f++)
    if (fmts & formats[f].bit) {
      ks_wfile_close(&fs->w[f]);
      unlinkat(fs->dirfd, fs->names[f], 0);
    }
}

/*
 * Creates every requested file under one base name that is free for all of
 * them: KS_OK, or -errno with nothing created and *failed the format whose
 * file could not be (-1 when no path could even be made).
 */
static int open_files(const char *dir, const char *base, int fmts, fileset *fs, int *failed) {
  int try, rc = KS_OK, made;
  size_t f;

  for (try = 0; try < 1000; try++) {
    made = 0;
    *failed = -1;
    for (f = 0; f < NFILES; f++) {
      if (!(fmts & formats[f].bit))
        continue;
      if ((rc = file_path(fs->paths[f], fs->names[f], dir, base, try, f)) != KS_OK)
        break;
      if ((rc = ks_wfile_create_at(&fs->w[f], fs->dirfd, fs->names[f])) != KS_OK) {
        *failed = (int)f;
        break;
      }
      made |= formats[f].bit;
    }
    if (rc == KS_OK)
      return KS_OK;
    discard_files(made, fs);
    if (rc != -EEXIST)
      return rc;
  }
  *failed = -1;
  return -EEXIST;
}

static int encode_path_error(ei_x_buff *x, const char *what, const char *path, int err) {
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error") ||
         ei_x_encode_tuple_header(x, 3) || ei_x_encode_atom(x, what) ||
         ei_x_encode_binary(x, path, (long)strlen(path)) || ks_enc_errno(x, err);
}

int ks_write_decode_dest(const char *b, int *idx, ks_fdest *d, int may_be_empty) {
  char atom[MAXATOMLEN];
  size_t f, len;
  int n, k;

  d->fmts = 0;
  /* A NUL inside either would name another directory or file than asked. */
  if (ks_arg_bin(b, idx, d->dir, sizeof(d->dir) - 1100, &len) != KS_OK ||
      memchr(d->dir, 0, len) != NULL ||
      ks_arg_bin(b, idx, d->base, sizeof(d->base), &len) != KS_OK || len == 0 ||
      memchr(d->base, 0, len) != NULL || strchr(d->base, '/') != NULL ||
      ei_decode_list_header(b, idx, &n) != 0)
    return KS_EINVAL;
  for (k = 0; k < n; k++) {
    if (ei_decode_atom(b, idx, atom) != 0)
      return KS_EINVAL;
    for (f = 0; f < NFORMATS; f++)
      if (strcmp(atom, formats[f].atom) == 0)
        d->fmts |= formats[f].bit;
  }
  if (n > 0 && (ei_decode_list_header(b, idx, &n) != 0 || n != 0))
    return KS_EINVAL;
  return d->fmts != 0 || may_be_empty ? KS_OK : KS_EINVAL;
}

/* One format into its file, closed whatever happens: KS_OK or -errno (the
 * stream's first, else ENOMEM from the writer). */
static int write_one(const ks_fout *o, size_t f, ks_wfile *w) {
  int rc = formats[f].write(o, w->f), closed = ks_wfile_close(w);

  if (closed != KS_OK)
    return closed;
  if (rc == KS_ENOMEM)
    return -ENOMEM;
  return rc < 0 ? -EIO : KS_OK;
}

/* A directory refused (out_dir.c): {error, {open_failed, Path, Errno}} when a system
 * call failed, else {error, {unsafe_directory, Path, Why}}, Why one of relative,
 * symlink, not_directory, {owner, Uid}, {writable, "Mode"} (octal). */
static int encode_dir_refusal(ei_x_buff *x, const ks_out_dir *r) {
  if (r->why == KS_DIR_ERRNO)
    return encode_path_error(x, "open_failed", r->path, r->err);
  return ei_x_encode_tuple_header(x, 2) || ei_x_encode_atom(x, "error") ||
         ei_x_encode_tuple_header(x, 3) || ei_x_encode_atom(x, "unsafe_directory") ||
         ei_x_encode_binary(x, r->path, (long)strlen(r->path)) || ks_enc_dir_why(x, r);
}

int ks_write_reply(const ks_fout *o, const ks_fdest *d, ei_x_buff *x,
                   void (*info)(ks_map *m, const void *ctx), const void *ctx) {
  fileset fs;
  int64_t took[NFILES] = {0}, t0;
  int e = 0, rc = KS_OK, failed = -1, fmts = d->fmts | (d->fmts & FOLDED ? KS_FMT_META : 0);
  ks_out_dir refusal;
  ks_fout with = *o;
  ks_map m, w;
  size_t f;

  if ((fs.dirfd = ks_out_dir_open(d->dir, 1, &refusal)) < 0)
    return encode_dir_refusal(x, &refusal);
  if ((rc = open_files(d->dir, d->base, fmts, &fs, &failed)) != KS_OK) {
    close(fs.dirfd);
    return encode_path_error(x, "open_failed", failed >= 0 ? fs.paths[failed] : d->dir, -rc);
  }
  with.fmts = d->fmts;
  for (f = 0; f < NFILES && failed < 0; f++) {
    if (!(fmts & formats[f].bit))
      continue;
    t0 = now_us();
    if ((rc = write_one(&with, f, &fs.w[f])) != KS_OK)
      failed = (int)f;
    took[f] = now_us() - t0;
  }
  if (failed >= 0) {
    discard_files(fmts, &fs);   /* a retry must not find half a write */
    close(fs.dirfd);
    return encode_path_error(x, "write_failed", fs.paths[failed], -rc);
  }
  close(fs.dirfd);
  e = ei_x_encode_tuple_header(x, 3) || ei_x_encode_atom(x, "ok") ||
      ei_x_encode_list_header(x, __builtin_popcount((unsigned)d->fmts));
  for (f = 0; f < NFORMATS && !e; f++)
    if (d->fmts & formats[f].bit)
      e = ei_x_encode_binary(x, fs.paths[f], (long)strlen(fs.paths[f]));
  e = e || ei_x_encode_empty_list(x);
  ks_map_begin(&m, x);
  info(&m, ctx);
  ks_map_u64(&m, "total_us", (o->grand + 500) / 1000);
  ks_map_key(&m, "write_us");
  ks_map_begin(&w, x);
  for (f = 0; f < NFORMATS; f++)
    if (d->fmts & formats[f].bit)
      ks_map_u64(&w, formats[f].atom, (uint64_t)took[f]);
  return e | ks_map_end(&w) | ks_map_end(&m);
}

int ks_write_dir_reply(const char *dir, ei_x_buff *x) {
  ks_out_dir refusal;
  int fd;

  if ((fd = ks_out_dir_open(dir, 1, &refusal)) < 0)
    return encode_dir_refusal(x, &refusal);
  close(fd);
  return ei_x_encode_atom(x, "ok");
}
