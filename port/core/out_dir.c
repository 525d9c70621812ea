/* out_dir.c: the directory a capture's files go into, created private and checked
 * (port/core/ks_out_dir.h says what is refused and why).
 *
 * The path is walked from / with openat(O_NOFOLLOW | O_DIRECTORY), one
 * component at a time, so each check is made on the directory that is then
 * used, never on a name that could be swapped in between. A symlink above the
 * directory (root's or ours) is opened through, by the kernel (so /proc/PID/root
 * leads into that process's mount namespace), and the directory it leads to is
 * checked like the others.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ks.h"
#include "ks_out_dir.h"

#define NAME_LEN 255

static int refuse(ks_out_dir *r, int why, int err) {
  r->why = why;
  r->err = err;
  return -1;
}

/* r->path gets "/comp" appended (cut at the buffer's end: it is only shown). */
static void shown_add(ks_out_dir *r, const char *comp) {
  size_t n = strlen(r->path);

  snprintf(r->path + n, sizeof(r->path) - n, "%s%s", n > 1 ? "/" : "", comp);
}

/* Others may write: the others' bit, or the group's when the group is not ours. */
static int writable_by_others(const struct stat *st) {
  return (st->st_mode & S_IWOTH) != 0 || ((st->st_mode & S_IWGRP) != 0 && st->st_gid != getegid());
}

/* A directory on the way (final: the one the files go into) as the header says. */
static int check(ks_out_dir *r, int fd, int final) {
  struct stat st;
  uid_t me = geteuid();

  if (fstat(fd, &st) != 0)
    return refuse(r, KS_DIR_ERRNO, errno);
  if (st.st_uid != me && (final || st.st_uid != 0)) {
    r->uid = st.st_uid;
    return refuse(r, KS_DIR_OWNER, 0);
  }
  if (writable_by_others(&st) && !(st.st_mode & S_ISVTX)) {
    r->mode = st.st_mode & 07777;
    return refuse(r, KS_DIR_WRITABLE, 0);
  }
  return KS_OK;
}

/* The next component of *rest ("." skipped) into comp; 0 when none is left. */
static int next_component(const char **rest, char *comp, int *too_long) {
  const char *p = *rest;
  size_t n;

  for (;;) {
    while (*p == '/')
      p++;
    if (*p == 0) {
      *rest = p;
      return 0;
    }
    n = strcspn(p, "/");
    if (!(n == 1 && p[0] == '.'))
      break;
    p += n;
  }
  *too_long = n > NAME_LEN;
  if (!*too_long) {
    memcpy(comp, p, n);
    comp[n] = 0;
  }
  *rest = p + n;
  return 1;
}

static int more_components(const char *rest) {
  char comp[NAME_LEN + 1];
  int too_long;

  return next_component(&rest, comp, &too_long);
}

/* comp, a symlink above the directory, root's or ours: the directory it leads to,
 * opened by the kernel's own resolution (a /proc/PID/root link included), or -1
 * with r said. */
static int follow(ks_out_dir *r, int fd, const char *comp, const struct stat *lst) {
  int next;

  shown_add(r, comp);
  if (lst->st_uid != 0 && lst->st_uid != geteuid()) {
    r->uid = lst->st_uid;
    return refuse(r, KS_DIR_OWNER, 0);
  }
  if ((next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
    return refuse(r, KS_DIR_ERRNO, errno);
  return next;
}

/* The directory comp in fd, made (0700) when missing and create is set, a symlink
 * followed when it is not the last component (final): its descriptor, or -1 with r
 * said. r->path ends with comp either way. */
static int open_component(ks_out_dir *r, int fd, const char *comp, int create, int final) {
  struct stat st;
  int next, err, made = 0;

  while ((next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
    err = errno;
    if (err == ENOENT && create && !made) {
      made = 1;
      if (mkdirat(fd, comp, 0700) == 0 || errno == EEXIST)
        continue;
      err = errno;
    } else if ((err == ELOOP || err == ENOTDIR) &&
               fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(st.st_mode) && !final)
        return follow(r, fd, comp, &st);
      shown_add(r, comp);
      return refuse(r, S_ISLNK(st.st_mode) ? KS_DIR_SYMLINK : KS_DIR_NOT_DIR, 0);
    }
    shown_add(r, comp);
    return refuse(r, KS_DIR_ERRNO, err);
  }
  shown_add(r, comp);
  return next;
}

int ks_out_dir_open(const char *dir, int create, ks_out_dir *r) {
  char comp[NAME_LEN + 1];
  const char *rest = dir;
  int fd, next, too_long, final;

  memset(r, 0, sizeof(*r));
  snprintf(r->path, sizeof(r->path), "%s", dir);
  if (dir[0] != '/')
    return refuse(r, KS_DIR_RELATIVE, 0);
  snprintf(r->path, sizeof(r->path), "/");
  if ((fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
    return refuse(r, KS_DIR_ERRNO, errno);
  if (check(r, fd, !more_components(rest)) != KS_OK)
    goto fail;
  while (next_component(&rest, comp, &too_long)) {
    if (too_long) {
      refuse(r, KS_DIR_ERRNO, ENAMETOOLONG);
      goto fail;
    }
    final = !more_components(rest);
    if ((next = open_component(r, fd, comp, create, final)) < 0)
      goto fail;
    close(fd);
    fd = next;
    if (check(r, fd, final) != KS_OK)
      goto fail;
  }
  snprintf(r->path, sizeof(r->path), "%s", dir);
  return fd;

fail:
  close(fd);
  return -1;
}
