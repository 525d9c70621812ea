/* platform.c: random bits, errno names and pipe sizes on each system (port/core/ks_platform.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "ks_platform.h"

#if KS_RANDOM_GETRANDOM
#include <sys/random.h>
#elif KS_RANDOM_ARC4
#include <stdlib.h>
#endif

int ks_random64(uint64_t *v) {
#if KS_RANDOM_GETRANDOM
  return getrandom(v, sizeof(*v), GRND_NONBLOCK) == (ssize_t)sizeof(*v);
#elif KS_RANDOM_ARC4
  arc4random_buf(v, sizeof(*v));
  return 1;
#else
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC), ok;

  if (fd < 0)
    return 0;
  ok = read(fd, v, sizeof(*v)) == (ssize_t)sizeof(*v);
  close(fd);
  return ok;
#endif
}

/* The errors of open(2), write(2) and close(2) on a file, by name: the same
 * names on every system (strerrorname_np is glibc's alone). */
#define ERRNO_NAME(e, name) {e, name},
static const struct {
  int err;
  const char *name;
} errno_names[] = {
    ERRNO_NAME(EACCES, "eacces") ERRNO_NAME(EAGAIN, "eagain") ERRNO_NAME(EBADF, "ebadf")
    ERRNO_NAME(EBUSY, "ebusy") ERRNO_NAME(EEXIST, "eexist") ERRNO_NAME(EFAULT, "efault")
    ERRNO_NAME(EFBIG, "efbig") ERRNO_NAME(EINTR, "eintr") ERRNO_NAME(EINVAL, "einval")
    ERRNO_NAME(EIO, "eio") ERRNO_NAME(EISDIR, "eisdir") ERRNO_NAME(ELOOP, "eloop")
    ERRNO_NAME(EMFILE, "emfile") ERRNO_NAME(ENAMETOOLONG, "enametoolong")
    ERRNO_NAME(ENFILE, "enfile") ERRNO_NAME(ENODEV, "enodev") ERRNO_NAME(ENOENT, "enoent")
    ERRNO_NAME(ENOMEM, "enomem") ERRNO_NAME(ENOSPC, "enospc") ERRNO_NAME(ENOTDIR, "enotdir")
    ERRNO_NAME(ENXIO, "enxio") ERRNO_NAME(EPERM, "eperm") ERRNO_NAME(EPIPE, "epipe")
    ERRNO_NAME(EROFS, "erofs") ERRNO_NAME(ESPIPE, "espipe") ERRNO_NAME(ETXTBSY, "etxtbsy")
    ERRNO_NAME(EXDEV, "exdev") ERRNO_NAME(EMLINK, "emlink") ERRNO_NAME(ENOTEMPTY, "enotempty")
    ERRNO_NAME(EOVERFLOW, "eoverflow") ERRNO_NAME(ENOSYS, "enosys")
#ifdef EDQUOT
    ERRNO_NAME(EDQUOT, "edquot")
#endif
#ifdef ESTALE
    ERRNO_NAME(ESTALE, "estale")
#endif
#ifdef ENOTSUP
    ERRNO_NAME(ENOTSUP, "enotsup")
#endif
#ifdef ENOLCK
    ERRNO_NAME(ENOLCK, "enolck")
#endif
#ifdef ENOBUFS
    ERRNO_NAME(ENOBUFS, "enobufs")
#endif
#ifdef ECONNRESET
    ERRNO_NAME(ECONNRESET, "econnreset")
#endif
#ifdef ETIMEDOUT
    ERRNO_NAME(ETIMEDOUT, "etimedout")
#endif
};
#undef ERRNO_NAME

const char *ks_errno_name(int err) {
  size_t k;

  for (k = 0; k < sizeof(errno_names) / sizeof(errno_names[0]); k++)
    if (errno_names[k].err == err)
      return errno_names[k].name;
  return NULL;
}

size_t ks_pipe_enlarge(int fd, size_t want) {
#if KS_PIPE_SETSIZE && defined(F_SETPIPE_SZ) && defined(F_GETPIPE_SZ)
  int got;

  if (want == 0) {
    FILE *f = fopen("/proc/sys/fs/pipe-max-size", "r");
    unsigned long v = 1u << 20;
    if (f != NULL) {
      if (fscanf(f, "%lu", &v) != 1)
        v = 1u << 20;
      fclose(f);
    }
    want = v;
  }
  got = fcntl(fd, F_SETPIPE_SZ, (int)want);
  if (got < 0)
    got = fcntl(fd, F_GETPIPE_SZ);
  return got < 0 ? 0 : (size_t)got;
#else
  (void)fd;
  (void)want;
  return 0;
#endif
}
