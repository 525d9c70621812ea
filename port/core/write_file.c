/* write_file.c: the files a capture's writers write to, and the errno of a failed write.
 *
 * A file is created with O_EXCL (never over anything, never through a symlink),
 * mode 0600 (only its owner reads a profile), in a directory the caller opened
 * and checked (out_dir.c), and written through a stdio stream of its own
 * (fopencookie) whose writes and close go straight to write(2) and close(2).
 * The first errno either of them gives is kept as it happens: a stdio error
 * may show at any fwrite, at fflush or only at fclose (the bytes still
 * buffered then meet ENOSPC, EDQUOT or EFBIG, or the close of a network file
 * system fails), and errno has been overwritten by the time the writer or
 * fclose returns. After the first error nothing more is written.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "ks_flame.h"

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

int ks_wfile_create_at(ks_wfile *w, int dirfd, const char *name) {
  cookie_io_functions_t io = {NULL, stream_write, NULL, stream_close};
  int err;

  w->f = NULL;
  w->err = 0;
  w->fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (w->fd < 0)
    return -errno;
  if ((w->f = fopencookie(w, "w", io)) == NULL) {
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
  rc = fclose(w->f);
  err = errno;
  w->f = NULL;
  if (w->err != 0)
    return -w->err;
  if (rc != 0)
    return -(err != 0 ? err : EIO);
  return failed ? -EIO : KS_OK;    /* stdio failed before any write(2): no errno kept */
}
