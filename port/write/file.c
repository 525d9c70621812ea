/* file.c: the files the writers write to, and the errno of a failed write.
 *
 * A file is created with O_EXCL (never over anything, never through a symlink),
 * mode 0600 (only its owner reads a profile), in a directory the caller opened
 * and checked (out_dir.c), and written through a stdio stream of its own
 * (fopencookie on Linux, funopen on macOS and the BSDs: port/core/ks_platform.h)
 * whose writes and close go straight to write(2) and close(2). The first
 * errno either of them gives is kept as it happens: a stdio error may show at
 * any fwrite, at fflush or only at fclose (the bytes still buffered then meet
 * ENOSPC, EDQUOT or EFBIG, or the close of a network file system fails), and
 * errno has been overwritten by the time the writer or fclose returns. After
 * the first error nothing more is written. Elsewhere the stream is fdopen's,
 * and the errno kept is the one stdio left when the stream was found in error
 * (the writers stop at the first ferror, so it is most often the write's).
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "ks_write.h"
#include "core/ks_platform.h"

static ssize_t stream_write(void *cookie, const char *buf, size_t n) {
  ks_wfile *w = cookie;
  size_t done = 0;
  ssize_t k;

  while (done < n && w->err == 0) {
    k = write(w->fd, buf + done, n - done);
    if (k > 0)
      done += (size_t)k;
    else if (k == 0)
      w->err = EIO;              /* a regular file never takes nothing */
    else if (errno != EINTR)
      w->err = errno;
  }
  return (ssize_t)done;          /* short: stdio marks the stream in error */
}

static int stream_close(void *cookie) {
  ks_wfile *w = cookie;

  if (close(w->fd) != 0 && errno != EINTR && w->err == 0)
    w->err = errno;              /* EINTR: Linux has closed it all the same */
  w->fd = -1;
  return w->err == 0 ? 0 : -1;
}

#if KS_STREAM_FUNOPEN
static int funopen_write(void *cookie, const char *buf, int n) {
  ssize_t k = stream_write(cookie, buf, (size_t)n);

  return k > 0 ? (int)k : -1;
}
#endif

/* The stream of w->fd, its writes and close through the functions above. */
static FILE *open_stream(ks_wfile *w) {
#if KS_STREAM_COOKIE
  cookie_io_functions_t io = {NULL, stream_write, NULL, stream_close};

  return fopencookie(w, "w", io);
#elif KS_STREAM_FUNOPEN
  return funopen(w, NULL, funopen_write, NULL, stream_close);
#else
  (void)stream_write;
  (void)stream_close;
  return fdopen(w->fd, "w");
#endif
}

int ks_wfile_create_at(ks_wfile *w, int dirfd, const char *name) {
  int err;

  w->f = NULL;
  w->err = 0;
  w->fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (w->fd < 0)
    return -errno;
  if ((w->f = open_stream(w)) == NULL) {
    err = errno != 0 ? errno : ENOMEM;
    close(w->fd);
    unlinkat(dirfd, name, 0);
    w->fd = -1;
    return -err;
  }
  return KS_OK;
}


int ks_wfile_close(ks_wfile *w) {
  int failed, rc, err;

  if (w->f == NULL)
    return KS_OK;
  failed = ferror(w->f);
#if KS_STREAM_FDOPEN
  /* stdio wrote with write(2) itself: its errno, read before fclose. */
  if (failed && w->err == 0)
    w->err = errno != 0 ? errno : EIO;
#endif
  errno = 0;
  rc = fclose(w->f);
  err = errno;
  w->f = NULL;
#if KS_STREAM_FDOPEN
  w->fd = -1;                    /* fclose closed it */
#endif
  if (w->err != 0)
    return -w->err;
  if (rc != 0)
    return -(err != 0 ? err : EIO);
  return failed ? -EIO : KS_OK;    /* stdio failed before any write(2): no errno kept */
}
